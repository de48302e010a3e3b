//! `deepinfer-operator check` as a user runs it: verdict lines and exit codes.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_deepinfer-operator");

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/fixtures/shot-planner")
        .join(name)
        .display()
        .to_string()
}

fn check(acceptance: &str, outputs: &str) -> (i32, String, String) {
    let out = Command::new(BIN)
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
