//! One configuration, judged and served, on the test bed: the judged engine of an acceptance run
//! runs the serving command and arguments of its role, with the serving environment, and the
//! evidence shows it. The engine is the stand-in (no GPU, no weights); the Jobs, the injected
//! runner, the Secret resolution and the evidence ConfigMap are real.

use std::collections::BTreeMap;
use std::time::Duration;

use deepinfer_e2e::monitor::{Limits, Monitor};
use deepinfer_e2e::support::{self, Operator};
use deepinfer_operator::api::DeepInferDeploymentStatus;
use deepinfer_operator::contract;
use deepinfer_operator::controller::build;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(120);
/// The Secret value the engine gets in `HF_TOKEN`; it must never reach the evidence.
const SECRET: &str = "hf_judged-config-secret-value";

/// One 8-GPU group judged by the shot planner replaying valid outputs, with serving arguments,
/// role arguments and an environment that includes a Secret.
fn judged(name: &str, runtime_args: Value) -> Value {
    let mut did = support::licensed_deployment(
        name,
        json!({"type": "NVIDIA", "devicesPerPod": 8}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    did["spec"]["runtime"]["args"] = runtime_args;
    did["spec"]["runtime"]["env"] = json!([
        {"name": "DEEPINFER_LOG_LEVEL", "value": "debug"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}},
        // The stand-in engine prints this variable's value on stdout and stderr.
        {"name": "DEEPINFER_FAKE_ECHO_ENV", "value": "HF_TOKEN"}
    ]);
    did["spec"]["runtime"]["roles"] = json!([{"role": "worker", "args": ["--x"]}]);
    did
}

async fn hub_secret(client: &Client, ns: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "hub", "labels": {"deepinfer.io/engine-readable": "true"}},
        "stringData": {"token": SECRET}
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the Secret");
}

fn ready_reason(s: &DeepInferDeploymentStatus) -> Option<(String, String)> {
    support::condition(s, "Ready").map(|c| (c.status.clone(), c.reason.clone()))
}

async fn pods(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(selector))
        .await
        .expect("pods")
        .items
}

/// The expected value of each variable a container declares, as the evidence records it: the
/// value; `<redacted>` for one from a Secret, a ConfigMap or a resource field; `None` for a
/// downward-API field (the pod's own identity).
fn declared_env(c: &Container) -> BTreeMap<String, Option<String>> {
    c.env
        .iter()
        .flatten()
        .map(|e| {
            let value = match &e.value_from {
                None => Some(e.value.clone().unwrap_or_default()),
                Some(from) if from.field_ref.is_some() => None,
                Some(_) => Some(contract::REDACTED.to_string()),
            };
            (e.name.clone(), value)
        })
        .collect()
}

/// The template with its placeholders replaced as the contract says, by hand.
fn expected_argv(template: &[String], serving: &Container) -> Vec<String> {
    let work = build::ACCEPTANCE_WORK_DIR;
    template
        .iter()
        .flat_map(|word| match word.as_str() {
            "{serving_args}" => serving.args.clone().unwrap_or_default(),
            "{serving_command}" => serving.command.clone().unwrap_or_default(),
            _ => vec![word
                .replace("{prompts_file}", &format!("{work}/prompts.jsonl"))
                .replace("{outputs_file}", &format!("{work}/outputs.jsonl"))],
        })
        .collect()
}

#[tokio::test]
async fn gpu_the_evidence_shows_the_serving_argv_and_env_of_the_same_revision() {
    let (client, ns, api) = support::namespace_with_checkpoint("judged-same").await;
    hub_secret(&client, &ns.name).await;
    let monitor = Monitor::start(&client, &ns.name, &["mit"], Limits::default());
    let op = Operator::start(&ns.name, &["mit"]).await;
    let object = judged("same", json!(["--max_batch_size", "8"]));
    let template: Vec<String> =
        serde_json::from_value(object["spec"]["acceptance"]["engine"]["command"].clone())
            .expect("template");
    support::create_deployment(&api, object).await;
    let st = support::status_where(&api, "same", "Ready=True", TIMEOUT, |s| {
        ready_reason(s).is_some_and(|(status, _)| status == "True")
    })
    .await;
    let revision = st.revision.clone().expect("revision");
    let acc = st.acceptance.clone().expect("acceptance recorded");
    assert_eq!(acc.revision, revision, "the pass is this revision's");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let evidence = cms
        .get(acc.evidence.as_deref().expect("evidence named"))
        .await
        .expect("evidence ConfigMap");
    let manifest: Value =
        serde_json::from_str(&evidence.data.clone().unwrap_or_default()["manifest.json"])
            .expect("manifest JSON");
    assert_eq!(manifest["revision"], json!(revision));
    let argv: Vec<String> =
        serde_json::from_value(manifest["engine"]["argv"].clone()).expect("engine.argv recorded");
    let env: BTreeMap<String, String> =
        serde_json::from_value(manifest["engine"]["env"].clone()).expect("engine.env recorded");

    // A serving rank 0 of the same role and revision.
    let serving_pods = pods(
        &client,
        &ns.name,
        &format!("deepinfer.io/deployment=same,deepinfer.io/component=worker,deepinfer.io/role=worker,deepinfer.io/rank=0,deepinfer.io/revision={revision}"),
    )
    .await;
    let serving = serving_pods
        .first()
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == build::ENGINE_CONTAINER)
        })
        .cloned()
        .expect("a serving rank 0 of the revision");
    // The judged rank 0 as the run's Job declares it.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let judged_job = jobs
        .list(&ListParams::default().labels(&format!(
            "deepinfer.io/deployment=same,deepinfer.io/component=acceptance,deepinfer.io/rank=0,deepinfer.io/revision={revision}"
        )))
        .await
        .expect("jobs")
        .items
        .into_iter()
        .next()
        .expect("the run's rank 0 Job");
    let judged = judged_job
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| {
            s.containers
                .into_iter()
                .find(|c| c.name == build::ENGINE_CONTAINER)
        })
        .expect("the judged engine container");

    let mut differences = Vec::new();
    let expected = expected_argv(&template, &serving);
    if argv != expected {
        differences.push(format!(
            "argv: judged {argv:?}, the template around the serving command and args {expected:?}"
        ));
    }
    let documented = |name: &str| {
        contract::ACCEPTANCE_INPUT_ENV
            .iter()
            .any(|i| i.name == name)
    };
    let serving_env = declared_env(&serving);
    for (name, want) in &serving_env {
        match (env.get(name), want) {
            (None, _) => differences.push(format!("env {name}: the judged engine lacks it")),
            (Some(_), _) if documented(name) => {}
            (Some(got), Some(want)) if got != want => {
                differences.push(format!("env {name}: judged {got:?}, serving {want:?}"))
            }
            (Some(_), None) => differences.push(format!(
                "env {name}: the pod's own field, but not a documented acceptance input"
            )),
            _ => {}
        }
    }
    for name in declared_env(&judged).keys() {
        if !serving_env.contains_key(name) && !documented(name) {
            differences.push(format!("env {name}: set on the judged engine only"));
        }
    }
    assert!(
        differences.is_empty(),
        "the judged engine's configuration differs from the serving one's beyond the documented acceptance inputs:\n{}",
        differences.join("\n")
    );
    // The serving flags were judged, and the Secret's value never reached the evidence.
    for flag in ["--max_batch_size", "--x"] {
        assert!(argv.iter().any(|a| a == flag), "{flag} judged: {argv:?}");
    }
    assert_eq!(env["HF_TOKEN"], contract::REDACTED);
    assert_eq!(env["DEEPINFER_LOG_LEVEL"], "debug");
    // The engine printed it on stdout and stderr: no evidence key holds it.
    for (key, value) in evidence.data.iter().flatten() {
        assert!(
            !value.contains(SECRET),
            "the Secret's value is in evidence key {key}"
        );
    }
    let log = &evidence.data.clone().unwrap_or_default()["engine.log"];
    assert!(
        log.contains(&format!("HF_TOKEN={}", contract::REDACTED)),
        "the engine's echo is kept, scrubbed: {log}"
    );
    let kept = serde_yaml::to_string(&evidence).expect("YAML");
    assert!(
        !kept.contains(SECRET),
        "the Secret's value is in the evidence"
    );
    op.stop().await;
    monitor.assert_clean().await;
}

#[tokio::test]
async fn gpu_a_serving_flag_that_breaks_structured_output_fails_acceptance() {
    let (client, ns, api) = support::namespace_with_checkpoint("judged-break").await;
    hub_secret(&client, &ns.name).await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(&api, judged("short", json!(["--max_model_len", "8"]))).await;
    let st = support::status_where(
        &api,
        "short",
        "Ready=False, AcceptanceFailed",
        TIMEOUT,
        |s| ready_reason(s).is_some_and(|(_, reason)| reason == "AcceptanceFailed"),
    )
    .await;
    let ready = support::condition(&st, "Ready").expect("Ready");
    assert_eq!(ready.status, "False");
    let acc = st.acceptance.clone().expect("acceptance recorded");
    assert_eq!(acc.result.as_str(), "Failed");
    assert!(!acc.failed_prompts.is_empty(), "{acc:?}");
    // Give the operator time to act on the verdict: it must create no serving pod.
    support::poke(&api, "short", 3).await;
    let serving = pods(
        &client,
        &ns.name,
        "deepinfer.io/deployment=short,deepinfer.io/component=worker",
    )
    .await;
    assert!(
        serving.is_empty(),
        "no serving pod for a failed configuration: {:?}",
        serving
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let evidence = cms
        .get(acc.evidence.as_deref().expect("evidence named"))
        .await
        .expect("evidence ConfigMap");
    let manifest: Value =
        serde_json::from_str(&evidence.data.clone().unwrap_or_default()["manifest.json"])
            .expect("manifest JSON");
    let argv: Vec<String> =
        serde_json::from_value(manifest["engine"]["argv"].clone()).expect("engine.argv recorded");
    assert!(
        argv.windows(2).any(|w| w == ["--max_model_len", "8"]),
        "the judged engine ran with the serving flag: {argv:?}"
    );
    op.stop().await;
}
