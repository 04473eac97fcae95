//! Wake-ups that come from other threads: plain `std` threads holding a
//! waker, remote spawns onto a `LoopThread`, and the eventfd that wakes a
//! sleeping loop — written only while the loop sleeps.
//!
//! The tests count hand-offs and eventfd writes, and a loop id freed by one
//! test may be reused by another (a stray wake-up would land there), so they
//! run one at a time (`support::serial`).

mod support;

use duality_rt::{block_on, spawn, spawn_on, LoopConfig, LoopThread};
use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};
use support::{serial, wait_until};

/// A flag a plain thread raises, with the waker of whoever waits for it.
#[derive(Default)]
struct Signal {
    raised: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    fn wait(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.raised.load(SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    fn raise(&self, by_ref: bool) {
        self.raised.store(true, SeqCst);
        let w = self.waker.lock().unwrap().take();
        if let Some(w) = w {
            if by_ref {
                w.wake_by_ref();
            } else {
                w.wake();
            }
        }
    }
}

fn raise_later(signal: &Arc<Signal>, after: Duration, by_ref: bool) -> std::thread::JoinHandle<()> {
    let s = signal.clone();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        s.raise(by_ref);
    })
}

#[test]
fn a_task_is_woken_from_a_std_thread() {
    let _g = serial();
    for by_ref in [false, true] {
        let signal = Arc::new(Signal::default());
        // Timed from before the raising thread starts: making the loop
        // (an io_uring ring, say) takes part of its 20 ms.
        let start = Instant::now();
        let t = raise_later(&signal, Duration::from_millis(20), by_ref);
        let s = signal.clone();
        let waited = block_on(async move {
            spawn(async move { s.wait().await }).await.unwrap();
            start.elapsed()
        });
        t.join().unwrap();
        assert!(waited >= Duration::from_millis(20));
        assert!(waited < Duration::from_secs(2), "woken late: {waited:?}");
    }
}

#[test]
fn the_block_on_future_is_woken_from_a_std_thread() {
    let _g = serial();
    let signal = Arc::new(Signal::default());
    let t = raise_later(&signal, Duration::from_millis(20), false);
    block_on(signal.wait());
    t.join().unwrap();
}

#[test]
fn remote_spawns_from_many_threads() {
    let _g = serial();
    let lt = LoopThread::spawn(LoopConfig::default()).unwrap();
    let handle = lt.handle();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                (0..250u64)
                    .map(|i| {
                        let v = t * 1000 + i;
                        if i % 2 == 0 {
                            handle.spawn(async move { v })
                        } else {
                            spawn_on(&handle, async move {
                                duality_rt::yield_now().await;
                                v
                            })
                        }
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let handles: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    // Joined from another loop (this thread's `block_on`).
    let sum: u64 = block_on(async move {
        let mut sum = 0;
        for h in handles {
            sum += h.await.unwrap();
        }
        sum
    });
    let expected: u64 = (0..4u64)
        .flat_map(|t| (0..250u64).map(move |i| t * 1000 + i))
        .sum();
    assert_eq!(sum, expected);
    let snap = handle.snapshot();
    assert_eq!(snap.handoffs, 1000);
    assert!(snap.handoff_batches <= 1000);
    lt.join().unwrap();
}

#[test]
fn a_remote_spawn_wakes_a_sleeping_loop() {
    let _g = serial();
    let lt = LoopThread::spawn(LoopConfig::default()).unwrap();
    let handle = lt.handle();
    // Let it go to sleep in epoll_wait (it has nothing to do, no timers).
    // An idle loop sleeps: its turns stop (soon after it starts, on a
    // loaded machine later).
    let asleep = (0..100).any(|_| {
        let turns = handle.snapshot().turns;
        std::thread::sleep(Duration::from_millis(30));
        handle.snapshot().turns == turns
    });
    assert!(asleep, "an idle loop sleeps");
    let before = handle.snapshot().wakeups;

    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let start = Instant::now();
    drop(handle.spawn(async move { r.store(true, SeqCst) }));
    assert!(wait_until(Duration::from_secs(2), || ran.load(SeqCst)));
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(handle.snapshot().wakeups > before, "the eventfd woke it");
    lt.join().unwrap();
}

#[test]
fn no_wakeups_are_written_while_the_loop_is_busy() {
    let _g = serial();
    let lt = LoopThread::spawn(LoopConfig {
        long_poll_threshold: None,
        ..LoopConfig::default()
    })
    .unwrap();
    let handle = lt.handle();
    let busy = Arc::new(AtomicBool::new(false));
    let b = busy.clone();
    // One long poll: the loop is awake (not in epoll) for 300 ms.
    drop(handle.spawn(async move {
        b.store(true, SeqCst);
        std::thread::sleep(Duration::from_millis(300));
    }));
    assert!(wait_until(Duration::from_secs(2), || busy.load(SeqCst)));
    let before = handle.snapshot();

    const N: usize = 1000;
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..N {
        let d = done.clone();
        drop(handle.spawn(async move {
            d.fetch_add(1, SeqCst);
        }));
    }
    assert!(wait_until(Duration::from_secs(5), || done.load(SeqCst) == N));
    let after = handle.snapshot();
    assert!(
        after.wakeups - before.wakeups <= 1,
        "{} eventfd writes for {N} hand-offs to a busy loop",
        after.wakeups - before.wakeups
    );
    // Lock coalescing: the hand-offs were taken in a few batches.
    assert_eq!(after.handoffs - before.handoffs, N as u64);
    assert!(after.handoff_batches - before.handoff_batches <= 3);
    lt.join().unwrap();
}

#[test]
fn a_waker_outliving_its_loop_is_harmless() {
    let _g = serial();
    let signal = Arc::new(Signal::default());
    let s = signal.clone();
    block_on(async move {
        let h = spawn(async move { s.wait().await });
        duality_rt::yield_now().await;
        drop(h); // detached, parked on the signal
    });
    // The loop is gone; waking its task frees it instead of running it.
    signal.raise(false);
    signal.raise(true);
}

/// Raises `dropped` when dropped, and `under_lock` too if `lock` was held
/// then (a drop run inside a `wake` whose caller holds it).
struct DropProbe {
    lock: Arc<Mutex<()>>,
    dropped: Arc<AtomicBool>,
    under_lock: Arc<AtomicBool>,
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        if self.lock.try_lock().is_err() {
            self.under_lock.store(true, SeqCst);
        }
        self.dropped.store(true, SeqCst);
    }
}

/// Spawns on `lp` a task that holds `probe`, counts its polls in `polls`
/// and parks with its waker in `slot` (there once this returns).
fn park(
    lp: &LoopThread,
    probe: DropProbe,
    slot: &Arc<Mutex<Option<Waker>>>,
    polls: &Arc<AtomicUsize>,
) -> duality_rt::JoinHandle<()> {
    let (s, p) = (slot.clone(), polls.clone());
    let join = lp.handle().spawn(async move {
        let _probe = probe;
        poll_fn(|cx| {
            p.fetch_add(1, SeqCst);
            *s.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        })
        .await;
    });
    assert!(wait_until(Duration::from_secs(2), || slot
        .lock()
        .unwrap()
        .is_some()));
    join
}

/// A task whose loop has ended lives on in a waker held elsewhere. Woken
/// on another loop by a caller that holds a lock (as a socket's completion
/// wakes its writer under the socket's state lock), its drop — which may
/// take that same lock, e.g. by closing the socket — must not run inside
/// `wake`: that deadlocked a loop at shutdown. It runs on the waking
/// loop's next turn.
#[test]
fn a_task_of_an_ended_loop_is_dropped_after_the_wake_not_inside_it() {
    let _g = serial();
    // The waking loop first, so that the ended loop's id stays free.
    let waking = LoopThread::spawn(LoopConfig::default()).unwrap();
    let ended = LoopThread::spawn(LoopConfig::default()).unwrap();
    let lock = Arc::new(Mutex::new(()));
    let dropped = Arc::new(AtomicBool::new(false));
    let under_lock = Arc::new(AtomicBool::new(false));
    let slot: Arc<Mutex<Option<Waker>>> = Arc::default();
    let probe = DropProbe {
        lock: lock.clone(),
        dropped: dropped.clone(),
        under_lock: under_lock.clone(),
    };
    drop(park(&ended, probe, &slot, &Arc::default()));
    // Its loop ends; the task is parked on nothing of that loop's.
    ended.join().unwrap();
    assert!(!dropped.load(SeqCst));

    let inside_wake = Arc::new(AtomicBool::new(false));
    let (l, d, i) = (lock.clone(), dropped.clone(), inside_wake.clone());
    let woke = waking.handle().spawn(async move {
        let w = slot.lock().unwrap().take().unwrap();
        let held = l.lock().unwrap();
        w.wake();
        i.store(d.load(SeqCst), SeqCst);
        drop(held);
    });
    assert!(wait_until(Duration::from_secs(2), || dropped.load(SeqCst)));
    assert!(!inside_wake.load(SeqCst), "dropped inside wake");
    assert!(!under_lock.load(SeqCst), "dropped under the waker's lock");
    drop(woke);
    waking.join().unwrap();
}

/// A loop's id is reused by later loops, but only once no task of the
/// ended loop is alive: such a task, woken later, must never run on a loop
/// that is not its own (its sockets and timers were the old loop's). Woken,
/// it is dropped, and then the id is free again.
#[test]
fn a_loop_id_is_not_reused_while_a_task_of_its_ended_loop_lives() {
    let _g = serial();
    let ended = LoopThread::spawn(LoopConfig::default()).unwrap();
    let id = ended.handle().id();
    let polls = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let slot: Arc<Mutex<Option<Waker>>> = Arc::default();
    let probe = DropProbe {
        lock: Arc::default(),
        dropped: dropped.clone(),
        under_lock: Arc::default(),
    };
    drop(park(&ended, probe, &slot, &polls));
    ended.join().unwrap();
    let next = LoopThread::spawn(LoopConfig::default()).unwrap();
    assert_ne!(
        next.handle().id(),
        id,
        "took the id of a loop whose task lives"
    );
    slot.lock().unwrap().take().unwrap().wake();
    assert!(wait_until(Duration::from_secs(2), || dropped.load(SeqCst)));
    assert_eq!(polls.load(SeqCst), 1, "polled again after its loop ended");
    // Its last task gone, the id is the first to be reused.
    let third = LoopThread::spawn(LoopConfig::default()).unwrap();
    assert_eq!(third.handle().id(), id);
    third.join().unwrap();
    next.join().unwrap();
}

/// A task of an ended loop, once woken, is cancelled: its future is dropped
/// and a `JoinHandle` awaiting it resolves to `Cancelled` instead of waiting
/// forever for a poll that cannot come.
#[test]
fn a_woken_task_of_an_ended_loop_is_cancelled_and_its_handle_told() {
    let _g = serial();
    let ended = LoopThread::spawn(LoopConfig::default()).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let probe = DropProbe {
        lock: Arc::default(),
        dropped: dropped.clone(),
        under_lock: Arc::default(),
    };
    let slot: Arc<Mutex<Option<Waker>>> = Arc::default();
    let join = park(&ended, probe, &slot, &Arc::default());
    ended.join().unwrap();
    slot.lock().unwrap().take().unwrap().wake();
    assert!(dropped.load(SeqCst), "the future is dropped by the wake");
    let out = block_on(duality_rt::time::timeout(Duration::from_secs(5), join));
    assert!(matches!(&out, Ok(Err(e)) if e.is_cancelled()), "{out:?}");
}

/// Spawning through the handle of an ended loop runs nothing (not even on
/// a loop that took its id since) and the handle says `Cancelled`.
#[test]
fn a_spawn_on_an_ended_loop_is_cancelled() {
    let _g = serial();
    let lp = LoopThread::spawn(LoopConfig::default()).unwrap();
    let handle = lp.handle();
    lp.join().unwrap();
    // A loop that may take the freed id.
    let other = LoopThread::spawn(LoopConfig::default()).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let join = handle.spawn(async move { r.store(true, SeqCst) });
    let out = block_on(duality_rt::time::timeout(Duration::from_secs(5), join));
    assert!(matches!(&out, Ok(Err(e)) if e.is_cancelled()), "{out:?}");
    assert!(!ran.load(SeqCst));
    other.join().unwrap();
}

/// Tasks spawned onto a loop while it ends either run or are cancelled:
/// every `JoinHandle` resolves, none waits forever on a queue that nobody
/// will take from again.
#[test]
fn tasks_spawned_while_a_loop_ends_all_resolve() {
    let _g = serial();
    for _ in 0..10 {
        let lp = LoopThread::spawn(LoopConfig::default()).unwrap();
        let handle = lp.handle();
        let started = Arc::new(AtomicBool::new(false));
        let st = started.clone();
        // Spawns until the loop has ended, so that some land while it ends.
        let spawner = std::thread::spawn(move || {
            let mut joins = Vec::new();
            while handle.is_current() && joins.len() < 50_000 {
                joins.push(handle.spawn(async {}));
                st.store(true, SeqCst);
            }
            joins
        });
        assert!(wait_until(Duration::from_secs(2), || started.load(SeqCst)));
        lp.join().unwrap();
        let joins = spawner.join().unwrap();
        block_on(async move {
            for j in joins {
                let out = duality_rt::time::timeout(Duration::from_secs(5), j).await;
                assert!(
                    matches!(&out, Ok(Ok(())) | Ok(Err(_))),
                    "a JoinHandle never resolved"
                );
            }
        });
    }
}
