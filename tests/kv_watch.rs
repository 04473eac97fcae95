//! memcached's `watch` on the cache: a client's connection becomes a stream
//! of log lines of what the cache does — lookups, stores, evictions and
//! connections, in memcached 1.6.18's line shapes — under every model; it
//! is limited to 20 watchers, refused under `-W`, and a watcher that does
//! not read is skipped, never buffered without bound.

mod common;

use common::*;
use duality_kv::server::KvConfig;
use duality_models::Model;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn tcp(a: &Addr) -> SocketAddr {
    match a {
        Addr::Tcp(a) => *a,
        Addr::Unix(_) => unreachable!("TCP servers only"),
    }
}

/// A watcher's connection, read a line at a time.
struct Watcher {
    r: BufReader<TcpStream>,
    last_gid: Option<u64>,
    /// Microseconds padded to six digits (memcached's are not).
    padded: bool,
}

impl Watcher {
    /// Connects, sends `watch <kinds>` and reads its `OK`.
    fn start(srv: &InProc, kinds: &str) -> Watcher {
        Watcher::start_at(tcp(&srv.addr), kinds)
    }

    fn start_at(a: SocketAddr, kinds: &str) -> Watcher {
        let mut w = Watcher::connect_to(a);
        w.send(format!("watch {kinds}\r\n").as_bytes());
        assert_eq!(w.raw_line(), "OK\r\n", "watch {kinds}");
        w
    }

    fn connect(srv: &InProc) -> Watcher {
        Watcher::connect_to(tcp(&srv.addr))
    }

    fn connect_to(a: SocketAddr) -> Watcher {
        let s = TcpStream::connect(a).unwrap();
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        Watcher {
            r: BufReader::new(s),
            last_gid: None,
            padded: true,
        }
    }

    fn send(&mut self, b: &[u8]) {
        self.r.get_ref().write_all(b).unwrap();
    }

    fn raw_line(&mut self) -> String {
        let mut line = String::new();
        let n = self.r.read_line(&mut line).expect("read a line");
        assert!(n > 0, "the stream ended");
        line
    }

    /// The next `n` lines, each without its `ts=… gid=… ` head (checked
    /// and taken off here: times are Unix seconds and microseconds, gids
    /// grow by one from line to line).
    fn lines(&mut self, n: usize) -> Vec<String> {
        (0..n).map(|_| self.line()).collect()
    }

    fn line(&mut self) -> String {
        let line = self.raw_line();
        let line = line.strip_suffix('\n').unwrap();
        let (ts, rest) = line.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let (gid, body) = rest.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let (secs, micros) = ts
            .strip_prefix("ts=")
            .and_then(|t| t.split_once('.'))
            .unwrap_or_else(|| panic!("{line:?}"));
        assert!(secs.parse::<u64>().unwrap() > 1_600_000_000, "{line:?}");
        assert!(micros.bytes().all(|b| b.is_ascii_digit()), "{line:?}");
        assert!(micros.len() <= 6, "{line:?}");
        if self.padded {
            assert_eq!(micros.len(), 6, "{line:?}");
        }
        let gid: u64 = gid.strip_prefix("gid=").unwrap().parse().unwrap();
        if let Some(l) = self.last_gid {
            assert_eq!(gid, l + 1, "gids in order: {line:?}");
        }
        self.last_gid = Some(gid);
        body.to_string()
    }

    /// Reads until the server closes; what came.
    fn rest(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.r.read_to_end(&mut out).expect("read to the end");
        out
    }
}

/// `cfd=<n>` of a line.
fn cfd(line: &str) -> &str {
    line.rsplit_once("cfd=")
        .map(|(_, r)| r.split(' ').next().unwrap())
        .unwrap_or_else(|| panic!("no cfd in {line:?}"))
}

#[test]
fn watch_streams_lookups_stores_and_connections_under_every_model() {
    for model in MODELS {
        let srv = InProc::tcp(model);
        let mut w = Watcher::start(&srv, "fetchers mutations connevents");
        let mut c = srv.connect();
        let port = c.local_addr().unwrap().port();
        c.expect(b"set foo 5 0 3\r\nbar\r\n", b"STORED\r\n");
        c.expect(b"get foo nope\r\n", b"VALUE foo 5 3\r\nbar\r\nEND\r\n");
        c.expect(b"add foo 0 100 1\r\nx\r\n", b"NOT_STORED\r\n");
        c.expect(b"append foo 0 0 1\r\nx\r\n", b"STORED\r\n");
        c.expect(b"cas foo 0 0 1 999999\r\nx\r\n", b"EXISTS\r\n");
        c.expect(b"replace nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
        c.expect(b"delete foo\r\n", b"DELETED\r\n");
        c.expect(b"ms m 2 T100\r\nhi\r\n", b"HD\r\n");
        c.expect(b"mg m v\r\n", b"VA 2\r\nhi\r\n");
        c.expect(b"set a/b 0 0 1\r\nx\r\n", b"STORED\r\n");
        drop(c);
        let got = w.lines(20);
        let fd = cfd(&got[0]).to_string();
        let want = [
            format!("type=conn_new rip=127.0.0.1 rport={port} transport=tcp cfd={fd}"),
            format!("type=item_get key=foo status=not_found clsid=0 cfd={fd} size=0"),
            format!("type=item_store key=foo status=stored cmd=set ttl=0 clsid=1 cfd={fd} size=3"),
            format!("type=item_get key=foo status=found clsid=1 cfd={fd} size=3"),
            format!("type=item_get key=nope status=not_found clsid=0 cfd={fd} size=0"),
            format!("type=item_get key=foo status=found clsid=1 cfd={fd} size=3"),
            format!(
                "type=item_store key=foo status=not_stored cmd=add ttl=100 clsid=1 cfd={fd} size=1"
            ),
            format!("type=item_get key=foo status=found clsid=1 cfd={fd} size=3"),
            format!(
                "type=item_store key=foo status=stored cmd=append ttl=0 clsid=1 cfd={fd} size=4"
            ),
            format!("type=item_get key=foo status=found clsid=1 cfd={fd} size=4"),
            format!("type=item_store key=foo status=exists cmd=cas ttl=0 clsid=1 cfd={fd} size=1"),
            format!("type=item_get key=nope status=not_found clsid=0 cfd={fd} size=0"),
            format!(
                "type=item_store key=nope status=not_stored cmd=replace ttl=0 clsid=1 cfd={fd} size=1"
            ),
            format!("type=item_get key=foo status=found clsid=1 cfd={fd} size=4"),
            format!("type=item_get key=m status=not_found clsid=0 cfd={fd} size=0"),
            format!("type=item_store key=m status=stored cmd=set ttl=100 clsid=1 cfd={fd} size=2"),
            format!("type=item_get key=m status=found clsid=1 cfd={fd} size=2"),
            format!("type=item_get key=a%2Fb status=not_found clsid=0 cfd={fd} size=0"),
            format!("type=item_store key=a%2Fb status=stored cmd=set ttl=0 clsid=1 cfd={fd} size=1"),
            format!(
                "type=conn_close rip=127.0.0.1 rport={port} transport=tcp reason=normal cfd={fd}"
            ),
        ];
        assert_eq!(got, want, "{model}");
        assert!(fd.parse::<i32>().unwrap() > 2, "{model}: {fd}");
        // The watcher's own requests are not served: a line it sends is
        // read and dropped, and its stream goes on.
        w.send(b"get foo\r\n");
        let mut c = srv.connect();
        c.expect(b"get zz\r\n", b"END\r\n");
        // `stats conns` names the watcher's state as memcached does.
        let conns = c.stats("conns");
        let watching: Vec<_> = conns
            .iter()
            .filter(|(k, v)| k.ends_with(":state") && *v == "conn_watch")
            .collect();
        assert_eq!(watching.len(), 1, "{model}: {conns:?}");
        let got = w.lines(2);
        assert!(got[0].starts_with("type=conn_new "), "{model}: {got:?}");
        assert!(
            got[1].starts_with("type=item_get key=zz "),
            "{model}: {got:?}"
        );
    }
}

#[test]
fn watch_alone_is_fetchers_and_a_kind_memcached_does_not_know_is_an_error() {
    let srv = InProc::tcp("symped:2");
    let mut c = srv.connect();
    // 1.6.18 has no `deletions`; the connection goes on serving.
    c.expect(b"watch fetchers deletions\r\n", b"ERROR\r\n");
    c.expect(b"WATCH\r\n", b"ERROR\r\n");
    // Accepted as 1.6.18 accepts them (it logs nothing there either
    // without its proxy).
    drop(Watcher::start(
        &srv,
        "proxyreqs proxyevents proxyuser sysevents rawcmds",
    ));
    c.expect(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n");
    let mut w = Watcher::connect(&srv);
    // Answers before the watch are written first.
    w.send(b"get k\r\nwatch\r\n");
    let head: Vec<String> = (0..4).map(|_| w.raw_line()).collect();
    assert_eq!(head, ["VALUE k 0 1\r\n", "x\r\n", "END\r\n", "OK\r\n"]);
    c.expect(b"set k 0 0 1\r\ny\r\n", b"STORED\r\n");
    c.expect(b"get k\r\n", b"VALUE k 0 1\r\ny\r\nEND\r\n");
    // Fetchers only: the set's lookup and the get, no store line.
    let got = w.lines(2);
    assert!(
        got[0].starts_with("type=item_get key=k status=found "),
        "{got:?}"
    );
    assert!(
        got[1].starts_with("type=item_get key=k status=found "),
        "{got:?}"
    );
    // The proxy-kinds watcher left: gone once the server has seen it go.
    let t0 = Instant::now();
    while c.stats("")["log_watchers"] != "1" {
        assert!(t0.elapsed() < Duration::from_secs(5), "a watcher stays");
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = c.stats("");
    assert_eq!(s["log_worker_dropped"], "0");
    assert!(s["log_watcher_sent"].parse::<u64>().unwrap() >= 2, "{s:?}");
}

#[test]
fn evictions_are_watched_as_they_happen() {
    let m: Model = "sped".parse().unwrap();
    let config = KvConfig {
        memory_limit: 8 << 20,
        ..small_config(&m)
    };
    let srv = InProc::start(m, config, false);
    let mut w = Watcher::start(&srv, "evictions");
    let mut c = srv.connect();
    let value = vec![b'v'; 4000];
    let mut n = 0;
    while c.stats("")["evictions"] == "0" {
        let mut req = Vec::new();
        for i in n..n + 100 {
            req.extend_from_slice(format!("set key:{i} 0 0 {}\r\n", value.len()).as_bytes());
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
        }
        n += 100;
        c.send(&req);
        assert_eq!(c.read_n(8 * 100), b"STORED\r\n".repeat(100));
        assert!(n < 100_000, "no eviction after {n} sets");
    }
    let evicted: u64 = c.stats("")["evictions"].parse().unwrap();
    let got = w.lines(evicted as usize);
    for l in &got {
        let key = l
            .strip_prefix("type=eviction key=")
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("{l:?}"));
        assert!(
            l.ends_with(" size=4000") && l.contains(" fetch=no ttl=-1 la="),
            "{l:?}"
        );
        // Evicted means gone.
        let key = key.replace("%3A", ":");
        c.expect(format!("get {key}\r\n").as_bytes(), b"END\r\n");
    }
    assert_eq!(c.stats("")["log_watcher_skipped"], "0");
}

#[test]
fn watchers_are_limited_to_twenty_and_refused_under_w() {
    for model in ["symped:2", "thread-per-conn"] {
        watchers_are_limited(model);
    }
    let m: Model = "sped".parse().unwrap();
    let config = KvConfig {
        disable_watch: true,
        ..small_config(&m)
    };
    let srv = InProc::start(m, config, false);
    let mut c = srv.connect();
    c.expect(
        b"watch fetchers\r\n",
        b"CLIENT_ERROR watch commands not allowed\r\n",
    );
    c.expect(b"get k\r\n", b"END\r\n");
}

fn watchers_are_limited(model: &str) {
    let srv = InProc::tcp(model);
    let mut ws: Vec<Watcher> = (0..20).map(|_| Watcher::start(&srv, "evictions")).collect();
    let mut c = srv.connect();
    c.expect(
        b"watch\r\n",
        b"WATCHER_TOO_MANY log watcher limit reached\r\n",
    );
    // Refused, the connection serves on.
    c.expect(b"get k\r\n", b"END\r\n");
    // They leave (no line was ever sent to them): their places are free
    // once the server has seen them go.
    ws.clear();
    let t0 = Instant::now();
    let mut again = Vec::new();
    while again.len() < 20 {
        let mut n = srv.connect();
        n.send(b"watch mutations\r\n");
        let r = n.read_until(b"\r\n");
        if r == b"OK\r\n" {
            again.push(n);
            continue;
        }
        assert_eq!(r, b"WATCHER_TOO_MANY log watcher limit reached\r\n");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{model}: places stay taken ({} free)",
            again.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_watcher_that_does_not_read_is_skipped_not_buffered() {
    for model in ["symped:2", "thread-per-conn"] {
        let srv = InProc::tcp(model);
        let mut w = Watcher::start(&srv, "fetchers");
        let mut c = srv.connect();
        // ~100 bytes a line, 300,000 lines: far past the queue (2,048
        // lines) and the sockets' buffers.
        let get = b"get some-key-of-a-fair-length\r\n".repeat(1000);
        for _ in 0..300 {
            c.send(&get);
            assert_eq!(c.read_n(5 * 1000), b"END\r\n".repeat(1000), "{model}");
        }
        let s = c.stats("");
        let skipped: u64 = s["log_watcher_skipped"].parse().unwrap();
        assert!(skipped > 0, "{model}: {s:?}");
        // The watcher reads on: what it missed is said before the next
        // line it gets (made here every 512 lines read, once the queue
        // has room again), and every line is either read or counted.
        let mut seen = 0u64;
        let mut made = 300_000u64;
        let said_skipped = loop {
            let line = w.raw_line();
            if let Some(n) = line.strip_prefix("skipped=") {
                break n.trim_end().parse::<u64>().unwrap();
            }
            assert!(line.contains(" type=item_get key="), "{line:?}");
            seen += 1;
            assert!(seen <= made, "{model}: more lines than were made");
            if seen.is_multiple_of(512) {
                c.expect(b"get k\r\n", b"END\r\n");
                made += 1;
            }
        };
        assert!(said_skipped > 0, "{model}: {said_skipped}");
        assert!(
            seen + said_skipped <= made,
            "{model}: {seen} + {said_skipped} > {made}"
        );
        let skipped: u64 = c.stats("")["log_watcher_skipped"].parse().unwrap();
        assert!(
            skipped >= said_skipped,
            "{model}: {skipped} < {said_skipped}"
        );
    }
}

#[test]
fn a_server_stopping_ends_its_watches() {
    for model in ["sped", "thread-per-conn"] {
        let srv = InProc::tcp(model);
        let mut w = Watcher::start(&srv, "");
        let t0 = Instant::now();
        drop(srv);
        assert_eq!(w.rest(), b"", "{model}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{model}");
    }
}

/// One script of text, meta and binary requests under memcached 1.6.18
/// and `duality kv`, each watched for fetchers, mutations and connection
/// events: the same lines (times, gids, descriptors and ports aside).
#[test]
fn the_lines_are_memcacheds() {
    fn binary(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
        let body = extras.len() + key.len() + value.len();
        let mut r = vec![0x80, opcode];
        r.extend_from_slice(&(key.len() as u16).to_be_bytes());
        r.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
        r.extend_from_slice(&(body as u32).to_be_bytes());
        r.extend_from_slice(&[0; 4]);
        r.extend_from_slice(&cas.to_be_bytes());
        r.extend_from_slice(extras);
        r.extend_from_slice(key);
        r.extend_from_slice(value);
        r
    }
    /// Runs the script against `a`; the watcher's lines, normalised.
    fn lines_of(a: SocketAddr, padded: bool) -> Vec<String> {
        let mut w = Watcher::start_at(a, "fetchers mutations connevents");
        w.padded = padded;
        let mut c = Client::connect(&Addr::Tcp(a));
        for (req, want) in [
            ("set foo 5 0 3\r\nbar\r\n", "STORED\r\n"),
            ("get foo nope\r\n", "VALUE foo 5 3\r\nbar\r\nEND\r\n"),
            ("add foo 0 100 1\r\nx\r\n", "NOT_STORED\r\n"),
            ("add new 0 100 1\r\nx\r\n", "STORED\r\n"),
            ("append foo 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("prepend nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
            ("replace nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
            ("replace new 0 50 2\r\nxy\r\n", "STORED\r\n"),
            ("cas foo 0 0 1 999999\r\nx\r\n", "EXISTS\r\n"),
            ("cas nope 0 0 1 1\r\nx\r\n", "NOT_FOUND\r\n"),
            ("delete foo\r\n", "DELETED\r\n"),
            ("delete foo\r\n", "NOT_FOUND\r\n"),
            ("touch new 10\r\n", "TOUCHED\r\n"),
            ("gat 10 nope new\r\n", "VALUE new 0 2\r\nxy\r\nEND\r\n"),
            ("incr n 1\r\n", "NOT_FOUND\r\n"),
            ("set n 0 0 1\r\n5\r\n", "STORED\r\n"),
            ("incr n 1\r\n", "6\r\n"),
            ("decr n 1\r\n", "5\r\n"),
            ("mg n v\r\n", "VA 1\r\n5\r\n"),
            ("mg nope v\r\n", "EN\r\n"),
            ("ms m 2 T100\r\nhi\r\n", "HD\r\n"),
            ("ms m 2 ME\r\nhi\r\n", "NS\r\n"),
            ("ms m 1 MA\r\n!\r\n", "HD\r\n"),
            ("ms q 1 MR\r\n!\r\n", "NS\r\n"),
            ("ms m 1 C1\r\n!\r\n", "EX\r\n"),
            ("ma n\r\n", "HD\r\n"),
            ("ma vn N0 J7\r\n", "HD\r\n"),
            ("md n\r\n", "HD\r\n"),
            ("set a/b 0 0 1\r\nx\r\n", "STORED\r\n"),
        ] {
            c.expect(req.as_bytes(), want.as_bytes());
        }
        drop(c);
        // Until the text client's close is logged: the binary one's open
        // would race it.
        let mut got = Vec::new();
        read_to_close(&mut w, &mut got);
        // The binary protocol on a connection of its own.
        let mut b = TcpStream::connect(a).unwrap();
        b.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let store = [0, 0, 0, 0, 0, 0, 0, 0];
        for (req, status) in [
            (binary(0x01, b"bk", &store, b"v", 0), 0u16),
            (binary(0x02, b"bk", &store, b"v", 0), 2),
            (binary(0x03, b"bz", &store, b"v", 0), 1),
            (binary(0x01, b"bk", &store, b"w", 42), 2),
            (binary(0x00, b"bk", &[], &[], 0), 0),
        ] {
            b.write_all(&req).unwrap();
            let mut head = [0u8; 24];
            b.read_exact(&mut head).unwrap();
            let len = u32::from_be_bytes(head[8..12].try_into().unwrap());
            let mut body = vec![0u8; len as usize];
            b.read_exact(&mut body).unwrap();
            assert_eq!(u16::from_be_bytes([head[6], head[7]]), status, "{req:?}");
        }
        drop(b);
        read_to_close(&mut w, &mut got);
        got
    }
    /// The lines up to and with the next `conn_close`, descriptors and
    /// ports (the two servers' own) blanked.
    fn read_to_close(w: &mut Watcher, got: &mut Vec<String>) {
        loop {
            let l = w.line();
            let close = l.starts_with("type=conn_close");
            let l: Vec<String> = l
                .split(' ')
                .map(|f| match f.split_once('=') {
                    Some((name @ ("cfd" | "rport"), _)) => format!("{name}=_"),
                    _ => f.to_string(),
                })
                .collect();
            got.push(l.join(" "));
            if close {
                return;
            }
        }
    }
    let mc = Memcached::start(&["-t", "1"]);
    let kv = KvProc::start(&[]);
    let want = lines_of(mc.addr, false);
    let got = lines_of(tcp(&kv.addr), true);
    assert!(want.len() > 50, "{want:#?}");
    assert_eq!(got, want);
}

/// A value of 64 KiB and more (received into its item, sent from it a
/// piece at a time) is one store and one lookup, as any other.
#[test]
fn a_large_value_is_one_lookup() {
    let m: Model = "symped:2".parse().unwrap();
    let config = KvConfig {
        max_item_size: 1 << 20,
        ..small_config(&m)
    };
    let srv = InProc::start(m, config, false);
    let mut w = Watcher::start(&srv, "fetchers mutations connevents");
    let mut c = srv.connect();
    let fd = w.line();
    let fd = cfd(&fd).to_string();
    let v = vec![b'x'; 300_000];
    let mut set = b"set big 0 0 300000\r\n".to_vec();
    set.extend_from_slice(&v);
    set.extend_from_slice(b"\r\n");
    c.expect(&set, b"STORED\r\n");
    c.send(b"get big\r\n");
    let got = c.read_until(b"END\r\n");
    assert_eq!(got.len(), "VALUE big 0 300000\r\n".len() + 300_000 + 7);
    let lines = w.lines(3);
    assert!(
        lines[0].starts_with("type=item_get key=big status=not_found"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("type=item_store key=big status=stored cmd=set ttl=0 clsid="),
        "{lines:?}"
    );
    // Received into its item on the connection's own loop: its own cfd.
    assert!(
        lines[1].ends_with(&format!(" cfd={fd} size=300000")),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with("type=item_get key=big status=found"),
        "{lines:?}"
    );
    // Nothing more for that get: the next line is the next request's.
    c.expect(b"get other\r\n", b"END\r\n");
    assert!(w.line().starts_with("type=item_get key=other "));
}

/// A store refused from its command line (over the item size limit) is
/// logged as memcached logs it, `status=too_large`, before the lookup that
/// drops a `set`'s or `ms`'s old item.
#[test]
fn a_value_too_large_is_logged() {
    let srv = InProc::tcp("sped");
    let mut w = Watcher::start(&srv, "fetchers mutations");
    let mut c = srv.connect();
    let block = |n: usize| {
        let mut b = vec![b'x'; n];
        b.extend_from_slice(b"\r\n");
        b
    };
    let too_large = b"SERVER_ERROR object too large for cache\r\n";
    for (line, cmd, drops) in [
        ("set big 0 0 100000\r\n", "set", true),
        ("add big 0 0 100000\r\n", "add", false),
        ("ms big 100000 MR\r\n", "replace", true),
    ] {
        let mut req = line.as_bytes().to_vec();
        req.extend_from_slice(&block(100_000));
        c.expect(&req, too_large);
        let l = w.line();
        assert!(
            l.starts_with(&format!(
                "type=item_store key=big status=too_large cmd={cmd} ttl=0 clsid=0 cfd="
            )) && l.ends_with(" size=100000"),
            "{l}"
        );
        if drops {
            let l = w.line();
            assert!(
                l.starts_with("type=item_get key=big status=not_found "),
                "{l}"
            );
        }
    }
    c.expect(b"get k\r\n", b"END\r\n");
    assert!(w.line().starts_with("type=item_get key=k "));
}

/// `conn_close` says why: the client left or quit (`normal`), a request
/// the server could not read on from (`error`), `-o idle_timeout`
/// (`idle_timeout`).
#[test]
fn a_close_says_why() {
    let m: Model = "sped".parse().unwrap();
    let config = KvConfig {
        // Long enough that a loaded machine does not time out the clients
        // that send at once.
        idle_timeout: Some(Duration::from_secs(1)),
        ..small_config(&m)
    };
    let srv = InProc::start(m, config, false);
    // The watcher stays: it is not idle while it watches.
    let mut w = Watcher::start(&srv, "connevents");
    let mut reasons = Vec::new();
    let mut close_of = |w: &mut Watcher| {
        let open = w.line();
        assert!(open.starts_with("type=conn_new "), "{open}");
        let close = w.line();
        assert!(close.starts_with("type=conn_close "), "{close}");
        assert_eq!(cfd(&open), cfd(&close));
        let reason = close.split(' ').find_map(|f| f.strip_prefix("reason="));
        reasons.push(reason.unwrap().to_string());
    };
    let mut c = srv.connect();
    c.send(b"quit\r\n");
    assert_eq!(c.read_to_eof(), b"");
    close_of(&mut w);
    // A binary get with extras it may not have: "Invalid arguments", and
    // the stream cannot be trusted after that.
    let mut c = srv.connect();
    let mut bad = vec![0x80, 0x00, 0, 1, 4, 0, 0, 0, 0, 0, 0, 5];
    bad.extend_from_slice(&[0; 12]);
    bad.extend_from_slice(b"xxxxk");
    c.send(&bad);
    let answer = c.read_to_eof();
    assert_eq!(&answer[..2], [0x81, 0x00]);
    close_of(&mut w);
    // Silent past the idle timeout.
    let c = srv.connect();
    close_of(&mut w);
    drop(c);
    assert_eq!(reasons, ["normal", "error", "idle_timeout"]);
}
