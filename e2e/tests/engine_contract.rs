//! The stand-in engine against the engine contract (docs/engine-contract.md), without a
//! cluster: run in the environment of an acceptance pod the operator builds, with the rendered
//! default-shaped command, it starts, prints the timing events, and writes outputs the operator's
//! parser takes; without a required variable, or under another contract version, it refuses to
//! start naming what is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use deepinfer_operator::acceptance::{engine, engine_io, handoff};
use deepinfer_operator::contract;
use deepinfer_operator::controller::{build, gates::spec::validate::validate};

const FAKE_ENGINE: &str = env!("CARGO_BIN_EXE_deepinfer-fake-engine");

/// The engine container's environment of rank 0 of a two-pod acceptance group, as the node
/// would resolve it (downward-API fields get stand-in values).
fn acceptance_env() -> BTreeMap<String, String> {
    let d = serde_json::from_value(serde_json::json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": "plan", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": format!("r.example/deepinfer@sha256:{}", "0".repeat(64)),
                        "commit": "0123abc"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}],
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
        }
    }))
    .expect("resource");
    let d = validate(&d, &Default::default()).expect("valid");
    let names = build::AcceptanceNames::new("plan", "rev", "t");
    let job = build::acceptance_job(&d, &names, 0, "rev", "operator:1").expect("job");
    let pod = job.spec.expect("spec").template.spec.expect("pod");
    let engine = pod
        .containers
        .into_iter()
        .find(|c| c.name == build::ENGINE_CONTAINER)
        .expect("engine container");
    engine
        .env
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let value = e.value.unwrap_or_else(|| format!("stand-in-{}", e.name));
            (e.name, value)
        })
        .collect()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/shot-planner")
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    outputs: Vec<u8>,
}

fn run(name: &str, env: &BTreeMap<String, String>) -> Ran {
    run_serving(name, env, &[])
}

/// As [`run`], with `serving` after `--model_name <dir>` in `{serving_args}`.
fn run_serving(name: &str, env: &BTreeMap<String, String>, serving: &[&str]) -> Ran {
    let (command, dir) = prepare_serving(name, serving);
    let out = Command::new(&command[0])
        .args(&command[1..])
        .env_clear()
        .envs(env)
        .current_dir(&dir)
        .output()
        .expect("the stand-in runs");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        outputs: std::fs::read(dir.join(handoff::OUTPUTS_FILE)).unwrap_or_default(),
    }
}

/// A fresh work directory with the prompts written, and the rendered command.
fn prepare(name: &str) -> (Vec<String>, PathBuf) {
    prepare_serving(name, &[])
}

/// As [`prepare`], with `serving` after `--model_name <dir>` in `{serving_args}`.
fn prepare_serving(name: &str, serving: &[&str]) -> (Vec<String>, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("engine-contract")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("model")).unwrap();
    let spec = deepinfer_operator::acceptance::parse_spec(
        &std::fs::read_to_string(fixtures().join("acceptance.yaml")).unwrap(),
    )
    .unwrap();
    let prompts = dir.join(handoff::PROMPTS_FILE);
    std::fs::write(&prompts, engine_io::prompts_jsonl(&spec).unwrap()).unwrap();
    let outputs = dir.join(handoff::OUTPUTS_FILE);
    // The documented default command's flags, with the stand-in as the program.
    let mut template: Vec<String> = engine::DEFAULT_COMMAND[2..]
        .iter()
        .map(|s| s.to_string())
        .collect();
    template.insert(0, FAKE_ENGINE.to_string());
    let model = dir.join("model");
    let serving_args: Vec<String> = ["--model_name".to_string(), model.display().to_string()]
        .into_iter()
        .chain(serving.iter().map(|s| s.to_string()))
        .collect();
    let mut command = engine::render_command(
        &template,
        &engine::TemplateInputs {
            model_dir: &model,
            prompts_file: &prompts,
            outputs_file: &outputs,
            serving_command: &[],
            serving_args: &serving_args,
        },
    );
    command.extend([
        "--canned".to_string(),
        fixtures().join("valid-2-2-2.jsonl").display().to_string(),
    ]);
    (command, dir)
}

#[test]
fn given_a_rank_table_the_stand_in_engine_waits_until_it_is_completed() {
    let (command, dir) = prepare("rank-table");
    let table = dir.join("hccl.json");
    std::fs::write(&table, r#"{"status": "initializing", "server_list": []}"#).unwrap();
    let mut env = acceptance_env();
    env.insert(
        contract::env::RANK_TABLE_FILE.to_string(),
        table.display().to_string(),
    );
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .env_clear()
        .envs(&env)
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the stand-in starts");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        child.try_wait().expect("status").is_none(),
        "it waits while the table is initializing"
    );
    assert!(
        !dir.join(handoff::OUTPUTS_FILE).exists(),
        "nothing is generated before the table is complete"
    );
    std::fs::write(&table, r#"{"status": "completed", "server_list": []}"#).unwrap();
    let out = child.wait_with_output().expect("it finishes");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("DEEPINFER_RANK_TABLE waiting for")
            && stdout.contains("(status initializing)"),
        "{stdout}"
    );
    let at = |line: &str| {
        stdout
            .find(line)
            .unwrap_or_else(|| panic!("{line} missing in {stdout}"))
    };
    assert!(
        at("DEEPINFER_RANK_TABLE completed") < at("DEEPINFER_EVENT loaded"),
        "{stdout}"
    );
}

#[test]
fn the_stand_in_engine_implements_the_contract() {
    let env = acceptance_env();
    let ran = run("conforming", &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout.contains(&format!(
            "DEEPINFER_CONTRACT version={} role=worker group=0 rank=0 pods=2 world=16 peers=rank-0.{run}.ns.svc,rank-1.{run}.ns.svc",
            contract::VERSION,
            run = build::AcceptanceNames::new("plan", "rev", "t").run
        )),
        "{}",
        ran.stdout
    );
    for event in contract::EVENTS {
        assert!(
            ran.stdout
                .contains(&format!("{}{}", contract::event::PREFIX, event.name)),
            "event {} printed: {}",
            event.name,
            ran.stdout
        );
    }
    let parsed = engine_io::parse_outputs(&ran.outputs);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    assert_eq!(parsed.outputs.len(), 4);
    // Every field of the record, required and optional, is reported by the stand-in.
    for line in ran.outputs.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).unwrap();
        for field in contract::OUTPUT_FIELDS {
            assert!(!v[field.name].is_null(), "{} missing in {v}", field.name);
        }
    }
}

#[test]
fn the_stand_in_engine_refuses_an_incomplete_contract_environment_naming_the_variable() {
    let env = acceptance_env();
    for item in contract::ENV
        .iter()
        .filter(|i| i.presence == contract::Presence::Required)
        .filter(|i| i.name != contract::env::CONTRACT_VERSION)
    {
        let mut without = env.clone();
        without.remove(item.name);
        let ran = run("incomplete", &without);
        assert_eq!(ran.code, Some(2), "without {}", item.name);
        assert!(
            ran.stderr.contains(&format!(
                "the engine contract's required environment is incomplete: {} not set",
                item.name
            )),
            "{}",
            ran.stderr
        );
        assert!(ran.outputs.is_empty(), "no outputs without {}", item.name);
    }
    let mut other = env.clone();
    // The version before this one.
    other.insert(contract::env::CONTRACT_VERSION.into(), "1".into());
    let ran = run("other-version", &other);
    assert_eq!(ran.code, Some(2));
    assert!(
        ran.stderr.contains(&format!(
            "DEEPINFER_CONTRACT_VERSION is \"1\"; this engine implements engine contract version {}",
            contract::VERSION
        )),
        "{}",
        ran.stderr
    );
}

#[test]
fn the_stand_in_engine_reads_each_prompts_sampling_settings() {
    let ran = run("sampling", &acceptance_env());
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // The fixture pins greedy decoding with seed 1234, and lets the title card vary.
    assert!(
        ran.stderr.contains("prompt \"shot-plan\": sampling temperature=0 top_p=1 top_k=0 seed=1234 repetition_penalty=1"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("prompt \"title-card\": sampling temperature=0.7 top_p=0.9 top_k=0 seed=1234 repetition_penalty=1"),
        "{}",
        ran.stderr
    );
}

#[test]
fn the_stand_in_engine_honours_a_max_length_serving_flag_and_ignores_flags_it_does_not_model() {
    let env = acceptance_env();
    let cut = run_serving(
        "max-model-len",
        &env,
        &["--max_batch_size", "8", "--x", "--max_model_len", "8"],
    );
    assert_eq!(cut.code, Some(0), "{}", cut.stderr);
    assert!(
        cut.stderr
            .contains("serving flag --max_batch_size 8 changes nothing")
            && cut.stderr.contains("serving flag --x changes nothing"),
        "{}",
        cut.stderr
    );
    let parsed = engine_io::parse_outputs(&cut.outputs);
    assert_eq!(parsed.outputs.len(), 4, "{:?}", parsed.errors);
    for line in &parsed.outputs {
        let out = &line.output;
        assert!(out.text.chars().count() <= 8, "{out:?}");
        assert_eq!(out.finish_reason, "length", "cut short by the length limit");
    }
    let dashed = run_serving("max-model-len-dashed", &env, &["--max-model-len", "8"]);
    assert_eq!(dashed.code, Some(0), "{}", dashed.stderr);
    assert_eq!(dashed.outputs, cut.outputs, "either spelling");
    let whole = run("max-model-len-none", &env);
    assert_ne!(whole.outputs, cut.outputs);
}
