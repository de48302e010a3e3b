//! One table of cases (`tests/common/validation_cases.rs`), judged here twice: by the committed
//! CRD evaluated in process (OpenAPI schema bounds plus every `x-kubernetes-validations` CEL rule,
//! with kube's CEL support) and by the operator's validate stage. `e2e/tests/validation_server.rs`
//! judges the same rows a third time, on a real API server. All must agree on every case, and all
//! must name the offending field.

use std::collections::BTreeSet;

use kube::core::cel::{self, Validator};
use serde_json::{json, Value};

#[path = "common/validation_cases.rs"]
mod table;
use table::*;

/// What a modern API server reports: structural schema errors first (it stops there, as the
/// API server does), then every CEL rule. Each entry is `path: message`.
fn api_server_errors(schema: &Value, object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check_openapi(schema, object, "", &mut errors);
    if !errors.is_empty() {
        return errors;
    }
    if let Err(failures) = Validator::new().validate(schema, object, None) {
        for failure in failures.iter() {
            assert!(
                failure.kind == cel::ErrorKind::ValidationFailure,
                "CEL rule {:?} did not evaluate to a verdict (a user would see this error): {failure}",
                failure.rule
            );
            errors.push(format!("{}: {}", failure.field_path, failure.message));
        }
    }
    errors
}

/// The OpenAPI checks an API server applies before CEL (types, enums, required, bounds).
fn check_openapi(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let mut fail = |what: String| errors.push(format!("{path}: {what}"));
    if value.is_null() && schema["nullable"] == json!(true) {
        return;
    }
    if schema["x-kubernetes-int-or-string"] == json!(true) {
        return;
    }
    let type_ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        fail(format!("must be of type {}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            fail(format!("must be one of {allowed:?}"));
        }
    }
    let bound = |key: &str| schema[key].as_f64();
    if let Some(n) = value.as_f64() {
        if bound("minimum").is_some_and(|min| n < min)
            || bound("maximum").is_some_and(|max| n > max)
        {
            fail(format!("{n} is out of range"));
        }
    }
    let size = match value {
        Value::String(s) => Some(s.chars().count() as f64),
        Value::Array(a) => Some(a.len() as f64),
        _ => None,
    };
    if let Some(size) = size {
        let (min, max) = if value.is_string() {
            ("minLength", "maxLength")
        } else {
            ("minItems", "maxItems")
        };
        if bound(min).is_some_and(|min| size < min) || bound(max).is_some_and(|max| size > max) {
            fail(format!("has size {size}, outside {min}/{max}"));
        }
    }
    if let Some(object) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let key = required.as_str().unwrap();
            if !object.contains_key(key) {
                errors.push(format!("{}: required", join(path, key)));
            }
        }
        for (key, child) in object {
            if let Some(child_schema) = schema["properties"].get(key) {
                check_openapi(child_schema, child, &join(path, key), errors);
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            check_openapi(items, item, &format!("{path}[{i}]"), errors);
        }
    }
}

#[test]
fn validation_table_cel_and_operator_agree() {
    let schema = object_schema(&crd());
    let cases = cases();
    let names: BTreeSet<_> = cases.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), cases.len(), "case names are unique");

    let mut failures = Vec::new();
    for case in &cases {
        let spec = row_spec(case);
        let api = api_server_errors(&schema, &object(spec.clone()));
        let operator = operator_verdict(&spec);
        // Shown with `--nocapture`: what each side said.
        println!(
            "{}\n  CEL in process: {api:?}\n  operator:       {}",
            case.name,
            operator.describe()
        );
        failures.extend(disagreements(case, &api, &operator));
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn name_length_cel_and_operator_agree() {
    let schema = object_schema(&crd());
    for case in name_cases() {
        let what = format!(
            "a {}-character name with {} acceptance pods per group",
            case.name.len(),
            case.spec["roles"][1]["parallel"]["data"]
        );
        let api = api_server_errors(&schema, &named_object(&case.name, case.spec.clone()));
        let operator = operator_name_verdict(&case);
        assert_eq!(api.is_empty(), case.valid, "API server on {what}: {api:?}");
        assert_eq!(
            operator.is_ok(),
            case.valid,
            "operator on {what}: {operator:?}"
        );
        if !case.valid {
            assert!(api.iter().all(|e| e.contains("metadata.name")), "{api:?}");
            let errors = operator.unwrap_err();
            assert!(
                errors
                    .iter()
                    .any(|(field, message)| field == "metadata.name"
                        && message.contains("metadata.name")),
                "{what}: {errors:?}"
            );
        }
    }
}

#[test]
fn validation_table_covers_every_cel_rule() {
    // Each rule in the CRD must be violated by at least one case, so none is untested.
    let schema = object_schema(&crd());
    let mut rules = BTreeSet::new();
    collect_rules(&schema, &mut rules);
    let spec_cases = cases().into_iter().map(|case| {
        let mut spec = (case.base)();
        (case.mutate)(&mut spec);
        object(spec)
    });
    let name_cases = name_cases()
        .into_iter()
        .map(|case| named_object(&case.name, case.spec));
    let mut violated = BTreeSet::new();
    for object in spec_cases.chain(name_cases) {
        if let Err(failures) = Validator::new().validate(&schema, &object, None) {
            violated.extend(failures.iter().map(|f| f.rule.clone()));
        }
    }
    let untested: Vec<_> = rules.difference(&violated).collect();
    assert!(
        untested.is_empty(),
        "CEL rules no case violates: {untested:#?}"
    );
}

#[test]
fn validation_rules_compile_and_stay_within_cost_bounds() {
    let schema = object_schema(&crd());
    let mut problems = Vec::new();
    check_rule_nodes(&schema, "", &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn collect_rules(schema: &Value, rules: &mut BTreeSet<String>) {
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        rules.insert(rule["rule"].as_str().unwrap().to_owned());
    }
    for child in children(schema) {
        collect_rules(child, rules);
    }
}

fn children(schema: &Value) -> Vec<&Value> {
    let mut out: Vec<&Value> = schema["properties"]
        .as_object()
        .into_iter()
        .flat_map(|p| p.values())
        .collect();
    out.extend(schema.get("items"));
    out.extend(schema.get("additionalProperties").filter(|a| a.is_object()));
    out
}

/// Every rule must compile, carry a message that names a `spec.` field (or `metadata.name`, the
/// one metadata field a rule may read), and have the bounds the Kubernetes cost estimator needs:
/// `maxLength` on a string it matches, `maxItems` on a list it iterates (itself or a direct
/// property).
fn check_rule_nodes(schema: &Value, path: &str, problems: &mut Vec<String>) {
    let compiled = cel::compile_schema(schema);
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap();
        let at = format!("{path}: {text}");
        if let Err(err) = cel::cel::Program::compile(text) {
            problems.push(format!("{at}: does not compile: {err}"));
            continue;
        }
        // Cost and bounds only: kube-cel's scope check mistakes macro variables (`r` in
        // `self.all(r, ..)`) for free ones; every rule is evaluated by the table instead.
        for warning in cel::estimate_rule_cost(text, &compiled) {
            problems.push(format!("{at}: {}", warning.message));
        }
        if !rule["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("spec.") || m.starts_with("metadata.name "))
        {
            problems.push(format!(
                "{at}: message does not start with the field it is about"
            ));
        }
        if text.contains(".matches(")
            && schema["type"] == "string"
            && schema.get("maxLength").is_none()
        {
            problems.push(format!("{at}: string without maxLength"));
        }
        let iterates = [".all(", ".exists(", ".exists_one(", ".filter(", ".map("]
            .iter()
            .any(|m| text.contains(m));
        if iterates {
            let mut lists: Vec<&Value> = vec![schema];
            lists.extend(
                schema["properties"]
                    .as_object()
                    .into_iter()
                    .flat_map(|p| p.values()),
            );
            for list in lists.into_iter().filter(|s| s["type"] == "array") {
                if list.get("maxItems").is_none() {
                    problems.push(format!("{at}: iterates a list without maxItems"));
                }
            }
        }
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (key, child) in properties {
            check_rule_nodes(child, &join(path, key), problems);
        }
    }
    if let Some(items) = schema.get("items") {
        check_rule_nodes(items, &format!("{path}[]"), problems);
    }
}

#[test]
fn validation_field_names_are_generic_for_cel() {
    assert_eq!(
        generic("spec.roles[12].parallel.expert"),
        "spec.roles[].parallel.expert"
    );
    assert_eq!(
        field_and_parent("spec.roles[1].name"),
        ["spec.roles[].name", "spec.roles"]
    );
    assert_eq!(
        field_and_parent("spec.model.source"),
        ["spec.model.source", "spec.model"]
    );
    assert!(names_field(
        "spec.roles[0].parallel: spec.roles[].parallel: tensor, pipeline, data and expert must each be at least 1",
        "spec.roles[0].parallel.tensor"
    ));
    assert!(names_field(
        "spec.roles: spec.roles[].parallel: the world size",
        "spec.roles[0].parallel"
    ));
    // A rule reporting at `spec` does not name a field of a role, whatever its message says.
    assert!(!names_field(
        "spec: spec.roles[].parallel: the world size",
        "spec.roles[0].parallel"
    ));
    assert!(!names_field(
        "spec.roles[0].parallelism: x",
        "spec.roles[0].parallel"
    ));
}
