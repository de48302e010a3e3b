//! The simulated node agent's contract beyond the basics in `bed.rs`: fault annotations, the
//! runner-injection pattern, and executed containers seeing the pod's volumes, environment and
//! termination-message file. Node faults (not-ready, deletion) disturb every test sharing the
//! bed, so they are not exercised here.

use std::time::Duration;

use deepinfer_e2e::faults;
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
            "metadata": {"name": name, "annotations": {faults::POD_FAIL: "3"}},
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
            "metadata": {"name": "w", "annotations": {faults::POD_NOT_READY: "true"}},
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
    let patch = json!({"metadata": {"annotations": {faults::POD_NOT_READY: null}}});
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

/// Runs `sleep 30` in an executed container under `annotations`; returns (reason, exit code)
/// of its termination and how long after its creation the container started running.
async fn faulted_sleep(prefix: &str, annotations: serde_json::Value) -> (String, i32, f64) {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, prefix).await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let created = std::time::Instant::now();
    create(
        &pods,
        json!({
            "metadata": {"name": "f", "annotations": annotations},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "deepinfer-operator:dev", "command": ["sh", "-c", "sleep 30"]}]
            }
        }),
    )
    .await;
    let started = support::eventually(TIMEOUT, "the container to run", || async {
        let p = pods.get("f").await.ok()?;
        first_container(&p)?.state?.running?;
        Some(created.elapsed().as_secs_f64())
    })
    .await;
    let (reason, code) = support::eventually(TIMEOUT, "the container to end", || async {
        let p = pods.get("f").await.ok()?;
        let t = first_container(&p)?.state?.terminated?;
        Some((t.reason.unwrap_or_default(), t.exit_code))
    })
    .await;
    (reason, code, started)
}

#[tokio::test]
async fn an_executed_container_is_killed_or_oom_killed_on_request() {
    let (reason, code, _) =
        faulted_sleep("agent-kill", json!({faults::POD_KILL_AFTER_SECONDS: "1"})).await;
    assert_eq!((reason.as_str(), code), ("Error", 137));
    let (reason, code, _) =
        faulted_sleep("agent-oom", json!({faults::POD_OOM_AFTER_SECONDS: "1"})).await;
    assert_eq!((reason.as_str(), code), ("OOMKilled", 137));
}

#[tokio::test]
async fn an_executed_container_starts_late_on_request() {
    let (reason, code, started) = faulted_sleep(
        "agent-slow",
        json!({faults::POD_SLOW_START_SECONDS: "3", faults::POD_KILL_AFTER_SECONDS: "0.5"}),
    )
    .await;
    assert!(started >= 3.0, "started {started:.1}s after creation");
    assert_eq!((reason.as_str(), code), ("Error", 137));
}

/// The stand-in engine serving `/health` on port 8000 of its pod (see
/// `deepinfer-fake-engine`), with `args`.
fn serving_engine(args: &[&str]) -> serde_json::Value {
    let mut command = vec![
        support::fake_engine().display().to_string(),
        "--model_name".into(),
        "/".into(),
    ];
    command.extend(args.iter().map(|a| a.to_string()));
    json!(command)
}

/// A host path for a test to create and remove, gone when dropped.
struct Flag(std::path::PathBuf);

impl Flag {
    fn new(name: &str) -> Self {
        Flag(std::env::temp_dir().join(name))
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }

    fn set(&self, on: bool) {
        if on {
            std::fs::write(&self.0, b"").expect("creating a flag file");
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Drop for Flag {
    fn drop(&mut self) {
        self.set(false);
    }
}

#[tokio::test]
async fn probes_decide_when_an_executed_container_is_started_ready_and_restarted() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-probes").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let wedged = Flag::new(&format!("deepinfer-{}-wedged", ns.name));
    let dead = Flag::new(&format!("deepinfer-{}-dead", ns.name));
    create(&pods, json!({
        "metadata": {"name": "engine"},
        "spec": {"containers": [{
            "name": "engine", "image": "deepinfer-operator:dev",
            "command": serving_engine(&["--load-seconds", "3", "--unresponsive-file", &wedged.path()]),
            "ports": [{"name": "serve", "containerPort": 8000}],
            "startupProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1, "failureThreshold": 10},
            "readinessProbe": {"httpGet": {"path": "/health", "port": "serve"}, "periodSeconds": 1,
                               "failureThreshold": 1},
            "livenessProbe": {"exec": {"command": ["sh", "-c", format!("test ! -e {}", dead.path())]},
                              "periodSeconds": 1, "failureThreshold": 2}
        }]}
    }))
    .await;
    // Listening at once: started; answering 503 while it loads: not ready yet.
    support::eventually(TIMEOUT, "the engine started but not ready", || async {
        let c = first_container(&pods.get("engine").await.ok()?)?;
        (c.started == Some(true) && !c.ready).then_some(())
    })
    .await;
    let ready = || async {
        let p = pods.get("engine").await.ok()?;
        (condition(&p, "Ready")? == "True").then_some(p)
    };
    support::eventually(TIMEOUT, "the pod Ready once /health answers 200", ready).await;

    wedged.set(true);
    support::eventually(
        TIMEOUT,
        "the pod unready while /health is silent",
        || async {
            let p = pods.get("engine").await.ok()?;
            let c = first_container(&p)?;
            (condition(&p, "Ready")? == "False" && !c.ready && c.state?.running.is_some())
                .then_some(())
        },
    )
    .await;
    wedged.set(false);
    let back = support::eventually(TIMEOUT, "the pod Ready again", ready).await;
    assert_eq!(
        first_container(&back).map(|c| c.restart_count),
        Some(0),
        "readiness never restarts"
    );

    dead.set(true);
    let restarted = support::eventually(TIMEOUT, "the liveness probe to restart it", || async {
        let c = first_container(&pods.get("engine").await.ok()?)?;
        let last = c.last_state?.terminated?;
        (c.restart_count >= 1).then_some(last)
    })
    .await;
    assert_ne!(restarted.exit_code, 0, "killed: {restarted:?}");
    dead.set(false);
    let p = support::eventually(TIMEOUT, "the restarted container Ready", ready).await;
    let c = first_container(&p).expect("status");
    assert!(c.started == Some(true) && c.restart_count >= 1);
}

#[tokio::test]
async fn a_container_past_its_startup_budget_is_restarted_and_never_ready() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-startup").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    create(&pods, json!({
        "metadata": {"name": "engine"},
        "spec": {"containers": [{
            "name": "engine", "image": "deepinfer-operator:dev",
            "command": serving_engine(&["--load-seconds", "600"]),
            "ports": [{"name": "serve", "containerPort": 8000}],
            "startupProbe": {"httpGet": {"path": "/health", "port": "serve"}, "periodSeconds": 1,
                             "failureThreshold": 2}
        }]}
    }))
    .await;
    let c = support::eventually(TIMEOUT, "a restart past the startup budget", || async {
        let c = first_container(&pods.get("engine").await.ok()?)?;
        c.last_state.as_ref()?.terminated.as_ref()?;
        (c.restart_count >= 1).then_some(c)
    })
    .await;
    let last = c.last_state.and_then(|s| s.terminated).expect("terminated");
    assert_ne!(last.exit_code, 0, "killed: {last:?}");
    let p = pods.get("engine").await.expect("pod");
    assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
    let c = first_container(&p).expect("status");
    assert!(!c.ready && c.started != Some(true), "{c:?}");
}

/// A number no other process on the machine has on its command line: `sleep` takes it as its
/// duration, and it identifies the processes of one test.
fn marker(ns: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{}.{nanos:09}{}", 900 + ns.len(), std::process::id())
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> usize {
    let out = std::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// A container that starts one process in a session of its own (as the acceptance runner
/// starts its engine in a process group of its own), then waits: both sleep `marker` seconds.
fn escaping_container(marker: &str) -> serde_json::Value {
    json!({
        "name": "c", "image": "deepinfer-operator:dev",
        "command": ["sh", "-c", format!("setsid sleep {marker} & sleep {marker}")]
    })
}

#[tokio::test]
async fn a_deleted_pods_processes_all_end_even_those_outside_its_process_group() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-escape").await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let marker = marker(&ns.name);
    create(
        &pods,
        json!({"metadata": {"name": "p"}, "spec": {"containers": [escaping_container(&marker)]}}),
    )
    .await;
    support::eventually(TIMEOUT, "both processes to run", || async {
        (processes_with(&marker) >= 2).then_some(())
    })
    .await;
    pods.delete("p", &kube::api::DeleteParams::default())
        .await
        .expect("delete");
    support::eventually(TIMEOUT, "the pod to be gone", || async {
        pods.get_opt("p")
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await;
    assert_eq!(
        processes_with(&marker),
        0,
        "no process of a deleted pod outlives it"
    );
}

/// A node agent of this test's own, on one node of its own (tainted, so nothing else lands
/// there), beside the bed's agent; killed and its node deleted when dropped.
struct OwnAgent {
    child: std::process::Child,
    node: String,
    dir: std::path::PathBuf,
}

impl OwnAgent {
    fn start(ns: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("deepinfer-agent-{ns}"));
        std::fs::create_dir_all(&dir).expect("agent directory");
        let topology = dir.join("topology.yaml");
        std::fs::write(
            &topology,
            format!(
                "pools:\n- name: {ns}\n  taints: [{{key: deepinfer.io/test-dedicated, value: {ns}, effect: NoSchedule}}]\n"
            ),
        )
        .expect("topology");
        let log = std::fs::File::create(dir.join("agent.log")).expect("agent log");
        let operator = support::repo_root().join("target/debug/deepinfer-operator");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_deepinfer-node-agent"))
            .arg("--kubeconfig")
            .arg(support::kubeconfig())
            .arg("--topology")
            .arg(&topology)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--own-binary")
            .arg(format!("deepinfer-operator={}", operator.display()))
            .arg("--own-binary")
            .arg(format!(
                "deepinfer-runner={}",
                operator.with_file_name("deepinfer-runner").display()
            ))
            .args(["--workers", "2"])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting a node agent");
        OwnAgent {
            child,
            node: format!("{ns}-0"),
            dir,
        }
    }

    /// Sends SIGTERM and waits for the agent to exit.
    async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success(), "SIGTERM to the agent");
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the agent") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the agent did not exit within {TIMEOUT:?} of SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for OwnAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        support::kubectl(&["delete", "node", &self.node, "--wait=false"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn a_node_agent_ends_every_process_it_started_when_it_is_stopped() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "agent-stop").await;
    let mut agent = OwnAgent::start(&ns.name);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    support::eventually(TIMEOUT, "the agent's node to register", || async {
        nodes.get_opt(&agent.node).await.ok().flatten()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let marker = marker(&ns.name);
    create(
        &pods,
        json!({"metadata": {"name": "p"},
               "spec": {"nodeName": agent.node, "containers": [escaping_container(&marker)]}}),
    )
    .await;
    support::eventually(TIMEOUT, "both processes to run", || async {
        (processes_with(&marker) >= 2).then_some(())
    })
    .await;
    let status = agent.terminate().await;
    assert!(
        status.success(),
        "the agent exits cleanly on SIGTERM: {status}"
    );
    assert_eq!(
        processes_with(&marker),
        0,
        "no process the agent started outlives it"
    );
    // Its pod stays behind on a node without a kubelet: removed here.
    let force = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = pods.delete("p", &force).await;
}
