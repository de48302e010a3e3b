//! The rollout planner: per role, from the groups observed (of any revision) and the spec, the
//! groups to create and delete in this pass, and how far the role is.
//!
//! Groups are counted whole. While the target revision has a passing judgement, groups that are
//! not on it (another revision, or the same revision under an older pod template) are replaced
//! step by step: a new group is created within `maxSurge`, and an old one is removed while the
//! ready groups stay at least `replicas - maxUnavailable`. While the target is not judged (or
//! failed), the revisions that passed keep serving at `replicas`: crashed groups are replaced and
//! replica edits applied. While the licence gate is closed nothing is created or deleted.

use std::collections::BTreeSet;

use crate::api::{RoleStatus, RolloutSpec};
pub use crate::controller::gates::acceptance::Candidate;

/// How a group is doing, from its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Every rank exists, is accepted and passes its probes: the group serves.
    Ready,
    /// Every rank exists and none failed; some are starting, loading weights or not accepted.
    Starting,
    /// A rank cannot be scheduled; the message says for want of what.
    Unschedulable(String),
    /// A rank is missing, failed or being deleted (the message says which and why): the group
    /// is replaced as a whole.
    Broken(String),
    /// Partly placed for longer than the watchdog allows (the message says how): the group is
    /// deleted as a whole to free its devices and placed again after a backoff.
    Stranded(String),
    /// Every pod left is being deleted: the group is going and its names are not free yet.
    Terminating,
}

/// One observed serving group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Revision label of its pods.
    pub revision: String,
    /// Group index (unique per role and revision).
    pub index: i32,
    /// Its pods carry the pod template the operator now builds for their revision.
    pub current: bool,
    /// Health.
    pub health: Health,
}

impl Group {
    fn ready(&self) -> bool {
        self.health == Health::Ready
    }

    /// Goes whole in this pass: a rank is missing or failed, or it is stranded half placed.
    fn doomed(&self) -> bool {
        matches!(self.health, Health::Broken(_) | Health::Stranded(_))
    }

    fn updated(&self, target: &str) -> bool {
        self.revision == target && self.current
    }
}

/// Everything the planner needs about one role.
#[derive(Clone, Debug)]
pub struct RoleInput<'a> {
    /// Role name.
    pub role: &'a str,
    /// `replicas`.
    pub desired: i32,
    /// `rollout`.
    pub rollout: RolloutSpec,
    /// Groups observed.
    pub groups: Vec<Group>,
    /// Revision of the current spec.
    pub target: &'a str,
    /// The revision the role served on as last recorded: new groups are made of it while the
    /// target has no pass and no group of a passed revision is left (all lost at once).
    pub last_serving: Option<&'a str>,
    /// Revisions whose newest judgement is a pass.
    pub passed: &'a BTreeSet<String>,
    /// Revisions whose pods the operator can build (the target, and those whose spec it kept).
    pub buildable: &'a BTreeSet<String>,
    /// The licence gate is open.
    pub licence_open: bool,
    /// The target's acceptance run waits for devices that this role's groups hold.
    pub acceptance_needs_room: bool,
    /// Why no group may be created now (the watchdog's retry backoff), if so.
    pub placement_hold: Option<String>,
    /// Whether the spec holds the groups (`spec.paused`) or frees them (`spec.suspend`).
    pub mode: Mode,
    /// The target's first group as the candidate judged in place (`spec.acceptance.mode:
    /// serving`), while the target has no pass.
    pub candidate: Candidate,
}

/// What the spec asks of the groups as a whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Serve: create, replace and delete groups as the rollout says.
    #[default]
    Serving,
    /// `spec.paused`: no group is created, replaced or deleted.
    Paused,
    /// `spec.suspend`: every group is deleted and none created.
    Suspended,
}

/// What to do with one group.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Create every pod of group `index` of `revision`.
    Create {
        /// Revision.
        revision: String,
        /// Group index.
        index: i32,
    },
    /// Delete every pod of group `index` of `revision`.
    Delete {
        /// Revision.
        revision: String,
        /// Group index.
        index: i32,
    },
}

/// How far a role is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every group is on the target revision and template, ready, and there are `replicas`.
    Complete,
    /// Groups of the target replace older ones (message: `rolling out <rev>: n/m groups updated`).
    RollingOut(String),
    /// Groups are being created, replaced or are starting (no change of revision).
    Converging(String),
    /// A group cannot be scheduled for want of devices.
    WaitingForCapacity(String),
    /// The target has no passing judgement; the serving revisions are kept.
    HoldingServing(String),
    /// The licence gate is closed: nothing is created or deleted.
    Frozen(String),
    /// Every group ready, and the rollout held at `rollout.partition` groups of the earlier
    /// revision as the spec asks.
    Partitioned(String),
    /// `spec.paused`: groups held as they are.
    Paused(String),
    /// `spec.suspend`: groups deleted, none created.
    Suspended(String),
}

/// The plan for one role.
#[derive(Clone, Debug, PartialEq)]
pub struct RolePlan {
    /// Groups to create and delete, in order.
    pub actions: Vec<Action>,
    /// How far the role is.
    pub progress: Progress,
    /// The role's status.
    pub status: RoleStatus,
    /// Things done that a person should hear about (e.g. a group taken out to make room).
    pub notes: Vec<String>,
}

/// First characters of a revision, as used in names and messages.
pub fn short(revision: &str) -> &str {
    &revision[..revision.len().min(5)]
}

/// The revision most ready groups are on: on a tie `target`, else the first by name; `None`
/// while no group is ready.
fn serving_revision(live: &[&Group], target: &str) -> Option<String> {
    let mut ready: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for g in live.iter().filter(|g| g.ready()) {
        *ready.entry(g.revision.as_str()).or_default() += 1;
    }
    let most = ready.values().copied().max()?;
    if ready.get(target) == Some(&most) {
        return Some(target.to_string());
    }
    ready
        .into_iter()
        .find(|(_, n)| *n == most)
        .map(|(r, _)| r.to_string())
}

/// The revision the role served on as last recorded, while it still has a pass and can be built.
fn last_serving(input: &RoleInput<'_>) -> Option<String> {
    input
        .last_serving
        .filter(|r| input.passed.contains(*r) && input.buildable.contains(*r))
        .map(str::to_string)
}

/// Lowest index not used by any live group of `revision`.
fn free_index(groups: &[Group], taken: &[(String, i32)], revision: &str) -> i32 {
    let used: BTreeSet<i32> = groups
        .iter()
        .filter(|g| g.revision == revision)
        .map(|g| g.index)
        .chain(taken.iter().filter(|(r, _)| r == revision).map(|(_, i)| *i))
        .collect();
    (0..).find(|i| !used.contains(i)).unwrap_or(0)
}

/// Order in which groups are given up: those not serving first, then those of revisions without
/// a pass, then the highest index.
fn removal_order(groups: &mut [&Group], passed: &BTreeSet<String>) {
    groups.sort_by_key(|g| {
        (
            g.ready(),
            passed.contains(&g.revision),
            std::cmp::Reverse(g.index),
        )
    });
}

fn delete(g: &Group) -> Action {
    Action::Delete {
        revision: g.revision.clone(),
        index: g.index,
    }
}

/// Plans one role.
pub fn plan(input: &RoleInput<'_>) -> RolePlan {
    let desired = input.desired.max(0);
    let target = input.target;
    let live: Vec<&Group> = input
        .groups
        .iter()
        .filter(|g| g.health != Health::Terminating)
        .collect();
    let ready = live.iter().filter(|g| g.ready()).count();
    let updated = live
        .iter()
        .filter(|g| g.updated(target) && !g.doomed())
        .count();
    let target_passed = input.passed.contains(target);
    let has_old = live.iter().any(|g| !g.updated(target) && !g.doomed());
    let status = RoleStatus {
        name: input.role.to_string(),
        desired_groups: desired,
        ready_groups: count(ready),
        updated_groups: count(updated),
        rolling_out: (target_passed && has_old).then(|| target.to_string()),
        serving_revision: serving_revision(&live, target).or_else(|| last_serving(input)),
        min_available_groups: if desired > 0 {
            (desired - input.rollout.max_unavailable.max(0)).max(1)
        } else {
            0
        },
        ..RoleStatus::default()
    };
    let mut plan = RolePlan {
        actions: Vec::new(),
        progress: Progress::Complete,
        status,
        notes: Vec::new(),
    };
    match input.mode {
        Mode::Suspended => {
            for g in &live {
                plan.actions.push(delete(g));
            }
            plan.progress = Progress::Suspended(format!(
                "{}: suspended (spec.suspend): {} group(s) deleted, none created",
                input.role,
                live.len()
            ));
            return plan;
        }
        Mode::Paused => {
            plan.progress = Progress::Paused(format!(
                "{}: paused (spec.paused): {} group(s) held as they are, {ready} of {desired} ready",
                input.role,
                live.len()
            ));
            return plan;
        }
        Mode::Serving => {}
    }
    if !input.licence_open {
        plan.progress = Progress::Frozen(format!(
            "{}: licence gate closed; {} group(s) kept out of service, none created or deleted",
            input.role,
            live.len()
        ));
        return plan;
    }
    // A group with a missing or failed rank cannot serve, nor can one stranded half placed: it
    // goes whole.
    for g in live.iter().filter(|g| g.doomed()) {
        plan.actions.push(delete(g));
    }
    let stranded = live.iter().find_map(|g| match &g.health {
        Health::Stranded(why) => Some(why.clone()),
        _ => None,
    });
    let healthy: Vec<&Group> = live.into_iter().filter(|g| !g.doomed()).collect();
    if target_passed {
        roll(input, desired, &healthy, &mut plan);
    } else {
        hold(input, desired, &healthy, &mut plan);
    }
    settle(input, stranded, &healthy, &mut plan);
    plan
}

/// Puts the plan's deletes before its creates, holds creates back while a stranded group's
/// devices are freed or the placement backoff runs, and says when the role waits for capacity.
fn settle(
    input: &RoleInput<'_>,
    stranded: Option<String>,
    healthy: &[&Group],
    plan: &mut RolePlan,
) {
    // Groups go before groups are made: the executor sends acts in order, so a group made in
    // the place of another never exists beside it (`maxSurge: 0` stays true between writes),
    // and the devices freed are free for the new one.
    plan.actions
        .sort_by_key(|a| matches!(a, Action::Create { .. }));
    // Nothing new is placed while a stranded group's devices are being freed or the backoff
    // runs.
    if input.placement_hold.is_some() || stranded.is_some() {
        plan.actions.retain(|a| !matches!(a, Action::Create { .. }));
    }
    if let Some(why) = stranded.as_ref().or(input.placement_hold.as_ref()) {
        plan.progress = Progress::WaitingForCapacity(format!("{}: {why}", input.role));
        return;
    }
    if let Some(waiting) = healthy.iter().find_map(|g| match &g.health {
        Health::Unschedulable(why) => Some(why.clone()),
        _ => None,
    }) {
        if !matches!(plan.progress, Progress::HoldingServing(_)) {
            plan.progress = Progress::WaitingForCapacity(format!("{}: {waiting}", input.role));
        }
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The target passed: replace every group that is not on it, within the rollout's bounds.
fn roll(input: &RoleInput<'_>, desired: i32, healthy: &[&Group], plan: &mut RolePlan) {
    let target = input.target;
    let surge = input.rollout.max_surge.max(0);
    let unavailable = input.rollout.max_unavailable.max(0);
    let (mut updated, old): (Vec<&Group>, Vec<&Group>) =
        healthy.iter().partition(|g| g.updated(target));
    // Surplus groups of the target (scale-down) go first, those not serving before the rest.
    removal_order(&mut updated, input.passed);
    let surplus = updated
        .len()
        .saturating_sub(usize::try_from(desired).unwrap_or(0));
    for g in updated.drain(..surplus) {
        plan.actions.push(delete(g));
    }
    // An old group that does not serve frees its devices at once.
    let had_old = count(old.len());
    let (mut old_ready, old_idle): (Vec<&Group>, Vec<&Group>) =
        old.into_iter().partition(|g| g.ready());
    for g in old_idle {
        plan.actions.push(delete(g));
    }
    // `partition` ready groups of the earlier revision stay; lost ones are not made again.
    let partition = input.rollout.partition.clamp(0, desired);
    let keep_old = partition.min(count(old_ready.len()));
    let updated_n = count(updated.len());
    let want = desired - keep_old - updated_n;
    let room = desired + surge - updated_n - count(old_ready.len());
    let mut taken = Vec::new();
    for _ in 0..want.min(room).max(0) {
        let index = free_index(&input.groups, &taken, target);
        taken.push((target.to_string(), index));
        plan.actions.push(Action::Create {
            revision: target.to_string(),
            index,
        });
    }
    // Serving old groups go while the ready groups stay at least `replicas - maxUnavailable`.
    let available = count(updated.iter().filter(|g| g.ready()).count()) + count(old_ready.len());
    let spare_ready = usize::try_from(available - (desired - unavailable)).unwrap_or(0);
    let removable = old_ready
        .len()
        .saturating_sub(usize::try_from(keep_old).unwrap_or(0));
    removal_order(&mut old_ready, input.passed);
    let removed = spare_ready.min(removable);
    for g in old_ready.into_iter().take(removed) {
        plan.actions.push(delete(g));
    }
    let ready_updated = updated.iter().filter(|g| g.ready()).count();
    let held_at_partition = keep_old > 0
        && removed == removable
        && plan.actions.is_empty()
        && count(ready_updated) + keep_old >= desired;
    plan.progress = if held_at_partition {
        Progress::Partitioned(format!(
            "{}: rollout of {} held at rollout.partition {partition}: {ready_updated}/{desired} groups updated, {keep_old} kept on the earlier revision",
            input.role,
            short(target)
        ))
    } else if had_old > 0 {
        Progress::RollingOut(format!(
            "rolling out {}: {}/{desired} groups updated ({}: {} ready, {had_old} old left)",
            short(target),
            ready_updated,
            input.role,
            plan.status.ready_groups
        ))
    } else if count(ready_updated) < desired || updated_n > desired {
        Progress::Converging(format!(
            "{} {}/{desired} groups ready",
            input.role, ready_updated
        ))
    } else {
        Progress::Complete
    };
}

/// The target has no pass: keep the groups of revisions that passed at `replicas` (less one
/// when the target's acceptance run needs their devices and `maxUnavailable` allows it).
fn hold(input: &RoleInput<'_>, desired: i32, healthy: &[&Group], plan: &mut RolePlan) {
    let target = input.target;
    let (mut serving, others): (Vec<&Group>, Vec<&Group>) = healthy
        .iter()
        .partition(|g| input.passed.contains(&g.revision));
    // Groups that can never serve and are not the target hold devices for nothing. Groups of
    // the target stay (out of service) so that a passing re-run brings them back at once; a
    // refused candidate goes.
    let refused = input.candidate == Candidate::Refused;
    for g in others.iter().filter(|g| g.revision != target || refused) {
        plan.actions.push(delete(g));
    }
    let judged = input.candidate == Candidate::Judged;
    // A candidate makes its own room when no group may surge.
    let make_room = (input.acceptance_needs_room || (judged && input.rollout.max_surge < 1))
        && input.rollout.max_unavailable >= 1;
    if judged && !input.groups.iter().any(|g| g.revision == target) {
        plan.actions.push(Action::Create {
            revision: target.to_string(),
            index: free_index(&input.groups, &[], target),
        });
    }
    let keep = if make_room { desired - 1 } else { desired }.max(0);
    // The serving revision new groups are made of: the one with most groups here.
    let mut revisions: Vec<(&str, usize, usize)> = Vec::new();
    for g in &serving {
        match revisions.iter_mut().find(|(r, _, _)| *r == g.revision) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 += usize::from(g.ready());
            }
            None => revisions.push((&g.revision, 1, usize::from(g.ready()))),
        }
    }
    revisions.sort_by_key(|(r, n, ready)| (std::cmp::Reverse(*n), std::cmp::Reverse(*ready), *r));
    // Every group lost at once: the revision the role served on as last recorded.
    let base = revisions
        .first()
        .map(|(r, _, _)| r.to_string())
        .filter(|r| input.buildable.contains(r))
        .or_else(|| last_serving(input));
    let serving_n = count(serving.len());
    if serving_n > keep {
        removal_order(&mut serving, input.passed);
        for g in serving
            .iter()
            .take(usize::try_from(serving_n - keep).unwrap_or(0))
        {
            plan.actions.push(delete(g));
            if make_room && serving_n == desired {
                let run = if judged {
                    "the candidate group"
                } else {
                    "the acceptance run"
                };
                plan.notes.push(format!(
                    "took group {}-{} of role {} out of service to make room for {run} of revision {} (maxUnavailable {})",
                    short(&g.revision),
                    g.index,
                    input.role,
                    short(target),
                    input.rollout.max_unavailable
                ));
            }
        }
    } else if let Some(base) = &base {
        let mut taken = Vec::new();
        for _ in serving_n..keep {
            let index = free_index(&input.groups, &taken, base);
            taken.push((base.clone(), index));
            plan.actions.push(Action::Create {
                revision: base.clone(),
                index,
            });
        }
    }
    let ready = serving.iter().filter(|g| g.ready()).count();
    let why = if judged {
        "is judged through its candidate group's serving endpoint"
    } else {
        "has no passing judgement"
    };
    plan.progress = Progress::HoldingServing(match &base {
        Some(base) => format!(
            "{}: revision {} keeps serving ({ready}/{desired} groups ready) while revision {} {why}",
            input.role,
            short(base),
            short(target)
        ),
        None => format!(
            "{}: no group is created before revision {} passes acceptance",
            input.role,
            short(target)
        ),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaa11111";
    const B: &str = "bbbbb22222";

    fn g(revision: &str, index: i32, health: Health) -> Group {
        Group {
            revision: revision.into(),
            index,
            current: true,
            health,
        }
    }

    fn set(revisions: &[&str]) -> BTreeSet<String> {
        revisions.iter().map(|r| (*r).to_string()).collect()
    }

    struct Case {
        desired: i32,
        surge: i32,
        unavailable: i32,
        groups: Vec<Group>,
        target: &'static str,
        passed: Vec<&'static str>,
        licence_open: bool,
        needs_room: bool,
        hold: Option<String>,
        partition: i32,
        mode: Mode,
        last_serving: Option<&'static str>,
        candidate: Candidate,
    }

    impl Case {
        fn new(desired: i32, target: &'static str, groups: Vec<Group>) -> Self {
            Self {
                desired,
                surge: 1,
                unavailable: 0,
                groups,
                target,
                passed: vec![A, B],
                licence_open: true,
                needs_room: false,
                hold: None,
                partition: 0,
                mode: Mode::Serving,
                last_serving: None,
                candidate: Candidate::None,
            }
        }

        fn plan(&self) -> RolePlan {
            let passed = set(&self.passed);
            let buildable = set(&[A, B]);
            plan(&RoleInput {
                role: "worker",
                desired: self.desired,
                rollout: RolloutSpec {
                    max_surge: self.surge,
                    max_unavailable: self.unavailable,
                    partition: self.partition,
                },
                groups: self.groups.clone(),
                target: self.target,
                last_serving: self.last_serving,
                passed: &passed,
                buildable: &buildable,
                licence_open: self.licence_open,
                acceptance_needs_room: self.needs_room,
                placement_hold: self.hold.clone(),
                mode: self.mode,
                candidate: self.candidate,
            })
        }
    }

    /// `+a0` creates group 0 of revision A, `-b1` deletes group 1 of revision B.
    fn actions(p: &RolePlan) -> Vec<String> {
        p.actions
            .iter()
            .map(|a| match a {
                Action::Create { revision, index } => format!("+{}{index}", &revision[..1]),
                Action::Delete { revision, index } => format!("-{}{index}", &revision[..1]),
            })
            .collect()
    }

    /// Applies a plan the way the cluster would: deleted groups vanish, created ones start.
    fn step(groups: &[Group], p: &RolePlan) -> Vec<Group> {
        let mut next: Vec<Group> = groups
            .iter()
            .filter(|g| {
                !p.actions.contains(&Action::Delete {
                    revision: g.revision.clone(),
                    index: g.index,
                })
            })
            .cloned()
            .collect();
        for a in &p.actions {
            if let Action::Create { revision, index } = a {
                next.push(g(revision, *index, Health::Starting));
            }
        }
        next
    }

    /// The most groups that exist at once while a plan's actions go out in their order (the
    /// executor sends them so): a create that comes before a delete counts beside it.
    fn peak(groups: &[Group], p: &RolePlan) -> usize {
        let mut live = groups.len();
        let mut most = live;
        for a in &p.actions {
            match a {
                Action::Create { .. } => live += 1,
                Action::Delete { .. } => live -= 1,
            }
            most = most.max(live);
        }
        most
    }

    fn all_ready(groups: &mut [Group]) {
        for g in groups {
            g.health = Health::Ready;
        }
    }

    /// A serving-mode rollout of 2 groups from A to B: the candidate is made while A serves
    /// whole (or, without surge, in place of one A group), judged, and once it passes the rest
    /// is replaced without another group of B being made first. Returns the groups of B made and
    /// the fewest ready groups seen.
    fn serving_rollout(surge: i32, unavailable: i32) -> (usize, usize) {
        let mut groups = vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)];
        let mut made = 0;
        let mut min_ready = usize::MAX;
        for pass in 0..12 {
            let judged = pass >= 3;
            let mut case = Case::new(2, B, groups.clone());
            (case.surge, case.unavailable) = (surge, unavailable);
            case.passed = if judged { vec![A, B] } else { vec![A] };
            case.candidate = if judged {
                Candidate::None
            } else {
                Candidate::Judged
            };
            let p = case.plan();
            if !judged {
                assert!(
                    matches!(&p.progress, Progress::HoldingServing(m) if m.contains("candidate")),
                    "{:?}",
                    p.progress
                );
            }
            made += p
                .actions
                .iter()
                .filter(|a| matches!(a, Action::Create { revision, .. } if revision == B))
                .count();
            let most = peak(&groups, &p);
            assert!(
                most <= 2 + usize::try_from(surge).unwrap_or(0),
                "pass {pass}: {most} groups at once with maxSurge {surge}: {:?}",
                actions(&p)
            );
            groups = step(&groups, &p);
            // A candidate serves only once it passed; every group starts within a pass.
            for g in groups.iter_mut() {
                g.health = if g.revision == B && !judged {
                    Health::Starting
                } else {
                    Health::Ready
                };
            }
            min_ready = min_ready.min(groups.iter().filter(|g| g.ready()).count());
        }
        assert!(groups.iter().all(|g| g.revision == B && g.ready()));
        assert_eq!(groups.len(), 2);
        (made, min_ready)
    }

    #[test]
    fn a_serving_candidate_is_the_first_group_of_the_rollout() {
        assert_eq!(
            serving_rollout(1, 0),
            (2, 2),
            "with surge, 2 groups of B made for 2 and serving never below 2"
        );
        assert_eq!(
            serving_rollout(0, 1),
            (2, 1),
            "without surge, the candidate takes one group's place: serving never below 2 - maxUnavailable"
        );
    }

    #[test]
    fn without_surge_the_candidate_takes_the_place_of_one_serving_group() {
        let mut case = Case::new(2, B, vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)]);
        (case.surge, case.unavailable) = (0, 1);
        case.passed = vec![A];
        case.candidate = Candidate::Judged;
        let p = case.plan();
        assert_eq!(actions(&p), ["-a1", "+b0"]);
        assert!(p.notes[0].contains("to make room for the candidate group of revision bbbbb"));
        // With surge the candidate is made beside the serving groups.
        case.surge = 1;
        assert_eq!(actions(&case.plan()), ["+b0"]);
        // Once made, it is kept and not made again.
        case.groups.push(g(B, 0, Health::Starting));
        assert_eq!(actions(&case.plan()), Vec::<String>::new());
    }

    #[test]
    fn a_refused_candidate_goes_and_the_serving_group_it_replaced_comes_back() {
        let mut case = Case::new(
            2,
            B,
            vec![g(A, 0, Health::Ready), g(B, 0, Health::Starting)],
        );
        (case.surge, case.unavailable) = (0, 1);
        case.passed = vec![A];
        case.candidate = Candidate::Refused;
        let p = case.plan();
        assert_eq!(actions(&p), ["-b0", "+a1"]);
        // Offline acceptance keeps a target group out of service for a passing re-run.
        case.candidate = Candidate::None;
        assert_eq!(actions(&case.plan()), ["+a1"]);
    }

    #[test]
    fn the_serving_revision_is_that_of_most_ready_groups() {
        let serving = |groups: Vec<Group>| Case::new(2, B, groups).plan().status.serving_revision;
        assert_eq!(serving(vec![g(A, 0, Health::Starting)]), None);
        assert_eq!(
            serving(vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Ready),
                g(B, 0, Health::Ready),
                g(B, 1, Health::Starting),
            ]),
            Some(A.to_string())
        );
        assert_eq!(
            serving(vec![g(A, 0, Health::Ready), g(B, 0, Health::Ready)]),
            Some(B.to_string()),
            "a tie goes to the target"
        );
    }

    #[test]
    fn a_stranded_group_goes_whole_and_the_role_says_it_waits_for_capacity() {
        let why = "group a-1 of role worker was partly placed (1/2 pods bound) for 121 s";
        let p = Case::new(
            2,
            A,
            vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Stranded(why.into())),
            ],
        )
        .plan();
        assert_eq!(actions(&p), ["-a1"]);
        assert_eq!(
            p.progress,
            Progress::WaitingForCapacity(format!("worker: {why}"))
        );
        assert_eq!(p.status.ready_groups, 1);
    }

    #[test]
    fn while_the_placement_backoff_runs_no_group_is_created_but_broken_ones_still_go() {
        let mut case = Case::new(
            3,
            A,
            vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Broken("rank 1 failed".into())),
            ],
        );
        case.hold = Some("placing groups again at 12:00:15Z (retry 1, backoff 15 s)".into());
        let p = case.plan();
        assert_eq!(actions(&p), ["-a1"]);
        assert!(matches!(&p.progress, Progress::WaitingForCapacity(m) if m.contains("retry 1")));
        case.hold = None;
        assert_eq!(actions(&case.plan()), ["-a1", "+a2", "+a3"]);
    }

    #[test]
    fn surge_adds_a_new_group_before_removing_an_old_one_and_never_drops_below_desired() {
        let mut groups = vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)];
        let mut min_ready = usize::MAX;
        for pass in 0..8 {
            let p = Case::new(2, B, groups.clone()).plan();
            if p.progress == Progress::Complete {
                assert!(groups.iter().all(|g| g.revision == B && g.ready()));
                assert_eq!(groups.len(), 2);
                assert!(pass >= 4, "two groups replaced one at a time");
                assert!(min_ready >= 2, "ready groups dipped to {min_ready}");
                return;
            }
            assert!(
                groups.len()
                    + p.actions
                        .iter()
                        .filter(|a| matches!(a, Action::Create { .. }))
                        .count()
                    <= 3,
                "never more than replicas + maxSurge groups"
            );
            groups = step(&groups, &p);
            min_ready = min_ready.min(groups.iter().filter(|g| g.ready()).count());
            all_ready(&mut groups);
        }
        panic!("the rollout did not complete");
    }

    #[test]
    fn the_first_step_creates_one_group_and_says_so_in_the_message() {
        let p = Case::new(2, B, vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)]).plan();
        assert_eq!(actions(&p), ["+b0"]);
        assert_eq!(p.status.rolling_out.as_deref(), Some(B));
        assert_eq!(p.status.updated_groups, 0);
        assert_eq!(p.status.ready_groups, 2);
        match &p.progress {
            Progress::RollingOut(m) => assert!(
                m.starts_with("rolling out bbbbb: 0/2 groups updated"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        // The new group is starting: nothing old goes yet.
        let p = Case::new(
            2,
            B,
            vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Ready),
                g(B, 0, Health::Starting),
            ],
        )
        .plan();
        assert!(p.actions.is_empty(), "{:?}", actions(&p));
        // It serves: one old group goes.
        let p = Case::new(
            2,
            B,
            vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Ready),
                g(B, 0, Health::Ready),
            ],
        )
        .plan();
        assert_eq!(actions(&p), ["-a1"]);
    }

    #[test]
    fn without_surge_one_group_is_given_up_at_a_time_and_the_rollout_completes() {
        let mut case = Case::new(2, B, vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)]);
        case.surge = 0;
        case.unavailable = 1;
        let p = case.plan();
        assert_eq!(actions(&p), ["-a1"], "no room to surge: make room first");
        let mut groups = case.groups.clone();
        let mut min_ready = usize::MAX;
        for _ in 0..8 {
            let mut c = Case::new(2, B, groups.clone());
            c.surge = 0;
            c.unavailable = 1;
            let p = c.plan();
            if p.progress == Progress::Complete {
                assert!(min_ready >= 1, "ready groups dipped to {min_ready}");
                return;
            }
            groups = step(&groups, &p);
            min_ready = min_ready.min(groups.iter().filter(|g| g.ready()).count());
            all_ready(&mut groups);
        }
        panic!("the rollout did not complete");
    }

    #[test]
    fn stuck_on_capacity_keeps_the_old_groups_and_names_what_is_missing() {
        let why = "group bbbbb-0 needs 1 pod(s) × 8 nvidia.com/gpu in one nvidia.com/gpu.clique domain; scheduler: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu";
        let p = Case::new(
            2,
            B,
            vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Ready),
                g(B, 0, Health::Unschedulable(why.into())),
            ],
        )
        .plan();
        assert!(p.actions.is_empty(), "nothing old goes: {:?}", actions(&p));
        assert_eq!(
            p.progress,
            Progress::WaitingForCapacity(format!("worker: {why}"))
        );
    }

    #[test]
    fn a_crash_during_a_rollout_replaces_the_crashed_group_only() {
        // The new group crashed: it goes whole and is created again under a free index.
        let p = Case::new(
            2,
            B,
            vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Ready),
                g(B, 0, Health::Broken("rank 1 failed".into())),
            ],
        )
        .plan();
        assert_eq!(actions(&p), ["-b0", "+b1"]);
        // An old group crashed: it is not replaced by its own revision but by the new one.
        let p = Case::new(
            2,
            B,
            vec![
                g(A, 0, Health::Broken("rank 1 failed".into())),
                g(A, 1, Health::Ready),
                g(B, 0, Health::Ready),
            ],
        )
        .plan();
        assert_eq!(actions(&p), ["-a0", "+b1"]);
    }

    #[test]
    fn rolling_back_mid_rollout_reuses_the_recorded_pass_and_rolls_back_group_by_group() {
        // A→B was half done; the spec is back at A, which passed before: no judging, no outage.
        let p = Case::new(
            2,
            A,
            vec![
                g(A, 1, Health::Ready),
                g(B, 0, Health::Ready),
                g(B, 1, Health::Starting),
            ],
        )
        .plan();
        assert_eq!(
            actions(&p),
            ["-b1", "+a0"],
            "the B group not serving goes, A refills"
        );
        assert_eq!(p.status.rolling_out.as_deref(), Some(A));
    }

    #[test]
    fn revocation_mid_rollout_freezes_every_group() {
        let mut case = Case::new(
            2,
            B,
            vec![
                g(A, 0, Health::Starting),
                g(A, 1, Health::Starting),
                g(B, 0, Health::Broken("rank 1 failed".into())),
            ],
        );
        case.licence_open = false;
        let p = case.plan();
        assert!(
            p.actions.is_empty(),
            "nothing is created or deleted: {:?}",
            actions(&p)
        );
        assert!(matches!(&p.progress, Progress::Frozen(m) if m.contains("licence gate closed")));
    }

    #[test]
    fn an_operator_template_change_rolls_one_group_at_a_time_without_a_new_revision() {
        let stale = |index| Group {
            current: false,
            ..g(A, index, Health::Ready)
        };
        let p = Case::new(2, A, vec![stale(0), stale(1)]).plan();
        assert_eq!(
            actions(&p),
            ["+a2"],
            "a fresh index: the stale groups keep theirs"
        );
        let p = Case::new(2, A, vec![stale(0), stale(1), g(A, 2, Health::Ready)]).plan();
        assert_eq!(actions(&p), ["-a1"]);
        assert_eq!(p.status.updated_groups, 1);
    }

    #[test]
    fn scaling_up_during_a_rollout_creates_new_revision_groups_within_the_surge() {
        let p = Case::new(
            3,
            B,
            vec![
                g(A, 0, Health::Ready),
                g(A, 1, Health::Ready),
                g(B, 0, Health::Ready),
            ],
        )
        .plan();
        // 3 groups exist, 3 + 1 allowed: one more B group; A stays until more B groups serve.
        assert_eq!(actions(&p), ["+b1"]);
        assert_eq!(p.status.desired_groups, 3);
    }

    #[test]
    fn while_the_target_is_judged_the_serving_revision_is_repaired_and_scaled() {
        let mut case = Case::new(
            3,
            B,
            vec![
                g(A, 0, Health::Broken("rank 1 failed".into())),
                g(A, 1, Health::Ready),
            ],
        );
        case.passed = vec![A];
        let p = case.plan();
        assert_eq!(
            actions(&p),
            ["-a0", "+a2", "+a3"],
            "crash replaced, replicas edit applied"
        );
        assert!(
            matches!(&p.progress, Progress::HoldingServing(m) if m.contains("revision aaaaa keeps serving"))
        );
        assert_eq!(p.status.rolling_out, None);
        case.desired = 1;
        case.groups = vec![g(A, 0, Health::Ready), g(A, 1, Health::Starting)];
        assert_eq!(
            actions(&case.plan()),
            ["-a1"],
            "scale-down gives up the group not serving"
        );
    }

    #[test]
    fn a_full_cluster_gives_up_one_serving_group_for_the_acceptance_run_only_when_allowed() {
        let mut case = Case::new(2, B, vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)]);
        case.passed = vec![A];
        case.needs_room = true;
        assert!(
            case.plan().actions.is_empty(),
            "maxUnavailable 0: never below replicas"
        );
        case.unavailable = 1;
        let p = case.plan();
        assert_eq!(actions(&p), ["-a1"]);
        assert!(
            p.notes[0].contains("to make room for the acceptance run"),
            "{:?}",
            p.notes
        );
        // Once room is made, the group is not created again while the run waits.
        case.groups = vec![g(A, 0, Health::Ready)];
        assert!(case.plan().actions.is_empty());
    }

    #[test]
    fn a_failed_target_keeps_its_groups_out_of_service_and_drops_unjudged_ones() {
        let mut case = Case::new(
            1,
            B,
            vec![
                g(B, 0, Health::Starting),
                g("ccccc33333", 0, Health::Starting),
            ],
        );
        case.passed = vec![];
        let p = case.plan();
        assert_eq!(actions(&p), ["-c0"]);
        assert!(
            matches!(&p.progress, Progress::HoldingServing(m) if m.contains("no group is created"))
        );
    }

    #[test]
    fn complete_only_when_every_group_is_current_and_ready() {
        let p = Case::new(
            2,
            B,
            vec![g(B, 0, Health::Ready), g(B, 1, Health::Starting)],
        )
        .plan();
        assert!(matches!(p.progress, Progress::Converging(_)));
        let p = Case::new(2, B, vec![g(B, 0, Health::Ready), g(B, 1, Health::Ready)]).plan();
        assert_eq!(p.progress, Progress::Complete);
        assert!(p.actions.is_empty());
        assert_eq!(p.status.rolling_out, None);
    }

    /// Two groups rolling to B, with `partition` and `mode`.
    fn plan_of(groups: &[Group], partition: i32, mode: Mode) -> RolePlan {
        let mut case = Case::new(2, B, groups.to_vec());
        case.partition = partition;
        case.mode = mode;
        case.plan()
    }

    /// Runs plans until nothing is left to do, every created group turning ready at once;
    /// returns the groups and the last plan.
    fn settle(mut groups: Vec<Group>, partition: i32) -> (Vec<Group>, RolePlan) {
        for _ in 0..10 {
            let p = plan_of(&groups, partition, Mode::Serving);
            if p.actions.is_empty() {
                return (groups, p);
            }
            groups = step(&groups, &p);
            all_ready(&mut groups);
        }
        panic!("no fixed point within ten passes");
    }

    fn revisions(groups: &[Group]) -> Vec<&str> {
        let mut r: Vec<&str> = groups.iter().map(|g| &g.revision[..1]).collect();
        r.sort_unstable();
        r
    }

    #[test]
    fn a_partition_holds_that_many_groups_on_the_earlier_revision_and_lowering_it_goes_on() {
        let start = vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)];
        let (held, p) = settle(start, 1);
        assert_eq!(revisions(&held), ["a", "b"], "one group rolled, one kept");
        assert!(
            matches!(&p.progress, Progress::Partitioned(m) if m.contains("partition 1")),
            "{:?}",
            p.progress
        );
        assert_eq!(p.status.updated_groups, 1);
        let (done, p) = settle(held, 0);
        assert_eq!(revisions(&done), ["b", "b"]);
        assert_eq!(p.progress, Progress::Complete);
        // A partition as large as replicas keeps every group where it is.
        let start = vec![g(A, 0, Health::Ready), g(A, 1, Health::Ready)];
        let (kept, _) = settle(start, 5);
        assert_eq!(revisions(&kept), ["a", "a"]);
    }

    #[test]
    fn a_lost_group_of_the_earlier_revision_is_replaced_by_one_of_the_new() {
        let groups = vec![
            g(A, 0, Health::Broken("rank 1 gone".into())),
            g(B, 0, Health::Ready),
        ];
        let (after, _) = settle(groups, 1);
        assert_eq!(revisions(&after), ["b", "b"]);
    }

    #[test]
    fn paused_creates_and_deletes_nothing_and_suspended_deletes_every_group() {
        let groups = vec![
            g(A, 0, Health::Ready),
            g(A, 1, Health::Broken("rank 0 failed".into())),
            g(B, 0, Health::Terminating),
        ];
        let paused = plan_of(&groups, 0, Mode::Paused);
        assert!(paused.actions.is_empty(), "{:?}", paused.actions);
        assert!(matches!(&paused.progress, Progress::Paused(m) if m.contains("1 of 2 ready")));
        let suspended = plan_of(&groups, 0, Mode::Suspended);
        assert_eq!(
            suspended.actions,
            [
                Action::Delete {
                    revision: A.into(),
                    index: 0
                },
                Action::Delete {
                    revision: A.into(),
                    index: 1
                }
            ],
            "every live group goes; one already going is left to go"
        );
        assert!(matches!(&suspended.progress, Progress::Suspended(_)));
        assert!(plan_of(&[], 0, Mode::Suspended).actions.is_empty());
    }

    #[test]
    fn a_serving_revision_whose_groups_were_all_lost_is_rebuilt_while_the_target_failed() {
        // B failed (no pass); A served one group, which broke and went whole.
        let mut case = Case::new(1, B, vec![]);
        case.passed = vec![A];
        case.last_serving = Some(A);
        let p = case.plan();
        assert_eq!(actions(&p), ["+a0"], "{p:?}");
        assert_eq!(p.status.serving_revision.as_deref(), Some(A));
        assert_eq!(
            p.status.min_available_groups, 1,
            "1 replica, maxUnavailable 0"
        );
        // Its broken group is deleted and a new one made at once.
        case.groups = vec![g(A, 0, Health::Broken("rank 0 is gone".into()))];
        assert_eq!(actions(&case.plan()), ["-a0", "+a1"]);
        // A revision that lost its pass is not rebuilt.
        case.passed = vec![];
        case.groups = vec![];
        let p = case.plan();
        assert_eq!(actions(&p), Vec::<String>::new());
        assert_eq!(p.status.serving_revision, None);
    }
}
