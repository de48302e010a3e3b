//! The deployment the builders take: a resource whose name and spec passed validation
//! ([`crate::controller::gates::spec::validate::validate`] makes it), with what validation established kept
//! as plain fields.

use crate::api::DeepInferDeployment;

/// A resource whose name and spec passed every rule: the only input the builders take. What
/// validation established is kept as plain fields, so no builder re-checks an `Option`.
#[derive(Clone, Debug)]
pub struct ValidatedDeployment {
    resource: DeepInferDeployment,
    /// `metadata.namespace`.
    pub namespace: String,
    /// The PersistentVolumeClaim that holds (or receives) the checkpoint.
    pub claim: String,
    /// The checkpoint's directory inside the claim, without leading or trailing slashes.
    pub checkpoint_dir: String,
    /// Whether multi-pod groups are placed as PodGroups on this cluster (the operator's
    /// `--gang-scheduling`, resolved; set by the reconciler, false from validation).
    pub pod_groups: bool,
    /// The Secrets and ConfigMaps engine containers read, as (kind, name, uid, resourceVersion):
    /// their content is part of what serves, so a change of it is a new revision; empty from
    /// validation alone.
    pub served: Vec<(String, String, String, String)>,
}

impl std::ops::Deref for ValidatedDeployment {
    type Target = DeepInferDeployment;

    fn deref(&self) -> &DeepInferDeployment {
        &self.resource
    }
}

impl ValidatedDeployment {
    /// A resource validation passed, with where its checkpoint lives; its groups are not placed
    /// as PodGroups until [`Self::placed_as_pod_groups`] says so.
    pub(super) fn new(
        resource: DeepInferDeployment,
        namespace: String,
        claim: String,
        checkpoint_dir: String,
    ) -> Self {
        Self {
            resource,
            namespace,
            claim,
            checkpoint_dir,
            pod_groups: false,
            served: Vec::new(),
        }
    }

    /// The same resource, whose engines read the Secrets and ConfigMaps `served` (see
    /// [`crate::controller::gates::spec::references::served_content`]).
    pub fn reading(mut self, served: Vec<(String, String, String, String)>) -> Self {
        self.served = served;
        self
    }

    /// The same resource, its groups placed as PodGroups or not.
    pub fn placed_as_pod_groups(mut self, pod_groups: bool) -> Self {
        self.pod_groups = pod_groups;
        self
    }
}
