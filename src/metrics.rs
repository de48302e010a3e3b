//! Prometheus metrics of the operator, all in one [`Registry`] under the `deepinfer_` prefix.
//!
//! The reconciler records passes, durations, failures and the phase of every resource it has
//! seen, and how long watch events wait for the pass they trigger; the acceptance gate records runs; the client's write counter is read at scrape time.
//! [`crate::telemetry`] serves [`Metrics::encode`] on `/metrics`; [`reference`] documents them
//! and the alerts on them.

pub mod access;
pub mod reference;
mod requests;

pub use requests::{classify, ApiRequests, ApiRequestsLayer};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::api::Phase;

/// Every phase, so the phase gauge exports zeros rather than missing series.
const PHASES: [Phase; 8] = [
    Phase::Pending,
    Phase::Verifying,
    Phase::Accepting,
    Phase::Provisioning,
    Phase::Ready,
    Phase::Failed,
    Phase::Paused,
    Phase::Suspended,
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
        Phase::Paused => "Paused",
        Phase::Suspended => "Suspended",
        Phase::Unknown => "Unknown",
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

/// `{result="…"}` of a reconcile pass: `success` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    result: &'static str,
}

/// Buckets of the reconcile duration, 5 ms to ~20 s: a pass is a handful of API calls, a slow
/// API server stretches it.
fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
    ])
}

/// Buckets of the time from a watch event to the start of its pass, 5 ms to 2 min: a pass
/// starts at once unless one is running for the same resource or the caches are still filling.
fn event_to_reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
    ])
}

/// `{result="…"}`: `Passed` or `Failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

/// `{cause="…"}`: `transition`, `progress` or `state` (`status::WriteCause`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

/// The operator's metrics and the registry that exports them.
#[derive(Debug)]
pub struct Metrics {
    /// Registry holding every metric below; encoded on each scrape.
    registry: Registry,
    /// `deepinfer_reconciles_total`: reconcile passes started.
    reconciles: Counter,
    /// `deepinfer_reconcile_duration_seconds{result}`: wall time of one reconcile pass, by
    /// `success` or `error`.
    reconcile_duration: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    /// `deepinfer_active_reconciles`: passes running now (the controller runs one per resource
    /// at a time, any number of resources at once).
    active: Gauge,
    /// `deepinfer_reconcile_queue_depth`: resources with a watch event whose pass has not
    /// started yet (the size of `pending`).
    queue_depth: Gauge,
    /// `deepinfer_watch_event_to_reconcile_seconds`: from the oldest pending watch event of a
    /// resource to the start of its next pass.
    event_to_reconcile: Histogram,
    /// When the oldest watch event not yet followed by a pass arrived, per `namespace/name`.
    pending: Mutex<HashMap<String, Instant>>,
    /// `deepinfer_reconcile_failures_total{error}`: passes that returned an error, by kind.
    failures: Family<ErrorLabels, Counter>,
    /// `deepinfer_resources{phase}`: DeepInferDeployments last seen in each phase.
    resources: Family<PhaseLabels, Gauge>,
    /// Last phase per `namespace/name`, so a phase change moves one count between gauges.
    phases: Mutex<HashMap<String, Phase>>,
    /// `deepinfer_acceptance_runs_total{result}`: finished acceptance runs by result.
    acceptance_runs: Family<ResultLabels, Counter>,
    /// `deepinfer_status_writes_total{cause}`: status writes by cause.
    status_writes: Family<CauseLabels, Counter>,
    /// `deepinfer_acceptance_duration_seconds`: wall time of one acceptance run.
    acceptance_duration: Histogram,
    /// `deepinfer_leader`: 1 while this instance reconciles (holds the leader Lease, or runs
    /// without leader election), else 0.
    leader: Gauge,
    /// The caches' sizes, once the controller has handed them over.
    caches: CachesCollector,
    /// Per-deployment figures, by `namespace/name`.
    deployments: DeploymentsCollector,
}

/// Exports the client's write counter as `deepinfer_api_writes_total` at scrape time.
#[derive(Debug)]
struct WritesCollector(ApiRequests);

impl Collector for WritesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(self.0.writes());
        let metric = encoder.encode_descriptor(
            "api_writes",
            "Mutating Kubernetes API requests (everything but GET) sent by the operator.",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)
    }
}

/// What the per-deployment gauges show of one `DeepInferDeployment`, from its last status.
#[derive(Clone, Debug, Default, PartialEq)]
struct Figures {
    ready: bool,
    /// Per role: desired, ready and updated groups.
    roles: Vec<(String, i32, i32, i32)>,
    /// The result of the judgement deciding the acceptance gate, if any.
    acceptance: Option<String>,
    /// The reason of `Stalled=True`, while it is.
    stalled: Option<String>,
}

impl Figures {
    fn of(status: &crate::api::DeepInferDeploymentStatus) -> Self {
        Self {
            ready: status.phase == Some(Phase::Ready),
            roles: status
                .roles
                .iter()
                .map(|r| {
                    (
                        r.name.clone(),
                        r.desired_groups,
                        r.ready_groups,
                        r.updated_groups,
                    )
                })
                .collect(),
            acceptance: status
                .acceptance
                .as_ref()
                .map(|a| a.result.as_str().to_string()),
            stalled: status
                .conditions
                .iter()
                .find(|c| c.type_ == "Stalled" && c.status == "True")
                .map(|c| c.reason.clone()),
        }
    }
}

/// `{version, template_version}` of the running operator.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    template_version: String,
}

/// `{namespace, name}` of a deployment.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeploymentLabels {
    namespace: String,
    name: String,
}

/// `{namespace, name, role, state}` of a role's group count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    namespace: String,
    name: String,
    role: String,
    state: &'static str,
}

/// `{namespace, name, reason}` of a deployment that is Stalled.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StalledLabels {
    namespace: String,
    name: String,
    reason: String,
}

/// `{namespace, name, result}` of a deployment's acceptance verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    namespace: String,
    name: String,
    result: String,
}

/// Exports the per-deployment gauges at scrape time from the figures of each deployment's last
/// status: `deepinfer_deployment_ready`, `deepinfer_deployment_groups`,
/// `deepinfer_deployment_acceptance` and `deepinfer_deployment_stalled`. Series per deployment:
/// 1 + 3 per role + 1, and 1 while it is Stalled. The figures are kept sorted in a map shared
/// with the scrapes: a scrape takes the map as it is (a pointer, not a copy) and encodes it
/// without the lock; a change while a scrape reads it copies the map once.
#[derive(Clone, Debug, Default)]
struct DeploymentsCollector(Arc<Mutex<Arc<DeploymentFigures>>>);

/// Each deployment's figures by `namespace/name`.
type DeploymentFigures = std::collections::BTreeMap<String, Figures>;

impl DeploymentsCollector {
    /// The figures as they are now.
    fn snapshot(&self) -> Arc<DeploymentFigures> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes the figures with `apply` when `needed` says it would change them.
    fn change(
        &self,
        needed: impl FnOnce(&DeploymentFigures) -> bool,
        apply: impl FnOnce(&mut DeploymentFigures),
    ) {
        let mut figures = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if needed(&figures) {
            apply(Arc::make_mut(&mut figures));
        }
    }
}

/// A deployment's namespace and name from its key.
fn split(key: &str) -> (String, String) {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    (ns.to_string(), name.to_string())
}

impl Collector for DeploymentsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let figures = self.snapshot();
        let mut ready = encoder.encode_descriptor(
            "deployment_ready",
            "1 while the DeepInferDeployment is Ready (accepted, every group serving), else 0, by namespace and name",
            None,
            MetricType::Gauge,
        )?;
        for (key, f) in figures.iter() {
            let (namespace, name) = split(key);
            let labels = DeploymentLabels { namespace, name };
            ConstGauge::new(i64::from(f.ready)).encode(ready.encode_family(&labels)?)?;
        }
        let mut groups = encoder.encode_descriptor(
            "deployment_groups",
            "Serving groups of each role of a DeepInferDeployment: desired (replicas), ready (every pod accepted and Ready) and updated (on the current revision)",
            None,
            MetricType::Gauge,
        )?;
        for (key, f) in figures.iter() {
            let (namespace, name) = split(key);
            for (role, desired, ready, updated) in &f.roles {
                for (state, n) in [("desired", desired), ("ready", ready), ("updated", updated)] {
                    let labels = GroupLabels {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        role: role.clone(),
                        state,
                    };
                    ConstGauge::new(i64::from(*n)).encode(groups.encode_family(&labels)?)?;
                }
            }
        }
        one_per_deployment(
            &mut encoder,
            (
                "deployment_acceptance",
                "1 for the result (Passed, Failed) of the judgement deciding a DeepInferDeployment's acceptance gate; absent before any",
            ),
            &figures,
            |key, f| {
                let (namespace, name) = split(key);
                let result = f.acceptance.clone()?;
                Some(VerdictLabels { namespace, name, result })
            },
        )?;
        one_per_deployment(
            &mut encoder,
            (
                "deployment_stalled",
                "1 while a DeepInferDeployment is Stalled (it needs a person), with the reason of its Stalled condition; absent otherwise",
            ),
            &figures,
            |key, f| {
                let (namespace, name) = split(key);
                let reason = f.stalled.clone()?;
                Some(StalledLabels { namespace, name, reason })
            },
        )?;
        Ok(())
    }
}

/// How many objects each of the operator's caches holds, by kind, read at scrape time.
pub type CacheSizes = Box<dyn Fn() -> Vec<(&'static str, usize)> + Send + Sync>;

/// `{kind="…"}` of a cache.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// `{state="…"}` of the heap: `allocated`, `active`, `metadata` or `resident`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// Exports `deepinfer_cached_objects{kind}` from the caches' sizes, once the controller has
/// handed them over ([`Metrics::count_caches`]).
#[derive(Clone, Default)]
struct CachesCollector(Arc<OnceLock<CacheSizes>>);

impl std::fmt::Debug for CachesCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CachesCollector")
    }
}

impl Collector for CachesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "cached_objects",
            "Objects held in the operator's caches of the kinds it owns and reads, by kind",
            None,
            MetricType::Gauge,
        )?;
        for (kind, n) in self.0.get().map(|sizes| sizes()).unwrap_or_default() {
            ConstGauge::new(gauge_value(n)).encode(metric.encode_family(&KindLabels { kind })?)?;
        }
        Ok(())
    }
}

/// The allocator's own figures, in bytes.
pub(crate) struct Heap {
    /// Bytes the process holds allocated (the live heap, rounded up to the allocator's size
    /// classes).
    pub(crate) allocated: usize,
    /// Bytes in the pages that hold live objects: the live heap and the free room beside it in
    /// those pages (`active - allocated` is what the heap's spread over its pages costs).
    active: usize,
    /// Bytes of the allocator's own bookkeeping.
    metadata: usize,
    /// Bytes of physical memory in pages the allocator holds: active pages, its metadata and
    /// freed pages not yet returned to the system.
    resident: usize,
}

/// The heap as jemalloc counts it (the operator binary's allocator); `None` if the statistics
/// cannot be read. In a process whose global allocator is not jemalloc the figures are
/// jemalloc's own bookkeeping only.
pub(crate) fn heap() -> Option<Heap> {
    // The statistics are a snapshot taken when the epoch advances.
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    Some(Heap {
        allocated: tikv_jemalloc_ctl::stats::allocated::read().ok()?,
        active: tikv_jemalloc_ctl::stats::active::read().ok()?,
        metadata: tikv_jemalloc_ctl::stats::metadata::read().ok()?,
        resident: tikv_jemalloc_ctl::stats::resident::read().ok()?,
    })
}

/// Exports `deepinfer_heap_bytes{state}` from [`heap`] at scrape time.
#[derive(Debug)]
struct HeapCollector;

impl Collector for HeapCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "heap",
            "The operator's heap as its allocator counts it: allocated (live objects), active (the pages live objects are in), metadata (the allocator's bookkeeping) and resident (pages it holds, freed ones not yet returned included); the process's resident set adds code pages and stacks",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?;
        if let Some(heap) = heap() {
            for (state, bytes) in [
                ("allocated", heap.allocated),
                ("active", heap.active),
                ("metadata", heap.metadata),
                ("resident", heap.resident),
            ] {
                ConstGauge::new(gauge_value(bytes))
                    .encode(metric.encode_family(&StateLabels { state })?)?;
            }
        }
        Ok(())
    }
}

/// Encodes the gauge `(name, help)` with a series of value 1 for each of `keys` that `labels`
/// gives labels for (a deployment without is absent).
fn one_per_deployment<L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    figures: &DeploymentFigures,
    labels: impl Fn(&str, &Figures) -> Option<L>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (key, f) in figures {
        if let Some(labels) = labels(key, f) {
            ConstGauge::new(1).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Registers the status writes' counter by cause (`deepinfer_status_writes_total`).
fn register_status_writes(registry: &mut Registry) -> Family<CauseLabels, Counter> {
    let status_writes = Family::<CauseLabels, Counter>::default();
    for cause in crate::controller::status::WriteCause::ALL {
        status_writes.get_or_create_owned(&CauseLabels {
            cause: cause.as_str(),
        });
    }
    registry.register(
        "status_writes",
        "Status writes of DeepInferDeployments by cause: transition (the first status, a condition's status, the phase, or news worth an Event), progress (progress alone, once its hold ran out), state (anything else the status records)",
        status_writes.clone(),
    );
    status_writes
}

/// Registers the acceptance runs' counters by result and their duration.
fn register_acceptance(registry: &mut Registry) -> (Family<ResultLabels, Counter>, Histogram) {
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
    (acceptance_runs, acceptance_duration)
}

/// Registers the client's request counters and latencies and the writes they add up to.
fn register_requests(registry: &mut Registry, requests: ApiRequests) {
    registry.register(
        "api_requests",
        "Requests to the API server by Kubernetes verb, resource and HTTP code (error: no response)",
        requests.total.clone(),
    );
    registry.register_with_unit(
        "api_request_duration",
        "Latency of API requests until the response headers (a watch: until it opened), by verb and resource",
        Unit::Seconds,
        requests.latency.clone(),
    );
    registry.register_collector(Box::new(WritesCollector(requests)));
}

impl Metrics {
    /// Registers every metric; `requests` are the client's request counters.
    /// (Help texts carry no final period: the encoder appends one.)
    pub fn new(requests: ApiRequests) -> Self {
        let mut registry = Registry::with_prefix("deepinfer");
        let build_info: Family<BuildLabels, Gauge> = Family::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                template_version: crate::controller::build::TEMPLATE_VERSION.to_string(),
            })
            .set(1);
        registry.register(
            "build_info",
            "1, with the operator's version and the version of the pod template it builds (a new template version replaces every group)",
            build_info,
        );
        let reconciles = Counter::default();
        registry.register("reconciles", "Reconcile passes started", reconciles.clone());
        let reconcile_duration: Family<OutcomeLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(reconcile_histogram);
        for result in ["success", "error"] {
            reconcile_duration.get_or_create_owned(&OutcomeLabels { result });
        }
        registry.register_with_unit(
            "reconcile_duration",
            "Wall time of one reconcile pass, by result (success or error)",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let active = Gauge::default();
        registry.register(
            "active_reconciles",
            "Reconcile passes running now",
            active.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "reconcile_queue_depth",
            "DeepInferDeployments with a watch event (of the resource or an object it owns or names) whose reconcile pass has not started yet",
            queue_depth.clone(),
        );
        let event_to_reconcile = event_to_reconcile_histogram();
        registry.register_with_unit(
            "watch_event_to_reconcile",
            "Time from a watch event to the start of the reconcile pass it triggered (for several events before one pass, from the oldest)",
            Unit::Seconds,
            event_to_reconcile.clone(),
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
        let (acceptance_runs, acceptance_duration) = register_acceptance(&mut registry);
        let status_writes = register_status_writes(&mut registry);
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this instance reconciles (holds the leader Lease, or runs without leader election), else 0",
            leader.clone(),
        );
        register_requests(&mut registry, requests);
        let caches = CachesCollector::default();
        registry.register_collector(Box::new(caches.clone()));
        registry.register_collector(Box::new(HeapCollector));
        let deployments = DeploymentsCollector::default();
        registry.register_collector(Box::new(deployments.clone()));
        Self {
            registry,
            reconciles,
            reconcile_duration,
            active,
            queue_depth,
            event_to_reconcile,
            pending: Mutex::new(HashMap::new()),
            failures,
            resources,
            phases: Mutex::new(HashMap::new()),
            acceptance_runs,
            acceptance_duration,
            status_writes,
            leader,
            caches,
            deployments,
        }
    }

    /// Exports the sizes of the controller's caches as `deepinfer_cached_objects{kind}` (the
    /// first caller's; one controller loop runs per process).
    pub fn count_caches(&self, sizes: CacheSizes) {
        let _ = self.caches.0.set(sizes);
    }

    /// Records whether this instance reconciles now.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Notes a watch event that triggers a pass of the resource `key` (`namespace/name`); only
    /// the oldest event before that pass starts is kept.
    pub fn triggered(&self, key: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if !pending.contains_key(key) {
            pending.insert(key.to_string(), Instant::now());
        }
        self.queue_depth.set(gauge_value(pending.len()));
    }

    /// Counts a reconcile pass of the resource `key` as started and running, and observes how
    /// long its oldest pending watch event waited; when the returned guard drops, the pass has
    /// ended and its duration is recorded, as an error unless [`ReconcileTimer::succeeded`].
    pub fn reconcile_started(&self, key: &str) -> ReconcileTimer<'_> {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(since) = pending.remove(key) {
                self.event_to_reconcile
                    .observe(since.elapsed().as_secs_f64());
            }
            self.queue_depth.set(gauge_value(pending.len()));
        }
        self.reconciles.inc();
        self.active.inc();
        ReconcileTimer {
            metrics: self,
            start: Instant::now(),
            result: "error",
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

    /// Records the status of the resource `key` (`namespace/name`): its phase and the figures
    /// of the per-deployment gauges.
    pub fn observe_status(&self, key: &str, status: &crate::api::DeepInferDeploymentStatus) {
        self.observe_phase(key, status.phase);
        if status.phase.is_some() {
            let figures = Figures::of(status);
            self.deployments.change(
                |all| all.get(key) != Some(&figures),
                |all| {
                    all.insert(key.to_string(), figures.clone());
                },
            );
        }
    }

    /// Drops a deleted resource from the phase gauge.
    pub fn forget(&self, key: &str) {
        self.deployments.change(
            |all| all.contains_key(key),
            |all| {
                all.remove(key);
            },
        );
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = phases.remove(key) {
            self.gauge(old).dec();
        }
    }

    /// Forgets every resource for which `live` is false (objects deleted without a last pass),
    /// in the phase gauge and among the resources waiting for a pass.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.retain(|key, _| live(key));
            self.queue_depth.set(gauge_value(pending.len()));
        }
        self.deployments.change(
            |all| all.keys().any(|k| !live(k)),
            |all| {
                all.retain(|key, _| live(key));
            },
        );
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        phases.retain(|key, phase| {
            let keep = live(key);
            if !keep {
                self.gauge(*phase).dec();
            }
            keep
        });
    }

    /// Counts a status write for `cause` (`status::WriteCause::as_str`).
    pub fn status_written(&self, cause: &'static str) {
        self.status_writes
            .get_or_create(&CauseLabels { cause })
            .inc();
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

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Records the duration of one reconcile pass when dropped, whichever way the pass ends.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    start: Instant,
    result: &'static str,
}

impl ReconcileTimer<'_> {
    /// The pass returned without an error.
    pub fn succeeded(&mut self) {
        self.result = "success";
    }
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics.active.dec();
        self.metrics
            .reconcile_duration
            .get_or_create(&OutcomeLabels {
                result: self.result,
            })
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_deployment_has_its_own_gauges_until_it_is_forgotten() {
        let metrics = Metrics::new(ApiRequests::default());
        metrics.observe_status("team/flash", &super::reference::example_status());
        let text = metrics.encode().expect("encodes");
        for series in [
            r#"deepinfer_deployment_ready{namespace="team",name="flash"} 1"#,
            r#"deepinfer_deployment_groups{namespace="team",name="flash",role="worker",state="desired"} 2"#,
            r#"deepinfer_deployment_groups{namespace="team",name="flash",role="worker",state="ready"} 2"#,
            r#"deepinfer_deployment_acceptance{namespace="team",name="flash",result="Passed"} 1"#,
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
        assert!(!text.contains("deepinfer_deployment_stalled{"), "{text}");
        let mut stalled = super::reference::example_status();
        stalled
            .conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Stalled".into(),
                status: "True".into(),
                reason: "LicenseNotAccepted".into(),
                message: "m".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            });
        metrics.observe_status("team/held", &stalled);
        let text = metrics.encode().expect("encodes");
        assert!(
            text.contains(r#"deepinfer_deployment_stalled{namespace="team",name="held",reason="LicenseNotAccepted"} 1"#),
            "{text}"
        );
        metrics.forget("team/flash");
        metrics.forget("team/held");
        let text = metrics.encode().expect("encodes");
        assert!(!text.contains(r#"name="flash""#), "{text}");
        assert!(!text.contains(r#"name="held""#), "{text}");
    }

    #[test]
    fn a_scrape_reads_the_figures_without_copying_them() {
        let metrics = Metrics::new(ApiRequests::default());
        let status = super::reference::example_status();
        for i in 0..100 {
            metrics.observe_status(&format!("team/d{i}"), &status);
        }
        let (a, b) = (
            metrics.deployments.snapshot(),
            metrics.deployments.snapshot(),
        );
        assert!(Arc::ptr_eq(&a, &b), "two scrapes share one map");
        // The same figures again change nothing (no copy for the scrape that holds the map).
        metrics.observe_status("team/d7", &status);
        assert!(Arc::ptr_eq(&a, &metrics.deployments.snapshot()));
        // A change while a scrape holds the map leaves that scrape's view whole.
        metrics.forget("team/d7");
        assert!(
            a.contains_key("team/d7") && !metrics.deployments.snapshot().contains_key("team/d7")
        );
        drop((a, b));
        // With no scrape holding it, a change is made in place.
        let before = Arc::as_ptr(&metrics.deployments.snapshot());
        metrics.forget("team/d8");
        assert_eq!(Arc::as_ptr(&metrics.deployments.snapshot()), before);
    }

    use super::*;

    fn line<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .map(|l| &l[series.len() + 1..])
    }

    #[test]
    fn reconcile_metrics_count_passes_durations_and_failures() {
        let m = Metrics::new(ApiRequests::default());
        let running = m.reconcile_started("a/one");
        let mut passed = m.reconcile_started("a/two");
        passed.succeeded();
        assert_eq!(
            line(&m.encode().unwrap(), "deepinfer_active_reconciles"),
            Some("2")
        );
        drop(passed);
        drop(running);
        m.reconcile_failed("kube");
        let text = m.encode().unwrap();
        assert_eq!(line(&text, "deepinfer_reconciles_total"), Some("2"));
        assert_eq!(line(&text, "deepinfer_active_reconciles"), Some("0"));
        for result in ["success", "error"] {
            assert_eq!(
                line(
                    &text,
                    &format!(r#"deepinfer_reconcile_duration_seconds_count{{result="{result}"}}"#)
                ),
                Some("1")
            );
        }
        assert!(text.contains("# TYPE deepinfer_reconcile_duration_seconds histogram"));
        assert_eq!(
            line(&text, r#"deepinfer_reconcile_failures_total{error="kube"}"#),
            Some("1")
        );
        assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends with EOF");
        assert!(!text.contains(".."), "help texts end in one period: {text}");
    }

    #[test]
    fn cache_sizes_are_read_at_each_scrape_once_the_controller_hands_them_over() {
        let m = Metrics::new(ApiRequests::default());
        assert!(m
            .encode()
            .unwrap()
            .contains("# TYPE deepinfer_cached_objects gauge"));
        assert_eq!(
            line(
                &m.encode().unwrap(),
                r#"deepinfer_cached_objects{kind="Pod"}"#
            ),
            None
        );
        let pods = Arc::new(std::sync::atomic::AtomicUsize::new(3));
        let seen = pods.clone();
        m.count_caches(Box::new(move || {
            vec![
                ("Pod", seen.load(std::sync::atomic::Ordering::SeqCst)),
                ("Job", 1),
            ]
        }));
        let text = m.encode().unwrap();
        assert_eq!(
            line(&text, r#"deepinfer_cached_objects{kind="Pod"}"#),
            Some("3")
        );
        assert_eq!(
            line(&text, r#"deepinfer_cached_objects{kind="Job"}"#),
            Some("1")
        );
        pods.store(5, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            line(
                &m.encode().unwrap(),
                r#"deepinfer_cached_objects{kind="Pod"}"#
            ),
            Some("5")
        );
        // The heap is exported whatever the allocator (the binary's is jemalloc).
        let text = m.encode().unwrap();
        assert!(line(&text, r#"deepinfer_heap_bytes{state="allocated"}"#).is_some());
        for state in ["active", "metadata", "resident"] {
            assert!(line(
                &text,
                &format!(r#"deepinfer_heap_bytes{{state="{state}"}}"#)
            )
            .is_some());
        }
    }

    #[test]
    fn watch_events_count_in_the_queue_until_their_pass_starts_which_observes_the_oldest() {
        let m = Metrics::new(ApiRequests::default());
        m.triggered("a/one");
        std::thread::sleep(std::time::Duration::from_millis(30));
        m.triggered("a/one");
        m.triggered("a/two");
        m.triggered("b/gone");
        let text = m.encode().unwrap();
        assert_eq!(line(&text, "deepinfer_reconcile_queue_depth"), Some("3"));
        drop(m.reconcile_started("a/one"));
        // A pass without a pending event (a requeue) observes nothing.
        drop(m.reconcile_started("a/three"));
        m.retain(|key| key.starts_with("a/"));
        let text = m.encode().unwrap();
        assert_eq!(line(&text, "deepinfer_reconcile_queue_depth"), Some("1"));
        assert_eq!(
            line(&text, "deepinfer_watch_event_to_reconcile_seconds_count"),
            Some("1")
        );
        let waited: f64 = line(&text, "deepinfer_watch_event_to_reconcile_seconds_sum")
            .and_then(|v| v.parse().ok())
            .expect("a sum");
        assert!(waited >= 0.03, "from the oldest event: {waited}");
        assert_eq!(
            line(
                &text,
                r#"deepinfer_watch_event_to_reconcile_seconds_bucket{le="0.005"}"#
            ),
            Some("0")
        );
        drop(m.reconcile_started("a/two"));
        let text = m.encode().unwrap();
        assert_eq!(line(&text, "deepinfer_reconcile_queue_depth"), Some("0"));
    }

    #[test]
    fn phase_gauge_moves_with_each_resource_and_forgets_deleted_ones() {
        let m = Metrics::new(ApiRequests::default());
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
        let m = Metrics::new(ApiRequests::default());
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
        let requests = ApiRequests::default();
        for _ in 0..3 {
            requests.record("patch", "pods", Some(200), 0.01);
        }
        let m = Metrics::new(requests.clone());
        assert_eq!(
            line(&m.encode().unwrap(), "deepinfer_api_writes_total"),
            Some("3")
        );
        for _ in 0..4 {
            requests.record("create", "jobs", Some(201), 0.01);
        }
        requests.record("list", "jobs", Some(200), 0.01);
        let text = m.encode().unwrap();
        assert_eq!(line(&text, "deepinfer_api_writes_total"), Some("7"));
        assert!(text.contains("# TYPE deepinfer_api_writes counter"));
    }
}
