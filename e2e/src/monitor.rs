//! The invariant monitor: a watcher built only on the public API (DeepInferDeployments, pods,
//! Jobs, ConfigMaps, Services, EndpointSlices of one namespace) that runs beside an end-to-end
//! scenario or a chaos run and records every breach of what users trust the operator for:
//!
//! - a worker pod Ready, or ready inside a role Service's endpoints, whose revision has no passing
//!   acceptance record (the newest evidence ConfigMap of that revision says `Passed`), or whose
//!   resource's licence is not accepted (annotation and allow-list);
//! - `Ready=True` whose `observedGeneration` is not the resource's generation;
//! - two live pods with one deployment/role/revision/group/rank;
//! - children (by owner reference or deployment label) left 30 s after their resource is gone;
//! - a serving group partly placed (some ranks bound, others not) for longer than the watchdog
//!   allows.
//!
//! Conditions the operator can only fix in its next pass (a revoked licence, a spec edit) are
//! violations only once they outlast [`Limits::enforcement`]; duplicates are violations at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deepinfer_operator::api::{labels, DeepInferDeployment, LICENSE_ACCEPTED_ANNOTATION};
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// How long a breach may last before it counts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A pod serving without entitlement, or `Ready=True` on a stale generation.
    pub enforcement: Duration,
    /// Children of a deleted resource.
    pub orphans: Duration,
    /// A partly placed group.
    pub partial_group: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            enforcement: Duration::from_secs(10),
            orphans: Duration::from_secs(30),
            partial_group: Duration::from_secs(130),
        }
    }
}

/// One recorded breach.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// The objects involved and what was seen.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// The invariants' names, as printed.
pub mod invariants {
    /// A pod serves without a passing acceptance record of its revision.
    pub const SERVING_WITHOUT_PASS: &str = "serving-without-pass";
    /// A pod serves while its resource's licence is not accepted.
    pub const SERVING_WITHOUT_LICENCE: &str = "serving-without-licence";
    /// `Ready=True` on a stale generation.
    pub const READY_ON_STALE_GENERATION: &str = "ready-on-stale-generation";
    /// Two live pods of one rank.
    pub const DUPLICATE_RANK: &str = "duplicate-rank";
    /// Children outlive their resource.
    pub const ORPHAN: &str = "orphan";
    /// A group partly placed for too long.
    pub const PARTIAL_GROUP: &str = "partial-group";
}

/// The objects one check reads.
#[derive(Default)]
pub struct Snapshot {
    /// Resources.
    pub deployments: Vec<Arc<DeepInferDeployment>>,
    /// Pods.
    pub pods: Vec<Arc<Pod>>,
    /// Jobs.
    pub jobs: Vec<Arc<Job>>,
    /// ConfigMaps.
    pub config_maps: Vec<Arc<ConfigMap>>,
    /// Services.
    pub services: Vec<Arc<Service>>,
    /// EndpointSlices.
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
}

/// What the monitor remembers between checks: when each pending breach was first seen, and when
/// each resource disappeared.
#[derive(Default)]
pub struct Judge {
    limits: Limits,
    allowed_licenses: BTreeSet<String>,
    first_seen: BTreeMap<(&'static str, String), Instant>,
    /// Resources seen, by UID: name, and when they were last seen.
    known: BTreeMap<String, (String, Option<Instant>)>,
    /// Every violation recorded, once each.
    pub violations: BTreeSet<Violation>,
    /// End of the last outage during which no operator could act (no leader, API server or etcd
    /// down): a breach's limit runs from then at the earliest.
    excused_until: Option<Instant>,
    /// Start of an outage in progress: nothing is judged until it ends.
    outage_since: Option<Instant>,
}

fn label<'a>(meta: &'a kube::core::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn pod_condition(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn live(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

impl Judge {
    /// A judge with these limits and the operator's licence allow-list.
    pub fn new(limits: Limits, allowed_licenses: &[&str]) -> Self {
        Self {
            limits,
            allowed_licenses: allowed_licenses.iter().map(|s| s.to_string()).collect(),
            ..Self::default()
        }
    }

    /// Records `(invariant, key)` as seen now; true once it has lasted longer than `limit`.
    fn lasted(
        &mut self,
        seen: &mut BTreeSet<(&'static str, String)>,
        invariant: &'static str,
        key: String,
        limit: Duration,
        now: Instant,
    ) -> bool {
        seen.insert((invariant, key.clone()));
        let first = *self.first_seen.entry((invariant, key)).or_insert(now);
        if self.outage_since.is_some() {
            return false;
        }
        let start = self.excused_until.map_or(first, |end| first.max(end));
        now.saturating_duration_since(start) > limit
    }

    /// An outage during which no operator could act ended at `end` (a leader killed and its
    /// successor just took over, the API server or etcd just came back): the limits of breaches
    /// open during it run from `end`, so they measure the operator, not the outage.
    pub fn outage_ended(&mut self, end: Instant) {
        self.outage_since = None;
        self.excused_until = Some(self.excused_until.map_or(end, |e| e.max(end)));
    }

    /// An outage during which no operator can act begins at `start` (the API server or etcd is
    /// being restarted): no breach is judged until [`Judge::outage_ended`].
    pub fn outage_started(&mut self, start: Instant) {
        self.outage_since.get_or_insert(start);
    }

    fn record(&mut self, invariant: &'static str, detail: String) {
        self.violations.insert(Violation { invariant, detail });
    }

    /// Checks one snapshot taken at `now`.
    pub fn check(&mut self, s: &Snapshot, now: Instant) {
        let mut seen = Seen::new();
        let view = View {
            deployments: self.remember_deployments(s, now),
            evidence: newest_evidence(s),
            in_service: ready_in_role_services(s),
            now,
        };
        self.check_worker_pods(s, &view, &mut seen);
        self.check_ready_generations(&view, &mut seen);
        self.check_orphans(s, &view);
        // Breaches that ended before their limit are forgotten.
        self.first_seen.retain(|k, _| seen.contains(k));
    }

    /// Notes the resources of the snapshot, and when each known one disappeared; returns those
    /// not being deleted, by name.
    fn remember_deployments<'s>(
        &mut self,
        s: &'s Snapshot,
        now: Instant,
    ) -> BTreeMap<String, &'s DeepInferDeployment> {
        let deployments = s
            .deployments
            .iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .map(|d| (d.name_any(), d.as_ref()))
            .collect();
        for d in &s.deployments {
            if let Some(uid) = d.uid() {
                self.known.insert(uid, (d.name_any(), None));
            }
        }
        let live_uids: BTreeSet<String> = s.deployments.iter().filter_map(|d| d.uid()).collect();
        for (uid, (_, gone)) in self.known.iter_mut() {
            if !live_uids.contains(uid) && gone.is_none() {
                *gone = Some(now);
            }
        }
        deployments
    }

    /// Worker pods: entitlement, duplicates, placement.
    fn check_worker_pods(&mut self, s: &Snapshot, view: &View, seen: &mut Seen) {
        let mut ranks: BTreeMap<(String, String, String, String, String), Vec<String>> =
            BTreeMap::new();
        let mut groups: BTreeMap<(String, String, String, String), (usize, usize)> =
            BTreeMap::new();
        for pod in &s.pods {
            let meta = &pod.metadata;
            if label(meta, labels::COMPONENT) != Some("worker") {
                continue;
            }
            let name = pod.name_any();
            let get = |k| label(meta, k).unwrap_or_default().to_string();
            let (d, role, rev, group, rank) = (
                get(labels::DEPLOYMENT),
                get(labels::ROLE),
                get(labels::REVISION),
                get(labels::GROUP),
                get(labels::RANK),
            );
            if live(pod) {
                ranks
                    .entry((d.clone(), role.clone(), rev.clone(), group.clone(), rank))
                    .or_default()
                    .push(name.clone());
                let entry = groups
                    .entry((d.clone(), role, rev.clone(), group))
                    .or_default();
                if pod
                    .spec
                    .as_ref()
                    .and_then(|sp| sp.node_name.as_ref())
                    .is_some()
                {
                    entry.0 += 1;
                } else {
                    entry.1 += 1;
                }
            }
            let serving = pod_condition(pod, "Ready") || view.in_service.contains(&name);
            if serving && live(pod) {
                self.check_entitlement(view, seen, &name, &d, &rev);
            }
        }
        self.check_duplicate_ranks(&ranks);
        self.check_partial_groups(&groups, view.now, seen);
    }

    /// A serving pod `name` of deployment `d` at revision `rev`: a passing acceptance record of
    /// its revision and an accepted licence.
    fn check_entitlement(&mut self, view: &View, seen: &mut Seen, name: &str, d: &str, rev: &str) {
        let where_ = if view.in_service.contains(name) {
            "ready in a role Service's endpoints"
        } else {
            "Ready"
        };
        let passed = view
            .evidence
            .get(&(d.to_string(), rev.to_string()))
            .is_some_and(|(_, passed)| *passed);
        if !passed
            && self.lasted(
                seen,
                invariants::SERVING_WITHOUT_PASS,
                name.to_string(),
                self.limits.enforcement,
                view.now,
            )
        {
            self.record(
                invariants::SERVING_WITHOUT_PASS,
                format!("pod {name} ({where_}) of {d} revision {rev}: no evidence ConfigMap of that revision records a pass"),
            );
        }
        let licensed = view.deployments.get(d).is_some_and(|dep| {
            let annotation = dep.annotations().get(LICENSE_ACCEPTED_ANNOTATION);
            annotation == Some(&dep.spec.model.license)
                && self.allowed_licenses.contains(&dep.spec.model.license)
        });
        if !licensed
            && self.lasted(
                seen,
                invariants::SERVING_WITHOUT_LICENCE,
                name.to_string(),
                self.limits.enforcement,
                view.now,
            )
        {
            self.record(
                invariants::SERVING_WITHOUT_LICENCE,
                format!("pod {name} ({where_}) of {d}: the licence is not accepted (annotation {LICENSE_ACCEPTED_ANNOTATION} or allow-list)"),
            );
        }
    }

    /// Two live pods of one rank: a violation at once.
    fn check_duplicate_ranks(
        &mut self,
        ranks: &BTreeMap<(String, String, String, String, String), Vec<String>>,
    ) {
        for ((d, role, rev, group, rank), pods) in ranks {
            if pods.len() > 1 {
                self.record(
                    invariants::DUPLICATE_RANK,
                    format!("{d} role {role} revision {rev} group {group} rank {rank}: live pods {pods:?}"),
                );
            }
        }
    }

    /// Groups with pods bound and pods not, for longer than the limit.
    fn check_partial_groups(
        &mut self,
        groups: &BTreeMap<(String, String, String, String), (usize, usize)>,
        now: Instant,
        seen: &mut Seen,
    ) {
        for ((d, role, rev, group), (bound, unbound)) in groups {
            if *bound > 0 && *unbound > 0 {
                let key = format!("{d}/{role}/{rev}/{group}");
                if self.lasted(
                    seen,
                    invariants::PARTIAL_GROUP,
                    key.clone(),
                    self.limits.partial_group,
                    now,
                ) {
                    self.record(
                        invariants::PARTIAL_GROUP,
                        format!(
                            "group {key}: {bound} pod(s) bound, {unbound} not, for more than {:?}",
                            self.limits.partial_group
                        ),
                    );
                }
            }
        }
    }

    /// Ready=True must describe the current generation.
    fn check_ready_generations(&mut self, view: &View, seen: &mut Seen) {
        for d in view.deployments.values() {
            let ready = d.status.as_ref().and_then(|st| {
                st.conditions
                    .iter()
                    .find(|c| c.type_ == "Ready" && c.status == "True")
            });
            if let Some(c) = ready {
                if c.observed_generation != d.metadata.generation
                    && self.lasted(
                        seen,
                        invariants::READY_ON_STALE_GENERATION,
                        d.name_any(),
                        self.limits.enforcement,
                        view.now,
                    )
                {
                    self.record(
                        invariants::READY_ON_STALE_GENERATION,
                        format!(
                            "{}: Ready=True for generation {:?}, resource at {:?}",
                            d.name_any(),
                            c.observed_generation,
                            d.metadata.generation
                        ),
                    );
                }
            }
        }
    }

    /// Children of resources gone for longer than the limit.
    fn check_orphans(&mut self, s: &Snapshot, view: &View) {
        let gone: Vec<(String, String)> = self
            .known
            .iter()
            .filter(|(_, (_, at))| {
                at.is_some_and(|at| view.now.duration_since(at) > self.limits.orphans)
            })
            .map(|(uid, (name, _))| (uid.clone(), name.clone()))
            .collect();
        let mut orphans = Vec::new();
        let mut look = |kind: &str, meta: &kube::core::ObjectMeta| {
            for (uid, name) in &gone {
                let owned = meta
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| &o.uid == uid);
                let labelled = label(meta, labels::DEPLOYMENT) == Some(name.as_str())
                    && !view.deployments.contains_key(name);
                if owned || labelled {
                    orphans.push(format!(
                        "{kind} {} of deleted {name}",
                        meta.name.as_deref().unwrap_or("?")
                    ));
                }
            }
        };
        s.pods.iter().for_each(|o| look("Pod", o.meta()));
        s.jobs.iter().for_each(|o| look("Job", o.meta()));
        s.config_maps
            .iter()
            .for_each(|o| look("ConfigMap", o.meta()));
        s.services.iter().for_each(|o| look("Service", o.meta()));
        for o in orphans {
            self.record(invariants::ORPHAN, o);
        }
    }
}

/// The breaches seen in one check, by invariant and key.
type Seen = BTreeSet<(&'static str, String)>;

/// What one check derives from its snapshot.
struct View<'s> {
    /// The resources not being deleted, by name.
    deployments: BTreeMap<String, &'s DeepInferDeployment>,
    /// The newest evidence of each (deployment, revision): its creation time, and whether it
    /// records a pass.
    evidence: BTreeMap<(String, String), (String, bool)>,
    /// Pods ready inside a role Service.
    in_service: BTreeSet<String>,
    now: Instant,
}

/// The newest evidence of each (deployment, revision): does it record a pass?
fn newest_evidence(s: &Snapshot) -> BTreeMap<(String, String), (String, bool)> {
    let mut evidence: BTreeMap<(String, String), (String, bool)> = BTreeMap::new();
    for cm in &s.config_maps {
        let meta = &cm.metadata;
        if label(meta, labels::COMPONENT) != Some("evidence") {
            continue;
        }
        let (Some(d), Some(rev)) = (
            label(meta, labels::DEPLOYMENT),
            label(meta, labels::REVISION),
        ) else {
            continue;
        };
        let created = meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let passed = cm
            .data
            .as_ref()
            .and_then(|data| data.get("manifest.json"))
            .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
            .is_some_and(|m| m["result"] == "Passed");
        let key = (d.to_string(), rev.to_string());
        if evidence.get(&key).is_none_or(|(at, _)| created >= *at) {
            evidence.insert(key, (created, passed));
        }
    }
    evidence
}

/// Pods ready inside a role Service (not a headless rendezvous Service).
fn ready_in_role_services(s: &Snapshot) -> BTreeSet<String> {
    let role_services: BTreeSet<String> = s
        .services
        .iter()
        .filter(|svc| {
            svc.spec
                .as_ref()
                .and_then(|sp| sp.cluster_ip.as_deref())
                .is_some_and(|ip| ip != "None")
        })
        .map(|svc| svc.name_any())
        .collect();
    let mut in_service: BTreeSet<String> = BTreeSet::new();
    for slice in &s.endpoint_slices {
        let service = label(&slice.metadata, "kubernetes.io/service-name").unwrap_or_default();
        if !role_services.contains(service) {
            continue;
        }
        for e in slice.endpoints.iter().flatten() {
            let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false);
            if let (true, Some(target)) = (ready, e.target_ref.as_ref()) {
                if let Some(name) = &target.name {
                    in_service.insert(name.clone());
                }
            }
        }
    }
    in_service
}

/// A running monitor over one namespace.
pub struct Monitor {
    judge: Arc<Mutex<Judge>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Check passes run.
    checks: Arc<std::sync::atomic::AtomicU64>,
}

fn watch<K>(client: &Client, ns: &str) -> (Store<K>, impl Stream<Item = ()> + Send + 'static)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    // The operator's quick watch backoff (0.5 s doubling to 5 s), not kube-runtime's default (up
    // to 30 s): after an outage the monitor's view must be as current as the operator's.
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .backoff(deepinfer_operator::controller::WatchBackoff::default())
        .map(|_| ());
    (reader, stream)
}

impl Monitor {
    /// Starts watching `ns`; `allowed_licenses` is the operator's allow-list.
    pub fn start(client: &Client, ns: &str, allowed_licenses: &[&str], limits: Limits) -> Self {
        let judge = Arc::new(Mutex::new(Judge::new(limits, allowed_licenses)));
        let checks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (dids, s1) = watch::<DeepInferDeployment>(client, ns);
        let (pods, s2) = watch::<Pod>(client, ns);
        let (jobs, s3) = watch::<Job>(client, ns);
        let (cms, s4) = watch::<ConfigMap>(client, ns);
        let (svcs, s5) = watch::<Service>(client, ns);
        let (slices, s6) = watch::<EndpointSlice>(client, ns);
        let mut events = futures::stream::select_all(vec![
            s1.boxed(),
            s2.boxed(),
            s3.boxed(),
            s4.boxed(),
            s5.boxed(),
            s6.boxed(),
        ]);
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let task = {
            let judge = judge.clone();
            let checks = checks.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tokio::select! {
                        _ = &mut rx => break,
                        _ = events.next() => {}
                        _ = tick.tick() => {}
                    }
                    let snapshot = Snapshot {
                        deployments: dids.state(),
                        pods: pods.state(),
                        jobs: jobs.state(),
                        config_maps: cms.state(),
                        services: svcs.state(),
                        endpoint_slices: slices.state(),
                    };
                    judge
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .check(&snapshot, Instant::now());
                    checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        Self {
            judge,
            stop: Some(tx),
            task: Some(task),
            checks,
        }
    }

    /// See [`Judge::outage_started`].
    pub fn outage_started(&self, start: Instant) {
        self.judge
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .outage_started(start);
    }

    /// See [`Judge::outage_ended`].
    pub fn outage_ended(&self, end: Instant) {
        self.judge
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .outage_ended(end);
    }

    /// Violations so far.
    pub fn violations(&self) -> Vec<Violation> {
        let judge = self.judge.lock().unwrap_or_else(|e| e.into_inner());
        judge.violations.iter().cloned().collect()
    }

    /// Check passes so far.
    pub fn checks(&self) -> u64 {
        self.checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the monitor; returns every violation it recorded.
    pub async fn stop(mut self) -> Vec<Violation> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.violations()
    }

    /// Stops the monitor and panics, listing them, if it recorded any violation.
    pub async fn assert_clean(self) {
        let checks = self.checks();
        let violations = self.stop().await;
        assert!(
            violations.is_empty(),
            "the invariant monitor recorded {} violation(s) over {checks} checks:\n{}",
            violations.len(),
            violations
                .iter()
                .map(|v| format!("  {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        println!("invariant monitor: 0 violations over {checks} checks");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SEC: Duration = Duration::from_secs(1);

    fn did(
        annotation: Option<&str>,
        generation: i64,
        ready_generation: Option<i64>,
    ) -> Arc<DeepInferDeployment> {
        let mut v = json!({
            "apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment",
            "metadata": {"name": "flash", "namespace": "ns", "uid": "uid-1", "generation": generation,
                         "annotations": {}},
            "spec": serde_json::to_value(crate::support::unlicensed_deployment("flash").spec).unwrap(),
        });
        if let Some(a) = annotation {
            v["metadata"]["annotations"][LICENSE_ACCEPTED_ANNOTATION] = json!(a);
        }
        if let Some(g) = ready_generation {
            v["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": g}]});
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn worker(name: &str, rank: &str, ready: bool, node: Option<&str>) -> Arc<Pod> {
        Arc::new(serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {
                "deepinfer.io/deployment": "flash", "deepinfer.io/role": "worker", "deepinfer.io/revision": "r1",
                "deepinfer.io/group": "0", "deepinfer.io/rank": rank, "deepinfer.io/component": "worker"},
                "ownerReferences": [{"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment", "name": "flash", "uid": "uid-1"}]},
            "spec": {"containers": [{"name": "engine"}], "nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        })).unwrap())
    }

    fn evidence(result: &str) -> Arc<ConfigMap> {
        Arc::new(serde_json::from_value(json!({
            "metadata": {"name": "flash-evidence-r1", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"deepinfer.io/deployment": "flash", "deepinfer.io/revision": "r1", "deepinfer.io/component": "evidence"}},
            "data": {"manifest.json": json!({"result": result}).to_string()}
        })).unwrap())
    }

    fn names(judge: &Judge) -> Vec<&'static str> {
        judge.violations.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn serving_without_a_pass_or_a_licence_counts_once_it_outlasts_one_pass() {
        let mut judge = Judge::new(Limits::default(), &["mit"]);
        let t0 = Instant::now();
        let s = Snapshot {
            deployments: vec![did(None, 1, None)],
            pods: vec![worker("w0", "0", true, Some("n"))],
            config_maps: vec![evidence("Failed")],
            ..Snapshot::default()
        };
        judge.check(&s, t0);
        judge.check(&s, t0 + 5 * SEC);
        assert!(judge.violations.is_empty(), "within the enforcement limit");
        judge.check(&s, t0 + 11 * SEC);
        assert_eq!(
            names(&judge),
            [
                invariants::SERVING_WITHOUT_LICENCE,
                invariants::SERVING_WITHOUT_PASS
            ]
        );
    }

    #[test]
    fn an_entitled_ready_pod_and_a_withdrawal_inside_the_limit_are_clean() {
        let mut judge = Judge::new(Limits::default(), &["mit"]);
        let t0 = Instant::now();
        let entitled = Snapshot {
            deployments: vec![did(Some("mit"), 2, Some(2))],
            pods: vec![worker("w0", "0", true, Some("n"))],
            config_maps: vec![evidence("Passed")],
            ..Snapshot::default()
        };
        judge.check(&entitled, t0);
        let revoked = Snapshot {
            deployments: vec![did(None, 2, Some(2))],
            ..entitled
        };
        judge.check(&revoked, t0 + SEC);
        let withdrawn = Snapshot {
            pods: vec![worker("w0", "0", false, Some("n"))],
            ..revoked
        };
        judge.check(&withdrawn, t0 + 3 * SEC);
        judge.check(&withdrawn, t0 + 30 * SEC);
        assert!(judge.violations.is_empty(), "{:?}", judge.violations);
    }

    #[test]
    fn licence_not_on_the_allow_list_is_not_accepted() {
        let mut judge = Judge::new(Limits::default(), &["apache-2.0"]);
        let t0 = Instant::now();
        let s = Snapshot {
            deployments: vec![did(Some("mit"), 1, None)],
            pods: vec![worker("w0", "0", true, Some("n"))],
            config_maps: vec![evidence("Passed")],
            ..Snapshot::default()
        };
        judge.check(&s, t0);
        judge.check(&s, t0 + 11 * SEC);
        assert_eq!(names(&judge), [invariants::SERVING_WITHOUT_LICENCE]);
    }

    #[test]
    fn two_live_pods_of_one_rank_count_at_once_but_a_terminating_one_does_not() {
        let mut judge = Judge::new(Limits::default(), &["mit"]);
        let mut terminating = (*worker("old", "0", false, Some("n"))).clone();
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let s = Snapshot {
            deployments: vec![did(Some("mit"), 1, None)],
            pods: vec![worker("new", "0", false, Some("n")), Arc::new(terminating)],
            ..Snapshot::default()
        };
        judge.check(&s, Instant::now());
        assert!(judge.violations.is_empty());
        let s = Snapshot {
            pods: vec![
                worker("a", "0", false, Some("n")),
                worker("b", "0", false, None),
            ],
            ..s
        };
        judge.check(&s, Instant::now());
        assert_eq!(names(&judge), [invariants::DUPLICATE_RANK]);
    }

    #[test]
    fn children_of_a_deleted_resource_count_after_thirty_seconds() {
        let mut judge = Judge::new(Limits::default(), &["mit"]);
        let t0 = Instant::now();
        judge.check(
            &Snapshot {
                deployments: vec![did(Some("mit"), 1, None)],
                ..Snapshot::default()
            },
            t0,
        );
        let after = Snapshot {
            pods: vec![worker("w0", "0", false, Some("n"))],
            ..Snapshot::default()
        };
        judge.check(&after, t0 + SEC);
        judge.check(&after, t0 + 20 * SEC);
        assert!(
            judge.violations.is_empty(),
            "garbage collection may take a while"
        );
        judge.check(&after, t0 + 32 * SEC);
        assert_eq!(names(&judge), [invariants::ORPHAN]);
    }

    /// A judge at `t0` and a snapshot of one resource Ready for generation 2 while at 3.
    fn stale_ready() -> (Judge, Instant, Snapshot) {
        let snapshot = Snapshot {
            deployments: vec![did(Some("mit"), 3, Some(2))],
            ..Snapshot::default()
        };
        (
            Judge::new(Limits::default(), &["mit"]),
            Instant::now(),
            snapshot,
        )
    }

    #[test]
    fn a_breach_open_during_an_outage_counts_from_its_end() {
        let (mut judge, t0, s) = stale_ready();
        judge.check(&s, t0);
        // No leader from t0 to t0 + 15 s: the 10 s limit runs from t0 + 15 s.
        judge.outage_ended(t0 + 15 * SEC);
        judge.check(&s, t0 + 20 * SEC);
        assert!(
            names(&judge).is_empty(),
            "within the limit after the outage"
        );
        judge.check(&s, t0 + 26 * SEC);
        assert_eq!(names(&judge), [invariants::READY_ON_STALE_GENERATION]);
    }

    #[test]
    fn nothing_is_judged_during_an_outage_and_limits_run_from_its_end() {
        let (mut judge, t0, s) = stale_ready();
        // Stale from t0; the API server is restarted from t0 + 1 s to t0 + 30 s.
        judge.check(&s, t0);
        judge.outage_started(t0 + SEC);
        for t in 2..30 {
            judge.check(&s, t0 + t * SEC);
        }
        assert!(
            names(&judge).is_empty(),
            "no operator can act during the outage"
        );
        judge.outage_ended(t0 + 30 * SEC);
        judge.check(&s, t0 + 39 * SEC);
        assert!(
            names(&judge).is_empty(),
            "within the limit after the outage"
        );
        judge.check(&s, t0 + 41 * SEC);
        assert_eq!(names(&judge), [invariants::READY_ON_STALE_GENERATION]);
    }

    #[test]
    fn ready_on_a_stale_generation_and_a_partly_placed_group_count_after_their_limits() {
        let mut judge = Judge::new(Limits::default(), &["mit"]);
        let t0 = Instant::now();
        let s = Snapshot {
            deployments: vec![did(Some("mit"), 3, Some(2))],
            pods: vec![
                worker("w0", "0", false, Some("n")),
                worker("w1", "1", false, None),
            ],
            ..Snapshot::default()
        };
        judge.check(&s, t0);
        judge.check(&s, t0 + 11 * SEC);
        assert_eq!(names(&judge), [invariants::READY_ON_STALE_GENERATION]);
        judge.check(&s, t0 + 131 * SEC);
        assert_eq!(
            names(&judge),
            [
                invariants::PARTIAL_GROUP,
                invariants::READY_ON_STALE_GENERATION
            ]
        );
    }
}
