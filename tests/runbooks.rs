//! Every condition reason has a runbook entry, so a new reason without one fails the suite.

use std::path::PathBuf;

fn read(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The values of every `pub const NAME: &str = "Value";` in `pub mod reasons { … }`, read from the
/// source so that a constant added anywhere in the module is seen without further registration.
fn reasons() -> Vec<String> {
    let source = read("src/api/status.rs");
    let start = source
        .find("pub mod reasons {")
        .expect("src/api/status.rs has `pub mod reasons {`");
    let body = &source[start..];
    let end = body.find("\n}").expect("`mod reasons` is closed");
    let values: Vec<String> = body[..end]
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \""))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect();
    assert!(values.len() >= 10, "found only {values:?} in mod reasons");
    values
}

/// The runbook entry for `reason`: from its `## <reason>` heading to the next `## `.
fn entry<'a>(runbooks: &'a str, reason: &str) -> Option<&'a str> {
    let heading = format!("\n## {reason}\n");
    let at = runbooks.find(&heading)? + heading.len();
    let rest = &runbooks[at..];
    Some(&rest[..rest.find("\n## ").unwrap_or(rest.len())])
}

#[test]
fn every_reason_has_a_runbook_entry() {
    let runbooks = read("docs/runbooks.md");
    let missing: Vec<String> = reasons()
        .into_iter()
        .filter(|r| entry(&runbooks, r).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/runbooks.md has no `## <Reason>` entry for {missing:?}; add one (what it means, \
         what to look at, how to fix) for each"
    );
}

#[test]
fn every_runbook_entry_says_what_it_means_what_to_look_at_and_how_to_fix() {
    let runbooks = read("docs/runbooks.md");
    for reason in reasons() {
        let Some(text) = entry(&runbooks, &reason) else {
            continue; // reported by every_reason_has_a_runbook_entry
        };
        for part in [
            "**What it means.**",
            "**What to look at.**",
            "**How to fix.**",
        ] {
            assert!(text.contains(part), "runbook entry {reason} lacks {part}");
        }
        assert!(
            text.contains("kubectl"),
            "runbook entry {reason} gives no kubectl command to look with"
        );
    }
}
