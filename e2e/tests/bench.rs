//! The benchmark (`make bench`) at a small size, so that it keeps working, and what it shows that
//! users rely on: every resource converges, and a restarted operator re-reconciles the converged
//! set without a single write. Its timing figures are printed, not judged.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_converges_and_a_restart_over_converged_resources_writes_nothing() {
    let bench = env!("CARGO_BIN_EXE_deepinfer-bench");
    let operator = deepinfer_e2e::operator_process::binary();
    let out = Command::new(bench)
        .args([
            "--resources",
            "40",
            "--timeout-seconds",
            "120",
            "--operator",
        ])
        .arg(&operator)
        .output()
        .expect("running deepinfer-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "deepinfer-bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("BENCH "))
        .expect("a BENCH line");
    let figures: Value = serde_json::from_str(line).expect("BENCH is JSON");
    assert_eq!(figures["resources"], 40);
    assert!(
        figures["writesPerResource"]
            .as_f64()
            .is_some_and(|w| w >= 1.0),
        "every resource got its status written: {figures}"
    );
    assert!(
        figures["restartReconciles"]
            .as_f64()
            .is_some_and(|r| r >= 40.0),
        "the restarted operator reconciled every resource: {figures}"
    );
    assert_eq!(
        figures["restartWrites"].as_f64(),
        Some(0.0),
        "a restart over converged resources writes nothing: {figures}"
    );
    for key in ["convergeSeconds", "rssLoadedMib", "meanReconcileMs"] {
        assert!(
            figures[key]
                .as_f64()
                .is_some_and(|v| v.is_finite() && v > 0.0),
            "{key} measured: {figures}"
        );
    }
}
