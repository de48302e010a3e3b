//! The alerts the chart ships (`charts/deepinfer-operator/files/prometheus-rules.yaml`, generated
//! from `deepinfer_operator::metrics::reference::ALERTS`) are valid Prometheus rules and fire exactly when
//! they should: each is run by Prometheus' own rule evaluator (`promtool test rules`, Debian's
//! `prometheus` package, installed by `make provision`) over series shaped like the operator's,
//! for a broken installation (fires, with its labels and annotations) beside a healthy one (quiet).

use std::path::{Path, PathBuf};
use std::process::Command;

use deepinfer_operator::metrics::reference::{Alert, ALERTS, PROMETHEUS_RULES_PATH};
use serde_json::{json, Value};

fn rules_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(PROMETHEUS_RULES_PATH)
}

fn promtool() -> PathBuf {
    let path = PathBuf::from("/usr/bin/promtool");
    assert!(
        path.exists(),
        "promtool is missing; `make provision` installs Debian's prometheus package"
    );
    path
}

fn alert(name: &str) -> &'static Alert {
    ALERTS
        .iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("no alert {name}"))
}

/// The annotations Prometheus renders for `alert` firing with `labels`, with its template
/// placeholders filled in.
fn annotations(alert: &Alert, labels: &Value, value: &str) -> Value {
    let rules: Value =
        serde_yaml::from_str(&std::fs::read_to_string(rules_file()).expect("rule file"))
            .expect("rule file is YAML");
    let rule = rules["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["alert"] == alert.name)
        .expect("the rule of the alert")
        .clone();
    let fill = |s: &Value| {
        let mut text = s
            .as_str()
            .unwrap_or_default()
            .replace("{{ $value }}", value);
        for (k, v) in labels.as_object().into_iter().flatten() {
            text = text.replace(
                &format!("{{{{ $labels.{k} }}}}"),
                v.as_str().unwrap_or_default(),
            );
        }
        text
    };
    json!({
        "summary": fill(&rule["annotations"]["summary"]),
        "description": fill(&rule["annotations"]["description"]),
    })
}

/// One `tests:` entry: `series` as input, then for the alert: quiet at `quiet_at`, firing for
/// namespace `bad` at `fires_at` with `labels` (plus namespace, job, severity); `value` fills
/// `{{ $value }}` where a summary uses it.
fn case(
    name: &str,
    series: &[(&str, &str)],
    quiet_at: &str,
    fires_at: &str,
    labels: Value,
    value: &str,
) -> Value {
    let a = alert(name);
    let mut exp_labels =
        json!({"namespace": "bad", "job": "deepinfer-operator-metrics", "severity": a.severity});
    for (k, v) in labels.as_object().into_iter().flatten() {
        exp_labels[k] = v.clone();
    }
    json!({
        "interval": "1m",
        "input_series": series.iter().map(|(s, v)| json!({"series": s, "values": v})).collect::<Vec<_>>(),
        "alert_rule_test": [
            {"eval_time": quiet_at, "alertname": name, "exp_alerts": []},
            {"eval_time": fires_at, "alertname": name, "exp_alerts": [
                {"exp_annotations": annotations(a, &exp_labels, value), "exp_labels": exp_labels}
            ]}
        ]
    })
}

fn run(args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new(promtool())
        .args(args)
        .arg(file)
        .output()
        .expect("running promtool");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn shipped_rules_are_valid_prometheus_rules() {
    let (ok, out) = run(&["check", "rules"], &rules_file());
    assert!(ok, "promtool check rules:\n{out}");
    assert!(
        out.contains(&format!("{} rules found", ALERTS.len())),
        "{out}"
    );
}

#[test]
fn each_alert_fires_for_a_broken_installation_and_not_for_a_healthy_one() {
    let job = "job=\"deepinfer-operator-metrics\"";
    let s = |ns: &str, metric: &str, extra: &str| {
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(",{extra}")
        };
        format!("{metric}{{namespace=\"{ns}\",{job}{extra}}}")
    };
    let leader_a = |ns: &str| s(ns, "deepinfer_leader", "pod=\"a\"");
    let leader_b = |ns: &str| s(ns, "deepinfer_leader", "pod=\"b\"");
    let write_bucket = |ns: &str, le: &str| {
        s(
            ns,
            "deepinfer_api_request_duration_seconds_bucket",
            &format!("pod=\"a\",verb=\"patch\",resource=\"pods\",le=\"{le}\""),
        )
    };
    let lag_bucket = |ns: &str, le: &str| {
        s(
            ns,
            "deepinfer_watch_event_to_reconcile_seconds_bucket",
            &format!("pod=\"a\",le=\"{le}\""),
        )
    };
    let tests = vec![
        // Two replicas, neither leads; the healthy installation has one leader.
        case(
            "DeepInferOperatorNoLeader",
            &[
                (&leader_a("bad"), "0x30"),
                (&leader_b("bad"), "0x30"),
                (&leader_a("ok"), "1x30"),
                (&leader_b("ok"), "0x30"),
            ],
            "1m",
            "5m",
            json!({}),
            "0",
        ),
        case(
            "DeepInferOperatorTwoLeaders",
            &[
                (&leader_a("bad"), "1x30"),
                (&leader_b("bad"), "1x30"),
                (&leader_a("ok"), "1x30"),
                (&leader_b("ok"), "0x30"),
            ],
            "0m",
            "5m",
            json!({}),
            "2",
        ),
        // A failure every minute for an hour; the healthy installation failed once, long ago.
        case(
            "DeepInferReconcileFailing",
            &[
                (
                    &s(
                        "bad",
                        "deepinfer_reconcile_failures_total",
                        "pod=\"a\",error=\"kube\"",
                    ),
                    "0+1x60",
                ),
                (
                    &s(
                        "ok",
                        "deepinfer_reconcile_failures_total",
                        "pod=\"a\",error=\"kube\"",
                    ),
                    "1x60",
                ),
            ],
            "10m",
            "30m",
            json!({"error": "kube"}),
            "",
        ),
        // A resource Stalled for a reason that is no phase Failed (its licence not accepted);
        // the healthy namespace's resource is not Stalled.
        case(
            "DeepInferDeploymentStalled",
            &[(
                &s(
                    "bad",
                    "deepinfer_deployment_stalled",
                    "name=\"flash\",reason=\"LicenseAnnotationMissing\"",
                ),
                "_x5 1x30",
            )],
            "5m",
            "20m",
            json!({"name": "flash", "reason": "LicenseAnnotationMissing"}),
            "1",
        ),
        case(
            "DeepInferAcceptanceFailed",
            &[
                (
                    &s(
                        "bad",
                        "deepinfer_acceptance_runs_total",
                        "pod=\"a\",result=\"Failed\"",
                    ),
                    "0 0 0 1x30",
                ),
                (
                    &s(
                        "ok",
                        "deepinfer_acceptance_runs_total",
                        "pod=\"a\",result=\"Failed\"",
                    ),
                    "0x30",
                ),
                (
                    &s(
                        "ok",
                        "deepinfer_acceptance_runs_total",
                        "pod=\"a\",result=\"Passed\"",
                    ),
                    "0+1x30",
                ),
            ],
            "2m",
            "10m",
            json!({}),
            "",
        ),
        // Half a failed request a second for an hour; the healthy one fails one a minute.
        case(
            "DeepInferAPIRequestsFailing",
            &[
                (
                    &s(
                        "bad",
                        "deepinfer_api_requests_total",
                        "pod=\"a\",verb=\"patch\",resource=\"pods\",code=\"503\"",
                    ),
                    "0+30x60",
                ),
                (
                    &s(
                        "ok",
                        "deepinfer_api_requests_total",
                        "pod=\"a\",verb=\"patch\",resource=\"pods\",code=\"503\"",
                    ),
                    "0+1x60",
                ),
            ],
            "10m",
            "30m",
            json!({}),
            "",
        ),
        // Every write between 1 and 2.5 s for an hour; the healthy one answers within 1 s.
        case(
            "DeepInferAPIWritesSlow",
            &[
                (&write_bucket("bad", "1"), "0x60"),
                (&write_bucket("bad", "2.5"), "0+10x60"),
                (&write_bucket("bad", "+Inf"), "0+10x60"),
                (&write_bucket("ok", "1"), "0+10x60"),
                (&write_bucket("ok", "2.5"), "0+10x60"),
                (&write_bucket("ok", "+Inf"), "0+10x60"),
            ],
            "10m",
            "40m",
            json!({}),
            "",
        ),
        // Every watch event waits 30 to 60 s for its pass for an hour; the healthy one's within 1 s.
        case(
            "DeepInferReconcileLagging",
            &[
                (&lag_bucket("bad", "30"), "0x60"),
                (&lag_bucket("bad", "60"), "0+10x60"),
                (&lag_bucket("bad", "+Inf"), "0+10x60"),
                (&lag_bucket("ok", "30"), "0+10x60"),
                (&lag_bucket("ok", "60"), "0+10x60"),
                (&lag_bucket("ok", "+Inf"), "0+10x60"),
            ],
            "10m",
            "40m",
            json!({}),
            "",
        ),
        // Two writes a second for an hour; the healthy one writes a few a minute.
        case(
            "DeepInferOperatorWriteStorm",
            &[
                (
                    &s("bad", "deepinfer_api_writes_total", "pod=\"a\""),
                    "0+120x60",
                ),
                (
                    &s("ok", "deepinfer_api_writes_total", "pod=\"a\""),
                    "0+5x60",
                ),
            ],
            "20m",
            "50m",
            json!({}),
            "2",
        ),
    ];
    assert_eq!(tests.len(), ALERTS.len(), "one case per shipped alert");
    let dir = std::env::temp_dir().join(format!("deepinfer-promtool-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("tests.yaml");
    let spec = json!({
        "rule_files": [rules_file().display().to_string()],
        "evaluation_interval": "1m",
        "tests": tests,
    });
    std::fs::write(&file, serde_yaml::to_string(&spec).expect("YAML")).expect("writing tests");
    let (ok, out) = run(&["test", "rules"], &file);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "promtool test rules:\n{out}");
}

/// Every reason a gate can stall on raises the Stalled alert, naming the resource and the reason:
/// the reasons are those the operator writes on `Stalled=True` for a failed gate.
#[test]
fn every_stalled_reason_raises_the_stalled_alert() {
    use deepinfer_operator::api::Reason;
    use deepinfer_operator::controller::status::{compute, Gate, Outcome};
    let reasons: Vec<&str> = Reason::ALL
        .iter()
        .filter_map(|reason| {
            let outcome = Outcome {
                spec: Gate::Failed(*reason, "x".into()),
                ..Outcome::default()
            };
            let status = compute(
                None,
                &outcome,
                Some(1),
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-01-05T10:00:00Z".parse().expect("time"),
                ),
            );
            let stalled = status.conditions.iter().find(|c| c.type_ == "Stalled")?;
            (stalled.status == "True" && stalled.reason == reason.as_str()).then(|| reason.as_str())
        })
        .collect();
    assert!(reasons.len() > 20, "{reasons:?}");
    let a = alert("DeepInferDeploymentStalled");
    let series: Vec<Value> = reasons
        .iter()
        .map(|r| {
            json!({
                "series": format!("deepinfer_deployment_stalled{{namespace=\"team\",job=\"deepinfer-operator-metrics\",name=\"d-{}\",reason=\"{r}\"}}", r.to_lowercase()),
                "values": "1x30",
            })
        })
        .collect();
    let expected: Vec<Value> = reasons
        .iter()
        .map(|r| {
            let labels = json!({"namespace": "team", "job": "deepinfer-operator-metrics", "severity": a.severity,
                                "name": format!("d-{}", r.to_lowercase()), "reason": r});
            json!({"exp_annotations": annotations(a, &labels, "1"), "exp_labels": labels})
        })
        .collect();
    let spec = json!({
        "rule_files": [rules_file().display().to_string()],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [{"eval_time": "15m", "alertname": a.name, "exp_alerts": expected}],
        }],
    });
    let dir =
        std::env::temp_dir().join(format!("deepinfer-promtool-stalled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("tests.yaml");
    std::fs::write(&file, serde_yaml::to_string(&spec).expect("YAML")).expect("writing tests");
    let (ok, out) = run(&["test", "rules"], &file);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "promtool test rules, {} reasons:\n{out}", reasons.len());
}
