//! The acceptance gate's decision for the target revision, from its recorded judgements and the
//! observed run (Jobs and their pods). A run waiting for devices is not a verdict; a run that
//! never started, or whose pod is gone, is run again rather than recorded as a failure.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;

use crate::acceptance::AcceptanceSummary;
use crate::api::{
    AcceptancePrompt, AcceptanceResult, AcceptanceSpec, AcceptanceStatus, Reason, ReviewRecord,
    ACCEPTANCE_CHANGE_REASON_ANNOTATION, ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION,
    RERUN_ACCEPTANCE_ANNOTATION, RERUN_REASON_ANNOTATION,
};
use crate::controller::build;
use crate::controller::gates::jobs::{JobState, PodsSeen};
use crate::controller::status::Gate;

/// What is being judged.
#[derive(Clone, Debug)]
pub struct Judging<'a> {
    /// Revision.
    pub revision: &'a str,
    /// Hash of `spec.acceptance`.
    pub spec_hash: &'a str,
    /// Value of the rerun annotation.
    pub token: &'a str,
    /// Prompts given inline (for a judgement without a summary).
    pub prompts: usize,
    /// Seconds after the leader started by which the run must have ended.
    pub deadline_seconds: i64,
    /// Roles whose groups the run includes, the judged role first (recorded in the judgement).
    pub roles: &'a [String],
    /// The review decisions annotated on the resource (recorded in the judgement).
    pub review: Option<&'a ReviewRecord>,
    /// Now.
    pub now: Timestamp,
}

/// The run's groups of the roles other than the judged one (none for a run of one role). They
/// start first, as they serve; the judged group starts once all of their engines run, and a
/// pass needs them still running when the judged group ends.
#[derive(Clone, Debug, Default)]
pub struct Upstream {
    /// Pods those groups have when complete.
    pub expected: usize,
    /// Whether their Jobs exist.
    pub created: bool,
    /// What their pods show.
    pub pods: PodsSeen,
}

impl Upstream {
    /// How many of their pods' engines run (or ran).
    pub fn started(&self) -> usize {
        self.pods.engine_started.len()
    }

    /// The roles of these groups, for messages (`prefill, vision`).
    fn roles(&self, j: &Judging<'_>) -> String {
        j.roles.get(1..).unwrap_or_default().join(", ")
    }

    /// Why these groups did not run to the end (a container ended, or a pod is gone), if so.
    fn stopped(&self, j: &Judging<'_>) -> Option<String> {
        if self.expected == 0 {
            return None;
        }
        let (ended, present) = (&self.pods.ended, self.pods.present);
        if ended.is_empty() && present >= self.expected {
            return None;
        }
        Some(format!(
            "the run's {} group(s) did not run to the end ({present} of {} pod(s) present{ended})",
            self.roles(j),
            self.expected
        ))
    }
}

/// What the acceptance gate does in this pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A judgement of exactly this revision, spec and token is recorded: reuse it.
    Reuse(AcceptanceStatus),
    /// No run exists: start one (the other roles' groups first, if the run has any).
    Start,
    /// Every engine of the other roles' groups runs: start the judged role's group.
    StartJudged,
    /// The run is under way.
    Running,
    /// A pod of the run waits for devices (the scheduler's message); no deadline runs.
    WaitingForCapacity(String),
    /// Record this judgement; stop every rank's Job when `stop_leader`, else the followers'.
    Record {
        /// The judgement.
        judgement: AcceptanceStatus,
        /// The leader is still running (it overran its deadline).
        stop_leader: bool,
    },
    /// The run ended without a verdict and never ran (or its pod is gone): delete it and run
    /// it again.
    Rerun,
}

/// Decides the acceptance gate's step. `leader` is the state of the judged group's rank 0 Job,
/// `leader_pods` what its pods show, `run_pods` what the pods of every rank of every group show,
/// `upstream` the groups of the other roles.
pub fn decide(
    recorded: Option<&AcceptanceStatus>,
    leader: &JobState,
    leader_pods: &PodsSeen,
    run_pods: &PodsSeen,
    upstream: &Upstream,
    j: &Judging<'_>,
) -> Step {
    let mut step = step(recorded, leader, leader_pods, run_pods, upstream, j);
    if let Step::Record { judgement, .. } = &mut step {
        bound_reason(judgement);
    }
    step
}

/// A judgement's reason cut to what a status carries.
fn bound_reason(judgement: &mut AcceptanceStatus) {
    judgement.reason = judgement
        .reason
        .take()
        .map(|r| crate::controller::text::truncate(&r, 1000));
}

fn step(
    recorded: Option<&AcceptanceStatus>,
    leader: &JobState,
    leader_pods: &PodsSeen,
    run_pods: &PodsSeen,
    upstream: &Upstream,
    j: &Judging<'_>,
) -> Step {
    if let Some(a) = recorded {
        return Step::Reuse(a.clone());
    }
    let message = match leader {
        JobState::Missing if upstream.expected == 0 || !upstream.created => return Step::Start,
        JobState::Missing => return upstream_step(upstream, j),
        JobState::Running => return running_step(leader_pods, run_pods, j),
        JobState::Succeeded(m) | JobState::Failed(m) => m,
    };
    let summary: Option<AcceptanceSummary> = message
        .as_deref()
        .and_then(|m| serde_json::from_str(m.trim()).ok());
    let judgement = match summary {
        // The judge passed the run, but the leader Job failed after it (a container killed
        // after the verdict): a run that did not end cleanly is not accepted.
        Some(s) if s.result == AcceptanceResult::Passed && matches!(leader, JobState::Failed(_)) => {
            AcceptanceStatus {
                result: AcceptanceResult::Failed,
                reason: Some(format!(
                    "the acceptance Job failed after its judge passed the run{}; a run that did not end cleanly is not accepted",
                    leader_pods.ended
                )),
                ..judged(s, j)
            }
        }
        Some(s) => judged(s, j),
        None if !leader_pods.ever_started => return Step::Rerun,
        None => unreadable_judgement(
            j,
            format!(
                "the acceptance Job ended without a summary: {}{}",
                message
                    .as_deref()
                    .map_or("no termination message", |m| m.trim()),
                leader_pods.ended
            ),
        ),
    };
    Step::Record {
        judgement: with_upstream(judgement, upstream, j),
        stop_leader: false,
    }
}

/// The step while the judged group has no Job yet: the upstream groups of the other roles start
/// first, and the judged group starts once all of them have started.
fn upstream_step(upstream: &Upstream, j: &Judging<'_>) -> Step {
    if let Some(why) = upstream.pods.unschedulable.clone() {
        return Step::WaitingForCapacity(why);
    }
    let ended = &upstream.pods.ended;
    if !ended.is_empty() {
        return Step::Record {
            judgement: unreadable_judgement(
                j,
                format!(
                    "the run's {} group(s) ended before the judged group started{ended}",
                    upstream.roles(j)
                ),
            ),
            stop_leader: true,
        };
    }
    if upstream.started() >= upstream.expected {
        Step::StartJudged
    } else {
        Step::Running
    }
}

/// The step while the judged leader's Job runs: waiting, waiting for capacity, or a run past
/// its deadline recorded as failed.
fn running_step(leader_pods: &PodsSeen, run_pods: &PodsSeen, j: &Judging<'_>) -> Step {
    if let Some(why) = run_pods.unschedulable.clone() {
        return Step::WaitingForCapacity(why);
    }
    let overdue = leader_pods
        .engine_started
        .iter()
        .any(|t| j.now.duration_since(*t).as_secs() > j.deadline_seconds);
    if !overdue {
        return Step::Running;
    }
    Step::Record {
        judgement: unreadable_judgement(
            j,
            format!(
                "the acceptance run did not finish within {} s of starting (spec.acceptance.timeoutSeconds + 300 s)",
                j.deadline_seconds
            ),
        ),
        stop_leader: true,
    }
}

/// The judgement the summary `s` of a run that stopped being the target makes of `revision`
/// under acceptance spec `spec_hash` and rerun token `token`, the run's `roles` judged first.
pub fn judged_summary(
    s: AcceptanceSummary,
    revision: &str,
    spec_hash: &str,
    token: &str,
    roles: Vec<String>,
) -> AcceptanceStatus {
    let j = Judging {
        revision,
        spec_hash,
        token,
        prompts: s.prompts,
        deadline_seconds: 0,
        roles: &roles,
        review: None,
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    let mut judgement = judged(s, &j);
    bound_reason(&mut judgement);
    judgement
}

/// The judgement the judge's summary `s` makes of the run `j`.
fn judged(s: AcceptanceSummary, j: &Judging<'_>) -> AcceptanceStatus {
    AcceptanceStatus {
        revision: j.revision.to_string(),
        result: s.result,
        prompts: i32::try_from(s.prompts).unwrap_or(i32::MAX),
        passed: i32::try_from(s.passed).unwrap_or(i32::MAX),
        failed_prompts: s.failed_prompts,
        evidence: (!s.evidence.is_empty()).then_some(s.evidence),
        rerun_token: (!j.token.is_empty()).then(|| j.token.to_string()),
        spec_hash: Some(j.spec_hash.to_string()),
        reason: Some(s.reason),
        template_version: Some(build::TEMPLATE_VERSION),
        roles: j.roles.to_vec(),
        review: j.review.cloned(),
        proof: None,
    }
}

/// A judgement turned into a failure when the other roles' groups did not run to the end: the
/// judged outputs were not produced by the whole configuration.
fn with_upstream(
    mut judgement: AcceptanceStatus,
    upstream: &Upstream,
    j: &Judging<'_>,
) -> AcceptanceStatus {
    if let Some(why) = upstream.stopped(j) {
        judgement.result = AcceptanceResult::Failed;
        let judged = judgement.reason.take().unwrap_or_default();
        judgement.reason = Some(format!("{why}; the judged group's own result: {judged}"));
    }
    judgement
}

/// A failed judgement for a run that produced no readable summary.
fn unreadable_judgement(j: &Judging<'_>, why: String) -> AcceptanceStatus {
    AcceptanceStatus {
        revision: j.revision.to_string(),
        result: AcceptanceResult::Failed,
        prompts: i32::try_from(j.prompts).unwrap_or(i32::MAX),
        passed: 0,
        failed_prompts: Vec::new(),
        evidence: None,
        rerun_token: (!j.token.is_empty()).then(|| j.token.to_string()),
        spec_hash: Some(j.spec_hash.to_string()),
        reason: Some(why),
        template_version: Some(crate::controller::build::TEMPLATE_VERSION),
        roles: j.roles.to_vec(),
        review: j.review.cloned(),
        proof: None,
    }
}

/// `spec.acceptance` with `promptsFrom` resolved into inline prompts (so the judge needs no
/// read access to ConfigMaps), or what is missing, naming the ConfigMap and key.
pub fn resolve(
    acceptance: &AcceptanceSpec,
    ns: &str,
    prompts: Option<&ConfigMap>,
) -> Result<AcceptanceSpec, String> {
    let mut spec = acceptance.clone();
    let Some(from) = spec.prompts_from.take() else {
        return Ok(spec);
    };
    let Some(cm) = prompts else {
        return Err(format!(
            "ConfigMap {ns}/{} named by spec.acceptance.promptsFrom does not exist; create it with the prompts under key {}",
            from.name, from.key
        ));
    };
    let Some(text) = cm.data.as_ref().and_then(|d| d.get(&from.key)) else {
        return Err(format!(
            "ConfigMap {ns}/{} has no key {} (spec.acceptance.promptsFrom.key); add the prompts there",
            from.name, from.key
        ));
    };
    match serde_yaml::from_str::<Vec<AcceptancePrompt>>(text) {
        Ok(more) => {
            spec.prompts.extend(more);
            Ok(spec)
        }
        // Where, never what: the parser's message may quote the content, which status and events
        // would then show to whoever may read the resource.
        Err(e) => Err(format!(
            "ConfigMap {ns}/{} key {} is not a YAML list of prompts (spec.acceptance.promptsFrom){}: correct it to a list of prompts as spec.acceptance.prompts takes (the content is not repeated here)",
            from.name,
            from.key,
            e.location().map_or(String::new(), |l| format!(
                " at line {} column {}",
                l.line(),
                l.column()
            ))
        )),
    }
}

/// Hash of what a judgement is made by: `spec.acceptance` with `promptsFrom` resolved (see
/// [`resolve`]), so an edit to the prompts of the ConfigMap is a new judgement; the unresolved
/// section when the ConfigMap or its key cannot be read (`resolved` is `None`). Without
/// `promptsFrom` the resolved section is the section itself. Only the hash is kept in status,
/// never the ConfigMap's content.
pub fn judged_spec_hash(acceptance: &AcceptanceSpec, resolved: Option<&AcceptanceSpec>) -> String {
    build::full_hash(resolved.unwrap_or(acceptance))
}

/// What a new acceptance run (of `spec_hash`, rerun token `token`) needs on record before it
/// starts, or `None` when it may start. A change to what a deployment is judged by is a review
/// decision: a rerun token no recorded judgement carries needs `deepinfer.io/rerun-reason`; an
/// acceptance section no passed judgement was made by, on a deployment with a passed judgement,
/// needs the change's reason and reviewer, and not the pair already recorded with a pass under
/// another section (that pair reviewed an earlier change). Judgements recorded before spec hashes
/// were kept are not compared.
pub fn review_missing(
    review: Option<&ReviewRecord>,
    token: &str,
    spec_hash: &str,
    judgements: &[AcceptanceStatus],
) -> Option<String> {
    let empty = ReviewRecord::default();
    let review = review.unwrap_or(&empty);
    let mut missing = Vec::new();
    let new_rerun = !token.is_empty()
        && !judgements
            .iter()
            .any(|j| j.rerun_token.as_deref() == Some(token));
    if new_rerun && review.rerun_reason.is_none() {
        missing.push(format!(
            "annotation {RERUN_ACCEPTANCE_ANNOTATION} asks for a new run ({token:?}) without annotation {RERUN_REASON_ANNOTATION}: set it to why the run is repeated; it is recorded in the judgement and the manifest"
        ));
    }
    let passed: Vec<&AcceptanceStatus> = judgements
        .iter()
        .filter(|j| j.passed() && j.spec_hash.is_some())
        .collect();
    let changed = !passed.is_empty()
        && !passed
            .iter()
            .any(|j| j.spec_hash.as_deref() == Some(spec_hash));
    if changed {
        match (&review.change_reason, &review.change_reviewer) {
            (Some(reason), Some(reviewer)) => {
                let earlier = passed.iter().find(|j| {
                    j.review.as_ref().is_some_and(|r| {
                        r.change_reason.as_ref() == Some(reason)
                            && r.change_reviewer.as_ref() == Some(reviewer)
                    })
                });
                if let Some(earlier) = earlier {
                    missing.push(format!(
                        "spec.acceptance changed, but annotations {ACCEPTANCE_CHANGE_REASON_ANNOTATION} and {ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION} are those recorded with the pass of revision {} under an earlier spec.acceptance: they review that change, not this one; set them to this change's reason and reviewer",
                        earlier.revision
                    ));
                }
            }
            _ => missing.push(format!(
                "spec.acceptance differs from every section a passed judgement of this deployment was made by, and changing what it is judged by is a review decision: set annotation {ACCEPTANCE_CHANGE_REASON_ANNOTATION} (why the expected results changed) and {ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION} (who reviewed and approved it), or revert the change"
            )),
        }
    }
    (!missing.is_empty()).then(|| {
        format!(
            "{}. Nothing runs until then; the serving pods keep serving on their pass",
            missing.join("; ")
        )
    })
}

/// The gate for a judgement.
pub fn judged_gate(a: &AcceptanceStatus) -> Gate {
    let message = acceptance_message(a);
    if a.passed() {
        Gate::Passed(Reason::AcceptanceSucceeded, message)
    } else {
        Gate::Failed(
            Reason::AcceptanceFailed,
            crate::controller::text::truncate(&message, 2000),
        )
    }
}

pub fn acceptance_message(a: &AcceptanceStatus) -> String {
    let evidence = a.evidence.as_deref().unwrap_or("none");
    if a.passed() {
        format!(
            "revision {} passed acceptance: {}/{} prompts; evidence in ConfigMap {evidence}",
            a.revision, a.passed, a.prompts
        )
    } else {
        let failed = if a.failed_prompts.is_empty() {
            "none recorded".to_string()
        } else {
            a.failed_prompts.join(", ")
        };
        let why = a
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        format!(
            "revision {} failed acceptance: {}/{} prompts passed; failing prompts: {failed}{why}; evidence in ConfigMap {evidence}. \
             No pod of this revision serves (pods of an earlier judgement are taken out of service). Fix the image, checkpoint or layout (a spec change re-runs acceptance), \
             or set annotation {RERUN_ACCEPTANCE_ANNOTATION} to a new value to run it again",
            a.revision, a.passed, a.prompts
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn judging(now: &str) -> Judging<'static> {
        Judging {
            revision: "rev1",
            spec_hash: "h",
            token: "",
            prompts: 4,
            deadline_seconds: 2100,
            roles: &[],
            review: None,
            now: now.parse().expect("time"),
        }
    }

    fn pending_for_devices() -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some("0/4 nodes are available: 4 Insufficient nvidia.com/gpu".into()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn running_since(at: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "engine".into(),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(Time(at.parse().expect("time"))),
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn summary(result: &str) -> String {
        format!(
            r#"{{"result":"{result}","prompts":4,"passed":3,"failedPrompts":["p2"],"evidence":"ev","reason":"p2: wrong total"}}"#
        )
    }

    #[test]
    fn prompts_from_a_config_map_are_inlined_or_the_missing_piece_is_named() {
        let spec = AcceptanceSpec {
            prompts_from: Some(crate::api::ConfigMapKeyRef {
                name: "prompts".into(),
                key: "list.yaml".into(),
            }),
            ..AcceptanceSpec::default()
        };
        let missing = resolve(&spec, "serving", None).expect_err("missing ConfigMap");
        assert!(missing.contains("ConfigMap serving/prompts") && missing.contains("list.yaml"));
        let mut cm = ConfigMap::default();
        let wrong_key = resolve(&spec, "serving", Some(&cm)).expect_err("missing key");
        assert!(wrong_key.contains("has no key list.yaml"), "{wrong_key}");
        cm.data = Some(std::collections::BTreeMap::from([(
            "list.yaml".to_string(),
            "- id: a\n  prompt: hi\n  structuredOutput: {regex: x}\n".to_string(),
        )]));
        let resolved = resolve(&spec, "serving", Some(&cm)).expect("resolved");
        assert_eq!(resolved.prompts.len(), 1);
        assert!(
            resolved.prompts_from.is_none(),
            "the runner gets the prompts inline"
        );
        cm.data = Some(std::collections::BTreeMap::from([(
            "list.yaml".to_string(),
            "not: a list".to_string(),
        )]));
        assert!(resolve(&spec, "serving", Some(&cm))
            .expect_err("not a list")
            .contains("is not a YAML list of prompts"));
        // Whatever the key holds (any ConfigMap the resource names), the message never quotes it:
        // status and events are readable by more people than the ConfigMap.
        for content in [
            "token-1f2e3d4c5b6a",
            "- id: token-1f2e3d4c5b6a\n",
            "- {id: a, prompt: token-1f2e3d4c5b6a, structuredOutput: 7}",
            "password: token-1f2e3d4c5b6a",
        ] {
            cm.data = Some(std::collections::BTreeMap::from([(
                "list.yaml".to_string(),
                content.to_string(),
            )]));
            let err = resolve(&spec, "serving", Some(&cm)).expect_err("not prompts");
            assert!(
                !err.contains("token-1f2e3d4c5b6a"),
                "quotes the content: {err}"
            );
            assert!(err.contains("line 1"), "says where: {err}");
        }
    }

    #[test]
    fn a_recorded_judgement_is_reused_and_nothing_runs() {
        let recorded = AcceptanceStatus {
            revision: "rev1".into(),
            result: AcceptanceResult::Passed,
            ..AcceptanceStatus::default()
        };
        let step = decide(
            Some(&recorded),
            &JobState::Missing,
            &PodsSeen::default(),
            &PodsSeen::default(),
            &Upstream::default(),
            &judging("2026-01-01T00:00:00Z"),
        );
        assert_eq!(step, Step::Reuse(recorded));
    }

    #[test]
    fn time_pending_for_devices_is_not_a_verdict_and_no_deadline_runs() {
        let pod = pending_for_devices();
        // Even days after the Job was created, a pod that never started is only waiting.
        let step = decide(
            None,
            &JobState::Running,
            &PodsSeen::of(&[&pod]),
            &PodsSeen::of(&[&pod]),
            &Upstream::default(),
            &judging("2026-03-01T00:00:00Z"),
        );
        assert_eq!(
            step,
            Step::WaitingForCapacity(
                "0/4 nodes are available: 4 Insufficient nvidia.com/gpu".into()
            )
        );
    }

    #[test]
    fn the_deadline_counts_from_the_engine_start() {
        let pod = running_since("2026-01-01T00:00:00Z");
        let within = decide(
            None,
            &JobState::Running,
            &PodsSeen::of(&[&pod]),
            &PodsSeen::of(&[&pod]),
            &Upstream::default(),
            &judging("2026-01-01T00:30:00Z"),
        );
        assert_eq!(within, Step::Running);
        let Step::Record {
            judgement,
            stop_leader,
        } = decide(
            None,
            &JobState::Running,
            &PodsSeen::of(&[&pod]),
            &PodsSeen::of(&[&pod]),
            &Upstream::default(),
            &judging("2026-01-01T01:00:00Z"),
        )
        else {
            panic!("an overrun is judged");
        };
        assert!(stop_leader);
        assert_eq!(judgement.result, AcceptanceResult::Failed);
        assert!(judgement
            .reason
            .expect("reason")
            .contains("2100 s of starting"));
    }

    #[test]
    fn a_job_that_never_ran_or_whose_pod_is_gone_is_run_again() {
        let j = judging("2026-01-01T00:00:00Z");
        assert_eq!(
            decide(
                None,
                &JobState::Failed(None),
                &PodsSeen::default(),
                &PodsSeen::default(),
                &Upstream::default(),
                &j
            ),
            Step::Rerun,
            "pod gone"
        );
        let pending = pending_for_devices();
        assert_eq!(
            decide(
                None,
                &JobState::Failed(None),
                &PodsSeen::of(&[&pending]),
                &PodsSeen::of(&[&pending]),
                &Upstream::default(),
                &j
            ),
            Step::Rerun,
            "never started"
        );
        assert_eq!(
            decide(
                None,
                &JobState::Succeeded(None),
                &PodsSeen::default(),
                &PodsSeen::default(),
                &Upstream::default(),
                &j
            ),
            Step::Rerun
        );
    }

    #[test]
    fn a_run_that_ended_without_a_summary_after_running_is_a_failure() {
        let pod = running_since("2026-01-01T00:00:00Z");
        let Step::Record {
            judgement,
            stop_leader,
        } = decide(
            None,
            &JobState::Failed(Some("OOMKilled".into())),
            &PodsSeen::of(&[&pod]),
            &PodsSeen::of(&[&pod]),
            &Upstream::default(),
            &judging("2026-01-01T00:05:00Z"),
        )
        else {
            panic!("recorded");
        };
        assert!(!stop_leader);
        assert_eq!(judgement.prompts, 4);
        assert!(judgement.reason.expect("reason").contains("OOMKilled"));
    }

    /// The judgement recorded for a leader Job in `state` whose pod is `pod`.
    fn recorded(state: &JobState, pod: &Pod) -> AcceptanceStatus {
        let Step::Record { judgement, .. } = decide(
            None,
            state,
            &PodsSeen::of(&[pod]),
            &PodsSeen::of(&[pod]),
            &Upstream::default(),
            &judging("2026-01-01T00:05:00Z"),
        ) else {
            panic!("recorded");
        };
        judgement
    }

    #[test]
    fn the_summary_becomes_the_judgement_with_its_identity() {
        let pod = running_since("2026-01-01T00:00:00Z");
        for (text, result) in [
            ("Passed", AcceptanceResult::Passed),
            ("Failed", AcceptanceResult::Failed),
        ] {
            let judgement = recorded(&JobState::Succeeded(Some(summary(text))), &pod);
            assert_eq!(judgement.result, result);
            assert_eq!(judgement.failed_prompts, ["p2"]);
            assert_eq!(judgement.spec_hash.as_deref(), Some("h"));
            assert_eq!(judgement.template_version, Some(build::TEMPLATE_VERSION));
            assert_eq!(judgement.evidence.as_deref(), Some("ev"));
        }
    }

    #[test]
    fn a_passing_summary_from_a_leader_job_that_failed_is_a_failure() {
        // The judge wrote a summary, then the leader Job failed (a container killed after the
        // verdict): a run that did not end cleanly is not accepted.
        let pod = ended(137);
        let passed = recorded(&JobState::Failed(Some(summary("Passed"))), &pod);
        assert_eq!(passed.result, AcceptanceResult::Failed);
        let reason = passed.reason.expect("reason");
        assert!(
            reason.contains("failed") && reason.contains("exit code 137"),
            "{reason}"
        );
        assert_eq!(passed.evidence.as_deref(), Some("ev"), "the evidence stays");
        // A failing summary from a failed Job stays the judge's own verdict.
        let failed = recorded(&JobState::Failed(Some(summary("Failed"))), &pod);
        assert_eq!(failed.result, AcceptanceResult::Failed);
        assert_eq!(failed.failed_prompts, ["p2"]);
    }

    fn ended(code: i32) -> Pod {
        let mut pod = running_since("2026-01-01T00:00:00Z");
        if let Some(status) = pod.status.as_mut() {
            status.container_statuses =
                Some(vec![crate::controller::gates::jobs::ended_container(
                    build::ENGINE_CONTAINER,
                    code,
                    "Error",
                )]);
        }
        pod
    }

    #[test]
    fn the_other_roles_groups_start_first_and_the_judged_group_once_their_engines_run() {
        let roles = ["decode".to_string(), "prefill".to_string()];
        let j = Judging {
            roles: &roles,
            ..judging("2026-01-01T00:05:00Z")
        };
        let missing = JobState::Missing;
        let up = |created: bool, pods: Vec<&'static Pod>| Upstream {
            expected: 2,
            created,
            pods: PodsSeen::of(&pods),
        };
        let leak = |p: Pod| -> &'static Pod { Box::leak(Box::new(p)) };
        let running = leak(running_since("2026-01-01T00:00:00Z"));
        let waiting = leak(pending_for_devices());
        let crashed = leak(ended(1));
        let none = PodsSeen::default();
        let step = |u: &Upstream| decide(None, &missing, &none, &none, u, &j);
        assert_eq!(step(&up(false, vec![])), Step::Start);
        assert_eq!(step(&up(true, vec![])), Step::Running, "no pod yet");
        assert_eq!(step(&up(true, vec![running])), Step::Running, "1 of 2");
        assert_eq!(step(&up(true, vec![running, running])), Step::StartJudged);
        assert!(matches!(
            step(&up(true, vec![running, waiting])),
            Step::WaitingForCapacity(_)
        ));
        let Step::Record {
            judgement,
            stop_leader,
        } = step(&up(true, vec![running, crashed]))
        else {
            panic!("a group that ended before the judged one started fails the run");
        };
        assert!(stop_leader);
        assert_eq!(judgement.result, AcceptanceResult::Failed);
        let reason = judgement.reason.expect("reason");
        assert!(reason.contains("prefill group(s) ended"), "{reason}");
        assert!(reason.contains("exit code 1"), "{reason}");
        assert_eq!(judgement.roles, roles);
        // A run of one role starts its group at once.
        assert_eq!(
            decide(
                None,
                &missing,
                &PodsSeen::default(),
                &PodsSeen::default(),
                &Upstream::default(),
                &j
            ),
            Step::Start
        );
    }

    #[test]
    fn a_pass_needs_the_other_roles_groups_running_to_the_end_and_records_the_roles() {
        let roles = ["decode".to_string(), "prefill".to_string()];
        let j = Judging {
            roles: &roles,
            ..judging("2026-01-01T00:05:00Z")
        };
        let leader = running_since("2026-01-01T00:00:00Z");
        let prefill = running_since("2026-01-01T00:00:00Z");
        let crashed = ended(137);
        let judge = |pods: Vec<&Pod>| {
            let upstream = Upstream {
                expected: 1,
                created: true,
                pods: PodsSeen::of(&pods),
            };
            let Step::Record { judgement, .. } = decide(
                None,
                &JobState::Succeeded(Some(summary("Passed"))),
                &PodsSeen::of(&[&leader]),
                &PodsSeen::of(&[&leader]),
                &upstream,
                &j,
            ) else {
                panic!("recorded");
            };
            judgement
        };
        let passed = judge(vec![&prefill]);
        assert_eq!(passed.result, AcceptanceResult::Passed);
        assert_eq!(passed.roles, roles);
        for (pods, why) in [
            (vec![&crashed], "exit code 137"),
            (vec![], "0 of 1 pod(s) present"),
        ] {
            let failed = judge(pods);
            assert_eq!(failed.result, AcceptanceResult::Failed);
            let reason = failed.reason.expect("reason");
            assert!(
                reason.contains("prefill group(s) did not run to the end"),
                "{reason}"
            );
            assert!(reason.contains(why), "{reason}");
        }
    }

    #[test]
    fn a_new_run_needs_its_review_decisions_on_record() {
        let pass = |revision: &str, hash: &str, review: Option<ReviewRecord>| AcceptanceStatus {
            revision: revision.into(),
            result: AcceptanceResult::Passed,
            spec_hash: Some(hash.into()),
            review,
            ..AcceptanceStatus::default()
        };
        let change = |reason: &str, reviewer: &str| ReviewRecord {
            change_reason: Some(reason.into()),
            change_reviewer: Some(reviewer.into()),
            ..ReviewRecord::default()
        };
        // A first run, or a new revision judged by a section that passed before: no review.
        assert_eq!(review_missing(None, "", "h1", &[]), None);
        let history = [pass("r1", "h1", None)];
        assert_eq!(review_missing(None, "", "h1", &history), None);
        // A new rerun token needs its reason; a token already judged does not.
        let why = review_missing(None, "t1", "h1", &history).expect("reason needed");
        assert!(
            why.contains(RERUN_REASON_ANNOTATION) && why.contains("\"t1\""),
            "{why}"
        );
        let rerun = ReviewRecord {
            rerun_reason: Some("node fault".into()),
            ..ReviewRecord::default()
        };
        assert_eq!(review_missing(Some(&rerun), "t1", "h1", &history), None);
        let rerun_judged = [AcceptanceStatus {
            rerun_token: Some("t1".into()),
            ..pass("r2", "h1", None)
        }];
        assert_eq!(review_missing(None, "t1", "h1", &rerun_judged), None);
        // A changed section of a deployment that passed needs the reason and the reviewer.
        let why = review_missing(None, "", "h2", &history).expect("review needed");
        assert!(
            why.contains(ACCEPTANCE_CHANGE_REASON_ANNOTATION)
                && why.contains(ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION)
                && why.ends_with("keep serving on their pass"),
            "{why}"
        );
        let reason_only = ReviewRecord {
            change_reason: Some("new product rule".into()),
            ..ReviewRecord::default()
        };
        assert!(review_missing(Some(&reason_only), "", "h2", &history).is_some());
        let approved = change("new product rule", "jane");
        assert_eq!(review_missing(Some(&approved), "", "h2", &history), None);
        // The pair recorded with the pass of the last change reviews that change, not the next.
        let after = [
            pass("r1", "h2", Some(approved.clone())),
            pass("r1", "h1", None),
        ];
        assert_eq!(review_missing(Some(&approved), "", "h2", &after), None);
        let stale = review_missing(Some(&approved), "", "h3", &after).expect("stale review");
        assert!(stale.contains("revision r1 under an earlier"), "{stale}");
        assert_eq!(
            review_missing(Some(&change("stricter total", "jane")), "", "h3", &after),
            None
        );
        // Failed judgements and those without a spec hash are not a passed section.
        let failed = [AcceptanceStatus {
            result: AcceptanceResult::Failed,
            ..pass("r1", "h1", None)
        }];
        assert_eq!(review_missing(None, "", "h2", &failed), None);
        let old = [AcceptanceStatus {
            spec_hash: None,
            ..pass("r1", "h1", None)
        }];
        assert_eq!(review_missing(None, "", "h2", &old), None);
    }

    #[test]
    fn the_review_is_recorded_in_the_judgement() {
        let review = ReviewRecord {
            rerun_reason: Some("node fault".into()),
            ..ReviewRecord::default()
        };
        let j = Judging {
            review: Some(&review),
            ..judging("2026-01-01T00:05:00Z")
        };
        let judgement = unreadable_judgement(&j, "gone".into());
        assert_eq!(judgement.review, Some(review));
    }

    #[test]
    fn a_failed_judgement_stalls_the_gate_naming_prompts_and_evidence() {
        let a = AcceptanceStatus {
            revision: "rev1".into(),
            result: AcceptanceResult::Failed,
            prompts: 4,
            passed: 3,
            failed_prompts: vec!["p2".into()],
            evidence: Some("ev".into()),
            ..AcceptanceStatus::default()
        };
        let Gate::Failed(reason, message) = judged_gate(&a) else {
            panic!("failed gate");
        };
        assert_eq!(reason, Reason::AcceptanceFailed);
        assert!(
            message.contains("p2") && message.contains("ConfigMap ev"),
            "{message}"
        );
        assert!(
            message.contains(RERUN_ACCEPTANCE_ANNOTATION),
            "says how to run it again"
        );
    }

    #[test]
    fn the_judged_hash_covers_the_resolved_prompts_and_nothing_else_of_the_configmap() {
        let inline: AcceptanceSpec = serde_json::from_value(serde_json::json!({
            "prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]
        }))
        .expect("spec");
        // Without promptsFrom the hash is the whole hash of the section itself.
        assert_eq!(
            judged_spec_hash(&inline, resolve(&inline, "ns", None).ok().as_ref()),
            build::full_hash(&inline)
        );
        let from: AcceptanceSpec = serde_json::from_value(serde_json::json!({
            "promptsFrom": {"name": "prompts", "key": "prompts.yaml"}
        }))
        .expect("spec");
        let cm = |text: &str, rv: &str| -> ConfigMap {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "prompts", "resourceVersion": rv, "labels": {"team": rv}},
                "data": {"prompts.yaml": text}
            }))
            .expect("cm")
        };
        let hash =
            |c: &ConfigMap| judged_spec_hash(&from, resolve(&from, "ns", Some(c)).ok().as_ref());
        let v1 = cm("- {id: p, prompt: x, structuredOutput: {regex: a}}", "1");
        let v2 = cm("- {id: p, prompt: y, structuredOutput: {regex: a}}", "2");
        assert_ne!(hash(&v1), hash(&v2), "an edited prompt is a new judgement");
        assert_eq!(
            hash(&v1),
            hash(&cm(
                "- {id: p, prompt: x, structuredOutput: {regex: a}}",
                "3"
            )),
            "metadata alone is not"
        );
        assert_ne!(
            hash(&v1),
            judged_spec_hash(&from, None),
            "a missing ConfigMap is not the same as one with prompts"
        );
    }
}
