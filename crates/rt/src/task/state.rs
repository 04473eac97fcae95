//! The task state word: every flag, who sets it, and the legal transitions.
//!
//! One `AtomicU32` per task holds seven flags and a 24-bit reference count, so
//! that a state change and a reference-count change are one atomic operation.
//!
//! | bit | flag | meaning | set by | cleared by |
//! |---|---|---|---|---|
//! | 0 | `SCHEDULED` | the task is in (or about to enter) exactly one run queue, or is running and must run again | a waker, `abort`, `spawn` | the runner, when it starts a poll |
//! | 1 | `RUNNING` | a loop is polling the future | the runner | the runner, when the poll ends |
//! | 2 | `COMPLETE` | the future has been dropped; the outcome is stored | the runner | never |
//! | 3 | `CANCELLED` | abort was requested (before completion); after `COMPLETE` it means "ended by abort" | `abort` | the runner, if the final poll produced an output |
//! | 4 | `JOIN_INTEREST` | a `JoinHandle` exists and may read the output | `spawn` | the `JoinHandle`'s drop |
//! | 5 | `JOIN_WAKER` | the join-waker slot is published; while set only the task side reads it | the `JoinHandle` | the `JoinHandle`, only while not `COMPLETE` |
//! | 6 | `PANICKED` | with `COMPLETE`: the future panicked, its payload is in the panic table | the runner | never |
//!
//! Bits 8..32 count references: each `Waker`, the `JoinHandle`, and the run
//! queue holding a `SCHEDULED` task each own one. The task is freed when the
//! count reaches zero.
//!
//! Legal transitions (all by compare-and-swap):
//! - idle → scheduled: a wake of a task that is neither `SCHEDULED`, `RUNNING`
//!   nor `COMPLETE`; the waker hands one reference to the queue.
//! - scheduled → scheduled: a wake of a task already queued changes no flag
//!   but still writes the word (a release), so the poll that follows sees
//!   everything the waker published before waking (no lost wake-up).
//! - scheduled → running: the runner takes the queue's reference with it.
//! - running → running+scheduled: a wake during the poll; no enqueue, the
//!   runner re-queues the task when the poll returns `Pending`.
//! - running → idle / scheduled: the poll returned `Pending`.
//! - running → complete: the poll returned `Ready`, panicked, or the task was
//!   cancelled; `SCHEDULED` is cleared: waking a finished task is a no-op.
//!
//! Invariant: `SCHEDULED` set and `RUNNING` clear ⇒ exactly one queue holds the
//! task, so the queue link (`next`) has one owner at a time.
//!
//! Model-checked with loom (`loom_tests.rs`): wakes from two threads against a
//! running task, abort against completion and against a wake, the join handle
//! against completion — one enqueue per scheduled period, no lost wake-up,
//! the future and the output each dropped once, reference counts balanced.

use crate::loom::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire};

pub(crate) const SCHEDULED: u32 = 1 << 0;
pub(crate) const RUNNING: u32 = 1 << 1;
pub(crate) const COMPLETE: u32 = 1 << 2;
pub(crate) const CANCELLED: u32 = 1 << 3;
pub(crate) const JOIN_INTEREST: u32 = 1 << 4;
pub(crate) const JOIN_WAKER: u32 = 1 << 5;
pub(crate) const PANICKED: u32 = 1 << 6;

pub(crate) const REF_ONE: u32 = 1 << 8;
const REF_MASK: u32 = !(REF_ONE - 1);

/// A task starts scheduled (the spawner enqueues it) with two references:
/// the run queue's and the `JoinHandle`'s.
pub(crate) const INITIAL: u32 = SCHEDULED | JOIN_INTEREST | (2 * REF_ONE);

/// A copy of the state word, with readable accessors.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot(pub(crate) u32);

impl Snapshot {
    pub(crate) fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }
    pub(crate) fn refs(self) -> u32 {
        self.0 >> 8
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "State({:#09b}, refs={})", self.0 & 0xff, self.refs())
    }
}

/// What the runner does after a poll returned `Pending`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterPending {
    /// Woken during the poll: put it back on a run queue (the reference stays with the queue).
    Requeue,
    /// Parked; the runner's reference is released and others remain.
    Idle,
    /// Parked and the runner held the last reference: free the task.
    Dealloc,
}

/// What a wake must do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WakeAction {
    /// Nothing more (already scheduled, running or complete).
    None,
    /// Enqueue the task; one reference now belongs to the queue.
    Enqueue,
    /// Nothing to enqueue, and the caller's reference was the last: free the task.
    Dealloc,
}

pub(crate) struct State(AtomicU32);

impl State {
    pub(crate) fn new(initial: u32) -> State {
        State(AtomicU32::new(initial))
    }

    pub(crate) fn load(&self) -> Snapshot {
        Snapshot(self.0.load(Acquire))
    }

    /// Applies `f` until the compare-and-swap succeeds; returns (old, value f returned).
    #[inline]
    fn update<R>(&self, mut f: impl FnMut(u32) -> (Option<u32>, R)) -> (Snapshot, R) {
        let mut cur = self.0.load(Acquire);
        loop {
            let (next, r) = f(cur);
            let Some(next) = next else {
                return (Snapshot(cur), r);
            };
            match self.0.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => return (Snapshot(cur), r),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Adds a reference (a cloned waker). Aborts on overflow, as `Arc` does.
    pub(crate) fn ref_inc(&self) {
        let prev = self
            .0
            .fetch_add(REF_ONE, std::sync::atomic::Ordering::Relaxed);
        if prev & REF_MASK == REF_MASK {
            crate::say!("duality: task reference count overflow");
            std::process::abort();
        }
    }

    /// Drops a reference; true if it was the last one.
    pub(crate) fn ref_dec(&self) -> bool {
        let prev = self.0.fetch_sub(REF_ONE, AcqRel);
        debug_assert!(prev >> 8 >= 1, "task reference count underflow");
        prev & REF_MASK == REF_ONE
    }

    /// scheduled → running. Returns true if the task was cancelled and must
    /// be dropped instead of polled.
    pub(crate) fn transition_to_running(&self) -> bool {
        let (prev, ()) = self.update(|s| {
            debug_assert!(s & SCHEDULED != 0 && s & (RUNNING | COMPLETE) == 0);
            (Some((s & !SCHEDULED) | RUNNING), ())
        });
        prev.has(CANCELLED)
    }

    /// running → idle or re-queued, after `Pending`.
    pub(crate) fn transition_to_idle(&self) -> AfterPending {
        self.update(|s| {
            debug_assert!(s & RUNNING != 0);
            if s & SCHEDULED != 0 {
                (Some(s & !RUNNING), AfterPending::Requeue)
            } else {
                let next = (s & !RUNNING) - REF_ONE;
                let r = if next & REF_MASK == 0 {
                    AfterPending::Dealloc
                } else {
                    AfterPending::Idle
                };
                (Some(next), r)
            }
        })
        .1
    }

    /// running → complete. `outcome` is 0 for an output, `PANICKED` or
    /// `CANCELLED`. Returns the state before the change.
    pub(crate) fn transition_to_complete(&self, outcome: u32) -> Snapshot {
        self.update(|s| {
            debug_assert!(s & RUNNING != 0);
            let next = (s & !(RUNNING | SCHEDULED | CANCELLED)) | COMPLETE | outcome;
            (Some(next), ())
        })
        .0
    }

    /// A wake that consumes the caller's reference.
    pub(crate) fn wake_by_val(&self) -> WakeAction {
        self.update(|s| {
            if s & (SCHEDULED | COMPLETE) != 0 {
                let next = s - REF_ONE;
                let r = if next & REF_MASK == 0 {
                    WakeAction::Dealloc
                } else {
                    WakeAction::None
                };
                (Some(next), r)
            } else if s & RUNNING != 0 {
                // The runner's reference keeps the task alive; it re-queues.
                let next = (s | SCHEDULED) - REF_ONE;
                (Some(next), WakeAction::None)
            } else {
                // The caller's reference becomes the queue's.
                (Some(s | SCHEDULED), WakeAction::Enqueue)
            }
        })
        .1
    }

    /// A wake that keeps the caller's reference.
    pub(crate) fn wake_by_ref(&self) -> WakeAction {
        self.update(|s| {
            if s & COMPLETE != 0 {
                (None, WakeAction::None)
            } else if s & SCHEDULED != 0 {
                // Already queued, but the wake must still be a release on the
                // state word: the runner's next `transition_to_running` then
                // reads from it and its poll sees what the waker published
                // before waking. A plain load here would let the poll miss it
                // (store buffering) and the task park with the wake lost.
                (Some(s), WakeAction::None)
            } else if s & RUNNING != 0 {
                (Some(s | SCHEDULED), WakeAction::None)
            } else {
                (Some((s | SCHEDULED) + REF_ONE), WakeAction::Enqueue)
            }
        })
        .1
    }

    /// Requests cancellation. Returns the wake action for the scheduler (the
    /// caller keeps its own reference).
    pub(crate) fn abort(&self) -> WakeAction {
        self.update(|s| {
            if s & (COMPLETE | CANCELLED) != 0 {
                (None, WakeAction::None)
            } else if s & (RUNNING | SCHEDULED) != 0 {
                (Some(s | CANCELLED | SCHEDULED), WakeAction::None)
            } else {
                (
                    Some((s | CANCELLED | SCHEDULED) + REF_ONE),
                    WakeAction::Enqueue,
                )
            }
        })
        .1
    }

    /// The `JoinHandle` goes away. Returns the state before.
    pub(crate) fn drop_join_interest(&self) -> Snapshot {
        self.update(|s| (Some(s & !JOIN_INTEREST), ())).0
    }

    /// Publishes the join waker. Fails (returns false) if the task completed first.
    pub(crate) fn set_join_waker(&self) -> bool {
        let (prev, ()) = self.update(|s| {
            if s & COMPLETE != 0 {
                (None, ())
            } else {
                (Some(s | JOIN_WAKER), ())
            }
        });
        !prev.has(COMPLETE)
    }

    /// Takes the join waker back for replacement. Fails if the task completed.
    pub(crate) fn unset_join_waker(&self) -> bool {
        let (prev, ()) = self.update(|s| {
            if s & COMPLETE != 0 {
                (None, ())
            } else {
                (Some(s & !JOIN_WAKER), ())
            }
        });
        !prev.has(COMPLETE)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn wake_of_idle_task_enqueues_once() {
        let s = State::new(REF_ONE); // idle, one waker reference
        assert_eq!(s.wake_by_ref(), WakeAction::Enqueue);
        assert_eq!(s.load().refs(), 2);
        assert_eq!(s.wake_by_ref(), WakeAction::None);
        assert_eq!(s.wake_by_val(), WakeAction::None);
        assert_eq!(s.load().refs(), 1);
    }

    #[test]
    fn wake_while_running_requeues_after_pending() {
        let s = State::new(INITIAL);
        assert!(!s.transition_to_running());
        assert_eq!(s.wake_by_ref(), WakeAction::None);
        assert_eq!(s.transition_to_idle(), AfterPending::Requeue);
        assert!(!s.transition_to_running());
        assert_eq!(s.transition_to_idle(), AfterPending::Idle);
        assert_eq!(s.load().refs(), 1);
    }

    #[test]
    fn complete_clears_scheduled_and_cancel() {
        let s = State::new(INITIAL);
        s.transition_to_running();
        s.abort();
        let prev = s.transition_to_complete(0);
        assert!(prev.has(JOIN_INTEREST));
        let now = s.load();
        assert!(now.has(COMPLETE) && !now.has(SCHEDULED) && !now.has(CANCELLED));
        assert_eq!(s.abort(), WakeAction::None);
        assert_eq!(s.wake_by_ref(), WakeAction::None);
    }

    #[test]
    fn join_waker_cannot_be_set_after_completion() {
        let s = State::new(INITIAL);
        assert!(s.set_join_waker());
        assert!(s.unset_join_waker());
        s.transition_to_running();
        s.transition_to_complete(0);
        assert!(!s.set_join_waker());
        assert!(!s.unset_join_waker());
    }

    #[test]
    fn last_reference_deallocates() {
        let s = State::new(SCHEDULED | REF_ONE);
        s.transition_to_running();
        assert_eq!(s.transition_to_idle(), AfterPending::Dealloc);
    }
}
