//! `deepinfer-runner check` as a user runs it: verdict lines and exit codes; and
//! `deepinfer-operator check`, which hands over to the runner beside it.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_deepinfer-runner");
const OPERATOR: &str = env!("CARGO_BIN_EXE_deepinfer-operator");

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/fixtures/shot-planner")
        .join(name)
        .display()
        .to_string()
}

fn check(acceptance: &str, outputs: &str) -> (i32, String, String) {
    check_with(BIN, acceptance, outputs)
}

fn check_with(bin: &str, acceptance: &str, outputs: &str) -> (i32, String, String) {
    let out = Command::new(bin)
        .args(["check", "--acceptance", acceptance, "--outputs", outputs])
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn passing_outputs_exit_zero_with_one_line_per_prompt() {
    let (code, stdout, _) = check(&fixture("acceptance.yaml"), &fixture("valid-2-2-2.jsonl"));
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        "PASS shot-plan\nPASS shot-style\nPASS title-card\nPASS timeline\n"
    );
}

#[test]
fn failing_outputs_exit_one_and_say_why() {
    let (code, stdout, _) = check(
        &fixture("acceptance.yaml"),
        &fixture("invalid-boolean-seconds.jsonl"),
    );
    assert_eq!(code, 1);
    assert!(
        stdout.starts_with(
            "FAIL shot-plan: /shots/2/seconds: true is not of type \"integer\"\nPASS shot-style\n"
        ),
        "{stdout}"
    );
}

#[test]
fn bad_input_exits_two_naming_file_line_and_field() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("check-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let outputs = dir.join("bad.jsonl");
    std::fs::write(&outputs, "{\"id\":\"shot-plan\",\"text\":\"{}\",\"finish_reason\":\"stop\"}\n{\"id\":\"x\",\"finish_reason\":\"stop\"}\n").unwrap();
    let (code, stdout, stderr) = check(&fixture("acceptance.yaml"), outputs.to_str().unwrap());
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("bad.jsonl line 2: missing field `text`"),
        "{stderr}"
    );

    let spec = dir.join("bad.yaml");
    std::fs::write(
        &spec,
        "prompts:\n- id: p\n  prompt: x\n  structuredOutput: {grammar: 'root ::= item'}\n",
    )
    .unwrap();
    let (code, _, stderr) = check(spec.to_str().unwrap(), &fixture("valid-2-2-2.jsonl"));
    assert_eq!(code, 2);
    assert!(
        stderr.contains("prompts[0] (id \"p\").structuredOutput.grammar: line 1, column 10"),
        "{stderr}"
    );

    let (code, _, stderr) = check(&fixture("missing.yaml"), &fixture("valid-2-2-2.jsonl"));
    assert_eq!(code, 2);
    assert!(stderr.contains("missing.yaml"), "{stderr}");
}

#[test]
fn the_sheet_of_kept_evidence_is_printed_as_a_table_and_bad_evidence_is_named() {
    use deepinfer_operator::acceptance::{self, engine_io, manifest};
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("check-sheet");
    std::fs::create_dir_all(&dir).unwrap();
    let (spec, compiled) =
        acceptance::load_spec(Path::new(&fixture("acceptance.yaml")), None).unwrap();
    let outputs = std::fs::read(fixture("valid-2-2-2.jsonl")).unwrap();
    let parsed = engine_io::parse_outputs(&outputs);
    let verdicts = compiled.judge(&parsed);
    let ids: Vec<String> = compiled.prompt_ids().map(str::to_string).collect();
    let identity = manifest::RunIdentity {
        deployment: Some("plan".into()),
        revision: "r1".into(),
        layout: deepinfer_operator::api::ParallelSpec {
            tensor: 8,
            ..Default::default()
        },
        requested_tokens: spec
            .prompts
            .iter()
            .filter_map(|p| Some((p.id.clone(), p.max_tokens?)))
            .collect(),
        ..Default::default()
    };
    let facts = manifest::RunFacts {
        result: manifest::AcceptanceResult::Passed,
        reason: "all 4 prompts passed".into(),
        devices: Default::default(),
        engine: manifest::EngineRecord {
            command: vec![],
            argv: None,
            env: None,
            exit: acceptance::engine::EngineExit::Exited { code: 0 },
            timeout_seconds: 60,
        },
        timings: acceptance::engine::Timings::from_markers(
            [
                ("loaded".to_string(), 20.0),
                ("warmup_done".to_string(), 25.0),
                ("generation_done".to_string(), 27.0),
            ]
            .into(),
            28.0,
            true,
        ),
        serving: None,
    };
    let m = manifest::build_manifest(&identity, facts, &ids, &parsed, &verdicts);
    let kept = dir.join("manifest.json");
    std::fs::write(&kept, serde_json::to_vec(&m).unwrap()).unwrap();

    let out = Command::new(BIN)
        .args(["check", "--sheet", kept.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let sheet = String::from_utf8(out.stdout).unwrap();
    assert!(
        sheet.contains(
            "Phases:    load 20.000 s | warm-up 5.000 s | measured 2.000 s | total 28.000 s"
        ),
        "{sheet}"
    );
    assert!(
        sheet.contains("Capacity:  42 output tokens/s, 2 prompts/s over the measured interval | per-request completion time: mean 0.270 s, max 0.580 s"),
        "{sheet}"
    );
    assert!(
        sheet
            .lines()
            .any(|l| l.split(" | ").map(str::trim).collect::<Vec<_>>()
                == [
                    "total (4 prompts)",
                    "4 passed",
                    "203",
                    "24",
                    "368",
                    "84",
                    "53",
                    "peak 4",
                    "",
                    "max 0.580 s"
                ]),
        "{sheet}"
    );

    let out = Command::new(BIN)
        .args(["check", "--sheet", fixture("acceptance.yaml").as_str()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("acceptance.yaml: not an acceptance manifest"),
        "{stderr}"
    );

    let out = Command::new(BIN).args(["check"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "check needs --acceptance or --sheet"
    );
}

#[test]
fn the_operator_binary_hands_a_runner_subcommand_over_to_the_runner_beside_it() {
    let (acceptance, outputs) = (fixture("acceptance.yaml"), fixture("valid-2-2-2.jsonl"));
    assert_eq!(
        check_with(OPERATOR, &acceptance, &outputs),
        check(&acceptance, &outputs),
        "the same verdict, exit code and output as the runner's"
    );

    // Without the runner beside it: a clear error naming the runner and where it was looked for.
    let alone = std::env::temp_dir().join(format!("operator-alone-{}", std::process::id()));
    std::fs::create_dir_all(&alone).unwrap();
    let copy = alone.join("deepinfer-operator");
    std::fs::copy(OPERATOR, &copy).unwrap();
    let (code, stdout, stderr) = check_with(copy.to_str().unwrap(), &acceptance, &outputs);
    let _ = std::fs::remove_dir_all(&alone);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(
        stderr.contains("`check` is a subcommand of deepinfer-runner")
            && stderr.contains(&alone.join("deepinfer-runner").display().to_string()),
        "{stderr}"
    );

    // The operator's own subcommands stay its own.
    let out = Command::new(OPERATOR).args(["crd"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("kind: CustomResourceDefinition"));
}
