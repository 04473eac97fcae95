//! `Payload`: where a connection's payload work runs, and colors.
//!
//! The connection handler calls `payload.call(job).await` (or
//! `call_colored(color, job)`); the model decides where `job` runs:
//!
//! | model | where | how one color stays exclusive | cost per job |
//! |---|---|---|---|
//! | `sped` | inline | one thread: nothing else runs | none |
//! | `symped`, `steal`, `thread-per-conn` | inline | a lock per color slot | one uncontended lock |
//! | `amped:P` | payload thread `color % P` | affinity: a color has one thread | a hand-off |
//! | `seda:N:P` | payload threads round-robin | a lock per color slot | a hand-off + a lock |
//! | `seda-s:N` | the calling loop's paired thread | a lock per color slot | a hand-off + a lock |
//!
//! Colors (seed 003, libasync-mp): two jobs of one color never run at the
//! same time, in every model; jobs of different colors may run in parallel.
//! [`Payload::call`] uses [`DEFAULT_COLOR`], so a server written for one thread
//! stays correct: all its default-colored jobs are serialised. Color locks are
//! a fixed array of slots indexed by `color % slots`: two colors may share a
//! slot (less parallelism), never the reverse.
//!
//! The session driver (`session`) does not hand off one request at a time: it
//! sends one *batch* per read ([`Payload::batch`]), which runs on one thread
//! and executes requests while their colors belong there ([`Lane`]).

use crate::stage::Stage;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// The color `call` uses.
pub const DEFAULT_COLOR: u64 = 0;

/// Number of color-lock slots.
const COLOR_SLOTS: usize = 1024;

pub(crate) struct ColorLocks(Box<[Mutex<()>]>);

impl ColorLocks {
    pub(crate) fn new() -> Arc<ColorLocks> {
        Arc::new(ColorLocks(
            (0..COLOR_SLOTS).map(|_| Mutex::new(())).collect(),
        ))
    }
    fn run<R>(&self, color: u64, job: impl FnOnce() -> R) -> R {
        let _g = self.0[(color % COLOR_SLOTS as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        job()
    }
}

pub(crate) enum Dispatch {
    /// Inline: one thread (colors hold trivially, the lane takes no lock) or
    /// several, with color locks. The lane is kept here so a connection can
    /// borrow it per read instead of holding a copy.
    Inline(Lane),
    /// Payload thread chosen by color.
    Affinity(Vec<Arc<Stage>>),
    /// Payload threads round-robin.
    RoundRobin(Vec<Arc<Stage>>, AtomicUsize, Arc<ColorLocks>),
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
}

/// Where one job or batch goes.
enum Route<'a> {
    Here(&'a Lane),
    Stage(&'a Arc<Stage>, Lane),
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

    /// A lane that admits every color and keeps each exclusive with `locks`.
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

    /// Runs `job` keeping `color` exclusive. `locked` false: the caller's
    /// state keeps colors exclusive by itself, take no second lock.
    #[inline]
    pub fn run<R>(&self, color: u64, locked: bool, job: impl FnOnce() -> R) -> R {
        match &self.locks {
            Some(l) if locked => l.run(color, job),
            _ => job(),
        }
    }
}

impl Payload {
    pub(crate) fn new(dispatch: Dispatch) -> Payload {
        Payload(Arc::new(Shared {
            dispatch,
            next_blocking: AtomicUsize::new(0),
        }))
    }

    /// A payload that runs everything inline on one thread (for tests and
    /// single-threaded tools).
    pub fn single() -> Payload {
        Payload::new(Dispatch::Inline(Lane::single()))
    }

    /// The lane of a model that runs payload work inline (`None` in the
    /// hand-off models): the driver then serves a read where it is, borrowing
    /// its buffer.
    pub(crate) fn inline_lane(&self) -> Option<&Lane> {
        match &self.0.dispatch {
            Dispatch::Inline(lane) => Some(lane),
            _ => None,
        }
    }

    /// True if the thread a batch runs on depends on its first request's color.
    pub(crate) fn routes_by_color(&self) -> bool {
        matches!(&self.0.dispatch, Dispatch::Affinity(s) if s.len() > 1)
    }

    fn route(&self, color: u64) -> Route<'_> {
        match &self.0.dispatch {
            Dispatch::Inline(lane) => Route::Here(lane),
            Dispatch::Affinity(stages) => {
                let i = (color % stages.len() as u64) as usize;
                Route::Stage(
                    &stages[i],
                    Lane {
                        affinity: Some((i, stages.len())),
                        locks: None,
                    },
                )
            }
            Dispatch::RoundRobin(stages, next, locks) => {
                let i = next.fetch_add(1, Relaxed) % stages.len();
                Route::Stage(
                    &stages[i],
                    Lane {
                        affinity: None,
                        locks: Some(locks.clone()),
                    },
                )
            }
            Dispatch::Paired(stages, pairs, locks) => {
                let id = duality_rt::event_loop::current().map(|h| h.id());
                let i = id.and_then(|id| pairs.get(&id).copied()).unwrap_or(0);
                Route::Stage(
                    &stages[i],
                    Lane {
                        affinity: None,
                        locks: Some(locks.clone()),
                    },
                )
            }
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
        match self.route(color) {
            Route::Here(lane) => lane.run(color, true, job),
            Route::Stage(stage, lane) => stage.run(move || lane.run(color, true, job)).await,
        }
    }

    /// Runs a batch: `job` gets the [`Lane`] it runs on and must execute only
    /// what the lane admits, under [`Lane::run`]. `color` is the color of the
    /// batch's first request where the model routes by color (see
    /// `routes_by_color`); otherwise any value. Inline models run it here and
    /// now; hand-off models move it (and what it owns) to a payload thread
    /// and back.
    pub async fn batch<R, F>(&self, color: u64, job: F) -> R
    where
        F: FnOnce(&Lane) -> R + Send + 'static,
        R: Send + 'static,
    {
        match self.route(color) {
            Route::Here(lane) => job(lane),
            Route::Stage(stage, lane) => stage.run(move || job(&lane)).await,
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
