//! One reconcile pass in pipeline order: observe, enforce entitlement, validate, licence gate,
//! checkpoint gate, acceptance gate, then the rollout of worker groups.
//!
//! Entitlement is enforced before anything can stop the pass. The gates decide whether the
//! target revision may serve; the workers stage runs whatever they say (only the licence gate and
//! an invalid spec stop it), so the serving revision stays managed while another is judged.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::ResourceExt;

use super::apply;
use super::build;
use super::decide::checkpoint::{claim_gate, judge_verify_job, running_job_gate, verified_message};
use super::decide::jobs::{foreign_job, job_state, JobState};
use super::decide::rejected::rejected_gate;
use super::decide::rollout::{self, Action as GroupAction, Health, Progress, RoleInput};
use super::decide::workers::{group_views, placement_retry, workers_gate, Watchdog};
use super::decide::{self, acceptance, entitlement};
use super::observe::{observe, Observed};
use super::placement::partial_placement;
use super::status::{Gate, LicenceSeen, Outcome};
use super::validate::{license_gate, summarize, validate, LicenseVerdict, ValidatedDeployment};
use super::{Context, Error};
use crate::api::{
    labels, reasons, record_judgement, AcceptanceSpec, AcceptanceStatus, CheckpointStatus,
    DeepInferDeployment, DeepInferDeploymentStatus, RoleStatus, RERUN_ACCEPTANCE_ANNOTATION,
};

/// Runs the pipeline for one resource; returns what was found and when to look again.
pub async fn run_pipeline(
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    status_whole: bool,
    ctx: &Context,
) -> Result<(Outcome, Action), Error> {
    let mut outcome = Outcome::default();
    let ns = did
        .namespace()
        .ok_or_else(|| Error::NoNamespace(did.name_any()))?;
    let name = did.name_any();
    let pod_groups = ctx.pod_groups().await?;
    let mut observed = observe(ctx, did, pod_groups).await?;
    let licence = license_gate(
        did.annotations(),
        &did.spec.model.license,
        &ctx.accepted_licenses,
    );
    outcome.licence = Some(LicenceSeen {
        license: did.spec.model.license.clone(),
        annotation: did
            .annotations()
            .get(crate::api::LICENSE_ACCEPTED_ANNOTATION)
            .cloned(),
        accepted: licence.is_accepted(),
        reason: licence.reason(),
    });
    let mut known = known_judgements(ctx, &ns, did, previous, status_whole, &observed).await?;
    outcome.judgements = known.judgements.clone();
    outcome.acceptance_status = previous.and_then(|p| p.acceptance.clone());

    // 0. Continuous enforcement, before any gate can end the pass.
    enforce(ctx, &ns, &mut observed, &licence, &known, &mut outcome).await?;
    if !licence.is_accepted() {
        stop_fetching(ctx, &ns, &observed).await?;
    }

    // 1. validate (the CRD's CEL rules, for API servers that do not enforce them)
    let did = match validate(did, &ctx.limits) {
        Ok(valid) => valid.placed_as_pod_groups(pod_groups),
        Err(errors) => {
            outcome.spec = Gate::Failed(reasons::INVALID_SPEC, summarize(&errors));
            return Ok((outcome, Action::await_change()));
        }
    };
    let did = &did;
    if did.spec.accelerator.domain_device_class_name.is_some() && !did.pod_groups {
        outcome.spec = Gate::Failed(
            reasons::INVALID_SPEC,
            "spec.accelerator.domainDeviceClassName: a group's pods share the domain device through their PodGroup, and groups are not PodGroups here (--gang-scheduling is off, or the API server does not serve scheduling.k8s.io/v1beta1); remove the field, or enable the GenericWorkload and DRAWorkloadResourceClaims feature gates and run the operator with --gang-scheduling auto or native".into(),
        );
        return Ok((outcome, Action::await_change()));
    }
    // Engine containers read only Secrets and ConfigMaps that opted in; a label added later
    // starts no event, so the refusal is looked at again soon.
    if let Some(refused) = decide::references::engine_gate(&ns, &did.spec, &observed.referenced) {
        outcome.spec = refused;
        return Ok((outcome, Action::requeue(Duration::from_secs(15))));
    }
    outcome.spec = Gate::Passed(reasons::COMPLETE, "spec is valid".into());
    let revision = build::revision(&did.spec);
    outcome.revision = Some(revision.clone());

    // 2. licence gate
    let mut message = licence.message(&ns, &name, &did.spec.model.license);
    if !licence.is_accepted() {
        if let Some(withdrawn) = &outcome.withdrawn {
            message = format!("{message}; {withdrawn}");
        }
        // Withheld (the default): nothing is created or deleted, the pods keep their devices and
        // the roles' status still says where they are. Stopped: every serving pod and running
        // acceptance Job goes, freeing the devices; the judgements stay for when it reopens.
        let stop = ctx.license_withdrawal == super::context::LicenseWithdrawal::Stop;
        let stopped_runs = if stop {
            stop_running_acceptance(ctx, &ns, &observed).await?
        } else {
            0
        };
        let (gate, roles, _) = workers(
            did,
            ctx,
            &ns,
            &observed,
            &revision,
            &known,
            &licence,
            stop,
            &[],
            stop,
        )
        .await?;
        outcome.workers = if stop {
            Gate::Progressing(
                reasons::SERVING_WITHDRAWN,
                format!("licence gate closed and --license-withdrawal=stop: every serving pod deleted, {stopped_runs} running acceptance Job(s) deleted; the recorded judgements are kept, and the groups come back without a new run once the licence is accepted again"),
            )
        } else {
            withdrawn_or(&outcome, gate)
        };
        outcome.license = Gate::Failed(licence.reason(), message);
        outcome.roles = roles;
        return Ok((outcome, Action::await_change()));
    }
    outcome.license = Gate::Passed(licence.reason(), message);
    if let Err(e) = device_claim_templates(ctx, did, &observed).await {
        let Some(stalled) = rejected_gate(&e) else {
            return Err(e);
        };
        outcome.workers = stalled;
        return Ok((outcome, Action::await_change()));
    }

    // 3. checkpoint gate, 4. acceptance gate: they judge the target revision only.
    let mut retry: Option<Duration> = None;
    let mut needs_room: Vec<String> = Vec::new();
    match checkpoint_gate(did, previous, ctx, &ns, &observed).await {
        Ok((gate, status)) => {
            outcome.checkpoint = gate;
            outcome.checkpoint_status = status;
        }
        Err(e) => {
            outcome.checkpoint = api_failure(ctx, &e);
            retry = retry.or(retry_after(&outcome.checkpoint));
        }
    }
    // Jobs whose verdict is not in status yet: the current checkpoint Jobs until the checkpoint
    // is recorded, every acceptance Job until its gate says which run is judged.
    let mut unjudged_jobs: Vec<String> = Vec::new();
    if previous
        .and_then(|p| p.checkpoint.as_ref())
        .is_none_or(|c| c.source_key != build::checkpoint_key(&did.spec))
    {
        unjudged_jobs.extend([build::fetch_job_name(did), build::verify_job_name(did)]);
    }
    let acceptance_jobs = observed
        .jobs
        .iter()
        .filter(|j| j.labels().get(labels::COMPONENT).map(String::as_str) == Some("acceptance"))
        .map(ResourceExt::name_any)
        .collect::<Vec<_>>();
    let mut acceptance_judged = false;
    if did.spec.suspend {
        outcome.acceptance = suspended_acceptance(ctx, &ns, &observed).await;
        // Only an API failure is retried soon; a held gate waits for a change.
        if !matches!(outcome.acceptance, Gate::Held(..)) {
            retry = retry.or(retry_after(&outcome.acceptance));
        }
    } else if outcome.checkpoint.passed() {
        match acceptance_gate(did, ctx, &ns, &revision, &observed, &known).await {
            Ok(found) => {
                acceptance_judged = true;
                unjudged_jobs.extend(found.unjudged.clone());
                outcome.acceptance = found.gate;
                needs_room = found.needs_room;
                if let Some(status) = found.status {
                    outcome.acceptance_status = Some(status);
                }
                if let Some(judged) = found.recorded {
                    known.judgements = record_judgement(
                        &known.judgements,
                        judged.clone(),
                        &observed.revisions_with_pods(),
                    );
                    outcome.judgements = known.judgements.clone();
                    outcome.acceptance_status = Some(judged);
                    // A new verdict takes effect in this same pass.
                    enforce(ctx, &ns, &mut observed, &licence, &known, &mut outcome).await?;
                }
            }
            Err(e) => {
                outcome.acceptance = api_failure(ctx, &e);
                retry = retry.or(retry_after(&outcome.acceptance));
            }
        }
    }

    // 5. workers: the target rolls out once it passed; until then the serving revision is kept.
    match workers(
        did,
        ctx,
        &ns,
        &observed,
        &revision,
        &known,
        &licence,
        true,
        &needs_room,
        false,
    )
    .await
    {
        Ok((gate, roles, wake)) => {
            outcome.workers = withdrawn_or(&outcome, gate);
            outcome.roles = roles;
            outcome.wake_after = wake;
        }
        Err(e) => {
            ctx.metrics.reconcile_failed(e.metric_label());
            outcome.workers = match rejected_gate(&e) {
                Some(stalled) => {
                    tracing::warn!(error = %e, "the API server refused a worker object; stalled");
                    stalled
                }
                None => {
                    tracing::warn!(error = %e, kind = e.metric_label(), "applying workers failed; retrying");
                    Gate::Progressing(
                        reasons::APPLY_FAILED,
                        super::truncate(
                            &format!("applying worker pods and Services failed, retrying: {e}"),
                            1000,
                        ),
                    )
                }
            };
            retry = retry.or(retry_after(&outcome.workers));
        }
    }
    if !acceptance_judged {
        unjudged_jobs.extend(acceptance_jobs);
    }
    expire_finished_jobs(ctx, &ns, &observed, &unjudged_jobs).await;
    let action = match retry {
        Some(after) => Action::requeue(after),
        None => next_look(&outcome),
    };
    Ok((outcome, action))
}

/// The judgements recorded so far: the status's (one written before the list existed has its
/// judgement in `acceptance`), made whole from the records on the evidence ConfigMaps when the
/// status was lost, is partly unreadable or holds results this release does not know.
async fn known_judgements(
    ctx: &Context,
    ns: &str,
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    status_whole: bool,
    observed: &Observed,
) -> Result<DeepInferDeploymentStatus, Error> {
    let mut known = previous.cloned().unwrap_or_default();
    if let Some(a) = known.acceptance.clone() {
        let hash = a.spec_hash.clone().unwrap_or_default();
        let token = a.rerun_token.clone().unwrap_or_default();
        if !known
            .judgements
            .iter()
            .any(|j| j.judges(&a.revision, &hash, &token))
        {
            known.judgements.push(a);
        }
    }
    if decide::memory::needs_recall(&known, status_whole, &observed.workers) {
        let recalled = decide::memory::recalled(&evidence_metas(ctx, ns, did).await?);
        tracing::info!(
            recalled = recalled.len(),
            "the status does not hold every judgement; recalled them from the evidence"
        );
        known.judgements = decide::memory::merge(&known.judgements, recalled);
    }
    Ok(known)
}

/// When to look again if no event arrives.
fn next_look(outcome: &Outcome) -> Action {
    let after = next_look_after(outcome);
    Action::requeue(outcome.wake_after.map_or(after, |wake| wake.min(after)))
}

fn next_look_after(outcome: &Outcome) -> Duration {
    // A child the API server refused waits for a change to the resource: looking again on a
    // timer would only send it again.
    if outcome
        .stalled()
        .is_some_and(|(reason, _)| reason == reasons::CHILD_REJECTED)
    {
        return super::RESYNC;
    }
    for gate in [&outcome.checkpoint, &outcome.acceptance] {
        match gate {
            Gate::Failed(reason, _)
                if [
                    reasons::MISSING_DEPENDENCY,
                    reasons::CLAIM_NOT_BOUND,
                    reasons::TOKEN_SECRET_NOT_ALLOWED,
                ]
                .contains(reason) =>
            {
                return Duration::from_secs(15)
            }
            // A Job's pod stuck on its image, configuration or placement may recover once the
            // cause is fixed outside the resource; its pod's changes trigger no reconcile.
            Gate::Failed(reason, _) if STUCK_POD_REASONS.contains(reason) => return RECHECK,
            // A queue moves when other deployments' runs end, which no event here announces.
            Gate::Progressing(reason, _) if *reason == reasons::ACCEPTANCE_QUEUED => {
                return Duration::from_secs(10)
            }
            Gate::Progressing(..) => return RECHECK,
            _ => {}
        }
    }
    if matches!(outcome.workers, Gate::Progressing(..)) {
        return RECHECK;
    }
    super::RESYNC
}

/// Withdrawn service is news that outranks the workers' progress.
fn withdrawn_or(outcome: &Outcome, gate: Gate) -> Gate {
    match &outcome.withdrawn {
        Some(message) => Gate::Progressing(reasons::SERVING_WITHDRAWN, message.clone()),
        None => gate,
    }
}

/// Brings every worker pod's `deepinfer.io/accepted` condition in line with its entitlement,
/// and records what was withdrawn.
async fn enforce(
    ctx: &Context,
    ns: &str,
    observed: &mut Observed,
    licence: &LicenseVerdict,
    judgements: &DeepInferDeploymentStatus,
    outcome: &mut Outcome,
) -> Result<(), Error> {
    let marks = entitlement::decide(&observed.workers, licence, Some(judgements));
    if marks.is_empty() {
        return Ok(());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    for mark in &marks {
        apply::set_accepted(&api, mark).await?;
        if let Some(pod) = observed
            .workers
            .iter_mut()
            .find(|p| p.name_any() == mark.pod)
        {
            set_condition(pod, mark);
        }
    }
    if let Some(summary) = entitlement::withdrawn_summary(&marks) {
        tracing::info!(%summary, "withdrew service");
        outcome.withdrawn = Some(summary);
    }
    Ok(())
}

/// Records a condition change on the observed copy, so a later decision in the pass sees it.
fn set_condition(pod: &mut Pod, mark: &entitlement::Mark) {
    let conditions = pod
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != crate::api::ACCEPTED_POD_CONDITION);
    conditions.push(k8s_openapi::api::core::v1::PodCondition {
        type_: crate::api::ACCEPTED_POD_CONDITION.into(),
        status: if mark.accepted { "True" } else { "False" }.into(),
        reason: Some(mark.reason.into()),
        message: Some(mark.message.clone()),
        ..Default::default()
    });
}

/// The acceptance gate of a suspended deployment: a run under way is stopped so that it frees
/// its devices too; the recorded judgements stay, so resuming reuses them.
async fn suspended_acceptance(ctx: &Context, ns: &str, observed: &Observed) -> Gate {
    match stop_running_acceptance(ctx, ns, observed).await {
        Ok(stopped) => Gate::Held(
            reasons::SUSPENDED,
            format!("suspended (spec.suspend): no acceptance run; {stopped} running acceptance Job(s) deleted; recorded judgements are kept"),
        ),
        Err(e) => api_failure(ctx, &e),
    }
}

/// Deletes the deployment's acceptance Jobs still running (`spec.suspend`); returns how many.
async fn stop_running_acceptance(
    ctx: &Context,
    ns: &str,
    observed: &Observed,
) -> Result<usize, Error> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let running: Vec<&Job> = running_acceptance_jobs(observed)
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect();
    for job in &running {
        apply::delete_observed(&api, *job).await?;
    }
    Ok(running.len())
}

/// Deletes fetch Jobs still running: a withdrawn licence stops the download too.
async fn stop_fetching(ctx: &Context, ns: &str, observed: &Observed) -> Result<(), Error> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    for job in observed.jobs.iter().filter(|j| {
        j.labels().get(labels::COMPONENT).map(String::as_str) == Some(build::FETCH)
            && matches!(
                job_state(observed, &j.name_any(), build::FETCH),
                JobState::Running
            )
    }) {
        tracing::info!(job = %job.name_any(), "licence withdrawn: stopping the fetch Job");
        apply::delete_observed(&api, job).await?;
    }
    Ok(())
}

/// How soon to retry a pass whose gate met an API failure: soon, unless the API server refused
/// an object as invalid (the gate stalled; retrying the same object would fail the same way).
fn retry_after(gate: &Gate) -> Option<Duration> {
    (!matches!(gate, Gate::Failed(..))).then_some(Duration::from_secs(10))
}

/// Records an API failure inside a gate on that gate's condition (so status shows it, not only
/// the log), counts it; the pass is retried soon, unless the server refused a child as invalid:
/// then the gate stalls with the server's message and field.
fn api_failure(ctx: &Context, error: &Error) -> Gate {
    ctx.metrics.reconcile_failed(error.metric_label());
    if let Some(stalled) = rejected_gate(error) {
        tracing::warn!(error = %error, "the API server refused a child object; stalled");
        return stalled;
    }
    tracing::warn!(error = %error, kind = error.metric_label(), "a gate failed to talk to the API; retrying");
    let hint = if error.is_forbidden() {
        "; the operator's RBAC lacks a rule: compare its ClusterRole/Role with the chart's"
    } else {
        ""
    };
    Gate::Progressing(
        reasons::APPLY_FAILED,
        super::truncate(
            &format!("a Kubernetes API request failed, retrying: {error}{hint}"),
            1000,
        ),
    )
}

/// Reasons of a gate whose Job's pod cannot make progress (see `running_job_gate`).
const STUCK_POD_REASONS: [&str; 4] = [
    reasons::IMAGE_PULL_FAILED,
    reasons::CONTAINER_CONFIG_ERROR,
    reasons::CONTAINER_START_FAILED,
    reasons::POD_UNSCHEDULABLE,
];

/// How soon to look at a running Job or progressing workers again if no event arrives. Changes
/// of the Jobs, of their pods and of worker pods start a pass at once; this look only catches
/// what no event announces, so at a thousand resources it stays a small share of the passes.
const RECHECK: Duration = Duration::from_secs(120);

async fn checkpoint_gate(
    did: &ValidatedDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    ctx: &Context,
    ns: &str,
    observed: &Observed,
) -> Result<(Gate, Option<CheckpointStatus>), Error> {
    let key = build::checkpoint_key(&did.spec);
    if let Some(done) = previous
        .and_then(|p| p.checkpoint.as_ref())
        .filter(|c| c.source_key == key)
    {
        return Ok((
            Gate::Passed(reasons::VERIFIED, verified_message(done)),
            Some(done.clone()),
        ));
    }
    let claim = &did.claim;
    let phase = observed.claim_phase.clone().flatten();
    let hub = did.spec.model.source.hub.is_some();
    if let Some(gate) = claim_gate(ns, claim, phase.as_deref(), hub) {
        return Ok((gate, None));
    }
    // No fetch Job for an endpoint off the allow-list or with a token Secret that did not opt in.
    let allowed = &ctx.allowed_hub_endpoints;
    if let Some(gate) = decide::references::hub_gate(ns, &did.spec, allowed, &observed.referenced) {
        return Ok((gate, None));
    }
    let deadlines = &ctx.job_deadlines;
    let running = |job: &str, running: Gate, deadline: i64| {
        running_job_gate(
            job,
            &observed.pods_of_job(job),
            (claim, phase.as_deref()),
            Some(deadline),
            running,
        )
    };
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(fetch) = build::fetch_job(did, &ctx.operator_image, deadlines) {
        let fetch_name = fetch.name_any();
        let fetching = || {
            Gate::Progressing(
                reasons::FETCHING,
                format!("Job {fetch_name} is fetching the pinned revision into {claim}"),
            )
        };
        if let Some(conflict) = foreign_job(observed, &fetch_name, &key) {
            return Ok((conflict, None));
        }
        match job_state(observed, &fetch_name, build::FETCH) {
            JobState::Missing => {
                apply::create_once(&jobs, &fetch).await?;
                return Ok((fetching(), None));
            }
            JobState::Running => {
                return Ok((
                    running(&fetch_name, fetching(), deadlines.fetch_seconds),
                    None,
                ))
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
    let verify = build::verify_job(did, &ctx.operator_image, deadlines);
    let verify_name = verify.name_any();
    let progressing = || {
        Gate::Progressing(
            reasons::VERIFYING,
            format!("Job {verify_name} is verifying the checkpoint on {claim}"),
        )
    };
    if let Some(conflict) = foreign_job(observed, &verify_name, &key) {
        return Ok((conflict, None));
    }
    // As for acceptance: a finished verification is read from a view as new as its completion.
    let fresh = if decide::jobs::needs_fresh_pods(observed, &verify_name, build::VERIFY) {
        Some(pods_of_job_now(ctx, ns, &verify_name).await?)
    } else {
        None
    };
    let verify_pods = match &fresh {
        Some(pods) => pods.iter().collect(),
        None => observed.pods_of_job(&verify_name),
    };
    let state = decide::jobs::state_of(observed.job(&verify_name), &verify_pods, build::VERIFY);
    match state {
        JobState::Missing => {
            apply::create_once(&jobs, &verify).await?;
            Ok((progressing(), None))
        }
        JobState::Running => Ok((
            running(&verify_name, progressing(), deadlines.verify_seconds),
            None,
        )),
        JobState::Succeeded(ref message) | JobState::Failed(ref message) => Ok(judge_verify_job(
            &verify_name,
            key,
            matches!(state, JobState::Succeeded(_)),
            message.as_deref(),
            &decide::jobs::containers_ended(&verify_pods),
        )),
    }
}

/// What the acceptance gate found.
struct AcceptanceFound {
    /// The gate.
    gate: Gate,
    /// The judgement that decides the gate, when there is one (for `status.acceptance`).
    status: Option<AcceptanceStatus>,
    /// A judgement made in this pass, to record.
    recorded: Option<AcceptanceStatus>,
    /// Roles whose group of the run waits for devices.
    needs_room: Vec<String>,
    /// The run's leader Job while its verdict is not in status at the start of the pass (it
    /// keeps no TTL until then).
    unjudged: Option<String>,
}

impl AcceptanceFound {
    fn progressing(reason: &'static str, message: String) -> Self {
        Self {
            gate: Gate::Progressing(reason, message),
            status: None,
            recorded: None,
            needs_room: Vec::new(),
            unjudged: None,
        }
    }
}

/// Runs (once) and judges the acceptance workload of `revision`. A recorded judgement of this
/// revision, acceptance spec and rerun token is final and reused (rollback runs nothing).
async fn acceptance_gate(
    did: &ValidatedDeployment,
    ctx: &Context,
    ns: &str,
    revision: &str,
    observed: &Observed,
    known: &DeepInferDeploymentStatus,
) -> Result<AcceptanceFound, Error> {
    let token = did
        .annotations()
        .get(RERUN_ACCEPTANCE_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    // The prompts (resolved from promptsFrom) and expectations are part of what was judged: a
    // change re-runs acceptance (the revision's pods keep serving on its last pass until the
    // new verdict).
    let resolved = acceptance::resolve(&did.spec.acceptance, ns, observed.prompts.as_ref());
    let spec_hash = acceptance::judged_spec_hash(&did.spec.acceptance, resolved.as_ref().ok());
    let names =
        build::AcceptanceNames::new(&did.name_any(), revision, &format!("{token}/{spec_hash}"));
    let groups = names.groups(&did.spec);
    let Some(judged) = groups.first() else {
        return Ok(AcceptanceFound {
            gate: Gate::Failed(
                reasons::INVALID_SPEC,
                "spec.roles: at least one role is required".into(),
            ),
            status: None,
            recorded: None,
            needs_room: Vec::new(),
            unjudged: None,
        });
    };
    let role = judged.role;
    let shape = build::group_shape(&did.spec, role);
    let pods_of = |g: &build::RunGroup<'_>| -> Vec<&Pod> {
        (0..build::group_shape(&did.spec, g.role).pods)
            .flat_map(|rank| observed.pods_of_job(&g.job(rank)))
            .collect()
    };
    let others = &groups[1..];
    let leader = judged.job(0);
    // A finished leader whose judge's summary the Pod cache does not hold is read from its pods
    // as the API server has them now: the verdict never rests on a view older than the Job's
    // completion.
    let fresh = if decide::jobs::needs_fresh_pods(observed, &leader, build::JUDGE_CONTAINER) {
        Some(pods_of_job_now(ctx, ns, &leader).await?)
    } else {
        None
    };
    let leader_pods = match &fresh {
        Some(pods) => pods.iter().collect(),
        None => observed.pods_of_job(&leader),
    };
    let run_pods: Vec<&Pod> = groups.iter().flat_map(pods_of).collect();
    let upstream = acceptance::Upstream {
        expected: others
            .iter()
            .map(|g| usize::try_from(build::group_shape(&did.spec, g.role).pods).unwrap_or(0))
            .sum(),
        created: others.iter().any(|g| observed.job(&g.job(0)).is_some()),
        pods: others.iter().flat_map(pods_of).collect(),
    };
    let roles: Vec<String> = groups.iter().map(|g| g.role.name.clone()).collect();
    // The review decisions on the resource (handed to the judge when the run starts, recorded
    // with its verdict).
    let review = crate::api::ReviewRecord::from_annotations(did.annotations());
    let judging = acceptance::Judging {
        revision,
        spec_hash: &spec_hash,
        token: &token,
        prompts: resolved
            .as_ref()
            .map_or(did.spec.acceptance.prompts.len(), |r| r.prompts.len()),
        deadline_seconds: build::acceptance_deadline(&did.spec),
        roles: &roles,
        review: review.as_ref(),
        now: Timestamp::now(),
    };
    if let Some(conflict) = foreign_job(observed, &leader, &names.key) {
        return Ok(AcceptanceFound {
            gate: conflict,
            status: None,
            recorded: None,
            needs_room: Vec::new(),
            unjudged: None,
        });
    }
    let leader_state =
        decide::jobs::state_of(observed.job(&leader), &leader_pods, build::JUDGE_CONTAINER);
    let step = acceptance::decide(
        known.recorded_judgement(revision, &spec_hash, &token),
        &leader_state,
        &leader_pods,
        &run_pods,
        &upstream,
        &judging,
    );
    let wired = if others.is_empty() {
        String::new()
    } else {
        format!(", wired to one group of each of {}", roles[1..].join(", "))
    };
    let running = if matches!(leader_state, JobState::Missing) {
        format!(
            "the acceptance run of revision {revision} starts its {} group(s) first, as they serve: {} of {} engine(s) running; then Job {leader} runs the workload on one {} group",
            roles[1..].join(", "),
            upstream.started(),
            upstream.expected,
            role.name
        )
    } else {
        format!(
            "Job {leader} is running the acceptance workload for revision {revision} on one {} group ({} pod(s)){wired}",
            role.name, shape.pods
        )
    };
    if matches!(
        step,
        acceptance::Step::Running
            | acceptance::Step::StartJudged
            | acceptance::Step::WaitingForCapacity(_)
    ) {
        acceptance_rank_tables(ctx, did, revision, &groups, &pods_of, observed).await?;
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    // Until a verdict of this run is in status, its leader Job is where it is read from.
    let unjudged = (!matches!(step, acceptance::Step::Reuse(_))).then(|| leader.clone());
    let found = match step {
        acceptance::Step::Reuse(a) => Ok(AcceptanceFound {
            gate: acceptance::judged_gate(&a),
            status: Some(a),
            recorded: None,
            needs_room: Vec::new(),
            unjudged: None,
        }),
        acceptance::Step::Start => {
            let spec = match resolved {
                Ok(spec) => spec,
                Err(message) => {
                    return Ok(AcceptanceFound {
                        gate: Gate::Failed(reasons::MISSING_DEPENDENCY, message),
                        status: None,
                        recorded: None,
                        needs_room: Vec::new(),
                        unjudged: None,
                    })
                }
            };
            if let Some(missing) =
                acceptance::review_missing(review.as_ref(), &token, &spec_hash, &known.judgements)
            {
                return Ok(AcceptanceFound {
                    gate: Gate::Failed(reasons::ACCEPTANCE_REVIEW_REQUIRED, missing),
                    status: None,
                    recorded: None,
                    needs_room: Vec::new(),
                    unjudged: None,
                });
            }
            if let Some(queued) = queued_behind_the_fleet(ctx, did, &names, revision) {
                return Ok(queued);
            }
            start_acceptance(did, ctx, revision, &names, &spec, observed).await?;
            // The other roles' groups first; the judged group once their engines run.
            let first = if others.is_empty() {
                &groups[..]
            } else {
                others
            };
            start_groups(did, ctx, revision, &names, first).await?;
            Ok(AcceptanceFound::progressing(
                reasons::ACCEPTANCE_RUNNING,
                running,
            ))
        }
        acceptance::Step::StartJudged => {
            start_groups(did, ctx, revision, &names, &groups[..1]).await?;
            Ok(AcceptanceFound::progressing(
                reasons::ACCEPTANCE_RUNNING,
                running,
            ))
        }
        acceptance::Step::Running => {
            // A pod that cannot start (engine image, configuration) says so on the gate; the
            // run's deadline only starts when its engine runs.
            let gate = running_job_gate(
                &leader,
                &run_pods,
                (&did.claim, Some("Bound")),
                None,
                Gate::Progressing(reasons::ACCEPTANCE_RUNNING, running),
            );
            Ok(AcceptanceFound {
                gate,
                status: None,
                recorded: None,
                needs_room: Vec::new(),
                unjudged: None,
            })
        }
        acceptance::Step::WaitingForCapacity(why) => {
            // The roles whose run group waits for devices: their serving groups may make room.
            let waiting: Vec<&build::RunGroup<'_>> = groups
                .iter()
                .filter(|g| {
                    pods_of(g)
                        .iter()
                        .any(|p| decide::jobs::unschedulable(p).is_some())
                })
                .collect();
            let need = waiting
                .iter()
                .map(|g| {
                    format!(
                        "{} {}",
                        g.role.name,
                        acceptance::capacity_need(&did.spec, g.role)
                    )
                })
                .collect::<Vec<_>>()
                .join(" and ");
            let mut found = AcceptanceFound::progressing(
                reasons::WAITING_FOR_CAPACITY,
                format!(
                    "the acceptance run of revision {revision} waits for devices: it needs {need}; scheduler: {why}. Its deadline starts when it runs; with spec.roles[].rollout.maxUnavailable ≥ 1 one serving group makes room"
                ),
            );
            found.needs_room = waiting.iter().map(|g| g.role.name.clone()).collect();
            Ok(found)
        }
        acceptance::Step::Rerun => {
            stop_acceptance(ctx, did, observed, &jobs, &groups, 0).await?;
            Ok(AcceptanceFound::progressing(
                reasons::ACCEPTANCE_RUNNING,
                format!(
                    "the acceptance Job {leader} ended without a verdict and its pod is gone or never ran; it is run again"
                ),
            ))
        }
        acceptance::Step::Record {
            judgement,
            stop_leader,
        } => {
            // The followers' engines (and the other roles') have nothing left to serve.
            let from = if stop_leader { 0 } else { 1 };
            stop_acceptance(ctx, did, observed, &jobs, &groups, from).await?;
            let duration = observed
                .job(&leader)
                .and_then(|j| j.status.clone())
                .and_then(|s| Some((s.start_time?.0, s.completion_time.map(|c| c.0))))
                .map(|(start, end)| {
                    let end = end.unwrap_or_else(Timestamp::now);
                    end.duration_since(start).as_secs_f64().max(0.0)
                })
                .unwrap_or(0.0);
            remember(ctx, ns, &judgement).await?;
            // The evidence of the judgement just made, and of those serving pods rest on.
            let with_pods = observed.revisions_with_pods();
            let pinned = crate::api::pinned(&known.judgements, &with_pods);
            let kept: Vec<&str> = known
                .judgements
                .iter()
                .zip(pinned)
                .filter_map(|(j, pinned)| pinned.then_some(j))
                .chain([&judgement])
                .filter_map(|j| j.evidence.as_deref())
                .collect();
            prune_evidence(ctx, ns, did, &kept).await;
            Ok(record(ctx, judgement, duration))
        }
    };
    found.map(|f| AcceptanceFound { unjudged, ..f })
}

/// The pods of the Job `job` as the API server has them now (a list straight from it, not the
/// cache).
async fn pods_of_job_now(ctx: &Context, ns: &str, job: &str) -> Result<Vec<Pod>, Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let lp = kube::api::ListParams::default()
        .labels(&format!("{}={job}", super::cached::JOB_NAME_LABEL));
    tracing::info!(%job, "the Job finished but the cache holds no summary of its pod; reading its pods directly");
    api.list(&lp)
        .await
        .map(|l| l.items)
        .map_err(|e| Error::api("list", "Pod", &format!("{ns}/{job} pods"), e))
}

/// The metadata of the resource's evidence ConfigMaps (read as metadata only: evidence is up to
/// 1 MiB each).
async fn evidence_metas(
    ctx: &Context,
    ns: &str,
    did: &DeepInferDeployment,
) -> Result<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>, Error> {
    use kube::core::PartialObjectMeta;
    let name = did.name_any();
    let uid = did.uid().unwrap_or_default();
    let metas: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(ctx.client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&format!(
        "{}={name},{}=evidence",
        labels::DEPLOYMENT,
        labels::COMPONENT
    ));
    let list = metas
        .list(&lp)
        .await
        .map_err(|e| Error::api("list", "ConfigMap", &format!("{ns}/{name} evidence"), e))?;
    Ok(list
        .items
        .into_iter()
        .map(|m| m.metadata)
        .filter(|m| m.owner_references.iter().flatten().any(|o| o.uid == uid))
        .collect())
}

/// Keeps the judgement beside its evidence (annotation
/// [`decide::memory::JUDGEMENT_ANNOTATION`] of the run's evidence ConfigMap), so that a lost
/// status can be made whole again. A judgement without evidence is kept in status only.
async fn remember(ctx: &Context, ns: &str, judgement: &AcceptanceStatus) -> Result<(), Error> {
    let Some(evidence) = judgement.evidence.as_deref() else {
        return Ok(());
    };
    let record = serde_json::to_string(judgement).map_err(Error::Serde)?;
    let patch = serde_json::json!({"metadata": {"annotations": {
        decide::memory::JUDGEMENT_ANNOTATION: record,
    }}});
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    match api
        .patch(
            evidence,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Evidence deleted by hand: the judgement lives in status alone.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::api(
            "annotate",
            "ConfigMap",
            &format!("{ns}/{evidence}"),
            e,
        )),
    }
}

/// The gate of a run that waits its turn under `--max-concurrent-acceptance-runs` (the serving
/// revision keeps serving), or `None` when it may start.
fn queued_behind_the_fleet(
    ctx: &Context,
    did: &ValidatedDeployment,
    names: &build::AcceptanceNames,
    revision: &str,
) -> Option<AcceptanceFound> {
    let limit = ctx.max_concurrent_acceptance_runs?;
    let run = decide::fleet::run_key(&did.namespace, &did.name_any(), &names.key);
    let runs = ctx.caches.acceptance_runs();
    let admission = ctx
        .acceptance_queue
        .lock()
        .map(|mut q| q.ask(&run, &runs, Some(limit), Timestamp::now()))
        .unwrap_or(decide::fleet::Admission::Start);
    let decide::fleet::Admission::Queued {
        position,
        under_way,
        limit,
    } = admission
    else {
        return None;
    };
    Some(AcceptanceFound::progressing(
        reasons::ACCEPTANCE_QUEUED,
        format!(
            "the acceptance run of revision {revision} waits its turn: number {position} in line, {under_way} run(s) under way of --max-concurrent-acceptance-runs {limit}; serving pods of judged revisions keep serving"
        ),
    ))
}

/// Deletes the resource's evidence ConfigMaps beyond the newest `--keep-evidence`, never one in
/// `pinned` (the judgement just recorded, and those serving pods rest on).
/// Housekeeping: a failure is logged, not a failed pass.
async fn prune_evidence(ctx: &Context, ns: &str, did: &ValidatedDeployment, pinned: &[&str]) {
    let evidence = match evidence_metas(ctx, ns, did).await {
        Ok(evidence) => evidence,
        Err(e) => {
            tracing::warn!(error = %e, "listing evidence ConfigMaps failed; pruning them later");
            return;
        }
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let keep = usize::from(ctx.retention.keep_evidence);
    for old in decide::retention::evidence_to_delete(&evidence, keep, pinned) {
        let Some(meta) = evidence
            .iter()
            .find(|m| m.name.as_deref() == Some(old.as_str()))
        else {
            continue;
        };
        tracing::info!(configmap = %old, keep, "deleting evidence beyond the newest kept");
        if let Err(e) = apply::delete_owned(&api, meta).await {
            tracing::warn!(error = %e, "deleting old evidence failed; trying again at the next judgement");
        }
    }
}

/// Gives every finished Job whose verdict is in status (all but `keep`) its
/// `ttlSecondsAfterFinished`, so the TTL controller removes it and its pods. Housekeeping: a
/// failure is logged, not a failed pass.
async fn expire_finished_jobs(ctx: &Context, ns: &str, observed: &Observed, keep: &[String]) {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let ttl = ctx.retention.finished_job_ttl_seconds;
    for name in decide::retention::jobs_to_expire(&observed.jobs, keep) {
        let patch = serde_json::json!({"spec": {"ttlSecondsAfterFinished": ttl}});
        match api
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => tracing::debug!(job = %name, ttl, "finished Job expires"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(job = %name, error = %e, "setting a finished Job's TTL failed; trying again next pass")
            }
        }
    }
}

fn record(ctx: &Context, judged: AcceptanceStatus, seconds: f64) -> AcceptanceFound {
    ctx.metrics
        .acceptance_finished(judged.result.as_str(), seconds);
    AcceptanceFound {
        gate: acceptance::judged_gate(&judged),
        status: Some(judged.clone()),
        recorded: Some(judged),
        needs_room: Vec::new(),
        unjudged: None,
    }
}

/// Ascend: writes the rank table of each started group of the run from its pods as they are
/// placed and allocated (`completed` once every rank is), and deletes the tables of earlier runs
/// none of whose Jobs is left.
async fn acceptance_rank_tables<'a>(
    ctx: &Context,
    did: &ValidatedDeployment,
    revision: &str,
    groups: &[build::RunGroup<'_>],
    pods_of: &impl Fn(&build::RunGroup<'_>) -> Vec<&'a Pod>,
    observed: &'a Observed,
) -> Result<(), Error> {
    if !build::uses_rank_tables(&did.spec) {
        return Ok(());
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &did.namespace);
    let name = did.name_any();
    let current: BTreeSet<String> = groups
        .iter()
        .map(|g| build::rank_table_name(&g.name))
        .collect();
    for group in groups {
        let table_name = build::rank_table_name(&group.name);
        // Only a started group has its table; it is created with the group's Jobs.
        let Some(existing) = observed
            .rank_tables
            .iter()
            .find(|t| t.name_any() == table_name)
        else {
            continue;
        };
        if let Some(table) = build::acceptance_rank_table(did, group, revision, &pods_of(group)) {
            apply::apply_if_changed(&api, &table, Some(existing)).await?;
        }
    }
    for stale in observed
        .rank_tables
        .iter()
        .filter(|t| build::is_acceptance_rank_table(&name, t))
        .filter(|t| !current.contains(&t.name_any()))
    {
        let run_group = stale
            .labels()
            .get(labels::GROUP)
            .cloned()
            .unwrap_or_default();
        let left = observed
            .jobs
            .iter()
            .any(|j| j.name_any().starts_with(&format!("{run_group}-")));
        if !left {
            apply::delete_observed(&api, stale).await?;
        }
    }
    Ok(())
}

/// Creates the objects one acceptance run shares: RBAC for the judge, the spec ConfigMap and
/// the empty evidence ConfigMap (the judge may only update it).
async fn start_acceptance(
    did: &ValidatedDeployment,
    ctx: &Context,
    revision: &str,
    names: &build::AcceptanceNames,
    spec: &AcceptanceSpec,
    observed: &Observed,
) -> Result<(), Error> {
    let ns = did.namespace.as_str();
    let spec_yaml = serde_yaml::to_string(spec).unwrap_or_default();
    let (sa, role_obj, binding) = build::acceptance_rbac(did, names, &in_flight_evidence(observed));
    let client = &ctx.client;
    apply::apply_if_changed(&Api::namespaced(client.clone(), ns), &sa, None).await?;
    apply::apply_if_changed(&Api::namespaced(client.clone(), ns), &role_obj, None).await?;
    apply::apply_if_changed(&Api::namespaced(client.clone(), ns), &binding, None).await?;
    let cm = build::acceptance_spec_configmap(did, names, revision, spec_yaml);
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), ns);
    apply::apply_if_changed(&configmaps, &cm, None).await?;
    apply::create_once(
        &configmaps,
        &build::acceptance_evidence_configmap(did, names, revision),
    )
    .await?;
    Ok(())
}

/// Creates groups of an acceptance run: each one's rendezvous Service (where it needs one), its
/// PodGroup before its pods (they wait for it, then are bound all at once), and one Job per
/// rank, followers first, so that a leader's engine finds them when it starts.
async fn start_groups(
    did: &ValidatedDeployment,
    ctx: &Context,
    revision: &str,
    names: &build::AcceptanceNames,
    groups: &[build::RunGroup<'_>],
) -> Result<(), Error> {
    let ns = did.namespace.as_str();
    let client = &ctx.client;
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    for group in groups {
        if build::acceptance_needs_service(&did.spec, group) {
            let svc_api: Api<Service> = Api::namespaced(client.clone(), ns);
            apply::apply_if_changed(
                &svc_api,
                &build::acceptance_service(did, group, revision),
                None,
            )
            .await?;
        }
        if let Some(pod_group) =
            build::acceptance_pod_group(did, group, revision).filter(|_| did.pod_groups)
        {
            apply::apply_if_changed(&Api::namespaced(client.clone(), ns), &pod_group, None).await?;
        }
        // The rank table the pods mount exists before them ("initializing" until every rank
        // is allocated).
        if let Some(table) = build::acceptance_rank_table(did, group, revision, &[]) {
            apply::apply_if_changed(&Api::namespaced(client.clone(), ns), &table, None).await?;
        }
        let pods = build::group_shape(&did.spec, group.role).pods;
        for rank in (0..pods).rev() {
            if let Some(job) =
                build::acceptance_group_job(did, names, group, rank, revision, &ctx.operator_image)
            {
                apply::create_once(&jobs, &job).await?;
            }
        }
    }
    Ok(())
}

/// With a DeviceClass, creates the ResourceClaimTemplates engine pods (and PodGroups) claim
/// their devices from before any such pod exists, and deletes the deployment's templates that
/// neither the spec nor any of its pods, Jobs or PodGroups still name.
async fn device_claim_templates(
    ctx: &Context,
    did: &ValidatedDeployment,
    observed: &Observed,
) -> Result<(), Error> {
    let desired = build::claim_templates(did);
    if desired.is_empty() {
        return Ok(());
    }
    let api: Api<ResourceClaimTemplate> = Api::namespaced(ctx.client.clone(), &did.namespace);
    let names: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
    for template in &desired {
        let name = template.name_any();
        if !observed
            .claim_templates
            .iter()
            .any(|t| t.name_any() == name)
        {
            apply::create_once(&api, template).await?;
        }
    }
    let job_pods = observed
        .jobs
        .iter()
        .filter_map(|j| j.spec.as_ref()?.template.spec.as_ref());
    let pods = observed
        .workers
        .iter()
        .chain(&observed.job_pods)
        .filter_map(|p| p.spec.as_ref());
    let mut in_use = build::templates_in_use(job_pods.chain(pods));
    in_use.extend(
        observed
            .pod_groups
            .iter()
            .flat_map(|g| g.spec.resource_claims.iter().flatten())
            .filter_map(|c| c.resource_claim_template_name.clone()),
    );
    for unused in observed.claim_templates.iter().filter(|t| {
        let t = t.name_any();
        !names.contains(&t) && !in_use.contains(&t)
    }) {
        apply::delete_observed(&api, unused).await?;
    }
    Ok(())
}

/// The evidence ConfigMaps of this deployment's acceptance runs whose Jobs are still running.
fn in_flight_evidence(observed: &Observed) -> Vec<String> {
    running_acceptance_jobs(observed)
        .filter_map(build::evidence_of_job)
        .collect()
}

/// This deployment's acceptance Jobs that have not finished.
fn running_acceptance_jobs(observed: &Observed) -> impl Iterator<Item = &Job> {
    observed.jobs.iter().filter(|j| {
        j.labels().get(labels::COMPONENT).map(String::as_str) == Some("acceptance")
            && matches!(
                job_state(observed, &j.name_any(), build::JUDGE_CONTAINER),
                JobState::Running
            )
    })
}

/// Deletes the Jobs of a run: the judged group's ranks from `from` on, every rank of the other
/// roles' groups, and each group's rendezvous Service and PodGroup once all its ranks go. Only
/// what the pass observed is deleted: a pass that records the same verdict again (its status
/// write not yet in the cache) sends no delete for what the first one removed.
async fn stop_acceptance(
    ctx: &Context,
    did: &ValidatedDeployment,
    observed: &Observed,
    jobs: &Api<Job>,
    groups: &[build::RunGroup<'_>],
    from: i32,
) -> Result<(), Error> {
    let ns = did.namespace.as_str();
    for group in groups {
        let pods = build::group_shape(&did.spec, group.role).pods;
        let first = if group.judged { from } else { 0 };
        let ranks: Vec<String> = (first..pods).map(|rank| group.job(rank)).collect();
        apply::delete_named(jobs, &observed.jobs, &ranks).await?;
        let named = std::slice::from_ref(&group.name);
        if build::acceptance_needs_service(&did.spec, group) {
            let svc_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
            apply::delete_named(&svc_api, &observed.services, named).await?;
        }
        if pods > 1 && ctx.pod_groups().await? {
            let pod_groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), ns);
            apply::delete_named(&pod_groups, &observed.pod_groups, named).await?;
        }
        if build::uses_rank_tables(&did.spec) {
            let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
            let table = [build::rank_table_name(&group.name)];
            apply::delete_named(&configmaps, &observed.rank_tables, &table).await?;
        }
    }
    Ok(())
}

/// Plans every role's groups with the rollout planner and, when `act`, carries the plan out:
/// pods, group and role Services, PodDisruptionBudgets, and the ControllerRevision of the
/// target. Returns the workers' gate and the roles' status.
#[allow(clippy::too_many_arguments)]
async fn workers(
    did: &ValidatedDeployment,
    ctx: &Context,
    ns: &str,
    observed: &Observed,
    target: &str,
    known: &DeepInferDeploymentStatus,
    licence: &LicenseVerdict,
    act: bool,
    acceptance_needs_room: &[String],
    stop: bool,
) -> Result<(Gate, Vec<RoleStatus>, Option<Duration>), Error> {
    let name = did.name_any();
    let mut specs = std::collections::BTreeMap::new();
    for kept in &observed.revisions {
        let past = build::kept_spec(kept).and_then(|spec| did.with_spec(spec, &ctx.limits).ok());
        if let (Some(rev), Some(past)) = (kept.labels().get(labels::REVISION), past) {
            specs.insert(rev.clone(), past);
        }
    }
    let target_kept = specs.contains_key(target);
    specs.insert(target.to_string(), did.clone());
    let revisions: BTreeSet<String> = observed
        .workers
        .iter()
        .filter_map(|p| p.labels().get(labels::REVISION).cloned())
        .chain(std::iter::once(target.to_string()))
        .collect();
    // Per role: the revisions whose latest judgement passed with that role included, and those
    // in service whose verdict is not known (a lost memory is not a verdict against them).
    let unsettled = entitlement::unsettled_in_service(&observed.workers, licence, Some(known));
    let passed_for = |role: &str| -> BTreeSet<String> {
        revisions
            .iter()
            .filter(|r| {
                known
                    .latest_judgement(r)
                    .is_some_and(|j| j.passed_for(role))
                    || unsettled.contains(&((*r).clone(), role.to_string()))
            })
            .cloned()
            .collect()
    };
    let buildable: BTreeSet<String> = specs.keys().cloned().collect();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let configmaps_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let mut statuses = Vec::new();
    let mut progress = Vec::new();
    let mut groups_kept: Vec<(String, String, i32)> = Vec::new();
    let watchdog = Watchdog {
        timeout: ctx.partial_group_timeout,
        now: Timestamp::now(),
    };
    let mut wake: Option<Duration> = None;
    let mut wake_by = |d: Duration| wake = Some(wake.map_or(d, |w: Duration| w.min(d)));
    let pod_groups_api: Api<PodGroup> = Api::namespaced(ctx.client.clone(), ns);
    for role in &did.spec.roles {
        let views = group_views(&observed.workers, &role.name, &specs, watchdog);
        let stranded: Vec<&str> = views
            .iter()
            .filter_map(|(g, _)| match &g.health {
                Health::Stranded(why) => Some(why.as_str()),
                _ => None,
            })
            .collect();
        // The watchdog looks again when a partly placed group's time is up.
        for (_, members) in &views {
            if let Some(p) = partial_placement(members, members.len()) {
                wake_by(
                    watchdog
                        .timeout
                        .saturating_sub(p.age(watchdog.now))
                        .max(Duration::from_secs(1)),
                );
            }
        }
        let key = (did.uid().unwrap_or_default(), role.name.clone());
        let previous =
            remembered_retry(ctx, &key, known.roles.iter().find(|r| r.name == role.name));
        let retry = placement_retry(&role.name, previous.as_ref(), stranded.len(), watchdog.now);
        if let Some(wait) = retry.wait {
            wake_by(wait.max(Duration::from_secs(1)));
        }
        let broken: Vec<&str> = views
            .iter()
            .filter_map(|(g, _)| match &g.health {
                Health::Broken(why) => Some(why.as_str()),
                _ => None,
            })
            .collect();
        if act {
            for why in &stranded {
                tracing::warn!(role = %role.name, %why, "deleting a partly placed group");
                publish_warning(ctx, did, "GroupPartlyPlaced", "DeleteGroup", why).await;
            }
            for why in &broken {
                tracing::warn!(role = %role.name, %why, "replacing a broken group");
                publish_warning(ctx, did, "GroupReplaced", "DeleteGroup", why).await;
            }
        }
        let mut plan = rollout::plan(&RoleInput {
            role: &role.name,
            desired: role.replicas,
            rollout: role.rollout.clone(),
            groups: views.iter().map(|(g, _)| g.clone()).collect(),
            target,
            passed: &passed_for(&role.name),
            buildable: &buildable,
            licence_open: act,
            acceptance_needs_room: acceptance_needs_room.contains(&role.name),
            placement_hold: retry.hold.clone(),
            mode: if did.spec.suspend || stop {
                rollout::Mode::Suspended
            } else if did.spec.paused {
                rollout::Mode::Paused
            } else {
                rollout::Mode::Serving
            },
        });
        // A role whose groups all serve has nothing left to retry.
        let keep = (plan.progress != Progress::Complete && retry.retries > 0)
            .then_some(retry.retries)
            .zip(retry.last);
        if let Some((retries, last)) = keep {
            plan.status.placement_retries = Some(retries);
            plan.status.last_placement_retry =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(last));
        }
        if act {
            if let Ok(mut memory) = ctx.placement_retries.lock() {
                match keep {
                    Some(record) => memory.insert(key, record),
                    None => memory.remove(&key),
                };
            }
        }
        for note in &plan.notes {
            tracing::info!(%note, "making room for acceptance");
        }
        let deleted: BTreeSet<(String, i32)> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                GroupAction::Delete { revision, index } => Some((revision.clone(), *index)),
                GroupAction::Create { .. } => None,
            })
            .collect();
        for (g, _) in &views {
            if g.health != Health::Terminating && !deleted.contains(&(g.revision.clone(), g.index))
            {
                groups_kept.push((role.name.clone(), g.revision.clone(), g.index));
            }
        }
        if act {
            for action in &plan.actions {
                match action {
                    GroupAction::Delete { revision, index } => {
                        let members = views
                            .iter()
                            .find(|(g, _)| g.revision == *revision && g.index == *index)
                            .map(|(_, m)| m.clone())
                            .unwrap_or_default();
                        for pod in members
                            .iter()
                            .filter(|p| p.metadata.deletion_timestamp.is_none())
                        {
                            apply::delete_observed(&pods_api, pod).await?;
                        }
                    }
                    GroupAction::Create { revision, index } => {
                        let Some(at) = specs.get(revision) else {
                            continue;
                        };
                        let Some(role_at) = at.spec.roles.iter().find(|r| r.name == role.name)
                        else {
                            continue;
                        };
                        groups_kept.push((role.name.clone(), revision.clone(), *index));
                        // The group's PodGroup before its pods: they wait for it, then are
                        // bound all at once.
                        if at.pod_groups {
                            let group = build::group_pod_group(at, role_at, revision, *index);
                            apply::apply_if_changed(&pod_groups_api, &group, None).await?;
                        }
                        // The rank table the pods mount exists before them (it says
                        // "initializing" until every rank is allocated).
                        if build::uses_rank_tables(&at.spec) {
                            let table =
                                build::rank_table_configmap(at, role_at, revision, *index, &[]);
                            apply::apply_if_changed(&configmaps_api, &table, None).await?;
                        }
                        for pod in build::group_pods(at, role_at, *index, revision) {
                            apply::apply_if_changed(&pods_api, &pod, None).await?;
                        }
                    }
                }
            }
        }
        let mut p = plan.progress.clone();
        if let (Some(note), Progress::HoldingServing(m)) = (plan.notes.first(), &plan.progress) {
            p = Progress::HoldingServing(format!("{m}; {note}"));
        }
        // Why a group goes whole is news for whoever reads the condition, not only the event.
        if !broken.is_empty() && act {
            let why = broken.join("; ");
            p = match p {
                Progress::Converging(m) => Progress::Converging(format!("{m}; {why}")),
                Progress::RollingOut(m) => Progress::RollingOut(format!("{m}; {why}")),
                Progress::HoldingServing(m) => Progress::HoldingServing(format!("{m}; {why}")),
                Progress::Complete => Progress::Converging(why),
                other => other,
            };
        }
        statuses.push(plan.status);
        progress.push(p);
    }
    if act {
        let svc_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
        let existing: Vec<Service> = observed
            .services
            .iter()
            .filter(|s| {
                matches!(
                    s.labels().get(labels::COMPONENT).map(String::as_str),
                    Some("serving" | "rendezvous")
                )
            })
            .cloned()
            .collect();
        apply::apply_all(&svc_api, &build::services(did, &groups_kept), &existing).await?;
        // Rank tables of the kept groups, from their pods' device allocations as observed.
        let tables = build::rank_tables(&specs, &groups_kept, &observed.workers);
        let serving_tables: Vec<ConfigMap> = observed
            .rank_tables
            .iter()
            .filter(|t| !build::is_acceptance_rank_table(&name, t))
            .cloned()
            .collect();
        apply::apply_all(&configmaps_api, &tables, &serving_tables).await?;
        // Where decode groups find the ready prefill / vision leaders (rewritten in place).
        let endpoints: Vec<ConfigMap> =
            build::peer_endpoints_configmap(did, &groups_kept, &observed.workers)
                .into_iter()
                .collect();
        apply::apply_all(&configmaps_api, &endpoints, &observed.peer_endpoints).await?;
        if did.pod_groups {
            let serving: Vec<PodGroup> = observed
                .pod_groups
                .iter()
                .filter(|g| g.labels().get(labels::COMPONENT).map(String::as_str) == Some("worker"))
                .cloned()
                .collect();
            let desired = build::serving_pod_groups(did, &specs, &groups_kept);
            apply::apply_all(&pod_groups_api, &desired, &serving).await?;
        }
        let pdb_api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            Api::namespaced(ctx.client.clone(), ns);
        let budgets: Vec<_> = did
            .spec
            .roles
            .iter()
            .map(|r| build::budget(did, r))
            .collect();
        apply::apply_all(&pdb_api, &budgets, &observed.budgets).await?;
        keep_revisions(did, ctx, ns, observed, target, target_kept).await?;
    }
    let _ = name;
    Ok((workers_gate(&statuses, &progress), statuses, wake))
}

/// Keeps a ControllerRevision for the target (so its groups can be rebuilt once the spec moves
/// on) and drops those of revisions that no longer have pods.
async fn keep_revisions(
    did: &ValidatedDeployment,
    ctx: &Context,
    ns: &str,
    observed: &Observed,
    target: &str,
    target_kept: bool,
) -> Result<(), Error> {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    if !target_kept {
        let number = observed
            .revisions
            .iter()
            .filter_map(|r| r.revision)
            .max()
            .unwrap_or(0)
            + 1;
        apply::apply_if_changed(&api, &build::controller_revision(did, target, number), None)
            .await?;
    }
    let live: BTreeSet<&str> = observed
        .workers
        .iter()
        .filter_map(|p| p.labels().get(labels::REVISION).map(String::as_str))
        .collect();
    for kept in &observed.revisions {
        let rev = kept.labels().get(labels::REVISION).map(String::as_str);
        if rev.is_some_and(|r| r != target && !live.contains(r)) {
            apply::delete_observed(&api, kept).await?;
        }
    }
    Ok(())
}

/// Publishes a Warning event on the resource (best effort: a failure is logged, never retried).
async fn publish_warning(
    ctx: &Context,
    did: &ValidatedDeployment,
    reason: &str,
    action: &str,
    note: &str,
) {
    use kube::runtime::events::{Event, EventType};
    let reference = kube::Resource::object_ref(&**did, &());
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(super::truncate(note, 900)),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        tracing::warn!("publishing event: {e}");
    }
}

/// The role's retry record: the status's, or this operator's own if newer (the status read in
/// the pass right after a deletion may predate it).
fn remembered_retry(
    ctx: &Context,
    key: &(String, String),
    status: Option<&RoleStatus>,
) -> Option<RoleStatus> {
    let mut out = status.cloned();
    let memory = ctx
        .placement_retries
        .lock()
        .ok()
        .and_then(|m| m.get(key).copied());
    if let Some((retries, last)) = memory {
        let stored = out
            .as_ref()
            .and_then(|s| s.last_placement_retry.as_ref())
            .map(|t| t.0);
        if stored.is_none_or(|t| t < last) {
            let s = out.get_or_insert_with(RoleStatus::default);
            s.placement_retries = Some(retries);
            s.last_placement_retry =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(last));
        }
    }
    out
}
