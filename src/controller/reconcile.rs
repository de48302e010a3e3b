//! One reconcile pass, top to bottom: read what is there, plan each stage from it and carry
//! the plan out, then say when to look again.
//!
//! The stages that judge the target revision (claim templates, checkpoint, acceptance) run only
//! for a valid spec under an open licence. Entitlement is decided once, with every verdict known
//! after them, and carried out whatever else the pass finds. The workers stage runs whatever the
//! judging stages say (only the licence gate and an invalid spec stop it), so the serving
//! revision stays managed while another is judged.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::api::api_resource;
use crate::api::{
    record_judgement, DeepInferDeployment, DeepInferDeploymentStatus, Reason,
    LICENSE_ACCEPTED_ANNOTATION,
};
use crate::controller::act::{Act, Executor};
use crate::controller::cached::CachedDeployment;
use crate::controller::context::{Context, LicenseWithdrawal};
use crate::controller::error::Error;
use crate::controller::gates::acceptance::{fleet::Admission, memory};
use crate::controller::gates::licence::entitlement;
use crate::controller::gates::rejected::rejected_gate;
use crate::controller::gates::spec::validate::{license_gate, LicenseVerdict};
use crate::controller::gates::{self, acceptance::Run, spec::SpecFound, Settings};
use crate::controller::observe::{self, observe, pods_of_job_now, Observed};
use crate::controller::status::{self, Gate, LicenceSeen, Outcome};
use crate::controller::text::{phase_key, truncate};
use crate::controller::validated::ValidatedDeployment;
use crate::controller::{apply, build, outage};

pub(crate) fn error_policy(obj: Arc<CachedDeployment>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(err.metric_label());
    warn!(name = %obj.name_any(), namespace = ?obj.namespace(), error = %err, kind = err.metric_label(), "reconcile failed; retrying");
    if outage::unreachable(err) {
        ctx.awaiting_api
            .wait_for_api(ObjectRef::from_obj_with(obj.as_ref(), api_resource()));
    }
    Action::requeue(Duration::from_secs(10))
}

/// One reconcile pass, counted and timed by its result.
pub(crate) async fn reconcile(
    obj: Arc<CachedDeployment>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let metrics = ctx.metrics.clone();
    let key = phase_key(&obj.namespace().unwrap_or_default(), &obj.name_any());
    let mut timer = metrics.reconcile_started(&key);
    let written = ctx.caches.written.clone();
    let result = match observe::noting_writes(written, reconcile_pass(obj, ctx)).await {
        // The resource changed while the pass ran (its status write was refused): run again on
        // the newer object, which the store holds within moments.
        Err(Error::Stale) => {
            tracing::debug!("the resource changed during the pass; looking again");
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        other => other,
    };
    if result.is_ok() {
        timer.succeeded();
    }
    result
}

#[tracing::instrument(skip(obj, ctx), fields(name = %obj.name_any(), namespace = obj.namespace().unwrap_or_default()))]
async fn reconcile_pass(obj: Arc<CachedDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    let ns = obj
        .namespace()
        .ok_or_else(|| Error::NoNamespace(obj.name_any()))?;
    if behind_own_status_write(&ctx, &phase_key(&ns, &obj.name_any()), &obj.metadata) {
        // The store has not caught up with this resource's own status write: its watch event
        // brings the newer copy and a pass with it (looked at again in a second regardless).
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let mut raw = obj.to_value(&api_resource()).map_err(Error::Serde)?;
    // The status is read on its own, as far as it can be: a status this release cannot read
    // whole never makes the resource unreadable, and its judgements are recalled (see
    // `gates::acceptance::memory`).
    let stored = raw.as_object_mut().and_then(|o| o.remove("status"));
    let (previous, status_whole) = gates::acceptance::memory::read_status(stored.as_ref());
    let did: DeepInferDeployment = match serde_json::from_value(raw) {
        Ok(d) => d,
        Err(e) => {
            // Dereference failed: the object does not match the API types. Stall it alone,
            // keeping the judgements it had.
            let outcome = Outcome {
                spec: Gate::Failed(Reason::InvalidSpec, format!("the resource does not match the DeepInferDeployment schema: {e}; correct the field named and re-apply")),
                judgements: previous.as_ref().map(|p| p.judgements.clone()).unwrap_or_default(),
                acceptance_status: previous.as_ref().and_then(|p| p.acceptance.clone()),
                ..Outcome::default()
            };
            write_status(&ctx, &obj, &ns, previous.as_ref(), &outcome).await?;
            return Ok(Action::await_change());
        }
    };
    if did.meta().deletion_timestamp.is_some() {
        ctx.metrics.forget(&phase_key(&ns, &did.name_any()));
        return Ok(Action::await_change());
    }
    let (outcome, next) = pass(&did, previous.as_ref(), status_whole, &ctx).await?;
    let held = write_status(&ctx, &obj, &ns, previous.as_ref(), &outcome).await?;
    Ok(match gates::earliest(next, held) {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// A resourceVersion as a number (the API server's are; an opaque one is `None`).
fn resource_version(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// Whether the copy of resource `key` a pass was given (`meta`) is older than the resource's own
/// latest status write; a copy that has caught up ends the wait for it.
fn behind_own_status_write(
    ctx: &Context,
    key: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    let mut written = ctx.status_written.lock().unwrap_or_else(|e| e.into_inner());
    let Some(&ours) = written.get(key) else {
        return false;
    };
    match resource_version(meta) {
        Some(seen) if seen < ours => true,
        _ => {
            written.remove(key);
            false
        }
    }
}

/// Writes the status computed from `outcome` if it differs from the stored one, and publishes
/// the Events its transitions call for (`status::news`). A change of progress alone
/// waits out [`status::PROGRESS_HOLD`] after the resource's last status write: returns how long,
/// when it does.
async fn write_status(
    ctx: &Context,
    obj: &CachedDeployment,
    ns: &str,
    previous: Option<&DeepInferDeploymentStatus>,
    outcome: &Outcome,
) -> Result<Option<Duration>, Error> {
    let generation = obj.metadata.generation;
    let key = phase_key(ns, &obj.name_any());
    let next = status::compute(
        previous,
        outcome,
        generation,
        Time(k8s_openapi::jiff::Timestamp::now()),
    );
    ctx.metrics.observe_status(&key, &next);
    if previous == Some(&next) {
        return Ok(None);
    }
    let failing = outcome.stalled().map(|(r, _)| r);
    if previous.is_some_and(|p| status::held(p, &next, failing)) {
        if let Some(wait) = ctx.progress_hold(&key) {
            return Ok(Some(wait));
        }
    }
    if !ctx.may_write() {
        return Err(Error::NotLeading);
    }
    let ar = api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
    // Server-side apply under the operator's one field manager: the status is wholly the
    // operator's, so fields it no longer sets are removed. It carries the resourceVersion the
    // pass read: a writer whose view is older than the resource (a former leader that woke up,
    // a pass that raced an edit) is refused and writes nothing.
    let patch = serde_json::json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": {"resourceVersion": obj.metadata.resource_version},
        "status": next,
    });
    match api
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(apply::FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(written) => ctx.status_was_written(&key, resource_version(&written.metadata)),
        Err(kube::Error::Api(e)) if e.code == 409 => return Err(Error::Stale),
        Err(e) => {
            return Err(Error::api(
                "apply status of",
                &ar.kind,
                &format!("{ns}/{}", obj.name_any()),
                e,
            ))
        }
    }
    let reference = obj.object_ref(&api_resource());
    for (news, c) in status::news(previous, &next, failing) {
        // No Event from a replica that stopped leading after its status write.
        if !ctx.may_write() {
            return Err(Error::NotLeading);
        }
        let event = Event {
            type_: match news {
                status::News::Normal => EventType::Normal,
                status::News::Warning => EventType::Warning,
            },
            reason: c.reason.clone(),
            note: Some(format!(
                "{}={}: {}",
                c.type_,
                c.status,
                truncate(&c.message, 900)
            )),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            warn!("publishing event: {e}");
        }
    }
    Ok(None)
}

/// What a pass read before it plans: the snapshot, the licence gate and the judgements known.
struct Pass<'c> {
    ctx: &'c Context,
    exec: Executor<'c>,
    settings: Settings<'c>,
    observed: Observed,
    licence: LicenseVerdict,
    known: DeepInferDeploymentStatus,
    now: Timestamp,
}

/// Runs one pass for `did`; returns what was found and when to look again.
pub async fn pass(
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    status_whole: bool,
    ctx: &Context,
) -> Result<(Outcome, Option<Duration>), Error> {
    let pod_groups = ctx.pod_groups().await?;
    let mut p = Pass::read(ctx, did, previous, status_whole, pod_groups).await?;
    let mut outcome = p.first_outcome(did, previous);
    // Each role's group count: the spec's, or its DeepInferRole's for a role scaled externally.
    let scaled = gates::scaling::scaled(did, &p.observed.scaled_roles, ctx.scaled_roles().await?);
    let spec = match &scaled {
        Ok(s) => gates::spec::spec(
            &s.did,
            &ctx.limits,
            pod_groups,
            &p.observed.referenced,
            &s.sources,
        ),
        Err(refused) => SpecFound::Refused(refused.clone(), None),
    };
    let open = p.licence.is_accepted();
    let judged = match &spec {
        SpecFound::Valid(valid) if open => p.judge(valid, previous, &mut outcome).await?,
        _ => Judged::default(),
    };
    // Entitlement, once, with every verdict now known.
    outcome.withdrawn = p.enforce().await?;
    if !open {
        p.exec
            .run(&gates::checkpoint::stop_fetching(&p.observed))
            .await?;
    }
    let valid = match spec {
        SpecFound::Valid(valid) => valid,
        SpecFound::Refused(gate, after) => {
            // The licence stop is carried out whatever the spec says: nothing of the spec is
            // needed to delete every pod and run.
            if !open && p.settings.license_withdrawal == LicenseWithdrawal::Stop {
                p.exec.run(&gates::workers::stop_all(&p.observed)).await?;
            }
            outcome.spec = gate;
            return Ok((outcome, after));
        }
    };
    outcome.spec = Gate::Passed(Reason::Complete, "spec is valid".into());
    let revision = build::revision_of(&valid);
    outcome.revision = Some(revision.clone());
    if !open {
        return p.closed(&valid, &revision, outcome).await;
    }
    outcome.license = Gate::Passed(p.licence.reason(), licence_message(&p, &valid));
    if let Some(stalled) = judged.stalled {
        outcome.workers = stalled;
        return Ok((outcome, None));
    }
    let mut retry = judged.retry;
    if let Err(e) = p
        .workers(&valid, &revision, &judged.needs_room, false, &mut outcome)
        .await
    {
        outcome.workers = p.workers_failed(&e);
        retry = retry.or(gates::retry_after(&outcome.workers));
    }
    let keep = gates::housekeeping::unjudged_jobs(&valid, previous, &p.observed, judged.leader);
    let ttl = p.settings.retention.finished_job_ttl_seconds;
    // Housekeeping: failures are logged, never a failed pass.
    let _ = p
        .exec
        .run(&gates::housekeeping::tidy(&p.observed, &keep, ttl))
        .await;
    Ok((outcome.clone(), Some(gates::next_look(&outcome, retry))))
}

/// What the judging stages left for the rest of the pass.
#[derive(Default)]
struct Judged {
    /// A claim template the API server refused: the workers stage stalls on it.
    stalled: Option<Gate>,
    /// Look again this soon (an API failure of a stage).
    retry: Option<Duration>,
    /// Roles whose group of the acceptance run waits for devices.
    needs_room: Vec<String>,
    /// The acceptance stage's unjudged leader (`None`: the stage did not run to a plan, so every
    /// acceptance Job keeps its verdict's place).
    leader: Option<Option<String>>,
}

impl<'c> Pass<'c> {
    async fn read(
        ctx: &'c Context,
        did: &DeepInferDeployment,
        previous: Option<&DeepInferDeploymentStatus>,
        status_whole: bool,
        pod_groups: bool,
    ) -> Result<Pass<'c>, Error> {
        let observed = observe(ctx, did, pod_groups).await?;
        let exec = Executor::new(ctx, did);
        let key = ctx.verdict_key().await?;
        let uid = did.uid().unwrap_or_default();
        let known = recall(&exec, previous, status_whole, &observed, key, &uid).await?;
        Ok(Pass {
            ctx,
            exec,
            settings: Settings::of(ctx, key),
            licence: license_gate(
                did.annotations(),
                &did.spec.model.license,
                &ctx.accepted_licenses,
            ),
            observed,
            known,
            now: Timestamp::now(),
        })
    }

    /// The outcome before any stage: the licence as seen and the judgements known.
    fn first_outcome(
        &self,
        did: &DeepInferDeployment,
        previous: Option<&DeepInferDeploymentStatus>,
    ) -> Outcome {
        Outcome {
            licence: Some(LicenceSeen {
                license: did.spec.model.license.clone(),
                annotation: did.annotations().get(LICENSE_ACCEPTED_ANNOTATION).cloned(),
                accepted: self.licence.is_accepted(),
                reason: self.licence.reason(),
            }),
            judgements: self.known.judgements.clone(),
            // The status's own, when it is proved (see `recall`).
            acceptance_status: previous.and(self.known.acceptance.clone()),
            ..Outcome::default()
        }
    }

    /// Brings every worker pod's `deepinfer.io/accepted` condition in line with its
    /// entitlement; returns what was withdrawn.
    async fn enforce(&self) -> Result<Option<String>, Error> {
        let marks = entitlement::decide(&self.observed.workers, &self.licence, Some(&self.known));
        let withdrawn = entitlement::withdrawn_summary(&marks);
        if let Some(summary) = &withdrawn {
            tracing::info!(%summary, "withdrew service");
        }
        let acts: Vec<Act<'_>> = marks.into_iter().map(Act::Mark).collect();
        self.exec.run(&acts).await?;
        Ok(withdrawn)
    }

    /// The stages that judge the target: claim templates, checkpoint, acceptance.
    async fn judge(
        &mut self,
        did: &ValidatedDeployment,
        previous: Option<&DeepInferDeploymentStatus>,
        outcome: &mut Outcome,
    ) -> Result<Judged, Error> {
        let mut judged = Judged::default();
        let revision = build::revision_of(did);
        let run = Run::of(did, &revision, &self.observed);
        self.end_superseded(did, &run, outcome).await;
        if let Err(e) = self
            .exec
            .run(&gates::workers::claims::claim_templates(
                did,
                &self.observed,
            ))
            .await
        {
            judged.stalled = Some(rejected_gate(&e).ok_or(e)?);
            return Ok(judged);
        }
        match self.checkpoint(did, previous).await {
            Ok((gate, status)) => {
                outcome.checkpoint = gate;
                outcome.checkpoint_status = status;
            }
            Err(e) => {
                outcome.checkpoint = self.api_failure(&e);
                judged.retry = gates::retry_after(&outcome.checkpoint);
            }
        }
        if did.spec.suspend {
            let plan = gates::acceptance::suspended(&self.observed);
            outcome.acceptance = match self.exec.run(&plan.acts).await {
                Ok(_) => plan.found.gate,
                Err(e) => {
                    // Only an API failure is retried soon; a held gate waits for a change.
                    let gate = self.api_failure(&e);
                    judged.retry = judged.retry.or(gates::retry_after(&gate));
                    gate
                }
            };
        } else if outcome.checkpoint.passed() {
            match self.acceptance(did, &revision, &run).await {
                Ok(found) => {
                    judged.leader = Some(found.unjudged.clone());
                    judged.needs_room = found.needs_room.clone();
                    self.take(found, outcome);
                }
                Err(e) => {
                    outcome.acceptance = self.api_failure(&e);
                    judged.retry = judged.retry.or(gates::retry_after(&outcome.acceptance));
                }
            }
        }
        Ok(judged)
    }

    /// The pods of the Job `job` (as cached) read from the API server: those it controls.
    async fn pods_of_job_now(
        &self,
        ns: &str,
        job: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, Error> {
        let uid = self
            .observed
            .job(job)
            .and_then(|j| j.metadata.uid.clone())
            .unwrap_or_default();
        pods_of_job_now(&self.ctx.client, ns, job, &uid).await
    }

    /// Ends every acceptance run that is not the target's, recording the verdicts the finished
    /// ones wrote. A failure is logged and tried again by the next pass: it stops nothing else
    /// (the entitlement of every pod is enforced whatever happens here).
    async fn end_superseded(
        &mut self,
        did: &ValidatedDeployment,
        run: &Run,
        outcome: &mut Outcome,
    ) {
        let plan = gates::acceptance::superseded(
            did,
            &self.observed,
            &run.names.key,
            &self.known,
            self.settings.verdict_key,
        );
        if plan.acts.is_empty() {
            return;
        }
        if let Err(e) = self.exec.run(&plan.acts).await {
            self.ctx.metrics.reconcile_failed(e.metric_label());
            warn!(error = %e, "ending the acceptance runs of earlier targets failed; trying again");
            return;
        }
        if plan.found.ended > 0 {
            tracing::info!(
                jobs = plan.found.ended,
                "ended the acceptance runs of configurations that are no longer the target"
            );
        }
        for judged in plan.found.recorded {
            self.record(judged);
        }
        outcome.judgements = self.known.judgements.clone();
    }

    /// Records a judgement among those known (kept as long as its revision serves).
    fn record(&mut self, judged: crate::api::AcceptanceStatus) {
        let serving = self.observed.revisions_serving(&self.known);
        self.known.judgements = record_judgement(&self.known.judgements, judged, &serving);
    }

    async fn checkpoint(
        &self,
        did: &ValidatedDeployment,
        previous: Option<&DeepInferDeploymentStatus>,
    ) -> Result<gates::checkpoint::Found, Error> {
        let fresh = match gates::checkpoint::verify_to_read(did, previous, &self.observed) {
            Some(job) => Some(self.pods_of_job_now(&did.namespace, &job).await?),
            None => None,
        };
        let plan = gates::checkpoint::checkpoint(
            did,
            previous,
            &self.observed,
            fresh.as_deref(),
            self.settings,
        );
        self.exec.run(&plan.acts).await?;
        Ok(plan.found)
    }

    async fn acceptance(
        &self,
        did: &ValidatedDeployment,
        revision: &str,
        run: &Run,
    ) -> Result<gates::acceptance::Found, Error> {
        let fresh = match gates::acceptance::leader_to_read(
            did,
            run,
            &self.observed,
            &self.known,
            revision,
        ) {
            Some(job) => Some(self.pods_of_job_now(&did.namespace, &job).await?),
            None => None,
        };
        let input = gates::acceptance::Input {
            did,
            revision,
            run,
            fresh: fresh.as_deref(),
            known: &self.known,
            settings: self.settings,
            now: self.now,
        };
        let plan =
            gates::acceptance::acceptance(&input, &self.observed, &mut |run| self.admit(run));
        self.exec.run(&plan.acts).await?;
        Ok(plan.found)
    }

    /// Whether the fleet's queue lets the run start (`--max-concurrent-acceptance-runs`).
    fn admit(&self, run: &str) -> Admission {
        let Some(limit) = self.ctx.max_concurrent_acceptance_runs else {
            return Admission::Start;
        };
        let runs = self.ctx.caches.acceptance_runs();
        self.ctx
            .acceptance_queue
            .lock()
            .map(|mut q| q.ask(run, &runs, Some(limit), self.now))
            .unwrap_or(Admission::Start)
    }

    /// Takes the acceptance stage's finding into the outcome; a judgement made in this pass is
    /// recorded (and counted) now that its acts are done.
    fn take(&mut self, found: gates::acceptance::Found, outcome: &mut Outcome) {
        outcome.acceptance = found.gate;
        if let Some(status) = found.status {
            outcome.acceptance_status = Some(status);
        }
        if let Some(judged) = found.recorded {
            self.ctx
                .metrics
                .acceptance_finished(judged.result.as_str(), found.seconds);
            self.record(judged.clone());
            outcome.judgements = self.known.judgements.clone();
            outcome.acceptance_status = Some(judged);
        }
    }

    /// The licence gate is closed. Withheld (the default): nothing is created or deleted, the
    /// pods keep their devices and the roles' status still says where they are. Stopped: every
    /// serving pod and running acceptance Job goes, freeing the devices; the judgements stay for
    /// when it reopens.
    async fn closed(
        &self,
        did: &ValidatedDeployment,
        revision: &str,
        mut outcome: Outcome,
    ) -> Result<(Outcome, Option<Duration>), Error> {
        let stop = self.settings.license_withdrawal == LicenseWithdrawal::Stop;
        let mut message = licence_message(self, did);
        if let Some(withdrawn) = &outcome.withdrawn {
            message = format!("{message}; {withdrawn}");
        }
        let mut stopped_runs = 0;
        if stop {
            let (acts, n) = gates::acceptance::stop_running(&self.observed);
            self.exec.run(&acts).await?;
            stopped_runs = n;
        }
        self.workers(did, revision, &[], stop, &mut outcome).await?;
        if stop {
            outcome.workers = Gate::Progressing(
                Reason::ServingWithdrawn,
                format!("licence gate closed and --license-withdrawal=stop: every serving pod deleted, {stopped_runs} running acceptance Job(s) deleted; the recorded judgements are kept, and the groups come back without a new run once the licence is accepted again"),
            );
        }
        outcome.license = Gate::Failed(self.licence.reason(), message);
        Ok((outcome, None))
    }

    /// The workers stage: its finding goes into the outcome; returns the error of its acts.
    async fn workers(
        &self,
        did: &ValidatedDeployment,
        revision: &str,
        needs_room: &[String],
        stop: bool,
        outcome: &mut Outcome,
    ) -> Result<(), Error> {
        let remembered = self.remembered(did);
        let input = gates::workers::Input {
            did,
            target: revision,
            known: &self.known,
            licence: &self.licence,
            acting: self.licence.is_accepted() || stop,
            stop,
            needs_room,
            remembered: &remembered,
            settings: self.settings,
            now: self.now,
        };
        let plan = gates::workers::workers(&input, &self.observed);
        self.remember(did, &plan.found.retries);
        outcome.workers = gates::withdrawn_or(outcome.withdrawn.as_ref(), plan.found.gate);
        outcome.roles = plan.found.roles;
        outcome.wake_after = plan.found.wake;
        self.exec.run(&plan.acts).await?;
        let scaling = gates::scaling::keep(
            did,
            &outcome.roles,
            &self.observed.scaled_roles,
            self.licence.is_accepted(),
        );
        self.exec.run(&scaling).await.map(|_| ())
    }

    /// This operator's placement retry records of the deployment's roles.
    fn remembered(&self, did: &ValidatedDeployment) -> BTreeMap<String, gates::workers::Retry> {
        let uid = did.uid().unwrap_or_default();
        let Ok(memory) = self.ctx.placement_retries.lock() else {
            return BTreeMap::new();
        };
        did.spec
            .roles
            .iter()
            .filter_map(|r| {
                let record = memory.get(&(uid.clone(), r.name.clone()))?;
                Some((r.name.clone(), *record))
            })
            .collect()
    }

    fn remember(
        &self,
        did: &ValidatedDeployment,
        retries: &[(String, Option<gates::workers::Retry>)],
    ) {
        let uid = did.uid().unwrap_or_default();
        if let Ok(mut memory) = self.ctx.placement_retries.lock() {
            for (role, record) in retries {
                let key = (uid.clone(), role.clone());
                match record {
                    Some(record) => memory.insert(key, *record),
                    None => memory.remove(&key),
                };
            }
        }
    }

    /// The workers gate after its acts failed: stalled on a child the API server refused,
    /// else retried soon. Counted.
    fn workers_failed(&self, e: &Error) -> Gate {
        self.ctx.metrics.reconcile_failed(e.metric_label());
        if let Some(stalled) = rejected_gate(e) {
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

    /// Records an API failure inside a stage on that stage's gate (so status shows it, not only
    /// the log), counts it; the pass is retried soon, unless the server refused a child as
    /// invalid: then the gate stalls with the server's message and field.
    fn api_failure(&self, error: &Error) -> Gate {
        self.ctx.metrics.reconcile_failed(error.metric_label());
        if let Some(stalled) = rejected_gate(error) {
            tracing::warn!(error = %error, "the API server refused a child object; stalled");
            return stalled;
        }
        tracing::warn!(error = %error, kind = error.metric_label(), "a stage failed to talk to the API; retrying");
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
}

/// The licence gate's message.
fn licence_message(p: &Pass<'_>, did: &ValidatedDeployment) -> String {
    p.licence
        .message(&did.namespace, &did.name_any(), &did.spec.model.license)
}

/// The judgements recorded so far: the status's (one written before the list existed has its
/// judgement in `acceptance`), made whole from the records on the evidence ConfigMaps when the
/// status was lost, is partly unreadable or holds results this release does not know.
async fn recall(
    exec: &Executor<'_>,
    previous: Option<&DeepInferDeploymentStatus>,
    status_whole: bool,
    observed: &Observed,
    key: &crate::controller::gates::acceptance::proof::VerdictKey,
    uid: &str,
) -> Result<DeepInferDeploymentStatus, Error> {
    let mut known = previous.cloned().unwrap_or_default();
    // Only the operator's own judgements are judgements (see `proof`).
    let (judgements, unproved) = memory::proved(std::mem::take(&mut known.judgements), key, uid);
    known.judgements = judgements;
    known.acceptance = known.acceptance.filter(|a| key.verifies(uid, a));
    if unproved > 0 {
        tracing::warn!(
            unproved,
            "the status holds judgements without a valid proof: they are not judgements of this operator and are ignored"
        );
    }
    if let Some(a) = known.acceptance.clone() {
        let hash = a.spec_hash.clone().unwrap_or_default();
        let token = a.rerun_token.clone().unwrap_or_default();
        if !known
            .judgements
            .iter()
            .any(|j| j.judges(&a.revision, &hash, &token))
        {
            known.judgements.push(a);
        }
    }
    if memory::needs_recall(&known, status_whole, &observed.workers) {
        let (recalled, _) =
            memory::proved(memory::recalled(&exec.evidence_metas().await?), key, uid);
        tracing::info!(
            recalled = recalled.len(),
            "the status does not hold every judgement; recalled them from the evidence"
        );
        known.judgements = memory::merge(&known.judgements, recalled);
    }
    Ok(known)
}
