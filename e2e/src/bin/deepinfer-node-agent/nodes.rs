//! Node side of the agent: registers the topology's Nodes, keeps them alive with Leases and
//! status heartbeats (so the real node-lifecycle controller keeps them Ready), and applies the
//! node fault annotation.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec as K8sNodeSpec, NodeStatus,
    NodeSystemInfo, Taint as K8sTaint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::{now, FIELD_MANAGER};

const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet version the simulated nodes report: the bed's control-plane release.
const KUBELET_VERSION: &str = "v1.37.2";
const LEASE_DURATION_SECONDS: i32 = 40;
const LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// Nodes registered or given a status heartbeat at once.
const CONCURRENT_NODE_WRITES: usize = 16;
/// Leases renewed at once. Each kubelet renews its own lease whatever the others do; a round over
/// a thousand nodes must end well inside the node-lifecycle controller's grace period even while
/// the API server is saturated (one second per request: 8 s at 128 at once, 63 s at 16).
const CONCURRENT_LEASE_RENEWALS: usize = 128;

/// A node's periodic write.
#[derive(Debug, Clone, Copy)]
enum Beat {
    Lease,
    Status,
}

/// What the agent currently does for a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Heartbeats run and pods are served.
    Up,
    /// The node fault annotation is set: no heartbeats, pods untouched.
    NotReady,
    /// The Node object was deleted while the agent ran; it is not re-created until restart.
    Removed,
}

struct NodeState {
    spec: crate::topology::NodeSpec,
    mode: Mode,
    uid: Option<String>,
    ready_since: Time,
}

/// Shared view of the simulated nodes.
#[derive(Clone)]
pub struct Nodes {
    client: Client,
    inner: Arc<Mutex<BTreeMap<String, NodeState>>>,
    /// Names of nodes that came back up; the pod side re-syncs their pods.
    resumed: mpsc::UnboundedSender<String>,
}

impl Nodes {
    pub fn new(
        client: Client,
        specs: Vec<crate::topology::NodeSpec>,
        resumed: mpsc::UnboundedSender<String>,
    ) -> Self {
        let inner = specs
            .into_iter()
            .map(|spec| {
                let state = NodeState {
                    spec,
                    mode: Mode::Up,
                    uid: None,
                    ready_since: now(),
                };
                (state.spec.name.clone(), state)
            })
            .collect();
        Nodes {
            client,
            inner: Arc::new(Mutex::new(inner)),
            resumed,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeState>> {
        // A panic while holding this lock cannot leave the map inconsistent (plain field writes).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many devices of `resource` node `name` has, and the node's ordinal among the
    /// agent's nodes (name order); `None` when it has none or is not ours.
    pub fn device_slots(&self, name: &str, resource: &str) -> Option<(u32, usize)> {
        let nodes = self.lock();
        let ordinal = nodes.keys().position(|n| n == name)?;
        let capacity = nodes.get(name)?.spec.capacity.get(resource)?.parse().ok()?;
        Some((capacity, ordinal))
    }

    /// The agent's mode for `name`, or `None` if the node is not one of ours.
    pub fn mode(&self, name: &str) -> Option<Mode> {
        self.lock().get(name).map(|s| s.mode)
    }

    fn names_in(&self, mode: Mode) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, s)| s.mode == mode)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Creates or updates every Node of the topology and reports it Ready.
    pub async fn register_all(&self) -> Result<()> {
        let specs: Vec<_> = self.lock().values().map(|s| s.spec.clone()).collect();
        futures::stream::iter(specs.clone())
            .map(|spec| self.register(spec))
            .buffer_unordered(CONCURRENT_NODE_WRITES)
            .collect::<Vec<Result<()>>>()
            .await
            .into_iter()
            .collect::<Result<()>>()?;
        crate::dra::publish_domains(&self.client, &specs).await
    }

    /// Creates or updates one Node and reports it Ready.
    async fn register(&self, spec: crate::topology::NodeSpec) -> Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        let node = api
            .patch(
                &spec.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(node_object(&spec)),
            )
            .await
            .with_context(|| format!("registering node {}", spec.name))?;
        let annotated_down =
            deepinfer_e2e::faults::node_not_ready(node.metadata.annotations.as_ref());
        {
            let mut map = self.lock();
            if let Some(state) = map.get_mut(&spec.name) {
                state.uid = node.metadata.uid.clone();
                if annotated_down {
                    state.mode = Mode::NotReady;
                }
            }
        }
        crate::dra::publish(&self.client, &spec, node.metadata.uid.as_deref()).await?;
        self.post_status(&spec.name).await?;
        if !annotated_down {
            self.apply_lease(&spec.name).await?;
        }
        info!(node = %spec.name, down = annotated_down, "registered node");
        Ok(())
    }

    /// Writes the node's status (capacity, conditions, addresses, heartbeat) for its current mode.
    async fn post_status(&self, name: &str) -> Result<()> {
        let Some((spec, mode, since)) = self
            .lock()
            .get(name)
            .map(|s| (s.spec.clone(), s.mode, s.ready_since.clone()))
        else {
            return Ok(());
        };
        if mode == Mode::Removed {
            return Ok(());
        }
        let status = node_status(&spec, mode == Mode::Up, since, now());
        let api: Api<Node> = Api::all(self.client.clone());
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(serde_json::json!({ "status": status })),
        )
        .await
        .with_context(|| format!("posting status of node {name}"))?;
        Ok(())
    }

    /// Moves the lease's `renewTime` to now (a merge patch of that one field, as light as a
    /// kubelet's update); a lease that is gone is applied whole again.
    async fn renew_lease(&self, name: &str) -> Result<()> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let renewed = serde_json::json!({
            "spec": {"renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now())}
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&renewed))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => self.apply_lease(name).await,
            Err(e) => Err(e).with_context(|| format!("renewing lease of node {name}")),
        }
    }

    /// Applies the node's whole lease: holder, duration, owner and a renewal now.
    async fn apply_lease(&self, name: &str) -> Result<()> {
        let uid = self.lock().get(name).and_then(|s| s.uid.clone());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(LEASE_NAMESPACE.to_string()),
                // As the kubelet does: the garbage collector removes the lease with its node.
                owner_references: uid.map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.to_string(),
                        uid,
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.to_string()),
                lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                ..Default::default()
            }),
        };
        let api: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(lease),
        )
        .await
        .with_context(|| format!("applying lease of node {name}"))?;
        Ok(())
    }

    /// Renews leases every 10 s and posts status heartbeats every `status_interval` for the
    /// nodes that are up, each on its own clock: a slow round of status heartbeats never holds
    /// back the leases that keep the nodes Ready.
    pub async fn heartbeat_loop(self, status_interval: Duration) {
        futures::join!(
            self.beat_every(Beat::Lease, LEASE_RENEW_INTERVAL),
            self.beat_every(Beat::Status, status_interval)
        );
    }

    /// Every `interval`, `beat` for each node that is up (a round that overruns delays the next).
    async fn beat_every(&self, beat: Beat, interval: Duration) {
        let (at_once, what) = match beat {
            Beat::Lease => (CONCURRENT_LEASE_RENEWALS, "lease renewal failed"),
            Beat::Status => (CONCURRENT_NODE_WRITES, "status heartbeat failed"),
        };
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            futures::stream::iter(self.names_in(Mode::Up))
                .for_each_concurrent(at_once, |name| async move {
                    let done = match beat {
                        Beat::Lease => self.renew_lease(&name).await,
                        Beat::Status => self.post_status(&name).await,
                    };
                    if let Err(e) = done {
                        warn!(node = %name, error = format!("{e:#}"), "{what}");
                    }
                })
                .await;
        }
    }

    /// Watches the Nodes to apply the fault annotation and to notice deletions.
    pub async fn watch_loop(self) {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut seen_in_relist: HashSet<String> = HashSet::new();
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => seen_in_relist.clear(),
                Ok(watcher::Event::InitApply(node)) => {
                    seen_in_relist.insert(node.name_any());
                    self.on_node(&node).await;
                }
                Ok(watcher::Event::InitDone) => {
                    // A re-list does not report deletions that happened while disconnected.
                    let gone: Vec<String> = self
                        .lock()
                        .keys()
                        .filter(|n| !seen_in_relist.contains(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        self.on_removed(&name);
                    }
                }
                Ok(watcher::Event::Apply(node)) => self.on_node(&node).await,
                Ok(watcher::Event::Delete(node)) => self.on_removed(&node.name_any()),
                Err(e) => {
                    warn!(error = %e, "node watch failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn on_removed(&self, name: &str) {
        if let Some(state) = self.lock().get_mut(name) {
            if state.mode != Mode::Removed {
                info!(node = %name, "node was deleted; it stays removed until the agent restarts");
                state.mode = Mode::Removed;
            }
        }
    }

    async fn on_node(&self, node: &Node) {
        let name = node.name_any();
        let want_down = deepinfer_e2e::faults::node_not_ready(node.metadata.annotations.as_ref());
        let changed = {
            let mut map = self.lock();
            let Some(state) = map.get_mut(&name) else {
                return;
            };
            state.uid = node.metadata.uid.clone();
            match (state.mode, want_down) {
                (Mode::Up, true) => {
                    state.mode = Mode::NotReady;
                    state.ready_since = now();
                    true
                }
                (Mode::NotReady, false) => {
                    state.mode = Mode::Up;
                    state.ready_since = now();
                    true
                }
                _ => false,
            }
        };
        if !changed {
            return;
        }
        info!(node = %name, not_ready = want_down, "node fault annotation changed");
        if let Err(e) = self.post_status(&name).await {
            warn!(node = %name, error = format!("{e:#}"), "posting node status failed");
        }
        if !want_down {
            if let Err(e) = self.renew_lease(&name).await {
                warn!(node = %name, error = format!("{e:#}"), "lease renewal failed");
            }
            // The receiver lives as long as the agent; a send error only happens at shutdown.
            let _ = self.resumed.send(name);
        }
    }
}

fn quantities(map: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    map.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

/// The Node object the agent applies (metadata and spec; status is posted separately).
fn node_object(spec: &crate::topology::NodeSpec) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(spec.name.clone()),
            labels: Some(spec.labels.clone()),
            ..Default::default()
        },
        spec: Some(K8sNodeSpec {
            taints: (!spec.taints.is_empty()).then(|| {
                spec.taints
                    .iter()
                    .map(|t| K8sTaint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                        time_added: None,
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The status a kubelet would post for this node; `ready == false` reports Ready=Unknown as the
/// node-lifecycle controller would for a node that stopped posting.
fn node_status(
    spec: &crate::topology::NodeSpec,
    ready: bool,
    transition: Time,
    heartbeat: Time,
) -> NodeStatus {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(heartbeat.clone()),
        last_transition_time: Some(transition.clone()),
    };
    let mut conditions = vec![
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "simulated node has sufficient memory",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "simulated node has no disk pressure",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "simulated node has sufficient PIDs",
        ),
    ];
    conditions.push(if ready {
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "simulated kubelet is posting ready status",
        )
    } else {
        condition(
            "Ready",
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status (a simulated lost node).",
        )
    });
    NodeStatus {
        capacity: Some(quantities(&spec.capacity)),
        allocatable: Some(quantities(&spec.allocatable)),
        conditions: Some(conditions),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "127.0.0.1".into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: spec.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(k8s_openapi::api::core::v1::DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            boot_id: format!("sim-{}", spec.name),
            container_runtime_version: "sim://deepinfer-node-agent".into(),
            kernel_version: "simulated".into(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: format!("sim-{}", spec.name),
            operating_system: "linux".into(),
            os_image: "deepinfer simulated node".into(),
            system_uuid: format!("sim-{}", spec.name),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> crate::topology::NodeSpec {
        crate::topology::parse("pools: [{name: n, capacity: {nvidia.com/gpu: '8'}}]")
            .unwrap()
            .remove(0)
    }

    #[test]
    fn status_reports_capacity_and_readiness() {
        let t = now();
        let status = node_status(&spec(), true, t.clone(), t.clone());
        assert_eq!(status.capacity.unwrap()["nvidia.com/gpu"].0, "8");
        let ready = |s: &NodeStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .status
                .clone()
        };
        assert_eq!(
            ready(&node_status(&spec(), true, t.clone(), t.clone())),
            "True"
        );
        assert_eq!(ready(&node_status(&spec(), false, t.clone(), t)), "Unknown");
    }

    #[test]
    fn node_object_carries_labels_and_taints() {
        let mut s = spec();
        s.taints.push(crate::topology::Taint {
            key: "k".into(),
            value: None,
            effect: "NoSchedule".into(),
        });
        let node = node_object(&s);
        assert_eq!(node.labels()["kubernetes.io/hostname"], "n-0");
        assert_eq!(node.spec.unwrap().taints.unwrap()[0].effect, "NoSchedule");
    }
}
