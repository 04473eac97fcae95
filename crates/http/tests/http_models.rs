//! The same handler under every threading model: pipelined requests, a
//! sendfile body, and the head deadline (which under `thread-per-conn` is
//! enforced by the socket's own timeouts, not by a timer).

mod common;

use common::{fnv1a, read_file, TestServer};
use duality_models::ServerBuilder;
use std::time::Duration;

fn exercise(model: &str) {
    let s = TestServer::with_model(model, model, |c| {
        c.head_timeout = Duration::from_millis(400)
    });
    exercise_on(&s, model);
}

/// The same under injected faults (`duality_rt::faults`: short reads and
/// writes, spurious wake-ups, `EINTR`): nothing lost, reordered or hung.
fn exercise_under_faults(model: &str) {
    let s = TestServer::with_builder(
        model,
        ServerBuilder::new()
            .model(model.parse().unwrap())
            .faults(duality_rt::faults::Faults::ALL),
        |c| c.head_timeout = Duration::from_millis(400),
    );
    exercise_on(&s, model);
}

fn exercise_on(s: &TestServer, model: &str) {
    let big = fnv1a(&read_file(&s.www().join("big.bin")));
    let addr = s.addr;
    let clients: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = common::Client::connect(addr);
                c.send(
                    "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /nope HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /sub/ HTTP/1.1\r\nHost: t\r\n\r\n",
                );
                assert_eq!(c.response(false).text(), "hello, world\n");
                assert_eq!(fnv1a(&c.response(false).body), big);
                assert_eq!(c.response(false).status, 404);
                assert_eq!(c.response(false).text(), "<h1>sub</h1>\n");
            })
        })
        .collect();
    for t in clients {
        t.join().unwrap();
    }
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\n");
    assert_eq!(c.response(false).status, 408, "{model}");
    assert!(c.closed_within(Duration::from_secs(3)), "{model}");
}

#[test]
fn sped() {
    exercise("sped");
}

#[test]
fn symped() {
    exercise("symped:2");
}

#[test]
fn amped() {
    exercise("amped:1");
}

#[test]
fn seda() {
    exercise("seda:1:1");
}

#[test]
fn steal() {
    exercise("steal:2");
}

#[test]
fn thread_per_conn() {
    exercise("thread-per-conn");
}

#[test]
fn faults_every_evented_model() {
    for model in ["sped", "symped:2", "amped:1", "seda:1:1", "steal:2"] {
        exercise_under_faults(model);
    }
}
