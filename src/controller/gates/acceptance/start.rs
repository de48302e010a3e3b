//! Starting a run: its shared objects (the judge's RBAC, the spec and evidence ConfigMaps),
//! the other roles' groups first, then the judged group; the rank tables of its groups.

use std::collections::BTreeSet;

use kube::ResourceExt;

use super::run::*;
use super::view::*;
use super::Candidate;
use crate::api::{labels, AcceptanceSpec, Reason};
use crate::controller::act::Act;
use crate::controller::build::{self, RunGroup};
use crate::controller::fleet::Admission;
use crate::controller::gates::acceptance::decide::{self as judge};
use crate::controller::gates::Plan;
use crate::controller::observe::{named, Observed, Read};
use crate::controller::status::Gate;

/// A run that may start: unless its prompts cannot be resolved, a review is missing or the
/// fleet's queue holds it, its shared objects and the other roles' groups (the judged group
/// once their engines run).
pub(super) fn start<'o>(
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
    if did.spec.acceptance.judges_serving() {
        // The candidate is a serving group, made by the workers stage; the judge follows once
        // its engines run.
        return Plan::with(
            Found {
                candidate: Candidate::Judged,
                ..Found::gate(view.running(input))
            },
            acts,
        );
    }
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
pub(super) fn shared_objects<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    spec: &AcceptanceSpec,
) -> Vec<Act<'o>> {
    let (did, names) = (input.did, &input.run.names);
    let spec_yaml = build::acceptance_spec_yaml(spec);
    let in_flight = in_flight_evidence(&did.name_any(), observed);
    let (sa, role, binding) = build::acceptance_rbac(did, names, &in_flight);
    // A deployment judged before has its judge's objects (no watch caches them): they are read
    // first and written only where they differ (the Role, when the evidence it names changed).
    // The first run creates them without a read.
    let judged_before = input.known.acceptance.is_some();
    let rbac = if judged_before {
        [Act::ensure(sa), Act::ensure(role), Act::ensure(binding)]
    } else {
        [
            Act::apply(sa, None),
            Act::apply(role, None),
            Act::apply(binding, None),
        ]
    };
    rbac.into_iter()
        .chain([
            Act::apply(
                build::acceptance_spec_configmap(did, names, input.revision, spec_yaml),
                None,
            ),
            Act::create(build::acceptance_evidence_configmap(
                did,
                names,
                input.revision,
            )),
        ])
        .collect()
}

/// Creates groups of an acceptance run: each one's rendezvous Service (where it needs one), its
/// PodGroup before its pods (they wait for it, then are bound all at once), its rank table, and
/// one Job per rank, followers first, so that a leader's engine finds them when it starts.
pub(super) fn start_groups<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    groups: &[RunGroup<'_>],
) -> Vec<Act<'o>> {
    let (did, revision) = (input.did, input.revision);
    let names = pinned_names(input);
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

/// The run's names with the spec file its ConfigMap holds, which the judge pins (hashed only
/// here, when Jobs are made, not on every pass).
fn pinned_names(input: &Input<'_>) -> build::AcceptanceNames {
    let mut names = input.run.names.clone();
    if let Ok(spec) = &input.run.resolved {
        names.spec_sha256 =
            crate::acceptance::spec_file::sha256_hex(build::acceptance_spec_yaml(spec).as_bytes());
    }
    names
}

/// The judge of a serving-mode run, once the candidate's rank 0 has an address: a Job of the
/// judge alone, named as the judged leader, sending the prompts to the candidate's serving
/// endpoint (until then, nothing: the pod's next status brings the pass back).
pub(super) fn start_judge<'o>(
    input: &Input<'_>,
    observed: &'o Observed,
    group: &RunGroup<'_>,
) -> Vec<Act<'o>> {
    let leader_ip = candidate_pods(observed, input.revision, &group.role.name)
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .find(|p| p.labels().get(labels::RANK).map(String::as_str) == Some("0"))
        .and_then(|p| p.status.as_ref()?.pod_ip.clone());
    let Some(ip) = leader_ip else {
        return Vec::new();
    };
    let names = pinned_names(input);
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip
    };
    let endpoint = format!("http://{host}:{}", build::SERVE_PORT);
    build::serving_judge_job(
        input.did,
        &names,
        group,
        input.revision,
        input.settings.operator_image,
        &endpoint,
    )
    .map(|job| input.settings.create_job(job))
    .into_iter()
    .collect()
}

/// Ascend: the rank table of each started group of the run from its pods as they are placed
/// and allocated (`completed` once every rank is), and deletes of the tables of earlier runs
/// none of whose Jobs is left.
pub(super) fn rank_tables<'o>(
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

/// The evidence ConfigMaps of this deployment's acceptance runs whose Jobs are still running.
pub(super) fn in_flight_evidence(did: &str, observed: &Observed) -> Vec<String> {
    running_jobs(observed)
        .filter_map(|job| build::evidence_of_job(did, job))
        .collect()
}
