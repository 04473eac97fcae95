//! `duality bench` stopped by SIGTERM, SIGINT or SIGHUP (sent to it alone,
//! not to its process group): no server it started outlives it, its
//! temporary files are gone, and it exits 143 / 130 / 129 with one
//! `interrupted` line. Killed outright (SIGKILL), its servers still stop:
//! the kernel signals them when their parent dies.

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
    let mut bench = Command::new(env!("CARGO_BIN_EXE_duality"));
    // A suite run under `nohup` hands its children SIGHUP ignored, and the
    // bench rightly leaves an ignored SIGHUP ignored: the child starts with
    // the default, as from a terminal.
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires; it
    // touches only the child's own disposition.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut bench, || {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut bench = bench
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

/// A closed terminal: SIGHUP killed the bench alone and left its servers
/// running (the default action); now it is handled as SIGTERM is.
#[test]
fn sighup_stops_every_server_and_exits_129() {
    interrupted_run_leaves_nothing(libc::SIGHUP, 129, "SIGHUP");
}

/// The command line of `pid`, its arguments joined by spaces.
fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Starts `duality bench ARGS…` (stdout and stderr dropped, temp files in
/// `tmp`) and waits for `want` of its descendants to run: a process whose
/// command line contains each of the words of one entry of `want`.
fn bench_with_children(
    args: &[&str],
    tmp: &std::path::Path,
    want: &[&str],
) -> (std::process::Child, Vec<i32>) {
    let mut bench = Command::new(env!("CARGO_BIN_EXE_duality"))
        .arg("bench")
        .args(args)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = bench.id() as i32;
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let mut tree = children(pid);
        let grandchildren: Vec<i32> = tree.iter().flat_map(|&c| children(c)).collect();
        tree.extend(grandchildren);
        let found: Vec<i32> = want
            .iter()
            .filter_map(|w| {
                tree.iter()
                    .copied()
                    .find(|&p| w.split(' ').all(|word| cmdline(p).contains(word)))
            })
            .collect();
        if found.len() == want.len() {
            return (bench, found);
        }
        if Instant::now() > until || bench.try_wait().unwrap().is_some() {
            let _ = bench.kill();
            let _ = bench.wait();
            panic!("not all of {want:?} started: {tree:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills the bench with SIGKILL (no handler of its runs) and asserts that
/// every one of `servers` is gone within 5 s.
fn killed_bench_leaves_no_server(mut bench: std::process::Child, servers: &[i32]) {
    bench.kill().unwrap();
    bench.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    for &s in servers {
        while matches!(stat(s), Some((_, st)) if st != 'Z') {
            if Instant::now() > until {
                // SAFETY: kill(2) on a pid this test saw as the bench's
                // server; it is cleaned up before the test fails.
                unsafe { libc::kill(s, libc::SIGKILL) };
                panic!("server {s} ({}) outlived the killed bench", cmdline(s));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// SIGKILL leaves the bench no chance to stop its servers: before, the
/// cache server ran on, orphaned; now the kernel sends it SIGTERM.
#[test]
fn a_killed_bench_leaves_no_cache_server() {
    let tmp = common::TempDir::new("bench-kill");
    let out = tmp.path().join("results");
    let (bench, servers) = bench_with_children(
        &[
            "models",
            "--models",
            "sped",
            "--no-peers",
            "--clients",
            "1",
            "--windows",
            "2",
            "--seconds",
            "30",
            "--warmup",
            "0",
            "--records",
            "100",
            "--out",
            out.to_str().unwrap(),
        ],
        tmp.path(),
        &["kv --model sped"],
    );
    killed_bench_leaves_no_server(bench, &servers);
}

/// nginx killed with the bench: its master (SIGTERM from the kernel) stops
/// its workers; before, master and workers served on.
#[test]
fn a_killed_bench_leaves_no_nginx() {
    if duality_bench::http::find_nginx().is_none() {
        eprintln!("nginx is not installed: skipped");
        return;
    }
    let tmp = common::TempDir::new("bench-kill-nginx");
    let out = tmp.path().join("results");
    let (bench, servers) = bench_with_children(
        &[
            "http",
            "--servers",
            "nginx-1w",
            "--clients",
            "1",
            "--seconds",
            "30",
            "--warmup",
            "0",
            "--repeat",
            "1",
            "--sizes",
            "100",
            "--out",
            out.to_str().unwrap(),
        ],
        tmp.path(),
        &["nginx: master", "nginx: worker"],
    );
    killed_bench_leaves_no_server(bench, &servers);
}

/// An experiment that goes on after a failed measurement (the idle
/// experiment marks the point "not measured") wrote, when interrupted, a
/// set of results that looked finished (the table, JSON, CSVs; a plot
/// sometimes empty, cut by the exit): now no results file is written once
/// the run is interrupted.
#[test]
fn an_interrupted_idle_run_writes_no_results() {
    let tmp = common::TempDir::new("bench-int-idle");
    let out = tmp.path().join("results");
    let (bench, _) = bench_with_children(
        &["idle", "--quick", "--out", out.to_str().unwrap()],
        tmp.path(),
        &["duality"],
    );
    // Into its measurements.
    std::thread::sleep(Duration::from_millis(1000));
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(bench.id() as i32, libc::SIGINT) }, 0);
    let o = bench.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130));
    let written: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "an interrupted run wrote {written:?}");
}
