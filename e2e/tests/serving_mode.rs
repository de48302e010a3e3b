//! `spec.acceptance.mode: serving` on the test bed with a real engine: the llama.cpp example
//! (`support::llama_cpp`) judged through its own serving endpoint. A new revision's first serving
//! group is made at once and takes no traffic (its pods keep the `deepinfer.io/accepted` gate
//! False) while a Job of the judge alone sends the acceptance prompts to it; a pass admits exactly
//! those pods and the rollout replaces the other group without another run, so a rollout of two
//! groups loads the new revision's weights twice (offline acceptance: three, see `rollout.rs`). A
//! revision whose serving flag breaks structured output is refused: its candidate goes and the
//! old revision keeps serving whole. The role Service's ready endpoints are sampled every 100 ms
//! and their minimum asserted against `maxUnavailable`. The bed's pod range is local to the host
//! (`cluster-up.sh`), so the judge reaches the candidate at the pod IP its status reports. Each
//! group takes one GPU.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deepinfer_e2e::support::{self, llama_cpp, Operator};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use deepinfer_operator::controller::build;
use deepinfer_operator::controller::pods::pod_ready;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(300);

/// The llama.cpp example judged in serving mode by structure, `replicas` groups rolled within
/// `maxSurge`/`maxUnavailable`, a load pass of 2 requests at once.
fn serving(name: &str, replicas: i32, surge: i32, unavailable: i32) -> Value {
    let mut acceptance = llama_cpp::structure_only();
    acceptance["mode"] = json!("serving");
    acceptance["loadConcurrency"] = json!(2);
    let mut did = llama_cpp::on_the_bed(name, acceptance);
    let role = &mut did["spec"]["roles"][0];
    role["replicas"] = json!(replicas);
    role["rollout"] = json!({"maxSurge": surge, "maxUnavailable": unavailable});
    did
}

fn is_ready_on(s: &DeepInferDeploymentStatus, revision: Option<&str>) -> bool {
    support::condition(s, "Ready").is_some_and(|c| c.status == "True")
        && revision.is_none_or(|r| s.revision.as_deref() != Some(r))
}

fn revision_of(p: &Pod) -> String {
    p.labels()
        .get("deepinfer.io/revision")
        .cloned()
        .unwrap_or_default()
}

/// Samples the role Service's ready endpoints and the groups that exist every 100 ms.
struct Sampler {
    stop: Arc<AtomicBool>,
    min_endpoints: Arc<AtomicUsize>,
    max_groups: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(client: &Client, ns: &str, did: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let min_endpoints = Arc::new(AtomicUsize::new(usize::MAX));
        let max_groups = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (client, ns, did) = (client.clone(), ns.to_string(), did.to_string());
            let (stop, min_endpoints, max_groups, samples) = (
                stop.clone(),
                min_endpoints.clone(),
                max_groups.clone(),
                samples.clone(),
            );
            async move {
                let service = format!("{did}-worker");
                while !stop.load(Ordering::Relaxed) {
                    let endpoints = support::ready_endpoints(&client, &ns, &service).await;
                    min_endpoints.fetch_min(endpoints, Ordering::Relaxed);
                    let pods = support::live_workers(&client, &ns, &did).await;
                    let groups: std::collections::BTreeSet<(String, String)> = pods
                        .iter()
                        .map(|p| {
                            let group = p.labels().get("deepinfer.io/group").cloned();
                            (revision_of(p), group.unwrap_or_default())
                        })
                        .collect();
                    max_groups.fetch_max(groups.len(), Ordering::Relaxed);
                    samples.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Self {
            stop,
            min_endpoints,
            max_groups,
            samples,
            task,
        }
    }

    /// Stops sampling; returns (fewest ready endpoints, most groups at once).
    async fn finish(self, what: &str) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let (min, max, samples) = (
            self.min_endpoints.load(Ordering::Relaxed),
            self.max_groups.load(Ordering::Relaxed),
            self.samples.load(Ordering::Relaxed),
        );
        println!(
            "{what}: fewest ready endpoints {min}, most groups at once {max} ({samples} samples)"
        );
        assert!(samples >= 2, "{what}: only {samples} sample(s) were taken");
        (min, max)
    }
}

async fn set_args(api: &Api<DeepInferDeployment>, name: &str, context_size: &str) {
    let args = json!(["--threads", "1", "--context-size", context_size]);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"runtime": {"args": args}}})),
    )
    .await
    .expect("patching the runtime's arguments");
}

/// The weight loads of `revision` so far, printed: every one a serving group's, none a separate
/// acceptance group's.
fn serving_loads(ns: &str, name: &str, revision: &str, what: &str) -> usize {
    let loads = support::weight_loads(ns, name, revision);
    println!(
        "{name}: weight loads of revision {revision} ({what}): {} ({} acceptance, {} serving)",
        loads.len(),
        loads
            .iter()
            .filter(|s| s.component.as_deref() == Some("acceptance"))
            .count(),
        loads
            .iter()
            .filter(|s| s.component.as_deref() == Some("worker"))
            .count(),
    );
    assert!(
        loads
            .iter()
            .all(|s| s.component.as_deref() == Some("worker")),
        "a serving-mode run starts no engine of its own: {loads:#?}"
    );
    loads.len()
}

/// The judgement's evidence: the outputs the serving endpoint returned, and the judge's timings
/// of the judged pass (concurrency 1) and the load pass (concurrency 2).
async fn assert_served_evidence(client: &Client, ns: &str, st: &DeepInferDeploymentStatus) {
    let evidence = support::evidence_of(client, ns, st).await;
    let outputs = support::evidence_key(&evidence, "outputs.jsonl");
    assert_eq!(
        outputs.lines().filter(|l| !l.trim().is_empty()).count(),
        4,
        "{outputs}"
    );
    let manifest: Value =
        serde_json::from_str(&support::evidence_key(&evidence, "manifest.json")).expect("JSON");
    let serving = &manifest["serving"];
    assert!(
        serving["endpoint"]
            .as_str()
            .is_some_and(|e| e.starts_with("http://10.244.")),
        "judged through the candidate's pod IP: {serving:#}"
    );
    let passes = serving["passes"].as_array().expect("the passes");
    let concurrency: Vec<u64> = passes
        .iter()
        .filter_map(|p| p["concurrency"].as_u64())
        .collect();
    assert_eq!(concurrency, [1, 2], "{serving:#}");
    for pass in passes {
        assert!(
            pass["wallSeconds"].as_f64().is_some_and(|s| s > 0.0),
            "{pass:#}"
        );
    }
}

#[tokio::test]
async fn gpu_serving_mode_judges_the_candidate_in_place_and_rolls_out_with_one_load_per_group() {
    let (client, ns, api) = llama_cpp::namespace("serving-surge").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let name = "served";
    support::create_deployment(&api, serving(name, 2, 1, 0)).await;
    let first = support::status_where(&api, name, "Ready", TIMEOUT, |s| is_ready_on(s, None)).await;
    let first_rev = first.revision.clone().expect("a revision");
    assert_served_evidence(&client, &ns.name, &first).await;
    assert_eq!(
        serving_loads(&ns.name, name, &first_rev, "first revision"),
        2
    );

    let sampler = Sampler::start(&client, &ns.name, name);
    set_args(&api, name, "1536").await;
    let after = support::status_where(&api, name, "Ready on the new revision", TIMEOUT, |s| {
        is_ready_on(s, Some(&first_rev))
    })
    .await;
    let (min, max) = sampler.finish(name).await;
    let new_rev = after.revision.clone().expect("the new revision");
    assert!(
        min >= 2,
        "ready endpoints dropped to {min}; maxUnavailable is 0"
    );
    assert!(max <= 3, "{max} groups at once; replicas + maxSurge is 3");
    assert_eq!(
        serving_loads(&ns.name, name, &new_rev, "rollout, serving acceptance"),
        2,
        "two groups, two loads: the judged candidate is one of them"
    );
    assert_served_evidence(&client, &ns.name, &after).await;
    let pods = support::live_workers(&client, &ns.name, name).await;
    assert_eq!(pods.len(), 2);
    assert!(pods
        .iter()
        .all(|p| revision_of(p) == new_rev && pod_ready(p)));
    op.stop().await;
}

const GPU: &str = "nvidia.com/gpu";

/// Fills every GPU left free on the bed's untainted nodes with pods of another workload (one per
/// node, bound to it), so that no group can be made beside those that run. Returns their names.
async fn fill_the_bed(client: &Client, ns: &str) -> Vec<String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let all_pods: Api<Pod> = Api::all(client.clone());
    let held = all_pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items;
    let gpus = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| q.0.parse::<i64>().ok()).unwrap_or(0)
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut fillers = Vec::new();
    for node in nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
    {
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| !t.is_empty());
        let allocatable = gpus(
            node.status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref()?.get(GPU)),
        );
        let used: i64 = held
            .iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node.name_any())
            })
            .filter(|p| {
                !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            })
            .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
            .map(|c| {
                gpus(
                    c.resources
                        .as_ref()
                        .and_then(|r| r.limits.as_ref()?.get(GPU)),
                )
            })
            .sum();
        let free = allocatable - used;
        if tainted || free <= 0 {
            continue;
        }
        let name = format!("filler-{}", fillers.len());
        let filler: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": node.name_any(),
                "restartPolicy": "Never",
                "containers": [{"name": "hold", "image": "registry.example.com/other-workload:1",
                                "resources": {"limits": {GPU: free.to_string()}}}]
            }
        }))
        .expect("a filler pod");
        api.create(&Default::default(), &filler)
            .await
            .expect("creating a filler pod");
        fillers.push(name);
    }
    fillers
}

#[tokio::test]
async fn gpu_serving_mode_on_a_full_bed_refuses_a_broken_candidate_restoring_the_old_group() {
    let (client, ns, api) = llama_cpp::namespace("serving-full").await;
    support::wait_for_free_devices(&client, GPU).await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let name = "served";
    support::create_deployment(&api, serving(name, 2, 0, 1)).await;
    let first = support::status_where(&api, name, "Ready", TIMEOUT, |s| is_ready_on(s, None)).await;
    let first_rev = first.revision.clone().expect("a revision");
    // Every other GPU is taken: the candidate can only run in the place of a serving group.
    let fillers = fill_the_bed(&client, &ns.name).await;
    println!(
        "{name}: the bed filled by {} pod(s) of another workload",
        fillers.len()
    );
    assert!(!fillers.is_empty());

    // A context too small for any prompt: the engine serves, but cannot answer under the
    // constraints. The candidate takes the place of one group, is refused, and goes; the group
    // it replaced comes back on the serving revision.
    let sampler = Sampler::start(&client, &ns.name, name);
    set_args(&api, name, "32").await;
    let refused = support::status_where(&api, name, "the broken revision refused", TIMEOUT, |s| {
        s.revision.as_deref() != Some(first_rev.as_str())
            && s.acceptance.as_ref().is_some_and(|a| {
                a.result.as_str() == "Failed" && Some(&a.revision) == s.revision.as_ref()
            })
    })
    .await;
    let broken = refused.revision.clone().expect("the broken revision");
    let restored = support::eventually(
        TIMEOUT,
        "two ready groups of the serving revision, the candidate gone",
        || {
            let (client, ns) = (client.clone(), ns.name.clone());
            let first_rev = first_rev.clone();
            async move {
                let pods = support::live_workers(&client, &ns, name).await;
                let ok = pods.len() == 2
                    && pods
                        .iter()
                        .all(|p| revision_of(p) == first_rev && pod_ready(p));
                ok.then_some(pods)
            }
        },
    )
    .await;
    let (min, max) = sampler.finish(name).await;
    assert!(restored.iter().all(|p| revision_of(p) != broken));
    assert!(
        min >= 1,
        "ready endpoints dropped to {min}; maxUnavailable is 1"
    );
    assert!(max <= 2, "{max} groups at once; maxSurge is 0");
    let acc = refused.acceptance.clone().expect("the judgement");
    println!(
        "{name}: revision {broken} refused: {}",
        acc.reason.as_deref().unwrap_or_default()
    );
    assert!(!acc.failed_prompts.is_empty(), "{acc:?}");
    assert_served_evidence(&client, &ns.name, &refused).await;
    assert_eq!(
        serving_loads(&ns.name, name, &broken, "refused candidate"),
        1,
        "one candidate group was made and judged"
    );

    // A good revision then rolls out in place, two loads for two groups.
    let sampler = Sampler::start(&client, &ns.name, name);
    set_args(&api, name, "1536").await;
    let after = support::status_where(&api, name, "Ready on the new revision", TIMEOUT, |s| {
        is_ready_on(s, Some(&first_rev)) && s.revision.as_deref() != Some(broken.as_str())
    })
    .await;
    let (min, max) = sampler.finish(name).await;
    assert!(
        min >= 1,
        "ready endpoints dropped to {min}; maxUnavailable is 1"
    );
    assert!(max <= 2, "{max} groups at once; maxSurge is 0");
    let new_rev = after.revision.clone().expect("the new revision");
    assert_eq!(
        serving_loads(&ns.name, name, &new_rev, "rollout without surge"),
        2
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for filler in fillers {
        let _ = pods.delete(&filler, &Default::default()).await;
    }
    op.stop().await;
}

/// The key of `revision` in the deployment's endpoints ConfigMap: what its decode pods mount.
async fn revision_endpoints(client: &Client, ns: &str, did: &str, key: &str) -> Option<Value> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = api.get_opt(&build::peer_endpoints_name(did)).await.ok()??;
    serde_json::from_str(cm.data?.get(key)?).ok()
}

#[tokio::test]
async fn gpu_serving_mode_judges_prefill_and_decode_together_wired_to_each_other_only() {
    let (client, ns, api) = llama_cpp::namespace("serving-pd").await;
    let op = Operator::start(&ns.name, &["mit"]).await;
    let name = "pd";
    let mut did = serving(name, 1, 1, 0);
    let role = did["spec"]["roles"][0].clone();
    let (mut prefill, mut decode) = (role.clone(), role);
    prefill["name"] = json!("prefill");
    decode["name"] = json!("decode");
    did["spec"]["roles"] = json!([prefill, decode]);
    support::create_deployment(&api, did).await;
    let first = support::status_where(&api, name, "Ready", TIMEOUT, |s| is_ready_on(s, None)).await;
    let first_rev = first.revision.clone().expect("a revision");
    let judged = first.acceptance.clone().expect("the judgement");
    assert_eq!(
        judged.roles,
        ["decode", "prefill"],
        "judged together, through decode"
    );

    set_args(&api, name, "1536").await;
    let target = support::status_where(&api, name, "the new revision", TIMEOUT, |s| {
        s.revision.as_deref().is_some_and(|r| r != first_rev)
    })
    .await;
    let new_rev = target.revision.clone().expect("the new revision");
    // While the candidates are judged, the candidate decode's file lists the candidate prefill
    // (engine ready, not admitted) and nothing else; the whole map, read by whoever serves, does
    // not list it until it passes.
    let key = build::peer_endpoints_key(&new_rev);
    let candidate_prefill = format!(
        "rank-0.{}.{}.svc:8000",
        build::group_service_name(name, "prefill", &new_rev, 0),
        ns.name
    );
    let (wired, whole) =
        support::eventually(TIMEOUT, "the candidate decode's endpoints file", || {
            let (client, ns, key) = (client.clone(), ns.name.clone(), key.clone());
            async move {
                let wired = revision_endpoints(&client, &ns, name, &key).await?;
                let listed = wired["prefill"].as_array().is_some_and(|l| !l.is_empty());
                let whole = revision_endpoints(&client, &ns, name, "endpoints.json").await?;
                listed.then_some((wired, whole))
            }
        })
        .await;
    assert_eq!(wired, json!({"prefill": [candidate_prefill]}));
    let judged_yet = support::status_where(&api, name, "a status", TIMEOUT, |_| true)
        .await
        .acceptance
        .is_some_and(|a| a.revision == new_rev);
    println!("{name}: the candidate decode's file while judged: {wired}; the whole map then: {whole} (verdict recorded yet: {judged_yet})");
    if !judged_yet {
        assert!(
            !whole.to_string().contains(&candidate_prefill),
            "an unjudged candidate is listed for serving: {whole}"
        );
    }

    let after = support::status_where(&api, name, "Ready on the new revision", TIMEOUT, |s| {
        is_ready_on(s, Some(&first_rev))
    })
    .await;
    assert_eq!(after.revision.as_deref(), Some(new_rev.as_str()));
    assert_eq!(
        after.acceptance.expect("the judgement").roles,
        ["decode", "prefill"]
    );
    assert_eq!(
        serving_loads(
            &ns.name,
            name,
            &new_rev,
            "prefill and decode, judged together"
        ),
        2,
        "one group per role, each loaded once"
    );
    op.stop().await;
}
