//! The acceptance run: names, the runner's RBAC, its spec ConfigMap, rendezvous Service and
//! one Job per rank.

use super::*;

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

/// Hex characters of the run hash in acceptance object names: 64 bits, so that no two runs (of
/// different revisions, acceptance specs or rerun tokens) can be made to share a name, and so
/// reuse each other's Jobs or verdicts.
pub const RUN_HASH_LENGTH: usize = 16;

/// Names of one acceptance run of `revision` (a new rerun token gives new names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptanceNames {
    /// Prefix shared by the run's objects: `<name>-accept-<run hash>`, the hash over the
    /// revision and the token (rerun annotation and acceptance spec hash).
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
        let hash = short_hash(&(revision, token), RUN_HASH_LENGTH);
        let run = format!("{did}-accept-{hash}");
        Self {
            spec_configmap: format!("{run}-spec"),
            evidence_configmap: format!("{did}-evidence-{hash}"),
            service_account: format!("{did}-acceptance"),
            run,
        }
    }

    /// Job of one rank: `<run>-<rank>`, at most 63 characters (see
    /// [`crate::controller::validate::validate_acceptance_job_names`]).
    pub fn job(&self, rank: i32) -> String {
        format!("{}-{rank}", self.run)
    }
}

/// The ServiceAccount, Role and RoleBinding that let the acceptance runner write its evidence
/// ConfigMap (and nothing else).
pub fn acceptance_rbac(
    did: &ValidatedDeployment,
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
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: names.service_account.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: names.service_account.clone(),
            namespace: Some(did.namespace.clone()),
            ..Subject::default()
        }]),
    });
    (sa, role, binding)
}

/// The ConfigMap carrying the resolved acceptance spec (prompts inline) for the runner.
pub fn acceptance_spec_configmap(
    did: &ValidatedDeployment,
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

pub(super) fn acceptance_labels(
    names: &AcceptanceNames,
    revision: &str,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::COMPONENT.to_string(), "acceptance".to_string()),
        (labels::REVISION.to_string(), revision.to_string()),
        (labels::GROUP.to_string(), names.run.clone()),
    ])
}

/// Headless Service for the rendezvous of a multi-pod acceptance group.
pub fn acceptance_service(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    revision: &str,
) -> Service {
    let mut selector = deployment_labels(&did.name_any());
    selector.extend(acceptance_labels(names, revision));
    super::service::rendezvous_service(
        owned_meta(did, names.run.clone(), acceptance_labels(names, revision)),
        selector,
    )
}

/// The Job of one rank of the acceptance group: the same image, checkpoint, devices, placement
/// and layout as a serving group of the acceptance role. Rank 0 runs the injected runner
/// (`deepinfer-operator accept`), which starts the engine; other ranks run the engine alone.
pub fn acceptance_job(
    did: &ValidatedDeployment,
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
    let mut group_labels = deployment_labels(&did.name_any());
    group_labels.extend(acceptance_labels(names, revision));
    let rendezvous = Rendezvous {
        service: names.run.clone(),
        members: group_labels.clone(),
        subdomain: shape.pods > 1,
        pod_group: (did.pod_groups && shape.pods > 1).then(|| names.run.clone()),
    };
    let mut pod = engine_pod_spec(did, &at, &shape, &rendezvous);
    let engine = pod.containers.first_mut()?;
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
            model_dir(did),
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
                metadata: Some(super::pod::with_scheduling_meta(
                    spec,
                    ObjectMeta {
                        labels: Some(pod_labels),
                        ..ObjectMeta::default()
                    },
                )),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }))
}
