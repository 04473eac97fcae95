use super::DirtyList;
use crate::event_loop::registry::SleepGate;
use crate::loom::{thread, Arc, AtomicBool, AtomicUsize, Mutex};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// A socket released on another thread while its loop ends: it is
/// either listed before the end, and the end hands it to the loop to
/// drop, or not listed at all (its releaser keeps and drops it); never
/// left on the list, where nobody would drop it.
#[test]
fn loom_dirty_list_vs_end() {
    loom::model(|| {
        let list = Arc::new(DirtyList::new());
        let queued = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicUsize::new(0));
        let releaser = {
            let (list, queued, made) = (list.clone(), queued.clone(), made.clone());
            thread::spawn(move || {
                list.mark(&queued, || {
                    made.fetch_add(1, Relaxed);
                })
            })
        };
        let mut ended = list.take().len();
        ended += list.end().len();
        let listed = releaser.join().unwrap();
        assert_eq!(made.load(Relaxed), usize::from(listed));
        assert_eq!(ended, usize::from(listed), "listed, yet not handed over");
        assert!(list.take().is_empty() && list.end().is_empty());
        assert!(!list.mark(&Arc::new(AtomicBool::new(false)), || ()));
    });
}

/// A socket changes its state twice from another thread (two writes,
/// say) while its loop takes the dirty list and goes to sleep: whatever
/// the interleaving, the loop either sees the last state or is woken,
/// exactly once per sleep.
#[test]
fn loom_dirty_list_vs_sleep() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound.get_or_insert(3);
    model.check(|| {
        let list = Arc::new(DirtyList::new());
        let queued = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(0u32));
        let gate = Arc::new(SleepGate::new());
        let wakes = Arc::new(AtomicUsize::new(0));
        let producer = {
            let (list, queued, state, gate, wakes) = (
                list.clone(),
                queued.clone(),
                state.clone(),
                gate.clone(),
                wakes.clone(),
            );
            thread::spawn(move || {
                for v in 1..=2 {
                    *crate::loom::lock(&state) = v;
                    if list.mark(&queued, || ()) && gate.notify() {
                        wakes.fetch_add(1, Relaxed);
                    }
                }
            })
        };
        // The loop: announce the sleep, take the list, look at each item.
        let slept = gate.prepare_sleep(|| false);
        let mut seen = 0;
        for () in list.take() {
            queued.store(false, Release);
            seen = *crate::loom::lock(&state);
        }
        // Here the loop blocks in io_uring_enter if `slept`.
        producer.join().unwrap();
        let w = wakes.load(Relaxed);
        assert!(w <= 1, "one eventfd write per sleep");
        if slept && seen != 2 {
            assert_eq!(w, 1, "asleep with a change it never saw, and no wake-up");
        }
        // Whatever was missed is listed for the next turn.
        if seen != 2 {
            assert!(queued.load(Acquire));
            assert_eq!(list.take().len(), 1);
        }
    });
}
