//! The `DeepInferDeployment` resource (group `deepinfer.io`, version `v1alpha1`): its spec,
//! status, condition types and reasons, labels and annotations, and CRD generation.

pub mod kstatus;
mod layout;
pub mod reference;
mod role;
mod spec;
mod status;

pub use layout::RoleLayout;
pub use role::*;
pub use spec::*;
pub use status::*;

use kube::CustomResourceExt;

/// API group of every resource this operator defines.
pub const GROUP: &str = "deepinfer.io";

/// Annotation that records the licence the resource's owner accepted; it must equal
/// `spec.model.license`.
pub const LICENSE_ACCEPTED_ANNOTATION: &str = "deepinfer.io/license-accepted";
/// Annotation whose change re-runs the acceptance workload for the current revision.
pub const RERUN_ACCEPTANCE_ANNOTATION: &str = "deepinfer.io/rerun-acceptance";
/// Why the acceptance workload is run again: needed beside a new value of
/// [`RERUN_ACCEPTANCE_ANNOTATION`], recorded in the judgement and the manifest.
pub const RERUN_REASON_ANNOTATION: &str = "deepinfer.io/rerun-reason";
/// Why `spec.acceptance` changed: needed, with [`ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION`], before a
/// changed acceptance section of a deployment that has passed is judged.
pub const ACCEPTANCE_CHANGE_REASON_ANNOTATION: &str = "deepinfer.io/acceptance-change-reason";
/// Who reviewed and approved the change of `spec.acceptance` (see
/// [`ACCEPTANCE_CHANGE_REASON_ANNOTATION`]).
pub const ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION: &str = "deepinfer.io/acceptance-change-reviewer";
/// Pod readiness gate (and pod condition type) set True only on pods of an accepted revision.
pub const ACCEPTED_POD_CONDITION: &str = "deepinfer.io/accepted";

/// Labels put on every object the operator owns.
pub mod labels {
    /// Name of the owning `DeepInferDeployment`.
    pub const DEPLOYMENT: &str = "deepinfer.io/deployment";
    /// Role of the serving group: worker, prefill, decode or vision.
    pub const ROLE: &str = "deepinfer.io/role";
    /// Index of the serving group within its role.
    pub const GROUP: &str = "deepinfer.io/group";
    /// Rank of the pod within its group; rank 0 leads.
    pub const RANK: &str = "deepinfer.io/rank";
    /// Hash of everything that changes the running bits (image, checkpoint, layout, args).
    pub const REVISION: &str = "deepinfer.io/revision";
    /// The group a serving pod belongs to (`<name>-<role>-<rev5>-<group>`), set on the pods of
    /// a deployment with `spec.scheduling.exclusiveDomain`.
    pub const GROUP_NAME: &str = "deepinfer.io/group-name";
    /// What an object is for: a [`super::Component`].
    pub const COMPONENT: &str = "deepinfer.io/component";
    /// Marks objects managed by this operator.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// Value of [`MANAGED_BY`].
    pub const MANAGER: &str = "deepinfer-operator";
}

/// What an owned object is to the operator: the value of its [`labels::COMPONENT`] label.
/// Passes select what they read, keep and delete by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    /// A serving pod, its group's PodGroup and Service, the role's PodDisruptionBudget.
    Worker,
    /// A role's Service, selecting its accepted, ready group leaders.
    Serving,
    /// A group's headless Service through which its ranks find each other.
    Rendezvous,
    /// An acceptance run's Jobs, PodGroups, spec ConfigMap and the judge's RBAC.
    Acceptance,
    /// An acceptance run's evidence ConfigMap (manifest and outputs).
    Evidence,
    /// The Job that fetches a hub checkpoint.
    Fetch,
    /// The Job that verifies the checkpoint.
    Verify,
    /// A group's HCCL rank table (Ascend).
    RankTable,
    /// Where decode groups find the ready prefill and vision leaders.
    PeerEndpoints,
    /// A ResourceClaimTemplate of devices (DRA).
    Devices,
    /// The ControllerRevision holding a revision's spec.
    Revision,
    /// A role's PodDisruptionBudget.
    DisruptionBudget,
    /// A role's `DeepInferRole`, its scale target (`spec.roles[].scaling: external`).
    Scaling,
}

impl Component {
    /// Every component.
    pub const ALL: [Component; 13] = [
        Component::Worker,
        Component::Serving,
        Component::Rendezvous,
        Component::Acceptance,
        Component::Evidence,
        Component::Fetch,
        Component::Verify,
        Component::RankTable,
        Component::PeerEndpoints,
        Component::Devices,
        Component::Revision,
        Component::DisruptionBudget,
        Component::Scaling,
    ];

    /// The label's value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Component::Worker => "worker",
            Component::Serving => "serving",
            Component::Rendezvous => "rendezvous",
            Component::Acceptance => "acceptance",
            Component::Evidence => "evidence",
            Component::Fetch => "fetch",
            Component::Verify => "verify",
            Component::RankTable => "rank-table",
            Component::PeerEndpoints => "role-endpoints",
            Component::Devices => "devices",
            Component::Revision => "revision",
            Component::DisruptionBudget => "disruption-budget",
            Component::Scaling => "scaling",
        }
    }

    /// The component a label value names, if any.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == value)
    }

    /// The component of an object with these labels, if it has one this release knows.
    pub fn of(labels: &std::collections::BTreeMap<String, String>) -> Option<Self> {
        labels.get(labels::COMPONENT).and_then(|v| Self::parse(v))
    }

    /// The label, as a map entry.
    pub fn label(self) -> (String, String) {
        (labels::COMPONENT.to_string(), self.as_str().to_string())
    }
}

/// The CRD as YAML, exactly as committed under `crds/`: [`curated_crd`] with the descriptions
/// of the fields nested inside the core Kubernetes types of the pod settings left out (the API
/// reference keeps them), so that client-side `kubectl apply`, which copies the whole object
/// into an annotation of at most 256 KiB, can install it.
pub fn crd_yaml() -> String {
    let mut crd = curated_crd();
    for pod in pod_settings_schemas(&mut crd) {
        for field in pod
            .get_mut("properties")
            .and_then(serde_json::Value::as_object_mut)
            .into_iter()
            .flat_map(|fields| fields.values_mut())
        {
            // The field's own description stays; those of what it is made of go.
            for nested in ["properties", "items", "additionalProperties"] {
                if let Some(inner) = field.get_mut(nested) {
                    strip_descriptions(inner);
                }
            }
        }
    }
    let body = serde_yaml::to_string(&crd).expect("a CRD always serialises to YAML");
    format!("# Generated by `deepinfer-operator crd`; do not edit.\n{body}")
}

/// The CRD as JSON, with the pod settings' `volumes` limited to the types an engine pod may use
/// ([`ALLOWED_VOLUME_TYPES`]): every other volume source (long-removed in-tree plugins,
/// `hostPath`) is left out of the schema, so the API server prunes it and the CEL rule on
/// `volumes` refuses the volume, naming the types allowed.
pub fn curated_crd() -> serde_json::Value {
    let mut crd =
        serde_json::to_value(DeepInferDeployment::crd()).expect("a CRD always serialises to JSON");
    for pod in pod_settings_schemas(&mut crd) {
        if let Some(types) = pod
            .pointer_mut("/properties/volumes/items/properties")
            .and_then(serde_json::Value::as_object_mut)
        {
            types.retain(|name, _| name == "name" || ALLOWED_VOLUME_TYPES.contains(&name.as_str()));
        }
    }
    crd
}

/// The schemas of `spec.pod` and `spec.roles[].pod` in `crd`.
fn pod_settings_schemas(crd: &mut serde_json::Value) -> Vec<&mut serde_json::Value> {
    let Some(spec) = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, field) in spec.iter_mut() {
        match name.as_str() {
            "pod" => out.push(field),
            "roles" => out.extend(field.pointer_mut("/items/properties/pod")),
            _ => {}
        }
    }
    out
}

/// `schema` without any `description`, at any depth.
fn strip_descriptions(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(map) => {
            map.remove("description");
            map.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// The resource's API description, for the dynamic (guarded) watch.
pub fn api_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::erase::<DeepInferDeployment>(&())
}

#[cfg(test)]
mod tests {
    use super::Component;

    #[test]
    fn every_component_reads_back_from_its_label_value_and_values_are_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for c in Component::ALL {
            assert_eq!(Component::parse(c.as_str()), Some(c));
            assert!(seen.insert(c.as_str()), "{c:?} shares its value");
        }
        assert_eq!(Component::parse("something-else"), None);
    }
}
