//! The kstatus reading of a `DeepInferDeployment`: what Flux, `kubectl wait`, Helm and other
//! kstatus-based tools conclude from its status. `deploy/argocd/health.lua` applies the same
//! rules for Argo CD.
//!
//! In order: deleting → Terminating; no status, or `status.observedGeneration` behind
//! `metadata.generation` → InProgress (the status describes an older spec); `Stalled=True` →
//! Failed; `Reconciling=True` → InProgress; `Ready=True` for this generation → Current;
//! otherwise InProgress.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;

use super::{conditions, DeepInferDeployment, DeepInferDeploymentStatus};

/// A kstatus status (the subset a `DeepInferDeployment` can be in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The spec is being worked towards.
    InProgress,
    /// Progress needs a change: `Stalled=True`.
    Failed,
    /// Ready for the current generation.
    Current,
    /// Being deleted.
    Terminating,
}

impl Status {
    /// The name kstatus prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "InProgress",
            Self::Failed => "Failed",
            Self::Current => "Current",
            Self::Terminating => "Terminating",
        }
    }
}

/// A status with the message that explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The kstatus status.
    pub status: Status,
    /// Why, taken from the deciding condition where there is one.
    pub message: String,
}

/// The kstatus status of a resource.
pub fn compute(did: &DeepInferDeployment) -> Verdict {
    let meta = did.meta();
    compute_parts(
        meta.generation,
        meta.deletion_timestamp.is_some(),
        did.status.as_ref(),
    )
}

/// The kstatus status from the parts it depends on.
pub fn compute_parts(
    generation: Option<i64>,
    deleting: bool,
    status: Option<&DeepInferDeploymentStatus>,
) -> Verdict {
    let result = |status, message: String| Verdict { status, message };
    if deleting {
        return result(Status::Terminating, "the resource is being deleted".into());
    }
    let Some(status) = status else {
        return result(
            Status::InProgress,
            "the operator has not reported a status yet".into(),
        );
    };
    let Some(observed) = status.observed_generation else {
        return result(
            Status::InProgress,
            "the status has no observedGeneration yet".into(),
        );
    };
    if let Some(generation) = generation.filter(|g| *g != observed) {
        return result(
            Status::InProgress,
            format!("the operator has observed generation {observed}, not yet {generation}"),
        );
    }
    let find = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    let is_true = |c: &&Condition| c.status == "True";
    if let Some(stalled) = find(conditions::STALLED).filter(is_true) {
        return result(Status::Failed, describe(stalled));
    }
    if let Some(reconciling) = find(conditions::RECONCILING).filter(is_true) {
        return result(Status::InProgress, describe(reconciling));
    }
    match find(conditions::READY) {
        // A condition written for an older generation says nothing about this one.
        Some(ready)
            if is_true(&ready)
                && ready
                    .observed_generation
                    .is_none_or(|g| generation.is_none_or(|want| g == want)) =>
        {
            result(Status::Current, describe(ready))
        }
        Some(ready) => result(Status::InProgress, describe(ready)),
        None => result(
            Status::InProgress,
            "the status has no Ready condition yet".into(),
        ),
    }
}

/// `<Reason>: <message>`, or whichever of the two is present.
fn describe(c: &Condition) -> String {
    match (c.reason.is_empty(), c.message.is_empty()) {
        (false, false) => format!("{}: {}", c.reason, c.message),
        (false, true) => c.reason.clone(),
        (true, false) => c.message.clone(),
        (true, true) => format!("{}={}", c.type_, c.status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Phase;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cond(type_: &str, status: &str, reason: &str, generation: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{type_} is {status}"),
            observed_generation: Some(generation),
            last_transition_time: Time("2026-01-01T00:00:00Z".parse().expect("time")),
        }
    }

    /// A status for `generation` with Ready, Reconciling and Stalled as given.
    fn status(
        generation: i64,
        ready: &str,
        reconciling: &str,
        stalled: &str,
    ) -> DeepInferDeploymentStatus {
        DeepInferDeploymentStatus {
            observed_generation: Some(generation),
            phase: Some(Phase::Provisioning),
            conditions: vec![
                cond(conditions::READY, ready, "GroupsNotReady", generation),
                cond(
                    conditions::RECONCILING,
                    reconciling,
                    "Progressing",
                    generation,
                ),
                cond(conditions::STALLED, stalled, "LicenseMismatch", generation),
            ],
            ..DeepInferDeploymentStatus::default()
        }
    }

    #[test]
    fn ready_for_the_current_generation_is_current() {
        let s = status(4, "True", "False", "False");
        let r = compute_parts(Some(4), false, Some(&s));
        assert_eq!(r.status, Status::Current);
        assert_eq!(r.message, "GroupsNotReady: Ready is True");
    }

    #[test]
    fn no_status_is_in_progress() {
        let r = compute_parts(Some(1), false, None);
        assert_eq!(r.status, Status::InProgress);
        let empty = DeepInferDeploymentStatus::default();
        assert_eq!(
            compute_parts(Some(1), false, Some(&empty)).status,
            Status::InProgress
        );
    }

    #[test]
    fn a_lagging_observed_generation_is_in_progress_even_when_ready_or_stalled() {
        for s in [
            status(3, "True", "False", "False"),
            status(3, "False", "False", "True"),
        ] {
            let r = compute_parts(Some(4), false, Some(&s));
            assert_eq!(r.status, Status::InProgress);
            assert_eq!(
                r.message,
                "the operator has observed generation 3, not yet 4"
            );
        }
    }

    #[test]
    fn stalled_is_failed_with_its_message() {
        let s = status(2, "False", "False", "True");
        let r = compute_parts(Some(2), false, Some(&s));
        assert_eq!(r.status, Status::Failed);
        assert_eq!(r.message, "LicenseMismatch: Stalled is True");
    }

    #[test]
    fn reconciling_or_not_ready_is_in_progress() {
        let reconciling = status(2, "True", "True", "False");
        assert_eq!(
            compute_parts(Some(2), false, Some(&reconciling)).status,
            Status::InProgress
        );
        let not_ready = status(2, "False", "False", "False");
        assert_eq!(
            compute_parts(Some(2), false, Some(&not_ready)).status,
            Status::InProgress
        );
        let mut no_ready = status(2, "True", "False", "False");
        no_ready.conditions.retain(|c| c.type_ != conditions::READY);
        assert_eq!(
            compute_parts(Some(2), false, Some(&no_ready)).message,
            "the status has no Ready condition yet"
        );
    }

    #[test]
    fn a_ready_condition_of_an_older_generation_is_not_current() {
        let mut s = status(5, "True", "False", "False");
        for c in &mut s.conditions {
            c.observed_generation = Some(4);
        }
        assert_eq!(
            compute_parts(Some(5), false, Some(&s)).status,
            Status::InProgress
        );
    }

    #[test]
    fn deleting_is_terminating() {
        let s = status(1, "True", "False", "False");
        assert_eq!(
            compute_parts(Some(1), true, Some(&s)).status,
            Status::Terminating
        );
    }
}
