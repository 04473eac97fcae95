//! A socket on its loop's backend: a mio source registered with the epoll
//! reactor, or a descriptor on the loop's io_uring (see `crate::uring`).

use super::SharedBytes;
use crate::backend::BackendRef;
use crate::reactor::{Direction, Registration};
use crate::uring;
use mio::event::Source;
use std::future::poll_fn;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use crate::faults::Faults;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

pub(crate) struct Evented<S: Source> {
    /// Under io_uring the descriptor belongs to the ring's `Io` (closed after
    /// the last completion), so the source is never dropped there.
    source: ManuallyDrop<S>,
    reg: Reg,
    /// The faults its loop injects (tests; `None`: none): out of line, so
    /// that every connection's stream, held in its future, stays small.
    faults: Option<Box<FaultState>>,
}

struct FaultState {
    faults: Faults,
    /// Counts of operations that decide when (one per fault, so that one
    /// fault's rhythm does not restrict another's).
    ticks: [AtomicU32; 4],
    /// Under `reset`: the operation from which this socket fails with
    /// `ECONNRESET` (counted in `ticks[3]`).
    reset_after: Option<u32>,
}

impl FaultState {
    /// Under injected faults: whether this operation returns `Pending` after
    /// waking its task (every other one with `yield`).
    fn take_yield(&self, cx: &mut Context<'_>) -> bool {
        if self.faults.yields && self.ticks[0].fetch_add(1, Relaxed).is_multiple_of(2) {
            cx.waker().wake_by_ref();
            return true;
        }
        false
    }

    /// Under injected faults: whether this read or write fails with
    /// `ECONNRESET` (this socket's turn has come, see `Faults::reset`).
    fn take_reset(&self) -> Option<io::Error> {
        let at = self.reset_after?;
        (self.ticks[3].fetch_add(1, Relaxed) + 1 >= at)
            .then(|| io::Error::from_raw_os_error(libc::ECONNRESET))
    }

    /// Under injected faults: the part of `len` bytes one operation moves:
    /// 1, 2, 7 or 4096 bytes in turn, so requests split at every position
    /// while large transfers still finish in reasonable time.
    fn take_len(&self, len: usize) -> usize {
        if self.faults.short {
            let cap = match self.ticks[1].fetch_add(1, Relaxed) % 4 {
                0 => 1,
                1 => 2,
                2 => 7,
                _ => 4096,
            };
            len.min(cap)
        } else {
            len
        }
    }

    /// Under injected faults: whether this system call fails with `EINTR`
    /// first (every third with `eintr`).
    fn take_eintr(&self) -> bool {
        self.faults.eintr && self.ticks[2].fetch_add(1, Relaxed).is_multiple_of(3)
    }
}

enum Reg {
    Epoll(Registration),
    Uring(Arc<uring::Io>),
}

/// Until when a listener's `accept` backs off after resource exhaustion
/// (kept by listeners only: every connection's future holds its stream).
pub(crate) type Backoff = Mutex<Option<Instant>>;

impl<S: Source + AsRawFd> Evented<S> {
    pub(crate) fn new(mut source: S) -> io::Result<Evented<S>> {
        let fd = source.as_raw_fd();
        let reg = match crate::event_loop::current_reactor() {
            Some(BackendRef::Uring(shared)) => Reg::Uring(uring::Io::new(fd, shared)),
            _ => Reg::Epoll(Registration::new(&mut source)?),
        };
        let faults = crate::event_loop::current_faults();
        Ok(Evented {
            source: ManuallyDrop::new(source),
            reg,
            faults: faults.any().then(|| {
                Box::new(FaultState {
                    faults,
                    ticks: Default::default(),
                    reset_after: faults.reset_after(),
                })
            }),
        })
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.source
    }

    fn fd(&self) -> RawFd {
        self.source.as_raw_fd()
    }

    /// Drops, at the close, what is still queued to send (see
    /// `discard_unsent` on the streams).
    pub(crate) fn discard_unsent(&self) {
        if let Reg::Uring(io) = &self.reg {
            io.discard_unsent();
        }
    }

    /// Bytes written that the kernel has not taken yet (io_uring's send
    /// queue; 0 under epoll, where each write is a system call).
    pub(crate) fn unsent(&self) -> usize {
        match &self.reg {
            Reg::Epoll(_) => 0,
            Reg::Uring(io) => io.unsent(),
        }
    }

    /// Bytes the runtime received that nobody has read yet (io_uring's
    /// receive queue; epoll leaves them in the kernel).
    pub(crate) fn has_unread(&self) -> bool {
        match &self.reg {
            Reg::Epoll(_) => false,
            Reg::Uring(io) => io.has_unread(),
        }
    }

    pub(crate) fn poll_read_with<R>(
        &self,
        cx: &mut Context<'_>,
        f: impl FnMut(&S) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.poll_with(Direction::Read, cx, f)
    }

    pub(crate) fn poll_write_with<R>(
        &self,
        cx: &mut Context<'_>,
        f: impl FnMut(&S) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.poll_with(Direction::Write, cx, f)
    }

    fn poll_with<R>(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
        f: impl FnMut(&S) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.poll_with_drained(dir, cx, f, |_| false)
    }

    /// [`poll_with`](Self::poll_with) where, under epoll, `drained(&result)`
    /// says the call emptied the socket in `dir` (see
    /// `Registration::poll_io_drained`).
    fn poll_with_drained<R>(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
        mut f: impl FnMut(&S) -> io::Result<R>,
        drained: impl Fn(&R) -> bool,
    ) -> Poll<io::Result<R>> {
        // A system call interrupted by a signal is retried at once.
        let mut f = |s: &S| loop {
            if self.faults.as_deref().is_some_and(FaultState::take_eintr) {
                continue;
            }
            match f(s) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        };
        match &self.reg {
            Reg::Epoll(reg) => reg.poll_io_drained(dir, self.fd(), cx, || f(&self.source), drained),
            Reg::Uring(io) => {
                let write = dir == Direction::Write;
                // A direct system call must not overtake bytes still queued
                // for the ring.
                if write {
                    match io.poll_tx_drained(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(())) => {}
                    }
                }
                if crate::coop::poll_proceed(cx).is_pending() {
                    return Poll::Pending;
                }
                loop {
                    let tick = match io.poll_ready(write, cx) {
                        Poll::Ready(t) => t,
                        Poll::Pending => return Poll::Pending,
                    };
                    match f(&self.source) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            io.clear_ready(write, tick)
                        }
                        r => {
                            crate::coop::spend();
                            return Poll::Ready(r);
                        }
                    }
                }
            }
        }
    }

    /// Polls readiness in `dir` without doing I/O. Under io_uring, reading
    /// means "received bytes wait" (the receive is armed if it was not).
    pub(crate) fn poll_ready(&self, dir: Direction, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.reg {
            Reg::Epoll(reg) => reg.poll_ready(dir, self.fd(), cx).map(|r| r.map(|_| ())),
            Reg::Uring(io) if dir == Direction::Read => io.poll_readable(cx),
            Reg::Uring(io) => io.poll_ready(true, cx).map(|_| Ok(())),
        }
    }

    /// Waits for readiness in `dir`; an error if the reactor refused to
    /// watch it.
    pub(crate) async fn ready(&self, dir: Direction) -> io::Result<()> {
        poll_fn(|cx| self.poll_ready(dir, cx)).await
    }

    /// Waits until every byte written so far has gone to the kernel (a
    /// no-op under epoll, where a write is a system call).
    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.reg {
            Reg::Epoll(_) => Poll::Ready(Ok(())),
            Reg::Uring(io) => io.poll_flush(cx),
        }
    }

    /// Shuts the socket down; under io_uring a write shutdown waits for the
    /// bytes still queued.
    pub(crate) fn shutdown_with(
        &self,
        how: std::net::Shutdown,
        f: impl FnOnce(&S) -> io::Result<()>,
    ) -> io::Result<()> {
        match &self.reg {
            Reg::Epoll(_) => f(&self.source),
            Reg::Uring(io) => io.shutdown(how),
        }
    }

    /// Polls an accept: `sys` runs the accept system call (epoll); under
    /// io_uring a multishot accept delivers descriptors that `wrap` turns
    /// into the listener's result.
    pub(crate) fn poll_accept<R>(
        &self,
        cx: &mut Context<'_>,
        sys: impl FnMut(&S) -> io::Result<R>,
        wrap: impl FnOnce(OwnedFd) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        match &self.reg {
            Reg::Epoll(_) => self.poll_read_with(cx, sys),
            Reg::Uring(io) => io.poll_accept(cx).map(|r| r.and_then(wrap)),
        }
    }
}

impl<S: Source> Drop for Evented<S> {
    fn drop(&mut self) {
        match &self.reg {
            Reg::Epoll(reg) => {
                reg.deregister(&mut *self.source);
                // SAFETY: dropped once, here; never used afterwards.
                unsafe { ManuallyDrop::drop(&mut self.source) };
            }
            // The descriptor is the `Io`'s now; the source (a descriptor
            // wrapper without heap memory) is forgotten.
            Reg::Uring(io) => io.release(),
        }
    }
}

/// Whether a stream read that returns fewer bytes than it asked for took
/// all that had arrived (see `Registration::poll_io_drained`).
pub(crate) trait ShortReadDrains {
    const DRAINS: bool;
}

/// TCP: yes, but at urgent data (the reactor then keeps readiness).
impl ShortReadDrains for mio::net::TcpStream {
    const DRAINS: bool = true;
}

/// Unix streams: no. A read also stops, with more queued behind, at a
/// message that carries descriptors or credentials, and at out-of-band
/// data.
impl ShortReadDrains for mio::net::UnixStream {
    const DRAINS: bool = false;
}

impl<S: Source + AsRawFd + ShortReadDrains> Evented<S>
where
    for<'a> &'a S: io::Read + io::Write,
{
    pub(crate) fn poll_read(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let buf = if let Some(f) = self.faults.as_deref() {
            if f.take_yield(cx) {
                return Poll::Pending;
            }
            if let Some(e) = f.take_reset() {
                return Poll::Ready(Err(e));
            }
            let n = f.take_len(buf.len());
            &mut buf[..n]
        } else {
            buf
        };
        match &self.reg {
            Reg::Epoll(_) => {
                let len = buf.len();
                self.poll_with_drained(
                    Direction::Read,
                    cx,
                    |mut s| io::Read::read(&mut s, buf),
                    // A short read took all that had arrived (see
                    // `Registration::poll_io_drained`).
                    |&n| S::DRAINS && n > 0 && n < len,
                )
            }
            Reg::Uring(io) => io.poll_read(cx, buf),
        }
    }

    pub(crate) fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let buf = if let Some(f) = self.faults.as_deref() {
            if f.take_yield(cx) {
                return Poll::Pending;
            }
            if let Some(e) = f.take_reset() {
                return Poll::Ready(Err(e));
            }
            &buf[..f.take_len(buf.len())]
        } else {
            buf
        };
        match &self.reg {
            Reg::Epoll(_) => self.poll_write_with(cx, |mut s| io::Write::write(&mut s, buf)),
            Reg::Uring(io) => io.poll_write(cx, buf),
        }
    }

    pub(crate) fn poll_write_vectored(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.faults.is_some() {
            // One slice at a time, through the faults of `poll_write`.
            let buf = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return self.poll_write(cx, buf);
        }
        match &self.reg {
            Reg::Epoll(_) => {
                self.poll_write_with(cx, |mut s| io::Write::write_vectored(&mut s, bufs))
            }
            // The ring queues bytes anyway: take the first non-empty slice.
            Reg::Uring(io) => {
                let buf = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &**b);
                io.poll_write(cx, buf)
            }
        }
    }

    pub(crate) async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| self.poll_read(cx, buf)).await
    }

    pub(crate) async fn read_exact(&self, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.read(&mut buf[done..]).await? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        Ok(())
    }

    pub(crate) async fn write(&self, buf: &[u8]) -> io::Result<usize> {
        poll_fn(|cx| self.poll_write(cx, buf)).await
    }

    /// Writes all of `buf` and leaves it empty; under io_uring the buffer
    /// itself may go to the ring (and an empty one come back), no copy.
    pub(crate) async fn write_vec(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        match &self.reg {
            Reg::Epoll(_) => {
                let r = self.write_all(buf).await;
                buf.clear();
                r
            }
            // Injected faults apply to byte-wise writes.
            Reg::Uring(_) if self.faults.is_some() => {
                let r = self.write_all(buf).await;
                buf.clear();
                r
            }
            Reg::Uring(io) => poll_fn(|cx| io.poll_write_vec(cx, buf)).await,
        }
    }

    /// Writes all of `head`, then `body[range]`, then `after`, and leaves
    /// `head` empty. Under io_uring the body is sent from where it lies (the
    /// next gather send, with what else this turn writes; no copy); under
    /// epoll, `writev` of the three. A `range` outside `body` is
    /// `InvalidInput`.
    /// `done`: bytes of `head`, `body[range]` and `after` already written
    /// (by an earlier call whose future was dropped), counted up as more
    /// go; `head` is emptied only once all of them have.
    pub(crate) async fn write_vec_shared(
        &self,
        head: &mut Vec<u8>,
        body: &SharedBytes,
        range: std::ops::Range<usize>,
        after: &[u8],
        done: &mut usize,
    ) -> io::Result<()> {
        let Some(part) = body.get(range.clone()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "write_vec_shared: range outside the body",
            ));
        };
        let total = head.len() + part.len() + after.len();
        if let (Reg::Uring(io), None) = (&self.reg, &self.faults) {
            // All queued at once (nothing is, while it waits for room).
            if *done >= total {
                return Ok(());
            }
            debug_assert_eq!(*done, 0, "io_uring queues a write whole");
            poll_fn(|cx| io.poll_write_shared(cx, head, body, range.clone(), after)).await?;
            *done = total;
            return Ok(());
        }
        let r = loop {
            if *done >= total {
                break Ok(());
            }
            let mut bufs = [io::IoSlice::new(&[]); 3];
            let mut skip = *done;
            for (i, piece) in [&head[..], part, after].into_iter().enumerate() {
                let k = skip.min(piece.len());
                bufs[i] = io::IoSlice::new(&piece[k..]);
                skip -= k;
            }
            match poll_fn(|cx| self.poll_write_vectored(cx, &bufs)).await {
                Ok(0) => break Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => *done += n,
                Err(e) => break Err(e),
            }
        };
        head.clear();
        r
    }

    pub(crate) async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => buf = &buf[n..],
            }
        }
        Ok(())
    }
}

/// The thread-style methods and `futures-io` traits shared by TCP and Unix streams.
macro_rules! stream_methods {
    ($ty:ident) => {
        impl $ty {
            /// Reads into `buf`; `Ok(0)` at end of stream.
            pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
                self.io.read(buf).await
            }
            /// Reads exactly `buf.len()` bytes (`UnexpectedEof` if the stream ends first).
            pub async fn read_exact(&self, buf: &mut [u8]) -> io::Result<()> {
                self.io.read_exact(buf).await
            }
            /// Writes some of `buf`, returning how much.
            pub async fn write(&self, buf: &[u8]) -> io::Result<usize> {
                self.io.write(buf).await
            }
            /// Writes all of `buf`.
            pub async fn write_all(&self, buf: &[u8]) -> io::Result<()> {
                self.io.write_all(buf).await
            }
            /// Writes all of `buf` and leaves it empty (capacity may change):
            /// under io_uring an idle connection's send queue takes the
            /// buffer itself instead of a copy, and gives its spare back.
            pub async fn write_vec(&self, buf: &mut Vec<u8>) -> io::Result<()> {
                self.io.write_vec(buf).await
            }
            /// Writes all of `head`, then `body[range]`, then `after`, and
            /// leaves `head` empty: a response head, a shared body (a cached
            /// file's, a cache item's value) and what ends the response.
            /// Under io_uring the body is sent from where it lies, never
            /// copied into a send buffer: bodies written in one turn go in
            /// one gather send with the bytes around them. Under epoll it is
            /// one `writev`.
            pub async fn write_vec_shared(
                &self,
                head: &mut Vec<u8>,
                body: &super::SharedBytes,
                range: std::ops::Range<usize>,
                after: &[u8],
            ) -> io::Result<()> {
                self.io
                    .write_vec_shared(head, body, range, after, &mut 0)
                    .await
            }
            /// [`write_vec_shared`](Self::write_vec_shared) that can be
            /// taken up again: `done` counts the bytes of `head`,
            /// `body[range]` and `after` already written and grows as more
            /// go, so a caller that drops this future (a wait it bounds)
            /// and calls again with the same arguments goes on from there.
            /// `head` is emptied once everything has gone. (Under io_uring
            /// everything is queued at once: see
            /// [`unsent`](Self::unsent).)
            pub async fn write_vec_shared_from(
                &self,
                head: &mut Vec<u8>,
                body: &super::SharedBytes,
                range: std::ops::Range<usize>,
                after: &[u8],
                done: &mut usize,
            ) -> io::Result<()> {
                self.io
                    .write_vec_shared(head, body, range, after, done)
                    .await
            }
            /// Bytes written that the kernel has not taken yet: those
            /// io_uring still queues or has in flight (0 under epoll, where
            /// each write is a system call). A writer bounding its wait for
            /// a slow client by [`flush`](Self::flush) sees progress here.
            pub fn unsent(&self) -> usize {
                self.io.unsent()
            }
            /// The peer stopped reading: what is still queued to send is
            /// dropped, and dropping the stream closes it at once. Without
            /// this, an io_uring socket keeps sending for up to 5 s after
            /// its drop; under epoll the kernel goes on with what it holds
            /// after the close either way (as nginx's close after a send
            /// timeout).
            pub fn discard_unsent(&self) {
                self.io.discard_unsent()
            }
            /// Whether bytes the peer sent wait unread, received by the
            /// runtime or still in the kernel's queue (one
            /// `recv(MSG_PEEK)`): a server about to close can read them off
            /// first, since closing a socket with input unread makes the
            /// kernel send a reset that can destroy the last response.
            pub fn input_pending(&self) -> bool {
                self.io.has_unread()
                    || crate::net::peek_pending(socket2::SockRef::from(self.io.get_ref()))
            }
            /// Waits until the socket is readable (or closed).
            pub async fn readable(&self) -> io::Result<()> {
                self.io.ready(crate::reactor::Direction::Read).await
            }
            /// Polls for readability (or closed) without reading: a
            /// connection can wait for its next request without holding a
            /// read buffer.
            pub fn poll_readable(
                &self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                self.io.poll_ready(crate::reactor::Direction::Read, cx)
            }
            /// Waits until the socket is writable (or closed).
            pub async fn writable(&self) -> io::Result<()> {
                self.io.ready(crate::reactor::Direction::Write).await
            }
            /// Polls a read (the building block of `AsyncRead`).
            pub fn poll_read(
                &self,
                cx: &mut std::task::Context<'_>,
                buf: &mut [u8],
            ) -> std::task::Poll<io::Result<usize>> {
                self.io.poll_read(cx, buf)
            }
            /// Polls a write (the building block of `AsyncWrite`).
            pub fn poll_write(
                &self,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<io::Result<usize>> {
                self.io.poll_write(cx, buf)
            }
            /// The raw descriptor (for `sendfile` and similar).
            pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
                use std::os::fd::AsRawFd;
                self.io.get_ref().as_raw_fd()
            }
            /// Runs a non-blocking write-side system call `f` when the socket
            /// is writable, retrying on `WouldBlock` (for `sendfile`).
            pub async fn write_with<R>(
                &self,
                mut f: impl FnMut() -> io::Result<R>,
            ) -> io::Result<R> {
                std::future::poll_fn(|cx| self.io.poll_write_with(cx, |_| f())).await
            }
            /// Shuts down the read half, the write half or both (under
            /// io_uring, the write half once the bytes written before have
            /// gone out).
            pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
                self.io.shutdown_with(how, |s| s.shutdown(how))
            }
            /// Waits until every byte written so far has gone to the kernel
            /// (at once under epoll, where each write is a system call).
            pub async fn flush(&self) -> io::Result<()> {
                std::future::poll_fn(|cx| self.io.poll_flush(cx)).await
            }
        }

        impl futures_io::AsyncRead for $ty {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut [u8],
            ) -> std::task::Poll<io::Result<usize>> {
                self.io.poll_read(cx, buf)
            }
        }

        impl futures_io::AsyncRead for &$ty {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut [u8],
            ) -> std::task::Poll<io::Result<usize>> {
                self.io.poll_read(cx, buf)
            }
        }

        impl futures_io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<io::Result<usize>> {
                self.io.poll_write(cx, buf)
            }
            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> std::task::Poll<io::Result<usize>> {
                self.io.poll_write_vectored(cx, bufs)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                self.io.poll_flush(cx)
            }
            fn poll_close(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(self.shutdown(std::net::Shutdown::Write))
            }
        }

        impl futures_io::AsyncWrite for &$ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<io::Result<usize>> {
                self.io.poll_write(cx, buf)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                self.io.poll_flush(cx)
            }
            fn poll_close(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(self.shutdown(std::net::Shutdown::Write))
            }
        }
    };
}
pub(crate) use stream_methods;

/// Accepts with the back-off policy shared by TCP and Unix listeners: after
/// resource exhaustion the next accept first sleeps `ACCEPT_BACKOFF`; aborted
/// connections are skipped.
pub(crate) async fn accept_with<S: Source + AsRawFd, R>(
    io: &Evented<S>,
    backoff: &Backoff,
    mut f: impl FnMut(&S) -> io::Result<R>,
    mut wrap: impl FnMut(OwnedFd) -> io::Result<R>,
) -> io::Result<R> {
    let until = crate::loom::lock_std(backoff).take();
    if let Some(until) = until {
        crate::time::sleep_until(until).await;
    }
    loop {
        let r = match io.faults.as_ref().and_then(|f| f.faults.accept_fault()) {
            // The connection waits in the backlog, as after a real EMFILE.
            Some(e) => Err(e),
            None => poll_fn(|cx| io.poll_accept(cx, &mut f, &mut wrap)).await,
        };
        match r {
            Err(e) if super::is_transient_accept_error(&e) => continue,
            Err(e) => {
                if super::is_resource_exhaustion(&e) {
                    *crate::loom::lock_std(backoff) = Some(Instant::now() + super::ACCEPT_BACKOFF);
                }
                return Err(e);
            }
            ok => return ok,
        }
    }
}
