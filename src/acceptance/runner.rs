//! `accept`: writes the prompts, runs the engine, judges every output, keeps the evidence and
//! leaves a summary in the termination message.

use std::path::Path;
use std::time::Duration;

use super::checker::{failure_summary, tally, Verdict};
use super::engine::{self, EngineExit};
use super::engine_io::{self, ParsedOutputs};
use super::evidence::{self, EvidenceTarget};
use super::manifest::{
    build_manifest, AcceptanceResult, AcceptanceSummary, EngineRecord, RunFacts, RunIdentity,
};
use super::{devices, load_spec, AcceptArgs};

/// Output line errors named in a reason before the rest are counted.
const LINE_ERRORS_IN_REASON: usize = 3;

/// Exit codes of `accept`.
pub mod exit {
    /// Every prompt passed.
    pub const PASSED: i32 = 0;
    /// The engine failed or a prompt failed; evidence kept.
    pub const FAILED: i32 = 1;
    /// The runner could not do its job (spec unreadable, no model directory, evidence not written).
    pub const RUNNER_ERROR: i32 = 2;
}

/// Runs the acceptance workload; writes the summary to the termination log and stdout; returns
/// the exit code.
pub async fn run(args: &AcceptArgs) -> i32 {
    let (summary, code) = execute(args).await;
    let message = summary.termination_message();
    println!("{message}");
    if let Err(err) = std::fs::write(&args.termination_log, &message) {
        eprintln!(
            "deepinfer-operator accept: writing {}: {err}",
            args.termination_log.display()
        );
    }
    code
}

async fn execute(args: &AcceptArgs) -> (AcceptanceSummary, i32) {
    let runner_error = |reason: String| {
        let summary = AcceptanceSummary {
            result: AcceptanceResult::Failed,
            prompts: 0,
            passed: 0,
            failed_prompts: Vec::new(),
            omitted_failed_prompts: 0,
            evidence: String::new(),
            reason,
            revision: args.identity.revision.clone(),
        };
        (summary, exit::RUNNER_ERROR)
    };
    let started_at = k8s_openapi::jiff::Timestamp::now().to_string();
    let (spec, compiled) = match load_spec(&args.spec_file) {
        Ok(loaded) => loaded,
        Err(err) => return runner_error(format!("acceptance spec: {err:#}")),
    };
    if !args.model_dir.is_dir() {
        return runner_error(format!(
            "model directory {} does not exist",
            args.model_dir.display()
        ));
    }
    let prompts_file = args.work_dir.join("prompts.jsonl");
    let outputs_file = args.work_dir.join("outputs.jsonl");
    if let Err(err) = prepare_work_dir(&args.work_dir, &prompts_file, &outputs_file, &spec.prompts)
    {
        return runner_error(format!(
            "work directory {}: {err:#}",
            args.work_dir.display()
        ));
    }

    let template: Vec<String> = match &spec.engine {
        Some(engine) => engine.command.clone(),
        None => engine::DEFAULT_COMMAND
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let command = engine::render_command(&template, &args.model_dir, &prompts_file, &outputs_file);
    let devices = devices::inventory().await;
    let timeout = Duration::from_secs(u64::try_from(spec.timeout_seconds).unwrap_or(1).max(1));
    let engine_run = engine::run(&command, &args.work_dir, timeout).await;

    let outputs = std::fs::read(&outputs_file).ok();
    let parsed = engine_io::parse_outputs(outputs.as_deref().unwrap_or_default());
    let verdicts = compiled.judge(&parsed);
    let prompt_ids: Vec<String> = compiled.prompt_ids().map(str::to_string).collect();
    let (result, reason) = overall(
        &engine_run.exit,
        outputs.is_some(),
        &parsed,
        &verdicts,
        prompt_ids.len(),
    );

    let identity = RunIdentity {
        deployment: args.owner_name.clone(),
        revision: args.identity.revision.clone(),
        image: args.identity.image.clone(),
        runtime_commit: args.identity.runtime_commit.clone(),
        template_version: args.identity.template_version,
        checkpoint_revision: args.identity.checkpoint_revision.clone(),
        model_dir: args.model_dir.display().to_string(),
        layout: args.identity.layout.clone(),
        started_at,
    };
    let facts = RunFacts {
        result,
        reason: reason.clone(),
        devices,
        engine: EngineRecord {
            command,
            exit: engine_run.exit.clone(),
            timeout_seconds: timeout.as_secs(),
        },
        timings: engine_run.timings.clone(),
    };
    let manifest = build_manifest(&identity, facts, &prompt_ids, &parsed, &verdicts);
    let evidence = evidence::assemble(
        manifest,
        outputs.as_deref().unwrap_or_default(),
        &verdicts,
        &engine_run.log.to_vec(),
        engine_run.log.dropped,
    );

    let (prompts, passed) = tally(&verdicts, prompt_ids.len());
    let mut summary = AcceptanceSummary {
        result,
        prompts,
        passed,
        failed_prompts: verdicts
            .iter()
            .filter(|v| !v.passed)
            .map(|v| v.id.clone())
            .collect(),
        omitted_failed_prompts: 0,
        evidence: String::new(),
        reason,
        revision: args.identity.revision.clone(),
    };
    match evidence::write(&target(args), &evidence).await {
        Ok(location) => {
            summary.evidence = location;
            let code = if result == AcceptanceResult::Passed {
                exit::PASSED
            } else {
                exit::FAILED
            };
            (summary, code)
        }
        Err(err) => {
            summary.result = AcceptanceResult::Failed;
            summary.reason = format!(
                "writing the evidence failed: {err:#}; the run itself: {}",
                summary.reason
            );
            (summary, exit::RUNNER_ERROR)
        }
    }
}

fn prepare_work_dir(
    dir: &Path,
    prompts_file: &Path,
    outputs_file: &Path,
    prompts: &[crate::api::AcceptancePrompt],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(prompts_file, engine_io::prompts_jsonl(prompts)?)?;
    match std::fs::remove_file(outputs_file) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
        _ => Ok(()),
    }
}

fn target(args: &AcceptArgs) -> EvidenceTarget {
    match (&args.evidence_dir, &args.evidence_configmap) {
        (Some(dir), _) => EvidenceTarget::Dir(dir.clone()),
        (None, name) => EvidenceTarget::ConfigMap {
            name: name.clone().unwrap_or_default(),
            namespace: args.namespace.clone(),
            owner: (
                args.owner_name.clone().unwrap_or_default(),
                args.owner_uid.clone().unwrap_or_default(),
            ),
            revision: args.identity.revision.clone(),
        },
    }
}

/// The run's result and reason: the engine's exit, a missing or malformed outputs file, and every
/// failing verdict. Passed only when all of them are clean.
pub fn overall(
    exit: &EngineExit,
    outputs_present: bool,
    parsed: &ParsedOutputs,
    verdicts: &[Verdict],
    prompt_count: usize,
) -> (AcceptanceResult, String) {
    let mut parts: Vec<String> = exit.failure().into_iter().collect();
    if !outputs_present {
        parts.push("the engine wrote no outputs file".into());
    }
    if !parsed.errors.is_empty() {
        let mut listed: Vec<String> = parsed
            .errors
            .iter()
            .take(LINE_ERRORS_IN_REASON)
            .map(|e| format!("outputs line {}: {}", e.line, e.message))
            .collect();
        if parsed.errors.len() > LINE_ERRORS_IN_REASON {
            listed.push(format!(
                "and {} more malformed output lines",
                parsed.errors.len() - LINE_ERRORS_IN_REASON
            ));
        }
        parts.push(listed.join("; "));
    }
    let failed = verdicts.iter().filter(|v| !v.passed).count();
    if failed > 0 {
        let (_, passed) = tally(verdicts, prompt_count);
        parts.push(format!(
            "{} of {prompt_count} prompts failed: {}",
            prompt_count - passed,
            failure_summary(verdicts)
        ));
    }
    if parts.is_empty() {
        (
            AcceptanceResult::Passed,
            format!("all {prompt_count} prompts passed"),
        )
    } else {
        (AcceptanceResult::Failed, parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acceptance::engine_io::LineError;

    fn verdict(id: &str, passed: bool, reason: &str) -> Verdict {
        Verdict {
            id: id.into(),
            passed,
            reason: reason.into(),
        }
    }

    #[test]
    fn passes_only_when_everything_is_clean() {
        let ok = [verdict("a", true, ""), verdict("b", true, "")];
        let clean = EngineExit::Exited { code: 0 };
        assert_eq!(
            overall(&clean, true, &Default::default(), &ok, 2),
            (AcceptanceResult::Passed, "all 2 prompts passed".into())
        );
        let (r, reason) = overall(
            &EngineExit::Exited { code: 70 },
            true,
            &Default::default(),
            &ok,
            2,
        );
        assert_eq!(
            (r, reason.as_str()),
            (AcceptanceResult::Failed, "engine exited with code 70")
        );
    }

    #[test]
    fn failure_reason_names_exit_file_lines_and_prompts() {
        let parsed = ParsedOutputs {
            errors: vec![LineError {
                line: 2,
                message: "missing field `text`".into(),
            }],
            ..Default::default()
        };
        let verdicts = [
            verdict("a", false, "no output"),
            verdict("b", true, ""),
            verdict("x", false, "unknown id"),
        ];
        let (r, reason) = overall(
            &EngineExit::TimedOut { seconds: 30 },
            false,
            &parsed,
            &verdicts,
            2,
        );
        assert_eq!(r, AcceptanceResult::Failed);
        assert_eq!(
            reason,
            "timed out after 30s; the engine wrote no outputs file; outputs line 2: missing field `text`; 1 of 2 prompts failed: a: no output; x: unknown id"
        );
    }
}
