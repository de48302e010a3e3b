//! Two `deepinfer-operator run --leader-elect` processes on the bed, as two replicas of the
//! chart's Deployment would run: only the Lease holder reconciles and writes, a graceful shutdown
//! hands over at once, and a holder that finds the Lease taken exits rather than write beside
//! the new leader.

use std::net::SocketAddr;
use std::time::Duration;

use deepinfer_e2e::operator_process::{free_address, scrape, OperatorProcess};
use deepinfer_e2e::support::{self, TestNamespace};
use deepinfer_operator::api::{DeepInferDeployment, Phase};
use kube::api::{Api, PostParams};
use kube::Client;

const TIMEOUT: Duration = Duration::from_secs(60);
const LEASE: &str = "deepinfer-operator-ha";

/// A replica: leader-elected on the Lease in `ops`, watching `work`, identified as `identity`.
fn replica(work: &str, ops: &str, identity: &str, address: SocketAddr) -> OperatorProcess {
    OperatorProcess::start(
        work,
        address,
        &["--leader-elect", "--leader-election-id", LEASE],
        &[("POD_NAME", identity), ("POD_NAMESPACE", ops)],
    )
}

async fn create_unlicensed(client: &Client, ns: &str, name: &str) {
    Api::<DeepInferDeployment>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &support::unlicensed_deployment(name),
        )
        .await
        .expect("creating the DeepInferDeployment");
}

async fn writes(address: SocketAddr) -> f64 {
    scrape(address, "deepinfer_api_writes_total")
        .await
        .expect("the replica serves /metrics")
}

#[tokio::test]
async fn only_the_lease_holder_reconciles_and_a_graceful_shutdown_hands_over() {
    let client = support::client().await;
    support::ensure_crd();
    let ops = TestNamespace::new(&client, "ha-ops").await;
    let work = TestNamespace::new(&client, "ha-work").await;

    let (addr_a, addr_b) = (free_address(), free_address());
    let mut a = replica(&work.name, &ops.name, "operator-a", addr_a);
    support::wait_for_lease_holder(&client, &ops.name, LEASE, "operator-a").await;
    let mut b = replica(&work.name, &ops.name, "operator-b", addr_b);
    // The standby is up and ready (it serves as soon as it leads), but not leading.
    support::eventually(TIMEOUT, "the standby's /metrics", || {
        b.assert_running();
        async move { scrape(addr_b, "deepinfer_leader").await }
    })
    .await;
    assert_eq!(scrape(addr_a, "deepinfer_leader").await, Some(1.0));
    assert_eq!(scrape(addr_b, "deepinfer_leader").await, Some(0.0));

    create_unlicensed(&client, &work.name, "first").await;
    support::wait_for_phase(&client, &work.name, "first", Phase::Pending).await;
    assert!(writes(addr_a).await >= 1.0, "the leader wrote the status");
    assert_eq!(
        writes(addr_b).await,
        0.0,
        "the standby sent no mutating request at all"
    );
    assert_eq!(
        support::lease_holder(&client, &ops.name, LEASE)
            .await
            .as_deref(),
        Some("operator-a")
    );

    // A rolling update or a drain: SIGTERM. The leader finishes, releases the Lease, exits 0,
    // and the standby takes over without waiting for the Lease to expire.
    let status = a.terminate(Duration::from_secs(20));
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    support::wait_for_lease_holder(&client, &ops.name, LEASE, "operator-b").await;
    support::eventually(TIMEOUT, "the new leader's metric", || async {
        (scrape(addr_b, "deepinfer_leader").await == Some(1.0)).then_some(())
    })
    .await;
    create_unlicensed(&client, &work.name, "second").await;
    support::wait_for_phase(&client, &work.name, "second", Phase::Pending).await;
    assert!(writes(addr_b).await >= 1.0, "the new leader reconciles");

    // Someone else holds the Lease now (the other side of a healed partition): the holder exits
    // non-zero instead of writing beside it, and restarts as a standby.
    support::take_lease(&client, &ops.name, LEASE, "operator-z").await;
    let status = b
        .wait_exit(Duration::from_secs(20))
        .expect("the replica that lost the Lease exits");
    assert!(
        !status.success(),
        "losing the Lease is an error exit: {status}"
    );
}
