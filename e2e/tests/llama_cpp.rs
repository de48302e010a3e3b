//! A real inference engine through the engine contract: llama.cpp (node-llama-cpp) wrapped by the
//! example adapter `config/samples/llama-cpp/adapter.mjs`, on the tiny random-weight llama model
//! `e2e/fixtures/tiny-llama-gguf` generates (`e2e/bed/llama-cpp.sh` installs both; the node
//! agent runs containers of image `deepinfer-llama-cpp` as the adapter). Judged by the shipped
//! sample's own acceptance section, the engine's constrained decoding gives structurally valid
//! JSON and grammar text that a random model cannot make meaningful: the verdict names exactly the
//! semantic rules, and the outputs are kept as evidence. Judged by structure alone, the same
//! engine passes, serves, and its `/health` is probed. Each deployment takes one GPU.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use deepinfer_e2e::support::{self, Operator};
use deepinfer_operator::acceptance::checker::Verdict;
use deepinfer_operator::acceptance::sheet::NOT_REPORTED;
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(180);

use support::llama_cpp::{on_the_bed, sample, structure_only};

async fn setup(prefix: &str) -> (Client, support::TestNamespace, Api<DeepInferDeployment>) {
    support::llama_cpp::namespace(prefix).await
}

fn condition_is(s: &DeepInferDeploymentStatus, type_: &str, status: &str, reason: &str) -> bool {
    support::condition(s, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

/// The outputs the engine wrote, by prompt id, in file order.
fn outputs(cm: &ConfigMap) -> Vec<Value> {
    support::evidence_key(cm, "outputs.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("an output record"))
        .collect()
}

/// `deepinfer-runner check --sheet` on the evidence as a user saves it with kubectl.
fn sheet(ns: &str, evidence: &str) -> String {
    let yaml = support::kubectl_ok(&["-n", ns, "get", "configmap", evidence, "-o", "yaml"]);
    let file = std::env::temp_dir().join(format!("{ns}-evidence.yaml"));
    std::fs::write(&file, yaml).expect("saving the evidence");
    let out =
        std::process::Command::new(support::repo_root().join("target/debug/deepinfer-operator"))
            .args(["check", "--sheet"])
            .arg(&file)
            .output()
            .expect("running check --sheet");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "check --sheet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the sheet is text")
}

/// The sheet's table row of prompt `id`, split into its cells.
fn sheet_row(sheet: &str, id: &str) -> Vec<String> {
    let row = sheet
        .lines()
        .find(|l| l.split('|').next().is_some_and(|c| c.trim() == id))
        .unwrap_or_else(|| panic!("no row {id} in\n{sheet}"));
    row.split('|').map(|c| c.trim().to_string()).collect()
}

#[tokio::test]
async fn gpu_llama_cpp_writes_valid_structure_that_fails_the_samples_semantic_rules() {
    let t0 = Instant::now();
    let (client, ns, api) = setup("llama-fail").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let acceptance = sample()["spec"]["acceptance"].clone();
    support::create_deployment(&api, on_the_bed("llama", acceptance)).await;
    let st = support::status_where(&api, "llama", "acceptance failed", TIMEOUT, |s| {
        condition_is(s, "Ready", "False", "AcceptanceFailed")
    })
    .await;
    let judged = Instant::now();
    let acc = st.acceptance.clone().expect("the judgement");
    assert_eq!(acc.failed_prompts, vec!["shot-plan", "timeline"]);

    let cm = support::evidence_of(&client, &ns.name, &st).await;
    let verdicts: Vec<Verdict> =
        serde_json::from_str(&support::evidence_key(&cm, "verdicts.json")).expect("verdicts.json");
    let by_id = |id: &str| verdicts.iter().find(|v| v.id == id).expect("a verdict");
    // Structure, EOS and completion all held; only the semantic rules failed, each named.
    assert_eq!(
        by_id("shot-plan").reason,
        "rule \"shot seconds must total 6\" (`output.shots.map(s, s.seconds).sum() == 6`) is false"
    );
    assert_eq!(
        by_id("timeline").reason,
        "rule \"the timeline runs from second 0 to second 6\" (`output.startsWith('0-') && output.matches('-6 [a-z]+$')`) is false"
    );
    assert!(
        by_id("shot-style").passed && by_id("title-card").passed,
        "{verdicts:?}"
    );

    // The evidence is the engine's real output: four records, each ended by EOS, the shot plan
    // JSON of three shots whose seconds do not total 6.
    let records = outputs(&cm);
    assert_eq!(records.len(), 4, "{records:?}");
    for r in &records {
        assert_eq!(r["finish_reason"], "stop", "{r}");
        assert!(
            r["completion_tokens"].as_u64().is_some_and(|n| n > 0),
            "{r}"
        );
    }
    let shot_plan = records
        .iter()
        .find(|r| r["id"] == "shot-plan")
        .expect("the shot plan's record");
    let plan: Value = serde_json::from_str(shot_plan["text"].as_str().expect("text"))
        .expect("the shot plan is JSON");
    let shots = plan["shots"].as_array().expect("shots");
    assert_eq!(shots.len(), 3, "{plan}");
    let total: i64 = shots
        .iter()
        .map(|s| s["seconds"].as_i64().expect("whole"))
        .sum();
    assert_ne!(total, 6, "{plan}");
    let log = support::evidence_key(&cm, "engine.log");
    for event in ["loaded", "warmup_done", "generation_done"] {
        assert!(log.contains(&format!("DEEPINFER_EVENT {event}")), "{log}");
    }

    // The sheet: the engine's token counts and times where it reports them, "not reported" for
    // the cached prefix and accepted tokens, which it does not.
    let sheet = sheet(&ns.name, &acc.evidence.clone().expect("evidence"));
    println!("{sheet}");
    let row = sheet_row(&sheet, "shot-plan");
    assert_eq!(row[1], "FAIL", "{sheet}");
    assert_eq!(row[2], shot_plan["prompt_tokens"].to_string(), "{sheet}");
    assert_eq!(row[3], NOT_REPORTED, "{sheet}");
    assert_eq!(
        row[5],
        shot_plan["completion_tokens"].to_string(),
        "{sheet}"
    );
    assert_eq!(row[6], NOT_REPORTED, "{sheet}");
    assert!(row[8].ends_with(" s") && row[9].ends_with(" s"), "{sheet}");
    assert!(!sheet.contains("load not reported"), "{sheet}");
    assert!(!sheet.contains("measured not reported"), "{sheet}");
    op.stop().await;
    println!(
        "llama.cpp failed verdict: judged {:.1} s after the start, test {:.1} s",
        (judged - t0).as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The sample's acceptance section without its rules: structure only, which the engine's
/// constrained decoding guarantees.
/// Sends one HTTP/1.1 request to `address` and returns the status code and body.
fn http(address: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(address).expect("connecting to the engine");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: engine\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("sending");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reading");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

#[tokio::test]
async fn gpu_llama_cpp_judged_by_structure_passes_serves_and_answers_its_probes() {
    let t0 = Instant::now();
    let (client, ns, api) = setup("llama-pass").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    support::create_deployment(&api, on_the_bed("llama", structure_only())).await;
    let st = support::status_where(&api, "llama", "Ready", TIMEOUT, |s| {
        support::condition(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let acc = st.acceptance.clone().expect("the judgement");
    assert!(acc.failed_prompts.is_empty(), "{acc:?}");
    let records = outputs(&support::evidence_of(&client, &ns.name, &st).await);
    assert_eq!(records.len(), 4, "the real outputs are kept: {records:?}");

    // The serving pod runs the adapter; Ready came from its startup and readiness probes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let worker = pods
        .list(
            &ListParams::default()
                .labels("deepinfer.io/deployment=llama,deepinfer.io/component=worker"),
        )
        .await
        .expect("pods")
        .items
        .into_iter()
        .next()
        .expect("a worker pod");
    let engine = worker
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first().cloned())
        .expect("engine status");
    assert!(engine.ready && engine.started == Some(true), "{engine:?}");
    let ip = worker
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod IP");
    let address = format!("{}:8000", support::pod_host(&ip));
    let (status, body) = http(&address, "GET", "/health", "");
    assert_eq!((status, body.as_str()), (200, "{\"status\":\"ok\"}"));
    // And it serves: a completion under a JSON schema, from the real engine.
    let request = json!({"prompt": "Pick a style.", "max_tokens": 32,
        "json_schema": {"type": "object", "required": ["style"],
                        "properties": {"style": {"enum": ["cinematic", "animated"]}}}});
    let (status, body) = http(&address, "POST", "/v1/completions", &request.to_string());
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
    let text: Value = serde_json::from_str(answer["choices"][0]["text"].as_str().expect("text"))
        .expect("the completion is JSON");
    assert!(
        ["cinematic", "animated"].contains(&text["style"].as_str().unwrap_or_default()),
        "{answer}"
    );
    assert!(
        answer["usage"]["completion_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{answer}"
    );
    op.stop().await;
    println!(
        "llama.cpp pass and serve: test {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
