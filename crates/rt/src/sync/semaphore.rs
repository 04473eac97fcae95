//! A counting semaphore whose waiters park their task.
//!
//! # State and who touches it
//!
//! All state lives in one `State` behind `Semaphore::state` (a `crate::loom::Mutex`)
//! and is read or written only with that lock held:
//!
//! * `permits` — permits free right now. A permit is in exactly one place: free
//!   (`permits`), held by a [`SemaphorePermit`], or granted to a queued waiter that
//!   has not collected it yet (charged, recorded by its `WaitQueue` entry).
//! * `closed` — set once by [`Semaphore::close`], never cleared.
//! * `waiters` — the FIFO of [`Acquire`] futures that could not be served.
//!
//! Invariant: while some waiter is *waiting* (not granted), the head waiter needs
//! more than `permits`. Every path that frees permits (a permit dropped,
//! [`add_permits`](Semaphore::add_permits), a granted waiter dropped) runs the
//! grant loop under the same lock to restore it.
//!
//! # Fairness
//!
//! Strictly FIFO: permits go to waiters in arrival order, and a request for many
//! permits at the head holds back smaller requests behind it (so it cannot be
//! starved). [`try_acquire`](Semaphore::try_acquire) fails while anyone waits.
//!
//! # Closing and cancellation
//!
//! [`close`](Semaphore::close) wakes every waiting `Acquire`, which then resolves to
//! [`AcquireError`]; later acquires fail at once. A waiter that had already been
//! granted before the close still gets its permits. Permits released after the
//! close go back to the count. Dropping an `Acquire` that is queued removes it; if
//! it had been granted, its permits are handed on.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{WaitId, WaitQueue, WaitStatus, WakeList};
use crate::loom::{lock, Mutex};

/// The largest number of permits a semaphore can hold.
const MAX_PERMITS: usize = usize::MAX >> 3;

/// A counting semaphore: `n` permits, handed out in FIFO order.
///
/// Used to bound concurrency (at most `n` tasks in a section), e.g. a limit on
/// in-flight requests to a backend.
pub struct Semaphore {
    state: Mutex<State>,
}

struct State {
    permits: usize,
    closed: bool,
    waiters: WaitQueue,
}

impl State {
    /// Puts `n` permits back and grants them to waiters in FIFO order.
    fn release(&mut self, n: usize, wakes: &mut WakeList) {
        self.permits = self
            .permits
            .checked_add(n)
            .filter(|&p| p <= MAX_PERMITS)
            .expect("semaphore permit count overflow");
        self.waiters.grant(&mut self.permits, wakes);
    }
}

/// The semaphore was closed; no permit was acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireError(());

/// Why [`Semaphore::try_acquire`] got no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryAcquireError {
    /// The semaphore was closed.
    Closed,
    /// Not enough permits are free, or other tasks are already waiting.
    NoPermits,
}

impl Semaphore {
    /// A semaphore with `permits` free permits.
    ///
    /// # Panics
    ///
    /// If `permits` exceeds `usize::MAX >> 3`.
    pub fn new(permits: usize) -> Semaphore {
        assert!(permits <= MAX_PERMITS, "too many permits: {permits}");
        Semaphore {
            state: Mutex::new(State {
                permits,
                closed: false,
                waiters: WaitQueue::new(),
            }),
        }
    }

    /// Waits for one permit. Resolves to [`AcquireError`] if the semaphore is closed.
    pub fn acquire(&self) -> Acquire<'_> {
        self.acquire_many(1)
    }

    /// Waits until `n` permits can be taken at once (FIFO: while this request is at
    /// the head of the queue, requests behind it wait too). A request for more
    /// permits than will ever be available waits until the semaphore is closed.
    pub fn acquire_many(&self, n: usize) -> Acquire<'_> {
        Acquire {
            sem: self,
            need: n,
            state: AcquireState::Idle,
        }
    }

    /// Takes one permit if one is free and no task is waiting.
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.try_acquire_many(1)
    }

    /// Takes `n` permits if that many are free and no task is waiting.
    pub fn try_acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        let mut st = lock(&self.state);
        if st.closed {
            return Err(TryAcquireError::Closed);
        }
        if st.waiters.has_waiting() || st.permits < n {
            return Err(TryAcquireError::NoPermits);
        }
        st.permits -= n;
        Ok(SemaphorePermit {
            sem: self,
            permits: n,
        })
    }

    /// Adds `n` permits, waking waiters that can now be served.
    ///
    /// # Panics
    ///
    /// If the count would exceed `usize::MAX >> 3`.
    pub fn add_permits(&self, n: usize) {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.state);
        st.release(n, &mut wakes);
        drop(st);
        wakes.wake_all();
    }

    /// The number of permits free right now.
    pub fn available_permits(&self) -> usize {
        lock(&self.state).permits
    }

    /// Closes the semaphore: every waiting [`Acquire`] and every later acquire
    /// resolves to [`AcquireError`]. Permits already held are unaffected and may
    /// still be released.
    pub fn close(&self) {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.state);
        st.closed = true;
        st.waiters.drain_waiting(&mut wakes);
        drop(st);
        wakes.wake_all();
    }

    /// True once [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("Semaphore")
            .field("permits", &st.permits)
            .field("closed", &st.closed)
            .field("waiting", &st.waiters.has_waiting())
            .finish()
    }
}

/// Permits taken from a [`Semaphore`]; dropping it gives them back.
#[must_use = "dropping the permit releases it at once"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
    permits: usize,
}

impl SemaphorePermit<'_> {
    /// How many permits this holds.
    pub fn num_permits(&self) -> usize {
        self.permits
    }

    /// Gives up the permits without returning them: the semaphore's capacity shrinks
    /// by that many.
    pub fn forget(mut self) {
        self.permits = 0;
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        if self.permits > 0 {
            self.sem.add_permits(self.permits);
        }
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("permits", &self.permits)
            .finish()
    }
}

/// The future of [`Semaphore::acquire`] and [`Semaphore::acquire_many`].
///
/// Lazy: it joins the queue on its first poll. Dropping it while queued removes
/// it; if permits had already been granted to it they are handed on.
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a> {
    sem: &'a Semaphore,
    need: usize,
    state: AcquireState,
}

#[derive(Debug, Clone, Copy)]
enum AcquireState {
    /// Not polled yet: not in the queue.
    Idle,
    /// In the queue under this id.
    Queued(WaitId),
    /// Resolved (or found closed); owns nothing.
    Done,
}

impl<'a> Future for Acquire<'a> {
    type Output = Result<SemaphorePermit<'a>, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut wakes = WakeList::new();
        let mut st = lock(&this.sem.state);
        match this.state {
            AcquireState::Idle => {
                if st.closed {
                    this.state = AcquireState::Done;
                    return Poll::Ready(Err(AcquireError(())));
                }
                if !st.waiters.has_waiting() && st.permits >= this.need {
                    st.permits -= this.need;
                    this.state = AcquireState::Done;
                    return Poll::Ready(Ok(SemaphorePermit {
                        sem: this.sem,
                        permits: this.need,
                    }));
                }
                this.state = AcquireState::Queued(st.waiters.push(this.need, cx.waker()));
                Poll::Pending
            }
            AcquireState::Queued(id) => match st.waiters.poll(id, cx.waker(), &mut wakes) {
                WaitStatus::Granted => {
                    this.state = AcquireState::Done;
                    Poll::Ready(Ok(SemaphorePermit {
                        sem: this.sem,
                        permits: this.need,
                    }))
                }
                WaitStatus::Waiting => Poll::Pending,
                WaitStatus::Gone => {
                    debug_assert!(st.closed);
                    this.state = AcquireState::Done;
                    Poll::Ready(Err(AcquireError(())))
                }
            },
            AcquireState::Done => panic!("`Acquire` polled after completion"),
        }
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        if let AcquireState::Queued(id) = self.state {
            let mut wakes = WakeList::new();
            let mut st = lock(&self.sem.state);
            match st.waiters.remove(id, &mut wakes) {
                // Granted but never collected: hand the permits on.
                Some(n) => st.release(n, &mut wakes),
                // Still waiting: leaving the head may let the next ones through.
                None => {
                    let st = &mut *st;
                    st.waiters.grant(&mut st.permits, &mut wakes);
                }
            }
            drop(st);
            wakes.wake_all();
        }
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("need", &self.need)
            .field("state", &self.state)
            .finish()
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("semaphore closed")
    }
}

impl std::error::Error for AcquireError {}

impl fmt::Display for TryAcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryAcquireError::Closed => f.write_str("semaphore closed"),
            TryAcquireError::NoPermits => f.write_str("no permits available"),
        }
    }
}

impl std::error::Error for TryAcquireError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::test_util::{poll_counting, CountingWaker};
    use futures_lite::future::block_on;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn acquire_release_counts() {
        let sem = Semaphore::new(3);
        let p = block_on(sem.acquire_many(2)).unwrap();
        assert_eq!(p.num_permits(), 2);
        assert_eq!(sem.available_permits(), 1);
        assert_eq!(
            sem.try_acquire_many(2).unwrap_err(),
            TryAcquireError::NoPermits
        );
        drop(p);
        assert_eq!(sem.available_permits(), 3);
        sem.try_acquire().unwrap().forget();
        assert_eq!(sem.available_permits(), 2);
        sem.add_permits(5);
        assert_eq!(sem.available_permits(), 7);
    }

    #[test]
    fn fifo_big_request_holds_back_small() {
        let sem = Semaphore::new(1);
        let held = sem.try_acquire().unwrap();
        let (wa, wb) = (CountingWaker::new(), CountingWaker::new());
        let mut a = sem.acquire_many(2);
        let mut b = sem.acquire();
        assert!(poll_counting(&mut a, &wa).is_pending());
        assert!(poll_counting(&mut b, &wb).is_pending());
        // One free permit is not enough for `a`, and `b` may not barge past it.
        drop(held);
        assert_eq!(sem.available_permits(), 1);
        assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
        assert_eq!((wa.count(), wb.count()), (0, 0));
        sem.add_permits(1);
        assert_eq!((wa.count(), wb.count()), (1, 0));
        let pa = match poll_counting(&mut a, &wa) {
            Poll::Ready(Ok(p)) => p,
            other => panic!("{other:?}"),
        };
        drop(pa);
        assert_eq!(wb.count(), 1);
        assert!(poll_counting(&mut b, &wb).is_ready());
    }

    #[test]
    fn dropped_granted_waiter_passes_permit_on() {
        let sem = Semaphore::new(1);
        let held = sem.try_acquire().unwrap();
        let (wa, wb) = (CountingWaker::new(), CountingWaker::new());
        let mut a = sem.acquire();
        let mut b = sem.acquire();
        assert!(poll_counting(&mut a, &wa).is_pending());
        assert!(poll_counting(&mut b, &wb).is_pending());
        drop(held); // granted to `a`
        assert_eq!(wa.count(), 1);
        drop(a); // ... which is cancelled before it collects: `b` must get it
        assert_eq!(wb.count(), 1);
        let pb = block_on(b).unwrap();
        drop(pb);
        assert_eq!(sem.available_permits(), 1);
    }

    #[test]
    fn dropped_waiting_head_unblocks_the_rest() {
        let sem = Semaphore::new(1);
        let (wa, wb) = (CountingWaker::new(), CountingWaker::new());
        let mut a = sem.acquire_many(5);
        let mut b = sem.acquire();
        assert!(poll_counting(&mut a, &wa).is_pending());
        assert!(poll_counting(&mut b, &wb).is_pending());
        drop(a);
        assert_eq!(wb.count(), 1);
        assert!(poll_counting(&mut b, &wb).is_ready());
    }

    #[test]
    fn close_fails_waiters_and_later_acquires() {
        let sem = Semaphore::new(0);
        let w = CountingWaker::new();
        let mut a = sem.acquire();
        assert!(poll_counting(&mut a, &w).is_pending());
        sem.close();
        assert_eq!(w.count(), 1);
        assert!(matches!(
            poll_counting(&mut a, &w),
            Poll::Ready(Err(AcquireError(())))
        ));
        assert!(block_on(sem.acquire()).is_err());
        assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
        assert!(sem.is_closed());
    }

    #[test]
    fn granted_before_close_keeps_permit() {
        let sem = Semaphore::new(0);
        let w = CountingWaker::new();
        let mut a = sem.acquire();
        assert!(poll_counting(&mut a, &w).is_pending());
        sem.add_permits(1);
        sem.close();
        assert!(matches!(poll_counting(&mut a, &w), Poll::Ready(Ok(_))));
        assert_eq!(sem.available_permits(), 1);
    }

    #[test]
    fn wakes_from_another_thread() {
        let sem = Arc::new(Semaphore::new(0));
        let s2 = sem.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            s2.add_permits(1);
        });
        let p = block_on(sem.acquire()).unwrap();
        assert_eq!(p.num_permits(), 1);
        t.join().unwrap();
    }

    #[test]
    fn bounds_concurrency_across_threads() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let sem = Arc::new(Semaphore::new(2));
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (sem, inside) = (sem.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _p = block_on(sem.acquire()).unwrap();
                        assert!(inside.fetch_add(1, SeqCst) < 2);
                        std::thread::yield_now();
                        inside.fetch_sub(1, SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(sem.available_permits(), 2);
    }

    #[test]
    fn types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Semaphore>();
        check::<SemaphorePermit<'static>>();
        check::<Acquire<'static>>();
    }
}
