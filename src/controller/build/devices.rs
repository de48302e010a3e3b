//! Devices through Dynamic Resource Allocation: with `spec.accelerator.deviceClassName`, one
//! ResourceClaimTemplate per deployment and device count (a role's `devicesPerPod`, see
//! [`crate::api::DeepInferDeploymentSpec::device_shape`]), from which the API server's
//! resource-claim controller makes each engine pod its own claim of its role's devices,
//! allocated by the scheduler; with `domainDeviceClassName`, one template from which each
//! multi-pod group's PodGroup gets one claim on a domain device that all its pods share.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PodResourceClaim, PodSpec, ResourceClaim as ContainerClaim};
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceRequest, ExactDeviceRequest, ResourceClaimSpec, ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
};
use kube::ResourceExt;

use crate::api::Component;
use crate::controller::validated::ValidatedDeployment;

use super::{group_shape, owned_meta, short_hash, stamp, GroupShape};

/// Name of the claim in engine pods (`spec.resourceClaims[].name`) and of the device request in
/// the template.
pub const DEVICE_CLAIM: &str = "devices";
/// Name of the claim a group's pods share through their PodGroup (the scale-up domain's device).
pub const DOMAIN_CLAIM: &str = "domain";

/// Name of the ResourceClaimTemplate of `devices` devices per pod, `None` without a
/// DeviceClass. The name carries a hash of class and count: a template's spec cannot change, so
/// another count is another template (roles of different `devicesPerPod` claim from different
/// ones), and pods of an earlier shape keep theirs until they are gone.
pub fn device_claim_template_name(did: &ValidatedDeployment, devices: i32) -> Option<String> {
    let class = did.spec.accelerator.device_class_name.as_deref()?;
    Some(format!(
        "{}-devices-{}",
        did.name_any(),
        short_hash(&(class, devices), 6)
    ))
}

/// Name of the ResourceClaimTemplate of the domain device a group's PodGroup claims, `None`
/// without `spec.accelerator.domainDeviceClassName`.
pub fn domain_claim_template_name(did: &ValidatedDeployment) -> Option<String> {
    let class = did.spec.accelerator.domain_device_class_name.as_deref()?;
    Some(format!(
        "{}-domain-{}",
        did.name_any(),
        short_hash(&class, 6)
    ))
}

/// A template of one request named `request` for `count` devices of `class`.
fn claim_template(
    did: &ValidatedDeployment,
    name: String,
    request: &str,
    class: String,
    count: i32,
) -> ResourceClaimTemplate {
    let extra = BTreeMap::from([Component::Devices.label()]);
    stamp(ResourceClaimTemplate {
        metadata: owned_meta(did, name, extra),
        spec: Some(ResourceClaimTemplateSpec {
            metadata: None,
            spec: Some(ResourceClaimSpec {
                devices: Some(DeviceClaim {
                    requests: Some(vec![DeviceRequest {
                        name: request.into(),
                        exactly: Some(ExactDeviceRequest {
                            device_class_name: class,
                            allocation_mode: Some("ExactCount".into()),
                            count: Some(i64::from(count)),
                            ..ExactDeviceRequest::default()
                        }),
                        first_available: None,
                    }]),
                    ..DeviceClaim::default()
                }),
            }),
        }),
    })
}

/// The ResourceClaimTemplates the deployment's pods and PodGroups claim from: per device count
/// of its roles, that many devices of `spec.accelerator.deviceClassName` per engine pod, and one
/// device of `domainDeviceClassName` per multi-pod group.
pub fn claim_templates(did: &ValidatedDeployment) -> Vec<ResourceClaimTemplate> {
    let accelerator = &did.spec.accelerator;
    let counts: BTreeSet<i32> = did
        .spec
        .roles
        .iter()
        .map(|role| group_shape(&did.spec, role).devices_per_pod)
        .collect();
    let devices = accelerator
        .device_class_name
        .iter()
        .flat_map(|class| counts.iter().map(move |count| (class, *count)))
        .filter_map(|(class, count)| {
            let name = device_claim_template_name(did, count)?;
            Some(claim_template(
                did,
                name,
                DEVICE_CLAIM,
                class.clone(),
                count,
            ))
        });
    let domain = domain_claim_template_name(did)
        .zip(accelerator.domain_device_class_name.clone())
        .map(|(name, class)| claim_template(did, name, DOMAIN_CLAIM, class, 1));
    devices.chain(domain).collect()
}

/// The claims of an engine pod of a group of `shape` (`spec.resourceClaims`): its own devices
/// from the template of its count, and, when `shares_domain` (a multi-pod group placed as a
/// PodGroup), the domain device its PodGroup claims, referenced exactly as the PodGroup does.
pub(super) fn pod_device_claims(
    did: &ValidatedDeployment,
    shape: &GroupShape,
    shares_domain: bool,
) -> Vec<PodResourceClaim> {
    let domain = domain_claim_template_name(did).filter(|_| shares_domain);
    device_claim_template_name(did, shape.devices_per_pod)
        .map(|t| (DEVICE_CLAIM, t))
        .into_iter()
        .chain(domain.map(|t| (DOMAIN_CLAIM, t)))
        .map(|(name, template)| PodResourceClaim {
            name: name.into(),
            resource_claim_template_name: Some(template),
            resource_claim_name: None,
        })
        .collect()
}

/// The PodGroup's shared claim on the domain device, for a multi-pod group.
pub(super) fn pod_group_domain_claims(
    did: &ValidatedDeployment,
    pods: i32,
) -> Option<Vec<k8s_openapi::api::scheduling::v1beta1::PodGroupResourceClaim>> {
    let template = domain_claim_template_name(did).filter(|_| pods > 1)?;
    Some(vec![
        k8s_openapi::api::scheduling::v1beta1::PodGroupResourceClaim {
            name: DOMAIN_CLAIM.into(),
            resource_claim_template_name: Some(template),
            resource_claim_name: None,
        },
    ])
}

/// The engine container's use of the pod's claims (`resources.claims`).
pub(super) fn container_device_claims(claims: &[PodResourceClaim]) -> Vec<ContainerClaim> {
    claims
        .iter()
        .map(|c| ContainerClaim {
            name: c.name.clone(),
            request: None,
        })
        .collect()
}

/// Names of the ResourceClaimTemplates pods of these specs claim devices from.
pub fn templates_in_use<'a>(pods: impl IntoIterator<Item = &'a PodSpec>) -> BTreeSet<String> {
    pods.into_iter()
        .filter_map(|p| p.resource_claims.as_ref())
        .flatten()
        .filter_map(|c| c.resource_claim_template_name.clone())
        .collect()
}
