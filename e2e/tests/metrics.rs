//! The operator binary's HTTP endpoints on the test bed: `deepinfer-operator run` as a child
//! process, scraped the way Prometheus and the kubelet's probes would.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, Phase};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The operator process; killed when dropped, so a failing test leaves nothing running.
struct OperatorProcess(Child);

impl OperatorProcess {
    fn start(ns: &str, address: SocketAddr) -> Self {
        let binary = binary();
        assert!(
            binary.exists(),
            "{} is missing; build it with `cargo build --workspace --bins` (make test does)",
            binary.display()
        );
        let child = Command::new(&binary)
            .args(["run", "--kubeconfig"])
            .arg(support::kubeconfig())
            .args(["--namespace", ns])
            .args(["--metrics-address", &address.to_string()])
            .args(["--accepted-licenses", "mit"])
            .env_remove("DEEPINFER_NAMESPACE")
            .env_remove("DEEPINFER_METRICS_ADDRESS")
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        Self(child)
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit.
    fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .expect("running kill");
        assert!(sent.success(), "sending SIGTERM");
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("waiting for the operator") {
                return status;
            }
            assert!(
                start.elapsed() < timeout,
                "the operator did not exit within {timeout:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Panics if the process has exited (a startup failure would otherwise look like a timeout).
    fn assert_running(&mut self) {
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

/// `target/debug/deepinfer-operator` (or under `CARGO_TARGET_DIR`).
fn binary() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::repo_root().join("target"))
        .join("debug/deepinfer-operator")
}

/// A port nobody listens on right now.
fn free_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("local address")
}

/// A response: status code, headers (names lower-cased) and body.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One plain HTTP/1.1 GET; `None` while nothing listens.
async fn get(address: SocketAddr, path: &str) -> Option<Response> {
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
fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        let value = l.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

#[tokio::test]
async fn operator_serves_metrics_health_and_readiness() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "metrics").await;
    let address = free_address();
    let mut operator = OperatorProcess::start(&ns.name, address);

    let ready = support::eventually(TIMEOUT, "/readyz to answer 200", || {
        operator.assert_running();
        async move { get(address, "/readyz").await.filter(|r| r.status == 200) }
    })
    .await;
    assert_eq!(ready.body.trim(), "ok");

    // No licence annotation: the licence gate holds it in Pending without any accelerator.
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let did: DeepInferDeployment = serde_json::from_value(json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": "unlicensed"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                        "commit": "0123456789abcdef0123456789abcdef01234567"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}],
            "acceptance": {"prompts": [{"id": "p1", "prompt": "hi", "structuredOutput": {"regex": "a+"}}]}
        }
    }))
    .expect("valid test object");
    api.create(&PostParams::default(), &did)
        .await
        .expect("creating the DeepInferDeployment");
    support::eventually(TIMEOUT, "status.phase Pending", || async {
        let did = api.get("unlicensed").await.ok()?;
        (did.status?.phase? == Phase::Pending).then_some(())
    })
    .await;

    let metrics = support::eventually(TIMEOUT, "/metrics to count the resource as Pending", || {
        operator.assert_running();
        async move {
            get(address, "/metrics")
                .await
                .filter(|r| sample(&r.body, r#"deepinfer_resources{phase="Pending"}"#) == Some(1.0))
        }
    })
    .await;
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = &metrics.body;
    let reconciles = sample(text, "deepinfer_reconciles_total").expect("reconciles counter");
    assert!(reconciles > 0.0, "reconciles counted: {text}");
    assert!(
        sample(text, "deepinfer_reconcile_duration_seconds_count").is_some_and(|n| n >= reconciles),
        "every pass timed: {text}"
    );
    assert_eq!(
        sample(text, r#"deepinfer_resources{phase="Ready"}"#),
        Some(0.0),
        "every phase exported: {text}"
    );
    assert!(
        sample(text, "deepinfer_api_writes_total").is_some_and(|n| n >= 1.0),
        "the status patch counted as a write: {text}"
    );
    assert_eq!(
        sample(text, r#"deepinfer_acceptance_runs_total{result="Passed"}"#),
        Some(0.0),
        "acceptance results exported before the first run: {text}"
    );
    assert!(
        text.contains("# TYPE deepinfer_acceptance_duration_seconds histogram"),
        "acceptance duration exported: {text}"
    );
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics ends with EOF: {text}"
    );

    let health = get(address, "/healthz").await.expect("/healthz answers");
    assert_eq!(health.status, 200);
    let missing = get(address, "/nope").await.expect("unknown paths answer");
    assert_eq!(missing.status, 404);

    // A deleted resource leaves the phase gauge.
    api.delete("unlicensed", &DeleteParams::default())
        .await
        .expect("deleting the DeepInferDeployment");
    support::eventually(TIMEOUT, "/metrics to forget the deleted resource", || {
        operator.assert_running();
        async move {
            get(address, "/metrics")
                .await
                .filter(|r| sample(&r.body, r#"deepinfer_resources{phase="Pending"}"#) == Some(0.0))
        }
    })
    .await;

    // SIGTERM: the controller and the endpoints stop, and the process exits cleanly.
    let status = operator.terminate(Duration::from_secs(20));
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    assert!(
        get(address, "/healthz").await.is_none(),
        "endpoints closed after exit"
    );
}
