//! The scaling stage: where each role's group count comes from (`spec.roles[].scaling`), and the
//! `DeepInferRole`s kept for the roles scaled externally. A role with `scaling: external` takes
//! its count from its DeepInferRole's `spec.replicas` (written by an autoscaler through `/scale`,
//! or `kubectl scale`); the spec's `replicas` only seeds that object when it is created. The
//! count is no part of the revision, so a scale creates or removes groups of an accepted
//! revision with no new acceptance run.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{
    role_object_name, role_selector, DeepInferDeployment, DeepInferRole, DeepInferRoleStatus,
    Reason, RoleScaling, RoleStatus,
};
use crate::controller::act::{delete_named, Act};
use crate::controller::build;
use crate::controller::observe::named;
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;

/// The resource as the later stages take it, and where each count it took from elsewhere came
/// from.
#[derive(Debug)]
pub struct Scaled {
    /// The resource, with each external role's `replicas` taken from its DeepInferRole.
    pub did: DeepInferDeployment,
    /// For each count taken so, the spec field it stands in (`spec.roles[i].replicas`) and the
    /// field it was read from, so that a refusal names the field to change.
    pub sources: BTreeMap<String, String>,
}

/// `did` with each external role's count read from its DeepInferRole among `roles` (a role
/// whose DeepInferRole does not exist yet, or is being deleted, keeps its spec's `replicas`: the
/// value the object is created with). `served`: whether the API server serves DeepInferRoles;
/// an external role where it does not is refused, naming the field and the fix.
pub fn scaled(
    did: &DeepInferDeployment,
    roles: &[DeepInferRole],
    served: bool,
) -> Result<Scaled, Gate> {
    let (ns, name) = (did.namespace().unwrap_or_default(), did.name_any());
    let mut out = did.clone();
    let mut sources = BTreeMap::new();
    for (i, role) in out.spec.roles.iter_mut().enumerate() {
        if role.scaling != RoleScaling::External {
            continue;
        }
        if !served {
            return Err(Gate::Failed(
                Reason::InvalidSpec,
                format!("spec.roles[{i}].scaling is external, but the API server does not serve DeepInferRoles (their CustomResourceDefinition is not installed; Helm installs CRDs on the first install only): apply crds/deepinfer.io_deepinferroles.yaml and restart the operator, or remove spec.roles[{i}].scaling"),
            ));
        }
        let object = role_object_name(&name, &role.name);
        let Some(found) = named(roles, &object).filter(|r| r.metadata.deletion_timestamp.is_none())
        else {
            continue;
        };
        role.replicas = found.spec.replicas;
        sources.insert(
            format!("spec.roles[{i}].replicas"),
            format!(
                "DeepInferRole {ns}/{object} spec.replicas (the count of spec.roles[{i}], whose scaling is external)"
            ),
        );
    }
    Ok(Scaled { did: out, sources })
}

/// The acts that keep the DeepInferRoles of `did` (as [`scaled`] left it): one created for each
/// external role without one, its `spec.replicas` the role's count; those of roles that are not
/// external (any more) deleted, so the spec's `replicas` rule again; and the status of each kept
/// one (serving groups as `found` says, the selector of the role's serving pods) written where
/// it differs. `acting`: whether the licence gate is open; while it is closed nothing is created
/// or deleted, and only the status is kept current.
pub fn keep<'o>(
    did: &ValidatedDeployment,
    found: &[RoleStatus],
    observed: &'o [DeepInferRole],
    acting: bool,
) -> Vec<Act<'o>> {
    let name = did.name_any();
    let mut acts = Vec::new();
    let mut wanted = Vec::new();
    for role in &did.spec.roles {
        if role.scaling != RoleScaling::External {
            continue;
        }
        let object = role_object_name(&name, &role.name);
        wanted.push(object.clone());
        let Some(existing) = named(observed, &object) else {
            if acting {
                acts.push(Act::create(build::scaled_role(did, role)));
            }
            continue;
        };
        let status = DeepInferRoleStatus {
            replicas: found
                .iter()
                .find(|r| r.name == role.name)
                .map_or(0, |r| r.ready_groups),
            selector: role_selector(&name, &role.name),
        };
        if existing.status.as_ref() != Some(&status) {
            acts.push(Act::RoleStatus {
                name: object,
                status,
            });
        }
    }
    if acting {
        let gone: Vec<String> = observed
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| !wanted.contains(n))
            .collect();
        acts.extend(delete_named(observed, &gone));
    }
    acts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::gates::fixture::{described, raw, valid};
    use crate::controller::gates::spec::references::Seen;
    use crate::controller::gates::spec::validate::DeviceLimits;
    use crate::controller::gates::spec::{self, SpecFound};

    fn external(mut did: DeepInferDeployment) -> DeepInferDeployment {
        did.spec.roles[0].scaling = RoleScaling::External;
        did
    }

    /// The DeepInferRole of the fixture's worker role, as the operator creates it, scaled to
    /// `replicas`.
    fn object(replicas: i32) -> DeepInferRole {
        let mut role = build::scaled_role(&valid(raw()), &raw().spec.roles[0]);
        role.metadata.uid = Some("r-1".into());
        role.spec.replicas = replicas;
        role
    }

    fn serving(ready: i32) -> Vec<RoleStatus> {
        vec![RoleStatus {
            name: "worker".into(),
            ready_groups: ready,
            ..RoleStatus::default()
        }]
    }

    #[test]
    fn a_role_scaled_by_its_replicas_keeps_them_and_has_no_deepinferrole() {
        let s = scaled(&raw(), &[object(5)], true).expect("not refused");
        assert_eq!(s.did.spec.roles[0].replicas, 2, "the spec's replicas rule");
        assert!(s.sources.is_empty());
    }

    #[test]
    fn an_external_role_takes_its_count_from_its_deepinferrole() {
        let s = scaled(&external(raw()), &[object(3)], true).expect("not refused");
        assert_eq!(s.did.spec.roles[0].replicas, 3);
        assert!(s.sources["spec.roles[0].replicas"]
            .starts_with("DeepInferRole serving/flash-worker spec.replicas"));
    }

    #[test]
    fn an_external_role_without_its_deepinferrole_yet_creates_it_seeded_from_replicas() {
        let s = scaled(&external(raw()), &[], true).expect("not refused");
        assert_eq!(s.did.spec.roles[0].replicas, 2, "the seed until it exists");
        let did = valid(s.did);
        let acts = keep(&did, &serving(0), &[], true);
        assert_eq!(described(&acts), ["create ScaledRole flash-worker"]);
        let Act::Create(crate::controller::act::Object::ScaledRole(created)) = &acts[0] else {
            panic!("a create of the DeepInferRole");
        };
        assert_eq!(created.spec.replicas, 2);
        assert_eq!(
            created.metadata.owner_references.as_ref().unwrap()[0].uid,
            "u-1",
            "owned by the deployment, deleted with it"
        );
    }

    #[test]
    fn an_existing_deepinferrole_is_never_written_but_its_status() {
        let mut existing = object(3);
        let s = scaled(&external(raw()), std::slice::from_ref(&existing), true).unwrap();
        let did = valid(s.did);
        let acts = keep(&did, &serving(1), std::slice::from_ref(&existing), true);
        assert_eq!(
            described(&acts),
            ["write status of DeepInferRole flash-worker: 1 serving"]
        );
        let Act::RoleStatus { status, .. } = &acts[0] else {
            panic!("a status write");
        };
        assert_eq!(
            status.selector,
            "deepinfer.io/component=worker,deepinfer.io/deployment=flash,deepinfer.io/role=worker"
        );
        existing.status = Some(status.clone());
        let acts = keep(&did, &serving(1), std::slice::from_ref(&existing), true);
        assert!(acts.is_empty(), "an unchanged status is not written again");
    }

    #[test]
    fn a_role_switched_back_to_replicas_deletes_its_deepinferrole_and_the_spec_rules() {
        let existing = [object(5)];
        let s = scaled(&raw(), &existing, true).unwrap();
        assert_eq!(s.did.spec.roles[0].replicas, 2);
        let acts = keep(&valid(s.did), &serving(2), &existing, true);
        assert_eq!(described(&acts), ["delete ScaledRole flash-worker"]);
    }

    #[test]
    fn while_the_licence_gate_is_closed_only_the_status_is_kept() {
        let did = valid(scaled(&external(raw()), &[], true).unwrap().did);
        assert!(
            keep(&did, &serving(0), &[], false).is_empty(),
            "nothing created"
        );
        let existing = [object(3)];
        assert_eq!(
            described(&keep(&did, &serving(0), &existing, false)),
            ["write status of DeepInferRole flash-worker: 0 serving"]
        );
        let switched_back = valid(raw());
        assert_eq!(
            described(&keep(&switched_back, &serving(0), &existing, false)),
            Vec::<String>::new(),
            "nothing deleted"
        );
    }

    #[test]
    fn a_deepinferrole_out_of_bounds_is_refused_naming_its_field() {
        for (replicas, bound) in [(2000, "at most 1024"), (-1, "0 or more")] {
            let s = scaled(&external(raw()), &[object(replicas)], true).unwrap();
            let SpecFound::Refused(Gate::Failed(reason, message), None) = spec::plan(
                &s.did,
                &DeviceLimits::default(),
                false,
                &Seen::default(),
                &s.sources,
            ) else {
                panic!("{replicas} groups are refused");
            };
            assert_eq!(reason, Reason::InvalidSpec);
            assert!(
                message.starts_with("DeepInferRole serving/flash-worker spec.replicas"),
                "{message}"
            );
            assert!(message.contains(bound), "{message}");
        }
    }

    #[test]
    fn an_external_role_where_deepinferroles_are_not_served_is_refused_with_the_fix() {
        let Err(Gate::Failed(reason, message)) = scaled(&external(raw()), &[], false) else {
            panic!("refused");
        };
        assert_eq!(reason, Reason::InvalidSpec);
        assert!(message.starts_with("spec.roles[0].scaling"), "{message}");
        assert!(
            message.contains("crds/deepinfer.io_deepinferroles.yaml"),
            "{message}"
        );
    }

    #[test]
    fn neither_the_count_nor_its_source_is_part_of_the_revision() {
        let before = build::revision(&raw().spec);
        let s = scaled(&external(raw()), &[object(7)], true).unwrap();
        assert_eq!(build::revision(&s.did.spec), before);
    }
}
