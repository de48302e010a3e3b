//! Recording a verdict: where each rank ran and the judgement kept on the run's evidence, the
//! run's Jobs stopped, old evidence pruned.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::run::*;
use crate::acceptance::placement::{Placement, PLACEMENT_ANNOTATION};
use crate::api::{pinned, AcceptanceStatus};
use crate::controller::act::{self, Act};
use crate::controller::build::{self, RunGroup};
use crate::controller::gates::acceptance::decide::{self as judge};
use crate::controller::gates::acceptance::memory::JUDGEMENT_ANNOTATION;
use crate::controller::gates::housekeeping::retention;
use crate::controller::gates::Plan;
use crate::controller::observe::{Fresh, Observed, Read};
use crate::controller::validated::ValidatedDeployment;

/// A verdict to record: the run's Jobs stopped (the leader too when `stop_leader`), the
/// judgement kept beside its evidence, old evidence pruned (never that of the judgement just
/// made, nor of those serving pods rest on).
pub(super) fn record<'o>(
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
pub(super) fn evidence_reads(input: &Input<'_>, placement: &Placement) -> Vec<Read> {
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
pub(super) fn annotate_evidence<'o>(
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
pub(super) fn with_domains(input: &Input<'_>, fresh: &Fresh, placement: Placement) -> Placement {
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

/// Deletes of a run's Jobs: the judged group's ranks from `from` on, every rank of the other
/// roles' groups, and each group's rendezvous Service, PodGroup and rank table. Only what the
/// pass observed is deleted: a pass that records the same verdict again (its status write not
/// yet in the cache) sends no delete for what the first one removed.
pub(super) fn stop<'o>(
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
