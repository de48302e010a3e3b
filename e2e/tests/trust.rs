//! Hostile and broken input on the test bed (issue 11): children the API server refuses, objects
//! of namespace users that copy the operator's labels, Jobs that cannot start, and edits the
//! operator must notice. Each test has its own namespace and its own in-process operator.

use std::time::Duration;

use deepinfer_e2e::monitor::{Limits, Monitor};
use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::{json, Value};

const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TIMEOUT: Duration = Duration::from_secs(90);

/// One group of one 8-GPU pod over the fixture checkpoint on claim `ckpt`, judged by the shot
/// planner replaying valid outputs.
fn planner(name: &str) -> Value {
    json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": name, "annotations": {"deepinfer.io/license-accepted": "mit"}},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": IMAGE, "commit": "0123456789abcdef0123456789abcdef01234567"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}],
            "acceptance": support::shot_planner_acceptance("valid-2-2-2.jsonl", "replay")
        }
    })
}

async fn setup(prefix: &str) -> (Client, TestNamespace, Api<DeepInferDeployment>) {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, prefix).await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api = Api::namespaced(client.clone(), &ns.name);
    (client, ns, api)
}

async fn create(api: &Api<DeepInferDeployment>, obj: Value) {
    let did: DeepInferDeployment = serde_json::from_value(obj).expect("valid object");
    api.create(&PostParams::default(), &did)
        .await
        .expect("create");
}

fn cond<'a>(
    s: &'a DeepInferDeploymentStatus,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == t)
}

async fn status_where(
    api: &Api<DeepInferDeployment>,
    name: &str,
    what: &str,
    pred: impl Fn(&DeepInferDeploymentStatus) -> bool,
) -> DeepInferDeploymentStatus {
    support::eventually(TIMEOUT, what, || async {
        api.get(name).await.ok()?.status.filter(|s| pred(s))
    })
    .await
}

/// Item 3: a spec that passes validation but yields a child the API server refuses (CPU requests
/// above their limit, checked by the server's pod-template validation) stalls that resource
/// alone, with the server's message and field, and is not retried; its neighbour goes Ready.
#[tokio::test]
async fn gpu_a_child_the_api_server_refuses_stalls_its_resource_alone_without_retrying() {
    let (client, ns, api) = setup("rejected").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut bad = planner("bad");
    bad["spec"]["runtime"]["resources"] = json!({"requests": {"cpu": "8"}, "limits": {"cpu": "4"}});
    create(&api, bad).await;
    create(&api, planner("good")).await;
    let st = status_where(&api, "bad", "Stalled=True", |s| {
        cond(s, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let stalled = cond(&st, "Stalled").expect("Stalled");
    assert_eq!(stalled.reason, "ChildRejected", "{stalled:?}");
    assert!(
        stalled.message.contains("resources.requests")
            && stalled.message.contains("less than or equal to cpu limit"),
        "carries the server's field and message: {}",
        stalled.message
    );
    let ready = cond(&st, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ChildRejected")
    );
    status_where(&api, "good", "the neighbour Ready", |s| {
        cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    // Both settled: a refused child is not written again every 10 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = op.writes.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(25)).await;
    let after = op.writes.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        after, before,
        "no write in 25 s once the refused resource stalled and its neighbour converged"
    );
    let again = api.get("bad").await.expect("bad").status.expect("status");
    assert_eq!(
        cond(&again, "Stalled").map(|c| c.reason.as_str()),
        Some("ChildRejected")
    );
    op.stop().await;
    monitor.assert_clean().await;
}
