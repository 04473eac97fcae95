//! 100,000 tasks ping-ponging over channels, on one loop and across two.
//!
//! Both tests end with `task::alive()` at zero, so they run one at a time.

mod support;

use duality_rt::sync::{mpsc, oneshot};
use duality_rt::{block_on, spawn, task, LoopConfig, LoopThread};
use std::time::{Duration, Instant};
use support::serial;

/// One ping task and one pong task bounce a counter `rounds` times over two
/// bounded channels; the ping task returns the final count.
fn pair(
    rounds: u64,
) -> (
    impl std::future::Future<Output = u64>,
    impl std::future::Future<Output = ()>,
) {
    let (to_pong, mut pong_rx) = mpsc::channel::<u64>(1);
    let (to_ping, mut ping_rx) = mpsc::channel::<u64>(1);
    let ping = async move {
        let mut ball = 0;
        for _ in 0..rounds {
            to_pong.send(ball).await.unwrap();
            ball = ping_rx.recv().await.unwrap();
        }
        ball
    };
    let pong = async move {
        while let Some(ball) = pong_rx.recv().await {
            if to_ping.send(ball + 1).await.is_err() {
                break;
            }
        }
    };
    (ping, pong)
}

#[test]
fn a_hundred_thousand_tasks_ping_pong_on_one_loop() {
    let _g = serial();
    const PAIRS: usize = 50_000;
    const ROUNDS: u64 = 5;
    let start = Instant::now();
    let total = block_on(async {
        let mut pings = Vec::with_capacity(PAIRS);
        for _ in 0..PAIRS {
            let (ping, pong) = pair(ROUNDS);
            pings.push(spawn(ping));
            drop(spawn(pong)); // detached: ends when its ping side goes
        }
        let mut total = 0;
        for p in pings {
            total += p.await.unwrap();
        }
        // Let the pong tasks see their channels close.
        duality_rt::yield_now().await;
        duality_rt::yield_now().await;
        total
    });
    assert_eq!(total, PAIRS as u64 * ROUNDS);
    assert_eq!(task::alive(), 0, "every task finished and was freed");
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn ping_pong_across_two_loops() {
    let _g = serial();
    const PAIRS: usize = 1_000;
    const ROUNDS: u64 = 20;
    let a = LoopThread::spawn(LoopConfig::default()).unwrap();
    let b = LoopThread::spawn(LoopConfig::default()).unwrap();
    let mut pings = Vec::new();
    for _ in 0..PAIRS {
        let (ping, pong) = pair(ROUNDS);
        pings.push(a.handle().spawn(ping));
        drop(b.handle().spawn(pong));
    }
    // Replies through oneshot channels, awaited from a third loop.
    let (tx, rx) = oneshot::channel();
    drop(a.handle().spawn(async move {
        let mut total = 0;
        for p in pings {
            total += p.await.unwrap();
        }
        let _ = tx.send(total);
    }));
    let total = block_on(rx).unwrap();
    assert_eq!(total, PAIRS as u64 * ROUNDS);
    let (sa, sb) = (a.handle().snapshot(), b.handle().snapshot());
    assert!(sa.handoffs > 0 && sb.handoffs > 0, "wake-ups crossed loops");
    a.join().unwrap();
    b.join().unwrap();
    assert!(support::wait_until(Duration::from_secs(2), || task::alive() == 0));
}
