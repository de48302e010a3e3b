//! Acceptance gate: the checker, the engine side (`run-engine`, in the engine container), the
//! judge (`accept`, in the judge container; alone it also runs the engine side) and
//! offline re-judging of kept evidence (`check`). Contracts: docs/acceptance.md.

pub mod checker;
pub mod devices;
pub mod engine;
pub mod engine_io;
pub mod evidence;
pub mod grammar;
pub mod handoff;
pub mod manifest;
pub mod rules;
pub mod runner;
pub mod sheet;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Parser};

use crate::api::{AcceptanceSpec, ParallelSpec, ReviewRecord};
pub use checker::{CompiledSpec, Verdict};
pub use manifest::{AcceptanceResult, AcceptanceSummary};

/// `accept` arguments: what the controller passes to the acceptance Job.
#[derive(Args, Debug, Clone)]
pub struct AcceptArgs {
    /// YAML of `spec.acceptance` with `promptsFrom` already resolved into `prompts`
    /// (the controller mounts it from a ConfigMap).
    #[arg(long)]
    pub spec_file: PathBuf,
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
    #[arg(long)]
    pub engine_dir: Option<PathBuf>,
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
    /// Parallel layout of the serving group, e.g. `tensor=8,pipeline=1,data=1,expert=8`.
    #[arg(long, value_parser = parse_layout, default_value = "tensor=1,pipeline=1,data=1,expert=1")]
    pub layout: ParallelSpec,
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

/// Parses `tensor=..,pipeline=..,data=..,expert=..`; omitted degrees are 1.
pub fn parse_layout(text: &str) -> Result<ParallelSpec, String> {
    let mut layout = ParallelSpec::default();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not key=value"))?;
        let value: i32 = value
            .trim()
            .parse()
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| format!("{key}: {value:?} is not a whole number of at least 1"))?;
        match key.trim() {
            "tensor" => layout.tensor = value,
            "pipeline" => layout.pipeline = value,
            "data" => layout.data = value,
            "expert" => layout.expert = value,
            other => {
                return Err(format!(
                    "unknown layout key {other:?} (expected tensor, pipeline, data, expert)"
                ))
            }
        }
    }
    Ok(layout)
}

/// Parses YAML holding an acceptance section: the bare `spec.acceptance` mapping, a mapping with
/// an `acceptance` key, or a whole resource with `spec.acceptance`.
pub fn parse_spec(text: &str) -> anyhow::Result<AcceptanceSpec> {
    let value: serde_yaml::Value = serde_yaml::from_str(text)?;
    let section = value
        .get("spec")
        .and_then(|s| s.get("acceptance"))
        .or_else(|| value.get("acceptance"))
        .unwrap_or(&value);
    Ok(serde_yaml::from_value(section.clone())?)
}

/// Reads and compiles an acceptance spec file; errors name the file and the field.
pub fn load_spec(path: &Path) -> anyhow::Result<(AcceptanceSpec, CompiledSpec)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let spec =
        parse_spec(&text).with_context(|| format!("{}: not an acceptance spec", path.display()))?;
    let compiled = CompiledSpec::compile(&spec).with_context(|| format!("{}", path.display()))?;
    Ok((spec, compiled))
}

/// Judges an outputs file against a compiled spec, as both `check` and `accept` do. `Err` when a
/// line is not a valid output object or the file was truncated by the evidence writer.
pub fn judge_file(compiled: &CompiledSpec, outputs: &Path) -> anyhow::Result<Vec<Verdict>> {
    let bytes = std::fs::read(outputs).with_context(|| format!("reading {}", outputs.display()))?;
    let parsed = engine_io::parse_outputs(&bytes);
    if let Some(line) = parsed.truncated_at {
        anyhow::bail!(
            "{} line {line}: the evidence writer truncated this file here; the outputs after it are not kept",
            outputs.display()
        );
    }
    if let Some(err) = parsed.errors.first() {
        anyhow::bail!("{} line {}: {}", outputs.display(), err.line, err.message);
    }
    Ok(compiled.judge(&parsed))
}

/// Runs `accept`; returns the process exit code (0 passed, 1 failed, 2 the judge itself failed).
pub async fn accept(args: AcceptArgs) -> anyhow::Result<i32> {
    Ok(runner::run(&args).await)
}

/// Runs `run-engine` (the engine container's entrypoint); returns the process exit code.
pub async fn run_engine(args: handoff::RunEngineArgs) -> anyhow::Result<i32> {
    Ok(handoff::run_engine_side(&args).await)
}

/// Runs `check`; returns the process exit code (0 all pass, 1 any fail, 2 bad input).
pub fn check(args: &CheckArgs) -> anyhow::Result<i32> {
    if let Some(kept) = &args.sheet {
        print!("{}", sheet::render(&sheet::load_manifest(kept)?));
        return Ok(0);
    }
    let verdicts = check_verdicts(args)?;
    for v in &verdicts {
        println!("{}", v.line());
    }
    Ok(if verdicts.iter().all(|v| v.passed) {
        0
    } else {
        1
    })
}

/// The verdicts `check` prints; `Err` is bad input.
pub fn check_verdicts(args: &CheckArgs) -> anyhow::Result<Vec<Verdict>> {
    let (Some(acceptance), Some(outputs)) = (&args.acceptance, &args.outputs) else {
        anyhow::bail!("check: give --acceptance FILE and --outputs FILE (or --sheet EVIDENCE)");
    };
    let (_, compiled) = load_spec(acceptance)?;
    judge_file(&compiled, outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_parses_and_rejects_nonsense() {
        let l = parse_layout("tensor=8, expert=4").unwrap();
        assert_eq!((l.tensor, l.pipeline, l.data, l.expert), (8, 1, 1, 4));
        assert!(parse_layout("tensor=0").unwrap_err().contains("at least 1"));
        assert!(parse_layout("sequence=2")
            .unwrap_err()
            .contains("unknown layout key"));
        assert!(parse_layout("tensor")
            .unwrap_err()
            .contains("not key=value"));
    }

    #[test]
    fn spec_yaml_in_three_shapes() {
        let bare =
            "prompts: [{id: a, prompt: x, structuredOutput: {regex: a}}]\nrequireEos: false\n";
        let nested = format!("acceptance:\n  {}", bare.replace('\n', "\n  "));
        let resource = format!(
            "apiVersion: deepinfer.io/v1alpha1\nspec:\n  {}",
            nested.replace('\n', "\n  ")
        );
        for text in [bare.to_string(), nested, resource] {
            let spec = parse_spec(&text).unwrap();
            assert_eq!(spec.prompts[0].id, "a");
            assert!(!spec.require_eos);
            assert_eq!(spec.timeout_seconds, 1800);
        }
        assert!(parse_spec("prompts: [{id: a}]")
            .unwrap_err()
            .to_string()
            .contains("missing field"));
    }

    #[test]
    fn accept_args_need_exactly_one_evidence_target() {
        let base = ["accept", "--spec-file", "s.yaml", "--model-dir", "/m"];
        assert!(AcceptArgs::try_parse_from(base).is_err());
        let dir = AcceptArgs::try_parse_from(base.iter().chain(&["--evidence-dir", "/e"])).unwrap();
        assert_eq!(dir.evidence_dir.as_deref(), Some(Path::new("/e")));
        assert!(
            AcceptArgs::try_parse_from(base.iter().chain(&["--evidence-configmap", "cm"])).is_err()
        );
        let cm = [
            "--evidence-configmap",
            "cm",
            "--owner-name",
            "d",
            "--owner-uid",
            "u",
        ];
        assert!(AcceptArgs::try_parse_from(base.iter().chain(&cm)).is_ok());
    }
}
