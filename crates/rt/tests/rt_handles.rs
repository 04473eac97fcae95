//! A handle to an ended loop cannot act on the loop that reuses its slot.

use duality_rt::{LoopConfig, LoopThread};

#[test]
fn stop_through_a_stale_handle_leaves_the_next_loop_running() {
    // Loop slots are recycled: run a few rounds so one lands on a reused slot.
    for _ in 0..8 {
        let first = LoopThread::spawn(LoopConfig::default()).unwrap();
        let stale = first.handle();
        first.join().unwrap();
        assert!(!stale.is_current(), "an ended loop's handle is stale");
        let second = LoopThread::spawn(LoopConfig::default()).unwrap();
        assert!(second.handle().is_current());
        stale.stop();
        // The second loop still runs tasks.
        let h = second.handle().spawn(async { 7 });
        assert_eq!(duality_rt::block_on(h).unwrap(), 7);
        assert!(!stale.is_current(), "a reused slot has a new generation");
        second.join().unwrap();
    }
}
