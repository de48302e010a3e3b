//! Spec types of `DeepInferDeployment`. CEL rules on these types are the same rules the
//! operator's validate stage enforces (see `controller::validate`); both name the field and the fix.

use crate::api::role_kind::RoleKind;
use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, Probe, ResourceRequirements, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use kube::core::Reason;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DeepInferDeploymentStatus;

/// Devices per pod when `spec.accelerator.devicesPerPod` is not set (one full 8-device node).
pub const DEFAULT_DEVICES_PER_POD: i32 = 8;
/// Most devices one NVIDIA node offers (HGX/DGX boards carry 8 GPUs).
pub const DEFAULT_MAX_DEVICES_NVIDIA: i32 = 8;
/// Most devices one Ascend node offers (Atlas 800T A2 / A3 nodes carry up to 16 NPUs).
pub const DEFAULT_MAX_DEVICES_ASCEND: i32 = 16;
/// Largest degree of each parallel dimension (tensor, pipeline, data, expert).
pub const MAX_PARALLEL_DEGREE: i32 = 1024;
/// Longest acceptance run, in seconds (one day).
pub const MAX_ACCEPTANCE_TIMEOUT_SECONDS: i32 = 86400;
/// Most groups `spec.roles[].rollout.maxSurge` / `maxUnavailable` may name.
pub const MAX_ROLLOUT_GROUPS: i32 = 64;
/// Most serving groups one role may ask for (the CRD's bound on `replicas`).
pub const MAX_REPLICAS: i32 = 1024;
/// Default bound on the pods one resource may need (`--max-pods-per-deployment`): every group of
/// every role, plus the surge groups of a rollout.
pub const DEFAULT_MAX_PODS_PER_DEPLOYMENT: i64 = 2048;
/// Most entries of `spec.serviceOwners`.
pub const MAX_SERVICE_OWNERS: usize = 16;
/// Longest value of `spec.serviceOwners`, in characters.
pub const MAX_SERVICE_OWNER_LENGTH: usize = 256;
/// Roles a serving group may take.
pub const ROLE_NAMES: [&str; 4] = [
    RoleKind::Worker.as_str(),
    RoleKind::Prefill.as_str(),
    RoleKind::Decode.as_str(),
    RoleKind::Vision.as_str(),
];

/// CEL for the effective devices per pod of role `r` (`spec.roles[].accelerator.devicesPerPod`,
/// else `spec.accelerator.devicesPerPod`, else the default), as
/// [`DeepInferDeploymentSpec::device_shape`] computes it, for rules on the spec.
macro_rules! cel_devices_per_pod {
    () => {
        "((has(r.accelerator) && has(r.accelerator.devicesPerPod)) ? r.accelerator.devicesPerPod : (has(self.accelerator.devicesPerPod) ? self.accelerator.devicesPerPod : 8))"
    };
}

/// [`cel_devices_per_pod`] for rules on the whole object.
macro_rules! cel_root_devices_per_pod {
    () => {
        "((has(r.accelerator) && has(r.accelerator.devicesPerPod)) ? r.accelerator.devicesPerPod : (has(self.spec.accelerator.devicesPerPod) ? self.spec.accelerator.devicesPerPod : 8))"
    };
}

/// CEL: role `r` sets its own product (`spec.roles[].accelerator.product`).
const CEL_ROLE_PRODUCT: &str = "(has(r.accelerator) && has(r.accelerator.product))";

/// Desired state of a DeepInfer serving deployment: which checkpoint, which runtime, on which
/// accelerators, in which parallel layout, and what it must pass before it is called Ready.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "deepinfer.io",
    version = "v1alpha1",
    kind = "DeepInferDeployment",
    plural = "deepinferdeployments",
    shortname = "did",
    namespaced,
    status = "DeepInferDeploymentStatus",
    // What on-call reads first: Ready, Phase, ready/desired groups, the serving revision and
    // the Ready condition's reason; the model and accelerator in `-o wide`.
    printcolumn = r#"{"name":"Model","type":"string","priority":1,"jsonPath":".spec.model.name"}"#,
    printcolumn = r#"{"name":"Accelerator","type":"string","priority":1,"jsonPath":".spec.accelerator.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Available","type":"string","description":"Every role serves at least the groups its rollout allows, whatever revision is being judged","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Groups","type":"string","description":"Ready serving groups over desired groups, every role","jsonPath":".status.groups"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","description":"The revision that serves (short form, as in pod names)","jsonPath":".status.servingRevision"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","description":"Reason of the Ready condition","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // Same bound as `controller::validate::MAX_NAME_LENGTH`; the validation table checks both.
    validation = Rule::new("size(self.metadata.name) <= 36")
        .message("metadata.name is longer than 36 characters, the most that leaves room for the names of the Jobs, pods and Services the operator derives from it; recreate the resource under a shorter name")
        .reason(Reason::FieldValueInvalid),
    // Same pattern as `controller::validate::is_dns1035_label`: children's Service names and pod
    // subdomains must be DNS-1035 labels.
    validation = Rule::new("self.metadata.name.matches('^[a-z][-a-z0-9]*$') && !self.metadata.name.endsWith('-')")
        .message("metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit), because the operator names Services and pod subdomains after it; recreate the resource under such a name")
        .reason(Reason::FieldValueInvalid),
    // Same bound as `controller::validate::validate_acceptance_job_names`: the acceptance Job of
    // a group's last rank, `<name>-accept-<16 hex>-<rank>`, is also its pods' job-name label (at
    // most 63 characters), so the name's length plus the digits of that rank is at most 38. Every
    // role is held to it: every role has a group, with Job names of that length, in the acceptance run.
    validation = Rule::new(concat!(
        "self.spec.roles.all(r, ", cel_root_devices_per_pod!(), " < 1",
        " || (r.parallel.tensor * r.parallel.pipeline * r.parallel.data) / ", cel_root_devices_per_pod!(), " <= 1",
        " || size(self.metadata.name) + size(string((r.parallel.tensor * r.parallel.pipeline * r.parallel.data) / ", cel_root_devices_per_pod!(), " - 1)) <= 38)"
    ))
    .message("metadata.name is too long for the pods per group of spec.roles[]: the name of the acceptance Job of a group's last rank is also its pods' job-name label, at most 63 characters, which leaves the name's length plus the digits of that rank at most 38; use a shorter name or fewer pods per group (spec.roles[].parallel, or more devices per pod in spec.roles[].accelerator.devicesPerPod or spec.accelerator.devicesPerPod)")
        .reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    // devicesPerPod < 1 has its own rule; guarded here so it is not also a division by zero.
    validation = Rule::new(concat!("self.roles.all(r, ", cel_devices_per_pod!(), " < 1 || (r.parallel.tensor * r.parallel.pipeline * r.parallel.data) % ", cel_devices_per_pod!(), " == 0)"))
        .message("spec.roles[].parallel: the world size (tensor × pipeline × data) of every role must be a multiple of the role's devices per pod (spec.roles[].accelerator.devicesPerPod, else spec.accelerator.devicesPerPod); change the layout or devicesPerPod")
        .reason(Reason::FieldValueInvalid)
        .field_path(".roles"),
    validation = Rule::new("(has(self.accelerator.devicesPerPod) ? self.accelerator.devicesPerPod : 8) <= (self.accelerator.type == 'NVIDIA' ? 8 : 16)")
        .message("spec.accelerator.devicesPerPod exceeds the devices one node of this accelerator type has (NVIDIA: 8, Ascend: 16); lower it and add pods per group instead")
        .reason(Reason::FieldValueInvalid)
        .field_path(".accelerator.devicesPerPod"),
    validation = Rule::new("self.roles.all(r, !has(r.accelerator) || !has(r.accelerator.devicesPerPod) || r.accelerator.devicesPerPod <= (self.accelerator.type == 'NVIDIA' ? 8 : 16))")
        .message("spec.roles[].accelerator.devicesPerPod exceeds the devices one node of this accelerator type has (NVIDIA: 8, Ascend: 16); lower it and add pods per group instead")
        .reason(Reason::FieldValueInvalid)
        .field_path(".roles"),
    // Same as `controller::validate::validate_serving_command`; the validation table checks both.
    validation = Rule::new("!has(self.runtime.command) || size(self.runtime.command) == 0 || (has(self.acceptance.mode) && self.acceptance.mode == 'serving') || (has(self.acceptance.engine) && self.acceptance.engine.command.exists(a, a == '{serving_command}'))")
        .message("spec.runtime.command is set, but spec.acceptance.engine.command (default: DeepInfer's offline example) does not hold {serving_command} as a whole argument, so the acceptance run would not run the command the pods serve with; add \"{serving_command}\" to spec.acceptance.engine.command where the engine's program goes, set spec.acceptance.mode to serving, or remove spec.runtime.command")
        .reason(Reason::FieldValueInvalid)
        .field_path(".runtime.command"),
    validation = Rule::new("!has(self.runtime.roles) || self.runtime.roles.all(o, self.roles.exists(r, r.name == o.role))")
        .message("spec.runtime.roles[].role must name a role of spec.roles; fix the name or remove the entry")
        .reason(Reason::FieldValueInvalid)
        .field_path(".runtime.roles"),
    // Same as `controller::validate::validate_pod_settings`; the validation table checks both.
    validation = Rule::new(format!("!has(self.pod) || !has(self.pod.nodeSelector) || {}", node_selector_agrees("self.pod.nodeSelector")))
        .message("spec.pod.nodeSelector sets a node label that spec.accelerator already selects on to another value (nvidia.com/gpu.present or accelerator from spec.accelerator.type, nvidia.com/gpu.product or node.kubernetes.io/npu.chip.name from spec.accelerator.product); remove the key from spec.pod.nodeSelector, or change spec.accelerator")
        .reason(Reason::FieldValueInvalid)
        .field_path(".pod.nodeSelector"),
    validation = Rule::new(format!("!has(self.pod) || !has(self.pod.nodeSelector) || self.roles.all(r, (has(r.pod) && has(r.pod.nodeSelector)) || !{CEL_ROLE_PRODUCT} || {})", product_agrees("self.pod.nodeSelector", "r.accelerator.product")))
        .message("spec.pod.nodeSelector sets the product label (nvidia.com/gpu.product or node.kubernetes.io/npu.chip.name) to another value than spec.roles[].accelerator.product of a role that takes spec.pod.nodeSelector; remove the key from spec.pod.nodeSelector, or give that role its own spec.roles[].pod.nodeSelector")
        .reason(Reason::FieldValueInvalid)
        .field_path(".pod.nodeSelector"),
    validation = Rule::new(format!("self.roles.all(r, !has(r.pod) || !has(r.pod.nodeSelector) || ({}))", role_node_selector_agrees("r.pod.nodeSelector")))
        .message("spec.roles[].pod.nodeSelector sets a node label that the role's accelerator already selects on to another value (nvidia.com/gpu.present or accelerator from spec.accelerator.type, nvidia.com/gpu.product or node.kubernetes.io/npu.chip.name from spec.roles[].accelerator.product, else spec.accelerator.product); remove the key from spec.roles[].pod.nodeSelector, or change the product")
        .reason(Reason::FieldValueInvalid)
        .field_path(".roles"),
)]
pub struct DeepInferDeploymentSpec {
    /// The checkpoint to serve: hub id, licence and where its files come from.
    pub model: ModelSpec,
    /// The DeepInfer runtime: image pinned by digest, its git commit, extra engine arguments.
    pub runtime: RuntimeSpec,
    /// Accelerator type and placement: device resource, node labels, scale-up domain.
    pub accelerator: AcceleratorSpec,
    /// Serving roles (worker, prefill, decode, vision), each with replicas and a parallel layout.
    /// `worker` stands alone: an acceptance run judges the worker's own outputs, so it is refused
    /// beside prefill, decode or vision, whose pods no run would have exercised.
    #[schemars(length(min = 1, max = 4))]
    #[x_kube(validation = Rule::new("self.all(r, self.filter(s, s.name == r.name).size() == 1)")
        .message("spec.roles: each role name may appear only once; merge the duplicated entries")
        .reason(Reason::FieldValueDuplicate))]
    // Same as `controller::validate::validate_roles`; the validation table checks both.
    #[x_kube(validation = Rule::new("!self.exists(r, r.name == 'worker') || self.size() == 1")
        .message("spec.roles: worker (prefill and decode colocated in one engine) cannot stand beside prefill, decode or vision: an acceptance run judges the worker's outputs alone, so the other roles' pods would serve on a run they took no part in; serve with worker alone, or with prefill and decode (and vision) without worker")
        .reason(Reason::FieldValueInvalid))]
    pub roles: Vec<RoleSpec>,
    /// The acceptance workload that must pass on exactly this configuration before Ready.
    pub acceptance: AcceptanceSpec,
    /// Who owns each front-end service this deployment relies on but the operator does not
    /// provide, recorded in every acceptance run's manifest (`deepinfer-operator check --sheet`
    /// prints them), e.g. `kvCache: platform-kv team`, `routing: gateway team`,
    /// `authentication: api-gateway`, `quotas: none yet`. Keys name the service (1 to 63
    /// characters), values are free text (1 to 256 characters), at most 16 entries. Not part of
    /// the revision: a change is recorded by the next run and starts none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(schema_with = "service_owners_schema")]
    // Same as `controller::validate::validate_service_owners`; the validation table checks both.
    #[x_kube(validation = Rule::new("self.all(k, size(k) >= 1 && size(k) <= 63)")
        .message("spec.serviceOwners: a key names a service in 1 to 63 characters (e.g. kvCache, routing, authentication, quotas); shorten or rename the key")
        .reason(Reason::FieldValueInvalid))]
    pub service_owners: std::collections::BTreeMap<String, String>,
    /// Scheduler and queue of the pods, for clusters that place them with another scheduler
    /// (Volcano, Kueue, KAI); default: the cluster's default scheduler. A change replaces the
    /// groups one at a time (no new acceptance run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<SchedulingSpec>,
    /// Pod settings of every engine pod (serving and acceptance): pull secrets, tolerations,
    /// node selector, affinity, priority class, serving ServiceAccount, extra volumes and
    /// mounts, topology spread. `spec.roles[].pod` overrides them field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = pod_rule("spec.pod", 0))]
    #[x_kube(validation = pod_rule("spec.pod", 1))]
    #[x_kube(validation = pod_rule("spec.pod", 2))]
    #[x_kube(validation = pod_rule("spec.pod", 3))]
    #[x_kube(validation = pod_rule("spec.pod", 4))]
    #[x_kube(validation = pod_rule("spec.pod", 5))]
    pub pod: Option<PodSettings>,
    /// Holds every role's groups as they are: no group is created, replaced or deleted (a
    /// rollout stops where it is; broken groups stay). Acceptance runs, entitlement and status
    /// go on. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Frees the deployment's devices: every serving pod and a running acceptance run are
    /// deleted, while the recorded judgements, the verified checkpoint and the kept revisions
    /// stay. Set back to false, the groups are created again and serve on the recorded
    /// judgement, with no new acceptance run when nothing else changed. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

/// Scheduler and queue settings passed through to every worker and acceptance pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// `spec.schedulerName` of the pods, e.g. `volcano` or `kai-scheduler`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub scheduler_name: Option<String>,
    /// Labels added to the pods, e.g. `kueue.x-k8s.io/queue-name: team-a` or
    /// `kai.scheduler/queue: team-a`. Keys under `deepinfer.io/` are the operator's.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('deepinfer.io/'))")
        .message("spec.scheduling.podLabels: keys under deepinfer.io/ are set by the operator; use another prefix")
        .reason(Reason::FieldValueForbidden))]
    pub pod_labels: std::collections::BTreeMap<String, String>,
    /// Annotations added to the pods, e.g. `scheduling.volcano.sh/queue-name: team-a`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('deepinfer.io/'))")
        .message("spec.scheduling.podAnnotations: keys under deepinfer.io/ are set by the operator; use another prefix")
        .reason(Reason::FieldValueForbidden))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('ascend.kubectl.kubernetes.io/'))")
        .message("spec.scheduling.podAnnotations: keys under ascend.kubectl.kubernetes.io/ are the Ascend device plugin's record of the devices it allocated, which the rank table is built from; remove them")
        .reason(Reason::FieldValueForbidden))]
    pub pod_annotations: std::collections::BTreeMap<String, String>,
    /// At most one serving group of this deployment per scale-up domain (the node label of
    /// `spec.accelerator.scaleUpDomainKey`), as LeaderWorkerSet's exclusive topology: a group
    /// never shares its NVLink clique or super-pod with another group of the deployment, and a
    /// group that finds no free domain waits for one. Acceptance runs are not counted. Changing it
    /// replaces the groups one at a time, with no new acceptance run. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive_domain: bool,
}

/// Names of the volumes the operator gives engine pods (checkpoint, shared memory, rank table,
/// role endpoints, and the acceptance leader's runner, work directory, spec and judge token):
/// `spec.pod.volumes` and `spec.pod.volumeMounts` may not use them.
pub const RESERVED_VOLUME_NAMES: [&str; 8] = [
    "checkpoint",
    "dshm",
    "rank-table",
    "role-endpoints",
    "runner",
    "work",
    "acceptance-spec",
    "judge-token",
];

/// Directories the operator mounts into engine containers (the checkpoint, shared memory, the
/// operator's own `/deepinfer` files, the HCCL rank table): `spec.pod.volumeMounts` may not
/// mount at or under them.
pub const RESERVED_MOUNT_PATHS: [&str; 4] = [
    "/models",
    "/dev/shm",
    "/deepinfer",
    "/user/serverid/devindex/config",
];

/// Volume types extra volumes may use: those the restricted Pod Security Standard allows.
pub const ALLOWED_VOLUME_TYPES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// CEL: the node selector at `selector` sets none of the labels the accelerator selects on to
/// another value (`AcceleratorSpec::node_selector`), the product being `spec.accelerator.product`.
fn node_selector_agrees(selector: &str) -> String {
    format!(
        "{} \
         && (!has(self.accelerator.product) || {})",
        type_label_agrees(selector),
        product_agrees(selector, "self.accelerator.product")
    )
}

/// [`node_selector_agrees`] for role `r`, whose product is its own
/// (`spec.roles[].accelerator.product`) when given, else `spec.accelerator.product`.
fn role_node_selector_agrees(selector: &str) -> String {
    format!(
        "{} \
         && ({CEL_ROLE_PRODUCT} ? {} : (!has(self.accelerator.product) || {}))",
        type_label_agrees(selector),
        product_agrees(selector, "r.accelerator.product"),
        product_agrees(selector, "self.accelerator.product")
    )
}

/// CEL: the node selector at `selector` keeps the accelerator type's base label.
fn type_label_agrees(selector: &str) -> String {
    format!(
        "(!((self.accelerator.type == 'NVIDIA' ? 'nvidia.com/gpu.present' : 'accelerator') in {selector}) \
         || {selector}[self.accelerator.type == 'NVIDIA' ? 'nvidia.com/gpu.present' : 'accelerator'] == (self.accelerator.type == 'NVIDIA' ? 'true' : 'huawei-Ascend910'))"
    )
}

/// CEL: the node selector at `selector` sets the product label to `product`, or not at all.
fn product_agrees(selector: &str, product: &str) -> String {
    format!(
        "(!((self.accelerator.type == 'NVIDIA' ? 'nvidia.com/gpu.product' : 'node.kubernetes.io/npu.chip.name') in {selector}) \
         || {selector}[self.accelerator.type == 'NVIDIA' ? 'nvidia.com/gpu.product' : 'node.kubernetes.io/npu.chip.name'] == {product})"
    )
}

/// CEL pattern of a DNS subdomain (names of PriorityClasses and ServiceAccounts).
const DNS_SUBDOMAIN_PATTERN: &str =
    "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'";

/// Rule `index` of the CEL rules on a [`PodSettings`] at `at` (`spec.pod` or
/// `spec.roles[].pod`), its message naming the field there. Same rules as
/// `controller::validate::validate_pod_settings`; the validation table checks both.
fn pod_rule(at: &str, index: usize) -> kube::core::Rule {
    let names: Vec<String> = RESERVED_VOLUME_NAMES
        .iter()
        .map(|n| format!("'{n}'"))
        .collect();
    let names = names.join(", ");
    let types: Vec<String> = ALLOWED_VOLUME_TYPES
        .iter()
        .map(|t| format!("has(v.{t})"))
        .collect();
    let paths: Vec<String> = RESERVED_MOUNT_PATHS
        .iter()
        .map(|p| format!("m.mountPath != '{p}' && !m.mountPath.startsWith('{p}/')"))
        .collect();
    let (field, reason, rule, message) = match index {
        0 => (
            ".priorityClassName",
            Reason::FieldValueInvalid,
            format!("!has(self.priorityClassName) || self.priorityClassName.matches({DNS_SUBDOMAIN_PATTERN})"),
            format!("{at}.priorityClassName must be the name of a PriorityClass (a DNS subdomain: lowercase letters, digits, '-' and '.')"),
        ),
        1 => (
            ".serviceAccountName",
            Reason::FieldValueInvalid,
            format!("!has(self.serviceAccountName) || self.serviceAccountName.matches({DNS_SUBDOMAIN_PATTERN})"),
            format!("{at}.serviceAccountName must be the name of a ServiceAccount (a DNS subdomain: lowercase letters, digits, '-' and '.')"),
        ),
        2 => (
            ".volumes",
            Reason::FieldValueForbidden,
            format!("!has(self.volumes) || self.volumes.all(v, {})", types.join(" || ")),
            format!("{at}.volumes may only use the volume types the restricted Pod Security Standard allows: configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected or secret; hostPath and other node or network volumes are refused; use a PersistentVolumeClaim instead"),
        ),
        3 => (
            ".volumes",
            Reason::FieldValueForbidden,
            format!("!has(self.volumes) || self.volumes.all(v, !(v.name in [{names}]))"),
            format!("{at}.volumes: the names checkpoint, dshm, rank-table, role-endpoints, runner, work, acceptance-spec and judge-token are the operator's own volumes; rename the volume (and its volumeMounts)"),
        ),
        4 => (
            ".volumeMounts",
            Reason::FieldValueForbidden,
            format!("!has(self.volumeMounts) || self.volumeMounts.all(v, !(v.name in [{names}]))"),
            format!("{at}.volumeMounts: the names checkpoint, dshm, rank-table, role-endpoints, runner, work, acceptance-spec and judge-token are the operator's own volumes; mount a volume of volumes instead"),
        ),
        _ => (
            ".volumeMounts",
            Reason::FieldValueForbidden,
            format!("!has(self.volumeMounts) || self.volumeMounts.all(m, {})", paths.join(" && ")),
            format!("{at}.volumeMounts: mountPath may not be at or under /models, /dev/shm, /deepinfer or /user/serverid/devindex/config, where the operator mounts the checkpoint and its own files; choose another directory"),
        ),
    };
    kube::core::Rule::new(rule)
        .message(message.as_str())
        .reason(reason)
        .field_path(field)
}

/// Settings of engine pods that cluster admins need on most clusters, given for the whole
/// deployment (`spec.pod`) or for one role (`spec.roles[].pod`, each field given there replacing
/// the deployment's). They reach serving pods and the acceptance pods of the role alike.
/// Volumes, mounts, the ServiceAccount and the priority class are part of the revision (a
/// change is judged again); the others only move pods (a change replaces the groups one at a
/// time, without a new acceptance run).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodSettings {
    /// Secrets holding credentials for private registries, for the engine image (and the
    /// operator's image in acceptance pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Tolerations added to the one the operator sets for the device resource's taint, e.g. a
    /// site's `dedicated=inference:NoSchedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub tolerations: Option<Vec<Toleration>>,
    /// Node labels added to the accelerator's node selector. A label `spec.accelerator` already
    /// selects on (type, product) cannot be set to another value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 32))]
    pub node_selector: Option<std::collections::BTreeMap<String, String>>,
    /// Affinity merged with the operator's, never replacing it: required node affinity terms
    /// apply on top of the accelerator's node selector; pod affinity and anti-affinity terms are
    /// added beside the term that keeps a group inside one scale-up domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// PriorityClass of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub priority_class_name: Option<String>,
    /// ServiceAccount serving pods run as (e.g. for a cloud workload identity, or pull secrets
    /// attached to it); default: the namespace's `default`. No API token is mounted either way.
    /// The judged leader of an acceptance run runs as the judge's own ServiceAccount instead;
    /// its other ranks and groups run as this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub service_account_name: Option<String>,
    /// Extra volumes of engine pods, for `volumeMounts`: only the types the restricted Pod
    /// Security Standard allows (configMap, csi, downwardAPI, emptyDir, ephemeral,
    /// persistentVolumeClaim, projected, secret; never hostPath), and none named as the
    /// operator's own volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub volumes: Option<Vec<Volume>>,
    /// Extra mounts of the engine container, each naming one of `volumes`; not at or under
    /// the operator's own directories (`/models`, `/dev/shm`, `/deepinfer`, the rank table's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub volume_mounts: Option<Vec<VolumeMount>>,
    /// Topology spread constraints of the pods, e.g. groups spread over zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
}

impl PodSettings {
    /// These settings with each field `role` gives put in its place (field by field).
    pub fn overridden_by(&self, role: Option<&PodSettings>) -> PodSettings {
        let Some(role) = role else {
            return self.clone();
        };
        fn pick<T: Clone>(role: &Option<T>, base: &Option<T>) -> Option<T> {
            role.as_ref().or(base.as_ref()).cloned()
        }
        PodSettings {
            image_pull_secrets: pick(&role.image_pull_secrets, &self.image_pull_secrets),
            tolerations: pick(&role.tolerations, &self.tolerations),
            node_selector: pick(&role.node_selector, &self.node_selector),
            affinity: pick(&role.affinity, &self.affinity),
            priority_class_name: pick(&role.priority_class_name, &self.priority_class_name),
            service_account_name: pick(&role.service_account_name, &self.service_account_name),
            volumes: pick(&role.volumes, &self.volumes),
            volume_mounts: pick(&role.volume_mounts, &self.volume_mounts),
            topology_spread_constraints: pick(
                &role.topology_spread_constraints,
                &self.topology_spread_constraints,
            ),
        }
    }
}

impl DeepInferDeploymentSpec {
    /// The device shape of `role`'s pods: each field `spec.roles[].accelerator` gives, else
    /// `spec.accelerator`'s, defaults applied. The one place a role's shape is decided: groups,
    /// placement, claims, rank tables, acceptance runs and validation all take it from here.
    pub fn device_shape(&self, role: &RoleSpec) -> DeviceShape {
        let own = role.accelerator.as_ref();
        let own_devices = own.and_then(|a| a.devices_per_pod);
        let own_product = own.and_then(|a| a.product.clone());
        DeviceShape {
            devices_per_pod: own_devices.unwrap_or_else(|| self.accelerator.devices_per_pod()),
            own_devices_per_pod: own_devices.is_some(),
            own_product: own_product.is_some(),
            product: own_product.or_else(|| self.accelerator.product.clone()),
        }
    }

    /// The pod settings of `role`'s engine pods: `spec.pod`, each field `spec.roles[].pod`
    /// gives replacing the deployment's.
    pub fn pod_settings(&self, role: &RoleSpec) -> PodSettings {
        self.pod
            .clone()
            .unwrap_or_default()
            .overridden_by(role.pod.as_ref())
    }
}

/// The checkpoint: a hub id, its licence, and exactly one source.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// Hub id of the model, e.g. `deepseek-ai/DeepSeek-V4.1-Flash-1017`.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Licence id the checkpoint is published under (e.g. `mit`); must equal the
    /// `deepinfer.io/license-accepted` annotation and be on the operator's allow-list.
    #[schemars(length(min = 1, max = 128))]
    pub license: String,
    /// Where the checkpoint's files come from: exactly one of `hub` or `volume`.
    pub source: ModelSource,
}

/// Exactly one of `hub` or `volume`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.hub) ? 1 : 0) + (has(self.volume) ? 1 : 0) == 1")
    .message("spec.model.source: set exactly one of hub (fetch a pinned revision) or volume (a PVC that already holds the checkpoint)")
        .reason(Reason::FieldValueInvalid))]
pub struct ModelSource {
    /// Fetch a pinned revision from the hub into a volume, once, before any worker starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubSource>,
    /// Use a checkpoint already present on a volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeSource>,
}

/// A pinned hub revision fetched into a PVC by a Job.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HubSource {
    /// Full 40-hex commit id of the checkpoint revision; branches and tags are refused.
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9a-f]{40}$')")
        .message("spec.model.source.hub.revision must be a full 40-character lowercase hex commit id, not a branch or tag; copy the commit from the model's history page")
        .reason(Reason::FieldValueInvalid))]
    pub revision: String,
    /// PersistentVolumeClaim the checkpoint is fetched into.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// Directory inside the claim; default `<model name>/<revision>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub path: Option<String>,
    /// Hub endpoint; default `https://huggingface.co` (the fetch Job's `HF_ENDPOINT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub endpoint: Option<String>,
    /// Secret holding an access token under key `token`, for gated repositories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_name: Option<String>,
}

/// A checkpoint already present on a PersistentVolumeClaim.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSource {
    /// PersistentVolumeClaim that holds the checkpoint.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// Directory inside the claim holding `config.json` and `*.safetensors`.
    #[schemars(length(max = 512))]
    pub path: String,
}

/// CEL: a probe has no `httpGet.host` or `tcpSocket.host`: the kubelet asks the pod itself, never
/// a host the spec names.
const PROBE_OWN_POD_RULE: &str =
    "(!has(self.httpGet) || !has(self.httpGet.host)) && (!has(self.tcpSocket) || !has(self.tcpSocket.host))";

/// The DeepInfer runtime.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSpec {
    /// Runtime image pinned by digest: `<repository>@sha256:<64 hex>`. A tag alone is refused.
    #[schemars(length(max = 512))]
    #[x_kube(validation = Rule::new("self.matches('^[^@ ]+@sha256:[0-9a-f]{64}$')")
        .message("spec.runtime.image must be pinned by digest (<repository>@sha256:<64 hex>); a tag alone is refused; resolve the tag with `crane digest` or `docker buildx imagetools inspect`")
        .reason(Reason::FieldValueInvalid))]
    pub image: String,
    /// Git commit of the DeepInfer runtime inside the image, recorded in acceptance manifests.
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9a-f]{7,40}$')")
        .message("spec.runtime.commit must be the runtime's git commit id (7 to 40 lowercase hex characters)")
        .reason(Reason::FieldValueInvalid))]
    pub commit: String,
    /// Command of engine containers, replacing the image's entrypoint (the engine contract,
    /// docs/engine-contract.md); default: the image's entrypoint. The arguments stay the
    /// operator's `--model_name <dir>`, then `args`, then the role's `roles[].args`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Extra engine arguments, appended after the operator's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment for engine containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Per-role settings, e.g. prefill's and decode's own flags: each entry names a role of
    /// `spec.roles` at most once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    #[x_kube(validation = Rule::new("self.all(o, self.filter(p, p.role == o.role).size() == 1)")
        .message("spec.runtime.roles: each role may be named once; merge the duplicate entries")
        .reason(Reason::FieldValueDuplicate))]
    pub roles: Vec<RoleRuntime>,
    /// Startup probe of engine containers; default: HTTP GET `/health` on the serve port,
    /// allowing 45 minutes for the weights to load before the container is restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PROBE_OWN_POD_RULE)
        .message("spec.runtime.startupProbe: a probe asks the engine's own pod; remove httpGet.host and tcpSocket.host (the kubelet would connect to that host instead)")
        .reason(Reason::FieldValueForbidden))]
    pub startup_probe: Option<Probe>,
    /// Readiness probe of engine containers; default: HTTP GET `/health` on the serve port
    /// every 10 s. A group serves only while every rank passes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PROBE_OWN_POD_RULE)
        .message("spec.runtime.readinessProbe: a probe asks the engine's own pod; remove httpGet.host and tcpSocket.host (the kubelet would connect to that host instead)")
        .reason(Reason::FieldValueForbidden))]
    pub readiness_probe: Option<Probe>,
    /// Liveness probe of serving engine containers; default: HTTP GET `/health` on the serve port
    /// every 10 s, failed after 6 misses (a minute without an answer). A serving engine that
    /// fails it is stopped; its pod fails and its group is replaced whole, so a hung engine does
    /// not hold its devices unready for ever. Checked only once the startup probe passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PROBE_OWN_POD_RULE)
        .message("spec.runtime.livenessProbe: a probe asks the engine's own pod; remove httpGet.host and tcpSocket.host (the kubelet would connect to that host instead)")
        .reason(Reason::FieldValueForbidden))]
    pub liveness_probe: Option<Probe>,
    /// CPU and memory of engine containers (devices come from `spec.accelerator`); default:
    /// requests of 4 CPUs and 16Gi memory, so engine pods are never BestEffort. Device entries
    /// given here are replaced by the accelerator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// Engine settings of one role, added to the shared ones in `spec.runtime`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoleRuntime {
    /// The role these settings apply to (`worker`, `prefill`, `decode` or `vision`); it must be
    /// one of `spec.roles`.
    #[schemars(length(max = 63))]
    pub role: String,
    /// Image of this role's engine containers, pinned by digest; default `spec.runtime.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = Rule::new("self.matches('^[^@ ]+@sha256:[0-9a-f]{64}$')")
        .message("spec.runtime.roles[].image must be pinned by digest (<repository>@sha256:<64 hex>); a tag alone is refused")
        .reason(Reason::FieldValueInvalid))]
    pub image: Option<String>,
    /// Arguments appended after `spec.runtime.args`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment added after `spec.runtime.env` (a later entry of the same name wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
}

impl RuntimeSpec {
    /// The settings of `role` in `roles`, if any.
    pub fn role_runtime(&self, role: &str) -> Option<&RoleRuntime> {
        self.roles.iter().find(|r| r.role == role)
    }

    /// Image of `role`'s engine containers: its own, else the shared one.
    pub fn image_of(&self, role: &str) -> &str {
        self.role_runtime(role)
            .and_then(|r| r.image.as_deref())
            .unwrap_or(&self.image)
    }
}

/// Accelerator vendor.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcceleratorType {
    /// NVIDIA GPUs (`nvidia.com/gpu`), CUDA 13 images.
    #[serde(rename = "NVIDIA")]
    Nvidia,
    /// Huawei Ascend NPUs (`huawei.com/Ascend910`), CANN 9.2 images.
    Ascend,
}

impl AcceleratorType {
    /// Extended resource each pod requests: `nvidia.com/gpu` or `huawei.com/Ascend910`.
    pub fn device_resource(self) -> &'static str {
        match self {
            Self::Nvidia => "nvidia.com/gpu",
            Self::Ascend => "huawei.com/Ascend910",
        }
    }

    /// Node label whose value names the accelerator product (`spec.accelerator.product`).
    pub fn product_label_key(self) -> &'static str {
        match self {
            Self::Nvidia => "nvidia.com/gpu.product",
            Self::Ascend => "node.kubernetes.io/npu.chip.name",
        }
    }

    /// Node label naming one scale-up domain when `spec.accelerator.scaleUpDomainKey` is unset:
    /// the NVLink clique from GPU Feature Discovery, or the Ascend HCCS super-pod.
    pub fn default_scale_up_domain_key(self) -> &'static str {
        match self {
            Self::Nvidia => "nvidia.com/gpu.clique",
            Self::Ascend => "huawei.com/super-pod-id",
        }
    }

    /// Label (key, value) every node of this type carries; the base of the node selector.
    pub fn base_node_label(self) -> (&'static str, &'static str) {
        match self {
            Self::Nvidia => ("nvidia.com/gpu.present", "true"),
            Self::Ascend => ("accelerator", "huawei-Ascend910"),
        }
    }

    /// Most devices one node of this type offers unless the operator is told otherwise.
    pub fn default_max_devices_per_node(self) -> i32 {
        match self {
            Self::Nvidia => DEFAULT_MAX_DEVICES_NVIDIA,
            Self::Ascend => DEFAULT_MAX_DEVICES_ASCEND,
        }
    }
}

/// Accelerator type and placement.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.devicesPerPod) || self.devicesPerPod >= 1")
    .message("spec.accelerator.devicesPerPod must be at least 1")
        .reason(Reason::FieldValueInvalid)
        .field_path(".devicesPerPod"))]
#[x_kube(validation = Rule::new("!has(self.resourceName) || (self.type == 'NVIDIA' ? self.resourceName == 'nvidia.com/gpu' : self.resourceName in ['huawei.com/Ascend910', 'huawei.com/npu'])")
    .message("spec.accelerator.resourceName must be a device resource of the accelerator type: nvidia.com/gpu (NVIDIA), huawei.com/Ascend910 or huawei.com/npu (Ascend; huawei.com/npu on Atlas 350/850/950 SuperPoD nodes)")
        .reason(Reason::FieldValueInvalid)
        .field_path(".resourceName"))]
#[x_kube(validation = Rule::new("!has(self.resourceName) || !has(self.deviceClassName)")
    .message("spec.accelerator.resourceName and spec.accelerator.deviceClassName exclude each other: devices come either as an extended resource or through DRA claims; remove one")
        .reason(Reason::FieldValueForbidden)
        .field_path(".resourceName"))]
pub struct AcceleratorSpec {
    /// `NVIDIA` or `Ascend`.
    #[serde(rename = "type")]
    pub kind: AcceleratorType,
    /// Node selector value for the product label (`nvidia.com/gpu.product` or
    /// `node.kubernetes.io/npu.chip.name`), e.g. `NVIDIA-H200`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("size(self) <= 63 && self.matches('^[-A-Za-z0-9_.]*$') && (size(self) == 0 || (self.matches('^[A-Za-z0-9]') && self.matches('[A-Za-z0-9]$')))")
        .message("spec.accelerator.product must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit), as the node label it selects on holds, e.g. NVIDIA-H200")
        .reason(Reason::FieldValueInvalid))]
    pub product: Option<String>,
    /// Devices each pod requests; default 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices_per_pod: Option<i32>,
    /// Node label naming one scale-up (NVLink / HCCS) domain; every pod of a group lands on nodes
    /// sharing its value. Default `nvidia.com/gpu.clique` (NVIDIA), `huawei.com/super-pod-id` (Ascend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    pub scale_up_domain_key: Option<String>,
    /// DeviceClass to claim the devices from through Dynamic Resource Allocation, e.g.
    /// `gpu.nvidia.com`: each pod then claims `devicesPerPod` devices of that class through a
    /// ResourceClaimTemplate instead of requesting the extended resource. Unset: the extended
    /// resource (`nvidia.com/gpu`, `huawei.com/Ascend910`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')")
        .message("spec.accelerator.deviceClassName must be a DeviceClass name (a DNS subdomain: lowercase letters, digits, '-' and '.'), e.g. gpu.nvidia.com")
        .reason(Reason::FieldValueInvalid))]
    pub device_class_name: Option<String>,
    /// DeviceClass of a device that stands for one scale-up domain, e.g. the channel of NVIDIA's
    /// ComputeDomain (`compute-domain-default-channel.nvidia.com`): each multi-pod group's
    /// PodGroup claims one such device, shared by all its pods, so the scheduler places the whole
    /// group where that device is available: inside one domain. Needs PodGroups with shared claims
    /// (`--gang-scheduling` auto or native; feature gates `GenericWorkload` and
    /// `DRAWorkloadResourceClaims`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')")
        .message("spec.accelerator.domainDeviceClassName must be a DeviceClass name (a DNS subdomain: lowercase letters, digits, '-' and '.'), e.g. compute-domain-default-channel.nvidia.com")
        .reason(Reason::FieldValueInvalid))]
    pub domain_device_class_name: Option<String>,
    /// Extended resource each pod requests its devices as; default from the type:
    /// `nvidia.com/gpu`, `huawei.com/Ascend910`. Ascend SuperPoD products (Atlas 350/850/950)
    /// offer `huawei.com/npu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub resource_name: Option<String>,
}

impl AcceleratorSpec {
    /// Devices each pod requests, default applied.
    pub fn devices_per_pod(&self) -> i32 {
        self.devices_per_pod.unwrap_or(DEFAULT_DEVICES_PER_POD)
    }

    /// Extended resource each pod requests: `resourceName`, else the type's
    /// (see [`AcceleratorType::device_resource`]).
    pub fn device_resource(&self) -> &str {
        self.resource_name
            .as_deref()
            .unwrap_or_else(|| self.kind.device_resource())
    }

    /// What each pod's devices are, for messages: `8 nvidia.com/gpu` or `8 devices of class
    /// gpu.nvidia.com`.
    pub fn describe_devices(&self, count: i32) -> String {
        match &self.device_class_name {
            Some(class) => format!("{count} devices of class {class}"),
            None => format!("{count} {}", self.device_resource()),
        }
    }

    /// Node label naming one scale-up domain, default applied.
    pub fn scale_up_domain_key(&self) -> &str {
        self.scale_up_domain_key
            .as_deref()
            .unwrap_or_else(|| self.kind.default_scale_up_domain_key())
    }

    /// Node selector for pods of `product` (a role's, see
    /// [`DeepInferDeploymentSpec::device_shape`]): the type's base label, plus the product label
    /// when there is a product.
    pub fn node_selector(
        &self,
        product: Option<&str>,
    ) -> std::collections::BTreeMap<String, String> {
        let (key, value) = self.kind.base_node_label();
        let mut selector = std::collections::BTreeMap::from([(key.to_owned(), value.to_owned())]);
        if let Some(product) = product {
            selector.insert(self.kind.product_label_key().to_owned(), product.to_owned());
        }
        selector
    }
}

/// The device shape of one role's pods (`spec.roles[].accelerator`): each field given replaces
/// `spec.accelerator`'s for this role, e.g. prefill pods of 4 GPUs beside decode pods of 8. The
/// accelerator type, device resource, DeviceClasses and scale-up domain stay the deployment's.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.devicesPerPod) || self.devicesPerPod >= 1")
    .message("spec.roles[].accelerator.devicesPerPod must be at least 1")
        .reason(Reason::FieldValueInvalid)
        .field_path(".devicesPerPod"))]
pub struct RoleAccelerator {
    /// Node selector value for the product label of this role's pods (`nvidia.com/gpu.product`
    /// or `node.kubernetes.io/npu.chip.name`), e.g. `NVIDIA-B200`; default
    /// `spec.accelerator.product`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("size(self) <= 63 && self.matches('^[-A-Za-z0-9_.]*$') && (size(self) == 0 || (self.matches('^[A-Za-z0-9]') && self.matches('[A-Za-z0-9]$')))")
        .message("spec.roles[].accelerator.product must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit), as the node label it selects on holds, e.g. NVIDIA-H200")
        .reason(Reason::FieldValueInvalid))]
    pub product: Option<String>,
    /// Devices each pod of this role requests; default `spec.accelerator.devicesPerPod`. At
    /// most the devices of one node, and a divisor of the role's world size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices_per_pod: Option<i32>,
}

/// The device shape of one role's pods with every default applied: what each pod requests and
/// which product it selects (see [`DeepInferDeploymentSpec::device_shape`]).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceShape {
    /// Devices each pod requests.
    pub devices_per_pod: i32,
    /// Value of the product node label the pods select, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// Whether `devices_per_pod` is the role's own (`spec.roles[].accelerator.devicesPerPod`).
    #[serde(skip)]
    pub own_devices_per_pod: bool,
    /// Whether `product` is the role's own (`spec.roles[].accelerator.product`).
    #[serde(skip)]
    pub own_product: bool,
}

impl DeviceShape {
    /// Where `devicesPerPod` of role `index` is written, for messages.
    pub fn devices_per_pod_field(&self, index: usize) -> String {
        shape_field(self.own_devices_per_pod, index, "devicesPerPod")
    }

    /// Where `product` of role `index` is written, for messages.
    pub fn product_field(&self, index: usize) -> String {
        shape_field(self.own_product, index, "product")
    }
}

fn shape_field(own: bool, index: usize, name: &str) -> String {
    if own {
        format!("spec.roles[{index}].accelerator.{name}")
    } else {
        format!("spec.accelerator.{name}")
    }
}

/// One serving role.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.replicas >= 0")
    .message("spec.roles[].replicas must be 0 or more")
        .reason(Reason::FieldValueInvalid)
        .field_path(".replicas"))]
pub struct RoleSpec {
    /// `worker` (prefill and decode colocated), `prefill`, `decode` or `vision`.
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self in ['worker', 'prefill', 'decode', 'vision']")
        .message("spec.roles[].name must be one of worker, prefill, decode, vision")
        .reason(Reason::FieldValueInvalid))]
    pub name: String,
    /// Number of serving groups of this role. With `scaling: external` it only seeds the role's
    /// `DeepInferRole` when the operator creates it; the count is then that object's
    /// `spec.replicas`.
    #[schemars(range(max = MAX_REPLICAS))]
    pub replicas: i32,
    /// Who sets the role's group count: `replicas` (the default: this spec's `replicas`) or
    /// `external` (the `spec.replicas` of the role's `DeepInferRole`, named
    /// `<deployment>-<role>`, which exposes the `/scale` subresource to a HorizontalPodAutoscaler,
    /// KEDA or `kubectl scale`). Not part of the revision: a change starts no acceptance run.
    #[serde(default, skip_serializing_if = "RoleScaling::is_replicas")]
    pub scaling: RoleScaling,
    /// Parallel layout of one group.
    #[serde(default)]
    pub parallel: ParallelSpec,
    /// How a new revision replaces this role's groups; counted in groups.
    #[serde(default)]
    pub rollout: RolloutSpec,
    /// Pod settings of this role's engine pods; each field given replaces that of `spec.pod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = pod_rule("spec.roles[].pod", 0))]
    #[x_kube(validation = pod_rule("spec.roles[].pod", 1))]
    #[x_kube(validation = pod_rule("spec.roles[].pod", 2))]
    #[x_kube(validation = pod_rule("spec.roles[].pod", 3))]
    #[x_kube(validation = pod_rule("spec.roles[].pod", 4))]
    #[x_kube(validation = pod_rule("spec.roles[].pod", 5))]
    pub pod: Option<PodSettings>,
    /// Device shape of this role's pods: `devicesPerPod` and `product`, each given replacing that
    /// of `spec.accelerator` for this role, so prefill pods of 4 GPUs can stand beside decode
    /// pods of 8. Part of the revision where it differs from `spec.accelerator`: a change is
    /// judged again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<RoleAccelerator>,
}

/// Who sets a role's group count (`spec.roles[].scaling`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RoleScaling {
    /// The role's `replicas` in this spec.
    #[default]
    Replicas,
    /// The `spec.replicas` of the role's `DeepInferRole` (its `/scale` subresource).
    External,
}

impl RoleScaling {
    /// Whether this is the default, [`RoleScaling::Replicas`].
    pub fn is_replicas(&self) -> bool {
        *self == RoleScaling::Replicas
    }
}

/// Rolling replacement of a role's groups, counted in whole groups. Each step creates a group of
/// the new revision and, once it serves, removes an old one.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.maxSurge + self.maxUnavailable >= 1")
    .message("spec.roles[].rollout: maxSurge and maxUnavailable cannot both be 0, or no group could ever be replaced; set maxSurge to 1 (needs one spare group of devices) or maxUnavailable to 1")
        .reason(Reason::FieldValueInvalid))]
pub struct RolloutSpec {
    /// Groups of the new revision that may exist above `replicas` while rolling out; default 1.
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = MAX_ROLLOUT_GROUPS))]
    pub max_surge: i32,
    /// Groups that may be out of service below `replicas` while rolling out (or to make room for
    /// the acceptance run on a full cluster); default 0.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_ROLLOUT_GROUPS))]
    pub max_unavailable: i32,
    /// Groups kept on the revision that served before while a new one rolls out: at most
    /// `replicas - partition` groups move to the new revision; default 0 (all of them). Lower it
    /// to let the rollout go on. Groups of the earlier revision that are lost are replaced by
    /// groups of the new one.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = MAX_ROLLOUT_GROUPS))]
    pub partition: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self {
            max_surge: 1,
            max_unavailable: 0,
            partition: 0,
        }
    }
}

/// Parallel layout of one serving group. World size = tensor × pipeline × data.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.tensor >= 1 && self.pipeline >= 1 && self.data >= 1 && self.expert >= 1")
        .message("spec.roles[].parallel: tensor, pipeline, data and expert must each be at least 1")
        .reason(Reason::FieldValueInvalid),
    validation = Rule::new("self.expert < 1 || (self.tensor * self.pipeline * self.data) % self.expert == 0")
        .message("spec.roles[].parallel.expert must divide the world size (tensor × pipeline × data)")
        .reason(Reason::FieldValueInvalid)
        .field_path(".expert"),
)]
pub struct ParallelSpec {
    /// Tensor-parallel degree.
    #[serde(default = "one")]
    #[schemars(range(max = MAX_PARALLEL_DEGREE))]
    pub tensor: i32,
    /// Pipeline-parallel degree.
    #[serde(default = "one")]
    #[schemars(range(max = MAX_PARALLEL_DEGREE))]
    pub pipeline: i32,
    /// Data-parallel degree inside one group.
    #[serde(default = "one")]
    #[schemars(range(max = MAX_PARALLEL_DEGREE))]
    pub data: i32,
    /// Expert-parallel degree; must divide the world size.
    #[serde(default = "one")]
    #[schemars(range(max = MAX_PARALLEL_DEGREE))]
    pub expert: i32,
}

fn one() -> i32 {
    1
}

impl Default for ParallelSpec {
    fn default() -> Self {
        Self {
            tensor: 1,
            pipeline: 1,
            data: 1,
            expert: 1,
        }
    }
}

impl ParallelSpec {
    /// Devices one group spans: tensor × pipeline × data.
    pub fn world_size(&self) -> i64 {
        // Saturating: an unvalidated object must not make the operator panic.
        i64::from(self.tensor)
            .saturating_mul(i64::from(self.pipeline))
            .saturating_mul(i64::from(self.data))
    }
}

/// The acceptance workload: prompts with the structure each output must have.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(self.prompts) > 0 || has(self.promptsFrom)")
    .message("spec.acceptance: give at least one prompt in prompts, or a ConfigMap in promptsFrom")
        .reason(Reason::FieldValueInvalid))]
pub struct AcceptanceSpec {
    /// Inline prompts.
    #[serde(default)]
    #[schemars(length(max = 256))]
    #[x_kube(validation = Rule::new("self.all(p, self.filter(q, q.id == p.id).size() == 1)")
        .message("spec.acceptance.prompts: prompt ids must be unique; rename the duplicate")
        .reason(Reason::FieldValueDuplicate))]
    pub prompts: Vec<AcceptancePrompt>,
    /// Prompts from a ConfigMap key holding a YAML list of prompts (same shape as `prompts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_from: Option<ConfigMapKeyRef>,
    /// Require every output to end with the end-of-sequence token (finish reason `stop`).
    #[serde(default = "yes")]
    pub require_eos: bool,
    /// Wall-clock limit for the whole acceptance run, including model load and warm-up.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = MAX_ACCEPTANCE_TIMEOUT_SECONDS))]
    pub timeout_seconds: i32,
    /// The engine command template; default: DeepInfer's offline example run with the judged
    /// role's serving arguments (`{serving_args}`: `--model_name <dir>`, `spec.runtime.args`, the
    /// role's args) and `--check_structured_output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineCommand>,
    /// Sampling settings every prompt is generated with, handed to the engine in the prompts
    /// file and recorded in the evidence; `prompts[].sampling` overrides them per prompt. Each
    /// absent value takes its default: temperature 0 (greedy), topP 1, topK 0 (off), seed 0,
    /// repetitionPenalty 1. Part of the revision: a change re-runs acceptance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<AcceptanceSampling>,
    /// How a new revision is judged. `offline` (default): a separate run of one group per role
    /// loads the weights and runs the offline example, then the serving groups are made.
    /// `serving`: the revision's first serving group is made at once and judged in place through
    /// its serving endpoint (docs/engine-contract.md, "Serving API") while it takes no traffic;
    /// a pass admits exactly those pods, a failure deletes them. Roles that work together are
    /// judged together: one candidate group per role, wired to each other, judged through the
    /// judged role's endpoint (`worker`, else `decode`, else the first role).
    #[serde(default, skip_serializing_if = "AcceptanceMode::is_offline")]
    pub mode: AcceptanceMode,
    /// `serving` mode: requests in flight at once in the load pass that measures capacity after
    /// the judged pass (at concurrency 1); default 4, 1 for no load pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub load_concurrency: Option<u32>,
}

/// How a new revision is judged (`spec.acceptance.mode`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AcceptanceMode {
    /// A separate acceptance run of the offline example on one group per role.
    #[default]
    Offline,
    /// The revision's first serving group, judged through its serving endpoint before it serves.
    Serving,
}

impl AcceptanceMode {
    /// Whether this is the default, [`AcceptanceMode::Offline`].
    pub fn is_offline(&self) -> bool {
        *self == AcceptanceMode::Offline
    }
}

/// Requests in flight at once in a `serving` run's load pass when `loadConcurrency` is not set.
pub const DEFAULT_LOAD_CONCURRENCY: u32 = 4;

impl AcceptanceSpec {
    /// Whether the revision's serving group is judged in place (`mode: serving`).
    pub fn judges_serving(&self) -> bool {
        self.mode == AcceptanceMode::Serving
    }

    /// The section's sampling settings with every default applied.
    pub fn default_sampling(&self) -> EffectiveSampling {
        EffectiveSampling::default().with(self.sampling.as_ref())
    }

    /// The sampling settings `prompt` is generated with: the section's, then the prompt's own
    /// overrides, every default applied.
    pub fn sampling_of(&self, prompt: &AcceptancePrompt) -> EffectiveSampling {
        self.default_sampling().with(
            prompt
                .sampling
                .as_ref()
                .map(AcceptanceSampling::from)
                .as_ref(),
        )
    }
}

/// Sampling temperature when none is given: 0, greedy decoding.
pub const DEFAULT_TEMPERATURE: f64 = 0.0;
/// Nucleus-sampling probability mass when none is given: 1, off.
pub const DEFAULT_TOP_P: f64 = 1.0;
/// Top-k when none is given: 0, off.
pub const DEFAULT_TOP_K: i32 = 0;
/// Random seed when none is given.
pub const DEFAULT_SEED: i64 = 0;
/// Repetition penalty when none is given: 1, no penalty.
pub const DEFAULT_REPETITION_PENALTY: f64 = 1.0;

/// Sampling settings of the acceptance run (`spec.acceptance.sampling`); each absent value takes
/// its default.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AcceptanceSampling {
    /// Sampling temperature, 0 or more; default 0: greedy decoding (the most likely token at
    /// every step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub temperature: Option<f64>,
    /// Nucleus sampling: the smallest set of tokens whose probabilities add up to `topP` is
    /// sampled from; greater than 0 and at most 1; default 1 (off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1))]
    #[x_kube(validation = Rule::new("self > 0.0")
        .message("spec.acceptance.sampling.topP must be greater than 0 and at most 1; set a value in that range, or 1 (the default) to turn nucleus sampling off")
        .reason(Reason::FieldValueInvalid))]
    pub top_p: Option<f64>,
    /// Top-k sampling: only the `topK` most likely tokens are sampled from; 0 or more, 0 is off;
    /// default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub top_k: Option<i32>,
    /// Seed of the engine's random sampling, 0 or more; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub seed: Option<i64>,
    /// Repetition penalty: above 1 discourages tokens already generated, below 1 favours them;
    /// greater than 0; default 1 (no penalty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0")
        .message("spec.acceptance.sampling.repetitionPenalty must be greater than 0; set a positive value, or 1 (the default) for no penalty")
        .reason(Reason::FieldValueInvalid))]
    pub repetition_penalty: Option<f64>,
}

/// Sampling settings of one prompt (`spec.acceptance.prompts[].sampling`): each value given
/// overrides `spec.acceptance.sampling`'s for this prompt; each absent value is the section's.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PromptSampling {
    /// Sampling temperature, 0 or more; default: the section's (0, greedy decoding, when it
    /// sets none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub temperature: Option<f64>,
    /// Nucleus-sampling probability mass, greater than 0 and at most 1; default: the section's
    /// (1, off, when it sets none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1))]
    #[x_kube(validation = Rule::new("self > 0.0")
        .message("spec.acceptance.prompts[].sampling.topP must be greater than 0 and at most 1; set a value in that range, or remove it to use spec.acceptance.sampling.topP")
        .reason(Reason::FieldValueInvalid))]
    pub top_p: Option<f64>,
    /// Top-k, 0 or more, 0 is off; default: the section's (0 when it sets none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub top_k: Option<i32>,
    /// Seed of the engine's random sampling, 0 or more; default: the section's (0 when it sets
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub seed: Option<i64>,
    /// Repetition penalty, greater than 0; default: the section's (1, no penalty, when it sets
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0")
        .message("spec.acceptance.prompts[].sampling.repetitionPenalty must be greater than 0; set a positive value, or remove it to use spec.acceptance.sampling.repetitionPenalty")
        .reason(Reason::FieldValueInvalid))]
    pub repetition_penalty: Option<f64>,
}

impl From<&PromptSampling> for AcceptanceSampling {
    fn from(p: &PromptSampling) -> Self {
        Self {
            temperature: p.temperature,
            top_p: p.top_p,
            top_k: p.top_k,
            seed: p.seed,
            repetition_penalty: p.repetition_penalty,
        }
    }
}

impl AcceptanceSampling {
    /// Values outside their bounds, as `(field, what is wrong and the fix)`; the same bounds as
    /// the CRD's. `default_from` names what an absent value falls back to, for the fix.
    pub fn problems(&self, default_from: &str) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut check = |field: &'static str, bad: bool, value: String, rule: &str| {
            if bad {
                out.push((
                    field,
                    format!("is {value}; it must be {rule}; change the value, or remove it to use {default_from}"),
                ));
            }
        };
        if let Some(t) = self.temperature {
            check(
                "temperature",
                !(t >= 0.0 && t.is_finite()),
                t.to_string(),
                "0 or more (0 is greedy decoding)",
            );
        }
        if let Some(p) = self.top_p {
            check(
                "topP",
                !(p > 0.0 && p <= 1.0),
                p.to_string(),
                "greater than 0 and at most 1 (1 turns nucleus sampling off)",
            );
        }
        if let Some(k) = self.top_k {
            check(
                "topK",
                k < 0,
                k.to_string(),
                "0 or more (0 turns top-k sampling off)",
            );
        }
        if let Some(s) = self.seed {
            check("seed", s < 0, s.to_string(), "0 or more");
        }
        if let Some(r) = self.repetition_penalty {
            check(
                "repetitionPenalty",
                !(r > 0.0 && r.is_finite()),
                r.to_string(),
                "greater than 0 (1 is no penalty)",
            );
        }
        out
    }
}

/// Sampling settings with every default applied: what the engine is handed for a prompt and what
/// the evidence records.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveSampling {
    /// Sampling temperature (0: greedy decoding).
    pub temperature: f64,
    /// Nucleus-sampling probability mass (1: off).
    pub top_p: f64,
    /// Top-k (0: off).
    pub top_k: i32,
    /// Random seed.
    pub seed: i64,
    /// Repetition penalty (1: none).
    pub repetition_penalty: f64,
}

impl Default for EffectiveSampling {
    fn default() -> Self {
        Self {
            temperature: DEFAULT_TEMPERATURE,
            top_p: DEFAULT_TOP_P,
            top_k: DEFAULT_TOP_K,
            seed: DEFAULT_SEED,
            repetition_penalty: DEFAULT_REPETITION_PENALTY,
        }
    }
}

impl EffectiveSampling {
    /// These settings with each value `overrides` gives put in place.
    pub fn with(self, overrides: Option<&AcceptanceSampling>) -> Self {
        let Some(o) = overrides else {
            return self;
        };
        Self {
            temperature: o.temperature.unwrap_or(self.temperature),
            top_p: o.top_p.unwrap_or(self.top_p),
            top_k: o.top_k.unwrap_or(self.top_k),
            seed: o.seed.unwrap_or(self.seed),
            repetition_penalty: o.repetition_penalty.unwrap_or(self.repetition_penalty),
        }
    }

    /// The settings of `self` that differ from `base`, as `name value` (for the sheet).
    pub fn differences(&self, base: &Self) -> Vec<String> {
        let mut out = Vec::new();
        if self.temperature != base.temperature {
            out.push(format!("temperature {}", self.temperature));
        }
        if self.top_p != base.top_p {
            out.push(format!("top-p {}", self.top_p));
        }
        if self.top_k != base.top_k {
            out.push(format!("top-k {}", self.top_k));
        }
        if self.seed != base.seed {
            out.push(format!("seed {}", self.seed));
        }
        if self.repetition_penalty != base.repetition_penalty {
            out.push(format!("repetition penalty {}", self.repetition_penalty));
        }
        out
    }
}

fn yes() -> bool {
    true
}

fn default_timeout() -> i32 {
    1800
}

/// A key of a ConfigMap in the resource's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// ConfigMap name.
    pub name: String,
    /// Key inside the ConfigMap.
    pub key: String,
}

/// Engine command template (docs/engine-contract.md). Placeholders: `{serving_args}` (required,
/// a whole argument: the serving container's arguments of the judged role), `{serving_command}`
/// (a whole argument: `spec.runtime.command`, or nothing), `{model_dir}`, `{prompts_file}`,
/// `{outputs_file}`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EngineCommand {
    /// Program and arguments, at most 256 arguments of at most 4096 characters; one argument is
    /// exactly `{serving_args}`.
    #[schemars(length(min = 1, max = 256), inner(length(max = 4096)))]
    // Same as `acceptance::engine::template_problem`; the validation table checks both.
    #[x_kube(validation = Rule::new("self.exists(a, a == '{serving_args}')")
        .message("spec.acceptance.engine.command does not hold {serving_args} as a whole argument, so the judged engine would not run the serving configuration; add \"{serving_args}\" to spec.acceptance.engine.command where the engine takes its flags (in place of \"--model_name {model_dir}\")")
        .reason(Reason::FieldValueInvalid))]
    #[x_kube(validation = Rule::new("self.all(a, a == '{serving_args}' || a == '{serving_command}' || !(a.contains('{serving_args}') || a.contains('{serving_command}')))")
        .message("spec.acceptance.engine.command holds a list placeholder inside a larger argument; {serving_args} and {serving_command} stand for zero or more arguments and must each be a whole argument of spec.acceptance.engine.command")
        .reason(Reason::FieldValueInvalid))]
    pub command: Vec<String>,
}

/// One acceptance prompt and the structure its output must have.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AcceptancePrompt {
    /// Stable id, recorded in the manifest and the evidence.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("!self.matches('[[:cntrl:]]')")
        .message("spec.acceptance.prompts[].id must not contain control characters; it names the prompt in manifests, evidence keys and logs")
        .reason(Reason::FieldValueInvalid))]
    pub id: String,
    /// The prompt text.
    pub prompt: String,
    /// Token budget for the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i32>,
    /// The structured output requested from the engine and checked on the result.
    pub structured_output: StructuredOutput,
    /// Extra CEL rules over the parsed output (bound as `output`), for what a schema cannot say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<OutputRule>,
    /// This prompt's sampling settings, overriding those of `spec.acceptance.sampling` that it
    /// gives. Part of the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<PromptSampling>,
}

/// Exactly one of `json`, `regex`, `grammar`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.json) ? 1 : 0) + (has(self.regex) ? 1 : 0) + (has(self.grammar) ? 1 : 0) == 1")
    .message("spec.acceptance.prompts[].structuredOutput: set exactly one of json, regex or grammar")
        .reason(Reason::FieldValueInvalid))]
pub struct StructuredOutput {
    /// A JSON Schema (draft 2020-12) the decoded output must satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub json: Option<serde_json::Value>,
    /// A regular expression the whole output must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// A grammar the whole output must match (GBNF, as llama.cpp and xgrammar accept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
}

/// A CEL expression over the parsed output that must evaluate to true.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutputRule {
    /// CEL expression; the parsed output is bound as `output`.
    pub expression: String,
    /// What the rule checks, shown when it fails.
    pub message: String,
}

/// Schema of `spec.serviceOwners`: at most [`MAX_SERVICE_OWNERS`] entries of 1 to
/// [`MAX_SERVICE_OWNER_LENGTH`] characters.
fn service_owners_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_SERVICE_OWNERS,
        "additionalProperties": {"type": "string", "minLength": 1, "maxLength": MAX_SERVICE_OWNER_LENGTH}
    })
}

/// Schema for an arbitrary JSON value kept verbatim by the API server.
fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accelerator(kind: AcceleratorType) -> AcceleratorSpec {
        AcceleratorSpec {
            kind,
            product: None,
            devices_per_pod: None,
            scale_up_domain_key: None,
            device_class_name: None,
            domain_device_class_name: None,
            resource_name: None,
        }
    }

    #[test]
    fn accelerator_defaults_come_from_the_type() {
        let nvidia = accelerator(AcceleratorType::Nvidia);
        assert_eq!(nvidia.devices_per_pod(), DEFAULT_DEVICES_PER_POD);
        assert_eq!(nvidia.device_resource(), "nvidia.com/gpu");
        assert_eq!(nvidia.scale_up_domain_key(), "nvidia.com/gpu.clique");
        assert_eq!(
            nvidia.node_selector(None),
            [("nvidia.com/gpu.present".to_owned(), "true".to_owned())].into()
        );
        let ascend = accelerator(AcceleratorType::Ascend);
        assert_eq!(ascend.device_resource(), "huawei.com/Ascend910");
        let superpod = AcceleratorSpec {
            resource_name: Some("huawei.com/npu".into()),
            ..accelerator(AcceleratorType::Ascend)
        };
        assert_eq!(superpod.device_resource(), "huawei.com/npu");
        assert_eq!(ascend.scale_up_domain_key(), "huawei.com/super-pod-id");
        assert_eq!(
            ascend.node_selector(None),
            [("accelerator".to_owned(), "huawei-Ascend910".to_owned())].into()
        );
    }

    fn role(name: &str, accelerator: Option<RoleAccelerator>) -> RoleSpec {
        RoleSpec {
            name: name.into(),
            replicas: 1,
            scaling: RoleScaling::default(),
            parallel: ParallelSpec::default(),
            rollout: RolloutSpec::default(),
            pod: None,
            accelerator,
        }
    }

    #[test]
    fn each_role_takes_its_own_device_shape_field_by_field_else_the_deployments() {
        let spec: DeepInferDeploymentSpec = serde_json::from_value(serde_json::json!({
            "model": {"name": "m", "license": "mit", "source": {"volume": {"claimName": "c", "path": "p"}}},
            "runtime": {"image": "r@sha256:00", "commit": "abcdef0"},
            "accelerator": {"type": "NVIDIA", "product": "NVIDIA-H200", "devicesPerPod": 8},
            "roles": [],
            "acceptance": {"prompts": []}
        }))
        .expect("spec");
        let shape = |r: &RoleSpec| {
            let s = spec.device_shape(r);
            let fields = (s.devices_per_pod_field(1), s.product_field(1));
            (s.devices_per_pod, s.product, fields.0, fields.1)
        };
        let deployment = (
            8,
            Some("NVIDIA-H200".to_string()),
            "spec.accelerator.devicesPerPod".to_string(),
            "spec.accelerator.product".to_string(),
        );
        assert_eq!(shape(&role("decode", None)), deployment);
        assert_eq!(
            shape(&role("decode", Some(RoleAccelerator::default()))),
            deployment,
            "an empty override is the deployment's shape"
        );
        assert_eq!(
            shape(&role(
                "prefill",
                Some(RoleAccelerator {
                    devices_per_pod: Some(4),
                    product: None
                })
            )),
            (
                4,
                Some("NVIDIA-H200".to_string()),
                "spec.roles[1].accelerator.devicesPerPod".to_string(),
                "spec.accelerator.product".to_string(),
            ),
            "devicesPerPod alone: the product stays the deployment's"
        );
        assert_eq!(
            shape(&role(
                "vision",
                Some(RoleAccelerator {
                    devices_per_pod: None,
                    product: Some("NVIDIA-B200".into())
                })
            )),
            (
                8,
                Some("NVIDIA-B200".to_string()),
                "spec.accelerator.devicesPerPod".to_string(),
                "spec.roles[1].accelerator.product".to_string(),
            ),
            "product alone: devicesPerPod stays the deployment's"
        );
        let mut defaults = spec.clone();
        defaults.accelerator.devices_per_pod = None;
        defaults.accelerator.product = None;
        let plain = defaults.device_shape(&role("worker", None));
        assert_eq!(
            (plain.devices_per_pod, plain.product),
            (DEFAULT_DEVICES_PER_POD, None)
        );
    }

    #[test]
    fn accelerator_settings_override_the_defaults() {
        let ascend = AcceleratorSpec {
            product: Some("Ascend910B3".into()),
            devices_per_pod: Some(16),
            scale_up_domain_key: Some("example.com/hccs-domain".into()),
            ..accelerator(AcceleratorType::Ascend)
        };
        assert_eq!(ascend.devices_per_pod(), 16);
        assert_eq!(ascend.scale_up_domain_key(), "example.com/hccs-domain");
        assert_eq!(
            ascend.node_selector(ascend.product.as_deref()),
            [
                ("accelerator".to_owned(), "huawei-Ascend910".to_owned()),
                (
                    "node.kubernetes.io/npu.chip.name".to_owned(),
                    "Ascend910B3".to_owned()
                ),
            ]
            .into()
        );
    }

    #[test]
    fn sampling_defaults_apply_when_absent_and_prompts_override_the_section() {
        let spec: AcceptanceSpec = serde_yaml::from_str(
            "prompts:\n- {id: a, prompt: x, structuredOutput: {regex: a}}\n- {id: b, prompt: y, sampling: {temperature: 0.7, seed: 9}, structuredOutput: {regex: b}}\n",
        )
        .unwrap();
        let greedy = EffectiveSampling {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
            repetition_penalty: 1.0,
        };
        assert_eq!(spec.default_sampling(), greedy);
        assert_eq!(spec.sampling_of(&spec.prompts[0]), greedy);
        assert_eq!(
            spec.sampling_of(&spec.prompts[1]),
            EffectiveSampling {
                temperature: 0.7,
                seed: 9,
                ..greedy
            }
        );

        let section: AcceptanceSpec = serde_yaml::from_str(
            "sampling: {temperature: 0.2, topP: 0.9, topK: 40, seed: 7, repetitionPenalty: 1.1}\nprompts:\n- {id: a, prompt: x, structuredOutput: {regex: a}}\n- {id: b, prompt: y, sampling: {topK: 0, seed: 1}, structuredOutput: {regex: b}}\n",
        )
        .unwrap();
        let pinned = EffectiveSampling {
            temperature: 0.2,
            top_p: 0.9,
            top_k: 40,
            seed: 7,
            repetition_penalty: 1.1,
        };
        assert_eq!(section.default_sampling(), pinned);
        assert_eq!(section.sampling_of(&section.prompts[0]), pinned);
        let b = section.sampling_of(&section.prompts[1]);
        assert_eq!(
            b,
            EffectiveSampling {
                top_k: 0,
                seed: 1,
                ..pinned
            }
        );
        assert_eq!(b.differences(&pinned), ["top-k 0", "seed 1"]);
        // Absent stays absent: a spec without sampling keeps its serialized form (and hash).
        let plain: AcceptanceSpec =
            serde_yaml::from_str("prompts:\n- {id: a, prompt: x, structuredOutput: {regex: a}}\n")
                .unwrap();
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("sampling"), "{text}");
    }

    #[test]
    fn sampling_bounds_name_the_field_and_the_fix() {
        assert!(AcceptanceSampling::default()
            .problems("the default")
            .is_empty());
        let edge = AcceptanceSampling {
            temperature: Some(0.0),
            top_p: Some(1.0),
            top_k: Some(0),
            seed: Some(0),
            repetition_penalty: Some(0.01),
        };
        assert!(edge.problems("the default").is_empty());
        let bad = AcceptanceSampling {
            temperature: Some(-0.1),
            top_p: Some(0.0),
            top_k: Some(-1),
            seed: Some(-5),
            repetition_penalty: Some(0.0),
        };
        let problems = bad.problems("the default");
        let fields: Vec<&str> = problems.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            fields,
            ["temperature", "topP", "topK", "seed", "repetitionPenalty"]
        );
        assert_eq!(
            problems[1].1,
            "is 0; it must be greater than 0 and at most 1 (1 turns nucleus sampling off); change the value, or remove it to use the default"
        );
        let over = AcceptanceSampling {
            top_p: Some(1.5),
            temperature: Some(f64::NAN),
            ..Default::default()
        };
        assert_eq!(over.problems("x").len(), 2);
    }

    #[test]
    fn world_size_saturates_instead_of_overflowing() {
        let huge = ParallelSpec {
            tensor: i32::MAX,
            pipeline: i32::MAX,
            data: i32::MAX,
            expert: 1,
        };
        assert_eq!(huge.world_size(), i64::MAX);
    }
}
