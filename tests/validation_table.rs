//! One table of cases, judged twice: by the committed CRD as a modern API server would (OpenAPI
//! schema bounds plus every `x-kubernetes-validations` CEL rule, evaluated with kube's CEL
//! support), and by the operator's validate stage (which is all an old API server such as v1.20
//! leaves). Both must agree on every case, and both must name the offending field.

use std::collections::BTreeSet;

use deepinfer_operator::api::DeepInferDeploymentSpec;
use deepinfer_operator::controller::validate::{
    validate_name, validate_spec, DeviceLimits, MAX_NAME_LENGTH,
};
use kube::core::cel::{self, Validator};
use serde_json::{json, Value};

const CRD_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/crds/deepinfer.io_deepinferdeployments.yaml"
);

/// What both validators must conclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Accepted.
    Valid,
    /// Rejected by a rule; the operator names exactly this field (with indices), the API server
    /// names it or an enclosing field (indices written `[]`, as CEL rules on lists cannot know them).
    Invalid(&'static str),
    /// Rejected by the schema's types or enums; the operator's typed decode refuses it too.
    Malformed(&'static str),
}

struct Case {
    name: &'static str,
    base: fn() -> Value,
    mutate: fn(&mut Value),
    expect: Expect,
}

fn nvidia() -> Value {
    json!({
        "model": {
            "name": "deepseek-ai/DeepSeek-V4.1-Flash-1017",
            "license": "mit",
            "source": {"hub": {"revision": "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d", "claimName": "models"}}
        },
        "runtime": {
            "image": format!("registry.example.com/deepinfer/runtime-cuda13@sha256:{}", "ab12".repeat(16)),
            "commit": "9e8d7c6"
        },
        "accelerator": {"type": "NVIDIA", "product": "NVIDIA-H200", "devicesPerPod": 8},
        "roles": [
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 2, "parallel": {"tensor": 8, "data": 2, "expert": 16}}
        ],
        "acceptance": {
            "prompts": [
                {
                    "id": "shot-plan",
                    "prompt": "Plan three shots of two seconds each.",
                    "structuredOutput": {"json": {"type": "array", "minItems": 3, "maxItems": 3}}
                },
                {"id": "yes-no", "prompt": "Answer yes or no.", "structuredOutput": {"regex": "^(yes|no)$"}}
            ]
        }
    })
}

fn ascend() -> Value {
    json!({
        "model": {
            "name": "deepseek-ai/DeepSeek-V4.1-Flash-1017",
            "license": "mit",
            "source": {"volume": {"claimName": "checkpoints", "path": "flash-1017"}}
        },
        "runtime": {
            "image": format!("registry.example.com/deepinfer/runtime-cann92@sha256:{}", "0f".repeat(32)),
            "commit": "0123456789abcdef0123456789abcdef01234567"
        },
        "accelerator": {"type": "Ascend", "devicesPerPod": 16, "scaleUpDomainKey": "huawei.com/super-pod-id"},
        "roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 16, "pipeline": 2, "expert": 32}}],
        "acceptance": {"promptsFrom": {"name": "acceptance-prompts", "key": "prompts.yaml"}}
    })
}

fn cases() -> Vec<Case> {
    use Expect::*;
    macro_rules! case {
        ($name:literal, $base:ident, |$s:ident| $mutate:expr, $expect:expr) => {
            Case {
                name: $name,
                base: $base,
                mutate: |$s: &mut Value| $mutate,
                expect: $expect,
            }
        };
    }
    vec![
        case!("valid NVIDIA", nvidia, |_s| (), Valid),
        case!("valid Ascend", ascend, |_s| (), Valid),
        case!(
            "NVIDIA at its node maximum, default devicesPerPod",
            nvidia,
            |s| {
                s["accelerator"]
                    .as_object_mut()
                    .unwrap()
                    .remove("devicesPerPod");
            },
            Valid
        ),
        case!(
            "zero replicas",
            nvidia,
            |s| s["roles"][1]["replicas"] = json!(0),
            Valid
        ),
        case!(
            "image tag without digest",
            nvidia,
            |s| {
                s["runtime"]["image"] = json!("registry.example.com/deepinfer/runtime-cuda13:v1.0");
            },
            Invalid("spec.runtime.image")
        ),
        case!(
            "image with short digest",
            nvidia,
            |s| {
                s["runtime"]["image"] =
                    json!("registry.example.com/deepinfer/runtime-cuda13@sha256:ab12cd34");
            },
            Invalid("spec.runtime.image")
        ),
        case!(
            "image digest in upper case",
            nvidia,
            |s| {
                s["runtime"]["image"] = json!(format!(
                    "r.example.com/runtime@sha256:{}",
                    "AB12".repeat(16)
                ));
            },
            Invalid("spec.runtime.image")
        ),
        case!(
            "runtime commit not hex",
            nvidia,
            |s| s["runtime"]["commit"] = json!("v1.0.0"),
            Invalid("spec.runtime.commit")
        ),
        case!(
            "revision is a branch name",
            nvidia,
            |s| {
                s["model"]["source"]["hub"]["revision"] = json!("main");
            },
            Invalid("spec.model.source.hub.revision")
        ),
        case!(
            "revision is a short sha",
            nvidia,
            |s| {
                s["model"]["source"]["hub"]["revision"] = json!("3f1c2a9");
            },
            Invalid("spec.model.source.hub.revision")
        ),
        case!(
            "revision in upper case",
            nvidia,
            |s| {
                s["model"]["source"]["hub"]["revision"] =
                    json!("3F1C2A9D8E7B6C5D4E3F2A1B0C9D8E7F6A5B4C3D");
            },
            Invalid("spec.model.source.hub.revision")
        ),
        case!(
            "no source",
            nvidia,
            |s| s["model"]["source"] = json!({}),
            Invalid("spec.model.source")
        ),
        case!(
            "two sources",
            nvidia,
            |s| {
                s["model"]["source"]["volume"] =
                    json!({"claimName": "checkpoints", "path": "model"});
            },
            Invalid("spec.model.source")
        ),
        case!(
            "devicesPerPod does not divide the world size",
            nvidia,
            |s| {
                s["accelerator"]["devicesPerPod"] = json!(6);
            },
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "world size smaller than devicesPerPod",
            nvidia,
            |s| {
                s["roles"][0]["parallel"]["tensor"] = json!(4);
            },
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "world size smaller than the default devicesPerPod",
            ascend,
            |s| {
                s["accelerator"]
                    .as_object_mut()
                    .unwrap()
                    .remove("devicesPerPod");
                s["roles"][0]["parallel"] = json!({"tensor": 4, "expert": 4});
            },
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "expert does not divide the world size",
            nvidia,
            |s| {
                s["roles"][1]["parallel"]["expert"] = json!(3);
            },
            Invalid("spec.roles[1].parallel.expert")
        ),
        case!(
            "expert larger than the world size",
            ascend,
            |s| {
                s["roles"][0]["parallel"]["expert"] = json!(64);
            },
            Invalid("spec.roles[0].parallel.expert")
        ),
        case!(
            "duplicated role",
            nvidia,
            |s| s["roles"][1]["name"] = json!("prefill"),
            Invalid("spec.roles[1].name")
        ),
        case!(
            "unknown role",
            nvidia,
            |s| s["roles"][1]["name"] = json!("router"),
            Invalid("spec.roles[1].name")
        ),
        case!(
            "no roles",
            nvidia,
            |s| s["roles"] = json!([]),
            Invalid("spec.roles")
        ),
        case!(
            "negative replicas",
            nvidia,
            |s| s["roles"][1]["replicas"] = json!(-1),
            Invalid("spec.roles[1].replicas")
        ),
        case!(
            "NVIDIA devicesPerPod above one node",
            nvidia,
            |s| {
                s["accelerator"]["devicesPerPod"] = json!(16);
                s["roles"][0]["parallel"]["tensor"] = json!(16);
                s["roles"][1]["parallel"]["tensor"] = json!(16);
            },
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "Ascend devicesPerPod above one node",
            ascend,
            |s| {
                s["accelerator"]["devicesPerPod"] = json!(32);
            },
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "devicesPerPod 0",
            nvidia,
            |s| s["accelerator"]["devicesPerPod"] = json!(0),
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "devicesPerPod negative",
            ascend,
            |s| s["accelerator"]["devicesPerPod"] = json!(-16),
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "tensor degree 0",
            nvidia,
            |s| s["roles"][0]["parallel"]["tensor"] = json!(0),
            Invalid("spec.roles[0].parallel.tensor")
        ),
        case!(
            "expert degree 0",
            nvidia,
            |s| s["roles"][1]["parallel"]["expert"] = json!(0),
            Invalid("spec.roles[1].parallel.expert")
        ),
        case!(
            "data degree above the maximum",
            nvidia,
            |s| s["roles"][1]["parallel"]["data"] = json!(2048),
            Invalid("spec.roles[1].parallel.data")
        ),
        case!(
            "acceptance with no prompts",
            nvidia,
            |s| s["acceptance"]["prompts"] = json!([]),
            Invalid("spec.acceptance.prompts")
        ),
        case!(
            "duplicated prompt ids",
            nvidia,
            |s| s["acceptance"]["prompts"][1]["id"] = json!("shot-plan"),
            Invalid("spec.acceptance.prompts[1].id")
        ),
        case!(
            "structured output with two kinds",
            nvidia,
            |s| {
                s["acceptance"]["prompts"][0]["structuredOutput"]["regex"] = json!("^\\[.*\\]$");
            },
            Invalid("spec.acceptance.prompts[0].structuredOutput")
        ),
        case!(
            "structured output with no kind",
            nvidia,
            |s| {
                s["acceptance"]["prompts"][1]["structuredOutput"] = json!({});
            },
            Invalid("spec.acceptance.prompts[1].structuredOutput")
        ),
        case!(
            "structured output json that is not a schema object",
            nvidia,
            |s| {
                s["acceptance"]["prompts"][0]["structuredOutput"]["json"] =
                    json!("an array of three shots");
            },
            Invalid("spec.acceptance.prompts[0].structuredOutput.json")
        ),
        case!(
            "acceptance timeout 0",
            nvidia,
            |s| s["acceptance"]["timeoutSeconds"] = json!(0),
            Invalid("spec.acceptance.timeoutSeconds")
        ),
        case!(
            "empty licence",
            nvidia,
            |s| s["model"]["license"] = json!(""),
            Invalid("spec.model.license")
        ),
        case!(
            "unknown accelerator type",
            nvidia,
            |s| s["accelerator"]["type"] = json!("Intel"),
            Malformed("spec.accelerator.type")
        ),
        case!(
            "replicas as a string",
            nvidia,
            |s| s["roles"][0]["replicas"] = json!("2"),
            Malformed("spec.roles[0].replicas")
        ),
    ]
}

fn crd() -> Value {
    let text =
        std::fs::read_to_string(CRD_PATH).expect("the committed CRD exists; run `make crds`");
    serde_yaml::from_str(&text).expect("the committed CRD is YAML")
}

fn object_schema(crd: &Value) -> Value {
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn object(spec: Value) -> Value {
    named_object("flash", spec)
}

fn named_object(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": name, "namespace": "serving"},
        "spec": spec,
    })
}

/// Names at and around the bound, with whether both validators must accept them.
fn name_cases() -> Vec<(String, bool)> {
    vec![
        ("a".repeat(MAX_NAME_LENGTH), true),
        ("a".repeat(MAX_NAME_LENGTH + 1), false),
        (
            "flash-h200-prefill-decode-long-name-over-the-bound".into(),
            false,
        ),
        ("flash".into(), true),
    ]
}

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

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// `spec.roles[1].parallel.expert` → `spec.roles[].parallel.expert`.
fn generic(field: &str) -> String {
    let mut out = String::new();
    let mut in_index = false;
    for c in field.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// The field and the field enclosing it (a rule on a list or an object can only name that), in
/// generic form: `spec.roles[1].name` → `spec.roles[].name`, `spec.roles`.
fn field_and_parent(field: &str) -> [String; 2] {
    let field = generic(field);
    let parent = field
        .rsplit_once('.')
        .map_or(field.as_str(), |(parent, _)| parent);
    let parent = parent.strip_suffix("[]").unwrap_or(parent).to_owned();
    [field, parent]
}

/// Whether an API server error (`path: message`) is about `field`: its path is the field, or its
/// message starts with the field or the field's parent.
fn names_field(error: &str, field: &str) -> bool {
    let (path, message) = error.split_once(": ").unwrap_or(("", error));
    let [exact, parent] = field_and_parent(field);
    generic(path) == exact
        || [exact, parent].iter().any(|name| {
            message
                .strip_prefix(name.as_str())
                .is_some_and(|rest| rest.starts_with([' ', ':']))
        })
}

enum Operator {
    Accepted,
    Rejected(Vec<(String, String)>),
    Undecodable(String),
}

impl Operator {
    fn describe(&self) -> String {
        match self {
            Self::Accepted => "accepted".into(),
            Self::Rejected(errors) => {
                format!("{:?}", errors.iter().map(|(_, m)| m).collect::<Vec<_>>())
            }
            Self::Undecodable(err) => format!("cannot decode: {err}"),
        }
    }
}

fn operator_verdict(spec: &Value) -> Operator {
    match serde_json::from_value::<DeepInferDeploymentSpec>(spec.clone()) {
        Err(err) => Operator::Undecodable(err.to_string()),
        Ok(spec) => match validate_spec(&spec, &DeviceLimits::default()) {
            Ok(()) => Operator::Accepted,
            Err(errors) => {
                Operator::Rejected(errors.into_iter().map(|e| (e.field, e.message)).collect())
            }
        },
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
        let mut spec = (case.base)();
        (case.mutate)(&mut spec);
        let api = api_server_errors(&schema, &object(spec.clone()));
        let operator = operator_verdict(&spec);
        // Shown with `--nocapture`: what each side said.
        println!(
            "{}\n  API server: {api:?}\n  operator:   {}",
            case.name,
            operator.describe()
        );
        let mut problem = |what: String| failures.push(format!("[{}] {what}", case.name));

        match case.expect {
            Expect::Valid => {
                if !api.is_empty() {
                    problem(format!("API server rejects a valid spec: {api:#?}"));
                }
                match &operator {
                    Operator::Accepted => {}
                    Operator::Rejected(errors) => {
                        problem(format!("operator rejects a valid spec: {errors:#?}"))
                    }
                    Operator::Undecodable(err) => {
                        problem(format!("operator cannot decode a valid spec: {err}"))
                    }
                }
            }
            Expect::Invalid(field) | Expect::Malformed(field) => {
                if api.is_empty() {
                    problem("API server (OpenAPI + CEL) accepts it".into());
                } else if !api.iter().any(|e| names_field(e, field)) {
                    problem(format!("no API server error names {field}: {api:#?}"));
                }
                match (&operator, case.expect) {
                    (Operator::Accepted, _) => problem("operator accepts it".into()),
                    (Operator::Rejected(errors), Expect::Invalid(_)) => {
                        match errors.iter().find(|(f, _)| f == field) {
                            None => problem(format!(
                                "operator errors do not include {field}: {errors:#?}"
                            )),
                            Some((_, message)) if !message.contains(field) => problem(format!(
                                "operator message does not name {field}: {message}"
                            )),
                            Some(_) => {}
                        }
                    }
                    (Operator::Rejected(errors), _) => problem(format!(
                        "expected the typed decode to refuse it, but it decoded: {errors:#?}"
                    )),
                    (Operator::Undecodable(err), Expect::Invalid(_)) => problem(format!(
                        "operator refuses it only by failing to decode: {err}"
                    )),
                    (Operator::Undecodable(_), _) => {}
                }
            }
        }
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
    for (name, valid) in name_cases() {
        let api = api_server_errors(&schema, &named_object(&name, nvidia()));
        let operator = validate_name(&name);
        assert_eq!(
            api.is_empty(),
            valid,
            "API server on a {}-character name: {api:?}",
            name.len()
        );
        assert_eq!(
            operator.is_ok(),
            valid,
            "operator on a {}-character name: {operator:?}",
            name.len()
        );
        if !valid {
            assert!(api.iter().all(|e| e.contains("metadata.name")), "{api:?}");
            let err = operator.unwrap_err();
            assert_eq!(err.field, "metadata.name");
            assert!(err.message.contains("metadata.name"), "{err}");
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
        .map(|(name, _)| named_object(&name, nvidia()));
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
        "spec: spec.roles[].parallel: world size",
        "spec.roles[0].parallel.tensor"
    ));
    assert!(!names_field(
        "spec: spec.roles[].parallelism: x",
        "spec.roles[0].parallel"
    ));
}
