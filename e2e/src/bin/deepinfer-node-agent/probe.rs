//! Container probes of executed containers, as the kubelet's prober runs them: `startupProbe`,
//! `readinessProbe` and `livenessProbe` with `httpGet`, `tcpSocket` or `exec`, each on its own
//! period after `initialDelaySeconds`, with `timeoutSeconds`, `successThreshold` and
//! `failureThreshold`.
//!
//! The counting is pure ([`Prober`]); [`run`] drives it with real checks. As with the kubelet: a
//! container with a startup probe is not started (and runs neither readiness nor liveness
//! probes) until that probe succeeds; a container without a readiness probe is ready once
//! started; a readiness result changes after `successThreshold` successes or
//! `failureThreshold` failures in a row; a startup or liveness probe that fails
//! `failureThreshold` times in a row asks for the container to be killed.
//!
//! HTTP and TCP probes connect to the pod's address on the host ([`loopback_address`]), or to
//! the probe's `host`. HTTPS and gRPC probes are
//! checked as TCP connections (the agent has no TLS or gRPC client). Exec probes run with the
//! container's environment inside its mount namespace (`nsenter`).

use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// `User-Agent` of HTTP probes, as the kubelet of the bed's release sends it.
const USER_AGENT: &str = "kube-probe/1.37";
/// Most output of an exec probe kept in its failure message.
const OUTPUT_MAX_BYTES: usize = 1024;

/// The pod's address on the host, where its executed containers listen and its probes connect:
/// the pod IP itself where the pod range is local to the host (`cluster-up.sh` adds the route), so
/// that a pod reaches another at the address its status reports; else pod IP `a.b.c.d` is
/// `127.b.c.d` (host-network pods: `127.0.0.1`).
pub fn loopback_address(pod_ip: &str) -> String {
    address_on_host(pod_ip, pod_range_is_local())
}

/// The pod's address on the host: its IP when the pod range is `local`, else on loopback.
fn address_on_host(pod_ip: &str, local: bool) -> String {
    match pod_ip.parse::<Ipv4Addr>() {
        Ok(ip) if local => ip.to_string(),
        Ok(ip) => {
            let [_, b, c, d] = ip.octets();
            Ipv4Addr::new(127, b, c, d).to_string()
        }
        Err(_) => Ipv4Addr::LOCALHOST.to_string(),
    }
}

/// Whether an address of the pod range can be listened on (its route is local), checked once.
fn pod_range_is_local() -> bool {
    static LOCAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LOCAL
        .get_or_init(|| std::net::TcpListener::bind((Ipv4Addr::new(10, 244, 255, 254), 0)).is_ok())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Startup,
    Readiness,
    Liveness,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Startup => "startup",
            Kind::Readiness => "readiness",
            Kind::Liveness => "liveness",
        }
    }
}

/// What a probe checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// An HTTP GET: success for a status from 200 to 399.
    Http {
        host: Option<String>,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    /// A TCP connection (also HTTPS and gRPC probes).
    Tcp { host: Option<String>, port: u16 },
    /// A command in the container: success for exit code 0.
    Exec { command: Vec<String> },
}

/// One probe of a container, with the kubelet's defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The check, or why it cannot be made (e.g. a named port the container lacks): every
    /// attempt then fails with that reason, as under the kubelet.
    pub action: Result<Action, String>,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn seconds(value: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(value.unwrap_or(default).max(0)).unwrap_or(0))
}

fn count(value: Option<i32>, default: i32) -> u32 {
    u32::try_from(value.unwrap_or(default).max(1)).unwrap_or(1)
}

/// The port number a probe names: a number, or the name of one of the container's ports.
fn port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => match name.parse::<u16>() {
            Ok(n) => Ok(n),
            Err(_) => c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("container {} has no port named {name:?}", c.name)),
        },
    }
}

fn action(p: &Probe, c: &Container) -> Result<Action, String> {
    if let Some(h) = &p.http_get {
        let port = port(&h.port, c)?;
        let host = h.host.clone().filter(|h| !h.is_empty());
        if h.scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"))
        {
            return Ok(Action::Tcp { host, port });
        }
        let path = h.path.clone().unwrap_or_default();
        return Ok(Action::Http {
            host,
            port,
            path: if path.starts_with('/') {
                path
            } else {
                format!("/{path}")
            },
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        });
    }
    if let Some(t) = &p.tcp_socket {
        return Ok(Action::Tcp {
            host: t.host.clone().filter(|h| !h.is_empty()),
            port: port(&t.port, c)?,
        });
    }
    if let Some(e) = &p.exec {
        let command = e.command.clone().unwrap_or_default();
        if command.is_empty() {
            return Err("exec probe without a command".into());
        }
        return Ok(Action::Exec { command });
    }
    if let Some(g) = &p.grpc {
        let port = u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?;
        return Ok(Action::Tcp { host: None, port });
    }
    Err("probe without a handler".into())
}

impl Spec {
    /// The probe as the kubelet reads it (defaults: period 10 s, timeout 1 s, thresholds 1
    /// success and 3 failures, no initial delay).
    pub fn of(p: &Probe, c: &Container) -> Self {
        Spec {
            action: action(p, c),
            initial_delay: seconds(p.initial_delay_seconds, 0),
            period: seconds(p.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: seconds(p.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: count(p.success_threshold, 1),
            failure_threshold: count(p.failure_threshold, 3),
        }
    }
}

/// One probe's worker: when it runs next and the run of equal results so far.
#[derive(Debug, Clone)]
struct Worker {
    kind: Kind,
    spec: Spec,
    /// Time since the container started at which the probe runs next.
    next: Duration,
    last: Option<bool>,
    run: u32,
    /// The probe's result: a readiness probe starts failing, a liveness probe succeeding, a
    /// startup probe unknown (not started).
    result: bool,
}

/// The probes of one container instance (a restarted container gets a new one).
#[derive(Debug, Clone)]
pub struct Prober {
    workers: Vec<Worker>,
}

impl Prober {
    pub fn new(c: &Container) -> Self {
        let workers = [
            (Kind::Startup, c.startup_probe.as_ref()),
            (Kind::Readiness, c.readiness_probe.as_ref()),
            (Kind::Liveness, c.liveness_probe.as_ref()),
        ]
        .into_iter()
        .filter_map(|(kind, probe)| {
            let spec = Spec::of(probe?, c);
            Some(Worker {
                kind,
                next: spec.initial_delay,
                spec,
                last: None,
                run: 0,
                result: kind == Kind::Liveness,
            })
        })
        .collect();
        Prober { workers }
    }

    fn worker(&self, kind: Kind) -> Option<&Worker> {
        self.workers.iter().find(|w| w.kind == kind)
    }

    /// Whether the container counts as started: no startup probe, or it succeeded.
    pub fn started(&self) -> bool {
        self.worker(Kind::Startup).is_none_or(|w| w.result)
    }

    /// Whether the container is ready: started, and no readiness probe or it succeeds.
    pub fn ready(&self) -> bool {
        self.started() && self.worker(Kind::Readiness).is_none_or(|w| w.result)
    }

    /// Whether a probe of this kind runs in the container's current state: the startup probe
    /// until the container started, the others from then on.
    fn runs(&self, kind: Kind) -> bool {
        (kind == Kind::Startup) != self.started()
    }

    /// When (time since the container started) the next probe runs; `None` without probes.
    pub fn next_due(&self) -> Option<Duration> {
        self.workers
            .iter()
            .filter(|w| self.runs(w.kind))
            .map(|w| w.next)
            .min()
    }

    /// The probes due `elapsed` after the container started, each moved on to its next period.
    pub fn due(&mut self, elapsed: Duration) -> Vec<(Kind, Spec)> {
        let runs: Vec<bool> = self.workers.iter().map(|w| self.runs(w.kind)).collect();
        let mut due = Vec::new();
        for (w, runs) in self.workers.iter_mut().zip(runs) {
            if w.next > elapsed {
                continue;
            }
            // A period missed while a slow probe ran is skipped, as a ticker drops its ticks.
            while w.next <= elapsed {
                w.next += w.spec.period;
            }
            if runs {
                due.push((w.kind, w.spec.clone()));
            }
        }
        due
    }

    /// Records one probe's outcome; returns why the container must be killed when a startup or
    /// liveness probe has now failed `failureThreshold` times in a row.
    pub fn record(&mut self, kind: Kind, outcome: &Result<(), String>) -> Option<String> {
        let w = self.workers.iter_mut().find(|w| w.kind == kind)?;
        let ok = outcome.is_ok();
        w.run = if w.last == Some(ok) { w.run + 1 } else { 1 };
        w.last = Some(ok);
        let threshold = if ok {
            w.spec.success_threshold
        } else {
            w.spec.failure_threshold
        };
        if w.run < threshold {
            return None;
        }
        w.result = ok;
        match outcome {
            Err(why) if kind != Kind::Readiness => Some(format!(
                "{} probe failed {} times in a row: {why}",
                kind.name(),
                w.run
            )),
            _ => None,
        }
    }
}

/// Where a container's probes connect and run.
pub struct Target {
    /// The pod's address for HTTP and TCP probes without a `host`.
    pub address: String,
    /// The container's environment, for exec probes.
    pub env: Vec<(String, String)>,
    /// A process inside the container's mount namespace, for exec probes.
    pub pid: Option<u32>,
}

/// Runs the container's probes from `started_at` on, calling `publish(started, ready)` whenever
/// either changes; returns why the container must be killed (it never returns otherwise).
pub async fn run(
    mut prober: Prober,
    target: &Target,
    started_at: tokio::time::Instant,
    mut publish: impl FnMut(bool, bool),
) -> String {
    let mut shown = (prober.started(), prober.ready());
    loop {
        let Some(next) = prober.next_due() else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(started_at + next).await;
        let due = prober.due(started_at.elapsed());
        let outcomes = futures::future::join_all(
            due.iter()
                .map(|(_, spec)| check(&spec.action, target, spec.timeout)),
        )
        .await;
        for ((kind, _), outcome) in due.iter().zip(&outcomes) {
            if let Some(why) = prober.record(*kind, outcome) {
                return why;
            }
        }
        let now = (prober.started(), prober.ready());
        if now != shown {
            shown = now;
            publish(now.0, now.1);
        }
    }
}

/// One attempt of a probe's check, bounded by its timeout.
pub async fn check(
    action: &Result<Action, String>,
    target: &Target,
    timeout: Duration,
) -> Result<(), String> {
    let (host, port, path, headers) = match action.as_ref().map_err(String::clone)? {
        Action::Exec { command } => return exec(command, target, timeout).await,
        Action::Tcp { host, port } => (host, *port, None, &[][..]),
        Action::Http {
            host,
            port,
            path,
            headers,
        } => (host, *port, Some(path), &headers[..]),
    };
    let host = host.as_deref().unwrap_or(&target.address);
    let attempt = async {
        match path {
            Some(path) => http_get(host, port, path, headers).await,
            None => tokio::net::TcpStream::connect((host, port))
                .await
                .map(drop)
                .map_err(|e| format!("dial tcp {host}:{port}: {e}")),
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "timed out after {}s (timeoutSeconds)",
                timeout.as_secs()
            ))
        })
}

/// The request line and headers of an HTTP probe: the kubelet's `Host`, `User-Agent` and
/// `Accept`, each replaced by a probe header of the same name.
fn http_request(host: &str, port: u16, path: &str, headers: &[(String, String)]) -> String {
    let defaults = [
        ("Host".to_string(), format!("{host}:{port}")),
        ("User-Agent".to_string(), USER_AGENT.to_string()),
        ("Accept".to_string(), "*/*".to_string()),
    ];
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    for (name, value) in defaults
        .iter()
        .filter(|(d, _)| !headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(d)))
        .chain(headers)
    {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    request
}

/// The status code of an HTTP response's status line (`HTTP/1.1 200 OK`).
fn status_code(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    words.next().filter(|v| v.starts_with("HTTP/"))?;
    words.next()?.parse().ok()
}

async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let url = format!("http://{host}:{port}{path}");
    let mut stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("Get {url:?}: dial tcp {host}:{port}: {e}"))?;
    stream
        .write_all(http_request(host, port, path, headers).as_bytes())
        .await
        .map_err(|e| format!("Get {url:?}: {e}"))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.contains(&b'\n') {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("Get {url:?}: {e}"))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    match status_code(&head) {
        Some(code) if (200..400).contains(&code) => Ok(()),
        Some(code) => Err(format!("HTTP probe failed with statuscode: {code}")),
        None => Err(format!("Get {url:?}: malformed HTTP response")),
    }
}

async fn exec(command: &[String], target: &Target, timeout: Duration) -> Result<(), String> {
    let mut cmd = match target.pid {
        Some(pid) => {
            let mut cmd = Command::new("nsenter");
            cmd.args(["--target", &pid.to_string(), "--mount", "--wd", "--"]);
            cmd.args(command);
            cmd
        }
        None => {
            let mut cmd = Command::new(&command[0]);
            cmd.args(&command[1..]);
            cmd
        }
    };
    let child = cmd
        .env_clear()
        .envs(target.env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("exec {command:?}: {e}"))?;
    let pgid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let mut output = out.stdout;
            output.extend_from_slice(&out.stderr);
            output.truncate(OUTPUT_MAX_BYTES);
            Err(format!(
                "command {command:?} exited with {}: {}",
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&output).trim()
            ))
        }
        Ok(Err(e)) => Err(format!("exec {command:?}: {e}")),
        Err(_) => {
            if let Some(pgid) = pgid {
                crate::exec::signal_group(pgid, "KILL").await;
            }
            Err(format!(
                "command {command:?} timed out after {}s",
                timeout.as_secs()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(probes: serde_json::Value) -> Container {
        let mut c = json!({"name": "engine", "ports": [{"name": "serve", "containerPort": 8000}]});
        for (k, v) in probes.as_object().unwrap() {
            c[k] = v.clone();
        }
        serde_json::from_value(c).unwrap()
    }

    fn http(period: i32, failures: i32) -> serde_json::Value {
        json!({"httpGet": {"path": "/health", "port": "serve"}, "periodSeconds": period,
               "failureThreshold": failures})
    }

    const OK: Result<(), String> = Ok(());

    fn fail() -> Result<(), String> {
        Err("connection refused".into())
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_kubelets_defaults_fill_what_a_probe_leaves_out() {
        let c = container(json!({}));
        let spec = Spec::of(
            &serde_json::from_value(json!({"tcpSocket": {"port": 8000}})).unwrap(),
            &c,
        );
        assert_eq!(
            (spec.initial_delay, spec.period, spec.timeout),
            (secs(0), secs(10), secs(1))
        );
        assert_eq!((spec.success_threshold, spec.failure_threshold), (1, 3));
        let named = Spec::of(&serde_json::from_value(http(1, 1)).unwrap(), &c);
        assert_eq!(
            named.action,
            Ok(Action::Http {
                host: None,
                port: 8000,
                path: "/health".into(),
                headers: vec![]
            })
        );
        let missing = Spec::of(
            &serde_json::from_value(json!({"tcpSocket": {"port": "metrics"}})).unwrap(),
            &c,
        );
        assert!(missing.action.unwrap_err().contains("no port named"));
    }

    #[test]
    fn without_probes_a_running_container_is_started_and_ready() {
        let p = Prober::new(&container(json!({})));
        assert!(p.started() && p.ready());
        assert_eq!(p.next_due(), None);
    }

    #[test]
    fn a_readiness_probe_starts_unready_and_follows_its_thresholds() {
        let mut p = Prober::new(&container(json!({"readinessProbe": {
            "httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 2,
            "successThreshold": 2, "failureThreshold": 3}})));
        assert!(p.started() && !p.ready(), "unready until the probe passes");
        assert_eq!(p.next_due(), Some(secs(0)));
        assert_eq!(p.due(secs(0)).len(), 1);
        assert_eq!(p.next_due(), Some(secs(2)));
        assert_eq!(p.record(Kind::Readiness, &OK), None);
        assert!(!p.ready(), "one success of two");
        p.record(Kind::Readiness, &OK);
        assert!(p.ready());
        for _ in 0..2 {
            p.record(Kind::Readiness, &fail());
            assert!(p.ready(), "below the failure threshold");
        }
        // A success in between starts the count again.
        p.record(Kind::Readiness, &OK);
        p.record(Kind::Readiness, &fail());
        p.record(Kind::Readiness, &fail());
        assert!(p.ready());
        assert_eq!(p.record(Kind::Readiness, &fail()), None, "never a kill");
        assert!(!p.ready());
        p.record(Kind::Readiness, &OK);
        assert!(!p.ready(), "needs two successes to come back");
        p.record(Kind::Readiness, &OK);
        assert!(p.ready());
    }

    #[test]
    fn a_startup_probe_gates_the_others_and_kills_past_its_budget() {
        let c = container(json!({
            "startupProbe": http(1, 3),
            "readinessProbe": http(5, 1),
            "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5, "initialDelaySeconds": 1}}));
        let mut p = Prober::new(&c);
        assert!(!p.started() && !p.ready());
        let kinds = |due: Vec<(Kind, Spec)>| due.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(kinds(p.due(secs(0))), [Kind::Startup]);
        assert_eq!(p.record(Kind::Startup, &fail()), None);
        assert_eq!(kinds(p.due(secs(1))), [Kind::Startup], "the others wait");
        assert_eq!(p.record(Kind::Startup, &fail()), None);
        assert_eq!(kinds(p.due(secs(2))), [Kind::Startup]);
        let why = p
            .record(Kind::Startup, &fail())
            .expect("killed at the budget");
        assert!(why.contains("startup probe failed 3 times"), "{why}");

        let mut p = Prober::new(&c);
        p.due(secs(0));
        p.record(Kind::Startup, &OK);
        assert!(p.started());
        assert!(!p.ready(), "ready only once the readiness probe passes");
        assert_eq!(
            p.next_due(),
            Some(secs(1)),
            "the startup probe stops; liveness waits out its initial delay"
        );
        assert_eq!(kinds(p.due(secs(1))), [Kind::Liveness]);
        assert_eq!(kinds(p.due(secs(5))), [Kind::Readiness]);
        assert_eq!(kinds(p.due(secs(6))), [Kind::Liveness]);
        p.record(Kind::Readiness, &OK);
        assert!(p.ready());
    }

    #[test]
    fn a_liveness_probe_kills_after_its_failure_threshold_only() {
        let mut p = Prober::new(&container(json!({"livenessProbe": http(1, 2)})));
        assert!(p.ready(), "no readiness probe: ready once running");
        assert_eq!(p.record(Kind::Liveness, &fail()), None);
        assert_eq!(p.record(Kind::Liveness, &OK), None);
        assert_eq!(p.record(Kind::Liveness, &fail()), None);
        assert!(p
            .record(Kind::Liveness, &fail())
            .is_some_and(|w| w.contains("liveness probe failed 2 times")));
    }

    #[test]
    fn missed_periods_are_skipped_not_run_in_a_burst() {
        let mut p = Prober::new(&container(json!({"readinessProbe": http(1, 1)})));
        assert_eq!(p.due(secs(5)).len(), 1);
        assert_eq!(p.next_due(), Some(secs(6)));
    }

    #[test]
    fn the_pod_address_on_the_loopback_keeps_the_pod_ips_last_octets() {
        assert_eq!(address_on_host("10.244.3.7", false), "127.244.3.7");
        assert_eq!(address_on_host("10.244.3.7", true), "10.244.3.7");
        assert_eq!(address_on_host("127.0.0.1", false), "127.0.0.1");
        assert_eq!(address_on_host("fd00::1", false), "127.0.0.1");
    }

    #[test]
    fn http_requests_carry_the_kubelets_headers_unless_the_probe_sets_them() {
        let r = http_request("127.0.0.1", 8000, "/health", &[]);
        assert!(r.starts_with("GET /health HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"));
        assert!(r.contains("User-Agent: kube-probe/1.37\r\n"));
        let r = http_request("h", 1, "/", &[("user-agent".into(), "mine".into())]);
        assert!(r.contains("user-agent: mine\r\n") && !r.contains("kube-probe"));
        assert_eq!(status_code(b"HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(status_code(b"garbage"), None);
    }

    #[tokio::test]
    async fn checks_pass_and_fail_against_a_real_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for status in ["200 OK", "503 Service Unavailable"] {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
            // Then one that accepts and never answers.
            let (_held, _) = listener.accept().await.unwrap();
            tokio::time::sleep(secs(5)).await;
        });
        let target = Target {
            address: "127.0.0.1".into(),
            env: vec![],
            pid: None,
        };
        let get = Ok(Action::Http {
            host: None,
            port,
            path: "/health".into(),
            headers: vec![],
        });
        assert_eq!(check(&get, &target, secs(1)).await, Ok(()));
        let unavailable = check(&get, &target, secs(1)).await.unwrap_err();
        assert!(unavailable.contains("statuscode: 503"), "{unavailable}");
        let silent = check(&get, &target, secs(1)).await.unwrap_err();
        assert!(silent.contains("timed out"), "{silent}");
        server.abort();
        let exec_ok = Ok(Action::Exec {
            command: vec!["sh".into(), "-c".into(), "test \"$X\" = 1".into()],
        });
        let with_env = Target {
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("X".into(), "1".into()),
            ],
            ..target
        };
        assert_eq!(check(&exec_ok, &with_env, secs(1)).await, Ok(()));
        let exec_fail = Ok(Action::Exec {
            command: vec!["sh".into(), "-c".into(), "echo no; exit 3".into()],
        });
        let failed = check(&exec_fail, &with_env, secs(1)).await.unwrap_err();
        assert!(failed.contains("exited with 3: no"), "{failed}");
    }
}
