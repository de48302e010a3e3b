//! A pod on the bed's real node (`e2e/bed/real-node.sh up`: a kubelet of the bed's Kubernetes
//! release with containerd and runc), where what the node agent simulates is done by a real
//! kubelet: an init container copies a program into an emptyDir and the main container runs it,
//! an `httpGet` readiness probe is sent to the pod's IP, a readiness gate holds the pod back
//! until its condition is True, and a changed ConfigMap reaches the running container's volume.
//!
//! Ignored by a plain `cargo test` (and so by `make test`): the real node is an option of the bed
//! that needs root and Debian's containerd and runc. Run it with
//! `TESTBED_DIR=<bed> e2e/bed/real-node.sh up` and then
//! `DEEPINFER_TESTBED=<bed> cargo test -p deepinfer-e2e --test real_node -- --ignored`; on a bed
//! without a real node it fails saying so.

use std::time::Duration;

use deepinfer_e2e::support::{self, TestNamespace};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const GATE: &str = "deepinfer.io/serving-gate";
const TIMEOUT: Duration = Duration::from_secs(120);

/// The name of the bed's real node, or `None` when `real-node.sh up` has not run on this bed.
fn real_node() -> Option<String> {
    let file = support::bed_dir().join("real-node/node-name");
    Some(std::fs::read_to_string(file).ok()?.trim().to_string())
}

fn pod_spec(node: &str) -> Pod {
    let image = "deepinfer.local/busybox:1";
    serde_json::from_value(json!({
        "metadata": {"name": "probed"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "deepinfer.io/real-node", "operator": "Exists", "effect": "NoSchedule"}],
            "automountServiceAccountToken": false,
            "readinessGates": [{"conditionType": GATE}],
            "volumes": [{"name": "runner", "emptyDir": {}},
                        {"name": "site", "configMap": {"name": "site"}}],
            "initContainers": [{
                "name": "copy-runner", "image": image, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "cp /bin/busybox /runner/busybox"],
                "volumeMounts": [{"name": "runner", "mountPath": "/runner"}]
            }],
            "containers": [{
                "name": "serve", "image": image, "imagePullPolicy": "Never",
                "command": ["/runner/busybox", "httpd", "-f", "-p", "8080", "-h", "/site"],
                "volumeMounts": [{"name": "runner", "mountPath": "/runner"},
                                 {"name": "site", "mountPath": "/site"}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 8080},
                                   "periodSeconds": 1, "failureThreshold": 1}
            }]
        }
    }))
    .expect("pod")
}

/// (the serving container is ready, the pod's Ready condition is True, its reason).
fn readiness(p: &Pod) -> (bool, bool, String) {
    let status = p.status.clone().unwrap_or_default();
    let container = status
        .container_statuses
        .unwrap_or_default()
        .first()
        .is_some_and(|c| c.ready);
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    (
        container,
        ready.as_ref().is_some_and(|c| c.status == "True"),
        ready.and_then(|c| c.reason).unwrap_or_default(),
    )
}

async fn wait_readiness(pods: &Api<Pod>, want: (bool, bool), what: &str) -> Pod {
    support::eventually(TIMEOUT, what, || async {
        let p = pods.get("probed").await.ok()?;
        let (c, r, _) = readiness(&p);
        ((c, r) == want).then_some(p)
    })
    .await
}

async fn set_health(cms: &Api<ConfigMap>, body: Option<&str>) {
    let data = json!({"data": {"health": body}});
    cms.patch("site", &PatchParams::default(), &Patch::Merge(&data))
        .await
        .expect("patch ConfigMap site");
}

#[tokio::test]
#[ignore = "needs the bed's real node: TESTBED_DIR=<bed> e2e/bed/real-node.sh up, then --ignored"]
async fn real_kubelet_runs_init_containers_probes_and_honours_readiness_gates() {
    let node = real_node().expect(
        "the bed has no real node; start one with `TESTBED_DIR=<bed> e2e/bed/real-node.sh up` \
         (root, Debian packages containerd and runc)",
    );
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "real-node").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let site = json!({"metadata": {"name": "site"}, "data": {"health": "ok\n"}});
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(site).expect("ConfigMap"),
    )
    .await
    .expect("create ConfigMap site");
    pods.create(&PostParams::default(), &pod_spec(&node))
        .await
        .expect("create pod");

    // The kubelet ran the init container to completion, started the program it copied and
    // probed it over the pod network: the container is ready, the pod is not, for its gate.
    let p = wait_readiness(&pods, (true, false), "the serving container ready").await;
    let status = p.status.clone().unwrap_or_default();
    assert_eq!(
        p.spec.as_ref().and_then(|s| s.node_name.clone()),
        Some(node)
    );
    let init = status.init_container_statuses.unwrap_or_default();
    let done = init
        .first()
        .and_then(|c| c.state.as_ref()?.terminated.as_ref());
    assert_eq!(
        done.map(|t| t.exit_code),
        Some(0),
        "init container: {init:?}"
    );
    assert_eq!(readiness(&p).2, "ReadinessGatesNotReady");
    let ip = status.pod_ip.unwrap_or_default();
    assert!(
        ip.starts_with("10.237."),
        "pod IP {ip} from the node's CNI bridge"
    );

    // The gate's condition True: Ready.
    let gate = json!({"status": {"conditions": [{"type": GATE, "status": "True"}]}});
    pods.patch_status("probed", &PatchParams::default(), &Patch::Strategic(&gate))
        .await
        .expect("set the gate condition");
    wait_readiness(&pods, (true, true), "the pod Ready with its gate True").await;

    // The probed file leaves the ConfigMap: the kubelet updates the volume, the probe fails and
    // the pod is unready; the file back, ready again.
    set_health(&cms, None).await;
    wait_readiness(
        &pods,
        (false, false),
        "the pod unready once /health is gone",
    )
    .await;
    set_health(&cms, Some("ok\n")).await;
    let p = wait_readiness(&pods, (true, true), "the pod Ready again").await;
    let restarts = p
        .status
        .and_then(|s| s.container_statuses?.first().map(|c| c.restart_count));
    assert_eq!(restarts, Some(0), "a failed readiness probe never restarts");
}
