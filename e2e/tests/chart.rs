//! The operator as admins install it: the Helm chart with the real `helm`, and `kubectl apply -k
//! config/default`, on the test bed. The operator pod is run by the simulated node under the
//! ServiceAccount the manifests create (token from the API server), so every RBAC rule the
//! manifests miss is a real denial. Each install takes a DeepInferDeployment to Ready through all
//! three gates (licence, checkpoint verification Job, acceptance Job with the stand-in engine),
//! and neither the operator's log nor the API server's audit log may hold a denial.
//!
//! Both tests place an 8-GPU group, so they are named `gpu_*` (one at a time, see
//! `.config/nextest.toml`). Each operator watches only its own test namespace, so it never
//! touches the resources of suites running beside it on the shared bed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use deepinfer_e2e::operator_process::https_get;
use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, DeepInferDeploymentStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const FAKE_ENGINE: &str = env!("CARGO_BIN_EXE_deepinfer-fake-engine");
const TIMEOUT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    support::repo_root()
}

/// A port nobody listens on now: operator pods share the host's network on the bed.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The probes the manifests declare answer over HTTPS without a token on the configured port
/// (the bed runs no probes), while `/metrics` refuses a request without one.
async fn probes_answer(port: u16) {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for path in ["/healthz", "/readyz"] {
        support::eventually(
            TIMEOUT,
            &format!("200 from {path} over HTTPS on port {port}"),
            || async { (https_get(address, path, None).0 == 200).then_some(()) },
        )
        .await;
    }
    let (code, body) = https_get(address, "/metrics", None);
    assert_eq!(code, 401, "/metrics without a token: {body}");
}

/// The installed ClusterRole `reader` is what a scraper needs: a ServiceAccount bound to it gets
/// `/metrics` over HTTPS with its token (the operator asks the API server, with the rights the
/// manifests grant it); the binding is removed again.
fn metrics_serve_a_bound_reader(ns: &str, port: u16, reader: &str) {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    support::kubectl_ok(&["-n", ns, "create", "serviceaccount", "scraper"]);
    let binding = format!("{ns}-scraper");
    support::kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        &format!("--clusterrole={reader}"),
        &format!("--serviceaccount={ns}:scraper"),
    ]);
    let token = support::kubectl_ok(&["-n", ns, "create", "token", "scraper"])
        .trim()
        .to_owned();
    let deadline = std::time::Instant::now() + TIMEOUT;
    let (code, body) = loop {
        let (code, body) = https_get(address, "/metrics", Some(&token));
        if code == 200 || std::time::Instant::now() > deadline {
            break (code, body);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    support::kubectl_ok(&["delete", "clusterrolebinding", &binding]);
    assert_eq!(
        code, 200,
        "/metrics for a ServiceAccount bound to {reader}: {body}"
    );
    assert!(body.contains("deepinfer_build_info{"), "{body}");
}

/// Runs the bed's real helm against the bed; returns (success, stdout + stderr).
/// `helm install` of `chart` as `release` into `ns` with `--set sets`, returning once the
/// operator Deployment is ready (`--wait`, what GitOps pipelines do) and the CRD is established.
fn helm_install(release: &str, chart: &std::path::Path, ns: &str, sets: &str) {
    let (ok, out) = helm(&[
        "install",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        ns,
        "--wait",
        "--timeout=2m",
        "--set",
        sets,
    ]);
    assert!(ok, "helm install failed:\n{out}");
    support::wait_crd_established();
}

fn helm(args: &[&str]) -> (bool, String) {
    let tmp = std::env::temp_dir();
    let out = Command::new(support::bed_dir().join("bin/helm"))
        .arg("--kubeconfig")
        .arg(support::kubeconfig())
        .args(args)
        .env("HELM_CACHE_HOME", tmp.join("deepinfer-helm-cache"))
        .env("HELM_CONFIG_HOME", tmp.join("deepinfer-helm-config"))
        .env("HELM_DATA_HOME", tmp.join("deepinfer-helm-data"))
        .output()
        .expect("running the bed's helm");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// One serving group of 8 GPUs over the fixture checkpoint on claim `ckpt`, with the shot
/// planner as its acceptance workload, the stand-in engine replaying the valid outputs.
fn deployment(name: &str) -> DeepInferDeployment {
    let fixtures = repo().join("e2e/fixtures/shot-planner");
    let text = std::fs::read_to_string(fixtures.join("acceptance.yaml")).expect("fixture spec");
    let mut acceptance: Value = serde_yaml::from_str(&text).expect("fixture spec is YAML");
    acceptance["engine"] = json!({"command": [
        FAKE_ENGINE, "{serving_args}", "--prompts", "{prompts_file}",
        "--output", "{outputs_file}",
        "--canned", fixtures.join("valid-2-2-2.jsonl").display().to_string(),
        "--mode", "replay",
    ]});
    let mut did = support::deployment(name);
    did["spec"]["acceptance"] = acceptance;
    serde_json::from_value(did).expect("valid test object")
}

fn condition<'a>(s: &'a DeepInferDeploymentStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.metadata.deletion_timestamp.is_none()
}

fn ready_pod(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Waits for the one operator pod matching `selector` in `ns` to be Running and Ready.
async fn operator_pod(client: &Client, ns: &str, selector: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    support::eventually(
        TIMEOUT,
        &format!("the operator pod ({selector}) in {ns} Running and Ready"),
        || async {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .ok()?;
            match list.items.as_slice() {
                [p] if running(p) && ready_pod(p) => Some(p.clone()),
                _ => None,
            }
        },
    )
    .await
}

/// Creates `name` in `ns` and waits until the operator took it through every gate: checkpoint
/// verified (a Job), acceptance passed (a Job under a ServiceAccount and Role the operator
/// creates), the serving group's pod running, `Ready=True`.
///
/// On a timeout, RBAC denials of `operator` (running as `sa` in `ops`) are reported first.
async fn take_to_ready(client: &Client, ns: &str, name: &str, operator: (&Pod, &str, &str)) {
    let api: Api<DeepInferDeployment> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &deployment(name))
        .await
        .expect("creating the DeepInferDeployment");
    // Polled by hand so that a timeout shows where the resource got stuck.
    let start = std::time::Instant::now();
    let ready = loop {
        let status = api.get(name).await.ok().and_then(|d| d.status);
        if let Some(s) = status.as_ref() {
            if condition(s, "Ready").map(|c| c.0) == Some("True") {
                break status.expect("status");
            }
        }
        if start.elapsed() > TIMEOUT {
            assert_no_denials(operator.0, operator.1, operator.2);
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "{ns}/{name} not Ready after {TIMEOUT:?}: {:#?}",
            status.map(|s| s.conditions)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for type_ in [
        "LicenseAccepted",
        "CheckpointVerified",
        "AcceptancePassed",
        "WorkersReady",
    ] {
        assert_eq!(
            condition(&ready, type_).map(|c| c.0),
            Some("True"),
            "{type_} in {:?}",
            ready.conditions
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let workers = pods
        .list(&ListParams::default().labels(&format!(
            "deepinfer.io/deployment={name},deepinfer.io/component=worker"
        )))
        .await
        .expect("listing workers");
    assert_eq!(workers.items.len(), 1, "one pod of one 8-GPU group");
    assert!(workers.items.iter().all(|p| running(p) && ready_pod(p)));
}

/// Every Job the operator ran in `ns` used the operator image it was installed with (or the
/// engine image, for the acceptance run's engine container).
async fn assert_jobs_use_operator_image(client: &Client, ns: &str, operator_image: &str) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let mut images = std::collections::BTreeSet::new();
    for job in jobs.list(&ListParams::default()).await.expect("jobs").items {
        let spec = job
            .spec
            .and_then(|s| s.template.spec)
            .expect("job pod spec");
        let containers = spec.init_containers.into_iter().flatten();
        images.extend(containers.chain(spec.containers).filter_map(|c| c.image));
    }
    assert!(images.contains(operator_image), "Job images {images:?}");
    assert!(
        images.iter().all(|i| i == operator_image || i == IMAGE),
        "Job images {images:?}: only {operator_image} and the engine image"
    );
}

/// The operator's container log, as the simulated node wrote it.
fn container_log(pod: &Pod, container: &str) -> String {
    let path = support::bed_dir().join("agent/logs").join(format!(
        "{}_{}_{container}.log",
        pod.namespace().unwrap_or_default(),
        pod.name_any()
    ));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("operator log {}: {e}", path.display()))
}

/// Asserts that the operator, acting as `namespace/service_account`, was never denied: not in
/// its own log (reads and writes), not in the API server's audit log (writes).
fn assert_no_denials(pod: &Pod, namespace: &str, service_account: &str) {
    let log = container_log(pod, "operator");
    assert!(
        !log.is_empty(),
        "the operator logged nothing; is it running?"
    );
    let denied: Vec<&str> = log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        denied.is_empty(),
        "the operator was denied by RBAC; add exactly the missing rule to the chart and config/rbac:\n{}",
        denied.join("\n")
    );
    let user = format!("system:serviceaccount:{namespace}:{service_account}");
    let audit = std::fs::read_to_string(support::bed_dir().join("logs/audit.log"))
        .expect("the bed's audit log");
    let denied: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains(&format!("\"username\":\"{user}\"")))
        .filter(|l| l.contains("\"authorization.k8s.io/decision\":\"forbid\""))
        .collect();
    assert!(
        denied.is_empty(),
        "the API server denied {user}:\n{}",
        denied.join("\n")
    );
}

/// The placement the operator recorded on the evidence of `name`'s judgement.
async fn evidence_placement(client: &Client, ns: &str, name: &str) -> Value {
    let judged = Api::<DeepInferDeployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("the deployment")
        .status
        .and_then(|s| s.acceptance)
        .expect("a judgement");
    let evidence = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get(&judged.evidence.expect("its evidence"))
        .await
        .expect("the evidence ConfigMap");
    let placement = evidence
        .annotations()
        .get("deepinfer.io/placement")
        .expect("the run's placement on its evidence");
    serde_json::from_str(placement).expect("placement JSON")
}

async fn wait_gone(client: &Client, ns: &str, selector: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    support::eventually(
        TIMEOUT,
        &format!("operator pods ({selector}) in {ns} gone"),
        || async {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .ok()?;
            list.items.is_empty().then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn gpu_helm_chart_runs_the_operator_under_its_own_service_account_without_denials() {
    let client = support::client().await;
    let ops = TestNamespace::new(&client, "chart-ops").await;
    let work = TestNamespace::new(&client, "chart-work").await;
    support::checkpoint_claim(&work.name, "ckpt", &support::fixture_checkpoint(), "model");
    let release = format!("dio-{}", ops.name.rsplit('-').next().unwrap_or("x"));
    let chart = repo().join("charts/deepinfer-operator");
    let port = free_port();
    let sets = format!(
        "image.repository=deepinfer-operator,image.tag=dev,watchNamespace={},acceptedLicenses={{mit}},metrics.port={port},recordNodeDomains=true",
        work.name
    );
    // Helm's defaults, as users run it (Helm 4 applies the chart's CRD server-side). The CRD may
    // exist already (shared bed): Helm keeps it.
    helm_install(&release, &chart, &ops.name, &sets);

    let selector = format!("app.kubernetes.io/instance={release}");
    let pod = operator_pod(&client, &ops.name, &selector).await;
    probes_answer(port).await;
    let sa = format!("{release}-deepinfer-operator");
    let spec = pod.spec.as_ref().expect("pod spec");
    assert_eq!(spec.service_account_name.as_deref(), Some(sa.as_str()));
    let args = spec.containers[0].args.clone().unwrap_or_default();
    assert!(
        args.contains(&format!("--namespace={}", work.name)),
        "{args:?}"
    );
    assert!(
        args.contains(&"--operator-image=deepinfer-operator:dev".to_string()),
        "{args:?}"
    );
    let (ok, _, _) = support::kubectl(&["get", "clusterrole", &sa]);
    assert!(
        !ok,
        "single-namespace mode creates no ClusterRole to watch with"
    );
    support::kubectl_ok(&["-n", &work.name, "get", "role,rolebinding", &sa]);
    assert_confined_to(&ops.name, &sa, &work.name);
    metrics_serve_a_bound_reader(&ops.name, port, &format!("{sa}-metrics-reader"));
    // The manifests enable leader election: the operator pod leads.
    support::wait_for_lease_holder(&client, &ops.name, &sa, &pod.name_any()).await;

    take_to_ready(&client, &work.name, "flash", (&pod, &ops.name, &sa)).await;
    assert_jobs_use_operator_image(&client, &work.name, "deepinfer-operator:dev").await;
    // recordNodeDomains: the chart's ClusterRole lets the operator read the domain label of the
    // node the acceptance rank ran on.
    let placement = evidence_placement(&client, &work.name, "flash").await;
    let rank = &placement["ranks"][0];
    let node = rank["node"].as_str().expect("the rank's node");
    let labels = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(node)
        .await
        .expect("the node")
        .labels()
        .clone();
    let clique = labels.get("nvidia.com/gpu.clique").expect("a clique node");
    assert_eq!(
        rank["domain"].as_str(),
        Some(clique.as_str()),
        "{placement}"
    );
    assert_no_denials(&pod, &ops.name, &sa);

    let (ok, out) = helm(&["uninstall", &release, "--namespace", &ops.name, "--wait"]);
    assert!(ok, "helm uninstall failed:\n{out}");
    wait_gone(&client, &ops.name, &selector).await;
    let (ok, _, _) = support::kubectl(&["-n", &work.name, "get", "role", &sa]);
    assert!(!ok, "helm uninstall removes the Role");
    support::kubectl_ok(&["get", "crd", "deepinferdeployments.deepinfer.io"]);
}

/// One operator for a list of namespaces (`namespaces={a,b}`): the chart renders a Role and
/// RoleBinding in each listed namespace and no ClusterRole, and the operator, running under that
/// ServiceAccount with nothing more, reconciles the DeepInferDeployments of both namespaces (each
/// through a verify Job of its own) and never touches one in a namespace not on the list, created
/// before the others. Neither its log nor the audit log holds a denial.
#[tokio::test]
async fn helm_chart_with_a_namespace_list_reconciles_exactly_the_listed_namespaces() {
    let client = support::client().await;
    let ops = TestNamespace::new(&client, "list-ops").await;
    let listed = [
        TestNamespace::new(&client, "list-a").await,
        TestNamespace::new(&client, "list-b").await,
    ];
    let other = TestNamespace::new(&client, "list-c").await;
    support::ensure_crd();
    let api = |ns: &TestNamespace| Api::<DeepInferDeployment>::namespaced(client.clone(), &ns.name);
    for ns in listed.iter().chain([&other]) {
        let host =
            support::checkpoint_claim(&ns.name, "ckpt", &support::fixture_checkpoint(), "model");
        // Verification fails: each resource ends with a verify Job's verdict, no GPU placed.
        support::truncate_second_shard(&host);
    }
    let create = |ns: &TestNamespace| {
        let api = api(ns);
        async move {
            api.create(&PostParams::default(), &deployment("flash"))
                .await
                .expect("creating the resource");
        }
    };
    create(&other).await;
    let release = format!("dio-{}", ops.name.rsplit('-').next().unwrap_or("x"));
    let chart = repo().join("charts/deepinfer-operator");
    let port = free_port();
    let sets = format!(
        "image.repository=deepinfer-operator,image.tag=dev,namespaces={{{},{}}},acceptedLicenses={{mit}},metrics.port={port}",
        listed[0].name, listed[1].name
    );
    helm_install(&release, &chart, &ops.name, &sets);
    let selector = format!("app.kubernetes.io/instance={release}");
    let pod = operator_pod(&client, &ops.name, &selector).await;
    let sa = format!("{release}-deepinfer-operator");
    let args = pod.spec.as_ref().expect("pod spec").containers[0]
        .args
        .clone()
        .unwrap_or_default();
    let flag = format!("--namespaces={},{}", listed[0].name, listed[1].name);
    assert!(args.contains(&flag), "{args:?}");
    let (ok, _, _) = support::kubectl(&["get", "clusterrole", &sa]);
    assert!(!ok, "a namespace list needs no ClusterRole");
    for ns in &listed {
        support::kubectl_ok(&["-n", &ns.name, "get", "role,rolebinding", &sa]);
    }
    let names: Vec<&str> = listed.iter().map(|ns| ns.name.as_str()).collect();
    assert_confined_to_each(&ops.name, &sa, &names, &other.name);

    for ns in &listed {
        create(ns).await;
    }
    for ns in &listed {
        support::status_where(
            &api(ns),
            "flash",
            "verification failed by the verify Job",
            TIMEOUT,
            |s| condition(s, "CheckpointVerified") == Some(("False", "VerificationFailed")),
        )
        .await;
    }
    let untouched = api(&other)
        .get("flash")
        .await
        .expect("the unlisted resource");
    assert_eq!(untouched.status, None, "no status written outside the list");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &other.name);
    let none = jobs.list(&ListParams::default()).await.expect("jobs");
    assert!(
        none.items.is_empty(),
        "no Job outside the list: {:?}",
        none.items
    );
    assert_no_denials(&pod, &ops.name, &sa);

    let (ok, out) = helm(&["uninstall", &release, "--namespace", &ops.name, "--wait"]);
    assert!(ok, "helm uninstall failed:\n{out}");
    wait_gone(&client, &ops.name, &selector).await;
    for ns in &listed {
        let (ok, _, _) = support::kubectl(&["-n", &ns.name, "get", "role", &sa]);
        assert!(!ok, "helm uninstall removes the Role in {}", ns.name);
    }
}

/// Single-namespace mode is the least-privilege install: the operator's ServiceAccount may read
/// and write what it manages in the watched namespace, and nothing of the kind anywhere else or
/// across namespaces (asked of the API server's own authorizer).
fn assert_confined_to(sa_namespace: &str, sa: &str, watched: &str) {
    assert_confined_to_each(sa_namespace, sa, &[watched], "default");
}

/// The operator's ServiceAccount may read and write what it manages in each `watched`
/// namespace, and nothing of the kind in `unwatched` or across namespaces.
fn assert_confined_to_each(sa_namespace: &str, sa: &str, watched: &[&str], unwatched: &str) {
    let who = format!("--as=system:serviceaccount:{sa_namespace}:{sa}");
    let can = |args: &[&str]| -> bool {
        let mut full = vec!["auth", "can-i"];
        full.extend_from_slice(args);
        full.push(&who);
        let (_, out, _) = support::kubectl(&full);
        out.trim() == "yes"
    };
    for (verb, resource) in [
        ("list", "configmaps"),
        ("watch", "configmaps"),
        ("delete", "configmaps"),
        ("list", "pods"),
        ("get", "pods"),
        ("create", "jobs"),
        ("watch", "deepinferdeployments.deepinfer.io"),
        // The opt-in check of hub token and engine-readable Secrets: metadata only, by name.
        ("get", "secrets"),
    ] {
        for watched in watched {
            assert!(
                can(&[verb, resource, "-n", watched]),
                "{verb} {resource} in the watched namespace {watched}"
            );
        }
        assert!(
            !can(&[verb, resource, "-n", unwatched]),
            "{verb} {resource} in {unwatched}, not watched"
        );
        assert!(
            !can(&[verb, resource, "--all-namespaces"]),
            "{verb} {resource} across namespaces"
        );
    }
    for (verb, resource) in [
        ("list", "secrets"),
        ("watch", "secrets"),
        ("update", "configmaps"),
        ("create", "secrets"),
    ] {
        for watched in watched {
            // The verdict key Secret is made in the operator's own namespace, by the operator,
            // when it is missing (docs/security.md); nowhere else.
            if (verb, resource) == ("create", "secrets") && *watched == sa_namespace {
                continue;
            }
            assert!(
                !can(&[verb, resource, "-n", watched]),
                "{verb} {resource}: not needed, not granted"
            );
        }
    }
    assert!(
        !can(&["create", "secrets", "-n", unwatched]),
        "create secrets outside the operator's own namespace"
    );
}

/// A test-only overlay of config/default: the operator in `ops` under a unique name prefix,
/// watching `ops` (its own namespace, as config/default does), the bed's image, metrics on
/// `port`, the `mit` licence allowed.
fn overlay(dir: &Path, ops: &str, prefix: &str, port: u16) {
    std::fs::create_dir_all(dir).expect("overlay dir");
    let base = relative(dir, &repo().join("config/default"));
    let kustomization = format!(
        r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {ops}
namePrefix: {prefix}
resources:
  - {base}
images:
  - name: ghcr.io/deepinfer/deepinfer-operator
    newName: deepinfer-operator
    newTag: dev
patches:
  - target: {{kind: Deployment, name: deepinfer-operator}}
    patch: |
      - op: test
        path: /spec/template/spec/containers/0/args/1
        value: --metrics-address=0.0.0.0:8080
      - op: replace
        path: /spec/template/spec/containers/0/args/1
        value: --metrics-address=0.0.0.0:{port}
      - op: replace
        path: /spec/template/spec/containers/0/ports/0/containerPort
        value: {port}
  - target: {{kind: Deployment, name: deepinfer-operator}}
    patch: |
      apiVersion: apps/v1
      kind: Deployment
      metadata: {{name: deepinfer-operator}}
      spec:
        template:
          spec:
            containers:
              - name: operator
                env:
                  - {{name: DEEPINFER_ACCEPTED_LICENSES, value: mit}}
# As in config/default: the operator's Jobs use the final image.
replacements:
  - source:
      kind: Deployment
      name: deepinfer-operator
      fieldPath: spec.template.spec.containers.[name=operator].image
    targets:
      - select: {{kind: Deployment, name: deepinfer-operator}}
        fieldPaths:
          - spec.template.spec.containers.[name=operator].env.[name=DEEPINFER_OPERATOR_IMAGE].value
"#
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization).expect("writing the overlay");
}

/// `to` relative to `from` (kustomize refuses absolute resource paths).
fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[tokio::test]
async fn gpu_kustomize_default_runs_the_operator_under_its_own_service_account_without_denials() {
    let client = support::client().await;
    let ops = TestNamespace::new(&client, "kust-ops").await;
    // config/default watches the operator's own namespace: the deployment lives there too.
    let work = &ops;
    support::checkpoint_claim(&work.name, "ckpt", &support::fixture_checkpoint(), "model");
    let prefix = format!("{}-", ops.name);
    let dir = std::env::temp_dir().join(format!("deepinfer-overlay-{}", ops.name));
    let port = free_port();
    overlay(&dir, &ops.name, &prefix, port);

    // As config/README.md tells users: a server-side apply of the kustomization. It may take over
    // the CRD's fields from an earlier install on the shared bed.
    let (ok, out, err) = support::kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "kubectl apply -k failed:\n{out}{err}");

    let sa = format!("{prefix}deepinfer-operator");
    let selector = "app.kubernetes.io/name=deepinfer-operator,app.kubernetes.io/component=operator";
    let pod = operator_pod(&client, &ops.name, selector).await;
    probes_answer(port).await;
    let spec = pod.spec.as_ref().expect("pod spec");
    assert_eq!(spec.service_account_name.as_deref(), Some(sa.as_str()));
    let env = spec.containers[0].env.clone().unwrap_or_default();
    let operator_image = env
        .iter()
        .find(|e| e.name == "DEEPINFER_OPERATOR_IMAGE")
        .and_then(|e| e.value.as_deref());
    assert_eq!(operator_image, Some("deepinfer-operator:dev"));
    support::wait_for_lease_holder(&client, &ops.name, "deepinfer-operator", &pod.name_any()).await;
    let (ok, _, _) = support::kubectl(&["get", "clusterrole", &sa]);
    assert!(!ok, "config/default creates no ClusterRole to watch with");
    assert_confined_to(&ops.name, &sa, &ops.name);
    metrics_serve_a_bound_reader(&ops.name, port, &format!("{sa}-metrics-reader"));

    take_to_ready(&client, &work.name, "flash", (&pod, &ops.name, &sa)).await;
    // config/default reads no nodes: the evidence names the rank's node, not its domain.
    let placement = evidence_placement(&client, &work.name, "flash").await;
    assert!(placement["ranks"][0]["node"].is_string(), "{placement}");
    assert_eq!(
        placement["domainsNotRead"],
        json!("the operator reads no nodes (--record-node-domains is off)"),
        "{placement}"
    );
    assert_jobs_use_operator_image(&client, &work.name, "deepinfer-operator:dev").await;
    assert_no_denials(&pod, &ops.name, &sa);

    // Tear down everything but the CRD (shared by the bed's other suites); the namespace takes
    // the Role and RoleBinding with it.
    support::kubectl_ok(&["-n", &ops.name, "delete", "deployment", &sa, "--wait=true"]);
    wait_gone(&client, &ops.name, selector).await;
    // The cluster-scoped objects of the overlay outlive the namespace.
    support::kubectl_ok(&[
        "delete",
        "clusterrolebinding,clusterrole",
        &format!("{sa}-metrics-auth"),
    ]);
    support::kubectl_ok(&["delete", "clusterrole", &format!("{sa}-metrics-reader")]);
    let _ = std::fs::remove_dir_all(&dir);
}
