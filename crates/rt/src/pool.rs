//! Thread pools for work that must not run on an event loop.
//!
//! Two process-wide pools, both bounded:
//!
//! * the **blocking** pool ([`spawn_blocking`], [`blocking_pool`]) for system calls
//!   that block (`open`, `stat`, DNS lookups): many threads (default 64), since
//!   they mostly sleep in the kernel;
//! * the **CPU** pool ([`offload`], [`cpu_pool`]) for CPU-heavy work: one thread
//!   per core by default, so offloaded work never oversubscribes the machine.
//!
//! # Priority
//!
//! A pool's threads may run nicer than their creator ([`PoolConfig::nice`]) and,
//! while the pool keeps up, in the kernel's background class
//! ([`PoolConfig::background_after`]): the CPU pool does both, so event loops
//! always run first. A job left waiting longer than `background_after` is the
//! sign that the loops leave the pool too little: every thread (the ones in the
//! middle of a job too) is raised back to its nice value for a while. Raising
//! needs a privilege an unprivileged process lacks unless `RLIMIT_NICE` allows
//! it; the pool's first thread tries it once, and without it the threads never
//! enter the background class. Threads wait for work outside the class (an idle
//! one watches for a job starving in it). The thread list behind the raise is kept under
//! the pool's mutex, which a thread leaves only after taking itself off it.
//! Raised, the CPU pool's threads run on a short time slice
//! ([`PoolConfig::slice`]) and loops with no slice of their own shorten
//! theirs ([`crate::RAISED_SLICE`]): a loop waking behind a thread on a
//! longer slice would wait for the next scheduler tick.
//!
//! A thread enters the class only for the job itself, after letting go of the
//! pool's mutex, and leaves it before taking the mutex again: a thread in the
//! class can be kept off a busy core for milliseconds, and holding the mutex
//! meanwhile would make a loop queueing a job wait that long. While a job runs
//! in the class (and for 100 ms after one), event loops sleep instead of
//! spinning before they sleep.
//!
//! A server may also own its own [`Pool`]s. The calling task awaits a [`PoolJob`];
//! the pool thread wakes it through its `Waker`, so under this runtime the task
//! resumes on its own loop with the result.
//!
//! # Bounds and back-pressure
//!
//! A pool starts threads lazily, one whenever a job is queued and no idle thread is
//! there to take it, up to `max_threads`; a thread idle for `keep_alive` retires.
//! The queue holds at most `queue_capacity` jobs that no thread has started. When
//! it is full, an awaiting [`PoolJob`] waits (parking its task, FIFO with the other
//! waiters) until a thread takes a job off the queue: the pool pushes back instead
//! of growing without bound.
//!
//! # Cancellation
//!
//! A `PoolJob` is lazy: nothing is queued until its first poll. Dropped before a
//! thread starts it, the job never runs: a queued job is taken out of the queue
//! (making room for the next waiter), and a job a thread has just dequeued is
//! skipped because its result has nobody to go to. A job already running runs to
//! the end; its result is dropped. If `f` panics, the panic is caught, the thread
//! survives, and the job resolves to [`JoinError::Panicked`].
//!
//! # State and who touches it
//!
//! Per pool, one `State` behind a mutex: the queue, the room-waiter FIFO, the
//! thread counts. Pool threads pop jobs and update counts; `PoolJob`s push jobs,
//! queue for room and remove their own queued job when dropped. Invariants:
//! `queue.len() + reserved <= queue_capacity` (a `reserved` slot is granted to a
//! room waiter that has not pushed yet); `idle <= threads <= max_threads`.
//!
//! This module uses `std::sync` directly rather than the `crate::loom` shim: its
//! threads are real OS threads with timed waits (keep-alive), which loom cannot
//! model. The hand-over of results goes through [`crate::sync::oneshot`],
//! which is model-checked.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::priority;
use crate::sync::oneshot;
use crate::sync::{WaitId, WaitQueue, WaitStatus, WakeList};
use crate::task::JoinError;

/// How much nicer than the process the CPU pool's threads run by default:
/// 10 steps give a thread about a tenth of a loop's CPU share while both are
/// runnable, and a waking loop preempts it.
pub const CPU_POOL_NICE: i32 = 10;

/// The CPU pool's default [`PoolConfig::background_after`]: a job that
/// waited this long for a thread means the background class starves the
/// pool (a gzip of 2 MiB costs about 8 ms here).
pub const CPU_POOL_BACKGROUND_AFTER: Duration = Duration::from_millis(50);

/// The time slice the CPU pool's threads ask for outside the background
/// class ([`PoolConfig::slice`]): the shortest the kernel grants. A loop
/// waking behind a raised pool thread that has run this long preempts it
/// at once; behind one on the kernel's slice (1.4 ms here) it waits for
/// the next scheduler tick, up to 4 ms at 250 Hz.
pub const CPU_POOL_SLICE: Duration = Duration::from_micros(100);

/// How long a pool stays raised out of the background class after a job
/// waited too long: long enough to clear a backlog, short enough to give
/// the loops their head start back soon after.
const BOOST_HOLD: Duration = Duration::from_millis(200);

/// A job running in the background class for this many times
/// `background_after` raises the pool as a waiting one does: with nothing
/// queued behind it, a starved job would otherwise never be noticed.
const RUN_BOUND: u32 = 4;

/// How a [`Pool`] is sized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Thread names are `{name}-{n}`.
    pub name: String,
    /// Most threads running at once (at least 1).
    pub max_threads: usize,
    /// Most jobs waiting for a thread (at least 1); beyond that, submitters wait.
    pub queue_capacity: usize,
    /// How long an idle thread waits for work before it exits.
    pub keep_alive: Duration,
    /// How much nicer than their creator the threads run (0: the same). A
    /// positive value lets the kernel run event loops first whenever both
    /// want a core.
    pub nice: i32,
    /// `Some(wait)`: run jobs in the kernel's background class
    /// (`SCHED_IDLE`: only on cores nothing else wants, preempted at once by
    /// a waking loop) while the pool keeps up, and raise every thread back to
    /// `nice` for a while when a job has waited longer than `wait` for a
    /// thread. Only where the process may leave that class again (root,
    /// `CAP_SYS_NICE` or `RLIMIT_NICE`); elsewhere the threads stay at `nice`.
    pub background_after: Option<Duration>,
    /// The time slice the threads ask for whenever they run outside the
    /// background class (EEVDF's custom slice, Linux 6.12 and later,
    /// 0.1-100 ms; older kernels ignore it). A thread that has used up a
    /// short slice gives way to a waking event loop as soon as that loop
    /// wakes, instead of at the next scheduler tick. `None`: the kernel's.
    pub slice: Option<Duration>,
}

impl PoolConfig {
    /// The blocking pool's defaults: `duality-blocking`, 64 threads, 4096 queued
    /// jobs, 10 s keep-alive, the process's priority.
    pub fn blocking() -> PoolConfig {
        PoolConfig {
            name: "duality-blocking".into(),
            max_threads: 64,
            queue_capacity: 4096,
            keep_alive: Duration::from_secs(10),
            nice: 0,
            background_after: None,
            slice: None,
        }
    }

    /// The CPU pool's defaults: `duality-cpu`, one thread per available core, 4096
    /// queued jobs, 10 s keep-alive, nice [`CPU_POOL_NICE`], in the
    /// background class while it keeps up ([`CPU_POOL_BACKGROUND_AFTER`])
    /// and on a short slice ([`CPU_POOL_SLICE`]) when raised out of it:
    /// offloaded work takes the cores the loops leave (seed 002: a heavy job
    /// must not delay everybody else's requests), and all of them when the
    /// loops are idle.
    pub fn cpu() -> PoolConfig {
        PoolConfig {
            name: "duality-cpu".into(),
            max_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            queue_capacity: 4096,
            keep_alive: Duration::from_secs(10),
            nice: CPU_POOL_NICE,
            background_after: Some(CPU_POOL_BACKGROUND_AFTER),
            slice: Some(CPU_POOL_SLICE),
        }
    }

    fn validate(&self) -> Result<(), PoolConfigError> {
        if self.max_threads == 0 {
            return Err(PoolConfigError::Invalid("max_threads must be at least 1"));
        }
        if self.queue_capacity == 0 {
            return Err(PoolConfigError::Invalid(
                "queue_capacity must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Why [`configure_blocking_pool`] or [`configure_cpu_pool`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolConfigError {
    /// The pool was already created (by an earlier use or configuration).
    AlreadyInitialized,
    /// The configuration is unusable.
    Invalid(&'static str),
}

impl fmt::Display for PoolConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolConfigError::AlreadyInitialized => f.write_str("pool already initialized"),
            PoolConfigError::Invalid(why) => write!(f, "invalid pool configuration: {why}"),
        }
    }
}

impl std::error::Error for PoolConfigError {}

/// A snapshot of a pool, from [`Pool::stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// The pool's name.
    pub name: String,
    /// Threads alive (running a job or idle).
    pub threads: usize,
    /// Threads waiting for work.
    pub idle: usize,
    /// Jobs waiting for a thread.
    pub queued: usize,
    /// The configured thread limit.
    pub max_threads: usize,
    /// The configured queue bound.
    pub queue_capacity: usize,
    /// Jobs run to the end (returned or panicked) since the pool was created.
    pub completed: u64,
    /// Times its threads were raised out of the kernel's background class
    /// because a job waited (or ran there) too long: the loops left the pool
    /// too little ([`PoolConfig::background_after`]; 0 without it).
    pub raises: u64,
}

/// A bounded thread pool. See the [module docs](self).
///
/// Dropping a `Pool` lets the jobs already queued run, then its threads exit;
/// jobs not yet queued resolve to [`JoinError::Cancelled`].
pub struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    config: PoolConfig,
    state: Mutex<State>,
    /// Signalled when a job is queued or the pool shuts down.
    work: Condvar,
    /// Jobs run to the end; counted before the result is sent, so a task that got
    /// its result sees its job counted.
    completed: AtomicU64,
    /// Whether this pool's threads may leave the background class again
    /// (tried by its first thread, at its own nice value).
    background_ok: OnceLock<bool>,
    /// Raises out of the background class so far.
    raises: AtomicU64,
}

/// A type-erased job: runs the user's function (unless its `PoolJob` is gone),
/// counts it in `Shared::completed`, then sends the result.
type Job = Box<dyn FnOnce(&Shared) + Send>;

struct QueuedJob {
    id: u64,
    run: Job,
    /// When it was queued (only read by a pool with `background`).
    queued_at: Instant,
}

/// A live pool thread, for a pool with `background`.
struct Worker {
    tid: i32,
    /// Its nice value outside the background class.
    nice: i32,
    /// In the background class now.
    background: bool,
    /// When it started the job it is running (`None`: between jobs).
    busy_since: Option<Instant>,
}

struct State {
    /// Jobs not started yet, in submission order (so `id`s are increasing).
    queue: VecDeque<QueuedJob>,
    /// Queue slots granted to room waiters that have not pushed yet.
    reserved: usize,
    /// `PoolJob`s waiting for room in the queue.
    room_waiters: WaitQueue,
    next_job_id: u64,
    threads: usize,
    idle: usize,
    next_thread_id: usize,
    shutdown: bool,
    /// Live threads (a pool with `background` only).
    workers: Vec<Worker>,
    /// Until when the threads stay out of the background class.
    raised_until: Option<Instant>,
}

impl State {
    fn free(&self, capacity: usize) -> usize {
        capacity - self.queue.len() - self.reserved
    }

    /// Reserves free queue slots for room waiters, FIFO.
    fn grant_room(&mut self, capacity: usize, wakes: &mut WakeList) {
        let free = self.free(capacity);
        let mut left = free;
        self.room_waiters.grant(&mut left, wakes);
        self.reserved += free - left;
    }

    /// If the oldest queued job has waited longer than `after`, or a job
    /// has run in the background class for [`RUN_BOUND`] times that, raises
    /// every thread out of the class for [`BOOST_HOLD`]: the class is
    /// starving the pool. A thread in the middle of a job is raised too (a
    /// starved job would otherwise keep its thread for as long as the loops
    /// stay busy).
    fn raise_if_starved(
        &mut self,
        after: Duration,
        now: Instant,
        raises: &AtomicU64,
        slice: Option<Duration>,
    ) {
        let waited = |since: Instant, bound: Duration| now.saturating_duration_since(since) > bound;
        let starved = self
            .queue
            .front()
            .is_some_and(|j| waited(j.queued_at, after))
            || self.workers.iter().any(|w| {
                w.background && w.busy_since.is_some_and(|t| waited(t, after * RUN_BOUND))
            });
        if !starved {
            return;
        }
        self.raised_until = Some(now + BOOST_HOLD);
        let until = (now + BOOST_HOLD).saturating_duration_since(epoch());
        RAISED_UNTIL.fetch_max(until.as_nanos() as u64, Ordering::Relaxed);
        // Before the threads are raised: a thread entering the class after
        // this sees the count move and leaves it again.
        raises.fetch_add(1, Ordering::SeqCst);
        for w in self.workers.iter_mut().filter(|w| w.background) {
            // The thread is alive: it leaves `workers` under this lock
            // before it ends.
            match priority::set_background(w.tid, false, w.nice, slice) {
                Ok(()) => w.background = false,
                Err(e) => tracing::debug!("pool thread stays in the background: {e}"),
            }
        }
    }

    /// Marks thread `tid` as running a job (or not), for the starvation
    /// check.
    fn set_busy(&mut self, tid: i32, busy: bool) {
        if let Some(w) = self.workers.iter_mut().find(|w| w.tid == tid) {
            w.busy_since = busy.then(Instant::now);
        }
    }

    /// Whether a thread is running a job in the background class.
    fn background_busy(&self) -> bool {
        self.workers
            .iter()
            .any(|w| w.background && w.busy_since.is_some())
    }

    /// Whether pool threads should take their next job in the background
    /// class.
    fn background_now(&self, now: Instant) -> bool {
        !matches!(self.raised_until, Some(t) if now < t)
    }
}

/// Pool threads of this process running a job in the background class.
static BACKGROUND_RUNNING: AtomicUsize = AtomicUsize::new(0);
/// When the last such job ended, in nanoseconds since [`epoch`].
static BACKGROUND_ENDED: AtomicU64 = AtomicU64::new(0);
/// How long after a background job the pool counts as busy: jobs come in
/// runs (one per heavy request), and the gaps between them are short.
const BACKGROUND_RECENT: Duration = Duration::from_millis(100);

/// Until when a pool of this process stays raised out of the background
/// class, in nanoseconds since [`epoch`] (0: never raised).
static RAISED_UNTIL: AtomicU64 = AtomicU64::new(0);

/// Whether a pool of this process runs raised out of the background class
/// now (for [`BOOST_HOLD`] after a job starved in it): its threads
/// then compete with the event loops for the cores, and a loop on the
/// kernel's slice that wakes behind one waits for the next scheduler tick.
/// Event loops on their inherited slice shorten it meanwhile.
/// The clock is read only where a pool was ever raised.
pub(crate) fn raised() -> bool {
    let until = RAISED_UNTIL.load(Ordering::Relaxed);
    until != 0 && (Instant::now().saturating_duration_since(epoch()).as_nanos() as u64) < until
}

/// Marks a pool of this process raised for `hold` from now, as a starving
/// job would.
#[cfg(all(test, not(loom)))]
pub(crate) fn mark_raised_for(hold: Duration) {
    let until = (Instant::now() + hold).saturating_duration_since(epoch());
    RAISED_UNTIL.fetch_max(until.as_nanos() as u64, Ordering::Relaxed);
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Whether a pool thread of this process runs a job in the kernel's
/// background class now, or did within [`BACKGROUND_RECENT`] of `now`. An
/// event loop then sleeps instead of spinning: the spin yields its core
/// between looks, and a yield hands the core to such a thread until the next
/// scheduler tick (milliseconds), while a loop woken from sleep takes the
/// core back at once (`docs/results/offload/ab-spin/`: cheap requests'
/// p99 beside heavy jobs 1.6-1.7 ms before this check, 0.4-0.5 ms after).
pub(crate) fn background_busy(now: Instant) -> bool {
    if BACKGROUND_RUNNING.load(Ordering::Relaxed) > 0 {
        return true;
    }
    let ended = BACKGROUND_ENDED.load(Ordering::Relaxed);
    ended != 0
        && (now.saturating_duration_since(epoch()).as_nanos() as u64).saturating_sub(ended)
            < BACKGROUND_RECENT.as_nanos() as u64
}

thread_local! {
    /// On a pool thread running a job in the background class: when the job
    /// last let others have the core ([`checkpoint`]). `None` elsewhere.
    static BACKGROUND_JOB: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// How long a job in the background class runs between [`checkpoint`]s
/// that give its core away.
const CHECKPOINT_EVERY: Duration = Duration::from_micros(50);

/// A point in a long CPU job (a compression) where, if it runs on a pool
/// thread in the kernel's background class and has run `CHECKPOINT_EVERY`
/// since the last one, it yields its core: an event loop woken onto this
/// core then runs at once. The kernel should preempt the job for a waking
/// loop by itself, but on this project's virtual machine it did so only at
/// the next tick (`perf sched`: loops runnable for up to 3.9 ms, a tick at
/// 250 Hz, behind a compression in the class; the remote wake-up's
/// interrupt is the likely delay; `docs/results/offload/ab-checkpoint/`).
/// Anywhere else (a loop running the job inline, a pool outside the class)
/// it does nothing; it costs a clock read, and a `sched_yield` per
/// interval. True if it yielded.
pub fn checkpoint() -> bool {
    BACKGROUND_JOB.with(|c| {
        let Some(last) = c.get() else {
            return false;
        };
        if last.elapsed() < CHECKPOINT_EVERY {
            return false;
        }
        std::thread::yield_now();
        c.set(Some(Instant::now()));
        true
    })
}

/// Locks pool state, ignoring poisoning (no critical section here runs user code).
fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    /// A pool with no threads yet; they start on demand.
    ///
    /// # Panics
    ///
    /// If `max_threads` or `queue_capacity` is 0.
    pub fn new(config: PoolConfig) -> Pool {
        if let Err(e) = config.validate() {
            panic!("{e}");
        }
        Pool {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    reserved: 0,
                    room_waiters: WaitQueue::new(),
                    next_job_id: 0,
                    threads: 0,
                    idle: 0,
                    next_thread_id: 0,
                    shutdown: false,
                    workers: Vec::new(),
                    raised_until: None,
                }),
                work: Condvar::new(),
                completed: AtomicU64::new(0),
                background_ok: OnceLock::new(),
                raises: AtomicU64::new(0),
                config,
            }),
        }
    }

    /// Runs `f` on one of this pool's threads. The returned future is lazy: the job
    /// is queued on its first poll.
    pub fn run<F, T>(&self, f: F) -> PoolJob<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let run: Job = Box::new(move |shared: &Shared| {
            if tx.is_closed() {
                return; // the PoolJob is gone: nobody wants the result
            }
            let result = catch_unwind(AssertUnwindSafe(f)).map_err(JoinError::Panicked);
            shared.completed.fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(result);
        });
        PoolJob {
            shared: self.shared.clone(),
            job: Some(run),
            rx,
            state: JobState::Idle,
        }
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> PoolStats {
        let cfg = &self.shared.config;
        let st = lock(&self.shared.state);
        PoolStats {
            name: cfg.name.clone(),
            threads: st.threads,
            idle: st.idle,
            queued: st.queue.len(),
            max_threads: cfg.max_threads,
            queue_capacity: cfg.queue_capacity,
            completed: self.shared.completed.load(Ordering::Relaxed),
            raises: self.shared.raises.load(Ordering::Relaxed),
        }
    }

    /// The configuration the pool was built with.
    pub fn config(&self) -> &PoolConfig {
        &self.shared.config
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.shared.state);
        st.shutdown = true;
        st.room_waiters.drain_waiting(&mut wakes);
        drop(st);
        self.shared.work.notify_all();
        wakes.wake_all();
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Pool").field(&self.stats()).finish()
    }
}

impl Shared {
    /// `background_after`, once a thread found that the class can be left.
    fn background(&self) -> Option<Duration> {
        self.config
            .background_after
            .filter(|_| self.background_ok.get() == Some(&true))
    }

    /// Queues `run` (a slot is known to be free) and makes sure a thread will take
    /// it: wakes an idle one, or starts one if none is idle and the limit allows.
    fn enqueue(self: &Arc<Self>, mut st: MutexGuard<'_, State>, run: Job) -> u64 {
        let id = st.next_job_id;
        st.next_job_id += 1;
        let queued_at = Instant::now();
        if let Some(after) = self.background() {
            st.raise_if_starved(after, queued_at, &self.raises, self.config.slice);
        }
        st.queue.push_back(QueuedJob { id, run, queued_at });
        let start = if st.idle < st.queue.len() && st.threads < self.config.max_threads {
            st.threads += 1;
            st.next_thread_id += 1;
            Some(st.next_thread_id - 1)
        } else {
            None
        };
        let wake_idle = st.idle > 0;
        drop(st);
        if wake_idle {
            self.work.notify_one();
        }
        if let Some(n) = start {
            self.start_thread(n);
        }
        id
    }

    fn start_thread(self: &Arc<Self>, n: usize) {
        let shared = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{n}", self.config.name))
            .spawn(move || shared.worker());
        if spawned.is_err() {
            // Out of threads. If the pool has none at all, nothing would ever run
            // the queue: drop it so its jobs resolve to `Cancelled` instead of
            // hanging.
            let mut wakes = WakeList::new();
            let mut st = lock(&self.state);
            st.threads -= 1;
            let orphans = if st.threads == 0 {
                std::mem::take(&mut st.queue)
            } else {
                VecDeque::new()
            };
            st.grant_room(self.config.queue_capacity, &mut wakes);
            drop(st);
            wakes.wake_all();
            drop(orphans);
        }
    }

    /// A pool thread: take jobs until idle for `keep_alive` (or shut down with an
    /// empty queue).
    fn worker(self: Arc<Self>) {
        let tid = crate::stats::current_tid() as i32;
        // A pool in the background class needs the thread's own nice value
        // to come back to, even when it adds nothing to it.
        let nice = if self.config.nice != 0 || self.config.background_after.is_some() {
            priority::raise_nice(self.config.nice).unwrap_or_else(|e| {
                tracing::debug!(
                    "pool thread keeps its priority (nice +{}: {e})",
                    self.config.nice
                );
                0
            })
        } else {
            0
        };
        if self.config.background_after.is_some() {
            self.background_ok
                .get_or_init(|| priority::may_leave_idle(nice));
        }
        if let Some(slice) = self.config.slice {
            if let Err(e) = priority::set_slice(slice) {
                tracing::debug!("pool thread keeps the kernel's time slice ({slice:?}: {e})");
            }
        }
        let capacity = self.config.queue_capacity;
        let mut st = lock(&self.state);
        if self.background().is_some() {
            st.workers.push(Worker {
                tid,
                nice,
                background: false,
                busy_since: None,
            });
        }
        loop {
            // Here the thread is outside the background class: a thread in
            // it must never hold the pool's mutex, since a busy core may
            // leave it off the CPU for as long as the loops keep that core
            // busy, and a loop queueing a job would wait on the mutex that
            // long (priority inversion). It enters the class after letting
            // go of the mutex and leaves it before taking the mutex again.
            let mut background = None;
            if let Some(after) = self.background() {
                let now = Instant::now();
                st.raise_if_starved(after, now, &self.raises, self.config.slice);
                if !st.queue.is_empty() && st.background_now(now) {
                    if let Some(w) = st.workers.iter_mut().find(|w| w.tid == tid) {
                        // Recorded before the thread enters, so that a raise
                        // from now on finds it (and the count below tells it).
                        w.background = true;
                        background = Some(self.raises.load(Ordering::SeqCst));
                    }
                }
            }
            if let Some(job) = st.queue.pop_front() {
                let mut wakes = WakeList::new();
                st.grant_room(capacity, &mut wakes);
                st.set_busy(tid, true);
                // Idle threads asleep for their keep-alive start watching.
                let watch = st.idle > 0 && st.background_busy();
                drop(st);
                if watch {
                    self.work.notify_all();
                }
                wakes.wake_all();
                // Counted from before the thread enters until after it left.
                if background.is_some() {
                    BACKGROUND_RUNNING.fetch_add(1, Ordering::Relaxed);
                }
                let entered = background.is_some_and(|raises| {
                    priority::set_background(0, true, nice, None).is_ok()
                        // A raise since the decision: it may have come
                        // before the thread entered, so leave again.
                        && (self.raises.load(Ordering::SeqCst) == raises
                            || priority::set_background(0, false, nice, self.config.slice)
                                .is_err())
                });
                // The job catches the user's panic itself; this outer catch covers
                // a panicking destructor of an unwanted result.
                if entered {
                    BACKGROUND_JOB.set(Some(Instant::now()));
                }
                let _ = catch_unwind(AssertUnwindSafe(|| (job.run)(&self)));
                if entered {
                    BACKGROUND_JOB.set(None);
                    let _ = priority::set_background(0, false, nice, self.config.slice);
                }
                if background.is_some() {
                    let at = Instant::now().saturating_duration_since(epoch());
                    BACKGROUND_ENDED.store((at.as_nanos() as u64).max(1), Ordering::Relaxed);
                    BACKGROUND_RUNNING.fetch_sub(1, Ordering::Relaxed);
                }
                debug_assert!(
                    !priority::is_background(),
                    "a pool thread takes the pool's mutex in the background class"
                );
                st = lock(&self.state);
                st.set_busy(tid, false);
                if let Some(w) = st.workers.iter_mut().find(|w| w.tid == tid) {
                    w.background = false;
                }
                continue;
            }
            if background.is_some() {
                if let Some(w) = st.workers.iter_mut().find(|w| w.tid == tid) {
                    w.background = false;
                }
            }
            if st.shutdown {
                break;
            }
            st.idle += 1;
            let deadline = crate::time::after(self.config.keep_alive);
            let timed_out = loop {
                let now = Instant::now();
                if now >= deadline {
                    break true;
                }
                // While a job runs in the background class, an idle thread
                // looks in every `after` to raise it if it starves.
                let watch = self.background().filter(|_| st.background_busy());
                if let Some(after) = watch {
                    st.raise_if_starved(after, now, &self.raises, self.config.slice);
                }
                let nap = watch.map_or(deadline - now, |a| a.min(deadline - now));
                st = match self.work.wait_timeout(st, nap) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
                if !st.queue.is_empty() || st.shutdown {
                    break false;
                }
            };
            st.idle -= 1;
            if timed_out {
                break;
            }
        }
        st.workers.retain(|w| w.tid != tid);
        st.threads -= 1;
    }
}

/// A job submitted to a [`Pool`]: a future resolving to the function's result, or
/// to [`JoinError::Panicked`] if it panicked.
///
/// Lazy: the job is queued on the first poll, waiting (FIFO) for room if the queue
/// is full. Dropping the `PoolJob` before a thread starts the job means the job
/// never runs. Resolves to [`JoinError::Cancelled`] if the pool was dropped before
/// the job could be queued.
#[must_use = "a PoolJob does nothing unless awaited"]
pub struct PoolJob<T> {
    shared: Arc<Shared>,
    /// The job until it is queued.
    job: Option<Job>,
    rx: oneshot::Receiver<Result<T, JoinError>>,
    state: JobState,
}

#[derive(Debug, Clone, Copy)]
enum JobState {
    /// Not polled yet.
    Idle,
    /// Waiting for room in the queue.
    WaitingRoom(WaitId),
    /// Pushed into the queue under this id (maybe taken by a thread since).
    Queued(u64),
    /// Resolved.
    Done,
}

impl<T> Future for PoolJob<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let shared = &this.shared;
        let capacity = shared.config.queue_capacity;
        let mut wakes = WakeList::new();
        let may_enqueue = match this.state {
            JobState::Idle | JobState::WaitingRoom(_) => {
                let mut st = lock(&shared.state);
                let granted = match this.state {
                    JobState::Idle if st.shutdown => false,
                    JobState::Idle => {
                        if st.room_waiters.has_waiting() || st.free(capacity) == 0 {
                            this.state = JobState::WaitingRoom(st.room_waiters.push(1, cx.waker()));
                            return Poll::Pending;
                        }
                        true
                    }
                    JobState::WaitingRoom(id) => {
                        match st.room_waiters.poll(id, cx.waker(), &mut wakes) {
                            WaitStatus::Granted => {
                                st.reserved -= 1;
                                !st.shutdown
                            }
                            WaitStatus::Waiting => return Poll::Pending,
                            WaitStatus::Gone => false, // drained by shutdown
                        }
                    }
                    _ => unreachable!(),
                };
                if granted {
                    let job = this.job.take().expect("job present until queued");
                    this.state = JobState::Queued(shared.enqueue(st, job));
                    true
                } else {
                    false
                }
            }
            JobState::Queued(_) => true,
            JobState::Done => panic!("`PoolJob` polled after completion"),
        };
        if !may_enqueue {
            this.state = JobState::Done;
            this.job = None;
            return Poll::Ready(Err(JoinError::Cancelled));
        }
        match Pin::new(&mut this.rx).poll(cx) {
            Poll::Ready(Ok(result)) => {
                this.state = JobState::Done;
                Poll::Ready(result)
            }
            // The job was dropped unrun (the pool could start no thread).
            Poll::Ready(Err(_)) => {
                this.state = JobState::Done;
                Poll::Ready(Err(JoinError::Cancelled))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for PoolJob<T> {
    fn drop(&mut self) {
        // First of all: a thread that has just dequeued the job sees that nobody
        // wants its result and skips it.
        self.rx.close();
        let capacity = self.shared.config.queue_capacity;
        let mut wakes = WakeList::new();
        let mut removed = None;
        match self.state {
            JobState::WaitingRoom(id) => {
                let mut st = lock(&self.shared.state);
                if st.room_waiters.remove(id, &mut wakes).is_some() {
                    // Room had been reserved for us: pass it on.
                    st.reserved -= 1;
                    st.grant_room(capacity, &mut wakes);
                }
            }
            JobState::Queued(id) => {
                let mut st = lock(&self.shared.state);
                if let Ok(pos) = st.queue.binary_search_by_key(&id, |j| j.id) {
                    // Not started: take it out so it never runs, and free its slot.
                    removed = st.queue.remove(pos);
                    st.grant_room(capacity, &mut wakes);
                }
                // Otherwise a thread has it, and skips it unless already started.
            }
            JobState::Idle | JobState::Done => {}
        }
        wakes.wake_all();
        drop(removed);
    }
}

impl<T> fmt::Debug for PoolJob<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolJob")
            .field("pool", &self.shared.config.name)
            .field("state", &self.state)
            .finish()
    }
}

static BLOCKING: OnceLock<Pool> = OnceLock::new();
static CPU: OnceLock<Pool> = OnceLock::new();

fn configure(cell: &'static OnceLock<Pool>, config: PoolConfig) -> Result<(), PoolConfigError> {
    config.validate()?;
    let mut config = Some(config);
    cell.get_or_init(|| Pool::new(config.take().expect("taken once")));
    match config {
        None => Ok(()),
        Some(_) => Err(PoolConfigError::AlreadyInitialized),
    }
}

/// The process-wide pool for blocking system calls (created with
/// [`PoolConfig::blocking`] on first use unless configured before).
pub fn blocking_pool() -> &'static Pool {
    BLOCKING.get_or_init(|| Pool::new(PoolConfig::blocking()))
}

/// The process-wide pool for CPU-heavy work (created with [`PoolConfig::cpu`] on
/// first use unless configured before).
pub fn cpu_pool() -> &'static Pool {
    CPU.get_or_init(|| Pool::new(PoolConfig::cpu()))
}

/// The process-wide pools used so far (blocking, then CPU), for reporting
/// them without creating one.
pub fn started_pools() -> impl Iterator<Item = &'static Pool> {
    [BLOCKING.get(), CPU.get()].into_iter().flatten()
}

/// Sets the blocking pool's configuration. Works only before its first use.
pub fn configure_blocking_pool(config: PoolConfig) -> Result<(), PoolConfigError> {
    configure(&BLOCKING, config)
}

/// Sets the CPU pool's configuration. Works only before its first use.
pub fn configure_cpu_pool(config: PoolConfig) -> Result<(), PoolConfigError> {
    configure(&CPU, config)
}

/// Runs a blocking function (a blocking system call: `open`, `stat`, DNS) on the
/// [blocking pool](blocking_pool), so the event loop keeps running other tasks.
/// The returned future is lazy: the job is queued when first polled.
pub fn spawn_blocking<F, T>(f: F) -> PoolJob<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    blocking_pool().run(f)
}

/// Runs CPU-heavy work on the [CPU pool](cpu_pool); the awaiting task resumes on
/// its own loop with the result. The returned future is lazy: the job is queued
/// when first polled.
pub fn offload<F, T>(f: F) -> PoolJob<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    cpu_pool().run(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::test_util::{poll_counting, CountingWaker};
    use futures_lite::future::block_on;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::mpsc as std_mpsc;

    fn small(name: &str, threads: usize, queue: usize) -> Pool {
        Pool::new(PoolConfig {
            max_threads: threads,
            queue_capacity: queue,
            ..small_config(name)
        })
    }

    /// One thread, a short queue, the process's priority, no background
    /// class, the kernel's slice.
    fn small_config(name: &str) -> PoolConfig {
        PoolConfig {
            name: name.into(),
            max_threads: 1,
            queue_capacity: 4,
            keep_alive: Duration::from_secs(5),
            nice: 0,
            background_after: None,
            slice: None,
        }
    }

    /// Occupies one pool thread until the returned sender is dropped or sent to.
    fn block_one_thread(pool: &Pool) -> (std_mpsc::Sender<()>, PoolJob<()>) {
        let (release_tx, release_rx) = std_mpsc::channel::<()>();
        let (started_tx, started_rx) = std_mpsc::channel::<()>();
        let mut job = pool.run(move || {
            started_tx.send(()).unwrap();
            let _ = release_rx.recv();
        });
        assert!(poll_counting(&mut job, &CountingWaker::new()).is_pending());
        started_rx.recv().unwrap();
        (release_tx, job)
    }

    #[test]
    fn runs_and_returns() {
        let pool = small("t-run", 2, 4);
        assert_eq!(pool.stats().threads, 0, "threads start lazily");
        let name = block_on(pool.run(|| std::thread::current().name().map(String::from)));
        assert_eq!(name.unwrap().as_deref(), Some("t-run-0"));
        let s = pool.stats();
        assert_eq!((s.threads, s.completed, s.queued), (1, 1, 0));
    }

    /// A keep-alive past what an `Instant` holds is "forever": the idle
    /// thread panicked computing its deadline, the pool still counted it
    /// idle, and the next job waited for it forever.
    #[test]
    fn a_keep_alive_of_duration_max_keeps_serving() {
        let pool = Pool::new(PoolConfig {
            name: "t-max".into(),
            max_threads: 1,
            queue_capacity: 4,
            keep_alive: Duration::MAX,
            nice: 0,
            background_after: None,
            slice: None,
        });
        assert_eq!(block_on(pool.run(|| 1)).unwrap(), 1);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(block_on(pool.run(|| 2)).unwrap(), 2);
    }

    /// This thread's nice value, from `/proc/thread-self/stat` (field 19).
    fn thread_nice() -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split_whitespace().nth(16).unwrap().parse().unwrap()
    }

    /// Offloaded work yields to the loops; a blocking call keeps the
    /// process's priority (it mostly sleeps, and what it does is urgent).
    #[test]
    fn cpu_pool_threads_run_at_a_lower_priority() {
        let base = thread_nice();
        let cpu = block_on(offload(thread_nice)).unwrap();
        assert_eq!(cpu, (base + i64::from(CPU_POOL_NICE)).min(19));
        let blocking = block_on(spawn_blocking(thread_nice)).unwrap();
        assert_eq!(blocking, base);
    }

    /// Where the process may leave the background class again (root here
    /// and in CI), offloaded work runs in it while the pool keeps up;
    /// elsewhere it stays at its nice value.
    #[test]
    fn cpu_pool_threads_run_in_the_background_where_allowed() {
        let config = PoolConfig::cpu();
        assert_eq!(config.background_after, Some(CPU_POOL_BACKGROUND_AFTER));
        // A pool of its own: the global one may be raised by other tests.
        let pool = Pool::new(PoolConfig {
            name: "t-bg".into(),
            ..config
        });
        let (bg, may) = block_on(pool.run(|| {
            let bg = priority::is_background();
            // The probe leaves this thread as it is.
            (bg, priority::may_leave_idle(thread_nice() as i32))
        }))
        .unwrap();
        assert_eq!(bg, may);
    }

    /// A pool's threads run on the time slice its config names (the CPU
    /// pool's by default), and on the kernel's where it names none.
    #[test]
    fn pool_threads_run_with_the_slice_asked_for() {
        assert_eq!(PoolConfig::cpu().slice, Some(CPU_POOL_SLICE));
        let asked = Duration::from_micros(150);
        let slice_in = |slice| {
            let pool = Pool::new(PoolConfig {
                slice,
                ..small_config("t-slice")
            });
            block_on(pool.run(|| priority::slice_of(0)))
                .unwrap()
                .expect("sched_getattr")
        };
        let with = slice_in(Some(asked));
        if with.is_zero() {
            eprintln!("skipped: this kernel keeps no time slice per thread (Linux 6.12+ does)");
            return;
        }
        assert_eq!(with, asked);
        assert_ne!(slice_in(None), asked, "a pool that asked for none");
    }

    /// A job that runs until the returned sender is sent to or dropped, and
    /// answers whether it ended in the background class; also whether it
    /// started in it (known once it has started).
    fn held_job(
        pool: &Pool,
        w: &Arc<CountingWaker>,
    ) -> (std_mpsc::Sender<()>, bool, PoolJob<bool>) {
        let (release_tx, release_rx) = std_mpsc::channel::<()>();
        let (started_tx, started_rx) = std_mpsc::channel::<bool>();
        let mut job = pool.run(move || {
            started_tx.send(priority::is_background()).unwrap();
            let _ = release_rx.recv();
            priority::is_background()
        });
        assert!(poll_counting(&mut job, w).is_pending());
        (release_tx, started_rx.recv().unwrap(), job)
    }

    /// `background_after` in the tests below: long enough that a busy
    /// machine's wake-ups stay under it.
    const AFTER: Duration = Duration::from_millis(200);

    /// A long job in the background class gives its core away at its
    /// checkpoints, at most once per interval; anywhere else a checkpoint
    /// does nothing.
    #[test]
    fn checkpoints_yield_only_in_background_jobs() {
        assert!((0..1000).all(|_| !checkpoint()), "a plain thread yielded");
        let pool = Pool::new(PoolConfig {
            name: "t-ckpt".into(),
            max_threads: 1,
            queue_capacity: 4,
            keep_alive: Duration::from_secs(5),
            nice: 0,
            background_after: Some(Duration::from_secs(30)),
            slice: None,
        });
        const RUN: Duration = Duration::from_millis(5);
        let (yields, background) = crate::block_on(pool.run(|| {
            let background = crate::priority::is_background();
            let until = Instant::now() + RUN;
            let mut yields = 0u32;
            while Instant::now() < until {
                yields += u32::from(checkpoint());
            }
            (yields, background)
        }))
        .unwrap();
        // One interval may pass between the job entering the class and its
        // first line.
        let most = (RUN.as_micros() / CHECKPOINT_EVERY.as_micros()) as u32 + 1;
        if background {
            assert!((1..=most).contains(&yields), "{yields} yields in {RUN:?}");
        } else {
            eprintln!("pool threads cannot enter the background class here: no yields");
            assert_eq!(yields, 0);
        }
    }

    /// The slice a pool asks for in the raise tests.
    const RAISED_SLICE: Duration = Duration::from_micros(250);

    /// A job that waits longer than `background_after` raises every thread
    /// of the pool out of the background class, the one in the middle of a
    /// job included, and the jobs after it run raised.
    #[test]
    fn a_starved_pool_raises_its_threads() {
        let pool = Pool::new(PoolConfig {
            name: "t-raise".into(),
            max_threads: 1,
            queue_capacity: 8,
            keep_alive: Duration::from_secs(5),
            nice: 5,
            background_after: Some(AFTER),
            slice: Some(RAISED_SLICE),
        });
        // The thread started (and its probe done) before the jobs that count:
        // a busy machine may take longer than `AFTER` to start a thread.
        block_on(pool.run(|| ())).unwrap();
        let w = CountingWaker::new();
        let (release_tx, started_in_background, first) = held_job(&pool, &w);
        if !priority::may_leave_idle(thread_nice() as i32 + 5) {
            assert!(!started_in_background, "never entered without a way out");
            return;
        }
        assert!(
            started_in_background,
            "a pool that keeps up runs in the background"
        );
        let mut second = pool.run(priority::is_background);
        assert!(poll_counting(&mut second, &w).is_pending());
        std::thread::sleep(3 * AFTER);
        // Queued behind a job that has now waited past `AFTER`: the pool raises.
        let mut third = pool.run(|| (priority::is_background(), priority::slice_of(0)));
        assert!(poll_counting(&mut third, &w).is_pending());
        release_tx.send(()).unwrap();
        assert!(!block_on(first).unwrap(), "the running job was raised");
        assert!(!block_on(second).unwrap());
        let (background, slice) = block_on(third).unwrap();
        assert!(!background);
        // Zero where the kernel keeps no slice per thread (before 6.12).
        let slice = slice.expect("sched_getattr");
        assert!(
            slice == RAISED_SLICE || slice.is_zero(),
            "a raised thread runs on the pool's slice, not {slice:?}"
        );
    }

    /// With nothing queued behind it, a job that runs in the background
    /// class for long is raised by an idle thread of the pool.
    #[test]
    fn a_long_background_job_is_raised() {
        let pool = Pool::new(PoolConfig {
            name: "t-long".into(),
            max_threads: 2,
            queue_capacity: 8,
            keep_alive: Duration::from_secs(5),
            nice: 5,
            background_after: Some(AFTER),
            slice: None,
        });
        if !priority::may_leave_idle(thread_nice() as i32 + 5) {
            return; // never in the background: nothing to raise
        }
        // Both threads started (and the probe done) first: two jobs that
        // wait for each other need two threads. One is left idle to watch.
        let both = Arc::new(std::sync::Barrier::new(2));
        let (b1, b2) = (both.clone(), both);
        let (mut j1, mut j2) = (pool.run(move || b1.wait()), pool.run(move || b2.wait()));
        let w = CountingWaker::new();
        let (p1, p2) = (poll_counting(&mut j1, &w), poll_counting(&mut j2, &w));
        // Both may be done at their first poll (the barrier met at once):
        // a finished job is not polled again.
        for (first, job) in [(p1, j1), (p2, j2)] {
            match first {
                Poll::Ready(r) => r.map(drop).unwrap(),
                Poll::Pending => block_on(job).map(drop).unwrap(),
            }
        }
        assert_eq!(pool.stats().threads, 2);
        let (release_tx, started_in_background, long) = held_job(&pool, &w);
        assert!(started_in_background);
        // Past RUN_BOUND x AFTER, with margin.
        std::thread::sleep((RUN_BOUND + 2) * AFTER);
        release_tx.send(()).unwrap();
        assert!(!block_on(long).unwrap(), "the long job was raised");
    }

    #[test]
    fn global_pools() {
        let n = block_on(spawn_blocking(|| {
            std::thread::current().name().map(String::from)
        }));
        assert!(n.unwrap().unwrap().starts_with("duality-blocking-"));
        let n = block_on(offload(|| std::thread::current().name().map(String::from)));
        assert!(n.unwrap().unwrap().starts_with("duality-cpu-"));
        assert_eq!(
            configure_cpu_pool(PoolConfig::cpu()),
            Err(PoolConfigError::AlreadyInitialized)
        );
        assert_eq!(blocking_pool().stats().max_threads, 64);
        assert_eq!(cpu_pool().stats().queue_capacity, 4096);
        assert!(matches!(
            configure_blocking_pool(PoolConfig {
                max_threads: 0,
                ..PoolConfig::blocking()
            }),
            Err(PoolConfigError::Invalid(_))
        ));
    }

    #[test]
    fn panic_surfaces_and_thread_survives() {
        let pool = small("t-panic", 1, 4);
        let err = block_on(pool.run(|| -> u8 { panic!("kaboom") })).unwrap_err();
        assert!(err.is_panic());
        assert_eq!(err.panic_message(), Some("kaboom"));
        assert_eq!(block_on(pool.run(|| 5)).unwrap(), 5);
        let s = pool.stats();
        assert_eq!((s.threads, s.completed), (1, 2));
    }

    #[test]
    fn dropped_job_never_runs() {
        let pool = small("t-drop", 1, 4);
        let (release, blocker) = block_one_thread(&pool);
        let ran = Arc::new(AtomicBool::new(false));
        // Never polled: never queued.
        let r = ran.clone();
        drop(pool.run(move || r.store(true, SeqCst)));
        // Queued, then dropped before a thread takes it.
        let r = ran.clone();
        let mut job = pool.run(move || r.store(true, SeqCst));
        assert!(poll_counting(&mut job, &CountingWaker::new()).is_pending());
        assert_eq!(pool.stats().queued, 1);
        drop(job);
        assert_eq!(pool.stats().queued, 0, "a dropped job leaves the queue");
        release.send(()).unwrap();
        block_on(blocker).unwrap();
        block_on(pool.run(|| ())).unwrap();
        assert!(!ran.load(SeqCst));
    }

    #[test]
    fn queue_bound_respected_and_waiters_resume() {
        let pool = small("t-bound", 1, 2);
        let (release, blocker) = block_one_thread(&pool);
        let w = CountingWaker::new();
        let mut jobs: Vec<_> = (0..4).map(|i| pool.run(move || i)).collect();
        assert!(poll_counting(&mut jobs[0], &w).is_pending());
        assert!(poll_counting(&mut jobs[1], &w).is_pending());
        assert!(poll_counting(&mut jobs[2], &w).is_pending());
        assert!(poll_counting(&mut jobs[3], &w).is_pending());
        let s = pool.stats();
        assert_eq!(
            (s.queued, s.threads),
            (2, 1),
            "queue holds at most its capacity"
        );
        release.send(()).unwrap();
        block_on(blocker).unwrap();
        let got: Vec<i32> = jobs.into_iter().map(|j| block_on(j).unwrap()).collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
        assert_eq!(pool.stats().completed, 5);
    }

    #[test]
    fn dropped_room_waiter_passes_room_on() {
        let pool = small("t-room", 1, 1);
        let (release, blocker) = block_one_thread(&pool);
        let (wa, wb) = (CountingWaker::new(), CountingWaker::new());
        let mut queued = pool.run(|| 0);
        let mut a = pool.run(|| 1);
        let mut b = pool.run(|| 2);
        assert!(poll_counting(&mut queued, &wa).is_pending());
        assert!(poll_counting(&mut a, &wa).is_pending());
        assert!(poll_counting(&mut b, &wb).is_pending());
        drop(queued); // frees the slot: reserved for `a`
        assert_eq!(
            wa.count(),
            1,
            "`a` woken once; no stray wake-up from `queued`"
        );
        assert_eq!(wb.count(), 0);
        drop(a); // cancelled: the slot goes to `b`
        assert_eq!(wb.count(), 1);
        assert!(poll_counting(&mut b, &wb).is_pending());
        assert_eq!(pool.stats().queued, 1);
        release.send(()).unwrap();
        block_on(blocker).unwrap();
        assert_eq!(block_on(b).unwrap(), 2);
    }

    #[test]
    fn thread_limit_and_stats() {
        let pool = small("t-limit", 2, 8);
        let (r1, b1) = block_one_thread(&pool);
        let (r2, b2) = block_one_thread(&pool);
        let mut extra = pool.run(|| 3);
        assert!(poll_counting(&mut extra, &CountingWaker::new()).is_pending());
        let s = pool.stats();
        assert_eq!((s.threads, s.idle, s.queued, s.max_threads), (2, 0, 1, 2));
        assert_eq!(s.name, "t-limit");
        drop((r1, r2));
        block_on(b1).unwrap();
        block_on(b2).unwrap();
        assert_eq!(block_on(extra).unwrap(), 3);
        assert_eq!(pool.stats().completed, 3);
    }

    #[test]
    fn idle_threads_retire_after_keep_alive() {
        let pool = Pool::new(PoolConfig {
            name: "t-idle".into(),
            max_threads: 2,
            queue_capacity: 4,
            keep_alive: Duration::from_millis(20),
            nice: 0,
            background_after: None,
            slice: None,
        });
        block_on(pool.run(|| ())).unwrap();
        assert_eq!(pool.stats().threads, 1);
        let start = Instant::now();
        while pool.stats().threads > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "thread never retired"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // ...and a new one starts on demand.
        block_on(pool.run(|| ())).unwrap();
        assert_eq!(pool.stats().completed, 2);
    }

    #[test]
    fn dropped_pool_cancels_unqueued_and_runs_queued() {
        let pool = small("t-shutdown", 1, 1);
        let (release, blocker) = block_one_thread(&pool);
        let mut queued = pool.run(|| 1);
        assert!(poll_counting(&mut queued, &CountingWaker::new()).is_pending());
        let w = CountingWaker::new();
        let mut waiting = pool.run(|| 2);
        assert!(poll_counting(&mut waiting, &w).is_pending());
        let never = pool.run(|| 3);
        drop(pool);
        assert_eq!(w.count(), 1);
        assert!(block_on(waiting).unwrap_err().is_cancelled());
        assert!(block_on(never).unwrap_err().is_cancelled());
        release.send(()).unwrap();
        block_on(blocker).unwrap();
        assert_eq!(block_on(queued).unwrap(), 1);
    }

    #[test]
    fn types_are_send() {
        fn check<T: Send>() {}
        check::<PoolJob<Vec<u8>>>();
        fn sync<T: Send + Sync>() {}
        sync::<Pool>();
    }
}
