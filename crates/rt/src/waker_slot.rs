//! `WakerSlot`: one task's waker, registered by the task and taken by
//! whichever thread has news for it (a timer firing, a readiness event).
//!
//! Used with a flag the waking side sets first (a timer's `fired`, a
//! socket's readiness word): the task checks the flag, registers, checks
//! again; the waker sets the flag, then takes the waker. Either the second
//! check sees the flag or the take finds the waker — `loom_tests` checks
//! every interleaving of that handshake, with the slot's own protocol:
//!
//! - `state` is `WAITING`, or has `REGISTERING` set while a register holds
//!   the cell, or `WAKING` set while a take holds it;
//! - a register that finds a take running wakes its own waker instead (the
//!   take may have missed it); a take that finds a register running leaves
//!   the cell to it, and the register, seeing `WAKING` when it lets go,
//!   takes its waker back out and wakes it.
//!
//! So at most one thread touches the cell at a time, and no wake-up is
//! lost. (The algorithm of `futures`' `AtomicWaker`, written against this
//! crate's `loom` door so it can be model-checked with the rest.)

use crate::loom::{AtomicUsize, UnsafeCell};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::task::Waker;

const WAITING: usize = 0;
const REGISTERING: usize = 1;
const WAKING: usize = 2;

/// A waker slot shared between one registering task and any waking thread.
pub(crate) struct WakerSlot {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: `waker` is read or written only by the one thread that moved
// `state` out of WAITING (a register setting REGISTERING, or a take setting
// WAKING on a WAITING slot), until it moves `state` back: the accesses never
// overlap (see the module comment), and `Waker` is `Send + Sync`.
unsafe impl Send for WakerSlot {}
// SAFETY: as for `Send`.
unsafe impl Sync for WakerSlot {}

impl WakerSlot {
    pub(crate) fn new() -> WakerSlot {
        WakerSlot {
            state: AtomicUsize::new(WAITING),
            waker: UnsafeCell::new(None),
        }
    }

    /// Makes `waker` the one the next [`take`](Self::take) or
    /// [`wake`](Self::wake) gets. Meant for one registering task at a time;
    /// a register that races another (or a running take) wakes `waker` at
    /// once instead, so its task polls again: spurious, never lost.
    pub(crate) fn register(&self, waker: &Waker) {
        match self
            .state
            .compare_exchange(WAITING, REGISTERING, Acquire, Acquire)
        {
            Ok(_) => {
                self.waker.with_mut(|cell| {
                    // SAFETY: REGISTERING is ours: no other thread touches
                    // the cell until we move `state` back.
                    let cell = unsafe { &mut *cell };
                    if !matches!(cell, Some(old) if old.will_wake(waker)) {
                        *cell = Some(waker.clone());
                    }
                });
                if self
                    .state
                    .compare_exchange(REGISTERING, WAITING, AcqRel, Acquire)
                    .is_err()
                {
                    // A take ran meanwhile (it set WAKING and left the cell
                    // to us): wake the waker it could not take.
                    // SAFETY: `state` is REGISTERING | WAKING: still ours.
                    let w = self.waker.with_mut(|cell| unsafe { (*cell).take() });
                    self.state.swap(WAITING, AcqRel);
                    if let Some(w) = w {
                        w.wake();
                    }
                }
            }
            // A take is running (it may have missed this waker), or another
            // register: poll again rather than risk a lost wake-up.
            Err(_) => waker.wake_by_ref(),
        }
    }

    /// Takes the registered waker out, if one is there and no register is
    /// running (that register then wakes its own waker).
    pub(crate) fn take(&self) -> Option<Waker> {
        match self.state.fetch_or(WAKING, AcqRel) {
            WAITING => {
                // SAFETY: we moved `state` from WAITING to WAKING: the cell is
                // ours until the `fetch_and` below.
                let w = self.waker.with_mut(|cell| unsafe { (*cell).take() });
                self.state.fetch_and(!WAKING, Release);
                w
            }
            _ => None,
        }
    }

    /// Wakes the registered waker, if any (see [`take`](Self::take)).
    pub(crate) fn wake(&self) {
        if let Some(w) = self.take() {
            w.wake();
        }
    }
}

impl Drop for WakerSlot {
    fn drop(&mut self) {
        // `&mut self`: no other thread can be in the cell.
        // SAFETY: exclusive access through `&mut self`.
        drop(self.waker.with_mut(|cell| unsafe { (*cell).take() }));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize as Count, Ordering::SeqCst};
    use std::sync::Arc;
    use std::task::Wake;

    struct Counter(Count);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    fn counter() -> (Arc<Counter>, Waker) {
        let c = Arc::new(Counter(Count::new(0)));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn wake_reaches_the_last_registered_waker_once() {
        let slot = WakerSlot::new();
        let (a, wa) = counter();
        let (b, wb) = counter();
        slot.wake(); // nothing registered: nothing happens
        slot.register(&wa);
        slot.register(&wb);
        slot.wake();
        slot.wake();
        assert_eq!((a.0.load(SeqCst), b.0.load(SeqCst)), (0, 1));
        assert!(slot.take().is_none());
    }

    #[test]
    fn take_hands_the_waker_out_and_drop_releases_it() {
        let slot = WakerSlot::new();
        let (a, wa) = counter();
        slot.register(&wa);
        let taken = slot.take().expect("registered");
        assert!(taken.will_wake(&wa));
        drop(taken);
        slot.register(&wa);
        // The slot holds a clone; dropping the slot drops it.
        assert_eq!(Arc::strong_count(&a), 3);
        drop(slot);
        assert_eq!(Arc::strong_count(&a), 2);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Every interleaving of a register against a take, alone and behind
    //! the flag handshake the timers and the reactor use.
    use super::*;
    use crate::loom::{thread, Arc, AtomicBool};
    use crate::task::loom_tests::counting_waker;
    use std::sync::atomic::Ordering::SeqCst;

    /// A flag set then a wake, against check, register, check (after a
    /// first registration with another waker when `stale_first`): the task
    /// either sees the flag or its newest waker is woken — the handshake
    /// never loses the news.
    fn flag_then_wake(stale_first: bool) {
        loom::model(move || {
            let slot = Arc::new(WakerSlot::new());
            let flag = Arc::new(AtomicBool::new(false));
            let stale = Arc::new(AtomicUsize::new(0));
            if stale_first {
                slot.register(&counting_waker(&stale));
            }
            let woken = Arc::new(AtomicUsize::new(0));
            let waker = counting_waker(&woken);
            let t = {
                let (slot, flag) = (slot.clone(), flag.clone());
                thread::spawn(move || {
                    flag.store(true, Release);
                    slot.wake();
                })
            };
            let seen = flag.load(Acquire) || {
                slot.register(&waker);
                flag.load(Acquire)
            };
            t.join().unwrap();
            assert!(
                seen || woken.load(SeqCst) > 0,
                "the flag was missed and the task never woken"
            );
        });
    }

    #[test]
    fn flag_then_wake_is_never_lost() {
        flag_then_wake(false);
    }

    #[test]
    fn the_latest_registration_is_the_one_woken() {
        flag_then_wake(true);
    }

    /// A register racing a take: the waker is either taken (exactly that
    /// waker) or woken by the register; the cell is never touched twice.
    #[test]
    fn register_against_take_hands_the_waker_over_once() {
        loom::model(|| {
            let slot = Arc::new(WakerSlot::new());
            let woken = Arc::new(AtomicUsize::new(0));
            let waker = counting_waker(&woken);
            let t = {
                let slot = slot.clone();
                thread::spawn(move || slot.take())
            };
            slot.register(&waker);
            let taken = t.join().unwrap();
            let left = slot.take();
            let got = usize::from(taken.is_some()) + usize::from(left.is_some());
            // Taken by the racing take, left in the slot, or woken (the take
            // ran inside the register): at least one, and a taken waker is
            // not also left behind.
            assert!(got + woken.load(SeqCst) >= 1);
            assert!(got <= 1, "the waker was handed out twice");
            if let Some(w) = taken.or(left) {
                assert!(w.will_wake(&waker));
            }
        });
    }
}
