//! Faults the simulated node agent injects, as typed values read from annotations in this one
//! place. The agent and the tests share the annotation names, so a test that injects a fault and
//! the agent that honours it cannot drift apart.
//!
//! Pod faults act on the pod's containers; reported containers (not executed) and executed ones
//! (the project's own binary, injected runners) honour the faults that make sense for them, see
//! the table in `e2e/README.md`. Node faults act on a simulated node.

use std::collections::BTreeMap;
use std::time::Duration;

/// Pod: its reported containers terminate with this exit code (restart policy honoured).
pub const POD_FAIL: &str = "sim.deepinfer.io/fail";
/// Pod: `"true"` keeps all its containers unready.
pub const POD_NOT_READY: &str = "sim.deepinfer.io/not-ready";
/// Pod: each executed container is killed (SIGKILL, exit 137) this many seconds after it starts.
pub const POD_KILL_AFTER_SECONDS: &str = "sim.deepinfer.io/kill-after-seconds";
/// Pod: each executed container is OOM-killed (SIGKILL, exit 137, reason `OOMKilled`) this many
/// seconds after it starts.
pub const POD_OOM_AFTER_SECONDS: &str = "sim.deepinfer.io/oom-after-seconds";
/// Pod: its containers wait this many seconds in `ContainerCreating` before their first start.
pub const POD_SLOW_START_SECONDS: &str = "sim.deepinfer.io/slow-start-seconds";
/// Node: `"true"` stops its lease renewals and heartbeats (a lost kubelet).
pub const NODE_NOT_READY: &str = "sim.deepinfer.io/not-ready";
/// Namespace: pod faults for pods of that namespace the test does not create itself (e.g. a
/// Job's pods): a JSON list of [`PodFaultRule`]s. A pod matching a rule's selector is treated
/// as if it carried the rule's annotations (its own annotations win).
pub const NAMESPACE_POD_FAULTS: &str = "sim.deepinfer.io/pod-faults";

/// Fault annotations for the pods of a namespace whose labels match `selector`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodFaultRule {
    /// Labels a pod must carry (all of them).
    pub selector: BTreeMap<String, String>,
    /// Pod fault annotations (the `POD_*` names) and their values.
    pub annotations: BTreeMap<String, String>,
}

/// The annotations a pod's faults are read from: its own, plus those of every rule of its
/// namespace (annotation [`NAMESPACE_POD_FAULTS`]) whose selector its labels match. Rules that
/// do not parse are ignored.
pub fn effective_annotations(
    pod_annotations: Option<&BTreeMap<String, String>>,
    pod_labels: Option<&BTreeMap<String, String>>,
    namespace_annotations: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let rules: Vec<PodFaultRule> = namespace_annotations
        .and_then(|a| a.get(NAMESPACE_POD_FAULTS))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default();
    for rule in rules {
        let matches = rule
            .selector
            .iter()
            .all(|(k, v)| pod_labels.and_then(|l| l.get(k)) == Some(v));
        if matches {
            out.extend(rule.annotations);
        }
    }
    out.extend(pod_annotations.cloned().unwrap_or_default());
    out
}

/// How an executed container is ended by a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// SIGKILL, reported as exit 137 with reason `Error`.
    Signal,
    /// SIGKILL, reported as exit 137 with reason `OOMKilled`.
    OutOfMemory,
}

/// The faults one pod carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFaults {
    /// Reported containers fail with this exit code.
    pub fail_exit_code: Option<i32>,
    /// Every container stays unready.
    pub not_ready: bool,
    /// Executed containers are killed this long after they start, and how.
    pub kill: Option<(Duration, Kill)>,
    /// Containers wait this long before their first start.
    pub slow_start: Option<Duration>,
}

impl PodFaults {
    /// The faults named by a pod's annotations. A value that does not parse still injects the
    /// fault with a safe default (exit code 1, zero seconds), so a typo never silently disables it.
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let get = |key: &str| annotations.and_then(|a| a.get(key)).map(|v| v.trim());
        let seconds = |key: &str| {
            get(key).map(|v| Duration::from_secs_f64(v.parse::<f64>().unwrap_or(0.0).max(0.0)))
        };
        let kill = seconds(POD_OOM_AFTER_SECONDS)
            .map(|d| (d, Kill::OutOfMemory))
            .or_else(|| seconds(POD_KILL_AFTER_SECONDS).map(|d| (d, Kill::Signal)));
        Self {
            // Anything that is not an exit code still means "fail"; 1 is what a shell reports.
            fail_exit_code: get(POD_FAIL).map(|v| v.parse().unwrap_or(1)),
            not_ready: get(POD_NOT_READY) == Some("true"),
            kill,
            slow_start: seconds(POD_SLOW_START_SECONDS),
        }
    }
}

/// Whether an image cannot be pulled: its registry host is under the `.invalid` top-level domain,
/// which never resolves (RFC 6761). Its containers never run; they wait in `ImagePullBackOff`,
/// as a kubelet's would. E.g. `registry.invalid/deepinfer-operator:dev`.
pub fn unpullable_image(image: &str) -> bool {
    let Some((host, _)) = image.split_once('/') else {
        return false;
    };
    let host = host.split(':').next().unwrap_or(host);
    host.ends_with(".invalid") || host == "invalid"
}

/// Whether a node's annotations say it is lost.
pub fn node_not_ready(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(NODE_NOT_READY))
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> PodFaults {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PodFaults::of(Some(&map))
    }

    #[test]
    fn namespace_rules_reach_the_pods_they_select_and_a_pods_own_annotations_win() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let rules = serde_json::to_string(&[PodFaultRule {
            selector: map(&[("deepinfer.io/component", "verify")]),
            annotations: map(&[(POD_OOM_AFTER_SECONDS, "1"), (POD_SLOW_START_SECONDS, "2")]),
        }])
        .expect("JSON");
        let ns = map(&[(NAMESPACE_POD_FAULTS, rules.as_str())]);
        let verify = map(&[("deepinfer.io/component", "verify"), ("x", "y")]);
        let own = map(&[(POD_SLOW_START_SECONDS, "5")]);
        let got = effective_annotations(Some(&own), Some(&verify), Some(&ns));
        assert_eq!(
            PodFaults::of(Some(&got)),
            PodFaults {
                kill: Some((Duration::from_secs(1), Kill::OutOfMemory)),
                slow_start: Some(Duration::from_secs(5)),
                ..PodFaults::default()
            }
        );
        let worker = map(&[("deepinfer.io/component", "worker")]);
        assert!(effective_annotations(None, Some(&worker), Some(&ns)).is_empty());
        let broken = map(&[(NAMESPACE_POD_FAULTS, "not json")]);
        assert!(effective_annotations(None, Some(&verify), Some(&broken)).is_empty());
    }

    #[test]
    fn annotations_become_typed_faults() {
        assert_eq!(PodFaults::of(None), PodFaults::default());
        assert_eq!(of(&[(POD_FAIL, "3")]).fail_exit_code, Some(3));
        assert_eq!(of(&[(POD_FAIL, "boom")]).fail_exit_code, Some(1));
        assert!(of(&[(POD_NOT_READY, "true")]).not_ready);
        assert!(!of(&[(POD_NOT_READY, "false")]).not_ready);
        assert_eq!(
            of(&[(POD_KILL_AFTER_SECONDS, "1.5")]).kill,
            Some((Duration::from_millis(1500), Kill::Signal))
        );
        assert_eq!(
            of(&[(POD_OOM_AFTER_SECONDS, "2"), (POD_KILL_AFTER_SECONDS, "1")]).kill,
            Some((Duration::from_secs(2), Kill::OutOfMemory)),
            "an OOM fault names the reason, so it wins"
        );
        assert_eq!(
            of(&[(POD_SLOW_START_SECONDS, "x")]).slow_start,
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn only_images_of_an_invalid_registry_host_are_unpullable() {
        assert!(unpullable_image("registry.invalid/deepinfer-operator:dev"));
        assert!(unpullable_image("registry.invalid:5000/x/y@sha256:00"));
        assert!(!unpullable_image("deepinfer-operator:dev"));
        assert!(!unpullable_image("registry.example.com/invalid:1"));
    }

    #[test]
    fn a_node_is_lost_only_when_annotated_true() {
        let map = |v: &str| BTreeMap::from([(NODE_NOT_READY.to_string(), v.to_string())]);
        assert!(node_not_ready(Some(&map("true"))));
        assert!(!node_not_ready(Some(&map("no"))));
        assert!(!node_not_ready(None));
    }
}
