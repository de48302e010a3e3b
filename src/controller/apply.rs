//! Act stage: bring the cluster to the desired objects with server-side apply under one field
//! manager, skipping applies that would change nothing, deleting what is no longer desired, and
//! setting the pods' `deepinfer.io/accepted` condition. Every API error names the verb, the kind
//! and the object.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::build::applied_hash;
use super::decide::entitlement::Mark;
use super::error::Error;
use super::observe::note_written;
use crate::api::ACCEPTED_POD_CONDITION;

/// The one field manager the operator applies with.
pub const FIELD_MANAGER: &str = "deepinfer-operator";

/// The UID of the controller owner an object names, if any.
fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Who controls `obj`, for a conflict's message.
fn controller_of<K: Resource>(obj: &K) -> String {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map_or("no controller".to_string(), |o| {
            format!("controlled by {} {}", o.kind, o.name)
        })
}

/// Brings `desired` about. `existing` is the object as the cache holds it, which it holds only
/// when this resource controls it: then `desired` is server-side applied with force under the
/// operator's field manager, unless `existing` already carries its applied hash. An object the
/// cache does not hold is created, never force-applied: if one of that name exists, it is applied
/// only when this resource controls it (the cache had not caught up), and is otherwise a
/// [`Error::NameConflict`], left as it is. Returns whether a write was made.
pub async fn apply_if_changed<K>(
    api: &Api<K>,
    desired: &K,
    existing: Option<&K>,
) -> Result<bool, Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if let Some(existing) = existing {
        if applied_hash(existing).is_some() && applied_hash(existing) == applied_hash(desired) {
            return Ok(false);
        }
        return force_apply(api, desired).await;
    }
    if create_once(api, desired).await? {
        return Ok(true);
    }
    // Ours, and the cache had not caught up: apply as for a cached object.
    force_apply(api, desired).await
}

/// Server-side applies `desired` with force under the operator's field manager.
async fn force_apply<K>(api: &Api<K>, desired: &K) -> Result<bool, Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(&desired.name_any(), &pp, &Patch::Apply(desired))
        .await
        .map_err(|e| {
            Error::api(
                "apply",
                <K as k8s_openapi::Resource>::KIND,
                &desired.name_any(),
                e,
            )
        })?;
    note_written(&written);
    Ok(true)
}

/// Creates an object that must not be changed once it exists (Jobs, evidence): create without
/// force. Returns `false` when an object of that name exists that this resource controls (the
/// same controller owner as `desired`), and [`Error::NameConflict`] when another owner (or none)
/// controls it: it is never read, changed or deleted.
pub async fn create_once<K>(api: &Api<K>, desired: &K) -> Result<bool, Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = desired.name_any();
    let kind = <K as k8s_openapi::Resource>::KIND;
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
        Ok(created) => {
            note_written(&created);
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let found = api
                .get_opt(&name)
                .await
                .map_err(|e| Error::api("get", kind, &name, e))?;
            match found {
                Some(found)
                    if controller_uid(&found).is_some()
                        && controller_uid(&found) == controller_uid(desired) =>
                {
                    Ok(false)
                }
                // Deleted meanwhile: the next pass creates it.
                None => Ok(false),
                Some(found) => Err(Error::NameConflict {
                    kind: kind.to_string(),
                    name: format!(
                        "{}/{name}",
                        found.meta().namespace.clone().unwrap_or_default()
                    ),
                    owner: controller_of(&found),
                }),
            }
        }
        Err(e) => Err(Error::api("create", kind, &name, e)),
    }
}

/// Deletes an object this resource owns (as observed): the delete carries the object's UID as a
/// precondition, so an object of the same name made since by anyone else is never deleted. An
/// object already gone (or replaced) is fine.
pub async fn delete_observed<K>(api: &Api<K>, observed: &K) -> Result<(), Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    delete_owned(api, observed.meta()).await
}

/// As [`delete_observed`], from the object's metadata (a metadata-only listing).
pub async fn delete_owned<K>(
    api: &Api<K>,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Result<(), Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut dp = DeleteParams::background();
    dp.preconditions = meta.uid.clone().map(|uid| kube::api::Preconditions {
        uid: Some(uid),
        resource_version: None,
    });
    delete_with(api, meta.name.as_deref().unwrap_or_default(), &dp).await
}

async fn delete_with<K>(api: &Api<K>, name: &str, dp: &DeleteParams) -> Result<(), Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, dp).await {
        // Still there (being deleted): its new state; gone at once: the watch's delete event.
        Ok(either) => {
            if let Some(deleting) = either.left() {
                note_written(&deleting);
            }
            Ok(())
        }
        // Gone, or (precondition failed) replaced by an object that is not the one observed.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(Error::api(
            "delete",
            <K as k8s_openapi::Resource>::KIND,
            name,
            e,
        )),
    }
}

/// Applies objects of one kind and deletes the `existing` ones no longer desired. Returns the
/// number of writes.
pub async fn apply_all<K>(api: &Api<K>, desired: &[K], existing: &[K]) -> Result<usize, Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut writes = 0;
    let by_name: BTreeMap<String, &K> = existing.iter().map(|s| (s.name_any(), s)).collect();
    for svc in desired {
        if apply_if_changed(api, svc, by_name.get(&svc.name_any()).copied()).await? {
            writes += 1;
        }
    }
    for svc in unwanted(desired, existing) {
        delete_observed(api, svc).await?;
        writes += 1;
    }
    Ok(writes)
}

/// Deletes the objects named `names` that `existing` (the cache's view) holds. A name the cache
/// does not hold is gone already (or was never made), and one being deleted waits on its
/// finalizers: neither is sent again.
pub async fn delete_named<K>(api: &Api<K>, existing: &[K], names: &[String]) -> Result<(), Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    for obj in deletable(existing, |name| names.iter().any(|n| n == name)) {
        delete_observed(api, obj).await?;
    }
    Ok(())
}

/// The `existing` objects to delete: those not `desired`.
fn unwanted<'a, K: Resource>(desired: &[K], existing: &'a [K]) -> Vec<&'a K> {
    let wanted: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
    deletable(existing, |name| !wanted.contains(name))
}

/// The `existing` objects whose name is `chosen`, but for those already being deleted (their
/// delete waits on a finalizer; sending it again writes nothing new).
fn deletable<K: Resource>(existing: &[K], chosen: impl Fn(&str) -> bool) -> Vec<&K> {
    existing
        .iter()
        .filter(|o| o.meta().deletion_timestamp.is_none() && chosen(&o.name_any()))
        .collect()
}

/// Sets the `deepinfer.io/accepted` condition of one pod (True grants service, False withdraws
/// it: the pod leaves every Service's endpoints at once).
pub async fn set_accepted(api: &Api<Pod>, mark: &Mark) -> Result<(), Error> {
    let patch = serde_json::json!({
        "status": {"conditions": [{
            "type": ACCEPTED_POD_CONDITION,
            "status": if mark.accepted { "True" } else { "False" },
            "reason": mark.reason,
            "message": mark.message,
            "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
        }]}
    });
    match api
        .patch_status(&mark.pod, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(pod) => {
            note_written(&pod);
            Ok(())
        }
        // Gone meanwhile: nothing left to take out of service.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::api("patch status of", "Pod", &mark.pod, e)),
    }
}

/// Whether the pod's `deepinfer.io/accepted` condition is True.
pub fn is_accepted(pod: &Pod) -> bool {
    super::decide::entitlement::accepted_condition(pod) == Some("True")
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
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn group(name: &str, deleting: bool) -> PodGroup {
        PodGroup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: deleting
                    .then(|| Time(k8s_openapi::jiff::Timestamp::from_second(1).expect("time"))),
                ..ObjectMeta::default()
            },
            ..PodGroup::default()
        }
    }

    #[test]
    fn objects_no_longer_desired_are_deleted_once_not_again_while_their_delete_is_underway() {
        let desired = [group("kept", false)];
        let existing = [
            group("kept", false),
            group("stale", false),
            group("deleting", true),
        ];
        let names: Vec<String> = unwanted(&desired, &existing)
            .into_iter()
            .map(ResourceExt::name_any)
            .collect();
        assert_eq!(names, ["stale"]);
    }

    #[test]
    fn objects_deleted_by_name_are_only_those_the_cache_holds_and_not_already_being_deleted() {
        let existing = [
            group("run-0", false),
            group("run-1", true),
            group("other", false),
        ];
        let names = ["run-0", "run-1", "run-2"].map(String::from);
        let chosen: Vec<String> = deletable(&existing, |n| names.iter().any(|m| m == n))
            .into_iter()
            .map(ResourceExt::name_any)
            .collect();
        // run-1's delete is underway, run-2 is gone (a delete would meet 404), other is not named.
        assert_eq!(chosen, ["run-0"]);
    }
}
