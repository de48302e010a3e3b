//! Every sample in `config/samples/` is a valid `DeepInferDeployment` whose acceptance section is
//! the shot planner fixture, so users start from manifests the operator accepts; the llama.cpp
//! example (`config/samples/llama-cpp/`) is valid too, with the shot planner as its engine's
//! decoder can enforce it.

use std::path::Path;

use deepinfer_operator::api::{AcceptanceSpec, DeepInferDeployment};
use deepinfer_operator::controller::gates::spec::validate::{validate_spec, DeviceLimits};

/// The `DeepInferDeployment`s among the YAML files directly in `dir`.
fn samples_in(dir: &Path) -> Vec<(String, DeepInferDeployment)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the samples directory exists") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("sample readable");
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("sample is YAML");
        if doc.get("kind").and_then(|k| k.as_str()) == Some("DeepInferDeployment") {
            let did: DeepInferDeployment = serde_yaml::from_value(doc)
                .unwrap_or_else(|e| panic!("{} does not match the API: {e}", path.display()));
            out.push((path.display().to_string(), did));
        }
    }
    out
}

fn samples() -> Vec<(String, DeepInferDeployment)> {
    samples_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples"))
}

fn llama_cpp_sample() -> (String, DeepInferDeployment) {
    let mut found =
        samples_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples/llama-cpp"));
    assert_eq!(found.len(), 1, "one llama.cpp sample");
    found.remove(0)
}

#[test]
fn every_sample_passes_validation_and_carries_the_licence_annotation() {
    let all = samples();
    assert!(
        all.len() >= 3,
        "NVIDIA, Ascend and disaggregated samples exist"
    );
    for (path, did) in all.into_iter().chain([llama_cpp_sample()]) {
        if let Err(errors) = validate_spec(&did.spec, &DeviceLimits::default()) {
            panic!("{path} is invalid: {errors:?}");
        }
        let annotations = did.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get(deepinfer_operator::api::LICENSE_ACCEPTED_ANNOTATION),
            Some(&did.spec.model.license),
            "{path} accepts its licence"
        );
    }
}

#[test]
fn samples_use_the_shot_planner_acceptance() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/fixtures/shot-planner/acceptance.yaml");
    let expected: AcceptanceSpec =
        serde_yaml::from_str(&std::fs::read_to_string(fixture).expect("fixture"))
            .expect("fixture parses");
    for (path, did) in samples() {
        assert_eq!(
            did.spec.acceptance, expected,
            "{path} embeds e2e/fixtures/shot-planner/acceptance.yaml"
        );
    }
}

#[test]
fn the_llama_cpp_sample_judges_the_shot_planners_prompts_and_rules() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/fixtures/shot-planner/acceptance.yaml");
    let planner: AcceptanceSpec =
        serde_yaml::from_str(&std::fs::read_to_string(fixture).expect("fixture"))
            .expect("fixture parses");
    let (path, did) = llama_cpp_sample();
    let ids = |a: &AcceptanceSpec| a.prompts.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&did.spec.acceptance), ids(&planner), "{path}");
    for (mine, theirs) in did.spec.acceptance.prompts.iter().zip(&planner.prompts) {
        assert_eq!(mine.rules, theirs.rules, "{path}: prompt {}", mine.id);
    }
    assert_eq!(did.spec.acceptance.sampling, planner.sampling, "{path}");
}
