//! The fleet benchmark (`make bench-unit`, `benches/fleet.rs`): the operator's caches and indexes
//! filled with `n` deployments, 8 worker pods and one finished acceptance Job each, generated
//! without an API server, then the cost of what one event or one pass does with them, each timed
//! over many operations: a pod's watch event taken into the pod cache, a ConfigMap's event mapped
//! to the resources that refer to it, an admission asked of the fleet's queue, a deployment's
//! status figures noted for `/metrics`, and a pass's reads of its deployment from the caches.
//! None of these should grow with `n`; a `/metrics` scrape, which writes every deployment's
//! series, does, and is printed apart. Also the heap the caches take, where the allocator is
//! jemalloc (the benchmark binary's, as the operator's).

use std::hint::black_box;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use serde_json::{json, Value};

use crate::api::{labels, DeepInferDeployment};
use crate::controller::cached::{CachedDeployment, CachedJob, CachedPod, Incoming};
use crate::controller::caches::{CacheWriters, Caches};
use crate::controller::fleet::Queue;
use crate::controller::merged::Index;
use crate::controller::observe::{observe, Sources};
use crate::controller::referrers::{Referred, Referrers};
use crate::metrics::{ApiRequests, Metrics};

/// Worker pods per deployment.
pub const PODS_PER_DEPLOYMENT: usize = 8;

/// What one run of the benchmark measured.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Deployments cached.
    pub deployments: usize,
    /// Pods cached.
    pub pods: usize,
    /// Nanoseconds per operation, by operation, in the order measured.
    pub per_op: Vec<(&'static str, f64)>,
    /// Milliseconds of one `/metrics` scrape (grows with the deployments: each has its series).
    pub scrape_ms: f64,
    /// Bytes the filled caches and indexes take on the heap (`None` where the allocator's
    /// statistics cannot be read).
    pub heap_bytes: Option<usize>,
}

/// The deployment `i`: a valid spec whose prompts are a ConfigMap's (so that it is indexed; with
/// `inline`, given in the spec, so that a pass reads nothing from the API) and whose checkpoint
/// is a claim's.
fn deployment(i: usize, inline: bool) -> Value {
    let acceptance = if inline {
        json!({"prompts": [{"id": "a", "prompt": "Say yes.", "structuredOutput": {"regex": "yes"}}]})
    } else {
        json!({"promptsFrom": {"name": format!("prompts-{i}"), "key": "p.yaml"}})
    };
    json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": format!("d{i}"), "namespace": namespace(i), "uid": uid(i)},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "m"}}},
            "runtime": {"image": format!("registry.example.com/deepinfer@sha256:{}", "ab".repeat(32)),
                        "commit": "9e8d7c6"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 32}}],
            "acceptance": acceptance,
        },
    })
}

fn namespace(i: usize) -> String {
    format!("team-{}", i / 100)
}

fn uid(i: usize) -> String {
    format!("00000000-0000-0000-0000-{i:012}")
}

/// Pod `rank` of group `group` of deployment `i`, Ready and accepted, at `version`.
fn pod(i: usize, group: usize, rank: usize, version: u64) -> Incoming<CachedPod> {
    let name = format!("d{i}-worker-abcde-{group}-{rank}");
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"});
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": namespace(i), "uid": format!("{}-{group}-{rank}", uid(i)),
            "resourceVersion": version.to_string(),
            "labels": {
                labels::MANAGED_BY: labels::MANAGER, labels::DEPLOYMENT: format!("d{i}"),
                labels::COMPONENT: "worker", labels::ROLE: "worker", labels::REVISION: "abcdefghij",
                labels::GROUP: group.to_string(), labels::RANK: rank.to_string(),
            },
            "ownerReferences": [{"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment",
                                 "name": format!("d{i}"), "uid": uid(i), "controller": true}],
        },
        "spec": {"nodeName": format!("node-{}", (i * 8 + group * 4 + rank) % 4000),
                 "containers": [{"name": "engine", "image": "registry.example.com/deepinfer@sha256:ab"}]},
        "status": {
            "phase": "Running", "podIP": format!("10.244.{}.{}", (i / 200) % 256, (i % 200) + 1),
            "conditions": [condition("PodScheduled"), condition("Ready"),
                           condition(crate::api::ACCEPTED_POD_CONDITION)],
            "containerStatuses": [{"name": "engine", "ready": true, "restartCount": 0, "image": "x", "imageID": "y",
                                   "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}],
        },
    }))
    .expect("a pod")
}

/// The finished acceptance Job of deployment `i`.
fn job(i: usize) -> Incoming<CachedJob> {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("d{i}-accept-0123456789abcdef-0"), "namespace": namespace(i),
            "uid": format!("{}-job", uid(i)), "resourceVersion": "5",
            "labels": {labels::MANAGED_BY: labels::MANAGER, labels::DEPLOYMENT: format!("d{i}"),
                       labels::COMPONENT: "acceptance"},
            "annotations": {crate::controller::build::JUDGES_ANNOTATION: format!("key-{i}")},
            "ownerReferences": [{"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment",
                                 "name": format!("d{i}"), "uid": uid(i), "controller": true}],
        },
        "status": {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1},
    }))
    .expect("a Job")
}

/// The caches, with a client that is never called (nothing the pass reads needs the API).
struct Filled {
    caches: Caches,
    client: kube::Client,
}

impl Sources for Filled {
    fn client(&self) -> &kube::Client {
        &self.client
    }

    fn caches(&self) -> &Caches {
        &self.caches
    }
}

/// Nanoseconds per call of `op` over `ops` calls (each given its index).
fn per_op(ops: usize, mut op: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    for i in 0..ops {
        op(i);
    }
    start.elapsed().as_nanos() as f64 / ops.max(1) as f64
}

fn heap_allocated() -> Option<usize> {
    crate::metrics::heap().map(|h| h.allocated)
}

/// The caches holding `n` deployments' pods and acceptance Jobs, as their first lists bring them.
fn cached(n: usize) -> (Caches, CacheWriters) {
    let (caches, mut writers) = Caches::new();
    writers.pods.take(&Event::Init);
    writers.jobs.take(&Event::Init);
    for i in 0..n {
        for p in 0..PODS_PER_DEPLOYMENT {
            writers
                .pods
                .take(&Event::InitApply(pod(i, p / 4, p % 4, 10)));
        }
        writers.jobs.take(&Event::InitApply(job(i)));
    }
    writers.pods.take(&Event::InitDone);
    writers.jobs.take(&Event::InitDone);
    (caches, writers)
}

/// The referrers index and the `/metrics` figures of `n` deployments.
fn indexed(n: usize) -> (Referrers, Metrics) {
    let mut referrers = Referrers::default();
    for i in 0..n {
        let d: CachedDeployment =
            serde_json::from_value(deployment(i, false)).expect("a deployment");
        referrers.applied(&d);
    }
    let metrics = Metrics::new(ApiRequests::default());
    let status = crate::metrics::reference::example_status();
    for i in 0..n {
        metrics.observe_status(&format!("{}/d{i}", namespace(i)), &status);
    }
    (referrers, metrics)
}

/// Nanoseconds per pass for the reads of a pass (`observe`) over up to 1,000 of the deployments
/// `pick` chooses, from the filled caches.
async fn pass_reads(filled: &Filled, ops: usize, pick: impl Fn(usize) -> usize) -> f64 {
    let dids: Vec<DeepInferDeployment> = (0..ops.min(1000))
        .map(|k| serde_json::from_value(deployment(pick(k), true)).expect("a deployment"))
        .collect();
    let start = Instant::now();
    for did in &dids {
        let observed = observe(filled, did, false)
            .await
            .expect("read from the caches");
        assert_eq!(observed.workers.len(), PODS_PER_DEPLOYMENT);
        black_box(observed);
    }
    start.elapsed().as_nanos() as f64 / dids.len().max(1) as f64
}

/// Fills the caches with `n` deployments and measures `ops` operations of each kind.
pub async fn fleet(n: usize, ops: usize) -> Figures {
    let before = heap_allocated();
    let (caches, mut writers) = cached(n);
    let (referrers, metrics) = indexed(n);
    let status = crate::metrics::reference::example_status();
    let heap_bytes = before
        .zip(heap_allocated())
        .map(|(b, a)| a.saturating_sub(b));
    caches.ready.send_replace(true);
    let filled = Filled {
        caches,
        client: kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("a URI"),
        ))
        .expect("a client"),
    };

    let pick = |k: usize| (k * 7919) % n.max(1);
    let events: Vec<Incoming<CachedPod>> = (0..ops)
        .map(|k| pod(pick(k), 0, k % 4, 11 + k as u64))
        .collect();
    // What the machine's memory costs a lookup as the fleet grows: a map of as many keys as
    // the pod cache holds, read at random, with none of the operator's work.
    let plain: std::collections::HashMap<String, usize> = (0..n * PODS_PER_DEPLOYMENT)
        .map(|k| {
            let (i, p) = (k / PODS_PER_DEPLOYMENT, k % PODS_PER_DEPLOYMENT);
            (format!("{}/d{i}-worker-abcde-{p}", namespace(i)), k)
        })
        .collect();
    let mut figures = vec![(
        "reference: a plain map's lookup of a random pod's key",
        per_op(ops, |k| {
            let i = pick(k);
            let key = format!(
                "{}/d{i}-worker-abcde-{}",
                namespace(i),
                k % PODS_PER_DEPLOYMENT
            );
            black_box(plain.get(&key));
        }),
    )];
    figures.push((
        "pod event into the cache",
        per_op(ops, |k| writers.pods.take(&Event::Apply(events[k].clone()))),
    ));
    figures.push((
        "ConfigMap event to its referrers",
        per_op(ops, |k| {
            let i = pick(k);
            let found = referrers.of(Referred::ConfigMap, &namespace(i), &format!("prompts-{i}"));
            black_box(found);
        }),
    ));
    // A fleet-wide change under `--max-concurrent-acceptance-runs 16`: every deployment's run
    // asks, and all but 16 wait in line.
    let mut queue = Queue::default();
    let now = Timestamp::now();
    figures.push((
        "admission asked of the fleet's queue",
        per_op(ops, |k| {
            let run = format!("{}/d{}/new", namespace(pick(k)), pick(k));
            let asked = filled
                .caches
                .with_acceptance_runs(|runs| queue.ask(&run, runs, Some(16), now));
            black_box(asked);
        }),
    ));
    figures.push((
        "status figures noted for /metrics",
        per_op(ops, |k| {
            let i = pick(k);
            metrics.observe_status(&format!("{}/d{i}", namespace(i)), &status);
        }),
    ));
    figures.push((
        "a pass's reads of its deployment",
        pass_reads(&filled, ops, pick).await,
    ));
    let start = Instant::now();
    let text = metrics.encode().expect("encodes");
    let scrape_ms = start.elapsed().as_secs_f64() * 1000.0;
    black_box(text);
    Figures {
        deployments: n,
        pods: n * PODS_PER_DEPLOYMENT,
        per_op: figures,
        scrape_ms,
        heap_bytes,
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_fleet_benchmark_runs_over_a_small_fleet() {
        let figures = super::fleet(50, 200).await;
        assert_eq!(figures.pods, 400);
        assert_eq!(figures.per_op.len(), 6);
        assert!(figures.per_op.iter().all(|(_, ns)| *ns > 0.0));
    }
}
