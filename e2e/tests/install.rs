//! README's "Install on a cluster", run as a newcomer runs it: every `sh` block of that section,
//! in order and as written, by `bash -e` in a directory that holds the repository's `crds/`,
//! `charts/`, `config/` and `e2e/` and the bed as `.testbed`. The operator is the packaged chart's
//! (its default image, which the node agent runs as the local build), under its own
//! ServiceAccount; the sample is applied unchanged and must end Ready with its evidence.
//!
//! The section installs fixed names (namespaces `models` and `deepinfer-system`, release
//! `deepinfer`, the chart's ClusterRoles) and the chart's default metrics port 8080 on the host's
//! network: the test removes them before and after, and places an 8-GPU group (`gpu_*`, one at a
//! time).

use std::path::{Path, PathBuf};
use std::process::Command;

use deepinfer_e2e::support;

const NAMESPACES: [&str; 2] = ["models", "deepinfer-system"];
const VOLUME: &str = "checkpoint-models-deepseek-checkpoint";

/// The `sh` blocks of README's install section, joined in order.
fn install_commands() -> String {
    let readme =
        std::fs::read_to_string(support::repo_root().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Install on a cluster\n")
        .nth(1)
        .expect("README has an install section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let mut script = String::new();
    let mut in_block = false;
    for line in section.lines() {
        match (in_block, line.trim_end()) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, line) => {
                script.push_str(line);
                script.push('\n');
            }
            _ => {}
        }
    }
    script
}

/// A directory laid out as the repository a newcomer has checked out, with the bed in it.
fn checkout() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deepinfer-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch checkout");
    let root = support::repo_root();
    for name in ["crds", "charts", "config", "e2e"] {
        std::os::unix::fs::symlink(root.join(name), dir.join(name)).expect("linking the checkout");
    }
    std::os::unix::fs::symlink(support::bed_dir(), dir.join(".testbed")).expect("linking the bed");
    dir
}

/// Removes what the section installs (the CRDs stay: the bed's other suites share them).
fn remove_installation(helm_home: &Path) {
    let _ = support::kubectl(&["-n", "models", "delete", "did", "--all", "--wait=true"]);
    let _ = helm(
        helm_home,
        &["uninstall", "deepinfer", "-n", "deepinfer-system", "--wait"],
    );
    for ns in NAMESPACES {
        let _ = support::kubectl(&[
            "delete",
            "namespace",
            ns,
            "--ignore-not-found",
            "--wait=true",
        ]);
    }
    let _ = support::kubectl(&["delete", "pv", VOLUME, "--ignore-not-found"]);
}

fn helm(home: &Path, args: &[&str]) -> bool {
    Command::new(support::bed_dir().join("bin/helm"))
        .args(args)
        .arg("--kubeconfig")
        .arg(support::kubeconfig())
        .envs(helm_env(home))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Helm's cache, config and data under `home`, so that the run leaves nothing in the user's.
fn helm_env(home: &Path) -> [(&'static str, PathBuf); 3] {
    [
        ("HELM_CACHE_HOME", home.join("cache")),
        ("HELM_CONFIG_HOME", home.join("config")),
        ("HELM_DATA_HOME", home.join("data")),
    ]
}

#[tokio::test]
async fn gpu_the_readme_install_section_takes_the_sample_to_ready() {
    let client = support::client().await;
    let script = install_commands();
    for step in [
        "kubectl apply --server-side -f crds/",
        "helm install deepinfer dist/deepinfer-operator-0.1.0.tgz",
        "kubectl -n models wait --for=condition=Ready",
    ] {
        assert!(
            script.contains(step),
            "the section runs {step:?}:\n{script}"
        );
    }
    let dir = checkout();
    let helm_home = dir.join("helm-home");
    remove_installation(&helm_home);
    assert!(
        std::net::TcpListener::bind("0.0.0.0:8080").is_ok(),
        "port 8080 is taken (the chart's metrics port on the bed's host network): stop `make run`'s operator with e2e/bed/stop-sample.sh"
    );

    println!("running README's install section:\n{script}");
    let started = std::time::Instant::now();
    let out = Command::new("timeout")
        .args(["600", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(&dir)
        .env_remove("KUBECONFIG")
        .envs(helm_env(&helm_home))
        .output()
        .expect("running bash");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{log}");
    let ready_after = started.elapsed();

    let did = kube::Api::<deepinfer_operator::api::DeepInferDeployment>::namespaced(
        client.clone(),
        "models",
    )
    .get_opt("flash")
    .await
    .expect("reading the sample");
    let operator_log = support::kubectl(&[
        "-n",
        "deepinfer-system",
        "logs",
        "deployment/deepinfer-deepinfer-operator",
        "--tail=40",
    ])
    .1;
    remove_installation(&helm_home);
    let _ = std::fs::remove_dir_all(&dir);

    assert!(
        out.status.success(),
        "README's install section failed ({}):\n{log}\noperator log:\n{operator_log}",
        out.status
    );
    let status = did.and_then(|d| d.status).expect("the sample has a status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str());
    assert_eq!(ready, Some("True"), "{status:?}");
    assert!(
        status
            .acceptance
            .as_ref()
            .and_then(|a| a.evidence.as_deref())
            .is_some(),
        "the verdict names its evidence: {status:?}"
    );
    println!(
        "README install: the sample Ready {:.1} s after the first command",
        ready_after.as_secs_f64()
    );
}
