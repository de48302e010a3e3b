//! The one place a pass writes: carries a gate's [`Act`]s out in order, stopping at the first
//! that fails (housekeeping acts excepted: their failure is logged).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource};

use crate::api::{DeepInferRole, DeepInferRoleStatus};
use crate::controller::act::Act;
use crate::controller::apply;
use crate::controller::error::Error;
use crate::controller::text::truncate;

/// Most acts of one batch a pass sends at once.
pub const BATCH: usize = 8;

/// Carries out the acts of one deployment's pass.
pub struct Executor<'c> {
    ctx: &'c crate::controller::context::Context,
    client: &'c Client,
    recorder: &'c crate::controller::events::Recorder,
    namespace: String,
    reference: ObjectReference,
}

impl<'c> Executor<'c> {
    /// An executor writing in the deployment's namespace, publishing events about it.
    pub fn new<K: Resource<DynamicType = ()>>(
        ctx: &'c crate::controller::context::Context,
        deployment: &K,
    ) -> Self {
        let meta = deployment.meta();
        Self {
            ctx,
            client: &ctx.client,
            recorder: &ctx.recorder,
            namespace: meta.namespace.clone().unwrap_or_default(),
            reference: deployment.object_ref(&()),
        }
    }

    /// Runs `acts` in order; stops at the first act that fails and is not housekeeping, and
    /// returns its error. Returns the number of acts that wrote. No act goes out once this
    /// instance may no longer write (its leadership ran out): that is [`Error::NotLeading`].
    ///
    /// Acts that come one after another in the same [`Act::batch`] (the pods of a group, the
    /// ranks' Jobs of a run, `accepted` marks) go out together, at most [`BATCH`] at once, all
    /// but the last of the run; the last goes out after them (a run's Jobs are planned followers
    /// first, its leader last). A plan's order between different kinds (a PodGroup and a rank
    /// table before their pods, RBAC and ConfigMaps before the Jobs that use them) is kept.
    pub async fn run(&self, acts: &[Act<'_>]) -> Result<usize, Error> {
        let mut writes = 0;
        let mut start = 0;
        while start < acts.len() {
            let batch = acts[start].batch();
            let mut end = start + 1;
            while end < acts.len()
                && end - start < BATCH + 1
                && batch.is_some()
                && acts[end].batch() == batch
            {
                end += 1;
            }
            let (together, last) = acts[start..end].split_at(end - start - 1);
            for part in [together, last] {
                if part.is_empty() {
                    continue;
                }
                if !self.ctx.may_write() {
                    return Err(Error::NotLeading);
                }
                let results = futures::future::join_all(part.iter().map(|act| self.one(act))).await;
                for (act, result) in part.iter().zip(results) {
                    match result {
                        Ok(true) => writes += 1,
                        Ok(false) => {}
                        Err(e) if act.is_housekeeping() => {
                            tracing::warn!(act = %act.describe(), error = %e, "housekeeping failed; trying again later");
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            start = end;
        }
        Ok(writes)
    }

    async fn one(&self, act: &Act<'_>) -> Result<bool, Error> {
        let (client, ns) = (self.client, self.namespace.as_str());
        match act {
            Act::Create(object) => object.create(client, ns).await,
            Act::Apply(applied) => applied.apply(client, ns).await,
            Act::Ensure(object) => object.ensure(client, ns).await,
            Act::Delete(held) => held.delete(client, ns).await.map(|()| true),
            Act::Mark(mark) => {
                let api: Api<Pod> = Api::namespaced(client.clone(), ns);
                apply::set_accepted(&api, mark).await.map(|()| true)
            }
            Act::Annotate {
                configmap,
                annotations,
            } => {
                let patch = serde_json::json!({"metadata": {"annotations": annotations}});
                self.merge_patch::<ConfigMap>("annotate", configmap, &patch)
                    .await
            }
            Act::RoleStatus { name, status } => self.role_status(name, status).await,
            Act::Expire { job, ttl } => {
                let patch = serde_json::json!({"spec": {"ttlSecondsAfterFinished": ttl}});
                self.merge_patch::<Job>("expire", job, &patch).await
            }
            Act::UncachePods { done, read } => {
                self.ctx.caches.uncache_job_pods(done, read);
                Ok(false)
            }
            Act::DeleteEvidence(meta) => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                tracing::info!(configmap = ?meta.name, "deleting evidence beyond those kept");
                apply::delete_owned(&api, meta).await.map(|()| true)
            }
            Act::Warn {
                reason,
                action,
                note,
            } => {
                let event = Event {
                    type_: EventType::Warning,
                    reason: (*reason).into(),
                    note: Some(truncate(note, 900)),
                    action: (*action).into(),
                    secondary: None,
                };
                self.recorder
                    .publish(&event, &self.reference)
                    .await
                    .map(|()| true)
                    .map_err(Error::Kube)
            }
        }
    }

    /// [`Act::RoleStatus`]: the status applied server-side under the operator's field manager
    /// (the status is wholly the operator's); a DeepInferRole gone meanwhile is fine.
    async fn role_status(&self, name: &str, status: &DeepInferRoleStatus) -> Result<bool, Error> {
        let api: Api<DeepInferRole> = Api::namespaced(self.client.clone(), &self.namespace);
        let patch = serde_json::json!({
            "apiVersion": <DeepInferRole as k8s_openapi::Resource>::API_VERSION,
            "kind": <DeepInferRole as k8s_openapi::Resource>::KIND,
            "status": status,
        });
        let params = PatchParams::apply(apply::FIELD_MANAGER).force();
        match api.patch_status(name, &params, &Patch::Apply(&patch)).await {
            Ok(written) => {
                crate::controller::written::note_written(&written);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(Error::api(
                "apply status of",
                <DeepInferRole as k8s_openapi::Resource>::KIND,
                &format!("{}/{name}", self.namespace),
                e,
            )),
        }
    }

    /// A merge patch of a named object; one gone meanwhile is fine (nothing left to change).
    async fn merge_patch<K>(
        &self,
        verb: &'static str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<bool, Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + k8s_openapi::Resource
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(Error::api(
                verb,
                <K as k8s_openapi::Resource>::KIND,
                &format!("{}/{name}", self.namespace),
                e,
            )),
        }
    }
}
