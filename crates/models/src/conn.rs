//! `Conn`: one client connection as the handler sees it, whatever the model.

use duality_rt::net::{TcpStream, UnixStream};
use std::collections::HashMap;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

/// Tells connections that the server is shutting down.
///
/// A connection waiting for its next request then sees end-of-stream, while
/// one in the middle of a request still reads what has arrived and writes
/// its response: in-flight requests finish, idle connections close.
#[derive(Default)]
pub(crate) struct ShutdownSignal {
    flag: AtomicBool,
    waiters: Mutex<HashMap<u64, Waiter>>,
}

enum Waiter {
    Task(Waker),
    /// A blocking socket (thread-per-conn): shut its read side to unblock it,
    /// unless its handler is in the middle of a request (the flag).
    Socket(Arc<AtomicBool>, socket2::Socket),
}

impl ShutdownSignal {
    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(SeqCst)
    }

    pub(crate) fn trigger(&self) {
        self.flag.store(true, SeqCst);
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, w) in waiters {
            match w {
                Waiter::Task(w) => w.wake(),
                Waiter::Socket(mid, s) => {
                    if !mid.load(SeqCst) {
                        let _ = s.shutdown(std::net::Shutdown::Read);
                    }
                }
            }
        }
    }

    fn register(&self, id: u64, w: Waiter) {
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, w);
    }

    fn unregister(&self, id: u64) {
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Counts live connections; decremented when the `Conn` drops.
pub(crate) struct ConnCounter {
    pub(crate) live: AtomicUsize,
    pub(crate) total: AtomicU64,
    pub(crate) refused: AtomicU64,
}

enum Io {
    Tcp(TcpStream),
    Unix(UnixStream),
    BlockingTcp(std::net::TcpStream),
    BlockingUnix(std::os::unix::net::UnixStream),
}

/// A client connection. Read and write in thread style; the model decides
/// whether a wait parks the task (event loops) or the OS thread
/// (thread-per-conn).
pub struct Conn {
    io: Io,
    id: u64,
    shutdown: Arc<ShutdownSignal>,
    counter: Arc<ConnCounter>,
    registered: Option<Waker>,
    /// The handler holds part of a request: shutdown lets it finish reading.
    mid_request: Arc<AtomicBool>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A socket accepted by the acceptor, not yet bound to a loop.
pub(crate) enum Accepted {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Accepted {
    /// Best-effort, non-blocking write of a refusal message before closing.
    pub(crate) fn refuse(self, message: &[u8]) {
        let _ = match self {
            Accepted::Tcp(mut s) => s.set_nonblocking(true).and_then(|_| s.write(message)),
            Accepted::Unix(mut s) => s.set_nonblocking(true).and_then(|_| s.write(message)),
        };
    }
}

impl Conn {
    /// Registers the socket with the current loop (event-loop models).
    pub(crate) fn evented(
        a: Accepted,
        shutdown: Arc<ShutdownSignal>,
        counter: Arc<ConnCounter>,
    ) -> io::Result<Conn> {
        let io = match a {
            Accepted::Tcp(s) => {
                let s = TcpStream::from_std(s)?;
                s.set_nodelay(true)?;
                Io::Tcp(s)
            }
            Accepted::Unix(s) => Io::Unix(UnixStream::from_std(s)?),
        };
        Ok(Conn::with(io, shutdown, counter))
    }

    /// Keeps the socket blocking (thread-per-conn).
    pub(crate) fn blocking(
        a: Accepted,
        shutdown: Arc<ShutdownSignal>,
        counter: Arc<ConnCounter>,
    ) -> io::Result<Conn> {
        let (io, dup) = match a {
            Accepted::Tcp(s) => {
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                let dup = socket2::Socket::from(s.try_clone()?);
                (Io::BlockingTcp(s), dup)
            }
            Accepted::Unix(s) => {
                s.set_nonblocking(false)?;
                let dup = socket2::Socket::from(std::os::fd::OwnedFd::from(s.try_clone()?));
                (Io::BlockingUnix(s), dup)
            }
        };
        let conn = Conn::with(io, shutdown, counter);
        conn.shutdown
            .register(conn.id, Waiter::Socket(conn.mid_request.clone(), dup));
        if conn.shutdown.is_set() {
            conn.shutdown.trigger();
        }
        Ok(conn)
    }

    fn with(io: Io, shutdown: Arc<ShutdownSignal>, counter: Arc<ConnCounter>) -> Conn {
        Conn {
            io,
            id: NEXT_ID.fetch_add(1, Relaxed),
            shutdown,
            counter,
            registered: None,
            mid_request: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Tells the connection whether the handler holds part of a request.
    /// While it does, a shutdown does not end the connection's reads, so the
    /// request can arrive whole and be answered (within the server's
    /// shutdown deadline); between requests, a shutdown reads as end-of-stream.
    pub fn set_mid_request(&mut self, mid: bool) {
        self.mid_request.store(mid, SeqCst);
    }

    fn closing(&self) -> bool {
        self.shutdown.is_set() && !self.mid_request.load(SeqCst)
    }

    /// Reads into `buf`. `Ok(0)`: the client closed, or the server is
    /// shutting down, nothing more has arrived and the handler is not in the
    /// middle of a request (see [`set_mid_request`](Self::set_mid_request)).
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.is_blocking() && self.closing() {
            return Ok(0);
        }
        match &mut self.io {
            Io::BlockingTcp(s) => return s.read(buf),
            Io::BlockingUnix(s) => return s.read(buf),
            _ => {}
        }
        poll_fn(|cx| {
            let r = match &self.io {
                Io::Tcp(s) => s.poll_read(cx, buf),
                Io::Unix(s) => s.poll_read(cx, buf),
                _ => unreachable!("blocking sockets handled above"),
            };
            if r.is_ready() {
                return r;
            }
            if self.closing() {
                return Poll::Ready(Ok(0));
            }
            let fresh = !matches!(&self.registered, Some(w) if w.will_wake(cx.waker()));
            if fresh {
                self.registered = Some(cx.waker().clone());
                self.shutdown
                    .register(self.id, Waiter::Task(cx.waker().clone()));
                if self.closing() {
                    return Poll::Ready(Ok(0));
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Writes all of `buf`.
    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => s.write_all(buf).await,
            Io::Unix(s) => s.write_all(buf).await,
            Io::BlockingTcp(s) => s.write_all(buf),
            Io::BlockingUnix(s) => s.write_all(buf),
        }
    }

    /// The raw descriptor (for `sendfile`).
    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match &self.io {
            Io::Tcp(s) => s.as_raw_fd(),
            Io::Unix(s) => s.as_raw_fd(),
            Io::BlockingTcp(s) => s.as_raw_fd(),
            Io::BlockingUnix(s) => s.as_raw_fd(),
        }
    }

    /// True if the socket does blocking I/O (the thread-per-conn model).
    pub fn is_blocking(&self) -> bool {
        matches!(self.io, Io::BlockingTcp(_) | Io::BlockingUnix(_))
    }

    /// The TCP stream, if this is an event-loop TCP connection.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match &self.io {
            Io::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// Runs a non-blocking write-side system call when the socket is
    /// writable (for `sendfile`); on blocking sockets it simply runs it.
    pub async fn write_with<R>(
        &self,
        mut f: impl FnMut(std::os::fd::RawFd) -> io::Result<R>,
    ) -> io::Result<R> {
        let fd = self.as_raw_fd();
        match &self.io {
            Io::Tcp(s) => s.write_with(|| f(fd)).await,
            Io::Unix(s) => s.write_with(|| f(fd)).await,
            Io::BlockingTcp(_) | Io::BlockingUnix(_) => f(fd),
        }
    }

    /// True once the server started shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_set()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.registered.is_some() || self.is_blocking() {
            self.shutdown.unregister(self.id);
        }
        self.counter.live.fetch_sub(1, SeqCst);
    }
}
