//! Status stage: the observed outcome of one reconcile pass turned into a deterministic status.
//!
//! `lastTransitionTime` only moves when a condition's status flips, so an unchanged outcome
//! produces an identical status and the controller writes nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::{
    conditions as ct, AcceptanceStatus, CheckpointStatus, DeepInferDeploymentStatus, LicenseRecord,
    Phase, Reason, RoleStatus,
};

/// Outcome of one gate or stage.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Gate {
    /// Not evaluated: an earlier gate has not passed.
    #[default]
    NotReached,
    /// Work in progress (reason, message).
    Progressing(Reason, String),
    /// Needs a change by a person (reason, message): Stalled.
    Failed(Reason, String),
    /// Passed (reason, message).
    Passed(Reason, String),
    /// Held as the spec asks (`spec.paused`, `spec.suspend`): not passed, yet neither in progress
    /// nor stalled (reason, message).
    Held(Reason, String),
}

impl Gate {
    /// Whether the gate passed.
    pub fn passed(&self) -> bool {
        matches!(self, Gate::Passed(..))
    }
}

/// Everything one reconcile pass found out, in pipeline order.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Spec validation; `Failed` stalls everything.
    pub spec: Gate,
    /// Licence gate.
    pub licence_gate: Gate,
    /// Checkpoint fetch and verification.
    pub checkpoint: Gate,
    /// Acceptance of the current revision.
    pub acceptance: Gate,
    /// Worker groups.
    pub workers: Gate,
    /// Revision of the desired running bits.
    pub revision: Option<String>,
    /// Verified checkpoint facts.
    pub checkpoint_status: Option<CheckpointStatus>,
    /// Per-role groups.
    pub roles: Vec<RoleStatus>,
    /// The judgement deciding the acceptance gate (`status.acceptance`).
    pub acceptance_status: Option<AcceptanceStatus>,
    /// Recorded judgements, newest first (`status.judgements`).
    pub judgements: Vec<AcceptanceStatus>,
    /// What was taken out of service in this pass, and why.
    pub withdrawn: Option<String>,
    /// Look again no later than this (a watchdog or backoff deadline of the workers).
    pub wake_after: Option<std::time::Duration>,
    /// The licence gate as this pass saw it (`None`: the pass did not look at it).
    pub licence: Option<LicenceSeen>,
}

/// The licence gate's inputs and verdict in one pass, for `status.license`.
#[derive(Clone, Debug, PartialEq)]
pub struct LicenceSeen {
    /// `spec.model.license`.
    pub license: String,
    /// Value of the `deepinfer.io/license-accepted` annotation, if set.
    pub annotation: Option<String>,
    /// Whether the gate is open.
    pub accepted: bool,
    /// The gate's reason.
    pub reason: Reason,
}

/// `status.license` after a pass: a new record when the gate opens, the old one closed (once)
/// when it closes, otherwise unchanged, so an unchanged gate writes nothing.
fn licence_record(
    previous: Option<&LicenseRecord>,
    seen: Option<&LicenceSeen>,
    now: &Time,
) -> Option<LicenseRecord> {
    let Some(seen) = seen else {
        return previous.cloned();
    };
    let open = previous.filter(|r| r.closed_at.is_none());
    match (seen.accepted, open) {
        (true, Some(r))
            if r.license == seen.license
                && Some(r.annotation.as_str()) == seen.annotation.as_deref() =>
        {
            Some(r.clone())
        }
        (true, _) => Some(LicenseRecord {
            license: seen.license.clone(),
            annotation: seen.annotation.clone().unwrap_or_default(),
            opened_at: now.clone(),
            closed_at: None,
            closed_reason: None,
        }),
        (false, Some(r)) => Some(LicenseRecord {
            closed_at: Some(now.clone()),
            closed_reason: Some(seen.reason.to_string()),
            ..r.clone()
        }),
        (false, None) => previous.cloned(),
    }
}

impl Default for Outcome {
    fn default() -> Self {
        Self {
            spec: Gate::NotReached,
            licence_gate: Gate::NotReached,
            checkpoint: Gate::NotReached,
            acceptance: Gate::NotReached,
            workers: Gate::NotReached,
            revision: None,
            checkpoint_status: None,
            roles: Vec::new(),
            acceptance_status: None,
            judgements: Vec::new(),
            withdrawn: None,
            licence: None,
            wake_after: None,
        }
    }
}

impl Outcome {
    /// The first gate that failed, if any: it stalls the resource.
    pub fn stalled(&self) -> Option<(Reason, &str)> {
        [
            &self.spec,
            &self.licence_gate,
            &self.checkpoint,
            &self.acceptance,
            &self.workers,
        ]
        .into_iter()
        .find_map(|g| match g {
            Gate::Failed(reason, message) => Some((*reason, message.as_str())),
            _ => None,
        })
    }

    /// The gate held as the spec asks, if any (see [`Gate::Held`]).
    fn held(&self) -> Option<(Reason, &str)> {
        [&self.acceptance, &self.workers]
            .into_iter()
            .find_map(|g| match g {
                Gate::Held(reason, message) => Some((*reason, message.as_str())),
                _ => None,
            })
    }

    /// The first gate still in progress, if any.
    fn progressing(&self) -> Option<(Reason, &str)> {
        [
            &self.spec,
            &self.licence_gate,
            &self.checkpoint,
            &self.acceptance,
            &self.workers,
        ]
        .into_iter()
        .find_map(|g| match g {
            Gate::Progressing(reason, message) => Some((*reason, message.as_str())),
            Gate::NotReached => Some((Reason::WaitingForGate, "waiting for an earlier gate")),
            _ => None,
        })
    }

    /// Accepted and every group ready.
    pub fn ready(&self) -> bool {
        self.spec.passed()
            && self.licence_gate.passed()
            && self.checkpoint.passed()
            && self.acceptance.passed()
            && self.workers.passed()
    }

    fn phase(&self) -> Phase {
        if self.ready() {
            return Phase::Ready;
        }
        if matches!(self.spec, Gate::Failed(..)) {
            return Phase::Failed;
        }
        match self.held() {
            Some((Reason::Suspended, _)) => return Phase::Suspended,
            Some(_) => return Phase::Paused,
            None => {}
        }
        if !self.licence_gate.passed() {
            return Phase::Pending;
        }
        if !self.checkpoint.passed() {
            return if matches!(self.checkpoint, Gate::Failed(..)) {
                Phase::Failed
            } else {
                Phase::Verifying
            };
        }
        if !self.acceptance.passed() {
            return if matches!(self.acceptance, Gate::Failed(..)) {
                Phase::Failed
            } else {
                Phase::Accepting
            };
        }
        Phase::Provisioning
    }
}

/// One condition, carrying `lastTransitionTime` forward unless its status flips.
fn condition(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let last = previous.iter().find(|c| c.type_ == type_);
    let last_transition_time = match last {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time,
    }
}

fn gate_condition(
    previous: &[Condition],
    type_: &str,
    gate: &Gate,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let (status, reason, message) = match gate {
        Gate::Passed(r, m) => ("True", *r, m.as_str()),
        Gate::Failed(r, m) | Gate::Progressing(r, m) | Gate::Held(r, m) => {
            ("False", *r, m.as_str())
        }
        Gate::NotReached => (
            "Unknown",
            Reason::WaitingForGate,
            "waiting for an earlier gate to pass",
        ),
    };
    condition(previous, type_, status, reason, message, generation, now)
}

/// The status for `outcome`, given the previous status (for transition times).
pub fn compute(
    previous: Option<&DeepInferDeploymentStatus>,
    outcome: &Outcome,
    generation: Option<i64>,
    now: Time,
) -> DeepInferDeploymentStatus {
    let prev: &[Condition] = previous.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let mut conditions = vec![
        gate_condition(
            prev,
            ct::LICENSE_ACCEPTED,
            &outcome.licence_gate,
            generation,
            &now,
        ),
        gate_condition(
            prev,
            ct::CHECKPOINT_VERIFIED,
            &outcome.checkpoint,
            generation,
            &now,
        ),
        gate_condition(
            prev,
            ct::ACCEPTANCE_PASSED,
            &outcome.acceptance,
            generation,
            &now,
        ),
        gate_condition(prev, ct::WORKERS_READY, &outcome.workers, generation, &now),
    ];
    let stalled = outcome.stalled();
    conditions.push(ready_condition(prev, outcome, generation, &now));
    conditions.push(available_condition(prev, &outcome.roles, generation, &now));
    conditions.push(reconciling_condition(prev, outcome, generation, &now));
    conditions.push(match stalled {
        Some((reason, message)) => {
            condition(prev, ct::STALLED, "True", reason, message, generation, &now)
        }
        None => condition(
            prev,
            ct::STALLED,
            "False",
            Reason::Progressing,
            "not stalled",
            generation,
            &now,
        ),
    });
    DeepInferDeploymentStatus {
        observed_generation: generation,
        phase: Some(outcome.phase()),
        conditions,
        revision: outcome.revision.clone(),
        serving_revision: serving_revision(&outcome.roles, outcome.revision.as_deref()),
        groups: groups(&outcome.roles),
        checkpoint: outcome.checkpoint_status.clone(),
        roles: outcome.roles.clone(),
        acceptance: outcome.acceptance_status.clone(),
        judgements: outcome.judgements.clone(),
        license: licence_record(
            previous.and_then(|p| p.license.as_ref()),
            outcome.licence.as_ref(),
            &now,
        ),
    }
}

/// `Ready`: True once accepted and every serving group is ready; else why not, the stall or
/// hold first, then the acceptance run under way, then whatever is in progress.
fn ready_condition(
    prev: &[Condition],
    outcome: &Outcome,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    if outcome.ready() {
        return condition(
            prev,
            ct::READY,
            "True",
            Reason::Ready,
            "accepted and every serving group is ready",
            generation,
            now,
        );
    }
    let (reason, message) = if let Some(found) = outcome.stalled().or(outcome.held()) {
        found
    } else if !outcome.acceptance.passed() && outcome.checkpoint.passed() {
        match &outcome.acceptance {
            Gate::Progressing(r, m) => (*r, m.as_str()),
            _ => (
                Reason::AwaitingAcceptance,
                "waiting for the acceptance workload to pass",
            ),
        }
    } else {
        outcome
            .progressing()
            .unwrap_or((Reason::Progressing, "reconciling"))
    };
    condition(prev, ct::READY, "False", reason, message, generation, now)
}

/// `Available`: True while every role serves at least the groups its rollout allows
/// ([`RoleStatus::min_available_groups`]), whatever revision is being judged, failed or rolled
/// out: what a Deployment's `Available` says, for on-call and for tools that ask "does it serve".
fn available_condition(
    prev: &[Condition],
    roles: &[RoleStatus],
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let counts = |rs: &[&RoleStatus]| {
        rs.iter()
            .map(|r| {
                format!(
                    "{} {}/{} ready (at least {})",
                    r.name, r.ready_groups, r.desired_groups, r.min_available_groups
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let short: Vec<&RoleStatus> = roles
        .iter()
        .filter(|r| r.ready_groups < r.min_available_groups)
        .collect();
    let (status, reason, message) = if roles.is_empty() {
        (
            "False",
            Reason::MinimumGroupsUnavailable,
            "no serving group: no role is provisioned".to_string(),
        )
    } else if short.is_empty() {
        (
            "True",
            Reason::MinimumGroupsAvailable,
            format!(
                "every role serves at least the groups its rollout allows: {}",
                counts(&roles.iter().collect::<Vec<_>>())
            ),
        )
    } else {
        (
            "False",
            Reason::MinimumGroupsUnavailable,
            format!(
                "fewer ready groups than the rollout allows: {}",
                counts(&short)
            ),
        )
    };
    condition(
        prev,
        ct::AVAILABLE,
        status,
        reason,
        &message,
        generation,
        now,
    )
}

/// `Reconciling`: True while work is in progress; False when done, stalled or held (the hold
/// says why).
fn reconciling_condition(
    prev: &[Condition],
    outcome: &Outcome,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let (status, reason, message) = match (outcome.stalled(), outcome.ready(), outcome.held()) {
        (None, false, Some((reason, message))) => ("False", reason, message),
        (None, false, None) => {
            let (reason, message) = outcome
                .progressing()
                .unwrap_or((Reason::Progressing, "reconciling"));
            ("True", reason, message)
        }
        _ => ("False", Reason::Complete, "no work in progress"),
    };
    condition(
        prev,
        ct::RECONCILING,
        status,
        reason,
        message,
        generation,
        now,
    )
}

/// Characters of the revision `status.servingRevision` shows (as in pod and Service names).
pub const SHORT_REVISION_LENGTH: usize = 5;

/// `status.servingRevision`: the revision most ready groups of all roles are on (each role's
/// `servingRevision` weighted by its ready groups; on a tie `revision`, else the first by
/// name), cut to [`SHORT_REVISION_LENGTH`] characters; `None` while no group is ready.
fn serving_revision(roles: &[RoleStatus], revision: Option<&str>) -> Option<String> {
    let mut ready: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for role in roles.iter().filter(|r| r.ready_groups > 0) {
        if let Some(rev) = role.serving_revision.as_deref() {
            *ready.entry(rev).or_default() += i64::from(role.ready_groups);
        }
    }
    let most = ready.values().copied().max()?;
    let chosen = revision
        .filter(|r| ready.get(r) == Some(&most))
        .or_else(|| ready.iter().find(|(_, n)| **n == most).map(|(r, _)| *r))?;
    Some(chosen.chars().take(SHORT_REVISION_LENGTH).collect())
}

/// `status.groups`: ready over desired serving groups summed over every role (`3/4`); `None`
/// before any role was planned.
fn groups(roles: &[RoleStatus]) -> Option<String> {
    if roles.is_empty() {
        return None;
    }
    let sum = |f: fn(&RoleStatus) -> i32| roles.iter().map(|r| i64::from(f(r))).sum::<i64>();
    Some(format!(
        "{}/{}",
        sum(|r| r.ready_groups),
        sum(|r| r.desired_groups)
    ))
}

/// Conditions whose status or reason changed from `before` to `after`: (type, status, reason, message).
pub fn transitions<'a>(
    before: Option<&DeepInferDeploymentStatus>,
    after: &'a DeepInferDeploymentStatus,
) -> Vec<&'a Condition> {
    after
        .conditions
        .iter()
        .filter(|c| {
            let old = before.and_then(|b| b.conditions.iter().find(|o| o.type_ == c.type_));
            old.is_none_or(|o| o.status != c.status || o.reason != c.reason)
        })
        .collect()
}

/// How long a change of progress alone waits after the resource's last status write: it is
/// written with the next change of anything else, or once this has passed. Progress is what
/// moves while every condition keeps its status: the conditions' reasons and messages (a run
/// waiting for devices, a scheduler's verdict, a rollout's steps), the ready, updated and serving
/// groups and the revision they serve, so a rollout's steps cost one write per hold at most. A
/// condition's status, the phase, the observed generation, the desired groups, the recorded
/// checkpoint, judgements and licence, and any change that is news ([`news`]) are written at
/// once.
pub const PROGRESS_HOLD: std::time::Duration = std::time::Duration::from_secs(30);

/// The longest a change of progress alone waits: each status write of progress alone doubles the
/// hold before the next one (30 s, 1 min, 2 min, 4 min, then 5 min), and any other write resets
/// it, so a long wait (devices, a slow load) costs a handful of writes while every transition is
/// written at once.
pub const LONGEST_PROGRESS_HOLD: std::time::Duration = std::time::Duration::from_secs(300);

/// Why a status was written, as `deepinfer_status_writes_total{cause}` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteCause {
    /// The first status, a condition's status, the phase, or news ([`news`]).
    Transition,
    /// Progress alone, once its hold ran out ([`PROGRESS_HOLD`]).
    Progress,
    /// Anything else: the observed generation, desired groups, the recorded checkpoint,
    /// judgements or licence.
    State,
}

impl WriteCause {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Transition => "transition",
            Self::Progress => "progress",
            Self::State => "state",
        }
    }

    /// Every cause, for the metric's series.
    pub const ALL: [Self; 3] = [Self::Transition, Self::Progress, Self::State];
}

/// When each resource's status (`namespace/name`) was last written by this process, and how long
/// a change of its progress alone waits after that: [`PROGRESS_HOLD`] after any write, doubled
/// by each write of progress alone up to [`LONGEST_PROGRESS_HOLD`].
/// Entries are swept of holds that ran out once there are more than this many, and after a
/// sweep once there are twice as many as it left: a constant cost per write on average.
#[derive(Debug)]
pub struct ProgressHolds {
    holds: std::collections::HashMap<String, (std::time::Instant, std::time::Duration)>,
    sweep_at: usize,
}

/// The fewest entries [`ProgressHolds`] sweeps at.
const HOLDS_SWEPT_AT: usize = 1024;

impl Default for ProgressHolds {
    fn default() -> Self {
        Self {
            holds: std::collections::HashMap::new(),
            sweep_at: HOLDS_SWEPT_AT,
        }
    }
}

impl ProgressHolds {
    /// Notes a write of `key`'s status for `cause` at `now`.
    pub fn written(&mut self, key: &str, cause: WriteCause, now: std::time::Instant) {
        if self.holds.len() >= self.sweep_at {
            self.holds
                .retain(|_, (t, hold)| now.duration_since(*t) < *hold);
            self.sweep_at = (self.holds.len() * 2).max(HOLDS_SWEPT_AT);
        }
        let hold = match (cause, self.holds.get(key)) {
            (WriteCause::Progress, Some((_, hold))) => (*hold * 2).min(LONGEST_PROGRESS_HOLD),
            _ => PROGRESS_HOLD,
        };
        self.holds.insert(key.to_owned(), (now, hold));
    }

    /// How much longer a change of `key`'s progress alone waits at `now` (`None`: it is written
    /// now). The hold is kept once it ran out: the next write of progress alone doubles it.
    pub fn left(&self, key: &str, now: std::time::Instant) -> Option<std::time::Duration> {
        let (written, hold) = self.holds.get(key)?;
        hold.checked_sub(now.duration_since(*written))
            .filter(|d| !d.is_zero())
    }
}

/// Why `after` is written over `before`, given whether the change is news ([`news`]).
pub fn write_cause(
    before: Option<&DeepInferDeploymentStatus>,
    after: &DeepInferDeploymentStatus,
    is_news: bool,
) -> WriteCause {
    let Some(before) = before else {
        return WriteCause::Transition;
    };
    let statuses = |s: &DeepInferDeploymentStatus| -> Vec<(String, String)> {
        s.conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect()
    };
    if before.phase != after.phase || statuses(before) != statuses(after) || is_news {
        WriteCause::Transition
    } else if only_progress_differs(before, after) {
        WriteCause::Progress
    } else {
        WriteCause::State
    }
}

/// Whether `after` differs from `before` in progress only (see [`PROGRESS_HOLD`]).
pub fn only_progress_differs(
    before: &DeepInferDeploymentStatus,
    after: &DeepInferDeploymentStatus,
) -> bool {
    let blank = |s: &DeepInferDeploymentStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.reason.clear();
            c.message.clear();
        }
        s.groups = None;
        s.serving_revision = None;
        for r in &mut s.roles {
            r.ready_groups = 0;
            r.updated_groups = 0;
            r.rolling_out = None;
            r.serving_revision = None;
        }
        s
    };
    before != after && blank(before) == blank(after)
}

/// Whether the change from `before` to `after` waits out [`PROGRESS_HOLD`]: it is progress alone
/// and tells no news (`is_news`, as [`news`] found).
pub fn held(
    before: &DeepInferDeploymentStatus,
    after: &DeepInferDeploymentStatus,
    is_news: bool,
) -> bool {
    !is_news && only_progress_differs(before, after)
}

/// Whether an Event tells a condition's transition, and of which type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum News {
    /// Something completed: a revision passed acceptance, the resource became Ready, or lost it.
    Normal,
    /// A gate failed, the resource stalled, or serving was withdrawn.
    Warning,
}

/// The transitions from `before` to `after` that are news, each with its Event type. An Event
/// says that something happened: a gate failed (`failing` is the reason of the gate that stalls
/// the resource), a revision passed acceptance, the resource became Ready or stopped being
/// Ready, serving was withdrawn. Work that starts or goes on (a verification or run under way,
/// groups waiting for devices or coming up) and the licence and checkpoint gates passing are
/// told by the conditions alone, and a verdict that comes as the resource becomes Ready is told
/// by the `Ready` Event.
pub fn news<'a>(
    before: Option<&DeepInferDeploymentStatus>,
    after: &'a DeepInferDeploymentStatus,
    failing: Option<Reason>,
) -> Vec<(News, &'a Condition)> {
    let was = |t: &str| {
        before
            .and_then(|b| b.conditions.iter().find(|c| c.type_ == t))
            .is_some_and(|c| c.status == "True")
    };
    let changed = transitions(before, after);
    let becomes_ready = changed
        .iter()
        .any(|c| c.type_ == ct::READY && c.status == "True");
    let mut told = std::collections::BTreeSet::new();
    changed
        .into_iter()
        .filter_map(|c| {
            if c.type_ == ct::RECONCILING || c.status == "Unknown" {
                return None;
            }
            let failed_gate = c.status == "False" && failing.is_some_and(|r| r == c.reason);
            let stalled = c.type_ == ct::STALLED && c.status == "True";
            if failed_gate || stalled || c.reason == Reason::ServingWithdrawn {
                return Some((News::Warning, c));
            }
            let told = match (c.type_ == ct::READY, c.status == "True") {
                (true, true) => true,
                (true, false) => was(ct::READY),
                (false, true) => c.type_ == ct::ACCEPTANCE_PASSED && !becomes_ready,
                (false, false) => false,
            };
            told.then_some((News::Normal, c))
        })
        // One Event per reason: `Ready` and `Stalled` repeat the reason of the gate they mirror.
        .filter(|(_, c)| told.insert(c.reason.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        Time(s.parse().expect("timestamp"))
    }

    fn ready_outcome() -> Outcome {
        Outcome {
            spec: Gate::Passed(Reason::Complete, "valid".into()),
            licence_gate: Gate::Passed(Reason::LicenseAccepted, "ok".into()),
            checkpoint: Gate::Passed(Reason::Verified, "ok".into()),
            acceptance: Gate::Passed(Reason::AcceptanceSucceeded, "ok".into()),
            workers: Gate::Passed(Reason::GroupsReady, "ok".into()),
            ..Outcome::default()
        }
    }

    fn role(name: &str, ready: i32, desired: i32, serving: Option<&str>) -> RoleStatus {
        RoleStatus {
            name: name.into(),
            desired_groups: desired,
            ready_groups: ready,
            serving_revision: serving.map(Into::into),
            ..RoleStatus::default()
        }
    }

    #[test]
    fn on_call_sees_ready_over_desired_groups_and_the_serving_revision_in_short() {
        let at = t("2026-01-01T00:00:00Z");
        let mut outcome = ready_outcome();
        outcome.revision = Some("newrevisionabc".into());
        outcome.roles = vec![
            role("prefill", 2, 2, Some("oldrevisionxyz")),
            role("decode", 1, 2, Some("newrevisionabc")),
        ];
        let s = compute(None, &outcome, Some(1), at.clone());
        assert_eq!(s.groups.as_deref(), Some("3/4"));
        assert_eq!(
            s.serving_revision.as_deref(),
            Some("oldre"),
            "most ready groups are on the old revision"
        );
        outcome.roles[1].ready_groups = 2;
        let s = compute(None, &outcome, Some(1), at.clone());
        assert_eq!(
            s.serving_revision.as_deref(),
            Some("newre"),
            "a tie goes to the desired revision"
        );
        outcome.roles = vec![role("worker", 0, 3, None)];
        let s = compute(None, &outcome, Some(1), at.clone());
        assert_eq!(s.groups.as_deref(), Some("0/3"));
        assert_eq!(s.serving_revision, None, "nothing serves");
        outcome.roles.clear();
        let s = compute(None, &outcome, Some(1), at);
        assert_eq!((s.groups, s.serving_revision), (None, None));
    }

    #[test]
    fn available_says_the_roles_serve_at_the_floor_their_rollout_allows_whatever_is_judged() {
        let at = t("2026-01-01T00:00:00Z");
        let available = |outcome: &Outcome| {
            let s = compute(None, outcome, Some(1), at.clone());
            let c = s
                .conditions
                .iter()
                .find(|c| c.type_ == ct::AVAILABLE)
                .expect("Available is always written")
                .clone();
            (c.status, c.reason)
        };
        // A candidate that failed acceptance: not Ready, but the old revision serves both groups.
        let mut outcome = ready_outcome();
        outcome.acceptance = Gate::Failed(Reason::AcceptanceFailed, "2/2/3".into());
        let floor = |mut r: RoleStatus, min: i32| {
            r.min_available_groups = min;
            r
        };
        outcome.roles = vec![floor(role("worker", 2, 2, Some("old")), 2)];
        assert_eq!(
            available(&outcome),
            ("True".to_string(), "MinimumGroupsAvailable".to_string())
        );
        // One group lost with maxUnavailable 0: below the floor.
        outcome.roles = vec![floor(role("worker", 1, 2, Some("old")), 2)];
        assert_eq!(
            available(&outcome),
            ("False".to_string(), "MinimumGroupsUnavailable".to_string())
        );
        // With maxUnavailable 1 one group is enough; none is not.
        outcome.roles = vec![floor(role("worker", 1, 2, Some("old")), 1)];
        assert_eq!(available(&outcome).0, "True");
        outcome.roles = vec![floor(role("worker", 0, 2, None), 1)];
        assert_eq!(available(&outcome).0, "False");
        outcome.roles.clear();
        assert_eq!(available(&outcome).0, "False", "nothing provisioned");
    }

    /// The Events a sequence of outcomes publishes: (condition type, reason, warning) per write.
    fn told(outcomes: &[(Outcome, i64)]) -> Vec<Vec<(String, String, bool)>> {
        let mut previous: Option<DeepInferDeploymentStatus> = None;
        outcomes
            .iter()
            .map(|(o, generation)| {
                let next = compute(
                    previous.as_ref(),
                    o,
                    Some(*generation),
                    t("2026-01-01T00:00:00Z"),
                );
                let events = news(previous.as_ref(), &next, o.stalled().map(|(r, _)| r))
                    .into_iter()
                    .map(|(n, c)| (c.type_.clone(), c.reason.clone(), n == News::Warning))
                    .collect();
                previous = Some(next);
                events
            })
            .collect()
    }

    fn at(checkpoint: Gate, acceptance: Gate, workers: Gate) -> Outcome {
        Outcome {
            checkpoint,
            acceptance,
            workers,
            ..ready_outcome()
        }
    }

    fn ev(type_: &str, reason: Reason, warning: bool) -> (String, String, bool) {
        (type_.into(), reason.as_str().into(), warning)
    }

    #[test]
    fn events_tell_what_happened_not_the_work_under_way() {
        let p = |r: Reason| Gate::Progressing(r, "m".into());
        let ok = |r: Reason| Gate::Passed(r, "m".into());
        let no = || Gate::NotReached;
        let mut first = at(p(Reason::Verifying), no(), no());
        first.licence_gate = ok(Reason::LicenseAccepted);
        let sequence = [
            (first, 1),
            (
                at(ok(Reason::Verified), p(Reason::AcceptanceRunning), no()),
                1,
            ),
            (
                at(ok(Reason::Verified), p(Reason::WaitingForCapacity), no()),
                1,
            ),
            (
                at(
                    ok(Reason::Verified),
                    ok(Reason::AcceptanceSucceeded),
                    p(Reason::GroupsNotReady),
                ),
                1,
            ),
            (
                at(
                    ok(Reason::Verified),
                    ok(Reason::AcceptanceSucceeded),
                    p(Reason::WaitingForCapacity),
                ),
                1,
            ),
            (ready_outcome(), 1),
            // A new generation: readiness lost while the new revision is judged.
            (
                at(
                    ok(Reason::Verified),
                    p(Reason::AcceptanceRunning),
                    ok(Reason::GroupsReady),
                ),
                2,
            ),
            (
                at(
                    ok(Reason::Verified),
                    Gate::Failed(Reason::AcceptanceFailed, "m".into()),
                    ok(Reason::GroupsReady),
                ),
                2,
            ),
            (ready_outcome(), 3),
            (
                at(
                    ok(Reason::Verified),
                    ok(Reason::AcceptanceSucceeded),
                    p(Reason::GroupsNotReady),
                ),
                3,
            ),
        ];
        assert_eq!(
            told(&sequence),
            vec![
                // The licence and checkpoint gates passing are in the conditions only.
                vec![],
                vec![],
                vec![],
                vec![ev(
                    ct::ACCEPTANCE_PASSED,
                    Reason::AcceptanceSucceeded,
                    false
                )],
                vec![],
                vec![ev(ct::READY, Reason::Ready, false)],
                vec![ev(ct::READY, Reason::AcceptanceRunning, false)],
                vec![ev(ct::ACCEPTANCE_PASSED, Reason::AcceptanceFailed, true)],
                vec![ev(ct::READY, Reason::Ready, false)],
                vec![ev(ct::READY, Reason::GroupsNotReady, false)],
            ]
        );
    }

    #[test]
    fn a_change_of_progress_alone_is_told_apart() {
        let with_roles = |ready: i32, updated: i32, serving: Option<&str>| {
            let mut o = ready_outcome();
            o.revision = Some("newrevisionabc".into());
            let mut r = role("worker", ready, 3, serving);
            r.updated_groups = updated;
            r.rolling_out = (updated < 3).then(|| "newrevisionabc".into());
            o.roles = vec![r];
            o
        };
        let at = t("2026-01-01T00:00:01Z");
        let first = compute(None, &with_roles(1, 0, Some("old")), Some(1), at.clone());
        let later =
            |o: &Outcome, generation: i64| compute(Some(&first), o, Some(generation), at.clone());
        let mut worded = with_roles(1, 0, Some("old"));
        worded.workers = Gate::Passed(Reason::GroupsReady, "other words".into());
        assert!(
            only_progress_differs(&first, &later(&worded, 1)),
            "a message"
        );
        assert!(!only_progress_differs(&first, &first), "no change at all");
        for (ready, updated, serving, what) in [
            (2, 0, Some("old"), "a group more ready"),
            (1, 1, Some("old"), "a group updated"),
            (2, 2, Some("newrevisionabc"), "another revision serving"),
        ] {
            let next = later(&with_roles(ready, updated, serving), 1);
            assert!(only_progress_differs(&first, &next), "{what}");
        }
        let mut desired = with_roles(1, 0, Some("old"));
        desired.roles[0].desired_groups = 4;
        assert!(
            !only_progress_differs(&first, &later(&desired, 1)),
            "the desired groups changed"
        );
        let mut failing = with_roles(1, 0, Some("old"));
        failing.workers = Gate::Progressing(Reason::GroupsNotReady, "m".into());
        assert!(
            !only_progress_differs(&first, &later(&failing, 1)),
            "a condition's reason changed"
        );
        assert!(
            !only_progress_differs(&first, &later(&with_roles(1, 0, Some("old")), 2)),
            "a new generation observed"
        );
        let mut waiting = with_roles(1, 0, Some("old"));
        waiting.workers = Gate::Passed(Reason::WaitingForCapacity, "m".into());
        assert!(
            only_progress_differs(&first, &later(&waiting, 1)),
            "a reason under the same status"
        );
    }

    /// Each status write is counted by why it was written: the first status and a condition's
    /// status are transitions, a changed message or group count alone is progress, a new
    /// generation observed is state.
    #[test]
    fn a_status_write_is_told_by_its_cause() {
        let at = t("2026-01-01T00:00:01Z");
        let first = compute(None, &ready_outcome(), Some(1), at.clone());
        assert_eq!(
            write_cause(None, &first, false),
            WriteCause::Transition,
            "the first status"
        );
        let mut worded = ready_outcome();
        worded.workers = Gate::Passed(Reason::GroupsReady, "other words".into());
        let next = compute(Some(&first), &worded, Some(1), at.clone());
        assert_eq!(
            write_cause(Some(&first), &next, false),
            WriteCause::Progress
        );
        let mut failing = ready_outcome();
        failing.workers = Gate::Progressing(Reason::GroupsNotReady, "m".into());
        let next = compute(Some(&first), &failing, Some(1), at.clone());
        assert_eq!(
            write_cause(Some(&first), &next, false),
            WriteCause::Transition
        );
        let next = compute(Some(&first), &ready_outcome(), Some(2), at.clone());
        assert_eq!(write_cause(Some(&first), &next, false), WriteCause::State);
    }

    /// A write of progress alone doubles the hold before the next one, up to five minutes; any
    /// other write brings it back to 30 s.
    #[test]
    fn progress_holds_are_swept_a_constant_number_of_times_per_write() {
        let start = std::time::Instant::now();
        let mut holds = ProgressHolds::default();
        // 3,000 resources written within their holds: a sweep keeps them all, and the next one
        // waits for twice as many, so they sweep twice rather than on each of 2,000 writes.
        for i in 0..3000 {
            holds.written(&format!("ns/{i}"), WriteCause::Transition, start);
        }
        assert_eq!(holds.sweep_at, 4096);
        // Once their holds ran out, the next sweep drops them.
        let later = start + std::time::Duration::from_secs(60);
        for i in 0..1100 {
            holds.written(&format!("other/{i}"), WriteCause::Transition, later);
        }
        assert_eq!(holds.holds.len(), 1100);
        assert_eq!(holds.sweep_at, 2 * 1096, "swept when the map reached 4,096");
    }

    #[test]
    fn progress_holds_grow_while_nothing_else_is_written() {
        let start = std::time::Instant::now();
        let s = |n: u64| std::time::Duration::from_secs(n);
        let mut holds = ProgressHolds::default();
        assert_eq!(holds.left("ns/a", start), None, "never written: no hold");
        holds.written("ns/a", WriteCause::Transition, start);
        assert_eq!(holds.left("ns/a", start + s(10)), Some(s(20)));
        assert_eq!(holds.left("ns/a", start + s(30)), None, "the hold ran out");
        let mut at = start + s(30);
        let mut seen = Vec::new();
        for _ in 0..6 {
            holds.written("ns/a", WriteCause::Progress, at);
            let hold = holds.left("ns/a", at).expect("held after a write");
            seen.push(hold.as_secs());
            at += hold;
            assert_eq!(holds.left("ns/a", at), None);
        }
        assert_eq!(seen, [60, 120, 240, 300, 300, 300]);
        holds.written("ns/a", WriteCause::State, at);
        assert_eq!(
            holds.left("ns/a", at),
            Some(s(30)),
            "any other write resets it"
        );
        assert_eq!(holds.left("ns/b", at), None, "per resource");
    }

    #[test]
    fn progress_is_held_unless_it_is_news() {
        let before = compute(None, &ready_outcome(), Some(1), t("2026-01-01T00:00:00Z"));
        let at = t("2026-01-01T00:00:01Z");
        let mut capacity = ready_outcome();
        capacity.workers = Gate::Passed(Reason::WaitingForCapacity, "m".into());
        let next = compute(Some(&before), &capacity, Some(1), at.clone());
        let told = |next: &DeepInferDeploymentStatus, failing| {
            !news(Some(&before), next, failing).is_empty()
        };
        assert!(
            held(&before, &next, told(&next, None)),
            "a reason under the same status"
        );
        let mut withdrawn = ready_outcome();
        withdrawn.workers = Gate::Passed(Reason::ServingWithdrawn, "m".into());
        let next = compute(Some(&before), &withdrawn, Some(1), at.clone());
        assert!(
            only_progress_differs(&before, &next) && !held(&before, &next, told(&next, None)),
            "serving withdrawn is news, written at once"
        );
        let mut failed = ready_outcome();
        failed.acceptance = Gate::Failed(Reason::AcceptanceFailed, "m".into());
        let next = compute(Some(&before), &failed, Some(1), at);
        assert!(!held(
            &before,
            &next,
            told(&next, Some(Reason::AcceptanceFailed))
        ));
    }

    #[test]
    fn same_outcome_gives_identical_status() {
        let first = compute(None, &ready_outcome(), Some(3), t("2026-01-01T00:00:00Z"));
        let second = compute(
            Some(&first),
            &ready_outcome(),
            Some(3),
            t("2026-01-01T01:00:00Z"),
        );
        assert_eq!(
            first, second,
            "a pass with nothing new must not change the status"
        );
    }

    #[test]
    fn ready_is_current_for_kstatus() {
        let s = compute(None, &ready_outcome(), Some(2), t("2026-01-01T00:00:00Z"));
        let get = |ty: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == ty)
                .expect("condition")
                .status
                .clone()
        };
        assert_eq!(get(ct::READY), "True");
        assert_eq!(get(ct::RECONCILING), "False");
        assert_eq!(get(ct::STALLED), "False");
        assert_eq!(s.phase, Some(Phase::Ready));
        assert!(s
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(2)));
    }

    #[test]
    fn failed_gate_stalls_and_names_itself_in_ready() {
        let mut o = ready_outcome();
        o.licence_gate = Gate::Failed(Reason::LicenseMismatch, "annotation says apache-2.0".into());
        o.checkpoint = Gate::NotReached;
        o.acceptance = Gate::NotReached;
        o.workers = Gate::NotReached;
        let s = compute(None, &o, Some(1), t("2026-01-01T00:00:00Z"));
        let get = |ty: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == ty)
                .expect("condition")
                .clone()
        };
        assert_eq!(get(ct::STALLED).status, "True");
        assert_eq!(get(ct::STALLED).reason, Reason::LicenseMismatch);
        assert_eq!(get(ct::READY).status, "False");
        assert_eq!(get(ct::READY).reason, Reason::LicenseMismatch);
        assert_eq!(get(ct::RECONCILING).status, "False");
        assert_eq!(get(ct::LICENSE_ACCEPTED).status, "False");
        assert_eq!(get(ct::CHECKPOINT_VERIFIED).status, "Unknown");
        assert_eq!(s.phase, Some(Phase::Pending));
    }

    #[test]
    fn transition_time_moves_only_on_flip() {
        let mut o = ready_outcome();
        o.workers = Gate::Progressing(Reason::GroupsNotReady, "0/1".into());
        let a = compute(None, &o, Some(1), t("2026-01-01T00:00:00Z"));
        o.workers = Gate::Progressing(Reason::GroupsNotReady, "0/2".into());
        let b = compute(Some(&a), &o, Some(1), t("2026-01-01T00:05:00Z"));
        let ready = |s: &DeepInferDeploymentStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == ct::READY)
                .cloned()
                .expect("ready")
        };
        assert_eq!(
            ready(&a).last_transition_time,
            ready(&b).last_transition_time
        );
        let c = compute(
            Some(&b),
            &ready_outcome(),
            Some(1),
            t("2026-01-01T00:09:00Z"),
        );
        assert_eq!(ready(&c).last_transition_time, t("2026-01-01T00:09:00Z"));
        assert_eq!(
            transitions(Some(&b), &c)
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            vec![ct::WORKERS_READY, ct::READY, ct::RECONCILING]
        );
    }

    #[test]
    fn awaiting_acceptance_keeps_ready_false() {
        let mut o = ready_outcome();
        o.acceptance = Gate::Progressing(Reason::AcceptanceRunning, "job running".into());
        o.workers = Gate::NotReached;
        let s = compute(None, &o, Some(1), t("2026-01-01T00:00:00Z"));
        let r = s
            .conditions
            .iter()
            .find(|c| c.type_ == ct::READY)
            .expect("ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("False", Reason::AcceptanceRunning.as_str())
        );
        assert_eq!(s.phase, Some(Phase::Accepting));
    }

    fn licence(accepted: bool, annotation: Option<&str>, reason: Reason) -> LicenceSeen {
        LicenceSeen {
            license: "mit".into(),
            annotation: annotation.map(str::to_string),
            accepted,
            reason,
        }
    }

    #[test]
    fn the_licence_record_says_when_the_gate_opened_for_what_and_when_it_closed() {
        let mut o = ready_outcome();
        o.licence = Some(licence(true, Some("mit"), Reason::LicenseAccepted));
        let opened = compute(None, &o, Some(1), t("2026-01-01T00:00:00Z"));
        let record = opened.license.clone().expect("recorded once open");
        assert_eq!(record.license, "mit");
        assert_eq!(record.annotation, "mit");
        assert_eq!(record.opened_at, t("2026-01-01T00:00:00Z"));
        assert_eq!(record.closed_at, None);
        // Deterministic: a later pass with the gate still open changes nothing.
        let again = compute(Some(&opened), &o, Some(1), t("2026-01-01T05:00:00Z"));
        assert_eq!(again, opened);
        // Closing keeps when and for what it had opened, and says when and why it closed.
        o.licence = Some(licence(false, None, Reason::LicenseAnnotationMissing));
        o.licence_gate = Gate::Failed(Reason::LicenseAnnotationMissing, "gone".into());
        let closed = compute(Some(&again), &o, Some(2), t("2026-01-02T00:00:00Z"));
        let record = closed.license.clone().expect("kept once closed");
        assert_eq!(record.opened_at, t("2026-01-01T00:00:00Z"));
        assert_eq!(record.annotation, "mit");
        assert_eq!(record.closed_at, Some(t("2026-01-02T00:00:00Z")));
        assert_eq!(
            record.closed_reason.as_deref(),
            Some(Reason::LicenseAnnotationMissing.as_str())
        );
        let still = compute(Some(&closed), &o, Some(2), t("2026-01-03T00:00:00Z"));
        assert_eq!(still.license, closed.license, "closing is recorded once");
        // Opening again starts a new record.
        o.licence = Some(licence(true, Some("mit"), Reason::LicenseAccepted));
        let reopened = compute(Some(&still), &o, Some(3), t("2026-01-04T00:00:00Z"));
        let record = reopened.license.expect("open");
        assert_eq!(record.opened_at, t("2026-01-04T00:00:00Z"));
        assert_eq!(record.closed_at, None);
        assert_eq!(record.closed_reason, None);
    }

    #[test]
    fn a_pass_that_did_not_look_at_the_licence_keeps_the_record() {
        let mut o = ready_outcome();
        o.licence = Some(licence(true, Some("mit"), Reason::LicenseAccepted));
        let opened = compute(None, &o, Some(1), t("2026-01-01T00:00:00Z"));
        let unread = Outcome {
            spec: Gate::Failed(Reason::InvalidSpec, "does not decode".into()),
            ..Outcome::default()
        };
        let after = compute(Some(&opened), &unread, Some(2), t("2026-01-02T00:00:00Z"));
        assert_eq!(after.license, opened.license);
        // Never opened: no record.
        let mut never = ready_outcome();
        never.licence = Some(licence(false, None, Reason::LicenseAnnotationMissing));
        assert_eq!(
            compute(None, &never, Some(1), t("2026-01-01T00:00:00Z")).license,
            None
        );
    }
}
