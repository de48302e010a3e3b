//! One read of everything a reconcile pass needs, into a plain [`Observed`] value that the gates
//! plan from. Only objects this resource owns are kept (by owner reference, never by label
//! alone); pods of its Jobs are kept with the Jobs.
//!
//! Owned objects come from the operator's caches ([`crate::controller::caches`]): a pass reads
//! no list; it waits only until every store has its first full list, and until each store has
//! taken in the operator's newest write of its kind ([`crate::controller::written`]), so that it
//! never decides on a view older than the writes before it. The checkpoint's
//! PersistentVolumeClaim comes from a store of every claim in scope, cut down to its name and
//! phase; the prompts ConfigMap and the metadata of referenced Secrets and ConfigMaps are read
//! with a GET. What a gate asks for beyond that ([`Read`]: a finished Job's pods, the fleet
//! queue's answer, the evidence, node domains) is read into [`Fresh`] before the pass plans
//! again.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::api::{labels, Component, DeepInferDeployment, DeepInferRole};
use crate::controller::cached::JOB_NAME_LABEL;
use crate::controller::caches::{owned, owned_in, Caches};
use crate::controller::error::Error;

/// The owned objects of one resource, as read at the start of a pass.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Worker pods (component `worker`).
    pub workers: Vec<Pod>,
    /// Jobs (fetch, verify, acceptance).
    pub jobs: Vec<Job>,
    /// Pods of those Jobs.
    pub job_pods: Vec<Pod>,
    /// Services (per role and per group, acceptance rendezvous).
    pub services: Vec<Service>,
    /// PodDisruptionBudgets (per role).
    pub budgets: Vec<PodDisruptionBudget>,
    /// ControllerRevisions: the spec of each revision, to rebuild its groups later.
    pub revisions: Vec<ControllerRevision>,
    /// PodGroups of serving groups and acceptance runs (empty where groups are not PodGroups).
    pub pod_groups: Vec<PodGroup>,
    /// ResourceClaimTemplates engine pods and PodGroups claim devices from (listed only where the
    /// spec names a DeviceClass).
    pub claim_templates: Vec<ResourceClaimTemplate>,
    /// The checkpoint's PersistentVolumeClaim as the cache holds it.
    pub claim_phase: ClaimPhase,
    /// The ConfigMap named by `spec.acceptance.promptsFrom`, if set and present.
    pub prompts: Option<ConfigMap>,
    /// HCCL rank table ConfigMaps of serving groups (Ascend).
    pub rank_tables: Vec<ConfigMap>,
    /// The ConfigMap listing the prefill / vision endpoints for decode groups.
    pub peer_endpoints: Vec<ConfigMap>,
    /// The `DeepInferRole`s of roles scaled externally (empty where the API server does not
    /// serve them).
    pub scaled_roles: Vec<DeepInferRole>,
    /// Metadata of the Secrets and ConfigMaps the spec would hand on (the hub token, what
    /// engine containers read), read by a metadata-only GET: `None` where one does not exist.
    pub referenced: crate::controller::gates::spec::references::Seen,
    /// What the pass read fresh because a gate asked for it ([`Read`]).
    pub fresh: Fresh,
}

/// The checkpoint's PersistentVolumeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClaimPhase {
    /// The spec names none.
    #[default]
    NotNamed,
    /// It does not exist.
    Missing,
    /// Its `status.phase` (`Pending`, `Bound`, `Lost`).
    Phase(String),
}

impl ClaimPhase {
    /// Its phase, when it exists.
    pub fn phase(&self) -> Option<&str> {
        match self {
            ClaimPhase::Phase(p) => Some(p),
            _ => None,
        }
    }
}

/// A read a gate asks for beyond the caches, done before the pass plans again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// The pods of a finished Job whose summary the cache does not hold, from the API server.
    JobPods(String),
    /// Whether the fleet's queue lets this run start ([`crate::controller::fleet::run_key`]).
    Admission(String),
    /// The metadata of the deployment's evidence ConfigMaps.
    Evidence,
    /// The scale-up domain (the value of label `key`) of each of these nodes.
    Domains {
        /// The nodes.
        nodes: Vec<String>,
        /// The domain label.
        key: String,
    },
}

/// What the pass read because a gate asked for it.
#[derive(Clone, Debug, Default)]
pub struct Fresh {
    /// Pods of Jobs as the API server has them now, by Job.
    pub job_pods: std::collections::BTreeMap<String, Vec<Pod>>,
    /// The fleet queue's answer, by run.
    pub admission: std::collections::BTreeMap<String, crate::controller::fleet::Admission>,
    /// Metadata of the deployment's evidence ConfigMaps.
    pub evidence: Option<Vec<ObjectMeta>>,
    /// Each node's domain (`None`: the node has none, or is gone), or why no node was read.
    pub domains: Option<Result<std::collections::BTreeMap<String, Option<String>>, String>>,
}

impl Fresh {
    /// Whether `read` is done.
    pub fn has(&self, read: &Read) -> bool {
        match read {
            Read::JobPods(job) => self.job_pods.contains_key(job),
            Read::Admission(run) => self.admission.contains_key(run),
            Read::Evidence => self.evidence.is_some(),
            Read::Domains { .. } => self.domains.is_some(),
        }
    }

    /// The pods of `job` as read now, when they were.
    pub fn pods_of(&self, job: Option<&String>) -> Option<&[Pod]> {
        self.job_pods.get(job?).map(Vec::as_slice)
    }
}

/// The metadata of the evidence ConfigMaps of the deployment `name` (UID `uid`) in `ns`, read as
/// metadata only (evidence is up to 1 MiB each).
pub async fn evidence_metas(
    client: &Client,
    ns: &str,
    name: &str,
    uid: &str,
) -> Result<Vec<ObjectMeta>, Error> {
    let metas: Api<kube::core::PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&format!(
        "{}={name},{}={}",
        labels::DEPLOYMENT,
        labels::COMPONENT,
        Component::Evidence.as_str()
    ));
    let list = metas
        .list(&lp)
        .await
        .map_err(|e| Error::api("list", "ConfigMap", &format!("{ns}/{name} evidence"), e))?;
    Ok(list
        .items
        .into_iter()
        .map(|m| m.metadata)
        .filter(|m| m.owner_references.iter().flatten().any(|o| o.uid == uid))
        .collect())
}

/// Each of `nodes`' value of the label `key` (`None`: the node has none, or is gone); `Err` says
/// why none was read when the operator may not get nodes.
pub async fn node_domains(
    client: &Client,
    nodes: &[String],
    key: &str,
) -> Result<Result<std::collections::BTreeMap<String, Option<String>>, String>, Error> {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let mut domains = std::collections::BTreeMap::new();
    for node in nodes {
        match api.get_metadata_opt(node).await {
            Ok(meta) => {
                let domain = meta.and_then(|m| m.labels().get(key).cloned());
                domains.insert(node.clone(), domain);
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                return Ok(Err(format!(
                    "the operator may not get nodes ({}); grant its ServiceAccount get on nodes",
                    e.message
                )))
            }
            Err(e) => return Err(Error::api("get", "Node", node, e)),
        }
    }
    Ok(Ok(domains))
}

/// The pods of the Job `job` as the API server has them now (a list straight from it, not the
/// cache).
pub async fn pods_of_job_now(
    client: &Client,
    ns: &str,
    job: &str,
    uid: &str,
) -> Result<Vec<Pod>, Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&format!("{JOB_NAME_LABEL}={job}"));
    tracing::info!(%job, "the Job finished but the cache holds no summary of its pod; reading its pods directly");
    let pods = api
        .list(&lp)
        .await
        .map(|l| l.items)
        .map_err(|e| Error::api("list", "Pod", &format!("{ns}/{job} pods"), e))?;
    // The label is anyone's to copy: only the pods the Job itself controls are its pods.
    Ok(pods
        .into_iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect())
}

/// The object named `name` among `objects` of a snapshot (of a kind the cache holds), if any.
pub fn named<'o, K: Resource>(objects: &'o [K], name: &str) -> Option<&'o K> {
    objects.iter().find(|o| o.name_any() == name)
}

async fn get_opt<K>(client: &Client, ns: &str, name: &str) -> Result<Option<K>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.map_err(|e| {
        Error::api(
            "get",
            <K as k8s_openapi::Resource>::KIND,
            &format!("{ns}/{name}"),
            e,
        )
    })
}

/// The metadata (labels and annotations only: no content is read) of every Secret and
/// ConfigMap the spec would hand on to a workload, each read once by a metadata-only GET.
async fn referenced(
    client: &Client,
    ns: &str,
    spec: &crate::api::DeepInferDeploymentSpec,
) -> Result<crate::controller::gates::spec::references::Seen, Error> {
    use crate::controller::gates::spec::references::{
        engine_references, hub_token_reference, Kind,
    };
    use k8s_openapi::api::core::v1::Secret;
    let mut seen = crate::controller::gates::spec::references::Seen::new();
    for r in hub_token_reference(spec)
        .into_iter()
        .chain(engine_references(spec))
    {
        let key = (r.kind, r.name.clone());
        if seen.contains_key(&key) {
            continue;
        }
        let meta = match r.kind {
            Kind::Secret => get_meta_opt::<Secret>(client, ns, &r.name).await?,
            Kind::ConfigMap => get_meta_opt::<ConfigMap>(client, ns, &r.name).await?,
        };
        seen.insert(key, meta);
    }
    Ok(seen)
}

async fn get_meta_opt<K>(client: &Client, ns: &str, name: &str) -> Result<Option<ObjectMeta>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.get_metadata_opt(name).await {
        Ok(found) => Ok(found.map(|m| m.metadata)),
        Err(e) => Err(Error::api(
            "get",
            <K as k8s_openapi::Resource>::KIND,
            &format!("{ns}/{name}"),
            e,
        )),
    }
}

/// What [`observe`] reads from: the caches of the owned objects, and the client for the one GET.
pub trait Sources {
    /// The API client.
    fn client(&self) -> &Client;
    /// The caches of the owned objects.
    fn caches(&self) -> &Caches;
}

/// Reads every object the pass needs from the caches (PodGroups only when groups are PodGroups
/// here), and the prompts by GET.
pub async fn observe(
    ctx: &impl Sources,
    did: &DeepInferDeployment,
    pod_groups: bool,
) -> Result<Observed, Error> {
    let ns = did
        .namespace()
        .ok_or_else(|| Error::NoNamespace(did.name_any()))?;
    let name = did.name_any();
    let uid = did.uid().unwrap_or_default();
    let caches = ctx.caches();
    caches.ready().await;
    caches
        .written
        .caught_up(&uid, crate::controller::written::CATCH_UP)
        .await;
    let jobs = owned_in(&caches.jobs, &ns, &name, &uid, None);
    let workers = owned_in(&caches.pods, &ns, &name, &uid, Some(Component::Worker));
    // A pod owned by the resource itself is never one of its Jobs' pods.
    let mut job_pods: Vec<Pod> = Vec::new();
    for job_uid in jobs.iter().filter_map(|j| j.uid()) {
        for pod in owned(&caches.pods, &ns, &name, &job_uid, None) {
            let seen = job_pods
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(pod.slim().name()));
            if !seen && !pod.slim().owned_by(&uid) {
                job_pods.push(pod.to_api());
            }
        }
    }
    let claim_phase = match crate::controller::build::checkpoint_location(&did.spec) {
        None => ClaimPhase::NotNamed,
        Some((claim, _)) => match caches.claims.get(&ns, &claim) {
            None => ClaimPhase::Missing,
            Some(c) => ClaimPhase::Phase(c.phase().unwrap_or_default().to_string()),
        },
    };
    let prompts = match &did.spec.acceptance.prompts_from {
        Some(from) => get_opt::<ConfigMap>(ctx.client(), &ns, &from.name).await?,
        None => None,
    };
    let referenced = referenced(ctx.client(), &ns, &did.spec).await?;
    Ok(Observed {
        claim_phase,
        prompts,
        referenced,
        workers,
        jobs,
        job_pods,
        services: owned_in(&caches.services, &ns, &name, &uid, None),
        budgets: owned_in(&caches.budgets, &ns, &name, &uid, None),
        revisions: owned_in(&caches.revisions, &ns, &name, &uid, None),
        claim_templates: if did.spec.accelerator.device_class_name.is_some()
            || did.spec.accelerator.domain_device_class_name.is_some()
        {
            owned_in(&caches.claim_templates, &ns, &name, &uid, None)
        } else {
            Vec::new()
        },
        rank_tables: {
            let component = Some(Component::RankTable);
            owned_in(&caches.config_maps, &ns, &name, &uid, component)
        },
        // Only a spec whose decode role has upstream roles has (or may delete) the file.
        peer_endpoints: if crate::controller::build::decode_has_upstreams(&did.spec) {
            let component = Some(Component::PeerEndpoints);
            owned_in(&caches.config_maps, &ns, &name, &uid, component)
        } else {
            Vec::new()
        },
        scaled_roles: owned_in(&caches.scaled_roles, &ns, &name, &uid, None),
        fresh: Fresh::default(),
        pod_groups: if pod_groups {
            owned_in(&caches.pod_groups, &ns, &name, &uid, None)
        } else {
            Vec::new()
        },
    })
}

impl Observed {
    /// The Job of this name.
    pub fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.name_any() == name)
    }

    /// Revisions that have worker pods (being deleted or not).
    pub fn revisions_with_pods(&self) -> std::collections::BTreeSet<String> {
        self.workers
            .iter()
            .filter_map(|p| p.labels().get(labels::REVISION).cloned())
            .collect()
    }

    /// Revisions that serve: those with worker pods, and those the roles served on as last
    /// recorded in `known` (their groups may all be lost and being rebuilt). Their
    /// ControllerRevisions and newest judgements are kept.
    pub fn revisions_serving(
        &self,
        known: &crate::api::DeepInferDeploymentStatus,
    ) -> std::collections::BTreeSet<String> {
        let mut out = self.revisions_with_pods();
        out.extend(known.serving_revisions());
        out
    }

    /// Pods of the Job of this name.
    pub fn pods_of_job(&self, name: &str) -> Vec<&Pod> {
        self.job_pods
            .iter()
            .filter(|p| p.labels().get(JOB_NAME_LABEL).map(String::as_str) == Some(name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::cached::LAST_APPLIED;
    use crate::controller::cached::*;
    use crate::controller::caches::*;
    use crate::controller::written::*;
    use kube::runtime::watcher;
    use serde::de::DeserializeOwned;
    use std::collections::BTreeMap;

    use crate::controller::{build, gang, gates, pods};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::time::Duration;

    fn meta_with_noise(extra: serde_json::Value) -> serde_json::Value {
        let mut meta = serde_json::json!({
            "name": "flash-serve-abcde-0-0",
            "namespace": "team",
            "labels": {labels::DEPLOYMENT: "flash", labels::COMPONENT: "worker", "job-name": "flash-accept-0"},
            "annotations": {
                build::APPLIED_HASH_ANNOTATION: "h1",
                LAST_APPLIED: "{\"a\": \"copy of the whole object\"}",
            },
            "ownerReferences": [{"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment", "name": "flash", "uid": "u-1"}],
            "deletionTimestamp": "2026-01-01T00:00:05Z",
            "managedFields": [{"manager": "deepinfer-operator", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        });
        meta.as_object_mut()
            .expect("object")
            .extend(extra.as_object().cloned().unwrap_or_default());
        meta
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": meta_with_noise(serde_json::json!({})),
            "spec": {
                "nodeName": "nvidia-3",
                "containers": [{"name": "engine", "image": "vllm:1", "args": ["--serve"], "env": [{"name": "A", "value": "b"}]}],
                "volumes": [{"name": "model", "emptyDir": {}}],
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "flash-gpus"}],
                "readinessGates": [{"conditionType": "deepinfer.io/accepted"}],
            },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "hostIP": "192.168.0.3",
                "podIPs": [{"ip": "10.0.0.7"}],
                "hostIPs": [{"ip": "192.168.0.3"}],
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Ready", "status": "True"},
                    {"type": "deepinfer.io/accepted", "status": "True", "reason": "Passed"},
                ],
                "containerStatuses": [{
                    "name": "engine", "ready": true, "restartCount": 1, "image": "vllm:1", "imageID": "sha",
                    "state": {"running": {"startedAt": "2026-01-01T00:00:02Z"}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }],
            },
        }))
        .expect("a pod")
    }

    /// `full` as the cache decodes it.
    fn through_cache<C>(full: &impl serde::Serialize) -> C
    where
        Incoming<C>: DeserializeOwned,
    {
        serde_json::from_value::<Incoming<C>>(serde_json::to_value(full).expect("json"))
            .expect("decoded")
            .into_shape()
    }

    /// The pod a pass reads of `full` after the cache decoded and trimmed it.
    fn cached(full: &Pod) -> Pod {
        through_cache::<CachedPod>(full).to_api()
    }

    /// A pod that ended: an init container waited, the engine was killed with a message.
    fn ended_pod() -> Pod {
        let mut pod = pod();
        let status = serde_json::json!({
            "phase": "Failed",
            "reason": "Evicted",
            "message": "node out of memory",
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes are available"},
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": "evicted"},
            ],
            "initContainerStatuses": [{
                "name": "fetch", "ready": false, "restartCount": 2, "image": "op:1", "imageID": "sha",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "pull failed"}},
            }],
            "containerStatuses": [{
                "name": "engine", "ready": false, "restartCount": 0, "image": "vllm:1", "imageID": "sha",
                "containerID": "sim://1", "allocatedResources": {"nvidia.com/gpu": "8"},
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "killed", "finishedAt": "2026-01-01T00:01:00Z"}},
            }],
        });
        pod.status = Some(serde_json::from_value(status).expect("status"));
        pod
    }

    #[test]
    fn an_ended_cached_pod_reads_the_same_to_every_decision() {
        let full = ended_pod();
        let trimmed = cached(&full);
        assert_eq!(
            gates::jobs::pod_trouble(&trimmed),
            gates::jobs::pod_trouble(&full)
        );
        assert_eq!(
            gates::jobs::containers_ended(&[&trimmed]),
            gates::jobs::containers_ended(&[&full])
        );
        assert_eq!(
            gates::jobs::termination_message([&trimmed].into_iter(), "engine"),
            Some("killed".to_string())
        );
        assert_eq!(
            gates::jobs::started_at(&trimmed, "engine"),
            gates::jobs::started_at(&full, "engine")
        );
        let status = |p: &Pod| {
            let s = p.status.clone().expect("status");
            (s.phase, s.reason, s.message, s.start_time, s.conditions)
        };
        assert_eq!(status(&trimmed), status(&full));
        let state = |p: &Pod| {
            let s = p.status.clone().expect("status");
            s.init_container_statuses
                .into_iter()
                .chain(s.container_statuses)
                .flatten()
                .map(|c| (c.name, c.ready, c.restart_count, c.state, c.last_state))
                .collect::<Vec<_>>()
        };
        assert_eq!(state(&trimmed), state(&full));
    }

    #[test]
    fn a_trimmed_pod_reads_the_same_to_every_decision_and_keeps_no_managed_fields() {
        let full = pod();
        let trimmed = cached(&full);
        assert!(trimmed.metadata.managed_fields.is_none());
        assert!(!trimmed.annotations().contains_key(LAST_APPLIED));
        assert!(trimmed
            .spec
            .as_ref()
            .is_some_and(|s| s.containers.is_empty()));
        assert!(
            serde_json::to_vec(&trimmed).expect("json").len()
                < serde_json::to_vec(&full).expect("json").len()
        );
        assert_eq!(trimmed.labels(), full.labels());
        assert_eq!(trimmed.owner_references(), full.owner_references());
        assert_eq!(build::applied_hash(&trimmed), build::applied_hash(&full));
        assert_eq!(
            trimmed.metadata.deletion_timestamp,
            full.metadata.deletion_timestamp
        );
        assert!(pods::pod_ready(&trimmed) && pods::is_accepted(&trimmed));
        assert_eq!(
            gates::jobs::pod_trouble(&trimmed),
            gates::jobs::pod_trouble(&full)
        );
        assert_eq!(
            gates::jobs::unschedulable(&trimmed),
            gates::jobs::unschedulable(&full)
        );
        assert_eq!(
            gates::jobs::started_at(&trimmed, "engine"),
            gates::jobs::started_at(&full, "engine")
        );
        assert_eq!(
            gates::jobs::containers_ended(&[&trimmed]),
            gates::jobs::containers_ended(&[&full])
        );
        assert_eq!(
            gang::partial_placement(&[&trimmed], 2),
            gang::partial_placement(&[&full], 2)
        );
        assert_eq!(
            build::templates_in_use(trimmed.spec.as_ref()),
            build::templates_in_use(full.spec.as_ref())
        );
        assert_eq!(
            trimmed.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
            Some("10.0.0.7")
        );
        assert_eq!(
            trimmed.status.as_ref().and_then(|s| s.host_ip.as_deref()),
            Some("192.168.0.3")
        );
    }

    #[test]
    fn a_trimmed_job_keeps_its_ttl_claims_run_key_and_status() {
        let full: Job = serde_json::from_value(serde_json::json!({
            "metadata": meta_with_noise(serde_json::json!({"name": "flash-accept-0",
                "annotations": {build::JUDGES_ANNOTATION: build::AcceptanceNames::new("flash", "r1", "").key}})),
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {
                        "containers": [{"name": build::JUDGE_CONTAINER, "image": "op:1", "args": ["judge", "--evidence-configmap", "flash-evidence-1"], "env": [{"name": "A", "value": "b"}]}],
                        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "flash-gpus"}],
                    },
                },
            },
            "status": {
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                     "message": "Reached expected number of succeeded pods", "lastTransitionTime": "2026-01-01T00:01:00Z"},
                    {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                     "message": "Reached expected number of succeeded pods", "lastProbeTime": "2026-01-01T00:01:00Z"},
                ],
                "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:00Z",
                "succeeded": 1, "active": 0, "ready": 0, "terminating": 0,
                "uncountedTerminatedPods": {},
            },
        }))
        .expect("a job");
        let trimmed = through_cache::<CachedJob>(&full).to_api();
        assert!(trimmed.metadata.managed_fields.is_none());
        // Of the status, what a pass reads: the pods succeeded, each condition's type, status,
        // reason and message, the start and the completion.
        let read = |j: &Job| {
            let s = j.status.clone().unwrap_or_default();
            let conditions: Vec<_> = s
                .conditions
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c.type_, c.status, c.reason, c.message))
                .collect();
            (s.succeeded, conditions, s.start_time, s.completion_time)
        };
        assert_eq!(read(&trimmed), read(&full));
        assert_eq!(read(&full).1.len(), 2);
        for state in [build::JUDGE_CONTAINER, "other"] {
            assert_eq!(
                format!("{:?}", gates::jobs::state_of(Some(&trimmed), &[], state)),
                format!("{:?}", gates::jobs::state_of(Some(&full), &[], state))
            );
        }
        assert!(finished(&trimmed));
        assert_eq!(
            build::evidence_of_job("flash", &trimmed),
            build::evidence_of_job("flash", &full)
        );
        assert!(build::evidence_of_job("flash", &full).is_some());
        let template = |j: &Job| j.spec.as_ref().and_then(|s| s.template.spec.clone());
        assert_eq!(
            build::templates_in_use(template(&trimmed).as_ref()),
            build::templates_in_use(template(&full).as_ref())
        );
        assert_eq!(
            gates::housekeeping::retention::jobs_to_expire(std::slice::from_ref(&trimmed), &[]),
            gates::housekeeping::retention::jobs_to_expire(std::slice::from_ref(&full), &[])
        );
        assert!(template(&trimmed).is_some_and(|p| p.containers[0].env.is_none()));
        // What the Job judges is read from the cache: a Job made for this run is not foreign.
        let observed = Observed {
            jobs: vec![trimmed],
            ..Observed::default()
        };
        let key = build::AcceptanceNames::new("flash", "r1", "").key;
        assert_eq!(
            gates::jobs::foreign_job(&observed, "flash-accept-0", &key),
            None
        );
        assert!(gates::jobs::foreign_job(&observed, "flash-accept-0", "another-key").is_some());
    }

    #[test]
    fn a_cached_revision_keeps_its_number_and_the_spec_it_rebuilds_groups_from() {
        let full: ControllerRevision = serde_json::from_value(serde_json::json!({
            "metadata": meta_with_noise(serde_json::json!({"name": "flash-2777e6e417"})),
            "revision": 3,
            "data": {"spec": {"model": {"name": "deepseek-ai/DeepSeek-V3", "revision": "abc"}, "replicas": 2}},
        }))
        .expect("a revision");
        let trimmed = through_cache::<CachedRevision>(&full).to_api();
        assert!(trimmed.metadata.managed_fields.is_none());
        assert_eq!(trimmed.revision, Some(3));
        assert_eq!(trimmed.data, full.data);
        assert_eq!(trimmed.labels(), full.labels());
    }

    fn labelled_pod(name: &str, component: Option<&str>, rv: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.resource_version = Some(rv.into());
        let mut l = BTreeMap::from([(labels::MANAGED_BY.to_string(), labels::MANAGER.to_string())]);
        if let Some(c) = component {
            l.insert(labels::COMPONENT.into(), c.into());
        }
        pod.metadata.labels = Some(l);
        pod
    }

    /// `pod` controlled by the deployment of UID `owner`.
    fn owned_by(mut pod: Pod, owner: &str) -> Pod {
        pod.metadata.owner_references = Some(vec![OwnerReference {
            uid: owner.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        pod
    }

    #[tokio::test]
    async fn a_pass_waits_until_the_store_has_its_deployments_last_write_of_each_kind() {
        let (caches, _writers) = Caches::new();
        let written = caches.written.clone();
        let pods = written.of("Pod").expect("pods are cached");
        let pod = |name, rv| owned_by(labelled_pod(name, None, rv), "u1");
        // A write outside a pass, or of an object no store watches, is not waited for.
        note_written(&pod("a", "7"));
        let mut foreign = pod("b", "9");
        foreign.metadata.labels = None;
        noting_writes(written.clone(), async { note_written(&foreign) }).await;
        assert!(written.pending("u1").is_empty());
        noting_writes(written.clone(), async { note_written(&pod("c", "12")) }).await;
        assert_eq!(written.pending("u1"), [("Pod", 12)]);
        // Another deployment's pass does not wait for it.
        tokio::time::timeout(
            Duration::from_secs(1),
            written.caught_up("u2", Duration::from_secs(30)),
        )
        .await
        .expect("no wait for another deployment's writes");
        let waiting = tokio::spawn({
            let written = written.clone();
            async move { written.caught_up("u1", Duration::from_secs(30)).await }
        });
        // A relist counts only once it is complete; an event counts at once.
        pods.stored(&watcher::Event::<Pod>::Init);
        pods.stored(&watcher::Event::InitApply(pod("c", "12")));
        assert!(!written.pending("u1").is_empty());
        pods.stored(&watcher::Event::<Pod>::InitDone);
        assert!(written.pending("u1").is_empty());
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the wait ends once the store has the write")
            .expect("joined");
        noting_writes(written.clone(), async { note_written(&pod("c", "20")) }).await;
        pods.stored(&watcher::Event::Apply(pod("c", "19")));
        assert!(!written.pending("u1").is_empty());
        pods.stored(&watcher::Event::Delete(pod("c", "21")));
        assert!(written.pending("u1").is_empty());
        // A wait that runs out reads the store as it is, and the next pass does not wait again.
        noting_writes(written.clone(), async { note_written(&pod("d", "30")) }).await;
        written.caught_up("u1", Duration::from_millis(20)).await;
        assert!(written.pending("u1").is_empty());
    }

    #[tokio::test]
    async fn a_waiting_pass_is_woken_by_the_stores_event_not_by_a_poll() {
        let (caches, _writers) = Caches::new();
        let written = caches.written.clone();
        let pods = written.of("Pod").expect("pods are cached");
        let pod = |name, rv| owned_by(labelled_pod(name, None, rv), "u1");
        noting_writes(written.clone(), async { note_written(&pod("c", "12")) }).await;
        let waiting = tokio::spawn({
            let written = written.clone();
            async move { written.caught_up("u1", Duration::from_secs(15)).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits for the write");
        pods.stored(&watcher::Event::Apply(pod("c", "12")));
        // One thread: the waiting task runs when this one yields, and ends at once if the event
        // woke it (a timer would not have fired yet).
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert!(waiting.is_finished(), "woken by the store's event");
    }

    #[test]
    fn the_writes_noted_are_swept_a_constant_number_of_times_per_write() {
        let (caches, _writers) = Caches::new();
        let written = &caches.written;
        // 3,000 deployments' writes in flight: a sweep keeps them all, and the next one waits
        // until there are twice as many, so 3,000 writes sweep twice, not 2,000 times.
        for i in 0..3000 {
            let pod = owned_by(labelled_pod("p", None, "7"), &format!("u{i}"));
            written.note("Pod", &pod.metadata);
        }
        assert_eq!(written.sweep_at(), 4102);
        // Once the stores hold them, the next sweep empties the map and the bound comes back.
        let pods = written.of("Pod").expect("pods are cached");
        pods.stored(&watcher::Event::Apply(labelled_pod("p", None, "7")));
        for i in 0..4103 {
            let pod = owned_by(labelled_pod("q", None, "8"), &format!("v{i}"));
            written.note("Pod", &pod.metadata);
            pods.stored(&watcher::Event::Apply(labelled_pod("q", None, "8")));
        }
        assert_eq!(written.sweep_at(), 1024);
        assert!(written.owners_noted() <= 1025, "{}", written.owners_noted());
    }

    #[test]
    fn only_configmaps_the_store_watches_are_waited_for() {
        let (caches, _writers) = Caches::new();
        let evidence = owned_by(labelled_pod("e", Some("evidence"), "5"), "u1").metadata;
        caches.written.note("ConfigMap", &evidence);
        assert!(caches.written.pending("u1").is_empty());
        let table = owned_by(
            labelled_pod("t", Some(Component::RankTable.as_str()), "6"),
            "u1",
        );
        caches.written.note("ConfigMap", &table.metadata);
        assert_eq!(caches.written.pending("u1"), [("ConfigMap", 6)]);
        caches.written.note("Role", &table.metadata);
        assert_eq!(
            caches.written.pending("u1"),
            [("ConfigMap", 6)],
            "Roles are not cached"
        );
    }

    #[test]
    fn trimmed_applied_objects_keep_the_hash_they_are_compared_by() {
        let meta: ObjectMeta =
            serde_json::from_value(meta_with_noise(serde_json::json!({}))).expect("meta");
        let cm = through_cache::<CachedMeta<ConfigMap>>(&ConfigMap {
            metadata: meta.clone(),
            data: Some(std::collections::BTreeMap::from([(
                "table".into(),
                "x".repeat(4096),
            )])),
            ..ConfigMap::default()
        })
        .to_api();
        assert!(cm.data.is_none() && cm.metadata.managed_fields.is_none());
        assert_eq!(build::applied_hash(&cm), Some("h1"));
        let svc = through_cache::<CachedMeta<Service>>(&Service {
            metadata: meta,
            spec: Some(Default::default()),
            ..Service::default()
        })
        .to_api();
        assert!(svc.spec.is_none());
        assert_eq!(build::applied_hash(&svc), Some("h1"));
        assert_eq!(svc.owner_references().len(), 1);
        assert!(!svc.annotations().contains_key(LAST_APPLIED));
    }

    fn service(
        ns: &str,
        name: &str,
        deployment: &str,
        owner: Option<&str>,
    ) -> Incoming<CachedMeta<Service>> {
        let mut meta = ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some([(labels::DEPLOYMENT.to_string(), deployment.to_string())].into()),
            ..ObjectMeta::default()
        };
        meta.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                uid: uid.into(),
                name: deployment.into(),
                ..OwnerReference::default()
            }]
        });
        serde_json::from_value(
            serde_json::to_value(Service {
                metadata: meta,
                ..Service::default()
            })
            .expect("json"),
        )
        .expect("decoded")
    }

    /// Feeds one watch event to a cache as the controller's watch does.
    fn take(
        writer: &mut CacheWriter<CachedMeta<Service>>,
        event: watcher::Event<Incoming<CachedMeta<Service>>>,
    ) {
        writer.take(&event);
    }

    fn names(
        cache: &Cache<CachedMeta<Service>>,
        ns: &str,
        deployment: &str,
        uid: &str,
    ) -> Vec<String> {
        owned(cache, ns, deployment, uid, None)
            .iter()
            .map(|s| s.slim().name().to_string())
            .collect()
    }

    #[test]
    fn the_pods_of_a_done_job_leave_the_pod_cache_until_a_pass_reads_the_job_again_or_it_is_gone() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (caches, mut writers) = Caches::new();
        fn decoded<K: DeserializeOwned>(value: serde_json::Value) -> K {
            serde_json::from_value(value).expect("decoded")
        }
        let pod = |name: &str, job_uid: &str| -> Incoming<CachedPod> {
            decoded(serde_json::json!({"metadata": {
                "name": name, "namespace": "team", "labels": {labels::DEPLOYMENT: "flash"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job_uid}],
            }}))
        };
        let job = |name: &str, uid: &str| -> Incoming<CachedJob> {
            decoded(serde_json::json!({"metadata": {
                "name": name, "namespace": "team", "uid": uid, "labels": {labels::DEPLOYMENT: "flash"},
            }}))
        };
        let cached = |caches: &Caches, job_uid: &str| -> Vec<String> {
            owned(&caches.pods, "team", "flash", job_uid, None)
                .iter()
                .map(|p| p.slim().name().to_string())
                .collect()
        };
        /// A relist of `objects` fed to `writer`.
        fn relist<K: Cached>(writer: &mut CacheWriter<K>, objects: Vec<Incoming<K>>) {
            writer.take(&Init);
            for o in objects {
                writer.take(&InitApply(o));
            }
            writer.take(&InitDone);
        }
        let pods = || vec![pod("verify-a", "j1"), pod("accept-a", "j2")];
        relist(&mut writers.pods, pods());
        relist(
            &mut writers.jobs,
            vec![job("verify", "j1"), job("accept", "j2")],
        );
        caches.uncache_job_pods(&["j1".into()], &["j2".into()]);
        assert!(
            cached(&caches, "j1").is_empty(),
            "a done Job's pods leave the cache"
        );
        assert_eq!(cached(&caches, "j2"), ["accept-a"]);
        // Neither an event nor a relist brings them back while the Job is done.
        writers.pods.take(&Apply(pod("verify-b", "j1")));
        relist(&mut writers.pods, pods());
        assert!(cached(&caches, "j1").is_empty());
        assert_eq!(caches.pods.len(), 1);
        // A pass that reads the Job again has its pods cached as their events come.
        caches.uncache_job_pods(&[], &["j1".into()]);
        writers.pods.take(&Apply(pod("verify-a", "j1")));
        assert_eq!(cached(&caches, "j1"), ["verify-a"]);
        // A Job that is deleted, or that a relist of Jobs no longer has, is forgotten.
        caches.uncache_job_pods(&["j1".into(), "j2".into()], &[]);
        assert_eq!(caches.pods.len(), 0);
        writers.jobs.take(&Delete(job("verify", "j1")));
        relist(&mut writers.jobs, Vec::new());
        assert!(
            caches.done_jobs.read().is_empty(),
            "nothing kept of Jobs gone"
        );
        writers.pods.take(&Apply(pod("verify-a", "j1")));
        assert_eq!(cached(&caches, "j1"), ["verify-a"]);
    }

    #[test]
    fn the_objects_of_one_owner_keep_their_owner_references_once() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (cache, mut writer) = CacheWriter::<CachedMeta<Service>>::new();
        for event in [
            Init,
            InitApply(service("team", "a-0", "a", Some("u-a"))),
            InitApply(service("team", "a-1", "a", Some("u-a"))),
            InitDone,
        ] {
            take(&mut writer, event);
        }
        take(&mut writer, Apply(service("team", "a-2", "a", Some("u-a"))));
        take(&mut writer, Apply(service("team", "b-0", "b", Some("u-b"))));
        let slim = |name: &str| cache.get("team", name).expect("cached").slim().clone();
        assert!(slim("a-0").shares_owners(&slim("a-1")), "listed");
        assert!(slim("a-0").shares_owners(&slim("a-2")), "applied");
        assert!(!slim("a-0").shares_owners(&slim("b-0")));
        // An owner of the same uid named otherwise is not taken for it.
        take(
            &mut writer,
            Apply(service("team", "a-3", "renamed", Some("u-a"))),
        );
        assert!(!slim("a-0").shares_owners(&slim("a-3")));
        // The list outlives the object it was first kept with.
        take(
            &mut writer,
            Delete(service("team", "a-0", "a", Some("u-a"))),
        );
        assert!(slim("a-1").shares_owners(&slim("a-2")));
        assert_eq!(slim("a-2").owner_uids().collect::<Vec<_>>(), ["u-a"]);
        assert_eq!(names(&cache, "team", "a", "u-a"), ["a-1", "a-2"]);
    }

    #[test]
    fn the_owner_index_finds_exactly_what_a_resource_owns_through_changes_and_relists() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (cache, mut writer) = CacheWriter::<CachedMeta<Service>>::new();
        take(&mut writer, Init);
        take(
            &mut writer,
            InitApply(service("team", "a-0", "a", Some("u-a"))),
        );
        take(&mut writer, InitDone);
        take(&mut writer, Apply(service("team", "a-1", "a", Some("u-a"))));
        take(&mut writer, Apply(service("team", "b-0", "b", Some("u-b"))));
        // A label alone is not ownership, nor is an owner reference from another namespace
        // whose name is taken in this one by another resource's object.
        take(&mut writer, Apply(service("team", "a-stray", "a", None)));
        take(
            &mut writer,
            Apply(service("other", "b-0", "a", Some("u-a"))),
        );
        assert_eq!(names(&cache, "team", "a", "u-a"), ["a-0", "a-1"]);
        assert_eq!(names(&cache, "team", "b", "u-b"), ["b-0"]);
        assert_eq!(names(&cache, "other", "a", "u-a"), ["b-0"]);
        // Labelled for another deployment: not found under this one's name.
        assert!(names(&cache, "team", "b", "u-a").is_empty());

        // Deleted, and orphaned (its owner reference removed): neither is found any more.
        take(
            &mut writer,
            Delete(service("team", "a-0", "a", Some("u-a"))),
        );
        take(&mut writer, Apply(service("team", "a-1", "a", None)));
        assert!(names(&cache, "team", "a", "u-a").is_empty());

        // An object whose owner changes is found under its new owner only.
        take(&mut writer, Apply(service("team", "a-1", "a", Some("u-b"))));
        assert_eq!(names(&cache, "team", "a", "u-b"), ["a-1"]);
        assert!(names(&cache, "team", "a", "u-a").is_empty());
        take(&mut writer, Apply(service("team", "a-1", "a", None)));
        assert!(cache.get("team", "a-1").is_some() && cache.get("other", "a-1").is_none());

        // A relist replaces the index whole: what the list lacks is gone, what it has is found.
        take(&mut writer, Init);
        take(
            &mut writer,
            InitApply(service("team", "a-2", "a", Some("u-a"))),
        );
        assert_eq!(
            names(&cache, "team", "b", "u-b"),
            ["b-0"],
            "the old view is served until the list is in"
        );
        take(&mut writer, InitDone);
        assert_eq!(names(&cache, "team", "a", "u-a"), ["a-2"]);
        assert!(names(&cache, "team", "b", "u-b").is_empty());
        assert!(names(&cache, "other", "a", "u-a").is_empty());
        assert_eq!(
            cache.read().by_owner.len(),
            1,
            "owners with nothing left are dropped"
        );
    }

    #[tokio::test]
    async fn a_relist_of_one_watched_namespace_leaves_the_others_in_the_cache() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let (cache, writer) = CacheWriter::<CachedMeta<Service>>::new();
        let mut w = writer.per_namespace(&[Some("a"), Some("b")]);
        let list = |w: &mut CacheWriter<_>, objects: Vec<Incoming<CachedMeta<Service>>>| {
            take(w, Init);
            for o in objects {
                take(w, InitApply(o));
            }
            take(w, InitDone);
        };
        list(&mut w[0], vec![service("a", "a-0", "x", Some("u-a"))]);
        let filled = || cache.ready.borrow().to_owned();
        assert!(!filled(), "not filled before every namespace is listed");
        list(&mut w[1], vec![service("b", "b-0", "y", Some("u-b"))]);
        assert!(filled());
        take(&mut w[0], Apply(service("a", "a-1", "x", Some("u-a"))));
        // b's watch expires and lists again: a's objects stay.
        list(&mut w[1], vec![service("b", "b-1", "y", Some("u-b"))]);
        assert_eq!(names(&cache, "a", "x", "u-a"), ["a-0", "a-1"]);
        assert_eq!(names(&cache, "b", "y", "u-b"), ["b-1"]);
        list(&mut w[0], Vec::new());
        assert!(names(&cache, "a", "x", "u-a").is_empty());
        assert_eq!(names(&cache, "b", "y", "u-b"), ["b-1"]);
        assert_eq!(cache.len(), 1);
        // A watch of every namespace is the writer itself.
        let (_, all) = CacheWriter::<CachedMeta<Service>>::new();
        assert_eq!(all.per_namespace(&[None]).len(), 1);
    }

    #[test]
    fn a_write_is_looked_for_in_the_watch_of_its_own_namespace() {
        let (caches, _writers) = Caches::new();
        let written = caches.written.clone();
        let pods = written.of("Pod").expect("pods are cached");
        let (a, b) = (pods.watch(Some("a")), pods.watch(Some("b")));
        let pod = |ns: &str, name: &str, rv: &str| {
            let mut p = owned_by(labelled_pod(name, None, rv), "u1");
            p.metadata.namespace = Some(ns.into());
            p
        };
        written.note("Pod", &pod("a", "x", "20").metadata);
        // b's watch is further on; a's has not delivered the write yet.
        b.stored(&watcher::Event::Apply(pod("b", "y", "30")));
        assert_eq!(
            written.pending("u1"),
            [("Pod", 20)],
            "b's progress says nothing of a"
        );
        a.stored(&watcher::Event::Apply(pod("a", "x", "20")));
        assert!(written.pending("u1").is_empty());
        // In a namespace with no watch of its own, the watch of every namespace tells.
        written.note("Pod", &pod("c", "z", "40").metadata);
        assert_eq!(written.pending("u1"), [("Pod", 40)]);
        pods.stored(&watcher::Event::Apply(pod("c", "z", "41")));
        assert!(written.pending("u1").is_empty());
    }
}
