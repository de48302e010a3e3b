//! The gates, one folder each: every gate owns what only it reads, decides and builds, and plans
//! purely from what the pass observed to a [`Plan`]: what the gate found (its condition and
//! status) and the [`Act`]s that carry it out, for the executor
//! ([`crate::controller::executor`]). A gate reads the snapshot and never changes it; the objects
//! several gates build come from [`crate::controller::build`]. [`crate::controller::pass`] plans
//! them in order. This file holds what every gate reads: the operator's settings and when to
//! look again.

pub mod acceptance;
pub mod checkpoint;
#[cfg(test)]
pub mod fixture;
pub mod housekeeping;
pub mod jobs;
pub mod licence;
pub mod rejected;
pub mod scaling;
pub mod spec;
pub mod workers;

use std::time::Duration;

use crate::api::Reason;
use crate::controller::act::Act;
use crate::controller::build::JobDeadlines;
use crate::controller::gates::housekeeping::retention::Retention;
use crate::controller::gates::licence::LicenceWithdrawal;
use crate::controller::gates::spec::validate::DeviceLimits;
use crate::controller::status::{Gate, Outcome};

/// What one stage found, and the acts that carry it out.
#[derive(Debug)]
pub struct Plan<'a, T> {
    /// The stage's finding (gate, status).
    pub found: T,
    /// Writes, in the order they must be made.
    pub acts: Vec<Act<'a>>,
}

impl<'a, T> Plan<'a, T> {
    /// A finding that needs no write.
    pub fn only(found: T) -> Self {
        Self {
            found,
            acts: Vec::new(),
        }
    }

    /// A finding and its writes.
    pub fn with(found: T, acts: Vec<Act<'a>>) -> Self {
        Self { found, acts }
    }
}

/// The operator settings stages read.
#[derive(Clone, Copy, Debug)]
pub struct Settings<'a> {
    /// Image of this operator for its Jobs.
    pub operator_image: &'a str,
    /// Deadlines of the fetch and verify Jobs.
    pub deadlines: &'a JobDeadlines,
    /// Hub endpoints a fetch Job may use.
    pub allowed_hub_endpoints: &'a [String],
    /// The proxies a fetch Job reaches the hub through.
    pub hub_proxy: &'a crate::controller::build::HubProxy,
    /// What is kept of evidence and finished Jobs.
    pub retention: Retention,
    /// Devices per node, per accelerator type.
    pub limits: &'a DeviceLimits,
    /// How long a group may stay partly placed.
    pub partial_group_timeout: Duration,
    /// What a closed licence gate does to the pods.
    pub license_withdrawal: LicenceWithdrawal,
    /// The key every judgement recorded is proved with.
    pub verdict_key: &'a crate::controller::proof::VerdictKey,
    /// Whether the domain of each node an acceptance run ran on is read and recorded.
    pub record_node_domains: bool,
}

impl<'a> Settings<'a> {
    /// The act that creates `job` with the time to live of a finished Job
    /// (`--finished-job-ttl-seconds`, [`Retention::ttl_at_creation`]): the TTL controller removes
    /// it and its pods that long after it finished, and the operator writes nothing to it once
    /// created. A Job removed before its verdict was recorded (the operator down all that time)
    /// is run again.
    pub fn create_job<'o>(&self, mut job: k8s_openapi::api::batch::v1::Job) -> Act<'o> {
        if let Some(ttl) = self.retention.ttl_at_creation() {
            job.spec
                .get_or_insert_with(Default::default)
                .ttl_seconds_after_finished = Some(ttl);
        }
        Act::create(job)
    }
}

/// Reasons of a gate whose Job's pod cannot make progress (see
/// [`crate::controller::gates::checkpoint::decide::running_job_gate`]).
const STUCK_POD_REASONS: [Reason; 4] = [
    Reason::ImagePullFailed,
    Reason::ContainerConfigError,
    Reason::ContainerStartFailed,
    Reason::PodUnschedulable,
];

/// How soon to look at a running Job or progressing workers again if no event arrives. Changes
/// of the Jobs, of their pods and of worker pods start a pass at once; this look only catches
/// what no event announces, so at a thousand resources it stays a small share of the passes.
pub const RECHECK: Duration = Duration::from_secs(120);

/// How long to wait before looking again when nothing else will trigger a reconcile.
pub const RESYNC: Duration = Duration::from_secs(300);

/// How soon a pass whose stage met an API failure is tried again.
pub const RETRY: Duration = Duration::from_secs(10);

/// The sooner of two looks (`None`: none asked for).
pub fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When to look again if no event arrives: `retry` after an API failure, else from the gates.
pub fn next_look(outcome: &Outcome, retry: Option<Duration>) -> Duration {
    if let Some(after) = retry {
        return after;
    }
    let after = next_look_after(outcome);
    outcome.wake_after.map_or(after, |wake| wake.min(after))
}

fn next_look_after(outcome: &Outcome) -> Duration {
    // A child the API server refused waits for a change to the resource: looking again on a
    // timer would only send it again.
    if outcome
        .stalled()
        .is_some_and(|(reason, _)| reason == Reason::ChildRejected)
    {
        return RESYNC;
    }
    for gate in [&outcome.checkpoint, &outcome.acceptance] {
        match gate {
            Gate::Failed(reason, _)
                if [
                    Reason::MissingDependency,
                    Reason::ClaimNotBound,
                    Reason::TokenSecretNotAllowed,
                ]
                .contains(reason) =>
            {
                return Duration::from_secs(15)
            }
            // A Job's pod stuck on its image, configuration or placement may recover once the
            // cause is fixed outside the resource; its pod's changes trigger no reconcile.
            Gate::Failed(reason, _) if STUCK_POD_REASONS.contains(reason) => return RECHECK,
            // A queue moves when other deployments' runs end, which no event here announces.
            Gate::Progressing(reason, _) if *reason == Reason::AcceptanceQueued => {
                return Duration::from_secs(10)
            }
            Gate::Progressing(..) => return RECHECK,
            _ => {}
        }
    }
    if matches!(outcome.workers, Gate::Progressing(..)) {
        return RECHECK;
    }
    RESYNC
}

/// How soon to retry a pass whose gate met an API failure: soon, unless the API server refused
/// an object as invalid (the gate stalled; retrying the same object would fail the same way).
pub fn retry_after(gate: &Gate) -> Option<Duration> {
    (!matches!(gate, Gate::Failed(..))).then_some(RETRY)
}

/// Withdrawn service is news that outranks the workers' progress.
pub fn withdrawn_or(withdrawn: Option<&String>, gate: Gate) -> Gate {
    match withdrawn {
        Some(message) => Gate::Progressing(Reason::ServingWithdrawn, message.clone()),
        None => gate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(checkpoint: Gate, acceptance: Gate, workers: Gate) -> Outcome {
        Outcome {
            checkpoint,
            acceptance,
            workers,
            ..Outcome::default()
        }
    }

    #[test]
    fn the_next_look_follows_what_no_event_announces() {
        let passed = || Gate::Passed(Reason::Complete, String::new());
        let cases = [
            // (checkpoint, acceptance, workers, retry) → requeue after
            (passed(), passed(), passed(), None, RESYNC),
            (passed(), passed(), passed(), Some(RETRY), RETRY),
            (
                Gate::Failed(Reason::ClaimNotBound, String::new()),
                Gate::NotReached,
                Gate::NotReached,
                None,
                Duration::from_secs(15),
            ),
            (
                passed(),
                Gate::Failed(Reason::ImagePullFailed, String::new()),
                passed(),
                None,
                RECHECK,
            ),
            (
                passed(),
                Gate::Progressing(Reason::AcceptanceQueued, String::new()),
                passed(),
                None,
                Duration::from_secs(10),
            ),
            (
                passed(),
                Gate::Progressing(Reason::AcceptanceRunning, String::new()),
                passed(),
                None,
                RECHECK,
            ),
            (
                passed(),
                passed(),
                Gate::Progressing(Reason::RollingOut, String::new()),
                None,
                RECHECK,
            ),
        ];
        for (checkpoint, acceptance, workers, retry, want) in cases {
            let o = outcome(checkpoint, acceptance, workers);
            assert_eq!(next_look(&o, retry), want, "{o:?}");
        }
    }

    #[test]
    fn a_watchdog_deadline_shortens_the_next_look() {
        let mut o = outcome(
            Gate::Passed(Reason::Verified, String::new()),
            Gate::Passed(Reason::AcceptanceSucceeded, String::new()),
            Gate::Progressing(Reason::RollingOut, String::new()),
        );
        o.wake_after = Some(Duration::from_secs(7));
        assert_eq!(next_look(&o, None), Duration::from_secs(7));
    }

    #[test]
    fn only_a_stall_waits_for_a_change_after_an_api_failure() {
        assert_eq!(
            retry_after(&Gate::Progressing(Reason::ApplyFailed, String::new())),
            Some(RETRY)
        );
        assert_eq!(
            retry_after(&Gate::Failed(Reason::ChildRejected, String::new())),
            None
        );
    }
}
