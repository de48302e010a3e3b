//! The committed CRD YAML is what the code generates, and it carries what `kubectl` users and
//! GitOps tools rely on.

use deepinfer_operator::api::crd_yaml;
use serde_json::Value;

const CRD_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/crds/deepinfer.io_deepinferdeployments.yaml"
);

fn committed() -> String {
    std::fs::read_to_string(CRD_PATH)
        .unwrap_or_else(|err| panic!("{CRD_PATH} cannot be read ({err}); run `make crds`"))
}

fn crd() -> Value {
    serde_yaml::from_str(&committed()).expect("the committed CRD is YAML")
}

#[test]
fn crd_committed_yaml_is_current() {
    // A plain assert: a diff of the whole CRD would bury the one line that says what to do.
    let current = committed() == crd_yaml();
    assert!(
        current,
        "{CRD_PATH} differs from what the API types generate; run `make crds` and commit the result"
    );
}

#[test]
fn role_crd_committed_yaml_is_current() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crds/deepinfer.io_deepinferroles.yaml"
    );
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("{path} cannot be read ({err}); run `make crds`"));
    assert!(
        committed == deepinfer_operator::api::role_crd_yaml(),
        "{path} differs from what the API types generate; run `make crds` and commit the result"
    );
}

#[test]
fn crd_names_scope_and_version() {
    let crd = crd();
    let spec = &crd["spec"];
    assert_eq!(crd["metadata"]["name"], "deepinferdeployments.deepinfer.io");
    assert_eq!(spec["group"], "deepinfer.io");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["kind"], "DeepInferDeployment");
    assert_eq!(spec["names"]["shortNames"], serde_json::json!(["did"]));
    let versions = spec["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], "v1alpha1");
    assert_eq!(versions[0]["served"], true);
    assert_eq!(versions[0]["storage"], true);
}

#[test]
fn crd_has_status_subresource_and_printer_columns() {
    let crd = crd();
    let version = &crd["spec"]["versions"][0];
    assert!(
        version["subresources"]["status"].is_object(),
        "status subresource missing"
    );
    let columns: Vec<(&str, &str)> = version["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns")
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["jsonPath"].as_str().unwrap()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Model", ".spec.model.name"),
            ("Accelerator", ".spec.accelerator.type"),
            ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
            ("Phase", ".status.phase"),
            ("Groups", ".status.groups"),
            ("Revision", ".status.servingRevision"),
            ("Reason", ".status.conditions[?(@.type==\"Ready\")].reason"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
    let wide: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns")
        .iter()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) > 0)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(wide, ["Model", "Accelerator"], "shown with -o wide only");
}

#[test]
fn crd_status_conditions_are_a_list_map_keyed_by_type() {
    let crd = crd();
    let conditions = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["status"]["properties"]["conditions"];
    assert_eq!(conditions["type"], "array");
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    let required = conditions["items"]["required"]
        .as_array()
        .expect("condition items list required fields");
    assert!(
        required.contains(&Value::from("type")),
        "a list-map key must be required: {required:?}"
    );
}
