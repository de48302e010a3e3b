//! Test fixtures of the stage plans: a deployment, the settings, and snapshots built from the
//! operator's own builders.

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use serde_json::json;

use crate::api::DeepInferDeployment;
use crate::controller::act::Act;
use crate::controller::build::{self, JobDeadlines};
use crate::controller::gates::housekeeping::retention::Retention;
use crate::controller::gates::spec::validate::{validate, DeviceLimits};
use crate::controller::gates::Settings;
use crate::controller::observe::{ClaimPhase, Observed};
use crate::controller::validated::ValidatedDeployment;

const IMAGE: &str =
    "r.example/e@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// One NVIDIA worker role of two groups of two pods, its checkpoint on a volume.
pub fn raw() -> DeepInferDeployment {
    serde_json::from_value(json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": "flash", "namespace": "serving", "uid": "u-1"},
        "spec": {
            "model": {"name": "deepseek-ai/m", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": IMAGE, "commit": "0123456789abcdef0123456789abcdef01234567"},
            "accelerator": {"type": "NVIDIA"},
            "roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}],
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
        }
    }))
    .expect("valid fixture")
}

/// `did` fetching its checkpoint from a hub into the claim first.
pub fn with_hub(mut did: DeepInferDeployment) -> DeepInferDeployment {
    did.spec.model.source = serde_json::from_value(json!({
        "hub": {"revision": "0123456789abcdef0123456789abcdef01234567", "claimName": "ckpt"}
    }))
    .expect("valid hub source");
    did
}

/// `raw` validated.
pub fn valid(raw: DeepInferDeployment) -> ValidatedDeployment {
    validate(&raw, &DeviceLimits::default()).expect("valid fixture")
}

/// [`raw`] validated.
pub fn did() -> ValidatedDeployment {
    valid(raw())
}

/// The verdict key of the tests.
pub fn verdict_key() -> &'static crate::controller::proof::VerdictKey {
    static KEY: std::sync::OnceLock<crate::controller::proof::VerdictKey> =
        std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        crate::controller::proof::VerdictKey::new(b"the tests' verdict key, 32 bytes")
    })
}

/// Default settings.
pub fn settings() -> Settings<'static> {
    static DEADLINES: JobDeadlines = JobDeadlines {
        fetch_seconds: 3600,
        verify_seconds: 600,
    };
    static LIMITS: std::sync::OnceLock<DeviceLimits> = std::sync::OnceLock::new();
    static HUBS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    static PROXY: std::sync::OnceLock<crate::controller::build::HubProxy> =
        std::sync::OnceLock::new();
    Settings {
        hub_proxy: PROXY.get_or_init(Default::default),
        verdict_key: verdict_key(),
        record_node_domains: false,
        operator_image: "deepinfer-operator:test",
        deadlines: &DEADLINES,
        allowed_hub_endpoints: HUBS.get_or_init(|| vec!["https://huggingface.co".into()]),
        retention: Retention::default(),
        limits: LIMITS.get_or_init(DeviceLimits::default),
        partial_group_timeout: std::time::Duration::from_secs(120),
        license_withdrawal: Default::default(),
    }
}

/// A snapshot whose checkpoint claim is bound.
pub fn observed_bound() -> Observed {
    Observed {
        claim_phase: ClaimPhase::Phase("Bound".into()),
        ..Observed::default()
    }
}

/// A snapshot whose checkpoint claim is not bound yet.
pub fn observed_pending_claim() -> Observed {
    Observed {
        claim_phase: ClaimPhase::Phase("Pending".into()),
        ..Observed::default()
    }
}

/// `job` in `state` (`running`, `succeeded`, `failed`).
pub fn in_state(mut job: Job, state: &str) -> Job {
    job.status = Some(match state {
        "running" => JobStatus {
            active: Some(1),
            ..JobStatus::default()
        },
        "succeeded" => JobStatus {
            succeeded: Some(1),
            ..JobStatus::default()
        },
        "failed" => JobStatus {
            failed: Some(1),
            conditions: Some(vec![JobCondition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: Some("BackoffLimitExceeded".into()),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        },
        other => panic!("unknown state {other}"),
    });
    job
}

/// The deployment's verify Job in `state`.
pub fn verify_job(did: &ValidatedDeployment, state: &str) -> Job {
    let s = settings();
    in_state(build::verify_job(did, s.operator_image, s.deadlines), state)
}

/// The deployment's fetch Job in `state` (the deployment fetches from a hub).
pub fn fetch_job(did: &ValidatedDeployment, state: &str) -> Job {
    let s = settings();
    in_state(
        build::fetch_job(did, s.operator_image, s.deadlines, s.hub_proxy).expect("a hub source"),
        state,
    )
}

/// The acts, each in a few words.
pub fn described(acts: &[Act<'_>]) -> Vec<String> {
    acts.iter().map(Act::describe).collect()
}

/// The `ttlSecondsAfterFinished` of each Job the acts create, in order.
pub fn created_job_ttls(acts: &[Act<'_>]) -> Vec<Option<i32>> {
    acts.iter()
        .filter_map(|a| match a {
            Act::Create(crate::controller::act::Object::Job(job)) => {
                Some(job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished))
            }
            _ => None,
        })
        .collect()
}
