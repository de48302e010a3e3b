//! Disaggregated serving on the test bed: the acceptance run includes one group of each role,
//! the prefill group started first and the decode group wired to it as in serving; decode groups
//! find the prefill role through their environment and a mounted file that lists the ready
//! prefill leaders, and the file follows the prefill groups as they scale, without the decode pods
//! being replaced.

use std::time::Duration;

use deepinfer_e2e::support::{self, Operator};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
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

/// When the engine of the run's first prefill pod started, as the acceptance run goes; then the
/// judgement once recorded.
async fn watch_the_run(
    api: &Api<deepinfer_operator::api::DeepInferDeployment>,
    pods: &Api<Pod>,
) -> (Timestamp, deepinfer_operator::api::AcceptanceStatus) {
    let start = std::time::Instant::now();
    let mut prefill_started = None;
    loop {
        assert!(start.elapsed() < TIMEOUT, "no judgement within {TIMEOUT:?}");
        if prefill_started.is_none() {
            let run = pods
                .list(
                    &ListParams::default()
                        .labels("deepinfer.io/component=acceptance,deepinfer.io/role=prefill"),
                )
                .await
                .expect("acceptance pods");
            prefill_started = run
                .items
                .iter()
                .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
                .flatten()
                .filter(|c| c.name == "engine")
                .find_map(|c| Some(c.state.as_ref()?.running.as_ref()?.started_at.clone()?.0));
        }
        let judged = api
            .get_status("pd")
            .await
            .ok()
            .and_then(|d| d.status?.acceptance);
        if let Some(judged) = judged {
            let started = prefill_started.expect("the run's prefill engine was seen running");
            return (started, judged);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn gpu_prefill_and_decode_are_accepted_together_then_decode_follows_the_ready_prefill_leaders(
) {
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
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);

    // One run of both roles: the prefill group first, the judged decode group once its engine
    // runs; the judgement names both roles.
    let (prefill_started, judged) = watch_the_run(&api, &pods).await;
    assert_eq!(
        judged.result,
        deepinfer_operator::api::AcceptanceResult::Passed,
        "{:?}",
        judged.reason
    );
    assert_eq!(judged.roles, ["decode", "prefill"]);
    let evidence = judged.evidence.clone().expect("evidence");
    let hash = evidence.trim_start_matches("pd-evidence-");
    let run = format!("pd-accept-{hash}");
    let leader = jobs
        .get(&format!("{run}-0"))
        .await
        .expect("the judged leader's Job is kept");
    let leader_created = leader.metadata.creation_timestamp.expect("created").0;
    assert!(
        leader_created >= prefill_started,
        "the decode leader's Job ({leader_created}) was created before the prefill engine ran ({prefill_started})"
    );
    let prefill_group = format!("{}-p", &run[..run.len() - 2]);
    assert!(
        jobs.get_opt(&format!("{prefill_group}-0"))
            .await
            .expect("get")
            .is_none(),
        "the run's prefill Job is deleted with the verdict"
    );
    let data = cms
        .get(&evidence)
        .await
        .expect("evidence")
        .data
        .expect("data");
    let manifest: Value = serde_json::from_str(&data["manifest.json"]).expect("manifest");
    assert_eq!(manifest["roles"], json!(["decode", "prefill"]));
    let wired = format!(
        "DEEPINFER_PEERS prefill=rank-0.{prefill_group}.{}.svc:8000 endpoints=rank-0.{prefill_group}.{}.svc:8000",
        ns.name, ns.name
    );
    assert!(
        data["engine.log"].contains(&wired),
        "the decode engine was wired to the run's prefill group:\n{}",
        data["engine.log"]
    );
    println!(
        "acceptance: roles {:?}, prefill engine running at {prefill_started}, decode leader Job created at {leader_created}; {wired}",
        judged.roles
    );
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
    // Someone who may edit ConfigMaps points the decode engines elsewhere and keeps the
    // operator's annotations: the next pass writes the file back.
    let original = cms
        .get("pd-role-endpoints")
        .await
        .expect("the peer endpoints")
        .data;
    cms.patch(
        "pd-role-endpoints",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"data": {"endpoints.json": "{\"prefill\":[\"elsewhere.example:8000\"]}"}}),
        ),
    )
    .await
    .expect("rewriting the peer endpoints");
    support::poke(&api, "pd", 2).await;
    support::eventually(TIMEOUT, "the peer endpoints written back", || {
        let (cms, original) = (cms.clone(), original.clone());
        async move { (cms.get("pd-role-endpoints").await.ok()?.data == original).then_some(()) }
    })
    .await;
    // Both roles' serving pods are accepted by that run.
    let accepted = |pod: &Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "deepinfer.io/accepted" && c.status == "True")
            })
    };
    let serving = support::eventually(TIMEOUT, "a prefill and a decode pod accepted", || {
        let pods = pods.clone();
        async move {
            let items = pods
                .list(&ListParams::default().labels("deepinfer.io/component=worker"))
                .await
                .ok()?
                .items;
            (items.len() == 2 && items.iter().all(accepted)).then_some(items)
        }
    })
    .await;
    let decode: Vec<&Pod> = serving
        .iter()
        .filter(|p| p.labels().get("deepinfer.io/role").map(String::as_str) == Some("decode"))
        .collect();
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
    // The decode pod mounts its own revision's list as endpoints.json.
    let revision = decode.labels()["deepinfer.io/revision"].clone();
    let key = format!("endpoints-{}.json", &revision[..5]);
    let items = decode
        .spec
        .as_ref()
        .expect("spec")
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "role-endpoints")
        .and_then(|v| v.config_map.as_ref()?.items.clone())
        .expect("the endpoints file is mounted");
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        (key.as_str(), "endpoints.json")
    );
    let cm = cms
        .get("pd-role-endpoints")
        .await
        .expect("endpoints ConfigMap");
    let own: Value = serde_json::from_str(&cm.data.expect("data")[&key]).expect("JSON");
    assert_eq!(own["prefill"], Value::from(one.clone()));

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

/// Devices of `resource` a pod's engine container requests (requests equal limits).
fn devices_requested(pod: &Pod, resource: &str) -> String {
    let engine = &pod.spec.as_ref().expect("spec").containers[0];
    let resources = engine.resources.as_ref().expect("resources");
    let request = resources.requests.as_ref().and_then(|r| r.get(resource));
    let limit = resources.limits.as_ref().and_then(|l| l.get(resource));
    assert_eq!(request, limit, "{}: requests equal limits", pod.name_any());
    limit.map(|q| q.0.clone()).unwrap_or_default()
}

#[tokio::test]
async fn prefill_of_four_gpus_per_pod_beside_decode_of_two_eight_gpu_pods_is_ready_after_one_run() {
    let (client, ns, api) = support::namespace_with_checkpoint("shape").await;
    support::wait_for_free_devices(&client, "nvidia.com/gpu").await;
    let op = Operator::start_with(&ns.name, &["mit"], |s| s.record_node_domains = true).await;
    let (bound, noting) = bound_acceptance_pods(Api::namespaced(client.clone(), &ns.name));
    // The reference shape: prefill on one 4-GPU pod, decode on two 8-GPU pods inside one NVLink
    // clique; decode takes the deployment's devicesPerPod and names its product itself. Each role
    // keeps to a clique of its own (spec.roles[].pod.nodeSelector): on the bed's two cliques of
    // two 8-GPU nodes, the scheduler's gang placement picks a node for the first decode pod
    // before the second and does not go back, so a prefill pod in a clique can strand the decode
    // gang there (retried only minutes later) while the other clique is free.
    support::create_deployment(
        &api,
        support::licensed_deployment(
            "shape",
            json!({"type": "NVIDIA", "devicesPerPod": 8}),
            json!([
                {"name": "prefill", "replicas": 1, "parallel": {"tensor": 4},
                 "accelerator": {"devicesPerPod": 4},
                 "pod": {"nodeSelector": {"nvidia.com/gpu.clique": "clique-a"}}},
                {"name": "decode", "replicas": 1, "parallel": {"tensor": 16},
                 "accelerator": {"product": "NVIDIA-H200"},
                 "pod": {"nodeSelector": {"nvidia.com/gpu.clique": "clique-b"}}}
            ]),
        ),
    )
    .await;
    let stored = api.get("shape").await.expect("stored");
    assert_eq!(
        stored.spec.roles[0]
            .accelerator
            .as_ref()
            .and_then(|a| a.devices_per_pod),
        Some(4),
        "the API server keeps spec.roles[].accelerator (is the CRD of this tree installed?)"
    );
    let ready = support::status_where(
        &api,
        "shape",
        "Ready with both roles' groups ready",
        Duration::from_secs(240),
        |s| {
            support::condition(s, "Ready").is_some_and(|c| c.status == "True")
                && s.roles.len() == 2
                && s.roles.iter().all(|r| r.ready_groups == 1)
        },
    )
    .await;
    let judged = ready.acceptance.clone().expect("a judgement");
    assert_eq!(
        judged.result,
        deepinfer_operator::api::AcceptanceResult::Passed,
        "{:?}",
        judged.reason
    );
    assert_eq!(judged.roles, ["decode", "prefill"]);
    // One acceptance run judged both roles: one evidence ConfigMap.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let evidence = cms
        .list(&ListParams::default().labels("deepinfer.io/component=evidence"))
        .await
        .expect("evidence")
        .items;
    assert_eq!(
        evidence.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        [judged.evidence.clone().expect("evidence named")],
        "one acceptance run"
    );
    let data = evidence[0].data.clone().expect("data");
    let manifest: Value = serde_json::from_str(&data["manifest.json"]).expect("manifest");
    assert_eq!(
        manifest["groups"]["prefill"]["pods"],
        json!(1),
        "{manifest}"
    );
    assert_eq!(manifest["groups"]["prefill"]["devicesPerPod"], json!(4));
    assert_eq!(manifest["groups"]["decode"]["pods"], json!(2));
    assert_eq!(manifest["groups"]["decode"]["devicesPerPod"], json!(8));
    assert_eq!(
        manifest["groups"]["decode"]["product"],
        json!("NVIDIA-H200")
    );
    noting.abort();
    let bound = bound.lock().expect("bound pods").clone();
    assert_placement_as_the_api_server_reports_it(&client, &evidence[0], &bound).await;

    // The serving pods: one prefill pod of 4 GPUs, two decode pods of 8 in one clique, all
    // accepted and ready.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let workers = pods
        .list(&ListParams::default().labels("deepinfer.io/component=worker"))
        .await
        .expect("workers")
        .items;
    let of = |role: &str| -> Vec<&Pod> {
        workers
            .iter()
            .filter(|p| p.labels().get("deepinfer.io/role").map(String::as_str) == Some(role))
            .collect()
    };
    let (prefill, decode) = (of("prefill"), of("decode"));
    let requests = |pods: &[&Pod]| -> Vec<String> {
        pods.iter()
            .map(|p| devices_requested(p, "nvidia.com/gpu"))
            .collect()
    };
    assert_eq!(requests(&prefill), ["4"]);
    assert_eq!(requests(&decode), ["8", "8"]);
    let ready_pod = |p: &&Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                ["deepinfer.io/accepted", "Ready"]
                    .iter()
                    .all(|t| c.iter().any(|c| c.type_ == *t && c.status == "True"))
            })
    };
    assert!(
        workers.iter().all(|p| ready_pod(&p)),
        "every serving pod is accepted and ready"
    );
    let selector = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        selector(decode[0])
            .get("nvidia.com/gpu.product")
            .map(String::as_str),
        Some("NVIDIA-H200")
    );
    assert!(!selector(prefill[0]).contains_key("nvidia.com/gpu.product"));
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let mut cliques = Vec::new();
    for pod in &decode {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound");
        let node = nodes.get(&node).await.expect("node");
        cliques.push(node.labels()["nvidia.com/gpu.clique"].clone());
    }
    assert_eq!(
        cliques[0], cliques[1],
        "the decode group is inside one clique"
    );
    println!(
        "prefill {:?} × 4 GPUs, decode {:?} × 8 GPUs in {}; judged by {}",
        prefill.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        decode.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        cliques[0],
        evidence[0].name_any()
    );
    op.stop().await;
}

/// Pod name → the node it was bound to, shared with the task that notes them.
type Bound = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, String>>>;

/// The node each acceptance pod of `pods`'s namespace was bound to, as the API server reported
/// it while the run went (the run's pods are deleted once its verdict is recorded): noted until
/// the task is aborted.
fn bound_acceptance_pods(pods: Api<Pod>) -> (Bound, tokio::task::JoinHandle<()>) {
    let bound = Bound::default();
    let noted = bound.clone();
    let task = tokio::spawn(async move {
        let selector = ListParams::default().labels("deepinfer.io/component=acceptance");
        loop {
            let listed = pods.list(&selector).await.map(|l| l.items);
            for pod in listed.unwrap_or_default() {
                if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    let mut seen = noted.lock().expect("bound pods");
                    seen.entry(pod.name_any()).or_insert(node);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    (bound, task)
}

/// The evidence names each rank's pod, the node the API server bound it to and that node's
/// NVLink clique, and the devices it requested: decode's two ranks of 8 GPUs (judged role
/// first), prefill's one of 4.
async fn assert_placement_as_the_api_server_reports_it(
    client: &kube::Client,
    evidence: &ConfigMap,
    bound: &std::collections::BTreeMap<String, String>,
) {
    let annotation = evidence
        .annotations()
        .get("deepinfer.io/placement")
        .unwrap_or_else(|| panic!("no placement on the evidence: {:?}", evidence.annotations()));
    let placement: Value = serde_json::from_str(annotation).expect("placement JSON");
    assert_eq!(
        placement["domainKey"],
        json!("nvidia.com/gpu.clique"),
        "{placement}"
    );
    assert_eq!(placement.get("domainsNotRead"), None, "{placement}");
    let ranks = placement["ranks"].as_array().expect("ranks");
    let shape: Vec<(&str, i64, i64)> = ranks
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap_or_default(),
                r["rank"].as_i64().unwrap_or(-1),
                r["devices"]["count"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [("decode", 0, 8), ("decode", 1, 8), ("prefill", 0, 4)],
        "{placement}"
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for rank in ranks {
        let pod = rank["pod"].as_str().expect("a pod per rank");
        let node = rank["node"].as_str().expect("a node per rank");
        assert_eq!(
            bound.get(pod).map(String::as_str),
            Some(node),
            "{pod} in {bound:?}"
        );
        let labels = nodes.get(node).await.expect("the node").labels().clone();
        assert_eq!(
            rank["domain"].as_str(),
            Some(labels["nvidia.com/gpu.clique"].as_str()),
            "{rank}"
        );
        assert_eq!(rank["devices"]["resource"], json!("nvidia.com/gpu"));
    }
    println!("placement: {placement}");
}
