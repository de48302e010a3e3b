//! Benchmark of the reconcile loop at scale on the test bed: N `DeepInferDeployment`s (default
//! 1000) reconciled by a real `deepinfer-operator run` process, then the same operator restarted
//! over the converged set. Prints figures, never judges them:
//!
//! - time from the first create until every resource's status reports its generation;
//! - reconcile passes and API writes per resource (the operator's own counters on `/metrics`);
//! - mean reconcile duration; the operator's resident memory idle and at N resources;
//! - after a restart: the time until every resource was reconciled again, and how many writes
//!   that cost (a converged set should cost none).
//!
//! What is measured is the controller itself (watch, cache, queue, validation, the licence gate,
//! status writes): half the resources lack the licence annotation (phase Pending), half ask for
//! 8 devices per pod while the operator runs for a fleet of 4-GPU nodes (`--max-devices-nvidia 4`):
//! the API server admits them, the operator stalls them (InvalidSpec). None places worker pods: the bed has GPUs for a handful of
//! groups, not a thousand. The last line is `BENCH {json}` for scripts.
//!
//! Usage: `deepinfer-bench [--resources N] [--operator PATH]` against the running bed
//! (`make bench` starts it and builds a release operator).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use deepinfer_e2e::operator_process::{free_address, get, sample, OperatorProcess};
use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::api::DeepInferDeployment;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

/// Benchmark arguments.
#[derive(Parser, Debug)]
#[command(about = "Reconcile N DeepInferDeployments on the test bed and print figures")]
struct Args {
    /// How many resources.
    #[arg(long, default_value_t = 1000)]
    resources: usize,
    /// The operator binary; default: target/release, else target/debug.
    #[arg(long)]
    operator: Option<PathBuf>,
    /// Longest wait for convergence, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
}

/// The figures, printed as text and as the final JSON line.
#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct Figures {
    resources: usize,
    operator: String,
    create_seconds: f64,
    converge_seconds: f64,
    reconciles_per_resource: f64,
    writes_per_resource: f64,
    mean_reconcile_ms: f64,
    rss_idle_mib: f64,
    rss_loaded_mib: f64,
    rss_peak_mib: f64,
    rss_per_resource_kib: f64,
    restart_resync_seconds: f64,
    restart_reconciles: f64,
    restart_writes: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

fn default_operator() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::repo_root().join("target"));
    let release = target.join("release/deepinfer-operator");
    if release.exists() {
        release
    } else {
        target.join("debug/deepinfer-operator")
    }
}

/// `VmRSS` and `VmHWM` of a process, in MiB.
fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The operator's metrics exposition, waiting for it to answer.
async fn metrics(address: SocketAddr, operator: &mut OperatorProcess) -> String {
    support::eventually(Duration::from_secs(60), "the operator's /metrics", || {
        operator.assert_running();
        async move { get(address, "/metrics").await.map(|r| r.body) }
    })
    .await
}

fn value(exposition: &str, series: &str) -> f64 {
    sample(exposition, series).unwrap_or(f64::NAN)
}

/// Devices per NVIDIA node the benchmarked operator is told its fleet has.
const FLEET_DEVICES_PER_NODE: i32 = 4;

/// The i-th resource: even ones (4 devices per pod) lack the licence annotation, odd ones ask
/// for 8 devices per pod, more than one node of the fleet has.
fn resource(i: usize) -> DeepInferDeployment {
    let mut did = support::unlicensed_deployment(&format!("bench-{i:05}"));
    if i.is_multiple_of(2) {
        did.spec.accelerator.devices_per_pod = Some(FLEET_DEVICES_PER_NODE);
    }
    did
}

/// How many resources report a status for their current generation.
async fn converged(api: &Api<DeepInferDeployment>) -> usize {
    let Ok(list) = api.list(&ListParams::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|d| d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation)
        .count()
}

async fn run(args: Args) -> anyhow::Result<()> {
    let n = args.resources;
    let timeout = Duration::from_secs(args.timeout_seconds);
    let binary = args.operator.clone().unwrap_or_else(default_operator);
    let client: Client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "bench").await;
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let log = std::env::temp_dir().join(format!("deepinfer-bench-{}.log", ns.name));
    println!(
        "bench: {n} resources in namespace {}, operator {} (log {})",
        ns.name,
        binary.display(),
        log.display()
    );

    let address = free_address();
    let start = |log: &PathBuf| {
        OperatorProcess::start_binary(
            &binary,
            &ns.name,
            address,
            &["--max-devices-nvidia", &FLEET_DEVICES_PER_NODE.to_string()],
            &[("RUST_LOG", "warn")],
            Some(log),
        )
    };
    let mut operator = start(&log);
    metrics(address, &mut operator).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_idle, _) = memory_mib(operator.id());

    let t0 = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &resource(i)).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let create_seconds = t0.elapsed().as_secs_f64();
    println!("bench: created {n} in {create_seconds:.1} s");
    loop {
        let done = converged(&api).await;
        if done == n {
            break;
        }
        operator.assert_running();
        anyhow::ensure!(
            t0.elapsed() < timeout,
            "only {done} of {n} converged after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let converge_seconds = t0.elapsed().as_secs_f64();
    // Let trailing requeues finish before reading the counters.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = metrics(address, &mut operator).await;
    let (rss_loaded, rss_peak) = memory_mib(operator.id());
    let reconciles = value(&text, "deepinfer_reconciles_total");
    let writes = value(&text, "deepinfer_api_writes_total");
    let mean_reconcile_ms = 1000.0 * value(&text, "deepinfer_reconcile_duration_seconds_sum")
        / value(&text, "deepinfer_reconcile_duration_seconds_count");

    // Restart over the converged set: every resource is reconciled again from the initial list.
    let status = operator.terminate(Duration::from_secs(30));
    anyhow::ensure!(status.success(), "the operator exited with {status}");
    let t1 = Instant::now();
    let mut operator = start(&log);
    let restart_reconciles = loop {
        let text = metrics(address, &mut operator).await;
        let r = value(&text, "deepinfer_reconciles_total");
        if r >= n as f64 {
            break r;
        }
        anyhow::ensure!(
            t1.elapsed() < timeout,
            "only {r} reconciles after the restart within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let restart_resync_seconds = t1.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = metrics(address, &mut operator).await;
    let restart_writes = value(&text, "deepinfer_api_writes_total");
    operator.terminate(Duration::from_secs(30));

    let figures = Figures {
        resources: n,
        operator: binary.display().to_string(),
        create_seconds,
        converge_seconds,
        reconciles_per_resource: reconciles / n as f64,
        writes_per_resource: writes / n as f64,
        mean_reconcile_ms,
        rss_idle_mib: rss_idle,
        rss_loaded_mib: rss_loaded,
        rss_peak_mib: rss_peak,
        rss_per_resource_kib: (rss_loaded - rss_idle) * 1024.0 / n as f64,
        restart_resync_seconds,
        restart_reconciles,
        restart_writes,
    };
    println!("bench: converged {n} in {converge_seconds:.1} s from the first create");
    println!(
        "bench: {:.2} reconciles and {:.2} API writes per resource, mean pass {mean_reconcile_ms:.2} ms",
        figures.reconciles_per_resource, figures.writes_per_resource
    );
    println!(
        "bench: operator memory {rss_idle:.1} MiB idle, {rss_loaded:.1} MiB at {n} resources (peak {rss_peak:.1}), {:.1} KiB per resource",
        figures.rss_per_resource_kib
    );
    println!(
        "bench: restart re-reconciled {n} in {restart_resync_seconds:.1} s with {restart_writes} writes"
    );
    println!("BENCH {}", json!(figures));
    Ok(())
}
