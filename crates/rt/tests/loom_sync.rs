//! Loom models of the sync primitives: every interleaving of two threads.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p duality-rt --test loom_sync --release`.
//! Models stay small (two threads, a handful of operations) so each explores its
//! interleavings in seconds. A value carried through a channel is a
//! `loom::sync::Arc`, so loom also reports any message that is leaked.
#![cfg(loom)]

use std::future::Future;
use std::task::{Context, Poll, Wake, Waker};

use duality_rt::sync::{mpsc, oneshot, Mutex, Semaphore, SeqPair};
use futures_lite::future::poll_once;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;

/// Wakes a loom thread parked in [`block_on`].
struct Unparker(thread::Thread);

impl Wake for Unparker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `f` on the current loom thread, parking between polls. (Written here
/// because `loom::future::block_on` needs loom's `futures` feature.)
fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(std::sync::Arc::new(Unparker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

#[test]
fn oneshot_send_wakes_receiver() {
    loom::model(|| {
        let (tx, rx) = oneshot::channel();
        let t = thread::spawn(move || tx.send(7usize).unwrap());
        assert_eq!(block_on(rx), Ok(7));
        t.join().unwrap();
    });
}

#[test]
fn oneshot_sender_dropped_wakes_receiver() {
    loom::model(|| {
        let (tx, rx) = oneshot::channel::<usize>();
        let t = thread::spawn(move || drop(tx));
        assert!(block_on(rx).is_err());
        t.join().unwrap();
    });
}

#[test]
fn oneshot_receiver_dropped_races_send() {
    loom::model(|| {
        let (tx, rx) = oneshot::channel();
        let value = Arc::new(());
        let v2 = value.clone();
        let t = thread::spawn(move || {
            // Either delivered (then dropped with the receiver) or handed back.
            let _ = tx.send(v2);
        });
        drop(rx);
        t.join().unwrap();
        assert_eq!(
            Arc::strong_count(&value),
            1,
            "the value was dropped exactly once"
        );
    });
}

#[test]
fn oneshot_close_races_send() {
    loom::model(|| {
        let (tx, mut rx) = oneshot::channel();
        let t = thread::spawn(move || tx.send(1usize).is_ok());
        rx.close();
        let got = block_on(&mut rx);
        let sent = t.join().unwrap();
        // Sent before the close: received. After: refused, and rx never waits.
        assert_eq!(got.is_ok(), sent);
    });
}

#[test]
fn oneshot_closed_wakes_sender() {
    loom::model(|| {
        let (mut tx, rx) = oneshot::channel::<usize>();
        let t = thread::spawn(move || drop(rx));
        block_on(tx.closed());
        assert!(tx.is_closed());
        t.join().unwrap();
    });
}

#[test]
fn mpsc_back_pressure_and_disconnect() {
    loom::model(|| {
        let (tx, mut rx) = mpsc::channel(1);
        let t = thread::spawn(move || {
            block_on(async {
                tx.send(1usize).await.unwrap();
                tx.send(2).await.unwrap(); // waits for the receiver at capacity 1
            });
        });
        block_on(async {
            assert_eq!(rx.recv().await, Some(1));
            assert_eq!(rx.recv().await, Some(2));
            assert_eq!(rx.recv().await, None);
        });
        t.join().unwrap();
    });
}

#[test]
fn mpsc_close_fails_waiting_sender() {
    loom::model(|| {
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(Arc::new(0usize)).unwrap();
        let t = thread::spawn(move || block_on(tx.send(Arc::new(1))).is_err());
        rx.close();
        assert!(t.join().unwrap(), "a send to a full, closed channel fails");
        assert_eq!(rx.try_recv().map(|v| *v), Ok(0));
        assert!(rx.try_recv().is_err());
    });
}

#[test]
fn mpsc_cancelled_send_never_delivers() {
    loom::model(|| {
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(0usize).unwrap();
        let t = thread::spawn(move || {
            block_on(async {
                let mut first = tx.send(1);
                let sent_first = poll_once(&mut first).await.is_some();
                drop(first); // cancelled if still waiting: its slot goes to the next send
                tx.send(2).await.unwrap();
                sent_first
            })
        });
        let got = block_on(async {
            let mut got = Vec::new();
            while let Some(v) = rx.recv().await {
                got.push(v);
            }
            got
        });
        let sent_first = t.join().unwrap();
        let expected = if sent_first {
            vec![0, 1, 2]
        } else {
            vec![0, 2]
        };
        assert_eq!(got, expected);
    });
}

#[test]
fn semaphore_mutual_exclusion() {
    loom::model(|| {
        let sem = Arc::new(Semaphore::new(1));
        let inside = Arc::new(AtomicUsize::new(0));
        let (s2, i2) = (sem.clone(), inside.clone());
        let t = thread::spawn(move || {
            let _p = block_on(s2.acquire()).unwrap();
            assert_eq!(i2.fetch_add(1, SeqCst), 0);
            i2.fetch_sub(1, SeqCst);
        });
        {
            let _p = block_on(sem.acquire()).unwrap();
            assert_eq!(inside.fetch_add(1, SeqCst), 0);
            inside.fetch_sub(1, SeqCst);
        }
        t.join().unwrap();
        assert_eq!(sem.available_permits(), 1);
    });
}

#[test]
fn semaphore_cancelled_acquire_loses_no_permit() {
    loom::model(|| {
        let sem = Arc::new(Semaphore::new(1));
        let s2 = sem.clone();
        let t = thread::spawn(move || {
            block_on(async {
                let mut a = s2.acquire();
                let _maybe_permit = poll_once(&mut a).await;
                // both the permit (if any) and the future are dropped here
            })
        });
        drop(block_on(sem.acquire()).unwrap());
        t.join().unwrap();
        assert_eq!(sem.available_permits(), 1);
    });
}

/// A payload stage stopping (`Semaphore::close`) while a connection waits
/// for room behind a running job: the waiter learns of the close (or gets
/// the job's permit) and never waits forever.
#[test]
fn semaphore_close_wakes_a_waiting_acquire() {
    loom::model(|| {
        let sem = Arc::new(Semaphore::new(1));
        let job = block_on(sem.acquire()).unwrap();
        let s2 = sem.clone();
        let waiter = thread::spawn(move || block_on(s2.acquire()).is_ok());
        sem.close();
        drop(job);
        let got_room = waiter.join().unwrap();
        assert!(!got_room, "room after the stage closed");
    });
}

#[test]
fn mutex_counts() {
    loom::model(|| {
        let m = Arc::new(Mutex::new(0usize));
        let m2 = m.clone();
        let t = thread::spawn(move || *block_on(m2.lock()) += 1);
        *block_on(m.lock()) += 1;
        t.join().unwrap();
        assert_eq!(*block_on(m.lock()), 2);
    });
}

/// A reader racing an update of a `SeqPair` sees both words from before it
/// or both from after it, never one of each. (Both on threads of their
/// own: with the reader on the model's main thread, loom explored one
/// interleaving only.)
#[test]
fn seq_pair_read_vs_update_is_never_torn() {
    loom::model(|| {
        let p = Arc::new(SeqPair::new((0, 0)));
        let w = {
            let p = p.clone();
            thread::spawn(move || p.update(|(a, _)| ((a + 1, a + 1), ())))
        };
        let r = {
            let p = p.clone();
            thread::spawn(move || p.read())
        };
        let (a, b) = r.join().unwrap();
        assert_eq!(a, b, "a torn read");
        w.join().unwrap();
        assert_eq!(p.read(), (1, 1));
    });
}

/// Two updates run one at a time, each seeing the other's words if it
/// came first: neither is lost.
#[test]
fn seq_pair_updates_are_serialised() {
    loom::model(|| {
        let p = Arc::new(SeqPair::new((0, 0)));
        let w = {
            let p = p.clone();
            thread::spawn(move || p.update(|(a, b)| ((a + 1, b + 1), ())))
        };
        p.update(|(a, b)| ((a + 1, b + 1), ()));
        w.join().unwrap();
        assert_eq!(p.read(), (2, 2));
    });
}
