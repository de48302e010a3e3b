//! The metrics reference (`docs/metrics.md`) and the alerts on the metrics (also the chart's
//! Prometheus rule file), generated from the registry and from [`ALERTS`] so that neither can drift
//! from what `/metrics` serves. Printed by `deepinfer-operator docs metrics` and `docs
//! prometheus-rules` (`make docs`); tests check the committed copies.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::Metrics;
use crate::api::Phase;

/// Path of the committed metrics reference, relative to the repository root.
pub const METRICS_REFERENCE_PATH: &str = "docs/metrics.md";

/// One metric family as the exposition declares it.
#[derive(Default)]
struct FamilyDoc {
    kind: String,
    help: String,
    series: BTreeSet<String>,
    labels: BTreeSet<String>,
}

/// A registry with every family touched once: a labelled family without series is not encoded,
/// so its label names would not show.
fn exercised() -> Metrics {
    let requests = super::ApiRequests::default();
    requests.record("patch", "pods", Some(200), 0.01);
    let metrics = Metrics::new(requests);
    metrics.triggered("ns/name");
    metrics.reconcile_started("ns/name").succeeded();
    metrics.reconcile_failed("kube");
    metrics.observe_status("ns/name", &example_status());
    let mut stalled = example_status();
    stalled.phase = Some(Phase::Pending);
    stalled.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: "Stalled".into(),
        status: "True".into(),
        reason: "LicenseAnnotationMissing".into(),
        message: String::new(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ),
        observed_generation: None,
    }];
    metrics.observe_status("ns/stalled", &stalled);
    metrics.acceptance_finished("Passed", 1.0);
    metrics.count_caches(Box::new(|| vec![("Pod", 0)]));
    metrics
}

/// A status with one role and a verdict, so that every per-deployment family shows.
pub fn example_status() -> crate::api::DeepInferDeploymentStatus {
    crate::api::DeepInferDeploymentStatus {
        phase: Some(Phase::Ready),
        roles: vec![crate::api::RoleStatus {
            name: "worker".into(),
            desired_groups: 2,
            ready_groups: 2,
            updated_groups: 2,
            ..Default::default()
        }],
        acceptance: Some(crate::api::AcceptanceStatus {
            result: crate::api::AcceptanceResult::Passed,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The metrics reference in Markdown, generated from the registry itself (every metric family,
/// its series, type, labels and help), so that it cannot drift from what `/metrics` serves.
/// Printed by `deepinfer-operator docs metrics`, committed as `docs/metrics.md` (`make docs`).
pub fn metrics_reference() -> String {
    let text = exercised().encode().unwrap_or_default();

    // The exposition lists each family as HELP, TYPE, then its samples.
    let mut families: Vec<FamilyDoc> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let help = rest.split_once(' ').map(|(_, h)| h).unwrap_or("");
            families.push(FamilyDoc {
                help: help.to_string(),
                ..FamilyDoc::default()
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(doc) = families.last_mut() {
                doc.kind = rest
                    .split_once(' ')
                    .map(|(_, k)| k)
                    .unwrap_or("")
                    .to_string();
            }
        } else if !line.starts_with('#') {
            let Some(doc) = families.last_mut() else {
                continue;
            };
            let sample = line.split(' ').next().unwrap_or(line);
            let (series, labels) = sample.split_once('{').unwrap_or((sample, ""));
            doc.series.insert(series.to_string());
            let labels = labels.trim_end_matches('}').split(',');
            let names = labels.filter_map(|pair| pair.split_once('=').map(|(label, _)| label));
            doc.labels
                .extend(names.filter(|l| *l != "le").map(str::to_string));
        }
    }

    let mut out = String::new();
    out.push_str("# Metrics\n\n");
    out.push_str(
        "<!-- Generated from the operator's metric registry by `deepinfer-operator docs metrics` (`make docs`); do not edit. -->\n\n",
    );
    out.push_str(
        "The operator serves these on `/metrics` (OpenMetrics text) at `--metrics-address`; the Helm \
         chart exposes them through the metrics Service and, if enabled, a ServiceMonitor. Every \
         replica serves its own: with leader election, only the leader's counters move.\n\n\
         The endpoints are HTTPS by default (the certificate of `--metrics-cert-dir`, else a \
         self-signed one made at start), and `/metrics` answers only a bearer token the API server \
         authenticates (TokenReview) for a caller allowed to `get` the non-resource URL \
         `/metrics` (SubjectAccessReview): 401 without one, 403 for a caller without the grant; \
         `/healthz` and `/readyz` need none. The operator needs `create` on \
         `tokenreviews.authentication.k8s.io` and `subjectaccessreviews.authorization.k8s.io` (the \
         chart's and kustomize's ClusterRole `…-metrics-auth`); a scraper needs the ClusterRole \
         `…-metrics-reader` bound to its ServiceAccount, and the chart's ServiceMonitor scrapes \
         with Prometheus' own token. `--metrics-secure=false` (chart: `metrics.secure: false`) \
         serves plain HTTP to anyone who reaches the port.\n\n\
         The per-deployment series (`deepinfer_deployment_*`) name the resource's own namespace in \
         `namespace`. Prometheus keeps it only when the scrape honours the target's labels: the \
         chart's ServiceMonitor sets `honorLabels: true` (as kube-state-metrics does); a scrape \
         configured by hand needs `honor_labels: true`, or its `namespace` is the operator's and the \
         resource's becomes `exported_namespace` (a real Prometheus scraping as the ServiceMonitor \
         does shows both: bed test \
         `metrics::prometheus_scraping_as_the_service_monitor_does_keeps_each_resource_namespace`).\n\n",
    );
    out.push_str("| Series | Type | Labels | Meaning |\n|---|---|---|---|\n");
    for doc in &families {
        let series: Vec<String> = doc.series.iter().map(|s| format!("`{s}`")).collect();
        let labels: Vec<String> = doc.labels.iter().map(|l| format!("`{l}`")).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            series.join("<br>"),
            doc.kind,
            labels.join(", "),
            doc.help.trim_end_matches('.')
        );
    }
    out.push_str(&alerts_section());
    out
}

/// An alert on the operator's metrics, rendered into `docs/metrics.md` and into the Prometheus
/// rule file the chart ships (`metrics.prometheusRule.enabled`). Every expression aggregates
/// `by (namespace, job)`: one installation's replicas together, installations apart.
pub struct Alert {
    /// Alert name.
    pub name: &'static str,
    /// Short title for the docs table.
    pub title: &'static str,
    /// PromQL; fires while it returns series.
    pub expr: &'static str,
    /// How long the expression must hold before the alert fires (Prometheus `for`).
    pub for_: Option<&'static str>,
    /// `severity` label.
    pub severity: &'static str,
    /// One line for the notification.
    pub summary: &'static str,
    /// What it means and where to look (Markdown; links are relative to docs/).
    pub meaning: &'static str,
}

/// The alerts worth having.
pub const ALERTS: &[Alert] = &[
    Alert {
        name: "DeepInferOperatorNoLeader",
        title: "No leader",
        expr: "sum by (namespace, job) (deepinfer_leader) < 1",
        for_: Some("2m"),
        severity: "critical",
        summary: "No deepinfer-operator replica is reconciling",
        meaning: "Replicas run but none holds the leader Lease: nothing converges and no status changes. Each replica's log says why it does not lead (usually it cannot read or renew the Lease: the `leases` rule of its Role).",
    },
    Alert {
        name: "DeepInferOperatorTwoLeaders",
        title: "Two leaders",
        expr: "sum by (namespace, job) (deepinfer_leader) > 1",
        for_: Some("1m"),
        severity: "critical",
        summary: "More than one deepinfer-operator replica is reconciling",
        meaning: "Two replicas reconcile the same resources at once, which leader election prevents: check that every replica runs with `--leader-elect` and the same `--leader-election-id`.",
    },
    Alert {
        name: "DeepInferReconcileFailing",
        title: "Reconciles failing",
        expr: "sum by (namespace, job, error) (rate(deepinfer_reconcile_failures_total[5m])) > 0",
        for_: Some("15m"),
        severity: "warning",
        summary: "deepinfer-operator reconciles keep failing ({{ $labels.error }})",
        meaning: "The operator keeps retrying API calls that fail; the `error` label says which kind and the log names the call. Often RBAC: see the [ApplyFailed](runbooks.md#applyfailed) runbook.",
    },
    Alert {
        name: "DeepInferDeploymentStalled",
        title: "Resource stalled",
        expr: "max by (namespace, name, reason, job) (deepinfer_deployment_stalled) > 0",
        for_: Some("10m"),
        severity: "warning",
        summary: "DeepInferDeployment {{ $labels.namespace }}/{{ $labels.name }} is Stalled ({{ $labels.reason }}) and needs a person",
        meaning: "A resource is `Stalled=True`, whatever its phase (a licence not accepted, a child the API server refused, a failed candidate, an invalid spec): it will not make progress until someone changes it or the cluster. `kubectl -n <namespace> describe did <name>`, then the [runbook](runbooks.md) of the reason the alert names. The labels name the resource's own namespace (the chart's ServiceMonitor honours the operator's labels).",
    },
    Alert {
        name: "DeepInferAcceptanceFailed",
        title: "Acceptance failing",
        expr: "sum by (namespace, job) (increase(deepinfer_acceptance_runs_total{result=\"Failed\"}[1h])) > 0",
        for_: None,
        severity: "warning",
        summary: "A DeepInfer revision failed its acceptance workload",
        meaning: "A revision failed acceptance and was not rolled out (the accepted one keeps serving); the evidence ConfigMap holds every output ([AcceptanceFailed](runbooks.md#acceptancefailed) runbook).",
    },
    Alert {
        name: "DeepInferAPIRequestsFailing",
        title: "API requests failing",
        expr: "sum by (namespace, job) (rate(deepinfer_api_requests_total{code=~\"5..|429|error\"}[5m])) > 0.1",
        for_: Some("15m"),
        severity: "warning",
        summary: "The API server keeps failing or throttling deepinfer-operator's requests",
        meaning: "Requests end in 5xx, 429 (API priority and fairness) or no answer at all: reconciles slow down or fail. `deepinfer_api_requests_total` names the verb and resource; check the API server's health and its flow-control settings for the operator's ServiceAccount.",
    },
    Alert {
        name: "DeepInferAPIWritesSlow",
        title: "API writes slow",
        expr: "histogram_quantile(0.99, sum by (namespace, job, le) (rate(deepinfer_api_request_duration_seconds_bucket{verb=~\"create|update|patch|delete\"}[10m]))) > 1",
        for_: Some("15m"),
        severity: "warning",
        summary: "The 99th percentile of deepinfer-operator's API writes is above 1 s",
        meaning: "Kubernetes' own SLO for mutating calls is p99 at most 1 s; above it, every reconcile pass waits on the API server and resources converge slowly. Look at the API server's and etcd's load, admission webhooks, and `deepinfer_active_reconciles`.",
    },
    Alert {
        name: "DeepInferReconcileLagging",
        title: "Reconciles lagging",
        expr: "histogram_quantile(0.99, sum by (namespace, job, le) (rate(deepinfer_watch_event_to_reconcile_seconds_bucket[10m]))) > 30",
        for_: Some("15m"),
        severity: "warning",
        summary: "deepinfer-operator starts the reconcile of a change more than 30 s after seeing it",
        meaning: "A pass starts as soon as a watch event arrives unless one is still running for the same resource or `--max-concurrent-reconciles` passes are running, so changes wait for slow passes: look at `deepinfer_reconcile_duration_seconds`, `deepinfer_reconcile_queue_depth`, `deepinfer_active_reconciles` and the API server's latency (`DeepInferAPIWritesSlow`).",
    },
    Alert {
        name: "DeepInferOperatorWriteStorm",
        title: "Write storm",
        expr: "sum by (namespace, job) (rate(deepinfer_api_writes_total[10m])) > 1",
        for_: Some("30m"),
        severity: "warning",
        summary: "deepinfer-operator keeps writing to the API server",
        meaning: "A converged operator writes nothing; more than one write a second for half an hour means something keeps undoing its objects (another controller, a mutating webhook) or resources keep changing.",
    },
];

/// Path of the committed rule file the chart ships, relative to the repository root.
pub const PROMETHEUS_RULES_PATH: &str = "charts/deepinfer-operator/files/prometheus-rules.yaml";

/// [`ALERTS`] as a Prometheus rule file (`groups:`), also the `spec` of the chart's
/// PrometheusRule. Printed by `deepinfer-operator docs prometheus-rules` (`make docs`).
pub fn prometheus_rules() -> String {
    let rules: Vec<serde_json::Value> = ALERTS
        .iter()
        .map(|a| {
            let mut rule = serde_json::json!({
                "alert": a.name,
                "expr": a.expr,
                "labels": {"severity": a.severity},
                "annotations": {
                    "summary": a.summary,
                    "description": strip_links(a.meaning),
                },
            });
            if let Some(duration) = a.for_ {
                rule["for"] = duration.into();
            }
            rule
        })
        .collect();
    let groups = serde_json::json!({"groups": [{"name": "deepinfer-operator", "rules": rules}]});
    let body = serde_yaml::to_string(&groups).expect("rules always serialise to YAML");
    format!(
        "# Generated from src/metrics/reference.rs by `deepinfer-operator docs prometheus-rules` (`make docs`); do not edit.\n{body}"
    )
}

/// Markdown links `[text](target)` as `text (docs/target)`, for plain-text annotations.
fn strip_links(markdown: &str) -> String {
    let mut out = String::new();
    let mut rest = markdown;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](").map(|m| open + m) else {
            break;
        };
        let Some(close) = rest[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..mid]);
        out.push_str(&format!(" (docs/{})", &rest[mid + 2..close]));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The alerts section of the metrics reference.
fn alerts_section() -> String {
    let mut out = String::from(
        "\n## Alerts worth having\n\nThe Helm chart ships these as a PrometheusRule with \
         `--set metrics.prometheusRule.enabled=true` (rule file: \
         `charts/deepinfer-operator/files/prometheus-rules.yaml`); each aggregates \
         `by (namespace, job)`, so installations are judged apart.\n\n\
         | Alert | Expression | For | Severity | What it means, where to look |\n|---|---|---|---|---|\n",
    );
    for a in ALERTS {
        let _ = writeln!(
            out,
            "| {} (`{}`) | `{}` | {} | {} | {} |",
            a.title,
            a.name,
            a.expr,
            a.for_.unwrap_or("—"),
            a.severity,
            a.meaning
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_documents_every_family_with_its_labels() {
        let doc = metrics_reference();
        for row in [
            "| `deepinfer_reconciles_total` | counter |  | Reconcile passes started |",
            "| `deepinfer_reconcile_failures_total` | counter | `error` |",
            "| `deepinfer_resources` | gauge | `phase` |",
            "| `deepinfer_acceptance_runs_total` | counter | `result` |",
            "| `deepinfer_leader` | gauge |  |",
            "| `deepinfer_api_writes_total` | counter |  |",
            "| `deepinfer_status_writes_total` | counter | `cause` |",
            "| `deepinfer_active_reconciles` | gauge |  |",
            "| `deepinfer_reconcile_queue_depth` | gauge |  |",
            "`deepinfer_watch_event_to_reconcile_seconds_bucket`<br>`deepinfer_watch_event_to_reconcile_seconds_count`<br>`deepinfer_watch_event_to_reconcile_seconds_sum` | histogram |  |",
            "| `deepinfer_api_requests_total` | counter | `code`, `resource`, `verb` |",
            "| histogram | `resource`, `verb` |",
            "`deepinfer_acceptance_duration_seconds_bucket`<br>`deepinfer_acceptance_duration_seconds_count`<br>`deepinfer_acceptance_duration_seconds_sum` | histogram |",
            "`deepinfer_reconcile_duration_seconds_bucket`<br>`deepinfer_reconcile_duration_seconds_count`<br>`deepinfer_reconcile_duration_seconds_sum` | histogram | `result` |",
        ] {
            assert!(doc.contains(row), "missing {row} in:\n{doc}");
        }
    }
}
