#![forbid(unsafe_code)]
//! Parses the command line and dispatches.

use std::process::ExitCode;

use clap::Parser;
use deepinfer_operator::{acceptance, api, checkpoint, cli, controller, metrics};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let outcome = match cli.command {
        cli::Command::Run(args) => controller::run(args).await.map(|()| 0),
        cli::Command::Crd(args) => {
            match args.kind {
                cli::CrdKind::Deployment => print!("{}", api::crd_yaml()),
                cli::CrdKind::Role => print!("{}", api::role_crd_yaml()),
            }
            Ok(0)
        }
        cli::Command::Docs(args) => {
            match args.page {
                cli::DocsPage::ApiReference => print!("{}", api::reference::api_reference()),
                cli::DocsPage::Metrics => print!("{}", metrics::reference::metrics_reference()),
                cli::DocsPage::PrometheusRules => {
                    print!("{}", metrics::reference::prometheus_rules())
                }
            }
            Ok(0)
        }
        cli::Command::FetchCheckpoint(args) => checkpoint::fetch(args).await,
        cli::Command::VerifyCheckpoint(args) => checkpoint::verify(args).await,
        cli::Command::Accept(args) => acceptance::accept(*args).await,
        cli::Command::RunEngine(args) => acceptance::run_engine(args).await,
        cli::Command::Check(args) => acceptance::check(&args),
        cli::Command::InstallRunner(args) => install_runner(&args),
    };
    match outcome {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("deepinfer-operator: {err:#}");
            ExitCode::from(2)
        }
    }
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
