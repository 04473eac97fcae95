//! The cooperative I/O budget: fairness between tasks of one loop.
//!
//! A task whose socket is always ready (a client that pipelines faster than
//! it is answered) would otherwise never return to its loop: every read finds
//! data, every write succeeds, and the loop's other tasks — the acceptor
//! included — wait for seconds. So each task poll gets a budget of
//! [`BUDGET`] I/O operations (tokio's figure). Every operation that completes
//! spends one unit; once it is spent, the next operation wakes its own task
//! and returns `Pending`, which puts the task at the back of the run queue.
//! Nothing is lost: the operation has not run yet and runs on the next poll.
//!
//! The budget is a thread-local set by the loop around each task poll; off
//! a loop (blocking code, other runtimes) it is unlimited.

use std::cell::Cell;
use std::task::{Context, Poll};

/// I/O operations a task may complete in one poll.
pub const BUDGET: u32 = 128;

/// `u32::MAX`: no loop is polling a task on this thread.
const UNLIMITED: u32 = u32::MAX;

thread_local! {
    static LEFT: Cell<u32> = const { Cell::new(UNLIMITED) };
}

/// Gives the task about to be polled a fresh budget; the guard lifts the
/// limit again when the poll ends.
pub(crate) fn start_poll() -> Reset {
    LEFT.with(|l| l.set(BUDGET));
    Reset
}

pub(crate) struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        LEFT.with(|l| l.set(UNLIMITED));
    }
}

/// Before an I/O operation: `Pending` (and the task re-queued) if the
/// task's budget for this poll is spent.
#[inline]
pub(crate) fn poll_proceed(cx: &mut Context<'_>) -> Poll<()> {
    LEFT.with(|l| {
        if l.get() == 0 {
            cx.waker().wake_by_ref();
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
}

/// After an I/O operation completed: spends one unit.
#[inline]
pub(crate) fn spend() {
    LEFT.with(|l| {
        let v = l.get();
        if v != UNLIMITED && v > 0 {
            l.set(v - 1);
        }
    })
}

/// Units left in this poll (`None` off a loop).
pub fn remaining() -> Option<u32> {
    LEFT.with(|l| match l.get() {
        UNLIMITED => None,
        v => Some(v),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn unlimited_off_a_loop() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..10 * BUDGET {
            assert!(poll_proceed(&mut cx).is_ready());
            spend();
        }
        assert_eq!(remaining(), None);
    }

    #[test]
    fn a_spent_budget_says_pending_until_the_next_poll() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        {
            let _g = start_poll();
            for _ in 0..BUDGET {
                assert!(poll_proceed(&mut cx).is_ready());
                spend();
            }
            assert_eq!(remaining(), Some(0));
            assert!(poll_proceed(&mut cx).is_pending());
        }
        let _g = start_poll();
        assert!(poll_proceed(&mut cx).is_ready());
    }
}
