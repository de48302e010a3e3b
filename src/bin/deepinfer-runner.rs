#![forbid(unsafe_code)]
//! `deepinfer-runner`: the entrypoints of the Jobs the operator runs (checkpoint fetch and
//! verification, the acceptance judge, the engine side of a judged run and the copy of this
//! binary into the engine's image) and the offline acceptance checker, in a binary of their own
//! beside `deepinfer-operator` (see `cli`).

use std::process::ExitCode;

use clap::Parser;
use deepinfer_operator::{acceptance, checkpoint, cli};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::RunnerCli::parse();
    let outcome = match cli.command {
        cli::RunnerCommand::FetchCheckpoint(args) => checkpoint::fetch(args).await,
        cli::RunnerCommand::VerifyCheckpoint(args) => checkpoint::verify(args).await,
        cli::RunnerCommand::Accept(args) => acceptance::accept(*args).await,
        cli::RunnerCommand::RunEngine(args) => acceptance::run_engine(args).await,
        cli::RunnerCommand::Check(args) => acceptance::check(&args),
        cli::RunnerCommand::InstallRunner(args) => install_runner(&args),
    };
    cli::exit_code(cli::RUNNER_BINARY, outcome)
}

/// Copies this very binary to `destination` (made executable), so an engine image can run it.
fn install_runner(args: &cli::InstallRunnerArgs) -> anyhow::Result<i32> {
    use anyhow::Context as _;
    let me = std::env::current_exe().context("locating this binary")?;
    if let Some(dir) = args.destination.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::copy(&me, &args.destination)
        .with_context(|| format!("copying {} to {}", me.display(), args.destination.display()))?;
    println!("installed runner at {}", args.destination.display());
    Ok(0)
}
