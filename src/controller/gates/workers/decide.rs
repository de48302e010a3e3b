//! The workers stage's pure parts: groups as observed (revision, index, health, currency) for the
//! rollout planner, and the WorkersReady gate from every role's progress.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use k8s_openapi::jiff::Timestamp;

use crate::api::{labels, Reason, RoleStatus};
use crate::controller::build::capacity_need;
use crate::controller::gang::partial_placement;
use crate::controller::gates::jobs::unschedulable_of;
use crate::controller::gates::workers::rollout::{self, Group, Health, Progress};
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;
use crate::controller::{build, pods};

/// The partial-placement watchdog's clock: a group partly placed for longer than `timeout` at
/// `now` is deleted whole.
#[derive(Clone, Copy, Debug)]
pub struct Watchdog {
    /// `--partial-group-timeout`.
    pub timeout: std::time::Duration,
    /// The pass's time.
    pub now: Timestamp,
}

/// Observed groups of one role: each (revision, index) with its pods and health.
pub fn group_views<'a>(
    pods: &'a [Pod],
    role: &str,
    specs: &BTreeMap<String, ValidatedDeployment>,
    watchdog: Watchdog,
) -> Vec<(Group, Vec<&'a Pod>)> {
    let mut buckets: BTreeMap<(String, i32), Vec<&Pod>> = BTreeMap::new();
    for pod in pods {
        let l = pod.labels();
        if l.get(labels::ROLE).map(String::as_str) != Some(role) {
            continue;
        }
        let (Some(revision), Some(index)) = (
            l.get(labels::REVISION),
            l.get(labels::GROUP).and_then(|g| g.parse::<i32>().ok()),
        ) else {
            continue;
        };
        buckets
            .entry((revision.clone(), index))
            .or_default()
            .push(pod);
    }
    buckets
        .into_iter()
        .map(|((revision, index), members)| {
            let at = specs.get(&revision);
            let role_spec = at.and_then(|d| d.spec.roles.iter().find(|r| r.name == role));
            let expected = at
                .zip(role_spec)
                .map(|(d, r)| build::group_pods(d, r, index, &revision));
            let current = expected.as_ref().is_none_or(|want| {
                want.iter().all(|w| {
                    members.iter().any(|m| {
                        m.name_any() == w.name_any()
                            && build::applied_hash(*m) == build::applied_hash(w)
                    })
                })
            });
            let need = || {
                at.zip(role_spec)
                    .map(|(d, r)| capacity_need(&d.spec, r))
                    .unwrap_or_else(|| "devices".into())
            };
            let place = Place {
                role,
                revision: &revision,
                index,
            };
            let health = health(&place, &members, expected.as_deref(), need, watchdog);
            (
                Group {
                    revision,
                    index,
                    current,
                    health,
                },
                members,
            )
        })
        .collect()
}

/// Where a group is: its role, revision and index.
struct Place<'a> {
    role: &'a str,
    revision: &'a str,
    index: i32,
}

/// A group's health from its members and the pods it should have (`expected`; `None` when its
/// revision's spec is not kept): terminating, broken (a rank being deleted, ended or missing),
/// waiting for devices (partly placed for too long: stranded), ready, or starting.
fn health(
    place: &Place<'_>,
    members: &[&Pod],
    expected: Option<&[Pod]>,
    need: impl Fn() -> String,
    watchdog: Watchdog,
) -> Health {
    let Place {
        role,
        revision,
        index,
    } = *place;
    let terminating = |p: &&Pod| p.metadata.deletion_timestamp.is_some();
    let ended = |p: &&Pod| {
        matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Failed" | "Succeeded")
        )
    };
    let complete = expected.is_none_or(|want| {
        want.iter()
            .all(|w| members.iter().any(|m| m.name_any() == w.name_any()))
    });
    let group = format!("group {}-{index} of role {role}", rollout::short(revision));
    if members.iter().all(terminating) {
        Health::Terminating
    } else if members.iter().any(terminating) || members.iter().any(ended) || !complete {
        let missing: Vec<String> = expected
            .iter()
            .copied()
            .flatten()
            .filter(|w| !members.iter().any(|m| m.name_any() == w.name_any()))
            .map(|w| rank_of(w).to_string())
            .collect();
        let mut why: Vec<String> = members.iter().filter_map(|p| rank_trouble(p)).collect();
        if !missing.is_empty() {
            why.push(format!("rank {} missing", missing.join(", ")));
        }
        Health::Broken(format!("{group} is replaced whole: {}", why.join("; ")))
    } else if let Some(why) = unschedulable_of(members.iter().copied()) {
        let need = need();
        let expected_pods = expected.map_or(members.len(), <[Pod]>::len);
        match partial_placement(members, expected_pods) {
            Some(p) if p.age(watchdog.now) >= watchdog.timeout => Health::Stranded(format!(
                "{group} was partly placed ({}/{} pods bound) for {} s (--partial-group-timeout {} s): deleted whole to free its devices, then placed again; it needs {need}; scheduler: {}",
                p.bound,
                p.total,
                p.age(watchdog.now).as_secs(),
                watchdog.timeout.as_secs(),
                p.why
            )),
            Some(p) => Health::Unschedulable(format!(
                "{group} is partly placed ({}/{} pods bound since {}; deleted whole once partly placed for {} s); it needs {need}; scheduler: {}",
                p.bound,
                p.total,
                p.since,
                watchdog.timeout.as_secs(),
                p.why
            )),
            None => Health::Unschedulable(format!("{group} needs {need}; scheduler: {why}")),
        }
    } else if members.iter().all(|p| pods::pod_ready(p)) {
        Health::Ready
    } else {
        Health::Starting
    }
}

fn rank_of(pod: &Pod) -> &str {
    pod.labels().get(labels::RANK).map_or("?", String::as_str)
}

/// What is wrong with one rank of a group, if anything: being deleted, or ended (with the
/// container's reason and exit code), and on which node.
fn rank_trouble(pod: &Pod) -> Option<String> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .map(|n| format!(" on node {n}"))
        .unwrap_or_default();
    let rank = rank_of(pod);
    if pod.metadata.deletion_timestamp.is_some() {
        // Who is deleting it, when Kubernetes says (eviction, preemption, a node gone).
        let by = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
            })
            .map(|c| {
                format!(
                    " ({}{})",
                    c.reason.as_deref().unwrap_or("disrupted"),
                    c.message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_default();
        return Some(format!("rank {rank} is being deleted{node}{by}"));
    }
    let status = pod.status.as_ref()?;
    let phase = status.phase.as_deref()?;
    if !matches!(phase, "Failed" | "Succeeded") {
        return None;
    }
    let ended = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.clone());
    let detail = match (ended, status.reason.as_deref()) {
        (Some(t), _) => format!(
            "{}exit code {}",
            t.reason.map(|r| format!("{r}, ")).unwrap_or_default(),
            t.exit_code
        ),
        (None, Some(reason)) => reason.to_string(),
        (None, None) => "no container status".to_string(),
    };
    Some(format!("rank {rank} ended {phase} ({detail}){node}"))
}

/// The partial-placement watchdog's record of one role after a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementRetry {
    /// Partly placed groups deleted in a row (0: none since every group was last placed).
    pub retries: i32,
    /// When the last one was deleted.
    pub last: Option<Timestamp>,
    /// Why new groups must wait, while the backoff runs.
    pub hold: Option<String>,
    /// How long the backoff still runs.
    pub wait: Option<std::time::Duration>,
}

/// Carries the role's retry record forward: `stranded` groups deleted in this pass count up and
/// restart the backoff. (A role whose groups all became ready clears it: see the caller.)
pub fn placement_retry(
    role: &str,
    previous: Option<&RoleStatus>,
    stranded: usize,
    now: Timestamp,
) -> PlacementRetry {
    let before = previous.and_then(|p| p.placement_retries).unwrap_or(0);
    let (retries, last) = if stranded > 0 {
        (
            before.saturating_add(i32::try_from(stranded).unwrap_or(i32::MAX)),
            Some(now),
        )
    } else {
        (
            before,
            previous.and_then(|p| p.last_placement_retry.as_ref().map(|t| t.0)),
        )
    };
    let mut out = PlacementRetry {
        retries,
        last,
        hold: None,
        wait: None,
    };
    if let (true, Some(last)) = (retries > 0, last) {
        let backoff = crate::controller::gang::retry_backoff(retries);
        let elapsed: std::time::Duration = now
            .duration_since(last)
            .try_into()
            .unwrap_or(std::time::Duration::ZERO);
        if elapsed < backoff {
            let at = last
                .checked_add(backoff)
                .map_or_else(|_| "later".to_string(), |t| t.to_string());
            out.hold = Some(format!(
                "{retries} partly placed group(s) of role {role} deleted in a row (see the GroupPartlyPlaced events); new groups are placed again at {at} (backoff {} s)",
                backoff.as_secs()
            ));
            out.wait = Some(backoff - elapsed);
        }
    }
    out
}

/// The workers' gate from every role's progress: Passed when every role is complete; else the
/// most pressing role's reason (capacity, then rollout, then the rest) with every role's message.
pub fn workers_gate(statuses: &[RoleStatus], progress: &[Progress]) -> Gate {
    let summary = statuses
        .iter()
        .map(|s| format!("{} {}/{}", s.name, s.ready_groups, s.desired_groups))
        .collect::<Vec<_>>()
        .join(", ");
    // Held as the spec asks: every role is, since the switch is the deployment's.
    let held: Vec<(Reason, &str)> = progress
        .iter()
        .filter_map(|p| match p {
            Progress::Suspended(m) => Some((Reason::Suspended, m.as_str())),
            Progress::Paused(m) => Some((Reason::Paused, m.as_str())),
            _ => None,
        })
        .collect();
    if let Some((reason, _)) = held.first() {
        let said = held.iter().map(|(_, m)| *m).collect::<Vec<_>>().join("; ");
        return Gate::Held(*reason, format!("{said}; ready serving groups: {summary}"));
    }
    let mut pending: Vec<(u8, Reason, &str)> = Vec::new();
    for (p, s) in progress.iter().zip(statuses) {
        match p {
            Progress::Complete | Progress::Partitioned(_) => {}
            Progress::Paused(_) | Progress::Suspended(_) => {}
            Progress::WaitingForCapacity(m) => pending.push((0, Reason::WaitingForCapacity, m)),
            Progress::Frozen(m) => pending.push((1, Reason::ServingWithdrawn, m)),
            Progress::RollingOut(m) => pending.push((2, Reason::RollingOut, m)),
            Progress::HoldingServing(m) if s.ready_groups < s.desired_groups => {
                pending.push((3, Reason::GroupsNotReady, m));
            }
            Progress::HoldingServing(_) => {}
            Progress::Converging(m) => pending.push((3, Reason::GroupsNotReady, m)),
        }
    }
    pending.sort_by_key(|(rank, _, _)| *rank);
    match pending.first() {
        None => Gate::Passed(
            Reason::GroupsReady,
            format!("ready serving groups: {summary}"),
        ),
        Some((_, reason, _)) => Gate::Progressing(
            *reason,
            format!(
                "{}; ready serving groups: {summary}",
                pending
                    .iter()
                    .map(|(_, _, m)| *m)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn did() -> ValidatedDeployment {
        crate::controller::gates::spec::validate::validate(&raw(), &Default::default())
            .expect("valid")
    }

    fn raw() -> crate::api::DeepInferDeployment {
        serde_json::from_value(json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferDeployment",
            "metadata": {"name": "flash", "namespace": "serving", "uid": "u-1"},
            "spec": {
                "model": {"name": "m", "license": "mit",
                          "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
                "runtime": {"image": "r.example/e@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                            "commit": "0123456"},
                "accelerator": {"type": "NVIDIA"},
                "roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}],
                "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
            }
        }))
        .expect("valid")
    }

    fn with_status(mut pod: Pod, phase: &str, conditions: &[(&str, &str, Option<&str>)]) -> Pod {
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s, reason)| PodCondition {
                        type_: (*t).into(),
                        status: (*s).into(),
                        reason: reason.map(Into::into),
                        message: reason.map(|_| {
                            "0/4 nodes are available: 4 Insufficient nvidia.com/gpu".into()
                        }),
                        ..PodCondition::default()
                    })
                    .collect(),
            ),
            ..PodStatus::default()
        });
        pod
    }

    fn ready(pod: Pod) -> Pod {
        with_status(pod, "Running", &[("Ready", "True", None)])
    }

    #[test]
    fn groups_of_two_revisions_are_told_apart_with_their_health() {
        let d = did();
        let rev = build::revision(&d.spec);
        let role = &d.spec.roles[0];
        let specs = BTreeMap::from([(rev.clone(), d.clone())]);
        let mut pods: Vec<Pod> = build::group_pods(&d, role, 0, &rev)
            .into_iter()
            .map(ready)
            .collect();
        // Group 1: one rank only (the other crashed and is gone).
        pods.push(ready(build::group_pods(&d, role, 1, &rev).remove(0)));
        // Group 2: cannot be placed.
        pods.extend(build::group_pods(&d, role, 2, &rev).into_iter().map(|p| {
            with_status(
                p,
                "Pending",
                &[("PodScheduled", "False", Some("Unschedulable"))],
            )
        }));
        // An older revision's group, whose spec is not kept: judged by its pods alone.
        let mut old = build::group_pods(&d, role, 0, "0ldrev0000");
        for p in &mut old {
            p.metadata.deletion_timestamp =
                Some(Time("2026-01-01T00:00:00Z".parse().expect("time")));
        }
        pods.extend(old);
        let views = group_views(&pods, "worker", &specs, watchdog(0));
        let health: Vec<(String, i32, Health)> = views
            .iter()
            .map(|(g, _)| (g.revision.clone(), g.index, g.health.clone()))
            .collect();
        assert_eq!(health[0], ("0ldrev0000".into(), 0, Health::Terminating));
        assert_eq!(health[1], (rev.clone(), 0, Health::Ready));
        assert_eq!(
            health[2],
            (
                rev.clone(),
                1,
                Health::Broken(format!(
                    "group {}-1 of role worker is replaced whole: rank 1 missing",
                    &rev[..5]
                ))
            ),
            "a missing rank breaks the group, and the message says which"
        );
        let Health::Unschedulable(why) = &health[3].2 else {
            panic!("{:?}", health[3]);
        };
        assert!(
            why.contains(
                "2 pod(s) × 8 nvidia.com/gpu (16 devices) inside one nvidia.com/gpu.clique domain"
            ) && why.contains("Insufficient nvidia.com/gpu"),
            "{why}"
        );
    }

    fn watchdog(now: i64) -> Watchdog {
        Watchdog {
            timeout: std::time::Duration::from_secs(120),
            now: Timestamp::from_second(now).expect("time"),
        }
    }

    /// Group 0 with rank 0 bound at t=1000 and rank 1 unschedulable.
    fn partly_placed(d: &ValidatedDeployment, rev: &str) -> Vec<Pod> {
        let mut pods = build::group_pods(d, &d.spec.roles[0], 0, rev);
        let at = Time(Timestamp::from_second(1_000).expect("time"));
        pods[0] = with_status(
            pods[0].clone(),
            "Pending",
            &[("PodScheduled", "True", None)],
        );
        let bound = &mut pods[0];
        if let (Some(spec), Some(c)) = (
            bound.spec.as_mut(),
            bound
                .status
                .as_mut()
                .and_then(|s| s.conditions.as_mut())
                .and_then(|c| c.first_mut()),
        ) {
            spec.node_name = Some("nvidia-0".into());
            c.last_transition_time = Some(at);
        }
        pods[1] = with_status(
            pods[1].clone(),
            "Pending",
            &[("PodScheduled", "False", Some("Unschedulable"))],
        );
        pods
    }

    #[test]
    fn a_partly_placed_group_waits_out_the_timeout_then_is_stranded_with_the_reason() {
        let d = did();
        let rev = build::revision(&d.spec);
        let specs = BTreeMap::from([(rev.clone(), d.clone())]);
        let pods = partly_placed(&d, &rev);
        let early = group_views(&pods, "worker", &specs, watchdog(1_060));
        let Health::Unschedulable(why) = &early[0].0.health else {
            panic!("{:?}", early[0].0.health);
        };
        assert!(
            why.contains("partly placed (1/2 pods bound since 1970-01-01T00:16:40Z;"),
            "{why}"
        );
        let late = group_views(&pods, "worker", &specs, watchdog(1_120));
        let Health::Stranded(why) = &late[0].0.health else {
            panic!("{:?}", late[0].0.health);
        };
        assert!(
            why.starts_with(&format!(
                "group {}-0 of role worker was partly placed (1/2 pods bound) for 120 s",
                &rev[..5]
            )) && why.contains("deleted whole to free its devices")
                && why.contains("2 pod(s) × 8 nvidia.com/gpu (16 devices) inside one nvidia.com/gpu.clique domain")
                && why.contains("Insufficient nvidia.com/gpu"),
            "{why}"
        );
    }

    #[test]
    fn each_stranded_group_counts_a_retry_and_new_groups_wait_the_backoff() {
        let t = |s: i64| Timestamp::from_second(s).expect("time");
        let first = placement_retry("worker", None, 1, t(1_000));
        assert_eq!((first.retries, first.last), (1, Some(t(1_000))));
        assert!(
            first
                .hold
                .as_deref()
                .is_some_and(|h| h.contains("backoff 15 s")),
            "{first:?}"
        );
        assert_eq!(first.wait, Some(std::time::Duration::from_secs(15)));
        let previous = RoleStatus {
            placement_retries: Some(1),
            last_placement_retry: Some(Time(t(1_000))),
            ..RoleStatus::default()
        };
        let waiting = placement_retry("worker", Some(&previous), 0, t(1_010));
        assert_eq!(waiting.wait, Some(std::time::Duration::from_secs(5)));
        let after = placement_retry("worker", Some(&previous), 0, t(1_016));
        assert_eq!(
            (after.retries, after.hold),
            (1, None),
            "the backoff is over"
        );
        let second = placement_retry("worker", Some(&previous), 1, t(1_100));
        assert_eq!(second.retries, 2);
        assert_eq!(second.wait, Some(std::time::Duration::from_secs(30)));
    }

    #[test]
    fn a_broken_group_says_which_rank_failed_how_and_where() {
        use k8s_openapi::api::core::v1::PodSpec;
        let d = did();
        let rev = build::revision(&d.spec);
        let specs = BTreeMap::from([(rev.clone(), d.clone())]);
        let mut pods: Vec<Pod> = build::group_pods(&d, &d.spec.roles[0], 0, &rev)
            .into_iter()
            .map(ready)
            .collect();
        let oom = &mut pods[1];
        oom.spec = Some(PodSpec {
            node_name: Some("nvidia-2".into()),
            ..oom.spec.clone().unwrap_or_default()
        });
        oom.status = Some(PodStatus {
            phase: Some("Failed".into()),
            container_statuses: Some(vec![crate::controller::gates::jobs::ended_container(
                "engine",
                137,
                "OOMKilled",
            )]),
            ..PodStatus::default()
        });
        let views = group_views(&pods, "worker", &specs, watchdog(0));
        assert_eq!(
            views[0].0.health,
            Health::Broken(format!(
                "group {}-0 of role worker is replaced whole: rank 1 ended Failed (OOMKilled, exit code 137) on node nvidia-2",
                &rev[..5]
            ))
        );
        // A rank being deleted by Kubernetes says by whom.
        let gone = &mut pods[1];
        gone.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(5).expect("time")));
        gone.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some("DeletionByPodGC".into()),
                message: Some("PodGC: node no longer exists".into()),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        let views = group_views(&pods, "worker", &specs, watchdog(0));
        assert_eq!(
            views[0].0.health,
            Health::Broken(format!(
                "group {}-0 of role worker is replaced whole: rank 1 is being deleted on node nvidia-2 (DeletionByPodGC: PodGC: node no longer exists)",
                &rev[..5]
            ))
        );
    }

    #[test]
    fn a_group_built_from_another_template_is_not_current() {
        let d = did();
        let rev = build::revision(&d.spec);
        let mut spec = d.spec.clone();
        spec.runtime.readiness_probe = Some(Default::default());
        let probed = d.with_spec(spec, &Default::default()).expect("valid");
        assert_eq!(
            build::revision(&probed.spec),
            rev,
            "probes are not part of the revision"
        );
        let pods: Vec<Pod> = build::group_pods(&d, &d.spec.roles[0], 0, &rev)
            .into_iter()
            .map(ready)
            .collect();
        let specs = BTreeMap::from([(rev.clone(), probed)]);
        let views = group_views(&pods, "worker", &specs, watchdog(0));
        assert!(!views[0].0.current, "rolls without a new judgement");
        assert_eq!(views[0].0.health, Health::Ready);
    }

    fn role(name: &str, ready: i32, desired: i32) -> RoleStatus {
        RoleStatus {
            name: name.into(),
            desired_groups: desired,
            ready_groups: ready,
            ..RoleStatus::default()
        }
    }

    #[test]
    fn the_gate_names_the_most_pressing_role_and_counts_every_role() {
        let statuses = [role("prefill", 2, 2), role("decode", 1, 2)];
        let gate = workers_gate(
            &statuses,
            &[
                Progress::RollingOut("rolling out 5e2c1: 1/2 groups updated".into()),
                Progress::WaitingForCapacity("decode: group 5e2c1-1 needs devices".into()),
            ],
        );
        let Gate::Progressing(reason, message) = gate else {
            panic!("progressing");
        };
        assert_eq!(reason, Reason::WaitingForCapacity);
        assert!(
            message.contains("rolling out 5e2c1: 1/2 groups updated"),
            "{message}"
        );
        assert!(
            message.ends_with("ready serving groups: prefill 2/2, decode 1/2"),
            "{message}"
        );
        let gate = workers_gate(&statuses[..1], &[Progress::Complete]);
        assert_eq!(
            gate,
            Gate::Passed(
                Reason::GroupsReady,
                "ready serving groups: prefill 2/2".into()
            )
        );
        let gate = workers_gate(
            &statuses[..1],
            &[Progress::RollingOut(
                "rolling out 5e2c1: 1/2 groups updated".into(),
            )],
        );
        assert!(matches!(gate, Gate::Progressing(r, _) if r == Reason::RollingOut));
    }
}
