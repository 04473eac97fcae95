//! `Payload`: where a connection's payload work runs, and colors.
//!
//! The connection handler calls `payload.call(job).await` (or
//! `call_colored(color, job)`); the model decides where `job` runs:
//!
//! | model | where | how one color stays exclusive | cost per job |
//! |---|---|---|---|
//! | `sped` | inline | one thread: nothing else runs | none |
//! | `symped`, `steal`, `thread-per-conn` | inline | a lock per color slot, waited for as a task | one uncontended lock |
//! | `amped:P` | payload thread `color % P` | affinity: a color has one thread | a hand-off |
//! | `seda:N:P` | payload threads in turn, the less loaded of two; a color after its own | a lock per color slot (none if P = 1) | a hand-off + a lock |
//! | `seda-s:N` | the calling loop's paired thread | a lock per color slot (none if N = 1) | a hand-off + a lock |
//!
//! Colors (seed 003, libasync-mp): two jobs of one color never run at the
//! same time, in every model; jobs of different colors may run in parallel.
//! [`Payload::call`] uses [`DEFAULT_COLOR`], so a server written for one thread
//! stays correct: all its default-colored jobs are serialised. Color locks are
//! a fixed array of slots indexed by `color % slots`: two colors may share a
//! slot (less parallelism), never the reverse.
//!
//! A color lock held by another thread never blocks a network loop: its
//! lane ([`Lane`] of an inline model, or of an adaptive hand-off model's
//! loop) stops the batch before that request ([`Stop::Busy`](crate::session::Stop)),
//! and the connection's task waits for the lock (the runtime's FIFO
//! `Mutex`: woken when it is handed over) while the loop serves its other
//! connections; `call_colored` waits the same way. A payload thread waits
//! likewise, as a task on its stage, running the other batches handed to it
//! meanwhile. (A loop blocked on another loop's color held up all its other
//! connections for as long: `tests/models_colors.rs`; a payload thread
//! parked on a color, `seda-s` with a client's connections on both loops,
//! spent a third more CPU per request than two copies of the server:
//! `docs/results/colors/straddle-dc8e5ec`.)
//!
//! The session driver (`session`) does not hand off one request at a time: it
//! sends one *batch* per read ([`Payload::batch`]), which runs on one thread
//! and executes requests while their colors belong there ([`Lane`]).
//!
//! With [`Handoff::Adaptive`] the hand-off models hand a batch off only when
//! that has paid: batches learned to cost less than a trip to a payload
//! thread run on their network loop instead (the runtime's adaptive offload
//! rule, `duality_rt::adaptive::Placer`). Colors then hold by color locks in
//! every hand-off model, `amped` included, since a color's batch may run on
//! its payload thread or on the network loop; a lone network loop takes
//! none while none of its colored jobs is out (`Away`).

use crate::stage::Stage;
use crate::stats::HandoffStats;
use duality_rt::adaptive::{Placement, Placer};
use duality_rt::sync::{Mutex, MutexGuard};
use duality_rt::time::thread_cpu_time;
use duality_rt::LoopHandle;
use futures_lite::FutureExt;
use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{
    AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The color `call` uses.
pub const DEFAULT_COLOR: u64 = 0;

/// Whether the hand-off models hand every batch to a payload thread
/// (`--handoff`). The inline models ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Handoff {
    /// Every batch goes to a payload thread: the models as the papers
    /// define them.
    #[default]
    Always,
    /// A batch runs on its network loop while batches are learned to cost
    /// less than a hand-off (valued at 20 µs at least) and less than a loop
    /// turn's budget; on a payload thread otherwise (see
    /// `duality_rt::adaptive::Placer`). Learned from every hand-off and a
    /// sample of inline runs; while batches cost 20 µs or more, a loop hands
    /// one batch off anyway once 10 ms and 256 batches have passed since its
    /// last such batch, so a hand-off that got cheaper is noticed (cheaper
    /// batches stay on the loop whatever a hand-off costs).
    Adaptive,
}

impl std::str::FromStr for Handoff {
    type Err = String;
    fn from_str(s: &str) -> Result<Handoff, String> {
        match s {
            "always" => Ok(Handoff::Always),
            "adaptive" => Ok(Handoff::Adaptive),
            _ => Err(format!(
                "unknown hand-off policy {s:?} (always or adaptive)"
            )),
        }
    }
}

impl std::fmt::Display for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handoff::Always => "always",
            Handoff::Adaptive => "adaptive",
        })
    }
}

/// One inline batch in this many is timed (two clock reads are a tenth of a
/// cheap batch).
const TIME_EVERY: u32 = 16;
/// A thread that runs batches inline hands one off anyway, to refresh what
/// a hand-off costs, once both this long and [`REFRESH_BATCHES`] batches
/// have passed since its last. The time bounds a busy loop: a trip costs
/// the machine a wake-up and a payload thread's spin, and one batch in 256
/// alone made a thousand or more such trips a second. The count bounds a
/// quiet one, where 10 ms pass between most batches and every sampled
/// batch would otherwise pay a trip's latency.
const REFRESH_EVERY: Duration = Duration::from_millis(10);
/// See [`REFRESH_EVERY`].
const REFRESH_BATCHES: u32 = 256;

thread_local! {
    /// Whether this thread is a payload stage's (see [`on_payload_thread`]).
    static ON_PAYLOAD: Cell<bool> = const { Cell::new(false) };
    /// Counts this thread's inline-eligible batches (sampling, no shared line).
    static TICK: Cell<u32> = const { Cell::new(0) };
    /// When (and at which tick) this thread last handed a batch off to
    /// refresh the trip's cost.
    static REFRESHED: Cell<Option<(Instant, u32)>> = const { Cell::new(None) };
}

/// Whether the calling thread is a payload stage's (the hand-off models'
/// payload threads), not the loop that reads and writes the connection: a
/// protocol that measures what its choices cost the sending thread learns
/// nothing there.
pub fn on_payload_thread() -> bool {
    ON_PAYLOAD.with(Cell::get)
}

/// Marks the calling thread as a payload stage's.
pub(crate) fn mark_payload_thread() {
    ON_PAYLOAD.with(|p| p.set(true));
}

/// True if a thread whose last refresh was `last` should hand off the batch
/// it counts as `tick`, at `now`.
fn refresh_due(last: Option<(Instant, u32)>, now: Instant, tick: u32) -> bool {
    last.is_none_or(|(t, k)| {
        tick.wrapping_sub(k) >= REFRESH_BATCHES && now.duration_since(t) >= REFRESH_EVERY
    })
}

/// Number of color-lock slots.
const COLOR_SLOTS: usize = 1024;

pub(crate) struct ColorLocks(Box<[ColorSlot]>);

/// One color slot's lock, and how many times it was taken (`stats`: lock
/// coalescing shows as fewer takes than requests). The runtime's `Mutex`:
/// a task waits for it without blocking its thread (a network loop's or a
/// payload stage's); FIFO, so a waiter is not overtaken.
struct ColorSlot {
    lock: Mutex<()>,
    /// Written only by the lock's holder, so a plain load and store count
    /// it: no read-modify-write on the hot path, on a line the lock has
    /// just brought to this core anyway.
    taken: AtomicU64,
}

impl ColorLocks {
    pub(crate) fn new() -> Arc<ColorLocks> {
        Arc::new(ColorLocks(
            (0..COLOR_SLOTS)
                .map(|_| ColorSlot {
                    lock: Mutex::new(()),
                    taken: AtomicU64::new(0),
                })
                .collect(),
        ))
    }
    fn slot(color: u64) -> usize {
        (color % COLOR_SLOTS as u64) as usize
    }
    /// The slot's lock if it is free (and nobody waits for it).
    fn try_lock(&self, slot: usize) -> Option<MutexGuard<'_, ()>> {
        let g = self.0[slot].lock.try_lock().ok()?;
        self.count(slot);
        Some(g)
    }
    /// The slot's lock, the calling task waiting for it (its loop runs on).
    async fn lock_async(&self, slot: usize) -> MutexGuard<'_, ()> {
        let g = self.0[slot].lock.lock().await;
        self.count(slot);
        g
    }
    /// Counts a take by the lock's new holder.
    fn count(&self, slot: usize) {
        let s = &self.0[slot];
        s.taken.store(s.taken.load(Relaxed) + 1, Relaxed);
    }
    /// Times any color lock was taken.
    fn taken(&self) -> u64 {
        self.0.iter().map(|s| s.taken.load(Relaxed)).sum()
    }
}

/// A color lock held across a run of requests of one color (lock
/// coalescing: one lock per run, not per request).
pub struct Held<'a> {
    slot: usize,
    _guard: MutexGuard<'a, ()>,
}

/// How `seda` picks a payload thread for a batch. SEDA's stage is one
/// queue that every thread of its pool takes from; threads with queues of
/// their own get its two properties back here:
/// - no thread idles while another has a backlog: a batch goes to the less
///   loaded (fewer jobs out) of the next thread in turn and the one after
///   it (two choices: one comparison however many threads; turns still
///   spread ties);
/// - a batch whose color already has a batch out goes where that one went:
///   it could not run before that one anyway, and sent elsewhere it would
///   wait there for the color and be handed it across threads.
///
/// Both are hints (Relaxed): the color locks alone keep colors exclusive.
/// Measured against strict turns (`docs/results/models/spread-ab-857ccb6/`,
/// the builds taking turns): the cache on `seda:1:2` at 40 and 120 clients
/// switched context 0.10-0.28 times per request against 0.16-0.43 and
/// served more in 6 of 8 pairs; the colors experiment's `seda:1:2` read
/// alike (0.90-0.95 of the two copies' bound against 0.90-0.94).
pub(crate) struct Spread {
    next: AtomicUsize,
    /// Per color slot: the stage its last batch went to (high 32 bits) and
    /// how many of its batches are out (low 32).
    out: Box<[AtomicU64]>,
}

impl Spread {
    pub(crate) fn new() -> Spread {
        Spread {
            next: AtomicUsize::new(0),
            out: (0..COLOR_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The stage for a batch of `color` (`None`: not known) among `stages`
    /// (two or more); a batch of a known color counts as out of it until
    /// the returned guard drops.
    fn pick<'a>(
        &'a self,
        stages: &[Arc<Stage>],
        color: Option<u64>,
    ) -> (usize, Option<Follow<'a>>) {
        let less_loaded = || {
            let n = stages.len();
            let i = self.next.fetch_add(1, Relaxed) % n;
            let j = (i + 1) % n;
            if stages[j].in_flight() < stages[i].in_flight() {
                j
            } else {
                i
            }
        };
        let Some(color) = color else {
            return (less_loaded(), None);
        };
        let cell = &self.out[ColorLocks::slot(color)];
        let mut seen = cell.load(Relaxed);
        loop {
            let (i, next) = if seen as u32 > 0 {
                ((seen >> 32) as usize, seen + 1)
            } else {
                let i = less_loaded();
                (i, (i as u64) << 32 | 1)
            };
            match cell.compare_exchange_weak(seen, next, Relaxed, Relaxed) {
                Ok(_) => return (i, Some(Follow(cell))),
                Err(now) => seen = now,
            }
        }
    }
}

/// A batch counted out of its color slot ([`Spread`]) until dropped.
pub(crate) struct Follow<'a>(&'a AtomicU64);

impl Drop for Follow<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

pub(crate) enum Dispatch {
    /// Inline: one thread (colors hold trivially, the lane takes no lock) or
    /// several, with color locks. The lane is kept here so a connection can
    /// borrow it per read instead of holding a copy.
    Inline(Lane),
    /// Payload thread chosen by color.
    Affinity(Vec<Arc<Stage>>),
    /// Payload threads in turn, as [`Spread`] picks them.
    RoundRobin(Vec<Arc<Stage>>, Spread, Arc<ColorLocks>),
    /// The payload thread paired with the calling loop (by loop id).
    Paired(Vec<Arc<Stage>>, HashMap<u16, usize>, Arc<ColorLocks>),
}

/// The handle a connection uses to run payload work. Cheap to clone.
#[derive(Clone)]
///
/// One pointer: every connection holds one, idle ones included.
pub struct Payload(Arc<Shared>);

struct Shared {
    dispatch: Dispatch,
    /// Spreads blocking calls over the payload threads.
    next_blocking: AtomicUsize,
    /// `Handoff::Adaptive` in a hand-off model.
    adaptive: Option<Adaptive>,
}

/// What an adaptive hand-off model needs to run a batch on the network loop.
struct Adaptive {
    placer: Placer,
    /// Admits every color under the color locks the payload threads take too.
    lane: Lane,
    /// `Some` where the model has one network loop.
    solo: Option<Solo>,
}

/// An adaptive hand-off model with one network loop (`amped:P`, `seda:1:P`,
/// `seda-s:1`): the loop's inline batches take no color lock while none of
/// its colored jobs is out on a payload thread ([`Away`]): the locks cost it
/// 3% of the echo service's requests/s at 40 connections, where all but the
/// sampled batches stay on the loop. Colored work asked for on another
/// thread (a background task on the acceptor's loop) is sent from the
/// loop too, so that the loop alone sends jobs out and counts them.
struct Solo {
    home: LoopHandle,
    away: Away,
    /// Admits every color and takes no lock.
    free: Lane,
}

impl Solo {
    fn on_home(&self) -> bool {
        duality_rt::event_loop::current().is_some_and(|h| h.id() == self.home.id())
    }
}

/// The colored jobs a lone network loop has out on payload threads: counted
/// up on that loop before one leaves ([`Away::leave`]), down where it ran
/// once it and its color lock are done (dropping the [`Back`], `Release`).
/// A loop that reads none out (`Acquire`) has seen all their work, and it
/// is the only thread that sends more: until it does, it may run any color
/// without taking the color's lock. Model-checked in `loom_tests`.
pub(crate) struct Away(Arc<crate::loom::AtomicUsize>);

/// One colored job out; dropped on the payload thread after the job.
pub(crate) struct Back(Arc<crate::loom::AtomicUsize>);

impl Away {
    pub(crate) fn new() -> Away {
        Away(Arc::new(crate::loom::AtomicUsize::new(0)))
    }

    /// Counts a job out. Only the loop calls it, before the job is sent.
    pub(crate) fn leave(&self) -> Back {
        self.0.fetch_add(1, Relaxed);
        Back(self.0.clone())
    }

    /// True if no job is out: every one's work happened before this returned.
    pub(crate) fn all_home(&self) -> bool {
        self.0.load(Acquire) == 0
    }
}

impl Drop for Back {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Release);
    }
}

/// Runs `fut` on the loop `home` and returns its result; a panic in it
/// resumes here.
async fn at_home<R: Send + 'static>(
    home: LoopHandle,
    fut: impl Future<Output = R> + Send + 'static,
) -> R {
    crate::stage::answer(
        home.spawn(std::panic::AssertUnwindSafe(fut).catch_unwind())
            .await,
    )
    .await
}

/// Where one job or batch goes.
enum Route<'a> {
    Here(&'a Lane),
    /// The stage, the lane the batch runs on there, and (`seda` with
    /// several payload threads) the batch counted out of its color.
    Stage(&'a Arc<Stage>, Lane, Option<Follow<'a>>),
}

/// Where a batch runs and which of its requests may run there: a batch runs
/// on one thread; it executes requests while [`admits`](Lane::admits) says
/// their color belongs to that thread, each under its color's exclusion.
#[derive(Clone)]
pub struct Lane {
    /// `Some((i, p))`: payload thread `i` of `p` that owns colors `c % p == i`.
    affinity: Option<(usize, usize)>,
    locks: Option<Arc<ColorLocks>>,
}

impl Lane {
    /// A lane that admits every color and takes no lock (one thread).
    pub fn single() -> Lane {
        Lane {
            affinity: None,
            locks: None,
        }
    }

    /// A network loop's lane that admits every color and keeps each
    /// exclusive with `locks`, never waiting for one itself.
    pub(crate) fn locked(locks: Arc<ColorLocks>) -> Lane {
        Lane {
            affinity: None,
            locks: Some(locks),
        }
    }

    /// True if this lane needs requests' colors: it admits only some colors
    /// (affinity) or keeps colors exclusive with locks.
    #[inline]
    pub fn uses_colors(&self, locked: bool) -> bool {
        self.affinity.is_some() || (locked && self.locks.is_some())
    }

    /// True if a job of `color` may run on this lane's thread.
    #[inline]
    pub fn admits(&self, color: u64) -> bool {
        match self.affinity {
            None => true,
            Some((i, p)) => (color % p as u64) as usize == i,
        }
    }

    /// Runs `job`, one request of a run, keeping `color` exclusive
    /// (`locked` false: the caller's state keeps colors exclusive by
    /// itself, take no second lock); keeps the color's lock in `held` for
    /// the next request, which takes no lock again if it has the same color
    /// slot. A different slot lets go of the held lock before it takes its
    /// own: a thread never holds two. The caller drops `held` at the end of
    /// its batch. `None`, `job` not run: the color's lock is another
    /// thread's (see the module docs); wait for it as a task with
    /// [`Lane::hold`] and go on holding it.
    #[inline]
    pub fn run_held<'l, R>(
        &'l self,
        color: u64,
        locked: bool,
        held: &mut Option<Held<'l>>,
        job: impl FnOnce() -> R,
    ) -> Option<R> {
        if let Some(l) = self.locks.as_ref().filter(|_| locked) {
            let slot = ColorLocks::slot(color);
            if held.as_ref().map(|h| h.slot) != Some(slot) {
                *held = None;
                let guard = l.try_lock(slot)?;
                *held = Some(Held {
                    slot,
                    _guard: guard,
                });
            }
        }
        Some(job())
    }

    /// Waits, as a task, for `color`'s lock on this lane (`None`: the lane
    /// takes none), to hand to [`Lane::run_held`] or hold over a job.
    pub async fn hold(&self, color: u64) -> Option<Held<'_>> {
        let l = self.locks.as_ref()?;
        let slot = ColorLocks::slot(color);
        Some(Held {
            slot,
            _guard: l.lock_async(slot).await,
        })
    }
}

impl Payload {
    /// `network`: the model's network loops (one: see [`Solo`]).
    pub(crate) fn new(dispatch: Dispatch, handoff: Handoff, network: &[LoopHandle]) -> Payload {
        let adaptive = match (&dispatch, handoff) {
            (Dispatch::Inline(_), _) | (_, Handoff::Always) => None,
            (Dispatch::RoundRobin(_, _, locks) | Dispatch::Paired(_, _, locks), _) => {
                Some(locks.clone())
            }
            (Dispatch::Affinity(_), _) => Some(ColorLocks::new()),
        }
        .map(|locks| Adaptive {
            placer: Placer::new(),
            lane: Lane::locked(locks),
            solo: match network {
                [home] => Some(Solo {
                    home: *home,
                    away: Away::new(),
                    free: Lane::single(),
                }),
                _ => None,
            },
        });
        Payload(Arc::new(Shared {
            dispatch,
            next_blocking: AtomicUsize::new(0),
            adaptive,
        }))
    }

    /// A payload that runs everything inline on one thread (for tests and
    /// single-threaded tools).
    pub fn single() -> Payload {
        Payload::new(Dispatch::Inline(Lane::single()), Handoff::Always, &[])
    }

    /// The lane to serve the next batch on where it is, borrowing its
    /// buffer: always in the inline models; in a hand-off model only under
    /// [`Handoff::Adaptive`] while batches are learned to be cheaper than a
    /// hand-off. `None`: hand it off with [`Payload::batch`].
    pub(crate) fn inline_lane(&self) -> Option<Inline<'_>> {
        match &self.0.dispatch {
            Dispatch::Inline(lane) => Some(Inline { lane, timed: None }),
            _ => self.0.adaptive.as_ref().and_then(Adaptive::inline),
        }
    }

    /// The network loop's lane that answered [`Stop::Busy`](crate::session::Stop),
    /// to wait for the color on and serve on: the inline models' lane, or
    /// an adaptive hand-off model's. `None` where every batch is handed
    /// off: the payload thread waits for the color (see [`Payload::batch`]).
    pub(crate) fn waiting_lane(&self) -> Option<&Lane> {
        match (&self.0.dispatch, &self.0.adaptive) {
            (Dispatch::Inline(lane), _) => Some(lane),
            (_, Some(a)) => Some(&a.lane),
            (_, None) => None,
        }
    }

    /// Times a color lock was taken, for `stats`: once per run of one
    /// color in a batch (lock coalescing), never where the model keeps
    /// colors apart without locks (one thread, `amped`'s affinity) or the
    /// protocol locks itself ([`Protocol::LOCKS_ITSELF`](crate::Protocol)).
    pub(crate) fn color_locks_taken(&self) -> u64 {
        let mine = match &self.0.dispatch {
            Dispatch::Inline(lane) => lane.locks.as_ref().map_or(0, |l| l.taken()),
            Dispatch::Affinity(_) => 0,
            Dispatch::RoundRobin(_, _, l) | Dispatch::Paired(_, _, l) => l.taken(),
        };
        // Adaptive `amped` has locks of its own; the others share theirs.
        let adaptive = match (&self.0.dispatch, &self.0.adaptive) {
            (Dispatch::Affinity(_), Some(a)) => a.lane.locks.as_ref().map_or(0, |l| l.taken()),
            _ => 0,
        };
        mine + adaptive
    }

    /// How batches are placed, for `stats` (`None` in the inline models).
    pub(crate) fn handoff_stats(&self) -> Option<HandoffStats> {
        if matches!(self.0.dispatch, Dispatch::Inline(_)) {
            return None;
        }
        Some(match &self.0.adaptive {
            None => HandoffStats {
                policy: Handoff::Always,
                batch_cost: None,
                trip: None,
                next_inline: false,
            },
            Some(a) => HandoffStats {
                policy: Handoff::Adaptive,
                batch_cost: a.placer.cost(),
                trip: a.placer.handoff_cost(),
                next_inline: a.placer.placement() == Placement::Inline,
            },
        })
    }

    /// True if the thread a batch runs on depends on its first request's color.
    pub(crate) fn routes_by_color(&self) -> bool {
        matches!(&self.0.dispatch,
            Dispatch::Affinity(s) | Dispatch::RoundRobin(s, ..) if s.len() > 1)
    }

    fn route(&self, color: Option<u64>) -> Route<'_> {
        match &self.0.dispatch {
            Dispatch::Inline(lane) => Route::Here(lane),
            Dispatch::Affinity(stages) => {
                let i = (color.unwrap_or(DEFAULT_COLOR) % stages.len() as u64) as usize;
                Route::Stage(
                    &stages[i],
                    Lane {
                        affinity: Some((i, stages.len())),
                        // Adaptive: the network loop may run this color's
                        // batches too, so affinity alone no longer excludes.
                        locks: self.0.adaptive.as_ref().and_then(|a| a.lane.locks.clone()),
                    },
                    None,
                )
            }
            Dispatch::RoundRobin(stages, spread, locks) => {
                let (i, follow) = match stages.len() {
                    1 => (0, None),
                    _ => spread.pick(stages, color),
                };
                Route::Stage(&stages[i], self.stage_lane(stages, locks), follow)
            }
            Dispatch::Paired(stages, pairs, locks) => {
                let i = match stages.len() {
                    1 => 0,
                    _ => duality_rt::event_loop::current()
                        .and_then(|h| pairs.get(&h.id()).copied())
                        .unwrap_or(0),
                };
                Route::Stage(&stages[i], self.stage_lane(stages, locks), None)
            }
        }
    }

    /// The lane of a `seda` or `seda-s` payload thread: under the color
    /// locks, unless that thread is the only one that runs colored work
    /// (one payload thread, every batch handed off), where its lane takes
    /// none, as `amped`'s affinity takes none.
    fn stage_lane(&self, stages: &[Arc<Stage>], locks: &Arc<ColorLocks>) -> Lane {
        Lane {
            affinity: None,
            locks: (stages.len() > 1 || self.0.adaptive.is_some()).then(|| locks.clone()),
        }
    }

    /// Runs `job` with the default color.
    pub async fn call<R, F>(&self, job: F) -> R
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.call_colored(DEFAULT_COLOR, job).await
    }

    /// Runs `job` where the model says, never at the same time as another job
    /// of the same `color`. A panic in `job` resumes in the caller.
    pub async fn call_colored<R, F>(&self, color: u64, job: F) -> R
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        if let Some(home) = self.away_from_home() {
            let p = self.clone();
            return at_home(home, async move { p.call_colored_here(color, job).await }).await;
        }
        self.call_colored_here(color, job).await
    }

    async fn call_colored_here<R, F>(&self, color: u64, job: F) -> R
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        match self.route(Some(color)) {
            Route::Here(lane) => {
                // Waited for as a task: another loop's job of this color
                // does not block this loop.
                let _held = lane.hold(color).await;
                job()
            }
            // `_out`: the batch counts as out of its color until answered.
            Route::Stage(stage, lane, _out) => {
                let back = self.leave();
                stage
                    .run_async(async move {
                        let held = lane.hold(color).await;
                        let r = job();
                        drop(held);
                        drop(back);
                        r
                    })
                    .await
            }
        }
    }

    /// The lone network loop to send colored work from, where this is
    /// another thread (see [`Solo`]).
    fn away_from_home(&self) -> Option<LoopHandle> {
        self.solo().filter(|s| !s.on_home()).map(|s| s.home)
    }

    /// Counts a colored job out of the lone network loop (see [`Solo`]).
    fn leave(&self) -> Option<Back> {
        self.solo().map(|s| s.away.leave())
    }

    fn solo(&self) -> Option<&Solo> {
        self.0.adaptive.as_ref()?.solo.as_ref()
    }

    /// Runs a batch: `job` gets the [`Lane`] it runs on and must execute only
    /// what the lane admits, under [`Lane::run_held`]; a color another
    /// thread holds it waits for with [`Lane::hold`] (as a task: on a
    /// payload thread the stage runs other batches meanwhile). `color` is the
    /// color of the batch's first request where the model routes by color
    /// (see `routes_by_color`; `None` where it is not known, routed as the
    /// default color by `amped`, by load alone by `seda`); otherwise any
    /// value. Inline models run it here and now; hand-off models move it
    /// (and what it owns) to a payload thread and back.
    pub async fn batch<R, F, J>(&self, color: Option<u64>, job: J) -> R
    where
        J: FnOnce(Lane) -> F + Send + 'static,
        F: std::future::Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        if let Some(home) = self.away_from_home() {
            let p = self.clone();
            return at_home(home, async move { p.batch_here(color, job).await }).await;
        }
        self.batch_here(color, job).await
    }

    async fn batch_here<R, F, J>(&self, color: Option<u64>, job: J) -> R
    where
        J: FnOnce(Lane) -> F + Send + 'static,
        F: std::future::Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        match self.route(color) {
            Route::Here(lane) => job(lane.clone()).await,
            Route::Stage(stage, lane, _out) => match &self.0.adaptive {
                None => stage.run_async(async move { job(lane).await }).await,
                Some(a) => a.batch(stage, lane, self.leave(), job).await,
            },
        }
    }

    /// Runs a blocking call (open, stat, read of a file) where the model puts
    /// such work: on the payload threads in the hand-off models (Flash's
    /// AMPED helpers), on the runtime's blocking pool otherwise, so it never
    /// blocks a network loop. Not colored.
    pub async fn blocking<R, F>(&self, job: F) -> std::io::Result<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        // Injected faults (tests) follow the call onto the thread it runs on.
        let job = duality_rt::faults::carried(job);
        match &self.0.dispatch {
            Dispatch::Affinity(stages)
            | Dispatch::RoundRobin(stages, ..)
            | Dispatch::Paired(stages, ..) => {
                let i = self.0.next_blocking.fetch_add(1, Relaxed) % stages.len();
                Ok(stages[i].run(job).await)
            }
            Dispatch::Inline(_) => duality_rt::spawn_blocking(job)
                .await
                .map_err(|e| std::io::Error::other(format!("blocking call failed: {e}"))),
        }
    }
}

/// A batch served where it is, on [`Payload::inline_lane`]'s lane; a
/// sampled adaptive one is timed until this is dropped. By the wall clock
/// (a vDSO read): the thread's CPU time would be a system call, and a
/// system call on the loop's hot path is a point where the scheduler may
/// switch threads (measured: twice the context switches per request).
pub(crate) struct Inline<'a> {
    lane: &'a Lane,
    timed: Option<(Instant, &'a Placer)>,
}

impl std::ops::Deref for Inline<'_> {
    type Target = Lane;
    fn deref(&self) -> &Lane {
        self.lane
    }
}

impl Drop for Inline<'_> {
    fn drop(&mut self) {
        if let Some((t0, placer)) = self.timed {
            placer.ran_inline(t0.elapsed());
        }
    }
}

impl Adaptive {
    /// The loop's lane if the next batch should stay here.
    fn inline(&self) -> Option<Inline<'_>> {
        if self.placer.placement() != Placement::Inline {
            return None;
        }
        let lane = match &self.solo {
            // Off the lone loop (no connection is served there): sent to it.
            Some(s) if !s.on_home() => return None,
            Some(s) if s.away.all_home() => &s.free,
            _ => &self.lane,
        };
        let tick = TICK.with(|t| {
            let n = t.get().wrapping_add(1);
            t.set(n);
            n
        });
        if !tick.is_multiple_of(TIME_EVERY) {
            return Some(Inline { lane, timed: None });
        }
        // A sampled batch reads the clock anyway: the refresh is due by it.
        // None while batches cost less than a trip's floor: they stay here
        // whatever a trip costs (100 refreshes a second cost the echo
        // service 4-5% of its requests/s at 40 connections on 2 cores).
        let now = Instant::now();
        let refresh = self.placer.trip_matters()
            && REFRESHED.with(|r| {
                let due = refresh_due(r.get(), now, tick);
                if due {
                    r.set(Some((now, tick)));
                }
                due
            });
        (!refresh).then_some(Inline {
            lane,
            timed: Some((now, &self.placer)),
        })
    }

    /// Hands a batch to `stage`, timed, so both costs are learned: the job's
    /// CPU time (its thread shares cores with the loop and the clients: a
    /// preempted batch's wall time made batches look as dear as the trip,
    /// and kept them handed off) and what the trip added to the wait.
    ///
    /// A job that waited for a color on the stage counts what the stage ran
    /// meanwhile as its own: rare (two batches of one color at once), and
    /// it errs toward handing off.
    /// `back`: the job counted out of a lone loop, dropped once it ran.
    async fn batch<R, F, J>(&self, stage: &Arc<Stage>, lane: Lane, back: Option<Back>, job: J) -> R
    where
        J: FnOnce(Lane) -> F + Send + 'static,
        F: std::future::Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        let t0 = Instant::now();
        let (r, wall, cpu) = stage
            .run_async(async move {
                let (t, c) = (Instant::now(), thread_cpu_time());
                // The job's future (and the color lock it holds) is done
                // when this returns; only then is it counted back.
                let r = job(lane).await;
                drop(back);
                (r, t.elapsed(), thread_cpu_time().saturating_sub(c))
            })
            .await;
        self.placer
            .ran_handed_off(cpu, t0.elapsed().saturating_sub(wall));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_refresh_waits_for_both_time_and_batches() {
        let t0 = Instant::now();
        let later = |ms| t0 + Duration::from_millis(ms);
        assert!(refresh_due(None, t0, 16), "the first sample refreshes");
        let last = Some((t0, 16));
        // A busy loop: many batches, little time.
        assert!(!refresh_due(last, later(2), 16 + 4096));
        assert!(refresh_due(last, later(10), 16 + 4096));
        // A quiet loop: time passes, few batches.
        assert!(!refresh_due(last, later(500), 16 + 240));
        assert!(refresh_due(last, later(500), 16 + 256));
        // The tick wraps.
        assert!(refresh_due(Some((t0, u32::MAX - 15)), later(10), 240));
    }

    fn lane_of(p: &Payload, color: u64) -> (bool, Lane) {
        match p.route(Some(color)) {
            Route::Here(l) => (false, l.clone()),
            Route::Stage(_, l, _) => (true, l),
        }
    }

    /// Under the adaptive hand-off a color's batch may run on its payload
    /// thread or on the network loop, so both must take the color's lock;
    /// always handing off, `amped`'s affinity alone keeps colors apart.
    #[test]
    fn adaptive_amped_takes_color_locks_on_both_sides() {
        let stages: Vec<Arc<Stage>> = (0..2)
            .map(|i| {
                Stage::start(
                    i,
                    4,
                    format!("t-payload-{i}"),
                    crate::stage::DEFAULT_PAYLOAD_SPIN,
                    None,
                    None,
                )
                .unwrap()
            })
            .collect();
        let always = Payload::new(Dispatch::Affinity(stages.clone()), Handoff::Always, &[]);
        let adaptive = Payload::new(Dispatch::Affinity(stages.clone()), Handoff::Adaptive, &[]);
        for color in 0..4 {
            let (handed, lane) = lane_of(&always, color);
            assert!(handed && lane.locks.is_none() && lane.admits(color));
            let (handed, lane) = lane_of(&adaptive, color);
            assert!(handed && lane.locks.is_some() && lane.admits(color));
            assert!(!lane.admits(color + 1), "affinity still routes");
        }
        let a = adaptive.0.adaptive.as_ref().unwrap();
        let (Some(inline), Some(stage)) = (&a.lane.locks, &lane_of(&adaptive, 0).1.locks) else {
            panic!("both lanes lock");
        };
        assert!(
            Arc::ptr_eq(inline, stage),
            "one set of locks for both places"
        );
        assert!(a.lane.admits(0) && a.lane.admits(1));
        for s in stages {
            s.stop();
        }
    }

    /// Jobs on a payload stage see its thread marked; the caller's is not.
    #[test]
    fn a_stage_marks_its_thread_as_a_payload_thread() {
        let stage = Stage::start(
            0,
            4,
            "t-payload".into(),
            crate::stage::DEFAULT_PAYLOAD_SPIN,
            None,
            None,
        )
        .unwrap();
        let s = stage.clone();
        let (there, here) =
            duality_rt::block_on(
                async move { (s.run(on_payload_thread).await, on_payload_thread()) },
            );
        assert!(there && !here);
        stage.stop();
    }

    /// `seda` and `seda-s` already lock colors; the loop's lane shares their locks.
    #[test]
    fn adaptive_seda_runs_inline_under_the_stages_own_locks() {
        let stages = vec![Stage::start(
            0,
            4,
            "t-payload".into(),
            crate::stage::DEFAULT_PAYLOAD_SPIN,
            None,
            None,
        )
        .unwrap()];
        let locks = ColorLocks::new();
        let p = Payload::new(
            Dispatch::RoundRobin(stages.clone(), Spread::new(), locks.clone()),
            Handoff::Adaptive,
            &[],
        );
        let a = p.0.adaptive.as_ref().unwrap();
        assert!(Arc::ptr_eq(a.lane.locks.as_ref().unwrap(), &locks));
        let inline = Payload::new(Dispatch::Inline(Lane::single()), Handoff::Adaptive, &[]);
        assert!(inline.0.adaptive.is_none(), "inline models ignore it");
        stages[0].stop();
    }

    /// Lock coalescing: a run of one color takes its lock once and keeps it;
    /// the next color lets it go first; dropping `held` frees the last.
    #[test]
    fn a_run_of_one_color_holds_its_lock_once() {
        let locks = ColorLocks::new();
        let lane = Lane::locked(locks.clone());
        let free = |color: u64| locks.0[ColorLocks::slot(color)].lock.try_lock().is_ok();
        let mut held = None;
        let mut ran = 0;
        lane.run_held(1, true, &mut held, || ran += 1);
        assert!(!free(1), "held after its request");
        lane.run_held(1 + COLOR_SLOTS as u64, true, &mut held, || {
            ran += 1;
            assert!(!free(1), "same slot: still held, not taken twice");
        });
        lane.run_held(2, true, &mut held, || {
            ran += 1;
            assert!(free(1) && !free(2), "moved to the new color");
        });
        drop(held);
        assert!(free(1) && free(2) && ran == 3);
        assert_eq!(locks.taken(), 2, "three requests, two runs, two takes");
        // A protocol that locks itself: no lock at all.
        let mut held = None;
        lane.run_held(3, false, &mut held, || assert!(free(3)));
        assert!(held.is_none());
        assert_eq!(locks.taken(), 2);
        let h = futures_lite::future::block_on(lane.hold(3));
        assert!(h.is_some() && !free(3));
        drop(h);
        assert_eq!(locks.taken(), 3, "a lone job takes its lock once");
    }

    /// A color another thread holds: a lane does not run the job (the batch
    /// stops there) and runs other colors; a task waiting with `hold` gets
    /// it once let go.
    #[test]
    fn a_busy_color_stops_a_lane_until_hold_gets_it() {
        let locks = ColorLocks::new();
        let lane = Lane::locked(locks.clone());
        let gone = AtomicBool::new(false);
        std::thread::scope(|s| {
            let holder = locks.try_lock(ColorLocks::slot(5)).unwrap();
            let mut held = None;
            assert_eq!(lane.run_held(5, true, &mut held, || 1), None, "not run");
            assert!(held.is_none());
            assert_eq!(lane.run_held(6, true, &mut held, || 2), Some(2));
            drop(held);
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                gone.store(true, Relaxed);
                drop(holder);
            });
            let held = futures_lite::future::block_on(lane.hold(5)).unwrap();
            assert!(gone.load(Relaxed), "held only once let go");
            let mut held = Some(held);
            assert_eq!(lane.run_held(5, true, &mut held, || 3), Some(3));
        });
        assert!(Lane::single().run_held(5, true, &mut None, || ()).is_some());
    }

    /// A payload thread waits for a color as a task: its stage runs the jobs
    /// handed to it meanwhile (a parked thread ran none until the color's
    /// holder let go). `seda-s:2`'s two payload threads, both calls from
    /// outside its loops: both go to the first.
    #[test]
    fn a_payload_thread_waiting_for_a_color_runs_other_jobs() {
        let stages: Vec<Arc<Stage>> = (0..2)
            .map(|i| {
                Stage::start(
                    i,
                    8,
                    format!("t-payload-wait-{i}"),
                    Duration::ZERO,
                    None,
                    None,
                )
                .unwrap()
            })
            .collect();
        let stage = stages[0].clone();
        let locks = ColorLocks::new();
        let p = Payload::new(
            Dispatch::Paired(stages.clone(), HashMap::new(), locks.clone()),
            Handoff::Always,
            &[],
        );
        let holder = locks.try_lock(ColorLocks::slot(5)).unwrap();
        std::thread::scope(|s| {
            let waiting = s.spawn(|| futures_lite::future::block_on(p.call_colored(5, || 1)));
            // Long enough for it to reach the stage and wait there.
            std::thread::sleep(Duration::from_millis(50));
            let (tx, rx) = std::sync::mpsc::channel();
            let p2 = p.clone();
            s.spawn(move || tx.send(futures_lite::future::block_on(p2.call_colored(6, || 2))));
            let other = rx.recv_timeout(Duration::from_secs(10));
            assert!(!waiting.is_finished(), "color 5 waits for its holder");
            drop(holder);
            assert_eq!(
                other,
                Ok(2),
                "the first payload thread ran color 6 meanwhile"
            );
            assert_eq!(waiting.join().unwrap(), 1);
        });
        for s in stages {
            s.stop();
        }
        drop(stage);
    }

    /// `seda`'s spread: a batch whose color has a batch out follows it to
    /// that thread, however busy; any other (or one of no known color)
    /// goes to the thread with fewer jobs out (counted by the stage from
    /// send to answer).
    #[test]
    fn a_batch_follows_its_color_else_goes_to_the_less_busy_thread() {
        let stages: Vec<Arc<Stage>> = (0..2)
            .map(|i| {
                Stage::start(i, 4, format!("t-spread-{i}"), Duration::ZERO, None, None).unwrap()
            })
            .collect();
        let spread = Spread::new();
        let (home, out) = spread.pick(&stages, Some(7));
        // A job that holds the thread `home` until told to finish.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let busy = stages[home].clone();
        let job = std::thread::spawn(move || {
            duality_rt::block_on(async move { busy.run(move || rx.recv().ok()).await })
        });
        let t0 = Instant::now();
        while stages[home].in_flight() == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the job never went out"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let other = 1 - home;
        for _ in 0..4 {
            assert_eq!(spread.pick(&stages, Some(7)).0, home, "follows its color");
        }
        for color in 100..104 {
            assert_eq!(
                spread.pick(&stages, Some(color)).0,
                other,
                "the less busy thread"
            );
        }
        // A batch of no known color follows nothing.
        let (i, none) = spread.pick(&stages, None);
        assert!(i == other && none.is_none());
        drop(out);
        assert_eq!(
            spread.pick(&stages, Some(7)).0,
            other,
            "nothing of 7 out: free again"
        );
        tx.send(()).unwrap();
        assert_eq!(job.join().unwrap(), Some(()));
        assert_eq!(stages[home].in_flight(), 0, "answered: no longer out");
        for s in stages {
            s.stop();
        }
    }

    /// One payload thread that every batch goes to runs all colored work:
    /// its lane takes no lock (as `amped`'s affinity takes none); with two,
    /// or with the loop running batches too (adaptive), it does.
    #[test]
    fn a_lone_payload_thread_takes_no_color_lock() {
        let stages: Vec<Arc<Stage>> = (0..2)
            .map(|i| {
                Stage::start(
                    i,
                    4,
                    format!("t-payload-one-{i}"),
                    Duration::ZERO,
                    None,
                    None,
                )
                .unwrap()
            })
            .collect();
        let locks = ColorLocks::new();
        let one = vec![stages[0].clone()];
        let locked = |p: &Payload| lane_of(p, 3).1.locks.is_some();
        let rr = |s: &[Arc<Stage>], h| {
            Payload::new(
                Dispatch::RoundRobin(s.to_vec(), Spread::new(), locks.clone()),
                h,
                &[],
            )
        };
        let paired = |s: &[Arc<Stage>], h| {
            Payload::new(
                Dispatch::Paired(s.to_vec(), HashMap::new(), locks.clone()),
                h,
                &[],
            )
        };
        assert!(!locked(&rr(&one, Handoff::Always)));
        assert!(!locked(&paired(&one, Handoff::Always)));
        assert!(locked(&rr(&stages, Handoff::Always)));
        assert!(locked(&paired(&stages, Handoff::Always)));
        assert!(locked(&rr(&one, Handoff::Adaptive)));
        assert!(locked(&paired(&one, Handoff::Adaptive)));
        for s in stages {
            s.stop();
        }
    }

    /// An adaptive model with one network loop: its inline batches take no
    /// color lock while no colored job is out, and do while one is; colored
    /// work asked for elsewhere is sent from the loop, which counts it.
    #[test]
    fn a_lone_loop_runs_colors_lock_free_while_no_job_is_out() {
        let stage =
            Stage::start(0, 4, "t-payload-solo".into(), Duration::ZERO, None, None).unwrap();
        let net = duality_rt::LoopThread::spawn(duality_rt::LoopConfig::default()).unwrap();
        let home = net.handle();
        let locks = ColorLocks::new();
        let p = Payload::new(
            Dispatch::RoundRobin(vec![stage.clone()], Spread::new(), locks.clone()),
            Handoff::Adaptive,
            &[home],
        );
        let a = p.0.adaptive.as_ref().unwrap();
        // Batches learned cheap: they stay on the loop.
        a.placer.ran_inline(Duration::from_nanos(100));
        assert!(p.inline_lane().is_none(), "no inline lane off the loop");
        // Whether a batch of `color` on the loop now holds the color's lock.
        let locked_on_loop = |color: u64| {
            let (p, l) = (p.clone(), locks.clone());
            futures_lite::future::block_on(home.spawn(async move {
                let lane = p.inline_lane().expect("inline on the loop");
                let mut held = None;
                let free = |c| l.try_lock(ColorLocks::slot(c)).is_some();
                lane.run_held(color, true, &mut held, || !free(color))
                    .unwrap()
            }))
            .unwrap()
        };
        assert!(!locked_on_loop(7), "none out: no lock");
        // A colored job asked for on this thread, held on its payload thread.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (started, ran) = std::sync::mpsc::channel();
        let p2 = p.clone();
        let job = std::thread::spawn(move || {
            futures_lite::future::block_on(p2.call_colored(5, move || {
                started.send(on_payload_thread()).unwrap();
                wait.recv().unwrap();
            }))
        });
        assert_eq!(ran.recv_timeout(Duration::from_secs(10)), Ok(true));
        assert!(!a.solo.as_ref().unwrap().away.all_home(), "counted out");
        assert!(locked_on_loop(7), "a job out: the loop's batches lock");
        go.send(()).unwrap();
        job.join().unwrap();
        assert!(a.solo.as_ref().unwrap().away.all_home(), "counted back");
        assert!(!locked_on_loop(7));
        stage.stop();
        drop(net);
    }

    #[test]
    fn handoff_policies_parse_and_print() {
        for h in [Handoff::Always, Handoff::Adaptive] {
            assert_eq!(h.to_string().parse::<Handoff>(), Ok(h));
        }
        assert!("sometimes"
            .parse::<Handoff>()
            .unwrap_err()
            .contains("always or adaptive"));
    }
}

/// Model checks of [`Away`]: a lone network loop that reads no colored job
/// out runs a color without its lock; the job that was out ran under the
/// lock on another thread. Loom's cell says whether the two runs of the
/// color's state are ordered: with the count's `Release`/`Acquire` relaxed
/// it reports the loop's run racing the job's.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;

    #[test]
    fn a_loop_that_sees_no_job_out_runs_after_the_jobs_work() {
        loom::model(|| {
            let away = Away::new();
            // One color's state and its lock (the payload thread's side).
            let state = Arc::new(UnsafeCell::new(0u32));
            let lock = Arc::new(crate::loom::Mutex::new(()));
            let back = away.leave();
            let (s, l) = (state.clone(), lock.clone());
            let job = loom::thread::spawn(move || {
                let held = l.lock().unwrap();
                // SAFETY: the color's state: the job holds its lock, and the
                // loop runs it lock-free only once the job is counted back.
                s.with_mut(|v| unsafe { *v += 1 });
                drop(held);
                drop(back);
            });
            // The loop's next batch of that color.
            if away.all_home() {
                // SAFETY: no job out, so the job's run happened before this.
                state.with_mut(|v| unsafe { *v += 1 });
            } else {
                let held = lock.lock().unwrap();
                // SAFETY: under the color's lock, as the job's run is.
                state.with_mut(|v| unsafe { *v += 1 });
                drop(held);
            }
            job.join().unwrap();
            // SAFETY: both runs are over (joined).
            assert_eq!(state.with(|v| unsafe { *v }), 2);
            assert!(away.all_home());
        });
    }
}
