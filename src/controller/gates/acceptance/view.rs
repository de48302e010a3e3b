//! The run's Jobs and pods as the pass sees them.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::run::*;
use crate::api::{labels, Reason, ReviewRecord};
use crate::controller::build::{self, RunGroup};
use crate::controller::gates::acceptance::decide::{self as judge};
use crate::controller::gates::jobs::{self, JobState};
use crate::controller::observe::Observed;
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;

/// The run's pods and Jobs as the pass sees them.
pub(super) struct RunView<'v> {
    pub(super) leader: String,
    pub(super) leader_state: JobState,
    pub(super) run_pods: Vec<&'v Pod>,
    pub(super) leader_seen: jobs::PodsSeen,
    pub(super) run_seen: jobs::PodsSeen,
    pub(super) upstream: judge::Upstream,
    pub(super) roles: Vec<String>,
    pub(super) review: Option<ReviewRecord>,
}

impl<'v> RunView<'v> {
    pub(super) fn new(input: &Input<'v>, observed: &'v Observed, groups: &[RunGroup<'_>]) -> Self {
        let did = input.did;
        let leader = groups[0].job(0);
        let others = &groups[1..];
        let leader_pods: Vec<&Pod> = match observed.fresh.job_pods.get(&leader) {
            Some(pods) => pods.iter().collect(),
            None => observed.pods_of_job(&leader),
        };
        let serving = did.spec.acceptance.judges_serving();
        // In serving mode the groups that start first are the candidates: the target's serving
        // group of each role of the run, judged together by a Job of the judge alone.
        let upstream = if serving {
            let candidates: Vec<&Pod> = groups
                .iter()
                .flat_map(|g| candidate_pods(observed, input.revision, &g.role.name))
                .collect();
            judge::Upstream {
                expected: groups
                    .iter()
                    .map(|g| {
                        usize::try_from(build::group_shape(&did.spec, g.role).pods).unwrap_or(0)
                    })
                    .sum(),
                created: !candidates.is_empty(),
                pods: jobs::PodsSeen::of(&candidates),
            }
        } else {
            judge::Upstream {
                expected: others
                    .iter()
                    .map(|g| {
                        usize::try_from(build::group_shape(&did.spec, g.role).pods).unwrap_or(0)
                    })
                    .sum(),
                created: others.iter().any(|g| observed.job(&g.job(0)).is_some()),
                pods: jobs::PodsSeen::of(
                    &others
                        .iter()
                        .flat_map(|g| pods_of(did, observed, g))
                        .collect::<Vec<_>>(),
                ),
            }
        };
        let run_pods: Vec<&Pod> = groups
            .iter()
            .flat_map(|g| pods_of(did, observed, g))
            .collect();
        let mut leader_seen = jobs::PodsSeen::of(&leader_pods);
        if serving {
            // The judge's own start is when a judge alone runs: its deadline counts from there.
            leader_seen.engine_started = leader_pods
                .iter()
                .filter_map(|p| jobs::started_at(p, build::JUDGE_CONTAINER))
                .collect();
        }
        Self {
            leader_state: jobs::state_of(
                observed.job(&leader),
                &leader_pods,
                build::JUDGE_CONTAINER,
            ),
            leader,
            leader_seen,
            run_seen: jobs::PodsSeen::of(&run_pods),
            run_pods,
            upstream,
            roles: groups.iter().map(|g| g.role.name.clone()).collect(),
            // The review decisions on the resource (handed to the judge when the run starts,
            // recorded with its verdict).
            review: ReviewRecord::from_annotations(did.annotations()),
        }
    }

    pub(super) fn judging<'j>(&'j self, input: &'j Input<'_>) -> judge::Judging<'j> {
        judge::Judging {
            revision: input.revision,
            spec_hash: &input.run.spec_hash,
            token: &input.run.token,
            prompts: input
                .run
                .resolved
                .as_ref()
                .map_or(input.did.spec.acceptance.prompts.len(), |r| r.prompts.len()),
            deadline_seconds: build::acceptance_deadline(&input.did.spec),
            roles: &self.roles,
            review: self.review.as_ref(),
            now: input.now,
        }
    }

    /// The gate of a run under way.
    pub(super) fn running(&self, input: &Input<'_>) -> Gate {
        let (revision, leader) = (input.revision, &self.leader);
        let role = &self.roles[0];
        let message = if input.did.spec.acceptance.judges_serving() {
            let candidates = self.roles.join(", ");
            if matches!(self.leader_state, JobState::Missing) {
                format!(
                    "the candidate group(s) of revision {revision} ({candidates}) start, out of service: {} of {} engine(s) running; then Job {leader} judges them through the {role} group's serving endpoint",
                    self.upstream.started(),
                    self.upstream.expected,
                )
            } else {
                format!(
                    "Job {leader} judges the candidate group(s) of revision {revision} ({candidates}) through the {role} group's serving endpoint; they take no traffic until they pass"
                )
            }
        } else if matches!(self.leader_state, JobState::Missing) {
            format!(
                "the acceptance run of revision {revision} starts its {} group(s) first, as they serve: {} of {} engine(s) running; then Job {leader} runs the workload on one {role} group",
                self.roles[1..].join(", "),
                self.upstream.started(),
                self.upstream.expected,
            )
        } else {
            let wired = if self.roles.len() > 1 {
                format!(
                    ", wired to one group of each of {}",
                    self.roles[1..].join(", ")
                )
            } else {
                String::new()
            };
            let pods = input
                .did
                .spec
                .roles
                .iter()
                .find(|r| r.name == *role)
                .map_or(0, |r| build::group_shape(&input.did.spec, r).pods);
            format!(
                "Job {leader} is running the acceptance workload for revision {revision} on one {role} group ({pods} pod(s)){wired}"
            )
        };
        Gate::Progressing(Reason::AcceptanceRunning, message)
    }
}

/// The pods of every rank of one group of the run.
pub(super) fn pods_of<'o>(
    did: &ValidatedDeployment,
    observed: &'o Observed,
    g: &RunGroup<'_>,
) -> Vec<&'o Pod> {
    (0..build::group_shape(&did.spec, g.role).pods)
        .flat_map(|rank| observed.pods_of_job(&g.job(rank)))
        .collect()
}

/// The target's serving pods of `role`: the candidate group of a serving-mode run.
pub(super) fn candidate_pods<'o>(
    observed: &'o Observed,
    revision: &str,
    role: &str,
) -> Vec<&'o Pod> {
    observed
        .workers
        .iter()
        .filter(|p| {
            let l = p.labels();
            l.get(labels::REVISION).map(String::as_str) == Some(revision)
                && l.get(labels::ROLE).map(String::as_str) == Some(role)
        })
        .collect()
}

/// The run waits for devices: the roles whose run group cannot be placed are named, so that
/// their serving groups may make room.
pub(super) fn waiting(
    input: &Input<'_>,
    observed: &Observed,
    groups: &[RunGroup<'_>],
    why: &str,
) -> Found {
    let did = input.did;
    let serving = did.spec.acceptance.judges_serving();
    let waiting: Vec<&RunGroup<'_>> = groups
        .iter()
        .filter(|g| {
            let pods = if serving {
                candidate_pods(observed, input.revision, &g.role.name)
            } else {
                pods_of(did, observed, g)
            };
            pods.iter().any(|p| jobs::unschedulable(p).is_some())
        })
        .collect();
    let need = waiting
        .iter()
        .map(|g| {
            format!(
                "{} {}",
                g.role.name,
                build::capacity_need(&did.spec, g.role)
            )
        })
        .collect::<Vec<_>>()
        .join(" and ");
    Found {
        needs_room: waiting.iter().map(|g| g.role.name.clone()).collect(),
        ..Found::gate(Gate::Progressing(
            Reason::WaitingForCapacity,
            format!(
                "the acceptance run of revision {} waits for devices: it needs {need}; scheduler: {why}. Its deadline starts when it runs; with spec.roles[].rollout.maxUnavailable ≥ 1 one serving group makes room",
                input.revision
            ),
        ))
    }
}
