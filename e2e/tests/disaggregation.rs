//! Disaggregated serving on the test bed: decode groups find the prefill role through their
//! environment and a mounted file that lists the ready prefill leaders, and the file follows the
//! prefill groups as they scale, without the decode pods being replaced.

use std::time::Duration;

use deepinfer_e2e::support::{self, Operator};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(180);

fn roles(prefill: i32) -> Value {
    json!([
        {"name": "prefill", "replicas": prefill, "parallel": {"tensor": 8}},
        {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}}
    ])
}

#[tokio::test]
async fn gpu_decode_learns_the_ready_prefill_leaders_from_a_file_updated_without_restart() {
    let (client, ns, api) = support::namespace_with_checkpoint("disagg").await;
    support::wait_for_free_devices(&client, "nvidia.com/gpu").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(
        &api,
        support::licensed_deployment(
            "pd",
            json!({"type": "NVIDIA", "devicesPerPod": 8}),
            roles(1),
        ),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let listed = |n: usize| {
        let cms = cms.clone();
        async move {
            let cm = cms.get("pd-role-endpoints").await.ok()?;
            let file: Value =
                serde_json::from_str(cm.data.as_ref()?.get("endpoints.json")?).ok()?;
            let prefill = file["prefill"].as_array()?.clone();
            (prefill.len() == n).then_some(prefill)
        }
    };
    let one = support::eventually(TIMEOUT, "one ready prefill leader listed", || listed(1)).await;
    let decode = pods
        .list(&ListParams::default().labels("deepinfer.io/role=decode"))
        .await
        .expect("decode pods")
        .items;
    let [decode] = decode.as_slice() else {
        panic!("one decode pod expected, got {}", decode.len());
    };
    let env = decode.spec.as_ref().expect("spec").containers[0]
        .env
        .clone()
        .unwrap_or_default();
    let value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| panic!("{name} not set on the decode engine"))
    };
    assert_eq!(
        value("DEEPINFER_PREFILL_SERVICE"),
        format!("pd-prefill.{}.svc:8000", ns.name)
    );
    assert_eq!(
        value("DEEPINFER_PEER_ENDPOINTS_FILE"),
        "/deepinfer/peers/endpoints.json"
    );
    let prefill_leader = pods
        .list(&ListParams::default().labels("deepinfer.io/role=prefill,deepinfer.io/rank=0"))
        .await
        .expect("prefill pods")
        .items;
    let expected = format!(
        "rank-0.{}.{}.svc:8000",
        prefill_leader[0]
            .spec
            .as_ref()
            .and_then(|s| s.subdomain.clone())
            .expect("subdomain"),
        ns.name
    );
    assert_eq!(one, vec![Value::from(expected)]);

    // A second prefill group: once ready it is listed, and the decode pod is the same pod.
    api.patch(
        "pd",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"roles": roles(2)}})),
    )
    .await
    .expect("scaling prefill");
    let two = support::eventually(TIMEOUT, "two ready prefill leaders listed", || listed(2)).await;
    println!("decode's endpoints file: {two:?}");
    let still = pods.get(&decode.name_any()).await.expect("decode pod");
    assert_eq!(still.uid(), decode.uid(), "the decode pod was not replaced");
    op.stop().await;
}
