//! The operator is no deputy (issue 35, item 1): an editor of a `DeepInferDeployment` who may not
//! read a Secret or ConfigMap cannot have the operator hand it to a workload. A hub token Secret
//! is mounted into a fetch Job only when it opted in (label `deepinfer.io/hub-token: "true"`, not
//! a ServiceAccount token), and only for an endpoint on `--allowed-hub-endpoints`; engine
//! containers read only Secrets and ConfigMaps labelled `deepinfer.io/engine-readable: "true"`.
//! Each test has its own namespace and its own in-process operator.

use std::time::Duration;

use deepinfer_e2e::support::{self, Operator};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(90);
const REVISION: &str = "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d";

/// One group of one 8-GPU pod over the fixture checkpoint on claim `ckpt`, judged by the shot
/// planner replaying valid outputs.
fn planner(name: &str) -> Value {
    support::deployment(name)
}

/// `planner` fetching from the hub into `ckpt` (directory `fetched`).
fn fetching(name: &str, hub: Value) -> Value {
    let mut did = planner(name);
    let mut source = json!({"revision": REVISION, "claimName": "ckpt", "path": "fetched"});
    for (k, v) in hub.as_object().into_iter().flatten() {
        source[k] = v.clone();
    }
    did["spec"]["model"]["source"] = json!({ "hub": source });
    did
}

fn cond<'a>(
    s: &'a DeepInferDeploymentStatus,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    support::condition(s, t)
}

async fn reason_is(
    api: &Api<DeepInferDeployment>,
    name: &str,
    condition: &str,
    reason: &str,
) -> String {
    let st = support::status_where(api, name, reason, TIMEOUT, |s| {
        cond(s, condition).is_some_and(|c| c.reason == reason)
    })
    .await;
    cond(&st, condition)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

async fn secret(client: &Client, ns: &str, object: Value) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(object).expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the Secret");
}

async fn label(client: &Client, ns: &str, secret: &str, key: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .patch(
            secret,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {key: "true"}}})),
        )
        .await
        .expect("labelling the Secret");
}

async fn jobs(client: &Client, ns: &str) -> Vec<Job> {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default()).await.expect("jobs").items
}

/// Every Secret any container of the namespace's Jobs and pods reads (env and volumes).
async fn secrets_mounted(client: &Client, ns: &str) -> Vec<String> {
    let mut specs: Vec<k8s_openapi::api::core::v1::PodSpec> = jobs(client, ns)
        .await
        .into_iter()
        .filter_map(|j| j.spec?.template.spec)
        .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    specs.extend(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .into_iter()
            .filter_map(|p| p.spec),
    );
    let mut names = Vec::new();
    for spec in specs {
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            for e in c.env.iter().flatten() {
                if let Some(s) = e
                    .value_from
                    .as_ref()
                    .and_then(|f| f.secret_key_ref.as_ref())
                {
                    names.push(s.name.clone());
                }
            }
        }
        for v in spec.volumes.iter().flatten() {
            if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
                names.push(name);
            }
        }
    }
    names
}

/// A token Secret without the opt-in label, and a ServiceAccount token Secret with it, are never
/// mounted into a fetch Job: the checkpoint gate says `TokenSecretNotAllowed` and no Job exists.
/// Once the Secret is labelled, the fetch Job is created with it.
#[tokio::test]
async fn a_hub_token_secret_is_mounted_only_once_it_opted_in() {
    let (client, ns, api) = support::namespace_with_checkpoint("hubtoken").await;
    secret(
        &client,
        &ns.name,
        json!({"metadata": {"name": "team-db"}, "stringData": {"token": "not-for-the-hub"}}),
    )
    .await;
    // A legacy ServiceAccount token Secret (key `token`), even labelled, is refused.
    secret(
        &client,
        &ns.name,
        json!({"metadata": {"name": "sa-token", "labels": {"deepinfer.io/hub-token": "true"},
                "annotations": {"kubernetes.io/service-account.name": "default"}},
               "type": "kubernetes.io/service-account-token"}),
    )
    .await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(
        &api,
        fetching("plain", json!({"tokenSecretName": "team-db"})),
    )
    .await;
    support::create_deployment(
        &api,
        fetching("legacy", json!({"tokenSecretName": "sa-token"})),
    )
    .await;
    let plain = reason_is(&api, "plain", "CheckpointVerified", "TokenSecretNotAllowed").await;
    assert!(
        plain.contains("team-db") && plain.contains("deepinfer.io/hub-token=true"),
        "{plain}"
    );
    let legacy = reason_is(
        &api,
        "legacy",
        "CheckpointVerified",
        "TokenSecretNotAllowed",
    )
    .await;
    assert!(legacy.contains("ServiceAccount token"), "{legacy}");
    support::poke(&api, "plain", 2).await;
    assert!(
        jobs(&client, &ns.name).await.is_empty(),
        "no fetch Job for a Secret that did not opt in"
    );
    assert!(secrets_mounted(&client, &ns.name).await.is_empty());
    // Opting in lets the fetch Job carry it (no event announces a label: the gate looks again).
    label(&client, &ns.name, "team-db", "deepinfer.io/hub-token").await;
    let (c, n) = (&client, ns.name.as_str());
    support::eventually(
        TIMEOUT,
        "a fetch Job with the opted-in Secret",
        || async move {
            let mounted = secrets_mounted(c, n).await;
            mounted.iter().any(|s| s == "team-db").then_some(())
        },
    )
    .await;
    assert!(
        !secrets_mounted(&client, &ns.name)
            .await
            .iter()
            .any(|s| s == "sa-token"),
        "the ServiceAccount token is still not mounted"
    );
    op.stop().await;
}

/// A hub endpoint off `--allowed-hub-endpoints` is refused with `HubEndpointNotAllowed`, with a
/// token (that opted in) or without: no fetch Job is created.
#[tokio::test]
async fn a_hub_endpoint_off_the_allow_list_is_refused() {
    let (client, ns, api) = support::namespace_with_checkpoint("hubendpoint").await;
    secret(
        &client,
        &ns.name,
        json!({"metadata": {"name": "hub-token", "labels": {"deepinfer.io/hub-token": "true"}},
               "stringData": {"token": "hf_real"}}),
    )
    .await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(
        &api,
        fetching(
            "token",
            json!({"endpoint": "https://hub.attacker.example", "tokenSecretName": "hub-token"}),
        ),
    )
    .await;
    support::create_deployment(
        &api,
        fetching("anonymous", json!({"endpoint": "http://10.0.0.1:8080"})),
    )
    .await;
    for name in ["token", "anonymous"] {
        let message = reason_is(&api, name, "CheckpointVerified", "HubEndpointNotAllowed").await;
        assert!(
            message.contains("--allowed-hub-endpoints")
                && message.contains("https://huggingface.co"),
            "{message}"
        );
    }
    assert!(
        jobs(&client, &ns.name).await.is_empty(),
        "no fetch Job for an endpoint off the allow-list"
    );
    op.stop().await;
}

/// `runtime.env[].valueFrom` naming a Secret that did not opt in stalls the resource with
/// `ReferenceNotAllowed` before anything is created; labelled `deepinfer.io/engine-readable`,
/// the Secret reaches the acceptance run.
#[tokio::test]
async fn engine_containers_read_only_secrets_that_opted_in() {
    let (client, ns, api) = support::namespace_with_checkpoint("enginesecret").await;
    secret(
        &client,
        &ns.name,
        json!({"metadata": {"name": "team-db"}, "stringData": {"password": "not-for-engines"}}),
    )
    .await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let mut did = planner("flash");
    did["spec"]["runtime"]["env"] = json!([
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "team-db", "key": "password"}}}
    ]);
    support::create_deployment(&api, did).await;
    let message = reason_is(&api, "flash", "Stalled", "ReferenceNotAllowed").await;
    assert!(
        message.contains("Secret")
            && message.contains("team-db")
            && message.contains("spec.runtime.env[DB_PASSWORD].valueFrom.secretKeyRef")
            && message.contains("deepinfer.io/engine-readable=true"),
        "{message}"
    );
    support::poke(&api, "flash", 2).await;
    assert!(
        jobs(&client, &ns.name).await.is_empty(),
        "nothing is created"
    );
    assert!(secrets_mounted(&client, &ns.name).await.is_empty());
    label(&client, &ns.name, "team-db", "deepinfer.io/engine-readable").await;
    let (c, n) = (&client, ns.name.as_str());
    support::eventually(
        TIMEOUT,
        "an engine reading the opted-in Secret",
        || async move {
            let mounted = secrets_mounted(c, n).await;
            mounted.iter().any(|s| s == "team-db").then_some(())
        },
    )
    .await;
    let st = api.get("flash").await.expect("resource");
    let spec_ok = st
        .status
        .as_ref()
        .and_then(|s| cond(s, "Stalled"))
        .is_none_or(|c| c.reason != "ReferenceNotAllowed");
    assert!(spec_ok, "{:?}", st.status);
    op.stop().await;
}
