//! Exclusive placement on the test bed: with `spec.scheduling.exclusiveDomain`, at most one
//! serving group of a deployment per scale-up domain. The bed has two NVLink cliques whose GPUs
//! are extended resources (clique-a, clique-b: two 8-GPU nodes each, `e2e/bed/topology.yaml`);
//! three single-node groups of 8 GPUs would fit in them four times over, yet only two are placed,
//! one per clique, and the third waits for a free domain.

use std::collections::BTreeSet;
use std::time::Duration;

use deepinfer_e2e::support::{self, Operator};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(180);
const CLIQUE: &str = "nvidia.com/gpu.clique";

#[tokio::test]
async fn gpu_an_exclusive_deployment_places_one_group_per_clique_and_the_next_waits() {
    let (client, ns, api) = support::namespace_with_checkpoint("exclusive").await;
    support::wait_for_free_devices(&client, "nvidia.com/gpu").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut did = support::licensed_deployment(
        "alone",
        json!({"type": "NVIDIA", "product": "NVIDIA-H200"}),
        json!([{"name": "worker", "replicas": 3, "parallel": {"tensor": 8}}]),
    );
    did["spec"]["scheduling"] = json!({"exclusiveDomain": true});
    support::create_deployment(&api, did).await;

    // Two groups serve, then no third one is placed however long the scheduler tries.
    support::status_where(&api, "alone", "two ready groups", TIMEOUT, |s| {
        s.roles.first().is_some_and(|r| r.ready_groups == 2)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .list(
            &ListParams::default()
                .labels("deepinfer.io/deployment=alone,deepinfer.io/component=worker"),
        )
        .await
        .expect("worker pods")
        .items;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut cliques = BTreeSet::new();
    let mut waiting = Vec::new();
    for pod in &pods {
        match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            Some(node) => {
                let node = nodes.get(&node).await.expect("the node");
                let clique = node.labels().get(CLIQUE).cloned().expect("a clique node");
                assert!(cliques.insert(clique.clone()), "two groups share {clique}");
            }
            None => waiting.push(pod.name_any()),
        }
    }
    assert_eq!(cliques.len(), 2, "one group in each clique: {cliques:?}");
    assert_eq!(
        waiting.len(),
        1,
        "the third group waits for a domain: {waiting:?}"
    );
    let status = api
        .get("alone")
        .await
        .expect("the resource")
        .status
        .expect("status");
    assert_eq!(status.groups.as_deref(), Some("2/3"), "{status:?}");
    op.stop().await;
}
