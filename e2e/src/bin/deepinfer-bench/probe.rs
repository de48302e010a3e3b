//! What one phase cost: wall time, API requests by verb and resource (from the client's request
//! counters, `deepinfer_api_requests_total`), reconcile passes, how long watch events waited for
//! their pass and how many resources waited at once, CPU seconds of every process involved and
//! the operator's resident memory.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deepinfer_e2e::operator_process::get;
use deepinfer_operator::controller::status::WriteCause;
use deepinfer_operator::metrics::Metrics;

use crate::bed;

/// Value of one series in an exposition; NaN when absent.
pub fn value(exposition: &str, series: &str) -> f64 {
    deepinfer_e2e::operator_process::sample(exposition, series).unwrap_or(f64::NAN)
}

/// The operator's heap, MiB allocated, active, metadata and resident (`deepinfer_heap_bytes`).
fn heap_mib(exposition: &str) -> [f64; 4] {
    ["allocated", "active", "metadata", "resident"].map(|state| {
        value(
            exposition,
            &format!("deepinfer_heap_bytes{{state=\"{state}\"}}"),
        ) / (1024.0 * 1024.0)
    })
}

/// `deepinfer_cached_objects`: objects in each of the operator's caches, by kind.
fn cached_objects(exposition: &str) -> BTreeMap<String, f64> {
    exposition
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("deepinfer_cached_objects{kind=\"")?;
            let (kind, count) = rest.split_once("\"} ")?;
            Some((
                kind.to_string(),
                count.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect()
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

/// Series of the event-to-reconcile histogram.
const EVENT_TO_RECONCILE: &str = "deepinfer_watch_event_to_reconcile_seconds";

/// Cumulative counts of a histogram's buckets in an exposition: (upper bound, count).
fn buckets(exposition: &str, histogram: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{histogram}_bucket{{le=\"");
    exposition
        .lines()
        .filter_map(|l| {
            let (le, count) = l.strip_prefix(&prefix)?.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// Upper bound of the bucket holding quantile `q` of what a histogram observed between two
/// expositions; `None` without observations or beyond the last finite bucket.
fn quantile_bound(before: &str, after: &str, histogram: &str, q: f64) -> Option<f64> {
    let earlier = buckets(before, histogram);
    let counts: Vec<(f64, f64)> = buckets(after, histogram)
        .into_iter()
        .map(|(le, n)| {
            let was = earlier.iter().find(|(l, _)| *l == le).map_or(0.0, |e| e.1);
            (le, n - was)
        })
        .collect();
    let total = counts.last()?.1;
    if total <= 0.0 {
        return None;
    }
    counts
        .iter()
        .find(|(_, n)| *n >= q * total)
        .map(|(le, _)| *le)
        .filter(|le| le.is_finite())
}

/// `deepinfer_api_requests_total` summed over codes: `"verb resource"` → requests, and the
/// requests answered with anything but 2xx: `"verb resource code"` → requests.
fn requests(exposition: &str) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let mut by_verb = BTreeMap::new();
    let mut failed = BTreeMap::new();
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
        let code = label("code").unwrap_or_default();
        if !code.starts_with('2') {
            *failed.entry(format!("{key} {code}")).or_insert(0.0) += count;
        }
        *by_verb.entry(key).or_insert(0.0) += count;
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
    queue_peak: f64,
}

/// The figures of one phase. A figure that could not be measured is NaN (`null` in JSON).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PhaseFigures {
    pub name: String,
    /// Seconds from the phase's first request until every resource converged.
    #[serde(deserialize_with = "nan::read")]
    pub seconds: f64,
    /// API requests per resource, by `"verb resource"`.
    #[serde(deserialize_with = "nan::read")]
    pub requests_per_resource: BTreeMap<String, f64>,
    /// Requests answered with anything but 2xx (conflicts, not-found), in all.
    #[serde(deserialize_with = "nan::read")]
    pub failed_requests: f64,
    /// The same by `"verb resource code"`.
    #[serde(deserialize_with = "nan::read")]
    pub failed_by_request: BTreeMap<String, f64>,
    /// Mutating requests per resource.
    #[serde(deserialize_with = "nan::read")]
    pub writes_per_resource: f64,
    /// The operator's status writes per resource by cause (`deepinfer_status_writes_total`:
    /// `transition`, `progress`, `state`; operator phases only).
    #[serde(default, deserialize_with = "nan::read")]
    pub status_writes_by_cause: Option<BTreeMap<String, f64>>,
    /// Reconcile passes per resource (operator phases only).
    pub reconciles_per_resource: Option<f64>,
    /// Mean wall time of one pass, ms (operator phases only).
    pub mean_reconcile_ms: Option<f64>,
    /// CPU seconds of the operator process (operator phases only).
    pub operator_cpu_seconds: Option<f64>,
    /// Operator RSS at the start, sampled peak and end, MiB (operator phases only).
    #[serde(deserialize_with = "nan::read")]
    pub operator_rss_mib: Option<[f64; 3]>,
    /// The operator's heap at the end, MiB allocated, active (the pages live objects are in),
    /// the allocator's metadata and resident (operator phases only).
    #[serde(deserialize_with = "nan::read")]
    pub operator_heap_mib: Option<[f64; 4]>,
    /// Objects in the operator's caches at the end, by kind (`deepinfer_cached_objects`;
    /// operator phases only).
    #[serde(deserialize_with = "nan::read")]
    pub operator_cached_objects: Option<BTreeMap<String, f64>>,
    /// Most resources waiting for a pass after a watch event at one sample
    /// (`deepinfer_reconcile_queue_depth`, sampled each second; operator phases only).
    pub queue_depth_peak: Option<f64>,
    /// Watch events that started a pass, per resource, and their mean wait until it started, ms
    /// (`deepinfer_watch_event_to_reconcile_seconds`; operator phases only).
    pub events_per_resource: Option<f64>,
    pub event_to_reconcile_mean_ms: Option<f64>,
    /// Upper bound of the bucket holding the 99th percentile of that wait, seconds (`None`
    /// beyond the last finite bucket).
    pub event_to_reconcile_p99_seconds: Option<f64>,
    /// CPU seconds and RSS (MiB, at the end) of the benchmark's node agent.
    #[serde(deserialize_with = "nan::read")]
    pub node_agent_cpu_seconds: f64,
    #[serde(deserialize_with = "nan::read")]
    pub node_agent_rss_mib: f64,
    /// CPU seconds of each of the bed's processes (API server, etcd, scheduler, …).
    #[serde(deserialize_with = "nan::read")]
    pub bed_cpu_seconds: BTreeMap<String, f64>,
}

/// Figures read back from JSON (`--floor-from`), which writes a NaN as `null`.
mod nan {
    use serde::{de::DeserializeOwned, Deserialize, Deserializer};
    use std::collections::BTreeMap;

    /// A figure or a collection of figures, as JSON holds it.
    pub trait Figure: Sized {
        type Written: DeserializeOwned;
        fn read(written: Self::Written) -> Self;
    }

    impl Figure for f64 {
        type Written = Option<f64>;
        fn read(written: Option<f64>) -> f64 {
            written.unwrap_or(f64::NAN)
        }
    }

    impl<const N: usize> Figure for [f64; N]
    where
        [Option<f64>; N]: DeserializeOwned,
    {
        type Written = [Option<f64>; N];
        fn read(written: Self::Written) -> Self {
            written.map(f64::read)
        }
    }

    impl<T: Figure> Figure for Option<T> {
        type Written = Option<T::Written>;
        fn read(written: Self::Written) -> Self {
            written.map(T::read)
        }
    }

    impl<T: Figure> Figure for BTreeMap<String, T> {
        type Written = BTreeMap<String, T::Written>;
        fn read(written: Self::Written) -> Self {
            written.into_iter().map(|(k, v)| (k, T::read(v))).collect()
        }
    }

    pub fn read<'de, D: Deserializer<'de>, T: Figure>(d: D) -> Result<T, D::Error> {
        T::Written::deserialize(d).map(T::read)
    }
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
            queue_peak: 0.0,
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

    /// Samples the operator's resident memory and queue depth for their peaks.
    pub async fn sample(&mut self) {
        if let Source::Operator { pid, .. } = &self.source {
            self.rss_peak = self.rss_peak.max(bed::rss_mib(*pid));
            let depth = value(
                &self.source.exposition().await,
                "deepinfer_reconcile_queue_depth",
            );
            if depth.is_finite() {
                self.queue_peak = self.queue_peak.max(depth);
            }
        }
    }

    /// Ends the phase now.
    pub async fn finish(mut self) -> PhaseFigures {
        let seconds = self.start.elapsed().as_secs_f64();
        self.sample().await;
        let end = self.source.exposition().await;
        let per = |v: f64| v / self.resources as f64;
        let (before, failed_before) = requests(&self.baseline);
        let (after, failed_after) = requests(&end);
        let failed_by_request: BTreeMap<String, f64> = failed_after
            .iter()
            .map(|(k, v)| (k.clone(), v - failed_before.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
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
        let operator = matches!(self.source, Source::Operator { .. });
        let events = diff(&format!("{EVENT_TO_RECONCILE}_count"));
        let waited = diff(&format!("{EVENT_TO_RECONCILE}_sum"));
        PhaseFigures {
            name: self.name.clone(),
            seconds,
            requests_per_resource,
            // `abs`: an empty sum of floats is -0.
            failed_requests: failed_by_request.values().sum::<f64>().abs(),
            failed_by_request,
            writes_per_resource: per(diff("deepinfer_api_writes_total")),
            status_writes_by_cause: operator.then(|| {
                WriteCause::ALL
                    .iter()
                    .map(|cause| {
                        let series = format!(
                            "deepinfer_status_writes_total{{cause=\"{}\"}}",
                            cause.as_str()
                        );
                        (cause.as_str().to_string(), per(diff(&series)))
                    })
                    .collect()
            }),
            reconciles_per_resource,
            mean_reconcile_ms,
            operator_cpu_seconds,
            operator_rss_mib,
            operator_heap_mib: operator.then(|| heap_mib(&end)),
            operator_cached_objects: operator.then(|| cached_objects(&end)),
            queue_depth_peak: operator.then_some(self.queue_peak),
            events_per_resource: operator.then(|| per(events)),
            event_to_reconcile_mean_ms: operator.then(|| 1000.0 * waited / events),
            event_to_reconcile_p99_seconds: quantile_bound(
                &self.baseline,
                &end,
                EVENT_TO_RECONCILE,
                0.99,
            ),
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
        let failed: Vec<String> = self
            .failed_by_request
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect();
        println!(
            "bench:   API requests per resource: {} (writes {:.2}; {} answered non-2xx{})",
            requests.join(", "),
            self.writes_per_resource,
            self.failed_requests,
            if failed.is_empty() {
                String::new()
            } else {
                format!(": {}", failed.join(", "))
            }
        );
        if let Some(causes) = &self.status_writes_by_cause {
            let causes: Vec<String> = causes.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
            println!(
                "bench:   status writes per resource by cause: {}",
                causes.join(", ")
            );
        }
        if let (Some(r), Some(ms), Some(cpu), Some([start, peak, end])) = (
            self.reconciles_per_resource,
            self.mean_reconcile_ms,
            self.operator_cpu_seconds,
            self.operator_rss_mib,
        ) {
            let [allocated, active, metadata, resident] =
                self.operator_heap_mib.unwrap_or([f64::NAN; 4]);
            println!(
                "bench:   operator: {r:.2} reconciles per resource, mean pass {ms:.1} ms, {cpu:.1} CPU s, RSS {start:.1} / peak {peak:.1} / end {end:.1} MiB, heap at the end {allocated:.1} MiB allocated, {active:.1} MiB in active pages, {metadata:.1} MiB allocator metadata, {resident:.1} MiB resident"
            );
        }
        if let (Some(depth), Some(events), Some(mean)) = (
            self.queue_depth_peak,
            self.events_per_resource,
            self.event_to_reconcile_mean_ms,
        ) {
            let p99 = self
                .event_to_reconcile_p99_seconds
                .map_or("beyond the last bucket".to_string(), |s| {
                    format!("<= {s} s")
                });
            println!(
                "bench:   saturation: queue depth peak {depth:.0}; {events:.1} watch events per resource started a pass, waiting {mean:.1} ms on average, p99 {p99}"
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
    fn figures_that_could_not_be_measured_are_read_back_as_nan() {
        let figures = PhaseFigures {
            name: "rollout".to_string(),
            seconds: 12.5,
            requests_per_resource: BTreeMap::from([("create pods".to_string(), 8.0)]),
            failed_requests: 0.0,
            failed_by_request: BTreeMap::new(),
            writes_per_resource: f64::NAN,
            status_writes_by_cause: Some(BTreeMap::from([("progress".to_string(), 0.5)])),
            reconciles_per_resource: Some(f64::NAN),
            mean_reconcile_ms: None,
            operator_cpu_seconds: Some(3.0),
            operator_rss_mib: Some([f64::NAN, 20.0, 19.5]),
            operator_heap_mib: None,
            operator_cached_objects: Some(BTreeMap::from([("Pod".to_string(), f64::NAN)])),
            queue_depth_peak: None,
            events_per_resource: None,
            event_to_reconcile_mean_ms: None,
            event_to_reconcile_p99_seconds: None,
            node_agent_cpu_seconds: f64::NAN,
            node_agent_rss_mib: 18.0,
            bed_cpu_seconds: BTreeMap::from([("etcd".to_string(), f64::NAN)]),
        };
        let text = serde_json::to_string(&figures).expect("figures as JSON");
        let read: PhaseFigures = serde_json::from_str(&text).expect("figures read back");
        assert_eq!(serde_json::to_string(&read).expect("again"), text);
        assert_eq!(read.seconds, 12.5);
        assert!(read.writes_per_resource.is_nan() && read.node_agent_cpu_seconds.is_nan());
        assert_eq!(
            read.status_writes_by_cause,
            Some(BTreeMap::from([("progress".to_string(), 0.5)])),
            "status writes by cause read back"
        );
        assert_eq!(
            read.reconciles_per_resource, None,
            "an optional NaN reads as absent"
        );
        let rss = read.operator_rss_mib.expect("RSS");
        assert!(rss[0].is_nan() && rss[1..] == [20.0, 19.5]);
        assert!(read.operator_cached_objects.expect("objects")["Pod"].is_nan());
        assert!(read.bed_cpu_seconds["etcd"].is_nan());
    }

    #[test]
    fn requests_are_summed_over_codes_and_failures_counted_by_request_and_code() {
        let text = "deepinfer_api_requests_total{verb=\"patch\",resource=\"pods/status\",code=\"200\"} 3\n\
                    deepinfer_api_requests_total{verb=\"patch\",resource=\"pods/status\",code=\"409\"} 1\n\
                    deepinfer_api_requests_total{verb=\"list\",resource=\"pods\",code=\"200\"} 2\n\
                    deepinfer_api_writes_total 4\n";
        let (by_verb, failed) = requests(text);
        assert_eq!(by_verb["patch pods/status"], 4.0);
        assert_eq!(by_verb["list pods"], 2.0);
        assert_eq!(
            failed,
            BTreeMap::from([("patch pods/status 409".to_string(), 1.0)])
        );
    }

    #[test]
    fn the_quantile_bound_is_read_from_the_buckets_filled_during_the_phase() {
        let text = |counts: [u32; 3]| {
            format!(
                "{EVENT_TO_RECONCILE}_bucket{{le=\"0.1\"}} {}\n{EVENT_TO_RECONCILE}_bucket{{le=\"1.0\"}} {}\n{EVENT_TO_RECONCILE}_bucket{{le=\"+Inf\"}} {}\n",
                counts[0], counts[1], counts[2]
            )
        };
        let before = text([50, 50, 50]);
        // Of 100 new events, 98 within 0.1 s and 2 within 1 s: the 99th is in the 1 s bucket.
        assert_eq!(
            quantile_bound(&before, &text([148, 150, 150]), EVENT_TO_RECONCILE, 0.99),
            Some(1.0)
        );
        assert_eq!(
            quantile_bound(&before, &text([150, 150, 150]), EVENT_TO_RECONCILE, 0.99),
            Some(0.1)
        );
        assert_eq!(
            quantile_bound(&before, &text([50, 50, 60]), EVENT_TO_RECONCILE, 0.99),
            None
        );
        assert_eq!(
            quantile_bound(&before, &before, EVENT_TO_RECONCILE, 0.99),
            None
        );
    }
}
