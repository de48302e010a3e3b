//! Ascend multi-node groups on the test bed: a 2-node, 32-NPU group (tensor 16 × data 2: 2 pods × 16
//! `huawei.com/Ascend910`, the bed's two Ascend nodes) gets its HCCL rank table. The node agent
//! stands in for the Ascend device plugin and writes the allocation annotation on each pod it
//! places; the operator turns the annotations of all ranks into `hccl.json` in the group's
//! `rings-config-*` ConfigMap, which the pods mount with `RANK_TABLE_FILE` set. When a rank's pod
//! is replaced, the table is rebuilt with the same rank ids. The acceptance run's group gets a
//! table of its own the same way. A SuperPoD group asking for `huawei.com/npu` gets its table from
//! the `ascend-npu-configuration` annotation.

use std::collections::BTreeMap;
use std::time::Duration;

use deepinfer_e2e::support::{self, Operator};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(240);
const ANNOTATION_910: &str = "ascend.kubectl.kubernetes.io/ascend-910-configuration";
const ANNOTATION_NPU: &str = "ascend.kubectl.kubernetes.io/ascend-npu-configuration";

/// The group's pods by rank, once every rank is bound and annotated and the completed table
/// lists exactly them (by pod IP).
async fn completed_table(client: &Client, ns: &str) -> (Value, BTreeMap<String, Pod>) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    support::eventually(
        TIMEOUT,
        "a completed rank table naming the live ranks",
        || async {
            let list = cms
                .list(&ListParams::default().labels("deepinfer.io/component=rank-table"))
                .await
                .ok()?;
            let [cm] = list.items.as_slice() else {
                return None;
            };
            let table: Value = serde_json::from_str(cm.data.as_ref()?.get("hccl.json")?).ok()?;
            if table["status"] != "completed" {
                return None;
            }
            let live: BTreeMap<String, Pod> = pods
                .list(&ListParams::default().labels("deepinfer.io/component=worker"))
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| (p.labels()["deepinfer.io/rank"].clone(), p))
                .collect();
            let ips: Vec<Option<String>> = live
                .values()
                .map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()))
                .collect();
            let listed: Vec<Option<String>> = table["server_list"]
                .as_array()?
                .iter()
                .map(|s| s["container_ip"].as_str().map(str::to_string))
                .collect();
            (ips == listed).then_some((table, live))
        },
    )
    .await
}

/// The operator recorded where the run's two ranks ran: on two nodes of one super-pod (the
/// nodes' `huawei.com/super-pod-id`), each with the 16 NPU ids the device plugin allocated.
async fn check_run_placement(client: &Client, ns: &str, evidence: &str) {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(evidence)
        .await
        .expect("evidence ConfigMap");
    let placement: Value = serde_json::from_str(
        cm.annotations()
            .get("deepinfer.io/placement")
            .expect("the run's placement on its evidence"),
    )
    .expect("placement JSON");
    println!("placement: {placement}");
    assert_eq!(placement["domainKey"], "huawei.com/super-pod-id");
    let ranks = placement["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2, "{placement}");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let mut seen = Vec::new();
    for (rank, row) in ranks.iter().enumerate() {
        assert_eq!(
            (row["role"].as_str(), row["rank"].as_u64()),
            (Some("worker"), Some(rank as u64))
        );
        let node = row["node"].as_str().expect("a node");
        let labels = nodes.get(node).await.expect("the node").labels().clone();
        assert_eq!(
            row["domain"].as_str(),
            Some(labels["huawei.com/super-pod-id"].as_str()),
            "{row}"
        );
        let devices = &row["devices"];
        assert_eq!(
            (devices["resource"].as_str(), devices["count"].as_u64()),
            (Some("huawei.com/Ascend910"), Some(16))
        );
        let ids: Vec<u64> = devices["ids"]
            .as_array()
            .expect("NPU ids")
            .iter()
            .filter_map(|id| id.as_str()?.parse().ok())
            .collect();
        assert_eq!(ids.len(), 16, "{row}");
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "distinct, in id order: {row}"
        );
        seen.push(node.to_string());
    }
    assert_ne!(seen[0], seen[1], "a two-node group: {placement}");
}

async fn cms_data(client: &Client, ns: &str, name: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("evidence ConfigMap")
        .data
        .unwrap_or_default()
}

/// Checks the table against the pods: one server per rank in rank order, the node and the
/// device plugin's devices of that rank's pod, rank ids `rank × 16 + position`.
fn check_table(table: &Value, pods: &BTreeMap<String, Pod>, annotation: &str) {
    assert_eq!(table["server_count"], "2");
    assert_eq!(table["version"], "1.0");
    let servers = table["server_list"].as_array().expect("server_list");
    assert_eq!(servers.len(), 2);
    for (rank, server) in servers.iter().enumerate() {
        let pod = &pods[&rank.to_string()];
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound");
        assert_eq!(
            server["server_id"],
            node.as_str(),
            "rank {rank}'s server is its node"
        );
        let allocation: Value =
            serde_json::from_str(&pod.annotations()[annotation]).expect("allocation JSON");
        let devices = server["device"].as_array().expect("device");
        assert_eq!(devices.len(), 16);
        for (i, d) in devices.iter().enumerate() {
            let allocated = allocation["devices"]
                .as_array()
                .expect("devices")
                .iter()
                .find(|a| a["device_id"] == d["device_id"])
                .unwrap_or_else(|| panic!("{d} not allocated to rank {rank}"));
            assert_eq!(d["device_ip"], allocated["device_ip"]);
            assert_eq!(d["rank_id"], (rank * 16 + i).to_string());
        }
    }
    let nodes: std::collections::BTreeSet<&str> = servers
        .iter()
        .filter_map(|s| s["server_id"].as_str())
        .collect();
    assert_eq!(nodes.len(), 2, "the group spans both Ascend nodes");
}

#[tokio::test]
async fn gpu_an_ascend_two_node_group_gets_its_rank_table_and_keeps_rank_ids_when_a_rank_is_replaced(
) {
    let (client, ns, api) = support::namespace_with_checkpoint("ascend-ranks").await;
    support::wait_for_free_devices(&client, "huawei.com/Ascend910").await;
    let op = Operator::start_with(&ns.name, &["mit"], |s| s.record_node_domains = true).await;
    support::create_deployment(
        &api,
        support::licensed_deployment(
            "pangu",
            json!({"type": "Ascend", "devicesPerPod": 16}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16, "data": 2}}]),
        ),
    )
    .await;

    let (table, pods) = completed_table(&client, &ns.name).await;
    println!(
        "rank table of the 2 x 16 NPU group:\n{}",
        serde_json::to_string_pretty(&table).expect("JSON")
    );
    check_table(&table, &pods, ANNOTATION_910);
    // The acceptance run ran on the same configuration: its two ranks had a rank table of their
    // own, which the leader's engine waited for, and which went with the run.
    let judged = api
        .get_status("pangu")
        .await
        .expect("status")
        .status
        .and_then(|s| s.acceptance)
        .expect("judged");
    let evidence_name = judged.evidence.expect("evidence");
    let evidence = cms_data(&client, &ns.name, &evidence_name).await;
    assert!(
        evidence["engine.log"]
            .contains("DEEPINFER_RANK_TABLE completed (/user/serverid/devindex/config/hccl.json)"),
        "the acceptance engine waited for a completed rank table:\n{}",
        evidence["engine.log"]
    );
    check_run_placement(&client, &ns.name, &evidence_name).await;
    let left: Vec<String> = Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
        .list(&ListParams::default().labels("deepinfer.io/component=rank-table"))
        .await
        .expect("rank tables")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| n.starts_with("rings-config-pangu-accept-"))
        .collect();
    assert!(left.is_empty(), "the run's rank tables are gone: {left:?}");
    for pod in pods.values() {
        let spec = pod.spec.as_ref().expect("spec");
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "rank-table")
            .expect("the rank table is mounted");
        assert!(volume
            .config_map
            .as_ref()
            .is_some_and(|c| c.name.starts_with("rings-config-pangu-worker-")));
        let env = spec.containers[0].env.clone().unwrap_or_default();
        assert!(env.iter().any(|e| e.name == "RANK_TABLE_FILE"
            && e.value.as_deref() == Some("/user/serverid/devindex/config/hccl.json")));
    }

    // Rank 1's pod goes; its replacement gets the same rank ids (on whatever devices).
    let rank_ids = |t: &Value| -> Vec<Vec<String>> {
        t["server_list"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| {
                s["device"]
                    .as_array()
                    .expect("devices")
                    .iter()
                    .map(|d| d["rank_id"].as_str().expect("rank id").to_string())
                    .collect()
            })
            .collect()
    };
    let before = rank_ids(&table);
    let gone = pods["1"].uid().expect("uid");
    Api::<Pod>::namespaced(client.clone(), &ns.name)
        .delete(&pods["1"].name_any(), &DeleteParams::default())
        .await
        .expect("deleting rank 1");
    let (after, pods_after) = support::eventually(TIMEOUT, "rank 1 replaced in the table", || {
        let (client, ns) = (client.clone(), ns.name.clone());
        let gone = gone.clone();
        async move {
            let (t, p) = completed_table(&client, &ns).await;
            (p["1"].uid().as_deref() != Some(gone.as_str())).then_some((t, p))
        }
    })
    .await;
    check_table(&after, &pods_after, ANNOTATION_910);
    assert_eq!(rank_ids(&after), before, "rank ids survive the replacement");
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_superpod_group_asking_for_huawei_npu_gets_its_rank_table_from_the_npu_annotation() {
    let (client, ns, api) = support::namespace_with_checkpoint("ascend-npu").await;
    support::wait_for_free_devices(&client, "huawei.com/npu").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(
        &api,
        support::licensed_deployment(
            "superpod",
            json!({"type": "Ascend", "devicesPerPod": 16, "resourceName": "huawei.com/npu"}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16, "data": 2}}]),
        ),
    )
    .await;
    let (table, pods) = completed_table(&client, &ns.name).await;
    check_table(&table, &pods, ANNOTATION_NPU);
    for pod in pods.values() {
        let spec = pod.spec.as_ref().expect("spec");
        assert!(spec
            .node_name
            .as_deref()
            .is_some_and(|n| n.starts_with("ascend-npu-")));
        let limits = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        assert_eq!(
            limits.get("huawei.com/npu").map(|q| q.0.as_str()),
            Some("16")
        );
        assert!(!limits.contains_key("huawei.com/Ascend910"));
    }
    support::wait_for_phase_within(
        &client,
        &ns.name,
        "superpod",
        deepinfer_operator::api::Phase::Ready,
        TIMEOUT,
    )
    .await;
    println!(
        "huawei.com/npu group: servers {:?}",
        table["server_list"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| s["server_id"].clone())
            .collect::<Vec<_>>()
    );
    op.stop().await;
}
