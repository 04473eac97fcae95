//! A payload stage: one OS thread running jobs handed to it by network loops.
//!
//! ```text
//!  network loop ──push──▶ [ bounded job queue ] ──batch──▶ payload thread
//!       ▲                                                     │
//!       └──── task woken through the loop's hand-off queue ◀──┘
//! ```
//!
//! Hand-off cost decides the hand-off models (seed 001: SEDA was no faster
//! than SPED because of it). Here:
//! - the queue is lock-free (crossbeam `ArrayQueue`): no lock per job;
//! - the payload thread takes jobs in batches and, when the queue is empty,
//!   spins briefly before it parks, so a steady stream never pays for a wake-up;
//! - a pusher unparks the thread only if it announced it sleeps (the same
//!   Dekker-style protocol as the loops: `sleeping` is stored before the queue
//!   is re-checked, and read after the push, both `SeqCst`);
//! - results return by waking the calling task, which lands in its loop's
//!   hand-off queue; the loop takes all returned tasks with one swap.
//!
//! Back-pressure: when the queue is full the calling task waits (its waker is
//! parked in `blocked`), so its connection stops reading and TCP pushes back
//! on the client. Nothing is dropped.

use crate::stats::{ThreadRole, ThreadStats};
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// A unit of payload work.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// How long an idle payload thread spins before parking.
const SPIN: Duration = Duration::from_micros(20);
/// At most this many jobs run between two looks at the stop flag and the blocked senders.
const BATCH: usize = 256;

pub(crate) struct Stage {
    pub(crate) index: usize,
    queue: ArrayQueue<Job>,
    sleeping: AtomicBool,
    stop: AtomicBool,
    thread: OnceLock<Thread>,
    blocked: Mutex<Vec<Waker>>,
    has_blocked: AtomicBool,
    pub(crate) jobs: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) unparks: AtomicU64,
    pub(crate) tid: AtomicU64,
}

impl Stage {
    pub(crate) fn new(index: usize, capacity: usize) -> Arc<Stage> {
        Arc::new(Stage {
            index,
            queue: ArrayQueue::new(capacity.max(1)),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: OnceLock::new(),
            blocked: Mutex::new(Vec::new()),
            has_blocked: AtomicBool::new(false),
            jobs: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            unparks: AtomicU64::new(0),
            tid: AtomicU64::new(0),
        })
    }

    /// Starts the stage's OS thread.
    pub(crate) fn start(
        self: &Arc<Self>,
        name: String,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let me = self.clone();
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || me.run())?;
        let _ = self.thread.set(h.thread().clone());
        Ok(h)
    }

    /// Offers a job; gives it back if the queue is full.
    pub(crate) fn try_push(&self, job: Job) -> Result<(), Job> {
        self.queue.push(job)?;
        fence(SeqCst);
        if self.sleeping.load(SeqCst) && self.sleeping.swap(false, SeqCst) {
            self.unparks.fetch_add(1, Relaxed);
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
        Ok(())
    }

    /// Parks a sender's waker until the queue drains.
    pub(crate) fn wait_for_room(&self, waker: &Waker) {
        let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        if !b.iter().any(|w| w.will_wake(waker)) {
            b.push(waker.clone());
        }
        self.has_blocked.store(true, SeqCst);
    }

    fn release_blocked(&self) {
        if self.has_blocked.swap(false, SeqCst) {
            let wakers =
                std::mem::take(&mut *self.blocked.lock().unwrap_or_else(|e| e.into_inner()));
            for w in wakers {
                w.wake();
            }
        }
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, SeqCst);
        self.sleeping.store(false, SeqCst);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    fn run(&self) {
        self.tid
            .store(duality_rt::stats::current_tid() as u64, Relaxed);
        loop {
            let mut n = 0;
            while n < BATCH {
                let Some(job) = self.queue.pop() else { break };
                job();
                n += 1;
            }
            if n > 0 {
                self.jobs.fetch_add(n as u64, Relaxed);
                self.batches.fetch_add(1, Relaxed);
                self.release_blocked();
                continue;
            }
            self.release_blocked();
            if self.stop.load(SeqCst) {
                return;
            }
            // Wait briefly before parking: the next job usually follows within
            // microseconds. Yielding (not busy-spinning) leaves the core to the
            // network loop when threads outnumber cores.
            let spin_until = Instant::now() + SPIN;
            while self.queue.is_empty() && Instant::now() < spin_until {
                std::thread::yield_now();
            }
            if !self.queue.is_empty() {
                continue;
            }
            self.sleeping.store(true, SeqCst);
            fence(SeqCst);
            if self.queue.is_empty() && !self.stop.load(SeqCst) {
                std::thread::park();
            }
            self.sleeping.store(false, SeqCst);
        }
    }

    pub(crate) fn stats(&self) -> ThreadStats {
        let tid = self.tid.load(Relaxed) as i64;
        let (vol, invol) = duality_rt::stats::thread_context_switches(tid).unwrap_or((0, 0));
        ThreadStats {
            role: ThreadRole::Payload,
            name: format!("payload-{}", self.index),
            tid,
            loop_snapshot: None,
            jobs: self.jobs.load(Relaxed),
            batches: self.batches.load(Relaxed),
            wakeups: self.unparks.load(Relaxed),
            queue_depth: self.queue.len(),
            voluntary_ctxt_switches: vol,
            involuntary_ctxt_switches: invol,
        }
    }
}
