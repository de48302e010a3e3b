//! Checkpoint gate: the fetch and verification Job entrypoints.
//! (Being implemented; see the `fetch` and `verify` modules.)

use clap::Args;

/// `fetch-checkpoint` arguments.
#[derive(Args, Debug)]
pub struct FetchArgs {}

/// `verify-checkpoint` arguments.
#[derive(Args, Debug)]
pub struct VerifyArgs {}

/// Runs `fetch-checkpoint`; returns the process exit code.
pub async fn fetch(_args: FetchArgs) -> anyhow::Result<i32> {
    anyhow::bail!("fetch-checkpoint is not available in this build")
}

/// Runs `verify-checkpoint`; returns the process exit code.
pub async fn verify(_args: VerifyArgs) -> anyhow::Result<i32> {
    anyhow::bail!("verify-checkpoint is not available in this build")
}
