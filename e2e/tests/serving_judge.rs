//! The judge through a serving endpoint (`deepinfer-runner accept --endpoint`, docs/engine-contract.md
//! "Serving API"), against a real engine: the llama.cpp example (`config/samples/llama-cpp/adapter.mjs`)
//! serving on loopback, started from the bed's entrypoint of the example image with the tiny
//! random-weight model (`make provision` and `e2e/bed/cluster-up.sh` install both; the API server
//! is not needed). The judged answers are the ones the endpoint returned, kept as evidence; the
//! end-to-end timings of two concurrency levels are in the manifest and on the sheet; a
//! constraint the engine cannot decode under is refused by it and recorded, never judged as if
//! it had been applied.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use deepinfer_e2e::support;
use serde_json::{json, Value};

/// The llama.cpp example serving the serving API on `127.0.0.1:<port>`; killed on drop.
struct Engine(Child);

impl Engine {
    fn start(port: u16, log: &Path) -> Self {
        let bed = support::bed_dir();
        let launcher = bed.join("bin/deepinfer-llama-cpp");
        assert!(
            launcher.exists(),
            "{} is missing: start the bed once (e2e/bed/cluster-up.sh writes it)",
            launcher.display()
        );
        let log = std::fs::File::create(log).expect("the engine's log");
        let child = Command::new(launcher)
            .arg("--model_name")
            .arg(bed.join("llama-cpp"))
            .args([
                "--host",
                "127.0.0.1",
                "--threads",
                "1",
                "--context-size",
                "1024",
            ])
            .env("DEEPINFER_SERVE_PORT", port.to_string())
            .env_remove("SIM_POD_LOOPBACK_IP")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting the llama.cpp example");
        Self(child)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn runner() -> PathBuf {
    support::repo_root().join("target/debug/deepinfer-runner")
}

/// The llama.cpp sample's acceptance section without its rules (structure only, which the
/// engine's constrained decoding guarantees), with `edit` applied.
fn spec(dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let sample = std::fs::read_to_string(
        support::repo_root().join("config/samples/llama-cpp/deployment.yaml"),
    )
    .expect("the llama.cpp sample");
    let sample: Value = serde_yaml::from_str(&sample).expect("YAML");
    let mut acceptance = sample["spec"]["acceptance"].clone();
    for p in acceptance["prompts"].as_array_mut().expect("prompts") {
        p.as_object_mut().expect("a prompt").remove("rules");
    }
    edit(&mut acceptance);
    let path = dir.join("acceptance.json");
    std::fs::write(&path, acceptance.to_string()).expect("writing the spec");
    path
}

/// `accept --endpoint` with evidence into `evidence`; (exit code, stdout).
fn judge(spec: &Path, endpoint: &str, evidence: &Path, concurrency: u32) -> (i32, String) {
    let out = Command::new(runner())
        .arg("accept")
        .arg("--spec-file")
        .arg(spec)
        .args(["--model-dir", "/nonexistent", "--endpoint", endpoint])
        .args(["--load-concurrency", &concurrency.to_string()])
        .args([
            "--revision",
            "serving-test",
            "--model-name",
            "deepinfer/tiny-random-llama",
        ])
        .arg("--evidence-dir")
        .arg(evidence)
        .arg("--termination-log")
        .arg(evidence.with_extension("termination"))
        .output()
        .expect("running deepinfer-runner accept");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn manifest(evidence: &Path) -> Value {
    let text = std::fs::read_to_string(evidence.join("manifest.json")).expect("manifest.json");
    serde_json::from_str(&text).expect("JSON")
}

#[test]
fn the_judge_judges_a_serving_endpoint_at_two_concurrency_levels() {
    let dir = std::env::temp_dir().join(format!("deepinfer-serving-judge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let port = free_port();
    let engine = Engine::start(port, &dir.join("engine.log"));
    let endpoint = format!("http://127.0.0.1:{port}");

    let started = Instant::now();
    let evidence = dir.join("passed");
    let (code, out) = judge(&spec(&dir, |_| {}), &endpoint, &evidence, 3);
    let log = std::fs::read_to_string(dir.join("engine.log")).unwrap_or_default();
    assert_eq!(
        code, 0,
        "the judged endpoint passes:\n{out}\nengine log:\n{log}"
    );
    println!(
        "judged through the endpoint in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let m = manifest(&evidence);
    assert_eq!(m["result"], "Passed", "{m:#}");
    let prompts = m["promptIds"].as_array().expect("prompt ids").len();
    assert_eq!(
        m["engine"]["exit"],
        json!({"kind": "served", "endpoint": endpoint}),
        "{:#}",
        m["engine"]
    );

    // The outputs judged are what the endpoint answered, kept as evidence.
    let outputs = std::fs::read_to_string(evidence.join("outputs.jsonl")).expect("outputs");
    let lines: Vec<Value> = outputs
        .lines()
        .map(|l| serde_json::from_str(l).expect("an output line"))
        .collect();
    assert_eq!(lines.len(), prompts);
    for line in &lines {
        assert_eq!(line["finish_reason"], "stop", "{line}");
        assert!(
            serde_json::from_str::<Value>(line["text"].as_str().unwrap_or_default()).is_ok()
                || !line["text"].as_str().unwrap_or_default().is_empty(),
            "{line}"
        );
        assert!(
            line["completion_tokens"].as_u64().is_some_and(|n| n > 0),
            "{line}"
        );
    }

    // Both passes, measured from the judge's side.
    let serving = &m["serving"];
    assert_eq!(serving["apiVersion"], 1);
    assert!(
        serving["readyAfterSeconds"].as_f64().is_some(),
        "{serving:#}"
    );
    let passes = serving["passes"].as_array().expect("passes");
    assert_eq!(passes.len(), 2, "{serving:#}");
    let concurrency: Vec<u64> = passes
        .iter()
        .map(|p| p["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(concurrency, [1, 3]);
    assert_eq!(passes[0]["requests"].as_array().unwrap().len(), prompts);
    assert_eq!(
        passes[1]["requests"].as_array().unwrap().len(),
        prompts.max(3),
        "at least as many requests as the concurrency"
    );
    for pass in passes {
        assert!(
            pass["completionTokensPerSecond"]
                .as_f64()
                .is_some_and(|t| t > 0.0),
            "{pass:#}"
        );
        for r in pass["requests"].as_array().unwrap() {
            assert_eq!(r["status"], 200, "{r}");
            let seconds = r["seconds"].as_f64().expect("seconds");
            let engine = r["engineCompletionSeconds"]
                .as_f64()
                .expect("the engine's time");
            let queued = r["queuedAndTransitSeconds"]
                .as_f64()
                .expect("queued + transit");
            assert!(engine <= seconds + 0.001 && queued >= 0.0, "{r}");
        }
    }
    // The engine generates one sequence at a time: at concurrency 3 a request waits for the ones
    // before it, which only the judge's side of the network shows.
    let max_queued = |p: &Value| {
        p["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["queuedAndTransitSeconds"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    assert!(
        max_queued(&passes[1]) > max_queued(&passes[0]),
        "queueing under load: {:?} vs {:?}",
        max_queued(&passes[0]),
        max_queued(&passes[1])
    );

    let sheet = Command::new(runner())
        .args(["check", "--sheet"])
        .arg(&evidence)
        .output()
        .expect("check --sheet");
    let sheet = String::from_utf8_lossy(&sheet.stdout);
    println!("{sheet}");
    assert!(
        sheet.contains(&format!(
            "End to end, from the judge through {endpoint} (serving API v1)"
        )),
        "{sheet}"
    );
    assert!(
        sheet
            .lines()
            .any(|l| l.starts_with("3 ") && l.contains("answered")),
        "{sheet}"
    );

    // A constraint the engine cannot decode under: refused by the engine, recorded, failed.
    let refused = dir.join("refused");
    let regex_spec = spec(&dir, |a| {
        let first = &mut a["prompts"][0];
        first["structuredOutput"] = json!({"regex": "[a-z ]+"});
    });
    let (code, out) = judge(&regex_spec, &endpoint, &refused, 1);
    assert_ne!(code, 0, "{out}");
    let m = manifest(&refused);
    assert_eq!(m["result"], "Failed");
    let reason = m["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("gave no usable answer")
            && reason.contains("HTTP 400")
            && reason.contains("regex"),
        "{reason}"
    );
    assert_eq!(m["serving"]["passes"].as_array().map(Vec::len), Some(1));
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
