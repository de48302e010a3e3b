//! Status of `DeepInferDeployment`: phase, kstatus-compatible conditions, and what was verified.

use std::collections::BTreeSet;

use crate::api::role_kind::RoleKind;

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
    /// Coarse summary: Pending, Verifying, Provisioning, Accepting, Ready, Failed, Paused or
    /// Suspended. An open
    /// set: a value another release wrote is read as unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub phase: Option<Phase>,
    /// Conditions, one per type: LicenseAccepted, CheckpointVerified, AcceptancePassed,
    /// WorkersReady, Ready, Reconciling, Stalled.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Revision hash of the desired running bits (image, checkpoint revision, layout, args).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The revision that serves, in short form (its first 5 characters, as in pod names): the
    /// one most ready groups of all roles are on (on a tie, `revision`, else the first by
    /// name); absent while no group is ready. `kubectl get` shows it as Revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_revision: Option<String>,
    /// Ready serving groups over desired groups, summed over every role, e.g. `3/4`.
    /// `kubectl get` shows it as Groups; `roles` has the counts per role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<String>,
    /// The checkpoint as verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointStatus>,
    /// Serving groups per role, desired and ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub roles: Vec<RoleStatus>,
    /// The judgement of the current revision (the last acceptance run for it) and its evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<AcceptanceStatus>,
    /// Recorded acceptance judgements, newest first: one per (revision, acceptance spec hash,
    /// rerun token). A revision found here is not judged again, so rolling back reuses its pass;
    /// a pod may serve only while the newest judgement of its revision is a pass. The newest
    /// judgement of every revision that has pods is kept however many came after it; of the
    /// others, the newest 5. At most 32 in all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub judgements: Vec<AcceptanceStatus>,
    /// The licence gate's last opening: for which licence and annotation value, when, and when
    /// and why it closed. Who changed the annotation is in the object's `managedFields` and the
    /// API server's audit log (see the LicenseAccepted runbook entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<LicenseRecord>,
}

/// When the licence gate opened and closed. Written only on those transitions.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LicenseRecord {
    /// `spec.model.license` when the gate opened.
    pub license: String,
    /// Value of the `deepinfer.io/license-accepted` annotation when the gate opened.
    pub annotation: String,
    /// When the gate opened (annotation, spec and allow-list agreed).
    pub opened_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// When it closed; absent while it is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Why it closed: the LicenseAccepted condition's reason then (LicenseAnnotationMissing,
    /// LicenseMismatch, LicenseNotAllowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_reason: Option<String>,
}

/// Judgements kept in `status.judgements` besides the newest of each revision that has pods.
pub const MAX_JUDGEMENTS: usize = 5;
/// Most judgements `status.judgements` holds (its schema's bound): room for 27 revisions with
/// pods at once besides the [`MAX_JUDGEMENTS`] others.
pub const MAX_RECORDED_JUDGEMENTS: usize = 32;

/// Verdict of an acceptance run: the acceptance Job's summary, the manifest and the status all
/// carry this one type.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AcceptanceResult {
    /// Every prompt passed and the engine exited cleanly.
    Passed,
    /// Anything else (and the value a judgement has until it is made).
    #[default]
    Failed,
    /// A value this release does not know (written by another release, or restored from a
    /// backup): kept as unknown, never read as a pass or a failure.
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

impl AcceptanceResult {
    /// The serialised form (`Passed`, `Failed`), e.g. for metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "Passed",
            Self::Failed => "Failed",
            Self::Unknown => "Unknown",
        }
    }
}

impl DeepInferDeploymentStatus {
    /// The revisions the roles serve as last recorded (`roles[].servingRevision`): a revision
    /// whose groups were all lost a moment ago still serves there until they are rebuilt.
    pub fn serving_revisions(&self) -> BTreeSet<String> {
        self.roles
            .iter()
            .filter_map(|r| r.serving_revision.clone())
            .collect()
    }

    /// The revision role `role` serves as last recorded.
    pub fn serving_revision_of(&self, role: &str) -> Option<&str> {
        self.roles
            .iter()
            .find(|r| r.name == role)
            .and_then(|r| r.serving_revision.as_deref())
    }

    /// The newest recorded judgement of `revision`, whatever spec hash or rerun token it was
    /// made for.
    pub fn latest_judgement(&self, revision: &str) -> Option<&AcceptanceStatus> {
        self.judgements
            .iter()
            .chain(self.acceptance.iter())
            .find(|j| j.revision == revision)
    }

    /// The judgement recorded for exactly this revision, acceptance spec and rerun token.
    pub fn recorded_judgement(
        &self,
        revision: &str,
        spec_hash: &str,
        rerun_token: &str,
    ) -> Option<&AcceptanceStatus> {
        self.judgements
            .iter()
            .chain(self.acceptance.iter())
            .find(|j| j.judges(revision, spec_hash, rerun_token))
    }
}

/// `judgements` with `newest` recorded first, replacing an entry for the same revision, spec hash
/// and rerun token, then cut as [`retain_judgements`] says. `with_pods` are the revisions that
/// have pods now: a candidate's verdict never pushes out the judgement a serving pod rests on.
pub fn record_judgement(
    judgements: &[AcceptanceStatus],
    newest: AcceptanceStatus,
    with_pods: &BTreeSet<String>,
) -> Vec<AcceptanceStatus> {
    let key = (
        newest.revision.clone(),
        newest.spec_hash.clone().unwrap_or_default(),
        newest.rerun_token.clone().unwrap_or_default(),
    );
    let rest = judgements
        .iter()
        .filter(|j| !j.judges(&key.0, &key.1, &key.2))
        .cloned();
    retain_judgements(std::iter::once(newest).chain(rest), with_pods)
}

/// What is kept of `judgements` (newest first): the newest judgement of every revision in
/// `with_pods`, whatever its age (see [`pinned`]), and the newest [`MAX_JUDGEMENTS`] others;
/// order is kept, and the list is cut at [`MAX_RECORDED_JUDGEMENTS`].
pub fn retain_judgements(
    judgements: impl IntoIterator<Item = AcceptanceStatus>,
    with_pods: &BTreeSet<String>,
) -> Vec<AcceptanceStatus> {
    let all: Vec<AcceptanceStatus> = judgements.into_iter().collect();
    let keep = pinned(&all, with_pods);
    let mut others = 0;
    let mut out = Vec::new();
    for (j, pinned) in all.into_iter().zip(keep) {
        if pinned {
            out.push(j);
        } else if others < MAX_JUDGEMENTS {
            others += 1;
            out.push(j);
        }
    }
    out.truncate(MAX_RECORDED_JUDGEMENTS);
    out
}

/// For each of `judgements` (newest first), whether it is the newest judgement of a revision in
/// `with_pods`: the judgement those pods' service rests on, kept however old it is (with its
/// evidence).
pub fn pinned(judgements: &[AcceptanceStatus], with_pods: &BTreeSet<String>) -> Vec<bool> {
    let mut seen = BTreeSet::new();
    judgements
        .iter()
        .map(|j| with_pods.contains(&j.revision) && seen.insert(j.revision.as_str()))
        .collect()
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
    /// `spec.paused`: groups are held as they are.
    Paused,
    /// `spec.suspend`: no pod runs; judgements and the checkpoint are kept.
    Suspended,
    /// A value this release does not know (written by another release): read, never written.
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
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
    /// Groups, of any revision, whose every pod is accepted and Ready (serving).
    pub ready_groups: i32,
    /// Groups on the current revision and pod template.
    #[serde(default)]
    pub updated_groups: i32,
    /// Revision being rolled out to this role's groups, while a rollout runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_out: Option<String>,
    /// Revision of most of this role's ready groups (on a tie, the one being rolled out to,
    /// else the first by name). While no group is ready: the revision it served on as last
    /// recorded, as long as that revision keeps its pass (its groups are rebuilt from it);
    /// else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_revision: Option<String>,
    /// The fewest ready groups the role's rollout allows (`replicas - maxUnavailable`, at least
    /// 1 while `replicas` is above 0): the role is available while `readyGroups` is at least
    /// this, whatever revision is being judged.
    #[serde(default)]
    pub min_available_groups: i32,
    /// Groups of this role deleted in a row because they stayed partly placed (some ranks
    /// bound, others unschedulable) past `--partial-group-timeout`; cleared once every group
    /// is placed. New groups wait a backoff after each (15 s, doubling, at most 5 min).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_retries: Option<i32>,
    /// When the last partly placed group of this role was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_placement_retry: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The last acceptance run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AcceptanceStatus {
    /// Revision the run judged.
    pub revision: String,
    /// `Passed` or `Failed`. An open set: a judgement whose result this release does not know
    /// neither grants nor withdraws service.
    #[schemars(with = "String")]
    pub result: AcceptanceResult,
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
    /// The judge's short account of the result (first failure, or why it could not judge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Hash of the `spec.acceptance` section the run judged by; a change re-runs acceptance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    /// Value of the `deepinfer.io/rerun-acceptance` annotation the run was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_token: Option<String>,
    /// The operator's pod-template version the run judged (part of the revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_version: Option<i32>,
    /// Roles whose groups the run included, the judged role first. A passed run entitles the
    /// pods of these roles only; empty in a judgement recorded before runs included every role,
    /// which keeps covering the pods of its revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The review decisions on the resource when the verdict was recorded (the reason for a
    /// rerun, the reason and reviewer of a change to `spec.acceptance`); the run's manifest
    /// (`review`) holds those it was started under. Absent when none was annotated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewRecord>,
    /// HMAC-SHA256 (hex) over this judgement and the deployment's UID, keyed by the operator's
    /// verdict key: a judgement without a valid proof neither grants nor withdraws service
    /// (docs/security.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
}

/// Review decisions behind an acceptance run, from the resource's annotations when the run
/// started: a change to the expected results is a decision someone made, on record.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReviewRecord {
    /// `deepinfer.io/rerun-reason`: why the run was asked for again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_reason: Option<String>,
    /// `deepinfer.io/acceptance-change-reason`: why `spec.acceptance` changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_reason: Option<String>,
    /// `deepinfer.io/acceptance-change-reviewer`: who reviewed and approved that change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_reviewer: Option<String>,
}

impl ReviewRecord {
    /// Longest value kept of each annotation, in bytes (longer ones are cut, marked).
    pub const MAX_LENGTH: usize = 1000;

    /// The review annotations of a resource, each trimmed and cut to [`Self::MAX_LENGTH`];
    /// `None` when none is set.
    pub fn from_annotations(
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> Option<Self> {
        let get = |key: &str| {
            annotations
                .get(key)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(|v| {
                    let mut end = v.len().min(Self::MAX_LENGTH);
                    while !v.is_char_boundary(end) {
                        end -= 1;
                    }
                    if end < v.len() {
                        format!("{}…", &v[..end])
                    } else {
                        v.to_string()
                    }
                })
        };
        let record = Self {
            rerun_reason: get(super::RERUN_REASON_ANNOTATION),
            change_reason: get(super::ACCEPTANCE_CHANGE_REASON_ANNOTATION),
            change_reviewer: get(super::ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION),
        };
        (record != Self::default()).then_some(record)
    }
}

impl AcceptanceStatus {
    /// Whether this judgement was made for exactly this revision, spec hash and rerun token.
    pub fn judges(&self, revision: &str, spec_hash: &str, rerun_token: &str) -> bool {
        self.revision == revision
            && self.spec_hash.as_deref().unwrap_or_default() == spec_hash
            && self.rerun_token.as_deref().unwrap_or_default() == rerun_token
    }

    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.result == AcceptanceResult::Passed
    }

    /// Whether the run included `role` (see [`AcceptanceStatus::roles`]). A run that judged
    /// `worker` covers the worker alone: its outputs are the worker's own, whatever other role's
    /// group ran beside it (validation refuses `worker` beside other roles).
    pub fn covers(&self, role: &str) -> bool {
        if self
            .roles
            .first()
            .is_some_and(|judged| RoleKind::Worker.named(judged))
        {
            return RoleKind::Worker.named(role);
        }
        self.roles.is_empty() || self.roles.iter().any(|r| r == role)
    }

    /// Whether the run passed with `role` included: pods of `role` may serve on it.
    pub fn passed_for(&self, role: &str) -> bool {
        self.passed() && self.covers(role)
    }
}

/// A closed set of names the operator writes as strings (condition and event reasons): an enum
/// whose every value has one spelling, listed in `ALL`.
macro_rules! string_enum {
    ($(#[$doc:meta])* pub enum $name:ident { $($(#[$vdoc:meta])* $variant:ident = $value:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The value as written into conditions and Events.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.as_str().to_string()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }
    };
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
    /// Serving at the capacity the rollout allows (every role at least `replicas -
    /// maxUnavailable` ready groups), whatever revision is being judged; as a Deployment's.
    pub const AVAILABLE: &str = "Available";
    /// kstatus: the operator is still working towards the spec.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: progress needs a change to the resource (or the cluster).
    pub const STALLED: &str = "Stalled";
}

string_enum! {
/// Why a condition is what it is, and why an Event was published: every reason the operator
/// writes, in one place (CamelCase, stable; each has an entry in docs/runbooks.md).
pub enum Reason {
    /// Spec violates a validation rule.
    InvalidSpec = "InvalidSpec",
    /// The licence annotation is missing.
    LicenseAnnotationMissing = "LicenseAnnotationMissing",
    /// The licence annotation differs from `spec.model.license`.
    LicenseMismatch = "LicenseMismatch",
    /// The licence is not on the operator's allow-list.
    LicenseNotAllowed = "LicenseNotAllowed",
    /// All three licence checks agree.
    LicenseAccepted = "LicenseAccepted",
    /// The fetch Job is running.
    Fetching = "Fetching",
    /// The fetch Job failed.
    FetchFailed = "FetchFailed",
    /// The verification Job is running.
    Verifying = "Verifying",
    /// Verification found a problem in the checkpoint.
    VerificationFailed = "VerificationFailed",
    /// Verification passed.
    Verified = "Verified",
    /// The checkpoint declares a different licence than `spec.model.license`.
    CheckpointLicenseMismatch = "CheckpointLicenseMismatch",
    /// A gate before this one has not passed yet.
    WaitingForGate = "WaitingForGate",
    /// The acceptance workload is running.
    AcceptanceRunning = "AcceptanceRunning",
    /// The acceptance workload failed; evidence kept.
    AcceptanceFailed = "AcceptanceFailed",
    /// A new acceptance run needs a review decision on record first: a new rerun annotation
    /// without `deepinfer.io/rerun-reason`, or a changed `spec.acceptance` of a deployment that
    /// has passed without the change's reason and reviewer annotations. Nothing runs; the serving
    /// revision keeps serving on its pass.
    AcceptanceReviewRequired = "AcceptanceReviewRequired",
    /// The acceptance workload passed.
    AcceptanceSucceeded = "AcceptanceSucceeded",
    /// Ready waits for the acceptance gate.
    AwaitingAcceptance = "AwaitingAcceptance",
    /// Some serving groups are not ready yet.
    GroupsNotReady = "GroupsNotReady",
    /// Every serving group is ready.
    GroupsReady = "GroupsReady",
    /// Accepted and every group ready.
    Ready = "Ready",
    /// Every role serves at least the groups its rollout allows.
    MinimumGroupsAvailable = "MinimumGroupsAvailable",
    /// A role serves fewer groups than its rollout allows.
    MinimumGroupsUnavailable = "MinimumGroupsUnavailable",
    /// The operator is applying the spec.
    Progressing = "Progressing",
    /// Nothing left to do.
    Complete = "Complete",
    /// Writing worker pods or Services failed; retried.
    ApplyFailed = "ApplyFailed",
    /// The API server refused a child object the operator derived from the spec as invalid
    /// (HTTP 422); the message carries the server's message and the field. Not retried until
    /// the resource changes.
    ChildRejected = "ChildRejected",
    /// A Job's pod cannot pull its image (ErrImagePull, ImagePullBackOff, InvalidImageName).
    ImagePullFailed = "ImagePullFailed",
    /// A Job's pod cannot be configured (CreateContainerConfigError: a missing Secret,
    /// ConfigMap or key it refers to).
    ContainerConfigError = "ContainerConfigError",
    /// A Job's container cannot be created or started (CreateContainerError, RunContainerError,
    /// CrashLoopBackOff).
    ContainerStartFailed = "ContainerStartFailed",
    /// The scheduler cannot place a fetch or verify Job's pod.
    PodUnschedulable = "PodUnschedulable",
    /// The checkpoint's PersistentVolumeClaim exists but is not Bound.
    ClaimNotBound = "ClaimNotBound",
    /// A referenced object (PVC, ConfigMap, Secret) is missing.
    MissingDependency = "MissingDependency",
    /// `spec.model.source.hub.endpoint` (or the default public hub) is not on the operator's
    /// `--allowed-hub-endpoints`: no fetch Job is created.
    HubEndpointNotAllowed = "HubEndpointNotAllowed",
    /// The hub token Secret is not labelled `deepinfer.io/hub-token: "true"`, or is a
    /// ServiceAccount token Secret: it is never mounted into a fetch Job.
    TokenSecretNotAllowed = "TokenSecretNotAllowed",
    /// Engine containers would read a Secret or ConfigMap that is not labelled
    /// `deepinfer.io/engine-readable: "true"` (or is missing, or is a ServiceAccount token), or
    /// a projected ServiceAccount token: nothing of the spec is provisioned.
    ReferenceNotAllowed = "ReferenceNotAllowed",
    /// Groups of a new revision (or pod template) are replacing the serving ones, group by group.
    RollingOut = "RollingOut",
    /// A pod the operator runs (acceptance or a new group) waits for free devices; not a verdict.
    WaitingForCapacity = "WaitingForCapacity",
    /// Serving pods lost their entitlement (licence or judgement) and were taken out of service.
    ServingWithdrawn = "ServingWithdrawn",
    /// A Job the operator would read by name exists but was made for another configuration (its
    /// `deepinfer.io/judges` annotation differs): it is neither read nor deleted.
    NameConflict = "NameConflict",
    /// The acceptance run waits for a place under `--max-concurrent-acceptance-runs`; the
    /// message gives its place in line.
    AcceptanceQueued = "AcceptanceQueued",
    /// `spec.paused`: no group is created, replaced or deleted.
    Paused = "Paused",
    /// `spec.suspend`: every serving pod and a running acceptance run are deleted; the
    /// judgements, the checkpoint and the kept revisions stay.
    Suspended = "Suspended",
    /// Event: a group was deleted whole (a pod failed, was lost or was deleted) so that it is
    /// created again; the note says which pod and why.
    GroupReplaced = "GroupReplaced",
    /// Event: only part of a group was bound within the placement deadline; the group is deleted
    /// and placed again after a backoff.
    GroupPartlyPlaced = "GroupPartlyPlaced",
}
}

string_enum! {
/// Reasons of the `deepinfer.io/accepted` pod condition.
pub enum PodReason {
    /// The pod's revision passed acceptance and the licence is accepted: it may serve.
    Entitled = "AcceptancePassed",
    /// The licence gate closed (annotation removed or changed, or licence no longer allowed).
    LicenseWithdrawn = "LicenseWithdrawn",
    /// The newest judgement of the pod's revision is a failure.
    AcceptanceWithdrawn = "AcceptanceWithdrawn",
    /// No judgement of the pod's revision is recorded.
    NotJudged = "RevisionNotJudged",
}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judgement(revision: &str, result: AcceptanceResult) -> AcceptanceStatus {
        AcceptanceStatus {
            revision: revision.into(),
            result,
            spec_hash: Some(format!("spec-of-{revision}")),
            ..AcceptanceStatus::default()
        }
    }

    #[test]
    fn failing_candidates_never_push_out_the_judgement_of_the_revision_that_serves() {
        let serving = BTreeSet::from(["r0".to_string()]);
        let mut list = vec![judgement("r0", AcceptanceResult::Passed)];
        for n in 1..=8 {
            let failed = judgement(&format!("r{n}"), AcceptanceResult::Failed);
            list = record_judgement(&list, failed, &serving);
        }
        let revisions: Vec<&str> = list.iter().map(|j| j.revision.as_str()).collect();
        assert_eq!(revisions, ["r8", "r7", "r6", "r5", "r4", "r0"]);
        let status = DeepInferDeploymentStatus {
            judgements: list,
            ..Default::default()
        };
        assert!(status.latest_judgement("r0").is_some_and(|j| j.passed()));
    }

    #[test]
    fn only_the_newest_judgement_of_a_revision_with_pods_is_pinned() {
        let serving = BTreeSet::from(["r0".to_string()]);
        let mut rerun = judgement("r0", AcceptanceResult::Failed);
        rerun.rerun_token = Some("again".into());
        let list = record_judgement(
            &[judgement("r0", AcceptanceResult::Passed)],
            rerun,
            &serving,
        );
        assert_eq!(list.len(), 2, "the older judgement fills a free place");
        let mut list = list;
        for n in 1..=6 {
            let failed = judgement(&format!("r{n}"), AcceptanceResult::Failed);
            list = record_judgement(&list, failed, &serving);
        }
        assert_eq!(
            list.iter()
                .filter(|j| j.revision == "r0")
                .map(|j| j.rerun_token.as_deref())
                .collect::<Vec<_>>(),
            [Some("again")],
            "the newest of r0 stays, the older one goes"
        );
    }

    #[test]
    fn the_schema_bounds_the_judgements_where_retention_cuts_them() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(crate::api::DeepInferDeployment::crd()).expect("crd");
        let max = crd.pointer(
            "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/judgements/maxItems",
        );
        assert_eq!(max, Some(&serde_json::json!(MAX_RECORDED_JUDGEMENTS)));
    }

    #[test]
    fn judgements_of_revisions_without_pods_are_cut_to_the_newest_few() {
        let mut list = Vec::new();
        for n in 0..9 {
            let j = judgement(&format!("r{n}"), AcceptanceResult::Passed);
            list = record_judgement(&list, j, &BTreeSet::new());
        }
        assert_eq!(list.len(), MAX_JUDGEMENTS);
        assert_eq!(list[0].revision, "r8");
        let many: BTreeSet<String> = (0..40).map(|n| format!("p{n}")).collect();
        let pinned = retain_judgements(
            (0..40).map(|n| judgement(&format!("p{n}"), AcceptanceResult::Passed)),
            &many,
        );
        assert_eq!(pinned.len(), MAX_RECORDED_JUDGEMENTS, "the schema's bound");
    }
}
