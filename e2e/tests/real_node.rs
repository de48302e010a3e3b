//! Pods on the bed's real node (`e2e/bed/real-node.sh up`, which `make test` runs: a kubelet of
//! the bed's Kubernetes release with containerd and runc), where what the node agent simulates is
//! done by a real kubelet: an init container copies a program into an emptyDir and the main
//! container runs it, an `httpGet` readiness probe is sent to the pod's IP, a readiness gate holds
//! the pod back until its condition is True, a changed ConfigMap reaches the running container's
//! volume, a container's termination message (its file, or its log with
//! `FallbackToLogsOnError`) reaches the pod status, and the projected ServiceAccount token the
//! kubelet mounts is one the API server accepts for the pod.
//!
//! On a host that cannot run a kubelet (`real-node.sh up` printed why and recorded it in
//! `<bed>/real-node.unavailable`), every test reports itself ignored with that reason
//! (`e2e/src/harness.rs`); on a bed where `real-node.sh up` has not run, they fail saying so.
//! Run alone: `TESTBED_DIR=<bed> e2e/bed/real-node.sh up`, then
//! `DEEPINFER_TESTBED=<bed> cargo test -p deepinfer-e2e --test real_node`.

use std::time::Duration;

use std::process::ExitCode;

use deepinfer_e2e::harness;
use deepinfer_e2e::support::{self, TestNamespace};
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStateTerminated, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const GATE: &str = "deepinfer.io/serving-gate";
const TIMEOUT: Duration = Duration::from_secs(120);
/// The real node's image (`real-node.sh` imports it; nothing is pulled).
const IMAGE: &str = "deepinfer.local/busybox:1";

fn main() -> ExitCode {
    let tests = deepinfer_e2e::trials![
        real_kubelet_runs_init_containers_probes_and_honours_readiness_gates,
        real_kubelet_reports_termination_messages_from_the_file_and_the_log,
        real_kubelet_mounts_a_service_account_token_the_api_server_accepts_for_the_pod,
    ];
    let unavailable = std::fs::read_to_string(support::bed_dir().join("real-node.unavailable"))
        .ok()
        .map(|why| {
            format!(
                "the bed's real node cannot run on this host: {}",
                why.trim()
            )
        });
    harness::main(&tests, unavailable)
}

/// The name of the bed's real node; panics saying how to start it when `real-node.sh up` has not
/// run on this bed.
fn real_node() -> String {
    let file = support::bed_dir().join("real-node/node-name");
    let name = std::fs::read_to_string(file).unwrap_or_else(|_| {
        panic!(
            "the bed has no real node; start one with `TESTBED_DIR=<bed> e2e/bed/real-node.sh up` \
             (root; it installs Debian's containerd and runc) or run `make test`"
        )
    });
    name.trim().to_string()
}

/// A client, a namespace of the test and the real node's name.
async fn on_real_node(prefix: &str) -> (Client, TestNamespace, String) {
    let node = real_node();
    let client = support::client().await;
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns, node)
}

/// Creates the pod `spec` (its name and spec) bound for the real node, tolerating its taint.
async fn create_pod(pods: &Api<Pod>, node: &str, mut spec: Value) {
    spec["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    spec["spec"]["tolerations"] =
        json!([{"key": "deepinfer.io/real-node", "operator": "Exists", "effect": "NoSchedule"}]);
    let pod: Pod = serde_json::from_value(spec).expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// A pod whose init container copies busybox into an emptyDir and whose container serves the
/// ConfigMap `site` with it, probed on `/health` and held back by a readiness gate.
fn probed_pod() -> Value {
    json!({
        "metadata": {"name": "probed"},
        "spec": {
            "automountServiceAccountToken": false,
            "readinessGates": [{"conditionType": GATE}],
            "volumes": [{"name": "runner", "emptyDir": {}},
                        {"name": "site", "configMap": {"name": "site"}}],
            "initContainers": [{
                "name": "copy-runner", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "cp /bin/busybox /runner/busybox"],
                "volumeMounts": [{"name": "runner", "mountPath": "/runner"}]
            }],
            "containers": [{
                "name": "serve", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["/runner/busybox", "httpd", "-f", "-p", "8080", "-h", "/site"],
                "volumeMounts": [{"name": "runner", "mountPath": "/runner"},
                                 {"name": "site", "mountPath": "/site"}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 8080},
                                   "periodSeconds": 1, "failureThreshold": 1}
            }]
        }
    })
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

async fn real_kubelet_runs_init_containers_probes_and_honours_readiness_gates() {
    let (client, ns, node) = on_real_node("real-node").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let site = json!({"metadata": {"name": "site"}, "data": {"health": "ok\n"}});
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(site).expect("ConfigMap"),
    )
    .await
    .expect("create ConfigMap site");
    create_pod(&pods, &node, probed_pod()).await;

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

/// The terminated states of the pod's containers by name, once all of them have terminated.
async fn terminated(pods: &Api<Pod>, name: &str) -> Vec<(String, ContainerStateTerminated)> {
    support::eventually(
        TIMEOUT,
        &format!("every container of {name} terminated"),
        || async {
            let statuses = pods.get(name).await.ok()?.status?.container_statuses?;
            statuses
                .into_iter()
                .map(|c| Some((c.name, c.state?.terminated?)))
                .collect()
        },
    )
    .await
}

async fn real_kubelet_reports_termination_messages_from_the_file_and_the_log() {
    let (client, ns, node) = on_real_node("real-node-exit").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let pod = json!({
        "metadata": {"name": "finishing"},
        "spec": {
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "containers": [
                {"name": "file", "image": IMAGE, "imagePullPolicy": "Never",
                 "command": ["/bin/sh", "-c",
                             "echo starting; printf 'judged 12 prompts' > /dev/termination-log; exit 4"]},
                {"name": "log", "image": IMAGE, "imagePullPolicy": "Never",
                 "terminationMessagePolicy": "FallbackToLogsOnError",
                 "command": ["/bin/sh", "-c", "echo loading; echo 'cannot open model.gguf'; exit 1"]}
            ]
        }
    });
    create_pod(&pods, &node, pod).await;

    // The message of the file, not the log; with FallbackToLogsOnError and an empty file, the
    // log's tail.
    let states = terminated(&pods, "finishing").await;
    let of = |name: &str| {
        let (_, t) = states.iter().find(|(n, _)| n == name).expect("container");
        (t.exit_code, t.message.clone().unwrap_or_default())
    };
    assert_eq!(of("file"), (4, "judged 12 prompts".to_string()));
    assert_eq!(
        of("log"),
        (1, "loading\ncannot open model.gguf\n".to_string())
    );
}

async fn real_kubelet_mounts_a_service_account_token_the_api_server_accepts_for_the_pod() {
    let (client, ns, node) = on_real_node("real-node-token").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // The default ServiceAccount's token, which the admission plugin adds as a projected volume
    // and the kubelet requests from the TokenRequest API and mounts; the container hands it out
    // as its termination message.
    let pod = json!({
        "metadata": {"name": "token-reader"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "read", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "cd /var/run/secrets/kubernetes.io/serviceaccount && \
                    [ \"$(cat namespace)\" = \"$NS\" ] && [ -s ca.crt ] && cat token > /dev/termination-log"],
                "env": [{"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
            }]
        }
    });
    create_pod(&pods, &node, pod).await;
    let states = terminated(&pods, "token-reader").await;
    let (_, read) = &states[0];
    assert_eq!(read.exit_code, 0, "the token volume's files: {read:?}");
    let token = read.message.clone().unwrap_or_default();

    // The API server accepts it as the pod's ServiceAccount, bound to this pod.
    let review: TokenReview =
        serde_json::from_value(json!({"spec": {"token": token}})).expect("TokenReview");
    let review = Api::<TokenReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .expect("TokenReview");
    let status = review.status.expect("TokenReview status");
    assert_eq!(status.authenticated, Some(true), "{:?}", status.error);
    let user = status.user.expect("the token's user");
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{}:default", ns.name).as_str())
    );
    let pod_name = user
        .extra
        .unwrap_or_default()
        .remove("authentication.kubernetes.io/pod-name");
    assert_eq!(pod_name, Some(vec!["token-reader".to_string()]));
}
