//! Devices through Dynamic Resource Allocation on the test bed: a deployment naming the
//! DeviceClass `gpu.nvidia.com` claims its GPUs through a ResourceClaimTemplate; the real
//! kube-controller-manager makes each pod's claim, the real kube-scheduler allocates devices from
//! the ResourceSlices the node agent publishes as a simulated driver (nodes nvidia-dra-0/1, one
//! NVLink clique, no extended resource), and the agent hands the prepared devices' ids to the
//! engine container, whose inventory the acceptance manifest records. The group's PodGroup also
//! claims one channel of the clique (the simulated ComputeDomain driver), shared by its pods.

use std::collections::BTreeSet;
use std::time::Duration;

use deepinfer_e2e::monitor::{Limits, Monitor};
use deepinfer_e2e::support::{self, Operator};
use deepinfer_operator::api::Phase;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde_json::{json, Value};

const DRA_NODES: [&str; 2] = ["nvidia-dra-0", "nvidia-dra-1"];

/// A licensed deployment of one group of two 8-GPU pods on `accelerator`.
fn two_pod_group(name: &str, accelerator: Value) -> Value {
    support::licensed_deployment(
        name,
        accelerator,
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    )
}

#[tokio::test]
async fn gpu_a_dra_deployment_is_allocated_by_the_scheduler_and_its_devices_are_in_the_manifest() {
    let (client, ns, api) = support::namespace_with_checkpoint("dra").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(
        &api,
        two_pod_group(
            "claims",
            json!({"type": "NVIDIA", "devicesPerPod": 8, "deviceClassName": "gpu.nvidia.com",
                   "domainDeviceClassName": "compute-domain-default-channel.nvidia.com"}),
        ),
    )
    .await;
    support::wait_for_phase_within(
        &client,
        &ns.name,
        "claims",
        Phase::Ready,
        Duration::from_secs(180),
    )
    .await;

    // Two templates (each pod's devices, the group's domain), owned by the deployment.
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), &ns.name);
    let templates = templates
        .list(&ListParams::default())
        .await
        .expect("templates")
        .items;
    assert_eq!(templates.len(), 2, "{templates:?}");
    assert!(templates
        .iter()
        .all(|t| t.owner_references()[0].name == "claims"));
    let named = |prefix: &str| {
        templates
            .iter()
            .map(ResourceExt::name_any)
            .find(|n| n.starts_with(prefix))
            .unwrap_or_else(|| panic!("a template {prefix}*"))
    };
    let template = named("claims-devices-");
    let domain_template = named("claims-domain-");

    // Each worker pod's claim was made from the template and allocated 8 devices of its own node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let workers = pods
        .list(
            &ListParams::default()
                .labels("deepinfer.io/deployment=claims,deepinfer.io/component=worker"),
        )
        .await
        .expect("pods")
        .items;
    assert_eq!(workers.len(), 2, "one group of two 8-GPU pods");
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let mut nodes = BTreeSet::new();
    for pod in &workers {
        let spec = pod.spec.clone().expect("spec");
        let node = spec.node_name.clone().expect("bound");
        assert!(
            DRA_NODES.contains(&node.as_str()),
            "{} on {node}",
            pod.name_any()
        );
        nodes.insert(node.clone());
        let pod_claims = spec.resource_claims.unwrap_or_default();
        assert_eq!(
            pod_claims[0].resource_claim_template_name.as_deref(),
            Some(template.as_str())
        );
        assert_eq!(
            pod_claims[1].resource_claim_template_name.as_deref(),
            Some(domain_template.as_str()),
            "the group's shared domain claim"
        );
        let limits = spec.containers[0]
            .resources
            .clone()
            .and_then(|r| r.limits)
            .unwrap_or_default();
        assert!(
            !limits.contains_key("nvidia.com/gpu"),
            "no extended resource: {limits:?}"
        );
        let claim_name = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.clone())
            .unwrap_or_default()
            .first()
            .and_then(|s| s.resource_claim_name.clone())
            .expect("the controller-manager named the pod's claim");
        let claim = claims.get(&claim_name).await.expect("claim");
        let status = claim.status.expect("claim status");
        let results = status
            .allocation
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .expect("the scheduler allocated the claim");
        assert_eq!(results.len(), 8, "{results:?}");
        assert!(results
            .iter()
            .all(|r| r.driver == "gpu.nvidia.com" && r.pool == node));
        let reserved: Vec<String> = status
            .reserved_for
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(reserved, [pod.name_any()]);
    }
    assert_eq!(
        nodes.len(),
        2,
        "the group's two pods on the clique's two nodes"
    );

    // The group's PodGroup holds one claim on a channel of clique-c, reserved for the PodGroup
    // and shared by both pods.
    let groups: Api<k8s_openapi::api::scheduling::v1beta1::PodGroup> =
        Api::namespaced(client.clone(), &ns.name);
    let group_name = workers[0]
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.clone())
        .expect("the pods name their PodGroup");
    let group = groups.get(&group_name).await.expect("PodGroup");
    let shared = group
        .status
        .and_then(|s| s.resource_claim_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|s| s.name == "domain")
        .and_then(|s| s.resource_claim_name)
        .expect("the PodGroup's domain claim was made");
    let status = claims
        .get(&shared)
        .await
        .expect("claim")
        .status
        .expect("status");
    let results = status
        .allocation
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .expect("the scheduler allocated the domain claim");
    assert_eq!(results.len(), 1);
    assert_eq!(
        (results[0].driver.as_str(), results[0].pool.as_str()),
        ("compute-domain.nvidia.com", "clique-c")
    );
    let reserved = status.reserved_for.unwrap_or_default();
    assert_eq!(
        reserved
            .iter()
            .map(|r| (r.resource.as_str(), r.name.as_str()))
            .collect::<Vec<_>>(),
        [("podgroups", group_name.as_str())]
    );
    println!(
        "group {group_name}: shared claim {shared} on {}/{}",
        results[0].pool, results[0].device
    );

    // The acceptance run's engine saw the devices prepared for it, and the manifest says which.
    let st = api
        .get("claims")
        .await
        .expect("get")
        .status
        .expect("status");
    let evidence = st
        .acceptance
        .and_then(|a| a.evidence)
        .expect("evidence named");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let data = cms
        .get(&evidence)
        .await
        .expect("evidence")
        .data
        .unwrap_or_default();
    let manifest: Value = serde_json::from_str(&data["manifest.json"]).expect("manifest JSON");
    let devices = &manifest["devices"];
    println!("acceptance manifest devices: {devices}");
    assert_eq!(devices["source"], "env", "{devices}");
    let ids = devices["visibleDevices"]["NVIDIA_VISIBLE_DEVICES"]
        .as_str()
        .expect("NVIDIA_VISIBLE_DEVICES recorded")
        .split(',')
        .map(str::to_string)
        .collect::<BTreeSet<_>>();
    assert_eq!(ids.len(), 8, "{ids:?}");
    let node = DRA_NODES
        .iter()
        .find(|n| {
            ids.iter()
                .all(|id| id.starts_with(&format!("SIM-{n}-gpu-")))
        })
        .unwrap_or_else(|| panic!("every id on one DRA node: {ids:?}"));
    println!("acceptance leader's devices on {node}: {ids:?}");
    // Where the run's ranks ran, as the operator recorded it: the leader on that node, each rank
    // with 8 devices of the class and the claim the controller-manager made for its pod.
    let annotations = cms
        .get(&evidence)
        .await
        .expect("evidence")
        .annotations()
        .clone();
    let placement: Value =
        serde_json::from_str(&annotations["deepinfer.io/placement"]).expect("placement JSON");
    println!("acceptance placement: {placement}");
    let ranks = placement["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2, "{placement}");
    assert_eq!(ranks[0]["node"].as_str(), Some(*node), "{placement}");
    for rank in ranks {
        let devices = &rank["devices"];
        assert_eq!(
            (devices["resource"].as_str(), devices["count"].as_u64()),
            (Some("class gpu.nvidia.com"), Some(8)),
            "{rank}"
        );
        let pod = rank["pod"].as_str().expect("a pod");
        let made = devices["claims"]
            .as_array()
            .expect("claims")
            .iter()
            .filter_map(Value::as_str)
            .find_map(|c| c.strip_prefix("devices="))
            .expect("the devices claim");
        assert!(made.starts_with(&format!("{pod}-devices")), "{rank}");
    }

    op.stop().await;
    monitor.assert_clean().await;
}

#[tokio::test]
async fn a_domain_claim_without_pod_groups_stalls_naming_the_field() {
    use deepinfer_operator::controller::{gang::GangScheduling, Settings};
    let (client, ns, api) = support::namespace_with_checkpoint("dra-off").await;
    let mut settings = Settings::new(Some(ns.name.clone()), vec!["mit".into()]);
    settings.operator_image = "deepinfer-operator:dev".into();
    settings.gang_scheduling = GangScheduling::Off;
    let op = Operator::start_with_settings(settings).await;
    support::create_deployment(
        &api,
        two_pod_group(
            "nogang",
            json!({"type": "NVIDIA", "deviceClassName": "gpu.nvidia.com",
                   "domainDeviceClassName": "compute-domain-default-channel.nvidia.com"}),
        ),
    )
    .await;
    support::wait_for_phase(&client, &ns.name, "nogang", Phase::Failed).await;
    let st = api
        .get("nogang")
        .await
        .expect("get")
        .status
        .expect("status");
    let why = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    println!("Stalled: {why}");
    assert!(
        why.contains("spec.accelerator.domainDeviceClassName") && why.contains("--gang-scheduling"),
        "{why}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .is_empty(),
        "nothing is built for a spec this cluster cannot place"
    );
    op.stop().await;
}
