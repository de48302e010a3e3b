//! Running the engine: command rendering, timeout with process-group kill, event markers for the
//! load / warm-up / measured timings, and a bounded tail of its log.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt as _};

use crate::contract::{self, placeholder};

/// DeepInfer's offline example run with the serving arguments of the judged role
/// (`--model_name <dir>` first) and the acceptance inputs, checking structured output.
pub const DEFAULT_COMMAND: [&str; 8] = [
    "python3",
    "/opt/deepinfer/examples/offline_inference.py",
    placeholder::SERVING_ARGS,
    "--prompts",
    placeholder::PROMPTS_FILE,
    "--output",
    placeholder::OUTPUTS_FILE,
    "--check_structured_output",
];

/// Prefix of the engine's event lines (stdout or stderr): `DEEPINFER_EVENT <name>`.
pub const EVENT_PREFIX: &str = contract::event::PREFIX;
/// Event: weights are loaded.
pub const EVENT_LOADED: &str = contract::event::LOADED;
/// Event: warm-up finished; the measured interval starts.
pub const EVENT_WARMUP_DONE: &str = contract::event::WARMUP_DONE;
/// Event: every prompt is generated; the measured interval ends (else it ends at exit).
pub const EVENT_GENERATION_DONE: &str = contract::event::GENERATION_DONE;

/// Engine log kept in memory (the tail).
pub const LOG_TAIL_BYTES: usize = 256 * 1024;
/// Longest log line kept whole; longer lines are split.
const MAX_LINE_BYTES: usize = 16 * 1024;
/// How long to wait for the engine's pipes to close after it exited.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Most arguments of an acceptance command template (the CRD's bound).
pub const MAX_TEMPLATE_ARGS: usize = 256;
/// Longest argument of an acceptance command template, in characters (the CRD's bound).
pub const MAX_TEMPLATE_ARG_CHARS: usize = 4096;

/// What the placeholders of the acceptance command template stand for.
#[derive(Debug, Clone, Copy)]
pub struct TemplateInputs<'a> {
    /// `{model_dir}`.
    pub model_dir: &'a Path,
    /// `{prompts_file}`.
    pub prompts_file: &'a Path,
    /// `{outputs_file}`.
    pub outputs_file: &'a Path,
    /// `{serving_command}`: `spec.runtime.command`, empty when the image's entrypoint serves.
    pub serving_command: &'a [String],
    /// `{serving_args}`: the serving container's arguments.
    pub serving_args: &'a [String],
}

/// Renders the template: an argument that is exactly `{serving_args}` or `{serving_command}`
/// becomes those arguments (zero or more); `{model_dir}`, `{prompts_file}` and `{outputs_file}`
/// are substituted anywhere in an argument; other braces are left as they are.
pub fn render_command(template: &[String], inputs: &TemplateInputs<'_>) -> Vec<String> {
    let mut out = Vec::with_capacity(template.len() + inputs.serving_args.len());
    for arg in template {
        match arg.as_str() {
            placeholder::SERVING_ARGS => out.extend(inputs.serving_args.iter().cloned()),
            placeholder::SERVING_COMMAND => out.extend(inputs.serving_command.iter().cloned()),
            _ => out.push(
                arg.replace(placeholder::MODEL_DIR, &inputs.model_dir.to_string_lossy())
                    .replace(
                        placeholder::PROMPTS_FILE,
                        &inputs.prompts_file.to_string_lossy(),
                    )
                    .replace(
                        placeholder::OUTPUTS_FILE,
                        &inputs.outputs_file.to_string_lossy(),
                    ),
            ),
        }
    }
    out
}

/// Why a template cannot be used, naming `spec.acceptance.engine.command` and the fix; `None`
/// when it holds `{serving_args}` as a whole argument and no list placeholder inside a larger one.
pub fn template_problem(template: &[String]) -> Option<String> {
    if template.len() > MAX_TEMPLATE_ARGS {
        return Some(format!(
            "has {} arguments; at most {MAX_TEMPLATE_ARGS} are allowed",
            template.len()
        ));
    }
    if let Some(i) = template
        .iter()
        .position(|arg| arg.chars().count() > MAX_TEMPLATE_ARG_CHARS)
    {
        return Some(format!(
            "argument {i} is longer than {MAX_TEMPLATE_ARG_CHARS} characters; shorten it"
        ));
    }
    if let Some(arg) = template.iter().find(|arg| {
        contract::LIST_PLACEHOLDERS
            .iter()
            .any(|p| arg.as_str() != *p && arg.contains(p))
    }) {
        return Some(format!(
            "argument {arg:?} holds a list placeholder inside a larger argument; {} and {} stand for zero or more arguments and must each be a whole argument of spec.acceptance.engine.command",
            placeholder::SERVING_ARGS,
            placeholder::SERVING_COMMAND
        ));
    }
    if !template.iter().any(|arg| arg == placeholder::SERVING_ARGS) {
        return Some(format!(
            "does not hold {} as a whole argument, so the judged engine would not run the serving configuration; add \"{}\" to spec.acceptance.engine.command where the engine takes its flags (in place of \"--model_name {}\")",
            placeholder::SERVING_ARGS,
            placeholder::SERVING_ARGS,
            placeholder::MODEL_DIR
        ));
    }
    None
}

/// How the engine ended.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum EngineExit {
    /// Exited with this code.
    Exited {
        /// Exit code.
        code: i32,
    },
    /// Killed by this signal (not at the timeout).
    Signalled {
        /// Signal number.
        signal: i32,
    },
    /// Killed at the timeout.
    TimedOut {
        /// The timeout.
        seconds: u64,
    },
    /// Could not be started.
    SpawnFailed {
        /// Why.
        error: String,
    },
    /// The engine's container never reported how the engine ended (it did not start, or it
    /// stopped without a report); seen by the judge.
    Lost {
        /// Why.
        reason: String,
    },
    /// No engine of the run's own: the judge asked a serving endpoint (`accept --endpoint`).
    Served {
        /// The endpoint.
        endpoint: String,
        /// Requests of the judged pass it did not answer usably: `id: why`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        refused: Vec<String>,
    },
}

impl EngineExit {
    /// Whether the engine exited normally with code 0.
    pub fn succeeded(&self) -> bool {
        matches!(self, Self::Exited { code: 0 })
    }

    /// A failure reason, or `None` for a clean exit.
    pub fn failure(&self) -> Option<String> {
        match self {
            Self::Exited { code: 0 } => None,
            Self::Exited { code } => Some(format!("engine exited with code {code}")),
            Self::Signalled { signal } => Some(format!("engine was killed by signal {signal}")),
            Self::TimedOut { seconds } => Some(format!("timed out after {seconds}s")),
            Self::SpawnFailed { error } => Some(format!("engine could not be started: {error}")),
            Self::Lost { reason } => Some(reason.clone()),
            Self::Served { refused, .. } if refused.is_empty() => None,
            Self::Served { endpoint, refused } => Some(format!(
                "the serving endpoint {endpoint} gave no usable answer to {} request(s): {}",
                refused.len(),
                refused.join("; ")
            )),
        }
    }
}

/// Seconds of each phase; `None` when the engine did not print the marker that bounds it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Timings {
    /// Start to `loaded`.
    pub load_seconds: Option<f64>,
    /// `loaded` to `warmup_done`.
    pub warmup_seconds: Option<f64>,
    /// `warmup_done` to `generation_done` (or to a clean exit).
    pub measured_seconds: Option<f64>,
    /// Start to exit (or kill).
    pub total_seconds: f64,
    /// Every marker seen, as seconds since start (first occurrence).
    pub markers: BTreeMap<String, f64>,
}

impl Timings {
    /// Derives the phases from the markers; nothing is estimated.
    pub fn from_markers(
        markers: BTreeMap<String, f64>,
        total_seconds: f64,
        clean_exit: bool,
    ) -> Self {
        let at = |name: &str| markers.get(name).copied();
        let loaded = at(EVENT_LOADED);
        let warm = at(EVENT_WARMUP_DONE);
        let end = at(EVENT_GENERATION_DONE).or(clean_exit.then_some(total_seconds));
        let span = |from: Option<f64>, to: Option<f64>| match (from, to) {
            (Some(a), Some(b)) if b >= a => Some(round_ms(b - a)),
            _ => None,
        };
        Self {
            load_seconds: loaded.map(round_ms),
            warmup_seconds: span(loaded, warm),
            measured_seconds: span(warm, end),
            total_seconds: round_ms(total_seconds),
            markers,
        }
    }
}

pub(crate) fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// A bounded tail of the engine's combined stdout and stderr.
#[derive(Debug, Default, Clone)]
pub struct LogTail {
    bytes: VecDeque<u8>,
    /// Bytes dropped from the front.
    pub dropped: u64,
    capacity: usize,
}

impl LogTail {
    /// An empty tail keeping at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            dropped: 0,
            capacity,
        }
    }

    /// Appends one line (a newline is added).
    pub fn push_line(&mut self, line: &[u8]) {
        self.bytes.extend(line);
        self.bytes.push_back(b'\n');
        let excess = self.bytes.len().saturating_sub(self.capacity);
        if excess > 0 {
            self.bytes.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    /// The kept bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes.iter().copied().collect()
    }
}

/// What one engine run produced.
#[derive(Debug, Clone)]
pub struct EngineRun {
    /// How it ended.
    pub exit: EngineExit,
    /// Phase timings.
    pub timings: Timings,
    /// Tail of its log.
    pub log: LogTail,
}

struct Shared {
    start: Instant,
    markers: Mutex<BTreeMap<String, f64>>,
    log: Mutex<LogTail>,
}

impl Shared {
    fn line(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        if let Some(pos) = text.find(EVENT_PREFIX) {
            let name = text[pos + EVENT_PREFIX.len()..]
                .split_whitespace()
                .next()
                .unwrap_or_default();
            if !name.is_empty() {
                let elapsed = self.start.elapsed().as_secs_f64();
                if let Ok(mut markers) = self.markers.lock() {
                    markers.entry(name.to_string()).or_insert(elapsed);
                }
            }
        }
        eprintln!("engine: {text}");
        if let Ok(mut log) = self.log.lock() {
            log.push_line(line);
        }
    }
}

/// Runs `command` in `cwd` with `HF_HUB_OFFLINE=1`, in its own process group, killing the whole
/// group at `timeout` (and after exit, so no stray worker outlives the run).
pub async fn run(command: &[String], cwd: &Path, timeout: Duration) -> EngineRun {
    let shared = Arc::new(Shared {
        start: Instant::now(),
        markers: Mutex::new(BTreeMap::new()),
        log: Mutex::new(LogTail::new(LOG_TAIL_BYTES)),
    });
    let exit = run_child(command, cwd, timeout, &shared).await;
    let total = shared.start.elapsed().as_secs_f64();
    let markers = shared.markers.lock().map(|m| m.clone()).unwrap_or_default();
    let log = shared.log.lock().map(|l| l.clone()).unwrap_or_default();
    let timings = Timings::from_markers(markers, total, exit.succeeded());
    EngineRun { exit, timings, log }
}

async fn run_child(
    command: &[String],
    cwd: &Path,
    timeout: Duration,
    shared: &Arc<Shared>,
) -> EngineExit {
    let Some((program, args)) = command.split_first() else {
        return EngineExit::SpawnFailed {
            error: "the engine command is empty".into(),
        };
    };
    let spawned = tokio::process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .env("HF_HUB_OFFLINE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            return EngineExit::SpawnFailed {
                error: format!("{program}: {err}"),
            }
        }
    };
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    .map(|stream| tokio::spawn(pump(stream, Arc::clone(shared))))
    .collect();

    let exit = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => status_exit(status),
        Ok(Err(err)) => EngineExit::SpawnFailed {
            error: format!("waiting for {program}: {err}"),
        },
        Err(_) => {
            kill_group(pgid);
            let _ = child.kill().await;
            EngineExit::TimedOut {
                seconds: timeout.as_secs(),
            }
        }
    };
    kill_group(pgid);
    for reader in readers {
        let abort = reader.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, reader).await.is_err() {
            abort.abort();
        }
    }
    exit
}

fn status_exit(status: std::process::ExitStatus) -> EngineExit {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => EngineExit::Exited { code },
        (None, Some(signal)) => EngineExit::Signalled { signal },
        (None, None) => EngineExit::Exited { code: -1 },
    }
}

fn kill_group(pgid: Option<i32>) {
    if let Some(pgid) = pgid.filter(|p| *p > 0) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Reads a stream to its end, handing each line (split at `MAX_LINE_BYTES`) to `shared`.
async fn pump(mut stream: Box<dyn AsyncRead + Send + Unpin>, shared: Arc<Shared>) {
    let mut chunk = [0u8; 8192];
    let mut line = Vec::new();
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                shared.line(line.strip_suffix(b"\r").unwrap_or(&line));
                line.clear();
            } else {
                line.push(b);
                if line.len() >= MAX_LINE_BYTES {
                    shared.line(&line);
                    line.clear();
                }
            }
        }
    }
    if !line.is_empty() {
        shared.line(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(command: &'a [String], args: &'a [String]) -> TemplateInputs<'a> {
        TemplateInputs {
            model_dir: Path::new("/models/m"),
            prompts_file: Path::new("/w/p.jsonl"),
            outputs_file: Path::new("/w/o.jsonl"),
            serving_command: command,
            serving_args: args,
        }
    }

    #[test]
    fn renders_placeholders_only() {
        let template: Vec<String> = DEFAULT_COMMAND
            .iter()
            .map(|s| s.to_string())
            .chain(["--x={\"a\":1}".to_string(), "--m={model_dir}".to_string()])
            .collect();
        let args = ["--model_name".to_string(), "/models/m".to_string()];
        let cmd = render_command(&template, &inputs(&[], &args));
        assert_eq!(
            cmd,
            [
                "python3",
                "/opt/deepinfer/examples/offline_inference.py",
                "--model_name",
                "/models/m",
                "--prompts",
                "/w/p.jsonl",
                "--output",
                "/w/o.jsonl",
                "--check_structured_output",
                "--x={\"a\":1}",
                "--m=/models/m"
            ]
        );
    }

    #[test]
    fn the_serving_command_and_args_become_whole_arguments_in_place() {
        let template: Vec<String> = [
            "{serving_command}",
            "--offline",
            "{serving_args}",
            "--prompts",
            "{prompts_file}",
        ]
        .map(String::from)
        .to_vec();
        let command = ["deepinfer-serve".to_string(), "--no-banner".to_string()];
        let args: Vec<String> = [
            "--model_name",
            "/models/m",
            "--max_model_len",
            "8",
            "{outputs_file}",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            render_command(&template, &inputs(&command, &args)),
            [
                "deepinfer-serve",
                "--no-banner",
                "--offline",
                "--model_name",
                "/models/m",
                "--max_model_len",
                "8",
                "{outputs_file}",
                "--prompts",
                "/w/p.jsonl"
            ],
            "the serving words are given as they are, never substituted themselves"
        );
        assert_eq!(
            render_command(&template, &inputs(&[], &args))[..2],
            ["--offline", "--model_name"],
            "no serving command: the placeholder is no argument at all"
        );
    }

    #[test]
    fn a_template_without_the_serving_args_is_refused_naming_the_fix() {
        let owned = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(template_problem(&owned(&DEFAULT_COMMAND)), None);
        let old = owned(&[
            "python3",
            "x.py",
            "--model_name",
            "{model_dir}",
            "--prompts",
            "{prompts_file}",
        ]);
        let problem = template_problem(&old).expect("refused");
        assert!(
            problem.contains("spec.acceptance.engine.command")
                && problem.contains("\"{serving_args}\""),
            "{problem}"
        );
        let inside = owned(&["engine", "--args={serving_args}", "{serving_args}"]);
        assert!(template_problem(&inside)
            .expect("refused")
            .contains("whole argument"));
        let command_inside = owned(&["sh", "-c", "{serving_command} run", "{serving_args}"]);
        assert!(template_problem(&command_inside).is_some());
    }

    #[test]
    fn timings_come_from_markers_only() {
        let markers = BTreeMap::from([
            ("loaded".to_string(), 10.0),
            ("warmup_done".to_string(), 12.5),
        ]);
        let t = Timings::from_markers(markers.clone(), 20.0, true);
        assert_eq!(
            (t.load_seconds, t.warmup_seconds, t.measured_seconds),
            (Some(10.0), Some(2.5), Some(7.5))
        );
        let killed = Timings::from_markers(markers, 20.0, false);
        assert_eq!(killed.measured_seconds, None);
        let none = Timings::from_markers(BTreeMap::new(), 3.0, true);
        assert_eq!(
            (
                none.load_seconds,
                none.warmup_seconds,
                none.measured_seconds
            ),
            (None, None, None)
        );
        assert_eq!(none.total_seconds, 3.0);
    }

    #[test]
    fn log_tail_keeps_the_end() {
        let mut tail = LogTail::new(8);
        tail.push_line(b"abcdef");
        tail.push_line(b"xyz");
        assert_eq!(tail.to_vec(), b"def\nxyz\n");
        assert_eq!(tail.dropped, 3);
    }

    #[tokio::test]
    async fn runs_times_and_kills() {
        let dir = std::env::temp_dir();
        let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        let ok = run(&sh("echo 'INFO DEEPINFER_EVENT loaded'; echo DEEPINFER_EVENT warmup_done >&2; echo done"), &dir, Duration::from_secs(10)).await;
        assert_eq!(ok.exit, EngineExit::Exited { code: 0 });
        assert!(ok.timings.load_seconds.is_some() && ok.timings.measured_seconds.is_some());
        assert!(String::from_utf8_lossy(&ok.log.to_vec()).contains("done\n"));
        let crash = run(&sh("exit 7"), &dir, Duration::from_secs(10)).await;
        assert_eq!(crash.exit.failure().unwrap(), "engine exited with code 7");
        let hang = run(&sh("sleep 30 & sleep 30"), &dir, Duration::from_secs(1)).await;
        assert_eq!(hang.exit.failure().unwrap(), "timed out after 1s");
        assert!(hang.timings.total_seconds < 10.0);
        let missing = run(
            &["/nonexistent/engine".to_string()],
            &dir,
            Duration::from_secs(1),
        )
        .await;
        assert!(matches!(missing.exit, EngineExit::SpawnFailed { .. }));
    }
}
