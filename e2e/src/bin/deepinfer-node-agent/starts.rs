//! Engine starts, counted as a kubelet's container runtime would see them: each time the
//! `engine` container of a pod the operator made (a serving pod or an acceptance rank) starts
//! running, one JSON line is appended to `<state-dir>/engine-starts.jsonl` with the pod's
//! deployment, revision, component, role, group and rank. A group's rank 0 starting is one load
//! of the model's weights by that group, which is what a rollout costs on real hardware; tests
//! and the benchmark read the file (`deepinfer_e2e::support::engine_starts`).

use std::collections::HashSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;

/// The container whose starts are counted (`build::ENGINE_CONTAINER`).
const ENGINE_CONTAINER: &str = "engine";

pub struct EngineStarts {
    file: PathBuf,
    /// (pod UID, restart count) already written: one line per start, however often the start is
    /// reported again (a simulated start's time is only settled once its status is written).
    seen: Mutex<HashSet<(String, i32)>>,
}

impl EngineStarts {
    pub fn new(file: PathBuf) -> Self {
        Self {
            file,
            seen: Mutex::default(),
        }
    }

    /// Notes that `container` of `pod` runs since `started_at` after `restarts` restarts, once
    /// per start.
    pub fn note(
        &self,
        pod: &Pod,
        container: &str,
        (started_at, restarts): (&str, i32),
        executed: bool,
    ) {
        if container != ENGINE_CONTAINER {
            return;
        }
        let labels = pod.labels();
        let Some(deployment) = labels.get("deepinfer.io/deployment") else {
            return;
        };
        let uid = pod.uid().unwrap_or_default();
        let first = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((uid, restarts));
        if !first {
            return;
        }
        let label = |key: &str| labels.get(key).cloned();
        let line = serde_json::json!({
            "namespace": pod.namespace(),
            "deployment": deployment,
            "revision": label("deepinfer.io/revision"),
            "component": label("deepinfer.io/component"),
            "role": label("deepinfer.io/role"),
            "group": label("deepinfer.io/group"),
            "rank": label("deepinfer.io/rank"),
            "pod": pod.name_any(),
            "startedAt": started_at,
            "restarts": restarts,
            "executed": executed,
        });
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            tracing::warn!(file = %self.file.display(), error = %e, "recording an engine start");
        }
    }
}
