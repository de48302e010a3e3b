//! Observe stage: one read of everything a reconcile pass needs, into a plain [`Observed`] value
//! that the decide functions take. Only objects this resource owns are kept (by owner reference,
//! never by label alone); pods of its Jobs are kept with the Jobs.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{Context, Error};
use crate::api::{labels, DeepInferDeployment};

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
    /// The checkpoint's PersistentVolumeClaim: `None` when the spec names none, `Some(None)`
    /// when it does not exist, else its `status.phase` (`Pending`, `Bound`, `Lost`).
    pub claim_phase: Option<Option<String>>,
    /// The ConfigMap named by `spec.acceptance.promptsFrom`, if set and present.
    pub prompts: Option<ConfigMap>,
    /// HCCL rank table ConfigMaps of serving groups (Ascend).
    pub rank_tables: Vec<ConfigMap>,
    /// The ConfigMap listing the prefill / vision endpoints for decode groups.
    pub peer_endpoints: Vec<ConfigMap>,
}

fn owned_by(
    meta_owner: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    uid: &str,
) -> bool {
    meta_owner.iter().any(|o| o.uid == uid)
}

/// Lists one kind by the deployment label and keeps the objects owned by `uid`.
async fn list_owned_by<K>(
    ctx: &Context,
    ns: &str,
    deployment: &str,
    uid: &str,
) -> Result<Vec<K>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    list_owned_with(ctx, ns, deployment, uid, None).await
}

/// As [`list_owned_by`], narrowed to the objects whose component label is `component` (so that
/// no other object of the kind, e.g. large evidence ConfigMaps, is read).
async fn list_owned_with<K>(
    ctx: &Context,
    ns: &str,
    deployment: &str,
    uid: &str,
    component: Option<&str>,
) -> Result<Vec<K>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let mut selector = format!("{}={deployment}", labels::DEPLOYMENT);
    if let Some(component) = component {
        selector.push_str(&format!(",{}={component}", labels::COMPONENT));
    }
    let lp = ListParams::default().labels(&selector);
    let items = api
        .list(&lp)
        .await
        .map_err(|e| {
            Error::api(
                "list",
                <K as k8s_openapi::Resource>::KIND,
                &format!("{ns}/-l {selector}"),
                e,
            )
        })?
        .items;
    Ok(items
        .into_iter()
        .filter(|o| owned_by(o.owner_references(), uid))
        .collect())
}

async fn get_opt<K>(ctx: &Context, ns: &str, name: &str) -> Result<Option<K>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    api.get_opt(name).await.map_err(|e| {
        Error::api(
            "get",
            <K as k8s_openapi::Resource>::KIND,
            &format!("{ns}/{name}"),
            e,
        )
    })
}

/// Reads every object the pass needs; PodGroups only when groups are PodGroups here.
pub async fn observe(
    ctx: &Context,
    did: &DeepInferDeployment,
    pod_groups: bool,
) -> Result<Observed, Error> {
    let ns = did
        .namespace()
        .ok_or_else(|| Error::NoNamespace(did.name_any()))?;
    let name = did.name_any();
    let uid = did.uid().unwrap_or_default();
    let jobs: Vec<Job> = list_owned_by(ctx, &ns, &name, &uid).await?;
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let lp = ListParams::default().labels(&format!("{}={name}", labels::DEPLOYMENT));
    let pods = pods_api
        .list(&lp)
        .await
        .map_err(|e| {
            Error::api(
                "list",
                "Pod",
                &format!("{ns}/-l {}={name}", labels::DEPLOYMENT),
                e,
            )
        })?
        .items;
    let job_uids: Vec<String> = jobs.iter().filter_map(|j| j.uid()).collect();
    let mut workers = Vec::new();
    let mut job_pods = Vec::new();
    for pod in pods {
        if owned_by(pod.owner_references(), &uid) {
            if pod.labels().get(labels::COMPONENT).map(String::as_str) == Some("worker") {
                workers.push(pod);
            }
        } else if job_uids.iter().any(|j| owned_by(pod.owner_references(), j)) {
            job_pods.push(pod);
        }
    }
    let claim_phase = match crate::controller::build::checkpoint_location(&did.spec) {
        Some((claim, _)) => Some(
            get_opt::<PersistentVolumeClaim>(ctx, &ns, &claim)
                .await?
                .map(|c| c.status.and_then(|s| s.phase).unwrap_or_default()),
        ),
        None => None,
    };
    let prompts = match &did.spec.acceptance.prompts_from {
        Some(from) => get_opt::<ConfigMap>(ctx, &ns, &from.name).await?,
        None => None,
    };
    Ok(Observed {
        claim_phase,
        prompts,
        workers,
        jobs,
        job_pods,
        services: list_owned_by(ctx, &ns, &name, &uid).await?,
        budgets: list_owned_by(ctx, &ns, &name, &uid).await?,
        revisions: list_owned_by(ctx, &ns, &name, &uid).await?,
        claim_templates: if did.spec.accelerator.device_class_name.is_some()
            || did.spec.accelerator.domain_device_class_name.is_some()
        {
            list_owned_by(ctx, &ns, &name, &uid).await?
        } else {
            Vec::new()
        },
        rank_tables: {
            let component = Some(crate::controller::build::RANK_TABLE_COMPONENT);
            list_owned_with(ctx, &ns, &name, &uid, component).await?
        },
        // Only a spec whose decode role has upstream roles has (or may delete) the file.
        peer_endpoints: if crate::controller::build::decode_has_upstreams(&did.spec) {
            let component = Some(crate::controller::build::PEER_ENDPOINTS_COMPONENT);
            list_owned_with(ctx, &ns, &name, &uid, component).await?
        } else {
            Vec::new()
        },
        pod_groups: if pod_groups {
            list_owned_by(ctx, &ns, &name, &uid).await?
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

    /// Pods of the Job of this name.
    pub fn pods_of_job(&self, name: &str) -> Vec<&Pod> {
        self.job_pods
            .iter()
            .filter(|p| p.labels().get("job-name").map(String::as_str) == Some(name))
            .collect()
    }
}
