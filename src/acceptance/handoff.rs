//! The engine side of an acceptance run and its hand-off to the judge through a shared
//! directory.
//!
//! In the acceptance pod the engine container runs `deepinfer-runner run-engine` (injected into
//! the engine image) with no API token: it writes the prompts file, runs the engine command with
//! its timeout, and leaves in the shared directory the outputs, the log tail and a report
//! (`engine-report.json`, written last, by rename). The judge container (`accept --engine-dir`)
//! waits for that report and judges. Everything in the directory comes from the engine's side
//! and is treated as hostile input: files are read without following symlinks, only when they
//! are regular files, and within size caps; the report's exit status and timings are recorded as
//! evidence, while the verdict rests on the outputs the judge checks itself.
//!
//! Without a shared directory (`accept` alone, for local runs and tests) the same engine side
//! runs in-process.

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use serde::{Deserialize, Serialize};

use super::devices::{self, DeviceInventory};
use super::engine::{self, EngineExit, Timings, LOG_TAIL_BYTES};
use super::engine_io;
use crate::api::AcceptanceSpec;

/// The prompts file the engine reads.
pub const PROMPTS_FILE: &str = "prompts.jsonl";
/// The outputs file the engine writes.
pub const OUTPUTS_FILE: &str = "outputs.jsonl";
/// Written when the engine side starts.
pub const STARTED_FILE: &str = "engine-started";
/// Rewritten with a counter every `HEARTBEAT_EVERY` while the engine side runs.
pub const HEARTBEAT_FILE: &str = "engine-heartbeat";
/// The tail of the engine's log.
pub const LOG_FILE: &str = "engine.log";
/// The engine side's report, written last (by rename): the judge's signal that the engine is done.
pub const REPORT_FILE: &str = "engine-report.json";

/// Largest outputs file the judge reads; a larger one fails the run.
pub const MAX_OUTPUTS_BYTES: u64 = 64 * 1024 * 1024;
/// Largest report the judge reads.
const MAX_REPORT_BYTES: u64 = 1024 * 1024;
/// How often the engine side beats.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How often the judge looks at the shared directory.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// `run-engine` arguments: the engine container's entrypoint.
#[derive(Args, Debug, Clone)]
pub struct RunEngineArgs {
    /// YAML of `spec.acceptance` (prompts inline), as `accept` takes it.
    #[arg(long)]
    pub spec_file: PathBuf,
    /// The SHA-256 (hex) the spec file must have, as `accept` takes it.
    #[arg(long)]
    pub spec_sha256: Option<String>,
    /// Local checkpoint directory; `{model_dir}`.
    #[arg(long)]
    pub model_dir: PathBuf,
    /// The directory shared with the judge: prompts, outputs, log and report; the engine's cwd.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The serving configuration the template's placeholders stand for.
    #[command(flatten)]
    pub serving: ServingArgs,
}

/// The serving command and arguments of the judged role (what `{serving_command}` and
/// `{serving_args}` stand for) and the variables whose values are never recorded. The operator
/// passes them to `run-engine` as the serving pod builder makes them.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ServingArgs {
    /// One word of the serving command (`spec.runtime.command`), in order; repeat it for each
    /// word. None: the image's entrypoint serves and `{serving_command}` is no argument.
    #[arg(
        long = "serving-command",
        value_name = "WORD",
        allow_hyphen_values = true
    )]
    pub serving_command: Vec<String>,
    /// A variable whose value the report records as `<redacted>` (one from a Secret, a ConfigMap
    /// or a resource field); repeat it for each name.
    #[arg(long = "redact-env", value_name = "NAME")]
    pub redact_env: Vec<String>,
    /// The serving container's arguments, after `--`; `{serving_args}`. None given:
    /// `--model_name <model dir>`, the arguments of a spec without runtime or role arguments.
    #[arg(last = true, value_name = "SERVING_ARG")]
    pub serving_args: Vec<String>,
}

/// Flag of `run-engine` carrying one word of the serving command.
pub const SERVING_COMMAND_FLAG: &str = "--serving-command";
/// Flag of `run-engine` naming a variable whose value is redacted.
pub const REDACT_ENV_FLAG: &str = "--redact-env";

impl ServingArgs {
    /// `{serving_args}`: the given arguments, or `--model_name <model_dir>` when none were given.
    pub fn args_or_default(&self, model_dir: &Path) -> Vec<String> {
        if self.serving_args.is_empty() {
            vec![
                "--model_name".to_string(),
                model_dir.to_string_lossy().into_owned(),
            ]
        } else {
            self.serving_args.clone()
        }
    }
}

/// The judged engine's environment as the runner hands it over (`vars`, then `HF_HUB_OFFLINE=1`
/// as the runner sets it) and its argv, with the values of `redact` and every occurrence of such
/// a value elsewhere written as [`crate::contract::REDACTED`].
pub fn redacted_record(
    vars: impl IntoIterator<Item = (String, String)>,
    argv: &[String],
    redact: &[String],
) -> (Vec<String>, BTreeMap<String, String>) {
    use crate::contract::REDACTED;
    let mut env: BTreeMap<String, String> = vars.into_iter().collect();
    env.insert(crate::contract::env::HF_HUB_OFFLINE.to_string(), "1".into());
    let secrets = secret_values(&env, redact);
    let scrub = |text: &str| {
        secrets.iter().fold(text.to_string(), |t, secret| {
            t.replace(secret.as_str(), REDACTED)
        })
    };
    for (name, value) in env.iter_mut() {
        *value = if redact.contains(name) {
            REDACTED.to_string()
        } else {
            scrub(value)
        };
    }
    (argv.iter().map(|a| scrub(a)).collect(), env)
}

/// The non-empty values of the variables named in `redact`, longest first (so that a value
/// holding another is replaced whole).
fn secret_values(env: &BTreeMap<String, String>, redact: &[String]) -> Vec<String> {
    let mut secrets: Vec<String> = redact
        .iter()
        .filter_map(|name| env.get(name).cloned())
        .filter(|value| !value.is_empty())
        .collect();
    secrets.sort_by_key(|v| std::cmp::Reverse(v.len()));
    secrets.dedup();
    secrets
}

/// `bytes` with every occurrence of each of `secrets` written as [`crate::contract::REDACTED`].
pub fn scrub_bytes(bytes: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for secret in secrets.iter().map(String::as_bytes) {
        if secret.is_empty() || !out.windows(secret.len()).any(|w| w == secret) {
            continue;
        }
        let mut next = Vec::with_capacity(out.len());
        let mut i = 0;
        while i < out.len() {
            if out[i..].starts_with(secret) {
                next.extend_from_slice(crate::contract::REDACTED.as_bytes());
                i += secret.len();
            } else {
                next.push(out[i]);
                i += 1;
            }
        }
        out = next;
    }
    out
}

/// What the engine side reports to the judge.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EngineReport {
    /// The rendered command: the judged engine's effective argv, redacted.
    pub command: Vec<String>,
    /// The judged engine's effective environment, redacted; `None` when the engine was not run
    /// (or a report of an older runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// How the engine ended.
    pub exit: EngineExit,
    /// The timeout applied.
    pub timeout_seconds: u64,
    /// Phase timings from the engine's markers.
    pub timings: Timings,
    /// The devices the engine's container sees.
    pub devices: DeviceInventory,
    /// Bytes of log dropped before the kept tail.
    pub log_dropped: u64,
    /// Set when the engine could not be run at all (no model directory, work directory not
    /// writable): the run is a runner error, not a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the judge measured of a serving endpoint (`accept --endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<super::serving::ServingMeasurement>,
}

/// Longest string of the engine's report kept (argument, variable, device field, reason).
pub const REPORT_STRING_BYTES: usize = 512;
/// Most entries of each list or map of the engine's report kept.
pub const REPORT_ENTRIES: usize = 64;
/// Longest raw `npu-smi` output kept.
const REPORT_NPU_SMI_BYTES: usize = 16 * 1024;

impl EngineReport {
    /// The report with every string and every list cut to a bound, each cut marked in the text
    /// (see [`super::manifest::shorten`]; a list keeps its first entries and one entry saying how
    /// many were dropped). The report is written by the engine's container and read as hostile
    /// input: whatever it holds, what reaches the manifest stays small, so the evidence write
    /// never fails for its size.
    pub fn capped(mut self) -> Self {
        let cut = |s: &mut String| {
            if s.len() > REPORT_STRING_BYTES {
                *s = super::manifest::shorten(s, REPORT_STRING_BYTES);
            }
        };
        let cut_map = |map: &mut BTreeMap<String, String>| {
            let dropped = map.len().saturating_sub(REPORT_ENTRIES);
            *map = std::mem::take(map)
                .into_iter()
                .take(REPORT_ENTRIES)
                .map(|(mut k, mut v)| {
                    cut(&mut k);
                    cut(&mut v);
                    (k, v)
                })
                .collect();
            if dropped > 0 {
                map.insert("…".into(), format!("[{dropped} more entries dropped]"));
            }
        };
        let dropped = self.command.len().saturating_sub(REPORT_ENTRIES);
        self.command.truncate(REPORT_ENTRIES);
        self.command.iter_mut().for_each(cut);
        if dropped > 0 {
            self.command
                .push(format!("[{dropped} more arguments dropped]"));
        }
        if let Some(env) = self.env.as_mut() {
            cut_map(env);
        }
        match &mut self.exit {
            EngineExit::SpawnFailed { error } => cut(error),
            EngineExit::Lost { reason } => cut(reason),
            EngineExit::Served { endpoint, refused } => {
                cut(endpoint);
                refused.truncate(REPORT_ENTRIES);
                refused.iter_mut().for_each(cut);
            }
            EngineExit::Exited { .. }
            | EngineExit::Signalled { .. }
            | EngineExit::TimedOut { .. } => {}
        }
        let markers = std::mem::take(&mut self.timings.markers);
        self.timings.markers = markers
            .into_iter()
            .take(REPORT_ENTRIES)
            .map(|(mut k, v)| {
                cut(&mut k);
                (k, v)
            })
            .collect();
        let devices = &mut self.devices;
        cut(&mut devices.source);
        devices.devices.truncate(REPORT_ENTRIES);
        for d in &mut devices.devices {
            cut(&mut d.index);
            cut(&mut d.name);
            cut(&mut d.uuid);
            cut(&mut d.memory_total);
        }
        if let Some(raw) = devices.npu_smi.as_mut() {
            if raw.len() > REPORT_NPU_SMI_BYTES {
                *raw = super::manifest::shorten(raw, REPORT_NPU_SMI_BYTES);
            }
        }
        cut_map(&mut devices.visible_devices);
        if let Some(error) = self.error.as_mut() {
            cut(error);
        }
        self
    }
}

/// What the judge has of the engine's run.
#[derive(Debug, Clone)]
pub struct EngineSide {
    /// The report.
    pub report: EngineReport,
    /// The log tail.
    pub log: Vec<u8>,
    /// The outputs file; `None` when there is none or it was not read.
    pub outputs: Option<Vec<u8>>,
    /// Why an outputs file that exists was not read (not a regular file, a link, too large).
    pub outputs_unread: Option<String>,
}

/// The run's timeout from the spec (at least one second).
pub fn timeout_of(spec: &AcceptanceSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.timeout_seconds).unwrap_or(1).max(1))
}

fn failed_report(error: String, timeout: Duration) -> EngineReport {
    EngineReport {
        command: Vec::new(),
        env: None,
        exit: EngineExit::SpawnFailed {
            error: error.clone(),
        },
        timeout_seconds: timeout.as_secs(),
        timings: Timings::default(),
        devices: DeviceInventory::default(),
        log_dropped: 0,
        error: Some(error),
        serving: None,
    }
}

/// Writes the prompts, runs the engine command in `work_dir` and returns its report and log tail.
pub async fn run_engine(
    spec: &AcceptanceSpec,
    model_dir: &Path,
    work_dir: &Path,
    serving: &ServingArgs,
) -> (EngineReport, Vec<u8>) {
    let timeout = timeout_of(spec);
    if !model_dir.is_dir() {
        let error = format!("model directory {} does not exist", model_dir.display());
        return (failed_report(error, timeout), Vec::new());
    }
    let prompts_file = work_dir.join(PROMPTS_FILE);
    let outputs_file = work_dir.join(OUTPUTS_FILE);
    if let Err(err) = prepare_work_dir(work_dir, &prompts_file, &outputs_file, spec) {
        let error = format!("work directory {}: {err:#}", work_dir.display());
        return (failed_report(error, timeout), Vec::new());
    }
    let template: Vec<String> = match &spec.engine {
        Some(engine) => engine.command.clone(),
        None => engine::DEFAULT_COMMAND
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    if let Some(problem) = engine::template_problem(&template) {
        let error = format!("spec.acceptance.engine.command {problem}");
        return (failed_report(error, timeout), Vec::new());
    }
    let serving_args = serving.args_or_default(model_dir);
    let command = engine::render_command(
        &template,
        &engine::TemplateInputs {
            model_dir,
            prompts_file: &prompts_file,
            outputs_file: &outputs_file,
            serving_command: &serving.serving_command,
            serving_args: &serving_args,
        },
    );
    let devices = devices::inventory().await;
    let run = engine::run(&command, work_dir, timeout).await;
    let vars: BTreeMap<String, String> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    // A secret the engine echoed never reaches the evidence: not in its log, not in its outputs.
    let secrets = secret_values(&vars, &serving.redact_env);
    if let Ok(outputs) = std::fs::read(&outputs_file) {
        let scrubbed = scrub_bytes(&outputs, &secrets);
        if scrubbed != outputs {
            let _ = write_atomically(&outputs_file, &scrubbed);
        }
    }
    let (argv, env) = redacted_record(vars, &command, &serving.redact_env);
    let report = EngineReport {
        command: argv,
        env: Some(env),
        exit: run.exit,
        timeout_seconds: timeout.as_secs(),
        timings: run.timings,
        devices,
        log_dropped: run.log.dropped,
        error: None,
        serving: None,
    };
    (report, scrub_bytes(&run.log.to_vec(), &secrets))
}

fn prepare_work_dir(
    dir: &Path,
    prompts_file: &Path,
    outputs_file: &Path,
    spec: &AcceptanceSpec,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(prompts_file, engine_io::prompts_jsonl(spec)?)?;
    match std::fs::remove_file(outputs_file) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
        _ => Ok(()),
    }
}

/// `run-engine`: the engine container's entrypoint. Returns 0 once the report is written, 2 when
/// it could not be.
pub async fn run_engine_side(args: &RunEngineArgs) -> i32 {
    match engine_side(args).await {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("deepinfer-runner run-engine: {err:#}");
            2
        }
    }
}

async fn engine_side(args: &RunEngineArgs) -> anyhow::Result<()> {
    let dir = &args.work_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(STARTED_FILE), b"started\n")
        .with_context(|| format!("writing {}", dir.join(STARTED_FILE).display()))?;
    let heartbeat = tokio::spawn(beat(dir.join(HEARTBEAT_FILE)));
    let (report, log) =
        match super::spec_file::read_pinned(&args.spec_file, args.spec_sha256.as_deref())
            .and_then(|text| super::spec_file::parse_spec(&text))
        {
            Ok(spec) => run_engine(&spec, &args.model_dir, dir, &args.serving).await,
            Err(err) => (
                failed_report(format!("acceptance spec: {err:#}"), Duration::from_secs(1)),
                Vec::new(),
            ),
        };
    heartbeat.abort();
    write_atomically(&dir.join(LOG_FILE), &log)?;
    write_atomically(&dir.join(REPORT_FILE), &serde_json::to_vec(&report)?)?;
    Ok(())
}

async fn beat(path: PathBuf) {
    let mut n: u64 = 0;
    loop {
        n += 1;
        if let Err(err) = tokio::fs::write(&path, format!("{n}\n")).await {
            eprintln!(
                "deepinfer-runner run-engine: heartbeat {}: {err}",
                path.display()
            );
        }
        tokio::time::sleep(HEARTBEAT_EVERY).await;
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

/// How long the judge waits for the engine side.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// For the engine side to start (image pull, device allocation).
    pub start: Duration,
    /// After it started: the spec's timeout plus this grace for the report.
    pub grace: Duration,
    /// A heartbeat older than this, after the start, means the engine side is gone.
    pub stale: Duration,
}

/// Waits for the engine side's report in `dir` and reads what it left. `Err` names why no report
/// came (the run then fails with that reason).
pub async fn wait_for_engine(
    dir: &Path,
    timeout: Duration,
    patience: Patience,
) -> Result<EngineSide, String> {
    let began = Instant::now();
    let mut started: Option<Instant> = None;
    let mut beat: (Option<Vec<u8>>, Instant) = (None, Instant::now());
    loop {
        if let Some(report) = read_untrusted(&dir.join(REPORT_FILE), MAX_REPORT_BYTES)
            .map_err(|e| format!("engine report: {e}"))?
        {
            let report: EngineReport = serde_json::from_slice(&report)
                .map_err(|e| format!("engine report {REPORT_FILE} is not valid: {e}"))?;
            return Ok(collect(dir, report));
        }
        let now = Instant::now();
        if started.is_none() && dir.join(STARTED_FILE).exists() {
            started = Some(now);
            beat.1 = now;
        }
        match started {
            None if now.duration_since(began) > patience.start => {
                return Err(format!(
                    "the engine container did not start within {} s",
                    patience.start.as_secs()
                ))
            }
            Some(at) if now.duration_since(at) > timeout + patience.grace => {
                return Err(format!(
                    "the engine container did not report within {} s of starting (timeout {} s)",
                    (timeout + patience.grace).as_secs(),
                    timeout.as_secs()
                ))
            }
            Some(_) => {
                let current = read_untrusted(&dir.join(HEARTBEAT_FILE), 64).ok().flatten();
                if current.is_some() && current != beat.0 {
                    beat = (current, now);
                } else if now.duration_since(beat.1) > patience.stale {
                    return Err(format!(
                        "the engine container stopped without reporting (no heartbeat for {} s)",
                        patience.stale.as_secs()
                    ));
                }
            }
            None => {}
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The outputs and log the engine side left beside its report. An outputs file that cannot be
/// read is recorded as absent and named in the log.
pub fn collect(dir: &Path, report: EngineReport) -> EngineSide {
    let log = read_untrusted_tail(&dir.join(LOG_FILE), LOG_TAIL_BYTES as u64)
        .ok()
        .flatten()
        .unwrap_or_default();
    beside(dir, report, log)
}

/// The report (cut to its bounds, [`EngineReport::capped`]) and log with the outputs file in
/// `dir`.
pub fn beside(dir: &Path, report: EngineReport, mut log: Vec<u8>) -> EngineSide {
    let report = report.capped();
    let (outputs, outputs_unread) = match read_untrusted(&dir.join(OUTPUTS_FILE), MAX_OUTPUTS_BYTES)
    {
        Ok(outputs) => (outputs, None),
        Err(err) => {
            log.extend_from_slice(
                format!("[deepinfer-operator: {OUTPUTS_FILE} not read: {err}]\n").as_bytes(),
            );
            (None, Some(err.to_string()))
        }
    };
    EngineSide {
        report,
        log,
        outputs,
        outputs_unread,
    }
}

fn open_untrusted(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) if err.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            return Err(std::io::Error::other(format!(
                "{} is a symbolic link (not followed)",
                path.display()
            )))
        }
        Err(err) => return Err(err),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(Some(file))
}

/// Reads a regular file written by the engine's side: no symlinks, no FIFOs or devices, at most
/// `max` bytes (more is an error). `None` when it does not exist.
pub fn read_untrusted(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let Some(file) = open_untrusted(path)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "{} is larger than {max} bytes",
            path.display()
        )));
    }
    Ok(Some(bytes))
}

/// The last `max` bytes of a regular file written by the engine's side.
fn read_untrusted_tail(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let Some(mut file) = open_untrusted(path)? else {
        return Ok(None);
    };
    let len = file.metadata()?.len();
    file.seek(std::io::SeekFrom::Start(len.saturating_sub(max)))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_string_and_list_of_the_engine_report_is_capped() {
        let long = "x".repeat(100_000);
        let many: BTreeMap<String, String> = (0..1000)
            .map(|i| (format!("{i}{long}"), long.clone()))
            .collect();
        let report = EngineReport {
            command: vec![long.clone(); 1000],
            env: Some(many.clone()),
            exit: EngineExit::Lost {
                reason: long.clone(),
            },
            timeout_seconds: 1,
            timings: Timings {
                markers: (0..1000).map(|i| (format!("{i}{long}"), 1.0)).collect(),
                ..Timings::default()
            },
            devices: DeviceInventory {
                source: long.clone(),
                devices: vec![
                    devices::Device {
                        index: long.clone(),
                        name: long.clone(),
                        uuid: long.clone(),
                        memory_total: long.clone(),
                    };
                    1000
                ],
                npu_smi: Some(long.clone()),
                visible_devices: many,
            },
            log_dropped: 0,
            error: Some(long.clone()),
            serving: None,
        };
        let capped = report.capped();
        let size = serde_json::to_vec(&capped).expect("json").len();
        assert!(size < 400 * 1024, "{size} bytes");
        assert_eq!(capped.command.len(), REPORT_ENTRIES + 1);
        assert!(capped
            .command
            .iter()
            .all(|a| a.len() <= REPORT_STRING_BYTES));
        assert!(capped.command[REPORT_ENTRIES].contains("936 more arguments dropped"));
        let env = capped.env.as_ref().expect("env");
        assert_eq!(env.len(), REPORT_ENTRIES + 1);
        assert!(env
            .iter()
            .all(|(k, v)| k.len() <= REPORT_STRING_BYTES && v.len() <= REPORT_STRING_BYTES));
        assert!(
            matches!(&capped.exit, EngineExit::Lost { reason } if reason.contains("truncated"))
        );
        assert!(capped
            .error
            .as_deref()
            .is_some_and(|e| e.len() <= REPORT_STRING_BYTES));
        assert!(capped.devices.devices.len() <= REPORT_ENTRIES);
        // A report within its bounds is kept as it is.
        let small = failed_report("no model".into(), Duration::from_secs(3));
        assert_eq!(small.clone().capped(), small);
    }

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("handoff-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn patience(stale: u64) -> Patience {
        Patience {
            start: Duration::from_secs(2),
            grace: Duration::from_secs(2),
            stale: Duration::from_secs(stale),
        }
    }

    #[test]
    fn untrusted_files_are_read_only_when_regular_and_small() {
        let d = dir("read");
        std::fs::write(d.join("a"), b"abc").unwrap();
        assert_eq!(read_untrusted(&d.join("a"), 3).unwrap().unwrap(), b"abc");
        assert!(read_untrusted(&d.join("a"), 2).is_err(), "over the cap");
        assert!(read_untrusted(&d.join("missing"), 2).unwrap().is_none());
        std::os::unix::fs::symlink(d.join("a"), d.join("link")).unwrap();
        assert!(
            read_untrusted(&d.join("link"), 10)
                .unwrap_err()
                .to_string()
                .ends_with("link is a symbolic link (not followed)"),
            "a symlink (e.g. to the judge's token) is never followed"
        );
        std::fs::create_dir(d.join("sub")).unwrap();
        assert!(read_untrusted(&d.join("sub"), 10).is_err());
        std::fs::write(d.join("log"), b"0123456789").unwrap();
        assert_eq!(
            read_untrusted_tail(&d.join("log"), 4).unwrap().unwrap(),
            b"6789"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[tokio::test]
    async fn the_judge_reads_the_report_and_what_lies_beside_it() {
        let d = dir("report");
        let report = failed_report("x".into(), Duration::from_secs(3));
        std::fs::write(d.join(OUTPUTS_FILE), b"{}\n").unwrap();
        std::fs::write(d.join(LOG_FILE), b"log\n").unwrap();
        std::fs::write(d.join(REPORT_FILE), serde_json::to_vec(&report).unwrap()).unwrap();
        let side = wait_for_engine(&d, Duration::from_secs(1), patience(5))
            .await
            .unwrap();
        assert_eq!(side.report, report);
        assert_eq!(side.outputs.as_deref(), Some(&b"{}\n"[..]));
        assert_eq!(side.log, b"log\n");
        std::fs::write(d.join(REPORT_FILE), b"{\"result\":\"Passed\"}").unwrap();
        let forged = wait_for_engine(&d, Duration::from_secs(1), patience(5)).await;
        assert!(forged.unwrap_err().contains("is not valid"));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[tokio::test]
    async fn the_judge_gives_up_on_an_engine_that_never_starts_or_stops_beating() {
        let d = dir("wait");
        let never = wait_for_engine(&d, Duration::from_secs(1), patience(5)).await;
        assert_eq!(
            never.unwrap_err(),
            "the engine container did not start within 2 s"
        );
        std::fs::write(d.join(STARTED_FILE), b"").unwrap();
        std::fs::write(d.join(HEARTBEAT_FILE), b"1").unwrap();
        let gone = wait_for_engine(&d, Duration::from_secs(60), patience(1)).await;
        assert_eq!(
            gone.unwrap_err(),
            "the engine container stopped without reporting (no heartbeat for 1 s)"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[tokio::test]
    async fn the_engine_side_reports_a_missing_model_directory() {
        let d = dir("side");
        let spec_file = d.join("spec.yaml");
        std::fs::write(
            &spec_file,
            "prompts: [{id: a, prompt: x, structuredOutput: {regex: a}}]\n",
        )
        .unwrap();
        let args = RunEngineArgs {
            spec_file,
            spec_sha256: None,
            model_dir: d.join("no-model"),
            work_dir: d.join("work"),
            serving: ServingArgs::default(),
        };
        assert_eq!(run_engine_side(&args).await, 0);
        let report: EngineReport =
            serde_json::from_slice(&std::fs::read(d.join("work").join(REPORT_FILE)).unwrap())
                .unwrap();
        assert!(report.error.unwrap().starts_with("model directory /"));
        assert!(d.join("work").join(STARTED_FILE).exists());
        std::fs::remove_dir_all(d).unwrap();
    }

    fn parse_run_engine(args: &[&str]) -> RunEngineArgs {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: RunEngineArgs,
        }
        <Wrapper as clap::Parser>::try_parse_from(
            std::iter::once("run-engine").chain(args.iter().copied()),
        )
        .expect("run-engine arguments")
        .args
    }

    #[test]
    fn run_engine_takes_the_serving_command_and_args_as_the_operator_passes_them() {
        let args = parse_run_engine(&[
            "--spec-file=/s",
            "--model-dir=/m",
            "--work-dir=/w",
            "--serving-command=python3",
            "--serving-command=-u",
            "--redact-env=HF_TOKEN",
            "--",
            "--model_name",
            "/m",
            "--spec-file",
            "--max_model_len",
            "8",
        ]);
        assert_eq!(args.serving.serving_command, ["python3", "-u"]);
        assert_eq!(args.serving.redact_env, ["HF_TOKEN"]);
        assert_eq!(
            args.serving.serving_args,
            ["--model_name", "/m", "--spec-file", "--max_model_len", "8"],
            "everything after `--` is the engine's, even a word that looks like a runner flag"
        );
        assert_eq!(args.spec_file, PathBuf::from("/s"));
        let none = parse_run_engine(&["--spec-file=/s", "--model-dir=/m", "--work-dir=/w"]);
        assert_eq!(
            none.serving.args_or_default(Path::new("/m")),
            ["--model_name", "/m"]
        );
    }

    #[test]
    fn secret_values_are_scrubbed_from_logs_and_outputs() {
        let secrets = vec!["s3cr3t-longer".to_string(), "s3cr3t".to_string()];
        let text = b"token=s3cr3t-longer and s3cr3t twice s3cr3t\n";
        let scrubbed = String::from_utf8(scrub_bytes(text, &secrets)).unwrap();
        assert_eq!(
            scrubbed,
            "token=<redacted> and <redacted> twice <redacted>\n"
        );
        assert_eq!(scrub_bytes(b"nothing here", &secrets), b"nothing here");
    }

    #[test]
    fn secret_values_are_redacted_wherever_they_appear() {
        let vars = [
            ("HF_TOKEN", "hf_s3cret"),
            ("AUTH", "Bearer hf_s3cret"),
            ("EMPTY_SECRET", ""),
            ("PLAIN", "x"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let argv = ["engine", "--api-key=hf_s3cret", "--x"].map(String::from);
        let (argv, env) = redacted_record(
            vars,
            &argv,
            &["HF_TOKEN".to_string(), "EMPTY_SECRET".to_string()],
        );
        assert_eq!(argv, ["engine", "--api-key=<redacted>", "--x"]);
        assert_eq!(env["HF_TOKEN"], "<redacted>");
        assert_eq!(env["EMPTY_SECRET"], "<redacted>");
        assert_eq!(env["AUTH"], "Bearer <redacted>");
        assert_eq!(env["PLAIN"], "x");
        assert_eq!(
            env["HF_HUB_OFFLINE"], "1",
            "as the runner sets it for the engine"
        );
    }

    #[tokio::test]
    async fn the_engine_runs_the_serving_args_and_the_report_records_its_argv_and_env() {
        let d = dir("serving");
        std::fs::create_dir_all(d.join("model")).unwrap();
        let spec_file = d.join("spec.yaml");
        std::fs::write(
            &spec_file,
            concat!(
                "prompts: [{id: a, prompt: x, structuredOutput: {regex: a}}]\n",
                "engine: {command: [sh, -c, 'printf \"%s\\n\" \"$@\" > argv.txt', sh, '{serving_command}', '{serving_args}', --prompts, '{prompts_file}']}\n"
            ),
        )
        .unwrap();
        let work = d.join("work");
        let serving = ServingArgs {
            serving_command: vec!["serve".into()],
            redact_env: vec!["PATH".into()],
            serving_args: ["--model_name", "/models/m", "--max_model_len", "8"]
                .map(String::from)
                .to_vec(),
        };
        let args = RunEngineArgs {
            spec_file,
            spec_sha256: None,
            model_dir: d.join("model"),
            work_dir: work.clone(),
            serving,
        };
        assert_eq!(run_engine_side(&args).await, 0);
        let report: EngineReport =
            serde_json::from_slice(&std::fs::read(work.join(REPORT_FILE)).unwrap()).unwrap();
        assert_eq!(report.exit, EngineExit::Exited { code: 0 }, "{report:?}");
        let prompts = work.join(PROMPTS_FILE).display().to_string();
        assert_eq!(
            report.command,
            [
                "sh",
                "-c",
                "printf \"%s\\n\" \"$@\" > argv.txt",
                "sh",
                "serve",
                "--model_name",
                "/models/m",
                "--max_model_len",
                "8",
                "--prompts",
                prompts.as_str()
            ]
        );
        let seen = std::fs::read_to_string(work.join("argv.txt")).unwrap();
        assert_eq!(
            seen.lines().collect::<Vec<_>>(),
            report.command[4..],
            "the engine got exactly the recorded arguments"
        );
        let env = report.env.expect("env recorded");
        assert_eq!(env["PATH"], crate::contract::REDACTED);
        assert_eq!(env["HF_HUB_OFFLINE"], "1");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[tokio::test]
    async fn a_template_without_the_serving_args_is_not_run() {
        let d = dir("old-template");
        std::fs::create_dir_all(d.join("model")).unwrap();
        let spec = crate::acceptance::spec_file::parse_spec(
            "prompts: [{id: a, prompt: x, structuredOutput: {regex: a}}]\nengine: {command: [engine, --model_name, '{model_dir}']}\n",
        )
        .unwrap();
        let (report, _) = run_engine(
            &spec,
            &d.join("model"),
            &d.join("work"),
            &ServingArgs::default(),
        )
        .await;
        assert!(report
            .error
            .expect("a runner error")
            .starts_with("spec.acceptance.engine.command does not hold {serving_args}"),);
        std::fs::remove_dir_all(d).unwrap();
    }
}
