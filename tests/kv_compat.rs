//! Text-protocol edge cases of `duality kv` compared byte for byte with the
//! real memcached (1.6, `/usr/bin/memcached`, started by each test on a free
//! port): legacy `delete <key> 0`, `verbosity` without a level, lines over
//! the limit, an HTTP request line, value lengths that do not fit, short
//! lines, storage lines with bad arguments, `shutdown`, `cache_memlimit`,
//! the `stats` groups tools read (`sizes`, `detail`, `cachedump`, `conns`,
//! `items`, `slabs`) and `lru_crawler`. Each case runs on a fresh connection
//! to both servers; what comes back (and whether the server closed the
//! connection) must be the same. Where a figure cannot match (times,
//! memcached's own item sizes and classes) the shape is compared.
//!
//! The memcached command-line flags `duality kv` takes (`-A -U -B -R -C -d
//! -P -V -o -F -X -W -a -b -r -k -u -f -n -D -Y -S`, and the refused `-Z`)
//! are checked on the built binary; `-Y`'s authentication is compared
//! with memcached's (`-S`'s in `kv_sasl.rs`).

mod common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            "cache_memlimit 1000000001\r\n",
            "cache_memlimit 1000000000000\r\n",
            "cache_memlimit +64\r\n",
            "cache_memlimit 100\r\n",
        ]),
    );
    // Both applied the last limit that was answered OK (100 MiB).
    let mut c = dk.connect();
    let mut m = Client::connect(&Addr::Tcp(mc.addr));
    assert_eq!(c.stats("settings")["maxbytes"], (100u64 << 20).to_string());
    assert_eq!(m.stats("settings")["maxbytes"], (100u64 << 20).to_string());
    assert_eq!(c.stats("")["limit_maxbytes"], (100u64 << 20).to_string());
}

/// Writes `n` values of `size` bytes under `key<i>` with `noreply`, then
/// waits for them all to be taken.
fn fill(c: &mut Client, n: usize, size: usize) {
    let value = vec![b'v'; size];
    let mut batch = Vec::new();
    for i in 0..n {
        batch.extend_from_slice(format!("set key{i} 0 0 {size} noreply\r\n").as_bytes());
        batch.extend_from_slice(&value);
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 256 << 10 {
            c.call(&batch);
            batch.clear();
        }
    }
    c.call(&batch);
}

fn stat_u64(m: &std::collections::HashMap<String, String>, name: &str) -> u64 {
    m.get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("stat {name} in {m:?}"))
}

/// `cache_memlimit` applies to the running server (the built binary): the
/// limit drops at once, evictions bring `bytes` under it, and it stays
/// under while more is written; raised again, the store grows past the old
/// limit. (memcached keeps the memory it holds past a lowered limit; see the
/// README's deviations.)
#[test]
fn cache_memlimit_applies() {
    let kv = KvProc::start(&["-m", "64", "-I", "64k", "-t", "2"]);
    let mut c = kv.connect();
    fill(&mut c, 30_000, 1000);
    let before = c.stats("");
    assert!(stat_u64(&before, "bytes") > 24 << 20, "{before:?}");
    assert_eq!(stat_u64(&before, "limit_maxbytes"), 64 << 20);
    c.expect(b"cache_memlimit 8\r\n", b"OK\r\n");
    let after = c.stats("");
    assert_eq!(stat_u64(&after, "limit_maxbytes"), 8 << 20);
    assert_eq!(c.stats("settings")["maxbytes"], (8u64 << 20).to_string());
    assert!(stat_u64(&after, "bytes") <= 8 << 20, "{after:?}");
    assert!(
        stat_u64(&after, "evictions") > stat_u64(&before, "evictions") + 10_000,
        "{after:?}"
    );
    let items = c.stats("items");
    let evicted: u64 = items
        .iter()
        .filter(|(k, _)| k.ends_with(":evicted"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(evicted, stat_u64(&after, "evictions"));
    // Writing more keeps it under the new limit.
    fill(&mut c, 5_000, 1000);
    let st = c.stats("");
    assert!(stat_u64(&st, "bytes") <= 8 << 20, "{st:?}");
    // Raised: room for more than the old limit again.
    c.expect(b"cache_memlimit 32 noreply\r\n", b"");
    fill(&mut c, 20_000, 1000);
    let st = c.stats("");
    assert_eq!(stat_u64(&st, "limit_maxbytes"), 32 << 20);
    assert!(stat_u64(&st, "bytes") > 16 << 20, "{st:?}");
    assert!(stat_u64(&st, "bytes") <= 32 << 20, "{st:?}");
}

/// Each shard keeps room for one largest item: with 1 MiB items and 32
/// shards a limit below 32 MiB is raised to that floor (and logged).
#[test]
fn cache_memlimit_floor() {
    let kv = KvProc::start(&["-m", "64"]);
    let mut c = kv.connect();
    c.expect(b"cache_memlimit 8\r\n", b"OK\r\n");
    // One largest item, the longest key, its header and two segments a shard.
    let floor = 32 * ((1u64 << 20) + 250 + 32 + 2 * 32768);
    assert_eq!(c.stats("")["limit_maxbytes"], floor.to_string());
    assert!(kv.wait_stderr("cache_memlimit 8: applied", Duration::from_secs(5)));
    // The largest item still fits (1 MiB in memcached's count, header included).
    let n = (1 << 20) - duality_kv::protocol::item_size(3, 0, 0);
    let mut req = format!("set big 0 0 {n}\r\n").into_bytes();
    req.extend(std::iter::repeat_n(b'b', n));
    req.extend_from_slice(b"\r\n");
    c.expect(&req, b"STORED\r\n");
}

// ---- short lines, storage lines, pending answers at a close ----

#[test]
fn short_and_bad_storage_lines() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    let k251 = "k".repeat(251);
    let owned = [
        format!("set {k251} 0 0 1\r\nx\r\n"),
        format!("set {k251} 0 0 1 noreply\r\nx\r\n"),
        format!("set {k251} 0 0 5\r\nhello\r\n"),
        format!("cas {k251} 0 0 1 1\r\nx\r\n"),
        format!("add {k251} x 0 5\r\nhello\r\n"),
        format!("get {k251}\r\n"),
        format!("delete {k251}\r\n"),
        format!("incr {k251} 1\r\n"),
        format!("touch {k251} 1\r\n"),
    ];
    let mut cases: Vec<&str> = vec![
        "x\r\n",
        "\r\n",
        "\n",
        "xy\r\n",
        "x\n",
        "set k 0 0\r\n",
        "set k 0\r\n",
        "set\r\n",
        "set k 0 0 noreply\r\n",
        "cas k 0 0 1\r\n",
        "cas k 0 0 1 noreply\r\n",
        "add k\r\n",
        "set k 0 0 1 2 3 4\r\nx\r\n",
        "set k 0 0 1 noreply x\r\nx\r\n",
        "set k x 0 5\r\nhello\r\n",
        "set k 0 x 5\r\nhello\r\nget k\r\n",
        "cas k 0 0 1 x\r\nx\r\n",
        "set k x 0 5 noreply\r\nhello\r\n",
        "set k 0 0 3\r\nabcde\r\nget k\r\n",
        "set k 0 0 1 junk\r\nx\r\nget k\r\n",
        // An unknown command is answered even after noreply.
        "bogus noreply\r\n",
        "GET k noreply\r\n",
        "set k 0 0 3\r\nabcdeg k noreply\r\nget k\r\n",
        // White space after a number (tokens split on spaces only).
        "set k 0 0 1\t\r\nx\r\nget k\r\n",
        "set k 0\t 0 1\r\r\nx\r\nget k\r\n",
        "set n 0 0 1\r\n5\r\nincr n 5\t\r\ntouch n 10\x0b\r\nget n\r\n",
        "set n 0 0 1\r\n5\r\nincr n 5\tx\r\nincr n 5x\r\ntouch n 10\tjunk\r\n",
        // Other commands without the tokens they need.
        "get\r\n",
        "gets \r\n",
        "gat\r\n",
        "gats\r\n",
        "gat 10\r\n",
        "gats 10\r\n",
        "gat x\r\n",
        "gat x k\r\n",
        "incr\r\n",
        "incr n\r\n",
        "incr n 1 noreply x\r\n",
        "incr n 1 x\r\n",
        "incr n x\r\n",
        "decr n 1 2 3\r\n",
        "touch\r\n",
        "touch t\r\n",
        "touch t 1 2 3\r\n",
        "touch t 1 x\r\n",
        "touch t noreply\r\n",
        "decr n noreply\r\nab\r\n",
        "flush_all 0 noreply x\r\n",
        "flush_all a b\r\n",
        "flush_all x\r\n",
        "flush_all 0 0\r\n",
        "flush_all noreply\r\n",
        "quit x\r\n",
        // Numbers as strtol reads them: a leading `+` is taken.
        "set p +1 +0 +1\r\nx\r\nget p\r\n",
        "incr p +1\r\ntouch p +5\r\ngat +0 p\r\nverbosity +1\r\n",
        "ms m +1 T+5\r\nx\r\nmg m t v\r\n",
        "delete m +0\r\nflush_all +0\r\n",
        "set q 0 0 ++1\r\nx\r\nset q 0 0 -+1\r\nx\r\n",
        // Meta commands without a key; `md` flag errors.
        "mg\r\n",
        "ms\r\n",
        "md\r\n",
        "ma\r\n",
        "me\r\n",
        "ms k\r\n",
        "md k q q\r\n",
        "md k Tx\r\n",
        "md k Cx\r\n",
        "md k b\r\n",
        "md !!! b\r\n",
        "md k T5 q\r\n",
    ];
    cases.extend(owned.iter().map(|s| s.as_str()));
    compare(mc.addr, tcp_addr(&dk), &probed(&cases));
}

#[test]
fn a_close_drops_the_pending_answers() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    let mut long = b"version\r\n".to_vec();
    long.resize(long.len() + 4096, b'x');
    let mut get_then_long = b"get a\r\ntouch a 0\r\n".to_vec();
    get_then_long.resize(get_then_long.len() + 4096, b'x');
    compare(
        mc.addr,
        tcp_addr(&dk),
        &[
            (b"version\r\nGET / HTTP/1.1\r\n".to_vec(), false),
            (
                b"version\r\nversion\r\nGET / HTTP/1.1\r\nversion\r\n".to_vec(),
                false,
            ),
            (b"set a 0 0 1\r\nx\r\nPOST / HTTP/1.0\r\n".to_vec(), false),
            (long, false),
            // memcached writes its answers out after each text get and `mn`:
            // those up to the last of them go before the close.
            (b"get a\r\ntouch a 0\r\nGET / HTTP/1.1\r\n".to_vec(), false),
            (b"touch a 0\r\ngets a\r\nGET / HTTP/1.1\r\n".to_vec(), false),
            (b"get a\r\nmg a v\r\nGET / HTTP/1.1\r\n".to_vec(), false),
            (b"mg a v\r\nget a b\r\nGET / HTTP/1.1\r\n".to_vec(), false),
            (
                b"mg a v\r\nmn\r\nmg a v\r\nGET / HTTP/1.1\r\n".to_vec(),
                false,
            ),
            (
                b"gat 0 a\r\nset b 0 0 1\r\ny\r\nGET / HTTP/1.1\r\n".to_vec(),
                false,
            ),
            (get_then_long, false),
        ],
    );
    // The set before the HTTP line was applied, its answer dropped.
    let mut c = dk.connect();
    c.expect(b"get a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n");
}

// ---- stats groups ----

#[test]
fn stats_sizes_detail_and_errors() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    compare(
        mc.addr,
        tcp_addr(&dk),
        &probed(&[
            "stats sizes\r\n",
            "stats detail\r\n",
            "stats detail x\r\n",
            "stats detail dump\r\n",
            "stats detail on\r\n",
            "set a:1 0 0 1\r\nx\r\nget a:1\r\nget a:2 plain\r\ndelete a:1\r\n",
            "gets a:1\r\nset plain 0 0 1\r\nx\r\ntouch a:1 0\r\nincr a:1 1\r\n",
            "stats detail dump\r\n",
            "stats detail off\r\n",
            "get a:1\r\nstats detail dump x\r\n",
            "stats detail on x\r\nstats detail off\r\n",
            "stats reset\r\nstats detail dump\r\n",
            "stats cachedump\r\n",
            "stats cachedump 1\r\n",
            "stats cachedump x 1\r\n",
            "stats cachedump 1 x\r\n",
            "stats cachedump 64 1\r\n",
            "stats cachedump 99999999999 1\r\n",
            "stats cachedump 5 0\r\n",
            "stats cachedump 63 1\r\n",
            "stats bogus\r\n",
            "stats reset x\r\n",
        ]),
    );
}

/// `stats conns` describes the asking connection as memcached does: its
/// address, the listening address, `conn_parse_cmd`, 0 seconds; an idle
/// one that never sent a request is `conn_new_cmd`, one between requests
/// `conn_read`. Both list their listening socket too: its address,
/// `conn_listening`, seconds since start. (The descriptor numbers are each
/// server's own.)
#[test]
fn stats_conns() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    for (server, addr) in [("memcached", mc.addr), ("duality", tcp_addr(&dk))] {
        let fresh = TcpStream::connect(addr).expect("connect");
        let fresh_addr = format!("tcp:{}", fresh.local_addr().unwrap());
        let mut served = Client::connect(&Addr::Tcp(addr));
        served.call(b"version\r\n");
        let mut c = Client::connect(&Addr::Tcp(addr));
        let st = c.stats("conns");
        let fd_of = |a: &str| {
            st.iter()
                .find(|(k, v)| k.ends_with(":addr") && v.as_str() == a)
                .map(|(k, _)| k.trim_end_matches(":addr").to_string())
        };
        let asking = st
            .iter()
            .filter(|(k, v)| k.ends_with(":state") && v.as_str() == "conn_parse_cmd")
            .map(|(k, _)| k.trim_end_matches(":state").to_string())
            .collect::<Vec<_>>();
        assert_eq!(asking.len(), 1, "{server}: {st:?}");
        let fd = &asking[0];
        assert!(
            st[&format!("{fd}:addr")].starts_with("tcp:127.0.0.1:"),
            "{server}: {st:?}"
        );
        assert_eq!(
            st[&format!("{fd}:listen_addr")],
            format!("tcp:{addr}"),
            "{server}"
        );
        assert_eq!(st[&format!("{fd}:secs_since_last_cmd")], "0", "{server}");
        let fresh_fd = fd_of(&fresh_addr).unwrap_or_else(|| panic!("{server}: {st:?}"));
        assert_eq!(
            st[&format!("{fresh_fd}:state")],
            "conn_new_cmd",
            "{server}: {st:?}"
        );
        assert_eq!(
            st[&format!("{fresh_fd}:listen_addr")],
            format!("tcp:{addr}")
        );
        let states: Vec<&String> = st
            .iter()
            .filter(|(k, _)| k.ends_with(":state"))
            .map(|(_, v)| v)
            .collect();
        // memcached may still show the served connection finishing its
        // write (`conn_mwrite`) just after the client got the answer.
        assert!(
            states.contains(&&"conn_read".to_string())
                || (server == "memcached" && states.contains(&&"conn_mwrite".to_string())),
            "{server}: {st:?}"
        );
        // The listening socket, before the connections (by descriptor).
        let listener = fd_of(&format!("tcp:{addr}")).unwrap_or_else(|| panic!("{server}: {st:?}"));
        assert_eq!(
            st[&format!("{listener}:state")],
            "conn_listening",
            "{server}"
        );
        assert!(st[&format!("{listener}:secs_since_last_cmd")]
            .parse::<u64>()
            .is_ok());
        assert!(
            !st.contains_key(&format!("{listener}:listen_addr")),
            "{server}"
        );
        // In memcached's own process the listener's descriptor comes first;
        // duality runs inside this test process, where a descriptor another
        // test just closed below the listener's may go to the connection.
        if server == "memcached" {
            assert!(listener.parse::<i32>().unwrap() < fd.parse::<i32>().unwrap());
        }
        // Every client connection has the four fields.
        for (k, v) in st.iter().filter(|(k, _)| k.ends_with(":listen_addr")) {
            let fd = k.trim_end_matches(":listen_addr");
            assert_eq!(v, &format!("tcp:{addr}"));
            for f in ["addr", "state", "secs_since_last_cmd"] {
                assert!(st.contains_key(&format!("{fd}:{f}")), "{server}: {fd}:{f}");
            }
        }
        drop((fresh, served));
    }
}

/// Field names of `stats items` / `stats slabs` with the class ids replaced
/// by `<c>`, in order.
fn names(r: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(r)
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .map(|l| {
            let name = l.split(' ').next().unwrap();
            let parts: Vec<&str> = name.split(':').collect();
            match parts.as_slice() {
                ["items", _, f] => format!("items:<c>:{f}"),
                [_, f] => format!("<c>:{f}"),
                _ => name.to_string(),
            }
        })
        .collect()
}

/// `stats items` and `stats slabs`: the same fields in the same order as
/// memcached, and the same counts where both count the same thing (one
/// class holding two items, hits, stores). Chunk sizes and class ids
/// differ: duality's classes are over what it charges per item.
#[test]
fn stats_items_and_slabs_shape() {
    let mc = Memcached::start(&[]);
    // memcached's cachedump lists its cold LRU only: -o no_lru_maintainer
    // puts every item there (and prints fewer `stats items` fields).
    let mc_cold = Memcached::start(&["-o", "no_lru_maintainer"]);
    let dk = duality(false);
    let script =
        b"set a 0 0 1\r\nx\r\nset b 0 0 1\r\ny\r\nget a\r\nget a b\r\ntouch a 0\r\ndelete b\r\nset c 0 0 1\r\nz\r\n";
    for addr in [mc.addr, mc_cold.addr, tcp_addr(&dk)] {
        let mut c = Client::connect(&Addr::Tcp(addr));
        c.call(script);
    }
    let get = |addr: SocketAddr, group: &str| {
        let mut c = Client::connect(&Addr::Tcp(addr));
        c.send(format!("stats {group}\r\n").as_bytes());
        c.read_until(b"END\r\n")
    };
    for group in ["items", "slabs"] {
        let want = get(mc.addr, group);
        let got = get(tcp_addr(&dk), group);
        assert_eq!(
            names(&got),
            names(&want),
            "stats {group}:\n{}\n{}",
            show(&want),
            show(&got)
        );
        let (w, g) = (parse_stats(&want), parse_stats(&got));
        let class = |m: &std::collections::HashMap<String, String>| {
            m.keys()
                .find_map(|k| {
                    k.strip_suffix(":used_chunks").or(k
                        .strip_prefix("items:")
                        .and_then(|k| k.strip_suffix(":number")))
                })
                .unwrap()
                .to_string()
        };
        let (cw, cg) = (class(&w), class(&g));
        let fields: &[&str] = if group == "items" {
            &[
                "number",
                "evicted",
                "outofmemory",
                "reclaimed",
                "evicted_unfetched",
            ]
        } else {
            &[
                "used_chunks",
                "get_hits",
                "cmd_set",
                "delete_hits",
                "touch_hits",
                "cas_hits",
            ]
        };
        for f in fields {
            let key = |c: &str| {
                if group == "items" {
                    format!("items:{c}:{f}")
                } else {
                    format!("{c}:{f}")
                }
            };
            assert_eq!(g[&key(&cg)], w[&key(&cw)], "stats {group} {f}");
        }
        if group == "slabs" {
            assert_eq!(g["active_slabs"], w["active_slabs"]);
        }
    }
    // cachedump lists the same items the same way.
    let dump = |addr: SocketAddr, items: &[u8]| {
        let st = parse_stats(items);
        let class = st
            .keys()
            .find_map(|k| {
                k.strip_prefix("items:")
                    .and_then(|k| k.strip_suffix(":number"))
            })
            .unwrap()
            .to_string();
        let mut c = Client::connect(&Addr::Tcp(addr));
        c.send(format!("stats cachedump {class} 0\r\n").as_bytes());
        let mut lines: Vec<String> = String::from_utf8_lossy(&c.read_until(b"END\r\n"))
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    let want = dump(mc_cold.addr, &get(mc_cold.addr, "items"));
    let got = dump(tcp_addr(&dk), &get(tcp_addr(&dk), "items"));
    assert_eq!(got, want);
    assert_eq!(want, ["END", "ITEM a [1 b; 0 s]", "ITEM c [1 b; 0 s]"]);
}

// ---- lru_crawler ----

#[test]
fn lru_crawler_replies() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    // memcached hands the connection to its crawler for a metadump and does
    // not read what was pipelined after it: no `mn` after those.
    let mut cases = probed(&[
        "lru_crawler\r\n",
        "lru_crawler bogus\r\n",
        "LRU_CRAWLER crawl all\r\n",
        "lru_crawler crawl all\r\n",
        "lru_crawler crawl\r\n",
        "lru_crawler crawl all x\r\n",
        "lru_crawler crawl 0\r\n",
        "lru_crawler crawl 64\r\n",
        "lru_crawler crawl x\r\n",
        "lru_crawler crawl 1,x\r\n",
        "lru_crawler crawl ALL\r\n",
        "lru_crawler crawl -1\r\n",
        "lru_crawler metadump\r\n",
        "lru_crawler metadump 0\r\n",
        "lru_crawler metadump x\r\n",
        "lru_crawler metadump all x\r\n",
        "lru_crawler mgdump all\r\n",
        "lru_crawler sleep\r\n",
        "lru_crawler sleep 100\r\n",
        "lru_crawler sleep x\r\n",
        "lru_crawler sleep -1\r\n",
        "lru_crawler sleep 2000000\r\n",
        "lru_crawler sleep 1 2\r\n",
        "lru_crawler tocrawl 10\r\n",
        "lru_crawler tocrawl 99999999999\r\n",
        "lru_crawler tocrawl x\r\n",
        "lru_crawler tocrawl\r\n",
        "lru_crawler enable\r\n",
        "lru_crawler enable x\r\n",
        "lru_crawler crawl all noreply\r\n",
    ]);
    cases.insert(3, (b"lru_crawler metadump all\r\n".to_vec(), false));
    cases.insert(4, (b"lru_crawler metadump 1,2\r\n".to_vec(), false));
    compare(mc.addr, tcp_addr(&dk), &cases);
    // memcached's crawl runs on in its thread: one still running when the
    // crawler is disabled leaves it answering "an unknown error happened"
    // and "failed to start lru crawler thread" (seen on a busy machine).
    let mut c = Client::connect(&Addr::Tcp(mc.addr));
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while c.stats("")["lru_crawler_running"] != "0" {
        assert!(
            std::time::Instant::now() < until,
            "memcached's crawl goes on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let cases = probed(&["lru_crawler disable\r\n", "lru_crawler disable\r\n"]);
    compare(mc.addr, tcp_addr(&dk), &cases);
    // memcached's `disable` asks its crawler thread to stop and answers at
    // once (CRAWLER_NOWAIT); until the thread is gone a crawl answers
    // "ERROR an unknown error happened" (seen once on a busy machine),
    // after it "CLIENT_ERROR lru crawler disabled". A crawl refused either
    // way starts nothing, so ask until memcached has settled.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while exchange(mc.addr, b"lru_crawler crawl all\r\n", true)
        .starts_with(b"ERROR an unknown error")
    {
        assert!(
            std::time::Instant::now() < until,
            "memcached's crawler thread does not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let cases = probed(&[
        "lru_crawler crawl all\r\n",
        "lru_crawler metadump all\r\n",
        "lru_crawler enable\r\n",
    ]);
    compare(mc.addr, tcp_addr(&dk), &cases);
    // The crawler is on again on both.
    let settings = |addr: SocketAddr| Client::connect(&Addr::Tcp(addr)).stats("settings");
    assert_eq!(settings(mc.addr)["lru_crawler"], "yes");
    assert_eq!(settings(tcp_addr(&dk))["lru_crawler"], "yes");
    assert_eq!(settings(tcp_addr(&dk))["lru_crawler_tocrawl"], "1215752191");
}

/// `lru_crawler metadump`: memcached's line format (URI-encoded key, `\n`
/// line ends, `END\r\n`), the same values but for the access time (a clock
/// read) and memcached's own item size and class.
#[test]
fn lru_crawler_metadump_format() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    let mask = |r: &[u8]| -> Vec<String> {
        let text = String::from_utf8_lossy(r).into_owned();
        assert!(text.ends_with("\nEND\r\n"), "{text:?}");
        let mut lines: Vec<String> = text
            .trim_end_matches("END\r\n")
            .split_terminator('\n')
            .map(|l| {
                l.split(' ')
                    .map(|f| match f.split_once('=') {
                        Some(("la" | "cls" | "size", v)) => {
                            assert!(v.parse::<u64>().is_ok(), "{l}");
                            format!("{}=<n>", f.split('=').next().unwrap())
                        }
                        _ => f.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        lines.sort();
        lines
    };
    let exp = unix_now() + 1000;
    let script = format!(
        "set a/b:c 0 0 1\r\nx\r\nset plain 5 {exp} 3\r\nabc\r\nget plain\r\nset gone 0 -1 1\r\nx\r\n"
    );
    let mut results = Vec::new();
    for addr in [mc.addr, tcp_addr(&dk)] {
        let mut c = Client::connect(&Addr::Tcp(addr));
        c.call(script.as_bytes());
        // memcached answers BUSY (and no END) while its background LRU
        // crawler is on a run, as it may be just after it starts; its
        // clients retry. Only `\r\n` ends END or BUSY: dump lines end in `\n`.
        let mut tries = 0;
        let dump = loop {
            c.send(b"lru_crawler metadump all\r\n");
            let r = c.read_until(b"\r\n");
            if r != b"BUSY currently processing crawler request\r\n" {
                break r;
            }
            assert!(addr == mc.addr, "duality answered BUSY");
            tries += 1;
            assert!(tries < 500, "memcached's crawler stayed busy");
            std::thread::sleep(Duration::from_millis(10));
        };
        results.push(mask(&dump));
    }
    assert_eq!(results[1], results[0]);
    assert_eq!(
        results[0],
        [
            "key=a%2Fb%3Ac exp=-1 la=<n> cas=1 fetch=no cls=<n> size=<n>".to_string(),
            format!("key=plain exp={exp} la=<n> cas=2 fetch=yes cls=<n> size=<n>"),
        ]
    );
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

/// memcached's `-d`: the command returns once the detached server serves
/// (its ready line, exit 0; the pid file names the server, in a session of
/// its own), and a start that fails returns its message and status.
#[test]
fn daemon_returns_once_it_serves() {
    let dir = TempDir::new("kv-daemon");
    let sock = dir.0.join("kv.sock");
    let pid_file = dir.0.join("kv.pid");
    let (s, p) = (sock.to_str().unwrap(), pid_file.to_str().unwrap());
    let out = duality_bin(&["-d", "-p", "0", "-s", s, "-P", p, "-t", "1"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("ready kv "),
        "{out:?}"
    );
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    /// Stops the daemon (not our child) by its pid, whatever the test did.
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: kill(2) on the daemon this test started.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let guard = Kill(pid);
    // /proc/PID/stat: `pid (comm) state ppid pgrp session …`.
    let stat = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    let fields: Vec<String> = stat(pid)
        .expect("the daemon runs")
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(fields[3], pid.to_string(), "its own session: {fields:?}");
    let mut c = Client::connect(&Addr::Unix(sock.clone()));
    c.expect(b"set k 0 0 2\r\nhi\r\n", b"STORED\r\n");
    c.expect(b"get k\r\n", b"VALUE k 0 2\r\nhi\r\nEND\r\n");
    drop(c);
    // SAFETY: kill(2) on the daemon's pid.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    // Gone (or a zombie where nothing reaps orphans): its files removed.
    let until = Instant::now() + Duration::from_secs(10);
    while stat(pid).is_some_and(|s| !s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z')) {
        assert!(Instant::now() < until, "the daemon did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(guard);
    assert!(!pid_file.exists() && !sock.exists());

    // A start that fails: the message on the caller's stderr, status 1.
    std::fs::write(&sock, "not a socket").unwrap();
    let out = duality_bin(&["-d", "-p", "0", "-s", s]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("it exists and is not a socket"), "{err}");
}

#[test]
fn refused_flags() {
    let out = duality_bin(&["-U", "11211", "-p", "0", "-s", "/nonexistent/x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("UDP is not supported"), "{err}");
    let out = duality_bin(&["-B", "negotiate"]);
    assert!(!out.status.success());
    let out = duality_bin(&["-R", "0", "-p", "0", "-s", "/nonexistent/x"]);
    assert!(!out.status.success());
    // What duality kv does not serve, and values memcached rejects too.
    for (args, says) in [
        (
            &["-S", "-B", "ascii"][..],
            "cannot allow the ASCII protocol",
        ),
        (
            &["-Y", "/nonexistent/auth"][..],
            "Could not open authfile [/nonexistent/auth]",
        ),
        (
            &["-Y", "/dev/null", "-B", "binary"][..],
            "needs the ascii protocol",
        ),
        (&["-Z"][..], "TLS is not supported"),
        (&["-f", "1"][..], "Factor must be greater than 1"),
        (&["-n", "0"][..], "Chunk size must be greater than 0"),
        (&["-D", "/"][..], "only ':' is supported"),
        (&["-a", "999"][..], "not an octal mask"),
        (&["-b", "0"][..], "-b"),
        (&["-u", "no-such-user-here"][..], "can't find the user"),
        (&["-l", "no-such-host.invalid"][..], "does not resolve"),
    ] {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-p", "0", "-s", "/nonexistent/x"]);
        let out = duality_bin(&all);
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        // -u only means something to root, as in memcached.
        if args[0] != "-u" || running_as_root() {
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }
}

/// `-M`: a full cache refuses stores with memcached's answer instead of
/// evicting; everything it acknowledged stays readable, and a delete makes
/// room again. memcached -M runs the same steps beside it.
#[test]
fn disable_evictions_flag() {
    fn fill(c: &mut Client) -> Vec<usize> {
        let value = vec![b'v'; 100_000];
        let mut stored = Vec::new();
        for i in 0..400 {
            let mut req = format!("set k{i} 0 0 {}\r\n", value.len()).into_bytes();
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
            let answer = c.call(&req);
            match &answer[..] {
                b"STORED\r\n" => stored.push(i),
                b"SERVER_ERROR out of memory storing object\r\n" => return stored,
                other => panic!("set k{i}: {}", show(other)),
            }
        }
        panic!("400 sets of 100 KB fit: nothing was refused");
    }
    let kv = KvProc::start(&["-M", "-m", "8"]);
    let mc = Memcached::start(&["-M", "-m", "8"]);
    for (who, addr) in [
        ("duality", kv.addr.clone()),
        ("memcached", Addr::Tcp(mc.addr)),
    ] {
        let mut c = Client::connect(&addr);
        c.expect(b"set ctr 0 0 2\r\n10\r\n", b"STORED\r\n");
        let stored = fill(&mut c);
        // A counter that keeps its digits still counts when full.
        c.expect(b"incr ctr 1\r\n", b"11\r\n");
        c.expect(b"decr ctr 5\r\n", b"6\r\n");
        assert!(stored.len() > 10, "{who}: only {} stored", stored.len());
        for i in &stored {
            let got = c.call(format!("mg k{i} s\r\n").as_bytes());
            assert!(got == b"HD s100000\r\n", "{who}: k{i}: {}", show(&got));
        }
        assert_eq!(c.stats("")["evictions"], "0", "{who}");
        // Room again once a few are deleted (stored again under the same
        // keys: duality's room is per shard, and a key keeps its shard).
        for i in &stored[..4] {
            c.expect(format!("delete k{i}\r\n").as_bytes(), b"DELETED\r\n");
        }
        for i in &stored[..4] {
            let mut req = format!("set k{i} 0 0 100000\r\n").into_bytes();
            req.extend_from_slice(&[b'w'; 100_000]);
            req.extend_from_slice(b"\r\n");
            c.expect(&req, b"STORED\r\n");
        }
    }
    assert_eq!(kv.connect().stats("settings")["evictions"], "off");
}

/// memcached's safety and access flags: `-F` (no flush_all), `-X` (no
/// dumps), `-W` (no watch), `-a` (the Unix socket's mode), `-b`, `-r`, `-f`, `-n`,
/// `-D :` and, as root, `-u` (the identity taken) and `-k`.
#[test]
fn access_and_safety_flags() {
    let dir = TempDir::new("kv-flags");
    let sock = dir.path().join("kv.sock");
    let sp = sock.to_str().unwrap();
    let mut args = vec![
        "-F", "-X", "-W", "-a", "766", "-s", sp, "-b", "64", "-r", "-f", "1.25", "-n", "48", "-D",
        ":",
    ];
    let root = running_as_root();
    if root {
        args.extend_from_slice(&["-u", "nobody", "-k"]);
        // `nobody` must be able to make the socket there.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let kv = KvProc::start(&args);
    let mc = Memcached::start(&["-F", "-X", "-W"]);
    let tcp = SocketAddr::from(([127, 0, 0, 1], kv.port));
    compare(
        mc.addr,
        tcp,
        &probed(&[
            "set a 0 0 1\r\nx\r\nflush_all\r\nget a\r\n",
            "flush_all 10\r\n",
            "flush_all noreply\r\n",
            "flush_all x\r\n",
            "stats cachedump 1 1\r\n",
            "lru_crawler metadump all\r\n",
            "watch fetchers\r\n",
        ]),
    );
    // Binary flush: memcached answers "Auth failure." (0x20).
    let mut flush = vec![0u8; 24];
    flush[0] = 0x80;
    flush[1] = 0x08;
    compare(mc.addr, tcp, &[(flush, false)]);
    let mut c = kv.connect();
    // Refused flushes are counted, as memcached counts them.
    let mut m = Client::connect(&Addr::Tcp(mc.addr));
    assert_eq!(c.stats("")["cmd_flush"], m.stats("")["cmd_flush"]);
    assert_ne!(c.stats("")["cmd_flush"], "0");
    let settings = c.stats("settings");
    assert_eq!(settings["flush_enabled"], "no");
    assert_eq!(settings["dump_enabled"], "no");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o766);
    std::os::unix::net::UnixStream::connect(&sock).expect("the socket listens");
    let status = std::fs::read_to_string(format!("/proc/{}/status", kv.pid())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned()
    };
    if root {
        assert_eq!(field("Uid:"), "65534", "-u nobody: {status}");
        assert_eq!(field("Gid:"), "65534", "-u nobody: {status}");
        // Locked, or said why not (a container may refuse mlockall).
        let locked = field("VmLck:").parse::<u64>().unwrap_or(0) > 0;
        assert!(
            locked || kv.wait_stderr("-k:", Duration::from_secs(5)),
            "{status}\n{}",
            kv.stderr_text()
        );
    }
    // Without -F and -X, the settings say so.
    let kv = KvProc::start(&[]);
    let settings = kv.connect().stats("settings");
    assert_eq!(settings["flush_enabled"], "yes");
    assert_eq!(settings["dump_enabled"], "yes");
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

/// Transparent huge pages only with `-L` (memcached's `--enable-largepages`):
/// without it no page of the server is a huge one, not even those faulted
/// before `main` (mimalloc asks for huge pages on its arena; two 2 MiB
/// pages, a third of an idle server's resident memory, came from the
/// runtime's first blocks). On a kernel whose THP mode is `never` there is
/// nothing to see, and the first half holds trivially; a kernel without
/// THP (or older than 5.0, without `THP_enabled`) skips the test.
#[test]
fn huge_pages_only_with_enable_largepages() {
    let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !thp.exists() || !status.contains("THP_enabled:") {
        eprintln!("skipped: no transparent huge pages on this kernel");
        return;
    }
    let field = |pid: i32, file: &str, name: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/{file}"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/{file}"))
    };
    let kv = KvProc::start(&[]);
    let mut c = kv.connect();
    let value = vec![b'v'; 100_000];
    for i in 0..20 {
        let mut set = format!("set k{i} 0 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        c.expect(&set, b"STORED\r\n");
    }
    assert_eq!(field(kv.pid(), "status", "THP_enabled:"), 0);
    assert_eq!(
        field(kv.pid(), "smaps_rollup", "AnonHugePages:"),
        0,
        "huge pages without -L"
    );
    drop(c);
    drop(kv);
    let kv = KvProc::start(&["-L"]);
    assert_eq!(field(kv.pid(), "status", "THP_enabled:"), 1, "-L");
}

/// `-o`: memcached's harmless extended options are accepted, `idle_timeout`
/// and the crawler switches applied, anything else refused with memcached's
/// words and exit status.
#[test]
fn extended_options() {
    for bad in ["bogus", "modern,bogus=1", "hashpower=x", "hashpower"] {
        let out = duality_bin(&["-o", bad, "-p", "0", "-s", "/nonexistent/x"]);
        assert_eq!(out.status.code(), Some(1), "-o {bad}: {out:?}");
        let mut mc = Command::new("/usr/bin/memcached");
        mc.args(["-p", "0", "-U", "0", "-o", bad]);
        if running_as_root() {
            mc.args(["-u", "root"]);
        }
        let want = mc.stdin(Stdio::null()).output().expect("run memcached");
        assert_eq!(want.status.code(), Some(1), "memcached -o {bad}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&want.stderr),
            "-o {bad}"
        );
    }
    let out = duality_bin(&[
        "-o",
        "ext_path=/tmp/x:64m",
        "-p",
        "0",
        "-s",
        "/nonexistent/x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o ext_path: not supported"));
    let kv = KvProc::start(&[
        "-o",
        "modern,hashpower=20,slab_reassign,no_lru_crawler",
        "-o",
        "idle_timeout=1,lru_crawler_sleep=50",
    ]);
    let mut c = kv.connect();
    let settings = c.stats("settings");
    assert_eq!(settings["idle_timeout"], "1");
    assert_eq!(settings["lru_crawler"], "no");
    assert_eq!(settings["lru_crawler_sleep"], "50");
    // An idle connection is closed after about a second, without a word;
    // so is one idle in the middle of a command line or a binary header (a
    // stray byte from a dead client kept its slot for ever), as memcached
    // closes them; one receiving a value is not (memcached's `conn_nread`).
    let mut idle = kv.connect();
    idle.expect(
        b"version\r\n",
        format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION).as_bytes(),
    );
    let mut half_line = kv.connect();
    half_line.send(b"get ab");
    let mut half_header = kv.connect();
    half_header.send(&[0x80, 0x00, 0x00]);
    let mut half_value = kv.connect();
    half_value.send(b"set k 0 0 10\r\nabc");
    let t = std::time::Instant::now();
    for c in [&mut idle, &mut half_line, &mut half_header] {
        assert_eq!(show(&c.read_to_eof()), show(b""));
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The stats connection too, meanwhile (maybe a moment later on its
    // loop): a new one.
    let mut c = kv.connect();
    while c.stats("")["idle_kicks"] != "4" {
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", c.stats(""));
        std::thread::sleep(Duration::from_millis(20));
    }
    half_value.expect(b"defghij\r\n", b"STORED\r\n");
    c.expect_str("stats reset\r\n", "RESET\r\n");
    assert_eq!(c.stats("")["idle_kicks"], "0");
    // Without an idle timeout, the field is not shown (as memcached).
    let plain = KvProc::start(&[]);
    assert!(!plain.connect().stats("").contains_key("idle_kicks"));
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

/// The general `stats` and `stats settings` fields monitoring tools read
/// (prometheus' memcached_exporter, collectd, Diamond): present, and equal
/// to memcached's where both count the same thing — `conn_yields` after the
/// same pipeline under `-R 2`, the listener's fields under the same flags.
#[test]
fn stats_fields_monitoring_tools_read() {
    let kv = KvProc::start(&["-R", "2", "-b", "1024", "-t", "1"]);
    let mc = Memcached::start(&["-R", "2", "-b", "1024"]);
    let read = |addr: SocketAddr| {
        let mut c = Client::connect(&Addr::Tcp(addr));
        // 50 requests at -R 2: a yield after every second one with more
        // to serve, none after the last.
        let mut script = b"set a 0 0 1\r\nx\r\n".to_vec();
        script.extend(b"get a\r\n".repeat(49));
        c.send(&script);
        c.read_until(&b"VALUE a 0 1\r\nx\r\nEND\r\n".repeat(49));
        // duality's loops publish their counts within 10 ms.
        let mut general = c.stats("");
        for _ in 0..100 {
            if general["conn_yields"] == "24" {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            general = c.stats("");
        }
        c.send(b"stats settings\r\n");
        let settings = parse_stats(&c.read_until(b"END\r\n"));
        // `stats reset` zeroes the connection and byte counts too.
        c.call(b"stats reset\r\n");
        let after = c.stats("");
        (general, settings, after)
    };
    let (kg, ks, ka) = read(SocketAddr::from(([127, 0, 0, 1], kv.port)));
    let (mg, ms, ma) = read(mc.addr);
    for k in [
        "total_connections",
        "rejected_connections",
        "bytes_read",
        "bytes_written",
        "cmd_get",
        "conn_yields",
    ] {
        assert_eq!(ka.get(k), ma.get(k), "after stats reset: {k}");
    }
    for k in [
        "conn_yields",
        "accepting_conns",
        "listen_disabled_num",
        "time_in_listen_disabled_us",
        "auth_cmds",
        "auth_errors",
        "malloc_fails",
        "hash_is_expanding",
    ] {
        assert_eq!(kg.get(k), mg.get(k), "stats {k}");
    }
    // Counted by mechanisms that differ (memcached's crawler, its LRU's
    // bumps): there, as numbers.
    for k in [
        "evicted_active",
        "crawler_reclaimed",
        "crawler_items_checked",
    ] {
        assert!(mg.contains_key(k), "memcached's stats {k}");
        kg[k].parse::<u64>().unwrap();
    }
    assert_eq!(kg["conn_yields"], "24", "50 requests in one read at -R 2");
    let tables: u64 = kg["hash_bytes"].parse().unwrap();
    assert!(tables > 0, "hash_bytes {tables}");
    for k in [
        "udpport",
        "inter",
        "domain_socket",
        "umask",
        "tcp_backlog",
        "binding_protocol",
        "verbosity",
        "maxconns_fast",
        "track_sizes",
        "ssl_enabled",
        "auth_enabled_sasl",
        "auth_enabled_ascii",
        "memory_file",
    ] {
        assert_eq!(ks.get(k), ms.get(k), "stats settings {k}");
    }
    assert_eq!(ks["tcpport"], kv.port.to_string());
    // 64 MiB here (memcached's 0 means unlimited; its buffers differ).
    assert_eq!(ks["read_buf_mem_limit"], (64u64 << 20).to_string());
    assert_eq!(ks["lru_segmented"], "no");
    // The command's verbosity is clamped to 2, as memcached's.
    let mut c = kv.connect();
    c.call(b"verbosity 5\r\n");
    assert_eq!(c.stats("settings")["verbosity"], "2");
}

/// A read that finds an item dead (flushed, or stored with a TTL already
/// past) counts in `get_flushed` / `get_misses`, as memcached counts it, and
/// not in `reclaimed` or `expired_unfetched`: memcached counts those only
/// where it takes a dead item's memory.
#[test]
fn dead_items_found_by_reads_are_not_reclaimed() {
    // Without its background LRU threads (they reclaim flushed items).
    let mc = Memcached::start(&["-o", "no_lru_crawler,no_lru_maintainer"]);
    let dk = duality(false);
    let counts = |addr: SocketAddr| {
        let mut c = Client::connect(&Addr::Tcp(addr));
        c.call(b"stats reset\r\n");
        c.expect(b"set f 0 0 1\r\nx\r\n", b"STORED\r\n");
        c.expect(b"flush_all\r\n", b"OK\r\n");
        c.expect(b"get f\r\n", b"END\r\n");
        c.expect(b"mg f v\r\n", b"EN\r\n");
        let st = c.stats("");
        [
            "get_flushed",
            "get_misses",
            "reclaimed",
            "expired_unfetched",
            "curr_items",
        ]
        .map(|k| (k, stat_u64(&st, k)))
    };
    let (d, m) = (counts(tcp_addr(&dk)), counts(mc.addr));
    assert_eq!(d, m);
    assert_eq!(d[2], ("reclaimed", 0));
}

/// Every lookup that finds an item dead counts it, whatever the command:
/// memcached's deletes, touches, incr and meta commands look up through the
/// same `do_item_get` as its reads, which counts `get_flushed` /
/// `get_expired` (duality counted reads only). Flushed items, so that no
/// clock or crawler decides what is dead. Stores count the same in
/// duality; memcached's allocate first, and the allocation may take a
/// flushed item off its LRU tail (`reclaimed`) before the lookup finds it,
/// so only their answers are compared.
#[test]
fn dead_items_found_by_any_command_count_as_memcached_does() {
    // Without its background LRU threads, which may reclaim flushed items
    // at any moment.
    let mc = Memcached::start(&["-o", "no_lru_crawler,no_lru_maintainer"]);
    let dk = duality(false);
    let run = |addr: SocketAddr| {
        let mut c = Client::connect(&Addr::Tcp(addr));
        c.call(b"stats reset\r\n");
        for k in b'a'..=b'l' {
            c.call(&[b"set ", &[k][..], b" 0 0 1\r\n7\r\n"].concat());
        }
        c.expect(b"flush_all\r\n", b"OK\r\n");
        let mut answers: Vec<Vec<u8>> = [
            &b"delete a\r\n"[..],
            b"touch b 0\r\n",
            b"incr c 1\r\n",
            b"decr d 1\r\n",
            b"md e q\r\n",
            b"ma f\r\n",
            b"mg g v\r\n",
            b"get h\r\n",
        ]
        .iter()
        .map(|req| c.call(req))
        .collect();
        let st = c.stats("");
        let counts = [
            "get_flushed",
            "get_expired",
            "get_misses",
            "get_hits",
            "delete_misses",
            "touch_misses",
            "incr_misses",
            "decr_misses",
            "reclaimed",
            "curr_items",
        ]
        .map(|k| (k, stat_u64(&st, k)));
        answers.extend(
            [
                &b"set i 0 0 1\r\ny\r\n"[..],
                b"add j 0 0 1\r\ny\r\n",
                b"append k 0 0 1\r\nz\r\n",
                b"cas l 0 0 1 99\r\ny\r\n",
            ]
            .iter()
            .map(|req| c.call(req)),
        );
        let flushed = stat_u64(&c.stats(""), "get_flushed");
        (answers, counts, flushed)
    };
    let (d, m) = (run(tcp_addr(&dk)), run(mc.addr));
    for (i, (a, b)) in d.0.iter().zip(&m.0).enumerate() {
        assert_eq!(show(a), show(b), "answer {i}");
    }
    assert_eq!(d.1, m.1);
    assert_eq!(d.1[0], ("get_flushed", 8), "every command's lookup counted");
    assert_eq!(d.2, 12, "stores count what their lookup finds dead");
}

/// `-l` takes host names as memcached does (`-l localhost`: every address
/// it resolves to, each bound once), and `stats settings inter` shows what
/// was given; `-t` beside another `--model` is said to be ignored, and
/// `stats threads` counts the threads the model runs.
#[test]
fn listen_host_names_and_threads_of_the_model() {
    let kv = KvProc::start(&["-l", "localhost,127.0.0.1", "-t", "3", "--model", "sped"]);
    let mut c = Client::connect(&Addr::Tcp(SocketAddr::from(([127, 0, 0, 1], kv.port))));
    let settings = c.stats("settings");
    assert_eq!(settings["inter"], "localhost,127.0.0.1");
    assert_eq!(settings["num_threads"], "1");
    assert_eq!(c.stats("")["threads"], "1");
    assert!(
        kv.wait_stderr(
            "-t 3 ignored: --model sped sets the threads",
            Duration::from_secs(10)
        ),
        "{}",
        kv.stderr_text()
    );
    let kv = KvProc::start(&["--model", "seda:2:3"]);
    assert_eq!(kv.connect().stats("")["threads"], "5");
    // An address with a port of its own (memcached's -l 127.0.0.1:PORT)
    // listens there, beside -p's.
    // Another port when the free one is taken again before the bind.
    let (own, kv) = (0..5)
        .find_map(|_| {
            let own = free_port();
            let with_port = format!("127.0.0.1:{own},127.0.0.1");
            KvProc::try_start(free_port(), &["-l", &with_port])
                .ok()
                .map(|kv| (own, kv))
        })
        .expect("no free port took -l's own port in 5 tries");
    let mut c = Client::connect(&Addr::Tcp(SocketAddr::from(([127, 0, 0, 1], own))));
    c.expect_str("set p 0 0 1\r\nx\r\n", "STORED\r\n");
    kv.connect()
        .expect_str("get p\r\n", "VALUE p 0 1\r\nx\r\nEND\r\n");
    // A thread per connection: as many as are open.
    let kv = KvProc::start(&["--model", "thread-per-conn"]);
    let (mut a, _b) = (kv.connect(), kv.connect());
    let mut s = a.stats("");
    for _ in 0..100 {
        if s["curr_connections"] == "2" {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        s = a.stats("");
    }
    assert_eq!(s["threads"], s["curr_connections"]);
    assert_eq!(s["threads"], "2");
}

/// `-s` without `-p` listens on the socket alone, as memcached's `-s`
/// (which turns TCP off): a cache meant for this machine's users is not
/// also open on 127.0.0.1:11211 past the socket's `-a` mode. `-p` asks
/// for both.
#[test]
fn a_unix_socket_alone_opens_no_tcp_port() {
    let dir = TempDir::new("kv-sock-only");
    let sock = dir.path().join("kv.sock");
    let kv = KvProc::start_raw(&["-s", sock.to_str().unwrap()]);
    assert!(!kv.ready_line.contains("127.0.0.1"), "{}", kv.ready_line);
    let mut c = Client::connect(&Addr::Unix(sock.clone()));
    assert_eq!(c.stats("settings")["tcpport"], "0");
    drop(kv);
    let kv = KvProc::start(&["-s", sock.to_str().unwrap()]);
    assert!(
        kv.ready_line.contains(&format!("127.0.0.1:{}", kv.port)),
        "{}",
        kv.ready_line
    );
    let version = kv.connect().call(b"version\r\n");
    assert!(version.starts_with(b"VERSION "), "{version:?}");
}

/// An address whose own port is 0 listens on a port the kernel picks, as
/// memcached's `-l 127.0.0.1:0` does (it was left out, silently beside
/// another address), and the ready line names it; `-p 0` turns TCP off
/// only for an address without a port of its own (README, deviations:
/// memcached's `-p 0` turns it off for both).
#[test]
fn an_own_port_of_zero_listens_on_a_port_the_kernel_picks() {
    let kv = KvProc::start_raw(&["-p", "0", "-l", "127.0.0.1:0"]);
    let port: u16 = kv
        .ready_line
        .trim()
        .rsplit_once(" on 127.0.0.1:")
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port on the ready line: {}", kv.ready_line));
    assert_ne!(port, 0);
    let mut c = Client::connect(&Addr::Tcp(SocketAddr::from(([127, 0, 0, 1], port))));
    c.expect_str("set z 0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("get z\r\n", "VALUE z 0 1\r\nx\r\nEND\r\n");
    let out = duality_bin(&["-p", "0", "-l", "127.0.0.1"]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing to listen on"), "{err}");
}

/// A graceful stop removes the socket file it made, and only that one: a
/// socket another server put at the path since is left to it.
#[test]
fn a_stopping_server_removes_only_its_own_socket() {
    let dir = TempDir::new("kv-sock-own");
    let sock = dir.path().join("kv.sock");
    let mut kv = KvProc::start_raw(&["-s", sock.to_str().unwrap()]);
    kv.signal(libc::SIGTERM);
    assert!(kv.wait_exit(std::time::Duration::from_secs(10)).is_some());
    assert!(!sock.exists(), "its own socket was left");
    let mut kv = KvProc::start_raw(&["-s", sock.to_str().unwrap()]);
    std::fs::remove_file(&sock).unwrap();
    let other = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    kv.signal(libc::SIGTERM);
    assert!(kv.wait_exit(std::time::Duration::from_secs(10)).is_some());
    assert!(sock.exists(), "another server's socket was removed");
    drop(other);
}

/// A second start on the socket of a live server that does not accept
/// (stopped here, its backlog full) says the socket is in use and exits:
/// its stale-socket probe blocked in connect for ever, deaf to SIGTERM.
#[test]
fn a_socket_whose_server_is_stopped_is_in_use() {
    use socket2::{Domain, SockAddr, Socket, Type};
    let dir = TempDir::new("kv-sock-stopped");
    let sock = dir.path().join("kv.sock");
    let path = sock.to_str().unwrap();
    let first = KvProc::start_raw(&["-s", path, "-t", "1", "-b", "1"]);
    first.signal(libc::SIGSTOP);
    // Stopped (not accepting) before the backlog is filled.
    let stat = format!("/proc/{}/stat", first.pid());
    let stopped = || {
        let s = std::fs::read_to_string(&stat).unwrap_or_default();
        s.rsplit(')')
            .next()
            .map(|r| r.trim_start().starts_with('T'))
            == Some(true)
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !stopped() {
        assert!(Instant::now() < until, "the server did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
    let addr = SockAddr::unix(&sock).unwrap();
    let mut queued = Vec::new();
    let mut full = false;
    for _ in 0..64 {
        let s = Socket::new(Domain::UNIX, Type::STREAM.nonblocking(), None).unwrap();
        match s.connect(&addr) {
            Ok(()) => queued.push(s),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                full = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(full, "the backlog never filled");
    let mut second = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["kv", "-s", path, "-t", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = second.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > until {
            let _ = second.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    first.signal(libc::SIGCONT);
    let status = status.expect("the second start hung on the stopped server's socket");
    assert!(!status.success());
    assert!(err.contains("in use by another server"), "{err}");
    drop(queued);
    // The first is still the socket's server.
    let mut c = Client::connect(&Addr::Unix(sock.clone()));
    assert!(c.call(b"version\r\n").starts_with(b"VERSION "));
}

/// A socket path too long for a Unix socket address is refused naming the
/// path (the message was the C library's "path must be shorter than
/// SUN_LEN", naming neither the path nor -s).
#[test]
fn a_socket_path_too_long_is_named() {
    let path = format!("/tmp/{}.sock", "x".repeat(120));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["kv", "-s", &path])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on {path}: the path is 130 bytes")),
        "{err}"
    );
    assert!(!std::path::Path::new(&path).exists());
}

/// A second instance that cannot bind leaves the running one's pid file as
/// it is (the file is written once the sockets are bound; written before,
/// the failed instance replaced it, then removed it).
#[test]
fn a_failed_second_instance_leaves_the_pid_file() {
    let dir = TempDir::new("kv-pid");
    let pid = dir.path().join("kv.pid");
    let kv = KvProc::start(&["-P", pid.to_str().unwrap()]);
    let first = std::fs::read_to_string(&pid).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["kv", "-l", "127.0.0.1", "-p", &kv.port.to_string()])
        .args(["-P", pid.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&pid).unwrap(), first);
}

/// memcached counts its listening socket among `total_connections` until
/// the first `stats reset` (exporters' connection rates compare the two).
/// Fresh, with one listener and one client, memcached 1.6.18 says 2 (its
/// start here is probed by a connection of the test's own, so that half is
/// asserted on duality alone); after the reset both count clients only.
#[test]
fn total_connections_as_memcached_counts_them() {
    let mc = Memcached::start(&[]);
    let dk = duality(false);
    let mut c = Client::connect(&Addr::Tcp(tcp_addr(&dk)));
    assert_eq!(stat_u64(&c.stats(""), "total_connections"), 2);
    let after_reset = |addr: SocketAddr| {
        let addr = Addr::Tcp(addr);
        let mut c = Client::connect(&addr);
        c.expect(b"stats reset\r\n", b"RESET\r\n");
        // Served once, so memcached's worker thread has counted it.
        Client::connect(&addr).expect(b"get x\r\n", b"END\r\n");
        stat_u64(&c.stats(""), "total_connections")
    };
    assert_eq!(after_reset(tcp_addr(&dk)), after_reset(mc.addr));
}

/// Over a Unix socket alone (`-s`), as memcached 1.6.18 shows it (checked by
/// hand; its readiness cannot be probed over TCP here): a connection's
/// `listen_addr` names the socket (`unix:PATH`; was a bare `unix:`).
#[test]
fn unix_socket_conns_and_settings() {
    let dir = TempDir::new("kv-compat-unix");
    let sock = dir.path().join("kv.sock");
    let path = sock.to_str().unwrap();
    let _kv = KvProc::start_raw(&["-s", path]);
    let mut c = Client::connect(&Addr::Unix(sock.clone()));
    assert_eq!(c.stats("settings")["domain_socket"], path);
    let st = c.stats("conns");
    let listen: Vec<&String> = st
        .iter()
        .filter(|(k, _)| k.ends_with(":listen_addr"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(listen, [&format!("unix:{path}")], "{st:?}");
}

/// `-Y FILE` (memcached's ASCII authentication): before a connection's
/// `set` of `user password` every request is refused, a wrong password or a
/// malformed token gets memcached's words, the right one `STORED` and then
/// the cache as usual; counted in `stats`, named in `stats settings`.
#[test]
fn ascii_authentication() {
    let dir = TempDir::new("kv-auth");
    let file = dir.path().join("auth");
    std::fs::write(&file, "alice:secret\nbob:pw:2\n").unwrap();
    let file_arg = file.to_str().unwrap();
    let m: duality_models::Model = "symped:2".parse().unwrap();
    let config = duality_kv::server::KvConfig {
        auth: Some(duality_kv::auth::AuthFile::load(&file).unwrap()),
        ..like_memcached_config(&m)
    };
    let dk = InProc::start(m, config, false);
    let dk_addr = tcp_addr(&dk);
    // One request's answer: its first line (or all until the close).
    let one = |addr: SocketAddr, req: &[u8]| -> Vec<u8> {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let _ = s.write_all(req);
        let mut out = Vec::new();
        let mut byte = [0u8; 1];
        while !out.ends_with(b"\r\n") {
            match s.read(&mut byte) {
                Ok(0) => {
                    out.extend_from_slice(b"<closed>");
                    break;
                }
                Ok(_) => out.push(byte[0]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    out.extend_from_slice(b"<closed>");
                    break;
                }
                Err(e) => panic!("read: {e}; got {}", show(&out)),
            }
        }
        out
    };
    let singles: Vec<Vec<u8>> = [
        &b"get a\r\n"[..],
        b"version\r\n",
        b"quit\r\n",
        b"mg a v\r\n",
        b"SET x 0 0 12\r\n",
        b"set x 0 0 -1\r\n",
        b"set x 0 0\r\n",
        b"set x 0 0 11\r\nalice wrong\r\n",
        b"set x 0 0 6\r\nbob pw\r\n",
        b"set x 0 0 5\r\nalice\r\n",
        b"set x 0 0 12\r\nalice secretXX",
        b"\x80\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        &[b'x'; 3000],
    ]
    .iter()
    .map(|r| r.to_vec())
    .collect();
    let ours: Vec<Vec<u8>> = singles.iter().map(|r| one(dk_addr, r)).collect();
    assert_eq!(ours[0], b"CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(ours[7], b"CLIENT_ERROR authentication failure\r\n");
    assert_eq!(ours[12], b"<closed>");
    // Authenticated: the cache as usual, from the same read on.
    let cases = probed(&[
        "set x 0 0 12\r\nalice secret\r\nset a 0 0 1\r\n1\r\nget a\r\n",
        "set k 99 999 13 noreply\r\nalice  secret\r\nget a\r\n",
        "set x 0 0 8\nbob pw:2\r\nappend a 0 0 1\r\n2\r\nget a\r\n",
    ]);
    let mut c = Client::connect(&dk.addr);
    c.expect_str("set x 0 0 12\r\nalice secret\r\n", "STORED\r\n");
    let stats = c.stats("");
    assert_eq!(
        (stats["auth_cmds"].as_str(), stats["auth_errors"].as_str()),
        ("3", "2")
    );
    assert_eq!(c.stats("settings")["auth_enabled_ascii"], file_arg);
    if Memcached::binary().is_some() {
        let mc =
            Memcached::start_authenticated(&["-Y", file_arg], "set x 0 0 12\r\nalice secret\r\n");
        let theirs: Vec<Vec<u8>> = singles.iter().map(|r| one(mc.addr, r)).collect();
        for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(
                show(o),
                show(t),
                "{}",
                show(&singles[i][..singles[i].len().min(40)])
            );
        }
        compare(mc.addr, dk_addr, &cases);
    }
}
