//! Day-2 serving on the test bed: revision changes roll group by group without an outage, trust
//! withdrawn takes pods out of service at once, and the serving revision stays managed while
//! another is judged. Each rollout test samples the ready groups every 100 ms, prints the
//! minimum, and asserts it. The bed has four 8-GPU NVIDIA nodes; tests named `gpu_*` run one at
//! a time (see `.config/nextest.toml`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use deepinfer_operator::controller::pods::pod_ready;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const IMAGE2: &str = "registry.example.com/deepinfer@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
const TIMEOUT: Duration = Duration::from_secs(120);

/// An NVIDIA deployment of `replicas` groups of `tensor` GPUs (8 per pod) with a rollout policy.
fn deployment(name: &str, replicas: i32, tensor: i32, surge: i32, unavailable: i32) -> Value {
    let mut did = support::workers(name, replicas, tensor);
    did["spec"]["roles"][0]["rollout"] = json!({"maxSurge": surge, "maxUnavailable": unavailable});
    did
}

async fn setup(prefix: &str) -> (Client, TestNamespace, Api<DeepInferDeployment>, Operator) {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, prefix).await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start(&ns.name, &["mit"]).await;
    (client, ns, api, op)
}

async fn create(api: &Api<DeepInferDeployment>, obj: Value) {
    let did: DeepInferDeployment = serde_json::from_value(obj).expect("valid test object");
    api.create(&PostParams::default(), &did)
        .await
        .expect("creating the DeepInferDeployment");
}

/// The annotations a change to `spec.acceptance` of a deployment that passed needs.
fn acceptance_change(reason: &str) -> Value {
    json!({"metadata": {"annotations": {
        "deepinfer.io/acceptance-change-reason": reason,
        "deepinfer.io/acceptance-change-reviewer": "e2e reviewer"}}})
}

async fn patch(api: &Api<DeepInferDeployment>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patching the DeepInferDeployment");
}

fn condition<'a>(
    s: &'a DeepInferDeploymentStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == type_)
}

fn is_ready(s: &DeepInferDeploymentStatus) -> bool {
    condition(s, "Ready").is_some_and(|c| c.status == "True")
}

async fn status_where(
    api: &Api<DeepInferDeployment>,
    name: &str,
    what: &str,
    pred: impl Fn(&DeepInferDeploymentStatus) -> bool,
) -> DeepInferDeploymentStatus {
    support::current_status_where(api, name, what, TIMEOUT, pred).await
}

async fn workers(client: &Client, ns: &str, did: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "deepinfer.io/deployment={did},deepinfer.io/component=worker"
    )))
    .await
    .map(|l| l.items)
    .unwrap_or_default()
}

fn label<'a>(p: &'a Pod, key: &str) -> &'a str {
    p.labels().get(key).map(String::as_str).unwrap_or("")
}

/// Groups (revision, index) → whether every pod of the group is Ready.
fn groups(pods: &[Pod]) -> BTreeMap<(String, String), bool> {
    let mut out: BTreeMap<(String, String), bool> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let key = (
            label(p, "deepinfer.io/revision").to_string(),
            label(p, "deepinfer.io/group").to_string(),
        );
        let ready = out.entry(key).or_insert(true);
        *ready &= pod_ready(p);
    }
    out
}

/// Samples the ready groups (all ranks Ready) and the ready endpoints of the `worker` role's
/// Service every 100 ms until stopped; keeps the minima, the most groups that existed at once
/// and the revisions a ready group was seen on.
struct Sampler {
    stop: Arc<AtomicBool>,
    min_ready: Arc<AtomicUsize>,
    min_endpoints: Arc<AtomicUsize>,
    max_groups: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    serving_revisions: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(client: &Client, ns: &str, did: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let min_ready = Arc::new(AtomicUsize::new(usize::MAX));
        let min_endpoints = Arc::new(AtomicUsize::new(usize::MAX));
        let max_groups = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(AtomicUsize::new(0));
        let serving_revisions = Arc::new(Mutex::new(BTreeSet::new()));
        let task = tokio::spawn({
            let (client, ns, did) = (client.clone(), ns.to_string(), did.to_string());
            let (stop, min_ready, min_endpoints, max_groups, samples, serving) = (
                stop.clone(),
                min_ready.clone(),
                min_endpoints.clone(),
                max_groups.clone(),
                samples.clone(),
                serving_revisions.clone(),
            );
            async move {
                let service = format!("{did}-worker");
                while !stop.load(Ordering::Relaxed) {
                    let g = groups(&workers(&client, &ns, &did).await);
                    min_ready.fetch_min(g.values().filter(|r| **r).count(), Ordering::Relaxed);
                    if let Ok(mut serving) = serving.lock() {
                        serving.extend(
                            g.iter()
                                .filter(|(_, r)| **r)
                                .map(|((rev, _), _)| rev.clone()),
                        );
                    }
                    max_groups.fetch_max(g.len(), Ordering::Relaxed);
                    let endpoints = support::ready_endpoints(&client, &ns, &service).await;
                    min_endpoints.fetch_min(endpoints, Ordering::Relaxed);
                    samples.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Self {
            stop,
            min_ready,
            min_endpoints,
            max_groups,
            samples,
            serving_revisions,
            task,
        }
    }

    /// The revisions a ready group was seen on so far.
    fn serving_revisions(&self) -> BTreeSet<String> {
        self.serving_revisions
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The fewest ready endpoints the role Service had so far.
    fn min_endpoints(&self) -> usize {
        self.min_endpoints.load(Ordering::Relaxed)
    }

    /// Stops sampling; returns (minimum ready groups, most groups at once).
    async fn finish(self, what: &str) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let min = self.min_ready.load(Ordering::Relaxed);
        let max = self.max_groups.load(Ordering::Relaxed);
        let samples = self.samples.load(Ordering::Relaxed);
        println!(
            "{what}: minimum ready groups {min}, most groups at once {max} ({samples} samples)"
        );
        // A minimum over no sample would be usize::MAX and pass every bound.
        assert!(samples >= 2, "{what}: only {samples} sample(s) were taken");
        (min, max)
    }
}

async fn acceptance_jobs(client: &Client, ns: &str, did: &str) -> BTreeSet<String> {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "deepinfer.io/deployment={did},deepinfer.io/component=acceptance"
    )))
    .await
    .map(|l| l.items.iter().map(ResourceExt::name_any).collect())
    .unwrap_or_default()
}

/// Rolls `name` to a new image and waits for Ready on the new revision, sampling meanwhile.
async fn roll_to_new_image(
    client: &Client,
    ns: &str,
    api: &Api<DeepInferDeployment>,
    name: &str,
) -> (usize, usize, DeepInferDeploymentStatus) {
    let before = status_where(api, name, "Ready", is_ready).await;
    let sampler = Sampler::start(client, ns, name);
    patch(api, name, json!({"spec": {"runtime": {"image": IMAGE2}}})).await;
    let after = status_where(api, name, "Ready on the new revision", |s| {
        s.revision != before.revision && is_ready(s)
    })
    .await;
    let serving = sampler.serving_revisions();
    let (min, max) = sampler.finish(name).await;
    // The minimum covers the rollout only if the samples span it: a ready group of the old
    // revision before, one of the new revision after.
    let (old, new) = (
        before.revision.expect("the old revision"),
        after.revision.clone().expect("the new revision"),
    );
    assert!(
        serving.contains(&old) && serving.contains(&new),
        "{name}: the samples saw ready groups on {serving:?}, not on both {old} and {new}"
    );
    let loads = support::weight_loads(ns, name, &new);
    println!(
        "{name}: weight loads of the new revision {new} (offline acceptance): {} ({} acceptance, {} serving)",
        loads.len(),
        loads.iter().filter(|s| s.component.as_deref() == Some("acceptance")).count(),
        loads.iter().filter(|s| s.component.as_deref() == Some("worker")).count(),
    );
    (min, max, after)
}

#[tokio::test]
async fn gpu_a_revision_change_with_surge_keeps_every_group_serving() {
    let (client, ns, api, op) = setup("surge").await;
    create(&api, deployment("surge", 2, 8, 1, 0)).await;
    status_where(&api, "surge", "Ready", is_ready).await;
    let rolled = k8s_openapi::jiff::Timestamp::now();
    let (min, max, after) = roll_to_new_image(&client, &ns.name, &api, "surge").await;
    // The judge's ServiceAccount, Role and RoleBinding exist from the first run: the new run
    // reads them and writes only what changed, the Role (the evidence it may write).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut rbac: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for w in deepinfer_e2e::audit::replica_writes(&ns.name, rolled) {
        if w.object.ends_with("/surge-acceptance") {
            rbac.entry(w.object).or_default().push(w.verb);
        }
    }
    assert_eq!(
        rbac,
        BTreeMap::from([("roles/surge-acceptance".into(), vec!["patch".into()])]),
        "writes of the judge's objects in the second run"
    );
    assert!(min >= 2, "ready groups dropped to {min} during the rollout");
    assert!(
        max <= 3,
        "{max} groups existed at once; replicas + maxSurge is 3"
    );
    let pods = workers(&client, &ns.name, "surge").await;
    assert_eq!(groups(&pods).len(), 2);
    assert!(pods
        .iter()
        .all(|p| Some(label(p, "deepinfer.io/revision")) == after.revision.as_deref()));
    assert_eq!(after.roles[0].updated_groups, 2);
    assert_eq!(after.roles[0].rolling_out, None);
    // Offline acceptance: the run's group loads the new revision's weights once, then each of
    // the two serving groups does: three loads for two groups.
    let revision = after.revision.clone().expect("the new revision");
    let loads = support::weight_loads(&ns.name, "surge", &revision);
    assert_eq!(loads.len(), 3, "{loads:#?}");
    assert_eq!(
        loads
            .iter()
            .filter(|s| s.component.as_deref() == Some("acceptance"))
            .count(),
        1,
        "{loads:#?}"
    );
    op.stop().await;
}

#[tokio::test]
async fn gpu_without_spare_capacity_max_unavailable_one_completes_with_a_group_serving() {
    // Two groups of 2 × 8 GPUs fill the bed's four nodes: the acceptance run and each new group
    // need a group taken out of service first.
    let (client, ns, api, op) = setup("full").await;
    support::wait_for_free_devices(&client, "nvidia.com/gpu").await;
    create(&api, deployment("full", 2, 16, 0, 1)).await;
    let (min, max, after) = roll_to_new_image(&client, &ns.name, &api, "full").await;
    assert!(min >= 1, "ready groups dropped to {min}");
    assert!(max <= 2, "{max} groups existed at once on a full bed");
    assert_eq!(after.roles[0].ready_groups, 2);
    op.stop().await;
}

#[tokio::test]
async fn gpu_licence_revocation_empties_the_endpoints_and_restoring_it_runs_nothing_again() {
    let (client, ns, api, op) = setup("revoke").await;
    create(&api, deployment("revoke", 2, 8, 1, 0)).await;
    let ready = status_where(&api, "revoke", "Ready", is_ready).await;
    support::eventually(TIMEOUT, "2 ready endpoints", || async {
        (support::ready_endpoints(&client, &ns.name, "revoke-worker").await == 2).then_some(())
    })
    .await;
    let runs = acceptance_jobs(&client, &ns.name, "revoke").await;

    let revoked_at = std::time::Instant::now();
    patch(&api, "revoke", support::licence_patch(None)).await;
    support::eventually(
        Duration::from_secs(10),
        "no ready endpoint within 10 s",
        || async {
            (support::ready_endpoints(&client, &ns.name, "revoke-worker").await == 0).then_some(())
        },
    )
    .await;
    println!(
        "endpoints empty {:?} after revocation",
        revoked_at.elapsed()
    );
    let st = status_where(&api, "revoke", "the licence gate closed", |s| {
        condition(s, "LicenseAccepted").is_some_and(|c| c.status == "False")
    })
    .await;
    let pods = workers(&client, &ns.name, "revoke").await;
    assert_eq!(pods.len(), 2, "the pods keep running, out of service");
    for p in &pods {
        let c = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "deepinfer.io/accepted"))
            .expect("accepted condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("LicenseWithdrawn"))
        );
    }
    assert!(
        condition(&st, "WorkersReady").is_some_and(|c| c.reason == "ServingWithdrawn"),
        "status says what was withdrawn: {:?}",
        condition(&st, "WorkersReady")
    );

    patch(&api, "revoke", support::licence_patch(Some("mit"))).await;
    support::eventually(
        Duration::from_secs(30),
        "2 ready endpoints again",
        || async {
            (support::ready_endpoints(&client, &ns.name, "revoke-worker").await == 2).then_some(())
        },
    )
    .await;
    let st = status_where(&api, "revoke", "Ready again", is_ready).await;
    assert_eq!(
        acceptance_jobs(&client, &ns.name, "revoke").await,
        runs,
        "restoring the licence runs no acceptance"
    );
    assert_eq!(st.judgements, ready.judgements, "no new judgement");
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_failed_rejudgement_takes_the_serving_pods_out_of_service() {
    let (client, ns, api, op) = setup("rejudge").await;
    create(&api, deployment("rejudge", 1, 8, 1, 0)).await;
    status_where(&api, "rejudge", "Ready", is_ready).await;
    // The same revision, judged against outputs that break the expected structure. Changing the
    // acceptance section of a deployment that passed needs a recorded review first: until then
    // nothing runs and the serving pods keep serving.
    patch(
        &api,
        "rejudge",
        json!({"spec": {"acceptance": support::shot_planner_acceptance("invalid-2-2-3.jsonl", "replay")}}),
    )
    .await;
    let stalled = status_where(&api, "rejudge", "AcceptanceReviewRequired", |s| {
        condition(s, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceReviewRequired")
            && condition(s, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(stalled.judgements.len(), 1, "no run without the review");
    support::eventually(
        Duration::from_secs(30),
        "the serving revision keeps serving",
        || async {
            (support::ready_endpoints(&client, &ns.name, "rejudge-worker").await == 1).then_some(())
        },
    )
    .await;
    patch(
        &api,
        "rejudge",
        acceptance_change("expected outputs replaced"),
    )
    .await;
    let st = status_where(&api, "rejudge", "AcceptanceFailed", |s| {
        condition(s, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceFailed")
    })
    .await;
    assert!(
        st.judgements.len() >= 2,
        "both judgements kept: {:?}",
        st.judgements
    );
    assert_eq!(
        st.judgements[0]
            .review
            .as_ref()
            .and_then(|r| r.change_reason.as_deref()),
        Some("expected outputs replaced"),
        "the review is recorded in the judgement"
    );
    support::eventually(Duration::from_secs(10), "no ready endpoint", || async {
        (support::ready_endpoints(&client, &ns.name, "rejudge-worker").await == 0).then_some(())
    })
    .await;
    let pods = workers(&client, &ns.name, "rejudge").await;
    assert!(!pods.is_empty() && pods.iter().all(|p| !pod_ready(p)));
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_serving_group_that_crashes_while_another_revision_is_judged_is_replaced() {
    let (client, ns, api, op) = setup("judging").await;
    create(&api, deployment("judging", 2, 8, 1, 0)).await;
    let ready = status_where(&api, "judging", "Ready", is_ready).await;
    // A new revision whose acceptance run hangs: it stays under judgement.
    let mut hanging = support::shot_planner_acceptance("valid-2-2-2.jsonl", "hang");
    hanging["timeoutSeconds"] = json!(3600);
    patch(
        &api,
        "judging",
        json!({"metadata": acceptance_change("a hanging engine")["metadata"], "spec": {"runtime": {"image": IMAGE2}, "acceptance": hanging}}),
    )
    .await;
    status_where(&api, "judging", "judging the new revision", |s| {
        condition(s, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceRunning")
    })
    .await;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let victim = workers(&client, &ns.name, "judging").await[0].clone();
    pods_api
        .delete(&victim.name_any(), &DeleteParams::default())
        .await
        .expect("crash a serving group");
    let replaced = support::eventually(
        TIMEOUT,
        "two ready groups of the serving revision",
        || async {
            let pods = workers(&client, &ns.name, "judging").await;
            let g = groups(&pods);
            (g.len() == 2
                && g.values().all(|r| *r)
                && pods.iter().all(|p| {
                    Some(label(p, "deepinfer.io/revision")) == ready.revision.as_deref()
                        && p.uid() != victim.uid()
                }))
            .then_some(pods)
        },
    )
    .await;
    assert_eq!(replaced.len(), 2);
    // The pass after the replacement writes the role's count, still while judging.
    let st = status_where(&api, "judging", "status.roles kept while judging", |s| {
        s.roles.first().is_some_and(|r| r.ready_groups == 2)
    })
    .await;
    assert!(
        condition(&st, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceRunning"),
        "the new revision is still being judged"
    );
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_changed_pod_template_rolls_one_group_at_a_time() {
    let (client, ns, api, op) = setup("template").await;
    create(&api, deployment("template", 2, 8, 1, 0)).await;
    let before = status_where(&api, "template", "Ready", is_ready).await;
    let old_pods: BTreeSet<String> = workers(&client, &ns.name, "template")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    let sampler = Sampler::start(&client, &ns.name, "template");
    // Probes are part of the pod template but not of the revision: no new judgement.
    patch(
        &api,
        "template",
        json!({"spec": {"runtime": {"readinessProbe": {"httpGet": {"path": "/health", "port": "serve"}, "periodSeconds": 5}}}}),
    )
    .await;
    support::eventually(TIMEOUT, "every group replaced", || async {
        let pods = workers(&client, &ns.name, "template").await;
        let uids: BTreeSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        (uids.is_disjoint(&old_pods) && groups(&pods).values().filter(|r| **r).count() == 2)
            .then_some(())
    })
    .await;
    let after = status_where(&api, "template", "Ready", is_ready).await;
    let (min, max) = sampler.finish("template").await;
    assert!(min >= 2, "ready groups dropped to {min}");
    assert!(
        max <= 3,
        "{max} groups at once: more than one group was replaced at a time"
    );
    assert_eq!(after.revision, before.revision, "the revision is unchanged");
    assert_eq!(
        after.judgements, before.judgements,
        "nothing was judged again"
    );
    op.stop().await;
}

/// The pods serving `did` now: (name, uid) of every worker pod that is Ready.
async fn serving_pods(client: &Client, ns: &str, did: &str) -> BTreeSet<(String, String)> {
    workers(client, ns, did)
        .await
        .iter()
        .filter(|p| pod_ready(p))
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

/// Whether `st` holds a pass of the revision `ready` was on.
fn has_pass(st: &DeepInferDeploymentStatus, ready: &DeepInferDeploymentStatus) -> bool {
    st.judgements
        .iter()
        .any(|j| Some(&j.revision) == ready.revision.as_ref() && j.passed())
}

/// A runtime commit of its own for failing candidate number `n`.
fn commit(n: u32) -> String {
    format!("{n:040x}")
}

#[tokio::test]
async fn gpu_seven_failing_revisions_in_a_row_never_take_the_serving_revision_down() {
    let (client, ns, api, op) = setup("sixfail").await;
    create(&api, deployment("sixfail", 2, 8, 1, 0)).await;
    let ready = status_where(&api, "sixfail", "Ready", is_ready).await;
    let serving = serving_pods(&client, &ns.name, "sixfail").await;
    assert_eq!(serving.len(), 2);
    support::eventually(TIMEOUT, "2 ready endpoints", || async {
        (support::ready_endpoints(&client, &ns.name, "sixfail-worker").await == 2).then_some(())
    })
    .await;
    let sampler = Sampler::start(&client, &ns.name, "sixfail");
    // Each candidate is a new runtime commit whose engine's outputs break a rule.
    let failing = support::shot_planner_acceptance("invalid-2-2-3.jsonl", "replay");
    let mut earlier: Vec<String> = Vec::new();
    for n in 1..=7 {
        patch(
            &api,
            "sixfail",
            json!({"metadata": acceptance_change("failing candidates")["metadata"], "spec": {"runtime": {"commit": commit(n)}, "acceptance": failing}}),
        )
        .await;
        let st = status_where(&api, "sixfail", &format!("candidate {n} judged"), |s| {
            s.revision != ready.revision
                && s.judgements.iter().any(|j| {
                    Some(&j.revision) == s.revision.as_ref()
                        && j.result == deepinfer_operator::api::AcceptanceResult::Failed
                })
        })
        .await;
        println!(
            "candidate {n}: revision {:?} failed; ready endpoints never below {} so far",
            st.revision,
            sampler.min_endpoints()
        );
        assert!(
            condition(&st, "Available").is_some_and(|c| c.status == "True"),
            "candidate {n}: the serving revision serves on, Available: {:?}",
            condition(&st, "Available")
        );
        // No run of an earlier candidate holds devices: none of their Jobs is unfinished.
        for rev in &earlier {
            let unfinished = unfinished_jobs(&client, &ns.name, "sixfail", rev).await;
            assert!(
                unfinished.is_empty(),
                "candidate {n}: Jobs of an earlier candidate ({rev}) still run: {unfinished:?}"
            );
        }
        earlier.extend(st.revision.clone());
    }
    // A few more passes after the last verdict.
    support::poke(&api, "sixfail", 3).await;
    let min_endpoints = sampler.min_endpoints();
    let (min_groups, _) = sampler.finish("seven failing candidates").await;
    println!("seven failing candidates: fewest ready endpoints {min_endpoints}");
    assert!(
        min_groups >= 2 && min_endpoints >= 2,
        "with maxUnavailable 0 both groups serve throughout: fewest ready groups {min_groups}, fewest ready endpoints {min_endpoints}"
    );
    assert_eq!(
        serving_pods(&client, &ns.name, "sixfail").await,
        serving,
        "the serving revision's pods are the same pods, still serving"
    );
    let st = api.get_status("sixfail").await.expect("status").status;
    let st = st.expect("a status");
    assert!(
        has_pass(&st, &ready),
        "the serving revision's pass is kept: {:?}",
        st.judgements
    );
    op.stop().await;
}

/// Writes `status` over the resource's status subresource (JSON merge patch on raw JSON, so
/// values the typed API would refuse can be written).
async fn overwrite_status(client: &Client, ns: &str, name: &str, status: Value) {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("deepinfer.io", "v1alpha1", "DeepInferDeployment"),
        "deepinferdeployments",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let patch = json!([{"op": "replace", "path": "/status", "value": status}]);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::<Value>::Json(serde_json::from_value(patch).expect("a JSON patch")),
    )
    .await
    .expect("overwriting the status");
}

/// Runs `damage` on a Ready two-group deployment, then samples serving for 30 s and until it is
/// Ready again: which pods serve never changes, and nothing is judged again.
async fn serving_survives(prefix: &str, damage: impl FnOnce(Value) -> Value) {
    let (client, ns, api, op) = setup(prefix).await;
    create(&api, deployment(prefix, 2, 8, 1, 0)).await;
    let ready = status_where(&api, prefix, "Ready", is_ready).await;
    let service = format!("{prefix}-worker");
    support::eventually(TIMEOUT, "2 ready endpoints", || async {
        (support::ready_endpoints(&client, &ns.name, &service).await == 2).then_some(())
    })
    .await;
    let serving = serving_pods(&client, &ns.name, prefix).await;
    let runs = acceptance_jobs(&client, &ns.name, prefix).await;
    let sampler = Sampler::start(&client, &ns.name, prefix);
    let stored = serde_json::to_value(&ready).expect("status as JSON");
    overwrite_status(&client, &ns.name, prefix, damage(stored)).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let st = status_where(&api, prefix, "Ready again", is_ready).await;
    let min_endpoints = sampler.min_endpoints();
    let (min_groups, _) = sampler.finish(prefix).await;
    println!("{prefix}: fewest ready endpoints {min_endpoints}");
    assert!(
        min_groups >= 2 && min_endpoints >= 2,
        "both groups serve throughout: fewest ready groups {min_groups}, ready endpoints {min_endpoints}"
    );
    assert_eq!(serving_pods(&client, &ns.name, prefix).await, serving);
    assert_eq!(
        acceptance_jobs(&client, &ns.name, prefix).await,
        runs,
        "nothing is judged again"
    );
    assert_eq!(st.revision, ready.revision);
    assert!(
        has_pass(&st, &ready),
        "the pass is known again: {:?}",
        st.judgements
    );
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_lost_status_changes_no_serving_pod() {
    serving_survives("lost", |_| json!({})).await;
}

#[tokio::test]
async fn gpu_a_status_with_an_unknown_phase_and_result_changes_no_serving_pod() {
    serving_survives("unknown", |mut status| {
        status["phase"] = json!("Draining");
        if let Some(list) = status["judgements"].as_array_mut() {
            for j in list {
                j["result"] = json!("PassedWithWarnings");
            }
        }
        if status["acceptance"].is_object() {
            status["acceptance"]["result"] = json!("PassedWithWarnings");
        }
        status
    })
    .await;
}

/// The revisions of the groups of `did` (one entry per group), sorted.
async fn group_revisions(client: &Client, ns: &str, did: &str) -> Vec<String> {
    let mut revs: Vec<String> = groups(&workers(client, ns, did).await)
        .into_keys()
        .map(|(rev, _)| rev)
        .collect();
    revs.sort();
    revs
}

#[tokio::test]
async fn gpu_a_partition_holds_a_rollout_at_one_group_and_lowering_it_lets_it_finish() {
    let (client, ns, api, op) = setup("partition").await;
    let mut obj = deployment("partition", 2, 8, 1, 0);
    obj["spec"]["roles"][0]["rollout"]["partition"] = json!(1);
    create(&api, obj).await;
    let before = status_where(&api, "partition", "Ready", is_ready).await;
    patch(
        &api,
        "partition",
        json!({"spec": {"runtime": {"image": IMAGE2}}}),
    )
    .await;
    let held = status_where(&api, "partition", "Ready with one group updated", |s| {
        s.revision != before.revision
            && is_ready(s)
            && s.roles.first().is_some_and(|r| r.updated_groups == 1)
    })
    .await;
    support::poke(&api, "partition", 3).await;
    let revs = group_revisions(&client, &ns.name, "partition").await;
    assert_eq!(revs.len(), 2, "{revs:?}");
    assert!(
        revs.contains(before.revision.as_ref().expect("old"))
            && revs.contains(held.revision.as_ref().expect("new")),
        "one group on each revision: {revs:?}"
    );
    assert_eq!(
        held.roles[0].rolling_out, held.revision,
        "the role says what is being rolled out"
    );
    patch(
        &api,
        "partition",
        json!({"spec": {"roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 8},
                                   "rollout": {"maxSurge": 1, "maxUnavailable": 0, "partition": 0}}]}}),
    )
    .await;
    let done = status_where(&api, "partition", "every group updated", |s| {
        is_ready(s) && s.roles.first().is_some_and(|r| r.updated_groups == 2)
    })
    .await;
    assert_eq!(
        group_revisions(&client, &ns.name, "partition").await,
        vec![done.revision.clone().expect("revision"); 2]
    );
    op.stop().await;
}

#[tokio::test]
async fn gpu_paused_holds_everything_and_suspend_frees_every_device_then_serves_without_a_new_run()
{
    let (client, ns, api, op) = setup("pause").await;
    create(&api, deployment("pause", 2, 8, 1, 0)).await;
    let ready = status_where(&api, "pause", "Ready", is_ready).await;
    let phase = |s: &DeepInferDeploymentStatus, p: &str| {
        serde_json::to_value(s.phase).ok() == Some(json!(p))
    };
    // Paused: a new revision is judged, but no group is created, replaced or deleted.
    patch(&api, "pause", json!({"spec": {"paused": true}})).await;
    status_where(&api, "pause", "phase Paused", |s| phase(s, "Paused")).await;
    let held: BTreeSet<String> = workers(&client, &ns.name, "pause")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    patch(
        &api,
        "pause",
        json!({"spec": {"runtime": {"image": IMAGE2}}}),
    )
    .await;
    let judged = status_where(&api, "pause", "the new revision judged while paused", |s| {
        s.revision != ready.revision
            && s.acceptance
                .as_ref()
                .is_some_and(|a| Some(&a.revision) == s.revision.as_ref() && a.passed())
    })
    .await;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let victim = workers(&client, &ns.name, "pause").await[0].name_any();
    pods_api
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("break a group");
    support::poke(&api, "pause", 3).await;
    let now: BTreeSet<String> = workers(&client, &ns.name, "pause")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    assert!(
        now.is_subset(&held) && now.len() == held.len() - 1,
        "nothing created or replaced while paused"
    );
    let st = api
        .get_status("pause")
        .await
        .expect("status")
        .status
        .expect("status");
    assert!(phase(&st, "Paused"), "{:?}", st.phase);
    let reconciling = condition(&st, "Reconciling").expect("Reconciling");
    assert_eq!(
        (reconciling.status.as_str(), reconciling.reason.as_str()),
        ("False", "Paused")
    );
    // Resumed: the rollout goes on.
    patch(&api, "pause", json!({"spec": {"paused": false}})).await;
    let rolled = status_where(&api, "pause", "Ready on the new revision", |s| {
        is_ready(s) && s.revision == judged.revision && s.roles[0].updated_groups == 2
    })
    .await;
    let runs = acceptance_jobs(&client, &ns.name, "pause").await;
    // Suspended: every device is freed; the judgements stay.
    patch(&api, "pause", json!({"spec": {"suspend": true}})).await;
    status_where(&api, "pause", "phase Suspended", |s| phase(s, "Suspended")).await;
    support::eventually(TIMEOUT, "no worker pod left", || async {
        workers(&client, &ns.name, "pause")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let st = api
        .get_status("pause")
        .await
        .expect("status")
        .status
        .expect("status");
    assert_eq!(st.judgements, rolled.judgements, "judgements kept");
    // Resumed: serving again on the recorded pass, with no new acceptance run.
    patch(&api, "pause", json!({"spec": {"suspend": false}})).await;
    let back = status_where(&api, "pause", "Ready again", |s| {
        is_ready(s) && s.roles[0].ready_groups == 2
    })
    .await;
    assert_eq!(back.revision, rolled.revision);
    assert_eq!(back.judgements, rolled.judgements, "nothing judged again");
    assert_eq!(acceptance_jobs(&client, &ns.name, "pause").await, runs);
    op.stop().await;
}

#[tokio::test]
async fn gpu_with_license_withdrawal_stop_a_closed_licence_frees_every_device_and_reopening_runs_nothing_again(
) {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "stop").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start_with(&ns.name, &["mit"], |s| {
        s.license_withdrawal =
            deepinfer_operator::controller::gates::licence::LicenceWithdrawal::Stop;
    })
    .await;
    create(&api, deployment("stop", 2, 8, 1, 0)).await;
    let ready = status_where(&api, "stop", "Ready", is_ready).await;
    let runs = acceptance_jobs(&client, &ns.name, "stop").await;
    patch(&api, "stop", support::licence_patch(None)).await;
    support::eventually(TIMEOUT, "every worker pod deleted", || async {
        workers(&client, &ns.name, "stop")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let st = status_where(&api, "stop", "the licence gate closed", |s| {
        condition(s, "LicenseAccepted").is_some_and(|c| c.status == "False")
    })
    .await;
    assert!(
        condition(&st, "WorkersReady")
            .is_some_and(|c| c.message.contains("--license-withdrawal=stop")),
        "{:?}",
        condition(&st, "WorkersReady")
    );
    assert_eq!(st.judgements, ready.judgements, "judgements kept");
    patch(&api, "stop", support::licence_patch(Some("mit"))).await;
    let back = status_where(&api, "stop", "Ready again", |s| {
        is_ready(s) && s.roles[0].ready_groups == 2
    })
    .await;
    assert_eq!(back.judgements, ready.judgements, "nothing judged again");
    assert_eq!(acceptance_jobs(&client, &ns.name, "stop").await, runs);
    op.stop().await;
}

/// The acceptance Jobs of `did` at `revision`.
async fn run_jobs(client: &Client, ns: &str, did: &str, revision: &str) -> Vec<Job> {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "deepinfer.io/deployment={did},deepinfer.io/component=acceptance,deepinfer.io/revision={revision}"
    )))
    .await
    .map(|l| l.items)
    .unwrap_or_default()
}

/// The acceptance Jobs of `did` at `revision` that have not finished (they hold devices).
async fn unfinished_jobs(client: &Client, ns: &str, did: &str, revision: &str) -> Vec<String> {
    run_jobs(client, ns, did, revision)
        .await
        .into_iter()
        .filter(|j| {
            let status = j.status.clone().unwrap_or_default();
            j.metadata.deletion_timestamp.is_none()
                && status.succeeded.unwrap_or(0) == 0
                && !status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Failed" && c.status == "True")
        })
        .map(|j| j.name_any())
        .collect()
}

/// The names of the acceptance Jobs of `did` whose revision is `revision`.
async fn jobs_of_revision(client: &Client, ns: &str, did: &str, revision: &str) -> Vec<String> {
    run_jobs(client, ns, did, revision)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

#[tokio::test]
async fn gpu_a_candidate_superseded_while_its_run_holds_devices_is_ended_and_the_next_goes_ready() {
    // Two groups of 2 × 8 GPUs fill the bed: a run needs a serving group taken out
    // (maxUnavailable 1), and there is room for one run only.
    let (client, ns, api, op) = setup("twocand").await;
    support::wait_for_free_devices(&client, "nvidia.com/gpu").await;
    create(&api, deployment("twocand", 2, 16, 0, 1)).await;
    let ready = status_where(&api, "twocand", "Ready", is_ready).await;
    // Candidate 1: an engine that never finishes, so its run holds its devices until ended.
    let mut hanging = support::shot_planner_acceptance("valid-2-2-2.jsonl", "hang");
    hanging["timeoutSeconds"] = json!(3600);
    patch(
        &api,
        "twocand",
        json!({"metadata": acceptance_change("a hanging candidate")["metadata"],
               "spec": {"runtime": {"commit": commit(1)}, "acceptance": hanging}}),
    )
    .await;
    let first = status_where(&api, "twocand", "candidate 1 is the target", |s| {
        s.revision.is_some() && s.revision != ready.revision
    })
    .await
    .revision
    .expect("candidate 1's revision");
    support::eventually(TIMEOUT, "candidate 1's run is under way", || async {
        let jobs = jobs_of_revision(&client, &ns.name, "twocand", &first).await;
        (!jobs.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Candidate 2: the judged acceptance section again, a new runtime commit.
    let started = std::time::Instant::now();
    patch(
        &api,
        "twocand",
        json!({"spec": {"runtime": {"commit": commit(2)},
                        "acceptance": support::shot_planner_acceptance("valid-2-2-2.jsonl", "replay")}}),
    )
    .await;
    let done = support::current_status_where(
        &api,
        "twocand",
        "candidate 2 Ready",
        Duration::from_secs(240),
        |s| is_ready(s) && s.revision != ready.revision && s.revision.as_deref() != Some(&first),
    )
    .await;
    println!(
        "candidate 2 ({:?}) Ready {:?} after it was applied",
        done.revision,
        started.elapsed()
    );
    assert_eq!(done.roles[0].ready_groups, 2);
    assert_eq!(
        jobs_of_revision(&client, &ns.name, "twocand", &first).await,
        Vec::<String>::new(),
        "no Job of the superseded candidate's run is left"
    );
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_lost_serving_group_is_rebuilt_while_the_candidate_has_failed() {
    let (client, ns, api, op) = setup("repair").await;
    create(&api, deployment("repair", 1, 16, 1, 0)).await;
    let ready = status_where(&api, "repair", "Ready", is_ready).await;
    support::eventually(TIMEOUT, "1 ready endpoint", || async {
        (support::ready_endpoints(&client, &ns.name, "repair-worker").await == 1).then_some(())
    })
    .await;
    let failing = support::shot_planner_acceptance("invalid-2-2-3.jsonl", "replay");
    patch(
        &api,
        "repair",
        json!({"metadata": acceptance_change("a failing candidate")["metadata"],
               "spec": {"runtime": {"commit": commit(1)}, "acceptance": failing}}),
    )
    .await;
    let failed = status_where(&api, "repair", "the candidate recorded Failed", |s| {
        s.revision != ready.revision
            && s.judgements.iter().any(|j| {
                Some(&j.revision) == s.revision.as_ref()
                    && j.result == deepinfer_operator::api::AcceptanceResult::Failed
            })
    })
    .await;
    let ready_before = condition(&failed, "Ready").map(|c| c.status.clone());
    let old = workers(&client, &ns.name, "repair").await;
    let leader = old
        .iter()
        .find(|p| label(p, "deepinfer.io/rank") == "0")
        .expect("the serving group's rank 0")
        .clone();
    let old_uids: BTreeSet<String> = old.iter().filter_map(|p| p.uid()).collect();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let lost_at = std::time::Instant::now();
    pods_api
        .delete(&leader.name_any(), &DeleteParams::default())
        .await
        .expect("losing the serving group's rank 0");
    support::eventually(
        TIMEOUT,
        "the serving group rebuilt at the serving revision, back in the role Service",
        || async {
            let pods = workers(&client, &ns.name, "repair").await;
            let rebuilt = pods.len() == 2
                && pods.iter().all(|p| {
                    pod_ready(p)
                        && Some(label(p, "deepinfer.io/revision")) == ready.revision.as_deref()
                        && !old_uids.contains(&p.uid().unwrap_or_default())
                });
            (rebuilt && support::ready_endpoints(&client, &ns.name, "repair-worker").await == 1)
                .then_some(())
        },
    )
    .await;
    println!(
        "serving group rebuilt {:?} after its rank 0 was lost",
        lost_at.elapsed()
    );
    let st = api
        .get_status("repair")
        .await
        .expect("status")
        .status
        .expect("a status");
    assert_eq!(
        condition(&st, "Ready").map(|c| c.status.clone()),
        ready_before,
        "Ready stays as it was"
    );
    assert!(has_pass(&st, &ready), "the serving revision's pass is kept");
    op.stop().await;
}

#[tokio::test]
async fn gpu_with_license_withdrawal_stop_a_refused_spec_still_frees_every_device() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "stoprefused").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start_with(&ns.name, &["mit"], |s| {
        s.license_withdrawal =
            deepinfer_operator::controller::gates::licence::LicenceWithdrawal::Stop;
    })
    .await;
    create(&api, deployment("stoprefused", 2, 8, 1, 0)).await;
    status_where(&api, "stoprefused", "Ready", is_ready).await;
    // The licence withdrawn in the same edit that makes the spec refused: an engine variable
    // from a Secret that did not opt in.
    patch(
        &api,
        "stoprefused",
        json!({"metadata": {"annotations": support::licence_accepted(None)},
               "spec": {"runtime": {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "not-opted-in", "key": "token"}}}]}}}),
    )
    .await;
    support::eventually(TIMEOUT, "every worker pod deleted", || async {
        workers(&client, &ns.name, "stoprefused")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_run_spec_rewritten_during_the_run_is_not_judged_by() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (client, ns, api, op) = setup("pinned").await;
    let mut d = deployment("pinned", 1, 8, 1, 0);
    // An engine whose outputs break the rules (2/2/3 seconds).
    d["spec"]["acceptance"] = support::shot_planner_acceptance("invalid-2-2-3.jsonl", "replay");
    // The run waits for a node labelled for it, so that the rewrite lands before it reads.
    let hold = format!("deepinfer.io/e2e-hold-{}", ns.name);
    d["spec"]["pod"] = json!({"nodeSelector": {hold.clone(): "yes"}});
    create(&api, d).await;
    // As soon as the run's spec ConfigMap exists, someone who may edit ConfigMaps in the
    // namespace drops its checks: any text would match, and the rules are gone.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let rewritten = support::eventually(TIMEOUT, "the run's spec ConfigMap", || async {
        let list = cms
            .list(
                &ListParams::default()
                    .labels("deepinfer.io/deployment=pinned,deepinfer.io/component=acceptance"),
            )
            .await
            .ok()?;
        let cm = list
            .items
            .into_iter()
            .find(|c| c.name_any().ends_with("-spec"))?;
        let text = cm.data.as_ref()?.get("acceptance.yaml")?.clone();
        let mut spec: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
        for prompt in spec["prompts"].as_sequence_mut()? {
            let prompt = prompt.as_mapping_mut()?;
            prompt.remove("rules");
            prompt.insert(
                "structuredOutput".into(),
                serde_yaml::from_str("{regex: '(?s).*'}").ok()?,
            );
        }
        let relaxed = serde_yaml::to_string(&spec).ok()?;
        cms.patch(
            &cm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"acceptance.yaml": relaxed}})),
        )
        .await
        .ok()?;
        Some(cm.name_any())
    })
    .await;
    // Now the run may be placed.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = nodes
        .list(&ListParams::default().labels("nvidia.com/gpu.present=true"))
        .await
        .expect("nodes")
        .items
        .into_iter()
        .next()
        .expect("an NVIDIA node")
        .name_any();
    let label_node = |value: Option<&str>| {
        let patch = json!({"metadata": {"labels": {hold.clone(): value}}});
        let nodes = nodes.clone();
        let node = node.clone();
        async move {
            nodes
                .patch(&node, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("labelling the node");
        }
    };
    label_node(Some("yes")).await;
    let st = status_where(&api, "pinned", "the run judged", |s| {
        condition(s, "AcceptancePassed").is_some_and(|c| {
            c.reason == "AcceptanceFailed" || c.reason == "AcceptancePassed" || c.status == "True"
        })
    })
    .await;
    let c = condition(&st, "AcceptancePassed").expect("AcceptancePassed");
    println!(
        "{rewritten} rewritten; AcceptancePassed: {} {}: {}",
        c.status, c.reason, c.message
    );
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "AcceptanceFailed"),
        "a run whose spec was rewritten is not judged by the rewritten spec"
    );
    assert!(
        st.judgements.iter().all(|j| !j.passed()),
        "no pass recorded: {:?}",
        st.judgements
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    label_node(None).await;
    assert!(
        workers(&client, &ns.name, "pinned").await.is_empty(),
        "nothing admitted"
    );
    op.stop().await;
}

/// The `deepinfer.io/accepted` condition status of `pod`, if it has one.
fn accepted(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "deepinfer.io/accepted")
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn gpu_a_pass_typed_into_the_status_is_ignored_and_the_revision_judged() {
    let (client, ns, api, op) = setup("forged").await;
    let mut d = deployment("forged", 1, 8, 1, 0);
    d["spec"]["acceptance"] = support::shot_planner_acceptance("invalid-2-2-3.jsonl", "replay");
    create(&api, d).await;
    let failed = status_where(&api, "forged", "the revision recorded Failed", |s| {
        condition(s, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceFailed")
    })
    .await;
    // Someone with deepinferdeployments/status rights turns the failure into a pass.
    let mut forged = serde_json::to_value(&failed).expect("status as JSON");
    for j in forged["judgements"].as_array_mut().expect("judgements") {
        j["result"] = json!("Passed");
        j["passed"] = j["prompts"].clone();
        j["failedPrompts"] = json!([]);
    }
    forged["acceptance"]["result"] = json!("Passed");
    overwrite_status(&client, &ns.name, "forged", forged).await;
    support::poke(&api, "forged", 3).await;
    let st = status_where(&api, "forged", "the revision judged again, Failed", |s| {
        condition(s, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceFailed")
            && !s.judgements.is_empty()
            && s.judgements.iter().all(|j| !j.passed())
    })
    .await;
    println!("after the forged pass: {:?}", st.judgements);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pods = workers(&client, &ns.name, "forged").await;
    assert!(
        pods.iter().all(|p| accepted(p).as_deref() != Some("True")),
        "a forged pass admitted pods: {:?}",
        pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
    );
    assert!(pods.is_empty(), "no serving pod of a revision that failed");
    op.stop().await;
}

#[tokio::test]
async fn gpu_evidence_and_a_worker_pod_made_by_a_namespace_user_record_no_pass() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (client, ns, api, op) = setup("evforge").await;
    create(&api, deployment("evforge", 1, 8, 1, 0)).await;
    let ready = status_where(&api, "evforge", "Ready", is_ready).await;
    let did = api.get("evforge").await.expect("the deployment");
    let owner = json!([{"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment",
                        "name": "evforge", "uid": did.uid().expect("uid"), "controller": true}]);
    let unjudged = "forgedrevisionforgedrevisionforgedrevisionforgedrev";
    // A ConfigMap labelled as the deployment's evidence, holding a pass for a revision that was
    // never judged, and a pod labelled as an owned worker of that revision.
    let judgement = json!({"revision": unjudged, "result": "Passed", "prompts": 2, "passed": 2,
                           "roles": ["worker"], "proof": "00".repeat(32)});
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "evforge-evidence-forged", "ownerReferences": owner,
                     "labels": {"app.kubernetes.io/managed-by": "deepinfer-operator",
                                "deepinfer.io/deployment": "evforge", "deepinfer.io/component": "evidence"},
                     "annotations": {"deepinfer.io/judgement": judgement.to_string()}},
        "data": {"manifest.json": "{}"}
    }))
    .expect("a ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &cm)
        .await
        .expect("creating the forged evidence");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "evforge-worker-forge-0-0", "ownerReferences": owner,
                     "labels": {"app.kubernetes.io/managed-by": "deepinfer-operator",
                                "deepinfer.io/deployment": "evforge", "deepinfer.io/component": "worker",
                                "deepinfer.io/role": "worker", "deepinfer.io/revision": unjudged,
                                "deepinfer.io/group": "0", "deepinfer.io/rank": "0"}},
        "spec": {"containers": [{"name": "engine", "image": IMAGE}],
                 "readinessGates": [{"conditionType": "deepinfer.io/accepted"}]}
    }))
    .expect("a pod");
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods_api
        .create(&PostParams::default(), &pod)
        .await
        .expect("creating the forged worker pod");
    support::poke(&api, "evforge", 5).await;
    let mut admitted = false;
    for _ in 0..20 {
        if let Ok(p) = pods_api.get("evforge-worker-forge-0-0").await {
            admitted |= accepted(&p).as_deref() == Some("True");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let st = api
        .get_status("evforge")
        .await
        .expect("status")
        .status
        .expect("a status");
    assert!(
        st.judgements.iter().all(|j| j.revision != unjudged),
        "a pass of a revision never judged was recorded: {:?}",
        st.judgements
    );
    assert!(!admitted, "the unjudged revision's pod was admitted");
    assert!(has_pass(&st, &ready), "the real pass is kept");
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_change_to_a_configmap_the_engines_read_is_judged_before_it_serves() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (client, ns, api, op) = setup("cmcontent").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "engine-conf", "labels": {"deepinfer.io/engine-readable": "true"}},
        "data": {"level": "info"}
    }))
    .expect("a ConfigMap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("creating the ConfigMap");
    let mut d = deployment("cmcontent", 1, 8, 1, 0);
    d["spec"]["runtime"]["env"] = json!([{"name": "ENGINE_LOG_LEVEL",
        "valueFrom": {"configMapKeyRef": {"name": "engine-conf", "key": "level"}}}]);
    create(&api, d).await;
    let ready = status_where(&api, "cmcontent", "Ready", is_ready).await;
    // The content changes; the spec does not.
    cms.patch(
        "engine-conf",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"level": "debug"}})),
    )
    .await
    .expect("changing the ConfigMap");
    let after = status_where(
        &api,
        "cmcontent",
        "the new content judged and serving",
        |s| {
            is_ready(s)
                && s.revision != ready.revision
                && s.judgements
                    .iter()
                    .any(|j| Some(&j.revision) == s.revision.as_ref() && j.passed())
        },
    )
    .await;
    println!(
        "revision {:?} -> {:?} after the ConfigMap changed",
        ready.revision, after.revision
    );
    let pods = workers(&client, &ns.name, "cmcontent").await;
    assert!(
        pods.iter()
            .all(|p| Some(label(p, "deepinfer.io/revision")) == after.revision.as_deref()),
        "every serving pod reads the judged content"
    );
    op.stop().await;
}
