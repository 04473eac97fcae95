//! Parser and executor micro-benchmark without an external harness:
//! `cargo bench -p duality-kv --bench parse`. Under `cargo test --benches` it
//! runs one short round as a smoke test.

use duality_kv::{
    execute, execute_binary, parse, parse_binary, BinRequest, Extras, Flow, Limits, Opcode,
    Request, SimpleContext, Store, StoreConfig,
};
use std::hint::black_box;
use std::time::{Duration, Instant};

const KEYS: usize = 1000;

/// A pipelined buffer of `KEYS` requests built by `line(i)`.
fn pipeline(line: impl Fn(usize) -> String) -> Vec<u8> {
    (0..KEYS).flat_map(|i| line(i).into_bytes()).collect()
}

fn for_each_request(buf: &[u8], limits: &Limits, mut f: impl FnMut(&Request<'_>)) -> usize {
    let mut rest = buf;
    let mut n = 0;
    while !rest.is_empty() {
        let (req, used) = parse(rest, limits).expect("benchmark input parses");
        f(&req);
        rest = &rest[used..];
        n += 1;
    }
    n
}

/// A pipelined buffer of `KEYS` binary requests built by `req(i, key)`.
fn bin_pipeline(req: impl Fn(&[u8]) -> BinRequest<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..KEYS {
        let key = format!("key:{i}");
        req(key.as_bytes()).encode(&mut out);
    }
    out
}

fn for_each_binary(buf: &[u8], limits: &Limits, mut f: impl FnMut(&BinRequest<'_>)) -> usize {
    let mut rest = buf;
    let mut n = 0;
    while !rest.is_empty() {
        let (req, used) = parse_binary(rest, limits).expect("benchmark input parses");
        f(&req);
        rest = &rest[used..];
        n += 1;
    }
    n
}

fn report(name: &str, requests: usize, took: Duration) {
    let ns = took.as_nanos() as f64 / requests as f64;
    println!(
        "{name:<28} {ns:>8.1} ns/request  ({:.2} M requests/s)",
        1e3 / ns
    );
}

fn main() {
    let rounds = if std::env::args().any(|a| a == "--bench") {
        300
    } else {
        1
    };
    let limits = Limits::default();
    let value = "v".repeat(32);
    // Stores first, so the reads that follow hit.
    let cases = [
        (
            "set 32 B",
            pipeline(|i| format!("set key:{i} 0 0 32\r\n{value}\r\n")),
        ),
        (
            "ms 32 B T60 c",
            pipeline(|i| format!("ms key:{i} 32 T60 c\r\n{value}\r\n")),
        ),
        ("get", pipeline(|i| format!("get key:{i}\r\n"))),
        (
            "get 10 keys",
            pipeline(|i| {
                let keys: Vec<_> = (i..i + 10).map(|k| format!("key:{}", k % KEYS)).collect();
                format!("get {}\r\n", keys.join(" "))
            }),
        ),
        (
            "mg v t c k",
            pipeline(|i| format!("mg key:{i} v t c k\r\n")),
        ),
    ];
    for (name, buf) in &cases {
        let start = Instant::now();
        let mut n = 0;
        for _ in 0..rounds {
            n += for_each_request(buf, &limits, |r| {
                black_box(r);
            });
        }
        report(&format!("parse {name}"), n, start.elapsed());
    }
    let store = Store::new(StoreConfig::new(64 << 20));
    let ctx = SimpleContext::at(1_700_000_000);
    let mut out = Vec::with_capacity(1 << 20);
    for (name, buf) in &cases {
        let start = Instant::now();
        let mut n = 0;
        for _ in 0..rounds {
            n += for_each_request(buf, &limits, |r| {
                out.clear();
                assert_eq!(execute(r, &store, &ctx, &mut out), Flow::Continue);
                black_box(&out);
            });
        }
        report(&format!("parse+execute {name}"), n, start.elapsed());
    }

    // The binary protocol, same workloads: set, get, getk.
    // 'static: each request borrows its key from the pipeline builder.
    let bin_value: &'static [u8] = &[b'v'; 32];
    let bin_cases = [
        (
            "bin set 32 B",
            bin_pipeline(|key| BinRequest {
                extras: Extras::Store {
                    flags: 0,
                    exptime: 0,
                },
                key,
                value: bin_value,
                ..BinRequest::new(Opcode::Set)
            }),
        ),
        (
            "bin get",
            bin_pipeline(|key| BinRequest {
                key,
                ..BinRequest::new(Opcode::Get)
            }),
        ),
        (
            "bin getkq",
            bin_pipeline(|key| BinRequest {
                key,
                ..BinRequest::new(Opcode::GetKQ)
            }),
        ),
    ];
    for (name, buf) in &bin_cases {
        let start = Instant::now();
        let mut n = 0;
        for _ in 0..rounds {
            n += for_each_binary(buf, &limits, |r| {
                black_box(r);
            });
        }
        report(&format!("parse {name}"), n, start.elapsed());
    }
    for (name, buf) in &bin_cases {
        let start = Instant::now();
        let mut n = 0;
        for _ in 0..rounds {
            n += for_each_binary(buf, &limits, |r| {
                out.clear();
                assert_eq!(execute_binary(r, &store, &ctx, &mut out), Flow::Continue);
                black_box(&out);
            });
        }
        report(&format!("parse+execute {name}"), n, start.elapsed());
    }

    // `-Y`: an unauthenticated connection's login, and a refused request.
    let file = duality_kv::auth::AuthFile::parse(b"alice:secret\nbob:pw\n").expect("users");
    for (name, input) in [
        ("auth login", &b"set x 0 0 12\r\nalice secret\r\n"[..]),
        ("auth refused get", &b"get key:1\r\n"[..]),
    ] {
        let start = Instant::now();
        let n = rounds * KEYS;
        for _ in 0..n {
            if let duality_kv::auth::Step::Answer {
                answer: duality_kv::auth::Answer::Token { user, password },
                ..
            } = duality_kv::auth::step(black_box(input))
            {
                black_box(file.check(user, password));
            }
        }
        report(&format!("parse {name}"), n, start.elapsed());
    }

    // `-S`: a binary SASL PLAIN auth, parsed and checked.
    let users = duality_kv::auth::AuthFile::parse_pwdb(b"alice:secret\nbob:pw\n").0;
    let mut auth = vec![0x80, 0x21, 0, 5, 0, 0, 0, 0, 0, 0, 0, 18];
    auth.extend_from_slice(&[0; 12]);
    auth.extend_from_slice(b"PLAIN\0alice\0secret");
    let start = Instant::now();
    let n = rounds * KEYS;
    for _ in 0..n {
        if let duality_kv::sasl::Frame::Request { op, .. } =
            duality_kv::sasl::parse(black_box(&auth), &limits)
        {
            let mut state = duality_kv::sasl::State::default();
            black_box(duality_kv::sasl::answer(&mut state, op, &users));
        }
    }
    report("parse sasl plain auth", n, start.elapsed());
}
