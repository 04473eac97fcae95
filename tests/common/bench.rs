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
