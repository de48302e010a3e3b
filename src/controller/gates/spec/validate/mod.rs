//! The rules the CRD's CEL expresses, re-checked by the operator (objects stored before a CRD
//! upgrade added a rule are never re-validated by the API server, and a decode of a stored object
//! must never be trusted blindly), one file per part of the spec. Pure functions: no client. [`validate`] returns the [`ValidatedDeployment`] the builders take.
//! `tests/validation_table.rs` runs one table of cases through both this module and the
//! CRD's CEL rules and requires them to agree.

use crate::controller::validated::ValidatedDeployment;

use crate::api::{DeepInferDeployment, DeepInferDeploymentSpec};

mod engine;
mod names;
mod pod;
mod roles;
mod shared;

use engine::{
    validate_acceptance, validate_model, validate_role_runtimes, validate_runtime,
    validate_serving_command,
};
pub use names::{
    validate_acceptance_job_names, validate_name, MAX_JOB_NAME_LENGTH, MAX_NAME_LENGTH,
};
use pod::{validate_pod_settings, validate_scheduling};
pub use roles::device_resources;
use roles::{validate_accelerator, validate_pod_count, validate_roles, validate_service_owners};
pub use shared::{
    is_dns1035_label, is_dns1123_subdomain, is_label_key, is_label_value, summarize, DeviceLimits,
    FieldError,
};

/// Validation of a [`ValidatedDeployment`] under another spec.
impl ValidatedDeployment {
    /// The same resource under the spec of an earlier revision, validated again.
    pub fn with_spec(
        &self,
        spec: DeepInferDeploymentSpec,
        limits: &DeviceLimits,
    ) -> Result<Self, Vec<FieldError>> {
        let mut past = DeepInferDeployment::clone(self);
        past.spec = spec;
        validate(&past, limits).map(|v| v.placed_as_pod_groups(self.pod_groups))
    }
}

/// Validates the resource's name and spec; returns the [`ValidatedDeployment`] the builders take,
/// or every violation.
pub fn validate(
    did: &DeepInferDeployment,
    limits: &DeviceLimits,
) -> Result<ValidatedDeployment, Vec<FieldError>> {
    let mut errors = validate_spec(&did.spec, limits).err().unwrap_or_default();
    if let Err(e) = validate_name(&did.metadata.name.clone().unwrap_or_default()) {
        errors.insert(0, e);
    }
    if errors.is_empty() {
        let name = did.metadata.name.clone().unwrap_or_default();
        if let Err(e) = validate_acceptance_job_names(&name, &did.spec) {
            errors.push(e);
        }
    }
    let namespace = did.metadata.namespace.clone().unwrap_or_default();
    if namespace.is_empty() {
        errors.push(FieldError::new(
            "metadata.namespace",
            "is empty; DeepInferDeployment is namespaced: create it in a namespace",
        ));
    }
    let location = crate::controller::build::checkpoint_location(&did.spec);
    match (errors.is_empty(), location) {
        (true, Some((claim, checkpoint_dir))) => Ok(ValidatedDeployment::new(
            did.clone(),
            namespace,
            claim,
            checkpoint_dir,
        )),
        // validate_model already reported the missing source.
        _ => Err(errors),
    }
}

/// Checks `spec` against every rule of the CRD (CEL rules and schema bounds). Returns every
/// violation, not just the first.
pub fn validate_spec(
    spec: &DeepInferDeploymentSpec,
    limits: &DeviceLimits,
) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    validate_model(&spec.model, &mut errors);
    validate_runtime(&spec.runtime, &mut errors);
    validate_role_runtimes(&spec.runtime.roles, &spec.roles, &mut errors);
    let devices_per_pod = validate_accelerator(&spec.accelerator, limits, &mut errors);
    validate_roles(spec, devices_per_pod.is_some(), limits, &mut errors);
    if errors.is_empty() {
        validate_pod_count(spec, limits, &mut errors);
    }
    validate_acceptance(&spec.acceptance, &mut errors);
    validate_serving_command(spec, &mut errors);
    if let Some(scheduling) = &spec.scheduling {
        validate_scheduling(scheduling, &mut errors);
    }
    validate_pod_settings(spec, &mut errors);
    validate_service_owners(&spec.service_owners, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::shared::{is_lower_hex, is_pinned_by_digest};
    use super::*;
    use crate::api::*;

    #[test]
    fn label_values_and_keys_follow_kubernetes_syntax() {
        for ok in ["", "NVIDIA-H200", "a.b_c-1", &"a".repeat(63)] {
            assert!(is_label_value(ok), "{ok:?}");
        }
        for bad in ["NVIDIA H200", "-a", "a-", "ä", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
        for ok in ["nvidia.com/gpu.clique", "huawei.com/super-pod-id", "clique"] {
            assert!(is_label_key(ok), "{ok:?}");
        }
        for bad in ["not a label key", "/x", "Nvidia.com/x", "a/", "a/b/c"] {
            assert!(!is_label_key(bad), "{bad:?}");
        }
        for (name, ok) in [
            ("flash", true),
            ("f-2", true),
            ("flash.v2", false),
            ("1flash", false),
            ("flash-", false),
        ] {
            assert_eq!(is_dns1035_label(name), ok, "{name}");
        }
    }

    #[test]
    fn a_spec_needing_more_pods_than_the_bound_is_refused_naming_replicas() {
        let mut spec: crate::api::DeepInferDeploymentSpec = serde_json::from_value(serde_json::json!({
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": format!("r.example/deepinfer@sha256:{}", "0a".repeat(32)),
                        "commit": "0123456789abcdef0123456789abcdef01234567"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}],
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
        }))
        .expect("valid spec");
        spec.roles[0].parallel.tensor = 64; // 8 pods per group
        spec.roles[0].replicas = 255; // 255 + 1 surge groups = 2048 pods: at the bound
        assert!(validate_spec(&spec, &DeviceLimits::default()).is_ok());
        spec.roles[0].replicas = 256;
        let errors = validate_spec(&spec, &DeviceLimits::default()).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.roles[0].replicas");
        assert!(
            errors[0].message.contains("--max-pods-per-deployment"),
            "{}",
            errors[0]
        );
        // A layout that alone would mean a billion pods is refused the same way, without overflow.
        spec.roles[0].replicas = 1;
        spec.roles[0].parallel.tensor = MAX_PARALLEL_DEGREE;
        spec.roles[0].parallel.pipeline = MAX_PARALLEL_DEGREE;
        spec.roles[0].parallel.data = MAX_PARALLEL_DEGREE;
        spec.roles[0].parallel.expert = 1;
        let errors = validate_spec(&spec, &DeviceLimits::default()).unwrap_err();
        assert!(
            errors.iter().any(|e| e.field == "spec.roles[0].replicas"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_name_too_long_for_child_names_is_refused_naming_the_field() {
        assert!(validate_name(&"a".repeat(MAX_NAME_LENGTH)).is_ok());
        let err = validate_name(&"a".repeat(MAX_NAME_LENGTH + 1)).expect_err("too long");
        assert_eq!(err.field, "metadata.name");
        assert!(
            err.message
                .starts_with("metadata.name is 37 characters long"),
            "{}",
            err.message
        );
    }

    #[test]
    fn device_limits_default_to_the_crd_values() {
        let limits = DeviceLimits::default();
        assert_eq!(limits.per_node(AcceleratorType::Nvidia), 8);
        assert_eq!(limits.per_node(AcceleratorType::Ascend), 16);
        for kind in [AcceleratorType::Nvidia, AcceleratorType::Ascend] {
            assert_eq!(limits.per_node(kind), kind.default_max_devices_per_node());
        }
    }

    #[test]
    fn digest_and_hex_matchers_follow_the_cel_patterns() {
        let digest = "a".repeat(64);
        assert!(is_pinned_by_digest(&format!(
            "r.example/deepinfer@sha256:{digest}"
        )));
        assert!(is_pinned_by_digest(&format!(
            "r.example:5000/deepinfer:v1@sha256:{digest}"
        )));
        assert!(!is_pinned_by_digest(&format!("@sha256:{digest}")));
        assert!(!is_pinned_by_digest(&format!(
            "r.example/a b@sha256:{digest}"
        )));
        assert!(!is_pinned_by_digest(&format!(
            "r.example/deepinfer@sha256:{}",
            "A".repeat(64)
        )));
        assert!(!is_pinned_by_digest(&format!("a@b@sha256:{digest}")));
        assert!(!is_pinned_by_digest("r.example/deepinfer:v1"));
        assert!(is_lower_hex("0123abc", 7, 40));
        assert!(!is_lower_hex("0123ab", 7, 40));
        assert!(!is_lower_hex("main", 40, 40));
    }

    #[test]
    fn a_rollout_that_could_never_replace_a_group_is_refused_naming_the_field() {
        let role = |surge: i32, unavailable: i32| RoleSpec {
            name: "worker".into(),
            replicas: 2,
            scaling: crate::api::RoleScaling::default(),
            parallel: crate::api::ParallelSpec::default(),
            rollout: crate::api::RolloutSpec {
                max_surge: surge,
                max_unavailable: unavailable,
                partition: 0,
            },
            pod: None,
            accelerator: None,
        };
        let check = |r: RoleSpec| {
            let accelerator = serde_json::json!({"type": "NVIDIA", "devicesPerPod": 1});
            let mut spec = spec_of(accelerator, serde_json::json!([]), serde_json::json!({}));
            spec.roles = vec![r];
            let mut errors = Vec::new();
            validate_roles(&spec, true, &DeviceLimits::default(), &mut errors);
            errors
        };
        assert!(check(role(1, 0)).is_empty(), "the defaults are valid");
        assert!(check(role(0, 1)).is_empty(), "no surge on a full cluster");
        let stuck = check(role(0, 0));
        assert_eq!(stuck.len(), 1, "{stuck:?}");
        assert_eq!(stuck[0].field, "spec.roles[0].rollout");
        assert!(
            stuck[0].message.contains("maxUnavailable to 1"),
            "{}",
            stuck[0]
        );
        let negative = check(role(-1, 1));
        assert_eq!(negative[0].field, "spec.roles[0].rollout.maxSurge");
        assert!(negative[0].message.contains("is -1"), "{}", negative[0]);
    }

    /// Errors of a spec whose accelerator, roles and `spec.pod` are given as JSON.
    fn pod_errors(
        accelerator: serde_json::Value,
        roles: serde_json::Value,
        pod: serde_json::Value,
    ) -> Vec<FieldError> {
        validate_spec(&spec_of(accelerator, roles, pod), &DeviceLimits::default())
            .err()
            .unwrap_or_default()
    }

    /// A spec whose accelerator, roles and `spec.pod` are given as JSON.
    fn spec_of(
        accelerator: serde_json::Value,
        roles: serde_json::Value,
        pod: serde_json::Value,
    ) -> DeepInferDeploymentSpec {
        serde_json::from_value(serde_json::json!({
            "model": {"name": "m", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "flash"}}},
            "runtime": {"image": format!("r.example/e@sha256:{}", "0".repeat(64)), "commit": "0123456"},
            "accelerator": accelerator,
            "roles": roles,
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]},
            "pod": pod
        }))
        .expect("spec")
    }

    #[test]
    fn each_roles_device_shape_is_checked_naming_the_field_it_is_written_in() {
        let nvidia = serde_json::json!({"type": "NVIDIA", "product": "NVIDIA-H200"});
        let errors = |roles: serde_json::Value| {
            pod_errors(nvidia.clone(), roles, serde_json::json!({}))
                .into_iter()
                .map(|e| (e.field, e.message))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            errors(serde_json::json!([
                {"name": "prefill", "replicas": 1, "parallel": {"tensor": 4},
                 "accelerator": {"devicesPerPod": 4}},
                {"name": "decode", "replicas": 1, "parallel": {"tensor": 16},
                 "accelerator": {"product": "NVIDIA-B200"}}
            ])),
            [],
            "prefill of 4 GPUs per pod beside decode of 8 on another product"
        );
        // The same prefill layout under the deployment's 8 devices per pod is refused, naming
        // the deployment's field; under the role's own 6, naming the role's.
        let wide = errors(serde_json::json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 4}}
        ]));
        assert_eq!(wide.len(), 1, "{wide:?}");
        assert_eq!(wide[0].0, "spec.roles[0].parallel");
        assert!(
            wide[0]
                .1
                .contains("smaller than spec.accelerator.devicesPerPod (8)")
                && wide[0]
                    .1
                    .contains("spec.roles[0].accelerator.devicesPerPod"),
            "{}",
            wide[0].1
        );
        let own = errors(serde_json::json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8},
             "accelerator": {"devicesPerPod": 6}}
        ]));
        assert_eq!(own.len(), 1, "{own:?}");
        assert!(
            own[0]
                .1
                .contains("not a multiple of spec.roles[0].accelerator.devicesPerPod (6)"),
            "{}",
            own[0].1
        );
        let above = errors(serde_json::json!([
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 16},
             "accelerator": {"devicesPerPod": 16}}
        ]));
        assert_eq!(above.len(), 1, "{above:?}");
        assert_eq!(above[0].0, "spec.roles[0].accelerator.devicesPerPod");
        assert!(
            above[0]
                .1
                .contains("more than the 8 devices one NVIDIA node has"),
            "{}",
            above[0].1
        );
        let zero = errors(serde_json::json!([
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8},
             "accelerator": {"devicesPerPod": 0}}
        ]));
        assert_eq!(
            zero.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["spec.roles[0].accelerator.devicesPerPod"],
            "a role's 0 is refused once, not again as a division"
        );
        // A role's node selector is held to the role's own product.
        let selector = errors(serde_json::json!([
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8},
             "accelerator": {"product": "NVIDIA-B200"},
             "pod": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}}
        ]));
        assert_eq!(selector.len(), 1, "{selector:?}");
        assert_eq!(selector[0].0, "spec.roles[0].pod.nodeSelector");
        assert!(
            selector[0]
                .1
                .contains("spec.roles[0].accelerator.product already selects"),
            "{}",
            selector[0].1
        );
    }

    #[test]
    fn pod_settings_are_checked_naming_the_field_and_the_fix() {
        let worker =
            serde_json::json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]);
        let nvidia = serde_json::json!({"type": "NVIDIA", "product": "NVIDIA-H200"});
        assert!(pod_errors(
            nvidia.clone(),
            worker.clone(),
            serde_json::json!({
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "a"},
                "priorityClassName": "high", "serviceAccountName": "engine",
                "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}, {"name": "data", "mountPath": "/deepinfer-data"}]
            })
        )
        .is_empty());

        let conflict = pod_errors(
            nvidia.clone(),
            worker.clone(),
            serde_json::json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}}),
        );
        assert_eq!(conflict.len(), 1, "{conflict:?}");
        assert_eq!(conflict[0].field, "spec.pod.nodeSelector");
        for needle in ["NVIDIA-B200", "spec.accelerator.product", "NVIDIA-H200"] {
            assert!(
                conflict[0].message.contains(needle),
                "{}",
                conflict[0].message
            );
        }
        let ascend = pod_errors(
            serde_json::json!({"type": "Ascend", "devicesPerPod": 8}),
            serde_json::json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8},
                                "pod": {"nodeSelector": {"accelerator": "nvidia"}}}]),
            serde_json::json!({}),
        );
        assert_eq!(ascend[0].field, "spec.roles[0].pod.nodeSelector");
        assert!(ascend[0].message.contains("spec.accelerator.type"));

        let bad = pod_errors(
            nvidia.clone(),
            worker.clone(),
            serde_json::json!({
                "priorityClassName": "High",
                "volumes": [{"name": "host", "hostPath": {"path": "/var"}},
                            {"name": "checkpoint", "emptyDir": {}},
                            {"name": "nfs", "nfs": {"server": "s", "path": "/"}}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/shm"},
                                 {"name": "host", "mountPath": "/models/extra"},
                                 {"name": "nowhere", "mountPath": "/deepinfer"}]
            }),
        );
        let fields: Vec<(&str, &str)> = bad
            .iter()
            .map(|e| (e.field.as_str(), e.message.as_str()))
            .collect();
        let has = |field: &str, needle: &str| {
            fields
                .iter()
                .any(|(f, m)| *f == field && m.starts_with(field) && m.contains(needle))
        };
        assert!(has("spec.pod.priorityClassName", "\"High\""), "{fields:#?}");
        assert!(has("spec.pod.volumes", "entry 0 (\"host\")"), "{fields:#?}");
        assert!(has("spec.pod.volumes", "hostPath"), "{fields:#?}");
        assert!(
            has("spec.pod.volumes", "entry 1 is named \"checkpoint\""),
            "{fields:#?}"
        );
        assert!(has("spec.pod.volumes", "entry 2 (\"nfs\")"), "{fields:#?}");
        assert!(
            has("spec.pod.volumeMounts", "entry 0 mounts \"dshm\""),
            "{fields:#?}"
        );
        assert!(
            has("spec.pod.volumeMounts", "at or under /models"),
            "{fields:#?}"
        );
        assert!(
            has("spec.pod.volumeMounts", "at or under /deepinfer"),
            "{fields:#?}"
        );
        assert!(
            has("spec.pod.volumeMounts", "volume \"nowhere\", which is not among the volumes of role worker (spec.pod.volumes)"),
            "{fields:#?}"
        );
        assert_eq!(bad.len(), 8, "{fields:#?}");

        // A role's mounts are checked against its effective volumes: its own if it has any.
        let role_mounts = pod_errors(
            nvidia,
            serde_json::json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8},
                                "pod": {"volumes": [{"name": "other", "emptyDir": {}}]}}]),
            serde_json::json!({"volumes": [{"name": "cache", "emptyDir": {}}],
                               "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}),
        );
        assert_eq!(role_mounts.len(), 1, "{role_mounts:?}");
        assert_eq!(role_mounts[0].field, "spec.pod.volumeMounts");
        assert!(role_mounts[0].message.contains("spec.roles[0].pod.volumes"));
    }

    #[test]
    fn a_valid_resource_carries_what_validation_established() {
        let did: DeepInferDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferDeployment",
            "metadata": {"name": "flash"},
            "spec": {
                "model": {"name": "m", "license": "mit",
                          "source": {"volume": {"claimName": "ckpt", "path": "/models/flash/"}}},
                "runtime": {"image": format!("r.example/e@sha256:{}", "0".repeat(64)), "commit": "0123456"},
                "accelerator": {"type": "NVIDIA"},
                "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}],
                "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
            }
        }))
        .expect("object");
        let errors = validate(&did, &DeviceLimits::default()).expect_err("no namespace");
        assert_eq!(errors[0].field, "metadata.namespace");
        let mut placed = did.clone();
        placed.metadata.namespace = Some("serving".into());
        let valid = validate(&placed, &DeviceLimits::default()).expect("valid");
        assert_eq!(
            (
                valid.namespace.as_str(),
                valid.claim.as_str(),
                valid.checkpoint_dir.as_str()
            ),
            ("serving", "ckpt", "models/flash")
        );
        let mut bad = placed.spec.clone();
        bad.roles[0].parallel.tensor = 3;
        let errors = valid
            .with_spec(bad, &DeviceLimits::default())
            .expect_err("an earlier revision is validated again");
        assert_eq!(errors[0].field, "spec.roles[0].parallel");
    }
}
