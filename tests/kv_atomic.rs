//! Read-modify-write commands stay whole under concurrent clients, on every
//! threading model: however the model spreads connections over loops and
//! payload threads, an `incr`, a `cas`, an `append` and a meta `ma` on one
//! key each take effect as one step, so none is lost to another client's.

mod common;

use common::*;
use std::thread;

const CLIENTS: usize = 4;
/// `incr`s per client, sent `PIPELINE` to a write.
const INCRS: usize = 300;
const PIPELINE: usize = 10;
/// Updates per client by `gets` + `cas` (retried on `EXISTS`), `append`s
/// and `ma`s.
const UPDATES: usize = 100;

/// One client's share: counters bumped by `incr`, by a `cas` loop and by
/// `ma`, and a log each client appends its own tokens to.
fn client(mut c: Client, id: usize) -> usize {
    let mut retries = 0;
    for _ in 0..INCRS / PIPELINE {
        let batch = "incr ctr 1\r\n".repeat(PIPELINE);
        let r = c.call(batch.as_bytes());
        let answers = String::from_utf8_lossy(&r).lines().count();
        assert_eq!(answers, PIPELINE, "incr batch: {}", show(&r));
        assert!(
            String::from_utf8_lossy(&r)
                .lines()
                .all(|l| l.parse::<u64>().is_ok()),
            "incr batch: {}",
            show(&r)
        );
    }
    for i in 0..UPDATES {
        loop {
            let r = c.call(b"gets casctr\r\n");
            let text = String::from_utf8_lossy(&r).into_owned();
            let mut lines = text.lines();
            let head: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
            assert_eq!(head.len(), 5, "gets casctr: {text:?}");
            let unique: u64 = head[4].parse().expect("cas unique");
            let n: u64 = lines.next().unwrap_or("").parse().expect("a number");
            let next = (n + 1).to_string();
            let r =
                c.call(format!("cas casctr 0 0 {} {unique}\r\n{next}\r\n", next.len()).as_bytes());
            match &r[..] {
                b"STORED\r\n" => break,
                b"EXISTS\r\n" => retries += 1,
                other => panic!("cas: {}", show(other)),
            }
        }
        c.expect(
            format!(
                "append log 0 0 {}\r\n{}\r\n",
                token(id, i).len(),
                token(id, i)
            )
            .as_bytes(),
            b"STORED\r\n",
        );
    }
    let r = c.call("ma mctr q\r\n".repeat(UPDATES).as_bytes());
    assert_eq!(r, b"", "quiet ma: {}", show(&r));
    retries
}

fn token(id: usize, i: usize) -> String {
    format!("<{id}.{i}>")
}

/// Every model (and the hand-off models deciding per batch) keeps each
/// read-modify-write whole: the counters reach exactly what the clients
/// added, and the log holds every client's tokens once, each client's in
/// the order it sent them.
#[test]
fn concurrent_read_modify_writes_lose_nothing() {
    for model in [
        "sped",
        "amped:2",
        "amped:2/adaptive",
        "seda:1:1",
        "seda-s:1",
        "symped:2",
        "steal:2",
        "thread-per-conn",
    ] {
        let (m, handoff) = model.split_once('/').unwrap_or((model, "always"));
        let kv = KvProc::start(&["--model", m, "--handoff", handoff]);
        let mut setup = kv.connect();
        for key in ["ctr", "casctr", "mctr"] {
            setup.expect(
                format!("set {key} 0 0 1\r\n0\r\n").as_bytes(),
                b"STORED\r\n",
            );
        }
        setup.expect(b"set log 0 0 0\r\n\r\n", b"STORED\r\n");
        let clients: Vec<Client> = (0..CLIENTS).map(|_| kv.connect()).collect();
        let retries: usize = thread::scope(|s| {
            let handles: Vec<_> = clients
                .into_iter()
                .enumerate()
                .map(|(id, c)| s.spawn(move || client(c, id)))
                .collect();
            handles.into_iter().map(|h| h.join().expect("client")).sum()
        });
        let total = |key: &str, c: &mut Client| -> u64 {
            let r = c.call(format!("get {key}\r\n").as_bytes());
            let text = String::from_utf8_lossy(&r).into_owned();
            text.lines()
                .nth(1)
                .and_then(|v| v.trim_end().parse().ok())
                .unwrap_or_else(|| panic!("{model}: get {key}: {text:?}"))
        };
        assert_eq!(
            total("ctr", &mut setup),
            (CLIENTS * INCRS) as u64,
            "{model}: incr"
        );
        assert_eq!(
            total("casctr", &mut setup),
            (CLIENTS * UPDATES) as u64,
            "{model}: cas ({retries} retries)"
        );
        assert_eq!(
            total("mctr", &mut setup),
            (CLIENTS * UPDATES) as u64,
            "{model}: ma"
        );
        let r = setup.call(b"get log\r\n");
        let log = String::from_utf8_lossy(&r).into_owned();
        let body = log.lines().nth(1).unwrap_or("");
        for id in 0..CLIENTS {
            let mut at = 0;
            for i in 0..UPDATES {
                let t = token(id, i);
                let found = body[at..].find(&t).map(|k| at + k);
                let Some(k) = found else {
                    panic!("{model}: {t} missing or out of order in the log");
                };
                assert_eq!(body.matches(&t).count(), 1, "{model}: {t} twice");
                at = k + t.len();
            }
        }
        assert_eq!(
            body.len(),
            (0..CLIENTS)
                .flat_map(|id| (0..UPDATES).map(move |i| token(id, i).len()))
                .sum::<usize>(),
            "{model}: the log holds other bytes"
        );
    }
}
