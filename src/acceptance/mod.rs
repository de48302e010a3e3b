//! Acceptance gate: the checker, the runner (`accept`) and offline re-judging (`check`).
//! (Being implemented.)

use clap::Args;

/// `accept` arguments.
#[derive(Args, Debug)]
pub struct AcceptArgs {}

/// Runs `accept`; returns the process exit code.
pub async fn accept(_args: AcceptArgs) -> anyhow::Result<i32> {
    anyhow::bail!("accept is not available in this build")
}

/// Runs `check`; returns the process exit code (0 all pass, 1 any fail, 2 bad input).
pub fn check(_args: &crate::cli::CheckArgs) -> anyhow::Result<i32> {
    anyhow::bail!("check is not available in this build")
}
