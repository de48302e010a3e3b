//! Command line: the controller and the entrypoints of the Jobs it runs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Runs DeepInfer as a verified, pinned, placed service on NVIDIA and Ascend clusters.
#[derive(Parser, Debug)]
#[command(name = "deepinfer-operator", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller.
    Run(crate::controller::context::RunArgs),
    /// Print a CustomResourceDefinition as YAML (`DeepInferDeployment` unless `--kind` says).
    Crd(CrdArgs),
    /// Print generated documentation (committed under docs/; `make docs`).
    Docs(DocsArgs),
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
