//! The io_uring backend: completions instead of readiness, batched per turn.
//!
//! Chosen at start-up ([`IoBackend::Uring`](crate::IoBackend)); every loop
//! then owns one ring, and the thread-style sockets of `net` keep their API:
//!
//! * **Receiving**: a connection that waits to read arms one multishot
//!   `RECV` that takes buffers from the loop's provided-buffer ring only when
//!   data arrives, so an idle connection holds no buffer. Each completion is
//!   copied into the connection's small receive queue and its buffer goes
//!   straight back to the ring; a reader takes bytes from the queue without a
//!   system call. A receive takes at most the room left under
//!   [`RX_LIMIT`] and then ends (where the kernel takes a total per
//!   multishot receive, Linux 6.17; before, a queue that grows past the
//!   limit cancels it), so a client that sends and never reads the
//!   answers holds bounded memory; the reader's catching up arms the next
//!   one. Out of buffers
//!   (`ENOBUFS`), the receive ends and is re-armed on the next turn: busy
//!   connections beyond the buffer count wait, they never fail. A read of
//!   [`DIRECT_MIN`] bytes or more (a large value arriving) stops the
//!   receive and, once what it queued is read, reads with `recv` straight
//!   into the reader's buffer, waiting on one-shot polls, as epoll does:
//!   one copy instead of three; the connection goes back to the ring after
//!   [`DIRECT_STICKY`] smaller reads.
//! * **Sending**: a write copies into the connection's send queue and
//!   returns; the loop submits one `SEND` per connection per turn (the rest
//!   of a short send is resubmitted), so a write costs no system call of its
//!   own. More than [`TX_LIMIT`] queued bytes make the writer wait: a client
//!   that never reads blocks its writer exactly as a full socket buffer does.
//!   A shared body (`write_vec_shared`: a response head and a cached file's
//!   bytes behind an `Arc`) is not copied: it becomes the queue's tail, sent
//!   with the queue by one `SENDMSG` whose message, iovecs and `Arc`s the
//!   operation owns until its completion; a caller's buffer of more than
//!   [`MOVE_MIN`] bytes written to a connection with nothing queued joins
//!   the tail the same way, moved rather than copied.
//! * **Accepting**: a multishot `ACCEPT` fills a bounded queue of accepted
//!   descriptors while someone accepts; for a second after an accept ran
//!   out of descriptors, single-shot ones take one at a time
//!   ([`PACED_ACCEPT`]).
//! * **Everything else** (connect, `writable`, `sendfile`'s readiness) is a
//!   one-shot `POLL_ADD`, the ring's equivalent of an epoll wait.
//!
//! One `io_uring_enter` per loop turn at most: it submits everything the
//! turn queued and, when the loop has nothing to run, sleeps in the same
//! call. A zero-timeout turn with nothing to submit and no completion work
//! pending in the kernel makes no system call: completions already in the
//! queue are read from shared memory.
//!
//! Threads: only the loop's thread touches its ring. Any thread may use a
//! socket; what the socket needs from the ring is recorded in its state
//! (under its own mutex) and the socket is put on its loop's `dirty` list,
//! which the loop turns into submissions at the start of each reactor poll.
//! The list's mutex orders a producer's push before its look at the loop's
//! sleep flag, so a sleeping loop is always woken (through the eventfd, which
//! a multishot poll watches) and a loop that is awake never is.
//!
//! Memory safety (cancellation): a buffer the kernel may write (the provided
//! buffers) or read (a `SEND`'s or `SENDMSG`'s bytes) belongs to the
//! reactor, not to any future, until its completion arrives; dropping a read
//! or write future only drops the caller's interest. A dropped socket cancels
//! its armed operations in the ring, keeps its queued bytes going out (for at
//! most [`CLOSE_LINGER`]), and its descriptor is closed only after the last
//! completion, so a reused descriptor number never receives an old request.
//! A file read's buffer is its operation's until the completion; a dropped
//! read future puts the read on its loop's `abandoned` list (the same kind
//! of list), and the loop cancels it in the ring.
//!
//! One file per mechanism:
//!
//! | file | what it holds |
//! |---|---|
//! | `probe` | whether io_uring can be used here, what the kernel supports |
//! | `reactor` | the per-loop ring ([`UringReactor`]): submissions, the turn, completions |
//! | `socket` | one socket's state ([`Io`]): receive and send queues, readiness, accepting |
//! | `bufring` | the provided-buffer ring receives take their buffers from |
//! | `file` | where a file read's result waits for its future ([`FileRead`]) |
//! | `dirty` | the lists other threads hand the loop work through ([`DirtyList`]) |
//! | `watch` | finding receives and accepts the kernel failed to complete |
//! | `queue` | a socket's receive or send queue, in one pointer ([`Queue`]) |
//! | `spare` | each thread's spare receive and send buffers |

use crate::event_loop::registry;
use crate::gen_table::GenTable;
use crate::loom::lock_std;
use crate::net::SharedBytes;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::num::NonZeroU64;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

mod bufring;
mod dirty;
mod file;
mod probe;
mod queue;
mod reactor;
mod socket;
mod spare;
mod watch;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;

// One file per mechanism; the items they share are visible across them
// (as in the one module they were), and these names are the backend's API.
use self::{bufring::*, dirty::*, file::*, probe::*, queue::*, socket::*, spare::*, watch::*};
pub(crate) use self::{
    file::FileRead,
    probe::unavailable,
    reactor::UringReactor,
    socket::{Io, UringShared},
};

/// Reads of at least this many bytes with nothing received queued go
/// straight to `recv` (see `Io::try_read`): a large value is copied once,
/// by the kernel, into where it goes.
const DIRECT_MIN: usize = 32 * 1024;

/// Reads of less that stay direct after a large one (see `Io::try_read`).
const DIRECT_STICKY: u8 = 16;

/// Unread received bytes above which a connection stops receiving.
pub(crate) const RX_LIMIT: usize = 64 * 1024;
/// Queued unsent bytes above which a writer waits.
pub(crate) const TX_LIMIT: usize = 64 * 1024;
/// How long a dropped socket may keep sending what was queued before it.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(5);
/// How long a loop that is shutting down waits for such bytes: a client
/// that reads gets them in milliseconds, and one that does not must not
/// hold the process (every loop waits at once, see `LoopThread::stop`).
const SHUTDOWN_LINGER: Duration = Duration::from_secs(1);
/// Accepted connections queued before the multishot accept is paused.
const ACCEPT_QUEUE: usize = 256;
/// How long a listener accepts one connection at a time after an accept
/// ran out of descriptors. A multishot accept takes the whole backlog as
/// fast as the kernel can, so at the descriptor limit it refills the table
/// as fast as refusals empty it, and admitted connections cannot open a
/// file; one at a time, the acceptor's own pace (as under epoll) leaves
/// room for both.
const PACED_ACCEPT: Duration = Duration::from_secs(1);
/// A write of more than this many bytes to a socket with nothing queued is
/// not copied into its send queue: the caller's buffer moves into the
/// queue's shared tail (see [`Io::poll_write_vec`]).
pub(super) const MOVE_MIN: usize = 4 * 1024;

/// `St::tx_busy` for a send of `buf`.
fn in_flight(buf: &[u8]) -> u32 {
    u32::try_from(buf.len()).unwrap_or(u32::MAX)
}

const BUF_GROUP: u16 = 0;

const WAKE: u64 = u64::MAX - 1;
const IGNORE: u64 = u64::MAX;

const READABLE: u8 = 1;
const WRITABLE: u8 = 2;

/// Ring settings (see `LoopConfig`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingConfig {
    pub(crate) entries: u32,
    pub(crate) buffers: u16,
    pub(crate) buffer_size: u32,
    /// How long a receive may stay silent on a readable socket before it is
    /// restarted, and the first interval of its checks ([`Watch`]).
    pub(crate) quiet: Duration,
    /// How long a dropped socket may keep sending what was queued before
    /// it ([`CLOSE_LINGER`] for loops).
    pub(crate) linger: Duration,
    /// Bound each multishot receive to the room left under [`RX_LIMIT`]
    /// where the kernel can ([`recv_limit_supported`]); false: only the
    /// cancel past the limit bounds it (older kernels' way, kept testable).
    pub(crate) recv_limit: bool,
}

/// [`RingConfig::quiet`] for loops: a healthy receive on a readable socket
/// completes within microseconds.
pub(crate) const QUIET: Duration = Duration::from_secs(1);
