//! PodGroups (`scheduling.k8s.io/v1beta1`): one per serving group and per multi-pod group of an
//! acceptance run, gang-scheduled so that the scheduler binds every rank of a group or none, and kept
//! inside one scale-up domain where the scheduler places groups by topology.

use std::collections::BTreeMap;

use k8s_openapi::api::scheduling::v1beta1::{
    GangSchedulingPolicy, PodGroup, PodGroupSchedulingConstraints, PodGroupSchedulingPolicy,
    PodGroupSpec, TopologyConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::{Component, RoleSpec};
use crate::controller::validated::ValidatedDeployment;

use super::devices::pod_group_domain_claims;
use super::run::RunGroup;
use super::{group_selector, group_service_name, group_shape, owned_meta, stamp};

/// A gang of `pods` pods named by `metadata`, kept inside one scale-up domain when it has more
/// than one pod (the API server keeps the topology constraint only where topology-aware workload
/// scheduling is enabled; the pods' domain affinity holds everywhere), and, with
/// `domainDeviceClassName`, claiming the domain device its pods share. Its priority class is
/// its pods' (`priorityClassName` of the role's pod settings): the scheduler places a pod of a
/// PodGroup only at the PodGroup's priority, which is immutable (so the class is part of the
/// revision, see [`revision`](fn@super::revision)).
fn gang(did: &ValidatedDeployment, metadata: ObjectMeta, role: &RoleSpec) -> PodGroup {
    let pods = group_shape(&did.spec, role).pods;
    let domain_key = did.spec.accelerator.scale_up_domain_key();
    stamp(PodGroup {
        metadata,
        spec: PodGroupSpec {
            priority_class_name: did.spec.pod_settings(role).priority_class_name,
            resource_claims: pod_group_domain_claims(did, pods),
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: Some(GangSchedulingPolicy {
                    min_count: pods.max(1),
                }),
                basic: None,
            },
            scheduling_constraints: (pods > 1).then(|| PodGroupSchedulingConstraints {
                topology: Some(vec![TopologyConstraint {
                    key: domain_key.to_string(),
                }]),
            }),
            ..PodGroupSpec::default()
        },
        status: None,
    })
}

/// The PodGroup of serving group `group` of `role` at `revision`, named like its rendezvous
/// Service; its pods name it in `spec.schedulingGroup`.
pub fn group_pod_group(
    did: &ValidatedDeployment,
    role: &RoleSpec,
    revision: &str,
    group: i32,
) -> PodGroup {
    let did_name = did.name_any();
    let name = group_service_name(&did_name, &role.name, revision, group);
    let mut extra = group_selector(&did_name, &role.name, revision, group);
    extra.extend([Component::Worker.label()]);
    gang(did, owned_meta(did, name, extra), role)
}

/// The PodGroup of a multi-pod group of an acceptance run, named like the group; `None` for a
/// one-pod group.
pub fn acceptance_pod_group(
    did: &ValidatedDeployment,
    group: &RunGroup<'_>,
    revision: &str,
) -> Option<PodGroup> {
    let shape = group_shape(&did.spec, group.role);
    (shape.pods > 1).then(|| {
        gang(
            did,
            owned_meta(
                did,
                group.name.clone(),
                super::run::acceptance_labels(group, revision),
            ),
            group.role,
        )
    })
}

/// Every serving PodGroup the deployment should have: one per group in `groups` (role,
/// revision, index) of a role the spec still has.
pub fn serving_pod_groups(
    did: &ValidatedDeployment,
    specs: &BTreeMap<String, ValidatedDeployment>,
    groups: &[(String, String, i32)],
) -> Vec<PodGroup> {
    groups
        .iter()
        .filter_map(|(role, revision, index)| {
            let at = specs.get(revision).unwrap_or(did);
            let role = at.spec.roles.iter().find(|r| r.name == *role)?;
            Some(group_pod_group(at, role, revision, *index))
        })
        .collect()
}
