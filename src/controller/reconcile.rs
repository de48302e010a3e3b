//! One reconcile pass, top to bottom: read what is there, plan every gate
//! ([`crate::controller::pass`]), carry the plans out gate by gate, write the status on change,
//! then say when to look again.
//!
//! The gates that judge the target (claim templates, checkpoint, acceptance) plan only for a
//! valid spec under an open licence. The licence gate plans with every verdict known and is
//! carried out whatever else the pass finds. The workers gate plans whatever the judging gates
//! say (only the licence gate and an invalid spec stop it), so the serving revision stays
//! managed while another is judged.

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
    DeepInferDeployment, DeepInferDeploymentStatus, Reason, LICENSE_ACCEPTED_ANNOTATION,
};
use crate::controller::cached::CachedDeployment;
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::controller::executor::Executor;
use crate::controller::fleet::Admission;
use crate::controller::gates::acceptance::memory;
use crate::controller::gates::licence::licence_gate;
use crate::controller::gates::spec::{self, SpecFound};
use crate::controller::gates::workers::Retry;
use crate::controller::gates::{self, scaling};
use crate::controller::observe::{self, observe, pods_of_job_now, Observed, Read};
use crate::controller::pass::{self, Findings, GateId, GatePlan, OnFailure, Snapshot};
use crate::controller::proof::VerdictKey;
use crate::controller::status::{self, Gate, LicenceSeen, Outcome};
use crate::controller::text::{phase_key, truncate};
use crate::controller::{apply, outage};

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
    let result =
        match crate::controller::written::noting_writes(written, reconcile_pass(obj, ctx)).await {
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
    // What of the change is news: it is never held, counts as a transition, and is told by Events.
    let told = status::news(previous, &next, failing);
    if previous.is_some_and(|p| status::held(p, &next, !told.is_empty())) {
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
        Ok(written) => {
            let cause = status::write_cause(previous, &next, !told.is_empty());
            ctx.metrics.status_written(cause.as_str());
            ctx.status_was_written(&key, resource_version(&written.metadata), cause);
        }
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
    for (news, c) in told {
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

/// Runs one pass for `did`: reads what is there, plans every gate, carries the plans out gate by
/// gate; returns what was found and when to look again.
pub async fn pass(
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    status_whole: bool,
    ctx: &Context,
) -> Result<(Outcome, Option<Duration>), Error> {
    let key = ctx.verdict_key().await?;
    let settings = ctx.settings(key);
    let mut snapshot = read(ctx, did, previous, status_whole, key).await?;
    let first = Findings::new(first_outcome(did, &snapshot, previous), &snapshot.known);
    // A gate that waits for a read (a finished Job's pods, the fleet's queue, the evidence)
    // gets it, and every gate is planned again; the plans that need nothing more are carried out.
    let mut rounds = 0;
    let (mut plans, mut f) = loop {
        let mut f = first.clone();
        let plans = pass::plan(&snapshot, settings, None, &mut f);
        let fresh = &snapshot.observed.fresh;
        let needs: Vec<Read> = plans
            .iter()
            .flat_map(|(p, _)| p.needs.iter().filter(|r| !fresh.has(r)).cloned())
            .collect();
        rounds += 1;
        if needs.is_empty() || rounds > GateId::ALL.len() {
            break (plans, f);
        }
        drop(plans);
        read_fresh(ctx, did, &mut snapshot.observed, needs).await?;
    };
    let exec = Executor::new(ctx, did);
    let findings = loop {
        let Some((i, e)) = carry_out(&exec, &plans).await else {
            break f;
        };
        let (id, after) = (
            plans[i].0.id,
            plans.get(i + 1).map_or(f.clone(), |p| p.1.clone()),
        );
        ctx.metrics.reconcile_failed(e.metric_label());
        if plans[i].0.on_failure == OnFailure::Log {
            warn!(gate = ?id, error = %e, "a gate's writes failed; trying again on the next pass");
        }
        let Some(failed) = Findings::failed(id, plans[i].1.clone(), after, &e) else {
            return Err(e);
        };
        // The gates after the failed one, planned again from what it found then.
        let from = GateId::ALL.into_iter().find(|g| *g > id);
        f = failed;
        plans = pass::plan(&snapshot, settings, from, &mut f);
    };
    done(ctx, did, &findings);
    Ok(findings.into_outcome(&snapshot))
}

/// Carries out each gate's acts in order; the first failure stops them, naming its gate.
async fn carry_out(
    exec: &Executor<'_>,
    plans: &[(GatePlan<'_>, Findings)],
) -> Option<(usize, Error)> {
    for (i, (plan, _)) in plans.iter().enumerate() {
        if let Err(e) = exec.run(&plan.acts).await {
            return Some((i, e));
        }
    }
    None
}

/// What the pass did, counted and remembered once its acts are done.
fn done(ctx: &Context, did: &DeepInferDeployment, f: &Findings) {
    if f.ended > 0 {
        tracing::info!(
            jobs = f.ended,
            "ended the acceptance runs of configurations that are no longer the target"
        );
    }
    if let Some((result, seconds)) = &f.finished {
        ctx.metrics.acceptance_finished(result, *seconds);
    }
    if let Some(summary) = &f.outcome.withdrawn {
        tracing::info!(%summary, "withdrew service");
    }
    let uid = did.uid().unwrap_or_default();
    if let Ok(mut memory) = ctx.placement_retries.lock() {
        for (role, record) in &f.retries {
            let key = (uid.clone(), role.clone());
            match record {
                Some(record) => memory.insert(key, *record),
                None => memory.remove(&key),
            };
        }
    }
}

/// Everything the pass plans from: the owned objects, the judgements known, the licence gate
/// and the spec as validated (each role's group count the spec's, or its DeepInferRole's).
async fn read(
    ctx: &Context,
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    status_whole: bool,
    key: &VerdictKey,
) -> Result<Snapshot, Error> {
    let pod_groups = ctx.pod_groups().await?;
    let observed = observe(ctx, did, pod_groups).await?;
    let uid = did.uid().unwrap_or_default();
    let known = recall(ctx, did, previous, status_whole, &observed, key, &uid).await?;
    let licence = licence_gate(
        did.annotations(),
        &did.spec.model.license,
        &ctx.accepted_licenses,
    );
    let scaled = scaling::scaled(did, &observed.scaled_roles, ctx.scaled_roles().await?);
    let spec = match &scaled {
        Ok(s) => spec::plan(
            &s.did,
            &ctx.limits,
            pod_groups,
            &observed.referenced,
            &s.sources,
        ),
        Err(refused) => SpecFound::Refused(refused.clone(), None),
    };
    let (target, refused) = Snapshot::of_spec(spec, &observed);
    Ok(Snapshot {
        remembered: remembered(ctx, did),
        licence_message: pass::licence_message(&licence, did),
        observed,
        previous: previous.cloned(),
        known,
        licence,
        refused,
        target,
        now: Timestamp::now(),
    })
}

/// Does the reads the gates asked for.
async fn read_fresh(
    ctx: &Context,
    did: &DeepInferDeployment,
    observed: &mut Observed,
    needs: Vec<Read>,
) -> Result<(), Error> {
    let (ns, name) = (did.namespace().unwrap_or_default(), did.name_any());
    for need in needs {
        match need {
            Read::JobPods(job) => {
                let uid = observed.job(&job).and_then(|j| j.metadata.uid.clone());
                let pods =
                    pods_of_job_now(&ctx.client, &ns, &job, &uid.unwrap_or_default()).await?;
                observed.fresh.job_pods.insert(job, pods);
            }
            Read::Admission(run) => {
                let admission = admit(ctx, &run);
                observed.fresh.admission.insert(run, admission);
            }
            Read::Evidence => {
                let uid = did.uid().unwrap_or_default();
                observed.fresh.evidence =
                    Some(observe::evidence_metas(&ctx.client, &ns, &name, &uid).await?);
            }
            Read::Domains { nodes, key } => {
                observed.fresh.domains =
                    Some(observe::node_domains(&ctx.client, &nodes, &key).await?);
            }
        }
    }
    Ok(())
}

/// Whether the fleet's queue lets the run start (`--max-concurrent-acceptance-runs`).
fn admit(ctx: &Context, run: &str) -> Admission {
    let Some(limit) = ctx.max_concurrent_acceptance_runs else {
        return Admission::Start;
    };
    ctx.caches.with_acceptance_runs(|runs| {
        ctx.acceptance_queue
            .lock()
            .map(|mut q| q.ask(run, runs, Some(limit), Timestamp::now()))
            .unwrap_or(Admission::Start)
    })
}

/// The outcome before any gate: the licence as seen and the judgements known.
fn first_outcome(
    did: &DeepInferDeployment,
    s: &Snapshot,
    previous: Option<&DeepInferDeploymentStatus>,
) -> Outcome {
    Outcome {
        licence: Some(LicenceSeen {
            license: did.spec.model.license.clone(),
            annotation: did.annotations().get(LICENSE_ACCEPTED_ANNOTATION).cloned(),
            accepted: s.licence.is_accepted(),
            reason: s.licence.reason(),
        }),
        judgements: s.known.judgements.clone(),
        // The status's own, when it is proved (see `recall`).
        acceptance_status: previous.and(s.known.acceptance.clone()),
        ..Outcome::default()
    }
}

/// This operator's placement retry records of the deployment's roles.
fn remembered(ctx: &Context, did: &DeepInferDeployment) -> BTreeMap<String, Retry> {
    let uid = did.uid().unwrap_or_default();
    let Ok(memory) = ctx.placement_retries.lock() else {
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

/// The judgements recorded so far: the status's (one written before the list existed has its
/// judgement in `acceptance`), made whole from the records on the evidence ConfigMaps when the
/// status was lost, is partly unreadable or holds results this release does not know.
async fn recall(
    ctx: &Context,
    did: &DeepInferDeployment,
    previous: Option<&DeepInferDeploymentStatus>,
    status_whole: bool,
    observed: &Observed,
    key: &VerdictKey,
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
        let (ns, name) = (did.namespace().unwrap_or_default(), did.name_any());
        let evidence = observe::evidence_metas(&ctx.client, &ns, &name, uid).await?;
        let (recalled, _) = memory::proved(memory::recalled(&evidence), key, uid);
        tracing::info!(
            recalled = recalled.len(),
            "the status does not hold every judgement; recalled them from the evidence"
        );
        known.judgements = memory::merge(&known.judgements, recalled);
    }
    Ok(known)
}
