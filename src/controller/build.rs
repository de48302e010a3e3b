//! Build stage: the desired child objects as plain values, computed without a client.
//!
//! Every builder is a pure function of the resource (and, for Jobs, the operator's own image),
//! so pod specs are unit-tested without a cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodAffinity, PodAffinityTerm,
    PodReadinessGate, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements,
    SeccompProfile, SecurityContext, Service, ServicePort, ServiceSpec, Toleration, Volume,
    VolumeMount,
};
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

/// SHA-256 of a value's JSON form, as lowercase hex cut to `len` characters.
pub fn short_hash<T: Serialize>(value: &T, len: usize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    hex[..len.min(hex.len())].to_string()
}

/// The revision: a hash of everything that changes the running bits — image digest,
/// runtime commit, checkpoint source, accelerator, every role's layout, engine args and env.
/// Replica counts and the acceptance prompts are not part of it.
pub fn revision(spec: &DeepInferDeploymentSpec) -> String {
    #[derive(Serialize)]
    struct RunningBits<'a> {
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

/// Name of a group's headless Service (rendezvous of its ranks).
pub fn group_service_name(did: &str, role: &str, group: i32) -> String {
    format!("{did}-{role}-{group}")
}

/// Name of a worker pod.
pub fn pod_name(did: &str, role: &str, group: i32, rank: i32) -> String {
    format!("{did}-{role}-{group}-{rank}")
}

/// Labels selecting every object of one deployment.
pub fn deployment_labels(did: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), did.to_string()),
        (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
    ])
}

fn group_selector(did: &str, role: &str, group: i32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), did.to_string()),
        (labels::ROLE.to_string(), role.to_string()),
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

fn device_resources(spec: &DeepInferDeploymentSpec, devices: i32) -> ResourceRequirements {
    let res = BTreeMap::from([(
        spec.accelerator.device_resource().to_string(),
        Quantity(devices.to_string()),
    )]);
    ResourceRequirements {
        requests: Some(res.clone()),
        limits: Some(res),
        ..ResourceRequirements::default()
    }
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
    let svc = group_service_name(&name, &at.role.name, at.group);
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
        resources: Some(device_resources(spec, shape.devices_per_pod)),
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
        affinity: Some(Affinity {
            pod_affinity: Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: Some(group_selector(&name, &at.role.name, at.group)),
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
        subdomain: Some(group_service_name(&name, &at.role.name, at.group)),
        restart_policy: Some("Never".into()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(restricted_pod()),
        ..PodSpec::default()
    }
}

/// Labels of one rank's pod.
fn rank_labels(at: &RankOf<'_>, revision: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::ROLE.to_string(), at.role.name.clone()),
        (labels::GROUP.to_string(), at.group.to_string()),
        (labels::RANK.to_string(), at.rank.to_string()),
        (labels::REVISION.to_string(), revision.to_string()),
        (labels::COMPONENT.to_string(), "worker".to_string()),
    ])
}

/// One worker pod: `<name>-<role>-<group>-<rank>`, gated on `deepinfer.io/accepted`.
pub fn worker_pod(did: &DeepInferDeployment, at: &RankOf<'_>, revision: &str) -> Pod {
    let shape = group_shape(&did.spec, at.role);
    let name = pod_name(&did.name_any(), &at.role.name, at.group, at.rank);
    let mut spec = engine_pod_spec(did, at, &shape);
    spec.readiness_gates = Some(vec![PodReadinessGate {
        condition_type: ACCEPTED_POD_CONDITION.into(),
    }]);
    stamp(Pod {
        metadata: owned_meta(did, name, rank_labels(at, revision)),
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
        .map(|rank| worker_pod(did, &RankOf { role, group, rank }, revision))
        .collect()
}

/// Headless Service of a group: stable DNS for rendezvous, published before readiness.
pub fn group_service(did: &DeepInferDeployment, role: &str, group: i32) -> Service {
    let name = group_service_name(&did.name_any(), role, group);
    let mut extra = group_selector(&did.name_any(), role, group);
    extra.insert(labels::COMPONENT.to_string(), "rendezvous".to_string());
    stamp(Service {
        metadata: owned_meta(did, name, extra),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(group_selector(&did.name_any(), role, group)),
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

/// Service of a role: traffic to the group leaders that are Ready (hence accepted).
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

/// Every Service the deployment should have.
pub fn services(did: &DeepInferDeployment) -> Vec<Service> {
    let mut out = Vec::new();
    for role in &did.spec.roles {
        out.push(role_service(did, &role.name));
        for group in 0..role.replicas.max(0) {
            out.push(group_service(did, &role.name, group));
        }
    }
    out
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
