//! The operator binary's HTTP endpoints on the test bed: `deepinfer-operator run` as a child
//! process, scraped the way Prometheus and the kubelet's probes would.

use std::time::Duration;

use deepinfer_e2e::operator_process::{free_address, get, https_get, sample, OperatorProcess};
use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, Phase};
use kube::api::{Api, DeleteParams, PostParams};

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn operator_serves_metrics_health_and_readiness() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "metrics").await;
    let address = free_address();
    let mut operator = OperatorProcess::start(&ns.name, address, &[], &[]);

    let ready = support::eventually(TIMEOUT, "/readyz to answer 200", || {
        operator.assert_running();
        async move { get(address, "/readyz").await.filter(|r| r.status == 200) }
    })
    .await;
    assert_eq!(ready.body.trim(), "ok");

    // No licence annotation: the licence gate holds it in Pending without any accelerator.
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let did = support::unlicensed_deployment("unlicensed");
    api.create(&PostParams::default(), &did)
        .await
        .expect("creating the DeepInferDeployment");
    support::wait_for_phase(&client, &ns.name, "unlicensed", Phase::Pending).await;

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
    // A pass is counted when it starts and timed when it ends: once the passes counted in this
    // scrape have ended, each has its duration.
    support::eventually(TIMEOUT, "every counted pass to be timed", || async move {
        get(address, "/metrics").await.filter(|r| {
            let timed = ["success", "error"].map(|result| {
                sample(
                    &r.body,
                    &format!(r#"deepinfer_reconcile_duration_seconds_count{{result="{result}"}}"#),
                )
                .unwrap_or(0.0)
            });
            timed.iter().sum::<f64>() >= reconciles
        })
    })
    .await;
    assert_eq!(
        sample(text, r#"deepinfer_resources{phase="Ready"}"#),
        Some(0.0),
        "every phase exported: {text}"
    );
    assert!(
        sample(text, "deepinfer_api_writes_total").is_some_and(|n| n >= 1.0),
        "the status patch counted as a write: {text}"
    );
    assert!(
        sample(text, r#"deepinfer_status_writes_total{cause="transition"}"#)
            .is_some_and(|n| n >= 1.0),
        "the first status counted as a transition: {text}"
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
    assert_eq!(
        sample(text, "deepinfer_leader"),
        Some(1.0),
        "without leader election the one instance reconciles: {text}"
    );
    // Nothing is provisioned behind the licence gate: the caches hold no pod.
    assert_eq!(
        sample(text, r#"deepinfer_cached_objects{kind="Pod"}"#),
        Some(0.0),
        "cached pods exported: {text}"
    );
    // The binary's allocator is jemalloc: its live heap is megabytes, in active pages, within
    // what it holds; its bookkeeping is exported beside them.
    let state = |s: &str| sample(text, &format!(r#"deepinfer_heap_bytes{{state="{s}"}}"#));
    let [allocated, active, metadata, resident] =
        ["allocated", "active", "metadata", "resident"].map(state);
    assert!(
        allocated.is_some_and(|a| a > 1024.0 * 1024.0),
        "the heap exported: {text}"
    );
    assert!(
        active >= allocated,
        "active pages hold the live heap: {text}"
    );
    assert!(
        metadata.is_some_and(|m| m > 0.0),
        "the allocator's metadata exported: {text}"
    );
    assert!(
        resident >= active,
        "resident pages hold the active ones: {text}"
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

/// Creates ServiceAccount `sa` in `ns` and binds it to a new ClusterRole granting `get` on the
/// non-resource URL `/metrics` (what the chart's metrics-reader grants); returns the name of the
/// ClusterRole and its binding, for the test to delete.
fn bind_a_metrics_reader(ns: &str, sa: &str) -> String {
    support::kubectl_ok(&["-n", ns, "create", "serviceaccount", sa]);
    let reader = format!("{ns}-metrics-reader");
    support::kubectl_ok(&[
        "create",
        "clusterrole",
        &reader,
        "--verb=get",
        "--non-resource-url=/metrics",
    ]);
    support::kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &reader,
        &format!("--clusterrole={reader}"),
        &format!("--serviceaccount={ns}:{sa}"),
    ]);
    reader
}

/// With `--metrics-secure` the endpoints are HTTPS; `/metrics` refuses a caller without a token
/// (401) and one the API server authenticates but that may not get `/metrics` (403), and serves
/// one bound to a ClusterRole granting `get` on the non-resource URL `/metrics`; the probes
/// answer without a token.
#[tokio::test]
async fn secure_metrics_serve_only_callers_the_api_server_allows() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "securemetrics").await;
    let address = free_address();
    let mut operator = OperatorProcess::start(&ns.name, address, &["--metrics-secure"], &[]);
    support::eventually(TIMEOUT, "/readyz over HTTPS without a token", || {
        operator.assert_running();
        async move { (https_get(address, "/readyz", None).0 == 200).then_some(()) }
    })
    .await;
    let (code, body) = https_get(address, "/metrics", None);
    assert_eq!(code, 401, "no token: {body}");

    support::kubectl_ok(&["-n", &ns.name, "create", "serviceaccount", "stranger"]);
    let reader = bind_a_metrics_reader(&ns.name, "scraper");
    let token = |sa: &str| {
        support::kubectl_ok(&["-n", &ns.name, "create", "token", sa])
            .trim()
            .to_string()
    };
    let (code, body) = https_get(address, "/metrics", Some(&token("stranger")));
    assert_eq!(
        code, 403,
        "a ServiceAccount without the ClusterRole: {body}"
    );
    assert!(
        body.contains("metrics-reader"),
        "the refusal says what to bind: {body}"
    );
    let (code, body) = https_get(address, "/metrics", Some("not-a-token"));
    assert_eq!(
        code, 401,
        "a token the API server does not authenticate: {body}"
    );
    let scraper = token("scraper");
    let metrics = support::eventually(TIMEOUT, "/metrics for the bound ServiceAccount", || {
        let scraper = scraper.clone();
        async move {
            let (code, body) = https_get(address, "/metrics", Some(&scraper));
            (code == 200).then_some(body)
        }
    })
    .await;
    assert!(metrics.contains("deepinfer_build_info{"), "{metrics}");
    support::kubectl_ok(&["delete", "clusterrolebinding,clusterrole", &reader]);
    drop(operator);
}

/// The chart's ServiceMonitor (rendered by the bed's helm) as the scrape configuration the
/// Prometheus Operator makes of it, for the target `address` of an operator running in
/// `operator_ns`: the endpoint's scheme, path, `honorLabels`, TLS settings and bearer token (the
/// scraper's, from `token_file`), and the target label `namespace` the operator's relabelling
/// gives every target (the namespace of the scraped Service). A second job, the same but with
/// `honor_labels: false`, shows what the setting keeps.
fn scrape_config_of_the_service_monitor(
    address: std::net::SocketAddr,
    operator_ns: &str,
    token_file: &std::path::Path,
) -> serde_json::Value {
    let out = std::process::Command::new(support::bed_dir().join("bin/helm"))
        .args(["template", "rel"])
        .arg(support::repo_root().join("charts/deepinfer-operator"))
        .args(["--namespace", operator_ns])
        .args(["--set", "metrics.serviceMonitor.enabled=true"])
        .args(["--show-only", "templates/servicemonitor.yaml"])
        .output()
        .expect("running helm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let monitor: serde_json::Value =
        serde_yaml::from_slice(&out.stdout).expect("the ServiceMonitor is YAML");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "the scrape presents Prometheus' own token: {endpoint}"
    );
    let job = |name: &str, honor: &serde_json::Value| {
        serde_json::json!({
            "job_name": name,
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "honor_labels": honor,
            "scheme": endpoint["scheme"],
            "metrics_path": endpoint["path"],
            "authorization": {"type": "Bearer", "credentials_file": token_file},
            "tls_config": {"insecure_skip_verify": endpoint["tlsConfig"]["insecureSkipVerify"]},
            "static_configs": [{
                "targets": [address.to_string()],
                "labels": {"namespace": operator_ns}
            }]
        })
    };
    serde_json::json!({
        "scrape_configs": [
            job("service-monitor", &endpoint["honorLabels"]),
            job("without-honor-labels", &serde_json::json!(false)),
        ]
    })
}

/// The result of the instant query `query` on the Prometheus at `address`.
async fn prometheus_query(address: std::net::SocketAddr, query: &str) -> Vec<serde_json::Value> {
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    get(address, &format!("/api/v1/query?query={encoded}"))
        .await
        .filter(|r| r.status == 200)
        .and_then(|r| serde_json::from_str::<serde_json::Value>(&r.body).ok())
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
}

/// A real Prometheus (Debian's) scraping the operator's HTTPS `/metrics` as the chart's
/// ServiceMonitor makes it scrape, with a token bound to a ClusterRole granting what the chart's
/// metrics-reader grants:
/// the per-deployment series keep the resource's own namespace in `namespace` (not the
/// operator's; `honor_labels: false` would have renamed it `exported_namespace`), and the
/// Stalled alert's expression of docs/metrics.md names that namespace.
#[tokio::test]
async fn prometheus_scraping_as_the_service_monitor_does_keeps_each_resource_namespace() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "promscrape").await;
    let address = free_address();
    let mut operator = OperatorProcess::start(&ns.name, address, &["--metrics-secure"], &[]);
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    api.create(
        &PostParams::default(),
        &support::unlicensed_deployment("unlicensed"),
    )
    .await
    .expect("creating the DeepInferDeployment");

    // The scraper's identity, bound to a ClusterRole of `get` on /metrics (as the chart's reader).
    let reader = bind_a_metrics_reader(&ns.name, "prometheus");
    let dir = std::env::temp_dir().join(format!("deepinfer-prometheus-{}", ns.name));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let token_file = dir.join("token");
    let token = support::kubectl_ok(&["-n", &ns.name, "create", "token", "prometheus"]);
    std::fs::write(&token_file, token.trim()).expect("writing the token");
    let config = scrape_config_of_the_service_monitor(address, "deepinfer-system", &token_file);
    let config_file = dir.join("prometheus.yml");
    std::fs::write(&config_file, config.to_string()).expect("writing the configuration");

    let web = free_address();
    let mut prometheus = std::process::Command::new("prometheus")
        .arg(format!("--config.file={}", config_file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).expect("a log file"))
        .spawn()
        .expect("starting prometheus (Debian's package, installed by make provision)");

    let series = support::eventually(TIMEOUT, "Prometheus to hold the stalled series", || {
        operator.assert_running();
        async move {
            let found = prometheus_query(web, "deepinfer_deployment_stalled").await;
            (found.len() == 2).then_some(found)
        }
    })
    .await;
    let of_job = |job: &str| {
        series
            .iter()
            .find(|s| s["metric"]["job"] == job)
            .map(|s| s["metric"].clone())
            .unwrap_or_else(|| panic!("a series of job {job}: {series:?}"))
    };
    let kept = of_job("service-monitor");
    assert_eq!(kept["namespace"], ns.name.as_str(), "{kept}");
    assert_eq!(kept["name"], "unlicensed", "{kept}");
    assert!(kept.get("exported_namespace").is_none(), "{kept}");
    let renamed = of_job("without-honor-labels");
    assert_eq!(renamed["namespace"], "deepinfer-system", "{renamed}");
    assert_eq!(renamed["exported_namespace"], ns.name.as_str(), "{renamed}");

    let alert = prometheus_query(
        web,
        r#"max by (namespace, name, reason, job) (deepinfer_deployment_stalled{job="service-monitor"}) > 0"#,
    )
    .await;
    assert_eq!(alert.len(), 1, "{alert:?}");
    assert_eq!(
        alert[0]["metric"]["namespace"],
        ns.name.as_str(),
        "{alert:?}"
    );

    let _ = prometheus.kill();
    let _ = prometheus.wait();
    support::kubectl_ok(&["delete", "clusterrolebinding,clusterrole", &reader]);
    let _ = std::fs::remove_dir_all(&dir);
    drop(operator);
}
