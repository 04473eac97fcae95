//! Every start of a server reaches `ready`. Both servers probe io_uring on
//! a thread of their own and join it just before they catch their stop
//! signals, which (in debug builds) checks that no other thread runs; the
//! kernel can still count a joined thread for a moment. Under `ulimit -n
//! 256` (the descriptor-limit tests' setting) 1-12 of 60 starts of each
//! server panicked on that check and exited before `ready`: CI's "no ready
//! line" from `http_fd_limit` (and, its stderr unseen, likely the one
//! `http_gzip_cli` once had).

mod common;

use common::TempDir;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

/// Starts `duality ARGS` under `ulimit -n 256`, waits for its `ready`
/// line and stops it with SIGTERM; what it printed instead, with its exit
/// status, if it did not get there.
fn start_and_stop(args: &[&str]) -> Result<(), String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_duality"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start duality");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.starts_with("ready") {
        let status = child.wait();
        let mut said = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut said);
        return Err(format!("{line:?} {said} ({status:?})"));
    }
    // SAFETY: the pid is this test's own child, not yet waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // Its log lines go to a pipe nobody reads past this point: a few
    // lines, well within the pipe's room.
    let status = child.wait().unwrap();
    assert!(status.success(), "{args:?}: {status:?}");
    Ok(())
}

/// Starts each server `n` times on io_uring, one model with one loop and
/// one with two; every start must get to `ready`.
fn every_start_is_ready(n: usize, args: impl Fn(&str) -> Vec<String>) {
    for model in ["sped", "symped:2"] {
        let args = args(model);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let failed: Vec<String> = (0..n).filter_map(|_| start_and_stop(&args).err()).collect();
        assert!(
            failed.is_empty(),
            "{} of {n} starts of {args:?} did not get ready; the first: {}",
            failed.len(),
            failed[0]
        );
    }
}

#[test]
fn every_start_of_the_web_server_gets_ready() {
    let root = TempDir::new("start-ready-http");
    let root = root.path().to_str().unwrap().to_owned();
    every_start_is_ready(60, |model| {
        [
            "http",
            "--listen",
            "127.0.0.1:0",
            "--io",
            "uring",
            "--model",
            model,
            "--root",
            &root,
        ]
        .map(String::from)
        .to_vec()
    });
}

#[test]
fn every_start_of_the_cache_gets_ready() {
    let dir = TempDir::new("start-ready-kv");
    let sock = dir.path().join("kv.sock");
    let sock = sock.to_str().unwrap().to_owned();
    every_start_is_ready(60, |model| {
        [
            "kv", "-p", "0", "-s", &sock, "--io", "uring", "--model", model,
        ]
        .map(String::from)
        .to_vec()
    });
}
