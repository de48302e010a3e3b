//! One reconcile pass in pipeline order: validate, licence gate, checkpoint gate, acceptance
//! gate, then workers. Each stage returns a [`Gate`]; the first one that has not passed stops
//! the pass, so nothing is provisioned past a closed gate.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::apply::{self, list_owned};
use super::build;
use super::status::{Gate, Outcome};
use super::validate::{license_gate, summarize, validate_name, validate_spec};
use super::{Context, Error};
use crate::api::{
    labels, reasons, AcceptanceSpec, AcceptanceStatus, CheckpointStatus, DeepInferDeployment,
    DeepInferDeploymentStatus, RoleStatus, RERUN_ACCEPTANCE_ANNOTATION,
};

/// Runs the pipeline for one resource; returns what was found and when to look again.
pub async fn run_pipeline(
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    ctx: &Context,
) -> Result<(Outcome, Action), Error> {
    let mut outcome = Outcome::default();
    let ns = did
        .namespace()
        .ok_or_else(|| Error::NoNamespace(did.name_any()))?;
    let name = did.name_any();

    // 1. validate (the CRD's CEL rules, for API servers that do not enforce them)
    let mut errors = validate_spec(&did.spec, &ctx.limits)
        .err()
        .unwrap_or_default();
    if let Err(e) = validate_name(&name) {
        errors.insert(0, e);
    }
    if !errors.is_empty() {
        outcome.spec = Gate::Failed(reasons::INVALID_SPEC, summarize(&errors));
        return Ok((outcome, Action::await_change()));
    }
    outcome.spec = Gate::Passed(reasons::COMPLETE, "spec is valid".into());

    // 2. licence gate
    let verdict = license_gate(
        did.annotations(),
        &did.spec.model.license,
        &ctx.accepted_licenses,
    );
    let message = verdict.message(&ns, &name, &did.spec.model.license);
    if !verdict.is_accepted() {
        outcome.license = Gate::Failed(verdict.reason(), message);
        return Ok((outcome, Action::await_change()));
    }
    outcome.license = Gate::Passed(verdict.reason(), message);
    let revision = build::revision(&did.spec);
    outcome.revision = Some(revision.clone());

    // 3. checkpoint gate
    let (checkpoint, checkpoint_status) = match checkpoint_gate(did, previous, ctx, &ns).await {
        Ok(found) => found,
        Err(e) => return Ok(api_failure(ctx, outcome, &e, |o, g| o.checkpoint = g)),
    };
    outcome.checkpoint = checkpoint;
    outcome.checkpoint_status = checkpoint_status;
    match &outcome.checkpoint {
        Gate::Passed(..) => {}
        Gate::Failed(reason, _) if *reason == reasons::MISSING_DEPENDENCY => {
            return Ok((outcome, Action::requeue(Duration::from_secs(15))));
        }
        Gate::Failed(..) => return Ok((outcome, Action::await_change())),
        _ => return Ok((outcome, Action::requeue(RECHECK))),
    }

    // 4. acceptance gate: one run per revision (and rerun token); a recorded result is final.
    let (acceptance, acceptance_status) =
        match acceptance_gate(did, previous, ctx, &ns, &revision).await {
            Ok(found) => found,
            Err(e) => {
                outcome.acceptance_status = previous.and_then(|p| p.acceptance.clone());
                return Ok(api_failure(ctx, outcome, &e, |o, g| o.acceptance = g));
            }
        };
    outcome.acceptance = acceptance;
    outcome.acceptance_status = acceptance_status;
    let accepted_revision = match &outcome.acceptance {
        Gate::Passed(..) => Some(revision.as_str()),
        Gate::Failed(reason, _) if *reason == reasons::MISSING_DEPENDENCY => {
            return Ok((outcome, Action::requeue(Duration::from_secs(15))));
        }
        Gate::Failed(..) => return Ok((outcome, Action::await_change())),
        _ => return Ok((outcome, Action::requeue(RECHECK))),
    };

    // 5. workers
    // An apply failure still leaves the gates' results in status; the pass is retried soon.
    match workers(did, ctx, &ns, &revision, accepted_revision).await {
        Ok((workers, roles)) => {
            outcome.workers = workers;
            outcome.roles = roles;
            Ok((outcome, Action::requeue(super::RESYNC)))
        }
        Err(e) => {
            tracing::warn!(error = %e, kind = e.metric_label(), "applying workers failed; retrying");
            ctx.metrics.reconcile_failed(e.metric_label());
            outcome.workers = Gate::Progressing(
                reasons::APPLY_FAILED,
                super::truncate(
                    &format!("applying worker pods and Services failed, retrying: {e}"),
                    1000,
                ),
            );
            Ok((outcome, Action::requeue(Duration::from_secs(10))))
        }
    }
}

/// Records an API failure inside a gate on that gate's condition (so status shows it, not only
/// the log), counts it, and retries soon.
fn api_failure(
    ctx: &Context,
    mut outcome: Outcome,
    error: &Error,
    set: impl FnOnce(&mut Outcome, Gate),
) -> (Outcome, Action) {
    tracing::warn!(error = %error, kind = error.metric_label(), "a gate failed to talk to the API; retrying");
    ctx.metrics.reconcile_failed(error.metric_label());
    let hint = if error.to_string().contains("forbidden") {
        "; the operator's RBAC lacks a rule: compare its ClusterRole/Role with the chart's"
    } else {
        ""
    };
    let message = super::truncate(
        &format!("a Kubernetes API request failed, retrying: {error}{hint}"),
        1000,
    );
    set(
        &mut outcome,
        Gate::Progressing(reasons::APPLY_FAILED, message),
    );
    (outcome, Action::requeue(Duration::from_secs(10)))
}

/// How soon to look at a running Job again if no event arrives.
const RECHECK: Duration = Duration::from_secs(30);

/// The PVC named by the source must exist before any Job or pod mounts it.
async fn claim_exists(ctx: &Context, ns: &str, claim: &str) -> Result<bool, Error> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    Ok(api.get_opt(claim).await.map_err(Error::Kube)?.is_some())
}

/// State of a Job: finished with success, finished with failure (with the pod's message), or running.
enum JobState {
    Missing,
    Running,
    Succeeded(Option<String>),
    Failed(Option<String>),
}

async fn job_state(ctx: &Context, ns: &str, name: &str) -> Result<JobState, Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let Some(job) = jobs.get_opt(name).await.map_err(Error::Kube)? else {
        return Ok(JobState::Missing);
    };
    let status = job.status.unwrap_or_default();
    let succeeded = status.succeeded.unwrap_or(0) > 0;
    let failed = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Failed" && c.status == "True");
    if !succeeded && !failed {
        return Ok(JobState::Running);
    }
    let message = job_pod_message(ctx, ns, name).await?;
    Ok(if succeeded {
        JobState::Succeeded(message)
    } else {
        JobState::Failed(message)
    })
}

/// Termination message of the newest terminated container of a Job's pods.
async fn job_pod_message(ctx: &Context, ns: &str, job: &str) -> Result<Option<String>, Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .map_err(Error::Kube)?;
    let mut best: Option<(String, String)> = None;
    for pod in list.items {
        let statuses = pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default();
        for cs in statuses {
            if let Some(t) = cs.state.and_then(|s| s.terminated) {
                let at = t.finished_at.map(|f| f.0.to_string()).unwrap_or_default();
                if let Some(msg) = t.message.filter(|m| !m.trim().is_empty()) {
                    if best.as_ref().is_none_or(|(b, _)| at > *b) {
                        best = Some((at, msg));
                    }
                }
            }
        }
    }
    Ok(best.map(|(_, m)| m))
}

/// The verifier's report, as printed in its termination message.
#[derive(serde::Deserialize, Default)]
struct VerifyReport {
    #[serde(default)]
    ok: bool,
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    files: i64,
    #[serde(default)]
    bytes: i64,
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    problems: Vec<String>,
}

async fn checkpoint_gate(
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    ctx: &Context,
    ns: &str,
) -> Result<(Gate, Option<CheckpointStatus>), Error> {
    let key = build::checkpoint_key(&did.spec);
    if let Some(done) = previous
        .and_then(|p| p.checkpoint.as_ref())
        .filter(|c| c.source_key == key)
    {
        let msg = format!(
            "checkpoint revision {} verified: {} files, {} bytes, licence {}",
            done.revision,
            done.files,
            done.bytes,
            done.license.as_deref().unwrap_or("unknown")
        );
        return Ok((Gate::Passed(reasons::VERIFIED, msg), Some(done.clone())));
    }
    let Some((claim, _)) = build::checkpoint_location(&did.spec) else {
        return Ok((
            Gate::Failed(
                reasons::INVALID_SPEC,
                "spec.model.source: set exactly one of hub or volume".into(),
            ),
            None,
        ));
    };
    if !claim_exists(ctx, ns, &claim).await? {
        let msg = format!(
            "PersistentVolumeClaim {ns}/{claim} (spec.model.source) does not exist; create it (it must hold or receive the checkpoint) — the operator checks again every 15 s"
        );
        return Ok((Gate::Failed(reasons::MISSING_DEPENDENCY, msg), None));
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(fetch) = build::fetch_job(did, &ctx.operator_image) {
        let fetch_name = fetch.name_any();
        match job_state(ctx, ns, &fetch_name).await? {
            JobState::Missing => {
                apply::create_once(&jobs, &fetch).await?;
                return Ok((
                    Gate::Progressing(
                        reasons::FETCHING,
                        format!("Job {fetch_name} is fetching the pinned revision into {claim}"),
                    ),
                    None,
                ));
            }
            JobState::Running => {
                return Ok((
                    Gate::Progressing(
                        reasons::FETCHING,
                        format!("Job {fetch_name} is fetching the pinned revision into {claim}"),
                    ),
                    None,
                ));
            }
            JobState::Failed(message) => {
                let msg = format!(
                    "Job {fetch_name} failed to fetch the checkpoint: {}; fix the source (spec.model.source.hub) or the hub access, then delete the Job to retry",
                    message.as_deref().map_or("no message", |m| m.trim())
                );
                return Ok((
                    Gate::Failed(reasons::FETCH_FAILED, super::truncate(&msg, 2000)),
                    None,
                ));
            }
            JobState::Succeeded(_) => {}
        }
    }
    let verify = build::verify_job(did, &ctx.operator_image);
    let verify_name = verify.name_any();
    let progressing = || {
        Gate::Progressing(
            reasons::VERIFYING,
            format!("Job {verify_name} is verifying the checkpoint on {claim}"),
        )
    };
    match job_state(ctx, ns, &verify_name).await? {
        JobState::Missing => {
            apply::create_once(&jobs, &verify).await?;
            Ok((progressing(), None))
        }
        JobState::Running => Ok((progressing(), None)),
        JobState::Succeeded(message) | JobState::Failed(message) => {
            let report: Option<VerifyReport> = message
                .as_deref()
                .and_then(|m| serde_json::from_str(m.trim()).ok());
            match report {
                Some(r) if r.ok => {
                    let status = CheckpointStatus {
                        revision: r.revision.unwrap_or_else(|| "volume".into()),
                        files: r.files,
                        bytes: r.bytes,
                        license: r.license,
                        source_key: key,
                    };
                    let msg = format!(
                        "checkpoint revision {} verified: {} files, {} bytes, licence {}",
                        status.revision,
                        status.files,
                        status.bytes,
                        status.license.as_deref().unwrap_or("unknown")
                    );
                    Ok((Gate::Passed(reasons::VERIFIED, msg), Some(status)))
                }
                Some(r) => {
                    let licence_problem = r
                        .problems
                        .iter()
                        .any(|p| p.to_lowercase().contains("licen"));
                    let reason = if licence_problem && r.problems.len() == 1 {
                        reasons::CHECKPOINT_LICENSE_MISMATCH
                    } else {
                        reasons::VERIFICATION_FAILED
                    };
                    let msg = format!(
                        "Job {verify_name} found problems in the checkpoint: {}; fix the checkpoint or the spec, then re-apply",
                        r.problems.join("; ")
                    );
                    Ok((Gate::Failed(reason, super::truncate(&msg, 2000)), None))
                }
                None => {
                    let msg = format!(
                        "Job {verify_name} ended without a readable report ({}); look at the Job's pod",
                        message.as_deref().map_or("no termination message", |m| m.trim())
                    );
                    Ok((
                        Gate::Failed(reasons::VERIFICATION_FAILED, super::truncate(&msg, 2000)),
                        None,
                    ))
                }
            }
        }
    }
}

/// Provisions worker pods and Services, marks pods of the accepted revision, and counts ready groups.
async fn workers(
    did: &DeepInferDeployment,
    ctx: &Context,
    ns: &str,
    revision: &str,
    accepted_revision: Option<&str>,
) -> Result<(Gate, Vec<RoleStatus>), Error> {
    let name = did.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let svc_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let existing: Vec<Pod> = list_owned(&pods_api, &name)
        .await?
        .into_iter()
        .filter(|p| p.labels().get(labels::COMPONENT).map(String::as_str) == Some("worker"))
        .collect();
    let mut desired = Vec::new();
    for role in &did.spec.roles {
        for group in 0..role.replicas.max(0) {
            desired.extend(build::group_pods(did, role, group, revision));
        }
    }
    let actions = apply::plan_pods(&desired, &existing);
    apply::apply_pods(&pods_api, actions).await?;
    let existing_services = list_owned(&svc_api, &name).await?;
    apply::apply_services(&svc_api, &build::services(did), &existing_services).await?;
    if let Some(accepted) = accepted_revision {
        apply::mark_accepted(
            &pods_api,
            &existing,
            accepted,
            &format!("revision {accepted} passed acceptance"),
        )
        .await?;
    }

    // Ready groups: every desired rank exists, is of the desired hash, and is Ready.
    let by_name: std::collections::BTreeMap<String, &Pod> =
        existing.iter().map(|p| (p.name_any(), p)).collect();
    let mut roles = Vec::new();
    let mut summary = Vec::new();
    let mut all_ready = true;
    for role in &did.spec.roles {
        let mut ready = 0;
        for group in 0..role.replicas.max(0) {
            let want = build::group_pods(did, role, group, revision);
            let ok = want.iter().all(|w| {
                by_name.get(&w.name_any()).is_some_and(|have| {
                    build::applied_hash(*have) == build::applied_hash(w)
                        && have.meta().deletion_timestamp.is_none()
                        && apply::pod_ready(have)
                })
            });
            if ok {
                ready += 1;
            }
        }
        all_ready &= ready == role.replicas.max(0);
        summary.push(format!("{} {}/{}", role.name, ready, role.replicas.max(0)));
        roles.push(RoleStatus {
            name: role.name.clone(),
            desired_groups: role.replicas.max(0),
            ready_groups: ready,
        });
    }
    let gate = if all_ready {
        Gate::Passed(
            reasons::GROUPS_READY,
            format!("ready serving groups: {}", summary.join(", ")),
        )
    } else {
        Gate::Progressing(
            reasons::GROUPS_NOT_READY,
            format!("ready serving groups: {}", summary.join(", ")),
        )
    };
    Ok((gate, roles))
}

/// Resolves `promptsFrom` into inline prompts, so the runner needs no read access to ConfigMaps.
async fn resolve_acceptance(
    did: &DeepInferDeployment,
    ctx: &Context,
    ns: &str,
) -> Result<Result<AcceptanceSpec, String>, Error> {
    let mut spec = did.spec.acceptance.clone();
    let Some(from) = spec.prompts_from.take() else {
        return Ok(Ok(spec));
    };
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let Some(cm) = api.get_opt(&from.name).await.map_err(Error::Kube)? else {
        return Ok(Err(format!(
            "ConfigMap {ns}/{} named by spec.acceptance.promptsFrom does not exist; create it with the prompts under key {}",
            from.name, from.key
        )));
    };
    let Some(text) = cm.data.as_ref().and_then(|d| d.get(&from.key)) else {
        return Ok(Err(format!(
            "ConfigMap {ns}/{} has no key {} (spec.acceptance.promptsFrom.key); add the prompts there",
            from.name, from.key
        )));
    };
    match serde_yaml::from_str::<Vec<crate::api::AcceptancePrompt>>(text) {
        Ok(prompts) => {
            spec.prompts.extend(prompts);
            Ok(Ok(spec))
        }
        Err(e) => Ok(Err(format!(
            "ConfigMap {ns}/{} key {} is not a YAML list of prompts (spec.acceptance.promptsFrom): {e}",
            from.name, from.key
        ))),
    }
}

fn acceptance_message(a: &AcceptanceStatus) -> String {
    let evidence = a.evidence.as_deref().unwrap_or("none");
    if a.result == "Passed" {
        format!(
            "revision {} passed acceptance: {}/{} prompts; evidence in ConfigMap {evidence}",
            a.revision, a.passed, a.prompts
        )
    } else {
        let failed = if a.failed_prompts.is_empty() {
            "none recorded".to_string()
        } else {
            a.failed_prompts.join(", ")
        };
        let why = a
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        format!(
            "revision {} failed acceptance: {}/{} prompts passed; failing prompts: {failed}{why}; evidence in ConfigMap {evidence}. \
             No worker of this revision is created. Fix the image, checkpoint or layout (a spec change re-runs acceptance), \
             or set annotation {RERUN_ACCEPTANCE_ANNOTATION} to a new value to run it again",
            a.revision, a.passed, a.prompts
        )
    }
}

/// Runs (once) and judges the acceptance workload of `revision`.
async fn acceptance_gate(
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    ctx: &Context,
    ns: &str,
    revision: &str,
) -> Result<(Gate, Option<AcceptanceStatus>), Error> {
    let token = did
        .annotations()
        .get(RERUN_ACCEPTANCE_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    // The prompts and expectations are part of what was judged: a change re-runs acceptance
    // (without touching running workers, whose revision is unchanged).
    let spec_hash = build::short_hash(&did.spec.acceptance, 10);
    let recorded = previous.and_then(|p| p.acceptance.clone());
    if let Some(a) = recorded.as_ref().filter(|a| {
        a.revision == revision
            && a.rerun_token.clone().unwrap_or_default() == token
            && a.spec_hash.as_deref() == Some(spec_hash.as_str())
    }) {
        let message = acceptance_message(a);
        let gate = if a.result == "Passed" {
            Gate::Passed(reasons::ACCEPTANCE_SUCCEEDED, message)
        } else {
            Gate::Failed(reasons::ACCEPTANCE_FAILED, super::truncate(&message, 2000))
        };
        return Ok((gate, Some(a.clone())));
    }
    let names =
        build::AcceptanceNames::new(&did.name_any(), revision, &format!("{token}/{spec_hash}"));
    let Some(role) = build::acceptance_role(&did.spec) else {
        return Ok((
            Gate::Failed(
                reasons::INVALID_SPEC,
                "spec.roles: at least one role is required".into(),
            ),
            recorded,
        ));
    };
    let shape = build::group_shape(&did.spec, role);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let leader = names.job(0);
    let state = job_state(ctx, ns, &leader).await?;
    if matches!(state, JobState::Missing) {
        let spec = match resolve_acceptance(did, ctx, ns).await? {
            Ok(spec) => spec,
            Err(message) => {
                return Ok((Gate::Failed(reasons::MISSING_DEPENDENCY, message), recorded))
            }
        };
        let spec_yaml = serde_yaml::to_string(&spec).unwrap_or_default();
        let (sa, role_obj, binding) = build::acceptance_rbac(did, &names);
        let sa_api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(ctx.client.clone(), ns);
        let role_api: Api<k8s_openapi::api::rbac::v1::Role> =
            Api::namespaced(ctx.client.clone(), ns);
        let rb_api: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
            Api::namespaced(ctx.client.clone(), ns);
        let cm_api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(ctx.client.clone(), ns);
        let svc_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
        let existing_sa = sa_api.get_opt(&sa.name_any()).await.map_err(Error::Kube)?;
        apply::apply_if_changed(&sa_api, &sa, existing_sa.as_ref()).await?;
        let existing_role = role_api
            .get_opt(&role_obj.name_any())
            .await
            .map_err(Error::Kube)?;
        apply::apply_if_changed(&role_api, &role_obj, existing_role.as_ref()).await?;
        let existing_rb = rb_api
            .get_opt(&binding.name_any())
            .await
            .map_err(Error::Kube)?;
        apply::apply_if_changed(&rb_api, &binding, existing_rb.as_ref()).await?;
        let cm = build::acceptance_spec_configmap(did, &names, revision, spec_yaml);
        apply::apply_if_changed(&cm_api, &cm, None).await?;
        if shape.pods > 1 {
            apply::apply_if_changed(
                &svc_api,
                &build::acceptance_service(did, &names, revision),
                None,
            )
            .await?;
        }
        // Followers first, so the leader's engine finds them when it starts.
        for rank in (0..shape.pods).rev() {
            if let Some(job) =
                build::acceptance_job(did, &names, rank, revision, &ctx.operator_image)
            {
                apply::create_once(&jobs, &job).await?;
            }
        }
        let msg = format!("Job {leader} is running the acceptance workload for revision {revision} on one {} group ({} pod(s))", role.name, shape.pods);
        return Ok((
            Gate::Progressing(reasons::ACCEPTANCE_RUNNING, msg),
            recorded,
        ));
    }
    let message = match state {
        JobState::Missing | JobState::Running => {
            let msg = format!("Job {leader} is running the acceptance workload for revision {revision} on one {} group ({} pod(s))", role.name, shape.pods);
            return Ok((
                Gate::Progressing(reasons::ACCEPTANCE_RUNNING, msg),
                recorded,
            ));
        }
        JobState::Succeeded(m) | JobState::Failed(m) => m,
    };
    let summary: Option<crate::acceptance::AcceptanceSummary> = message
        .as_deref()
        .and_then(|m| serde_json::from_str(m.trim()).ok());
    let status = match summary {
        Some(s) => AcceptanceStatus {
            revision: revision.to_string(),
            result: if s.result == crate::acceptance::AcceptanceResult::Passed {
                "Passed".into()
            } else {
                "Failed".into()
            },
            prompts: i32::try_from(s.prompts).unwrap_or(i32::MAX),
            passed: i32::try_from(s.passed).unwrap_or(i32::MAX),
            failed_prompts: s.failed_prompts,
            evidence: (!s.evidence.is_empty()).then_some(s.evidence),
            rerun_token: (!token.is_empty()).then(|| token.clone()),
            spec_hash: Some(spec_hash.clone()),
            reason: Some(super::truncate(&s.reason, 1000)),
        },
        None => AcceptanceStatus {
            revision: revision.to_string(),
            result: "Failed".into(),
            prompts: i32::try_from(did.spec.acceptance.prompts.len()).unwrap_or(i32::MAX),
            passed: 0,
            failed_prompts: Vec::new(),
            evidence: None,
            rerun_token: (!token.is_empty()).then(|| token.clone()),
            spec_hash: Some(spec_hash.clone()),
            reason: Some(super::truncate(
                &format!(
                    "the acceptance Job {leader} ended without a summary: {}",
                    message
                        .as_deref()
                        .map_or("no termination message", |m| m.trim())
                ),
                1000,
            )),
        },
    };
    // The followers' engines have nothing left to serve.
    for rank in 1..shape.pods {
        apply::delete_ignoring_missing(&jobs, &names.job(rank)).await?;
    }
    if shape.pods > 1 {
        let svc_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
        apply::delete_ignoring_missing(&svc_api, &names.run).await?;
    }
    let duration = jobs
        .get_opt(&leader)
        .await
        .map_err(Error::Kube)?
        .and_then(|j| j.status)
        .and_then(|s| Some((s.start_time?.0, s.completion_time.map(|c| c.0))))
        .map(|(start, end)| {
            let end = end.unwrap_or_else(k8s_openapi::jiff::Timestamp::now);
            end.duration_since(start).as_secs_f64().max(0.0)
        })
        .unwrap_or(0.0);
    ctx.metrics.acceptance_finished(&status.result, duration);
    let text = acceptance_message(&status);
    let gate = if status.result == "Passed" {
        Gate::Passed(reasons::ACCEPTANCE_SUCCEEDED, text)
    } else {
        Gate::Failed(reasons::ACCEPTANCE_FAILED, super::truncate(&text, 2000))
    };
    Ok((gate, Some(status)))
}
