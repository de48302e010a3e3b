//! Engine pods: the pod spec shared by serving and acceptance ranks, worker pods with their
//! probes, resources and readiness gate.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, Pod, PodAffinity, PodAffinityTerm, PodReadinessGate,
    PodSchedulingGroup, PodSpec, ResourceRequirements, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::{
    labels, Component, DeepInferDeploymentSpec, RoleKind, RoleSpec, ACCEPTED_POD_CONDITION,
};
use crate::controller::validated::ValidatedDeployment;

use super::devices::{container_device_claims, pod_device_claims};
use super::peers::{PeerWiring, PEER_ENDPOINTS_DIR};
use super::rank_table::{
    rank_table_name, rank_table_volume, uses_rank_tables, RANK_TABLE_DIR, RANK_TABLE_KEY,
};
use super::{
    checkpoint_volume, env, env_field, group_selector, group_service_name, group_shape, model_dir,
    mount, owned_meta, pod_name, restricted_container, restricted_pod, shm_volume, stamp,
    tolerations, GroupShape, DEFAULT_CPU_REQUEST, DEFAULT_MEMORY_REQUEST, ENGINE_CONTAINER,
    HEALTH_PATH, MODEL_MOUNT, RENDEZVOUS_PORT, SERVE_PORT, STARTUP_SECONDS,
};

/// Engine resources: `spec.runtime.resources` (default CPU and memory requests, so the pod is
/// never BestEffort) with the accelerator's devices: the extended resource as both request and
/// limit, or, with a DeviceClass, the pod's device claim.
fn engine_resources(
    spec: &DeepInferDeploymentSpec,
    devices: i32,
    claims: &[k8s_openapi::api::core::v1::PodResourceClaim],
) -> ResourceRequirements {
    let device = spec.accelerator.device_resource().to_string();
    let count = Quantity(devices.to_string());
    let mut res = spec.runtime.resources.clone().unwrap_or_default();
    // Device entries given by the user are the accelerator's to set.
    for list in [&mut res.requests, &mut res.limits].into_iter().flatten() {
        list.remove(&device);
    }
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
    if !claims.is_empty() {
        res.claims = Some(container_device_claims(claims));
    }
    if spec.accelerator.device_class_name.is_none() {
        requests.insert(device.clone(), count.clone());
        res.limits
            .get_or_insert_with(BTreeMap::new)
            .insert(device, count);
    }
    res
}

pub(super) fn health_probe(
    period_seconds: i32,
    failure_threshold: i32,
) -> k8s_openapi::api::core::v1::Probe {
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

/// The serving engine's liveness probe: `spec.runtime.livenessProbe`, else HTTP GET
/// [`HEALTH_PATH`] every 10 s, failed after 6 misses.
pub fn liveness_probe(spec: &DeepInferDeploymentSpec) -> k8s_openapi::api::core::v1::Probe {
    spec.runtime
        .liveness_probe
        .clone()
        .unwrap_or_else(|| health_probe(10, 6))
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

/// How the ranks of one group find each other and stay together.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    /// Headless Service under which the ranks are `rank-<n>.<service>`.
    pub service: String,
    /// Labels every pod of the group carries: the placement affinity keeps them in one domain.
    pub members: BTreeMap<String, String>,
    /// Whether pods join the Service's subdomain (a single-pod run needs no rendezvous).
    pub subdomain: bool,
    /// PodGroup the pods belong to (`spec.schedulingGroup`), so that the scheduler binds every
    /// rank or none; `None` where groups are not PodGroups.
    pub pod_group: Option<String>,
    /// ConfigMap holding the group's HCCL rank table (Ascend serving groups), mounted at
    /// [`RANK_TABLE_DIR`] with `RANK_TABLE_FILE` set; `None` for groups without one.
    pub rank_table: Option<String>,
    /// How the engines reach the prefill / vision roles (decode groups of a disaggregated
    /// deployment; an acceptance run's decode group is wired to the run's own groups).
    pub peers: Option<PeerWiring>,
}

impl Rendezvous {
    /// The rendezvous of a serving group.
    pub fn serving(did: &ValidatedDeployment, at: &RankOf<'_>) -> Self {
        let name = did.name_any();
        let service = group_service_name(&name, &at.role.name, at.revision, at.group);
        Self {
            pod_group: did.pod_groups.then(|| service.clone()),
            rank_table: uses_rank_tables(&did.spec).then(|| rank_table_name(&service)),
            peers: RoleKind::Decode
                .named(&at.role.name)
                .then(|| PeerWiring::serving(did, at.revision))
                .flatten(),
            service,
            members: group_selector(&name, &at.role.name, at.revision, at.group),
            subdomain: true,
        }
    }
}

/// The engine environment every rank gets (the engine contract's, `crate::contract::ENV`):
/// contract version, offline hub, model dir, role, rank / world / layout, leader and peers;
/// then `spec.runtime.env`, then the role's own `spec.runtime.roles[].env`.
fn engine_env(
    did: &ValidatedDeployment,
    at: &RankOf<'_>,
    shape: &GroupShape,
    rendezvous: &Rendezvous,
) -> Vec<EnvVar> {
    use crate::contract::env as var;
    let spec = &did.spec;
    let ns = &did.namespace;
    let address = |rank: i32| format!("rank-{rank}.{}.{ns}.svc", rendezvous.service);
    let leader = address(0);
    let peers: Vec<String> = (0..shape.pods).map(address).collect();
    let p = &at.role.parallel;
    let mut out = vec![
        env(var::CONTRACT_VERSION, crate::contract::VERSION),
        env(var::HF_HUB_OFFLINE, "1"),
        env(var::MODEL_DIR, MODEL_MOUNT),
        env(var::ROLE, at.role.name.clone()),
        env(var::GROUP, at.group.to_string()),
        env(var::RANK, at.rank.to_string()),
        env(var::NUM_PODS, shape.pods.to_string()),
        env(var::DEVICES_PER_POD, shape.devices_per_pod.to_string()),
        env(var::WORLD_SIZE, shape.world_size.to_string()),
        env(var::TENSOR_PARALLEL, p.tensor.to_string()),
        env(var::PIPELINE_PARALLEL, p.pipeline.to_string()),
        env(var::DATA_PARALLEL, p.data.to_string()),
        env(var::EXPERT_PARALLEL, p.expert.to_string()),
        env(var::LEADER_ADDRESS, leader.clone()),
        env(var::PEERS, peers.join(",")),
        env(var::SERVE_PORT, SERVE_PORT.to_string()),
        env(var::MASTER_ADDR, leader),
        env(var::MASTER_PORT, RENDEZVOUS_PORT.to_string()),
        env_field(var::POD_NAME, "metadata.name"),
        env_field(var::POD_IP, "status.podIP"),
    ];
    if let Some(peers) = &rendezvous.peers {
        out.extend(peers.env());
    }
    if rendezvous.rank_table.is_some() {
        out.push(env(
            var::RANK_TABLE_FILE,
            format!("{RANK_TABLE_DIR}/{RANK_TABLE_KEY}"),
        ));
    }
    out.extend(spec.runtime.env.iter().cloned());
    if let Some(own) = spec.runtime.role_runtime(&at.role.name) {
        out.extend(own.env.iter().cloned());
    }
    out
}

/// The serving engine's arguments of `role`: an explicit local `--model_name`, then the user's
/// extra args, then the role's own. The one definition of them: serving pods get them as the
/// engine container's args, and the judged engine of an acceptance run as `{serving_args}`.
pub fn serving_args(did: &ValidatedDeployment, role: &str) -> Vec<String> {
    let runtime = &did.spec.runtime;
    let mut args = vec!["--model_name".to_string(), model_dir(did)];
    args.extend(runtime.args.iter().cloned());
    if let Some(own) = runtime.role_runtime(role) {
        args.extend(own.args.iter().cloned());
    }
    args
}

/// The serving engine's command: `spec.runtime.command`, `None` for the image's entrypoint. The
/// one definition of it, for serving pods and the judged engine's `{serving_command}`.
pub fn serving_command(spec: &DeepInferDeploymentSpec) -> Option<Vec<String>> {
    (!spec.runtime.command.is_empty()).then(|| spec.runtime.command.clone())
}

/// The names of the variables of `env` whose values the acceptance evidence must not hold:
/// those from a Secret, a ConfigMap or a resource field (any `valueFrom` but a `fieldRef`), and
/// those whose value refers to one of them with `$(NAME)`.
pub fn redacted_env_names(env: &[EnvVar]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for var in env {
        let from_elsewhere = var
            .value_from
            .as_ref()
            .is_some_and(|from| from.field_ref.is_none());
        let refers = var.value.as_deref().is_some_and(|value| {
            names
                .iter()
                .any(|name| value.contains(&format!("$({name})")))
        });
        if (from_elsewhere || refers) && !names.contains(&var.name) {
            names.push(var.name.clone());
        }
    }
    names
}

/// The pod spec shared by worker pods and acceptance pods of one rank.
pub(super) fn engine_pod_spec(
    did: &ValidatedDeployment,
    at: &RankOf<'_>,
    shape: &GroupShape,
    rendezvous: &Rendezvous,
) -> PodSpec {
    let spec = &did.spec;
    let claim = &did.claim;
    // A multi-pod group placed as a PodGroup shares its PodGroup's domain claim.
    let device_claims =
        pod_device_claims(did, shape, rendezvous.pod_group.is_some() && shape.pods > 1);
    let settings = spec.pod_settings(at.role);
    let container = Container {
        name: ENGINE_CONTAINER.into(),
        image: Some(spec.runtime.image_of(&at.role.name).to_string()),
        command: serving_command(spec),
        args: Some(serving_args(did, &at.role.name)),
        env: Some(engine_env(did, at, shape, rendezvous)),
        resources: Some(engine_resources(
            spec,
            shape.devices_per_pod,
            &device_claims,
        )),
        ports: Some(engine_ports()),
        volume_mounts: Some(engine_mounts(rendezvous, &settings)),
        security_context: Some(restricted_container()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    };
    // Shared memory is memory-backed and counts against the engine's memory: it may take as
    // much as the engine requests.
    let shm = shm_volume(
        container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory"))
            .cloned(),
    );
    PodSpec {
        containers: vec![container],
        volumes: Some(
            [checkpoint_volume(claim, true), shm]
                .into_iter()
                .chain(rendezvous.rank_table.as_deref().map(rank_table_volume))
                .chain(rendezvous.peers.as_ref().map(PeerWiring::volume))
                .chain(settings.volumes.iter().flatten().cloned())
                .collect(),
        ),
        node_selector: Some(node_selector(spec, shape, &settings)),
        tolerations: Some(
            tolerations(spec.accelerator.device_resource())
                .into_iter()
                .chain(settings.tolerations.iter().flatten().cloned())
                .collect(),
        ),
        // One pod is inside one domain by definition; requiring the label would also keep
        // single-node groups off nodes that carry no domain label (e.g. plain 8-GPU boards).
        affinity: merged_affinity(
            (shape.pods > 1).then(|| PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(rendezvous.members.clone()),
                    match_expressions: None,
                }),
                topology_key: spec.accelerator.scale_up_domain_key().to_string(),
                ..PodAffinityTerm::default()
            }),
            settings.affinity.clone(),
        ),
        image_pull_secrets: settings.image_pull_secrets.clone(),
        priority_class_name: settings.priority_class_name.clone(),
        service_account_name: settings.service_account_name.clone(),
        topology_spread_constraints: settings.topology_spread_constraints.clone(),
        scheduling_group: rendezvous
            .pod_group
            .as_ref()
            .map(|name| PodSchedulingGroup {
                pod_group_name: Some(name.clone()),
            }),
        resource_claims: (!device_claims.is_empty()).then_some(device_claims),
        scheduler_name: spec
            .scheduling
            .as_ref()
            .and_then(|s| s.scheduler_name.clone()),
        hostname: Some(format!("rank-{}", at.rank)),
        subdomain: rendezvous.subdomain.then(|| rendezvous.service.clone()),
        restart_policy: Some("Never".into()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(restricted_pod()),
        ..PodSpec::default()
    }
}

/// The engine's ports: serving and the rendezvous of its group.
fn engine_ports() -> Vec<k8s_openapi::api::core::v1::ContainerPort> {
    vec![
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
    ]
}

/// The engine's mounts: the checkpoint (read-only), shared memory, the rank table and the
/// peers' endpoints where the group has them, then the pod settings' own mounts.
fn engine_mounts(rendezvous: &Rendezvous, settings: &crate::api::PodSettings) -> Vec<VolumeMount> {
    [
        mount("checkpoint", MODEL_MOUNT, true),
        mount("dshm", "/dev/shm", false),
    ]
    .into_iter()
    .chain(
        rendezvous
            .rank_table
            .as_ref()
            .map(|_| mount("rank-table", RANK_TABLE_DIR, true)),
    )
    .chain(
        rendezvous
            .peers
            .as_ref()
            .map(|_| mount("role-endpoints", PEER_ENDPOINTS_DIR, true)),
    )
    .chain(settings.volume_mounts.iter().flatten().cloned())
    .collect()
}

/// The accelerator's node selector for the group's product with the pod settings' labels added;
/// validation refuses a label the accelerator sets to another value, and the accelerator's wins
/// regardless.
fn node_selector(
    spec: &DeepInferDeploymentSpec,
    shape: &GroupShape,
    settings: &crate::api::PodSettings,
) -> BTreeMap<String, String> {
    let mut selector = settings.node_selector.clone().unwrap_or_default();
    selector.extend(spec.accelerator.node_selector(shape.product.as_deref()));
    selector
}

/// The user's affinity merged with the operator's domain term, never replacing it: node
/// affinity is the user's (the scheduler ANDs it with the accelerator's node selector), pod
/// anti-affinity is the user's, and the user's pod affinity terms are added beside the domain
/// term. `None` when neither gives anything.
fn merged_affinity(domain: Option<PodAffinityTerm>, user: Option<Affinity>) -> Option<Affinity> {
    let mut affinity = user.unwrap_or_default();
    if let Some(term) = domain {
        let pod = affinity
            .pod_affinity
            .get_or_insert_with(PodAffinity::default);
        pod.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .insert(0, term);
    }
    (affinity != Affinity::default()).then_some(affinity)
}

/// Pod metadata plus `spec.scheduling`'s labels and annotations for another scheduler or queue;
/// the operator's own labels win.
pub(super) fn with_scheduling_meta(
    spec: &DeepInferDeploymentSpec,
    mut meta: ObjectMeta,
) -> ObjectMeta {
    let Some(scheduling) = &spec.scheduling else {
        return meta;
    };
    if !scheduling.pod_labels.is_empty() {
        let labels = meta.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in &scheduling.pod_labels {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    if !scheduling.pod_annotations.is_empty() {
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        for (k, v) in &scheduling.pod_annotations {
            annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    meta
}

/// Labels of one rank's pod.
fn rank_labels(at: &RankOf<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::ROLE.to_string(), at.role.name.clone()),
        (labels::GROUP.to_string(), at.group.to_string()),
        (labels::RANK.to_string(), at.rank.to_string()),
        (labels::REVISION.to_string(), at.revision.to_string()),
        Component::Worker.label(),
    ])
}

/// One worker pod: `<name>-<role>-<rev5>-<group>-<rank>`, gated on `deepinfer.io/accepted`,
/// with the engine's startup and readiness probes.
pub fn worker_pod(did: &ValidatedDeployment, at: &RankOf<'_>) -> Pod {
    let shape = group_shape(&did.spec, at.role);
    let name = pod_name(
        &did.name_any(),
        &at.role.name,
        at.revision,
        at.group,
        at.rank,
    );
    let mut spec = engine_pod_spec(did, at, &shape, &Rendezvous::serving(did, at));
    spec.readiness_gates = Some(vec![PodReadinessGate {
        condition_type: ACCEPTED_POD_CONDITION.into(),
    }]);
    if let Some(engine) = spec.containers.first_mut() {
        engine.startup_probe = Some(startup_probe(&did.spec));
        engine.readiness_probe = Some(readiness_probe(&did.spec));
        engine.liveness_probe = Some(liveness_probe(&did.spec));
    }
    let mut labels = rank_labels(at);
    if exclusive_domain(&did.spec) {
        let group = group_service_name(&did.name_any(), &at.role.name, at.revision, at.group);
        labels.insert(labels::GROUP_NAME.to_string(), group);
        spec.affinity
            .get_or_insert_with(Affinity::default)
            .pod_anti_affinity
            .get_or_insert_with(Default::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(exclusive_domain_term(did));
    }
    stamp(Pod {
        metadata: with_scheduling_meta(&did.spec, owned_meta(did, name, labels)),
        spec: Some(spec),
        status: None,
    })
}

/// Whether the deployment asks for one serving group per scale-up domain.
fn exclusive_domain(spec: &crate::api::DeepInferDeploymentSpec) -> bool {
    spec.scheduling.as_ref().is_some_and(|s| s.exclusive_domain)
}

/// The anti-affinity that keeps a serving pod out of every scale-up domain holding a pod of
/// another serving group of the deployment (any pod of the deployment whose group name differs
/// from its own).
fn exclusive_domain_term(did: &ValidatedDeployment) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([
                (labels::DEPLOYMENT.to_string(), did.name_any()),
                Component::Worker.label(),
            ])),
            match_expressions: None,
        }),
        mismatch_label_keys: Some(vec![labels::GROUP_NAME.to_string()]),
        topology_key: did.spec.accelerator.scale_up_domain_key().to_string(),
        ..PodAffinityTerm::default()
    }
}

/// Desired worker pods of a role's group, rank 0 first.
pub fn group_pods(
    did: &ValidatedDeployment,
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
