//! Executes the containers of a pod that run the project's own binary: materialises the
//! volumes they mount, runs each container as a local process group inside a private mount
//! namespace (`unshare --mount`) where the volumes appear at their mount paths, and records
//! each container's state for the status computation.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use deepinfer_e2e::faults::{self, Kill, PodFaults};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::process::Command;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::env::{self, Objects};
use crate::now;
use crate::plan::{self, Bind, ContainerPlan, FileSource, HostPathCreate, PodPlan, VolumeSource};
use crate::probe::{self, Prober};
use crate::status::{resumed_report, Report, State, Terminated};

/// Called whenever a container's state changes, to re-sync the pod's status.
pub type Notify = Arc<dyn Fn() + Send + Sync>;

const RETRY_DELAY: Duration = Duration::from_secs(3);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Limits of the kubelet for termination messages and the log fallback.
const MESSAGE_MAX_BYTES: usize = 4096;
const LOG_TAIL_BYTES: u64 = 2048;
const LOG_TAIL_LINES: usize = 80;
const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The variable giving executed containers their pod's address on the host's loopback, where
/// they listen for probes and traffic (see [`probe::loopback_address`]).
pub const POD_LOOPBACK_ENV: &str = "SIM_POD_LOOPBACK_IP";

/// Settings shared by all executed pods.
pub struct ExecConfig {
    pub client: Client,
    /// Per-pod directories (volumes, termination-message files) live under `<state>/pods`.
    pub state_dir: PathBuf,
    /// Container logs: `<logs>/<namespace>_<pod>_<container>.log`.
    pub logs_dir: PathBuf,
    /// Put first on the containers' PATH; holds the own binaries under their image names.
    pub bin_dir: PathBuf,
    pub api_host: String,
    pub api_port: u16,
    /// Longest wait between SIGTERM and SIGKILL when a pod is deleted.
    pub kill_grace: Duration,
    /// Visible-devices variable per simulated DRA driver (see `dra.rs`).
    pub device_env: BTreeMap<String, String>,
    /// The files of DeepInfer's runtime image that cannot exist here, bound read-only at
    /// [`RUNTIME_FILES_TARGET`] in every executed container of an image that is not the
    /// project's own (see `--runtime-files`).
    pub runtime_files: Option<PathBuf>,
}

/// Where DeepInfer's runtime image keeps its examples (`examples/offline_inference.py`).
pub const RUNTIME_FILES_TARGET: &str = "/opt/deepinfer";

struct PodRun {
    uid: String,
    /// The pod's volumes are in place: its sandbox is up and it has its address.
    sandbox: Arc<std::sync::atomic::AtomicBool>,
    stop: watch::Sender<bool>,
    reports: Arc<Mutex<BTreeMap<String, Report>>>,
    task: JoinHandle<()>,
    dir: PathBuf,
}

/// The executed pods of this agent.
pub struct Runtime {
    cfg: Arc<ExecConfig>,
    pods: Mutex<HashMap<ObjectRef<Pod>, PodRun>>,
    /// Set once the agent shuts down: no pod starts after its processes were stopped.
    shutting_down: std::sync::atomic::AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a plain map operation; a poisoned lock still holds valid data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Runtime {
    pub fn new(cfg: ExecConfig) -> Self {
        Runtime {
            cfg: Arc::new(cfg),
            pods: Mutex::new(HashMap::new()),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The uid of the pod instance running under this key, if any.
    pub fn uid(&self, key: &ObjectRef<Pod>) -> Option<String> {
        lock(&self.pods).get(key).map(|r| r.uid.clone())
    }

    pub fn keys(&self) -> Vec<ObjectRef<Pod>> {
        lock(&self.pods).keys().cloned().collect()
    }

    /// Whether the pod's sandbox is up (its volumes in place), as a kubelet reports the pod's
    /// IP only then: the contents its ConfigMap volumes start with were read before anyone
    /// could learn its address. `true` for a pod not executed here.
    pub fn sandbox_up(&self, key: &ObjectRef<Pod>) -> bool {
        lock(&self.pods)
            .get(key)
            .is_none_or(|r| r.sandbox.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The current report of an executed container.
    pub fn report(&self, key: &ObjectRef<Pod>, container: &str) -> Option<Report> {
        let pods = lock(&self.pods);
        let reports = lock(&pods.get(key)?.reports);
        reports.get(container).cloned()
    }

    /// Starts executing the pod's containers unless they already run.
    pub fn ensure_started(
        &self,
        key: &ObjectRef<Pod>,
        pod: &Pod,
        plan: &PodPlan,
        pod_ip: &str,
        notify: Notify,
    ) {
        let mut pods = lock(&self.pods);
        if pods.contains_key(key) || self.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let uid = pod.uid().unwrap_or_default();
        let dir = self.cfg.state_dir.join("pods").join(format!(
            "{}_{}_{uid}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ));
        let executed = |containers: &[(String, ContainerPlan)], is_init: bool| {
            containers
                .iter()
                .filter(|(_, p)| p.is_executed())
                .map(move |(n, _)| (n.clone(), resumed_report(pod, n, is_init)))
                .collect::<Vec<_>>()
        };
        let reports: BTreeMap<String, Report> = executed(&plan.init, true)
            .into_iter()
            .chain(executed(&plan.main, false))
            .collect();
        let reports = Arc::new(Mutex::new(reports));
        let (stop, stop_rx) = watch::channel(false);
        let sandbox = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ctx = PodCtx {
            sandbox: Arc::clone(&sandbox),
            cfg: Arc::clone(&self.cfg),
            name: crate::pod_name(key),
            pod: pod.clone(),
            pod_ip: pod_ip.to_string(),
            dir: dir.clone(),
            reports: Arc::clone(&reports),
            notify,
            stop: stop_rx,
            devices: crate::dra::Prepared::new(),
        };
        let plan = plan.clone();
        info!(pod = %crate::pod_name(key), "executing pod");
        let task = tokio::spawn(ctx.run(plan));
        pods.insert(
            key.clone(),
            PodRun {
                uid,
                sandbox,
                stop,
                reports,
                task,
                dir,
            },
        );
    }

    /// Stops the pod's processes (SIGTERM, then SIGKILL after the grace period), waits for them
    /// to end, and removes the pod's directory. Does nothing for pods that are not executed.
    pub async fn stop(&self, key: &ObjectRef<Pod>) {
        let Some(run) = lock(&self.pods).remove(key) else {
            return;
        };
        // A send error means the task already ended, which is what we want.
        let _ = run.stop.send(true);
        let deadline = self.cfg.kill_grace + Duration::from_secs(10);
        if tokio::time::timeout(deadline, run.task).await.is_err() {
            warn!(pod = %crate::pod_name(key), "pod processes did not stop in time");
        }
        if let Err(e) = tokio::fs::remove_dir_all(&run.dir).await {
            if e.kind() != std::io::ErrorKind::NotFound {
                warn!(pod = %crate::pod_name(key), error = %e, "removing pod directory failed");
            }
        }
        info!(pod = %crate::pod_name(key), "stopped pod");
    }

    /// Stops every executed pod, for the agent's own shutdown; no pod starts afterwards.
    pub async fn stop_all(&self) {
        // Under the pods' lock, so that no pod starts between the flag and the list of keys.
        let keys = {
            let pods = lock(&self.pods);
            self.shutting_down
                .store(true, std::sync::atomic::Ordering::SeqCst);
            pods.keys().cloned().collect::<Vec<_>>()
        };
        futures::future::join_all(keys.iter().map(|k| self.stop(k))).await;
    }
}

/// Everything a pod's task needs.
struct PodCtx {
    cfg: Arc<ExecConfig>,
    /// `namespace/name`, for logs.
    name: String,
    pod: Pod,
    pod_ip: String,
    dir: PathBuf,
    reports: Arc<Mutex<BTreeMap<String, Report>>>,
    notify: Notify,
    stop: watch::Receiver<bool>,
    /// Per container, the variables naming the devices prepared for it.
    devices: crate::dra::Prepared,
    /// Set once the volumes are in place ([`Runtime::sandbox_up`]).
    sandbox: Arc<std::sync::atomic::AtomicBool>,
}

enum Outcome {
    Exited(i32),
    Stopped,
}

impl PodCtx {
    fn set(&self, container: &str, report: Report) {
        lock(&self.reports).insert(container.to_string(), report);
        (self.notify)();
    }

    fn set_all_waiting(&self, reason: &str, message: &str) {
        let mut reports = lock(&self.reports);
        for report in reports.values_mut() {
            if matches!(report.state, State::Waiting { .. }) {
                report.state = State::Waiting {
                    reason: reason.to_string(),
                    message: Some(message.to_string()),
                };
            }
        }
        drop(reports);
        (self.notify)();
    }

    /// Sleeps, or returns `false` at once when the pod is being stopped.
    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => !*self.stop.borrow(),
            _ = stop_requested(self.stop.clone()) => false,
        }
    }

    fn restart_policy(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    fn container(&self, name: &str) -> Option<&Container> {
        let spec = self.pod.spec.as_ref()?;
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .find(|c| c.name == name)
    }

    /// Prepares the devices allocated to the pod's claims, waiting (ContainerCreating) until
    /// every claim exists and is allocated; `false` when the pod is stopped meanwhile.
    async fn prepare_devices(&mut self) -> bool {
        if self.cfg.device_env.is_empty()
            || self
                .pod
                .spec
                .as_ref()
                .is_none_or(|s| s.resource_claims.as_ref().is_none_or(Vec::is_empty))
        {
            return true;
        }
        loop {
            let waiting = match crate::dra::prepare(
                &self.cfg.client,
                &self.pod,
                &self.cfg.device_env,
            )
            .await
            {
                Ok(Some(prepared)) => {
                    info!(pod = %self.name, devices = ?prepared, "devices prepared");
                    self.devices = prepared;
                    return true;
                }
                Ok(None) => {
                    "waiting for the pod's resource claims to be created and allocated".to_string()
                }
                Err(e) => format!("preparing devices failed: {e:#}"),
            };
            self.set_all_waiting("ContainerCreating", &waiting);
            if !self.sleep(RETRY_DELAY).await {
                return false;
            }
            // The claim names reach the pod's status after the pod was first seen.
            let api: Api<Pod> = Api::namespaced(
                self.cfg.client.clone(),
                &self.pod.namespace().unwrap_or_default(),
            );
            if let Ok(pod) = api.get(&self.pod.name_any()).await {
                self.pod = pod;
            }
        }
    }

    async fn run(mut self, plan: PodPlan) {
        if !self.prepare_devices().await {
            return;
        }
        let volumes = loop {
            match self.materialize(&plan).await {
                Ok(v) => break v,
                Err(e) => {
                    let message = format!("{e:#}");
                    warn!(pod = %self.name, error = %message, "preparing volumes failed; retrying");
                    self.set_all_waiting("CreateContainerConfigError", &message);
                    if !self.sleep(RETRY_DELAY).await {
                        return;
                    }
                }
            }
        };
        self.sandbox
            .store(true, std::sync::atomic::Ordering::SeqCst);
        (self.notify)();
        for (name, p) in &plan.init {
            let ContainerPlan::Execute { argv } = p else {
                continue;
            };
            match self.run_container(name, argv, true, &volumes).await {
                Outcome::Exited(0) => {}
                // Failed for good (restartPolicy Never) or stopped: nothing else runs.
                Outcome::Exited(_) | Outcome::Stopped => return,
            }
        }
        let mains = plan.main.iter().filter_map(|(name, p)| match p {
            ContainerPlan::Execute { argv } => {
                Some(self.run_container(name, argv, false, &volumes))
            }
            ContainerPlan::Simulated => None,
        });
        let mains = futures::future::join_all(mains);
        tokio::pin!(mains);
        tokio::select! {
            _ = &mut mains => {}
            () = self.refresh_config_maps(&plan) => { mains.await; }
        }
    }

    /// As the kubelet does, keeps the pod's ConfigMap volumes current while its containers run
    /// (every second here): a changed key is rewritten in place (a new file renamed over the
    /// old), so a process re-reading it sees the new content. Returns when the pod is stopped.
    async fn refresh_config_maps(&self, plan: &PodPlan) {
        let in_use = plan::volumes_in_use(&self.pod, plan);
        let volumes: Vec<(PathBuf, Vec<FileSource>)> = self
            .pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter(|v| in_use.contains(v.name.as_str()))
            .filter_map(|v| match plan::volume_source(v).ok()? {
                VolumeSource::Files(sources)
                    if sources
                        .iter()
                        .all(|s| matches!(s, FileSource::ConfigMap { .. })) =>
                {
                    Some((self.dir.join("volumes").join(&v.name), sources))
                }
                _ => None,
            })
            .collect();
        if volumes.is_empty() {
            let _ = stop_requested(self.stop.clone()).await;
            return;
        }
        while self.sleep(Duration::from_secs(1)).await {
            for (dir, sources) in &volumes {
                for source in sources {
                    if let Err(e) = self.write_files(dir, source).await {
                        warn!(pod = %self.name, error = %format!("{e:#}"), "refreshing a ConfigMap volume failed");
                    }
                }
            }
        }
    }

    /// Runs one container until it ends for good under the pod's restart policy.
    async fn run_container(
        &self,
        name: &str,
        argv: &[String],
        is_init: bool,
        volumes: &BTreeMap<String, PathBuf>,
    ) -> Outcome {
        let Some(container) = self.container(name).cloned() else {
            return Outcome::Stopped;
        };
        let resumed = lock(&self.reports).get(name).cloned();
        // Ended for good before the agent restarted: it does not run again.
        if let Some(Report {
            state: State::Terminated(t),
            ..
        }) = &resumed
        {
            return Outcome::Exited(t.exit_code);
        }
        let mut restart_count = resumed.map_or(0, |r| r.restart_count);
        let mut last: Option<Terminated> = None;
        let mut backoff = Duration::from_secs(1);
        let faults = PodFaults::of(self.pod.metadata.annotations.as_ref());
        if restart_count == 0 && !self.slow_start(name, faults.slow_start).await {
            return Outcome::Stopped;
        }
        loop {
            let started = match self.start(&container, argv, volumes).await {
                Ok(started) => started,
                Err(e) => {
                    let message = format!("{e:#}");
                    warn!(pod = %self.name, container = name, error = %message, "cannot start container; retrying");
                    let mut report = Report::waiting("CreateContainerConfigError", Some(message));
                    report.restart_count = restart_count;
                    report.last = last.clone();
                    self.set(name, report);
                    if !self.sleep(RETRY_DELAY).await {
                        return Outcome::Stopped;
                    }
                    continue;
                }
            };
            let started_at = now();
            let prober = Prober::new(&container);
            self.set(
                name,
                Report {
                    state: State::Running {
                        started_at: started_at.clone(),
                    },
                    last: last.clone(),
                    restart_count,
                    started: prober.started(),
                    ready: prober.ready(),
                },
            );
            let ended = self.wait(name, started, faults.kill, prober).await;
            let terminated = self.terminated(&container, &ended, started_at).await;
            info!(pod = %self.name, container = name, exit_code = ended.code, "container exited");
            if ended.stopped {
                return Outcome::Stopped;
            }
            if !self.restarts(is_init, ended.code) {
                self.set(
                    name,
                    Report {
                        state: State::Terminated(terminated),
                        last,
                        restart_count,
                        started: false,
                        ready: false,
                    },
                );
                return Outcome::Exited(ended.code);
            }
            restart_count += 1;
            last = Some(terminated);
            self.set(
                name,
                crash_loop_back_off(name, backoff, &last, restart_count),
            );
            if !self.sleep(backoff).await {
                return Outcome::Stopped;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// With the slow-start fault, waits in `ContainerCreating` before the container's first
    /// start; `false` when the pod is stopped meanwhile.
    async fn slow_start(&self, name: &str, delay: Option<Duration>) -> bool {
        let Some(delay) = delay else {
            return true;
        };
        self.set(
            name,
            Report::waiting(
                "ContainerCreating",
                Some(format!("slow start ({})", faults::POD_SLOW_START_SECONDS)),
            ),
        );
        self.sleep(delay).await
    }

    /// Whether a container that ended with `exit_code` runs again under the restart policy.
    fn restarts(&self, is_init: bool, exit_code: i32) -> bool {
        match (is_init, self.restart_policy()) {
            (_, "Never") => false,
            (true, _) | (false, "OnFailure") => exit_code != 0,
            (false, _) => true,
        }
    }

    /// The terminated state of a container that ended.
    async fn terminated(
        &self,
        container: &Container,
        ended: &Ended,
        started_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) -> Terminated {
        let message = self.termination_message(container, ended.code).await;
        let reason = match ended.killed {
            Some(Kill::OutOfMemory) => "OOMKilled",
            _ => Terminated::reason_for(ended.code),
        };
        Terminated {
            exit_code: ended.code,
            reason: reason.into(),
            message,
            started_at: Some(started_at),
            finished_at: now(),
        }
    }

    fn log_path(&self, container: &str) -> PathBuf {
        self.cfg.logs_dir.join(format!(
            "{}_{}_{container}.log",
            self.pod.namespace().unwrap_or_default(),
            self.pod.name_any()
        ))
    }

    fn container_dir(&self, name: &str) -> PathBuf {
        self.dir.join("containers").join(name)
    }

    /// Resolves the container's environment and mounts and spawns its process group.
    async fn start(
        &self,
        c: &Container,
        argv: &[String],
        volumes: &BTreeMap<String, PathBuf>,
    ) -> Result<Started> {
        let vars = self.environment(c).await?;
        let lookup: HashMap<String, String> = vars.iter().cloned().collect();
        let argv: Vec<String> = argv.iter().map(|a| env::expand(a, &lookup)).collect();
        let binds = self.binds(c, volumes).await?;
        let script = plan::mount_script(&binds, c.working_dir.as_deref());
        let log_path = self.log_path(&c.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        info!(pod = %self.name, container = %c.name, argv = ?argv, log = %log_path.display(), "starting container");
        // A PID namespace per container, as under a container runtime: when its first process
        // (the mount script's shell) ends, every process the container started ends with it,
        // even one that left the container's process group.
        let child = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "--kill-child=KILL",
                "--",
                "/bin/sh",
                "-c",
                &script,
                "sh",
            ])
            .args(&argv)
            .env_clear()
            .envs(vars.iter().cloned())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("spawning unshare")?;
        let pgid = child
            .id()
            .ok_or_else(|| anyhow!("the container process vanished at start"))?;
        Ok(Started {
            child,
            spawned: Spawned {
                pgid,
                at: tokio::time::Instant::now(),
                env: vars,
            },
        })
    }

    /// The container's environment: the agent's (PATH with the own binaries first, HOME, the
    /// API server, the pod's loopback address, prepared devices), then the pod's, which wins.
    async fn environment(&self, c: &Container) -> Result<Vec<(String, String)>> {
        let ns = self.pod.namespace().unwrap_or_default();
        let (cm_names, secret_names) = env::referenced_objects(c);
        let mut objects = Objects::default();
        for name in cm_names {
            let data = get_config_map(&self.cfg.client, &ns, &name).await?;
            objects.config_maps.insert(name, data);
        }
        for name in secret_names {
            let data = get_secret(&self.cfg.client, &ns, &name)
                .await?
                .map(|d| lossy_strings(&d));
            objects.secrets.insert(name, data);
        }
        let pod_env = env::resolve_env(c, &self.pod, &self.pod_ip, &objects)?;

        let home = self.container_dir(&c.name).join("home");
        tokio::fs::create_dir_all(&home).await?;
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            self.cfg.bin_dir.display()
        );
        let api_port = self.cfg.api_port.to_string();
        let mut vars: Vec<(String, String)> = vec![
            ("PATH".into(), path),
            ("HOME".into(), home.display().to_string()),
            ("HOSTNAME".into(), self.pod.name_any()),
            ("KUBERNETES_SERVICE_HOST".into(), self.cfg.api_host.clone()),
            ("KUBERNETES_SERVICE_PORT".into(), api_port.clone()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), api_port),
            (
                POD_LOOPBACK_ENV.into(),
                probe::loopback_address(&self.pod_ip),
            ),
        ];
        // As device plugins and CDI do: the devices prepared for this container.
        vars.extend(self.devices.get(&c.name).cloned().unwrap_or_default());
        vars.retain(|(k, _)| !pod_env.iter().any(|(p, _)| p == k));
        vars.extend(pod_env);
        Ok(vars)
    }

    /// The container's bind mounts (its volume mounts and its termination-message file), each
    /// with whether its source is a directory.
    async fn binds(
        &self,
        c: &Container,
        volumes: &BTreeMap<String, PathBuf>,
    ) -> Result<Vec<(Bind, bool)>> {
        let termination_log = self.container_dir(&c.name).join("termination-log");
        tokio::fs::write(&termination_log, b"").await?;
        let mut binds = plan::plan_binds(c, volumes)?;
        let own_image = c
            .image
            .as_deref()
            .is_some_and(|i| self.cfg.bin_dir.join(plan::image_name(i)).exists());
        if let Some(files) = self.cfg.runtime_files.as_ref().filter(|_| !own_image) {
            binds.push(Bind {
                source: files.clone(),
                target: RUNTIME_FILES_TARGET.into(),
                read_only: true,
            });
        }
        binds.push(Bind {
            source: termination_log,
            target: c
                .termination_message_path
                .clone()
                .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.into()),
            read_only: false,
        });
        let mut typed = Vec::with_capacity(binds.len());
        for bind in binds {
            let is_dir = match tokio::fs::metadata(&bind.source).await {
                Ok(m) => m.is_dir(),
                // A missing subPath is created as a directory, as the kubelet does.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tokio::fs::create_dir_all(&bind.source).await?;
                    true
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("volume source {}", bind.source.display()))
                }
            };
            typed.push((bind, is_dir));
        }
        Ok(typed)
    }

    /// Runs the container's probes, publishing its `started` and `ready` as they change;
    /// returns why the container must be killed (never, without startup or liveness probes).
    async fn probe(&self, name: &str, spawned: &Spawned, prober: Prober) -> String {
        let target = probe::Target {
            address: probe::loopback_address(&self.pod_ip),
            env: spawned.env.clone(),
            pid: namespace_init(spawned.pgid).await,
        };
        probe::run(prober, &target, spawned.at, |is_started, ready| {
            let mut reports = lock(&self.reports);
            if let Some(report) = reports.get_mut(name) {
                report.started = is_started;
                report.ready = ready;
            }
            drop(reports);
            (self.notify)();
        })
        .await
    }

    /// Waits for the container's process to end, or ends it when the pod is stopped, a kill
    /// fault fires or a startup or liveness probe fails for good. A kill fault counts from the
    /// process's spawn and wins over the process's own end once its time has come: a process
    /// the agent sees only after that time (it was still reporting the container as running)
    /// was killed, as a kubelet's runtime would have killed it then, and reports 137.
    async fn wait(
        &self,
        name: &str,
        started: Started,
        kill: Option<(Duration, Kill)>,
        prober: Prober,
    ) -> Ended {
        let Started { mut child, spawned } = started;
        let pgid = spawned.pgid;
        let fault = async {
            match kill {
                Some((after, how)) => {
                    tokio::time::sleep_until(spawned.at + after).await;
                    how
                }
                None => std::future::pending().await,
            }
        };
        let mut killed = None;
        let mut stopped = false;
        let status = tokio::select! {
            biased;
            how = fault => {
                warn!(pod = %self.name, fault = ?how, "killing an executed container (fault)");
                signal_group(pgid, "KILL").await;
                killed = Some(how);
                child.wait().await
            }
            status = child.wait() => status,
            _ = stop_requested(self.stop.clone()) => {
                stopped = true;
                self.terminate(&mut child, pgid).await
            }
            why = self.probe(name, &spawned, prober) => {
                warn!(pod = %self.name, container = name, why = %why, "killing an executed container (probe)");
                self.terminate(&mut child, pgid).await
            }
        };
        // Like a container's PID namespace, the group ends with its main process.
        signal_group(pgid, "KILL").await;
        let code = match status {
            // Killed by the fault, even where the process had ended on its own unseen.
            _ if killed.is_some() => 128 + 9,
            Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            Err(e) => {
                warn!(error = %e, "waiting for container process failed");
                128
            }
        };
        Ended {
            code,
            stopped,
            killed,
        }
    }

    /// Ends a container as the kubelet does: SIGTERM, then SIGKILL after the grace period.
    async fn terminate(
        &self,
        child: &mut tokio::process::Child,
        pgid: u32,
    ) -> std::io::Result<std::process::ExitStatus> {
        signal_group(pgid, "TERM").await;
        match tokio::time::timeout(self.cfg.kill_grace, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                signal_group(pgid, "KILL").await;
                child.wait().await
            }
        }
    }

    /// The termination message: the file at terminationMessagePath, or with
    /// `FallbackToLogsOnError` the log tail of a failed container.
    async fn termination_message(&self, c: &Container, exit_code: i32) -> Option<String> {
        let path = self.container_dir(&c.name).join("termination-log");
        let mut message = match tokio::fs::read(&path).await {
            Ok(bytes) => {
                String::from_utf8_lossy(&bytes[..bytes.len().min(MESSAGE_MAX_BYTES)]).into_owned()
            }
            Err(_) => String::new(),
        };
        let fallback = c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        if message.is_empty() && fallback && exit_code != 0 {
            message = log_tail(&self.log_path(&c.name)).await.unwrap_or_default();
        }
        Some(message).filter(|m| !m.is_empty())
    }

    /// Makes the volumes the executed containers mount available on the host.
    async fn materialize(&self, plan: &PodPlan) -> Result<BTreeMap<String, PathBuf>> {
        let in_use = plan::volumes_in_use(&self.pod, plan);
        let mut out = BTreeMap::new();
        let volumes = self
            .pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten());
        for volume in volumes.filter(|v| in_use.contains(v.name.as_str())) {
            let dir = self.dir.join("volumes").join(&volume.name);
            let path = match plan::volume_source(volume)? {
                VolumeSource::EmptyDir => {
                    tokio::fs::create_dir_all(&dir).await?;
                    dir
                }
                VolumeSource::HostPath { path, create } => {
                    let path = PathBuf::from(path);
                    match create {
                        HostPathCreate::Directory => tokio::fs::create_dir_all(&path).await?,
                        HostPathCreate::File if !path.exists() => {
                            if let Some(parent) = path.parent() {
                                tokio::fs::create_dir_all(parent).await?;
                            }
                            tokio::fs::write(&path, b"").await?;
                        }
                        _ => {}
                    }
                    path
                }
                VolumeSource::Claim(claim) => self.claim_path(&claim).await?,
                VolumeSource::Files(sources) => {
                    // Re-created from scratch so that a retry does not keep stale files.
                    if dir.exists() {
                        tokio::fs::remove_dir_all(&dir).await?;
                    }
                    tokio::fs::create_dir_all(&dir).await?;
                    for source in &sources {
                        self.write_files(&dir, source)
                            .await
                            .with_context(|| format!("volume {}", volume.name))?;
                    }
                    dir
                }
            };
            out.insert(volume.name.clone(), path);
        }
        Ok(out)
    }

    /// The host directory of the PersistentVolume bound to a claim.
    async fn claim_path(&self, claim: &str) -> Result<PathBuf> {
        let ns = self.pod.namespace().unwrap_or_default();
        let pvc = Api::<PersistentVolumeClaim>::namespaced(self.cfg.client.clone(), &ns)
            .get(claim)
            .await
            .with_context(|| format!("claim {claim}"))?;
        let pv_name = pvc
            .spec
            .and_then(|s| s.volume_name)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| anyhow!("claim {claim} is not bound"))?;
        let pv = Api::<PersistentVolume>::all(self.cfg.client.clone())
            .get(&pv_name)
            .await
            .with_context(|| format!("volume {pv_name}"))?;
        let spec = pv.spec.unwrap_or_default();
        let path = spec
            .host_path
            .map(|h| h.path)
            .or_else(|| spec.local.map(|l| l.path))
            .ok_or_else(|| anyhow!("volume {pv_name} is neither hostPath nor local"))?;
        tokio::fs::create_dir_all(&path).await?;
        Ok(PathBuf::from(path))
    }

    async fn write_files(&self, dir: &Path, source: &FileSource) -> Result<()> {
        let ns = self.pod.namespace().unwrap_or_default();
        let client = &self.cfg.client;
        let files: Vec<(String, Vec<u8>)> = match source {
            FileSource::ConfigMap {
                name,
                items,
                optional,
            } => {
                let data = get_config_map(client, &ns, name)
                    .await?
                    .map(|d| d.into_iter().map(|(k, v)| (k, v.into_bytes())).collect());
                select_items("ConfigMap", name, data, items.as_deref(), *optional)?
            }
            FileSource::Secret {
                name,
                items,
                optional,
            } => {
                let data = get_secret(client, &ns, name).await?;
                select_items("Secret", name, data, items.as_deref(), *optional)?
            }
            FileSource::Token {
                audience,
                expiration_seconds,
                path,
            } => vec![(
                path.clone(),
                self.token(audience.as_deref(), *expiration_seconds)
                    .await?
                    .into_bytes(),
            )],
            FileSource::DownwardApi(items) => items
                .iter()
                .map(|(path, field)| {
                    env::field_value(&self.pod, field, &self.pod_ip)
                        .map(|v| (path.clone(), v.into_bytes()))
                })
                .collect::<Result<_>>()?,
        };
        for (rel, content) in files {
            if rel.starts_with('/') || rel.split('/').any(|p| p == "..") {
                bail!("invalid file path {rel:?}");
            }
            let path = dir.join(&rel);
            if tokio::fs::read(&path).await.is_ok_and(|now| now == content) {
                continue;
            }
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            // A reader sees the old content or the new, never a part.
            let partial = path.with_extension("deepinfer-partial");
            tokio::fs::write(&partial, content).await?;
            tokio::fs::rename(&partial, &path).await?;
        }
        Ok(())
    }

    /// A token for the pod's service account, bound to the pod, by TokenRequest.
    async fn token(&self, audience: Option<&str>, expiration_seconds: i64) -> Result<String> {
        let ns = self.pod.namespace().unwrap_or_default();
        let sa = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                // No audiences: the API server's own (as the kubelet does for a projected
                // token without an audience).
                audiences: audience.map(|a| vec![a.to_string()]),
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    kind: Some("Pod".into()),
                    api_version: Some("v1".into()),
                    name: Some(self.pod.name_any()),
                    uid: self.pod.uid(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let response = Api::<ServiceAccount>::namespaced(self.cfg.client.clone(), &ns)
            .create_token_request(&sa, &PostParams::default(), &request)
            .await
            .with_context(|| format!("requesting a token for service account {ns}/{sa}"))?;
        response
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("empty token for service account {ns}/{sa}"))
    }
}

struct Started {
    child: tokio::process::Child,
    spawned: Spawned,
}

/// What is known of a container's process once spawned.
struct Spawned {
    /// Its process group (the `unshare` process leads it).
    pgid: u32,
    /// When the process was spawned: a kill fault's and the probes' clocks start here.
    at: tokio::time::Instant,
    /// The container's environment, for its exec probes.
    env: Vec<(String, String)>,
}

/// How a container's process ended.
struct Ended {
    /// Exit code, 128 + signal when killed.
    code: i32,
    /// Ended because the pod is being stopped.
    stopped: bool,
    /// The fault that killed it.
    killed: Option<Kill>,
}

/// The report of a container waiting `backoff` to be restarted after it ended as `last`.
fn crash_loop_back_off(
    name: &str,
    backoff: Duration,
    last: &Option<Terminated>,
    restart_count: i32,
) -> Report {
    Report {
        state: State::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: Some(format!(
                "back-off {}s restarting failed container={name}",
                backoff.as_secs()
            )),
        },
        last: last.clone(),
        restart_count,
        started: false,
        ready: false,
    }
}

/// The first process of a container's PID namespace (the child of its `unshare`), whose mount
/// namespace exec probes enter.
async fn namespace_init(unshare_pid: u32) -> Option<u32> {
    let children = format!("/proc/{unshare_pid}/task/{unshare_pid}/children");
    for _ in 0..50 {
        if let Ok(text) = tokio::fs::read_to_string(&children).await {
            if let Some(pid) = text.split_whitespace().next().and_then(|p| p.parse().ok()) {
                return Some(pid);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Resolves once the pod is being stopped (or its runtime entry is gone).
async fn stop_requested(mut stop: watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = stop.wait_for(|s| *s).await;
}

/// Sends a signal to a process group; a group that is already gone is fine.
pub async fn signal_group(pgid: u32, signal: &str) {
    let result = Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = result {
        warn!(pgid, signal, error = %e, "running kill failed");
    }
}

async fn log_tail(path: &Path) -> Result<String> {
    let mut file = tokio::fs::File::open(path).await?;
    let len = file.metadata().await?.len();
    file.seek(std::io::SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))
        .await?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).await?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    Ok(lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n"))
}

async fn get_config_map(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("reading ConfigMap {ns}/{name}"))?;
    Ok(cm.map(|cm| {
        let mut data = cm.data.unwrap_or_default();
        for (k, v) in cm.binary_data.unwrap_or_default() {
            data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
        }
        data
    }))
}

async fn get_secret(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("reading Secret {ns}/{name}"))?;
    Ok(secret.map(|s| {
        let mut data: BTreeMap<String, Vec<u8>> = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        for (k, v) in s.string_data.unwrap_or_default() {
            data.insert(k, v.into_bytes());
        }
        data
    }))
}

fn lossy_strings(data: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, String> {
    data.iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect()
}

/// The files of a ConfigMap or Secret volume: every key, or the listed items at their paths.
fn select_items(
    kind: &str,
    name: &str,
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&[(String, String)]>,
    optional: bool,
) -> Result<Vec<(String, Vec<u8>)>> {
    let Some(mut data) = data else {
        if optional {
            return Ok(Vec::new());
        }
        bail!("{kind} {name:?} not found");
    };
    match items {
        None => Ok(data.into_iter().collect()),
        Some(items) => items
            .iter()
            .filter_map(|(key, path)| match data.remove(key) {
                Some(v) => Some(Ok((path.clone(), v))),
                None if optional => None,
                None => Some(Err(anyhow!("key {key:?} not found in {kind} {name:?}"))),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_select_and_rename_keys() {
        let data = Some(BTreeMap::from([
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]));
        let all = select_items("ConfigMap", "cm", data.clone(), None, false).unwrap();
        assert_eq!(all.len(), 2);
        let items = [("b".to_string(), "dir/b.txt".to_string())];
        let picked = select_items("ConfigMap", "cm", data.clone(), Some(&items), false).unwrap();
        assert_eq!(picked, [("dir/b.txt".to_string(), b"2".to_vec())]);
        let missing = [("z".to_string(), "z".to_string())];
        assert!(select_items("ConfigMap", "cm", data.clone(), Some(&missing), false).is_err());
        assert!(select_items("ConfigMap", "cm", data, Some(&missing), true)
            .unwrap()
            .is_empty());
        assert!(select_items("Secret", "s", None, None, false).is_err());
        assert!(select_items("Secret", "s", None, None, true)
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn log_tail_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("node-agent-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let text: String = (0..200).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let tail = log_tail(&path).await.unwrap();
        assert!(tail.ends_with("line 199"));
        assert!(tail.len() <= LOG_TAIL_BYTES as usize);
        assert!(tail.lines().count() <= LOG_TAIL_LINES);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
