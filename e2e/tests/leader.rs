//! Leader election against the bed's real API server: one holder at a time, a graceful hand-over
//! on release, and a holder that stops leading as soon as it can no longer prove it leads (the
//! Lease taken by another identity, or its renewals refused). Timings are shortened (a 6 s Lease)
//! so the suite stays quick; the protocol is the one the operator runs with 15 s / 10 s / 2 s.

use std::time::{Duration, Instant};

use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::leader::{Config, Elector, Timing};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use serde_json::json;

const LEASE: &str = "deepinfer-operator";

fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_millis(500),
    }
}

fn elector(client: &Client, ns: &str, identity: &str) -> Elector {
    Elector::new(
        client.clone(),
        Config {
            namespace: ns.to_string(),
            name: LEASE.to_string(),
            identity: identity.to_string(),
            timing: timing(),
        },
    )
}

async fn lease(client: &Client, ns: &str) -> Lease {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get(LEASE)
        .await
        .expect("the Lease exists")
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

fn transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

#[tokio::test]
async fn one_candidate_leads_and_a_release_hands_over_at_once() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "leader").await;

    let a = elector(&client, &ns.name, "operator-a").acquire().await;
    let first = lease(&client, &ns.name).await;
    assert_eq!(holder(&first).as_deref(), Some("operator-a"));
    assert_eq!(
        first.spec.as_ref().and_then(|s| s.lease_duration_seconds),
        Some(6)
    );

    // B waits while A renews: well past A's lease duration, A still holds it.
    let b = tokio::spawn(elector(&client, &ns.name, "operator-b").acquire());
    tokio::time::sleep(timing().lease_duration * 2).await;
    assert!(
        !b.is_finished(),
        "operator-b took a Lease that operator-a kept renewing"
    );
    let renewed = lease(&client, &ns.name).await;
    assert_eq!(holder(&renewed).as_deref(), Some("operator-a"));
    assert_ne!(
        renewed.spec.as_ref().and_then(|s| s.renew_time.clone()),
        first.spec.as_ref().and_then(|s| s.renew_time.clone()),
        "operator-a renews its Lease"
    );

    // A releases (graceful shutdown): B takes over without waiting for the Lease to expire.
    a.release().await;
    let released_at = Instant::now();
    let b = tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .expect("operator-b leads after the release")
        .expect("acquire task");
    let waited = released_at.elapsed();
    let now = lease(&client, &ns.name).await;
    assert_eq!(holder(&now).as_deref(), Some("operator-b"));
    assert_eq!(transitions(&now), transitions(&first) + 1);
    println!(
        "hand-over after release: {waited:?} (lease duration {:?})",
        timing().lease_duration
    );
    b.release().await;
    assert_eq!(holder(&lease(&client, &ns.name).await), None);
}

#[tokio::test]
async fn a_crashed_holder_is_replaced_once_its_lease_stands_still() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "leader").await;
    // A holder that stopped renewing without releasing (killed): its record stands still.
    let api: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let stale: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": "operator-crashed", "leaseDurationSeconds": 6,
                 "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 7}
    }))
    .expect("lease");
    api.create(&PostParams::default(), &stale)
        .await
        .expect("creating the stale Lease");
    let b = tokio::time::timeout(
        Duration::from_secs(30),
        elector(&client, &ns.name, "operator-b").acquire(),
    )
    .await
    .expect("operator-b takes over a Lease nobody renews");
    let now = lease(&client, &ns.name).await;
    assert_eq!(holder(&now).as_deref(), Some("operator-b"));
    assert_eq!(transitions(&now), 8);
    b.release().await;
}

#[tokio::test]
async fn a_holder_whose_lease_is_taken_stops_leading() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "leader").await;
    let mut a = elector(&client, &ns.name, "operator-a").acquire().await;

    // Another identity writes the Lease (e.g. after a partition healed on the other side).
    support::take_lease(&client, &ns.name, LEASE, "operator-z").await;

    let reason = tokio::time::timeout(Duration::from_secs(10), a.lost())
        .await
        .expect("operator-a notices within its renew deadline");
    assert!(reason.contains("operator-z"), "{reason}");
}

#[tokio::test]
async fn a_holder_whose_renewals_are_refused_stops_leading() {
    let admin = support::client().await;
    let ns = TestNamespace::new(&admin, "leader").await;
    let n = ns.name.as_str();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), n);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "elector"}})).expect("sa"),
    )
    .await
    .expect("ServiceAccount");
    support::wait_for_service_account(&admin, n, "elector").await;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "leader-election"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "create", "update"]}]
    }))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), n)
        .create(&PostParams::default(), &role)
        .await
        .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "leader-election"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leader-election"},
        "subjects": [{"kind": "ServiceAccount", "name": "elector", "namespace": n}]
    }))
    .expect("binding");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), n);
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");

    // Exactly the chart's Lease rights are enough to lead.
    let client = support::client_as(&admin, n, "elector").await;
    let mut a = tokio::time::timeout(
        Duration::from_secs(15),
        elector(&client, n, "operator-a").acquire(),
    )
    .await
    .expect("operator-a leads with get/create/update on leases");

    // Its rights go: renewals are refused, and it must stop within its renew deadline, before
    // the Lease could expire for anyone else.
    bindings
        .delete("leader-election", &DeleteParams::default())
        .await
        .expect("deleting the RoleBinding");
    let revoked = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(20), a.lost())
        .await
        .expect("operator-a stops leading");
    let after = revoked.elapsed();
    assert!(reason.contains("forbidden"), "{reason}");
    let last_renewal = lease(&admin, n).await;
    assert_eq!(holder(&last_renewal).as_deref(), Some("operator-a"));
    println!("stopped leading {after:?} after its rights were revoked: {reason}");
}
