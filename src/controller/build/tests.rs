//! Unit tests of the builders.

use super::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use crate::api::ACCEPTED_POD_CONDITION;

const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn did(accelerator: serde_json::Value, roles: serde_json::Value) -> ValidatedDeployment {
    valid(raw(accelerator, roles))
}

fn valid(d: crate::api::DeepInferDeployment) -> ValidatedDeployment {
    crate::controller::gates::spec::validate::validate(&d, &Default::default())
        .expect("valid test resource")
}

fn raw(
    accelerator: serde_json::Value,
    roles: serde_json::Value,
) -> crate::api::DeepInferDeployment {
    serde_json::from_value(json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": "flash", "namespace": "serving", "uid": "u-1"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "/model/"}}},
            "runtime": {"image": IMAGE, "commit": "0123456789abcdef0123456789abcdef01234567",
                        "args": ["--max_batch_size", "8"]},
            "accelerator": accelerator,
            "roles": roles,
            "acceptance": {"prompts": [{"id": "p", "prompt": "x", "structuredOutput": {"regex": "a"}}]}
        }
    }))
    .expect("valid test resource")
}

fn env_of(c: &Container) -> BTreeMap<String, String> {
    c.env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

#[test]
fn nvidia_pods_are_pinned_placed_gated_and_labelled() {
    let d = did(
        json!({"type": "NVIDIA", "product": "NVIDIA-H200"}),
        json!([{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}]),
    );
    let rev = revision(&d.spec);
    let pods = group_pods(&d, &d.spec.roles[0], 1, &rev);
    let short = &rev[..5];
    assert_eq!(
        pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
        [
            format!("flash-worker-{short}-1-0"),
            format!("flash-worker-{short}-1-1")
        ],
        "names carry the revision, so two revisions' groups exist side by side"
    );
    let pod = &pods[1];
    let labels = pod.labels();
    for (k, v) in [
        (labels::DEPLOYMENT, "flash"),
        (labels::ROLE, "worker"),
        (labels::GROUP, "1"),
        (labels::RANK, "1"),
        (labels::REVISION, rev.as_str()),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    assert_eq!(pod.owner_references()[0].uid, "u-1");
    assert_eq!(pod.owner_references()[0].controller, Some(true));
    let spec = pod.spec.as_ref().expect("spec");
    let c = &spec.containers[0];
    assert_eq!(c.image.as_deref(), Some(IMAGE));
    assert!(
        c.command.is_none(),
        "the image's own entrypoint runs the engine"
    );
    assert_eq!(
        c.args.clone().expect("args"),
        ["--model_name", "/models/model", "--max_batch_size", "8"]
    );
    let res = c.resources.as_ref().expect("resources");
    assert_eq!(
        res.requests.as_ref().expect("requests")["nvidia.com/gpu"],
        res.limits.as_ref().expect("limits")["nvidia.com/gpu"],
        "device requests equal limits"
    );
    assert_eq!(
        res.limits.as_ref().expect("limits")["nvidia.com/gpu"].0,
        "8"
    );
    let env = env_of(c);
    assert_eq!(env["HF_HUB_OFFLINE"], "1");
    assert_eq!(env["DEEPINFER_HF_MODEL_DIR"], MODEL_MOUNT);
    assert_eq!(env["DEEPINFER_RANK"], "1");
    assert_eq!(env["DEEPINFER_NUM_PODS"], "2");
    assert_eq!(env["DEEPINFER_WORLD_SIZE"], "16");
    assert_eq!(
        env["DEEPINFER_LEADER_ADDRESS"],
        format!("rank-0.flash-worker-{short}-1.serving.svc")
    );
    let selector = spec.node_selector.clone().expect("selector");
    assert_eq!(selector["nvidia.com/gpu.present"], "true");
    assert_eq!(selector["nvidia.com/gpu.product"], "NVIDIA-H200");
    let term = &spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .expect("required affinity")[0];
    assert_eq!(term.topology_key, "nvidia.com/gpu.clique");
    let together = term
        .label_selector
        .as_ref()
        .and_then(|l| l.match_labels.clone())
        .expect("group selector");
    assert_eq!(together[labels::GROUP], "1");
    assert_eq!(
        together[labels::REVISION],
        rev,
        "a group is placed with its own revision's ranks only"
    );
    assert_eq!(
        spec.readiness_gates.as_ref().expect("gates")[0].condition_type,
        ACCEPTED_POD_CONDITION
    );
    assert_eq!(
        spec.restart_policy.as_deref(),
        Some("Never"),
        "a failed rank fails its pod, so the group is replaced"
    );
    assert_eq!(
        spec.subdomain.clone(),
        Some(format!("flash-worker-{short}-1"))
    );
    let sc = c.security_context.as_ref().expect("security context");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(spec.automount_service_account_token, Some(false));
}

#[test]
fn ascend_pods_request_npus_and_stay_in_one_super_pod() {
    let d = did(
        json!({"type": "Ascend", "devicesPerPod": 8}),
        json!([{"name": "decode", "replicas": 1, "parallel": {"tensor": 8, "data": 2, "expert": 16}}]),
    );
    let pods = group_pods(&d, &d.spec.roles[0], 0, "r");
    assert_eq!(pods.len(), 2);
    let spec = pods[0].spec.as_ref().expect("spec");
    let limits = spec.containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .expect("limits");
    assert_eq!(limits["huawei.com/Ascend910"].0, "8");
    assert!(!limits.contains_key("nvidia.com/gpu"));
    assert_eq!(
        spec.node_selector.clone().expect("selector")["accelerator"],
        "huawei-Ascend910"
    );
    let term = &spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .expect("affinity")[0];
    assert_eq!(term.topology_key, "huawei.com/super-pod-id");
    assert!(spec
        .tolerations
        .clone()
        .expect("tolerations")
        .iter()
        .any(|t| t.key.as_deref() == Some("huawei.com/Ascend910")));
}

#[test]
fn a_single_pod_group_needs_no_domain_label() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let pods = group_pods(&d, &d.spec.roles[0], 0, "r");
    assert_eq!(pods.len(), 1);
    assert!(pods[0].spec.as_ref().expect("spec").affinity.is_none());
}

#[test]
fn the_revision_tracks_running_bits_but_not_replicas_or_prompts() {
    let a = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let mut b = a.clone();
    b.spec.roles[0].replicas = 5;
    b.spec.acceptance.prompts[0].prompt = "other".into();
    assert_eq!(revision(&a.spec), revision(&b.spec));
    let mut c = a.clone();
    c.spec.runtime.image = IMAGE.replace("0123", "fedc");
    assert_ne!(revision(&a.spec), revision(&c.spec));
    let mut d = a.clone();
    d.spec.roles[0].parallel.expert = 8;
    assert_ne!(revision(&a.spec), revision(&d.spec));
}

#[test]
fn services_route_to_leaders_and_rendezvous_per_group() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "prefill", "replicas": 2, "parallel": {"tensor": 8}}]),
    );
    let groups = [
        ("prefill".to_string(), "aaaaa11111".to_string(), 0),
        ("prefill".to_string(), "bbbbb22222".to_string(), 0),
    ];
    let svcs = services(&d, &groups);
    let names: Vec<_> = svcs.iter().map(ResourceExt::name_any).collect();
    assert_eq!(
        names,
        [
            "flash-prefill",
            "flash-prefill-aaaaa-0",
            "flash-prefill-bbbbb-0"
        ]
    );
    let role = svcs[0].spec.as_ref().expect("spec");
    let selector = role.selector.clone().expect("selector");
    assert_eq!(selector[labels::RANK], "0");
    assert!(
        !selector.contains_key(labels::REVISION),
        "the role Service routes to leaders of every revision during a rollout"
    );
    let group = svcs[2].spec.as_ref().expect("spec");
    assert_eq!(group.cluster_ip.as_deref(), Some("None"));
    assert_eq!(group.publish_not_ready_addresses, Some(true));
    assert_eq!(
        group.selector.clone().expect("selector")[labels::REVISION],
        "bbbbb22222"
    );
}

#[test]
fn the_acceptance_leader_runs_the_injected_runner_in_the_engine_image() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 3, "parallel": {"tensor": 16}}]),
    );
    let names = AcceptanceNames::new("flash", "rev1", "");
    let job = acceptance_job(
        &d,
        &names,
        0,
        "rev1",
        "ghcr.io/deepinfer/deepinfer-operator:0.1.0",
    )
    .expect("job");
    let pod = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .expect("pod");
    let init = &pod.init_containers.as_ref().expect("init")[0];
    assert_eq!(
        init.image.as_deref(),
        Some("ghcr.io/deepinfer/deepinfer-operator:0.1.0")
    );
    assert_eq!(init.args.clone().expect("args")[0], "install-runner");
    let engine = &pod.containers[0];
    assert_eq!(engine.name, ENGINE_CONTAINER);
    assert_eq!(
        engine.image.as_deref(),
        Some(IMAGE),
        "acceptance runs the very image under test"
    );
    assert_eq!(
        engine.command.clone().expect("command"),
        [
            format!("{RUNNER_DIR}/deepinfer-runner"),
            "run-engine".to_string()
        ]
    );
    assert_eq!(
        engine
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits")["nvidia.com/gpu"]
            .0,
        "8"
    );
    let judge = &pod.containers[1];
    assert_eq!(judge.name, JUDGE_CONTAINER);
    assert_eq!(
        judge.image.as_deref(),
        Some("ghcr.io/deepinfer/deepinfer-operator:0.1.0"),
        "the judge is the operator's image, never the image under test"
    );
    assert_eq!(
        judge.command.clone().expect("command"),
        ["deepinfer-runner", "accept"]
    );
    let args = judge.args.clone().expect("args");
    assert!(args
        .windows(2)
        .any(|w| w == ["--layout", "worker=16x1x1x1"]));
    assert!(args
        .windows(2)
        .any(|w| w[0] == "--evidence-configmap" && w[1] == names.evidence_configmap));
    assert!(args
        .windows(2)
        .any(|w| w == ["--engine-dir", ACCEPTANCE_WORK_DIR]));
    assert!(
        judge
            .resources
            .as_ref()
            .is_some_and(|r| r.requests.is_some()),
        "the judge is never BestEffort"
    );
    // No API token in the pod but the judge's own, mounted into the judge alone.
    assert_eq!(pod.automount_service_account_token, Some(false));
    let token_volumes: Vec<&str> = pod
        .volumes
        .iter()
        .flatten()
        .filter(|v| {
            v.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.service_account_token.is_some())
            })
        })
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(token_volumes.len(), 1);
    let mounting: Vec<&str> = pod
        .init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .filter(|c| {
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == token_volumes[0])
        })
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(mounting, [JUDGE_CONTAINER]);
    let work = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == ACCEPTANCE_WORK_DIR)
            .map(|m| (m.name.clone(), m.read_only == Some(true)))
    };
    assert_eq!(work(engine), Some(("work".into(), false)));
    assert_eq!(
        work(judge),
        Some(("work".into(), true)),
        "the judge reads the shared directory read-only"
    );
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("flash-acceptance")
    );
    assert_eq!(
        job.spec.as_ref().and_then(|s| s.backoff_limit),
        Some(0),
        "no retry storm"
    );
    let follower = acceptance_job(&d, &names, 1, "rev1", "op").expect("follower");
    let fpod = follower.spec.and_then(|s| s.template.spec).expect("pod");
    assert!(
        fpod.init_containers.is_none() && fpod.containers[0].command.is_none(),
        "followers run the engine alone"
    );
    assert_eq!(
        env_of(&fpod.containers[0])["DEEPINFER_LEADER_ADDRESS"],
        format!("rank-0.{}.serving.svc", names.run),
        "the run's ranks meet under the run's own Service, not a serving group's"
    );
    assert_eq!(fpod.subdomain.as_deref(), Some(names.run.as_str()));
    let together = fpod
        .affinity
        .and_then(|a| a.pod_affinity)
        .and_then(|p| p.required_during_scheduling_ignored_during_execution)
        .expect("affinity")[0]
        .label_selector
        .clone()
        .and_then(|l| l.match_labels)
        .expect("selector");
    assert_eq!(together[labels::COMPONENT], "acceptance");
    assert_eq!(together[labels::GROUP], names.run);
}

#[test]
fn engines_are_probed_and_never_best_effort() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let pod = &group_pods(&d, &d.spec.roles[0], 0, "r")[0];
    let engine = &pod.spec.as_ref().expect("spec").containers[0];
    let startup = engine.startup_probe.as_ref().expect("startup probe");
    let get = startup.http_get.as_ref().expect("HTTP GET");
    assert_eq!(get.path.as_deref(), Some(HEALTH_PATH));
    assert_eq!(get.port, IntOrString::String("serve".into()));
    let allowed = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
    assert!(
        allowed >= 30 * 60,
        "weights get at least 30 minutes to load, not {allowed} s"
    );
    assert!(engine.readiness_probe.is_some());
    // A hung engine is stopped after a minute without an answer, not kept unready for ever.
    let liveness = engine.liveness_probe.as_ref().expect("liveness probe");
    assert_eq!(
        liveness.http_get.as_ref().and_then(|g| g.path.as_deref()),
        Some(HEALTH_PATH)
    );
    let patience = liveness.period_seconds.unwrap_or(10) * liveness.failure_threshold.unwrap_or(3);
    assert!(
        (60..=300).contains(&patience),
        "a minute to five without an answer, not {patience} s"
    );
    let requests = engine
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .expect("requests");
    assert!(
        requests.contains_key("cpu") && requests.contains_key("memory"),
        "CPU and memory requests keep the pod out of BestEffort: {requests:?}"
    );
    assert_eq!(requests["nvidia.com/gpu"].0, "8");
}

#[test]
fn runtime_probes_and_resources_override_the_defaults_but_not_the_devices() {
    let mut d = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    d.spec.runtime = serde_json::from_value(json!({
        "image": IMAGE, "commit": "0123456",
        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 3},
        "livenessProbe": {"tcpSocket": {"port": 8000}, "failureThreshold": 30},
        "resources": {"limits": {"memory": "64Gi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "12"}}
    }))
    .expect("runtime");
    let d = valid(d);
    let pod = &group_pods(&d, &d.spec.roles[0], 0, "r")[0];
    let engine = &pod.spec.as_ref().expect("spec").containers[0];
    assert_eq!(
        engine
            .readiness_probe
            .as_ref()
            .and_then(|p| p.period_seconds),
        Some(3)
    );
    assert_eq!(
        engine
            .liveness_probe
            .as_ref()
            .and_then(|p| p.failure_threshold),
        Some(30)
    );
    let res = engine.resources.as_ref().expect("resources");
    let requests = res.requests.clone().expect("requests");
    let limits = res.limits.clone().expect("limits");
    assert_eq!(requests["cpu"].0, "12");
    assert_eq!(
        requests["memory"].0, "64Gi",
        "a memory limit alone is also the request"
    );
    assert_eq!(
        limits["nvidia.com/gpu"].0, "8",
        "devices come from spec.accelerator"
    );
    assert_eq!(requests["nvidia.com/gpu"].0, "8");
}

#[test]
fn the_revision_covers_the_template_version_and_resources_but_not_probes_or_rollout() {
    let a = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let mut probed = a.clone();
    probed.spec.runtime.readiness_probe = Some(health_probe(1, 1));
    probed.spec.runtime.liveness_probe = Some(health_probe(1, 1));
    probed.spec.roles[0].rollout.max_unavailable = 1;
    assert_eq!(revision(&a.spec), revision(&probed.spec));
    let mut sized = a.clone();
    sized.spec.runtime.resources = Some(ResourceRequirements::default());
    assert_ne!(revision(&a.spec), revision(&sized.spec));
}

#[test]
fn an_exec_probe_and_a_product_picked_by_node_selector_are_part_of_the_revision() {
    let a = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let mut exec = a.clone();
    exec.spec.runtime.liveness_probe = Some(k8s_openapi::api::core::v1::Probe {
        exec: Some(k8s_openapi::api::core::v1::ExecAction {
            command: Some(vec!["/bin/sh".into(), "-c".into(), "kill 1".into()]),
        }),
        ..Default::default()
    });
    assert_ne!(
        revision(&a.spec),
        revision(&exec.spec),
        "a command run inside the engine is judged"
    );
    let selected = |product: &str| {
        let mut d = a.clone();
        d.spec.pod = Some(
            serde_json::from_value(json!({"nodeSelector": {"nvidia.com/gpu.product": product}}))
                .expect("pod settings"),
        );
        revision(&d.spec)
    };
    assert_ne!(selected("NVIDIA-H200"), selected("NVIDIA-B200"));
    assert_ne!(revision(&a.spec), selected("NVIDIA-H200"));
    let mut other_label = a.clone();
    other_label.spec.pod =
        Some(serde_json::from_value(json!({"nodeSelector": {"zone": "a"}})).expect("pod settings"));
    assert_eq!(
        revision(&a.spec),
        revision(&other_label.spec),
        "a node selector that picks no product only moves the pods"
    );
}

/// Hash of the engine container of a fixed resource, recorded at [`TEMPLATE_VERSION`].
const ENGINE_AT_TEMPLATE_VERSION: (i32, &str) = (5, "b02e90b32771ea2e");

#[test]
fn the_template_version_moves_with_the_engine_container() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    );
    let pod = &group_pods(&d, &d.spec.roles[0], 0, "r")[0];
    let mut engine = pod.spec.as_ref().expect("spec").containers[0].clone();
    // Probes roll without a new judgement; everything else the engine sees is judged.
    engine.startup_probe = None;
    engine.readiness_probe = None;
    engine.liveness_probe = None;
    let now = (TEMPLATE_VERSION, short_hash(&engine, 16));
    assert_eq!(
        (
            ENGINE_AT_TEMPLATE_VERSION.0,
            ENGINE_AT_TEMPLATE_VERSION.1.to_string()
        ),
        now,
        "the engine container changed: if the change alters what acceptance judged, bump \
         TEMPLATE_VERSION; then record the new pair in ENGINE_AT_TEMPLATE_VERSION"
    );
}

#[test]
fn a_budget_per_role_allows_what_the_rollout_allows() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "decode", "replicas": 2, "parallel": {"tensor": 16},
                "rollout": {"maxSurge": 0, "maxUnavailable": 1}}]),
    );
    let pdb = budget(&d, &d.spec.roles[0]);
    assert_eq!(pdb.name_any(), "flash-decode");
    let spec = pdb.spec.expect("spec");
    assert_eq!(
        spec.min_available,
        Some(IntOrString::Int(3)),
        "2 groups of 2 pods, one pod (hence one group) may be evicted"
    );
    assert_eq!(
        spec.max_unavailable, None,
        "the owner has no scale subresource"
    );
    let selector = spec
        .selector
        .and_then(|s| s.match_labels)
        .expect("selector");
    assert_eq!(selector[labels::ROLE], "decode");
    assert_eq!(selector[labels::COMPONENT], "worker");
    assert_eq!(pdb.metadata.owner_references.expect("owner")[0].uid, "u-1");
}

#[test]
fn a_kept_revision_rebuilds_the_groups_of_its_spec() {
    let old = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let rev = revision(&old.spec);
    let kept = controller_revision(&old, &rev, 1);
    let mut now = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 3, "parallel": {"tensor": 8}}]),
    );
    now.spec.runtime.image = IMAGE.replace("0123", "fedc");
    let now = valid(now);
    let past = now
        .with_spec(kept_spec(&kept).expect("spec kept"), &Default::default())
        .expect("still valid");
    assert_eq!(revision(&past.spec), rev);
    let pod = &group_pods(&past, &past.spec.roles[0], 0, &rev)[0];
    assert_eq!(
        pod.spec.as_ref().expect("spec").containers[0]
            .image
            .as_deref(),
        Some(IMAGE),
        "the serving revision's pods keep its image while another is judged"
    );
}

#[test]
fn acceptance_run_names_carry_a_64_bit_hash_of_revision_and_token() {
    let a = AcceptanceNames::new("flash", "rev1", "token/spec");
    let hash = a
        .run
        .strip_prefix("flash-accept-")
        .expect("run name starts with the resource's");
    assert_eq!(hash.len() * 4, 64, "{hash}");
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");
    assert_eq!(a.evidence_configmap, format!("flash-evidence-{hash}"));
    assert_eq!(a.job(7), format!("flash-accept-{hash}-7"));
    // Revision and token each change the name.
    assert_ne!(
        a.run,
        AcceptanceNames::new("flash", "rev2", "token/spec").run
    );
    assert_ne!(
        a.run,
        AcceptanceNames::new("flash", "rev1", "token/spek").run
    );
    // At the longest name, ranks up to 99 fit a Job name (and its pods' job-name label).
    let longest = "a".repeat(crate::controller::gates::spec::validate::MAX_NAME_LENGTH);
    let names = AcceptanceNames::new(&longest, "rev1", "");
    assert_eq!(names.job(99).len(), 63);
    assert_eq!(names.job(100).len(), 64);
}

/// One worker group of 8 GPUs, its checkpoint fetched from the hub.
fn worker_from_the_hub() -> ValidatedDeployment {
    let mut d = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    d.spec.model.source = serde_json::from_value(json!({"hub": {
        "revision": "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d", "claimName": "ckpt"}}))
    .expect("hub source");
    valid(d)
}

#[test]
fn fetch_and_verify_jobs_carry_the_configured_deadlines() {
    let d = worker_from_the_hub();
    let deadlines = JobDeadlines {
        fetch_seconds: 7200,
        verify_seconds: 600,
    };
    let fetch =
        fetch_job(&d, "op:1", &deadlines, &HubProxy::default()).expect("hub source fetches");
    let verify = verify_job(&d, "op:1", &deadlines);
    let deadline = |j: &Job| j.spec.as_ref().and_then(|s| s.active_deadline_seconds);
    assert_eq!(deadline(&fetch), Some(7200));
    assert_eq!(deadline(&verify), Some(600));
    let defaults = JobDeadlines::default();
    assert!(
        defaults.fetch_seconds >= 6 * 3600 && defaults.verify_seconds >= 600,
        "defaults leave room for a large checkpoint: {defaults:?}"
    );
}

/// The fetch Job reaches the hub through the proxies the operator was given, as the standard
/// variables; unset ones are absent, and only the fetch Job carries them.
#[test]
fn the_fetch_job_carries_the_hub_proxies() {
    let d = worker_from_the_hub();
    let deadlines = JobDeadlines::default();
    let env = |proxy: &HubProxy| -> Vec<(String, Option<String>)> {
        let job = fetch_job(&d, "op:1", &deadlines, proxy).expect("hub source fetches");
        job.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect()
    };
    let proxy = HubProxy {
        https: "http://proxy.corp:3128".into(),
        http: String::new(),
        no: "mirror.internal,10.0.0.0/8".into(),
    };
    assert_eq!(
        env(&proxy),
        [
            (
                "HTTPS_PROXY".to_string(),
                Some("http://proxy.corp:3128".to_string())
            ),
            (
                "NO_PROXY".to_string(),
                Some("mirror.internal,10.0.0.0/8".to_string())
            ),
        ]
    );
    assert!(env(&HubProxy::default()).is_empty());
    let verify = verify_job(&d, "op:1", &deadlines);
    let verify_env = verify.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(
        verify_env.iter().all(|e| !e.name.ends_with("_PROXY")),
        "{verify_env:?}"
    );
}

#[test]
fn the_judge_may_only_read_and_update_its_own_evidence_which_the_operator_creates() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let names = AcceptanceNames::new("flash", "rev1", "");
    let (_, role, binding) = acceptance_rbac(&d, &names, &[]);
    let rules = role.rules.expect("rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].api_groups, Some(vec![String::new()]));
    assert_eq!(rules[0].resources, Some(vec!["configmaps".to_string()]));
    assert_eq!(
        rules[0].resource_names,
        Some(vec![names.evidence_configmap.clone()])
    );
    assert_eq!(rules[0].verbs, ["get", "patch"]);
    assert_eq!(binding.role_ref.name, names.service_account);
    // A run of an earlier target still going keeps its own evidence writable.
    let job = acceptance_job(
        &d,
        &AcceptanceNames::new("flash", "rev0", ""),
        0,
        "rev0",
        "op",
    )
    .expect("job");
    let earlier = evidence_of_job("flash", &job).expect("the leader's judge names its evidence");
    assert_eq!(
        earlier,
        AcceptanceNames::new("flash", "rev0", "").evidence_configmap
    );
    let (_, role, _) = acceptance_rbac(&d, &names, std::slice::from_ref(&earlier));
    let mut both = vec![earlier, names.evidence_configmap.clone()];
    both.sort();
    assert_eq!(role.rules.expect("rules")[0].resource_names, Some(both));
    let evidence = acceptance_evidence_configmap(&d, &names, "rev1");
    assert_eq!(evidence.name_any(), names.evidence_configmap);
    assert!(evidence.data.unwrap_or_default().is_empty());
    let labels = evidence.metadata.labels.expect("labels");
    assert_eq!(labels[labels::COMPONENT], "evidence");
    assert_eq!(labels[labels::REVISION], "rev1");
    assert_eq!(labels[labels::DEPLOYMENT], "flash");
    let owner = &evidence.metadata.owner_references.expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("DeepInferDeployment", Some(true))
    );
}

#[test]
fn where_groups_are_pod_groups_each_group_is_one_gang_its_pods_name() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}]),
    )
    .placed_as_pod_groups(true);
    let rev = revision(&d.spec);
    let role = &d.spec.roles[0];
    let group = group_pod_group(&d, role, &rev, 1);
    let name = group_service_name("flash", "worker", &rev, 1);
    assert_eq!(group.name_any(), name);
    assert_eq!(
        group
            .spec
            .scheduling_policy
            .gang
            .as_ref()
            .map(|g| g.min_count),
        Some(2),
        "all ranks or none"
    );
    assert!(group.spec.scheduling_policy.basic.is_none());
    let topology = group
        .spec
        .scheduling_constraints
        .and_then(|c| c.topology)
        .unwrap_or_default();
    assert_eq!(topology.len(), 1);
    assert_eq!(topology[0].key, "nvidia.com/gpu.clique");
    assert_eq!(
        group.metadata.owner_references.unwrap_or_default()[0].uid,
        "u-1"
    );
    let labels = group.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(labels::GROUP).map(String::as_str), Some("1"));
    assert_eq!(
        labels.get(labels::COMPONENT).map(String::as_str),
        Some("worker")
    );
    for pod in group_pods(&d, role, 1, &rev) {
        let spec = pod.spec.expect("spec");
        assert_eq!(
            spec.scheduling_group.and_then(|g| g.pod_group_name),
            Some(name.clone())
        );
        assert!(
            spec.affinity.is_some(),
            "the domain affinity stays where the scheduler has no topology-aware placement"
        );
    }
    let affinity_only = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}]),
    );
    assert!(group_pods(&affinity_only, role, 1, &rev).iter().all(|p| p
        .spec
        .as_ref()
        .is_some_and(|s| s.scheduling_group.is_none())));
}

#[test]
fn a_single_pod_group_is_a_gang_of_one_without_a_domain() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    )
    .placed_as_pod_groups(true);
    let group = group_pod_group(&d, &d.spec.roles[0], "rev1", 0);
    assert_eq!(
        group.spec.scheduling_policy.gang.map(|g| g.min_count),
        Some(1)
    );
    assert!(group.spec.scheduling_constraints.is_none());
}

#[test]
fn a_multi_pod_acceptance_run_is_one_gang_and_a_single_pod_run_is_none() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    )
    .placed_as_pod_groups(true);
    let names = AcceptanceNames::new("flash", "rev1", "");
    let group = acceptance_pod_group(&d, &names.groups(&d.spec)[0], "rev1").expect("two ranks");
    assert_eq!(group.name_any(), names.run);
    assert_eq!(
        group.spec.scheduling_policy.gang.map(|g| g.min_count),
        Some(2)
    );
    for rank in 0..2 {
        let job = acceptance_job(&d, &names, rank, "rev1", "op").expect("job");
        let pod = job.spec.and_then(|s| s.template.spec).expect("pod spec");
        assert_eq!(
            pod.scheduling_group.and_then(|g| g.pod_group_name),
            Some(names.run.clone())
        );
    }
    let single = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    )
    .placed_as_pod_groups(true);
    assert!(acceptance_pod_group(&single, &names.groups(&single.spec)[0], "rev1").is_none());
    let job = acceptance_job(&single, &names, 0, "rev1", "op").expect("job");
    assert!(job
        .spec
        .and_then(|s| s.template.spec)
        .is_some_and(|p| p.scheduling_group.is_none()));
}

#[test]
fn another_scheduler_and_its_queue_labels_reach_every_engine_pod() {
    let mut raw = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    );
    raw.spec.scheduling = Some(crate::api::SchedulingSpec {
        scheduler_name: Some("kai-scheduler".into()),
        pod_labels: BTreeMap::from([
            ("kai.scheduler/queue".into(), "team-a".into()),
            ("kueue.x-k8s.io/queue-name".into(), "team-a".into()),
        ]),
        pod_annotations: BTreeMap::from([(
            "scheduling.volcano.sh/queue-name".into(),
            "team-a".into(),
        )]),
        exclusive_domain: false,
    });
    let before = revision(&raw.spec);
    let d = valid(raw);
    assert_eq!(
        revision(&d.spec),
        before,
        "scheduling is not part of the revision"
    );
    let pod = group_pods(&d, &d.spec.roles[0], 0, "rev1").remove(0);
    let job = acceptance_job(
        &d,
        &AcceptanceNames::new("flash", "rev1", ""),
        0,
        "rev1",
        "op",
    )
    .and_then(|j| j.spec)
    .expect("job");
    for (meta, spec) in [
        (pod.metadata, pod.spec.expect("pod spec")),
        (
            job.template.metadata.expect("template metadata"),
            job.template.spec.expect("template spec"),
        ),
    ] {
        assert_eq!(spec.scheduler_name.as_deref(), Some("kai-scheduler"));
        let labels = meta.labels.unwrap_or_default();
        assert_eq!(
            labels.get("kai.scheduler/queue").map(String::as_str),
            Some("team-a")
        );
        assert_eq!(
            labels.get("kueue.x-k8s.io/queue-name").map(String::as_str),
            Some("team-a")
        );
        assert!(labels.contains_key(labels::DEPLOYMENT));
        assert_eq!(
            meta.annotations
                .unwrap_or_default()
                .get("scheduling.volcano.sh/queue-name")
                .map(String::as_str),
            Some("team-a")
        );
    }
}

#[test]
fn with_a_device_class_each_engine_pod_claims_its_devices_from_one_template() {
    let d = did(
        json!({"type": "NVIDIA", "deviceClassName": "gpu.nvidia.com", "devicesPerPod": 4}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let templates = claim_templates(&d);
    assert_eq!(templates.len(), 1, "no domain class, no domain template");
    let template = templates[0].clone();
    let name = template.name_any();
    assert!(name.starts_with("flash-devices-"), "{name}");
    assert_eq!(
        template.metadata.owner_references.unwrap_or_default()[0].uid,
        "u-1"
    );
    let request = template
        .spec
        .and_then(|s| s.spec)
        .and_then(|s| s.devices)
        .and_then(|d| d.requests)
        .unwrap_or_default();
    assert_eq!(request.len(), 1);
    let exactly = request[0].exactly.as_ref().expect("an exact request");
    assert_eq!(
        (
            request[0].name.as_str(),
            exactly.device_class_name.as_str(),
            exactly.allocation_mode.as_deref(),
            exactly.count
        ),
        (DEVICE_CLAIM, "gpu.nvidia.com", Some("ExactCount"), Some(4))
    );

    let rev = revision(&d.spec);
    let pods = group_pods(&d, &d.spec.roles[0], 0, &rev);
    assert_eq!(pods.len(), 2);
    let names = AcceptanceNames::new("flash", &rev, "");
    let job = acceptance_job(&d, &names, 0, &rev, "operator:1").expect("an acceptance Job");
    let job_pod = job.spec.and_then(|s| s.template.spec).expect("pod spec");
    for spec in pods
        .into_iter()
        .map(|p| p.spec.expect("spec"))
        .chain([job_pod])
    {
        let claims = spec.resource_claims.clone().unwrap_or_default();
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].name, DEVICE_CLAIM);
        assert_eq!(
            claims[0].resource_claim_template_name.as_deref(),
            Some(name.as_str())
        );
        let engine = &spec.containers[0];
        let resources = engine.resources.clone().expect("resources");
        assert_eq!(
            resources
                .claims
                .unwrap_or_default()
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            [DEVICE_CLAIM]
        );
        for list in [resources.requests, resources.limits].into_iter().flatten() {
            assert!(
                !list.contains_key("nvidia.com/gpu"),
                "devices come from the claim, not the extended resource: {list:?}"
            );
        }
        assert_eq!(
            templates_in_use([&spec]),
            std::collections::BTreeSet::from([name.clone()])
        );
    }
}

#[test]
fn another_device_shape_is_another_template_and_without_a_class_there_is_none() {
    let class = |devices: i32| {
        did(
            json!({"type": "NVIDIA", "deviceClassName": "gpu.nvidia.com", "devicesPerPod": devices}),
            json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
        )
    };
    let four = device_claim_template_name(&class(4), 4);
    assert_ne!(four, device_claim_template_name(&class(8), 8));
    assert_eq!(four, device_claim_template_name(&class(4), 4));
    assert_ne!(
        revision(&class(4).spec),
        revision(&class(8).spec),
        "a new device shape is a new revision, judged before it serves"
    );

    let plain = did(
        json!({"type": "NVIDIA", "devicesPerPod": 4}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    assert!(claim_templates(&plain).is_empty());
    let rev = revision(&plain.spec);
    let spec = group_pods(&plain, &plain.spec.roles[0], 0, &rev)[0]
        .spec
        .clone()
        .expect("spec");
    assert!(spec.resource_claims.is_none());
    let resources = spec.containers[0].resources.clone().expect("resources");
    assert!(resources.claims.is_none());
    assert_eq!(
        resources.limits.unwrap_or_default()["nvidia.com/gpu"],
        Quantity("4".into())
    );
}

#[test]
fn a_domain_class_gives_each_multi_pod_pod_group_one_claim_its_pods_share() {
    let d = did(
        json!({"type": "NVIDIA", "deviceClassName": "gpu.nvidia.com",
               "domainDeviceClassName": "compute-domain-default-channel.nvidia.com"}),
        json!([{"name": "decode", "replicas": 1, "parallel": {"tensor": 16}},
               {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}}]),
    )
    .placed_as_pod_groups(true);
    let templates = claim_templates(&d);
    assert_eq!(templates.len(), 2);
    let domain = domain_claim_template_name(&d).expect("a domain template");
    let exactly = templates[1]
        .spec
        .clone()
        .and_then(|s| s.spec)
        .and_then(|s| s.devices)
        .and_then(|d| d.requests)
        .unwrap_or_default()[0]
        .exactly
        .clone()
        .expect("exact request");
    assert_eq!(templates[1].name_any(), domain);
    assert_eq!(
        (exactly.device_class_name.as_str(), exactly.count),
        ("compute-domain-default-channel.nvidia.com", Some(1))
    );

    let rev = revision(&d.spec);
    let worker = &d.spec.roles[0];
    let group = group_pod_group(&d, worker, &rev, 0);
    let shared = group.spec.resource_claims.clone().unwrap_or_default();
    assert_eq!(shared.len(), 1);
    assert_eq!(
        (
            shared[0].name.as_str(),
            shared[0].resource_claim_template_name.as_deref()
        ),
        (DOMAIN_CLAIM, Some(domain.as_str()))
    );
    for pod in group_pods(&d, worker, 0, &rev) {
        let spec = pod.spec.expect("spec");
        let claims = spec.resource_claims.clone().unwrap_or_default();
        let refs: Vec<(&str, Option<&str>)> = claims
            .iter()
            .map(|c| (c.name.as_str(), c.resource_claim_template_name.as_deref()))
            .collect();
        assert!(
            refs.contains(&(DOMAIN_CLAIM, Some(domain.as_str()))),
            "the pod names the PodGroup's claim exactly: {refs:?}"
        );
        assert_eq!(
            refs.len(),
            2,
            "its own devices and the shared domain: {refs:?}"
        );
        let used: Vec<String> = spec.containers[0]
            .resources
            .clone()
            .and_then(|r| r.claims)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(used, [DEVICE_CLAIM, DOMAIN_CLAIM]);
    }
    // The multi-pod acceptance run's PodGroup and pods share one too.
    let names = AcceptanceNames::new("flash", &rev, "");
    let run = acceptance_pod_group(&d, &names.groups(&d.spec)[0], &rev).expect("two ranks");
    assert_eq!(run.spec.resource_claims.map(|c| c.len()), Some(1));
    let job = acceptance_job(&d, &names, 1, &rev, "op").expect("follower");
    let job_claims = job
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.resource_claims)
        .unwrap_or_default();
    assert!(job_claims.iter().any(|c| c.name == DOMAIN_CLAIM));

    // A one-pod group is inside one domain by definition: nothing shared.
    let decode = &d.spec.roles[1];
    assert!(group_pod_group(&d, decode, &rev, 0)
        .spec
        .resource_claims
        .is_none());
    let single = group_pods(&d, decode, 0, &rev)[0]
        .spec
        .clone()
        .expect("spec");
    assert!(single
        .resource_claims
        .unwrap_or_default()
        .iter()
        .all(|c| c.name != DOMAIN_CLAIM));
    // Without PodGroups there is no group to share a claim with.
    let unplaced = did(
        json!({"type": "NVIDIA", "domainDeviceClassName": "compute-domain-default-channel.nvidia.com"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    );
    let spec = group_pods(&unplaced, &unplaced.spec.roles[0], 0, &rev)[0]
        .spec
        .clone()
        .expect("spec");
    assert!(spec.resource_claims.is_none());
}

#[test]
fn every_engine_container_carries_the_contracts_environment_with_its_peers() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "decode", "replicas": 1, "parallel": {"tensor": 8, "data": 2}}]),
    );
    let pods = group_pods(&d, &d.spec.roles[0], 0, "r1");
    assert_eq!(pods.len(), 2);
    let env = env_of(&pods[1].spec.as_ref().expect("spec").containers[0]);
    let missing = crate::contract::missing_env(|name| env.get(name).cloned());
    assert!(missing.is_empty(), "not set: {missing:?}");
    use crate::contract::env as var;
    assert_eq!(env[var::CONTRACT_VERSION], crate::contract::VERSION);
    assert_eq!(env[var::RANK], "1");
    assert_eq!(
        env[var::PEERS],
        "rank-0.flash-decode-r1-0.serving.svc,rank-1.flash-decode-r1-0.serving.svc"
    );
    assert_eq!(
        env[var::LEADER_ADDRESS],
        "rank-0.flash-decode-r1-0.serving.svc"
    );
    assert_eq!(env[var::SERVE_PORT], "8000");
}

#[test]
fn per_role_runtime_settings_reach_only_their_roles_engines() {
    let mut d = raw(
        json!({"type": "NVIDIA"}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}}
        ]),
    );
    let decode_image = format!("r.example.com/decode@sha256:{}", "cd".repeat(32));
    d.spec.runtime.command = vec!["deepinfer-serve".into()];
    d.spec.acceptance.engine = Some(serving_command_template());
    d.spec.runtime.roles = vec![crate::api::RoleRuntime {
        role: "decode".into(),
        image: Some(decode_image.clone()),
        args: vec!["--decode-only".into()],
        env: vec![EnvVar {
            name: "DEEPINFER_KV_TRANSFER".into(),
            value: Some("on".into()),
            value_from: None,
        }],
    }];
    let before = revision(&d.spec);
    let d = valid(d);
    let engine = |role: usize| {
        group_pods(&d, &d.spec.roles[role], 0, "r")[0]
            .spec
            .clone()
            .expect("spec")
            .containers[0]
            .clone()
    };
    let (prefill, decode) = (engine(0), engine(1));
    assert_eq!(prefill.image.as_deref(), Some(IMAGE));
    assert_eq!(decode.image.as_deref(), Some(decode_image.as_str()));
    for c in [&prefill, &decode] {
        assert_eq!(c.command, Some(vec!["deepinfer-serve".to_string()]));
    }
    let args = |c: &Container| c.args.clone().unwrap_or_default();
    assert_eq!(
        args(&prefill),
        ["--model_name", "/models/model", "--max_batch_size", "8"]
    );
    assert_eq!(
        args(&decode),
        [
            "--model_name",
            "/models/model",
            "--max_batch_size",
            "8",
            "--decode-only"
        ]
    );
    assert!(!env_of(&prefill).contains_key("DEEPINFER_KV_TRANSFER"));
    assert_eq!(env_of(&decode)["DEEPINFER_KV_TRANSFER"], "on");
    let mut plain = d.spec.clone();
    plain.runtime.roles.clear();
    assert_ne!(before, revision(&plain), "per-role settings are judged");
}

#[test]
fn ascend_superpod_pods_request_their_devices_as_huawei_com_npu() {
    let d = did(
        json!({"type": "Ascend", "devicesPerPod": 16, "resourceName": "huawei.com/npu"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 32}}]),
    );
    for pod in group_pods(&d, &d.spec.roles[0], 0, "r") {
        let res = pod.spec.expect("spec").containers[0]
            .resources
            .clone()
            .expect("resources");
        for side in [res.requests.expect("requests"), res.limits.expect("limits")] {
            assert_eq!(side["huawei.com/npu"].0, "16");
            assert!(!side.contains_key("huawei.com/Ascend910"));
        }
    }
}

#[test]
fn ascend_group_pods_mount_their_groups_rank_table_and_nvidia_pods_none() {
    let d = did(
        json!({"type": "Ascend", "devicesPerPod": 16}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 32}}]),
    );
    for pod in group_pods(&d, &d.spec.roles[0], 0, "r") {
        let spec = pod.spec.expect("spec");
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "rank-table")
            .expect("rank table volume");
        assert_eq!(
            volume.config_map.as_ref().map(|c| c.name.as_str()),
            Some("rings-config-flash-worker-r-0")
        );
        let engine = &spec.containers[0];
        assert!(engine
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "rank-table" && m.mount_path == RANK_TABLE_DIR));
        assert_eq!(
            env_of(engine)["RANK_TABLE_FILE"],
            "/user/serverid/devindex/config/hccl.json"
        );
    }
    let nvidia = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    );
    for pod in group_pods(&nvidia, &nvidia.spec.roles[0], 0, "r") {
        let spec = pod.spec.expect("spec");
        assert!(!spec
            .volumes
            .iter()
            .flatten()
            .any(|v| v.name == "rank-table"));
        assert!(!env_of(&spec.containers[0]).contains_key("RANK_TABLE_FILE"));
    }
}

#[test]
fn decode_engines_find_the_prefill_role_through_env_and_a_file_of_ready_leaders() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([
            {"name": "prefill", "replicas": 2, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}}
        ]),
    );
    let engine = |role: usize| {
        group_pods(&d, &d.spec.roles[role], 0, "r")[0]
            .spec
            .clone()
            .expect("spec")
    };
    let (prefill, decode) = (engine(0), engine(1));
    let env = env_of(&decode.containers[0]);
    assert_eq!(
        env["DEEPINFER_PREFILL_SERVICE"],
        "flash-prefill.serving.svc:8000"
    );
    assert!(
        !env.contains_key("DEEPINFER_VISION_SERVICE"),
        "no vision role"
    );
    assert_eq!(
        env["DEEPINFER_PEER_ENDPOINTS_FILE"],
        "/deepinfer/peers/endpoints.json"
    );
    assert!(decode.volumes.iter().flatten().any(|v| v
        .config_map
        .as_ref()
        .is_some_and(|c| c.name == "flash-role-endpoints")));
    assert!(!env_of(&prefill.containers[0]).contains_key("DEEPINFER_PEER_ENDPOINTS_FILE"));
    assert!(!prefill
        .volumes
        .iter()
        .flatten()
        .any(|v| v.name == "role-endpoints"));
    // The acceptance run's decode group is wired to the run's own prefill group, never to
    // serving groups.
    let names = AcceptanceNames::new("flash", "r", "t");
    let job = acceptance_job(&d, &names, 0, "r", "operator:1").expect("job");
    let pod = job.spec.expect("spec").template.spec.expect("pod");
    let accept_env = env_of(&pod.containers[0]);
    assert_eq!(accept_env["DEEPINFER_ROLE"], "decode");
    assert_eq!(
        accept_env["DEEPINFER_PREFILL_SERVICE"],
        format!(
            "rank-0.{}-p.serving.svc:8000",
            &names.run[..names.run.len() - 2]
        )
    );
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "role-endpoints")
        .and_then(|v| v.config_map.clone())
        .expect("the run's endpoints file");
    assert_eq!(volume.name, names.spec_configmap);
    assert_eq!(
        volume
            .items
            .expect("one key")
            .iter()
            .map(|i| i.key.as_str())
            .collect::<Vec<_>>(),
        ["endpoints.json"]
    );

    // Two prefill groups exist; only the one whose leader is ready is listed.
    let status_of = |ready: &str| {
        let condition = |type_: &str, status: &str| k8s_openapi::api::core::v1::PodCondition {
            type_: type_.into(),
            status: status.into(),
            ..Default::default()
        };
        Some(k8s_openapi::api::core::v1::PodStatus {
            conditions: Some(vec![condition("Ready", ready)]),
            container_statuses: Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
                name: "engine".into(),
                ready: true,
                ..Default::default()
            }]),
            ..Default::default()
        })
    };
    let ready_status = || status_of("True");
    let mut ready = group_pods(&d, &d.spec.roles[0], 0, "r")[0].clone();
    ready.status = ready_status();
    let unready = group_pods(&d, &d.spec.roles[0], 1, "r")[0].clone();
    let groups = [
        ("prefill".to_string(), "r".to_string(), 0),
        ("prefill".to_string(), "r".to_string(), 1),
        ("decode".to_string(), "r".to_string(), 0),
    ];
    let cm = peer_endpoints_configmap(&d, &groups, &[ready, unready]).expect("a file");
    let data = cm.data.expect("data");
    let file = |key: &str| -> serde_json::Value { serde_json::from_str(&data[key]).expect("JSON") };
    assert_eq!(
        file("endpoints-r.json"),
        json!({"prefill": ["rank-0.flash-prefill-r-0.serving.svc:8000"]})
    );
    assert_eq!(file("endpoints.json"), file("endpoints-r.json"));

    // During a rollout each revision's decode pods see that revision's prefill leaders only;
    // the whole-map key lists both.
    let mut new_ready = group_pods(&d, &d.spec.roles[0], 0, "s")[0].clone();
    new_ready.status = ready_status();
    let mut old_ready = group_pods(&d, &d.spec.roles[0], 0, "r")[0].clone();
    old_ready.status = ready_status();
    let rolling = [
        ("prefill".to_string(), "r".to_string(), 0),
        ("decode".to_string(), "r".to_string(), 0),
        ("prefill".to_string(), "s".to_string(), 0),
        ("decode".to_string(), "s".to_string(), 0),
    ];
    let cm = peer_endpoints_configmap(&d, &rolling, &[old_ready, new_ready]).expect("a file");
    let data = cm.data.expect("data");
    let file = |key: &str| -> serde_json::Value { serde_json::from_str(&data[key]).expect("JSON") };
    assert_eq!(
        file("endpoints-r.json"),
        json!({"prefill": ["rank-0.flash-prefill-r-0.serving.svc:8000"]})
    );
    assert_eq!(
        file("endpoints-s.json"),
        json!({"prefill": ["rank-0.flash-prefill-s-0.serving.svc:8000"]})
    );
    assert_eq!(
        file("endpoints.json"),
        json!({"prefill": [
            "rank-0.flash-prefill-r-0.serving.svc:8000",
            "rank-0.flash-prefill-s-0.serving.svc:8000"
        ]})
    );
    let decode_at_s = group_pods(&d, &d.spec.roles[1], 0, "s")[0]
        .spec
        .clone()
        .expect("spec");
    let items = decode_at_s
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "role-endpoints")
        .and_then(|v| v.config_map.clone()?.items)
        .expect("one key");
    assert_eq!(
        items
            .iter()
            .map(|i| (i.key.as_str(), i.path.as_str()))
            .collect::<Vec<_>>(),
        [("endpoints-s.json", "endpoints.json")]
    );

    // A revision judged in place: its candidate prefill serves but is not admitted to traffic
    // (its accepted gate is False). Its candidate decode finds it, and only it; nothing else does.
    let mut candidate = group_pods(&d, &d.spec.roles[0], 0, "s")[0].clone();
    candidate.status = status_of("False");
    let mut old_ready = group_pods(&d, &d.spec.roles[0], 0, "r")[0].clone();
    old_ready.status = ready_status();
    let cm = peer_endpoints_configmap(&d, &rolling, &[old_ready, candidate]).expect("a file");
    let data = cm.data.expect("data");
    let file = |key: &str| -> serde_json::Value { serde_json::from_str(&data[key]).expect("JSON") };
    assert_eq!(
        file("endpoints-s.json"),
        json!({"prefill": ["rank-0.flash-prefill-s-0.serving.svc:8000"]})
    );
    assert_eq!(
        file("endpoints.json"),
        json!({"prefill": ["rank-0.flash-prefill-r-0.serving.svc:8000"]})
    );
    let colocated = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    assert!(peer_endpoints_configmap(&colocated, &[], &[]).is_none());
}

#[test]
fn the_judge_records_the_model_each_roles_image_the_checkpoint_owners_and_review() {
    let decode_image = format!("registry.example.com/decode@sha256:{}", "d".repeat(64));
    let mut raw = raw(
        json!({"type": "NVIDIA"}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}}
        ]),
    );
    raw.spec.runtime.roles =
        vec![
            serde_json::from_value(json!({"role": "decode", "image": decode_image}))
                .expect("role runtime"),
        ];
    raw.spec.service_owners = [("kvCache".to_string(), "platform-kv team".to_string())].into();
    let plain = valid(raw.clone());
    raw.metadata.annotations = Some(
        [
            (crate::api::RERUN_REASON_ANNOTATION, " node fault "),
            (
                crate::api::ACCEPTANCE_CHANGE_REASON_ANNOTATION,
                "four shots",
            ),
            (crate::api::ACCEPTANCE_CHANGE_REVIEWER_ANNOTATION, "jane"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into(),
    );
    let reviewed = valid(raw);
    let names = AcceptanceNames::new("flash", "r", "t");
    let leader = |d: &ValidatedDeployment| {
        let groups = names.groups(&d.spec);
        acceptance_group_job(d, &names, &groups[0], 0, "r", "operator:1").expect("job")
    };
    let args_of = |job: &Job| {
        job.spec
            .clone()
            .expect("spec")
            .template
            .spec
            .expect("pod")
            .containers
            .into_iter()
            .find(|c| c.name == JUDGE_CONTAINER)
            .and_then(|c| c.args)
            .unwrap_or_default()
    };
    let args = args_of(&leader(&plain));
    let value = |flag: &str| {
        let at = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{flag}"));
        args[at + 1].clone()
    };
    assert_eq!(
        value("--image"),
        decode_image,
        "the judged role's own image"
    );
    assert_eq!(
        value("--model-name"),
        "deepseek-ai/DeepSeek-V4.1-Flash-1017"
    );
    let images: BTreeMap<String, String> =
        serde_json::from_str(&value("--role-images")).expect("JSON");
    assert_eq!(
        images,
        [
            ("decode".to_string(), decode_image.clone()),
            ("prefill".to_string(), IMAGE.to_string())
        ]
        .into()
    );
    assert_eq!(value("--checkpoint-claim"), "ckpt");
    assert_eq!(value("--checkpoint-path"), "model");
    assert_eq!(
        value("--checkpoint-source-key"),
        checkpoint_key(&plain.spec)
    );
    assert_eq!(
        value("--service-owners"),
        r#"{"kvCache":"platform-kv team"}"#
    );
    assert!(
        !args.iter().any(|a| a == RERUN_REASON_FLAG),
        "no review annotated"
    );
    // The annotations the run starts under are handed to the judge, trimmed.
    let job = leader(&reviewed);
    let review = crate::api::ReviewRecord {
        rerun_reason: Some("node fault".into()),
        change_reason: Some("four shots".into()),
        change_reviewer: Some("jane".into()),
    };
    // They parse as the judge takes them.
    let parsed = crate::acceptance::AcceptArgs::try_parse_from(
        std::iter::once("accept".to_string()).chain(args_of(&job)),
    )
    .expect("the judge's arguments parse");
    assert_eq!(parsed.identity.review(), Some(review));
    assert_eq!(parsed.identity.role_images, Some(images));
}

#[test]
fn a_disaggregated_acceptance_run_has_one_group_of_each_role_wired_as_in_serving() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([
            {"name": "prefill", "replicas": 2, "parallel": {"tensor": 16}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "vision", "replicas": 1, "parallel": {"tensor": 8}}
        ]),
    )
    .placed_as_pod_groups(true);
    let names = AcceptanceNames::new("flash", "r", "t");
    let groups = names.groups(&d.spec);
    let summary: Vec<(&str, &str, bool)> = groups
        .iter()
        .map(|g| (g.role.name.as_str(), g.name.as_str(), g.judged))
        .collect();
    let stem = &names.run[..names.run.len() - 2];
    let (p, v) = (format!("{stem}-p"), format!("{stem}-v"));
    assert!(groups.iter().all(|g| g.name.len() == names.run.len()));
    assert_eq!(
        summary,
        [
            ("decode", names.run.as_str(), true),
            ("prefill", p.as_str(), false),
            ("vision", v.as_str(), false)
        ],
        "the judged role first, then one group of every other role"
    );
    // Every group has its rendezvous Service (the decode group reaches the others by name);
    // the two-pod prefill group is a gang of its own, as it serves.
    for g in &groups {
        assert!(acceptance_needs_service(&d.spec, g), "{}", g.name);
        let service = acceptance_service(&d, g, "r");
        assert_eq!(service.name_any(), g.name);
        let selector = service.spec.and_then(|s| s.selector).expect("selector");
        assert_eq!(selector[labels::ROLE], g.role.name);
    }
    let prefill_gang = acceptance_pod_group(&d, &groups[1], "r").expect("two prefill ranks");
    assert_eq!(prefill_gang.name_any(), p);
    assert!(acceptance_pod_group(&d, &groups[0], "r").is_none());
    // Jobs: `<group>-<rank>`; only the judged group's rank 0 runs the workload and the judge.
    let job = |g: usize, rank: i32| {
        acceptance_group_job(&d, &names, &groups[g], rank, "r", "operator:1").expect("job")
    };
    let leader = job(0, 0);
    assert_eq!(leader.name_any(), names.job(0));
    let leader_pod = leader.spec.expect("spec").template.spec.expect("pod");
    let judge = leader_pod
        .containers
        .iter()
        .find(|c| c.name == JUDGE_CONTAINER)
        .expect("judge");
    let args = judge.args.clone().unwrap_or_default();
    let at = args.iter().position(|a| a == "--roles").expect("--roles");
    assert_eq!(args[at + 1], "decode,prefill,vision");
    let engine_env = env_of(&leader_pod.containers[0]);
    assert_eq!(
        engine_env["DEEPINFER_PREFILL_SERVICE"],
        format!("rank-0.{p}.serving.svc:8000")
    );
    assert_eq!(
        engine_env["DEEPINFER_VISION_SERVICE"],
        format!("rank-0.{v}.serving.svc:8000")
    );
    for rank in 0..2 {
        let prefill = job(1, rank);
        assert_eq!(prefill.name_any(), format!("{p}-{rank}"));
        let pod = prefill.spec.expect("spec").template.spec.expect("pod");
        assert_eq!(pod.containers.len(), 1, "no judge beside a prefill engine");
        assert_eq!(pod.subdomain.as_deref(), Some(p.as_str()));
        assert_eq!(
            pod.scheduling_group.and_then(|g| g.pod_group_name),
            Some(p.clone())
        );
        let env = env_of(&pod.containers[0]);
        assert_eq!(env["DEEPINFER_ROLE"], "prefill");
        assert!(!env.contains_key("DEEPINFER_PEER_ENDPOINTS_FILE"));
    }
    // The run's endpoints file lists the run's own leaders, in the serving file's format.
    let cm = acceptance_spec_configmap(&d, &names, "r", "prompts: []".into());
    let endpoints: BTreeMap<String, Vec<String>> =
        serde_json::from_str(&cm.data.expect("data")["endpoints.json"]).expect("json");
    assert_eq!(
        endpoints,
        BTreeMap::from([
            (
                "prefill".to_string(),
                vec![format!("rank-0.{p}.serving.svc:8000")]
            ),
            (
                "vision".to_string(),
                vec![format!("rank-0.{v}.serving.svc:8000")]
            ),
        ])
    );
    // A colocated deployment's run is one group, as before, with no endpoints file.
    let colocated = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let only = names.groups(&colocated.spec);
    assert_eq!(only.len(), 1);
    assert!(!acceptance_needs_service(&colocated.spec, &only[0]));
    let cm = acceptance_spec_configmap(&colocated, &names, "r", "prompts: []".into());
    assert!(!cm.data.expect("data").contains_key("endpoints.json"));
}

#[test]
fn an_ascend_acceptance_group_mounts_a_rank_table_of_its_own() {
    let d = did(
        json!({"type": "Ascend", "devicesPerPod": 16}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16, "data": 2}}]),
    );
    let names = AcceptanceNames::new("pangu", "r", "t");
    let groups = names.groups(&d.spec);
    let table = acceptance_rank_table(&d, &groups[0], "r", &[]).expect("Ascend has one");
    assert_eq!(table.name_any(), format!("rings-config-{}", names.run));
    assert!(is_acceptance_rank_table("pangu", &table));
    let hccl: serde_json::Value =
        serde_json::from_str(&table.data.clone().expect("data")["hccl.json"]).expect("json");
    assert_eq!(hccl["status"], "initializing");
    let serving = rank_table_configmap(&d, &d.spec.roles[0], "r", 0, &[]);
    assert!(!is_acceptance_rank_table("pangu", &serving));
    for rank in 0..2 {
        let job = acceptance_job(&d, &names, rank, "r", "operator:1").expect("job");
        let pod = job.spec.expect("spec").template.spec.expect("pod");
        assert!(pod.volumes.iter().flatten().any(|v| v
            .config_map
            .as_ref()
            .is_some_and(|c| c.name == table.name_any())));
        assert_eq!(
            env_of(&pod.containers[0])["RANK_TABLE_FILE"],
            "/user/serverid/devindex/config/hccl.json"
        );
    }
    let nvidia = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    );
    assert!(acceptance_rank_table(&nvidia, &names.groups(&nvidia.spec)[0], "r", &[]).is_none());
}

/// An acceptance template that runs `spec.runtime.command` (`{serving_command}`), as a spec
/// that sets one must have.
fn serving_command_template() -> crate::api::EngineCommand {
    crate::api::EngineCommand {
        command: [
            "{serving_command}",
            "{serving_args}",
            "--prompts",
            "{prompts_file}",
            "--output",
            "{outputs_file}",
        ]
        .map(String::from)
        .to_vec(),
    }
}

/// The judged rank 0's engine container and a serving rank 0's of the same role, for a
/// disaggregated spec with a serving command, runtime args, role args and a secret variable.
fn judged_and_serving_engines() -> (Container, Container) {
    let mut d = raw(
        json!({"type": "NVIDIA"}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 16}}
        ]),
    );
    d.spec.runtime.command = vec!["deepinfer-serve".into(), "--no-banner".into()];
    d.spec.acceptance.engine = Some(serving_command_template());
    d.spec.runtime.env = vec![EnvVar {
        name: "HF_TOKEN".into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(k8s_openapi::api::core::v1::SecretKeySelector {
                name: "hub".into(),
                key: "token".into(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
    }];
    d.spec.runtime.roles = vec![crate::api::RoleRuntime {
        role: "decode".into(),
        image: None,
        args: vec!["--max_model_len".into(), "8".into()],
        env: Vec::new(),
    }];
    let d = valid(d);
    let names = AcceptanceNames::new("flash", "rev1", "");
    let job = acceptance_job(&d, &names, 0, "rev1", "op").expect("job");
    let judged = job
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod")
        .containers
        .into_iter()
        .find(|c| c.name == ENGINE_CONTAINER)
        .expect("engine");
    let decode = d
        .spec
        .roles
        .iter()
        .find(|r| r.name == "decode")
        .expect("decode");
    let serving = group_pods(&d, decode, 0, "rev1")[0]
        .spec
        .clone()
        .expect("spec")
        .containers[0]
        .clone();
    (judged, serving)
}

#[test]
fn the_judged_engine_is_handed_the_serving_command_and_args_of_its_role() {
    let (judged, serving) = judged_and_serving_engines();
    let serving_args = serving.args.clone().expect("serving args");
    assert_eq!(
        serving_args,
        [
            "--model_name",
            "/models/model",
            "--max_batch_size",
            "8",
            "--max_model_len",
            "8"
        ]
    );
    let runner = judged.args.clone().expect("runner args");
    let dashes = runner
        .iter()
        .position(|a| a == "--")
        .expect("the serving args follow `--`");
    assert_eq!(
        &runner[dashes + 1..],
        serving_args.as_slice(),
        "exactly the serving container's args, in order"
    );
    let command: Vec<&str> = runner[..dashes]
        .iter()
        .filter_map(|a| a.strip_prefix("--serving-command="))
        .collect();
    assert_eq!(command, ["deepinfer-serve", "--no-banner"]);
    let redacted: Vec<&str> = runner[..dashes]
        .iter()
        .filter_map(|a| a.strip_prefix("--redact-env="))
        .collect();
    assert_eq!(
        redacted,
        ["HF_TOKEN"],
        "secret values never reach the evidence"
    );
}

#[test]
fn the_judged_engines_effective_argv_is_the_template_around_the_serving_command_and_args() {
    use crate::acceptance::engine::{render_command, TemplateInputs, DEFAULT_COMMAND};
    use crate::acceptance::handoff::RunEngineArgs;
    let (judged, serving) = judged_and_serving_engines();
    #[derive(clap::Parser)]
    struct Runner {
        #[command(flatten)]
        args: RunEngineArgs,
    }
    // What the runner makes of its arguments, as the kubelet hands them over.
    let runner = <Runner as clap::Parser>::try_parse_from(
        judged.command.clone().expect("command")[1..]
            .iter()
            .chain(judged.args.as_ref().expect("args")),
    )
    .expect("the runner takes its arguments")
    .args;
    let template: Vec<String> = ["{serving_command}"]
        .into_iter()
        .chain(DEFAULT_COMMAND)
        .map(String::from)
        .collect();
    let serving_args = runner.serving.args_or_default(&runner.model_dir);
    let argv = render_command(
        &template,
        &TemplateInputs {
            model_dir: &runner.model_dir,
            prompts_file: std::path::Path::new("/deepinfer/work/prompts.jsonl"),
            outputs_file: std::path::Path::new("/deepinfer/work/outputs.jsonl"),
            serving_command: &runner.serving.serving_command,
            serving_args: &serving_args,
        },
    );
    let expected: Vec<String> = serving
        .command
        .clone()
        .expect("serving command")
        .into_iter()
        .chain(DEFAULT_COMMAND[..2].iter().map(|s| s.to_string()))
        .chain(serving.args.clone().expect("serving args"))
        .chain(
            [
                "--prompts",
                "/deepinfer/work/prompts.jsonl",
                "--output",
                "/deepinfer/work/outputs.jsonl",
                "--check_structured_output",
            ]
            .map(String::from),
        )
        .collect();
    assert_eq!(argv, expected);
    let documented = |name: &str| {
        crate::contract::ACCEPTANCE_INPUT_ENV
            .iter()
            .any(|i| i.name == name)
    };
    let without_inputs = |c: &Container| {
        env_of(c)
            .into_iter()
            .filter(|(k, _)| !documented(k))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(
        without_inputs(&judged),
        without_inputs(&serving),
        "the judged engine's environment differs from the serving one's only in the documented acceptance inputs"
    );
    assert_eq!(
        judged.image, serving.image,
        "the judged engine runs the role's image"
    );
    assert_eq!(judged.resources, serving.resources);
    assert_eq!(judged.ports, serving.ports);
}

#[test]
fn the_revision_covers_the_acceptance_sampling_section_and_prompt_overrides() {
    let a = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let with = |sampling: serde_json::Value, prompt: Option<serde_json::Value>| {
        let mut d = a.clone();
        d.spec.acceptance.sampling = serde_json::from_value(sampling).expect("sampling");
        d.spec.acceptance.prompts[0].sampling =
            prompt.map(|p| serde_json::from_value(p).expect("prompt sampling"));
        revision(&d.spec)
    };
    let base = revision(&a.spec);
    // The defaults, absent or written out, are the same settings.
    assert_eq!(with(json!({}), None), base);
    assert_eq!(
        with(
            json!({"temperature": 0, "topP": 1, "topK": 0, "seed": 0, "repetitionPenalty": 1}),
            Some(json!({"seed": 0}))
        ),
        base
    );
    for changed in [
        json!({"temperature": 0.7}),
        json!({"topP": 0.9}),
        json!({"topK": 40}),
        json!({"seed": 1}),
        json!({"repetitionPenalty": 1.1}),
    ] {
        assert_ne!(with(changed.clone(), None), base, "section {changed}");
        assert_ne!(
            with(json!({}), Some(changed.clone())),
            base,
            "prompt {changed}"
        );
    }
    // A prompt's override that the section already states changes nothing.
    assert_eq!(
        with(json!({"seed": 5}), Some(json!({"seed": 5}))),
        with(json!({"seed": 5}), None)
    );
    // The judged spec hash covers the whole section, sampling included.
    let hash = |acceptance: &crate::api::AcceptanceSpec| {
        crate::controller::gates::acceptance::decide::judged_spec_hash(acceptance, None)
    };
    let mut sampled = a.spec.acceptance.clone();
    sampled.sampling = Some(crate::api::AcceptanceSampling {
        seed: Some(1),
        ..Default::default()
    });
    assert_ne!(hash(&sampled), hash(&a.spec.acceptance));
    let mut overridden = a.spec.acceptance.clone();
    overridden.prompts[0].sampling = Some(crate::api::PromptSampling {
        top_k: Some(5),
        ..Default::default()
    });
    assert_ne!(hash(&overridden), hash(&a.spec.acceptance));
}

/// `raw` with `spec.pod` and the roles' own `pod` set from JSON.
fn with_pod_settings(
    accelerator: serde_json::Value,
    roles: serde_json::Value,
    pod: serde_json::Value,
) -> crate::api::DeepInferDeployment {
    let mut d = raw(accelerator, roles);
    d.spec.pod = Some(serde_json::from_value(pod).expect("pod settings"));
    d
}

fn pod_settings_example() -> crate::api::DeepInferDeployment {
    with_pod_settings(
        json!({"type": "NVIDIA", "product": "NVIDIA-H200"}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 16}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8},
             "pod": {"priorityClassName": "decode-critical",
                     "nodeSelector": {"example.com/pool": "decode"}}}
        ]),
        json!({
            "imagePullSecrets": [{"name": "registry-creds"}],
            "tolerations": [{"key": "example.com/dedicated", "operator": "Equal",
                             "value": "inference", "effect": "NoSchedule"}],
            "nodeSelector": {"example.com/pool": "serving", "nvidia.com/gpu.present": "true"},
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                     "labelSelector": {"matchLabels": {"app": "cache"}}}}]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname",
                     "labelSelector": {"matchLabels": {"app": "batch"}}}]}
            },
            "priorityClassName": "serving-high",
            "serviceAccountName": "engine",
            "volumes": [{"name": "cache", "emptyDir": {}},
                        {"name": "tls", "secret": {"secretName": "engine-tls"}}],
            "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/engine"},
                             {"name": "tls", "mountPath": "/etc/engine/tls", "readOnly": true}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "ScheduleAnyway"}]
        }),
    )
}

#[test]
fn pod_settings_reach_engine_pods_merged_with_the_operators_own() {
    let d = valid(pod_settings_example());
    let rev = revision(&d.spec);
    let prefill = group_pods(&d, &d.spec.roles[0], 0, &rev).remove(0);
    let spec = prefill.spec.expect("spec");
    assert_eq!(
        spec.image_pull_secrets.expect("pull secrets")[0].name,
        "registry-creds"
    );
    let tolerations = spec.tolerations.expect("tolerations");
    assert_eq!(
        tolerations
            .iter()
            .map(|t| t.key.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["nvidia.com/gpu", "example.com/dedicated"],
        "the device toleration stays, the user's are added"
    );
    assert_eq!(
        spec.node_selector.expect("selector"),
        BTreeMap::from([
            ("example.com/pool".to_string(), "serving".to_string()),
            ("nvidia.com/gpu.present".to_string(), "true".to_string()),
            (
                "nvidia.com/gpu.product".to_string(),
                "NVIDIA-H200".to_string()
            ),
        ]),
        "the accelerator's labels and the user's"
    );
    let affinity = spec.affinity.expect("affinity");
    let pod_affinity = affinity.pod_affinity.expect("pod affinity");
    let required = pod_affinity
        .required_during_scheduling_ignored_during_execution
        .expect("domain term");
    assert_eq!(required.len(), 1);
    assert_eq!(
        required[0].topology_key, "nvidia.com/gpu.clique",
        "the domain term is kept"
    );
    assert_eq!(
        pod_affinity
            .preferred_during_scheduling_ignored_during_execution
            .expect("user's preference")[0]
            .weight,
        10
    );
    assert!(affinity.pod_anti_affinity.is_some());
    assert!(affinity.node_affinity.is_some());
    assert_eq!(spec.priority_class_name.as_deref(), Some("serving-high"));
    assert_eq!(spec.service_account_name.as_deref(), Some("engine"));
    assert_eq!(
        spec.automount_service_account_token,
        Some(false),
        "no API token in serving pods"
    );
    assert_eq!(spec.topology_spread_constraints.expect("spread").len(), 1);
    let volumes: Vec<String> = spec
        .volumes
        .expect("volumes")
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(volumes, ["checkpoint", "dshm", "cache", "tls"]);
    let mounts: Vec<(String, String)> = spec.containers[0]
        .volume_mounts
        .clone()
        .expect("mounts")
        .into_iter()
        .map(|m| (m.name, m.mount_path))
        .collect();
    assert_eq!(
        mounts,
        [
            ("checkpoint".to_string(), MODEL_MOUNT.to_string()),
            ("dshm".to_string(), "/dev/shm".to_string()),
            ("cache".to_string(), "/var/cache/engine".to_string()),
            ("tls".to_string(), "/etc/engine/tls".to_string()),
        ]
    );

    // The decode role overrides two fields and inherits the others.
    let decode = group_pods(&d, &d.spec.roles[1], 0, &rev).remove(0);
    let spec = decode.spec.expect("spec");
    assert_eq!(spec.priority_class_name.as_deref(), Some("decode-critical"));
    let selector = spec.node_selector.expect("selector");
    assert_eq!(selector["example.com/pool"], "decode");
    assert_eq!(selector["nvidia.com/gpu.product"], "NVIDIA-H200");
    assert_eq!(spec.service_account_name.as_deref(), Some("engine"));
    assert_eq!(spec.tolerations.expect("tolerations").len(), 2);
    let affinity = spec
        .affinity
        .expect("the user's affinity, one pod per group");
    assert!(
        affinity
            .pod_affinity
            .and_then(|p| p.required_during_scheduling_ignored_during_execution)
            .is_none(),
        "a single-pod group has no domain term"
    );
    assert!(affinity.node_affinity.is_some());
}

#[test]
fn acceptance_pods_get_the_pod_settings_of_the_role_they_judge() {
    let d = valid(pod_settings_example());
    let rev = revision(&d.spec);
    let names = AcceptanceNames::new("flash", &rev, "");
    let groups = names.groups(&d.spec);
    assert_eq!(groups[0].role.name, "decode", "decode is judged");
    let job_pod = |g: usize, rank: i32| {
        acceptance_group_job(&d, &names, &groups[g], rank, &rev, "op")
            .and_then(|j| j.spec)
            .and_then(|s| s.template.spec)
            .expect("pod")
    };
    let serving = |role: usize| {
        group_pods(&d, &d.spec.roles[role], 0, &rev)
            .remove(0)
            .spec
            .expect("spec")
    };
    let leader = job_pod(0, 0);
    let decode = serving(1);
    for (what, got, want) in [
        (
            "pull secrets",
            json!(leader.image_pull_secrets),
            json!(decode.image_pull_secrets),
        ),
        (
            "tolerations",
            json!(leader.tolerations),
            json!(decode.tolerations),
        ),
        (
            "node selector",
            json!(leader.node_selector),
            json!(decode.node_selector),
        ),
        (
            "priority",
            json!(leader.priority_class_name),
            json!(decode.priority_class_name),
        ),
        (
            "spread",
            json!(leader.topology_spread_constraints),
            json!(decode.topology_spread_constraints),
        ),
    ] {
        assert_eq!(got, want, "{what} of the judged leader are its role's");
    }
    assert_eq!(
        leader.service_account_name,
        Some(names.service_account.clone()),
        "the judged leader runs as the judge's ServiceAccount"
    );
    let engine_mounts = |pod: &PodSpec| {
        pod.containers[0]
            .volume_mounts
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|m| m.name)
            .collect::<Vec<_>>()
    };
    assert!(engine_mounts(&leader).contains(&"cache".to_string()));
    let judge = leader
        .containers
        .iter()
        .find(|c| c.name == JUDGE_CONTAINER)
        .expect("judge");
    assert!(
        !judge
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "cache"),
        "the judge mounts only its own volumes"
    );
    // The other role's group of the run is placed and runs as that role serves, SA included.
    let prefill = job_pod(1, 1);
    let prefill_serving = serving(0);
    assert_eq!(prefill.service_account_name.as_deref(), Some("engine"));
    assert_eq!(
        json!(prefill.node_selector),
        json!(prefill_serving.node_selector)
    );
    assert_eq!(prefill.priority_class_name.as_deref(), Some("serving-high"));
    assert_eq!(engine_mounts(&prefill), engine_mounts(&prefill_serving));
}

#[test]
fn engine_pod_settings_and_priority_are_judged_and_placement_ones_only_roll_the_groups() {
    let plain = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}]),
    );
    let base = revision(&plain.spec);
    let mut empty = plain.clone();
    empty.spec.pod = Some(crate::api::PodSettings::default());
    empty.spec.roles[0].pod = Some(crate::api::PodSettings {
        volumes: Some(Vec::new()),
        ..Default::default()
    });
    assert_eq!(
        revision(&empty.spec),
        base,
        "absent or empty settings keep the revision"
    );
    let pod_of = |d: &crate::api::DeepInferDeployment| {
        let d = valid(d.clone());
        group_pods(&d, &d.spec.roles[0], 0, "r").remove(0)
    };
    for (what, settings) in [
        (
            "tolerations",
            json!({"tolerations": [{"key": "a", "operator": "Exists"}]}),
        ),
        (
            "nodeSelector",
            json!({"nodeSelector": {"example.com/pool": "a"}}),
        ),
        ("affinity", json!({"affinity": {"podAntiAffinity": {}}})),
        (
            "imagePullSecrets",
            json!({"imagePullSecrets": [{"name": "creds"}]}),
        ),
        (
            "topologySpreadConstraints",
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                   "whenUnsatisfiable": "DoNotSchedule"}]}),
        ),
    ] {
        let mut placed = plain.clone();
        placed.spec.roles[0].pod = Some(serde_json::from_value(settings).expect("settings"));
        assert_eq!(revision(&placed.spec), base, "{what} is not judged");
        assert_ne!(
            applied_hash(&pod_of(&placed)),
            applied_hash(&pod_of(&plain)),
            "{what} changes the pod template, so the groups roll"
        );
    }
    for (what, settings) in [
        (
            "serviceAccountName",
            json!({"serviceAccountName": "engine"}),
        ),
        ("priorityClassName", json!({"priorityClassName": "high"})),
        (
            "volumes",
            json!({"volumes": [{"name": "c", "emptyDir": {}}]}),
        ),
        (
            "volumeMounts",
            json!({"volumes": [{"name": "c", "emptyDir": {}}],
                   "volumeMounts": [{"name": "c", "mountPath": "/cache"}]}),
        ),
    ] {
        let mut judged = plain.clone();
        judged.spec.pod = Some(serde_json::from_value(settings.clone()).expect("settings"));
        assert_ne!(revision(&judged.spec), base, "{what} is judged");
        let mut per_role = plain.clone();
        per_role.spec.roles[0].pod = Some(serde_json::from_value(settings).expect("settings"));
        assert_eq!(
            revision(&per_role.spec),
            revision(&judged.spec),
            "{what}: the effective settings count, wherever they are given"
        );
    }
}

#[test]
fn the_operators_volume_names_and_mount_paths_are_reserved() {
    let d = did(
        json!({"type": "Ascend", "devicesPerPod": 16}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 32}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 32}}
        ]),
    );
    let names = AcceptanceNames::new("flash", "r", "");
    let mut pods: Vec<PodSpec> = names
        .groups(&d.spec)
        .iter()
        .filter_map(|g| acceptance_group_job(&d, &names, g, 0, "r", "op"))
        .filter_map(|j| j.spec.and_then(|s| s.template.spec))
        .collect();
    pods.extend(
        d.spec
            .roles
            .iter()
            .filter_map(|r| group_pods(&d, r, 0, "r").remove(0).spec),
    );
    let mut seen = std::collections::BTreeSet::new();
    for pod in &pods {
        for v in pod.volumes.iter().flatten() {
            assert!(
                crate::api::RESERVED_VOLUME_NAMES.contains(&v.name.as_str()),
                "volume {} is not reserved",
                v.name
            );
            seen.insert(v.name.clone());
        }
        let engine = &pod.containers[0];
        for m in engine.volume_mounts.iter().flatten() {
            assert!(
                crate::api::RESERVED_MOUNT_PATHS
                    .iter()
                    .any(|p| m.mount_path == *p || m.mount_path.starts_with(&format!("{p}/"))),
                "mount path {} is not reserved",
                m.mount_path
            );
        }
    }
    assert!(
        seen.contains("rank-table")
            && seen.contains("role-endpoints")
            && seen.contains("judge-token")
    );
}

#[test]
fn a_groups_pod_group_has_the_priority_class_of_its_pods() {
    let d = valid(pod_settings_example()).placed_as_pod_groups(true);
    let rev = revision(&d.spec);
    for (role, want) in [(0, "serving-high"), (1, "decode-critical")] {
        let group = group_pod_group(&d, &d.spec.roles[role], &rev, 0);
        let pod = group_pods(&d, &d.spec.roles[role], 0, &rev).remove(0);
        assert_eq!(group.spec.priority_class_name.as_deref(), Some(want));
        assert_eq!(
            pod.spec.and_then(|s| s.priority_class_name).as_deref(),
            Some(want)
        );
    }
    let names = AcceptanceNames::new("flash", &rev, "");
    let groups = names.groups(&d.spec);
    let prefill = groups
        .iter()
        .find(|g| g.role.name == "prefill")
        .expect("prefill");
    let gang = acceptance_pod_group(&d, prefill, &rev).expect("two prefill ranks");
    assert_eq!(
        gang.spec.priority_class_name.as_deref(),
        Some("serving-high")
    );
}

#[test]
fn every_empty_dir_of_engine_and_acceptance_pods_has_a_size_limit() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    );
    let names = AcceptanceNames::new("flash", "rev1", "");
    let role = &d.spec.roles[0];
    let leader = acceptance_job(&d, &names, 0, "rev1", "op:1").expect("job");
    let follower = acceptance_job(&d, &names, 1, "rev1", "op:1").expect("job");
    let pods: Vec<PodSpec> = group_pods(&d, role, 0, "rev1")
        .into_iter()
        .filter_map(|p| p.spec)
        .chain(
            [leader, follower]
                .into_iter()
                .filter_map(|j| j.spec.and_then(|s| s.template.spec)),
        )
        .collect();
    let mut seen = 0;
    for pod in &pods {
        for v in pod.volumes.iter().flatten() {
            if let Some(dir) = &v.empty_dir {
                seen += 1;
                assert!(
                    dir.size_limit.is_some(),
                    "emptyDir {} has no sizeLimit",
                    v.name
                );
            }
        }
    }
    assert!(
        seen >= 4,
        "shared memory in every pod, runner and work dir in the leader's"
    );
    // Shared memory is sized by the engine's memory request (memory-backed, it counts there).
    let shm = pods[0]
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "dshm")
        .and_then(|v| v.empty_dir.clone())
        .and_then(|d| d.size_limit);
    assert_eq!(shm, Some(Quantity(DEFAULT_MEMORY_REQUEST.to_string())));
}

/// Every container of `job` that runs the runner binary, its command line parsed by the
/// binary's own CLI (as the container will parse it).
fn parsed_commands(job: &Job) -> Vec<(String, crate::cli::RunnerCommand)> {
    use clap::Parser;
    let pod = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod template");
    pod.init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .filter(|c| {
            c.command
                .as_ref()
                .and_then(|cmd| cmd.first())
                .is_some_and(|bin| bin.ends_with(RUNNER_BINARY))
        })
        .map(|c| {
            let words: Vec<String> = c
                .command
                .iter()
                .flatten()
                .chain(c.args.iter().flatten())
                .cloned()
                .collect();
            let cli = crate::cli::RunnerCli::try_parse_from(&words)
                .unwrap_or_else(|e| panic!("container {}: {words:?} does not parse: {e}", c.name));
            (c.name.clone(), cli.command)
        })
        .collect()
}

#[test]
fn the_checkpoint_jobs_arguments_parse_back_to_what_the_spec_says() {
    let mut d = raw(
        json!({"type": "NVIDIA"}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8, "pipeline": 2, "expert": 16}}
        ]),
    );
    d.spec.model.source = serde_json::from_value(json!({"hub": {
        "revision": "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d", "claimName": "ckpt"}}))
    .expect("hub source");
    let d = valid(d);
    let deadlines = JobDeadlines::default();
    let fetch =
        fetch_job(&d, "op:1", &deadlines, &HubProxy::default()).expect("hub source fetches");
    let mut commands = parsed_commands(&fetch);
    let Some((_, crate::cli::RunnerCommand::FetchCheckpoint(f))) = commands.pop() else {
        panic!("the fetch Job runs fetch-checkpoint");
    };
    assert!(commands.is_empty(), "one container runs the runner");
    assert_eq!(f.repo, d.spec.model.name);
    assert_eq!(f.revision, "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d");
    let verify = verify_job(&d, "op:1", &deadlines);
    let mut commands = parsed_commands(&verify);
    let Some((_, crate::cli::RunnerCommand::VerifyCheckpoint(v))) = commands.pop() else {
        panic!("the verify Job runs verify-checkpoint");
    };
    assert!(commands.is_empty(), "one container runs the runner");
    assert_eq!(v.license, d.spec.model.license);
    let layouts: Vec<String> = v.layouts.iter().map(ToString::to_string).collect();
    assert_eq!(layouts, ["prefill=8x1x1x1", "decode=8x2x1x16"]);
}

#[test]
fn the_acceptance_leaders_arguments_parse_back_to_the_run_they_judge() {
    let d = did(
        json!({"type": "NVIDIA"}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8, "pipeline": 2, "expert": 16}}
        ]),
    );
    let rev = revision(&d.spec);
    let names = AcceptanceNames::new("flash", &rev, "t");
    let groups = names.groups(&d.spec);
    let leader = acceptance_group_job(&d, &names, &groups[0], 0, &rev, "op:1").expect("a leader");
    let commands = parsed_commands(&leader);
    let accept = commands
        .iter()
        .find_map(|(_, c)| match c {
            crate::cli::RunnerCommand::Accept(a) => Some(a),
            _ => None,
        })
        .expect("the judge runs accept");
    assert_eq!(
        accept.evidence_configmap.as_deref(),
        Some(names.evidence_configmap.as_str())
    );
    assert_eq!(accept.identity.revision, rev);
    assert_eq!(
        accept.identity.layout.to_string(),
        format!("{}=8x2x1x16", groups[0].role.name)
    );
    assert_eq!(accept.identity.roles, ["decode", "prefill"]);
    assert_eq!(
        evidence_of_job("flash", &leader),
        Some(names.evidence_configmap.clone())
    );
    let engine = commands
        .iter()
        .find_map(|(_, c)| match c {
            crate::cli::RunnerCommand::RunEngine(r) => Some(r),
            _ => None,
        })
        .expect("the judged engine runs run-engine");
    assert_eq!(engine.serving.serving_args, serving_args(&d, "decode"));
}

#[test]
fn an_exclusive_deployments_pods_repel_every_other_group_of_it_in_their_domain() {
    let mut raw = raw(
        json!({"type": "NVIDIA"}),
        json!([{"name": "worker", "replicas": 2, "parallel": {"tensor": 16}}]),
    );
    let plain = valid(raw.clone());
    raw.spec.scheduling =
        serde_json::from_value(json!({"exclusiveDomain": true})).expect("scheduling");
    let exclusive = valid(raw);
    let rev = revision(&exclusive.spec);
    assert_eq!(
        rev,
        revision(&plain.spec),
        "placement alone is not a new revision"
    );
    let pod = &group_pods(&exclusive, &exclusive.spec.roles[0], 1, &rev)[0];
    let group = group_service_name("flash", "worker", &rev, 1);
    assert_eq!(pod.labels().get(labels::GROUP_NAME), Some(&group));
    let anti = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .clone()
        })
        .expect("an anti-affinity term");
    assert_eq!(anti.len(), 1);
    assert_eq!(anti[0].topology_key, "nvidia.com/gpu.clique");
    assert_eq!(
        anti[0].mismatch_label_keys.as_deref(),
        Some(&[labels::GROUP_NAME.to_string()][..])
    );
    let selector = anti[0]
        .label_selector
        .clone()
        .and_then(|s| s.match_labels)
        .expect("labels");
    assert_eq!(selector[labels::DEPLOYMENT], "flash");
    assert_eq!(selector[labels::COMPONENT], "worker");
    // Without it, neither the label nor the term.
    let pod = &group_pods(&plain, &plain.spec.roles[0], 1, &rev)[0];
    assert!(pod.labels().get(labels::GROUP_NAME).is_none());
    assert!(pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .is_none());
}

/// Prefill of 4 GPUs per pod beside decode of two 8-GPU pods on another product.
fn two_shapes(accelerator: serde_json::Value) -> ValidatedDeployment {
    did(
        accelerator,
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 4},
             "accelerator": {"devicesPerPod": 4}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 16},
             "accelerator": {"product": "NVIDIA-B200"}}
        ]),
    )
}

/// Devices each container of `pod` requests as `resource`, its node selector's product, and its
/// `DEEPINFER_DEVICES_PER_POD` / `DEEPINFER_NUM_PODS`.
fn requested(pod: &PodSpec, resource: &str) -> (String, String, String, String) {
    let engine = &pod.containers[0];
    let limits = engine
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .unwrap_or_default();
    let env = env_of(engine);
    (
        limits
            .get(resource)
            .map(|q| q.0.clone())
            .unwrap_or_default(),
        pod.node_selector.clone().unwrap_or_default()["nvidia.com/gpu.product"].clone(),
        env["DEEPINFER_DEVICES_PER_POD"].clone(),
        env["DEEPINFER_NUM_PODS"].clone(),
    )
}

#[test]
fn each_role_places_requests_and_is_accepted_in_its_own_device_shape() {
    let d = two_shapes(json!({"type": "NVIDIA", "product": "NVIDIA-H200", "devicesPerPod": 8}));
    let (prefill, decode) = (&d.spec.roles[0], &d.spec.roles[1]);
    let shape = |r: &RoleSpec| {
        let s = group_shape(&d.spec, r);
        (s.devices_per_pod, s.product, s.pods, s.world_size)
    };
    assert_eq!(shape(prefill), (4, Some("NVIDIA-H200".into()), 1, 4));
    assert_eq!(shape(decode), (8, Some("NVIDIA-B200".into()), 2, 16));
    let rev = revision(&d.spec);
    let serving = |r: &RoleSpec| -> Vec<_> {
        group_pods(&d, r, 0, &rev)
            .iter()
            .map(|p| requested(p.spec.as_ref().expect("spec"), "nvidia.com/gpu"))
            .collect()
    };
    let pod = |devices: &str, product: &str, pods: &str| {
        let s = str::to_string;
        (s(devices), s(product), s(devices), s(pods))
    };
    let prefill_pod = pod("4", "NVIDIA-H200", "1");
    let decode_pod = pod("8", "NVIDIA-B200", "2");
    assert_eq!(serving(prefill), std::slice::from_ref(&prefill_pod));
    assert_eq!(serving(decode), [decode_pod.clone(), decode_pod.clone()]);
    // The acceptance run: the judged decode group of two 8-GPU pods, the prefill group of one
    // 4-GPU pod, each as it serves.
    let names = AcceptanceNames::new("flash", &rev, "t");
    let groups = names.groups(&d.spec);
    let run: Vec<Vec<_>> = groups
        .iter()
        .map(|g| {
            (0..group_shape(&d.spec, g.role).pods)
                .map(|rank| {
                    let job =
                        acceptance_group_job(&d, &names, g, rank, &rev, "operator:1").expect("job");
                    let pod = job.spec.expect("spec").template.spec.expect("pod");
                    requested(&pod, "nvidia.com/gpu")
                })
                .collect()
        })
        .collect();
    assert_eq!(
        run,
        [vec![decode_pod.clone(), decode_pod], vec![prefill_pod]]
    );
    // The judge records each role's group for the manifest.
    let leader = acceptance_group_job(&d, &names, &groups[0], 0, &rev, "operator:1").expect("job");
    let pod = leader.spec.expect("spec").template.spec.expect("pod");
    let judge = pod
        .containers
        .iter()
        .find(|c| c.name == JUDGE_CONTAINER)
        .expect("judge");
    let groups_env = &env_of(judge)[crate::acceptance::ROLE_GROUPS_ENV];
    let recorded = crate::acceptance::parse_role_groups(groups_env).expect("groups");
    let summary: Vec<_> = recorded
        .iter()
        .map(|(role, g)| {
            let product = g.product.as_deref().unwrap_or_default();
            (
                role.as_str(),
                g.pods,
                g.devices_per_pod,
                product,
                g.layout.world_size,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("decode", 2, 8, "NVIDIA-B200", 16),
            ("prefill", 1, 4, "NVIDIA-H200", 4)
        ]
    );
    // What a group waiting for devices is told it needs.
    use super::capacity_need;
    assert_eq!(
        capacity_need(&d.spec, prefill),
        "1 pod(s) × 4 nvidia.com/gpu (4 devices) on nvidia.com/gpu.product=NVIDIA-H200 nodes"
    );
    assert_eq!(
        capacity_need(&d.spec, decode),
        "2 pod(s) × 8 nvidia.com/gpu (16 devices) inside one nvidia.com/gpu.clique domain on nvidia.com/gpu.product=NVIDIA-B200 nodes"
    );
}

#[test]
fn a_roles_own_device_shape_is_part_of_the_revision_only_where_it_differs() {
    let roles = |prefill: serde_json::Value| {
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}, "accelerator": prefill},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}}
        ])
    };
    let accelerator = json!({"type": "NVIDIA", "product": "NVIDIA-H200", "devicesPerPod": 8});
    let plain = did(
        accelerator.clone(),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}}
        ]),
    );
    let with =
        |prefill: serde_json::Value| revision(&did(accelerator.clone(), roles(prefill)).spec);
    assert_eq!(
        with(json!({"devicesPerPod": 8, "product": "NVIDIA-H200"})),
        revision(&plain.spec),
        "a role restating the deployment's shape runs the same bits"
    );
    assert_eq!(with(json!({})), revision(&plain.spec));
    for changed in [
        json!({"devicesPerPod": 4}),
        json!({"product": "NVIDIA-B200"}),
    ] {
        assert_ne!(
            with(changed.clone()),
            revision(&plain.spec),
            "{changed} is judged again before it serves"
        );
    }
}

#[test]
fn with_a_device_class_each_device_count_has_its_template_and_each_role_claims_its_own() {
    let d = two_shapes(json!({"type": "NVIDIA", "deviceClassName": "gpu.nvidia.com"}));
    let counts: BTreeMap<String, i64> = claim_templates(&d)
        .iter()
        .map(|t| {
            let request = &t
                .spec
                .as_ref()
                .and_then(|s| s.spec.as_ref())
                .expect("spec")
                .devices
                .as_ref()
                .and_then(|c| c.requests.clone())
                .expect("requests")[0];
            let count = request
                .exactly
                .as_ref()
                .and_then(|e| e.count)
                .expect("count");
            (t.name_any(), count)
        })
        .collect();
    let four = device_claim_template_name(&d, 4).expect("four");
    let eight = device_claim_template_name(&d, 8).expect("eight");
    assert_eq!(
        counts,
        BTreeMap::from([(four.clone(), 4), (eight.clone(), 8)])
    );
    let rev = revision(&d.spec);
    for (role, template) in [(&d.spec.roles[0], &four), (&d.spec.roles[1], &eight)] {
        for pod in group_pods(&d, role, 0, &rev) {
            assert_eq!(
                templates_in_use([pod.spec.as_ref().expect("spec")]),
                std::collections::BTreeSet::from([template.clone()]),
                "{} claims from the template of its count",
                role.name
            );
        }
    }
}

#[test]
fn an_ascend_rank_table_counts_the_devices_of_its_roles_shape() {
    let d = did(
        json!({"type": "Ascend", "devicesPerPod": 16}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 8},
             "accelerator": {"devicesPerPod": 8}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 32}}
        ]),
    );
    let allocation = |n: u32| {
        json!({"server_id": "1", "devices": (0..n).map(|i| json!({
            "device_id": i.to_string(), "device_ip": format!("192.168.100.{i}")
        })).collect::<Vec<_>>()})
        .to_string()
    };
    let pod = |n: u32| Pod {
        metadata: ObjectMeta {
            name: Some("p-0".into()),
            labels: Some(BTreeMap::from([(labels::RANK.to_string(), "0".into())])),
            annotations: Some(BTreeMap::from([(
                allocation_annotation("huawei.com/Ascend910").to_string(),
                allocation(n),
            )])),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(k8s_openapi::api::core::v1::PodStatus {
            pod_ip: Some("10.244.0.8".into()),
            ..Default::default()
        }),
    };
    let table = |n: u32| {
        let cm = rank_table_configmap(&d, &d.spec.roles[0], "r", 0, &[&pod(n)]);
        let hccl: serde_json::Value =
            serde_json::from_str(&cm.data.expect("data")["hccl.json"]).expect("json");
        hccl
    };
    let eight = table(8);
    assert_eq!(eight["status"], "completed", "{eight}");
    assert_eq!(
        eight["server_list"][0]["device"].as_array().map(Vec::len),
        Some(8)
    );
    assert_eq!(
        table(16)["status"],
        "initializing",
        "a prefill pod of 8 NPUs is not listed with the deployment's 16"
    );
    assert_eq!(group_shape(&d.spec, &d.spec.roles[1]).pods, 2);
}

#[test]
fn a_full_hash_gives_back_the_short_hash_of_the_same_value() {
    for value in [("rev0", ""), ("rev1", "rerun-1"), ("a", "b")] {
        let key = full_hash(&value);
        assert_eq!(short_of_full_hash(&key, 64), Some(short_hash(&value, 64)));
        let names = AcceptanceNames::new("flash", value.0, value.1);
        assert_eq!(
            names.judges, value.1,
            "what the run judges besides the revision"
        );
        assert!(AcceptanceNames::judges_key(value.0, value.1, &key));
        assert_eq!(
            AcceptanceNames::of_key("flash", &key),
            Some(AcceptanceNames {
                judges: String::new(),
                ..names
            })
        );
    }
    assert_eq!(short_of_full_hash("not-a-hash", 16), None);
    let mut wrong = full_hash(&("rev0", ""));
    wrong.replace_range(0..1, "1");
    assert_eq!(
        short_of_full_hash(&wrong, 16),
        None,
        "1 is not in the alphabet"
    );
}

/// A pod of Job `job` bound to `node` (if any), with `annotations`.
fn run_pod(job: &str, node: Option<&str>, annotations: BTreeMap<String, String>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{job}-x")),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(str::to_string),
            ..PodSpec::default()
        }),
        status: None,
    }
}

#[test]
fn the_placement_record_names_every_ranks_pod_node_and_ascend_npu_ids() {
    let d = did(
        json!({"type": "Ascend", "devicesPerPod": 4}),
        json!([
            {"name": "prefill", "replicas": 1, "parallel": {"tensor": 4}},
            {"name": "decode", "replicas": 1, "parallel": {"tensor": 8}}
        ]),
    );
    let names = AcceptanceNames::new("pangu", "r", "t");
    let groups = names.groups(&d.spec);
    let annotation = allocation_annotation("huawei.com/Ascend910").to_string();
    let allocated = |ids: &[&str]| {
        let devices: Vec<_> = ids
            .iter()
            .map(|i| json!({"device_id": i, "device_ip": "192.168.1.1"}))
            .collect();
        BTreeMap::from([(
            annotation.clone(),
            json!({"server_id": "s", "devices": devices}).to_string(),
        )])
    };
    // decode (judged) rank 0 on npu-0 with NPUs listed out of order; rank 1 bound to npu-1 but
    // not yet allocated; prefill rank 0 made a pod the scheduler never bound.
    let pods = [
        run_pod(
            &groups[0].job(0),
            Some("npu-0"),
            allocated(&["3", "1", "2", "0"]),
        ),
        run_pod(&groups[0].job(1), Some("npu-1"), BTreeMap::new()),
        run_pod(&groups[1].job(0), None, BTreeMap::new()),
    ];
    let placement = run_placement(&d, &groups, &|job| {
        pods.iter()
            .filter(|p| p.name_any() == format!("{job}-x"))
            .collect()
    });
    assert_eq!(placement.domain_key, "huawei.com/super-pod-id");
    let rows: Vec<(&str, i32, Option<&str>, Vec<&str>)> = placement
        .ranks
        .iter()
        .map(|r| {
            (
                r.role.as_str(),
                r.rank,
                r.node.as_deref(),
                r.devices.ids.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("decode", 0, Some("npu-0"), vec!["0", "1", "2", "3"]),
            ("decode", 1, Some("npu-1"), vec![]),
            ("prefill", 0, None, vec![]),
        ]
    );
    assert!(placement
        .ranks
        .iter()
        .all(|r| r.devices.resource == "huawei.com/Ascend910" && r.devices.count == 4));
    let note = placement.ranks[1]
        .devices
        .note
        .as_deref()
        .unwrap_or_default();
    assert!(
        note.contains(&format!("has no {annotation} annotation")),
        "{note}"
    );
    assert_eq!(
        placement.ranks[2].pod,
        Some(format!("{}-x", groups[1].job(0)))
    );
}

#[test]
fn the_placement_record_names_each_ranks_dra_claim_and_a_rank_without_a_pod() {
    let d = did(
        json!({"type": "NVIDIA", "devicesPerPod": 8, "deviceClassName": "gpu.nvidia.com"}),
        json!([{"name": "worker", "replicas": 1, "parallel": {"tensor": 16}}]),
    );
    let names = AcceptanceNames::new("flash", "r", "t");
    let groups = names.groups(&d.spec);
    let mut pod = run_pod(&groups[0].job(0), Some("gpu-0"), BTreeMap::new());
    pod.spec.as_mut().expect("spec").resource_claims =
        Some(vec![k8s_openapi::api::core::v1::PodResourceClaim {
            name: "devices".into(),
            resource_claim_template_name: Some("flash-devices-abc".into()),
            ..Default::default()
        }]);
    let mut waiting = pod.clone();
    pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
        resource_claim_statuses: Some(vec![k8s_openapi::api::core::v1::PodResourceClaimStatus {
            name: "devices".into(),
            resource_claim_name: Some("p-devices-7xk2q".into()),
        }]),
        ..Default::default()
    });
    waiting.metadata.name = Some("waiting".into());
    let placement = run_placement(&d, &groups, &|job| {
        if job == groups[0].job(0) {
            vec![&pod]
        } else {
            Vec::new()
        }
    });
    let first = &placement.ranks[0];
    assert_eq!(first.devices.resource, "class gpu.nvidia.com");
    assert_eq!(first.devices.count, 8);
    assert_eq!(first.devices.claims, ["devices=p-devices-7xk2q"]);
    assert_eq!(first.node.as_deref(), Some("gpu-0"));
    let second = &placement.ranks[1];
    assert_eq!((second.rank, &second.pod, &second.node), (1, &None, &None));
    let unmade = run_placement(&d, &groups, &|_| vec![&waiting]);
    assert_eq!(
        unmade.ranks[0].devices.claims,
        ["devices=template flash-devices-abc"]
    );
}
