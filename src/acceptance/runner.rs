//! `accept`: writes the prompts, runs the engine, judges every output, keeps the evidence and
//! leaves a summary in the termination message.

use std::path::Path;
use std::time::Duration;

use super::args::AcceptArgs;
use super::checker::{failure_summary, tally, Verdict};
use super::engine::EngineExit;
use super::engine_io::{self, ParsedOutputs};
use super::evidence::{self, EvidenceTarget};
use super::handoff::{self, EngineReport, EngineSide, Patience};
use super::manifest::{
    build_manifest, AcceptanceResult, AcceptanceSummary, EngineRecord, RunFacts, RunIdentity,
};
use super::spec_file::load_spec;

/// Output line errors named in a reason before the rest are counted.
const LINE_ERRORS_IN_REASON: usize = 3;

/// After the engine side started: how long past the spec's timeout the judge waits for its report.
const ENGINE_REPORT_GRACE: Duration = Duration::from_secs(120);
/// A heartbeat this old means the engine side is gone.
const ENGINE_HEARTBEAT_STALE: Duration = Duration::from_secs(60);

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
            "deepinfer-runner accept: writing {}: {err}",
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
    let (spec, compiled) = match load_spec(&args.spec_file, args.spec_sha256.as_deref()) {
        Ok(loaded) => loaded,
        Err(err) => return runner_error(format!("acceptance spec: {err:#}")),
    };
    let engine_side = engine_side(args, &spec).await;
    let EngineSide {
        report,
        log,
        outputs,
        outputs_unread,
    } = engine_side;
    if let Some(error) = report.error {
        return runner_error(error);
    }
    let parsed = engine_io::parse_outputs(outputs.as_deref().unwrap_or_default());
    let verdicts = compiled.judge(&parsed);
    let prompt_ids: Vec<String> = compiled.prompt_ids().map(str::to_string).collect();
    let outputs_file = match (&outputs, &outputs_unread) {
        (Some(_), _) => OutputsFile::Present,
        (None, Some(why)) => OutputsFile::Unread(why),
        (None, None) => OutputsFile::Missing,
    };
    let (result, reason) = overall(
        &report.exit,
        outputs_file,
        &parsed,
        &verdicts,
        prompt_ids.len(),
    );

    let identity = run_identity(args, &spec, started_at);
    let facts = RunFacts {
        result,
        reason: reason.clone(),
        devices: report.devices,
        engine: EngineRecord {
            // Reported by the runner only when it ran the engine.
            argv: report.env.is_some().then(|| report.command.clone()),
            env: report.env,
            command: report.command,
            exit: report.exit,
            timeout_seconds: report.timeout_seconds,
        },
        timings: report.timings,
        serving: report.serving,
    };
    let manifest = build_manifest(&identity, facts, &prompt_ids, &parsed, &verdicts);
    let evidence = evidence::assemble(
        manifest,
        outputs.as_deref().unwrap_or_default(),
        &verdicts,
        &log,
        report.log_dropped,
    );

    let (prompts, passed) = tally(&verdicts, prompt_ids.len());
    let summary = AcceptanceSummary {
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
    let written = evidence::write(&target(args), &evidence).await;
    conclude(summary, written)
}

/// What the engine side left: the report, log and outputs of the engine run beside the judge
/// (`--engine-dir`), or of the engine the runner starts itself.
async fn engine_side(args: &AcceptArgs, spec: &crate::api::AcceptanceSpec) -> EngineSide {
    if let Some(endpoint) = &args.endpoint {
        return served_side(endpoint, spec, args.load_concurrency).await;
    }
    match &args.engine_dir {
        Some(dir) => {
            let patience = Patience {
                start: Duration::from_secs(args.engine_start_seconds),
                grace: ENGINE_REPORT_GRACE,
                stale: ENGINE_HEARTBEAT_STALE,
            };
            match handoff::wait_for_engine(dir, handoff::timeout_of(spec), patience).await {
                Ok(side) => from_the_engine_side(side),
                Err(reason) => lost_engine(dir, spec, reason),
            }
        }
        None => {
            let (report, log) =
                handoff::run_engine(spec, &args.model_dir, &args.work_dir, &args.serving).await;
            handoff::beside(&args.work_dir, report, log)
        }
    }
}

/// A report the engine's container left: a serving measurement, or an exit saying a serving
/// endpoint was judged, is the judge's own to make, so such a report is not believed.
fn from_the_engine_side(mut side: EngineSide) -> EngineSide {
    if side.report.serving.is_some() || matches!(side.report.exit, EngineExit::Served { .. }) {
        side.report.serving = None;
        side.report.exit = EngineExit::Lost {
            reason: "the engine's container reported a serving endpoint's judgement, which only the judge makes; the report is not believed".into(),
        };
    }
    side
}

/// The judged pass of a serving endpoint as the engine side: its answers are the outputs, its
/// measurement rides in the report.
async fn served_side(
    endpoint: &str,
    spec: &crate::api::AcceptanceSpec,
    load_concurrency: u32,
) -> EngineSide {
    let timeout = handoff::timeout_of(spec);
    let started = std::time::Instant::now();
    let prompts = crate::acceptance::engine_io::prompt_lines(spec);
    let served =
        crate::acceptance::serving::judge_endpoint(endpoint, &prompts, load_concurrency, timeout)
            .await;
    let total_seconds = crate::acceptance::engine::round_ms(started.elapsed().as_secs_f64());
    let mut report = EngineReport {
        command: vec![format!(
            "POST {}{}",
            endpoint.trim_end_matches('/'),
            crate::acceptance::serving::COMPLETIONS_PATH
        )],
        env: None,
        exit: EngineExit::Served {
            endpoint: endpoint.to_owned(),
            refused: Vec::new(),
        },
        timeout_seconds: timeout.as_secs(),
        timings: Default::default(),
        devices: Default::default(),
        log_dropped: 0,
        error: None,
        serving: None,
    };
    match served {
        Ok(served) => {
            report.exit = EngineExit::Served {
                endpoint: endpoint.to_owned(),
                refused: served.refused,
            };
            // The judged pass is the measured interval; loading and warm-up (the wait for the
            // endpoint's health) are the engine's own and not the judge's to split.
            report.timings.measured_seconds =
                served.measurement.passes.first().map(|p| p.wall_seconds);
            report.timings.total_seconds = total_seconds;
            report.serving = Some(served.measurement);
            EngineSide {
                report,
                log: served.log,
                outputs: Some(served.outputs),
                outputs_unread: None,
            }
        }
        Err(reason) => {
            report.exit = EngineExit::Lost { reason };
            report.timings.total_seconds = total_seconds;
            EngineSide {
                report,
                log: Vec::new(),
                outputs: None,
                outputs_unread: None,
            }
        }
    }
}

/// Who ran and what was judged, as the manifest records it.
fn run_identity(
    args: &AcceptArgs,
    spec: &crate::api::AcceptanceSpec,
    started_at: String,
) -> RunIdentity {
    RunIdentity {
        deployment: args.owner_name.clone(),
        revision: args.identity.revision.clone(),
        image: args.identity.image.clone(),
        runtime_commit: args.identity.runtime_commit.clone(),
        template_version: args.identity.template_version,
        checkpoint_revision: args.identity.checkpoint_revision.clone(),
        model_dir: args.model_dir.display().to_string(),
        layout: (&args.identity.layout).into(),
        roles: args.identity.roles.clone(),
        role_images: args.identity.role_images.clone().unwrap_or_default(),
        groups: args.identity.role_groups.clone().unwrap_or_default(),
        model: Some(args.identity.model_name.clone()).filter(|m| !m.is_empty()),
        claim: args.identity.checkpoint_claim.clone(),
        path: args.identity.checkpoint_path.clone(),
        source_key: args.identity.checkpoint_source_key.clone(),
        service_owners: args.identity.service_owners.clone().unwrap_or_default(),
        review: args.identity.review(),
        started_at,
        requested_tokens: spec
            .prompts
            .iter()
            .filter_map(|p| Some((p.id.clone(), p.max_tokens?)))
            .collect(),
        sampling: spec.default_sampling(),
        prompt_sampling: super::manifest::prompt_sampling(spec),
    }
}

/// The summary and exit code once the evidence is written, or a runner error naming why it
/// could not be (with the run's own reason kept).
fn conclude(
    mut summary: AcceptanceSummary,
    written: anyhow::Result<String>,
) -> (AcceptanceSummary, i32) {
    match written {
        Ok(location) => {
            summary.evidence = location;
            let code = if summary.result == AcceptanceResult::Passed {
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

/// What the judge has when the engine side never reported: whatever it left, and the reason.
fn lost_engine(dir: &Path, spec: &crate::api::AcceptanceSpec, reason: String) -> EngineSide {
    let report = EngineReport {
        command: Vec::new(),
        env: None,
        exit: EngineExit::Lost { reason },
        timeout_seconds: handoff::timeout_of(spec).as_secs(),
        timings: Default::default(),
        devices: Default::default(),
        log_dropped: 0,
        error: None,
        serving: None,
    };
    handoff::collect(dir, report)
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

/// What became of the engine's outputs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputsFile<'a> {
    /// Read.
    Present,
    /// There is none.
    Missing,
    /// There is one, but it was not read (not a regular file, a link, too large): why.
    Unread(&'a str),
}

/// The run's result and reason: the engine's exit, a missing or malformed outputs file, and every
/// failing verdict. Passed only when all of them are clean.
pub fn overall(
    exit: &EngineExit,
    outputs: OutputsFile<'_>,
    parsed: &ParsedOutputs,
    verdicts: &[Verdict],
    prompt_count: usize,
) -> (AcceptanceResult, String) {
    let mut parts: Vec<String> = exit.failure().into_iter().collect();
    match outputs {
        OutputsFile::Present => {}
        OutputsFile::Missing => parts.push("the engine wrote no outputs file".into()),
        OutputsFile::Unread(why) => parts.push(format!("the outputs file was not read: {why}")),
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

    /// An engine's container cannot claim its outputs came through a judged serving endpoint.
    #[test]
    fn a_serving_judgement_in_the_engines_report_is_not_believed() {
        let forged = |exit: EngineExit, serving: bool| EngineSide {
            report: EngineReport {
                command: Vec::new(),
                env: None,
                exit,
                timeout_seconds: 60,
                timings: Default::default(),
                devices: Default::default(),
                log_dropped: 0,
                error: None,
                serving: serving.then(|| crate::acceptance::serving::ServingMeasurement {
                    endpoint: "http://x:8000".into(),
                    api_version: 1,
                    ready_after_seconds: 0.0,
                    passes: Vec::new(),
                }),
            },
            log: Vec::new(),
            outputs: None,
            outputs_unread: None,
        };
        for side in [
            forged(EngineExit::Exited { code: 0 }, true),
            forged(
                EngineExit::Served {
                    endpoint: "http://x:8000".into(),
                    refused: Vec::new(),
                },
                false,
            ),
        ] {
            let side = from_the_engine_side(side);
            assert!(side.report.serving.is_none());
            assert!(
                matches!(&side.report.exit, EngineExit::Lost { reason } if reason.contains("not believed")),
                "{:?}",
                side.report.exit
            );
        }
        let honest = from_the_engine_side(forged(EngineExit::Exited { code: 0 }, false));
        assert_eq!(honest.report.exit, EngineExit::Exited { code: 0 });
    }

    #[test]
    fn passes_only_when_everything_is_clean() {
        let ok = [verdict("a", true, ""), verdict("b", true, "")];
        let clean = EngineExit::Exited { code: 0 };
        assert_eq!(
            overall(&clean, OutputsFile::Present, &Default::default(), &ok, 2),
            (AcceptanceResult::Passed, "all 2 prompts passed".into())
        );
        let (r, reason) = overall(
            &EngineExit::Exited { code: 70 },
            OutputsFile::Present,
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
            OutputsFile::Missing,
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
