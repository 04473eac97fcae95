//! Watching armed receives and accepts for completions the kernel failed
//! to make, in millisecond [`Tick`]s.

use super::*;

/// Checks of a receive that stays quiet on a socket with nothing to read
/// back off from `quiet` to `quiet << QUIET_LEVELS` (64 s): an idle
/// connection costs one `poll(2)` a minute, not one a second.
pub(super) const QUIET_LEVELS: u8 = 6;

/// What the ring knows of a multishot receive, to find one the kernel
/// failed to complete. On Linux 6.18 (seen on 6.18.44) a multishot receive
/// whose peer resets the connection just after a short read sometimes never
/// completes: nothing more will come, the reader waits for ever, and the
/// connection keeps its descriptor and buffers (a cache receiving values
/// from clients that reset: a few connections in a thousand). A receive
/// with no completion since the last look, on a socket `poll(2)` finds
/// readable (bytes, an end, an error) at two looks `quiet` apart, is
/// cancelled: its `ECANCELED` completion arms a new receive, which
/// completes at once. A healthy receive on a readable socket completes
/// within microseconds, so it is never taken for a stuck one.
///
/// The same kernel sometimes leaves a multishot accept on a Unix listener
/// armed and waiting while connections queue behind it (seen in a test
/// server of 1,000 clients, about one run in 400: 28-79 clients never
/// accepted, the ring's poll list still holding the accept). An armed
/// accept is watched the same way, every `quiet` (a server has a few
/// listeners): a cancelled one is armed again by its acceptor, and takes
/// the queue at once.
#[derive(Clone, Copy)]
pub(super) struct Watch {
    /// Completions so far, and their count at the last look.
    pub(super) seen: u32,
    pub(super) looked: u32,
    /// When to look next, in [`Tick`]s: 4 bytes where an `Instant` takes
    /// 16, so that an armed receive's `Op` stays 40 bytes (48 with an
    /// `Instant`: 8 more bytes per idle connection).
    pub(super) next: Tick,
    /// Quiet looks in a row at a socket with nothing to read.
    pub(super) level: u8,
    /// The last look found it quiet on a readable socket.
    pub(super) suspect: bool,
    /// Cancelled as stuck: the cancel's completion ends it.
    pub(super) cancelled: bool,
    /// A look found it waiting for its cancel's completion.
    pub(super) waited: bool,
}

/// A time in milliseconds since the process's first [`Tick::of`], modulo
/// 2^32 (about 49 days): compared by their difference, which is right while
/// two times compared are less than 24 days apart (the longest look is
/// `quiet << QUIET_LEVELS`, about a minute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tick(pub(super) u32);

impl Tick {
    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    pub(super) fn of(t: Instant) -> Tick {
        Tick(t.saturating_duration_since(Self::epoch()).as_millis() as u32)
    }

    /// Whether this time is at or before `t`.
    pub(super) fn by(self, t: Instant) -> bool {
        self.at_or_before(Tick::of(t))
    }

    pub(super) fn at_or_before(self, t: Tick) -> bool {
        (t.0.wrapping_sub(self.0) as i32) >= 0
    }

    /// This time as an `Instant`, read near `now`.
    pub(super) fn near(self, now: Instant) -> Instant {
        let ahead = self.0.wrapping_sub(Tick::of(now).0) as i32;
        let ms = Duration::from_millis(u64::from(ahead.unsigned_abs()));
        if ahead >= 0 {
            now + ms
        } else {
            now.checked_sub(ms).unwrap_or(now)
        }
    }
}

impl Watch {
    pub(super) fn new(next: Instant) -> Watch {
        Watch {
            seen: 0,
            looked: 0,
            next: Tick::of(next),
            level: 0,
            suspect: false,
            cancelled: false,
            waited: false,
        }
    }
}

/// Whether `fd` has something for a receive: bytes, the peer's end, an
/// error (`poll(2)`, no wait).
pub(super) fn readable_now(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one `pollfd` on the stack, a zero timeout; `fd` is a socket
    // its `Io` keeps open while its receive is in the table.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents != 0
}
