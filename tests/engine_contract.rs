//! The engine contract's document, docs/engine-contract.md, against the code that implements it
//! (`deepinfer_operator::contract`): the same items with the same presence, every required
//! variable on every engine container the operator builds, every placeholder substituted, and an
//! outputs parser that takes exactly the documented fields. The stand-in engine's side is
//! checked in e2e/tests/engine_contract.rs.

use std::collections::BTreeSet;
use std::path::Path;

use deepinfer_operator::acceptance::{engine, engine_io};
use deepinfer_operator::contract::{self, Item, Presence};
use deepinfer_operator::controller::build;
use deepinfer_operator::controller::gates::spec::validate::validate;

fn document() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/engine-contract.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rows `(name, presence)` of the table after `<!-- contract-table: <table> -->`.
fn table(doc: &str, table: &str) -> Vec<(String, String)> {
    let marker = format!("<!-- contract-table: {table} -->");
    let start = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/engine-contract.md has no {marker}"));
    doc[start + marker.len()..]
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect()
}

fn items(list: &[Item]) -> Vec<(String, String)> {
    list.iter()
        .map(|i| (i.name.to_string(), i.presence.word().to_string()))
        .collect()
}

#[test]
fn the_documents_tables_list_exactly_the_contracts_items() {
    let doc = document();
    for (name, list) in [
        ("env", contract::ENV),
        ("placeholders", contract::PLACEHOLDERS),
        ("output", contract::OUTPUT_FIELDS),
        ("events", contract::EVENTS),
    ] {
        assert_eq!(table(&doc, name), items(list), "table {name}");
    }
    assert!(
        doc.starts_with(&format!(
            "# The engine contract (version {})",
            contract::VERSION
        )),
        "the title names the version"
    );
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    assert!(
        readme.contains("(docs/engine-contract.md)"),
        "README links the contract"
    );
}

fn deployment(roles: serde_json::Value) -> build::ValidatedDeployment {
    let d = serde_json::from_value(serde_json::json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": "flash", "namespace": "serving", "uid": "u-1"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": format!("r.example/deepinfer@sha256:{}", "0".repeat(64)),
                        "commit": "0123abc"},
            "accelerator": {"type": "Ascend", "devicesPerPod": 16},
            "roles": roles,
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
        }
    }))
    .expect("resource");
    validate(&d, &Default::default()).expect("valid")
}

#[test]
fn every_engine_container_the_operator_builds_carries_the_required_environment() {
    let d = deployment(serde_json::json!([
        {"name": "prefill", "replicas": 1, "parallel": {"tensor": 16}},
        {"name": "decode", "replicas": 1, "parallel": {"tensor": 16, "data": 2}}
    ]));
    let names = build::AcceptanceNames::new("flash", "rev", "token");
    let mut containers = Vec::new();
    for role in &d.spec.roles {
        for pod in build::group_pods(&d, role, 0, "rev") {
            containers.push(pod.spec.expect("spec").containers[0].clone());
        }
    }
    for rank in 0..2 {
        let job = build::acceptance_job(&d, &names, rank, "rev", "operator:1").expect("job");
        let pod = job.spec.expect("spec").template.spec.expect("pod");
        containers.push(
            pod.containers
                .into_iter()
                .find(|c| c.name == build::ENGINE_CONTAINER)
                .expect("engine container"),
        );
    }
    assert_eq!(containers.len(), 1 + 2 + 2);
    for c in containers {
        let set: BTreeSet<String> = c
            .env
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.name)
            .collect();
        let missing = contract::missing_env(|n| set.get(n).cloned());
        assert!(missing.is_empty(), "{:?} misses {missing:?}", c.args);
    }
}

#[test]
fn the_runner_substitutes_every_placeholder() {
    let template: Vec<String> = contract::PLACEHOLDERS
        .iter()
        .map(|p| format!("--x={}", p.name))
        .collect();
    let serving_command = ["serve".to_string()];
    let serving_args = ["--model_name".to_string(), "/models/m".to_string()];
    let inputs = engine::TemplateInputs {
        model_dir: Path::new("/models/m"),
        prompts_file: Path::new("/w/prompts.jsonl"),
        outputs_file: Path::new("/w/outputs.jsonl"),
        serving_command: &serving_command,
        serving_args: &serving_args,
    };
    let file_placeholders: Vec<String> = template
        .iter()
        .filter(|t| !contract::LIST_PLACEHOLDERS.iter().any(|p| t.ends_with(p)))
        .cloned()
        .collect();
    assert_eq!(
        engine::render_command(&file_placeholders, &inputs),
        [
            "--x=/models/m",
            "--x=/w/prompts.jsonl",
            "--x=/w/outputs.jsonl"
        ]
    );
    let whole: Vec<String> = contract::LIST_PLACEHOLDERS
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        engine::render_command(&whole, &inputs),
        ["--model_name", "/models/m", "serve"],
        "list placeholders, as whole arguments, become the serving words"
    );
    let default = engine::DEFAULT_COMMAND.join(" ");
    for p in [
        contract::placeholder::SERVING_ARGS,
        contract::placeholder::PROMPTS_FILE,
        contract::placeholder::OUTPUTS_FILE,
    ] {
        assert!(default.contains(p), "the default command uses {p}");
    }
    assert_eq!(
        engine::template_problem(
            &engine::DEFAULT_COMMAND
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        ),
        None,
        "the default command is a valid template"
    );
}

#[test]
fn the_documents_acceptance_inputs_are_the_contracts() {
    assert_eq!(
        table(&document(), "acceptance-inputs"),
        items(contract::ACCEPTANCE_INPUT_ENV)
    );
}

#[test]
fn the_outputs_parser_takes_exactly_the_documented_fields() {
    let full: serde_json::Map<String, serde_json::Value> = contract::OUTPUT_FIELDS
        .iter()
        .map(|f| {
            let value = match f.name {
                "id" => serde_json::json!("p"),
                "text" => serde_json::json!("a"),
                "finish_reason" => serde_json::json!("stop"),
                n if n.ends_with("_seconds") => serde_json::json!(0.5),
                _ => serde_json::json!(3),
            };
            (f.name.to_string(), value)
        })
        .collect();
    let line = |m: &serde_json::Map<String, serde_json::Value>| {
        format!("{}\n", serde_json::Value::Object(m.clone()))
    };
    let parsed = engine_io::parse_outputs(line(&full).as_bytes());
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    let back = serde_json::to_value(&parsed.outputs[0].output).expect("serializes");
    assert_eq!(
        back.as_object()
            .expect("object")
            .keys()
            .collect::<BTreeSet<_>>(),
        full.keys().collect::<BTreeSet<_>>(),
        "every documented field is read, and no other"
    );
    assert_eq!(
        back,
        serde_json::Value::Object(full.clone()),
        "values kept as given"
    );
    for field in contract::OUTPUT_FIELDS {
        let mut without = full.clone();
        without.remove(field.name);
        let parsed = engine_io::parse_outputs(line(&without).as_bytes());
        match field.presence {
            Presence::Required => assert!(
                parsed.errors[0]
                    .message
                    .contains(&format!("missing field `{}`", field.name)),
                "{}: {:?}",
                field.name,
                parsed.errors
            ),
            Presence::Optional => {
                assert!(parsed.errors.is_empty(), "{} is optional", field.name);
                let kept = serde_json::to_value(&parsed.outputs[0].output).expect("serializes");
                assert!(
                    kept[field.name].is_null(),
                    "{} left out is not invented",
                    field.name
                );
            }
        }
    }
}
