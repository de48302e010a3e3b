//! The validation table shared by `tests/validation_table.rs` (the committed CRD evaluated in
//! process, and the operator's validate stage) and `e2e/tests/validation_server.rs` (every row
//! created on a real API server): one table, so all verdicts are compared on the same rows.
// Each test crate that includes this file uses a different part of it.
#![allow(dead_code)]

use deepinfer_operator::api::DeepInferDeploymentSpec;
use deepinfer_operator::controller::gates::spec::validate::{
    validate, validate_spec, DeviceLimits, MAX_NAME_LENGTH,
};
use serde_json::{json, Value};

/// The committed CRD (this file is included from the root crate and from `e2e/`).
pub fn crd_path() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = if here.ends_with("e2e") {
        here.parent().unwrap()
    } else {
        here
    };
    root.join("crds/deepinfer.io_deepinferdeployments.yaml")
}

/// What both validators must conclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Accepted.
    Valid,
    /// Rejected by a rule; the operator names exactly this field (with indices), the API server
    /// names it or an enclosing field (indices written `[]`, as CEL rules on lists cannot know them).
    Invalid(&'static str),
    /// Rejected by the schema's types or enums; the operator's typed decode refuses it too.
    Malformed(&'static str),
}

pub struct Case {
    pub name: &'static str,
    pub base: fn() -> Value,
    pub mutate: fn(&mut Value),
    pub expect: Expect,
}

pub fn nvidia() -> Value {
    json!({
        "model": {
            "name": "deepseek-ai/DeepSeek-V4.1-Flash-1017",
            "license": "mit",
            "source": {"hub": {"revision": "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d", "claimName": "models"}}
        },
        "runtime": {
            "image": format!("registry.example.com/deepinfer/runtime-cuda13@sha256:{}", "ab12".repeat(16)),
            "commit": "9e8d7c6"
        },
        "accelerator": {"type": "NVIDIA", "product": "NVIDIA-H200", "devicesPerPod": 8},
        "roles": [
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 2, "parallel": {"tensor": 8, "data": 2, "expert": 16}}
        ],
        "acceptance": {
            "prompts": [
                {
                    "id": "shot-plan",
                    "prompt": "Plan three shots of two seconds each.",
                    "structuredOutput": {"json": {"type": "array", "minItems": 3, "maxItems": 3}}
                },
                {"id": "yes-no", "prompt": "Answer yes or no.", "structuredOutput": {"regex": "^(yes|no)$"}}
            ]
        }
    })
}

pub fn ascend() -> Value {
    json!({
        "model": {
            "name": "deepseek-ai/DeepSeek-V4.1-Flash-1017",
            "license": "mit",
            "source": {"volume": {"claimName": "checkpoints", "path": "flash-1017"}}
        },
        "runtime": {
            "image": format!("registry.example.com/deepinfer/runtime-cann92@sha256:{}", "0f".repeat(32)),
            "commit": "0123456789abcdef0123456789abcdef01234567"
        },
        "accelerator": {"type": "Ascend", "devicesPerPod": 16, "scaleUpDomainKey": "huawei.com/super-pod-id"},
        "roles": [{"name": "worker", "replicas": 2, "parallel": {"tensor": 16, "pipeline": 2, "expert": 32}}],
        "acceptance": {"promptsFrom": {"name": "acceptance-prompts", "key": "prompts.yaml"}}
    })
}

pub fn cases() -> Vec<Case> {
    use Expect::*;
    macro_rules! case {
        ($name:literal, $base:ident, |$s:ident| $mutate:expr, $expect:expr) => {
            Case {
                name: $name,
                base: $base,
                mutate: |$s: &mut Value| $mutate,
                expect: $expect,
            }
        };
    }
    vec![
        case!("valid NVIDIA", nvidia, |_s| (), Valid),
        case!("valid Ascend", ascend, |_s| (), Valid),
        case!(
            "NVIDIA at its node maximum, default devicesPerPod",
            nvidia,
            |s| {
                s["accelerator"]
                    .as_object_mut()
                    .unwrap()
                    .remove("devicesPerPod");
            },
            Valid
        ),
        case!(
            "zero replicas",
            nvidia,
            |s| s["roles"][1]["replicas"] = json!(0),
            Valid
        ),
        case!(
            "image tag without digest",
            nvidia,
            |s| {
                s["runtime"]["image"] = json!("registry.example.com/deepinfer/runtime-cuda13:v1.0");
            },
            Invalid("spec.runtime.image")
        ),
        case!(
            "image with short digest",
            nvidia,
            |s| {
                s["runtime"]["image"] =
                    json!("registry.example.com/deepinfer/runtime-cuda13@sha256:ab12cd34");
            },
            Invalid("spec.runtime.image")
        ),
        case!(
            "image digest in upper case",
            nvidia,
            |s| {
                s["runtime"]["image"] = json!(format!(
                    "r.example.com/runtime@sha256:{}",
                    "AB12".repeat(16)
                ));
            },
            Invalid("spec.runtime.image")
        ),
        case!(
            "runtime commit not hex",
            nvidia,
            |s| s["runtime"]["commit"] = json!("v1.0.0"),
            Invalid("spec.runtime.commit")
        ),
        case!(
            "Ascend SuperPoD devices as huawei.com/npu",
            ascend,
            |s| s["accelerator"]["resourceName"] = json!("huawei.com/npu"),
            Valid
        ),
        case!(
            "Ascend devices under the default resource named explicitly",
            ascend,
            |s| s["accelerator"]["resourceName"] = json!("huawei.com/Ascend910"),
            Valid
        ),
        case!(
            "NVIDIA asking for Ascend devices",
            nvidia,
            |s| s["accelerator"]["resourceName"] = json!("huawei.com/npu"),
            Invalid("spec.accelerator.resourceName")
        ),
        case!(
            "Ascend asking for an unknown device resource",
            ascend,
            |s| s["accelerator"]["resourceName"] = json!("huawei.com/Ascend310P"),
            Invalid("spec.accelerator.resourceName")
        ),
        case!(
            "per-role runtime settings for roles of the spec",
            nvidia,
            |s| {
                s["runtime"]["command"] = json!(["deepinfer-serve"]);
                s["acceptance"]["engine"] = json!({"command": ["{serving_command}", "--offline", "{serving_args}", "--prompts", "{prompts_file}"]});
                s["runtime"]["roles"] = json!([
                    {"role": "prefill", "args": ["--chunked-prefill"], "env": [{"name": "A", "value": "1"}]},
                    {"role": "decode", "image": format!("r.example.com/decode@sha256:{}", "cd".repeat(32))}
                ]);
            },
            Valid
        ),
        case!(
            "per-role runtime settings for a role the spec does not have",
            nvidia,
            |s| s["runtime"]["roles"] = json!([{"role": "vision", "args": ["--x"]}]),
            Invalid("spec.runtime.roles[0].role")
        ),
        case!(
            "per-role runtime settings naming a role twice",
            nvidia,
            |s| s["runtime"]["roles"] =
                json!([{"role": "decode"}, {"role": "decode", "args": ["--x"]}]),
            Invalid("spec.runtime.roles[1].role")
        ),
        case!(
            "per-role image with a tag",
            nvidia,
            |s| s["runtime"]["roles"] =
                json!([{"role": "decode", "image": "r.example.com/decode:v2"}]),
            Invalid("spec.runtime.roles[0].image")
        ),
        case!(
            "revision is a branch name",
            nvidia,
            |s| {
                s["model"]["source"]["hub"]["revision"] = json!("main");
            },
            Invalid("spec.model.source.hub.revision")
        ),
        case!(
            "revision is a short sha",
            nvidia,
            |s| {
                s["model"]["source"]["hub"]["revision"] = json!("3f1c2a9");
            },
            Invalid("spec.model.source.hub.revision")
        ),
        case!(
            "revision in upper case",
            nvidia,
            |s| {
                s["model"]["source"]["hub"]["revision"] =
                    json!("3F1C2A9D8E7B6C5D4E3F2A1B0C9D8E7F6A5B4C3D");
            },
            Invalid("spec.model.source.hub.revision")
        ),
        case!(
            "no source",
            nvidia,
            |s| s["model"]["source"] = json!({}),
            Invalid("spec.model.source")
        ),
        case!(
            "two sources",
            nvidia,
            |s| {
                s["model"]["source"]["volume"] =
                    json!({"claimName": "checkpoints", "path": "model"});
            },
            Invalid("spec.model.source")
        ),
        case!(
            "devicesPerPod does not divide the world size",
            nvidia,
            |s| {
                s["accelerator"]["devicesPerPod"] = json!(6);
            },
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "world size smaller than devicesPerPod",
            nvidia,
            |s| {
                s["roles"][0]["parallel"]["tensor"] = json!(4);
            },
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "world size smaller than the default devicesPerPod",
            ascend,
            |s| {
                s["accelerator"]
                    .as_object_mut()
                    .unwrap()
                    .remove("devicesPerPod");
                s["roles"][0]["parallel"] = json!({"tensor": 4, "expert": 4});
            },
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "expert does not divide the world size",
            nvidia,
            |s| {
                s["roles"][1]["parallel"]["expert"] = json!(3);
            },
            Invalid("spec.roles[1].parallel.expert")
        ),
        case!(
            "expert larger than the world size",
            ascend,
            |s| {
                s["roles"][0]["parallel"]["expert"] = json!(64);
            },
            Invalid("spec.roles[0].parallel.expert")
        ),
        case!(
            "duplicated role",
            nvidia,
            |s| s["roles"][1]["name"] = json!("prefill"),
            Invalid("spec.roles[1].name")
        ),
        case!(
            "unknown role",
            nvidia,
            |s| s["roles"][1]["name"] = json!("router"),
            Invalid("spec.roles[1].name")
        ),
        case!(
            "no roles",
            nvidia,
            |s| s["roles"] = json!([]),
            Invalid("spec.roles")
        ),
        case!(
            "worker beside prefill and decode",
            nvidia,
            |s| s["roles"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "worker", "replicas": 1, "parallel": {"tensor": 8}})),
            Invalid("spec.roles[2].name")
        ),
        case!(
            "worker beside vision",
            ascend,
            |s| s["roles"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "vision", "replicas": 1, "parallel": {"tensor": 16}})),
            Invalid("spec.roles[0].name")
        ),
        case!(
            "prefill, decode and vision without worker",
            nvidia,
            |s| s["roles"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "vision", "replicas": 1, "parallel": {"tensor": 8}})),
            Valid
        ),
        case!(
            "service owners of the front end",
            nvidia,
            |s| s["serviceOwners"] = json!({
                "kvCache": "platform-kv team",
                "routing": "gateway team (#gw-oncall)",
                "authentication": "api-gateway",
                "quotas": "none yet"
            }),
            Valid
        ),
        case!(
            "service owner key too long",
            nvidia,
            |s| s["serviceOwners"] = json!({("k".repeat(64)): "someone"}),
            Invalid("spec.serviceOwners")
        ),
        case!(
            "prompt id with a control character",
            nvidia,
            |s| s["acceptance"]["prompts"][0]["id"] = json!("shot\u{0000}plan"),
            Invalid("spec.acceptance.prompts[0].id")
        ),
        case!(
            "another scheduler with queue labels and annotations",
            nvidia,
            |s| s["scheduling"] = json!({
                "schedulerName": "kai-scheduler",
                "podLabels": {"kai.scheduler/queue": "team-a", "kueue.x-k8s.io/queue-name": "team-a"},
                "podAnnotations": {"scheduling.volcano.sh/queue-name": "team-a"}
            }),
            Valid
        ),
        case!(
            "pod label under the operator's prefix",
            nvidia,
            |s| s["scheduling"] = json!({"podLabels": {"deepinfer.io/role": "decode"}}),
            Invalid("spec.scheduling.podLabels")
        ),
        case!(
            "pod annotation under the operator's prefix",
            nvidia,
            |s| s["scheduling"] = json!({"podAnnotations": {"deepinfer.io/applied-hash": "x"}}),
            Invalid("spec.scheduling.podAnnotations")
        ),
        case!(
            "pod annotation presetting the Ascend device plugin's allocation",
            nvidia,
            |s| s["scheduling"] = json!({"podAnnotations": {
                "ascend.kubectl.kubernetes.io/ascend-910-configuration": "{\"pod_name\":\"x\"}"}}),
            Invalid("spec.scheduling.podAnnotations")
        ),
        case!(
            "startup probe asking another host",
            nvidia,
            |s| s["runtime"]["startupProbe"] =
                json!({"httpGet": {"host": "10.0.0.1", "path": "/", "port": 80}}),
            Invalid("spec.runtime.startupProbe")
        ),
        case!(
            "readiness probe connecting to another host",
            nvidia,
            |s| s["runtime"]["readinessProbe"] =
                json!({"tcpSocket": {"host": "metadata.internal", "port": 80}}),
            Invalid("spec.runtime.readinessProbe")
        ),
        case!(
            "liveness probe asking another host",
            nvidia,
            |s| s["runtime"]["livenessProbe"] =
                json!({"httpGet": {"host": "169.254.169.254", "path": "/", "port": 80}}),
            Invalid("spec.runtime.livenessProbe")
        ),
        case!(
            "probes of the engine's own pod",
            nvidia,
            |s| {
                s["runtime"]["startupProbe"] = json!({"httpGet": {"path": "/health", "port": "serve"}, "failureThreshold": 270});
                s["runtime"]["readinessProbe"] = json!({"tcpSocket": {"port": 8000}});
                s["runtime"]["livenessProbe"] = json!({"httpGet": {"path": "/health", "port": "serve"}, "failureThreshold": 12});
            },
            Valid
        ),
        case!(
            "DeviceClass for devices through DRA",
            nvidia,
            |s| s["accelerator"]["deviceClassName"] = json!("gpu.nvidia.com"),
            Valid
        ),
        case!(
            "an extended resource name and a DeviceClass at once",
            nvidia,
            |s| {
                s["accelerator"]["deviceClassName"] = json!("gpu.nvidia.com");
                s["accelerator"]["resourceName"] = json!("nvidia.com/gpu");
            },
            Invalid("spec.accelerator.resourceName")
        ),
        case!(
            "deviceClassName that is not a DNS subdomain",
            nvidia,
            |s| s["accelerator"]["deviceClassName"] = json!("GPU_nvidia"),
            Invalid("spec.accelerator.deviceClassName")
        ),
        case!(
            "DeviceClass of a scale-up domain's device",
            nvidia,
            |s| s["accelerator"]["domainDeviceClassName"] =
                json!("compute-domain-default-channel.nvidia.com"),
            Valid
        ),
        case!(
            "domainDeviceClassName that is not a DNS subdomain",
            nvidia,
            |s| s["accelerator"]["domainDeviceClassName"] = json!("Domain Channel"),
            Invalid("spec.accelerator.domainDeviceClassName")
        ),
        case!(
            "product that is not a label value",
            nvidia,
            |s| s["accelerator"]["product"] = json!("NVIDIA H200 !!"),
            Invalid("spec.accelerator.product")
        ),
        case!(
            "negative replicas",
            nvidia,
            |s| s["roles"][1]["replicas"] = json!(-1),
            Invalid("spec.roles[1].replicas")
        ),
        case!(
            "replicas above the CRD's maximum",
            nvidia,
            |s| s["roles"][0]["replicas"] = json!(1_000_000),
            Invalid("spec.roles[0].replicas")
        ),
        case!(
            "rollout held at a partition, paused",
            nvidia,
            |s| {
                s["roles"][0]["rollout"] = json!({"maxSurge": 1, "partition": 1});
                s["paused"] = json!(true);
            },
            Valid
        ),
        case!("suspended", nvidia, |s| s["suspend"] = json!(true), Valid),
        case!(
            "negative partition",
            nvidia,
            |s| s["roles"][0]["rollout"] = json!({"partition": -1}),
            Invalid("spec.roles[0].rollout.partition")
        ),
        case!(
            "rollout that could never replace a group",
            nvidia,
            |s| s["roles"][0]["rollout"] = json!({"maxSurge": 0, "maxUnavailable": 0}),
            Invalid("spec.roles[0].rollout")
        ),
        case!(
            "NVIDIA devicesPerPod above one node",
            nvidia,
            |s| {
                s["accelerator"]["devicesPerPod"] = json!(16);
                s["roles"][0]["parallel"]["tensor"] = json!(16);
                s["roles"][1]["parallel"]["tensor"] = json!(16);
            },
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "Ascend devicesPerPod above one node",
            ascend,
            |s| {
                s["accelerator"]["devicesPerPod"] = json!(32);
            },
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "devicesPerPod 0",
            nvidia,
            |s| s["accelerator"]["devicesPerPod"] = json!(0),
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "devicesPerPod negative",
            ascend,
            |s| s["accelerator"]["devicesPerPod"] = json!(-16),
            Invalid("spec.accelerator.devicesPerPod")
        ),
        case!(
            "prefill of 4 GPUs per pod beside decode of two 8-GPU pods",
            nvidia,
            |s| {
                s["roles"][0]["parallel"] = json!({"tensor": 4});
                s["roles"][0]["accelerator"] = json!({"devicesPerPod": 4});
            },
            Valid
        ),
        case!(
            "a role of another product",
            nvidia,
            |s| s["roles"][1]["accelerator"] = json!({"product": "NVIDIA-B200"}),
            Valid
        ),
        case!(
            "a role's devicesPerPod above one node",
            nvidia,
            |s| {
                s["roles"][0]["parallel"] = json!({"tensor": 16});
                s["roles"][0]["accelerator"] = json!({"devicesPerPod": 16});
            },
            Invalid("spec.roles[0].accelerator.devicesPerPod")
        ),
        case!(
            "an Ascend role's devicesPerPod above one node",
            ascend,
            |s| s["roles"][0]["accelerator"] = json!({"devicesPerPod": 32}),
            Invalid("spec.roles[0].accelerator.devicesPerPod")
        ),
        case!(
            "a role's devicesPerPod 0",
            nvidia,
            |s| s["roles"][1]["accelerator"] = json!({"devicesPerPod": 0}),
            Invalid("spec.roles[1].accelerator.devicesPerPod")
        ),
        case!(
            "a role's devicesPerPod not dividing its world size",
            nvidia,
            |s| s["roles"][0]["accelerator"] = json!({"devicesPerPod": 6}),
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "a role's world size smaller than its own devicesPerPod",
            nvidia,
            |s| {
                s["accelerator"]["devicesPerPod"] = json!(2);
                s["roles"][0]["parallel"] = json!({"tensor": 2});
                s["roles"][0]["accelerator"] = json!({"devicesPerPod": 4});
            },
            Invalid("spec.roles[0].parallel")
        ),
        case!(
            "a role's product that is not a label value",
            nvidia,
            |s| s["roles"][0]["accelerator"] = json!({"product": "NVIDIA B200 !!"}),
            Invalid("spec.roles[0].accelerator.product")
        ),
        case!(
            "tensor degree 0",
            nvidia,
            |s| s["roles"][0]["parallel"]["tensor"] = json!(0),
            Invalid("spec.roles[0].parallel.tensor")
        ),
        case!(
            "expert degree 0",
            nvidia,
            |s| s["roles"][1]["parallel"]["expert"] = json!(0),
            Invalid("spec.roles[1].parallel.expert")
        ),
        case!(
            "data degree above the maximum",
            nvidia,
            |s| s["roles"][1]["parallel"]["data"] = json!(2048),
            Invalid("spec.roles[1].parallel.data")
        ),
        case!(
            "acceptance with no prompts",
            nvidia,
            |s| s["acceptance"]["prompts"] = json!([]),
            Invalid("spec.acceptance.prompts")
        ),
        case!(
            "duplicated prompt ids",
            nvidia,
            |s| s["acceptance"]["prompts"][1]["id"] = json!("shot-plan"),
            Invalid("spec.acceptance.prompts[1].id")
        ),
        case!(
            "structured output with two kinds",
            nvidia,
            |s| {
                s["acceptance"]["prompts"][0]["structuredOutput"]["regex"] = json!("^\\[.*\\]$");
            },
            Invalid("spec.acceptance.prompts[0].structuredOutput")
        ),
        case!(
            "structured output with no kind",
            nvidia,
            |s| {
                s["acceptance"]["prompts"][1]["structuredOutput"] = json!({});
            },
            Invalid("spec.acceptance.prompts[1].structuredOutput")
        ),
        case!(
            "structured output json that is not a schema object",
            nvidia,
            |s| {
                s["acceptance"]["prompts"][0]["structuredOutput"]["json"] =
                    json!("an array of three shots");
            },
            Invalid("spec.acceptance.prompts[0].structuredOutput.json")
        ),
        case!(
            "acceptance timeout 0",
            nvidia,
            |s| s["acceptance"]["timeoutSeconds"] = json!(0),
            Invalid("spec.acceptance.timeoutSeconds")
        ),
        case!(
            "acceptance template with the serving args",
            nvidia,
            |s| s["acceptance"]["engine"] = json!({"command": ["engine", "{serving_command}", "{serving_args}", "--prompts", "{prompts_file}"]}),
            Valid
        ),
        case!(
            "acceptance template without the serving args",
            nvidia,
            |s| s["acceptance"]["engine"] = json!({"command": ["engine", "--model_name", "{model_dir}", "--prompts", "{prompts_file}"]}),
            Invalid("spec.acceptance.engine.command")
        ),
        case!(
            "runtime command run by the acceptance template",
            nvidia,
            |s| {
                s["runtime"]["command"] = json!(["/opt/engine/serve"]);
                s["acceptance"]["engine"] = json!({"command": ["{serving_command}", "{serving_args}", "--prompts", "{prompts_file}"]});
            },
            Valid
        ),
        case!(
            "runtime command that the default acceptance template would not run",
            nvidia,
            |s| s["runtime"]["command"] = json!(["/bin/false"]),
            Invalid("spec.runtime.command")
        ),
        case!(
            "runtime command that the acceptance template leaves out",
            nvidia,
            |s| {
                s["runtime"]["command"] = json!(["/bin/false"]);
                s["acceptance"]["engine"] =
                    json!({"command": ["engine", "{serving_args}", "--prompts", "{prompts_file}"]});
            },
            Invalid("spec.runtime.command")
        ),
        case!(
            "serving acceptance of one role, with a runtime command and no template",
            ascend,
            |s| {
                s["acceptance"]["mode"] = json!("serving");
                s["acceptance"]["loadConcurrency"] = json!(8);
                s["runtime"]["command"] = json!(["/opt/engine/serve"]);
            },
            Valid
        ),
        case!(
            "serving acceptance of roles that work together",
            nvidia,
            |s| s["acceptance"]["mode"] = json!("serving"),
            Valid
        ),
        case!(
            "load pass without requests",
            ascend,
            |s| {
                s["acceptance"]["mode"] = json!("serving");
                s["acceptance"]["loadConcurrency"] = json!(0);
            },
            Invalid("spec.acceptance.loadConcurrency")
        ),
        case!(
            "acceptance template with the serving args inside an argument",
            nvidia,
            |s| s["acceptance"]["engine"] =
                json!({"command": ["sh", "-c", "engine {serving_args}", "{serving_args}"]}),
            Invalid("spec.acceptance.engine.command")
        ),
        case!(
            "sampling at its bounds, whole numbers where numbers go",
            nvidia,
            |s| {
                s["acceptance"]["sampling"] = json!({
                    "temperature": 0, "topP": 1, "topK": 0, "seed": 0, "repetitionPenalty": 1
                });
                s["acceptance"]["prompts"][1]["sampling"] = json!({"temperature": 1.3, "topP": 0.01, "topK": 50, "seed": 4_294_967_296_i64, "repetitionPenalty": 0.5});
            },
            Valid
        ),
        case!(
            "sampling temperature below 0",
            nvidia,
            |s| s["acceptance"]["sampling"] = json!({"temperature": -0.5}),
            Invalid("spec.acceptance.sampling.temperature")
        ),
        case!(
            "sampling topP 0",
            nvidia,
            |s| s["acceptance"]["sampling"] = json!({"topP": 0}),
            Invalid("spec.acceptance.sampling.topP")
        ),
        case!(
            "sampling topP above 1",
            nvidia,
            |s| s["acceptance"]["sampling"] = json!({"topP": 1.5}),
            Invalid("spec.acceptance.sampling.topP")
        ),
        case!(
            "sampling topK below 0",
            nvidia,
            |s| s["acceptance"]["sampling"] = json!({"topK": -1}),
            Invalid("spec.acceptance.sampling.topK")
        ),
        case!(
            "sampling seed below 0",
            nvidia,
            |s| s["acceptance"]["sampling"] = json!({"seed": -1}),
            Invalid("spec.acceptance.sampling.seed")
        ),
        case!(
            "sampling repetitionPenalty 0",
            nvidia,
            |s| s["acceptance"]["sampling"] = json!({"repetitionPenalty": 0.0}),
            Invalid("spec.acceptance.sampling.repetitionPenalty")
        ),
        case!(
            "sampling topK not a whole number",
            nvidia,
            |s| s["acceptance"]["sampling"] = json!({"topK": 2.5}),
            Malformed("spec.acceptance.sampling.topK")
        ),
        case!(
            "prompt sampling topP 0",
            nvidia,
            |s| s["acceptance"]["prompts"][1]["sampling"] = json!({"topP": 0}),
            Invalid("spec.acceptance.prompts[1].sampling.topP")
        ),
        case!(
            "prompt sampling repetitionPenalty below 0",
            nvidia,
            |s| s["acceptance"]["prompts"][0]["sampling"] = json!({"repetitionPenalty": -1}),
            Invalid("spec.acceptance.prompts[0].sampling.repetitionPenalty")
        ),
        case!(
            "prompt sampling temperature below 0",
            nvidia,
            |s| s["acceptance"]["prompts"][0]["sampling"] = json!({"temperature": -1}),
            Invalid("spec.acceptance.prompts[0].sampling.temperature")
        ),
        case!(
            "empty licence",
            nvidia,
            |s| s["model"]["license"] = json!(""),
            Invalid("spec.model.license")
        ),
        case!(
            "unknown accelerator type",
            nvidia,
            |s| s["accelerator"]["type"] = json!("Intel"),
            Malformed("spec.accelerator.type")
        ),
        case!(
            "replicas as a string",
            nvidia,
            |s| s["roles"][0]["replicas"] = json!("2"),
            Malformed("spec.roles[0].replicas")
        ),
        case!(
            "a role scaled externally",
            nvidia,
            |s| s["roles"][0]["scaling"] = json!("external"),
            Valid
        ),
        case!(
            "a role scaling that is neither replicas nor external",
            nvidia,
            |s| s["roles"][0]["scaling"] = json!("hpa"),
            Malformed("spec.roles[0].scaling")
        ),
        case!(
            "pod settings for the deployment and one role",
            nvidia,
            |s| {
                s["pod"] = json!({
                    "imagePullSecrets": [{"name": "registry-creds"}],
                    "tolerations": [{"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                    "nodeSelector": {"example.com/pool": "serving", "nvidia.com/gpu.product": "NVIDIA-H200"},
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
                    "priorityClassName": "serving-high",
                    "serviceAccountName": "engine",
                    "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "tls", "secret": {"secretName": "tls"}}],
                    "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/engine"}],
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]
                });
                s["roles"][1]["pod"] = json!({"priorityClassName": "decode-critical",
                    "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "decode-cache"}}]});
            },
            Valid
        ),
        case!(
            "pod nodeSelector selecting another product",
            nvidia,
            |s| s["pod"] = json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}}),
            Invalid("spec.pod.nodeSelector")
        ),
        case!(
            "role nodeSelector contradicting the accelerator type",
            ascend,
            |s| s["roles"][0]["pod"] = json!({"nodeSelector": {"accelerator": "nvidia"}}),
            Invalid("spec.roles[0].pod.nodeSelector")
        ),
        case!(
            "role nodeSelector selecting another product than the role's own",
            nvidia,
            |s| {
                s["roles"][1]["accelerator"] = json!({"product": "NVIDIA-B200"});
                s["roles"][1]["pod"] =
                    json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}});
            },
            Invalid("spec.roles[1].pod.nodeSelector")
        ),
        case!(
            "role nodeSelector restating the role's own product",
            nvidia,
            |s| {
                s["roles"][1]["accelerator"] = json!({"product": "NVIDIA-B200"});
                s["roles"][1]["pod"] =
                    json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}});
            },
            Valid
        ),
        case!(
            "pod nodeSelector selecting another product than a role's own",
            nvidia,
            |s| {
                s["pod"] = json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}});
                s["roles"][1]["accelerator"] = json!({"product": "NVIDIA-B200"});
            },
            Invalid("spec.pod.nodeSelector")
        ),
        case!(
            "pod nodeSelector beside a role of another product with a node selector of its own",
            nvidia,
            |s| {
                s["pod"] = json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}});
                s["roles"][1]["accelerator"] = json!({"product": "NVIDIA-B200"});
                s["roles"][1]["pod"] = json!({"nodeSelector": {"example.com/pool": "serving"}});
            },
            Valid
        ),
        case!(
            "pod hostPath volume",
            nvidia,
            |s| s["pod"] = json!({"volumes": [{"name": "host", "hostPath": {"path": "/var/lib"}}]}),
            Invalid("spec.pod.volumes")
        ),
        case!(
            "pod NFS volume (not allowed by the restricted profile)",
            nvidia,
            |s| s["pod"] = json!({"volumes": [{"name": "share", "nfs": {"server": "nfs.example.com", "path": "/"}}]}),
            Invalid("spec.pod.volumes")
        ),
        case!(
            "role volume named as the operator's checkpoint",
            nvidia,
            |s| s["roles"][0]["pod"] = json!({"volumes": [{"name": "checkpoint", "emptyDir": {}}]}),
            Invalid("spec.roles[0].pod.volumes")
        ),
        case!(
            "pod mount under the checkpoint directory",
            nvidia,
            |s| s["pod"] = json!({"volumes": [{"name": "x", "emptyDir": {}}],
                                  "volumeMounts": [{"name": "x", "mountPath": "/models/extra"}]}),
            Invalid("spec.pod.volumeMounts")
        ),
        case!(
            "pod mount of the operator's shared memory volume",
            nvidia,
            |s| s["pod"] = json!({"volumeMounts": [{"name": "dshm", "mountPath": "/shm"}]}),
            Invalid("spec.pod.volumeMounts")
        ),
        case!(
            "pod priorityClassName not a name",
            nvidia,
            |s| s["pod"] = json!({"priorityClassName": "High Priority"}),
            Invalid("spec.pod.priorityClassName")
        ),
        case!(
            "role serviceAccountName not a name",
            nvidia,
            |s| s["roles"][1]["pod"] = json!({"serviceAccountName": "Engine_SA"}),
            Invalid("spec.roles[1].pod.serviceAccountName")
        ),
        case!(
            "pod with more than 32 tolerations",
            nvidia,
            |s| s["pod"] = json!({"tolerations": (0..33).map(|i| json!({"key": format!("k{i}"), "operator": "Exists"})).collect::<Vec<_>>()}),
            Invalid("spec.pod.tolerations")
        ),
    ]
}

pub fn crd() -> Value {
    let text =
        std::fs::read_to_string(crd_path()).expect("the committed CRD exists; run `make crds`");
    serde_yaml::from_str(&text).expect("the committed CRD is YAML")
}

pub fn object_schema(crd: &Value) -> Value {
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

pub fn object(spec: Value) -> Value {
    named_object("flash", spec)
}

pub fn named_object(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": name, "namespace": "serving"},
        "spec": spec,
    })
}

/// One row of the name table: a name, the spec it is judged with, and whether both validators
/// must accept it.
pub struct NameCase {
    pub name: String,
    pub spec: Value,
    pub valid: bool,
}

/// `nvidia()` whose acceptance role (decode) has `pods` pods per group (tensor 8 × data `pods`
/// over 8 devices per pod), so the highest acceptance rank is `pods - 1`; no serving group of it
/// (one surge group stays within the operator's pod bound).
pub fn nvidia_acceptance_pods(pods: i64) -> Value {
    let mut s = nvidia();
    s["roles"][1]["replicas"] = json!(0);
    s["roles"][1]["parallel"] = json!({"tensor": 8, "data": pods, "expert": 8});
    s
}

/// Names at and around the bound, with whether both validators must accept them. The bound on a
/// name depends on the acceptance role's pods per group: the name of the Job of the highest rank
/// (`<name>-accept-<run hash>-<rank>`) is also its pods' `job-name` label, at most 63 characters.
pub fn name_cases() -> Vec<NameCase> {
    let row = |name: String, spec: Value, valid: bool| NameCase { name, spec, valid };
    let plain = |name: &str, valid: bool| row(name.to_string(), nvidia(), valid);
    vec![
        plain(&"a".repeat(MAX_NAME_LENGTH), true),
        plain(&"a".repeat(MAX_NAME_LENGTH + 1), false),
        plain("flash-h200-prefill-decode-long-name-over-the-bound", false),
        plain("flash", true),
        plain("flash.v2", false),
        plain("1flash", false),
        plain("flash-", false),
        plain("f-2", true),
        // Ranks 0..99 at the longest name: the Job of rank 99 is named in exactly 63 characters.
        row(
            "a".repeat(MAX_NAME_LENGTH),
            nvidia_acceptance_pods(100),
            true,
        ),
        // Rank 100 at the longest name would need a 64-character job-name label.
        row(
            "a".repeat(MAX_NAME_LENGTH),
            nvidia_acceptance_pods(101),
            false,
        ),
        // One character less leaves room for the third digit.
        row(
            "a".repeat(MAX_NAME_LENGTH - 1),
            nvidia_acceptance_pods(101),
            true,
        ),
        row(
            "a".repeat(MAX_NAME_LENGTH - 1),
            nvidia_acceptance_pods(1001),
            false,
        ),
        row("flash".into(), nvidia_acceptance_pods(1024), true),
    ]
}

/// The operator's verdict on a name row: its whole-object validation, keeping only what it says
/// about `metadata.name` (the row's spec is otherwise valid).
pub fn operator_name_verdict(case: &NameCase) -> Result<(), Vec<(String, String)>> {
    let did: deepinfer_operator::api::DeepInferDeployment =
        serde_json::from_value(named_object(&case.name, case.spec.clone()))
            .expect("name rows decode");
    match validate(&did, &DeviceLimits::default()) {
        Ok(_) => Ok(()),
        Err(errors) => Err(errors.into_iter().map(|e| (e.field, e.message)).collect()),
    }
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// `spec.roles[1].parallel.expert` → `spec.roles[].parallel.expert`.
pub fn generic(field: &str) -> String {
    let mut out = String::new();
    let mut in_index = false;
    for c in field.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// The field and the field enclosing it (a rule on a list or an object can only name that), in
/// generic form: `spec.roles[1].name` → `spec.roles[].name`, `spec.roles`.
pub fn field_and_parent(field: &str) -> [String; 2] {
    let field = generic(field);
    let parent = field
        .rsplit_once('.')
        .map_or(field.as_str(), |(parent, _)| parent);
    let parent = parent.strip_suffix("[]").unwrap_or(parent).to_owned();
    [field, parent]
}

/// Whether an API server error (`path: message`) reports at `field`: its path is the field, the
/// object enclosing it (a rule on an object about several of its fields), or the list holding the
/// element it is in (a field path cannot index into a list). The message alone does not count:
/// `kubectl apply` users read the path first.
pub fn names_field(error: &str, field: &str) -> bool {
    let path = generic(error.split_once(": ").map_or("", |(path, _)| path));
    let [exact, parent] = field_and_parent(field);
    path == exact
        || path == parent
        || exact
            .strip_prefix(path.as_str())
            .is_some_and(|rest| rest.starts_with("[]"))
}

pub enum Operator {
    Accepted,
    Rejected(Vec<(String, String)>),
    Undecodable(String),
}

impl Operator {
    pub fn describe(&self) -> String {
        match self {
            Self::Accepted => "accepted".into(),
            Self::Rejected(errors) => {
                format!("{:?}", errors.iter().map(|(_, m)| m).collect::<Vec<_>>())
            }
            Self::Undecodable(err) => format!("cannot decode: {err}"),
        }
    }
}

pub fn operator_verdict(spec: &Value) -> Operator {
    match serde_json::from_value::<DeepInferDeploymentSpec>(spec.clone()) {
        Err(err) => Operator::Undecodable(err.to_string()),
        Ok(spec) => match validate_spec(&spec, &DeviceLimits::default()) {
            Ok(()) => Operator::Accepted,
            Err(errors) => {
                Operator::Rejected(errors.into_iter().map(|e| (e.field, e.message)).collect())
            }
        },
    }
}

/// Where a verdict disagrees with the row's expectation. `api` holds the API server's errors as
/// `field: message` (empty: admitted).
pub fn disagreements(case: &Case, api: &[String], operator: &Operator) -> Vec<String> {
    let mut failures = Vec::new();
    let mut problem = |what: String| failures.push(format!("[{}] {what}", case.name));
    match case.expect {
        Expect::Valid => {
            if !api.is_empty() {
                problem(format!("API server rejects a valid spec: {api:#?}"));
            }
            match operator {
                Operator::Accepted => {}
                Operator::Rejected(errors) => {
                    problem(format!("operator rejects a valid spec: {errors:#?}"))
                }
                Operator::Undecodable(err) => {
                    problem(format!("operator cannot decode a valid spec: {err}"))
                }
            }
        }
        Expect::Invalid(field) | Expect::Malformed(field) => {
            if api.is_empty() {
                problem("API server accepts it".into());
            } else if !api.iter().any(|e| names_field(e, field)) {
                problem(format!("no API server error names {field}: {api:#?}"));
            }
            match (operator, case.expect) {
                (Operator::Accepted, _) => problem("operator accepts it".into()),
                (Operator::Rejected(errors), Expect::Invalid(_)) => {
                    match errors.iter().find(|(f, _)| f == field) {
                        None => problem(format!(
                            "operator errors do not include {field}: {errors:#?}"
                        )),
                        Some((_, message)) if !message.contains(field) => {
                            problem(format!("operator message does not name {field}: {message}"))
                        }
                        Some(_) => {}
                    }
                }
                (Operator::Rejected(errors), _) => problem(format!(
                    "expected the typed decode to refuse it, but it decoded: {errors:#?}"
                )),
                (Operator::Undecodable(err), Expect::Invalid(_)) => problem(format!(
                    "operator refuses it only by failing to decode: {err}"
                )),
                (Operator::Undecodable(_), _) => {}
            }
        }
    }
    failures
}

/// The spec of a row, mutated as the row says.
pub fn row_spec(case: &Case) -> Value {
    let mut spec = (case.base)();
    (case.mutate)(&mut spec);
    spec
}
