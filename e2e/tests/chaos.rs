//! The short version of `make chaos`: the operator SIGKILLed at random moments while deployments
//! go create → Ready → revision change → scale → delete, the leader of two replicas SIGKILLed
//! (take-over timed, no write by a non-leader in the audit log), and generated hostile specs
//! beside valid neighbours, each beside the invariant monitor. Control-plane restarts run only under
//! `make chaos` (they would disturb the other suites sharing the bed).

use std::process::Command;

#[test]
fn gpu_short_chaos_converges_with_zero_violations_and_zero_panics() {
    let chaos = env!("CARGO_BIN_EXE_deepinfer-chaos");
    let out = Command::new(chaos)
        .arg("--short")
        .output()
        .expect("running deepinfer-chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("CHAOS PASSED"),
        "deepinfer-chaos --short failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for scenario in ["operator-sigkill", "leader-kill", "hostile-specs"] {
        assert!(stdout.contains(scenario), "no row for {scenario}");
    }
}
