//! Build stage: the desired child objects as plain values, computed without a client.
//!
//! Every builder is a pure function of the resource (and, for Jobs, the operator's own image),
//! so pod specs are unit-tested without a cluster. This module holds what every kind shares
//! (names, labels, hashing, the revision); one submodule per object kind builds that kind, and
//! `run` holds an acceptance run's names and groups, which several kinds share. Each submodule
//! imports what it takes by name, and none takes a name from a submodule that takes one from
//! it (`tests/import_circles.rs`).

mod acceptance;
mod budget;
mod devices;
mod job;
mod peers;
mod pod;
mod pod_group;
mod rank_table;
mod revision;
mod run;
mod run_placement;
mod scaling;
mod service;

pub use acceptance::*;
pub use budget::*;
pub use devices::*;
pub use job::*;
pub use peers::*;
pub use pod::*;
pub use pod_group::*;
pub use rank_table::*;
pub use revision::*;
pub use run::*;
pub use run_placement::*;
pub use scaling::*;
pub use service::*;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, EmptyDirVolumeSource, EnvVar, EnvVarSource, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, ResourceRequirements, SeccompProfile,
    SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use serde::Serialize;

use crate::api::{labels, DeepInferDeploymentSpec, RoleSpec};
pub use crate::controller::validated::ValidatedDeployment;

/// Where the checkpoint volume is mounted in engine containers.
pub const MODEL_MOUNT: &str = "/models";
/// Where the checkpoint volume is mounted in the operator's own Job pods.
pub const CHECKPOINT_MOUNT: &str = "/checkpoint";
/// Port the leader of a serving group listens on for traffic (the engine contract's).
pub const SERVE_PORT: i32 = crate::contract::serve::PORT;
/// Port ranks of a group rendezvous on (rank 0 leads).
pub const RENDEZVOUS_PORT: i32 = crate::contract::serve::RENDEZVOUS_PORT;
/// Annotation of a Job whose result the operator reads (checkpoint fetch and verification,
/// acceptance runs): the whole [`full_hash`] of what it judges. Its name carries a short form
/// only; a Job of the right name whose annotation differs is never read.
pub const JUDGES_ANNOTATION: &str = "deepinfer.io/judges";
/// Annotation of an acceptance run's Jobs: what the run judges besides its revision (the rerun
/// token and the acceptance spec hash, `<token>/<spec hash>`), whose hash with the revision is
/// the run's key ([`JUDGES_ANNOTATION`]): a run that stopped being the target can still have its
/// verdict recorded for the revision, spec and token it was made for.
pub const RUN_ANNOTATION: &str = "deepinfer.io/run";
/// Annotation holding the hash of the applied object, so unchanged objects are never re-applied.
pub const APPLIED_HASH_ANNOTATION: &str = "deepinfer.io/applied-hash";
/// The container that runs the engine (every engine pod's).
pub const ENGINE_CONTAINER: &str = "engine";
/// Where the injected runner lives inside the engine container of an acceptance pod.
pub const RUNNER_DIR: &str = "/deepinfer/bin";
/// The binary the Jobs of the operator run (`deepinfer-runner`, see `cli`), beside
/// `deepinfer-operator` in its image; copied into [`RUNNER_DIR`] for the judged engine.
pub const RUNNER_BINARY: &str = "deepinfer-runner";
/// Non-root user engine and Job containers run as (HwHiAiUser's uid on Ascend images).
const RUN_AS_USER: i64 = 1000;
/// Version of the engine pod template this operator builds. It is part of the revision, so a
/// change re-runs acceptance before any pod under the new template serves, then rolls group by
/// group. Bump it whenever the engine container's command, environment, mounts, devices or
/// security context change; a change of anything else in the pod (labels, probes) rolls the
/// groups without a new judgement. `the_template_version_moves_with_the_engine_container`
/// fails when the engine container changes and this constant does not.
pub const TEMPLATE_VERSION: i32 = 5;
/// Path the default probes ask on the serve port (the engine contract's).
pub const HEALTH_PATH: &str = crate::contract::serve::HEALTH_PATH;
/// Longest the default startup probe waits for an engine to load its weights, in seconds.
pub const STARTUP_SECONDS: i32 = 45 * 60;
/// CPU an engine container requests unless `spec.runtime.resources` says otherwise.
pub const DEFAULT_CPU_REQUEST: &str = "4";
/// Memory an engine container requests unless `spec.runtime.resources` says otherwise.
pub const DEFAULT_MEMORY_REQUEST: &str = "16Gi";

/// SHA-256 of a value's JSON form.
fn sha256<T: Serialize>(value: &T) -> ring::digest::Digest {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    ring::digest::digest(&ring::digest::SHA256, &bytes)
}

/// SHA-256 of a value's JSON form, as lowercase hex cut to `len` characters: for object names,
/// never for telling two configurations apart (see [`full_hash`]).
pub fn short_hash<T: Serialize>(value: &T, len: usize) -> String {
    let hex: String = sha256(value)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    hex[..len.min(hex.len())].to_string()
}

/// Characters of a [`full_hash`]: all 256 bits in RFC 4648 base32, lowercase, unpadded.
pub const FULL_HASH_LENGTH: usize = 52;

/// SHA-256 of a value's JSON form, all 256 bits, as [`FULL_HASH_LENGTH`] lowercase base32
/// characters (`a`–`z`, `2`–`7`): short enough for a label value (63), so revisions, acceptance
/// spec hashes and checkpoint keys are compared at full strength wherever they are kept.
pub fn full_hash<T: Serialize>(value: &T) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let digest = sha256(value);
    let mut out = String::with_capacity(FULL_HASH_LENGTH);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for byte in digest.as_ref() {
        buffer = ((buffer << 8) | u32::from(*byte)) & 0xffff;
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

/// The first `len` hexadecimal characters of the SHA-256 a [`full_hash`] spells: the
/// [`short_hash`] of the same value, recovered from the full one (`None` for text that is not a
/// full hash).
pub fn short_of_full_hash(key: &str, len: usize) -> Option<String> {
    if key.len() != FULL_HASH_LENGTH {
        return None;
    }
    let mut hex = String::with_capacity(64);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for c in key.bytes() {
        let value = match c {
            b'a'..=b'z' => c - b'a',
            b'2'..=b'7' => c - b'2' + 26,
            _ => return None,
        };
        buffer = ((buffer << 5) | u32::from(value)) & 0xffff;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            hex.push_str(&format!("{:02x}", (buffer >> bits) & 0xff));
        }
    }
    Some(hex[..len.min(hex.len())].to_string())
}

/// The revision: the [`full_hash`] of everything that changes the running bits — image digest,
/// runtime commit, checkpoint source, accelerator, every role's layout and device shape (see
/// [`DeepInferDeploymentSpec::device_shape`]), engine command, args,
/// env, per-role settings and resources, each role's extra volumes, mounts, ServiceAccount and
/// priority class (see [`EngineSettings`]), and the operator's [`TEMPLATE_VERSION`]. Replica counts, rollout
/// settings, probes, placement-only pod settings and the acceptance prompts are not part of it;
/// the acceptance sampling settings are (see [`judged_sampling`]).
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
        command: &'a [String],
        args: &'a [String],
        env: &'a [EnvVar],
        roles: &'a [crate::api::RoleRuntime],
        sampling: JudgedSampling<'a>,
        // Absent when no role has any, so a spec without them keeps its revision.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pod: Vec<(&'a str, EngineSettings)>,
        // Absent when every role has the deployment's shape, likewise.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        devices: Vec<(&'a str, crate::api::DeviceShape)>,
        // Absent when no probe runs a command, likewise.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        probes: Vec<(&'static str, &'a [String])>,
        // Absent when no node selector picks the product, likewise.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        selected_products: Vec<(&'a str, &'a str)>,
    }
    let mut layouts: Vec<_> = spec
        .roles
        .iter()
        .map(|r| (r.name.as_str(), &r.parallel))
        .collect();
    layouts.sort_by(|a, b| a.0.cmp(b.0));
    full_hash(&RunningBits {
        template: TEMPLATE_VERSION,
        resources: &spec.runtime.resources,
        image: &spec.runtime.image,
        commit: &spec.runtime.commit,
        model: &spec.model.name,
        source: &spec.model.source,
        accelerator: &spec.accelerator,
        layouts,
        command: &spec.runtime.command,
        args: &spec.runtime.args,
        env: &spec.runtime.env,
        roles: &spec.runtime.roles,
        sampling: judged_sampling(&spec.acceptance),
        pod: engine_settings(spec),
        devices: own_device_shapes(spec),
        probes: exec_probes(spec),
        selected_products: selected_products(spec),
    })
}

/// The commands of the engine's exec probes (startup, readiness, liveness): they run inside
/// the serving engine, so they are part of what is judged, as the engine's own command is.
fn exec_probes(spec: &DeepInferDeploymentSpec) -> Vec<(&'static str, &[String])> {
    let runtime = &spec.runtime;
    [
        ("startup", &runtime.startup_probe),
        ("readiness", &runtime.readiness_probe),
        ("liveness", &runtime.liveness_probe),
    ]
    .into_iter()
    .filter_map(|(kind, probe)| {
        let command = probe.as_ref()?.exec.as_ref()?.command.as_deref()?;
        Some((kind, command))
    })
    .collect()
}

/// The device product each role's pods are placed on where a node selector (`spec.pod`,
/// `spec.roles[].pod`) picks it rather than `accelerator.product`: the product is part of what
/// is judged whichever field selects it.
fn selected_products(spec: &DeepInferDeploymentSpec) -> Vec<(&str, &str)> {
    let key = spec.accelerator.kind.product_label_key();
    let mut out: Vec<(&str, &str)> = spec
        .roles
        .iter()
        .filter(|role| spec.device_shape(role).product.is_none())
        .filter_map(|role| {
            let selector = role
                .pod
                .as_ref()
                .and_then(|p| p.node_selector.as_ref())
                .or_else(|| spec.pod.as_ref()?.node_selector.as_ref())?;
            Some((role.name.as_str(), selector.get(key)?.as_str()))
        })
        .collect();
    out.sort_unstable();
    out
}

/// The revision of a validated deployment: [`revision`] of its spec, and, when its engines read
/// Secrets or ConfigMaps, the identity and resourceVersion of each
/// ([`ValidatedDeployment::served`]): a changed content is judged again before it serves.
pub fn revision_of(did: &ValidatedDeployment) -> String {
    let spec = revision(&did.spec);
    if did.served.is_empty() {
        return spec;
    }
    full_hash(&(spec, &did.served))
}

/// The device shape of every role whose shape differs from `spec.accelerator`'s, by role name:
/// part of the revision, as the deployment's accelerator is.
fn own_device_shapes(spec: &DeepInferDeploymentSpec) -> Vec<(&str, crate::api::DeviceShape)> {
    let deployment = (
        spec.accelerator.devices_per_pod(),
        spec.accelerator.product.as_deref(),
    );
    let mut out: Vec<_> = spec
        .roles
        .iter()
        .map(|role| (role.name.as_str(), spec.device_shape(role)))
        .filter(|(_, shape)| (shape.devices_per_pod, shape.product.as_deref()) != deployment)
        .collect();
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

/// The pod settings that are part of the revision: the extra volumes and mounts (what the
/// engine reads and writes) and the ServiceAccount (the identity a cluster may grant access by)
/// change what an engine runs with, so a change is judged again; the priority class is the
/// immutable priority of each group's PodGroup, so a change needs new groups under new names.
/// Tolerations, node selector, affinity, topology spread and pull secrets only move the pods: a
/// change replaces the groups one at a time (their pod template changes) without a new
/// acceptance run.
#[derive(Serialize, Debug, PartialEq, Default)]
pub struct EngineSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    volumes: Option<Vec<Volume>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    volume_mounts: Option<Vec<VolumeMount>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_account_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority_class_name: Option<String>,
}

/// [`EngineSettings`] of every role that has any, by role name.
pub fn engine_settings(spec: &DeepInferDeploymentSpec) -> Vec<(&str, EngineSettings)> {
    let mut out: Vec<_> = spec
        .roles
        .iter()
        .map(|role| {
            let settings = spec.pod_settings(role);
            let engine = EngineSettings {
                volumes: settings.volumes.filter(|v| !v.is_empty()),
                volume_mounts: settings.volume_mounts.filter(|m| !m.is_empty()),
                service_account_name: settings.service_account_name,
                priority_class_name: settings.priority_class_name,
            };
            (role.name.as_str(), engine)
        })
        .filter(|(_, engine)| *engine != EngineSettings::default())
        .collect();
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

/// The sampling settings a verdict is obtained with, as the revision hashes them: the section's,
/// defaults applied (so an absent value and its default hash alike), and, sorted by prompt id,
/// each inline prompt whose own settings differ from them. Prompts from `promptsFrom` are
/// covered by the judged spec hash instead.
#[derive(Serialize, Debug, PartialEq)]
pub struct JudgedSampling<'a> {
    /// `spec.acceptance.sampling`, defaults applied.
    pub section: crate::api::EffectiveSampling,
    /// Prompts with settings of their own, by id.
    pub prompts: Vec<(&'a str, crate::api::EffectiveSampling)>,
}

/// See [`JudgedSampling`].
pub fn judged_sampling(acceptance: &crate::api::AcceptanceSpec) -> JudgedSampling<'_> {
    let section = acceptance.default_sampling();
    let mut prompts: Vec<_> = acceptance
        .prompts
        .iter()
        .map(|p| (p.id.as_str(), acceptance.sampling_of(p)))
        .filter(|(_, own)| *own != section)
        .collect();
    prompts.sort_by(|a, b| a.0.cmp(b.0));
    JudgedSampling { section, prompts }
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
    /// Devices each pod requests (the role's [`crate::api::DeviceShape`]).
    pub devices_per_pod: i32,
    /// Product node label value the pods select, if any (the role's, else the deployment's).
    pub product: Option<String>,
    /// Pods in the group: world size / devices per pod.
    pub pods: i32,
    /// Devices the group spans.
    pub world_size: i64,
}

/// Shape of a role's groups, from the role's device shape
/// ([`DeepInferDeploymentSpec::device_shape`]); validation guarantees the division is exact.
pub fn group_shape(spec: &DeepInferDeploymentSpec, role: &RoleSpec) -> GroupShape {
    let device = spec.device_shape(role);
    let devices_per_pod = device.devices_per_pod.max(1);
    let world_size = role.parallel.world_size();
    let pods = (world_size / i64::from(devices_per_pod)).max(1);
    GroupShape {
        devices_per_pod,
        product: device.product,
        pods: i32::try_from(pods).unwrap_or(i32::MAX),
        world_size,
    }
}

/// Name of a role's Service (traffic goes to accepted, ready leaders).
pub fn role_service_name(did: &str, role: &str) -> String {
    format!("{did}-{role}")
}

/// The short revision id in object names (its first 5 characters); labels carry the full revision.
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
    did: &ValidatedDeployment,
    name: String,
    extra_labels: BTreeMap<String, String>,
) -> ObjectMeta {
    let mut labels = deployment_labels(&did.name_any());
    labels.extend(extra_labels);
    ObjectMeta {
        name: Some(name),
        namespace: Some(did.namespace.clone()),
        labels: Some(labels),
        owner_references: owner_ref(did).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// Controller owner reference to the resource (garbage collection deletes children with it).
pub fn owner_ref(did: &ValidatedDeployment) -> Option<OwnerReference> {
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
/// Tolerates the taint accelerator nodes carry under their device resource's name.
fn tolerations(device_resource: &str) -> Vec<Toleration> {
    vec![Toleration {
        key: Some(device_resource.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }]
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

/// Shared memory (`/dev/shm`) of an engine pod, at most `size` (the engine's memory request).
fn shm_volume(size: Option<Quantity>) -> Volume {
    Volume {
        name: "dshm".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(size.unwrap_or_else(|| Quantity(DEFAULT_MEMORY_REQUEST.into()))),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Most the injected runner's directory of an acceptance leader may hold (the runner binary).
pub const RUNNER_DIR_SIZE: &str = "256Mi";
/// Most the work directory the engine and the judge share may hold (prompts, outputs, the
/// engine's log and report; the judge keeps at most about 1 MiB of them as evidence).
pub const WORK_DIR_SIZE: &str = "1Gi";

/// A disk-backed scratch directory of at most `size`.
fn scratch_volume(name: &str, size: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(size.into())),
            ..EmptyDirVolumeSource::default()
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

/// Local directory of the checkpoint inside engine containers.
pub fn model_dir(did: &ValidatedDeployment) -> String {
    join_path(MODEL_MOUNT, &did.checkpoint_dir)
}

/// What one group of `role` needs, for capacity messages: pods × devices of the role's shape,
/// the domain, and the product the pods select.
pub fn capacity_need(spec: &DeepInferDeploymentSpec, role: &crate::api::RoleSpec) -> String {
    let shape = group_shape(spec, role);
    let domain = if shape.pods > 1 {
        format!(
            " inside one {} domain",
            spec.accelerator.scale_up_domain_key()
        )
    } else {
        String::new()
    };
    let product = shape.product.as_deref().map_or_else(String::new, |p| {
        format!(
            " on {}={p} nodes",
            spec.accelerator.kind.product_label_key()
        )
    });
    format!(
        "{} pod(s) × {} ({} devices){domain}{product}",
        shape.pods,
        spec.accelerator.describe_devices(shape.devices_per_pod),
        shape.world_size
    )
}

#[cfg(test)]
mod tests;
