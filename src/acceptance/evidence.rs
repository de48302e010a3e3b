//! Evidence: the manifest, every output byte for byte, the verdicts and the engine log tail,
//! size-capped to fit one ConfigMap, written to a ConfigMap or (for tests and local runs) a directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams};

use super::checker::Verdict;
use super::engine_io::TRUNCATION_MARKER;
use super::manifest::{shorten, Manifest, Truncation};
use crate::api::{labels, Component};

/// Evidence keys.
pub const MANIFEST_KEY: &str = "manifest.json";
/// Outputs, byte for byte (in `binaryData` when not UTF-8).
pub const OUTPUTS_KEY: &str = "outputs.jsonl";
/// Per-prompt verdicts.
pub const VERDICTS_KEY: &str = "verdicts.json";
/// Tail of the engine's log.
pub const ENGINE_LOG_KEY: &str = "engine.log";

/// Bytes of data one evidence ConfigMap may carry (the object limit is 1 MiB; metadata needs room).
pub const DATA_BUDGET: usize = 1_000_000;
/// Bytes of engine log kept in the evidence.
pub const LOG_BUDGET: usize = 128 * 1024;
/// Longest verdict reason kept in `verdicts.json`.
pub const REASON_BUDGET: usize = 1024;
/// Bytes `verdicts.json` may take: failing verdicts are kept first.
pub const VERDICTS_BUDGET: usize = 256 * 1024;
/// Longest run reason kept in `manifest.json` (`verdicts.json` has each prompt's reason).
pub const MANIFEST_REASON_BUDGET: usize = 16 * 1024;
/// Bytes each of the manifest's lists (`promptIds`, `prompts`, `outputLineErrors`,
/// `engine.command`) may take; with the reason this keeps the manifest under 256 KiB.
pub const MANIFEST_LIST_BUDGET: usize = 48 * 1024;
/// Longest raw device listing kept in the manifest.
const DEVICE_LISTING_BUDGET: usize = 8 * 1024;
/// Room kept for the manifest's truncation records, which are written after the budget is split.
const MANIFEST_SLACK: usize = 4096;

/// One evidence key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceFile {
    /// Key (file name).
    pub key: String,
    /// Content.
    pub bytes: Vec<u8>,
    /// Not UTF-8: goes into `binaryData`.
    pub binary: bool,
}

/// Evidence keys, sized to fit [`DATA_BUDGET`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Evidence {
    /// The keys, manifest first.
    pub files: Vec<EvidenceFile>,
}

impl Evidence {
    /// Stored size: base64 for binary keys.
    pub fn stored_bytes(&self) -> usize {
        self.files
            .iter()
            .map(|f| stored_len(f.bytes.len(), f.binary))
            .sum()
    }
}

fn stored_len(len: usize, binary: bool) -> usize {
    if binary {
        len.div_ceil(3) * 4
    } else {
        len
    }
}

/// Fits the evidence into [`DATA_BUDGET`], whatever the engine wrote. The manifest's long lists
/// and reason are capped (failing prompts kept first); `verdicts.json` keeps failing verdicts
/// first, within [`VERDICTS_BUDGET`]; outputs are kept whole when they fit, otherwise whole lines
/// from the start, then a marker line starting with [`TRUNCATION_MARKER`]. The log keeps its end,
/// marked at the top. Long reasons are shortened with a marker. Every cut is listed in
/// `manifest.truncated`.
pub fn assemble(
    mut manifest: Manifest,
    outputs: &[u8],
    verdicts: &[Verdict],
    log: &[u8],
    log_dropped: u64,
) -> Evidence {
    manifest.truncated.clear();
    cap_manifest(&mut manifest);

    let mut shortened = 0usize;
    let kept: Vec<Verdict> = verdicts
        .iter()
        .map(|v| {
            let reason = shorten(&v.reason, REASON_BUDGET);
            if reason.len() != v.reason.len() {
                shortened += 1;
            }
            Verdict {
                reason,
                ..v.clone()
            }
        })
        .collect();
    let verdicts_json = cap_verdicts(&kept, &mut manifest.truncated);
    if shortened > 0 {
        let full: usize = verdicts.iter().map(|v| v.reason.len()).sum();
        let kept_len: usize = kept.iter().map(|v| v.reason.len()).sum();
        manifest.truncated.push(Truncation {
            key: VERDICTS_KEY.into(),
            original_bytes: full as u64,
            kept_bytes: kept_len as u64,
            note: format!(
                "{shortened} reasons shortened to {REASON_BUDGET} bytes; counts are of reason text"
            ),
        });
    }

    let engine_log = cap_log(log, log_dropped, &mut manifest.truncated);

    let binary = std::str::from_utf8(outputs).is_err();
    manifest.outputs_encoding = if binary { "binary" } else { "utf-8" }.into();
    let manifest_estimate = serde_json::to_vec_pretty(&manifest)
        .map(|m| m.len())
        .unwrap_or(0)
        + MANIFEST_SLACK;
    let room =
        DATA_BUDGET.saturating_sub(manifest_estimate + verdicts_json.len() + engine_log.len());
    let outputs = cap_outputs(outputs, binary, room, &mut manifest.truncated);

    let manifest_json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    Evidence {
        files: vec![
            EvidenceFile {
                key: MANIFEST_KEY.into(),
                bytes: manifest_json,
                binary: false,
            },
            EvidenceFile {
                key: OUTPUTS_KEY.into(),
                bytes: outputs,
                binary,
            },
            EvidenceFile {
                key: VERDICTS_KEY.into(),
                bytes: verdicts_json,
                binary: false,
            },
            EvidenceFile {
                key: ENGINE_LOG_KEY.into(),
                bytes: engine_log,
                binary: false,
            },
        ],
    }
}

/// Which items fit `budget` bytes, given each item's size: those for which `first` holds come
/// first, then the others, each group in order up to its first item that no longer fits.
fn keep_within(sizes: &[usize], first: impl Fn(usize) -> bool, budget: usize) -> Vec<bool> {
    let mut keep = vec![false; sizes.len()];
    let mut used = 0usize;
    for group in [true, false] {
        for (i, &size) in sizes.iter().enumerate() {
            if first(i) != group {
                continue;
            }
            if used + size > budget {
                break;
            }
            used += size;
            keep[i] = true;
        }
    }
    keep
}

/// `verdicts.json`: a JSON array with one verdict per line, failing verdicts kept first within
/// [`VERDICTS_BUDGET`]; what was left out is recorded.
fn cap_verdicts(verdicts: &[Verdict], truncated: &mut Vec<Truncation>) -> Vec<u8> {
    const FRAME: usize = "[\n\n]\n".len();
    let lines: Vec<String> = verdicts
        .iter()
        .map(|v| serde_json::to_string(v).unwrap_or_default())
        .collect();
    let sizes: Vec<usize> = lines.iter().map(|l| l.len() + ",\n".len()).collect();
    let keep = keep_within(&sizes, |i| !verdicts[i].passed, VERDICTS_BUDGET - FRAME);
    let kept: Vec<&str> = lines
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(l, _)| l.as_str())
        .collect();
    let json = format!("[\n{}\n]\n", kept.join(",\n")).into_bytes();
    if kept.len() < lines.len() {
        let failures = verdicts.iter().filter(|v| !v.passed).count();
        let kept_failures = verdicts
            .iter()
            .zip(&keep)
            .filter(|(v, k)| **k && !v.passed)
            .count();
        truncated.push(Truncation {
            key: VERDICTS_KEY.into(),
            original_bytes: (sizes.iter().sum::<usize>() + FRAME) as u64,
            kept_bytes: json.len() as u64,
            note: format!(
                "kept {} of {} verdicts: failures first ({kept_failures} of {failures} kept), then passes; the summary counts every verdict",
                kept.len(),
                verdicts.len()
            ),
        });
    }
    json
}

/// Caps the manifest's reason, raw device listing and long lists, recording each cut.
fn cap_manifest(manifest: &mut Manifest) {
    let mut cuts = Vec::new();
    let reason = shorten(&manifest.reason, MANIFEST_REASON_BUDGET);
    if reason.len() != manifest.reason.len() {
        cuts.push(Truncation {
            key: MANIFEST_KEY.into(),
            original_bytes: manifest.reason.len() as u64,
            kept_bytes: reason.len() as u64,
            note: format!(
                "reason: shortened to {MANIFEST_REASON_BUDGET} bytes; {VERDICTS_KEY} has each prompt's reason"
            ),
        });
        manifest.reason = reason;
    }
    if let Some(listing) = manifest.devices.npu_smi.as_mut() {
        let short = shorten(listing, DEVICE_LISTING_BUDGET);
        if short.len() != listing.len() {
            cuts.push(Truncation {
                key: MANIFEST_KEY.into(),
                original_bytes: listing.len() as u64,
                kept_bytes: short.len() as u64,
                note: format!("devices.npuSmi: shortened to {DEVICE_LISTING_BUDGET} bytes"),
            });
            *listing = short;
        }
    }
    let prompts = &mut manifest.prompts;
    cap_list(
        prompts,
        "prompts",
        "failing prompts first",
        |r| !r.passed,
        &mut cuts,
    );
    let ids = &mut manifest.prompt_ids;
    cap_list(ids, "promptIds", "the first ones", |_| true, &mut cuts);
    let errors = &mut manifest.output_line_errors;
    cap_list(
        errors,
        "outputLineErrors",
        "the first ones",
        |_| true,
        &mut cuts,
    );
    let command = &mut manifest.engine.command;
    cap_list(
        command,
        "engine.command",
        "the first arguments",
        |_| true,
        &mut cuts,
    );
    if let Some(argv) = manifest.engine.argv.as_mut() {
        cap_list(
            argv,
            "engine.argv",
            "the first arguments",
            |_| true,
            &mut cuts,
        );
    }
    if let Some(env) = manifest.engine.env.as_mut() {
        let mut entries: Vec<(String, String)> = std::mem::take(env).into_iter().collect();
        cap_list(
            &mut entries,
            "engine.env",
            "the first names",
            |_| true,
            &mut cuts,
        );
        *env = entries.into_iter().collect();
    }
    manifest.truncated.extend(cuts);
}

/// Keeps `items` within [`MANIFEST_LIST_BUDGET`] (as pretty-printed inside the manifest), those
/// for which `first` holds first; records the cut.
fn cap_list<T: serde::Serialize>(
    items: &mut Vec<T>,
    field: &str,
    kept_first: &str,
    first: impl Fn(&T) -> bool,
    cuts: &mut Vec<Truncation>,
) {
    // An item two levels deep: four more spaces on each of its lines, then `,\n` and the indent.
    let sizes: Vec<usize> = items
        .iter()
        .map(|item| {
            let text = serde_json::to_string_pretty(item).unwrap_or_default();
            text.len() + 4 * (text.matches('\n').count() + 1) + 6
        })
        .collect();
    let total: usize = sizes.iter().sum();
    if total <= MANIFEST_LIST_BUDGET {
        return;
    }
    let keep = keep_within(&sizes, |i| first(&items[i]), MANIFEST_LIST_BUDGET);
    let kept_bytes: usize = sizes
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(s, _)| s)
        .sum();
    let all = items.len();
    let mut index = 0;
    items.retain(|_| {
        index += 1;
        keep[index - 1]
    });
    cuts.push(Truncation {
        key: MANIFEST_KEY.into(),
        original_bytes: total as u64,
        kept_bytes: kept_bytes as u64,
        note: format!(
            "{field}: kept {} of {all} entries, {kept_first}",
            items.len()
        ),
    });
}

fn cap_log(log: &[u8], already_dropped: u64, truncated: &mut Vec<Truncation>) -> Vec<u8> {
    let text = String::from_utf8_lossy(log);
    let mut start = text.len().saturating_sub(LOG_BUDGET);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let dropped = already_dropped + start as u64;
    if dropped == 0 {
        return text.into_owned().into_bytes();
    }
    let kept = &text[start..];
    truncated.push(Truncation {
        key: ENGINE_LOG_KEY.into(),
        original_bytes: dropped + kept.len() as u64,
        kept_bytes: kept.len() as u64,
        note: "the end of the log is kept".into(),
    });
    format!("[deepinfer-operator: engine log truncated: the first {dropped} bytes are not kept]\n{kept}").into_bytes()
}

fn cap_outputs(
    outputs: &[u8],
    binary: bool,
    room: usize,
    truncated: &mut Vec<Truncation>,
) -> Vec<u8> {
    if stored_len(outputs.len(), binary) <= room {
        return outputs.to_vec();
    }
    let total_lines = outputs
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    // Worst case for the marker line; numbers are at most 20 digits.
    let marker_room = TRUNCATION_MARKER.len() + 160;
    let raw_room = if binary { room / 4 * 3 } else { room }.saturating_sub(marker_room);
    let cut = outputs[..raw_room.min(outputs.len())]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let kept_lines = outputs[..cut]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let mut kept = outputs[..cut].to_vec();
    kept.extend_from_slice(
        format!(
            "{TRUNCATION_MARKER}: kept the first {cut} of {} bytes ({kept_lines} of {total_lines} lines); see manifest.json\n",
            outputs.len()
        )
        .as_bytes(),
    );
    truncated.push(Truncation {
        key: OUTPUTS_KEY.into(),
        original_bytes: outputs.len() as u64,
        kept_bytes: cut as u64,
        note: format!(
            "whole lines from the start ({kept_lines} of {total_lines}), then a marker line"
        ),
    });
    kept
}

/// Where evidence goes.
#[derive(Debug, Clone)]
pub enum EvidenceTarget {
    /// A ConfigMap the operator created before the run, owned by the deployment: replaced by
    /// name (get, then update with its resourceVersion). The judge may not create ConfigMaps.
    ConfigMap {
        /// Name.
        name: String,
        /// Namespace; `None` uses the client's default (the pod's namespace in-cluster).
        namespace: Option<String>,
        /// Owning DeepInferDeployment: name and uid.
        owner: (String, String),
        /// Revision label value.
        revision: String,
    },
    /// Files in a directory.
    Dir(PathBuf),
}

/// The evidence ConfigMap object.
pub fn configmap(
    name: &str,
    owner: &(String, String),
    revision: &str,
    evidence: &Evidence,
) -> ConfigMap {
    let mut data = BTreeMap::new();
    let mut binary_data = BTreeMap::new();
    for f in &evidence.files {
        if f.binary {
            binary_data.insert(f.key.clone(), ByteString(f.bytes.clone()));
        } else {
            data.insert(
                f.key.clone(),
                String::from_utf8_lossy(&f.bytes).into_owned(),
            );
        }
    }
    let labels = BTreeMap::from([
        (labels::DEPLOYMENT.to_string(), owner.0.clone()),
        (labels::REVISION.to_string(), revision.to_string()),
        Component::Evidence.label(),
        (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
    ]);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{}/v1alpha1", crate::api::GROUP),
                kind: "DeepInferDeployment".into(),
                name: owner.0.clone(),
                uid: owner.1.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        binary_data: (!binary_data.is_empty()).then_some(binary_data),
        ..ConfigMap::default()
    }
}

/// Writes the evidence; returns where it went (ConfigMap name or directory).
pub async fn write(target: &EvidenceTarget, evidence: &Evidence) -> anyhow::Result<String> {
    match target {
        EvidenceTarget::Dir(dir) => {
            tokio::fs::create_dir_all(dir)
                .await
                .with_context(|| format!("creating {}", dir.display()))?;
            for f in &evidence.files {
                let path = dir.join(&f.key);
                tokio::fs::write(&path, &f.bytes)
                    .await
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(dir.display().to_string())
        }
        EvidenceTarget::ConfigMap {
            name,
            namespace,
            owner,
            revision,
        } => {
            let client = kube::Client::try_default()
                .await
                .context("connecting to the API server")?;
            let api: Api<ConfigMap> = match namespace {
                Some(ns) => Api::namespaced(client, ns),
                None => Api::default_namespaced(client),
            };
            let cm = configmap(name, owner, revision, evidence);
            let mut attempt = 0;
            loop {
                attempt += 1;
                match replace_own(&api, name, &owner.1, &cm).await {
                    Ok(()) => return Ok(name.clone()),
                    Err(err) if attempt < 4 && retriable(&err) => {
                        tracing::warn!(%err, attempt, "writing the evidence ConfigMap failed; retrying");
                        tokio::time::sleep(Duration::from_secs(2 * attempt)).await;
                    }
                    Err(err) => {
                        return Err(err).with_context(|| format!("writing ConfigMap {name}"))
                    }
                }
            }
        }
    }
}

/// Why the evidence ConfigMap cannot be written, beyond API errors.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("it does not exist (the operator creates it before the run, and the judge may not create ConfigMaps)")]
    Missing,
    #[error("it is not owned by the deployment with uid {0}; not overwriting it")]
    NotOwned(String),
}

/// Writes the evidence into the ConfigMap the operator created, only if its controller is the
/// deployment with `owner_uid`: a JSON merge patch that carries the `resourceVersion` read (so
/// the API server refuses it with a conflict if the object changed since) and sets every key of
/// `cm`, removing the keys it does not have. A patch, not an update: the judge's Role grants
/// `get` and `patch` on that name, and the operator holds no `update` on ConfigMaps to grant.
async fn replace_own(
    api: &Api<ConfigMap>,
    name: &str,
    owner_uid: &str,
    cm: &ConfigMap,
) -> Result<(), WriteError> {
    let existing = api.get_opt(name).await?.ok_or(WriteError::Missing)?;
    let owned = existing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid);
    if !owned {
        return Err(WriteError::NotOwned(owner_uid.to_string()));
    }
    let patch = evidence_patch(&existing, cm);
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(Into::into)
}

/// The merge patch that makes `existing` hold `cm`'s labels, data and binary data (keys `cm`
/// lacks are removed), conditional on `existing`'s `resourceVersion`. The operator's
/// annotations and the owner references stay as they are.
fn evidence_patch(existing: &ConfigMap, cm: &ConfigMap) -> serde_json::Value {
    use serde_json::{Map, Value};
    fn keyed<V: serde::Serialize>(
        new: Option<&BTreeMap<String, V>>,
        old: Option<&BTreeMap<String, V>>,
    ) -> Value {
        let mut out = Map::new();
        for key in old.into_iter().flatten().map(|(k, _)| k) {
            out.insert(key.clone(), Value::Null);
        }
        for (k, v) in new.into_iter().flatten() {
            out.insert(k.clone(), serde_json::to_value(v).unwrap_or(Value::Null));
        }
        Value::Object(out)
    }
    serde_json::json!({
        "metadata": {
            "resourceVersion": existing.metadata.resource_version,
            "labels": cm.metadata.labels,
        },
        "data": keyed(cm.data.as_ref(), existing.data.as_ref()),
        "binaryData": keyed(cm.binary_data.as_ref(), existing.binary_data.as_ref()),
    })
}

fn retriable(err: &WriteError) -> bool {
    match err {
        WriteError::Api(kube::Error::Api(status)) => {
            status.code == 409 || status.code == 429 || status.code >= 500
        }
        WriteError::Api(_) => true,
        WriteError::Missing | WriteError::NotOwned(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acceptance::engine::{EngineExit, Timings};
    use crate::acceptance::engine_io::parse_outputs;
    use crate::acceptance::manifest::{
        build_manifest, AcceptanceResult, EngineRecord, RunFacts, RunIdentity,
    };

    fn manifest() -> Manifest {
        let facts = RunFacts {
            result: AcceptanceResult::Failed,
            reason: "r".into(),
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
        build_manifest(
            &RunIdentity::default(),
            facts,
            &["a".to_string()],
            &Default::default(),
            &[],
        )
    }

    fn file<'a>(e: &'a Evidence, key: &str) -> &'a EvidenceFile {
        e.files.iter().find(|f| f.key == key).unwrap()
    }

    fn manifest_of(e: &Evidence) -> Manifest {
        serde_json::from_slice(&file(e, MANIFEST_KEY).bytes).unwrap()
    }

    #[test]
    fn small_evidence_is_kept_whole() {
        let outputs = b"{\"id\":\"a\",\"text\":\"x\",\"finish_reason\":\"stop\"}\n";
        let v = vec![Verdict {
            id: "a".into(),
            passed: true,
            reason: String::new(),
        }];
        let e = assemble(manifest(), outputs, &v, b"line\n", 0);
        assert_eq!(file(&e, OUTPUTS_KEY).bytes, outputs);
        assert_eq!(file(&e, ENGINE_LOG_KEY).bytes, b"line\n");
        assert!(manifest_of(&e).truncated.is_empty());
    }

    #[test]
    fn large_outputs_keep_whole_lines_and_are_marked() {
        let line = format!(
            "{{\"id\":\"a\",\"text\":\"{}\",\"finish_reason\":\"stop\"}}\n",
            "x".repeat(10_000)
        );
        let outputs = line.repeat(150);
        let e = assemble(manifest(), outputs.as_bytes(), &[], &vec![b'l'; 300_000], 5);
        assert!(e.stored_bytes() <= DATA_BUDGET, "{}", e.stored_bytes());
        let kept = &file(&e, OUTPUTS_KEY).bytes;
        let parsed = parse_outputs(kept);
        assert!(parsed.errors.is_empty());
        assert!(parsed.truncated_at.is_some());
        let body_end = kept[..kept.len() - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        assert!(body_end > 0 && outputs.as_bytes().starts_with(&kept[..body_end]));
        let m = manifest_of(&e);
        let keys: Vec<&str> = m.truncated.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, [ENGINE_LOG_KEY, OUTPUTS_KEY]);
        assert_eq!(m.truncated[0].original_bytes, 300_005);
        assert!(String::from_utf8_lossy(&file(&e, ENGINE_LOG_KEY).bytes)
            .starts_with("[deepinfer-operator: engine log truncated: the first"));
    }

    #[test]
    fn non_utf8_outputs_go_to_binary_data_unaltered() {
        let outputs = b"{\"id\":\"a\",\"text\":\"\xff\",\"finish_reason\":\"stop\"}\n".to_vec();
        let e = assemble(manifest(), &outputs, &[], b"", 0);
        let f = file(&e, OUTPUTS_KEY);
        assert!(f.binary);
        assert_eq!(f.bytes, outputs);
        assert_eq!(manifest_of(&e).outputs_encoding, "binary");
        let cm = configmap("ev", &("did".into(), "uid-1".into()), "rev1", &e);
        assert_eq!(cm.binary_data.unwrap()[OUTPUTS_KEY].0, outputs);
        assert!(!cm.data.as_ref().unwrap().contains_key(OUTPUTS_KEY));
        let labels = cm.metadata.labels.unwrap();
        assert_eq!(labels["deepinfer.io/component"], "evidence");
        assert_eq!(labels["deepinfer.io/revision"], "rev1");
        assert_eq!(cm.metadata.owner_references.unwrap()[0].uid, "uid-1");
    }

    /// A run flooded with outputs for ids not in the spec, malformed lines and a long spec still
    /// fits one ConfigMap; every cut is recorded, and failing prompts are kept first.
    #[test]
    fn a_flood_of_unknown_ids_stays_within_one_configmap() {
        use crate::acceptance::checker::CompiledSpec;
        use crate::acceptance::runner::{overall, OutputsFile};

        let prompts = 1_000;
        let id = |i: usize| format!("prompt-{i:04}-{}", "x".repeat(48));
        let mut spec = String::from("prompts:\n");
        for i in 0..prompts {
            spec.push_str(&format!(
                "- {{id: {}, prompt: p, structuredOutput: {{regex: ok}}}}\n",
                id(i)
            ));
        }
        let compiled =
            CompiledSpec::compile(&crate::acceptance::spec_file::parse_spec(&spec).unwrap())
                .unwrap();
        let mut outputs = String::new();
        for i in 0..prompts {
            let text = if i % 2 == 0 { "bad" } else { "ok" };
            outputs.push_str(&format!(
                "{{\"id\":\"{}\",\"text\":\"{text}\",\"finish_reason\":\"stop\"}}\n",
                id(i)
            ));
        }
        for i in 0..60_000 {
            outputs.push_str(&format!(
                "{{\"id\":\"unknown-{i}\",\"text\":\"ok\",\"finish_reason\":\"stop\"}}\n"
            ));
        }
        for _ in 0..20_000 {
            outputs.push_str("not json at all\n");
        }
        let parsed = parse_outputs(outputs.as_bytes());
        let verdicts = compiled.judge(&parsed);
        let ids: Vec<String> = compiled.prompt_ids().map(str::to_string).collect();
        let exit = EngineExit::Exited { code: 0 };
        let (result, reason) = overall(&exit, OutputsFile::Present, &parsed, &verdicts, prompts);
        let facts = RunFacts {
            result,
            reason,
            devices: Default::default(),
            // An image whose environment and arguments are huge.
            engine: EngineRecord {
                command: vec![],
                argv: Some(vec!["a".repeat(100); 2_000]),
                env: Some(
                    (0..5_000)
                        .map(|i| (format!("VAR_{i:05}"), "v".repeat(100)))
                        .collect(),
                ),
                exit,
                timeout_seconds: 1,
            },
            timings: Timings::default(),
            serving: None,
        };
        let manifest = build_manifest(&RunIdentity::default(), facts, &ids, &parsed, &verdicts);
        let e = assemble(manifest, outputs.as_bytes(), &verdicts, b"log\n", 0);

        assert!(
            e.stored_bytes() <= DATA_BUDGET,
            "{} bytes",
            e.stored_bytes()
        );
        // The API server's ConfigMap limit: keys plus values of data and binaryData, 1 MiB.
        let cm = configmap("ev", &("did".into(), "uid".into()), "rev", &e);
        let data: usize = cm
            .data
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        let binary: usize = cm
            .binary_data
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.0.len())
            .sum();
        assert!(
            data + binary <= 1 << 20,
            "the ConfigMap holds {} bytes",
            data + binary
        );

        // Every failing prompt of the spec is in verdicts.json, whatever else was cut.
        let kept: Vec<Verdict> = serde_json::from_slice(&file(&e, VERDICTS_KEY).bytes).unwrap();
        for i in (0..prompts).step_by(2) {
            assert!(
                kept.iter().any(|v| v.id == id(i) && !v.passed),
                "{} missing",
                id(i)
            );
        }
        // The cuts are recorded, never silent.
        let m = manifest_of(&e);
        let cut: Vec<&str> = m.truncated.iter().map(|t| t.key.as_str()).collect();
        for key in [VERDICTS_KEY, MANIFEST_KEY, OUTPUTS_KEY] {
            assert!(cut.contains(&key), "{key} not recorded: {:#?}", m.truncated);
        }
        for field in ["engine.argv", "engine.env"] {
            assert!(
                m.truncated.iter().any(|t| t.note.starts_with(field)),
                "{field} cut not recorded: {:#?}",
                m.truncated
            );
        }
        assert!(m
            .engine
            .env
            .as_ref()
            .is_some_and(|e| e.contains_key("VAR_00000")));
        let verdict_cut = m.truncated.iter().find(|t| t.key == VERDICTS_KEY).unwrap();
        assert!(
            verdict_cut.note.contains(&format!("of {}", verdicts.len())),
            "{}",
            verdict_cut.note
        );
        assert_eq!(m.result, AcceptanceResult::Failed);
    }

    #[test]
    fn long_reasons_are_shortened_and_recorded() {
        let v = vec![Verdict {
            id: "a".into(),
            passed: false,
            reason: "r".repeat(5000),
        }];
        let e = assemble(manifest(), b"", &v, b"", 0);
        let kept: Vec<Verdict> = serde_json::from_slice(&file(&e, VERDICTS_KEY).bytes).unwrap();
        assert!(kept[0].reason.len() <= REASON_BUDGET);
        assert_eq!(manifest_of(&e).truncated[0].key, VERDICTS_KEY);
    }

    #[test]
    fn the_evidence_patch_is_conditional_and_replaces_every_key() {
        let existing: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "e", "resourceVersion": "42",
                         "annotations": {"deepinfer.io/judgement": "kept"}},
            "data": {"stale.txt": "old", "manifest.json": "{}"},
            "binaryData": {"old.bin": "AA=="}
        }))
        .expect("existing");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "e", "labels": {"app": "x"}},
            "data": {"manifest.json": "{\"ok\":true}"}
        }))
        .expect("new");
        let patch = evidence_patch(&existing, &cm);
        assert_eq!(
            patch,
            serde_json::json!({
                "metadata": {"resourceVersion": "42", "labels": {"app": "x"}},
                "data": {"stale.txt": null, "manifest.json": "{\"ok\":true}"},
                "binaryData": {"old.bin": null}
            })
        );
    }
}
