//! The simulated node agent's contract beyond the basics in `bed.rs`: fault annotations, the
//! runner-injection pattern, and executed containers seeing the pod's volumes, environment and
//! termination-message file. Node faults (not-ready, deletion) disturb every test sharing the
//! bed, so they are not exercised here.

use std::time::Duration;

use deepinfer_e2e::support::{self, TestNamespace};
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
const WORKER_IMAGE: &str = "registry.example.com/deepinfer:1.0";

/// Creates a pod (the test namespace's service account exists already).
async fn create(pods: &Api<Pod>, value: serde_json::Value) {
    let pod: Pod = serde_json::from_value(value).expect("valid pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod: {e}"));
}

fn condition(p: &Pod, type_: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn first_container(p: &Pod) -> Option<ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()
        .cloned()
}

#[tokio::test]
async fn the_fail_annotation_fails_or_crash_loops_a_reported_pod() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-fail").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    for (name, policy) in [("never", "Never"), ("onfailure", "OnFailure")] {
        create(&pods, json!({
            "metadata": {"name": name, "annotations": {"sim.deepinfer.io/fail": "3"}},
            "spec": {"restartPolicy": policy, "containers": [{"name": "w", "image": WORKER_IMAGE}]}
        }))
        .await;
    }
    support::eventually(TIMEOUT, "pod never to fail with exit code 3", || async {
        let p = pods.get("never").await.ok()?;
        let t = first_container(&p)?.state?.terminated?;
        (p.status?.phase.as_deref() == Some("Failed") && t.exit_code == 3).then_some(())
    })
    .await;
    support::eventually(TIMEOUT, "pod onfailure to crash-loop", || async {
        let p = pods.get("onfailure").await.ok()?;
        let s = first_container(&p)?;
        let waiting = s.state?.waiting?.reason?;
        let last = s.last_state?.terminated?.exit_code;
        (waiting == "CrashLoopBackOff" && last == 3 && s.restart_count >= 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_not_ready_annotation_holds_a_running_pod_unready() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-unready").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    create(
        &pods,
        json!({
            "metadata": {"name": "w", "annotations": {"sim.deepinfer.io/not-ready": "true"}},
            "spec": {"containers": [{"name": "w", "image": WORKER_IMAGE}]}
        }),
    )
    .await;
    support::eventually(TIMEOUT, "the pod to run unready", || async {
        let p = pods.get("w").await.ok()?;
        let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
        (running && condition(&p, "Ready")? == "False").then_some(())
    })
    .await;
    let patch = json!({"metadata": {"annotations": {"sim.deepinfer.io/not-ready": null}}});
    pods.patch("w", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("remove annotation");
    support::eventually(TIMEOUT, "the pod to become Ready", || async {
        let p = pods.get("w").await.ok()?;
        (condition(&p, "Ready")? == "True").then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_injected_runner_runs_inside_another_image() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-inject").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    create(
        &pods,
        json!({
            "metadata": {"name": "accept"},
            "spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "runner", "emptyDir": {}}],
                "initContainers": [{
                    "name": "inject", "image": "ghcr.io/example/deepinfer-operator:dev",
                    "command": ["sh", "-c", "cp \"$(command -v deepinfer-operator)\" /runner/"],
                    "volumeMounts": [{"name": "runner", "mountPath": "/runner"}]
                }],
                "containers": [{
                    "name": "engine", "image": WORKER_IMAGE,
                    "command": ["/runner/deepinfer-operator", "--version"],
                    "volumeMounts": [{"name": "runner", "mountPath": "/runner"}]
                }]
            }
        }),
    )
    .await;
    support::eventually(TIMEOUT, "the injected runner to exit 0", || async {
        let p = pods.get("accept").await.ok()?;
        let t = first_container(&p)?.state?.terminated?;
        (p.status?.phase.as_deref() == Some("Succeeded") && t.exit_code == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn executed_containers_see_the_pods_volumes_env_and_termination_file() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-exec").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "settings"}, "data": {"mode": "strict"}
    }))
    .expect("configmap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let script = r#"printf '%s|%s|%s|%s' "$(cat /etc/settings/sub/mode)" "$GREETING" "$MY_NS" \
        "$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)" > /tmp/msg; \
        cat /tmp/msg > /dev/termination-log; exit 4"#;
    create(&pods, json!({
        "metadata": {"name": "probe"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "mode", "path": "sub/mode"}]}}],
            "containers": [{
                "name": "c", "image": "deepinfer-operator:dev",
                "command": ["sh", "-c", script],
                "env": [
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                    {"name": "GREETING", "value": "hello-$(MODE)"},
                    {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
                ],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/settings", "readOnly": true}]
            }]
        }
    }))
    .await;
    let (code, message, phase) = support::eventually(TIMEOUT, "the probe to terminate", || async {
        let p = pods.get("probe").await.ok()?;
        let t = first_container(&p)?.state?.terminated?;
        Some((t.exit_code, t.message.unwrap_or_default(), p.status?.phase?))
    })
    .await;
    assert_eq!(code, 4);
    assert_eq!(phase, "Failed");
    let ns_name = ns.name.as_str();
    assert_eq!(message, format!("strict|hello-strict|{ns_name}|{ns_name}"));
}
