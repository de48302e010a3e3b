//! Continuous enforcement: which worker pods may carry `deepinfer.io/accepted=True`.
//!
//! A pod is entitled to serve only while both hold: the licence gate is open (annotation equal to
//! `spec.model.license`, licence on the operator's allow-list), and the newest recorded judgement
//! of the pod's revision is a pass. Every pass decides this first, before any gate can stop the
//! pass, so withdrawn trust takes pods out of Service endpoints within one pass; restored trust
//! brings them back without running anything again.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::{labels, AcceptanceResult, DeepInferDeploymentStatus, PodReason};
use crate::controller::gates::licence::LicenceVerdict;
use crate::controller::pods::accepted_condition;

/// Whether pods of one revision may serve, and why (not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entitlement {
    /// May serve.
    pub entitled: bool,
    /// Reason of the pod condition (see [`PodReason`]).
    pub reason: PodReason,
    /// Message of the pod condition: what was granted or withdrawn, and why.
    pub message: String,
    /// Whether a verdict decides it. No known verdict (no judgement of the revision is known,
    /// or its result is one this release cannot read) is not a verdict against the revision:
    /// its pods keep the condition they have, neither granted nor withdrawn.
    pub settled: bool,
}

/// The entitlement of pods of `role` at `revision`: a passed judgement entitles only the roles
/// its run included.
pub fn of_revision(
    licence: &LicenceVerdict,
    judgements: Option<&DeepInferDeploymentStatus>,
    revision: &str,
    role: &str,
) -> Entitlement {
    if !licence.is_accepted() {
        return Entitlement {
            entitled: false,
            reason: PodReason::LicenseWithdrawn,
            message: format!(
                "licence gate closed ({}): taken out of service until the licence is accepted again",
                licence.reason()
            ),
            settled: true,
        };
    }
    match judgements.and_then(|s| s.latest_judgement(revision)) {
        Some(j) if j.passed() && !j.covers(role) => Entitlement {
            entitled: false,
            reason: PodReason::NotJudged,
            message: if j.roles.iter().any(|r| r == role) {
                format!(
                    "the acceptance run that passed revision {revision} judged the worker's own outputs, which role {role} took no part in (worker stands alone): not in service until a run judges it"
                )
            } else {
                format!(
                    "the acceptance run that passed revision {revision} did not include role {role} (it ran {}): not in service until a run includes it",
                    j.roles.join(", ")
                )
            },
            settled: true,
        },
        Some(j) if j.passed() => Entitlement {
            entitled: true,
            reason: PodReason::Entitled,
            message: format!("revision {revision} passed acceptance"),
            settled: true,
        },
        Some(j) if j.result == AcceptanceResult::Unknown => Entitlement {
            entitled: false,
            reason: PodReason::NotJudged,
            message: format!(
                "the latest judgement of revision {revision} has a result this operator does not know: left as it is"
            ),
            settled: false,
        },
        Some(j) => Entitlement {
            entitled: false,
            reason: PodReason::AcceptanceWithdrawn,
            message: format!(
                "the latest judgement of revision {revision} failed ({}/{} prompts passed): taken out of service",
                j.passed, j.prompts
            ),
            settled: true,
        },
        None => Entitlement {
            entitled: false,
            reason: PodReason::NotJudged,
            message: format!("no acceptance judgement of revision {revision} is recorded"),
            settled: false,
        },
    }
}

/// A change of one pod's `deepinfer.io/accepted` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// Pod name.
    pub pod: String,
    /// The UID of the pod as observed: the patch carries it as a precondition, so a pod made
    /// again under the same name is never marked on its predecessor's entitlement.
    pub uid: String,
    /// New status: true grants, false withdraws.
    pub accepted: bool,
    /// Condition reason.
    pub reason: PodReason,
    /// Condition message.
    pub message: String,
}

/// The condition changes that bring every worker pod in line with its entitlement. A pod that is
/// not entitled and was never accepted is left alone (it is not in any endpoint); one that is
/// being deleted is left alone too.
pub fn decide(
    pods: &[Pod],
    licence: &LicenceVerdict,
    judgements: Option<&DeepInferDeploymentStatus>,
) -> Vec<Mark> {
    let mut marks = Vec::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(revision) = pod.labels().get(labels::REVISION) else {
            continue;
        };
        let role = pod.labels().get(labels::ROLE).map_or("", String::as_str);
        let e = of_revision(licence, judgements, revision, role);
        if !e.settled {
            continue;
        }
        let now = accepted_condition(pod);
        let change = match (e.entitled, now) {
            (true, Some("True")) => false,
            (true, _) => true,
            (false, Some("True")) => true,
            (false, _) => false,
        };
        if change {
            marks.push(Mark {
                pod: pod.name_any(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                accepted: e.entitled,
                reason: e.reason,
                message: e.message,
            });
        }
    }
    marks
}

/// Revisions (with their roles) that have a pod in service while no verdict of theirs is known
/// (see [`Entitlement::settled`]): the rollout keeps and repairs their groups as it does those of
/// a pass, since nothing says they failed.
pub fn unsettled_in_service(
    pods: &[Pod],
    licence: &LicenceVerdict,
    judgements: Option<&DeepInferDeploymentStatus>,
) -> std::collections::BTreeSet<(String, String)> {
    pods.iter()
        .filter(|p| accepted_condition(p) == Some("True"))
        .filter_map(|p| {
            let revision = p.labels().get(labels::REVISION)?;
            let role = p.labels().get(labels::ROLE).map_or("", String::as_str);
            let e = of_revision(licence, judgements, revision, role);
            (!e.settled).then(|| (revision.clone(), role.to_string()))
        })
        .collect()
}

/// One sentence for status and events naming what was withdrawn and why, if anything was.
pub fn withdrawn_summary(marks: &[Mark]) -> Option<String> {
    let withdrawn: Vec<&Mark> = marks.iter().filter(|m| !m.accepted).collect();
    let first = withdrawn.first()?;
    Some(format!(
        "{} serving pod(s) taken out of service ({}): {}",
        withdrawn.len(),
        first.reason,
        first.message
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AcceptanceResult, AcceptanceStatus};
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn pod(name: &str, revision: &str, accepted: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(BTreeMap::from([(
                    labels::REVISION.to_string(),
                    revision.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: accepted.map(|s| {
                    vec![PodCondition {
                        type_: crate::api::ACCEPTED_POD_CONDITION.into(),
                        status: s.into(),
                        ..PodCondition::default()
                    }]
                }),
                ..PodStatus::default()
            }),
        }
    }

    fn judged(entries: &[(&str, AcceptanceResult)]) -> DeepInferDeploymentStatus {
        DeepInferDeploymentStatus {
            judgements: entries
                .iter()
                .map(|(rev, result)| AcceptanceStatus {
                    revision: (*rev).into(),
                    result: *result,
                    prompts: 3,
                    passed: if *result == AcceptanceResult::Passed {
                        3
                    } else {
                        1
                    },
                    ..AcceptanceStatus::default()
                })
                .collect(),
            ..DeepInferDeploymentStatus::default()
        }
    }

    fn not_allowed() -> LicenceVerdict {
        LicenceVerdict::NotAllowed {
            license: "mit".into(),
            allowed: vec![],
        }
    }

    #[test]
    fn licence_revocation_withdraws_every_accepted_pod_in_one_pass() {
        let status = judged(&[("a", AcceptanceResult::Passed)]);
        let pods = [
            pod("p0", "a", Some("True")),
            pod("p1", "a", Some("True")),
            pod("p2", "a", None),
        ];
        for licence in [
            LicenceVerdict::AnnotationMissing,
            not_allowed(),
            LicenceVerdict::Mismatch {
                annotation: "apache-2.0".into(),
                spec: "mit".into(),
            },
        ] {
            let marks = decide(&pods, &licence, Some(&status));
            assert_eq!(
                marks.iter().map(|m| m.pod.as_str()).collect::<Vec<_>>(),
                ["p0", "p1"],
                "pods that never served need no write"
            );
            assert!(marks
                .iter()
                .all(|m| !m.accepted && m.reason == PodReason::LicenseWithdrawn));
            let summary = withdrawn_summary(&marks).expect("summary");
            assert!(
                summary.starts_with("2 serving pod(s) taken out of service (LicenseWithdrawn)"),
                "{summary}"
            );
            assert!(
                summary.contains(licence.reason().as_str()),
                "names the closed gate: {summary}"
            );
        }
    }

    #[test]
    fn restoring_the_licence_brings_pods_back_from_the_recorded_pass() {
        let status = judged(&[("a", AcceptanceResult::Passed)]);
        let pods = [pod("p0", "a", Some("False")), pod("p1", "a", Some("True"))];
        let marks = decide(&pods, &LicenceVerdict::Accepted, Some(&status));
        assert_eq!(
            marks,
            [Mark {
                pod: "p0".into(),
                uid: "uid-p0".into(),
                accepted: true,
                reason: PodReason::Entitled,
                message: "revision a passed acceptance".into(),
            }]
        );
    }

    #[test]
    fn a_failed_rejudgement_withdraws_only_that_revisions_pods() {
        // Newest first: revision a was judged again and failed; b still passes.
        let status = judged(&[
            ("a", AcceptanceResult::Failed),
            ("b", AcceptanceResult::Passed),
            ("a", AcceptanceResult::Passed),
        ]);
        let pods = [pod("a0", "a", Some("True")), pod("b0", "b", Some("True"))];
        let marks = decide(&pods, &LicenceVerdict::Accepted, Some(&status));
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0].pod, "a0");
        assert!(!marks[0].accepted);
        assert_eq!(marks[0].reason, PodReason::AcceptanceWithdrawn);
        assert!(
            marks[0].message.contains("1/3 prompts passed"),
            "{}",
            marks[0].message
        );
    }

    #[test]
    fn a_revision_without_a_known_verdict_is_never_granted_nor_withdrawn_and_terminating_pods_are_left_alone(
    ) {
        let mut status = judged(&[
            ("a", AcceptanceResult::Passed),
            ("u", AcceptanceResult::Unknown),
        ]);
        let mut leaving = pod("a1", "a", None);
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().expect("time"),
            ));
        // x has no judgement (a lost status), u one this release cannot read: neither is a
        // verdict against it, so a pod serving keeps serving and one not serving is not granted.
        let pods = [
            pod("x0", "x", None),
            pod("x1", "x", Some("True")),
            pod("u0", "u", Some("False")),
            pod("u1", "u", Some("True")),
            leaving,
        ];
        assert!(decide(&pods, &LicenceVerdict::Accepted, Some(&status)).is_empty());
        // A closed licence gate is a verdict: every serving pod goes.
        let marks = decide(&pods, &not_allowed(), Some(&status));
        assert_eq!(
            marks.iter().map(|m| m.pod.as_str()).collect::<Vec<_>>(),
            ["x1", "u1"]
        );
        // The unknown judgement is only the newest; an older known failure does not decide.
        status.judgements.push(AcceptanceStatus {
            revision: "u".into(),
            ..AcceptanceStatus::default()
        });
        assert!(decide(&pods, &LicenceVerdict::Accepted, Some(&status)).is_empty());
    }

    #[test]
    fn a_pass_entitles_only_the_roles_its_run_included() {
        let mut status = judged(&[("r1", AcceptanceResult::Passed)]);
        status.judgements[0].roles = vec!["decode".into()];
        let of = |status: &DeepInferDeploymentStatus, role: &str| {
            of_revision(&LicenceVerdict::Accepted, Some(status), "r1", role)
        };
        assert!(of(&status, "decode").entitled);
        let prefill = of(&status, "prefill");
        assert!(!prefill.entitled);
        assert_eq!(prefill.reason, PodReason::NotJudged);
        assert!(prefill.message.contains("did not include role prefill"));
        // A judgement recorded before runs named their roles covers its revision's pods.
        status.judgements[0].roles.clear();
        assert!(of(&status, "prefill").entitled);
        // A run that judged the worker entitles the worker alone, whatever ran beside it.
        status.judgements[0].roles = vec!["worker".into(), "prefill".into(), "decode".into()];
        assert!(of(&status, "worker").entitled);
        for role in ["prefill", "decode"] {
            let beside = of(&status, role);
            assert!(!beside.entitled, "{role}");
            assert!(
                beside.message.contains("worker stands alone"),
                "{}",
                beside.message
            );
        }
    }
}
