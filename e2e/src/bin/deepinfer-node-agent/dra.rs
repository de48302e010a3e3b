//! The simulated DRA driver: it publishes one ResourceSlice per node whose topology pool has
//! `dra` devices, and, for an executed pod, "prepares" the devices the scheduler allocated to
//! its claims: it records them in each claim's `status.devices` (as a driver does) and hands
//! their ids to the containers that use the claim, in the pool's visible-devices variable.
//! No device exists; the ids are the simulated devices' `uuid` attributes.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod};
use k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, Device, DeviceAttribute, ResourceClaim, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::topology::{DraDevices, NodeSpec};
use crate::FIELD_MANAGER;

/// The id a simulated device is known by: its `uuid` attribute and what containers see.
pub fn device_id(pool: &str, device: &str) -> String {
    format!("SIM-{pool}-{device}")
}

/// Name of a node's ResourceSlice for one driver.
fn slice_name(node: &str, driver: &str) -> String {
    format!("{node}-{}", driver.replace('.', "-"))
}

/// The ResourceSlice of a node with DRA devices: one pool named after the node, devices
/// `<prefix>-<i>` with `index`, `uuid` and the pool's attributes; owned by the Node, so it goes
/// with it.
pub fn resource_slice(node: &NodeSpec, node_uid: Option<&str>) -> Option<ResourceSlice> {
    let dra = node.dra.as_ref()?;
    let string = |s: String| DeviceAttribute {
        string: Some(s),
        ..DeviceAttribute::default()
    };
    let devices = (0..dra.devices)
        .map(|index| {
            let name = format!("{}-{index}", dra.device_prefix);
            let mut attributes: BTreeMap<String, DeviceAttribute> = dra
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), string(v.clone())))
                .collect();
            attributes.insert(
                "index".into(),
                DeviceAttribute {
                    int: Some(i64::from(index)),
                    ..DeviceAttribute::default()
                },
            );
            attributes.insert("uuid".into(), string(device_id(&node.name, &name)));
            Device {
                name,
                attributes: Some(attributes),
                ..Device::default()
            }
        })
        .collect();
    Some(ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(&node.name, &dra.driver)),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.name.clone(),
                    uid: uid.to_string(),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: ResourceSliceSpec {
            driver: dra.driver.clone(),
            node_name: Some(node.name.clone()),
            pool: ResourcePool {
                name: node.name.clone(),
                generation: 1,
                resource_slice_count: 1,
            },
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        },
    })
}

/// One ResourceSlice per scale-up domain of the nodes whose DRA devices name a `domain`: its
/// node selector covers the domain's nodes, with one `channel-<i>` device per node.
pub fn domain_slices(nodes: &[NodeSpec]) -> Vec<ResourceSlice> {
    let mut domains: BTreeMap<(String, String, String), u32> = BTreeMap::new();
    for node in nodes {
        let Some(domain) = node.dra.as_ref().and_then(|d| d.domain.as_ref()) else {
            continue;
        };
        let Some(value) = node.labels.get(&domain.label) else {
            continue;
        };
        *domains
            .entry((domain.driver.clone(), domain.label.clone(), value.clone()))
            .or_default() += 1;
    }
    domains
        .into_iter()
        .map(|((driver, label, value), count)| ResourceSlice {
            metadata: ObjectMeta {
                name: Some(format!("{}-{value}", driver.replace('.', "-"))),
                ..ObjectMeta::default()
            },
            spec: ResourceSliceSpec {
                driver,
                pool: ResourcePool {
                    name: value.clone(),
                    generation: 1,
                    resource_slice_count: 1,
                },
                node_selector: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: label,
                            operator: "In".into(),
                            values: Some(vec![value]),
                        }]),
                        match_fields: None,
                    }],
                }),
                devices: Some(
                    (0..count)
                        .map(|i| Device {
                            name: format!("channel-{i}"),
                            ..Device::default()
                        })
                        .collect(),
                ),
                ..ResourceSliceSpec::default()
            },
        })
        .collect()
}

/// Publishes the domain slices of [`domain_slices`].
pub async fn publish_domains(client: &Client, nodes: &[NodeSpec]) -> Result<()> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    for slice in domain_slices(nodes) {
        api.patch(
            &slice.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&slice),
        )
        .await
        .with_context(|| format!("publishing domain ResourceSlice {}", slice.name_any()))?;
    }
    Ok(())
}

/// Publishes (server-side applies) the node's ResourceSlice, if it has DRA devices.
pub async fn publish(client: &Client, node: &NodeSpec, node_uid: Option<&str>) -> Result<()> {
    let Some(slice) = resource_slice(node, node_uid) else {
        return Ok(());
    };
    let api: Api<ResourceSlice> = Api::all(client.clone());
    api.patch(
        &slice.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&slice),
    )
    .await
    .with_context(|| format!("publishing ResourceSlice of node {}", node.name))?;
    Ok(())
}

/// Visible-devices variable per driver, from the topology.
pub fn visible_devices_env(nodes: &[NodeSpec]) -> BTreeMap<String, String> {
    nodes
        .iter()
        .filter_map(|n| n.dra.as_ref())
        .map(|d: &DraDevices| (d.driver.clone(), d.visible_devices_env.clone()))
        .collect()
}

/// What preparing a pod's claims gave: per container, the variables naming its devices.
pub type Prepared = BTreeMap<String, Vec<(String, String)>>;

/// Prepares the pod's allocated claims; `Ok(None)` while a claim is not yet created or
/// allocated (the pod waits, as under the kubelet).
pub async fn prepare(
    client: &Client,
    pod: &Pod,
    env_by_driver: &BTreeMap<String, String>,
) -> Result<Option<Prepared>> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Some(Prepared::new()));
    };
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
    let statuses = claim_names(client, pod, &ns).await?;
    // Pod claim name -> variable -> device ids.
    let mut by_claim: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for claim in spec.resource_claims.iter().flatten() {
        let name = match &claim.resource_claim_name {
            Some(name) => Some(name.clone()),
            None => statuses
                .iter()
                .find(|(name, _)| *name == claim.name)
                .and_then(|(_, claim)| claim.clone()),
        };
        let Some(name) = name else {
            return Ok(None);
        };
        let Some(devices) = prepare_claim(&api, &ns, &name, env_by_driver).await? else {
            return Ok(None);
        };
        let vars = by_claim.entry(claim.name.clone()).or_default();
        for (var, id) in devices {
            vars.entry(var).or_default().push(id);
        }
    }
    Ok(Some(per_container(spec, &by_claim)))
}

/// The generated ResourceClaim of each of the pod's claims, by pod claim name: from the pod's
/// status and, for claims shared through the pod's PodGroup, the PodGroup's status.
async fn claim_names(
    client: &Client,
    pod: &Pod,
    ns: &str,
) -> Result<Vec<(String, Option<String>)>> {
    let mut statuses: Vec<(String, Option<String>)> = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s.name, s.resource_claim_name))
        .collect();
    let group = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.clone());
    if let Some(group) = group {
        let groups: Api<k8s_openapi::api::scheduling::v1beta1::PodGroup> =
            Api::namespaced(client.clone(), ns);
        if let Some(group) = groups
            .get_opt(&group)
            .await
            .with_context(|| format!("reading PodGroup {ns}/{group}"))?
        {
            statuses.extend(
                group
                    .status
                    .and_then(|s| s.resource_claim_statuses)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|s| (s.name, s.resource_claim_name)),
            );
        }
    }
    Ok(statuses)
}

/// Prepares one allocated ResourceClaim: records this driver's devices in its
/// `status.devices` and returns them as (visible-devices variable, device id); `Ok(None)` while
/// the claim does not exist or is not allocated.
async fn prepare_claim(
    api: &Api<ResourceClaim>,
    ns: &str,
    name: &str,
    env_by_driver: &BTreeMap<String, String>,
) -> Result<Option<Vec<(String, String)>>> {
    let Some(object) = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading ResourceClaim {ns}/{name}"))?
    else {
        return Ok(None);
    };
    let Some(results) = object
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .map(|d| d.results.clone().unwrap_or_default())
    else {
        return Ok(None);
    };
    let ours: Vec<_> = results
        .iter()
        .filter(|r| env_by_driver.contains_key(&r.driver))
        .collect();
    let devices: Vec<AllocatedDeviceStatus> = ours
        .iter()
        .map(|r| AllocatedDeviceStatus {
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                serde_json::json!({"uuid": device_id(&r.pool, &r.device)}),
            )),
            ..AllocatedDeviceStatus::default()
        })
        .collect();
    // Claims on devices of other drivers (e.g. a domain's channel) are not this driver's.
    if !devices.is_empty() {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"devices": devices}})),
        )
        .await
        .with_context(|| format!("recording prepared devices of ResourceClaim {ns}/{name}"))?;
    }
    Ok(Some(
        ours.iter()
            .map(|r| {
                (
                    env_by_driver[&r.driver].clone(),
                    device_id(&r.pool, &r.device),
                )
            })
            .collect(),
    ))
}

/// Per container, the variables naming the devices of the claims it uses.
fn per_container(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    by_claim: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
) -> Prepared {
    let mut prepared = Prepared::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let mut vars: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let used = c.resources.as_ref().and_then(|r| r.claims.as_ref());
        for claim in used.into_iter().flatten() {
            for (var, ids) in by_claim.get(&claim.name).into_iter().flatten() {
                vars.entry(var.clone())
                    .or_default()
                    .extend(ids.iter().cloned());
            }
        }
        if !vars.is_empty() {
            prepared.insert(
                c.name.clone(),
                vars.into_iter().map(|(k, v)| (k, v.join(","))).collect(),
            );
        }
    }
    prepared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dra_node_publishes_its_devices_with_domain_attributes_and_ids() {
        let nodes = crate::topology::parse(
            "pools: [{name: g, count: 1, dra: {driver: gpu.nvidia.com, devices: 2, devicePrefix: gpu, \
             attributes: {cliqueID: clique-c}, visibleDevicesEnv: NVIDIA_VISIBLE_DEVICES}}, {name: c}]",
        )
        .expect("topology");
        assert!(
            resource_slice(&nodes[1], None).is_none(),
            "no DRA, no slice"
        );
        let slice = resource_slice(&nodes[0], Some("u")).expect("slice");
        assert_eq!(slice.name_any(), "g-0-gpu-nvidia-com");
        assert_eq!(slice.spec.node_name.as_deref(), Some("g-0"));
        assert_eq!(slice.spec.pool.name, "g-0");
        assert_eq!(slice.metadata.owner_references.unwrap()[0].kind, "Node");
        let devices = slice.spec.devices.unwrap();
        assert_eq!(
            devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["gpu-0", "gpu-1"]
        );
        let attrs = devices[1].attributes.clone().unwrap();
        assert_eq!(attrs["cliqueID"].string.as_deref(), Some("clique-c"));
        assert_eq!(attrs["index"].int, Some(1));
        assert_eq!(attrs["uuid"].string.as_deref(), Some("SIM-g-0-gpu-1"));
        assert!(
            domain_slices(&nodes).is_empty(),
            "no domain devices asked for"
        );
        assert_eq!(
            visible_devices_env(&nodes),
            BTreeMap::from([(
                "gpu.nvidia.com".to_string(),
                "NVIDIA_VISIBLE_DEVICES".to_string()
            )])
        );
    }

    #[test]
    fn each_domain_gets_one_slice_selecting_its_nodes_with_a_channel_per_node() {
        let nodes = crate::topology::parse(
            "pools:\n\
             - {name: g, count: 3, labels: {clique: a}, dra: {driver: gpu.nvidia.com, devices: 8, \
                visibleDevicesEnv: V, domain: {driver: cd.nvidia.com, label: clique}}}\n\
             - {name: h, count: 1, labels: {clique: b}, dra: {driver: gpu.nvidia.com, devices: 8, \
                visibleDevicesEnv: V, domain: {driver: cd.nvidia.com, label: clique}}}\n",
        )
        .expect("topology");
        let slices = domain_slices(&nodes);
        assert_eq!(slices.len(), 2);
        let a = &slices[0];
        assert_eq!(a.name_any(), "cd-nvidia-com-a");
        assert_eq!(a.spec.pool.name, "a");
        assert!(a.spec.node_name.is_none());
        let term = &a
            .spec
            .node_selector
            .as_ref()
            .expect("selector")
            .node_selector_terms[0];
        let req = &term.match_expressions.as_ref().expect("expressions")[0];
        assert_eq!(
            (req.key.as_str(), req.operator.as_str(), req.values.clone()),
            ("clique", "In", Some(vec!["a".to_string()]))
        );
        assert_eq!(a.spec.devices.as_ref().map(Vec::len), Some(3));
        assert_eq!(slices[1].spec.devices.as_ref().map(Vec::len), Some(1));
    }
}
