//! A color lock another loop holds never blocks a loop: the connection whose
//! request waits for it waits as a task, and its loop serves its other
//! connections meanwhile (under `symped:2`, where a client's two
//! connections can sit on different loops), and what its batch answered
//! before that request goes out before the wait. A payload thread waits for
//! a color likewise, running other batches meanwhile.

use duality_models::session::Output;
use duality_models::{Driver, DriverConfig, Flow, Parsed, Protocol, Server, ServerBuilder};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines `COLOR MILLIS NAME`: a job of that color that takes MILLIS ms of
/// its thread, answered `NAME early` if the job named `a` was still running
/// when it ran, else `NAME late`.
#[derive(Default)]
struct Jobs {
    a_started: AtomicBool,
    a_done: AtomicBool,
    b_parsed: AtomicBool,
    /// Names of the jobs parsed so far.
    parsed: Mutex<HashSet<Vec<u8>>>,
}

struct Job<'a> {
    color: u64,
    millis: u64,
    name: &'a [u8],
}

impl Protocol for Jobs {
    type Session = ();
    type Request<'a> = Job<'a>;

    fn max_request(&self) -> usize {
        64
    }

    fn parse<'a>(&self, _: &mut (), input: &'a [u8]) -> Parsed<Job<'a>> {
        let Some(end) = input.iter().position(|&b| b == b'\n') else {
            return Parsed::Incomplete(0);
        };
        let line = std::str::from_utf8(&input[..end]).unwrap();
        let mut words = line.split(' ');
        let color = words.next().unwrap().parse().unwrap();
        let millis = words.next().unwrap().parse().unwrap();
        let name = words.next().unwrap().as_bytes();
        if name == b"b" {
            self.b_parsed.store(true, SeqCst);
        }
        self.parsed.lock().unwrap().insert(name.to_vec());
        let at = line.len() - name.len();
        Parsed::Request(
            Job {
                color,
                millis,
                name: &input[at..end],
            },
            end + 1,
        )
    }

    fn color(&self, job: &Job<'_>) -> u64 {
        job.color
    }

    fn execute(&self, _: &mut (), job: Job<'_>, out: &mut Output) -> Flow {
        let a = job.name == b"a";
        if a {
            self.a_started.store(true, SeqCst);
        }
        let early = !self.a_done.load(SeqCst);
        std::thread::sleep(Duration::from_millis(job.millis));
        if a {
            self.a_done.store(true, SeqCst);
        }
        out.extend_from_slice(job.name);
        out.extend_from_slice(if early { b" early\n" } else { b" late\n" });
        Flow::Continue
    }
}

fn eventually(what: &str, f: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < until, "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn line(s: &TcpStream) -> String {
    let mut l = String::new();
    BufReader::new(s).read_line(&mut l).unwrap();
    l
}

/// A `Jobs` server under `model` and four connections to it, made in turn.
fn start(model: &str) -> (Server, Arc<Driver<Jobs>>, [TcpStream; 4]) {
    let driver = Driver::new(Jobs::default(), DriverConfig::default());
    let d = driver.clone();
    let server = ServerBuilder::new()
        .model(model.parse().unwrap())
        .tcp("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .serve(move |c, p| duality_models::drive(c, p, d.clone()))
        .unwrap();
    let addr = server.tcp_addrs()[0];
    let conns = std::array::from_fn(|_| {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    });
    (server, driver, conns)
}

#[test]
fn a_color_held_on_another_loop_does_not_block_this_one() {
    let (server, driver, [mut a, mut b, _filler, mut c]) = start("symped:2");
    // Dealt to the two loops in turn: a and a filler on one, b and c on
    // the other.
    let jobs = driver.protocol();
    // a takes color 7 for 3 s on its loop.
    a.write_all(b"7 3000 a\n").unwrap();
    eventually("a runs", || jobs.a_started.load(SeqCst));
    // b wants color 7 on the other loop, behind x of another color: b
    // must wait...
    b.write_all(b"9 0 x\n7 0 b\n").unwrap();
    eventually("b is read", || jobs.b_parsed.load(SeqCst));
    // ...but not its loop: c, another color there, runs while a does
    // (a loop blocked on the lock would run it only after a).
    c.write_all(b"8 0 c\n").unwrap();
    assert_eq!(line(&c), "c early\n", "c waited for another loop's color");
    // ...and x's answer went out before b's wait, not after a's job.
    let mut b_lines = BufReader::new(&b);
    let mut x = String::new();
    b_lines.read_line(&mut x).unwrap();
    assert_eq!(x, "x early\n");
    assert!(!jobs.a_done.load(SeqCst), "x's answer waited for b's color");
    let mut late = String::new();
    b_lines.read_line(&mut late).unwrap();
    assert_eq!(late, "b late\n", "b ran while a held its color");
    assert_eq!(line(&a), "a early\n");
    server.shutdown(Duration::from_secs(5));
}

/// `seda:1:2` hands batches to its two payload threads in turn (to the less
/// loaded of the two; this protocol peeks no color to follow). b waits on
/// one for the color a holds on the other: as a task, so d, the next batch
/// dealt to b's thread, runs while a does (a parked thread would run it
/// only after a let go).
#[test]
fn a_payload_thread_waiting_for_a_color_runs_other_batches() {
    let (server, driver, [mut a, mut b, mut c, mut dd]) = start("seda:1:2");
    let jobs = driver.protocol();
    let parsed = |name: &[u8]| jobs.parsed.lock().unwrap().contains(name);
    // Batches in turn: a on the first thread (color 7 for 3 s), b on the
    // second (waits for 7), c on the first (behind a), d on the second.
    a.write_all(b"7 3000 a\n").unwrap();
    eventually("a runs", || jobs.a_started.load(SeqCst));
    b.write_all(b"7 0 b\n").unwrap();
    eventually("b is read", || parsed(b"b"));
    c.write_all(b"8 0 c\n").unwrap();
    // c's batch is parsed only once a is done: give it time to be handed
    // off before d.
    std::thread::sleep(Duration::from_millis(100));
    dd.write_all(b"9 0 d\n").unwrap();
    assert_eq!(
        line(&dd),
        "d early\n",
        "d waited behind b's wait for a's color"
    );
    assert_eq!(line(&b), "b late\n", "b ran while a held its color");
    assert_eq!(line(&a), "a early\n");
    assert_eq!(line(&c), "c late\n");
    server.shutdown(Duration::from_secs(5));
}
