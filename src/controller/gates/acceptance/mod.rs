//! The acceptance stage: runs (once) and judges the acceptance workload of the target revision.
//! A recorded judgement of the same revision, acceptance spec and rerun token is final and
//! reused (a rollback runs nothing). A run starts the other roles' groups first, as they serve,
//! then the judged group; its verdict is read from the judge's termination message only, and
//! recorded with the run's Jobs stopped and the judgement kept beside its evidence.

pub mod decide;
pub mod memory;
mod record;
mod run;
mod start;
mod superseded;
mod view;

pub use run::{stop_running, Candidate, Found, Input, Run};
pub use superseded::{superseded, Superseded};

use crate::api::{DeepInferDeploymentStatus, Reason};
use crate::controller::build::{self};
use crate::controller::gates::acceptance::decide::{self as judge, Step};
use crate::controller::gates::checkpoint::decide::running_job_gate;
use crate::controller::gates::jobs::{self, foreign_job};
use crate::controller::gates::Plan;
use crate::controller::observe::Observed;
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;
use record::*;
use start::*;
use view::*;

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
    let (judging, running) = (view.judging(input), view.running(input));
    let step = judge::decide(
        input
            .known
            .recorded_judgement(input.revision, &input.run.spec_hash, &input.run.token),
        &view.leader_state,
        &view.leader_seen,
        &view.run_seen,
        &view.upstream,
        &judging,
    );
    // The run goes ahead past its admission (a start admitted says so itself).
    let under_way = !matches!(step, Step::Start | Step::Reuse(_));
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
        Step::StartJudged if did.spec.acceptance.judges_serving() => Plan::with(
            Found::gate(running),
            start_judge(input, observed, &groups[0]),
        ),
        Step::StartJudged => Plan::with(
            Found::gate(running),
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
                running,
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
    if did.spec.acceptance.judges_serving() {
        let started = under_way || plan.found.candidate == Candidate::Judged;
        plan.found.candidate = candidate(&plan.found, started);
    }
    plan
}

/// What a serving-mode run asks of the target's candidate group: made while the run goes ahead
/// (`started`: it was admitted, or is under way), gone once the revision is refused.
fn candidate(found: &Found, started: bool) -> Candidate {
    let judgement = found.recorded.as_ref().or(found.status.as_ref());
    match judgement.map(|j| j.result) {
        Some(crate::api::AcceptanceResult::Passed) => Candidate::None,
        Some(_) => Candidate::Refused,
        None if started => Candidate::Judged,
        None => Candidate::None,
    }
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

    use crate::acceptance::placement::{Placement, PLACEMENT_ANNOTATION};
    use crate::api::{AcceptanceStatus, DeepInferDeploymentStatus, Reason};
    use crate::controller::act::Act;
    use crate::controller::build::{self};
    use crate::controller::fleet::Admission;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::jiff::Timestamp;
    use kube::ResourceExt;

    use crate::controller::gates::acceptance::memory::JUDGEMENT_ANNOTATION;

    use crate::controller::gates::Plan;
    use crate::controller::observe::Observed;
    use crate::controller::status::Gate;
    use crate::controller::validated::ValidatedDeployment;

    use super::run::*;

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
    fn a_deployment_judged_before_reads_its_judges_objects_before_writing_them() {
        let mut case = Case::new();
        case.known.acceptance = Some(crate::api::AcceptanceStatus::default());
        let run = case.run();
        case.admit(Admission::Start);
        let plan = case.plan();
        assert_eq!(
            described(&plan.acts)[..3],
            [
                format!("ensure ServiceAccount {}", run.names.service_account),
                format!("ensure Role {}", run.names.service_account),
                format!("ensure RoleBinding {}", run.names.service_account),
            ]
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

    /// The fixture judged in serving mode, with a load pass of 3 requests at once.
    fn serving_case() -> Case {
        let mut raw = fixture::raw();
        raw.spec.acceptance.mode = crate::api::AcceptanceMode::Serving;
        raw.spec.acceptance.load_concurrency = Some(3);
        let mut case = Case::new();
        case.did = fixture::valid(raw);
        case.revision = build::revision(&case.did.spec);
        case
    }

    /// The candidate group of `case`: its serving pods, engines running since `since`, rank 0
    /// at 10.244.0.7.
    fn candidate_group(case: &Case, since: i64) -> Vec<Pod> {
        let role = &case.did.spec.roles[0];
        build::group_pods(&case.did, role, 0, &case.revision)
            .into_iter()
            .map(|mut p| {
                let leader =
                    p.labels().get(crate::api::labels::RANK).map(String::as_str) == Some("0");
                let engine = case.engine_pod("-", since);
                p.status = engine.status.map(|s| PodStatus {
                    pod_ip: leader.then(|| "10.244.0.7".into()),
                    ..s
                });
                p
            })
            .collect()
    }

    #[test]
    fn a_serving_run_judges_the_candidate_group_through_its_endpoint_and_refuses_it_on_a_failure() {
        let mut case = serving_case();
        let run = case.run();
        // Before its admission nothing is asked of the serving groups.
        assert_eq!(case.plan().found.candidate, Candidate::None);
        case.admit(Admission::Start);
        let plan = case.plan();
        assert_eq!(plan.found.candidate, Candidate::Judged);
        assert!(
            fixture::created_job_ttls(&plan.acts).is_empty(),
            "no group of its own: {:?}",
            described(&plan.acts)
        );
        let Gate::Progressing(_, message) = &plan.found.gate else {
            panic!("{:?}", plan.found.gate)
        };
        assert!(
            message.contains("candidate group(s) of revision"),
            "{message}"
        );

        // The candidate's engines run: the judge alone, sent to rank 0's serving endpoint.
        case.observed.workers = candidate_group(&case, 9_990);
        let plan = case.plan();
        assert_eq!(plan.found.candidate, Candidate::Judged);
        let jobs: Vec<&Job> = plan
            .acts
            .iter()
            .filter_map(|a| match a {
                Act::Create(crate::controller::act::Object::Job(job)) => Some(job.as_ref()),
                _ => None,
            })
            .collect();
        assert_eq!(jobs.len(), 1, "{:?}", described(&plan.acts));
        assert_eq!(jobs[0].name_any(), case.leader());
        let pod = jobs[0]
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("a pod");
        assert_eq!(pod.containers.len(), 1);
        let judge = &pod.containers[0];
        assert_eq!(judge.name, build::JUDGE_CONTAINER);
        let args = judge.args.clone().unwrap_or_default().join(" ");
        assert!(
            args.contains("--endpoint http://10.244.0.7:8000 --load-concurrency 3"),
            "{args}"
        );
        assert!(!args.contains("--engine-dir"), "{args}");
        assert!(
            judge
                .resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_none_or(|l| l.keys().all(|k| k == "cpu" || k == "memory")),
            "the judge holds no devices"
        );
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some(run.names.service_account.as_str())
        );

        // The judge failed the candidate: recorded, and the candidate is refused.
        let leader = case.leader();
        case.observed.jobs = vec![fixture::in_state(jobs[0].clone(), "failed")];
        case.observed.job_pods = vec![judged_pod(
            &leader,
            r#"{"result":"Failed","prompts":1,"passed":0,"failedPrompts":["a"],"evidence":"ev","reason":"a: not JSON"}"#,
        )];
        let plan = case.plan();
        let recorded = plan.found.recorded.clone().expect("a verdict");
        assert_eq!(recorded.result, AcceptanceResult::Failed);
        assert_eq!(plan.found.candidate, Candidate::Refused);
        case.known.judgements.push(recorded);
        assert_eq!(case.plan().found.candidate, Candidate::Refused);
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
