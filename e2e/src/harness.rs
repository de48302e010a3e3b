//! A small test harness (`harness = false`) for a bed test file whose tests need a part of the bed
//! this host may be unable to run (the real node: root, a writable cgroup filesystem, a container
//! runtime). It runs the file's async tests one after another as libtest does; when the bed
//! recorded why that part cannot run here, it reports every test as ignored with that reason, so
//! that the runner counts them as skipped (never as passed) and prints why.
//!
//! It reads the command line `cargo test` and `cargo nextest` give a test binary: name filters,
//! `--exact`, `--skip NAME`, `--list` (with `--format terse`) and `--ignored`; the other libtest
//! options are accepted and change nothing (output is never captured). A test passes when its
//! future completes and fails when it panics; the exit status is 101 when one failed, as libtest's.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Instant;

/// One test: its name and the function that makes its future.
pub struct Trial {
    /// The name filters and the runner's report use.
    pub name: &'static str,
    /// Makes the test's future (an `async fn` of the test file, boxed).
    pub run: fn() -> Pin<Box<dyn Future<Output = ()>>>,
}

/// The [`Trial`]s of the named `async fn`s of a test file, each named as its function.
#[macro_export]
macro_rules! trials {
    ($($test:ident),* $(,)?) => {
        [$($crate::harness::Trial { name: stringify!($test), run: || Box::pin($test()) }),*]
    };
}

/// What the command line asks for.
#[derive(Debug, Default, PartialEq)]
struct Args {
    list: bool,
    ignored: bool,
    exact: bool,
    filters: Vec<String>,
    skips: Vec<String>,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Self {
        let mut out = Args::default();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--list" => out.list = true,
                "--ignored" => out.ignored = true,
                "--exact" => out.exact = true,
                "--skip" => out.skips.extend(args.next()),
                // libtest options whose value is the next argument.
                "--test-threads" | "--format" | "--color" | "--logfile" | "-Z"
                | "--shuffle-seed" => {
                    args.next();
                }
                flag if flag.starts_with('-') => {}
                filter => out.filters.push(filter.to_string()),
            }
        }
        out
    }

    fn matches(&self, pattern: &str, name: &str) -> bool {
        if self.exact {
            pattern == name
        } else {
            name.contains(pattern)
        }
    }

    fn selects(&self, name: &str) -> bool {
        (self.filters.is_empty() || self.filters.iter().any(|f| self.matches(f, name)))
            && !self.skips.iter().any(|s| self.matches(s, name))
    }
}

/// Lists or runs `tests` as the command line asks; `skipped` is the reason every test is reported
/// ignored instead of run (and listed with `--ignored`, as nextest asks for ignored tests).
pub fn main(tests: &[Trial], skipped: Option<String>) -> ExitCode {
    let args = Args::parse(std::env::args().skip(1));
    let selected: Vec<&Trial> = tests.iter().filter(|t| args.selects(t.name)).collect();
    let filtered_out = tests.len() - selected.len();
    if args.list {
        if args.ignored == skipped.is_some() {
            for t in &selected {
                println!("{}: test", t.name);
            }
        }
        return ExitCode::SUCCESS;
    }
    // Only tests marked ignored run under `--ignored`; these are ignored only when skipped.
    let selected = if args.ignored { vec![] } else { selected };
    println!("\nrunning {} tests", selected.len());
    let start = Instant::now();
    let (mut passed, mut failed) = (0, Vec::new());
    for t in &selected {
        if let Some(reason) = &skipped {
            println!("test {} ... ignored, {reason}", t.name);
            continue;
        }
        let ok = run_one(t);
        println!("test {} ... {}", t.name, if ok { "ok" } else { "FAILED" });
        if ok {
            passed += 1;
        } else {
            failed.push(t.name);
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:\n    {}", failed.join("\n    "));
    }
    let ignored = if skipped.is_some() { selected.len() } else { 0 };
    println!(
        "\ntest result: {}. {} passed; {} failed; {ignored} ignored; 0 measured; {filtered_out} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        passed,
        failed.len(),
        start.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

/// Runs one test on a runtime of its own (as `#[tokio::test]` does); false when it panicked.
fn run_one(t: &Trial) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime for the test");
    std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on((t.run)()))).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn reads_the_command_lines_of_cargo_test_and_nextest() {
        let a = parse(&[
            "--test-threads",
            "1",
            "--nocapture",
            "probe",
            "--skip",
            "token",
        ]);
        assert_eq!(a.filters, ["probe"]);
        assert_eq!(a.skips, ["token"]);
        assert!(a.selects("probes_and_gates") && !a.selects("probes_and_token"));
        assert!(!a.selects("termination"));
        let a = parse(&["--exact", "probes", "--nocapture"]);
        assert!(a.selects("probes") && !a.selects("probes_and_gates"));
        let a = parse(&["--list", "--format", "terse", "--ignored"]);
        assert!(a.list && a.ignored && a.filters.is_empty() && a.selects("any"));
    }
}
