//! Reading Jobs and their pods: state, termination message, scheduling and start time.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::api::Reason;
use crate::controller::build;
use crate::controller::observe::Observed;
use crate::controller::status::Gate;

/// State of a Job, from what the pass observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// No such Job.
    Missing,
    /// Not finished.
    Running,
    /// Finished with success; the termination message of its pod, if the pod is still there.
    Succeeded(Option<String>),
    /// Finished with failure; the termination message of its pod, if any.
    Failed(Option<String>),
}

/// The gate for a Job named `name` that exists but was not made for `key` (its
/// [`JUDGES_ANNOTATION`](crate::controller::build::JUDGES_ANNOTATION) differs, or is missing):
/// its result belongs to another configuration whose name hash it shares, so it is never read,
/// and never deleted either (it is not known to be this resource's).
pub fn foreign_job(observed: &Observed, name: &str, key: &str) -> Option<Gate> {
    let job = observed.job(name)?;
    let judges = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::controller::build::JUDGES_ANNOTATION));
    if judges.map(String::as_str) == Some(key) {
        return None;
    }
    Some(Gate::Failed(
        Reason::NameConflict,
        format!(
            "Job {name} exists but was not made for this configuration (annotation {} is {}, this configuration's is {key}); its result is not read. Delete the Job so that the operator can run its own",
            crate::controller::build::JUDGES_ANNOTATION,
            judges.map_or("absent".to_string(), |j| format!("{j:?}")),
        ),
    ))
}

/// The state of the Job `name`, with the termination message of its pod's container
/// `container` once it finished (no other container's message is ever read).
pub fn job_state(observed: &Observed, name: &str, container: &str) -> JobState {
    state_of(observed.job(name), &observed.pods_of_job(name), container)
}

/// The state of `job` read with `pods` as its pods (see [`job_state`]).
pub fn state_of(
    job: Option<&k8s_openapi::api::batch::v1::Job>,
    pods: &[&Pod],
    container: &str,
) -> JobState {
    let Some(job) = job else {
        return JobState::Missing;
    };
    let status = job.status.clone().unwrap_or_default();
    let succeeded = status.succeeded.unwrap_or(0) > 0;
    let failed = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Failed" && c.status == "True");
    if !succeeded && !failed {
        return JobState::Running;
    }
    let message = termination_message(pods.iter().copied(), container);
    if succeeded {
        JobState::Succeeded(message)
    } else {
        // No pod message (a deadline ended it before its pod ran, or the pod is gone): the
        // Job's own Failed condition says why.
        JobState::Failed(message.or_else(|| failed_condition(job)))
    }
}

/// Whether the Job `name` finished while the pods seen of it hold no termination message of
/// `container`: the Job and Pod caches are not in step (a lagging Pod watch, a relist), or the
/// pod is gone. Its result is then read from the pods as the API server has them now, a view at
/// least as new as the Job's completion, never from the older one.
pub fn needs_fresh_pods(observed: &Observed, name: &str, container: &str) -> bool {
    let finished = matches!(
        job_state(observed, name, container),
        JobState::Succeeded(_) | JobState::Failed(_)
    );
    finished && termination_message(observed.pods_of_job(name).into_iter(), container).is_none()
}

/// `<reason>: <message>` of a Job's Failed condition.
fn failed_condition(job: &k8s_openapi::api::batch::v1::Job) -> Option<String> {
    let c = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")?;
    Some(format!(
        "{}: {}",
        c.reason.as_deref().unwrap_or("Failed"),
        c.message.as_deref().unwrap_or("no message")
    ))
}

/// Why a Job's pod cannot make progress: a waiting reason of one of its containers that needs a
/// person (image, configuration, start), or the scheduler's refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodTrouble {
    /// Condition reason for it.
    pub reason: Reason,
    /// The pod, the container, the kubelet's or scheduler's reason and message.
    pub message: String,
}

/// The condition reason for a container waiting reason, if it is one a person must act on.
fn waiting_reason(kubelet_reason: &str) -> Option<Reason> {
    use crate::api::Reason;
    Some(match kubelet_reason {
        "ErrImagePull"
        | "ImagePullBackOff"
        | "InvalidImageName"
        | "ErrImageNeverPull"
        | "RegistryUnavailable"
        | "SignatureValidationFailed" => Reason::ImagePullFailed,
        "CreateContainerConfigError" => Reason::ContainerConfigError,
        "CreateContainerError"
        | "RunContainerError"
        | "CrashLoopBackOff"
        | "PreStartHookError"
        | "PostStartHookError" => Reason::ContainerStartFailed,
        _ => return None,
    })
}

/// What keeps a Job's pod from running, if anything a person must act on.
pub fn pod_trouble(pod: &Pod) -> Option<PodTrouble> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    if let Some(why) = unschedulable(pod) {
        return Some(PodTrouble {
            reason: Reason::PodUnschedulable,
            message: format!("pod {name} cannot be scheduled: {why}"),
        });
    }
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|cs| {
            let w = cs.state.as_ref()?.waiting.as_ref()?;
            let kubelet_reason = w.reason.as_deref()?;
            let reason = waiting_reason(kubelet_reason)?;
            Some(PodTrouble {
                reason,
                message: format!(
                    "pod {name}, container {}, is waiting: {kubelet_reason}: {}",
                    cs.name,
                    w.message.as_deref().unwrap_or("no message").trim()
                ),
            })
        })
}

/// How these pods' containers ended (`; container engine: OOMKilled, exit code 137`), so a Job
/// whose pod was killed from outside says so; empty when none has ended.
/// What a set of a run's pods shows, read once for the decisions that take it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodsSeen {
    /// The containers that ended, and how (empty: none), as [`containers_ended`] says it.
    pub ended: String,
    /// Why one of them cannot be placed, if so.
    pub unschedulable: Option<String>,
    /// When each engine that started started.
    pub engine_started: Vec<Timestamp>,
    /// Whether the engine or the judge of any of them ever started.
    pub ever_started: bool,
    /// How many are not being deleted.
    pub present: usize,
}

impl PodsSeen {
    /// What `pods` show.
    pub fn of(pods: &[&Pod]) -> Self {
        Self {
            ended: containers_ended(pods),
            unschedulable: unschedulable_of(pods.iter().copied()),
            engine_started: pods
                .iter()
                .filter_map(|p| started_at(p, build::ENGINE_CONTAINER))
                .collect(),
            ever_started: pods.iter().any(|p| {
                [build::ENGINE_CONTAINER, build::JUDGE_CONTAINER]
                    .iter()
                    .any(|c| started_at(p, c).is_some())
            }),
            present: pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count(),
        }
    }
}

/// The containers of `pods` that ended, and how, as a message tail (empty: none).
pub fn containers_ended(pods: &[&Pod]) -> String {
    let ended: Vec<String> = pods
        .iter()
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .filter_map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            Some(format!(
                "container {}: {}exit code {}",
                c.name,
                t.reason
                    .as_deref()
                    .map(|r| format!("{r}, "))
                    .unwrap_or_default(),
                t.exit_code
            ))
        })
        .collect();
    if ended.is_empty() {
        String::new()
    } else {
        format!("; {}", ended.join("; "))
    }
}

/// Termination message of the newest terminated container named `container` of these pods.
pub fn termination_message<'a>(
    pods: impl Iterator<Item = &'a Pod>,
    container: &str,
) -> Option<String> {
    let mut best: Option<(String, String)> = None;
    for pod in pods {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default();
        for cs in statuses.into_iter().filter(|cs| cs.name == container) {
            if let Some(t) = cs.state.and_then(|s| s.terminated) {
                let at = t.finished_at.map(|f| f.0.to_string()).unwrap_or_default();
                if let Some(msg) = t.message.filter(|m| !m.trim().is_empty()) {
                    if best.as_ref().is_none_or(|(b, _)| at > *b) {
                        best = Some((at, msg));
                    }
                }
            }
        }
    }
    best.map(|(_, m)| m)
}

/// The scheduler's message when a pod cannot be placed.
pub fn unschedulable(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Pending") {
        return None;
    }
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| c.message.clone().unwrap_or_else(|| "no node fits".into()))
}

/// Why the scheduler finds no room for `pods`, in the words of one of them: the least of their
/// messages, so that the same pods give the same words in whatever order they are listed (the
/// pods of one gang carry different ones: the first names the nodes that do not fit, the rest
/// that the gang's minimum is not met).
pub fn unschedulable_of<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> Option<String> {
    pods.into_iter().filter_map(unschedulable).min()
}

/// When the pod's container `container` started running, if it did.
pub fn started_at(pod: &Pod, container: &str) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter(|cs| cs.name == container)
        .find_map(|cs| {
            let state = cs.state.as_ref()?;
            state
                .running
                .as_ref()
                .and_then(|r| r.started_at.as_ref())
                .or_else(|| {
                    state
                        .terminated
                        .as_ref()
                        .and_then(|t| t.started_at.as_ref())
                })
                .map(|t| t.0)
        })
}

/// A container status that ended with `exit_code` for `reason` (test fixture shared by the
/// decide modules' tests).
#[cfg(test)]
pub(crate) fn ended_container(
    name: &str,
    exit_code: i32,
    reason: &str,
) -> k8s_openapi::api::core::v1::ContainerStatus {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                reason: Some(reason.into()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Reason;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "flash-verify-abc-x1"}, "status": status}),
        )
        .expect("pod")
    }

    fn waiting(reason: &str, message: &str) -> Pod {
        pod(json!({"phase": "Pending", "containerStatuses": [{
            "name": "verify", "image": "op:1", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}}]}))
    }

    fn unplaced(message: &str) -> Pod {
        pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable", "message": message}]}),
        )
    }

    #[test]
    fn a_gang_says_why_it_waits_in_the_same_words_whatever_the_order_of_its_pods() {
        let nodes = unplaced("0/12 nodes are available: 6 Insufficient nvidia.com/gpu.");
        let gang = unplaced("minCount (2) cannot be satisfied: 0 scheduled, 1 remaining");
        let placed = pod(json!({"phase": "Running"}));
        let words = unschedulable_of([&gang, &placed, &nodes]);
        assert_eq!(words, unschedulable_of([&nodes, &gang]));
        assert_eq!(words, unschedulable(&nodes));
        assert_eq!(unschedulable_of([&placed]), None);
    }

    #[test]
    fn every_waiting_reason_of_a_job_pod_has_its_own_condition_reason() {
        for (waiting_reason, expected) in [
            ("ErrImagePull", Reason::ImagePullFailed),
            ("ImagePullBackOff", Reason::ImagePullFailed),
            ("InvalidImageName", Reason::ImagePullFailed),
            ("CreateContainerConfigError", Reason::ContainerConfigError),
            ("CreateContainerError", Reason::ContainerStartFailed),
            ("RunContainerError", Reason::ContainerStartFailed),
            ("CrashLoopBackOff", Reason::ContainerStartFailed),
        ] {
            let p = waiting(waiting_reason, "secret \"hub-token\" not found");
            let trouble = pod_trouble(&p).unwrap_or_else(|| panic!("{waiting_reason} surfaces"));
            assert_eq!(trouble.reason, expected, "{waiting_reason}");
            assert!(
                trouble.message.contains(waiting_reason)
                    && trouble.message.contains("secret \"hub-token\" not found")
                    && trouble.message.contains("flash-verify-abc-x1")
                    && trouble.message.contains("container verify"),
                "{}",
                trouble.message
            );
        }
        assert_eq!(pod_trouble(&waiting("ContainerCreating", "")), None);
        assert_eq!(pod_trouble(&waiting("PodInitializing", "")), None);
    }

    #[test]
    fn an_unschedulable_job_pod_names_the_schedulers_message() {
        let p = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable",
            "message": "0/7 nodes are available: pod has unbound immediate PersistentVolumeClaims."}]}),
        );
        let trouble = pod_trouble(&p).expect("unschedulable surfaces");
        assert_eq!(trouble.reason, Reason::PodUnschedulable);
        assert!(trouble
            .message
            .contains("unbound immediate PersistentVolumeClaims"));
        let running = pod(json!({"phase": "Running"}));
        assert_eq!(pod_trouble(&running), None);
    }

    #[test]
    fn a_job_that_failed_without_a_pod_message_says_why_from_its_condition() {
        let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
            "metadata": {"name": "flash-fetch-abc"},
            "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}]}
        }))
        .expect("job");
        let observed = Observed {
            jobs: vec![job],
            ..Observed::default()
        };
        assert_eq!(
            job_state(&observed, "flash-fetch-abc", "fetch"),
            JobState::Failed(Some(
                "DeadlineExceeded: Job was active longer than specified deadline".into()
            ))
        );
    }

    fn terminated(name: &str, message: &str, at: &str) -> serde_json::Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": 0, "message": message,
                                         "startedAt": at, "finishedAt": at}}})
    }

    #[test]
    fn the_message_comes_from_the_named_container_only() {
        // The engine container ends last and leaves a forged summary; the judge's is read.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"containerStatuses": [
                terminated("engine", r#"{"result":"Passed"}"#, "2026-01-01T00:00:09Z"),
                terminated("judge", r#"{"result":"Failed"}"#, "2026-01-01T00:00:05Z"),
            ]}
        }))
        .unwrap();
        assert_eq!(
            termination_message(std::iter::once(&pod), "judge").as_deref(),
            Some(r#"{"result":"Failed"}"#)
        );
        assert_eq!(termination_message(std::iter::once(&pod), "verify"), None);
        assert_eq!(
            started_at(&pod, "engine").map(|t| t.to_string()),
            Some("2026-01-01T00:00:09Z".to_string())
        );
        assert_eq!(started_at(&pod, "other"), None);
    }
}
