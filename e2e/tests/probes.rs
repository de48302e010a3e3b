//! Serving pods' probes on the test bed: the node agent runs the engine's startup and readiness
//! probes as the kubelet does, against the stand-in engine serving `/health`. An engine that
//! stops answering leaves its role Service and comes back when it answers again, without its
//! group being replaced; a slow start inside the startup probe's budget goes Ready, one past it
//! is killed, its pod fails (serving pods never restart in place) and the operator replaces the
//! group whole (docs/runbooks.md, GroupsNotReady); an engine hung past its liveness budget is
//! stopped and its group replaced the same way. Each deployment takes one GPU; tests named
//! `gpu_*` run one at a time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

/// An engine image the node agent executes: the project's own image name, pinned by digest.
const EXECUTED_IMAGE: &str = "registry.example.com/deepinfer-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TIMEOUT: Duration = Duration::from_secs(120);

/// A probe of the engine's `/health` on its serve port every second, as a test spec sets it
/// (the operator's defaults probe every 10 s).
fn health_probe(failure_threshold: i32) -> Value {
    json!({"httpGet": {"path": "/health", "port": "serve"}, "periodSeconds": 1,
           "timeoutSeconds": 1, "failureThreshold": failure_threshold})
}

/// A one-GPU deployment whose serving engine is the stand-in engine with `args`, probed with
/// `startup` and `readiness`.
fn deployment(name: &str, args: &[String], startup: Value, readiness: Value) -> Value {
    let mut did = support::licensed_deployment(
        name,
        json!({"type": "NVIDIA", "devicesPerPod": 1}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 1}}]),
    );
    let runtime = &mut did["spec"]["runtime"];
    runtime["image"] = json!(EXECUTED_IMAGE);
    runtime["command"] = json!([support::fake_engine().display().to_string()]);
    runtime["args"] = json!(args);
    runtime["startupProbe"] = startup;
    runtime["readinessProbe"] = readiness;
    // The acceptance run judges that same command: the template runs `{serving_command}` (the
    // stand-in engine) where it named the program.
    did["spec"]["acceptance"]["engine"]["command"][0] = json!("{serving_command}");
    did
}

async fn setup(prefix: &str) -> (Client, TestNamespace, Api<DeepInferDeployment>, Operator) {
    let (client, ns, api) = support::namespace_with_checkpoint(prefix).await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    (client, ns, api, op)
}

fn condition_is(s: &DeepInferDeploymentStatus, type_: &str, status: &str) -> bool {
    support::condition(s, type_).is_some_and(|c| c.status == status)
}

fn engine(p: &Pod) -> Option<ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()
        .cloned()
}

fn pod_condition(p: &Pod, type_: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// A host path the stand-in engine watches (`--unresponsive-file`): while it exists, the
/// engine stops answering. Removed on drop.
struct Wedge(PathBuf);

impl Wedge {
    fn new(ns: &str) -> Self {
        Wedge(std::env::temp_dir().join(format!("deepinfer-probes-{ns}-unresponsive")))
    }

    fn args(&self) -> Vec<String> {
        vec!["--unresponsive-file".into(), self.0.display().to_string()]
    }

    fn set(&self, wedged: bool) {
        if wedged {
            std::fs::write(&self.0, b"").expect("creating the wedge file");
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Drop for Wedge {
    fn drop(&mut self) {
        self.set(false);
    }
}

#[tokio::test]
async fn gpu_an_engine_that_stops_answering_leaves_the_service_and_comes_back() {
    let (client, ns, api, op) = setup("probe-wedge").await;
    let wedge = Wedge::new(&ns.name);
    let (period, threshold) = (1, 2);
    create(
        &api,
        deployment(
            "wedge",
            &wedge.args(),
            health_probe(30),
            health_probe(threshold),
        ),
    )
    .await;
    support::current_status_where(&api, "wedge", "Ready", TIMEOUT, |s| {
        condition_is(s, "Ready", "True")
    })
    .await;
    support::eventually(TIMEOUT, "one ready endpoint", || async {
        (support::ready_endpoints(&client, &ns.name, "wedge-worker").await == 1).then_some(())
    })
    .await;
    let serving = support::live_workers(&client, &ns.name, "wedge").await;
    assert_eq!(serving.len(), 1);
    let before = engine(&serving[0]).expect("engine status");
    assert!(before.ready && before.started == Some(true));

    wedge.set(true);
    let wedged_at = Instant::now();
    support::eventually(TIMEOUT, "the endpoint to leave the Service", || async {
        (support::ready_endpoints(&client, &ns.name, "wedge-worker").await == 0).then_some(())
    })
    .await;
    println!(
        "the endpoint left {:.1} s after the engine stopped answering (period {period} s × failure threshold {threshold} + timeout 1 s)",
        wedged_at.elapsed().as_secs_f64()
    );
    let pod = support::eventually(TIMEOUT, "the pod unready and still running", || async {
        let p = support::live_workers(&client, &ns.name, "wedge")
            .await
            .pop()?;
        let c = engine(&p)?;
        (!c.ready && c.state?.running.is_some()).then_some(p)
    })
    .await;
    assert_eq!(pod.uid(), serving[0].uid(), "the group is not replaced");
    assert_eq!(pod_condition(&pod, "Ready").as_deref(), Some("False"));
    let c = engine(&pod).expect("engine status");
    assert_eq!(
        (c.restart_count, c.started),
        (0, Some(true)),
        "readiness never restarts"
    );
    let st = support::current_status_where(&api, "wedge", "WorkersReady=False", TIMEOUT, |s| {
        condition_is(s, "WorkersReady", "False")
    })
    .await;
    let workers_ready = support::condition(&st, "WorkersReady").expect("condition");
    assert_eq!(workers_ready.reason, "GroupsNotReady", "{workers_ready:?}");

    wedge.set(false);
    support::eventually(TIMEOUT, "the endpoint back in the Service", || async {
        (support::ready_endpoints(&client, &ns.name, "wedge-worker").await == 1).then_some(())
    })
    .await;
    support::current_status_where(&api, "wedge", "Ready again", TIMEOUT, |s| {
        condition_is(s, "Ready", "True")
    })
    .await;
    let back = support::live_workers(&client, &ns.name, "wedge").await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].uid(), serving[0].uid(), "the same pod serves again");
    assert_eq!(engine(&back[0]).map(|c| c.restart_count), Some(0));
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_slow_start_inside_the_startup_budget_goes_ready_one_past_it_is_replaced() {
    let (client, ns, api, op) = setup("probe-start").await;
    // Budgets of the startup probe: 20 × 1 s for an engine loading 3 s; 3 × 1 s for one
    // loading 10 minutes.
    let load = |seconds: &str| vec!["--load-seconds".to_string(), seconds.to_string()];
    create(
        &api,
        deployment("inside", &load("3"), health_probe(20), health_probe(3)),
    )
    .await;
    create(
        &api,
        deployment("past", &load("600"), health_probe(3), health_probe(3)),
    )
    .await;

    support::current_status_where(&api, "inside", "Ready", TIMEOUT, |s| {
        condition_is(s, "Ready", "True")
    })
    .await;
    let inside = support::live_workers(&client, &ns.name, "inside").await;
    assert_eq!(inside.len(), 1);
    let c = engine(&inside[0]).expect("engine status");
    assert!(c.ready && c.started == Some(true));
    assert_eq!(
        c.restart_count, 0,
        "a start inside the budget is not restarted"
    );

    // Past the budget: the startup probe kills the engine; a serving pod never restarts in
    // place, so it fails, and the operator replaces the group whole (at once: the failed pod
    // may be gone before a look sees it Failed, so the replacement's event says how it ended).
    let first = support::eventually(TIMEOUT, "the first pod", || async {
        support::live_workers(&client, &ns.name, "past").await.pop()
    })
    .await;
    let first_uid = first.uid();
    replaced_whole(&client, &ns.name, "past", &first_uid).await;
    let st = api.get_status("past").await.expect("status");
    let st = st.status.expect("status");
    assert!(
        !condition_is(&st, "Ready", "True"),
        "an engine that never starts never serves"
    );
    op.stop().await;
}

#[tokio::test]
async fn gpu_an_engine_hung_past_its_liveness_budget_is_stopped_and_its_group_replaced() {
    let (client, ns, api, op) = setup("probe-hung").await;
    let wedge = Wedge::new(&ns.name);
    let mut did = deployment("hung", &wedge.args(), health_probe(30), health_probe(2));
    did["spec"]["runtime"]["livenessProbe"] = health_probe(3);
    create(&api, did).await;
    support::current_status_where(&api, "hung", "Ready", TIMEOUT, |s| {
        condition_is(s, "Ready", "True")
    })
    .await;
    let serving = support::live_workers(&client, &ns.name, "hung").await;
    assert_eq!(serving.len(), 1);
    let hung_uid = serving[0].uid();

    // It stops answering for good: past 3 × 1 s the engine is stopped; a serving pod never
    // restarts in place, so it fails and the operator replaces the group whole.
    wedge.set(true);
    replaced_whole(&client, &ns.name, "hung", &hung_uid).await;
    // The new engine answers: the group serves again, on a pod of its own.
    wedge.set(false);
    support::current_status_where(&api, "hung", "Ready again", TIMEOUT, |s| {
        condition_is(s, "Ready", "True")
    })
    .await;
    let back = support::live_workers(&client, &ns.name, "hung").await;
    assert_eq!(back.len(), 1);
    assert_ne!(back[0].uid(), hung_uid, "a new pod serves");
    op.stop().await;
}

/// Waits until a pod other than `old_uid` stands in the group of `did`, and checks that the
/// replacement's `GroupReplaced` event says the old rank ended Failed (a failed pod is deleted at
/// once and may never be seen Failed).
async fn replaced_whole(client: &Client, ns: &str, did: &str, old_uid: &Option<String>) {
    support::eventually(TIMEOUT, "a new pod in the group", || async {
        let pods = support::live_workers(client, ns, did).await;
        pods.iter().any(|p| p.uid() != *old_uid).then_some(())
    })
    .await;
    let events = support::kubectl_ok(&[
        "-n",
        ns,
        "get",
        "events",
        "--field-selector",
        "reason=GroupReplaced",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("is replaced whole") && events.contains("ended Failed"),
        "the replacement says why: {events}"
    );
}

async fn create(api: &Api<DeepInferDeployment>, object: Value) {
    support::create_deployment(api, object).await;
}
