//! The acceptance stage: runs (once) and judges the acceptance workload of the target revision.
//! A recorded judgement of the same revision, acceptance spec and rerun token is final and
//! reused (a rollback runs nothing). A run starts the other roles' groups first, as they serve,
//! then the judged group; its verdict is read from the judge's termination message only, and
//! recorded with the run's Jobs stopped and the judgement kept beside its evidence.

pub mod decide;
pub mod memory;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::acceptance::placement::{Placement, PLACEMENT_ANNOTATION};
use crate::api::{
    labels, pinned, AcceptanceSpec, AcceptanceStatus, Component, DeepInferDeploymentStatus, Reason,
    ReviewRecord, RERUN_ACCEPTANCE_ANNOTATION,
};
use crate::controller::act::{self, Act};
use crate::controller::build::{self, AcceptanceNames, RunGroup};
use crate::controller::fleet::Admission;
use crate::controller::gates::acceptance::decide::{self as judge, Step};
use crate::controller::gates::acceptance::memory::JUDGEMENT_ANNOTATION;
use crate::controller::gates::checkpoint::decide::running_job_gate;
use crate::controller::gates::housekeeping::retention;
use crate::controller::gates::jobs::{self, foreign_job, job_state, JobState};
use crate::controller::gates::{Plan, Settings};
use crate::controller::observe::{named, Fresh, Observed, Read};
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;

/// What identifies one acceptance run of a revision: the rerun token, the prompts as resolved
/// (from `promptsFrom`) and the hash of what is judged, and the names derived from them.
#[derive(Clone, Debug)]
pub struct Run {
    /// The rerun annotation's value.
    pub token: String,
    /// Hash of the acceptance spec as judged (prompts resolved).
    pub spec_hash: String,
    /// The acceptance spec with its prompts resolved, or why they cannot be.
    pub resolved: Result<AcceptanceSpec, String>,
    /// The run's object names.
    pub names: AcceptanceNames,
}

impl Run {
    /// The run of `revision` that `did` asks for, as observed.
    pub fn of(did: &ValidatedDeployment, revision: &str, observed: &Observed) -> Self {
        let token = did
            .annotations()
            .get(RERUN_ACCEPTANCE_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        // The prompts (resolved from promptsFrom) and expectations are part of what was judged:
        // a change re-runs acceptance (the revision's pods keep serving on its last pass until
        // the new verdict).
        let resolved = judge::resolve(
            &did.spec.acceptance,
            &did.namespace,
            observed.prompts.as_ref(),
        );
        let spec_hash = judge::judged_spec_hash(&did.spec.acceptance, resolved.as_ref().ok());
        let names =
            AcceptanceNames::new(&did.name_any(), revision, &format!("{token}/{spec_hash}"));
        Self {
            token,
            spec_hash,
            resolved,
            names,
        }
    }

    /// The leader Job (rank 0 of the judged group), where the verdict is read.
    fn leader(&self, did: &ValidatedDeployment) -> Option<String> {
        self.names.groups(&did.spec).first().map(|g| g.job(0))
    }
}

/// The run's leader Job whose pods must be read from the API server rather than the cache: its
/// verdict is not in status (`known`), it finished, and the cache holds no summary of its judge
/// (the verdict never rests on a view older than the Job's completion). Once the verdict is in
/// status its pods are no longer read (nor cached).
pub fn leader_to_read(
    did: &ValidatedDeployment,
    run: &Run,
    observed: &Observed,
    known: &DeepInferDeploymentStatus,
    revision: &str,
) -> Option<String> {
    known
        .recorded_judgement(revision, &run.spec_hash, &run.token)
        .is_none()
        .then(|| run.leader(did))
        .flatten()
        .filter(|leader| jobs::needs_fresh_pods(observed, leader, build::JUDGE_CONTAINER))
}

/// What the acceptance stage found.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// The gate.
    pub gate: Gate,
    /// The judgement that decides the gate, when there is one (for `status.acceptance`).
    pub status: Option<AcceptanceStatus>,
    /// A judgement made in this pass, to record once its acts are done.
    pub recorded: Option<AcceptanceStatus>,
    /// How long the judged run took (seconds), with `recorded`.
    pub seconds: f64,
    /// Roles whose group of the run waits for devices.
    pub needs_room: Vec<String>,
    /// The run's leader Job while its verdict is not in status at the start of the pass (it
    /// keeps no TTL until then).
    pub unjudged: Option<String>,
    /// Reads the plan waits for (the pass does them and plans again).
    pub needs: Vec<Read>,
}

impl Found {
    fn gate(gate: Gate) -> Self {
        Self {
            gate,
            ..Self::default()
        }
    }
}

/// What the acceptance stage reads.
pub struct Input<'a> {
    /// The deployment.
    pub did: &'a ValidatedDeployment,
    /// The target revision.
    pub revision: &'a str,
    /// Its run.
    pub run: &'a Run,
    /// The judgements known.
    pub known: &'a DeepInferDeploymentStatus,
    /// Operator settings.
    pub settings: Settings<'a>,
    /// The pass's time.
    pub now: Timestamp,
}

/// The acceptance stage. A run that may start asks the fleet's queue first
/// ([`Read::Admission`]): until the pass has its answer, the plan only says so.
pub fn plan<'o>(input: &Input<'_>, observed: &'o Observed) -> Plan<'o, Found> {
    let did = input.did;
    let groups = input.run.names.groups(&did.spec);
    if groups.is_empty() {
        return Plan::only(Found::gate(Gate::Failed(
            Reason::InvalidSpec,
            "spec.roles: at least one role is required".into(),
        )));
    }
    let leader = groups[0].job(0);
    if let Some(conflict) = foreign_job(observed, &leader, &input.run.names.key) {
        return Plan::only(Found::gate(conflict));
    }
    let view = RunView::new(input, observed, &groups);
    let step = judge::decide(
        input
            .known
            .recorded_judgement(input.revision, &input.run.spec_hash, &input.run.token),
        &view.leader_state,
        &view.leader_pods,
        &view.run_pods,
        &view.upstream,
        &view.judging(input),
    );
    let mut acts = if matches!(
        step,
        Step::Running | Step::StartJudged | Step::WaitingForCapacity(_)
    ) {
        rank_tables(input, observed, &groups)
    } else {
        Vec::new()
    };
    // Until a verdict of this run is in status, its leader Job is where it is read from.
    let unjudged = (!matches!(step, Step::Reuse(_))).then(|| leader.clone());
    let mut plan = match step {
        Step::Reuse(a) => Plan::only(Found {
            gate: judge::judged_gate(&a),
            status: Some(a),
            ..Found::default()
        }),
        Step::Start => start(input, observed, &groups, &view),
        Step::StartJudged => Plan::with(
            Found::gate(view.running(input)),
            start_groups(input, observed, &groups[..1]),
        ),
        Step::Running => {
            // A pod that cannot start (engine image, configuration) says so on the gate; the
            // run's deadline only starts when its engine runs.
            let gate = running_job_gate(
                &leader,
                &view.run_pods,
                (&did.claim, Some("Bound")),
                None,
                view.running(input),
            );
            Plan::only(Found::gate(gate))
        }
        Step::WaitingForCapacity(why) => Plan::only(waiting(input, observed, &groups, &why)),
        Step::Rerun => Plan::with(
            Found::gate(Gate::Progressing(
                Reason::AcceptanceRunning,
                format!("the acceptance Job {leader} ended without a verdict and its pod is gone or never ran; it is run again"),
            )),
            stop(did, observed, &groups, 0),
        ),
        Step::Record {
            judgement,
            stop_leader,
        } => record(input, observed, &groups, judgement, stop_leader),
    };
    acts.append(&mut plan.acts);
    plan.acts = acts;
    plan.found.unjudged = unjudged;
    plan
}

/// The run's pods and Jobs as the pass sees them.
struct RunView<'v> {
    leader: String,
    leader_state: JobState,
    leader_pods: Vec<&'v Pod>,
    run_pods: Vec<&'v Pod>,
    upstream: judge::Upstream<'v>,
    roles: Vec<String>,
    review: Option<ReviewRecord>,
}

impl<'v> RunView<'v> {
    fn new(input: &Input<'v>, observed: &'v Observed, groups: &[RunGroup<'_>]) -> Self {
        let did = input.did;
        let leader = groups[0].job(0);
        let others = &groups[1..];
        let leader_pods: Vec<&Pod> = match observed.fresh.job_pods.get(&leader) {
            Some(pods) => pods.iter().collect(),
            None => observed.pods_of_job(&leader),
        };
        let upstream = judge::Upstream {
            expected: others
                .iter()
                .map(|g| usize::try_from(build::group_shape(&did.spec, g.role).pods).unwrap_or(0))
                .sum(),
            created: others.iter().any(|g| observed.job(&g.job(0)).is_some()),
            pods: others
                .iter()
                .flat_map(|g| pods_of(did, observed, g))
                .collect(),
        };
        Self {
            leader_state: jobs::state_of(
                observed.job(&leader),
                &leader_pods,
                build::JUDGE_CONTAINER,
            ),
            leader,
            leader_pods,
            run_pods: groups
                .iter()
                .flat_map(|g| pods_of(did, observed, g))
                .collect(),
            upstream,
            roles: groups.iter().map(|g| g.role.name.clone()).collect(),
            // The review decisions on the resource (handed to the judge when the run starts,
            // recorded with its verdict).
            review: ReviewRecord::from_annotations(did.annotations()),
        }
    }

    fn judging<'j>(&'j self, input: &'j Input<'_>) -> judge::Judging<'j> {
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
    fn running(&self, input: &Input<'_>) -> Gate {
        let (revision, leader) = (input.revision, &self.leader);
        let role = &self.roles[0];
        let message = if matches!(self.leader_state, JobState::Missing) {
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
fn pods_of<'o>(
    did: &ValidatedDeployment,
    observed: &'o Observed,
    g: &RunGroup<'_>,
) -> Vec<&'o Pod> {
    (0..build::group_shape(&did.spec, g.role).pods)
        .flat_map(|rank| observed.pods_of_job(&g.job(rank)))
        .collect()
}

/// A run that may start: unless its prompts cannot be resolved, a review is missing or the
/// fleet's queue holds it, its shared objects and the other roles' groups (the judged group
/// once their engines run).
fn start<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    groups: &[RunGroup<'_>],
    view: &RunView<'_>,
) -> Plan<'o, Found> {
    let (did, run) = (input.did, input.run);
    let spec = match &run.resolved {
        Ok(spec) => spec,
        Err(message) => {
            return Plan::only(Found::gate(Gate::Failed(
                Reason::MissingDependency,
                message.clone(),
            )))
        }
    };
    if let Some(missing) = judge::review_missing(
        view.review.as_ref(),
        &run.token,
        &run.spec_hash,
        &input.known.judgements,
    ) {
        return Plan::only(Found::gate(Gate::Failed(
            Reason::AcceptanceReviewRequired,
            missing,
        )));
    }
    let key = crate::controller::fleet::run_key(&did.namespace, &did.name_any(), &run.names.key);
    let Some(admission) = observed.fresh.admission.get(&key) else {
        return Plan::only(Found {
            needs: vec![Read::Admission(key)],
            ..Found::gate(view.running(input))
        });
    };
    if let Admission::Queued {
        position,
        under_way,
        limit,
    } = admission
    {
        return Plan::only(Found::gate(Gate::Progressing(
            Reason::AcceptanceQueued,
            format!(
                "the acceptance run of revision {} waits its turn: number {position} in line, {under_way} run(s) under way of --max-concurrent-acceptance-runs {limit}; serving pods of judged revisions keep serving",
                input.revision
            ),
        )));
    }
    let mut acts = shared_objects(input, observed, spec);
    // The other roles' groups first; the judged group once their engines run.
    let first = if groups.len() > 1 {
        &groups[1..]
    } else {
        groups
    };
    acts.extend(start_groups(input, observed, first));
    Plan::with(Found::gate(view.running(input)), acts)
}

/// The objects one acceptance run shares: RBAC for the judge, the spec ConfigMap and the empty
/// evidence ConfigMap (the judge may only update it).
fn shared_objects<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    spec: &AcceptanceSpec,
) -> Vec<Act<'o>> {
    let (did, names) = (input.did, &input.run.names);
    let spec_yaml = build::acceptance_spec_yaml(spec);
    let in_flight = in_flight_evidence(&did.name_any(), observed);
    let (sa, role, binding) = build::acceptance_rbac(did, names, &in_flight);
    vec![
        Act::apply(sa, None),
        Act::apply(role, None),
        Act::apply(binding, None),
        Act::apply(
            build::acceptance_spec_configmap(did, names, input.revision, spec_yaml),
            None,
        ),
        Act::create(build::acceptance_evidence_configmap(
            did,
            names,
            input.revision,
        )),
    ]
}

/// Creates groups of an acceptance run: each one's rendezvous Service (where it needs one), its
/// PodGroup before its pods (they wait for it, then are bound all at once), its rank table, and
/// one Job per rank, followers first, so that a leader's engine finds them when it starts.
fn start_groups<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    groups: &[RunGroup<'_>],
) -> Vec<Act<'o>> {
    let (did, revision) = (input.did, input.revision);
    // The judged leader pins the spec file the run's ConfigMap holds (hashed only here, when
    // Jobs are made, not on every pass).
    let mut names = input.run.names.clone();
    if let Ok(spec) = &input.run.resolved {
        names.spec_sha256 =
            crate::acceptance::spec_file::sha256_hex(build::acceptance_spec_yaml(spec).as_bytes());
    }
    let mut acts = Vec::new();
    for group in groups {
        // A pass that starts groups again (the judged group waits for the others' engines)
        // applies over what the cache holds, which costs no write when nothing changed.
        if build::acceptance_needs_service(&did.spec, group) {
            let service = build::acceptance_service(did, group, revision);
            let cached = named(&observed.services, &service.name_any());
            acts.push(Act::apply(service, cached));
        }
        if let Some(pod_group) =
            build::acceptance_pod_group(did, group, revision).filter(|_| did.pod_groups)
        {
            let cached = named(&observed.pod_groups, &pod_group.name_any());
            acts.push(Act::apply(pod_group, cached));
        }
        // The rank table the pods mount exists before them ("initializing" until every rank
        // is allocated); once it exists, `rank_tables` keeps it current.
        if let Some(table) = build::acceptance_rank_table(did, group, revision, &[])
            .filter(|t| named(&observed.rank_tables, &t.name_any()).is_none())
        {
            acts.push(Act::apply(table, None));
        }
        let pods = build::group_shape(&did.spec, group.role).pods;
        acts.extend((0..pods).rev().filter_map(|rank| {
            build::acceptance_group_job(
                did,
                &names,
                group,
                rank,
                revision,
                input.settings.operator_image,
            )
            .map(|job| input.settings.create_job(job))
        }));
    }
    acts
}

/// The run waits for devices: the roles whose run group cannot be placed are named, so that
/// their serving groups may make room.
fn waiting(input: &Input<'_>, observed: &Observed, groups: &[RunGroup<'_>], why: &str) -> Found {
    let did = input.did;
    let waiting: Vec<&RunGroup<'_>> = groups
        .iter()
        .filter(|g| {
            pods_of(did, observed, g)
                .iter()
                .any(|p| jobs::unschedulable(p).is_some())
        })
        .collect();
    let need = waiting
        .iter()
        .map(|g| {
            format!(
                "{} {}",
                g.role.name,
                judge::capacity_need(&did.spec, g.role)
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

/// A verdict to record: the run's Jobs stopped (the leader too when `stop_leader`), the
/// judgement kept beside its evidence, old evidence pruned (never that of the judgement just
/// made, nor of those serving pods rest on).
fn record<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    groups: &[RunGroup<'_>],
    judgement: AcceptanceStatus,
    stop_leader: bool,
) -> Plan<'o, Found> {
    let judgement = input
        .settings
        .verdict_key
        .seal(&input.did.uid().unwrap_or_default(), judgement);
    // Where each rank ran, recorded before any of the run's Jobs (and so its pods) is deleted:
    // a failure here leaves the run as it is for the next pass.
    let placement = build::run_placement(input.did, groups, &|job| observed.pods_of_job(job));
    let evidence = &input.run.names.evidence_configmap;
    // The judgement is kept beside its evidence (so that a lost status can be made whole again),
    // in the placement's write when the judge named the run's own evidence ConfigMap.
    let kept = judgement
        .evidence
        .as_ref()
        .and_then(|e| Some((e, serde_json::to_string(&judgement).ok()?)));
    let (beside, apart) = match kept {
        Some((e, value)) if e == evidence => (Some(value), None),
        other => (None, other),
    };
    let Some(found) = &observed.fresh.evidence else {
        return Plan::only(Found {
            needs: evidence_reads(input, &placement),
            ..Found::gate(judge::judged_gate(&judgement))
        });
    };
    let mut acts: Vec<Act<'o>> =
        annotate_evidence(input, &observed.fresh, evidence, placement, beside)
            .into_iter()
            .collect();
    // The followers' engines (and the other roles') have nothing left to serve.
    acts.extend(stop(
        input.did,
        observed,
        groups,
        if stop_leader { 0 } else { 1 },
    ));
    let seconds = observed
        .job(&groups[0].job(0))
        .and_then(|j| j.status.clone())
        .and_then(|s| Some((s.start_time?.0, s.completion_time.map(|c| c.0))))
        .map(|(start, end)| {
            let end = end.unwrap_or(input.now);
            end.duration_since(start).as_secs_f64().max(0.0)
        })
        .unwrap_or(0.0);
    if let Some((evidence, value)) = apart {
        acts.push(Act::Annotate {
            configmap: evidence.clone(),
            annotations: [(JUDGEMENT_ANNOTATION, value)].into(),
        });
    }
    let with_pods = observed.revisions_serving(input.known);
    let known = &input.known.judgements;
    let kept: Vec<String> = known
        .iter()
        .zip(pinned(known, &with_pods))
        .filter_map(|(j, pinned)| pinned.then_some(j))
        .chain([&judgement])
        .filter_map(|j| j.evidence.clone())
        .collect();
    let pinned: Vec<&str> = kept.iter().map(String::as_str).collect();
    let keep = usize::from(input.settings.retention.keep_evidence);
    for old in retention::evidence_to_delete(found, keep, &pinned) {
        acts.extend(
            found
                .iter()
                .find(|m| m.name.as_deref() == Some(old.as_str()))
                .map(Act::DeleteEvidence),
        );
    }
    Plan::with(
        Found {
            gate: judge::judged_gate(&judgement),
            status: Some(judgement.clone()),
            recorded: Some(judgement),
            seconds,
            ..Found::default()
        },
        acts,
    )
}

/// What recording a verdict reads first: the deployment's evidence, and the domain of each node
/// the run ran on when nodes are read (`--record-node-domains`).
fn evidence_reads(input: &Input<'_>, placement: &Placement) -> Vec<Read> {
    let mut reads = vec![Read::Evidence];
    if input.settings.record_node_domains {
        reads.push(Read::Domains {
            nodes: placement.nodes().into_iter().collect(),
            key: placement.domain_key.clone(),
        });
    }
    reads
}

/// The annotations recording a verdict on its evidence ConfigMap `evidence` (as `found`: none
/// when it is gone): the judgement kept `beside` it, and where each rank ran. The operator's
/// placement replaces whatever is there (anyone may annotate a ConfigMap); only a pass that no
/// longer sees the run's pods (its pods gone, the cache behind the verdict already recorded)
/// leaves the record in place rather than write an empty one.
fn annotate_evidence<'o>(
    input: &Input<'_>,
    fresh: &Fresh,
    evidence: &str,
    placement: Placement,
    beside: Option<String>,
) -> Option<Act<'o>> {
    let found = fresh.evidence.as_deref().unwrap_or_default();
    let meta = found.iter().find(|m| m.name.as_deref() == Some(evidence))?;
    let mut annotations = BTreeMap::new();
    if let Some(judgement) = beside {
        annotations.insert(JUDGEMENT_ANNOTATION, judgement);
    }
    let recorded = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PLACEMENT_ANNOTATION));
    if !recorded || !placement.nodes().is_empty() {
        let placement = with_domains(input, fresh, placement);
        annotations.insert(PLACEMENT_ANNOTATION, placement.annotation_value());
    }
    (!annotations.is_empty()).then(|| Act::Annotate {
        configmap: evidence.to_string(),
        annotations,
    })
}

/// `placement` with each rank's node domain as read, or saying why it was not.
fn with_domains(input: &Input<'_>, fresh: &Fresh, placement: Placement) -> Placement {
    let why = match &fresh.domains {
        _ if !input.settings.record_node_domains => {
            "the operator reads no nodes (--record-node-domains is off)".to_string()
        }
        Some(Ok(domains)) => {
            return placement.with_domains(|node| domains.get(node).cloned().flatten())
        }
        Some(Err(why)) => why.clone(),
        None => "the nodes were not read".to_string(),
    };
    Placement {
        domains_not_read: Some(why),
        ..placement
    }
}

/// Ascend: the rank table of each started group of the run from its pods as they are placed
/// and allocated (`completed` once every rank is), and deletes of the tables of earlier runs
/// none of whose Jobs is left.
fn rank_tables<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    groups: &[RunGroup<'_>],
) -> Vec<Act<'o>> {
    let did = input.did;
    if !build::uses_rank_tables(&did.spec) {
        return Vec::new();
    }
    let name = did.name_any();
    let current: BTreeSet<String> = groups
        .iter()
        .map(|g| build::rank_table_name(&g.name))
        .collect();
    let mut acts = Vec::new();
    for group in groups {
        let table_name = build::rank_table_name(&group.name);
        // Only a started group has its table; it is created with the group's Jobs.
        let Some(existing) = observed
            .rank_tables
            .iter()
            .find(|t| t.name_any() == table_name)
        else {
            continue;
        };
        let pods = pods_of(did, observed, group);
        if let Some(table) = build::acceptance_rank_table(did, group, input.revision, &pods) {
            acts.push(Act::apply(table, Some(existing)));
        }
    }
    for stale in observed
        .rank_tables
        .iter()
        .filter(|t| build::is_acceptance_rank_table(&name, t))
        .filter(|t| !current.contains(&t.name_any()))
    {
        let run_group = stale
            .labels()
            .get(labels::GROUP)
            .cloned()
            .unwrap_or_default();
        // A run group's Jobs carry its name as their group label, as its table does.
        let left = observed
            .jobs
            .iter()
            .any(|j| j.labels().get(labels::GROUP) == Some(&run_group));
        if !left {
            acts.push(Act::delete(stale));
        }
    }
    acts
}

/// Deletes of a run's Jobs: the judged group's ranks from `from` on, every rank of the other
/// roles' groups, and each group's rendezvous Service, PodGroup and rank table. Only what the
/// pass observed is deleted: a pass that records the same verdict again (its status write not
/// yet in the cache) sends no delete for what the first one removed.
fn stop<'o>(
    did: &ValidatedDeployment,
    observed: &'o Observed,
    groups: &[RunGroup<'_>],
    from: i32,
) -> Vec<Act<'o>> {
    let mut acts = Vec::new();
    for group in groups {
        let pods = build::group_shape(&did.spec, group.role).pods;
        let first = if group.judged { from } else { 0 };
        let ranks: Vec<String> = (first..pods).map(|rank| group.job(rank)).collect();
        acts.extend(act::delete_named(&observed.jobs, &ranks));
        let named = std::slice::from_ref(&group.name);
        if build::acceptance_needs_service(&did.spec, group) {
            acts.extend(act::delete_named(&observed.services, named));
        }
        if pods > 1 {
            acts.extend(act::delete_named(&observed.pod_groups, named));
        }
        if build::uses_rank_tables(&did.spec) {
            let table = [build::rank_table_name(&group.name)];
            acts.extend(act::delete_named(&observed.rank_tables, &table));
        }
    }
    acts
}

/// What ending the runs that are not the target's found: the verdicts they wrote, to record.
#[derive(Clone, Debug, Default)]
pub struct Superseded {
    /// Judgements of finished runs not recorded yet (for their own revision, spec and token).
    pub recorded: Vec<AcceptanceStatus>,
    /// Jobs deleted because their run stopped being the target's.
    pub ended: usize,
}

/// Every acceptance run of the deployment `did` other than the target's (key `target`), seen
/// as a whole: a run whose leader finished has its verdict recorded (for the revision, spec and
/// token it was made for, so that a rollback reuses it) unless it is already; every Job of
/// such a run that has not finished is deleted with the run's Services, PodGroups and rank
/// tables, so that at most one run of the deployment holds devices. A Job whose name is not the
/// one its own key gives is not known to be a run's and is left alone.
pub fn superseded<'o>(
    deployment: &ValidatedDeployment,
    observed: &'o Observed,
    target: &str,
    known: &DeepInferDeploymentStatus,
    verdict_key: &crate::controller::proof::VerdictKey,
) -> Plan<'o, Superseded> {
    let did = &deployment.name_any();
    let uid = deployment.uid().unwrap_or_default();
    let mut runs: std::collections::BTreeMap<&str, Vec<&'o Job>> = Default::default();
    for job in observed.jobs.iter().filter(|j| {
        Component::of(j.labels()) == Some(Component::Acceptance)
            && j.metadata.deletion_timestamp.is_none()
    }) {
        let Some(key) = job.annotations().get(build::JUDGES_ANNOTATION) else {
            continue;
        };
        let ours = build::AcceptanceNames::of_key(did, key)
            .is_some_and(|names| names.holds_job(&job.name_any()));
        if key != target && ours {
            runs.entry(key.as_str()).or_default().push(job);
        }
    }
    let mut plan = Plan::only(Superseded::default());
    for (key, jobs) in runs {
        let Some(names) = build::AcceptanceNames::of_key(did, key) else {
            continue;
        };
        let leader = names.job(0);
        if let Some(judgement) = superseded_verdict(observed, &names, &jobs, known) {
            let judgement = verdict_key.seal(&uid, judgement);
            if judgement.evidence.as_deref() == Some(names.evidence_configmap.as_str()) {
                if let Ok(value) = serde_json::to_string(&judgement) {
                    plan.acts.push(Act::Annotate {
                        configmap: names.evidence_configmap.clone(),
                        annotations: [(JUDGEMENT_ANNOTATION, value)].into(),
                    });
                }
            }
            plan.found.recorded.push(judgement);
        }
        let groups: BTreeSet<&str> = jobs
            .iter()
            .filter_map(|j| j.labels().get(labels::GROUP).map(String::as_str))
            .collect();
        for job in jobs.iter().filter(|j| {
            matches!(
                job_state(observed, &j.name_any(), build::JUDGE_CONTAINER),
                JobState::Running
            ) || j.name_any() != leader
        }) {
            plan.acts.push(Act::delete(*job));
            plan.found.ended += 1;
        }
        plan.acts.extend(run_scoped(&observed.services, &groups));
        plan.acts.extend(run_scoped(&observed.pod_groups, &groups));
        plan.acts.extend(run_scoped(&observed.rank_tables, &groups));
    }
    plan
}

/// Deletes of the acceptance objects in `objects` of the run groups named `groups`.
fn run_scoped<'o, K: act::Kind>(objects: &'o [K], groups: &BTreeSet<&str>) -> Vec<Act<'o>> {
    objects
        .iter()
        .filter(|o| {
            let labels = o.labels();
            Component::of(labels) == Some(Component::Acceptance)
                && labels
                    .get(labels::GROUP)
                    .is_some_and(|g| groups.contains(g.as_str()))
                && o.meta().deletion_timestamp.is_none()
        })
        .map(Act::delete)
        .collect()
}

/// The verdict a superseded run's leader wrote, when it finished with a summary, its Job says
/// what it judged (and that hashes to the run's key), and no judgement of that revision, spec
/// and token is recorded.
fn superseded_verdict(
    observed: &Observed,
    names: &build::AcceptanceNames,
    jobs: &[&Job],
    known: &DeepInferDeploymentStatus,
) -> Option<AcceptanceStatus> {
    let leader = names.job(0);
    let job = jobs.iter().find(|j| j.name_any() == leader)?;
    let message = match job_state(observed, &leader, build::JUDGE_CONTAINER) {
        JobState::Succeeded(m) | JobState::Failed(m) => m?,
        JobState::Running | JobState::Missing => return None,
    };
    let revision = job.labels().get(labels::REVISION)?;
    let judges = job.annotations().get(build::RUN_ANNOTATION)?;
    if !build::AcceptanceNames::judges_key(revision, judges, &names.key) {
        return None;
    }
    let (token, spec_hash) = judges.rsplit_once('/')?;
    if known
        .recorded_judgement(revision, spec_hash, token)
        .is_some()
    {
        return None;
    }
    let summary: crate::acceptance::AcceptanceSummary =
        serde_json::from_str(message.trim()).ok()?;
    let mut roles: Vec<String> = job
        .labels()
        .get(labels::ROLE)
        .cloned()
        .into_iter()
        .collect();
    for role in jobs.iter().filter_map(|j| j.labels().get(labels::ROLE)) {
        if !roles.contains(role) {
            roles.push(role.clone());
        }
    }
    Some(judge::judged_summary(
        summary, revision, spec_hash, token, roles,
    ))
}

/// The evidence ConfigMaps of this deployment's acceptance runs whose Jobs are still running.
fn in_flight_evidence(did: &str, observed: &Observed) -> Vec<String> {
    running_jobs(observed)
        .filter_map(|job| build::evidence_of_job(did, job))
        .collect()
}

/// This deployment's acceptance Jobs that have not finished.
fn running_jobs(observed: &Observed) -> impl Iterator<Item = &Job> {
    observed.jobs.iter().filter(|j| {
        Component::of(j.labels()) == Some(Component::Acceptance)
            && matches!(
                job_state(observed, &j.name_any(), build::JUDGE_CONTAINER),
                JobState::Running
            )
    })
}

/// Deletes of the acceptance Jobs still running (`spec.suspend`, a licence closed with
/// `--license-withdrawal=stop`), and how many.
pub fn stop_running(observed: &Observed) -> (Vec<Act<'_>>, usize) {
    let acts: Vec<Act<'_>> = running_jobs(observed)
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .map(Act::delete)
        .collect();
    let n = acts.len();
    (acts, n)
}

/// The acceptance stage of a suspended deployment: a run under way is stopped so that it frees
/// its devices too; the recorded judgements stay, so resuming reuses them.
pub fn suspended(observed: &Observed) -> Plan<'_, Found> {
    let (acts, stopped) = stop_running(observed);
    Plan::with(
        Found::gate(Gate::Held(
            Reason::Suspended,
            format!("suspended (spec.suspend): no acceptance run; {stopped} running acceptance Job(s) deleted; recorded judgements are kept"),
        )),
        acts,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AcceptanceResult;
    use crate::controller::gates::fixture::{self, described};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    struct Case {
        did: ValidatedDeployment,
        revision: String,
        observed: Observed,
        known: DeepInferDeploymentStatus,
    }

    impl Case {
        fn new() -> Self {
            let did = fixture::did();
            Self {
                revision: build::revision(&did.spec),
                did,
                observed: fixture::observed_bound(),
                known: DeepInferDeploymentStatus::default(),
            }
        }

        fn run(&self) -> Run {
            Run::of(&self.did, &self.revision, &self.observed)
        }

        /// The fleet's queue answers `admission` for the run (as the pass reads it when the plan
        /// asks), and the evidence is read (the run's own, unless the case holds other).
        fn admit(&mut self, admission: Admission) {
            let run = self.run();
            let key = crate::controller::fleet::run_key(
                &self.did.namespace,
                &self.did.name_any(),
                &run.names.key,
            );
            self.observed.fresh.admission.insert(key, admission);
            self.observed.fresh.evidence.get_or_insert_with(|| {
                vec![ObjectMeta {
                    name: Some(run.names.evidence_configmap.clone()),
                    ..ObjectMeta::default()
                }]
            });
        }

        fn plan(&self) -> Plan<'_, Found> {
            let run = self.run();
            let input = Input {
                did: &self.did,
                revision: &self.revision,
                run: &run,
                known: &self.known,
                settings: fixture::settings(),
                now: Timestamp::from_second(10_000).expect("time"),
            };
            plan(&input, &self.observed)
        }

        /// The judged group's Job of `rank` as the operator makes it, in `state`.
        fn job(&self, rank: i32, state: &str) -> Job {
            let run = self.run();
            let groups = run.names.groups(&self.did.spec);
            let job = build::acceptance_group_job(
                &self.did,
                &run.names,
                &groups[0],
                rank,
                &self.revision,
                fixture::settings().operator_image,
            )
            .expect("a Job per rank");
            fixture::in_state(job, state)
        }

        /// A pod of `job` whose engine runs since `since` (seconds).
        fn engine_pod(&self, job: &str, since: i64) -> Pod {
            pod_of_job(
                job,
                "Running",
                build::ENGINE_CONTAINER,
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(Timestamp::from_second(since).expect("time"))),
                    }),
                    ..ContainerState::default()
                },
            )
        }

        fn leader(&self) -> String {
            self.run().names.groups(&self.did.spec)[0].job(0)
        }
    }

    fn reason(gate: &Gate) -> &'static str {
        match gate {
            Gate::Progressing(r, _)
            | Gate::Failed(r, _)
            | Gate::Passed(r, _)
            | Gate::Held(r, _) => r.as_str(),
            Gate::NotReached => "NotReached",
        }
    }

    #[test]
    fn a_run_starts_with_its_shared_objects_then_its_jobs_followers_first() {
        let mut case = Case::new();
        let run = case.run();
        case.admit(Admission::Start);
        let plan = case.plan();
        assert_eq!(reason(&plan.found.gate), Reason::AcceptanceRunning);
        let leader = case.leader();
        let follower = format!("{}1", leader.trim_end_matches('0'));
        assert_eq!(
            described(&plan.acts),
            [
                format!("apply ServiceAccount {}", run.names.service_account),
                format!("apply Role {}", run.names.service_account),
                format!("apply RoleBinding {}", run.names.service_account),
                format!("apply ConfigMap {}", run.names.spec_configmap),
                format!("create ConfigMap {}", run.names.evidence_configmap),
                format!("apply Service {}", run.names.run),
                format!("create Job {follower}"),
                format!("create Job {leader}"),
            ]
        );
        assert_eq!(plan.found.unjudged.as_deref(), Some(leader.as_str()));
        assert!(plan.found.recorded.is_none());
        // Each Job is created with its time to live: none needs a write once it has finished.
        let ttl = fixture::settings().retention.finished_job_ttl_seconds;
        assert_eq!(
            fixture::created_job_ttls(&plan.acts),
            [Some(ttl), Some(ttl)]
        );
    }

    #[test]
    fn a_run_started_again_applies_over_what_the_cache_holds() {
        use crate::controller::act::Applied;
        let mut case = Case::new();
        let service = {
            case.admit(Admission::Start);
            let first = case.plan();
            first
                .acts
                .iter()
                .find_map(|a| match a {
                    Act::Apply(Applied::Service(s, None)) => Some(s.as_ref().clone()),
                    _ => None,
                })
                .expect("the first pass creates the run's Service")
        };
        // The Service is in the cache, the Jobs are not yet: the run is started again.
        case.observed.services.push(service);
        case.admit(Admission::Start);
        let again = case.plan();
        let services: Vec<bool> = again
            .acts
            .iter()
            .filter_map(|a| match a {
                Act::Apply(Applied::Service(_, cached)) => Some(cached.is_some()),
                _ => None,
            })
            .collect();
        assert_eq!(services, [true], "applied over the cached copy, no create");
    }

    #[test]
    fn a_run_the_fleet_queue_holds_writes_nothing_and_says_its_place() {
        let mut case = Case::new();
        case.admit(Admission::Queued {
            position: 3,
            under_way: 16,
            limit: 16,
        });
        let plan = case.plan();
        assert_eq!(reason(&plan.found.gate), Reason::AcceptanceQueued);
        assert!(plan.acts.is_empty(), "{:?}", described(&plan.acts));
        let Gate::Progressing(_, message) = &plan.found.gate else {
            unreachable!()
        };
        assert!(message.contains("number 3 in line"), "{message}");
    }

    #[test]
    fn a_recorded_judgement_of_the_same_run_is_reused_and_nothing_runs() {
        let mut case = Case::new();
        let run = case.run();
        case.known.judgements.push(AcceptanceStatus {
            revision: case.revision.clone(),
            result: AcceptanceResult::Passed,
            spec_hash: Some(run.spec_hash.clone()),
            rerun_token: Some(run.token.clone()),
            ..AcceptanceStatus::default()
        });
        case.admit(Admission::Start);
        let plan = case.plan();
        assert_eq!(reason(&plan.found.gate), Reason::AcceptanceSucceeded);
        assert!(plan.acts.is_empty());
        assert!(plan.found.unjudged.is_none(), "the verdict is in status");
        assert!(plan.found.status.is_some() && plan.found.recorded.is_none());
        // Its finished leader's pods, no longer cached, are not read from the API server.
        case.observed.jobs = vec![case.job(0, "succeeded")];
        assert_eq!(
            leader_to_read(&case.did, &run, &case.observed, &case.known, &case.revision),
            None
        );
        case.known.judgements.clear();
        assert_eq!(
            leader_to_read(&case.did, &run, &case.observed, &case.known, &case.revision),
            run.leader(&case.did),
            "without the verdict in status, they are"
        );
    }

    #[test]
    fn a_run_under_way_writes_nothing() {
        let mut case = Case::new();
        let leader = case.leader();
        case.observed.jobs = vec![case.job(1, "running"), case.job(0, "running")];
        case.observed.job_pods = vec![case.engine_pod(&leader, 9_990)];
        case.admit(Admission::Start);
        let plan = case.plan();
        assert_eq!(reason(&plan.found.gate), Reason::AcceptanceRunning);
        assert!(plan.acts.is_empty(), "{:?}", described(&plan.acts));
    }

    #[test]
    fn a_judged_runs_placement_and_judgement_go_onto_its_evidence_in_one_write() {
        let mut case = Case::new();
        let leader = case.leader();
        let follower = format!("{}1", leader.trim_end_matches('0'));
        case.observed.jobs = vec![case.job(0, "succeeded"), case.job(1, "running")];
        let evidence = case.run().names.evidence_configmap;
        let mut pod = case.engine_pod(&leader, 1);
        let summary = format!(
            r#"{{"result":"Passed","prompts":1,"passed":1,"failedPrompts":[],"evidence":"{evidence}","reason":"all passed"}}"#
        );
        pod.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: build::JUDGE_CONTAINER.into(),
                state: Some(ContainerState {
                    terminated: Some(k8s_openapi::api::core::v1::ContainerStateTerminated {
                        message: Some(summary),
                        ..Default::default()
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        case.observed.job_pods = vec![pod];
        case.admit(Admission::Start);
        let plan = case.plan();
        let recorded = plan.found.recorded.clone().expect("a verdict");
        assert_eq!(recorded.result, AcceptanceResult::Passed);
        let acts = described(&plan.acts);
        assert_eq!(
            acts.iter()
                .filter(|a| a.starts_with("annotate ConfigMap"))
                .collect::<Vec<_>>(),
            [&format!(
                "annotate ConfigMap {evidence} deepinfer.io/judgement deepinfer.io/placement"
            )],
            "{acts:?}"
        );
        assert!(acts.contains(&format!("delete Job {follower}")), "{acts:?}");
        let Some(Act::Annotate { annotations, .. }) = plan.acts.first() else {
            unreachable!()
        };
        let kept: AcceptanceStatus =
            serde_json::from_str(&annotations[JUDGEMENT_ANNOTATION]).expect("the judgement");
        assert_eq!(kept, recorded);
    }

    #[test]
    fn an_overdue_run_is_recorded_failed_with_every_job_stopped_and_old_evidence_pruned() {
        let mut case = Case::new();
        let leader = case.leader();
        let follower = format!("{}1", leader.trim_end_matches('0'));
        case.observed.jobs = vec![case.job(0, "running"), case.job(1, "running")];
        // Its engine started long before the pass's time, past the run's deadline; the
        // scheduler bound it to gpu-1, and the follower's Job made no pod.
        let mut pod = case.engine_pod(&leader, 1);
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("gpu-1".into()),
            ..Default::default()
        });
        case.observed.job_pods = vec![pod];
        // The run's evidence and five older ones, as read when the plan asked.
        let evidence = case.run().names.evidence_configmap;
        let meta = |name: &str, at: i64| ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: Some(Time(Timestamp::from_second(at).expect("time"))),
            ..ObjectMeta::default()
        };
        let mut found = vec![meta(&evidence, 9_000)];
        found.extend((1..=5).map(|i| meta(&format!("old-{i}"), i64::from(i) * 100)));
        case.observed.fresh.evidence = Some(found);
        case.admit(Admission::Start);
        let plan = case.plan();
        let recorded = plan.found.recorded.clone().expect("a verdict");
        assert_eq!(recorded.result, AcceptanceResult::Failed);
        let acts = described(&plan.acts);
        assert_eq!(
            acts[..3],
            [
                format!("annotate ConfigMap {evidence} deepinfer.io/placement"),
                format!("delete Job {leader}"),
                format!("delete Job {follower}")
            ],
            "where each rank ran is recorded before the run's Jobs go"
        );
        let Some(Act::Annotate { annotations, .. }) = plan.acts.first() else {
            unreachable!()
        };
        let placement = Placement::parse(&annotations[PLACEMENT_ANNOTATION]).expect("a placement");
        let rows: Vec<(i32, Option<&str>, Option<&str>, i32)> = placement
            .ranks
            .iter()
            .map(|r| (r.rank, r.pod.as_deref(), r.node.as_deref(), r.devices.count))
            .collect();
        let pod_name = format!("{leader}-x");
        assert_eq!(
            rows,
            [
                (0, Some(pod_name.as_str()), Some("gpu-1"), 8),
                (1, None, None, 8)
            ]
        );
        assert_eq!(placement.domain_key, "nvidia.com/gpu.clique");
        assert_eq!(
            placement.domains_not_read.as_deref(),
            Some("the operator reads no nodes (--record-node-domains is off)")
        );
        // Three kept (the settings' keepEvidence): the run's own and the two newest others.
        let pruned: Vec<&String> = acts
            .iter()
            .filter(|a| a.starts_with("delete ConfigMap"))
            .collect();
        assert_eq!(
            pruned,
            [
                "delete ConfigMap old-3 (evidence beyond those kept)",
                "delete ConfigMap old-2 (evidence beyond those kept)",
                "delete ConfigMap old-1 (evidence beyond those kept)"
            ],
            "{acts:?}"
        );
    }

    #[test]
    fn a_leader_that_ended_without_ever_running_is_deleted_to_run_again() {
        let mut case = Case::new();
        let leader = case.leader();
        case.observed.jobs = vec![case.job(0, "failed")];
        case.admit(Admission::Start);
        let plan = case.plan();
        assert_eq!(described(&plan.acts), [format!("delete Job {leader}")]);
        assert!(plan.found.recorded.is_none());
    }

    #[test]
    fn prompts_that_cannot_be_resolved_start_nothing() {
        let mut case = Case::new();
        case.did = fixture::valid({
            let mut raw = fixture::raw();
            raw.spec.acceptance.prompts_from = Some(
                serde_json::from_value(
                    serde_json::json!({"name": "missing-prompts", "key": "prompts.yaml"}),
                )
                .expect("a ConfigMap key"),
            );
            raw.spec.acceptance.prompts.clear();
            raw
        });
        case.admit(Admission::Start);
        let plan = case.plan();
        assert_eq!(reason(&plan.found.gate), Reason::MissingDependency);
        assert!(plan.acts.is_empty());
    }

    #[test]
    fn a_suspended_deployment_stops_its_running_acceptance_jobs_only() {
        let mut case = Case::new();
        case.observed.jobs = vec![case.job(0, "running"), case.job(1, "succeeded")];
        let plan = suspended(&case.observed);
        assert_eq!(reason(&plan.found.gate), Reason::Suspended);
        assert_eq!(
            described(&plan.acts),
            [format!("delete Job {}", case.leader())]
        );
    }

    /// A pod of `job` in `phase` whose `container` is in `state`.
    fn pod_of_job(job: &str, phase: &str, container: &str, state: ContainerState) -> Pod {
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(
            crate::controller::cached::JOB_NAME_LABEL.to_string(),
            job.to_string(),
        );
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("{job}-x")),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: container.into(),
                    state: Some(state),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    /// The pod of `job` whose judge ended with `message`.
    fn judged_pod(job: &str, message: &str) -> Pod {
        pod_of_job(
            job,
            "Succeeded",
            build::JUDGE_CONTAINER,
            ContainerState {
                terminated: Some(k8s_openapi::api::core::v1::ContainerStateTerminated {
                    message: Some(message.into()),
                    ..Default::default()
                }),
                ..ContainerState::default()
            },
        )
    }

    #[test]
    fn a_run_that_stopped_being_the_target_is_ended_and_its_written_verdict_recorded() {
        let mut earlier = Case::new();
        let mut raw = fixture::raw();
        raw.spec.runtime.commit = "1111111".into();
        earlier.did = fixture::valid(raw);
        earlier.revision = build::revision(&earlier.did.spec);
        let old = earlier.run();
        let (old_leader, old_follower) = (old.names.job(0), old.names.job(1));
        let target = Case::new().run().names.key;
        let uid = earlier.did.uid().unwrap_or_default();
        let key = fixture::verdict_key();

        // Under way: every Job of the earlier run goes, nothing is recorded.
        let mut observed = fixture::observed_bound();
        observed.jobs = vec![earlier.job(0, "running"), earlier.job(1, "running")];
        let plan = superseded(&earlier.did, &observed, &target, &earlier.known, key);
        assert_eq!(
            described(&plan.acts),
            [
                format!("delete Job {old_leader}"),
                format!("delete Job {old_follower}"),
            ]
        );
        assert_eq!(plan.found.ended, 2);
        assert!(plan.found.recorded.is_empty());
        // The target's own run is left to the acceptance stage.
        let plan = superseded(&earlier.did, &observed, &old.names.key, &earlier.known, key);
        assert!(plan.acts.is_empty(), "{:?}", described(&plan.acts));

        // Finished with a verdict: recorded for the run's own revision, spec and token, proved,
        // kept beside its evidence; the follower goes, the finished leader stays for its TTL.
        let summary = serde_json::json!({
            "result": "Passed", "prompts": 2, "passed": 2, "evidence": old.names.evidence_configmap,
            "reason": "all 2 prompts passed", "revision": earlier.revision,
        })
        .to_string();
        observed.jobs = vec![earlier.job(0, "succeeded"), earlier.job(1, "running")];
        observed.job_pods = vec![judged_pod(&old_leader, &summary)];
        let plan = superseded(&earlier.did, &observed, &target, &earlier.known, key);
        assert_eq!(
            described(&plan.acts),
            [
                format!(
                    "annotate ConfigMap {} {JUDGEMENT_ANNOTATION}",
                    old.names.evidence_configmap
                ),
                format!("delete Job {old_follower}"),
            ]
        );
        let recorded = &plan.found.recorded;
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].revision, earlier.revision);
        assert_eq!(
            recorded[0].spec_hash.as_deref(),
            Some(old.spec_hash.as_str())
        );
        assert_eq!(recorded[0].result, AcceptanceResult::Passed);
        assert!(
            key.verifies(&uid, &recorded[0]),
            "the recorded verdict is proved"
        );
        // Recorded already: not again.
        let known = DeepInferDeploymentStatus {
            judgements: recorded.clone(),
            ..DeepInferDeploymentStatus::default()
        };
        let plan = superseded(&earlier.did, &observed, &target, &known, key);
        assert!(plan.found.recorded.is_empty());

        // A leader whose annotation does not hash to its key is not read.
        let mut tampered = earlier.job(0, "succeeded");
        tampered
            .annotations_mut()
            .insert(build::RUN_ANNOTATION.into(), "/another-spec".into());
        observed.jobs = vec![tampered];
        let plan = superseded(&earlier.did, &observed, &target, &earlier.known, key);
        assert!(plan.found.recorded.is_empty());
        assert!(plan.acts.is_empty(), "a finished leader holds no devices");
    }
}
