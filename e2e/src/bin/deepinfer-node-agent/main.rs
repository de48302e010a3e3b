//! `deepinfer-node-agent`: the test bed's simulated node agent, in the spirit of KWOK.
//!
//! It registers the Nodes of a topology file and keeps them Ready with Leases, moves the pods
//! bound to them through Pending → Running with kubelet-like status and conditions, executes
//! the containers that run the project's own binary as local processes (with the pod's
//! volumes, environment and service-account token), and lets tests inject faults through
//! annotations. See `e2e/README.md` for the contract.
#![forbid(unsafe_code)]

mod ascend;
mod dra;
mod env;
mod exec;
mod nodes;
mod plan;
mod pods;
mod probe;
mod queue;
mod starts;
mod status;
mod topology;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};

/// Field manager of everything the agent writes.
pub const FIELD_MANAGER: &str = "deepinfer-node-agent";

/// The current time in whole seconds, the precision the API server stores; statuses built
/// from it compare equal to what was written before.
pub fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// `namespace/name` of a pod, for logs.
pub fn pod_name(
    key: &kube::runtime::reflector::ObjectRef<k8s_openapi::api::core::v1::Pod>,
) -> String {
    format!(
        "{}/{}",
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

/// Simulated node agent for the DeepInfer operator's test bed.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Kubeconfig with rights to manage Nodes, Leases, Pods and their status, and to request
    /// service-account tokens.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Topology file describing the simulated nodes (format: e2e/bed/topology.yaml).
    #[arg(long)]
    topology: PathBuf,
    /// Directory for per-pod volumes and container logs (`logs/<ns>_<pod>_<container>.log`).
    #[arg(long)]
    state_dir: PathBuf,
    /// `IMAGE_NAME=PATH`: containers of that image (any registry, tag or digest) are executed,
    /// and a command word `IMAGE_NAME` or `.../IMAGE_NAME` runs the local binary PATH. Repeatable.
    #[arg(long = "own-binary", value_name = "IMAGE_NAME=PATH")]
    own_binaries: Vec<String>,
    /// The files of DeepInfer's runtime image that cannot exist here (its offline example, which
    /// needs GPUs and DeepSeek weights): bound read-only at `/opt/deepinfer` in every executed
    /// container of an image that is not one of the project's own. `cluster-up.sh` writes a
    /// stand-in `examples/offline_inference.py` that replays the samples' answers.
    #[arg(long)]
    runtime_files: Option<PathBuf>,
    /// Number of pods synced concurrently.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Seconds between Node status heartbeats; the Leases (renewed every 10 s) keep the nodes
    /// Ready in between, as with the kubelet's `nodeStatusReportFrequency`.
    #[arg(long, default_value_t = 30)]
    status_heartbeat_seconds: u64,
    /// Longest wait between SIGTERM and SIGKILL for the processes of a deleted pod.
    #[arg(long, default_value_t = 2)]
    kill_grace_seconds: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = format!("{e:#}"), "node agent failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let specs = topology::load(&cli.topology)?;
    let own = plan::OwnBinaries::parse(&cli.own_binaries)?;
    let kubeconfig = Kubeconfig::read_from(&cli.kubeconfig)
        .with_context(|| format!("reading {}", cli.kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    // Executed containers reach the API server the way in-cluster clients do.
    let api_host = config
        .cluster_url
        .host()
        .ok_or_else(|| anyhow!("the kubeconfig's server URL has no host"))?
        .trim_matches(['[', ']'])
        .to_string();
    let api_port = config.cluster_url.port_u16().unwrap_or(443);
    let client = Client::try_from(config)?;

    let state_dir = std::path::absolute(&cli.state_dir)?;
    let logs_dir = state_dir.join("logs");
    let bin_dir = state_dir.join("bin");
    for dir in [&state_dir.join("pods"), &logs_dir, &bin_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for (name, path) in own.iter() {
        let path = std::path::absolute(path)?;
        if !path.exists() {
            warn!(binary = %path.display(), "own binary does not exist (yet)");
        }
        let link = bin_dir.join(name);
        // A stale link from an earlier run may point elsewhere.
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&path, &link)
            .with_context(|| format!("linking {}", link.display()))?;
    }

    let device_env = dra::visible_devices_env(&specs);
    let (resumed_tx, resumed_rx) = tokio::sync::mpsc::unbounded_channel();
    let nodes = nodes::Nodes::new(client.clone(), specs, resumed_tx);
    register_with_retries(&nodes).await?;
    tokio::spawn(
        nodes
            .clone()
            .heartbeat_loop(Duration::from_secs(cli.status_heartbeat_seconds)),
    );
    tokio::spawn(nodes.clone().watch_loop());

    let state_dir_for_starts = state_dir.join("engine-starts.jsonl");
    let runtime = exec::Runtime::new(exec::ExecConfig {
        client: client.clone(),
        state_dir,
        logs_dir,
        bin_dir,
        api_host,
        api_port,
        kill_grace: Duration::from_secs(cli.kill_grace_seconds),
        device_env,
        runtime_files: cli.runtime_files.map(std::path::absolute).transpose()?,
    });
    let starts = starts::EngineStarts::new(state_dir_for_starts);
    let agent = pods::PodAgent::start(client, nodes, own, runtime, starts, cli.workers, resumed_rx);
    info!("node agent running");

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received; stopping pod processes"),
        _ = int.recv() => info!("SIGINT received; stopping pod processes"),
    }
    agent.runtime.stop_all().await;
    Ok(())
}

/// The API server may still be starting (or RBAC not yet bootstrapped) when the agent starts.
async fn register_with_retries(nodes: &nodes::Nodes) -> Result<()> {
    let mut attempt = 0;
    loop {
        match nodes.register_all().await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < 30 => {
                attempt += 1;
                warn!(
                    error = format!("{e:#}"),
                    attempt, "registering nodes failed; retrying"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
