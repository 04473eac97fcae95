//! The OS interface a loop uses for I/O, chosen at start-up: readiness
//! through epoll (`reactor`) or completions through io_uring (`uring`).

use crate::reactor::{Reactor, ReactorShared};
use crate::uring::{RingConfig, UringReactor, UringShared};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

/// Which OS interface event loops use for I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoBackend {
    /// Readiness from epoll (edge-triggered), then a system call per read and write.
    Epoll,
    /// io_uring: multishot receives into provided buffers, sends and accepts
    /// submitted in one `io_uring_enter` per loop turn. Falls back to epoll,
    /// with one log line, where the kernel refuses io_uring.
    Uring,
}

impl IoBackend {
    /// The flag value (`epoll`, `uring`).
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Epoll => "epoll",
            IoBackend::Uring => "uring",
        }
    }
}

impl std::fmt::Display for IoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for IoBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<IoBackend, String> {
        match s {
            "epoll" => Ok(IoBackend::Epoll),
            "uring" | "io_uring" | "io-uring" => Ok(IoBackend::Uring),
            other => Err(format!("unknown I/O backend {other:?} (epoll or uring)")),
        }
    }
}

/// 0: not set yet (read `DUALITY_IO` on first use); 1: epoll; 2: uring.
static DEFAULT: AtomicU8 = AtomicU8::new(0);

/// The backend `LoopConfig::default()` picks: what
/// [`set_default_io_backend`] set, else the `DUALITY_IO` environment
/// variable (`epoll` or `uring`), else io_uring (measured faster here for
/// the cache and the web server's small files; see the README), which falls
/// back to epoll where the kernel refuses it.
pub fn default_io_backend() -> IoBackend {
    match DEFAULT.load(Ordering::Relaxed) {
        1 => IoBackend::Epoll,
        2 => IoBackend::Uring,
        _ => {
            let b = match std::env::var("DUALITY_IO") {
                Ok(v) => v.parse().unwrap_or_else(|_| {
                    crate::say!("DUALITY_IO={v:?}: give epoll or uring; using uring");
                    IoBackend::Uring
                }),
                Err(_) => IoBackend::Uring,
            };
            set_default_io_backend(b);
            b
        }
    }
}

/// Sets the backend of loops created from now on with default settings
/// (a server's `--io` flag).
pub fn set_default_io_backend(b: IoBackend) {
    DEFAULT.store(
        match b {
            IoBackend::Epoll => 1,
            IoBackend::Uring => 2,
        },
        Ordering::Relaxed,
    );
}

/// Why io_uring cannot be used in this process, or `None` if it can.
pub fn uring_unavailable() -> Option<&'static str> {
    crate::uring::unavailable()
}

/// The backend loops created now with default settings will really use:
/// [`default_io_backend`], with io_uring read as epoll where the kernel
/// refuses it (the loops' fallback).
pub fn io_backend_in_use() -> IoBackend {
    match default_io_backend() {
        IoBackend::Uring if uring_unavailable().is_some() => IoBackend::Epoll,
        b => b,
    }
}

/// What a loop's thread polls.
pub(crate) enum Backend {
    Epoll(Reactor),
    Uring(Box<UringReactor>),
}

/// What an I/O object registers with.
#[derive(Clone)]
pub(crate) enum BackendRef {
    Epoll(Arc<ReactorShared>),
    Uring(Arc<UringShared>),
}

impl Backend {
    /// The loop's backend; io_uring falls back to epoll (one log line per
    /// process) where the kernel refuses it.
    pub(crate) fn new(
        want: IoBackend,
        events: usize,
        ring: RingConfig,
        wake_fd: RawFd,
        loop_id: u16,
    ) -> io::Result<Backend> {
        if want == IoBackend::Uring {
            match UringReactor::new(ring, wake_fd, loop_id) {
                Ok(r) => return Ok(Backend::Uring(Box::new(r))),
                Err(e) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    // One line, written whether or not a tracing subscriber
                    // is installed (a warn! beside it made the binary's two).
                    SAID.call_once(|| {
                        crate::say!("duality: io_uring unavailable ({e}); using epoll");
                    });
                }
            }
        }
        Ok(Backend::Epoll(Reactor::new(events, wake_fd)?))
    }

    pub(crate) fn kind(&self) -> IoBackend {
        match self {
            Backend::Epoll(_) => IoBackend::Epoll,
            Backend::Uring(_) => IoBackend::Uring,
        }
    }

    pub(crate) fn handle(&self) -> BackendRef {
        match self {
            Backend::Epoll(r) => BackendRef::Epoll(r.handle().clone()),
            Backend::Uring(r) => BackendRef::Uring(r.handle().clone()),
        }
    }

    pub(crate) fn sources(&self) -> usize {
        match self {
            Backend::Epoll(r) => r.sources(),
            Backend::Uring(r) => r.sources(),
        }
    }

    pub(crate) fn has_no_sources(&self) -> bool {
        match self {
            Backend::Epoll(r) => r.has_no_sources(),
            Backend::Uring(r) => r.has_no_sources(),
        }
    }

    pub(crate) fn poll(&self, timeout: Option<Duration>) -> io::Result<(usize, bool)> {
        match self {
            Backend::Epoll(r) => r.poll(timeout),
            Backend::Uring(r) => r.poll(timeout),
        }
    }

    pub(crate) fn shutdown_wakers(&self, out: &mut Vec<Waker>) {
        match self {
            Backend::Epoll(r) => r.shutdown_wakers(out),
            Backend::Uring(r) => r.shutdown_wakers(out),
        }
    }
}
