//! Every condition and event reason has a runbook entry, so a new reason without one fails the
//! suite.

use deepinfer_operator::api::Reason;

use std::path::PathBuf;

fn read(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every condition and event reason the operator writes ([`Reason::ALL`]): a value added to the
/// enum is seen without further registration.
fn reasons() -> Vec<String> {
    Reason::ALL.iter().map(|r| r.as_str().to_string()).collect()
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
