//! How connections are spread over the network loops: round robin,
//! least-loaded and one `SO_REUSEPORT` listener per loop.

use duality_models::echo::{self, Detector, FRAME};
use duality_models::{Balance, Model, Server, ServerBuilder, ThreadRole};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn start(balance: Balance) -> Server {
    let d = Detector::new(10);
    ServerBuilder::new()
        .model(Model::Symped { n: 2 })
        .balance(balance)
        .tcp("127.0.0.1:0".parse().unwrap())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap()
}

/// Open connections per network loop, as `stats` shows them.
fn per_loop(s: &Server) -> Vec<usize> {
    s.stats()
        .threads
        .iter()
        .filter(|t| t.role == ThreadRole::Network)
        .map(|t| t.connections)
        .collect()
}

/// Waits until the loops hold `want` connections, or returns what they hold.
fn settle(s: &Server, want: &[usize]) -> Vec<usize> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let got = per_loop(s);
        if got == want || Instant::now() > until {
            return got;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn connect(s: &Server) -> TcpStream {
    let c = TcpStream::connect(s.tcp_addrs()[0]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// One echo round trip: the connection is being served.
fn served(c: &mut TcpStream, color: u64) {
    c.write_all(&echo::request(color, 7)).unwrap();
    let mut r = [0u8; FRAME];
    c.read_exact(&mut r).unwrap();
    assert_eq!(echo::response(&r), (color, echo::answer(7)));
}

/// Two connections, one per loop; the second closes; a third arrives. Round
/// robin deals it to the loop whose turn it is (the busy one), least-loaded
/// to the idle one.
fn third_connection(balance: Balance) -> Vec<usize> {
    let s = start(balance);
    let mut a = connect(&s);
    served(&mut a, 1);
    let mut b = connect(&s);
    served(&mut b, 2);
    assert_eq!(settle(&s, &[1, 1]), [1, 1]);
    drop(b);
    assert_eq!(settle(&s, &[1, 0]), [1, 0], "{balance}");
    let mut c = connect(&s);
    served(&mut c, 3);
    std::thread::sleep(Duration::from_millis(20));
    let got = per_loop(&s);
    served(&mut a, 4);
    got
}

#[test]
fn round_robin_deals_in_turn() {
    assert_eq!(third_connection(Balance::RoundRobin), [2, 0]);
}

#[test]
fn least_loaded_fills_the_emptier_loop() {
    assert_eq!(third_connection(Balance::LeastLoaded), [1, 1]);
}

#[test]
fn reuseport_gives_each_loop_a_listener() {
    let s = start(Balance::ReusePort);
    let listeners = s.listeners();
    assert_eq!(listeners.len(), 2, "{listeners:?}");
    assert_eq!(listeners[0].addr, listeners[1].addr);
    assert_ne!(listeners[0].fd, listeners[1].fd);
    assert_eq!(s.stats().balance, "reuseport");
    // The kernel hashes each connection's addresses: 64 connections from
    // as many ports all landing on one loop would take a 1 in 2^63 chance.
    let mut conns: Vec<TcpStream> = (0..64).map(|_| connect(&s)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        served(c, i as u64);
    }
    let got = per_loop(&s);
    assert_eq!(got.iter().sum::<usize>(), 64, "{got:?}");
    assert!(got.iter().all(|&n| n > 0), "{got:?}");
    drop(conns);
    assert_eq!(settle(&s, &[0, 0]), [0, 0]);
}

#[test]
fn one_loop_needs_no_second_listener() {
    let d = Detector::new(10);
    let s = ServerBuilder::new()
        .model(Model::Sped)
        .balance(Balance::ReusePort)
        .tcp("127.0.0.1:0".parse().unwrap())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap();
    assert_eq!(s.listeners().len(), 1);
    let mut c = connect(&s);
    served(&mut c, 9);
}
