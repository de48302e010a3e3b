//! Generated docs are current, and the docs' relative links lead somewhere.

use std::path::{Path, PathBuf};

use deepinfer_operator::api::reference::{api_reference, API_REFERENCE_PATH};
use deepinfer_operator::metrics::reference::{
    metrics_reference, prometheus_rules, METRICS_REFERENCE_PATH, PROMETHEUS_RULES_PATH,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Fails unless the committed page at `rel` equals `generated`.
fn assert_current(rel: &str, generated: &str, source: &str) {
    let path = root().join(rel);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{} cannot be read ({err}); run `make docs`", path.display()));
    // A plain assert: a diff of the whole page would bury the one line that says what to do.
    let current = committed == generated;
    assert!(
        current,
        "{} differs from what {source} generates; run `make docs` and commit the result",
        path.display()
    );
}

#[test]
fn api_reference_is_current() {
    assert_current(API_REFERENCE_PATH, &api_reference(), "the CRD schema");
}

#[test]
fn metrics_reference_is_current() {
    assert_current(
        METRICS_REFERENCE_PATH,
        &metrics_reference(),
        "the metric registry",
    );
}

#[test]
fn prometheus_rules_are_current() {
    assert_current(
        PROMETHEUS_RULES_PATH,
        &prometheus_rules(),
        "src/metrics/reference.rs (ALERTS)",
    );
}

/// Targets of inline Markdown links `[text](target)` in `text`.
/// The text outside code: fenced blocks and inline code spans hold no links.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                out.push_str(part);
            }
        }
        out.push('\n');
    }
    out
}

fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let text = prose(text);
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

fn check_links(file: &Path, broken: &mut Vec<String>) {
    let text = std::fs::read_to_string(file).expect("readable Markdown");
    let dir = file.parent().expect("a file has a directory");
    for target in link_targets(&text) {
        let path = target.split('#').next().unwrap_or_default();
        if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
            continue;
        }
        if !dir.join(path).exists() {
            broken.push(format!("{}: {target}", file.display()));
        }
    }
}

#[test]
fn links_inside_code_are_not_links() {
    assert_eq!(
        link_targets("[a](x.md) `self.matches('[a-z](b)')`\n```\n[c](y.md)\n```\n[d](z.md)"),
        ["x.md", "z.md"]
    );
}

#[test]
fn relative_links_in_docs_and_readme_resolve() {
    let mut files = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/ exists") {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    let mut broken = Vec::new();
    for file in &files {
        check_links(file, &mut broken);
    }
    assert!(
        broken.is_empty(),
        "broken relative links:\n{}",
        broken.join("\n")
    );
}

#[test]
fn readme_links_every_doc() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let linked = link_targets(&readme);
    for doc in [
        "docs/architecture.md",
        "docs/api-reference.md",
        "docs/metrics.md",
        "docs/runbooks.md",
        "docs/gitops.md",
        "docs/autoscaling.md",
        "docs/accelerators.md",
        "docs/acceptance.md",
        "docs/out-of-scope.md",
        "docs/security.md",
    ] {
        assert!(
            linked.iter().any(|l| l == doc),
            "README.md does not link {doc}; add it to the layout table"
        );
    }
}
