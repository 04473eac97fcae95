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

use crate::stage::{Job, Stage};
use atomic_waker::AtomicWaker;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// The color `call` uses.
pub const DEFAULT_COLOR: u64 = 0;

/// Number of color-lock slots.
const COLOR_SLOTS: usize = 1024;

struct ColorLocks(Box<[Mutex<()>]>);

impl ColorLocks {
    fn new() -> ColorLocks {
        ColorLocks((0..COLOR_SLOTS).map(|_| Mutex::new(())).collect())
    }
    fn run<R>(&self, color: u64, job: impl FnOnce() -> R) -> R {
        let _g = self.0[(color % COLOR_SLOTS as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        job()
    }
}

pub(crate) enum Dispatch {
    /// One thread does everything: colors hold trivially.
    Single,
    /// Inline on several threads.
    Inline(ColorLocksHandle),
    /// Payload thread chosen by color.
    Affinity(Vec<Arc<Stage>>),
    /// Payload threads round-robin.
    RoundRobin(Vec<Arc<Stage>>, AtomicUsize, ColorLocksHandle),
    /// The payload thread paired with the calling loop (by loop id).
    Paired(Vec<Arc<Stage>>, HashMap<u16, usize>, ColorLocksHandle),
}

pub(crate) struct ColorLocksHandle(Arc<ColorLocks>);

impl ColorLocksHandle {
    pub(crate) fn new() -> ColorLocksHandle {
        ColorLocksHandle(Arc::new(ColorLocks::new()))
    }
    fn clone_inner(&self) -> Arc<ColorLocks> {
        self.0.clone()
    }
}

/// The handle a connection uses to run payload work. Cheap to clone.
#[derive(Clone)]
pub struct Payload {
    dispatch: Arc<Dispatch>,
}

impl Payload {
    pub(crate) fn new(dispatch: Dispatch) -> Payload {
        Payload {
            dispatch: Arc::new(dispatch),
        }
    }

    /// A payload that runs everything inline on one thread (for tests and
    /// single-threaded tools).
    pub fn single() -> Payload {
        Payload::new(Dispatch::Single)
    }

    /// Runs `job` here and now if the model runs payload work inline (`sped`,
    /// `symped`, `steal`, `thread-per-conn`), keeping its color exclusive;
    /// returns `None` without running it in the hand-off models, whose jobs
    /// must be `'static` and go through [`call_colored`](Self::call_colored).
    /// Lets a server borrow its read buffer instead of copying a request.
    pub fn try_inline<R>(&self, color: u64, job: impl FnOnce() -> R) -> Option<R> {
        match &*self.dispatch {
            Dispatch::Single => Some(job()),
            Dispatch::Inline(locks) => Some(locks.0.run(color, job)),
            _ => None,
        }
    }

    /// Runs `job` with the default color.
    pub fn call<R, F>(&self, job: F) -> Call<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.call_colored(DEFAULT_COLOR, job)
    }

    /// Runs `job` where the model says, never at the same time as another job
    /// of the same `color`. A panic in `job` resumes in the caller.
    pub fn call_colored<R, F>(&self, color: u64, job: F) -> Call<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let (stage, locks) = match &*self.dispatch {
            Dispatch::Single => return Call::ready(job()),
            Dispatch::Inline(locks) => return Call::ready(locks.0.run(color, job)),
            Dispatch::Affinity(stages) => {
                (stages[(color % stages.len() as u64) as usize].clone(), None)
            }
            Dispatch::RoundRobin(stages, next, locks) => {
                let i = next.fetch_add(1, Relaxed) % stages.len();
                (stages[i].clone(), Some(locks.clone_inner()))
            }
            Dispatch::Paired(stages, pairs, locks) => {
                let id = duality_rt::event_loop::current().map(|h| h.id());
                let i = id.and_then(|id| pairs.get(&id).copied()).unwrap_or(0);
                (stages[i].clone(), Some(locks.clone_inner()))
            }
        };
        let slot = Arc::new(Slot {
            value: Mutex::new(None),
            waker: AtomicWaker::new(),
        });
        let s = slot.clone();
        let job: Job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match locks {
                Some(l) => l.run(color, job),
                None => job(),
            }));
            *s.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            s.waker.wake();
        });
        Call {
            state: CallState::Queued {
                stage,
                job: Some(job),
                slot,
                waiting: None,
            },
        }
    }
}

struct Slot<R> {
    value: Mutex<Option<std::thread::Result<R>>>,
    waker: AtomicWaker,
}

enum CallState<R> {
    Ready(Option<R>),
    Queued {
        stage: Arc<Stage>,
        job: Option<Job>,
        slot: Arc<Slot<R>>,
        /// Tells the loop an answer is on its way (it waits briefly before sleeping).
        waiting: Option<duality_rt::RemoteWait>,
    },
}

/// The future of [`Payload::call`].
#[must_use = "futures do nothing unless awaited"]
pub struct Call<R> {
    state: CallState<R>,
}

impl<R> Call<R> {
    fn ready(v: R) -> Call<R> {
        Call {
            state: CallState::Ready(Some(v)),
        }
    }
}

impl<R> Unpin for Call<R> {}

impl<R> Future for Call<R> {
    type Output = R;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        match &mut self.state {
            CallState::Ready(v) => Poll::Ready(v.take().expect("Call polled after completion")),
            CallState::Queued {
                stage,
                job,
                slot,
                waiting,
            } => {
                if waiting.is_none() {
                    *waiting = Some(duality_rt::RemoteWait::new());
                }
                if let Some(j) = job.take() {
                    slot.waker.register(cx.waker());
                    if let Err(j) = stage.try_push(j) {
                        // Full: wait for the payload thread to make room.
                        stage.wait_for_room(cx.waker());
                        match stage.try_push(j) {
                            Ok(()) => {}
                            Err(j) => {
                                *job = Some(j);
                                return Poll::Pending;
                            }
                        }
                    }
                }
                slot.waker.register(cx.waker());
                let v = slot.value.lock().unwrap_or_else(|e| e.into_inner()).take();
                match v {
                    Some(Ok(v)) => Poll::Ready(v),
                    Some(Err(p)) => std::panic::resume_unwind(p),
                    None => Poll::Pending,
                }
            }
        }
    }
}
