//! `Handoff::Adaptive`: the hand-off models run batches that cost less than
//! a hand-off on their network loop and keep dear ones on the payload
//! threads (colors with batches in both places: `models_session.rs`).

use duality_models::echo::{self, Detector, FRAME};
use duality_models::{Handoff, HandoffStats, ServerBuilder, ThreadRole};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering::Relaxed;

const HANDOFF_MODELS: [&str; 3] = ["amped:2", "seda:1:2", "seda-s:1"];

/// Serves `work`-iteration echo jobs under `model` and `handoff`; `clients`
/// threads each send `requests` requests one at a time (colors 0..8 in
/// turn). Returns payload-thread jobs, requests sent and the server's
/// hand-off statistics at the end.
fn serve(
    model: &str,
    handoff: Handoff,
    work: u64,
    clients: u64,
    requests: u64,
) -> (u64, u64, HandoffStats) {
    let d = Detector::new(work);
    let d2 = d.clone();
    let server = ServerBuilder::new()
        .model(model.parse().unwrap())
        .handoff(handoff)
        .long_poll_threshold(None)
        .tcp("127.0.0.1:0".parse().unwrap())
        .serve(move |c, p| echo::serve(c, p, d2.clone()))
        .unwrap();
    let a = server.tcp_addrs()[0];
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(a).unwrap();
                s.set_nodelay(true).unwrap();
                for i in 0..requests {
                    let color = (c + i) % 8;
                    s.write_all(&echo::request(color, i)).unwrap();
                    let mut r = [0u8; FRAME];
                    s.read_exact(&mut r).unwrap();
                    assert_eq!(echo::response(&r), (color, echo::answer(i)));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(d.violations.load(Relaxed), 0, "{model} {handoff}: colors");
    assert_eq!(d.jobs.load(Relaxed), clients * requests);
    let stats = server.stats();
    let jobs = stats
        .threads
        .iter()
        .filter(|t| t.role == ThreadRole::Payload)
        .map(|t| t.jobs)
        .sum();
    let placed = stats.handoff.expect("a hand-off model reports its policy");
    assert_eq!(placed.policy, handoff);
    (jobs, clients * requests, placed)
}

#[test]
fn cheap_batches_run_on_the_network_loop_under_adaptive() {
    for model in HANDOFF_MODELS {
        let (always, sent, placed) = serve(model, Handoff::Always, 1, 4, 300);
        // One request in flight per connection: a read is one batch, and
        // every batch goes to a payload thread.
        assert_eq!(always, sent, "{model} always: every batch handed off");
        assert_eq!((placed.batch_cost, placed.next_inline), (None, false));
        let (adaptive, sent, placed) = serve(model, Handoff::Adaptive, 1, 4, 300);
        // Learned after the first hand-offs; then a loop hands one batch
        // off per 10 ms and 256 batches to re-measure. Generous: loops learn apart, the machine is noisy.
        assert!(
            adaptive * 4 < sent,
            "{model} adaptive: {adaptive} of {sent} batches handed off"
        );
        // What `stats` shows: both costs learned, the next batch stays.
        assert!(
            placed.trip.is_some() && placed.next_inline,
            "{model}: {placed:?}"
        );
    }
}

#[test]
fn dear_batches_stay_on_the_payload_threads_under_adaptive() {
    // Past the loop's budget (1 ms) in any build: never run on the loop.
    let work = 3_000_000;
    for model in HANDOFF_MODELS {
        let (jobs, sent, placed) = serve(model, Handoff::Adaptive, work, 1, 12);
        assert_eq!(jobs, sent, "{model}: a dear batch ran on the network loop");
        let cost = placed.batch_cost.expect("learned from the hand-offs");
        assert!(
            cost.as_millis() >= 1 && !placed.next_inline,
            "{model}: {placed:?}"
        );
    }
}
