//! A bounded multi-producer, single-consumer channel with back-pressure.
//!
//! [`channel(cap)`](channel) holds at most `cap` messages. When it is full,
//! [`Sender::send`] waits (parking the task, not the thread) until the receiver takes
//! a message: a producer can never run further ahead of its consumer than `cap`.
//! That wait is how the hand-off queues of the runtime push back: a network loop
//! that cannot hand a job to a slow payload stage stops reading, and TCP pushes back
//! on the client. [`Sender::try_send`] reports [`TrySendError::Full`] instead.
//!
//! # State and who touches it
//!
//! One `State` behind a `crate::loom::Mutex`, read or written only with that lock
//! held:
//!
//! * `buffer` — queued messages; pushed by senders, popped by the receiver.
//! * `reserved` — slots granted to queued senders that have not yet pushed their
//!   message. Capacity is shared: `buffer.len() + reserved <= cap` always.
//! * `send_waiters` — FIFO of blocked `send` futures, each needing one slot.
//!   Invariant: someone waits only while no slot is free.
//! * `senders` — live [`Sender`] handles; 0 means disconnected.
//! * `rx_closed` — set by [`Receiver::close`] or dropping the receiver; never
//!   cleared.
//! * `rx_waker` — the receiver's task, set by the receiver, taken and woken by a
//!   sender that pushes (or by the last sender leaving).
//!
//! # Fairness
//!
//! Senders are served FIFO: a freed slot is reserved for the first waiting sender,
//! and `try_send` or a new `send` never takes a slot while someone waits.
//!
//! # Closing
//!
//! * Dropping every `Sender` disconnects: the receiver drains what is buffered,
//!   then [`recv`](Receiver::recv) yields `None`.
//! * [`Receiver::close`] (or dropping the receiver) refuses new messages: waiting
//!   and later sends fail with [`SendError`], handing the message back. Messages
//!   already buffered can still be received after `close`; dropping the receiver
//!   drops them.
//!
//! # Cancellation
//!
//! A dropped `send` future **never** delivers its message: the message is only
//! pushed inside `poll`, at the moment the future resolves `Ok`. If a slot had been
//! reserved for it, the slot is passed to the next waiting sender. A dropped `recv`
//! future loses nothing: a message leaves the buffer only when `recv` resolves.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::{WaitId, WaitQueue, WaitStatus, WakeList};
use crate::loom::{lock, Arc, Mutex};

/// Creates a bounded channel holding at most `capacity` messages.
///
/// # Panics
///
/// If `capacity` is 0.
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(capacity > 0, "mpsc channel capacity must be at least 1");
    let chan = Arc::new(Chan {
        capacity,
        state: Mutex::new(State {
            buffer: VecDeque::new(),
            reserved: 0,
            send_waiters: WaitQueue::new(),
            senders: 1,
            rx_closed: false,
            rx_waker: None,
        }),
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

struct Chan<T> {
    capacity: usize,
    state: Mutex<State<T>>,
}

struct State<T> {
    buffer: VecDeque<T>,
    reserved: usize,
    send_waiters: WaitQueue,
    senders: usize,
    rx_closed: bool,
    rx_waker: Option<Waker>,
}

impl<T> State<T> {
    fn free(&self, capacity: usize) -> usize {
        capacity - self.buffer.len() - self.reserved
    }

    /// Reserves free slots for waiting senders, FIFO.
    fn grant_slots(&mut self, capacity: usize, wakes: &mut WakeList) {
        if self.rx_closed {
            return;
        }
        let free = self.free(capacity);
        let mut left = free;
        self.send_waiters.grant(&mut left, wakes);
        self.reserved += free - left;
    }

    /// Pushes a message and schedules the receiver's wake-up.
    fn push(&mut self, value: T, wakes: &mut WakeList) {
        self.buffer.push_back(value);
        if let Some(w) = self.rx_waker.take() {
            wakes.wake(w);
        }
    }
}

/// The sending half. Cloning it adds a producer; the channel disconnects when the
/// last one is dropped.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// The receiving half.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

/// The receiver is closed or gone; the message is handed back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

/// Why [`Sender::try_send`] did not send; the message is handed back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// The channel is at capacity (or other senders are already waiting).
    Full(T),
    /// The receiver is closed or gone.
    Closed(T),
}

/// Why [`Receiver::try_recv`] returned no message.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum TryRecvError {
    /// Nothing buffered right now.
    Empty,
    /// Nothing buffered, and nothing ever will be: every sender is gone, or the
    /// receiver was closed.
    Disconnected,
}

impl<T> Sender<T> {
    /// Sends `value`, waiting while the channel is full. Resolves to
    /// [`SendError`] (with the value) if the receiver is closed or gone.
    ///
    /// Cancel-safe in the strong sense: if the future is dropped before it
    /// resolves, the message was not sent.
    pub fn send(&self, value: T) -> SendFuture<'_, T> {
        SendFuture {
            sender: self,
            value: Some(value),
            state: SendState::Idle,
        }
    }

    /// Sends `value` if a slot is free right now and no other sender is waiting.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.chan.state);
        if st.rx_closed {
            return Err(TrySendError::Closed(value));
        }
        if st.send_waiters.has_waiting() || st.free(self.chan.capacity) == 0 {
            return Err(TrySendError::Full(value));
        }
        st.push(value, &mut wakes);
        drop(st);
        wakes.wake_all();
        Ok(())
    }

    /// True once the receiver is closed or dropped.
    pub fn is_closed(&self) -> bool {
        lock(&self.chan.state).rx_closed
    }

    /// Messages buffered right now.
    pub fn len(&self) -> usize {
        lock(&self.chan.state).buffer.len()
    }

    /// True if no message is buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The channel's capacity.
    pub fn capacity(&self) -> usize {
        self.chan.capacity
    }

    /// True if both senders feed the same channel.
    pub fn same_channel(&self, other: &Sender<T>) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Sender<T> {
        lock(&self.chan.state).senders += 1;
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut st = lock(&self.chan.state);
            st.senders -= 1;
            if st.senders == 0 {
                st.rx_waker.take()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The future of [`Sender::send`].
///
/// Lazy: it tries to send on its first poll. Dropping it before it resolves never
/// delivers the message; a slot reserved for it is passed on.
#[must_use = "futures do nothing unless polled"]
pub struct SendFuture<'a, T> {
    sender: &'a Sender<T>,
    /// Taken when the future resolves.
    value: Option<T>,
    state: SendState,
}

#[derive(Debug, Clone, Copy)]
enum SendState {
    Idle,
    Queued(WaitId),
    Done,
}

// The message is moved, never pinned.
impl<T> Unpin for SendFuture<'_, T> {}

impl<T> Future for SendFuture<'_, T> {
    type Output = Result<(), SendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let chan = &this.sender.chan;
        let mut wakes = WakeList::new();
        let mut st = lock(&chan.state);
        let may_push = match this.state {
            SendState::Idle => {
                if st.rx_closed {
                    false
                } else if !st.send_waiters.has_waiting() && st.free(chan.capacity) > 0 {
                    true
                } else {
                    this.state = SendState::Queued(st.send_waiters.push(1, cx.waker()));
                    return Poll::Pending;
                }
            }
            SendState::Queued(id) => match st.send_waiters.poll(id, cx.waker(), &mut wakes) {
                WaitStatus::Granted => {
                    st.reserved -= 1;
                    !st.rx_closed
                }
                WaitStatus::Waiting => return Poll::Pending,
                WaitStatus::Gone => false, // drained by `close`
            },
            SendState::Done => panic!("`SendFuture` polled after completion"),
        };
        this.state = SendState::Done;
        let value = this.value.take().expect("message present until resolved");
        if may_push {
            st.push(value, &mut wakes);
            Poll::Ready(Ok(()))
        } else {
            Poll::Ready(Err(SendError(value)))
        }
    }
}

impl<T> Drop for SendFuture<'_, T> {
    fn drop(&mut self) {
        if let SendState::Queued(id) = self.state {
            let chan = &self.sender.chan;
            let mut wakes = WakeList::new();
            let mut st = lock(&chan.state);
            if st.send_waiters.remove(id, &mut wakes).is_some() {
                // A slot was reserved for us: hand it to the next sender.
                st.reserved -= 1;
                st.grant_slots(chan.capacity, &mut wakes);
            }
            drop(st);
            wakes.wake_all();
        }
        // `self.value`, if still here, is dropped after the lock is released.
    }
}

impl<T> Receiver<T> {
    /// Receives the next message, waiting if none is buffered. Yields `None` once
    /// the channel is empty and every sender is gone (or the receiver was closed).
    pub fn recv(&mut self) -> RecvFuture<'_, T> {
        RecvFuture { receiver: self }
    }

    /// [`recv`](Self::recv) as a poll method, for hand-written futures and streams.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.chan.state);
        if let Some(v) = st.buffer.pop_front() {
            st.grant_slots(self.chan.capacity, &mut wakes);
            drop(st);
            wakes.wake_all();
            return Poll::Ready(Some(v));
        }
        if st.senders == 0 || st.rx_closed {
            return Poll::Ready(None);
        }
        match &st.rx_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => {
                if let Some(old) = st.rx_waker.replace(cx.waker().clone()) {
                    wakes.retire(old);
                }
            }
        }
        Poll::Pending
    }

    /// Takes a message if one is buffered, without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.chan.state);
        if let Some(v) = st.buffer.pop_front() {
            st.grant_slots(self.chan.capacity, &mut wakes);
            drop(st);
            wakes.wake_all();
            return Ok(v);
        }
        if st.senders == 0 || st.rx_closed {
            Err(TryRecvError::Disconnected)
        } else {
            Err(TryRecvError::Empty)
        }
    }

    /// Refuses new messages: waiting and later sends fail with [`SendError`].
    /// Messages already buffered can still be received.
    pub fn close(&mut self) {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.chan.state);
        st.rx_closed = true;
        st.send_waiters.drain_waiting(&mut wakes);
        drop(st);
        wakes.wake_all();
    }

    /// Messages buffered right now.
    pub fn len(&self) -> usize {
        lock(&self.chan.state).buffer.len()
    }

    /// True if no message is buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The channel's capacity.
    pub fn capacity(&self) -> usize {
        self.chan.capacity
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut wakes = WakeList::new();
        let mut st = lock(&self.chan.state);
        st.rx_closed = true;
        st.send_waiters.drain_waiting(&mut wakes);
        let buffered = std::mem::take(&mut st.buffer);
        if let Some(w) = st.rx_waker.take() {
            wakes.retire(w);
        }
        drop(st);
        wakes.wake_all();
        // Messages run their destructors unlocked: one may well be a `Sender` of
        // this very channel.
        drop(buffered);
    }
}

/// The future of [`Receiver::recv`]. Dropping it loses no message.
#[must_use = "futures do nothing unless polled"]
pub struct RecvFuture<'a, T> {
    receiver: &'a mut Receiver<T>,
}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.get_mut().receiver.poll_recv(cx)
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("mpsc::Sender")
            .field("capacity", &self.chan.capacity)
            .finish()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("mpsc::Receiver")
            .field("capacity", &self.chan.capacity)
            .field("len", &self.len())
            .finish()
    }
}

impl<T> fmt::Debug for SendFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("mpsc::SendFuture")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for RecvFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("mpsc::RecvFuture").finish_non_exhaustive()
    }
}

impl<T> SendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError(..)")
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("channel closed")
    }
}

impl<T> std::error::Error for SendError<T> {}

impl<T> TrySendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Closed(v) => v,
        }
    }

    /// True for [`TrySendError::Full`].
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }

    /// True for [`TrySendError::Closed`].
    pub fn is_closed(&self) -> bool {
        matches!(self, TrySendError::Closed(_))
    }
}

impl<T> From<SendError<T>> for TrySendError<T> {
    fn from(e: SendError<T>) -> TrySendError<T> {
        TrySendError::Closed(e.0)
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("channel full"),
            TrySendError::Closed(_) => f.write_str("channel closed"),
        }
    }
}

impl<T> std::error::Error for TrySendError<T> {}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("channel empty"),
            TryRecvError::Disconnected => f.write_str("channel disconnected"),
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
    fn send_recv_in_order() {
        let (tx, mut rx) = channel(4);
        block_on(async {
            for i in 0..4 {
                tx.send(i).await.unwrap();
            }
            assert_eq!(rx.len(), 4);
            for i in 0..4 {
                assert_eq!(rx.recv().await, Some(i));
            }
        });
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn back_pressure_blocks_at_capacity_and_resumes() {
        let (tx, mut rx) = channel(2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert!(tx.try_send(3).unwrap_err().is_full());
        let w = CountingWaker::new();
        let mut s = tx.send(3);
        assert!(poll_counting(&mut s, &w).is_pending());
        assert!(poll_counting(&mut s, &w).is_pending());
        assert_eq!(w.count(), 0);
        assert_eq!(rx.try_recv(), Ok(1));
        assert_eq!(
            w.count(),
            1,
            "the waiting sender is woken when a slot frees"
        );
        // The freed slot is reserved for the waiter: nobody barges in.
        assert!(tx.try_send(9).unwrap_err().is_full());
        assert!(matches!(poll_counting(&mut s, &w), Poll::Ready(Ok(()))));
        assert_eq!(rx.len(), 2);
        assert_eq!(rx.try_recv(), Ok(2));
        assert_eq!(rx.try_recv(), Ok(3));
    }

    #[test]
    fn back_pressure_across_threads() {
        let (tx, mut rx) = channel(1);
        let producer = std::thread::spawn(move || {
            block_on(async {
                for i in 0..100 {
                    tx.send(i).await.unwrap();
                }
            })
        });
        let got: Vec<i32> = block_on(async {
            let mut v = Vec::new();
            while let Some(i) = rx.recv().await {
                assert!(rx.len() <= 1);
                v.push(i);
            }
            v
        });
        producer.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn dropped_send_never_delivers_and_passes_slot_on() {
        let (tx, mut rx) = channel(1);
        tx.try_send(0).unwrap();
        let (wa, wb) = (CountingWaker::new(), CountingWaker::new());
        let mut a = tx.send(1);
        let mut b = tx.send(2);
        assert!(poll_counting(&mut a, &wa).is_pending());
        assert!(poll_counting(&mut b, &wb).is_pending());
        assert_eq!(rx.try_recv(), Ok(0)); // slot reserved for `a`
        assert_eq!(wa.count(), 1);
        drop(a); // cancelled: 1 is never sent, the slot goes to `b`
        assert_eq!(wb.count(), 1);
        assert!(matches!(poll_counting(&mut b, &wb), Poll::Ready(Ok(()))));
        assert_eq!(rx.try_recv(), Ok(2));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn all_senders_dropped_disconnects_after_drain() {
        let (tx, mut rx) = channel(4);
        let tx2 = tx.clone();
        assert!(tx.same_channel(&tx2));
        tx.try_send(1).unwrap();
        drop(tx);
        let w = CountingWaker::new();
        let mut r = rx.recv();
        assert!(matches!(poll_counting(&mut r, &w), Poll::Ready(Some(1))));
        let mut r = rx.recv();
        assert!(poll_counting(&mut r, &w).is_pending());
        drop(tx2);
        assert_eq!(w.count(), 1);
        assert_eq!(block_on(rx.recv()), None);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn close_fails_waiting_and_later_sends_keeps_buffer() {
        let (tx, mut rx) = channel(1);
        tx.try_send(1).unwrap();
        let w = CountingWaker::new();
        let mut s = tx.send(2);
        assert!(poll_counting(&mut s, &w).is_pending());
        rx.close();
        assert_eq!(w.count(), 1);
        match poll_counting(&mut s, &w) {
            Poll::Ready(Err(SendError(2))) => {}
            other => panic!("{other:?}"),
        }
        assert!(tx.is_closed());
        assert!(tx.try_send(3).unwrap_err().is_closed());
        assert_eq!(block_on(tx.send(4)), Err(SendError(4)));
        assert_eq!(block_on(rx.recv()), Some(1));
        assert_eq!(block_on(rx.recv()), None);
    }

    #[test]
    fn granted_then_closed_send_fails() {
        let (tx, mut rx) = channel(1);
        tx.try_send(1).unwrap();
        let w = CountingWaker::new();
        let mut s = tx.send(2);
        assert!(poll_counting(&mut s, &w).is_pending());
        assert_eq!(rx.try_recv(), Ok(1)); // slot reserved for `s`
        rx.close();
        assert!(matches!(
            poll_counting(&mut s, &w),
            Poll::Ready(Err(SendError(2)))
        ));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn receiver_drop_drops_buffer_outside_lock() {
        // A buffered message that is a sender of the same channel: its destructor
        // takes the channel's lock, so the buffer must be dropped unlocked.
        let (tx, rx) = channel::<Box<dyn std::any::Any + std::marker::Send>>(1);
        tx.try_send(Box::new(tx.clone())).unwrap();
        drop(rx);
        assert!(tx.is_closed());
    }

    #[test]
    fn dropped_recv_loses_nothing() {
        let (tx, mut rx) = channel(1);
        let w = CountingWaker::new();
        {
            let mut r = rx.recv();
            assert!(poll_counting(&mut r, &w).is_pending());
        }
        tx.try_send(5).unwrap();
        assert_eq!(w.count(), 1);
        assert_eq!(rx.try_recv(), Ok(5));
    }

    #[test]
    fn wakes_receiver_from_another_thread() {
        let (tx, mut rx) = channel(1);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.try_send(1u8).unwrap();
        });
        assert_eq!(block_on(rx.recv()), Some(1));
        t.join().unwrap();
    }

    #[test]
    fn many_producers() {
        let (tx, mut rx) = channel(2);
        let producers: Vec<_> = (0..3)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    block_on(async {
                        for i in 0..100 {
                            tx.send((p, i)).await.unwrap();
                        }
                    })
                })
            })
            .collect();
        drop(tx);
        let mut last = [-1i32; 3];
        let mut n = 0;
        while let Some((p, i)) = block_on(rx.recv()) {
            assert!(i > last[p], "per-producer order kept");
            last[p] = i;
            n += 1;
        }
        assert_eq!(n, 300);
        for p in producers {
            p.join().unwrap();
        }
    }

    #[test]
    fn types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Sender<std::cell::Cell<u8>>>();
        check::<Receiver<std::cell::Cell<u8>>>();
        fn send<T: Send>() {}
        send::<SendFuture<'static, std::cell::Cell<u8>>>();
        send::<RecvFuture<'static, std::cell::Cell<u8>>>();
    }
}
