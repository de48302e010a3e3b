//! The reconciler on the test bed: gates, placement, gang semantics, scaling, revisions,
//! garbage collection and zero-write convergence. Each test has its own namespace and its own
//! in-process operator watching only that namespace. Tests named `gpu_*` need NVIDIA capacity
//! and run one at a time (see `.config/nextest.toml`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use deepinfer_e2e::monitor::{Limits, Monitor};
use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TIMEOUT: Duration = Duration::from_secs(90);

/// A valid NVIDIA deployment over the fixture checkpoint on claim `ckpt`.
fn nvidia(name: &str, replicas: i32, tensor: i32) -> Value {
    support::workers(name, replicas, tensor)
}

async fn setup(prefix: &str) -> (Client, TestNamespace, Api<DeepInferDeployment>) {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, prefix).await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api = Api::namespaced(client.clone(), &ns.name);
    (client, ns, api)
}

async fn create(api: &Api<DeepInferDeployment>, obj: Value) -> DeepInferDeployment {
    let did: DeepInferDeployment = serde_json::from_value(obj).expect("valid test object");
    api.create(&PostParams::default(), &did)
        .await
        .expect("creating the DeepInferDeployment")
}

fn condition<'a>(
    s: &'a DeepInferDeploymentStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == type_)
}

/// Waits until the resource's status satisfies `pred`, returning it.
async fn status_where(
    api: &Api<DeepInferDeployment>,
    name: &str,
    what: &str,
    pred: impl Fn(&DeepInferDeploymentStatus) -> bool,
) -> DeepInferDeploymentStatus {
    support::eventually(TIMEOUT, what, || async {
        let did = api.get(name).await.ok()?;
        did.status.filter(|s| pred(s))
    })
    .await
}

async fn pods_of(client: &Client, ns: &str, did: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "deepinfer.io/deployment={did},deepinfer.io/component=worker"
    )))
    .await
    .expect("listing pods")
    .items
}

/// Waits until `n` worker pods of the desired revision are scheduled and running.
async fn running_workers(client: &Client, ns: &str, did: &str, n: usize) -> Vec<Pod> {
    support::eventually(
        TIMEOUT,
        &format!("{n} running worker pods of {did}"),
        || async {
            let pods = pods_of(client, ns, did).await;
            let running = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (pods.len() == n && running == n).then_some(pods)
        },
    )
    .await
}

async fn node_labels(client: &Client) -> BTreeMap<String, BTreeMap<String, String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
        .into_iter()
        .map(|n| (n.name_any(), n.labels().clone()))
        .collect()
}

fn label<'a>(p: &'a Pod, key: &str) -> &'a str {
    p.labels().get(key).map(String::as_str).unwrap_or("")
}

#[tokio::test]
async fn gpu_nvidia_groups_land_each_inside_one_clique_and_go_ready_once_accepted() {
    let (client, ns, api) = setup("nvidia").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, nvidia("flash", 2, 16)).await;

    let st = status_where(&api, "flash", "checkpoint verified", |s| {
        condition(s, "CheckpointVerified").is_some_and(|c| c.status == "True")
    })
    .await;
    let ck = st.checkpoint.expect("verified checkpoint in status");
    assert!(
        ck.files >= 3 && ck.bytes > 0,
        "checkpoint facts recorded: {ck:?}"
    );

    let pods = running_workers(&client, &ns.name, "flash", 4).await;
    let nodes = node_labels(&client).await;
    let mut clique_of_group: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &pods {
        let spec = p.spec.as_ref().expect("pod spec");
        let node = spec.node_name.clone().expect("scheduled");
        let clique = nodes[&node]
            .get("nvidia.com/gpu.clique")
            .cloned()
            .expect("NVIDIA node with a clique");
        clique_of_group
            .entry(label(p, "deepinfer.io/group").to_string())
            .or_default()
            .insert(clique);
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some(IMAGE));
        let limits = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits");
        assert_eq!(limits["nvidia.com/gpu"].0, "8");
        assert_eq!(
            c.resources
                .as_ref()
                .and_then(|r| r.requests.clone())
                .expect("requests")["nvidia.com/gpu"]
                .0,
            "8"
        );
        let args = c.args.clone().unwrap_or_default();
        assert_eq!(
            args[..2],
            ["--model_name".to_string(), "/models/model".to_string()]
        );
        let env: BTreeMap<_, _> = c
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        assert_eq!(env["HF_HUB_OFFLINE"], "1");
        assert_eq!(env["DEEPINFER_WORLD_SIZE"], "16");
        assert_eq!(
            spec.readiness_gates.as_ref().expect("gates")[0].condition_type,
            "deepinfer.io/accepted"
        );
        assert_eq!(p.owner_references()[0].kind, "DeepInferDeployment");
    }
    assert_eq!(clique_of_group.len(), 2, "two groups");
    for (group, cliques) in &clique_of_group {
        assert_eq!(cliques.len(), 1, "group {group} spans cliques {cliques:?}");
    }
    let all: BTreeSet<_> = clique_of_group.values().flatten().collect();
    assert_eq!(
        all.len(),
        2,
        "the two 16-GPU groups land in distinct cliques"
    );

    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    svcs.get("flash-worker")
        .await
        .unwrap_or_else(|e| panic!("Service flash-worker: {e}"));
    // One headless Service per group, named after its revision and index.
    let rendezvous: BTreeSet<String> = svcs
        .list(
            &ListParams::default()
                .labels("deepinfer.io/deployment=flash,deepinfer.io/component=rendezvous"),
        )
        .await
        .expect("services")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let expected: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.subdomain.clone())
        .collect();
    assert_eq!(rendezvous, expected, "a rendezvous Service per group");
    assert_eq!(rendezvous.len(), 2);
    // Accepted: every pod becomes Ready, the role Service routes to the group leaders.
    let st = status_where(&api, "flash", "Ready=True", |s| {
        condition(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(st.roles[0].desired_groups, 2);
    assert_eq!(st.roles[0].ready_groups, 2);
    assert_eq!(
        st.acceptance.as_ref().map(|a| a.result.as_str()),
        Some("Passed")
    );
    assert!(pods_of(&client, &ns.name, "flash")
        .await
        .iter()
        .all(deepinfer_operator::controller::pods::pod_ready));
    op.stop().await;
    monitor.assert_clean().await;
}

#[tokio::test]
async fn gpu_ascend_groups_request_npus_on_ascend_nodes() {
    let (client, ns, api) = setup("ascend").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut obj = nvidia("pangu", 2, 16);
    obj["spec"]["accelerator"] = json!({"type": "Ascend", "devicesPerPod": 16});
    create(&api, obj).await;
    let pods = running_workers(&client, &ns.name, "pangu", 2).await;
    let nodes = node_labels(&client).await;
    for p in &pods {
        let spec = p.spec.as_ref().expect("spec");
        let node = spec.node_name.clone().expect("scheduled");
        assert_eq!(
            nodes[&node].get("accelerator").map(String::as_str),
            Some("huawei-Ascend910")
        );
        let limits = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits");
        assert_eq!(limits["huawei.com/Ascend910"].0, "16");
        assert_eq!(
            spec.node_selector.as_ref().expect("selector")["accelerator"],
            "huawei-Ascend910"
        );
    }
    op.stop().await;
}

async fn assert_nothing_provisioned(client: &Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let svcs: Api<Service> = Api::namespaced(client.clone(), ns);
    assert!(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .is_empty(),
        "no pod may exist"
    );
    assert!(
        jobs.list(&ListParams::default())
            .await
            .expect("jobs")
            .items
            .is_empty(),
        "no Job may exist"
    );
    assert!(
        svcs.list(&ListParams::default())
            .await
            .expect("services")
            .items
            .is_empty(),
        "no Service may exist"
    );
}

#[tokio::test]
async fn licence_gate_provisions_nothing_and_says_which_check_failed() {
    let (client, ns, api) = setup("licence").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut missing = nvidia("missing", 1, 8);
    missing["metadata"]["annotations"] = json!({});
    let mut mismatch = nvidia("mismatch", 1, 8);
    mismatch["metadata"]["annotations"] = support::licence_accepted(Some("apache-2.0"));
    let mut not_allowed = nvidia("notallowed", 1, 8);
    not_allowed["spec"]["model"]["license"] = json!("deepseek");
    not_allowed["metadata"]["annotations"] = support::licence_accepted(Some("deepseek"));
    for obj in [missing, mismatch, not_allowed] {
        create(&api, obj).await;
    }
    for (name, reason, needle) in [
        (
            "missing",
            "LicenseAnnotationMissing",
            deepinfer_operator::api::LICENSE_ACCEPTED_ANNOTATION,
        ),
        ("mismatch", "LicenseMismatch", "apache-2.0"),
        ("notallowed", "LicenseNotAllowed", "--accepted-licenses"),
    ] {
        let st = status_where(&api, name, reason, |s| {
            condition(s, "LicenseAccepted").is_some_and(|c| c.reason == reason)
        })
        .await;
        let lic = condition(&st, "LicenseAccepted").expect("LicenseAccepted");
        assert_eq!(lic.status, "False");
        assert!(
            lic.message.contains(needle),
            "{name}: message names the fix: {}",
            lic.message
        );
        assert_eq!(condition(&st, "Stalled").expect("Stalled").status, "True");
        assert_eq!(condition(&st, "Ready").expect("Ready").status, "False");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_nothing_provisioned(&client, &ns.name).await;
    op.stop().await;
}

#[tokio::test]
async fn gpu_an_invalid_spec_stalls_alone_while_its_neighbour_converges() {
    // A fleet of 4-GPU nodes: the API server admits devicesPerPod 8 (the CRD's bound is the
    // largest node of any fleet), the operator, told its nodes' size, refuses it.
    let (client, ns, api) = setup("invalid").await;
    let limits = deepinfer_operator::controller::gates::spec::validate::DeviceLimits {
        nvidia: 4,
        ..Default::default()
    };
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start_with_limits(&ns.name, &["mit"], limits).await;
    create(&api, nvidia("bad", 1, 16)).await;
    let mut good = nvidia("good", 1, 4);
    good["spec"]["accelerator"]["devicesPerPod"] = json!(4);
    create(&api, good).await;
    let st = status_where(&api, "bad", "InvalidSpec", |s| {
        condition(s, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let stalled = condition(&st, "Stalled").expect("Stalled");
    assert_eq!(stalled.reason, "InvalidSpec");
    assert!(
        stalled.message.contains("spec.accelerator.devicesPerPod"),
        "names the field: {}",
        stalled.message
    );
    running_workers(&client, &ns.name, "good", 1).await;
    assert!(
        pods_of(&client, &ns.name, "bad").await.is_empty(),
        "the invalid resource gets no pod"
    );
    op.stop().await;
    monitor.assert_clean().await;
}

#[tokio::test]
async fn gpu_scaling_revisions_gang_replacement_and_garbage_collection() {
    let (client, ns, api) = setup("lifecycle").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, nvidia("life", 1, 16)).await;
    let first = running_workers(&client, &ns.name, "life", 2).await;

    // Scale up, then down.
    let pp = PatchParams::default();
    api.patch("life", &pp, &Patch::Merge(json!({"spec": {"roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}]}}))).await.expect("scale up");
    running_workers(&client, &ns.name, "life", 4).await;
    api.patch("life", &pp, &Patch::Merge(json!({"spec": {"roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]}}))).await.expect("scale down");
    let after = running_workers(&client, &ns.name, "life", 2).await;
    let uids = |ps: &[Pod]| {
        ps.iter()
            .map(|p| p.uid().unwrap_or_default())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        uids(&first),
        uids(&after),
        "scaling does not disturb the remaining group"
    );

    // Deleting one rank replaces its whole group.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let rank1 = after
        .iter()
        .find(|p| label(p, "deepinfer.io/rank") == "1")
        .expect("rank 1")
        .name_any();
    pods_api
        .delete(&rank1, &DeleteParams::default())
        .await
        .expect("delete rank 1");
    let replaced = support::eventually(TIMEOUT, "group 0 recreated as a whole", || {
        let client = client.clone();
        let ns = ns.name.clone();
        let old = uids(&after);
        async move {
            let pods = running_workers(&client, &ns, "life", 2).await;
            uids(&pods).is_disjoint(&old).then_some(pods)
        }
    })
    .await;
    assert_eq!(replaced.len(), 2);

    // A revision change replaces the pods with pods of the new revision.
    let old_rev = label(&replaced[0], "deepinfer.io/revision").to_string();
    api.patch(
        "life",
        &pp,
        &Patch::Merge(json!({"spec": {"runtime": {"args": ["--max_batch_size", "8"]}}})),
    )
    .await
    .expect("new args");
    let new_pods = support::eventually(TIMEOUT, "pods of the new revision", || {
        let client = client.clone();
        let ns = ns.name.clone();
        let old_rev = old_rev.clone();
        async move {
            let pods = running_workers(&client, &ns, "life", 2).await;
            pods.iter()
                .all(|p| label(p, "deepinfer.io/revision") != old_rev)
                .then_some(pods)
        }
    })
    .await;
    assert!(new_pods[0].spec.as_ref().expect("spec").containers[0]
        .args
        .as_ref()
        .expect("args")
        .contains(&"--max_batch_size".to_string()));

    // Deleting the resource removes every child through the real garbage collector.
    api.delete("life", &DeleteParams::foreground())
        .await
        .expect("delete");
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    support::eventually(TIMEOUT, "every child garbage-collected", || async {
        let p = pods_api
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len();
        let s = svcs.list(&ListParams::default()).await.ok()?.items.len();
        let j = jobs.list(&ListParams::default()).await.ok()?.items.len();
        (p + s + j == 0).then_some(())
    })
    .await;
    op.stop().await;
    monitor.assert_clean().await;
}

#[tokio::test]
async fn gpu_a_converged_resource_costs_zero_writes() {
    let (client, ns, api) = setup("noop").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, nvidia("still", 1, 16)).await;
    running_workers(&client, &ns.name, "still", 2).await;
    status_where(&api, "still", "workers observed", |s| {
        s.roles.first().is_some_and(|r| r.desired_groups == 1)
    })
    .await;
    // Let the last status write and events settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes_before = op.writes.load(std::sync::atomic::Ordering::Relaxed);
    let reconciles_before = op.ctx.reconciles.load(std::sync::atomic::Ordering::Relaxed);
    // Force reconciles: each annotation change is a watch event on the resource.
    for i in 0..5 {
        api.patch(
            "still",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": i.to_string()}}})),
        )
        .await
        .expect("poke");
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reconciles =
        op.ctx.reconciles.load(std::sync::atomic::Ordering::Relaxed) - reconciles_before;
    let writes = op.writes.load(std::sync::atomic::Ordering::Relaxed) - writes_before;
    println!("no-op reconciles: {reconciles}, writes during them: {writes}");
    assert!(
        reconciles >= 5,
        "the pokes caused reconciles ({reconciles})"
    );
    assert_eq!(writes, 0, "a converged resource must cost no write");
    op.stop().await;
}

#[tokio::test]
async fn a_corrupt_shard_fails_verification_naming_the_shard() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "corrupt").await;
    let host = support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let shard = host.join("model/model-00002-of-00002.safetensors");
    let bytes = std::fs::read(&shard).expect("fixture shard");
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).expect("truncating the shard");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, nvidia("broken", 1, 8)).await;
    let st = status_where(&api, "broken", "VerificationFailed", |s| {
        condition(s, "CheckpointVerified")
            .is_some_and(|c| c.status == "False" && c.reason == "VerificationFailed")
    })
    .await;
    let c = condition(&st, "CheckpointVerified").expect("condition");
    assert!(
        c.message.contains("model-00002-of-00002.safetensors"),
        "names the shard: {}",
        c.message
    );
    assert_eq!(condition(&st, "Stalled").expect("Stalled").status, "True");
    assert!(
        pods_of(&client, &ns.name, "broken").await.is_empty(),
        "no worker after a failed verification"
    );
    op.stop().await;
}

/// The fetch Job reaches the hub through the outbound proxy the operator was given
/// (`--hub-http-proxy`, as the Job's `HTTP_PROXY`), then the checkpoint is verified.
#[tokio::test]
async fn gpu_a_hub_source_is_fetched_by_a_job_through_the_proxy_then_verified() {
    use deepinfer_e2e::fixture_hub::{self, HubConfig};
    let proxy = deepinfer_e2e::forward_proxy::ForwardProxy::start(true, None).await;
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "hub").await;
    let hub = fixture_hub::serve(HubConfig::fixture())
        .await
        .expect("fixture hub");
    // A fresh, empty claim from the bed's default StorageClass receives the checkpoint.
    let (ok, out) = support::kubectl_stdin(
        &["-n", &ns.name, "apply", "-f", "-"],
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: hub-cache}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n",
    );
    assert!(ok, "{out}");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    // The fixture hub is the one endpoint this operator may fetch from.
    let endpoint = hub.endpoint();
    let through = proxy.url();
    let op = Operator::start_with(&ns.name, &["mit"], |s| {
        s.allowed_hub_endpoints = vec![endpoint];
        s.hub_proxy.http = through;
    })
    .await;
    let mut obj = nvidia("fetched", 0, 8);
    obj["spec"]["model"]["name"] = json!(fixture_hub::FIXTURE_REPO);
    obj["spec"]["model"]["source"] = json!({"hub": {
        "revision": fixture_hub::FIXTURE_REVISION, "claimName": "hub-cache", "endpoint": hub.endpoint()
    }});
    create(&api, obj).await;
    let st = status_where(&api, "fetched", "fetched and verified", |s| {
        condition(s, "CheckpointVerified").is_some_and(|c| c.status == "True")
    })
    .await;
    let ck = st.checkpoint.expect("checkpoint status");
    assert_eq!(ck.revision, fixture_hub::FIXTURE_REVISION);
    assert_eq!(ck.license.as_deref(), Some("mit"));
    assert!(ck.files >= 3, "{ck:?}");
    assert!(
        hub.requests().iter().any(|r| r.contains(&format!(
            "/api/models/{}/revision/{}",
            fixture_hub::FIXTURE_REPO,
            fixture_hub::FIXTURE_REVISION
        ))),
        "the fetch Job listed the pinned revision through the hub API: {:?}",
        hub.requests()
    );
    let seen = proxy.seen();
    assert!(
        seen.iter().any(|r| r.line.starts_with(&format!(
            "GET {}/api/models/{}/revision/{}",
            hub.endpoint(),
            fixture_hub::FIXTURE_REPO,
            fixture_hub::FIXTURE_REVISION
        ))),
        "the fetch Job asked through the proxy: {seen:?}"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let names: Vec<String> = jobs
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("fetched-fetch-"))
            && names.iter().any(|n| n.starts_with("fetched-verify-")),
        "{names:?}"
    );
    op.stop().await;
}

/// Events on the real API server: the same news about the same object is one Event counting its
/// repeats in `series` (whatever the object's resourceVersion), other news is another Event, and
/// a repeat after its Event was deleted creates it anew instead of failing.
#[tokio::test]
async fn repeated_news_is_one_event_with_a_series_and_other_news_another() {
    use deepinfer_operator::controller::events::Recorder;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::runtime::events::{Event, EventType, Reporter};

    let client = support::client().await;
    let ns = TestNamespace::new(&client, "events").await;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "deepinfer-operator".into(),
            instance: Some("events-test".into()),
        },
    );
    let about = |rv: &str| ObjectReference {
        api_version: Some("deepinfer.io/v1alpha1".into()),
        kind: Some("DeepInferDeployment".into()),
        namespace: Some(ns.name.clone()),
        name: Some("flash".into()),
        uid: Some("0b9f4a5e-7d55-4c1e-9a7f-1d2e3f4a5b6c".into()),
        resource_version: Some(rv.into()),
        field_path: None,
    };
    let news = |note: &str| Event {
        type_: EventType::Warning,
        reason: "AcceptanceFailed".into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), &ns.name);
    let listed = || async {
        let mut l = events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        l.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        l
    };

    let failed = news("Accepted=False: 3 of 8 shots failed");
    for rv in ["1", "2", "3"] {
        recorder
            .publish(&failed, &about(rv))
            .await
            .expect("publish");
    }
    let l = listed().await;
    assert_eq!(l.len(), 1, "one Event for one piece of news: {l:?}");
    assert_eq!(l[0].series.as_ref().map(|s| s.count), Some(3));
    assert_eq!(
        l[0].note.as_deref(),
        Some("Accepted=False: 3 of 8 shots failed")
    );
    assert_eq!(l[0].reporting_instance.as_deref(), Some("events-test"));
    assert_eq!(l[0].type_.as_deref(), Some("Warning"));

    recorder
        .publish(&news("Accepted=False: 5 of 8 shots failed"), &about("4"))
        .await
        .expect("publish");
    let l = listed().await;
    assert_eq!(l.len(), 2, "other news is another Event: {l:?}");
    assert!(l[1].series.is_none());

    events
        .delete(&l[0].name_any(), &DeleteParams::default())
        .await
        .expect("delete");
    recorder
        .publish(&failed, &about("5"))
        .await
        .expect("a repeat of a deleted Event");
    let l = listed().await;
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!(
        l.iter()
            .filter(|e| e.note.as_deref() == Some("Accepted=False: 3 of 8 shots failed"))
            .map(|e| e.series.is_none())
            .collect::<Vec<_>>(),
        vec![true],
        "created anew, counting from one"
    );
    assert_eq!(recorder.remembered(), 2);
}

/// The bed's API server (Kubernetes 1.37) serves streaming lists, so the operator's watches start
/// from them rather than from paged lists.
#[tokio::test]
async fn the_operator_finds_streaming_lists_served() {
    use deepinfer_operator::controller::InitialLists;
    let client = support::client().await;
    let served = InitialLists::probe(&client, Some("default"))
        .await
        .expect("the API server answers");
    assert_eq!(InitialLists::of(served), InitialLists::Streaming);
}
