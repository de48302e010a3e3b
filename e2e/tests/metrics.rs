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

    for sa in ["scraper", "stranger"] {
        support::kubectl_ok(&["-n", &ns.name, "create", "serviceaccount", sa]);
    }
    let reader = format!("{}-metrics-reader", ns.name);
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
        &format!("--serviceaccount={}:scraper", ns.name),
    ]);
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
