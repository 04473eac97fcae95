//! Timers: deadline order, never early, `timeout`, cancellation on drop.

mod support;

use duality_rt::event_loop;
use duality_rt::time::{loop_now, sleep, sleep_until, timeout, Elapsed, Sleep};
use duality_rt::{block_on, spawn};
use futures_lite::future::poll_once;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{DropCounter, Forever};

#[test]
fn sleeps_fire_in_deadline_order_and_never_early() {
    let fired = block_on(async {
        let base = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        // Deadlines 200..=258 ms in a scrambled spawn order (far enough
        // that none has passed before its task first waits, even on a
        // loaded machine: a deadline passed fires in spawn order).
        for i in 0..30u64 {
            let deadline = base + Duration::from_millis(200 + (i * 17 % 30) * 2);
            let log = log.clone();
            handles.push(spawn(async move {
                sleep_until(deadline).await;
                let now = Instant::now();
                log.lock().unwrap().push((deadline, now));
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        let v = log.lock().unwrap().clone();
        v
    });
    assert_eq!(fired.len(), 30);
    for (deadline, woke) in &fired {
        assert!(woke >= deadline, "a timer fired early");
    }
    for pair in fired.windows(2) {
        assert!(pair[0].0 <= pair[1].0, "fired out of deadline order");
    }
}

#[test]
fn a_sleep_takes_at_least_its_duration() {
    block_on(async {
        for ms in [0u64, 1, 5, 12] {
            let start = Instant::now();
            sleep(Duration::from_millis(ms)).await;
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(ms), "{ms} ms took {took:?}");
            assert!(
                took < Duration::from_millis(ms + 500),
                "{ms} ms took {took:?}"
            );
        }
        // A deadline in the past is ready at once.
        let past = Instant::now() - Duration::from_millis(5);
        assert!(poll_once(sleep_until(past)).await.is_some());
    });
}

#[test]
fn timeout_elapses_and_drops_the_inner_future() {
    let dropped = DropCounter::new();
    let d = dropped.clone();
    block_on(async move {
        let token = d.token();
        let start = Instant::now();
        let r = timeout(Duration::from_millis(20), async move {
            let _token = token;
            Forever.await
        })
        .await;
        assert_eq!(r, Err(Elapsed));
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(d.drops(), 1, "the inner future is dropped");
        let e: std::io::Error = Elapsed.into();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    });
}

#[test]
fn timeout_passes_through_an_earlier_result() {
    block_on(async {
        let r = timeout(Duration::from_secs(5), async {
            sleep(Duration::from_millis(5)).await;
            9
        })
        .await;
        assert_eq!(r, Ok(9));
    });
}

#[test]
fn a_dropped_sleep_is_cancelled() {
    block_on(async {
        let lp = event_loop::current().unwrap();
        let fired_before = lp.snapshot().timers_fired;
        // Register 100 timers (one poll each), then drop them all.
        for _ in 0..100 {
            let mut s = sleep(Duration::from_millis(20));
            assert!(poll_once(&mut s).await.is_none());
        }
        sleep(Duration::from_millis(50)).await;
        let fired = lp.snapshot().timers_fired - fired_before;
        assert_eq!(fired, 1, "only the 50 ms sleep fired, not the dropped ones");
    });
}

/// A sleep of an hour, registered by one poll, then moved by `move_to` to
/// 15 ms after the start: it fires then.
async fn an_hour_moved_to_15_ms(move_to: fn(Pin<&mut Sleep>, Instant)) {
    let start = Instant::now();
    let mut s = Box::pin(sleep(Duration::from_secs(3600)));
    assert!(poll_once(&mut s).await.is_none());
    move_to(s.as_mut(), start + Duration::from_millis(15));
    s.await;
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(15) && took < Duration::from_secs(2));
}

#[test]
fn a_reset_sleep_fires_at_its_new_deadline() {
    block_on(an_hour_moved_to_15_ms(|mut s, at| s.reset(at)));
}

#[test]
fn an_extended_sleep_fires_at_its_new_deadline_registering_once_more() {
    block_on(async {
        let lp = event_loop::current().unwrap();
        let fired_before = lp.snapshot().timers_fired;
        let start = Instant::now();
        // (Long enough that a loaded machine does not pass the first
        // deadline before the sleep is polled again.)
        let mut s = Box::pin(sleep(Duration::from_millis(100)));
        assert!(poll_once(&mut s).await.is_none());
        // Later: the 100 ms entry stays registered and fires first; the
        // sleep then registers again for the new deadline.
        s.as_mut().extend(start + Duration::from_millis(400));
        s.await;
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(400), "woke early: {took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        let fired = lp.snapshot().timers_fired - fired_before;
        assert_eq!(fired, 2, "the first entry and the re-registration");

        // Earlier: a reset.
        an_hour_moved_to_15_ms(|mut s, at| s.extend(at)).await;
    });
}

#[test]
fn a_timeout_counts_from_its_first_wait() {
    block_on(async {
        // Made, then not polled for longer than its duration: the time
        // before the first poll does not count.
        let t = timeout(Duration::from_millis(30), async {
            sleep(Duration::from_millis(5)).await;
            7
        });
        sleep(Duration::from_millis(50)).await;
        assert_eq!(t.await, Ok(7));
        // A future ready at its first poll never times out, even with no time.
        assert_eq!(timeout(Duration::ZERO, async { 8 }).await, Ok(8));
    });
}

#[test]
fn the_loop_clock_trails_the_true_one_by_at_most_a_turn() {
    block_on(async {
        let before = Instant::now();
        sleep(Duration::from_millis(3)).await;
        let turn = loop_now();
        let after = Instant::now();
        assert!(turn >= before, "read at the turn that fired the sleep");
        assert!(turn <= after);
    });
    // Off a loop it is the clock itself.
    let a = Instant::now();
    let b = loop_now();
    assert!(b >= a && b <= Instant::now());
}

#[test]
fn many_timers() {
    const N: u64 = 10_000;
    let start = Instant::now();
    let late = block_on(async {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                spawn(async move {
                    let deadline = Instant::now() + Duration::from_millis(1 + i % 50);
                    sleep_until(deadline).await;
                    Instant::now().duration_since(deadline)
                })
            })
            .collect();
        let mut worst = Duration::ZERO;
        for h in handles {
            worst = worst.max(h.await.unwrap());
        }
        let snap = event_loop::current().unwrap().snapshot();
        assert!(snap.timers_fired >= N);
        worst
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(late < Duration::from_secs(1), "worst lateness {late:?}");
}
