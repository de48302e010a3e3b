//! Evidence: the manifest, every output byte for byte, the verdicts and the engine log tail,
//! size-capped to fit one ConfigMap, written to a ConfigMap or (for tests and local runs) a directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};

use super::checker::Verdict;
use super::engine_io::TRUNCATION_MARKER;
use super::manifest::{shorten, Manifest, Truncation};
use crate::api::labels;

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
/// Room kept for the manifest's truncation record, which is written after the budget is split.
const MANIFEST_SLACK: usize = 1024;

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

/// Fits the evidence into [`DATA_BUDGET`]. Outputs are kept whole when they fit; otherwise whole
/// lines from the start, then a marker line starting with [`TRUNCATION_MARKER`]. The log keeps its
/// end, marked at the top. Long reasons are shortened with a marker. Every cut is listed in
/// `manifest.truncated`.
pub fn assemble(
    mut manifest: Manifest,
    outputs: &[u8],
    verdicts: &[Verdict],
    log: &[u8],
    log_dropped: u64,
) -> Evidence {
    manifest.truncated.clear();

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
    let verdicts_json = serde_json::to_vec_pretty(&kept).unwrap_or_default();
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
    /// A ConfigMap, created or replaced.
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
        (labels::COMPONENT.to_string(), "evidence".to_string()),
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
                match create_or_replace(&api, name, &cm).await {
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

async fn create_or_replace(
    api: &Api<ConfigMap>,
    name: &str,
    cm: &ConfigMap,
) -> Result<(), kube::Error> {
    match api.create(&PostParams::default(), cm).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            let existing = api.get(name).await?;
            let mut replacement = cm.clone();
            replacement.metadata.resource_version = existing.metadata.resource_version;
            api.replace(name, &PostParams::default(), &replacement)
                .await
                .map(|_| ())
        }
        Err(err) => Err(err),
    }
}

fn retriable(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 409 || status.code == 429 || status.code >= 500,
        _ => true,
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
                exit: EngineExit::Exited { code: 0 },
                timeout_seconds: 1,
            },
            timings: Timings::default(),
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
}
