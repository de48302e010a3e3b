//! Housekeeping at the end of a pass: a finished Job created without `ttlSecondsAfterFinished`
//! (a time to live below [`retention::TTL_AT_CREATION_MIN`], or a Job of an earlier release) gets
//! it once its verdict is in status, so the TTL controller removes it and its pods. The Jobs
//! whose verdict is not in status yet keep none: the current checkpoint Jobs until the
//! checkpoint is recorded, every acceptance Job until the acceptance stage says which run is
//! judged.

use kube::ResourceExt;

use super::super::act::Act;
use super::super::build;
use super::super::decide::retention;
use super::super::observe::Observed;
use super::super::validated::ValidatedDeployment;
use crate::api::{Component, DeepInferDeploymentStatus};

/// The Jobs whose verdict is not in status at the start of the pass. `judged`: the acceptance
/// stage ran and named the run it reads (`Some(None)`: no run of its is unjudged); `None`: it
/// did not run, so every acceptance Job is kept.
pub fn unjudged_jobs(
    did: &ValidatedDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    observed: &Observed,
    judged: Option<Option<String>>,
) -> Vec<String> {
    let mut jobs = Vec::new();
    if previous
        .and_then(|p| p.checkpoint.as_ref())
        .is_none_or(|c| c.source_key != build::checkpoint_key(&did.spec))
    {
        jobs.extend([build::fetch_job_name(did), build::verify_job_name(did)]);
    }
    match judged {
        Some(leader) => jobs.extend(leader),
        None => jobs.extend(
            observed
                .jobs
                .iter()
                .filter(|j| Component::of(j.labels()) == Some(Component::Acceptance))
                .map(ResourceExt::name_any),
        ),
    }
    jobs
}

/// TTLs for the finished Jobs but `keep`.
pub fn expire<'o>(observed: &Observed, keep: &[String], ttl: i32) -> Vec<Act<'o>> {
    retention::jobs_to_expire(&observed.jobs, keep)
        .into_iter()
        .map(|job| Act::Expire {
            job: job.to_string(),
            ttl,
        })
        .collect()
}
