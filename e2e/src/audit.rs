//! The bed's API server audit log (every write, metadata only): who wrote what, and when.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// One write an operator replica sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaWrite {
    /// The replica's identity, from its User-Agent `deepinfer-operator/<version> (<identity>)`.
    pub replica: String,
    /// When the API server received it.
    pub at: Timestamp,
    /// create, update, patch, delete.
    pub verb: String,
    /// `<resource>/<name>`.
    pub object: String,
}

/// Writes operator replicas sent in namespace `ns` since `since`, other than to Leases (their
/// election), in the order of the log.
pub fn replica_writes(ns: &str, since: Timestamp) -> Vec<ReplicaWrite> {
    let log = crate::support::bed_dir().join("logs/audit.log");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|e| {
            let replica = e["userAgent"]
                .as_str()?
                .strip_prefix("deepinfer-operator/")?
                .split_once(" (")?
                .1
                .strip_suffix(')')?
                .to_string();
            let object = &e["objectRef"];
            if object["namespace"].as_str() != Some(ns) || object["resource"] == "leases" {
                return None;
            }
            let at = e["requestReceivedTimestamp"]
                .as_str()?
                .parse::<Timestamp>()
                .ok()
                .filter(|t| *t >= since)?;
            Some(ReplicaWrite {
                replica,
                at,
                verb: e["verb"].as_str().unwrap_or("").to_string(),
                object: format!(
                    "{}/{}",
                    object["resource"].as_str().unwrap_or(""),
                    object["name"].as_str().unwrap_or("")
                ),
            })
        })
        .collect()
}
