//! Disaggregated serving: how decode groups find the prefill (and vision) role. Decode engines get
//! the other roles' Service addresses in the environment, and a mounted file, `endpoints.json`
//! (key `endpoints-<rev5>.json` of `<name>-role-endpoints`), listing the leader of every ready
//! group of those roles at the decode group's revision. The operator rewrites the file whenever
//! groups come and go; a ConfigMap volume is updated in place, so decode pods are never restarted
//! for it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, EnvVar, KeyToPath, Pod, Volume,
};
use kube::ResourceExt;

use crate::api::{Component, DeepInferDeploymentSpec, RoleKind};
use crate::controller::validated::ValidatedDeployment;

use super::run::{AcceptanceNames, RunGroup};
use super::{
    env, group_service_name, owned_meta, pod_name, role_service_name, short_revision, stamp,
    SERVE_PORT,
};

/// Where decode engines find `endpoints.json`.
pub const PEER_ENDPOINTS_DIR: &str = "/deepinfer/peers";
/// Key of the endpoints file in its ConfigMap.
pub const PEER_ENDPOINTS_KEY: &str = "endpoints.json";
/// Component label of the endpoints ConfigMap.
/// Roles a decode group talks to, with the variable naming each one's Service.
pub const UPSTREAM_ROLES: [(&str, &str); 2] = [
    ("prefill", crate::contract::env::PREFILL_SERVICE),
    ("vision", crate::contract::env::VISION_SERVICE),
];

fn upstream_env(role: &str) -> Option<&'static str> {
    UPSTREAM_ROLES
        .iter()
        .find(|(name, _)| *name == role)
        .map(|(_, var)| *var)
}

/// Name of the endpoints ConfigMap.
pub fn peer_endpoints_name(did: &str) -> String {
    format!("{did}-role-endpoints")
}

/// Whether decode groups of this spec have upstream roles to find.
pub fn decode_has_upstreams(spec: &DeepInferDeploymentSpec) -> bool {
    spec.roles.iter().any(|r| RoleKind::Decode.named(&r.name))
        && spec.roles.iter().any(|r| upstream_env(&r.name).is_some())
}

/// How a decode group's engines reach the upstream roles: `DEEPINFER_<ROLE>_SERVICE` per
/// upstream role of the spec, and `endpoints.json` mounted from a ConfigMap (optional: a decode
/// pod may start before the file exists) with `DEEPINFER_PEER_ENDPOINTS_FILE` naming it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerWiring {
    /// Variable and `host:port` per upstream role, in spec order.
    pub services: Vec<(&'static str, String)>,
    /// The ConfigMap holding the file.
    pub configmap: String,
    /// The key mounted as `endpoints.json`.
    pub key: String,
}

impl PeerWiring {
    /// Serving, at `revision`: the upstream roles' Services, and the key of `revision` in
    /// `<name>-role-endpoints`, which lists the ready leaders of that revision's groups. `None`
    /// unless the spec has decode and an upstream role.
    pub fn serving(did: &ValidatedDeployment, revision: &str) -> Option<Self> {
        let name = did.name_any();
        let key = peer_endpoints_key(revision);
        Self::to(did, peer_endpoints_name(&name), key, |role| {
            format!(
                "{}.{}.svc:{SERVE_PORT}",
                role_service_name(&name, role),
                did.namespace
            )
        })
    }

    /// An acceptance run: the leader of the run's own group of each upstream role (`groups`),
    /// and the `endpoints.json` key of the run's spec ConfigMap (see [`run_endpoints_json`]).
    pub fn acceptance(
        did: &ValidatedDeployment,
        names: &AcceptanceNames,
        groups: &[RunGroup<'_>],
    ) -> Option<Self> {
        let key = PEER_ENDPOINTS_KEY.to_string();
        Self::to(did, names.spec_configmap.clone(), key, |role| {
            run_leader_address(did, groups, role).unwrap_or_default()
        })
    }

    fn to(
        did: &ValidatedDeployment,
        configmap: String,
        key: String,
        address: impl Fn(&str) -> String,
    ) -> Option<Self> {
        decode_has_upstreams(&did.spec).then(|| Self {
            services: did
                .spec
                .roles
                .iter()
                .filter_map(|r| Some((upstream_env(&r.name)?, address(&r.name))))
                .collect(),
            configmap,
            key,
        })
    }

    /// The environment it gives: one variable per upstream role, then the file's path.
    pub(super) fn env(&self) -> Vec<EnvVar> {
        self.services
            .iter()
            .map(|(var, address)| env(var, address.clone()))
            .chain(std::iter::once(env(
                crate::contract::env::PEER_ENDPOINTS_FILE,
                format!("{PEER_ENDPOINTS_DIR}/{PEER_ENDPOINTS_KEY}"),
            )))
            .collect()
    }

    /// The file's volume.
    pub(super) fn volume(&self) -> Volume {
        Volume {
            name: "role-endpoints".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: self.configmap.clone(),
                optional: Some(true),
                items: Some(vec![KeyToPath {
                    key: self.key.clone(),
                    path: PEER_ENDPOINTS_KEY.into(),
                    ..KeyToPath::default()
                }]),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }
    }
}

/// `rank-0.<group>.<ns>.svc:<port>`: the leader of the run's group of `role`.
fn run_leader_address(
    did: &ValidatedDeployment,
    groups: &[RunGroup<'_>],
    role: &str,
) -> Option<String> {
    let group = groups.iter().find(|g| g.role.name == role)?;
    Some(format!(
        "rank-0.{}.{}.svc:{SERVE_PORT}",
        group.name, did.namespace
    ))
}

/// `endpoints.json` of an acceptance run, in the serving file's format: per upstream role of the
/// spec, the leader of the run's group of that role. `None` when decode has no upstream role.
pub fn run_endpoints_json(did: &ValidatedDeployment, groups: &[RunGroup<'_>]) -> Option<String> {
    if !decode_has_upstreams(&did.spec) {
        return None;
    }
    let by_role: BTreeMap<&str, Vec<String>> = did
        .spec
        .roles
        .iter()
        .filter(|r| upstream_env(&r.name).is_some())
        .map(|r| {
            let leader = run_leader_address(did, groups, &r.name);
            (r.name.as_str(), leader.into_iter().collect())
        })
        .collect();
    serde_json::to_string_pretty(&by_role).ok()
}

/// Key of the endpoints file of the decode groups of one revision: `endpoints-<rev5>.json`.
pub fn peer_endpoints_key(revision: &str) -> String {
    format!("endpoints-{}.json", short_revision(revision))
}

/// The endpoints ConfigMap: per upstream role, `rank-0.<group service>.<ns>.svc:<port>` of each
/// group among `groups` (role, revision, index) whose leader in `workers` serves, sorted.
/// Key [`peer_endpoints_key`] of each revision with decode groups lists that revision's leaders
/// whose engines are ready, admitted to traffic or not (what its decode pods mount: a revision's
/// roles are judged together, and the candidates of a revision judged in place are wired to each
/// other only); key `endpoints.json` lists every revision's ready leaders (for pods that mount the
/// whole ConfigMap). `None` when decode has no upstream role.
pub fn peer_endpoints_configmap(
    did: &ValidatedDeployment,
    groups: &[(String, String, i32)],
    workers: &[Pod],
) -> Option<ConfigMap> {
    if !decode_has_upstreams(&did.spec) {
        return None;
    }
    let name = did.name_any();
    let empty: BTreeMap<String, Vec<String>> = did
        .spec
        .roles
        .iter()
        .filter(|r| upstream_env(&r.name).is_some())
        .map(|r| (r.name.clone(), Vec::new()))
        .collect();
    let mut all = empty.clone();
    let mut by_revision: BTreeMap<&str, BTreeMap<String, Vec<String>>> = groups
        .iter()
        .filter(|(role, _, _)| RoleKind::Decode.named(role))
        .map(|(_, revision, _)| (revision.as_str(), empty.clone()))
        .collect();
    for (role, revision, index) in groups {
        if !all.contains_key(role) {
            continue;
        }
        let leader_name = pod_name(&name, role, revision, *index, 0);
        let Some(leader) = workers
            .iter()
            .find(|p| p.name_any() == leader_name && p.metadata.deletion_timestamp.is_none())
        else {
            continue;
        };
        let service = group_service_name(&name, role, revision, *index);
        let address = format!("rank-0.{service}.{}.svc:{SERVE_PORT}", did.namespace);
        if crate::controller::pods::containers_ready(leader) {
            if let Some(list) = by_revision
                .get_mut(revision.as_str())
                .and_then(|r| r.get_mut(role))
            {
                list.push(address.clone());
            }
        }
        if crate::controller::pods::pod_ready(leader) {
            if let Some(list) = all.get_mut(role) {
                list.push(address);
            }
        }
    }
    let file = |mut by_role: BTreeMap<String, Vec<String>>| {
        for list in by_role.values_mut() {
            list.sort();
        }
        serde_json::to_string_pretty(&by_role).unwrap_or_default()
    };
    let mut data: BTreeMap<String, String> = by_revision
        .into_iter()
        .map(|(revision, by_role)| (peer_endpoints_key(revision), file(by_role)))
        .collect();
    data.insert(PEER_ENDPOINTS_KEY.to_string(), file(all));
    let extra = BTreeMap::from([Component::PeerEndpoints.label()]);
    Some(stamp(ConfigMap {
        metadata: owned_meta(did, peer_endpoints_name(&name), extra),
        data: Some(data),
        ..ConfigMap::default()
    }))
}
