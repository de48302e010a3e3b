//! Act stage: bring the cluster to the desired objects with server-side apply under one field
//! manager, skipping applies that would change nothing, deleting what is no longer desired, and
//! setting the pods' `deepinfer.io/accepted` condition. Every API error names the verb, the kind
//! and the object.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::ACCEPTED_POD_CONDITION;
use crate::controller::build::applied_hash;
use crate::controller::error::Error;
use crate::controller::gates::licence::entitlement::Mark;
use crate::controller::written::note_written;

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
        if applied_hash(existing).is_some()
            && applied_hash(existing) == applied_hash(desired)
            && !content_drifted(desired, existing)
        {
            return Ok(false);
        }
        return force_apply(api, desired).await;
    }
    match create_or_find(api, desired).await? {
        Created::Made => Ok(true),
        // Ours: read only because the create was refused (an object no watch caches, or the
        // cache had not caught up).
        Created::Ours(found) => apply_over(api, found.as_ref(), desired).await,
    }
}

/// Applies `desired` over `found`, one of ours as read, unless it holds what is applied
/// ([`holds`]). Returns whether a write was made.
async fn apply_over<K>(api: &Api<K>, found: Option<&K>, desired: &K) -> Result<bool, Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    if found.is_some_and(|f| holds(f, desired)) {
        return Ok(false);
    }
    force_apply(api, desired).await
}

/// Brings about `desired`, an object no watch caches that an earlier pass most likely made (the
/// judge's ServiceAccount, Role and RoleBinding of a deployment judged before): reads it first
/// and writes nothing when it holds what is applied ([`holds`]), applies over it when it is ours
/// and differs, and creates it when it is absent (as [`apply_if_changed`] does). One of that name
/// that another owner controls is the [`Error::NameConflict`] naming who, left as it is. Returns
/// whether a write was made.
pub async fn ensure<K>(api: &Api<K>, desired: &K) -> Result<bool, Error>
where
    K: Resource + k8s_openapi::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = desired.name_any();
    let found = api
        .get_opt(&name)
        .await
        .map_err(|e| Error::api("get", <K as k8s_openapi::Resource>::KIND, &name, e))?;
    match found {
        None => apply_if_changed(api, desired, None).await,
        Some(found) => match conflict(&found, desired) {
            Some(e) => Err(e),
            None => apply_over(api, Some(&found), desired).await,
        },
    }
}

/// Whether `found` carries the applied hash of `desired` and, beside its metadata, exactly the
/// fields `desired` sets, as `desired` sets them: an edit that kept the hash (a subject added
/// to a RoleBinding, a rule to a Role) is applied over.
fn holds<K: Resource + Serialize>(found: &K, desired: &K) -> bool {
    if applied_hash(found).is_none() || applied_hash(found) != applied_hash(desired) {
        return false;
    }
    let body = |o: &K| -> Option<serde_json::Map<String, serde_json::Value>> {
        let serde_json::Value::Object(mut fields) = serde_json::to_value(o).ok()? else {
            return None;
        };
        for meta in ["metadata", "apiVersion", "kind"] {
            fields.remove(meta);
        }
        Some(fields)
    };
    body(found).is_some_and(|f| Some(f) == body(desired))
}

/// Whether `existing` (a cached ConfigMap, which carries the hash of its content as observed)
/// holds other data than `desired`: someone edited it and kept the applied hash. Objects of
/// other kinds carry no such hash and never drift here.
pub fn content_drifted<K: Resource + Serialize>(desired: &K, existing: &K) -> bool {
    use crate::controller::cached::{content_hash, OBSERVED_CONTENT_ANNOTATION};
    let Some(seen) = existing
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(OBSERVED_CONTENT_ANNOTATION))
    else {
        return false;
    };
    let data: std::collections::BTreeMap<String, String> = serde_json::to_value(desired)
        .ok()
        .and_then(|v| serde_json::from_value(v.get("data")?.clone()).ok())
        .unwrap_or_default();
    format!("{:016x}", content_hash(&data)) != *seen
}

/// `None` when `found` has the same controller owner as `desired` (this resource controls it),
/// else the [`Error::NameConflict`] naming who does: such an object is never read further,
/// changed or deleted.
fn conflict<K>(found: &K, desired: &K) -> Option<Error>
where
    K: Resource + k8s_openapi::Resource,
{
    if controller_uid(found).is_some() && controller_uid(found) == controller_uid(desired) {
        return None;
    }
    Some(Error::NameConflict {
        kind: <K as k8s_openapi::Resource>::KIND.to_string(),
        name: format!(
            "{}/{}",
            found.meta().namespace.clone().unwrap_or_default(),
            desired.name_any()
        ),
        owner: controller_of(found),
    })
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
    Ok(matches!(create_or_find(api, desired).await?, Created::Made))
}

/// What a create found.
enum Created<K> {
    /// It made the object.
    Made,
    /// One of that name exists that this resource controls, as read (`None`: deleted meanwhile,
    /// the next pass creates it).
    Ours(Option<K>),
}

/// Creates `desired`; when one of that name exists, reads it: ours, or the
/// [`Error::NameConflict`] naming who controls it.
async fn create_or_find<K>(api: &Api<K>, desired: &K) -> Result<Created<K>, Error>
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
            Ok(Created::Made)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let found = api
                .get_opt(&name)
                .await
                .map_err(|e| Error::api("get", kind, &name, e))?;
            match found {
                None => Ok(Created::Ours(None)),
                Some(found) => match conflict(&found, desired) {
                    Some(e) => Err(e),
                    None => Ok(Created::Ours(Some(found))),
                },
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

/// Sets the `deepinfer.io/accepted` condition of one pod (True grants service, False withdraws
/// it: the pod leaves every Service's endpoints at once).
pub async fn set_accepted(api: &Api<Pod>, mark: &Mark) -> Result<(), Error> {
    let patch = serde_json::json!({
        // A precondition: the API server refuses a patch whose UID is not the pod's.
        "metadata": {"uid": mark.uid},
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::build::APPLIED_HASH_ANNOTATION;
    use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};

    fn binding(hash: &str, subjects: &[&str]) -> RoleBinding {
        let mut b = RoleBinding {
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: "d-acceptance".into(),
            },
            subjects: Some(
                subjects
                    .iter()
                    .map(|name| Subject {
                        kind: "ServiceAccount".into(),
                        name: (*name).into(),
                        ..Subject::default()
                    })
                    .collect(),
            ),
            ..RoleBinding::default()
        };
        b.metadata.name = Some("d-acceptance".into());
        b.metadata.annotations =
            Some([(APPLIED_HASH_ANNOTATION.to_string(), hash.to_string())].into());
        b
    }

    #[test]
    fn an_existing_object_is_kept_only_when_it_holds_what_is_applied() {
        let desired = binding("h1", &["d-acceptance"]);
        let mut found = desired.clone();
        found.metadata.uid = Some("u".into());
        found.metadata.resource_version = Some("7".into());
        assert!(holds(&found, &desired), "as applied: no write");
        assert!(
            !holds(&binding("h1", &["d-acceptance", "intruder"]), &desired),
            "a subject added under the same hash is applied over"
        );
        assert!(
            !holds(&binding("h0", &["d-acceptance"]), &desired),
            "another hash"
        );
        let mut bare = desired.clone();
        bare.metadata.annotations = None;
        assert!(!holds(&bare, &desired), "no hash");
    }
}
