//! Build stage: the desired child objects as plain values, computed without a client.
//!
//! Every builder is a pure function of the resource (and, for Jobs, the operator's own image),
//! so pod specs are unit-tested without a cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodAffinity,
    PodAffinityTerm, PodReadinessGate, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Service, ServiceAccount, ServicePort,
    ServiceSpec, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use serde::Serialize;

use crate::api::{
    labels, AcceleratorType, DeepInferDeployment, DeepInferDeploymentSpec, RoleSpec,
    ACCEPTED_POD_CONDITION,
};

/// Where the checkpoint volume is mounted in engine containers.
pub const MODEL_MOUNT: &str = "/models";
/// Where the checkpoint volume is mounted in the operator's own Job pods.
pub const CHECKPOINT_MOUNT: &str = "/checkpoint";
/// Port the leader of a serving group listens on for traffic.
pub const SERVE_PORT: i32 = 8000;
/// Port ranks of a group rendezvous on (rank 0 leads).
pub const RENDEZVOUS_PORT: i32 = 29500;
/// Annotation holding the hash of the applied object, so unchanged objects are never re-applied.
pub const APPLIED_HASH_ANNOTATION: &str = "deepinfer.io/applied-hash";
/// Non-root user engine and Job containers run as (HwHiAiUser's uid on Ascend images).
const RUN_AS_USER: i64 = 1000;
/// Version of the engine pod template this operator builds. It is part of the revision, so a
/// change re-runs acceptance before any pod under the new template serves, then rolls group by
/// group. Bump it whenever the engine container's command, environment, mounts, devices or
/// security context change; a change of anything else in the pod (labels, probes) rolls the
/// groups without a new judgement. `the_template_version_moves_with_the_engine_container`
/// fails when the engine container changes and this constant does not.
pub const TEMPLATE_VERSION: i32 = 2;
/// Path the default probes ask on the serve port.
pub const HEALTH_PATH: &str = "/health";
/// Longest the default startup probe waits for an engine to load its weights, in seconds.
pub const STARTUP_SECONDS: i32 = 45 * 60;
/// CPU an engine container requests unless `spec.runtime.resources` says otherwise.
pub const DEFAULT_CPU_REQUEST: &str = "4";
/// Memory an engine container requests unless `spec.runtime.resources` says otherwise.
pub const DEFAULT_MEMORY_REQUEST: &str = "16Gi";

/// SHA-256 of a value's JSON form, as lowercase hex cut to `len` characters.
pub fn short_hash<T: Serialize>(value: &T, len: usize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    hex[..len.min(hex.len())].to_string()
}

/// The revision: a hash of everything that changes the running bits — image digest,
/// runtime commit, checkpoint source, accelerator, every role's layout, engine args, env and
/// resources, and the operator's [`TEMPLATE_VERSION`]. Replica counts, rollout settings, probes
/// and the acceptance prompts are not part of it.
pub fn revision(spec: &DeepInferDeploymentSpec) -> String {
    #[derive(Serialize)]
    struct RunningBits<'a> {
        template: i32,
        resources: &'a Option<ResourceRequirements>,
        image: &'a str,
        commit: &'a str,
        model: &'a str,
        source: &'a crate::api::ModelSource,
        accelerator: &'a crate::api::AcceleratorSpec,
        layouts: Vec<(&'a str, &'a crate::api::ParallelSpec)>,
        args: &'a [String],
        env: &'a [EnvVar],
    }
    let mut layouts: Vec<_> = spec
        .roles
        .iter()
        .map(|r| (r.name.as_str(), &r.parallel))
        .collect();
    layouts.sort_by(|a, b| a.0.cmp(b.0));
    short_hash(
        &RunningBits {
            template: TEMPLATE_VERSION,
            resources: &spec.runtime.resources,
            image: &spec.runtime.image,
            commit: &spec.runtime.commit,
            model: &spec.model.name,
            source: &spec.model.source,
            accelerator: &spec.accelerator,
            layouts,
            args: &spec.runtime.args,
            env: &spec.runtime.env,
        },
        10,
    )
}

/// The checkpoint's claim and its directory relative to the claim's root.
pub fn checkpoint_location(spec: &DeepInferDeploymentSpec) -> Option<(String, String)> {
    let source = &spec.model.source;
    if let Some(hub) = &source.hub {
        let path = hub
            .path
            .clone()
            .unwrap_or_else(|| format!("{}/{}", spec.model.name, hub.revision));
        return Some((hub.claim_name.clone(), path.trim_matches('/').to_string()));
    }
    source
        .volume
        .as_ref()
        .map(|v| (v.claim_name.clone(), v.path.trim_matches('/').to_string()))
}

/// `base/rel` without a trailing slash when `rel` is empty.
pub fn join_path(base: &str, rel: &str) -> String {
    if rel.is_empty() {
        base.to_string()
    } else {
        format!("{base}/{rel}")
    }
}

/// Shape of one serving group of a role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupShape {
    /// Devices each pod requests.
    pub devices_per_pod: i32,
    /// Pods in the group: world size / devices per pod.
    pub pods: i32,
    /// Devices the group spans.
    pub world_size: i64,
}

/// Shape of a role's groups; validation guarantees the division is exact.
pub fn group_shape(spec: &DeepInferDeploymentSpec, role: &RoleSpec) -> GroupShape {
    let devices_per_pod = spec.accelerator.devices_per_pod().max(1);
    let world_size = role.parallel.world_size();
    let pods = (world_size / i64::from(devices_per_pod)).max(1);
    GroupShape {
        devices_per_pod,
        pods: i32::try_from(pods).unwrap_or(i32::MAX),
        world_size,
    }
}

/// Name of a role's Service (traffic goes to accepted, ready leaders).
pub fn role_service_name(did: &str, role: &str) -> String {
    format!("{did}-{role}")
}

/// The short revision id in object names (5 hex characters); labels carry the full revision.
pub fn short_revision(revision: &str) -> &str {
    &revision[..revision.len().min(5)]
}

/// Name of a group's headless Service (rendezvous of its ranks):
/// `<name>-<role>-<rev5>-<group>`, at most 36 + 8 + 6 + 4 characters, within a DNS label.
pub fn group_service_name(did: &str, role: &str, revision: &str, group: i32) -> String {
    format!("{did}-{role}-{}-{group}", short_revision(revision))
}

/// Name of a worker pod: `<name>-<role>-<rev5>-<group>-<rank>`, so that groups of two revisions
/// exist side by side.
pub fn pod_name(did: &str, role: &str, revision: &str, group: i32, rank: i32) -> String {
    format!("{}-{rank}", group_service_name(did, role, revision, group))
}

/// Labels selecting every object of one deployment.
pub fn deployment_labels(did: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), did.to_string()),
        (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
    ])
}

fn group_selector(did: &str, role: &str, revision: &str, group: i32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), did.to_string()),
        (labels::ROLE.to_string(), role.to_string()),
        (labels::REVISION.to_string(), revision.to_string()),
        (labels::GROUP.to_string(), group.to_string()),
    ])
}

/// Metadata every owned object carries: namespace, labels, owner reference.
fn owned_meta(
    did: &DeepInferDeployment,
    name: String,
    extra_labels: BTreeMap<String, String>,
) -> ObjectMeta {
    let mut labels = deployment_labels(&did.name_any());
    labels.extend(extra_labels);
    ObjectMeta {
        name: Some(name),
        namespace: did.namespace(),
        labels: Some(labels),
        owner_references: owner_ref(did).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// Controller owner reference to the resource (garbage collection deletes children with it).
pub fn owner_ref(did: &DeepInferDeployment) -> Option<OwnerReference> {
    did.controller_owner_ref(&())
}

/// Records the object's own hash in an annotation (computed before the annotation is added).
fn stamp<T: Serialize + Resource>(mut obj: T) -> T {
    let hash = short_hash(&obj, 16);
    obj.meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(APPLIED_HASH_ANNOTATION.to_string(), hash);
    obj
}

/// The hash an object was applied with, if any.
pub fn applied_hash<T: Resource>(obj: &T) -> Option<&str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(APPLIED_HASH_ANNOTATION)
        .map(String::as_str)
}

/// Restricted-profile container security context (no escalation, no capabilities, seccomp).
pub fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..SecurityContext::default()
    }
}

fn restricted_pod() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_USER),
        fs_group: Some(RUN_AS_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// Tolerations for the taints device plugins commonly put on accelerator nodes.
fn tolerations(kind: AcceleratorType) -> Vec<Toleration> {
    let key = match kind {
        AcceleratorType::Nvidia => "nvidia.com/gpu",
        AcceleratorType::Ascend => "huawei.com/Ascend910",
    };
    vec![Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }]
}

/// Engine resources: `spec.runtime.resources` (default CPU and memory requests, so the pod is
/// never BestEffort) with the accelerator's devices as both request and limit.
fn engine_resources(spec: &DeepInferDeploymentSpec, devices: i32) -> ResourceRequirements {
    let device = spec.accelerator.device_resource().to_string();
    let count = Quantity(devices.to_string());
    let mut res = spec.runtime.resources.clone().unwrap_or_default();
    let requests = res.requests.get_or_insert_with(BTreeMap::new);
    for (name, default) in [
        ("cpu", DEFAULT_CPU_REQUEST),
        ("memory", DEFAULT_MEMORY_REQUEST),
    ] {
        let limited = res.limits.as_ref().and_then(|l| l.get(name)).cloned();
        requests
            .entry(name.to_string())
            .or_insert_with(|| limited.unwrap_or_else(|| Quantity(default.into())));
    }
    requests.insert(device.clone(), count.clone());
    res.limits
        .get_or_insert_with(BTreeMap::new)
        .insert(device, count);
    res
}

fn health_probe(period_seconds: i32, failure_threshold: i32) -> k8s_openapi::api::core::v1::Probe {
    k8s_openapi::api::core::v1::Probe {
        http_get: Some(k8s_openapi::api::core::v1::HTTPGetAction {
            path: Some(HEALTH_PATH.into()),
            port: IntOrString::String("serve".into()),
            scheme: Some("HTTP".into()),
            ..Default::default()
        }),
        period_seconds: Some(period_seconds),
        failure_threshold: Some(failure_threshold),
        timeout_seconds: Some(5),
        ..Default::default()
    }
}

/// The engine's startup probe: `spec.runtime.startupProbe`, else HTTP GET [`HEALTH_PATH`] every
/// 10 s for up to [`STARTUP_SECONDS`] while the weights load.
pub fn startup_probe(spec: &DeepInferDeploymentSpec) -> k8s_openapi::api::core::v1::Probe {
    spec.runtime
        .startup_probe
        .clone()
        .unwrap_or_else(|| health_probe(10, STARTUP_SECONDS / 10))
}

/// The engine's readiness probe: `spec.runtime.readinessProbe`, else HTTP GET [`HEALTH_PATH`]
/// every 10 s, unready after 3 failures.
pub fn readiness_probe(spec: &DeepInferDeploymentSpec) -> k8s_openapi::api::core::v1::Probe {
    spec.runtime
        .readiness_probe
        .clone()
        .unwrap_or_else(|| health_probe(10, 3))
}

fn checkpoint_volume(claim: &str, read_only: bool) -> Volume {
    Volume {
        name: "checkpoint".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: Some(read_only),
        }),
        ..Volume::default()
    }
}

fn shm_volume() -> Volume {
    Volume {
        name: "dshm".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: None,
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

/// Identity of one rank inside one group.
#[derive(Clone, Debug)]
pub struct RankOf<'a> {
    /// Role.
    pub role: &'a RoleSpec,
    /// Revision of the group.
    pub revision: &'a str,
    /// Group index.
    pub group: i32,
    /// Rank inside the group.
    pub rank: i32,
}

/// The engine environment every rank gets: offline hub, model dir, rank / world / leader.
fn engine_env(did: &DeepInferDeployment, at: &RankOf<'_>, shape: &GroupShape) -> Vec<EnvVar> {
    let spec = &did.spec;
    let name = did.name_any();
    let ns = did.namespace().unwrap_or_default();
    let svc = group_service_name(&name, &at.role.name, at.revision, at.group);
    let leader = format!("rank-0.{svc}.{ns}.svc");
    let p = &at.role.parallel;
    let mut out = vec![
        env("HF_HUB_OFFLINE", "1"),
        env("DEEPINFER_HF_MODEL_DIR", MODEL_MOUNT),
        env("DEEPINFER_ROLE", at.role.name.clone()),
        env("DEEPINFER_GROUP", at.group.to_string()),
        env("DEEPINFER_RANK", at.rank.to_string()),
        env("DEEPINFER_NUM_PODS", shape.pods.to_string()),
        env(
            "DEEPINFER_DEVICES_PER_POD",
            shape.devices_per_pod.to_string(),
        ),
        env("DEEPINFER_WORLD_SIZE", shape.world_size.to_string()),
        env("DEEPINFER_TENSOR_PARALLEL", p.tensor.to_string()),
        env("DEEPINFER_PIPELINE_PARALLEL", p.pipeline.to_string()),
        env("DEEPINFER_DATA_PARALLEL", p.data.to_string()),
        env("DEEPINFER_EXPERT_PARALLEL", p.expert.to_string()),
        env("DEEPINFER_LEADER_ADDRESS", leader.clone()),
        env("MASTER_ADDR", leader),
        env("MASTER_PORT", RENDEZVOUS_PORT.to_string()),
        env_field("POD_NAME", "metadata.name"),
        env_field("POD_IP", "status.podIP"),
    ];
    out.extend(spec.runtime.env.iter().cloned());
    out
}

/// Local directory of the checkpoint inside engine containers.
pub fn model_dir(spec: &DeepInferDeploymentSpec) -> String {
    let rel = checkpoint_location(spec)
        .map(|(_, p)| p)
        .unwrap_or_default();
    join_path(MODEL_MOUNT, &rel)
}

/// Engine arguments: an explicit local `--model_name`, then the user's extra args.
fn engine_args(spec: &DeepInferDeploymentSpec) -> Vec<String> {
    let mut args = vec!["--model_name".to_string(), model_dir(spec)];
    args.extend(spec.runtime.args.iter().cloned());
    args
}

/// The pod spec shared by worker pods and acceptance pods of one rank.
fn engine_pod_spec(did: &DeepInferDeployment, at: &RankOf<'_>, shape: &GroupShape) -> PodSpec {
    let spec = &did.spec;
    let name = did.name_any();
    let claim = checkpoint_location(spec)
        .map(|(c, _)| c)
        .unwrap_or_default();
    let container = Container {
        name: "engine".into(),
        image: Some(spec.runtime.image.clone()),
        args: Some(engine_args(spec)),
        env: Some(engine_env(did, at, shape)),
        resources: Some(engine_resources(spec, shape.devices_per_pod)),
        ports: Some(vec![
            k8s_openapi::api::core::v1::ContainerPort {
                name: Some("serve".into()),
                container_port: SERVE_PORT,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
            k8s_openapi::api::core::v1::ContainerPort {
                name: Some("rendezvous".into()),
                container_port: RENDEZVOUS_PORT,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        ]),
        volume_mounts: Some(vec![
            mount("checkpoint", MODEL_MOUNT, true),
            mount("dshm", "/dev/shm", false),
        ]),
        security_context: Some(restricted_container()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    };
    PodSpec {
        containers: vec![container],
        volumes: Some(vec![checkpoint_volume(&claim, true), shm_volume()]),
        node_selector: Some(spec.accelerator.node_selector()),
        tolerations: Some(tolerations(spec.accelerator.kind)),
        // One pod is inside one domain by definition; requiring the label would also keep
        // single-node groups off nodes that carry no domain label (e.g. plain 8-GPU boards).
        affinity: (shape.pods > 1).then(|| Affinity {
            pod_affinity: Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: Some(group_selector(
                            &name,
                            &at.role.name,
                            at.revision,
                            at.group,
                        )),
                        match_expressions: None,
                    }),
                    topology_key: spec.accelerator.scale_up_domain_key().to_string(),
                    ..PodAffinityTerm::default()
                }]),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Affinity::default()
        }),
        hostname: Some(format!("rank-{}", at.rank)),
        subdomain: Some(group_service_name(
            &name,
            &at.role.name,
            at.revision,
            at.group,
        )),
        restart_policy: Some("Never".into()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(restricted_pod()),
        ..PodSpec::default()
    }
}

/// Labels of one rank's pod.
fn rank_labels(at: &RankOf<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::ROLE.to_string(), at.role.name.clone()),
        (labels::GROUP.to_string(), at.group.to_string()),
        (labels::RANK.to_string(), at.rank.to_string()),
        (labels::REVISION.to_string(), at.revision.to_string()),
        (labels::COMPONENT.to_string(), "worker".to_string()),
    ])
}

/// One worker pod: `<name>-<role>-<rev5>-<group>-<rank>`, gated on `deepinfer.io/accepted`,
/// with the engine's startup and readiness probes.
pub fn worker_pod(did: &DeepInferDeployment, at: &RankOf<'_>) -> Pod {
    let shape = group_shape(&did.spec, at.role);
    let name = pod_name(
        &did.name_any(),
        &at.role.name,
        at.revision,
        at.group,
        at.rank,
    );
    let mut spec = engine_pod_spec(did, at, &shape);
    spec.readiness_gates = Some(vec![PodReadinessGate {
        condition_type: ACCEPTED_POD_CONDITION.into(),
    }]);
    if let Some(engine) = spec.containers.first_mut() {
        engine.startup_probe = Some(startup_probe(&did.spec));
        engine.readiness_probe = Some(readiness_probe(&did.spec));
    }
    stamp(Pod {
        metadata: owned_meta(did, name, rank_labels(at)),
        spec: Some(spec),
        status: None,
    })
}

/// Desired worker pods of a role's group, rank 0 first.
pub fn group_pods(
    did: &DeepInferDeployment,
    role: &RoleSpec,
    group: i32,
    revision: &str,
) -> Vec<Pod> {
    let shape = group_shape(&did.spec, role);
    (0..shape.pods)
        .map(|rank| {
            worker_pod(
                did,
                &RankOf {
                    role,
                    revision,
                    group,
                    rank,
                },
            )
        })
        .collect()
}

/// Headless Service of a group: stable DNS for rendezvous, published before readiness.
pub fn group_service(did: &DeepInferDeployment, role: &str, revision: &str, group: i32) -> Service {
    let name = group_service_name(&did.name_any(), role, revision, group);
    let mut extra = group_selector(&did.name_any(), role, revision, group);
    extra.insert(labels::COMPONENT.to_string(), "rendezvous".to_string());
    stamp(Service {
        metadata: owned_meta(did, name, extra),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(group_selector(&did.name_any(), role, revision, group)),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("rendezvous".into()),
                port: RENDEZVOUS_PORT,
                target_port: Some(IntOrString::Int(RENDEZVOUS_PORT)),
                // Explicit: server-side apply on older API servers needs the list-map key.
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// Service of a role: traffic to the group leaders that are Ready (hence accepted and passing
/// their probes), of any revision, so that both revisions serve while a rollout runs.
pub fn role_service(did: &DeepInferDeployment, role: &str) -> Service {
    let name = role_service_name(&did.name_any(), role);
    let selector = BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), did.name_any()),
        (labels::ROLE.to_string(), role.to_string()),
        (labels::RANK.to_string(), "0".to_string()),
        (labels::COMPONENT.to_string(), "worker".to_string()),
    ]);
    let extra = BTreeMap::from([
        (labels::ROLE.to_string(), role.to_string()),
        (labels::COMPONENT.to_string(), "serving".to_string()),
    ]);
    stamp(Service {
        metadata: owned_meta(did, name, extra),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("serve".into()),
                port: SERVE_PORT,
                target_port: Some(IntOrString::String("serve".into())),
                // Explicit: server-side apply on older API servers needs the list-map key.
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// Every Service the deployment should have: one per role, one per group in `groups`
/// (role, revision, index).
pub fn services(did: &DeepInferDeployment, groups: &[(String, String, i32)]) -> Vec<Service> {
    let mut out = Vec::new();
    for role in &did.spec.roles {
        out.push(role_service(did, &role.name));
        for (_, revision, group) in groups.iter().filter(|(r, _, _)| *r == role.name) {
            out.push(group_service(did, &role.name, revision, *group));
        }
    }
    out
}

/// Name of a role's PodDisruptionBudget (the same as its Service).
pub fn budget_name(did: &str, role: &str) -> String {
    role_service_name(did, role)
}

/// A PodDisruptionBudget per role over its worker pods: a voluntary eviction (a node drain) may
/// take down at most `rollout.maxUnavailable` pods, hence at most that many groups. With the
/// default 0, drains wait until the pods are moved by a rollout or deleted by hand.
pub fn budget(
    did: &DeepInferDeployment,
    role: &RoleSpec,
) -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
    use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
    let selector = BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), did.name_any()),
        (labels::ROLE.to_string(), role.name.clone()),
        (labels::COMPONENT.to_string(), "worker".to_string()),
    ]);
    let extra = BTreeMap::from([
        (labels::ROLE.to_string(), role.name.clone()),
        (
            labels::COMPONENT.to_string(),
            "disruption-budget".to_string(),
        ),
    ]);
    stamp(PodDisruptionBudget {
        metadata: owned_meta(did, budget_name(&did.name_any(), &role.name), extra),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(role.rollout.max_unavailable.max(0))),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            // A broken pod may always be evicted: it serves nothing.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

/// Name of the ControllerRevision keeping the spec of `revision`.
pub fn controller_revision_name(did: &str, revision: &str) -> String {
    format!("{did}-{revision}")
}

/// A ControllerRevision keeping the spec of `revision`, so that groups of a revision that is no
/// longer the spec's (the one serving while another is judged) can still be rebuilt.
pub fn controller_revision(
    did: &DeepInferDeployment,
    revision: &str,
    number: i64,
) -> k8s_openapi::api::apps::v1::ControllerRevision {
    let extra = BTreeMap::from([
        (labels::REVISION.to_string(), revision.to_string()),
        (labels::COMPONENT.to_string(), "revision".to_string()),
    ]);
    stamp(k8s_openapi::api::apps::v1::ControllerRevision {
        metadata: owned_meta(
            did,
            controller_revision_name(&did.name_any(), revision),
            extra,
        ),
        data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
            serde_json::json!({ "spec": did.spec }),
        )),
        revision: number,
    })
}

/// The resource as it was at the revision a ControllerRevision keeps: its spec, with today's
/// metadata (name, namespace, owner).
pub fn at_revision(
    did: &DeepInferDeployment,
    kept: &k8s_openapi::api::apps::v1::ControllerRevision,
) -> Option<DeepInferDeployment> {
    let spec = kept.data.as_ref()?.0.get("spec")?.clone();
    let spec: DeepInferDeploymentSpec = serde_json::from_value(spec).ok()?;
    let mut past = did.clone();
    past.spec = spec;
    Some(past)
}

/// A run-to-completion Job of the operator's own binary over the checkpoint volume.
pub fn operator_job(
    did: &DeepInferDeployment,
    name: String,
    component: &str,
    operator_image: &str,
    args: Vec<String>,
    extra_env: Vec<EnvVar>,
    read_only: bool,
) -> Job {
    let claim = checkpoint_location(&did.spec)
        .map(|(c, _)| c)
        .unwrap_or_default();
    let extra = BTreeMap::from([(labels::COMPONENT.to_string(), component.to_string())]);
    let meta = owned_meta(did, name, extra.clone());
    let mut pod_labels = deployment_labels(&did.name_any());
    pod_labels.extend(extra);
    let container = Container {
        name: component.into(),
        image: Some(operator_image.into()),
        command: Some(vec!["deepinfer-operator".into()]),
        args: Some(args),
        env: Some(extra_env),
        volume_mounts: Some(vec![mount("checkpoint", CHECKPOINT_MOUNT, read_only)]),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted_container()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    };
    stamp(Job {
        metadata: meta,
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(vec![checkpoint_volume(&claim, read_only)]),
                    restart_policy: Some("Never".into()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    security_context: Some(restricted_pod()),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

/// Key of what verification depends on: source, licence and every layout.
pub fn checkpoint_key(spec: &DeepInferDeploymentSpec) -> String {
    let layouts: Vec<_> = spec.roles.iter().map(|r| (&r.name, &r.parallel)).collect();
    short_hash(
        &(
            &spec.model.name,
            &spec.model.license,
            &spec.model.source,
            layouts,
        ),
        10,
    )
}

/// `<role>=<tensor>x<pipeline>x<data>x<expert>` for each role, as the verifier takes them.
pub fn layout_args(spec: &DeepInferDeploymentSpec) -> Vec<String> {
    spec.roles
        .iter()
        .flat_map(|r| {
            let p = &r.parallel;
            [
                "--layout".to_string(),
                format!(
                    "{}={}x{}x{}x{}",
                    r.name, p.tensor, p.pipeline, p.data, p.expert
                ),
            ]
        })
        .collect()
}

/// The fetch Job: downloads the pinned hub revision into the claim.
pub fn fetch_job(did: &DeepInferDeployment, operator_image: &str) -> Option<Job> {
    let hub = did.spec.model.source.hub.as_ref()?;
    let (_, rel) = checkpoint_location(&did.spec)?;
    let mut args = vec![
        "fetch-checkpoint".into(),
        "--repo".into(),
        did.spec.model.name.clone(),
        "--revision".into(),
        hub.revision.clone(),
        "--dest".into(),
        join_path(CHECKPOINT_MOUNT, &rel),
    ];
    if let Some(endpoint) = &hub.endpoint {
        args.extend(["--endpoint".into(), endpoint.clone()]);
    }
    let mut env_vars = Vec::new();
    if let Some(secret) = &hub.token_secret_name {
        env_vars.push(EnvVar {
            name: "HF_TOKEN".into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(k8s_openapi::api::core::v1::SecretKeySelector {
                    name: secret.clone(),
                    key: "token".into(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        });
    }
    let name = format!("{}-fetch-{}", did.name_any(), checkpoint_key(&did.spec));
    Some(operator_job(
        did,
        name,
        "fetch",
        operator_image,
        args,
        env_vars,
        false,
    ))
}

/// The verification Job: checks files, shard headers, licence and layout.
pub fn verify_job(did: &DeepInferDeployment, operator_image: &str) -> Job {
    let spec = &did.spec;
    let rel = checkpoint_location(spec)
        .map(|(_, p)| p)
        .unwrap_or_default();
    let revision = spec
        .model
        .source
        .hub
        .as_ref()
        .map_or_else(|| "volume".to_string(), |h| h.revision.clone());
    let mut args = vec![
        "verify-checkpoint".into(),
        "--dir".into(),
        join_path(CHECKPOINT_MOUNT, &rel),
        "--license".into(),
        spec.model.license.clone(),
        "--revision".into(),
        revision,
    ];
    args.extend(layout_args(spec));
    let name = format!("{}-verify-{}", did.name_any(), checkpoint_key(spec));
    operator_job(did, name, "verify", operator_image, args, Vec::new(), true)
}

/// Seconds after the acceptance leader's engine container started by which the run must have
/// ended: the runner's own timeout plus five minutes for writing the evidence.
pub fn acceptance_deadline(spec: &DeepInferDeploymentSpec) -> i64 {
    i64::from(spec.acceptance.timeout_seconds) + 300
}

/// Where the injected runner lives inside the engine container of an acceptance pod.
pub const RUNNER_DIR: &str = "/deepinfer/bin";
/// Where the acceptance spec ConfigMap is mounted.
pub const ACCEPTANCE_SPEC_DIR: &str = "/deepinfer/spec";
/// Key of the resolved acceptance spec inside its ConfigMap.
pub const ACCEPTANCE_SPEC_KEY: &str = "acceptance.yaml";
/// Scratch space of the runner (prompts and outputs files).
pub const ACCEPTANCE_WORK_DIR: &str = "/deepinfer/work";

/// The role whose group shape the acceptance workload runs on: `worker` (colocated) if present,
/// else `decode`, else the first role.
pub fn acceptance_role(spec: &DeepInferDeploymentSpec) -> Option<&RoleSpec> {
    ["worker", "decode"]
        .iter()
        .find_map(|n| spec.roles.iter().find(|r| r.name == *n))
        .or_else(|| spec.roles.first())
}

/// Names of one acceptance run of `revision` (a new rerun token gives new names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptanceNames {
    /// Prefix shared by the run's objects: `<name>-accept-<revision>-<token hash>`.
    pub run: String,
    /// ConfigMap holding the resolved acceptance spec.
    pub spec_configmap: String,
    /// ConfigMap the runner writes the manifest and outputs into.
    pub evidence_configmap: String,
    /// ServiceAccount (and Role, RoleBinding) the runner acts as.
    pub service_account: String,
}

impl AcceptanceNames {
    /// Names for `did` at `revision` with rerun token `token`.
    pub fn new(did: &str, revision: &str, token: &str) -> Self {
        let run = format!("{did}-accept-{revision}-{}", short_hash(&token, 4));
        Self {
            spec_configmap: format!("{run}-spec"),
            evidence_configmap: format!("{did}-evidence-{revision}-{}", short_hash(&token, 4)),
            service_account: format!("{did}-acceptance"),
            run,
        }
    }

    /// Job of one rank.
    pub fn job(&self, rank: i32) -> String {
        format!("{}-r{rank}", self.run)
    }
}

/// The ServiceAccount, Role and RoleBinding that let the acceptance runner write its evidence
/// ConfigMap (and nothing else).
pub fn acceptance_rbac(
    did: &DeepInferDeployment,
    names: &AcceptanceNames,
) -> (ServiceAccount, Role, RoleBinding) {
    let extra = BTreeMap::from([(labels::COMPONENT.to_string(), "acceptance".to_string())]);
    let sa = stamp(ServiceAccount {
        metadata: owned_meta(did, names.service_account.clone(), extra.clone()),
        ..ServiceAccount::default()
    });
    let role = stamp(Role {
        metadata: owned_meta(did, names.service_account.clone(), extra.clone()),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["create".into(), "get".into(), "update".into()],
            ..PolicyRule::default()
        }]),
    });
    let binding = stamp(RoleBinding {
        metadata: owned_meta(did, names.service_account.clone(), extra),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: names.service_account.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: names.service_account.clone(),
            namespace: did.namespace(),
            ..Subject::default()
        }]),
    });
    (sa, role, binding)
}

/// The ConfigMap carrying the resolved acceptance spec (prompts inline) for the runner.
pub fn acceptance_spec_configmap(
    did: &DeepInferDeployment,
    names: &AcceptanceNames,
    revision: &str,
    spec_yaml: String,
) -> ConfigMap {
    let extra = BTreeMap::from([
        (labels::COMPONENT.to_string(), "acceptance".to_string()),
        (labels::REVISION.to_string(), revision.to_string()),
    ]);
    stamp(ConfigMap {
        metadata: owned_meta(did, names.spec_configmap.clone(), extra),
        data: Some(BTreeMap::from([(
            ACCEPTANCE_SPEC_KEY.to_string(),
            spec_yaml,
        )])),
        ..ConfigMap::default()
    })
}

fn acceptance_labels(names: &AcceptanceNames, revision: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::COMPONENT.to_string(), "acceptance".to_string()),
        (labels::REVISION.to_string(), revision.to_string()),
        (labels::GROUP.to_string(), names.run.clone()),
    ])
}

/// Headless Service for the rendezvous of a multi-pod acceptance group.
pub fn acceptance_service(
    did: &DeepInferDeployment,
    names: &AcceptanceNames,
    revision: &str,
) -> Service {
    let mut selector = deployment_labels(&did.name_any());
    selector.extend(acceptance_labels(names, revision));
    stamp(Service {
        metadata: owned_meta(did, names.run.clone(), acceptance_labels(names, revision)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("rendezvous".into()),
                port: RENDEZVOUS_PORT,
                target_port: Some(IntOrString::Int(RENDEZVOUS_PORT)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// The Job of one rank of the acceptance group: the same image, checkpoint, devices, placement
/// and layout as a serving group of the acceptance role. Rank 0 runs the injected runner
/// (`deepinfer-operator accept`), which starts the engine; other ranks run the engine alone.
pub fn acceptance_job(
    did: &DeepInferDeployment,
    names: &AcceptanceNames,
    rank: i32,
    revision: &str,
    operator_image: &str,
) -> Option<Job> {
    let role = acceptance_role(&did.spec)?;
    let spec = &did.spec;
    let shape = group_shape(spec, role);
    let at = RankOf {
        role,
        revision,
        group: 0,
        rank,
    };
    let mut pod = engine_pod_spec(did, &at, &shape);
    pod.subdomain = (shape.pods > 1).then(|| names.run.clone());
    let mut group_labels = deployment_labels(&did.name_any());
    group_labels.extend(acceptance_labels(names, revision));
    if let Some(term) = pod
        .affinity
        .as_mut()
        .and_then(|a| a.pod_affinity.as_mut())
        .and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_mut()
        })
        .and_then(|terms| terms.first_mut())
    {
        term.label_selector = Some(LabelSelector {
            match_labels: Some(group_labels.clone()),
            match_expressions: None,
        });
    }
    let engine = pod.containers.first_mut()?;
    if let Some(env) = engine.env.as_mut() {
        let leader = format!(
            "rank-0.{}.{}.svc",
            names.run,
            did.namespace().unwrap_or_default()
        );
        for e in env
            .iter_mut()
            .filter(|e| e.name == "DEEPINFER_LEADER_ADDRESS" || e.name == "MASTER_ADDR")
        {
            e.value = Some(leader.clone());
        }
    }
    if rank == 0 {
        let p = &role.parallel;
        let checkpoint_revision = spec
            .model
            .source
            .hub
            .as_ref()
            .map_or_else(|| "volume".to_string(), |h| h.revision.clone());
        engine.command = Some(vec![
            format!("{RUNNER_DIR}/deepinfer-operator"),
            "accept".into(),
        ]);
        engine.args = Some(vec![
            "--spec-file".into(),
            format!("{ACCEPTANCE_SPEC_DIR}/{ACCEPTANCE_SPEC_KEY}"),
            "--model-dir".into(),
            model_dir(spec),
            "--revision".into(),
            revision.to_string(),
            "--image".into(),
            spec.runtime.image.clone(),
            "--template-version".into(),
            TEMPLATE_VERSION.to_string(),
            "--runtime-commit".into(),
            spec.runtime.commit.clone(),
            "--checkpoint-revision".into(),
            checkpoint_revision,
            "--layout".into(),
            format!(
                "tensor={},pipeline={},data={},expert={}",
                p.tensor, p.pipeline, p.data, p.expert
            ),
            "--evidence-configmap".into(),
            names.evidence_configmap.clone(),
            "--owner-name".into(),
            did.name_any(),
            "--owner-uid".into(),
            did.uid().unwrap_or_default(),
            "--work-dir".into(),
            ACCEPTANCE_WORK_DIR.into(),
        ]);
        engine
            .env
            .get_or_insert_with(Vec::new)
            .push(env_field("POD_NAMESPACE", "metadata.namespace"));
        engine.termination_message_policy = Some("File".into());
        engine.volume_mounts.get_or_insert_with(Vec::new).extend([
            mount("runner", RUNNER_DIR, true),
            mount("acceptance-spec", ACCEPTANCE_SPEC_DIR, true),
            mount("work", ACCEPTANCE_WORK_DIR, false),
        ]);
        pod.init_containers = Some(vec![Container {
            name: "install-runner".into(),
            image: Some(operator_image.into()),
            command: Some(vec!["deepinfer-operator".into()]),
            args: Some(vec![
                "install-runner".into(),
                format!("{RUNNER_DIR}/deepinfer-operator"),
            ]),
            volume_mounts: Some(vec![mount("runner", RUNNER_DIR, false)]),
            security_context: Some(SecurityContext {
                read_only_root_filesystem: Some(true),
                ..restricted_container()
            }),
            ..Container::default()
        }]);
        let volumes = pod.volumes.get_or_insert_with(Vec::new);
        volumes.push(Volume {
            name: "runner".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        volumes.push(Volume {
            name: "work".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        volumes.push(Volume {
            name: "acceptance-spec".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names.spec_configmap.clone(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
        pod.service_account_name = Some(names.service_account.clone());
        pod.automount_service_account_token = Some(true);
    }
    let mut job_labels = acceptance_labels(names, revision);
    job_labels.insert(labels::RANK.to_string(), rank.to_string());
    let mut pod_labels = group_labels;
    pod_labels.insert(labels::RANK.to_string(), rank.to_string());
    // No activeDeadlineSeconds: it would count time spent Pending for devices. The runner's own
    // timeout ends the run; the controller ends a pod stuck past it (see `acceptance_deadline`).
    Some(stamp(Job {
        metadata: owned_meta(did, names.job(rank), job_labels),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn did(accelerator: serde_json::Value, roles: serde_json::Value) -> DeepInferDeployment {
        serde_json::from_value(json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferDeployment",
            "metadata": {"name": "flash", "namespace": "serving", "uid": "u-1"},
            "spec": {
                "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                          "source": {"volume": {"claimName": "ckpt", "path": "/model/"}}},
                "runtime": {"image": IMAGE, "commit": "0123456789abcdef0123456789abcdef01234567",
                            "args": ["--max_batch_size", "8"]},
                "accelerator": accelerator,
                "roles": roles,
                "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
            }
        }))
        .expect("valid test resource")
    }

    fn env_of(c: &Container) -> BTreeMap<String, String> {
        c.env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn nvidia_pods_are_pinned_placed_gated_and_labelled() {
        let d = did(
            json!({"type": "NVIDIA", "product": "NVIDIA-H200"}),
            json!([{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}]),
        );
        let rev = revision(&d.spec);
        let pods = group_pods(&d, &d.spec.roles[0], 1, &rev);
        let short = &rev[..5];
        assert_eq!(
            pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
            [
                format!("flash-worker-{short}-1-0"),
                format!("flash-worker-{short}-1-1")
            ],
            "names carry the revision, so two revisions' groups exist side by side"
        );
        let pod = &pods[1];
        let labels = pod.labels();
        for (k, v) in [
            (labels::DEPLOYMENT, "flash"),
            (labels::ROLE, "worker"),
            (labels::GROUP, "1"),
            (labels::RANK, "1"),
            (labels::REVISION, rev.as_str()),
        ] {
            assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
        }
        assert_eq!(pod.owner_references()[0].uid, "u-1");
        assert_eq!(pod.owner_references()[0].controller, Some(true));
        let spec = pod.spec.as_ref().expect("spec");
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some(IMAGE));
        assert!(
            c.command.is_none(),
            "the image's own entrypoint runs the engine"
        );
        assert_eq!(
            c.args.clone().expect("args"),
            ["--model_name", "/models/model", "--max_batch_size", "8"]
        );
        let res = c.resources.as_ref().expect("resources");
        assert_eq!(
            res.requests.as_ref().expect("requests")["nvidia.com/gpu"],
            res.limits.as_ref().expect("limits")["nvidia.com/gpu"],
            "device requests equal limits"
        );
        assert_eq!(
            res.limits.as_ref().expect("limits")["nvidia.com/gpu"].0,
            "8"
        );
        let env = env_of(c);
        assert_eq!(env["HF_HUB_OFFLINE"], "1");
        assert_eq!(env["DEEPINFER_HF_MODEL_DIR"], MODEL_MOUNT);
        assert_eq!(env["DEEPINFER_RANK"], "1");
        assert_eq!(env["DEEPINFER_NUM_PODS"], "2");
        assert_eq!(env["DEEPINFER_WORLD_SIZE"], "16");
        assert_eq!(
            env["DEEPINFER_LEADER_ADDRESS"],
            format!("rank-0.flash-worker-{short}-1.serving.svc")
        );
        let selector = spec.node_selector.clone().expect("selector");
        assert_eq!(selector["nvidia.com/gpu.present"], "true");
        assert_eq!(selector["nvidia.com/gpu.product"], "NVIDIA-H200");
        let term = &spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .expect("required affinity")[0];
        assert_eq!(term.topology_key, "nvidia.com/gpu.clique");
        let together = term
            .label_selector
            .as_ref()
            .and_then(|l| l.match_labels.clone())
            .expect("group selector");
        assert_eq!(together[labels::GROUP], "1");
        assert_eq!(
            together[labels::REVISION],
            rev,
            "a group is placed with its own revision's ranks only"
        );
        assert_eq!(
            spec.readiness_gates.as_ref().expect("gates")[0].condition_type,
            ACCEPTED_POD_CONDITION
        );
        assert_eq!(
            spec.restart_policy.as_deref(),
            Some("Never"),
            "a failed rank fails its pod, so the group is replaced"
        );
        assert_eq!(
            spec.subdomain.clone(),
            Some(format!("flash-worker-{short}-1"))
        );
        let sc = c.security_context.as_ref().expect("security context");
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(spec.automount_service_account_token, Some(false));
    }

    #[test]
    fn ascend_pods_request_npus_and_stay_in_one_super_pod() {
        let d = did(
            json!({"type": "Ascend", "devicesPerPod": 8}),
            json!([{"name": "decode", "replicas": 1, "parallel": {"tensor": 8, "data": 2, "expert": 16}}]),
        );
        let pods = group_pods(&d, &d.spec.roles[0], 0, "r");
        assert_eq!(pods.len(), 2);
        let spec = pods[0].spec.as_ref().expect("spec");
        let limits = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits");
        assert_eq!(limits["huawei.com/Ascend910"].0, "8");
        assert!(!limits.contains_key("nvidia.com/gpu"));
        assert_eq!(
            spec.node_selector.clone().expect("selector")["accelerator"],
            "huawei-Ascend910"
        );
        let term = &spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .expect("affinity")[0];
        assert_eq!(term.topology_key, "huawei.com/super-pod-id");
        assert!(spec
            .tolerations
            .clone()
            .expect("tolerations")
            .iter()
            .any(|t| t.key.as_deref() == Some("huawei.com/Ascend910")));
    }

    #[test]
    fn a_single_pod_group_needs_no_domain_label() {
        let d = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
        );
        let pods = group_pods(&d, &d.spec.roles[0], 0, "r");
        assert_eq!(pods.len(), 1);
        assert!(pods[0].spec.as_ref().expect("spec").affinity.is_none());
    }

    #[test]
    fn the_revision_tracks_running_bits_but_not_replicas_or_prompts() {
        let a = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
        );
        let mut b = a.clone();
        b.spec.roles[0].replicas = 5;
        b.spec.acceptance.prompts[0].prompt = "other".into();
        assert_eq!(revision(&a.spec), revision(&b.spec));
        let mut c = a.clone();
        c.spec.runtime.image = IMAGE.replace("0123", "fedc");
        assert_ne!(revision(&a.spec), revision(&c.spec));
        let mut d = a.clone();
        d.spec.roles[0].parallel.expert = 8;
        assert_ne!(revision(&a.spec), revision(&d.spec));
    }

    #[test]
    fn services_route_to_leaders_and_rendezvous_per_group() {
        let d = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "prefill", "replicas": 2, "parallel": {"tensor": 8}}]),
        );
        let groups = [
            ("prefill".to_string(), "aaaaa11111".to_string(), 0),
            ("prefill".to_string(), "bbbbb22222".to_string(), 0),
        ];
        let svcs = services(&d, &groups);
        let names: Vec<_> = svcs.iter().map(ResourceExt::name_any).collect();
        assert_eq!(
            names,
            [
                "flash-prefill",
                "flash-prefill-aaaaa-0",
                "flash-prefill-bbbbb-0"
            ]
        );
        let role = svcs[0].spec.as_ref().expect("spec");
        let selector = role.selector.clone().expect("selector");
        assert_eq!(selector[labels::RANK], "0");
        assert!(
            !selector.contains_key(labels::REVISION),
            "the role Service routes to leaders of every revision during a rollout"
        );
        let group = svcs[2].spec.as_ref().expect("spec");
        assert_eq!(group.cluster_ip.as_deref(), Some("None"));
        assert_eq!(group.publish_not_ready_addresses, Some(true));
        assert_eq!(
            group.selector.clone().expect("selector")[labels::REVISION],
            "bbbbb22222"
        );
    }

    #[test]
    fn the_acceptance_leader_runs_the_injected_runner_in_the_engine_image() {
        let d = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 3, "parallel": {"tensor": 16}}]),
        );
        let names = AcceptanceNames::new("flash", "rev1", "");
        let job = acceptance_job(
            &d,
            &names,
            0,
            "rev1",
            "ghcr.io/deepinfer/deepinfer-operator:0.1.0",
        )
        .expect("job");
        let pod = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .expect("pod");
        let init = &pod.init_containers.as_ref().expect("init")[0];
        assert_eq!(
            init.image.as_deref(),
            Some("ghcr.io/deepinfer/deepinfer-operator:0.1.0")
        );
        assert_eq!(init.args.clone().expect("args")[0], "install-runner");
        let engine = &pod.containers[0];
        assert_eq!(
            engine.image.as_deref(),
            Some(IMAGE),
            "acceptance runs the very image under test"
        );
        assert_eq!(
            engine.command.clone().expect("command"),
            [
                format!("{RUNNER_DIR}/deepinfer-operator"),
                "accept".to_string()
            ]
        );
        let args = engine.args.clone().expect("args");
        assert!(args
            .windows(2)
            .any(|w| w == ["--layout", "tensor=16,pipeline=1,data=1,expert=1"]));
        assert!(args
            .windows(2)
            .any(|w| w[0] == "--evidence-configmap" && w[1] == names.evidence_configmap));
        assert_eq!(
            engine
                .resources
                .as_ref()
                .and_then(|r| r.limits.clone())
                .expect("limits")["nvidia.com/gpu"]
                .0,
            "8"
        );
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some("flash-acceptance")
        );
        assert_eq!(
            job.spec.as_ref().and_then(|s| s.backoff_limit),
            Some(0),
            "no retry storm"
        );
        let follower = acceptance_job(&d, &names, 1, "rev1", "op").expect("follower");
        let fpod = follower.spec.and_then(|s| s.template.spec).expect("pod");
        assert!(
            fpod.init_containers.is_none() && fpod.containers[0].command.is_none(),
            "followers run the engine alone"
        );
    }

    #[test]
    fn engines_are_probed_and_never_best_effort() {
        let d = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
        );
        let pod = &group_pods(&d, &d.spec.roles[0], 0, "r")[0];
        let engine = &pod.spec.as_ref().expect("spec").containers[0];
        let startup = engine.startup_probe.as_ref().expect("startup probe");
        let get = startup.http_get.as_ref().expect("HTTP GET");
        assert_eq!(get.path.as_deref(), Some(HEALTH_PATH));
        assert_eq!(get.port, IntOrString::String("serve".into()));
        let allowed = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
        assert!(
            allowed >= 30 * 60,
            "weights get at least 30 minutes to load, not {allowed} s"
        );
        assert!(engine.readiness_probe.is_some());
        let requests = engine
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .expect("requests");
        assert!(
            requests.contains_key("cpu") && requests.contains_key("memory"),
            "CPU and memory requests keep the pod out of BestEffort: {requests:?}"
        );
        assert_eq!(requests["nvidia.com/gpu"].0, "8");
    }

    #[test]
    fn runtime_probes_and_resources_override_the_defaults_but_not_the_devices() {
        let mut d = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
        );
        d.spec.runtime = serde_json::from_value(json!({
            "image": IMAGE, "commit": "0123456",
            "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 3},
            "resources": {"limits": {"memory": "64Gi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "12"}}
        }))
        .expect("runtime");
        let pod = &group_pods(&d, &d.spec.roles[0], 0, "r")[0];
        let engine = &pod.spec.as_ref().expect("spec").containers[0];
        assert_eq!(
            engine
                .readiness_probe
                .as_ref()
                .and_then(|p| p.period_seconds),
            Some(3)
        );
        let res = engine.resources.as_ref().expect("resources");
        let requests = res.requests.clone().expect("requests");
        let limits = res.limits.clone().expect("limits");
        assert_eq!(requests["cpu"].0, "12");
        assert_eq!(
            requests["memory"].0, "64Gi",
            "a memory limit alone is also the request"
        );
        assert_eq!(
            limits["nvidia.com/gpu"].0, "8",
            "devices come from spec.accelerator"
        );
        assert_eq!(requests["nvidia.com/gpu"].0, "8");
    }

    #[test]
    fn the_revision_covers_the_template_version_and_resources_but_not_probes_or_rollout() {
        let a = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
        );
        let mut probed = a.clone();
        probed.spec.runtime.readiness_probe = Some(health_probe(1, 1));
        probed.spec.roles[0].rollout.max_unavailable = 1;
        assert_eq!(revision(&a.spec), revision(&probed.spec));
        let mut sized = a.clone();
        sized.spec.runtime.resources = Some(ResourceRequirements::default());
        assert_ne!(revision(&a.spec), revision(&sized.spec));
    }

    /// Hash of the engine container of a fixed resource, recorded at [`TEMPLATE_VERSION`].
    const ENGINE_AT_TEMPLATE_VERSION: (i32, &str) = (2, "bf227d0d7a484d45");

    #[test]
    fn the_template_version_moves_with_the_engine_container() {
        let d = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
        );
        let pod = &group_pods(&d, &d.spec.roles[0], 0, "r")[0];
        let mut engine = pod.spec.as_ref().expect("spec").containers[0].clone();
        // Probes roll without a new judgement; everything else the engine sees is judged.
        engine.startup_probe = None;
        engine.readiness_probe = None;
        let now = (TEMPLATE_VERSION, short_hash(&engine, 16));
        assert_eq!(
            (
                ENGINE_AT_TEMPLATE_VERSION.0,
                ENGINE_AT_TEMPLATE_VERSION.1.to_string()
            ),
            now,
            "the engine container changed: if the change alters what acceptance judged, bump \
             TEMPLATE_VERSION; then record the new pair in ENGINE_AT_TEMPLATE_VERSION"
        );
    }

    #[test]
    fn a_budget_per_role_allows_what_the_rollout_allows() {
        let d = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "decode", "replicas": 2, "parallel": {"tensor": 16},
                    "rollout": {"maxSurge": 0, "maxUnavailable": 1}}]),
        );
        let pdb = budget(&d, &d.spec.roles[0]);
        assert_eq!(pdb.name_any(), "flash-decode");
        let spec = pdb.spec.expect("spec");
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        let selector = spec
            .selector
            .and_then(|s| s.match_labels)
            .expect("selector");
        assert_eq!(selector[labels::ROLE], "decode");
        assert_eq!(selector[labels::COMPONENT], "worker");
        assert_eq!(pdb.metadata.owner_references.expect("owner")[0].uid, "u-1");
    }

    #[test]
    fn a_kept_revision_rebuilds_the_groups_of_its_spec() {
        let old = did(
            json!({"type": "NVIDIA"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
        );
        let rev = revision(&old.spec);
        let kept = controller_revision(&old, &rev, 1);
        let mut now = old.clone();
        now.spec.runtime.image = IMAGE.replace("0123", "fedc");
        now.spec.roles[0].replicas = 3;
        let past = at_revision(&now, &kept).expect("spec kept");
        assert_eq!(revision(&past.spec), rev);
        let pod = &group_pods(&past, &past.spec.roles[0], 0, &rev)[0];
        assert_eq!(
            pod.spec.as_ref().expect("spec").containers[0]
                .image
                .as_deref(),
            Some(IMAGE),
            "the serving revision's pods keep its image while another is judged"
        );
    }
}
