//! TCP sockets.

use super::evented::{accept_with, stream_methods, Backoff, Evented};
use std::io;
use std::net::SocketAddr;

/// A TCP listening socket.
pub struct TcpListener {
    io: Evented<mio::net::TcpListener>,
    backoff: Backoff,
}

impl TcpListener {
    /// Binds (with `SO_REUSEADDR` and a backlog of 4096) on the current loop.
    pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
        let domain = socket2::Domain::for_address(addr);
        let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(4096)?;
        TcpListener::from_std(socket.into())
    }

    /// Wraps a bound, listening std socket (set non-blocking here).
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        listener.set_nonblocking(true)?;
        Ok(TcpListener {
            io: Evented::new(mio::net::TcpListener::from_std(listener))?,
            backoff: Backoff::default(),
        })
    }

    /// Waits for a connection; the stream is registered with the current loop.
    ///
    /// Out of descriptors (`EMFILE`) comes back as an error, and the next call
    /// first waits [`super::ACCEPT_BACKOFF`], so a retry loop never spins.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (s, addr) = accept_with(&self.io, &self.backoff, |l| l.accept(), tcp_from_fd).await?;
        Ok((
            TcpStream {
                io: Evented::new(s)?,
            },
            addr,
        ))
    }

    /// Like [`accept`](Self::accept), but returns a std socket (non-blocking,
    /// not registered anywhere), to hand to another loop or thread.
    pub async fn accept_std(&self) -> io::Result<(std::net::TcpStream, SocketAddr)> {
        let (s, addr) = accept_with(&self.io, &self.backoff, |l| l.accept(), tcp_from_fd).await?;
        // SAFETY-free conversion: mio's stream owns the fd; move it into std.
        Ok((mio_to_std_tcp(s), addr))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }
}

/// A descriptor from the ring's multishot accept (already non-blocking).
fn tcp_from_fd(fd: std::os::fd::OwnedFd) -> io::Result<(mio::net::TcpStream, SocketAddr)> {
    let s = std::net::TcpStream::from(fd);
    let addr = s.peer_addr()?;
    Ok((mio::net::TcpStream::from_std(s), addr))
}

fn mio_to_std_tcp(s: mio::net::TcpStream) -> std::net::TcpStream {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let fd = s.into_raw_fd();
    // SAFETY: `fd` was just released by its only owner.
    unsafe { std::net::TcpStream::from_raw_fd(fd) }
}

/// A TCP connection.
pub struct TcpStream {
    io: Evented<mio::net::TcpStream>,
}

impl TcpStream {
    /// Connects to `addr` without blocking the loop.
    pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
        let stream = TcpStream {
            io: Evented::new(mio::net::TcpStream::connect(addr)?)?,
        };
        // The readiness word starts optimistic (writable), so the first look
        // may come before the handshake ends: "not connected" then means "in
        // progress" and waits for the handshake's writable or error event. A
        // second "not connected" within one poll means the socket reported
        // ready without connecting: that is final.
        std::future::poll_fn(|cx| {
            let mut looks = 0;
            stream.io.poll_write_with(cx, |s| {
                looks += 1;
                if let Some(e) = s.take_error()? {
                    return Err(e);
                }
                match s.peer_addr() {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::NotConnected && looks == 1 => {
                        Err(io::ErrorKind::WouldBlock.into())
                    }
                    Err(e) => Err(e),
                }
            })
        })
        .await?;
        Ok(stream)
    }

    /// Wraps a connected std socket (set non-blocking here) on the current loop.
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        stream.set_nonblocking(true)?;
        Ok(TcpStream {
            io: Evented::new(mio::net::TcpStream::from_std(stream))?,
        })
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.io.get_ref().set_nodelay(on)
    }

    /// Reads `TCP_NODELAY`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.io.get_ref().nodelay()
    }

    /// Sets `SO_LINGER` (`Some(0)` makes `drop` send a reset).
    pub fn set_linger(&self, linger: Option<std::time::Duration>) -> io::Result<()> {
        socket2::SockRef::from(self.io.get_ref()).set_linger(linger)
    }
}

stream_methods!(TcpStream);

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("local", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .finish()
    }
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("local", &self.local_addr().ok())
            .finish()
    }
}
