//! The `DeepInferRole` of a role with `scaling: external`: its scale target.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{labels, role_object_name, Component, DeepInferRole, DeepInferRoleSpec, RoleSpec};
use crate::controller::validated::ValidatedDeployment;

use super::owned_meta;

/// The `DeepInferRole` of `role`, its `spec.replicas` seeded from the role's `replicas` (it is
/// created once: from then on the autoscaler owns that field).
pub fn scaled_role(did: &ValidatedDeployment, role: &RoleSpec) -> DeepInferRole {
    let extra = BTreeMap::from([
        (labels::ROLE.to_string(), role.name.clone()),
        Component::Scaling.label(),
    ]);
    DeepInferRole::new(
        owned_meta(did, role_object_name(&did.name_any(), &role.name), extra),
        DeepInferRoleSpec {
            replicas: role.replicas,
        },
    )
}
