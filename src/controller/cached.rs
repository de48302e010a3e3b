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
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, PersistentVolumeClaim,
    PersistentVolumeClaimStatus, Pod, PodCondition, PodResourceClaim, PodResourceClaimStatus,
    PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, PodGroupResourceClaim, PodGroupSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::api::{
    labels, DeepInferRole, DeepInferRoleSpec, DeepInferRoleStatus, ACCEPTED_POD_CONDITION,
};
use crate::controller::build::{
    APPLIED_HASH_ANNOTATION, ASCEND_910_ANNOTATION, ASCEND_NPU_ANNOTATION, JUDGES_ANNOTATION,
};

/// The label the Job controller sets on its pods, naming their Job.
pub const JOB_NAME_LABEL: &str = "job-name";

/// A label some pass reads on the operator's objects; the caches keep no other label, so a read
/// of any other cannot be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptLabel {
    /// [`labels::MANAGED_BY`].
    ManagedBy,
    /// [`labels::DEPLOYMENT`].
    Deployment,
    /// [`labels::ROLE`].
    Role,
    /// [`labels::GROUP`].
    Group,
    /// [`labels::RANK`].
    Rank,
    /// [`labels::REVISION`].
    Revision,
    /// [`labels::COMPONENT`].
    Component,
    /// [`JOB_NAME_LABEL`].
    JobName,
}

impl KeptLabel {
    /// The label's key.
    pub const fn key(self) -> &'static str {
        match self {
            KeptLabel::ManagedBy => labels::MANAGED_BY,
            KeptLabel::Deployment => labels::DEPLOYMENT,
            KeptLabel::Role => labels::ROLE,
            KeptLabel::Group => labels::GROUP,
            KeptLabel::Rank => labels::RANK,
            KeptLabel::Revision => labels::REVISION,
            KeptLabel::Component => labels::COMPONENT,
            KeptLabel::JobName => JOB_NAME_LABEL,
        }
    }
}

/// The keys of every [`KeptLabel`].
const KEPT_LABELS: &[&str] = &[
    KeptLabel::ManagedBy.key(),
    KeptLabel::Deployment.key(),
    KeptLabel::Role.key(),
    KeptLabel::Group.key(),
    KeptLabel::Rank.key(),
    KeptLabel::Revision.key(),
    KeptLabel::Component.key(),
    KeptLabel::JobName.key(),
];

/// The annotations some pass reads on the operator's objects (the applied hash; the device
/// configuration the Ascend device plugin writes on pods; what a Job judges); the caches keep no
/// other annotation.
const KEPT_ANNOTATIONS: &[&str] = &[
    APPLIED_HASH_ANNOTATION,
    ASCEND_910_ANNOTATION,
    ASCEND_NPU_ANNOTATION,
    JUDGES_ANNOTATION,
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
/// entry is the key's index in [`kept_keys`] and the value as [`push_text`] writes it. A map
/// would take a 640-byte node and two strings per entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks(Box<[u8]>);

/// Every key a [`Marks`] may hold: the kept labels, then the kept annotations.
fn kept_keys() -> impl Iterator<Item = &'static str> {
    KEPT_LABELS.iter().chain(KEPT_ANNOTATIONS).copied()
}

impl Marks {
    /// The kept labels of `labels` and the kept annotations of `annotations`.
    fn kept(
        labels: Option<BTreeMap<String, String>>,
        annotations: Option<BTreeMap<String, String>>,
    ) -> Self {
        let mut packed = Vec::new();
        for (index, key) in kept_keys().enumerate() {
            let map = if index < KEPT_LABELS.len() {
                &labels
            } else {
                &annotations
            };
            let (Some(value), Ok(index)) =
                (map.as_ref().and_then(|m| m.get(key)), u8::try_from(index))
            else {
                continue;
            };
            if packed_len(value).is_some() {
                packed.push(index);
                push_text(&mut packed, Some(value));
            }
        }
        Self(packed.into_boxed_slice())
    }

    /// The entries, in the order of the kept keys, with the key's index in [`kept_keys`].
    fn entries(&self) -> impl Iterator<Item = (usize, &'static str, &str)> {
        let mut rest: &[u8] = &self.0;
        std::iter::from_fn(move || {
            let (&index, after) = rest.split_first()?;
            let (value, after) = next_text(after)?;
            rest = after;
            let index = usize::from(index);
            let key = kept_keys().nth(index)?;
            Some((index, key, value?))
        })
    }

    /// The value of `key`, if kept.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries()
            .find(|(_, k, _)| *k == key)
            .map(|(_, _, v)| v)
    }

    /// The labels, or (`annotations`) the annotations, as the API types hold them (`None` when
    /// there are none).
    fn to_map(&self, annotations: bool) -> Option<BTreeMap<String, String>> {
        let map: BTreeMap<String, String> = self
            .entries()
            .filter(|(index, _, _)| (*index >= KEPT_LABELS.len()) == annotations)
            .map(|(_, k, v)| (k.to_string(), v.to_string()))
            .collect();
        (!map.is_empty()).then_some(map)
    }
}

/// The first byte of a packed text that is absent.
const ABSENT: u8 = u8::MAX;

/// The first byte of a packed text of [`LONG`] bytes or more: its length follows in 4 bytes.
const LONG: u8 = u8::MAX - 1;

/// The length [`push_text`] writes for `text`; `None` for a text too long to pack (no text the
/// API serves is).
fn packed_len(text: &str) -> Option<u32> {
    u32::try_from(text.len()).ok()
}

/// Appends `text` to `packed`: its length and its bytes, or [`ABSENT`] for `None` (or for a text
/// too long to pack). A length below [`LONG`] (every name, label, address and reason a pod has)
/// takes one byte; a longer one [`LONG`] and 4 bytes, little-endian.
fn push_text(packed: &mut Vec<u8>, text: Option<&str>) {
    match text.and_then(|t| Some((t, packed_len(t)?))) {
        Some((text, len)) => {
            match u8::try_from(len).ok().filter(|&len| len < LONG) {
                Some(short) => packed.push(short),
                None => {
                    packed.push(LONG);
                    packed.extend_from_slice(&len.to_le_bytes());
                }
            }
            packed.extend_from_slice(text.as_bytes());
        }
        None => packed.push(ABSENT),
    }
}

/// The first text [`push_text`] wrote at the start of `packed`, and what follows it; `None` at
/// the end.
fn next_text(packed: &[u8]) -> Option<(Option<&str>, &[u8])> {
    let (&first, rest) = packed.split_first()?;
    let (len, rest) = match first {
        ABSENT => return Some((None, rest)),
        LONG => {
            let (len, rest) = rest.split_first_chunk::<4>()?;
            (usize::try_from(u32::from_le_bytes(*len)).ok()?, rest)
        }
        short => (usize::from(short), rest),
    };
    let (text, rest) = (rest.get(..len)?, rest.get(len..)?);
    Some((std::str::from_utf8(text).ok(), rest))
}

/// Optional texts of a cached object packed into one allocation (none when every one is absent),
/// each as [`push_text`] writes it, read back by position. Each `Option<String>` would take 24
/// bytes and an allocation of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Texts(Box<[u8]>);

impl Texts {
    fn of<'a>(texts: impl IntoIterator<Item = Option<&'a str>>) -> Self {
        let mut packed = Vec::new();
        let mut any = false;
        for text in texts {
            any |= text.is_some();
            push_text(&mut packed, text);
        }
        if !any {
            return Self::default();
        }
        Self(packed.into_boxed_slice())
    }

    /// The text at `position`.
    fn get(&self, position: usize) -> Option<&str> {
        let mut rest: &[u8] = &self.0;
        for _ in 0..position {
            rest = next_text(rest)?.1;
        }
        next_text(rest)?.0
    }

    /// The text at `position`, owned.
    fn owned(&self, position: usize) -> Option<String> {
        self.get(position).map(str::to_string)
    }
}

/// A time as a cache keeps it: whole seconds since the epoch (the API's `Time` has no finer
/// precision), or none. 8 bytes against 24 for an `Option<Time>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp(i64);

impl Default for Stamp {
    fn default() -> Self {
        Self(i64::MIN)
    }
}

impl Stamp {
    fn of(time: Option<&Time>) -> Self {
        time.map_or_else(Self::default, |t| Self(t.0.as_second()))
    }

    fn time(self) -> Option<Time> {
        if self == Self::default() {
            return None;
        }
        k8s_openapi::jiff::Timestamp::from_second(self.0)
            .ok()
            .map(Time)
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

/// The API versions and kinds of the owners of cached objects, kept as an index rather than as
/// text per owner reference.
const OWNER_TYPES: &[(&str, &str)] = &[
    ("deepinfer.io/v1alpha1", "DeepInferDeployment"),
    ("batch/v1", "Job"),
];

/// [`Owner::type_`] of an owner whose type is not one of [`OWNER_TYPES`].
const OTHER_OWNER: u8 = u8::MAX;

/// An owner reference as a cache keeps it: its type as an index into [`OWNER_TYPES`], its name
/// and uid packed into one allocation (with the `apiVersion` and `kind` of another type).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    type_: u8,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
    /// The name and uid, then, for [`OTHER_OWNER`], the `apiVersion` and `kind`.
    texts: Texts,
}

impl Owner {
    fn uid(&self) -> &str {
        self.texts.get(1).unwrap_or_default()
    }

    fn to_api(&self) -> OwnerReference {
        let (api_version, kind) = match OWNER_TYPES.get(usize::from(self.type_)) {
            Some((api_version, kind)) => (api_version.to_string(), kind.to_string()),
            None => (
                self.texts.owned(2).unwrap_or_default(),
                self.texts.owned(3).unwrap_or_default(),
            ),
        };
        OwnerReference {
            api_version,
            kind,
            name: self.texts.owned(0).unwrap_or_default(),
            uid: self.uid().to_string(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

impl From<&OwnerReference> for Owner {
    fn from(o: &OwnerReference) -> Self {
        let known = OWNER_TYPES
            .iter()
            .position(|&(api_version, kind)| api_version == o.api_version && kind == o.kind)
            .and_then(|i| u8::try_from(i).ok());
        let (name, uid) = (Some(o.name.as_str()), Some(o.uid.as_str()));
        let texts = match known {
            Some(_) => Texts::of([name, uid]),
            None => Texts::of([name, uid, Some(&o.api_version), Some(&o.kind)]),
        };
        Self {
            type_: known.unwrap_or(OTHER_OWNER),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
            texts,
        }
    }
}

/// The metadata of a cached object of an owned kind (or a checkpoint claim), cut down as it is
/// decoded to what the passes read: name and namespace (one string, `namespace/name`, also the
/// store's key), uid, resourceVersion, generation, creation and deletion times, owner
/// references, and the kept labels and annotations ([`Marks`]). `managedFields`, finalizers,
/// `generateName` and every other label and annotation are dropped.
///
/// Decoding also yields the object's `ObjectMeta` (without labels and annotations), which
/// [`Incoming`] takes out at once for the watcher and the trigger mappings; a stored object is read
/// through this type only.
#[derive(Clone, Debug)]
pub struct Slim {
    /// The decoded `ObjectMeta`, from decoding until [`Incoming`] takes it; `None` after.
    wire: Option<Box<ObjectMeta>>,
    /// `namespace/name` (the store's key), the uid and the resourceVersion, in one allocation.
    ids: Texts,
    /// [`NO_GENERATION`] for none.
    generation: i64,
    created: Stamp,
    deleted: Stamp,
    /// Shared by the objects of one cache with the same owners (see [`Slim::share_owners`]).
    owners: std::sync::Arc<[Owner]>,
    /// The kept labels and annotations.
    marks: Marks,
}

/// [`Slim::generation`] of an object without one (the API's are positive).
const NO_GENERATION: i64 = i64::MIN;

impl Default for Slim {
    fn default() -> Self {
        Self {
            wire: None,
            ids: Texts::default(),
            generation: NO_GENERATION,
            created: Stamp::default(),
            deleted: Stamp::default(),
            owners: std::sync::Arc::default(),
            marks: Marks::default(),
        }
    }
}

fn some_text(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl Slim {
    /// `namespace/name`: the store's key.
    pub fn key(&self) -> &str {
        self.ids.get(0).unwrap_or_default()
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        let key = self.key();
        key.split_once('/').map_or(key, |(_, name)| name)
    }

    /// The object's namespace (`None` for a cluster-scoped object).
    pub fn namespace(&self) -> Option<&str> {
        self.key()
            .split_once('/')
            .map(|(ns, _)| ns)
            .filter(|ns| !ns.is_empty())
    }

    /// The object's uid.
    pub fn uid(&self) -> &str {
        self.ids.get(1).unwrap_or_default()
    }

    /// The uids of the object's owners.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.owners.iter().map(Owner::uid)
    }

    /// Takes `other`'s owner references in place of an equal list of this object's own: the
    /// objects a resource owns (its pods, Services, Jobs) name the same owners, kept once.
    pub fn share_owners(&mut self, other: &Slim) {
        if self.owners == other.owners {
            self.owners = other.owners.clone();
        }
    }

    /// Whether this object and `other` keep their owner references in one allocation.
    pub fn shares_owners(&self, other: &Slim) -> bool {
        std::sync::Arc::ptr_eq(&self.owners, &other.owners)
    }

    /// Whether the object names `uid` among its owners.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.owner_uids().any(|o| o == uid)
    }

    /// The metadata with the kept labels and annotations back in.
    fn full(&self) -> ObjectMeta {
        let (namespace, name) = match self.key().split_once('/') {
            Some((ns, name)) => (some_text(ns), some_text(name)),
            None => (None, some_text(self.key())),
        };
        ObjectMeta {
            name,
            namespace,
            uid: some_text(self.uid()),
            resource_version: self.ids.owned(2).filter(|v| !v.is_empty()),
            generation: (self.generation != NO_GENERATION).then_some(self.generation),
            creation_timestamp: self.created.time(),
            deletion_timestamp: self.deleted.time(),
            owner_references: (!self.owners.is_empty())
                .then(|| self.owners.iter().map(Owner::to_api).collect()),
            labels: self.marks.to_map(false),
            annotations: self.marks.to_map(true),
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
        let marks = Marks::kept(meta.labels.take(), meta.annotations.take());
        let key = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        );
        Ok(Self {
            ids: Texts::of([
                Some(key.as_str()),
                meta.uid.as_deref(),
                meta.resource_version.as_deref(),
            ]),
            generation: meta.generation.unwrap_or(NO_GENERATION),
            created: Stamp::of(meta.creation_timestamp.as_ref()),
            deleted: Stamp::of(meta.deletion_timestamp.as_ref()),
            owners: meta
                .owner_references
                .iter()
                .flatten()
                .map(Owner::from)
                .collect(),
            marks,
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

/// An object as a cache of the owned kinds keeps it, and how a pass reads it. It is not a
/// `kube::Resource`: what a watch delivers is an [`Incoming`] of it.
pub trait Cached: Slimmed + Clone + 'static {
    /// The API type it stands for.
    type Api: k8s_openapi::Resource;

    /// The value of a kept label.
    fn label(&self, key: KeptLabel) -> Option<&str> {
        self.slim().marks.get(key.key())
    }

    /// The object as the API type, with the fields the cache keeps.
    fn to_api(&self) -> Self::Api;
}

/// An object of a cached kind on its way through a watch: the shape a store keeps, and its
/// decoded `ObjectMeta` (without labels and annotations), which the watcher and the trigger
/// mappings read through `kube::Resource`. A store keeps the shape only.
#[derive(Clone, Debug)]
pub struct Incoming<K> {
    meta: ObjectMeta,
    shape: K,
}

impl<K> Incoming<K> {
    /// The object as a store keeps it.
    pub fn shape(&self) -> &K {
        &self.shape
    }

    /// The same, taken.
    pub fn into_shape(self) -> K {
        self.shape
    }
}

impl<'de, K: Slimmed + Deserialize<'de>> Deserialize<'de> for Incoming<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut shape = K::deserialize(deserializer)?;
        let meta = shape.slim_mut().wire.take().map(|m| *m).unwrap_or_default();
        Ok(Self { meta, shape })
    }
}

impl<K: Cached> k8s_openapi::Resource for Incoming<K> {
    const API_VERSION: &'static str = <K::Api as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <K::Api as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <K::Api as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <K::Api as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <K::Api as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <K::Api as k8s_openapi::Resource>::Scope;
}

impl<K: Cached> k8s_openapi::Metadata for Incoming<K> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.meta
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// JSON text as a cache keeps it, compressed with DEFLATE: the spec and status of a resource
/// (and the spec a revision keeps) are read once per pass, and take a third of their text so.
#[derive(Clone, Debug, Default)]
struct Deflated(Box<[u8]>);

impl Deflated {
    fn of(text: &str) -> Self {
        Self(miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 6).into_boxed_slice())
    }

    /// The text back.
    fn text(&self) -> Result<Vec<u8>, serde_json::Error> {
        miniz_oxide::inflate::decompress_to_vec(&self.0).map_err(|e| {
            <serde_json::Error as serde::de::Error>::custom(format!("a cached text: {e}"))
        })
    }
}

/// The names under `configMapKeyRef` and `configMap` keys anywhere in `spec` (engine variables,
/// volumes, projected sources), each once.
fn config_maps_named(spec: &Value) -> Box<[Box<str>]> {
    fn walk(v: &Value, out: &mut Vec<Box<str>>) {
        match v {
            Value::Object(map) => {
                for (key, value) in map {
                    if key == "configMapKeyRef" || key == "configMap" {
                        if let Some(name) = value.get("name").and_then(Value::as_str) {
                            if !out.iter().any(|n| &**n == name) {
                                out.push(name.into());
                            }
                        }
                    }
                    walk(value, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(spec, &mut out);
    out.into_boxed_slice()
}

/// A `DeepInferDeployment` as the controller's cache keeps it: its metadata (without
/// `managedFields` and the last-applied annotation; its labels and annotations are kept with the
/// rest, below), the ConfigMap its `spec.acceptance.promptsFrom` names and its checkpoint's
/// PersistentVolumeClaim (the ConfigMap and claim watches map events through them), and every
/// other field of the object as JSON text, parsed by the pass that reads it. Any JSON is kept: a
/// resource that does not match the schema is cached too, and its pass reports the field.
#[derive(Clone, Debug, Default)]
pub struct CachedDeployment {
    /// The object's metadata without `managedFields`, labels and annotations: what the
    /// controller's queue and store read.
    pub metadata: ObjectMeta,
    /// `spec.acceptance.promptsFrom.name`, when set.
    pub prompts_from: Option<String>,
    /// The ConfigMaps engine containers read (`configMapKeyRef` of an engine variable,
    /// `configMap` volumes and projected sources): their content is part of the revision, so a
    /// change to one starts a pass.
    pub engine_config_maps: Box<[Box<str>]>,
    /// The checkpoint's PersistentVolumeClaim (`spec.model.source.hub.claimName`, else
    /// `spec.model.source.volume.claimName`), when set.
    pub checkpoint_claim: Option<String>,
    /// The object's fields but `apiVersion`, `kind` and `metadata`, and the labels and
    /// annotations (but the last-applied one) as `metadata`, as one JSON object's text: a
    /// label or annotation map takes a 640-byte node however few its entries.
    body: Deflated,
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
        let engine_config_maps = fields
            .get("spec")
            .map(config_maps_named)
            .unwrap_or_default();
        let checkpoint_claim = spec_str("/model/source/hub/claimName")
            .or_else(|| spec_str("/model/source/volume/claimName"));
        let mut marks = Map::new();
        for (key, map) in [
            ("labels", metadata.labels.take()),
            ("annotations", metadata.annotations.take()),
        ] {
            if let Some(map) = map {
                marks.insert(
                    key.into(),
                    Value::Object(
                        map.into_iter()
                            .map(|(k, v)| (k, Value::String(v)))
                            .collect(),
                    ),
                );
            }
        }
        if !marks.is_empty() {
            fields.insert("metadata".into(), Value::Object(marks));
        }
        Self {
            metadata,
            prompts_from,
            engine_config_maps,
            checkpoint_claim,
            body: Deflated::of(&Value::Object(fields).to_string()),
        }
    }

    /// Whether the resource refers to the ConfigMap `name` (its prompts, or one its engines read).
    pub fn refers_to_config_map(&self, name: &str) -> bool {
        self.prompts_from.as_deref() == Some(name)
            || self.engine_config_maps.iter().any(|n| &**n == name)
    }

    /// The whole object as JSON, with `apiVersion` and `kind` of `ar`.
    pub fn to_value(&self, ar: &ApiResource) -> Result<Value, serde_json::Error> {
        let mut fields: Map<String, Value> = serde_json::from_slice(&self.body.text()?)?;
        let marks = fields.remove("metadata");
        let mut metadata = serde_json::to_value(&self.metadata)?;
        if let (Some(Value::Object(marks)), Value::Object(metadata)) = (marks, &mut metadata) {
            metadata.extend(marks);
        }
        fields.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
        fields.insert("kind".into(), Value::String(ar.kind.clone()));
        fields.insert("metadata".into(), metadata);
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

/// A pod as the cache keeps it: its metadata (cut down, see [`Marks`]) and, in one allocation
/// ([`PodRun`]), its node and device claims and of its status the phase, reason, message,
/// addresses, start, the conditions a pass reads and each container's name, readiness, restarts
/// and states. No pass reads the rest of a pod.
#[derive(Clone, Debug, Default)]
pub struct CachedPod {
    metadata: Slim,
    run: PodRun,
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Slim,
            #[serde(default)]
            spec: Option<PlacementWire>,
            #[serde(default)]
            status: Option<RunWire>,
        }
        let wire = Wire::deserialize(deserializer)?;
        Ok(Self {
            metadata: wire.metadata,
            run: PodRun::pack(wire.spec.as_ref(), wire.status.as_ref()),
        })
    }
}

/// What a cached pod keeps of a pod's spec, as decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlacementWire {
    node_name: Option<String>,
    resource_claims: Option<Vec<PodResourceClaim>>,
}

/// What a cached pod keeps of a pod's status, as decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunWire {
    phase: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(rename = "hostIP")]
    host_ip: Option<String>,
    start_time: Option<Time>,
    conditions: Option<Vec<PodCondition>>,
    init_container_statuses: Option<Vec<ContainerWire>>,
    container_statuses: Option<Vec<ContainerWire>>,
    resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
}

/// What a cached pod keeps of a container's status, as decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerWire {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    restart_count: i32,
    started: Option<bool>,
    state: Option<ContainerState>,
    last_state: Option<ContainerState>,
}

/// The statuses a condition has in the API, kept as an index rather than as text.
const CONDITION_STATUSES: &[&str] = &["True", "False", "Unknown"];

/// Writes the fields of a packed record one after the other; [`Fields`] reads them back in the
/// same order.
#[derive(Default)]
struct Packer(Vec<u8>);

impl Packer {
    fn text(&mut self, text: Option<&str>) {
        push_text(&mut self.0, text);
    }

    fn byte(&mut self, byte: u8) {
        self.0.push(byte);
    }

    fn stamp(&mut self, time: Option<&Time>) {
        self.0.extend_from_slice(&Stamp::of(time).0.to_le_bytes());
    }

    fn int(&mut self, value: i32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    /// `Some(true)`, `Some(false)` or `None` in one byte.
    fn flag(&mut self, value: Option<bool>) {
        self.byte(value.map_or(ABSENT, u8::from));
    }

    /// A value of a type rare where it is kept, as JSON text.
    fn json<T: serde::Serialize>(&mut self, value: Option<&T>) {
        let text = value.and_then(|v| serde_json::to_string(v).ok());
        self.text(text.as_deref());
    }

    /// How many of `items` follow ([`ABSENT`]: none at all, `None`; at most 253 are kept), and
    /// those items.
    fn items<T>(
        &mut self,
        items: Option<impl ExactSizeIterator<Item = T>>,
        mut each: impl FnMut(&mut Self, T),
    ) {
        let Some(items) = items else {
            self.byte(ABSENT);
            return;
        };
        let count = u8::try_from(items.len()).map_or(LONG - 1, |n| n.min(LONG - 1));
        self.byte(count);
        for item in items.take(usize::from(count)) {
            each(self, item);
        }
    }
}

/// Reads what a [`Packer`] wrote, field by field; past the end every field reads as absent.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn text(&mut self) -> Option<&'a str> {
        let (text, rest) = next_text(self.0)?;
        self.0 = rest;
        text
    }

    fn owned(&mut self) -> Option<String> {
        self.text().map(str::to_string)
    }

    fn byte(&mut self) -> Option<u8> {
        let (&byte, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(byte)
    }

    fn time(&mut self) -> Option<Time> {
        let (bytes, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Stamp(i64::from_le_bytes(*bytes)).time()
    }

    fn int(&mut self) -> i32 {
        let Some((bytes, rest)) = self.0.split_first_chunk::<4>() else {
            return 0;
        };
        self.0 = rest;
        i32::from_le_bytes(*bytes)
    }

    fn flag(&mut self) -> Option<bool> {
        self.byte().filter(|&b| b != ABSENT).map(|b| b != 0)
    }

    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Option<T> {
        serde_json::from_str(self.text()?).ok()
    }

    /// The items [`Packer::items`] wrote, each read by `each`.
    fn items<T>(&mut self, mut each: impl FnMut(&mut Self) -> T) -> Option<Vec<T>> {
        let count = self.byte().filter(|&n| n != ABSENT)?;
        Some((0..count).map(|_| each(self)).collect())
    }
}

/// A cached pod's node, device claims and status in one allocation, as [`PodRun::pack`] writes
/// them and [`PodRun::unpack`] reads them: texts with a byte of length, times in 8 bytes, a
/// condition's type and status as indexes (only the conditions of [`KEPT_POD_CONDITIONS`]), a
/// container's state as the one member the API sets (a running one as its start). What is rare on
/// the pods a cache holds (device claims, a waiting or terminated container) is kept as JSON
/// text. Separate fields would take a dozen allocations a pod.
#[derive(Clone, Debug, Default)]
struct PodRun(Box<[u8]>);

/// The first byte of a [`PodRun`]: which of the spec and status follow.
const HAS_SPEC: u8 = 1;
const HAS_STATUS: u8 = 2;

/// A container state in a [`PodRun`]: the member that follows.
const RUNNING: u8 = 1;
const TERMINATED: u8 = 2;
const WAITING: u8 = 3;

impl PodRun {
    fn pack(spec: Option<&PlacementWire>, status: Option<&RunWire>) -> Self {
        let mut p = Packer::default();
        let has = u8::from(spec.is_some()) * HAS_SPEC + u8::from(status.is_some()) * HAS_STATUS;
        if has == 0 {
            return Self::default();
        }
        p.byte(has);
        if let Some(spec) = spec {
            p.text(spec.node_name.as_deref());
            p.json(spec.resource_claims.as_ref());
        }
        if let Some(s) = status {
            for text in [&s.phase, &s.reason, &s.message, &s.pod_ip, &s.host_ip] {
                p.text(text.as_deref());
            }
            p.stamp(s.start_time.as_ref());
            let kept: Option<Vec<(u8, &PodCondition)>> = s.conditions.as_ref().map(|all| {
                all.iter()
                    .filter_map(|c| {
                        let type_ = KEPT_POD_CONDITIONS.iter().position(|&t| t == c.type_)?;
                        Some((u8::try_from(type_).ok()?, c))
                    })
                    .collect()
            });
            p.items(kept.map(Vec::into_iter), |p, (type_, c)| {
                p.byte(type_);
                let status = CONDITION_STATUSES.iter().position(|&s| s == c.status);
                p.byte(status.and_then(|s| u8::try_from(s).ok()).unwrap_or(ABSENT));
                p.stamp(c.last_transition_time.as_ref());
                p.text(c.reason.as_deref());
                p.text(c.message.as_deref());
                if status.is_none() {
                    p.text(Some(&c.status));
                }
            });
            for containers in [&s.init_container_statuses, &s.container_statuses] {
                p.items(containers.as_ref().map(|c| c.iter()), |p, c| {
                    p.text(Some(&c.name));
                    p.byte(u8::from(c.ready));
                    p.int(c.restart_count);
                    p.flag(c.started);
                    for state in [&c.state, &c.last_state] {
                        match state {
                            // Of a state with more than one member set (the API sets one), the
                            // terminated one is kept, else the waiting one.
                            Some(ContainerState {
                                terminated: Some(t),
                                ..
                            }) => {
                                p.byte(TERMINATED);
                                p.json(Some(t));
                            }
                            Some(ContainerState {
                                waiting: Some(w), ..
                            }) => {
                                p.byte(WAITING);
                                p.json(Some(w));
                            }
                            Some(ContainerState {
                                running: Some(r), ..
                            }) => {
                                p.byte(RUNNING);
                                p.stamp(r.started_at.as_ref());
                            }
                            // `lastState: {}` of a container never restarted: no state.
                            _ => p.byte(ABSENT),
                        }
                    }
                });
            }
            p.json(s.resource_claim_statuses.as_ref());
        }
        Self(p.0.into_boxed_slice())
    }

    fn unpack(&self) -> (Option<PodSpec>, Option<PodStatus>) {
        let mut f = Fields(&self.0);
        let has = f.byte().unwrap_or(0);
        let spec = (has & HAS_SPEC != 0).then(|| PodSpec {
            node_name: f.owned(),
            resource_claims: f.json(),
            ..PodSpec::default()
        });
        let status = (has & HAS_STATUS != 0).then(|| {
            let [phase, reason, message, pod_ip, host_ip] = [(); 5].map(|()| f.owned());
            let start_time = f.time();
            let conditions = f.items(|f| {
                let type_ = f
                    .byte()
                    .and_then(|t| KEPT_POD_CONDITIONS.get(usize::from(t)));
                let status = f
                    .byte()
                    .and_then(|s| CONDITION_STATUSES.get(usize::from(s)));
                let last_transition_time = f.time();
                let (reason, message) = (f.owned(), f.owned());
                PodCondition {
                    type_: type_.map(|t| t.to_string()).unwrap_or_default(),
                    status: match status {
                        Some(s) => s.to_string(),
                        None => f.owned().unwrap_or_default(),
                    },
                    reason,
                    message,
                    last_transition_time,
                    ..PodCondition::default()
                }
            });
            let mut containers = || {
                f.items(|f| {
                    let (name, ready, restart_count, started) =
                        (f.owned(), f.byte(), f.int(), f.flag());
                    let [state, last_state] = [(); 2].map(|()| match f.byte() {
                        Some(RUNNING) => Some(ContainerState {
                            running: Some(ContainerStateRunning {
                                started_at: f.time(),
                            }),
                            ..ContainerState::default()
                        }),
                        Some(TERMINATED) => Some(ContainerState {
                            terminated: f.json(),
                            ..ContainerState::default()
                        }),
                        Some(WAITING) => Some(ContainerState {
                            waiting: f.json(),
                            ..ContainerState::default()
                        }),
                        _ => None,
                    });
                    ContainerStatus {
                        name: name.unwrap_or_default(),
                        ready: ready == Some(1),
                        restart_count,
                        started,
                        state,
                        last_state,
                        ..ContainerStatus::default()
                    }
                })
            };
            let init_container_statuses = containers();
            let container_statuses = containers();
            PodStatus {
                phase,
                reason,
                message,
                pod_ip,
                host_ip,
                start_time,
                conditions,
                init_container_statuses,
                container_statuses,
                resource_claim_statuses: f.json(),
                ..PodStatus::default()
            }
        });
        (spec, status)
    }
}

impl Cached for CachedPod {
    type Api = Pod;

    fn to_api(&self) -> Pod {
        let (spec, status) = self.run.unpack();
        Pod {
            metadata: self.metadata.full(),
            spec,
            status,
        }
    }
}

/// The cut-down metadata of each cached shape is its `metadata` field.
macro_rules! slimmed {
    ($($cached:ty),*) => {$(
        impl Slimmed for $cached {
            fn slim(&self) -> &Slim {
                &self.metadata
            }

            fn slim_mut(&mut self) -> &mut Slim {
                &mut self.metadata
            }
        }
    )*};
}

slimmed!(
    CachedPod,
    CachedJob,
    CachedRevision,
    CachedPodGroup,
    CachedClaim,
    CachedRole
);

/// A Job as the cache keeps it: its metadata, TTL, its pods' device claims and containers'
/// names (none of their arguments: a judge has two dozen that no pass reads), and of its status
/// what a pass reads ([`JobRun`]).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedJob {
    #[serde(default)]
    metadata: Slim,
    #[serde(default)]
    spec: Option<JobPlan>,
    #[serde(default)]
    status: Option<JobRun>,
}

/// A Job's status as a cached Job keeps it: how many pods succeeded, its start and completion,
/// and each condition's type, status, reason and message (packed into one allocation each).
/// The counts of active, ready, failed and terminating pods, the conditions' times and the
/// indexes are dropped: no pass reads them.
#[derive(Clone, Debug, Default)]
struct JobRun {
    succeeded: Option<i32>,
    start_time: Stamp,
    completion_time: Stamp,
    conditions: Box<[Texts]>,
}

impl<'de> Deserialize<'de> for JobRun {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let status = JobStatus::deserialize(deserializer)?;
        Ok(Self {
            succeeded: status.succeeded,
            start_time: Stamp::of(status.start_time.as_ref()),
            completion_time: Stamp::of(status.completion_time.as_ref()),
            conditions: status
                .conditions
                .iter()
                .flatten()
                .map(|c| {
                    Texts::of([
                        Some(c.type_.as_str()),
                        Some(c.status.as_str()),
                        c.reason.as_deref(),
                        c.message.as_deref(),
                    ])
                })
                .collect(),
        })
    }
}

impl JobRun {
    fn to_api(&self) -> JobStatus {
        JobStatus {
            succeeded: self.succeeded,
            start_time: self.start_time.time(),
            completion_time: self.completion_time.time(),
            conditions: (!self.conditions.is_empty()).then(|| {
                self.conditions
                    .iter()
                    .map(|c| JobCondition {
                        type_: c.owned(0).unwrap_or_default(),
                        status: c.owned(1).unwrap_or_default(),
                        reason: c.owned(2),
                        message: c.owned(3),
                        ..JobCondition::default()
                    })
                    .collect()
            }),
            ..JobStatus::default()
        }
    }
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
    #[serde(default)]
    name: Box<str>,
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
                                name: c.name.to_string(),
                                ..Container::default()
                            })
                            .collect(),
                        resource_claims: p.resource_claims.clone(),
                        ..PodSpec::default()
                    }),
                },
                ..JobSpec::default()
            }),
            status: self.status.as_ref().map(JobRun::to_api),
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
    data: Deflated,
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
            data: Deflated::of(&wire.data.to_string()),
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
            data: RawExtension(
                self.data
                    .text()
                    .and_then(|text| serde_json::from_slice(&text))
                    .unwrap_or(Value::Null),
            ),
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

/// A `DeepInferRole` as the cache keeps it: its metadata (cut down), `spec.replicas` and its
/// status (both small).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedRole {
    #[serde(default)]
    metadata: Slim,
    #[serde(default)]
    spec: DeepInferRoleSpec,
    #[serde(default)]
    status: Option<DeepInferRoleStatus>,
}

impl Cached for CachedRole {
    type Api = DeepInferRole;

    fn to_api(&self) -> DeepInferRole {
        let mut role = DeepInferRole::new(self.metadata.full(), self.spec.clone());
        role.status = self.status.clone();
        role
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
/// applied hash or matched by name). Nothing but the metadata is decoded, and of a ConfigMap's
/// `data` a hash of it ([`content_hash`]): an edit that kept the applied hash is still seen.
#[derive(Debug, Deserialize)]
pub struct CachedMeta<K> {
    #[serde(default)]
    metadata: Slim,
    #[serde(default, rename = "data", deserialize_with = "hash_of_data")]
    content: Option<u64>,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for CachedMeta<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            content: self.content,
            kind: PhantomData,
        }
    }
}

/// Annotation the cached copy of a ConfigMap carries (never written to the API server): the
/// [`content_hash`] of its `data` as the watch delivered it, in hex.
pub const OBSERVED_CONTENT_ANNOTATION: &str = "deepinfer.io/observed-content";

/// A hash of a ConfigMap's `data`, the same for the cached copy and for the object the operator
/// builds.
pub fn content_hash(data: &std::collections::BTreeMap<String, String>) -> u64 {
    let bytes = serde_json::to_vec(data).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_ref()[..8]);
    u64::from_be_bytes(first)
}

fn hash_of_data<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let data: Option<std::collections::BTreeMap<String, String>> = Deserialize::deserialize(d)?;
    Ok(data.as_ref().map(content_hash))
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

    /// The object with its metadata and every other field at its default (a ConfigMap's
    /// content hash as [`OBSERVED_CONTENT_ANNOTATION`]).
    fn to_api(&self) -> K {
        let mut object = K::default();
        *object.metadata_mut() = self.metadata.full();
        if let Some(hash) = self.content {
            object
                .metadata_mut()
                .annotations
                .get_or_insert_with(Default::default)
                .insert(OBSERVED_CONTENT_ANNOTATION.into(), format!("{hash:016x}"));
        }
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
                "labels": {"team": "inference"},
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
        assert_eq!(pod.label(KeptLabel::Deployment), Some("flash"));
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
        let pod: Incoming<CachedPod> = serde_json::from_value(serde_json::json!({
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
        let kept = pod.shape().clone();
        assert!(
            kept.slim().wire.is_none(),
            "a stored object holds no decoded copy"
        );
        assert_eq!(
            kube::Resource::meta(&pod).name.as_deref(),
            Some("flash-serve-0-1"),
            "the object on the watch carries its decoded metadata"
        );
        let meta = kept.to_api().metadata;
        assert_eq!(meta.name.as_deref(), Some("flash-serve-0-1"));
        assert_eq!(meta.namespace.as_deref(), Some("team"));
        assert_eq!(meta.uid.as_deref(), Some("p-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("4711"));
        assert_eq!(meta.generation, Some(2));
        assert_eq!(
            serde_json::to_value((&meta.creation_timestamp, &meta.deletion_timestamp))
                .expect("json"),
            serde_json::json!(["2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"])
        );
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
        assert_eq!(kept.label(KeptLabel::Rank), Some("1"));
        assert_eq!(kept.label(KeptLabel::Role), None);
    }

    #[test]
    fn a_stored_pod_gives_back_the_status_a_pass_reads() {
        let status = serde_json::json!({
            "phase": "Pending", "reason": "Evicted", "message": "the node was drained",
            "podIP": "10.0.0.7", "hostIP": "192.168.1.2", "startTime": "2026-01-01T00:00:03Z",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                 "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"},
                {"type": "DisruptionTarget", "status": "Pending", "reason": "EvictionByEvictionAPI"},
                {"type": ACCEPTED_POD_CONDITION, "status": "Unknown", "message": "judging"},
            ],
            "initContainerStatuses": [{"name": "fetch", "image": "", "imageID": "",
                "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                    "message": "killed", "startedAt": "2026-01-01T00:00:04Z",
                    "finishedAt": "2026-01-01T00:00:05Z"}}}],
            "containerStatuses": [{"name": "engine", "image": "", "imageID": "",
                "ready": true, "restartCount": 0,
                "started": true, "state": {"running": {"startedAt": "2026-01-01T00:00:06Z"}}}],
            "resourceClaimStatuses": [{"name": "devices", "resourceClaimName": "flash-serve-0-1-devices-x7k2q"}],
        });
        let pod: Incoming<CachedPod> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "flash-serve-0-1", "namespace": "team"},
            "spec": {"nodeName": "n-1"},
            "status": status,
        }))
        .expect("decoded");
        let kept = pod.shape();
        assert_eq!(
            serde_json::to_value(kept.to_api().status).expect("json"),
            status,
            "every field a pass reads comes back as it was decoded"
        );
    }

    #[test]
    fn a_stored_job_keeps_its_containers_names_and_its_run_key_and_no_arguments() {
        let names = crate::controller::build::AcceptanceNames::new("flash", "r1", "");
        let job: Incoming<CachedJob> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": names.job(0), "namespace": "team",
                "annotations": {JUDGES_ANNOTATION: names.key}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "engine", "image": "e", "args": ["--serve", "--port", "8000"]},
                {"name": crate::controller::build::JUDGE_CONTAINER, "image": "j",
                 "args": ["judge", "--revision", "r1", crate::controller::build::EVIDENCE_FLAG, "elsewhere", "--owner-name", "flash"]},
            ]}}},
        }))
        .expect("decoded");
        let back = job.shape().to_api();
        let containers = &back
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pods")
            .containers;
        let kept: Vec<_> = containers
            .iter()
            .map(|c| (c.name.as_str(), c.args.clone()))
            .collect();
        assert_eq!(
            kept,
            [
                ("engine", None),
                (crate::controller::build::JUDGE_CONTAINER, None)
            ]
        );
        assert_eq!(
            crate::controller::build::evidence_of_job("flash", &back),
            Some(names.evidence_configmap),
            "the evidence is named by the run's key, whatever the arguments say"
        );
    }

    #[test]
    fn a_serving_pod_keeps_its_node_and_status_in_one_allocation_of_under_256_bytes() {
        let status = serde_json::json!({
            "phase": "Running", "podIP": "10.244.1.188", "hostIP": "127.0.0.1",
            "startTime": "2026-12-06T20:09:40Z",
            "conditions": [
                {"type": ACCEPTED_POD_CONDITION, "status": "True", "reason": "AcceptancePassed",
                 "message": "revision wvqvv5bcfg6o4cn3ly5rwbvkovqzldal67exefd3if4cdi5kdq4a passed acceptance",
                 "lastTransitionTime": "2026-12-06T20:09:41Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T20:09:40Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-06T20:09:41Z"},
            ],
            "containerStatuses": [{"name": "engine", "image": "", "imageID": "", "ready": true,
                "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": "2026-12-06T20:09:40Z"}}}],
        });
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bench-00001-worker-0-0", "namespace": "bench"},
            "spec": {"nodeName": "bench-nvidia-12"},
            "status": status,
        }))
        .expect("decoded");
        assert!(pod.run.0.len() < 256, "{} bytes", pod.run.0.len());
        let back = pod.to_api();
        assert_eq!(
            back.spec.and_then(|s| s.node_name).as_deref(),
            Some("bench-nvidia-12")
        );
        assert_eq!(serde_json::to_value(back.status).expect("json"), status);
        let bare: CachedPod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}})).expect("pod");
        assert!(
            bare.run.0.is_empty(),
            "no allocation without spec or status"
        );
        assert_eq!((bare.to_api().spec, bare.to_api().status), (None, None));
    }

    #[test]
    fn a_cached_pod_with_its_shared_counts_fits_in_112_bytes() {
        // The cache holds each object in an `Arc` (two counts of 8 bytes): 112 bytes is one of
        // jemalloc's size classes, the next is 128.
        assert!(std::mem::size_of::<CachedPod>() + 16 <= 112);
        let pod: CachedPod = serde_json::from_value(serde_json::json!({"metadata": {
            "name": "p", "labels": {labels::REVISION: "r1", "other": "x"},
            "annotations": {APPLIED_HASH_ANNOTATION: "h1", "note": "y"}}}))
        .expect("pod");
        let meta = pod.to_api().metadata;
        assert_eq!(meta.generation, None);
        assert_eq!(
            (meta.labels, meta.annotations),
            (
                Some(BTreeMap::from([(labels::REVISION.into(), "r1".into())])),
                Some(BTreeMap::from([(
                    APPLIED_HASH_ANNOTATION.into(),
                    "h1".into()
                )]))
            ),
            "labels and annotations kept in one allocation come back apart"
        );
    }

    #[test]
    fn packed_texts_read_back_as_written_with_one_byte_of_length_below_254() {
        let long = "ä".repeat(200);
        let texts = [
            Some(""),
            None,
            Some("Running"),
            Some(&"x".repeat(253)),
            Some(&"y".repeat(254)),
            Some(long.as_str()),
            None,
        ];
        let packed = Texts::of(texts);
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(packed.get(i), *text, "text {i}");
        }
        assert_eq!(packed.get(texts.len()), None);
        // 1 + 1 + (1 + 7) + (1 + 253) + (1 + 4 + 254) + (1 + 4 + 400) + 1
        assert_eq!(packed.0.len(), 929);
        assert_eq!(Texts::of([Some("n-1")]).0.len(), 4);
        assert_eq!(Texts::of([None, None]), Texts::default());
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
        assert_eq!(budget.label(KeptLabel::Deployment), Some("flash"));
        let back = budget.to_api();
        assert_eq!(back.spec, None);
        assert_eq!(crate::controller::build::applied_hash(&back), Some("h2"));
        assert_eq!(back.metadata.labels.expect("labels").len(), 1);
        assert_eq!(back.metadata.annotations.expect("annotations").len(), 1);
        assert_eq!(
            <Incoming<CachedMeta<k8s_openapi::api::policy::v1::PodDisruptionBudget>> as kube::Resource>::url_path(&(), Some("team")),
            "/apis/policy/v1/namespaces/team/poddisruptionbudgets"
        );
    }

    #[test]
    fn a_cached_claim_keeps_its_name_and_phase_and_none_of_its_annotations() {
        let claim: Incoming<CachedClaim> = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "weights", "namespace": "team",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                "finalizers": ["kubernetes.io/pvc-protection"]},
            "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": "pv-1"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Ti"}},
        }))
        .expect("decoded");
        assert_eq!(kube::Resource::meta(&claim).finalizers, None);
        let claim = claim.into_shape();
        assert_eq!(claim.phase(), Some("Bound"));
        assert_eq!(claim.slim().name(), "weights");
        assert_eq!(claim.metadata.marks, Marks::default());
        let pending: CachedClaim =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "w"}}))
                .expect("decoded");
        assert_eq!(pending.phase(), None);
    }

    #[test]
    fn a_cached_deployment_gives_back_the_object_without_managed_fields_or_the_applied_copy() {
        let ar = crate::api::api_resource();
        let spec = serde_json::json!({"acceptance": {"promptsFrom": {"name": "prompts", "key": "k"}}, "replicas": {"worker": 2}});
        let full = object(spec);
        let cached: CachedDeployment = serde_json::from_value(full.clone()).expect("decoded");
        assert_eq!(cached.prompts_from.as_deref(), Some("prompts"));
        assert_eq!(cached.checkpoint_claim, None);
        assert!(cached.refers_to_config_map("prompts"));
        assert!(!cached.refers_to_config_map("other"));
        // The ConfigMaps its engines read: a change to one starts a pass.
        let engines: CachedDeployment = serde_json::from_value(object(serde_json::json!({
            "runtime": {"env": [{"name": "L", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "l"}}}]},
            "roles": [{"name": "worker", "pod": {"volumes": [
                {"name": "v", "configMap": {"name": "vol"}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "proj"}}]}}]}}],
        })))
        .expect("decoded");
        for name in ["conf", "vol", "proj"] {
            assert!(engines.refers_to_config_map(name), "{name}");
        }
        assert!(!engines.refers_to_config_map("prompts"));
        let mut expected = full;
        let meta = expected["metadata"].as_object_mut().expect("meta");
        meta.remove("managedFields");
        meta["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove("kubectl.kubernetes.io/last-applied-configuration");
        assert_eq!(cached.to_value(&ar).expect("value"), expected);
        let body = String::from_utf8(cached.body.text().expect("inflated")).expect("text");
        assert!(
            !body.contains("managedFields") && !body.contains("last-applied"),
            "{body}"
        );
        // The labels and annotations are kept in the compressed text, not as maps.
        assert_eq!(
            (&cached.metadata.labels, &cached.metadata.annotations),
            (&None, &None)
        );
        assert!(body.contains("license-accepted") && body.contains("inference"));
    }

    #[test]
    fn a_deployment_that_does_not_match_the_schema_is_cached_as_written() {
        let ar = crate::api::api_resource();
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

    #[test]
    fn a_cached_configmap_keeps_a_hash_of_its_data_so_an_edit_that_kept_the_applied_hash_is_seen() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let written = serde_json::json!({
            "metadata": {"name": "t", "namespace": "team", "uid": "c-1",
                         "annotations": {APPLIED_HASH_ANNOTATION: "h1"}},
            "data": {"rank_table.json": "{\"status\":\"completed\"}"}
        });
        let desired: ConfigMap = serde_json::from_value(written.clone()).expect("ConfigMap");
        let cached: CachedMeta<ConfigMap> = serde_json::from_value(written).expect("cached");
        let seen = cached.to_api();
        assert!(seen.data.is_none(), "the content itself is not kept");
        assert!(!crate::controller::apply::content_drifted(&desired, &seen));
        let edited: CachedMeta<ConfigMap> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "t", "namespace": "team", "uid": "c-1",
                         "annotations": {APPLIED_HASH_ANNOTATION: "h1"}},
            "data": {"rank_table.json": "{\"status\":\"completed\",\"server_list\":[]}"}
        }))
        .expect("cached");
        assert!(crate::controller::apply::content_drifted(
            &desired,
            &edited.to_api()
        ));
        // A Service has no data: nothing to compare.
        let service: CachedMeta<k8s_openapi::api::core::v1::Service> =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}})).expect("cached");
        assert!(service.to_api().metadata.annotations.is_none());
    }
}
