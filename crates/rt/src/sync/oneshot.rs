//! A one-shot channel: one value, from one [`Sender`] to one [`Receiver`].
//!
//! The typical use is a reply: a task hands a job to another loop or a pool together
//! with a `Sender`, and awaits the `Receiver`.
//!
//! # State and who touches it
//!
//! Both halves share one `State` behind a `crate::loom::Mutex`, read or written only
//! with that lock held:
//!
//! * `value` — written once by [`Sender::send`]; taken by the receiver (or dropped
//!   when the receiver goes away).
//! * `tx_done` — set when the sender has sent *or* been dropped; never cleared. The
//!   receiver reads "`value` empty and `tx_done`" as "no value will ever come".
//! * `rx_closed` — set when the receiver is dropped or [`Receiver::close`] is
//!   called; a later `send` hands the value back. Once it is set, `value` can only
//!   be taken, never filled, so the receiver need not wait for the sender's drop.
//! * `rx_waker` / `tx_waker` — the receiver's task (waiting for the value) and the
//!   sender's task (waiting in [`Sender::closed`]), each written only by its own side
//!   and taken by the other side, which wakes it after unlocking.
//!
//! # Cancellation
//!
//! Dropping the [`Receiver`] (a future) at any point is safe: a value sent before or
//! after is dropped, never leaked, and the sender can observe it through
//! [`Sender::is_closed`]. Dropping the `Sender` without sending resolves the receiver
//! to [`RecvError`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::loom::{lock, Arc, Mutex};

/// Creates a one-shot channel.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Mutex::new(State {
        value: None,
        tx_done: false,
        rx_closed: false,
        rx_waker: None,
        tx_waker: None,
    }));
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

struct State<T> {
    value: Option<T>,
    tx_done: bool,
    rx_closed: bool,
    rx_waker: Option<Waker>,
    tx_waker: Option<Waker>,
}

/// Stores `w` into `slot` unless the waker there already wakes the same task;
/// returns the replaced waker so it can be dropped after unlocking.
fn register(slot: &mut Option<Waker>, w: &Waker) -> Option<Waker> {
    match slot {
        Some(old) if old.will_wake(w) => None,
        _ => slot.replace(w.clone()),
    }
}

/// The sending half; consumed by [`send`](Sender::send).
pub struct Sender<T> {
    shared: Arc<Mutex<State<T>>>,
}

/// The receiving half; a future resolving to the value, or to [`RecvError`] if the
/// sender was dropped without sending.
#[must_use = "futures do nothing unless polled"]
pub struct Receiver<T> {
    shared: Arc<Mutex<State<T>>>,
}

/// The sender was dropped without sending a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvError(());

/// Why [`Receiver::try_recv`] returned no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryRecvError {
    /// No value yet; the sender may still send one.
    Empty,
    /// No value will ever come: the sender was dropped, or the value was already
    /// taken.
    Closed,
}

impl<T> Sender<T> {
    /// Sends the value. Fails, handing the value back, if the receiver is gone (or
    /// was closed).
    pub fn send(self, value: T) -> Result<(), T> {
        let waker;
        {
            let mut st = lock(&self.shared);
            if st.rx_closed {
                return Err(value);
            }
            st.value = Some(value);
            st.tx_done = true;
            waker = st.rx_waker.take();
        }
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
        // `self` drops here and sees `tx_done` already set.
    }

    /// True if the receiver has been dropped or closed: a `send` would fail, so work
    /// whose only purpose is the reply may be abandoned.
    pub fn is_closed(&self) -> bool {
        lock(&self.shared).rx_closed
    }

    /// Waits until the receiver is dropped or closed.
    pub async fn closed(&mut self) {
        std::future::poll_fn(|cx| self.poll_closed(cx)).await
    }

    /// Polls for the receiver going away ([`closed`](Self::closed) as a poll method).
    pub fn poll_closed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let stale;
        {
            let mut st = lock(&self.shared);
            if st.rx_closed {
                return Poll::Ready(());
            }
            stale = register(&mut st.tx_waker, cx.waker());
        }
        drop(stale);
        Poll::Pending
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let (waker, stale) = {
            let mut st = lock(&self.shared);
            let notify = !st.tx_done && !st.rx_closed;
            st.tx_done = true;
            let rx_waker = if notify { st.rx_waker.take() } else { None };
            (rx_waker, st.tx_waker.take())
        };
        drop(stale);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// Takes the value if it has arrived, without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let mut st = lock(&self.shared);
        match st.value.take() {
            Some(v) => Ok(v),
            None if st.tx_done || st.rx_closed => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Refuses any value not yet sent: a later `send` fails and hands its value
    /// back, and the sender's [`is_closed`](Sender::is_closed) turns true. A value
    /// sent before the close can still be received; without one, the receiver
    /// resolves to [`RecvError`] at once.
    pub fn close(&mut self) {
        let waker = {
            let mut st = lock(&self.shared);
            st.rx_closed = true;
            st.tx_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let stale;
        {
            let mut st = lock(&self.shared);
            if let Some(v) = st.value.take() {
                return Poll::Ready(Ok(v));
            }
            if st.tx_done || st.rx_closed {
                return Poll::Ready(Err(RecvError(())));
            }
            stale = register(&mut st.rx_waker, cx.waker());
        }
        drop(stale);
        Poll::Pending
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let (value, waker, stale) = {
            let mut st = lock(&self.shared);
            st.rx_closed = true;
            (st.value.take(), st.tx_waker.take(), st.rx_waker.take())
        };
        // The value (user code in its `Drop`) and wakers go outside the lock.
        drop(value);
        drop(stale);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::Sender")
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.shared);
        f.debug_struct("oneshot::Receiver")
            .field("has_value", &st.value.is_some())
            .field("sender_done", &st.tx_done)
            .finish()
    }
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("oneshot sender dropped without sending")
    }
}

impl std::error::Error for RecvError {}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("oneshot channel is empty"),
            TryRecvError::Closed => f.write_str("oneshot channel is closed"),
        }
    }
}

impl std::error::Error for TryRecvError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::test_util::{poll_counting, CountingWaker};
    use futures_lite::future::block_on;
    use std::time::Duration;

    #[test]
    fn send_then_recv() {
        let (tx, rx) = channel();
        assert!(!tx.is_closed());
        tx.send(7).unwrap();
        assert_eq!(block_on(rx), Ok(7));
    }

    #[test]
    fn sender_dropped() {
        let (tx, mut rx) = channel::<u8>();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        let w = CountingWaker::new();
        assert!(poll_counting(&mut rx, &w).is_pending());
        drop(tx);
        assert_eq!(w.count(), 1);
        assert_eq!(block_on(rx), Err(RecvError(())));
    }

    #[test]
    fn receiver_dropped_returns_value_and_drops_sent_value() {
        let (tx, rx) = channel();
        drop(rx);
        assert!(tx.is_closed());
        assert_eq!(tx.send(3), Err(3));

        let (tx, rx) = channel();
        let v = std::sync::Arc::new(());
        tx.send(v.clone()).unwrap();
        drop(rx);
        assert_eq!(
            std::sync::Arc::strong_count(&v),
            1,
            "value dropped with the receiver"
        );
    }

    #[test]
    fn close_keeps_sent_value_refuses_later() {
        let (tx, mut rx) = channel();
        tx.send(1).unwrap();
        rx.close();
        assert_eq!(rx.try_recv(), Ok(1));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));

        let (tx, mut rx) = channel();
        rx.close();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(
            block_on(&mut rx),
            Err(RecvError(())),
            "no wait for the sender"
        );
        assert_eq!(tx.send(2), Err(2));
    }

    #[test]
    fn closed_future_wakes() {
        let (mut tx, rx) = channel::<u8>();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            drop(rx);
        });
        block_on(tx.closed());
        assert!(tx.is_closed());
        t.join().unwrap();
    }

    #[test]
    fn wakes_from_another_thread() {
        let (tx, rx) = channel();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.send(String::from("hi")).unwrap();
        });
        assert_eq!(block_on(rx).unwrap(), "hi");
        t.join().unwrap();
    }

    #[test]
    fn types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Sender<std::cell::Cell<u8>>>();
        check::<Receiver<std::cell::Cell<u8>>>();
    }
}
