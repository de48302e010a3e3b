//! What a controller instance runs with: the `run` flags, the [`Settings`] made of them (or
//! given by an embedding test), and the shared [`Context`] every reconcile pass reads.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::ObjectRef;
use kube::Client;
use tracing::info;

use crate::controller::cached::CachedDeployment;
use crate::controller::error::Error;
use crate::controller::gates::licence::LicenceWithdrawal;
use crate::controller::gates::spec::validate::DeviceLimits;
use crate::controller::gates::Settings as GateSettings;
use crate::controller::proof::VerdictKey;
use crate::controller::{build, events, fleet, gang, gates, observe, outage};

/// `run` arguments.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Kubeconfig file; default: in-cluster config, else `$KUBECONFIG` / `~/.kube/config`.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Watch and reconcile only this namespace (a Role there suffices); default, with no
    /// `--namespaces` either: every namespace (cluster-wide RBAC).
    #[arg(long, env = "DEEPINFER_NAMESPACE", value_parser = namespace_name)]
    pub namespace: Option<String>,
    /// Watch and reconcile exactly these namespaces (comma-separated; a Role in each suffices),
    /// e.g. `team-a,team-b`. Not with `--namespace`.
    #[arg(long, env = "DEEPINFER_NAMESPACES", value_delimiter = ',', value_parser = namespace_name, conflicts_with = "namespace")]
    pub namespaces: Vec<String>,
    /// Licence ids the cluster admin allows (comma-separated), e.g. `mit,apache-2.0`.
    #[arg(long, env = "DEEPINFER_ACCEPTED_LICENSES", value_delimiter = ',')]
    pub accepted_licenses: Vec<String>,
    /// Hub endpoints a fetch Job may download from and send a hub token to (comma-separated);
    /// a spec naming another endpoint is refused (`HubEndpointNotAllowed`). Compared without
    /// case in scheme and host, default port or trailing `/`.
    #[arg(long, env = "DEEPINFER_ALLOWED_HUB_ENDPOINTS", value_delimiter = ',', default_value = crate::controller::gates::spec::references::DEFAULT_HUB_ENDPOINT)]
    pub allowed_hub_endpoints: Vec<String>,
    /// Proxy of the fetch Jobs' https requests to the hub, given to them as `HTTPS_PROXY`
    /// (`http://[user:password@]host:port`; a CONNECT tunnel, TLS to the hub end to end).
    /// Credentials in the URL are readable in the Job's spec by whoever may read Jobs there.
    #[arg(long, env = "DEEPINFER_HUB_HTTPS_PROXY", default_value = "")]
    pub hub_https_proxy: String,
    /// Proxy of the fetch Jobs' plain http requests to the hub, given to them as `HTTP_PROXY`.
    #[arg(long, env = "DEEPINFER_HUB_HTTP_PROXY", default_value = "")]
    pub hub_http_proxy: String,
    /// Hosts the fetch Jobs reach directly, given to them as `NO_PROXY` (comma-separated names,
    /// which include their subdomains, IP addresses, CIDR blocks, or `*`).
    #[arg(long, env = "DEEPINFER_HUB_NO_PROXY", default_value = "")]
    pub hub_no_proxy: String,
    /// Image of this operator, used for its own Jobs (fetch, verify, the acceptance judge) and the injection into the engine image.
    #[arg(long, env = "DEEPINFER_OPERATOR_IMAGE", default_value = concat!("deepinfer-operator:", env!("CARGO_PKG_VERSION")))]
    pub operator_image: String,
    /// Most devices one NVIDIA node has (devicesPerPod may not exceed it).
    #[arg(long, default_value_t = crate::api::DEFAULT_MAX_DEVICES_NVIDIA)]
    pub max_devices_nvidia: i32,
    /// Most devices one Ascend node has (devicesPerPod may not exceed it).
    #[arg(long, default_value_t = crate::api::DEFAULT_MAX_DEVICES_ASCEND)]
    pub max_devices_ascend: i32,
    /// Most pods one DeepInferDeployment may need (all groups plus rollout surge); past it the
    /// resource stalls naming `replicas`.
    #[arg(long, default_value_t = crate::api::DEFAULT_MAX_PODS_PER_DEPLOYMENT)]
    pub max_pods_per_deployment: i64,
    /// Seconds a fetch Job may run (its `activeDeadlineSeconds`, time Pending included).
    #[arg(long, env = "DEEPINFER_FETCH_DEADLINE_SECONDS", default_value_t = build::DEFAULT_FETCH_DEADLINE_SECONDS, value_parser = clap::value_parser!(i64).range(1..))]
    pub fetch_deadline_seconds: i64,
    /// Seconds a verify Job may run (its `activeDeadlineSeconds`, time Pending included).
    #[arg(long, env = "DEEPINFER_VERIFY_DEADLINE_SECONDS", default_value_t = build::DEFAULT_VERIFY_DEADLINE_SECONDS, value_parser = clap::value_parser!(i64).range(1..))]
    pub verify_deadline_seconds: i64,
    /// Evidence ConfigMaps kept per DeepInferDeployment (the newest, and always the one its
    /// status points at); older ones are deleted when a new judgement is recorded.
    #[arg(long, env = "DEEPINFER_KEEP_EVIDENCE", default_value_t = gates::housekeeping::retention::DEFAULT_KEEP_EVIDENCE, value_parser = clap::value_parser!(u16).range(1..))]
    pub keep_evidence: u16,
    /// `ttlSecondsAfterFinished` of finished Jobs: given at creation from an hour
    /// (`TTL_AT_CREATION_MIN`), a shorter one once the Job's verdict is in status.
    #[arg(long, env = "DEEPINFER_FINISHED_JOB_TTL_SECONDS", default_value_t = gates::housekeeping::retention::DEFAULT_FINISHED_JOB_TTL_SECONDS, value_parser = clap::value_parser!(i32).range(0..))]
    pub finished_job_ttl_seconds: i32,
    /// Gang scheduling of multi-pod groups: `auto` makes every serving group and multi-pod
    /// acceptance run a `scheduling.k8s.io/v1beta1` PodGroup where the API server serves it,
    /// `native` requires it, `off` never uses it.
    #[arg(long, env = "DEEPINFER_GANG_SCHEDULING", value_enum, default_value_t = gang::GangScheduling::Auto)]
    pub gang_scheduling: gang::GangScheduling,
    /// How long a group may stay partly placed (some ranks bound, others unschedulable) before
    /// it is deleted whole to free its devices and retried with backoff, e.g. `120s`, `5m`.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub partial_group_timeout: Duration,
    /// Most reconcile passes running at once (at least 1). Passes of other resources wait in
    /// the queue (`deepinfer_reconcile_queue_depth`); one resource never has two at once.
    #[arg(long, env = "DEEPINFER_MAX_CONCURRENT_RECONCILES", default_value_t = DEFAULT_MAX_CONCURRENT_RECONCILES, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,
    /// What a closed licence gate does to a deployment's pods: `withhold` takes them out of
    /// service and keeps them (devices held, weights loaded, back at once when the licence is
    /// accepted again); `stop` deletes every serving pod and running acceptance Job (devices
    /// freed; the groups are made again from the recorded judgement, with no new run).
    #[arg(long, env = "DEEPINFER_LICENSE_WITHDRAWAL", value_enum, default_value_t = LicenceWithdrawal::Withhold)]
    pub license_withdrawal: LicenceWithdrawal,
    /// The Secret holding the key that proves the operator's judgements, `NAME` (in the
    /// operator's own namespace, `POD_NAMESPACE`) or `NAMESPACE/NAME`; created with a random key
    /// when missing. Only the operator's ServiceAccount may read it (docs/security.md).
    #[arg(long, env = "DEEPINFER_VERDICT_KEY_SECRET")]
    pub verdict_key_secret: Option<String>,
    /// Most acceptance runs under way at once, over every deployment the operator watches; runs
    /// beyond it wait in the order they asked (`AcceptanceQueued`). 0: no limit.
    #[arg(
        long,
        env = "DEEPINFER_MAX_CONCURRENT_ACCEPTANCE_RUNS",
        default_value_t = 0
    )]
    pub max_concurrent_acceptance_runs: u16,
    /// Record each acceptance rank's scale-up domain: when it records a verdict, the operator
    /// reads the domain label (`spec.accelerator.scaleUpDomainKey`) of the nodes the run's pods
    /// ran on, one GET per node. Needs `get` on `nodes`, a cluster-scoped permission that
    /// config/rbac does not grant and the chart grants only with `recordNodeDomains: true`
    /// (docs/acceptance.md); off, the evidence records each rank's node and devices and says
    /// the domains were not read.
    #[arg(long, env = "DEEPINFER_RECORD_NODE_DOMAINS")]
    pub record_node_domains: bool,
    /// Log as JSON lines.
    #[arg(long)]
    pub json_logs: bool,
    /// Address of the `/metrics`, `/healthz` and `/readyz` endpoints.
    #[arg(
        long,
        env = "DEEPINFER_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_address: std::net::SocketAddr,
    /// Serve the endpoints over HTTPS, and `/metrics` only to callers the API server
    /// authenticates and allows to get the non-resource URL `/metrics` (TokenReview and
    /// SubjectAccessReview; the operator needs `create` on both). The default;
    /// `--metrics-secure=false` serves plain HTTP to anyone who reaches the port.
    #[arg(
        long,
        env = "DEEPINFER_METRICS_SECURE",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub metrics_secure: bool,
    /// Directory holding `tls.crt` and `tls.key` for the HTTPS endpoints (a mounted
    /// `kubernetes.io/tls` Secret); default: a self-signed certificate made at start.
    #[arg(long, env = "DEEPINFER_METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<std::path::PathBuf>,
    /// Reconcile only while holding a leader Lease, so several replicas can run and one works.
    #[arg(long, env = "DEEPINFER_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Name of the leader Lease; every replica of one installation must use the same.
    #[arg(long, default_value = "deepinfer-operator")]
    pub leader_election_id: String,
    /// Namespace of the leader Lease; default: `$POD_NAMESPACE`, else the client's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
}

/// A namespace name as the API server takes it: a DNS label (RFC 1123), at most 63 characters.
fn namespace_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(name.to_string())
    } else {
        Err(format!(
            "{text:?} is not a namespace name: lower-case letters, digits and '-', starting and \
             ending with a letter or digit, at most 63 characters"
        ))
    }
}

/// The namespaces an operator watches and reconciles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace: the operator needs cluster-wide RBAC (a ClusterRole).
    All,
    /// Exactly these, at least one, each once, in order: a Role in each is all the operator
    /// needs, and it never reads or writes anything elsewhere.
    Listed(Vec<String>),
}

impl Namespaces {
    /// One namespace (`Some`), or every namespace.
    pub fn one(namespace: Option<String>) -> Self {
        Self::listed(namespace)
    }

    /// Exactly the namespaces given, each once, sorted; every namespace if none is given.
    pub fn listed(namespaces: impl IntoIterator<Item = String>) -> Self {
        let set: std::collections::BTreeSet<String> = namespaces.into_iter().collect();
        if set.is_empty() {
            Self::All
        } else {
            Self::Listed(set.into_iter().collect())
        }
    }

    /// The watches of one kind: one per listed namespace, or one (`None`) over every namespace.
    pub fn watches(&self) -> Vec<Option<&str>> {
        match self {
            Self::All => vec![None],
            Self::Listed(list) => list.iter().map(|ns| Some(ns.as_str())).collect(),
        }
    }
}

impl std::fmt::Display for Namespaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::All => f.write_str("<all>"),
            Self::Listed(list) => f.write_str(&list.join(",")),
        }
    }
}

/// Parses `90s`, `2m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; write e.g. 120s, 5m or 1h"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}; use s, m or h")),
    };
    Ok(Duration::from_secs(n.saturating_mul(scale)))
}

/// Shared state of the controller.
pub struct Context {
    /// API client (writes are counted by [`Context::writes`]).
    pub client: Client,
    /// Publishes Kubernetes events on condition transitions.
    pub recorder: events::Recorder,
    /// Licence ids the admin allows.
    pub accepted_licenses: Vec<String>,
    /// Hub endpoints a fetch Job may use (`--allowed-hub-endpoints`).
    pub allowed_hub_endpoints: Vec<String>,
    /// The proxies fetch Jobs reach the hub through.
    pub hub_proxy: build::HubProxy,
    /// Image of this operator for its Jobs.
    pub operator_image: String,
    /// Devices per node, per accelerator type.
    pub limits: DeviceLimits,
    /// Deadlines of the fetch and verify Jobs.
    pub job_deadlines: build::JobDeadlines,
    /// What is kept of evidence and finished Jobs.
    pub retention: gates::housekeeping::retention::Retention,
    /// Mutating requests (everything but GET/LIST/WATCH) this controller sent.
    pub writes: Arc<AtomicU64>,
    /// Reconcile passes run.
    pub reconciles: AtomicU64,
    /// Prometheus metrics, served on `/metrics`.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Gang scheduling as asked (`--gang-scheduling`).
    pub gang_scheduling: gang::GangScheduling,
    /// Whether groups are PodGroups, once resolved against the API server.
    pub pod_groups: tokio::sync::OnceCell<bool>,
    /// Whether the API server serves DeepInferRoles (their CRD is installed), once resolved.
    pub scaled_roles: tokio::sync::OnceCell<bool>,
    /// How long a group may stay partly placed before it is deleted and retried.
    pub partial_group_timeout: Duration,
    /// Most reconcile passes running at once.
    pub max_concurrent_reconciles: u16,
    /// Most acceptance runs under way at once (`None`: no limit).
    pub max_concurrent_acceptance_runs: Option<u16>,
    /// Whether the nodes of a judged run's pods are read for their scale-up domain.
    pub record_node_domains: bool,
    /// What a closed licence gate does to the pods.
    pub license_withdrawal: LicenceWithdrawal,
    /// Where the verdict key is kept (namespace, name).
    pub verdict_key_secret: (String, String),
    /// The verdict key, once read (or created).
    pub verdict_key: tokio::sync::OnceCell<crate::controller::proof::VerdictKey>,
    /// Acceptance runs admitted and waiting under that limit.
    pub acceptance_queue: std::sync::Mutex<fleet::Queue>,
    /// Whether this instance may write (set once it leads; open without leader election).
    pub fence: std::sync::OnceLock<crate::leader::Fence>,
    /// The watchdog's latest retry per (resource UID, role): the pass after a deletion may
    /// still read the status from before it, so the backoff is also kept here.
    pub placement_retries: std::sync::Mutex<
        std::collections::BTreeMap<(String, String), (i32, k8s_openapi::jiff::Timestamp)>,
    >,
    /// The resourceVersion of each resource's own latest status write (`namespace/name`), kept
    /// until the deployment store holds that version: a pass on an older copy would be refused
    /// at its status write, so it waits for the store instead.
    pub status_written: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// When this process last wrote each resource's status, and how long a change of its
    /// progress alone waits after that.
    progress_holds: std::sync::Mutex<crate::controller::status::ProgressHolds>,
    /// Resources whose pass could not reach the API server, reconciled once it answers.
    pub awaiting_api: outage::AwaitingApi,
    /// The stream of those resources, taken by the controller loop that runs this context.
    pub(super) awaiting_api_due: std::sync::Mutex<
        Option<futures::channel::mpsc::UnboundedReceiver<ObjectRef<CachedDeployment>>>,
    >,
    /// The owned objects passes read, one store per kind.
    pub caches: crate::controller::caches::Caches,
    /// The writers of those stores, taken by the controller loop that runs this context.
    pub(super) cache_writers: std::sync::Mutex<Option<crate::controller::caches::CacheWriters>>,
}

impl Context {
    /// The settings gates read, with the verdict key `verdict_key`.
    pub fn settings<'a>(&'a self, verdict_key: &'a VerdictKey) -> GateSettings<'a> {
        GateSettings {
            operator_image: &self.operator_image,
            deadlines: &self.job_deadlines,
            allowed_hub_endpoints: &self.allowed_hub_endpoints,
            hub_proxy: &self.hub_proxy,
            retention: self.retention,
            limits: &self.limits,
            partial_group_timeout: self.partial_group_timeout,
            license_withdrawal: self.license_withdrawal,
            verdict_key,
            record_node_domains: self.record_node_domains,
        }
    }

    /// Notes this process's status write of resource `key` (`namespace/name`) for `cause`,
    /// answered with resourceVersion `version`.
    pub fn status_was_written(
        &self,
        key: &str,
        version: Option<u64>,
        cause: crate::controller::status::WriteCause,
    ) {
        if let Some(version) = version {
            self.status_written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.to_string(), version);
        }
        self.progress_holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .written(key, cause, std::time::Instant::now());
    }

    /// How much longer a change of resource `key`'s progress alone waits (`None`: it
    /// is written now).
    pub fn progress_hold(&self, key: &str) -> Option<std::time::Duration> {
        self.progress_holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .left(key, std::time::Instant::now())
    }

    /// Whether this instance may still write (see [`crate::leader::Fence`]).
    pub fn may_write(&self) -> bool {
        self.fence.get().is_none_or(crate::leader::Fence::holds)
    }

    /// Whether groups become PodGroups here: `--gang-scheduling` resolved once against the API
    /// server's discovery (a failed lookup is retried on the next pass).
    pub async fn pod_groups(&self) -> Result<bool, Error> {
        self.pod_groups
            .get_or_try_init(|| async {
                let native = gang::resolve(&self.client, self.gang_scheduling)
                    .await
                    .map_err(|e| Error::Placement(e.to_string()))?;
                info!(
                    mode = ?self.gang_scheduling,
                    pod_groups = native,
                    "gang scheduling resolved"
                );
                Ok(native)
            })
            .await
            .copied()
    }

    /// The key the operator's judgements are proved with, read from its Secret once, or
    /// created there when missing (a write: only by a replica that may write).
    pub async fn verdict_key(&self) -> Result<&crate::controller::proof::VerdictKey, Error> {
        let (ns, name) = &self.verdict_key_secret;
        let failed = |verb, e| Error::api(verb, "Secret", &format!("{ns}/{name}"), e);
        self.verdict_key
            .get_or_try_init(|| async {
                if let Some(key) = crate::controller::proof::load(&self.client, ns, name)
                    .await
                    .map_err(|e| failed("get", e))?
                {
                    return Ok(key);
                }
                if !self.may_write() {
                    return Err(Error::NotLeading);
                }
                crate::controller::proof::create(&self.client, ns, name)
                    .await
                    .map_err(|e| failed("create", e))
            })
            .await
    }

    /// Whether the API server serves DeepInferRoles (the CRD of `crds/` is installed), resolved
    /// once before the watches start: roles with `scaling: external` need them.
    pub async fn scaled_roles(&self) -> Result<bool, Error> {
        self.scaled_roles
            .get_or_try_init(|| async {
                let served = gang::served(
                    &self.client,
                    <crate::api::DeepInferRole as k8s_openapi::Resource>::API_VERSION,
                    <crate::api::DeepInferRole as k8s_openapi::Resource>::URL_PATH_SEGMENT,
                )
                .await
                .map_err(Error::Kube)?;
                if !served {
                    tracing::warn!("DeepInferRoles are not served (their CRD is not installed): roles with scaling: external are refused; install crds/deepinfer.io_deepinferroles.yaml and restart the operator");
                }
                Ok(served)
            })
            .await
            .copied()
    }
}

impl observe::Sources for Context {
    fn client(&self) -> &Client {
        &self.client
    }

    fn caches(&self) -> &crate::controller::caches::Caches {
        &self.caches
    }
}

/// Settings of a controller instance, for embedding (tests) as well as `run`.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The namespaces watched.
    pub namespaces: Namespaces,
    /// Licence allow-list.
    pub accepted_licenses: Vec<String>,
    /// Hub endpoints a fetch Job may use.
    pub allowed_hub_endpoints: Vec<String>,
    /// The proxies fetch Jobs reach the hub through.
    pub hub_proxy: build::HubProxy,
    /// Image of this operator.
    pub operator_image: String,
    /// Devices per node.
    pub limits: DeviceLimits,
    /// Deadlines of the fetch and verify Jobs.
    pub job_deadlines: build::JobDeadlines,
    /// What is kept of evidence and finished Jobs.
    pub retention: gates::housekeeping::retention::Retention,
    /// Gang scheduling as asked.
    pub gang_scheduling: gang::GangScheduling,
    /// How long a group may stay partly placed.
    pub partial_group_timeout: Duration,
    /// Most reconcile passes running at once.
    pub max_concurrent_reconciles: u16,
    /// Most acceptance runs under way at once (0: no limit).
    pub max_concurrent_acceptance_runs: u16,
    /// Whether the nodes of a judged run's pods are read for their scale-up domain.
    pub record_node_domains: bool,
    /// What a closed licence gate does to the pods.
    pub license_withdrawal: LicenceWithdrawal,
    /// The Secret holding the verdict key, `NAME` or `NAMESPACE/NAME` (`--verdict-key-secret`);
    /// `None`: [`crate::controller::proof::DEFAULT_SECRET_NAME`].
    pub verdict_key_secret: Option<String>,
}

impl Settings {
    /// Namespace and name of the verdict key Secret: as given, else in the operator's own
    /// namespace (`POD_NAMESPACE`), else the first watched namespace, else `default`.
    pub fn verdict_key_secret(&self) -> (String, String) {
        let given = self.verdict_key_secret.clone();
        let given =
            given.unwrap_or_else(|| crate::controller::proof::DEFAULT_SECRET_NAME.to_string());
        if let Some((ns, name)) = given.split_once('/') {
            return (ns.to_string(), name.to_string());
        }
        let ns = std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|n| !n.is_empty())
            .or_else(|| match &self.namespaces {
                Namespaces::Listed(listed) => listed.first().cloned(),
                Namespaces::All => None,
            })
            .unwrap_or_else(|| "default".to_string());
        (ns, given)
    }
}

/// Default of `--partial-group-timeout`.
pub const DEFAULT_PARTIAL_GROUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Default of `--max-concurrent-reconciles`: a pass mostly waits on the API server, so a few
/// dozen keep it busy; without a bound, a restart over a thousand resources starts a thousand
/// passes at once, each holding its reads and requests, against one API server.
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 32;

impl Settings {
    /// Settings for one namespace (or all) with the given licences, and defaults elsewhere.
    pub fn new(namespace: Option<String>, accepted_licenses: Vec<String>) -> Self {
        Self {
            namespaces: Namespaces::one(namespace),
            accepted_licenses,
            allowed_hub_endpoints: vec![
                crate::controller::gates::spec::references::DEFAULT_HUB_ENDPOINT.into(),
            ],
            hub_proxy: build::HubProxy::default(),
            operator_image: concat!("deepinfer-operator:", env!("CARGO_PKG_VERSION")).into(),
            limits: DeviceLimits::default(),
            job_deadlines: build::JobDeadlines::default(),
            retention: gates::housekeeping::retention::Retention::default(),
            gang_scheduling: gang::GangScheduling::Auto,
            partial_group_timeout: DEFAULT_PARTIAL_GROUP_TIMEOUT,
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
            max_concurrent_acceptance_runs: 0,
            record_node_domains: false,
            license_withdrawal: LicenceWithdrawal::Withhold,
            verdict_key_secret: None,
        }
    }
}

impl From<&RunArgs> for Settings {
    fn from(a: &RunArgs) -> Self {
        Self {
            // clap refuses `--namespace` beside `--namespaces`.
            namespaces: Namespaces::listed(a.namespaces.iter().chain(&a.namespace).cloned()),
            accepted_licenses: a
                .accepted_licenses
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            allowed_hub_endpoints: a
                .allowed_hub_endpoints
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            hub_proxy: build::HubProxy {
                https: a.hub_https_proxy.trim().to_string(),
                http: a.hub_http_proxy.trim().to_string(),
                no: a.hub_no_proxy.trim().to_string(),
            },
            operator_image: a.operator_image.clone(),
            limits: DeviceLimits {
                nvidia: a.max_devices_nvidia,
                ascend: a.max_devices_ascend,
                max_pods: a.max_pods_per_deployment,
            },
            job_deadlines: build::JobDeadlines {
                fetch_seconds: a.fetch_deadline_seconds,
                verify_seconds: a.verify_deadline_seconds,
            },
            retention: gates::housekeeping::retention::Retention {
                keep_evidence: a.keep_evidence,
                finished_job_ttl_seconds: a.finished_job_ttl_seconds,
            },
            gang_scheduling: a.gang_scheduling,
            partial_group_timeout: a.partial_group_timeout,
            max_concurrent_reconciles: a.max_concurrent_reconciles,
            max_concurrent_acceptance_runs: a.max_concurrent_acceptance_runs,
            record_node_domains: a.record_node_domains,
            license_withdrawal: a.license_withdrawal,
            verdict_key_secret: a.verdict_key_secret.clone(),
        }
    }
}

/// The shared context for a controller instance.
pub fn context(
    client: Client,
    settings: &Settings,
    requests: crate::metrics::ApiRequests,
) -> Arc<Context> {
    let (awaiting_api, due) = outage::AwaitingApi::new();
    let (caches, cache_writers) = crate::controller::caches::Caches::new();
    let metrics = crate::metrics::Metrics::new(requests.clone());
    metrics.count_caches(caches.sizes());
    Arc::new(Context {
        recorder: events::Recorder::new(
            client.clone(),
            Reporter {
                controller: "deepinfer-operator".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        client,
        accepted_licenses: settings.accepted_licenses.clone(),
        allowed_hub_endpoints: settings.allowed_hub_endpoints.clone(),
        hub_proxy: settings.hub_proxy.clone(),
        operator_image: settings.operator_image.clone(),
        limits: settings.limits,
        job_deadlines: settings.job_deadlines,
        retention: settings.retention,
        writes: requests.write_counter(),
        metrics: Arc::new(metrics),
        reconciles: AtomicU64::new(0),
        gang_scheduling: settings.gang_scheduling,
        pod_groups: tokio::sync::OnceCell::new(),
        scaled_roles: tokio::sync::OnceCell::new(),
        partial_group_timeout: settings.partial_group_timeout,
        max_concurrent_reconciles: settings.max_concurrent_reconciles,
        max_concurrent_acceptance_runs: (settings.max_concurrent_acceptance_runs > 0)
            .then_some(settings.max_concurrent_acceptance_runs),
        record_node_domains: settings.record_node_domains,
        acceptance_queue: std::sync::Mutex::default(),
        license_withdrawal: settings.license_withdrawal,
        verdict_key_secret: settings.verdict_key_secret(),
        verdict_key: tokio::sync::OnceCell::new(),
        placement_retries: std::sync::Mutex::default(),
        status_written: std::sync::Mutex::default(),
        progress_holds: std::sync::Mutex::default(),
        fence: std::sync::OnceLock::new(),
        awaiting_api,
        awaiting_api_due: std::sync::Mutex::new(Some(due)),
        caches,
        cache_writers: std::sync::Mutex::new(Some(cache_writers)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn the_hub_endpoint_allow_list_defaults_to_the_public_hub() {
        let defaults = Settings::from(&Cli::try_parse_from(["op"]).expect("defaults").run);
        assert_eq!(defaults.allowed_hub_endpoints, ["https://huggingface.co"]);
        assert_eq!(
            Settings::new(None, Vec::new()).allowed_hub_endpoints,
            defaults.allowed_hub_endpoints
        );
        let two = Cli::try_parse_from([
            "op",
            "--allowed-hub-endpoints=https://mirror.internal, https://huggingface.co",
        ])
        .expect("valid");
        assert_eq!(
            Settings::from(&two.run).allowed_hub_endpoints,
            ["https://mirror.internal", "https://huggingface.co"]
        );
        let none = Cli::try_parse_from(["op", "--allowed-hub-endpoints="]).expect("valid");
        assert!(Settings::from(&none.run).allowed_hub_endpoints.is_empty());
    }

    /// `/metrics` is authenticated HTTPS unless `--metrics-secure=false` says otherwise; the bare
    /// flag (as earlier releases took it) still means HTTPS.
    #[test]
    fn metrics_are_secure_unless_turned_off() {
        let secure = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("op").chain(args.iter().copied()))
                .map(|cli| cli.run.metrics_secure)
                .map_err(|e| e.to_string())
        };
        assert_eq!(secure(&[]), Ok(true));
        assert_eq!(secure(&["--metrics-secure"]), Ok(true));
        assert_eq!(secure(&["--metrics-secure=true"]), Ok(true));
        assert_eq!(secure(&["--metrics-secure=false"]), Ok(false));
        assert!(secure(&["--metrics-secure=plain"]).is_err());
    }

    fn watched(args: &[&str]) -> Result<Namespaces, String> {
        Cli::try_parse_from(std::iter::once("op").chain(args.iter().copied()))
            .map(|cli| Settings::from(&cli.run).namespaces)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_operator_watches_exactly_the_namespaces_listed() {
        let listed =
            |names: &[&str]| Namespaces::Listed(names.iter().map(|n| n.to_string()).collect());
        assert_eq!(watched(&[]), Ok(Namespaces::All));
        assert_eq!(Namespaces::All.watches(), [None]);
        assert_eq!(watched(&["--namespace=team-a"]), Ok(listed(&["team-a"])));
        let two = watched(&["--namespaces=team-b, team-a,team-b"]);
        assert_eq!(two, Ok(listed(&["team-a", "team-b"])), "each once");
        assert_eq!(
            listed(&["team-a", "team-b"]).watches(),
            [Some("team-a"), Some("team-b")],
            "one watch per namespace"
        );
        assert_eq!(listed(&["team-a", "team-b"]).to_string(), "team-a,team-b");
        assert_eq!(
            Settings::new(Some("team-a".into()), Vec::new()).namespaces,
            listed(&["team-a"])
        );
        assert_eq!(Settings::new(None, Vec::new()).namespaces, Namespaces::All);
    }

    #[test]
    fn contradicting_or_malformed_namespace_flags_are_refused_naming_the_flag() {
        let err = watched(&["--namespace=team-a", "--namespaces=team-b,team-c"])
            .expect_err("one namespace and a list contradict");
        assert!(
            err.contains("--namespaces <NAMESPACES>") && err.contains("--namespace <NAMESPACE>"),
            "{err}"
        );
        for (args, flag) in [
            (&["--namespaces="][..], "--namespaces"),
            (&["--namespaces=team-a,"][..], "--namespaces"),
            (&["--namespaces=team-a,,team-b"][..], "--namespaces"),
            (&["--namespaces=Team_A"][..], "--namespaces"),
            (&["--namespace=-team"][..], "--namespace"),
            (&["--namespace="][..], "--namespace"),
        ] {
            let err = watched(args).expect_err("refused");
            assert!(
                err.contains(flag) && err.contains("is not a namespace name"),
                "{args:?}: {err}"
            );
        }
        let long = format!("--namespaces={}", "a".repeat(64));
        assert!(watched(&[&long]).is_err(), "longer than 63");
    }

    #[test]
    fn the_placement_flags_parse_with_units_and_refuse_nonsense() {
        let cli =
            Cli::try_parse_from(["op", "--gang-scheduling=off", "--partial-group-timeout=5m"])
                .expect("valid flags");
        let settings = Settings::from(&cli.run);
        assert_eq!(settings.gang_scheduling, gang::GangScheduling::Off);
        assert_eq!(settings.partial_group_timeout, Duration::from_secs(300));
        let defaults = Settings::from(&Cli::try_parse_from(["op"]).expect("defaults").run);
        assert_eq!(defaults.gang_scheduling, gang::GangScheduling::Auto);
        assert_eq!(
            defaults.partial_group_timeout,
            DEFAULT_PARTIAL_GROUP_TIMEOUT
        );
        assert_eq!(
            defaults.max_concurrent_reconciles,
            DEFAULT_MAX_CONCURRENT_RECONCILES
        );
        let bounded = Cli::try_parse_from(["op", "--max-concurrent-reconciles=4"]).expect("valid");
        assert_eq!(Settings::from(&bounded.run).max_concurrent_reconciles, 4);
        assert!(Cli::try_parse_from(["op", "--max-concurrent-reconciles=0"]).is_err());
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        let err = Cli::try_parse_from(["op", "--partial-group-timeout=2 weeks"])
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("unknown unit"), "{err}");
        assert!(Cli::try_parse_from(["op", "--gang-scheduling=always"]).is_err());
    }
}
