//! The cached Jobs, ControllerRevisions, PodGroups, DeepInferRoles, checkpoint claims and the
//! kinds kept as metadata only.

use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PersistentVolumeClaimStatus, PodResourceClaim, PodSpec,
    PodTemplateSpec,
};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, PodGroupResourceClaim, PodGroupSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde::Deserialize;
use serde_json::Value;

use super::deployment::*;
use super::meta::*;
use super::pod::*;
use crate::api::{DeepInferRole, DeepInferRoleSpec, DeepInferRoleStatus};

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
    pub(crate) metadata: Slim,
    #[serde(default)]
    pub(crate) spec: Option<JobPlan>,
    #[serde(default)]
    pub(crate) status: Option<JobRun>,
}

/// A Job's status as a cached Job keeps it: how many pods succeeded, its start and completion,
/// and each condition's type, status, reason and message (packed into one allocation each).
/// The counts of active, ready, failed and terminating pods, the conditions' times and the
/// indexes are dropped: no pass reads them.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobRun {
    pub(crate) succeeded: Option<i32>,
    pub(crate) start_time: Stamp,
    pub(crate) completion_time: Stamp,
    pub(crate) conditions: Box<[Texts]>,
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

impl CachedJob {
    /// Whether the Job has finished: a `Complete` or `Failed` condition is `True` (as
    /// [`crate::controller::caches::finished`] reads a Job).
    pub(crate) fn finished(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                matches!(c.get(0), Some("Complete" | "Failed")) && c.get(1) == Some("True")
            })
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
pub(crate) struct JobPlan {
    pub(crate) ttl_seconds_after_finished: Option<i32>,
    #[serde(default)]
    pub(crate) template: JobTemplate,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct JobTemplate {
    pub(crate) spec: Option<JobPods>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobPods {
    #[serde(default)]
    pub(crate) containers: Vec<Invocation>,
    pub(crate) resource_claims: Option<Vec<PodResourceClaim>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Invocation {
    #[serde(default)]
    pub(crate) name: Box<str>,
}

impl Cached for CachedJob {
    type Api = Job;

    fn fleet_run(&self) -> Option<(String, bool)> {
        use crate::api::{labels, Component};
        let marks = &self.metadata.marks;
        if marks.get(labels::COMPONENT).and_then(Component::parse) != Some(Component::Acceptance) {
            return None;
        }
        let key = crate::controller::fleet::run_key(
            self.metadata.namespace().unwrap_or_default(),
            marks.get(labels::DEPLOYMENT)?,
            marks.get(crate::controller::build::JUDGES_ANNOTATION)?,
        );
        Some((key, !self.finished()))
    }

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
    pub(crate) metadata: Slim,
    /// The revision's number.
    pub revision: Option<i64>,
    pub(crate) data: Deflated,
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
    pub(crate) metadata: Slim,
    #[serde(default)]
    pub(crate) spec: GroupClaims,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupClaims {
    pub(crate) resource_claims: Option<Vec<PodGroupResourceClaim>>,
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
    pub(crate) metadata: Slim,
    #[serde(default)]
    pub(crate) spec: DeepInferRoleSpec,
    #[serde(default)]
    pub(crate) status: Option<DeepInferRoleStatus>,
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
    pub(crate) metadata: Slim,
    #[serde(default)]
    pub(crate) status: Option<ClaimPhase>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct ClaimPhase {
    pub(crate) phase: Option<String>,
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
    pub(crate) metadata: Slim,
    #[serde(default, rename = "data", deserialize_with = "hash_of_data")]
    pub(crate) content: Option<u64>,
    #[serde(skip)]
    pub(crate) kind: PhantomData<fn() -> K>,
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

pub(crate) fn hash_of_data<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u64>, D::Error> {
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
