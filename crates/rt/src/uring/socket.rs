//! One socket's state on the ring ([`Io`]): its receive queue, send queue,
//! one-shot readiness and accepting, shared by the socket's handle (any
//! thread) and its loop.

use super::*;

/// The part of a loop's ring other threads reach: sockets that need a
/// submission, and file reads whose futures were dropped in flight.
pub(crate) struct UringShared {
    pub(super) loop_id: u16,
    pub(super) dirty: DirtyList<Arc<Io>>,
    pub(super) abandoned: DirtyList<Arc<FileRead>>,
    pub(super) live: AtomicUsize,
}

/// One socket's state on the ring.
pub(crate) struct Io {
    pub(super) fd: RawFd,
    shared: Arc<UringShared>,
    pub(super) queued: crate::loom::AtomicBool,
    pub(super) st: Mutex<St>,
}

#[derive(Default)]
pub(super) struct St {
    // Receiving.
    pub(super) rx: Queue,
    /// Bytes of `rx` the reader has taken. 32 bits (every connection holds
    /// an `St`): `rx` stays near `RX_LIMIT`, receiving stops past it.
    pub(super) rx_pos: u32,
    pub(super) rx_eof: bool,
    pub(super) want_recv: bool,
    pub(super) recv: Option<NonZeroU64>,
    pub(super) recv_cancelled: bool,
    pub(super) reader: Option<Waker>,
    // Sending.
    pub(super) tx: Queue,
    /// Shared bytes queued after `tx` (cached file bodies, cache values):
    /// sent from where they lie, in one gather send with `tx`, never
    /// copied. Boxed: idle connections (most of them) pay one pointer.
    pub(super) tx_tail: Option<Box<Tail>>,
    /// Bytes of the send in flight (0: none; capped at `u32::MAX`): what
    /// [`TX_LIMIT`] counts until it completes (its buffer is held whole;
    /// what short sends of it gave the kernel is `Cold::tx_sent`).
    pub(super) tx_busy: u32,
    pub(super) tx_err: Option<io::ErrorKind>,
    pub(super) writer: Option<Waker>,
    pub(super) shutdown_after_tx: Option<std::net::Shutdown>,
    /// One-shot readiness and accepting, made on first use: most sockets
    /// only receive and send (every connection has an `St`, and idle ones
    /// are many).
    pub(super) cold: Option<Box<Cold>>,
    // The handle was dropped.
    pub(super) closed: bool,
    pub(super) lingering: bool,
    /// What is still to send is dropped at the close, not lingered over.
    pub(super) discard: bool,
}

/// Most shared bodies one gather send carries (a pipeline of large cache
/// values, of cached files): a writer past it waits for the send.
pub(super) const TAIL_PARTS: usize = 16;

/// Shared bytes queued to send, in order: each part's body, then the bytes
/// written behind it before it went (the end of its response, the next
/// responses), so that nothing written later makes a body a copy.
pub(super) struct Tail {
    pub(super) parts: Vec<TailPart>,
}

pub(super) struct TailPart {
    body: SharedBytes,
    pub(super) start: usize,
    end: usize,
    pub(super) after: Vec<u8>,
}

impl TailPart {
    pub(super) fn bytes(&self) -> &[u8] {
        &self.body[self.start..self.end]
    }
}

impl Tail {
    pub(super) fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.end - p.start + p.after.len())
            .sum()
    }

    /// Bytes copied into it (the parts' `after`s), as opposed to shared.
    pub(super) fn copied(&self) -> usize {
        self.parts.iter().map(|p| p.after.len()).sum()
    }

    /// Drops the first `sent` bytes (a short send's).
    pub(super) fn advance(&mut self, mut sent: usize) {
        let mut done = 0;
        for p in &mut self.parts {
            let body = p.end - p.start;
            if sent < body {
                p.start += sent;
                break;
            }
            sent -= body;
            p.start = p.end;
            if sent < p.after.len() {
                p.after.drain(..sent);
                break;
            }
            sent -= p.after.len();
            done += 1;
        }
        self.parts.drain(..done);
    }
}

/// A gather send in flight: the queued bytes and the shared tail after
/// them, and the message that points at all of them (stable in this box
/// until the completion).
pub(super) struct GatherSend {
    pub(super) head: Queue,
    pub(super) tail: Box<Tail>,
    pub(super) iov: [libc::iovec; 1 + 2 * TAIL_PARTS],
    pub(super) msg: libc::msghdr,
}

/// Delays before a poll that completed without its direction is armed
/// again: io_uring completes every poll on `POLLRDHUP`, so once the peer has
/// half-closed, a wait for writability completes at once for as long as its
/// send buffer stays full. 1 ms doubling to 512 ms: a half-closed peer that
/// reads on is served with short pauses, one that stops costs about two
/// wake-ups a second until the write timeout, not a spin.
pub(super) static POLL_RETRY: [types::Timespec; 10] = [
    retry_ms(1),
    retry_ms(2),
    retry_ms(4),
    retry_ms(8),
    retry_ms(16),
    retry_ms(32),
    retry_ms(64),
    retry_ms(128),
    retry_ms(256),
    retry_ms(512),
];

const fn retry_ms(ms: u32) -> types::Timespec {
    types::Timespec::new().nsec(ms * 1_000_000)
}

/// The part of a socket's state few sockets use.
pub(super) struct Cold {
    /// Reads left in direct mode (see `Io::try_read`; 0: the ring's
    /// receive). Here: only sockets that receive large values use it.
    direct: u8,
    // One-shot readiness (direct system calls, such as `sendfile`).
    pub(super) ready: u8,
    pub(super) ready_tick: u64,
    pub(super) want_poll: u8,
    pub(super) polls: [Option<NonZeroU64>; 2],
    /// Per direction: how many polls in a row completed without it (see
    /// [`POLL_RETRY`]), the delay armed before the next one, and whether
    /// that delay has run (the next poll goes in at once).
    pub(super) backoff: [u8; 2],
    pub(super) delays: [Option<NonZeroU64>; 2],
    pub(super) delayed: u8,
    // Accepting: listeners only.
    pub(super) acc: Accepting,
    /// Bytes that arrived while `rx` already held `RX_LIMIT` unread, one
    /// chunk per completion, and their total. The kernel fills up to the
    /// whole buffer ring in one turn, before the cancel of a receive that is
    /// too far ahead of its reader takes effect; kept in `rx` that overshoot
    /// would double its capacity (and leave the old block to the allocator),
    /// kept here it costs what it holds and is freed as it is read.
    pub(super) rx_over: VecDeque<Box<[u8]>>,
    rx_over_len: usize,
    /// A receive error, for the reader (rare: kept out of line).
    rx_err: Option<io::Error>,
    /// Bytes of the send in flight that short sends already gave the
    /// kernel (for `Io::unsent`; only large sends are short).
    pub(super) tx_sent: usize,
    /// Sends in a row the kernel gave back with `EAGAIN` (see
    /// [`UringReactor::resend`]): the next goes after `POLL_RETRY` of it.
    pub(super) resends: u8,
}

impl Default for Cold {
    fn default() -> Cold {
        Cold {
            direct: 0,
            // Optimistic, as the epoll backend: try first, wait on WouldBlock.
            ready: WRITABLE,
            ready_tick: 0,
            want_poll: 0,
            polls: [None; 2],
            backoff: [0; 2],
            delays: [None; 2],
            delayed: 0,
            acc: Accepting::default(),
            rx_over: VecDeque::new(),
            rx_over_len: 0,
            rx_err: None,
            tx_sent: 0,
            resends: 0,
        }
    }
}

/// A listener's accept state.
#[derive(Default)]
pub(super) struct Accepting {
    pub(super) want: bool,
    /// The accept in flight (multishot, or single-shot while paced).
    pub(super) armed: Option<u64>,
    pub(super) accepted: VecDeque<OwnedFd>,
    pub(super) err: Option<io::Error>,
    /// Until when accepts are single-shot (see [`PACED_ACCEPT`]).
    pub(super) paced_until: Option<Instant>,
}

impl Accepting {
    /// Whether an accept should be armed, and if so whether one at a time.
    pub(super) fn arm_next(&mut self) -> Option<bool> {
        if !self.want || self.armed.is_some() {
            return None;
        }
        let paced = self
            .paced_until
            .is_some_and(|t| crate::time::loop_now() < t);
        if !paced {
            self.paced_until = None;
        }
        let room = if paced {
            self.accepted.is_empty()
        } else {
            self.accepted.len() < ACCEPT_QUEUE
        };
        room.then_some(paced)
    }
}

impl St {
    /// A receive error waits for the reader.
    /// The next completion for the reader wakes `cx`'s task.
    fn watch_reader(&mut self, cx: &Context<'_>) {
        if !matches!(&self.reader, Some(w) if w.will_wake(cx.waker())) {
            self.reader = Some(cx.waker().clone());
        }
    }

    /// Reads left in direct mode (see `Io::try_read`).
    fn direct(&self) -> u8 {
        self.cold.as_ref().map_or(0, |c| c.direct)
    }

    fn has_rx_err(&self) -> bool {
        self.cold.as_ref().is_some_and(|c| c.rx_err.is_some())
    }

    /// Records a receive error for the reader.
    pub(super) fn set_rx_err(&mut self, e: io::Error) {
        self.cold.get_or_insert_with(Default::default).rx_err = Some(e);
    }

    /// Bytes copied into the queue (`tx` and what follows shared bodies):
    /// what [`TX_LIMIT`] bounds. Shared bodies cost the connection nothing.
    pub(super) fn tx_copied(&self) -> usize {
        self.tx.len() + self.tx_tail.as_ref().map_or(0, |t| t.copied())
    }

    /// Nothing queued and nothing in flight.
    pub(super) fn tx_idle(&self) -> bool {
        self.tx.is_empty() && self.tx_tail.is_none() && self.tx_busy == 0
    }

    /// Appends `bytes` to what is queued: behind the shared tail if one
    /// waits (it stays shared), else to `tx`.
    pub(super) fn queue(&mut self, bytes: &[u8]) {
        match self.tx_tail.as_mut().and_then(|t| t.parts.last_mut()) {
            Some(p) => p.after.extend_from_slice(bytes),
            None => {
                if self.tx.capacity() == 0 {
                    self.tx = spare_buf(Spare::Tx);
                }
                let (len, cap) = (self.tx.len(), self.tx.capacity());
                if len + bytes.len() > cap {
                    // Doubling, but not past what the limit lets wait (a
                    // writer may always add one write to a queue under
                    // it): a client that does not read holds the limit.
                    let want = (len + bytes.len()).max((2 * cap).min(TX_LIMIT));
                    self.tx.reserve_exact(want - len);
                }
                self.tx.extend_from_slice(bytes)
            }
        }
    }

    /// Queues all of a caller's `buf` behind nothing (nothing queued: the
    /// caller checked) and leaves it empty: up to [`MOVE_MIN`] bytes are
    /// copied into `tx` (the caller keeps its buffer's capacity for its next
    /// writes); a larger buffer becomes the shared tail as it is, no copy,
    /// and the caller gets a small new one.
    pub(super) fn queue_first(&mut self, buf: &mut Vec<u8>) {
        if buf.len() <= MOVE_MIN {
            self.queue(buf);
            buf.clear();
            return;
        }
        let end = buf.len();
        let owned = std::mem::replace(buf, Vec::with_capacity(Spare::Tx.keep()));
        let part = TailPart {
            body: SharedBytes::from_owner(Arc::new(owned)),
            start: 0,
            end,
            after: Vec::new(),
        };
        self.tx_tail = Some(Box::new(Tail { parts: vec![part] }));
    }

    /// Drops what is queued (the send failed).
    pub(super) fn clear_tx(&mut self) {
        self.tx.clear();
        self.tx_tail = None;
    }

    /// Moves unread bytes into `buf`: `rx` first, then overflow chunks, as
    /// far as `buf` goes. A drained queue goes back to the thread's spares.
    pub(super) fn take_rx(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() && self.rx.len() > self.rx_pos as usize {
            let from = self.rx_pos as usize;
            let k = (self.rx.len() - from).min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&self.rx[from..from + k]);
            n += k;
            self.rx_pos = (from + k) as u32;
            if from + k == self.rx.len() {
                let next = self.next_rx_chunk();
                keep_buf(std::mem::replace(&mut self.rx, next), Spare::Rx);
                self.rx_pos = 0;
            }
        }
        n
    }

    /// What the reader takes once `rx` is drained: the oldest overflow
    /// chunk, else an empty queue.
    fn next_rx_chunk(&mut self) -> Queue {
        let Some(cold) = self.cold.as_mut() else {
            return Queue::default();
        };
        let chunk = cold
            .rx_over
            .pop_front()
            .map(Queue::from)
            .unwrap_or_default();
        cold.rx_over_len -= chunk.len();
        chunk
    }

    /// Closed with its unsent bytes dropped (see `UringReactor::give_up`):
    /// a send that finds no room ends there.
    pub(super) fn given_up(&self) -> bool {
        self.closed && self.discard
    }

    pub(super) fn unread(&self) -> usize {
        self.rx.len() - self.rx_pos as usize + self.cold.as_ref().map_or(0, |c| c.rx_over_len)
    }

    /// Appends received bytes. What the reader has taken is dropped first
    /// once it is at least half the queue (a copy of at most as many bytes
    /// as were read): a reader that never quite catches up, such as a
    /// client pipelining without pause, must not grow the queue by every
    /// byte it ever sent.
    pub(super) fn push_rx(&mut self, bytes: &[u8]) {
        let overflowing = self.cold.as_ref().is_some_and(|c| c.rx_over_len > 0);
        if overflowing || self.rx.len() - self.rx_pos as usize >= RX_LIMIT {
            let cold = self.cold.get_or_insert_with(Default::default);
            cold.rx_over.push_back(bytes.into());
            cold.rx_over_len += bytes.len();
            return;
        }
        let grows = self.rx.len() + bytes.len() > self.rx.capacity();
        if self.rx_pos > 0 && (grows || self.rx_pos as usize >= self.rx.len() / 2) {
            // Growing would copy the taken bytes too: drop them first.
            self.rx.consume(self.rx_pos as usize);
            self.rx_pos = 0;
        }
        if self.rx.capacity() == 0 {
            self.rx = spare_buf(Spare::Rx);
        }
        let (len, cap) = (self.rx.len(), self.rx.capacity());
        if len + bytes.len() > cap {
            // Doubling, but never past what the limit lets in (unread is
            // under `RX_LIMIT` here, and one completion comes on top): a
            // connection far ahead of its reader holds the limit, not
            // twice it.
            let want = (len + bytes.len()).max((2 * cap).min(RX_LIMIT + bytes.len()));
            self.rx.reserve_exact(want - len);
        }
        self.rx.extend_from_slice(bytes);
    }
}

impl Io {
    pub(crate) fn new(fd: RawFd, shared: Arc<UringShared>) -> Arc<Io> {
        shared.live.fetch_add(1, Ordering::Relaxed);
        Arc::new(Io {
            fd,
            shared,
            queued: crate::loom::AtomicBool::new(false),
            st: Mutex::new(St::default()),
        })
    }

    /// Puts the socket on its loop's list of sockets that need submissions.
    pub(super) fn schedule(self: &Arc<Self>) {
        if !self.shared.dirty.mark(&self.queued, || self.clone()) {
            return;
        }
        if let Some(shared) = registry::get(self.shared.loop_id) {
            shared.notify();
        }
    }

    // ---- receiving -------------------------------------------------------

    /// Received bytes not read yet.
    pub(crate) fn has_unread(&self) -> bool {
        lock_std(&self.st).unread() > 0
    }

    /// Ready when bytes, end of stream or an error wait; arms the receive.
    pub(crate) fn poll_readable(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = lock_std(&self.st);
        if st.unread() > 0 || st.rx_eof || st.has_rx_err() {
            return Poll::Ready(Ok(()));
        }
        if st.direct() > 0 {
            if st.recv.is_some() {
                // Being cancelled: its last completion wakes the reader
                // (with bytes, or for the one-shot poll below).
                st.watch_reader(cx);
                return Poll::Pending;
            }
            // Direct reads (see `try_read`): a one-shot poll, as epoll's.
            drop(st);
            return self.poll_ready(false, cx).map(|_| Ok(()));
        }
        self.wait_recv(&mut st, cx);
        Poll::Pending
    }

    fn wait_recv(self: &Arc<Self>, st: &mut St, cx: &mut Context<'_>) {
        st.watch_reader(cx);
        if !st.want_recv || (st.recv.is_none() && st.unread() < RX_LIMIT) {
            st.want_recv = true;
            if st.recv.is_none() {
                self.schedule();
            }
        }
    }

    pub(crate) fn poll_read(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if crate::coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        loop {
            if let Some(r) = self.try_read(cx, buf) {
                return r;
            }
            // A direct receive found nothing: wait until the socket is
            // readable (a readiness seen before is stale: look again).
            match self.poll_ready(false, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(tick) => self.clear_ready(false, tick),
            }
        }
    }

    /// [`poll_read`](Self::poll_read)'s one look: `None` when a direct
    /// receive found nothing to read.
    fn try_read(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Option<Poll<io::Result<usize>>> {
        let mut st = lock_std(&self.st);
        // A large read (a large value on its way): the ring's receive
        // stops, and once what it queued is read, `recv` reads straight
        // into `buf`, as under epoll, instead of through provided buffers
        // and the queue (two copies more). Not before: a completion of it
        // still on its way would bring bytes that come first. Waits are
        // then one-shot polls, as epoll's, and the connection stays direct
        // for `DIRECT_STICKY` reads of less after the last large one (a
        // client storing large values sends more of them: a receive armed
        // at its idle wait would take the next ones through the queue).
        let large = buf.len() >= DIRECT_MIN;
        if large {
            st.cold.get_or_insert_with(Default::default).direct = DIRECT_STICKY;
        }
        if st.direct() > 0 && st.want_recv {
            st.want_recv = false;
            if st.recv.is_some() {
                // The loop cancels it (see `plan`).
                self.schedule();
            }
        }
        if st.rx.len() > st.rx_pos as usize && !buf.is_empty() {
            let n = st.take_rx(buf);
            // Caught up after a pause for a full queue: receive again.
            if st.want_recv
                && st.recv.is_none()
                && !st.rx_eof
                && st.unread() < RX_LIMIT / 2
                && !st.has_rx_err()
            {
                self.schedule();
            }
            crate::coop::spend();
            return Some(Poll::Ready(Ok(n)));
        }
        if let Some(e) = st.cold.as_mut().and_then(|c| c.rx_err.take()) {
            crate::coop::spend();
            return Some(Poll::Ready(Err(e)));
        }
        if st.rx_eof || buf.is_empty() {
            crate::coop::spend();
            return Some(Poll::Ready(Ok(0)));
        }
        if st.direct() == 0 {
            self.wait_recv(&mut st, cx);
            return Some(Poll::Pending);
        }
        if st.recv.is_some() {
            // Its last completion wakes the reader.
            st.watch_reader(cx);
            return Some(Poll::Pending);
        }
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the call
        // does not block (`MSG_DONTWAIT`) and keeps no pointer to it.
        let n = unsafe {
            libc::recv(
                self.fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            if n == 0 {
                st.rx_eof = true;
            }
            if let Some(c) = st.cold.as_mut().filter(|_| !large) {
                c.direct -= 1;
            }
            crate::coop::spend();
            return Some(Poll::Ready(Ok(n as usize)));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            // (Interrupted: the readiness wait looks again.)
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
            _ => {
                // As the ring's receive does: a reset connection takes no
                // more bytes either, writes fail now.
                if st.tx_err.is_none() {
                    st.tx_err = Some(e.kind());
                    st.clear_tx();
                }
                if let Some(w) = st.writer.take() {
                    w.wake();
                }
                crate::coop::spend();
                Some(Poll::Ready(Err(e)))
            }
        }
    }

    // ---- sending ---------------------------------------------------------

    /// The state, for a write: after the poll's I/O budget and a send error
    /// (which every later write reports).
    fn lock_for_write(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<std::sync::MutexGuard<'_, St>>> {
        if crate::coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        let st = lock_std(&self.st);
        match st.tx_err {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(st)),
        }
    }

    pub(crate) fn poll_write(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut st = std::task::ready!(self.lock_for_write(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let queued = st.tx_copied() + st.tx_busy as usize;
        if queued >= TX_LIMIT {
            st.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = buf.len().min(TX_LIMIT - queued);
        let first = st.tx.is_empty() && st.tx_tail.is_none();
        st.queue(&buf[..n]);
        if first && st.tx_busy == 0 {
            self.schedule();
        }
        crate::coop::spend();
        Poll::Ready(Ok(n))
    }

    /// Queues all of `buf` and leaves it empty. An empty queue takes the
    /// bytes at once ([`St::queue_first`]: a large buffer is not copied);
    /// otherwise the bytes are copied in once they fit under [`TX_LIMIT`]
    /// with what is queued and in flight (not past it: a connection whose
    /// client does not read would hold the send in flight, the limit and one
    /// answer more).
    pub(crate) fn poll_write_vec(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &mut Vec<u8>,
    ) -> Poll<io::Result<()>> {
        let mut st = std::task::ready!(self.lock_for_write(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if st.tx_idle() {
            st.queue_first(buf);
            self.schedule();
        } else if st.tx_copied() + (st.tx_busy as usize) + buf.len() <= TX_LIMIT {
            st.queue(buf);
            buf.clear();
        } else {
            st.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        crate::coop::spend();
        Poll::Ready(Ok(()))
    }

    /// Queues all of `head`, then `body[range]`, then `after`, and leaves
    /// `head` empty. The body is sent from where it lies, never copied in
    /// user space (the kernel reads one hot copy for every connection
    /// sending it): it joins the shared tail of the next gather send, behind
    /// what is queued, with `after`; bodies written in one turn (a pipeline
    /// of large values) go in one send. A socket with nothing queued takes
    /// `head` at once ([`St::queue_first`]).
    /// Unless the socket is idle, waits while the bytes copied into the
    /// queue (not the bodies: they cost the connection nothing) would pass
    /// [`TX_LIMIT`], or while the tail has [`TAIL_PARTS`] bodies. (Copied
    /// behind a send in flight, bodies of a 60 KB file made clients that
    /// pipeline and never read cost 94-185 KB per connection; epoll 15-22.)
    pub(crate) fn poll_write_shared(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        head: &mut Vec<u8>,
        body: &SharedBytes,
        range: std::ops::Range<usize>,
        after: &[u8],
    ) -> Poll<io::Result<()>> {
        let mut st = std::task::ready!(self.lock_for_write(cx))?;
        let nothing_queued = st.tx.is_empty() && st.tx_tail.is_none();
        let idle = nothing_queued && st.tx_busy == 0;
        let parts = st.tx_tail.as_ref().map_or(0, |t| t.parts.len());
        let copied = st.tx_copied() + head.len() + after.len();
        if !idle && (copied > TX_LIMIT || parts >= TAIL_PARTS) {
            st.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if nothing_queued {
            st.queue_first(head);
        } else {
            st.queue(head);
        }
        if range.is_empty() {
            st.queue(after);
        } else {
            let part = TailPart {
                body: body.clone(),
                start: range.start,
                end: range.end,
                after: after.to_vec(),
            };
            match &mut st.tx_tail {
                Some(t) => t.parts.push(part),
                None => st.tx_tail = Some(Box::new(Tail { parts: vec![part] })),
            }
        }
        if nothing_queued && st.tx_busy == 0 && !(st.tx.is_empty() && st.tx_tail.is_none()) {
            // Sent at the turn's end, with whatever else this turn queues.
            self.schedule();
        }
        head.clear();
        crate::coop::spend();
        Poll::Ready(Ok(()))
    }

    /// Ready once every queued byte has gone to the kernel (or failed).
    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = lock_std(&self.st);
        if let Some(kind) = st.tx_err {
            return Poll::Ready(Err(kind.into()));
        }
        if st.tx_idle() {
            return Poll::Ready(Ok(()));
        }
        st.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Shuts the socket down once what is queued has been sent.
    pub(crate) fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        let mut st = lock_std(&self.st);
        if how != std::net::Shutdown::Read && !st.tx_idle() {
            if how == std::net::Shutdown::Both {
                shutdown_fd(self.fd, std::net::Shutdown::Read)?;
            }
            st.shutdown_after_tx = Some(std::net::Shutdown::Write);
            return Ok(());
        }
        shutdown_fd(self.fd, how)
    }

    // ---- readiness (POLL_ADD) --------------------------------------------

    /// Ready in `dir` (`write` true: writable)? Arms a one-shot poll when not.
    /// Returns the readiness tick, for [`clear_ready`](Self::clear_ready).
    pub(crate) fn poll_ready(self: &Arc<Self>, write: bool, cx: &mut Context<'_>) -> Poll<u64> {
        let bit = if write { WRITABLE } else { READABLE };
        let mut st = lock_std(&self.st);
        let st = &mut *st;
        let cold = st.cold.get_or_insert_with(Default::default);
        if cold.ready & bit != 0 {
            return Poll::Ready(cold.ready_tick);
        }
        let i = write as usize;
        // Also when the bit is wanted but nothing is armed for it: a poll
        // that completed without it (see `POLL_RETRY`) left it wanted.
        let want =
            cold.want_poll & bit == 0 || (cold.polls[i].is_none() && cold.delays[i].is_none());
        cold.want_poll |= bit;
        if write {
            st.writer = Some(cx.waker().clone());
        } else {
            st.reader = Some(cx.waker().clone());
        }
        if want {
            self.schedule();
        }
        Poll::Pending
    }

    /// After `WouldBlock`: forget readiness seen at `tick`.
    pub(crate) fn clear_ready(&self, write: bool, tick: u64) {
        let bit = if write { WRITABLE } else { READABLE };
        let mut st = lock_std(&self.st);
        if let Some(cold) = st.cold.as_mut().filter(|c| c.ready_tick == tick) {
            cold.ready &= !bit;
        }
    }

    /// Ready when nothing queued is left to send (a direct system call on the
    /// socket, such as `sendfile`, must not overtake queued bytes).
    pub(crate) fn poll_tx_drained(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }

    // ---- accepting -------------------------------------------------------

    /// An accepted descriptor, or an error from the accept.
    pub(crate) fn poll_accept(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<io::Result<OwnedFd>> {
        let mut st = lock_std(&self.st);
        let st = &mut *st;
        let acc = &mut st.cold.get_or_insert_with(Default::default).acc;
        if let Some(fd) = acc.accepted.pop_front() {
            if acc.armed.is_none() && acc.want {
                self.schedule();
            }
            return Poll::Ready(Ok(fd));
        }
        if let Some(e) = acc.err.take() {
            return Poll::Ready(Err(e));
        }
        if !acc.want || acc.armed.is_none() {
            acc.want = true;
            self.schedule();
        }
        st.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Bytes written and not yet taken by the kernel: queued, or in the
    /// send in flight (a short send's rest counts until it is sent).
    pub(crate) fn unsent(&self) -> usize {
        let st = lock_std(&self.st);
        let sent = st.cold.as_ref().map_or(0, |c| c.tx_sent);
        let in_flight = (st.tx_busy as usize).saturating_sub(sent);
        st.tx.len() + st.tx_tail.as_ref().map_or(0, |t| t.len()) + in_flight
    }

    /// At the close, drop what is still to send (the peer stopped reading)
    /// instead of lingering over it.
    pub(crate) fn discard_unsent(&self) {
        let mut st = lock_std(&self.st);
        st.discard = true;
        st.clear_tx();
    }

    /// The handle is gone: cancel what is armed, finish sending, then close.
    pub(crate) fn release(self: &Arc<Self>) {
        let mut st = lock_std(&self.st);
        st.closed = true;
        st.reader = None;
        st.writer = None;
        drop(st);
        self.schedule();
    }

    pub(super) fn take_wakers(&self, out: &mut Vec<Waker>) {
        let mut st = lock_std(&self.st);
        out.extend(st.reader.take());
        out.extend(st.writer.take());
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        self.shared.live.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: this `Io` owns `fd` (the socket object that opened it was
        // released to it), and no ring operation uses it any more: each
        // in-flight operation holds an `Arc<Io>` (a cancel by descriptor,
        // `give_up`, names the number only; it goes in while the sends it
        // ends still hold this `Io`).
        unsafe { libc::close(self.fd) };
    }
}

pub(super) fn shutdown_fd(fd: RawFd, how: std::net::Shutdown) -> io::Result<()> {
    let how = match how {
        std::net::Shutdown::Read => libc::SHUT_RD,
        std::net::Shutdown::Write => libc::SHUT_WR,
        std::net::Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: plain system call on a descriptor this socket owns.
    if unsafe { libc::shutdown(fd, how) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
