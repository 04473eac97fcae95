//! `duality bench … --quick --json` as a child process, for the `bench_*`
//! end-to-end tests.

use super::TempDir;
use std::process::{Command, Output};

/// One bench run: what it printed, and its results directory (removed on
/// drop).
pub struct BenchRun {
    pub output: Output,
    /// Its standard error (progress, notes such as a peer not installed).
    pub stderr: String,
    pub out: TempDir,
}

impl BenchRun {
    /// Runs `duality bench <args> --json --out <a fresh directory>`.
    pub fn start(args: &[&str]) -> BenchRun {
        let out = TempDir::new(&format!("bench-{}", args.first().copied().unwrap_or("x")));
        let output = Command::new(env!("CARGO_BIN_EXE_duality"))
            .arg("bench")
            .args(args)
            .arg("--json")
            .arg("--out")
            .arg(&out.0)
            .output()
            .expect("run duality bench");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        BenchRun {
            output,
            stderr,
            out,
        }
    }

    /// Asserts the run succeeded and printed exactly the JSON it wrote to
    /// `file` in its results directory; returns that JSON.
    pub fn json(&self, file: &str) -> serde_json::Value {
        assert!(
            self.output.status.success(),
            "bench failed: {}",
            self.stderr
        );
        let printed: serde_json::Value =
            serde_json::from_slice(&self.output.stdout).expect("stdout is JSON");
        let written: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.out.0.join(file)).expect("the JSON file"),
        )
        .expect("the file is JSON");
        assert_eq!(printed, written);
        written
    }
}

/// [`BenchRun::start`] then [`BenchRun::json`].
pub fn run(args: &[&str], file: &str) -> (BenchRun, serde_json::Value) {
    let r = BenchRun::start(args);
    let json = r.json(file);
    (r, json)
}

/// Runs `duality bench ARGS…` with stdin closed and its output captured;
/// fails the test if it is still running after `limit` (a refusal comes at
/// once; the measurement it would start takes longer).
pub fn output_within(args: &[&str], limit: std::time::Duration) -> Output {
    wait_within(spawn(args), args, limit)
}

/// Starts `duality bench ARGS…` with stdin closed and stdout and stderr
/// piped (a test may close them).
pub fn spawn(args: &[&str]) -> std::process::Child {
    use std::process::Stdio;
    Command::new(env!("CARGO_BIN_EXE_duality"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run duality bench")
}

/// Waits for a bench [`spawn`] started; kills it and fails the test if it
/// is still running after `limit`.
pub fn wait_within(
    mut child: std::process::Child,
    args: &[&str],
    limit: std::time::Duration,
) -> Output {
    let until = std::time::Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("duality bench {args:?} still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Asserts `duality bench ARGS…` is refused before it measures anything:
/// exit status 1 with one line `duality: …` on stderr, or clap's 2 for a
/// value out of a flag's range; either naming every one of `words`.
/// Returns the stderr.
pub fn refused(args: &[&str], words: &[&str]) -> String {
    let o = output_within(args, std::time::Duration::from_secs(30));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    match o.status.code() {
        Some(1) => {
            let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(
                lines.len() == 1 && lines[0].starts_with("duality: "),
                "{args:?}: not one line: {err}"
            );
        }
        Some(2) => assert!(err.starts_with("error: "), "{args:?}: {err}"),
        other => panic!("{args:?}: exit {other:?}, not refused: {err}"),
    }
    for w in words {
        assert!(err.contains(w), "{args:?}: {w:?} not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    err
}
