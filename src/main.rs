#![forbid(unsafe_code)]
//! `deepinfer-operator`: parses the command line and dispatches. The Jobs' entrypoints are
//! `deepinfer-runner`'s (src/bin/deepinfer-runner.rs).

use std::process::ExitCode;

use clap::Parser;
use deepinfer_operator::{api, cli, controller, metrics};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    if let Some(code) = hand_over() {
        return code;
    }
    run()
}

#[tokio::main]
async fn run() -> ExitCode {
    let cli = cli::Cli::parse();
    let outcome = match cli.command {
        cli::Command::Run(args) => controller::run(*args).await.map(|()| 0),
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
    };
    cli::exit_code("deepinfer-operator", outcome)
}

/// `deepinfer-operator SUBCOMMAND ...` for a subcommand of `deepinfer-runner` (`check`, a Job's
/// entrypoint): runs `deepinfer-runner SUBCOMMAND ...` from beside this binary in this process's
/// place. `None`: the subcommand is this binary's own.
fn hand_over() -> Option<ExitCode> {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os().skip(1);
    let word = args.next()?;
    if !cli::is_runner_command(word.to_str()?) {
        return None;
    }
    let runner = std::env::current_exe()
        .map(|me| me.with_file_name(cli::RUNNER_BINARY))
        .unwrap_or_else(|_| cli::RUNNER_BINARY.into());
    // Returns only if the runner could not be started.
    let err = std::process::Command::new(&runner)
        .arg(&word)
        .args(args)
        .exec();
    eprintln!(
        "deepinfer-operator: `{}` is a subcommand of {}, which could not be run from {}: {err}",
        word.to_string_lossy(),
        cli::RUNNER_BINARY,
        runner.display()
    );
    Some(ExitCode::from(2))
}
