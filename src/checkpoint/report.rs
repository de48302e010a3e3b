//! Writing a Job's JSON summary to its termination message.

use std::path::{Path, PathBuf};

/// Kubernetes keeps at most this many bytes of a container's termination message.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;
/// Where Kubernetes reads the termination message unless the pod says otherwise.
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";
/// Longest single problem message kept in a termination message.
const MAX_PROBLEM_CHARS: usize = 400;

/// Renders a report as JSON under [`TERMINATION_MESSAGE_LIMIT`] bytes: long problems are
/// shortened, and the tail of the list is replaced by an explicit "…and N more" entry.
/// `render` serialises the report with the given problems.
pub fn fit_problems(problems: &[String], render: impl Fn(Vec<String>) -> String) -> String {
    let full = render(problems.to_vec());
    if full.len() < TERMINATION_MESSAGE_LIMIT {
        return full;
    }
    let short: Vec<String> = problems
        .iter()
        .map(|p| {
            if p.chars().count() > MAX_PROBLEM_CHARS {
                let cut: String = p.chars().take(MAX_PROBLEM_CHARS).collect();
                format!("{cut}…")
            } else {
                p.clone()
            }
        })
        .collect();
    for keep in (0..=short.len()).rev() {
        let mut list = short[..keep].to_vec();
        if keep < short.len() {
            list.push(format!(
                "…and {} more problem(s): see the container log for the full report",
                short.len() - keep
            ));
        }
        let text = render(list);
        if text.len() < TERMINATION_MESSAGE_LIMIT {
            return text;
        }
    }
    render(vec![format!(
        "…{} problem(s): see the container log for the full report",
        short.len()
    )])
}

/// The file to write the termination message to: `--report`, else the default path when it
/// exists (inside a Kubernetes container) and is writable.
pub fn termination_path(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_path_buf());
    }
    let default = Path::new(DEFAULT_TERMINATION_LOG);
    let writable = std::fs::metadata(default)
        .map(|m| !m.permissions().readonly())
        .unwrap_or(false);
    writable.then(|| default.to_path_buf())
}

/// Prints the full report on stdout and writes the fitted one to the termination message.
pub fn emit(full: &str, fitted: &str, explicit: Option<&Path>) -> anyhow::Result<()> {
    use anyhow::Context as _;
    println!("{full}");
    if let Some(path) = termination_path(explicit) {
        std::fs::write(&path, fitted)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_many_problems() {
        let problems: Vec<String> = (0..200)
            .map(|i| format!("model-{i:05}-of-00200.safetensors is listed but missing: re-fetch"))
            .collect();
        let text = fit_problems(&problems, |p| {
            serde_json::json!({"ok": false, "problems": p}).to_string()
        });
        assert!(text.len() < TERMINATION_MESSAGE_LIMIT);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let list = v["problems"].as_array().unwrap();
        let last = list.last().unwrap().as_str().unwrap();
        assert!(last.starts_with("…and "), "{last}");
        let more: usize = last["…and ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(list.len() - 1 + more, 200);
    }

    #[test]
    fn short_report_unchanged() {
        let problems = vec!["a".to_string()];
        let text = fit_problems(&problems, |p| {
            serde_json::json!({"problems": p}).to_string()
        });
        assert_eq!(text, r#"{"problems":["a"]}"#);
    }
}
