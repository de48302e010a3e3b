//! What an acceptance run records: the manifest (kept as evidence) and the short summary (the
//! container's termination message, parsed by the controller).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::checker::Verdict;
use super::devices::DeviceInventory;
use super::engine::{EngineExit, Timings};
use super::engine_io::ParsedOutputs;
use crate::api::{EffectiveSampling, ParallelSpec, ReviewRecord};

/// Kubernetes keeps at most this many bytes of a termination message.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;
/// Longest `reason` in the summary.
const SUMMARY_REASON_LIMIT: usize = 1024;

/// Outcome of an acceptance run: the same type the controller records in status.
pub use crate::api::AcceptanceResult;

/// The termination message of the acceptance container: one JSON object under 4096 bytes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AcceptanceSummary {
    /// `Passed` or `Failed`.
    pub result: AcceptanceResult,
    /// Prompts in the spec (0 when the spec could not be read).
    pub prompts: usize,
    /// Prompts that passed.
    pub passed: usize,
    /// Ids of failing prompts, then of outputs with unknown ids.
    #[serde(default)]
    pub failed_prompts: Vec<String>,
    /// Failing ids left out of `failedPrompts` to stay under the size limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_failed_prompts: usize,
    /// Where the evidence is: the ConfigMap name (or directory); empty if it could not be written.
    pub evidence: String,
    /// Why it failed (or `all N prompts passed`), shortened to 1 KiB.
    pub reason: String,
    /// Revision judged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl AcceptanceSummary {
    /// Compact JSON under [`TERMINATION_MESSAGE_LIMIT`]: the reason is shortened first, then
    /// failing ids are dropped from the end (and counted in `omittedFailedPrompts`).
    pub fn termination_message(&self) -> String {
        let mut summary = self.clone();
        summary.reason = shorten(&summary.reason, SUMMARY_REASON_LIMIT);
        loop {
            let text = serde_json::to_string(&summary).unwrap_or_default();
            if text.len() < TERMINATION_MESSAGE_LIMIT || summary.failed_prompts.is_empty() {
                return text;
            }
            summary.failed_prompts.pop();
            summary.omitted_failed_prompts += 1;
        }
    }
}

/// `text` cut to at most `limit` bytes at a character boundary, marked when cut.
pub fn shorten(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let marker = format!(" … [truncated, {} bytes in all]", text.len());
    let mut end = limit.saturating_sub(marker.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

/// Image and runtime.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRecord {
    /// Image reference as given.
    pub image: String,
    /// `sha256:<hex>` part of the image reference, when it has one.
    pub image_digest: Option<String>,
    /// Runtime git commit.
    pub commit: String,
    /// The operator's pod-template version the engine ran under (part of the revision judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_version: Option<i32>,
    /// The image each role's group of the run ran (`image` is the judged role's); empty in
    /// manifests written before runs recorded them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub role_images: BTreeMap<String, String>,
}

/// Checkpoint.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRecord {
    /// Checkpoint revision (hub commit).
    pub revision: String,
    /// Local model directory the engine loaded.
    pub model_dir: String,
    /// The model's name (`spec.model.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The PersistentVolumeClaim holding the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The checkpoint's directory inside the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Key of the checkpoint source that was verified (`status.checkpoint.sourceKey`): the
    /// model, licence, source and layouts the verification covered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_key: Option<String>,
}

/// Parallel layout with its world size.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LayoutRecord {
    /// Tensor-parallel degree.
    pub tensor: i32,
    /// Pipeline-parallel degree.
    pub pipeline: i32,
    /// Data-parallel degree.
    pub data: i32,
    /// Expert-parallel degree.
    pub expert: i32,
    /// tensor × pipeline × data.
    pub world_size: i64,
}

impl From<&ParallelSpec> for LayoutRecord {
    fn from(p: &ParallelSpec) -> Self {
        Self {
            tensor: p.tensor,
            pipeline: p.pipeline,
            data: p.data,
            expert: p.expert,
            world_size: p.world_size(),
        }
    }
}

/// The group of one role in an acceptance run: its pods, the devices each requested and the
/// product they selected (the role's device shape, `spec.roles[].accelerator` else
/// `spec.accelerator`), and its layout. The operator hands them to the judge as this type's JSON
/// (`--role-groups`, set in the judge's environment).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    /// Pods of the group.
    pub pods: i32,
    /// Devices each pod requested.
    pub devices_per_pod: i32,
    /// Value of the product node label the pods selected, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// The group's layout; `layout.worldSize` devices in all.
    pub layout: LayoutRecord,
}

/// The engine run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EngineRecord {
    /// The rendered command.
    pub command: Vec<String>,
    /// The judged engine's effective argv after substitution, as reported by the runner
    /// (values of redacted variables written as `<redacted>`); `None` when the runner did not
    /// run the engine.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// The judged engine's effective environment, as reported by the runner: values of variables
    /// from a Secret, a ConfigMap or a resource field written as `<redacted>`; `None` when the
    /// runner did not report it.
    #[serde(default)]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// How it ended.
    pub exit: EngineExit,
    /// The timeout applied.
    pub timeout_seconds: u64,
}

/// One prompt's output as recorded.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PromptRecord {
    /// Prompt id.
    pub id: String,
    /// Verdict.
    pub passed: bool,
    /// Line of the output in `outputs.jsonl`, if one was produced.
    pub line: Option<usize>,
    /// Finish reason reported.
    pub finish_reason: Option<String>,
    /// Output tokens the spec asked for (`maxTokens`); `None` when the spec left it to the
    /// engine's default.
    #[serde(default)]
    pub requested_tokens: Option<i32>,
    /// Prompt tokens reported.
    pub prompt_tokens: Option<u64>,
    /// Prompt tokens served from the prefix cache, as reported.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Completion tokens reported.
    pub completion_tokens: Option<u64>,
    /// Speculative-decoding accepted tokens reported.
    pub accepted_tokens: Option<u64>,
    /// Requests in flight when this one was admitted, as reported.
    #[serde(default)]
    pub active_requests: Option<u64>,
    /// Seconds from admission to the first token, as reported.
    #[serde(default)]
    pub first_token_seconds: Option<f64>,
    /// Seconds from admission to the last token (the request's completion time), as reported.
    #[serde(default)]
    pub completion_seconds: Option<f64>,
    /// Sampling settings the prompt was handed to the engine with (the section's, then the
    /// prompt's overrides, defaults applied); absent in manifests written before runs recorded
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<EffectiveSampling>,
}

/// Token totals; a total is `None` unless every output reported that count.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TokenTotals {
    /// Sum of requested output tokens (every prompt set `maxTokens`).
    #[serde(default)]
    pub requested_tokens: Option<u64>,
    /// Sum of prompt tokens.
    pub prompt_tokens: Option<u64>,
    /// Sum of cached prompt tokens.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Sum of completion tokens.
    pub completion_tokens: Option<u64>,
    /// Sum of accepted tokens.
    pub accepted_tokens: Option<u64>,
    /// Most requests in flight at any admission.
    #[serde(default)]
    pub peak_active_requests: Option<u64>,
    /// Capacity: completion tokens per second of the measured interval, when both are known.
    pub completion_tokens_per_second: Option<f64>,
    /// Capacity: prompts per second of the measured interval, when it is known.
    #[serde(default)]
    pub requests_per_second: Option<f64>,
    /// Mean per-request completion time.
    #[serde(default)]
    pub mean_completion_seconds: Option<f64>,
    /// Longest per-request completion time.
    #[serde(default)]
    pub max_completion_seconds: Option<f64>,
}

/// An evidence key that was cut to fit the ConfigMap.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Truncation {
    /// The key.
    pub key: String,
    /// Bytes before truncation.
    pub original_bytes: u64,
    /// Bytes kept.
    pub kept_bytes: u64,
    /// What was kept.
    pub note: String,
}

/// Everything needed to reproduce or audit the run, kept as `manifest.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Owning DeepInferDeployment.
    pub deployment: Option<String>,
    /// Revision judged.
    pub revision: String,
    /// Result.
    pub result: AcceptanceResult,
    /// Why it failed, or that every prompt passed.
    pub reason: String,
    /// Runner version.
    pub runner_version: String,
    /// Start of the run (RFC 3339).
    pub started_at: String,
    /// Image and runtime commit.
    pub runtime: RuntimeRecord,
    /// Checkpoint revision and local directory.
    pub checkpoint: CheckpointRecord,
    /// Devices.
    pub devices: DeviceInventory,
    /// Parallel layout.
    pub layout: LayoutRecord,
    /// Roles whose groups the run included, the judged role first (the others' groups ran as
    /// they serve, wired to it); empty in manifests written before runs recorded them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The group each role of the run ran, by role: pods, devices per pod, product, layout;
    /// empty in manifests written before runs recorded them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, GroupRecord>,
    /// Who owns each front-end service the deployment relies on (`spec.serviceOwners`); empty
    /// when none were declared.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub service_owners: BTreeMap<String, String>,
    /// The review decisions the run was started under (rerun reason, the reason and reviewer of
    /// a change to `spec.acceptance`); absent when none was annotated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewRecord>,
    /// The engine run.
    pub engine: EngineRecord,
    /// Sampling settings of `spec.acceptance.sampling`, defaults applied (each prompt's own, with
    /// its overrides, is in `prompts[].sampling`); absent in manifests written before runs
    /// recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<EffectiveSampling>,
    /// Load, warm-up and measured interval.
    pub timings: Timings,
    /// Prompt ids in spec order.
    pub prompt_ids: Vec<String>,
    /// Per prompt: verdict, output line, token counts.
    pub prompts: Vec<PromptRecord>,
    /// Token totals.
    pub tokens: TokenTotals,
    /// Lines of `outputs.jsonl` that are not valid output objects.
    pub output_line_errors: Vec<String>,
    /// `utf-8` (key in `data`) or `binary` (key in `binaryData`) for `outputs.jsonl`.
    pub outputs_encoding: String,
    /// Evidence keys cut to fit; empty when everything is whole.
    pub truncated: Vec<Truncation>,
    /// The end-to-end measurement of a serving endpoint, taken by the judge: the judged pass
    /// and the load pass (`accept --endpoint`); absent for a run of the judge's own engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<super::serving::ServingMeasurement>,
    /// Where each rank ran, as the operator recorded it beside the evidence (annotation
    /// [`super::placement::PLACEMENT_ANNOTATION`] of the evidence ConfigMap), or why that
    /// annotation cannot be read. Never part of `manifest.json` (a `placement` key there is
    /// ignored): [`super::sheet::load_manifest`] fills it from the ConfigMap.
    #[serde(skip)]
    pub placement: Option<Result<super::placement::Placement, String>>,
}

/// Inputs of [`build_manifest`] that come from the command line.
#[derive(Debug, Clone, Default)]
pub struct RunIdentity {
    /// Owning deployment.
    pub deployment: Option<String>,
    /// Revision judged.
    pub revision: String,
    /// Image reference.
    pub image: String,
    /// Runtime commit.
    pub runtime_commit: String,
    /// The operator's pod-template version.
    pub template_version: Option<i32>,
    /// Checkpoint revision.
    pub checkpoint_revision: String,
    /// Model directory.
    pub model_dir: String,
    /// Parallel layout.
    pub layout: ParallelSpec,
    /// Roles the run included, the judged role first.
    pub roles: Vec<String>,
    /// Image of each role's group.
    pub role_images: BTreeMap<String, String>,
    /// Each role's group: pods, devices per pod, product, layout.
    pub groups: BTreeMap<String, GroupRecord>,
    /// Model name.
    pub model: Option<String>,
    /// Checkpoint claim.
    pub claim: Option<String>,
    /// Checkpoint directory inside the claim.
    pub path: Option<String>,
    /// Checkpoint source key.
    pub source_key: Option<String>,
    /// Front-end service owners.
    pub service_owners: BTreeMap<String, String>,
    /// Review decisions.
    pub review: Option<ReviewRecord>,
    /// Start time (RFC 3339).
    pub started_at: String,
    /// Output tokens each prompt asked for (`maxTokens`), by prompt id; prompts that left it to
    /// the engine are absent.
    pub requested_tokens: std::collections::BTreeMap<String, i32>,
    /// Sampling settings of the section, defaults applied.
    pub sampling: EffectiveSampling,
    /// Sampling settings each prompt was handed with, by prompt id (see [`prompt_sampling`]).
    pub prompt_sampling: std::collections::BTreeMap<String, EffectiveSampling>,
}

/// Sampling settings each prompt of `spec` is handed to the engine with, by prompt id.
pub fn prompt_sampling(
    spec: &crate::api::AcceptanceSpec,
) -> std::collections::BTreeMap<String, EffectiveSampling> {
    spec.prompts
        .iter()
        .map(|p| (p.id.clone(), spec.sampling_of(p)))
        .collect()
}

/// Per-prompt records and token totals from the outputs and verdicts.
pub fn prompt_records(
    prompt_ids: &[String],
    requested: &std::collections::BTreeMap<String, i32>,
    parsed: &ParsedOutputs,
    verdicts: &[Verdict],
) -> Vec<PromptRecord> {
    // Indexed once: a flood of outputs must not make this quadratic.
    let mut first_output = std::collections::HashMap::new();
    for o in &parsed.outputs {
        first_output.entry(o.output.id.as_str()).or_insert(o);
    }
    let passed: std::collections::HashSet<&str> = verdicts
        .iter()
        .filter(|v| v.passed)
        .map(|v| v.id.as_str())
        .collect();
    prompt_ids
        .iter()
        .map(|id| {
            let output = first_output.get(id.as_str()).map(|o| &o.output);
            PromptRecord {
                id: id.clone(),
                passed: passed.contains(id.as_str()),
                line: first_output.get(id.as_str()).map(|o| o.line),
                finish_reason: output.map(|o| o.finish_reason.clone()),
                requested_tokens: requested.get(id).copied(),
                prompt_tokens: output.and_then(|o| o.prompt_tokens),
                cached_tokens: output.and_then(|o| o.cached_tokens),
                completion_tokens: output.and_then(|o| o.completion_tokens),
                accepted_tokens: output.and_then(|o| o.accepted_tokens),
                active_requests: output.and_then(|o| o.active_requests),
                first_token_seconds: output.and_then(|o| o.first_token_seconds),
                completion_seconds: output.and_then(|o| o.completion_seconds),
                sampling: None,
            }
        })
        .collect()
}

/// Sums each count when every prompt reported it and the sum fits; an engine that reports
/// counts summing past `u64::MAX` gets no total rather than a clamped one.
pub fn token_totals(records: &[PromptRecord], measured_seconds: Option<f64>) -> TokenTotals {
    fn total(records: &[PromptRecord], f: impl Fn(&PromptRecord) -> Option<u64>) -> Option<u64> {
        records
            .iter()
            .map(f)
            .try_fold(0u64, |acc, n| acc.checked_add(n?))
    }
    /// Every prompt's value, or `None` when one did not report it (or there are none).
    fn every<T: Copy>(
        records: &[PromptRecord],
        f: impl Fn(&PromptRecord) -> Option<T>,
    ) -> Option<Vec<T>> {
        let values: Option<Vec<T>> = records.iter().map(f).collect();
        values.filter(|v| !v.is_empty())
    }
    let per_second = |count: Option<u64>| match (count, measured_seconds) {
        (Some(n), Some(secs)) if secs > 0.0 => Some(round_to(n as f64 / secs, 100.0)),
        _ => None,
    };
    let completion = total(records, |r| r.completion_tokens);
    let times = every(records, |r| r.completion_seconds.filter(|s| s.is_finite()));
    TokenTotals {
        requested_tokens: total(records, |r| {
            r.requested_tokens.and_then(|n| u64::try_from(n).ok())
        }),
        prompt_tokens: total(records, |r| r.prompt_tokens),
        cached_tokens: total(records, |r| r.cached_tokens),
        completion_tokens: completion,
        accepted_tokens: total(records, |r| r.accepted_tokens),
        peak_active_requests: every(records, |r| r.active_requests)
            .and_then(|v| v.into_iter().max()),
        completion_tokens_per_second: per_second(completion),
        requests_per_second: per_second(u64::try_from(records.len()).ok().filter(|n| *n > 0)),
        mean_completion_seconds: times
            .as_ref()
            .map(|t| round_to(t.iter().sum::<f64>() / t.len() as f64, 1000.0)),
        max_completion_seconds: times.map(|t| t.into_iter().fold(f64::MIN, f64::max)),
    }
}

fn round_to(value: f64, scale: f64) -> f64 {
    (value * scale).round() / scale
}

/// The `sha256:<hex>` digest of an image reference.
pub fn image_digest(image: &str) -> Option<String> {
    image
        .rsplit_once('@')
        .map(|(_, digest)| digest.to_string())
        .filter(|d| d.starts_with("sha256:"))
}

/// What the run produced, besides the outputs.
#[derive(Debug, Clone)]
pub struct RunFacts {
    /// Result.
    pub result: AcceptanceResult,
    /// Reason.
    pub reason: String,
    /// Devices.
    pub devices: DeviceInventory,
    /// The engine run.
    pub engine: EngineRecord,
    /// Phase timings.
    pub timings: Timings,
    /// What the judge measured of a serving endpoint (`accept --endpoint`).
    pub serving: Option<super::serving::ServingMeasurement>,
}

/// Assembles the manifest (with `truncated` empty; the evidence writer fills it).
pub fn build_manifest(
    identity: &RunIdentity,
    facts: RunFacts,
    prompt_ids: &[String],
    parsed: &ParsedOutputs,
    verdicts: &[Verdict],
) -> Manifest {
    let RunFacts {
        result,
        reason,
        devices,
        engine,
        timings,
        serving,
    } = facts;
    let mut prompts = prompt_records(prompt_ids, &identity.requested_tokens, parsed, verdicts);
    for record in &mut prompts {
        record.sampling = identity.prompt_sampling.get(&record.id).copied();
    }
    let tokens = token_totals(&prompts, timings.measured_seconds);
    Manifest {
        deployment: identity.deployment.clone(),
        revision: identity.revision.clone(),
        result,
        reason,
        runner_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: identity.started_at.clone(),
        runtime: RuntimeRecord {
            image: identity.image.clone(),
            image_digest: image_digest(&identity.image),
            commit: identity.runtime_commit.clone(),
            template_version: identity.template_version,
            role_images: identity.role_images.clone(),
        },
        checkpoint: CheckpointRecord {
            revision: identity.checkpoint_revision.clone(),
            model_dir: identity.model_dir.clone(),
            model: identity.model.clone(),
            claim: identity.claim.clone(),
            path: identity.path.clone(),
            source_key: identity.source_key.clone(),
        },
        devices,
        layout: (&identity.layout).into(),
        roles: identity.roles.clone(),
        groups: identity.groups.clone(),
        service_owners: identity.service_owners.clone(),
        review: identity.review.clone(),
        engine,
        sampling: Some(identity.sampling),
        timings,
        prompt_ids: prompt_ids.to_vec(),
        prompts,
        tokens,
        output_line_errors: parsed
            .errors
            .iter()
            .map(|e| format!("line {}: {}", e.line, e.message))
            .collect(),
        outputs_encoding: "utf-8".into(),
        truncated: Vec::new(),
        serving,
        placement: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(failed: usize, reason: &str) -> AcceptanceSummary {
        AcceptanceSummary {
            result: AcceptanceResult::Failed,
            prompts: failed,
            passed: 0,
            failed_prompts: (0..failed)
                .map(|i| format!("prompt-with-a-long-identifier-{i:04}"))
                .collect(),
            omitted_failed_prompts: 0,
            evidence: "did-sample-acceptance-abc123".into(),
            reason: reason.into(),
            revision: "abc123".into(),
        }
    }

    #[test]
    fn termination_message_stays_under_the_limit_and_parses() {
        let small = summary(2, "engine exited with code 3");
        let text = small.termination_message();
        assert_eq!(
            serde_json::from_str::<AcceptanceSummary>(&text).unwrap(),
            small
        );
        assert!(
            text.starts_with(r#"{"result":"Failed","prompts":2,"passed":0,"failedPrompts":["#),
            "{text}"
        );

        let big = summary(256, &"x".repeat(10_000));
        let text = big.termination_message();
        assert!(text.len() < TERMINATION_MESSAGE_LIMIT);
        let back: AcceptanceSummary = serde_json::from_str(&text).unwrap();
        assert_eq!(back.failed_prompts.len() + back.omitted_failed_prompts, 256);
        assert!(back.reason.ends_with("[truncated, 10000 bytes in all]"));
        assert!(back.reason.len() <= SUMMARY_REASON_LIMIT);
    }

    #[test]
    fn shorten_respects_char_boundaries() {
        let s = "é".repeat(100);
        let cut = shorten(&s, 61);
        assert!(cut.len() <= 61 && cut.contains("truncated"));
        assert_eq!(shorten("short", 10), "short");
    }

    #[test]
    fn token_totals_need_every_count() {
        let r = |c: Option<u64>, a: Option<u64>| PromptRecord {
            completion_tokens: c,
            accepted_tokens: a,
            prompt_tokens: Some(5),
            ..Default::default()
        };
        let t = token_totals(&[r(Some(10), Some(4)), r(Some(30), None)], Some(2.0));
        assert_eq!(
            (t.prompt_tokens, t.completion_tokens, t.accepted_tokens),
            (Some(10), Some(40), None)
        );
        assert_eq!(t.completion_tokens_per_second, Some(20.0));
        assert_eq!(
            token_totals(&[r(None, None)], Some(1.0)).completion_tokens_per_second,
            None
        );
        let huge = token_totals(
            &[r(Some(u64::MAX), Some(1)), r(Some(1), Some(1))],
            Some(1.0),
        );
        assert_eq!(
            (huge.completion_tokens, huge.accepted_tokens),
            (None, Some(2))
        );
        assert_eq!(huge.completion_tokens_per_second, None);
    }

    #[test]
    fn the_manifest_records_the_section_sampling_and_each_prompts() {
        let spec = crate::acceptance::spec_file::parse_spec(
            "sampling: {temperature: 0.5, seed: 3}\nprompts:\n- {id: a, prompt: x, structuredOutput: {regex: a}}\n- {id: b, prompt: y, sampling: {topP: 0.8}, structuredOutput: {regex: b}}\n",
        )
        .unwrap();
        let identity = RunIdentity {
            sampling: spec.default_sampling(),
            prompt_sampling: prompt_sampling(&spec),
            ..RunIdentity::default()
        };
        let facts = RunFacts {
            result: AcceptanceResult::Passed,
            reason: String::new(),
            devices: Default::default(),
            engine: EngineRecord {
                command: vec![],
                argv: None,
                env: None,
                exit: EngineExit::Exited { code: 0 },
                timeout_seconds: 1,
            },
            timings: Timings::default(),
            serving: None,
        };
        let ids = ["a".to_string(), "b".to_string()];
        let m = build_manifest(&identity, facts, &ids, &ParsedOutputs::default(), &[]);
        let section = EffectiveSampling {
            temperature: 0.5,
            seed: 3,
            ..EffectiveSampling::default()
        };
        assert_eq!(m.sampling, Some(section));
        assert_eq!(m.prompts[0].sampling, Some(section));
        assert_eq!(
            m.prompts[1].sampling,
            Some(EffectiveSampling {
                top_p: 0.8,
                ..section
            })
        );
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(
            json["sampling"],
            serde_json::json!({"temperature": 0.5, "topP": 1.0, "topK": 0, "seed": 3, "repetitionPenalty": 1.0})
        );
        // Manifests written before sampling was recorded still read.
        let mut old = json;
        old.as_object_mut().unwrap().remove("sampling");
        for p in old["prompts"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("sampling");
        }
        let back: Manifest = serde_json::from_value(old).unwrap();
        assert_eq!(back.sampling, None);
        assert_eq!(back.prompts[1].sampling, None);
    }

    #[test]
    fn digest_from_image_reference() {
        let d = "sha256:".to_string() + &"a".repeat(64);
        assert_eq!(
            image_digest(&format!("registry.local:5000/deepinfer@{d}")),
            Some(d)
        );
        assert_eq!(image_digest("deepinfer:latest"), None);
    }
}
