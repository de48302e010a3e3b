//! The statuses the operator writes, as resources the health readers take
//! (`tests/argocd_health.rs`, `tests/health_tools.rs`).

use deepinfer_operator::api::Reason;
use deepinfer_operator::controller::status::{compute, Gate, Outcome};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

/// A passed gate.
fn passed(reason: Reason) -> Gate {
    Gate::Passed(reason, "ok".into())
}

/// Every gate passed: a ready resource.
pub fn ready() -> Outcome {
    Outcome {
        spec: passed(Reason::Complete),
        licence_gate: passed(Reason::LicenseAccepted),
        checkpoint: passed(Reason::Verified),
        acceptance: passed(Reason::AcceptanceSucceeded),
        workers: passed(Reason::GroupsReady),
        ..Outcome::default()
    }
}

/// The DeepInferDeployment at `generation` with the status the operator writes for `outcome`,
/// observed at `observed`.
pub fn resource(outcome: &Outcome, observed: i64, generation: i64) -> Value {
    let status = compute(
        None,
        outcome,
        Some(observed),
        Time("2026-01-05T10:00:00Z".parse().expect("time")),
    );
    json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": "flash", "namespace": "inference", "generation": generation},
        "status": status,
    })
}
