//! ControllerRevisions: the spec of each revision, to rebuild its groups later.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{labels, Component, DeepInferDeploymentSpec};
use crate::controller::validated::ValidatedDeployment;

use super::{owned_meta, stamp};

/// Name of the ControllerRevision keeping the spec of `revision`.
pub fn controller_revision_name(did: &str, revision: &str) -> String {
    format!("{did}-{revision}")
}

/// A ControllerRevision keeping the spec of `revision`, so that groups of a revision that is no
/// longer the spec's (the one serving while another is judged) can still be rebuilt.
pub fn controller_revision(
    did: &ValidatedDeployment,
    revision: &str,
    number: i64,
) -> k8s_openapi::api::apps::v1::ControllerRevision {
    let extra = BTreeMap::from([
        (labels::REVISION.to_string(), revision.to_string()),
        Component::Revision.label(),
    ]);
    stamp(k8s_openapi::api::apps::v1::ControllerRevision {
        metadata: owned_meta(
            did,
            controller_revision_name(&did.name_any(), revision),
            extra,
        ),
        data: k8s_openapi::apimachinery::pkg::runtime::RawExtension(
            serde_json::json!({ "spec": did.spec }),
        ),
        revision: Some(number),
    })
}

/// The spec a ControllerRevision keeps (see [`ValidatedDeployment::with_spec`] to build from it).
pub fn kept_spec(
    kept: &k8s_openapi::api::apps::v1::ControllerRevision,
) -> Option<DeepInferDeploymentSpec> {
    let spec = kept.data.0.get("spec")?.clone();
    serde_json::from_value(spec).ok()
}
