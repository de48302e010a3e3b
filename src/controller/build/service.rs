//! Services: a headless Service per group for rendezvous, a Service per role for traffic.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::{labels, Component};
use crate::controller::validated::ValidatedDeployment;

use super::{
    group_selector, group_service_name, owned_meta, role_service_name, stamp, RENDEZVOUS_PORT,
    SERVE_PORT,
};

/// Headless Service of a group: stable DNS for rendezvous, published before readiness.
pub fn group_service(did: &ValidatedDeployment, role: &str, revision: &str, group: i32) -> Service {
    let name = group_service_name(&did.name_any(), role, revision, group);
    let mut extra = group_selector(&did.name_any(), role, revision, group);
    extra.extend([Component::Rendezvous.label()]);
    rendezvous_service(
        owned_meta(did, name, extra),
        group_selector(&did.name_any(), role, revision, group),
    )
}

/// A headless Service on the rendezvous port selecting `selector`, with addresses published
/// before readiness (ranks find each other while they load): serving groups and acceptance runs.
pub fn rendezvous_service(metadata: ObjectMeta, selector: BTreeMap<String, String>) -> Service {
    stamp(Service {
        metadata,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("rendezvous".into()),
                port: RENDEZVOUS_PORT,
                target_port: Some(IntOrString::Int(RENDEZVOUS_PORT)),
                // Explicit: server-side apply on older API servers needs the list-map key.
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// Service of a role: traffic to the group leaders that are Ready (hence accepted and passing
/// their probes), of any revision, so that both revisions serve while a rollout runs.
pub fn role_service(did: &ValidatedDeployment, role: &str) -> Service {
    let name = role_service_name(&did.name_any(), role);
    let mut selector = crate::api::role_pod_labels(&did.name_any(), role);
    selector.insert(labels::RANK.to_string(), "0".to_string());
    let extra = BTreeMap::from([
        (labels::ROLE.to_string(), role.to_string()),
        Component::Serving.label(),
    ]);
    stamp(Service {
        metadata: owned_meta(did, name, extra),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("serve".into()),
                port: SERVE_PORT,
                target_port: Some(IntOrString::String("serve".into())),
                // Explicit: server-side apply on older API servers needs the list-map key.
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// Every Service the deployment should have: one per role, one per group in `groups`
/// (role, revision, index).
pub fn services(did: &ValidatedDeployment, groups: &[(String, String, i32)]) -> Vec<Service> {
    let mut out = Vec::new();
    for role in &did.spec.roles {
        out.push(role_service(did, &role.name));
        for (_, revision, group) in groups.iter().filter(|(r, _, _)| *r == role.name) {
            out.push(group_service(did, &role.name, revision, *group));
        }
    }
    out
}
