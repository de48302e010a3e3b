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
