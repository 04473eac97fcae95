//! A payload stage: one OS thread running jobs handed to it by network loops.
//!
//! ```text
//!  network loop ──spawn──▶ [ payload loop's hand-off queue ] ──batch──▶ payload loop
//!       ▲                                                                  │
//!       └──────── JoinHandle wakes the caller through its loop's queue ◀───┘
//! ```
//!
//! A stage is a `duality-rt` event loop with no sockets: a job is a task
//! spawned onto it, so every cross-thread step reuses what the runtime
//! already has and model-checks under loom — the hand-off queue (taken in
//! one swap per batch: lock coalescing), the sleep/notify handshake
//! (`SleepGate`: a loop already awake is never woken), and the task's
//! result slot behind its `JoinHandle`. A stage adds only:
//! - back-pressure: a task-aware [`Semaphore`] bounds the jobs in flight;
//!   when it is exhausted the calling connection waits, stops reading, and
//!   TCP pushes back on the client — nothing is dropped;
//! - an idle spin (`LoopConfig::idle_spin`, [`DEFAULT_PAYLOAD_SPIN`] unless
//!   the server says otherwise), so a steady stream of jobs never pays for a
//!   wake-up.
//!
//! One job is one task allocation; the session driver sends one job per read
//! (or per run of one color), not per request.

use crate::stats::{ThreadRole, ThreadStats};
use duality_rt::sync::Semaphore;
use duality_rt::{LoopConfig, LoopThread, RemoteWait};
use futures_lite::FutureExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The result of a job spawned on another loop wrapped in `catch_unwind`:
/// its value, its panic resumed here, or (the loop ended first: server
/// shutdown) never, the caller being cancelled with the server.
pub(crate) async fn answer<R>(r: Result<std::thread::Result<R>, duality_rt::JoinError>) -> R {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => std::future::pending().await,
    }
}

/// How long an idle payload loop spins before it sleeps, unless the server
/// says otherwise (`ServerBuilder::payload_spin`).
pub const DEFAULT_PAYLOAD_SPIN: Duration = Duration::from_micros(20);

pub(crate) struct Stage {
    pub(crate) index: usize,
    thread: Mutex<Option<LoopThread>>,
    pub(crate) handle: duality_rt::LoopHandle,
    room: Semaphore,
    capacity: usize,
    pub(crate) jobs: AtomicU64,
    /// Jobs sent and not yet answered: what `seda`'s caller compares to
    /// send a batch to the less loaded of two threads. The same count as
    /// `room`'s permits taken, kept apart so that reading it takes no lock
    /// on every batch. Only a hint (Relaxed): no decision's correctness
    /// depends on it.
    in_flight: AtomicUsize,
}

/// Counts a job out until its answer is back or its caller is dropped.
struct Out<'a>(&'a AtomicUsize);

impl<'a> Out<'a> {
    fn count(n: &'a AtomicUsize) -> Out<'a> {
        n.fetch_add(1, Relaxed);
        Out(n)
    }
}

impl Drop for Out<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Stage {
    /// Starts the stage's loop thread (pinned to `cpu` if given, with the
    /// time slice `slice` if given); at most `capacity` jobs wait or run at
    /// once; idle, it looks for jobs for `spin` before it sleeps.
    pub(crate) fn start(
        index: usize,
        capacity: usize,
        name: String,
        spin: Duration,
        cpu: Option<usize>,
        slice: Option<Duration>,
    ) -> std::io::Result<Arc<Stage>> {
        let thread = LoopThread::spawn(LoopConfig {
            name: Some(name),
            idle_spin: spin,
            cpu,
            slice,
            // A payload job may legitimately run long (it is the point of
            // handing it off); the network loops' threshold does not apply.
            long_poll_threshold: None,
            ..Default::default()
        })?;
        // Marked once, before the jobs queued after it (detached: dropping
        // the handle does not cancel the task).
        drop(
            thread
                .handle()
                .spawn(async { crate::payload::mark_payload_thread() }),
        );
        Ok(Arc::new(Stage {
            index,
            handle: thread.handle(),
            thread: Mutex::new(Some(thread)),
            room: Semaphore::new(capacity.max(1)),
            capacity: capacity.max(1),
            jobs: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }))
    }

    /// Runs `job` on the stage's thread and returns its result; waits for
    /// room first when the stage is full. A panic in `job` resumes here.
    pub(crate) async fn run<R, F>(self: &Arc<Self>, job: F) -> R
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.run_async(async move { job() }).await
    }

    /// Like [`Stage::run`] for a job that may wait as a task on the stage
    /// (for a color lock another thread holds): the stage runs its other
    /// jobs meanwhile instead of parking.
    pub(crate) async fn run_async<R, F>(self: &Arc<Self>, job: F) -> R
    where
        F: std::future::Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        let Ok(permit) = self.room.acquire().await else {
            // Closed: the server is stopping; this task is cancelled with it.
            return std::future::pending().await;
        };
        // Tells our loop an answer is on its way: it waits briefly for it
        // instead of sleeping and being woken.
        let _waiting = RemoteWait::new();
        let out = Out::count(&self.in_flight);
        // The job task captures nothing of the stage: no reference count
        // bounces between the threads.
        let handle = self
            .handle
            .spawn(std::panic::AssertUnwindSafe(job).catch_unwind());
        let r = handle.await;
        drop(out);
        drop(permit);
        self.jobs.fetch_add(1, Relaxed);
        answer(r).await
    }

    /// Jobs sent to this stage and not answered yet (a hint).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// Stops the loop and waits for its thread.
    pub(crate) fn stop(&self) {
        self.room.close();
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    pub(crate) fn stats(&self) -> ThreadStats {
        let snap = self.handle.snapshot();
        let tid = snap.tid;
        let (vol, invol) = duality_rt::stats::thread_context_switches(tid).unwrap_or((0, 0));
        ThreadStats {
            role: ThreadRole::Payload,
            name: format!("payload-{}", self.index),
            tid,
            jobs: self.jobs.load(Relaxed),
            batches: snap.handoff_batches,
            wakeups: snap.wakeups,
            // Jobs admitted and not yet answered (waiting or running).
            queue_depth: self.capacity.saturating_sub(self.room.available_permits()),
            connections: 0,
            voluntary_ctxt_switches: vol,
            involuntary_ctxt_switches: invol,
            loop_snapshot: Some(snap),
        }
    }
}
