//! The benchmark's part of the test bed: a topology generated for N deployments, served by a node
//! agent process of its own (so its cost can be read apart from the bed's), and the CPU time and
//! resident memory of the processes involved, read from `/proc`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;
use serde_json::json;

/// The benchmark's node agent's state directory, under the bed's.
pub const STATE_DIR: &str = "bench-agent";

/// Label on every node of the generated topology; its nodes are removed when the run ends.
pub const NODE_LABEL: &str = "sim.deepinfer.io/bench";
/// `nvidia.com/gpu.product` of the generated NVIDIA nodes; the benchmark's deployments select it,
/// so they land on these nodes only.
pub const NVIDIA_PRODUCT: &str = "NVIDIA-H100-80GB-HBM3";
/// `node.kubernetes.io/npu.chip.name` of the generated Ascend nodes.
pub const ASCEND_PRODUCT: &str = "Ascend910C";
/// Nodes per NVLink clique and per Ascend super-pod.
const CLIQUE_NODES: usize = 4;
const SUPER_POD_NODES: usize = 8;

fn round_up(value: usize, step: usize) -> usize {
    value.div_ceil(step).max(1) * step
}

/// Whether the i-th deployment is an Ascend one (one in three), else NVIDIA.
pub fn is_ascend(i: usize) -> bool {
    i.is_multiple_of(3)
}

/// Devices one deployment holds once it serves (8 pods of one device each).
pub const DEVICES_PER_DEPLOYMENT: usize = 8;

/// Nodes of `devices_per_node` each for `deployments` deployments with a fifth spare (acceptance
/// runs and the surge group of a rollout need room), in whole scale-up domains.
fn nodes_for(deployments: usize, devices_per_node: usize, domain: usize) -> usize {
    let devices = deployments * DEVICES_PER_DEPLOYMENT * 6 / 5;
    round_up(devices.div_ceil(devices_per_node), domain)
}

/// The topology for `n` deployments, as the node agent's topology file (JSON is YAML): NVIDIA
/// nodes of 8 GPUs in cliques of 4 nodes and Ascend nodes of 16 NPUs in super-pods of 8, enough
/// for every deployment with a fifth spare. For 1000: 800 NVIDIA and 208 Ascend nodes.
pub fn topology(n: usize) -> (serde_json::Value, usize) {
    let ascend_deployments = (0..n).filter(|i| is_ascend(*i)).count();
    let nvidia = nodes_for(n - ascend_deployments, 8, CLIQUE_NODES);
    let ascend = nodes_for(ascend_deployments, 16, SUPER_POD_NODES);
    let doc = json!({
        "defaults": {
            "capacity": {"cpu": "128", "memory": "2Ti", "pods": "110", "ephemeral-storage": "10Ti"},
            "labels": {NODE_LABEL: "true"},
        },
        "pools": [
            {"name": "bench-nvidia", "count": nvidia,
             "capacity": {"nvidia.com/gpu": "8"},
             "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": NVIDIA_PRODUCT,
                        "nvidia.com/gpu.count": "8"},
             "domain": {"label": "nvidia.com/gpu.clique", "size": CLIQUE_NODES}},
            {"name": "bench-ascend", "count": ascend,
             "capacity": {"huawei.com/Ascend910": "16"},
             "labels": {"accelerator": "huawei-Ascend910", "node.kubernetes.io/npu.chip.name": ASCEND_PRODUCT},
             "domain": {"label": "huawei.com/super-pod-id", "size": SUPER_POD_NODES}},
        ],
    });
    (doc, nvidia + ascend)
}

/// CPU seconds (user + system) a process has used so far; NaN once it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces) start with the state, field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / clock_ticks(),
        _ => f64::NAN,
    }
}

/// `sysconf(_SC_CLK_TCK)`, asked of `getconf` once.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Resident memory of a process in MiB (`VmRSS`); NaN once it is gone.
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// Anonymous resident memory of a process in MiB (`RssAnon`: heap and stacks, without the pages
/// of the binary and libraries it has mapped and touched); NaN once it is gone.
pub fn anon_mib(pid: u32) -> f64 {
    status_mib(pid, "RssAnon:")
}

fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The bed's own processes (API server, etcd, scheduler, controller-manager, its node agent) by
/// name, from the pid files `cluster-up.sh` wrote, and the benchmark itself.
pub fn bed_processes() -> Vec<(String, u32)> {
    let pids = deepinfer_e2e::support::bed_dir().join("pids");
    let mut out: Vec<(String, u32)> = std::fs::read_dir(&pids)
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| {
                    let pid = std::fs::read_to_string(e.path())
                        .ok()?
                        .trim()
                        .parse()
                        .ok()?;
                    Some((e.file_name().to_string_lossy().into_owned(), pid))
                })
                .collect()
        })
        .unwrap_or_default();
    // The benchmark itself: the floor's client and caches in the floor's phases, its watches in
    // all of them. It shares the machine with the bed.
    out.push(("deepinfer-bench".into(), std::process::id()));
    out.sort();
    out
}

/// The node agent serving the generated topology; stopped (SIGKILL) when dropped.
pub struct BenchAgent {
    child: Child,
    /// Nodes it registers.
    pub nodes: usize,
}

impl BenchAgent {
    /// Writes the topology for `n` deployments and starts `binary` on it, executing the
    /// operator's own images with `operator` and the `deepinfer-runner` beside it.
    pub fn start(binary: &Path, operator: &Path, n: usize, log: &Path) -> anyhow::Result<Self> {
        let operator = &std::path::absolute(operator)?;
        anyhow::ensure!(
            binary.exists(),
            "{} is missing; build it with `cargo build --workspace --bins`",
            binary.display()
        );
        let bed = deepinfer_e2e::support::bed_dir();
        let state = bed.join(STATE_DIR);
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state)?;
        let (doc, nodes) = topology(n);
        let topology = state.join("topology.yaml");
        std::fs::write(&topology, serde_json::to_string_pretty(&doc)?)?;
        let out = std::fs::File::create(log)?;
        let child = Command::new(binary)
            .arg("--kubeconfig")
            .arg(deepinfer_e2e::support::kubeconfig())
            .arg("--topology")
            .arg(&topology)
            .arg("--state-dir")
            .arg(&state)
            .arg("--own-binary")
            .arg(format!("deepinfer-operator={}", operator.display()))
            .arg("--own-binary")
            .arg(format!(
                "deepinfer-runner={}",
                operator.with_file_name("deepinfer-runner").display()
            ))
            .args(["--workers", "32", "--status-heartbeat-seconds", "300"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()?;
        Ok(Self { child, nodes })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits until every node of the topology is Ready.
    pub async fn wait_ready(&mut self, client: &Client, timeout: Duration) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(client.clone());
        let start = std::time::Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                anyhow::bail!("the benchmark's node agent exited with {status}");
            }
            let ready = api
                .list(&ListParams::default().labels(NODE_LABEL))
                .await
                .map(|l| l.items.iter().filter(|n| node_ready(n)).count())
                .unwrap_or(0);
            if ready >= self.nodes {
                return Ok(());
            }
            anyhow::ensure!(
                start.elapsed() < timeout,
                "{ready} of {} generated nodes Ready after {timeout:?}",
                self.nodes
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// How long the node agent has to stop its pods' processes once asked to.
const AGENT_STOP_GRACE: Duration = Duration::from_secs(30);

impl Drop for BenchAgent {
    /// Asks the node agent to stop (SIGTERM: it ends the processes it executes for pods, which run
    /// in process groups of their own and would outlive a SIGKILL of the agent), then kills it if
    /// it has not ended within [`AGENT_STOP_GRACE`].
    fn drop(&mut self) {
        use deepinfer_e2e::operator_process::{send_term, wait_exit};
        if send_term(&self.child) && wait_exit(&mut self.child, AGENT_STOP_GRACE).is_some() {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Deletes the generated nodes (left from this run or an interrupted earlier one).
pub async fn remove_nodes(client: &Client) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(NODE_LABEL),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thousand_deployments_get_about_a_thousand_nodes() {
        let (doc, nodes) = topology(1000);
        assert_eq!(doc["pools"][0]["count"], 800);
        assert_eq!(doc["pools"][1]["count"], 208);
        assert_eq!(nodes, 1008);
    }

    #[test]
    fn small_runs_get_whole_domains() {
        let (doc, nodes) = topology(6);
        assert_eq!(doc["pools"][0]["count"], 8);
        assert_eq!(doc["pools"][1]["count"], 8);
        assert_eq!(nodes, 16);
    }
}
