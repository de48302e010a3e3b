//! The checkpoint gate's verdict from the verifier's report.

use crate::api::{reasons, CheckpointStatus};
use crate::checkpoint::VerifyReport;
use crate::controller::status::Gate;

pub fn verified_message(done: &CheckpointStatus) -> String {
    format!(
        "checkpoint revision {} verified: {} files, {} bytes, licence {}",
        done.revision,
        done.files,
        done.bytes,
        done.license.as_deref().unwrap_or("unknown")
    )
}

/// The checkpoint gate's verdict from the verifier's report (the shared
/// [`crate::checkpoint::VerifyReport`]).
pub fn judge_verify_report(
    job: &str,
    key: String,
    message: Option<&str>,
    report: Option<VerifyReport>,
) -> (Gate, Option<CheckpointStatus>) {
    match report {
        Some(r) if r.ok => {
            let status = CheckpointStatus {
                revision: if r.revision.is_empty() {
                    crate::checkpoint::VOLUME_REVISION.into()
                } else {
                    r.revision
                },
                files: i64::try_from(r.files).unwrap_or(i64::MAX),
                bytes: i64::try_from(r.bytes).unwrap_or(i64::MAX),
                license: r.license,
                source_key: key,
            };
            (
                Gate::Passed(reasons::VERIFIED, verified_message(&status)),
                Some(status),
            )
        }
        Some(r) => {
            let reason = if r.only_license_mismatch() {
                reasons::CHECKPOINT_LICENSE_MISMATCH
            } else {
                reasons::VERIFICATION_FAILED
            };
            let msg = format!(
                "Job {job} found problems in the checkpoint: {}; fix the checkpoint or the spec, then re-apply",
                r.problems.join("; ")
            );
            (
                Gate::Failed(reason, crate::controller::truncate(&msg, 2000)),
                None,
            )
        }
        None => {
            let msg = format!(
                "Job {job} ended without a readable report ({}); look at the Job's pod",
                message.map_or("no termination message", str::trim)
            );
            (
                Gate::Failed(
                    reasons::VERIFICATION_FAILED,
                    crate::controller::truncate(&msg, 2000),
                ),
                None,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::ProblemKind;

    fn report(ok: bool, kinds: Vec<ProblemKind>, problems: &[&str]) -> VerifyReport {
        VerifyReport {
            ok,
            revision: "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d".into(),
            files: 4,
            bytes: 1024,
            license: Some("mit".into()),
            problems: problems.iter().map(|p| (*p).to_string()).collect(),
            kinds,
        }
    }

    #[test]
    fn a_sound_report_records_the_checkpoint_under_its_key() {
        let (gate, status) =
            judge_verify_report("v", "k1".into(), None, Some(report(true, vec![], &[])));
        assert!(
            matches!(&gate, Gate::Passed(r, m) if *r == reasons::VERIFIED && m.contains("4 files, 1024 bytes, licence mit"))
        );
        let status = status.expect("recorded");
        assert_eq!(status.source_key, "k1");
        assert_eq!(status.files, 4);
    }

    #[test]
    fn only_a_licence_mismatch_is_reported_as_one_and_other_problems_as_verification_failures() {
        let mismatch = report(
            false,
            vec![ProblemKind::LicenseMismatch],
            &["README.md declares licence `apache-2.0`"],
        );
        let (gate, status) = judge_verify_report("v", "k".into(), None, Some(mismatch));
        assert!(matches!(&gate, Gate::Failed(r, _) if *r == reasons::CHECKPOINT_LICENSE_MISMATCH));
        assert!(status.is_none());
        // A problem sentence that merely mentions a licence is not a licence mismatch.
        let damaged = report(
            false,
            vec![ProblemKind::Files],
            &["LICENSE: cannot be read"],
        );
        let (gate, _) = judge_verify_report("v", "k".into(), None, Some(damaged));
        assert!(
            matches!(&gate, Gate::Failed(r, m) if *r == reasons::VERIFICATION_FAILED && m.contains("LICENSE: cannot be read"))
        );
        let both = report(
            false,
            vec![ProblemKind::Files, ProblemKind::LicenseMismatch],
            &["a", "b"],
        );
        let (gate, _) = judge_verify_report("v", "k".into(), None, Some(both));
        assert!(matches!(&gate, Gate::Failed(r, _) if *r == reasons::VERIFICATION_FAILED));
    }

    #[test]
    fn an_unreadable_report_fails_naming_the_job_and_what_it_said() {
        let (gate, _) = judge_verify_report("flash-verify-1", "k".into(), Some("segfault"), None);
        assert!(
            matches!(&gate, Gate::Failed(_, m) if m.contains("flash-verify-1") && m.contains("segfault"))
        );
    }
}
