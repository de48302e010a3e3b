//! `deepinfer-operator run` as a child process against the bed, and a plain HTTP client for its
//! `/metrics`, `/healthz` and `/readyz` endpoints (served with `--metrics-secure=false` unless a
//! test asks otherwise), scraped the way Prometheus and the kubelet's probes would.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support;

/// The operator process; killed when dropped, so a failing test leaves nothing running.
pub struct OperatorProcess(Child);

/// `--metrics-secure=false` unless `extra` says how to serve: the endpoints are read here over
/// plain HTTP; the tests of the secure endpoints (and the installs by chart and kustomize, which
/// keep the default) speak HTTPS with tokens.
fn plain_metrics(extra: &[&str]) -> Option<&'static str> {
    (!extra.iter().any(|a| a.starts_with("--metrics-secure"))).then_some("--metrics-secure=false")
}

impl OperatorProcess {
    /// Starts `deepinfer-operator run` watching `ns`, allowing the `mit` licence, serving its
    /// endpoints on `address`, with `extra` arguments and `env` set.
    pub fn start(ns: &str, address: SocketAddr, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_binary(&binary(), Some(ns), address, extra, env, None)
    }

    /// As [`OperatorProcess::start`], running `binary`, watching `ns` (all namespaces if `None`),
    /// its output appended to `log` if given.
    pub fn start_binary(
        binary: &std::path::Path,
        ns: Option<&str>,
        address: SocketAddr,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<&std::path::Path>,
    ) -> Self {
        assert!(
            binary.exists(),
            "{} is missing; build it with `cargo build --workspace --bins` (make test does)",
            binary.display()
        );
        let (stdout, stderr) = match log {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
                let copy = file.try_clone().expect("duplicating the log file");
                (Stdio::from(file), Stdio::from(copy))
            }
            None => (Stdio::inherit(), Stdio::inherit()),
        };
        let child = Command::new(binary)
            .args(["run", "--kubeconfig"])
            .arg(support::kubeconfig())
            .args(ns.map(|ns| ["--namespace", ns]).into_iter().flatten())
            .args(["--metrics-address", &address.to_string()])
            .args(["--accepted-licenses", "mit"])
            .args(plain_metrics(extra))
            .args(extra)
            .env_remove("DEEPINFER_NAMESPACE")
            .env_remove("DEEPINFER_NAMESPACES")
            .env_remove("DEEPINFER_METRICS_ADDRESS")
            .env_remove("DEEPINFER_METRICS_SECURE")
            .env_remove("DEEPINFER_LEADER_ELECT")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .envs(env.iter().copied())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        Self(child)
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit.
    pub fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        assert!(send_term(&self.0), "sending SIGTERM");
        self.wait_exit(timeout)
            .unwrap_or_else(|| panic!("the operator did not exit within {timeout:?} of SIGTERM"))
    }

    /// Waits up to `timeout` for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        wait_exit(&mut self.0, timeout)
    }

    /// Kills the process with SIGKILL (no shutdown, no Lease release) and reaps it.
    pub fn kill_hard(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// Panics if the process has exited (a startup failure would otherwise look like a timeout).
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.0.try_wait() {
            panic!("the operator exited early with {status}; its log is above");
        }
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends SIGTERM to `child`; whether it was sent.
pub fn send_term(child: &Child) -> bool {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits up to `timeout` for `child` to exit; `None` if it still runs (or cannot be waited for).
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(100)),
            _ => return None,
        }
    }
}

/// `target/debug/deepinfer-operator` (or under `CARGO_TARGET_DIR`).
pub fn binary() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::repo_root().join("target"))
        .join("debug/deepinfer-operator")
}

/// A loopback address nobody listens on right now.
pub fn free_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("local address")
}

/// `curl -k` of `https://<address><path>` with `token` as bearer: (status, body); status 0 when
/// nothing answered. The certificate is not checked: the operator's own is self-signed.
pub fn https_get(address: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--max-time", "10", "-w", "\n%{http_code}"])
        .arg(format!("https://{address}{path}"));
    if let Some(token) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let out = cmd.output().expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A response: status code, headers (names lower-cased) and body.
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Response {
    /// The first value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One plain HTTP/1.1 GET; `None` while nothing listens.
pub async fn get(address: SocketAddr, path: &str) -> Option<Response> {
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let raw = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP head and body");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Response {
        status,
        headers,
        body: body.to_string(),
    })
}

/// Value of one series (`name{labels}`) in an exposition.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        let value = l.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Value of `series` scraped from the process at `address`, if it answers.
pub async fn scrape(address: SocketAddr, series: &str) -> Option<f64> {
    let response = get(address, "/metrics").await?;
    sample(&response.body, series)
}
