//! The differential corpus: every command of the text, meta and binary
//! protocols, with their errors and edge cases, sent to the real memcached
//! (1.6, started fresh by the test) and to `duality kv`, answers compared
//! byte for byte.
//!
//! The cases are data: `tests/data/kv_corpus.txt` (its header describes the
//! format). Each case runs on a fresh connection in its own key namespace
//! (`$k` becomes a prefix unique to the case) on three servers started fresh
//! for the corpus's section (sections run in parallel), so CAS uniques are
//! handed out in the same order everywhere and are compared as they are:
//!
//! * memcached, the request sent in one write;
//! * duality (`symped:2`), the same;
//! * a second duality (`amped:1`), the request sent one byte per write (its
//!   first [`BYTEWISE_MAX`] bytes; the rest of a large value at once): split
//!   at every byte offset, it must answer what it answers whole.
//!
//! Each request is followed by a probe (`mn`, or a binary NOOP when the
//! connection speaks binary) and the answer is everything read before the
//! probe's answer, or until the server closed (`<closed>`) or stayed silent
//! for [`QUIET`] (`<open>`). Only what cannot match is masked: the version
//! string, and times in seconds (meta `t` and `l`, `me`'s `exp=` and `la=`)
//! may differ by the one second the servers' clocks tick apart. A case marked
//! with a `deviation` names its row of the README's "Deviations from
//! memcached" table and gives duality's answer; memcached must answer
//! something else (else the row is stale).
//!
//! Fails with an install hint where memcached is not installed (as the
//! issue asks: the comparison is the point of the test).

mod common;

use common::*;
use duality_kv::server::KvConfig;
use duality_models::Model;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

const CORPUS: &str = include_str!("data/kv_corpus.txt");
const README: &str = include_str!("../README.md");

/// How long a case waits for more bytes before calling the connection open.
const QUIET: Duration = Duration::from_millis(500);

/// How many bytes of one send go one byte per write (the rest at once).
const BYTEWISE_MAX: usize = 512;

/// The opaque of the binary NOOP that ends a binary case.
const END: u32 = 0xfeed_f00d;

// ---- the corpus ----

/// A section: cases run in order against one set of fresh servers.
struct Section {
    name: String,
    /// The item size limit (`-I`) its servers run with, if not the default.
    item_max: Option<usize>,
    cases: Vec<Case>,
}

struct Case {
    /// Line in the corpus file.
    line: usize,
    name: String,
    /// No probe: the answer is whatever comes before a close or silence.
    no_probe: bool,
    /// Not sent one byte at a time: the answer depends on read boundaries,
    /// in memcached too.
    whole: bool,
    req: String,
    deviation: Option<Deviation>,
}

/// A documented deviation: the README row and duality's answer.
struct Deviation {
    row: String,
    want: String,
}

fn parse_corpus(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if let Some(head) = raw.strip_prefix("## ") {
            let (name, item_max) = match head.split_once(" -I ") {
                Some((n, size)) => (n, Some(size.trim().parse().expect("-I <bytes>"))),
                None => (head, None),
            };
            sections.push(Section {
                name: name.trim().to_string(),
                item_max,
                cases: Vec::new(),
            });
            continue;
        }
        if trimmed.is_empty() || raw.starts_with('#') {
            continue;
        }
        let section = sections
            .last_mut()
            .unwrap_or_else(|| panic!("corpus line {line}: a case before any `## section`"));
        if raw.starts_with(char::is_whitespace) {
            let rest = trimmed.strip_prefix("deviation \"").unwrap_or_else(|| {
                panic!("corpus line {line}: a continuation is `deviation \"row\": answer`")
            });
            let (row, want) = rest
                .split_once("\": ")
                .unwrap_or_else(|| panic!("corpus line {line}: `deviation \"row\": answer`"));
            let case = section
                .cases
                .last_mut()
                .unwrap_or_else(|| panic!("corpus line {line}: a deviation without its case"));
            case.deviation = Some(Deviation {
                row: row.to_string(),
                want: want.to_string(),
            });
            continue;
        }
        let (head, req) = raw
            .split_once(" | ")
            .unwrap_or_else(|| panic!("corpus line {line}: `name | request`"));
        let (opts, name) = match head.strip_prefix('[') {
            Some(rest) => rest
                .split_once("] ")
                .unwrap_or_else(|| panic!("corpus line {line}: `[options] name`")),
            None => ("", head),
        };
        let mut case = Case {
            line,
            name: name.trim().to_string(),
            no_probe: false,
            whole: false,
            req: req.to_string(),
            deviation: None,
        };
        for o in opts.split_whitespace() {
            match o {
                "noprobe" => case.no_probe = true,
                "whole" => case.whole = true,
                _ => panic!("corpus line {line}: unknown option {o:?}"),
            }
        }
        section.cases.push(case);
    }
    sections
}

// ---- expanding a request ----

/// Where a request goes while it is expanded: bytes are committed to
/// `pending` at each line end and after each binary frame, and sent when a
/// template needs the server's state (`{cas}`), a pause (`{sleep}`) or the
/// end of the request.
struct Env<'a> {
    /// The case's key prefix.
    prefix: &'a str,
    now: i64,
    /// The connection (`None`: expanding an expected answer).
    conn: Option<&'a mut Conn>,
    pending: Vec<u8>,
}

impl Env<'_> {
    fn offline<'a>(prefix: &'a str, now: i64) -> Env<'a> {
        Env {
            prefix,
            now,
            conn: None,
            pending: Vec::new(),
        }
    }

    /// Sends what is pending and reads its answers.
    fn sync(&mut self) {
        let bytes = std::mem::take(&mut self.pending);
        let conn = self.conn.as_mut().expect("{cas} and {sleep} need a server");
        conn.send(&bytes, true);
    }
}

/// Expands escapes (`\r \n \t \0 \\ \xNN \{ \} \$`), `$k` (the case's key
/// prefix) and `{…}` templates. At the top level (`top`) what it makes goes
/// to `env.pending`; a template's argument is returned.
fn expand(tpl: &str, env: &mut Env<'_>, top: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let b = tpl.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let (byte, used) = escape(&b[i + 1..], tpl);
                out.push(byte);
                i += 1 + used;
                if top && byte == b'\n' {
                    env.pending.append(&mut out);
                }
            }
            b'$' if b.get(i + 1) == Some(&b'k') => {
                out.extend_from_slice(env.prefix.as_bytes());
                i += 2;
            }
            b'{' => {
                let end = closing_brace(tpl, i);
                let inner = &tpl[i + 1..end];
                if let Some(ms) = inner.strip_prefix("sleep ") {
                    let ms: u64 = ms.parse().expect("{sleep MS}");
                    assert!(top, "{{sleep}} inside a template");
                    env.pending.append(&mut out);
                    env.sync();
                    thread::sleep(Duration::from_millis(ms));
                } else {
                    out.extend_from_slice(&template(inner, env));
                    if top && inner.starts_with("bin ") {
                        env.pending.append(&mut out);
                    }
                }
                i = end + 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    if top {
        env.pending.append(&mut out);
    }
    out
}

/// The index of the `}` that closes the `{` at `open` (templates nest).
fn closing_brace(tpl: &str, open: usize) -> usize {
    let b = tpl.as_bytes();
    let mut depth = 0;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unclosed template in {tpl:?}")
}

/// One escape after its backslash: the byte and how many bytes it used.
fn escape(b: &[u8], tpl: &str) -> (u8, usize) {
    match b.first() {
        Some(b'r') => (b'\r', 1),
        Some(b'n') => (b'\n', 1),
        Some(b't') => (b'\t', 1),
        Some(b'0') => (0, 1),
        Some(b'x') => {
            let hex = std::str::from_utf8(&b[1..3]).expect("\\xNN");
            (u8::from_str_radix(hex, 16).expect("\\xNN"), 3)
        }
        Some(&c @ (b'\\' | b'{' | b'}' | b'$')) => (c, 1),
        _ => panic!("bad escape in {tpl:?}"),
    }
}

/// A template's argument, expanded.
fn arg(s: &str, env: &mut Env<'_>) -> Vec<u8> {
    expand(s, env, false)
}

/// `{key N}` a key of N bytes in the namespace, `{val N}` N bytes of `v`,
/// `{rep N TEXT}` TEXT N times, `{now+N}` / `{now-N}` a Unix time, `{b64
/// TEXT}` TEXT in base64, `{cas [SUFFIX]}` the CAS unique of `$kSUFFIX` on
/// this server, `{bin …}` a binary request ([`binary`]).
fn template(inner: &str, env: &mut Env<'_>) -> Vec<u8> {
    let (name, rest) = inner.split_once(' ').unwrap_or((inner, ""));
    let num = |s: &str| -> usize {
        s.parse()
            .unwrap_or_else(|_| panic!("number in {{{inner}}}"))
    };
    match name {
        "key" => {
            let n = num(rest);
            let mut k = env.prefix.as_bytes().to_vec();
            k.resize(n, b'x');
            k
        }
        "val" => vec![b'v'; num(rest)],
        "rep" => {
            let (n, text) = rest.split_once(' ').expect("{rep N TEXT}");
            arg(text, env).repeat(num(n))
        }
        "b64" => base64(&arg(rest, env)).into_bytes(),
        "cas" => {
            let mut key = env.prefix.as_bytes().to_vec();
            key.extend_from_slice(&arg(rest, env));
            env.sync();
            let addr = env.conn.as_ref().expect("{cas} needs a server").addr;
            let cas = cas_of(addr, &key).unwrap_or_else(|| panic!("{{{inner}}}: no item"));
            cas.to_string().into_bytes()
        }
        "bin" => binary(rest, env),
        _ => {
            if let Some(d) = name.strip_prefix("now+") {
                (env.now + num(d) as i64).to_string().into_bytes()
            } else if let Some(d) = name.strip_prefix("now-") {
                (env.now - num(d) as i64).to_string().into_bytes()
            } else {
                panic!("unknown template {{{inner}}}")
            }
        }
    }
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for j in 0..4 {
            if j <= c.len() {
                s.push(A[(n >> (18 - 6 * j) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// `{bin OP arg=value …}`: a binary request frame. OP is an opcode name
/// (`get`, `setq`, … as memcached's `protocol_binary.h` names them, lower
/// case) or `0xNN`. Arguments: `k=` key, `v=` value, `x=` raw extras
/// (hex), `flags=`/`exp=` (store extras: 8 bytes with `flags`, 4 with `exp`
/// alone), `delta=`/`init=` (arithmetic extras, with `exp=`), `opaque=`,
/// `cas=`, and raw header fields that override what the body implies:
/// `magic=`, `keylen=`, `extlen=`, `bodylen=`, `type=`.
fn binary(spec: &str, env: &mut Env<'_>) -> Vec<u8> {
    let mut words = split_words(spec).into_iter();
    let op = words.next().expect("{bin OP …}");
    let opcode = match op {
        "get" => 0x00,
        "set" => 0x01,
        "add" => 0x02,
        "replace" => 0x03,
        "delete" => 0x04,
        "incr" => 0x05,
        "decr" => 0x06,
        "quit" => 0x07,
        "flush" => 0x08,
        "getq" => 0x09,
        "noop" => 0x0a,
        "version" => 0x0b,
        "getk" => 0x0c,
        "getkq" => 0x0d,
        "append" => 0x0e,
        "prepend" => 0x0f,
        "stat" => 0x10,
        "setq" => 0x11,
        "addq" => 0x12,
        "replaceq" => 0x13,
        "deleteq" => 0x14,
        "incrq" => 0x15,
        "decrq" => 0x16,
        "quitq" => 0x17,
        "flushq" => 0x18,
        "appendq" => 0x19,
        "prependq" => 0x1a,
        "verbosity" => 0x1b,
        "touch" => 0x1c,
        "gat" => 0x1d,
        "gatq" => 0x1e,
        "gatk" => 0x23,
        "gatkq" => 0x24,
        hex => u8::from_str_radix(hex.trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("binary opcode {hex:?}")),
    };
    let mut args = std::collections::HashMap::new();
    for w in words {
        let (k, v) = w
            .split_once('=')
            .unwrap_or_else(|| panic!("{{bin}} argument {w:?}"));
        args.insert(k, arg(v, env));
    }
    let n = |name: &str| -> Option<u64> {
        args.get(name).map(|v| {
            let v = String::from_utf8_lossy(v);
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .unwrap_or_else(|_| panic!("{{bin}} {name}={v}"))
        })
    };
    let mut extras = Vec::new();
    if let Some(x) = args.get("x") {
        let x = String::from_utf8_lossy(x);
        for i in (0..x.len()).step_by(2) {
            extras.push(u8::from_str_radix(&x[i..i + 2], 16).expect("x=hex"));
        }
    } else if let Some(delta) = n("delta") {
        extras.extend_from_slice(&delta.to_be_bytes());
        extras.extend_from_slice(&n("init").unwrap_or(0).to_be_bytes());
        extras.extend_from_slice(&(n("exp").unwrap_or(0) as u32).to_be_bytes());
    } else if let Some(flags) = n("flags") {
        extras.extend_from_slice(&(flags as u32).to_be_bytes());
        extras.extend_from_slice(&(n("exp").unwrap_or(0) as u32).to_be_bytes());
    } else if let Some(exp) = n("exp") {
        extras.extend_from_slice(&(exp as u32).to_be_bytes());
    }
    let key = args.get("k").cloned().unwrap_or_default();
    let value = args.get("v").cloned().unwrap_or_default();
    let keylen = n("keylen").unwrap_or(key.len() as u64) as u16;
    let extlen = n("extlen").unwrap_or(extras.len() as u64) as u8;
    let body = (extras.len() + key.len() + value.len()) as u64;
    let bodylen = n("bodylen").unwrap_or(body) as u32;
    let mut f = vec![n("magic").unwrap_or(0x80) as u8, opcode];
    f.extend_from_slice(&keylen.to_be_bytes());
    f.push(extlen);
    f.push(n("type").unwrap_or(0) as u8);
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&bodylen.to_be_bytes());
    f.extend_from_slice(&(n("opaque").unwrap_or(0) as u32).to_be_bytes());
    f.extend_from_slice(&n("cas").unwrap_or(0).to_be_bytes());
    f.extend_from_slice(&extras);
    f.extend_from_slice(&key);
    f.extend_from_slice(&value);
    f
}

/// `spec` split at spaces outside nested templates.
fn split_words(spec: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in spec.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ' ' if depth == 0 => {
                if i > start {
                    words.push(&spec[start..i]);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < spec.len() {
        words.push(&spec[start..]);
    }
    words
}

/// A binary NOOP with the [`END`] opaque, and its answer.
fn binary_probe() -> (Vec<u8>, Vec<u8>) {
    let mut req = vec![0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    req.extend_from_slice(&END.to_be_bytes());
    req.extend_from_slice(&[0; 8]);
    let mut resp = req.clone();
    resp[0] = 0x81;
    (req, resp)
}

// ---- running a case ----

/// How a request is written.
#[derive(Clone, Copy, PartialEq)]
enum Send {
    Whole,
    ByteAtATime,
}

/// A case's connection to one server.
struct Conn {
    addr: SocketAddr,
    s: TcpStream,
    how: Send,
    /// Everything answered so far (probe answers removed).
    out: Vec<u8>,
    /// The server closed, or stayed silent: nothing more is sent.
    done: bool,
    /// The protocol, from the first byte sent (`None`: nothing sent yet).
    binary: Option<bool>,
}

impl Conn {
    fn open(addr: SocketAddr, how: Send) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(QUIET)).unwrap();
        Conn {
            addr,
            s,
            how,
            out: Vec::new(),
            done: false,
            binary: None,
        }
    }

    /// Sends `bytes` and (with `probe`) the probe, then reads the answers:
    /// up to the probe's, or until the server closes (`<closed>`) or stays
    /// silent (`<open>`).
    fn send(&mut self, bytes: &[u8], probe: bool) {
        if self.done {
            return;
        }
        if self.binary.is_none() && !bytes.is_empty() {
            self.binary = Some(bytes[0] == 0x80);
        }
        let binary = self.binary == Some(true);
        let (probe_req, probe_resp) = match (probe, binary) {
            (false, _) => (Vec::new(), Vec::new()),
            (true, true) => binary_probe(),
            (true, false) => (b"mn\r\n".to_vec(), b"MN\r\n".to_vec()),
        };
        let all = [bytes, &probe_req].concat();
        // The server may close before taking it all; what it sent still counts.
        match self.how {
            Send::Whole => {
                let _ = self.s.write_all(&all);
            }
            Send::ByteAtATime => {
                // Past [`BYTEWISE_MAX`] (long lines, large values) the rest
                // goes at once.
                let (bytewise, rest) = all.split_at(all.len().min(BYTEWISE_MAX));
                for b in bytewise {
                    if self.s.write_all(std::slice::from_ref(b)).is_err() {
                        break;
                    }
                    // Let the server read it alone, most of the time.
                    thread::sleep(Duration::from_micros(20));
                }
                let _ = self.s.write_all(rest);
            }
        }
        // A text request may hold `mn`s of its own: the probe's `MN` is the
        // one after theirs.
        let probes = if binary {
            1
        } else {
            all.split(|&b| b == b'\n')
                .filter(|l| {
                    l.split(|&b| b == b' ' || b == b'\r')
                        .find(|w| !w.is_empty())
                        == Some(b"mn")
                })
                .count()
        };
        let start = self.out.len();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let answered = || {
                self.out[start..].ends_with(&probe_resp)
                    && (binary
                        || self.out[start..]
                            .windows(probe_resp.len())
                            .filter(|w| *w == probe_resp)
                            .count()
                            >= probes)
            };
            if probe && answered() {
                self.out.truncate(self.out.len() - probe_resp.len());
                return;
            }
            match self.s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    self.out.extend_from_slice(b"<open>");
                    self.done = true;
                    return;
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) => panic!("read: {e}; got {}", show(&self.out)),
            }
        }
        self.out.extend_from_slice(b"<closed>");
        self.done = true;
    }
}

/// The CAS unique of `key` on `addr` (`mg <key> c`), `None` on a miss.
fn cas_of(addr: SocketAddr, key: &[u8]) -> Option<u64> {
    let mut c = Conn::open(addr, Send::Whole);
    c.send(&[b"mg ", key, b" c\r\n"].concat(), true);
    let s = String::from_utf8_lossy(&c.out);
    let n = s.strip_prefix("HD c")?.trim_end();
    Some(n.parse().unwrap_or_else(|_| panic!("mg c: {s:?}")))
}

/// Runs `case` against `addr`.
fn run(case: &Case, prefix: &str, now: i64, addr: SocketAddr, how: Send) -> Vec<u8> {
    let mut conn = Conn::open(addr, how);
    let mut env = Env {
        prefix,
        now,
        conn: Some(&mut conn),
        pending: Vec::new(),
    };
    expand(&case.req, &mut env, true);
    let rest = std::mem::take(&mut env.pending);
    conn.send(&rest, !case.no_probe);
    mask(&conn.out)
}

/// Masks what cannot match: the version string (text and binary).
fn mask(r: &[u8]) -> Vec<u8> {
    if r.first() == Some(&0x81) {
        let mut out = Vec::new();
        let mut b = r;
        while b.len() >= 24 && b[0] == 0x81 {
            let body = u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize;
            let end = (24 + body).min(b.len());
            if b[1] == 0x0b && b[6..8] == [0, 0] {
                out.extend_from_slice(&b[..8]);
                out.extend_from_slice(b"<len>");
                out.extend_from_slice(&b[12..24]);
                out.extend_from_slice(b"<version>");
            } else {
                out.extend_from_slice(&b[..end]);
            }
            b = &b[end..];
        }
        out.extend_from_slice(b);
        return out;
    }
    let mut out = Vec::new();
    for line in r.split_inclusive(|&c| c == b'\n') {
        if line.starts_with(b"VERSION ") && line.ends_with(b"\r\n") {
            out.extend_from_slice(b"VERSION <version>\r\n");
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// Equal, or equal but for times in seconds one apart: a server's clock may
/// tick between two requests, and memcached's ticks on its own schedule.
/// The times are the meta flags `t` (TTL left) and `l` (since last access)
/// and `me`'s `exp=` and `la=`.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    let words = |x: &[u8]| -> Vec<Vec<u8>> {
        x.split(|&c| c == b' ' || c == b'\n')
            .map(|w| w.strip_suffix(b"\r").unwrap_or(w).to_vec())
            .collect()
    };
    // A time token: its name and number.
    let time = |w: &[u8]| -> Option<(usize, i64)> {
        let at = [&b"exp="[..], b"la=", b"t", b"l"]
            .iter()
            .find(|p| w.starts_with(p))?
            .len();
        let n = std::str::from_utf8(&w[at..]).ok()?.parse().ok()?;
        Some((at, n))
    };
    let (wa, wb) = (words(a), words(b));
    wa.len() == wb.len()
        && wa.iter().zip(&wb).all(|(x, y)| {
            x == y
                || matches!(
                    (time(x), time(y)),
                    (Some((i, p)), Some((j, q))) if i == j && x[..i] == y[..j] && (p - q).abs() <= 1
                )
        })
}

// ---- the servers ----

/// duality on `model` with memcached's defaults and `item_max`.
fn duality(model: &str, item_max: usize) -> InProc {
    let m: Model = model.parse().expect("model");
    let config = KvConfig {
        memory_limit: 64 << 20,
        max_item_size: item_max,
        threads: 2,
        model: m.to_string(),
        ..KvConfig::default()
    };
    InProc::start(m, config, false)
}

fn tcp(p: &InProc) -> SocketAddr {
    match &p.addr {
        Addr::Tcp(a) => *a,
        Addr::Unix(_) => unreachable!("started on TCP"),
    }
}

/// Runs a section on fresh servers; returns its failures.
fn run_section(si: usize, s: &Section) -> Vec<String> {
    let item_max = s.item_max.unwrap_or(1 << 20);
    let size = item_max.to_string();
    // memcached refuses chunks larger than its items (512 KiB by default).
    // Its page mover is off: moving a page gives the items in it new CAS
    // uniques, at times of its own.
    let opts = format!(
        "slab_chunk_max={},slab_automove=0",
        (item_max / 2).min(512 * 1024)
    );
    let mc = Memcached::start(&["-I", &size, "-o", &opts]);
    let du = duality("symped:2", item_max);
    let du_bytes = duality("amped:1", item_max);
    let (mc, du, du_bytes) = (mc.addr, tcp(&du), tcp(&du_bytes));
    let mut fails = Vec::new();
    for (ci, case) in s.cases.iter().enumerate() {
        let prefix = format!("n{si:02}{ci:03}");
        let now = unix_now();
        let (want, got, bytewise) = thread::scope(|sc| {
            let a = sc.spawn(|| run(case, &prefix, now, mc, Send::Whole));
            let b = sc.spawn(|| run(case, &prefix, now, du, Send::Whole));
            let how = if case.whole {
                Send::Whole
            } else {
                Send::ByteAtATime
            };
            let prefix = &prefix;
            let c = sc.spawn(move || run(case, prefix, now, du_bytes, how));
            (a.join().unwrap(), b.join().unwrap(), c.join().unwrap())
        });
        let at = format!(
            "{} (corpus line {}, section {:?})",
            case.name, case.line, s.name
        );
        let expect = |what: &str, want: &[u8], got: &[u8]| -> Option<String> {
            (!same(want, got)).then(|| {
                format!(
                    "{at}: {what}\n  request   {}\n  want      {}\n  got       {}",
                    show(case.req.as_bytes()),
                    show(want),
                    show(got)
                )
            })
        };
        match &case.deviation {
            None => fails.extend(expect("memcached vs duality", &want, &got)),
            Some(d) => {
                let dev = expand(&d.want, &mut Env::offline(&prefix, now), false);
                fails.extend(expect("duality's documented answer", &dev, &got));
                if same(&want, &dev) {
                    fails.push(format!(
                        "{at}: memcached now answers as duality: the deviation {:?} is stale",
                        d.row
                    ));
                }
                if !README.contains(&format!("| {} |", d.row)) {
                    fails.push(format!("{at}: no README deviations row {:?}", d.row));
                }
            }
        }
        if !case.whole {
            fails.extend(expect("sent whole vs one byte at a time", &got, &bytewise));
        }
    }
    fails
}

#[test]
fn corpus() {
    // The comparison is the test: without memcached it fails, with the hint.
    assert!(
        Memcached::binary().is_some(),
        "kv_differential needs memcached 1.6 (apt-get install memcached; .ci/run installs it)"
    );
    let sections = parse_corpus(CORPUS);
    let cases: usize = sections.iter().map(|s| s.cases.len()).sum();
    let fails: Vec<String> = thread::scope(|sc| {
        let hs: Vec<_> = sections
            .iter()
            .enumerate()
            .map(|(i, s)| sc.spawn(move || run_section(i, s)))
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(
        fails.is_empty(),
        "{} of {cases} corpus cases differ:\n{}",
        fails.len(),
        fails.join("\n")
    );
    eprintln!(
        "kv_differential: {cases} cases in {} sections match",
        sections.len()
    );
}

/// The corpus's own syntax: templates expand as documented.
#[test]
fn templates() {
    let mut env = Env::offline("n00001", 1000);
    let mut e = |s: &str| expand(s, &mut env, false);
    assert_eq!(e("get $k\\r\\n"), b"get n00001\r\n");
    assert_eq!(e("{key 8}"), b"n00001xx");
    assert_eq!(e("{val 3}{rep 2 a\\x20}"), b"vvva a ");
    assert_eq!(e("{now+5} {now-5}"), b"1005 995");
    assert_eq!(e("{b64 $k}"), b"bjAwMDAx");
    assert_eq!(
        e("{bin get k={key 6} opaque=7 exp={now+1}}"),
        [
            &[0x80, 0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 7][..],
            &[0; 8],
            &1001u32.to_be_bytes(),
            b"n00001"
        ]
        .concat()
    );
}
