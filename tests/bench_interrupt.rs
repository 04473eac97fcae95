//! `duality bench` stopped by SIGTERM or SIGINT (sent to it alone, not to
//! its process group): no server it started outlives it, its temporary
//! files are gone, and it exits 143 / 130 with one `interrupted` line.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The parent pid and state in `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(i32, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut f = s[s.rfind(')')? + 1..].split_whitespace();
    let state = f.next()?.chars().next()?;
    Some((f.next()?.parse().ok()?, state))
}

/// The live children of `parent`.
fn children(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| matches!(stat(p), Some((pp, s)) if pp == parent && s != 'Z'))
        .collect()
}

fn interrupted_run_leaves_nothing(signal: i32, code: i32, name: &str) {
    let tmp = common::TempDir::new("bench-int");
    let out = common::TempDir::new("bench-int-out");
    // Long enough never to finish by itself within the test's bounds.
    let mut bench = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["bench", "models", "--models", "sped", "--no-peers"])
        .args(["--clients", "1,8", "--windows", "2", "--seconds", "30"])
        .args(["--warmup", "0", "--records", "1000", "--out"])
        .arg(out.path().join("results"))
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = bench.id() as i32;
    // Wait for its server (a child) and the socket it made.
    let until = Instant::now() + Duration::from_secs(20);
    let servers = loop {
        let c = children(pid);
        let socket = std::fs::read_dir(tmp.path()).unwrap().next().is_some();
        if !c.is_empty() && socket {
            break c;
        }
        if Instant::now() > until || bench.try_wait().unwrap().is_some() {
            let _ = bench.kill();
            let o = bench.wait_with_output().unwrap();
            panic!("no server started: {}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Let the measurement start.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let until = Instant::now() + Duration::from_secs(15);
    while bench.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = bench.kill();
            panic!("bench did not exit after {name}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = bench.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines, [format!("duality: interrupted ({name})")], "{err}");
    for s in servers {
        // Reparented to init and reaped, or at worst a zombie there.
        assert!(
            !matches!(stat(s), Some((_, st)) if st != 'Z'),
            "server {s} outlived the bench"
        );
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(!out.path().join("results").join("results.json").exists());
}

#[test]
fn sigterm_stops_every_server_and_exits_143() {
    interrupted_run_leaves_nothing(libc::SIGTERM, 143, "SIGTERM");
}

#[test]
fn sigint_to_the_bench_alone_stops_every_server_and_exits_130() {
    interrupted_run_leaves_nothing(libc::SIGINT, 130, "SIGINT");
}
