//! Per-role scaling on the test bed: a role with `scaling: external` gets a `DeepInferRole` whose
//! `/scale` subresource the bed's real HorizontalPodAutoscaler controller (in
//! kube-controller-manager) drives from an External metric, served by the bed's external metrics
//! API through the aggregation layer. The role goes from 1 group to 3 and back with no new
//! acceptance run; `kubectl scale` moves it too; a count out of bounds is refused naming the
//! field; and when the role stops being external its DeepInferRole goes and the spec's
//! `replicas` rules again.

use std::time::Duration;

use deepinfer_e2e::support::{self, Operator};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus, DeepInferRole};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const NAME: &str = "scaled";
const ROLE_OBJECT: &str = "scaled-worker";
const READY: Duration = Duration::from_secs(120);
/// The HPA controller syncs every 2 s on the bed; it may first wait for its discovery of the CRD
/// (refreshed every 30 s).
const SCALED: Duration = Duration::from_secs(90);

/// What has been judged: the recorded judgements and the acceptance Jobs ever created.
async fn judged(api: &Api<DeepInferDeployment>, jobs: &Api<Job>) -> (usize, Vec<String>) {
    let status = api.get(NAME).await.expect("the deployment").status;
    let judgements = status.map_or(0, |s| s.judgements.len());
    let mut names: Vec<String> = jobs
        .list(&ListParams::default().labels(&format!(
            "deepinfer.io/deployment={NAME},deepinfer.io/component=acceptance"
        )))
        .await
        .expect("acceptance Jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    names.sort();
    (judgements, names)
}

/// Waits until the role asks for `groups` groups and all of them serve.
async fn serving(
    api: &Api<DeepInferDeployment>,
    roles: &Api<DeepInferRole>,
    groups: i32,
    timeout: Duration,
) -> DeepInferDeploymentStatus {
    let want = format!("{groups}/{groups}");
    let status =
        support::status_where(api, NAME, &format!("{want} groups serving"), timeout, |s| {
            s.groups.as_deref() == Some(want.as_str())
                && support::condition(s, "Ready").is_some_and(|c| c.status == "True")
        })
        .await;
    support::eventually(
        Duration::from_secs(30),
        &format!("DeepInferRole {ROLE_OBJECT} reporting {groups} serving"),
        || async {
            let role = roles.get(ROLE_OBJECT).await.ok()?;
            (role.status?.replicas == groups).then_some(())
        },
    )
    .await;
    status
}

/// Sets the External metric `metric` the bed's metrics API serves.
fn set_metric(metric: &str, value: &str) {
    let dir = support::bed_dir().join("external-metrics");
    std::fs::create_dir_all(&dir).expect("the metric values directory");
    std::fs::write(dir.join(metric), value).expect("writing the metric value");
}

/// Waits until the API server serves the bed's external metrics API (its APIService Available).
fn metrics_api_available() {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, out, err) = support::kubectl(&[
            "get",
            "apiservice",
            "v1beta1.external.metrics.k8s.io",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
        ]);
        if out.trim() == "True" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bed's external metrics API (v1beta1.external.metrics.k8s.io) is not Available: {out}{err}; see external-metrics.log in the bed's logs (cluster-up.sh starts it)"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test]
async fn gpu_a_role_scaled_through_scale_by_the_hpa_controller_and_kubectl_needs_no_new_run() {
    let (client, ns, api) = support::namespace_with_checkpoint("scaling").await;
    metrics_api_available();
    let roles: Api<DeepInferRole> = Api::namespaced(client.clone(), &ns.name);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(
        &api,
        support::licensed_deployment(
            NAME,
            json!({"type": "NVIDIA", "devicesPerPod": 1}),
            json!([{"name": "worker", "replicas": 1, "scaling": "external",
                    "parallel": {"tensor": 1}}]),
        ),
    )
    .await;
    serving(&api, &roles, 1, READY).await;
    let role = roles
        .get(ROLE_OBJECT)
        .await
        .expect("the role's DeepInferRole");
    assert_eq!(role.spec.replicas, 1, "seeded from the role's replicas");
    assert_eq!(
        role.status.map(|s| s.selector).as_deref(),
        Some(
            "deepinfer.io/component=worker,deepinfer.io/deployment=scaled,deepinfer.io/role=worker"
        ),
        "the selector of the role's serving pods, as /scale reports it"
    );
    let before = judged(&api, &jobs).await;
    assert_eq!(before.0, 1, "one judgement");

    // The real HPA controller scales the role through /scale from the External metric.
    let metric = format!("deepinfer_test_queue_{}", ns.name);
    set_metric(&metric, "3");
    let hpa = json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "worker", "namespace": ns.name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferRole",
                               "name": ROLE_OBJECT},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [{"type": "External", "external": {
                "metric": {"name": metric},
                "target": {"type": "AverageValue", "averageValue": "1"}
            }}],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 1}]},
                "scaleDown": {"stabilizationWindowSeconds": 0,
                              "policies": [{"type": "Pods", "value": 4, "periodSeconds": 1}]}
            }
        }
    });
    let (ok, err) = support::kubectl_stdin(&["apply", "-f", "-"], &hpa.to_string());
    assert!(ok, "creating the HPA: {err}");
    serving(&api, &roles, 3, SCALED + READY).await;
    assert_eq!(
        judged(&api, &jobs).await,
        before,
        "scaled up with no new run"
    );

    set_metric(&metric, "1");
    serving(&api, &roles, 1, SCALED).await;
    assert_eq!(
        judged(&api, &jobs).await,
        before,
        "scaled down with no new run"
    );
    support::kubectl_ok(&["-n", &ns.name, "delete", "hpa", "worker"]);

    // kubectl scale moves it too; a count beyond the bound is refused naming the field.
    support::kubectl_ok(&[
        "-n",
        &ns.name,
        "scale",
        &format!("deepinferrole/{ROLE_OBJECT}"),
        "--replicas=2",
    ]);
    serving(&api, &roles, 2, READY).await;
    assert_eq!(
        judged(&api, &jobs).await,
        before,
        "kubectl scale: no new run"
    );
    let (ok, _, err) = support::kubectl(&[
        "-n",
        &ns.name,
        "scale",
        &format!("deepinferrole/{ROLE_OBJECT}"),
        "--replicas=2000",
    ]);
    assert!(!ok && err.contains("spec.replicas"), "refused: {err}");

    // The role stops being external: its DeepInferRole goes, the spec's replicas (1) rule.
    let patch = json!({"spec": {"roles": [{"name": "worker", "replicas": 1,
                                           "parallel": {"tensor": 1}}]}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("switching the role back to replicas");
    support::eventually(
        Duration::from_secs(30),
        "the DeepInferRole deleted",
        || async {
            roles
                .get_opt(ROLE_OBJECT)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    support::status_where(&api, NAME, "1/1 groups serving", READY, |s| {
        s.groups.as_deref() == Some("1/1")
    })
    .await;
    assert_eq!(
        judged(&api, &jobs).await,
        before,
        "switched back: no new run"
    );
    op.stop().await;
}
