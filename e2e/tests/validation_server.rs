//! The validation table (`tests/common/validation_cases.rs`) judged by the real API server of the
//! bed: every row is created as a `DeepInferDeployment` under the CRD exactly as users install it.
//! The server's verdict (admitted, or rejected with the field paths of its causes) must agree with
//! the row's expectation and with the operator's own validate stage, row by row.

use deepinfer_e2e::support::{self, TestNamespace};
use http_body_util::BodyExt;
use kube::Client;
use serde_json::Value;

#[path = "../../tests/common/validation_cases.rs"]
mod table;
use table::*;

/// Creates `object` in `ns` for real; returns the server's errors as `field: message` (empty when
/// it was admitted). Admitted objects are deleted again.
async fn server_errors(client: &Client, ns: &str, mut object: Value) -> Vec<String> {
    object["metadata"]["namespace"] = Value::String(ns.to_owned());
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let base = format!("/apis/deepinfer.io/v1alpha1/namespaces/{ns}/deepinferdeployments");
    let request = http::Request::post(&base)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&object).expect("json").into())
        .expect("request");
    let response = client.send(request).await.expect("the API server answers");
    let code = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let status: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if code.is_success() {
        let delete = http::Request::delete(format!("{base}/{name}"))
            .body(Vec::new().into())
            .expect("request");
        let _ = client.send(delete).await;
        return Vec::new();
    }
    assert_eq!(
        code.as_u16(),
        422,
        "the API server refused the object for another reason than validation: {status}"
    );
    let causes = status["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!causes.is_empty(), "a 422 without causes: {status}");
    causes
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or(""),
                detail(c["message"].as_str().unwrap_or(""))
            )
        })
        .collect()
}

/// The rule's own message inside a cause's message: `Invalid value: "<value>": <detail>` or
/// `Invalid value: <detail>` (a CEL rule on an object or a list) → `<detail>`.
fn detail(message: &str) -> &str {
    let Some(rest) = message.strip_prefix("Invalid value: ") else {
        return message;
    };
    if rest.starts_with('"') {
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        if let Some(Ok(_)) = values.next() {
            return rest[values.byte_offset()..].trim_start_matches(": ");
        }
    }
    rest
}

#[test]
fn details_are_cut_out_of_cause_messages() {
    assert_eq!(
        detail(r#"Invalid value: "r.example/x:v1": spec.runtime.image must be pinned"#),
        "spec.runtime.image must be pinned"
    );
    assert_eq!(
        detail("Invalid value: spec.roles[].parallel: the world size"),
        "spec.roles[].parallel: the world size"
    );
    assert_eq!(detail("Required value"), "Required value");
}

#[tokio::test]
async fn validation_table_real_api_server_and_operator_agree() {
    let client = support::client().await;
    support::ensure_crd();
    let ns = TestNamespace::new(&client, "validation").await;
    let cases = cases();
    let mut failures = Vec::new();
    for case in &cases {
        let spec = row_spec(case);
        let api = server_errors(&client, &ns.name, object(spec.clone())).await;
        let operator = operator_verdict(&spec);
        println!(
            "{}\n  API server: {api:?}\n  operator:   {}",
            case.name,
            operator.describe()
        );
        failures.extend(disagreements(case, &api, &operator));
    }
    let names = name_cases();
    for case in &names {
        let api = server_errors(
            &client,
            &ns.name,
            named_object(&case.name, case.spec.clone()),
        )
        .await;
        let operator = operator_name_verdict(case);
        let valid = case.valid;
        let what = format!(
            "a {}-character name with {} acceptance pods per group",
            case.name.len(),
            case.spec["roles"][1]["parallel"]["data"]
        );
        if api.is_empty() != valid {
            failures.push(format!(
                "[{what}] API server: {api:?}, expected valid={valid}"
            ));
        }
        if operator.is_ok() != valid {
            failures.push(format!(
                "[{what}] operator: {operator:?}, expected valid={valid}"
            ));
        }
        if !valid && !api.iter().any(|e| e.contains("metadata.name")) {
            failures.push(format!(
                "[{what}] no API server error names metadata.name: {api:?}"
            ));
        }
        if let Err(errors) = &operator {
            if !errors.iter().any(|(field, _)| field == "metadata.name") {
                failures.push(format!(
                    "[{what}] no operator error names metadata.name: {errors:?}"
                ));
            }
        }
    }
    let rows = cases.len() + names.len();
    println!(
        "validation table: {rows} rows judged by the real API server ({}), {} disagreements",
        client
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_default(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {rows} rows disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
