//! `duality bench …` refuses what it cannot do before it measures anything,
//! in one line that names the flag or path at fault; a server that fails
//! to start is reported with its own last words.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `duality bench ARGS…`, killed after 60 s (these all fail at once).
fn bench(args: &[&str], env: &[(&str, &std::path::Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_duality"));
    c.arg("bench").args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("duality bench {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts a failure (status 1 or clap's 2) whose stderr names every one of `words`.
fn fails_saying(o: &Output, words: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "{:?}: {err}",
        o.status
    );
    for w in words {
        assert!(err.contains(w), "{w:?} not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_server_that_cannot_start_says_why() {
    // A socket path past the kernel's 108 bytes: the server's own message.
    let long = common::TempDir::new(&"x".repeat(90));
    let out = common::TempDir::new("bench-err");
    let out = out.path().join("r");
    let o = bench(
        &[
            "models",
            "--quick",
            "--models",
            "sped",
            "--no-peers",
            "--out",
            out.to_str().unwrap(),
        ],
        &[("TMPDIR", long.path())],
    );
    fails_saying(&o, &["duality sped did not start", "SUN_LEN"]);
}

#[test]
fn store_and_balance_check_their_models_up_front() {
    let o = bench(&["store", "--quick", "--model", "foo"], &[]);
    fails_saying(&o, &["--model", "unknown model \"foo\""]);
    let o = bench(&["balance", "--quick", "--loops", "5000"], &[]);
    fails_saying(&o, &["--loops 5000", "1024"]);
}
