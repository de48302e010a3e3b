//! The command lines of the acceptance entrypoints: `accept` (the judge) and `check` (offline).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Parser};

use super::{handoff, manifest};
use crate::api::ReviewRecord;

/// `accept` arguments: what the controller passes to the acceptance Job.
#[derive(Args, Debug, Clone)]
pub struct AcceptArgs {
    /// YAML of `spec.acceptance` with `promptsFrom` already resolved into `prompts`
    /// (the controller mounts it from a ConfigMap).
    #[arg(long)]
    pub spec_file: PathBuf,
    /// The SHA-256 (hex) the spec file must have: a file that differs is not judged by (the
    /// operator pins the spec ConfigMap it wrote here, in the immutable pod spec).
    #[arg(long)]
    pub spec_sha256: Option<String>,
    /// Local checkpoint directory (holds `config.json` and `*.safetensors`); `{model_dir}`.
    #[arg(long)]
    pub model_dir: PathBuf,
    /// What is being judged: revision, image, runtime, checkpoint and layout.
    #[command(flatten)]
    pub identity: Box<IdentityArgs>,
    /// Write the evidence into this ConfigMap (create or replace) in `--namespace`.
    #[arg(long, required_unless_present = "evidence_dir", conflicts_with = "evidence_dir", requires_all = ["owner_name", "owner_uid"])]
    pub evidence_configmap: Option<String>,
    /// Namespace of the evidence ConfigMap; default: the pod's own namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Name of the owning DeepInferDeployment (owner reference, label `deepinfer.io/deployment`).
    #[arg(long)]
    pub owner_name: Option<String>,
    /// UID of the owning DeepInferDeployment (owner reference).
    #[arg(long)]
    pub owner_uid: Option<String>,
    /// Write the evidence as files into this directory instead of a ConfigMap (tests, local runs).
    #[arg(long)]
    pub evidence_dir: Option<PathBuf>,
    /// Scratch directory for the prompts and outputs files; the engine runs in it (when `accept`
    /// runs the engine itself, without `--engine-dir`).
    #[arg(long, default_value = "/tmp/deepinfer-acceptance")]
    pub work_dir: PathBuf,
    /// Judge only: do not run the engine; wait for the report that `run-engine` (in the engine's
    /// own container) leaves in this shared directory, then judge what it left there.
    #[arg(long, conflicts_with = "endpoint")]
    pub engine_dir: Option<PathBuf>,
    /// Judge a serving endpoint (`http://host:port`) instead of an engine run: every prompt is
    /// sent to its `POST /v1/completions` (docs/engine-contract.md, "Serving API") once it
    /// answers `GET /health` with 200, within the spec's `timeoutSeconds`.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// With `--endpoint`: requests in flight at once in the load pass, which measures capacity
    /// after the judged pass (1: no load pass).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub load_concurrency: u32,
    /// Without `--engine-dir`: the serving command and arguments the template's
    /// `{serving_command}` and `{serving_args}` stand for (as `run-engine` takes them).
    #[command(flatten)]
    pub serving: handoff::ServingArgs,
    /// With `--engine-dir`: how long to wait for the engine's container to start.
    #[arg(long, default_value_t = 3600)]
    pub engine_start_seconds: u64,
    /// Where the JSON summary goes (the container's termination message).
    #[arg(
        long,
        env = "DEEPINFER_TERMINATION_LOG",
        default_value = "/dev/termination-log"
    )]
    pub termination_log: PathBuf,
}

/// `check` arguments: re-judge outputs (`--acceptance` with `--outputs`), or print the
/// measurement sheet of a kept run (`--sheet`).
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// YAML of a `spec.acceptance` section.
    #[arg(long, required_unless_present = "sheet", requires = "outputs")]
    pub acceptance: Option<PathBuf>,
    /// The engine's JSON lines (one object per prompt).
    #[arg(long, requires = "acceptance")]
    pub outputs: Option<PathBuf>,
    /// Print the measurement sheet of a kept run: the evidence ConfigMap (YAML or JSON, as
    /// `kubectl get configmap -o yaml` prints it), its `manifest.json`, or a directory holding it.
    #[arg(long, conflicts_with_all = ["acceptance", "outputs"])]
    pub sheet: Option<PathBuf>,
}

/// `accept` arguments naming the configuration under test (recorded in the manifest).
#[derive(Args, Debug, Clone)]
pub struct IdentityArgs {
    /// Revision hash being judged (label `deepinfer.io/revision`, recorded in the manifest).
    #[arg(long, default_value = "")]
    pub revision: String,
    /// Runtime image, pinned by digest (`<repository>@sha256:<hex>`).
    #[arg(long, default_value = "")]
    pub image: String,
    /// Git commit of the DeepInfer runtime inside the image.
    #[arg(long, default_value = "")]
    pub runtime_commit: String,
    /// Checkpoint revision (hub commit) the model directory holds.
    #[arg(long, default_value = "")]
    pub checkpoint_revision: String,
    /// The operator's pod-template version (part of the revision), recorded in the manifest.
    #[arg(long)]
    pub template_version: Option<i32>,
    /// Parallel layout of the judged role's group, `<role>=<tensor>x<pipeline>x<data>x<expert>`
    /// (as `verify-checkpoint --layout` takes each role's).
    #[arg(long, value_name = "ROLE=TxPxDxE", value_parser = parse_role_layout, default_value_t)]
    pub layout: crate::api::RoleLayout,
    /// Roles whose groups the run included, the judged role first, e.g. `decode,prefill`.
    #[arg(long, value_delimiter = ',')]
    pub roles: Vec<String>,
    /// The model's name (`spec.model.name`).
    #[arg(long, default_value = "")]
    pub model_name: String,
    /// The image each role's group ran, as a JSON object `{"<role>": "<image>"}` (the role's
    /// `spec.runtime.roles[].image`, else `spec.runtime.image`).
    #[arg(long, value_parser = parse_string_map)]
    pub role_images: Option<BTreeMap<String, String>>,
    /// The group each role of the run ran, as a JSON object `{"<role>": <group>}` of
    /// [`manifest::GroupRecord`]s: pods, devices per pod, product and layout. The operator sets
    /// it in the judge's environment ([`ROLE_GROUPS_ENV`]), which a judge of an earlier operator
    /// version ignores where it would refuse an unknown flag.
    #[arg(long, env = ROLE_GROUPS_ENV, value_parser = parse_role_groups)]
    pub role_groups: Option<BTreeMap<String, manifest::GroupRecord>>,
    /// The PersistentVolumeClaim holding the checkpoint.
    #[arg(long)]
    pub checkpoint_claim: Option<String>,
    /// The checkpoint's directory inside that claim.
    #[arg(long)]
    pub checkpoint_path: Option<String>,
    /// The key of the checkpoint source that was verified (`status.checkpoint.sourceKey`).
    #[arg(long)]
    pub checkpoint_source_key: Option<String>,
    /// Owners of the front-end services, as a JSON object (`spec.serviceOwners`).
    #[arg(long, value_parser = parse_string_map)]
    pub service_owners: Option<BTreeMap<String, String>>,
    /// Why the run was asked for again (annotation `deepinfer.io/rerun-reason`).
    #[arg(long)]
    pub rerun_reason: Option<String>,
    /// Why `spec.acceptance` changed (annotation `deepinfer.io/acceptance-change-reason`).
    #[arg(long)]
    pub acceptance_change_reason: Option<String>,
    /// Who reviewed that change (annotation `deepinfer.io/acceptance-change-reviewer`).
    #[arg(long)]
    pub acceptance_change_reviewer: Option<String>,
}

impl IdentityArgs {
    /// The review decisions given, `None` when there are none.
    pub fn review(&self) -> Option<ReviewRecord> {
        let record = ReviewRecord {
            rerun_reason: self.rerun_reason.clone(),
            change_reason: self.acceptance_change_reason.clone(),
            change_reviewer: self.acceptance_change_reviewer.clone(),
        };
        (record != ReviewRecord::default()).then_some(record)
    }
}

/// The judge's environment variable holding `--role-groups`.
pub const ROLE_GROUPS_ENV: &str = "DEEPINFER_ROLE_GROUPS";

/// Parses a JSON object of [`manifest::GroupRecord`]s by role.
pub fn parse_role_groups(text: &str) -> Result<BTreeMap<String, manifest::GroupRecord>, String> {
    serde_json::from_str(text).map_err(|e| format!("not a JSON object of role groups: {e}"))
}

/// Parses a JSON object of strings, e.g. `{"decode": "registry/image@sha256:…"}`.
pub fn parse_string_map(text: &str) -> Result<BTreeMap<String, String>, String> {
    serde_json::from_str(text).map_err(|e| format!("not a JSON object of strings: {e}"))
}

impl AcceptArgs {
    /// Parses `accept` arguments from an argument list (first item: the program name).
    pub fn try_parse_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: AcceptArgs,
        }
        Wrapper::try_parse_from(args).map(|w| w.args)
    }
}

fn parse_role_layout(s: &str) -> Result<crate::api::RoleLayout, String> {
    s.parse()
}
