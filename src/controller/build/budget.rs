//! A PodDisruptionBudget per role.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::{labels, Component, RoleSpec};
use crate::controller::validated::ValidatedDeployment;

use super::{group_shape, owned_meta, role_service_name, stamp};

/// Name of a role's PodDisruptionBudget (the same as its Service).
pub fn budget_name(did: &str, role: &str) -> String {
    role_service_name(did, role)
}

/// A PodDisruptionBudget per role over its worker pods: a voluntary eviction (a node drain) may
/// take down at most `rollout.maxUnavailable` pods, hence at most that many groups (one evicted
/// rank stops its whole group). With the default 0, drains wait until the pods are moved by a
/// rollout or deleted by hand. Stated as `minAvailable` = pods of `replicas` groups less
/// `maxUnavailable`: a `maxUnavailable` budget would need a scale subresource on the owner.
pub fn budget(
    did: &ValidatedDeployment,
    role: &RoleSpec,
) -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
    use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
    let selector = crate::api::role_pod_labels(&did.name_any(), &role.name);
    let extra = BTreeMap::from([
        (labels::ROLE.to_string(), role.name.clone()),
        Component::DisruptionBudget.label(),
    ]);
    stamp(PodDisruptionBudget {
        metadata: owned_meta(did, budget_name(&did.name_any(), &role.name), extra),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(
                role.replicas
                    .max(0)
                    .saturating_mul(group_shape(&did.spec, role).pods)
                    .saturating_sub(role.rollout.max_unavailable.max(0))
                    .max(0),
            )),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            // A broken pod may always be evicted: it serves nothing.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}
