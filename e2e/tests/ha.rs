//! Two `deepinfer-operator run --leader-elect` processes on the bed, as two replicas of the
//! chart's Deployment would run: only the Lease holder reconciles and writes, a graceful shutdown
//! hands over at once, a holder that finds the Lease taken exits rather than write beside the new
//! leader, and a holder paused past its Lease writes nothing when it wakes.

use std::net::SocketAddr;
use std::time::Duration;

use deepinfer_e2e::audit::replica_writes;
use deepinfer_e2e::operator_process::{free_address, scrape, OperatorProcess};
use deepinfer_e2e::support::{self, Operator, TestNamespace};
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

/// Sends `signal` (`STOP`, `CONT`) to the process `pid` with the system's kill command.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

#[tokio::test]
async fn a_replica_whose_lease_ran_out_sends_no_write() {
    let client = support::client().await;
    support::ensure_crd();
    let work = TestNamespace::new(&client, "fenced").await;
    create_unlicensed(&client, &work.name, "quiet").await;
    let settings = || {
        let mut s = deepinfer_operator::controller::Settings::new(
            Some(work.name.clone()),
            vec!["mit".into()],
        );
        s.operator_image = "deepinfer-operator:dev".into();
        s
    };
    // Its renew deadline has passed without a renewal, as for a holder paused past its Lease.
    let closed = deepinfer_operator::leader::Fence::until(tokio::time::Instant::now());
    let op = Operator::start_fenced(settings(), Some(closed)).await;
    let ctx = op.ctx.clone();
    support::eventually(TIMEOUT, "a pass over the resource", || {
        let n = ctx.reconciles.load(std::sync::atomic::Ordering::Relaxed);
        async move { (n >= 1).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        op.writes.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "a fenced replica sends no write"
    );
    let did = Api::<DeepInferDeployment>::namespaced(client.clone(), &work.name)
        .get("quiet")
        .await
        .expect("the resource");
    assert!(
        did.status.is_none(),
        "no status was written: {:?}",
        did.status
    );
    op.stop().await;
    // The same operator with an open fence writes the status: the fence is what held it.
    let op = Operator::start_fenced(settings(), None).await;
    support::wait_for_phase(&client, &work.name, "quiet", Phase::Pending).await;
    assert!(op.writes.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    op.stop().await;
}

#[tokio::test]
async fn a_leader_paused_past_its_lease_writes_nothing_when_it_wakes() {
    let client = support::client().await;
    support::ensure_crd();
    let ops = TestNamespace::new(&client, "pause-ops").await;
    let work = TestNamespace::new(&client, "pause-work").await;
    let lease = "deepinfer-operator-pause";
    let start = |identity: &str, address| {
        OperatorProcess::start(
            &work.name,
            address,
            &["--leader-elect", "--leader-election-id", lease],
            &[("POD_NAME", identity), ("POD_NAMESPACE", &ops.name)],
        )
    };
    let mut a = start("operator-a", free_address());
    support::wait_for_lease_holder(&client, &ops.name, lease, "operator-a").await;
    let mut b = start("operator-b", free_address());
    create_unlicensed(&client, &work.name, "first").await;
    support::wait_for_phase(&client, &work.name, "first", Phase::Pending).await;

    // The leader freezes (SIGSTOP: a long pause, a frozen VM) past its Lease; the standby takes
    // over and reconciles what is new.
    signal(a.id(), "STOP");
    support::wait_for_lease_holder(&client, &ops.name, lease, "operator-b").await;
    create_unlicensed(&client, &work.name, "second").await;
    support::wait_for_phase(&client, &work.name, "second", Phase::Pending).await;
    b.assert_running();

    // It wakes with the news of "second" waiting in its watches: it writes nothing, and exits.
    let woke = k8s_openapi::jiff::Timestamp::now();
    signal(a.id(), "CONT");
    let status = a
        .wait_exit(Duration::from_secs(30))
        .expect("the woken former leader exits");
    assert!(
        !status.success(),
        "losing the Lease is an error exit: {status}"
    );
    // The audit log holds the writes once the API server has them; give it a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stale: Vec<_> = replica_writes(&work.name, woke)
        .into_iter()
        .filter(|w| w.replica == "operator-a")
        .collect();
    assert!(
        stale.is_empty(),
        "the former leader wrote after waking: {stale:?}"
    );
    let before: Vec<_> = replica_writes(&work.name, k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .into_iter()
        .filter(|w| w.replica == "operator-a")
        .collect();
    assert!(
        !before.is_empty(),
        "the audit log names the replica's writes at all"
    );
    b.terminate(Duration::from_secs(20));
}
