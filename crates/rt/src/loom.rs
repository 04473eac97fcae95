//! The one door through which the runtime reaches atomics, cells and locks.
//!
//! Under `--cfg loom` every item here comes from `loom`, so the queues, the
//! task state machine and the sync primitives can be model-checked by
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p duality-rt --release --lib -- loom_tests`
//! and `… --release --test loom_sync` (both run by `.ci/run`; the models are
//! the `loom_tests` modules — `task::loom_tests` for the task state machine,
//! the task cell and the hand-off queue, `event_loop::registry::loom_tests`
//! for the sleep/notify handshake (a task or a flag as the work) and for a
//! loop's end (its slot released) against a late spawn and its last task, `uring::loom_tests` for the io_uring
//! backend's dirty list against that handshake, `waker_slot::loom_tests` for
//! the waker slot, `time::loom_tests` for a timer fired against its task's
//! poll, `reactor::loom_tests` for readiness events against a reader's
//! wait-read-clear loop — and `tests/loom_sync.rs` for the sync primitives). The payload stages of `duality-models` are built from these
//! parts (a loop's hand-off queue, its sleep gate, a task's `JoinHandle`, a
//! `Semaphore`) and add no cross-thread protocol of their own; the servers'
//! shutdown handshake in `duality-models` has its own shim and models.
//! Everywhere else they are the `std` types at zero cost.

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::{
        atomic::{
            fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize,
        },
        Arc, Mutex, MutexGuard,
    },
    thread,
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::{
    sync::{
        atomic::{
            fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicUsize,
        },
        Arc, Mutex, MutexGuard,
    },
    thread,
};

/// `std::cell::UnsafeCell` with loom's `with`/`with_mut` API, so code is written
/// once for both worlds.
#[cfg(not(loom))]
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
#[allow(dead_code)]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(data: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(data))
    }
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Locks a mutex, ignoring poisoning: every critical section in this crate leaves
/// its data consistent before anything that may panic.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// [`lock`] for a `std::sync::Mutex` that stays one under loom too: state
/// that loom models never reach (the loop registry, the reactor's source
/// table, statistics). Outside loom the two are the same function.
pub(crate) fn lock_std<T: ?Sized>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
