//! A mio source registered with a loop's reactor.

use crate::reactor::{Direction, Registration};
use mio::event::Source;
use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Instant;

pub(crate) struct Evented<S: Source> {
    source: S,
    reg: Registration,
}

/// Until when a listener's `accept` backs off after resource exhaustion
/// (kept by listeners only: every connection's future holds its stream).
pub(crate) type Backoff = Mutex<Option<Instant>>;

impl<S: Source> Evented<S> {
    pub(crate) fn new(mut source: S) -> io::Result<Evented<S>>
    where
        S: AsRawFd,
    {
        let fd = source.as_raw_fd();
        let reg = Registration::new(&mut source, fd)?;
        Ok(Evented { source, reg })
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.source
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
        mut f: impl FnMut(&S) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.reg.poll_io(dir, cx, || f(&self.source))
    }

    /// Polls readiness in `dir` without doing I/O.
    pub(crate) fn poll_ready(&self, dir: Direction, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.reg.poll_ready(dir, cx).map(|r| r.map(|_| ()))
    }

    /// Waits for readiness in `dir`; an error if the reactor refused to
    /// watch it.
    pub(crate) async fn ready(&self, dir: Direction) -> io::Result<()> {
        poll_fn(|cx| self.reg.poll_ready(dir, cx).map(|r| r.map(|_| ()))).await
    }
}

impl<S: Source> Drop for Evented<S> {
    fn drop(&mut self) {
        self.reg.deregister(&mut self.source);
    }
}

impl<S: Source> Evented<S>
where
    for<'a> &'a S: io::Read + io::Write,
{
    pub(crate) fn poll_read(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_read_with(cx, |mut s| io::Read::read(&mut s, buf))
    }

    pub(crate) fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |mut s| io::Write::write(&mut s, buf))
    }

    pub(crate) fn poll_write_vectored(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |mut s| io::Write::write_vectored(&mut s, bufs))
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
            /// Shuts down the read half, the write half or both.
            pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
                self.io.get_ref().shutdown(how)
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
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
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
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
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
pub(crate) async fn accept_with<S: Source, R>(
    io: &Evented<S>,
    backoff: &Backoff,
    mut f: impl FnMut(&S) -> io::Result<R>,
) -> io::Result<R> {
    let until = crate::loom::lock_std(backoff).take();
    if let Some(until) = until {
        crate::time::sleep_until(until).await;
    }
    loop {
        let r = poll_fn(|cx| io.poll_read_with(cx, &mut f)).await;
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
