//! The acceptance runner end to end without a cluster: `accept` drives the stand-in engine,
//! writes its evidence into a directory and its summary into a file. Also: `check` and `accept`
//! agree on the shot-planner fixtures.

use std::path::{Path, PathBuf};

use deepinfer_operator::acceptance::CheckArgs;
use deepinfer_operator::acceptance::{
    self, AcceptArgs, AcceptanceResult, AcceptanceSummary, Verdict,
};

const FAKE_ENGINE: &str = env!("CARGO_BIN_EXE_deepinfer-fake-engine");
const SEEDS: [&str; 5] = [
    "valid-2-2-2.jsonl",
    "invalid-2-2-3.jsonl",
    "invalid-empty-prompt.jsonl",
    "invalid-boolean-seconds.jsonl",
    "invalid-fraction-seconds.jsonl",
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/shot-planner")
}

struct Run {
    code: i32,
    summary: AcceptanceSummary,
    evidence: PathBuf,
}

impl Run {
    fn file(&self, key: &str) -> Vec<u8> {
        std::fs::read(self.evidence.join(key)).unwrap_or_else(|e| panic!("evidence {key}: {e}"))
    }

    fn verdicts(&self) -> Vec<Verdict> {
        serde_json::from_slice(&self.file("verdicts.json")).expect("verdicts.json parses")
    }

    fn manifest(&self) -> serde_json::Value {
        serde_json::from_slice(&self.file("manifest.json")).expect("manifest.json parses")
    }
}

/// Runs `accept` with the fixture spec, its engine replaced by the stand-in in `mode`.
async fn accept(name: &str, canned: &str, mode: &str, timeout_seconds: i32) -> Run {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("accept-runner")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let model_dir = dir.join("model");
    std::fs::create_dir_all(&model_dir).unwrap();
    std::fs::write(model_dir.join("config.json"), "{}").unwrap();

    let text = std::fs::read_to_string(fixtures().join("acceptance.yaml")).unwrap();
    let mut spec = acceptance::parse_spec(&text).unwrap();
    spec.timeout_seconds = timeout_seconds;
    let command = [
        FAKE_ENGINE,
        "{serving_args}",
        "--prompts",
        "{prompts_file}",
        "--output",
        "{outputs_file}",
    ];
    let mut command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    command.extend([
        "--canned".into(),
        fixtures().join(canned).display().to_string(),
        "--mode".into(),
        mode.into(),
    ]);
    spec.engine = Some(deepinfer_operator::api::EngineCommand { command });
    let spec_file = dir.join("acceptance.yaml");
    std::fs::write(&spec_file, serde_yaml::to_string(&spec).unwrap()).unwrap();

    let evidence = dir.join("evidence");
    let termination = dir.join("termination-log");
    let args = AcceptArgs::try_parse_from([
        "accept",
        "--spec-file",
        spec_file.to_str().unwrap(),
        "--model-dir",
        model_dir.to_str().unwrap(),
        "--revision",
        "rev-1",
        "--image",
        &format!("registry.local/deepinfer@sha256:{}", "0".repeat(64)),
        "--runtime-commit",
        "0123abc",
        "--checkpoint-revision",
        &"a".repeat(40),
        "--layout",
        "worker=4x1x2x8",
        "--evidence-dir",
        evidence.to_str().unwrap(),
        "--work-dir",
        dir.join("work").to_str().unwrap(),
        "--termination-log",
        termination.to_str().unwrap(),
    ])
    .expect("accept arguments parse");
    let code = acceptance::accept(args).await.expect("accept runs");
    let message = std::fs::read_to_string(&termination).expect("termination message written");
    assert!(message.len() < 4096);
    let summary = serde_json::from_str(&message).expect("summary parses");
    Run {
        code,
        summary,
        evidence,
    }
}

fn check(outputs: &str) -> Vec<Verdict> {
    let args = CheckArgs {
        acceptance: Some(fixtures().join("acceptance.yaml")),
        outputs: Some(fixtures().join(outputs)),
        sheet: None,
    };
    acceptance::check_verdicts(&args).expect("fixture is good input")
}

#[tokio::test]
async fn check_and_accept_agree_on_the_seed_outputs() {
    for seed in SEEDS {
        let run = accept(seed.trim_end_matches(".jsonl"), seed, "replay", 60).await;
        assert_eq!(run.verdicts(), check(seed), "{seed}");
        // Every output is kept byte for byte, failures included.
        assert_eq!(
            run.file("outputs.jsonl"),
            std::fs::read(fixtures().join(seed)).unwrap(),
            "{seed}"
        );
        let valid = seed.starts_with("valid");
        assert_eq!(
            run.code,
            if valid { 0 } else { 1 },
            "{seed}: {:?}",
            run.summary
        );
        assert_eq!(
            run.summary.result,
            if valid {
                AcceptanceResult::Passed
            } else {
                AcceptanceResult::Failed
            }
        );
        assert_eq!(run.summary.prompts, 4);
        assert_eq!(
            run.summary.failed_prompts,
            if valid {
                vec![]
            } else {
                vec!["shot-plan".to_string()]
            }
        );
        assert_eq!(run.summary.evidence, run.evidence.display().to_string());
        assert_eq!(run.summary.revision, "rev-1");
    }
}

#[tokio::test]
async fn manifest_records_the_configuration_and_timings() {
    let run = accept("manifest", "valid-2-2-2.jsonl", "replay", 60).await;
    let m = run.manifest();
    assert_eq!(m["result"], "Passed");
    assert_eq!(
        m["runtime"]["imageDigest"],
        format!("sha256:{}", "0".repeat(64))
    );
    assert_eq!(m["runtime"]["commit"], "0123abc");
    assert_eq!(m["checkpoint"]["revision"], "a".repeat(40));
    assert!(m["checkpoint"]["modelDir"]
        .as_str()
        .unwrap()
        .ends_with("/model"));
    assert_eq!(m["layout"]["worldSize"], 8);
    assert_eq!(m["layout"]["expert"], 8);
    assert_eq!(
        m["promptIds"],
        serde_json::json!(["shot-plan", "shot-style", "title-card", "timeline"])
    );
    assert!(m["devices"]["source"].is_string());
    for phase in ["loadSeconds", "warmupSeconds", "measuredSeconds"] {
        assert!(m["timings"][phase].is_f64(), "{phase}: {}", m["timings"]);
    }
    assert_eq!(m["tokens"]["completionTokens"], 52 + 7 + 8 + 17);
    assert_eq!(m["tokens"]["acceptedTokens"], 33 + 4 + 5 + 11);
    assert_eq!(m["prompts"][0]["finishReason"], "stop");
    // The measurement sheet's items: what the spec asked for, what the engine reported.
    assert_eq!(m["prompts"][0]["requestedTokens"], 256);
    assert_eq!(m["prompts"][0]["cachedTokens"], 12);
    assert_eq!(m["prompts"][0]["activeRequests"], 4);
    assert_eq!(m["prompts"][0]["completionSeconds"], 0.58);
    assert_eq!(m["tokens"]["cachedTokens"], 12 + 12);
    assert_eq!(m["tokens"]["peakActiveRequests"], 4);
    assert_eq!(m["tokens"]["maxCompletionSeconds"], 0.58);
    assert!(m["tokens"]["requestsPerSecond"].is_f64(), "{}", m["tokens"]);
    let sheet = acceptance::sheet::render(
        &acceptance::sheet::load_manifest(&run.evidence).expect("the kept manifest loads"),
    );
    println!("{sheet}");
    let table: Vec<&str> = sheet
        .lines()
        .filter(|l| {
            ["shot-", "title-card", "timeline", "total"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(table.len(), 5, "{sheet}");
    for row in table {
        assert!(
            !row.contains(acceptance::sheet::NOT_REPORTED),
            "the stand-in reports every per-prompt item: {row}"
        );
    }
    assert!(sheet.contains("Capacity:  "), "{sheet}");
    assert!(!sheet.contains("output tokens/s, not reported"), "{sheet}");
    assert_eq!(m["truncated"], serde_json::json!([]));
    // The fixture's sampling (greedy, seed 1234; the title card varies) is recorded and printed.
    let greedy = serde_json::json!({"temperature": 0.0, "topP": 1.0, "topK": 0, "seed": 1234, "repetitionPenalty": 1.0});
    assert_eq!(m["sampling"], greedy);
    assert_eq!(m["prompts"][0]["sampling"], greedy);
    assert_eq!(m["prompts"][2]["sampling"]["temperature"], 0.7);
    assert_eq!(m["prompts"][2]["sampling"]["topP"], 0.9);
    assert!(
        sheet.contains("Sampling:  temperature 0 (greedy) | top-p 1 (off) | top-k 0 (off) | seed 1234 | repetition penalty 1\n           per prompt: title-card: temperature 0.7, top-p 0.9\n"),
        "{sheet}"
    );
    let log = String::from_utf8(run.file("engine.log")).unwrap();
    assert!(log.contains("DEEPINFER_EVENT warmup_done"), "{log}");
    assert!(
        log.contains("prompt \"title-card\": sampling temperature=0.7 top_p=0.9"),
        "the engine was handed each prompt's sampling: {log}"
    );
}

#[tokio::test]
async fn engine_crash_fails_naming_the_exit_code() {
    let run = accept("crash", "valid-2-2-2.jsonl", "crash", 60).await;
    assert_eq!(run.code, 1);
    assert_eq!(run.summary.result, AcceptanceResult::Failed);
    assert!(
        run.summary
            .reason
            .starts_with("engine exited with code 70; 3 of 4 prompts failed: "),
        "{}",
        run.summary.reason
    );
    assert_eq!(run.summary.passed, 1);
    assert_eq!(
        run.summary.failed_prompts,
        ["shot-style", "title-card", "timeline"]
    );
    // The partial output is kept as the engine wrote it.
    let first = std::fs::read_to_string(fixtures().join("valid-2-2-2.jsonl")).unwrap();
    assert_eq!(
        String::from_utf8(run.file("outputs.jsonl")).unwrap(),
        first.lines().next().unwrap().to_string() + "\n"
    );
    assert!(String::from_utf8(run.file("engine.log"))
        .unwrap()
        .contains("simulated crash"));
}

#[tokio::test]
async fn engine_hang_is_killed_at_the_timeout() {
    let started = std::time::Instant::now();
    let run = accept("hang", "valid-2-2-2.jsonl", "hang", 2).await;
    assert!(started.elapsed().as_secs() < 20);
    assert_eq!(run.code, 1);
    assert!(
        run.summary
            .reason
            .starts_with("timed out after 2s; the engine wrote no outputs file"),
        "{}",
        run.summary.reason
    );
    assert_eq!(run.summary.failed_prompts.len(), 4);
    let m = run.manifest();
    assert_eq!(
        m["engine"]["exit"],
        serde_json::json!({"kind": "timedOut", "seconds": 2})
    );
    assert!(m["timings"]["loadSeconds"].is_f64());
    assert!(
        m["timings"]["measuredSeconds"].is_null(),
        "no measured interval is invented: {}",
        m["timings"]
    );
}

#[tokio::test]
async fn truncated_outputs_fail_for_missing_eos() {
    let run = accept("truncate", "valid-2-2-2.jsonl", "truncate", 60).await;
    assert_eq!(run.code, 1);
    let verdicts = run.verdicts();
    assert!(
        verdicts
            .iter()
            .all(|v| !v.passed && v.reason.starts_with("not ended by EOS")),
        "{verdicts:?}"
    );
}
