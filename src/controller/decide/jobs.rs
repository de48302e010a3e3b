//! Reading Jobs and their pods: state, termination message, scheduling and start time.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::controller::observe::Observed;

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

/// The state of the Job `name`, with the termination message of its pod's container
/// `container` once it finished (no other container's message is ever read).
pub fn job_state(observed: &Observed, name: &str, container: &str) -> JobState {
    let Some(job) = observed.job(name) else {
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
    let message = termination_message(observed.pods_of_job(name).into_iter(), container);
    if succeeded {
        JobState::Succeeded(message)
    } else {
        JobState::Failed(message)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
