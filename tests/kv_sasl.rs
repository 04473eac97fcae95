//! `duality kv -S` (memcached's binary SASL authentication, PLAIN over a
//! `user:password` file) compared frame for frame with memcached 1.6.18
//! `-S` (Debian's build, Cyrus SASL over a sasldb made with `saslpasswd2`
//! from `sasl2-bin`; CI installs both): each conversation runs on a fresh
//! connection to both servers, and the answers (opcode, status, opaque,
//! body; the version string by shape), whether the server closed the
//! connection, and what `stats` counted in `auth_cmds` and `auth_errors`
//! must be the same. Under a loop model and a hand-off one (an auth and
//! the requests pipelined behind it in one write). Also: the flags' errors,
//! and the same frames without `-S`.

mod common;

use common::*;
use duality_kv::server::{KvConfig, Mode};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const LIST: u8 = 0x20;
const AUTH: u8 = 0x21;
const STEP: u8 = 0x22;
const GET: u8 = 0x00;
const SET: u8 = 0x01;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const STAT: u8 = 0x10;

/// The file both servers' users come from (duality reads it; memcached's
/// sasldb is made from it).
const USERS: &str = "alice:secret\n";
const OK: &[u8] = b"\0alice\0secret";

/// A binary request frame.
fn frame(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    let mut f = vec![0x80, opcode];
    f.extend_from_slice(&(key.len() as u16).to_be_bytes());
    f.push(extras.len() as u8);
    f.extend_from_slice(&[0, 0, 0]);
    f.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    f.extend_from_slice(&opaque.to_be_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(extras);
    f.extend_from_slice(key);
    f.extend_from_slice(value);
    f
}

fn auth(mech: &[u8], data: &[u8]) -> Vec<u8> {
    frame(AUTH, b"", mech, data, 1)
}

fn step(data: &[u8]) -> Vec<u8> {
    frame(STEP, b"", b"PLAIN", data, 2)
}

fn get(key: &[u8]) -> Vec<u8> {
    frame(GET, b"", key, b"", 3)
}

/// The opaque of the list request that ends each conversation.
const END: u32 = 0xfeed;

/// Sends `frames` in one write on a fresh connection, then a list request
/// (allowed before authentication), and returns one line per answer until
/// that list's answer, or `<closed>` where the server closed first.
fn converse(addr: SocketAddr, frames: &[Vec<u8>]) -> Vec<String> {
    converse_until(addr, frames, LIST)
}

/// [`converse`], the conversation ended by a request of opcode `end`
/// (opaque [`END`]).
fn converse_until(addr: SocketAddr, frames: &[Vec<u8>], end: u8) -> Vec<String> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all: Vec<u8> = frames.concat();
    all.extend(frame(end, b"", b"", b"", END));
    // The server may close before taking it all.
    let _ = s.write_all(&all);
    let mut got = Vec::new();
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while got.len() >= 24 {
            let body = u32::from_be_bytes([got[8], got[9], got[10], got[11]]) as usize;
            if got.len() < 24 + body {
                break;
            }
            let (op, opaque) = (
                got[1],
                u32::from_be_bytes([got[12], got[13], got[14], got[15]]),
            );
            if op == end && opaque == END {
                return lines;
            }
            let mut b = String::from_utf8_lossy(&got[24..24 + body]).into_owned();
            if op == VERSION && b.starts_with("1.6.") {
                b = "<version>".into();
            }
            let status = u16::from_be_bytes([got[6], got[7]]);
            lines.push(format!(
                "op {op:#04x} status {status:#06x} opaque {opaque} {b:?}"
            ));
            got.drain(..24 + body);
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read: {e}; so far {lines:?}"),
        }
    }
    assert!(got.is_empty(), "a partial answer: {}", show(&got));
    lines.push("<closed>".into());
    lines
}

/// `auth_cmds` and `auth_errors` as a connection that authenticates reads
/// them (its own auth counted).
fn auth_counts(addr: SocketAddr) -> (u64, u64) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&[auth(b"PLAIN", OK), frame(STAT, b"", b"", b"", 0)].concat())
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut stats = std::collections::HashMap::<String, String>::new();
    loop {
        while got.len() >= 24 {
            let body = u32::from_be_bytes([got[8], got[9], got[10], got[11]]) as usize;
            if got.len() < 24 + body {
                break;
            }
            let klen = usize::from(u16::from_be_bytes([got[2], got[3]]));
            let key = String::from_utf8_lossy(&got[24..24 + klen]).into_owned();
            let value = String::from_utf8_lossy(&got[24 + klen..24 + body]).into_owned();
            let op = got[1];
            got.drain(..24 + body);
            if op == STAT && key.is_empty() {
                let n = |k: &str| stats[k].parse::<u64>().unwrap();
                return (n("auth_cmds"), n("auth_errors"));
            }
            if op == STAT {
                stats.insert(key, value);
            }
        }
        let n = s.read(&mut buf).expect("stats");
        assert!(n > 0, "closed before its stats");
        got.extend_from_slice(&buf[..n]);
    }
}

/// The conversations: each a list of frames sent at once.
fn conversations() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let set = frame(SET, &[0, 0, 0, 7, 0, 0, 0, 0], b"k", b"v", 4);
    vec![
        ("list", vec![frame(LIST, b"", b"", b"", 13)]),
        ("get before auth", vec![get(b"k")]),
        ("noop before auth", vec![frame(NOOP, b"", b"", b"", 5)]),
        (
            "version before auth",
            vec![frame(VERSION, b"", b"", b"", 6)],
        ),
        (
            "a key past 250 before auth",
            vec![frame(GET, b"", &[b'k'; 300], b"", 7)],
        ),
        (
            "unknown opcode before auth",
            vec![frame(0x55, b"", b"k", b"", 8)],
        ),
        (
            "auth, set, get",
            vec![auth(b"PLAIN", OK), set.clone(), get(b"k")],
        ),
        ("auth in any case", vec![auth(b"plain", OK), get(b"k")]),
        (
            "wrong password",
            vec![auth(b"PLAIN", b"\0alice\0nope"), get(b"k")],
        ),
        (
            "success, then a wrong password",
            vec![auth(b"PLAIN", OK), auth(b"PLAIN", b"\0alice\0x"), get(b"k")],
        ),
        ("unknown mechanism", vec![auth(b"CRAM-MD5", OK)]),
        ("a step first", vec![step(OK)]),
        (
            "acting as itself",
            vec![auth(b"PLAIN", b"alice\0alice\0secret"), get(b"k")],
        ),
        (
            "acting as another",
            vec![auth(b"PLAIN", b"bob\0alice\0secret")],
        ),
        ("unknown user", vec![auth(b"PLAIN", b"\0bob\0secret")]),
        ("no separators", vec![auth(b"PLAIN", b"alicesecret")]),
        ("empty password", vec![auth(b"PLAIN", b"\0alice\0")]),
        (
            "bytes after the password",
            vec![auth(b"PLAIN", b"\0alice\0secret\0x")],
        ),
        ("no mechanism", vec![auth(b"", OK)]),
        (
            "continue, then a step",
            vec![auth(b"PLAIN", b""), step(OK), get(b"k")],
        ),
        (
            "continue, a wrong step, a right one",
            vec![auth(b"PLAIN", b""), step(b"\0alice\0x"), step(OK)],
        ),
        ("continue, then a get", vec![auth(b"PLAIN", b""), get(b"k")]),
        (
            "continue, an empty step",
            vec![auth(b"PLAIN", b""), step(b"")],
        ),
        (
            "success, then a step",
            vec![auth(b"PLAIN", OK), step(OK), get(b"k")],
        ),
        (
            "a step without a mechanism",
            vec![frame(STEP, b"", b"", OK, 9)],
        ),
        ("a 33-byte mechanism", vec![auth(&[b'P'; 33], OK)]),
        ("a 32-byte mechanism", vec![auth(&[b'P'; 32], OK)]),
        (
            "data past the item size",
            vec![auth(b"PLAIN", &[b'x'; 2 << 20])],
        ),
        ("a list with a key", vec![frame(LIST, b"", b"k", b"", 10)]),
        ("a list with a value", vec![frame(LIST, b"", b"", b"v", 11)]),
        (
            "an auth with extras",
            vec![frame(AUTH, b"1234", b"PLAIN", OK, 12)],
        ),
    ]
}

/// Each conversation's name and answers, and the `auth_cmds` and
/// `auth_errors` they added.
type Run = (Vec<(&'static str, Vec<String>)>, (u64, u64));

/// Every conversation's answers at `addr`, and the counts they added.
fn run_all(addr: SocketAddr) -> Run {
    let before = auth_counts(addr);
    let answers = conversations()
        .into_iter()
        .map(|(name, frames)| (name, converse(addr, &frames)))
        .collect();
    let after = auth_counts(addr);
    // The second reading's own auth is not the conversations'.
    (answers, (after.0 - before.0 - 1, after.1 - before.1))
}

/// duality on `model` with `-S` over [`USERS`].
fn duality(model: &str) -> InProc {
    let m: duality_models::Model = model.parse().unwrap();
    let config = KvConfig {
        sasl: Some(duality_kv::auth::AuthFile::parse_pwdb(USERS.as_bytes()).0),
        protocol: Mode::Binary,
        ..like_memcached_config(&m)
    };
    InProc::start(m, config, false)
}

fn tcp(p: &InProc) -> SocketAddr {
    match &p.addr {
        Addr::Tcp(a) => *a,
        Addr::Unix(_) => unreachable!("started on TCP"),
    }
}

/// memcached `-S` with [`USERS`] in a sasldb, where memcached and
/// `saslpasswd2` are installed.
fn memcached_sasl(dir: &Path) -> Option<Memcached> {
    Memcached::binary()?;
    let db = dir.join("sasldb2");
    for line in USERS.lines() {
        let (user, password) = line.split_once(':').unwrap();
        let child = Command::new("saslpasswd2")
            .arg("-p")
            .arg("-f")
            .arg(&db)
            .args(["-a", "memcached", "-c", user])
            .stdin(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("saslpasswd2 is not installed (apt-get install sasl2-bin): not compared with memcached -S");
            return None;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(password.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "saslpasswd2 failed");
    }
    let conf = format!("mech_list: plain\nsasldb_path: {}\n", db.display());
    std::fs::write(dir.join("memcached.conf"), conf).unwrap();
    Some(Memcached::start_sasl(&[], dir, OK))
}

#[test]
fn binary_sasl_like_memcached() {
    let dir = TempDir::new("kv-sasl");
    let theirs = memcached_sasl(dir.path()).map(|mc| run_all(mc.addr));
    let mut first: Option<Run> = None;
    for model in ["symped:2", "amped:1"] {
        let dk = duality(model);
        let ours = run_all(tcp(&dk));
        // The same counts on the Prometheus page (the reading's own auth
        // counted, as `stats` counts it).
        let (cmds, errors) = auth_counts(tcp(&dk));
        let page = dk.state.prometheus();
        for line in [
            format!("duality_kv_auth_total {cmds}"),
            format!("duality_kv_auth_errors_total {errors}"),
        ] {
            assert!(page.lines().any(|l| l == line), "{line} not in {page}");
        }
        // What duality says, whatever memcached does.
        let said = |name: &str| &ours.0.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(
            said("list"),
            &[r#"op 0x20 status 0x0000 opaque 13 "PLAIN""#]
        );
        assert_eq!(
            said("get before auth"),
            &[
                r#"op 0x00 status 0x0020 opaque 3 "Auth failure.""#,
                "<closed>"
            ]
        );
        assert_eq!(
            said("auth, set, get")[0],
            r#"op 0x21 status 0x0000 opaque 1 "Authenticated""#
        );
        assert!(
            said("auth, set, get")[2].ends_with("\"\\0\\0\\0\\u{7}v\""),
            "{:?}",
            said("auth, set, get")
        );
        assert_eq!(
            said("version before auth")[0],
            "op 0x0b status 0x0000 opaque 6 \"<version>\""
        );
        assert_eq!(
            said("continue, then a get")[0],
            "op 0x21 status 0x0021 opaque 1 \"\""
        );
        assert!(ours.1 .0 > 0 && ours.1 .1 > 0, "{:?}", ours.1);
        if let Some(theirs) = &theirs {
            for ((name, o), (_, t)) in ours.0.iter().zip(&theirs.0) {
                assert_eq!(o, t, "{model}: {name}");
            }
            assert_eq!(ours.1, theirs.1, "{model}: auth_cmds, auth_errors");
        }
        match &first {
            Some(f) => assert_eq!(f, &ours, "{model} differs from symped:2"),
            None => first = Some(ours),
        }
    }
}

/// Without `-S` SASL frames are "Unknown command", their wrong shapes
/// "Invalid arguments" and a close, as memcached built with SASL.
#[test]
fn sasl_frames_without_sasl() {
    let m: duality_models::Model = "symped:2".parse().unwrap();
    let dk = InProc::start(m, like_memcached_config(&m), false);
    let cases: Vec<Vec<Vec<u8>>> = vec![
        vec![auth(b"PLAIN", OK), step(OK), auth(&[b'P'; 40], b"")],
        vec![frame(LIST, b"", b"k", b"", 10)],
        vec![auth(b"", OK)],
    ];
    // The list request is itself unknown here: a version ends them.
    let ours: Vec<Vec<String>> = cases
        .iter()
        .map(|c| converse_until(tcp(&dk), c, VERSION))
        .collect();
    assert_eq!(ours[0].len(), 3, "{:?}", ours[0]);
    assert!(
        ours[0].iter().all(|l| l.contains("0x0081")),
        "{:?}",
        ours[0]
    );
    assert_eq!(
        ours[1],
        [
            r#"op 0x20 status 0x0004 opaque 10 "Invalid arguments""#,
            "<closed>"
        ]
    );
    if Memcached::binary().is_some() {
        let mc = Memcached::start(&["-B", "binary"]);
        for (c, o) in cases.iter().zip(&ours) {
            assert_eq!(o, &converse_until(mc.addr, c, VERSION));
        }
    }
}

fn duality_bin(args: &[&str], pwdb: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_duality"));
    cmd.arg("kv")
        .args(args)
        .args(["-p", "0", "-s", "/nonexistent/x"]);
    match pwdb {
        Some(p) => cmd.env("MEMCACHED_SASL_PWDB", p),
        None => cmd.env_remove("MEMCACHED_SASL_PWDB"),
    };
    cmd.stdin(Stdio::null()).output().expect("run duality kv")
}

#[test]
fn sasl_flag_errors() {
    let dir = TempDir::new("kv-sasl-flags");
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "alice:secret\nno colon here\n").unwrap();
    for (args, pwdb, says) in [
        (&["-S"][..], None, "set MEMCACHED_SASL_PWDB"),
        (
            &["-S", "-B", "ascii"][..],
            Some(pw.as_path()),
            "cannot allow the ASCII protocol",
        ),
        (
            &["-S", "-B", "auto"][..],
            Some(pw.as_path()),
            "cannot allow the ASCII protocol",
        ),
        (
            &["-S", "-Y", pw.to_str().unwrap()][..],
            Some(pw.as_path()),
            "exclude each other",
        ),
        (
            &["-S"][..],
            Some(Path::new("/nonexistent/pw")),
            "Could not open the SASL password file [/nonexistent/pw]",
        ),
    ] {
        let out = duality_bin(args, pwdb);
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Accepted (then it fails on the socket path), warning of the line
    // memcached ignores.
    let out = duality_bin(&["-S", "-B", "binary"], Some(&pw));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2 has no ':' and is ignored"), "{err}");
    assert!(!err.contains("SASL"), "{err}");
}
