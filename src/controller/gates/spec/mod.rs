//! The spec stage: the CRD's CEL rules again (for API servers that do not enforce them), what
//! only the cluster can tell (gang scheduling for a domain device), and the Secrets and
//! ConfigMaps engine containers read, which must have opted in.

pub mod references;
pub mod validate;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::{DeepInferDeployment, Reason};
use crate::controller::gates::spec::references::{engine_gate, served_content, Seen};
use crate::controller::gates::spec::validate::{summarize, validate, DeviceLimits};
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;

/// A spec the stages may act on, or its refusal.
#[derive(Debug)]
pub enum SpecFound {
    /// Valid; groups are PodGroups where the cluster places them so.
    Valid(Box<ValidatedDeployment>),
    /// Refused: the spec gate and when to look again without a change (`None`: on a change).
    Refused(Gate, Option<Duration>),
}

/// The spec stage of `did` (`pod_groups`: whether multi-pod groups are PodGroups here;
/// `referenced`: what the pass saw of the Secrets and ConfigMaps the spec names; `sources`: the
/// fields whose values were read from elsewhere, and where, as [`crate::controller::gates::scaling::Scaled`] says,
/// so that a refusal names the field to change).
pub fn plan(
    did: &DeepInferDeployment,
    limits: &DeviceLimits,
    pod_groups: bool,
    referenced: &Seen,
    sources: &BTreeMap<String, String>,
) -> SpecFound {
    let valid = match validate(did, limits) {
        Ok(valid) => valid.placed_as_pod_groups(pod_groups),
        Err(mut errors) => {
            for e in &mut errors {
                if let Some(source) = sources.get(&e.field) {
                    e.read_from(source);
                }
            }
            return SpecFound::Refused(Gate::Failed(Reason::InvalidSpec, summarize(&errors)), None);
        }
    };
    if valid.spec.accelerator.domain_device_class_name.is_some() && !valid.pod_groups {
        return SpecFound::Refused(
            Gate::Failed(
                Reason::InvalidSpec,
                "spec.accelerator.domainDeviceClassName: a group's pods share the domain device through their PodGroup, and groups are not PodGroups here (--gang-scheduling is off, or the API server does not serve scheduling.k8s.io/v1beta1); remove the field, or enable the GenericWorkload and DRAWorkloadResourceClaims feature gates and run the operator with --gang-scheduling auto or native".into(),
            ),
            None,
        );
    }
    // Engine containers read only Secrets and ConfigMaps that opted in; a label added later
    // starts no event, so the refusal is looked at again soon.
    if let Some(refused) = engine_gate(&valid.namespace, &valid.spec, referenced) {
        return SpecFound::Refused(refused, Some(Duration::from_secs(15)));
    }
    let served = served_content(&valid.spec, referenced);
    SpecFound::Valid(Box::new(valid.reading(served)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::gates::fixture::raw as sample;

    fn limits() -> DeviceLimits {
        DeviceLimits::default()
    }

    #[test]
    fn a_valid_spec_is_placed_as_the_cluster_places_groups() {
        let did = sample();
        for pod_groups in [false, true] {
            match plan(
                &did,
                &limits(),
                pod_groups,
                &Seen::default(),
                &BTreeMap::new(),
            ) {
                SpecFound::Valid(v) => assert_eq!(v.pod_groups, pod_groups),
                SpecFound::Refused(g, _) => panic!("refused: {g:?}"),
            }
        }
    }

    #[test]
    fn an_invalid_spec_waits_for_a_change_and_names_the_field() {
        let mut did = sample();
        did.spec.roles.clear();
        let SpecFound::Refused(Gate::Failed(reason, message), None) =
            plan(&did, &limits(), false, &Seen::default(), &BTreeMap::new())
        else {
            panic!("an empty roles list is refused until the resource changes");
        };
        assert_eq!(reason, Reason::InvalidSpec);
        assert!(message.contains("spec.roles"), "{message}");
    }

    #[test]
    fn a_domain_device_without_pod_groups_is_refused_with_the_fix() {
        let mut did = sample();
        did.spec.accelerator.domain_device_class_name = Some("nvlink-domain".into());
        let SpecFound::Refused(Gate::Failed(_, message), None) =
            plan(&did, &limits(), false, &Seen::default(), &BTreeMap::new())
        else {
            panic!("a domain device needs PodGroups");
        };
        assert!(message.contains("--gang-scheduling"), "{message}");
    }

    #[test]
    fn the_content_serving_engines_read_is_part_of_the_revision() {
        use crate::controller::gates::spec::references::{Kind, ENGINE_READABLE_LABEL};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let mut did = sample();
        did.spec.runtime.env = vec![serde_json::from_value(serde_json::json!(
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "t"}}}
        ))
        .expect("env")];
        let seen = |version: &str| {
            Seen::from([(
                (Kind::Secret, "tok".to_string()),
                Some(ObjectMeta {
                    name: Some("tok".into()),
                    uid: Some("u-tok".into()),
                    resource_version: Some(version.into()),
                    labels: Some(BTreeMap::from([(
                        ENGINE_READABLE_LABEL.to_string(),
                        "true".to_string(),
                    )])),
                    ..ObjectMeta::default()
                }),
            )])
        };
        let revision = |seen: &Seen| match plan(&did, &limits(), false, seen, &BTreeMap::new()) {
            SpecFound::Valid(v) => crate::controller::build::revision_of(&v),
            SpecFound::Refused(g, _) => panic!("refused: {g:?}"),
        };
        assert_eq!(revision(&seen("10")), revision(&seen("10")));
        assert_ne!(
            revision(&seen("10")),
            revision(&seen("11")),
            "the Secret's content changed: judged again"
        );
        // No reference: the spec's revision alone, as before.
        let plain = sample();
        let SpecFound::Valid(v) =
            plan(&plain, &limits(), false, &Seen::default(), &BTreeMap::new())
        else {
            panic!("valid");
        };
        assert_eq!(
            crate::controller::build::revision_of(&v),
            crate::controller::build::revision(&plain.spec)
        );
    }
}
