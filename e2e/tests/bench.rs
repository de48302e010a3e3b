//! The benchmark (`make bench`) at a small size, so that it keeps working: every figure it
//! promises is produced for every phase, the floor runs, and what users rely on holds — every
//! resource reaches Ready through the whole pipeline, and a restarted operator re-reconciles the
//! converged set without a single write. Its timing and memory figures are printed, not judged.

use std::process::Command;

use serde_json::{json, Value};

const RESOURCES: u64 = 4;

fn finite(v: &Value) -> bool {
    v.as_f64().is_some_and(f64::is_finite)
}

#[test]
fn bench_drives_every_resource_to_ready_and_prints_every_figure() {
    let bench = env!("CARGO_BIN_EXE_deepinfer-bench");
    let operator = deepinfer_e2e::operator_process::binary();
    let agent = operator.with_file_name("deepinfer-node-agent");
    let recording = std::env::temp_dir().join(format!("bench-{}.json", std::process::id()));
    let out = Command::new(bench)
        .args(["--resources", &RESOURCES.to_string()])
        // Two namespaces, so that the operator watches every namespace and the floor stands in
        // for each, as at N = 1000.
        .args(["--per-namespace", &(RESOURCES / 2).to_string()])
        .args(["--timeout-seconds", "300", "--operator"])
        .arg(&operator)
        .arg("--node-agent")
        .arg(&agent)
        .arg("--record")
        .arg(&recording)
        .output()
        .expect("running deepinfer-bench");
    let figures = bench_figures(&out);
    assert_eq!(figures["resources"], RESOURCES);
    assert_eq!(
        figures["namespaces"], 2,
        "spread over two namespaces: {figures}"
    );
    assert_eq!(
        figures["workerPods"].as_u64(),
        Some(8 * RESOURCES),
        "8 worker pods per resource: {figures}"
    );
    for key in [
        "nodesReadySeconds",
        "operatorRssIdleMib",
        "operatorRssReadyMib",
        "bytesPerResource",
        "bytesPerPod",
        "operatorAnonIdleMib",
        "operatorAnonReadyMib",
        "anonBytesPerResource",
        "anonBytesPerPod",
    ] {
        assert!(finite(&figures[key]), "{key} measured: {figures}");
    }

    // One acceptance run per resource loads the new revision's weights once, then each serving
    // group does (offline acceptance); a second run of a revision would show here.
    let loads = &figures["rolloutWeightLoads"];
    assert_eq!(loads["acceptance"], RESOURCES, "{loads}");
    let serving = loads["serving"].as_u64().expect("serving loads");
    assert!(serving >= RESOURCES, "{loads}");
    assert_eq!(
        loads["perResource"].as_f64(),
        Some((RESOURCES + serving) as f64 / RESOURCES as f64),
        "{loads}"
    );
    let ready = &figures["phases"][0];
    assert!(
        ready["operatorCachedObjects"]["Pod"]
            .as_f64()
            .is_some_and(|n| n >= (8 * RESOURCES) as f64),
        "the operator counts the worker pods in its cache: {ready}"
    );
    let caches = figures["caches"].as_array().expect("caches");
    let cache = |kind: &str| {
        caches
            .iter()
            .find(|c| c["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind} measured: {figures}"))
    };
    assert_eq!(cache("DeepInferDeployment")["objects"], RESOURCES);
    assert!(
        cache("Pod")["objects"]
            .as_u64()
            .is_some_and(|n| n >= 8 * RESOURCES),
        "every worker pod measured: {figures}"
    );
    for kind in ["DeepInferDeployment", "Pod", "Job", "Service"] {
        assert!(
            cache(kind)["bytes"].as_u64().is_some_and(|b| b > 0),
            "{kind}: bytes measured: {figures}"
        );
    }

    let (phases, names) = phases_of(&figures);
    assert_eq!(
        names,
        [
            "ready",
            "rollout",
            "restart",
            "floor-ready",
            "floor-rollout"
        ]
    );
    for phase in phases {
        let name = phase["name"].as_str().unwrap_or_default();
        assert!(
            phase["seconds"].as_f64().is_some_and(|s| s > 0.0),
            "{name}: time to converge: {phase}"
        );
        assert!(
            finite(&phase["nodeAgentCpuSeconds"]) && finite(&phase["nodeAgentRssMib"]),
            "{name}: the node agent's cost: {phase}"
        );
        assert!(
            phase["bedCpuSeconds"].as_object().is_some_and(|b| {
                b.contains_key("kube-apiserver")
                    && b.contains_key("deepinfer-bench")
                    && b.values().all(finite)
            }),
            "{name}: the bed's CPU and the benchmark's own: {phase}"
        );
        if !name.starts_with("floor-") {
            for key in [
                "reconcilesPerResource",
                "meanReconcileMs",
                "operatorCpuSeconds",
                "queueDepthPeak",
                "eventsPerResource",
                "eventToReconcileMeanMs",
            ] {
                assert!(finite(&phase[key]), "{name}: {key}: {phase}");
            }
            assert_eq!(
                phase["operatorRssMib"].as_array().map(|r| r.len()),
                Some(3),
                "{name}: RSS at start, peak and end: {phase}"
            );
            assert!(
                phase["operatorHeapMib"].as_array().is_some_and(
                    |h| h.len() == 4 && h.iter().all(|v| v.as_f64().is_some_and(|m| m > 0.0))
                ),
                "{name}: heap allocated, active, metadata and resident at the end: {phase}"
            );
            assert!(
                phase["operatorCachedObjects"]
                    .as_object()
                    .is_some_and(|c| c.contains_key("Job") && c.values().all(finite)),
                "{name}: cached objects by kind: {phase}"
            );
        }
    }
    let requests = |phase: usize, key: &str| phases[phase]["requestsPerResource"][key].as_f64();
    assert!(
        requests(0, "patch deepinferdeployments/status").is_some_and(|w| w >= 1.0),
        "the status is written: {}",
        phases[0]
    );
    // A new revision means new pods: the rollout replaces every worker pod.
    assert!(
        requests(1, "delete pods").is_some_and(|d| d >= 8.0),
        "{}",
        phases[1]
    );
    // The floor created the same worker pods with a plain client.
    assert_eq!(requests(3, "create pods"), Some(8.0), "{}", phases[3]);
    assert_eq!(
        phases[2]["writesPerResource"].as_f64(),
        Some(0.0),
        "a restart over converged resources writes nothing: {}",
        phases[2]
    );
    assert!(
        phases[2]["reconcilesPerResource"]
            .as_f64()
            .is_some_and(|r| r >= 1.0),
        "the restarted operator reconciled every resource: {}",
        phases[2]
    );
    assert_eq!(
        figures["operatorNamespacesLeft"], 0,
        "the floor starts once the operator's namespaces are gone, not only their pods: {figures}"
    );
    for (i, phase) in ["ready", "rollout"].into_iter().enumerate() {
        assert!(
            figures["floorRatio"][phase]
                .as_f64()
                .is_some_and(|r| r.is_finite() && r > 0.0),
            "operator / floor for {phase}: {figures}"
        );
        // The writes by cause add up to each side's writes per resource.
        let causes = figures["writesByCause"][phase]
            .as_object()
            .unwrap_or_else(|| panic!("writes by cause for {phase}: {figures}"));
        for (side, figures_of) in [(0, i), (1, i + 3)] {
            let sum: f64 = causes.values().filter_map(|c| c[side].as_f64()).sum();
            let writes = phases[figures_of]["writesPerResource"]
                .as_f64()
                .unwrap_or(-1.0);
            assert!(
                (sum - writes).abs() < 0.01,
                "{phase}, side {side}: causes add up to {sum}, writes {writes}: {causes:?}"
            );
        }
        assert!(
            causes["status writes"][0].as_f64() >= Some(1.0),
            "the operator wrote each status: {causes:?}"
        );
    }

    floor_from(bench, &operator, &agent, &recording, &figures);
}

/// The floor's rollout alone, from the recording of the run whose figures are `figures`: the set
/// the operator converged to in `ready` created at once (its worker pods, no Job), then the
/// recorded rollout.
fn floor_from(
    bench: &str,
    operator: &std::path::Path,
    agent: &std::path::Path,
    recording: &std::path::Path,
    figures: &Value,
) {
    let out = Command::new(bench)
        .args(["--timeout-seconds", "300", "--operator"])
        .arg(operator)
        .arg("--node-agent")
        .arg(agent)
        .arg("--floor-from")
        .arg(recording)
        .output()
        .expect("running deepinfer-bench --floor-from");
    let _ = std::fs::remove_file(recording);
    let from = bench_figures(&out);
    let (phases, names) = phases_of(&from);
    assert_eq!(
        names,
        [
            "ready",
            "rollout",
            "restart",
            "floor-setup",
            "floor-rollout"
        ]
    );
    assert_eq!(
        phases[..3],
        figures["phases"].as_array().expect("phases")[..3],
        "the operator's phases as recorded"
    );
    let requests = |phase: usize, key: &str| phases[phase]["requestsPerResource"][key].as_f64();
    assert_eq!(requests(3, "create pods"), Some(8.0), "{}", phases[3]);
    assert_eq!(requests(3, "create jobs"), None, "{}", phases[3]);
    assert_eq!(requests(4, "create pods"), Some(8.0), "{}", phases[4]);
    assert_eq!(requests(4, "delete pods"), Some(8.0), "{}", phases[4]);
    assert!(
        from["floorRatio"]["rollout"]
            .as_f64()
            .is_some_and(|r| r.is_finite() && r > 0.0)
            && from["floorRatio"].as_object().map(|r| r.len()) == Some(1),
        "operator / floor for the rollout alone: {from}"
    );
    let causes = from["writesByCause"]["rollout"]
        .as_object()
        .unwrap_or_else(|| panic!("writes by cause for the rollout: {from}"));
    let sum: f64 = causes.values().filter_map(|c| c[1].as_f64()).sum();
    let writes = phases[4]["writesPerResource"].as_f64().unwrap_or(-1.0);
    assert!(
        (sum - writes).abs() < 0.01,
        "the floor's causes add up to {sum}, writes {writes}: {causes:?}"
    );
}

/// The phases of a run's figures, and their names.
fn phases_of(figures: &Value) -> (&Vec<Value>, Vec<&str>) {
    let phases = figures["phases"].as_array().expect("phases");
    let names = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    (phases, names)
}

/// The figures of a finished `deepinfer-bench` run: its `BENCH` line.
fn bench_figures(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "deepinfer-bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("BENCH "))
        .expect("a BENCH line");
    serde_json::from_str(line).expect("BENCH is JSON")
}

/// The floor replays what the operator did. Where the operator deleted an object and created
/// one of the same name again, the floor's create waits until the deleted object is gone — here
/// held by a finalizer for a few seconds after the delete — instead of ending the benchmark with
/// 409 AlreadyExists.
#[tokio::test]
async fn the_floor_creates_a_name_again_once_the_deleted_object_is_gone() {
    use deepinfer_e2e::support::{self, TestNamespace};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};
    use std::time::{Duration, Instant};

    const HOLD: &str = "bench.deepinfer.io/hold";
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "bench-replay").await;
    let config_map = |run: &str, finalizers: &[&str]| {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "spec", "finalizers": finalizers},
            "data": {"run": run},
        })
    };
    let steps = json!([
        {"create": config_map("1", &[HOLD])},
        {"delete": {"kind": "ConfigMap", "name": "spec"}},
        {"create": config_map("2", &[])},
    ]);
    let file = std::env::temp_dir().join(format!("{}-steps.json", ns.name));
    std::fs::write(&file, steps.to_string()).expect("writing the steps");
    let replay = Command::new(env!("CARGO_BIN_EXE_deepinfer-bench"))
        .args(["--timeout-seconds", "60", "--replay"])
        .arg(&file)
        .args(["--replay-namespace", &ns.name])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running deepinfer-bench --replay");

    // The first ConfigMap's delete is under way: hold it 3 s more, then let it finish. (On any
    // outcome: a held object would keep the namespace from going.)
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let start = Instant::now();
    let mut deleting = false;
    while !deleting && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        deleting = config_maps
            .get_opt("spec")
            .await
            .ok()
            .flatten()
            .is_some_and(|cm| cm.metadata.deletion_timestamp.is_some());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let released = config_maps
        .patch("spec", &PatchParams::default(), &release)
        .await;
    let out = tokio::task::spawn_blocking(|| replay.wait_with_output())
        .await
        .expect("waiting for deepinfer-bench")
        .expect("deepinfer-bench's output");
    let _ = std::fs::remove_file(&file);
    assert!(deleting, "the floor deleted the first ConfigMap");
    assert!(
        out.status.success(),
        "the replay failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    released.expect("the first ConfigMap held until released");
    let spec = config_maps
        .get("spec")
        .await
        .expect("the ConfigMap created again");
    assert!(
        spec.metadata.deletion_timestamp.is_none(),
        "the second ConfigMap is not being deleted: {spec:?}"
    );
    assert_eq!(
        spec.data.and_then(|d| d.get("run").cloned()).as_deref(),
        Some("2"),
        "the ConfigMap of the second create"
    );
}

/// A process's state and parent, from `/proc/<pid>/stat` (`pid (comm) state ppid ...`; the
/// command may hold spaces and parentheses).
fn state_and_parent(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.to_string();
    Some((state, fields.next()?.parse().ok()?))
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| state_and_parent(child).is_some_and(|(_, parent)| parent == pid))
        .collect()
}

/// Whether `pid` exists and has not ended (a zombie has).
fn running(pid: u32) -> bool {
    state_and_parent(pid).is_some_and(|(state, _)| state != "Z" && state != "X")
}

/// An interrupted run (a terminal's Ctrl-C, `kill`, a CI job's timeout) stops what it started:
/// no operator keeps reconciling and no node agent keeps serving nodes after the benchmark ends.
#[test]
fn a_terminated_bench_stops_the_operator_and_node_agent_it_started() {
    use std::time::{Duration, Instant};

    let bench = env!("CARGO_BIN_EXE_deepinfer-bench");
    let operator = deepinfer_e2e::operator_process::binary();
    let agent = operator.with_file_name("deepinfer-node-agent");
    let mut child = Command::new(bench)
        .args(["--resources", "2", "--timeout-seconds", "300", "--operator"])
        .arg(&operator)
        .arg("--node-agent")
        .arg(&agent)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("running deepinfer-bench");
    let pid = child.id();
    // Both started: the node agent first, the operator once the nodes are Ready.
    let wanted = [&agent, &operator].map(|b| std::fs::canonicalize(b).expect("the binaries exist"));
    let start = Instant::now();
    let started = loop {
        let started: Vec<u32> = children(pid)
            .into_iter()
            .filter(|c| {
                std::fs::read_link(format!("/proc/{c}/exe")).is_ok_and(|exe| wanted.contains(&exe))
            })
            .collect();
        if started.len() == wanted.len() {
            break started;
        }
        if let Some(status) = child.try_wait().expect("waiting for deepinfer-bench") {
            panic!("deepinfer-bench ended with {status} before starting the operator");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "deepinfer-bench started {started:?}, not its node agent and operator, within 120 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        deepinfer_e2e::operator_process::send_term(&child),
        "sending SIGTERM"
    );
    let status = deepinfer_e2e::operator_process::wait_exit(&mut child, Duration::from_secs(90))
        .expect("deepinfer-bench ends within 90 s of SIGTERM");
    assert!(!status.success(), "an interrupted run is not a success");
    let left: Vec<u32> = started.into_iter().filter(|&p| running(p)).collect();
    for p in &left {
        let _ = Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
    }
    assert!(
        left.is_empty(),
        "processes deepinfer-bench started still run after it ended: {left:?}"
    );
}
