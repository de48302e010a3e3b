//! Hostile and broken input on the test bed (issue 11): children the API server refuses, objects
//! of namespace users that copy the operator's labels, Jobs that cannot start, and edits the
//! operator must notice. Each test has its own namespace and its own in-process operator.

use std::time::Duration;

use deepinfer_e2e::monitor::{Limits, Monitor};
use deepinfer_e2e::support::{self, Operator, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(90);

/// One group of one 8-GPU pod over the fixture checkpoint on claim `ckpt`, judged by the shot
/// planner replaying valid outputs.
fn planner(name: &str) -> Value {
    support::deployment(name)
}

async fn setup(prefix: &str) -> (Client, TestNamespace, Api<DeepInferDeployment>) {
    support::namespace_with_checkpoint(prefix).await
}

async fn create(api: &Api<DeepInferDeployment>, obj: Value) {
    support::create_deployment(api, obj).await
}

fn cond<'a>(
    s: &'a DeepInferDeploymentStatus,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    support::condition(s, t)
}

async fn status_where(
    api: &Api<DeepInferDeployment>,
    name: &str,
    what: &str,
    pred: impl Fn(&DeepInferDeploymentStatus) -> bool,
) -> DeepInferDeploymentStatus {
    support::status_where(api, name, what, TIMEOUT, pred).await
}

/// Item 3: a spec that passes validation but yields a child the API server refuses (CPU requests
/// above their limit, checked by the server's pod-template validation) stalls that resource
/// alone, with the server's message and field, and is not retried; its neighbour goes Ready.
#[tokio::test]
async fn gpu_a_child_the_api_server_refuses_stalls_its_resource_alone_without_retrying() {
    let (client, ns, api) = setup("rejected").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut bad = planner("bad");
    bad["spec"]["runtime"]["resources"] = json!({"requests": {"cpu": "8"}, "limits": {"cpu": "4"}});
    create(&api, bad).await;
    create(&api, planner("good")).await;
    let st = status_where(&api, "bad", "Stalled=True", |s| {
        cond(s, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let stalled = cond(&st, "Stalled").expect("Stalled");
    assert_eq!(stalled.reason, "ChildRejected", "{stalled:?}");
    assert!(
        stalled.message.contains("resources.requests")
            && stalled.message.contains("less than or equal to cpu limit"),
        "carries the server's field and message: {}",
        stalled.message
    );
    let ready = cond(&st, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ChildRejected")
    );
    status_where(&api, "good", "the neighbour Ready", |s| {
        cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    // Both settle (the neighbour's finished Jobs get their TTL once its verdict is in status):
    // a 12 s window without a write, which a refused child retried every 10 s never leaves.
    let writes = || op.writes.load(std::sync::atomic::Ordering::Relaxed);
    support::eventually(TIMEOUT, "a 12 s window without a write", || async {
        let start = writes();
        tokio::time::sleep(Duration::from_secs(12)).await;
        (writes() == start).then_some(())
    })
    .await;
    let before = writes();
    tokio::time::sleep(Duration::from_secs(25)).await;
    let after = writes();
    assert_eq!(
        after, before,
        "no write in 25 s once the refused resource stalled and its neighbour converged"
    );
    let again = api.get("bad").await.expect("bad").status.expect("status");
    assert_eq!(
        cond(&again, "Stalled").map(|c| c.reason.as_str()),
        Some("ChildRejected")
    );
    op.stop().await;
    monitor.assert_clean().await;
}

/// Item 4: a namespace user's pod that copies every label of the failed verify Job's pod and
/// ends with a passing verifier report of its own (the real verifier over a sound copy of the
/// checkpoint) does not open the checkpoint gate: only pods of Jobs the resource owns are read.
#[tokio::test]
async fn a_users_pod_labelled_like_the_verify_job_cannot_pass_verification() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    use kube::ResourceExt;
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "forged").await;
    let host = support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    support::truncate_second_shard(&host);
    support::checkpoint_claim(&ns.name, "sound", &support::fixture_checkpoint(), "model");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("broken")).await;
    status_where(&api, "broken", "VerificationFailed", |s| {
        cond(s, "CheckpointVerified").is_some_and(|c| c.reason == "VerificationFailed")
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let verify_pod = pods
        .list(&ListParams::default().labels("deepinfer.io/component=verify"))
        .await
        .expect("pods")
        .items
        .into_iter()
        .next()
        .expect("the verify Job's pod");
    let container = &verify_pod.spec.as_ref().expect("spec").containers[0];
    let forged: Pod = serde_json::from_value(json!({
        "metadata": {"name": "my-verify", "labels": verify_pod.labels()},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "verify",
                "image": container.image,
                "command": container.command,
                "args": container.args,
                "volumeMounts": [{"name": "checkpoint", "mountPath": "/checkpoint", "readOnly": true}]
            }],
            "volumes": [{"name": "checkpoint", "persistentVolumeClaim": {"claimName": "sound", "readOnly": true}}]
        }
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &forged)
        .await
        .expect("a namespace user may create pods");
    let message = support::eventually(TIMEOUT, "the user's pod to end with a report", || async {
        let p = pods.get("my-verify").await.ok()?;
        p.status?
            .container_statuses?
            .into_iter()
            .find_map(|c| c.state?.terminated?.message)
    })
    .await;
    assert!(
        message.contains("\"ok\":true") && message.contains("\"license\":\"mit\""),
        "the forged report says ok: {message}"
    );
    // Make the operator look again, several times.
    support::poke(&api, "broken", 3).await;
    let st = api
        .get("broken")
        .await
        .expect("get")
        .status
        .expect("status");
    let c = cond(&st, "CheckpointVerified").expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "VerificationFailed"),
        "{}",
        c.message
    );
    assert!(st.checkpoint.is_none(), "no verified checkpoint recorded");
    assert!(
        pods.get_opt("my-verify").await.expect("get").is_some(),
        "the user's pod is not the operator's to delete"
    );
    op.stop().await;
}

/// Item 4: a user's pod and Service that copy the labels of a worker and of a role Service are
/// not the operator's: it never deletes them, however many passes it makes.
#[tokio::test]
async fn a_users_pod_and_service_with_copied_labels_are_never_deleted() {
    use k8s_openapi::api::core::v1::{Pod, Service};
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "copied").await;
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start(&ns.name, &["mit"]).await;
    // No claim: the checkpoint gate waits, while the workers stage (licence open) reconciles
    // pods, Services and budgets, deleting what it owns and does not want.
    create(&api, planner("flash")).await;
    let labels = |component: &str| {
        json!({
            "deepinfer.io/deployment": "flash",
            "deepinfer.io/component": component,
            "deepinfer.io/role": "prefill",
            "deepinfer.io/revision": "0123456789",
            "deepinfer.io/group": "0",
            "deepinfer.io/rank": "0",
            "app.kubernetes.io/managed-by": "deepinfer-operator"
        })
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "flash-prefill-01234-0-0", "labels": labels("worker")},
        "spec": {"nodeSelector": {"nowhere": "true"},
                 "containers": [{"name": "engine", "image": "registry.example.com/app:1"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("a user's pod");
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    for (name, component) in [
        ("flash-prefill", "serving"),
        ("flash-prefill-01234-0", "rendezvous"),
    ] {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels(component)},
            "spec": {"selector": {"app": "mine"}, "ports": [{"port": 80}]}
        }))
        .expect("service");
        services
            .create(&PostParams::default(), &svc)
            .await
            .expect("a user's Service");
    }
    status_where(&api, "flash", "MissingDependency", |s| {
        cond(s, "CheckpointVerified").is_some_and(|c| c.reason == "MissingDependency")
    })
    .await;
    // Make the operator look again, several times.
    support::poke(&api, "flash", 3).await;
    let alive = |o: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>| {
        o.is_some_and(|m| m.deletion_timestamp.is_none())
    };
    let p = pods.get_opt("flash-prefill-01234-0-0").await.expect("get");
    assert!(
        alive(p.as_ref().map(|p| &p.metadata)),
        "the user's pod is kept"
    );
    for name in ["flash-prefill", "flash-prefill-01234-0"] {
        let s = services.get_opt(name).await.expect("get");
        assert!(
            alive(s.as_ref().map(|s| &s.metadata)),
            "the user's Service {name} is kept"
        );
    }
    op.stop().await;
}

/// Item 5: a verify Job whose image cannot be pulled shows `ImagePullFailed` on
/// CheckpointVerified (with the kubelet's message), and its deadline ends it as a failed Job
/// naming `DeadlineExceeded` instead of leaving the resource Verifying forever.
#[tokio::test]
async fn a_verify_job_that_cannot_pull_its_image_says_so_and_ends_at_its_deadline() {
    let (client, ns, api) = setup("pull").await;
    let op = Operator::start_with(&ns.name, &["mit"], |s| {
        s.operator_image = "registry.invalid/deepinfer-operator:dev".into();
        s.job_deadlines.verify_seconds = 25;
    })
    .await;
    create(&api, planner("flash")).await;
    let st = status_where(&api, "flash", "ImagePullFailed", |s| {
        cond(s, "CheckpointVerified").is_some_and(|c| c.reason == "ImagePullFailed")
    })
    .await;
    let c = cond(&st, "CheckpointVerified").expect("condition");
    assert!(
        c.message.contains("ImagePullBackOff")
            && c.message
                .contains("registry.invalid/deepinfer-operator:dev"),
        "{}",
        c.message
    );
    assert_eq!(
        cond(&st, "Stalled").map(|c| c.reason.as_str()),
        Some("ImagePullFailed")
    );
    let st = status_where(&api, "flash", "the deadline to end the verify Job", |s| {
        cond(s, "CheckpointVerified").is_some_and(|c| c.reason == "VerificationFailed")
    })
    .await;
    let c = cond(&st, "CheckpointVerified").expect("condition");
    assert!(c.message.contains("DeadlineExceeded"), "{}", c.message);
    drop(client);
    op.stop().await;
}

/// Item 5: a hub token Secret that is missing is named on the checkpoint gate
/// (`MissingDependency`) before any fetch Job is made, not `Fetching` forever. (A Secret deleted
/// after its Job started still shows as `ContainerConfigError` from the Job's pod.)
#[tokio::test]
async fn a_missing_token_secret_is_named_before_any_fetch_job() {
    let (client, ns, api) = setup("nosecret").await;
    let op = Operator::start_with(&ns.name, &["mit"], |s| {
        s.allowed_hub_endpoints = vec!["https://hub.example.com".into()];
    })
    .await;
    let mut flash = planner("flash");
    flash["spec"]["model"]["source"] = json!({"hub": {
        "revision": "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d", "claimName": "ckpt",
        "path": "fetched", "endpoint": "https://hub.example.com", "tokenSecretName": "hub-token"}});
    create(&api, flash).await;
    let st = status_where(&api, "flash", "MissingDependency", |s| {
        cond(s, "CheckpointVerified").is_some_and(|c| c.reason == "MissingDependency")
    })
    .await;
    let c = cond(&st, "CheckpointVerified").expect("condition");
    assert!(
        c.message.contains("Secret") && c.message.contains("hub-token"),
        "{}",
        c.message
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        jobs.list(&Default::default())
            .await
            .expect("jobs")
            .items
            .is_empty(),
        "no fetch Job waits on a missing Secret"
    );
    op.stop().await;
}

/// Item 5: a `volume` checkpoint claim that exists but is not Bound has no volume, so no
/// checkpoint: `ClaimNotBound`, not a Job that waits forever; once bound, the resource goes on.
#[tokio::test]
async fn an_unbound_checkpoint_claim_has_its_own_reason() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "unbound").await;
    let (ok, out) = support::kubectl_stdin(
        &["-n", &ns.name, "apply", "-f", "-"],
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ckpt}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  resources: {requests: {storage: 1Gi}}
"#,
    );
    assert!(ok, "{out}");
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("flash")).await;
    let st = status_where(&api, "flash", "ClaimNotBound", |s| {
        cond(s, "CheckpointVerified").is_some_and(|c| c.reason == "ClaimNotBound")
    })
    .await;
    let c = cond(&st, "CheckpointVerified").expect("condition");
    assert!(
        c.message.contains("is Pending, not Bound")
            && c.message.contains("spec.model.source.volume.claimName"),
        "{}",
        c.message
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        jobs.list(&Default::default())
            .await
            .expect("jobs")
            .items
            .is_empty(),
        "no Job waits on an unbound claim"
    );
    // Bound to a volume holding the checkpoint, the claim lets the resource go on: the claim
    // watch brings its new phase, and no pass reads the claim by GET.
    support::checkpoint_volume(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
    status_where(&api, "flash", "past ClaimNotBound", |s| {
        cond(s, "CheckpointVerified").is_some_and(|c| c.reason != "ClaimNotBound")
    })
    .await;
    let metrics = op.ctx.metrics.encode().expect("metrics");
    let claim_requests: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("deepinfer_api_requests_total{"))
        .filter(|l| l.contains(r#"resource="persistentvolumeclaims""#))
        .collect();
    assert!(
        claim_requests.iter().any(|l| l.contains(r#"verb="watch""#))
            && !claim_requests.iter().any(|l| l.contains(r#"verb="get""#)),
        "claims are watched, never read one by one: {claim_requests:?}"
    );
    op.stop().await;
}

/// Item 8: an edit to the prompts of the ConfigMap named by `promptsFrom` re-runs acceptance
/// (a new judgement under a new spec hash) without any change to the resource, and the
/// ConfigMap's content never reaches the status.
#[tokio::test]
async fn gpu_an_edit_to_the_prompts_configmap_reruns_acceptance() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (client, ns, api) = setup("prompts").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut flash = planner("flash");
    let prompts = flash["spec"]["acceptance"]["prompts"].take();
    flash["spec"]["acceptance"]
        .as_object_mut()
        .expect("acceptance")
        .remove("prompts");
    flash["spec"]["acceptance"]["promptsFrom"] = json!({"name": "prompts", "key": "prompts.yaml"});
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let write = |prompts: &Value| -> ConfigMap {
        serde_json::from_value(json!({
            // Opted in: the engine image reads these prompts.
            "metadata": {"name": "prompts", "labels": {"deepinfer.io/engine-readable": "true"}},
            "data": {"prompts.yaml": serde_yaml::to_string(prompts).expect("yaml")}
        }))
        .expect("cm")
    };
    cms.create(&PostParams::default(), &write(&prompts))
        .await
        .expect("prompts ConfigMap");
    create(&api, flash).await;
    let first = status_where(&api, "flash", "Ready=True", |s| {
        cond(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let first_hash = first
        .acceptance
        .as_ref()
        .and_then(|a| a.spec_hash.clone())
        .expect("judged under a spec hash");
    // The same prompt ids (the stand-in engine answers by id), one prompt's wording changed.
    let mut edited = prompts.clone();
    let marker = "Keep it under five words.";
    edited[2]["prompt"] = json!(format!(
        "{} {marker}",
        edited[2]["prompt"].as_str().expect("prompt")
    ));
    let mut cm = cms.get("prompts").await.expect("cm");
    cm.data = write(&edited).data;
    cms.replace("prompts", &PostParams::default(), &cm)
        .await
        .expect("editing the prompts");
    // Changing what a deployment that passed is judged by is a review decision: nothing runs
    // until its reason and reviewer are annotated.
    status_where(&api, "flash", "AcceptanceReviewRequired", |s| {
        cond(s, "AcceptancePassed").is_some_and(|c| {
            c.reason == "AcceptanceReviewRequired"
                && c.message
                    .contains("deepinfer.io/acceptance-change-reviewer")
        })
    })
    .await;
    api.patch(
        "flash",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
            "deepinfer.io/acceptance-change-reason": "title card wording shortened",
            "deepinfer.io/acceptance-change-reviewer": "e2e reviewer"}}})),
    )
    .await
    .expect("annotating the review");
    let second = status_where(
        &api,
        "flash",
        "a new judgement of the edited prompts",
        |s| {
            s.judgements.len() >= 2
                && s.acceptance
                    .as_ref()
                    .and_then(|a| a.spec_hash.as_deref())
                    .is_some_and(|h| h != first_hash)
                && cond(s, "Ready").is_some_and(|c| c.status == "True")
        },
    )
    .await;
    assert_eq!(
        second.acceptance.as_ref().map(|a| a.passed()),
        Some(true),
        "{second:?}"
    );
    let review = second
        .acceptance
        .as_ref()
        .and_then(|a| a.review.clone())
        .expect("the review is recorded in the judgement");
    assert_eq!(
        (
            review.change_reason.as_deref(),
            review.change_reviewer.as_deref()
        ),
        (Some("title card wording shortened"), Some("e2e reviewer"))
    );
    let text = serde_json::to_string(&second).expect("status json");
    assert!(
        !text.contains(marker) && !text.contains("harbour"),
        "no prompt text in status: {text}"
    );
    op.stop().await;
    monitor.assert_clean().await;
}

/// Item 9: finished Jobs whose verdict is in status get `ttlSecondsAfterFinished` and go, with
/// nothing judged again; only the newest evidence ConfigMaps (`--keep-evidence`) stay, and
/// always the one the status points at.
#[tokio::test]
async fn gpu_finished_jobs_expire_and_only_the_newest_evidence_is_kept() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{ListParams, Patch, PatchParams};
    use kube::ResourceExt;
    let (client, ns, api) = setup("retention").await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start_with(&ns.name, &["mit"], |s| {
        s.retention.keep_evidence = 2;
        s.retention.finished_job_ttl_seconds = 3;
    })
    .await;
    create(&api, planner("flash")).await;
    let ready = |what: &'static str, runs: usize| {
        let api = api.clone();
        async move {
            status_where(&api, "flash", what, |s| {
                s.judgements.len() == runs && cond(s, "Ready").is_some_and(|c| c.status == "True")
            })
            .await
        }
    };
    ready("Ready after one run", 1).await;
    for run in 2..=4usize {
        api.patch(
            "flash",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "deepinfer.io/rerun-acceptance": run.to_string(),
                "deepinfer.io/rerun-reason": format!("retention check, run {run}")}}})),
        )
        .await
        .expect("rerun");
        let st = ready("Ready after a re-run", run).await;
        assert_eq!(
            st.judgements[0]
                .review
                .as_ref()
                .and_then(|r| r.rerun_reason.as_deref()),
            Some(format!("retention check, run {run}").as_str()),
            "the rerun's reason is recorded in its judgement"
        );
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    support::eventually(TIMEOUT, "every finished Job to expire", || async {
        let list = jobs.list(&ListParams::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let evidence: Vec<String> = cms
        .list(&ListParams::default().labels("deepinfer.io/component=evidence"))
        .await
        .expect("evidence")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let st = api.get("flash").await.expect("get").status.expect("status");
    let current = st
        .acceptance
        .as_ref()
        .and_then(|a| a.evidence.clone())
        .expect("evidence named in status");
    assert_eq!(evidence.len(), 2, "{evidence:?}");
    assert!(evidence.contains(&current), "{evidence:?} lacks {current}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let st = api.get("flash").await.expect("get").status.expect("status");
    assert_eq!(
        st.judgements.len(),
        4,
        "nothing judged again once its Jobs are gone"
    );
    assert!(
        jobs.list(&ListParams::default())
            .await
            .expect("jobs")
            .items
            .is_empty(),
        "no Job made again"
    );
    op.stop().await;
    monitor.assert_clean().await;
}

/// Item 10: `status.license` records when the licence gate opened, for which licence and
/// annotation value, and when and why it closed; the annotation's editor is in `managedFields`.
#[tokio::test]
async fn the_status_records_when_the_licence_gate_opened_and_closed() {
    use kube::api::{Patch, PatchParams};
    let client = support::client().await;
    support::ensure_crd();
    // No claim: the licence gate opens, the checkpoint gate waits; no accelerator is used.
    let ns = TestNamespace::new(&client, "licence").await;
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), &ns.name);
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("flash")).await;
    let st = status_where(&api, "flash", "the licence record", |s| s.license.is_some()).await;
    let opened = st.license.expect("record");
    assert_eq!(
        (opened.license.as_str(), opened.annotation.as_str()),
        ("mit", "mit")
    );
    assert!(opened.closed_at.is_none());
    api.patch(
        "flash",
        &PatchParams::apply("licence-officer").force(),
        &Patch::Apply(json!({
            "apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment",
            "metadata": {"name": "flash", "annotations": support::licence_accepted(Some("apache-2.0"))}
        })),
    )
    .await
    .expect("changing the annotation");
    let st = status_where(&api, "flash", "the record closed", |s| {
        s.license.as_ref().is_some_and(|r| r.closed_at.is_some())
    })
    .await;
    let closed = st.license.expect("record");
    assert_eq!(closed.opened_at, opened.opened_at, "when it opened is kept");
    assert_eq!(closed.closed_reason.as_deref(), Some("LicenseMismatch"));
    // Who changed the annotation: the field manager that owns it.
    let did = api.get("flash").await.expect("get");
    let owner = did
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.to_string()
                    .contains(deepinfer_operator::api::LICENSE_ACCEPTED_ANNOTATION)
            })
        })
        .and_then(|m| m.manager);
    assert_eq!(owner.as_deref(), Some("licence-officer"));
    op.stop().await;
}

/// Resident memory of a process, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Item 1: the largest specs the CRD admits (3 roles × 1024 groups × 8 pods; `worker` stands
/// alone, so prefill, decode and vision are the most roles one spec holds) stall at the pod
/// bound naming `replicas`, before anything is built, and the operator's resident memory stays
/// flat across ten of them (it grew by gigabytes when every desired pod was built up front).
#[tokio::test]
async fn the_largest_admitted_specs_stall_naming_replicas_and_the_operator_memory_stays_flat() {
    use deepinfer_e2e::operator_process::{free_address, OperatorProcess};
    let (_client, ns, api) = setup("huge").await;
    let operator = OperatorProcess::start(&ns.name, free_address(), &[], &[]);
    let huge = |name: &str| {
        let mut did = planner(name);
        did["spec"]["roles"] = json!(["prefill", "decode", "vision"]
            .iter()
            .map(|r| json!({"name": r, "replicas": 1024, "parallel": {"tensor": 64}}))
            .collect::<Vec<_>>());
        did
    };
    let stalled = |s: &DeepInferDeploymentStatus| {
        cond(s, "Stalled").is_some_and(|c| c.status == "True" && c.message.contains("replicas"))
    };
    create(&api, huge("huge-0")).await;
    status_where(&api, "huge-0", "Stalled naming replicas", stalled).await;
    let before = rss_kib(operator.id());
    for i in 1..10 {
        create(&api, huge(&format!("huge-{i}"))).await;
    }
    for i in 1..10 {
        status_where(
            &api,
            &format!("huge-{i}"),
            "Stalled naming replicas",
            stalled,
        )
        .await;
    }
    let after = rss_kib(operator.id());
    println!(
        "operator RSS: {} KiB after the first 24576-pod spec stalled, {} KiB after ten ({:+} KiB)",
        before,
        after,
        after as i64 - before as i64
    );
    assert!(before > 0, "RSS readable");
    assert!(
        after < before + 32 * 1024,
        "the operator grew from {before} KiB to {after} KiB over nine refused specs"
    );
    drop(operator);
}

/// Objects of the names the operator would use that another application made are never taken
/// over: a Role `<name>-acceptance`, a Service and a PodDisruptionBudget `<name>-worker` made
/// beforehand keep their rules and selectors, the resource stalls with `NameConflict` naming one
/// of them, and deleting the resource leaves them in place.
#[tokio::test]
async fn gpu_objects_of_another_owner_with_the_operators_names_are_never_taken_over() {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::rbac::v1::Role;
    let (client, ns, api) = setup("takeover").await;
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns.name);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns.name);
    let theirs_budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "taken-worker"},
        "spec": {"selector": {"matchLabels": {"app": "theirs"}}, "minAvailable": 1}
    }))
    .expect("budget");
    budgets
        .create(&PostParams::default(), &theirs_budget)
        .await
        .expect("their PodDisruptionBudget");
    let theirs_role: Role = serde_json::from_value(json!({
        "metadata": {"name": "taken-acceptance"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    }))
    .expect("role");
    let theirs_service: Service = serde_json::from_value(json!({
        "metadata": {"name": "taken-worker"},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]}
    }))
    .expect("service");
    roles
        .create(&PostParams::default(), &theirs_role)
        .await
        .expect("their Role");
    services
        .create(&PostParams::default(), &theirs_service)
        .await
        .expect("their Service");
    let op = Operator::start(&ns.name, &["mit"]).await;
    create(&api, planner("taken")).await;
    let st = status_where(&api, "taken", "Stalled=True with NameConflict", |s| {
        cond(s, "Stalled").is_some_and(|c| c.status == "True" && c.reason == "NameConflict")
    })
    .await;
    let stalled = cond(&st, "Stalled").expect("Stalled");
    assert!(
        stalled.message.contains("taken-acceptance") || stalled.message.contains("taken-worker"),
        "names the object: {}",
        stalled.message
    );
    // A few more passes: nothing of theirs changes.
    support::poke(&api, "taken", 3).await;
    let role = roles.get("taken-acceptance").await.expect("their Role");
    assert_eq!(role.rules, theirs_role.rules, "the Role's rules are theirs");
    assert!(role.metadata.owner_references.is_none());
    let service = services.get("taken-worker").await.expect("their Service");
    assert_eq!(
        service.spec.and_then(|s| s.selector),
        theirs_service.spec.and_then(|s| s.selector),
        "the Service's selector is theirs"
    );
    assert!(service.metadata.owner_references.is_none());
    let budget = budgets.get("taken-worker").await.expect("their budget");
    assert_eq!(
        budget.spec.and_then(|s| s.selector),
        theirs_budget.spec.and_then(|s| s.selector),
        "the budget's selector is theirs"
    );
    assert!(budget.metadata.owner_references.is_none());
    api.delete("taken", &Default::default())
        .await
        .expect("deleting the resource");
    support::eventually(TIMEOUT, "the resource gone", || async {
        api.get_opt("taken")
            .await
            .ok()
            .and_then(|d| d.is_none().then_some(()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(roles
        .get_opt("taken-acceptance")
        .await
        .expect("get")
        .is_some());
    assert!(services
        .get_opt("taken-worker")
        .await
        .expect("get")
        .is_some());
    assert!(budgets
        .get_opt("taken-worker")
        .await
        .expect("get")
        .is_some());
    op.stop().await;
}
