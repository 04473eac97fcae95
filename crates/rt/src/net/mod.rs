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
mod tcp;
mod unix;

pub use tcp::{TcpListener, TcpStream};
pub use unix::{UnixListener, UnixStream};

use std::io;
use std::time::Duration;

/// How long `accept` backs off after the process ran out of descriptors or
/// memory, so a full descriptor table never turns the accept loop into a spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Errors that mean "out of a resource": retrying at once cannot succeed.
pub fn is_resource_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    )
}

/// Errors from `accept` that concern only one aborted connection.
fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED) | Some(libc::EPROTO) | Some(libc::EINTR)
    )
}
