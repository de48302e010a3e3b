//! Pod settings on the test bed: a deployment with a registry pull secret, a toleration for a
//! site taint, a priority class and a node selector goes Ready on the one node carrying that
//! taint (`nvidia-tainted-0`, which no other test's pods tolerate), its acceptance pod placed
//! there with the same settings, and `kubectl get did` shows the on-call columns.

use std::time::Duration;

use deepinfer_e2e::support::{self, Operator};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
/// The bed's tainted node (`e2e/bed/topology.yaml`).
const TAINTED_NODE: &str = "nvidia-tainted-0";

/// A cluster-scoped PriorityClass, deleted when dropped.
struct Priority {
    name: String,
}

impl Priority {
    async fn create(client: &Client, name: &str, value: i32) -> Self {
        let api: Api<PriorityClass> = Api::all(client.clone());
        let class: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": name},
            "value": value,
            "description": "pod-settings test"
        }))
        .expect("priority class");
        api.create(&PostParams::default(), &class)
            .await
            .expect("creating the PriorityClass");
        Self {
            name: name.to_string(),
        }
    }
}

impl Drop for Priority {
    fn drop(&mut self) {
        // Synchronous, so it also runs when the test panics.
        let _ = support::kubectl(&[
            "delete",
            "priorityclass",
            &self.name,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

async fn pods(client: &Client, ns: &str, component: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "deepinfer.io/deployment=tainted,deepinfer.io/component={component}"
    )))
    .await
    .expect("pods")
    .items
}

/// The settings under test, as the pod carries them: (node, pull secrets, priority class,
/// priority, whether it tolerates the site taint).
fn placement(pod: &Pod) -> (String, Vec<String>, String, i32, bool) {
    let spec = pod.spec.clone().unwrap_or_default();
    (
        spec.node_name.unwrap_or_default(),
        spec.image_pull_secrets
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.name)
            .collect(),
        spec.priority_class_name.unwrap_or_default(),
        spec.priority.unwrap_or_default(),
        spec.tolerations
            .unwrap_or_default()
            .iter()
            .any(|t| t.key.as_deref() == Some("deepinfer.io/test-dedicated")),
    )
}

#[tokio::test]
async fn gpu_pull_secret_toleration_and_priority_class_place_a_deployment_on_a_tainted_node() {
    let (client, ns, api) = support::namespace_with_checkpoint("pod-settings").await;
    let priority = Priority::create(&client, &format!("{}-high", ns.name), 100_000).await;
    support::kubectl_ok(&[
        "-n",
        &ns.name,
        "create",
        "secret",
        "docker-registry",
        "registry-creds",
        "--docker-server=registry.example.com",
        "--docker-username=robot",
        "--docker-password=not-a-real-password",
    ]);
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut did = support::licensed_deployment(
        "tainted",
        json!({"type": "NVIDIA", "devicesPerPod": 4}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 4}}]),
    );
    did["spec"]["pod"] = json!({
        "imagePullSecrets": [{"name": "registry-creds"}],
        "tolerations": [{"key": "deepinfer.io/test-dedicated", "operator": "Equal",
                         "value": "tainted", "effect": "NoSchedule"}],
        "nodeSelector": {"sim.deepinfer.io/pool": "tainted"},
        "priorityClassName": priority.name,
    });
    support::create_deployment(&api, did).await;

    let status = support::status_where(&api, "tainted", "Ready=True", TIMEOUT, |s| {
        support::condition(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let revision = status.revision.clone().expect("revision");
    assert_eq!(status.groups.as_deref(), Some("1/1"));
    assert_eq!(
        status.serving_revision.as_deref(),
        revision.get(..5),
        "the serving revision in short, as in pod names"
    );

    let want = (
        TAINTED_NODE.to_string(),
        vec!["registry-creds".to_string()],
        priority.name.clone(),
        100_000,
        true,
    );
    let workers = pods(&client, &ns.name, "worker").await;
    assert_eq!(workers.len(), 1, "one pod of one 4-GPU group");
    assert_eq!(placement(&workers[0]), want, "the serving pod");
    let judged = pods(&client, &ns.name, "acceptance").await;
    assert!(!judged.is_empty(), "the acceptance pod is kept");
    for pod in &judged {
        assert_eq!(
            placement(pod),
            want,
            "acceptance pod {} is placed as its role serves",
            pod.name_any()
        );
    }

    // On-call's view: Ready, Available, phase, groups, serving revision and reason; model and
    // accelerator with -o wide only.
    let table = support::kubectl_ok(&["-n", &ns.name, "get", "did", "tainted"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "AVAILABLE",
            "PHASE",
            "GROUPS",
            "REVISION",
            "REASON",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        row.get(..7).map(<[&str]>::to_vec),
        Some(vec![
            "tainted",
            "True",
            "True",
            "Ready",
            "1/1",
            &revision[..5],
            "Ready"
        ]),
        "{table}"
    );
    let wide = support::kubectl_ok(&["-n", &ns.name, "get", "did", "tainted", "-o", "wide"]);
    assert!(
        wide.lines()
            .next()
            .is_some_and(|h| h.contains("MODEL") && h.contains("ACCELERATOR")),
        "{wide}"
    );
    op.stop().await;
    drop(priority);
}
