//! The shapes the controller's caches keep of the kinds they hold most of: its own resources,
//! pods, Jobs and ControllerRevisions. Each is decoded straight from the API server's lists and
//! watch events into only what a pass reads, so a cached object costs a fraction of the API type
//! it stands for (a `Pod` value is 2.4 KB before any of its strings, a `Job` 2.8 KB and each of
//! its containers 2.3 KB; a spec as a tree of JSON values takes about ten times its text). A
//! pass turns what it reads back into the API type: [`CachedPod::to_pod`],
//! [`CachedJob::to_job`], [`CachedRevision::to_revision`], [`CachedDeployment::to_value`].

use std::borrow::Cow;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, Pod, PodCondition, PodResourceClaim, PodSpec,
    PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::observe::{trim_meta, Trim};

/// A `DeepInferDeployment` as the controller's cache keeps it: its metadata (trimmed as every
/// cached object's), the ConfigMap its `spec.acceptance.promptsFrom` names and its checkpoint's
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

/// A pod as the cache keeps it: its metadata (trimmed), node and device claims, and of its
/// status the phase, reason, message, addresses, start, conditions and each container's name,
/// readiness, restarts and states. No pass reads the rest of a pod.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedPod {
    /// The pod's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
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
    conditions: Option<Vec<PodCondition>>,
    init_container_statuses: Option<Vec<ContainerRun>>,
    container_statuses: Option<Vec<ContainerRun>>,
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
    state: Option<ContainerState>,
    last_state: Option<ContainerState>,
}

impl ContainerRun {
    fn to_status(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            ready: self.ready,
            restart_count: self.restart_count,
            started: self.started,
            state: self.state.clone(),
            last_state: self.last_state.clone(),
            ..ContainerStatus::default()
        }
    }
}

fn statuses(runs: &Option<Vec<ContainerRun>>) -> Option<Vec<ContainerStatus>> {
    runs.as_ref()
        .map(|runs| runs.iter().map(ContainerRun::to_status).collect())
}

impl CachedPod {
    /// The pod as the API type, with the fields the cache keeps.
    pub fn to_pod(&self) -> Pod {
        Pod {
            metadata: self.metadata.clone(),
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
                conditions: s.conditions.clone(),
                init_container_statuses: statuses(&s.init_container_statuses),
                container_statuses: statuses(&s.container_statuses),
                ..PodStatus::default()
            }),
        }
    }
}

/// Makes `$cached` stand for the API kind `$api` in lists and watches (same group, version,
/// kind and path), with the metadata trimmed as every cached kind's.
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
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl Trim for $cached {
            /// Decoding kept only what a pass reads; the metadata is trimmed as every kind's.
            fn trim(&mut self) {
                trim_meta(&mut self.metadata);
            }
        }
    };
}

stands_for!(CachedPod, Pod);
stands_for!(CachedJob, Job);
stands_for!(CachedRevision, ControllerRevision);

/// A Job as the cache keeps it: its metadata, TTL, its pods' device claims and containers'
/// names and arguments (the judge's name its evidence ConfigMap), and its status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedJob {
    /// The Job's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
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

impl CachedJob {
    /// The Job as the API type, with the fields the cache keeps.
    pub fn to_job(&self) -> Job {
        Job {
            metadata: self.metadata.clone(),
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
    /// The revision's metadata.
    pub metadata: ObjectMeta,
    /// The revision's number.
    pub revision: Option<i64>,
    data: Box<str>,
}

impl<'de> Deserialize<'de> for CachedRevision {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: ObjectMeta,
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

impl CachedRevision {
    /// The revision as the API type (data that no longer parses reads as null).
    pub fn to_revision(&self) -> ControllerRevision {
        ControllerRevision {
            metadata: self.metadata.clone(),
            revision: self.revision,
            data: RawExtension(serde_json::from_str(&self.data).unwrap_or(Value::Null)),
        }
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
