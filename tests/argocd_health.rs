//! The Argo CD health check (`deploy/argocd/health.lua`), run by a real Lua interpreter on the
//! cases of `deploy/argocd/health_test.yaml` (Argo CD's own test format) and on statuses the
//! operator computes, and checked against the kstatus rules of `api::kstatus`.
//!
//! Needs `lua5.4` (installed by `e2e/bed/provision.sh`, which `make test` runs first).

#[path = "common/statuses.rs"]
mod statuses;
use statuses::{ready, resource};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use deepinfer_operator::api::kstatus::{self, Status};
use deepinfer_operator::api::{DeepInferDeploymentStatus, Reason};
use deepinfer_operator::controller::status::{Gate, Outcome};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};

fn argocd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/argocd")
}

/// A Lua table constructor for a JSON value. JSON null becomes an absent key, as in Argo CD.
fn lua_literal(value: &Value) -> String {
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => format!("{f:?}"),
            _ => unreachable!("a JSON number is i64, u64 or f64"),
        },
        Value::String(s) => lua_string(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(lua_literal).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("[{}] = {}", lua_string(k), lua_literal(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// A double-quoted Lua string; control characters as three-digit decimal escapes.
fn lua_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\{:03}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Runs health.lua on `obj` as Argo CD does (the script's body with `obj` in scope) and returns
/// (status, message).
fn argocd_health(obj: &Value) -> (String, String) {
    let script = std::fs::read_to_string(argocd_dir().join("health.lua")).expect("health.lua");
    let program = format!(
        "local obj = {}\nlocal function health(obj)\n{script}\nend\nlocal hs = health(obj)\nio.write(hs.status, \"\\n\", hs.message or \"\")\n",
        lua_literal(obj)
    );
    let mut child = Command::new("lua5.4")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run lua5.4 ({e}); the Argo CD health check is tested with a real Lua \
                 interpreter: install it with `make provision` (e2e/bed/provision.sh) or \
                 `apt-get install lua5.4`"
            )
        });
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(program.as_bytes())
        .expect("writing the script to lua5.4");
    let out = child.wait_with_output().expect("lua5.4 runs");
    assert!(
        out.status.success(),
        "lua5.4 failed on health.lua: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    let (status, message) = text.split_once('\n').expect("status line");
    (status.to_string(), message.to_string())
}

/// The kstatus reading of the same object, in Argo CD's words.
fn kstatus_health(obj: &Value) -> (String, String) {
    let meta: ObjectMeta =
        serde_json::from_value(obj["metadata"].clone()).expect("fixture metadata");
    let status: Option<DeepInferDeploymentStatus> = obj
        .get("status")
        .map(|s| serde_json::from_value(s.clone()).expect("fixture status matches the API"));
    let verdict = kstatus::compute_parts(
        meta.generation,
        meta.deletion_timestamp.is_some(),
        status.as_ref(),
    );
    // Held on purpose: Argo CD's own word, where kstatus has none (docs/gitops.md).
    let held = status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| {
            c.status == "False"
                && (c.reason == Reason::Paused.as_str() || c.reason == Reason::Suspended.as_str())
                && c.observed_generation
                    .is_none_or(|g| Some(g) == meta.generation)
        });
    let argo = match verdict.status {
        Status::Current => "Healthy",
        Status::Failed => "Degraded",
        Status::InProgress if held => "Suspended",
        Status::InProgress | Status::Terminating => "Progressing",
    };
    (argo.to_string(), verdict.message)
}

#[derive(serde::Deserialize)]
struct HealthTests {
    tests: Vec<HealthTest>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthTest {
    health_status: Expected,
    input_path: String,
}

#[derive(serde::Deserialize)]
struct Expected {
    status: String,
    message: String,
}

#[test]
fn health_lua_gives_the_expected_status_for_every_test_case() {
    let text = std::fs::read_to_string(argocd_dir().join("health_test.yaml")).expect("tests");
    let cases: HealthTests = serde_yaml::from_str(&text).expect("Argo CD test format");
    assert!(cases.tests.len() >= 8, "too few cases");
    let mut seen = std::collections::BTreeSet::new();
    for case in &cases.tests {
        let input = std::fs::read_to_string(argocd_dir().join(&case.input_path))
            .unwrap_or_else(|e| panic!("{}: {e}", case.input_path));
        let obj: Value = serde_yaml::from_str(&input).expect("fixture YAML");
        let (status, message) = argocd_health(&obj);
        assert_eq!(
            (status.as_str(), message.as_str()),
            (
                case.health_status.status.as_str(),
                case.health_status.message.as_str()
            ),
            "health.lua on {}",
            case.input_path
        );
        assert_eq!(
            kstatus_health(&obj),
            (status.clone(), message),
            "kstatus and health.lua disagree on {}",
            case.input_path
        );
        seen.insert(status);
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["Degraded", "Healthy", "Progressing", "Suspended"],
        "the cases must cover every health status"
    );
}

#[test]
fn health_lua_agrees_with_kstatus_on_statuses_the_operator_writes() {
    let ready = ready();
    let accepting = Outcome {
        acceptance: Gate::Progressing(Reason::AcceptanceRunning, "Job running".into()),
        workers: Gate::NotReached,
        ..ready.clone()
    };
    let failed = Outcome {
        acceptance: Gate::Failed(Reason::AcceptanceFailed, "prompt shot-plan failed".into()),
        workers: Gate::NotReached,
        ..ready.clone()
    };
    let invalid = Outcome {
        spec: Gate::Failed(Reason::InvalidSpec, "spec.runtime.image: pin it".into()),
        ..Outcome::default()
    };
    let cases = [
        (resource(&ready, 2, 2), "Healthy"),
        (resource(&ready, 2, 3), "Progressing"),
        (resource(&accepting, 1, 1), "Progressing"),
        (resource(&failed, 1, 1), "Degraded"),
        (resource(&invalid, 1, 1), "Degraded"),
    ];
    for (obj, expected) in cases {
        let lua = argocd_health(&obj);
        assert_eq!(lua.0, expected, "health.lua on {obj}");
        assert_eq!(kstatus_health(&obj), lua, "kstatus and health.lua on {obj}");
    }
}

#[test]
fn messages_reach_argo_cd_unaltered() {
    let message = "quotes \" and \\ backslash, ]] brackets, tab\tnew\nline, ünïcödé, \u{1} control";
    let obj = json!({
        "metadata": {"generation": 7},
        "status": {
            "observedGeneration": 7,
            "conditions": [{"type": "Stalled", "status": "True", "reason": "InvalidSpec",
                            "message": message, "lastTransitionTime": "2026-01-05T10:00:00Z"}]
        }
    });
    assert_eq!(
        argocd_health(&obj),
        ("Degraded".to_string(), format!("InvalidSpec: {message}"))
    );
}
