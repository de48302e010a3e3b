//! The `DeepInferRole` of a role with `scaling: external`: its scale target.

use super::*;
use crate::api::{role_object_name, DeepInferRole, DeepInferRoleSpec};

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
