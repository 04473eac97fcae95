//! The idle hook (where servers give freed memory back) runs once after a
//! burst of work even when the loop falls asleep before the hook is due,
//! and an idle loop does not keep waking up for it.

use duality_rt::{LoopConfig, LoopThread};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// A loop with `hook` as its idle hook and no idle spin.
fn loop_with(hook: fn()) -> LoopThread {
    LoopThread::spawn(LoopConfig {
        idle_hook: Some(hook),
        idle_spin: Duration::ZERO,
        ..LoopConfig::default()
    })
    .unwrap()
}

/// Waits (up to 10 s) until `calls` is no longer 0.
fn wait_for_a_call(calls: &AtomicUsize) {
    let until = Instant::now() + Duration::from_secs(10);
    while calls.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn hook() {
    CALLS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_loop_that_sleeps_before_its_hook_is_due_still_runs_it_once() {
    let lp = loop_with(hook);
    // Work right after start: the hook (at most once a second, counted from
    // the loop's start) is not due yet when the loop falls asleep.
    let (tx, rx) = std::sync::mpsc::channel();
    lp.handle().spawn(async move {
        let _ = tx.send(Vec::<u8>::with_capacity(1 << 20).capacity());
    });
    assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
    wait_for_a_call(&CALLS);
    assert_eq!(
        CALLS.load(Ordering::SeqCst),
        1,
        "the hook owed after the work never ran while the loop slept"
    );
    // Nothing happened since: the loop sleeps without waking for the hook.
    std::thread::sleep(duality_rt::IDLE_HOOK_EVERY * 2 + Duration::from_millis(200));
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    lp.join().unwrap();
}

static BUSY_CALLS: AtomicUsize = AtomicUsize::new(0);

fn busy_hook() {
    BUSY_CALLS.fetch_add(1, Ordering::SeqCst);
}

/// A loop that has work every few milliseconds (one under load sleeps
/// between requests) does not run the hook in those short sleeps, only once
/// it has been quiet for `IDLE_HOOK_QUIET`.
#[test]
fn a_loop_with_work_every_few_milliseconds_runs_its_hook_only_once_quiet() {
    let lp = loop_with(busy_hook);
    let busy = duality_rt::IDLE_HOOK_EVERY * 2;
    let (tx, rx) = std::sync::mpsc::channel();
    lp.handle().spawn(async move {
        let end = Instant::now() + busy;
        let mut during = 0;
        while Instant::now() < end {
            // Work (an allocation freed), then a sleep well inside the
            // quiet period.
            std::hint::black_box(Vec::<u8>::with_capacity(1 << 16));
            duality_rt::time::sleep(Duration::from_millis(10)).await;
            during = BUSY_CALLS.load(Ordering::SeqCst);
        }
        let _ = tx.send(during);
    });
    let during = rx.recv_timeout(busy + Duration::from_secs(10)).unwrap();
    assert_eq!(
        during, 0,
        "the hook ran while the loop had work every 10 ms"
    );
    wait_for_a_call(&BUSY_CALLS);
    assert_eq!(
        BUSY_CALLS.load(Ordering::SeqCst),
        1,
        "the hook owed after the work never ran once the loop was quiet"
    );
    lp.join().unwrap();
}
