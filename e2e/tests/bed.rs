//! The test bed itself: real Job controller, scheduler and RBAC, with the simulated node agent
//! running this project's binary for pods that use it.

use std::time::Duration;

use deepinfer_e2e::support::{self, TestNamespace};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
const WORKER_IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).expect("valid pod")
}

async fn terminated_message(pods: &Api<Pod>, name: &str) -> (i32, String) {
    support::eventually(TIMEOUT, &format!("pod {name} to terminate"), || async {
        let p = pods.get(name).await.ok()?;
        let t = p
            .status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .terminated?;
        Some((t.exit_code, t.message.unwrap_or_default()))
    })
    .await
}

#[tokio::test]
async fn a_job_of_the_operator_image_completes_through_the_real_job_controller() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "bed-job").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "version"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "deepinfer-operator:dev", "command": ["deepinfer-operator", "--version"]}]
        }}}
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    support::eventually(TIMEOUT, "the Job to succeed", || async {
        let j = jobs.get("version").await.ok()?;
        (j.status?.succeeded? == 1).then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let list = pods
        .list(&ListParams::default().labels("job-name=version"))
        .await
        .expect("pods");
    let p = &list.items[0];
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    assert!(
        p.spec.as_ref().and_then(|s| s.node_name.clone()).is_some(),
        "placed by the real scheduler"
    );
}

#[tokio::test]
async fn the_scheduler_refuses_a_pod_larger_than_any_node() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "bed-capacity").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let p = pod(json!({
        "metadata": {"name": "too-big"},
        "spec": {"containers": [{"name": "engine", "image": WORKER_IMAGE,
            "resources": {"requests": {"nvidia.com/gpu": "9"}, "limits": {"nvidia.com/gpu": "9"}}}]}
    }));
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    let reason = support::eventually(TIMEOUT, "PodScheduled=False", || async {
        let p = pods.get("too-big").await.ok()?;
        let c = p
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        Some((c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
    })
    .await;
    assert_eq!(reason.0, "Unschedulable");
    assert!(
        reason.1.contains("nvidia.com/gpu"),
        "names the resource: {}",
        reason.1
    );
}

#[tokio::test]
async fn gpu_required_affinity_keeps_a_group_inside_one_nvlink_clique() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "bed-affinity").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..2 {
        let p = pod(json!({
            "metadata": {"name": format!("rank-{i}"), "labels": {"group": "g0"}},
            "spec": {
                "containers": [{"name": "engine", "image": WORKER_IMAGE,
                    "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}],
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"group": "g0"}},
                    "topologyKey": "nvidia.com/gpu.clique"}]}}
            }
        }));
        pods.create(&PostParams::default(), &p)
            .await
            .expect("create");
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let cliques = support::eventually(TIMEOUT, "both ranks scheduled", || async {
        let mut out = Vec::new();
        for i in 0..2 {
            let node = pods.get(&format!("rank-{i}")).await.ok()?.spec?.node_name?;
            out.push((
                node.clone(),
                nodes
                    .get(&node)
                    .await
                    .ok()?
                    .labels()
                    .get("nvidia.com/gpu.clique")?
                    .clone(),
            ));
        }
        Some(out)
    })
    .await;
    assert_ne!(
        cliques[0].0, cliques[1].0,
        "8 GPUs each: two different nodes"
    );
    assert_eq!(cliques[0].1, cliques[1].1, "one clique: {cliques:?}");
}

#[tokio::test]
async fn a_readiness_gate_holds_a_running_pod_unready_until_its_condition_is_true() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "bed-gate").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let p = pod(json!({
        "metadata": {"name": "gated"},
        "spec": {"readinessGates": [{"conditionType": "deepinfer.io/accepted"}],
                 "containers": [{"name": "engine", "image": WORKER_IMAGE}]}
    }));
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    support::eventually(TIMEOUT, "running with containers ready", || async {
        let p = pods.get("gated").await.ok()?;
        let s = p.status.clone()?;
        let containers_ready = s
            .conditions?
            .iter()
            .any(|c| c.type_ == "ContainersReady" && c.status == "True");
        (s.phase.as_deref() == Some("Running") && containers_ready).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        ready(&pods.get("gated").await.expect("pod")).as_deref(),
        Some("False"),
        "the gate holds readiness"
    );
    let patch =
        json!({"status": {"conditions": [{"type": "deepinfer.io/accepted", "status": "True"}]}});
    pods.patch_status("gated", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("set the gate");
    support::eventually(TIMEOUT, "Ready=True once the gate is True", || async {
        (ready(&pods.get("gated").await.ok()?).as_deref() == Some("True")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn rbac_is_real_a_process_under_a_service_account_without_rights_is_denied() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "bed-rbac").await;
    let (ok, out) =
        support::kubectl_stdin(&["-n", &ns.name, "create", "serviceaccount", "nobody"], "");
    assert!(ok, "{out}");
    support::wait_for_service_account(&client, &ns.name, "nobody").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let p = pod(json!({
        "metadata": {"name": "denied"},
        "spec": {"serviceAccountName": "nobody", "restartPolicy": "Never",
                 "containers": [{"name": "operator", "image": "deepinfer-operator:dev",
                     "command": ["deepinfer-operator", "run", "--namespace", ns.name],
                     "terminationMessagePolicy": "FallbackToLogsOnError"}]}
    }));
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    let (code, message) = terminated_message(&pods, "denied").await;
    assert_ne!(code, 0, "the operator cannot start without rights");
    assert!(
        message.to_lowercase().contains("forbidden"),
        "the API server denied the pod's own identity: {message}"
    );
    assert!(
        message.contains(&format!("system:serviceaccount:{}:nobody", ns.name)),
        "acting as the pod's service account: {message}"
    );
}

fn processes_with(marker: &str) -> usize {
    let out = std::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test]
async fn a_deleted_pods_process_is_gone_within_seconds() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "bed-kill").await;
    // A hub that accepts connections and never answers keeps the fetch process alive.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let marker = format!("/tmp/deepinfer-kill-test-{}", ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let p = pod(json!({
        "metadata": {"name": "long"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "fetch", "image": "deepinfer-operator:dev",
            "command": ["deepinfer-operator", "fetch-checkpoint", "--repo", "a/b",
                        "--revision", "0123456789abcdef0123456789abcdef01234567",
                        "--dest", marker, "--endpoint", format!("http://127.0.0.1:{port}")]}]}
    }));
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    support::eventually(TIMEOUT, "the pod's process to run", || async {
        (processes_with(&marker) > 0).then_some(())
    })
    .await;
    pods.delete("long", &DeleteParams::default())
        .await
        .expect("delete");
    support::eventually(
        Duration::from_secs(10),
        "the process to be gone",
        || async { (processes_with(&marker) == 0).then_some(()) },
    )
    .await;
}
