//! The metadata a cached object keeps ([`Slim`], [`Marks`]), and what every cached kind
//! implements ([`Slimmed`], [`Cached`], [`Incoming`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;

use crate::api::{labels, ACCEPTED_POD_CONDITION};
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
pub(crate) const KEPT_LABELS: &[&str] = &[
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
pub(crate) const KEPT_ANNOTATIONS: &[&str] = &[
    APPLIED_HASH_ANNOTATION,
    ASCEND_910_ANNOTATION,
    ASCEND_NPU_ANNOTATION,
    JUDGES_ANNOTATION,
];

/// The pod conditions some pass reads; a cached pod keeps no other.
pub(crate) const KEPT_POD_CONDITIONS: &[&str] = &[
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
pub(crate) fn kept_keys() -> impl Iterator<Item = &'static str> {
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
pub(crate) const ABSENT: u8 = u8::MAX;

/// The first byte of a packed text of [`LONG`] bytes or more: its length follows in 4 bytes.
pub(crate) const LONG: u8 = u8::MAX - 1;

/// The length [`push_text`] writes for `text`; `None` for a text too long to pack (no text the
/// API serves is).
pub(crate) fn packed_len(text: &str) -> Option<u32> {
    u32::try_from(text.len()).ok()
}

/// Appends `text` to `packed`: its length and its bytes, or [`ABSENT`] for `None` (or for a text
/// too long to pack). A length below [`LONG`] (every name, label, address and reason a pod has)
/// takes one byte; a longer one [`LONG`] and 4 bytes, little-endian.
pub(crate) fn push_text(packed: &mut Vec<u8>, text: Option<&str>) {
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
pub(crate) fn next_text(packed: &[u8]) -> Option<(Option<&str>, &[u8])> {
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
pub(crate) struct Texts(pub(crate) Box<[u8]>);

impl Texts {
    pub(crate) fn of<'a>(texts: impl IntoIterator<Item = Option<&'a str>>) -> Self {
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
    pub(crate) fn get(&self, position: usize) -> Option<&str> {
        let mut rest: &[u8] = &self.0;
        for _ in 0..position {
            rest = next_text(rest)?.1;
        }
        next_text(rest)?.0
    }

    /// The text at `position`, owned.
    pub(crate) fn owned(&self, position: usize) -> Option<String> {
        self.get(position).map(str::to_string)
    }
}

/// A time as a cache keeps it: whole seconds since the epoch (the API's `Time` has no finer
/// precision), or none. 8 bytes against 24 for an `Option<Time>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp(pub(crate) i64);

impl Default for Stamp {
    fn default() -> Self {
        Self(i64::MIN)
    }
}

impl Stamp {
    pub(crate) fn of(time: Option<&Time>) -> Self {
        time.map_or_else(Self::default, |t| Self(t.0.as_second()))
    }

    pub(crate) fn time(self) -> Option<Time> {
        if self == Self::default() {
            return None;
        }
        k8s_openapi::jiff::Timestamp::from_second(self.0)
            .ok()
            .map(Time)
    }
}

/// Annotation `kubectl apply` leaves: a copy of the whole object, never read here.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops `managedFields` and the last-applied annotation.
pub(crate) fn trim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// The API versions and kinds of the owners of cached objects, kept as an index rather than as
/// text per owner reference.
pub(crate) const OWNER_TYPES: &[(&str, &str)] = &[
    ("deepinfer.io/v1alpha1", "DeepInferDeployment"),
    ("batch/v1", "Job"),
];

/// [`Owner::type_`] of an owner whose type is not one of [`OWNER_TYPES`].
pub(crate) const OTHER_OWNER: u8 = u8::MAX;

/// An owner reference as a cache keeps it: its type as an index into [`OWNER_TYPES`], its name
/// and uid packed into one allocation (with the `apiVersion` and `kind` of another type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) type_: u8,
    pub(crate) controller: Option<bool>,
    pub(crate) block_owner_deletion: Option<bool>,
    /// The name and uid, then, for [`OTHER_OWNER`], the `apiVersion` and `kind`.
    pub(crate) texts: Texts,
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
    pub(crate) wire: Option<Box<ObjectMeta>>,
    /// `namespace/name` (the store's key), the uid and the resourceVersion, in one allocation.
    pub(crate) ids: Texts,
    /// [`NO_GENERATION`] for none.
    pub(crate) generation: i64,
    pub(crate) created: Stamp,
    pub(crate) deleted: Stamp,
    /// Shared by the objects of one cache with the same owners (see [`Slim::share_owners`]).
    pub(crate) owners: std::sync::Arc<[Owner]>,
    /// The kept labels and annotations.
    pub(crate) marks: Marks,
}

/// [`Slim::generation`] of an object without one (the API's are positive).
pub(crate) const NO_GENERATION: i64 = i64::MIN;

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

pub(crate) fn some_text(s: &str) -> Option<String> {
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
    pub(crate) fn full(&self) -> ObjectMeta {
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

    /// The fleet's acceptance run this object counts for ([`crate::controller::fleet::run_key`])
    /// and whether it keeps the run under way: an acceptance Job that has not finished. `None`
    /// for every other object.
    fn fleet_run(&self) -> Option<(String, bool)> {
        None
    }
}

/// An object of a cached kind on its way through a watch: the shape a store keeps, and its
/// decoded `ObjectMeta` (without labels and annotations), which the watcher and the trigger
/// mappings read through `kube::Resource`. A store keeps the shape only.
#[derive(Clone, Debug)]
pub struct Incoming<K> {
    pub(crate) meta: ObjectMeta,
    pub(crate) shape: K,
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
