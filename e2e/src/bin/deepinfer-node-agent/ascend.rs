//! SIMULATED Ascend device plugin: when a pod that requests `huawei.com/Ascend910` or
//! `huawei.com/npu` is placed on one of the agent's nodes, the agent gives it the lowest free
//! device ids of that node and writes the allocation annotation MindCluster's Ascend Device
//! Plugin writes (`ascend.kubectl.kubernetes.io/ascend-910-configuration`, or
//! `…/ascend-npu-configuration` for `huawei.com/npu`), from which an operator builds the HCCL
//! rank table. Every simulated node has the same address, so `server_id` is the node's name;
//! device IPs are made up as `192.168.<100 + device id>.<node ordinal + 1>`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

/// Device resources the plugin serves and the annotation it writes for each.
pub const RESOURCES: [(&str, &str); 2] = [
    (
        "huawei.com/Ascend910",
        "ascend.kubectl.kubernetes.io/ascend-910-configuration",
    ),
    (
        "huawei.com/npu",
        "ascend.kubectl.kubernetes.io/ascend-npu-configuration",
    ),
];

/// The annotation's value.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub pod_name: String,
    pub server_id: String,
    pub devices: Vec<Device>,
}

/// One allocated device.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub device_id: String,
    pub device_ip: String,
}

/// What a pod asks the plugin for: the resource, its annotation and the device count (the sum
/// of its containers' limits); `None` for pods that request no Ascend devices.
pub fn request(pod: &Pod) -> Option<(&'static str, &'static str, u32)> {
    let spec = pod.spec.as_ref()?;
    RESOURCES.iter().find_map(|(resource, annotation)| {
        let count: u32 = spec
            .containers
            .iter()
            .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(*resource))
            .filter_map(|q| q.0.parse::<u32>().ok())
            .sum();
        (count > 0).then_some((*resource, *annotation, count))
    })
}

/// The device ids an allocation annotation names.
pub fn devices_of(raw: &str) -> Vec<u32> {
    serde_json::from_str::<Allocation>(raw)
        .map(|a| {
            a.devices
                .iter()
                .filter_map(|d| d.device_id.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The lowest `count` device ids below `capacity` not in `in_use`; `None` when too few are free.
pub fn lowest_free(count: u32, capacity: u32, in_use: &BTreeSet<u32>) -> Option<Vec<u32>> {
    let free: Vec<u32> = (0..capacity)
        .filter(|d| !in_use.contains(d))
        .take(count as usize)
        .collect();
    (free.len() == count as usize).then_some(free)
}

/// The annotation value for `devices` of node `node` (its ordinal among the agent's nodes).
pub fn allocation(pod_name: &str, node: &str, ordinal: usize, devices: &[u32]) -> Allocation {
    Allocation {
        pod_name: pod_name.to_string(),
        server_id: node.to_string(),
        devices: devices
            .iter()
            .map(|d| Device {
                device_id: d.to_string(),
                device_ip: format!("192.168.{}.{}", 100 + d, ordinal % 254 + 1),
            })
            .collect(),
    }
}

/// Allocations made but perhaps not yet seen in the agent's pod cache, by pod uid: so two pods
/// placed on one node at the same moment never get the same devices.
#[derive(Default)]
pub struct Allocator {
    recent: Mutex<HashMap<String, (String, Vec<u32>)>>,
}

impl Allocator {
    /// Allocates `count` devices of `capacity` on `node` for the pod `uid`, given the devices
    /// the other live pods on the node hold (from their annotations); remembers the result.
    pub fn allocate(
        &self,
        node: &str,
        uid: &str,
        count: u32,
        capacity: u32,
        held_elsewhere: BTreeSet<u32>,
    ) -> Option<Vec<u32>> {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let mut in_use = held_elsewhere;
        for (other, (n, devices)) in recent.iter() {
            if n == node && other != uid {
                in_use.extend(devices);
            }
        }
        let devices = lowest_free(count, capacity, &in_use)?;
        recent.insert(uid.to_string(), (node.to_string(), devices.clone()));
        Some(devices)
    }

    /// Forgets the pods whose uids are not in `live`.
    pub fn retain(&self, live: &BTreeSet<String>) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|uid, _| live.contains(uid));
    }
}

/// Whether the pod has finished (its devices are free again).
pub fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Devices held by the live pods on `node` other than `except` (by their annotations).
pub fn held_on_node(
    pods: &[std::sync::Arc<Pod>],
    node: &str,
    except: &str,
    annotation: &str,
) -> BTreeSet<u32> {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| p.uid().as_deref() != Some(except))
        .filter(|p| !finished(p))
        .filter_map(|p| p.annotations().get(annotation).map(|raw| devices_of(raw)))
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_the_lowest_free_ids_and_never_handed_out_twice() {
        let a = Allocator::default();
        let first = a.allocate("ascend-0", "u1", 16, 16, BTreeSet::new());
        assert_eq!(first, Some((0..16).collect()));
        assert_eq!(
            a.allocate("ascend-0", "u2", 1, 16, BTreeSet::new()),
            None,
            "node full"
        );
        assert_eq!(
            a.allocate("ascend-1", "u2", 2, 16, BTreeSet::from([0])),
            Some(vec![1, 2]),
            "devices held by pods already annotated are skipped"
        );
        a.retain(&BTreeSet::from(["u2".to_string()]));
        assert_eq!(
            a.allocate("ascend-0", "u3", 4, 16, BTreeSet::new()),
            Some(vec![0, 1, 2, 3])
        );
        assert_eq!(
            a.allocate("ascend-0", "u3", 4, 16, BTreeSet::new()),
            Some(vec![0, 1, 2, 3]),
            "the same pod asking again gets its devices again"
        );
    }

    #[test]
    fn the_annotation_round_trips_and_names_node_and_device_ips() {
        let value = allocation("p-0", "ascend-1", 1, &[0, 15]);
        let raw = serde_json::to_string(&value).unwrap();
        assert_eq!(
            raw,
            r#"{"pod_name":"p-0","server_id":"ascend-1","devices":[{"device_id":"0","device_ip":"192.168.100.2"},{"device_id":"15","device_ip":"192.168.115.2"}]}"#
        );
        assert_eq!(devices_of(&raw), vec![0, 15]);
        assert!(devices_of("not json").is_empty());
    }

    #[test]
    fn only_pods_requesting_ascend_devices_ask_the_plugin() {
        let pod = |resource: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {resource: "16"}}}]}
            }))
            .unwrap()
        };
        assert_eq!(
            request(&pod("huawei.com/Ascend910")),
            Some((RESOURCES[0].0, RESOURCES[0].1, 16))
        );
        assert_eq!(
            request(&pod("huawei.com/npu")),
            Some((RESOURCES[1].0, RESOURCES[1].1, 16))
        );
        assert_eq!(request(&pod("nvidia.com/gpu")), None);
    }
}
