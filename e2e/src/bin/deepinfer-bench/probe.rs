//! What one phase cost: wall time, API requests by verb and resource (from the client's request
//! counters, `deepinfer_api_requests_total`), reconcile passes, CPU seconds of every process
//! involved and the operator's resident memory.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deepinfer_e2e::operator_process::get;
use deepinfer_operator::metrics::Metrics;

use crate::bed;

/// Value of one series in an exposition; NaN when absent.
pub fn value(exposition: &str, series: &str) -> f64 {
    deepinfer_e2e::operator_process::sample(exposition, series).unwrap_or(f64::NAN)
}

/// Series `name` of the reconcile duration histogram summed over results (`success`, `error`).
fn over_results(exposition: &str, name: &str) -> f64 {
    ["success", "error"]
        .iter()
        .filter_map(|r| {
            deepinfer_e2e::operator_process::sample(
                exposition,
                &format!("{name}{{result=\"{r}\"}}"),
            )
        })
        .sum()
}

/// Reconcile passes that ended (successfully or not).
pub fn passes_ended(exposition: &str) -> f64 {
    over_results(exposition, "deepinfer_reconcile_duration_seconds_count")
}

/// `deepinfer_api_requests_total` summed over codes: `"verb resource"` → requests, and the
/// requests answered with anything but 2xx.
fn requests(exposition: &str) -> (BTreeMap<String, f64>, f64) {
    let mut by_verb = BTreeMap::new();
    let mut failed = 0.0;
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("deepinfer_api_requests_total{") else {
            continue;
        };
        let Some((labels, count)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == name).then(|| v.trim_matches('"').to_string())
            })
        };
        let count: f64 = count
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0.0);
        let key = format!(
            "{} {}",
            label("verb").unwrap_or_default(),
            label("resource").unwrap_or_default()
        );
        *by_verb.entry(key).or_insert(0.0) += count;
        if !label("code").is_some_and(|c| c.starts_with('2')) {
            failed += count;
        }
    }
    (by_verb, failed)
}

/// Where a phase's request counters come from.
enum Source {
    /// The operator process's `/metrics`.
    Operator { pid: u32, address: SocketAddr },
    /// The floor's client, in this process.
    Client(Arc<Metrics>),
}

impl Source {
    async fn exposition(&self) -> String {
        match self {
            Source::Operator { address, .. } => get(*address, "/metrics")
                .await
                .map(|r| r.body)
                .unwrap_or_default(),
            Source::Client(metrics) => metrics.encode().unwrap_or_default(),
        }
    }
}

/// A phase being measured.
pub struct Probe {
    name: String,
    resources: usize,
    source: Source,
    agent: u32,
    start: Instant,
    baseline: String,
    operator_cpu: f64,
    agent_cpu: f64,
    bed_cpu: Vec<(String, u32, f64)>,
    rss_start: f64,
    rss_peak: f64,
}

/// The figures of one phase.
#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PhaseFigures {
    pub name: String,
    /// Seconds from the phase's first request until every resource converged.
    pub seconds: f64,
    /// API requests per resource, by `"verb resource"`.
    pub requests_per_resource: BTreeMap<String, f64>,
    /// Requests answered with anything but 2xx (conflicts, not-found), in all.
    pub failed_requests: f64,
    /// Mutating requests per resource.
    pub writes_per_resource: f64,
    /// Reconcile passes per resource (operator phases only).
    pub reconciles_per_resource: Option<f64>,
    /// Mean wall time of one pass, ms (operator phases only).
    pub mean_reconcile_ms: Option<f64>,
    /// CPU seconds of the operator process (operator phases only).
    pub operator_cpu_seconds: Option<f64>,
    /// Operator RSS at the start, sampled peak and end, MiB (operator phases only).
    pub operator_rss_mib: Option<[f64; 3]>,
    /// CPU seconds and RSS (MiB, at the end) of the benchmark's node agent.
    pub node_agent_cpu_seconds: f64,
    pub node_agent_rss_mib: f64,
    /// CPU seconds of each of the bed's processes (API server, etcd, scheduler, …).
    pub bed_cpu_seconds: BTreeMap<String, f64>,
}

impl Probe {
    fn new(name: &str, resources: usize, source: Source, agent: u32, baseline: String) -> Self {
        let (operator_cpu, rss) = match &source {
            Source::Operator { pid, .. } => (bed::cpu_seconds(*pid), bed::rss_mib(*pid)),
            Source::Client(_) => (f64::NAN, f64::NAN),
        };
        Self {
            name: name.to_string(),
            resources,
            source,
            agent,
            start: Instant::now(),
            baseline,
            operator_cpu,
            agent_cpu: bed::cpu_seconds(agent),
            bed_cpu: bed::bed_processes()
                .into_iter()
                .map(|(name, pid)| (name, pid, bed::cpu_seconds(pid)))
                .collect(),
            rss_start: rss,
            rss_peak: rss,
        }
    }

    /// Starts measuring a phase of the running operator at `address`.
    pub async fn start(
        name: &str,
        resources: usize,
        operator: (u32, SocketAddr),
        agent: u32,
    ) -> Self {
        let (pid, address) = operator;
        let source = Source::Operator { pid, address };
        let baseline = source.exposition().await;
        Self::new(name, resources, source, agent, baseline)
    }

    /// Starts measuring a phase of an operator process that just started (its counters and
    /// CPU time start at zero).
    pub fn start_fresh(
        name: &str,
        resources: usize,
        pid: u32,
        address: SocketAddr,
        agent: u32,
    ) -> Self {
        let mut probe = Self::new(
            name,
            resources,
            Source::Operator { pid, address },
            agent,
            String::new(),
        );
        probe.operator_cpu = 0.0;
        probe
    }

    /// Starts measuring a phase of the floor's client, whose request counters `metrics` exports.
    pub async fn start_client(
        name: &str,
        resources: usize,
        metrics: Arc<Metrics>,
        agent: u32,
    ) -> Self {
        let source = Source::Client(metrics);
        let baseline = source.exposition().await;
        Self::new(name, resources, source, agent, baseline)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Samples the operator's resident memory for the peak.
    pub fn sample(&mut self) {
        if let Source::Operator { pid, .. } = &self.source {
            self.rss_peak = self.rss_peak.max(bed::rss_mib(*pid));
        }
    }

    /// Ends the phase now.
    pub async fn finish(mut self) -> PhaseFigures {
        let seconds = self.start.elapsed().as_secs_f64();
        self.sample();
        let end = self.source.exposition().await;
        let per = |v: f64| v / self.resources as f64;
        let (before, failed_before) = requests(&self.baseline);
        let (after, failed_after) = requests(&end);
        let requests_per_resource: BTreeMap<String, f64> = after
            .iter()
            .map(|(k, v)| (k.clone(), per(v - before.get(k).copied().unwrap_or(0.0))))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        let diff = |series: &str| {
            let b = value(&self.baseline, series);
            value(&end, series) - if b.is_nan() { 0.0 } else { b }
        };
        let both = |series: &str| over_results(&end, series) - over_results(&self.baseline, series);
        let (reconciles_per_resource, mean_reconcile_ms, operator_cpu_seconds, operator_rss_mib) =
            match &self.source {
                Source::Operator { pid, .. } => (
                    Some(per(diff("deepinfer_reconciles_total"))),
                    Some(
                        1000.0 * both("deepinfer_reconcile_duration_seconds_sum")
                            / both("deepinfer_reconcile_duration_seconds_count"),
                    ),
                    Some(bed::cpu_seconds(*pid) - self.operator_cpu),
                    Some([self.rss_start, self.rss_peak, bed::rss_mib(*pid)]),
                ),
                Source::Client(_) => (None, None, None, None),
            };
        PhaseFigures {
            name: self.name.clone(),
            seconds,
            requests_per_resource,
            failed_requests: failed_after - failed_before,
            writes_per_resource: per(diff("deepinfer_api_writes_total")),
            reconciles_per_resource,
            mean_reconcile_ms,
            operator_cpu_seconds,
            operator_rss_mib,
            node_agent_cpu_seconds: bed::cpu_seconds(self.agent) - self.agent_cpu,
            node_agent_rss_mib: bed::rss_mib(self.agent),
            bed_cpu_seconds: self
                .bed_cpu
                .iter()
                .map(|(name, pid, cpu)| (name.clone(), bed::cpu_seconds(*pid) - cpu))
                .collect(),
        }
    }
}

impl PhaseFigures {
    /// Prints the phase as a few lines of text, and returns it.
    pub fn printed(self) -> Self {
        println!(
            "bench: phase {}: converged in {:.1} s",
            self.name, self.seconds
        );
        let requests: Vec<String> = self
            .requests_per_resource
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        println!(
            "bench:   API requests per resource: {} (writes {:.2}; {} answered non-2xx)",
            requests.join(", "),
            self.writes_per_resource,
            self.failed_requests
        );
        if let (Some(r), Some(ms), Some(cpu), Some([start, peak, end])) = (
            self.reconciles_per_resource,
            self.mean_reconcile_ms,
            self.operator_cpu_seconds,
            self.operator_rss_mib,
        ) {
            println!(
                "bench:   operator: {r:.2} reconciles per resource, mean pass {ms:.1} ms, {cpu:.1} CPU s, RSS {start:.1} / peak {peak:.1} / end {end:.1} MiB"
            );
        }
        let bed: Vec<String> = self
            .bed_cpu_seconds
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect();
        println!(
            "bench:   node agent {:.1} CPU s, RSS {:.1} MiB; bed CPU s: {}",
            self.node_agent_cpu_seconds,
            self.node_agent_rss_mib,
            bed.join(", ")
        );
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_summed_over_codes_and_failures_counted() {
        let text = "deepinfer_api_requests_total{verb=\"patch\",resource=\"pods/status\",code=\"200\"} 3\n\
                    deepinfer_api_requests_total{verb=\"patch\",resource=\"pods/status\",code=\"409\"} 1\n\
                    deepinfer_api_requests_total{verb=\"list\",resource=\"pods\",code=\"200\"} 2\n\
                    deepinfer_api_writes_total 4\n";
        let (by_verb, failed) = requests(text);
        assert_eq!(by_verb["patch pods/status"], 4.0);
        assert_eq!(by_verb["list pods"], 2.0);
        assert_eq!(failed, 1.0);
    }
}
