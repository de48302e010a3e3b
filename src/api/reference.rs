//! The API reference in Markdown, rendered from the CRD's OpenAPI schema so that it cannot drift
//! from what the API server enforces. Printed by `deepinfer-operator docs api-reference` and
//! committed as `docs/api-reference.md` (`make docs`); a test checks the committed copy.

use std::fmt::Write as _;

use kube::CustomResourceExt;
use serde_json::Value;

use super::DeepInferRoleDefinition;

/// Path of the committed reference, relative to the repository root.
pub const API_REFERENCE_PATH: &str = "docs/api-reference.md";

/// The API reference of `DeepInferDeployment`, then of `DeepInferRole`.
pub fn api_reference() -> String {
    let crd = super::curated_crd();
    let role = serde_json::to_value(DeepInferRoleDefinition::crd())
        .expect("a CRD always serialises to JSON");
    format!("{}\n{}", render(&crd), render(&role))
}

/// Renders the reference of a CRD given as JSON. Output depends only on the CRD: object keys are
/// visited in sorted order, so the same schema always gives the same bytes.
pub fn render(crd: &Value) -> String {
    let spec = &crd["spec"];
    let kind = text(&spec["names"]["kind"]);
    let mut out = String::new();
    let _ = writeln!(out, "# API reference: {kind}\n");
    let _ = writeln!(
        out,
        "<!-- Generated from the CRD schema by `deepinfer-operator docs api-reference` (`make docs`); do not edit. -->\n"
    );
    let _ = writeln!(
        out,
        "Every field of the resource, as the CustomResourceDefinition in `crds/` declares it: type, \
         whether it is required, its default, its bounds, and the validation rules (CEL) with the \
         message each prints. The API server enforces the rules at admission (Kubernetes \
         1.29 and later); the operator checks the same rules itself, so an object stored before a \
         rule existed stalls alone too (a violation shows as `Stalled=True`, reason `InvalidSpec`; \
         see [runbooks](runbooks.md)).\n"
    );
    resource_table(&mut out, spec);
    for version in spec["versions"].as_array().into_iter().flatten() {
        let name = text(&version["name"]);
        let _ = writeln!(out, "## Version `{name}`\n");
        printer_columns(&mut out, version);
        let schema = &version["schema"]["openAPIV3Schema"];
        // Rules on the whole object (they may read `metadata.name`).
        let mut rules = Vec::new();
        for rule in schema["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            rules.push((
                "the resource".to_string(),
                text(&rule["rule"]),
                text(&rule["message"]),
            ));
        }
        rule_list(&mut out, &rules);
        for (field, node) in sorted(&schema["properties"]) {
            objects(&mut out, field, node);
        }
    }
    // One trailing newline, whatever the last section wrote.
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}

fn resource_table(out: &mut String, spec: &Value) {
    let names = &spec["names"];
    let versions: Vec<String> = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| code(&text(&v["name"])))
        .collect();
    let short: Vec<String> = names["shortNames"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| code(&text(s)))
        .collect();
    let mut subresources: Vec<String> = spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| v["subresources"].as_object().into_iter().flatten())
        .map(|(k, _)| code(k))
        .collect();
    subresources.sort();
    subresources.dedup();
    let rows = [
        ("Group", code(&text(&spec["group"]))),
        ("Version", versions.join(", ")),
        ("Kind", code(&text(&names["kind"]))),
        ("Plural", code(&text(&names["plural"]))),
        ("Short names", short.join(", ")),
        ("Scope", text(&spec["scope"])),
        ("Subresources", subresources.join(", ")),
    ];
    out.push_str("| | |\n|---|---|\n");
    for (k, v) in rows {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    out.push('\n');
}

fn printer_columns(out: &mut String, version: &Value) {
    let Some(columns) = version["additionalPrinterColumns"].as_array() else {
        return;
    };
    out.push_str("Columns of `kubectl get`:\n\n| Column | Type | JSONPath |\n|---|---|---|\n");
    for c in columns {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            cell(&text(&c["name"])),
            cell(&text(&c["type"])),
            cell(&code(&text(&c["jsonPath"])))
        );
    }
    out.push('\n');
}

/// Writes one section per object in the subtree at `path`, parents before children.
fn objects(out: &mut String, path: &str, node: &Value) {
    if let Some(items) = node.get("items") {
        if node["type"] == "array" {
            return objects(out, &format!("{path}[]"), items);
        }
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        return objects(out, &format!("{path}.<key>"), values);
    }
    let Some(properties) = node.get("properties").filter(|p| p.is_object()) else {
        return;
    };
    let _ = writeln!(out, "### {}\n", code(path));
    if let Some(description) = node.get("description") {
        let _ = writeln!(out, "{}\n", prose(&text(description)));
    }
    let required: Vec<&str> = node["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    out.push_str(
        "| Field | Type | Required | Default | Constraints | Description |\n|---|---|---|---|---|---|\n",
    );
    for (field, child) in sorted(properties) {
        let child_path = format!("{path}.{field}");
        let name = match object_section(&child_path, child) {
            Some(section) => format!("[{}](#{})", code(field), anchor(&section)),
            None => code(field),
        };
        let default = child
            .get("default")
            .map(|d| code(&compact(d)))
            .unwrap_or_default();
        let description = child.get("description").map(text).unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&name),
            cell(&type_of(child)),
            if required.contains(&field) {
                "yes"
            } else {
                "no"
            },
            cell(&default),
            cell(&constraints(child).join("; ")),
            cell(&prose(&description)),
        );
    }
    out.push('\n');
    let mut rules = Vec::new();
    collect_rules(&mut rules, path, node, true);
    let rules: Vec<_> = rules
        .into_iter()
        .map(|(at, rule, message)| (code(&at), rule, message))
        .collect();
    rule_list(out, &rules);
    for (field, child) in sorted(properties) {
        objects(out, &format!("{path}.{field}"), child);
    }
}

/// The list of validation rules, each with where it applies (already Markdown) and the message it
/// prints.
fn rule_list(out: &mut String, rules: &[(String, String, String)]) {
    if rules.is_empty() {
        return;
    }
    out.push_str("Validation rules (CEL):\n\n");
    for (at, rule, message) in rules {
        let _ = writeln!(out, "- on {}: {}  \n  {}", at, code(rule), prose(message));
    }
    out.push('\n');
}

/// Rules on this object and on its fields that get no section of their own (scalars, lists of
/// scalars, the list around an object item).
fn collect_rules(rules: &mut Vec<(String, String, String)>, path: &str, node: &Value, own: bool) {
    if own || object_section(path, node).is_none() || node["type"] == "array" {
        for rule in node["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            rules.push((
                path.to_string(),
                text(&rule["rule"]),
                text(&rule["message"]),
            ));
        }
    }
    if own {
        for (field, child) in sorted(&node["properties"]) {
            collect_rules(rules, &format!("{path}.{field}"), child, false);
        }
    } else if let (Some("array"), Some(items)) = (node["type"].as_str(), node.get("items")) {
        collect_rules(rules, &format!("{path}[]"), items, false);
    }
}

/// The section path an object-typed field is documented under, if it has one.
fn object_section(path: &str, node: &Value) -> Option<String> {
    if node["type"] == "array" {
        return node
            .get("items")
            .and_then(|items| object_section(&format!("{path}[]"), items));
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        return object_section(&format!("{path}.<key>"), values);
    }
    node.get("properties")
        .filter(|p| p.is_object())
        .map(|_| path.to_string())
}

fn type_of(node: &Value) -> String {
    if node["x-kubernetes-int-or-string"] == true {
        return "integer or string".into();
    }
    let base = match node["type"].as_str() {
        Some("array") => format!("array of {}", type_of(&node["items"])),
        Some("object") if node["x-kubernetes-preserve-unknown-fields"] == true => {
            "object (any JSON, kept as given)".into()
        }
        Some("object") => match node.get("additionalProperties").filter(|v| v.is_object()) {
            Some(values) => format!("map of {}", type_of(values)),
            None => "object".into(),
        },
        Some(t) => t.to_string(),
        None => "any".into(),
    };
    match node["format"].as_str() {
        Some(format) => format!("{base} ({format})"),
        None => base,
    }
}

fn constraints(node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(values) = node["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| code(&compact(v))).collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    if let Some(b) = bounds(node, "minLength", "maxLength") {
        out.push(format!("length {b}"));
    }
    if let Some(b) = bounds(node, "minimum", "maximum") {
        out.push(format!("value {b}"));
    }
    if let Some(b) = bounds(node, "minItems", "maxItems") {
        out.push(format!("items {b}"));
    }
    if let Some(b) = bounds(node, "minProperties", "maxProperties") {
        out.push(format!("entries {b}"));
    }
    if let Some(pattern) = node["pattern"].as_str() {
        out.push(format!("matches {}", code(pattern)));
    }
    if node["x-kubernetes-list-type"] == "map" {
        let keys: Vec<String> = node["x-kubernetes-list-map-keys"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| code(&text(k)))
            .collect();
        out.push(format!("list-map keyed by {}", keys.join(", ")));
    } else if let Some(kind) = node["x-kubernetes-list-type"].as_str() {
        out.push(format!("list type {}", code(kind)));
    }
    out
}

/// `1–256`, `≥ 1` or `≤ 64`.
fn bounds(node: &Value, min: &str, max: &str) -> Option<String> {
    match (node.get(min), node.get(max)) {
        (Some(lo), Some(hi)) => Some(format!("{}–{}", compact(lo), compact(hi))),
        (Some(lo), None) => Some(format!("≥ {}", compact(lo))),
        (None, Some(hi)) => Some(format!("≤ {}", compact(hi))),
        (None, None) => None,
    }
}

/// Object entries sorted by key (deterministic whatever the map's own order).
fn sorted(node: &Value) -> Vec<(&str, &Value)> {
    let mut entries: Vec<(&str, &Value)> = node
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

/// A JSON value on one line; whole floats (schemars writes `1024.0`) as integers.
fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// An inline code span that survives backticks in its content.
fn code(s: &str) -> String {
    let longest = s
        .split(|c| c != '`')
        .map(str::len)
        .max()
        .unwrap_or_default();
    let fence = "`".repeat(longest + 1);
    if longest == 0 {
        format!("{fence}{s}{fence}")
    } else {
        format!("{fence} {s} {fence}")
    }
}

/// Description text on one line, with `<` and `>` outside code spans escaped so that Markdown
/// renderers do not take `<revision>` for an HTML tag.
fn prose(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(one_line.len());
    let mut in_code = false;
    for c in one_line.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// A table cell: pipes escaped (also inside code spans, as GitHub Markdown requires).
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// GitHub's heading anchor: lower case, punctuation other than `-` and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_field_and_rule_is_documented() {
        let doc = api_reference();
        for section in [
            "### `spec`",
            "### `spec.model.source.hub`",
            "### `spec.roles[]`",
            "### `spec.roles[].parallel`",
            "### `status.conditions[]`",
        ] {
            assert!(doc.contains(section), "missing section {section}");
        }
        // Bounds, defaults, enums and CEL messages come from the schema.
        assert!(doc.contains("one of `NVIDIA`, `Ascend`"));
        assert!(
            doc.contains("| `timeoutSeconds` | integer (int32) | no | `1800` | value 1–86400 |")
        );
        assert!(doc.contains("spec.runtime.image must be pinned by digest"));
        assert!(doc.contains("list-map keyed by `type`"));
        assert!(doc.contains("- on the resource: `size(self.metadata.name) <= 36`"));
        assert!(
            doc.contains("- on `spec.model.source.hub.revision`: `self.matches('^[0-9a-f]{40}$')`")
        );
    }

    #[test]
    fn rendering_is_deterministic() {
        assert_eq!(api_reference(), api_reference());
    }

    #[test]
    fn markdown_helpers_escape_what_renderers_misread() {
        assert_eq!(code("a`b"), "`` a`b ``");
        assert_eq!(
            prose("dir <name>/x\n  and `<kept>`"),
            "dir &lt;name&gt;/x and `<kept>`"
        );
        assert_eq!(cell("`a || b`"), "`a \\|\\| b`");
        assert_eq!(anchor("`spec.roles[].parallel`"), "specrolesparallel");
        assert_eq!(compact(&serde_json::json!(1024.0)), "1024");
    }
}
