//! The shapes the controller's caches keep of its own resources, of every kind it owns and of
//! checkpoint claims. Each is decoded straight from the API server's lists and watch events
//! into only what a pass reads, so a cached object costs a fraction of the API type it stands
//! for (a `Pod` value is 2.4 KB before any of its strings, a `Job` 2.8 KB and each of its
//! containers 2.3 KB; a spec as a tree of JSON values takes about ten times its text; a label
//! map takes a 640-byte node however few its entries). The metadata of an owned object keeps
//! only what the passes read, without an `ObjectMeta` once stored ([`Slim`], [`Marks`]). A pass
//! turns what it reads back into the API type ([`Cached::to_api`],
//! [`CachedDeployment::to_value`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    Pod, PodCondition, PodResourceClaim, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, PodGroupResourceClaim, PodGroupSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::build::{APPLIED_HASH_ANNOTATION, ASCEND_910_ANNOTATION, ASCEND_NPU_ANNOTATION};
use crate::api::{labels, ACCEPTED_POD_CONDITION};

/// The label the Job controller sets on its pods, naming their Job.
pub const JOB_NAME_LABEL: &str = "job-name";

/// The labels some pass reads on the operator's objects; the caches keep no other label.
const KEPT_LABELS: &[&str] = &[
    labels::MANAGED_BY,
    labels::DEPLOYMENT,
    labels::ROLE,
    labels::GROUP,
    labels::RANK,
    labels::REVISION,
    labels::COMPONENT,
    JOB_NAME_LABEL,
];

/// The annotations some pass reads on the operator's objects (the applied hash; the device
/// configuration the Ascend device plugin writes on pods); the caches keep no other annotation.
const KEPT_ANNOTATIONS: &[&str] = &[
    APPLIED_HASH_ANNOTATION,
    ASCEND_910_ANNOTATION,
    ASCEND_NPU_ANNOTATION,
];

/// The pod conditions some pass reads; a cached pod keeps no other.
const KEPT_POD_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "Ready",
    "DisruptionTarget",
    ACCEPTED_POD_CONDITION,
];

/// Labels or annotations as a cache keeps them: the kept keys the object has, with their values,
/// in the order of the kept keys, packed into one allocation (none when there are none): each
/// entry is the key's index in [`kept_keys`], the value's length (4 bytes, little-endian) and
/// the value. A map would take a 640-byte node and two strings per entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks(Box<[u8]>);

/// Every key a [`Marks`] may hold: the kept labels, then the kept annotations.
fn kept_keys() -> impl Iterator<Item = &'static str> {
    KEPT_LABELS.iter().chain(KEPT_ANNOTATIONS).copied()
}

impl Marks {
    /// The entries of `map` under one of `keys` (each one of [`kept_keys`]).
    fn kept(map: Option<BTreeMap<String, String>>, keys: &[&'static str]) -> Self {
        let Some(map) = map else {
            return Self::default();
        };
        let mut packed = Vec::new();
        for (index, key) in kept_keys().enumerate() {
            let (Some(value), Ok(index)) = (map.get(key), u8::try_from(index)) else {
                continue;
            };
            let Ok(len) = u32::try_from(value.len()) else {
                continue;
            };
            if keys.contains(&key) {
                packed.push(index);
                packed.extend_from_slice(&len.to_le_bytes());
                packed.extend_from_slice(value.as_bytes());
            }
        }
        Self(packed.into_boxed_slice())
    }

    /// The entries, in the order of the kept keys.
    fn entries(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let mut rest: &[u8] = &self.0;
        std::iter::from_fn(move || {
            let (&index, after) = rest.split_first()?;
            let (len, after) = after.split_first_chunk::<4>()?;
            let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
            let (value, after) = (after.get(..len)?, after.get(len..)?);
            rest = after;
            let key = kept_keys().nth(usize::from(index))?;
            Some((key, std::str::from_utf8(value).ok()?))
        })
    }

    /// The value of `key`, if kept.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The entries as the API types hold them (`None` when there are none).
    fn to_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.0.is_empty()).then(|| {
            self.entries()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }
}

/// Annotation `kubectl apply` leaves: a copy of the whole object, never read here.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops `managedFields` and the last-applied annotation.
fn trim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// The API versions and kinds of the owners of cached objects, shared rather than allocated per
/// owner reference.
const OWNER_TYPES: &[&str] = &[
    "deepinfer.io/v1alpha1",
    "DeepInferDeployment",
    "batch/v1",
    "Job",
];

fn shared(s: String) -> Cow<'static, str> {
    OWNER_TYPES
        .iter()
        .find(|&&t| t == s)
        .map_or(Cow::Owned(s), |&t| Cow::Borrowed(t))
}

/// An owner reference as a cache keeps it.
#[derive(Clone, Debug)]
struct Owner {
    api_version: Cow<'static, str>,
    kind: Cow<'static, str>,
    name: Box<str>,
    uid: Box<str>,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

impl Owner {
    fn to_api(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

impl From<OwnerReference> for Owner {
    fn from(o: OwnerReference) -> Self {
        Self {
            api_version: shared(o.api_version),
            kind: shared(o.kind),
            name: o.name.into_boxed_str(),
            uid: o.uid.into_boxed_str(),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        }
    }
}

/// The metadata of a cached object of an owned kind (or a checkpoint claim), cut down as it is
/// decoded to what the passes read: name and namespace (one string, `namespace/name`, also the
/// store's key), uid, resourceVersion, generation, creation and deletion times, owner
/// references, and the kept labels and annotations ([`Marks`]). `managedFields`, finalizers,
/// `generateName` and every other label and annotation are dropped.
///
/// An object on its way through a watch also carries its decoded `ObjectMeta` (without labels
/// and annotations), which the watcher and the trigger mappings read through `kube::Resource`;
/// the stores drop it ([`Cached::kept`]). A stored object is read through this type only.
#[derive(Clone, Debug, Default)]
pub struct Slim {
    wire: Option<Box<ObjectMeta>>,
    key: Box<str>,
    uid: Box<str>,
    resource_version: Box<str>,
    generation: Option<i64>,
    created: Option<Time>,
    deleted: Option<Time>,
    owners: Box<[Owner]>,
    labels: Marks,
    annotations: Marks,
}

/// Metadata read through `kube::Resource` of an object a store holds: nothing (see [`Slim`]).
fn no_meta() -> &'static ObjectMeta {
    static NONE: std::sync::OnceLock<ObjectMeta> = std::sync::OnceLock::new();
    NONE.get_or_init(ObjectMeta::default)
}

fn text(s: &Option<String>) -> Box<str> {
    s.as_deref().unwrap_or_default().into()
}

fn some_text(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl Slim {
    /// The decoded metadata of an object on its way through a watch; of a stored object, empty.
    fn wire(&self) -> &ObjectMeta {
        match &self.wire {
            Some(meta) => meta,
            None => no_meta(),
        }
    }

    /// `namespace/name`: the store's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        self.key
            .split_once('/')
            .map_or(&*self.key, |(_, name)| name)
    }

    /// The object's namespace (`None` for a cluster-scoped object).
    pub fn namespace(&self) -> Option<&str> {
        self.key
            .split_once('/')
            .map(|(ns, _)| ns)
            .filter(|ns| !ns.is_empty())
    }

    /// The uids of the object's owners.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.owners.iter().map(|o| &*o.uid)
    }

    /// Whether the object names `uid` among its owners.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.owner_uids().any(|o| o == uid)
    }

    /// The metadata with the kept labels and annotations back in.
    fn full(&self) -> ObjectMeta {
        let (namespace, name) = match self.key.split_once('/') {
            Some((ns, name)) => (some_text(ns), some_text(name)),
            None => (None, some_text(&self.key)),
        };
        ObjectMeta {
            name,
            namespace,
            uid: some_text(&self.uid),
            resource_version: some_text(&self.resource_version),
            generation: self.generation,
            creation_timestamp: self.created.clone(),
            deletion_timestamp: self.deleted.clone(),
            owner_references: (!self.owners.is_empty())
                .then(|| self.owners.iter().map(Owner::to_api).collect()),
            labels: self.labels.to_map(),
            annotations: self.annotations.to_map(),
            ..ObjectMeta::default()
        }
    }
}

impl<'de> Deserialize<'de> for Slim {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut meta = ObjectMeta::deserialize(deserializer)?;
        meta.managed_fields = None;
        meta.finalizers = None;
        meta.generate_name = None;
        meta.self_link = None;
        let labels = Marks::kept(meta.labels.take(), KEPT_LABELS);
        let annotations = Marks::kept(meta.annotations.take(), KEPT_ANNOTATIONS);
        Ok(Self {
            key: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            )
            .into_boxed_str(),
            uid: text(&meta.uid),
            resource_version: text(&meta.resource_version),
            generation: meta.generation,
            created: meta.creation_timestamp.clone(),
            deleted: meta.deletion_timestamp.clone(),
            owners: meta
                .owner_references
                .iter()
                .flatten()
                .cloned()
                .map(Owner::from)
                .collect(),
            labels,
            annotations,
            wire: Some(Box::new(meta)),
        })
    }
}

/// A cached shape's cut-down metadata.
pub trait Slimmed {
    /// The metadata as the cache keeps it.
    fn slim(&self) -> &Slim;

    /// The same, to change.
    fn slim_mut(&mut self) -> &mut Slim;
}

/// An object as a cache of the owned kinds keeps it, and how a pass reads it.
pub trait Cached: Slimmed + kube::Resource<DynamicType = ()> + Clone + 'static {
    /// The API type it stands for.
    type Api;

    /// The value of the label `key` (only the labels some pass reads are kept).
    fn label(&self, key: &str) -> Option<&str> {
        self.slim().labels.get(key)
    }

    /// The object as a store keeps it: a copy without the decoded `ObjectMeta` the watch needs
    /// (set aside while the copy is made, so it is never copied).
    fn kept(&mut self) -> Self {
        let wire = self.slim_mut().wire.take();
        let kept = self.clone();
        self.slim_mut().wire = wire;
        kept
    }

    /// The object as the API type, with the fields the cache keeps.
    fn to_api(&self) -> Self::Api;
}

/// A `DeepInferDeployment` as the controller's cache keeps it: its metadata (without
/// `managedFields` and the last-applied annotation), the ConfigMap its `spec.acceptance.promptsFrom` names and its checkpoint's
/// PersistentVolumeClaim (the ConfigMap and claim watches map events through them), and every other field of the object as JSON text, parsed by the pass
/// that reads it. Any JSON is kept: a resource that does not match the schema is cached too, and
/// its pass reports the field.
#[derive(Clone, Debug, Default)]
pub struct CachedDeployment {
    /// The object's metadata, without `managedFields` and the last-applied annotation.
    pub metadata: ObjectMeta,
    /// `spec.acceptance.promptsFrom.name`, when set.
    pub prompts_from: Option<String>,
    /// The checkpoint's PersistentVolumeClaim (`spec.model.source.hub.claimName`, else
    /// `spec.model.source.volume.claimName`), when set.
    pub checkpoint_claim: Option<String>,
    /// The object's fields but `apiVersion`, `kind` and `metadata`, as one JSON object's text.
    body: Box<str>,
}

impl CachedDeployment {
    /// The cached form of the object `fields` (its `apiVersion`, `kind`, `metadata`, `spec`,
    /// `status`, ...).
    fn from_fields(mut metadata: ObjectMeta, mut fields: Map<String, Value>) -> Self {
        fields.remove("apiVersion");
        fields.remove("kind");
        trim_meta(&mut metadata);
        let spec_str = |pointer: &str| {
            fields
                .get("spec")
                .and_then(|s| s.pointer(pointer))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let prompts_from = spec_str("/acceptance/promptsFrom/name");
        let checkpoint_claim = spec_str("/model/source/hub/claimName")
            .or_else(|| spec_str("/model/source/volume/claimName"));
        Self {
            metadata,
            prompts_from,
            checkpoint_claim,
            body: Value::Object(fields).to_string().into_boxed_str(),
        }
    }

    /// The whole object as JSON, with `apiVersion` and `kind` of `ar`.
    pub fn to_value(&self, ar: &ApiResource) -> Result<Value, serde_json::Error> {
        let mut fields: Map<String, Value> = serde_json::from_str(&self.body)?;
        fields.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
        fields.insert("kind".into(), Value::String(ar.kind.clone()));
        fields.insert("metadata".into(), serde_json::to_value(&self.metadata)?);
        Ok(Value::Object(fields))
    }
}

impl<'de> Deserialize<'de> for CachedDeployment {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(flatten)]
            fields: Map<String, Value>,
        }
        let wire = Wire::deserialize(deserializer)?;
        Ok(Self::from_fields(wire.metadata, wire.fields))
    }
}

impl kube::Resource for CachedDeployment {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.kind)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.group)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.version)
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.api_version)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A pod as the cache keeps it: its metadata (cut down, see [`Marks`]), node and device claims,
/// and of its status the phase, reason, message, addresses, start, the conditions a pass reads
/// and each container's name, readiness, restarts and states. No pass reads the rest of a pod.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedPod {
    #[serde(default)]
    metadata: Slim,
    #[serde(default)]
    spec: Option<Placement>,
    #[serde(default)]
    status: Option<Box<RunState>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Placement {
    node_name: Option<String>,
    resource_claims: Option<Vec<PodResourceClaim>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunState {
    phase: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(rename = "hostIP")]
    host_ip: Option<String>,
    start_time: Option<Time>,
    #[serde(default, deserialize_with = "kept_conditions")]
    conditions: Option<Box<[Condition]>>,
    init_container_statuses: Option<Box<[ContainerRun]>>,
    container_statuses: Option<Box<[ContainerRun]>>,
}

/// A pod condition of [`KEPT_POD_CONDITIONS`] as a cached pod keeps it: its type and a status
/// of the API's three words are shared rather than allocated; what no pass reads of a condition
/// (probe time, observed generation) is dropped.
#[derive(Clone, Debug)]
struct Condition {
    type_: &'static str,
    status: Cow<'static, str>,
    reason: Option<Box<str>>,
    message: Option<Box<str>>,
    last_transition_time: Option<Time>,
}

impl Condition {
    /// `c`, if its type is kept.
    fn kept(c: PodCondition) -> Option<Self> {
        let type_ = *KEPT_POD_CONDITIONS.iter().find(|&&t| t == c.type_)?;
        let status = ["True", "False", "Unknown"]
            .into_iter()
            .find(|&s| s == c.status)
            .map_or(Cow::Owned(c.status), Cow::Borrowed);
        Some(Self {
            type_,
            status,
            reason: c.reason.map(String::into_boxed_str),
            message: c.message.map(String::into_boxed_str),
            last_transition_time: c.last_transition_time,
        })
    }

    fn to_api(&self) -> PodCondition {
        PodCondition {
            type_: self.type_.to_string(),
            status: self.status.to_string(),
            reason: self.reason.as_deref().map(str::to_string),
            message: self.message.as_deref().map(str::to_string),
            last_transition_time: self.last_transition_time.clone(),
            ..PodCondition::default()
        }
    }
}

/// The conditions of [`KEPT_POD_CONDITIONS`].
fn kept_conditions<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Box<[Condition]>>, D::Error> {
    let all: Option<Vec<PodCondition>> = Option::deserialize(deserializer)?;
    Ok(all.map(|all| all.into_iter().filter_map(Condition::kept).collect()))
}

/// A container state as a cached pod keeps it: the one member the API sets, a running one
/// inline (most containers of the pods cached are running), the others boxed.
#[derive(Clone, Debug)]
enum State {
    Running(ContainerStateRunning),
    Terminated(Box<ContainerStateTerminated>),
    Waiting(Box<ContainerStateWaiting>),
}

impl State {
    fn to_api(&self) -> ContainerState {
        match self {
            State::Running(r) => ContainerState {
                running: Some(r.clone()),
                ..ContainerState::default()
            },
            State::Terminated(t) => ContainerState {
                terminated: Some(t.as_ref().clone()),
                ..ContainerState::default()
            },
            State::Waiting(w) => ContainerState {
                waiting: Some(w.as_ref().clone()),
                ..ContainerState::default()
            },
        }
    }
}

/// A container state; `None` where it is empty (`lastState: {}` of a container never
/// restarted). Of a state with more than one member set (the API sets one), the terminated one
/// is kept, else the waiting one.
fn some_state<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<State>, D::Error> {
    let Some(state) = Option::<ContainerState>::deserialize(deserializer)? else {
        return Ok(None);
    };
    Ok(match (state.terminated, state.waiting, state.running) {
        (Some(t), _, _) => Some(State::Terminated(Box::new(t))),
        (None, Some(w), _) => Some(State::Waiting(Box::new(w))),
        (None, None, Some(r)) => Some(State::Running(r)),
        (None, None, None) => None,
    })
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerRun {
    name: String,
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    restart_count: i32,
    started: Option<bool>,
    #[serde(default, deserialize_with = "some_state")]
    state: Option<State>,
    #[serde(default, deserialize_with = "some_state")]
    last_state: Option<State>,
}

impl ContainerRun {
    fn to_status(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            ready: self.ready,
            restart_count: self.restart_count,
            started: self.started,
            state: self.state.as_ref().map(State::to_api),
            last_state: self.last_state.as_ref().map(State::to_api),
            ..ContainerStatus::default()
        }
    }
}

fn statuses(runs: &Option<Box<[ContainerRun]>>) -> Option<Vec<ContainerStatus>> {
    runs.as_ref()
        .map(|runs| runs.iter().map(ContainerRun::to_status).collect())
}

impl Cached for CachedPod {
    type Api = Pod;

    fn to_api(&self) -> Pod {
        Pod {
            metadata: self.metadata.full(),
            spec: self.spec.as_ref().map(|s| PodSpec {
                node_name: s.node_name.clone(),
                resource_claims: s.resource_claims.clone(),
                ..PodSpec::default()
            }),
            status: self.status.as_deref().map(|s| PodStatus {
                phase: s.phase.clone(),
                reason: s.reason.clone(),
                message: s.message.clone(),
                pod_ip: s.pod_ip.clone(),
                host_ip: s.host_ip.clone(),
                start_time: s.start_time.clone(),
                conditions: s
                    .conditions
                    .as_deref()
                    .map(|cs| cs.iter().map(Condition::to_api).collect()),
                init_container_statuses: statuses(&s.init_container_statuses),
                container_statuses: statuses(&s.container_statuses),
                ..PodStatus::default()
            }),
        }
    }
}

/// Makes `$cached` stand for the API kind `$api` in lists and watches (same group, version,
/// kind and path).
macro_rules! stands_for {
    ($cached:ty, $api:ty) => {
        impl k8s_openapi::Resource for $cached {
            const API_VERSION: &'static str = <$api as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$api as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$api as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$api as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$api as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$api as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::Metadata for $cached {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                self.metadata.wire()
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                self.metadata.wire.get_or_insert_with(Box::default)
            }
        }

        impl Slimmed for $cached {
            fn slim(&self) -> &Slim {
                &self.metadata
            }

            fn slim_mut(&mut self) -> &mut Slim {
                &mut self.metadata
            }
        }
    };
}

stands_for!(CachedPod, Pod);
stands_for!(CachedJob, Job);
stands_for!(CachedRevision, ControllerRevision);
stands_for!(CachedPodGroup, PodGroup);
stands_for!(CachedClaim, PersistentVolumeClaim);

/// A Job as the cache keeps it: its metadata, TTL, its pods' device claims and containers'
/// names and arguments (the judge's name its evidence ConfigMap), and its status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedJob {
    #[serde(default)]
    metadata: Slim,
    #[serde(default)]
    spec: Option<JobPlan>,
    #[serde(default)]
    status: Option<JobStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobPlan {
    ttl_seconds_after_finished: Option<i32>,
    #[serde(default)]
    template: JobTemplate,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct JobTemplate {
    spec: Option<JobPods>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobPods {
    #[serde(default)]
    containers: Vec<Invocation>,
    resource_claims: Option<Vec<PodResourceClaim>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Invocation {
    name: String,
    args: Option<Vec<String>>,
}

impl Cached for CachedJob {
    type Api = Job;

    fn to_api(&self) -> Job {
        Job {
            metadata: self.metadata.full(),
            spec: self.spec.as_ref().map(|s| JobSpec {
                ttl_seconds_after_finished: s.ttl_seconds_after_finished,
                template: PodTemplateSpec {
                    metadata: None,
                    spec: s.template.spec.as_ref().map(|p| PodSpec {
                        containers: p
                            .containers
                            .iter()
                            .map(|c| Container {
                                name: c.name.clone(),
                                args: c.args.clone(),
                                ..Container::default()
                            })
                            .collect(),
                        resource_claims: p.resource_claims.clone(),
                        ..PodSpec::default()
                    }),
                },
                ..JobSpec::default()
            }),
            status: self.status.clone(),
        }
    }
}

/// A ControllerRevision as the cache keeps it: its metadata, number and data (the spec of the
/// revision) as JSON text.
#[derive(Clone, Debug, Default)]
pub struct CachedRevision {
    metadata: Slim,
    /// The revision's number.
    pub revision: Option<i64>,
    data: Box<str>,
}

impl<'de> Deserialize<'de> for CachedRevision {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Slim,
            #[serde(default)]
            revision: Option<i64>,
            #[serde(default)]
            data: Value,
        }
        let wire = Wire::deserialize(deserializer)?;
        Ok(Self {
            metadata: wire.metadata,
            revision: wire.revision,
            data: wire.data.to_string().into_boxed_str(),
        })
    }
}

impl Cached for CachedRevision {
    type Api = ControllerRevision;

    /// The revision as the API type (data that no longer parses reads as null).
    fn to_api(&self) -> ControllerRevision {
        ControllerRevision {
            metadata: self.metadata.full(),
            revision: self.revision,
            data: RawExtension(serde_json::from_str(&self.data).unwrap_or(Value::Null)),
        }
    }
}

/// A PodGroup as the cache keeps it: its metadata and the device claims of its spec (templates
/// in use are not deleted).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedPodGroup {
    #[serde(default)]
    metadata: Slim,
    #[serde(default)]
    spec: GroupClaims,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupClaims {
    resource_claims: Option<Vec<PodGroupResourceClaim>>,
}

impl Cached for CachedPodGroup {
    type Api = PodGroup;

    fn to_api(&self) -> PodGroup {
        PodGroup {
            metadata: self.metadata.full(),
            spec: PodGroupSpec {
                resource_claims: self.spec.resource_claims.clone(),
                ..PodGroupSpec::default()
            },
            status: None,
        }
    }
}

/// A PersistentVolumeClaim as the cache keeps it: its metadata (cut down) and `status.phase`; a
/// pass reads whether the claim exists and is bound.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedClaim {
    #[serde(default)]
    metadata: Slim,
    #[serde(default)]
    status: Option<ClaimPhase>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct ClaimPhase {
    phase: Option<String>,
}

impl CachedClaim {
    /// `status.phase` (`Pending`, `Bound`, `Lost`), if set.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }
}

impl Cached for CachedClaim {
    type Api = PersistentVolumeClaim;

    fn to_api(&self) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: self.metadata.full(),
            spec: None,
            status: self.status.as_ref().map(|s| PersistentVolumeClaimStatus {
                phase: s.phase.clone(),
                ..PersistentVolumeClaimStatus::default()
            }),
        }
    }
}

/// An object of kind `K` of which a pass reads the metadata only (Services, budgets, rank-table
/// and peer-endpoints ConfigMaps, ResourceClaimTemplates: existing objects are compared by their
/// applied hash or matched by name). Nothing but the metadata is decoded.
#[derive(Debug, Deserialize)]
pub struct CachedMeta<K> {
    #[serde(default)]
    metadata: Slim,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for CachedMeta<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for CachedMeta<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K> k8s_openapi::Metadata for CachedMeta<K>
where
    K: k8s_openapi::Resource,
{
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        self.metadata.wire()
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        self.metadata.wire.get_or_insert_with(Box::default)
    }
}

impl<K> Slimmed for CachedMeta<K> {
    fn slim(&self) -> &Slim {
        &self.metadata
    }

    fn slim_mut(&mut self) -> &mut Slim {
        &mut self.metadata
    }
}

impl<K> Cached for CachedMeta<K>
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + Default + 'static,
{
    type Api = K;

    /// The object with its metadata and every other field at its default.
    fn to_api(&self) -> K {
        let mut object = K::default();
        *object.metadata_mut() = self.metadata.full();
        object
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(spec: Value) -> Value {
        serde_json::json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferDeployment",
            "metadata": {
                "name": "flash", "namespace": "team", "uid": "u-1", "generation": 3,
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
                    "deepinfer.io/license-accepted": "mit",
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": spec,
            "status": {"phase": "Ready", "observedGeneration": 3},
        })
    }

    #[test]
    fn an_owned_object_keeps_only_the_labels_annotations_and_pod_conditions_a_pass_reads() {
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "flash-accept-0-x", "namespace": "team", "uid": "p-1",
                "generateName": "flash-accept-0-",
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "labels": {
                    labels::DEPLOYMENT: "flash", labels::COMPONENT: "acceptance",
                    JOB_NAME_LABEL: "flash-accept-0",
                    "batch.kubernetes.io/job-name": "flash-accept-0",
                    "controller-uid": "j-1", "team": "inference",
                },
                "annotations": {
                    APPLIED_HASH_ANNOTATION: "h1", ASCEND_910_ANNOTATION: "{}",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                },
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "flash-accept-0", "uid": "j-1"}],
            },
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": ACCEPTED_POD_CONDITION, "status": "True"},
                ],
                "containerStatuses": [{"name": "engine", "ready": true, "restartCount": 0, "image": "i", "imageID": "i",
                    "state": {"running": {}}, "lastState": {}}],
            },
        }))
        .expect("decoded");
        assert_eq!(pod.label(labels::DEPLOYMENT), Some("flash"));
        assert_eq!(pod.label("team"), None);
        let back = pod.to_api();
        let keys = |m: &Option<BTreeMap<String, String>>| {
            m.iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&back.metadata.labels),
            [labels::COMPONENT, labels::DEPLOYMENT, JOB_NAME_LABEL]
        );
        assert_eq!(
            keys(&back.metadata.annotations),
            [ASCEND_910_ANNOTATION, APPLIED_HASH_ANNOTATION]
        );
        assert_eq!(back.metadata.finalizers, None);
        assert_eq!(back.metadata.generate_name, None);
        assert_eq!(back.metadata.uid.as_deref(), Some("p-1"));
        assert_eq!(back.metadata.owner_references.iter().flatten().count(), 1);
        let status = back.status.expect("status");
        let types: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, ["PodScheduled", "Ready", ACCEPTED_POD_CONDITION]);
        let engine = &status.container_statuses.expect("containers")[0];
        assert!(engine.state.as_ref().is_some_and(|s| s.running.is_some()));
        assert_eq!(engine.last_state, None, "an empty state is no state");
    }

    #[test]
    fn a_stored_object_gives_back_the_metadata_it_was_decoded_with() {
        let device = format!(
            "{{\"pod_name\":\"ränk-0\",\"devices\":\"{}\"}}",
            "0,".repeat(200)
        );
        let owners = serde_json::json!([
            {"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment", "name": "flash",
             "uid": "u-1", "controller": true, "blockOwnerDeletion": true},
            {"apiVersion": "example.com/v1", "kind": "Other", "name": "x", "uid": "u-2"},
        ]);
        let mut pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "flash-serve-0-1", "namespace": "team", "uid": "p-1",
                "resourceVersion": "4711", "generation": 2,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-01T00:05:00Z",
                "labels": {labels::DEPLOYMENT: "flash", labels::REVISION: "abc", labels::RANK: "1"},
                "annotations": {ASCEND_910_ANNOTATION: device, APPLIED_HASH_ANNOTATION: "h"},
                "ownerReferences": owners,
            },
            "spec": {"nodeName": "n-1"},
        }))
        .expect("decoded");
        let kept = pod.kept();
        assert_eq!(
            kube::Resource::meta(&kept),
            &ObjectMeta::default(),
            "a stored object holds no decoded copy"
        );
        assert_eq!(
            kube::Resource::meta(&pod).name.as_deref(),
            Some("flash-serve-0-1"),
            "the object on the watch keeps its decoded copy"
        );
        assert_eq!(kept.to_api(), pod.to_api());
        let meta = kept.to_api().metadata;
        assert_eq!(meta.name.as_deref(), Some("flash-serve-0-1"));
        assert_eq!(meta.namespace.as_deref(), Some("team"));
        assert_eq!(meta.uid.as_deref(), Some("p-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("4711"));
        assert_eq!(meta.generation, Some(2));
        assert!(meta.creation_timestamp.is_some() && meta.deletion_timestamp.is_some());
        assert_eq!(
            serde_json::to_value(&meta.owner_references).expect("json"),
            owners
        );
        let annotations = meta.annotations.expect("annotations");
        assert_eq!(annotations.get(ASCEND_910_ANNOTATION), Some(&device));
        assert_eq!(meta.labels.expect("labels").len(), 3);
        let slim = kept.slim();
        assert_eq!(
            (slim.key(), slim.name(), slim.namespace()),
            ("team/flash-serve-0-1", "flash-serve-0-1", Some("team"))
        );
        assert!(slim.owned_by("u-2") && !slim.owned_by("flash"));
        assert_eq!(kept.label(labels::RANK), Some("1"));
        assert_eq!(kept.label(labels::ROLE), None);
    }

    #[test]
    fn a_metadata_only_object_gives_back_its_kind_with_the_metadata_a_pass_reads() {
        let budget: CachedMeta<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "flash-worker", "namespace": "team",
                    "labels": {labels::DEPLOYMENT: "flash", "extra": "x"},
                    "annotations": {APPLIED_HASH_ANNOTATION: "h2", "note": "y"}},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}},
            }))
            .expect("decoded");
        assert_eq!(budget.label(labels::DEPLOYMENT), Some("flash"));
        let back = budget.to_api();
        assert_eq!(back.spec, None);
        assert_eq!(crate::controller::build::applied_hash(&back), Some("h2"));
        assert_eq!(back.metadata.labels.expect("labels").len(), 1);
        assert_eq!(back.metadata.annotations.expect("annotations").len(), 1);
        assert_eq!(
            <CachedMeta<k8s_openapi::api::policy::v1::PodDisruptionBudget> as kube::Resource>::url_path(&(), Some("team")),
            "/apis/policy/v1/namespaces/team/poddisruptionbudgets"
        );
    }

    #[test]
    fn a_cached_claim_keeps_its_name_and_phase_and_none_of_its_annotations() {
        let claim: CachedClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "weights", "namespace": "team",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                "finalizers": ["kubernetes.io/pvc-protection"]},
            "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": "pv-1"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Ti"}},
        }))
        .expect("decoded");
        assert_eq!(claim.phase(), Some("Bound"));
        assert_eq!(kube::ResourceExt::name_any(&claim), "weights");
        assert_eq!(claim.metadata.annotations, Marks::default());
        assert_eq!(kube::Resource::meta(&claim).finalizers, None);
        let pending: CachedClaim =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "w"}}))
                .expect("decoded");
        assert_eq!(pending.phase(), None);
    }

    #[test]
    fn a_cached_deployment_gives_back_the_object_without_managed_fields_or_the_applied_copy() {
        let ar = crate::controller::api_resource();
        let spec = serde_json::json!({"acceptance": {"promptsFrom": {"name": "prompts", "key": "k"}}, "replicas": {"worker": 2}});
        let full = object(spec);
        let cached: CachedDeployment = serde_json::from_value(full.clone()).expect("decoded");
        assert_eq!(cached.prompts_from.as_deref(), Some("prompts"));
        assert_eq!(cached.checkpoint_claim, None);
        let mut expected = full;
        let meta = expected["metadata"].as_object_mut().expect("meta");
        meta.remove("managedFields");
        meta["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove("kubectl.kubernetes.io/last-applied-configuration");
        assert_eq!(cached.to_value(&ar).expect("value"), expected);
        assert!(cached.body.len() < 200, "{}", cached.body);
    }

    #[test]
    fn a_deployment_that_does_not_match_the_schema_is_cached_as_written() {
        let ar = crate::controller::api_resource();
        let full =
            object(serde_json::json!({"replicas": "many", "acceptance": {"promptsFrom": 7}}));
        let cached: CachedDeployment = serde_json::from_value(full.clone()).expect("decoded");
        assert_eq!(cached.prompts_from, None);
        let back = cached.to_value(&ar).expect("value");
        assert_eq!(back["spec"], full["spec"]);
        assert!(serde_json::from_value::<crate::api::DeepInferDeployment>(back).is_err());
    }

    #[test]
    fn a_cached_deployment_names_its_checkpoint_claim_from_either_source() {
        let claim = |source: Value| {
            let cached: CachedDeployment =
                serde_json::from_value(object(serde_json::json!({"model": {"source": source}})))
                    .expect("decoded");
            cached.checkpoint_claim
        };
        assert_eq!(
            claim(serde_json::json!({"hub": {"claimName": "weights", "revision": "r"}})).as_deref(),
            Some("weights")
        );
        assert_eq!(
            claim(serde_json::json!({"volume": {"claimName": "ckpt", "path": "/m"}})).as_deref(),
            Some("ckpt")
        );
        assert_eq!(claim(serde_json::json!({"volume": {"claimName": 3}})), None);
    }
}
