//! Checkpoint gate: the fetch and verification Job entrypoints.
//!
//! Both commands print a JSON report on stdout and write it (fitted under 4096 bytes) to the
//! termination message, where the controller reads it from the Job's pod. Exit codes: 0 ok,
//! 1 the checkpoint (or the fetch) failed, 2 bad arguments.

pub mod fetch;
pub mod paths;
pub mod proxy;
pub mod report;
pub mod safetensors;
pub mod verify;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use clap::Args;

pub use fetch::{fetch_checkpoint, FetchMarker, FetchReport, FetchRequest, MARKER_FILE};
pub use verify::{
    verify_dir, Expectations, ProblemKind, RoleLayout, VerifyReport, VOLUME_REVISION,
};

/// Exit code: everything checked out.
pub const EXIT_OK: i32 = 0;
/// Exit code: the checkpoint is bad or could not be fetched; the report says why.
pub const EXIT_FAILED: i32 = 1;
/// Exit code: the command line is wrong.
pub const EXIT_BAD_ARGS: i32 = 2;

/// `fetch-checkpoint` arguments. The token, if any, comes from the `HF_TOKEN` environment
/// variable so it never shows in a pod spec's args.
#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Hub repository id, e.g. `deepseek-ai/DeepSeek-V3`.
    #[arg(long)]
    pub repo: String,
    /// Full 40-hex commit to fetch.
    #[arg(long)]
    pub revision: String,
    /// Destination directory (created if missing).
    #[arg(long)]
    pub dest: PathBuf,
    /// Hub base URL.
    #[arg(long, env = "HF_ENDPOINT", default_value = fetch::DEFAULT_ENDPOINT)]
    pub endpoint: String,
    /// Termination message file [default: /dev/termination-log when it exists and is writable].
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// `verify-checkpoint` arguments.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Checkpoint directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// `spec.model.license`: the licence the checkpoint must declare (case-insensitive).
    #[arg(long)]
    pub license: String,
    /// The pinned hub revision, or `volume` for a checkpoint placed on a volume by hand.
    #[arg(long)]
    pub revision: String,
    /// A role's layout `<role>=<tensor>x<pipeline>x<data>x<expert>`; repeat per role.
    #[arg(long = "layout", value_name = "ROLE=TxPxDxE", value_parser = parse_layout)]
    pub layouts: Vec<RoleLayout>,
    /// Termination message file [default: /dev/termination-log when it exists and is writable].
    #[arg(long)]
    pub report: Option<PathBuf>,
}

fn parse_layout(s: &str) -> Result<RoleLayout, String> {
    s.parse()
}

/// Runs `fetch-checkpoint`; returns the process exit code.
pub async fn fetch(args: FetchArgs) -> anyhow::Result<i32> {
    let request = FetchRequest {
        repo: args.repo,
        revision: args.revision,
        dest: args.dest,
        endpoint: args.endpoint,
        token: std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty()),
        proxies: proxy::Proxies::from_env(),
    };
    if let Err(problem) = request.validate() {
        eprintln!("deepinfer-runner fetch-checkpoint: {problem}");
        return Ok(EXIT_BAD_ARGS);
    }
    let report = fetch_checkpoint(&request).await;
    let full = serde_json::to_string(&report)?;
    let fitted = report::fit_problems(&report.problems, |problems| {
        let mut r = report.clone();
        r.problems = problems;
        serde_json::to_string(&r).unwrap_or_default()
    });
    report::emit(&full, &fitted, args.report.as_deref())?;
    Ok(if report.ok { EXIT_OK } else { EXIT_FAILED })
}

/// Runs `verify-checkpoint`; returns the process exit code.
pub async fn verify(args: VerifyArgs) -> anyhow::Result<i32> {
    if args.license.trim().is_empty() || args.revision.trim().is_empty() {
        eprintln!("deepinfer-runner verify-checkpoint: --license and --revision must not be empty");
        return Ok(EXIT_BAD_ARGS);
    }
    let expect = Expectations {
        license: args.license,
        revision: args.revision,
        layouts: args.layouts,
    };
    let dir = args.dir;
    let report = tokio::task::spawn_blocking(move || verify_dir(&dir, &expect)).await?;
    let full = serde_json::to_string(&report)?;
    let fitted = report::fit_problems(&report.problems, |problems| {
        let mut r = report.clone();
        r.problems = problems;
        serde_json::to_string(&r).unwrap_or_default()
    });
    report::emit(&full, &fitted, args.report.as_deref())?;
    Ok(if report.ok { EXIT_OK } else { EXIT_FAILED })
}
