//! The loop registry: the part of each loop that other threads may touch.
//!
//! A task records its owning loop as a 16-bit id (two bytes in the task header
//! instead of an eight-byte pointer); the id indexes the registry's slots. A `Shared` is
//! never freed: when a loop ends its slot is cleared and goes back on a free
//! list, and the next loop reuses both the id and the `Shared` (its eventfd
//! included). So a `&'static Shared` read from a slot is always valid memory.
//!
//! An id goes back on the free list only once no task of the ended loop is
//! alive: a task parked on something outside its loop (a pool job, a channel)
//! outlives the loop, and woken after its id had been reused it would run on
//! a loop that is not its own. Until then the slot is *draining*: a wake of
//! such a task finds no loop (it is cancelled, see `event_loop::schedule`),
//! and the last of them to end frees the id.

use crate::loom::{lock, lock_std, AtomicI64, AtomicPtr, AtomicU32, Mutex};
use crate::task::HandoffQueue;
use hdrhistogram::Histogram;
use std::io;
use std::os::fd::RawFd;
#[cfg(not(loom))]
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// At most this many loops exist at once in a process.
#[cfg(not(loom))]
pub const MAX_LOOPS: usize = 1 << 16;
/// Under loom: ids 0 and 1 are the task models' pretend loops (their run
/// queues, see `task::loom_tests`), which never touch the registry; the
/// registry's models take ids from [`FIRST_ID`] on.
#[cfg(loom)]
pub const MAX_LOOPS: usize = 5;
#[cfg(not(loom))]
const FIRST_ID: usize = 0;
#[cfg(loom)]
const FIRST_ID: usize = 2;

/// Which loop holds each id. (The pool is a static of its own: its `Vec`s'
/// dangling pointers are not zero, and beside them these megabyte-sized
/// null arrays would go from `.bss` into the binary.)
struct Registry {
    /// The live loop of each id (null: none).
    slots: [AtomicPtr<Shared>; MAX_LOOPS],
    /// Every `Shared` by id, live or not (set once, when the id is first used).
    all: [AtomicPtr<Shared>; MAX_LOOPS],
}

struct Pool {
    free: Vec<&'static Shared>,
    /// Ended loops some of whose tasks are still alive.
    draining: Vec<&'static Shared>,
    next_id: usize,
}

#[cfg(not(loom))]
static REG: Registry = Registry {
    slots: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_LOOPS],
    all: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_LOOPS],
};

#[cfg(not(loom))]
static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    draining: Vec::new(),
    next_id: FIRST_ID,
});

// Under loom the registry lives for one execution of a model (loom resets
// its statics between executions), and frees the `Shared`s it made.
#[cfg(loom)]
loom::lazy_static! {
    static ref REG: Registry = Registry {
        slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        all: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
    };
    static ref POOL: Mutex<Pool> = Mutex::new(Pool {
        free: Vec::new(),
        draining: Vec::new(),
        next_id: FIRST_ID,
    });
}

#[cfg(loom)]
impl Drop for Registry {
    fn drop(&mut self) {
        // A failed model unwinds past loom's execution, where its atomics
        // can no longer be read (a panic here would abort the test binary
        // and lose loom's report): leak instead.
        if std::thread::panicking() {
            return;
        }
        for a in &self.all {
            let p = a.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: under loom every `Shared` of `all` was made by
                // `acquire` with `Box::leak` in this execution, which has
                // ended: none of its `&'static` references is used again.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

/// Under loom: whether task `owner`'s loop is one the registry gave out
/// (ids below [`FIRST_ID`] are the task models' pretend loops).
#[cfg(all(test, loom))]
pub(crate) fn modeled(owner: u16) -> bool {
    usize::from(owner) >= FIRST_ID
}

/// Counters other threads read; written by the loop with relaxed stores.
#[derive(Default)]
pub(crate) struct SharedStats {
    /// Through the shim: counted against the loop's end (see [`release`]).
    pub(crate) tasks_alive: AtomicI64,
    pub(crate) polls: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) handoffs: AtomicU64,
    pub(crate) handoff_batches: AtomicU64,
    pub(crate) io_events: AtomicU64,
    pub(crate) timers_fired: AtomicU64,
    pub(crate) long_polls: AtomicU64,
    pub(crate) turns: AtomicU64,
    pub(crate) run_queue_depth: AtomicUsize,
    pub(crate) io_sources: AtomicUsize,
    pub(crate) timers_pending: AtomicUsize,
    /// Tasks of this loop waiting for an answer from another thread (see `RemoteWait`).
    pub(crate) awaiting_remote: AtomicUsize,
    /// Times the loop waited briefly for such an answer instead of sleeping.
    pub(crate) spins: AtomicU64,
}

pub(crate) struct Shared {
    pub(crate) id: u16,
    /// Bumped each time the slot is reused, so a handle to an ended loop
    /// cannot act on the loop that took its slot.
    pub(crate) generation: AtomicU32,
    pub(crate) handoff: HandoffQueue,
    /// Whether the loop is (about to be) blocked in `epoll_wait`.
    sleep: SleepGate,
    /// The `block_on` future was woken. Work for the sleep handshake, as a
    /// pushed task (`SeqCst` store, then `notify`), so through the shim.
    pub(crate) main_woken: crate::loom::AtomicBool,
    /// The loop is asked to stop (the same handshake).
    pub(crate) stop: crate::loom::AtomicBool,
    pub(crate) tid: AtomicI64,
    pub(crate) name: std::sync::Mutex<String>,
    /// The eventfd that wakes the loop (none under loom: no loop sleeps
    /// in a kernel there; the handshake itself is [`SleepGate`]).
    #[cfg(not(loom))]
    wake_fd: OwnedFd,
    pub(crate) stats: SharedStats,
    /// Poll-time histogram (ns), merged in by the loop every few milliseconds.
    pub(crate) poll_hist: std::sync::Mutex<Histogram<u64>>,
    /// Per-request metrics, merged in by the loop every few milliseconds and
    /// before it sleeps.
    pub(crate) requests: std::sync::Mutex<crate::stats::RequestMetrics>,
    /// Bumped (while `requests` is held) by each reset of them. The loop
    /// reads it at the start of every turn and forgets what it recorded
    /// before (a turn's worth at most is lost around a reset); a merge
    /// that finds it moved since drops its samples instead of adding them.
    pub(crate) requests_epoch: std::sync::atomic::AtomicU64,
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid histogram bounds")
}

impl Shared {
    fn new(id: u16) -> io::Result<Shared> {
        Ok(Shared {
            id,
            generation: AtomicU32::new(0),
            handoff: HandoffQueue::new(),
            sleep: SleepGate::new(),
            main_woken: crate::loom::AtomicBool::new(false),
            stop: crate::loom::AtomicBool::new(false),
            tid: AtomicI64::new(0),
            name: std::sync::Mutex::new(String::new()),
            #[cfg(not(loom))]
            wake_fd: eventfd()?,
            stats: SharedStats::default(),
            poll_hist: std::sync::Mutex::new(new_histogram()),
            requests: std::sync::Mutex::new(crate::stats::RequestMetrics::default()),
            requests_epoch: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn reset(&self) {
        self.sleep.after_sleep();
        self.main_woken.store(false, Ordering::Relaxed);
        self.stop.store(false, Ordering::Relaxed);
        let s = &self.stats;
        for c in [
            &s.polls,
            &s.wakeups,
            &s.handoffs,
            &s.handoff_batches,
            &s.io_events,
            &s.timers_fired,
            &s.long_polls,
            &s.turns,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        // `tasks_alive` is not zeroed: a freed slot's count is 0, except
        // for a task a stale `LoopHandle::spawn` is counting on it right
        // now, whose cancel counts it off again on this same `Shared`;
        // zeroed in between, the new loop would count one task too few.
        lock_std(&self.poll_hist).reset();
        lock_std(&self.requests).reset();
        self.clear_wake_fd();
    }

    pub(crate) fn wake_fd(&self) -> RawFd {
        #[cfg(not(loom))]
        return self.wake_fd.as_raw_fd();
        #[cfg(loom)]
        return -1;
    }

    /// Wakes the loop if, and only if, it is (about to be) blocked in the
    /// reactor. Call after publishing work (`SeqCst`), so that either the loop's
    /// re-check sees the work or this sees `sleeping` — never neither.
    pub(crate) fn notify(&self) {
        if self.sleep.notify() {
            self.stats.wakeups.fetch_add(1, Ordering::Relaxed);
            #[cfg(not(loom))]
            write_eventfd(self.wake_fd.as_raw_fd());
        }
    }

    /// The loop announces it may block; returns false if work arrived meanwhile
    /// (then it must not block).
    pub(crate) fn prepare_sleep(&self) -> bool {
        self.sleep.prepare_sleep(|| {
            !self.handoff.is_empty()
                || self.main_woken.load(Ordering::SeqCst)
                || self.stop.load(Ordering::SeqCst)
        })
    }

    /// True while the loop is (about to be) blocked with nothing to do.
    pub(crate) fn is_sleeping(&self) -> bool {
        self.sleep.is_sleeping()
    }

    pub(crate) fn after_sleep(&self) {
        self.sleep.after_sleep();
    }

    pub(crate) fn clear_wake_fd(&self) {
        #[cfg(not(loom))]
        drain_eventfd(self.wake_fd.as_raw_fd());
    }
}

/// The sleep/notify handshake between a loop and the threads that hand it work.
///
/// The loop announces `sleeping` and then looks for work once more before it
/// blocks; a producer publishes work and then looks at `sleeping`. All four
/// accesses are `SeqCst`, hence totally ordered, so either the loop's re-check
/// sees the work or the producer sees `sleeping` and wakes the loop — never
/// neither (a Dekker handshake). The `swap` lets only one of many producers
/// pay for the eventfd write; while the loop is awake nobody writes it.
///
/// Model-checked in `loom_tests` below. Loom treats `SeqCst` accesses as
/// `AcqRel` and so cannot see the total order they give; under `cfg(loom)`
/// the handshake carries the equivalent `fence(SeqCst)` on each side (the
/// store-buffering litmus test is forbidden both ways), and normal builds are
/// unchanged.
pub(crate) struct SleepGate {
    sleeping: crate::loom::AtomicBool,
}

impl SleepGate {
    pub(crate) fn new() -> SleepGate {
        SleepGate {
            sleeping: crate::loom::AtomicBool::new(false),
        }
    }

    /// Producer side, after publishing work with a `SeqCst` access: true if
    /// the loop sleeps and the caller must wake it (the flag is cleared, so
    /// exactly one caller gets true per sleep).
    #[inline]
    pub(crate) fn notify(&self) -> bool {
        #[cfg(loom)]
        crate::loom::fence(Ordering::SeqCst);
        self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst)
    }

    /// Loop side: announces the sleep, then asks `work_pending` (which must
    /// read with `SeqCst`). False if work was found: then the loop must not block.
    #[inline]
    pub(crate) fn prepare_sleep(&self, work_pending: impl FnOnce() -> bool) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        #[cfg(loom)]
        crate::loom::fence(Ordering::SeqCst);
        if work_pending() {
            self.sleeping.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// True while the loop is (about to be) blocked with nothing to do.
    pub(crate) fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::SeqCst)
    }

    /// Loop side: back from the reactor (or never went).
    pub(crate) fn after_sleep(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

/// Takes a free loop slot (or makes a new one).
pub(crate) fn acquire() -> io::Result<&'static Shared> {
    let mut pool = lock(&POOL);
    let shared = match pool.free.pop() {
        Some(s) => {
            s.reset();
            s
        }
        None => {
            if pool.next_id >= MAX_LOOPS {
                return Err(io::Error::other(format!(
                    "too many duality event loops (at most {MAX_LOOPS} at once)"
                )));
            }
            let id = pool.next_id as u16;
            pool.next_id += 1;
            let shared = &*Box::leak(Box::new(Shared::new(id)?));
            REG.all[id as usize].store(shared as *const Shared as *mut Shared, Ordering::Release);
            shared
        }
    };
    REG.slots[shared.id as usize].store(shared as *const Shared as *mut Shared, Ordering::Release);
    Ok(shared)
}

/// Returns a slot after its loop ended: free at once if none of its tasks
/// is alive, else draining until the last one ends ([`task_ended`]).
///
/// Its marks of the end (the generation, the slot) are `SeqCst`, as the
/// looks on the other side (`LoopHandle::spawn` counting a task then
/// looking at the generation, `task_ended` counting one off then looking at
/// the slot): of a mark and a count made at once, one side always sees the
/// other's (store buffering is forbidden), so a late spawn always sees the
/// loop gone (and cancels its task) where the count it read left the slot
/// free, and the last task of a draining slot always frees it. Emptying
/// the queue is an `AcqRel` swap, which a waker's `SeqCst` push reads from:
/// a push after it sees the slot cleared and takes its task back.
pub(crate) fn release(shared: &'static Shared) {
    // A new generation first: from here on, handles to the ended loop are no-ops.
    shared.generation.fetch_add(1, Ordering::SeqCst);
    // Under the pool's lock, so that a task ending from here on counts
    // itself off under it too (see `task_ended`).
    {
        let _pool = lock(&POOL);
        REG.slots[shared.id as usize].store(std::ptr::null_mut(), Ordering::SeqCst);
    }
    // Outside the lock: cancelling a task here ends it (`task_ended` locks).
    super::cancel_handoff(shared);
    let mut pool = lock(&POOL);
    seq_cst_fence();
    if shared.stats.tasks_alive.load(Ordering::SeqCst) > 0 {
        pool.draining.push(shared);
    } else {
        pool.free.push(shared);
    }
}

/// A task of loop `id` ended (its future was dropped). `live` is the loop if
/// it was running when the task looked; `None` once it had ended.
pub(crate) fn task_ended(id: u16, live: Option<&'static Shared>) {
    if let Some(shared) = live {
        // The loop may have ended since the look: then its slot may be
        // draining and this was its last task.
        if shared.stats.tasks_alive.fetch_sub(1, Ordering::SeqCst) == 1 && {
            seq_cst_fence();
            get(id).is_none()
        } {
            free_if_drained(&mut lock(&POOL), id);
        }
        return;
    }
    let mut pool = lock(&POOL);
    // SAFETY: `all` only ever holds pointers to leaked (never freed) `Shared`s.
    if let Some(shared) = unsafe { REG.all[id as usize].load(Ordering::Acquire).as_ref() } {
        shared.stats.tasks_alive.fetch_sub(1, Ordering::AcqRel);
        free_if_drained(&mut pool, id);
    }
}

fn free_if_drained(pool: &mut Pool, id: u16) {
    if let Some(i) = pool
        .draining
        .iter()
        .position(|s| s.id == id && s.stats.tasks_alive.load(Ordering::Acquire) <= 0)
    {
        let shared = pool.draining.swap_remove(i);
        pool.free.push(shared);
    }
}

/// The live loop with this id.
pub(crate) fn get(id: u16) -> Option<&'static Shared> {
    // SeqCst: see `release`.
    let p = REG.slots[id as usize].load(Ordering::SeqCst);
    // SAFETY: slots only ever hold pointers to leaked (never freed) `Shared`s.
    unsafe { p.as_ref() }
}

/// Every live loop (for process-wide introspection).
pub(crate) fn all() -> Vec<&'static Shared> {
    let n = lock(&POOL).next_id;
    (FIRST_ID..n).filter_map(|i| get(i as u16)).collect()
}

/// Loom treats `SeqCst` accesses as `AcqRel` and so cannot see the total
/// order the store-buffering pairs of the loop's end rely on (see
/// [`release`]); under `cfg(loom)` each side carries the equivalent
/// `fence(SeqCst)` between its mark and its look. Nothing otherwise.
#[inline(always)]
pub(crate) fn seq_cst_fence() {
    #[cfg(loom)]
    crate::loom::fence(Ordering::SeqCst);
}

#[cfg(not(loom))]
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with constant flags; no memory is passed.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(not(loom))]
fn write_eventfd(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local; an error (counter saturated)
    // means a wake-up is already pending, which is all we want.
    unsafe { libc::write(fd, &one as *const u64 as *const libc::c_void, 8) };
}

#[cfg(not(loom))]
fn drain_eventfd(fd: RawFd) {
    let mut buf: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live local; EAGAIN when empty is fine.
    unsafe { libc::read(fd, &mut buf as *mut u64 as *mut libc::c_void, 8) };
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::SleepGate;
    use crate::loom::{thread, Arc, AtomicBool, AtomicUsize};
    use crate::task::{self, HandoffQueue, JoinError, LocalQueue};
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
    use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

    /// A future that never completes, keeps the waker of its last poll
    /// and raises its flag when dropped.
    struct Parked(Arc<AtomicBool>, Arc<std::sync::Mutex<Option<Waker>>>);

    impl Future for Parked {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            *self.1.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    impl Drop for Parked {
        fn drop(&mut self) {
            self.0.store(true, Release);
        }
    }

    fn noop_waker() -> Waker {
        static VTABLE: RawWakerVTable =
            RawWakerVTable::new(|p| RawWaker::new(p, &VTABLE), |_| {}, |_| {}, |_| {});
        // SAFETY: every function of the vtable ignores the (null) data pointer.
        unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
    }

    /// How the loop's parked task ends, on a thread of its own.
    #[derive(Clone, Copy)]
    enum LastTask {
        /// Its wake-up source gives up on it: aborted and run (its future
        /// dropped, `task_ended`) wherever its loop is.
        Aborted,
        /// Its wake-up source fires: the wake routes it to its loop's
        /// hand-off queue while the slot looks live (the loop's end then
        /// cancels it), or cancels it once the loop is gone.
        Woken,
    }

    /// A loop ends (`release`) while, on other threads, a stale handle
    /// spawns a task on it (`LoopHandle::spawn`, routed to its hand-off
    /// queue while the slot looks live) and the loop's last task, parked
    /// outside it, ends (`how`); then a new loop takes a slot (`acquire`),
    /// perhaps this one. Checks the store-buffering pairs of `release`: the
    /// late task is cancelled whichever side sees the other, never left in
    /// the hand-off queue the id's next loop would run; the slot is free
    /// again exactly when no task of the ended loop is alive, and never
    /// handed to a new loop before that; the count ends at zero.
    fn loop_end_vs_late_spawn_and_last_task(how: LastTask) {
        let mut model = loom::model::Builder::new();
        model.preemption_bound.get_or_insert(2);
        model.check(move || {
            let shared = super::acquire().expect("a slot");
            let id = shared.id;
            // The loop's task, parked outside the loop (as on a pool job):
            // polled once by its loop, its waker kept by its source.
            let dropped = Arc::new(AtomicBool::new(false));
            let waker_slot = Arc::new(std::sync::Mutex::new(None));
            let (parked, parked_join) =
                task::new_task(Parked(dropped.clone(), waker_slot.clone()), id);
            shared.stats.tasks_alive.fetch_add(1, Relaxed);
            let parked = match how {
                LastTask::Aborted => Some(parked),
                LastTask::Woken => {
                    parked.run();
                    None
                }
            };
            let waker = waker_slot.lock().unwrap().take();
            let handle = crate::event_loop::LoopHandle {
                shared,
                generation: shared.generation.load(Acquire),
            };
            let spawner = thread::spawn(move || handle.spawn(async { 7u8 }));
            let ender = thread::spawn(move || match (parked, waker) {
                (Some(parked), _) => {
                    task::abort_task(&parked);
                    parked.run();
                }
                (None, Some(waker)) => waker.wake(),
                (None, None) => unreachable!("a polled task left its waker"),
            });

            // The loop's end, as `EventLoop::run` ends: what was handed to
            // it is cancelled, then the slot goes back.
            crate::event_loop::cancel_handoff(shared);
            super::release(shared);
            // A new loop starts meanwhile.
            let next = super::acquire().expect("a slot");
            if std::ptr::eq(next, shared) {
                assert!(
                    dropped.load(Acquire),
                    "an id was handed to a new loop while a task of its old loop lived"
                );
            }

            let mut late = spawner.join().unwrap();
            ender.join().unwrap();
            let waker = noop_waker();
            match Pin::new(&mut late).poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(Err(JoinError::Cancelled)) => {}
                other => panic!("a task spawned on an ended loop was not cancelled: {other:?}"),
            }
            assert!(
                shared.handoff.is_empty(),
                "a task of the ended loop was left in its hand-off queue"
            );
            drop(parked_join);
            super::release(next);
            let pool = crate::loom::lock(&super::POOL);
            assert_eq!(shared.stats.tasks_alive.load(SeqCst), 0);
            assert!(
                pool.draining.is_empty(),
                "a slot left draining with no task alive"
            );
            let frees = pool
                .free
                .iter()
                .filter(|s| std::ptr::eq(**s, shared))
                .count();
            assert_eq!(frees, 1, "the ended loop's slot is free exactly once");
        });
    }

    #[test]
    fn loom_loop_end_vs_late_spawn_and_last_task() {
        loop_end_vs_late_spawn_and_last_task(LastTask::Aborted);
    }

    #[test]
    fn loom_loop_end_vs_late_spawn_and_woken_last_task() {
        loop_end_vs_late_spawn_and_last_task(LastTask::Woken);
    }

    /// Two threads hand a task each to a loop that is about to sleep: if the
    /// loop blocks while a task it has not taken is pending, the eventfd was
    /// written — exactly once, however many producers came.
    #[test]
    fn loom_sleep_vs_notify() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound.get_or_insert(3);
        model.check(|| {
            let handoff = Arc::new(HandoffQueue::new());
            let gate = Arc::new(SleepGate::new());
            let eventfd_writes = Arc::new(AtomicUsize::new(0));
            let mut producers = Vec::new();
            let mut joins = Vec::new();
            for _ in 0..2 {
                let (queued, join) = task::new_task(async {}, 0);
                joins.push(join);
                let (q, g, w) = (handoff.clone(), gate.clone(), eventfd_writes.clone());
                producers.push(thread::spawn(move || {
                    q.push(queued);
                    if g.notify() {
                        w.fetch_add(1, Relaxed);
                    }
                }));
            }

            let local = LocalQueue::new();
            let before = handoff.drain_into(&local);
            let slept = gate.prepare_sleep(|| !handoff.is_empty());
            // Here the loop blocks in epoll_wait if `slept`.
            for p in producers {
                p.join().unwrap();
            }
            let writes = eventfd_writes.load(Relaxed);
            if slept && before < 2 {
                assert_eq!(
                    writes, 1,
                    "the loop sleeps with work pending and no wake-up"
                );
            }
            assert!(writes <= 1, "one eventfd write per sleep");
            gate.after_sleep();
            assert_eq!(before + handoff.drain_into(&local), 2);
            drop(local);
            drop(joins);
        });
    }

    /// A task handed over and a flag raised (as `main_woken` and `stop` are:
    /// a `SeqCst` store, then `notify`) against a loop about to sleep: a
    /// loop that blocks, which it may only do before the flag is up, is
    /// woken, once.
    #[test]
    fn loom_sleep_vs_flag() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound.get_or_insert(3);
        model.check(|| {
            let handoff = Arc::new(HandoffQueue::new());
            let flag = Arc::new(AtomicBool::new(false));
            let gate = Arc::new(SleepGate::new());
            let eventfd_writes = Arc::new(AtomicUsize::new(0));
            let (queued, join) = task::new_task(async {}, 0);
            let pusher = {
                let (q, g, w) = (handoff.clone(), gate.clone(), eventfd_writes.clone());
                thread::spawn(move || {
                    q.push(queued);
                    if g.notify() {
                        w.fetch_add(1, Relaxed);
                    }
                })
            };
            let raiser = {
                let (f, g, w) = (flag.clone(), gate.clone(), eventfd_writes.clone());
                thread::spawn(move || {
                    f.store(true, SeqCst);
                    if g.notify() {
                        w.fetch_add(1, Relaxed);
                    }
                })
            };
            let local = LocalQueue::new();
            handoff.drain_into(&local);
            let slept = gate.prepare_sleep(|| !handoff.is_empty() || flag.load(SeqCst));
            pusher.join().unwrap();
            raiser.join().unwrap();
            let writes = eventfd_writes.load(Relaxed);
            if slept {
                // The flag it did not see is up by now: only a wake-up
                // gets the loop to it.
                assert_eq!(writes, 1, "the loop sleeps with the flag up and no wake-up");
            }
            assert!(writes <= 1, "one eventfd write per sleep");
            gate.after_sleep();
            handoff.drain_into(&local);
            drop(local);
            drop(join);
        });
    }
}
