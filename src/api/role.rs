//! `DeepInferRole`: the scale target of one role of a `DeepInferDeployment` whose role says
//! `scaling: external`. It exposes the `/scale` subresource, so a HorizontalPodAutoscaler,
//! KEDA or `kubectl scale` sets the role's group count in `spec.replicas` while the deployment's
//! own spec stays with whoever applies it (GitOps): the two never write the same field. The
//! operator creates it (seeding `spec.replicas` from the role's `replicas` once), writes its
//! status (serving groups, the label selector of the role's serving pods) and deletes it when
//! the role stops being external.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{labels, Component, MAX_REPLICAS};

/// The group count an autoscaler (or a person) asks of one role.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "deepinfer.io",
    version = "v1alpha1",
    kind = "DeepInferRole",
    doc = "The scale target of one role of a DeepInferDeployment whose role has `scaling: external`: an autoscaler or `kubectl scale` sets `spec.replicas` through the `/scale` subresource, and the operator keeps that many serving groups of the role.",
    // The object a pass reads and writes is [`DeepInferRole`] (a plain API type, as the caches
    // and the executor take); this one only generates the CRD.
    root = "DeepInferRoleDefinition",
    plural = "deepinferroles",
    shortname = "dirole",
    namespaced,
    status = "DeepInferRoleStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Desired","type":"integer","description":"Groups asked for (spec.replicas)","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Serving","type":"integer","description":"Groups of the role that serve","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DeepInferRoleSpec {
    /// Serving groups of the role (what `spec.roles[].replicas` says for a role that is not
    /// external): the same bounds, 0 to 1024. Seeded from the role's `replicas` when the
    /// operator creates this object; from then on written by the autoscaler or `kubectl scale`.
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub replicas: i32,
}

/// What the operator found of the role.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeepInferRoleStatus {
    /// Groups of the role that serve (ready, on an accepted revision).
    #[serde(default)]
    pub replicas: i32,
    /// Label selector of the role's serving pods, as a string (what the `/scale` subresource
    /// reports to autoscalers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
}

/// A `DeepInferRole` as the operator reads and writes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct DeepInferRole {
    /// Always `deepinfer.io/v1alpha1` when written (see [`DeepInferRole::new`]).
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// Always `DeepInferRole` when written.
    #[serde(default)]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The group count asked for.
    #[serde(default)]
    pub spec: DeepInferRoleSpec,
    /// What the operator found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeepInferRoleStatus>,
}

impl DeepInferRole {
    /// A `DeepInferRole` with this metadata and spec, no status.
    pub fn new(metadata: ObjectMeta, spec: DeepInferRoleSpec) -> Self {
        Self {
            api_version: <Self as k8s_openapi::Resource>::API_VERSION.into(),
            kind: <Self as k8s_openapi::Resource>::KIND.into(),
            metadata,
            spec,
            status: None,
        }
    }
}

impl k8s_openapi::Resource for DeepInferRole {
    const API_VERSION: &'static str = "deepinfer.io/v1alpha1";
    const GROUP: &'static str = "deepinfer.io";
    const KIND: &'static str = "DeepInferRole";
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "deepinferroles";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for DeepInferRole {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Name of the `DeepInferRole` of role `role` of deployment `deployment`.
pub fn role_object_name(deployment: &str, role: &str) -> String {
    format!("{deployment}-{role}")
}

/// The labels that select the serving pods of role `role` of deployment `deployment` (the role's
/// PodDisruptionBudget and Service select by them too).
pub fn role_pod_labels(deployment: &str, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), deployment.to_string()),
        (labels::ROLE.to_string(), role.to_string()),
        Component::Worker.label(),
    ])
}

/// [`role_pod_labels`] as a label selector string, as the `/scale` subresource reports it.
pub fn role_selector(deployment: &str, role: &str) -> String {
    role_pod_labels(deployment, role)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The `DeepInferRole` CRD as YAML, exactly as committed under `crds/`.
pub fn role_crd_yaml() -> String {
    let crd = DeepInferRoleDefinition::crd();
    let body = serde_yaml::to_string(&crd).expect("a CRD always serialises to YAML");
    format!("# Generated by `deepinfer-operator crd --kind role`; do not edit.\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn the_object_type_names_what_the_crd_defines() {
        let crd = DeepInferRoleDefinition::crd();
        let names = &crd.spec.names;
        assert_eq!(
            crd.spec.group,
            <DeepInferRole as k8s_openapi::Resource>::GROUP
        );
        assert_eq!(names.kind, <DeepInferRole as k8s_openapi::Resource>::KIND);
        assert_eq!(
            names.plural,
            <DeepInferRole as k8s_openapi::Resource>::URL_PATH_SEGMENT
        );
        assert_eq!(
            DeepInferRoleDefinition::api_version(&()),
            <DeepInferRole as k8s_openapi::Resource>::API_VERSION
        );
        assert_eq!(crd.spec.scope, "Namespaced");
    }

    #[test]
    fn the_crd_exposes_replicas_and_selector_through_scale() {
        let crd = DeepInferRoleDefinition::crd();
        let scale = crd.spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.scale.as_ref())
            .expect("the scale subresource");
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
    }

    #[test]
    fn a_written_object_carries_its_kind_and_api_version() {
        let role = DeepInferRole::new(ObjectMeta::default(), DeepInferRoleSpec { replicas: 2 });
        let json = serde_json::to_value(&role).unwrap();
        assert_eq!(json["apiVersion"], "deepinfer.io/v1alpha1");
        assert_eq!(json["kind"], "DeepInferRole");
        assert_eq!(json["spec"]["replicas"], 2);
    }

    #[test]
    fn the_selector_selects_the_roles_serving_pods() {
        assert_eq!(
            role_selector("flash", "decode"),
            "deepinfer.io/component=worker,deepinfer.io/deployment=flash,deepinfer.io/role=decode"
        );
    }
}
