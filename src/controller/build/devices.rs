//! Devices through Dynamic Resource Allocation (`spec.accelerator.deviceClassName`): one
//! ResourceClaimTemplate per deployment and device shape, from which the API server's
//! resource-claim controller makes each engine pod its own claim of `devicesPerPod` devices,
//! allocated by the scheduler.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PodResourceClaim, ResourceClaim as ContainerClaim};
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceRequest, ExactDeviceRequest, ResourceClaimSpec, ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
};

use super::*;

/// Name of the claim in engine pods (`spec.resourceClaims[].name`) and of the device request in
/// the template.
pub const DEVICE_CLAIM: &str = "devices";
/// Value of the component label on the deployment's ResourceClaimTemplates.
pub const DEVICES_COMPONENT: &str = "devices";

/// Name of the ResourceClaimTemplate for the spec's device shape, `None` without a DeviceClass.
/// The name carries a hash of class and count: a template's spec cannot change, so another
/// shape is another template, and pods of the earlier shape keep theirs until they are gone.
pub fn device_claim_template_name(did: &ValidatedDeployment) -> Option<String> {
    let accelerator = &did.spec.accelerator;
    let class = accelerator.device_class_name.as_deref()?;
    Some(format!(
        "{}-devices-{}",
        did.name_any(),
        short_hash(&(class, accelerator.devices_per_pod()), 6)
    ))
}

/// The ResourceClaimTemplate engine pods claim their devices from: `devicesPerPod` devices of
/// `spec.accelerator.deviceClassName`, all on the pod's node.
pub fn device_claim_template(did: &ValidatedDeployment) -> Option<ResourceClaimTemplate> {
    let name = device_claim_template_name(did)?;
    let class = did.spec.accelerator.device_class_name.clone()?;
    let extra = BTreeMap::from([(labels::COMPONENT.to_string(), DEVICES_COMPONENT.to_string())]);
    Some(stamp(ResourceClaimTemplate {
        metadata: owned_meta(did, name, extra),
        spec: Some(ResourceClaimTemplateSpec {
            metadata: None,
            spec: Some(ResourceClaimSpec {
                devices: Some(DeviceClaim {
                    requests: Some(vec![DeviceRequest {
                        name: DEVICE_CLAIM.into(),
                        exactly: Some(ExactDeviceRequest {
                            device_class_name: class,
                            allocation_mode: Some("ExactCount".into()),
                            count: Some(i64::from(did.spec.accelerator.devices_per_pod())),
                            ..ExactDeviceRequest::default()
                        }),
                        first_available: None,
                    }]),
                    ..DeviceClaim::default()
                }),
            }),
        }),
    }))
}

/// The pod's claim on the template (`spec.resourceClaims`), `None` without a DeviceClass.
pub(super) fn pod_device_claims(did: &ValidatedDeployment) -> Option<Vec<PodResourceClaim>> {
    device_claim_template_name(did).map(|template| {
        vec![PodResourceClaim {
            name: DEVICE_CLAIM.into(),
            resource_claim_template_name: Some(template),
            resource_claim_name: None,
        }]
    })
}

/// The engine container's use of the pod's claim (`resources.claims`).
pub(super) fn container_device_claims() -> Vec<ContainerClaim> {
    vec![ContainerClaim {
        name: DEVICE_CLAIM.into(),
        request: None,
    }]
}

/// Names of the ResourceClaimTemplates pods of these specs claim devices from.
pub fn templates_in_use<'a>(pods: impl IntoIterator<Item = &'a PodSpec>) -> BTreeSet<String> {
    pods.into_iter()
        .filter_map(|p| p.resource_claims.as_ref())
        .flatten()
        .filter_map(|c| c.resource_claim_template_name.clone())
        .collect()
}
