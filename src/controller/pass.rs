//! One pass planned: every gate from the snapshot, in order, each from what the gates before it
//! found ([`Findings`]). Pure: the reads are done before (`observe`, and the reads a gate asks
//! for in [`GatePlan::needs`]), the writes after, by the executor, gate by gate. A gate whose
//! acts fail is mapped by its [`OnFailure`]; the gates after it are planned again from what it
//! found then ([`Findings::failed`]), as if it had planned that way.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{record_judgement, AcceptanceStatus, DeepInferDeploymentStatus, Reason};
use crate::controller::act::Act;
use crate::controller::error::Error;
use crate::controller::gates::acceptance::{self, Candidate, Run};
use crate::controller::gates::housekeeping::RunLeader;
use crate::controller::gates::licence::{entitlement, LicenceVerdict, LicenceWithdrawal};
use crate::controller::gates::spec::SpecFound;
use crate::controller::gates::workers::{self, claims, Retry};
use crate::controller::gates::{self, checkpoint, housekeeping, rejected, scaling, Settings};
use crate::controller::observe::{Observed, Read};
use crate::controller::status::{Gate, Outcome};
use crate::controller::text::truncate;
use crate::controller::validated::ValidatedDeployment;

/// The gates of a pass, in the order they are planned and carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GateId {
    /// Acceptance runs of configurations that are no longer the target, ended.
    Superseded,
    /// The DRA claim templates the engine pods and PodGroups claim devices from.
    Claims,
    /// Checkpoint fetch and verification.
    Checkpoint,
    /// The target's acceptance run and its verdict.
    Acceptance,
    /// The licence gate: each pod's entitlement, and what a closed gate stops.
    Licence,
    /// Serving groups, and the DeepInferRoles of externally scaled roles.
    Workers,
    /// Finished Jobs' time to live, the pod cache.
    Housekeeping,
}

impl GateId {
    /// Every gate, in order.
    pub const ALL: [GateId; 7] = [
        GateId::Superseded,
        GateId::Claims,
        GateId::Checkpoint,
        GateId::Acceptance,
        GateId::Licence,
        GateId::Workers,
        GateId::Housekeeping,
    ];
}

/// What a failure of a gate's acts does to the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// The pass fails (and is retried by the controller's error policy).
    Fail,
    /// The gate says so on its condition (stalled on an object the API server refused, else
    /// retried soon); the pass goes on.
    Gate,
    /// Logged and counted; the pass goes on.
    Log,
}

/// One gate's writes, and what their failure does.
pub struct GatePlan<'o> {
    /// The gate.
    pub id: GateId,
    /// Its writes, in order.
    pub acts: Vec<Act<'o>>,
    /// What a failure of one of them does.
    pub on_failure: OnFailure,
    /// Reads the gate waits for: the pass does them and plans again.
    pub needs: Vec<Read>,
}

/// The target of a valid spec: its revision and its acceptance run.
pub struct Target {
    /// The deployment as validated.
    pub did: Box<ValidatedDeployment>,
    /// Its revision.
    pub revision: String,
    /// Its acceptance run.
    pub run: Run,
}

/// Everything a pass plans from, read before it plans.
pub struct Snapshot {
    /// The owned objects, and what was read fresh.
    pub observed: Observed,
    /// The status as stored.
    pub previous: Option<DeepInferDeploymentStatus>,
    /// The judgements known (proved, recalled from evidence when the status lost them).
    pub known: DeepInferDeploymentStatus,
    /// The licence gate.
    pub licence: LicenceVerdict,
    /// The licence gate's message.
    pub licence_message: String,
    /// The spec refused (its gate, and when to look again), or `None` when it is valid.
    pub refused: Option<(Gate, Option<Duration>)>,
    /// The target, for a valid spec.
    pub target: Option<Target>,
    /// This operator's placement retry records of the deployment's roles.
    pub remembered: BTreeMap<String, Retry>,
    /// The pass's time.
    pub now: Timestamp,
}

impl Snapshot {
    /// A snapshot of `spec` as found, with the run and revision of a valid one.
    pub fn of_spec(
        spec: SpecFound,
        observed: &Observed,
    ) -> (Option<Target>, Option<(Gate, Option<Duration>)>) {
        match spec {
            SpecFound::Valid(did) => {
                let revision = crate::controller::build::revision_of(&did);
                let run = Run::of(&did, &revision, observed);
                (Some(Target { did, revision, run }), None)
            }
            SpecFound::Refused(gate, after) => (None, Some((gate, after))),
        }
    }

    fn open(&self) -> bool {
        self.licence.is_accepted()
    }

    /// The target when the judging gates run: a valid spec under an open licence.
    fn judging(&self) -> Option<&Target> {
        self.target.as_ref().filter(|_| self.open())
    }
}

/// What the gates planned so far found: the outcome, the judgements known and what later gates
/// take from earlier ones.
#[derive(Clone, Debug, Default)]
pub struct Findings {
    /// The outcome so far.
    pub outcome: Outcome,
    /// The judgements known, with those recorded by this pass.
    pub known: DeepInferDeploymentStatus,
    /// Look again this soon (an API failure of a gate).
    pub retry: Option<Duration>,
    /// Roles whose group of the acceptance run waits for devices.
    pub needs_room: Vec<String>,
    /// The target's candidate group (`spec.acceptance.mode: serving`).
    pub candidate: Candidate,
    /// What the acceptance gate said of the target's run.
    pub leader: RunLeader,
    /// The claims gate's templates were refused: the workers gate stalls on them.
    pub claims_refused: bool,
    /// A verdict recorded by this pass: its result and how long its run took.
    pub finished: Option<(String, f64)>,
    /// Acceptance Jobs of earlier targets ended by this pass.
    pub ended: usize,
    /// Running acceptance Jobs a closed licence gate stopped.
    pub stopped_runs: usize,
    /// Each role's placement retry record to keep (`None`: forget it).
    pub retries: Vec<(String, Option<Retry>)>,
}

impl Findings {
    /// The findings before any gate: the licence as seen, the judgements known.
    pub fn new(outcome: Outcome, known: &DeepInferDeploymentStatus) -> Self {
        Self {
            outcome,
            known: known.clone(),
            ..Self::default()
        }
    }

    /// Records a judgement among those known (kept as long as its revision serves).
    fn record(&mut self, judged: AcceptanceStatus, observed: &Observed) {
        let serving = observed.revisions_serving(&self.known);
        self.known.judgements = record_judgement(&self.known.judgements, judged, &serving);
        self.outcome.judgements = self.known.judgements.clone();
    }

    /// The findings after gate `id` failed with `error`, from those before it planned
    /// (`before`) and after (`after`); `None` when the pass fails with the error.
    pub fn failed(id: GateId, before: Self, after: Self, error: &Error) -> Option<Self> {
        let mut f = match id {
            // What the workers gate found stands; only its condition says the acts failed.
            GateId::Workers => after,
            _ => before,
        };
        let gate = match id {
            GateId::Claims => {
                f.outcome.workers = rejected::rejected_gate(error)?;
                f.claims_refused = true;
                return Some(f);
            }
            GateId::Licence => return None,
            GateId::Workers if !f.outcome.licence_gate.passed() => return None,
            GateId::Superseded | GateId::Housekeeping => return Some(f),
            GateId::Workers => workers_failed(error),
            GateId::Checkpoint | GateId::Acceptance => api_failure(error),
        };
        f.retry = f.retry.or(gates::retry_after(&gate));
        match id {
            GateId::Checkpoint => f.outcome.checkpoint = gate,
            GateId::Acceptance => f.outcome.acceptance = gate,
            _ => f.outcome.workers = gate,
        }
        Some(f)
    }

    /// The outcome of the pass, and when to look again.
    pub fn into_outcome(self, s: &Snapshot) -> (Outcome, Option<Duration>) {
        let next = if let Some((_, after)) = &s.refused {
            *after
        } else if !s.open() || self.claims_refused {
            None
        } else {
            Some(gates::next_look(&self.outcome, self.retry))
        };
        (self.outcome, next)
    }
}

/// The gates from `from` on, each planned from what those before it found; each with the
/// findings before it planned (to plan again from after a failure).
pub fn plan<'o>(
    s: &'o Snapshot,
    settings: Settings<'o>,
    from: Option<GateId>,
    f: &mut Findings,
) -> Vec<(GatePlan<'o>, Findings)> {
    GateId::ALL
        .into_iter()
        .filter(|id| from.is_none_or(|from| *id >= from))
        .map(|id| {
            let before = f.clone();
            (plan_gate(id, s, settings, f), before)
        })
        .collect()
}

fn gate<'o>(id: GateId, acts: Vec<Act<'o>>, on_failure: OnFailure) -> GatePlan<'o> {
    GatePlan {
        id,
        acts,
        on_failure,
        needs: Vec::new(),
    }
}

fn plan_gate<'o>(
    id: GateId,
    s: &'o Snapshot,
    settings: Settings<'o>,
    f: &mut Findings,
) -> GatePlan<'o> {
    let judging = s
        .judging()
        .filter(|_| !f.claims_refused || id < GateId::Checkpoint);
    match (id, judging) {
        (GateId::Superseded, Some(t)) => {
            let plan = acceptance::superseded(
                &t.did,
                &s.observed,
                &t.run.names.key,
                &f.known,
                settings.verdict_key,
            );
            for judged in plan.found.recorded {
                f.record(judged, &s.observed);
            }
            f.ended = plan.found.ended;
            gate(id, plan.acts, OnFailure::Log)
        }
        (GateId::Claims, Some(t)) => gate(
            id,
            claims::claim_templates(&t.did, &s.observed),
            OnFailure::Gate,
        ),
        (GateId::Checkpoint, Some(t)) => {
            let to_read = checkpoint::verify_to_read(&t.did, s.previous.as_ref(), &s.observed);
            let fresh = s.observed.fresh.pods_of(to_read.as_ref());
            let plan = checkpoint::plan(&t.did, s.previous.as_ref(), &s.observed, fresh, settings);
            (f.outcome.checkpoint, f.outcome.checkpoint_status) = plan.found;
            GatePlan {
                needs: to_read.into_iter().map(Read::JobPods).collect(),
                ..gate(id, plan.acts, OnFailure::Gate)
            }
        }
        (GateId::Acceptance, Some(t)) => plan_acceptance(t, s, settings, f),
        (GateId::Licence, _) => plan_licence(s, settings, f),
        (GateId::Workers, _) => plan_workers(s, settings, f),
        (GateId::Housekeeping, Some(t)) if !f.claims_refused => {
            let keep = housekeeping::unjudged_jobs(
                &t.did,
                s.previous.as_ref(),
                &s.observed,
                f.leader.clone(),
            );
            let ttl = settings.retention.finished_job_ttl_seconds;
            gate(
                id,
                housekeeping::tidy(&s.observed, &keep, ttl),
                OnFailure::Log,
            )
        }
        _ => gate(id, Vec::new(), OnFailure::Log),
    }
}

/// The acceptance gate: held while suspended, planned once the checkpoint passed.
fn plan_acceptance<'o>(
    t: &'o Target,
    s: &'o Snapshot,
    settings: Settings<'o>,
    f: &mut Findings,
) -> GatePlan<'o> {
    if t.did.spec.suspend {
        let plan = acceptance::suspended(&s.observed);
        f.outcome.acceptance = plan.found.gate;
        return gate(GateId::Acceptance, plan.acts, OnFailure::Gate);
    }
    if !f.outcome.checkpoint.passed() {
        return gate(GateId::Acceptance, Vec::new(), OnFailure::Gate);
    }
    let input = acceptance::Input {
        did: &t.did,
        revision: &t.revision,
        run: &t.run,
        known: &f.known,
        settings,
        now: s.now,
    };
    let to_read = acceptance::leader_to_read(&t.did, &t.run, &s.observed, &f.known, &t.revision);
    let plan = acceptance::plan(&input, &s.observed);
    let mut found = plan.found;
    found.needs.extend(to_read.map(Read::JobPods));
    f.leader = found
        .unjudged
        .clone()
        .map_or(RunLeader::Judged, RunLeader::Unjudged);
    f.needs_room = found.needs_room.clone();
    f.candidate = found.candidate;
    f.outcome.acceptance = found.gate;
    if let Some(status) = found.status {
        f.outcome.acceptance_status = Some(status);
    }
    if let Some(judged) = found.recorded {
        f.finished = Some((judged.result.as_str().to_string(), found.seconds));
        f.record(judged.clone(), &s.observed);
        f.outcome.acceptance_status = Some(judged);
    }
    GatePlan {
        needs: found.needs,
        ..gate(GateId::Acceptance, plan.acts, OnFailure::Gate)
    }
}

/// The licence gate, with every verdict known: each worker pod's entitlement; a closed gate
/// stops fetching, and with `--license-withdrawal=stop` every run (and, for a refused spec,
/// every pod: nothing of the spec is needed for that).
fn plan_licence<'o>(s: &'o Snapshot, settings: Settings<'o>, f: &mut Findings) -> GatePlan<'o> {
    let marks = entitlement::decide(&s.observed.workers, &s.licence, Some(&f.known));
    f.outcome.withdrawn = entitlement::withdrawn_summary(&marks);
    let mut acts: Vec<Act<'o>> = marks.into_iter().map(Act::Mark).collect();
    let stop = settings.license_withdrawal == LicenceWithdrawal::Stop;
    if let Some((refused, _)) = &s.refused {
        f.outcome.spec = refused.clone();
    } else {
        f.outcome.spec = Gate::Passed(Reason::Complete, "spec is valid".into());
        f.outcome.revision = s.target.as_ref().map(|t| t.revision.clone());
    }
    if s.open() {
        if s.target.is_some() {
            f.outcome.licence_gate = Gate::Passed(s.licence.reason(), s.licence_message.clone());
        }
        return gate(GateId::Licence, acts, OnFailure::Fail);
    }
    acts.extend(checkpoint::stop_fetching(&s.observed));
    if s.target.is_none() {
        if stop {
            acts.extend(workers::stop_all(&s.observed));
        }
        return gate(GateId::Licence, acts, OnFailure::Fail);
    }
    let mut message = s.licence_message.clone();
    if let Some(withdrawn) = &f.outcome.withdrawn {
        message = format!("{message}; {withdrawn}");
    }
    f.outcome.licence_gate = Gate::Failed(s.licence.reason(), message);
    if stop {
        let (runs, stopped) = acceptance::stop_running(&s.observed);
        acts.extend(runs);
        f.stopped_runs = stopped;
    }
    gate(GateId::Licence, acts, OnFailure::Fail)
}

/// The workers gate: every role's groups, with the licence gate open or closed; and the
/// DeepInferRoles of the roles scaled externally.
fn plan_workers<'o>(s: &'o Snapshot, settings: Settings<'o>, f: &mut Findings) -> GatePlan<'o> {
    let Some(t) = s.target.as_ref().filter(|_| !f.claims_refused) else {
        return gate(GateId::Workers, Vec::new(), OnFailure::Gate);
    };
    let stop = !s.open() && settings.license_withdrawal == LicenceWithdrawal::Stop;
    let input = workers::Input {
        did: &t.did,
        target: &t.revision,
        known: &f.known,
        licence: &s.licence,
        acting: s.open() || stop,
        stop,
        needs_room: if s.open() { &f.needs_room } else { &[] },
        candidate: if s.open() {
            f.candidate
        } else {
            Candidate::None
        },
        remembered: &s.remembered,
        settings,
        now: s.now,
    };
    let plan = workers::plan(&input, &s.observed);
    f.retries = plan.found.retries;
    f.outcome.workers = gates::withdrawn_or(f.outcome.withdrawn.as_ref(), plan.found.gate);
    f.outcome.roles = plan.found.roles;
    f.outcome.wake_after = plan.found.wake;
    if stop {
        f.outcome.workers = Gate::Progressing(
            Reason::ServingWithdrawn,
            format!("licence gate closed and --license-withdrawal=stop: every serving pod deleted, {} running acceptance Job(s) deleted; the recorded judgements are kept, and the groups come back without a new run once the licence is accepted again", f.stopped_runs),
        );
    }
    let mut acts = plan.acts;
    acts.extend(scaling::keep(
        &t.did,
        &f.outcome.roles,
        &s.observed.scaled_roles,
        s.open(),
    ));
    gate(GateId::Workers, acts, OnFailure::Gate)
}

/// The workers gate after its acts failed: stalled on a child the API server refused, else
/// retried soon.
fn workers_failed(e: &Error) -> Gate {
    if let Some(stalled) = rejected::rejected_gate(e) {
        tracing::warn!(error = %e, "the API server refused a worker object; stalled");
        return stalled;
    }
    tracing::warn!(error = %e, kind = e.metric_label(), "applying workers failed; retrying");
    Gate::Progressing(
        Reason::ApplyFailed,
        truncate(
            &format!("applying worker pods and Services failed, retrying: {e}"),
            1000,
        ),
    )
}

/// An API failure inside a gate, on that gate (so status shows it, not only the log); the pass
/// is retried soon, unless the server refused a child as invalid: then the gate stalls with the
/// server's message and field.
fn api_failure(error: &Error) -> Gate {
    if let Some(stalled) = rejected::rejected_gate(error) {
        tracing::warn!(error = %error, "the API server refused a child object; stalled");
        return stalled;
    }
    tracing::warn!(error = %error, kind = error.metric_label(), "a gate failed to talk to the API; retrying");
    let hint = if error.is_forbidden() {
        "; the operator's RBAC lacks a rule: compare its ClusterRole/Role with the chart's"
    } else {
        ""
    };
    Gate::Progressing(
        Reason::ApplyFailed,
        truncate(
            &format!("a Kubernetes API request failed, retrying: {error}{hint}"),
            1000,
        ),
    )
}

/// The licence gate's message for `did`.
pub fn licence_message(licence: &LicenceVerdict, did: &crate::api::DeepInferDeployment) -> String {
    licence.message(
        &did.namespace().unwrap_or_default(),
        &did.name_any(),
        &did.spec.model.license,
    )
}
