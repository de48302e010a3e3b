//! The checkpoint stage: a verified checkpoint recorded for the spec's source is final; until
//! then the claim must be there (bound, for a volume source), a hub source must be allowed, and
//! the fetch Job (hub) then the verify Job run once each and are judged when they end.

pub mod decide;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::{CheckpointStatus, Component, DeepInferDeploymentStatus, Reason};
use crate::controller::act::Act;
use crate::controller::build;
use crate::controller::gates::checkpoint::decide::{
    claim_gate, judge_verify_job, running_job_gate, verified_message,
};
use crate::controller::gates::jobs::{self, foreign_job, job_state, JobState};
use crate::controller::gates::spec::references::hub_gate;
use crate::controller::gates::{Plan, Settings};
use crate::controller::observe::Observed;
use crate::controller::status::Gate;
use crate::controller::text::truncate;
use crate::controller::validated::ValidatedDeployment;

/// What the checkpoint stage found: its gate and, once verified, the checkpoint's facts.
pub type Found = (Gate, Option<CheckpointStatus>);

/// The checkpoint recorded for the spec's current source, if any.
fn recorded<'p>(
    did: &ValidatedDeployment,
    previous: Option<&'p DeepInferDeploymentStatus>,
) -> Option<&'p CheckpointStatus> {
    let key = build::checkpoint_key(&did.spec);
    previous
        .and_then(|p| p.checkpoint.as_ref())
        .filter(|c| c.source_key == key)
}

/// The verify Job whose pods must be read from the API server rather than the cache: it
/// finished, and the cache holds no summary of its pod (the verdict never rests on a view older
/// than the Job's completion).
pub fn verify_to_read(
    did: &ValidatedDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    observed: &Observed,
) -> Option<String> {
    let name = build::verify_job_name(did);
    (recorded(did, previous).is_none() && jobs::needs_fresh_pods(observed, &name, build::VERIFY))
        .then_some(name)
}

/// The checkpoint stage. `fresh`: the verify Job's pods as read from the API server, when
/// [`verify_to_read`] named it.
pub fn plan<'a>(
    did: &ValidatedDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    observed: &'a Observed,
    fresh: Option<&[Pod]>,
    settings: Settings<'_>,
) -> Plan<'a, Found> {
    if let Some(done) = recorded(did, previous) {
        return Plan::only((
            Gate::Passed(Reason::Verified, verified_message(done)),
            Some(done.clone()),
        ));
    }
    let claim = &did.claim;
    let ns = did.namespace.as_str();
    let phase = observed.claim_phase.phase().map(str::to_string);
    let hub = did.spec.model.source.hub.is_some();
    if let Some(gate) = claim_gate(ns, claim, phase.as_deref(), hub) {
        return Plan::only((gate, None));
    }
    // No fetch Job for an endpoint off the allow-list or with a token Secret that did not opt in.
    if let Some(gate) = hub_gate(
        ns,
        &did.spec,
        settings.allowed_hub_endpoints,
        &observed.referenced,
    ) {
        return Plan::only((gate, None));
    }
    let running = |job: &str, running: Gate, deadline: i64| {
        running_job_gate(
            job,
            &observed.pods_of_job(job),
            (claim, phase.as_deref()),
            Some(deadline),
            running,
        )
    };
    let key = build::checkpoint_key(&did.spec);
    let (deadlines, proxy) = (settings.deadlines, settings.hub_proxy);
    let create = |job| settings.create_job(job);
    if let Some(fetch) = build::fetch_job(did, settings.operator_image, deadlines, proxy) {
        let fetch_name = fetch.name_any();
        let fetching = Gate::Progressing(
            Reason::Fetching,
            format!("Job {fetch_name} is fetching the pinned revision into {claim}"),
        );
        if let Some(conflict) = foreign_job(observed, &fetch_name, &key) {
            return Plan::only((conflict, None));
        }
        match job_state(observed, &fetch_name, build::FETCH) {
            JobState::Missing => return Plan::with((fetching, None), vec![create(fetch)]),
            JobState::Running => {
                let gate = running(&fetch_name, fetching, deadlines.fetch_seconds);
                return Plan::only((gate, None));
            }
            JobState::Failed(message) => {
                let msg = format!(
                    "Job {fetch_name} failed to fetch the checkpoint: {}; fix the source (spec.model.source.hub) or the hub access, then delete the Job to retry",
                    message.as_deref().map_or("no message", |m| m.trim())
                );
                return Plan::only((
                    Gate::Failed(Reason::FetchFailed, truncate(&msg, 2000)),
                    None,
                ));
            }
            JobState::Succeeded(_) => {}
        }
    }
    let verify = build::verify_job(did, settings.operator_image, deadlines);
    let verify_name = verify.name_any();
    let progressing = Gate::Progressing(
        Reason::Verifying,
        format!("Job {verify_name} is verifying the checkpoint on {claim}"),
    );
    if let Some(conflict) = foreign_job(observed, &verify_name, &key) {
        return Plan::only((conflict, None));
    }
    let verify_pods = match fresh {
        Some(pods) => pods.iter().collect(),
        None => observed.pods_of_job(&verify_name),
    };
    let state = jobs::state_of(observed.job(&verify_name), &verify_pods, build::VERIFY);
    match state {
        JobState::Missing => Plan::with((progressing, None), vec![create(verify)]),
        JobState::Running => Plan::only((
            running(&verify_name, progressing, deadlines.verify_seconds),
            None,
        )),
        JobState::Succeeded(ref message) | JobState::Failed(ref message) => {
            Plan::only(judge_verify_job(
                &verify_name,
                key,
                matches!(state, JobState::Succeeded(_)),
                message.as_deref(),
                &jobs::containers_ended(&verify_pods),
            ))
        }
    }
}

/// Deletes of the fetch Jobs still running: a withdrawn licence stops the download too.
pub fn stop_fetching(observed: &Observed) -> Vec<Act<'_>> {
    observed
        .jobs
        .iter()
        .filter(|j| {
            Component::of(j.labels()) == Some(Component::Fetch)
                && matches!(
                    job_state(observed, &j.name_any(), build::FETCH),
                    JobState::Running
                )
        })
        .map(|job| {
            tracing::info!(job = %job.name_any(), "licence withdrawn: stopping the fetch Job");
            Act::delete(job)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::gates::fixture::{self, described};

    fn reason(gate: &Gate) -> &'static str {
        match gate {
            Gate::Progressing(r, _)
            | Gate::Failed(r, _)
            | Gate::Passed(r, _)
            | Gate::Held(r, _) => r.as_str(),
            Gate::NotReached => "NotReached",
        }
    }

    fn with_jobs(mut observed: Observed, jobs: Vec<k8s_openapi::api::batch::v1::Job>) -> Observed {
        observed.jobs = jobs;
        observed
    }

    #[test]
    fn a_recorded_checkpoint_of_the_same_source_is_final_and_writes_nothing() {
        let did = fixture::did();
        let previous = DeepInferDeploymentStatus {
            checkpoint: Some(CheckpointStatus {
                source_key: build::checkpoint_key(&did.spec),
                ..CheckpointStatus::default()
            }),
            ..DeepInferDeploymentStatus::default()
        };
        let observed = with_jobs(
            fixture::observed_bound(),
            vec![fixture::verify_job(&did, "succeeded")],
        );
        let plan = super::plan(&did, Some(&previous), &observed, None, fixture::settings());
        assert_eq!(reason(&plan.found.0), Reason::Verified);
        assert!(plan.acts.is_empty());
        assert_eq!(verify_to_read(&did, Some(&previous), &observed), None);
    }

    #[test]
    fn the_verify_job_is_created_once_and_judged_when_it_ends() {
        let did = fixture::did();
        let verify = build::verify_job_name(&did);
        // (verify Job as observed, reason of the gate, acts, whether its pods are read afresh)
        let cases = [
            (
                None,
                Reason::Verifying,
                vec![format!("create Job {verify}")],
                false,
            ),
            (Some("running"), Reason::Verifying, vec![], false),
            (Some("failed"), Reason::VerificationFailed, vec![], true),
        ];
        for (state, want, acts, read) in cases {
            let jobs = state
                .map(|s| fixture::verify_job(&did, s))
                .into_iter()
                .collect();
            let observed = with_jobs(fixture::observed_bound(), jobs);
            let plan = super::plan(&did, None, &observed, None, fixture::settings());
            assert_eq!(reason(&plan.found.0), want, "{state:?}: {:?}", plan.found.0);
            assert_eq!(described(&plan.acts), acts, "{state:?}");
            assert_eq!(
                verify_to_read(&did, None, &observed).is_some(),
                read,
                "{state:?}"
            );
            let ttl = fixture::settings().retention.finished_job_ttl_seconds;
            assert_eq!(
                fixture::created_job_ttls(&plan.acts),
                vec![Some(ttl); acts.len()],
                "{state:?}: created with its time to live"
            );
        }
    }

    #[test]
    fn a_hub_source_fetches_before_it_verifies() {
        let did = fixture::valid(fixture::with_hub(fixture::raw()));
        let fetch = build::fetch_job_name(&did);
        let verify = build::verify_job_name(&did);
        let pending = fixture::observed_pending_claim();
        let plan = super::plan(&did, None, &pending, None, fixture::settings());
        assert_eq!(
            reason(&plan.found.0),
            Reason::Fetching,
            "{:?}",
            plan.found.0
        );
        assert_eq!(described(&plan.acts), [format!("create Job {fetch}")]);
        let fetched = with_jobs(
            fixture::observed_bound(),
            vec![fixture::fetch_job(&did, "succeeded")],
        );
        let plan = super::plan(&did, None, &fetched, None, fixture::settings());
        assert_eq!(described(&plan.acts), [format!("create Job {verify}")]);
        let failed = with_jobs(
            fixture::observed_bound(),
            vec![fixture::fetch_job(&did, "failed")],
        );
        let plan = super::plan(&did, None, &failed, None, fixture::settings());
        assert_eq!(reason(&plan.found.0), Reason::FetchFailed);
        assert!(plan.acts.is_empty());
        // An endpoint off the operator's allow-list gets no fetch Job.
        let settings = Settings {
            allowed_hub_endpoints: &[],
            ..fixture::settings()
        };
        let plan = super::plan(&did, None, &pending, None, settings);
        assert_eq!(reason(&plan.found.0), Reason::HubEndpointNotAllowed);
        assert!(plan.acts.is_empty());
    }

    #[test]
    fn an_unbound_claim_of_a_volume_source_waits_and_writes_nothing() {
        let did = fixture::did();
        let pending = fixture::observed_pending_claim();
        let plan = super::plan(&did, None, &pending, None, fixture::settings());
        assert_eq!(
            reason(&plan.found.0),
            Reason::ClaimNotBound,
            "{:?}",
            plan.found.0
        );
        assert!(plan.acts.is_empty());
    }

    #[test]
    fn a_job_of_that_name_made_for_another_configuration_is_a_conflict_not_a_verdict() {
        let did = fixture::did();
        let mut job = fixture::verify_job(&did, "succeeded");
        job.annotations_mut()
            .insert(build::JUDGES_ANNOTATION.into(), "another-key".into());
        let observed = with_jobs(fixture::observed_bound(), vec![job]);
        let plan = super::plan(&did, None, &observed, None, fixture::settings());
        assert_eq!(
            reason(&plan.found.0),
            Reason::NameConflict,
            "{:?}",
            plan.found.0
        );
        assert!(plan.acts.is_empty());
    }

    #[test]
    fn only_running_fetch_jobs_are_stopped() {
        let did = fixture::valid(fixture::with_hub(fixture::raw()));
        let fetch = build::fetch_job_name(&did);
        let running = with_jobs(
            Observed::default(),
            vec![fixture::fetch_job(&did, "running")],
        );
        assert_eq!(
            described(&stop_fetching(&running)),
            [format!("delete Job {fetch}")]
        );
        let done = with_jobs(
            Observed::default(),
            vec![fixture::fetch_job(&did, "succeeded")],
        );
        assert!(stop_fetching(&done).is_empty());
    }
}
