//! Helpers shared by the runtime's integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Counts drops of the values it hands out: proof that a future (or an
/// output) was dropped, and dropped once.
#[derive(Clone, Default)]
pub struct DropCounter(Arc<AtomicUsize>);

impl DropCounter {
    pub fn new() -> DropCounter {
        DropCounter::default()
    }
    /// A value whose drop is counted.
    pub fn token(&self) -> DropToken {
        DropToken(self.0.clone())
    }
    pub fn drops(&self) -> usize {
        self.0.load(SeqCst)
    }
}

/// Counted when dropped.
pub struct DropToken(Arc<AtomicUsize>);

impl Drop for DropToken {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A future that never completes and never keeps its waker: once its task
/// is idle and detached, nothing can reach it again.
pub struct Forever;

impl Future for Forever {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

/// Tests that assert on the process-wide `duality_rt::task::alive()` count
/// must not run beside other tests of the same binary: each takes this lock.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls `cond` (on a plain thread) until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// Gives the loop `n` turns (from inside a task).
pub async fn yield_n(n: usize) {
    for _ in 0..n {
        duality_rt::yield_now().await;
    }
}
