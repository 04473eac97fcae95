//! Unix-domain stream sockets.

use super::evented::{accept_with, stream_methods, Backoff, Evented};
use crate::reactor::Direction as Dir;
use std::io;
use std::path::Path;
use std::time::Duration;

/// A Unix-domain listening socket.
pub struct UnixListener {
    io: Evented<mio::net::UnixListener>,
    backoff: Backoff,
}

impl UnixListener {
    /// Binds at `path` on the current loop (the path must not exist).
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        Ok(UnixListener {
            io: Evented::new(mio::net::UnixListener::bind(path)?)?,
            backoff: Backoff::default(),
        })
    }

    /// Wraps a bound std listener (set non-blocking here).
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        listener.set_nonblocking(true)?;
        Ok(UnixListener {
            io: Evented::new(mio::net::UnixListener::from_std(listener))?,
            backoff: Backoff::default(),
        })
    }

    /// Waits for a connection, registered with the current loop. Resource
    /// exhaustion backs off as for TCP.
    pub async fn accept(&self) -> io::Result<UnixStream> {
        let (s, _) = accept_with(&self.io, &self.backoff, |l| l.accept(), unix_from_fd).await?;
        Ok(UnixStream {
            io: Evented::new(s)?,
        })
    }

    /// Like [`accept`](Self::accept), but returns a std socket for another loop.
    pub async fn accept_std(&self) -> io::Result<std::os::unix::net::UnixStream> {
        let (s, _) = accept_with(&self.io, &self.backoff, |l| l.accept(), unix_from_fd).await?;
        use std::os::fd::{FromRawFd, IntoRawFd};
        let fd = s.into_raw_fd();
        // SAFETY: `fd` was just released by its only owner.
        Ok(unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) })
    }
}

/// A descriptor from the ring's multishot accept (already non-blocking); its
/// peer address is unnamed.
fn unix_from_fd(
    fd: std::os::fd::OwnedFd,
) -> io::Result<(mio::net::UnixStream, std::os::unix::net::SocketAddr)> {
    let s = std::os::unix::net::UnixStream::from(fd);
    let s = mio::net::UnixStream::from_std(s);
    let addr = s.peer_addr()?;
    Ok((s, addr))
}

/// A Unix-domain stream connection.
pub struct UnixStream {
    io: Evented<mio::net::UnixStream>,
}

impl UnixStream {
    /// Connects to the socket at `path`.
    ///
    /// Where the listener's queue of connections not yet accepted is full
    /// (`EAGAIN`), it tries again after a pause (1 ms, doubling up to
    /// 64 ms), as a blocking `connect(2)` waits for room, until the
    /// listener makes room or the future is dropped (wrap it in a
    /// [`timeout`](crate::time::timeout) to bound the wait). A client that
    /// opens thousands of connections at once (a load generator) would
    /// otherwise fail past the listener's backlog.
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let path = path.as_ref();
        let mut pause = Duration::from_millis(1);
        let socket = loop {
            match mio::net::UnixStream::connect(path) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    crate::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(64));
                }
                r => break r?,
            }
        };
        let stream = UnixStream {
            io: Evented::new(socket)?,
        };
        stream.io.ready(Dir::Write).await?;
        if let Some(e) = stream.io.get_ref().take_error()? {
            return Err(e);
        }
        Ok(stream)
    }

    /// Wraps a connected std socket (set non-blocking here) on the current loop.
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        stream.set_nonblocking(true)?;
        Ok(UnixStream {
            io: Evented::new(mio::net::UnixStream::from_std(stream))?,
        })
    }

    /// A connected pair.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }
}

stream_methods!(UnixStream);
