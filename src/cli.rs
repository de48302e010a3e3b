//! Command line of the two binaries: `deepinfer-operator` (the controller, and the generators of
//! its manifests and documentation) and `deepinfer-runner` (the entrypoints of the Jobs the
//! controller runs, and the offline acceptance checker). Both are in the operator's image. The
//! controller's binary carries none of the runner's code (JSON Schema, CEL, YAML and JSONPath for
//! the acceptance checker): code pages it never runs would sit beside pages it does and count in
//! its resident set.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Runs DeepInfer as a verified, pinned, placed service on NVIDIA and Ascend clusters.
#[derive(Parser, Debug)]
#[command(
    name = "deepinfer-operator",
    version,
    about,
    after_help = "The Jobs' entrypoints and the offline `check` are deepinfer-runner's \
                  (`deepinfer-runner --help`); `deepinfer-operator check ...` runs \
                  `deepinfer-runner check ...` from beside this binary."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands of `deepinfer-operator`.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller.
    Run(Box<crate::controller::context::RunArgs>),
    /// Print a CustomResourceDefinition as YAML (`DeepInferDeployment` unless `--kind` says).
    Crd(CrdArgs),
    /// Print generated documentation (committed under docs/; `make docs`).
    Docs(DocsArgs),
}

pub use crate::controller::build::RUNNER_BINARY;

/// The entrypoints of the Jobs the DeepInfer operator runs, and the offline acceptance checker.
#[derive(Parser, Debug)]
#[command(name = "deepinfer-runner", version, about)]
pub struct RunnerCli {
    /// What to do.
    #[command(subcommand)]
    pub command: RunnerCommand,
}

/// Subcommands of `deepinfer-runner`.
#[derive(Subcommand, Debug)]
pub enum RunnerCommand {
    /// Job entrypoint: download a pinned hub revision into a directory.
    FetchCheckpoint(crate::checkpoint::FetchArgs),
    /// Job entrypoint: verify a checkpoint directory and report the result.
    VerifyCheckpoint(crate::checkpoint::VerifyArgs),
    /// Job entrypoint (judge container): judge the acceptance workload's outputs, write the
    /// evidence and the summary; without `--engine-dir` it runs the engine itself.
    Accept(Box<crate::acceptance::AcceptArgs>),
    /// Job entrypoint (engine container, no API token): run the engine command and leave its
    /// outputs and report in the directory shared with the judge.
    RunEngine(crate::acceptance::handoff::RunEngineArgs),
    /// Judge kept engine outputs against an acceptance spec, offline.
    Check(crate::acceptance::CheckArgs),
    /// Init-container entrypoint: copy this binary into a shared volume (injected into the acceptance engine container).
    InstallRunner(InstallRunnerArgs),
}

/// Whether `word` is a subcommand of `deepinfer-runner`, which `deepinfer-operator` hands over
/// to it.
pub fn is_runner_command(word: &str) -> bool {
    <RunnerCommand as Subcommand>::has_subcommand(word)
}

/// The exit status of `program` for what its subcommand returned: the subcommand's own (0 to
/// 255), or 2 with the error printed.
pub fn exit_code(program: &str, outcome: anyhow::Result<i32>) -> ExitCode {
    match outcome {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("{program}: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// `crd` arguments.
#[derive(Args, Debug)]
pub struct CrdArgs {
    /// Which CRD: `deployment` (DeepInferDeployment) or `role` (DeepInferRole).
    #[arg(long, value_enum, default_value = "deployment")]
    pub kind: CrdKind,
}

/// The CRDs the operator defines.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum CrdKind {
    /// `DeepInferDeployment`.
    Deployment,
    /// `DeepInferRole`, the scale target of a role with `scaling: external`.
    Role,
}

/// `install-runner` arguments.
#[derive(Args, Debug)]
pub struct InstallRunnerArgs {
    /// Destination path of the copied binary.
    pub destination: PathBuf,
}

/// `docs` arguments.
#[derive(Args, Debug)]
pub struct DocsArgs {
    /// The page to print.
    #[command(subcommand)]
    pub page: DocsPage,
}

/// Generated documentation pages.
#[derive(Subcommand, Debug, Clone, Copy)]
pub enum DocsPage {
    /// The API reference in Markdown, rendered from the CRD schema (docs/api-reference.md).
    ApiReference,
    /// The metrics reference in Markdown, rendered from the metric registry (docs/metrics.md).
    Metrics,
    /// The alerts as a Prometheus rule file (charts/deepinfer-operator/files/prometheus-rules.yaml).
    PrometheusRules,
}
