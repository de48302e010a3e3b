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
            (
                "Available",
                ".status.conditions[?(@.type==\"Available\")].status"
            ),
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

/// The most bytes the CRD may take as JSON: client-side `kubectl apply` (and Argo CD's default
/// sync) copies the whole object into the `kubectl.kubernetes.io/last-applied-configuration`
/// annotation, and the API server allows at most 262,144 bytes of annotations; the margin leaves
/// room for fields to come.
const MOST_CRD_BYTES: usize = 200 * 1024;

#[test]
fn each_crd_fits_client_side_apply_with_margin() {
    let path = |file: &str| format!("{}/crds/{file}", env!("CARGO_MANIFEST_DIR"));
    for file in [
        "deepinfer.io_deepinferdeployments.yaml",
        "deepinfer.io_deepinferroles.yaml",
    ] {
        let text = std::fs::read_to_string(path(file)).expect("the committed CRD");
        let value: Value = serde_yaml::from_str(&text).expect("YAML");
        let bytes = serde_json::to_vec(&value).expect("JSON").len();
        println!("{file}: {bytes} bytes as JSON (at most {MOST_CRD_BYTES})");
        assert!(
            bytes <= MOST_CRD_BYTES,
            "{file} is {bytes} bytes as JSON, over {MOST_CRD_BYTES}: client-side apply copies it into an annotation of at most 262,144 bytes"
        );
    }
}

#[test]
fn pod_volumes_offer_only_the_types_an_engine_pod_may_use() {
    let crd = crd();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    for pod in [&spec["pod"], &spec["roles"]["items"]["properties"]["pod"]] {
        let types: Vec<&str> = pod["properties"]["volumes"]["items"]["properties"]
            .as_object()
            .expect("volume properties")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected: Vec<&str> = deepinfer_operator::api::ALLOWED_VOLUME_TYPES.to_vec();
        expected.push("name");
        expected.sort_unstable();
        assert_eq!(types, expected);
    }
}

/// Every CEL rule, as `(where it sits, the rule)`: the generic path of its schema node
/// (`spec.roles[].pod`, indices written `[]`) beside the rule's object.
fn cel_rules(node: &Value, at: &str, out: &mut Vec<(String, Value)>) {
    for rule in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push((at.to_owned(), rule.clone()));
    }
    let join = |key: &str| {
        if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        }
    };
    for (key, child) in node["properties"].as_object().into_iter().flatten() {
        cel_rules(child, &join(key), out);
    }
    if node["items"].is_object() {
        cel_rules(&node["items"], &format!("{at}[]"), out);
    }
}

/// The field a rule's message starts with: `spec.roles[].parallel: the world size …` →
/// `spec.roles[].parallel`.
fn field_named_by(message: &str) -> &str {
    let end = message
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '[' | ']')))
        .unwrap_or(message.len());
    message[..end].trim_end_matches('.')
}

/// A rule reports its failure at the field its message names (`fieldPath`), so `kubectl apply`
/// prints `spec.accelerator.resourceName: Forbidden: …` rather than `spec: Invalid value:
/// "object": …`, and carries the reason that fits (`FieldValueDuplicate` for a repeated name,
/// `FieldValueForbidden` for a reserved key). A field path cannot index into a list, so a rule
/// about one element of a list sitting above that list reports at the list itself. The rules
/// on `metadata.name` stay at the root: the schema of a custom resource cannot hold
/// `metadata.name` for a field path to point at, and their messages start with it.
#[test]
fn every_rule_reports_at_the_field_its_message_names_with_a_reason() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in [
        "deepinfer.io_deepinferdeployments.yaml",
        "deepinfer.io_deepinferroles.yaml",
    ] {
        let path = format!("{}/crds/{file}", env!("CARGO_MANIFEST_DIR"));
        let crd: Value =
            serde_yaml::from_str(&std::fs::read_to_string(path).expect("the CRD")).expect("YAML");
        let mut rules = Vec::new();
        cel_rules(
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
            "",
            &mut rules,
        );
        for (at, rule) in rules {
            checked += 1;
            let message = rule["message"].as_str().unwrap_or_default();
            let named = field_named_by(message);
            let reported = match rule["fieldPath"].as_str() {
                Some(field_path) => format!("{at}{field_path}"),
                None => at.clone(),
            };
            let reason = rule["reason"].as_str();
            if !matches!(
                reason,
                Some(
                    "FieldValueInvalid"
                        | "FieldValueForbidden"
                        | "FieldValueDuplicate"
                        | "FieldValueRequired"
                )
            ) {
                problems.push(format!("{file} {at}: no reason: {message}"));
            }
            if at.is_empty() && named == "metadata.name" {
                continue;
            }
            let at_the_field = reported == named;
            let at_its_list = named
                .strip_prefix(reported.as_str())
                .is_some_and(|rest| rest.starts_with("[]"));
            if !(at_the_field || at_its_list) {
                problems.push(format!(
                    "{file}: a rule on {at} reports at {reported} but its message names {named}: {message}"
                ));
            }
        }
    }
    println!("{checked} CEL rules checked");
    assert!(
        problems.is_empty(),
        "{} rules report at another field than they name:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
