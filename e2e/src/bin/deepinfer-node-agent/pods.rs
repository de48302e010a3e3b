//! Pod side of the agent: one watch of all bound pods feeds a work queue; a few workers bring
//! each pod of the agent's nodes to the status a kubelet would report, start the executed
//! containers, and finalise deletions.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use deepinfer_e2e::faults;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::exec::{Notify, Runtime};
use crate::nodes::{Mode, Nodes};
use crate::plan::{self, ContainerPlan, OwnBinaries};
use crate::queue::WorkQueue;
use crate::status::{self, Report};

const ERROR_RETRY: Duration = Duration::from_secs(2);

type Key = ObjectRef<Pod>;

/// Fake pod IPs: unique per pod while the agent runs, taken from 10.244.0.0/16.
#[derive(Default)]
struct IpPool {
    by_pod: HashMap<Key, (String, Ipv4Addr)>,
    used: HashSet<Ipv4Addr>,
    next: u32,
}

impl IpPool {
    const SIZE: u32 = 1 << 16;

    /// The pod's IP: the one it already reports, the one it was given, or a free one.
    fn assign(&mut self, key: &Key, uid: &str, reported: Option<&str>) -> Ipv4Addr {
        if let Some((known_uid, ip)) = self.by_pod.get(key) {
            if known_uid == uid {
                return *ip;
            }
            let ip = *ip;
            self.used.remove(&ip);
        }
        let ip = match reported.and_then(|r| r.parse().ok()) {
            Some(ip) => ip,
            None => self.free(),
        };
        self.used.insert(ip);
        self.by_pod.insert(key.clone(), (uid.to_string(), ip));
        ip
    }

    fn free(&mut self) -> Ipv4Addr {
        for _ in 0..Self::SIZE {
            self.next = (self.next + 1) % Self::SIZE;
            let [_, _, x, y] = self.next.to_be_bytes();
            let ip = Ipv4Addr::new(10, 244, x, y);
            // Skip network and broadcast-looking addresses; they confuse readers of the status.
            if y != 0 && y != 255 && !self.used.contains(&ip) {
                return ip;
            }
        }
        warn!("pod IP range exhausted; reusing addresses");
        Ipv4Addr::new(10, 244, 0, 1)
    }

    fn release(&mut self, key: &Key) {
        if let Some((_, ip)) = self.by_pod.remove(key) {
            self.used.remove(&ip);
        }
    }

    fn keys(&self) -> Vec<Key> {
        self.by_pod.keys().cloned().collect()
    }
}

pub struct PodAgent {
    client: Client,
    nodes: Nodes,
    own: OwnBinaries,
    store: Store<Pod>,
    /// Namespaces, for the pod fault rules they carry (`faults::NAMESPACE_POD_FAULTS`).
    namespaces: Store<k8s_openapi::api::core::v1::Namespace>,
    queue: Arc<WorkQueue<Key>>,
    ips: Mutex<IpPool>,
    /// The simulated Ascend device plugin's allocations.
    ascend: crate::ascend::Allocator,
    pub runtime: Runtime,
    /// Engine container starts, for the tests' count of weight loads.
    starts: crate::starts::EngineStarts,
}

impl PodAgent {
    /// Starts the pod watch and `workers` workers; returns the agent for shutdown.
    pub fn start(
        client: Client,
        nodes: Nodes,
        own: OwnBinaries,
        runtime: Runtime,
        starts: crate::starts::EngineStarts,
        workers: usize,
        resumed: mpsc::UnboundedReceiver<String>,
    ) -> Arc<Self> {
        let (store, writer) = reflector::store();
        let (namespaces, ns_writer) = reflector::store();
        let ns_events = reflector::reflector(
            ns_writer,
            watcher(Api::all(client.clone()), watcher::Config::default()),
        )
        .default_backoff();
        tokio::spawn(ns_events.for_each(|_| async {}));
        let agent = Arc::new(PodAgent {
            client: client.clone(),
            nodes,
            own,
            store,
            namespaces,
            queue: WorkQueue::new(),
            ips: Mutex::new(IpPool::default()),
            ascend: crate::ascend::Allocator::default(),
            runtime,
            starts,
        });
        // Only bound pods concern a node; the scheduler's pending pods are filtered server-side.
        let api: Api<Pod> = Api::all(client);
        let events = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().fields("spec.nodeName!=")),
        )
        .default_backoff();
        tokio::spawn(Arc::clone(&agent).watch_loop(events.boxed()));
        tokio::spawn(Arc::clone(&agent).resume_loop(resumed));
        for _ in 0..workers.max(1) {
            tokio::spawn(Arc::clone(&agent).work_loop());
        }
        agent
    }

    fn ips(&self) -> std::sync::MutexGuard<'_, IpPool> {
        // Plain map updates only: a poisoned lock still holds consistent data.
        self.ips.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pod as its faults are read: with the fault rules of its namespace that select it
    /// merged into its annotations (locally; nothing is written).
    fn with_namespace_faults(&self, pod: Arc<Pod>) -> Arc<Pod> {
        let ns = self.namespaces.get(&ObjectRef::new(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        ));
        let ns_annotations = ns.as_ref().and_then(|n| n.metadata.annotations.as_ref());
        if !ns_annotations.is_some_and(|a| a.contains_key(faults::NAMESPACE_POD_FAULTS)) {
            return pod;
        }
        let mut pod = pod.as_ref().clone();
        pod.metadata.annotations = Some(faults::effective_annotations(
            pod.metadata.annotations.as_ref(),
            pod.metadata.labels.as_ref(),
            ns_annotations,
        ));
        Arc::new(pod)
    }

    fn is_ours(&self, pod: &Pod) -> bool {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| self.nodes.mode(n).is_some())
    }

    async fn watch_loop(
        self: Arc<Self>,
        mut events: futures::stream::BoxStream<
            'static,
            Result<watcher::Event<Pod>, watcher::Error>,
        >,
    ) {
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::Delete(pod)) => {
                    if self.is_ours(&pod) {
                        self.queue.add(ObjectRef::from_obj(&pod));
                    }
                }
                // The store holds the new list only once it is complete: sync everything then,
                // including pods that vanished while the watch was down.
                Ok(watcher::Event::InitDone) => {
                    let ours: Vec<_> = self
                        .store
                        .state()
                        .into_iter()
                        .filter(|p| self.is_ours(p))
                        .collect();
                    // Reserve the addresses running pods already report (e.g. after an agent
                    // restart) before any new pod is given one.
                    for pod in &ours {
                        let status = pod.status.as_ref();
                        let terminal = matches!(
                            status.and_then(|s| s.phase.as_deref()),
                            Some("Succeeded" | "Failed")
                        );
                        if let Some(ip) = status
                            .and_then(|s| s.pod_ip.as_deref())
                            .filter(|_| !terminal)
                        {
                            let uid = pod.uid().unwrap_or_default();
                            self.ips()
                                .assign(&ObjectRef::from_obj(pod.as_ref()), &uid, Some(ip));
                        }
                    }
                    let mut keys: HashSet<Key> = ours
                        .iter()
                        .map(|p| ObjectRef::from_obj(p.as_ref()))
                        .collect();
                    keys.extend(self.runtime.keys());
                    keys.extend(self.ips().keys());
                    debug!(pods = keys.len(), "pod list synced");
                    for key in keys {
                        self.queue.add(key);
                    }
                }
                Ok(watcher::Event::Init) | Ok(watcher::Event::InitApply(_)) => {}
                Err(e) => warn!(error = %e, "pod watch failed; retrying"),
            }
        }
    }

    /// Re-syncs the pods of a node whose fault annotation was removed.
    async fn resume_loop(self: Arc<Self>, mut resumed: mpsc::UnboundedReceiver<String>) {
        while let Some(node) = resumed.recv().await {
            for pod in self.store.state() {
                if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()) {
                    self.queue.add(ObjectRef::from_obj(pod.as_ref()));
                }
            }
        }
    }

    async fn work_loop(self: Arc<Self>) {
        loop {
            let key = self.queue.next().await;
            match self.sync(&key).await {
                Ok(Some(after)) => self.queue.add_after(key.clone(), after),
                Ok(None) => {}
                Err(e) => {
                    warn!(pod = %crate::pod_name(&key), error = format!("{e:#}"), "pod sync failed; retrying");
                    self.queue.add_after(key.clone(), ERROR_RETRY);
                }
            }
            self.queue.done(&key);
        }
    }

    /// Brings one pod to where a kubelet would have it; may ask to be called again later.
    async fn sync(&self, key: &Key) -> Result<Option<Duration>> {
        let Some(pod) = self.store.get(key) else {
            self.runtime.stop(key).await;
            self.ips().release(key);
            return Ok(None);
        };
        let pod = self.with_namespace_faults(pod);
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return Ok(None);
        };
        // A lost node's kubelet does nothing: its pods are left as they are.
        if self.nodes.mode(&node) != Some(Mode::Up) {
            return Ok(None);
        }
        let uid = pod.uid().unwrap_or_default();
        if self.runtime.uid(key).is_some_and(|running| running != uid) {
            // A new pod with the same name (e.g. a StatefulSet replica): the old one is gone.
            self.runtime.stop(key).await;
        }
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        if pod.metadata.deletion_timestamp.is_some() {
            self.runtime.stop(key).await;
            self.finalise_deletion(key, &pod, &api, uid).await?;
            return Ok(None);
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        // The kubelet never moves a pod out of a terminal phase.
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return Ok(None);
        }
        let pod_ip = self.pod_ip(key, &pod, &uid);
        let mut requeue = self.allocate_ascend_devices(&pod, &node, &api).await?;

        let plan = plan::plan_pod(&pod, &self.own);
        if plan.executes_any() {
            let queue = Arc::clone(&self.queue);
            let notify_key = key.clone();
            let notify: Notify = Arc::new(move || queue.add(notify_key.clone()));
            self.runtime
                .ensure_started(key, &pod, &plan, &pod_ip, notify);
        }
        let now = crate::now();
        let init = self.reports(key, &pod, &plan.init, true, &now, &mut requeue);
        let main = self.reports(key, &pod, &plan.main, false, &now, &mut requeue);
        for ((name, report), (_, p)) in main.iter().zip(&plan.main) {
            if let crate::status::State::Running { started_at } = &report.state {
                let start = (started_at.0.to_string(), report.restart_count);
                self.starts
                    .note(&pod, name, (&start.0, start.1), p.is_executed());
            }
        }
        // An address once reported stays; before, it waits for the sandbox.
        let addressed = pod.status.as_ref().is_some_and(|s| s.pod_ip.is_some())
            || !plan.executes_any()
            || self.runtime.sandbox_up(key);
        let shown_ip = if addressed { pod_ip.as_str() } else { "" };
        let desired = status::pod_status(&pod, &init, &main, shown_ip, &now);
        if status::differs(pod.status.as_ref(), &desired) {
            self.write_status(key, &pod, &api, &desired).await?;
        }
        Ok(requeue)
    }

    /// As the kubelet does once a deleted pod's containers are gone: removes the object for
    /// good (grace period 0, only this instance of the pod).
    async fn finalise_deletion(
        &self,
        key: &Key,
        pod: &Pod,
        api: &Api<Pod>,
        uid: String,
    ) -> Result<()> {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => info!(pod = %crate::pod_name(key), "pod deletion finalised"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e).context("finalising pod deletion"),
        }
        Ok(())
    }

    /// The pod's IP: the host's for a host-network pod, else its fake pod IP.
    fn pod_ip(&self, key: &Key, pod: &Pod, uid: &str) -> String {
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        if host_network {
            return status::HOST_IP.to_string();
        }
        let reported = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
        self.ips().assign(key, uid, reported).to_string()
    }

    /// The reports of `containers` (init or main): an executed container's from the runtime,
    /// an unpullable image's back-off, a reported container's simulation, whose next
    /// simulated restart moves `requeue` earlier.
    fn reports(
        &self,
        key: &Key,
        pod: &Pod,
        containers: &[(String, ContainerPlan)],
        is_init: bool,
        now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
        requeue: &mut Option<Duration>,
    ) -> Vec<(String, Report)> {
        containers
            .iter()
            .map(|(name, p)| {
                let report = match p {
                    ContainerPlan::Execute { .. } => self
                        .runtime
                        .report(key, name)
                        .unwrap_or_else(|| Report::waiting("ContainerCreating", None)),
                    ContainerPlan::Simulated
                        if pod_container(pod, name).is_some_and(plan::unpullable) =>
                    {
                        status::image_pull_backoff(
                            pod_container(pod, name)
                                .and_then(|c| c.image.as_deref())
                                .unwrap_or_default(),
                        )
                    }
                    ContainerPlan::Simulated => {
                        let (report, after) = status::simulated_report(pod, name, is_init, now);
                        *requeue = match (*requeue, after) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        report
                    }
                };
                (name.clone(), report)
            })
            .collect()
    }

    async fn write_status(
        &self,
        key: &Key,
        pod: &Pod,
        api: &Api<Pod>,
        desired: &k8s_openapi::api::core::v1::PodStatus,
    ) -> Result<()> {
        let patch = status::status_patch(pod.metadata.uid.as_deref(), desired);
        match api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        {
            Ok(_) => {
                debug!(pod = %crate::pod_name(key), phase = ?desired.phase, "pod status updated")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).context("updating pod status"),
        }
        Ok(())
    }
}

impl PodAgent {
    /// As the Ascend device plugin does when it allocates devices to a pod: writes the
    /// allocation annotation on a pod that requests Ascend devices and has none yet.
    /// Returns when to look again if no devices were free.
    async fn allocate_ascend_devices(
        &self,
        pod: &Pod,
        node: &str,
        api: &Api<Pod>,
    ) -> Result<Option<Duration>> {
        let Some((resource, annotation, count)) = crate::ascend::request(pod) else {
            return Ok(None);
        };
        if pod.annotations().contains_key(annotation) || crate::ascend::finished(pod) {
            return Ok(None);
        }
        let Some((capacity, ordinal)) = self.nodes.device_slots(node, resource) else {
            return Ok(None);
        };
        let uid = pod.uid().unwrap_or_default();
        let pods = self.store.state();
        // A finished pod's devices are free again, as the kubelet frees them.
        let holding = pods
            .iter()
            .filter(|p| !crate::ascend::finished(p))
            .filter_map(|p| p.uid())
            .collect();
        self.ascend.retain(&holding);
        let held = crate::ascend::held_on_node(&pods, node, &uid, annotation);
        let Some(devices) = self.ascend.allocate(node, &uid, count, capacity, held) else {
            warn!(pod = %pod.name_any(), node, count, "no free Ascend devices to allocate yet");
            return Ok(Some(ERROR_RETRY));
        };
        let value = serde_json::to_string(&crate::ascend::allocation(
            &pod.name_any(),
            node,
            ordinal,
            &devices,
        ))?;
        let patch = serde_json::json!({"metadata": {"annotations": {annotation: value}}});
        match api
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => {
                info!(pod = %pod.name_any(), node, ?devices, "Ascend devices allocated");
                Ok(None)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e).context("writing the Ascend allocation annotation"),
        }
    }
}

/// The container (init or main) of `pod` named `name`.
fn pod_container<'a>(
    pod: &'a Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn ips_are_unique_stable_and_reused_after_release() {
        let mut pool = IpPool::default();
        let a = pool.assign(&key("a"), "1", None);
        let b = pool.assign(&key("b"), "2", None);
        assert_ne!(a, b);
        assert_eq!(pool.assign(&key("a"), "1", None), a);
        // An IP the pod already reports (e.g. after an agent restart) is kept and reserved.
        let c = pool.assign(&key("c"), "3", Some("10.244.0.3"));
        assert_eq!(c, Ipv4Addr::new(10, 244, 0, 3));
        let d = pool.assign(&key("d"), "4", None);
        assert!(![a, b, c].contains(&d));
        // A new pod instance under the same name gets a fresh address.
        assert_ne!(pool.assign(&key("a"), "5", None), a);
        pool.release(&key("b"));
        assert!(!pool.used.contains(&b));
    }

    #[test]
    fn ip_allocation_skips_zero_and_broadcast_octets() {
        let mut pool = IpPool::default();
        for i in 0..600 {
            let ip = pool.assign(&key(&format!("p{i}")), "u", None);
            let last = ip.octets()[3];
            assert!(last != 0 && last != 255, "{ip}");
        }
        assert_eq!(pool.used.len(), 600);
    }
}
