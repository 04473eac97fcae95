//! Spawn, join, detach, abort and panics; no task outlives its test.
//!
//! Every test here ends by checking that `task::alive()` is back to zero, and
//! that counter is process-wide, so the tests of this binary run one at a
//! time (`support::serial`).

mod support;

use duality_rt::task::{self, AbortHandle};
use duality_rt::{block_on, spawn, yield_now, JoinError, LoopConfig, LoopThread};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{serial, wait_until, yield_n, DropCounter, Forever};

#[test]
fn join_returns_the_output() {
    let _g = serial();
    let v = block_on(async {
        let a = spawn(async { 40 });
        let b = spawn(async {
            yield_now().await;
            2
        });
        a.await.unwrap() + b.await.unwrap()
    });
    assert_eq!(v, 42);
    assert_eq!(task::alive(), 0);
}

#[test]
fn dropping_the_join_handle_detaches() {
    let _g = serial();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    block_on(async move {
        drop(spawn(async move {
            yield_n(3).await;
            d.store(true, SeqCst);
        }));
        yield_n(10).await;
    });
    assert!(done.load(SeqCst), "a detached task runs to completion");
    assert_eq!(task::alive(), 0);
}

#[test]
fn output_is_dropped_when_nobody_joins() {
    let _g = serial();
    let outputs = DropCounter::new();
    let o = outputs.clone();
    block_on(async move {
        // Detached before completion: the runner drops the output.
        drop(spawn({
            let o = o.clone();
            async move { o.token() }
        }));
        // Completed, then the handle is dropped unread: the handle drops it.
        let h = spawn(async move { o.token() });
        yield_n(3).await;
        assert!(h.is_finished());
        drop(h);
    });
    assert_eq!(outputs.drops(), 2);
    assert_eq!(task::alive(), 0);
}

#[test]
fn abort_of_an_idle_task_drops_its_future() {
    let _g = serial();
    let futures = DropCounter::new();
    let f = futures.clone();
    block_on(async move {
        let token = f.token();
        let h = spawn(async move {
            let _token = token;
            // Parked with its waker kept (a sleep), so it is idle, not freed.
            duality_rt::time::sleep(Duration::from_secs(3600)).await;
        });
        yield_n(3).await;
        assert_eq!(f.drops(), 0);
        h.abort();
        let r = h.await;
        assert!(matches!(r, Err(JoinError::Cancelled)), "{r:?}");
        assert_eq!(f.drops(), 1, "the aborted future was dropped");
    });
    assert_eq!(task::alive(), 0);
}

#[test]
fn abort_of_a_scheduled_task_means_it_is_never_polled() {
    let _g = serial();
    let polled = Arc::new(AtomicBool::new(false));
    let futures = DropCounter::new();
    let (p, token) = (polled.clone(), futures.token());
    block_on(async move {
        let h = spawn(async move {
            let _token = token;
            p.store(true, SeqCst);
        });
        h.abort(); // still in the run queue
        assert!(h.await.unwrap_err().is_cancelled());
    });
    assert!(!polled.load(SeqCst));
    assert_eq!(futures.drops(), 1);
    assert_eq!(task::alive(), 0);
}

#[test]
fn abort_from_inside_a_running_poll() {
    let _g = serial();
    let after = Arc::new(AtomicBool::new(false));
    let futures = DropCounter::new();
    let (a, token) = (after.clone(), futures.token());
    block_on(async move {
        let me: Arc<Mutex<Option<AbortHandle>>> = Arc::default();
        let slot = me.clone();
        let h = spawn(async move {
            let _token = token;
            let abort = slot.lock().unwrap().take().unwrap();
            abort.abort(); // while this very poll runs
            yield_now().await;
            a.store(true, SeqCst);
        });
        *me.lock().unwrap() = Some(h.abort_handle());
        assert!(h.await.unwrap_err().is_cancelled());
    });
    assert!(
        !after.load(SeqCst),
        "the task never ran past its next await"
    );
    assert_eq!(futures.drops(), 1);
    assert_eq!(task::alive(), 0);
}

#[test]
fn abort_during_the_final_poll_keeps_the_output() {
    let _g = serial();
    let v = block_on(async {
        let me: Arc<Mutex<Option<AbortHandle>>> = Arc::default();
        let slot = me.clone();
        let h = spawn(async move {
            yield_now().await;
            slot.lock().unwrap().take().unwrap().abort();
            7 // completes in the poll that was aborted
        });
        *me.lock().unwrap() = Some(h.abort_handle());
        h.await
    });
    assert_eq!(v.unwrap(), 7);
    assert_eq!(task::alive(), 0);
}

#[test]
fn abort_of_a_task_running_on_another_thread() {
    let _g = serial();
    let lt = LoopThread::spawn(LoopConfig::default()).unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let after = Arc::new(AtomicBool::new(false));
    let futures = DropCounter::new();
    let (s, r, a, token) = (
        started.clone(),
        release.clone(),
        after.clone(),
        futures.token(),
    );
    let h = lt.handle().spawn(async move {
        let _token = token;
        s.store(true, SeqCst);
        while !r.load(SeqCst) {
            std::hint::spin_loop();
        }
        yield_now().await;
        a.store(true, SeqCst);
    });
    assert!(wait_until(Duration::from_secs(5), || started.load(SeqCst)));
    h.abort(); // the task is inside its poll on the loop thread
    release.store(true, SeqCst);
    let r = block_on(h); // joined from another loop
    assert!(r.unwrap_err().is_cancelled());
    assert!(!after.load(SeqCst));
    assert_eq!(futures.drops(), 1);
    lt.join().unwrap();
    assert_eq!(task::alive(), 0);
}

#[test]
fn abort_after_completion_is_a_no_op() {
    let _g = serial();
    let r = block_on(async {
        let h = spawn(async { "done" });
        while !h.is_finished() {
            yield_now().await;
        }
        h.abort();
        h.abort_handle().abort();
        h.await
    });
    assert_eq!(r.unwrap(), "done");
    assert_eq!(task::alive(), 0);
}

#[test]
fn a_panicking_task_yields_join_error_and_the_loop_goes_on() {
    let _g = serial();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // keep the expected panics quiet
    let futures = DropCounter::new();
    let f = futures.clone();
    let (err, others) = block_on(async move {
        let token = f.token();
        let bad = spawn(async move {
            let _token = token;
            yield_now().await;
            panic!("boom {}", 42);
        });
        // A detached one too: its payload must be freed with the task.
        drop(spawn(async { panic!("detached boom") }));
        let good: Vec<_> = (0..10u32)
            .map(|i| {
                spawn(async move {
                    yield_n(3).await;
                    i
                })
            })
            .collect();
        let err = bad.await.unwrap_err();
        let mut sum = 0;
        for g in good {
            sum += g.await.unwrap();
        }
        (err, sum)
    });
    std::panic::set_hook(hook);
    assert!(err.is_panic());
    assert_eq!(err.panic_message(), Some("boom 42"));
    assert_eq!(err.to_string(), "task panicked: boom 42");
    assert_eq!(others, 45, "the other tasks of the loop all ran");
    assert_eq!(futures.drops(), 1, "the panicked future was dropped");
    assert_eq!(task::alive(), 0);
}

#[test]
fn a_detached_task_nothing_can_wake_is_freed_at_once() {
    let _g = serial();
    let futures = DropCounter::new();
    let f = futures.clone();
    block_on(async move {
        let token = f.token();
        drop(spawn(async move {
            let _token = token;
            Forever.await
        }));
        yield_n(2).await;
        // No waker, no handle, no queue holds it: its last reference went
        // when its poll returned Pending.
        assert_eq!(f.drops(), 1);
    });
    assert_eq!(task::alive(), 0);
}

#[test]
fn loop_shutdown_drops_tasks_parked_on_timers_and_io() {
    let _g = serial();
    let futures = DropCounter::new();
    let f = futures.clone();
    let (_peer, far) = std::os::unix::net::UnixStream::pair().unwrap();
    block_on(async move {
        let t1 = f.token();
        drop(spawn(async move {
            let _t = t1;
            duality_rt::time::sleep(Duration::from_secs(3600)).await;
        }));
        let t2 = f.token();
        let stream = duality_rt::net::UnixStream::from_std(far).unwrap();
        drop(spawn(async move {
            let _t = t2;
            let mut buf = [0u8; 1];
            let _ = stream.read(&mut buf).await; // the peer never writes
        }));
        yield_n(3).await;
        assert_eq!(f.drops(), 0);
    });
    // `block_on`'s loop is gone: its shutdown aborted both tasks.
    assert_eq!(futures.drops(), 2);
    assert_eq!(task::alive(), 0);
}

#[test]
fn many_tasks_all_accounted_for() {
    let _g = serial();
    const N: usize = 2_000;
    let futures = DropCounter::new();
    let f = futures.clone();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    block_on(async move {
        let mut handles = Vec::new();
        for i in 0..N {
            let (token, r) = (f.token(), r.clone());
            let h = spawn(async move {
                let _token = token;
                yield_n(i % 3).await;
                r.fetch_add(1, SeqCst);
                i
            });
            match i % 4 {
                0 => drop(h), // detached
                1 => {
                    h.abort(); // before its first poll
                    handles.push(h);
                }
                _ => handles.push(h),
            }
        }
        for h in handles {
            let _ = h.await;
        }
        yield_n(5).await;
        assert_eq!(
            duality_rt::event_loop::current()
                .unwrap()
                .snapshot()
                .tasks_alive,
            0
        );
    });
    assert_eq!(futures.drops(), N, "every future dropped exactly once");
    assert_eq!(ran.load(SeqCst), N / 4 * 3, "all but the aborted ones ran");
    assert_eq!(task::alive(), 0);
}
