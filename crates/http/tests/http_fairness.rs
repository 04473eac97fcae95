//! Fairness: clients pipelining requests as fast as they can write cannot
//! keep a loop from answering a newcomer (the runtime's I/O budget), under
//! every model.

mod common;

use common::TestServer;
use duality_models::flood::while_flooded;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn first_answer(a: SocketAddr) -> Duration {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"hello, world\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"));
    t0.elapsed()
}

#[test]
fn http_a_flooding_client_cannot_delay_a_newcomer() {
    for model in [
        "sped",
        "amped:1",
        "seda:1:1",
        "seda-s:1",
        "symped:2",
        "steal:2",
        "thread-per-conn",
    ] {
        let srv = TestServer::with_model("fair", model, |_| {});
        let a = srv.addr;
        let batch = "GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n".repeat(256);
        let mut waits: Vec<Duration> = while_flooded(a, 4, batch.as_bytes(), || {
            (0..3).map(|_| first_answer(a)).collect()
        });
        waits.sort();
        // Before the I/O budget: 0.4-4.5 s. Generous for a debug build on 2 cores.
        assert!(
            waits[1] < Duration::from_millis(500),
            "{model}: a newcomer waited {waits:?} behind 4 flooding clients"
        );
    }
}
