//! Checker unit tests over the shot-planner fixtures.

use super::*;
use crate::acceptance::engine_io::parse_outputs;
use crate::acceptance::spec_file::parse_spec;

const SPEC: &str = include_str!("../../../e2e/fixtures/shot-planner/acceptance.yaml");
const VALID: &str = include_str!("../../../e2e/fixtures/shot-planner/valid-2-2-2.jsonl");

fn compiled() -> CompiledSpec {
    CompiledSpec::compile(&parse_spec(SPEC).expect("fixture parses")).expect("fixture compiles")
}

fn judge(outputs: &str) -> Vec<Verdict> {
    compiled().judge(&parse_outputs(outputs.as_bytes()))
}

/// The verdict on `id` after replacing that prompt's output line in the valid fixture.
fn verdict_with(id: &str, text: &str, finish_reason: &str) -> Verdict {
    let line =
        serde_json::json!({"id": id, "text": text, "finish_reason": finish_reason}).to_string();
    let outputs: Vec<String> = VALID
        .lines()
        .map(|l| {
            if l.contains(&format!("\"id\":\"{id}\"")) {
                line.clone()
            } else {
                l.to_string()
            }
        })
        .collect();
    let verdicts = judge(&outputs.join("\n"));
    for v in &verdicts {
        assert!(v.passed || v.id == id, "only {id} may fail: {v:?}");
    }
    verdicts
        .into_iter()
        .find(|v| v.id == id)
        .expect("a verdict per prompt")
}

fn reason_of(id: &str, text: &str) -> String {
    let v = verdict_with(id, text, "stop");
    assert!(!v.passed, "{id} should fail on {text}");
    v.reason
}

fn shots(parts: &str) -> String {
    format!("{{\"shots\":[{parts}]}}")
}

const A: &str = r#"{"prompt":"Wide","seconds":2}"#;

#[test]
fn seed_valid_2_2_2_passes() {
    let verdicts = judge(VALID);
    assert_eq!(verdicts.len(), 4);
    assert!(
        verdicts.iter().all(|v| v.passed && v.reason.is_empty()),
        "{verdicts:?}"
    );
    assert_eq!(verdicts[0].line(), "PASS shot-plan");
}

fn seed_failure(file: &str) -> Verdict {
    let verdicts = judge(file);
    assert!(verdicts[1..].iter().all(|v| v.passed), "{verdicts:?}");
    assert_eq!(verdicts[0].id, "shot-plan");
    assert!(!verdicts[0].passed);
    verdicts[0].clone()
}

#[test]
fn seed_invalid_2_2_3_fails_the_total_rule() {
    let v = seed_failure(include_str!(
        "../../../e2e/fixtures/shot-planner/invalid-2-2-3.jsonl"
    ));
    assert_eq!(
        v.reason,
        "rule \"shot seconds must total 6\" (`output.shots.map(s, s.seconds).sum() == 6`) is false"
    );
}

#[test]
fn seed_invalid_empty_prompt_fails_at_its_path() {
    let v = seed_failure(include_str!(
        "../../../e2e/fixtures/shot-planner/invalid-empty-prompt.jsonl"
    ));
    assert_eq!(
        v.reason,
        "/shots/1/prompt: \"\" is shorter than 1 character"
    );
}

#[test]
fn seed_invalid_boolean_seconds_is_not_an_integer() {
    let v = seed_failure(include_str!(
        "../../../e2e/fixtures/shot-planner/invalid-boolean-seconds.jsonl"
    ));
    assert_eq!(
        v.reason,
        "/shots/2/seconds: true is not of type \"integer\""
    );
}

#[test]
fn whitespace_only_prompt_counts_as_empty() {
    let reason = reason_of(
        "shot-plan",
        &shots(&format!(r#"{A},{{"prompt":" \t ","seconds":2}},{A}"#)),
    );
    assert_eq!(
        reason,
        "/shots/1/prompt: \" \\t \" is shorter than 1 characters once whitespace is trimmed (whitespace-only strings count as empty)"
    );
}

#[test]
fn missing_eos_fails_even_with_valid_structure() {
    let valid = serde_json::from_str::<serde_json::Value>(VALID.lines().next().unwrap()).unwrap();
    let text = valid["text"].as_str().unwrap();
    let v = verdict_with("shot-plan", text, "length");
    assert_eq!(
        v.reason,
        "not ended by EOS: finish_reason is \"length\" (the token budget ran out)"
    );
    let mut spec = parse_spec(SPEC).unwrap();
    spec.require_eos = false;
    let line =
        serde_json::json!({"id": "shot-plan", "text": text, "finish_reason": "length"}).to_string();
    let lenient = CompiledSpec::compile(&spec)
        .unwrap()
        .judge(&parse_outputs(line.as_bytes()));
    assert!(lenient[0].passed, "{lenient:?}");
}

#[test]
fn aborted_output_is_not_completed() {
    let v = verdict_with("title-card", "Title: Harbour", "abort");
    assert_eq!(v.reason, "not completed: finish_reason is \"abort\"");
}

#[test]
fn extra_key_is_rejected() {
    let reason = reason_of(
        "shot-plan",
        &shots(&format!(
            r#"{A},{A},{{"prompt":"x","seconds":2,"camera":"dolly"}}"#
        )),
    );
    assert_eq!(
        reason,
        "/shots/2: Additional properties are not allowed ('camera' was unexpected)"
    );
}

#[test]
fn missing_key_is_rejected() {
    let reason = reason_of("shot-plan", &shots(&format!(r#"{A},{{"prompt":"x"}},{A}"#)));
    assert_eq!(reason, "/shots/1: \"seconds\" is a required property");
}

#[test]
fn wrong_count_and_non_positive_seconds_are_rejected() {
    assert!(reason_of("shot-plan", &shots(&format!("{A},{A}"))).starts_with("/shots: "));
    let reason = reason_of(
        "shot-plan",
        &shots(&format!(r#"{A},{A},{{"prompt":"x","seconds":0}}"#)),
    );
    assert!(
        reason.starts_with("/shots/2/seconds: 0 is less than the minimum of 1"),
        "{reason}"
    );
}

#[test]
fn wrong_enum_value_is_rejected() {
    let reason = reason_of("shot-style", r#"{"style":"noir"}"#);
    assert!(
        reason.starts_with("/style: \"noir\" is not one of"),
        "{reason}"
    );
}

#[test]
fn regex_miss_is_rejected_and_anchored() {
    assert_eq!(
        reason_of("title-card", "title: harbour"),
        "does not match the regex \"Title: [A-Z][A-Za-z]*( [A-Za-z]+){0,5}\""
    );
    // A match inside the text is not enough: the whole output must match.
    assert!(!verdict_with("title-card", "Title: Harbour\n", "stop").passed);
}

#[test]
fn grammar_miss_is_rejected_with_position() {
    assert_eq!(
        reason_of("timeline", "0-2 wide; 2-4 closeup; 4-6 aerial"),
        "does not match the grammar at line 1, column 20: unexpected 'u'"
    );
}

#[test]
fn rule_over_a_raw_string_output() {
    assert_eq!(
        reason_of("timeline", "0-2 wide; 2-4 close; 4-5 aerial"),
        "rule \"the timeline runs from second 0 to second 6\" (`output.startsWith('0-') && output.matches('-6 [a-z]+$')`) is false"
    );
}

#[test]
fn malformed_json_names_the_parse_error() {
    let reason = reason_of("shot-plan", r#"{"shots":[{"prompt":"x","seconds":2}"#);
    assert_eq!(
        reason,
        "malformed JSON: EOF while parsing a list at line 1 column 36"
    );
}

#[test]
fn rule_violation_and_rule_error_name_the_rule() {
    let reason = reason_of(
        "shot-plan",
        &shots(&format!(r#"{A},{A},{{"prompt":"x","seconds":1}}"#)),
    );
    assert!(reason.contains("\"shot seconds must total 6\""), "{reason}");
    let mut spec = parse_spec(SPEC).unwrap();
    spec.prompts[0].rules[0].expression = "output.shots[0].duration > 0".into();
    let outputs = parse_outputs(VALID.as_bytes());
    let v = &CompiledSpec::compile(&spec).unwrap().judge(&outputs)[0];
    assert!(v.reason.starts_with("rule \"shot seconds must total 6\" (`output.shots[0].duration > 0`) could not be evaluated: "), "{v:?}");
}

#[test]
fn missing_duplicate_and_unknown_ids_are_reported() {
    let mut lines: Vec<&str> = VALID.lines().collect();
    lines.remove(1);
    let dup = lines[2];
    lines.push(dup);
    lines.push(r#"{"id":"bonus","text":"x","finish_reason":"stop"}"#);
    let verdicts = judge(&lines.join("\n"));
    let by_id = |id: &str| verdicts.iter().find(|v| v.id == id).unwrap().clone();
    assert_eq!(by_id("shot-style").reason, "no output");
    assert_eq!(
        by_id("timeline").reason,
        "2 outputs for this id (lines 3, 4)"
    );
    assert_eq!(
        by_id("bonus").reason,
        "output on line 5 has an id that is not in the acceptance spec"
    );
    assert!(by_id("shot-plan").passed);
    assert_eq!(verdicts.len(), 5);
}

#[test]
fn several_failures_are_all_reported() {
    let v = verdict_with("shot-style", r#"{"style":"noir","extra":1}"#, "length");
    assert!(v.reason.starts_with("not ended by EOS"), "{v:?}");
    assert!(v.reason.contains("'extra' was unexpected"), "{v:?}");
    assert!(v.reason.contains("\"noir\" is not one of"), "{v:?}");
}

#[test]
fn unusable_specs_name_the_prompt_and_field() {
    let err = |yaml: &str| {
        CompiledSpec::compile(&parse_spec(yaml).unwrap())
            .unwrap_err()
            .to_string()
    };
    let so = |body: &str| format!("prompts:\n- id: p\n  prompt: x\n  structuredOutput: {body}\n");
    assert!(err(&so("{regex: '('}")).starts_with("prompts[0] (id \"p\").structuredOutput.regex: "));
    assert!(err(&so("{grammar: 'root ::= x'}")).contains(
        ".structuredOutput.grammar: line 1, column 10: rule \"x\" is used but not defined"
    ));
    assert!(
        err(&so("{json: {type: 12}}")).contains(".structuredOutput.json: not a usable JSON Schema")
    );
    assert!(err(&so("{regex: a, grammar: 'root ::= \"a\"'}"))
        .ends_with("set exactly one of json, regex or grammar"));
    let bad_rule = format!(
        "{}  rules: [{{expression: 'output ==', message: m}}]\n",
        so("{regex: a}")
    );
    assert!(err(&bad_rule).starts_with("prompts[0] (id \"p\").rules[0].expression: "));
    let dup = "prompts:\n- {id: p, prompt: x, structuredOutput: {regex: a}}\n- {id: p, prompt: y, structuredOutput: {regex: b}}\n";
    assert_eq!(
        err(dup),
        "prompts[1] (id \"p\"): id already used by prompts[0]"
    );
    assert!(err("promptsFrom: {name: cm, key: prompts.yaml}\n")
        .starts_with("promptsFrom (ConfigMap \"cm\""));
    // Sampling out of bounds (prompts from a ConfigMap reach the judge unchecked by the CRD).
    let sampled =
        "prompts:\n- {id: p, prompt: x, sampling: {topP: 0}, structuredOutput: {regex: a}}\n";
    assert!(err(sampled)
        .starts_with("prompts[0] (id \"p\").sampling.topP is 0; it must be greater than 0"));
    let section =
        "sampling: {seed: -1}\nprompts:\n- {id: p, prompt: x, structuredOutput: {regex: a}}\n";
    assert!(err(section).starts_with("sampling.seed is -1; it must be 0 or more"));
}

#[test]
fn seed_total_reached_by_integer_wrap_around_fails() {
    let max = i64::MAX;
    for parts in [
        format!(r#"{{"prompt":"A","seconds":{max}}},{{"prompt":"B","seconds":{max}}},{{"prompt":"C","seconds":8}}"#),
        // Above i64::MAX the seconds are unsigned; two of 2^63 wrap to 0.
        r#"{"prompt":"A","seconds":9223372036854775808},{"prompt":"B","seconds":9223372036854775808},{"prompt":"C","seconds":6}"#.to_string(),
    ] {
        let reason = reason_of("shot-plan", &shots(&parts));
        assert!(reason.starts_with("rule \"shot seconds must total 6\""), "{reason}");
        assert!(
            reason.contains("overflow") || reason.contains("Overflow") || reason.contains("cannot add"),
            "{reason}"
        );
    }
}

#[test]
fn integer_bounds_hold_beyond_64_bits() {
    let schema_of = |bounds: &str| {
        let yaml = format!(
            "prompts:\n- id: p\n  prompt: x\n  structuredOutput: {{json: {{type: integer, {bounds}}}}}\n"
        );
        CompiledSpec::compile(&parse_spec(&yaml).unwrap()).unwrap()
    };
    let passes = |spec: &CompiledSpec, text: &str| {
        let line =
            serde_json::json!({"id": "p", "text": text, "finish_reason": "stop"}).to_string();
        spec.judge(&parse_outputs(line.as_bytes()))[0].passed
    };
    let positive = schema_of("minimum: 1, maximum: 10");
    for text in [
        "18446744073709551616", // u64::MAX + 1
        "18446744073709551615", // u64::MAX
        "9223372036854775808",  // i64::MAX + 1
        "-9223372036854775808", // i64::MIN
        "-9223372036854775809", // i64::MIN - 1
        "1e400",                // beyond f64
        "true",
    ] {
        assert!(!passes(&positive, text), "{text} is outside 1..=10");
    }
    assert!(passes(&positive, "10"));
    let edge = schema_of("maximum: 9223372036854775807");
    assert!(passes(&edge, "9223372036854775807"));
    assert!(!passes(&edge, "9223372036854775808"));
    let exact = schema_of("maximum: 9007199254740992");
    assert!(
        !passes(&exact, "9007199254740993"),
        "no rounding through f64"
    );
}

#[test]
fn a_number_written_with_a_fraction_or_an_exponent_is_not_an_integer() {
    // The seed's check is `type(shot["seconds"]) is not int`; JSON Schema alone would take these.
    let spec = CompiledSpec::compile(
        &parse_spec(
            "prompts:\n- id: p\n  prompt: x\n  structuredOutput:\n    json:\n      type: object\n      properties:\n        shots:\n          type: array\n          items:\n            type: object\n            properties:\n              prompt: {type: string}\n              seconds: {type: integer, minimum: 1}\n",
        )
        .unwrap(),
    )
    .unwrap();
    let judge_text = |text: &str| {
        let line =
            serde_json::json!({"id": "p", "text": text, "finish_reason": "stop"}).to_string();
        spec.judge(&parse_outputs(line.as_bytes())).remove(0)
    };
    let v = judge_text(
        r#"{"shots":[{"prompt":"a","seconds":1.0},{"prompt":"b","seconds":2e0},{"prompt":"c","seconds":3}]}"#,
    );
    assert!(!v.passed);
    assert_eq!(
        v.reason,
        "/shots/0/seconds: 1.0 is not of type \"integer\" (written with a fraction or an exponent, or beyond 64 bits: an integer must be written as a whole number); \
         /shots/1/seconds: 2.0 is not of type \"integer\" (written with a fraction or an exponent, or beyond 64 bits: an integer must be written as a whole number)"
    );
    assert!(
        judge_text(r#"{"shots":[{"prompt":"a","seconds":1},{"prompt":"b","seconds":2}]}"#).passed
    );
    // `number` still takes both spellings; the other types are unchanged.
    let v = judge_text(r#"{"shots":[{"prompt":1.5,"seconds":1}]}"#);
    assert_eq!(v.reason, "/shots/0/prompt: 1.5 is not of type \"string\"");
    let number = CompiledSpec::compile(
        &parse_spec("prompts:\n- id: p\n  prompt: x\n  structuredOutput: {json: {type: [number, \"null\"]}}\n")
            .unwrap(),
    )
    .unwrap();
    for (text, passed) in [("2.0", true), ("2", true), ("null", true), ("\"2\"", false)] {
        let line =
            serde_json::json!({"id": "p", "text": text, "finish_reason": "stop"}).to_string();
        assert_eq!(
            number.judge(&parse_outputs(line.as_bytes()))[0].passed,
            passed,
            "{text}"
        );
    }
}

#[test]
fn seed_invalid_fraction_seconds_is_not_an_integer() {
    let v = seed_failure(include_str!(
        "../../../e2e/fixtures/shot-planner/invalid-fraction-seconds.jsonl"
    ));
    assert!(
        v.reason.starts_with(
            "/shots/0/seconds: 2.0 is not of type \"integer\" (written with a fraction"
        ),
        "{}",
        v.reason
    );
    assert!(
        !v.reason.contains("rule"),
        "the schema refuses it before any rule runs: {}",
        v.reason
    );
}
