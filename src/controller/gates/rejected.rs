//! A child object the API server refuses as invalid (HTTP 422, reason `Invalid`) is a problem of
//! the spec it was derived from, not a passing failure: retrying the same object can only fail
//! again. The gate that wrote it stalls, naming the object, the server's message and the fields
//! of its causes; the operator tries again when the resource changes.

use crate::api::Reason;
use crate::controller::error::Error;
use crate::controller::status::Gate;

/// The stalled gate for an error that retrying cannot mend: the API server refusing an object as
/// invalid, or an object of the desired name that another owner controls (`NameConflict`);
/// `None` for every other error (those are retried).
pub fn rejected_gate(error: &Error) -> Option<Gate> {
    if let Error::NameConflict { .. } = error {
        return Some(Gate::Failed(
            Reason::NameConflict,
            crate::controller::text::truncate(&error.to_string(), 2000),
        ));
    }
    let Error::Api {
        verb,
        kind,
        name,
        source: kube::Error::Api(status),
    } = error
    else {
        return None;
    };
    if !status.is_invalid() {
        return None;
    }
    let mut fields: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.field.as_str())
        .filter(|f| !f.is_empty())
        .collect();
    fields.dedup();
    let fields = if fields.is_empty() {
        String::new()
    } else {
        format!(" (field {})", fields.join(", "))
    };
    let message = format!(
        "the API server refused to {verb} {kind} {name}{fields}: {}; the operator derives this object from the spec, so correct the spec field it comes from (the runbook entry ChildRejected maps child fields to spec fields); nothing is retried until the resource changes",
        status.message.trim()
    );
    Some(Gate::Failed(
        Reason::ChildRejected,
        crate::controller::text::truncate(&message, 2000),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};
    use kube::core::Status;

    fn api_error(code: u16, reason: &str, message: &str, fields: &[&str]) -> Error {
        let status = Status {
            code,
            reason: reason.into(),
            message: message.into(),
            details: Some(StatusDetails {
                name: "flash-accept-0123456789abcdef-0".into(),
                group: "batch".into(),
                kind: "Job".into(),
                uid: String::new(),
                causes: fields
                    .iter()
                    .map(|f| StatusCause {
                        reason: "FieldValueInvalid".into(),
                        message: "must be less than or equal to cpu limit of 4".into(),
                        field: (*f).into(),
                    })
                    .collect(),
                retry_after_seconds: 0,
            }),
            ..Status::default()
        };
        Error::api(
            "create",
            "Job",
            "flash-accept-0123456789abcdef-0",
            kube::Error::Api(Box::new(status)),
        )
    }

    #[test]
    fn an_invalid_child_stalls_with_the_servers_message_and_the_field() {
        let field = "spec.template.spec.containers[0].resources.requests";
        let error = api_error(
            422,
            "Invalid",
            "Job.batch \"flash-accept-0123456789abcdef-0\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"8\": must be less than or equal to cpu limit of 4",
            &[field],
        );
        let gate = rejected_gate(&error).expect("a 422 stalls");
        let Gate::Failed(reason, message) = gate else {
            panic!("not stalled: {gate:?}");
        };
        assert_eq!(reason, Reason::ChildRejected);
        assert!(message.contains(&format!("(field {field})")), "{message}");
        assert!(
            message.contains("must be less than or equal to cpu limit of 4"),
            "{message}"
        );
        assert!(
            message.contains("create Job flash-accept-0123456789abcdef-0"),
            "{message}"
        );
    }

    #[test]
    fn other_failures_are_not_rejections() {
        for (code, reason) in [
            (500, "InternalError"),
            (403, "Forbidden"),
            (409, "Conflict"),
        ] {
            assert_eq!(rejected_gate(&api_error(code, reason, "boom", &[])), None);
        }
        assert_eq!(
            rejected_gate(&Error::NoNamespace("flash".into())),
            None,
            "only API answers can be rejections"
        );
    }
}
