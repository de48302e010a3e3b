//! Runs of configurations that are no longer the target: ended, their finished verdicts
//! recorded.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use crate::api::{labels, AcceptanceStatus, Component, DeepInferDeploymentStatus};
use crate::controller::act::{self, Act};
use crate::controller::build::{self};
use crate::controller::gates::acceptance::decide::{self as judge};
use crate::controller::gates::acceptance::memory::JUDGEMENT_ANNOTATION;
use crate::controller::gates::jobs::{job_state, JobState};
use crate::controller::gates::Plan;
use crate::controller::observe::Observed;
use crate::controller::validated::ValidatedDeployment;

/// What ending the runs that are not the target's found: the verdicts they wrote, to record.
#[derive(Clone, Debug, Default)]
pub struct Superseded {
    /// Judgements of finished runs not recorded yet (for their own revision, spec and token).
    pub recorded: Vec<AcceptanceStatus>,
    /// Jobs deleted because their run stopped being the target's.
    pub ended: usize,
}

/// Every acceptance run of the deployment `did` other than the target's (key `target`), seen
/// as a whole: a run whose leader finished has its verdict recorded (for the revision, spec and
/// token it was made for, so that a rollback reuses it) unless it is already; every Job of
/// such a run that has not finished is deleted with the run's Services, PodGroups and rank
/// tables, so that at most one run of the deployment holds devices. A Job whose name is not the
/// one its own key gives is not known to be a run's and is left alone.
pub fn superseded<'o>(
    deployment: &ValidatedDeployment,
    observed: &'o Observed,
    target: &str,
    known: &DeepInferDeploymentStatus,
    verdict_key: &crate::controller::proof::VerdictKey,
) -> Plan<'o, Superseded> {
    let did = &deployment.name_any();
    let uid = deployment.uid().unwrap_or_default();
    let mut runs: std::collections::BTreeMap<&str, Vec<&'o Job>> = Default::default();
    for job in observed.jobs.iter().filter(|j| {
        Component::of(j.labels()) == Some(Component::Acceptance)
            && j.metadata.deletion_timestamp.is_none()
    }) {
        let Some(key) = job.annotations().get(build::JUDGES_ANNOTATION) else {
            continue;
        };
        let ours = build::AcceptanceNames::of_key(did, key)
            .is_some_and(|names| names.holds_job(&job.name_any()));
        if key != target && ours {
            runs.entry(key.as_str()).or_default().push(job);
        }
    }
    let mut plan = Plan::only(Superseded::default());
    for (key, jobs) in runs {
        let Some(names) = build::AcceptanceNames::of_key(did, key) else {
            continue;
        };
        let leader = names.job(0);
        if let Some(judgement) = superseded_verdict(observed, &names, &jobs, known) {
            let judgement = verdict_key.seal(&uid, judgement);
            if judgement.evidence.as_deref() == Some(names.evidence_configmap.as_str()) {
                if let Ok(value) = serde_json::to_string(&judgement) {
                    plan.acts.push(Act::Annotate {
                        configmap: names.evidence_configmap.clone(),
                        annotations: [(JUDGEMENT_ANNOTATION, value)].into(),
                    });
                }
            }
            plan.found.recorded.push(judgement);
        }
        let groups: BTreeSet<&str> = jobs
            .iter()
            .filter_map(|j| j.labels().get(labels::GROUP).map(String::as_str))
            .collect();
        for job in jobs.iter().filter(|j| {
            matches!(
                job_state(observed, &j.name_any(), build::JUDGE_CONTAINER),
                JobState::Running
            ) || j.name_any() != leader
        }) {
            plan.acts.push(Act::delete(*job));
            plan.found.ended += 1;
        }
        plan.acts.extend(run_scoped(&observed.services, &groups));
        plan.acts.extend(run_scoped(&observed.pod_groups, &groups));
        plan.acts.extend(run_scoped(&observed.rank_tables, &groups));
    }
    plan
}

/// Deletes of the acceptance objects in `objects` of the run groups named `groups`.
pub(super) fn run_scoped<'o, K: act::Kind>(
    objects: &'o [K],
    groups: &BTreeSet<&str>,
) -> Vec<Act<'o>> {
    objects
        .iter()
        .filter(|o| {
            let labels = o.labels();
            Component::of(labels) == Some(Component::Acceptance)
                && labels
                    .get(labels::GROUP)
                    .is_some_and(|g| groups.contains(g.as_str()))
                && o.meta().deletion_timestamp.is_none()
        })
        .map(Act::delete)
        .collect()
}

/// The verdict a superseded run's leader wrote, when it finished with a summary, its Job says
/// what it judged (and that hashes to the run's key), and no judgement of that revision, spec
/// and token is recorded.
pub(super) fn superseded_verdict(
    observed: &Observed,
    names: &build::AcceptanceNames,
    jobs: &[&Job],
    known: &DeepInferDeploymentStatus,
) -> Option<AcceptanceStatus> {
    let leader = names.job(0);
    let job = jobs.iter().find(|j| j.name_any() == leader)?;
    let message = match job_state(observed, &leader, build::JUDGE_CONTAINER) {
        JobState::Succeeded(m) | JobState::Failed(m) => m?,
        JobState::Running | JobState::Missing => return None,
    };
    let revision = job.labels().get(labels::REVISION)?;
    let judges = job.annotations().get(build::RUN_ANNOTATION)?;
    if !build::AcceptanceNames::judges_key(revision, judges, &names.key) {
        return None;
    }
    let (token, spec_hash) = judges.rsplit_once('/')?;
    if known
        .recorded_judgement(revision, spec_hash, token)
        .is_some()
    {
        return None;
    }
    let summary: crate::acceptance::AcceptanceSummary =
        serde_json::from_str(message.trim()).ok()?;
    let mut roles: Vec<String> = job
        .labels()
        .get(labels::ROLE)
        .cloned()
        .into_iter()
        .collect();
    for role in jobs.iter().filter_map(|j| j.labels().get(labels::ROLE)) {
        if !roles.contains(role) {
            roles.push(role.clone());
        }
    }
    Some(judge::judged_summary(
        summary, revision, spec_hash, token, roles,
    ))
}
