//! Housekeeping at the end of a pass: a finished Job created without `ttlSecondsAfterFinished`
//! (a time to live below [`retention::TTL_AT_CREATION_MIN`], or a Job of an earlier release) gets
//! it once its verdict is in status, so the TTL controller removes it and its pods. The Jobs
//! whose verdict is not in status yet keep none: the current checkpoint Jobs until the
//! checkpoint is recorded, every acceptance Job until the acceptance stage says which run is
//! judged. The pods of a finished Job whose verdict is in status and that has its time to live
//! leave the pod cache: no pass reads them again.

pub mod retention;

use kube::ResourceExt;

use crate::api::{Component, DeepInferDeploymentStatus};
use crate::controller::act::Act;
use crate::controller::build;
use crate::controller::observe::Observed;
use crate::controller::validated::ValidatedDeployment;

/// What the acceptance gate said of the target's run, for housekeeping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RunLeader {
    /// The gate did not plan: every acceptance Job keeps its verdict's place.
    #[default]
    NotPlanned,
    /// The run's verdict is in status: no Job of the run is read again.
    Judged,
    /// The run's leader Job, read until its verdict is in status.
    Unjudged(String),
}

/// The Jobs whose verdict is not in status at the start of the pass, with what the acceptance
/// gate said of the target's run (`leader`).
pub fn unjudged_jobs(
    did: &ValidatedDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    observed: &Observed,
    leader: RunLeader,
) -> Vec<String> {
    let mut jobs = Vec::new();
    if previous
        .and_then(|p| p.checkpoint.as_ref())
        .is_none_or(|c| c.source_key != build::checkpoint_key(&did.spec))
    {
        jobs.extend([build::fetch_job_name(did), build::verify_job_name(did)]);
    }
    match leader {
        RunLeader::Unjudged(job) => jobs.push(job),
        RunLeader::Judged => {}
        RunLeader::NotPlanned => jobs.extend(
            observed
                .jobs
                .iter()
                .filter(|j| Component::of(j.labels()) == Some(Component::Acceptance))
                .map(ResourceExt::name_any),
        ),
    }
    jobs
}

/// Housekeeping of the deployment's finished Jobs but `keep`: a TTL for those without one; the
/// pods of those with one leave the pod cache, and the pods of every other Job of the deployment
/// are cached (again) as their events come.
pub fn tidy<'o>(observed: &Observed, keep: &[String], ttl: i32) -> Vec<Act<'o>> {
    let mut acts: Vec<Act<'o>> = retention::jobs_to_expire(&observed.jobs, keep)
        .into_iter()
        .map(|job| Act::Expire {
            job: job.to_string(),
            ttl,
        })
        .collect();
    acts.push(uncache(observed, keep));
    acts
}

/// [`Act::UncachePods`] of the pods of the deployment's Jobs that no pass reads again.
pub fn uncache<'o>(observed: &Observed, keep: &[String]) -> Act<'o> {
    let done: Vec<String> = retention::jobs_read_out(&observed.jobs, keep)
        .into_iter()
        .map(str::to_string)
        .collect();
    let read = observed
        .jobs
        .iter()
        .filter_map(|j| j.metadata.uid.clone())
        .filter(|uid| !done.contains(uid))
        .collect();
    Act::UncachePods { done, read }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pods_of_jobs_whose_verdict_is_recorded_leave_the_cache_and_those_still_read_return() {
        let job = |name: &str, condition: Option<&str>, ttl: Option<i32>| {
            serde_json::from_value::<k8s_openapi::api::batch::v1::Job>(serde_json::json!({
                "metadata": {"name": name, "uid": format!("uid-{name}")},
                "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
                "status": {"conditions": condition.map(|c| vec![serde_json::json!({"type": c, "status": "True"})])},
            }))
            .expect("job")
        };
        let observed = Observed {
            jobs: vec![
                job("verify", Some("Complete"), Some(86_400)),
                job("accept-0", Some("Complete"), Some(86_400)),
                job("accept-old-0", Some("Failed"), None),
                job("accept-new-0", None, Some(86_400)),
            ],
            ..Observed::default()
        };
        let acts = tidy(&observed, &["accept-0".to_string()], 60);
        let described: Vec<String> = acts.iter().map(Act::describe).collect();
        assert_eq!(
            described,
            [
                "expire Job accept-old-0 after 60 s",
                "leave the pods of 1 Jobs out of the cache, cache those of 3"
            ]
        );
        let Some(Act::UncachePods { done, read }) = acts.last() else {
            panic!("the last act uncaches pods");
        };
        assert_eq!(done, &["uid-verify"], "judged, finished, expiring");
        assert_eq!(
            read,
            &["uid-accept-0", "uid-accept-old-0", "uid-accept-new-0"],
            "its verdict still read; no time to live yet; running"
        );
    }
}
