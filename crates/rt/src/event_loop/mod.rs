//! The event loop: one per OS thread.
//!
//! A loop owns a local run queue, a hand-off queue that other threads push
//! into, a reactor over `mio`, and a timer wheel. One turn:
//!
//! 1. run ready tasks, at most `budget` of them (each poll is timed into the
//!    poll-time histogram, its start kept for the servers' per-request
//!    metrics (`stats::poll_started`); polls over the long-poll threshold
//!    are counted and logged);
//! 2. take the hand-off queue in one batch;
//! 3. poll I/O — without waiting if work remains, otherwise until the next
//!    timer (announcing "sleeping" first, so that other threads know they
//!    must wake it; while it is awake nobody writes its eventfd; before
//!    sleeping, its histograms are merged into the readable copies);
//! 4. fire due timers, and take the hand-off queue again.
//!
//! Shutdown protocol (`EventLoop`'s drop):
//! 1. every task waiting on this loop's I/O or timers is aborted, and the run
//!    queue is run until empty, so aborted futures are dropped here;
//! 2. the hand-off queue is emptied and the loop's registry slot released.
//!
//! Tasks parked on something else (a channel, a mutex) are freed when the last
//! reference to them goes, not at shutdown.

mod context;
pub(crate) mod registry;

use crate::backend::{Backend, BackendRef, IoBackend};
use crate::loom::lock_std;
use crate::stats::{Latency, LoopSnapshot, RequestMetrics};
use crate::task::{self, JoinHandle, LocalQueue, TaskRef};
use crate::time::{TimerShared, TimerWheel};
use hdrhistogram::Histogram;
use registry::Shared;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::panic::Location;
use std::pin::pin;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

pub(crate) use context::with_current;

/// How a loop behaves. `Default` gives sensible values for servers.
#[derive(Clone)]
pub struct LoopConfig {
    /// Thread/loop name, shown in snapshots and logs.
    pub name: Option<String>,
    /// Task polls per turn before the loop looks at I/O again (at least
    /// one is polled).
    pub budget: usize,
    /// Time spent running tasks per turn before the loop looks at I/O again
    /// (checked between polls; at least one task is polled).
    pub turn_time: Duration,
    /// A single poll longer than this is logged as a warning (`None`: never).
    pub long_poll_threshold: Option<Duration>,
    /// Remember where each type of task was spawned (once per type, not per
    /// task), so long-poll warnings can name the spawn location: the first
    /// one seen for a type spawned from several places.
    pub track_spawn_locations: bool,
    /// Capacity of the reactor's event buffer (epoll).
    pub events_capacity: usize,
    /// The OS interface for I/O: epoll or io_uring (falls back to epoll,
    /// with one log line, where the kernel refuses io_uring). Default:
    /// [`default_io_backend`](crate::default_io_backend).
    pub io: IoBackend,
    /// io_uring: submission-queue entries (the completion queue has four
    /// times as many).
    pub ring_entries: u32,
    /// io_uring: provided receive buffers per loop (rounded up to a power of
    /// two); connections beyond this many receiving at once wait a turn.
    pub ring_buffers: u16,
    /// io_uring: the size of each provided receive buffer.
    pub ring_buffer_size: u32,
    /// How long the loop waits (yielding) for an expected answer from
    /// another thread before it sleeps; see [`RemoteWait`]. Zero: never.
    pub remote_spin: Duration,
    /// How long an idle loop keeps looking for work (yielding the core
    /// between looks) before it sleeps in the reactor, when no answer is
    /// expected. A stream of hand-offs arriving microseconds apart then
    /// never pays for a wake-up. Zero (the default): sleep at once.
    pub idle_spin: Duration,
    /// Loops that share ready tasks (the `steal` model): a loop left with
    /// ready tasks after its turn hands half of them to a member that sleeps.
    pub work_group: Option<Arc<WorkGroup>>,
    /// Faults this loop's sockets inject (tests; see [`crate::faults`]).
    /// Default: `DUALITY_FAULTS`, normally none.
    pub faults: crate::faults::Faults,
    /// Called on the loop's thread when it is about to sleep, at most once
    /// per [`IDLE_HOOK_EVERY`] and only after [`IDLE_HOOK_QUIET`] without
    /// work: where a server gives memory its thread freed
    /// back to the system (the allocator keeps a thread's freed pages until
    /// that thread allocates again, and an idle thread does not). Default:
    /// what [`set_default_idle_hook`] set, normally nothing.
    pub idle_hook: Option<fn()>,
    /// The CPU the loop's thread is pinned to ([`crate::affinity`]), from
    /// before the loop allocates anything; `None` (the default): wherever
    /// the kernel places it. A CPU the process may not use fails
    /// [`LoopThread::spawn`].
    pub cpu: Option<usize>,
    /// The time slice the loop's thread asks the kernel for (EEVDF's custom
    /// slice, Linux 6.12 and later, clamped there to 0.1-100 ms; older
    /// kernels ignore it): a loop with a shorter slice than the thread
    /// running on its core preempts that thread when it wakes, instead of
    /// waiting up to that thread's slice (about a millisecond on small
    /// machines). No privilege needed; the loop's share of the CPU does not
    /// change. `None` (the default): whatever slice the thread inherited
    /// (the kernel's unless a parent set its own), and [`RAISED_SLICE`]
    /// while a pool of this process runs raised out of the kernel's
    /// background class ([`crate::pool::PoolConfig::background_after`]).
    /// A refusal is logged, not fatal.
    pub slice: Option<Duration>,
}

/// How stale a loop's published statistics may be (its poll histogram and
/// per-request metrics are merged into the readable copies this often).
const PUBLISH_EVERY: Duration = Duration::from_millis(10);

/// How often at most a loop runs its [`LoopConfig::idle_hook`].
pub const IDLE_HOOK_EVERY: Duration = Duration::from_secs(1);

/// How long a loop must have had no work before it runs its
/// [`LoopConfig::idle_hook`]: a loop under load sleeps between requests
/// microseconds at a time, and a hook run then (giving freed memory back
/// can take milliseconds after large buffers were freed) holds up the
/// requests that arrive meanwhile.
pub const IDLE_HOOK_QUIET: Duration = Duration::from_millis(50);

static DEFAULT_IDLE_HOOK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets the [`LoopConfig::idle_hook`] of loops created from now on with
/// default settings (once per process; later calls are ignored).
pub fn set_default_idle_hook(hook: fn()) {
    let _ = DEFAULT_IDLE_HOOK.set(hook);
}

/// A set of loops that balance ready tasks among themselves.
///
/// The local run queue is intrusive and owned by one thread, so instead of
/// thieves reaching into it, a loop that still has ready tasks after its
/// budget looks for an idle member (one that announced it sleeps) and hands
/// it half of the surplus through that member's hand-off queue. The moved
/// tasks' owner id changes, so their later wake-ups go to the new loop. The
/// effect is the same as stealing: idle loops get work from busy ones.
#[derive(Default)]
pub struct WorkGroup {
    members: std::sync::RwLock<Vec<LoopHandle>>,
    moved: std::sync::atomic::AtomicU64,
}

impl WorkGroup {
    /// An empty group; loops join it when created with it in their config.
    pub fn new() -> Arc<WorkGroup> {
        Arc::new(WorkGroup::default())
    }

    /// Tasks moved between members so far.
    pub fn tasks_moved(&self) -> u64 {
        self.moved.load(Relaxed)
    }

    fn join(&self, h: LoopHandle) {
        self.members
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(h);
    }

    fn leave(&self, id: u16) {
        self.members
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| m.id() != id);
    }

    /// Called by a loop with `surplus` ready tasks: moves half to a sleeping member.
    fn share(&self, from: &Local) {
        let surplus = from.run_queue.len();
        if surplus < 2 {
            return;
        }
        let members = self.members.read().unwrap_or_else(|e| e.into_inner());
        let Some(to) = members
            .iter()
            .find(|m| m.id() != from.shared.id && m.shared.is_sleeping())
        else {
            return;
        };
        let n = surplus / 2;
        for _ in 0..n {
            let Some(t) = from.run_queue.pop() else { break };
            t.header().set_owner(to.id());
            from.shared.stats.tasks_alive.fetch_sub(1, Relaxed);
            to.shared.stats.tasks_alive.fetch_add(1, Relaxed);
            to.shared.handoff.push(t);
        }
        self.moved.fetch_add(n as u64, Relaxed);
        to.shared.notify();
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            name: None,
            budget: 128,
            turn_time: Duration::from_millis(1),
            long_poll_threshold: Some(Duration::from_millis(10)),
            track_spawn_locations: false,
            events_capacity: 1024,
            io: crate::backend::default_io_backend(),
            ring_entries: 1024,
            ring_buffers: 512,
            ring_buffer_size: 4096,
            remote_spin: Duration::from_micros(50),
            idle_spin: Duration::ZERO,
            work_group: None,
            faults: crate::faults::default_faults(),
            idle_hook: DEFAULT_IDLE_HOOK.get().copied(),
            cpu: None,
            slice: None,
        }
    }
}

/// The slice a loop with no [`LoopConfig::slice`] of its own asks for while
/// a pool of this process runs raised out of the background class: the CPU
/// pool's threads then compete with the loops for the cores, and a waking
/// loop on a longer slice than the thread on its core (the load generator's,
/// a compressing pool thread's) would wait for the next scheduler tick.
/// Only then: beside a load generator on two cores a short slice for good
/// moved the cache's throughput either way
/// (`docs/results/models/slice-ab-93f9598/`).
pub const RAISED_SLICE: Duration = Duration::from_micros(100);

/// The thread-owned half of a loop.
pub(crate) struct Local {
    pub(crate) shared: &'static Shared,
    pub(crate) run_queue: LocalQueue,
    pub(crate) reactor: Backend,
    pub(crate) timers: RefCell<TimerWheel<Arc<TimerShared>>>,
    pub(crate) start: Instant,
    config: LoopConfig,
    hist: RefCell<Histogram<u64>>,
    last_publish: Cell<Instant>,
    /// When the idle hook last ran.
    last_idle_hook: Cell<Instant>,
    /// When the loop last had work (the turn's clock when it ran a task).
    last_work: Cell<Instant>,
    /// Whether the loop ran a task since the idle hook last ran: the work
    /// that may have freed memory the hook should give back.
    idle_hook_owed: Cell<bool>,
    /// When the task poll running now started (see [`crate::stats::poll_started`]).
    pub(crate) poll_start: Cell<crate::stats::Stamp>,
    /// The clock as the last turn's timers read it (see [`crate::time::loop_now`]).
    pub(crate) turn_now: Cell<Instant>,
    /// While the loop runs on [`RAISED_SLICE`]: the slice it had before.
    slice_before: Cell<Option<Duration>>,
    /// Per-request metrics recorded on this loop since the last merge.
    pub(crate) requests: RefCell<RequestMetrics>,
    /// The reset epoch of the readable copy that `requests` belongs to.
    requests_epoch: Cell<u64>,
    /// Tasks of loops that are gone, woken on this thread: dropped at the
    /// start of the next turn, not inside `wake` (see [`schedule`]).
    orphans: RefCell<Vec<TaskRef>>,
    /// The long-poll warning, at most once a second: a burst of slow polls
    /// (a busy machine, a flood of refusals) would otherwise log a line
    /// each, slowing the loop further. The counter counts every one.
    long_poll_log: RefCell<crate::time::LogEvery>,
}

impl Local {
    /// Milliseconds since the loop started, rounded down (for "now").
    pub(crate) fn tick_floor(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_millis() as u64
    }

    /// Milliseconds since the loop started, rounded up (for deadlines, so a
    /// timer never fires early).
    pub(crate) fn tick_ceil(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.start);
        let ms = d.as_millis() as u64;
        if d > Duration::from_millis(ms) {
            ms + 1
        } else {
            ms
        }
    }

    fn run_tasks(&self) -> usize {
        let threshold = self.config.long_poll_threshold;
        let track = self.config.track_spawn_locations;
        let mut hist = self.hist.borrow_mut();
        // The loops' clock (TSC): a poll reads it once.
        let mut t0 = crate::stats::Stamp::now();
        let turn_until = t0 + self.config.turn_time;
        let mut n = 0;
        // Look at I/O again after `budget` polls or `turn_time`, whichever
        // comes first: with expensive polls, a count alone would keep a
        // newly ready connection waiting for many milliseconds. One poll a
        // turn at least: a budget or turn time of 0 must not starve tasks.
        while n == 0 || (n < self.config.budget && t0 < turn_until) {
            let Some(task) = self.run_queue.pop() else {
                break;
            };
            let vtable = task.vtable();
            self.poll_start.set(t0);
            {
                let _budget = crate::coop::start_poll();
                task.run();
            }
            let t1 = crate::stats::Stamp::now();
            let took = t1 - t0;
            t0 = t1;
            let _ = hist.record(took.as_nanos() as u64);
            n += 1;
            if let Some(th) = threshold {
                if took > th {
                    self.shared.stats.long_polls.fetch_add(1, Relaxed);
                    let log = self.long_poll_log.borrow_mut().check(Instant::now());
                    if let Some(not_logged) = log {
                        let name = (vtable.type_name)();
                        match track.then(|| task::sites::of(vtable)).flatten() {
                            Some(loc) => tracing::warn!(
                                loop_id = self.shared.id,
                                task = name,
                                spawned_at = %loc,
                                took_us = took.as_micros() as u64,
                                not_logged,
                                "a task blocked its event loop"
                            ),
                            None => tracing::warn!(
                                loop_id = self.shared.id,
                                task = name,
                                took_us = took.as_micros() as u64,
                                not_logged,
                                "a task blocked its event loop"
                            ),
                        }
                    }
                }
            }
        }
        if n > 0 {
            self.shared.stats.polls.fetch_add(n as u64, Relaxed);
        }
        n
    }

    fn drain_handoff(&self) {
        let n = self.shared.handoff.drain_into(&self.run_queue);
        if n > 0 {
            self.shared.stats.handoffs.fetch_add(n as u64, Relaxed);
            self.shared.stats.handoff_batches.fetch_add(1, Relaxed);
        }
    }

    fn fire_timers(&self) {
        let now = Instant::now();
        self.turn_now.set(now);
        let now = self.tick_floor(now);
        let mut fired = 0u64;
        self.timers
            .borrow_mut()
            .advance(now, &mut |t: Arc<TimerShared>| {
                t.fire();
                fired += 1;
            });
        if fired > 0 {
            self.shared.stats.timers_fired.fetch_add(fired, Relaxed);
        }
    }

    /// One turn of the loop. `main_ready` tells whether a `block_on` future
    /// is waiting to be polled (then the loop must not block).
    fn turn(&self) -> io::Result<()> {
        self.follow_requests_reset();
        self.drop_orphans();
        if self.run_tasks() > 0 {
            self.idle_hook_owed.set(true);
            self.last_work.set(self.turn_now.get());
        }
        if let Some(g) = &self.config.work_group {
            g.share(self);
        }
        self.drain_handoff();
        let busy = !self.run_queue.is_empty() || self.shared.main_woken.load(Relaxed);
        let mut timeout = if busy {
            Some(Duration::ZERO)
        } else {
            self.timers.borrow().next_deadline().map(|tick| {
                let at = self.start + Duration::from_millis(tick);
                at.saturating_duration_since(Instant::now())
            })
        };
        if timeout != Some(Duration::ZERO) && self.spin_before_sleep()? {
            timeout = Some(Duration::ZERO);
        }
        let sleeping = timeout != Some(Duration::ZERO);
        if sleeping {
            self.follow_pool_raise();
            // What was recorded must not wait for the next wake-up to
            // become readable, nor the memory the last work freed to go
            // back: each may shorten the sleep to when it is due.
            for due in [self.publish_before_sleep(), self.idle_hook()]
                .into_iter()
                .flatten()
            {
                timeout = Some(timeout.map_or(due, |t| t.min(due)));
            }
            // Nothing is ready: say so before blocking. `publish` runs at the
            // end of a turn, so a loop that sleeps after a busy turn would
            // otherwise show that turn's depth in `load()` until it wakes —
            // and the favor-active acceptor waits for loads to fall.
            self.shared.stats.run_queue_depth.store(0, Relaxed);
        }
        if sleeping && !self.shared.prepare_sleep() {
            timeout = Some(Duration::ZERO);
        }
        // A busy loop with no sockets (a payload loop) has no I/O to look
        // at: skip the system call. A pending wake-fd write is drained at
        // the next sleep.
        let polled = if timeout == Some(Duration::ZERO) && self.reactor.has_no_sources() {
            Ok((0, false))
        } else {
            self.reactor.poll(timeout)
        };
        if sleeping {
            self.shared.after_sleep();
        }
        self.dispatched(polled?);
        self.fire_timers();
        self.drain_handoff();
        self.publish();
        Ok(())
    }

    /// Before sleeping (the slice counts when the loop wakes): a loop with
    /// no slice of its own runs on [`RAISED_SLICE`] while a pool is raised
    /// out of the background class, and on the slice it had otherwise.
    /// Two system calls per raise at most; a relaxed load per sleep.
    fn follow_pool_raise(&self) {
        if self.config.slice.is_some() {
            return;
        }
        let raised = crate::pool::raised();
        match (raised, self.slice_before.get()) {
            (true, None) => match crate::priority::slice_of(0) {
                Ok(before) => {
                    if let Err(e) = crate::priority::set_slice(RAISED_SLICE) {
                        tracing::debug!("a loop keeps its slice while a pool is raised: {e}");
                    } else {
                        self.slice_before.set(Some(before));
                    }
                }
                Err(e) => tracing::debug!("a loop cannot read its slice: {e}"),
            },
            (false, Some(_)) => self.restore_slice(),
            _ => {}
        }
    }

    /// Gives the loop's thread back the slice it had before
    /// [`follow_pool_raise`](Self::follow_pool_raise) shortened it.
    fn restore_slice(&self) {
        if let Some(before) = self.slice_before.take() {
            if let Err(e) = crate::priority::set_slice(before) {
                tracing::debug!("a loop cannot restore its slice of {before:?}: {e}");
            }
        }
    }

    /// Books a reactor poll's (events, wake fd fired) result.
    fn dispatched(&self, (events, woke): (usize, bool)) {
        if woke {
            self.shared.clear_wake_fd();
        }
        if events > 0 {
            self.shared
                .stats
                .io_events
                .fetch_add(events as u64, Relaxed);
        }
    }

    /// Before sleeping: if a task of ours waits for an answer from another
    /// thread (a payload hand-off), wait for it briefly instead of sleeping in
    /// epoll and being woken through the eventfd — a wake-up costs far more
    /// than the answer usually takes. While waiting, keep taking I/O events
    /// (requests of other connections arriving meanwhile join the next batch
    /// instead of waiting for this answer) and yield the core between looks
    /// (the answering thread may share it). True if work arrived.
    ///
    /// With no answer expected, an idle loop spins for `idle_spin` the same
    /// way (payload loops: the next job usually follows within microseconds).
    fn spin_before_sleep(&self) -> io::Result<bool> {
        let spin = if self.shared.stats.awaiting_remote.load(Relaxed) > 0 {
            self.config.remote_spin
        } else {
            self.config.idle_spin
        };
        // Not while pool jobs run in the background class: a yield below
        // would hand one the core until the next tick.
        let now = Instant::now();
        if spin.is_zero() || crate::pool::background_busy(now) {
            return Ok(false);
        }
        self.shared.stats.spins.fetch_add(1, Relaxed);
        let until = now + spin;
        loop {
            if !self.shared.handoff.is_empty() {
                return Ok(true);
            }
            if !self.reactor.has_no_sources() {
                self.dispatched(self.reactor.poll(Some(Duration::ZERO))?);
            }
            if !self.run_queue.is_empty() || self.shared.main_woken.load(Relaxed) {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= until || crate::pool::background_busy(now) {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }

    /// Runs the idle hook if the loop worked since it last ran, it has not
    /// run for [`IDLE_HOOK_EVERY`] and the loop has had no work for
    /// [`IDLE_HOOK_QUIET`]. If it is owed but not due yet, returns how long
    /// the loop may sleep before it is: a loop that
    /// fell asleep with the hook owed would otherwise keep what its last
    /// burst of work freed for as long as nothing wakes it. A loop that did
    /// nothing since the hook sleeps without a deadline.
    fn idle_hook(&self) -> Option<Duration> {
        let hook = self.config.idle_hook?;
        if !self.idle_hook_owed.get() {
            return None;
        }
        let due = (self.last_idle_hook.get() + IDLE_HOOK_EVERY)
            .max(self.last_work.get() + IDLE_HOOK_QUIET);
        let now = Instant::now();
        if now < due {
            return Some(due - now);
        }
        self.last_idle_hook.set(now);
        self.idle_hook_owed.set(false);
        hook();
        None
    }

    /// Makes the loop's numbers readable from other threads.
    fn publish(&self) {
        let s = &self.shared.stats;
        s.turns.fetch_add(1, Relaxed);
        s.run_queue_depth.store(self.run_queue.len(), Relaxed);
        let now = Instant::now();
        if now.duration_since(self.last_publish.get()) >= PUBLISH_EVERY {
            self.publish_timed(now);
        }
    }

    /// What [`PUBLISH_EVERY`] refreshes: the gauges and the histograms.
    fn publish_timed(&self, now: Instant) {
        let s = &self.shared.stats;
        self.last_publish.set(now);
        s.io_sources.store(self.reactor.sources(), Relaxed);
        s.timers_pending.store(self.timers.borrow().len(), Relaxed);
        self.publish_histograms();
    }

    /// Before sleeping: publishes what was recorded if the last publish is
    /// [`PUBLISH_EVERY`] old, else returns how long the loop may sleep
    /// before it is (None: nothing recorded, sleep as long as need be).
    /// Merging on every sleep cost more than the requests it counted: a
    /// merge walks and clears four histograms of a few thousand buckets,
    /// and a loop under moderate load sleeps thousands of times a second.
    fn publish_before_sleep(&self) -> Option<Duration> {
        if self.hist.borrow().is_empty() && self.requests.borrow().is_empty() {
            return None;
        }
        let since = self.last_publish.get().elapsed();
        if since < PUBLISH_EVERY {
            return Some(PUBLISH_EVERY - since);
        }
        self.publish_timed(Instant::now());
        None
    }

    /// Merges the poll times and per-request metrics recorded since the
    /// last merge into the readable copies (every [`PUBLISH_EVERY`] while
    /// the loop works, and at most that long after it falls asleep; nothing
    /// to do, no lock taken).
    fn publish_histograms(&self) {
        let mut local = self.hist.borrow_mut();
        if !local.is_empty() {
            let _ = lock_std(&self.shared.poll_hist).add(&*local);
            local.reset();
        }
        drop(local);
        self.publish_requests();
    }

    /// Merges the per-request metrics recorded since the last merge into
    /// the readable copy, unless that copy was reset meanwhile (then they
    /// are dropped: they were recorded in the turn the reset came in, or
    /// before it).
    fn publish_requests(&self) {
        let mut local = self.requests.borrow_mut();
        if local.is_empty() {
            return;
        }
        let mut published = lock_std(&self.shared.requests);
        // Written under this lock only, so Relaxed reads its latest value.
        let epoch = self.shared.requests_epoch.load(Relaxed);
        if epoch == self.requests_epoch.get() {
            published.add(&local);
        } else {
            self.requests_epoch.set(epoch);
        }
        local.reset();
    }

    /// At the start of a turn: forgets the unmerged per-request metrics if
    /// they were reset since the last turn, so what the loop records from
    /// now on counts (an idle loop's first requests after a reset were
    /// dropped with them by the merge). One load per turn.
    fn follow_requests_reset(&self) {
        let epoch = self.shared.requests_epoch.load(Relaxed);
        if epoch != self.requests_epoch.get() {
            self.requests.borrow_mut().reset();
            self.requests_epoch.set(epoch);
        }
    }

    /// Drops the tasks [`schedule`] set aside (their drops may wake, and set
    /// aside, more).
    fn drop_orphans(&self) {
        loop {
            let orphans = std::mem::take(&mut *self.orphans.borrow_mut());
            if orphans.is_empty() {
                return;
            }
            orphans.into_iter().for_each(cancel_orphan);
        }
    }

    fn shutdown(&self) {
        self.drop_orphans();
        // Abort every task parked on our I/O or timers, then run the queue so
        // their futures are dropped here, on their own thread.
        loop {
            let mut wakers = Vec::new();
            self.reactor.shutdown_wakers(&mut wakers);
            self.timers
                .borrow_mut()
                .advance(u64::MAX, &mut |t: Arc<TimerShared>| {
                    if let Some(w) = t.take_waker() {
                        wakers.push(w);
                    }
                });
            for w in wakers {
                task::abort_by_waker(&w);
            }
            self.drain_handoff();
            if self.run_queue.is_empty() {
                break;
            }
            while let Some(t) = self.run_queue.pop() {
                task::abort_task(&t);
                t.run();
            }
        }
        cancel_handoff(self.shared);
        self.drop_orphans();
        self.publish();
    }
}

/// Routes a woken task to its loop: the local queue if we are on that loop's
/// thread, its hand-off queue otherwise.
#[cfg(not(all(test, loom)))]
pub(crate) fn schedule(task: TaskRef) {
    route(task)
}

/// Under loom there are no running loops: a task of the task models'
/// pretend loops goes to the model's run queue, which the model's runner
/// drains; a task of a loop the registry's models made is routed as
/// always (to its loop's hand-off queue, or cancelled once the loop ended).
#[cfg(all(test, loom))]
pub(crate) fn schedule(task: TaskRef) {
    if registry::modeled(task.header().owner()) {
        route(task)
    } else {
        task::loom_tests::schedule(task)
    }
}

fn route(task: TaskRef) {
    let owner = task.header().owner();
    with_current(|cur| match cur {
        Some(local) if local.shared.id == owner => local.run_queue.push(task),
        _ => match registry::get(owner) {
            Some(shared) => {
                shared.handoff.push(task);
                shared.notify();
                // The loop may have ended between the look and the push, after
                // it cleared its queue: nobody would take the task then.
                if registry::get(owner).is_none() {
                    take_handoff(shared, |t| match cur {
                        Some(l) => l.orphans.borrow_mut().push(t),
                        None => cancel_orphan(t),
                    });
                }
            }
            // The loop is gone; the task can never run: it is cancelled (its
            // future dropped, its JoinHandle told) — but not here on a loop:
            // the waker's caller may hold a lock that the future's drop takes
            // (a socket's state, while its completion wakes the writer: the
            // drop closes that socket), so this loop does it next turn.
            None => match cur {
                Some(local) => local.orphans.borrow_mut().push(task),
                None => cancel_orphan(task),
            },
        },
    })
}

/// Cancels every task queued to `shared`'s loop, which has ended (or is
/// ending and will take nothing more).
pub(crate) fn cancel_handoff(shared: &Shared) {
    take_handoff(shared, cancel_orphan);
}

/// Takes every task queued to `shared`'s loop, oldest first.
fn take_handoff(shared: &Shared, mut each: impl FnMut(TaskRef)) {
    let local = task::LocalQueue::new();
    shared.handoff.drain_into(&local);
    while let Some(t) = local.pop() {
        each(t);
    }
}

/// Ends a task whose loop is gone (it holds the queue's reference): its
/// future is dropped and its `JoinHandle` resolves to `Cancelled`, instead of
/// the task lingering, never polled, for as long as the handle lives.
fn cancel_orphan(task: TaskRef) {
    task::abort_task(&task);
    task.run();
}

/// A task's future was dropped.
pub(crate) fn task_finished(owner: u16) {
    task::count_finished();
    #[cfg(all(test, loom))]
    if !registry::modeled(owner) {
        return;
    }
    registry::task_ended(owner, registry::get(owner));
}

#[track_caller]
pub(crate) fn try_spawn_local<F>(future: F) -> Result<JoinHandle<F::Output>, F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let location = Location::caller();
    with_current(move |cur| match cur {
        None => Err(future),
        Some(local) => {
            let id = local.shared.id;
            let (queued, join) = task::new_task(future, id);
            if local.config.track_spawn_locations {
                task::sites::note(queued.vtable(), location);
            }
            local.shared.stats.tasks_alive.fetch_add(1, Relaxed);
            local.run_queue.push(queued);
            Ok(join)
        }
    })
}

pub(crate) fn current_reactor() -> Option<BackendRef> {
    with_current(|cur| cur.map(|l| l.reactor.handle()))
}

/// The faults the loop running on this thread injects (none off a loop).
pub(crate) fn current_faults() -> crate::faults::Faults {
    with_current(|cur| cur.map_or(crate::faults::Faults::NONE, |l| l.config.faults))
}

/// The I/O backend of the loop running on this thread (after any fallback).
pub fn current_io_backend() -> Option<IoBackend> {
    with_current(|cur| cur.map(|l| l.reactor.kind()))
}

/// The handle of the loop running on this thread, if any.
pub fn current() -> Option<LoopHandle> {
    with_current(|cur| cur.map(|l| LoopHandle::of(l.shared)))
}

/// A cheap, `Send` handle to a loop: spawn onto it, read its numbers, stop it.
#[derive(Clone, Copy)]
pub struct LoopHandle {
    shared: &'static Shared,
    /// The slot's generation when the handle was made: `stop` on a handle
    /// whose loop has ended is a no-op even if its slot was reused.
    generation: u32,
}

impl std::fmt::Debug for LoopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoopHandle({})", self.shared.id)
    }
}

impl LoopHandle {
    fn of(shared: &'static Shared) -> LoopHandle {
        LoopHandle {
            shared,
            generation: shared.generation.load(Acquire),
        }
    }

    /// False once the loop has ended (its slot may then serve another loop).
    pub fn is_current(&self) -> bool {
        // SeqCst: see `registry::release`.
        self.shared.generation.load(SeqCst) == self.generation
    }

    /// The loop's id (unique among live loops).
    pub fn id(&self) -> u16 {
        self.shared.id
    }

    /// Spawns a task on this loop from any thread. If the loop has ended
    /// (or ends before the task runs), the task is cancelled: its future is
    /// dropped unpolled and the [`JoinHandle`] resolves to
    /// [`JoinError::Cancelled`](crate::JoinError::Cancelled).
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (queued, join) = task::new_task(future, self.shared.id);
        // SeqCst, as the look at the generation after it: see
        // `registry::release`.
        self.shared.stats.tasks_alive.fetch_add(1, SeqCst);
        registry::seq_cst_fence();
        if !self.is_current() {
            // The loop ended (its id may be another loop's now): the task
            // never runs, and its handle says so.
            cancel_orphan(queued);
            return join;
        }
        schedule(queued);
        join
    }

    /// Asks the loop to return from `run` (used by [`LoopThread`]).
    pub fn stop(&self) {
        if !self.is_current() {
            return;
        }
        self.shared.stop.store(true, SeqCst);
        self.shared.notify();
    }

    /// The loop's numbers now (the poll-time histogram lags by up to 10 ms
    /// while the loop is busy; it is merged before the loop sleeps).
    pub fn snapshot(&self) -> LoopSnapshot {
        LoopSnapshot::read(self.shared)
    }

    /// [`LoopSnapshot::long_polls`] alone: one load, for readers (a plain
    /// `stats`, the metrics listener) that want no histogram quantiles.
    pub fn long_polls(&self) -> u64 {
        self.shared.stats.long_polls.load(Relaxed)
    }

    /// The per-request metrics recorded on this loop (they lag by up to
    /// 10 ms while the loop is busy; a loop publishes them before it sleeps).
    pub fn request_metrics(&self) -> RequestMetrics {
        lock_std(&self.shared.requests).clone()
    }

    /// [`RequestMetrics::yields`] of this loop alone, without copying its
    /// histograms (same lag as [`request_metrics`](Self::request_metrics)).
    pub fn request_yields(&self) -> u64 {
        lock_std(&self.shared.requests).yields
    }

    /// Forgets this loop's per-request metrics, those it has not published
    /// yet included.
    pub fn reset_request_metrics(&self) {
        let mut p = lock_std(&self.shared.requests);
        p.reset();
        self.shared.requests_epoch.fetch_add(1, Relaxed);
    }

    /// The loop's poll-time distribution (lags by up to 10 ms; its sum is
    /// estimated from the histogram's mean).
    pub fn poll_latency(&self) -> Latency {
        Latency::from_histogram(lock_std(&self.shared.poll_hist).clone())
    }

    /// Ready work waiting on this loop: its run-queue depth (as of its last
    /// turn) plus tasks pushed to it and not yet taken. Cheap: two atomic loads.
    pub fn load(&self) -> usize {
        self.shared.stats.run_queue_depth.load(Relaxed) + self.shared.handoff.len()
    }

    /// The OS thread id running the loop (0 before it starts).
    pub fn tid(&self) -> i64 {
        self.shared.tid.load(Relaxed)
    }
}

/// Held by a task while it waits for an answer from another thread (e.g. a
/// payload hand-off): the loop then waits briefly for that answer before it
/// sleeps, saving a cross-thread wake-up. Create it on the task's loop.
#[derive(Debug)]
pub struct RemoteWait {
    loop_id: Option<u16>,
}

impl RemoteWait {
    /// Marks the current loop as expecting an answer (no effect off-loop).
    pub fn new() -> RemoteWait {
        let loop_id = with_current(|cur| {
            cur.map(|l| {
                l.shared.stats.awaiting_remote.fetch_add(1, Relaxed);
                l.shared.id
            })
        });
        RemoteWait { loop_id }
    }
}

impl Default for RemoteWait {
    fn default() -> Self {
        RemoteWait::new()
    }
}

impl Drop for RemoteWait {
    fn drop(&mut self) {
        if let Some(shared) = self.loop_id.and_then(registry::get) {
            shared.stats.awaiting_remote.fetch_sub(1, Relaxed);
        }
    }
}

/// Snapshots of every live loop in the process.
pub fn all_snapshots() -> Vec<LoopSnapshot> {
    registry::all()
        .into_iter()
        .map(LoopSnapshot::read)
        .collect()
}

struct MainWaker {
    shared: &'static Shared,
}

impl Wake for MainWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.main_woken.store(true, SeqCst);
        self.shared.notify();
    }
}

/// An event loop bound to the thread that created it.
pub struct EventLoop {
    local: Box<Local>,
    _not_send: PhantomData<*const ()>,
}

impl EventLoop {
    /// Creates a loop on the current thread.
    pub fn new(config: LoopConfig) -> io::Result<EventLoop> {
        let shared = registry::acquire()?;
        let ring = crate::uring::RingConfig {
            entries: config.ring_entries,
            buffers: config.ring_buffers,
            buffer_size: config.ring_buffer_size,
            quiet: crate::uring::QUIET,
            linger: crate::uring::CLOSE_LINGER,
            recv_limit: true,
        };
        let reactor = match Backend::new(
            config.io,
            config.events_capacity,
            ring,
            shared.wake_fd(),
            shared.id,
        ) {
            Ok(r) => r,
            Err(e) => {
                registry::release(shared);
                return Err(e);
            }
        };
        *lock_std(&shared.name) = config
            .name
            .clone()
            .unwrap_or_else(|| format!("loop-{}", shared.id));
        shared.tid.store(crate::stats::current_tid(), Relaxed);
        let now = Instant::now();
        if let Some(g) = &config.work_group {
            g.join(LoopHandle::of(shared));
        }
        Ok(EventLoop {
            local: Box::new(Local {
                shared,
                run_queue: LocalQueue::new(),
                reactor,
                timers: RefCell::new(TimerWheel::new()),
                start: now,
                config,
                hist: RefCell::new(registry::new_histogram()),
                last_publish: Cell::new(now),
                last_idle_hook: Cell::new(now),
                last_work: Cell::new(now),
                idle_hook_owed: Cell::new(false),
                poll_start: Cell::new(crate::stats::Stamp::now()),
                turn_now: Cell::new(now),
                slice_before: Cell::new(None),
                requests: RefCell::new(RequestMetrics::default()),
                requests_epoch: Cell::new(shared.requests_epoch.load(Relaxed)),
                orphans: RefCell::new(Vec::new()),
                long_poll_log: RefCell::new(crate::time::LogEvery::default()),
            }),
            _not_send: PhantomData,
        })
    }

    /// A handle other threads can use.
    pub fn handle(&self) -> LoopHandle {
        LoopHandle::of(self.local.shared)
    }

    /// Runs the loop until `future` completes; spawned tasks keep running
    /// whenever the main future waits.
    pub fn block_on<F: Future>(&mut self, future: F) -> F::Output {
        let local = &*self.local;
        let _enter = context::enter(local);
        let mut future = pin!(future);
        let waker = Waker::from(Arc::new(MainWaker {
            shared: local.shared,
        }));
        let mut cx = Context::from_waker(&waker);
        local.shared.main_woken.store(true, SeqCst);
        loop {
            if local.shared.main_woken.swap(false, SeqCst) {
                local.poll_start.set(crate::stats::Stamp::now());
                let _budget = crate::coop::start_poll();
                if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                    return v;
                }
            }
            if let Err(e) = local.turn() {
                panic!(
                    "duality event loop {}: reactor failed: {e}",
                    local.shared.id
                );
            }
        }
    }

    /// Runs the loop until [`LoopHandle::stop`] is called.
    pub fn run(&mut self) -> io::Result<()> {
        let local = &*self.local;
        let _enter = context::enter(local);
        while !local.shared.stop.load(SeqCst) {
            local.turn()?;
        }
        Ok(())
    }
}

impl Drop for EventLoop {
    fn drop(&mut self) {
        let local = &*self.local;
        if let Some(g) = &local.config.work_group {
            g.leave(local.shared.id);
        }
        {
            // Never a panic here (a loop dropped inside a running one, or
            // while a nested block_on's panic unwinds, would abort).
            let _enter = context::enter_nested(local);
            local.shutdown();
        }
        // A `block_on` loop leaves its caller's thread as it found it.
        local.restore_slice();
        registry::release(local.shared);
    }
}

/// Creates a loop on the current thread and runs `future` to completion on it.
///
/// # Panics
/// Inside another duality loop on this thread, or if the OS refuses the
/// loop's epoll/eventfd descriptors.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut lp = EventLoop::new(LoopConfig::default()).expect("cannot create a duality event loop");
    lp.block_on(future)
}

/// A loop running on its own OS thread.
pub struct LoopThread {
    handle: LoopHandle,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
    /// [`stop`](Self::stop) was called: `join` sends no second stop.
    stopped: bool,
}

impl LoopThread {
    /// Starts a named OS thread running a loop.
    pub fn spawn(config: LoopConfig) -> io::Result<LoopThread> {
        let name = config.name.clone().unwrap_or_else(|| "duality-loop".into());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            if let Some(cpu) = config.cpu {
                if let Err(e) = crate::affinity::pin_current_thread(cpu) {
                    let _ = tx.send(Err(e));
                    return Ok(());
                }
            }
            if let Some(slice) = config.slice {
                if let Err(e) = crate::priority::set_slice(slice) {
                    tracing::warn!("a loop's time slice of {slice:?} was refused: {e}");
                }
            }
            let mut lp = match EventLoop::new(config) {
                Ok(lp) => lp,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return Ok(());
                }
            };
            let _ = tx.send(Ok(lp.handle()));
            lp.run()
        })?;
        let handle = rx
            .recv()
            .map_err(|_| io::Error::other("loop thread died while starting"))??;
        Ok(LoopThread {
            handle,
            thread: Some(thread),
            stopped: false,
        })
    }

    /// The loop's handle.
    pub fn handle(&self) -> LoopHandle {
        self.handle
    }

    /// Asks the loop to stop without waiting for it: stopping several loops
    /// before joining any lets their shutdowns (a loop may linger to send
    /// what its closed sockets had queued) overlap instead of adding up.
    pub fn stop(&mut self) {
        if self.thread.is_some() && !self.stopped {
            self.stopped = true;
            self.handle.stop();
        }
    }

    /// Stops the loop and waits for its thread (its tasks are cancelled).
    pub fn join(mut self) -> io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> io::Result<()> {
        // Only while the thread runs: once it has ended, its `Shared` is back
        // in the registry and may already belong to another loop, which a
        // second `stop` (from `Drop` after `join`) would stop.
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        if !self.stopped {
            self.handle.stop();
        }
        t.join()
            .map_err(|_| io::Error::other("loop thread panicked"))?
    }
}

impl Drop for LoopThread {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::pool::{Pool, PoolConfig};
    use std::sync::mpsc;

    /// The idle spins a loop makes while its `block_on` sleeps five times.
    fn spins_over_five_sleeps(lp: &mut EventLoop) -> u64 {
        let spins = &lp.local.shared.stats.spins;
        let before = spins.load(Relaxed);
        lp.block_on(async {
            for _ in 0..5 {
                crate::time::sleep(Duration::from_millis(2)).await;
            }
        });
        spins.load(Relaxed) - before
    }

    /// A spinning loop yields its core between looks, and a yield hands the
    /// core to a pool thread in the background class until the next tick:
    /// while such a job runs, an idle loop goes to sleep at once.
    #[test]
    fn an_idle_loop_does_not_spin_while_a_pool_job_runs_in_the_background() {
        let mut lp = EventLoop::new(LoopConfig {
            idle_spin: Duration::from_millis(1),
            ..LoopConfig::default()
        })
        .unwrap();
        // Other tests of this binary may run background jobs meanwhile.
        if !crate::pool::background_busy(Instant::now()) {
            assert!(spins_over_five_sleeps(&mut lp) > 0, "an idle loop spins");
        }
        let pool = Pool::new(PoolConfig {
            name: "t-nospin".into(),
            max_threads: 1,
            queue_capacity: 4,
            keep_alive: Duration::from_secs(5),
            nice: 0,
            background_after: Some(Duration::from_secs(30)),
            slice: None,
        });
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<bool>();
        let job = pool.run(move || {
            started_tx.send(crate::priority::is_background()).unwrap();
            let _ = release_rx.recv();
        });
        let waiter = std::thread::spawn(move || crate::block_on(job));
        if !started_rx.recv().unwrap() {
            // No way back out of the class here (no privilege): the pool
            // never enters it, and loops spin as usual.
            eprintln!("skipped: pool threads cannot leave the background class here");
        } else {
            assert!(crate::pool::background_busy(Instant::now()));
            assert_eq!(
                spins_over_five_sleeps(&mut lp),
                0,
                "spun beside a background job"
            );
        }
        release_tx.send(()).unwrap();
        waiter.join().unwrap().unwrap();
    }
}
