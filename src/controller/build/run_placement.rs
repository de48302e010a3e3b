//! The placement record of an acceptance run ([`crate::acceptance::placement`]): one row per
//! pod of every rank of every group of the run, from the pods its Jobs made, as placed (the
//! node the scheduler bound each to) and allocated (the devices it was given). The nodes'
//! domain labels are filled in when the record is written (the operator reads nodes only then,
//! and only when it may).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::acceptance::placement::{Placement, RankDevices, RankPlacement, PLACEMENT_RANK_LIMIT};
use crate::controller::validated::ValidatedDeployment;

use super::group_shape;
use super::rank_table::{allocation, allocation_annotation, uses_rank_tables};
use super::run::RunGroup;

/// The run's placement: for each group (judged role first) and rank, the rank's pods bound to a
/// node (a rank whose Job made a second pod has a row for each), else one row for its unbound
/// pod, else one row without a pod. `pods_of_job` gives the pods of a Job by name.
pub fn run_placement<'p>(
    did: &ValidatedDeployment,
    groups: &[RunGroup<'_>],
    pods_of_job: &dyn Fn(&str) -> Vec<&'p Pod>,
) -> Placement {
    let mut ranks = Vec::new();
    for group in groups {
        let shape = group_shape(&did.spec, group.role);
        for rank in 0..shape.pods {
            let pods = pods_of_job(&group.job(rank));
            let bound: Vec<&Pod> = pods
                .iter()
                .copied()
                .filter(|p| node_of(p).is_some())
                .collect();
            let chosen: Vec<Option<&Pod>> = match (bound.is_empty(), pods.first()) {
                (false, _) => bound.into_iter().map(Some).collect(),
                (true, first) => vec![first.copied()],
            };
            ranks.extend(chosen.into_iter().map(|pod| RankPlacement {
                role: group.role.name.clone(),
                rank,
                pod: pod.map(ResourceExt::name_any),
                node: pod.and_then(node_of),
                domain: None,
                devices: rank_devices(did, shape.devices_per_pod, pod),
            }));
        }
    }
    let omitted_ranks = ranks.len().saturating_sub(PLACEMENT_RANK_LIMIT);
    ranks.truncate(PLACEMENT_RANK_LIMIT);
    Placement {
        domain_key: did.spec.accelerator.scale_up_domain_key().to_string(),
        domains_not_read: None,
        ranks,
        omitted_ranks,
    }
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// The devices `pod` was given: the count it requested (its Job's template, requests equal to
/// limits), with Dynamic Resource Allocation its claims, on Ascend the NPU ids of the device
/// plugin's allocation.
fn rank_devices(did: &ValidatedDeployment, count: i32, pod: Option<&Pod>) -> RankDevices {
    let accelerator = &did.spec.accelerator;
    let mut devices = RankDevices {
        resource: match &accelerator.device_class_name {
            Some(class) => format!("class {class}"),
            None => accelerator.device_resource().to_string(),
        },
        count,
        ..RankDevices::default()
    };
    let Some(pod) = pod else {
        return devices;
    };
    devices.claims = pod_claims(pod);
    if uses_rank_tables(&did.spec) {
        let annotation = allocation_annotation(accelerator.device_resource());
        match allocation(pod, annotation, count) {
            Ok(found) => {
                devices.ids = found.devices.into_iter().map(|d| d.device_id).collect();
            }
            Err(why) => devices.note = Some(why),
        }
    }
    devices
}

/// `<claim in the pod>=<ResourceClaim>` for each of the pod's claims: the claim made for it (its
/// status), else the claim or template it names.
fn pod_claims(pod: &Pod) -> Vec<String> {
    let made = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .map(|claim| {
            let name = made
                .into_iter()
                .flatten()
                .find(|s| s.name == claim.name)
                .and_then(|s| s.resource_claim_name.clone())
                .or_else(|| claim.resource_claim_name.clone())
                .or_else(|| {
                    claim
                        .resource_claim_template_name
                        .as_ref()
                        .map(|t| format!("template {t}"))
                })
                .unwrap_or_default();
            format!("{}={name}", claim.name)
        })
        .collect()
}
