//! Pure computation of a pod's status from its containers' states, as a kubelet would report
//! it: phase, container statuses, and the PodScheduled/Initialized/ContainersReady/Ready
//! conditions (Ready also requires every readiness gate's condition to be True).

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use deepinfer_e2e::faults::{self, PodFaults};

/// How long a simulated crash-looping container waits before its next restart.
pub const SIMULATED_BACKOFF: Duration = Duration::from_secs(10);

/// The IP the simulated nodes report for themselves and host-network pods.
pub const HOST_IP: &str = "127.0.0.1";

/// A container's terminated state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Time>,
    pub finished_at: Time,
}

impl Terminated {
    /// `Completed` for exit code 0, else `Error`, as container runtimes report it.
    pub fn reason_for(exit_code: i32) -> &'static str {
        if exit_code == 0 {
            "Completed"
        } else {
            "Error"
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Time,
    },
    Terminated(Terminated),
}

/// What is known about one container, simulated or executed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub state: State,
    pub last: Option<Terminated>,
    pub restart_count: i32,
    /// Whether a running container counts as started: its startup probe passed, or it has
    /// none (reported containers: whenever running).
    pub started: bool,
    /// Whether a running container counts as ready: its readiness probe passes, or it has
    /// none (reported containers: whenever running).
    pub ready: bool,
}

impl Report {
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        Report {
            state: State::Waiting {
                reason: reason.to_string(),
                message,
            },
            last: None,
            restart_count: 0,
            started: false,
            ready: false,
        }
    }
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

fn find_status<'a>(
    statuses: Option<&'a Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    statuses.into_iter().flatten().find(|s| s.name == name)
}

/// The report of a container that is not executed, honouring the fail annotation; the second
/// value asks for a re-sync after that long (the next simulated restart).
pub fn simulated_report(
    pod: &Pod,
    name: &str,
    is_init: bool,
    now: &Time,
) -> (Report, Option<Duration>) {
    let status = pod.status.as_ref();
    if is_init {
        let report = Report {
            state: State::Terminated(Terminated {
                exit_code: 0,
                reason: Terminated::reason_for(0).into(),
                message: None,
                started_at: Some(now.clone()),
                finished_at: now.clone(),
            }),
            last: None,
            restart_count: 0,
            started: false,
            ready: false,
        };
        return (report, None);
    }
    let existing = find_status(status.and_then(|s| s.container_statuses.as_ref()), name);
    let restart_count = existing.map_or(0, |s| s.restart_count);
    let Some(exit_code) = PodFaults::of(pod.metadata.annotations.as_ref()).fail_exit_code else {
        let report = Report {
            state: State::Running {
                started_at: now.clone(),
            },
            last: existing.and_then(|s| last_terminated(s.last_state.as_ref())),
            restart_count,
            started: true,
            ready: true,
        };
        return (report, None);
    };
    let restarts = match restart_policy(pod) {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    };
    let terminated = |at: &Time| Terminated {
        exit_code,
        reason: Terminated::reason_for(exit_code).into(),
        message: Some(format!("simulated failure ({})", faults::POD_FAIL)),
        started_at: None,
        finished_at: at.clone(),
    };
    if !restarts {
        let report = Report {
            state: State::Terminated(terminated(now)),
            last: existing.and_then(|s| last_terminated(s.last_state.as_ref())),
            restart_count,
            started: false,
            ready: false,
        };
        return (report, None);
    }
    // Crash loop: one more restart each back-off period, counted from the last failure.
    let previous = existing
        .filter(|s| {
            matches!(&s.state, Some(ContainerState { waiting: Some(w), .. })
                if w.reason.as_deref() == Some("CrashLoopBackOff"))
        })
        .and_then(|s| last_terminated(s.last_state.as_ref()));
    let (last, restart_count, wait) = match previous {
        Some(last) => {
            let elapsed = now.0.as_second() - last.finished_at.0.as_second();
            let backoff = SIMULATED_BACKOFF.as_secs() as i64;
            if elapsed >= backoff {
                (terminated(now), restart_count + 1, SIMULATED_BACKOFF)
            } else {
                let left = Duration::from_secs((backoff - elapsed).max(1) as u64);
                (last, restart_count, left)
            }
        }
        None => (terminated(now), restart_count + 1, SIMULATED_BACKOFF),
    };
    let report = Report {
        state: State::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: Some(format!(
                "back-off {}s restarting failed container={name}",
                SIMULATED_BACKOFF.as_secs()
            )),
        },
        last: Some(last),
        restart_count,
        started: false,
        ready: false,
    };
    (report, Some(wait))
}

/// The starting report of an executed container, from what the pod's status already says
/// (the agent may have restarted): a container that ended for good under the restart policy
/// is reported terminated and must not run again (the API server also refuses to move it
/// back); any other keeps its restart count and waits to be started.
pub fn resumed_report(pod: &Pod, name: &str, is_init: bool) -> Report {
    let status = pod.status.as_ref();
    let statuses = if is_init {
        status.and_then(|s| s.init_container_statuses.as_ref())
    } else {
        status.and_then(|s| s.container_statuses.as_ref())
    };
    let existing = find_status(statuses, name);
    let restart_count = existing.map_or(0, |s| s.restart_count);
    let ended = existing.and_then(|s| last_terminated(s.state.as_ref()));
    let final_end = ended.filter(|t| match (is_init, restart_policy(pod)) {
        (true, _) => t.exit_code == 0,
        (false, "Never") => true,
        (false, "OnFailure") => t.exit_code == 0,
        (false, _) => false,
    });
    match final_end {
        Some(t) => Report {
            state: State::Terminated(t),
            last: existing.and_then(|s| last_terminated(s.last_state.as_ref())),
            restart_count,
            started: false,
            ready: false,
        },
        None => Report {
            restart_count,
            ..Report::waiting("ContainerCreating", None)
        },
    }
}

/// What a kubelet reports for a container whose image cannot be pulled.
pub fn image_pull_backoff(image: &str) -> Report {
    let host = image.split('/').next().unwrap_or(image);
    Report::waiting(
        "ImagePullBackOff",
        Some(format!(
            "Back-off pulling image \"{image}\": ErrImagePull: failed to resolve reference \"{image}\": dial tcp: lookup {host}: no such host"
        )),
    )
}

fn last_terminated(state: Option<&ContainerState>) -> Option<Terminated> {
    let t = state?.terminated.as_ref()?;
    Some(Terminated {
        exit_code: t.exit_code,
        reason: t.reason.clone().unwrap_or_default(),
        message: t.message.clone(),
        started_at: t.started_at.clone(),
        finished_at: t.finished_at.clone()?,
    })
}

fn terminated_state(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        reason: Some(t.reason.clone()).filter(|r| !r.is_empty()),
        message: t.message.clone().filter(|m| !m.is_empty()),
        started_at: t.started_at.clone(),
        finished_at: Some(t.finished_at.clone()),
        ..Default::default()
    }
}

fn container_state(state: &State) -> ContainerState {
    match state {
        State::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone().filter(|m| !m.is_empty()),
            }),
            ..Default::default()
        },
        State::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at.clone()),
            }),
            ..Default::default()
        },
        State::Terminated(t) => ContainerState {
            terminated: Some(terminated_state(t)),
            ..Default::default()
        },
    }
}

/// Keeps the timestamps already reported when the state itself did not change, so that a
/// re-sync of an unchanged pod produces an identical status (and no write).
fn carry_timestamps(desired: &mut ContainerState, existing: Option<&ContainerState>) {
    let Some(existing) = existing else {
        return;
    };
    if let (Some(d), Some(e)) = (&mut desired.running, &existing.running) {
        d.started_at = e.started_at.clone();
    }
    if let (Some(d), Some(e)) = (&mut desired.terminated, &existing.terminated) {
        if d.exit_code == e.exit_code && d.reason == e.reason {
            d.started_at = e.started_at.clone();
            d.finished_at = e.finished_at.clone();
        }
    }
}

fn container_status(
    pod: &Pod,
    name: &str,
    report: &Report,
    ready: bool,
    existing: Option<&ContainerStatus>,
) -> ContainerStatus {
    let image = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .find(|c| c.name == name)
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let mut state = container_state(&report.state);
    let mut last_state = report.last.as_ref().map(|t| ContainerState {
        terminated: Some(terminated_state(t)),
        ..Default::default()
    });
    // A restart starts a new container: its timestamps are new ones.
    let same_run = existing.filter(|e| e.restart_count == report.restart_count);
    carry_timestamps(&mut state, same_run.and_then(|e| e.state.as_ref()));
    if let Some(last) = &mut last_state {
        carry_timestamps(last, same_run.and_then(|e| e.last_state.as_ref()));
    }
    let running = report_is_running(report);
    ContainerStatus {
        name: name.to_string(),
        image_id: format!("sim://{image}"),
        image,
        container_id: Some(format!("sim://{uid}/{name}")),
        ready,
        started: Some(running && report.started),
        restart_count: report.restart_count,
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ..Default::default()
    }
}

fn report_is_running(r: &Report) -> bool {
    matches!(r.state, State::Running { .. })
}

/// The pod phase from its containers' states, following the kubelet's rules.
fn phase(
    restart_policy: &str,
    init: &[(String, Report)],
    main: &[(String, Report)],
    initialized: bool,
) -> &'static str {
    if !initialized {
        let failed_for_good = restart_policy == "Never"
            && init
                .iter()
                .any(|(_, r)| matches!(&r.state, State::Terminated(t) if t.exit_code != 0));
        return if failed_for_good { "Failed" } else { "Pending" };
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for (_, r) in main {
        match &r.state {
            State::Running { .. } => running += 1,
            State::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            // A container waiting to be restarted has stopped once already.
            State::Waiting { .. } => match &r.last {
                Some(t) => {
                    stopped += 1;
                    if t.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                None => waiting += 1,
            },
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped == main.len() && !main.is_empty() {
        match restart_policy {
            "Never" if succeeded < stopped => "Failed",
            "Never" => "Succeeded",
            "OnFailure" if succeeded == stopped => "Succeeded",
            _ => "Running",
        }
    } else {
        "Pending"
    }
}

fn condition(type_: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.filter(|_| !ok).map(str::to_string),
        message: message.filter(|_| !ok),
        ..Default::default()
    }
}

/// The pod's QoS class, by the kubelet's rule: Guaranteed when every container sets CPU and
/// memory limits equal to its requests, BestEffort when none sets any, Burstable otherwise.
pub fn qos_class(pod: &Pod) -> &'static str {
    let containers: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .collect();
    let amount = |c: &k8s_openapi::api::core::v1::Container, limits: bool, what: &str| {
        let r = c.resources.as_ref()?;
        let m = if limits {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        };
        m.and_then(|m| m.get(what)).map(|q| q.0.clone())
    };
    let any = containers.iter().any(|c| {
        ["cpu", "memory"]
            .iter()
            .any(|w| amount(c, false, w).is_some() || amount(c, true, w).is_some())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|w| {
            let limit = amount(c, true, w);
            // A request defaults to its limit.
            limit.is_some() && amount(c, false, w).is_none_or(|r| Some(r) == limit)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The status the agent reports for a pod given its containers' reports; `pod_ip` is empty
/// while the pod has no address yet.
pub fn pod_status(
    pod: &Pod,
    init: &[(String, Report)],
    main: &[(String, Report)],
    pod_ip: &str,
    now: &Time,
) -> PodStatus {
    let existing = pod.status.as_ref();
    let not_ready_fault = PodFaults::of(pod.metadata.annotations.as_ref()).not_ready;
    let pending_init: Vec<&str> = init
        .iter()
        .filter(|(_, r)| !matches!(&r.state, State::Terminated(t) if t.exit_code == 0))
        .map(|(n, _)| n.as_str())
        .collect();
    let initialized = pending_init.is_empty();
    let main = waiting_for_init(main, initialized);
    let ready_of = |r: &Report| report_is_running(r) && r.ready && !not_ready_fault;
    let phase = phase(restart_policy(pod), init, &main, initialized);
    let unready: Vec<&str> = main
        .iter()
        .filter(|(_, r)| !ready_of(r))
        .map(|(n, _)| n.as_str())
        .collect();
    let mut conditions = conditions(
        pod,
        &pending_init,
        &unready,
        matches!(phase, "Succeeded" | "Failed"),
    );
    stamp(&mut conditions, pod, now);
    let statuses = |reports: &[(String, Report)], init: bool| {
        let existing = existing.and_then(|s| {
            if init {
                s.init_container_statuses.as_ref()
            } else {
                s.container_statuses.as_ref()
            }
        });
        (!reports.is_empty()).then(|| {
            reports
                .iter()
                .map(|(n, r)| {
                    let ready = if init {
                        matches!(&r.state, State::Terminated(t) if t.exit_code == 0)
                    } else {
                        ready_of(r)
                    };
                    container_status(pod, n, r, ready, find_status(existing, n))
                })
                .collect()
        })
    };
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: Some(HOST_IP.to_string()),
        host_ips: Some(vec![HostIP {
            ip: HOST_IP.to_string(),
        }]),
        observed_generation: pod.metadata.generation,
        qos_class: Some(qos_class(pod).to_string()),
        // No address before the pod's sandbox is up (an empty `pod_ip`).
        pod_ip: (!pod_ip.is_empty()).then(|| pod_ip.to_string()),
        pod_ips: (!pod_ip.is_empty()).then(|| {
            vec![PodIP {
                ip: pod_ip.to_string(),
            }]
        }),
        start_time: existing
            .and_then(|s| s.start_time.clone())
            .or_else(|| Some(now.clone())),
        init_container_statuses: statuses(init, true),
        container_statuses: statuses(&main, false),
        ..Default::default()
    }
}

/// The main containers' reports: as given once the pod is initialized, else waiting in
/// `PodInitializing` (main containers do not start before every init container completed).
fn waiting_for_init(main: &[(String, Report)], initialized: bool) -> Vec<(String, Report)> {
    main.iter()
        .map(|(n, r)| {
            if initialized {
                (n.clone(), r.clone())
            } else {
                let mut waiting = Report::waiting("PodInitializing", None);
                waiting.restart_count = r.restart_count;
                (n.clone(), waiting)
            }
        })
        .collect()
}

/// Why the pod's readiness gates hold it unready: the first gate whose condition is missing or
/// not True.
fn gate_problem(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    pod.spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .find_map(|gate| {
            let found =
                conditions.and_then(|cs| cs.iter().find(|c| c.type_ == gate.condition_type));
            match found {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{}\" does not exist.",
                    gate.condition_type
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate \"{}\" is not \"True\", but {}",
                    gate.condition_type, c.status
                )),
                Some(_) => None,
            }
        })
}

/// The conditions the agent owns, from the init containers still to complete, the unready
/// main containers, whether the pod completed, and its readiness gates.
fn conditions(
    pod: &Pod,
    pending_init: &[&str],
    unready: &[&str],
    completed: bool,
) -> Vec<PodCondition> {
    let containers_ready = unready.is_empty() && !completed;
    let not_ready_reason = if completed {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let unready_message =
        (!completed).then(|| format!("containers with unready status: [{}]", unready.join(" ")));
    let ready = if !containers_ready {
        condition(
            "Ready",
            false,
            Some(not_ready_reason),
            unready_message.clone(),
        )
    } else if let Some(problem) = gate_problem(pod) {
        condition(
            "Ready",
            false,
            Some("ReadinessGatesNotReady"),
            Some(problem),
        )
    } else {
        condition("Ready", true, None, None)
    };
    vec![
        condition("PodScheduled", true, None, None),
        // As the kubelet reports it since 1.29: the sandbox exists (until a finished pod's is
        // torn down).
        condition("PodReadyToStartContainers", !completed, None, None),
        condition(
            "Initialized",
            pending_init.is_empty(),
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                pending_init.join(" ")
            )),
        ),
        condition(
            "ContainersReady",
            containers_ready,
            Some(not_ready_reason),
            unready_message,
        ),
        ready,
    ]
}

/// Stamps each condition's transition time (kept from the pod's status while its status did
/// not change, else now), last probe time and observed generation.
fn stamp(conditions: &mut [PodCondition], pod: &Pod, now: &Time) {
    let existing = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    for c in conditions {
        let previous = existing.and_then(|cs| cs.iter().find(|e| e.type_ == c.type_));
        c.last_transition_time = match previous {
            Some(p) if p.status == c.status => p.last_transition_time.clone(),
            _ => Some(now.clone()),
        };
        c.last_probe_time = previous.and_then(|p| p.last_probe_time.clone());
        c.observed_generation = pod.metadata.generation;
    }
}

/// The strategic-merge patch that writes `desired`. Conditions are merged by type, so a
/// reason or message that no longer applies must be removed explicitly with `null`.
pub fn status_patch(uid: Option<&str>, desired: &PodStatus) -> serde_json::Value {
    let mut status = serde_json::to_value(desired).unwrap_or_default();
    if let Some(conditions) = status.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        for condition in conditions.iter_mut().filter_map(|c| c.as_object_mut()) {
            for field in ["reason", "message"] {
                condition.entry(field).or_insert(serde_json::Value::Null);
            }
        }
    }
    // The uid makes the write fail instead of landing on a new pod of the same name.
    serde_json::json!({ "metadata": { "uid": uid }, "status": status })
}

/// Whether `desired` says something the pod's current status does not (only the fields the
/// agent owns are compared; other conditions, such as readiness gates, belong to others).
pub fn differs(current: Option<&PodStatus>, desired: &PodStatus) -> bool {
    let Some(current) = current else {
        return true;
    };
    let ours = |s: &PodStatus| {
        let conditions: Vec<_> = desired
            .conditions
            .iter()
            .flatten()
            .map(|d| {
                s.conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == d.type_)
                    .map(|c| {
                        (
                            c.status.clone(),
                            c.reason.clone(),
                            c.message.clone(),
                            c.last_transition_time.clone(),
                        )
                    })
            })
            .collect();
        serde_json::json!({
            "phase": s.phase,
            "conditions": serde_json::to_value(&conditions).unwrap_or_default(),
            "hostIP": s.host_ip,
            "podIP": s.pod_ip,
            "startTime": s.start_time,
            "init": s.init_container_statuses,
            "main": s.container_statuses,
        })
    };
    ours(current) != ours(desired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"nodeName": "n", "containers": [{"name": "a", "image": "img:1"}]},
        });
        merge(&mut base, extra);
        serde_json::from_value(base).unwrap()
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    #[test]
    fn qos_class_follows_the_kubelet_rule() {
        let with = |resources: serde_json::Value| {
            pod(
                json!({"spec": {"containers": [{"name": "a", "image": "img:1", "resources": resources}]}}),
            )
        };
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&with(json!({"limits": {"nvidia.com/gpu": "8"}}))),
            "BestEffort",
            "extended resources do not count"
        );
        assert_eq!(
            qos_class(&with(json!({"requests": {"cpu": "1", "memory": "1Gi"}}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&with(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed",
            "requests default to limits"
        );
        assert_eq!(
            qos_class(&with(
                json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
            )),
            "Burstable"
        );
    }

    #[test]
    fn status_carries_the_fields_a_current_kubelet_reports() {
        let p = pod(json!({"metadata": {"generation": 3}}));
        let now = t(100);
        let s = simulate(&p, &now);
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
        assert!(s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .all(|c| c.observed_generation == Some(3)));
        assert_eq!(s.host_ips.as_ref().map(Vec::len), Some(1));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    fn cond<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap()
    }

    fn simulate(p: &Pod, now: &Time) -> PodStatus {
        let spec = p.spec.as_ref().unwrap();
        let init: Vec<_> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), simulated_report(p, &c.name, true, now).0))
            .collect();
        let main: Vec<_> = spec
            .containers
            .iter()
            .map(|c| (c.name.clone(), simulated_report(p, &c.name, false, now).0))
            .collect();
        pod_status(p, &init, &main, "10.244.0.2", now)
    }

    /// Applies a status as the API server would store it (strategic merge of conditions).
    fn store(p: &mut Pod, s: PodStatus) {
        let mut conditions = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        for c in s.conditions.clone().unwrap() {
            conditions.retain(|e| e.type_ != c.type_);
            conditions.push(c);
        }
        p.status = Some(PodStatus {
            conditions: Some(conditions),
            ..s
        });
    }

    #[test]
    fn simulated_pod_runs_ready_and_resync_is_stable() {
        let mut p = pod(json!({"spec": {"initContainers": [{"name": "i", "image": "x"}]}}));
        let s = simulate(&p, &t(100));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert!(s.container_statuses.as_ref().unwrap()[0].ready);
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.2"));
        assert!(differs(p.status.as_ref(), &s));
        store(&mut p, s);
        let again = simulate(&p, &t(200));
        assert!(
            !differs(p.status.as_ref(), &again),
            "an unchanged pod must not be rewritten"
        );
    }

    #[test]
    fn readiness_gates_hold_ready_until_true() {
        let mut p =
            pod(json!({"spec": {"readinessGates": [{"conditionType": "example.com/gate"}]}}));
        let s = simulate(&p, &t(100));
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(
            cond(&s, "Ready").reason.as_deref(),
            Some("ReadinessGatesNotReady")
        );
        store(&mut p, s);
        let mut gate = PodCondition {
            type_: "example.com/gate".into(),
            status: "False".into(),
            ..Default::default()
        };
        p.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(gate.clone());
        assert_eq!(cond(&simulate(&p, &t(110)), "Ready").status, "False");
        gate.status = "True".into();
        let conditions = p.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions.retain(|c| c.type_ != gate.type_);
        conditions.push(gate);
        let s = simulate(&p, &t(120));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert!(differs(p.status.as_ref(), &s));
        // The Ready transition is stamped now; the unchanged conditions keep their time.
        assert_eq!(cond(&s, "Ready").last_transition_time, Some(t(120)));
        assert_eq!(
            cond(&s, "ContainersReady").last_transition_time,
            Some(t(100))
        );
    }

    #[test]
    fn not_ready_fault_keeps_containers_unready() {
        let p = pod(json!({"metadata": {"annotations": {faults::POD_NOT_READY: "true"}}}));
        let s = simulate(&p, &t(1));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "ContainersReady").status, "False");
        assert_eq!(
            cond(&s, "Ready").reason.as_deref(),
            Some("ContainersNotReady")
        );
    }

    #[test]
    fn fail_fault_with_restart_never_fails_the_pod() {
        let p = pod(
            json!({"metadata": {"annotations": {faults::POD_FAIL: "3"}}, "spec": {"restartPolicy": "Never"}}),
        );
        let s = simulate(&p, &t(1));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let term = s.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!(term.exit_code, 3);
        assert_eq!(term.reason.as_deref(), Some("Error"));
        assert_eq!(
            cond_of(&simulate(&p, &t(1)), "Ready").reason.as_deref(),
            Some("PodCompleted")
        );
    }

    fn cond_of(s: &PodStatus, type_: &str) -> PodCondition {
        cond(s, type_).clone()
    }

    #[test]
    fn a_pod_without_its_sandbox_reports_no_address_and_then_its_own() {
        let p = pod(json!({"spec": {"restartPolicy": "Always"}}));
        let (r, _) = simulated_report(&p, "a", false, &t(100));
        let s = pod_status(&p, &[], &[("a".into(), r.clone())], "", &t(100));
        assert_eq!((s.pod_ip, s.pod_ips), (None, None));
        let s = pod_status(&p, &[], &[("a".into(), r)], "10.244.0.3", &t(100));
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.3"));
    }

    #[test]
    fn fail_fault_with_restarts_crash_loops() {
        let mut p = pod(
            json!({"metadata": {"annotations": {faults::POD_FAIL: "2"}}, "spec": {"restartPolicy": "OnFailure"}}),
        );
        let (r, wait) = simulated_report(&p, "a", false, &t(100));
        assert_eq!(r.restart_count, 1);
        assert_eq!(wait, Some(SIMULATED_BACKOFF));
        let s = pod_status(&p, &[], &[("a".into(), r)], "ip", &t(100));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        store(&mut p, s);
        // Within the back-off nothing changes.
        let (r, wait) = simulated_report(&p, "a", false, &t(105));
        assert_eq!(r.restart_count, 1);
        assert_eq!(wait, Some(Duration::from_secs(5)));
        assert!(!differs(
            p.status.as_ref(),
            &pod_status(&p, &[], &[("a".into(), r)], "ip", &t(105))
        ));
        // After it, one more restart.
        let (r, _) = simulated_report(&p, "a", false, &t(111));
        assert_eq!(r.restart_count, 2);
    }

    #[test]
    fn patch_clears_stale_condition_fields() {
        let p = pod(json!({}));
        let patch = status_patch(Some("u"), &simulate(&p, &t(1)));
        assert_eq!(patch["metadata"]["uid"], "u");
        let ready = patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert!(ready.get("message").unwrap().is_null());
        assert!(ready.get("reason").unwrap().is_null());
    }

    #[test]
    fn finished_containers_are_not_run_again() {
        let terminated = |code: i32| json!({"terminated": {"exitCode": code, "reason": "x", "finishedAt": "2026-01-01T00:00:00Z"}});
        let p = |policy: &str, code: i32| {
            pod(json!({"spec": {"restartPolicy": policy}, "status": {
                "initContainerStatuses": [{"name": "i", "image": "x", "imageID": "", "ready": true,
                    "restartCount": 0, "state": terminated(0)}],
                "containerStatuses": [{"name": "a", "image": "x", "imageID": "", "ready": false,
                    "restartCount": 2, "state": terminated(code)}]}}))
        };
        let ended = |r: &Report| matches!(r.state, State::Terminated(_));
        assert!(ended(&resumed_report(&p("Always", 0), "i", true)));
        assert!(ended(&resumed_report(&p("Never", 1), "a", false)));
        assert!(ended(&resumed_report(&p("OnFailure", 0), "a", false)));
        let again = resumed_report(&p("OnFailure", 1), "a", false);
        assert!(!ended(&again));
        assert_eq!(again.restart_count, 2);
        assert!(!ended(&resumed_report(&p("Always", 0), "a", false)));
        assert!(!ended(&resumed_report(&pod(json!({})), "a", false)));
    }

    #[test]
    fn phase_follows_restart_policy() {
        let term = |code| Report {
            state: State::Terminated(Terminated {
                exit_code: code,
                reason: Terminated::reason_for(code).into(),
                message: None,
                started_at: None,
                finished_at: t(1),
            }),
            last: None,
            restart_count: 0,
            started: false,
            ready: false,
        };
        let running = Report {
            state: State::Running { started_at: t(1) },
            last: None,
            restart_count: 0,
            started: true,
            ready: true,
        };
        let main = |rs: Vec<Report>| {
            rs.into_iter()
                .map(|r| ("c".to_string(), r))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            phase("Never", &[], &main(vec![term(0), term(0)]), true),
            "Succeeded"
        );
        assert_eq!(
            phase("Never", &[], &main(vec![term(0), term(1)]), true),
            "Failed"
        );
        assert_eq!(
            phase("Never", &[], &main(vec![term(0), running.clone()]), true),
            "Running"
        );
        assert_eq!(
            phase("OnFailure", &[], &main(vec![term(0)]), true),
            "Succeeded"
        );
        assert_eq!(phase("Always", &[], &main(vec![term(0)]), true), "Running");
        let waiting = Report::waiting("ContainerCreating", None);
        assert_eq!(
            phase("Never", &[], &main(vec![waiting, running]), true),
            "Pending"
        );
        let failed_init = main(vec![term(1)]);
        assert_eq!(phase("Never", &failed_init, &[], false), "Failed");
        assert_eq!(phase("OnFailure", &failed_init, &[], false), "Pending");
    }

    #[test]
    fn main_containers_wait_for_init_containers() {
        let p = pod(json!({"spec": {"initContainers": [{"name": "i", "image": "x"}]}}));
        let init = vec![("i".to_string(), Report::waiting("ContainerCreating", None))];
        let main = vec![("a".to_string(), simulated_report(&p, "a", false, &t(1)).0)];
        let s = pod_status(&p, &init, &main, "ip", &t(1));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").status, "False");
        let waiting = s.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("PodInitializing"));
    }
}
