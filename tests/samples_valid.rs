//! Every sample in `config/samples/` is a valid `DeepInferDeployment` whose acceptance section is
//! the shot planner fixture, so users start from manifests the operator accepts.

use std::path::Path;

use deepinfer_operator::api::{AcceptanceSpec, DeepInferDeployment};
use deepinfer_operator::controller::validate::{validate_spec, DeviceLimits};

fn samples() -> Vec<(String, DeepInferDeployment)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("config/samples exists") {
        let path = entry.expect("entry").path();
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

#[test]
fn every_sample_passes_validation_and_carries_the_licence_annotation() {
    let all = samples();
    assert!(
        all.len() >= 3,
        "NVIDIA, Ascend and disaggregated samples exist"
    );
    for (path, did) in all {
        if let Err(errors) = validate_spec(&did.spec, &DeviceLimits::default()) {
            panic!("{path} is invalid: {errors:?}");
        }
        let annotations = did.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get("deepinfer.io/license-accepted"),
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
