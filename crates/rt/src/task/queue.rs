//! Run queues, intrusive through each task's `next` link, so queueing a task
//! never allocates and costs no memory beyond the header.
//!
//! - [`LocalQueue`]: FIFO owned by one loop thread (`!Sync`, plain loads and stores).
//! - [`HandoffQueue`]: many producers (other threads) push; the owning loop
//!   takes the whole queue with one atomic swap and runs it in FIFO order.
//!   That swap is the *lock coalescing* of the mdcached paper: one
//!   synchronisation for a batch of hand-offs, however many arrived.
//!
//! Invariant (from `state.rs`): a task is in at most one queue at a time,
//! because only the party that set `SCHEDULED` enqueues it. So the queue holding
//! a task owns its `next` link.
//!
//! `HandoffQueue` is model-checked with loom (`loom_tests.rs`): two producers
//! pushing while the consumer drains — every task taken exactly once, each
//! producer's tasks in push order.

use super::raw::{Header, HeaderRef, TaskRef};
use crate::loom::{AtomicPtr, AtomicUsize};
use std::cell::Cell;
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::Ordering::{AcqRel, Relaxed, SeqCst};

fn link(p: NonNull<Header>) -> &'static AtomicPtr<Header> {
    // SAFETY: a queued task is kept alive by the queue's reference; the
    // 'static lifetime never escapes the queue operations below.
    unsafe { HeaderRef::new(p) }.next()
}

/// A FIFO of tasks for the owning loop's thread only.
pub(crate) struct LocalQueue {
    head: Cell<*mut Header>,
    tail: Cell<*mut Header>,
    len: Cell<usize>,
}

impl LocalQueue {
    pub(crate) const fn new() -> LocalQueue {
        LocalQueue {
            head: Cell::new(null_mut()),
            tail: Cell::new(null_mut()),
            len: Cell::new(0),
        }
    }

    pub(crate) fn push(&self, task: TaskRef) {
        let p = task.into_raw();
        link(p).store(null_mut(), Relaxed);
        match NonNull::new(self.tail.get()) {
            None => self.head.set(p.as_ptr()),
            Some(t) => link(t).store(p.as_ptr(), Relaxed),
        }
        self.tail.set(p.as_ptr());
        self.len.set(self.len.get() + 1);
    }

    /// Appends a chain `first..=last` of `n` tasks, already linked.
    fn push_chain(&self, first: NonNull<Header>, last: NonNull<Header>, n: usize) {
        match NonNull::new(self.tail.get()) {
            None => self.head.set(first.as_ptr()),
            Some(t) => link(t).store(first.as_ptr(), Relaxed),
        }
        self.tail.set(last.as_ptr());
        self.len.set(self.len.get() + n);
    }

    pub(crate) fn pop(&self) -> Option<TaskRef> {
        let p = NonNull::new(self.head.get())?;
        let next = link(p).load(Relaxed);
        self.head.set(next);
        if next.is_null() {
            self.tail.set(null_mut());
        } else {
            prefetch(next);
        }
        self.len.set(self.len.get() - 1);
        // SAFETY: the queue owned this reference.
        Some(unsafe { TaskRef::from_raw(p) })
    }

    pub(crate) fn len(&self) -> usize {
        self.len.get()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head.get().is_null()
    }
}

/// Asks the CPU to start loading the next task's header while the current
/// one runs: with millions of tasks every header is a cache miss, and a
/// linked list would otherwise serialise them.
#[inline(always)]
fn prefetch(p: *mut Header) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl Drop for LocalQueue {
    fn drop(&mut self) {
        while let Some(t) = self.pop() {
            drop(t);
        }
    }
}

/// A multi-producer queue drained in batches by its loop (and, around a
/// loop's end, by wakers taking their tasks back: each drain's swap takes
/// a batch no other drain sees; model `loom_handoff_queue_two_drainers`).
pub(crate) struct HandoffQueue {
    /// Top of a LIFO stack of pushed tasks; the consumer reverses a batch.
    head: AtomicPtr<Header>,
    len: AtomicUsize,
}

// SAFETY: all shared fields are atomics; tasks are `Send`.
unsafe impl Sync for HandoffQueue {}
// SAFETY: as above.
unsafe impl Send for HandoffQueue {}

impl HandoffQueue {
    pub(crate) fn new() -> HandoffQueue {
        HandoffQueue {
            head: AtomicPtr::new(null_mut()),
            len: AtomicUsize::new(0),
        }
    }

    /// Pushes from any thread. `SeqCst` so that the push and the consumer's
    /// "about to sleep" flag are totally ordered (see `event_loop::Shared::notify`).
    pub(crate) fn push(&self, task: TaskRef) {
        let p = task.into_raw();
        self.len.fetch_add(1, Relaxed);
        let mut head = self.head.load(Relaxed);
        loop {
            link(p).store(head, Relaxed);
            match self
                .head
                .compare_exchange_weak(head, p.as_ptr(), SeqCst, Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// True if nothing is waiting (a hint; `SeqCst` for the sleep protocol).
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(SeqCst).is_null()
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Moves every pushed task, in push order, to the back of `local`:
    /// one atomic swap for the whole batch. Returns how many moved.
    pub(crate) fn drain_into(&self, local: &LocalQueue) -> usize {
        // AcqRel: a push that finds the stack this swap emptied also sees
        // what its thread wrote before (a loop that ended marks its slot
        // ended, then empties its queue: a waker pushing after that must
        // see the mark and take the task back, see `schedule`).
        let top = self.head.swap(null_mut(), AcqRel);
        let Some(last) = NonNull::new(top) else {
            return 0;
        };
        // Reverse the stack: `last` (newest) becomes the tail.
        let mut n = 0;
        let mut prev: *mut Header = null_mut();
        let mut cur = top;
        while let Some(c) = NonNull::new(cur) {
            let next = link(c).load(Relaxed);
            link(c).store(prev, Relaxed);
            prev = cur;
            cur = next;
            n += 1;
        }
        // SAFETY: `prev` is the oldest task, non-null since the batch is non-empty.
        let first = unsafe { NonNull::new_unchecked(prev) };
        local.push_chain(first, last, n);
        self.len.fetch_sub(n, Relaxed);
        n
    }

    /// Drops everything queued (loop shutdown).
    pub(crate) fn clear(&self) {
        let local = LocalQueue::new();
        self.drain_into(&local);
        drop(local);
    }
}

impl Drop for HandoffQueue {
    fn drop(&mut self) {
        self.clear();
    }
}
