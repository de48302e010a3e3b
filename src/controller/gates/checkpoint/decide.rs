//! The checkpoint gate's verdict from the verifier's report.

use crate::api::{CheckpointStatus, Reason};
use crate::checkpoint::VerifyReport;
use crate::controller::status::Gate;

/// The checkpoint gate while its claim cannot be used, or `None` when it can. `phase` is what
/// observe found (`None`: no such claim). A `volume` claim must be Bound: an unbound claim has no
/// volume, so it holds no checkpoint. A `hub` claim may wait `Pending` for its first consumer
/// (a `WaitForFirstConsumer` StorageClass binds it when the fetch Job's pod is scheduled).
pub fn claim_gate(ns: &str, claim: &str, phase: Option<&str>, hub: bool) -> Option<Gate> {
    let field = if hub {
        "spec.model.source.hub.claimName"
    } else {
        "spec.model.source.volume.claimName"
    };
    match phase {
        None => Some(Gate::Failed(
            Reason::MissingDependency,
            format!(
                "PersistentVolumeClaim {ns}/{claim} ({field}) does not exist; create it (it must hold or receive the checkpoint) — the operator checks again every 15 s"
            ),
        )),
        Some("Bound") => None,
        Some("Pending") if hub => None,
        Some(phase) => {
            let phase = if phase.is_empty() { "without a phase" } else { phase };
            Some(Gate::Failed(
                Reason::ClaimNotBound,
                format!(
                    "PersistentVolumeClaim {ns}/{claim} ({field}) is {phase}, not Bound, so no volume backs it{}; bind it to the volume that holds the checkpoint (kubectl describe pvc {claim} says why it waits) — the operator checks again every 15 s",
                    if hub { "" } else { " and it cannot hold the checkpoint" }
                ),
            ))
        }
    }
}

/// The gate of a fetch or verify Job that has not finished: Progressing (`running`), unless
/// one of its pods cannot make progress without a person (image, configuration, scheduling);
/// then that reason, with the kubelet's or scheduler's message. A pod that cannot be scheduled
/// while the claim is still `Pending` is the claim's doing.
pub fn running_job_gate(
    job: &str,
    pods: &[&k8s_openapi::api::core::v1::Pod],
    claim: (&str, Option<&str>),
    deadline_seconds: Option<i64>,
    running: Gate,
) -> Gate {
    let Some(trouble) = pods
        .iter()
        .find_map(|p| crate::controller::gates::jobs::pod_trouble(p))
    else {
        return running;
    };
    let (claim, phase) = claim;
    let reason = if trouble.reason == Reason::PodUnschedulable && phase == Some("Pending") {
        Reason::ClaimNotBound
    } else {
        trouble.reason
    };
    let message = format!(
        "Job {job} cannot make progress: {}{}; fix it and the Job carries on{} — see the runbook entry {reason}",
        trouble.message,
        if reason == Reason::ClaimNotBound {
            format!(" (PersistentVolumeClaim {claim} is Pending, not Bound)")
        } else {
            String::new()
        },
        deadline_seconds.map_or(String::new(), |s| format!(
            ", else it fails at its deadline ({s} s after it started)"
        ))
    );
    Gate::Failed(reason, crate::controller::text::truncate(&message, 2000))
}

pub fn verified_message(done: &CheckpointStatus) -> String {
    format!(
        "checkpoint revision {} verified: {} files, {} bytes, licence {}",
        done.revision,
        done.files,
        done.bytes,
        done.license.as_deref().unwrap_or("unknown")
    )
}

/// The checkpoint gate's verdict on a verify Job that ended, from its termination `message`
/// (the verifier's report) and how its containers ended (`ended`). A report that finds the
/// checkpoint sound counts only from a Job that `succeeded`: a verifier killed after it wrote its
/// report (by the OOM killer, by a node) did not finish, so its report is not trusted.
pub fn judge_verify_job(
    job: &str,
    key: String,
    succeeded: bool,
    message: Option<&str>,
    ended: &str,
) -> (Gate, Option<CheckpointStatus>) {
    let report: Option<VerifyReport> = message.and_then(|m| serde_json::from_str(m.trim()).ok());
    match report {
        Some(r) if r.ok && !succeeded => {
            let msg = format!(
                "Job {job} failed although its report found the checkpoint sound{ended}; a verification that did not end cleanly is not trusted: look at the Job's pod, then delete the Job to verify again"
            );
            (
                Gate::Failed(
                    Reason::VerificationFailed,
                    crate::controller::text::truncate(&msg, 2000),
                ),
                None,
            )
        }
        report => judge_verify_report(job, key, message, report, ended),
    }
}

/// The checkpoint gate's verdict from the verifier's report (the shared
/// [`crate::checkpoint::VerifyReport`]).
/// `ended` says how the Job's containers ended (see [`crate::controller::gates::jobs::containers_ended`]), for a
/// Job that left no readable report.
pub fn judge_verify_report(
    job: &str,
    key: String,
    message: Option<&str>,
    report: Option<VerifyReport>,
    ended: &str,
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
                Gate::Passed(Reason::Verified, verified_message(&status)),
                Some(status),
            )
        }
        Some(r) => {
            let reason = if r.only_license_mismatch() {
                Reason::CheckpointLicenseMismatch
            } else {
                Reason::VerificationFailed
            };
            let msg = format!(
                "Job {job} found problems in the checkpoint: {}; fix the checkpoint or the spec, then re-apply",
                r.problems.join("; ")
            );
            (
                Gate::Failed(reason, crate::controller::text::truncate(&msg, 2000)),
                None,
            )
        }
        None => {
            let msg = format!(
                "Job {job} ended without a readable report ({}{ended}); look at the Job's pod",
                message.map_or("no termination message", str::trim)
            );
            (
                Gate::Failed(
                    Reason::VerificationFailed,
                    crate::controller::text::truncate(&msg, 2000),
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
            judge_verify_report("v", "k1".into(), None, Some(report(true, vec![], &[])), "");
        assert!(
            matches!(&gate, Gate::Passed(r, m) if *r == Reason::Verified && m.contains("4 files, 1024 bytes, licence mit"))
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
        let (gate, status) = judge_verify_report("v", "k".into(), None, Some(mismatch), "");
        assert!(matches!(&gate, Gate::Failed(r, _) if *r == Reason::CheckpointLicenseMismatch));
        assert!(status.is_none());
        // A problem sentence that merely mentions a licence is not a licence mismatch.
        let damaged = report(
            false,
            vec![ProblemKind::Files],
            &["LICENSE: cannot be read"],
        );
        let (gate, _) = judge_verify_report("v", "k".into(), None, Some(damaged), "");
        assert!(
            matches!(&gate, Gate::Failed(r, m) if *r == Reason::VerificationFailed && m.contains("LICENSE: cannot be read"))
        );
        let both = report(
            false,
            vec![ProblemKind::Files, ProblemKind::LicenseMismatch],
            &["a", "b"],
        );
        let (gate, _) = judge_verify_report("v", "k".into(), None, Some(both), "");
        assert!(matches!(&gate, Gate::Failed(r, _) if *r == Reason::VerificationFailed));
    }

    #[test]
    fn a_claim_must_exist_and_a_volume_claim_must_be_bound() {
        let failed = |g: Option<Gate>| match g {
            Some(Gate::Failed(r, m)) => (r, m),
            other => panic!("not failed: {other:?}"),
        };
        let (r, m) = failed(claim_gate("ns", "ckpt", None, false));
        assert_eq!(r, Reason::MissingDependency);
        assert!(m.contains("ns/ckpt") && m.contains("spec.model.source.volume.claimName"));
        let (r, m) = failed(claim_gate("ns", "ckpt", Some("Pending"), false));
        assert_eq!(r, Reason::ClaimNotBound);
        assert!(m.contains("is Pending, not Bound"), "{m}");
        let (r, _) = failed(claim_gate("ns", "ckpt", Some("Lost"), true));
        assert_eq!(r, Reason::ClaimNotBound);
        assert_eq!(claim_gate("ns", "ckpt", Some("Bound"), false), None);
        assert_eq!(
            claim_gate("ns", "ckpt", Some("Pending"), true),
            None,
            "a hub claim may wait for the fetch Job's pod to bind it"
        );
    }

    #[test]
    fn a_stuck_job_pod_fails_the_gate_with_its_own_reason() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "f-1"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "pod has unbound immediate PersistentVolumeClaims"}]}
        }))
        .expect("pod");
        let running = Gate::Progressing(Reason::Fetching, "fetching".into());
        let gate = running_job_gate(
            "f",
            &[&pod],
            ("ckpt", Some("Pending")),
            Some(60),
            running.clone(),
        );
        assert!(
            matches!(&gate, Gate::Failed(r, m) if *r == Reason::ClaimNotBound && m.contains("ckpt is Pending") && m.contains("60 s")),
            "{gate:?}"
        );
        let gate = running_job_gate("f", &[&pod], ("ckpt", Some("Bound")), None, running.clone());
        assert!(matches!(&gate, Gate::Failed(r, _) if *r == Reason::PodUnschedulable));
        assert_eq!(
            running_job_gate("f", &[], ("ckpt", Some("Bound")), None, running.clone()),
            running
        );
    }

    #[test]
    fn a_sound_report_from_a_verify_job_that_failed_is_not_trusted() {
        // The verifier wrote its report, then was killed (a kill fault, the OOM killer) before
        // it ended: the Job failed, and the report must not verify the checkpoint.
        let sound = serde_json::to_string(&report(true, vec![], &[])).expect("json");
        let ended = "; container verify: exit code 137";
        let (gate, status) =
            judge_verify_job("flash-verify-1", "k".into(), false, Some(&sound), ended);
        assert!(
            matches!(&gate, Gate::Failed(r, m) if *r == Reason::VerificationFailed
                && m.contains("flash-verify-1") && m.contains("exit code 137")),
            "{gate:?}"
        );
        assert!(status.is_none());
        let (gate, status) = judge_verify_job("flash-verify-1", "k".into(), true, Some(&sound), "");
        assert!(matches!(&gate, Gate::Passed(r, _) if *r == Reason::Verified));
        assert_eq!(status.expect("recorded").source_key, "k");
        // A report of problems is reported as such whether or not the Job failed.
        let damaged =
            serde_json::to_string(&report(false, vec![ProblemKind::Files], &["x: missing"]))
                .expect("json");
        let (gate, _) = judge_verify_job("v", "k".into(), false, Some(&damaged), ended);
        assert!(matches!(&gate, Gate::Failed(_, m) if m.contains("x: missing")));
    }

    #[test]
    fn an_unreadable_report_fails_naming_the_job_and_what_it_said() {
        let (gate, _) =
            judge_verify_report("flash-verify-1", "k".into(), Some("segfault"), None, "");
        assert!(
            matches!(&gate, Gate::Failed(_, m) if m.contains("flash-verify-1") && m.contains("segfault"))
        );
    }

    #[test]
    fn a_verifier_killed_from_outside_says_how_it_ended() {
        use k8s_openapi::api::core::v1::{Pod, PodStatus};
        let pod =
            Pod {
                status: Some(PodStatus {
                    container_statuses: Some(vec![
                        crate::controller::gates::jobs::ended_container("verify", 137, "OOMKilled"),
                    ]),
                    ..PodStatus::default()
                }),
                ..Pod::default()
            };
        let ended = crate::controller::gates::jobs::containers_ended(&[&pod]);
        let (gate, status) = judge_verify_report(
            "flash-verify-1",
            "k".into(),
            Some("BackoffLimitExceeded: Job has reached the specified backoff limit"),
            None,
            &ended,
        );
        assert!(status.is_none(), "no verdict of verified");
        assert!(
            matches!(&gate, Gate::Failed(r, m) if *r == Reason::VerificationFailed
                && m.contains("container verify: OOMKilled, exit code 137")),
            "{gate:?}"
        );
    }
}
