//! What a pass reads of a worker pod: its readiness and its `deepinfer.io/accepted` condition.

use k8s_openapi::api::core::v1::Pod;

use crate::api::ACCEPTED_POD_CONDITION;

/// The `deepinfer.io/accepted` condition status of a pod, if set.
pub fn accepted_condition(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ACCEPTED_POD_CONDITION)
        .map(|c| c.status.as_str())
}

/// Whether the pod's `deepinfer.io/accepted` condition is True.
pub fn is_accepted(pod: &Pod) -> bool {
    accepted_condition(pod) == Some("True")
}

/// Whether the pod's Ready condition is True (every container ready, every readiness gate met).
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether every container of the pod is ready (its probes pass), readiness gates aside: an
/// engine that serves, whether or not the pod is admitted to traffic. Read from the containers'
/// statuses, which a cached pod keeps (its `ContainersReady` condition it does not).
pub fn containers_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.ready))
}
