//! Fairness: clients pipelining requests as fast as they can write cannot
//! keep the cache from answering a newcomer, under every model.

mod common;

use common::{InProc, MODELS};
use duality_models::flood::while_flooded;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn first_answer(a: SocketAddr) -> Duration {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"version\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"VERSION "), "{got:?}");
    t0.elapsed()
}

#[test]
fn kv_a_flooding_client_cannot_delay_a_newcomer() {
    for model in MODELS {
        let srv = InProc::tcp(model);
        let common::Addr::Tcp(a) = srv.addr else {
            unreachable!()
        };
        let batch = "get fairness:key\r\n".repeat(1024);
        let mut waits: Vec<Duration> = while_flooded(a, 4, batch.as_bytes(), || {
            (0..3).map(|_| first_answer(a)).collect()
        });
        waits.sort();
        // Before the I/O budget: 0.4-4.5 s under sped and symped:2.
        // Generous for a debug build on 2 cores.
        assert!(
            waits[1] < Duration::from_millis(500),
            "{model}: a newcomer waited {waits:?} behind 4 flooding clients"
        );
    }
}
