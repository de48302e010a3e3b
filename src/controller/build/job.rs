//! The operator's own Jobs over the checkpoint volume: fetch and verify.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::{Component, DeepInferDeploymentSpec};
use crate::controller::validated::ValidatedDeployment;

use super::{
    checkpoint_volume, deployment_labels, full_hash, join_path, mount, owned_meta,
    restricted_container, restricted_pod, stamp, CHECKPOINT_MOUNT, JUDGES_ANNOTATION,
    RUNNER_BINARY,
};

/// The fetch Job's container name (and component label value).
pub const FETCH: &str = Component::Fetch.as_str();
/// The verify Job's container name (and component label value).
pub const VERIFY: &str = Component::Verify.as_str();

/// How long the fetch and verify Jobs may run, counted from the Job's start (time Pending
/// included), so a pod that can never start ends as a failed Job naming `DeadlineExceeded`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobDeadlines {
    /// `activeDeadlineSeconds` of a fetch Job (`--fetch-deadline-seconds`).
    pub fetch_seconds: i64,
    /// `activeDeadlineSeconds` of a verify Job (`--verify-deadline-seconds`).
    pub verify_seconds: i64,
}

/// The outbound proxies a fetch Job reaches the hub through (`--hub-https-proxy`,
/// `--hub-http-proxy`, `--hub-no-proxy`), given to it as `HTTPS_PROXY`, `HTTP_PROXY` and
/// `NO_PROXY` (`checkpoint::proxy` reads them as curl does); an empty value is left unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HubProxy {
    /// Proxy of https hub URLs.
    pub https: String,
    /// Proxy of http hub URLs.
    pub http: String,
    /// Hosts reached directly.
    pub no: String,
}

impl HubProxy {
    fn env(&self) -> impl Iterator<Item = EnvVar> + '_ {
        [
            ("HTTPS_PROXY", &self.https),
            ("HTTP_PROXY", &self.http),
            ("NO_PROXY", &self.no),
        ]
        .into_iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| EnvVar {
            name: name.into(),
            value: Some(value.clone()),
            value_from: None,
        })
    }
}

/// Default fetch deadline: a day, room for a checkpoint of several hundred GB.
pub const DEFAULT_FETCH_DEADLINE_SECONDS: i64 = 24 * 3600;
/// Default verify deadline: an hour (verification reads headers and hashes nothing big).
pub const DEFAULT_VERIFY_DEADLINE_SECONDS: i64 = 3600;

impl Default for JobDeadlines {
    fn default() -> Self {
        Self {
            fetch_seconds: DEFAULT_FETCH_DEADLINE_SECONDS,
            verify_seconds: DEFAULT_VERIFY_DEADLINE_SECONDS,
        }
    }
}

/// A run-to-completion Job of the operator's own binary over the checkpoint volume, ended by
/// the Job controller after `deadline_seconds`, annotated with the whole checkpoint key.
#[allow(clippy::too_many_arguments)]
pub fn operator_job(
    did: &ValidatedDeployment,
    name: String,
    component: Component,
    operator_image: &str,
    args: Vec<String>,
    extra_env: Vec<EnvVar>,
    read_only: bool,
    deadline_seconds: i64,
) -> Job {
    let claim = &did.claim;
    let extra = BTreeMap::from([component.label()]);
    let mut meta = owned_meta(did, name, extra.clone());
    // The whole key the name was cut from: the Job's result is read only where it matches.
    meta.annotations = Some(BTreeMap::from([(
        JUDGES_ANNOTATION.to_string(),
        checkpoint_key(&did.spec),
    )]));
    let mut pod_labels = deployment_labels(&did.name_any());
    pod_labels.extend(extra);
    let container = Container {
        name: component.as_str().into(),
        image: Some(operator_image.into()),
        command: Some(vec![RUNNER_BINARY.into()]),
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
            active_deadline_seconds: Some(deadline_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(vec![checkpoint_volume(claim, read_only)]),
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
    full_hash(&(
        &spec.model.name,
        &spec.model.license,
        &spec.model.source,
        layouts,
    ))
}

/// The first ten characters of a [`full_hash`], for object names only: the objects carry the
/// whole key in [`JUDGES_ANNOTATION`], and are read only where it matches.
pub fn short_key(key: &str) -> &str {
    &key[..key.len().min(10)]
}

/// `--layout <role>=<tensor>x<pipeline>x<data>x<expert>` for each role, as the verifier takes
/// them.
pub fn layout_args(spec: &DeepInferDeploymentSpec) -> Vec<String> {
    spec.roles
        .iter()
        .flat_map(|r| {
            [
                "--layout".to_string(),
                crate::api::RoleLayout::of(r).to_string(),
            ]
        })
        .collect()
}

/// Name of the fetch Job of the current source (`<name>-fetch-<checkpoint key>`).
pub fn fetch_job_name(did: &ValidatedDeployment) -> String {
    format!(
        "{}-fetch-{}",
        did.name_any(),
        short_key(&checkpoint_key(&did.spec))
    )
}

/// Name of the verify Job of the current source (`<name>-verify-<checkpoint key>`).
pub fn verify_job_name(did: &ValidatedDeployment) -> String {
    format!(
        "{}-verify-{}",
        did.name_any(),
        short_key(&checkpoint_key(&did.spec))
    )
}

/// The fetch Job: downloads the pinned hub revision into the claim.
pub fn fetch_job(
    did: &ValidatedDeployment,
    operator_image: &str,
    deadlines: &JobDeadlines,
    proxy: &HubProxy,
) -> Option<Job> {
    let hub = did.spec.model.source.hub.as_ref()?;
    let rel = &did.checkpoint_dir;
    let mut args = vec![
        "fetch-checkpoint".into(),
        "--repo".into(),
        did.spec.model.name.clone(),
        "--revision".into(),
        hub.revision.clone(),
        "--dest".into(),
        join_path(CHECKPOINT_MOUNT, rel),
    ];
    if let Some(endpoint) = &hub.endpoint {
        args.extend(["--endpoint".into(), endpoint.clone()]);
    }
    let mut env_vars: Vec<EnvVar> = proxy.env().collect();
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
    let name = fetch_job_name(did);
    Some(operator_job(
        did,
        name,
        Component::Fetch,
        operator_image,
        args,
        env_vars,
        false,
        deadlines.fetch_seconds,
    ))
}

/// The checkpoint revision recorded for a run: the hub commit, or `volume` for a given volume.
pub fn checkpoint_revision(spec: &DeepInferDeploymentSpec) -> String {
    spec.model
        .source
        .hub
        .as_ref()
        .map_or_else(|| "volume".to_string(), |h| h.revision.clone())
}

/// The verification Job: checks files, shard headers, licence and layout.
pub fn verify_job(
    did: &ValidatedDeployment,
    operator_image: &str,
    deadlines: &JobDeadlines,
) -> Job {
    let spec = &did.spec;
    let rel = &did.checkpoint_dir;
    let revision = checkpoint_revision(spec);
    let mut args = vec![
        "verify-checkpoint".into(),
        "--dir".into(),
        join_path(CHECKPOINT_MOUNT, rel),
        "--license".into(),
        spec.model.license.clone(),
        "--revision".into(),
        revision,
    ];
    args.extend(layout_args(spec));
    let name = verify_job_name(did);
    operator_job(
        did,
        name,
        Component::Verify,
        operator_image,
        args,
        Vec::new(),
        true,
        deadlines.verify_seconds,
    )
}
