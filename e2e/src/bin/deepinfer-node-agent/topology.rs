//! The topology file: which simulated nodes exist, with which capacity, labels and taints.
//! The format is documented at the top of `e2e/bed/topology.yaml`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    defaults: Defaults,
    pools: Vec<Pool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    #[serde(default)]
    capacity: BTreeMap<String, String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Pool {
    name: String,
    #[serde(default = "one")]
    count: u32,
    #[serde(default)]
    first_index: u32,
    #[serde(default)]
    capacity: BTreeMap<String, String>,
    allocatable: Option<BTreeMap<String, String>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<Taint>,
    dra: Option<DraDevices>,
    domain: Option<Domain>,
}

/// Scale-up domains of a pool: consecutive runs of `size` nodes share the value
/// `<pool name>-d<k>` of label `label` (NVLink cliques, Ascend super-pods).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Domain {
    label: String,
    size: u32,
}

fn one() -> u32 {
    1
}

/// A node taint as written in the topology file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: String,
}

/// Devices a node offers through Dynamic Resource Allocation, as a simulated DRA driver
/// publishes them in the node's ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DraDevices {
    /// Driver name, e.g. `gpu.nvidia.com`.
    pub driver: String,
    /// Number of devices, named `<devicePrefix>-<index>`.
    pub devices: u32,
    /// Prefix of the device names (default `device`).
    #[serde(default = "device_prefix")]
    pub device_prefix: String,
    /// String attributes every device carries (e.g. the NVLink clique), beside `index` and `uuid`.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Variable naming the prepared devices' ids in executed containers.
    pub visible_devices_env: String,
    /// Devices standing for whole scale-up domains (a ComputeDomain's channels), if any.
    pub domain: Option<DomainDevices>,
}

/// Per scale-up domain (the nodes sharing a value of `label`), one ResourceSlice of `driver`
/// whose node selector covers that domain's nodes, with one `channel-<i>` device per node: a
/// claim on one can only be satisfied on nodes of that domain.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DomainDevices {
    /// Driver name, e.g. `compute-domain.nvidia.com`.
    pub driver: String,
    /// Node label naming the domain, e.g. `nvidia.com/gpu.clique`.
    pub label: String,
}

fn device_prefix() -> String {
    "device".into()
}

/// One simulated node, fully resolved from its pool and the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub capacity: BTreeMap<String, String>,
    pub allocatable: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub dra: Option<DraDevices>,
}

/// Reads and expands a topology file.
pub fn load(path: &Path) -> Result<Vec<NodeSpec>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading topology {}", path.display()))?;
    parse(&text).with_context(|| format!("parsing topology {}", path.display()))
}

/// Expands the pools of a topology document into nodes; node names must be unique.
pub fn parse(text: &str) -> Result<Vec<NodeSpec>> {
    let file: File = serde_yaml::from_str(text)?;
    if let Some(pool) = file
        .pools
        .iter()
        .find(|p| p.domain.as_ref().is_some_and(|d| d.size == 0))
    {
        bail!("pool {}: domain.size must be at least 1", pool.name);
    }
    let mut names: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut nodes: Vec<NodeSpec> = Vec::new();
    for pool in &file.pools {
        for index in pool.first_index..pool.first_index + pool.count {
            let name = format!("{}-{index}", pool.name);
            if !names.insert(name.clone()) {
                bail!("node {name} is defined twice");
            }
            let mut capacity = file.defaults.capacity.clone();
            capacity.extend(pool.capacity.clone());
            let allocatable = pool.allocatable.clone().unwrap_or_else(|| capacity.clone());
            let mut labels = BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), name.clone()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                ("sim.deepinfer.io/simulated".to_string(), "true".to_string()),
            ]);
            labels.extend(file.defaults.labels.clone());
            labels.extend(pool.labels.clone());
            if let Some(domain) = &pool.domain {
                let k = (index - pool.first_index) / domain.size;
                labels.insert(domain.label.clone(), format!("{}-d{k}", pool.name));
            }
            nodes.push(NodeSpec {
                name,
                capacity,
                allocatable,
                labels,
                taints: pool.taints.clone(),
                dra: pool.dra.clone(),
            });
        }
    }
    if nodes.is_empty() {
        bail!("the topology defines no nodes");
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_topology_has_the_documented_nodes() {
        let text = include_str!("../../../bed/topology.yaml");
        let nodes = parse(text).unwrap();
        let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "nvidia-0",
                "nvidia-1",
                "nvidia-2",
                "nvidia-3",
                "nvidia-dra-0",
                "nvidia-dra-1",
                "ascend-0",
                "ascend-1",
                "ascend-npu-0",
                "ascend-npu-1",
                "cpu-0",
                "nvidia-tainted-0"
            ]
        );
        let clique = |i: usize| nodes[i].labels["nvidia.com/gpu.clique"].as_str();
        assert_eq!(
            [
                clique(0),
                clique(1),
                clique(2),
                clique(3),
                clique(4),
                clique(5)
            ],
            ["clique-a", "clique-a", "clique-b", "clique-b", "clique-c", "clique-c"]
        );
        assert_eq!(nodes[0].allocatable["nvidia.com/gpu"], "8");
        // The DRA clique offers its GPUs only as devices of the simulated driver.
        for dra in &nodes[4..6] {
            assert!(!dra.capacity.contains_key("nvidia.com/gpu"));
            let devices = dra.dra.as_ref().expect("DRA devices");
            assert_eq!(
                (devices.driver.as_str(), devices.devices),
                ("gpu.nvidia.com", 8)
            );
            assert_eq!(devices.attributes["cliqueID"], "clique-c");
            let domain = devices.domain.as_ref().expect("the clique's channels");
            assert_eq!(
                (domain.driver.as_str(), domain.label.as_str()),
                ("compute-domain.nvidia.com", "nvidia.com/gpu.clique")
            );
        }
        assert!(nodes[0].dra.is_none());
        assert_eq!(nodes[6].capacity["huawei.com/Ascend910"], "16");
        assert_eq!(nodes[7].labels["huawei.com/super-pod-id"], "sp-0");
        // The SuperPoD's device plugin advertises huawei.com/npu only.
        for npu in &nodes[8..10] {
            assert_eq!(npu.capacity["huawei.com/npu"], "16");
            assert!(!npu.capacity.contains_key("huawei.com/Ascend910"));
            assert_eq!(npu.labels["huawei.com/super-pod-id"], "sp-1");
        }
        assert_eq!(nodes[10].capacity["pods"], "500");
        assert!(!nodes[10].capacity.contains_key("nvidia.com/gpu"));
        assert_eq!(nodes[10].labels["kubernetes.io/hostname"], "cpu-0");
        // The tainted node of the pod-settings test: no other test's pods tolerate its taint.
        let tainted = &nodes[11];
        assert_eq!(tainted.capacity["nvidia.com/gpu"], "4");
        assert_eq!(tainted.labels["sim.deepinfer.io/pool"], "tainted");
        assert!(!tainted.labels.contains_key("nvidia.com/gpu.clique"));
        assert_eq!(
            tainted.taints,
            [Taint {
                key: "deepinfer.io/test-dedicated".into(),
                value: Some("tainted".into()),
                effect: "NoSchedule".into()
            }]
        );
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let text = "pools: [{name: a, count: 2}, {name: a, firstIndex: 1}]";
        assert!(parse(text).is_err());
    }

    #[test]
    fn domains_group_consecutive_nodes_of_a_pool() {
        let text = "pools: [{name: g, count: 5, firstIndex: 10, domain: {label: clique, size: 2}}]";
        let nodes = parse(text).unwrap();
        let domains: Vec<_> = nodes.iter().map(|n| n.labels["clique"].as_str()).collect();
        assert_eq!(domains, ["g-d0", "g-d0", "g-d1", "g-d1", "g-d2"]);
        assert_eq!(nodes[4].name, "g-14");
        let empty = "pools: [{name: g, domain: {label: clique, size: 0}}]";
        assert!(parse(empty).is_err());
    }

    #[test]
    fn pool_values_override_defaults() {
        let text = "defaults: {capacity: {cpu: '4', pods: '10'}, labels: {x: d}}\n\
                    pools: [{name: n, capacity: {cpu: '8'}, allocatable: {cpu: '7'}, labels: {x: p}}]";
        let nodes = parse(text).unwrap();
        assert_eq!(nodes[0].capacity["cpu"], "8");
        assert_eq!(nodes[0].capacity["pods"], "10");
        assert_eq!(nodes[0].allocatable["cpu"], "7");
        assert_eq!(nodes[0].labels["x"], "p");
    }
}
