//! The workers stage: every role's groups planned by the rollout planner from the groups as
//! observed and the judgements known, then the objects around them: group and role Services,
//! rank tables, the peer endpoints, serving PodGroups, PodDisruptionBudgets and the
//! ControllerRevision of the target.

pub mod claims;
pub mod decide;
pub mod rollout;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::Reason;
use crate::api::{labels, Component, DeepInferDeploymentStatus, RoleStatus};
use crate::controller::act::{self, Act};
use crate::controller::build;
use crate::controller::gang::partial_placement;
use crate::controller::gates::licence::entitlement;
use crate::controller::gates::licence::LicenceVerdict;
use crate::controller::gates::workers::decide::{
    group_views, placement_retry, workers_gate, Watchdog,
};
use crate::controller::gates::workers::rollout::{
    Action as GroupAction, Candidate, Health, Mode, Progress, RoleInput,
};
use crate::controller::gates::{earliest, Plan, Settings};
use crate::controller::observe::{named, Observed};
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;

/// A role's placement retry record kept by this operator: (retries, last retry).
pub type Retry = (i32, Timestamp);

/// What the workers stage found.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// The WorkersReady gate.
    pub gate: Gate,
    /// Every role's status.
    pub roles: Vec<RoleStatus>,
    /// Look again no later than this (the watchdog's deadline, a retry's backoff).
    pub wake: Option<Duration>,
    /// Each role's retry record to keep (`None`: forget it), when the stage acts.
    pub retries: Vec<(String, Option<Retry>)>,
}

/// What the workers stage reads.
pub struct Input<'a> {
    /// The deployment.
    pub did: &'a ValidatedDeployment,
    /// The target revision.
    pub target: &'a str,
    /// The judgements known.
    pub known: &'a DeepInferDeploymentStatus,
    /// The licence gate.
    pub licence: &'a LicenceVerdict,
    /// Whether groups are created, replaced and deleted (the licence gate is open, or closed
    /// with `--license-withdrawal=stop`).
    pub acting: bool,
    /// Every group goes (`spec.suspend`, or a closed licence with `--license-withdrawal=stop`).
    pub stop: bool,
    /// Roles whose group of the target's acceptance run waits for devices.
    pub needs_room: &'a [String],
    /// The target's candidate group (`spec.acceptance.mode: serving`).
    pub candidate: Candidate,
    /// This operator's retry record per role (newer than the status's after a deletion).
    pub remembered: &'a BTreeMap<String, Retry>,
    /// Operator settings.
    pub settings: Settings<'a>,
    /// The pass's time.
    pub now: Timestamp,
}

/// The specs of every revision whose groups can be built: the target's and those kept in a
/// ControllerRevision.
fn buildable_specs(
    input: &Input<'_>,
    observed: &Observed,
) -> (BTreeMap<String, ValidatedDeployment>, bool) {
    let did = input.did;
    let mut specs = BTreeMap::new();
    for kept in &observed.revisions {
        let past =
            build::kept_spec(kept).and_then(|spec| did.with_spec(spec, input.settings.limits).ok());
        if let (Some(rev), Some(past)) = (kept.labels().get(labels::REVISION), past) {
            specs.insert(rev.clone(), past);
        }
    }
    let target_kept = specs.contains_key(input.target);
    specs.insert(input.target.to_string(), did.clone());
    (specs, target_kept)
}

/// Per role: the revisions whose latest judgement passed with that role included, and those in
/// service whose verdict is not known (a lost memory is not a verdict against them).
fn passed_for(input: &Input<'_>, observed: &Observed) -> impl Fn(&str) -> BTreeSet<String> {
    let revisions: BTreeSet<String> = observed
        .workers
        .iter()
        .filter_map(|p| p.labels().get(labels::REVISION).cloned())
        .chain(std::iter::once(input.target.to_string()))
        .chain(input.known.serving_revisions())
        .collect();
    let unsettled =
        entitlement::unsettled_in_service(&observed.workers, input.licence, Some(input.known));
    let passed: Vec<(String, Vec<String>)> = revisions
        .iter()
        .map(|r| {
            let roles = input
                .did
                .spec
                .roles
                .iter()
                .filter(|role| {
                    input
                        .known
                        .latest_judgement(r)
                        .is_some_and(|j| j.passed_for(&role.name))
                        || unsettled.contains(&(r.clone(), role.name.clone()))
                })
                .map(|role| role.name.clone())
                .collect();
            (r.clone(), roles)
        })
        .collect();
    move |role: &str| {
        passed
            .iter()
            .filter(|(_, roles)| roles.iter().any(|r| r == role))
            .map(|(rev, _)| rev.clone())
            .collect()
    }
}

/// The workers stage.
pub fn plan<'o>(input: &Input<'_>, observed: &'o Observed) -> Plan<'o, Found> {
    let did = input.did;
    let (specs, target_kept) = buildable_specs(input, observed);
    let passed_for = passed_for(input, observed);
    let watchdog = Watchdog {
        timeout: input.settings.partial_group_timeout,
        now: input.now,
    };
    let mut found = Found::default();
    let mut acts = Vec::new();
    let mut progress = Vec::new();
    let mut kept: Vec<(String, String, i32)> = Vec::new();
    let mut made = BTreeSet::new();
    for role in &did.spec.roles {
        let views = group_views(&observed.workers, &role.name, &specs, watchdog);
        let planned = role_plan(
            input,
            observed,
            role,
            &views,
            &specs,
            &passed_for(&role.name),
            watchdog,
        );
        found.wake = earliest(found.wake, planned.wake);
        if input.acting {
            found.retries.push((role.name.clone(), planned.retry));
            acts.extend(planned.acts);
        }
        made.extend(planned.made);
        kept.extend(
            planned
                .kept
                .into_iter()
                .map(|(rev, i)| (role.name.clone(), rev, i)),
        );
        found.roles.push(planned.status);
        progress.push(planned.progress);
    }
    if input.acting {
        acts.extend(around_groups(input, observed, &specs, &kept, &made));
        acts.extend(revisions(input, observed, target_kept));
    }
    found.gate = workers_gate(&found.roles, &progress);
    Plan::with(found, acts)
}

/// One role's plan.
struct RolePlan<'o> {
    status: RoleStatus,
    progress: Progress,
    wake: Option<Duration>,
    retry: Option<Retry>,
    /// The groups kept: (revision, index).
    kept: Vec<(String, i32)>,
    /// Names of the PodGroups and rank tables its new groups write in this pass.
    made: BTreeSet<String>,
    acts: Vec<Act<'o>>,
}

fn role_plan<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    role: &crate::api::RoleSpec,
    views: &[(rollout::Group, Vec<&'o Pod>)],
    specs: &BTreeMap<String, ValidatedDeployment>,
    passed: &BTreeSet<String>,
    watchdog: Watchdog,
) -> RolePlan<'o> {
    let named = |f: fn(&Health) -> Option<&String>| -> Vec<&str> {
        views
            .iter()
            .filter_map(|(g, _)| f(&g.health).map(String::as_str))
            .collect()
    };
    let stranded = named(|h| match h {
        Health::Stranded(why) => Some(why),
        _ => None,
    });
    let broken = named(|h| match h {
        Health::Broken(why) => Some(why),
        _ => None,
    });
    let mut wake = None;
    // The watchdog looks again when a partly placed group's time is up.
    for (_, members) in views {
        if let Some(p) = partial_placement(members, members.len()) {
            let left = watchdog.timeout.saturating_sub(p.age(watchdog.now));
            wake = earliest(wake, Some(left.max(Duration::from_secs(1))));
        }
    }
    let previous = remembered_retry(input, role);
    let retry = placement_retry(&role.name, previous.as_ref(), stranded.len(), watchdog.now);
    if let Some(wait) = retry.wait {
        wake = earliest(wake, Some(wait.max(Duration::from_secs(1))));
    }
    let mut plan = rollout::plan(&RoleInput {
        role: &role.name,
        desired: role.replicas,
        rollout: role.rollout.clone(),
        groups: views.iter().map(|(g, _)| g.clone()).collect(),
        target: input.target,
        last_serving: input.known.serving_revision_of(&role.name),
        passed,
        buildable: &specs.keys().cloned().collect(),
        licence_open: input.acting,
        acceptance_needs_room: input.needs_room.contains(&role.name),
        placement_hold: retry.hold.clone(),
        candidate: input.candidate,
        mode: if input.did.spec.suspend || input.stop {
            Mode::Suspended
        } else if input.did.spec.paused {
            Mode::Paused
        } else {
            Mode::Serving
        },
    });
    // A role whose groups all serve has nothing left to retry.
    let keep = (plan.progress != Progress::Complete && retry.retries > 0)
        .then_some(retry.retries)
        .zip(retry.last);
    if let Some((retries, last)) = keep {
        plan.status.placement_retries = Some(retries);
        plan.status.last_placement_retry = Some(Time(last));
    }
    for note in &plan.notes {
        tracing::info!(%note, "making room for acceptance");
    }
    let mut acts: Vec<Act<'o>> = Vec::new();
    for why in &stranded {
        acts.push(warning(Reason::GroupPartlyPlaced, why));
    }
    for why in &broken {
        acts.push(warning(Reason::GroupReplaced, why));
    }
    let (group_acts, kept, made) = carry_out(observed, role, views, specs, &plan.actions);
    acts.extend(group_acts);
    RolePlan {
        progress: progress_with_news(&plan, &broken),
        status: plan.status,
        wake,
        retry: keep,
        kept,
        made,
        acts,
    }
}

/// The acts of the rollout's group `actions` for `role`, the groups kept (those not deleted, and
/// those created) and the names of the PodGroups and rank tables the new groups write.
fn carry_out<'o>(
    observed: &'o Observed,
    role: &crate::api::RoleSpec,
    views: &[(rollout::Group, Vec<&'o Pod>)],
    specs: &BTreeMap<String, ValidatedDeployment>,
    actions: &[GroupAction],
) -> (Vec<Act<'o>>, Vec<(String, i32)>, BTreeSet<String>) {
    let mut acts = Vec::new();
    let mut made = BTreeSet::new();
    let deleted: BTreeSet<(String, i32)> = actions
        .iter()
        .filter_map(|a| match a {
            GroupAction::Delete { revision, index } => Some((revision.clone(), *index)),
            GroupAction::Create { .. } => None,
        })
        .collect();
    let mut kept: Vec<(String, i32)> = views
        .iter()
        .filter(|(g, _)| {
            g.health != Health::Terminating && !deleted.contains(&(g.revision.clone(), g.index))
        })
        .map(|(g, _)| (g.revision.clone(), g.index))
        .collect();
    for action in actions {
        match action {
            GroupAction::Delete { revision, index } => {
                let members = views
                    .iter()
                    .find(|(g, _)| g.revision == *revision && g.index == *index)
                    .map(|(_, m)| m.as_slice())
                    .unwrap_or_default();
                acts.extend(
                    members
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .map(|p| Act::delete(*p)),
                );
            }
            GroupAction::Create { revision, index } => {
                let Some(at) = specs.get(revision) else {
                    continue;
                };
                let Some(role_at) = at.spec.roles.iter().find(|r| r.name == role.name) else {
                    continue;
                };
                kept.push((revision.clone(), *index));
                acts.extend(create_group(
                    observed, at, role_at, revision, *index, &mut made,
                ));
            }
        }
    }
    (acts, kept, made)
}

/// A Warning event about a group deleted whole.
fn warning<'o>(reason: Reason, why: &str) -> Act<'o> {
    tracing::warn!(%reason, %why, "deleting a group whole");
    Act::Warn {
        reason,
        action: "DeleteGroup",
        note: why.to_string(),
    }
}

/// The group's PodGroup before its pods (they wait for it, then are bound all at once), the
/// rank table the pods mount (it says "initializing" until every rank is allocated), then the
/// pods. A PodGroup the cache holds already (a group created again before its pods are seen, or
/// after they were deleted) is applied over its cached copy, which costs no write when nothing
/// changed. The names of the PodGroup and rank table it writes go into `made`: the objects
/// around the groups leave them to this pass's creation.
fn create_group<'o>(
    observed: &'o Observed,
    at: &ValidatedDeployment,
    role: &crate::api::RoleSpec,
    revision: &str,
    index: i32,
    made: &mut BTreeSet<String>,
) -> Vec<Act<'o>> {
    let mut acts = Vec::new();
    if at.pod_groups {
        let pod_group = build::group_pod_group(at, role, revision, index);
        let cached = named(&observed.pod_groups, &pod_group.name_any());
        made.insert(pod_group.name_any());
        acts.push(Act::apply(pod_group, cached));
    }
    // A rank table the cache holds is left to the pass that keeps it current (it may say
    // "completed" already).
    let table = build::uses_rank_tables(&at.spec)
        .then(|| build::rank_table_configmap(at, role, revision, index, &[]))
        .filter(|t| named(&observed.rank_tables, &t.name_any()).is_none());
    if let Some(table) = table {
        made.insert(table.name_any());
        acts.push(Act::apply(table, None));
    }
    acts.extend(
        build::group_pods(at, role, index, revision)
            .into_iter()
            .map(|pod| Act::apply(pod, None)),
    );
    acts
}

/// The role's progress, with the note of a held serving group and why groups go whole (news for
/// whoever reads the condition, not only the event).
fn progress_with_news(plan: &rollout::RolePlan, broken: &[&str]) -> Progress {
    let mut p = plan.progress.clone();
    if let (Some(note), Progress::HoldingServing(m)) = (plan.notes.first(), &plan.progress) {
        p = Progress::HoldingServing(format!("{m}; {note}"));
    }
    if broken.is_empty() {
        return p;
    }
    let why = broken.join("; ");
    match p {
        Progress::Converging(m) => Progress::Converging(format!("{m}; {why}")),
        Progress::RollingOut(m) => Progress::RollingOut(format!("{m}; {why}")),
        Progress::HoldingServing(m) => Progress::HoldingServing(format!("{m}; {why}")),
        Progress::Complete => Progress::Converging(why),
        other => other,
    }
}

/// The role's retry record: the status's, or this operator's own if newer (the status read in
/// the pass right after a deletion may predate it).
fn remembered_retry(input: &Input<'_>, role: &crate::api::RoleSpec) -> Option<RoleStatus> {
    let mut out = input
        .known
        .roles
        .iter()
        .find(|r| r.name == role.name)
        .cloned();
    if let Some((retries, last)) = input.remembered.get(&role.name).copied() {
        let stored = out
            .as_ref()
            .and_then(|s| s.last_placement_retry.as_ref())
            .map(|t| t.0);
        if stored.is_none_or(|t| t < last) {
            let s = out.get_or_insert_with(RoleStatus::default);
            s.placement_retries = Some(retries);
            s.last_placement_retry = Some(Time(last));
        }
    }
    out
}

/// The objects around the kept groups, each kind converged on what the cache holds of it. The
/// PodGroups and rank tables named in `made` are written by this pass's new groups already (the
/// cache holds them only from the next pass on): they are left out on both sides.
fn around_groups<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    specs: &BTreeMap<String, ValidatedDeployment>,
    kept: &[(String, String, i32)],
    made: &BTreeSet<String>,
) -> Vec<Act<'o>> {
    let did = input.did;
    let name = did.name_any();
    let services = managed(&observed.services, |s: &Service| {
        matches!(
            component(s),
            Some(Component::Serving | Component::Rendezvous)
        )
    });
    let mut acts = act::converge(build::services(did, kept), &services);
    // Rank tables of the kept groups, from their pods' device allocations as observed.
    let tables = managed(&observed.rank_tables, |t: &ConfigMap| {
        !build::is_acceptance_rank_table(&name, t) && !made.contains(&t.name_any())
    });
    acts.extend(act::converge(
        unmade(build::rank_tables(specs, kept, &observed.workers), made),
        &tables,
    ));
    // Where decode groups find the ready prefill / vision leaders (rewritten in place).
    let endpoints: Vec<ConfigMap> = build::peer_endpoints_configmap(did, kept, &observed.workers)
        .into_iter()
        .collect();
    acts.extend(act::converge(endpoints, &all(&observed.peer_endpoints)));
    if did.pod_groups {
        let serving = managed(&observed.pod_groups, |g: &PodGroup| {
            component(g) == Some(Component::Worker) && !made.contains(&g.name_any())
        });
        acts.extend(act::converge(
            unmade(build::serving_pod_groups(did, specs, kept), made),
            &serving,
        ));
    }
    let budgets = did
        .spec
        .roles
        .iter()
        .map(|r| build::budget(did, r))
        .collect();
    acts.extend(act::converge(budgets, &all(&observed.budgets)));
    acts
}

/// `desired` but for the objects named in `made`.
fn unmade<K: ResourceExt>(desired: Vec<K>, made: &BTreeSet<String>) -> Vec<K> {
    desired
        .into_iter()
        .filter(|o| !made.contains(&o.name_any()))
        .collect()
}

/// The component of an object.
fn component<K: kube::Resource>(o: &K) -> Option<Component> {
    Component::of(o.meta().labels.as_ref()?)
}

/// The cached objects of one kind that this stage manages.
fn managed<K>(existing: &[K], ours: impl Fn(&K) -> bool) -> Vec<&K> {
    existing.iter().filter(|o| ours(o)).collect()
}

/// Every cached object of one kind.
fn all<K>(existing: &[K]) -> Vec<&K> {
    existing.iter().collect()
}

/// Deletes of every worker pod and every running acceptance Job (a closed licence with
/// `--license-withdrawal=stop` on a spec that is refused, so that no group can be planned).
pub fn stop_all(observed: &Observed) -> Vec<Act<'_>> {
    let (mut acts, _) = crate::controller::gates::acceptance::stop_running(observed);
    acts.extend(
        observed
            .workers
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(Act::delete),
    );
    acts
}

/// Keeps a ControllerRevision for the target (so its groups can be rebuilt once the spec moves
/// on) and deletes those of revisions that no longer serve (no pods, and no role recorded
/// serving on them).
fn revisions<'o>(input: &Input<'_>, observed: &'o Observed, target_kept: bool) -> Vec<Act<'o>> {
    let mut acts = Vec::new();
    if !target_kept {
        let number = observed
            .revisions
            .iter()
            .filter_map(|r| r.revision)
            .max()
            .unwrap_or(0)
            + 1;
        acts.push(Act::apply(
            build::controller_revision(input.did, input.target, number),
            None,
        ));
    }
    let live = observed.revisions_serving(input.known);
    acts.extend(
        observed
            .revisions
            .iter()
            .filter(|kept| {
                kept.labels()
                    .get(labels::REVISION)
                    .is_some_and(|r| r != input.target && !live.contains(r))
            })
            .map(Act::delete),
    );
    acts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AcceptanceResult, AcceptanceStatus};
    use crate::controller::gates::fixture::{self, described};
    use crate::controller::gates::licence::licence_gate;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    struct Case {
        did: ValidatedDeployment,
        target: String,
        observed: Observed,
        known: DeepInferDeploymentStatus,
        licence: LicenceVerdict,
        stop: bool,
    }

    impl Case {
        /// The fixture with its licence accepted and its target passed.
        fn new() -> Self {
            Self::of(fixture::raw())
        }

        /// `raw` with its licence accepted and its target passed.
        fn of(mut raw: crate::api::DeepInferDeployment) -> Self {
            raw.annotations_mut()
                .insert(crate::api::LICENSE_ACCEPTED_ANNOTATION.into(), "mit".into());
            let licence = licence_gate(raw.annotations(), "mit", &["mit".to_string()]);
            let did = fixture::valid(raw);
            let target = build::revision(&did.spec);
            let known = DeepInferDeploymentStatus {
                judgements: vec![AcceptanceStatus {
                    revision: target.clone(),
                    result: AcceptanceResult::Passed,
                    ..AcceptanceStatus::default()
                }],
                ..DeepInferDeploymentStatus::default()
            };
            Self {
                did,
                target,
                observed: Observed::default(),
                known,
                licence,
                stop: false,
            }
        }

        fn plan(&self) -> Plan<'_, Found> {
            let remembered = BTreeMap::new();
            let input = Input {
                did: &self.did,
                target: &self.target,
                known: &self.known,
                licence: &self.licence,
                acting: self.licence.is_accepted() || self.stop,
                stop: self.stop,
                needs_room: &[],
                candidate: Candidate::None,
                remembered: &remembered,
                settings: fixture::settings(),
                now: Timestamp::from_second(10_000).expect("time"),
            };
            // The remembered map only lives for the call: the plan borrows the snapshot alone.
            plan(&input, &self.observed)
        }

        /// Every pod of group `index` of the target, ready and accepted.
        fn serving_group(&self, index: i32) -> Vec<Pod> {
            build::group_pods(&self.did, &self.did.spec.roles[0], index, &self.target)
                .into_iter()
                .map(|mut pod| {
                    pod.status = Some(PodStatus {
                        phase: Some("Running".into()),
                        conditions: Some(
                            ["Ready", crate::api::ACCEPTED_POD_CONDITION]
                                .map(|t| PodCondition {
                                    type_: t.into(),
                                    status: "True".into(),
                                    ..PodCondition::default()
                                })
                                .to_vec(),
                        ),
                        ..PodStatus::default()
                    });
                    pod
                })
                .collect()
        }
    }

    fn pods_created(acts: &[String]) -> usize {
        acts.iter().filter(|a| a.starts_with("apply Pod ")).count()
    }

    #[test]
    fn a_passed_target_gets_every_group_then_the_objects_around_them() {
        let case = Case::new();
        let plan = case.plan();
        let acts = described(&plan.acts);
        assert_eq!(pods_created(&acts), 4, "two groups of two pods: {acts:?}");
        let last_pod = acts
            .iter()
            .rposition(|a| a.starts_with("apply Pod "))
            .unwrap_or(0);
        let first_service = acts
            .iter()
            .position(|a| a.starts_with("apply Service "))
            .unwrap_or(0);
        assert!(
            last_pod < first_service,
            "pods before the Services that select them: {acts:?}"
        );
        assert!(
            acts.iter().any(|a| a.starts_with("apply Budget ")),
            "{acts:?}"
        );
        assert!(
            acts.iter().any(|a| a.starts_with("apply Revision ")),
            "{acts:?}"
        );
        assert_eq!(plan.found.roles.len(), 1);
        assert!(
            matches!(plan.found.gate, Gate::Progressing(..)),
            "{:?}",
            plan.found.gate
        );
    }

    #[test]
    fn a_new_groups_pod_group_and_rank_table_are_written_once_in_its_pass() {
        let mut raw = fixture::raw();
        raw.spec.accelerator.kind = crate::api::AcceleratorType::Ascend;
        let mut case = Case::of(raw);
        case.did.pod_groups = true;
        let acts = described(&case.plan().acts);
        assert_eq!(pods_created(&acts), 4, "{acts:?}");
        for kind in ["PodGroup", "ConfigMap"] {
            let applied: Vec<&String> = acts
                .iter()
                .filter(|a| a.starts_with(&format!("apply {kind} ")))
                .collect();
            let mut once = applied.clone();
            once.sort();
            once.dedup();
            assert!(applied.len() >= 2, "one {kind} per group: {acts:?}");
            assert_eq!(applied, once, "each {kind} once: {acts:?}");
        }
    }

    #[test]
    fn an_unjudged_target_gets_no_group() {
        let mut case = Case::new();
        case.known.judgements.clear();
        let acts = described(&case.plan().acts);
        assert_eq!(pods_created(&acts), 0, "{acts:?}");
    }

    #[test]
    fn serving_groups_of_a_passed_target_are_left_as_they_are() {
        let mut case = Case::new();
        case.observed.workers = [case.serving_group(0), case.serving_group(1)].concat();
        let plan = case.plan();
        let acts = described(&plan.acts);
        assert_eq!(pods_created(&acts), 0, "{acts:?}");
        assert!(!acts.iter().any(|a| a.starts_with("delete ")), "{acts:?}");
        assert!(plan.found.gate.passed(), "{:?}", plan.found.gate);
    }

    #[test]
    fn a_closed_licence_withholds_everything_or_with_stop_deletes_every_pod() {
        let mut case = Case::new();
        case.observed.workers = [case.serving_group(0), case.serving_group(1)].concat();
        case.licence = licence_gate(&Default::default(), "mit", &["mit".to_string()]);
        assert!(case.plan().acts.is_empty(), "withheld: nothing is written");
        case.stop = true;
        let acts = described(&case.plan().acts);
        let deleted = acts.iter().filter(|a| a.starts_with("delete Pod ")).count();
        assert_eq!(deleted, 4, "{acts:?}");
        assert_eq!(pods_created(&acts), 0, "{acts:?}");
    }

    #[test]
    fn a_broken_group_is_replaced_whole_with_a_warning() {
        let mut case = Case::new();
        let mut broken = case.serving_group(1);
        broken.pop();
        case.observed.workers = [case.serving_group(0), broken].concat();
        let acts = described(&case.plan().acts);
        assert!(acts.contains(&"warn GroupReplaced".to_string()), "{acts:?}");
        assert!(
            acts.iter().any(|a| a.starts_with("delete Pod ")),
            "{acts:?}"
        );
    }
}
