//! Apply stage: bring the cluster to the desired objects with server-side apply under one field
//! manager, skipping applies that would change nothing, deleting what is no longer desired, and
//! replacing serving groups as a whole (gang semantics).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::build::applied_hash;
use super::Error;
use crate::api::{labels, ACCEPTED_POD_CONDITION};

/// The one field manager the operator applies with.
pub const FIELD_MANAGER: &str = "deepinfer-operator";

/// What to do with worker pods.
#[derive(Debug, Clone, PartialEq)]
pub enum PodAction {
    /// Create this pod.
    Create(Box<Pod>),
    /// Delete the pod of this name.
    Delete(String),
}

fn group_key(pod: &Pod) -> Option<(String, String)> {
    let l = pod.metadata.labels.as_ref()?;
    Some((l.get(labels::ROLE)?.clone(), l.get(labels::GROUP)?.clone()))
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed" | "Succeeded")
    )
}

/// Plans pod actions. A group is kept only when every desired rank exists, none has ended,
/// none is being deleted, and each carries the desired applied hash; otherwise every pod left
/// in the group is deleted, and the group is created anew once it is empty.
pub fn plan_pods(desired: &[Pod], existing: &[Pod]) -> Vec<PodAction> {
    let mut actions = Vec::new();
    let desired_names: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
    for pod in existing {
        if !desired_names.contains(&pod.name_any()) && !terminating(pod) {
            actions.push(PodAction::Delete(pod.name_any()));
        }
    }
    let mut groups: BTreeMap<(String, String), Vec<&Pod>> = BTreeMap::new();
    for pod in desired {
        if let Some(key) = group_key(pod) {
            groups.entry(key).or_default().push(pod);
        }
    }
    let by_name: BTreeMap<String, &Pod> = existing.iter().map(|p| (p.name_any(), p)).collect();
    for members in groups.values() {
        let present: Vec<(&Pod, &Pod)> = members
            .iter()
            .filter_map(|want| by_name.get(&want.name_any()).map(|have| (*want, *have)))
            .collect();
        if present.is_empty() {
            actions.extend(
                members
                    .iter()
                    .map(|p| PodAction::Create(Box::new((*p).clone()))),
            );
            continue;
        }
        let healthy = present.len() == members.len()
            && present.iter().all(|(want, have)| {
                !terminating(have)
                    && !terminated(have)
                    && applied_hash(*want) == applied_hash(*have)
            });
        if !healthy {
            actions.extend(
                present
                    .iter()
                    .filter(|(_, have)| !terminating(have))
                    .map(|(_, have)| PodAction::Delete(have.name_any())),
            );
        }
    }
    actions
}

/// Lists the objects of one deployment (by its label) in its namespace.
pub async fn list_owned<K>(api: &Api<K>, deployment: &str) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let lp = ListParams::default().labels(&format!("{}={deployment}", labels::DEPLOYMENT));
    Ok(api.list(&lp).await.map_err(Error::Kube)?.items)
}

/// Server-side applies `desired` unless `existing` already carries its applied hash.
/// Returns whether a write was made.
pub async fn apply_if_changed<K>(
    api: &Api<K>,
    desired: &K,
    existing: Option<&K>,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if existing
        .is_some_and(|e| applied_hash(e).is_some() && applied_hash(e) == applied_hash(desired))
    {
        return Ok(false);
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&desired.name_any(), &pp, &Patch::Apply(desired))
        .await
        .map_err(Error::Kube)?;
    Ok(true)
}

/// Creates an object that must not be changed once it exists (Jobs): create, tolerate "exists".
pub async fn create_once<K>(api: &Api<K>, desired: &K) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    match api
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            },
            desired,
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// Deletes by name; an already-gone object is fine.
pub async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let dp = DeleteParams::background();
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// Applies the pod plan. Returns the number of writes.
pub async fn apply_pods(api: &Api<Pod>, actions: Vec<PodAction>) -> Result<usize, Error> {
    let n = actions.len();
    for action in actions {
        match action {
            PodAction::Create(pod) => {
                apply_if_changed(api, pod.as_ref(), None).await?;
            }
            PodAction::Delete(name) => delete_ignoring_missing(api, &name).await?,
        }
    }
    Ok(n)
}

/// Applies Services and deletes the ones no longer desired. Returns the number of writes.
pub async fn apply_services(
    api: &Api<Service>,
    desired: &[Service],
    existing: &[Service],
) -> Result<usize, Error> {
    let mut writes = 0;
    let by_name: BTreeMap<String, &Service> = existing.iter().map(|s| (s.name_any(), s)).collect();
    for svc in desired {
        if apply_if_changed(api, svc, by_name.get(&svc.name_any()).copied()).await? {
            writes += 1;
        }
    }
    let wanted: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
    for svc in existing {
        if !wanted.contains(&svc.name_any()) {
            delete_ignoring_missing(api, &svc.name_any()).await?;
            writes += 1;
        }
    }
    Ok(writes)
}

/// Whether the pod's `deepinfer.io/accepted` condition is True.
pub fn is_accepted(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == ACCEPTED_POD_CONDITION && c.status == "True")
        })
}

/// Sets `deepinfer.io/accepted=True` on pods of accepted revisions that lack it.
/// Returns the number of writes.
pub async fn mark_accepted(
    api: &Api<Pod>,
    pods: &[Pod],
    accepted_revision: &str,
    message: &str,
) -> Result<usize, Error> {
    let mut writes = 0;
    for pod in pods {
        let revision = pod.labels().get(labels::REVISION).map(String::as_str);
        if revision != Some(accepted_revision) || is_accepted(pod) || terminating(pod) {
            continue;
        }
        let patch = serde_json::json!({
            "status": {"conditions": [{
                "type": ACCEPTED_POD_CONDITION,
                "status": "True",
                "reason": "AcceptancePassed",
                "message": message,
                "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
            }]}
        });
        api.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
        .map_err(Error::Kube)?;
        writes += 1;
    }
    Ok(writes)
}

/// Whether every container of the pod is ready and the pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, group: &str, hash: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([
                    (labels::ROLE.to_string(), "worker".to_string()),
                    (labels::GROUP.to_string(), group.to_string()),
                ])),
                annotations: Some(BTreeMap::from([(
                    super::super::build::APPLIED_HASH_ANNOTATION.to_string(),
                    hash.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn names(actions: &[PodAction]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                PodAction::Create(p) => format!("+{}", p.name_any()),
                PodAction::Delete(n) => format!("-{n}"),
            })
            .collect()
    }

    #[test]
    fn empty_group_is_created_whole() {
        let desired = [pod("d-worker-0-0", "0", "h"), pod("d-worker-0-1", "0", "h")];
        assert_eq!(
            names(&plan_pods(&desired, &[])),
            ["+d-worker-0-0", "+d-worker-0-1"]
        );
    }

    #[test]
    fn converged_group_needs_nothing() {
        let desired = [pod("d-worker-0-0", "0", "h"), pod("d-worker-0-1", "0", "h")];
        assert!(plan_pods(&desired, &desired).is_empty());
    }

    #[test]
    fn a_missing_rank_replaces_the_whole_group() {
        let desired = [
            pod("d-worker-0-0", "0", "h"),
            pod("d-worker-0-1", "0", "h"),
            pod("d-worker-1-0", "1", "h"),
        ];
        let existing = [desired[0].clone(), desired[2].clone()];
        assert_eq!(names(&plan_pods(&desired, &existing)), ["-d-worker-0-0"]);
    }

    #[test]
    fn a_failed_rank_replaces_the_whole_group() {
        let desired = [pod("d-worker-0-0", "0", "h"), pod("d-worker-0-1", "0", "h")];
        let mut failed = desired[1].clone();
        failed.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..PodStatus::default()
        });
        assert_eq!(
            names(&plan_pods(&desired, &[desired[0].clone(), failed])),
            ["-d-worker-0-0", "-d-worker-0-1"]
        );
    }

    #[test]
    fn a_new_revision_replaces_pods_and_scale_down_deletes_groups() {
        let desired = [pod("d-worker-0-0", "0", "new")];
        let existing = [
            pod("d-worker-0-0", "0", "old"),
            pod("d-worker-1-0", "1", "old"),
        ];
        assert_eq!(
            names(&plan_pods(&desired, &existing)),
            ["-d-worker-1-0", "-d-worker-0-0"]
        );
    }
}
