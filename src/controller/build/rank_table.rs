//! Ascend HCCL rank tables: one ConfigMap per serving group, `rings-config-<group service>`,
//! holding `hccl.json` as MindCluster's Ascend Operator writes it. It is mounted at
//! [`RANK_TABLE_DIR`] in every engine container of the group, with `RANK_TABLE_FILE` naming the
//! file. It says `"status": "initializing"` until every rank of the group is bound and carries
//! the Ascend device plugin's allocation annotation, then lists each rank's server and devices
//! with `"status": "completed"`. Engines wait for `completed` before they start collective
//! communication (docs/engine-contract.md); a ConfigMap volume is updated in place, so no pod
//! restarts for it. Rank ids follow the pod's rank (`rank × devicesPerPod + device position`),
//! so a recreated pod takes the rank ids of the one it replaces.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapVolumeSource, Pod, Volume};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::api::{labels, Component, DeepInferDeploymentSpec, RoleSpec};
use crate::controller::validated::ValidatedDeployment;

use super::run::RunGroup;
use super::{group_selector, group_service_name, group_shape, owned_meta, stamp, GroupShape};

/// Where the rank table is mounted (MindCluster's path).
pub const RANK_TABLE_DIR: &str = "/user/serverid/devindex/config";
/// Key of the rank table in its ConfigMap, and the file name under [`RANK_TABLE_DIR`].
pub const RANK_TABLE_KEY: &str = "hccl.json";
/// The device plugin's allocation annotation for `huawei.com/Ascend910`.
pub const ASCEND_910_ANNOTATION: &str = "ascend.kubectl.kubernetes.io/ascend-910-configuration";
/// The device plugin's allocation annotation for `huawei.com/npu`.
pub const ASCEND_NPU_ANNOTATION: &str = "ascend.kubectl.kubernetes.io/ascend-npu-configuration";
/// Rank table status before every rank is known.
pub const INITIALIZING: &str = "initializing";
/// Rank table status once every rank is listed.
pub const COMPLETED: &str = "completed";
/// Format version of the rank table written.
const VERSION: &str = "1.0";

/// The allocation annotation the device plugin writes for `device_resource`.
pub fn allocation_annotation(device_resource: &str) -> &'static str {
    if device_resource == "huawei.com/npu" {
        ASCEND_NPU_ANNOTATION
    } else {
        ASCEND_910_ANNOTATION
    }
}

/// The device plugin's allocation annotation: the server and the devices given to the pod.
/// Other fields the plugin writes are ignored.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The server (node) the devices are on.
    pub server_id: String,
    /// The devices, as the plugin lists them.
    pub devices: Vec<AllocatedDevice>,
}

/// One allocated NPU.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// Physical device id on the server.
    pub device_id: String,
    /// The device's IP (HCCS/RoCE).
    pub device_ip: String,
}

/// `hccl.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RankTable {
    /// `initializing` or `completed`.
    pub status: String,
    /// One entry per rank's pod, rank order; empty while initializing.
    pub server_list: Vec<RankTableServer>,
    /// Servers listed, as a string (the format's convention).
    pub server_count: String,
    /// Format version.
    pub version: String,
}

/// One pod's server in the rank table.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RankTableServer {
    /// The server id from the allocation annotation.
    pub server_id: String,
    /// The pod's IP.
    pub container_ip: String,
    /// Its devices with their global rank ids.
    pub device: Vec<RankTableDevice>,
}

/// One device of the rank table.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RankTableDevice {
    /// Physical device id.
    pub device_id: String,
    /// Device IP.
    pub device_ip: String,
    /// Global rank of the device in the group.
    pub rank_id: String,
}

impl RankTable {
    fn initializing() -> Self {
        Self {
            status: INITIALIZING.into(),
            server_list: Vec::new(),
            server_count: "0".into(),
            version: VERSION.into(),
        }
    }
}

/// A rank's allocation (devices by id) and pod IP, or why it cannot be listed yet.
fn allocation_of(
    pod: &Pod,
    annotation: &str,
    devices: i32,
) -> Result<(Allocation, String), String> {
    let name = pod.name_any();
    if pod.metadata.deletion_timestamp.is_some() {
        return Err(format!("pod {name} is being deleted"));
    }
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| format!("pod {name} has no IP yet"))?;
    let allocation = allocation(pod, annotation, devices)?;
    Ok((allocation, ip))
}

/// The device plugin's allocation on `pod` (`annotation`), its devices in device-id order, or
/// why it cannot be read: absent, not an allocation, or not `devices` devices.
pub fn allocation(pod: &Pod, annotation: &str, devices: i32) -> Result<Allocation, String> {
    let name = pod.name_any();
    let raw = pod
        .annotations()
        .get(annotation)
        .ok_or_else(|| format!("pod {name} has no {annotation} annotation yet"))?;
    let mut allocation: Allocation = serde_json::from_str(raw)
        .map_err(|e| format!("pod {name}: annotation {annotation} is not an allocation: {e}"))?;
    if allocation.devices.len() != usize::try_from(devices).unwrap_or(0) {
        return Err(format!(
            "pod {name}: annotation {annotation} lists {} devices, the pod requests {devices}",
            allocation.devices.len()
        ));
    }
    // Device order is the numeric device id, so rank ids do not depend on the plugin's order.
    allocation.devices.sort_by_key(|d| {
        (
            d.device_id.parse::<u64>().unwrap_or(u64::MAX),
            d.device_id.clone(),
        )
    });
    Ok(allocation)
}

/// The rank table of one group from its pods: `completed` when every rank `0..shape.pods` has a
/// live, addressed pod with a valid allocation, else `initializing` with the reason.
pub fn rank_table(
    pods: &[&Pod],
    shape: &GroupShape,
    annotation: &str,
) -> (RankTable, Option<String>) {
    let mut servers = Vec::new();
    for rank in 0..shape.pods {
        let pod = pods.iter().find(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.labels().get(labels::RANK).map(String::as_str)
                    == Some(rank.to_string().as_str())
        });
        let Some(pod) = pod else {
            return (
                RankTable::initializing(),
                Some(format!("rank {rank} has no pod")),
            );
        };
        let (allocation, ip) = match allocation_of(pod, annotation, shape.devices_per_pod) {
            Ok(found) => found,
            Err(why) => return (RankTable::initializing(), Some(why)),
        };
        let first = i64::from(rank) * i64::from(shape.devices_per_pod);
        servers.push(RankTableServer {
            server_id: allocation.server_id,
            container_ip: ip,
            device: allocation
                .devices
                .into_iter()
                .zip(first..)
                .map(|(d, rank_id)| RankTableDevice {
                    device_id: d.device_id,
                    device_ip: d.device_ip,
                    rank_id: rank_id.to_string(),
                })
                .collect(),
        });
    }
    let table = RankTable {
        status: COMPLETED.into(),
        server_count: servers.len().to_string(),
        server_list: servers,
        version: VERSION.into(),
    };
    (table, None)
}

/// Name of a group's rank table ConfigMap: `rings-config-<group service>`.
pub fn rank_table_name(group_service: &str) -> String {
    format!("rings-config-{group_service}")
}

/// The rank table ConfigMap of one serving group, given the group's current pods.
pub fn rank_table_configmap(
    did: &ValidatedDeployment,
    role: &RoleSpec,
    revision: &str,
    group: i32,
    pods: &[&Pod],
) -> ConfigMap {
    let service = group_service_name(&did.name_any(), &role.name, revision, group);
    let extra = group_selector(&did.name_any(), &role.name, revision, group);
    table_configmap(did, rank_table_name(&service), extra, role, pods)
}

/// The rank table ConfigMap of one group of an acceptance run (Ascend only), given the group's
/// current pods: `rings-config-<run group>`, mounted as a serving group's is.
pub fn acceptance_rank_table(
    did: &ValidatedDeployment,
    group: &RunGroup<'_>,
    revision: &str,
    pods: &[&Pod],
) -> Option<ConfigMap> {
    uses_rank_tables(&did.spec).then(|| {
        let extra = super::run::acceptance_labels(group, revision);
        table_configmap(did, rank_table_name(&group.name), extra, group.role, pods)
    })
}

/// Whether a rank table ConfigMap of `did` belongs to an acceptance run (kept by the acceptance
/// gate, never by the serving groups).
pub fn is_acceptance_rank_table(did: &str, configmap: &ConfigMap) -> bool {
    configmap
        .name_any()
        .starts_with(&rank_table_name(&format!("{did}-accept-")))
}

fn table_configmap(
    did: &ValidatedDeployment,
    name: String,
    mut extra: BTreeMap<String, String>,
    role: &RoleSpec,
    pods: &[&Pod],
) -> ConfigMap {
    let shape = group_shape(&did.spec, role);
    let annotation = allocation_annotation(did.spec.accelerator.device_resource());
    let (table, _) = rank_table(pods, &shape, annotation);
    extra.extend([Component::RankTable.label()]);
    stamp(ConfigMap {
        metadata: owned_meta(did, name, extra),
        data: Some(BTreeMap::from([(
            RANK_TABLE_KEY.to_string(),
            serde_json::to_string_pretty(&table).unwrap_or_default(),
        )])),
        ..ConfigMap::default()
    })
}

/// Whether groups of this deployment get a rank table (Ascend).
pub fn uses_rank_tables(spec: &DeepInferDeploymentSpec) -> bool {
    spec.accelerator.kind == crate::api::AcceleratorType::Ascend
}

/// The rank table ConfigMaps of the serving groups `groups` (role, revision, index), each from
/// the worker pods of that group among `workers`; `specs` maps each revision to the resource it
/// was built from. Empty for NVIDIA deployments.
pub fn rank_tables(
    specs: &BTreeMap<String, ValidatedDeployment>,
    groups: &[(String, String, i32)],
    workers: &[Pod],
) -> Vec<ConfigMap> {
    let mut out = Vec::new();
    for (role_name, revision, index) in groups {
        let Some(at) = specs.get(revision) else {
            continue;
        };
        let Some(role) = at.spec.roles.iter().find(|r| &r.name == role_name) else {
            continue;
        };
        if !uses_rank_tables(&at.spec) {
            continue;
        }
        let selector = group_selector(&at.name_any(), role_name, revision, *index);
        let pods: Vec<&Pod> = workers
            .iter()
            .filter(|p| selector.iter().all(|(k, v)| p.labels().get(k) == Some(v)))
            .collect();
        out.push(rank_table_configmap(at, role, revision, *index, &pods));
    }
    out
}

/// The rank table's volume for a group's pods.
pub(super) fn rank_table_volume(configmap: &str) -> Volume {
    Volume {
        name: "rank-table".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: configmap.to_string(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(rank: i32, ip: Option<&str>, allocation: Option<serde_json::Value>) -> Pod {
        let mut annotations = BTreeMap::new();
        if let Some(a) = allocation {
            annotations.insert(ASCEND_910_ANNOTATION.to_string(), a.to_string());
        }
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("p-{rank}")),
                labels: Some(BTreeMap::from([(
                    labels::RANK.to_string(),
                    rank.to_string(),
                )])),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: None,
            status: ip.map(|ip| k8s_openapi::api::core::v1::PodStatus {
                pod_ip: Some(ip.into()),
                ..Default::default()
            }),
        }
    }

    fn devices(server: &str, ids: &[u32]) -> serde_json::Value {
        serde_json::json!({
            "pod_name": "ignored",
            "server_id": server,
            "devices": ids.iter().map(|i| serde_json::json!({
                "device_id": i.to_string(), "device_ip": format!("192.168.{}.{server}", 100 + i)
            })).collect::<Vec<_>>()
        })
    }

    const SHAPE: GroupShape = GroupShape {
        devices_per_pod: 2,
        product: None,
        pods: 2,
        world_size: 4,
    };

    #[test]
    fn a_group_whose_ranks_are_all_allocated_gets_a_completed_table_in_rank_order() {
        // Rank 1 first and its devices listed out of order: the table is in rank order,
        // devices by id, rank ids counted from the pod's rank.
        let r1 = pod(1, Some("10.244.0.9"), Some(devices("2", &[7, 3])));
        let r0 = pod(0, Some("10.244.0.8"), Some(devices("1", &[0, 1])));
        let (table, why) = rank_table(&[&r1, &r0], &SHAPE, ASCEND_910_ANNOTATION);
        assert_eq!(why, None);
        let json = serde_json::to_value(&table).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "status": "completed",
                "server_list": [
                    {"server_id": "1", "container_ip": "10.244.0.8", "device": [
                        {"device_id": "0", "device_ip": "192.168.100.1", "rank_id": "0"},
                        {"device_id": "1", "device_ip": "192.168.101.1", "rank_id": "1"}]},
                    {"server_id": "2", "container_ip": "10.244.0.9", "device": [
                        {"device_id": "3", "device_ip": "192.168.103.2", "rank_id": "2"},
                        {"device_id": "7", "device_ip": "192.168.107.2", "rank_id": "3"}]}
                ],
                "server_count": "2",
                "version": "1.0"
            })
        );
    }

    #[test]
    fn a_recreated_rank_keeps_its_rank_ids_on_other_devices() {
        let r0 = pod(0, Some("10.244.0.8"), Some(devices("1", &[0, 1])));
        let moved = pod(1, Some("10.244.0.30"), Some(devices("3", &[4, 5])));
        let (table, _) = rank_table(&[&r0, &moved], &SHAPE, ASCEND_910_ANNOTATION);
        let ids: Vec<(&str, &str)> = table.server_list[1]
            .device
            .iter()
            .map(|d| (d.device_id.as_str(), d.rank_id.as_str()))
            .collect();
        assert_eq!(ids, [("4", "2"), ("5", "3")]);
    }

    #[test]
    fn the_table_stays_initializing_until_every_rank_is_known_and_says_why() {
        let r0 = pod(0, Some("10.244.0.8"), Some(devices("1", &[0, 1])));
        let cases = [
            (None, "rank 1 has no pod"),
            (
                Some(pod(1, None, Some(devices("2", &[0, 1])))),
                "pod p-1 has no IP yet",
            ),
            (
                Some(pod(1, Some("10.244.0.9"), None)),
                "pod p-1 has no ascend.kubectl.kubernetes.io/ascend-910-configuration annotation yet",
            ),
            (
                Some(pod(1, Some("10.244.0.9"), Some(devices("2", &[0])))),
                "pod p-1: annotation ascend.kubectl.kubernetes.io/ascend-910-configuration lists 1 devices, the pod requests 2",
            ),
            (
                Some(pod(1, Some("10.244.0.9"), Some(serde_json::json!("garbage")))),
                "pod p-1: annotation ascend.kubectl.kubernetes.io/ascend-910-configuration is not an allocation",
            ),
        ];
        for (second, expected) in cases {
            let pods: Vec<&Pod> = std::iter::once(&r0).chain(second.as_ref()).collect();
            let (table, why) = rank_table(&pods, &SHAPE, ASCEND_910_ANNOTATION);
            assert_eq!(table, RankTable::initializing(), "{expected}");
            let why = why.expect("a reason");
            assert!(why.starts_with(expected), "{why}");
        }
    }
}
