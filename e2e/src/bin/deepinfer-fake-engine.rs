//! `deepinfer-fake-engine`: a STAND-IN for DeepInfer's offline example, for the test bed and the
//! integration tests, where there is no GPU and no checkpoint weights. It runs no model. It reads
//! the prompts file the acceptance runner wrote, prints the load / warm-up event markers, and
//! writes canned outputs per prompt id (docs/acceptance.md describes both files), valid or broken
//! on purpose:
//!
//! - `replay`: each prompt's canned line, byte for byte, in prompt order (ids without a canned
//!   line get no output);
//! - `truncate`: as replay, but each text is cut in half and `finish_reason` is `length` (no EOS);
//! - `crash`: writes the first output, then exits with code 70 as a crashed engine would;
//! - `hang`: prints `loaded`, then never finishes (the runner's timeout must end it);
//! - `probe-api`: as replay, after trying the Kubernetes API from inside the engine's container:
//!   it looks for a service-account token at the standard path and sends requests (with the
//!   token if it found one, else anonymously) to `--probe-namespace`, printing one
//!   `DEEPINFER_PROBE` line per attempt with the HTTP status;
//! - `forge`: a hostile engine. It writes its canned outputs (use failing ones), then a forged
//!   "Passed" summary wherever a summary could be read from (its termination-message file, the
//!   work directory), and kills its parent process (the program that started it) so that nothing
//!   after it can overwrite the forgery;
//! - `link-token`: a hostile engine that writes no outputs but makes the outputs file and its
//!   log links to the service-account token path, hoping that whoever reads them next (and holds
//!   a token there) copies the token into the evidence.
//!
//! Started without `--prompts` and `--output`, as a serving pod's engine (only the serving
//! arguments), it serves instead: `GET /health` on the serve port answers 503 while it "loads"
//! (`--load-seconds S`, default 0) and 200 after, and while the file named by
//! `--unresponsive-file PATH` exists it stops answering (a request's connection is held open
//! without a reply), which is how the test bed makes an engine stop answering its probes. It
//! listens on the pod's address that the bed's node agent gives it (`SIM_POD_LOOPBACK_IP`),
//! else on every address. The acceptance run gets the same serving flags and ignores these two.
//!
//! Inside an engine container it first checks the engine contract's environment
//! (docs/engine-contract.md) and refuses to start when a required variable is missing or the
//! contract version differs; given `RANK_TABLE_FILE`, it waits until that rank table says
//! `completed`. The optional output fields it reports (token counts, cached prefix,
//! active requests, per-request times) are whatever its canned line holds; it measures nothing,
//! but it prints `generation_done` only once the slowest canned `completion_seconds` (at most
//! 10 s) has passed since `warmup_done`, as if the canned requests had run side by side.
//!
//! Each prompt line's `sampling` settings, when present, are printed on stderr (the stand-in
//! samples nothing); a line without them, or with settings it does not understand, is generated
//! all the same.
//!
//! It takes DeepInfer's flags (`--model_name`, `--prompts`, `--output`,
//! `--check_structured_output`), so the acceptance spec's engine command can name it in place of
//! the real engine, and the serving flags the template's `{serving_args}` hands it. It honours
//! one serving flag that breaks structured output: `--max_model_len N` (or `--max-model-len N`)
//! cuts every output text to its first N characters with `finish_reason` `length`, as a context
//! too short for the answer would. Other serving flags (`--max_batch_size 8`, `--x`) change
//! nothing it does: it names them on stderr and ignores them (with the word after a flag that
//! does not start with `-`, taken as its value).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use deepinfer_operator::acceptance::engine::EngineExit;
use deepinfer_operator::acceptance::handoff;

/// Exit code of `--mode crash`.
const CRASH_EXIT_CODE: u8 = 70;
/// Longest the stand-in waits for its canned requests' `completion_seconds` to pass.
const MAX_SIMULATED_SECONDS: f64 = 10.0;

#[derive(Parser, Debug)]
#[command(
    name = "deepinfer-fake-engine",
    about = "Stand-in for DeepInfer's offline example (no model is run)"
)]
struct Args {
    /// Model directory; must exist (as the real engine needs it), it is not read.
    #[arg(long = "model_name", alias = "model-name")]
    model_name: PathBuf,
    /// Prompts file (JSON lines) written by the acceptance runner; without it (and
    /// `--output`) the stand-in serves instead.
    #[arg(long, requires = "output")]
    prompts: Option<PathBuf>,
    /// Outputs file (JSON lines) to write.
    #[arg(long, requires = "prompts")]
    output: Option<PathBuf>,
    /// Accepted for DeepInfer compatibility; the runner does the checking.
    #[arg(long = "check_structured_output", alias = "check-structured-output")]
    check_structured_output: bool,
    /// Canned outputs: a JSON-lines file, or a directory whose `*.jsonl` files are all read
    /// (a mounted ConfigMap).
    #[arg(long, env = "DEEPINFER_FAKE_CANNED")]
    canned: Option<PathBuf>,
    /// What to do.
    #[arg(long, env = "DEEPINFER_FAKE_MODE", value_enum, default_value_t = Mode::Replay)]
    mode: Mode,
    /// Namespace the `probe-api` mode sends its requests to.
    #[arg(long, default_value = "default")]
    probe_namespace: String,
    /// Serving flag: the longest sequence; every output text is cut to this many characters
    /// with `finish_reason` `length`.
    #[arg(long = "max_model_len", alias = "max-model-len")]
    max_model_len: Option<usize>,
    /// Serving flag of the stand-in: `/health` answers 503 for this many seconds after the
    /// start, as while weights load, then 200.
    #[arg(long, default_value_t = 0.0)]
    load_seconds: f64,
    /// Serving flag of the stand-in: while this file exists, `/health` gets no answer (the
    /// connection is held open, as a wedged engine's would be).
    #[arg(long)]
    unresponsive_file: Option<PathBuf>,
}

/// The arguments without the serving flags this stand-in does not model, which it names on
/// stderr: a `--flag` it does not know, with the next word as its value unless that starts
/// with `-` (or the flag is written `--flag=value`).
fn known_args(argv: Vec<String>) -> Vec<String> {
    use clap::CommandFactory as _;
    let command = Args::command();
    let known: Vec<String> = command
        .get_arguments()
        .flat_map(|a| {
            a.get_long()
                .into_iter()
                .chain(a.get_all_aliases().into_iter().flatten())
                .map(|l| format!("--{l}"))
                .collect::<Vec<_>>()
        })
        .chain(["--help".to_string(), "--version".to_string()])
        .collect();
    let mut kept = Vec::with_capacity(argv.len());
    let mut words = argv.into_iter().peekable();
    if let Some(program) = words.next() {
        kept.push(program);
    }
    while let Some(word) = words.next() {
        let flag = word.split('=').next().unwrap_or_default();
        if !word.starts_with("--") || known.iter().any(|k| k == flag) {
            kept.push(word);
            continue;
        }
        let value = (!word.contains('='))
            .then(|| words.next_if(|next| !next.starts_with('-')))
            .flatten();
        eprintln!(
            "deepinfer-fake-engine: serving flag {word}{} changes nothing in the stand-in; ignored",
            value.map(|v| format!(" {v}")).unwrap_or_default()
        );
    }
    kept
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Replay,
    Truncate,
    Crash,
    Hang,
    ProbeApi,
    Forge,
    LinkToken,
}

fn main() -> ExitCode {
    match run(&Args::parse_from(known_args(std::env::args().collect()))) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("deepinfer-fake-engine: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// An engine that prints what it was given: the value of the variable `DEEPINFER_FAKE_ECHO_ENV`
/// names goes to stdout and stderr (a Secret an engine logs must still never reach the evidence).
fn echo_env() {
    let Ok(name) = std::env::var("DEEPINFER_FAKE_ECHO_ENV") else {
        return;
    };
    let value = std::env::var(&name).unwrap_or_default();
    println!("deepinfer-fake-engine: {name}={value}");
    eprintln!("deepinfer-fake-engine: {name} is {value}");
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    eprintln!(
        "deepinfer-fake-engine: stand-in engine, no model is run (mode {:?})",
        args.mode
    );
    anyhow::ensure!(
        args.model_name.is_dir(),
        "model directory {} does not exist",
        args.model_name.display()
    );
    check_contract_env()?;
    echo_env();
    check_peer_wiring()?;
    wait_for_rank_table()?;
    let (Some(prompts), Some(output)) = (&args.prompts, &args.output) else {
        return serve(args);
    };
    let canned = load_canned(
        args.canned
            .as_deref()
            .context("--canned (or DEEPINFER_FAKE_CANNED) is required with --prompts")?,
    )?;
    let ids = prompt_ids(prompts)?;
    println!("DEEPINFER_EVENT loaded");
    if args.mode == Mode::ProbeApi {
        probe_api(&args.probe_namespace)?;
    }
    if args.mode == Mode::Hang {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    println!("DEEPINFER_EVENT warmup_done");
    let warm = std::time::Instant::now();
    if args.mode == Mode::LinkToken {
        return link_token(output);
    }
    let mut out =
        std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?;
    for (n, id) in ids.iter().enumerate() {
        let Some(line) = canned.get(id) else {
            eprintln!("deepinfer-fake-engine: no canned output for prompt {id:?}; none written");
            continue;
        };
        let line = if args.mode == Mode::Truncate {
            truncated(line)?
        } else {
            line.clone()
        };
        let line = match args.max_model_len {
            Some(limit) => cut_to(&line, limit)?,
            None => line,
        };
        out.write_all(&line)?;
        out.write_all(b"\n")?;
        out.flush()?;
        if args.mode == Mode::Crash && n == 0 {
            eprintln!("deepinfer-fake-engine: simulated crash: RuntimeError: CUDA error: an illegal memory access was encountered");
            return Ok(ExitCode::from(CRASH_EXIT_CODE));
        }
    }
    // The canned requests ran side by side: generation ends when the slowest one completes.
    let slowest = ids
        .iter()
        .filter_map(|id| canned.get(id))
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter_map(|v| v["completion_seconds"].as_f64())
        .filter(|s| s.is_finite() && *s > 0.0)
        .fold(0.0, f64::max);
    std::thread::sleep(
        Duration::from_secs_f64(slowest.min(MAX_SIMULATED_SECONDS)).saturating_sub(warm.elapsed()),
    );
    println!("DEEPINFER_EVENT generation_done");
    if args.mode == Mode::Forge {
        forge(output)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The variable naming the address the stand-in serves on: the pod's address on the host's
/// loopback, which the test bed's node agent gives executed containers and probes (pods share
/// the host's network there). Without it the stand-in listens on every address.
const POD_LOOPBACK_ENV: &str = "SIM_POD_LOOPBACK_IP";
/// Longest request head the serving stand-in reads.
const REQUEST_MAX_BYTES: usize = 8192;

/// Serves the engine contract's health endpoint on `DEEPINFER_SERVE_PORT` (default 8000) until
/// the process is ended: `GET /health` answers 503 during `--load-seconds`, then 200; while
/// `--unresponsive-file` exists a request gets no answer; any other path is 404.
fn serve(args: &Args) -> anyhow::Result<ExitCode> {
    let host = std::env::var(POD_LOOPBACK_ENV).unwrap_or_else(|_| "0.0.0.0".into());
    let port: u16 = match std::env::var(deepinfer_operator::contract::env::SERVE_PORT) {
        Ok(port) => port
            .parse()
            .with_context(|| format!("serve port {port:?}"))?,
        Err(_) => 8000,
    };
    let listener = std::net::TcpListener::bind((host.as_str(), port))
        .with_context(|| format!("listening on {host}:{port}"))?;
    println!("deepinfer-fake-engine: serving GET /health on {host}:{port}");
    let started = std::time::Instant::now();
    let load = Duration::from_secs_f64(args.load_seconds.max(0.0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let loading = started.elapsed() < load;
        let unresponsive = args.unresponsive_file.clone();
        std::thread::spawn(move || answer(stream, loading, unresponsive.as_deref()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Answers one connection's request (see [`serve`]).
fn answer(mut stream: std::net::TcpStream, loading: bool, unresponsive: Option<&Path>) {
    use std::io::Read as _;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REQUEST_MAX_BYTES {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    if unresponsive.is_some_and(Path::exists) {
        // Held until the client gives up.
        while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
        return;
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next(), words.next());
    let (status, body) = match (method, path) {
        (Some("GET"), Some("/health")) if loading => ("503 Service Unavailable", "loading\n"),
        (Some("GET"), Some("/health")) => ("200 OK", "ok\n"),
        _ => ("404 Not Found", "not found\n"),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Checks the engine contract's environment (docs/engine-contract.md) as an engine adapter
/// would: inside an engine container (`DEEPINFER_CONTRACT_VERSION` set) the version must be the
/// one this engine implements and every required variable must be there, else it refuses to
/// start naming what is wrong. Run by hand or by `accept` outside a pod, there is no contract
/// environment and it says so.
fn check_contract_env() -> anyhow::Result<()> {
    use deepinfer_operator::contract;
    let Ok(version) = std::env::var(contract::env::CONTRACT_VERSION) else {
        eprintln!(
            "deepinfer-fake-engine: {} is not set: not started by the operator, the contract's environment is not checked",
            contract::env::CONTRACT_VERSION
        );
        return Ok(());
    };
    anyhow::ensure!(
        version == contract::VERSION,
        "{} is {version:?}; this engine implements engine contract version {}",
        contract::env::CONTRACT_VERSION,
        contract::VERSION
    );
    let missing = contract::missing_env(|name| std::env::var(name).ok());
    anyhow::ensure!(
        missing.is_empty(),
        "the engine contract's required environment is incomplete: {} not set",
        missing.join(", ")
    );
    let var = |name| std::env::var(name).unwrap_or_default();
    println!(
        "DEEPINFER_CONTRACT version={version} role={} group={} rank={} pods={} world={} peers={}",
        var(contract::env::ROLE),
        var(contract::env::GROUP),
        var(contract::env::RANK),
        var(contract::env::NUM_PODS),
        var(contract::env::WORLD_SIZE),
        var(contract::env::PEERS),
    );
    Ok(())
}

/// As a decode engine of a disaggregated deployment must: given an upstream role's Service
/// (`DEEPINFER_PREFILL_SERVICE`, `DEEPINFER_VISION_SERVICE`), it reads the endpoints file
/// (`DEEPINFER_PEER_ENDPOINTS_FILE`) and refuses to start unless the file lists at least one
/// leader of each such role; it prints `DEEPINFER_PEERS <role>=<service> endpoints=<list>` per
/// role, which the acceptance evidence keeps in the engine log. It connects to nothing (the
/// bed has no pod network).
fn check_peer_wiring() -> anyhow::Result<()> {
    use deepinfer_operator::contract::env;
    let upstream: Vec<(&str, String)> = [
        ("prefill", env::PREFILL_SERVICE),
        ("vision", env::VISION_SERVICE),
    ]
    .into_iter()
    .filter_map(|(role, var)| Some((role, std::env::var(var).ok()?)))
    .collect();
    if upstream.is_empty() {
        return Ok(());
    }
    let path = std::env::var(env::PEER_ENDPOINTS_FILE).with_context(|| {
        format!(
            "{} is not set beside the upstream roles' Services",
            env::PEER_ENDPOINTS_FILE
        )
    })?;
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the endpoints file {path}"))?;
    let file: std::collections::BTreeMap<String, Vec<String>> = serde_json::from_str(&text)
        .with_context(|| {
            format!("the endpoints file {path} is not a JSON map of role to endpoints")
        })?;
    for (role, service) in upstream {
        let listed = file.get(role).filter(|l| !l.is_empty()).with_context(|| {
            format!("the endpoints file {path} lists no {role} leader; the decode engine cannot start without one")
        })?;
        println!(
            "DEEPINFER_PEERS {role}={service} endpoints={}",
            listed.join(",")
        );
    }
    Ok(())
}

/// As the contract asks of an engine given `RANK_TABLE_FILE`: waits until the rank table says
/// `"status": "completed"` (re-reading it every 0.2 s, as a ConfigMap volume is updated in
/// place) before anything collective starts; the acceptance timeout bounds the wait.
fn wait_for_rank_table() -> anyhow::Result<()> {
    let Ok(path) = std::env::var(deepinfer_operator::contract::env::RANK_TABLE_FILE) else {
        return Ok(());
    };
    let mut said = false;
    loop {
        let status = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|v| v["status"].as_str().map(str::to_string));
        if status.as_deref() == Some("completed") {
            println!("DEEPINFER_RANK_TABLE completed ({path})");
            return Ok(());
        }
        if !said {
            println!(
                "DEEPINFER_RANK_TABLE waiting for {path} to be completed (status {})",
                status.as_deref().unwrap_or("unreadable")
            );
            said = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Where a container's service-account token is mounted when it has one.
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Tries the API from inside the container: reads the token if there is one, then lists and
/// creates objects in `namespace`. Prints `DEEPINFER_PROBE token=present|absent` and one
/// `DEEPINFER_PROBE <verb> <resource> -> <status>` line per request (`error: …` when no HTTP
/// answer came).
fn probe_api(namespace: &str) -> anyhow::Result<()> {
    let token = std::fs::read_to_string(TOKEN_PATH)
        .ok()
        .filter(|t| !t.trim().is_empty());
    println!(
        "DEEPINFER_PROBE token={}",
        if token.is_some() { "present" } else { "absent" }
    );
    let host = std::env::var("KUBERNETES_SERVICE_HOST").context("KUBERNETES_SERVICE_HOST")?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").context("KUBERNETES_SERVICE_PORT")?;
    let url: http::Uri = format!("https://{host}:{port}").parse()?;
    let mut config = kube::Config::new(url);
    config.accept_invalid_certs = true;
    if let Some(token) = token {
        config.auth_info.token = Some(token.trim().to_string().into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = kube::Client::try_from(config)?;
        let base = format!("/api/v1/namespaces/{namespace}");
        let configmap = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "probe-written-by-the-engine"}, "data": {"x": "1"}});
        let requests = [
            (
                "list",
                "configmaps",
                http::Method::GET,
                format!("{base}/configmaps"),
                None,
            ),
            (
                "create",
                "configmaps",
                http::Method::POST,
                format!("{base}/configmaps"),
                Some(configmap),
            ),
            (
                "list",
                "secrets",
                http::Method::GET,
                format!("{base}/secrets"),
                None,
            ),
            (
                "list",
                "pods",
                http::Method::GET,
                format!("{base}/pods"),
                None,
            ),
            (
                "list",
                "deepinferdeployments",
                http::Method::GET,
                format!("/apis/deepinfer.io/v1alpha1/namespaces/{namespace}/deepinferdeployments"),
                None,
            ),
        ];
        for (verb, resource, method, path, body) in requests {
            let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(body)?;
            let outcome = match client.send(request.map(Into::into)).await {
                Ok(response) => response.status().as_u16().to_string(),
                Err(err) => format!("error: {err}"),
            };
            println!("DEEPINFER_PROBE {verb} {resource} -> {outcome}");
        }
        anyhow::Ok(())
    })
}

/// Replaces the outputs file and the work directory's log with links to the token path.
fn link_token(output: &Path) -> anyhow::Result<ExitCode> {
    let mut links = vec![output.to_path_buf()];
    if let Some(dir) = output.parent() {
        links.push(dir.join("engine.log"));
    }
    for link in &links {
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(TOKEN_PATH, link)
            .with_context(|| format!("linking {}", link.display()))?;
        eprintln!(
            "deepinfer-fake-engine: {} now links to {TOKEN_PATH}",
            link.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A summary claiming that every prompt passed, as the acceptance runner would write it.
const FORGED_SUMMARY: &str = r#"{"result":"Passed","prompts":4,"passed":4,"failedPrompts":[],"evidence":"","reason":"all 4 prompts passed","revision":""}"#;

/// Writes the forged summary wherever a summary could be read from, then kills the parent.
fn forge(output: &Path) -> anyhow::Result<()> {
    let mut targets = vec![PathBuf::from("/dev/termination-log")];
    if let Some(dir) = output.parent() {
        targets.extend(["summary.json", "termination-log"].map(|f| dir.join(f)));
    }
    for target in &targets {
        match std::fs::write(target, FORGED_SUMMARY) {
            Ok(()) => eprintln!(
                "deepinfer-fake-engine: forged a summary in {}",
                target.display()
            ),
            Err(err) => eprintln!(
                "deepinfer-fake-engine: cannot forge {}: {err}",
                target.display()
            ),
        }
    }
    // The engine side's report, claiming a clean exit, in place of the one its parent would
    // write: the judge then reads it at once instead of waiting for a lost heartbeat.
    if let Some(dir) = output.parent() {
        let report = handoff::EngineReport {
            command: vec!["forged".into()],
            env: None,
            exit: EngineExit::Exited { code: 0 },
            timeout_seconds: 1800,
            timings: Default::default(),
            devices: Default::default(),
            log_dropped: 0,
            error: None,
            serving: None,
        };
        std::fs::write(dir.join(handoff::REPORT_FILE), serde_json::to_vec(&report)?)?;
        eprintln!("deepinfer-fake-engine: forged the engine report");
    }
    let parent = std::os::unix::process::parent_id();
    eprintln!("deepinfer-fake-engine: killing its parent process {parent}");
    let _ = std::process::Command::new("kill")
        .args(["-9", &parent.to_string()])
        .status();
    Ok(())
}

/// Prompt ids in file order.
fn prompt_ids(path: &Path) -> anyhow::Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l)
                .with_context(|| format!("{} line {}", path.display(), i + 1))?;
            let id = v["id"]
                .as_str()
                .map(str::to_string)
                .with_context(|| format!("{} line {}: no string id", path.display(), i + 1))?;
            report_sampling(&id, v.get("sampling"));
            Ok(id)
        })
        .collect()
}

/// Prints the sampling settings a prompt line asks for. The stand-in samples nothing (its
/// outputs are canned), so it only shows what it was handed; a line without `sampling`, or with
/// one it does not understand, is generated all the same.
fn report_sampling(id: &str, sampling: Option<&serde_json::Value>) {
    use deepinfer_operator::acceptance::engine_io::SamplingParams;
    let Some(value) = sampling else {
        eprintln!("deepinfer-fake-engine: prompt {id:?}: no sampling settings; engine defaults");
        return;
    };
    match serde_json::from_value::<SamplingParams>(value.clone()) {
        Ok(s) => eprintln!(
            "deepinfer-fake-engine: prompt {id:?}: sampling temperature={} top_p={} top_k={} seed={} repetition_penalty={}",
            s.temperature, s.top_p, s.top_k, s.seed, s.repetition_penalty
        ),
        Err(err) => {
            eprintln!("deepinfer-fake-engine: prompt {id:?}: sampling {value} not understood ({err}); ignored")
        }
    }
}

/// Canned lines by id, kept as the exact bytes of each line (the first line per id wins).
fn load_canned(path: &Path) -> anyhow::Result<HashMap<String, Vec<u8>>> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl") && p.is_file())
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut canned = HashMap::new();
    for file in files {
        let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let v: serde_json::Value = serde_json::from_slice(line)
                .with_context(|| format!("{} line {}", file.display(), i + 1))?;
            let id = v["id"]
                .as_str()
                .with_context(|| format!("{} line {}: no string id", file.display(), i + 1))?;
            canned
                .entry(id.to_string())
                .or_insert_with(|| line.to_vec());
        }
    }
    Ok(canned)
}

/// The line with its text cut in half and `finish_reason` set to `length`.
fn truncated(line: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(line)?;
    if let Some(text) = v["text"].as_str() {
        let half: String = text.chars().take(text.chars().count() / 2).collect();
        v["text"] = half.into();
    }
    if let Some(tokens) = v["completion_tokens"].as_u64() {
        v["completion_tokens"] = (tokens / 2).into();
    }
    v["finish_reason"] = "length".into();
    Ok(serde_json::to_vec(&v)?)
}

/// `--max_model_len N`: the text cut to its first `limit` characters, ended by the length limit
/// (a line whose text already fits is kept as it is).
fn cut_to(line: &[u8], limit: usize) -> anyhow::Result<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(line)?;
    let Some(text) = v["text"].as_str() else {
        return Ok(line.to_vec());
    };
    if text.chars().count() <= limit {
        return Ok(line.to_vec());
    }
    let cut: String = text.chars().take(limit).collect();
    v["text"] = cut.into();
    v["finish_reason"] = "length".into();
    Ok(serde_json::to_vec(&v)?)
}
