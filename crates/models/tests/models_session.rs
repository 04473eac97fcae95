//! The session driver under every model: fairness against a flooding client,
//! one hand-off per read, and idle connections that hold no buffers.

use duality_models::echo::{self, Detector, FRAME};
use duality_models::flood::while_flooded;
use duality_models::{Model, ServerBuilder, ThreadRole};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

const MODELS: [&str; 9] = [
    "sped",
    "amped:1",
    "seda:2:1",
    "seda-s:1",
    "amped:1/adaptive",
    "seda:2:1/adaptive",
    "symped:2",
    "steal:2",
    "thread-per-conn",
];

/// A builder for `MODEL` or `MODEL/adaptive` (the adaptive hand-off).
fn builder(model: &str) -> ServerBuilder {
    let (m, h) = match model.split_once('/') {
        Some((m, h)) => (m, h.parse().unwrap()),
        None => (model, duality_models::Handoff::Always),
    };
    ServerBuilder::new().model(m.parse().unwrap()).handoff(h)
}

fn addr() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Time from connecting to the first answer.
fn first_answer(a: SocketAddr) -> Duration {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&echo::request(7, 42)).unwrap();
    let mut r = [0u8; FRAME];
    s.read_exact(&mut r).unwrap();
    assert_eq!(echo::response(&r), (7, echo::answer(42)));
    t0.elapsed()
}

#[test]
fn a_flooding_client_cannot_delay_another_clients_request() {
    for model in MODELS {
        let d = Detector::new(20);
        let server = builder(model)
            .long_poll_threshold(None)
            .tcp(addr())
            .serve(move |c, p| echo::serve(c, p, d.clone()))
            .unwrap();
        let a = server.tcp_addrs()[0];
        let batch: Vec<u8> = (0..1024u64).flat_map(|i| echo::request(i, i)).collect();
        let mut waits: Vec<Duration> =
            while_flooded(a, 4, &batch, || (0..3).map(|_| first_answer(a)).collect());
        drop(server);
        waits.sort();
        // Before the I/O budget a flooded loop answered a newcomer after
        // 0.4-4.5 s; the benchmark (`duality bench fairness`) holds the real
        // figure. Generous: debug build, noisy 2-core machine.
        assert!(
            waits[1] < Duration::from_millis(500),
            "{model}: a newcomer waited {waits:?} behind 4 flooding clients"
        );
    }
}

#[test]
fn a_pipelined_read_makes_one_hand_off_not_one_per_request() {
    const N: u64 = 100;
    for model in ["amped:1", "seda:1:1", "seda-s:1"] {
        let d = Detector::new(1);
        let server = ServerBuilder::new()
            .model(model.parse().unwrap())
            .tcp(addr())
            .serve(move |c, p| echo::serve(c, p, d.clone()))
            .unwrap();
        let mut s = TcpStream::connect(server.tcp_addrs()[0]).unwrap();
        let mut reads = 0;
        for round in 0..5 {
            let batch: Vec<u8> = (0..N).flat_map(|i| echo::request(i, i + round)).collect();
            s.write_all(&batch).unwrap();
            let mut r = vec![0u8; FRAME * N as usize];
            s.read_exact(&mut r).unwrap();
            for (i, f) in r.chunks_exact(FRAME).enumerate() {
                assert_eq!(
                    echo::response(f),
                    (i as u64, echo::answer(i as u64 + round))
                );
            }
            reads += 1;
        }
        let jobs: u64 = server
            .stats()
            .threads
            .iter()
            .filter(|t| t.role == ThreadRole::Payload)
            .map(|t| t.jobs)
            .sum();
        // 500 requests in 5 writes of 1.6 KB: each usually arrives in one
        // read (a split read makes one more batch), never one job each.
        assert!(
            jobs >= reads && jobs <= 3 * reads,
            "{model}: {jobs} hand-offs for {reads} pipelined writes of {N} requests"
        );
    }
}

/// Lock coalescing, counted: a pipelined read of one color takes its color
/// lock once per batch, not once per request; requests alternating between
/// two colors take one per request; models that keep colors apart without
/// locks take none (one thread runs all colored work: `sped`, and the
/// hand-off models with one payload thread; `amped`'s affinity).
#[test]
fn a_pipelined_read_of_one_color_takes_its_lock_once() {
    const N: u64 = 100;
    for (model, locks) in [
        ("seda:1:2", true),
        ("seda-s:2", true),
        ("symped:2", true),
        ("sped", false),
        ("amped:1", false),
        ("seda:1:1", false),
        ("seda-s:1", false),
    ] {
        let d = Detector::new(1);
        let server = builder(model)
            .tcp(addr())
            .serve(move |c, p| echo::serve(c, p, d.clone()))
            .unwrap();
        let mut s = TcpStream::connect(server.tcp_addrs()[0]).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut exchange = |color: &dyn Fn(u64) -> u64| {
            let batch: Vec<u8> = (0..N).flat_map(|i| echo::request(color(i), i)).collect();
            s.write_all(&batch).unwrap();
            let mut r = vec![0u8; FRAME * N as usize];
            s.read_exact(&mut r).unwrap();
            for (i, f) in r.chunks_exact(FRAME).enumerate() {
                let i = i as u64;
                assert_eq!(echo::response(f), (color(i), echo::answer(i)));
            }
        };
        let writes = 5;
        for _ in 0..writes {
            exchange(&|_| 7);
        }
        let one_color = server.stats().color_locks;
        exchange(&|i| 1 + i % 2);
        let alternating = server.stats().color_locks - one_color;
        if locks {
            // Each write of 1.6 KB usually arrives in one read (a split
            // read makes one more batch).
            assert!(
                (writes..=3 * writes).contains(&one_color),
                "{model}: {one_color} color locks for {writes} writes of {N} requests of one color"
            );
            assert!(
                alternating >= N,
                "{model}: {alternating} color locks for {N} requests alternating two colors"
            );
        } else {
            assert_eq!((one_color, alternating), (0, 0), "{model}");
        }
    }
}

#[test]
fn a_burst_queued_behind_slow_jobs_reads_on_and_keeps_order() {
    // More connections than a loop's buffer pool keeps, each with a request
    // and half of the next queued behind slow jobs: past that many hand-offs
    // out, a hand-off carries its bytes in a buffer of their size, and the
    // half request reads on from there.
    const CONNS: u64 = 200;
    for model in ["amped:1", "seda:2:1", "seda-s:1"] {
        let d = Detector::new(300_000);
        let d2 = d.clone();
        let server = builder(model)
            .long_poll_threshold(None)
            .tcp(addr())
            .serve(move |c, p| echo::serve(c, p, d2.clone()))
            .unwrap();
        let a = server.tcp_addrs()[0];
        let mut conns: Vec<TcpStream> = (0..CONNS)
            .map(|i| {
                let mut s = TcpStream::connect(a).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut two = echo::request(i, i).to_vec();
                two.extend_from_slice(&echo::request(i, i + CONNS)[..FRAME / 2]);
                s.write_all(&two).unwrap();
                s
            })
            .collect();
        for (i, s) in conns.iter_mut().enumerate() {
            let i = i as u64;
            let mut r = [0u8; FRAME];
            s.read_exact(&mut r).unwrap();
            assert_eq!(echo::response(&r), (i, echo::answer(i)), "{model}");
            s.write_all(&echo::request(i, i + CONNS)[FRAME / 2..])
                .unwrap();
        }
        for (i, s) in conns.iter_mut().enumerate() {
            let i = i as u64;
            let mut r = [0u8; FRAME];
            s.read_exact(&mut r).unwrap();
            assert_eq!(echo::response(&r), (i, echo::answer(i + CONNS)), "{model}");
        }
        assert_eq!(d.violations.load(Relaxed), 0, "{model}: colors");
        assert_eq!(d.jobs.load(Relaxed), 2 * CONNS, "{model}");
    }
}

/// 4 clients, each `rounds` writes of `n` requests whose colors cycle
/// through `colors`; every answer checked, in order.
fn mixed_colors(a: SocketAddr, colors: u64, rounds: u64, n: u64) {
    let clients: Vec<_> = (0..4)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(a).unwrap();
                for round in 0..rounds {
                    let batch: Vec<u8> = (0..n)
                        .flat_map(|i| echo::request((i + c) % colors, i * round))
                        .collect();
                    s.write_all(&batch).unwrap();
                    let mut r = vec![0u8; FRAME * n as usize];
                    s.read_exact(&mut r).unwrap();
                    for (i, f) in r.chunks_exact(FRAME).enumerate() {
                        let i = i as u64;
                        assert_eq!(
                            echo::response(f),
                            ((i + c) % colors, echo::answer(i * round))
                        );
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

#[test]
fn amped_batches_keep_each_color_on_its_payload_thread() {
    // Requests of 4 colors interleaved in one read: each run of one color
    // goes to its own thread, answers stay in order, colors stay exclusive.
    let d = Detector::new(200);
    let d2 = d.clone();
    let server = ServerBuilder::new()
        .model(Model::Amped { payload: 2 })
        .tcp(addr())
        .serve(move |c, p| echo::serve(c, p, d2.clone()))
        .unwrap();
    mixed_colors(server.tcp_addrs()[0], 4, 20, 64);
    assert_eq!(d.violations.load(Relaxed), 0);
    let per_thread: Vec<u64> = server
        .stats()
        .threads
        .iter()
        .filter(|t| t.role == ThreadRole::Payload)
        .map(|t| t.jobs)
        .collect();
    assert!(
        per_thread.iter().all(|&j| j > 0),
        "both payload threads ran batches: {per_thread:?}"
    );
}

#[test]
fn idle_connections_hold_no_buffers() {
    let d = Detector::new(1);
    let mut server = ServerBuilder::new()
        .model(Model::Sped)
        .tcp(addr())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap();
    let a = server.tcp_addrs()[0];
    // Ten connections, each answered once, then all left open and idle.
    let conns: Vec<TcpStream> = (0..10u64)
        .map(|i| {
            let mut s = TcpStream::connect(a).unwrap();
            s.write_all(&echo::request(i, i)).unwrap();
            let mut r = [0u8; FRAME];
            s.read_exact(&mut r).unwrap();
            s
        })
        .collect();
    // Look at the buffer pool of the one loop (sped: background tasks run there).
    let (tx, rx) = std::sync::mpsc::channel();
    server.spawn_background(move |_| async move {
        let _ = tx.send(duality_models::session::pooled_buffers());
    });
    let sets = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    // Had each idle connection kept its buffers, the pool would be empty;
    // served one after another, they all used the same set.
    assert!(sets >= 1, "pool holds {sets} buffer sets");
    drop(conns);
}

#[test]
fn adaptive_batches_keep_colors_exclusive_in_both_places() {
    // Mixed colors pipelined from several clients under the adaptive
    // hand-off: most batches run on the network loop, some on the payload
    // threads (while learning, and the sampled hand-offs). Answers stay in
    // order and colors exclusive. (That amped's payload threads take the
    // color locks too is asserted by the payload module's unit test:
    // overlaps here are too rare to rely on.)
    for model in ["amped:2/adaptive", "seda:1:2/adaptive", "seda-s:1/adaptive"] {
        let d = Detector::new(50);
        let d2 = d.clone();
        let server = builder(model)
            .tcp(addr())
            .serve(move |c, p| echo::serve(c, p, d2.clone()))
            .unwrap();
        mixed_colors(server.tcp_addrs()[0], 3, 300, 8);
        assert_eq!(d.violations.load(Relaxed), 0, "{model}: colors");
        assert_eq!(d.jobs.load(Relaxed), 4 * 300 * 8, "{model}");
    }
}
