//! Both servers stop on SIGTERM even when started with it blocked: the
//! signal mask survives exec, and a parent that blocks SIGTERM around its
//! fork (some supervisors and language runtimes do) used to leave the
//! server deaf to it — the signal stayed pending for ever. The servers
//! unblock the stop signals they catch.

mod common;

use common::TempDir;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `duality ARGS` with SIGTERM blocked, waits for its `ready` line.
fn start_blocked(args: &[&str]) -> common::ChildGuard {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_duality"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: sigemptyset/sigaddset/sigprocmask are async-signal-safe and
    // touch only a local set; nothing is allocated after fork.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = cmd.spawn().expect("start duality");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "{line:?}");
    // Whatever else it prints has somewhere to go.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    common::ChildGuard(Some(child))
}

/// Sends SIGTERM; the exit status within 10 s.
fn terminate(mut guard: common::ChildGuard) -> std::process::ExitStatus {
    let child: &mut Child = guard.0.as_mut().unwrap();
    // SAFETY: the pid is this test's own child, not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            guard.0 = None;
            return s;
        }
        assert!(
            Instant::now() < until,
            "SIGTERM did not stop it: still blocked"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_cache_stops_on_a_sigterm_its_parent_blocked() {
    let dir = TempDir::new("stop-blocked-kv");
    let sock = dir.path().join("kv.sock");
    let kv = start_blocked(&["kv", "-p", "0", "-s", sock.to_str().unwrap()]);
    assert!(terminate(kv).success());
}

#[test]
fn the_web_server_stops_on_a_sigterm_its_parent_blocked() {
    let dir = TempDir::new("stop-blocked-http");
    let http = start_blocked(&[
        "http",
        "--listen",
        "127.0.0.1:0",
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    assert!(terminate(http).success());
}
