//! The idle hook (where servers give freed memory back) runs once after a
//! burst of work even when the loop falls asleep before the hook is due,
//! and an idle loop does not keep waking up for it.

use duality_rt::{LoopConfig, LoopThread};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn hook() {
    CALLS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_loop_that_sleeps_before_its_hook_is_due_still_runs_it_once() {
    let lp = LoopThread::spawn(LoopConfig {
        idle_hook: Some(hook),
        idle_spin: Duration::ZERO,
        ..LoopConfig::default()
    })
    .unwrap();
    // Work right after start: the hook (at most once a second, counted from
    // the loop's start) is not due yet when the loop falls asleep.
    let (tx, rx) = std::sync::mpsc::channel();
    lp.handle().spawn(async move {
        let _ = tx.send(Vec::<u8>::with_capacity(1 << 20).capacity());
    });
    assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
    let until = Instant::now() + Duration::from_secs(10);
    while CALLS.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
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
