//! Test support for suites that run on the shared test bed (`make cluster-up`): a client for the
//! bed, one namespace per test (removed when the test ends), the CRD installed once, fixture
//! checkpoints on real PersistentVolumes, an in-process operator per namespace, and polling.
//!
//! Nothing is skipped silently: when the bed cannot be reached, every test fails and says how to
//! start it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deepinfer_operator::api::LICENSE_ACCEPTED_ANNOTATION;
use kube::api::{Api, PostParams};
use kube::Client;

/// Root of the repository.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e lives inside the repository")
        .to_path_buf()
}

/// Directory of the running bed (`DEEPINFER_TESTBED`, default `<repo>/.testbed`).
pub fn bed_dir() -> PathBuf {
    std::env::var_os("DEEPINFER_TESTBED")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".testbed"))
}

/// Admin kubeconfig of the bed.
pub fn kubeconfig() -> PathBuf {
    bed_dir().join("kubeconfig")
}

/// A client for the bed as its admin; panics with instructions when the bed is not running.
pub async fn client() -> Client {
    let path = kubeconfig();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap_or_else(|e| {
        panic!("the test bed is not running ({} unreadable: {e}); start it with `make cluster-up` or run `make test`", path.display())
    });
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("bed kubeconfig is valid");
    let client = Client::try_from(config).expect("client for the bed");
    if let Err(e) = client.apiserver_version().await {
        panic!("the test bed's API server does not answer ({e}); start it with `make cluster-up` or run `make test`");
    }
    client
}

/// Runs the bed's real kubectl; returns (success, stdout, stderr).
pub fn kubectl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bed_dir().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .output()
        .expect("running the bed's kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs kubectl and panics with its output when it fails.
pub fn kubectl_ok(args: &[&str]) -> String {
    let (ok, out, err) = kubectl(args);
    assert!(ok, "kubectl {} failed: {err}{out}", args.join(" "));
    out
}

/// Runs kubectl with `input` on stdin.
pub fn kubectl_stdin(args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(bed_dir().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running the bed's kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("writing kubectl input");
    let out = child.wait_with_output().expect("kubectl output");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The CRDs under `crds/`, by name.
pub const CRDS: [&str; 2] = [
    "deepinferdeployments.deepinfer.io",
    "deepinferroles.deepinfer.io",
];

/// Installs (or updates) the committed CRDs exactly as the README tells users: a server-side
/// apply of `crds/`. `--force-conflicts` takes over fields a Helm install on the shared bed owns.
pub fn ensure_crd() {
    let crds = repo_root().join("crds");
    let crds = crds.to_str().expect("utf-8 path");
    kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", crds]);
    wait_crd_established();
}

/// Waits (30 s at most) until the API server serves every CRD of [`CRDS`]: its `Established`
/// condition is `True`. Polled with `kubectl get` rather than `kubectl wait`, which fails instead
/// of waiting while a just-created CRD still has `status.conditions: null`.
pub fn wait_crd_established() {
    let deadline = Instant::now() + Duration::from_secs(30);
    for crd in CRDS {
        loop {
            let (_, out, err) = kubectl(&[
                "get",
                &format!("crd/{crd}"),
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
            ]);
            if out.trim() == "True" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the CRD {crd} was not Established within 30 s: {err}{out}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A namespace of one test; deleted (with everything in it) when dropped.
pub struct TestNamespace {
    /// Its name.
    pub name: String,
}

impl TestNamespace {
    /// Creates a namespace named after the test, unique per run.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "{prefix}-{:x}{:x}",
            nanos % 0xfffff,
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .expect("namespace");
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        // The service-account controller creates `default` shortly after; pods need it.
        wait_for_service_account(client, &name, "default").await;
        Self { name }
    }
}

/// Waits until the service-account controller has created a ServiceAccount: the ServiceAccount
/// admission plugin refuses pods of an account that does not exist yet.
pub async fn wait_for_service_account(client: &Client, ns: &str, name: &str) {
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
    eventually(
        Duration::from_secs(30),
        &format!("ServiceAccount {ns}/{name}"),
        || {
            let sas = sas.clone();
            async move { sas.get_opt(name).await.ok().flatten().map(|_| ()) }
        },
    )
    .await;
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_diagnostics(&self.name);
        }
        if std::env::var_os("KEEP_TEST_NAMESPACES").is_none() {
            let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
        }
    }
}

/// Prints what a failed test left behind: the namespace's resources with their conditions, its
/// pods with node and phase, every accelerator pod on the bed, and recent events. Shown in the
/// test output, so that a failure on a CI machine can be read without the bed.
pub fn print_diagnostics(ns: &str) {
    let sections: [(&str, Vec<&str>); 5] = [
        (
            "resources",
            vec![
                "-n",
                ns,
                "get",
                "deepinferdeployments",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} gen={.metadata.generation} {.status}{\"\\n\"}{end}",
            ],
        ),
        ("pods, jobs, services", vec!["-n", ns, "get", "pods,jobs,services", "-o", "wide"]),
        (
            "pod conditions",
            vec![
                "-n",
                ns,
                "get",
                "pods",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.conditions}{\"\\n\"}{end}",
            ],
        ),
        ("every pod on the bed", vec!["get", "pods", "-A", "-o", "wide"]),
        ("events", vec!["-n", ns, "get", "events", "--sort-by=.lastTimestamp"]),
    ];
    for (title, args) in sections {
        // Never panics: this runs while a failed test unwinds.
        let out = Command::new(bed_dir().join("bin/kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig())
            .args(&args)
            .output();
        let text = match out {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("kubectl could not run: {e}"),
        };
        eprintln!("--- diagnostics of namespace {ns}: {title}\n{text}");
    }
}

/// Polls `check` until it yields a value or `timeout` passes; then panics naming `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Copies a fixture directory (recursively) to `dest`.
pub fn copy_dir(src: &Path, dest: &Path) {
    std::fs::create_dir_all(dest).expect("creating fixture copy");
    for entry in std::fs::read_dir(src).expect("reading fixture dir") {
        let entry = entry.expect("fixture entry");
        let to = dest.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).expect("copying fixture file");
        }
    }
}

/// Creates a hostPath PersistentVolume holding a copy of `fixture` under `subdir`, and a claim
/// `claim` in `ns` bound to it by the real PV controller. Returns the host directory.
pub fn checkpoint_claim(ns: &str, claim: &str, fixture: &Path, subdir: &str) -> PathBuf {
    checkpoint_objects(ns, claim, fixture, subdir, true)
}

/// [`checkpoint_claim`]'s volume alone, reserved for the claim `ns/claim` (which the real PV
/// controller then binds to it). Returns the host directory.
pub fn checkpoint_volume(ns: &str, claim: &str, fixture: &Path, subdir: &str) -> PathBuf {
    checkpoint_objects(ns, claim, fixture, subdir, false)
}

fn checkpoint_objects(
    ns: &str,
    claim: &str,
    fixture: &Path,
    subdir: &str,
    with_claim: bool,
) -> PathBuf {
    let pv = format!("{ns}-{claim}");
    let host = bed_dir().join("volumes").join(&pv);
    let _ = std::fs::remove_dir_all(&host);
    copy_dir(fixture, &host.join(subdir));
    let volume = format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}, labels: {{deepinfer.io/test-namespace: {ns}}}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {{namespace: {ns}, name: {claim}}}
  hostPath: {{path: {host}, type: Directory}}
"#,
        host = host.display()
    );
    let claim = format!(
        r#"---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {claim}, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: {pv}
  resources: {{requests: {{storage: 1Gi}}}}
"#
    );
    let manifest = if with_claim { volume + &claim } else { volume };
    let (ok, out) = kubectl_stdin(&["apply", "-f", "-"], &manifest);
    assert!(ok, "creating the fixture checkpoint volume failed: {out}");
    host
}

/// The fixture checkpoint committed under `e2e/fixtures/checkpoint`.
pub fn fixture_checkpoint() -> PathBuf {
    repo_root().join("e2e/fixtures/checkpoint")
}

/// An operator running in this process, watching one namespace.
pub struct Operator {
    /// Mutating requests it sent.
    pub writes: Arc<AtomicU64>,
    /// Its context (counters).
    pub ctx: Arc<deepinfer_operator::controller::Context>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Operator {
    /// Starts an operator for `ns` that accepts `licenses`.
    pub async fn start(ns: &str, licenses: &[&str]) -> Self {
        Self::start_with_limits(ns, licenses, Default::default()).await
    }

    /// Starts an operator for `ns` that accepts `licenses`, told that nodes have `limits` devices.
    pub async fn start_with_limits(
        ns: &str,
        licenses: &[&str],
        limits: deepinfer_operator::controller::gates::spec::validate::DeviceLimits,
    ) -> Self {
        Self::start_with(ns, licenses, |s| s.limits = limits).await
    }

    /// Starts an operator for `ns` that accepts `licenses`, with `change` applied to its default
    /// settings.
    pub async fn start_with(
        ns: &str,
        licenses: &[&str],
        change: impl FnOnce(&mut deepinfer_operator::controller::Settings),
    ) -> Self {
        use deepinfer_operator::controller as c;
        let mut settings = c::Settings::new(
            Some(ns.to_string()),
            licenses.iter().map(|s| s.to_string()).collect(),
        );
        settings.operator_image = "deepinfer-operator:dev".into();
        change(&mut settings);
        Self::start_with_settings(settings).await
    }

    /// Starts an operator with `settings` (its namespace among them).
    pub async fn start_with_settings(settings: deepinfer_operator::controller::Settings) -> Self {
        Self::start_fenced(settings, None).await
    }

    /// Starts an operator with `settings` whose writes go through `fence`, as a leader-elected
    /// replica's do (`None`: no election, always open).
    pub async fn start_fenced(
        settings: deepinfer_operator::controller::Settings,
        fence: Option<deepinfer_operator::leader::Fence>,
    ) -> Self {
        use deepinfer_operator::controller as c;
        let kc = kube::config::Kubeconfig::read_from(kubeconfig()).expect("bed kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("config");
        let requests = deepinfer_operator::metrics::ApiRequests::default();
        let client = c::counting_client(config, &requests).expect("counting client");
        let writes = requests.write_counter();
        let ctx = c::context(client, &settings, requests);
        if let Some(fence) = fence {
            let _ = ctx.fence.set(fence);
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(c::run_with_context(
            ctx.clone(),
            settings.namespaces.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Self {
            writes,
            ctx,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stops the operator and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The stand-in engine built from `e2e/src/bin/deepinfer-fake-engine.rs` (no GPU, no weights).
pub fn fake_engine() -> PathBuf {
    repo_root().join("target/debug/deepinfer-fake-engine")
}

/// The shot-planner acceptance section (`e2e/fixtures/shot-planner/acceptance.yaml`) with its
/// engine replaced by the stand-in engine replaying `canned` (a file under that fixture
/// directory) in `mode` (replay, truncate, crash, hang).
pub fn shot_planner_acceptance(canned: &str, mode: &str) -> serde_json::Value {
    let dir = repo_root().join("e2e/fixtures/shot-planner");
    let text = std::fs::read_to_string(dir.join("acceptance.yaml")).expect("shot-planner fixture");
    let mut acceptance: serde_json::Value = serde_yaml::from_str(&text).expect("fixture is YAML");
    acceptance["engine"] = serde_json::json!({"command": [
        fake_engine().display().to_string(),
        "{serving_args}",
        "--prompts", "{prompts_file}",
        "--output", "{outputs_file}",
        "--check_structured_output",
        "--canned", dir.join(canned).display().to_string(),
        "--mode", mode,
    ]});
    acceptance
}

/// The engine commit of the test deployments.
pub const TEST_COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Digest-pinned engine image of the test deployments.
pub const TEST_IMAGE: &str = "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The deployment every suite starts from, named `name`: the licence `mit` accepted by
/// annotation, the fixture checkpoint on claim `ckpt` (directory `model`), the test image, one
/// NVIDIA group of one pod of 8 GPUs, and the shot planner as its acceptance workload with the
/// stand-in engine replaying valid outputs. A suite changes the fields it is about.
pub fn deployment(name: &str) -> serde_json::Value {
    workers(name, 1, 8)
}

/// [`deployment`] with `replicas` NVIDIA groups of `tensor` GPUs each (8 per pod).
pub fn workers(name: &str, replicas: i32, tensor: i32) -> serde_json::Value {
    licensed_deployment(
        name,
        serde_json::json!({"type": "NVIDIA", "devicesPerPod": 8}),
        serde_json::json!([{"name": "worker", "replicas": replicas, "parallel": {"tensor": tensor}}]),
    )
}

/// [`deployment`] on `accelerator` with `roles`.
pub fn licensed_deployment(
    name: &str,
    accelerator: serde_json::Value,
    roles: serde_json::Value,
) -> serde_json::Value {
    let mut did = serde_json::json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": TEST_IMAGE, "commit": TEST_COMMIT},
            "accelerator": accelerator,
            "roles": roles,
            "acceptance": shot_planner_acceptance("valid-2-2-2.jsonl", "replay")
        }
    });
    did["metadata"]["annotations"] = licence_accepted(Some("mit"));
    did
}

/// The annotations that accept `licence` (`None`: the annotation removed, in a merge patch).
pub fn licence_accepted(licence: Option<&str>) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    annotations.insert(LICENSE_ACCEPTED_ANNOTATION.into(), licence.into());
    serde_json::Value::Object(annotations)
}

/// The merge patch that sets the licence annotation to `licence`, or removes it (`None`).
pub fn licence_patch(licence: Option<&str>) -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": licence_accepted(licence)}})
}

/// A `DeepInferDeployment` named `name` without the licence annotation: the licence gate holds
/// it in Pending, so reconciling it takes one status write and no accelerator.
pub fn unlicensed_deployment(name: &str) -> deepinfer_operator::api::DeepInferDeployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "deepinfer.io/v1alpha1",
        "kind": "DeepInferDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash-1017", "license": "mit",
                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}},
            "runtime": {"image": "registry.example.com/deepinfer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                        "commit": "0123456789abcdef0123456789abcdef01234567"},
            "accelerator": {"type": "NVIDIA", "devicesPerPod": 8},
            "roles": [{"name": "worker", "replicas": 1, "parallel": {"tensor": 8}}],
            "acceptance": {"prompts": [{"id": "p1", "prompt": "hi", "structuredOutput": {"regex": "a+"}}]}
        }
    }))
    .expect("valid test object")
}

/// Writes `identity` as the holder of the Lease `ns/name`, as another replica that took it over
/// would.
pub async fn take_lease(client: &Client, ns: &str, name: &str, identity: &str) {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), ns);
    let mut taken = api.get(name).await.expect("the Lease exists");
    if let Some(spec) = taken.spec.as_mut() {
        spec.holder_identity = Some(identity.to_string());
    }
    api.replace(name, &PostParams::default(), &taken)
        .await
        .expect("taking the Lease");
}

/// The holder of the Lease `ns/name`, if it exists and has one.
pub async fn lease_holder(client: &Client, ns: &str, name: &str) -> Option<String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.ok()??.spec?.holder_identity
}

/// Waits until `identity` holds the Lease `ns/name`.
pub async fn wait_for_lease_holder(client: &Client, ns: &str, name: &str, identity: &str) {
    eventually(
        Duration::from_secs(120),
        &format!("{identity} to hold the Lease {ns}/{name}"),
        || async {
            (lease_holder(client, ns, name).await.as_deref() == Some(identity)).then_some(())
        },
    )
    .await;
}

/// Waits up to 60 s until the `DeepInferDeployment` `ns/name` reports `phase`.
pub async fn wait_for_phase(
    client: &Client,
    ns: &str,
    name: &str,
    phase: deepinfer_operator::api::Phase,
) {
    wait_for_phase_within(client, ns, name, phase, Duration::from_secs(60)).await;
}

/// Waits up to `timeout` until the `DeepInferDeployment` `ns/name` reports `phase`.
pub async fn wait_for_phase_within(
    client: &Client,
    ns: &str,
    name: &str,
    phase: deepinfer_operator::api::Phase,
    timeout: Duration,
) {
    let api: Api<deepinfer_operator::api::DeepInferDeployment> =
        Api::namespaced(client.clone(), ns);
    eventually(
        timeout,
        &format!("{ns}/{name} in phase {phase:?}"),
        || async { (api.get(name).await.ok()?.status?.phase? == phase).then_some(()) },
    )
    .await;
}

/// Waits until no pod anywhere on the bed holds `resource` (pods of earlier tests whose
/// namespaces are still being deleted): for tests that need the whole bed's devices.
pub async fn wait_for_free_devices(client: &Client, resource: &str) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(client.clone());
    eventually(
        Duration::from_secs(120),
        &format!("every {resource} on the bed to be free"),
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&Default::default()).await.ok()?;
                let held = list.items.iter().any(|p| {
                    let ended = matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    );
                    !ended
                        && p.spec.as_ref().is_some_and(|s| {
                            s.node_name.is_some()
                                && s.containers.iter().any(|c| {
                                    c.resources
                                        .as_ref()
                                        .and_then(|r| r.limits.as_ref())
                                        .is_some_and(|l| l.contains_key(resource))
                                })
                        })
                });
                (!held).then_some(())
            }
        },
    )
    .await;
}

/// A namespace of one test holding the fixture checkpoint on claim `ckpt` (under `model`), and
/// the API of its DeepInferDeployments.
pub async fn namespace_with_checkpoint(
    prefix: &str,
) -> (
    Client,
    TestNamespace,
    Api<deepinfer_operator::api::DeepInferDeployment>,
) {
    let client = client().await;
    ensure_crd();
    let ns = TestNamespace::new(&client, prefix).await;
    checkpoint_claim(&ns.name, "ckpt", &fixture_checkpoint(), "model");
    let api = Api::namespaced(client.clone(), &ns.name);
    (client, ns, api)
}

/// Creates the DeepInferDeployment `object` (JSON as users write it).
pub async fn create_deployment(
    api: &Api<deepinfer_operator::api::DeepInferDeployment>,
    object: serde_json::Value,
) {
    let did: deepinfer_operator::api::DeepInferDeployment =
        serde_json::from_value(object).expect("a valid test object");
    api.create(&PostParams::default(), &did)
        .await
        .expect("creating the DeepInferDeployment");
}

/// The condition of `type_` in a status.
pub fn condition<'a>(
    status: &'a deepinfer_operator::api::DeepInferDeploymentStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Waits up to `timeout` until the status of `name` satisfies `pred`, and returns it.
pub async fn status_where(
    api: &Api<deepinfer_operator::api::DeepInferDeployment>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&deepinfer_operator::api::DeepInferDeploymentStatus) -> bool,
) -> deepinfer_operator::api::DeepInferDeploymentStatus {
    eventually(timeout, what, || async {
        api.get(name).await.ok()?.status.filter(|s| pred(s))
    })
    .await
}

/// As [`status_where`], on a status written for the resource's current generation only.
pub async fn current_status_where(
    api: &Api<deepinfer_operator::api::DeepInferDeployment>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&deepinfer_operator::api::DeepInferDeploymentStatus) -> bool,
) -> deepinfer_operator::api::DeepInferDeploymentStatus {
    eventually(timeout, what, || async {
        let did = api.get(name).await.ok()?;
        let current = did.status.as_ref()?.observed_generation == did.metadata.generation;
        did.status.filter(|s| current && pred(s))
    })
    .await
}

/// Makes the operator look at `name` again `rounds` times, two seconds apart, by changing a
/// test annotation (a change the operator ignores).
pub async fn poke(
    api: &Api<deepinfer_operator::api::DeepInferDeployment>,
    name: &str,
    rounds: u32,
) {
    use kube::api::{Patch, PatchParams};
    for round in 0..rounds {
        let patch =
            serde_json::json!({"metadata": {"annotations": {"test/poke": round.to_string()}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("poking the resource");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Cuts the fixture's second shard under the checkpoint directory `host` (as
/// [`checkpoint_claim`] returns it) in half: verification must fail naming it.
pub fn truncate_second_shard(host: &Path) {
    let shard = host.join("model/model-00002-of-00002.safetensors");
    let bytes = std::fs::read(&shard).expect("fixture shard");
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).expect("truncating the shard");
}

/// A client that acts as `ns/sa` with a token from the TokenRequest API.
pub async fn client_as(admin: &Client, ns: &str, sa: &str) -> Client {
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(serde_json::json!({
            "spec": {"audiences": [], "expirationSeconds": 3600}
        }))
        .expect("token request");
    let token = sas
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .expect("token for the ServiceAccount")
        .status
        .expect("token status")
        .token
        .expect("a token in the TokenRequest status");
    let kc = kube::config::Kubeconfig::read_from(kubeconfig()).expect("bed kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("bed kubeconfig is valid");
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    Client::try_from(config).expect("client")
}

/// The evidence ConfigMap of the judgement recorded in `st`.
pub async fn evidence_of(
    client: &Client,
    ns: &str,
    st: &deepinfer_operator::api::DeepInferDeploymentStatus,
) -> k8s_openapi::api::core::v1::ConfigMap {
    let name = st
        .acceptance
        .as_ref()
        .and_then(|a| a.evidence.clone())
        .expect("the judgement names its evidence");
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .expect("evidence ConfigMap")
}

/// The value of `key` in an evidence ConfigMap.
pub fn evidence_key(cm: &k8s_openapi::api::core::v1::ConfigMap, key: &str) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key).cloned())
        .unwrap_or_else(|| panic!("evidence key {key}"))
}

/// One start of an `engine` container that the bed's node agent saw (a serving pod or an
/// acceptance rank), from `<bed>/agent/engine-starts.jsonl`.
#[derive(serde::Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EngineStart {
    pub namespace: Option<String>,
    pub deployment: String,
    pub revision: Option<String>,
    /// `worker` (serving) or `acceptance`.
    pub component: Option<String>,
    pub role: Option<String>,
    pub group: Option<String>,
    pub rank: Option<String>,
    pub pod: String,
    pub started_at: String,
    pub executed: bool,
}

/// Every engine start a node agent recorded in `<state_dir>/engine-starts.jsonl`.
pub fn engine_starts_in(state_dir: &std::path::Path) -> Vec<EngineStart> {
    let text = std::fs::read_to_string(state_dir.join("engine-starts.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<EngineStart>(l).ok())
        .collect()
}

/// The engine starts of `deployment` in `ns` so far, on the bed's node agent.
pub fn engine_starts(ns: &str, deployment: &str) -> Vec<EngineStart> {
    engine_starts_in(&bed_dir().join("agent"))
        .into_iter()
        .filter(|s| s.namespace.as_deref() == Some(ns) && s.deployment == deployment)
        .collect()
}

/// The weight loads of `revision` of `deployment`: each start of a group's rank-0 engine, serving
/// or acceptance (a group loads the model's weights once per start).
pub fn weight_loads(ns: &str, deployment: &str, revision: &str) -> Vec<EngineStart> {
    engine_starts(ns, deployment)
        .into_iter()
        .filter(|s| s.revision.as_deref() == Some(revision) && s.rank.as_deref() == Some("0"))
        .collect()
}

/// The deployment's serving pods (component `worker`) not being deleted.
pub async fn live_workers(
    client: &Client,
    ns: &str,
    did: &str,
) -> Vec<k8s_openapi::api::core::v1::Pod> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    api.list(&kube::api::ListParams::default().labels(&format!(
        "deepinfer.io/deployment={did},deepinfer.io/component=worker"
    )))
    .await
    .map(|l| l.items)
    .unwrap_or_default()
    .into_iter()
    .filter(|p| p.metadata.deletion_timestamp.is_none())
    .collect()
}

/// Ready endpoints of a Service (from its EndpointSlices): what it sends traffic to.
pub async fn ready_endpoints(client: &Client, ns: &str, service: &str) -> usize {
    let api: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), ns);
    api.list(
        &kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={service}")),
    )
    .await
    .map(|l| l.items)
    .unwrap_or_default()
    .iter()
    .flat_map(|s| s.endpoints.iter().flatten())
    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
    .count()
}

/// The host address at which a pod of the bed is reached: its IP where the pod range is local to
/// the host (`cluster-up.sh` adds the route), else its loopback twin (`10.b.c.d` → `127.b.c.d`),
/// as the node agent's executed containers listen.
pub fn pod_host(pod_ip: &str) -> String {
    let local = std::net::TcpListener::bind(("10.244.255.254", 0)).is_ok();
    if local {
        pod_ip.to_string()
    } else {
        pod_ip.replacen("10.", "127.", 1)
    }
}

/// The llama.cpp example on the bed: `config/samples/llama-cpp/deployment.yaml` with its engine
/// the bed's entrypoint of the example image (`cluster-up.sh` writes it), the tiny random-weight
/// model (`e2e/bed/llama-cpp.sh`) beside the fixture checkpoint on claim `ckpt`.
pub mod llama_cpp {
    use std::path::PathBuf;

    use kube::{Api, Client};
    use serde_json::{json, Value};

    use super::{bed_dir, licence_accepted, namespace_with_checkpoint, repo_root, TestNamespace};

    /// The shipped sample, `config/samples/llama-cpp/deployment.yaml`, as JSON.
    pub fn sample() -> Value {
        let path = repo_root().join("config/samples/llama-cpp/deployment.yaml");
        let text = std::fs::read_to_string(&path).expect("the llama.cpp sample");
        serde_yaml::from_str(&text).expect("the sample is YAML")
    }

    /// The sample's acceptance section without its rules: structure only, which the engine's
    /// constrained decoding guarantees even from random weights.
    pub fn structure_only() -> Value {
        let mut acceptance = sample()["spec"]["acceptance"].clone();
        for p in acceptance["prompts"].as_array_mut().expect("prompts") {
            p.as_object_mut().expect("a prompt").remove("rules");
        }
        acceptance
    }

    /// The bed's entrypoint of the example image (written by `cluster-up.sh`).
    pub fn launcher() -> PathBuf {
        bed_dir().join("bin/deepinfer-llama-cpp")
    }

    /// The sample as the bed runs it: on the bed's checkpoint claim `ckpt`, the adapter started
    /// by the bed's entrypoint, one CPU thread, probes every second; `acceptance` as given.
    pub fn on_the_bed(name: &str, acceptance: Value) -> Value {
        let mut did = sample();
        did["metadata"] = json!({"name": name, "annotations": licence_accepted(Some("mit"))});
        did["spec"]["model"] = json!({"name": "deepinfer/tiny-random-llama", "license": "mit",
                                      "source": {"volume": {"claimName": "ckpt", "path": "model"}}});
        let runtime = &mut did["spec"]["runtime"];
        runtime["command"] = json!([launcher().display().to_string()]);
        runtime["args"] = json!(["--threads", "1", "--context-size", "1024"]);
        let health = json!({"httpGet": {"path": "/health", "port": "serve"}, "periodSeconds": 1,
                            "timeoutSeconds": 1, "failureThreshold": 60});
        runtime["startupProbe"] = health.clone();
        runtime["readinessProbe"] = health;
        did["spec"]["acceptance"] = acceptance;
        did
    }

    /// A namespace of one test with the tiny GGUF model beside the fixture checkpoint.
    pub async fn namespace(
        prefix: &str,
    ) -> (
        Client,
        TestNamespace,
        Api<deepinfer_operator::api::DeepInferDeployment>,
    ) {
        let (client, ns, api) = namespace_with_checkpoint(prefix).await;
        let host = bed_dir().join("volumes").join(format!("{}-ckpt", ns.name));
        std::fs::copy(
            bed_dir().join("llama-cpp/model.gguf"),
            host.join("model/model.gguf"),
        )
        .expect("the tiny GGUF model (e2e/bed/llama-cpp.sh) beside the fixture checkpoint");
        (client, ns, api)
    }
}
