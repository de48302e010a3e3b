//! Acceptance spec files and kept outputs as `accept` and `check` read them.

use std::path::Path;

use anyhow::Context as _;

use super::checker::{CompiledSpec, Verdict};
use super::engine_io;
use crate::api::AcceptanceSpec;

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

/// SHA-256 of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The acceptance spec file's text, refused unless its SHA-256 is `pinned` (when given): the
/// file comes from a ConfigMap that others in the namespace may write, while the hash comes
/// from the pod's own arguments, which nobody can change once the pod exists.
pub fn read_pinned(path: &Path, pinned: Option<&str>) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if let Some(pinned) = pinned {
        let found = sha256_hex(text.as_bytes());
        if !found.eq_ignore_ascii_case(pinned) {
            anyhow::bail!(
                "{}: its SHA-256 is {found}, not the {pinned} the operator pinned in this pod's arguments ({SPEC_SHA256_FLAG}): the run's spec ConfigMap was changed after the operator wrote it, so the run is not judged by it; find who changed it (its managedFields), and run the acceptance again",
                path.display()
            );
        }
    }
    Ok(text)
}

/// The flag that pins the spec file's SHA-256 (`accept`, `run-engine`).
pub const SPEC_SHA256_FLAG: &str = "--spec-sha256";

/// Reads and compiles an acceptance spec file whose SHA-256 is `pinned` (when given); errors
/// name the file and the field.
pub fn load_spec(
    path: &Path,
    pinned: Option<&str>,
) -> anyhow::Result<(AcceptanceSpec, CompiledSpec)> {
    let text = read_pinned(path, pinned)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_file_whose_hash_differs_from_the_pinned_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("spec-pin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("spec.yaml");
        let written = "prompts: [{id: a, prompt: x, structuredOutput: {regex: a}}]\n";
        std::fs::write(&path, written).unwrap();
        let pin = sha256_hex(written.as_bytes());
        assert!(load_spec(&path, Some(&pin)).is_ok());
        assert!(load_spec(&path, None).is_ok(), "local runs pin nothing");
        // Rewritten by someone else: the checks dropped.
        std::fs::write(&path, "prompts: [{id: a, prompt: x}]\n").unwrap();
        let err = load_spec(&path, Some(&pin)).unwrap_err().to_string();
        assert!(err.contains("not the") && err.contains(&pin), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
