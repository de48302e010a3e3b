//! Status of `DeepInferDeployment`: phase, kstatus-compatible conditions, and what was verified.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state. Computed deterministically from the cluster; written only when it changes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeepInferDeploymentStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Coarse summary: Pending, Verifying, Provisioning, Accepting, Ready or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Conditions, one per type: LicenseAccepted, CheckpointVerified, AcceptancePassed,
    /// WorkersReady, Ready, Reconciling, Stalled.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Revision hash of the desired running bits (image, checkpoint revision, layout, args).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The checkpoint as verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointStatus>,
    /// Serving groups per role, desired and ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub roles: Vec<RoleStatus>,
    /// The last acceptance run and its evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<AcceptanceStatus>,
}

/// Coarse lifecycle phase; the conditions carry the detail.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting on the spec or the licence gate.
    Pending,
    /// Fetching or verifying the checkpoint.
    Verifying,
    /// Running the acceptance workload.
    Accepting,
    /// Creating worker pods or waiting for them to become ready.
    Provisioning,
    /// Accepted and every serving group ready.
    Ready,
    /// A gate failed; see the conditions.
    Failed,
}

/// What verification found in the checkpoint.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointStatus {
    /// Revision verified (the hub commit, or `volume` for a volume source without one).
    pub revision: String,
    /// Number of checkpoint files (shards and metadata) checked.
    pub files: i64,
    /// Total size of the checked files in bytes.
    pub bytes: i64,
    /// Licence the checkpoint declares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// Key of the verified source and layout; a change re-runs verification.
    pub source_key: String,
}

/// Serving groups of one role.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RoleStatus {
    /// Role name.
    pub name: String,
    /// Groups desired (`replicas`).
    pub desired_groups: i32,
    /// Groups whose every pod is Ready.
    pub ready_groups: i32,
}

/// The last acceptance run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AcceptanceStatus {
    /// Revision the run judged.
    pub revision: String,
    /// `Passed` or `Failed`.
    pub result: String,
    /// Prompts judged and prompts passed.
    pub prompts: i32,
    /// Prompts that passed.
    pub passed: i32,
    /// Ids of failing prompts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_prompts: Vec<String>,
    /// ConfigMap holding the manifest and every output, failures included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// The runner's short account of the result (first failure, or why it could not judge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Hash of the `spec.acceptance` section the run judged by; a change re-runs acceptance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    /// Value of the `deepinfer.io/rerun-acceptance` annotation the run was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_token: Option<String>,
}

/// Condition types.
pub mod conditions {
    /// The licence annotation matches `spec.model.license` and the licence is allowed.
    pub const LICENSE_ACCEPTED: &str = "LicenseAccepted";
    /// The checkpoint was fetched (hub) and verified.
    pub const CHECKPOINT_VERIFIED: &str = "CheckpointVerified";
    /// The acceptance workload passed for the current revision.
    pub const ACCEPTANCE_PASSED: &str = "AcceptancePassed";
    /// Every serving group of every role is ready.
    pub const WORKERS_READY: &str = "WorkersReady";
    /// Accepted and serving: the one condition GitOps tools wait on.
    pub const READY: &str = "Ready";
    /// kstatus: the operator is still working towards the spec.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: progress needs a change to the resource (or the cluster).
    pub const STALLED: &str = "Stalled";
}

/// Condition reasons (CamelCase, stable; each has an entry in docs/runbooks.md).
pub mod reasons {
    /// Spec violates a validation rule.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The licence annotation is missing.
    pub const LICENSE_ANNOTATION_MISSING: &str = "LicenseAnnotationMissing";
    /// The licence annotation differs from `spec.model.license`.
    pub const LICENSE_MISMATCH: &str = "LicenseMismatch";
    /// The licence is not on the operator's allow-list.
    pub const LICENSE_NOT_ALLOWED: &str = "LicenseNotAllowed";
    /// All three licence checks agree.
    pub const LICENSE_ACCEPTED: &str = "LicenseAccepted";
    /// The fetch Job is running.
    pub const FETCHING: &str = "Fetching";
    /// The fetch Job failed.
    pub const FETCH_FAILED: &str = "FetchFailed";
    /// The verification Job is running.
    pub const VERIFYING: &str = "Verifying";
    /// Verification found a problem in the checkpoint.
    pub const VERIFICATION_FAILED: &str = "VerificationFailed";
    /// Verification passed.
    pub const VERIFIED: &str = "Verified";
    /// The checkpoint declares a different licence than `spec.model.license`.
    pub const CHECKPOINT_LICENSE_MISMATCH: &str = "CheckpointLicenseMismatch";
    /// A gate before this one has not passed yet.
    pub const WAITING_FOR_GATE: &str = "WaitingForGate";
    /// The acceptance workload is running.
    pub const ACCEPTANCE_RUNNING: &str = "AcceptanceRunning";
    /// The acceptance workload failed; evidence kept.
    pub const ACCEPTANCE_FAILED: &str = "AcceptanceFailed";
    /// The acceptance workload passed.
    pub const ACCEPTANCE_SUCCEEDED: &str = "AcceptanceSucceeded";
    /// Ready waits for the acceptance gate.
    pub const AWAITING_ACCEPTANCE: &str = "AwaitingAcceptance";
    /// Some serving groups are not ready yet.
    pub const GROUPS_NOT_READY: &str = "GroupsNotReady";
    /// Every serving group is ready.
    pub const GROUPS_READY: &str = "GroupsReady";
    /// Accepted and every group ready.
    pub const READY: &str = "Ready";
    /// The operator is applying the spec.
    pub const PROGRESSING: &str = "Progressing";
    /// Nothing left to do.
    pub const COMPLETE: &str = "Complete";
    /// Writing worker pods or Services failed; retried.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// A referenced object (PVC, ConfigMap, Secret) is missing.
    pub const MISSING_DEPENDENCY: &str = "MissingDependency";
}
