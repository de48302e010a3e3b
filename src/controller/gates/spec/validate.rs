//! Validate stage: the rules the CRD's CEL expresses, re-checked by the operator (objects stored
//! before a CRD upgrade added a rule are never re-validated by the API server, and a decode of a
//! stored object must never be trusted blindly), plus the licence gate. Pure functions: no
//! client. [`validate`] returns the [`ValidatedDeployment`] the builders take.
//! `tests/validation_table.rs` runs one table of cases through both this module and the
//! CRD's CEL rules and requires them to agree.

use crate::controller::validated::ValidatedDeployment;
use std::collections::BTreeMap;
use std::fmt;

use crate::api::{
    AcceleratorSpec, AcceleratorType, AcceptanceSpec, DeepInferDeployment, DeepInferDeploymentSpec,
    ModelSpec, RoleKind, RoleSpec, RuntimeSpec, DEFAULT_MAX_DEVICES_ASCEND,
    DEFAULT_MAX_DEVICES_NVIDIA, DEFAULT_MAX_PODS_PER_DEPLOYMENT, MAX_ACCEPTANCE_TIMEOUT_SECONDS,
    MAX_PARALLEL_DEGREE, MAX_REPLICAS, MAX_ROLLOUT_GROUPS, ROLE_NAMES,
};

/// Most devices one node offers, per accelerator type (`spec.accelerator.devicesPerPod` may not
/// exceed it), and most pods one resource may need. Set from the operator's flags; the CRD's CEL
/// rule uses the device defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Devices per NVIDIA node.
    pub nvidia: i32,
    /// Devices per Ascend node.
    pub ascend: i32,
    /// Pods one resource may need at once: every group of every role plus its surge groups. A
    /// spec past it stalls before anything is built, so no spec can exhaust the operator's memory.
    pub max_pods: i64,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        Self {
            nvidia: DEFAULT_MAX_DEVICES_NVIDIA,
            ascend: DEFAULT_MAX_DEVICES_ASCEND,
            max_pods: DEFAULT_MAX_PODS_PER_DEPLOYMENT,
        }
    }
}

impl DeviceLimits {
    /// Devices one node of `kind` offers.
    pub fn per_node(&self, kind: AcceleratorType) -> i32 {
        match kind {
            AcceleratorType::Nvidia => self.nvidia,
            AcceleratorType::Ascend => self.ascend,
        }
    }
}

/// One violated rule: the field (with indices, e.g. `spec.roles[1].parallel.expert`) and a message
/// that names that field and says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong and what to do; starts with the field.
    pub message: String,
}

impl FieldError {
    /// `message` is appended to the field path.
    fn new(field: impl Into<String>, message: impl fmt::Display) -> Self {
        let field = field.into();
        let message = format!("{field} {message}");
        Self { field, message }
    }
}

impl FieldError {
    /// The same error about the field whose value the checked one was read from (`source`).
    pub fn read_from(&mut self, source: &str) {
        self.message = self.message.replacen(&self.field, source, 1);
        self.field = source.to_string();
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FieldError {}

/// All messages joined, for a condition message or an event.
pub fn summarize(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Longest `metadata.name` whose child names (`<name>-accept-<run hash>-<rank>`, used as a
/// Job and in the `job-name` label) stay within Kubernetes' 63-character limit.
pub const MAX_NAME_LENGTH: usize = 36;

/// Checks the resource's own name: its children are named after it.
pub fn validate_name(name: &str) -> Result<(), FieldError> {
    if name.len() > MAX_NAME_LENGTH {
        return Err(FieldError::new(
            "metadata.name",
            format!(
                "is {} characters long; at most {MAX_NAME_LENGTH} are allowed because the operator names its Jobs, pods and Services after it (a label value holds 63); recreate the resource under a shorter name",
                name.len()
            ),
        ));
    }
    if !is_dns1035_label(name) {
        return Err(FieldError::new(
            "metadata.name",
            format!(
                "is {name:?}; it must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit), because the operator names Services and pod subdomains after it; recreate the resource under such a name"
            ),
        ));
    }
    Ok(())
}

/// Most characters a Job's name may have: it is also its pods' `job-name` label value.
pub const MAX_JOB_NAME_LENGTH: usize = 63;

/// Checks that the name of every acceptance Job (one per rank of a group) fits
/// [`MAX_JOB_NAME_LENGTH`] for every role (every role has a group in the acceptance run, its Jobs named as long as the judged role's);
/// otherwise the API server would refuse the Job. The CRD's CEL rule states the same bound as
/// name length plus the digits of the last rank ≤ 38.
pub fn validate_acceptance_job_names(
    name: &str,
    spec: &DeepInferDeploymentSpec,
) -> Result<(), FieldError> {
    use crate::controller::build;
    let Some((index, role, pods)) = spec
        .roles
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r, build::group_shape(spec, r).pods))
        .max_by_key(|(_, _, pods)| *pods)
    else {
        return Ok(());
    };
    // The run hash has a fixed width, so any revision and token give the same length.
    let last = build::AcceptanceNames::new(name, "", "").job(pods - 1);
    if last.len() <= MAX_JOB_NAME_LENGTH {
        return Ok(());
    }
    let longest = name.len().saturating_sub(last.len() - MAX_JOB_NAME_LENGTH);
    Err(FieldError::new(
        "metadata.name",
        format_args!(
            "is {} characters long, and role {} has {pods} pods per group: the acceptance Job of a group's last rank would be named {last} ({} characters), but a Job's name is also its pods' job-name label, at most {MAX_JOB_NAME_LENGTH}; use a name of at most {longest} characters, or fewer pods per group (spec.roles[{index}].parallel, or more devices per pod in {})",
            name.len(),
            role.name,
            last.len(),
            spec.device_shape(role).devices_per_pod_field(index)
        ),
    ))
}

/// `^[a-z]([-a-z0-9]*[a-z0-9])?$`: what a Service name and a pod subdomain must be.
pub fn is_dns1035_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.iter().all(inner)
}

/// Validation of a [`ValidatedDeployment`] under another spec.
impl ValidatedDeployment {
    /// The same resource under the spec of an earlier revision, validated again.
    pub fn with_spec(
        &self,
        spec: DeepInferDeploymentSpec,
        limits: &DeviceLimits,
    ) -> Result<Self, Vec<FieldError>> {
        let mut past = DeepInferDeployment::clone(self);
        past.spec = spec;
        validate(&past, limits).map(|v| v.placed_as_pod_groups(self.pod_groups))
    }
}

/// Validates the resource's name and spec; returns the [`ValidatedDeployment`] the builders take,
/// or every violation.
pub fn validate(
    did: &DeepInferDeployment,
    limits: &DeviceLimits,
) -> Result<ValidatedDeployment, Vec<FieldError>> {
    let mut errors = validate_spec(&did.spec, limits).err().unwrap_or_default();
    if let Err(e) = validate_name(&did.metadata.name.clone().unwrap_or_default()) {
        errors.insert(0, e);
    }
    if errors.is_empty() {
        let name = did.metadata.name.clone().unwrap_or_default();
        if let Err(e) = validate_acceptance_job_names(&name, &did.spec) {
            errors.push(e);
        }
    }
    let namespace = did.metadata.namespace.clone().unwrap_or_default();
    if namespace.is_empty() {
        errors.push(FieldError::new(
            "metadata.namespace",
            "is empty; DeepInferDeployment is namespaced: create it in a namespace",
        ));
    }
    let location = crate::controller::build::checkpoint_location(&did.spec);
    match (errors.is_empty(), location) {
        (true, Some((claim, checkpoint_dir))) => Ok(ValidatedDeployment::new(
            did.clone(),
            namespace,
            claim,
            checkpoint_dir,
        )),
        // validate_model already reported the missing source.
        _ => Err(errors),
    }
}

/// Checks `spec` against every rule of the CRD (CEL rules and schema bounds). Returns every
/// violation, not just the first.
pub fn validate_spec(
    spec: &DeepInferDeploymentSpec,
    limits: &DeviceLimits,
) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    validate_model(&spec.model, &mut errors);
    validate_runtime(&spec.runtime, &mut errors);
    validate_role_runtimes(&spec.runtime.roles, &spec.roles, &mut errors);
    let devices_per_pod = validate_accelerator(&spec.accelerator, limits, &mut errors);
    validate_roles(spec, devices_per_pod.is_some(), limits, &mut errors);
    if errors.is_empty() {
        validate_pod_count(spec, limits, &mut errors);
    }
    validate_acceptance(&spec.acceptance, &mut errors);
    validate_serving_command(spec, &mut errors);
    if let Some(scheduling) = &spec.scheduling {
        validate_scheduling(scheduling, &mut errors);
    }
    validate_pod_settings(spec, &mut errors);
    validate_service_owners(&spec.service_owners, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn validate_model(model: &ModelSpec, errors: &mut Vec<FieldError>) {
    if model.name.is_empty() {
        errors.push(FieldError::new(
            "spec.model.name",
            "is empty; set the hub id of the model, e.g. deepseek-ai/DeepSeek-V4.1-Flash-1017",
        ));
    }
    if model.license.is_empty() {
        errors.push(FieldError::new(
            "spec.model.license",
            "is empty; set the licence id the checkpoint is published under, e.g. mit",
        ));
    }
    let source = &model.source;
    match (&source.hub, &source.volume) {
        (Some(_), Some(_)) | (None, None) => errors.push(FieldError::new(
            "spec.model.source",
            "must set exactly one of hub (fetch a pinned revision) or volume (a PVC that already holds the checkpoint)",
        )),
        _ => {}
    }
    if let Some(hub) = &source.hub {
        if !is_lower_hex(&hub.revision, 40, 40) {
            errors.push(FieldError::new(
                "spec.model.source.hub.revision",
                format_args!(
                    "is {:?}; it must be a full 40-character lowercase hex commit id, not a branch or tag; copy the commit from the model's history page",
                    hub.revision
                ),
            ));
        }
        require_claim(&hub.claim_name, "spec.model.source.hub.claimName", errors);
    }
    if let Some(volume) = &source.volume {
        require_claim(
            &volume.claim_name,
            "spec.model.source.volume.claimName",
            errors,
        );
    }
}

fn require_claim(claim: &str, field: &str, errors: &mut Vec<FieldError>) {
    if claim.is_empty() {
        errors.push(FieldError::new(
            field,
            "is empty; name the PersistentVolumeClaim to use",
        ));
    }
}

fn validate_runtime(runtime: &RuntimeSpec, errors: &mut Vec<FieldError>) {
    for (field, probe) in [
        ("spec.runtime.startupProbe", &runtime.startup_probe),
        ("spec.runtime.readinessProbe", &runtime.readiness_probe),
        ("spec.runtime.livenessProbe", &runtime.liveness_probe),
    ] {
        let Some(probe) = probe else { continue };
        let http_host = probe.http_get.as_ref().and_then(|h| h.host.as_ref());
        let tcp_host = probe.tcp_socket.as_ref().and_then(|t| t.host.as_ref());
        if let Some(host) = http_host.or(tcp_host) {
            errors.push(FieldError::new(
                field,
                format_args!("names host {host:?}; a probe asks the engine's own pod; remove httpGet.host and tcpSocket.host (the kubelet would connect to that host instead)"),
            ));
        }
    }
    if !is_pinned_by_digest(&runtime.image) {
        errors.push(FieldError::new(
            "spec.runtime.image",
            format_args!(
                "is {:?}; it must be pinned by digest (<repository>@sha256:<64 hex>); a tag alone is refused; resolve the tag with `crane digest` or `docker buildx imagetools inspect`",
                runtime.image
            ),
        ));
    }
    if !is_lower_hex(&runtime.commit, 7, 40) {
        errors.push(FieldError::new(
            "spec.runtime.commit",
            format_args!(
                "is {:?}; it must be the runtime's git commit id (7 to 40 lowercase hex characters)",
                runtime.commit
            ),
        ));
    }
}

/// `spec.runtime.roles`: each entry names a role of `spec.roles`, once, and pins its image.
fn validate_role_runtimes(
    overrides: &[crate::api::RoleRuntime],
    roles: &[RoleSpec],
    errors: &mut Vec<FieldError>,
) {
    for (i, o) in overrides.iter().enumerate() {
        let at = format!("spec.runtime.roles[{i}]");
        if !roles.iter().any(|r| r.name == o.role) {
            errors.push(FieldError::new(
                format!("{at}.role"),
                format_args!(
                    "is {:?}, which is not a role of spec.roles; fix the name or remove the entry",
                    o.role
                ),
            ));
        }
        if overrides[..i].iter().any(|p| p.role == o.role) {
            errors.push(FieldError::new(
                format!("{at}.role"),
                format_args!(
                    "names {:?} a second time; each role may be named once; merge the duplicate entries",
                    o.role
                ),
            ));
        }
        if let Some(image) = o.image.as_deref().filter(|i| !is_pinned_by_digest(i)) {
            errors.push(FieldError::new(
                format!("{at}.image"),
                format_args!(
                    "is {image:?}; it must be pinned by digest (<repository>@sha256:<64 hex>); a tag alone is refused"
                ),
            ));
        }
    }
}

/// A Kubernetes label value: at most 63 characters of `[A-Za-z0-9-_.]`, starting and ending with
/// a letter or digit (or empty).
pub fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    v.len() <= 63
        && (b.is_empty()
            || (b.first().is_some_and(edge)
                && b.last().is_some_and(edge)
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))))
}

/// A Kubernetes label key: an optional DNS-subdomain prefix (at most 253) and `/`, then a name
/// that is a non-empty label value.
pub fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns1123_subdomain) && !name.is_empty() && is_label_value(name)
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated parts of lowercase letters,
/// digits and '-', each starting and ending with a letter or digit.
pub fn is_dns1123_subdomain(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 253
        && p.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn validate_scheduling(scheduling: &crate::api::SchedulingSpec, errors: &mut Vec<FieldError>) {
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
fn validate_pod_settings(spec: &DeepInferDeploymentSpec, errors: &mut Vec<FieldError>) {
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
fn validate_pod_fields(
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
fn validate_node_selector(
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
fn validate_selector_label(
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
fn validate_volumes(pod: &crate::api::PodSettings, at: &str, errors: &mut Vec<FieldError>) {
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

/// Device resources each accelerator type's pods may request (`spec.accelerator.resourceName`).
pub fn device_resources(kind: AcceleratorType) -> &'static [&'static str] {
    match kind {
        AcceleratorType::Nvidia => &["nvidia.com/gpu"],
        AcceleratorType::Ascend => &["huawei.com/Ascend910", "huawei.com/npu"],
    }
}

/// Returns devicesPerPod when it is usable for the per-role divisibility checks.
fn validate_accelerator(
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
            "spec.accelerator",
            "names both resourceName and deviceClassName, which exclude each other: devices come either as an extended resource or through DRA claims; remove one",
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
fn validate_roles(
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
fn validate_service_owners(
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
fn validate_worker_alone(roles: &[RoleSpec], errors: &mut Vec<FieldError>) {
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
fn validate_role_accelerator(
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
fn validate_pod_count(
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

fn validate_rollout(role: &RoleSpec, at: &str, errors: &mut Vec<FieldError>) {
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
fn validate_parallel(
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

fn validate_acceptance(acceptance: &AcceptanceSpec, errors: &mut Vec<FieldError>) {
    if acceptance.prompts.is_empty() && acceptance.prompts_from.is_none() {
        errors.push(FieldError::new(
            "spec.acceptance.prompts",
            "is empty and spec.acceptance.promptsFrom is unset; give at least one prompt in prompts, or a ConfigMap in promptsFrom",
        ));
    }
    for (i, prompt) in acceptance.prompts.iter().enumerate() {
        let at = format!("spec.acceptance.prompts[{i}]");
        if prompt.id.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.id"),
                "is empty; give the prompt a stable id",
            ));
        } else if prompt.id.chars().any(char::is_control) {
            errors.push(FieldError::new(
                format!("{at}.id"),
                format_args!("is {:?}; it must not contain control characters; it names the prompt in manifests, evidence keys and logs", prompt.id),
            ));
        } else if let Some(first) = acceptance.prompts[..i]
            .iter()
            .position(|q| q.id == prompt.id)
        {
            errors.push(FieldError::new(
                format!("{at}.id"),
                format_args!(
                    "repeats id {:?} of spec.acceptance.prompts[{first}]; prompt ids must be unique; rename the duplicate",
                    prompt.id
                ),
            ));
        }
        let so = &prompt.structured_output;
        let kinds = [so.json.is_some(), so.regex.is_some(), so.grammar.is_some()];
        if kinds.iter().filter(|set| **set).count() != 1 {
            errors.push(FieldError::new(
                format!("{at}.structuredOutput"),
                "must set exactly one of json, regex or grammar",
            ));
        }
        if so.json.as_ref().is_some_and(|schema| !schema.is_object()) {
            errors.push(FieldError::new(
                format!("{at}.structuredOutput.json"),
                "must be a JSON Schema object",
            ));
        }
        if let Some(sampling) = &prompt.sampling {
            let own = crate::api::AcceptanceSampling::from(sampling);
            for (field, message) in own.problems("the value of spec.acceptance.sampling") {
                errors.push(FieldError::new(format!("{at}.sampling.{field}"), message));
            }
        }
    }
    if let Some(sampling) = &acceptance.sampling {
        for (field, message) in sampling.problems("the default") {
            errors.push(FieldError::new(
                format!("spec.acceptance.sampling.{field}"),
                message,
            ));
        }
    }
    if !(1..=MAX_ACCEPTANCE_TIMEOUT_SECONDS).contains(&acceptance.timeout_seconds) {
        errors.push(FieldError::new(
            "spec.acceptance.timeoutSeconds",
            format_args!(
                "is {}; it must be between 1 and {MAX_ACCEPTANCE_TIMEOUT_SECONDS}",
                acceptance.timeout_seconds
            ),
        ));
    }
    if acceptance
        .engine
        .as_ref()
        .is_some_and(|engine| engine.command.is_empty())
    {
        errors.push(FieldError::new(
            "spec.acceptance.engine.command",
            "is empty; give the program and its arguments, or remove engine to use the default",
        ));
    } else if let Some(problem) = acceptance
        .engine
        .as_ref()
        .and_then(|engine| crate::acceptance::engine::template_problem(&engine.command))
    {
        // Same as the CEL rules on `EngineCommand.command`.
        errors.push(FieldError::new("spec.acceptance.engine.command", problem));
    }
}

/// `spec.runtime.command` is what serving pods run: the acceptance template must run it too
/// (`{serving_command}`), or the verdict would be about another program. Same as the CEL rule on
/// the spec.
fn validate_serving_command(spec: &DeepInferDeploymentSpec, errors: &mut Vec<FieldError>) {
    let runs_it = spec.acceptance.engine.as_ref().is_some_and(|engine| {
        engine
            .command
            .iter()
            .any(|a| a == crate::contract::placeholder::SERVING_COMMAND)
    });
    if !spec.runtime.command.is_empty() && !runs_it {
        errors.push(FieldError::new(
            "spec.runtime.command",
            "is set, but spec.acceptance.engine.command (default: DeepInfer's offline example) does not hold {serving_command} as a whole argument, so the acceptance run would not run the command the pods serve with; add \"{serving_command}\" to spec.acceptance.engine.command where the engine's program goes, or remove spec.runtime.command",
        ));
    }
}

/// Same as the CEL `matches('^[^@ ]+@sha256:[0-9a-f]{64}$')`.
fn is_pinned_by_digest(image: &str) -> bool {
    let Some((repository, digest)) = image.split_once('@') else {
        return false;
    };
    !repository.is_empty()
        && !repository.contains(' ')
        && digest
            .strip_prefix("sha256:")
            .is_some_and(|hex| is_lower_hex(hex, 64, 64))
}

/// Same as the CEL `matches('^[0-9a-f]{min,max}$')`.
fn is_lower_hex(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn kind_name(kind: AcceleratorType) -> &'static str {
    match kind {
        AcceleratorType::Nvidia => "NVIDIA",
        AcceleratorType::Ascend => "Ascend",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_keys_follow_kubernetes_syntax() {
        for ok in ["", "NVIDIA-H200", "a.b_c-1", &"a".repeat(63)] {
            assert!(is_label_value(ok), "{ok:?}");
        }
        for bad in ["NVIDIA H200", "-a", "a-", "ä", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
        for ok in ["nvidia.com/gpu.clique", "huawei.com/super-pod-id", "clique"] {
            assert!(is_label_key(ok), "{ok:?}");
        }
        for bad in ["not a label key", "/x", "Nvidia.com/x", "a/", "a/b/c"] {
            assert!(!is_label_key(bad), "{bad:?}");
        }
        for (name, ok) in [
            ("flash", true),
            ("f-2", true),
            ("flash.v2", false),
            ("1flash", false),
            ("flash-", false),
        ] {
            assert_eq!(is_dns1035_label(name), ok, "{name}");
        }
    }

    #[test]
    fn a_spec_needing_more_pods_than_the_bound_is_refused_naming_replicas() {
        let mut spec: crate::api::DeepInferDeploymentSpec = serde_json::from_value(serde_json::json!({
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": format!("r.example/deepinfer@sha256:{}", "0a".repeat(32)),
                        "commit": "0123456789abcdef0123456789abcdef01234567"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}],
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
        }))
        .expect("valid spec");
        spec.roles[0].parallel.tensor = 64; // 8 pods per group
        spec.roles[0].replicas = 255; // 255 + 1 surge groups = 2048 pods: at the bound
        assert!(validate_spec(&spec, &DeviceLimits::default()).is_ok());
        spec.roles[0].replicas = 256;
        let errors = validate_spec(&spec, &DeviceLimits::default()).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.roles[0].replicas");
        assert!(
            errors[0].message.contains("--max-pods-per-deployment"),
            "{}",
            errors[0]
        );
        // A layout that alone would mean a billion pods is refused the same way, without overflow.
        spec.roles[0].replicas = 1;
        spec.roles[0].parallel.tensor = MAX_PARALLEL_DEGREE;
        spec.roles[0].parallel.pipeline = MAX_PARALLEL_DEGREE;
        spec.roles[0].parallel.data = MAX_PARALLEL_DEGREE;
        spec.roles[0].parallel.expert = 1;
        let errors = validate_spec(&spec, &DeviceLimits::default()).unwrap_err();
        assert!(
            errors.iter().any(|e| e.field == "spec.roles[0].replicas"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_name_too_long_for_child_names_is_refused_naming_the_field() {
        assert!(validate_name(&"a".repeat(MAX_NAME_LENGTH)).is_ok());
        let err = validate_name(&"a".repeat(MAX_NAME_LENGTH + 1)).expect_err("too long");
        assert_eq!(err.field, "metadata.name");
        assert!(
            err.message
                .starts_with("metadata.name is 37 characters long"),
            "{}",
            err.message
        );
    }

    #[test]
    fn device_limits_default_to_the_crd_values() {
        let limits = DeviceLimits::default();
        assert_eq!(limits.per_node(AcceleratorType::Nvidia), 8);
        assert_eq!(limits.per_node(AcceleratorType::Ascend), 16);
        for kind in [AcceleratorType::Nvidia, AcceleratorType::Ascend] {
            assert_eq!(limits.per_node(kind), kind.default_max_devices_per_node());
        }
    }

    #[test]
    fn digest_and_hex_matchers_follow_the_cel_patterns() {
        let digest = "a".repeat(64);
        assert!(is_pinned_by_digest(&format!(
            "r.example/deepinfer@sha256:{digest}"
        )));
        assert!(is_pinned_by_digest(&format!(
            "r.example:5000/deepinfer:v1@sha256:{digest}"
        )));
        assert!(!is_pinned_by_digest(&format!("@sha256:{digest}")));
        assert!(!is_pinned_by_digest(&format!(
            "r.example/a b@sha256:{digest}"
        )));
        assert!(!is_pinned_by_digest(&format!(
            "r.example/deepinfer@sha256:{}",
            "A".repeat(64)
        )));
        assert!(!is_pinned_by_digest(&format!("a@b@sha256:{digest}")));
        assert!(!is_pinned_by_digest("r.example/deepinfer:v1"));
        assert!(is_lower_hex("0123abc", 7, 40));
        assert!(!is_lower_hex("0123ab", 7, 40));
        assert!(!is_lower_hex("main", 40, 40));
    }

    #[test]
    fn a_rollout_that_could_never_replace_a_group_is_refused_naming_the_field() {
        let role = |surge: i32, unavailable: i32| RoleSpec {
            name: "worker".into(),
            replicas: 2,
            scaling: crate::api::RoleScaling::default(),
            parallel: crate::api::ParallelSpec::default(),
            rollout: crate::api::RolloutSpec {
                max_surge: surge,
                max_unavailable: unavailable,
                partition: 0,
            },
            pod: None,
            accelerator: None,
        };
        let check = |r: RoleSpec| {
            let accelerator = serde_json::json!({"type": "NVIDIA", "devicesPerPod": 1});
            let mut spec = spec_of(accelerator, serde_json::json!([]), serde_json::json!({}));
            spec.roles = vec![r];
            let mut errors = Vec::new();
            validate_roles(&spec, true, &DeviceLimits::default(), &mut errors);
            errors
        };
        assert!(check(role(1, 0)).is_empty(), "the defaults are valid");
        assert!(check(role(0, 1)).is_empty(), "no surge on a full cluster");
        let stuck = check(role(0, 0));
        assert_eq!(stuck.len(), 1, "{stuck:?}");
        assert_eq!(stuck[0].field, "spec.roles[0].rollout");
        assert!(
            stuck[0].message.contains("maxUnavailable to 1"),
            "{}",
            stuck[0]
        );
        let negative = check(role(-1, 1));
        assert_eq!(negative[0].field, "spec.roles[0].rollout.maxSurge");
        assert!(negative[0].message.contains("is -1"), "{}", negative[0]);
    }

    /// Errors of a spec whose accelerator, roles and `spec.pod` are given as JSON.
    fn pod_errors(
        accelerator: serde_json::Value,
        roles: serde_json::Value,
        pod: serde_json::Value,
    ) -> Vec<FieldError> {
        validate_spec(&spec_of(accelerator, roles, pod), &DeviceLimits::default())
            .err()
            .unwrap_or_default()
    }

    /// A spec whose accelerator, roles and `spec.pod` are given as JSON.
    fn spec_of(
        accelerator: serde_json::Value,
        roles: serde_json::Value,
        pod: serde_json::Value,
    ) -> DeepInferDeploymentSpec {
        serde_json::from_value(serde_json::json!({
            "model": {"name": "m", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "flash"}}},
            "runtime": {"image": format!("r.example/e@sha256:{}", "0".repeat(64)), "commit": "0123456"},
            "accelerator": accelerator,
            "roles": roles,
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]},
            "pod": pod
        }))
        .expect("spec")
    }

    #[test]
    fn each_roles_device_shape_is_checked_naming_the_field_it_is_written_in() {
        let nvidia = serde_json::json!({"type": "NVIDIA", "product": "NVIDIA-H200"});
        let errors = |roles: serde_json::Value| {
            pod_errors(nvidia.clone(), roles, serde_json::json!({}))
                .into_iter()
                .map(|e| (e.field, e.message))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            errors(serde_json::json!([
                {"name": "prefill", "replicas": 1, "parallel": {"tensor": 4},
                 "accelerator": {"devicesPerPod": 4}},
                {"name": "decode", "replicas": 1, "parallel": {"tensor": 16},
                 "accelerator": {"product": "NVIDIA-B200"}}
            ])),
            [],
            "prefill of 4 GPUs per pod beside decode of 8 on another product"
        );
        // The same prefill layout under the deployment's 8 devices per pod is refused, naming
        // the deployment's field; under the role's own 6, naming the role's.
        let wide = errors(serde_json::json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 4}}
        ]));
        assert_eq!(wide.len(), 1, "{wide:?}");
        assert_eq!(wide[0].0, "spec.roles[0].parallel");
        assert!(
            wide[0]
                .1
                .contains("smaller than spec.accelerator.devicesPerPod (8)")
                && wide[0]
                    .1
                    .contains("spec.roles[0].accelerator.devicesPerPod"),
            "{}",
            wide[0].1
        );
        let own = errors(serde_json::json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8},
             "accelerator": {"devicesPerPod": 6}}
        ]));
        assert_eq!(own.len(), 1, "{own:?}");
        assert!(
            own[0]
                .1
                .contains("not a multiple of spec.roles[0].accelerator.devicesPerPod (6)"),
            "{}",
            own[0].1
        );
        let above = errors(serde_json::json!([
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 16},
             "accelerator": {"devicesPerPod": 16}}
        ]));
        assert_eq!(above.len(), 1, "{above:?}");
        assert_eq!(above[0].0, "spec.roles[0].accelerator.devicesPerPod");
        assert!(
            above[0]
                .1
                .contains("more than the 8 devices one NVIDIA node has"),
            "{}",
            above[0].1
        );
        let zero = errors(serde_json::json!([
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8},
             "accelerator": {"devicesPerPod": 0}}
        ]));
        assert_eq!(
            zero.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["spec.roles[0].accelerator.devicesPerPod"],
            "a role's 0 is refused once, not again as a division"
        );
        // A role's node selector is held to the role's own product.
        let selector = errors(serde_json::json!([
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8},
             "accelerator": {"product": "NVIDIA-B200"},
             "pod": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}}
        ]));
        assert_eq!(selector.len(), 1, "{selector:?}");
        assert_eq!(selector[0].0, "spec.roles[0].pod.nodeSelector");
        assert!(
            selector[0]
                .1
                .contains("spec.roles[0].accelerator.product already selects"),
            "{}",
            selector[0].1
        );
    }

    #[test]
    fn pod_settings_are_checked_naming_the_field_and_the_fix() {
        let worker =
            serde_json::json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]);
        let nvidia = serde_json::json!({"type": "NVIDIA", "product": "NVIDIA-H200"});
        assert!(pod_errors(
            nvidia.clone(),
            worker.clone(),
            serde_json::json!({
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "a"},
                "priorityClassName": "high", "serviceAccountName": "engine",
                "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}, {"name": "data", "mountPath": "/deepinfer-data"}]
            })
        )
        .is_empty());

        let conflict = pod_errors(
            nvidia.clone(),
            worker.clone(),
            serde_json::json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}}),
        );
        assert_eq!(conflict.len(), 1, "{conflict:?}");
        assert_eq!(conflict[0].field, "spec.pod.nodeSelector");
        for needle in ["NVIDIA-B200", "spec.accelerator.product", "NVIDIA-H200"] {
            assert!(
                conflict[0].message.contains(needle),
                "{}",
                conflict[0].message
            );
        }
        let ascend = pod_errors(
            serde_json::json!({"type": "Ascend", "devicesPerPod": 8}),
            serde_json::json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8},
                                "pod": {"nodeSelector": {"accelerator": "nvidia"}}}]),
            serde_json::json!({}),
        );
        assert_eq!(ascend[0].field, "spec.roles[0].pod.nodeSelector");
        assert!(ascend[0].message.contains("spec.accelerator.type"));

        let bad = pod_errors(
            nvidia.clone(),
            worker.clone(),
            serde_json::json!({
                "priorityClassName": "High",
                "volumes": [{"name": "host", "hostPath": {"path": "/var"}},
                            {"name": "checkpoint", "emptyDir": {}},
                            {"name": "nfs", "nfs": {"server": "s", "path": "/"}}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/shm"},
                                 {"name": "host", "mountPath": "/models/extra"},
                                 {"name": "nowhere", "mountPath": "/deepinfer"}]
            }),
        );
        let fields: Vec<(&str, &str)> = bad
            .iter()
            .map(|e| (e.field.as_str(), e.message.as_str()))
            .collect();
        let has = |field: &str, needle: &str| {
            fields
                .iter()
                .any(|(f, m)| *f == field && m.starts_with(field) && m.contains(needle))
        };
        assert!(has("spec.pod.priorityClassName", "\"High\""), "{fields:#?}");
        assert!(has("spec.pod.volumes", "entry 0 (\"host\")"), "{fields:#?}");
        assert!(has("spec.pod.volumes", "hostPath"), "{fields:#?}");
        assert!(
            has("spec.pod.volumes", "entry 1 is named \"checkpoint\""),
            "{fields:#?}"
        );
        assert!(has("spec.pod.volumes", "entry 2 (\"nfs\")"), "{fields:#?}");
        assert!(
            has("spec.pod.volumeMounts", "entry 0 mounts \"dshm\""),
            "{fields:#?}"
        );
        assert!(
            has("spec.pod.volumeMounts", "at or under /models"),
            "{fields:#?}"
        );
        assert!(
            has("spec.pod.volumeMounts", "at or under /deepinfer"),
            "{fields:#?}"
        );
        assert!(
            has("spec.pod.volumeMounts", "volume \"nowhere\", which is not among the volumes of role worker (spec.pod.volumes)"),
            "{fields:#?}"
        );
        assert_eq!(bad.len(), 8, "{fields:#?}");

        // A role's mounts are checked against its effective volumes: its own if it has any.
        let role_mounts = pod_errors(
            nvidia,
            serde_json::json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8},
                                "pod": {"volumes": [{"name": "other", "emptyDir": {}}]}}]),
            serde_json::json!({"volumes": [{"name": "cache", "emptyDir": {}}],
                               "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}),
        );
        assert_eq!(role_mounts.len(), 1, "{role_mounts:?}");
        assert_eq!(role_mounts[0].field, "spec.pod.volumeMounts");
        assert!(role_mounts[0].message.contains("spec.roles[0].pod.volumes"));
    }

    #[test]
    fn a_valid_resource_carries_what_validation_established() {
        let did: DeepInferDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferDeployment",
            "metadata": {"name": "flash"},
            "spec": {
                "model": {"name": "m", "license": "mit",
                          "source": {"volume": {"claimName": "ckpt", "path": "/models/flash/"}}},
                "runtime": {"image": format!("r.example/e@sha256:{}", "0".repeat(64)), "commit": "0123456"},
                "accelerator": {"type": "NVIDIA"},
                "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}],
                "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
            }
        }))
        .expect("object");
        let errors = validate(&did, &DeviceLimits::default()).expect_err("no namespace");
        assert_eq!(errors[0].field, "metadata.namespace");
        let mut placed = did.clone();
        placed.metadata.namespace = Some("serving".into());
        let valid = validate(&placed, &DeviceLimits::default()).expect("valid");
        assert_eq!(
            (
                valid.namespace.as_str(),
                valid.claim.as_str(),
                valid.checkpoint_dir.as_str()
            ),
            ("serving", "ckpt", "models/flash")
        );
        let mut bad = placed.spec.clone();
        bad.roles[0].parallel.tensor = 3;
        let errors = valid
            .with_spec(bad, &DeviceLimits::default())
            .expect_err("an earlier revision is validated again");
        assert_eq!(errors[0].field, "spec.roles[0].parallel");
    }
}
