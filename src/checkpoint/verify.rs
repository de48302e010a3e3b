//! `verify-checkpoint`: checks a checkpoint directory before any worker loads it.
//!
//! Reads `config.json`, `model.safetensors.index.json` and every shard's safetensors header (never
//! the tensor data), the declared licence, and the parallel layouts against the model's shape.
//! Every problem names the file at fault, what is wrong and what to do.

use crate::api::RoleKind;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::fetch::{FetchMarker, MARKER_FILE};
use super::paths::is_safe_relative;
use super::safetensors;

/// The `--revision` value for checkpoints that were put on a volume by hand (no fetch marker).
pub const VOLUME_REVISION: &str = "volume";
/// The sharded checkpoint's index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// A single-file checkpoint, accepted when there is no index.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Licence files read when the model card declares none, most specific first.
pub const LICENSE_FILES: [&str; 4] = ["LICENSE-MODEL", "LICENSE", "LICENSE.txt", "LICENSE.md"];

/// Result of `verify-checkpoint`, written as JSON to stdout and the termination message; the
/// controller parses it from the verification Job's pod.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// True when no problem was found.
    pub ok: bool,
    /// The revision that was expected (`volume` for volume sources).
    #[serde(default)]
    pub revision: String,
    /// Regular files in the checkpoint (dot files such as the fetch marker excluded).
    #[serde(default)]
    pub files: u64,
    /// Their total size in bytes.
    #[serde(default)]
    pub bytes: u64,
    /// The licence the checkpoint declares, if one was found.
    #[serde(default)]
    pub license: Option<String>,
    /// What is wrong, one sentence each, naming the file; possibly cut short with "…and N more".
    #[serde(default)]
    pub problems: Vec<String>,
    /// Which kinds of problem were found (each once, in the order checked), so that a reader
    /// tells a licence mismatch from a damaged checkpoint without reading the sentences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<ProblemKind>,
}

/// Kind of a problem `verify-checkpoint` found.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// Files missing, unreadable or damaged: the directory, fetch marker, `config.json`, shards.
    Files,
    /// The checkpoint's licence could not be determined.
    LicenseUndeclared,
    /// The checkpoint declares a different licence than `spec.model.license`.
    LicenseMismatch,
    /// A role's parallel layout does not fit the model's shape.
    Layout,
}

impl VerifyReport {
    /// Whether the only problem is a licence mismatch (the checkpoint itself is sound).
    pub fn only_license_mismatch(&self) -> bool {
        self.kinds == [ProblemKind::LicenseMismatch]
    }

    fn note(&mut self, kind: ProblemKind, before: usize) {
        if self.problems.len() > before && !self.kinds.contains(&kind) {
            self.kinds.push(kind);
        }
    }
}

pub use crate::api::RoleLayout;

/// What the deployment expects of the checkpoint.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    /// `spec.model.license`, compared case-insensitively with the declared licence.
    pub license: String,
    /// The pinned hub revision, or [`VOLUME_REVISION`].
    pub revision: String,
    /// One layout per role.
    pub layouts: Vec<RoleLayout>,
}

/// Verifies the checkpoint in `dir`. Reads headers and small JSON files only; never panics on
/// bad input.
pub fn verify_dir(dir: &Path, expect: &Expectations) -> VerifyReport {
    let mut report = VerifyReport {
        revision: expect.revision.clone(),
        ..VerifyReport::default()
    };
    if !dir.is_dir() {
        report.problems.push(format!(
            "{}: not a directory (or not mounted): check the volume and path of spec.model.source",
            dir.display()
        ));
        report.note(ProblemKind::Files, 0);
        return report;
    }
    let (files, bytes) = inventory(dir, &mut report.problems);
    report.files = files;
    report.bytes = bytes;

    check_fetch_marker(dir, &expect.revision, &mut report.problems);
    let config = read_config(dir, &mut report.problems);
    check_shards(dir, &mut report.problems);
    report.note(ProblemKind::Files, 0);
    let before = report.problems.len();
    let (license, mismatch) = check_license(dir, &expect.license, &mut report.problems);
    report.license = license;
    report.note(
        if mismatch {
            ProblemKind::LicenseMismatch
        } else {
            ProblemKind::LicenseUndeclared
        },
        before,
    );
    if let Some(config) = &config {
        let before = report.problems.len();
        check_layouts(config, &expect.layouts, &mut report.problems);
        report.note(ProblemKind::Layout, before);
    }
    report.ok = report.problems.is_empty();
    report
}

/// Counts regular files and bytes below `dir`, following symlinks (Hugging Face caches link
/// snapshots to blobs); names starting with `.` are bookkeeping and skipped.
fn inventory(dir: &Path, problems: &mut Vec<String>) -> (u64, u64) {
    fn walk(dir: &Path, depth: u32, acc: &mut (u64, u64), problems: &mut Vec<String>) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                problems.push(format!("{}: cannot be listed: {e}", dir.display()));
                return;
            }
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => {
                    acc.0 += 1;
                    acc.1 += m.len();
                }
                Ok(m) if m.is_dir() && depth < 16 => walk(&path, depth + 1, acc, problems),
                Ok(_) => {}
                Err(e) => problems.push(format!(
                    "{}: cannot be read ({e}); a dangling link or missing file: re-fetch the checkpoint",
                    path.display()
                )),
            }
        }
    }
    let mut acc = (0, 0);
    walk(dir, 0, &mut acc, problems);
    acc
}

/// For hub sources the fetch marker must exist, be complete, name the expected revision, and
/// every file it lists must still have its size.
fn check_fetch_marker(dir: &Path, revision: &str, problems: &mut Vec<String>) {
    if revision == VOLUME_REVISION {
        return;
    }
    let path = dir.join(MARKER_FILE);
    let marker: FetchMarker = match std::fs::read(&path) {
        Err(_) => {
            problems.push(format!(
                "{MARKER_FILE} is missing: revision {revision} was never completely fetched into this directory; run the fetch Job (or pass --revision volume for a hand-made checkpoint)"
            ));
            return;
        }
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(marker) => marker,
            Err(e) => {
                problems.push(format!(
                    "{MARKER_FILE} is not valid ({e}): delete it and re-run the fetch Job"
                ));
                return;
            }
        },
    };
    if !marker.revision.eq_ignore_ascii_case(revision) {
        problems.push(format!(
            "{MARKER_FILE} records revision {} but {revision} is expected: fetch the pinned revision into its own directory",
            marker.revision
        ));
    } else if !marker.complete {
        problems.push(format!(
            "{MARKER_FILE} shows an unfinished fetch of {revision}: re-run the fetch Job"
        ));
    }
    let mut bad = Vec::new();
    for file in &marker.files {
        let size = std::fs::metadata(dir.join(&file.path))
            .map(|m| m.len())
            .ok();
        if size != Some(file.size) {
            bad.push(file.path.as_str());
        }
    }
    if !bad.is_empty() {
        problems.push(format!(
            "{} fetched file(s) are missing or changed size since the fetch ({}): re-run the fetch Job",
            bad.len(),
            name_list(&bad)
        ));
    }
}

fn read_config(dir: &Path, problems: &mut Vec<String>) -> Option<serde_json::Value> {
    let bytes = match std::fs::read(dir.join("config.json")) {
        Ok(bytes) => bytes,
        Err(e) => {
            problems.push(format!(
                "config.json cannot be read ({e}): the directory does not hold a Hugging Face checkpoint; check the source's path"
            ));
            return None;
        }
    };
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) if v.is_object() => Some(v),
        Ok(_) => {
            problems.push("config.json is not a JSON object: re-fetch the checkpoint".into());
            None
        }
        Err(e) => {
            problems.push(format!(
                "config.json is not valid JSON ({e}): re-fetch the checkpoint"
            ));
            None
        }
    }
}

/// Reads the index (or a lone `model.safetensors`) and checks every shard's header and that it
/// holds the tensors the index maps to it.
fn check_shards(dir: &Path, problems: &mut Vec<String>) {
    let index_path = dir.join(INDEX_FILE);
    if !index_path.exists() {
        let single = dir.join(SINGLE_FILE);
        if single.is_file() {
            if let Err(e) = safetensors::read_header(&single) {
                problems.push(format!("{SINGLE_FILE} {e}: re-fetch the checkpoint"));
            }
        } else {
            problems.push(format!(
                "{INDEX_FILE} is missing (and there is no single {SINGLE_FILE}): the checkpoint has no safetensors weights; fetch a safetensors revision"
            ));
        }
        return;
    }
    let index: serde_json::Value = match std::fs::read(&index_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!(
                "{INDEX_FILE} cannot be parsed ({e}): re-fetch the checkpoint"
            ));
            return;
        }
    };
    let Some(weight_map) = index.get("weight_map").and_then(|w| w.as_object()) else {
        problems.push(format!(
            "{INDEX_FILE} has no `weight_map` object: re-fetch the checkpoint"
        ));
        return;
    };
    if weight_map.is_empty() {
        problems.push(format!(
            "{INDEX_FILE} maps no tensors: re-fetch the checkpoint"
        ));
        return;
    }
    let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (tensor, shard) in weight_map {
        match shard.as_str() {
            Some(shard) => by_shard.entry(shard).or_default().push(tensor),
            None => problems.push(format!(
                "{INDEX_FILE}: tensor `{tensor}` maps to a non-string shard: re-fetch the checkpoint"
            )),
        }
    }
    for (shard, tensors) in by_shard {
        if !is_safe_relative(shard) {
            problems.push(format!(
                "{INDEX_FILE} names shard `{shard}` outside the checkpoint directory: the index is corrupt; re-fetch the checkpoint"
            ));
            continue;
        }
        let path = dir.join(shard);
        if !path.is_file() {
            problems.push(format!(
                "{shard} is listed in {INDEX_FILE} but missing: re-fetch the checkpoint"
            ));
            continue;
        }
        let header = match safetensors::read_header(&path) {
            Ok(header) => header,
            Err(e) => {
                problems.push(format!("{shard} {e}: re-fetch the checkpoint"));
                continue;
            }
        };
        let absent: Vec<&str> = tensors
            .into_iter()
            .filter(|t| !header.tensors.contains_key(*t))
            .collect();
        if !absent.is_empty() {
            problems.push(format!(
                "{shard} lacks {} tensor(s) that {INDEX_FILE} maps to it ({}): the shard and the index come from different revisions; re-fetch the checkpoint",
                absent.len(),
                name_list(&absent)
            ));
        }
    }
}

/// The declared licence and where it was found.
#[derive(Debug, PartialEq, Eq)]
struct Declared {
    ids: Vec<String>,
    file: &'static str,
}

/// Finds the declared licence and compares it with `expected`; returns the declared id and
/// whether it differs from `expected`.
fn check_license(dir: &Path, expected: &str, problems: &mut Vec<String>) -> (Option<String>, bool) {
    let declared = match declared_license(dir) {
        Ok(Some(d)) => d,
        Ok(None) => {
            problems.push(format!(
                "README.md has no `license:` front matter and no licence file ({}) was recognised: the checkpoint's licence cannot be confirmed; use a checkpoint whose model card declares it",
                LICENSE_FILES.join(", ")
            ));
            return (None, false);
        }
        Err(problem) => {
            problems.push(problem);
            return (None, false);
        }
    };
    let matched = declared
        .ids
        .iter()
        .find(|id| id.eq_ignore_ascii_case(expected.trim()));
    match matched {
        Some(id) => (Some(id.clone()), false),
        None => {
            let ids = declared.ids.join(", ");
            problems.push(format!(
                "{} declares licence `{ids}` but spec.model.license is `{expected}`: set spec.model.license and the deepinfer.io/license-accepted annotation to the checkpoint's licence after reviewing it, or use a checkpoint under `{expected}`",
                declared.file
            ));
            (Some(ids), true)
        }
    }
}

/// Heuristics, in order: the model card's YAML front matter `license:` (a string or a list;
/// `other` defers to `license_name:`); else the first of [`LICENSE_FILES`] whose text is
/// recognised: "DeepSeek License Agreement" → `deepseek`, "Apache License" + "Version 2.0" →
/// `apache-2.0`, "MIT License" or the MIT grant sentence → `mit`.
fn declared_license(dir: &Path) -> Result<Option<Declared>, String> {
    if let Ok(card) = std::fs::read_to_string(dir.join("README.md")) {
        if let Some(ids) = front_matter_license(&card)? {
            return Ok(Some(Declared {
                ids,
                file: "README.md",
            }));
        }
    }
    for file in LICENSE_FILES {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        if let Some(id) = identify_license_text(&text) {
            return Ok(Some(Declared {
                ids: vec![id.to_string()],
                file,
            }));
        }
    }
    Ok(None)
}

/// The `license:` ids of a model card's front matter, `None` when it declares none.
fn front_matter_license(card: &str) -> Result<Option<Vec<String>>, String> {
    let card = card.strip_prefix('\u{feff}').unwrap_or(card);
    let mut lines = card.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Ok(None);
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines {
        if matches!(line.trim_end(), "---" | "...") {
            closed = true;
            break;
        }
        yaml.push_str(line);
        yaml.push('\n');
    }
    if !closed {
        return Err(
            "README.md front matter has no closing `---` line: fix the model card's metadata block"
                .into(),
        );
    }
    let meta: serde_yaml::Value = serde_yaml::from_str(&yaml).map_err(|e| {
        format!(
            "README.md front matter is not valid YAML ({e}): fix the model card's metadata block"
        )
    })?;
    let as_ids = |v: &serde_yaml::Value| -> Vec<String> {
        match v {
            serde_yaml::Value::String(s) => vec![s.trim().to_string()],
            serde_yaml::Value::Sequence(items) => items
                .iter()
                .filter_map(|i| i.as_str().map(|s| s.trim().to_string()))
                .collect(),
            _ => Vec::new(),
        }
    };
    let mut ids = meta.get("license").map(as_ids).unwrap_or_default();
    ids.retain(|id| !id.is_empty());
    if ids.iter().any(|id| id.eq_ignore_ascii_case("other")) {
        if let Some(name) = meta.get("license_name").and_then(|n| n.as_str()) {
            ids = vec![name.trim().to_string()];
        }
    }
    Ok((!ids.is_empty()).then_some(ids))
}

/// Recognises a licence by its text; see [`declared_license`].
fn identify_license_text(text: &str) -> Option<&'static str> {
    let text = text.to_lowercase();
    if text.contains("deepseek license agreement") {
        Some("deepseek")
    } else if text.contains("apache license") && text.contains("version 2.0") {
        Some("apache-2.0")
    } else if text.contains("mit license")
        || text.contains("permission is hereby granted, free of charge")
    {
        Some("mit")
    } else {
        None
    }
}

/// A positive integer from config.json, at top level or in a nested language-model config.
fn config_value(config: &serde_json::Value, keys: &[&str]) -> Option<(String, u64)> {
    let scopes = [
        Some(config),
        config.get("text_config"),
        config.get("language_config"),
    ];
    scopes
        .into_iter()
        .flatten()
        .find_map(|scope| scope_value(scope, keys))
}

/// The first of `keys` that `scope` holds as a non-negative integer.
fn scope_value(scope: &serde_json::Value, keys: &[&str]) -> Option<(String, u64)> {
    keys.iter().find_map(|key| {
        scope
            .get(*key)
            .and_then(serde_json::Value::as_u64)
            .map(|n| ((*key).to_string(), n))
    })
}

/// The shape one role's layout is checked against: the language model's for `worker`,
/// `prefill` and `decode`, the vision encoder's (`vision_config`) for `vision`.
struct ModelShape {
    /// Where the values are read, for messages: `config.json` or `config.json vision_config`.
    at: &'static str,
    /// Attention heads (key and value).
    heads: Option<(String, u64)>,
    /// Key-value heads, when the config gives them apart from the attention heads.
    kv_heads: Option<(String, u64)>,
    /// Routed experts; `None` for a dense model (and for the vision encoder).
    experts: Option<(String, u64)>,
    /// Layers (transformer blocks) the pipeline stages split.
    layers: Option<(String, u64)>,
}

impl ModelShape {
    fn language(config: &serde_json::Value) -> Self {
        Self {
            at: "config.json",
            heads: config_value(config, &["num_attention_heads"]),
            kv_heads: config_value(config, &["num_key_value_heads"]),
            experts: config_value(
                config,
                &["n_routed_experts", "num_experts", "num_local_experts"],
            ),
            layers: config_value(config, &["num_hidden_layers"]),
        }
    }

    /// The vision encoder's shape; `None` when the checkpoint has no `vision_config`.
    /// Hugging Face vision configs name heads `num_attention_heads` (CLIP, SigLIP, InternViT)
    /// or `num_heads` (Qwen2-VL), and blocks `num_hidden_layers` or `depth`.
    fn vision(config: &serde_json::Value) -> Option<Self> {
        let vision = config.get("vision_config").filter(|v| v.is_object())?;
        Some(Self {
            at: "config.json vision_config",
            heads: scope_value(vision, &["num_attention_heads", "num_heads"]),
            kv_heads: scope_value(vision, &["num_key_value_heads"]),
            experts: None,
            layers: scope_value(vision, &["num_hidden_layers", "depth"]),
        })
    }
}

/// Values of `1..=limit` (at most [`crate::api::MAX_PARALLEL_DEGREE`]) for which `fits` holds,
/// written `1, 2, 4` for a message.
fn fitting_sizes(limit: u64, fits: impl Fn(u64) -> bool) -> String {
    let limit = limit.min(crate::api::MAX_PARALLEL_DEGREE.unsigned_abs().into());
    let sizes: Vec<String> = (1..=limit)
        .filter(|n| fits(*n))
        .map(|n| n.to_string())
        .collect();
    if sizes.is_empty() {
        "none".into()
    } else {
        sizes.join(", ")
    }
}

/// Checks every role's layout against the model. `layouts` are in the order of `spec.roles`
/// (the verify Job passes one `--layout` per role, in that order), so the i-th layout is
/// `spec.roles[i]` in messages.
///
/// Rules, as the serving engines (vLLM, SGLang) require them:
/// - attention heads divisible by `tensor`;
/// - KV heads (`num_key_value_heads`, absent: the attention heads) divisible by `tensor`, or
///   `tensor` divisible by the KV heads: with fewer KV heads than tensor ranks each KV head is
///   replicated on `tensor / kv` ranks (grouped-query attention), any other ratio leaves a rank
///   with part of a head;
/// - at least one layer per pipeline stage (`num_hidden_layers ≥ pipeline`); an uneven split is
///   allowed, as the engines give the remainder to some stages (DeepSeek-V3's 61 layers divide by
///   no pipeline size above 1);
/// - routed experts divisible by `expert`;
/// - the `vision` role against `vision_config` (its own heads and blocks; no experts).
fn check_layouts(config: &serde_json::Value, layouts: &[RoleLayout], problems: &mut Vec<String>) {
    let language = ModelShape::language(config);
    let vision = ModelShape::vision(config);
    if language.heads.is_none() && layouts.iter().any(|l| !RoleKind::Vision.named(&l.role)) {
        problems.push(
            "config.json has no num_attention_heads: the tensor parallel size cannot be checked; use a complete config.json".into(),
        );
    }
    for (i, l) in layouts.iter().enumerate() {
        let at = format!("spec.roles[{i}].parallel");
        if !RoleKind::Vision.named(&l.role) {
            check_layout(&language, l, &at, problems);
            continue;
        }
        let Some(vision) = &vision else {
            problems.push(format!(
                "config.json has no vision_config: the checkpoint has no vision encoder for role vision (spec.roles[{i}]); remove the vision role or use a vision-language checkpoint"
            ));
            continue;
        };
        if vision.heads.is_none() {
            problems.push(format!(
                "{} has neither num_attention_heads nor num_heads: {at}.tensor of role vision cannot be checked; use a complete config.json",
                vision.at
            ));
        }
        if l.expert > 1 {
            problems.push(format!(
                "{at}.expert of role vision is {}, but the vision encoder ({}) has no experts: set {at}.expert to 1",
                l.expert, vision.at
            ));
        }
        check_layout(vision, l, &at, problems);
    }
}

/// One role's layout `l` (fields at `at`, `spec.roles[i].parallel`) against `shape`.
fn check_layout(shape: &ModelShape, l: &RoleLayout, at: &str, problems: &mut Vec<String>) {
    let (role, tensor) = (&l.role, l.tensor);
    let mut heads_fit = true;
    if let Some((key, heads)) = shape.heads.as_ref().filter(|(_, h)| *h % tensor != 0) {
        heads_fit = false;
        problems.push(format!(
            "{}: {key} {heads} is not divisible by {at}.tensor {tensor} (role {role}): each tensor rank needs whole attention heads; set {at}.tensor to one of {}",
            shape.at,
            fitting_sizes(*heads, |t| *heads % t == 0)
        ));
    }
    if let (true, Some((key, kv)), Some((_, heads))) = (heads_fit, &shape.kv_heads, &shape.heads) {
        let (kv, heads) = (*kv, *heads);
        if kv > 0 && kv % tensor != 0 && tensor % kv != 0 {
            problems.push(format!(
                "{}: {key} {kv} and {at}.tensor {tensor} (role {role}) do not divide one another: a tensor rank would hold part of a KV head (KV heads are split over the ranks when {tensor} divides {kv}, or each is replicated on a whole number of ranks when {kv} divides {tensor}); set {at}.tensor to one of {}",
                shape.at,
                fitting_sizes(heads, |t| heads % t == 0 && (kv % t == 0 || t % kv == 0))
            ));
        }
    }
    if let Some((key, experts)) = shape.experts.as_ref().filter(|(_, e)| *e % l.expert != 0) {
        problems.push(format!(
            "{}: {key} {experts} is not divisible by {at}.expert {} (role {role}): each expert rank needs whole experts; set {at}.expert to one of {}",
            shape.at,
            l.expert,
            fitting_sizes(*experts, |e| *experts % e == 0)
        ));
    }
    if let Some((key, layers)) = shape.layers.as_ref().filter(|(_, n)| *n < l.pipeline) {
        problems.push(format!(
            "{}: {key} {layers} is fewer than {at}.pipeline {} (role {role}): every pipeline stage needs at least one layer; set {at}.pipeline to at most {layers}",
            shape.at, l.pipeline
        ));
    }
}

/// `a, b, c` or `a, b, c and N more`, to keep messages short.
fn name_list(names: &[&str]) -> String {
    const SHOWN: usize = 3;
    let head = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        format!("{head} and {} more", names.len() - SHOWN)
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_parses() {
        let l: RoleLayout = "decode=8x1x2x16".parse().unwrap();
        assert_eq!(
            (l.role.as_str(), l.tensor, l.pipeline, l.data, l.expert),
            ("decode", 8, 1, 2, 16)
        );
        for bad in [
            "worker",
            "worker=8x1x2",
            "worker=8x0x1x1",
            "=1x1x1x1",
            "w=axbxcxd",
        ] {
            assert!(bad.parse::<RoleLayout>().is_err(), "{bad}");
        }
    }

    #[test]
    fn front_matter() {
        let card = "---\nlicense: MIT\nlibrary_name: transformers\n---\n# Model\n";
        assert_eq!(
            front_matter_license(card).unwrap(),
            Some(vec!["MIT".into()])
        );
        let other = "\u{feff}---\r\nlicense: other\r\nlicense_name: deepseek\r\n---\r\n";
        assert_eq!(
            front_matter_license(other).unwrap(),
            Some(vec!["deepseek".into()])
        );
        let list = "---\nlicense:\n  - mit\n  - apache-2.0\n---\n";
        assert_eq!(front_matter_license(list).unwrap().unwrap().len(), 2);
        assert_eq!(front_matter_license("# no front matter\n").unwrap(), None);
        assert_eq!(front_matter_license("---\ntags: [a]\n---\n").unwrap(), None);
        assert!(front_matter_license("---\nlicense: mit\n")
            .unwrap_err()
            .contains("closing"));
        assert!(front_matter_license("---\nlicense: [\n---\n")
            .unwrap_err()
            .contains("YAML"));
    }

    #[test]
    fn licence_texts() {
        assert_eq!(
            identify_license_text("MIT License\n\nCopyright (c) 2023 DeepSeek"),
            Some("mit")
        );
        assert_eq!(
            identify_license_text("                                 Apache License\n                           Version 2.0, January 2004"),
            Some("apache-2.0")
        );
        assert_eq!(
            identify_license_text("DEEPSEEK LICENSE AGREEMENT\n\nVersion 1.0, 23 October 2023"),
            Some("deepseek")
        );
        assert_eq!(identify_license_text("All rights reserved."), None);
    }
}
