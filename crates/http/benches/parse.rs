//! Request-head parser micro-benchmark without an external harness:
//! `cargo bench -p duality-http --bench parse`. Under `cargo test --benches`
//! it runs one short round as a smoke test.
//!
//! Each case is a buffer of pipelined requests parsed one after the other,
//! as the connection handler does with what one read brought: the head with
//! [`parse_head`], then any body dropped with [`Discard`].

use duality_http::{parse_head, Discard, Limits};
use std::hint::black_box;
use std::time::Instant;

const REQUESTS: usize = 1000;

/// A pipelined buffer of `REQUESTS` requests built by `req(i)`.
fn pipeline(req: impl Fn(usize) -> String) -> Vec<u8> {
    (0..REQUESTS).flat_map(|i| req(i).into_bytes()).collect()
}

/// Parses every request of `buf`; how many there were.
fn parse_all(buf: &[u8], limits: &Limits) -> usize {
    let mut rest = buf;
    let mut n = 0;
    while !rest.is_empty() {
        let (head, used) = parse_head(rest, limits)
            .expect("benchmark input parses")
            .expect("benchmark input is whole");
        rest = &rest[used..];
        if let Some(mut body) = Discard::new(&head) {
            let skipped = body.skip(rest, limits).expect("benchmark body parses");
            assert!(skipped.done, "benchmark body is whole");
            rest = &rest[skipped.used..];
        }
        black_box(&head);
        n += 1;
    }
    n
}

fn main() {
    let rounds = if std::env::args().any(|a| a == "--bench") {
        300
    } else {
        1
    };
    let limits = Limits::default();
    let browser = "Host: example.com\r\n\
        User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
        Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
        Accept-Language: en-US,en;q=0.5\r\n\
        Accept-Encoding: gzip, deflate, br, zstd\r\n\
        Connection: keep-alive\r\n\
        Referer: https://example.com/index.html\r\n\
        Upgrade-Insecure-Requests: 1\r\n\
        Sec-Fetch-Dest: document\r\n\
        Sec-Fetch-Mode: navigate\r\n\
        Sec-Fetch-Site: same-origin\r\n\
        Priority: u=0, i\r\n";
    let cases = [
        (
            "GET, Host only",
            pipeline(|i| format!("GET /f{i}.html HTTP/1.1\r\nHost: h\r\n\r\n")),
        ),
        (
            "GET, a browser's 12 fields",
            pipeline(|i| format!("GET /static/app{i}.js HTTP/1.1\r\n{browser}\r\n")),
        ),
        (
            "conditional range GET",
            pipeline(|i| {
                format!(
                    "GET /data/{i}.bin HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"5f3a-{i:x}\"\r\n\
                     If-Modified-Since: Sat, 28 Nov 2026 10:00:00 GMT\r\nRange: bytes=0-1023\r\n\r\n"
                )
            }),
        ),
        (
            "percent-encoded path",
            pipeline(|i| {
                format!("GET /a%20dir/./b//caf%C3%A9-{i}.txt?q=1 HTTP/1.1\r\nHost: h\r\n\r\n")
            }),
        ),
        (
            "POST, 64 B body",
            pipeline(|i| {
                format!(
                    "POST /form{i} HTTP/1.1\r\nHost: h\r\nContent-Length: 64\r\n\r\n{}",
                    "b".repeat(64)
                )
            }),
        ),
        (
            "chunked body, 4 chunks",
            pipeline(|i| {
                format!(
                    "PUT /u{i} HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\
                     10\r\n0123456789abcdef\r\n10;x=y\r\n0123456789abcdef\r\n\
                     8\r\n01234567\r\n4\r\nabcd\r\n0\r\nT: v\r\n\r\n"
                )
            }),
        ),
    ];
    for (name, buf) in &cases {
        let start = Instant::now();
        let mut n = 0;
        for _ in 0..rounds {
            n += parse_all(buf, &limits);
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "parse {name:<28} {ns:>8.1} ns/request  ({:.2} M requests/s, {} B each)",
            1e3 / ns,
            buf.len() / REQUESTS
        );
    }
    // The PROXY header a connection under `--proxy-protocol on` begins with.
    let mut v2 = duality_http::proxy_protocol::V2_SIGNATURE.to_vec();
    v2.extend_from_slice(&[
        0x21, 0x11, 0, 12, 192, 0, 2, 1, 198, 51, 100, 2, 0xc8, 0x22, 1, 0xbb,
    ]);
    let headers = [
        (
            "PROXY v1, TCP4",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\n".to_vec(),
        ),
        (
            "PROXY v1, TCP6",
            b"PROXY TCP6 2001:db8::1 2001:db8::2 40000 8443\r\n".to_vec(),
        ),
        ("PROXY v2, IPv4", v2),
    ];
    for (name, header) in &headers {
        let start = Instant::now();
        for _ in 0..rounds * REQUESTS {
            let (h, n) = duality_http::proxy_protocol::parse(black_box(header))
                .expect("benchmark header parses")
                .expect("benchmark header is whole");
            black_box((h, n));
        }
        let ns = start.elapsed().as_nanos() as f64 / (rounds * REQUESTS) as f64;
        println!(
            "parse {name:<28} {ns:>8.1} ns/header   ({:.2} M headers/s, {} B)",
            1e3 / ns,
            header.len()
        );
    }
}
