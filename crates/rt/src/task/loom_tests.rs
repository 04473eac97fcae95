//! Loom models of the task state machine (`state.rs`), the task cell
//! (`raw.rs`, `join.rs`, `waker.rs`) and the hand-off queue (`queue.rs`).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p duality-rt --lib --release loom`.
//!
//! The models drive the real code: tasks are real cells, wakers the real
//! wakers. Under loom `event_loop::schedule` sends a woken task to the
//! queue of [`RUN_QUEUES`] its owner names (there are no loops), and the
//! model's main thread plays the loop: it drains that queue and runs what it
//! finds. Each model keeps to one task, the main thread and one to three
//! others, so it ends in seconds.
//!
//! What the models check, besides loom's own checks (no leaked `Arc` — the
//! futures, outputs and join wakers hold one, so a cell that is never freed
//! or a future never dropped fails the model —, and no unsynchronised access
//! to a task's stage):
//! - a task is in at most one queue at a time: exactly one enqueue per
//!   scheduled period ([`schedule`] asserts it);
//! - no lost wake-up: a wake that happens after a poll started makes the task
//!   run again, so a future that waits for N wakes completes;
//! - abort against completion, a wake or a running poll: the future is dropped
//!   exactly once, the outcome matches what happened first;
//! - the join handle against completion: exactly one party drops the output,
//!   and a join waker registered before completion is woken;
//! - reference counts balance: when all is done only the join handle's
//!   reference is left.

use super::raw::{self, HeaderRef, TaskRef};
use super::{state, HandoffQueue, JoinError, JoinHandle, LocalQueue};
use crate::loom::{thread, Arc, AtomicUsize};
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

loom::lazy_static! {
    /// The run queues (what loops' hand-off queues are) of loops 0 and 1,
    /// by the task's `owner`; every model but the migration one uses loop 0.
    static ref RUN_QUEUES: [HandoffQueue; 2] = [HandoffQueue::new(), HandoffQueue::new()];
    /// Tasks in a run queue or popped and not yet started.
    static ref QUEUED: AtomicUsize = AtomicUsize::new(0);
}

/// `event_loop::schedule` under loom: to the queue of the loop the task's
/// `owner` names, as the real one does. Every model has one task, so a
/// second enqueue while one is pending means two parties both thought they
/// had set `SCHEDULED`.
pub(crate) fn schedule(task: TaskRef) {
    let before = QUEUED.fetch_add(1, AcqRel);
    assert_eq!(
        before, 0,
        "a task was enqueued twice in one scheduled period"
    );
    RUN_QUEUES[usize::from(task.header().owner())].push(task);
}

/// Plays loop 0: runs queued tasks until the queue stays empty. Returns polls.
fn run_until_idle() -> usize {
    run_loop_until_idle(0)
}

/// Plays loop `id`: runs its queued tasks until its queue stays empty.
fn run_loop_until_idle(id: usize) -> usize {
    let local = LocalQueue::new();
    let mut runs = 0;
    while RUN_QUEUES[id].drain_into(&local) > 0 {
        while let Some(task) = local.pop() {
            QUEUED.fetch_sub(1, AcqRel);
            task.run();
            runs += 1;
        }
    }
    runs
}

/// Counters shared by a [`Probe`] future, its output and the model.
#[derive(Default)]
struct Ctl {
    /// Wake-ups published (incremented before each wake).
    wakes: AtomicUsize,
    polls: AtomicUsize,
    future_drops: AtomicUsize,
    output_drops: AtomicUsize,
}

/// A future that completes once it has seen `target` wake-ups.
struct Probe {
    ctl: Arc<Ctl>,
    target: usize,
}

impl Future for Probe {
    type Output = Out;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Out> {
        self.ctl.polls.fetch_add(1, Relaxed);
        if self.ctl.wakes.load(Acquire) >= self.target {
            Poll::Ready(Out(self.ctl.clone()))
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.ctl.future_drops.fetch_add(1, Relaxed);
    }
}

/// The output of a [`Probe`]; counts its drops.
struct Out(Arc<Ctl>);

impl Drop for Out {
    fn drop(&mut self) {
        self.0.output_drops.fetch_add(1, Relaxed);
    }
}

/// A spawned, queued task running a `Probe`; returns its join handle and the
/// cell pointer (valid while the handle lives).
fn spawn_probe(ctl: &Arc<Ctl>, target: usize) -> (JoinHandle<Out>, NonNull<raw::Header>) {
    let (queued, join) = raw::allocate(
        Probe {
            ctl: ctl.clone(),
            target,
        },
        0,
    );
    let ptr = join.as_ptr();
    schedule(queued);
    (JoinHandle::new(join), ptr)
}

/// A new owned waker of the task at `ptr`.
fn waker_of(ptr: NonNull<raw::Header>) -> Waker {
    // SAFETY: the caller holds a reference (its join handle) for this call;
    // the borrowed waker is only cloned, never dropped.
    let borrowed = ManuallyDrop::new(unsafe { super::waker::borrowed(ptr) });
    (*borrowed).clone()
}

fn state_of(ptr: NonNull<raw::Header>) -> state::Snapshot {
    // SAFETY: the caller holds a reference (its join handle).
    unsafe { HeaderRef::new(ptr) }.state().load()
}

/// Waits, as an executor would, until a [`counting_waker`]'s count moves
/// past `before` (read before the poll that returned `Pending`): yielding
/// first, since a re-poll is a scheduling point (a register that met a
/// running wake wakes itself at once). A lost wake-up makes this endless,
/// which loom reports.
pub(crate) fn yield_until_woken(count: &AtomicUsize, before: usize) {
    loop {
        thread::yield_now();
        if count.load(Acquire) != before {
            return;
        }
    }
}

/// A waker that counts its wake-ups; it owns a loom `Arc`, so a waker that is
/// never dropped (a join-waker slot never freed) fails the model.
pub(crate) fn counting_waker(count: &Arc<AtomicUsize>) -> Waker {
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_waker);
    unsafe fn clone(p: *const ()) -> RawWaker {
        // SAFETY: `p` came from `Arc::into_raw` and the waker being cloned owns a count.
        unsafe { Arc::increment_strong_count(p as *const AtomicUsize) };
        RawWaker::new(p, &VTABLE)
    }
    unsafe fn wake(p: *const ()) {
        // SAFETY: forwarded; the by-value wake then releases its count.
        unsafe {
            wake_by_ref(p);
            drop_waker(p);
        }
    }
    unsafe fn wake_by_ref(p: *const ()) {
        // SAFETY: the waker owns a count, so the counter is alive.
        unsafe { &*(p as *const AtomicUsize) }.fetch_add(1, Release);
    }
    unsafe fn drop_waker(p: *const ()) {
        // SAFETY: the dropped waker owned one count.
        drop(unsafe { Arc::from_raw(p as *const AtomicUsize) });
    }
    let p = Arc::into_raw(count.clone()) as *const ();
    // SAFETY: the vtable's functions keep the `RawWaker` contract for `p`.
    unsafe { Waker::from_raw(RawWaker::new(p, &VTABLE)) }
}

fn noop_waker() -> Waker {
    static VTABLE: RawWakerVTable =
        RawWakerVTable::new(|p| RawWaker::new(p, &VTABLE), |_| {}, |_| {}, |_| {});
    // SAFETY: every function of the vtable ignores the (null) data pointer.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

fn poll_join(jh: &mut JoinHandle<Out>, waker: &Waker) -> Poll<Result<Out, JoinError>> {
    Pin::new(jh).poll(&mut Context::from_waker(waker))
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Two wakers (by reference and by value) fire from two threads while the
/// loop runs the task: each wake after a poll started makes it run again.
#[test]
fn loom_wakes_from_two_threads_vs_runner() {
    model(|| {
        let ctl = Arc::new(Ctl::default());
        let (mut jh, ptr) = spawn_probe(&ctl, 2);
        let (w1, w2) = (waker_of(ptr), waker_of(ptr));
        let c1 = ctl.clone();
        let by_ref = thread::spawn(move || {
            c1.wakes.fetch_add(1, Release);
            w1.wake_by_ref();
            drop(w1);
        });
        let c2 = ctl.clone();
        let by_val = thread::spawn(move || {
            c2.wakes.fetch_add(1, Release);
            w2.wake();
        });
        run_until_idle();
        by_ref.join().unwrap();
        by_val.join().unwrap();
        run_until_idle();

        let s = state_of(ptr);
        assert!(s.has(state::COMPLETE), "lost wake-up: {s:?}");
        assert!(!s.has(state::SCHEDULED) && !s.has(state::RUNNING));
        assert_eq!(s.refs(), 1, "only the join handle's reference is left");
        assert!((1..=3).contains(&ctl.polls.load(Relaxed)));
        assert_eq!(ctl.future_drops.load(Relaxed), 1);
        match poll_join(&mut jh, &noop_waker()) {
            Poll::Ready(Ok(out)) => drop(out),
            other => panic!("expected the output, got {:?}", other.map(|r| r.err())),
        }
        assert_eq!(ctl.output_drops.load(Relaxed), 1);
    });
}

/// Abort from another thread races the task's only poll, which completes.
#[test]
fn loom_abort_vs_completion() {
    model(|| {
        let ctl = Arc::new(Ctl::default());
        let (mut jh, ptr) = spawn_probe(&ctl, 0);
        let abort = jh.abort_handle();
        let t = thread::spawn(move || abort.abort());
        run_until_idle();
        t.join().unwrap();
        run_until_idle();

        let s = state_of(ptr);
        assert!(s.has(state::COMPLETE) && !s.has(state::SCHEDULED));
        assert_eq!(s.refs(), 1);
        assert_eq!(ctl.future_drops.load(Relaxed), 1);
        match poll_join(&mut jh, &noop_waker()) {
            Poll::Ready(Ok(out)) => {
                assert_eq!(ctl.polls.load(Relaxed), 1);
                drop(out);
                assert_eq!(ctl.output_drops.load(Relaxed), 1);
            }
            Poll::Ready(Err(e)) => {
                assert!(e.is_cancelled());
                assert_eq!(ctl.polls.load(Relaxed), 0, "a cancelled task was polled");
                assert_eq!(ctl.output_drops.load(Relaxed), 0);
            }
            Poll::Pending => panic!("finished task not ready"),
        }
    });
}

/// An idle task is woken from one thread and aborted from another: exactly
/// one of them enqueues it, and it ends either way.
#[test]
fn loom_abort_vs_wake_of_idle_task() {
    model(|| {
        let ctl = Arc::new(Ctl::default());
        let (mut jh, ptr) = spawn_probe(&ctl, 1);
        assert_eq!(run_until_idle(), 1); // first poll: pending, idle
        let w = waker_of(ptr);
        let c = ctl.clone();
        let waker = thread::spawn(move || {
            c.wakes.fetch_add(1, Release);
            w.wake();
        });
        let abort = jh.abort_handle();
        let aborter = thread::spawn(move || abort.abort());
        run_until_idle();
        waker.join().unwrap();
        aborter.join().unwrap();
        run_until_idle();

        let s = state_of(ptr);
        assert!(s.has(state::COMPLETE) && !s.has(state::SCHEDULED));
        assert_eq!(s.refs(), 1);
        assert_eq!(ctl.future_drops.load(Relaxed), 1);
        match poll_join(&mut jh, &noop_waker()) {
            Poll::Ready(Ok(out)) => {
                assert_eq!(ctl.polls.load(Relaxed), 2);
                drop(out);
            }
            Poll::Ready(Err(e)) => {
                assert!(e.is_cancelled());
                assert_eq!(ctl.polls.load(Relaxed), 1);
            }
            Poll::Pending => panic!("finished task not ready"),
        }
    });
}

/// The join handle registers its waker (and may read the output) and is
/// dropped while the task completes: exactly one party drops the output, and
/// the cell with its join-waker slot is freed (loom's leak check).
#[test]
fn loom_join_drop_vs_completion() {
    model(|| {
        let ctl = Arc::new(Ctl::default());
        let (mut jh, _) = spawn_probe(&ctl, 0);
        let woken = Arc::new(AtomicUsize::new(0));
        let w = counting_waker(&woken);
        let joiner = thread::spawn(move || {
            if let Poll::Ready(r) = poll_join(&mut jh, &w) {
                drop(r.expect("the task cannot fail"));
            }
            drop(jh);
        });
        run_until_idle();
        joiner.join().unwrap();

        assert_eq!(ctl.future_drops.load(Relaxed), 1);
        assert_eq!(ctl.output_drops.load(Relaxed), 1, "output dropped once");
    });
}

/// A join waker registered while the task runs is woken at completion: a
/// `Pending` join poll is never left without a wake-up.
#[test]
fn loom_join_waker_vs_completion() {
    model(|| {
        let ctl = Arc::new(Ctl::default());
        let (mut jh, ptr) = spawn_probe(&ctl, 0);
        let woken = Arc::new(AtomicUsize::new(0));
        let w = counting_waker(&woken);
        let joiner = thread::spawn(move || {
            let first = poll_join(&mut jh, &w).map(|r| drop(r.ok().unwrap()));
            (jh, first.is_pending())
        });
        run_until_idle();
        let (mut jh, pending) = joiner.join().unwrap();

        assert_eq!(state_of(ptr).refs(), 1);
        if pending {
            assert!(woken.load(Acquire) >= 1, "lost join wake-up");
            match poll_join(&mut jh, &noop_waker()) {
                Poll::Ready(Ok(out)) => drop(out),
                _ => panic!("woken join handle not ready"),
            }
        }
        assert_eq!(ctl.output_drops.load(Relaxed), 1);
        drop(jh);
    });
}

/// A producer thread pushing two new tasks to `queue`, their ids (in push
/// order), and their handles (kept until the model ends).
fn push_two(queue: &Arc<HandoffQueue>) -> (thread::JoinHandle<()>, Vec<usize>, Vec<TaskRef>) {
    let (mut batch, mut ids, mut keep) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..2 {
        let (queued, join) = raw::allocate(async {}, 0);
        ids.push(queued.as_ptr().as_ptr() as usize);
        batch.push(queued);
        keep.push(join);
    }
    let q = queue.clone();
    let producer = thread::spawn(move || {
        for t in batch {
            q.push(t);
        }
    });
    (producer, ids, keep)
}

/// Two producers push two tasks each while the consumer drains: every task
/// comes out exactly once, and each producer's tasks in push order.
#[test]
fn loom_handoff_queue_two_producers() {
    model(|| {
        let queue = Arc::new(HandoffQueue::new());
        let mut keep = Vec::new();
        let mut producers = Vec::new();
        let mut expected = Vec::new();
        for _ in 0..2 {
            let (producer, ids, handles) = push_two(&queue);
            producers.push(producer);
            expected.push(ids);
            keep.extend(handles);
        }

        let local = LocalQueue::new();
        let mut got = Vec::new();
        let mut take = |local: &LocalQueue| {
            queue.drain_into(local);
            while let Some(t) = local.pop() {
                got.push(t.as_ptr().as_ptr() as usize);
                drop(t);
            }
        };
        take(&local);
        take(&local);
        for p in producers {
            p.join().unwrap();
        }
        take(&local);

        assert_eq!(got.len(), 4, "every task drained exactly once: {got:?}");
        for ids in &expected {
            let pos: Vec<usize> = ids
                .iter()
                .map(|id| got.iter().position(|g| g == id).expect("task lost"))
                .collect();
            assert!(pos[0] < pos[1], "FIFO per producer");
        }
        assert_eq!(queue.len(), 0);
        drop(keep);
    });
}

/// Two threads drain while a producer pushes (a loop's own drain, and a
/// waker taking its task back from a loop that ended, `schedule`): every
/// task comes out exactly once, in push order within each batch.
#[test]
fn loom_handoff_queue_two_drainers() {
    model(|| {
        let queue = Arc::new(HandoffQueue::new());
        let (producer, ids, keep) = push_two(&queue);
        let take = |queue: &HandoffQueue| {
            let local = LocalQueue::new();
            queue.drain_into(&local);
            let mut got = Vec::new();
            while let Some(t) = local.pop() {
                got.push(t.as_ptr().as_ptr() as usize);
                drop(t);
            }
            got
        };
        let drainer = {
            let q = queue.clone();
            thread::spawn(move || take(&q))
        };
        let mut mine = take(&queue);
        producer.join().unwrap();
        let theirs = drainer.join().unwrap();
        let rest = take(&queue);
        for got in [&mine, &theirs, &rest] {
            if got.len() == 2 {
                assert_eq!(got, &ids, "push order within a batch");
            }
        }
        mine.extend(theirs);
        mine.extend(rest);
        mine.sort_unstable();
        let mut want = ids.clone();
        want.sort_unstable();
        assert_eq!(mine, want, "every task drained exactly once");
        assert_eq!(queue.len(), 0);
        drop(keep);
    });
}

/// Work sharing (`WorkGroup::share`) moves a queued task from loop 0 to
/// loop 1: its `owner` is rewritten (Relaxed) and it is pushed to loop 1's
/// queue, while a waker on another thread wakes it. The waker reads `owner`
/// after its state change, which the run on loop 1 happened before, so
/// once the task has run on loop 1 no wake sends it back to loop 0: loop
/// 0's queue stays empty, and the wake is not lost (the task completes).
#[test]
fn loom_owner_migration_vs_remote_wake() {
    model(|| {
        let ctl = Arc::new(Ctl::default());
        let (mut jh, ptr) = spawn_probe(&ctl, 1);
        let w = waker_of(ptr);
        let share = thread::spawn(|| {
            let local = LocalQueue::new();
            RUN_QUEUES[0].drain_into(&local);
            let t = local.pop().expect("the task was queued on loop 0");
            t.header().set_owner(1);
            RUN_QUEUES[1].push(t);
        });
        let c = ctl.clone();
        let waker = thread::spawn(move || {
            c.wakes.fetch_add(1, Release);
            w.wake();
        });
        let loop1 = thread::spawn(|| run_loop_until_idle(1));
        share.join().unwrap();
        waker.join().unwrap();
        loop1.join().unwrap();
        run_loop_until_idle(1);

        assert_eq!(
            RUN_QUEUES[0].len(),
            0,
            "a wake sent the task back to loop 0"
        );
        let s = state_of(ptr);
        assert!(s.has(state::COMPLETE), "lost wake-up: {s:?}");
        assert_eq!(s.refs(), 1, "only the join handle's reference is left");
        assert_eq!(ctl.future_drops.load(Relaxed), 1);
        match poll_join(&mut jh, &noop_waker()) {
            Poll::Ready(Ok(out)) => drop(out),
            other => panic!("expected the output, got {:?}", other.map(|r| r.err())),
        }
    });
}
