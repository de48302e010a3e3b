//! GitOps health on real resources: the kstatus reading of a DeepInferDeployment (the rules
//! Flux, `helm --wait` and the Argo CD health check share) follows the resource through its life,
//! and `kubectl wait --for=condition=Ready` works.

use std::collections::BTreeSet;
use std::time::Duration;

use deepinfer_e2e::monitor::{Limits, Monitor};
use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::kstatus::{self, Status};
use deepinfer_operator::api::DeepInferDeployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn did(name: &str) -> DeepInferDeployment {
    serde_json::from_value(support::deployment(name)).expect("valid object")
}

#[tokio::test]
async fn gpu_kstatus_follows_a_resource_from_in_progress_to_current_to_failed_and_back() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "gitops").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &did("svc"))
        .await
        .expect("create");
    // Before any operator has looked at it, the resource is in progress, never Current.
    let fresh = api.get("svc").await.expect("get");
    assert_eq!(kstatus::compute(&fresh).status, Status::InProgress);

    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    // Record every kstatus reading until Current.
    let seen = std::sync::Mutex::new(BTreeSet::new());
    let current = support::eventually(Duration::from_secs(90), "kstatus Current", || {
        let api = api.clone();
        let seen = &seen;
        async move {
            let d = api.get("svc").await.ok()?;
            let v = kstatus::compute(&d);
            seen.lock().expect("lock").insert(format!("{:?}", v.status));
            (v.status == Status::Current).then_some(d)
        }
    })
    .await;
    let seen = seen.into_inner().expect("lock");
    assert!(
        seen.contains("InProgress"),
        "in progress before Ready: {seen:?}"
    );
    assert!(
        !seen.contains("Failed"),
        "never Failed on the way: {seen:?}"
    );
    let status = current.status.clone().expect("status");
    assert_eq!(status.observed_generation, current.metadata.generation);

    // kubectl wait works on the Ready condition.
    let out = support::kubectl_ok(&[
        "-n",
        &ns.name,
        "wait",
        "--for=condition=Ready",
        "--timeout=30s",
        "did/svc",
    ]);
    assert!(out.contains("condition met"), "{out}");

    // A change makes it InProgress until observed; removing the licence acceptance stalls it.
    api.patch(
        "svc",
        &PatchParams::default(),
        &Patch::Merge(support::licence_patch(None)),
    )
    .await
    .expect("drop the licence annotation");
    let failed = support::eventually(Duration::from_secs(60), "kstatus Failed", || async {
        let d = api.get("svc").await.ok()?;
        let v = kstatus::compute(&d);
        (v.status == Status::Failed).then_some(v)
    })
    .await;
    assert!(
        failed.message.contains("LicenseAnnotationMissing"),
        "{}",
        failed.message
    );
    // A spec change the operator has not observed yet: what a GitOps tool reads then (the
    // resource as stored, not the write's response) is in progress, never Current and never the
    // stale Failed of the older generation. The operator is stopped meanwhile so that the
    // reading is taken while the observed generation lags.
    op.stop().await;
    api.patch("svc", &PatchParams::default(), &Patch::Merge(json!({"spec": {"roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}], "runtime": {"args": ["--x"]}}})))
        .await
        .expect("spec change");
    let lagging = api.get("svc").await.expect("get after the spec change");
    let observed = lagging.status.as_ref().and_then(|s| s.observed_generation);
    assert!(
        observed.is_some() && observed < lagging.metadata.generation,
        "the reading is taken while the operator lags: observed {observed:?}, generation {:?}",
        lagging.metadata.generation
    );
    let reading = kstatus::compute(&lagging);
    assert_eq!(reading.status, Status::InProgress, "{}", reading.message);
    // Once observed, the missing licence fails the new generation too.
    let op = Operator::start(&ns.name, &["mit"]).await;
    let refailed = support::eventually(
        Duration::from_secs(60),
        "the new generation observed",
        || async {
            let d = api.get("svc").await.ok()?;
            (d.status.as_ref()?.observed_generation == d.metadata.generation)
                .then(|| kstatus::compute(&d))
        },
    )
    .await;
    assert_eq!(refailed.status, Status::Failed, "{}", refailed.message);

    // Accepting the licence again brings it back to Current.
    api.patch(
        "svc",
        &PatchParams::default(),
        &Patch::Merge(support::licence_patch(Some("mit"))),
    )
    .await
    .expect("accept again");
    support::eventually(Duration::from_secs(90), "kstatus Current again", || async {
        let d = api.get("svc").await.ok()?;
        (kstatus::compute(&d).status == Status::Current).then_some(())
    })
    .await;
    op.stop().await;
    monitor.assert_clean().await;
}

/// What the tools read of a live resource `name` in `ns`: kstatus from cli-utils and the Argo CD
/// health check under gopher-lua (the bed's health reader), each as (status, message).
fn tools_read(ns: &str, name: &str) -> ((String, String), (String, String)) {
    let obj = support::kubectl_ok(&["-n", ns, "get", "did", name, "-o", "json"]);
    let obj: serde_json::Value = serde_json::from_str(&obj).expect("the resource as JSON");
    let reader = support::bed_dir().join("bin/deepinfer-health");
    let script = support::repo_root().join("deploy/argocd/health.lua");
    let mut child = std::process::Command::new(&reader)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", reader.display()));
    use std::io::Write as _;
    writeln!(child.stdin.take().expect("stdin"), "{obj}").expect("write the object");
    let out = child.wait_with_output().expect("the reader ends");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one reading");
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    (
        (s("kstatus"), s("kstatusMessage")),
        (s("argocd"), s("argocdMessage")),
    )
}

/// A paused resource on the bed reads as held by every tool as docs/gitops.md says: kstatus (the
/// cli-utils library) InProgress naming the pause, Argo CD Suspended, `kubectl wait
/// --for=condition=Ready` not met while the phase is `Paused`; resumed, every tool reads it done.
#[tokio::test]
async fn gpu_a_paused_resource_reads_as_held_by_every_tool() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "held").await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &did("held"))
        .await
        .expect("create");
    let op = Operator::start(&ns.name, &["mit"]).await;
    // kubectl blocks this test's thread, which the operator under test shares: the waits that
    // take time poll the API, and kubectl wait is asked once the state is there (or with a short
    // timeout, for a condition that must not be met).
    let wait = |condition: &str, timeout: &str| {
        support::kubectl(&["-n", &ns.name, "wait", condition, timeout, "did/held"])
    };
    let phase_is = |phase: &'static str| {
        let api = api.clone();
        move || {
            let api = api.clone();
            async move {
                let d = api.get("held").await.ok()?;
                let seen = serde_json::to_value(d.status?.phase?).ok()?;
                (seen == phase).then_some(())
            }
        }
    };
    support::eventually(Duration::from_secs(180), "Ready", phase_is("Ready")).await;
    let (met, out, err) = wait("--for=condition=Ready", "--timeout=10s");
    assert!(met, "kubectl wait for Ready returns once Ready: {out}{err}");
    let (kstatus_read, argo) = tools_read(&ns.name, "held");
    assert_eq!(
        (kstatus_read.0.as_str(), argo.0.as_str()),
        ("Current", "Healthy")
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": true}})),
    )
    .await
    .expect("pause");
    support::eventually(Duration::from_secs(60), "phase Paused", phase_is("Paused")).await;
    let (met, out, err) = wait("--for=jsonpath={.status.phase}=Paused", "--timeout=10s");
    assert!(met, "kubectl wait sees the hold take effect: {out}{err}");
    let (kstatus_read, argo) = tools_read(&ns.name, "held");
    assert_eq!(kstatus_read.0, "InProgress", "{kstatus_read:?}");
    assert!(
        kstatus_read.1.contains("paused"),
        "kstatus names the pause: {kstatus_read:?}"
    );
    assert_eq!(argo.0, "Suspended", "{argo:?}");
    let (met, _, _) = wait("--for=condition=Ready", "--timeout=3s");
    assert!(
        !met,
        "kubectl wait for Ready returns while the resource is held"
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": false}})),
    )
    .await
    .expect("resume");
    support::eventually(Duration::from_secs(120), "Ready again", phase_is("Ready")).await;
    let (kstatus_read, argo) = tools_read(&ns.name, "held");
    assert_eq!(
        (kstatus_read.0.as_str(), argo.0.as_str()),
        ("Current", "Healthy")
    );
    op.stop().await;
}

/// Client-side `kubectl apply` of `crds/` (what Argo CD's default sync and many pipelines do)
/// installs the CRDs: the whole object fits the last-applied annotation. Then server-side apply
/// takes them over, and client-side apply works again after it.
#[tokio::test]
async fn the_crds_install_by_client_side_and_by_server_side_apply() {
    let crds = support::repo_root().join("crds");
    let crds = crds.to_str().expect("utf-8 path");
    for args in [
        vec!["apply", "-f", crds],
        vec!["apply", "--server-side", "--force-conflicts", "-f", crds],
        vec!["apply", "-f", crds],
    ] {
        let (ok, out, err) = support::kubectl(&args);
        assert!(ok, "kubectl {args:?} failed: {err}{out}");
    }
    support::ensure_crd();
}
