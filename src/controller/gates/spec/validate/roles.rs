//! The accelerator and every role: devices, layout, replicas and rollout.

use super::shared::*;
use crate::api::*;

/// Device resources each accelerator type's pods may request (`spec.accelerator.resourceName`).
pub fn device_resources(kind: AcceleratorType) -> &'static [&'static str] {
    match kind {
        AcceleratorType::Nvidia => &["nvidia.com/gpu"],
        AcceleratorType::Ascend => &["huawei.com/Ascend910", "huawei.com/npu"],
    }
}

/// Returns devicesPerPod when it is usable for the per-role divisibility checks.
pub(super) fn validate_accelerator(
    accelerator: &AcceleratorSpec,
    limits: &DeviceLimits,
    errors: &mut Vec<FieldError>,
) -> Option<i32> {
    if let Some(resource) = accelerator
        .resource_name
        .as_deref()
        .filter(|r| !device_resources(accelerator.kind).contains(r))
    {
        errors.push(FieldError::new(
            "spec.accelerator.resourceName",
            format_args!(
                "is {resource:?}, not a device resource of {} nodes; use one of {}",
                kind_name(accelerator.kind),
                device_resources(accelerator.kind).join(", ")
            ),
        ));
    }
    if accelerator.resource_name.is_some() && accelerator.device_class_name.is_some() {
        errors.push(FieldError::new(
            "spec.accelerator.resourceName",
            "is set beside spec.accelerator.deviceClassName, and the two exclude each other: devices come either as an extended resource or through DRA claims; remove one",
        ));
    }
    if let Some(product) = accelerator
        .product
        .as_deref()
        .filter(|p| !is_label_value(p))
    {
        errors.push(FieldError::new(
            "spec.accelerator.product",
            format_args!("is {product:?}; it must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit), as the node label it selects on holds, e.g. NVIDIA-H200"),
        ));
    }
    if let Some(key) = accelerator
        .scale_up_domain_key
        .as_deref()
        .filter(|k| !is_label_key(k))
    {
        errors.push(FieldError::new(
            "spec.accelerator.scaleUpDomainKey",
            format_args!("is {key:?}; it must be a node label key such as nvidia.com/gpu.clique ([prefix/]name, the name at most 63 letters, digits, '-', '_' or '.')"),
        ));
    }
    for (field, class, example) in [
        (
            "spec.accelerator.deviceClassName",
            &accelerator.device_class_name,
            "gpu.nvidia.com",
        ),
        (
            "spec.accelerator.domainDeviceClassName",
            &accelerator.domain_device_class_name,
            "compute-domain-default-channel.nvidia.com",
        ),
    ] {
        if let Some(class) = class.as_deref().filter(|c| !is_dns1123_subdomain(c)) {
            errors.push(FieldError::new(
                field,
                format_args!("is {class:?}; it must be a DeviceClass name (a DNS subdomain: lowercase letters, digits, '-' and '.'), e.g. {example}"),
            ));
        }
    }
    const FIELD: &str = "spec.accelerator.devicesPerPod";
    let devices = accelerator.devices_per_pod();
    if devices < 1 {
        errors.push(FieldError::new(
            FIELD,
            format_args!("is {devices}; it must be at least 1"),
        ));
        return None;
    }
    let per_node = limits.per_node(accelerator.kind);
    if devices > per_node {
        errors.push(FieldError::new(
            FIELD,
            format_args!(
                "is {devices}, more than the {per_node} devices one {} node has; lower it and add pods per group instead",
                kind_name(accelerator.kind)
            ),
        ));
    }
    Some(devices)
}

/// Every role: name, replicas, device shape, layout and rollout. `deployment_devices_ok` says
/// whether `spec.accelerator.devicesPerPod` passed, so a role that takes it is checked against it.
pub(super) fn validate_roles(
    spec: &DeepInferDeploymentSpec,
    deployment_devices_ok: bool,
    limits: &DeviceLimits,
    errors: &mut Vec<FieldError>,
) {
    let roles = &spec.roles;
    if roles.is_empty() {
        errors.push(FieldError::new(
            "spec.roles",
            "is empty; add at least one role (worker, prefill, decode or vision)",
        ));
    }
    for (i, role) in roles.iter().enumerate() {
        let at = format!("spec.roles[{i}]");
        if !ROLE_NAMES.contains(&role.name.as_str()) {
            errors.push(FieldError::new(
                format!("{at}.name"),
                format_args!(
                    "is {:?}; it must be one of worker, prefill, decode, vision",
                    role.name
                ),
            ));
        }
        if let Some(first) = roles[..i].iter().position(|r| r.name == role.name) {
            errors.push(FieldError::new(
                format!("{at}.name"),
                format_args!(
                    "repeats role {:?} of spec.roles[{first}]; each role name may appear only once; merge the duplicated entries",
                    role.name
                ),
            ));
        }
        if role.replicas < 0 {
            errors.push(FieldError::new(
                format!("{at}.replicas"),
                format_args!("is {}; it must be 0 or more", role.replicas),
            ));
        }
        if role.replicas > MAX_REPLICAS {
            errors.push(FieldError::new(
                format!("{at}.replicas"),
                format_args!("is {}; it may be at most {MAX_REPLICAS}", role.replicas),
            ));
        }
        let shape = spec.device_shape(role);
        let devices = validate_role_accelerator(role, &at, spec.accelerator.kind, limits, errors)
            .unwrap_or(deployment_devices_ok)
            .then(|| (shape.devices_per_pod, shape.devices_per_pod_field(i)));
        validate_parallel(role, &at, devices, errors);
        validate_rollout(role, &at, errors);
    }
    validate_worker_alone(roles, errors);
}

/// `spec.serviceOwners`: the CRD's rule on keys and its bounds on the entries and values.
pub(super) fn validate_service_owners(
    owners: &std::collections::BTreeMap<String, String>,
    errors: &mut Vec<FieldError>,
) {
    use crate::api::{MAX_SERVICE_OWNERS, MAX_SERVICE_OWNER_LENGTH};
    if owners.len() > MAX_SERVICE_OWNERS {
        errors.push(FieldError::new(
            "spec.serviceOwners",
            format_args!(
                "has {} entries; at most {MAX_SERVICE_OWNERS} are allowed",
                owners.len()
            ),
        ));
    }
    for (key, owner) in owners {
        if !(1..=63).contains(&key.chars().count()) {
            errors.push(FieldError::new(
                "spec.serviceOwners",
                format_args!("key {key:?}: a key names a service in 1 to 63 characters (e.g. kvCache, routing, authentication, quotas); shorten or rename the key"),
            ));
        }
        if !(1..=MAX_SERVICE_OWNER_LENGTH).contains(&owner.chars().count()) {
            errors.push(FieldError::new(
                "spec.serviceOwners",
                format_args!("value of {key:?} has {} characters; name the owner in 1 to {MAX_SERVICE_OWNER_LENGTH}", owner.chars().count()),
            ));
        }
    }
}

/// `worker` stands alone (the CRD's rule on `spec.roles`): an acceptance run judges the worker's
/// outputs alone, so prefill, decode or vision pods beside it would serve on a run they took no
/// part in. Names the worker's entry.
pub(super) fn validate_worker_alone(roles: &[RoleSpec], errors: &mut Vec<FieldError>) {
    if roles.len() < 2 {
        return;
    }
    if let Some(i) = roles.iter().position(|r| RoleKind::Worker.named(&r.name)) {
        let others: Vec<&str> = roles
            .iter()
            .filter(|r| !RoleKind::Worker.named(&r.name))
            .map(|r| r.name.as_str())
            .collect();
        errors.push(FieldError::new(
            format!("spec.roles[{i}].name"),
            format_args!(
                "is worker (prefill and decode colocated in one engine) beside {}: an acceptance run judges the worker's outputs alone, so the other roles' pods would serve on a run they took no part in; serve with worker alone, or with prefill and decode (and vision) without worker",
                others.join(", ")
            ),
        ));
    }
}

/// `spec.roles[i].accelerator` at `at`: the product is a label value, and `devicesPerPod`, when
/// given, is at least 1 and at most one node's devices. Returns whether the role's own
/// `devicesPerPod` is usable for the divisibility checks, `None` when the role gives none.
pub(super) fn validate_role_accelerator(
    role: &RoleSpec,
    at: &str,
    kind: AcceleratorType,
    limits: &DeviceLimits,
    errors: &mut Vec<FieldError>,
) -> Option<bool> {
    let own = role.accelerator.as_ref()?;
    if let Some(product) = own.product.as_deref().filter(|p| !is_label_value(p)) {
        errors.push(FieldError::new(
            format!("{at}.accelerator.product"),
            format_args!("is {product:?}; it must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit), as the node label it selects on holds, e.g. NVIDIA-H200"),
        ));
    }
    let devices = own.devices_per_pod?;
    let field = format!("{at}.accelerator.devicesPerPod");
    if devices < 1 {
        errors.push(FieldError::new(
            field,
            format_args!("is {devices}; it must be at least 1, or left out to take spec.accelerator.devicesPerPod"),
        ));
        return Some(false);
    }
    let per_node = limits.per_node(kind);
    if devices > per_node {
        errors.push(FieldError::new(
            field,
            format_args!(
                "is {devices}, more than the {per_node} devices one {} node has; lower it and add pods per group instead",
                kind_name(kind)
            ),
        ));
    }
    Some(true)
}

/// The pods the resource needs at most (every group plus the surge groups of a rollout) must stay
/// within the operator's bound; the message names the role that needs the most.
pub(super) fn validate_pod_count(
    spec: &DeepInferDeploymentSpec,
    limits: &DeviceLimits,
    errors: &mut Vec<FieldError>,
) {
    let per_role: Vec<i64> = spec
        .roles
        .iter()
        .map(|r| {
            let pods_per_group = i64::from(crate::controller::build::group_shape(spec, r).pods);
            let groups = i64::from(r.replicas.max(0)) + i64::from(r.rollout.max_surge.max(0));
            groups.saturating_mul(pods_per_group)
        })
        .collect();
    let total = per_role.iter().fold(0i64, |a, b| a.saturating_add(*b));
    if total <= limits.max_pods {
        return;
    }
    let (i, largest) = per_role
        .iter()
        .enumerate()
        .max_by_key(|(_, n)| **n)
        .map_or((0, 0), |(i, n)| (i, *n));
    errors.push(FieldError::new(
        format!("spec.roles[{i}].replicas"),
        format_args!(
            "asks for {largest} pods (groups plus rollout surge × pods per group), {total} for the whole resource; the operator allows at most {} pods per resource (--max-pods-per-deployment, default {DEFAULT_MAX_PODS_PER_DEPLOYMENT}); lower replicas or the layout, or split the deployment",
            limits.max_pods
        ),
    ));
}

pub(super) fn validate_rollout(role: &RoleSpec, at: &str, errors: &mut Vec<FieldError>) {
    let r = &role.rollout;
    let mut bounded = true;
    for (name, value) in [
        ("maxSurge", r.max_surge),
        ("maxUnavailable", r.max_unavailable),
        ("partition", r.partition),
    ] {
        if !(0..=MAX_ROLLOUT_GROUPS).contains(&value) {
            bounded = false;
            errors.push(FieldError::new(
                format!("{at}.rollout.{name}"),
                format_args!("is {value}; it must be between 0 and {MAX_ROLLOUT_GROUPS} groups"),
            ));
        }
    }
    if bounded && r.max_surge == 0 && r.max_unavailable == 0 {
        errors.push(FieldError::new(
            format!("{at}.rollout"),
            "sets maxSurge and maxUnavailable both to 0, so no group could ever be replaced; set maxSurge to 1 (needs one spare group of devices) or maxUnavailable to 1",
        ));
    }
}

/// The role's layout: degrees in bounds, expert dividing the world size, and the world size a
/// multiple of `devices_per_pod` (the role's devices per pod and the field that sets them),
/// when that is usable.
pub(super) fn validate_parallel(
    role: &RoleSpec,
    at: &str,
    devices_per_pod: Option<(i32, String)>,
    errors: &mut Vec<FieldError>,
) {
    let p = &role.parallel;
    let degrees = [
        ("tensor", p.tensor),
        ("pipeline", p.pipeline),
        ("data", p.data),
        ("expert", p.expert),
    ];
    let mut degrees_ok = true;
    for (name, degree) in degrees {
        if !(1..=MAX_PARALLEL_DEGREE).contains(&degree) {
            degrees_ok = false;
            errors.push(FieldError::new(
                format!("{at}.parallel.{name}"),
                format_args!("is {degree}; it must be between 1 and {MAX_PARALLEL_DEGREE}"),
            ));
        }
    }
    if !degrees_ok {
        return;
    }
    let world = p.world_size();
    if world % i64::from(p.expert) != 0 {
        errors.push(FieldError::new(
            format!("{at}.parallel.expert"),
            format_args!(
                "is {}; it must divide the world size (tensor × pipeline × data = {world})",
                p.expert
            ),
        ));
    }
    let Some((devices, field)) = devices_per_pod else {
        return;
    };
    let devices = i64::from(devices);
    if world < devices {
        errors.push(FieldError::new(
            format!("{at}.parallel"),
            format_args!(
                "gives a world size (tensor × pipeline × data) of {world}, smaller than {field} ({devices}); a group must fill whole pods: set devicesPerPod to {world} (for this role alone: {at}.accelerator.devicesPerPod) or enlarge the layout"
            ),
        ));
    } else if world % devices != 0 {
        errors.push(FieldError::new(
            format!("{at}.parallel"),
            format_args!(
                "gives a world size (tensor × pipeline × data) of {world}, not a multiple of {field} ({devices}); change the layout or devicesPerPod (for this role alone: {at}.accelerator.devicesPerPod)"
            ),
        ));
    }
}
