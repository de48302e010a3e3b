//! The floor: what the same work costs a plain client. While the operator works, the benchmark
//! records (by watching) every object it creates and deletes, in order. The floor then replays,
//! per deployment and phase, exactly those creations and deletions in a fresh namespace (one for
//! each namespace the operator worked in), waiting for what the operator waits for: a Job's
//! completion where the operator was seen to find it complete (and in any case before a worker
//! pod or a Job of another run), worker pods Running before their `deepinfer.io/accepted`
//! condition is set, before a pod is deleted, the pods that were Ready when the operator
//! deleted it (a rollout with room to spare replaces a group once its successor serves; without,
//! it deletes first and the successor's gang can only be placed on the devices it frees), and,
//! before an object is created again under the name of one deleted, the deleted one gone.
//! It uses the same kube client and request accounting as the operator, watches Jobs and Pods as
//! the operator does, and writes at the operator's concurrency: one task per deployment, of which
//! at most as many write at once as the operator runs passes at once (its default
//! `--max-concurrent-reconciles`, [`PASSES_AT_ONCE`]); a task holds its slot while it writes and
//! gives it up while it waits (for a Job, a pod, a deleted object), as a pass ends where the
//! operator waits for an event. One moment's objects of a kind go out at most [`BATCH`] at once,
//! as the operator's executor sends them. A request that failed on its connection is sent again
//! as [`crate::resend`] allows; any other failed request ends the run.
//!
//! The rollout can also be replayed alone ([`run`] from phase 1): the floor then first creates
//! what the operator had left at the end of `ready` ([`Recorded::converged`]) at once.
//!
//! Not replayed: the operator's reads before each write, events, and updates of objects it
//! already created other than those [`tracks_updates`] names (it skips applies that change
//! nothing). The deployments' status is written
//! once per deployment and phase, with the status the operator ended with.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{self, Timestamp};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};

use deepinfer_operator::api::{labels, DeepInferDeployment, ACCEPTED_POD_CONDITION};
use deepinfer_operator::metrics::{ApiRequests, Metrics};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::probe::{PhaseFigures, Probe};
use deepinfer_operator::controller::context::DEFAULT_MAX_CONCURRENT_RECONCILES;
use deepinfer_operator::controller::executor::BATCH;

/// How many deployments' writes are in flight at once: as many as the operator runs passes.
const PASSES_AT_ONCE: usize = DEFAULT_MAX_CONCURRENT_RECONCILES as usize;
use crate::resend::{sent, Repeat};

/// The kinds the operator creates, in the order the floor creates objects of one moment.
const KINDS: [(&str, &str, &str); 10] = [
    ("", "v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io", "v1", "Role"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("apps", "v1", "ControllerRevision"),
    ("", "v1", "ConfigMap"),
    ("batch", "v1", "Job"),
    ("scheduling.k8s.io", "v1beta1", "PodGroup"),
    ("", "v1", "Service"),
    ("policy", "v1", "PodDisruptionBudget"),
    ("", "v1", "Pod"),
];

fn api_resource(kind: usize) -> ApiResource {
    let (group, version, kind) = KINDS[kind];
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn is_kind(kind: usize, name: &str) -> bool {
    KINDS[kind].2 == name
}

/// One object the operator created.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Created {
    kind: usize,
    name: String,
    /// `deepinfer.io/group`: the rank Jobs of one acceptance run share it.
    group: Option<String>,
    /// The object as a create request: server-set fields and owner references removed.
    body: Value,
}

/// What the operator did to one object.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Action {
    Create(Created),
    /// A changed RBAC rule, binding, Service, budget or rank table, as a merge patch.
    Update(Created),
    Delete {
        kind: usize,
        name: String,
        /// For a pod: the deployment's pods that were Ready when the operator deleted it.
        ready: Vec<String>,
    },
    /// A Job the operator created was seen complete: what it did next waited for that.
    Completed {
        name: String,
    },
}

/// One recorded action.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Step {
    phase: usize,
    deployment: String,
    action: Action,
}

#[derive(Default)]
struct Recording {
    namespace: String,
    phase: usize,
    steps: Vec<Step>,
    /// The last recorded form of each object.
    seen: HashMap<(usize, String), Value>,
    /// Each worker pod's `deepinfer.io/accepted` condition, the last one seen `True`.
    accepted: HashMap<String, Value>,
    /// The uid of each deployment, named in its objects' owner references.
    uids: HashMap<String, String>,
    /// The worker pods now Ready, with their deployment.
    ready: HashMap<String, String>,
    /// The Jobs seen complete.
    completed: HashSet<String>,
}

impl Recording {
    fn apply(&mut self, kind: usize, obj: &DynamicObject) {
        let Some(owner) = obj
            .owner_references()
            .iter()
            .find(|o| o.kind == "DeepInferDeployment")
        else {
            return;
        };
        let Some(deployment) = obj.labels().get(labels::DEPLOYMENT).cloned() else {
            return;
        };
        self.uids.insert(deployment.clone(), owner.uid.clone());
        let name = obj.name_any();
        if is_kind(kind, "Pod") {
            if has_condition(obj, "Ready") {
                self.ready.insert(name.clone(), deployment.clone());
            } else {
                self.ready.remove(&name);
            }
        }
        if let Some(condition) = true_condition(obj, ACCEPTED_POD_CONDITION) {
            self.accepted.insert(name.clone(), condition.clone());
        }
        let Ok(body) = serde_json::to_value(obj) else {
            return;
        };
        let body = create_body(KINDS[kind].2, body);
        let created = Created {
            kind,
            name: name.clone(),
            group: obj.labels().get(labels::GROUP).cloned(),
            body: body.clone(),
        };
        let changed = match self.seen.insert((kind, name.clone()), body.clone()) {
            None => Some(Action::Create(created)),
            Some(before)
                if tracks_updates(kind, &body) && comparable(&before) != comparable(&body) =>
            {
                Some(Action::Update(created))
            }
            Some(_) => None,
        };
        let completed = (is_kind(kind, "Job")
            && obj
                .data
                .pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .is_some_and(|n| n >= 1)
            && self.completed.insert(name.clone()))
        .then_some(Action::Completed { name });
        for action in changed.into_iter().chain(completed) {
            self.steps.push(Step {
                phase: self.phase,
                deployment: deployment.clone(),
                action,
            });
        }
    }

    /// Records a deletion. The object is forgotten: one of the same name created after it is
    /// recorded as a creation (and, for a Job, its completion again).
    fn delete(&mut self, kind: usize, obj: &DynamicObject) {
        let name = obj.name_any();
        self.ready.remove(&name);
        if is_kind(kind, "Job") {
            self.completed.remove(&name);
        }
        if let Some(deployment) = obj.labels().get(labels::DEPLOYMENT).cloned() {
            if self.seen.remove(&(kind, name.clone())).is_some() {
                let ready = if is_kind(kind, "Pod") {
                    let mut r: Vec<String> = self
                        .ready
                        .iter()
                        .filter(|(_, d)| **d == deployment)
                        .map(|(p, _)| p.clone())
                        .collect();
                    r.sort();
                    r
                } else {
                    Vec::new()
                };
                self.steps.push(Step {
                    phase: self.phase,
                    deployment,
                    action: Action::Delete { kind, name, ready },
                });
            }
        }
    }
}

/// The object's status condition `type_` if it is `True`.
fn true_condition<'a>(obj: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    obj.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| {
            c.get("type").and_then(Value::as_str) == Some(type_)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

fn has_condition(obj: &DynamicObject, type_: &str) -> bool {
    true_condition(obj, type_).is_some()
}

/// Watches what the operator creates and deletes in a namespace, from before it starts.
pub struct Recorder {
    state: Arc<Mutex<Recording>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    /// Starts watching `ns`; returns once every watch has listed.
    pub async fn start(client: &Client, ns: &str) -> Self {
        let state = Arc::new(Mutex::new(Recording {
            namespace: ns.to_string(),
            ..Recording::default()
        }));
        let selector = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
        let mut tasks = Vec::new();
        let mut listed = Vec::new();
        for kind in 0..KINDS.len() {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &api_resource(kind));
            let config = watcher::Config::default().labels(&selector);
            let state = state.clone();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            listed.push(rx);
            tasks.push(tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut events = watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                    match event {
                        Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => {
                            state.apply(kind, &o)
                        }
                        Ok(watcher::Event::Delete(o)) => state.delete(kind, &o),
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(watcher::Event::Init) | Err(_) => {}
                    }
                }
            }));
        }
        for rx in listed {
            let _ = rx.await;
        }
        Self { state, tasks }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What is recorded from now on belongs to the next phase.
    pub fn next_phase(&self) {
        self.lock().phase += 1;
    }

    /// Worker pods the operator created in `phase`.
    pub fn pods_created(&self, phase: usize) -> usize {
        self.lock()
            .steps
            .iter()
            .filter(|s| s.phase == phase)
            .filter(|s| matches!(&s.action, Action::Create(c) if is_kind(c.kind, "Pod")))
            .count()
    }

    /// Adds the objects created, updated and deleted per phase to `counts`, by kind.
    fn count(&self, counts: &mut BTreeMap<(usize, &'static str, &'static str), usize>) {
        for step in &self.lock().steps {
            let (verb, kind) = match &step.action {
                Action::Create(c) => ("created", c.kind),
                Action::Update(c) => ("updated", c.kind),
                Action::Delete { kind, .. } => ("deleted", *kind),
                Action::Completed { .. } => continue,
            };
            *counts.entry((step.phase, verb, KINDS[kind].2)).or_default() += 1;
        }
    }

    /// Stops watching; returns what was recorded.
    pub fn stop(self) -> Recorded {
        for task in &self.tasks {
            task.abort();
        }
        let state = std::mem::take(&mut *self.lock());
        let mut steps: BTreeMap<String, Vec<Step>> = BTreeMap::new();
        for step in state.steps {
            steps.entry(step.deployment.clone()).or_default().push(step);
        }
        Recorded {
            namespace: state.namespace,
            steps,
            accepted: state.accepted,
            uids: state.uids,
        }
    }
}

/// Objects created, updated and deleted per phase in every recorded namespace, printed per kind.
pub fn summary(recorders: &[Recorder]) -> String {
    let mut counts = BTreeMap::new();
    for recorder in recorders {
        recorder.count(&mut counts);
    }
    counts
        .iter()
        .map(|((phase, verb, kind), n)| format!("phase {phase} {verb} {n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the operator did in a namespace, per deployment. It is written to a file and read back
/// by the same build of the benchmark (`--record`, `--floor-from`).
#[derive(Serialize, Deserialize)]
pub struct Recorded {
    /// The namespace it worked in; references to it are rewritten to the floor's.
    namespace: String,
    steps: BTreeMap<String, Vec<Step>>,
    /// Each worker pod's `deepinfer.io/accepted` condition.
    accepted: HashMap<String, Value>,
    /// The uid of each deployment; rewritten to the floor's deployment's in owner references.
    uids: HashMap<String, String>,
}

impl Recorded {
    /// The objects of `deployment` alive at the start of `phase`, as the operator last wrote
    /// them, in the order of [`KINDS`]: what its steps before `phase` created, updated and did
    /// not delete. Jobs are left out: their work is done, and the TTL controller removes them.
    fn converged(&self, deployment: &str, phase: usize) -> Vec<&Created> {
        let mut alive: BTreeMap<(usize, &str), &Created> = BTreeMap::new();
        for step in self.steps.get(deployment).into_iter().flatten() {
            if step.phase >= phase {
                break;
            }
            match &step.action {
                Action::Create(c) | Action::Update(c) if !is_kind(c.kind, "Job") => {
                    alive.insert((c.kind, c.name.as_str()), c);
                }
                Action::Delete { kind, name, .. } => {
                    alive.remove(&(*kind, name.as_str()));
                }
                _ => {}
            }
        }
        alive.into_values().collect()
    }
}

/// The deployments of `namespaces` at the end of a phase, as the operator left them (status
/// included).
pub async fn deployments(
    client: &Client,
    namespaces: &[String],
) -> anyhow::Result<Vec<DeepInferDeployment>> {
    let mut all = Vec::new();
    for ns in namespaces {
        let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), ns);
        let params = ListParams::default();
        all.extend(sent(Repeat::Unanswered, || api.list(&params)).await?.items);
    }
    Ok(all)
}

/// Removes what the server set, so that the object can be created again elsewhere.
fn create_body(kind: &str, mut obj: Value) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "namespace",
            "finalizers",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            meta.remove(field);
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    let spec = obj.get_mut("spec").and_then(Value::as_object_mut);
    match (kind, spec) {
        ("Job", Some(spec)) => {
            // The job controller's selector and pod labels, derived from the Job's uid.
            spec.remove("selector");
            if let Some(labels) = spec
                .get_mut("template")
                .and_then(|t| t.pointer_mut("/metadata/labels"))
                .and_then(Value::as_object_mut)
            {
                labels.retain(|k, _| {
                    !k.starts_with("batch.kubernetes.io/")
                        && k != "controller-uid"
                        && k != "job-name"
                });
            }
        }
        ("Pod", Some(spec)) => {
            spec.remove("nodeName");
            // The ServiceAccount admission plugin adds the token volume again.
            if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
                volumes.retain(|v| !is_token_volume(v));
            }
            for containers in ["containers", "initContainers"] {
                for c in spec
                    .get_mut(containers)
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(mounts) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                        mounts.retain(|m| !is_token_volume(m));
                    }
                }
            }
        }
        // A headless Service keeps `None`; another gets a new address.
        ("Service", Some(spec))
            if spec.get("clusterIP").and_then(Value::as_str) != Some("None") =>
        {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        _ => {}
    }
    obj
}

/// Objects whose later changes by the operator are replayed: RBAC, Services, budgets and HCCL
/// rank tables (an acceptance engine waits for its table to say `completed`; the floor writes the
/// operator's table, whose addresses name the operator's pods). Other objects are immutable where
/// it matters (pods, Jobs, PodGroups, revisions) or also written by the workload (evidence).
fn tracks_updates(kind: usize, body: &Value) -> bool {
    match KINDS[kind].2 {
        "Role" | "RoleBinding" | "Service" | "PodDisruptionBudget" => true,
        "ConfigMap" => {
            body.pointer("/metadata/labels")
                .and_then(|l| l.get(labels::COMPONENT))
                .and_then(Value::as_str)
                == Some(deepinfer_operator::api::Component::RankTable.as_str())
        }
        _ => false,
    }
}

/// An object's content as the operator sets it: everything but server-kept metadata.
fn comparable(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| k == "labels" || k == "annotations");
    }
    body
}

fn is_token_volume(v: &Value) -> bool {
    v.get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| n.starts_with("kube-api-access-"))
}

/// One move of a replay.
#[derive(Debug)]
enum Move<'a> {
    /// Create these objects at once.
    Create(Vec<&'a Created>),
    /// Wait until one of these Jobs (the Job, or the leader of a run's rank Jobs) completed.
    Await(Vec<&'a Created>),
    /// Write the operator's later form of this object.
    Update(&'a Created),
    /// Delete this object (for a pod: once `ready` serve).
    Delete {
        kind: usize,
        name: &'a str,
        ready: &'a [String],
    },
    /// Wait until this object, deleted before, is gone: one of the same name is created next.
    Gone { kind: usize, name: &'a str },
}

/// The order in which the floor replays one deployment's steps of one phase. Creations go out
/// together until one has to wait for a Job's completion (or, for the rank Jobs of one
/// acceptance run, the leader's): where the operator was seen to find it complete, and in any
/// case before a Job of another run or a worker pod. Nothing else waits for a Job: the operator
/// writes an acceptance run's rank table, and may delete what it replaces, while the run is
/// under way (and the run cannot end before its table is written). An object deleted and then
/// created again under its name is created once the deleted one is gone, as the operator's
/// apply creates it on a later pass once its delete went through.
fn plan<'a>(steps: &[&'a Step]) -> Vec<Move<'a>> {
    let mut moves = Vec::new();
    let mut batch: Vec<&Created> = Vec::new();
    let mut pending: Vec<&Created> = Vec::new();
    let mut deleted: HashSet<(usize, &str)> = HashSet::new();
    let flush = |moves: &mut Vec<Move<'a>>,
                 batch: &mut Vec<&'a Created>,
                 pending: &mut Vec<&'a Created>,
                 wait: bool| {
        if !batch.is_empty() {
            moves.push(Move::Create(std::mem::take(batch)));
        }
        if wait && !pending.is_empty() {
            moves.push(Move::Await(std::mem::take(pending)));
        }
    };
    for step in steps {
        match &step.action {
            Action::Create(c) => {
                let waits = is_kind(c.kind, "Pod")
                    || (is_kind(c.kind, "Job")
                        && pending.first().is_some_and(|p| p.group != c.group));
                if waits {
                    flush(&mut moves, &mut batch, &mut pending, true);
                }
                if deleted.remove(&(c.kind, c.name.as_str())) {
                    flush(&mut moves, &mut batch, &mut pending, false);
                    moves.push(Move::Gone {
                        kind: c.kind,
                        name: &c.name,
                    });
                }
                batch.push(c);
                if is_kind(c.kind, "Job") {
                    pending.push(c);
                }
            }
            Action::Update(c) => {
                flush(&mut moves, &mut batch, &mut pending, false);
                moves.push(Move::Update(c));
            }
            Action::Completed { name } => {
                if pending.iter().any(|j| j.name == *name) {
                    flush(&mut moves, &mut batch, &mut pending, true);
                }
            }
            Action::Delete { kind, name, ready } => {
                flush(&mut moves, &mut batch, &mut pending, false);
                deleted.insert((*kind, name));
                moves.push(Move::Delete {
                    kind: *kind,
                    name,
                    ready,
                });
            }
        }
    }
    flush(&mut moves, &mut batch, &mut pending, true);
    moves
}

/// Whether `meta` is of an object not being deleted and created at `since` or later (the API
/// server keeps whole seconds: a second before `since` counts).
fn is_created_since(meta: &ObjectMeta, since: Timestamp) -> bool {
    let second_before = since
        .checked_sub(jiff::SignedDuration::from_secs(1))
        .unwrap_or(since);
    meta.deletion_timestamp.is_none()
        && meta
            .creation_timestamp
            .as_ref()
            .is_some_and(|t| t.0 >= second_before)
}

/// The floor in one namespace: its client and caches of Jobs and Pods (shared by the floor's
/// namespaces), and what the operator did in the namespace it stands in for.
struct Floor {
    client: Client,
    ns: String,
    jobs: Store<Job>,
    pods: Store<Pod>,
    /// Told of every change of `jobs` and `pods`.
    changed: Arc<Notify>,
    timeout: Duration,
    /// What the operator did; its namespace is named in RoleBinding subjects and Service DNS
    /// names.
    recorded: Recorded,
    /// The write slots every namespace's floor shares ([`PASSES_AT_ONCE`]).
    slots: Arc<Semaphore>,
    /// The pods with an IP that mount each ConfigMap.
    addressed: Addressed,
}

/// How often a waiting task looks at the caches again when no change was told.
const POLL: Duration = Duration::from_millis(250);

impl Floor {
    fn api(&self, kind: usize) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &api_resource(kind))
    }

    /// A write slot ([`PASSES_AT_ONCE`]), held while the deployment's task writes.
    async fn slot(&self) -> anyhow::Result<tokio::sync::SemaphorePermit<'_>> {
        Ok(self.slots.acquire().await?)
    }

    async fn until(&self, what: &str, done: impl Fn() -> bool) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            // Registered before the look, so that a change between the two is not missed.
            let changed = self.changed.notified();
            if done() {
                return Ok(());
            }
            anyhow::ensure!(start.elapsed() < self.timeout, "floor: {what} timed out");
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// The cache's key of the object `name` in this floor's namespace: a look-up by key, not a
    /// scan of every namespace's objects, since each of the tasks waiting looks again on every
    /// watch event.
    fn key<K: kube::Resource<DynamicType = ()>>(&self, name: &str) -> ObjectRef<K> {
        ObjectRef::new(name).within(&self.ns)
    }

    fn job_done(&self, name: &str) -> bool {
        self.jobs.get(&self.key(name)).is_some_and(|j| {
            j.status
                .as_ref()
                .and_then(|s| s.succeeded)
                .is_some_and(|n| n >= 1)
        })
    }

    fn pod<T>(&self, name: &str, f: impl Fn(&Pod) -> T) -> Option<T> {
        self.pods.get(&self.key(name)).map(|p| f(&p))
    }

    /// Replays one deployment's steps of one phase, in the order [`plan`] gives; then sets its
    /// pods serving.
    async fn replay(&self, steps: &[&Step], uid: (&str, &str)) -> anyhow::Result<()> {
        let mut live: Vec<String> = Vec::new();
        let mut serving: HashSet<String> = HashSet::new();
        // The objects whose delete left them in place (finalizers, a pod's grace period), with
        // their uids.
        let mut deleting: HashMap<(usize, &str), String> = HashMap::new();
        for next in plan(steps) {
            match next {
                Move::Create(batch) => self.create_batch(&batch, &mut live, uid).await?,
                Move::Await(jobs) => self.wait_for_jobs(&jobs).await?,
                Move::Update(c) => {
                    // A rank table names its ranks' addresses: it is completed once they have
                    // them, as the operator could only complete it then.
                    if let Some(ranks) = completed_ranks(&c.body) {
                        self.until(&format!("{ranks} addressed ranks of {}", c.name), || {
                            self.addressed.count(&self.ns, &c.name) >= ranks
                        })
                        .await?;
                    }
                    let patch = Patch::Merge(self.rewritten(c, uid)?);
                    let api = self.api(c.kind);
                    let params = PatchParams::default();
                    let _slot = self.slot().await?;
                    sent(Repeat::Unanswered, || api.patch(&c.name, &params, &patch)).await?;
                }
                Move::Delete { kind, name, ready } => {
                    if is_kind(kind, "Pod") {
                        let waited: Vec<String> =
                            live.iter().filter(|p| ready.contains(p)).cloned().collect();
                        self.serve(&waited, &mut serving).await?;
                    }
                    if let Some(uid) = self.delete(kind, name).await? {
                        deleting.insert((kind, name), uid);
                    }
                    live.retain(|p| p != name);
                    serving.remove(name);
                }
                Move::Gone { kind, name } => {
                    if let Some(uid) = deleting.remove(&(kind, name)) {
                        self.gone(kind, name, &uid).await?;
                    }
                }
            }
        }
        self.serve(&live, &mut serving).await
    }

    /// Deletes an object; returns its uid if it is still there, being deleted.
    async fn delete(&self, kind: usize, name: &str) -> anyhow::Result<Option<String>> {
        let api = self.api(kind);
        let params = DeleteParams::background();
        let _slot = self.slot().await?;
        match sent(Repeat::Unanswered, || api.delete(name, &params)).await {
            Ok(either) => Ok(either.left().and_then(|o| o.metadata.uid)),
            // The garbage collector may have been first (a Job's pods, a group).
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until the object `name` with `uid` is gone (watching it).
    async fn gone(&self, kind: usize, name: &str, uid: &str) -> anyhow::Result<()> {
        let deleted = kube::runtime::wait::await_condition(
            self.api(kind),
            name,
            kube::runtime::wait::conditions::is_deleted(uid),
        );
        tokio::time::timeout(self.timeout, deleted)
            .await
            .map_err(|_| anyhow::anyhow!("floor: {} {name} gone timed out", KINDS[kind].2))??;
        Ok(())
    }

    /// Whether the object `name` exists, not being deleted, created at `since` or later: the
    /// floor's own create, answered 409 AlreadyExists when kube's client sent it again after a
    /// 504 (the API server stopped waiting for the write, which then went through). Only the floor
    /// writes in its namespace; an object of the same name left from before (a delete whose
    /// object is not gone yet) is older or being deleted, and its 409 stays an error.
    async fn created_since(
        &self,
        kind: usize,
        name: &str,
        since: Timestamp,
    ) -> anyhow::Result<bool> {
        let api = self.api(kind);
        let found = sent(Repeat::Unanswered, || api.get_opt(name)).await?;
        Ok(found.is_some_and(|o| is_created_since(&o.metadata, since)))
    }

    /// Creates `batch` at once, the owner's uid `uid.0` replaced by `uid.1`; its pods join
    /// `live`.
    async fn create_batch(
        &self,
        batch: &[&Created],
        live: &mut Vec<String>,
        uid: (&str, &str),
    ) -> anyhow::Result<()> {
        // What pods and Jobs refer to (their PodGroup above all: pods created before it would
        // be placed one by one, not as a gang) goes first.
        let (workloads, referred): (Vec<&Created>, Vec<&Created>) = batch
            .iter()
            .copied()
            .partition(|c| is_kind(c.kind, "Pod") || is_kind(c.kind, "Job"));
        for stage in [referred, workloads] {
            let _slot = self.slot().await?;
            futures::stream::iter(stage.iter().map(|c| async {
                let body: DynamicObject = serde_json::from_value(self.rewritten(c, uid)?)?;
                let api = self.api(c.kind);
                let params = PostParams::default();
                let since = Timestamp::now();
                match sent(Repeat::Unsent, || api.create(&params, &body)).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status))
                        if status.code == 409
                            && self.created_since(c.kind, &c.name, since).await? => {}
                    Err(e) => return Err(e.into()),
                }
                anyhow::Ok(())
            }))
            .buffer_unordered(BATCH)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<anyhow::Result<Vec<()>>>()?;
        }
        live.extend(
            batch
                .iter()
                .filter(|c| is_kind(c.kind, "Pod"))
                .map(|c| c.name.clone()),
        );
        Ok(())
    }

    /// The object for the floor's namespace and its deployment `uid.1` (was `uid.0`).
    fn rewritten(&self, c: &Created, uid: (&str, &str)) -> anyhow::Result<Value> {
        let mut body = serde_json::to_string(&c.body)?.replace(&self.recorded.namespace, &self.ns);
        if !uid.0.is_empty() {
            body = body.replace(uid.0, uid.1);
        }
        Ok(serde_json::from_str(&body)?)
    }

    /// Waits until one of `jobs` (the Job, or the leader of a run's rank Jobs) completed.
    async fn wait_for_jobs(&self, jobs: &[&Created]) -> anyhow::Result<()> {
        let Some(first) = jobs.first() else {
            return Ok(());
        };
        self.until(&format!("Job {} (or its run) complete", first.name), || {
            jobs.iter().any(|j| self.job_done(&j.name))
        })
        .await
    }

    /// Sets the `deepinfer.io/accepted` condition on each of `pods` not yet `serving` once it
    /// runs, then waits until it is Ready.
    async fn serve(&self, pods: &[String], serving: &mut HashSet<String>) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let todo: Vec<&String> = pods.iter().filter(|p| !serving.contains(*p)).collect();
        let api = &api;
        futures::future::try_join_all(todo.iter().map(|name| async move {
            self.until(&format!("pod {name} Running"), || {
                self.pod(name, |pod| {
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .unwrap_or(false)
            })
            .await?;
            let condition = self.recorded.accepted.get(*name).cloned().unwrap_or_else(
                || json!({"type": ACCEPTED_POD_CONDITION, "status": "True", "reason": "Accepted"}),
            );
            let patch = Patch::Strategic(json!({"status": {"conditions": [condition]}}));
            let params = PatchParams::default();
            let slot = self.slot().await?;
            sent(Repeat::Unanswered, || {
                api.patch_status(name, &params, &patch)
            })
            .await?;
            drop(slot);
            self.until(&format!("pod {name} Ready"), || {
                self.pod(name, deepinfer_operator::controller::pods::pod_ready)
                    .unwrap_or(false)
            })
            .await
        }))
        .await?;
        serving.extend(todo.into_iter().cloned());
        Ok(())
    }

    /// One deployment through one phase: the user's create (phase 0) or spec change, the
    /// operator's steps, then the status the operator ended with.
    async fn phase(&self, phase: usize, did: &DeepInferDeployment) -> anyhow::Result<()> {
        let api: Api<DeepInferDeployment> = Api::namespaced(self.client.clone(), &self.ns);
        let name = did.name_any();
        let ours = if phase == 0 {
            self.create_deployment(did).await?
        } else {
            let spec = Patch::Merge(json!({"spec": did.spec}));
            let params = PatchParams::default();
            sent(Repeat::Unanswered, || api.patch(&name, &params, &spec)).await?
        };
        let mine: Vec<&Step> = self
            .recorded
            .steps
            .get(&name)
            .into_iter()
            .flatten()
            .filter(|s| s.phase == phase)
            .collect();
        let uid = self.uids(&name, &ours, !mine.is_empty())?;
        self.replay(&mine, (&uid.0, &uid.1)).await?;
        self.write_status(did).await
    }

    /// One deployment as the operator left it at the end of phase `phase - 1`, without
    /// replaying how it got there: the deployment, the objects then alive ([`Recorded::converged`])
    /// created at once, its worker pods accepted and Ready, and the status the operator ended
    /// that phase with.
    async fn converge(&self, phase: usize, did: &DeepInferDeployment) -> anyhow::Result<()> {
        let ours = self.create_deployment(did).await?;
        let objects = self.recorded.converged(&did.name_any(), phase);
        let uid = self.uids(&did.name_any(), &ours, !objects.is_empty())?;
        let mut live = Vec::new();
        self.create_batch(&objects, &mut live, (&uid.0, &uid.1))
            .await?;
        self.serve(&live, &mut HashSet::new()).await?;
        self.write_status(did).await
    }

    /// Creates the deployment `did` (its spec and annotations) in the floor's namespace.
    async fn create_deployment(
        &self,
        did: &DeepInferDeployment,
    ) -> anyhow::Result<DeepInferDeployment> {
        let api: Api<DeepInferDeployment> = Api::namespaced(self.client.clone(), &self.ns);
        let mut fresh = DeepInferDeployment::new(&did.name_any(), did.spec.clone());
        fresh.metadata.annotations = did.metadata.annotations.clone();
        let params = PostParams::default();
        Ok(sent(Repeat::Unsent, || api.create(&params, &fresh)).await?)
    }

    /// The uid of the operator's deployment `name` and of the floor's `ours`, to rewrite owner
    /// references with; the operator's must be known if there is anything to replay.
    fn uids(
        &self,
        name: &str,
        ours: &DeepInferDeployment,
        replays: bool,
    ) -> anyhow::Result<(String, String)> {
        let theirs = self.recorded.uids.get(name).cloned().unwrap_or_default();
        anyhow::ensure!(!theirs.is_empty() || !replays, "no uid recorded for {name}");
        Ok((theirs, ours.metadata.uid.clone().unwrap_or_default()))
    }

    /// Writes the status the operator ended a phase with.
    async fn write_status(&self, did: &DeepInferDeployment) -> anyhow::Result<()> {
        let api: Api<DeepInferDeployment> = Api::namespaced(self.client.clone(), &self.ns);
        let (name, params) = (did.name_any(), PatchParams::default());
        let status = Patch::Merge(json!({"status": did.status}));
        let _slot = self.slot().await?;
        sent(Repeat::Unanswered, || {
            api.patch_status(&name, &params, &status)
        })
        .await?;
        Ok(())
    }
}

/// Runs the floor: for each `(namespace, recorded)`, in that fresh namespace, the deployments
/// of each phase from `start` on (as the operator left them in the recorded namespace) through
/// the steps the operator took in that phase, all deployments of every namespace at once. With
/// `start` above 0 the phases before it are not replayed: phase `floor-setup` first creates what
/// the operator left at the end of phase `start - 1` ([`Floor::converge`]).
pub async fn run(
    namespaces: Vec<(String, Recorded)>,
    phases: &[(String, Vec<DeepInferDeployment>)],
    start: usize,
    agent: u32,
    timeout: Duration,
) -> anyhow::Result<Vec<PhaseFigures>> {
    let (client, metrics) = counting_client().await?;
    // Watched as the operator watches: its one namespace, else every namespace.
    let scope = match namespaces.as_slice() {
        [(ns, _)] => Some(ns.as_str()),
        _ => None,
    };
    let watches = watch_jobs_and_pods(&client, scope);
    let slots = Arc::new(Semaphore::new(PASSES_AT_ONCE));
    let floors: Vec<Floor> = namespaces
        .into_iter()
        .map(|(ns, recorded)| Floor {
            client: client.clone(),
            ns,
            jobs: watches.jobs.clone(),
            pods: watches.pods.clone(),
            changed: watches.changed.clone(),
            addressed: watches.addressed.clone(),
            timeout,
            recorded,
            slots: slots.clone(),
        })
        .collect();
    let setup = start.checked_sub(1).map(|before| {
        (
            "setup".to_string(),
            &phases[before].1,
            Work::Converge(start),
        )
    });
    let replayed = phases
        .iter()
        .enumerate()
        .skip(start)
        .map(|(phase, (name, dids))| (name.clone(), dids, Work::Replay(phase)));
    let setup_slots = Semaphore::new(SETUP_AT_ONCE);
    let mut figures = Vec::new();
    for (name, dids, work) in setup.into_iter().chain(replayed) {
        let probe =
            Probe::start_client(&format!("floor-{name}"), dids.len(), metrics.clone(), agent).await;
        let results = futures::future::join_all(dids.iter().map(|did| {
            let floor = floors
                .iter()
                .find(|f| did.metadata.namespace.as_ref() == Some(&f.recorded.namespace));
            let slots = &setup_slots;
            async move {
                let floor = floor.ok_or_else(|| {
                    anyhow::anyhow!("floor: no namespace stands in for {}", did.name_any())
                })?;
                match work {
                    Work::Replay(phase) => floor.phase(phase, did).await,
                    Work::Converge(phase) => {
                        let _slot = slots.acquire().await?;
                        floor.converge(phase, did).await
                    }
                }
            }
        }))
        .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        figures.push(probe.finish().await.printed());
    }
    watches.task.abort();
    Ok(figures)
}

/// How many deployments the floor sets up at once (`floor-setup`, compared with nothing): all
/// 1000 at once flood the API server (Service creates answered 504 after 34 s, again and again).
const SETUP_AT_ONCE: usize = 100;

/// What the floor does for each deployment in one of its phases.
#[derive(Clone, Copy)]
enum Work {
    /// Replays the operator's steps of this phase.
    Replay(usize),
    /// Creates what the operator left at the start of this phase.
    Converge(usize),
}

/// The floor's client: the operator's kind, counting its requests.
async fn counting_client() -> anyhow::Result<(Client, Arc<Metrics>)> {
    let kubeconfig = kube::config::Kubeconfig::read_from(deepinfer_e2e::support::kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let requests = ApiRequests::default();
    let client = deepinfer_operator::controller::counting_client(config, &requests)?;
    Ok((client, Arc::new(Metrics::new(requests))))
}

/// Caches of the Jobs and Pods of namespace `scope` (every namespace if `None`), told of each
/// change (so that a wait ends as its watch event arrives, as the operator's pass starts), and
/// the task that keeps them current.
fn watch_jobs_and_pods(client: &Client, scope: Option<&str>) -> Watches {
    let (job_api, pod_api): (Api<Job>, Api<Pod>) = match scope {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (jobs, jobs_writer) = reflector::store();
    let (pods, pods_writer) = reflector::store();
    let changed = Arc::new(Notify::new());
    let addressed = Addressed::default();
    let watch_jobs =
        reflector::reflector(jobs_writer, watcher(job_api, watcher::Config::default()))
            .default_backoff()
            .for_each(tell(changed.clone()));
    let watch_pods =
        reflector::reflector(pods_writer, watcher(pod_api, watcher::Config::default()))
            .default_backoff()
            .for_each({
                let (changed, addressed) = (changed.clone(), addressed.clone());
                move |event| {
                    if let Ok(event) = &event {
                        addressed.note(event);
                    }
                    changed.notify_waiters();
                    std::future::ready(())
                }
            });
    let task = tokio::spawn(async move { futures::join!(watch_jobs, watch_pods) });
    Watches {
        jobs,
        pods,
        changed,
        addressed,
        task,
    }
}

/// By namespace and ConfigMap: the pods that mount it and have an IP (a rank table lists its
/// ranks' addresses, so no client can write it completed before they have one).
#[derive(Clone, Default)]
struct Addressed(Arc<Mutex<HashMap<MountedBy, HashSet<String>>>>);

/// A ConfigMap as pods mount it: (namespace, name).
type MountedBy = (String, String);

impl Addressed {
    fn note(&self, event: &watcher::Event<Pod>) {
        let (pod, gone) = match event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
            watcher::Event::Delete(p) => (p, true),
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        let has_ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_ref())
            .is_some();
        let live = !gone && has_ip && pod.metadata.deletion_timestamp.is_none();
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let mounted = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.config_map.as_ref().map(|c| c.name.clone()));
        let mut by_cm = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for cm in mounted {
            let key = (ns.clone(), cm);
            if live {
                by_cm.entry(key).or_default().insert(name.clone());
            } else if let Some(pods) = by_cm.get_mut(&key) {
                pods.remove(&name);
                if pods.is_empty() {
                    by_cm.remove(&key);
                }
            }
        }
    }

    fn count(&self, ns: &str, configmap: &str) -> usize {
        let by_cm = self.0.lock().unwrap_or_else(|e| e.into_inner());
        by_cm
            .get(&(ns.to_string(), configmap.to_string()))
            .map_or(0, HashSet::len)
    }
}

/// The ranks a rank table ConfigMap lists when it says `completed`, else `None`.
fn completed_ranks(body: &Value) -> Option<usize> {
    use deepinfer_operator::controller::build::RANK_TABLE_KEY;
    let table: Value =
        serde_json::from_str(body.pointer("/data")?.get(RANK_TABLE_KEY)?.as_str()?).ok()?;
    if table.get("status")?.as_str()? != "completed" {
        return None;
    }
    table.get("server_count")?.as_str()?.parse().ok()
}

/// A watch stream's consumer that tells `changed` of each event.
fn tell<T>(changed: Arc<Notify>) -> impl FnMut(T) -> std::future::Ready<()> {
    move |_| {
        changed.notify_waiters();
        std::future::ready(())
    }
}

/// The floor's caches of Jobs and Pods, what tells of their changes, and the task that keeps
/// them current.
struct Watches {
    jobs: Store<Job>,
    pods: Store<Pod>,
    changed: Arc<Notify>,
    addressed: Addressed,
    task: tokio::task::JoinHandle<((), ())>,
}

/// Replays `steps` in the namespace `ns` as the floor replays one deployment's steps of one
/// phase, for no deployment (`deepinfer-bench --replay`). `steps` is a JSON array of
/// `{"create": object}`, `{"update": object}`, `{"delete": {"kind": K, "name": N}}` and
/// `{"completed": job name}`, objects as create requests of the kinds the operator creates.
pub async fn replay(ns: &str, steps: &Value, timeout: Duration) -> anyhow::Result<usize> {
    let steps = steps_from_json(steps)?;
    let (client, _) = counting_client().await?;
    let watches = watch_jobs_and_pods(&client, Some(ns));
    let floor = Floor {
        client,
        ns: ns.to_string(),
        jobs: watches.jobs.clone(),
        pods: watches.pods.clone(),
        changed: watches.changed.clone(),
        addressed: watches.addressed.clone(),
        timeout,
        recorded: Recorded {
            namespace: ns.to_string(),
            steps: BTreeMap::new(),
            accepted: HashMap::new(),
            uids: HashMap::new(),
        },
        slots: Arc::new(Semaphore::new(PASSES_AT_ONCE)),
    };
    let result = floor
        .replay(&steps.iter().collect::<Vec<_>>(), ("", ""))
        .await;
    watches.task.abort();
    result.map(|()| steps.len())
}

/// The steps of [`replay`]'s JSON form.
fn steps_from_json(steps: &Value) -> anyhow::Result<Vec<Step>> {
    let kind_named = |name: Option<&str>| {
        let name = name.unwrap_or_default();
        KINDS
            .iter()
            .position(|k| k.2 == name)
            .ok_or_else(|| anyhow::anyhow!("replay: {name:?} is not a kind the operator creates"))
    };
    let created = |body: &Value| -> anyhow::Result<Created> {
        let name = body.pointer("/metadata/name").and_then(Value::as_str);
        Ok(Created {
            kind: kind_named(body.get("kind").and_then(Value::as_str))?,
            name: name
                .ok_or_else(|| anyhow::anyhow!("replay: an object without a name: {body}"))?
                .to_string(),
            group: body
                .pointer("/metadata/labels")
                .and_then(|l| l.get(labels::GROUP))
                .and_then(Value::as_str)
                .map(str::to_string),
            body: body.clone(),
        })
    };
    let action = |step: &Value| -> anyhow::Result<Action> {
        if let Some(body) = step.get("create") {
            Ok(Action::Create(created(body)?))
        } else if let Some(body) = step.get("update") {
            Ok(Action::Update(created(body)?))
        } else if let Some(deleted) = step.get("delete") {
            let text = |key: &str| deleted.get(key).and_then(Value::as_str);
            Ok(Action::Delete {
                kind: kind_named(text("kind"))?,
                name: text("name")
                    .ok_or_else(|| anyhow::anyhow!("replay: a delete without a name: {step}"))?
                    .to_string(),
                ready: Vec::new(),
            })
        } else if let Some(name) = step.get("completed").and_then(Value::as_str) {
            Ok(Action::Completed {
                name: name.to_string(),
            })
        } else {
            anyhow::bail!("replay: not a step: {step}")
        }
    };
    steps
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("replay: the steps are a JSON array"))?
        .iter()
        .map(|step| {
            Ok(Step {
                phase: 0,
                deployment: String::new(),
                action: action(step)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completed_rank_table_is_written_once_its_ranks_are_addressed() {
        let table = |status: &str, count: &str| {
            let hccl = json!({"status": status, "server_count": count, "server_list": [], "version": "1.0"});
            json!({"data": {deepinfer_operator::controller::build::RANK_TABLE_KEY: hccl.to_string()}})
        };
        assert_eq!(completed_ranks(&table("completed", "8")), Some(8));
        assert_eq!(completed_ranks(&table("initializing", "0")), None);
        assert_eq!(completed_ranks(&json!({"data": {"other": "x"}})), None);
    }

    /// A create answered 409 is the floor's own (sent again by the client after a 504) only if
    /// the object there was created since the create was first sent and is not being deleted.
    #[test]
    fn a_conflict_is_the_floors_own_create_only_for_a_live_object_created_since() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let since: Timestamp = "2026-12-07T00:33:10.7Z".parse().unwrap();
        let meta = |created: &str, deleting: bool| ObjectMeta {
            creation_timestamp: Some(Time(created.parse().unwrap())),
            deletion_timestamp: deleting.then_some(Time(since)),
            ..ObjectMeta::default()
        };
        assert!(is_created_since(
            &meta("2026-12-07T00:37:12Z", false),
            since
        ));
        // The API server's whole second may fall before the instant the create was sent.
        assert!(is_created_since(
            &meta("2026-12-07T00:33:10Z", false),
            since
        ));
        assert!(!is_created_since(
            &meta("2026-12-07T00:33:05Z", false),
            since
        ));
        assert!(!is_created_since(
            &meta("2026-12-07T00:37:12Z", true),
            since
        ));
        assert!(!is_created_since(&ObjectMeta::default(), since));
    }

    fn kind(name: &str) -> usize {
        KINDS
            .iter()
            .position(|k| k.2 == name)
            .expect("a kind the floor knows")
    }

    fn created(kind_name: &str, name: &str, group: Option<&str>) -> Created {
        Created {
            kind: kind(kind_name),
            name: name.to_string(),
            group: group.map(str::to_string),
            body: json!({}),
        }
    }

    fn step(action: Action) -> Step {
        Step {
            phase: 1,
            deployment: "d".to_string(),
            action,
        }
    }

    /// The plan as `create a b`, `await a b`, `update a`, `delete a`.
    fn shown(steps: &[Step]) -> Vec<String> {
        let steps: Vec<&Step> = steps.iter().collect();
        let names = |cs: &[&Created]| {
            cs.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        plan(&steps)
            .iter()
            .map(|m| match m {
                Move::Create(cs) => format!("create {}", names(cs)),
                Move::Await(cs) => format!("await {}", names(cs)),
                Move::Update(c) => format!("update {}", c.name),
                Move::Delete { name, .. } => format!("delete {name}"),
                Move::Gone { name, .. } => format!("gone {name}"),
            })
            .collect()
    }

    /// An Ascend acceptance run in a rollout: the operator creates the run's rank table and rank
    /// Jobs, deletes an old object while the run's pods are being placed, then writes the table
    /// `completed` (the engine waits for it) and, once the run passed, creates worker pods.
    fn ascend_rollout() -> Vec<Step> {
        vec![
            step(Action::Create(created("ConfigMap", "table", None))),
            step(Action::Create(created("Job", "rank-0", Some("run")))),
            step(Action::Create(created("Job", "rank-1", Some("run")))),
            step(Action::Delete {
                kind: kind("Pod"),
                name: "old-0".to_string(),
                ready: Vec::new(),
            }),
            step(Action::Update(created("ConfigMap", "table", None))),
            step(Action::Create(created("Pod", "new-0", None))),
        ]
    }

    #[test]
    fn a_deletion_while_a_run_is_under_way_does_not_wait_for_the_run() {
        // Waiting for the run before the deletion would wait for ever: the run needs the
        // table's update, which comes after the deletion.
        assert_eq!(
            shown(&ascend_rollout()),
            [
                "create table rank-0 rank-1",
                "delete old-0",
                "update table",
                "await rank-0 rank-1",
                "create new-0"
            ]
        );
    }

    #[test]
    fn a_run_is_awaited_where_the_operator_saw_it_complete() {
        let steps = [
            step(Action::Create(created("Job", "verify", None))),
            step(Action::Completed {
                name: "verify".to_string(),
            }),
            step(Action::Delete {
                kind: kind("Job"),
                name: "verify".to_string(),
                ready: Vec::new(),
            }),
            step(Action::Create(created("Job", "accept", None))),
            // A Job of another phase or of no pending run changes nothing.
            step(Action::Completed {
                name: "elsewhere".to_string(),
            }),
            step(Action::Create(created("Service", "serve", None))),
        ];
        assert_eq!(
            shown(&steps),
            [
                "create verify",
                "await verify",
                "delete verify",
                "create accept serve",
                "await accept"
            ]
        );
    }

    #[test]
    fn a_name_created_again_after_its_delete_is_created_once_the_deleted_object_is_gone() {
        // The operator verifies again under the same name: the first Job is deleted, and the
        // second may not be created while the first is still being deleted (409 AlreadyExists).
        let steps = [
            step(Action::Create(created("Job", "verify", None))),
            step(Action::Completed {
                name: "verify".to_string(),
            }),
            step(Action::Delete {
                kind: kind("Job"),
                name: "verify".to_string(),
                ready: Vec::new(),
            }),
            // Deleted and not created again: nothing waits for it to be gone.
            step(Action::Delete {
                kind: kind("ConfigMap"),
                name: "spec".to_string(),
                ready: Vec::new(),
            }),
            step(Action::Create(created("Service", "serve", None))),
            step(Action::Create(created("Job", "verify", None))),
            step(Action::Completed {
                name: "verify".to_string(),
            }),
        ];
        assert_eq!(
            shown(&steps),
            [
                "create verify",
                "await verify",
                "delete verify",
                "delete spec",
                "create serve",
                "gone verify",
                "create verify",
                "await verify"
            ]
        );
    }

    #[test]
    fn the_converged_set_is_what_the_steps_before_a_phase_left_alive_jobs_aside() {
        let at = |phase: usize, action: Action| Step {
            phase,
            ..step(action)
        };
        let delete = |kind_name: &str, name: &str| Action::Delete {
            kind: kind(kind_name),
            name: name.to_string(),
            ready: Vec::new(),
        };
        let mut table = created("ConfigMap", "table", None);
        table.body = json!({"data": {"status": "completed"}});
        let steps = vec![
            at(0, Action::Create(created("Job", "verify", None))),
            at(0, Action::Create(created("ConfigMap", "table", None))),
            at(0, Action::Create(created("Pod", "old-0", None))),
            at(0, Action::Create(created("Pod", "old-1", None))),
            at(0, Action::Create(created("Service", "serve", None))),
            at(0, delete("Pod", "old-1")),
            at(0, Action::Create(created("Pod", "old-1", None))),
            at(0, Action::Update(table)),
            at(0, delete("ConfigMap", "spec")),
            at(1, delete("Pod", "old-0")),
            at(1, Action::Create(created("Pod", "new-0", None))),
        ];
        let recorded = Recorded {
            namespace: "ns".to_string(),
            steps: BTreeMap::from([("d".to_string(), steps)]),
            accepted: HashMap::new(),
            uids: HashMap::new(),
        };
        let shown = |phase| {
            recorded
                .converged("d", phase)
                .iter()
                .map(|c| format!("{} {} {}", KINDS[c.kind].2, c.name, c.body))
                .collect::<Vec<_>>()
        };
        // In the floor's order of kinds (what pods refer to first), the table as last written.
        assert_eq!(
            shown(1),
            [
                r#"ConfigMap table {"data":{"status":"completed"}}"#,
                "Service serve {}",
                "Pod old-0 {}",
                "Pod old-1 {}"
            ]
        );
        // After the rollout's steps: old-0 replaced by new-0.
        assert_eq!(
            shown(2)[2..],
            ["Pod new-0 {}".to_string(), "Pod old-1 {}".to_string()]
        );
        assert!(recorded.converged("other", 1).is_empty());
    }

    fn job(succeeded: Option<i64>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "accept",
                "labels": {labels::DEPLOYMENT: "d"},
                "ownerReferences": [{
                    "apiVersion": "deepinfer.io/v1alpha1",
                    "kind": "DeepInferDeployment",
                    "name": "d",
                    "uid": "u",
                }],
            },
            "spec": {"template": {"spec": {"containers": []}}},
            "status": {"succeeded": succeeded},
        }))
        .expect("a Job")
    }

    /// The recorded actions as `create a`, `completed a`, `delete a`.
    fn recorded(recording: &Recording) -> Vec<String> {
        recording
            .steps
            .iter()
            .map(|s| match &s.action {
                Action::Create(c) => format!("create {}", c.name),
                Action::Completed { name } => format!("completed {name}"),
                Action::Delete { name, .. } => format!("delete {name}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_recorder_notes_once_when_a_job_it_saw_created_is_complete() {
        let mut recording = Recording::default();
        for succeeded in [None, Some(0), Some(1), Some(1)] {
            recording.apply(kind("Job"), &job(succeeded));
        }
        assert_eq!(recorded(&recording), ["create accept", "completed accept"]);
    }

    #[test]
    fn the_recorder_notes_a_job_created_again_after_its_delete_and_its_completion() {
        let mut recording = Recording::default();
        for succeeded in [None, Some(1)] {
            recording.apply(kind("Job"), &job(succeeded));
        }
        recording.delete(kind("Job"), &job(Some(1)));
        for succeeded in [None, Some(1)] {
            recording.apply(kind("Job"), &job(succeeded));
        }
        assert_eq!(
            recorded(&recording),
            [
                "create accept",
                "completed accept",
                "delete accept",
                "create accept",
                "completed accept"
            ]
        );
    }
}
