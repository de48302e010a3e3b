//! How a group's pods are placed all together: Kubernetes gang scheduling (one `PodGroup` per
//! group, `scheduling.k8s.io/v1beta1`) where the API server serves it, and everywhere a
//! watchdog that deletes a group left partly placed (some ranks bound, others unschedulable)
//! so that its devices go back to the pool, then retries it with backoff.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use crate::controller::gates::jobs::unschedulable_of;

/// API group and version of the native gang-scheduling API.
pub const POD_GROUP_API: &str = "scheduling.k8s.io/v1beta1";

/// `--gang-scheduling`: how groups are placed all-or-nothing.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GangScheduling {
    /// PodGroups when the API server serves `scheduling.k8s.io/v1beta1` PodGroups, else off.
    #[default]
    Auto,
    /// PodGroups always; the operator refuses to start where the API is not served.
    Native,
    /// No PodGroups: the scale-up-domain affinity and the partial-placement watchdog only.
    Off,
}

/// Whether the API server serves PodGroups (`scheduling.k8s.io/v1beta1`, resource `podgroups`).
pub async fn pod_groups_served(client: &Client) -> Result<bool, kube::Error> {
    served(client, POD_GROUP_API, "podgroups").await
}

/// Whether the API server serves `resource` in `group_version` (e.g. `resource.k8s.io/v1`).
pub async fn served(
    client: &Client,
    group_version: &str,
    resource: &str,
) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Resolves `mode` against what the API server serves: whether groups become PodGroups.
pub async fn resolve(client: &Client, mode: GangScheduling) -> anyhow::Result<bool> {
    match mode {
        GangScheduling::Off => Ok(false),
        GangScheduling::Auto => Ok(pod_groups_served(client).await?),
        GangScheduling::Native => {
            if pod_groups_served(client).await? {
                Ok(true)
            } else {
                anyhow::bail!(
                    "--gang-scheduling=native, but the API server does not serve {POD_GROUP_API} \
                     PodGroups: enable the GenericWorkload feature gate and the \
                     {POD_GROUP_API} API (kube-apiserver --runtime-config) on Kubernetes >= 1.37, \
                     or run with --gang-scheduling=auto or off"
                )
            }
        }
    }
}

/// A group some of whose ranks are bound to nodes while the others cannot be scheduled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialPlacement {
    /// Pods bound to a node.
    pub bound: usize,
    /// Pods of the group.
    pub total: usize,
    /// Since when the group has been partly placed: the latest bind of its bound pods.
    pub since: Timestamp,
    /// The scheduler's reason for an unbound pod.
    pub why: String,
}

impl PartialPlacement {
    /// How long the group has been partly placed at `now`.
    pub fn age(&self, now: Timestamp) -> Duration {
        now.duration_since(self.since)
            .try_into()
            .unwrap_or(Duration::ZERO)
    }
}

/// When the pod was bound (its `PodScheduled=True` transition), if it is.
fn bound_at(pod: &Pod) -> Option<Timestamp> {
    pod.spec.as_ref()?.node_name.as_ref()?;
    let scheduled = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    // A bound pod without the condition yet: count it from its creation.
    scheduled.or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Whether `members` (the live pods of one group, `expected` of them when complete) are partly
/// placed: at least one bound and at least one the scheduler found no room for.
pub fn partial_placement(members: &[&Pod], expected: usize) -> Option<PartialPlacement> {
    let bound: Vec<Timestamp> = members.iter().filter_map(|p| bound_at(p)).collect();
    let why = unschedulable_of(members.iter().copied())?;
    let since = bound.iter().max().copied()?;
    Some(PartialPlacement {
        bound: bound.len(),
        total: expected.max(members.len()),
        since,
        why,
    })
}

/// Wait before placing a role's groups again after the watchdog deleted `retries` partly placed
/// groups in a row: 15 s, doubling, at most 5 minutes.
pub fn retry_backoff(retries: i32) -> Duration {
    let exponent = u32::try_from(retries.saturating_sub(1).clamp(0, 5)).unwrap_or(0);
    Duration::from_secs(15 * 2u64.pow(exponent)).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(node: Option<&str>, scheduled: Option<(&str, Option<&str>, i64)>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: scheduled.map(|(status, reason, at)| {
                    vec![PodCondition {
                        type_: "PodScheduled".into(),
                        status: status.into(),
                        reason: reason.map(Into::into),
                        message: reason.map(|_| "0/7 nodes are available".into()),
                        last_transition_time: Some(Time(Timestamp::from_second(at).expect("time"))),
                        ..PodCondition::default()
                    }]
                }),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn a_group_with_one_rank_bound_and_one_unschedulable_is_partly_placed_since_the_bind() {
        let bound = pod(Some("nvidia-0"), Some(("True", None, 1_000)));
        let stuck = pod(None, Some(("False", Some("Unschedulable"), 1_001)));
        let p = partial_placement(&[&bound, &stuck], 2).expect("partly placed");
        assert_eq!((p.bound, p.total), (1, 2));
        assert_eq!(p.since, Timestamp::from_second(1_000).expect("time"));
        assert_eq!(p.why, "0/7 nodes are available");
        assert_eq!(
            p.age(Timestamp::from_second(1_130).expect("time")),
            Duration::from_secs(130)
        );
    }

    #[test]
    fn a_group_wholly_unplaced_or_wholly_bound_is_not_partly_placed() {
        let stuck = || pod(None, Some(("False", Some("Unschedulable"), 1_001)));
        let bound = || pod(Some("nvidia-0"), Some(("True", None, 1_000)));
        let pending = pod(None, None);
        assert_eq!(partial_placement(&[&stuck(), &stuck()], 2), None);
        assert_eq!(partial_placement(&[&bound(), &bound()], 2), None);
        // Bound and not yet tried by the scheduler: still placing, not stuck.
        assert_eq!(partial_placement(&[&bound(), &pending], 2), None);
    }

    #[test]
    fn the_retry_backoff_doubles_from_15_seconds_up_to_5_minutes() {
        let waits: Vec<u64> = (1..=8).map(|n| retry_backoff(n).as_secs()).collect();
        assert_eq!(waits, [15, 30, 60, 120, 240, 300, 300, 300]);
        assert_eq!(retry_backoff(0).as_secs(), 15);
    }
}
