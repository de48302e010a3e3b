//! Benchmark of the whole pipeline on the test bed: N `DeepInferDeployment`s (default 1000) driven
//! by a real `deepinfer-operator run` process all the way to Ready, on a generated topology of
//! simulated nodes served by a node agent of the benchmark's own (about one node per deployment:
//! NVIDIA nodes of 8 GPUs in cliques of 4, Ascend nodes of 16 NPUs in super-pods of 8).
//!
//! The deployments are spread evenly over namespaces of at most 100 (`--per-namespace`), about
//! 1,000 pods each, within the 3,000 pods per namespace of Kubernetes' scalability thresholds:
//! the controller-manager's disruption and EndpointSlice controllers look at every
//! PodDisruptionBudget and Service of a pod's namespace on each of its changes, so 1,000
//! deployments in one namespace would cost the bed's controllers about ten times as much per
//! pod change. With more than one namespace the operator watches every namespace.
//!
//! Every deployment verifies its checkpoint (a Job running the operator's verifier), passes its
//! acceptance run (the operator's judge around the stand-in engine) and serves 8 worker pods with
//! their Services: NVIDIA ones as 2 groups of 4 pods, Ascend ones as 1 group of 8. Phases:
//!
//! 1. `ready`: create all N, until every one reports `Ready` for its generation;
//! 2. `rollout`: a new image for all N, until every one serves the new revision in every group;
//! 3. `restart`: the operator restarted over the converged set, until it reconciled each again;
//! 4. `floor-ready`, `floor-rollout`: a plain client (the same kube client and request
//!    accounting, at the operator's concurrency) creates and updates exactly the
//!    objects the operator created, in the same order and waiting for the same things, in a
//!    fresh namespace for each of the operator's on the same bed (see `floor.rs`).
//!
//! Per phase it prints the time to converge, API requests by verb per resource, reconciles per
//! resource, the peak reconcile queue depth and how long watch events waited for their pass
//! (mean and 99th percentile), the CPU seconds of the operator, the benchmark's node agent and the bed's processes,
//! and the operator's resident memory at the start, at the peak (sampled each second) and at the
//! end; then operator ÷ floor for reaching Ready and for the rollout. It prints figures and never
//! judges them. The last line is `BENCH {json}` for scripts.
//!
//! Usage: `deepinfer-bench [--resources N] [--per-namespace M] [--operator PATH]
//! [--node-agent PATH] [--no-floor] [--skip-rollout]` against the running bed (`make bench`
//! starts it and builds a release operator). `deepinfer-bench --replay FILE --replay-namespace NS`
//! replays the floor's steps written in FILE in the namespace NS and exits. `--record FILE`
//! writes the operator's side of a run to FILE; `deepinfer-bench --floor-from FILE` then runs
//! the floor's rollout alone, starting from the set the operator converged to in `ready`
//! (`floor-setup`) rather than replaying `ready`.

#![forbid(unsafe_code)]

mod bed;
mod floor;
mod footprint;
mod probe;
mod resend;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use deepinfer_e2e::operator_process::{free_address, get, OperatorProcess};
use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::api::DeepInferDeployment;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::json;

use footprint::KindFootprint;
use probe::{PhaseFigures, Probe};

/// The operator's allocator, so that the caches measured here cost what they cost there.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Benchmark arguments.
#[derive(Parser, Debug)]
#[command(about = "Drive N DeepInferDeployments to Ready on the test bed and print figures")]
struct Args {
    /// How many resources.
    #[arg(long, default_value_t = 1000)]
    resources: usize,
    /// The operator binary; default: target/release, else target/debug.
    #[arg(long)]
    operator: Option<PathBuf>,
    /// The node agent binary for the generated topology; default: target/release, else
    /// target/debug.
    #[arg(long)]
    node_agent: Option<PathBuf>,
    /// Longest wait for one phase, in seconds.
    #[arg(long, default_value_t = 3600)]
    timeout_seconds: u64,
    /// Requests the benchmark itself keeps in flight when creating and patching resources.
    #[arg(long, default_value_t = 32)]
    client_concurrency: usize,
    /// Leave out the floor (the plain client's run).
    #[arg(long)]
    no_floor: bool,
    /// Leave out the rollout and the floor's rollout: `ready`, `restart`, `floor-ready` only.
    #[arg(long)]
    skip_rollout: bool,
    /// Resources per namespace: N resources go into ⌈N ÷ this⌉ namespaces, 100 resources (about
    /// 1,000 pods) each by default, within the 3,000 pods per namespace of Kubernetes' scalability
    /// thresholds. With one namespace the operator watches that namespace, with more every
    /// namespace.
    #[arg(long, default_value_t = 100)]
    per_namespace: usize,
    /// Instead of a run: replay the steps in this JSON file with the floor (see `floor::replay`)
    /// in the namespace `--replay-namespace`, then exit.
    #[arg(long, requires = "replay_namespace")]
    replay: Option<PathBuf>,
    /// The existing namespace `--replay` replays in.
    #[arg(long, requires = "replay")]
    replay_namespace: Option<String>,
    /// Write the operator's side of the run to this file: its phases' figures, the deployments
    /// as it left them after each phase and every step it took, for `--floor-from`.
    #[arg(long)]
    record: Option<PathBuf>,
    /// Instead of a run: the floor's rollout of the run recorded in this file (`--record`) on
    /// the generated nodes, starting from the set the operator converged to in `ready` (created
    /// at once, as phase `floor-setup`) instead of replaying `ready`; then operator ÷ floor for
    /// the rollout. `--resources` and `--per-namespace` are the recording's.
    #[arg(long, conflicts_with_all = ["replay", "record", "no_floor", "skip_rollout"])]
    floor_from: Option<PathBuf>,
    /// Runs of the whole benchmark (the operator's phases, then the floor's) on the same nodes,
    /// each in fresh namespaces: each run's figures are printed, then each operator ÷ floor ratio
    /// (time and writes, per phase) as the median of the runs with its least and greatest.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), conflicts_with_all = ["replay", "record", "floor_from"])]
    runs: u32,
}

/// The operator's side of a run, as `--record` writes it and `--floor-from` reads it (with the
/// same build of the benchmark).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Recording {
    resources: usize,
    operator: String,
    /// The operator's phases.
    phases: Vec<PhaseFigures>,
    /// Each phase the floor replays, with the deployments as the operator left them after it.
    replayed: Vec<(String, Vec<DeepInferDeployment>)>,
    /// What the operator did, per namespace.
    namespaces: Vec<floor::Recorded>,
}

/// Image of the first revision and of the rollout.
const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const IMAGE2: &str = "registry.example.com/deepinfer@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// Everything printed, also as the final JSON line.
#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct Figures {
    resources: usize,
    namespaces: usize,
    worker_pods: usize,
    nodes: usize,
    operator: String,
    nodes_ready_seconds: f64,
    node_agent_register_cpu_seconds: f64,
    operator_rss_idle_mib: f64,
    operator_rss_ready_mib: f64,
    bytes_per_resource: f64,
    bytes_per_pod: f64,
    operator_anon_idle_mib: f64,
    operator_anon_ready_mib: f64,
    anon_bytes_per_resource: f64,
    anon_bytes_per_pod: f64,
    /// What each of the operator's caches holds with N Ready resources, measured here (see
    /// `footprint.rs`; the operator's heap and object counts then are the `ready` phase's).
    caches: Vec<KindFootprint>,
    phases: Vec<PhaseFigures>,
    /// Operator time ÷ floor time, per phase (`ready`, `rollout`).
    floor_ratio: BTreeMap<String, f64>,
    /// Writes per resource by cause, per phase (`ready`, `rollout`): the operator's and the
    /// floor's.
    writes_by_cause: BTreeMap<String, BTreeMap<&'static str, [f64; 2]>>,
    /// The operator's namespaces still there when the floor (or the end of the run) came after
    /// emptying them: 0, since each is waited for until it is gone.
    operator_namespaces_left: usize,
    /// Weight loads of the new revision in the rollout (each start of a group's rank-0 engine,
    /// acceptance and serving, as the node agent counted them); absent without the rollout.
    rollout_weight_loads: Option<WeightLoads>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            tokio::select! {
                result = run(args) => result,
                signal = stop_signal() => Err(anyhow::anyhow!(
                    "{signal} received: the run is stopped, with the operator and node agent it started"
                )),
            }
        })
}

/// The first of SIGTERM, SIGINT and SIGHUP. The run is then dropped, and with it the operator
/// and node agent processes it started, which their `Drop` stops; the signal's default action
/// would end this process alone and leave them running.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    async fn received(kind: SignalKind, name: &'static str) -> &'static str {
        match signal(kind) {
            Ok(mut stream) => {
                stream.recv().await;
                name
            }
            Err(_) => std::future::pending().await,
        }
    }
    tokio::select! {
        name = received(SignalKind::terminate(), "SIGTERM") => name,
        name = received(SignalKind::interrupt(), "SIGINT") => name,
        name = received(SignalKind::hangup(), "SIGHUP") => name,
    }
}

/// `target/release/<name>` if built, else `target/debug/<name>` (or under `CARGO_TARGET_DIR`).
fn default_binary(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::repo_root().join("target"));
    let release = target.join("release").join(name);
    if release.exists() {
        release
    } else {
        target.join("debug").join(name)
    }
}

/// The operator's metrics exposition, waiting for it to answer.
async fn metrics(address: SocketAddr, operator: &mut OperatorProcess) -> String {
    support::eventually(Duration::from_secs(60), "the operator's /metrics", || {
        operator.assert_running();
        async move { get(address, "/metrics").await.map(|r| r.body) }
    })
    .await
}

/// The i-th resource: licensed, its checkpoint on the namespace's volume, the shot-planner
/// acceptance on the stand-in engine, 8 worker pods of one device each.
fn resource(i: usize) -> anyhow::Result<DeepInferDeployment> {
    let (kind, product, replicas, tensor) = if bed::is_ascend(i) {
        ("Ascend", bed::ASCEND_PRODUCT, 1, 8)
    } else {
        ("NVIDIA", bed::NVIDIA_PRODUCT, 2, 4)
    };
    let mut did = support::licensed_deployment(
        &format!("bench-{i:05}"),
        json!({"type": kind, "product": product, "devicesPerPod": 1}),
        json!([{"name": "worker", "replicas": replicas, "parallel": {"tensor": tensor}}]),
    );
    did["spec"]["runtime"]["image"] = json!(IMAGE);
    Ok(serde_json::from_value(did)?)
}

/// Ready for its current generation, every group of every role on the current revision.
fn converged(did: &DeepInferDeployment) -> bool {
    let Some(status) = did.status.as_ref() else {
        return false;
    };
    status.observed_generation == did.metadata.generation
        && support::condition(status, "Ready").is_some_and(|c| c.status == "True")
        && status.roles.iter().all(|r| {
            r.rolling_out.is_none()
                && r.updated_groups == r.desired_groups
                && r.ready_groups == r.desired_groups
        })
}

/// The benchmark's resources as their watches report them. The benchmark waits on these: its
/// waiting costs the API server one watch event per change, not a list of every resource each
/// second, which would load the API server in the operator's phases only (the floor's phases
/// wait on their own writes).
struct Watched {
    stores: Vec<Store<DeepInferDeployment>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watched {
    /// Watches the resources of each of `apis`; returns once every watch has listed.
    async fn start(apis: &[Api<DeepInferDeployment>]) -> anyhow::Result<Self> {
        let mut watched = Self {
            stores: Vec::new(),
            tasks: Vec::new(),
        };
        for api in apis {
            let (store, writer) = reflector::store();
            let events = reflector::reflector(writer, watcher(api.clone(), Default::default()));
            watched.tasks.push(tokio::spawn(
                events.default_backoff().for_each(|_| async {}),
            ));
            store.wait_until_ready().await?;
            watched.stores.push(store);
        }
        Ok(watched)
    }

    /// Every watched resource as last reported.
    fn state(&self) -> Vec<Arc<DeepInferDeployment>> {
        self.stores.iter().flat_map(Store::state).collect()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// How often the benchmark looks whether the resources converged (a phase's time is known to
/// this), sampling the probe each second.
const LOOK: Duration = Duration::from_millis(50);

/// Looks at the watched resources every [`LOOK`] until `done` holds for all `n`, sampling the
/// probe each second.
async fn wait_all(
    watched: &Watched,
    n: usize,
    timeout: Duration,
    probe: &mut Probe,
    operator: Option<&mut OperatorProcess>,
    done: impl Fn(&DeepInferDeployment) -> bool,
) -> anyhow::Result<()> {
    let mut operator = operator;
    let mut last_report = Instant::now();
    let mut last_sample: Option<Instant> = None;
    loop {
        if last_sample.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            probe.sample().await;
            last_sample = Some(Instant::now());
            if let Some(op) = operator.as_deref_mut() {
                op.assert_running();
            }
        }
        let items = watched.state();
        let count = items.iter().filter(|d| done(d)).count();
        if count == n {
            return Ok(());
        }
        if last_report.elapsed() >= Duration::from_secs(30) {
            let mut phases: BTreeMap<String, usize> = BTreeMap::new();
            for d in &items {
                let phase = d.status.as_ref().and_then(|s| s.phase);
                *phases.entry(format!("{phase:?}")).or_default() += 1;
            }
            println!(
                "bench:   {}: {count}/{n} after {:.0} s; phases {phases:?}",
                probe.name(),
                probe.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        anyhow::ensure!(
            probe.elapsed() < timeout,
            "{}: only {count} of {n} converged after {timeout:?}",
            probe.name()
        );
        tokio::time::sleep(LOOK).await;
    }
}

/// The namespace a phase runs in, with the fixture checkpoint on its claim `ckpt`.
async fn bench_namespace(client: &Client, prefix: &str) -> TestNamespace {
    let ns = TestNamespace::new(client, prefix).await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    support::wait_for_service_account(client, &ns.name, "default").await;
    ns
}

/// Creates the N resources, `concurrency` requests at a time.
async fn create_all(
    apis: &[Api<DeepInferDeployment>],
    n: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let objects = (0..n)
        .map(|i| Ok((&apis[i * apis.len() / n], resource(i)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    futures::stream::iter(objects)
        .map(|(api, did)| async move {
            let params = PostParams::default();
            resend::sent(resend::Repeat::Unsent, || api.create(&params, &did)).await
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Changes the image of each of `dids` (a new revision), `concurrency` requests at a time.
async fn roll_all(
    client: &Client,
    dids: &[DeepInferDeployment],
    concurrency: usize,
) -> anyhow::Result<()> {
    let patch = Patch::Merge(json!({"spec": {"runtime": {"image": IMAGE2}}}));
    futures::stream::iter(dids)
        .map(|did| {
            let patch = &patch;
            let api: Api<DeepInferDeployment> = Api::namespaced(
                client.clone(),
                did.metadata.namespace.as_deref().unwrap_or(""),
            );
            async move {
                let (name, params) = (did.name_any(), PatchParams::default());
                resend::sent(resend::Repeat::Unanswered, || {
                    api.patch(&name, &params, patch)
                })
                .await
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn run(args: Args) -> anyhow::Result<()> {
    let recording = match &args.floor_from {
        Some(file) => Some(read_recording(file)?),
        None => None,
    };
    let n = recording.as_ref().map_or(args.resources, |r| r.resources);
    anyhow::ensure!(n > 0, "--resources must be at least 1");
    let timeout = Duration::from_secs(args.timeout_seconds);
    if let (Some(file), Some(ns)) = (&args.replay, &args.replay_namespace) {
        let steps: serde_json::Value = serde_json::from_slice(&std::fs::read(file)?)?;
        let start = Instant::now();
        let replayed = floor::replay(ns, &steps, timeout).await?;
        println!(
            "bench: replayed {replayed} steps in {ns} in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let operator = args
        .operator
        .clone()
        .unwrap_or_else(|| default_binary("deepinfer-operator"));
    let agent_binary = args
        .node_agent
        .clone()
        .unwrap_or_else(|| default_binary("deepinfer-node-agent"));
    let client: Client = support::client().await;
    support::ensure_crd();
    bed::remove_nodes(&client).await?;
    let logs = std::env::temp_dir().join(format!("deepinfer-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    println!(
        "bench: {n} resources, operator {}, node agent {}, logs in {}",
        operator.display(),
        agent_binary.display(),
        logs.display()
    );

    let mut agent = bed::BenchAgent::start(&agent_binary, &operator, n, &logs.join("agent.log"))?;
    let t = Instant::now();
    agent.wait_ready(&client, timeout).await?;
    let nodes_ready_seconds = t.elapsed().as_secs_f64();
    let node_agent_register_cpu_seconds = bed::cpu_seconds(agent.id());
    println!(
        "bench: {} generated nodes Ready in {nodes_ready_seconds:.1} s (node agent {node_agent_register_cpu_seconds:.1} CPU s, {:.1} MiB)",
        agent.nodes,
        bed::rss_mib(agent.id())
    );
    if let Some(recording) = recording {
        let result = floor_from(recording, &client, agent.id(), timeout).await;
        drop(agent);
        bed::remove_nodes(&client).await?;
        let figures = result?;
        for (phase, ratio) in &figures.floor_ratio {
            println!("bench: {phase}: operator time / floor time = {ratio:.2}");
        }
        println!("BENCH {}", json!(figures));
        return Ok(());
    }
    let mut runs = Vec::new();
    for run in 1..=args.runs {
        if args.runs > 1 {
            println!("bench: run {run} of {}", args.runs);
        }
        let mut figures = match phases(&args, &client, &operator, &agent, &logs, timeout).await {
            Ok(figures) => figures,
            Err(e) => {
                drop(agent);
                bed::remove_nodes(&client).await?;
                return Err(e);
            }
        };
        figures.nodes_ready_seconds = nodes_ready_seconds;
        figures.node_agent_register_cpu_seconds = node_agent_register_cpu_seconds;
        print_figures(&figures);
        runs.push(figures);
    }
    drop(agent);
    bed::remove_nodes(&client).await?;
    match runs.as_slice() {
        [one] => println!("BENCH {}", json!(one)),
        _ => {
            let spread = spread(&runs);
            println!("BENCH {}", json!({"runs": runs, "spread": spread}));
        }
    }
    Ok(())
}

/// The median of `values` with their least and greatest, as printed and in the JSON.
#[derive(serde::Serialize, Debug, PartialEq)]
struct Spread {
    median: f64,
    least: f64,
    greatest: f64,
    each: Vec<f64>,
}

impl Spread {
    fn of(each: Vec<f64>) -> Self {
        let mut sorted = each.clone();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        };
        Self {
            median,
            least: sorted.first().copied().unwrap_or(f64::NAN),
            greatest: sorted.last().copied().unwrap_or(f64::NAN),
            each,
        }
    }
}

/// Per phase both sides ran, operator ÷ floor in time and in writes per resource over `runs`:
/// printed, and returned by phase and figure.
fn spread(runs: &[Figures]) -> BTreeMap<String, BTreeMap<&'static str, Spread>> {
    let mut by_phase = BTreeMap::new();
    let phases: Vec<&String> = runs
        .first()
        .map(|f| f.floor_ratio.keys().collect())
        .unwrap_or_default();
    for phase in phases {
        let writes = |f: &Figures| {
            let of = |name: &str| {
                f.phases
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| p.writes_per_resource)
            };
            match (of(phase), of(&format!("floor-{phase}"))) {
                (Some(op), Some(fl)) => op / fl,
                _ => f64::NAN,
            }
        };
        let time = Spread::of(
            runs.iter()
                .map(|f| f.floor_ratio.get(phase).copied().unwrap_or(f64::NAN))
                .collect(),
        );
        let writes = Spread::of(runs.iter().map(writes).collect());
        println!(
            "bench: {phase} over {} runs: operator ÷ floor time median {:.2} ({:.2} to {:.2}), writes median {:.2} ({:.2} to {:.2})",
            runs.len(), time.median, time.least, time.greatest, writes.median, writes.least, writes.greatest
        );
        by_phase.insert(
            phase.clone(),
            BTreeMap::from([("time", time), ("writes", writes)]),
        );
    }
    by_phase
}

/// Writes `recording` to `file` (`--record`).
fn write_recording(file: &Path, recording: &Recording) -> anyhow::Result<()> {
    let writer = std::io::BufWriter::new(std::fs::File::create(file)?);
    serde_json::to_writer(writer, recording)?;
    println!(
        "bench: the operator's side of the run written to {}",
        file.display()
    );
    Ok(())
}

/// The recording `--record` wrote to `file`.
fn read_recording(file: &Path) -> anyhow::Result<Recording> {
    let text =
        std::fs::read(file).map_err(|e| anyhow::anyhow!("--floor-from {}: {e}", file.display()))?;
    let recording: Recording = serde_json::from_slice(&text).map_err(|e| {
        anyhow::anyhow!(
            "--floor-from {}: not a recording of this benchmark (`--record`): {e}",
            file.display()
        )
    })?;
    anyhow::ensure!(
        recording.replayed.len() > 1,
        "--floor-from {}: the recording has no rollout (it was made with --skip-rollout)",
        file.display()
    );
    Ok(recording)
}

/// What `--floor-from` prints, also as the final JSON line: the operator's phases as recorded,
/// then the floor's.
#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct FloorRun {
    resources: usize,
    operator: String,
    phases: Vec<PhaseFigures>,
    floor_ratio: BTreeMap<String, f64>,
    writes_by_cause: BTreeMap<String, BTreeMap<&'static str, [f64; 2]>>,
}

/// `--floor-from`: the floor's phases after `ready` of a recorded run, from the set the operator
/// converged to in `ready`.
async fn floor_from(
    recording: Recording,
    client: &Client,
    agent: u32,
    timeout: Duration,
) -> anyhow::Result<FloorRun> {
    let mut phases = recording.phases;
    println!(
        "bench: the floor of a recorded run of {} resources (operator {}), from the set the operator converged to in `ready`",
        recording.resources, recording.operator
    );
    let (floor_ratio, writes_by_cause) = floor_phases(
        client,
        recording.namespaces,
        &recording.replayed,
        1,
        agent,
        timeout,
        &mut phases,
    )
    .await?;
    Ok(FloorRun {
        resources: recording.resources,
        operator: recording.operator,
        phases,
        floor_ratio,
        writes_by_cause,
    })
}

/// The operator's memory, resident and anonymous, in MiB.
fn memory(op: &OperatorProcess) -> (f64, f64) {
    (bed::rss_mib(op.id()), bed::anon_mib(op.id()))
}

/// The operator's memory once it serves `/metrics` and a second has passed: idle, before any
/// resource exists.
async fn settled_memory(address: SocketAddr, op: &mut OperatorProcess) -> (f64, f64) {
    metrics(address, op).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    memory(op)
}

async fn phases(
    args: &Args,
    client: &Client,
    operator: &Path,
    agent: &bed::BenchAgent,
    logs: &Path,
    timeout: Duration,
) -> anyhow::Result<Figures> {
    let n = args.resources;
    let namespaces = open_namespaces(client, n, args.per_namespace).await;
    let run = OperatorRun::new(client, operator, agent.id(), &namespaces, logs, timeout);
    println!(
        "bench: {} namespaces of about {} resources, the operator watching {}",
        run.names.len(),
        n.div_ceil(run.names.len()),
        run.scope().unwrap_or("every namespace")
    );
    let mut op = run.start();
    let idle = settled_memory(run.address, &mut op).await;

    let mut recorders = Vec::new();
    for ns in &run.names {
        recorders.push(floor::Recorder::start(client, ns).await);
    }
    let watched = Watched::start(&run.apis).await?;
    let ready = run.ready(args, &watched, &mut op, &recorders).await?;
    let mut phases = vec![ready.figures];
    let mut replayed = vec![("ready".to_string(), ready.deployments)];
    if !args.skip_rollout {
        let (figures, deployments) = run.rollout(args, &watched, &mut op, &recorders).await?;
        replayed.push(("rollout".to_string(), deployments));
        phases.push(figures);
    }
    drop(watched);
    phases.push(run.restart(n, op).await?);

    let rollout_weight_loads = replayed
        .iter()
        .find(|(phase, _)| phase == "rollout")
        .map(|(_, deployments)| weight_loads(deployments));
    let worker_pods = recorders.iter().map(|r| r.pods_created(0)).sum();
    println!(
        "bench: the operator's objects: {}",
        floor::summary(&recorders)
    );
    let mut recorded: Vec<floor::Recorded> =
        recorders.into_iter().map(floor::Recorder::stop).collect();
    if let Some(file) = &args.record {
        let recording = Recording {
            resources: n,
            operator: operator.display().to_string(),
            phases: phases.clone(),
            replayed,
            namespaces: recorded,
        };
        write_recording(file, &recording)?;
        (replayed, recorded) = (recording.replayed, recording.namespaces);
    }
    delete_all(client, namespaces, timeout).await?;
    let operator_namespaces_left = namespaces_left(client, &run.names).await?;
    println!(
        "bench: {operator_namespaces_left} of the operator's namespaces left after emptying them"
    );
    let (floor_ratio, writes_by_cause) = if args.no_floor {
        (BTreeMap::new(), BTreeMap::new())
    } else {
        floor_phases(
            client,
            recorded,
            &replayed,
            0,
            agent.id(),
            timeout,
            &mut phases,
        )
        .await?
    };

    let delta = (ready.memory.0 - idle.0) * 1024.0 * 1024.0;
    let anon_delta = (ready.memory.1 - idle.1) * 1024.0 * 1024.0;
    Ok(Figures {
        resources: n,
        namespaces: run.names.len(),
        worker_pods,
        nodes: agent.nodes,
        operator: operator.display().to_string(),
        nodes_ready_seconds: 0.0,
        node_agent_register_cpu_seconds: 0.0,
        operator_rss_idle_mib: idle.0,
        operator_rss_ready_mib: ready.memory.0,
        bytes_per_resource: delta / n as f64,
        bytes_per_pod: delta / worker_pods.max(1) as f64,
        operator_anon_idle_mib: idle.1,
        operator_anon_ready_mib: ready.memory.1,
        anon_bytes_per_resource: anon_delta / n as f64,
        anon_bytes_per_pod: anon_delta / worker_pods.max(1) as f64,
        caches: ready.caches,
        phases,
        floor_ratio,
        writes_by_cause,
        operator_namespaces_left,
        rollout_weight_loads,
    })
}

/// Weight loads of a phase: starts of a group's rank-0 engine of the resources' current revision.
#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct WeightLoads {
    /// Of acceptance runs.
    acceptance: usize,
    /// Of serving groups.
    serving: usize,
    /// Both, per resource.
    per_resource: f64,
}

/// Weight loads of `deployments`' current revisions, as the bench's node agent counted them:
/// each start of a group's rank-0 engine, the acceptance run's and the serving groups'. Printed.
fn weight_loads(deployments: &[DeepInferDeployment]) -> WeightLoads {
    let current: std::collections::BTreeSet<(String, String, String)> = deployments
        .iter()
        .filter_map(|d| {
            Some((
                d.namespace()?,
                d.name_any(),
                d.status.as_ref()?.revision.clone()?,
            ))
        })
        .collect();
    let starts = deepinfer_e2e::support::engine_starts_in(
        &deepinfer_e2e::support::bed_dir().join(bed::STATE_DIR),
    );
    let loads: Vec<_> = starts
        .iter()
        .filter(|s| s.rank.as_deref() == Some("0"))
        .filter(|s| {
            current.contains(&(
                s.namespace.clone().unwrap_or_default(),
                s.deployment.clone(),
                s.revision.clone().unwrap_or_default(),
            ))
        })
        .collect();
    let of = |component: &str| {
        loads
            .iter()
            .filter(|s| s.component.as_deref() == Some(component))
            .count()
    };
    let counted = WeightLoads {
        acceptance: of("acceptance"),
        serving: of("worker"),
        per_resource: loads.len() as f64 / deployments.len().max(1) as f64,
    };
    println!(
        "bench: rollout: weight loads of the new revision per resource: {:.2} ({} acceptance, {} serving in all; offline acceptance)",
        counted.per_resource, counted.acceptance, counted.serving
    );
    counted
}

/// The namespaces of `n` resources, at most `per_namespace` in each.
async fn open_namespaces(client: &Client, n: usize, per_namespace: usize) -> Vec<TestNamespace> {
    let mut namespaces = Vec::new();
    for _ in 0..n.div_ceil(per_namespace.max(1)) {
        namespaces.push(bench_namespace(client, "bench").await);
    }
    namespaces
}

/// The operator's side of the run: its namespaces, and how its process is started.
struct OperatorRun<'a> {
    client: &'a Client,
    operator: &'a Path,
    agent: u32,
    names: Vec<String>,
    apis: Vec<Api<DeepInferDeployment>>,
    address: SocketAddr,
    log: PathBuf,
    timeout: Duration,
}

/// What the `ready` phase measured beyond its figures.
struct Ready {
    figures: PhaseFigures,
    /// The deployments as the operator left them, for the floor.
    deployments: Vec<DeepInferDeployment>,
    /// The operator's memory (resident, anonymous) with every resource Ready.
    memory: (f64, f64),
    caches: Vec<KindFootprint>,
}

impl<'a> OperatorRun<'a> {
    fn new(
        client: &'a Client,
        operator: &'a Path,
        agent: u32,
        namespaces: &[TestNamespace],
        logs: &Path,
        timeout: Duration,
    ) -> Self {
        let names: Vec<String> = namespaces.iter().map(|ns| ns.name.clone()).collect();
        Self {
            client,
            operator,
            agent,
            apis: names
                .iter()
                .map(|ns| Api::namespaced(client.clone(), ns))
                .collect(),
            names,
            address: free_address(),
            log: logs.join("operator.log"),
            timeout,
        }
    }

    /// The operator watches its one namespace, else every namespace; its caches are measured so.
    fn scope(&self) -> Option<&str> {
        match self.names.as_slice() {
            [one] => Some(one.as_str()),
            _ => None,
        }
    }

    fn start(&self) -> OperatorProcess {
        OperatorProcess::start_binary(
            self.operator,
            self.scope(),
            self.address,
            &[],
            &[("RUST_LOG", "warn")],
            Some(&self.log),
        )
    }

    /// Phase `ready`: every resource to Ready.
    async fn ready(
        &self,
        args: &Args,
        watched: &Watched,
        op: &mut OperatorProcess,
        recorders: &[floor::Recorder],
    ) -> anyhow::Result<Ready> {
        let n = args.resources;
        let mut probe = Probe::start("ready", n, (op.id(), self.address), self.agent).await;
        create_all(&self.apis, n, args.client_concurrency).await?;
        wait_all(watched, n, self.timeout, &mut probe, Some(op), converged).await?;
        let deployments = floor::deployments(self.client, &self.names).await?;
        recorders.iter().for_each(floor::Recorder::next_phase);
        let figures = probe.finish().await.printed();
        let heap = figures
            .operator_heap_mib
            .map_or(f64::NAN, |[allocated, ..]| allocated);
        let memory = memory(op);
        let caches = footprint::printed(footprint::measure(self.client, self.scope()).await?, heap);
        Ok(Ready {
            figures,
            deployments,
            memory,
            caches,
        })
    }

    /// Phase `rollout`: a new revision everywhere; returns the phase's figures and the
    /// deployments as the operator left them.
    async fn rollout(
        &self,
        args: &Args,
        watched: &Watched,
        op: &mut OperatorProcess,
        recorders: &[floor::Recorder],
    ) -> anyhow::Result<(PhaseFigures, Vec<DeepInferDeployment>)> {
        let n = args.resources;
        let current = floor::deployments(self.client, &self.names).await?;
        let before: BTreeMap<String, Option<String>> = current
            .iter()
            .map(|d| {
                (
                    d.name_any(),
                    d.status.as_ref().and_then(|s| s.revision.clone()),
                )
            })
            .collect();
        let mut probe = Probe::start("rollout", n, (op.id(), self.address), self.agent).await;
        roll_all(self.client, &current, args.client_concurrency).await?;
        wait_all(watched, n, self.timeout, &mut probe, Some(op), |d| {
            let revision = d.status.as_ref().and_then(|s| s.revision.clone());
            revision.is_some() && before.get(&d.name_any()) != Some(&revision) && converged(d)
        })
        .await?;
        let deployments = floor::deployments(self.client, &self.names).await?;
        recorders.iter().for_each(floor::Recorder::next_phase);
        Ok((probe.finish().await.printed(), deployments))
    }

    /// Phase `restart`: the operator restarted over the converged set, every resource reconciled
    /// again from the list; converged once as many passes ended as there are resources. Stops the
    /// operator.
    async fn restart(&self, n: usize, mut op: OperatorProcess) -> anyhow::Result<PhaseFigures> {
        let status = op.terminate(Duration::from_secs(30));
        anyhow::ensure!(status.success(), "the operator exited with {status}");
        let mut op = self.start();
        let mut probe = Probe::start_fresh("restart", n, op.id(), self.address, self.agent);
        loop {
            probe.sample().await;
            let text = metrics(self.address, &mut op).await;
            if probe::passes_ended(&text) >= n as f64 {
                break;
            }
            anyhow::ensure!(
                probe.elapsed() < self.timeout,
                "fewer than {n} reconcile passes ended after the restart within {:?}",
                self.timeout
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // What follows the first pass over each (requeues, late events) belongs to the phase too.
        let converged_at = probe.elapsed();
        tokio::time::sleep(Duration::from_secs(5)).await;
        probe.sample().await;
        let mut restart = probe.finish().await;
        restart.seconds = converged_at.as_secs_f64();
        let restart = restart.printed();
        op.terminate(Duration::from_secs(30));
        Ok(restart)
    }
}

/// The floor's phases from `replayed[start]` on (`floor-ready`, `floor-rollout`; with `start`
/// above 0 `floor-setup` first, see [`floor::run`]), in a fresh namespace for each of the
/// operator's: appends them to `phases`, the operator's, and returns operator time ÷ floor time
/// and the writes by cause for each phase both sides ran.
async fn floor_phases(
    client: &Client,
    recorded: Vec<floor::Recorded>,
    replayed: &[(String, Vec<DeepInferDeployment>)],
    start: usize,
    agent: u32,
    timeout: Duration,
    phases: &mut Vec<PhaseFigures>,
) -> anyhow::Result<FloorFigures> {
    let mut floor_namespaces = Vec::new();
    for _ in &recorded {
        floor_namespaces.push(bench_namespace(client, "floor").await);
    }
    let pairs = floor_namespaces
        .iter()
        .map(|ns| ns.name.clone())
        .zip(recorded)
        .collect();
    let floor_phases = floor::run(pairs, replayed, start, agent, timeout).await?;
    let mut floor_ratio = BTreeMap::new();
    let mut by_cause = BTreeMap::new();
    for floor_phase in &floor_phases {
        let Some(operator_phase) = phases
            .iter()
            .find(|p| floor_phase.name.strip_prefix("floor-") == Some(p.name.as_str()))
        else {
            continue;
        };
        let name = operator_phase.name.clone();
        floor_ratio.insert(name.clone(), operator_phase.seconds / floor_phase.seconds);
        let causes = writes_by_cause(operator_phase, floor_phase);
        println!("bench: writes per resource by cause, {name} (operator / floor / difference):");
        for (cause, [op, fl]) in &causes {
            println!(
                "bench:   {cause:<28} {op:>7.2} / {fl:>6.2} / {:>+7.2}",
                op - fl
            );
        }
        println!(
            "bench:   {:<28} {:>7.2} / {:>6.2} / {:>+7.2} (operator ÷ floor {:.2})",
            "all writes",
            operator_phase.writes_per_resource,
            floor_phase.writes_per_resource,
            operator_phase.writes_per_resource - floor_phase.writes_per_resource,
            operator_phase.writes_per_resource / floor_phase.writes_per_resource
        );
        by_cause.insert(name, causes);
    }
    phases.extend(floor_phases);
    delete_all(client, floor_namespaces, timeout).await?;
    Ok((floor_ratio, by_cause))
}

/// Operator ÷ floor time per phase, and writes by cause per phase.
type FloorFigures = (
    BTreeMap<String, f64>,
    BTreeMap<String, BTreeMap<&'static str, [f64; 2]>>,
);

/// The cause of a write, from its `"verb resource"`: the deployments' status, the pods'
/// `deepinfer.io/accepted` condition, Events, creates, deletes, and other patches (server-side
/// applies, which create an object as a patch too, annotations, rank tables, a finished Job's
/// time to live). `None`: not a write.
fn cause(request: &str) -> Option<&'static str> {
    let (verb, resource) = request.split_once(' ')?;
    Some(match (verb, resource) {
        ("get" | "list" | "watch", _) => return None,
        (_, "events") => "events",
        ("patch" | "update", "deepinferdeployments/status") => "status writes",
        ("patch" | "update", "pods/status") => "pod-condition patches",
        ("create", _) => "creates",
        ("delete" | "deletecollection", _) => "deletes",
        ("patch" | "update", _) => "other patches and applies",
        _ => "other writes",
    })
}

/// Writes per resource by cause: the operator's and the floor's.
fn writes_by_cause(
    operator: &PhaseFigures,
    floor: &PhaseFigures,
) -> BTreeMap<&'static str, [f64; 2]> {
    let mut causes: BTreeMap<&'static str, [f64; 2]> = BTreeMap::new();
    for (side, phase) in [operator, floor].into_iter().enumerate() {
        for (request, per_resource) in &phase.requests_per_resource {
            if let Some(cause) = cause(request) {
                causes.entry(cause).or_default()[side] += per_resource;
            }
        }
    }
    causes
}

/// How many of the namespaces `names` still exist (deleted or not).
async fn namespaces_left(client: &Client, names: &[String]) -> anyhow::Result<usize> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut left = 0;
    for name in names {
        if namespaces.get_opt(name).await?.is_some() {
            left += 1;
        }
    }
    Ok(left)
}

/// Deletes benchmark namespaces, all at once, and waits until they are gone.
async fn delete_all(
    client: &Client,
    namespaces: Vec<TestNamespace>,
    timeout: Duration,
) -> anyhow::Result<()> {
    futures::future::try_join_all(
        namespaces
            .into_iter()
            .map(|ns| delete_and_wait(client, ns, timeout)),
    )
    .await?;
    Ok(())
}

/// Deletes a benchmark namespace and waits until it is gone: first its pods (so that the next
/// phase has the devices back), then everything else in it. The next phase starts on a bed that
/// is no longer busy finalising the namespace's objects (Services releasing their cluster IPs,
/// Jobs, ConfigMaps), which would otherwise slow it down and time out its requests.
async fn delete_and_wait(
    client: &Client,
    ns: TestNamespace,
    timeout: Duration,
) -> anyhow::Result<()> {
    let name = ns.name.clone();
    drop(ns);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    match namespaces.delete(&name, &Default::default()).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        other => {
            other?;
        }
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &name);
    let start = Instant::now();
    loop {
        let left = pods
            .list_metadata(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if left == 0 {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < timeout,
            "{left} pods of {name} left after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let pods_gone = start.elapsed();
    while namespaces.get_opt(&name).await?.is_some() {
        anyhow::ensure!(
            start.elapsed() < timeout,
            "namespace {name} still there after {timeout:?}, its pods gone"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "bench: namespace {name} emptied in {:.1} s (its pods gone in {:.1} s)",
        start.elapsed().as_secs_f64(),
        pods_gone.as_secs_f64()
    );
    Ok(())
}

fn print_figures(f: &Figures) {
    println!(
        "bench: {} resources in {} namespaces, {} worker pods, {} nodes (Ready in {:.1} s, the agent used {:.1} CPU s registering them)",
        f.resources, f.namespaces, f.worker_pods, f.nodes, f.nodes_ready_seconds, f.node_agent_register_cpu_seconds
    );
    println!(
        "bench: operator memory {:.1} MiB idle, {:.1} MiB with {} Ready resources: {:.0} bytes per resource, {:.0} bytes per worker pod (the same growth divided both ways)",
        f.operator_rss_idle_mib, f.operator_rss_ready_mib, f.resources, f.bytes_per_resource, f.bytes_per_pod
    );
    println!(
        "bench: of which anonymous (heap and stacks; the rest is the binary's code as it is touched) {:.1} MiB idle, {:.1} MiB with {} Ready resources: {:.0} bytes per resource, {:.0} bytes per worker pod",
        f.operator_anon_idle_mib, f.operator_anon_ready_mib, f.resources, f.anon_bytes_per_resource, f.anon_bytes_per_pod
    );
    for (phase, ratio) in &f.floor_ratio {
        println!("bench: {phase}: operator time / floor time = {ratio:.2}");
    }
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn a_spread_is_the_median_with_the_least_and_greatest() {
        let s = Spread::of(vec![1.2, 0.9, 1.0]);
        assert_eq!((s.median, s.least, s.greatest), (1.0, 0.9, 1.2));
        assert_eq!(s.each, [1.2, 0.9, 1.0], "each run in its order");
        assert_eq!(Spread::of(vec![1.0, 2.0]).median, 1.5);
    }
}
