//! The `DeepInferDeployment` resource (group `deepinfer.io`, version `v1alpha1`): its spec,
//! status, condition types and reasons, labels and annotations, and CRD generation.

mod crd;
pub mod kstatus;
mod layout;
pub mod reference;
mod role;
mod role_kind;
mod spec;
mod status;

pub use crd::{api_resource, crd_yaml, curated_crd};
pub use layout::RoleLayout;
pub use role::*;
pub use role_kind::RoleKind;
pub use spec::*;
pub use status::*;

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
