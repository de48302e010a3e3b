//! Acceptance gate: the checker, the engine side (`run-engine`, in the engine container), the
//! judge (`accept`, in the judge container; alone it also runs the engine side) and
//! offline re-judging of kept evidence (`check`). Contracts: docs/acceptance.md.

pub mod args;
pub mod checker;
pub mod devices;
pub mod engine;
pub mod engine_io;
pub mod evidence;
pub mod grammar;
pub mod handoff;
pub mod manifest;
pub mod placement;
pub mod rules;
pub mod runner;
pub mod serving;
pub mod sheet;
pub mod spec_file;

pub use args::{
    parse_role_groups, parse_string_map, AcceptArgs, CheckArgs, IdentityArgs, ROLE_GROUPS_ENV,
};
pub use checker::{CompiledSpec, Verdict};
pub use manifest::{AcceptanceResult, AcceptanceSummary};
pub use spec_file::{judge_file, load_spec, parse_spec};

/// Runs `accept`; returns the process exit code (0 passed, 1 failed, 2 the judge itself failed).
pub async fn accept(args: AcceptArgs) -> anyhow::Result<i32> {
    Ok(runner::run(&args).await)
}

/// Runs `run-engine` (the engine container's entrypoint); returns the process exit code.
pub async fn run_engine(args: handoff::RunEngineArgs) -> anyhow::Result<i32> {
    Ok(handoff::run_engine_side(&args).await)
}

/// Runs `check`; returns the process exit code (0 all pass, 1 any fail, 2 bad input).
pub fn check(args: &CheckArgs) -> anyhow::Result<i32> {
    if let Some(kept) = &args.sheet {
        print!("{}", sheet::render(&sheet::load_manifest(kept)?));
        return Ok(0);
    }
    let verdicts = check_verdicts(args)?;
    for v in &verdicts {
        println!("{}", v.line());
    }
    Ok(if verdicts.iter().all(|v| v.passed) {
        0
    } else {
        1
    })
}

/// The verdicts `check` prints; `Err` is bad input.
pub fn check_verdicts(args: &CheckArgs) -> anyhow::Result<Vec<Verdict>> {
    let (Some(acceptance), Some(outputs)) = (&args.acceptance, &args.outputs) else {
        anyhow::bail!("check: give --acceptance FILE and --outputs FILE (or --sheet EVIDENCE)");
    };
    let (_, compiled) = load_spec(acceptance, None)?;
    judge_file(&compiled, outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn spec_yaml_in_three_shapes() {
        let bare =
            "prompts: [{id: a, prompt: x, structuredOutput: {regex: a}}]\nrequireEos: false\n";
        let nested = format!("acceptance:\n  {}", bare.replace('\n', "\n  "));
        let resource = format!(
            "apiVersion: deepinfer.io/v1alpha1\nspec:\n  {}",
            nested.replace('\n', "\n  ")
        );
        for text in [bare.to_string(), nested, resource] {
            let spec = parse_spec(&text).unwrap();
            assert_eq!(spec.prompts[0].id, "a");
            assert!(!spec.require_eos);
            assert_eq!(spec.timeout_seconds, 1800);
        }
        assert!(parse_spec("prompts: [{id: a}]")
            .unwrap_err()
            .to_string()
            .contains("missing field"));
    }

    #[test]
    fn accept_args_need_exactly_one_evidence_target() {
        let base = ["accept", "--spec-file", "s.yaml", "--model-dir", "/m"];
        assert!(AcceptArgs::try_parse_from(base).is_err());
        let dir = AcceptArgs::try_parse_from(base.iter().chain(&["--evidence-dir", "/e"])).unwrap();
        assert_eq!(dir.evidence_dir.as_deref(), Some(Path::new("/e")));
        assert!(
            AcceptArgs::try_parse_from(base.iter().chain(&["--evidence-configmap", "cm"])).is_err()
        );
        let cm = [
            "--evidence-configmap",
            "cm",
            "--owner-name",
            "d",
            "--owner-uid",
            "u",
        ];
        assert!(AcceptArgs::try_parse_from(base.iter().chain(&cm)).is_ok());
    }
}
