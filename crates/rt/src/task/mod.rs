//! Tasks: `spawn`, `spawn_on`, `JoinHandle`, `yield_now`.
//!
//! A task is one heap cell (`raw.rs`): a 30-byte header followed in place by
//! the future's state machine, later its output. Scheduling is O(1): a wake
//! pushes the task onto an intrusive queue (`queue.rs`), a run pops it.
//! A panicking task does not take its loop down: the panic is caught and the
//! task's `JoinHandle` yields [`JoinError::Panicked`].

mod error;
mod join;
#[cfg(all(test, loom))]
pub(crate) mod loom_tests;
mod queue;
mod raw;
pub(crate) mod sites;
pub(crate) mod state;
mod waker;

pub use error::JoinError;
pub use join::{AbortHandle, JoinHandle};
pub(crate) use queue::{HandoffQueue, LocalQueue};
pub(crate) use raw::TaskRef;

use crate::event_loop::{self, LoopHandle};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::task::{Context, Poll};

static ALIVE: AtomicI64 = AtomicI64::new(0);

/// Tasks spawned and not yet finished or freed, across all loops of the process.
pub fn alive() -> i64 {
    ALIVE.load(Relaxed)
}

pub(crate) fn count_spawned() {
    ALIVE.fetch_add(1, Relaxed);
}

pub(crate) fn count_finished() {
    ALIVE.fetch_sub(1, Relaxed);
}

/// Spawns a task on the current thread's event loop.
///
/// # Panics
/// If called outside a duality event loop (use [`spawn_on`] with a
/// [`LoopHandle`] from other threads).
#[track_caller]
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match event_loop::try_spawn_local(future) {
        Ok(h) => h,
        Err(_) => panic!("duality_rt::spawn called outside a duality event loop; use spawn_on"),
    }
}

/// Spawns a task on the loop behind `handle`, from any thread. The task is
/// handed over through that loop's hand-off queue.
#[track_caller]
pub fn spawn_on<F>(handle: &LoopHandle, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle.spawn(future)
}

/// Allocates a task owned by loop `owner`; the caller enqueues the first reference.
pub(crate) fn new_task<F>(future: F, owner: u16) -> (TaskRef, JoinHandle<F::Output>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (queued, join) = raw::allocate(future, owner);
    count_spawned();
    (queued, JoinHandle::new(join))
}

/// Shutdown: cancels the task a waker belongs to, if it is one of ours.
pub(crate) fn abort_by_waker(w: &std::task::Waker) {
    if let Some(p) = waker::task_of(w) {
        waker::abort(p);
    }
}

/// Shutdown: marks a queued task cancelled, so its next run drops it.
pub(crate) fn abort_task(t: &TaskRef) {
    let _ = t.header().state().abort();
}

/// Gives other ready tasks of this loop a turn, then resumes.
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future of [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        // A wake during our own poll re-queues us at the back of the run queue.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
