//! The benchmark (`make bench`) at a small size, so that it keeps working: every figure it
//! promises is produced for every phase, the floor runs, and what users rely on holds — every
//! resource reaches Ready through the whole pipeline, and a restarted operator re-reconciles the
//! converged set without a single write. Its timing and memory figures are printed, not judged.

use std::process::Command;

use serde_json::Value;

const RESOURCES: u64 = 4;

fn finite(v: &Value) -> bool {
    v.as_f64().is_some_and(f64::is_finite)
}

#[test]
fn bench_drives_every_resource_to_ready_and_prints_every_figure() {
    let bench = env!("CARGO_BIN_EXE_deepinfer-bench");
    let operator = deepinfer_e2e::operator_process::binary();
    let agent = operator.with_file_name("deepinfer-node-agent");
    let out = Command::new(bench)
        .args(["--resources", &RESOURCES.to_string()])
        // Two namespaces, so that the operator watches every namespace and the floor stands in
        // for each, as at N = 1000.
        .args(["--per-namespace", &(RESOURCES / 2).to_string()])
        .args(["--timeout-seconds", "300", "--operator"])
        .arg(&operator)
        .arg("--node-agent")
        .arg(&agent)
        .output()
        .expect("running deepinfer-bench");
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
    let figures: Value = serde_json::from_str(line).expect("BENCH is JSON");
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

    let phases = figures["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
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
            phase["bedCpuSeconds"]
                .as_object()
                .is_some_and(|b| b.contains_key("kube-apiserver") && b.values().all(finite)),
            "{name}: the bed's CPU: {phase}"
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
    for phase in ["ready", "rollout"] {
        assert!(
            figures["floorRatio"][phase]
                .as_f64()
                .is_some_and(|r| r.is_finite() && r > 0.0),
            "operator / floor for {phase}: {figures}"
        );
    }
}
