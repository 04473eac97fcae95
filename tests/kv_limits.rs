//! `duality kv` under pressure: the memory limit holds (RSS measured from
//! outside the process), shared counters and CAS loops stay exact with many
//! connections, and SIGTERM/SIGINT shut it down gracefully.

mod common;

use common::*;
use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// How far RSS may exceed `-m`: the process itself (code, thread stacks,
/// runtime, connection buffers: 11–18 MiB idle) plus allocator slack on the
/// items. Measured 13–27 MiB over the limit for item sizes 100 B – 20 KB and
/// limits 4 MiB – 1 GiB, release and debug builds; documented in the
/// `duality_kv` crate docs ("Memory accounting").
const RSS_OVERHEAD: usize = 32 * MIB;

/// Writes 4x the limit in values of a few KiB, pipelined; RSS never goes
/// above the limit plus the documented overhead, and the most recent items
/// are all still there.
fn memory_limit(model: &str) {
    let limit_mib = 16;
    let srv = KvProc::start(&["-m", &limit_mib.to_string(), "--model", model]);
    let limit = limit_mib * MIB;
    let idle = srv.rss();
    let mut c = srv.connect();
    let value_of = |i: usize| -> Vec<u8> {
        let size = 1000 + (i * 1237) % 7000;
        let mut v = format!("item-{i}-").into_bytes();
        v.resize(size, b'a' + (i % 26) as u8);
        v
    };
    let mut written = 0;
    let mut n = 0;
    let mut sampled_max = 0;
    const BATCH: usize = 32;
    while written < 4 * limit {
        let mut req = Vec::new();
        for i in n..n + BATCH {
            let v = value_of(i);
            written += v.len();
            req.extend_from_slice(format!("set key:{i} {i} 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
        }
        n += BATCH;
        c.send(&req);
        let r = c.read_n(8 * BATCH);
        assert!(
            r == b"STORED\r\n".repeat(BATCH),
            "set batch at {n}: {}",
            show(&r)
        );
        if n % 1024 == 0 {
            sampled_max = sampled_max.max(srv.rss());
        }
    }
    let s = c.stats("");
    let peak = srv.peak_rss();
    eprintln!(
        "{model}: {n} items, {} MiB written, -m {limit_mib}: RSS idle {:.1} MiB, sampled max {:.1} MiB, peak (VmHWM) {:.1} MiB = limit + {:.1} MiB; stats bytes {} items {} evictions {}",
        written / MIB,
        idle as f64 / MIB as f64,
        sampled_max as f64 / MIB as f64,
        peak as f64 / MIB as f64,
        (peak as f64 - limit as f64) / MIB as f64,
        s["bytes"],
        s["curr_items"],
        s["evictions"]
    );
    assert!(
        peak <= limit + RSS_OVERHEAD,
        "peak RSS {peak} exceeds the limit {limit} + overhead {RSS_OVERHEAD}"
    );
    let bytes: usize = s["bytes"].parse().unwrap();
    assert!(bytes <= limit, "stats bytes {bytes} > limit {limit}");
    assert!(
        s["evictions"].parse::<u64>().unwrap() > 0,
        "nothing evicted"
    );
    // The last 1000 items (about a quarter of what fits) are all readable,
    // byte for byte, with their flags.
    for chunk in (n - 1000..n).collect::<Vec<_>>().chunks(50) {
        let mut req = b"get".to_vec();
        let mut want = Vec::new();
        for &i in chunk {
            req.extend_from_slice(format!(" key:{i}").as_bytes());
            let v = value_of(i);
            want.extend_from_slice(format!("VALUE key:{i} {i} {}\r\n", v.len()).as_bytes());
            want.extend_from_slice(&v);
            want.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"\r\n");
        want.extend_from_slice(b"END\r\n");
        let got = c.call(&req);
        assert!(
            got == want,
            "recent items {}..={} not all readable",
            chunk[0],
            chunk[chunk.len() - 1]
        );
    }
    // The oldest are gone.
    c.expect_str("get key:0 key:1 key:2\r\n", "END\r\n");
}

#[test]
fn memory_limit_symped() {
    memory_limit("symped:2");
}

#[test]
fn memory_limit_amped() {
    memory_limit("amped:2");
}

/// A value declared far above `-I` is refused from its command line and
/// discarded as it streams in: 64 MiB of it never raise the server's RSS.
#[test]
fn oversized_value_is_never_buffered() {
    let srv = KvProc::start(&["-m", "16", "-I", "1m"]);
    let mut c = srv.connect();
    c.expect_str("set warm 0 0 1\r\nx\r\n", "STORED\r\n");
    // The largest length memcached takes as a number (INT_MAX - 2): refused
    // as too large, and its bytes discarded as they arrive.
    c.send(b"set huge 0 0 2147483645\r\n");
    let too_large = b"SERVER_ERROR object too large for cache\r\n";
    assert_eq!(show(&c.read_n(too_large.len())), show(too_large));
    let chunk = vec![b'z'; MIB];
    // The first mebibytes touch what any busy connection uses: the loop's
    // receive buffers (io_uring's provided-buffer ring, 2 MiB) and a
    // socket's bounded receive queue. Measured from there, the next 64 MiB
    // must not raise RSS: the value itself is never kept.
    for _ in 0..8 {
        c.send(&chunk);
    }
    let before = srv.rss();
    let mut max = before;
    for i in 0..64 {
        c.send(&chunk);
        if i % 8 == 7 {
            max = max.max(srv.rss());
        }
    }
    assert!(
        max < before + 4 * MIB,
        "RSS grew from {before} to {max} while a refused value streamed in"
    );
    drop(c);
    srv.connect()
        .expect_str("get warm huge\r\n", "VALUE warm 0 1\r\nx\r\nEND\r\n");
}

/// One `get` naming a 1 MB item 300 times, from a client that does not read:
/// the server does not copy the item 300 times into one buffer (it did:
/// RSS +300 MB; memcached stays flat). Its answer goes out a buffer at a
/// time, whole and in order, followed by the next pipelined request's.
#[test]
fn a_get_repeating_a_large_item_is_never_buffered_whole() {
    for model in ["symped:2", "amped:1"] {
        let srv = KvProc::start(&["-m", "64", "-I", "2m", "--model", model]);
        let mut c = srv.connect();
        let value = vec![b'v'; 1_000_000];
        let mut set = b"set big 7 0 1000000\r\n".to_vec();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        c.send(&set);
        assert_eq!(show(&c.read_n(8)), show(b"STORED\r\n"));
        c.expect_str("get warm\r\n", "END\r\n");
        let before = srv.rss();
        let mut get = b"get".to_vec();
        for _ in 0..300 {
            get.extend_from_slice(b" big");
        }
        get.extend_from_slice(b"\r\nget tail\r\n");
        c.send(&get);
        // Time for the server to do whatever it would do with the get.
        thread::sleep(Duration::from_millis(500));
        let grown = srv.rss().saturating_sub(before);
        assert!(
            grown < 24 * MIB,
            "{model}: RSS grew by {grown} bytes for a get the client has not read"
        );
        let mut one = b"VALUE big 7 1000000\r\n".to_vec();
        one.extend_from_slice(&value);
        one.extend_from_slice(b"\r\n");
        let mut want = one.repeat(300);
        want.extend_from_slice(b"END\r\nEND\r\n");
        let got = c.read_n(want.len());
        assert!(got == want, "{model}: the answer differs");
    }
}

/// A large value goes out from where it lies in the store (no copy): a
/// client slow to read it still gets it whole and unchanged while the item
/// is replaced, deleted and its memory wanted many times over by new items
/// (what the send holds is never reused), on both I/O backends.
#[test]
fn a_large_value_being_sent_survives_its_item() {
    for (model, io) in [
        ("symped:2", "uring"),
        ("symped:2", "epoll"),
        ("amped:1", "uring"),
    ] {
        let srv = KvProc::start(&["-m", "32", "-I", "8m", "--model", model, "--io", io]);
        let set = |c: &mut Client, key: &str, value: &[u8]| {
            let mut req = format!("set {key} 3 0 {}\r\n", value.len()).into_bytes();
            req.extend_from_slice(value);
            req.extend_from_slice(b"\r\n");
            c.send(&req);
            assert_eq!(show(&c.read_n(8)), show(b"STORED\r\n"), "{model} {io}");
        };
        // Larger than the kernel's send buffer can grow to (4 MiB here):
        // part of it stays with the server until the client reads.
        let old: Vec<u8> = (0..6_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut writer = srv.connect();
        set(&mut writer, "big", &old);
        let mut reader = srv.connect();
        small_rcvbuf(&reader);
        reader.send(b"get big\r\n");
        // Its answer has begun before the value is replaced.
        let head = b"VALUE big 3 6000000\r\n";
        assert_eq!(show(&reader.read_n(head.len())), show(head), "{model} {io}");
        let new = vec![b'n'; old.len()];
        set(&mut writer, "big", &new);
        writer.expect_str("delete big\r\n", "DELETED\r\n");
        for i in 0..8 {
            set(&mut writer, &format!("churn{i}"), &new);
        }
        let mut want = old.clone();
        want.extend_from_slice(b"\r\nEND\r\n");
        let got = reader.read_n(want.len());
        assert!(got == want, "{model} {io}: the value in flight changed");
        reader.expect_str("get big\r\n", "END\r\n");
        let stats = writer.stats("");
        assert!(
            stats["evictions"] != "0",
            "{model} {io}: no churn: {stats:?}"
        );
    }
}

/// Pipelined, multi-key, meta and binary gets of large values (sent from the store,
/// several in one send) come back whole and in order among the other
/// answers, under the
/// models and both I/O backends; a fatal line after them drops them with
/// the read's other answers, as memcached does.
#[test]
fn pipelined_large_gets_go_out_whole_and_in_order() {
    for (model, io) in [
        ("symped:2", "uring"),
        ("symped:2", "epoll"),
        ("amped:1", "uring"),
        ("thread-per-conn", "epoll"),
    ] {
        let srv = KvProc::start(&["-m", "64", "-I", "2m", "--model", model, "--io", io]);
        let mut c = srv.connect();
        let sizes = [65_536usize, 70_000, 200_000, 1_100_000, 10];
        let values: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (i * (k + 3) % 251) as u8).collect())
            .collect();
        for (k, v) in values.iter().enumerate() {
            let mut req = format!("set v{k} {k} 0 {}\r\n", v.len()).into_bytes();
            req.extend_from_slice(v);
            req.extend_from_slice(b"\r\n");
            c.send(&req);
            assert_eq!(show(&c.read_n(8)), show(b"STORED\r\n"), "{model} {io}");
        }
        let answer = |keys: &[usize]| {
            let mut a = Vec::new();
            for &k in keys {
                let v = &values[k];
                a.extend_from_slice(format!("VALUE v{k} {k} {}\r\n", v.len()).as_bytes());
                a.extend_from_slice(v);
                a.extend_from_slice(b"\r\n");
            }
            a.extend_from_slice(b"END\r\n");
            a
        };
        let (mut req, mut want) = (Vec::new(), Vec::new());
        for i in 0..60usize {
            match i % 7 {
                // A miss, a small value, a multi-key get, a version among
                // the large gets.
                5 => {
                    req.extend_from_slice(b"get nothing\r\nget v4\r\nversion\r\n");
                    want.extend_from_slice(b"END\r\n");
                    want.extend_from_slice(&answer(&[4]));
                    want.extend_from_slice(
                        format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION).as_bytes(),
                    );
                }
                // A meta get: its line, the value, its end.
                4 => {
                    let k = i % 4;
                    let v = &values[k];
                    req.extend_from_slice(format!("mg v{k} f v k\r\n").as_bytes());
                    want.extend_from_slice(format!("VA {} f{k} kv{k}\r\n", v.len()).as_bytes());
                    want.extend_from_slice(v);
                    want.extend_from_slice(b"\r\n");
                }
                6 if i % 14 == 6 => {
                    req.extend_from_slice(b"get v0 v2 v4\r\n");
                    want.extend_from_slice(&answer(&[0, 2, 4]));
                }
                // More large values than an output shares (the rest are
                // copied), past what one get buffers (it goes on in
                // pieces).
                6 => {
                    let keys: Vec<usize> = (0..24).map(|j| [0, 1, 4][j % 3]).collect();
                    let line: Vec<String> = keys.iter().map(|k| format!("v{k}")).collect();
                    req.extend_from_slice(format!("get {}\r\n", line.join(" ")).as_bytes());
                    want.extend_from_slice(&answer(&keys));
                }
                k => {
                    let k = (k + i) % 4;
                    req.extend_from_slice(format!("get v{k}\r\n").as_bytes());
                    want.extend_from_slice(&answer(&[k]));
                }
            }
        }
        c.send(&req);
        let got = c.read_n(want.len());
        assert!(got == want, "{model} {io}: the answers differ");
        // Binary gets (GETK, GET, a quiet GETKQ hit, then NOOP), pipelined.
        let mut b = srv.connect();
        let mut req = Vec::new();
        let gets: [(u8, usize); 4] = [(0x0c, 2), (0x00, 0), (0x0d, 1), (0x0c, 4)];
        for (op, k) in gets.into_iter().chain([(0x0a, 9)]) {
            let key = if op == 0x0a {
                String::new()
            } else {
                format!("v{k}")
            };
            req.extend_from_slice(&[0x80, op, 0, key.len() as u8, 0, 0, 0, 0]);
            req.extend_from_slice(&(key.len() as u32).to_be_bytes());
            req.extend_from_slice(&[0; 12]);
            req.extend_from_slice(key.as_bytes());
        }
        b.send(&req);
        for (op, k) in gets.into_iter().chain([(0x0a, 9)]) {
            let head = b.read_n(24);
            let body = b.read_n(u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize);
            assert_eq!((head[0], head[1], &head[6..8]), (0x81, op, &[0u8, 0][..]));
            if op == 0x0a {
                assert!(body.is_empty());
                continue;
            }
            let key = if op == 0x00 {
                String::new()
            } else {
                format!("v{k}")
            };
            assert_eq!(&body[..4], &(k as u32).to_be_bytes(), "{model} {io}");
            assert_eq!(&body[4..4 + key.len()], key.as_bytes());
            assert!(body[4 + key.len()..] == values[k], "{model} {io}: v{k}");
        }
        // A fatal line closes the connection. As memcached, which writes
        // its answers after each text get, those up to the last get go
        // first, the meta gets' after it not (under 1 MiB together: one
        // batch holds them all).
        let mut c = srv.connect();
        c.send(b"mg v2 v\r\nget v0\r\nget v1\r\nmg v2 v\r\nGET / HTTP/1.1\r\n");
        let got = c.read_to_eof();
        let mut want = format!("VA {}\r\n", values[2].len()).into_bytes();
        want.extend_from_slice(&values[2]);
        want.extend_from_slice(b"\r\n");
        want.extend_from_slice(&answer(&[0]));
        want.extend_from_slice(&answer(&[1]));
        assert!(got == want, "{model} {io}: {} bytes", got.len());
    }
}

/// 50 connections × 200 `incr` (plus `ma`) on 5 shared counters: exact
/// totals, and every increment saw a distinct value.
fn shared_counters(model: &str) {
    const CONNS: usize = 50;
    const ROUNDS: usize = 40; // × 5 counters = 200 increments per connection
    const COUNTERS: usize = 5;
    let srv = InProc::tcp(model);
    let mut c = srv.connect();
    for k in 0..COUNTERS {
        c.expect_str(&format!("set ctr{k} 0 0 1\r\n0\r\n"), "STORED\r\n");
    }
    let barrier = Arc::new(Barrier::new(CONNS));
    let handles: Vec<_> = (0..CONNS)
        .map(|t| {
            let addr = srv.addr.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = Client::connect(&addr);
                barrier.wait();
                let mut seen = vec![Vec::new(); COUNTERS];
                for r in 0..ROUNDS {
                    // One request per counter, pipelined, starting at a
                    // different counter per connection; every other
                    // connection uses the meta command.
                    let mut req = Vec::new();
                    let order: Vec<usize> = (0..COUNTERS).map(|i| (i + t + r) % COUNTERS).collect();
                    for &k in &order {
                        if t % 2 == 0 {
                            req.extend_from_slice(format!("incr ctr{k} 1\r\n").as_bytes());
                        } else {
                            req.extend_from_slice(format!("ma ctr{k} v\r\n").as_bytes());
                        }
                    }
                    c.send(&req);
                    let per = if t % 2 == 0 { 1 } else { 2 };
                    let lines = c.read_lines(order.len() * per);
                    for (j, &k) in order.iter().enumerate() {
                        if per == 2 {
                            assert!(
                                lines[2 * j].starts_with(b"VA "),
                                "ma: {}",
                                show(&lines[2 * j])
                            );
                        }
                        let line = &lines[per * j + per - 1];
                        let v: u64 = std::str::from_utf8(line)
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or_else(|| panic!("incr ctr{k}: {}", show(line)));
                        seen[k].push(v);
                    }
                }
                seen
            })
        })
        .collect();
    let mut all = vec![HashSet::new(); COUNTERS];
    for h in handles {
        for (k, vals) in h.join().expect("client thread").into_iter().enumerate() {
            for v in vals {
                assert!(all[k].insert(v), "ctr{k}: value {v} returned twice");
            }
        }
    }
    let total = (CONNS * ROUNDS) as u64;
    for (k, vals) in all.iter().enumerate() {
        assert_eq!(vals.len() as u64, total);
        assert_eq!(vals.iter().max(), Some(&total), "ctr{k}");
        c.expect_str(
            &format!("get ctr{k}\r\n"),
            &format!(
                "VALUE ctr{k} 0 {}\r\n{total}\r\nEND\r\n",
                total.to_string().len()
            ),
        );
    }
}

/// 20 connections each add 1 to one value 50 times with `gets`/`cas` retry
/// loops (half of them with `mg c`/`ms C`): the total is exact.
fn cas_loops(model: &str) {
    const CONNS: usize = 20;
    const EACH: usize = 50;
    let srv = InProc::tcp(model);
    let mut c = srv.connect();
    c.expect_str("set casv 0 0 1\r\n0\r\n", "STORED\r\n");
    let barrier = Arc::new(Barrier::new(CONNS));
    let handles: Vec<_> = (0..CONNS)
        .map(|t| {
            let addr = srv.addr.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = Client::connect(&addr);
                barrier.wait();
                let mut retries = 0u64;
                for _ in 0..EACH {
                    loop {
                        let (value, cas) = if t % 2 == 0 {
                            let r = c.call(b"gets casv\r\n");
                            let text = String::from_utf8(r).unwrap();
                            let mut lines = text.split("\r\n");
                            let head: Vec<&str> = lines.next().unwrap().split(' ').collect();
                            assert_eq!(head[0], "VALUE", "gets: {text:?}");
                            let cas: u64 = head[4].parse().unwrap();
                            let value: u64 = lines.next().unwrap().parse().unwrap();
                            (value, cas)
                        } else {
                            let r = c.call(b"mg casv v c\r\n");
                            let text = String::from_utf8(r).unwrap();
                            let mut lines = text.split("\r\n");
                            let head: Vec<&str> = lines.next().unwrap().split(' ').collect();
                            assert_eq!(head[0], "VA", "mg: {text:?}");
                            let cas: u64 = head[2][1..].parse().unwrap();
                            let value: u64 = lines.next().unwrap().parse().unwrap();
                            (value, cas)
                        };
                        let next = (value + 1).to_string();
                        let req = if t % 2 == 0 {
                            format!("cas casv 0 0 {} {cas}\r\n{next}\r\n", next.len())
                        } else {
                            format!("ms casv {} C{cas}\r\n{next}\r\n", next.len())
                        };
                        let r = c.call(req.as_bytes());
                        match &r[..] {
                            b"STORED\r\n" | b"HD\r\n" => break,
                            b"EXISTS\r\n" | b"EX\r\n" => retries += 1,
                            other => panic!("cas: {}", show(other)),
                        }
                    }
                }
                retries
            })
        })
        .collect();
    let retries: u64 = handles.into_iter().map(|h| h.join().expect("client")).sum();
    let total = CONNS * EACH;
    c.expect_str(
        "get casv\r\n",
        &format!(
            "VALUE casv 0 {}\r\n{total}\r\nEND\r\n",
            total.to_string().len()
        ),
    );
    eprintln!("{model}: {total} CAS increments, {retries} retries");
}

#[test]
fn shared_counters_symped() {
    shared_counters("symped:2");
}

#[test]
fn shared_counters_amped() {
    shared_counters("amped:2");
}

#[test]
fn shared_counters_seda() {
    shared_counters("seda:2:2");
}

#[test]
fn cas_loops_symped() {
    cas_loops("symped:2");
}

#[test]
fn cas_loops_amped() {
    cas_loops("amped:2");
}

#[test]
fn cas_loops_seda() {
    cas_loops("seda:2:2");
}

/// Shrinks a client socket's receive buffer, so a large response cannot
/// all sit in kernel buffers and the server stays blocked writing it.
fn small_rcvbuf(c: &Client) {
    let fd = c.raw_fd();
    let size: libc::c_int = 64 * 1024;
    // SAFETY: setsockopt on a socket we own, with a correctly sized int.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &size as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt SO_RCVBUF");
}

/// SIGTERM/SIGINT: the server stops accepting at once, answers every
/// request that had arrived (including 8 MiB of responses the client is
/// slow to read), closes idle connections, and exits 0.
fn graceful_shutdown(model: &str, sig: i32) {
    let mut srv = KvProc::start(&["--model", model]);
    // A 1 MiB value to make a response too big for the socket buffers.
    let big: Vec<u8> = (0..MIB - 100).map(|i| b'a' + (i % 23) as u8).collect();
    let mut setup = srv.connect();
    let mut req = format!("set big 7 0 {}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    setup.expect(&req, b"STORED\r\n");

    // Every client has been accepted and served once before the signal.
    let mut slow = srv.connect();
    slow.expect_str(
        "version\r\n",
        &format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION),
    );
    small_rcvbuf(&slow);
    let mut busy = srv.connect();
    busy.expect_str(
        "version\r\n",
        &format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION),
    );
    let mut idle = srv.connect();
    idle.expect_str(
        "version\r\n",
        &format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION),
    );

    // In flight: 8 large responses the client does not read yet, and a
    // pipeline of 200 requests sent right before the signal.
    const GETS: usize = 8;
    let mut counter = ReadCounter::new(&srv);
    slow.send(&b"get big\r\n".repeat(GETS));
    let mut pipeline = Vec::new();
    let mut want = Vec::new();
    for i in 0..200 {
        pipeline.extend_from_slice(
            format!(
                "set sd{i} 0 0 {}\r\n{i}\r\nincr sd{i} 1\r\n",
                i.to_string().len()
            )
            .as_bytes(),
        );
        want.extend_from_slice(format!("STORED\r\n{}\r\n", i + 1).as_bytes());
    }
    busy.send(&pipeline);
    // The server has read them (it is then blocked writing to `slow`).
    counter.wait_for(b"get big\r\n".len() * GETS + pipeline.len());
    drop(counter);
    srv.signal(sig);

    // New connections are refused while the old ones are still served.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match Client::try_connect(&srv.addr) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            // Queued in the backlog as the listener closed: reset, never served.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("connect after the signal: {e}"),
            Ok(_) => {
                assert!(
                    Instant::now() < until,
                    "still accepting 5 s after the signal"
                );
                thread::sleep(Duration::from_millis(5));
            }
        }
    }
    assert!(
        srv.wait_exit(Duration::ZERO).is_none(),
        "the server exited before finishing the in-flight responses"
    );

    // The slow client gets all its responses, then end of stream (first:
    // the server is still writing them).
    let mut one = format!("VALUE big 7 {}\r\n", big.len()).into_bytes();
    one.extend_from_slice(&big);
    one.extend_from_slice(b"\r\nEND\r\n");
    let got = slow.read_to_eof();
    assert_eq!(
        got.len(),
        one.len() * GETS,
        "bytes of the in-flight responses"
    );
    assert!(got == one.repeat(GETS), "in-flight responses differ");
    // The pipeline was answered in full; the idle connection was closed.
    let got = busy.read_to_eof();
    assert!(
        got == want,
        "pipeline across shutdown: want {} got {}",
        show(&want),
        show(&got)
    );
    assert_eq!(show(&idle.read_to_eof()), show(b""));

    let st = srv
        .wait_exit(Duration::from_secs(10))
        .expect("server exits after the signal");
    assert!(st.success(), "exit status {st:?}");
    assert!(
        !srv.stderr_text().contains("cut off"),
        "no connection was cut off: {}",
        srv.stderr_text()
    );
}

#[test]
fn graceful_shutdown_sigterm_symped() {
    graceful_shutdown("symped:2", libc::SIGTERM);
}

#[test]
fn graceful_shutdown_sigint_amped() {
    graceful_shutdown("amped:2", libc::SIGINT);
}

#[test]
fn graceful_shutdown_sigterm_thread_per_conn() {
    graceful_shutdown("thread-per-conn", libc::SIGTERM);
}

/// A request only partly received when the signal arrives is still read to
/// its end and answered; then the connection closes and the server exits 0.
fn partial_request_survives_shutdown(model: &str) {
    let mut srv = KvProc::start(&["--model", model]);
    let mut c = srv.connect();
    c.expect(
        b"version\r\n",
        format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION).as_bytes(),
    );
    let mut big = srv.connect();
    let mut counter = ReadCounter::new(&srv);
    c.send(b"set half 0 0 10\r\nabc");
    // A large value, received straight into its item, likewise.
    big.send(b"set big 0 0 200000\r\n");
    big.send(&[b'b'; 1000]);
    counter.wait_for(b"set half 0 0 10\r\nabc".len() + b"set big 0 0 200000\r\n".len() + 1000);
    drop(counter);
    srv.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(100));
    c.send(b"defghij\r\n");
    assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n", "{model}");
    assert_eq!(c.read_to_eof(), b"", "{model}: closed after the request");
    big.send(&[b'b'; 199_000]);
    big.send(b"\r\n");
    assert_eq!(big.read_until(b"\r\n"), b"STORED\r\n", "{model}: large");
    assert_eq!(big.read_to_eof(), b"", "{model}: closed after the request");
    let st = srv
        .wait_exit(Duration::from_secs(10))
        .expect("server exits after the signal");
    assert!(st.success(), "{model}: exit status {st:?}");
}

#[test]
fn partial_request_survives_shutdown_symped() {
    partial_request_survives_shutdown("symped:2");
}

#[test]
fn partial_request_survives_shutdown_thread_per_conn() {
    partial_request_survives_shutdown("thread-per-conn");
}

/// A whole request that came to an idle connection before the stop signal
/// was seen is answered before the connection closes: the client sent it
/// while the server was still serving. (Such a connection was closed
/// unread, its request lost to a reset.) The server is stopped (SIGSTOP)
/// while the requests arrive, so they wait in the sockets unread when it
/// meets the signal.
fn a_request_that_came_before_the_stop_is_answered(model: &str) {
    let mut srv = KvProc::start(&["--model", model]);
    let version = format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION);
    let mut conns: Vec<Client> = (0..20).map(|_| srv.connect()).collect();
    for c in &mut conns {
        c.expect_str("version\r\n", &version);
    }
    srv.signal(libc::SIGSTOP);
    for c in &mut conns {
        c.send(b"version\r\n");
    }
    // Both reach it at once when it runs again.
    srv.signal(libc::SIGTERM);
    srv.signal(libc::SIGCONT);
    for c in &mut conns {
        assert_eq!(show(&c.read_to_eof()), show(version.as_bytes()), "{model}");
    }
    let st = srv
        .wait_exit(Duration::from_secs(10))
        .expect("server exits after the signal");
    assert!(st.success(), "{model}: exit status {st:?}");
}

#[test]
fn a_request_that_came_before_the_stop_is_answered_symped() {
    a_request_that_came_before_the_stop_is_answered("symped:2");
}

#[test]
fn a_request_that_came_before_the_stop_is_answered_thread_per_conn() {
    a_request_that_came_before_the_stop_is_answered("thread-per-conn");
}

/// CPU time (user + system) of process `pid`, from `/proc/<pid>/stat`.
fn cpu_time_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let f: Vec<u64> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_secs_f64((f[0] + f[1]) as f64 / hz as f64)
}

/// Network loops that spin before they sleep (`--idle-spin-us`) still go
/// to sleep: once its clients fall silent, a server with a long spin uses
/// (almost) no CPU. A loop that kept spinning would burn a core here.
#[test]
fn an_idle_server_with_a_spin_uses_no_cpu() {
    let kv = KvProc::start(&["--model", "symped:2", "--idle-spin-us", "2000"]);
    let mut clients: Vec<Client> = (0..4).map(|_| kv.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.expect_str(&format!("set k{i} 0 0 1\r\nx\r\n"), "STORED\r\n");
    }
    // Past the spin, every loop sleeps; the clients stay connected.
    thread::sleep(Duration::from_millis(200));
    let before = cpu_time_of(kv.pid() as u32);
    thread::sleep(Duration::from_secs(1));
    let used = cpu_time_of(kv.pid() as u32) - before;
    assert!(
        used < Duration::from_millis(100),
        "an idle server used {used:?} of CPU in 1 s"
    );
    for (i, c) in clients.iter_mut().enumerate() {
        c.expect_str(
            &format!("get k{i}\r\n"),
            &format!("VALUE k{i} 0 1\r\nx\r\nEND\r\n"),
        );
    }
}

/// What an idle connection's task holds is mostly the driver's future: it
/// stays small. It was 1,752 bytes when `serve_conn` awaited the driver
/// inside a block of its own (holding it twice), 656 while the driver
/// awaited nested `async fn`s of the connection (each keeping its own copy
/// of its arguments), 392 while it kept its buffers' bookkeeping, a copy of
/// its lane and the batch limits in the future (now a pooled box taken per
/// busy spell, a lane borrowed per read, 32-bit limits); at 192 or less,
/// the task (a 32-byte header and the future) fits mimalloc's 224-byte size
/// class (448 before).
#[test]
fn a_connection_future_stays_small() {
    use duality_kv::server::{driver, serve_conn, KvConfig, KvState};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let d = driver(KvState::new(KvConfig::default()).expect("kv config"));
    let size = Arc::new(AtomicUsize::new(0));
    let seen = size.clone();
    let server = duality_models::ServerBuilder::new()
        .model(duality_models::Model::Sped)
        .tcp("127.0.0.1:0".parse().unwrap())
        .serve(move |c, p| {
            let f = serve_conn(c, p, d.clone());
            seen.store(std::mem::size_of_val(&f), SeqCst);
            f
        })
        .expect("serve");
    let mut c = Client::connect(&Addr::Tcp(server.tcp_addrs()[0]));
    c.expect_str("set k 0 0 1\r\nx\r\n", "STORED\r\n");
    let bytes = size.load(SeqCst);
    assert!(
        bytes > 0 && bytes <= 192,
        "a connection's future takes {bytes} bytes"
    );
    server.shutdown(Duration::from_secs(2));
}

/// Clients pipelining `get`s of a missing key without pause (reading the
/// short answers) keep the server's memory flat on both I/O backends. On
/// io_uring the receive queue once kept every byte ever received while its
/// reader never quite caught up: 150 MiB more per second per flooder (a
/// release build), until the OOM killer.
#[test]
fn a_pipelining_flood_does_not_grow_memory() {
    for io in ["uring", "epoll"] {
        let kv = KvProc::start(&["-m", "16", "--io", io]);
        kv.connect()
            .expect_str("set flood:key 0 0 1\r\nx\r\n", "STORED\r\n");
        let before = kv.rss();
        let Addr::Tcp(a) = kv.addr else {
            unreachable!()
        };
        let batch = "get flood:none\r\n".repeat(1024);
        let peak = duality_models::flood::while_flooded(a, 2, batch.as_bytes(), || {
            let mut peak = 0;
            for _ in 0..30 {
                thread::sleep(Duration::from_millis(100));
                peak = peak.max(kv.rss());
            }
            peak
        });
        assert!(
            peak < before + 64 * MIB,
            "--io {io}: RSS went from {} to {} MiB under two pipelining floods",
            before / MIB,
            peak / MIB
        );
        kv.connect()
            .expect_str("get flood:key\r\n", "VALUE flood:key 0 1\r\nx\r\nEND\r\n");
    }
}

/// `lru_crawler metadump all` of a cache holding many small items goes out
/// in pieces: dumps whose clients do not read hold a piece each, not the
/// whole listing (200,000 items: about 14 MB of lines each, held whole
/// before), and the cache serves meanwhile; a dump that is read lists
/// every item once.
#[test]
fn stalled_metadumps_hold_a_piece_not_the_listing() {
    const ITEMS: usize = 200_000;
    let kv = KvProc::start(&["-m", "256", "-t", "1"]);
    let mut c = kv.connect();
    for chunk in 0..ITEMS / 10_000 {
        let mut batch = Vec::new();
        for i in chunk * 10_000..(chunk + 1) * 10_000 {
            batch.extend_from_slice(format!("set dump:{i} 0 0 1 noreply\r\nx\r\n").as_bytes());
        }
        c.send(&batch);
    }
    c.expect_str("mn\r\n", "MN\r\n");
    assert_eq!(c.stats("")["curr_items"], ITEMS.to_string());
    let before = kv.rss();
    let stalled: Vec<Client> = (0..4)
        .map(|_| {
            let mut d = kv.connect();
            small_rcvbuf(&d);
            d.send(b"lru_crawler metadump all\r\n");
            d
        })
        .collect();
    // Time for each dump to fill its socket and stop (their first lines
    // arrive: the dump began).
    thread::sleep(Duration::from_millis(500));
    c.expect_str("mn\r\n", "MN\r\n");
    let held = kv.rss();
    assert!(
        held < before + 16 * MIB,
        "RSS went from {} to {} MiB with 4 stalled metadumps",
        before / MIB,
        held / MIB
    );
    let mut d = kv.connect();
    d.send(b"lru_crawler metadump all\r\nmn\r\n");
    let dump = d.read_until(b"END\r\nMN\r\n");
    let mut keys = HashSet::new();
    for line in dump.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"key=dump") {
            let end = rest.iter().position(|&b| b == b' ').expect("a key= line");
            assert!(keys.insert(rest[..end].to_vec()), "listed twice: {line:?}");
        }
    }
    assert_eq!(keys.len(), ITEMS, "items listed");
    drop(stalled);
}

/// `-c` past what the descriptor limit allows: the soft limit is raised as
/// far as the hard one lets it, and where that is not enough the server
/// takes fewer connections, says so, and answers the rest with memcached's
/// "Too many open connections" rather than leaving them unaccepted.
#[test]
fn max_conns_fits_the_descriptor_limit() {
    // Soft 64, hard 4096: raised to fit -c 1024.
    let srv = KvProc::start_with_nofile(&["-c", "1024"], (64, 4096));
    assert_eq!(srv.connect().stats("settings")["maxconns"], "1024");
    assert!(
        !srv.stderr_text().contains("warning"),
        "{}",
        srv.stderr_text()
    );
    drop(srv);
    // Hard 1100: -c 1000 fits beside the server's own descriptors, with
    // fewer refusals lingered over than the usual 125 (a -c near the limit
    // was cut to 921 to keep room for all of them).
    let srv = KvProc::start_with_nofile(&["-c", "1000", "-t", "1"], (64, 1100));
    assert_eq!(srv.connect().stats("settings")["maxconns"], "1000");
    assert!(
        !srv.stderr_text().contains("warning"),
        "{}",
        srv.stderr_text()
    );
    drop(srv);
    // Lower hard limits: the server keeps descriptors for itself (its loops,
    // listener, memory file...) and for refusals lingered over, takes the
    // connections the rest allows, and answers every client past them.
    // Each case failed before the reserve was counted from the model (a
    // fixed 64): 24 epoll loops hold 75, and the memory file held one per
    // shard (65 at -m 256), so clients past what fitted got no answer.
    let dir = TempDir::new("kv-fit");
    let file = dir.path().join("cache.mem");
    let cases: [(&[&str], u64); 3] = [
        (&["-c", "1024", "-t", "1"], 100),
        (&["-c", "1024", "-t", "24", "--io", "epoll"], 160),
        (
            &[
                "-c",
                "1024",
                "-t",
                "1",
                "-m",
                "256",
                "-e",
                file.to_str().unwrap(),
            ],
            128,
        ),
    ];
    for (args, hard) in cases {
        let srv = KvProc::start_with_nofile(args, (64, hard));
        assert!(
            srv.wait_stderr("taking at most ", Duration::from_secs(5)),
            "{args:?}: {}",
            srv.stderr_text()
        );
        let text = srv.stderr_text();
        let fits: usize = text
            .split("taking at most ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{args:?}: {text}"));
        assert!(fits > 0 && (fits as u64) < hard, "{args:?}: {text}");
        // This one stays open: one of them.
        let mut first = srv.connect();
        assert_eq!(first.stats("settings")["maxconns"], fits.to_string());
        let mut clients: Vec<Client> = (0..fits + 17).map(|_| srv.connect()).collect();
        let (mut served, mut refused) = (0, 0);
        for c in &mut clients {
            c.send(b"version\r\n");
            let line = c.read_until(b"\r\n");
            if line.starts_with(b"VERSION") {
                served += 1;
            } else {
                assert_eq!(
                    show(&line),
                    show(b"ERROR Too many open connections\r\n"),
                    "{args:?}"
                );
                refused += 1;
            }
        }
        assert_eq!((served, refused), (fits - 1, 18), "{args:?}");
        drop(first);
    }
}

/// A client that closes a connection and opens another at once, at the
/// limit (a pool recycling one), is served: the new connection waits a
/// moment for the slot its close frees, which the loop that held it may not
/// have seen yet. Refused 61-80 times in 200 back to back before (symped,
/// steal, thread-per-conn), and 7-15 of 40 with a wait of at most 5 ms in
/// 100 while other processes kept both cores busy (CI); memcached refuses
/// some too, so a couple are allowed.
fn reconnecting_at_the_limit_is_served(model: &str) {
    let srv = KvProc::start(&["-c", "4", "--model", model]);
    let version = |c: &mut Client| {
        c.send(b"version\r\n");
        c.read_until(b"\r\n")
    };
    let mut held: Vec<Client> = (0..3).map(|_| srv.connect()).collect();
    for c in &mut held {
        assert!(version(c).starts_with(b"VERSION "));
    }
    let mut cycling = srv.connect();
    assert!(version(&mut cycling).starts_with(b"VERSION "));
    let mut refused = 0;
    for _ in 0..40 {
        drop(cycling);
        cycling = srv.connect();
        let mut answer = version(&mut cycling);
        if !answer.starts_with(b"VERSION ") {
            assert_eq!(show(&answer), show(b"ERROR Too many open connections\r\n"));
            refused += 1;
            // Its slot comes back.
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(50));
                cycling = srv.connect();
                answer = version(&mut cycling);
                if answer.starts_with(b"VERSION ") {
                    break;
                }
            }
            assert!(
                answer.starts_with(b"VERSION "),
                "{model}: {}",
                show(&answer)
            );
        }
    }
    assert!(
        refused <= 2,
        "{model}: {refused} of 40 reconnections refused"
    );
}

/// Clients past the limit while no slot frees are refused, not queued:
/// only as many wait for a slot at once as refusals may linger (4 here),
/// the rest are refused at once (60 connections waiting 50 ms each in turn
/// would take 3 s).
#[test]
fn a_flood_past_the_limit_is_refused_not_queued() {
    let srv = KvProc::start(&["-c", "4", "-t", "1"]);
    let mut held: Vec<Client> = (0..4).map(|_| srv.connect()).collect();
    for c in &mut held {
        c.send(b"version\r\n");
        assert!(c.read_until(b"\r\n").starts_with(b"VERSION "));
    }
    let t0 = Instant::now();
    let mut flood: Vec<Client> = (0..60).map(|_| srv.connect()).collect();
    for c in &mut flood {
        c.send(b"version\r\n");
    }
    for c in &mut flood {
        assert_eq!(
            show(&c.read_until(b"\r\n")),
            show(b"ERROR Too many open connections\r\n")
        );
    }
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "60 refusals took {took:?}"
    );
}

/// At a stop signal, connections waiting for a slot are refused with the
/// message: admitted once the held connections closed, they were closed
/// at once with their request unread (a reset under io_uring, sometimes a
/// VERSION under epoll).
#[test]
fn connections_waiting_for_a_slot_at_shutdown_are_refused() {
    const REFUSAL: &[u8] = b"ERROR Too many open connections\r\n";
    let mut srv = KvProc::start(&["-c", "4", "-t", "1"]);
    let mut held: Vec<Client> = (0..4).map(|_| srv.connect()).collect();
    for c in &mut held {
        c.send(b"version\r\n");
        assert!(c.read_until(b"\r\n").starts_with(b"VERSION "));
    }
    let mut waiting: Vec<Client> = (0..4).map(|_| srv.connect()).collect();
    for c in &mut waiting {
        c.send(b"version\r\n");
    }
    // Within their 50 ms waits (past them they are refused anyway).
    thread::sleep(Duration::from_millis(25));
    srv.signal(libc::SIGTERM);
    let answers: Vec<String> = waiting.iter_mut().map(|c| show(&c.read_to_eof())).collect();
    // A client not yet accepted when the listener closed reads nothing.
    for a in &answers {
        assert!(a.is_empty() || *a == show(REFUSAL), "{answers:?}");
    }
    assert!(answers.iter().any(|a| *a == show(REFUSAL)), "{answers:?}");
    assert!(srv.wait_exit(Duration::from_secs(10)).is_some());
    drop(held);
}

#[test]
fn reconnecting_at_the_limit_is_served_symped() {
    reconnecting_at_the_limit_is_served("symped:2");
}

#[test]
fn reconnecting_at_the_limit_is_served_thread_per_conn() {
    reconnecting_at_the_limit_is_served("thread-per-conn");
}

/// Values being received count against `-o read_buf_mem_limit`, a step at
/// a time as their bytes arrive: past it a set is refused with memcached's
/// out-of-memory answer, its bytes dropped as they arrive (never stored),
/// and the budget comes back when the values already taken complete.
#[test]
fn large_values_in_flight_are_bounded() {
    let srv = KvProc::start(&["-m", "64", "-I", "2m", "-o", "read_buf_mem_limit=4"]);
    const LEN: usize = 1_500_000;
    // Past a quarter of the value, a buffer for all of it is taken.
    const SENT: usize = 1_200_000;
    let head = |k: &str| format!("set {k} 0 0 {LEN}\r\n");
    let mut held: Vec<Client> = Vec::new();
    let mut counter = ReadCounter::new(&srv);
    for k in ["a", "b"] {
        let mut c = srv.connect();
        c.send(head(k).as_bytes());
        c.send(&vec![b'v'; SENT]);
        held.push(c);
    }
    // Both have taken their 1.5 MB once their bytes were read.
    counter.wait_for(2 * (head("a").len() + SENT));
    drop(counter);
    let mut third = srv.connect();
    third.send(head("c").as_bytes());
    // Refused on its way (its answer may come before all of it is sent);
    // the rest of its value is dropped, and the connection goes on.
    third.send(&vec![b'v'; LEN]);
    third.send(b"\r\n");
    assert_eq!(
        show(&third.read_until(b"\r\n")),
        show(b"SERVER_ERROR out of memory storing object\r\n")
    );
    third.expect_str("get c\r\n", "END\r\n");
    // The first two complete: stored, and their budget comes back.
    for c in &mut held {
        c.send(&vec![b'v'; LEN - SENT]);
        c.send(b"\r\n");
        assert_eq!(show(&c.read_until(b"\r\n")), show(b"STORED\r\n"));
    }
    let mut value = head("c").into_bytes();
    value.extend_from_slice(&vec![b'w'; LEN]);
    value.extend_from_slice(b"\r\n");
    third.send(&value);
    assert_eq!(show(&third.read_until(b"\r\n")), show(b"STORED\r\n"));
    assert_eq!(third.stats("")["store_no_memory"], "1");
}

/// A value declared and never sent holds none of the budget: clients that
/// send only the head of a large set (text or binary) and go silent do not
/// make anybody else's large store fail (a review: 67 such clients, 2.5 KB
/// in all, made every store of 128 KB or more answer out of memory, where
/// memcached stored them). Their values are still stored when they come.
#[test]
fn values_declared_and_not_sent_hold_no_memory() {
    let srv = KvProc::start(&["-m", "64", "-I", "2m", "-o", "read_buf_mem_limit=4"]);
    const LEN: usize = 1_500_000;
    let mut silent: Vec<Client> = (0..20)
        .map(|i| {
            let mut c = srv.connect();
            if i % 2 == 0 {
                c.send(format!("set s{i} 0 0 {LEN}\r\n").as_bytes());
            } else {
                // Binary SET: extras 8 (flags, expiry), key, value.
                let key = format!("s{i}");
                let body = (8 + key.len() + LEN) as u32;
                let mut h = vec![0x80, 0x01, 0, key.len() as u8, 8, 0, 0, 0];
                h.extend_from_slice(&body.to_be_bytes());
                h.extend_from_slice(&[0; 12]);
                h.extend_from_slice(&[0; 8]);
                h.extend_from_slice(key.as_bytes());
                c.send(&h);
            }
            c.send(&[b'v'; 1000]);
            c
        })
        .collect();
    thread::sleep(Duration::from_millis(200));
    let mut c = srv.connect();
    let mut set = format!("set big 0 0 {LEN}\r\n").into_bytes();
    set.extend_from_slice(&vec![b'w'; LEN]);
    set.extend_from_slice(b"\r\n");
    c.send(&set);
    assert_eq!(show(&c.read_until(b"\r\n")), show(b"STORED\r\n"));
    assert_eq!(c.stats("")["store_no_memory"], "0");
    // The silent ones finish: stored too.
    for (i, s) in silent.iter_mut().enumerate() {
        s.send(&vec![b'v'; LEN - 1000]);
        if i % 2 == 0 {
            s.send(b"\r\n");
            assert_eq!(show(&s.read_until(b"\r\n")), show(b"STORED\r\n"), "s{i}");
        } else {
            let r = s.read_n(24);
            assert_eq!((r[0], r[1], &r[6..8]), (0x81, 0x01, &[0u8, 0][..]), "s{i}");
        }
    }
    c.expect_str("mg s19 s\r\n", &format!("HD s{LEN}\r\n"));
}

/// Large responses held for clients that do not read count against the
/// same budget; past it a get's answer goes out a piece at a time, never
/// held whole (memcached sends items by reference: clients that stall on a
/// large value must not make everybody else's gets of it fail). A value
/// that changes between two pieces closes the connection (never a value
/// made of two).
#[test]
fn large_responses_held_for_slow_readers_are_bounded() {
    // Shards of 32 MiB (-m / -I): the four 6 MB values fit whichever
    // shards their keys hash to (with 8 MiB shards two in one evicted the
    // first, by the per-process hash seed: 1 run in 4 failed).
    let srv = KvProc::start(&["-m", "256", "-I", "32m", "-o", "read_buf_mem_limit=16"]);
    const LEN: usize = 6_000_000;
    let mut c = srv.connect();
    let mut set = format!("set big 0 0 {LEN}\r\n").into_bytes();
    set.extend_from_slice(&vec![b'v'; LEN]);
    set.extend_from_slice(b"\r\n");
    c.send(&set);
    assert_eq!(show(&c.read_until(b"\r\n")), show(b"STORED\r\n"));
    for k in ["big2", "big3", "big4"] {
        c.send(
            &[
                b"set ",
                k.as_bytes(),
                b" 0 0 ",
                LEN.to_string().as_bytes(),
                b"\r\n",
            ]
            .concat(),
        );
        c.send(&set[set.len() - LEN - 2..]);
        assert_eq!(show(&c.read_until(b"\r\n")), show(b"STORED\r\n"));
    }
    let slow = |key: &str| -> Client {
        let mut s = srv.connect();
        small_rcvbuf(&s);
        s.send(format!("get {key}\r\n").as_bytes());
        s
    };
    // Two hold 12 of the 16 MB with two values (more sends of either
    // would count it once); another value would not fit.
    let mut held = [slow("big3"), slow("big4")];
    thread::sleep(Duration::from_millis(300));
    let want_of = |key: &str| format!("VALUE {key} 0 {LEN}\r\n").len() + LEN + 7;
    let whole_of = |r: &[u8], key: &str, byte: u8| {
        let head = format!("VALUE {key} 0 {LEN}\r\n");
        r.len() == want_of(key)
            && r.starts_with(head.as_bytes())
            && r.ends_with(b"\r\nEND\r\n")
            && r[head.len()..head.len() + LEN].iter().all(|&b| b == byte)
    };
    let head = format!("VALUE big 0 {LEN}\r\n");
    let want = want_of("big");
    let whole = |r: &[u8], byte: u8| whole_of(r, "big", byte);
    // Answered in pieces, whole; and pipelined behind it, a small get.
    c.send(b"get big\r\nget s\r\n");
    assert!(whole(&c.read_n(want), b'v'));
    c.expect_str("", "END\r\n");
    // A binary GETK too (on a connection of its own: the protocol is the
    // connection's): header, flags, key, then the value in pieces.
    let mut getk = vec![0x80, 0x0c, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3];
    getk.extend_from_slice(&[0; 12]);
    getk.extend_from_slice(b"big");
    let mut b = srv.connect();
    b.send(&getk);
    let r = b.read_n(24 + 4 + 3 + LEN);
    assert_eq!((r[0], r[1], &r[6..8]), (0x81, 0x0c, &[0u8, 0][..]));
    assert_eq!(
        u32::from_be_bytes(r[8..12].try_into().unwrap()) as usize,
        4 + 3 + LEN
    );
    assert_eq!(&r[28..31], b"big");
    assert!(r[31..].iter().all(|&b| b == b'v'));
    // Done, it waits for its next request like any other connection (the
    // server may still be between its last write and the state change).
    let at = format!("tcp:{}", b.local_addr().expect("tcp"));
    let state_of_b = || {
        let conns = srv.connect().stats("conns");
        let (fd, _) = conns
            .iter()
            .find(|(k, v)| k.ends_with(":addr") && **v == at)
            .unwrap_or_else(|| panic!("{at} in {conns:?}"));
        conns[&format!("{}:state", fd.trim_end_matches(":addr"))].clone()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while state_of_b() != "conn_read" && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(state_of_b(), "conn_read");
    // And a meta get: its line, then the value in pieces, then its end.
    let mut m = srv.connect();
    m.send(b"mg big v t\r\nmn\r\n");
    let line = format!("VA {LEN} t-1\r\n");
    let r = m.read_n(line.len() + LEN + 2 + 4);
    assert_eq!(show(&r[..line.len()]), show(line.as_bytes()));
    assert!(r[line.len()..line.len() + LEN].iter().all(|&b| b == b'v'));
    assert_eq!(&r[line.len() + LEN..], b"\r\nMN\r\n");
    // A split answer to a slow reader, whose value changes before it is all
    // read: cut short and closed.
    let mut split = slow("big");
    // Its answer has begun before the value changes.
    assert_eq!(show(&split.read_n(head.len())), show(head.as_bytes()));
    c.expect_str("set big 0 0 1\r\nw\r\n", "STORED\r\n");
    let got = split.read_to_eof();
    assert!(got.len() < LEN, "{} bytes", got.len());
    assert!(got.iter().all(|&b| b == b'v'));
    // So is a binary one (not sent from the store whole: the budget has no
    // room for it).
    let mut bin = srv.connect();
    small_rcvbuf(&bin);
    let mut getk = vec![0x80, 0x0c, 0, 4, 0, 0, 0, 0, 0, 0, 0, 4];
    getk.extend_from_slice(&[0; 12]);
    getk.extend_from_slice(b"big2");
    bin.send(&getk);
    // Its answer (header, flags, key) has begun before the value changes.
    let r = bin.read_n(24 + 4 + 4);
    assert_eq!((r[0], r[1], &r[28..32]), (0x81, 0x0c, &b"big2"[..]));
    c.expect_str("set big2 0 0 1\r\nw\r\n", "STORED\r\n");
    let got = bin.read_to_eof();
    assert!(got.len() < LEN, "{} bytes", got.len());
    assert!(got.iter().all(|&b| b == b'v'));
    // Small values are not counted.
    c.expect_str("set s 0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("get s\r\n", "VALUE s 0 1\r\nx\r\nEND\r\n");
    for (s, key) in held.iter_mut().zip(["big3", "big4"]) {
        assert!(whole_of(&s.read_n(want_of(key)), key, b'v'));
    }
    // Read: their budget is back (the driver gives it back once written,
    // which may come a moment after the client has read the last byte),
    // and a large value fits again.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        c.send(&set);
        let line = c.read_until(b"\r\n");
        if line == b"STORED\r\n" {
            break;
        }
        assert_eq!(
            show(&line),
            show(b"SERVER_ERROR out of memory storing object\r\n")
        );
        assert!(Instant::now() < until, "the budget never came back");
        thread::sleep(Duration::from_millis(50));
    }
    c.send(b"get big\r\n");
    assert!(whole(&c.read_n(want), b'v'));
}

/// `-vv` logs each command and the first line of its answer, as memcached's
/// `-vv` does (`<FD command`, `>FD answer`); `verbosity 0` stops it.
#[test]
fn double_verbose_logs_commands_and_answers() {
    let kv = KvProc::start(&["-vv"]);
    let mut c = kv.connect();
    c.expect_str("set traced 0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("get traced\r\n", "VALUE traced 0 1\r\nx\r\nEND\r\n");
    assert!(
        kv.wait_stderr(" get traced", Duration::from_secs(5))
            && kv.wait_stderr(" VALUE traced 0 1", Duration::from_secs(5)),
        "{}",
        kv.stderr_text()
    );
    let text = kv.stderr_text();
    let set = text.lines().find(|l| l.ends_with(" set traced 0 0 1"));
    assert!(set.is_some_and(|l| l.starts_with('<')), "{text}");
    // memcached's lines for a connection's start, its protocol and its end.
    let fd = set.unwrap()[1..].split(' ').next().unwrap().to_string();
    let has = |text: &str, line: &str| text.lines().any(|l| l == line);
    assert!(
        has(
            &text,
            &format!("<{fd} new auto-negotiating client connection")
        ) && has(&text, &format!("{fd}: Client using the ascii protocol")),
        "{text}"
    );
    let mut gone = kv.connect();
    gone.expect_str(
        "version\r\n",
        &format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION),
    );
    assert!(kv.wait_stderr(" version\n", Duration::from_secs(5)));
    let gone_fd = kv
        .stderr_text()
        .lines()
        .rev()
        .find_map(|l| l.strip_suffix(" version"))
        .unwrap()[1..]
        .to_string();
    drop(gone);
    assert!(
        kv.wait_stderr(
            &format!("<{gone_fd} connection closed."),
            Duration::from_secs(5)
        ),
        "{}",
        kv.stderr_text()
    );
    // Values sent from the store (64 KiB and more), and a get whose answer
    // passes the 1 MiB it builds at once, log their first line too.
    let big = vec![b'b'; 600_000];
    for key in ["big1", "big2"] {
        let mut set = format!("set {key} 0 0 {}\r\n", big.len()).into_bytes();
        set.extend_from_slice(&big);
        set.extend_from_slice(b"\r\n");
        c.expect(&set, b"STORED\r\n");
    }
    c.send(b"get big1\r\nget big1 big2\r\n");
    // Each value: "VALUE bigN 0 600000\r\n", its bytes, "\r\n"; each get "END\r\n".
    let value = 21 + big.len() + 2;
    let answers = c.read_n(3 * value + 2 * 5);
    assert!(answers.ends_with(b"\r\nEND\r\n"));
    assert!(
        kv.wait_stderr(" get big1 big2", Duration::from_secs(5)),
        "{}",
        kv.stderr_text()
    );
    // The second get's line may still be on its way from the server.
    let values = || {
        let text = kv.stderr_text();
        let n = text
            .lines()
            .filter(|l| l.starts_with('>') && l.ends_with(" VALUE big1 0 600000"))
            .count();
        (n, text)
    };
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while values().0 < 2 && std::time::Instant::now() < until {
        thread::sleep(Duration::from_millis(5));
    }
    let (n, text) = values();
    assert_eq!(n, 2, "{text}");
    c.expect_str("verbosity 0\r\n", "OK\r\n");
    c.expect_str("get quiet\r\n", "END\r\n");
    c.expect_str(
        "version\r\n",
        &format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION),
    );
    assert!(!kv.stderr_text().contains("quiet"), "{}", kv.stderr_text());
}

/// A fatal error after answers of the same read (a line past the limit
/// with no end) drops those answers; under `-vv` that must not take the
/// connection's task down with it.
#[test]
fn double_verbose_survives_an_error_that_drops_earlier_answers() {
    let kv = KvProc::start(&["-vv"]);
    let mut c = kv.connect();
    let mut req = b"version\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'x', 5000));
    c.send(&req);
    c.read_to_eof();
    assert!(
        kv.wait_stderr(">", Duration::from_secs(5)),
        "{}",
        kv.stderr_text()
    );
    let mut again = kv.connect();
    again.expect_str("get k\r\n", "END\r\n");
    assert!(
        !kv.stderr_text().contains("panicked"),
        "{}",
        kv.stderr_text()
    );
}

/// Counts the bytes the server has read since it was made (`stats`
/// bytes_read, less its own requests): a test waits on it to know that what
/// it sent was read, where a sleep guessed.
struct ReadCounter {
    stats: Client,
    base: u64,
    asked: u64,
}

impl ReadCounter {
    fn new(srv: &KvProc) -> ReadCounter {
        let mut stats = srv.connect();
        let base = Self::read(&mut stats);
        ReadCounter {
            stats,
            base,
            asked: 0,
        }
    }

    fn read(c: &mut Client) -> u64 {
        c.stats("")["bytes_read"].parse().unwrap()
    }

    /// Waits (up to 10 s) until `n` more bytes were read.
    fn wait_for(&mut self, n: usize) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            self.asked += 1;
            let got = Self::read(&mut self.stats) - self.base - 7 * self.asked;
            if got >= n as u64 {
                return;
            }
            assert!(Instant::now() < until, "read {got} of {n} bytes in 10 s");
            thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Clients that pipeline requests and never read the answers hold little
/// of the server's memory each. A review measured ~620 KB per such
/// connection under io_uring (the receive queue took up to 256 KiB ahead,
/// its capacity doubled to 512 KiB, and a long turn's receives overshot it
/// before their cancel went in), where epoll held ~24 KB (what waits stays
/// in the kernel's socket buffers) and nginx ~26 KB. Measured here (peak
/// RSS while they flood, 256 clients, Linux 6.18): io_uring ~175 KB in
/// release and debug builds, the old code 745-810 KB; epoll ~26 KB.
#[test]
fn clients_that_pipeline_and_never_read_hold_little_each() {
    use std::io::Write;
    const CLIENTS: usize = 256;
    let srv = KvProc::start(&["-m", "64"]);
    let mut c = srv.connect();
    let mut set = b"set k 0 0 100\r\n".to_vec();
    set.extend_from_slice(&[b'v'; 100]);
    set.extend_from_slice(b"\r\n");
    c.expect_str(std::str::from_utf8(&set).unwrap(), "STORED\r\n");
    let port = srv.port;
    let before = srv.rss();
    let block = b"get k\r\n".repeat(2000);
    let mut socks: Vec<std::net::TcpStream> = (0..CLIENTS)
        .map(|_| {
            let s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    // Each answer is ~17 times its request: the server stops reading
    // once a connection's answers back up, whatever it keeps of the rest.
    let start = Instant::now();
    let mut peak = before;
    while start.elapsed() < Duration::from_millis(2500) {
        for s in &mut socks {
            match s.write(&block) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        peak = peak.max(srv.rss());
        thread::sleep(Duration::from_millis(20));
    }
    let each = peak.saturating_sub(before) / CLIENTS;
    // Under io_uring the bound needs the kernel's total per multishot
    // receive (Linux 6.17): before it only a cancel stops a receive that
    // ran ahead, and a slow (debug) server's long turns let the kernel
    // deliver bursts past the limit first (~600 KB per client measured).
    let uring = std::env::var("DUALITY_IO").map_or(true, |io| io != "epoll");
    if uring && !kernel_at_least(6, 17) {
        eprintln!("io_uring before Linux 6.17: {each} bytes per client, not checked");
    } else {
        assert!(
            each < 384 * 1024,
            "{each} bytes of RSS per client that pipelines and never reads"
        );
    }
    drop(socks);
    // The server goes on serving others.
    let value = format!("VALUE k 0 100\r\n{}\r\nEND\r\n", "v".repeat(100));
    c.expect_str("get k\r\n", &value);
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (have_major, have_minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (have_major, have_minor) >= (major, minor)
}

/// A warning logged after stderr closed is dropped and the thread that
/// logged it goes on: here accepts failing with `EMFILE` (injected, every
/// third) log "accept failed" on the acceptor. Such a write used to panic
/// inside the log layer (tracing-subscriber reports a failed write with
/// `eprintln!`, which panics on the same closed stderr), killing the thread
/// and every connection it served while the process stayed up.
#[test]
fn warnings_to_a_closed_stderr_are_dropped() {
    let dir = TempDir::new("kv-stderr-warn");
    let sock = dir.path().join("kv.sock");
    let (mut child, ready) = spawn_ready_with(|c| {
        c.args(["kv", "-p", "0", "-s", sock.to_str().unwrap()])
            .env("DUALITY_FAULTS", "emfile");
    });
    assert!(ready.starts_with("ready kv"), "{ready}");
    drop(child.stderr.take());
    // Killed if an assertion below fails.
    let mut guard = ChildGuard(Some(child));
    let addr = Addr::Unix(sock.clone());
    // 12 connections: 4 of their accepts fail first and are logged.
    for i in 0..12 {
        let mut c = Client::connect(&addr);
        c.expect_str(&format!("set k{i} 0 0 1\r\nv\r\n"), "STORED\r\n");
    }
    let mut c = Client::connect(&addr);
    c.expect_str("get k0\r\n", "VALUE k0 0 1\r\nv\r\nEND\r\n");
    // SAFETY: kill(2) with a plain pid and signal number.
    assert_eq!(unsafe { libc::kill(guard.pid() as i32, libc::SIGTERM) }, 0);
    drop(c);
    let status = guard.0.take().unwrap().wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// A large value sent from the store counts once against
/// `-o read_buf_mem_limit`, however many stalled sends hold it: clients
/// that pipeline gets of the same large items and never read must not make
/// everybody else's large stores fail (a review: ~35 such clients on 1 MB
/// items made large sets answer out of memory; each send was charged the
/// value's whole size). Their answers still come whole.
#[test]
fn stalled_gets_of_one_large_item_hold_it_once() {
    const LEN: usize = 1_000_000;
    const CLIENTS: usize = 12;
    let srv = KvProc::start(&["-m", "64", "-I", "2m", "-o", "read_buf_mem_limit=6"]);
    let mut c = srv.connect();
    let set = |k: &str, byte: u8, len: usize| {
        let mut s = format!("set {k} 0 0 {len}\r\n").into_bytes();
        s.extend_from_slice(&vec![byte; len]);
        s.extend_from_slice(b"\r\n");
        s
    };
    for (k, byte) in [("a", b'a'), ("b", b'b')] {
        c.send(&set(k, byte, LEN));
        assert_eq!(show(&c.read_until(b"\r\n")), show(b"STORED\r\n"));
    }
    // Each stalled connection has a batch of both values out (1 MiB of
    // shared values ends a batch), and more behind it: charged per send,
    // 12 of them would want ~24 MB of the 6.
    let gets = b"get a b\r\n".repeat(20);
    let mut stalled: Vec<Client> = (0..CLIENTS)
        .map(|_| {
            let mut s = srv.connect();
            small_rcvbuf(&s);
            s.send(&gets);
            s
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    // Everybody else's large values still fit.
    for round in 0..3 {
        c.send(&set("other", b'o', 1_500_000));
        assert_eq!(
            show(&c.read_until(b"\r\n")),
            show(b"STORED\r\n"),
            "round {round}"
        );
    }
    c.expect_str("get s\r\n", "END\r\n");
    // And the stalled ones get every answer whole once they read.
    let head = |k: &str| format!("VALUE {k} 0 {LEN}\r\n");
    let one = head("a").len() + LEN + 2 + head("b").len() + LEN + 2 + 5;
    for s in &mut stalled {
        let r = s.read_n(one * 20);
        for answer in r.chunks(one) {
            assert!(answer.starts_with(head("a").as_bytes()));
            assert!(answer.ends_with(b"\r\nEND\r\n"));
            let b_at = head("a").len() + LEN + 2;
            assert!(answer[head("a").len()..b_at - 2].iter().all(|&x| x == b'a'));
            assert!(answer[b_at..].starts_with(head("b").as_bytes()));
            assert!(answer[b_at + head("b").len()..one - 7]
                .iter()
                .all(|&x| x == b'b'));
        }
    }
}
