//! Text-protocol edge cases of `duality kv` compared byte for byte with the
//! real memcached (1.6, `/usr/bin/memcached`, started by each test on a free
//! port): legacy `delete <key> 0`, `verbosity` without a level, lines over
//! the limit, an HTTP request line, value lengths that do not fit,
//! `shutdown` and `cache_memlimit`. Each case runs on a fresh connection to
//! both servers; what comes back (and whether the server closed the
//! connection) must be the same.
//!
//! The memcached command-line flags `duality kv` takes (`-A -U -B -R -C -d
//! -P -V`) are checked on the built binary.

mod common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// duality with memcached's defaults.
fn duality(enable_shutdown: bool) -> InProc {
    like_memcached("symped:2", enable_shutdown)
}

fn tcp_addr(p: &InProc) -> SocketAddr {
    match &p.addr {
        Addr::Tcp(a) => *a,
        Addr::Unix(_) => unreachable!("started on TCP"),
    }
}

// ---- one case ----

/// How long a case waits for more bytes before calling the connection open.
const QUIET: Duration = Duration::from_millis(700);

/// Sends `req` in one write on a fresh connection, then (with `probe`)
/// `mn\r\n`, and returns everything read until `MN\r\n`, or until the server
/// closes (`<closed>` appended) or stays silent for [`QUIET`] (`<open>`).
fn exchange(addr: SocketAddr, req: &[u8], probe: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(QUIET)).unwrap();
    let mut all = req.to_vec();
    if probe {
        all.extend_from_slice(b"mn\r\n");
    }
    // The server may close before taking it all; what it sent still counts.
    let _ = s.write_all(&all);
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if probe && out.ends_with(b"MN\r\n") {
            return out;
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                out.extend_from_slice(b"<open>");
                return out;
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read: {e}; got {}", show(&out)),
        }
    }
    out.extend_from_slice(b"<closed>");
    out
}

/// Runs every case against both servers and asserts equal answers.
#[track_caller]
fn compare(mc: SocketAddr, dk: SocketAddr, cases: &[(Vec<u8>, bool)]) {
    let mut diffs = Vec::new();
    for (req, probe) in cases {
        let want = exchange(mc, req, *probe);
        let got = exchange(dk, req, *probe);
        if want != got {
            diffs.push(format!(
                "request {}\n  memcached {}\n  duality   {}",
                show(&req[..req.len().min(120)]),
                show(&want),
                show(&got)
            ));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// Cases ending in `mn\r\n` (the connection is expected to stay open).
fn probed(reqs: &[&str]) -> Vec<(Vec<u8>, bool)> {
    reqs.iter().map(|r| (r.as_bytes().to_vec(), true)).collect()
}

// ---- the cases ----

#[test]
fn delete_legacy_time() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &probed(&[
            "set d 0 0 1\r\nx\r\ndelete d 0\r\nget d\r\n",
            "delete d 0\r\n",
            "set d 0 0 1\r\nx\r\ndelete d 0 noreply\r\nget d\r\n",
            "set d 0 0 1\r\nx\r\ndelete d noreply\r\nget d\r\n",
            // Any time but 0 is refused, and the item stays.
            "set d 0 0 1\r\nx\r\ndelete d 5\r\nget d\r\n",
            "delete d 00\r\n",
            "delete d x\r\n",
            "delete d 0 0\r\n",
            "delete d 0 x\r\n",
            "delete d 5 noreply\r\n",
            "delete d x noreply\r\n",
            "delete\r\n",
            "delete a b c d\r\n",
        ]),
    );
}

#[test]
fn verbosity_arguments() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &probed(&[
            "verbosity\r\n",
            "verbosity 1 noreply\r\n",
            "verbosity 0\r\n",
            "verbosity noreply\r\n",
            "verbosity x\r\n",
            "verbosity 1 2\r\n",
            "verbosity 1 2 3\r\n",
            "verbosity 0 noreply\r\n",
        ]),
    );
}

#[test]
fn long_lines() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    let mut set = b"set k 0 0 1".to_vec();
    set.resize(4096, b' ');
    let mut bogus = b"bogus ".to_vec();
    bogus.resize(3000, b'x');
    bogus.extend_from_slice(b"\r\n");
    let mut get = b"get".to_vec();
    while get.len() < 4000 {
        get.extend_from_slice(b" k");
    }
    let mut get_nl = get.clone();
    get_nl.extend_from_slice(b"\r\n");
    compare(
        mc.addr,
        tcp_addr(&dk),
        &[
            // Without a newline past 2048 bytes: closed, nothing sent.
            (vec![b'x'; 4096], false),
            (vec![b'x'; 3000], false),
            (set, false),
            // Retrieval lines may be longer: still waiting for the end.
            (get, false),
            // With its newline in the same read a long line is parsed.
            ([&[b'x'; 4096][..], b"\r\n"].concat(), true),
            (bogus, true),
            (get_nl, true),
        ],
    );
}

#[test]
fn http_request_line() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &[
            (b"GET / HTTP/1.1\r\n".to_vec(), true),
            (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), false),
            (b"POST /x HTTP/1.0\r\n".to_vec(), true),
            (b"HTTP/1.1\r\n".to_vec(), true),
            // Only the last token counts, and only upper case.
            (b"GET / HTTP/1.1 x\r\n".to_vec(), true),
            (b"GET / http/1.1\r\n".to_vec(), true),
            // `get` is a command: the path and version are keys.
            (b"get / HTTP/1.1\r\n".to_vec(), true),
        ],
    );
}

#[test]
fn value_lengths() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &probed(&[
            "set k 0 0 99999999999999999999\r\n",
            "set k 0 0 -1\r\n",
            "set k 0 0 2147483648\r\n",
            "set k 0 0 2147483646\r\n",
            "set k 0 0 abc\r\n",
            "set k 0 0 99999999999999999999 noreply\r\n",
            "set k 0 0 -1 noreply\r\n",
            "add k 0 0 abc noreply\r\n",
            "cas k 0 0 -1 1\r\n",
            "cas k 0 0 -1 1 noreply\r\n",
        ]),
    );
}

#[test]
fn shutdown_not_enabled() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &probed(&["shutdown\r\n", "shutdown graceful\r\n", "shutdown foo\r\n"]),
    );
}

#[test]
fn shutdown_enabled() {
    let dk = duality(true);
    let stopped = Arc::new(AtomicBool::new(false));
    let flag = stopped.clone();
    dk.state
        .on_shutdown(move || flag.store(true, Ordering::SeqCst));
    // A bad mode is refused; memcached -A answers the same.
    let mc = Memcached::start(&["-A"]);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &probed(&["shutdown foo\r\n", "shutdown graceful x\r\n"]),
    );
    assert!(!stopped.load(Ordering::SeqCst));
    // `shutdown` closes the asking connection without an answer.
    let want = exchange(mc.addr, b"shutdown\r\n", true);
    let got = exchange(tcp_addr(&dk), b"shutdown\r\n", true);
    assert_eq!(show(&got), show(&want));
    assert_eq!(show(&got), show(b"<closed>"));
    assert!(stopped.load(Ordering::SeqCst));
}

#[test]
fn cache_memlimit() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &probed(&[
            "cache_memlimit 100\r\n",
            "cache_memlimit 64 noreply\r\n",
            "cache_memlimit 8\r\n",
            "cache_memlimit 7\r\n",
            "cache_memlimit 0\r\n",
            "cache_memlimit 1 noreply\r\n",
            "cache_memlimit\r\n",
            "cache_memlimit x\r\n",
            "cache_memlimit -5\r\n",
            "cache_memlimit 100 200\r\n",
            "cache_memlimit 64 noreply x\r\n",
        ]),
    );
    // duality keeps its limit (see `KvState`): the store cannot resize live.
    let mut c = dk.connect();
    assert_eq!(c.stats("settings")["maxbytes"], (64u64 << 20).to_string());
}

// ---- the binary's memcached flags ----

fn duality_bin(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_duality"))
        .arg("kv")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run duality kv")
}

#[test]
fn version_flag() {
    for flag in ["-V", "--version"] {
        let out = duality_bin(&[flag]);
        assert!(out.status.success(), "{flag}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("duality-kv {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn refused_flags() {
    let out = duality_bin(&["-d", "-p", "0", "-s", "/nonexistent/x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("run duality kv under a supervisor (systemd, runit); it does not daemonize"),
        "{err}"
    );
    let out = duality_bin(&["-U", "11211", "-p", "0", "-s", "/nonexistent/x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("UDP is not supported"), "{err}");
    let out = duality_bin(&["-B", "negotiate"]);
    assert!(!out.status.success());
    let out = duality_bin(&["-R", "0", "-p", "0", "-s", "/nonexistent/x"]);
    assert!(!out.status.success());
}

#[test]
fn accepted_flags_and_pidfile() {
    let dir = TempDir::new("kv-compat");
    let pidfile = dir.path().join("kv.pid");
    let pf = pidfile.to_str().unwrap();
    let mut kv = KvProc::start(&["-U", "0", "-R", "1", "-C", "-B", "auto", "-P", pf, "-A"]);
    let written = std::fs::read_to_string(&pidfile).expect("pid file");
    assert_eq!(written.trim(), kv.pid().to_string());
    // -R 1: pipelined requests are still all answered, one per turn.
    let mut c = kv.connect();
    c.expect(
        b"set a 0 0 1\r\nx\r\nget a\r\nget a\r\n",
        b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nVALUE a 0 1\r\nx\r\nEND\r\n",
    );
    let settings = c.stats("settings");
    assert_eq!(settings["shutdown_command"], "yes");
    assert_eq!(settings["reqs_per_event"], "1");
    // -A: `shutdown` stops the server as SIGTERM does, exit status 0.
    c.send(b"shutdown\r\n");
    assert_eq!(show(&c.read_to_eof()), show(b""));
    let st = kv.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(st.success(), "{st:?}; stderr {}", kv.stderr_text());
    assert!(!pidfile.exists(), "pid file removed at exit");
}

#[test]
fn protocol_flag() {
    // A binary no-op: magic 0x80, opcode 0x0a, the rest zero.
    let mut noop = vec![0u8; 24];
    noop[0] = 0x80;
    noop[1] = 0x0a;
    let text = b"version\r\nversion\r\nversion\r\n".to_vec();
    let tcp = |kv: &KvProc| SocketAddr::from(([127, 0, 0, 1], kv.port));
    // -B binary: a text request is a bad binary header (closed); a binary
    // one is answered.
    let mc = Memcached::start(&["-B", "binary"]);
    let kv = KvProc::start(&["-B", "binary"]);
    compare(mc.addr, tcp(&kv), &[(text, false), (noop.clone(), false)]);
    // -B ascii: binary bytes are read as text, never answered in binary
    // (a binary `version`, opcode 0x0b: no newline inside its header).
    let mc = Memcached::start(&["-B", "ascii"]);
    let kv = KvProc::start(&["-B", "ascii"]);
    let mut version = noop;
    version[1] = 0x0b;
    version.extend_from_slice(b"\r\n");
    compare(mc.addr, tcp(&kv), &[(version, true)]);
}
