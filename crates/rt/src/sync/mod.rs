//! Task-aware synchronisation, usable across loops: a waiter parks its task,
//! never its OS thread.
//!
//! | primitive | what it gives |
//! |---|---|
//! | [`Mutex`] | mutual exclusion over a value; `lock().await`, FIFO hand-off |
//! | [`Semaphore`] | `n` permits; `acquire().await`, `acquire_many(k)`, `close()` |
//! | [`oneshot`] | one value from one producer to one consumer |
//! | [`mpsc`] | bounded multi-producer queue; a full queue makes `send().await` wait (back-pressure) |
//! | [`SeqPair`] | two words read together without a lock (a sequence lock; never waits on a task) |
//!
//! # Runtime-agnostic
//!
//! Every primitive works with plain [`std::task::Waker`]s, so it can be awaited
//! under any executor. Under this crate's loops a woken task goes back to the run
//! queue of its own loop, so a value sent from loop A to a task of loop B resumes
//! that task on B.
//!
//! # How they are built
//!
//! Each primitive keeps all of its shared state behind one `crate::loom::Mutex`
//! (so every primitive can be model-checked with loom), and the tasks waiting on it
//! in a FIFO `WaitQueue` inside that state ([`SeqPair`], whose readers take
//! no lock, is the exception: see its own docs). The lock discipline is the
//! same everywhere:
//!
//! * shared state is read or written only while its mutex is held;
//! * no user code runs while the mutex is held: wakers are collected into a
//!   `WakeList` and woken after the guard is dropped, and values of `T` that
//!   must be dropped (a closed channel's buffer, a refused message) are moved
//!   out first and dropped after;
//! * a resource (a permit, the lock, a channel slot) freed while tasks wait is
//!   *handed* to the first waiter (FIFO) under the same lock that freed it; the
//!   waiter finds it granted when it is polled again. Nobody can barge past a
//!   waiter.
//!
//! # Cancellation
//!
//! Every future returned here may be dropped at any point (a `select!`, a
//! timeout, an aborted task). A future dropped while queued removes its entry;
//! if the resource had already been granted to it, it passes it on to the next
//! waiter (or back to the pool of free resources), so nothing is ever lost.
//! Dropping a future that was never polled does nothing.

pub mod mpsc;
mod mutex;
pub mod oneshot;
mod semaphore;
mod seq;

pub use mutex::{Lock, Mutex, MutexGuard, TryLockError};
pub use semaphore::{Acquire, AcquireError, Semaphore, SemaphorePermit, TryAcquireError};
pub use seq::SeqPair;

use std::collections::VecDeque;
use std::task::Waker;

/// Identifies one entry of a [`WaitQueue`]; ids only grow, so queue order is id
/// order.
pub(crate) type WaitId = u64;

/// What [`WaitQueue::poll`] found for a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitStatus {
    /// The resource was handed to this waiter; its entry is gone and the caller
    /// now owns what was granted.
    Granted,
    /// Still waiting; the stored waker is up to date.
    Waiting,
    /// No such entry: it was removed by [`WaitQueue::drain_waiting`] (the
    /// primitive was closed).
    Gone,
}

/// A FIFO queue of waiting tasks, kept *inside* a primitive's mutex-protected
/// state (the queue has no lock of its own: every method expects that lock held).
///
/// Entries are `[granted..., waiting...]`: grants are made strictly from the
/// front of the waiting part, so the granted entries always form a prefix. A
/// granted entry stays queued (holding what it was granted, already charged to the
/// primitive) until its future collects it with [`poll`](Self::poll) or gives it
/// back with [`remove`](Self::remove).
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    entries: VecDeque<Entry>,
    /// Length of the granted prefix of `entries`.
    granted: usize,
    next_id: WaitId,
}

#[derive(Debug)]
struct Entry {
    id: WaitId,
    /// How much of the resource this waiter needs (permits, slots).
    need: usize,
    /// `Some` while waiting; taken when granted.
    waker: Option<Waker>,
}

impl WaitQueue {
    pub(crate) const fn new() -> WaitQueue {
        WaitQueue {
            entries: VecDeque::new(),
            granted: 0,
            next_id: 0,
        }
    }

    /// True if some entry is still waiting (not yet granted). A fast path must not
    /// take a free resource while this holds, or it would barge past the queue.
    pub(crate) fn has_waiting(&self) -> bool {
        self.entries.len() > self.granted
    }

    /// Appends a waiter needing `need` units.
    pub(crate) fn push(&mut self, need: usize, waker: &Waker) -> WaitId {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push_back(Entry {
            id,
            need,
            waker: Some(waker.clone()),
        });
        id
    }

    fn position(&self, id: WaitId) -> Option<usize> {
        self.entries.binary_search_by_key(&id, |e| e.id).ok()
    }

    /// Looks up waiter `id`: if granted, removes it and says so; if waiting,
    /// refreshes its waker (the stale one goes to `wakes` so it is dropped after the
    /// lock is released).
    pub(crate) fn poll(&mut self, id: WaitId, waker: &Waker, wakes: &mut WakeList) -> WaitStatus {
        let Some(pos) = self.position(id) else {
            return WaitStatus::Gone;
        };
        if pos < self.granted {
            self.entries.remove(pos);
            self.granted -= 1;
            return WaitStatus::Granted;
        }
        let entry = &mut self.entries[pos];
        match &entry.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => {
                if let Some(old) = entry.waker.replace(waker.clone()) {
                    wakes.retire(old);
                }
            }
        }
        WaitStatus::Waiting
    }

    /// Removes waiter `id` (its future is being dropped). Returns `Some(need)` if it
    /// had been granted — the caller must give those units back — and `None`
    /// otherwise. The removed waker goes to `wakes` to be dropped unlocked.
    pub(crate) fn remove(&mut self, id: WaitId, wakes: &mut WakeList) -> Option<usize> {
        let pos = self.position(id)?;
        let entry = self.entries.remove(pos).expect("position is in range");
        if let Some(w) = entry.waker {
            wakes.retire(w);
        }
        if pos < self.granted {
            self.granted -= 1;
            Some(entry.need)
        } else {
            None
        }
    }

    /// Grants, in FIFO order, to every waiting entry at the front whose need fits in
    /// `available`, subtracting what it grants. Stops at the first entry that does
    /// not fit (strict FIFO: a large request is never starved by small ones).
    pub(crate) fn grant(&mut self, available: &mut usize, wakes: &mut WakeList) {
        while let Some(entry) = self.entries.get_mut(self.granted) {
            if entry.need > *available {
                break;
            }
            *available -= entry.need;
            self.granted += 1;
            if let Some(w) = entry.waker.take() {
                wakes.wake(w);
            }
        }
    }

    /// Removes every waiting (not granted) entry and schedules its wake-up; their
    /// futures will find themselves [`Gone`](WaitStatus::Gone). Used by `close`.
    pub(crate) fn drain_waiting(&mut self, wakes: &mut WakeList) {
        for entry in self.entries.drain(self.granted..) {
            if let Some(w) = entry.waker {
                wakes.wake(w);
            }
        }
    }
}

/// Wakers to wake, and stale wakers to drop, once the primitive's lock is released.
///
/// Declare it *before* taking the lock: locals drop in reverse order, so the guard is
/// released first and the list's `Drop` wakes afterwards, on every path including
/// early returns. Calling [`wake_all`](Self::wake_all) after `drop(guard)` says the
/// same thing explicitly.
#[derive(Default)]
pub(crate) struct WakeList {
    wake: Vec<Waker>,
    retire: Vec<Waker>,
}

impl WakeList {
    pub(crate) const fn new() -> WakeList {
        WakeList {
            wake: Vec::new(),
            retire: Vec::new(),
        }
    }

    /// Schedules `w` to be woken.
    pub(crate) fn wake(&mut self, w: Waker) {
        self.wake.push(w);
    }

    /// Schedules `w` to be dropped without waking.
    pub(crate) fn retire(&mut self, w: Waker) {
        self.retire.push(w);
    }

    /// Wakes and drops everything now. Call only with no lock held.
    pub(crate) fn wake_all(&mut self) {
        self.retire.clear();
        for w in self.wake.drain(..) {
            w.wake();
        }
    }
}

impl Drop for WakeList {
    fn drop(&mut self) {
        self.wake_all();
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Helpers for the unit tests of this module's primitives.
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    pub(crate) struct CountingWaker(pub(crate) AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Polls `fut` once with a counting waker; returns the poll result and the
    /// counter so the test can check for wake-ups later.
    pub(crate) fn poll_counting<F: std::future::Future + Unpin>(
        fut: &mut F,
        counter: &Arc<CountingWaker>,
    ) -> Poll<F::Output> {
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        std::pin::Pin::new(fut).poll(&mut cx)
    }

    impl CountingWaker {
        pub(crate) fn new() -> Arc<CountingWaker> {
            Arc::new(CountingWaker::default())
        }
        pub(crate) fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::CountingWaker;
    use super::*;
    use std::task::Waker;

    #[test]
    fn grant_is_fifo_and_strict() {
        let mut q = WaitQueue::new();
        let mut wakes = WakeList::new();
        let w = &Waker::from(CountingWaker::new());
        let a = q.push(2, w);
        let b = q.push(1, w);
        let mut avail = 1;
        q.grant(&mut avail, &mut wakes);
        assert_eq!(avail, 1, "b must not barge past a");
        avail = 3;
        q.grant(&mut avail, &mut wakes);
        assert_eq!(avail, 0);
        assert!(!q.has_waiting());
        assert_eq!(q.remove(b, &mut wakes), Some(1));
        assert_eq!(q.poll(a, w, &mut wakes), WaitStatus::Granted);
        assert_eq!(q.poll(a, w, &mut wakes), WaitStatus::Gone);
    }

    #[test]
    fn drain_leaves_granted_prefix() {
        let mut q = WaitQueue::new();
        let mut wakes = WakeList::new();
        let w = &Waker::from(CountingWaker::new());
        let a = q.push(1, w);
        let b = q.push(1, w);
        let mut avail = 1;
        q.grant(&mut avail, &mut wakes);
        q.drain_waiting(&mut wakes);
        assert_eq!(q.poll(b, w, &mut wakes), WaitStatus::Gone);
        assert_eq!(q.remove(a, &mut wakes), Some(1));
    }
}
