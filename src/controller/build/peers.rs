//! Disaggregated serving: how decode groups find the prefill (and vision) role. Decode engines get
//! the other roles' Service addresses in the environment, and a mounted file,
//! `<name>-role-endpoints` / `endpoints.json`, listing the leader of every ready group of those
//! roles. The operator rewrites the file whenever groups come and go; a ConfigMap volume is
//! updated in place, so decode pods are never restarted for it.

use super::*;

/// Where decode engines find `endpoints.json`.
pub const PEER_ENDPOINTS_DIR: &str = "/deepinfer/peers";
/// Key of the endpoints file in its ConfigMap.
pub const PEER_ENDPOINTS_KEY: &str = "endpoints.json";
/// Component label of the endpoints ConfigMap.
pub const PEER_ENDPOINTS_COMPONENT: &str = "role-endpoints";
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
    spec.roles.iter().any(|r| r.name == "decode")
        && spec.roles.iter().any(|r| upstream_env(&r.name).is_some())
}

/// The environment a serving decode engine gets: `DEEPINFER_<ROLE>_SERVICE` (the role Service,
/// host:port) per upstream role of the spec, and `DEEPINFER_PEER_ENDPOINTS_FILE`.
pub(super) fn decode_peer_env(did: &ValidatedDeployment) -> Vec<EnvVar> {
    let mut out: Vec<EnvVar> = did
        .spec
        .roles
        .iter()
        .filter_map(|r| {
            let var = upstream_env(&r.name)?;
            let service = role_service_name(&did.name_any(), &r.name);
            Some(env(
                var,
                format!("{service}.{}.svc:{SERVE_PORT}", did.namespace),
            ))
        })
        .collect();
    out.push(env(
        crate::contract::env::PEER_ENDPOINTS_FILE,
        format!("{PEER_ENDPOINTS_DIR}/{PEER_ENDPOINTS_KEY}"),
    ));
    out
}

/// The endpoints file's volume (optional: a decode pod may start before the file exists).
pub(super) fn peer_endpoints_volume(did: &str) -> Volume {
    Volume {
        name: "role-endpoints".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: peer_endpoints_name(did),
            optional: Some(true),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The endpoints ConfigMap: per upstream role, `rank-0.<group service>.<ns>.svc:<port>` of each
/// group among `groups` (role, revision, index) whose leader in `workers` is ready, sorted.
/// `None` when decode has no upstream role.
pub fn peer_endpoints_configmap(
    did: &ValidatedDeployment,
    groups: &[(String, String, i32)],
    workers: &[Pod],
) -> Option<ConfigMap> {
    if !decode_has_upstreams(&did.spec) {
        return None;
    }
    let name = did.name_any();
    let mut by_role: BTreeMap<String, Vec<String>> = did
        .spec
        .roles
        .iter()
        .filter(|r| upstream_env(&r.name).is_some())
        .map(|r| (r.name.clone(), Vec::new()))
        .collect();
    for (role, revision, index) in groups {
        let Some(list) = by_role.get_mut(role) else {
            continue;
        };
        let leader = pod_name(&name, role, revision, *index, 0);
        let ready = workers.iter().any(|p| {
            p.name_any() == leader
                && p.metadata.deletion_timestamp.is_none()
                && crate::controller::apply::pod_ready(p)
        });
        if ready {
            let service = group_service_name(&name, role, revision, *index);
            list.push(format!(
                "rank-0.{service}.{}.svc:{SERVE_PORT}",
                did.namespace
            ));
        }
    }
    for list in by_role.values_mut() {
        list.sort();
    }
    let extra = BTreeMap::from([(
        labels::COMPONENT.to_string(),
        PEER_ENDPOINTS_COMPONENT.to_string(),
    )]);
    Some(stamp(ConfigMap {
        metadata: owned_meta(did, peer_endpoints_name(&name), extra),
        data: Some(BTreeMap::from([(
            PEER_ENDPOINTS_KEY.to_string(),
            serde_json::to_string_pretty(&by_role).unwrap_or_default(),
        )])),
        ..ConfigMap::default()
    }))
}
