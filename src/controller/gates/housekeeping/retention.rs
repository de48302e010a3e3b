//! What the operator stops keeping: evidence ConfigMaps beyond the newest few per resource, and
//! finished Jobs (they carry `ttlSecondsAfterFinished`, so Kubernetes' TTL controller removes
//! them with their pods): a Job is created with it when the time to live is long enough for its
//! verdict to be read first ([`TTL_AT_CREATION_MIN`]), else given it once its verdict is in
//! status.

use k8s_openapi::api::batch::v1::Job;

use crate::controller::caches::finished;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Default of `--keep-evidence`: evidence ConfigMaps kept per resource.
pub const DEFAULT_KEEP_EVIDENCE: u16 = 3;
/// Default of `--finished-job-ttl-seconds`: how long a finished Job stays for its logs.
pub const DEFAULT_FINISHED_JOB_TTL_SECONDS: i32 = 24 * 3600;

/// The shortest time to live a Job is created with: a pass reads a finished Job's verdict within
/// seconds, so a Job that expires an hour after it finished has been read unless the operator
/// was down all that hour (then the run is made again). A shorter time to live is given to a
/// Job only once its verdict is in status, one patch each.
pub const TTL_AT_CREATION_MIN: i32 = 3600;

/// Retention settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Evidence ConfigMaps kept per resource (the newest), at least 1.
    pub keep_evidence: u16,
    /// `ttlSecondsAfterFinished` of finished Jobs.
    pub finished_job_ttl_seconds: i32,
}

impl Retention {
    /// The `ttlSecondsAfterFinished` a Job is created with: none below [`TTL_AT_CREATION_MIN`].
    pub fn ttl_at_creation(&self) -> Option<i32> {
        (self.finished_job_ttl_seconds >= TTL_AT_CREATION_MIN)
            .then_some(self.finished_job_ttl_seconds)
    }
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep_evidence: DEFAULT_KEEP_EVIDENCE,
            finished_job_ttl_seconds: DEFAULT_FINISHED_JOB_TTL_SECONDS,
        }
    }
}

/// Names of the evidence ConfigMaps to delete: all but the `keep` newest (by creation, then
/// name), never one named in `pinned` (the evidence the status points at).
pub fn evidence_to_delete(evidence: &[ObjectMeta], keep: usize, pinned: &[&str]) -> Vec<String> {
    let mut by_age: Vec<&ObjectMeta> = evidence
        .iter()
        .filter(|m| m.deletion_timestamp.is_none())
        .collect();
    // Newest first.
    by_age.sort_by(|a, b| {
        let key = |m: &ObjectMeta| (m.creation_timestamp.clone().map(|t| t.0), m.name.clone());
        key(b).cmp(&key(a))
    });
    by_age
        .into_iter()
        .skip(keep.max(1))
        .filter_map(|m| m.name.clone())
        .filter(|n| !pinned.contains(&n.as_str()))
        .collect()
}

/// The finished Jobs whose verdict is no longer read from them: all but `keep` (Jobs whose
/// verdict is not in status yet).
fn done_with<'a>(jobs: &'a [Job], keep: &'a [String]) -> impl Iterator<Item = &'a Job> {
    jobs.iter().filter(|j| finished(j)).filter(|j| {
        !keep
            .iter()
            .any(|k| Some(k.as_str()) == j.metadata.name.as_deref())
    })
}

/// Whether a Job carries `ttlSecondsAfterFinished`.
fn has_ttl(job: &Job) -> bool {
    job.spec
        .as_ref()
        .is_some_and(|s| s.ttl_seconds_after_finished.is_some())
}

/// Names of the finished Jobs that get a TTL now: those without one, except `keep` (Jobs whose
/// verdict is not in status yet and is still read from them).
pub fn jobs_to_expire<'a>(jobs: &'a [Job], keep: &'a [String]) -> Vec<&'a str> {
    done_with(jobs, keep)
        .filter(|j| !has_ttl(j))
        .filter_map(|j| j.metadata.name.as_deref())
        .collect()
}

/// Uids of the finished Jobs whose pods no pass reads again: their verdict is in status (not in
/// `keep`) and they carry a TTL, so the TTL controller removes them with their pods.
pub fn jobs_read_out<'a>(jobs: &'a [Job], keep: &'a [String]) -> Vec<&'a str> {
    done_with(jobs, keep)
        .filter(|j| has_ttl(j))
        .filter_map(|j| j.metadata.uid.as_deref())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(name: &str, created: &str) -> ObjectMeta {
        serde_json::from_value(json!({"name": name, "creationTimestamp": created})).expect("meta")
    }

    #[test]
    fn the_newest_evidence_is_kept_and_the_pinned_one_whatever_its_age() {
        let items = [
            meta("e1", "2026-01-01T00:00:00Z"),
            meta("e4", "2026-01-04T00:00:00Z"),
            meta("e2", "2026-01-02T00:00:00Z"),
            meta("e5", "2026-01-05T00:00:00Z"),
            meta("e3", "2026-01-03T00:00:00Z"),
        ];
        assert_eq!(evidence_to_delete(&items, 3, &[]), ["e2", "e1"]);
        assert_eq!(evidence_to_delete(&items, 3, &["e1"]), ["e2"]);
        assert_eq!(
            evidence_to_delete(&items, 0, &[]).len(),
            4,
            "keeps at least one"
        );
        assert!(evidence_to_delete(&items, 5, &[]).is_empty());
    }

    #[test]
    fn a_job_is_created_with_its_time_to_live_only_when_its_verdict_is_read_first() {
        let with = |ttl| Retention {
            finished_job_ttl_seconds: ttl,
            ..Retention::default()
        };
        assert_eq!(
            Retention::default().ttl_at_creation(),
            Some(DEFAULT_FINISHED_JOB_TTL_SECONDS)
        );
        assert_eq!(with(TTL_AT_CREATION_MIN).ttl_at_creation(), Some(3600));
        assert_eq!(with(3).ttl_at_creation(), None, "given after its verdict");
        assert_eq!(with(0).ttl_at_creation(), None);
    }

    #[test]
    fn only_finished_jobs_whose_verdict_is_in_status_expire() {
        let job = |name: &str, condition: Option<&str>, ttl: Option<i32>| -> Job {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
                "status": {"conditions": condition.map(|c| vec![json!({"type": c, "status": "True"})])}
            }))
            .expect("job")
        };
        let jobs = [
            job("done", Some("Complete"), None),
            job("failed", Some("Failed"), None),
            job("running", None, None),
            job("expiring", Some("Complete"), Some(60)),
            job("unrecorded", Some("Failed"), None),
        ];
        assert_eq!(
            jobs_to_expire(&jobs, &["unrecorded".to_string()]),
            ["done", "failed"]
        );
    }

    #[test]
    fn the_pods_of_a_finished_job_are_read_out_once_its_verdict_is_in_status_and_it_expires() {
        let job = |name: &str, condition: Option<&str>, ttl: Option<i32>| -> Job {
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": format!("uid-{name}")},
                "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
                "status": {"conditions": condition.map(|c| vec![json!({"type": c, "status": "True"})])}
            }))
            .expect("job")
        };
        let jobs = [
            job("passed", Some("Complete"), Some(86_400)),
            job("failed", Some("Failed"), Some(86_400)),
            job("running", None, Some(86_400)),
            job("unexpiring", Some("Complete"), None),
            job("unrecorded", Some("Complete"), Some(86_400)),
        ];
        assert_eq!(
            jobs_read_out(&jobs, &["unrecorded".to_string()]),
            ["uid-passed", "uid-failed"],
            "not a Job still running, nor one whose pods the TTL controller would not remove, nor one whose verdict is still read"
        );
    }
}
