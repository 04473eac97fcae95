//! Thread-style sockets: `accept().await`, `read(..).await`, `write_all(..).await`.
//!
//! A would-block never blocks the OS thread: the task waits for readiness from
//! its loop's reactor and the loop runs other tasks meanwhile. Each socket is
//! registered with the loop of the thread that created it; it may be used (and
//! dropped) from any thread afterwards, its readiness events still arrive
//! through that loop. So a socket must not outlive its loop's running:
//! once that loop has stopped, an operation that has to wait for the socket
//! never completes (one whose bytes are already there may).
//!
//! On an io_uring loop a dropped socket is closed by the loop once the
//! kernel has given back its last operation, a turn or so later (a listener
//! dropped and bound again at once can find its address still in use, and a
//! client connecting meanwhile is accepted, then cut off); on epoll it is
//! closed at once.
//!
//! One task may read and one may write a socket at a time (each direction
//! keeps one waker).
//!
//! The `futures-io` `AsyncRead`/`AsyncWrite` traits are implemented, so crates
//! of the wider ecosystem work on these types.

mod evented;
mod shared;
mod tcp;
mod unix;

pub use shared::SharedBytes;
pub use tcp::{TcpListener, TcpStream};
pub use unix::{UnixListener, UnixStream};

use std::io;
use std::time::Duration;

/// How long `accept` backs off after the process ran out of descriptors or
/// memory, so a full descriptor table never turns the accept loop into a spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Whether the kernel holds bytes the peer sent on `sock` (a `recv` with
/// `MSG_PEEK | MSG_DONTWAIT` of one byte; the end of the stream or an error
/// is not input). Any socket, blocking or not.
pub fn peek_pending(sock: socket2::SockRef<'_>) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    matches!(
        sock.recv_with_flags(&mut byte, libc::MSG_PEEK | libc::MSG_DONTWAIT),
        Ok(n) if n > 0
    )
}

/// Blocks the thread until `sock` can take more bytes, at most `timeout`
/// (`None`: no limit); false if it timed out. `poll(2)` reports room as
/// epoll does (enough of it, not a byte), so a thread that drives a
/// blocking socket with non-blocking calls waits as an event loop would.
pub fn wait_writable(
    sock: std::os::fd::BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let ms = timeout.map_or(-1, |t| {
        // Rounded up: a wait of 0.4 ms is not a wait of none.
        i32::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
    });
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    loop {
        // SAFETY: one `pollfd` on the stack; the descriptor is `sock`'s,
        // open for the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Errors that mean "out of a resource": retrying at once cannot succeed.
pub fn is_resource_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    )
}

/// Errors from `accept` that concern only one aborted connection. An
/// io_uring accept of a connection the client reset while it waited in the
/// backlog answers `ENOTCONN` (accept4(2) hands such a socket over).
fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED) | Some(libc::EPROTO) | Some(libc::EINTR) | Some(libc::ENOTCONN)
    )
}
