//! An acceptance run's names and groups: what the builders of its objects (the run's Jobs, its
//! PodGroups, rank tables and peer endpoints, the placement record) share.

use std::collections::BTreeMap;

use crate::api::{labels, Component, DeepInferDeploymentSpec, RoleSpec};

use super::{full_hash, short_hash, short_of_full_hash};

/// The role whose group runs the acceptance workload and is judged: `worker` (colocated) if
/// present, else `decode`, else the first role.
pub fn acceptance_role(spec: &DeepInferDeploymentSpec) -> Option<&RoleSpec> {
    ["worker", "decode"]
        .iter()
        .find_map(|n| spec.roles.iter().find(|r| r.name == *n))
        .or_else(|| spec.roles.first())
}

/// The roles an acceptance run includes, one group of each: the judged role first, then every
/// other role of the spec in spec order. A role's serving pods may serve only on a run that
/// included it.
pub fn acceptance_roles(spec: &DeepInferDeploymentSpec) -> Vec<&RoleSpec> {
    let Some(judged) = acceptance_role(spec) else {
        return Vec::new();
    };
    std::iter::once(judged)
        .chain(spec.roles.iter().filter(|r| r.name != judged.name))
        .collect()
}

/// One group of an acceptance run: its role, and the name its rendezvous Service, PodGroup and
/// Jobs (`<name>-<rank>`) share.
#[derive(Clone, Debug)]
pub struct RunGroup<'a> {
    /// The group's role.
    pub role: &'a RoleSpec,
    /// `<run>` for the judged role's group; for the others, the run's name with its last two
    /// hash characters replaced by `-<first letter of the role>` (role names start with distinct
    /// letters, and no run name has a `-` there).
    pub name: String,
    /// Whether this is the judged role's group, whose rank 0 runs the workload beside the judge.
    pub judged: bool,
}

impl RunGroup<'_> {
    /// Job of one rank of this group.
    pub fn job(&self, rank: i32) -> String {
        format!("{}-{rank}", self.name)
    }
}

/// Hex characters of the run hash in acceptance object names: 64 bits, so that no two runs (of
/// different revisions, acceptance specs or rerun tokens) can be made to share a name, and so
/// reuse each other's Jobs or verdicts.
pub const RUN_HASH_LENGTH: usize = 16;

/// Names of one acceptance run of `revision` (a new rerun token gives new names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptanceNames {
    /// Prefix shared by the run's objects: `<name>-accept-<run hash>`, the hash over the
    /// revision and the token (rerun annotation and acceptance spec hash).
    pub run: String,
    /// ConfigMap holding the resolved acceptance spec.
    pub spec_configmap: String,
    /// ConfigMap the judge writes the manifest and outputs into (the operator creates it).
    pub evidence_configmap: String,
    /// ServiceAccount (and Role, RoleBinding) the judge acts as.
    pub service_account: String,
    /// The whole [`full_hash`] of the revision and token the run hash is cut from, in every
    /// run Job's [`super::JUDGES_ANNOTATION`].
    pub key: String,
    /// What the run judges besides the revision (`<token>/<spec hash>`), in every run Job's
    /// [`super::RUN_ANNOTATION`]; empty for names recovered from a key.
    pub judges: String,
    /// SHA-256 (hex) of the spec file the run's spec ConfigMap holds
    /// ([`super::acceptance_spec_yaml`]), pinned in the judged leader's arguments; empty when
    /// unknown.
    pub spec_sha256: String,
}

impl AcceptanceNames {
    /// Names for `did` at `revision` with rerun token `token`.
    pub fn new(did: &str, revision: &str, token: &str) -> Self {
        let hash = short_hash(&(revision, token), RUN_HASH_LENGTH);
        Self {
            judges: token.to_string(),
            ..Self::named(did, &hash, full_hash(&(revision, token)))
        }
    }

    /// Whether `judges` (a [`super::RUN_ANNOTATION`]) and `revision` are what the run of `key`
    /// judges.
    pub fn judges_key(revision: &str, judges: &str, key: &str) -> bool {
        full_hash(&(revision, judges)) == key
    }

    /// Names of the run of `did` whose key ([`super::JUDGES_ANNOTATION`] of each of its Jobs)
    /// is `key`: every name is a function of the deployment and the key, so a Job tells its run's
    /// objects (the evidence ConfigMap among them) without its arguments being read. `None` for a
    /// key that is not a [`full_hash`].
    pub fn of_key(did: &str, key: &str) -> Option<Self> {
        let hash = short_of_full_hash(key, RUN_HASH_LENGTH)?;
        Some(Self::named(did, &hash, key.to_string()))
    }

    fn named(did: &str, hash: &str, key: String) -> Self {
        let run = format!("{did}-accept-{hash}");
        Self {
            spec_configmap: format!("{run}-spec"),
            evidence_configmap: format!("{did}-evidence-{hash}"),
            service_account: format!("{did}-acceptance"),
            key,
            run,
            judges: String::new(),
            spec_sha256: String::new(),
        }
    }

    /// Job of one rank of the judged role's group: `<run>-<rank>`, at most 63 characters (see
    /// [`crate::controller::gates::spec::validate::validate_acceptance_job_names`]).
    pub fn job(&self, rank: i32) -> String {
        format!("{}-{rank}", self.run)
    }

    /// Whether a Job named `name` is one of this run's: every group's name, and so every rank's
    /// Job, starts with the run's name less its last two characters (see [`Self::groups`]).
    pub fn holds_job(&self, name: &str) -> bool {
        let stem = self.run.get(..self.run.len().saturating_sub(2));
        name.starts_with(stem.unwrap_or(&self.run))
    }

    /// The run's groups, one per role of [`acceptance_roles`], the judged role's first.
    pub fn groups<'a>(&self, spec: &'a DeepInferDeploymentSpec) -> Vec<RunGroup<'a>> {
        acceptance_roles(spec)
            .into_iter()
            .enumerate()
            .map(|(i, role)| RunGroup {
                role,
                name: if i == 0 {
                    self.run.clone()
                } else {
                    // As long as the run's own name, so every Job name keeps the length
                    // `validate_acceptance_job_names` (and the CRD's rule) allows for.
                    let letter = role.name.chars().next().unwrap_or('r');
                    let stem = self.run.get(..self.run.len().saturating_sub(2));
                    format!("{}-{letter}", stem.unwrap_or(&self.run))
                },
                judged: i == 0,
            })
            .collect()
    }
}

/// Labels of a run group's objects (the Job's pods add the deployment and rank).
pub(super) fn acceptance_labels(group: &RunGroup<'_>, revision: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        Component::Acceptance.label(),
        (labels::REVISION.to_string(), revision.to_string()),
        (labels::GROUP.to_string(), group.name.clone()),
        (labels::ROLE.to_string(), group.role.name.clone()),
    ])
}
