//! Reliability under faults, measured on the test bed (`make chaos`; a short version runs in
//! `make test`). Every scenario runs beside the invariant monitor (`e2e/src/monitor.rs`) and
//! prints one row: faults injected, time to converge after each, violations, operator restarts
//! and panics. Exits non-zero when a scenario saw a violation or a panic or did not converge.
//!
//! Scenarios:
//! - `operator-sigkill`: N deployments go create → Ready → revision change → scale → delete
//!   while the operator process is SIGKILLed at random moments and started again;
//! - `leader-kill`: two replicas with leader election while deployments roll out and scale; the
//!   leader is SIGKILLed repeatedly (a new standby starts each time). Take-over is measured from
//!   the kill to the standby's `acquireTime` (goal: lease duration + 2 s), and the bed's audit log
//!   (writes by User-Agent, which names the replica) proves that no replica wrote while another
//!   held the Lease;
//! - `node-loss`: the node of one serving group stops its heartbeats, then its Node object is
//!   deleted; the group comes back whole on other capacity and the other group keeps its pod
//!   (`make chaos` only: it restarts the bed's node agent to bring the node back);
//! - `control-plane-restart`: kube-apiserver restarted during a revision change, then etcd; the
//!   operator must reconnect and converge without restarting (`make chaos` only: it disturbs every
//!   other client of the bed);
//! - `hostile-specs`: generated invalid or hostile specs applied through the real API beside valid
//!   neighbours; each is refused by the API server with a field path or stalls naming a field,
//!   with zero operator panics or restarts, and the neighbours converge.
//!
//! Usage: `deepinfer-chaos [--short] [--scenarios a,b] [--seed N]` against the running bed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use deepinfer_e2e::monitor::{Limits, Monitor, Violation};
use deepinfer_e2e::operator_process::{free_address, OperatorProcess};
use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::api::DeepInferDeployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(about = "Fault scenarios on the test bed, measured beside the invariant monitor")]
struct Args {
    /// The quick version `make test` runs: fewer deployments, kills and specs, no control-plane
    /// restart.
    #[arg(long)]
    short: bool,
    /// Scenarios to run (default: all; with --short, all but control-plane-restart).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Seed of the random moments and generated specs (default: the clock); printed.
    #[arg(long)]
    seed: Option<u64>,
    /// Operator binary (default: target/debug/deepinfer-operator).
    #[arg(long)]
    operator: Option<PathBuf>,
}

/// One scenario's row.
struct Row {
    scenario: &'static str,
    faults: usize,
    converge: Vec<f64>,
    violations: Vec<Violation>,
    restarts: usize,
    panics: usize,
    failures: Vec<String>,
}

impl Row {
    fn new(scenario: &'static str) -> Self {
        Self {
            scenario,
            faults: 0,
            converge: Vec::new(),
            violations: Vec::new(),
            restarts: 0,
            panics: 0,
            failures: Vec::new(),
        }
    }

    fn ok(&self) -> bool {
        self.violations.is_empty() && self.panics == 0 && self.failures.is_empty()
    }
}

/// xorshift64*: reproducible random moments and specs from a printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const LICENSES: &[&str] = &["mit"];

/// Address space an operator under chaos may reserve (its resident set is far smaller).
const OPERATOR_ADDRESS_SPACE: u64 = 4 << 30;

/// A one-group deployment of one pod with one GPU, accepted by the stand-in engine.
fn deployment(name: &str, commit: &str, replicas: i32) -> Value {
    let mut did = support::licensed_deployment(
        name,
        json!({"type": "NVIDIA", "devicesPerPod": 1}),
        json!([{"name": "worker", "replicas": replicas, "parallel": {"tensor": 1}}]),
    );
    did["spec"]["runtime"] = json!({
        "image": format!("registry.example.com/deepinfer@sha256:{}", "0a".repeat(32)),
        "commit": commit,
    });
    did
}

fn ready_now(d: &DeepInferDeployment) -> bool {
    d.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == "Ready"
                && c.status == "True"
                && c.observed_generation == d.metadata.generation
        })
    })
}

/// Polls `goal` every 250 ms until it holds or `timeout` passes; the seconds it took.
async fn converge<F, Fut>(timeout: Duration, mut goal: F) -> Option<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < timeout {
        if goal().await {
            return Some(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// Operator panics recorded in its log.
fn panics_in(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.matches("panicked at").count())
        .unwrap_or(0)
}

struct Bed {
    client: Client,
    binary: PathBuf,
}

impl Bed {
    /// Starts the operator with its address space capped at [`OPERATOR_ADDRESS_SPACE`], so an
    /// operator that would grow without bound fails here (an allocation failure ends it, counted
    /// as an exit) instead of taking the machine's memory.
    fn operator(&self, ns: &str, log: &std::path::Path) -> OperatorProcess {
        self.operator_with(ns, log, &[], &[])
    }

    /// As [`Bed::operator`], with extra arguments and environment.
    fn operator_with(
        &self,
        ns: &str,
        log: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> OperatorProcess {
        let mut vars = vec![("RUST_LOG", "info")];
        vars.extend_from_slice(env);
        let operator = OperatorProcess::start_binary(
            &self.binary,
            Some(ns),
            free_address(),
            extra,
            &vars,
            Some(log),
        );
        let capped = Command::new("prlimit")
            .args(["--pid", &operator.id().to_string()])
            .arg(format!("--as={OPERATOR_ADDRESS_SPACE}"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            capped,
            "prlimit (util-linux) could not cap the operator's memory"
        );
        operator
    }
}

/// The phases every deployment goes through, with the goal that ends each.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Create,
    Rollout,
    Scale,
    Delete,
}

async fn act(api: &Api<DeepInferDeployment>, names: &[String], phase: Phase) {
    let pp = PatchParams::default();
    for name in names {
        match phase {
            Phase::Create => {
                let did: DeepInferDeployment = serde_json::from_value(deployment(
                    name,
                    "0123456789abcdef0123456789abcdef01234567",
                    1,
                ))
                .expect("valid deployment");
                api.create(&PostParams::default(), &did)
                    .await
                    .expect("create");
            }
            Phase::Rollout => {
                let patch = json!({"spec": {"runtime": {"commit": "89abcdef0123456789abcdef0123456789abcdef"}}});
                api.patch(name, &pp, &Patch::Merge(patch))
                    .await
                    .expect("rollout");
            }
            Phase::Scale => {
                let patch = json!({"spec": {"roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 1}}]}});
                api.patch(name, &pp, &Patch::Merge(patch))
                    .await
                    .expect("scale");
            }
            Phase::Delete => {
                let _ = api.delete(name, &DeleteParams::default()).await;
            }
        }
    }
}

async fn reached(client: &Client, ns: &str, names: &[String], phase: Phase) -> bool {
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), ns);
    let Ok(list) = api.list(&ListParams::default()).await else {
        return false;
    };
    match phase {
        Phase::Delete => {
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
            let workers = pods
                .list(&ListParams::default().labels("deepinfer.io/component=worker"))
                .await
                .map(|l| l.items.len())
                .unwrap_or(usize::MAX);
            list.items.is_empty() && workers == 0
        }
        _ => {
            let ready: BTreeSet<String> = list
                .items
                .iter()
                .filter(|d| ready_now(d))
                .map(|d| d.name_any())
                .collect();
            names.iter().all(|n| ready.contains(n))
        }
    }
}

async fn operator_sigkill(bed: &Bed, rng: &mut Rng, deployments: usize, kills: usize) -> Row {
    let mut row = Row::new("operator-sigkill");
    let ns = TestNamespace::new(&bed.client, "chaos-kill").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let monitor = Monitor::start(&bed.client, &ns.name, LICENSES, Limits::default());
    let log = std::env::temp_dir().join(format!("deepinfer-chaos-{}.log", ns.name));
    let mut operator = bed.operator(&ns.name, &log);
    let api: Api<DeepInferDeployment> = Api::namespaced(bed.client.clone(), &ns.name);
    let names: Vec<String> = (0..deployments).map(|i| format!("c{i:02}")).collect();
    let phases = [Phase::Create, Phase::Rollout, Phase::Scale, Phase::Delete];
    for (p, phase) in phases.iter().enumerate() {
        act(&api, &names, *phase).await;
        // Spread the kills over the phases.
        let here = kills / phases.len() + usize::from(p < kills % phases.len());
        for _ in 0..here {
            tokio::time::sleep(Duration::from_millis(rng.below(2500))).await;
            operator.kill_hard();
            row.faults += 1;
            operator = bed.operator(&ns.name, &log);
            row.restarts += 1;
            match converge(Duration::from_secs(180), || {
                reached(&bed.client, &ns.name, &names, *phase)
            })
            .await
            {
                Some(s) => row.converge.push(s),
                None => row.failures.push(format!(
                    "{phase:?}: did not converge within 180 s after a kill"
                )),
            }
        }
        phase_converged(bed, &ns.name, &names, *phase, &mut row).await;
    }
    // Orphans are judged 30 s after deletion.
    tokio::time::sleep(Duration::from_secs(32)).await;
    drop(operator);
    row.violations = monitor.stop().await;
    row.panics = panics_in(&log);
    row
}

/// Who held the Lease from when: (holder, acquireTime), in order, as sampled.
type Leadership = Vec<(String, k8s_openapi::jiff::Timestamp)>;

/// Samples the Lease `ns/name` every 100 ms and records each new (holder, acquireTime).
fn watch_leadership(
    client: &Client,
    ns: &str,
    name: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<Leadership>>,
    tokio::task::JoinHandle<()>,
) {
    use k8s_openapi::api::coordination::v1::Lease;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Leadership::new()));
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let (name, out) = (name.to_string(), seen.clone());
    let task = tokio::spawn(async move {
        loop {
            if let Ok(Some(lease)) = api.get_opt(&name).await {
                let spec = lease.spec.unwrap_or_default();
                if let (Some(holder), Some(at)) = (spec.holder_identity, spec.acquire_time) {
                    if let Ok(mut seen) = out.lock() {
                        if seen.last().is_none_or(|(h, t)| *h != holder || *t != at.0) {
                            seen.push((holder, at.0));
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (seen, task)
}

/// The Lease the replicas of the leader-kill scenario elect their leader with.
const LEADER_LEASE: &str = "deepinfer-chaos-leader";

/// The operator replicas of the leader-kill scenario, each with its identity (`replica-<n>`).
struct Replicas<'a> {
    bed: &'a Bed,
    ns: &'a str,
    log: &'a std::path::Path,
    running: Vec<(String, OperatorProcess)>,
    started: usize,
}

impl Replicas<'_> {
    /// Starts one more replica with leader election.
    fn start(&mut self) {
        let identity = format!("replica-{}", self.started);
        let process = self.bed.operator_with(
            self.ns,
            self.log,
            &[
                "--leader-elect",
                "--leader-election-id",
                LEADER_LEASE,
                "--leader-election-namespace",
                self.ns,
            ],
            &[("POD_NAME", &identity)],
        );
        self.running.push((identity, process));
        self.started += 1;
    }
}

/// Two replicas with leader election; the leader SIGKILLed `kills` times (a new standby started
/// each time) while deployments roll out and scale. Measures the take-over (kill → the standby's
/// acquireTime; the goal is lease duration + 2 s) and proves from the audit log that every write
/// came from the replica holding the Lease at that moment.
async fn leader_kill(bed: &Bed, rng: &mut Rng, deployments: usize, kills: usize) -> Row {
    let mut row = Row::new("leader-kill");
    let ns = TestNamespace::new(&bed.client, "chaos-leader").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let monitor = Monitor::start(&bed.client, &ns.name, LICENSES, Limits::default());
    let log = std::env::temp_dir().join(format!("deepinfer-chaos-{}.log", ns.name));
    let since = k8s_openapi::jiff::Timestamp::now();
    let (leadership, sampler) = watch_leadership(&bed.client, &ns.name, LEADER_LEASE);
    let mut replicas = Replicas {
        bed,
        ns: &ns.name,
        log: &log,
        running: Vec::new(),
        started: 0,
    };
    replicas.start();
    replicas.start();
    let api: Api<DeepInferDeployment> = Api::namespaced(bed.client.clone(), &ns.name);
    let names: Vec<String> = (0..deployments).map(|i| format!("l{i:02}")).collect();
    let phases = [Phase::Create, Phase::Rollout, Phase::Scale, Phase::Delete];
    for (p, phase) in phases.iter().enumerate() {
        act(&api, &names, *phase).await;
        let here = kills / phases.len() + usize::from(p < kills % phases.len());
        for _ in 0..here {
            tokio::time::sleep(Duration::from_millis(rng.below(2500))).await;
            kill_leader(&mut replicas, &leadership, &monitor, &mut row).await;
        }
        phase_converged(bed, &ns.name, &names, *phase, &mut row).await;
    }
    tokio::time::sleep(Duration::from_secs(32)).await;
    drop(replicas);
    sampler.abort();
    row.violations = monitor.stop().await;
    row.panics = panics_in(&log);
    let leaders = leadership.lock().map(|l| l.clone()).unwrap_or_default();
    check_writes_by_leader(&ns.name, since, &leaders, &mut row);
    row
}

/// SIGKILLs the replica holding the Lease and starts a new standby; the take-over (kill → the
/// successor's acquireTime) may take the lease duration + 2 s.
async fn kill_leader(
    replicas: &mut Replicas<'_>,
    leadership: &std::sync::Mutex<Leadership>,
    monitor: &Monitor,
    row: &mut Row,
) {
    const LEASE_SECONDS: f64 = 15.0;
    let Some(leader) = support::lease_holder(&replicas.bed.client, replicas.ns, LEADER_LEASE).await
    else {
        row.failures.push("no leader to kill".into());
        return;
    };
    let Some(at) = replicas.running.iter().position(|(id, _)| *id == leader) else {
        row.failures
            .push(format!("the Lease names {leader}, which is not running"));
        return;
    };
    let (_, mut process) = replicas.running.remove(at);
    monitor.outage_started(Instant::now());
    process.kill_hard();
    let killed = k8s_openapi::jiff::Timestamp::now();
    row.faults += 1;
    replicas.start();
    row.restarts += 1;
    // Take-over: the next holder's acquireTime after the kill.
    let took = converge(Duration::from_secs(60), || async {
        leadership
            .lock()
            .map(|l| l.iter().any(|(h, t)| *h != leader && *t > killed))
            .unwrap_or(false)
    })
    .await;
    let acquired = leadership.lock().ok().and_then(|l| {
        l.iter()
            .find(|(h, t)| *h != leader && *t > killed)
            .map(|(_, t)| *t)
    });
    // Until a successor leads, no operator can act on anything.
    monitor.outage_ended(Instant::now());
    match (took, acquired) {
        (Some(_), Some(t)) => {
            let seconds = t.duration_since(killed).as_secs_f64();
            row.converge.push(seconds);
            if seconds > LEASE_SECONDS + 2.0 {
                row.failures.push(format!(
                    "take-over after killing {leader} took {seconds:.1} s (lease {LEASE_SECONDS} s + 2 s)"
                ));
            }
        }
        _ => row.failures.push(format!(
            "no replica took over within 60 s after killing {leader}"
        )),
    }
}

/// Every write in namespace `ns` since `since` (the audit log) came from the replica that held
/// the Lease when it was sent, as `leaders` sampled it.
fn check_writes_by_leader(
    ns: &str,
    since: k8s_openapi::jiff::Timestamp,
    leaders: &Leadership,
    row: &mut Row,
) {
    let writes = deepinfer_e2e::audit::replica_writes(ns, since);
    if writes.is_empty() {
        row.failures
            .push("the audit log shows no write by any replica".into());
    }
    let mut by_non_leader = 0;
    for deepinfer_e2e::audit::ReplicaWrite {
        replica,
        at,
        verb,
        object,
    } in &writes
    {
        let holder = leaders
            .iter()
            .rev()
            .find(|(_, t)| t <= at)
            .map(|(h, _)| h.as_str());
        if holder != Some(replica.as_str()) {
            by_non_leader += 1;
            if by_non_leader <= 5 {
                row.failures.push(format!(
                    "{replica} wrote ({verb} {object}) at {at} while {} held the Lease",
                    holder.unwrap_or("no replica")
                ));
            }
        }
    }
    println!(
        "leader-kill: {} writes in the audit log, {by_non_leader} by a replica not holding the Lease; {} leadership changes",
        writes.len(),
        leaders.len()
    );
}

/// A node lost while serving: the node of one group stops its heartbeats (NotReady), then its
/// Node object is deleted. The group is recreated whole on other capacity, the other group keeps
/// its pod, and the bed's node agent is restarted afterwards to bring the node back.
async fn node_loss(bed: &Bed) -> Row {
    let mut row = Row::new("node-loss");
    let ns = TestNamespace::new(&bed.client, "chaos-node").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let monitor = Monitor::start(&bed.client, &ns.name, LICENSES, Limits::default());
    let log = std::env::temp_dir().join(format!("deepinfer-chaos-{}.log", ns.name));
    let operator = bed.operator(&ns.name, &log);
    let api: Api<DeepInferDeployment> = Api::namespaced(bed.client.clone(), &ns.name);
    let names = vec!["lost".to_string()];
    if !two_groups_of_one_node_ready(bed, &api, &ns.name, &names).await {
        row.failures.push("not Ready before the node loss".into());
        return row;
    }
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), &ns.name);
    let before = worker_pods(&pods).await;
    let (Some(victim), Some(survivor)) = (before.first(), before.get(1)) else {
        row.failures
            .push(format!("{} worker pods, not 2", before.len()));
        return row;
    };
    let (lost_node, survivor_uid) = (node_of(victim).unwrap_or_default(), survivor.uid());
    let lost_at = lose_node(bed, &lost_node, &mut row).await;
    // The group is back whole on another node, the other group untouched.
    let recovered = converge(Duration::from_secs(240), || async {
        let now = worker_pods(&pods).await;
        let live: Vec<&Pod> = now
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.len() == 2
            && live
                .iter()
                .all(|p| node_of(p).as_deref() != Some(lost_node.as_str()))
            && live.iter().any(|p| p.uid() == survivor_uid)
            && reached(&bed.client, &ns.name, &names, Phase::Create).await
    })
    .await;
    match recovered {
        Some(_) => row.converge.push(lost_at.elapsed().as_secs_f64()),
        None => row.failures.push(format!(
            "the group on {lost_node} was not recreated elsewhere with the other group untouched within 240 s"
        )),
    }
    // The other group kept its pod all along.
    if !worker_pods(&pods)
        .await
        .iter()
        .any(|p| p.uid() == survivor_uid)
    {
        row.failures
            .push("the group on a healthy node was replaced too".into());
    }
    let _ = api.delete("lost", &DeleteParams::default()).await;
    tokio::time::sleep(Duration::from_secs(32)).await;
    drop(operator);
    row.violations = monitor.stop().await;
    row.panics = panics_in(&log);
    bring_node_back(bed, &lost_node, &mut row).await;
    row
}

/// Creates deployment `lost` of two groups of one 8-GPU pod (one node each); whether it is
/// Ready within 180 s.
async fn two_groups_of_one_node_ready(
    bed: &Bed,
    api: &Api<DeepInferDeployment>,
    ns: &str,
    names: &[String],
) -> bool {
    let mut did = deployment("lost", "0123456789abcdef0123456789abcdef01234567", 2);
    did["spec"]["accelerator"]["devicesPerPod"] = json!(8);
    did["spec"]["roles"] = json!([{"name": "worker", "replicas": 2, "parallel": {"tensor": 8}}]);
    let did: DeepInferDeployment = serde_json::from_value(did).expect("valid deployment");
    api.create(&PostParams::default(), &did)
        .await
        .expect("create");
    converge(Duration::from_secs(180), || {
        reached(&bed.client, ns, names, Phase::Create)
    })
    .await
    .is_some()
}

/// The worker pods in the namespace of `pods` (none if the list fails).
async fn worker_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("deepinfer.io/component=worker"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// Whether node `name` reports a Ready condition that is `True` (`ready`) or not (`!ready`).
async fn node_ready_is(nodes: &Api<Node>, name: &str, ready: bool) -> bool {
    nodes.get(name).await.ok().is_some_and(|n| {
        n.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && (c.status == "True") == ready)
    })
}

/// Stops the heartbeats of node `lost_node` until it is NotReady, then deletes its Node object;
/// returns when the loss began.
async fn lose_node(bed: &Bed, lost_node: &str, row: &mut Row) -> Instant {
    use deepinfer_e2e::faults;
    let nodes: Api<Node> = Api::all(bed.client.clone());
    let annotate = json!({"metadata": {"annotations": {faults::NODE_NOT_READY: "true"}}});
    let _ = nodes
        .patch(lost_node, &PatchParams::default(), &Patch::Merge(annotate))
        .await;
    row.faults += 1;
    let lost_at = Instant::now();
    let not_ready = converge(Duration::from_secs(120), || {
        node_ready_is(&nodes, lost_node, false)
    })
    .await;
    if not_ready.is_none() {
        row.failures
            .push(format!("{lost_node} never went NotReady"));
    }
    let _ = nodes.delete(lost_node, &DeleteParams::default()).await;
    row.faults += 1;
    lost_at
}

/// Brings node `lost_node` back: the agent registers its nodes again when it starts.
async fn bring_node_back(bed: &Bed, lost_node: &str, row: &mut Row) {
    if !bed_script("restart.sh", &["node-agent"]) {
        row.failures.push("restarting the node agent failed".into());
    }
    let nodes: Api<Node> = Api::all(bed.client.clone());
    let back = converge(Duration::from_secs(60), || {
        node_ready_is(&nodes, lost_node, true)
    })
    .await;
    if back.is_none() {
        row.failures.push(format!(
            "{lost_node} did not come back after the agent restarted"
        ));
    }
}

/// Waits up to 180 s for every deployment to reach `phase`'s goal; a failure on `row` if not.
async fn phase_converged(bed: &Bed, ns: &str, names: &[String], phase: Phase, row: &mut Row) {
    if converge(Duration::from_secs(180), || {
        reached(&bed.client, ns, names, phase)
    })
    .await
    .is_none()
    {
        row.failures
            .push(format!("{phase:?}: did not converge within 180 s"));
    }
}

/// Runs a bed script (`e2e/bed/<script>`) with arguments.
fn bed_script(script: &str, args: &[&str]) -> bool {
    Command::new(support::repo_root().join("e2e/bed").join(script))
        .args(args)
        // The bed this run uses (DEEPINFER_TESTBED), not the checkout's default one.
        .env("TESTBED_DIR", support::bed_dir())
        .status()
        .is_ok_and(|s| s.success())
}

async fn control_plane_restart(bed: &Bed, deployments: usize) -> Row {
    let mut row = Row::new("control-plane-restart");
    let ns = TestNamespace::new(&bed.client, "chaos-cp").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let monitor = Monitor::start(&bed.client, &ns.name, LICENSES, Limits::default());
    let log = std::env::temp_dir().join(format!("deepinfer-chaos-{}.log", ns.name));
    let mut operator = bed.operator(&ns.name, &log);
    let api: Api<DeepInferDeployment> = Api::namespaced(bed.client.clone(), &ns.name);
    let names: Vec<String> = (0..deployments).map(|i| format!("p{i:02}")).collect();
    act(&api, &names, Phase::Create).await;
    if converge(Duration::from_secs(180), || {
        reached(&bed.client, &ns.name, &names, Phase::Create)
    })
    .await
    .is_none()
    {
        row.failures.push("Create: did not converge".into());
    }
    for component in ["kube-apiserver", "etcd"] {
        act(
            &api,
            &names,
            if component == "etcd" {
                Phase::Scale
            } else {
                Phase::Rollout
            },
        )
        .await;
        let goal = if component == "etcd" {
            Phase::Scale
        } else {
            Phase::Rollout
        };
        monitor.outage_started(Instant::now());
        let restarted = bed_script("restart.sh", &[component]);
        // While the API server (or etcd) was down no operator could write anything.
        monitor.outage_ended(Instant::now());
        if !restarted {
            row.failures.push(format!("restarting {component} failed"));
            continue;
        }
        row.faults += 1;
        match converge(Duration::from_secs(240), || {
            reached(&bed.client, &ns.name, &names, goal)
        })
        .await
        {
            Some(s) => row.converge.push(s),
            None => row.failures.push(format!(
                "{goal:?}: did not converge after restarting {component}"
            )),
        }
    }
    if operator.wait_exit(Duration::ZERO).is_some() {
        row.failures
            .push("the operator exited instead of reconnecting".into());
    }
    act(&api, &names, Phase::Delete).await;
    let _ = converge(Duration::from_secs(120), || {
        reached(&bed.client, &ns.name, &names, Phase::Delete)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(32)).await;
    operator.kill_hard();
    row.violations = monitor.stop().await;
    row.panics = panics_in(&log);
    row
}

/// One generated hostile spec: a valid spec with one field made hostile.
fn hostile(rng: &mut Rng, name: &str) -> (String, Value) {
    let mut v = deployment(name, "0123456789abcdef0123456789abcdef01234567", 1);
    let huge = "x".repeat(1 << 20);
    let deep = (0..200).fold(json!(1), |acc, _| json!({"d": acc}));
    let choices: Vec<(&str, Value)> = vec![
        ("/spec/roles/0/replicas", json!(-1)),
        ("/spec/roles/0/replicas", json!(i64::MAX)),
        ("/spec/roles/0/replicas", json!(1_000_000)),
        ("/spec/roles/0/replicas", json!("2")),
        ("/spec/roles/0/replicas", json!(true)),
        ("/spec/roles/0/parallel/tensor", json!(0)),
        ("/spec/roles/0/parallel/tensor", json!(4_294_967_296_i64)),
        ("/spec/roles/0/parallel/expert", json!(3)),
        ("/spec/roles/0/name", json!("router")),
        ("/spec/roles/0/name", json!("wörker")),
        ("/spec/accelerator/type", json!("TPU")),
        ("/spec/accelerator/devicesPerPod", json!(64)),
        ("/spec/accelerator/devicesPerPod", json!(-8)),
        ("/spec/accelerator/product", json!("NVIDIA H200 !!")),
        ("/spec/accelerator/product", json!(huge.clone())),
        (
            "/spec/accelerator/scaleUpDomainKey",
            json!("not a label key"),
        ),
        (
            "/spec/runtime/image",
            json!("registry.example.com/deepinfer:latest"),
        ),
        ("/spec/runtime/image", json!(huge.clone())),
        ("/spec/runtime/image", json!("📦@sha256:zz")),
        ("/spec/runtime/commit", json!("HEAD")),
        ("/spec/runtime/args", json!(vec!["--x"; 10_000])),
        ("/spec/model/name", json!(huge)),
        ("/spec/model/name", json!("")),
        ("/spec/model/license", json!("")),
        ("/spec/model/source", json!({})),
        (
            "/spec/model/source/hub",
            json!({"revision": "main", "claimName": "ckpt"}),
        ),
        ("/spec/acceptance/prompts", json!([])),
        ("/spec/acceptance/prompts/0/structuredOutput", deep),
        ("/spec/acceptance/prompts/0/id", json!("\u{0000}")),
        ("/spec/roles", json!([])),
        ("/spec/roles", json!("worker")),
        ("/metadata/name", json!(format!("{name}.v2"))),
        (
            "/metadata/name",
            json!(format!("{name}-{}", "a".repeat(40))),
        ),
    ];
    let (path, value) = choices[rng.below(choices.len() as u64) as usize].clone();
    if let Some(target) = v.pointer_mut(path) {
        *target = value;
    } else {
        let (parent, key) = path.rsplit_once('/').expect("a path");
        if let Some(obj) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
            obj.insert(key.to_string(), value);
        }
    }
    (path.to_string(), v)
}

async fn hostile_specs(bed: &Bed, rng: &mut Rng, specs: usize, neighbours: usize) -> Row {
    let mut row = Row::new("hostile-specs");
    let ns = TestNamespace::new(&bed.client, "chaos-spec").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let monitor = Monitor::start(&bed.client, &ns.name, LICENSES, Limits::default());
    let log = std::env::temp_dir().join(format!("deepinfer-chaos-{}.log", ns.name));
    let mut operator = bed.operator(&ns.name, &log);
    let api: Api<DeepInferDeployment> = Api::namespaced(bed.client.clone(), &ns.name);
    let names: Vec<String> = (0..neighbours).map(|i| format!("n{i:02}")).collect();
    act(&api, &names, Phase::Create).await;
    let dynamic: Api<kube::api::DynamicObject> = Api::namespaced_with(
        bed.client.clone(),
        &ns.name,
        &deepinfer_operator::controller::api_resource(),
    );
    let mut admitted = Vec::new();
    let (mut refused, mut stalled) = (0usize, 0usize);
    for i in 0..specs {
        let (path, spec) = hostile(rng, &format!("h{i:03}"));
        row.faults += 1;
        let obj: kube::api::DynamicObject = match serde_json::from_value(spec.clone()) {
            Ok(o) => o,
            Err(e) => {
                row.failures
                    .push(format!("h{i:03} ({path}): not an object: {e}"));
                continue;
            }
        };
        match dynamic.create(&PostParams::default(), &obj).await {
            Ok(created) => admitted.push((created.name_any(), path)),
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
                refused += 1;
                let names_field =
                    e.message.contains("spec.") || e.message.contains("metadata.name");
                if !names_field {
                    row.failures.push(format!(
                        "h{i:03} ({path}): refused without a field path: {}",
                        e.message
                    ));
                }
            }
            Err(kube::Error::Api(e)) if e.code == 413 => refused += 1,
            Err(e) => row.failures.push(format!("h{i:03} ({path}): {e}")),
        }
    }
    // Each admitted one must stall naming a field, or (when the mutation kept it valid) go Ready.
    for (name, path) in &admitted {
        let verdict = converge(Duration::from_secs(120), || async {
            let Ok(d) = api.get(name).await else {
                return false;
            };
            let stalled_naming = d.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Stalled"
                        && c.status == "True"
                        && (c.message.contains("spec.") || c.message.contains("metadata.name"))
                })
            });
            stalled_naming || ready_now(&d)
        })
        .await;
        match verdict {
            Some(_) => stalled += 1,
            None => row.failures.push(format!(
                "{name} ({path}): admitted, then neither Stalled naming a field nor Ready"
            )),
        }
    }
    match converge(Duration::from_secs(180), || {
        reached(&bed.client, &ns.name, &names, Phase::Create)
    })
    .await
    {
        Some(s) => row.converge.push(s),
        None => row
            .failures
            .push("the valid neighbours did not converge".into()),
    }
    if operator.wait_exit(Duration::ZERO).is_some() {
        row.restarts += 1;
        row.failures.push("the operator exited".into());
    }
    println!("hostile-specs: {} generated, {refused} refused by the API server, {} admitted ({stalled} stalled naming a field or went Ready)", specs, admitted.len());
    operator.kill_hard();
    row.violations = monitor.stop().await;
    row.panics = panics_in(&log);
    row
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<22} {:>7} {:>26} {:>11} {:>9} {:>7}",
        "scenario", "faults", "converge s (mean / max)", "violations", "restarts", "panics"
    );
    for r in rows {
        let converge = if r.converge.is_empty() {
            "-".to_string()
        } else {
            let max = r.converge.iter().cloned().fold(0.0, f64::max);
            let mean = r.converge.iter().sum::<f64>() / r.converge.len() as f64;
            format!("{mean:.1} / {max:.1} (n={})", r.converge.len())
        };
        println!(
            "{:<22} {:>7} {:>26} {:>11} {:>9} {:>7}",
            r.scenario,
            r.faults,
            converge,
            r.violations.len(),
            r.restarts,
            r.panics
        );
    }
    for r in rows {
        for v in &r.violations {
            println!("  {} violation: {v}", r.scenario);
        }
        for f in &r.failures {
            println!("  {} failure: {f}", r.scenario);
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The short version (in `make test`) is reproducible; `make chaos` draws a new seed.
    let seed = args.seed.or(args.short.then_some(1)).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    });
    println!(
        "chaos: seed {seed}{}",
        if args.short { " (short)" } else { "" }
    );
    let mut rng = Rng(seed);
    let client = support::client().await;
    support::ensure_crd();
    let bed = Bed {
        client,
        binary: args
            .operator
            .clone()
            .unwrap_or_else(deepinfer_e2e::operator_process::binary),
    };
    let wanted = |s: &str| {
        if args.scenarios.is_empty() {
            !(args.short && matches!(s, "control-plane-restart" | "node-loss"))
        } else {
            args.scenarios.iter().any(|w| w == s)
        }
    };
    let (deployments, kills, leader_kills, specs) = if args.short {
        (2, 4, 2, 40)
    } else {
        (10, 20, 5, 200)
    };
    let mut rows = Vec::new();
    if wanted("operator-sigkill") {
        rows.push(operator_sigkill(&bed, &mut rng, deployments, kills).await);
    }
    if wanted("leader-kill") {
        rows.push(leader_kill(&bed, &mut rng, deployments, leader_kills).await);
    }
    if wanted("node-loss") {
        rows.push(node_loss(&bed).await);
    }
    if wanted("control-plane-restart") {
        rows.push(control_plane_restart(&bed, deployments).await);
    }
    if wanted("hostile-specs") {
        rows.push(hostile_specs(&bed, &mut rng, specs, 10.min(deployments * 5)).await);
    }
    print_table(&rows);
    let ok = rows.iter().all(Row::ok);
    println!("CHAOS {}", if ok { "PASSED" } else { "FAILED" });
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
