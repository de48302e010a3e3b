//! The acceptance run: names, the judge's RBAC, its spec and evidence ConfigMaps, rendezvous
//! Service and one Job per rank.
//!
//! The leader's pod has two containers. The engine container (the image under test) runs the
//! injected `deepinfer-runner run-engine` with no API token and leaves its outputs in a
//! shared `emptyDir`; the judge container (the operator's image) alone holds a token, judges
//! those outputs, updates the evidence ConfigMap by name and writes the termination message the
//! operator reads.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, Container, DownwardAPIProjection,
    DownwardAPIVolumeFile, EnvVar, KeyToPath, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    ProjectedVolumeSource, ResourceRequirements, SecurityContext, Service, ServiceAccount,
    ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::{labels, Component, DeepInferDeploymentSpec, RoleKind};
use crate::controller::validated::ValidatedDeployment;

use super::job::{checkpoint_key, checkpoint_revision};
use super::peers::{run_endpoints_json, PeerWiring, PEER_ENDPOINTS_KEY};
use super::pod::{
    engine_pod_spec, redacted_env_names, serving_args, serving_command, RankOf, Rendezvous,
};
use super::rank_table::{rank_table_name, uses_rank_tables};
use super::run::{acceptance_labels, acceptance_role, acceptance_roles, AcceptanceNames, RunGroup};
use super::{
    deployment_labels, env, env_field, group_shape, model_dir, mount, owned_meta,
    restricted_container, scratch_volume, stamp, JUDGES_ANNOTATION, RUNNER_BINARY, RUNNER_DIR,
    RUNNER_DIR_SIZE, RUN_ANNOTATION, TEMPLATE_VERSION, WORK_DIR_SIZE,
};

/// Seconds after the acceptance leader's engine container started by which the run must have
/// ended: the engine side's own timeout plus five minutes for the judge's wait and the evidence.
pub fn acceptance_deadline(spec: &DeepInferDeploymentSpec) -> i64 {
    i64::from(spec.acceptance.timeout_seconds) + 300
}

/// The acceptance leader's container that judges; the only one whose termination message the
/// operator reads.
pub const JUDGE_CONTAINER: &str = "judge";

/// The judge's argument naming the evidence ConfigMap it writes.
pub const EVIDENCE_FLAG: &str = "--evidence-configmap";
/// The judge's argument recording annotation `deepinfer.io/rerun-reason`.
pub const RERUN_REASON_FLAG: &str = "--rerun-reason";
/// The judge's argument recording annotation `deepinfer.io/acceptance-change-reason`.
pub const CHANGE_REASON_FLAG: &str = "--acceptance-change-reason";
/// The judge's argument recording annotation `deepinfer.io/acceptance-change-reviewer`.
pub const CHANGE_REVIEWER_FLAG: &str = "--acceptance-change-reviewer";
/// Where the judge's service-account token is mounted (the path in-cluster clients read).
pub const JUDGE_TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Lifetime requested for the judge's projected token (the kubelet renews it before expiry).
const JUDGE_TOKEN_SECONDS: i64 = 3600;
/// Where the acceptance spec ConfigMap is mounted.
pub const ACCEPTANCE_SPEC_DIR: &str = "/deepinfer/spec";
/// Key of the resolved acceptance spec inside its ConfigMap.
pub const ACCEPTANCE_SPEC_KEY: &str = "acceptance.yaml";
/// The directory the engine and the judge share (prompts, outputs, log, report).
pub const ACCEPTANCE_WORK_DIR: &str = "/deepinfer/work";

/// The ServiceAccount, Role and RoleBinding that let the judge read and update the evidence
/// ConfigMap of the run being started, by name, and nothing else (no create, list or other
/// name). `in_flight` names the evidence of this deployment's runs still going (of a revision
/// that was the target before): they stay writable, so their judges can still record evidence.
pub fn acceptance_rbac(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    in_flight: &[String],
) -> (ServiceAccount, Role, RoleBinding) {
    let evidence: std::collections::BTreeSet<String> = in_flight
        .iter()
        .cloned()
        .chain(std::iter::once(names.evidence_configmap.clone()))
        .collect();
    let extra = BTreeMap::from([Component::Acceptance.label()]);
    let sa = stamp(ServiceAccount {
        metadata: owned_meta(did, names.service_account.clone(), extra.clone()),
        ..ServiceAccount::default()
    });
    let role = stamp(Role {
        metadata: owned_meta(did, names.service_account.clone(), extra.clone()),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            resource_names: Some(evidence.into_iter().collect()),
            verbs: vec!["get".into(), "patch".into()],
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

/// The ConfigMap carrying the resolved acceptance spec (prompts inline) for the engine side and
/// the judge, and, for a run with a decode group and upstream roles, the run's `endpoints.json`
/// (mounted into the decode group alone).
/// The spec file of an acceptance run: `spec.acceptance` with its prompts resolved, as YAML.
pub fn acceptance_spec_yaml(spec: &crate::api::AcceptanceSpec) -> String {
    serde_yaml::to_string(spec).unwrap_or_default()
}

/// The `--spec-sha256` arguments that pin the run's spec file (none when it is not known).
fn spec_pin(names: &AcceptanceNames) -> Vec<String> {
    if names.spec_sha256.is_empty() {
        return Vec::new();
    }
    vec![
        crate::acceptance::spec_file::SPEC_SHA256_FLAG.into(),
        names.spec_sha256.clone(),
    ]
}

pub fn acceptance_spec_configmap(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    revision: &str,
    spec_yaml: String,
) -> ConfigMap {
    let extra = BTreeMap::from([
        Component::Acceptance.label(),
        (labels::REVISION.to_string(), revision.to_string()),
    ]);
    let mut data = BTreeMap::from([(ACCEPTANCE_SPEC_KEY.to_string(), spec_yaml)]);
    if let Some(endpoints) = run_endpoints_json(did, &names.groups(&did.spec)) {
        data.insert(PEER_ENDPOINTS_KEY.to_string(), endpoints);
    }
    stamp(ConfigMap {
        metadata: owned_meta(did, names.spec_configmap.clone(), extra),
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// The evidence ConfigMap the judge of an acceptance leader Job of deployment `did` writes
/// (`None` for other Jobs): named by the run's key the Job carries (see
/// [`AcceptanceNames::of_key`]).
pub fn evidence_of_job(did: &str, job: &Job) -> Option<String> {
    let pod = job.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers.iter().find(|c| c.name == JUDGE_CONTAINER)?;
    let key = job.annotations().get(JUDGES_ANNOTATION)?;
    AcceptanceNames::of_key(did, key).map(|names| names.evidence_configmap)
}

/// The evidence ConfigMap, empty, created before the run so that the judge needs no right to
/// create ConfigMaps: owned by the resource, labelled as the judge labels it.
pub fn acceptance_evidence_configmap(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    revision: &str,
) -> ConfigMap {
    crate::acceptance::evidence::configmap(
        &names.evidence_configmap,
        &(did.name_any(), did.uid().unwrap_or_default()),
        revision,
        &crate::acceptance::evidence::Evidence::default(),
    )
}

/// Whether a run group's pods join a rendezvous Service: a multi-pod group, and every group of
/// a run with several roles (the decode group reaches the others' leaders by name).
pub fn acceptance_needs_service(spec: &DeepInferDeploymentSpec, group: &RunGroup<'_>) -> bool {
    group_shape(spec, group.role).pods > 1 || acceptance_roles(spec).len() > 1
}

/// Headless Service for the rendezvous of one group of an acceptance run.
pub fn acceptance_service(
    did: &ValidatedDeployment,
    group: &RunGroup<'_>,
    revision: &str,
) -> Service {
    let mut selector = deployment_labels(&did.name_any());
    selector.extend(acceptance_labels(group, revision));
    super::service::rendezvous_service(
        owned_meta(did, group.name.clone(), acceptance_labels(group, revision)),
        selector,
    )
}

/// The Job of one rank of the judged role's group (see [`acceptance_group_job`]).
pub fn acceptance_job(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    rank: i32,
    revision: &str,
    operator_image: &str,
) -> Option<Job> {
    let groups = names.groups(&did.spec);
    acceptance_group_job(did, names, groups.first()?, rank, revision, operator_image)
}

/// The Job of one rank of one group of the acceptance run: the same image, checkpoint,
/// devices, placement and layout as a serving group of that role, wired to the run's other
/// groups as a serving group is to the other roles. Rank 0 of the judged role's group runs the
/// injected `run-engine` in the engine container beside the judge; every other rank runs the
/// engine alone, as it serves.
pub fn acceptance_group_job(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    group: &RunGroup<'_>,
    rank: i32,
    revision: &str,
    operator_image: &str,
) -> Option<Job> {
    let role = group.role;
    let spec = &did.spec;
    let shape = group_shape(spec, role);
    let at = RankOf {
        role,
        revision,
        group: 0,
        rank,
    };
    let mut group_labels = deployment_labels(&did.name_any());
    group_labels.extend(acceptance_labels(group, revision));
    let groups = names.groups(spec);
    let rendezvous = Rendezvous {
        service: group.name.clone(),
        members: group_labels.clone(),
        subdomain: acceptance_needs_service(spec, group),
        pod_group: (did.pod_groups && shape.pods > 1).then(|| group.name.clone()),
        rank_table: uses_rank_tables(spec).then(|| rank_table_name(&group.name)),
        peers: RoleKind::Decode
            .named(&role.name)
            .then(|| PeerWiring::acceptance(did, names, &groups))
            .flatten(),
    };
    let mut pod = engine_pod_spec(did, &at, &shape, &rendezvous);
    if group.judged && rank == 0 {
        judged_leader(&mut pod, did, names, &role.name, revision, operator_image)?;
    }
    Some(run_job(did, names, group, rank, revision, pod))
}

/// The judge of a `spec.acceptance.mode: serving` run: a Job named as the judged leader whose
/// pod runs the judge alone (no devices, no engine), sending every prompt to `endpoint`, the
/// candidate serving group's, as its ServiceAccount that may update the run's evidence only.
pub fn serving_judge_job(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    group: &RunGroup<'_>,
    revision: &str,
    operator_image: &str,
    endpoint: &str,
) -> Option<Job> {
    let load = did
        .spec
        .acceptance
        .load_concurrency
        .unwrap_or(crate::api::DEFAULT_LOAD_CONCURRENCY);
    let judge = judge_container(
        did,
        names,
        revision,
        operator_image,
        JudgeSide::Endpoint(endpoint, load),
    );
    let pod = PodSpec {
        containers: vec![judge],
        volumes: Some(vec![
            scratch_volume("work", WORK_DIR_SIZE),
            Volume {
                name: "acceptance-spec".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: names.spec_configmap.clone(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
            judge_token_volume(),
        ]),
        service_account_name: Some(names.service_account.clone()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        restart_policy: Some("Never".into()),
        security_context: Some(super::restricted_pod()),
        ..PodSpec::default()
    };
    group
        .judged
        .then(|| run_job(did, names, group, 0, revision, pod))
}

/// The Job of one rank of one group of a run, around its pod.
fn run_job(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    group: &RunGroup<'_>,
    rank: i32,
    revision: &str,
    pod: PodSpec,
) -> Job {
    let spec = &did.spec;
    let mut group_labels = deployment_labels(&did.name_any());
    group_labels.extend(acceptance_labels(group, revision));
    let mut job_labels = acceptance_labels(group, revision);
    job_labels.insert(labels::RANK.to_string(), rank.to_string());
    let mut pod_labels = group_labels;
    pod_labels.insert(labels::RANK.to_string(), rank.to_string());
    // No activeDeadlineSeconds: it would count time spent Pending for devices. The engine side's
    // own timeout ends the run; the controller ends a pod stuck past it (see `acceptance_deadline`).
    stamp(Job {
        metadata: ObjectMeta {
            annotations: Some(BTreeMap::from([
                (JUDGES_ANNOTATION.to_string(), names.key.clone()),
                (RUN_ANNOTATION.to_string(), names.judges.clone()),
            ])),
            ..owned_meta(did, group.job(rank), job_labels)
        },
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
    })
}

/// Turns rank 0 of the judged group into the judged leader: the engine container runs the
/// injected `run-engine` with the serving configuration, the judge beside it, the runner
/// installed by an init container, and the pod runs as the run's judge ServiceAccount.
fn judged_leader(
    pod: &mut PodSpec,
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    role: &str,
    revision: &str,
    operator_image: &str,
) -> Option<()> {
    let engine = pod.containers.first_mut()?;
    engine.command = Some(vec![
        format!("{RUNNER_DIR}/{RUNNER_BINARY}"),
        "run-engine".into(),
    ]);
    let mut args = spec_pin(names);
    args.extend(runner_args(
        did,
        role,
        engine.env.as_deref().unwrap_or_default(),
    ));
    engine.args = Some(args);
    engine.volume_mounts.get_or_insert_with(Vec::new).extend([
        mount("runner", RUNNER_DIR, true),
        mount("acceptance-spec", ACCEPTANCE_SPEC_DIR, true),
        mount("work", ACCEPTANCE_WORK_DIR, false),
    ]);
    pod.containers.push(judge_container(
        did,
        names,
        revision,
        operator_image,
        JudgeSide::EngineDir,
    ));
    pod.init_containers = Some(vec![Container {
        name: "install-runner".into(),
        image: Some(operator_image.into()),
        command: Some(vec![RUNNER_BINARY.into()]),
        args: Some(vec![
            "install-runner".into(),
            format!("{RUNNER_DIR}/{RUNNER_BINARY}"),
        ]),
        volume_mounts: Some(vec![mount("runner", RUNNER_DIR, false)]),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted_container()
        }),
        resources: Some(judge_resources()),
        ..Container::default()
    }]);
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    volumes.push(scratch_volume("runner", RUNNER_DIR_SIZE));
    volumes.push(scratch_volume("work", WORK_DIR_SIZE));
    volumes.push(Volume {
        name: "acceptance-spec".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: names.spec_configmap.clone(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    });
    volumes.push(judge_token_volume());
    // A pod has one ServiceAccount: the judged leader's is the judge's, whose token may
    // update this run's evidence and nothing else; `serviceAccountName` of the pod settings
    // applies to every other rank and group of the run, as in serving. The engine container
    // gets no token either way.
    pod.service_account_name = Some(names.service_account.clone());
    // No container gets a token by default; the judge mounts its own (above).
    pod.automount_service_account_token = Some(false);
    Some(())
}

/// `run-engine`'s arguments in the judged engine container: the acceptance spec, model and work
/// directories, then the serving configuration of `role` as the serving pod builder makes it
/// ([`serving_command`] word by word, the variables to redact, and after `--` exactly
/// [`serving_args`]), for the runner to substitute into the template.
fn runner_args(did: &ValidatedDeployment, role: &str, env: &[EnvVar]) -> Vec<String> {
    use crate::acceptance::handoff::{REDACT_ENV_FLAG, SERVING_COMMAND_FLAG};
    let mut args = vec![
        "--spec-file".into(),
        format!("{ACCEPTANCE_SPEC_DIR}/{ACCEPTANCE_SPEC_KEY}"),
        "--model-dir".into(),
        model_dir(did),
        "--work-dir".into(),
        ACCEPTANCE_WORK_DIR.into(),
    ];
    args.extend(
        serving_command(&did.spec)
            .unwrap_or_default()
            .iter()
            .map(|word| format!("{SERVING_COMMAND_FLAG}={word}")),
    );
    args.extend(
        redacted_env_names(env)
            .iter()
            .map(|name| format!("{REDACT_ENV_FLAG}={name}")),
    );
    args.push("--".into());
    args.extend(serving_args(did, role));
    args
}

/// What the judge records beside the run's identity: the model, each role's image, the
/// checkpoint, the service owners and the review annotations.
fn record_args(did: &ValidatedDeployment) -> Vec<String> {
    let spec = &did.spec;
    let role_images: BTreeMap<&str, &str> = acceptance_roles(spec)
        .into_iter()
        .map(|r| (r.name.as_str(), spec.runtime.image_of(&r.name)))
        .collect();
    let mut record = vec![
        "--model-name".to_string(),
        spec.model.name.clone(),
        "--role-images".into(),
        serde_json::to_string(&role_images).unwrap_or_default(),
        "--checkpoint-claim".into(),
        did.claim.clone(),
        "--checkpoint-path".into(),
        did.checkpoint_dir.clone(),
        "--checkpoint-source-key".into(),
        checkpoint_key(spec),
    ];
    if !spec.service_owners.is_empty() {
        record.extend([
            "--service-owners".into(),
            serde_json::to_string(&spec.service_owners).unwrap_or_default(),
        ]);
    }
    if let Some(review) = crate::api::ReviewRecord::from_annotations(did.annotations()) {
        for (flag, value) in [
            (RERUN_REASON_FLAG, review.rerun_reason),
            (CHANGE_REASON_FLAG, review.change_reason),
            (CHANGE_REVIEWER_FLAG, review.change_reviewer),
        ] {
            if let Some(value) = value {
                record.extend([flag.to_string(), value]);
            }
        }
    }
    record
}

/// What the judge judges.
enum JudgeSide<'a> {
    /// The report `run-engine` leaves in the shared directory (offline mode).
    EngineDir,
    /// A serving endpoint, with the load pass's concurrency (serving mode).
    Endpoint(&'a str, u32),
}

/// The judge: the operator's image running `accept --engine-dir` (or `--endpoint`), with the
/// service-account token mounted into it alone, reading the shared directory read-only.
fn judge_container(
    did: &ValidatedDeployment,
    names: &AcceptanceNames,
    revision: &str,
    operator_image: &str,
    side: JudgeSide<'_>,
) -> Container {
    let spec = &did.spec;
    let role = acceptance_role(spec);
    let layout = role.map(crate::api::RoleLayout::of).unwrap_or_default();
    let image = role.map_or(spec.runtime.image.as_str(), |r| {
        spec.runtime.image_of(&r.name)
    });
    let record = record_args(did);
    // Offline, the shared directory is the engine's and read-only here; serving, it is the
    // judge's own scratch.
    let (judged_side, work_read_only): (Vec<String>, bool) = match side {
        JudgeSide::EngineDir => (
            vec!["--engine-dir".into(), ACCEPTANCE_WORK_DIR.into()],
            true,
        ),
        JudgeSide::Endpoint(endpoint, load) => (
            vec![
                "--endpoint".into(),
                endpoint.to_string(),
                "--load-concurrency".into(),
                load.to_string(),
                "--work-dir".into(),
                ACCEPTANCE_WORK_DIR.into(),
            ],
            false,
        ),
    };
    Container {
        name: JUDGE_CONTAINER.into(),
        image: Some(operator_image.into()),
        command: Some(vec![RUNNER_BINARY.into(), "accept".into()]),
        args: Some(
            vec![
                "--spec-file".into(),
                format!("{ACCEPTANCE_SPEC_DIR}/{ACCEPTANCE_SPEC_KEY}"),
            ]
            .into_iter()
            .chain(judged_side)
            .chain([
                "--model-dir".into(),
                model_dir(did),
                "--revision".into(),
                revision.to_string(),
                "--image".into(),
                image.to_string(),
                "--template-version".into(),
                TEMPLATE_VERSION.to_string(),
                "--runtime-commit".into(),
                spec.runtime.commit.clone(),
                "--checkpoint-revision".into(),
                checkpoint_revision(spec),
                "--layout".into(),
                layout.to_string(),
                "--roles".into(),
                acceptance_roles(spec)
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                EVIDENCE_FLAG.into(),
                names.evidence_configmap.clone(),
                "--owner-name".into(),
                did.name_any(),
                "--owner-uid".into(),
                did.uid().unwrap_or_default(),
            ])
            .chain(spec_pin(names))
            .chain(record)
            .collect(),
        ),
        env: Some(vec![
            env_field("POD_NAMESPACE", "metadata.namespace"),
            env(
                crate::acceptance::ROLE_GROUPS_ENV,
                serde_json::to_string(&run_group_records(spec)).unwrap_or_default(),
            ),
        ]),
        volume_mounts: Some(vec![
            mount("acceptance-spec", ACCEPTANCE_SPEC_DIR, true),
            mount("work", ACCEPTANCE_WORK_DIR, work_read_only),
            mount("judge-token", JUDGE_TOKEN_DIR, true),
        ]),
        resources: Some(judge_resources()),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted_container()
        }),
        termination_message_policy: Some("File".into()),
        ..Container::default()
    }
}

/// The group each role of the run runs, by role, as the manifest records it: pods, devices per
/// pod and product of the role's shape, and its layout.
pub fn run_group_records(
    spec: &DeepInferDeploymentSpec,
) -> BTreeMap<&str, crate::acceptance::manifest::GroupRecord> {
    acceptance_roles(spec)
        .into_iter()
        .map(|role| {
            let shape = group_shape(spec, role);
            let record = crate::acceptance::manifest::GroupRecord {
                pods: shape.pods,
                devices_per_pod: shape.devices_per_pod,
                product: shape.product,
                layout: (&role.parallel).into(),
            };
            (role.name.as_str(), record)
        })
        .collect()
}

/// CPU and memory of the judge and the runner's installer (never BestEffort).
fn judge_resources() -> ResourceRequirements {
    let q = |v: &str| Quantity(v.to_string());
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), q("100m")),
            ("memory".to_string(), q("128Mi")),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), q("512Mi"))])),
        ..ResourceRequirements::default()
    }
}

/// The judge's token, CA and namespace, as the API server would project them for an
/// automounted token, but as a volume only the judge mounts.
fn judge_token_volume() -> Volume {
    Volume {
        name: "judge-token".into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(JUDGE_TOKEN_SECONDS),
                        ..ServiceAccountTokenProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            ..KeyToPath::default()
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".into()),
                                field_path: "metadata.namespace".into(),
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    }
}
