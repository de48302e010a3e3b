//! What the tools of GitOps pipelines and on-call read from the statuses the operator writes,
//! with the libraries those tools run: kstatus from `sigs.k8s.io/cli-utils` (what Flux and
//! Helm 4 wait on), the Argo CD health checks of `deploy/argocd/` under gopher-lua (the Lua VM
//! Argo CD embeds), and `kubectl wait --for=condition=Ready` (the `Ready` condition) — each case
//! as docs/gitops.md's table says, paused and suspended included; and the operator's own kstatus
//! reading (`api::kstatus`) agreeing with the library on every case.
//!
//! Needs the health reader `deepinfer-health` (e2e/bed/health), which `make provision` builds and
//! `make cluster-up` links into `.testbed/bin` (`make test` does both first).

#[path = "common/statuses.rs"]
mod statuses;
use statuses::{ready, resource};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use deepinfer_operator::api::kstatus;
use deepinfer_operator::api::Reason;
use deepinfer_operator::controller::status::{Gate, Outcome};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn reader() -> PathBuf {
    let bed = std::env::var_os("DEEPINFER_TESTBED")
        .map_or_else(|| repo().join(".testbed"), PathBuf::from);
    let path = bed.join("bin/deepinfer-health");
    assert!(
        path.exists(),
        "{} is missing: run `make provision cluster-up` (or `make test`), which build and link the health reader",
        path.display()
    );
    path
}

/// What the tools read: (kstatus, its message, Argo CD health, its message), from `script`.
fn read(objects: &[Value], script: &str) -> Vec<(String, String, String, String)> {
    let mut child = Command::new(reader())
        .arg(repo().join("deploy/argocd").join(script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the health reader starts");
    let mut stdin = child.stdin.take().expect("stdin");
    for o in objects {
        writeln!(stdin, "{o}").expect("write an object");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("the health reader ends");
    assert!(out.status.success(), "the health reader failed");
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .lines()
        .map(|l| {
            let r: Value = serde_json::from_str(l).expect("one JSON reading per line");
            assert!(r.get("error").is_none(), "the reader says {r}");
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (
                s("kstatus"),
                s("kstatusMessage"),
                s("argocd"),
                s("argocdMessage"),
            )
        })
        .collect()
}

fn ready_condition(obj: &Value) -> String {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map_or("(none)".into(), |c| {
            c["status"].as_str().unwrap_or_default().to_string()
        })
}

/// docs/gitops.md's table: for each state, what kstatus, Argo CD and `kubectl wait
/// --for=condition=Ready` say, read by the tools' own libraries.
#[test]
fn every_tool_reads_each_state_as_docs_gitops_says() {
    let ready = ready();
    let rolling = Outcome {
        workers: Gate::Progressing(
            Reason::RollingOut,
            "1 of 2 groups on the new revision".into(),
        ),
        ..ready.clone()
    };
    let judging = Outcome {
        acceptance: Gate::Progressing(Reason::AcceptanceRunning, "Job running".into()),
        workers: Gate::NotReached,
        ..ready.clone()
    };
    let failed = Outcome {
        acceptance: Gate::Failed(Reason::AcceptanceFailed, "prompt shot-plan failed".into()),
        workers: Gate::NotReached,
        ..ready.clone()
    };
    let paused = Outcome {
        workers: Gate::Held(
            Reason::Paused,
            "spec.paused: no group is created or replaced".into(),
        ),
        ..ready.clone()
    };
    let suspended = Outcome {
        acceptance: Gate::Held(Reason::Suspended, "suspended (spec.suspend)".into()),
        workers: Gate::Held(Reason::Suspended, "suspended (spec.suspend)".into()),
        ..ready.clone()
    };
    // (state, object, kstatus, Argo CD, Ready)
    let cases = [
        (
            "ready",
            resource(&ready, 2, 2),
            "Current",
            "Healthy",
            "True",
        ),
        (
            "spec not yet observed",
            resource(&ready, 2, 3),
            "InProgress",
            "Progressing",
            "True",
        ),
        (
            "rolling out",
            resource(&rolling, 1, 1),
            "InProgress",
            "Progressing",
            "False",
        ),
        (
            "judging a candidate",
            resource(&judging, 1, 1),
            "InProgress",
            "Progressing",
            "False",
        ),
        (
            "failed candidate",
            resource(&failed, 1, 1),
            "Failed",
            "Degraded",
            "False",
        ),
        (
            "paused",
            resource(&paused, 1, 1),
            "InProgress",
            "Suspended",
            "False",
        ),
        (
            "suspended",
            resource(&suspended, 1, 1),
            "InProgress",
            "Suspended",
            "False",
        ),
    ];
    let objects: Vec<Value> = cases.iter().map(|c| c.1.clone()).collect();
    let readings = read(&objects, "health.lua");
    let docs = std::fs::read_to_string(repo().join("docs/gitops.md")).expect("docs/gitops.md");
    for ((state, obj, want_kstatus, want_argo, want_ready), (got_kstatus, message, argo, _)) in
        cases.iter().zip(&readings)
    {
        assert_eq!(
            (
                got_kstatus.as_str(),
                argo.as_str(),
                ready_condition(obj).as_str()
            ),
            (*want_kstatus, *want_argo, *want_ready),
            "{state}: kstatus (cli-utils), Argo CD (gopher-lua), Ready; kstatus says {message:?}"
        );
        let status = serde_json::from_value(obj["status"].clone()).expect("a status");
        let ours =
            kstatus::compute_parts(obj["metadata"]["generation"].as_i64(), false, Some(&status));
        assert_eq!(
            format!("{:?}", ours.status),
            *got_kstatus,
            "{state}: api::kstatus and cli-utils disagree ({ours:?})"
        );
        let row = format!("| {state} | {want_kstatus} | {want_argo} | {want_ready} |");
        assert!(docs.contains(&row), "docs/gitops.md lacks the row {row}");
    }
}

/// A DeepInferRole is healthy when it serves the groups asked of it (`status.replicas` ≥
/// `spec.replicas`), progressing while it scales and until the operator has written its status.
#[test]
fn the_role_health_check_reads_a_role_as_docs_gitops_says() {
    let role = |replicas: i64, status: Option<Value>| {
        let mut o = json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferRole",
            "metadata": {"name": "flash-decode", "namespace": "inference", "generation": 3},
            "spec": {"replicas": replicas},
        });
        if let Some(s) = status {
            o["status"] = s;
        }
        o
    };
    let cases = [
        (role(2, None), "Progressing"),
        (
            role(2, Some(json!({"replicas": 2, "selector": "s"}))),
            "Healthy",
        ),
        (
            role(3, Some(json!({"replicas": 2, "selector": "s"}))),
            "Progressing",
        ),
        (
            role(0, Some(json!({"replicas": 0, "selector": "s"}))),
            "Healthy",
        ),
        (
            role(2, Some(json!({"replicas": 0, "selector": "s"}))),
            "Progressing",
        ),
    ];
    let objects: Vec<Value> = cases.iter().map(|c| c.0.clone()).collect();
    for ((obj, want), (_, _, argo, message)) in cases.iter().zip(read(&objects, "role_health.lua"))
    {
        assert_eq!(argo, *want, "{obj}: {message}");
        assert!(!message.is_empty(), "{obj}: the check says why");
    }
}
