//! The acceptance gate on the test bed: Ready means this exact configuration produced valid
//! structured output, with the evidence kept. The engine is the stand-in replaying canned
//! outputs (no GPU, no weights here); everything else — Jobs, scheduling, RBAC, the runner
//! injected into the engine image, the evidence ConfigMap — is real.

use std::collections::BTreeSet;
use std::time::Duration;

use deepinfer_e2e::monitor::{Limits, Monitor};
use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const IMAGE2: &str = "registry.example.com/deepinfer@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
/// The runtime commit of the planner deployments, no part of `IMAGE`: the manifest shows it
/// only by carrying `spec.runtime.commit`.
const COMMIT: &str = "c0ffee00deadbeef00c0ffee00deadbeef00c0ff";
const TIMEOUT: Duration = Duration::from_secs(90);

/// One group of one 8-GPU pod, judged by the shot planner with `canned` outputs.
fn planner(name: &str, canned: &str, mode: &str) -> Value {
    let mut did = support::deployment(name);
    did["spec"]["runtime"]["commit"] = json!(COMMIT);
    did["spec"]["acceptance"] = support::shot_planner_acceptance(canned, mode);
    did
}

async fn setup(prefix: &str) -> (Client, TestNamespace, Api<DeepInferDeployment>) {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, prefix).await;
    support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    let api = Api::namespaced(client.clone(), &ns.name);
    (client, ns, api)
}

async fn create(api: &Api<DeepInferDeployment>, obj: Value) {
    let did: DeepInferDeployment = serde_json::from_value(obj).expect("valid object");
    api.create(&PostParams::default(), &did)
        .await
        .expect("create");
}

fn cond<'a>(
    s: &'a DeepInferDeploymentStatus,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == t)
}

async fn status_where(
    api: &Api<DeepInferDeployment>,
    name: &str,
    what: &str,
    pred: impl Fn(&DeepInferDeploymentStatus) -> bool,
) -> DeepInferDeploymentStatus {
    support::eventually(TIMEOUT, what, || async {
        api.get(name).await.ok()?.status.filter(|s| pred(s))
    })
    .await
}

async fn workers(client: &Client, ns: &str, did: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "deepinfer.io/deployment={did},deepinfer.io/component=worker"
    )))
    .await
    .expect("pods")
    .items
}

async fn acceptance_jobs(client: &Client, ns: &str, did: &str) -> Vec<Job> {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!(
        "deepinfer.io/deployment={did},deepinfer.io/component=acceptance"
    )))
    .await
    .expect("jobs")
    .items
}

#[tokio::test]
async fn gpu_a_passing_revision_goes_ready_and_only_then_gets_workers_and_traffic() {
    let (client, ns, api) = setup("accept-pass").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut plan = planner("plan", "valid-2-2-2.jsonl", "replay");
    plan["spec"]["serviceOwners"] =
        json!({"kvCache": "platform-kv team", "routing": "gateway team"});
    create(&api, plan).await;
    let st = status_where(&api, "plan", "Ready=True", |s| {
        cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    assert_eq!(
        cond(&st, "AcceptancePassed")
            .expect("AcceptancePassed")
            .status,
        "True"
    );
    let acc = st.acceptance.clone().expect("acceptance recorded");
    assert_eq!(
        (acc.result.as_str(), acc.prompts, acc.passed),
        ("Passed", 4, 4)
    );
    assert_eq!(
        Some(acc.revision.as_str()),
        st.revision.as_deref(),
        "the pass is recorded for this revision"
    );

    // Workers were created only after the acceptance Job had finished.
    let jobs = acceptance_jobs(&client, &ns.name, "plan").await;
    assert_eq!(jobs.len(), 1, "one acceptance Job for a one-pod group");
    let finished = jobs[0]
        .status
        .as_ref()
        .and_then(|s| s.completion_time.clone())
        .expect("acceptance Job completed")
        .0;
    let pods = workers(&client, &ns.name, "plan").await;
    assert_eq!(pods.len(), 1);
    for p in &pods {
        let created = p.metadata.creation_timestamp.clone().expect("created").0;
        assert!(
            created >= finished,
            "worker {} created at {created} before acceptance finished at {finished}",
            p.name_any()
        );
        assert!(
            deepinfer_operator::controller::pods::is_accepted(p),
            "the accepted condition is set"
        );
    }
    // The role Service sends traffic to the accepted leader.
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), &ns.name);
    let ready_ips = support::eventually(TIMEOUT, "the role Service's ready endpoints", || async {
        let e = eps.get("plan-worker").await.ok()?;
        let ips: Vec<String> = e
            .subsets
            .unwrap_or_default()
            .into_iter()
            .flat_map(|s| s.addresses.unwrap_or_default())
            .map(|a| a.ip)
            .collect();
        (!ips.is_empty()).then_some(ips)
    })
    .await;
    let leader_ip = pods[0]
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod IP");
    assert_eq!(ready_ips, vec![leader_ip]);

    // The evidence holds the manifest and the outputs.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let evidence = cms
        .get(acc.evidence.as_deref().expect("evidence named"))
        .await
        .expect("evidence ConfigMap");
    let data = evidence.data.clone().unwrap_or_default();
    let manifest: Value = serde_json::from_str(&data["manifest.json"]).expect("manifest JSON");
    // The fields themselves, each compared whole: a search of the whole manifest would also
    // find a commit that is a prefix of the image digest.
    assert!(
        !IMAGE.contains(COMMIT),
        "the commit is no part of the image"
    );
    assert_eq!(
        manifest["runtime"]["commit"], COMMIT,
        "manifest records the runtime commit: {}",
        manifest["runtime"]
    );
    assert_eq!(
        manifest["runtime"]["imageDigest"],
        IMAGE.split('@').nth(1).expect("digest"),
        "manifest records the image digest: {}",
        manifest["runtime"]
    );
    // What ran, from what, and who owns the front end.
    assert_eq!(
        manifest["checkpoint"]["model"],
        "deepseek-ai/DeepSeek-V4.1-Flash-1017"
    );
    assert_eq!(manifest["checkpoint"]["claim"], "ckpt");
    assert_eq!(manifest["checkpoint"]["path"], "model");
    assert!(
        manifest["checkpoint"]["sourceKey"]
            .as_str()
            .is_some_and(|k| !k.is_empty()),
        "{}",
        manifest["checkpoint"]
    );
    assert_eq!(manifest["runtime"]["roleImages"], json!({"worker": IMAGE}));
    assert_eq!(
        manifest["serviceOwners"],
        json!({"kvCache": "platform-kv team", "routing": "gateway team"})
    );
    assert_eq!(evidence.owner_references()[0].name, "plan");
    // The stand-in engine started only after checking the engine contract's environment.
    assert!(
        data["engine.log"].contains(&format!(
            "DEEPINFER_CONTRACT version={} role=worker group=0 rank=0 pods=1 world=8",
            deepinfer_operator::contract::VERSION
        )),
        "{}",
        data["engine.log"]
    );
    // The kept evidence prints the full measurement sheet, as a user gets it with kubectl.
    let kept = std::env::temp_dir().join(format!("{}-evidence.yaml", ns.name));
    std::fs::write(&kept, serde_yaml::to_string(&evidence).expect("YAML")).expect("written");
    let out = std::process::Command::new(deepinfer_e2e::operator_process::binary())
        .args(["check", "--sheet"])
        .arg(&kept)
        .output()
        .expect("check --sheet runs");
    let _ = std::fs::remove_file(&kept);
    let sheet = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{sheet}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        sheet.starts_with(&format!(
            "Measurement sheet: plan revision {}",
            acc.revision
        )),
        "{sheet}"
    );
    assert!(
        sheet.contains("Hardware:  8 devices in the run: worker 1 pod(s) × 8 devices (8 devices; tensor 8 x pipeline 1 x data 1, expert 1)"),
        "{sheet}"
    );
    assert!(
        sheet.contains("Owners:    kvCache: platform-kv team | routing: gateway team\n")
            && sheet.contains(&format!(
                "Images:    worker {IMAGE} (runtime commit {COMMIT})\n"
            )),
        "{sheet}"
    );
    let rows: Vec<&str> = sheet
        .lines()
        .filter(|l| {
            ["shot-", "title-card", "timeline", "total"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(rows.len(), 5, "four prompts and the total: {sheet}");
    // Where the run's one rank ran, as the operator recorded it on the evidence ConfigMap; this
    // operator reads no nodes, so the domain is not read.
    assert!(
        sheet.contains("Placement: 1 rank(s), as the operator recorded them; scale-up domain = node label nvidia.com/gpu.clique (not read: the operator reads no nodes (--record-node-domains is off))\n"),
        "{sheet}"
    );
    let rank: Vec<&str> = sheet
        .lines()
        .find(|l| l.starts_with("worker "))
        .unwrap_or_else(|| panic!("a placement row: {sheet}"))
        .split(" | ")
        .map(str::trim)
        .collect();
    assert_eq!(
        (rank[1], rank[4], rank[5]),
        ("0", "not read", "8 nvidia.com/gpu"),
        "{sheet}"
    );
    assert!(
        rank[2].starts_with("plan-accept-") && !["", "not bound"].contains(&rank[3]),
        "the rank's pod and the node it was bound to: {sheet}"
    );
    for line in rows.iter().chain(
        sheet
            .lines()
            .filter(|l| l.starts_with("Phases") || l.starts_with("Capacity"))
            .collect::<Vec<_>>()
            .iter(),
    ) {
        assert!(
            !line.contains(deepinfer_operator::acceptance::sheet::NOT_REPORTED),
            "every item is reported: {line}"
        );
    }
    op.stop().await;
    monitor.assert_clean().await;
}

#[tokio::test]
async fn gpu_a_failing_revision_never_goes_ready_creates_no_worker_and_keeps_its_evidence_verbatim()
{
    let (client, ns, api) = setup("accept-fail").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("plan", "invalid-2-2-3.jsonl", "replay")).await;
    let st = status_where(&api, "plan", "AcceptanceFailed", |s| {
        cond(s, "Ready").is_some_and(|c| c.reason == "AcceptanceFailed")
    })
    .await;
    let ready = cond(&st, "Ready").expect("Ready");
    assert_eq!(ready.status, "False");
    let acc = st.acceptance.clone().expect("recorded");
    let evidence_name = acc.evidence.clone().expect("evidence");
    assert!(
        ready.message.contains("shot-plan") && ready.message.contains(&evidence_name),
        "names the failing prompt and the evidence: {}",
        ready.message
    );
    assert_eq!(cond(&st, "Stalled").expect("Stalled").status, "True");
    assert_eq!(acc.failed_prompts, vec!["shot-plan".to_string()]);

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let evidence = cms.get(&evidence_name).await.expect("evidence ConfigMap");
    let canned =
        std::fs::read(support::repo_root().join("e2e/fixtures/shot-planner/invalid-2-2-3.jsonl"))
            .expect("canned");
    let kept = evidence
        .data
        .clone()
        .unwrap_or_default()
        .get("outputs.jsonl")
        .cloned()
        .expect("outputs kept");
    assert_eq!(
        kept.as_bytes(),
        canned.as_slice(),
        "the failing output is kept byte for byte"
    );

    // A pod labelled like a worker of this unaccepted revision never becomes Ready.
    let revision = st.revision.clone().expect("revision");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let impostor: Pod = serde_json::from_value(json!({
        "metadata": {"name": "plan-worker-0-0", "labels": {
            "deepinfer.io/deployment": "plan", "deepinfer.io/component": "worker", "deepinfer.io/role": "worker",
            "deepinfer.io/group": "0", "deepinfer.io/rank": "0", "deepinfer.io/revision": revision,
            "app.kubernetes.io/managed-by": "deepinfer-operator"}},
        "spec": {"readinessGates": [{"conditionType": "deepinfer.io/accepted"}],
                 "containers": [{"name": "engine", "image": IMAGE}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &impostor)
        .await
        .expect("create impostor");
    support::eventually(TIMEOUT, "the impostor running", || async {
        (pods
            .get("plan-worker-0-0")
            .await
            .ok()?
            .status?
            .phase
            .as_deref()
            == Some("Running"))
        .then_some(())
    })
    .await;
    // Poke the resource so the operator reconciles with the impostor present.
    api.patch(
        "plan",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": "1"}}})),
    )
    .await
    .expect("poke");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p = pods.get("plan-worker-0-0").await.expect("impostor");
    assert!(
        !deepinfer_operator::controller::pods::pod_ready(&p),
        "an unaccepted revision's pod is never Ready"
    );
    assert!(!deepinfer_operator::controller::pods::is_accepted(&p));
    let real_workers = workers(&client, &ns.name, "plan").await;
    assert_eq!(
        real_workers.len(),
        1,
        "only the impostor; the operator created no worker"
    );
    assert_eq!(
        acceptance_jobs(&client, &ns.name, "plan").await.len(),
        1,
        "no retry storm"
    );
    op.stop().await;
    monitor.assert_clean().await;
}

#[tokio::test]
async fn gpu_engine_crash_and_timeout_end_as_acceptance_failed_with_the_reason() {
    let (_client, ns, api) = setup("accept-crash").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut crash = planner("crash", "valid-2-2-2.jsonl", "crash");
    crash["spec"]["accelerator"] = json!({"type": "Ascend", "devicesPerPod": 8});
    let mut hang = planner("hang", "valid-2-2-2.jsonl", "hang");
    hang["spec"]["accelerator"] = json!({"type": "Ascend", "devicesPerPod": 8});
    hang["spec"]["acceptance"]["timeoutSeconds"] = json!(3);
    create(&api, crash).await;
    create(&api, hang).await;
    for (name, needle) in [
        ("crash", "exited with code 70"),
        ("hang", "timed out after 3s"),
    ] {
        let st = status_where(&api, name, "AcceptanceFailed", |s| {
            cond(s, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceFailed")
        })
        .await;
        let c = cond(&st, "AcceptancePassed").expect("condition");
        assert!(
            c.message.contains(needle),
            "{name}: the reason is given: {}",
            c.message
        );
        assert_eq!(cond(&st, "Ready").expect("Ready").status, "False");
    }
    op.stop().await;
}

#[tokio::test]
async fn gpu_a_new_image_digest_reruns_acceptance_and_a_restart_does_not() {
    let (client, ns, api) = setup("accept-rerun").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("plan", "valid-2-2-2.jsonl", "replay")).await;
    let first = status_where(&api, "plan", "Ready=True", |s| {
        cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let first_rev = first.revision.clone().expect("revision");

    // Restarting the operator does not re-run a recorded pass.
    op.stop().await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    api.patch(
        "plan",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": "1"}}})),
    )
    .await
    .expect("poke");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        op.ctx.reconciles.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the new operator reconciled"
    );
    assert_eq!(
        acceptance_jobs(&client, &ns.name, "plan").await.len(),
        1,
        "no second acceptance run after a restart"
    );
    let st = api.get("plan").await.expect("get").status.expect("status");
    assert_eq!(cond(&st, "Ready").expect("Ready").status, "True");

    // A new image digest is a new revision: Ready drops, acceptance runs again, then Ready.
    api.patch(
        "plan",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"runtime": {"image": IMAGE2}}})),
    )
    .await
    .expect("new image");
    let second = status_where(&api, "plan", "Ready=True for the new revision", |s| {
        s.revision.as_deref() != Some(first_rev.as_str())
            && s.acceptance.as_ref().is_some_and(|a| {
                Some(a.revision.as_str()) == s.revision.as_deref() && a.result.as_str() == "Passed"
            })
            && cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let revs: BTreeSet<String> = acceptance_jobs(&client, &ns.name, "plan")
        .await
        .iter()
        .filter_map(|j| j.labels().get("deepinfer.io/revision").cloned())
        .collect();
    assert_eq!(
        revs,
        BTreeSet::from([first_rev.clone(), second.revision.clone().expect("rev")]),
        "one acceptance run per revision"
    );
    let events = support::kubectl_ok(&[
        "-n",
        &ns.name,
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=plan",
        "-o",
        "json",
    ]);
    assert!(
        events.contains("AcceptanceRunning"),
        "Ready dropped while the new revision was judged"
    );
    let pods = workers(&client, &ns.name, "plan").await;
    assert!(
        pods.iter()
            .all(|p| p.spec.as_ref().expect("spec").containers[0]
                .image
                .as_deref()
                == Some(IMAGE2)),
        "workers run the new image"
    );
    op.stop().await;
    monitor.assert_clean().await;
}

/// The engine runs with no API token: a stand-in engine that tries the API from inside its
/// container finds no token at the standard path and every request it sends is refused
/// (401 or 403), including creating a ConfigMap.
#[tokio::test]
async fn gpu_the_engine_container_holds_no_api_token_and_every_api_call_is_refused() {
    let (client, ns, api) = setup("accept-probe").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut did = planner("probe", "valid-2-2-2.jsonl", "probe-api");
    let command = did["spec"]["acceptance"]["engine"]["command"]
        .as_array_mut()
        .expect("command");
    command.extend([json!("--probe-namespace"), json!(ns.name.clone())]);
    create(&api, did).await;
    let st = status_where(&api, "probe", "a recorded judgement", |s| {
        cond(s, "AcceptancePassed")
            .is_some_and(|c| c.reason.starts_with("Acceptance") && c.reason != "AcceptanceRunning")
    })
    .await;
    let evidence = support::evidence_of(&client, &ns.name, &st).await;
    let log = support::evidence_key(&evidence, "engine.log");
    let probes: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("DEEPINFER_PROBE ").map(|(_, p)| p))
        .collect();
    assert_eq!(
        probes.first().copied(),
        Some("token=absent"),
        "no service-account token inside the engine container: {log}"
    );
    assert_eq!(probes.len(), 6, "the probe ran every request: {log}");
    for probe in &probes[1..] {
        let status = probe.rsplit(" -> ").next().unwrap_or_default();
        assert!(
            status == "401" || status == "403",
            "refused by the API server: {probe}"
        );
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        cms.get_opt("probe-written-by-the-engine")
            .await
            .expect("get")
            .is_none(),
        "the engine wrote no ConfigMap"
    );
    // The stand-in's outputs are valid: the run itself passed.
    assert_eq!(
        cond(&st, "AcceptancePassed").expect("condition").status,
        "True"
    );
    op.stop().await;
}

/// The acceptance ServiceAccount's token (the judge's) may read and patch its run's evidence
/// ConfigMap and nothing else: any other ConfigMap, by any verb, is refused with 403, as is
/// creating, listing or deleting ConfigMaps.
#[tokio::test]
async fn gpu_the_judges_token_is_refused_on_every_other_configmap() {
    let (client, ns, api) = setup("accept-rbac").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("plan", "valid-2-2-2.jsonl", "replay")).await;
    let st = status_where(&api, "plan", "Ready=True", |s| {
        cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    op.stop().await;
    let evidence = st
        .acceptance
        .as_ref()
        .and_then(|a| a.evidence.clone())
        .expect("evidence");
    let admin_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let other: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "someone-elses-config"}, "data": {"k": "v"}}),
    )
    .expect("configmap");
    admin_cms
        .create(&PostParams::default(), &other)
        .await
        .expect("another app's ConfigMap");

    let judge = support::client_as(&client, &ns.name, "plan-acceptance").await;
    let cms: Api<ConfigMap> = Api::namespaced(judge, &ns.name);
    // Its own evidence: get and patch (conditional on the resourceVersion read), not update.
    let mut own = cms
        .get(&evidence)
        .await
        .expect("the judge reads its evidence");
    let patch = json!({"metadata": {"resourceVersion": own.metadata.resource_version},
                       "data": {"probe": "1"}});
    cms.patch(
        &evidence,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .expect("the judge patches its evidence");

    let forbidden = |what: &str, result: Result<(), kube::Error>| match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    own.data
        .get_or_insert_with(Default::default)
        .insert("probe".into(), "2".into());
    own.metadata.resource_version = None;
    forbidden(
        "update its own evidence (only patch is granted)",
        cms.replace(&evidence, &PostParams::default(), &own)
            .await
            .map(drop),
    );
    let mut stolen = other.clone();
    stolen.data = Some([("k".to_string(), "forged".to_string())].into());
    forbidden(
        "get another ConfigMap",
        cms.get("someone-elses-config").await.map(drop),
    );
    forbidden(
        "update another ConfigMap",
        cms.replace("someone-elses-config", &PostParams::default(), &stolen)
            .await
            .map(drop),
    );
    let spec_cm = format!(
        "plan-accept-{}",
        evidence.trim_start_matches("plan-evidence-")
    ) + "-spec";
    forbidden(
        "get the acceptance spec ConfigMap",
        cms.get(&spec_cm).await.map(drop),
    );
    let fresh: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "made-by-the-judge"}})).expect("cm");
    forbidden(
        "create a ConfigMap",
        cms.create(&PostParams::default(), &fresh).await.map(drop),
    );
    forbidden(
        "list ConfigMaps",
        cms.list(&ListParams::default()).await.map(drop),
    );
    forbidden(
        "delete its evidence",
        cms.delete(&evidence, &Default::default()).await.map(drop),
    );
    assert_eq!(
        admin_cms
            .get("someone-elses-config")
            .await
            .expect("still there")
            .data,
        other.data,
        "the other ConfigMap is untouched"
    );
}

/// An engine whose outputs fail, and which then forges a "Passed" summary wherever it can (its
/// own termination message, the shared work directory) and kills the program that started it,
/// still yields Failed: the verdict is the judge's alone.
#[tokio::test]
async fn gpu_an_engine_that_forges_a_passed_summary_still_fails() {
    let (client, ns, api) = setup("accept-forge").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("forge", "invalid-2-2-3.jsonl", "forge")).await;
    let st = status_where(&api, "forge", "a recorded judgement", |s| {
        s.acceptance.is_some()
    })
    .await;
    let acc = st.acceptance.clone().expect("judgement");
    assert_eq!(acc.result.as_str(), "Failed", "{acc:?}");
    assert_eq!(acc.failed_prompts, vec!["shot-plan".to_string()]);
    let c = cond(&st, "AcceptancePassed").expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "AcceptanceFailed")
    );
    assert_eq!(cond(&st, "Ready").expect("Ready").status, "False");
    assert!(workers(&client, &ns.name, "forge").await.is_empty());
    // The evidence holds the judge's verdicts and the engine's failing outputs as written.
    let evidence = support::evidence_of(&client, &ns.name, &st).await;
    let verdicts: Value =
        serde_json::from_str(&support::evidence_key(&evidence, "verdicts.json")).expect("verdicts");
    assert!(
        verdicts
            .as_array()
            .expect("list")
            .iter()
            .any(|v| v["id"] == "shot-plan" && v["passed"] == false),
        "{verdicts}"
    );
    op.stop().await;
}

/// An engine that makes its outputs file a link to the service-account token path (where the
/// judge's own token is mounted) gets no token copied into the evidence: the judge reads no
/// link, and the run fails for want of outputs.
#[tokio::test]
async fn gpu_an_engine_linking_its_outputs_to_the_token_path_leaks_no_token() {
    let (client, ns, api) = setup("accept-link").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("link", "valid-2-2-2.jsonl", "link-token")).await;
    let st = status_where(&api, "link", "a recorded judgement", |s| {
        s.acceptance.is_some()
    })
    .await;
    let acc = st.acceptance.clone().expect("judgement");
    assert_eq!(acc.result.as_str(), "Failed", "{acc:?}");
    assert!(
        acc.reason
            .as_deref()
            .is_some_and(|r| r.contains("outputs.jsonl is a symbolic link (not followed)")),
        "{acc:?}"
    );
    let evidence = support::evidence_of(&client, &ns.name, &st).await;
    let everything = serde_json::to_string(&evidence).expect("evidence as JSON");
    // A service-account token is a JWT: its header starts with base64 of `{"alg":`.
    assert!(
        !everything.contains("eyJhbGciOi"),
        "no token in the evidence: {everything}"
    );
    assert!(
        support::evidence_key(&evidence, "engine.log").contains("outputs.jsonl not read"),
        "the evidence says why the outputs were not read"
    );
    op.stop().await;
}

/// Container faults injected into the acceptance pods themselves (through the pod annotations
/// `spec.scheduling.podAnnotations` passes on to the simulated kubelet): a rank SIGKILLed or
/// OOM-killed mid-run never yields a pass and says why; a rank slow to start still passes.
#[tokio::test]
async fn gpu_acceptance_pods_killed_or_oom_killed_mid_run_never_pass_and_slow_starts_do() {
    use deepinfer_e2e::faults;
    let (client, ns, api) = setup("accept-faults").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    // (name, fault, value, stand-in engine mode, passes): the killed runs hang (as a loading
    // engine would), so the kill at 1 s lands mid-run, well before the 60 s deadline.
    let cases = [
        ("killed", faults::POD_KILL_AFTER_SECONDS, "1", "hang", false),
        ("oom", faults::POD_OOM_AFTER_SECONDS, "1", "hang", false),
        ("slow", faults::POD_SLOW_START_SECONDS, "3", "replay", true),
    ];
    for (name, fault, value, mode, _) in cases {
        let mut did = planner(name, "valid-2-2-2.jsonl", mode);
        did["spec"]["accelerator"] = json!({"type": "NVIDIA", "devicesPerPod": 1});
        did["spec"]["roles"] =
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 1}}]);
        did["spec"]["acceptance"]["timeoutSeconds"] = json!(60);
        did["spec"]["scheduling"] = json!({"podAnnotations": {fault: value}});
        create(&api, did).await;
    }
    for (name, _, _, _, passes) in cases {
        let st = status_where(&api, name, "a verdict on acceptance", |s| {
            cond(s, "AcceptancePassed").is_some_and(|c| {
                c.reason == "AcceptanceFailed" || c.reason == "AcceptanceSucceeded"
            })
        })
        .await;
        let c = cond(&st, "AcceptancePassed").expect("condition");
        if passes {
            assert_eq!(c.status, "True", "{name}: {}", c.message);
            status_where(&api, name, "Ready", |s| {
                cond(s, "Ready").is_some_and(|r| r.status == "True")
            })
            .await;
        } else {
            assert_eq!(c.status, "False", "{name}: no pass: {}", c.message);
            let needle = if name == "oom" {
                "OOMKilled, exit code 137"
            } else {
                "exit code 137"
            };
            assert!(
                c.message.contains(needle),
                "{name}: how the run ended is given: {}",
                c.message
            );
            assert!(
                workers(&client, &ns.name, name).await.is_empty(),
                "{name}: no worker for a revision without a pass"
            );
        }
        println!("{name}: AcceptancePassed={} {}", c.status, c.message);
    }
    let violations = monitor.stop().await;
    assert!(violations.is_empty(), "{violations:?}");
    op.stop().await;
}

#[tokio::test]
async fn gpu_verification_pods_killed_or_oom_killed_never_verify_and_slow_starts_do() {
    use deepinfer_e2e::faults::{self, PodFaultRule};
    let (client, ns, api) = setup("verify-faults").await;
    // (name, fault, value, verifies): the verification Job's pods are the operator's own, so the
    // faults reach them through a namespace rule selecting each deployment's verify pods.
    let cases = [
        ("killed", faults::POD_KILL_AFTER_SECONDS, "0", false),
        ("oom", faults::POD_OOM_AFTER_SECONDS, "0", false),
        ("slow", faults::POD_SLOW_START_SECONDS, "3", true),
    ];
    let rules: Vec<PodFaultRule> = cases
        .iter()
        .map(|(name, fault, value, _)| PodFaultRule {
            selector: [
                ("deepinfer.io/deployment".to_string(), name.to_string()),
                ("deepinfer.io/component".to_string(), "verify".to_string()),
            ]
            .into(),
            annotations: [(fault.to_string(), value.to_string())].into(),
        })
        .collect();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                faults::NAMESPACE_POD_FAULTS: serde_json::to_string(&rules).expect("JSON")
            }}})),
        )
        .await
        .expect("annotating the namespace");
    // Let the node agent's namespace cache see the rules before any verify pod exists.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    for (name, _, _, _) in cases {
        let mut did = planner(name, "valid-2-2-2.jsonl", "replay");
        did["spec"]["accelerator"] = json!({"type": "NVIDIA", "devicesPerPod": 1});
        did["spec"]["roles"] =
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 1}}]);
        create(&api, did).await;
    }
    for (name, _, _, verifies) in cases {
        let st = status_where(&api, name, "a verdict on the checkpoint", |s| {
            cond(s, "CheckpointVerified")
                .is_some_and(|c| c.reason == "Verified" || c.reason == "VerificationFailed")
        })
        .await;
        let c = cond(&st, "CheckpointVerified").expect("condition");
        println!(
            "{name}: CheckpointVerified={} {}: {}",
            c.status, c.reason, c.message
        );
        if verifies {
            assert_eq!(c.status, "True", "{name}: {}", c.message);
            status_where(&api, name, "Ready", |s| {
                cond(s, "Ready").is_some_and(|r| r.status == "True")
            })
            .await;
        } else {
            assert_eq!(c.status, "False", "{name}: no pass: {}", c.message);
            let needle = if name == "oom" { "OOMKilled" } else { "137" };
            assert!(
                c.message.contains(needle),
                "{name}: how the verification ended is given: {}",
                c.message
            );
            // Nothing runs on a checkpoint that was not verified.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let st = api.get(name).await.expect("get").status.expect("status");
            assert_ne!(
                cond(&st, "Ready").map(|r| r.status.as_str()),
                Some("True"),
                "{name}"
            );
            assert!(
                acceptance_jobs(&client, &ns.name, name).await.is_empty(),
                "{name}"
            );
            assert!(workers(&client, &ns.name, name).await.is_empty(), "{name}");
        }
    }
    op.stop().await;
    monitor.assert_clean().await;
}

/// The shot planner's valid outputs with the slowest request taking `seconds`, written to a file
/// of this test's own (the stand-in engine finishes once that time has passed).
fn slow_valid_outputs(test: &str, seconds: f64) -> std::path::PathBuf {
    let dir = support::repo_root().join("e2e/fixtures/shot-planner");
    let text = std::fs::read_to_string(dir.join("valid-2-2-2.jsonl")).expect("fixture outputs");
    let lines: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let mut v: Value = serde_json::from_str(line).expect("a JSON line");
            if i == 0 {
                v["completion_seconds"] = json!(seconds);
            }
            v.to_string()
        })
        .collect();
    let path = std::env::temp_dir().join(format!("{test}-{}.jsonl", std::process::id()));
    std::fs::write(&path, lines.join("\n") + "\n").expect("writing the slow outputs");
    path
}

/// The verdict of a finished run is read from a view at least as new as the Job's completion:
/// with the Pod watch held back while the judge finishes (the Job cache sees the Job complete,
/// the Pod cache still shows the judge running), the recorded verdict is the judge's pass, the
/// run is not deleted and run again, and nothing is recorded as "ended without a summary".
#[tokio::test]
async fn gpu_a_pod_watch_lagging_behind_a_finished_judge_records_the_real_verdict() {
    let (client, ns, api) = setup("lagging").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let outputs = slow_valid_outputs("lagging", 8.0);
    let canned = outputs.display().to_string();
    create(&api, planner("lagging", &canned, "replay")).await;
    status_where(&api, "lagging", "the acceptance run under way", |s| {
        cond(s, "AcceptancePassed").is_some_and(|c| c.reason == "AcceptanceRunning")
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let leader = support::eventually(TIMEOUT, "the judged engine running", || async {
        let jobs = acceptance_jobs(&client, &ns.name, "lagging").await;
        let job = jobs.first()?.clone();
        let lp = ListParams::default().labels(&format!("job-name={}", job.name_any()));
        let running = pods.list(&lp).await.ok()?.items.iter().any(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.name == "engine"
                            && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some()
                    })
                })
        });
        running.then_some(job)
    })
    .await;
    let lag = op.ctx.caches.written.of("Pod").expect("pods are cached");
    lag.hold();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    support::eventually(TIMEOUT, "the acceptance Job complete", || async {
        let job = jobs.get(&leader.name_any()).await.ok()?;
        (job.status?.succeeded? == 1).then_some(())
    })
    .await;
    let judged = support::eventually(
        Duration::from_secs(60),
        "a verdict recorded while the Pod watch lags",
        || async { api.get("lagging").await.ok()?.status?.acceptance },
    )
    .await;
    let still = jobs.get(&leader.name_any()).await.ok();
    lag.release();
    assert!(
        judged.passed(),
        "the judge passed the run; recorded instead: {judged:?}"
    );
    assert_eq!(
        still.and_then(|j| j.uid()),
        leader.uid(),
        "the finished run was kept, not deleted and run again"
    );
    status_where(&api, "lagging", "Ready once the watch caught up", |s| {
        cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let _ = std::fs::remove_file(outputs);
    op.stop().await;
}

/// Acceptance runs under way (runs with an acceptance Job not finished), by deployment and run.
async fn runs_under_way(client: &Client, ns: &str) -> usize {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let list = jobs
        .list(&ListParams::default().labels("deepinfer.io/component=acceptance"))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.iter()
        .filter(|j| {
            !j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"
                    })
                })
        })
        .filter_map(|j| {
            let run = j.annotations().get("deepinfer.io/judges")?;
            let deployment = j.labels().get("deepinfer.io/deployment")?;
            Some((deployment.clone(), run.clone()))
        })
        .collect::<BTreeSet<(String, String)>>()
        .len()
}

/// With `--max-concurrent-acceptance-runs 1`, three deployments created at once are judged one
/// after the other (sampled every 200 ms: never two runs under way), the others saying
/// `AcceptanceQueued` with their place, and all three go Ready.
#[tokio::test]
async fn gpu_the_fleet_limit_runs_one_acceptance_at_a_time_and_the_rest_wait_their_turn() {
    let (client, ns, api) = setup("fleet").await;
    let op =
        Operator::start_with(&ns.name, &["mit"], |s| s.max_concurrent_acceptance_runs = 1).await;
    let outputs = slow_valid_outputs("fleet", 3.0);
    let canned = outputs.display().to_string();
    let names = ["fleet-a", "fleet-b", "fleet-c"];
    for name in names {
        create(&api, planner(name, &canned, "replay")).await;
    }
    let (most, queued) = {
        let mut most = 0;
        let mut queued = false;
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        loop {
            most = most.max(runs_under_way(&client, &ns.name).await);
            let mut ready = 0;
            for name in names {
                if let Some(st) = api.get(name).await.ok().and_then(|d| d.status) {
                    queued |= cond(&st, "AcceptancePassed").is_some_and(|c| {
                        c.reason == "AcceptanceQueued" && c.message.contains("in line")
                    });
                    ready += usize::from(cond(&st, "Ready").is_some_and(|c| c.status == "True"));
                }
            }
            if ready == names.len() {
                break (most, queued);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not all Ready within 180 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    println!("fleet limit 1: most runs under way at once {most}; a deployment waited: {queued}");
    assert_eq!(most, 1, "at most one run under way at once");
    assert!(queued, "a deployment said AcceptanceQueued with its place");
    let _ = std::fs::remove_file(outputs);
    op.stop().await;
}
