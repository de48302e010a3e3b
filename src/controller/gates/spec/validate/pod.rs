//! The pod settings: scheduling, node selectors, volumes.

use std::collections::BTreeMap;

use super::shared::*;
use crate::api::*;

pub(super) fn validate_scheduling(
    scheduling: &crate::api::SchedulingSpec,
    errors: &mut Vec<FieldError>,
) {
    if let Some(name) = scheduling
        .scheduler_name
        .as_deref()
        .filter(|n| !is_dns1123_subdomain(n))
    {
        errors.push(FieldError::new(
            "spec.scheduling.schedulerName",
            format_args!("is {name:?}; it must be a scheduler's name (lowercase letters, digits, '-' and '.'), e.g. volcano or kai-scheduler, or be left out for the default scheduler"),
        ));
    }
    for (field, map, values_are_labels) in [
        ("spec.scheduling.podLabels", &scheduling.pod_labels, true),
        (
            "spec.scheduling.podAnnotations",
            &scheduling.pod_annotations,
            false,
        ),
    ] {
        if map.len() > 32 {
            errors.push(FieldError::new(
                field,
                format_args!("has {} entries; at most 32 are allowed", map.len()),
            ));
        }
        for (key, value) in map {
            if key.starts_with("deepinfer.io/") {
                errors.push(FieldError::new(
                    field,
                    format_args!("key {key:?}: keys under deepinfer.io/ are set by the operator; use another prefix"),
                ));
            } else if !values_are_labels && key.starts_with("ascend.kubectl.kubernetes.io/") {
                errors.push(FieldError::new(
                    field,
                    format_args!("key {key:?}: keys under ascend.kubectl.kubernetes.io/ are the Ascend device plugin's record of the devices it allocated, which the rank table is built from; remove them"),
                ));
            } else if !is_label_key(key) {
                errors.push(FieldError::new(
                    field,
                    format_args!("key {key:?} is not a valid key ([prefix/]name, the name at most 63 letters, digits, '-', '_' or '.')"),
                ));
            } else if values_are_labels && !is_label_value(value) {
                errors.push(FieldError::new(
                    field,
                    format_args!("value {value:?} of {key:?} is not a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"),
                ));
            }
        }
    }
}

/// `spec.pod` and every `spec.roles[].pod` (the CRD's CEL rules and bounds on
/// [`crate::api::PodSettings`]), then, per role, that each effective mount names one of the
/// role's effective volumes (a cross-field rule the CRD leaves to the operator: the API server
/// would refuse the pods).
pub(super) fn validate_pod_settings(spec: &DeepInferDeploymentSpec, errors: &mut Vec<FieldError>) {
    let deployment_product = spec
        .accelerator
        .product
        .as_deref()
        .map(|p| (p, "spec.accelerator.product".to_string()));
    if let Some(pod) = &spec.pod {
        validate_pod_fields(
            pod,
            "spec.pod",
            &spec.accelerator,
            deployment_product,
            errors,
        );
    }
    for (i, role) in spec.roles.iter().enumerate() {
        let shape = spec.device_shape(role);
        let product = shape
            .product
            .as_deref()
            .map(|p| (p, shape.product_field(i)));
        if let Some(pod) = &role.pod {
            validate_pod_fields(
                pod,
                &format!("spec.roles[{i}].pod"),
                &spec.accelerator,
                product.clone(),
                errors,
            );
        }
        // A role of its own product whose pods take spec.pod's node selector.
        let inherits = role.pod.as_ref().is_none_or(|p| p.node_selector.is_none());
        let selector = spec.pod.as_ref().and_then(|p| p.node_selector.as_ref());
        if let (true, true, Some(selector)) = (shape.own_product, inherits, selector) {
            let key = spec.accelerator.kind.product_label_key();
            validate_selector_label(selector, "spec.pod", key, product, errors);
        }
    }
    let mut reported = std::collections::BTreeSet::new();
    for (i, role) in spec.roles.iter().enumerate() {
        let own = |pick: fn(&crate::api::PodSettings) -> bool| role.pod.as_ref().is_some_and(pick);
        let mounts_at = if own(|p| p.volume_mounts.is_some()) {
            format!("spec.roles[{i}].pod.volumeMounts")
        } else {
            "spec.pod.volumeMounts".to_string()
        };
        let volumes_at = if own(|p| p.volumes.is_some()) {
            format!("spec.roles[{i}].pod.volumes")
        } else {
            "spec.pod.volumes".to_string()
        };
        let settings = spec.pod_settings(role);
        let volumes = settings.volumes.unwrap_or_default();
        for (j, m) in settings.volume_mounts.iter().flatten().enumerate() {
            let reserved = crate::api::RESERVED_VOLUME_NAMES.contains(&m.name.as_str());
            if reserved || volumes.iter().any(|v| v.name == m.name) {
                continue;
            }
            if reported.insert((mounts_at.clone(), j)) {
                errors.push(FieldError::new(
                    mounts_at.clone(),
                    format_args!(
                        "entry {j} mounts volume {:?}, which is not among the volumes of role {} ({volumes_at}); add the volume there, or fix the name",
                        m.name, role.name
                    ),
                ));
            }
        }
    }
}

/// One `PodSettings` at `at` (`spec.pod` or `spec.roles[i].pod`), whose pods select `product`
/// (its value and the field that sets it).
pub(super) fn validate_pod_fields(
    pod: &crate::api::PodSettings,
    at: &str,
    accelerator: &AcceleratorSpec,
    product: Option<(&str, String)>,
    errors: &mut Vec<FieldError>,
) {
    let mut bound = |field: &str, len: usize, max: usize| {
        if len > max {
            errors.push(FieldError::new(
                format!("{at}.{field}"),
                format_args!("has {len} entries; at most {max} are allowed"),
            ));
        }
    };
    fn len<T>(v: &Option<Vec<T>>) -> usize {
        v.as_ref().map_or(0, Vec::len)
    }
    bound("imagePullSecrets", len(&pod.image_pull_secrets), 16);
    bound("tolerations", len(&pod.tolerations), 32);
    bound(
        "nodeSelector",
        pod.node_selector.as_ref().map_or(0, BTreeMap::len),
        32,
    );
    bound("volumes", len(&pod.volumes), 16);
    bound("volumeMounts", len(&pod.volume_mounts), 16);
    bound(
        "topologySpreadConstraints",
        len(&pod.topology_spread_constraints),
        8,
    );
    if let Some(selector) = &pod.node_selector {
        validate_node_selector(selector, at, accelerator, product, errors);
    }
    for (field, name) in [
        ("priorityClassName", &pod.priority_class_name),
        ("serviceAccountName", &pod.service_account_name),
    ] {
        if let Some(name) = name.as_deref().filter(|n| !is_dns1123_subdomain(n)) {
            errors.push(FieldError::new(
                format!("{at}.{field}"),
                format_args!("is {name:?}; it must be an object's name (a DNS subdomain: lowercase letters, digits, '-' and '.', at most 253 characters)"),
            ));
        }
    }
    validate_volumes(pod, at, errors);
}

/// `nodeSelector` keys the accelerator already selects must keep its values: the type's base
/// label, and the product label of `product` (its value and the field that sets it).
pub(super) fn validate_node_selector(
    selector: &BTreeMap<String, String>,
    at: &str,
    accelerator: &AcceleratorSpec,
    product: Option<(&str, String)>,
    errors: &mut Vec<FieldError>,
) {
    let (key, value) = accelerator.kind.base_node_label();
    let from = "spec.accelerator.type".to_string();
    validate_selector_label(selector, at, key, Some((value, from)), errors);
    let key = accelerator.kind.product_label_key();
    validate_selector_label(selector, at, key, product, errors);
}

/// The node selector of the pod settings at `at` sets label `key` to `wanted`'s value (set by
/// `wanted`'s field) or not at all.
pub(super) fn validate_selector_label(
    selector: &BTreeMap<String, String>,
    at: &str,
    key: &str,
    wanted: Option<(&str, String)>,
    errors: &mut Vec<FieldError>,
) {
    let Some((value, from)) = wanted else {
        return;
    };
    if let Some(given) = selector.get(key).filter(|given| given.as_str() != value) {
        errors.push(FieldError::new(
            format!("{at}.nodeSelector"),
            format_args!(
                "sets {key}={given:?}, but {from} already selects {key}={value:?}; remove the key from {at}.nodeSelector, or change {from}"
            ),
        ));
    }
}

/// Volumes of a type the restricted Pod Security Standard allows, none named or mounted where
/// the operator's own are.
pub(super) fn validate_volumes(
    pod: &crate::api::PodSettings,
    at: &str,
    errors: &mut Vec<FieldError>,
) {
    use crate::api::{ALLOWED_VOLUME_TYPES, RESERVED_MOUNT_PATHS, RESERVED_VOLUME_NAMES};
    for (j, volume) in pod.volumes.iter().flatten().enumerate() {
        let fields = serde_json::to_value(volume).unwrap_or_default();
        let set = |t: &str| fields.get(t).is_some_and(|v| !v.is_null());
        if set("hostPath") || !ALLOWED_VOLUME_TYPES.iter().any(|t| set(t)) {
            errors.push(FieldError::new(
                format!("{at}.volumes"),
                format_args!(
                    "entry {j} ({:?}) is not of a volume type the restricted Pod Security Standard allows ({}); hostPath and other node or network volumes are refused; use a PersistentVolumeClaim instead",
                    volume.name,
                    ALLOWED_VOLUME_TYPES.join(", ")
                ),
            ));
        }
        if RESERVED_VOLUME_NAMES.contains(&volume.name.as_str()) {
            errors.push(FieldError::new(
                format!("{at}.volumes"),
                format_args!(
                    "entry {j} is named {:?}, the name of one of the operator's own volumes ({}); rename it (and its volumeMounts)",
                    volume.name,
                    RESERVED_VOLUME_NAMES.join(", ")
                ),
            ));
        }
    }
    for (j, m) in pod.volume_mounts.iter().flatten().enumerate() {
        if RESERVED_VOLUME_NAMES.contains(&m.name.as_str()) {
            errors.push(FieldError::new(
                format!("{at}.volumeMounts"),
                format_args!(
                    "entry {j} mounts {:?}, one of the operator's own volumes ({}); mount a volume of volumes instead",
                    m.name,
                    RESERVED_VOLUME_NAMES.join(", ")
                ),
            ));
        }
        if let Some(dir) = RESERVED_MOUNT_PATHS
            .iter()
            .find(|dir| m.mount_path == **dir || m.mount_path.starts_with(&format!("{dir}/")))
        {
            errors.push(FieldError::new(
                format!("{at}.volumeMounts"),
                format_args!(
                    "entry {j} mounts at {:?}, at or under {dir}, where the operator mounts the checkpoint or its own files; choose another directory",
                    m.mount_path
                ),
            ));
        }
    }
}
