//! Day-2 serving on the test bed: revision changes roll group by group without an outage, trust
//! withdrawn takes pods out of service at once, and the serving revision stays managed while
//! another is judged. Each rollout test samples the ready groups every 500 ms, prints the
//! minimum, and asserts it. The bed has four 8-GPU NVIDIA nodes; tests named `gpu_*` run one at
//! a time (see `.config/nextest.toml`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use deepinfer_operator::controller::apply::pod_ready;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const IMAGE2: &str = "registry.example.com/deepinfer@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
const TIMEOUT: Duration = Duration::from_secs(120);

/// An NVIDIA deployment of `replicas` groups of `tensor` GPUs (8 per pod) with a rollout policy.
fn deployment(name: &str, replicas: i32, tensor: i32, surge: i32, unavailable: i32) -> Value {
    json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": name, "annotations": {"deepinfer.io/license-accepted": "mit"}},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": IMAGE, "commit": "0123456789abcdef0123456789abcdef01234567"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": replicas, "parallel": {"tensor": tensor},
                       "rollout": {"maxSurge": surge, "maxUnavailable": unavailable}}],
            "acceptance": support::shot_planner_acceptance("valid-2-2-2.jsonl", "replay")
        }
    })
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

/// Samples the ready groups (all ranks Ready) every 500 ms until stopped; keeps the minimum and
/// the most groups that existed at once.
struct Sampler {
    stop: Arc<AtomicBool>,
    min_ready: Arc<AtomicUsize>,
    max_groups: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(client: &Client, ns: &str, did: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let min_ready = Arc::new(AtomicUsize::new(usize::MAX));
        let max_groups = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (client, ns, did) = (client.clone(), ns.to_string(), did.to_string());
            let (stop, min_ready, max_groups) =
                (stop.clone(), min_ready.clone(), max_groups.clone());
            async move {
                while !stop.load(Ordering::Relaxed) {
                    let g = groups(&workers(&client, &ns, &did).await);
                    min_ready.fetch_min(g.values().filter(|r| **r).count(), Ordering::Relaxed);
                    max_groups.fetch_max(g.len(), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        });
        Self {
            stop,
            min_ready,
            max_groups,
            task,
        }
    }

    /// Stops sampling; returns (minimum ready groups, most groups at once).
    async fn finish(self, what: &str) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let min = self.min_ready.load(Ordering::Relaxed);
        let max = self.max_groups.load(Ordering::Relaxed);
        println!("{what}: minimum ready groups {min}, most groups at once {max}");
        (min, max)
    }
}

/// Ready endpoints of a Service (from its EndpointSlices).
async fn ready_endpoints(client: &Client, ns: &str, service: &str) -> usize {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
        .count()
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
    let (min, max) = sampler.finish(name).await;
    (min, max, after)
}

#[tokio::test]
async fn gpu_a_revision_change_with_surge_keeps_every_group_serving() {
    let (client, ns, api, op) = setup("surge").await;
    create(&api, deployment("surge", 2, 8, 1, 0)).await;
    let (min, max, after) = roll_to_new_image(&client, &ns.name, &api, "surge").await;
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
        (ready_endpoints(&client, &ns.name, "revoke-worker").await == 2).then_some(())
    })
    .await;
    let runs = acceptance_jobs(&client, &ns.name, "revoke").await;

    let revoked_at = std::time::Instant::now();
    patch(
        &api,
        "revoke",
        json!({"metadata": {"annotations": {"deepinfer.io/license-accepted": null}}}),
    )
    .await;
    support::eventually(
        Duration::from_secs(10),
        "no ready endpoint within 10 s",
        || async { (ready_endpoints(&client, &ns.name, "revoke-worker").await == 0).then_some(()) },
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

    patch(
        &api,
        "revoke",
        json!({"metadata": {"annotations": {"deepinfer.io/license-accepted": "mit"}}}),
    )
    .await;
    support::eventually(
        Duration::from_secs(30),
        "2 ready endpoints again",
        || async { (ready_endpoints(&client, &ns.name, "revoke-worker").await == 2).then_some(()) },
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
    // The same revision, judged against outputs that break the expected structure.
    patch(
        &api,
        "rejudge",
        json!({"spec": {"acceptance": support::shot_planner_acceptance("invalid-2-2-3.jsonl", "replay")}}),
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
    support::eventually(Duration::from_secs(10), "no ready endpoint", || async {
        (ready_endpoints(&client, &ns.name, "rejudge-worker").await == 0).then_some(())
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
        json!({"spec": {"runtime": {"image": IMAGE2}, "acceptance": hanging}}),
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
