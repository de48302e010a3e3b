//! Prometheus metrics of the operator, all in one [`Registry`] under the `deepinfer_` prefix.
//!
//! The reconciler records passes, durations, failures and the phase of every resource it has
//! seen; the acceptance gate records runs; the client's write counter is read at scrape time.
//! [`crate::telemetry`] serves [`Metrics::encode`] on `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::api::Phase;

/// Every phase, so the phase gauge exports zeros rather than missing series.
const PHASES: [Phase; 6] = [
    Phase::Pending,
    Phase::Verifying,
    Phase::Accepting,
    Phase::Provisioning,
    Phase::Ready,
    Phase::Failed,
];

/// Label value of a phase, as spelled in `status.phase`.
pub fn phase_label(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "Pending",
        Phase::Verifying => "Verifying",
        Phase::Accepting => "Accepting",
        Phase::Provisioning => "Provisioning",
        Phase::Ready => "Ready",
        Phase::Failed => "Failed",
    }
}

/// `{error="…"}`: the failing error's [`crate::controller::Error::metric_label`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: String,
}

/// `{phase="…"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

/// `{result="…"}`: `Passed` or `Failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

/// The operator's metrics and the registry that exports them.
#[derive(Debug)]
pub struct Metrics {
    /// Registry holding every metric below; encoded on each scrape.
    registry: Registry,
    /// `deepinfer_reconciles_total`: reconcile passes started.
    reconciles: Counter,
    /// `deepinfer_reconcile_duration_seconds`: wall time of one reconcile pass.
    reconcile_duration: Histogram,
    /// `deepinfer_reconcile_failures_total{error}`: passes that returned an error, by kind.
    failures: Family<ErrorLabels, Counter>,
    /// `deepinfer_resources{phase}`: DeepInferDeployments last seen in each phase.
    resources: Family<PhaseLabels, Gauge>,
    /// Last phase per `namespace/name`, so a phase change moves one count between gauges.
    phases: Mutex<HashMap<String, Phase>>,
    /// `deepinfer_acceptance_runs_total{result}`: finished acceptance runs by result.
    acceptance_runs: Family<ResultLabels, Counter>,
    /// `deepinfer_acceptance_duration_seconds`: wall time of one acceptance run.
    acceptance_duration: Histogram,
    /// `deepinfer_leader`: 1 while this instance reconciles (holds the leader Lease, or runs
    /// without leader election), else 0.
    leader: Gauge,
}

/// Exports the client's write counter as `deepinfer_api_writes_total` at scrape time.
#[derive(Debug)]
struct WritesCollector(Arc<AtomicU64>);

impl Collector for WritesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(self.0.load(Ordering::Relaxed));
        let metric = encoder.encode_descriptor(
            "api_writes",
            "Mutating Kubernetes API requests (everything but GET) sent by the operator.",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)
    }
}

impl Metrics {
    /// Registers every metric; `writes` is the client's mutating-request counter.
    /// (Help texts carry no final period: the encoder appends one.)
    pub fn new(writes: Arc<AtomicU64>) -> Self {
        let mut registry = Registry::with_prefix("deepinfer");
        let reconciles = Counter::default();
        registry.register("reconciles", "Reconcile passes started", reconciles.clone());
        // 5 ms to ~20 s: a pass is a handful of API calls, a slow API server stretches it.
        let reconcile_duration = Histogram::new([
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
        ]);
        registry.register_with_unit(
            "reconcile_duration",
            "Wall time of one reconcile pass",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let failures = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_failures",
            "Reconcile passes that failed and were retried, by error kind",
            failures.clone(),
        );
        let resources = Family::<PhaseLabels, Gauge>::default();
        for phase in PHASES {
            resources.get_or_create_owned(&PhaseLabels {
                phase: phase_label(phase),
            });
        }
        registry.register(
            "resources",
            "DeepInferDeployments by status.phase, as last reconciled",
            resources.clone(),
        );
        let acceptance_runs = Family::<ResultLabels, Counter>::default();
        for result in ["Passed", "Failed"] {
            acceptance_runs.get_or_create_owned(&ResultLabels {
                result: result.to_string(),
            });
        }
        registry.register(
            "acceptance_runs",
            "Finished acceptance runs by result (Passed or Failed)",
            acceptance_runs.clone(),
        );
        // 10 s to ~1.5 h: a run loads the model and answers every prompt.
        let acceptance_duration = Histogram::new([
            10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 2400.0, 5400.0,
        ]);
        registry.register_with_unit(
            "acceptance_duration",
            "Wall time of one acceptance run",
            Unit::Seconds,
            acceptance_duration.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this instance reconciles (holds the leader Lease, or runs without leader election), else 0",
            leader.clone(),
        );
        registry.register_collector(Box::new(WritesCollector(writes)));
        Self {
            registry,
            reconciles,
            reconcile_duration,
            failures,
            resources,
            phases: Mutex::new(HashMap::new()),
            acceptance_runs,
            acceptance_duration,
            leader,
        }
    }

    /// Records whether this instance reconciles now.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Counts a reconcile pass; its duration is recorded when the returned guard drops.
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer {
            histogram: &self.reconcile_duration,
            start: Instant::now(),
        }
    }

    /// Counts a failed pass under its error kind.
    pub fn reconcile_failed(&self, error: &str) {
        self.failures
            .get_or_create(&ErrorLabels {
                error: error.to_string(),
            })
            .inc();
    }

    /// Records the phase of the resource `key` (`namespace/name`); `None` forgets it.
    pub fn observe_phase(&self, key: &str, phase: Option<Phase>) {
        let Some(phase) = phase else {
            return self.forget(key);
        };
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        let previous = phases.insert(key.to_string(), phase);
        if previous != Some(phase) {
            if let Some(old) = previous {
                self.gauge(old).dec();
            }
            self.gauge(phase).inc();
        }
    }

    /// Drops a deleted resource from the phase gauge.
    pub fn forget(&self, key: &str) {
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = phases.remove(key) {
            self.gauge(old).dec();
        }
    }

    /// Forgets every resource for which `live` is false (objects deleted without a last pass).
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        phases.retain(|key, phase| {
            let keep = live(key);
            if !keep {
                self.gauge(*phase).dec();
            }
            keep
        });
    }

    /// Records a finished acceptance run: `result` is `Passed` or `Failed`.
    pub fn acceptance_finished(&self, result: &str, seconds: f64) {
        self.acceptance_runs
            .get_or_create(&ResultLabels {
                result: result.to_string(),
            })
            .inc();
        self.acceptance_duration.observe(seconds);
    }

    /// The registry in the OpenMetrics text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    fn gauge(&self, phase: Phase) -> Gauge {
        self.resources.get_or_create_owned(&PhaseLabels {
            phase: phase_label(phase),
        })
    }
}

/// Path of the committed metrics reference, relative to the repository root.
pub const METRICS_REFERENCE_PATH: &str = "docs/metrics.md";

/// One metric family as the exposition declares it.
#[derive(Default)]
struct FamilyDoc {
    kind: String,
    help: String,
    series: std::collections::BTreeSet<String>,
    labels: std::collections::BTreeSet<String>,
}

/// A registry with every family touched once: a labelled family without series is not encoded,
/// so its label names would not show.
fn exercised() -> Metrics {
    let metrics = Metrics::new(Arc::new(AtomicU64::new(0)));
    drop(metrics.reconcile_started());
    metrics.reconcile_failed("kube");
    metrics.observe_phase("ns/name", Some(Phase::Ready));
    metrics.acceptance_finished("Passed", 1.0);
    metrics
}

/// The metrics reference in Markdown, generated from the registry itself (every metric family,
/// its series, type, labels and help), so that it cannot drift from what `/metrics` serves.
/// Printed by `deepinfer-operator docs metrics`, committed as `docs/metrics.md` (`make docs`).
pub fn reference() -> String {
    use std::fmt::Write as _;
    let text = exercised().encode().unwrap_or_default();

    let mut order: Vec<String> = Vec::new();
    let mut families: HashMap<String, FamilyDoc> = HashMap::new();
    for line in text.lines() {
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("#"), Some("HELP"), Some(name), help) => {
                if !families.contains_key(name) {
                    order.push(name.to_string());
                }
                families.entry(name.to_string()).or_default().help =
                    help.unwrap_or_default().to_string();
            }
            (Some("#"), Some("TYPE"), Some(name), kind) => {
                families.entry(name.to_string()).or_default().kind =
                    kind.unwrap_or_default().to_string();
            }
            (Some(first), ..) if !first.starts_with('#') => {
                let series = first.split('{').next().unwrap_or(first);
                let Some(family) = order.iter().rev().find(|f| series.starts_with(f.as_str()))
                else {
                    continue;
                };
                let doc = families.entry(family.clone()).or_default();
                doc.series.insert(series.to_string());
                if let Some(labels) = first.split_once('{').map(|(_, l)| l.trim_end_matches('}')) {
                    for pair in labels.split(',') {
                        if let Some((label, _)) = pair.split_once('=') {
                            if label != "le" {
                                doc.labels.insert(label.to_string());
                            }
                        }
                    }
                }
            }
            _ => {}
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
         replica serves its own: with leader election, only the leader's counters move.\n\n",
    );
    out.push_str("| Series | Type | Labels | Meaning |\n|---|---|---|---|\n");
    for name in &order {
        let doc = &families[name];
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
        name: "DeepInferDeploymentFailed",
        title: "Resources failed",
        expr: "max by (namespace, job) (deepinfer_resources{phase=\"Failed\"}) > 0",
        for_: Some("10m"),
        severity: "warning",
        summary: "{{ $value }} DeepInferDeployment(s) are Stalled and need a person",
        meaning: "A resource is `Stalled=True`: it will not make progress until someone changes it or the cluster. `kubectl get did -A`, then the [runbook](runbooks.md) of its reason.",
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
        "# Generated from src/metrics.rs by `deepinfer-operator docs prometheus-rules` (`make docs`); do not edit.\n{body}"
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
    use std::fmt::Write as _;
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

/// Records the duration of one reconcile pass when dropped, whichever way the pass ends.
pub struct ReconcileTimer<'a> {
    histogram: &'a Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_documents_every_family_with_its_labels() {
        let doc = reference();
        for row in [
            "| `deepinfer_reconciles_total` | counter |  | Reconcile passes started |",
            "| `deepinfer_reconcile_failures_total` | counter | `error` |",
            "| `deepinfer_resources` | gauge | `phase` |",
            "| `deepinfer_acceptance_runs_total` | counter | `result` |",
            "| `deepinfer_leader` | gauge |  |",
            "| `deepinfer_api_writes_total` | counter |  |",
            "`deepinfer_reconcile_duration_seconds_bucket`<br>`deepinfer_reconcile_duration_seconds_count`<br>`deepinfer_reconcile_duration_seconds_sum` | histogram |",
        ] {
            assert!(doc.contains(row), "missing {row} in:\n{doc}");
        }
        // One row per family of the exposition.
        let live = exercised().encode().expect("encodes");
        let families = live.lines().filter(|l| l.starts_with("# HELP ")).count();
        let rows = doc
            .lines()
            .filter(|l| l.starts_with("| `deepinfer_"))
            .count();
        assert_eq!(rows, families, "{doc}");
    }

    fn line<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .map(|l| &l[series.len() + 1..])
    }

    #[test]
    fn reconcile_metrics_count_passes_durations_and_failures() {
        let m = Metrics::new(Arc::default());
        drop(m.reconcile_started());
        drop(m.reconcile_started());
        m.reconcile_failed("kube");
        let text = m.encode().unwrap();
        assert_eq!(line(&text, "deepinfer_reconciles_total"), Some("2"));
        assert_eq!(
            line(&text, "deepinfer_reconcile_duration_seconds_count"),
            Some("2")
        );
        assert!(text.contains("# TYPE deepinfer_reconcile_duration_seconds histogram"));
        assert_eq!(
            line(&text, r#"deepinfer_reconcile_failures_total{error="kube"}"#),
            Some("1")
        );
        assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends with EOF");
        assert!(!text.contains(".."), "help texts end in one period: {text}");
    }

    #[test]
    fn phase_gauge_moves_with_each_resource_and_forgets_deleted_ones() {
        let m = Metrics::new(Arc::default());
        let series = |p: &str| format!(r#"deepinfer_resources{{phase="{p}"}}"#);
        m.observe_phase("a/one", Some(Phase::Pending));
        m.observe_phase("a/two", Some(Phase::Pending));
        m.observe_phase("a/two", Some(Phase::Pending));
        let text = m.encode().unwrap();
        assert_eq!(line(&text, &series("Pending")), Some("2"));
        assert_eq!(line(&text, &series("Ready")), Some("0"), "zeros exported");

        m.observe_phase("a/two", Some(Phase::Verifying));
        m.forget("a/one");
        m.forget("a/unknown");
        let text = m.encode().unwrap();
        assert_eq!(line(&text, &series("Pending")), Some("0"));
        assert_eq!(line(&text, &series("Verifying")), Some("1"));

        m.observe_phase("b/three", Some(Phase::Ready));
        m.retain(|key| key.starts_with("b/"));
        let text = m.encode().unwrap();
        assert_eq!(line(&text, &series("Verifying")), Some("0"));
        assert_eq!(line(&text, &series("Ready")), Some("1"));
        m.observe_phase("b/three", None);
        let text = m.encode().unwrap();
        assert_eq!(line(&text, &series("Ready")), Some("0"));
    }

    #[test]
    fn acceptance_runs_by_result_and_duration() {
        let m = Metrics::new(Arc::default());
        m.acceptance_finished("Passed", 42.0);
        m.acceptance_finished("Failed", 7.5);
        m.acceptance_finished("Passed", 1.0);
        let text = m.encode().unwrap();
        assert_eq!(
            line(&text, r#"deepinfer_acceptance_runs_total{result="Passed"}"#),
            Some("2")
        );
        assert_eq!(
            line(&text, r#"deepinfer_acceptance_runs_total{result="Failed"}"#),
            Some("1")
        );
        assert_eq!(
            line(&text, "deepinfer_acceptance_duration_seconds_count"),
            Some("3")
        );
        assert_eq!(
            line(&text, "deepinfer_acceptance_duration_seconds_sum"),
            Some("50.5")
        );
    }

    #[test]
    fn api_writes_are_read_from_the_client_counter_at_scrape_time() {
        let writes = Arc::new(AtomicU64::new(3));
        let m = Metrics::new(writes.clone());
        assert_eq!(
            line(&m.encode().unwrap(), "deepinfer_api_writes_total"),
            Some("3")
        );
        writes.fetch_add(4, Ordering::Relaxed);
        let text = m.encode().unwrap();
        assert_eq!(line(&text, "deepinfer_api_writes_total"), Some("7"));
        assert!(text.contains("# TYPE deepinfer_api_writes counter"));
    }
}
