//! An async mutex: `lock().await` parks the task, not the thread, and the guard may
//! be held across `.await` points and moved between threads.
//!
//! # State and who touches it
//!
//! Everything lives in one `State` behind `Mutex::state` (a `crate::loom::Mutex`),
//! read or written only with that lock held:
//!
//! * `value` — the protected value while no guard exists. Locking *moves* the value
//!   into the [`MutexGuard`]; dropping the guard moves it back. This keeps the
//!   module free of `unsafe` (no `UnsafeCell` aliasing to argue about) at the cost
//!   of moving `size_of::<T>()` bytes in and out per lock: keep very large values
//!   behind a `Box`.
//! * `locked` — true while a guard exists *or* the lock has been handed to a queued
//!   waiter that has not collected it yet.
//! * `waiters` — the FIFO of [`Lock`] futures.
//!
//! Invariants: `value.is_some()` exactly when no guard exists; a waiter is waiting
//! only while `locked` (so a free mutex has no waiting waiters).
//!
//! # Fairness
//!
//! FIFO: an unlock with waiters queued hands the lock straight to the first of them
//! (`locked` stays true), so [`try_lock`](Mutex::try_lock) or a new `lock()` cannot
//! barge in ahead of a task that has been waiting.
//!
//! # Cancellation
//!
//! Dropping a queued [`Lock`] removes it; if the lock had already been handed to it,
//! it is passed on to the next waiter, or unlocked. A guard dropped during a panic
//! unlocks normally (there is no poisoning).

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{WaitId, WaitQueue, WaitStatus, WakeList};
use crate::loom::{lock, Mutex as StateLock};

/// A mutual-exclusion lock whose `lock()` is a future.
///
/// Use it when the critical section contains an `.await`; for short sections with
/// no `.await` a `std::sync::Mutex` is cheaper.
pub struct Mutex<T> {
    state: StateLock<State<T>>,
}

struct State<T> {
    value: Option<T>,
    locked: bool,
    waiters: WaitQueue,
}

impl<T> State<T> {
    /// The lock is free again: hand it to the first waiter, or mark it unlocked.
    fn unlock(&mut self, wakes: &mut WakeList) {
        debug_assert!(self.value.is_some());
        let mut available = 1;
        self.waiters.grant(&mut available, wakes);
        self.locked = available == 0;
    }

    fn take_value(&mut self) -> T {
        self.value
            .take()
            .expect("duality-rt Mutex: value missing (a guard was leaked)")
    }
}

/// The mutex is locked; returned by [`Mutex::try_lock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TryLockError(());

impl<T> Mutex<T> {
    /// A new, unlocked mutex holding `value`.
    pub fn new(value: T) -> Mutex<T> {
        Mutex {
            state: StateLock::new(State {
                value: Some(value),
                locked: false,
                waiters: WaitQueue::new(),
            }),
        }
    }

    /// Waits for the lock (FIFO among waiters).
    pub fn lock(&self) -> Lock<'_, T> {
        Lock {
            mutex: self,
            state: LockState::Idle,
        }
    }

    /// Takes the lock if it is free and nobody is waiting.
    pub fn try_lock(&self) -> Result<MutexGuard<'_, T>, TryLockError> {
        let mut st = lock(&self.state);
        if st.locked {
            return Err(TryLockError(()));
        }
        st.locked = true;
        let value = st.take_value();
        Ok(MutexGuard {
            mutex: self,
            value: Some(value),
        })
    }

    /// The value, through exclusive access to the mutex (no locking needed).
    ///
    /// # Panics
    ///
    /// If a guard of this mutex was leaked with `mem::forget`.
    pub fn get_mut(&mut self) -> &mut T {
        let st = match self.state.get_mut() {
            Ok(st) => st,
            Err(p) => p.into_inner(),
        };
        st.value
            .as_mut()
            .expect("duality-rt Mutex: value missing (a guard was leaked)")
    }

    /// Consumes the mutex, returning the value.
    ///
    /// # Panics
    ///
    /// If a guard of this mutex was leaked with `mem::forget`.
    pub fn into_inner(self) -> T {
        let st = match self.state.into_inner() {
            Ok(st) => st,
            Err(p) => p.into_inner(),
        };
        st.value
            .expect("duality-rt Mutex: value missing (a guard was leaked)")
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Mutex<T> {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Mutex<T> {
        Mutex::new(value)
    }
}

impl<T> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("Mutex")
            .field("locked", &st.locked)
            .field("waiting", &st.waiters.has_waiting())
            .finish_non_exhaustive()
    }
}

/// Exclusive access to a [`Mutex`]'s value; dropping it unlocks (handing the lock to
/// the next waiter, if any).
#[must_use = "dropping the guard unlocks the mutex at once"]
pub struct MutexGuard<'a, T> {
    mutex: &'a Mutex<T>,
    /// Always `Some` until `drop` moves it back into the mutex.
    value: Option<T>,
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
            .as_ref()
            .expect("guard holds the value until dropped")
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
            .as_mut()
            .expect("guard holds the value until dropped")
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.mutex.state);
        st.value = self.value.take();
        st.unlock(&mut wakes);
        drop(st);
        wakes.wake_all();
    }
}

impl<T: fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// The future of [`Mutex::lock`].
///
/// Lazy: it joins the queue on its first poll. Dropping it while queued removes it;
/// if the lock had been handed to it already, it is passed on.
#[must_use = "futures do nothing unless polled"]
pub struct Lock<'a, T> {
    mutex: &'a Mutex<T>,
    state: LockState,
}

#[derive(Debug, Clone, Copy)]
enum LockState {
    Idle,
    Queued(WaitId),
    Done,
}

impl<'a, T> Future for Lock<'a, T> {
    type Output = MutexGuard<'a, T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<MutexGuard<'a, T>> {
        let this = self.get_mut();
        let mut wakes = WakeList::new();
        let mut st = lock(&this.mutex.state);
        let acquired = match this.state {
            LockState::Idle if !st.locked => {
                st.locked = true;
                true
            }
            LockState::Idle => {
                this.state = LockState::Queued(st.waiters.push(1, cx.waker()));
                false
            }
            LockState::Queued(id) => match st.waiters.poll(id, cx.waker(), &mut wakes) {
                WaitStatus::Granted => true,
                WaitStatus::Waiting => false,
                WaitStatus::Gone => unreachable!("a mutex never drains its waiters"),
            },
            LockState::Done => panic!("`Lock` polled after completion"),
        };
        if !acquired {
            return Poll::Pending;
        }
        this.state = LockState::Done;
        let value = st.take_value();
        Poll::Ready(MutexGuard {
            mutex: this.mutex,
            value: Some(value),
        })
    }
}

impl<T> Drop for Lock<'_, T> {
    fn drop(&mut self) {
        if let LockState::Queued(id) = self.state {
            let mut wakes = WakeList::new();
            let mut st = lock(&self.mutex.state);
            if st.waiters.remove(id, &mut wakes).is_some() {
                // The lock was handed to us but never collected: pass it on.
                st.unlock(&mut wakes);
            }
            drop(st);
            wakes.wake_all();
        }
    }
}

impl<T> fmt::Debug for Lock<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for TryLockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mutex is locked")
    }
}

impl std::error::Error for TryLockError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::test_util::{poll_counting, CountingWaker};
    use futures_lite::future::block_on;
    use std::sync::Arc;

    #[test]
    fn lock_and_try_lock() {
        let m = Mutex::new(1);
        {
            let mut g = block_on(m.lock());
            *g += 1;
            assert!(m.try_lock().is_err());
        }
        assert_eq!(*m.try_lock().unwrap(), 2);
        let mut m = m;
        *m.get_mut() += 1;
        assert_eq!(m.into_inner(), 3);
    }

    #[test]
    fn fifo_hand_off() {
        let m = Mutex::new(Vec::new());
        let g = m.try_lock().unwrap();
        let (wa, wb) = (CountingWaker::new(), CountingWaker::new());
        let mut a = m.lock();
        let mut b = m.lock();
        assert!(poll_counting(&mut a, &wa).is_pending());
        assert!(poll_counting(&mut b, &wb).is_pending());
        drop(g);
        assert_eq!((wa.count(), wb.count()), (1, 0));
        // Handed to `a`: nobody can barge in.
        assert!(m.try_lock().is_err());
        let mut ga = match poll_counting(&mut a, &wa) {
            Poll::Ready(g) => g,
            Poll::Pending => panic!("a was granted"),
        };
        ga.push('a');
        drop(ga);
        assert_eq!(wb.count(), 1);
        let Poll::Ready(mut gb) = poll_counting(&mut b, &wb) else {
            panic!("b was granted")
        };
        gb.push('b');
        drop(gb);
        assert_eq!(*m.try_lock().unwrap(), vec!['a', 'b']);
    }

    #[test]
    fn dropped_granted_waiter_passes_lock_on() {
        let m = Mutex::new(0);
        let g = m.try_lock().unwrap();
        let (wa, wb) = (CountingWaker::new(), CountingWaker::new());
        let mut a = m.lock();
        let mut b = m.lock();
        assert!(poll_counting(&mut a, &wa).is_pending());
        assert!(poll_counting(&mut b, &wb).is_pending());
        drop(g); // handed to `a`
        drop(a); // `a` is cancelled before collecting it
        assert_eq!(wb.count(), 1);
        assert!(poll_counting(&mut b, &wb).is_ready());
        // ...and `b`'s guard (dropped with the poll result) unlocked it.
        assert!(m.try_lock().is_ok());
    }

    #[test]
    fn dropped_last_waiter_unlocks() {
        let m = Mutex::new(0);
        let g = m.try_lock().unwrap();
        let w = CountingWaker::new();
        let mut a = m.lock();
        assert!(poll_counting(&mut a, &w).is_pending());
        drop(g);
        drop(a);
        assert!(m.try_lock().is_ok());
    }

    #[test]
    fn guard_unlocks_on_panic() {
        let m = Mutex::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = block_on(m.lock());
            panic!("boom");
        }));
        assert!(r.is_err());
        assert!(m.try_lock().is_ok());
    }

    #[test]
    fn counts_across_threads() {
        let m = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        let mut g = block_on(m.lock());
                        let v = *g;
                        std::thread::yield_now();
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.try_lock().unwrap(), 2000);
    }

    #[test]
    fn types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Mutex<Vec<u8>>>();
        check::<MutexGuard<'static, Vec<u8>>>();
        check::<Lock<'static, Vec<u8>>>();
        fn send<T: Send>() {}
        // `Cell` is Send but not Sync: the mutex makes it shareable.
        check::<Mutex<std::cell::Cell<u8>>>();
        send::<MutexGuard<'static, std::cell::Cell<u8>>>();
    }
}
