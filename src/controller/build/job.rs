//! The operator's own Jobs over the checkpoint volume: fetch and verify.

use super::*;

/// The fetch Job's component label and container name.
pub const FETCH: &str = "fetch";
/// The verify Job's component label and container name.
pub const VERIFY: &str = "verify";

/// A run-to-completion Job of the operator's own binary over the checkpoint volume.
pub fn operator_job(
    did: &ValidatedDeployment,
    name: String,
    component: &str,
    operator_image: &str,
    args: Vec<String>,
    extra_env: Vec<EnvVar>,
    read_only: bool,
) -> Job {
    let claim = &did.claim;
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
pub fn fetch_job(did: &ValidatedDeployment, operator_image: &str) -> Option<Job> {
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
        FETCH,
        operator_image,
        args,
        env_vars,
        false,
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
pub fn verify_job(did: &ValidatedDeployment, operator_image: &str) -> Job {
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
    let name = format!("{}-verify-{}", did.name_any(), checkpoint_key(spec));
    operator_job(did, name, VERIFY, operator_image, args, Vec::new(), true)
}
