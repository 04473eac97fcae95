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
//!   bytes behind an `Arc`) written to an idle connection is not copied: the
//!   head becomes the queue and the body its tail, sent together by one
//!   `SENDMSG` of two iovecs whose message and `Arc` the operation owns
//!   until its completion.
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
/// `St::tx_busy` for a send of `buf`.
fn in_flight(buf: &[u8]) -> u32 {
    u32::try_from(buf.len()).unwrap_or(u32::MAX)
}

/// Spare buffers a thread keeps, of each kind.
const SPARES: usize = 64;

/// The two kinds of spare buffer, kept apart: a receive queue holds one
/// request (often under 100 bytes), a send buffer one or more responses, and
/// a response written into a drained receive queue would grow it again.
#[derive(Clone, Copy)]
enum Spare {
    /// Drained receive queues, kept up to 512 bytes of capacity.
    Rx = 0,
    /// Buffers whose sends completed, kept up to 1 KiB.
    Tx = 1,
}

impl Spare {
    /// The largest capacity kept.
    fn keep(self) -> usize {
        match self {
            Spare::Rx => 512,
            Spare::Tx => 1024,
        }
    }
}

thread_local! {
    /// Small receive queues drained by their readers and send buffers whose
    /// sends completed, for the next socket that receives or sends on this
    /// thread: a socket holds a buffer only while it has bytes queued, so an
    /// idle connection holds none.
    static SPARE: RefCell<[Vec<Vec<u8>>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

/// An empty buffer: a spare one of `kind` if this thread has one.
fn spare_buf(kind: Spare) -> Vec<u8> {
    SPARE
        .with(|s| s.borrow_mut()[kind as usize].pop())
        .unwrap_or_default()
}

/// A caller's buffer that the send queue took, replaced by its empty queue
/// (no capacity once its last send completed), gets a spare send buffer
/// instead: else the next response grows it from nothing again, five
/// reallocations for a 300-byte head.
fn give_spare(buf: &mut Vec<u8>) {
    if buf.capacity() == 0 {
        *buf = spare_buf(Spare::Tx);
    }
}

/// Keeps `buf` as a spare of `kind` if its capacity is at most what that
/// kind keeps (else frees it).
fn keep_buf(mut buf: Vec<u8>, kind: Spare) {
    if buf.capacity() > 0 && buf.capacity() <= kind.keep() {
        buf.clear();
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            let s = &mut s[kind as usize];
            if s.len() < SPARES {
                s.push(buf);
            }
        });
    }
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

/// Checks of a receive that stays quiet on a socket with nothing to read
/// back off from `quiet` to `quiet << QUIET_LEVELS` (64 s): an idle
/// connection costs one `poll(2)` a minute, not one a second.
const QUIET_LEVELS: u8 = 6;

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
struct Watch {
    /// Completions so far, and their count at the last look.
    seen: u32,
    looked: u32,
    /// When to look next, in [`Tick`]s: 4 bytes where an `Instant` takes
    /// 16, so that an armed receive's `Op` stays 40 bytes (48 with an
    /// `Instant`: 8 more bytes per idle connection).
    next: Tick,
    /// Quiet looks in a row at a socket with nothing to read.
    level: u8,
    /// The last look found it quiet on a readable socket.
    suspect: bool,
    /// Cancelled as stuck: the cancel's completion ends it.
    cancelled: bool,
    /// A look found it waiting for its cancel's completion.
    waited: bool,
}

/// A time in milliseconds since the process's first [`Tick::of`], modulo
/// 2^32 (about 49 days): compared by their difference, which is right while
/// two times compared are less than 24 days apart (the longest look is
/// `quiet << QUIET_LEVELS`, about a minute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tick(u32);

impl Tick {
    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    fn of(t: Instant) -> Tick {
        Tick(t.saturating_duration_since(Self::epoch()).as_millis() as u32)
    }

    /// Whether this time is at or before `t`.
    fn by(self, t: Instant) -> bool {
        self.at_or_before(Tick::of(t))
    }

    fn at_or_before(self, t: Tick) -> bool {
        (t.0.wrapping_sub(self.0) as i32) >= 0
    }

    /// This time as an `Instant`, read near `now`.
    fn near(self, now: Instant) -> Instant {
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
    fn new(next: Instant) -> Watch {
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
fn readable_now(fd: RawFd) -> bool {
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

/// Rings run completion work cooperatively (`COOP_TASKRUN`) instead of
/// deferred where `DUALITY_URING_COOP` is set: the earlier default, kept to
/// compare the two on a host.
fn cooperative_taskrun() -> bool {
    static COOP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COOP.get_or_init(|| std::env::var_os("DUALITY_URING_COOP").is_some())
}

/// Runs a probe that creates a ring on a short-lived thread of its own.
/// The kernel ties a ring to the thread that created or submitted to it:
/// tearing the ring down sends that thread task work with a notification
/// signal, which interrupts its next blocking socket wait that has a
/// timeout (`EINTR`; a test's client read failed so). A probe must not
/// leave that to whichever thread asked first (a server's builder, a
/// caller's own thread). Where no thread can be started, runs here.
fn on_own_thread<T: Send + 'static>(f: fn() -> T) -> T {
    match std::thread::Builder::new()
        .name("uring-probe".into())
        .spawn(f)
    {
        Ok(t) => t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
        Err(_) => f(),
    }
}

/// Why a process cannot use io_uring here, if it cannot (probed once, on
/// a thread of its own: [`on_own_thread`]).
pub(crate) fn unavailable() -> Option<&'static str> {
    static PROBE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            if std::env::var_os("DUALITY_URING_REFUSE").is_some() {
                return Some("refused by DUALITY_URING_REFUSE".into());
            }
            on_own_thread(probe_ring)
        })
        .as_deref()
}

/// What [`unavailable`] says, probed on the calling thread.
fn probe_ring() -> Option<String> {
    match IoUring::new(8) {
        Err(e) => Some(format!("the kernel refused a ring: {e}")),
        Ok(ring) => {
            let mut probe = io_uring::Probe::new();
            if let Err(e) = ring.submitter().register_probe(&mut probe) {
                return Some(format!("cannot probe opcodes: {e}"));
            }
            let needed = [
                opcode::RecvMulti::CODE,
                opcode::Send::CODE,
                opcode::SendMsg::CODE,
                opcode::AcceptMulti::CODE,
                opcode::PollAdd::CODE,
                opcode::AsyncCancel::CODE,
            ];
            if needed.iter().any(|&c| !probe.is_supported(c)) {
                return Some("the kernel lacks an opcode the backend needs".into());
            }
            if !ring.params().is_feature_ext_arg() {
                return Some("the kernel lacks IORING_FEAT_EXT_ARG".into());
            }
            // Every receive needs the provided-buffer ring: a loop that
            // could not register one would fail its reads, so refuse here.
            if let Err(e) = BufRing::probe(&ring) {
                return Some(format!("cannot register a provided-buffer ring: {e}"));
            }
            None
        }
    }
}

/// Whether the kernel ends a multishot receive by itself after a total
/// number of bytes (`sqe->optlen`, Linux 6.17). With it a receive never
/// takes more than its connection's queue has room for; without it, a
/// receive that ran ahead is cancelled, and until the cancel is in, the
/// kernel goes on receiving (in 32-buffer bursts: over 128 KiB). Probed
/// once, on a socket pair with a byte waiting and no buffer group: a kernel
/// that knows the field answers `ENOBUFS`, an older one refuses it
/// (`EINVAL`: the same bytes were `file_index`, which receives reject).
/// On a thread of its own ([`on_own_thread`]).
fn recv_limit_supported() -> bool {
    static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| on_own_thread(probe_recv_limit))
}

/// What [`recv_limit_supported`] says, probed on the calling thread.
fn probe_recv_limit() -> bool {
    let probe = || -> io::Result<Option<i32>> {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let mut ring = IoUring::new(2)?;
        let (a, mut b) = std::os::unix::net::UnixStream::pair()?;
        b.write_all(b"x")?;
        let sqe = with_total_limit(
            opcode::RecvMulti::new(types::Fd(a.as_raw_fd()), BUF_GROUP)
                .build()
                .user_data(1),
            1,
        );
        // SAFETY: the entry carries no pointer (a provided-buffer
        // receive); the socket outlives the ring, dropped first below.
        unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
        let ts = types::Timespec::new().sec(1);
        let args = types::SubmitArgs::new().timespec(&ts);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) => return Err(e),
        }
        let res = ring.completion().next().map(|c| c.result());
        drop(ring);
        Ok(res)
    };
    matches!(probe(), Ok(Some(r)) if r != -libc::EINVAL)
}

/// `sqe` with its `optlen` set: for a multishot receive, the most bytes it
/// takes in all before it ends (0: no limit).
fn with_total_limit(mut sqe: squeue::Entry, limit: u32) -> squeue::Entry {
    const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);
    // SAFETY: `squeue::Entry` is `#[repr(C)]` around the kernel's 64-byte
    // `struct io_uring_sqe` (checked above), whose bytes 44..48 are the
    // `u32 optlen` of its fifth union in the stable uapi layout; this
    // writes that plain integer, unaligned-safe, inside the entry.
    unsafe {
        (&mut sqe as *mut squeue::Entry)
            .cast::<u8>()
            .add(44)
            .cast::<u32>()
            .write_unaligned(limit);
    }
    sqe
}

/// Items that need the loop's attention: any thread marks one, the loop
/// takes them all at the start of its reactor poll. An item's `queued` flag
/// keeps it on the list once; the loop clears the flag before it looks at
/// the item's state (under the item's own lock), so a change made after the
/// look always finds the flag clear and is listed again. A producer that
/// listed an item then wakes the loop through its sleep gate: the list's
/// mutex orders the push before the gate's check, and the loop sets the gate
/// before it takes the list, so a sleeping loop is always woken and an awake
/// one never is. Model-checked in `loom_tests` below.
///
/// Once its loop has ended ([`end`](Self::end)) nothing is listed any more:
/// an item listed then would never be taken, and a socket on the list keeps
/// its loop's shared part alive while that keeps the list: neither would
/// ever be dropped, nor the socket's descriptor closed.
pub(crate) struct DirtyList<T> {
    /// `None` once the loop has ended.
    items: crate::loom::Mutex<Option<Vec<T>>>,
}

impl<T> DirtyList<T> {
    pub(crate) fn new() -> DirtyList<T> {
        DirtyList {
            items: crate::loom::Mutex::new(Some(Vec::new())),
        }
    }

    /// Lists `item()` unless `queued` says it is listed or the loop has
    /// ended; true if it was listed now (the caller then notifies the loop).
    pub(crate) fn mark(&self, queued: &crate::loom::AtomicBool, item: impl FnOnce() -> T) -> bool {
        if queued.swap(true, Ordering::AcqRel) {
            return false;
        }
        match crate::loom::lock(&self.items).as_mut() {
            Some(items) => {
                items.push(item());
                true
            }
            None => false,
        }
    }

    /// Everything listed so far (the loop clears each item's flag first thing).
    pub(crate) fn take(&self) -> Vec<T> {
        crate::loom::lock(&self.items)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The loop has ended: what was listed, and nothing is listed from now on.
    pub(crate) fn end(&self) -> Vec<T> {
        crate::loom::lock(&self.items).take().unwrap_or_default()
    }
}

/// The part of a loop's ring other threads reach: sockets that need a
/// submission, and file reads whose futures were dropped in flight.
pub(crate) struct UringShared {
    loop_id: u16,
    dirty: DirtyList<Arc<Io>>,
    abandoned: DirtyList<Arc<FileRead>>,
    live: AtomicUsize,
}

/// One socket's state on the ring.
pub(crate) struct Io {
    fd: RawFd,
    shared: Arc<UringShared>,
    queued: crate::loom::AtomicBool,
    st: Mutex<St>,
}

#[derive(Default)]
struct St {
    // Receiving.
    rx: Vec<u8>,
    /// Bytes of `rx` the reader has taken. 32 bits (every connection holds
    /// an `St`): `rx` stays near `RX_LIMIT`, receiving stops past it.
    rx_pos: u32,
    rx_eof: bool,
    want_recv: bool,
    recv: Option<NonZeroU64>,
    recv_cancelled: bool,
    reader: Option<Waker>,
    // Sending.
    tx: Vec<u8>,
    /// Shared bytes queued after `tx` (cached file bodies, cache values):
    /// sent from where they lie, in one gather send with `tx`, never
    /// copied. Boxed: idle connections (most of them) pay one pointer.
    tx_tail: Option<Box<Tail>>,
    /// Bytes of the send in flight (0: none; capped at `u32::MAX`): what
    /// [`TX_LIMIT`] counts until it completes (its buffer is held whole;
    /// what short sends of it gave the kernel is `Cold::tx_sent`).
    tx_busy: u32,
    tx_err: Option<io::ErrorKind>,
    writer: Option<Waker>,
    shutdown_after_tx: Option<std::net::Shutdown>,
    /// One-shot readiness and accepting, made on first use: most sockets
    /// only receive and send (every connection has an `St`, and idle ones
    /// are many).
    cold: Option<Box<Cold>>,
    // The handle was dropped.
    closed: bool,
    lingering: bool,
    /// What is still to send is dropped at the close, not lingered over.
    discard: bool,
}

/// Most shared bodies one gather send carries (a pipeline of large cache
/// values, of cached files): a writer past it waits for the send.
const TAIL_PARTS: usize = 16;

/// Shared bytes queued to send, in order: each part's body, then the bytes
/// written behind it before it went (the end of its response, the next
/// responses), so that nothing written later makes a body a copy.
struct Tail {
    parts: Vec<TailPart>,
}

struct TailPart {
    body: SharedBytes,
    start: usize,
    end: usize,
    after: Vec<u8>,
}

impl TailPart {
    fn bytes(&self) -> &[u8] {
        &self.body[self.start..self.end]
    }
}

impl Tail {
    fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.end - p.start + p.after.len())
            .sum()
    }

    /// Bytes copied into it (the parts' `after`s), as opposed to shared.
    fn copied(&self) -> usize {
        self.parts.iter().map(|p| p.after.len()).sum()
    }

    /// Drops the first `sent` bytes (a short send's).
    fn advance(&mut self, mut sent: usize) {
        let mut done = 0;
        for p in &mut self.parts {
            let body = p.end - p.start;
            if sent < body {
                p.start += sent;
                break;
            }
            sent -= body;
            p.start = p.end;
            if sent < p.after.len() {
                p.after.drain(..sent);
                break;
            }
            sent -= p.after.len();
            done += 1;
        }
        self.parts.drain(..done);
    }
}

/// A gather send in flight: the queued bytes and the shared tail after
/// them, and the message that points at all of them (stable in this box
/// until the completion).
struct GatherSend {
    head: Vec<u8>,
    tail: Box<Tail>,
    iov: [libc::iovec; 1 + 2 * TAIL_PARTS],
    msg: libc::msghdr,
}

/// Delays before a poll that completed without its direction is armed
/// again: io_uring completes every poll on `POLLRDHUP`, so once the peer has
/// half-closed, a wait for writability completes at once for as long as its
/// send buffer stays full. 1 ms doubling to 512 ms: a half-closed peer that
/// reads on is served with short pauses, one that stops costs about two
/// wake-ups a second until the write timeout, not a spin.
static POLL_RETRY: [types::Timespec; 10] = [
    retry_ms(1),
    retry_ms(2),
    retry_ms(4),
    retry_ms(8),
    retry_ms(16),
    retry_ms(32),
    retry_ms(64),
    retry_ms(128),
    retry_ms(256),
    retry_ms(512),
];

const fn retry_ms(ms: u32) -> types::Timespec {
    types::Timespec::new().nsec(ms * 1_000_000)
}

/// The part of a socket's state few sockets use.
struct Cold {
    /// Reads left in direct mode (see `Io::try_read`; 0: the ring's
    /// receive). Here: only sockets that receive large values use it.
    direct: u8,
    // One-shot readiness (direct system calls, such as `sendfile`).
    ready: u8,
    ready_tick: u64,
    want_poll: u8,
    polls: [Option<NonZeroU64>; 2],
    /// Per direction: how many polls in a row completed without it (see
    /// [`POLL_RETRY`]), the delay armed before the next one, and whether
    /// that delay has run (the next poll goes in at once).
    backoff: [u8; 2],
    delays: [Option<NonZeroU64>; 2],
    delayed: u8,
    // Accepting: listeners only.
    acc: Accepting,
    /// Bytes that arrived while `rx` already held `RX_LIMIT` unread, one
    /// chunk per completion, and their total. The kernel fills up to the
    /// whole buffer ring in one turn, before the cancel of a receive that is
    /// too far ahead of its reader takes effect; kept in `rx` that overshoot
    /// would double its capacity (and leave the old block to the allocator),
    /// kept here it costs what it holds and is freed as it is read.
    rx_over: VecDeque<Box<[u8]>>,
    rx_over_len: usize,
    /// A receive error, for the reader (rare: kept out of line).
    rx_err: Option<io::Error>,
    /// Bytes of the send in flight that short sends already gave the
    /// kernel (for `Io::unsent`; only large sends are short).
    tx_sent: usize,
    /// Sends in a row the kernel gave back with `EAGAIN` (see
    /// [`UringReactor::resend`]): the next goes after `POLL_RETRY` of it.
    resends: u8,
}

impl Default for Cold {
    fn default() -> Cold {
        Cold {
            direct: 0,
            // Optimistic, as the epoll backend: try first, wait on WouldBlock.
            ready: WRITABLE,
            ready_tick: 0,
            want_poll: 0,
            polls: [None; 2],
            backoff: [0; 2],
            delays: [None; 2],
            delayed: 0,
            acc: Accepting::default(),
            rx_over: VecDeque::new(),
            rx_over_len: 0,
            rx_err: None,
            tx_sent: 0,
            resends: 0,
        }
    }
}

/// A listener's accept state.
#[derive(Default)]
struct Accepting {
    want: bool,
    /// The accept in flight (multishot, or single-shot while paced).
    armed: Option<u64>,
    accepted: VecDeque<OwnedFd>,
    err: Option<io::Error>,
    /// Until when accepts are single-shot (see [`PACED_ACCEPT`]).
    paced_until: Option<Instant>,
}

impl Accepting {
    /// Whether an accept should be armed, and if so whether one at a time.
    fn arm_next(&mut self) -> Option<bool> {
        if !self.want || self.armed.is_some() {
            return None;
        }
        let paced = self
            .paced_until
            .is_some_and(|t| crate::time::loop_now() < t);
        if !paced {
            self.paced_until = None;
        }
        let room = if paced {
            self.accepted.is_empty()
        } else {
            self.accepted.len() < ACCEPT_QUEUE
        };
        room.then_some(paced)
    }
}

impl St {
    /// A receive error waits for the reader.
    /// The next completion for the reader wakes `cx`'s task.
    fn watch_reader(&mut self, cx: &Context<'_>) {
        if !matches!(&self.reader, Some(w) if w.will_wake(cx.waker())) {
            self.reader = Some(cx.waker().clone());
        }
    }

    /// Reads left in direct mode (see `Io::try_read`).
    fn direct(&self) -> u8 {
        self.cold.as_ref().map_or(0, |c| c.direct)
    }

    fn has_rx_err(&self) -> bool {
        self.cold.as_ref().is_some_and(|c| c.rx_err.is_some())
    }

    /// Records a receive error for the reader.
    fn set_rx_err(&mut self, e: io::Error) {
        self.cold.get_or_insert_with(Default::default).rx_err = Some(e);
    }

    /// Bytes copied into the queue (`tx` and what follows shared bodies):
    /// what [`TX_LIMIT`] bounds. Shared bodies cost the connection nothing.
    fn tx_copied(&self) -> usize {
        self.tx.len() + self.tx_tail.as_ref().map_or(0, |t| t.copied())
    }

    /// Nothing queued and nothing in flight.
    fn tx_idle(&self) -> bool {
        self.tx.is_empty() && self.tx_tail.is_none() && self.tx_busy == 0
    }

    /// Appends `bytes` to what is queued: behind the shared tail if one
    /// waits (it stays shared), else to `tx`.
    fn queue(&mut self, bytes: &[u8]) {
        match self.tx_tail.as_mut().and_then(|t| t.parts.last_mut()) {
            Some(p) => p.after.extend_from_slice(bytes),
            None => {
                if self.tx.capacity() == 0 {
                    self.tx = spare_buf(Spare::Tx);
                }
                let (len, cap) = (self.tx.len(), self.tx.capacity());
                if len + bytes.len() > cap {
                    // Doubling, but not past what the limit lets wait (a
                    // writer may always add one write to a queue under
                    // it): a client that does not read holds the limit.
                    let want = (len + bytes.len()).max((2 * cap).min(TX_LIMIT));
                    self.tx.reserve_exact(want - len);
                }
                self.tx.extend_from_slice(bytes)
            }
        }
    }

    /// Drops what is queued (the send failed).
    fn clear_tx(&mut self) {
        self.tx.clear();
        self.tx_tail = None;
    }

    /// Moves unread bytes into `buf`: `rx` first, then overflow chunks, as
    /// far as `buf` goes. A drained queue goes back to the thread's spares.
    fn take_rx(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() && self.rx.len() > self.rx_pos as usize {
            let from = self.rx_pos as usize;
            let k = (self.rx.len() - from).min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&self.rx[from..from + k]);
            n += k;
            self.rx_pos = (from + k) as u32;
            if from + k == self.rx.len() {
                let next = self.next_rx_chunk();
                keep_buf(std::mem::replace(&mut self.rx, next), Spare::Rx);
                self.rx_pos = 0;
            }
        }
        n
    }

    /// What the reader takes once `rx` is drained: the oldest overflow
    /// chunk, else an empty queue.
    fn next_rx_chunk(&mut self) -> Vec<u8> {
        let Some(cold) = self.cold.as_mut() else {
            return Vec::new();
        };
        let chunk = cold.rx_over.pop_front().map(Vec::from).unwrap_or_default();
        cold.rx_over_len -= chunk.len();
        chunk
    }

    /// Closed with its unsent bytes dropped (see `UringReactor::give_up`):
    /// a send that finds no room ends there.
    fn given_up(&self) -> bool {
        self.closed && self.discard
    }

    fn unread(&self) -> usize {
        self.rx.len() - self.rx_pos as usize + self.cold.as_ref().map_or(0, |c| c.rx_over_len)
    }

    /// Appends received bytes. What the reader has taken is dropped first
    /// once it is at least half the queue (a copy of at most as many bytes
    /// as were read): a reader that never quite catches up, such as a
    /// client pipelining without pause, must not grow the queue by every
    /// byte it ever sent.
    fn push_rx(&mut self, bytes: &[u8]) {
        let overflowing = self.cold.as_ref().is_some_and(|c| c.rx_over_len > 0);
        if overflowing || self.rx.len() - self.rx_pos as usize >= RX_LIMIT {
            let cold = self.cold.get_or_insert_with(Default::default);
            cold.rx_over.push_back(bytes.into());
            cold.rx_over_len += bytes.len();
            return;
        }
        let grows = self.rx.len() + bytes.len() > self.rx.capacity();
        if self.rx_pos > 0 && (grows || self.rx_pos as usize >= self.rx.len() / 2) {
            // Growing would copy the taken bytes too: drop them first.
            self.rx.drain(..self.rx_pos as usize);
            self.rx_pos = 0;
        }
        if self.rx.capacity() == 0 {
            self.rx = spare_buf(Spare::Rx);
        }
        let (len, cap) = (self.rx.len(), self.rx.capacity());
        if len + bytes.len() > cap {
            // Doubling, but never past what the limit lets in (unread is
            // under `RX_LIMIT` here, and one completion comes on top): a
            // connection far ahead of its reader holds the limit, not
            // twice it.
            let want = (len + bytes.len()).max((2 * cap).min(RX_LIMIT + bytes.len()));
            self.rx.reserve_exact(want - len);
        }
        self.rx.extend_from_slice(bytes);
    }
}

impl Io {
    pub(crate) fn new(fd: RawFd, shared: Arc<UringShared>) -> Arc<Io> {
        shared.live.fetch_add(1, Ordering::Relaxed);
        Arc::new(Io {
            fd,
            shared,
            queued: crate::loom::AtomicBool::new(false),
            st: Mutex::new(St::default()),
        })
    }

    /// Puts the socket on its loop's list of sockets that need submissions.
    fn schedule(self: &Arc<Self>) {
        if !self.shared.dirty.mark(&self.queued, || self.clone()) {
            return;
        }
        if let Some(shared) = registry::get(self.shared.loop_id) {
            shared.notify();
        }
    }

    // ---- receiving -------------------------------------------------------

    /// Received bytes not read yet.
    pub(crate) fn has_unread(&self) -> bool {
        lock_std(&self.st).unread() > 0
    }

    /// Ready when bytes, end of stream or an error wait; arms the receive.
    pub(crate) fn poll_readable(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = lock_std(&self.st);
        if st.unread() > 0 || st.rx_eof || st.has_rx_err() {
            return Poll::Ready(Ok(()));
        }
        if st.direct() > 0 {
            if st.recv.is_some() {
                // Being cancelled: its last completion wakes the reader
                // (with bytes, or for the one-shot poll below).
                st.watch_reader(cx);
                return Poll::Pending;
            }
            // Direct reads (see `try_read`): a one-shot poll, as epoll's.
            drop(st);
            return self.poll_ready(false, cx).map(|_| Ok(()));
        }
        self.wait_recv(&mut st, cx);
        Poll::Pending
    }

    fn wait_recv(self: &Arc<Self>, st: &mut St, cx: &mut Context<'_>) {
        st.watch_reader(cx);
        if !st.want_recv || (st.recv.is_none() && st.unread() < RX_LIMIT) {
            st.want_recv = true;
            if st.recv.is_none() {
                self.schedule();
            }
        }
    }

    pub(crate) fn poll_read(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if crate::coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        loop {
            if let Some(r) = self.try_read(cx, buf) {
                return r;
            }
            // A direct receive found nothing: wait until the socket is
            // readable (a readiness seen before is stale: look again).
            match self.poll_ready(false, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(tick) => self.clear_ready(false, tick),
            }
        }
    }

    /// [`poll_read`](Self::poll_read)'s one look: `None` when a direct
    /// receive found nothing to read.
    fn try_read(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Option<Poll<io::Result<usize>>> {
        let mut st = lock_std(&self.st);
        // A large read (a large value on its way): the ring's receive
        // stops, and once what it queued is read, `recv` reads straight
        // into `buf`, as under epoll, instead of through provided buffers
        // and the queue (two copies more). Not before: a completion of it
        // still on its way would bring bytes that come first. Waits are
        // then one-shot polls, as epoll's, and the connection stays direct
        // for `DIRECT_STICKY` reads of less after the last large one (a
        // client storing large values sends more of them: a receive armed
        // at its idle wait would take the next ones through the queue).
        let large = buf.len() >= DIRECT_MIN;
        if large {
            st.cold.get_or_insert_with(Default::default).direct = DIRECT_STICKY;
        }
        if st.direct() > 0 && st.want_recv {
            st.want_recv = false;
            if st.recv.is_some() {
                // The loop cancels it (see `plan`).
                self.schedule();
            }
        }
        if st.rx.len() > st.rx_pos as usize && !buf.is_empty() {
            let n = st.take_rx(buf);
            // Caught up after a pause for a full queue: receive again.
            if st.want_recv
                && st.recv.is_none()
                && !st.rx_eof
                && st.unread() < RX_LIMIT / 2
                && !st.has_rx_err()
            {
                self.schedule();
            }
            crate::coop::spend();
            return Some(Poll::Ready(Ok(n)));
        }
        if let Some(e) = st.cold.as_mut().and_then(|c| c.rx_err.take()) {
            crate::coop::spend();
            return Some(Poll::Ready(Err(e)));
        }
        if st.rx_eof || buf.is_empty() {
            crate::coop::spend();
            return Some(Poll::Ready(Ok(0)));
        }
        if st.direct() == 0 {
            self.wait_recv(&mut st, cx);
            return Some(Poll::Pending);
        }
        if st.recv.is_some() {
            // Its last completion wakes the reader.
            st.watch_reader(cx);
            return Some(Poll::Pending);
        }
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the call
        // does not block (`MSG_DONTWAIT`) and keeps no pointer to it.
        let n = unsafe {
            libc::recv(
                self.fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            if n == 0 {
                st.rx_eof = true;
            }
            if let Some(c) = st.cold.as_mut().filter(|_| !large) {
                c.direct -= 1;
            }
            crate::coop::spend();
            return Some(Poll::Ready(Ok(n as usize)));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            // (Interrupted: the readiness wait looks again.)
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
            _ => {
                // As the ring's receive does: a reset connection takes no
                // more bytes either, writes fail now.
                if st.tx_err.is_none() {
                    st.tx_err = Some(e.kind());
                    st.clear_tx();
                }
                if let Some(w) = st.writer.take() {
                    w.wake();
                }
                crate::coop::spend();
                Some(Poll::Ready(Err(e)))
            }
        }
    }

    // ---- sending ---------------------------------------------------------

    /// The state, for a write: after the poll's I/O budget and a send error
    /// (which every later write reports).
    fn lock_for_write(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<std::sync::MutexGuard<'_, St>>> {
        if crate::coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        let st = lock_std(&self.st);
        match st.tx_err {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(st)),
        }
    }

    pub(crate) fn poll_write(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut st = std::task::ready!(self.lock_for_write(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let queued = st.tx_copied() + st.tx_busy as usize;
        if queued >= TX_LIMIT {
            st.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = buf.len().min(TX_LIMIT - queued);
        let first = st.tx.is_empty() && st.tx_tail.is_none();
        st.queue(&buf[..n]);
        if first && st.tx_busy == 0 {
            self.schedule();
        }
        crate::coop::spend();
        Poll::Ready(Ok(n))
    }

    /// Queues all of `buf` and leaves it empty. An empty queue takes the
    /// buffer itself (no copy; `buf` gets the queue's spare back); otherwise
    /// the bytes are copied in once they fit under [`TX_LIMIT`] with what is
    /// queued and in flight (not past it: a connection whose client does
    /// not read would hold the send in flight, the limit and one answer more).
    pub(crate) fn poll_write_vec(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        buf: &mut Vec<u8>,
    ) -> Poll<io::Result<()>> {
        let mut st = std::task::ready!(self.lock_for_write(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if st.tx_idle() {
            std::mem::swap(&mut st.tx, buf);
            buf.clear();
            give_spare(buf);
            self.schedule();
        } else if st.tx_copied() + (st.tx_busy as usize) + buf.len() <= TX_LIMIT {
            st.queue(buf);
            buf.clear();
        } else {
            st.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        crate::coop::spend();
        Poll::Ready(Ok(()))
    }

    /// Queues all of `head`, then `body[range]`, then `after`, and leaves
    /// `head` empty. The body is sent from where it lies, never copied in
    /// user space (the kernel reads one hot copy for every connection
    /// sending it): it joins the shared tail of the next gather send, behind
    /// what is queued, with `after`; bodies written in one turn (a pipeline
    /// of large values) go in one send. An idle socket takes `head` itself.
    /// Unless the socket is idle, waits while the bytes copied into the
    /// queue (not the bodies: they cost the connection nothing) would pass
    /// [`TX_LIMIT`], or while the tail has [`TAIL_PARTS`] bodies. (Copied
    /// behind a send in flight, bodies of a 60 KB file made clients that
    /// pipeline and never read cost 94-185 KB per connection; epoll 15-22.)
    pub(crate) fn poll_write_shared(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        head: &mut Vec<u8>,
        body: &SharedBytes,
        range: std::ops::Range<usize>,
        after: &[u8],
    ) -> Poll<io::Result<()>> {
        let mut st = std::task::ready!(self.lock_for_write(cx))?;
        let nothing_queued = st.tx.is_empty() && st.tx_tail.is_none();
        let idle = nothing_queued && st.tx_busy == 0;
        let parts = st.tx_tail.as_ref().map_or(0, |t| t.parts.len());
        let copied = st.tx_copied() + head.len() + after.len();
        if !idle && (copied > TX_LIMIT || parts >= TAIL_PARTS) {
            st.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if nothing_queued {
            std::mem::swap(&mut st.tx, head);
            give_spare(head);
        } else {
            st.queue(head);
        }
        if range.is_empty() {
            st.queue(after);
        } else {
            let part = TailPart {
                body: body.clone(),
                start: range.start,
                end: range.end,
                after: after.to_vec(),
            };
            match &mut st.tx_tail {
                Some(t) => t.parts.push(part),
                None => st.tx_tail = Some(Box::new(Tail { parts: vec![part] })),
            }
        }
        if nothing_queued && st.tx_busy == 0 && !(st.tx.is_empty() && st.tx_tail.is_none()) {
            // Sent at the turn's end, with whatever else this turn queues.
            self.schedule();
        }
        head.clear();
        crate::coop::spend();
        Poll::Ready(Ok(()))
    }

    /// Ready once every queued byte has gone to the kernel (or failed).
    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = lock_std(&self.st);
        if let Some(kind) = st.tx_err {
            return Poll::Ready(Err(kind.into()));
        }
        if st.tx_idle() {
            return Poll::Ready(Ok(()));
        }
        st.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Shuts the socket down once what is queued has been sent.
    pub(crate) fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        let mut st = lock_std(&self.st);
        if how != std::net::Shutdown::Read && !st.tx_idle() {
            if how == std::net::Shutdown::Both {
                shutdown_fd(self.fd, std::net::Shutdown::Read)?;
            }
            st.shutdown_after_tx = Some(std::net::Shutdown::Write);
            return Ok(());
        }
        shutdown_fd(self.fd, how)
    }

    // ---- readiness (POLL_ADD) --------------------------------------------

    /// Ready in `dir` (`write` true: writable)? Arms a one-shot poll when not.
    /// Returns the readiness tick, for [`clear_ready`](Self::clear_ready).
    pub(crate) fn poll_ready(self: &Arc<Self>, write: bool, cx: &mut Context<'_>) -> Poll<u64> {
        let bit = if write { WRITABLE } else { READABLE };
        let mut st = lock_std(&self.st);
        let st = &mut *st;
        let cold = st.cold.get_or_insert_with(Default::default);
        if cold.ready & bit != 0 {
            return Poll::Ready(cold.ready_tick);
        }
        let i = write as usize;
        // Also when the bit is wanted but nothing is armed for it: a poll
        // that completed without it (see `POLL_RETRY`) left it wanted.
        let want =
            cold.want_poll & bit == 0 || (cold.polls[i].is_none() && cold.delays[i].is_none());
        cold.want_poll |= bit;
        if write {
            st.writer = Some(cx.waker().clone());
        } else {
            st.reader = Some(cx.waker().clone());
        }
        if want {
            self.schedule();
        }
        Poll::Pending
    }

    /// After `WouldBlock`: forget readiness seen at `tick`.
    pub(crate) fn clear_ready(&self, write: bool, tick: u64) {
        let bit = if write { WRITABLE } else { READABLE };
        let mut st = lock_std(&self.st);
        if let Some(cold) = st.cold.as_mut().filter(|c| c.ready_tick == tick) {
            cold.ready &= !bit;
        }
    }

    /// Ready when nothing queued is left to send (a direct system call on the
    /// socket, such as `sendfile`, must not overtake queued bytes).
    pub(crate) fn poll_tx_drained(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }

    // ---- accepting -------------------------------------------------------

    /// An accepted descriptor, or an error from the accept.
    pub(crate) fn poll_accept(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<io::Result<OwnedFd>> {
        let mut st = lock_std(&self.st);
        let st = &mut *st;
        let acc = &mut st.cold.get_or_insert_with(Default::default).acc;
        if let Some(fd) = acc.accepted.pop_front() {
            if acc.armed.is_none() && acc.want {
                self.schedule();
            }
            return Poll::Ready(Ok(fd));
        }
        if let Some(e) = acc.err.take() {
            return Poll::Ready(Err(e));
        }
        if !acc.want || acc.armed.is_none() {
            acc.want = true;
            self.schedule();
        }
        st.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Bytes written and not yet taken by the kernel: queued, or in the
    /// send in flight (a short send's rest counts until it is sent).
    pub(crate) fn unsent(&self) -> usize {
        let st = lock_std(&self.st);
        let sent = st.cold.as_ref().map_or(0, |c| c.tx_sent);
        let in_flight = (st.tx_busy as usize).saturating_sub(sent);
        st.tx.len() + st.tx_tail.as_ref().map_or(0, |t| t.len()) + in_flight
    }

    /// At the close, drop what is still to send (the peer stopped reading)
    /// instead of lingering over it.
    pub(crate) fn discard_unsent(&self) {
        let mut st = lock_std(&self.st);
        st.discard = true;
        st.clear_tx();
    }

    /// The handle is gone: cancel what is armed, finish sending, then close.
    pub(crate) fn release(self: &Arc<Self>) {
        let mut st = lock_std(&self.st);
        st.closed = true;
        st.reader = None;
        st.writer = None;
        drop(st);
        self.schedule();
    }

    fn take_wakers(&self, out: &mut Vec<Waker>) {
        let mut st = lock_std(&self.st);
        out.extend(st.reader.take());
        out.extend(st.writer.take());
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        self.shared.live.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: this `Io` owns `fd` (the socket object that opened it was
        // released to it), and no ring operation uses it any more: each
        // in-flight operation holds an `Arc<Io>` (a cancel by descriptor,
        // `give_up`, names the number only; it goes in while the sends it
        // ends still hold this `Io`).
        unsafe { libc::close(self.fd) };
    }
}

fn shutdown_fd(fd: RawFd, how: std::net::Shutdown) -> io::Result<()> {
    let how = match how {
        std::net::Shutdown::Read => libc::SHUT_RD,
        std::net::Shutdown::Write => libc::SHUT_WR,
        std::net::Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: plain system call on a descriptor this socket owns.
    if unsafe { libc::shutdown(fd, how) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

enum OpKind {
    /// A file read (`crate::fs::read_at`). Boxed: an idle connection's
    /// armed receive is an `Op` too, and the largest variant sizes them all.
    File(Box<FileOp>),
    Recv(Watch),
    Send {
        buf: Vec<u8>,
        off: usize,
    },
    /// Queued bytes and a shared tail (boxed, as `File`).
    Gather(Box<GatherSend>),
    Accept(Watch),
    Poll {
        write: bool,
    },
    /// The delay before a direction's next poll ([`POLL_RETRY`]).
    PollDelay {
        write: bool,
    },
}

/// A file read: the buffer and the file are the operation's until its
/// completion.
struct FileOp {
    /// Empty for a [fetch](UringReactor::fetch_file): the kernel writes into
    /// the ring's scratch memory instead.
    buf: Vec<u8>,
    /// A fetch: the result is a count, the bytes are nobody's.
    fetch: bool,
    /// Zeroed bytes before the read's first byte (alignment).
    pad: usize,
    _file: Arc<std::fs::File>,
    done: Arc<FileRead>,
}

struct Op {
    /// The socket, for socket operations.
    io: Option<Arc<Io>>,
    kind: OpKind,
}

/// Where a file read's result waits for its future.
pub(crate) struct FileRead {
    st: Mutex<FileReadSt>,
    /// The ring it was queued on, which cancels it if its future is dropped.
    shared: Arc<UringShared>,
    /// On that ring's list of abandoned reads (see [`DirtyList`]).
    queued: crate::loom::AtomicBool,
}

#[derive(Default)]
struct FileReadSt {
    /// The read's result: how many bytes it read.
    done: Option<io::Result<usize>>,
    /// Those bytes (none for a fetch).
    buf: Vec<u8>,
    waker: Option<Waker>,
    /// Its operation's key in the ring's table.
    ud: u64,
}

impl FileRead {
    /// Its future was dropped before the answer: the ring's loop cancels
    /// the read in the kernel (from any thread; the loop is woken only if
    /// it sleeps). The buffer stays the operation's until the completion,
    /// which the cancel hastens: a read waiting on a pipe, a slow disk or
    /// a FUSE file then ends with `ECANCELED` and frees its buffer and
    /// file, instead of holding them until it would have been answered.
    pub(crate) fn abandon(self: &Arc<Self>) {
        {
            let mut st = lock_std(&self.st);
            if st.done.is_some() {
                return; // answered already: nothing is in the ring
            }
            st.waker = None;
        }
        if self.shared.abandoned.mark(&self.queued, || self.clone()) {
            if let Some(shared) = registry::get(self.shared.loop_id) {
                shared.notify();
            }
        }
    }

    /// The bytes read (fewer than asked at end of file), once the ring answered.
    pub(crate) fn poll_done(&self, cx: &mut Context<'_>) -> Poll<io::Result<Vec<u8>>> {
        self.poll_read(cx)
            .map(|r| r.map(|_| std::mem::take(&mut lock_std(&self.st).buf)))
    }

    /// How many bytes a fetch read, once the ring answered.
    pub(crate) fn poll_read(&self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut st = lock_std(&self.st);
        match st.done.take() {
            Some(r) => Poll::Ready(r),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// The provided-buffer ring: `count` buffers of `size` bytes that the kernel
/// picks from for multishot receives. Made on the first receive, so loops
/// without sockets (payload loops) never allocate it.
struct BufRing {
    entries: *mut types::BufRingEntry,
    entries_layout: std::alloc::Layout,
    data: Box<[u8]>,
    size: usize,
    mask: u16,
    tail: Cell<u16>,
}

impl BufRing {
    fn new(ring: &IoUring, count: u16, size: u32) -> io::Result<BufRing> {
        let count = count.clamp(1, 32768).next_power_of_two();
        let size = size.max(64) as usize;
        let layout = std::alloc::Layout::from_size_align(
            count as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) } as *mut types::BufRingEntry;
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        // SAFETY: `entries` is page-aligned memory for `count` entries that
        // lives until the ring is unregistered (`UringReactor::drop`).
        let r = unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, BUF_GROUP, 0)
        };
        if let Err(e) = r {
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(entries as *mut u8, layout) };
            return Err(e);
        }
        // The kernel sees no buffer until the tail is published below.
        let br = BufRing {
            entries,
            entries_layout: layout,
            data: vec![0u8; count as usize * size].into_boxed_slice(),
            size,
            mask: count - 1,
            tail: Cell::new(0),
        };
        for bid in 0..count {
            br.push(bid);
        }
        br.publish();
        Ok(br)
    }

    /// Whether `ring` takes a provided-buffer ring: registers one of a
    /// single entry, then unregisters it.
    fn probe(ring: &IoUring) -> io::Result<()> {
        let b = BufRing::new(ring, 1, 64)?;
        if ring.submitter().unregister_buf_ring(BUF_GROUP).is_ok() {
            // SAFETY: unregistered, so the kernel no longer refers to the
            // entries; allocated with this layout in `new`.
            unsafe { std::alloc::dealloc(b.entries as *mut u8, b.entries_layout) };
        }
        // (Still registered, its page is leaked: the kernel may read it
        // until the ring closes.)
        Ok(())
    }

    /// Adds buffer `bid` at the tail (visible to the kernel after `publish`).
    fn push(&self, bid: u16) {
        let t = self.tail.get();
        let idx = (t & self.mask) as usize;
        // SAFETY: `idx` is below the entry count; only the loop thread writes
        // entries, and the kernel reads only entries below the published tail.
        let e = unsafe { &mut *self.entries.add(idx) };
        e.set_addr(self.data.as_ptr() as u64 + bid as u64 * self.size as u64);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.tail.set(t.wrapping_add(1));
    }

    fn publish(&self) {
        // SAFETY: the tail field overlays entry 0's reserved field; it is
        // updated with a release store so the kernel sees the entries first.
        unsafe {
            let tail =
                types::BufRingEntry::tail(self.entries) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail.get(), Ordering::Release);
        }
    }

    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.size;
        &self.data[start..start + len.min(self.size)]
    }
}

/// The per-loop ring. Only the loop's thread uses it.
pub(crate) struct UringReactor {
    ring: RefCell<IoUring>,
    /// In-flight operations, addressed by their user data.
    ops: RefCell<GenTable<Op>>,
    bufs: RefCell<Option<BufRing>>,
    config: RingConfig,
    shared: Arc<UringShared>,
    wake_fd: RawFd,
    wake_armed: Cell<bool>,
    lingering: RefCell<Vec<(Instant, Arc<Io>)>>,
    /// When the next look at quiet receives is due ([`Watch`]); `None`:
    /// no receive is armed.
    quiet_due: Cell<Option<Instant>>,
    /// What fetches read into ([`UringReactor::fetch_file`]); made on the
    /// first, freed with the ring. A raw pointer, never a reference: the
    /// kernel may be writing into it whenever a fetch is in flight.
    scratch: Cell<Option<std::ptr::NonNull<[u8]>>>,
    /// Receives are armed with a total limit ([`RingConfig::recv_limit`]).
    recv_limit: bool,
}

impl UringReactor {
    pub(crate) fn new(
        config: RingConfig,
        wake_fd: RawFd,
        loop_id: u16,
    ) -> io::Result<UringReactor> {
        if let Some(why) = unavailable() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        let entries = config.entries.clamp(8, 32768);
        // Completion work runs only when the loop enters the kernel for
        // completions (no interrupts of a busy loop; the loop's thread is
        // the ring's only submitter), and the kernel flags the ring when
        // some waits. Deferred (DEFER_TASKRUN, 6.1+) rather than cooperative
        // (COOP_TASKRUN, 5.19+): a sleeping loop is then woken by the
        // socket's own wake-up instead of through task work: on a 6.18 VM,
        // 2.2x sped's transactions/s at 8 clients over Unix sockets, 1.0-1.1x
        // elsewhere (docs/results/io_uring/taskrun-ab/). An earlier kernel
        // stalled pipelined gets under it; 6.18 does not. Older kernels
        // refuse the flags: cooperative, then plain.
        let tuned = |defer: bool| {
            let mut b = IoUring::builder();
            match defer {
                true => b.setup_single_issuer().setup_defer_taskrun(),
                false => b.setup_coop_taskrun(),
            };
            b.setup_taskrun_flag()
                .setup_cqsize(entries * 4)
                .build(entries)
        };
        let defer = !cooperative_taskrun();
        let ring = tuned(defer)
            .or_else(|e| if defer { tuned(false) } else { Err(e) })
            .or_else(|_| IoUring::builder().setup_cqsize(entries * 4).build(entries))?;
        let r = UringReactor {
            ring: RefCell::new(ring),
            ops: RefCell::new(GenTable::default()),
            bufs: RefCell::new(None),
            shared: Arc::new(UringShared {
                loop_id,
                dirty: DirtyList::new(),
                abandoned: DirtyList::new(),
                live: AtomicUsize::new(0),
            }),
            wake_fd,
            wake_armed: Cell::new(false),
            lingering: RefCell::new(Vec::new()),
            quiet_due: Cell::new(None),
            scratch: Cell::new(None),
            recv_limit: config.recv_limit && recv_limit_supported(),
            config,
        };
        r.arm_wake();
        Ok(r)
    }

    pub(crate) fn handle(&self) -> &Arc<UringShared> {
        &self.shared
    }

    pub(crate) fn sources(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    pub(crate) fn has_no_sources(&self) -> bool {
        self.sources() == 0
    }

    fn push(&self, sqe: squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        loop {
            // SAFETY: every pointer an entry carries is owned by the
            // operation table entry named by its user data until its
            // completion (a send's bytes; a gather send's boxed message and
            // its iovecs; a file read's buffer), or by the ring until its
            // drop, which waits for or leaks what is in flight (the scratch
            // memory fetches read into), or is a static (a poll delay's
            // `POLL_RETRY` timespec). Receives use provided buffers.
            if unsafe { ring.submission().push(&sqe) }.is_ok() {
                return;
            }
            // Full: submit what is queued (rare; the queue holds a turn's worth).
            if let Err(e) = ring.submit() {
                if e.raw_os_error() != Some(libc::EBUSY) && e.raw_os_error() != Some(libc::EINTR) {
                    tracing::warn!(error = %e, "io_uring submit failed");
                }
                ring.completion().sync();
            }
        }
    }

    fn arm_wake(&self) {
        let sqe = opcode::PollAdd::new(types::Fd(self.wake_fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(WAKE);
        self.push(sqe);
        self.wake_armed.set(true);
    }

    fn cancel(&self, ud: u64) {
        self.push(opcode::AsyncCancel::new(ud).build().user_data(IGNORE));
    }

    fn ensure_bufs(&self) -> bool {
        if self.bufs.borrow().is_some() {
            return true;
        }
        match BufRing::new(
            &self.ring.borrow(),
            self.config.buffers,
            self.config.buffer_size,
        ) {
            Ok(b) => {
                *self.bufs.borrow_mut() = Some(b);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "io_uring: cannot register the provided-buffer ring");
                false
            }
        }
    }

    /// Turns what sockets asked for into submissions, and cancels the file
    /// reads whose futures were dropped.
    fn flush_dirty(&self) {
        for io in self.shared.dirty.take() {
            io.queued.store(false, Ordering::Release);
            self.plan(&io);
        }
        for read in self.shared.abandoned.take() {
            read.queued.store(false, Ordering::Release);
            let ud = lock_std(&read.st).ud;
            // Still in flight (the table's keys are generational: a key
            // reused since names another operation and misses).
            let live = matches!(
                self.ops.borrow().get(ud),
                Some(Op { kind: OpKind::File(f), .. }) if Arc::ptr_eq(&f.done, &read)
            );
            if live {
                self.cancel(ud);
            }
        }
    }

    fn plan(&self, io: &Arc<Io>) {
        let mut st = lock_std(&io.st);
        let fd = types::Fd(io.fd);
        if st.closed {
            if let Some(ud) = st.recv {
                if !st.recv_cancelled {
                    st.recv_cancelled = true;
                    self.cancel(ud.get());
                }
            }
            if let Some(cold) = st.cold.as_mut() {
                if let Some(ud) = cold.acc.armed.take() {
                    self.cancel(ud);
                }
                cold.acc.want = false;
                for ud in cold.polls.iter_mut().filter_map(Option::take) {
                    self.cancel(ud.get());
                }
                for ud in cold.delays.iter_mut().filter_map(Option::take) {
                    self.cancel(ud.get());
                }
                cold.want_poll = 0;
            }
            st.want_recv = false;
        }
        if !st.want_recv && !st.recv_cancelled {
            // Its reader receives directly now (see `Io::try_read`).
            if let Some(ud) = st.recv {
                st.recv_cancelled = true;
                self.cancel(ud.get());
            }
        }
        if st.want_recv && st.recv.is_none() && !st.rx_eof && st.unread() < RX_LIMIT {
            if self.ensure_bufs() {
                // The turn's time (no clock read per receive armed).
                let look = crate::time::loop_now() + self.config.quiet;
                let ud = self.ops.borrow_mut().insert(Op {
                    io: Some(io.clone()),
                    kind: OpKind::Recv(Watch::new(look)),
                });
                if self.quiet_due.get().is_none_or(|d| d > look) {
                    self.quiet_due.set(Some(look));
                }
                st.recv = NonZeroU64::new(ud);
                st.recv_cancelled = false;
                let sqe = opcode::RecvMulti::new(fd, BUF_GROUP).build().user_data(ud);
                // At most what the queue has room for: the receive ends
                // there (a completion without `MORE`, as when buffers ran
                // out), and the reader's catching up arms the next one.
                let room = (RX_LIMIT - st.unread()) as u32;
                self.push(match self.recv_limit {
                    true => with_total_limit(sqe, room),
                    false => sqe,
                });
            } else {
                st.set_rx_err(io::Error::other("io_uring: no receive buffers"));
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
        }
        if let Some(acc) = st.cold.as_mut().map(|c| &mut c.acc) {
            if let Some(paced) = acc.arm_next() {
                let look = crate::time::loop_now() + self.config.quiet;
                let ud = self.ops.borrow_mut().insert(Op {
                    io: Some(io.clone()),
                    kind: OpKind::Accept(Watch::new(look)),
                });
                if self.quiet_due.get().is_none_or(|d| d > look) {
                    self.quiet_due.set(Some(look));
                }
                acc.armed = Some(ud);
                let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
                let sqe = if paced {
                    let (addr, len) = (std::ptr::null_mut(), std::ptr::null_mut());
                    opcode::Accept::new(fd, addr, len).flags(flags).build()
                } else {
                    opcode::AcceptMulti::new(fd).flags(flags).build()
                };
                self.push(sqe.user_data(ud));
            }
        }
        if st.tx_busy == 0 && st.tx_err.is_none() {
            self.submit_queued(io, &mut st);
        }
        for (i, write) in [(0, false), (1, true)] {
            let bit = if write { WRITABLE } else { READABLE };
            let Some(cold) = st.cold.as_mut() else {
                break;
            };
            if cold.want_poll & bit != 0 && cold.polls[i].is_none() && cold.delays[i].is_none() {
                let level = cold.backoff[i] as usize;
                if level > 0 && cold.delayed & bit == 0 {
                    let ud = self.ops.borrow_mut().insert(Op {
                        io: Some(io.clone()),
                        kind: OpKind::PollDelay { write },
                    });
                    cold.delays[i] = NonZeroU64::new(ud);
                    let ts: *const types::Timespec = &POLL_RETRY[level - 1];
                    self.push(opcode::Timeout::new(ts).build().user_data(ud));
                    continue;
                }
                cold.delayed &= !bit;
                let ud = self.ops.borrow_mut().insert(Op {
                    io: Some(io.clone()),
                    kind: OpKind::Poll { write },
                });
                cold.polls[i] = NonZeroU64::new(ud);
                let mask = if write { libc::POLLOUT } else { libc::POLLIN };
                self.push(opcode::PollAdd::new(fd, mask as u32).build().user_data(ud));
            }
        }
        if st.closed && st.tx_busy > 0 && !st.lingering {
            st.lingering = true;
            if st.discard {
                // The peer stopped reading: close now, as epoll's close
                // leaves the rest to the kernel.
                self.give_up(io);
            } else {
                self.lingering
                    .borrow_mut()
                    .push((Instant::now() + self.config.linger, io.clone()));
            }
        }
    }

    /// Submits what `st` has queued (nothing if nothing is): `tx` alone, or
    /// `tx` and the shared tail in one gather send.
    fn submit_queued(&self, io: &Arc<Io>, st: &mut St) {
        let tail = st.tx_tail.take();
        if st.tx.is_empty() && tail.is_none() {
            return;
        }
        let buf = std::mem::take(&mut st.tx);
        match tail {
            None => {
                st.tx_busy = in_flight(&buf);
                self.submit_send(io, buf, 0);
            }
            Some(tail) => {
                st.tx_busy = u32::try_from(buf.len() + tail.len()).unwrap_or(u32::MAX);
                self.submit_gather(io, buf, tail);
            }
        }
    }

    /// One `sendmsg` of `head`, then each of `tail`'s bodies and the bytes
    /// after it.
    fn submit_gather(&self, io: &Arc<Io>, head: Vec<u8>, tail: Box<Tail>) {
        self.submit_gather_after(io, head, tail, None);
    }

    fn submit_gather_after(
        &self,
        io: &Arc<Io>,
        head: Vec<u8>,
        tail: Box<Tail>,
        delay: Option<&'static types::Timespec>,
    ) {
        let iov = |b: &[u8]| libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
        let empty = iov(&[]);
        let mut g = Box::new(GatherSend {
            iov: [empty; 1 + 2 * TAIL_PARTS],
            head,
            tail,
            // SAFETY: an all-zero msghdr is valid: no name, no control
            // data, no iovecs (set just below), no flags.
            msg: unsafe { std::mem::zeroed() },
        });
        let mut n = 0;
        let pieces = std::iter::once(&g.head[..])
            .chain(g.tail.parts.iter().flat_map(|p| [p.bytes(), &p.after[..]]));
        let mut iovs = [empty; 1 + 2 * TAIL_PARTS];
        for piece in pieces.filter(|p| !p.is_empty()) {
            iovs[n] = iov(piece);
            n += 1;
        }
        g.iov = iovs;
        g.msg.msg_iov = g.iov.as_mut_ptr();
        g.msg.msg_iovlen = n as _;
        // The box's heap block does not move when the box moves into the
        // table: the message, the iovecs and the bytes they point at stay
        // where they are until the completion removes the operation.
        let msg: *const libc::msghdr = &g.msg;
        let ud = self.ops.borrow_mut().insert(Op {
            io: Some(io.clone()),
            kind: OpKind::Gather(g),
        });
        let sqe = opcode::SendMsg::new(types::Fd(io.fd), msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(ud);
        self.push_after(delay, sqe);
    }

    fn submit_send(&self, io: &Arc<Io>, buf: Vec<u8>, off: usize) {
        self.submit_send_after(io, buf, off, None);
    }

    fn submit_send_after(
        &self,
        io: &Arc<Io>,
        buf: Vec<u8>,
        off: usize,
        delay: Option<&'static types::Timespec>,
    ) {
        let ptr = buf[off..].as_ptr();
        let len = (buf.len() - off) as u32;
        let ud = self.ops.borrow_mut().insert(Op {
            io: Some(io.clone()),
            kind: OpKind::Send { buf, off },
        });
        let sqe = opcode::Send::new(types::Fd(io.fd), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(ud);
        self.push_after(delay, sqe);
    }

    /// After a send came back with `EAGAIN`: the delay before it goes
    /// again. The kernel ends a send's wait for room on any wake-up of the
    /// socket and, once it waited, hands a send that still finds no room to
    /// a worker, whose try on the non-blocking socket fails: a client's FIN
    /// on a full socket does it, and a half-closed socket wakes every wait
    /// for as long as it lasts (as polls, see [`POLL_RETRY`]). So not an
    /// error (taken for one, it cut the answers a half-closed client was
    /// still reading), and not sent again at once (that spun a core while
    /// such a client paused): after 1 ms, doubling while it repeats, reset
    /// by a send that goes.
    fn resend(st: &mut St) -> &'static types::Timespec {
        let cold = st.cold.get_or_insert_with(Default::default);
        cold.resends = (cold.resends + 1).min(POLL_RETRY.len() as u8);
        &POLL_RETRY[cold.resends as usize - 1]
    }

    /// Pushes `sqe`, behind a timeout of `delay` linked before it if any
    /// (an expired timeout counts as a success, so the link goes on).
    fn push_after(&self, delay: Option<&'static types::Timespec>, sqe: squeue::Entry) {
        let Some(ts) = delay else {
            return self.push(sqe);
        };
        {
            // Both in one submission, or the link would end at the first.
            let mut ring = self.ring.borrow_mut();
            let room = {
                let sq = ring.submission();
                sq.capacity() - sq.len()
            };
            if room < 2 {
                if let Err(e) = ring.submit() {
                    tracing::warn!(error = %e, "io_uring submit failed");
                }
            }
        }
        let wait = opcode::Timeout::new(ts)
            .flags(types::TimeoutFlags::ETIME_SUCCESS)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(IGNORE);
        self.push(wait);
        self.push(sqe);
    }

    /// After the send of `buf` (all of it, or failed with `res`): records
    /// an error, submits what was queued meanwhile, or shuts down as asked;
    /// wakes the writer.
    fn send_done(
        &self,
        io: &Arc<Io>,
        mut st: std::sync::MutexGuard<'_, St>,
        res: i32,
        buf: Vec<u8>,
    ) {
        st.tx_busy = 0;
        if let Some(c) = st.cold.as_mut() {
            c.tx_sent = 0;
        }
        if res < 0 {
            let e = io::Error::from_raw_os_error(-res);
            st.tx_err = Some(if res == -libc::ECANCELED {
                io::ErrorKind::BrokenPipe
            } else {
                e.kind()
            });
            st.clear_tx();
        } else if res == 0 {
            st.tx_err = Some(io::ErrorKind::WriteZero);
            st.clear_tx();
        }
        keep_buf(buf, Spare::Tx);
        if !st.tx.is_empty() || st.tx_tail.is_some() {
            self.submit_queued(io, &mut st);
        } else if let Some(how) = st.shutdown_after_tx.take() {
            let _ = shutdown_fd(io.fd, how);
        }
        if let Some(w) = st.writer.take() {
            w.wake();
        }
    }

    /// Reads up to `len` bytes of `file` at `offset` through the ring (the
    /// kernel's workers do a read that would block, never the loop), into
    /// memory aligned to `align` bytes (a power of two; `O_DIRECT` files
    /// need their block size).
    pub(crate) fn read_file(
        &self,
        file: Arc<std::fs::File>,
        offset: u64,
        len: usize,
        align: usize,
    ) -> Arc<FileRead> {
        debug_assert!(len <= crate::fs::MAX_READ, "fs caps a read's length");
        let mut buf: Vec<u8> = Vec::with_capacity(len + align - 1);
        let pad = buf.as_mut_ptr().align_offset(align).min(align - 1);
        // The bytes before the aligned start are initialised, so the whole
        // prefix of the buffer is once the kernel has written its part.
        buf.resize(pad, 0);
        // SAFETY: `pad + len` is within the capacity reserved above.
        let ptr = unsafe { buf.as_mut_ptr().add(pad) };
        // SAFETY: the Vec moved into the operation keeps its heap buffer
        // (capacity `pad + len`) until the completion: `ptr` stays valid.
        unsafe { self.push_file_read(file, offset, ptr, len, Some((buf, pad))) }
    }

    /// Reads up to `len` bytes (at most [`FETCH_MAX`](crate::fs::FETCH_MAX))
    /// of `file` at
    /// `offset` through the ring into scratch memory nobody reads: what
    /// matters is that the file's pages are in the page cache once it
    /// completes (a `sendfile` then does not wait for the disk). Scratch
    /// memory is one buffer per ring, whatever the number of fetches.
    pub(crate) fn fetch_file(
        &self,
        file: Arc<std::fs::File>,
        offset: u64,
        len: usize,
    ) -> Arc<FileRead> {
        let scratch = self.scratch.get().unwrap_or_else(|| {
            let b = vec![0u8; crate::fs::FETCH_MAX].into_boxed_slice();
            let p = std::ptr::NonNull::from(Box::leak(b));
            self.scratch.set(Some(p));
            p
        });
        let len = len.min(crate::fs::FETCH_MAX);
        // SAFETY: the scratch memory holds FETCH_MAX bytes and lives until
        // the ring is dropped, after its operations (or is leaked with them).
        unsafe { self.push_file_read(file, offset, scratch.as_ptr().cast(), len, None) }
    }

    /// Queues a read of `len` bytes of `file` at `offset` into `ptr`: into
    /// the heap memory of `read`'s buffer (kept in the operation, with its
    /// `pad` bytes before `ptr`), or, `None`, a fetch into the ring's
    /// scratch.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes until the operation
    /// completes (or the ring is dropped).
    unsafe fn push_file_read(
        &self,
        file: Arc<std::fs::File>,
        offset: u64,
        ptr: *mut u8,
        len: usize,
        read: Option<(Vec<u8>, usize)>,
    ) -> Arc<FileRead> {
        use std::os::fd::AsRawFd;
        let done = Arc::new(FileRead {
            st: Mutex::new(FileReadSt::default()),
            shared: self.shared.clone(),
            queued: crate::loom::AtomicBool::new(false),
        });
        let fd = file.as_raw_fd();
        let fetch = read.is_none();
        let (buf, pad) = read.unwrap_or_default();
        let ud = self.ops.borrow_mut().insert(Op {
            io: None,
            kind: OpKind::File(Box::new(FileOp {
                fetch,
                buf,
                pad,
                _file: file,
                done: done.clone(),
            })),
        });
        lock_std(&done.st).ud = ud;
        let sqe = opcode::Read::new(types::Fd(fd), ptr, len as u32)
            .offset(offset)
            .build()
            .user_data(ud);
        // A fetch is for pages believed not in memory; the ring would still
        // first try the read inline, in the loop's io_uring_enter, and
        // where no disk wait is needed it is done there: a sparse file's
        // holes were zero-filled into the page cache on the loop (12 ms
        // polls). Straight to the kernel's workers instead.
        self.push(match fetch {
            true => sqe.flags(io_uring::squeue::Flags::ASYNC),
            false => sqe,
        });
        done
    }

    /// Cancels what sockets dropped with unsent bytes still have in flight
    /// after [`RingConfig::linger`] (a peer that never reads); the wait, cut
    /// short where a linger ends first: a loop with nothing else to do
    /// still closes such a socket on time (it slept on, and the socket and
    /// its descriptor stayed until other traffic woke it).
    fn expire_lingering(&self, timeout: Option<Duration>) -> Option<Duration> {
        if self.lingering.borrow().is_empty() {
            return timeout;
        }
        let now = Instant::now();
        let mut expired = Vec::new();
        let mut next: Option<Instant> = None;
        self.lingering.borrow_mut().retain(|(at, io)| {
            let done = lock_std(&io.st).tx_busy == 0;
            if !done && *at <= now {
                expired.push(io.clone());
            }
            let keep = !done && *at > now;
            if keep {
                next = Some(next.map_or(*at, |n| n.min(*at)));
            }
            keep
        });
        for io in expired {
            lock_std(&io.st).discard = true;
            self.give_up(&io);
        }
        match next {
            None => timeout,
            Some(at) => {
                let left = at.saturating_duration_since(now);
                Some(timeout.map_or(left, |t| t.min(left)))
            }
        }
    }

    /// Ends the sends of a closed socket whose peer is not taking them (its
    /// `discard` set): they are cancelled, and the socket is shut down both
    /// ways, because a cancel by descriptor misses some: a send parked on
    /// a socket whose peer half-closed (seen on 6.18), and one linked
    /// behind its resend delay (not issued yet, on no list a cancel
    /// searches). Shut down, each fails with `EPIPE` when it next tries,
    /// and a send that fails with `EAGAIN` is not sent again. Without it
    /// such a socket, its descriptor and its queued bytes stayed for as
    /// long as the client kept the connection open.
    fn give_up(&self, io: &Io) {
        self.push(
            opcode::AsyncCancel2::new(types::CancelBuilder::fd(types::Fd(io.fd)).all())
                .build()
                .user_data(IGNORE),
        );
        // SAFETY: `io.fd` is this socket's descriptor, open until `io` and
        // its last operation are gone; shutdown(2) only reads the number.
        unsafe { libc::shutdown(io.fd, libc::SHUT_RDWR) };
    }

    /// Submits the turn's operations and waits (at most `timeout`) for
    /// completions; dispatches them. Returns (completions, wake fd fired).
    pub(crate) fn poll(&self, timeout: Option<Duration>) -> io::Result<(usize, bool)> {
        self.flush_dirty();
        let timeout = self.expire_lingering(timeout);
        let timeout = self.watch_quiet(timeout);
        if !self.wake_armed.get() {
            self.arm_wake();
        }
        {
            let mut ring = self.ring.borrow_mut();
            let (pending_sq, kernel_work) = {
                let sq = ring.submission();
                (!sq.is_empty(), sq.taskrun() || sq.cq_overflow())
            };
            let ready = !ring.completion().is_empty();
            let wait = timeout != Some(Duration::ZERO) && !ready;
            if pending_sq || kernel_work || wait {
                let r = match timeout {
                    _ if !wait => ring.submit(),
                    None => ring.submit_and_wait(1),
                    Some(d) => {
                        let ts = types::Timespec::new()
                            .sec(d.as_secs())
                            .nsec(d.subsec_nanos());
                        let args = types::SubmitArgs::new().timespec(&ts);
                        ring.submitter().submit_with_args(1, &args)
                    }
                };
                match r {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                        ) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(self.reap())
    }

    /// Looks at receives and accepts due a look ([`Watch`]); the wait, cut
    /// short where the next look comes first.
    fn watch_quiet(&self, timeout: Option<Duration>) -> Option<Duration> {
        let Some(due) = self.quiet_due.get() else {
            return timeout;
        };
        // The turn's time: a turn late at worst, no clock read per turn.
        let now = crate::time::loop_now();
        if now >= due {
            self.look_at_watched(now);
        }
        match self.quiet_due.get() {
            None => timeout,
            Some(due) => {
                let left = due.saturating_duration_since(now);
                Some(timeout.map_or(left, |t| t.min(left)))
            }
        }
    }

    /// One look at every watched receive and accept due one (and those due
    /// within half a `quiet`, so that looks come in batches, at most one a
    /// `quiet`).
    fn look_at_watched(&self, now: Instant) {
        let quiet = self.config.quiet;
        let horizon = now + quiet / 2;
        let mut next: Option<Instant> = None;
        let (mut receives, mut accepts, mut again) = (Vec::new(), Vec::new(), Vec::new());
        for (ud, op) in self.ops.borrow_mut().iter_mut() {
            let (w, io, accept) = match (&mut op.kind, &op.io) {
                (OpKind::Recv(w), Some(io)) => (w, io, false),
                (OpKind::Accept(w), Some(io)) => (w, io, true),
                _ => continue,
            };
            if w.next.by(horizon) {
                // Cancelled for good (its socket closed, its reader past
                // the limit or reading directly, its listener's queue full
                // or closed: an accept no longer armed). Completions since
                // the last look do not say its cancel arrived.
                let dying = {
                    let st = lock_std(&io.st);
                    st.closed
                        || match accept {
                            false => st.recv_cancelled,
                            true => st.cold.as_ref().is_none_or(|c| c.acc.armed != Some(ud)),
                        }
                };
                if !dying && w.seen != w.looked {
                    // It completed since the last look (a cancel that
                    // found it running left it armed: watched again).
                    w.looked = w.seen;
                    w.level = 0;
                    w.suspect = false;
                    w.cancelled = false;
                    w.waited = false;
                    w.next = Tick::of(now + quiet);
                } else if dying || w.cancelled {
                    // Its cancel is on the way (pushed this turn, maybe,
                    // and not yet submitted). Still here a look later, it
                    // was lost (the kernel races above, or a cancel that
                    // found it running): sent again, less often each time,
                    // or the operation, its socket and its descriptor
                    // would stay for as long as the loop (and a receive
                    // that goes on completing, its queue grow).
                    w.looked = w.seen;
                    if w.waited {
                        again.push(ud);
                        w.level = (w.level + 1).min(QUIET_LEVELS);
                    } else {
                        w.level = 0;
                    }
                    w.waited = true;
                    w.next = Tick::of(now + quiet * (1 << w.level));
                } else if readable_now(io.fd) {
                    if w.suspect {
                        w.cancelled = true;
                        if accept { &mut accepts } else { &mut receives }.push(ud);
                    }
                    w.suspect = true;
                    w.next = Tick::of(now + quiet);
                } else {
                    w.suspect = false;
                    // A listener is looked at every `quiet` (a server has a
                    // few): the next client must not wait a minute.
                    if !accept {
                        w.level = (w.level + 1).min(QUIET_LEVELS);
                    }
                    w.next = Tick::of(now + quiet * (1 << w.level));
                }
            }
            let at = w.next.near(now);
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        self.quiet_due.set(next.map(|n| n.max(now + quiet)));
        static SAID: [std::sync::atomic::AtomicBool; 2] = [
            std::sync::atomic::AtomicBool::new(false),
            std::sync::atomic::AtomicBool::new(false),
        ];
        if !receives.is_empty() && !SAID[0].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                receives = receives.len(),
                "io_uring: a receive the kernel never completed on a socket with \
                 something to read (a kernel race after a reset); restarting it"
            );
        }
        if !accepts.is_empty() && !SAID[1].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                accepts = accepts.len(),
                "io_uring: an accept the kernel never completed on a listener with \
                 connections waiting (a kernel race); restarting it"
            );
        }
        for ud in receives.into_iter().chain(accepts).chain(again) {
            self.cancel(ud);
        }
    }

    fn reap(&self) -> (usize, bool) {
        let mut n = 0;
        let mut woke = false;
        let mut recycled = false;
        loop {
            let cqe = {
                let mut ring = self.ring.borrow_mut();
                let mut cq = ring.completion();
                match cq.next() {
                    Some(c) => c,
                    None => break,
                }
            };
            let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            match ud {
                IGNORE => continue,
                WAKE => {
                    woke = true;
                    if !cqueue::more(flags) {
                        self.wake_armed.set(false);
                    }
                    continue;
                }
                _ => {}
            }
            n += 1;
            recycled |= self.complete(ud, res, flags);
        }
        if recycled {
            if let Some(b) = self.bufs.borrow().as_ref() {
                b.publish();
            }
        }
        (n, woke)
    }

    /// Handles one completion; true if a provided buffer went back.
    fn complete(&self, ud: u64, res: i32, flags: u32) -> bool {
        let more = cqueue::more(flags);
        let mut ops = self.ops.borrow_mut();
        let Some(op) = ops.get_mut(ud) else {
            return false;
        };
        if let OpKind::File(_) = op.kind {
            let Some(Op {
                kind: OpKind::File(file),
                ..
            }) = ops.remove(ud)
            else {
                return false;
            };
            let FileOp {
                mut buf,
                pad,
                done,
                fetch,
                ..
            } = *file;
            let r = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else if fetch {
                // A fetch: the bytes went to the scratch memory.
                Ok(res as usize)
            } else {
                let n = (res as usize).min(buf.capacity() - pad);
                // SAFETY: the first `pad` bytes were zeroed and the kernel
                // wrote the `n` after them (the read's result), so they are
                // initialised.
                unsafe { buf.set_len(pad + n) };
                buf.drain(..pad);
                Ok(n)
            };
            let mut st = lock_std(&done.st);
            st.done = Some(r);
            st.buf = buf;
            if let Some(w) = st.waker.take() {
                w.wake();
            }
            return false;
        }
        let Some(io) = op.io.clone() else {
            return false;
        };
        let mut recycled = false;
        match &mut op.kind {
            OpKind::File(_) => unreachable!("file reads are completed above"),
            OpKind::Recv(w) => {
                w.seen = w.seen.wrapping_add(1);
                let mut st = lock_std(&io.st);
                if let Some(bid) = cqueue::buffer_select(flags) {
                    if let Some(b) = self.bufs.borrow().as_ref() {
                        if res > 0 && !st.closed {
                            st.push_rx(b.bytes(bid, res as usize));
                        }
                        b.push(bid);
                        recycled = true;
                    }
                }
                match res {
                    0 => st.rx_eof = true,
                    r if r < 0 => match -r {
                        // EAGAIN: see `Send` below; received again.
                        libc::ENOBUFS | libc::ECANCELED | libc::EAGAIN => {}
                        e => {
                            let err = io::Error::from_raw_os_error(e);
                            // A reset connection takes no more bytes either:
                            // writes fail now rather than after their send.
                            if st.tx_err.is_none() {
                                st.tx_err = Some(err.kind());
                                st.clear_tx();
                            }
                            st.set_rx_err(err);
                            if let Some(w) = st.writer.take() {
                                w.wake();
                            }
                        }
                    },
                    _ => {}
                }
                if !more {
                    st.recv = None;
                    st.recv_cancelled = false;
                    drop(ops.remove(ud));
                    // Ended for lack of buffers, or cancelled (stuck, or
                    // too far ahead of its reader): again next turn, where
                    // the reader still wants bytes and has room.
                    if (res == -libc::ENOBUFS || res == -libc::ECANCELED || res == -libc::EAGAIN)
                        && st.want_recv
                        && !st.closed
                    {
                        drop(st);
                        io.schedule();
                        st = lock_std(&io.st);
                    }
                } else if st.unread() >= RX_LIMIT && !st.recv_cancelled {
                    // The reader fell behind: stop receiving until it catches up.
                    st.recv_cancelled = true;
                    drop(ops);
                    self.cancel(ud);
                    // Submitted now, not at the turn's end: until the kernel
                    // has it, the receive keeps filling the queue's overflow
                    // with whatever the client sent ahead (hundreds of KiB
                    // per connection in a long turn).
                    let _ = self.ring.borrow_mut().submit();
                }
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
            OpKind::Send { buf, off } => {
                let mut st = lock_std(&io.st);
                if res == -libc::EAGAIN && !st.given_up() {
                    // Not an error (see `resend`): sent again, later.
                    let (buf, off) = (std::mem::take(buf), *off);
                    drop(ops.remove(ud));
                    drop(ops);
                    let delay = Self::resend(&mut st);
                    drop(st);
                    self.submit_send_after(&io, buf, off, Some(delay));
                    return false;
                }
                if res > 0 {
                    if let Some(c) = st.cold.as_mut() {
                        c.resends = 0;
                    }
                }
                if res >= 0 && (*off + res as usize) < buf.len() && res > 0 {
                    // A short send: the rest goes next, before anything newer.
                    // What went shows as progress in `Io::unsent`.
                    st.cold.get_or_insert_with(Default::default).tx_sent += res as usize;
                    let buf = std::mem::take(buf);
                    let off = *off + res as usize;
                    drop(ops.remove(ud));
                    drop(ops);
                    drop(st);
                    self.submit_send(&io, buf, off);
                    return false;
                }
                let Some(Op {
                    kind: OpKind::Send { buf, .. },
                    ..
                }) = ops.remove(ud)
                else {
                    return false;
                };
                drop(ops);
                self.send_done(&io, st, res, buf);
            }
            OpKind::Gather(g) => {
                let mut st = lock_std(&io.st);
                let head_len = g.head.len();
                let total = head_len + g.tail.len();
                // Sent again: the rest after a short send, the bodies
                // still sent from where they lie (it was copied: with a
                // client that pipelines and does not read, every
                // connection held a copy of the body, 60 KB each for a 60
                // KB file); all of it, later, after EAGAIN (as a `Send`).
                let again = if res == -libc::EAGAIN && !st.given_up() {
                    Some((0, Some(Self::resend(&mut st))))
                } else if res > 0 && (res as usize) < total {
                    st.cold.get_or_insert_with(Default::default).tx_sent += res as usize;
                    Some((res as usize, None))
                } else {
                    None
                };
                if res > 0 {
                    if let Some(c) = st.cold.as_mut() {
                        c.resends = 0;
                    }
                }
                if let Some((sent, delay)) = again {
                    let Some(Op {
                        kind: OpKind::Gather(g),
                        ..
                    }) = ops.remove(ud)
                    else {
                        return false;
                    };
                    drop(ops);
                    drop(st);
                    let GatherSend {
                        mut head, mut tail, ..
                    } = *g;
                    let from_head = sent.min(head_len);
                    head.drain(..from_head);
                    tail.advance(sent - from_head);
                    self.submit_gather_after(&io, head, tail, delay);
                    return false;
                }
                let Some(Op {
                    kind: OpKind::Gather(g),
                    ..
                }) = ops.remove(ud)
                else {
                    return false;
                };
                drop(ops);
                self.send_done(&io, st, res, g.head);
            }
            OpKind::Accept(w) => {
                w.seen = w.seen.wrapping_add(1);
                let mut st = lock_std(&io.st);
                let st = &mut *st;
                let closed = st.closed;
                let acc = &mut st.cold.get_or_insert_with(Default::default).acc;
                if res >= 0 {
                    // SAFETY: a successful accept returns a new descriptor
                    // that nothing else owns.
                    let fd = unsafe { OwnedFd::from_raw_fd(res) };
                    if closed {
                        drop(fd);
                    } else {
                        acc.accepted.push_back(fd);
                    }
                } else if res != -libc::ECANCELED {
                    if res == -libc::EMFILE || res == -libc::ENFILE {
                        acc.paced_until = Some(Instant::now() + PACED_ACCEPT);
                    }
                    acc.err = Some(io::Error::from_raw_os_error(-res));
                }
                if !more {
                    // A cancelled multishot's last word may come after a
                    // new accept was armed: that one stays tracked.
                    if acc.armed == Some(ud) {
                        acc.armed = None;
                    }
                    drop(ops.remove(ud));
                } else if acc.accepted.len() >= ACCEPT_QUEUE {
                    // Nobody is taking them: leave the rest in the backlog.
                    // (An older accept still completing leaves the one
                    // armed after it tracked: its own completions end it.)
                    if acc.armed == Some(ud) {
                        acc.armed = None;
                    }
                    drop(ops);
                    self.cancel(ud);
                }
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
            OpKind::Poll { write } => {
                let write = *write;
                drop(ops.remove(ud));
                let mut guard = lock_std(&io.st);
                let st = &mut *guard;
                let closed = st.closed;
                let cold = st.cold.get_or_insert_with(Default::default);
                let i = write as usize;
                cold.polls[i] = None;
                let own = if write { WRITABLE } else { READABLE };
                // A failed poll (should not happen on a socket) wakes the
                // waiter too: its retried call sees the error itself.
                let bits = if res >= 0 {
                    let ev = res as i16;
                    let gone = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
                    let mut bits = 0;
                    if ev & (libc::POLLIN | libc::POLLRDHUP | gone) != 0 {
                        bits |= READABLE;
                    }
                    if ev & (libc::POLLOUT | gone) != 0 {
                        bits |= WRITABLE;
                    }
                    bits
                } else if res != -libc::ECANCELED && !closed {
                    READABLE | WRITABLE
                } else {
                    0
                };
                if bits != 0 {
                    cold.ready |= bits;
                    cold.ready_tick += 1;
                    cold.want_poll &= !bits;
                }
                // Every direction this poll found ready is woken (a hang-up
                // or error is both), its backoff over.
                for (d, bit) in [(0, READABLE), (1, WRITABLE)] {
                    if bits & bit != 0 {
                        cold.backoff[d] = 0;
                    }
                }
                let reader = (bits & READABLE != 0).then(|| st.reader.take()).flatten();
                let writer = (bits & WRITABLE != 0).then(|| st.writer.take()).flatten();
                for w in [reader, writer].into_iter().flatten() {
                    w.wake();
                }
                if bits & own == 0 && res >= 0 && !closed && cold.want_poll & own != 0 {
                    // io_uring completes every poll on the peer's half-close
                    // (POLLRDHUP), which lasts: a write wait woken so is not
                    // writable. Poll again after a delay, not at once (that
                    // would spin until the peer reads).
                    cold.backoff[i] = (cold.backoff[i] + 1).min(POLL_RETRY.len() as u8);
                    drop(guard);
                    io.schedule();
                }
            }
            OpKind::PollDelay { write } => {
                let bit = if *write { WRITABLE } else { READABLE };
                let i = *write as usize;
                drop(ops.remove(ud));
                let mut st = lock_std(&io.st);
                let closed = st.closed;
                let cold = st.cold.get_or_insert_with(Default::default);
                cold.delays[i] = None;
                // Cancelled: the socket closed or the loop is ending.
                if !closed && res != -libc::ECANCELED {
                    cold.delayed |= bit;
                    drop(st);
                    io.schedule();
                }
            }
        }
        recycled
    }

    /// Whether a send is in flight on this ring (a poll submits the queued ones).
    fn sends_in_flight(&self) -> bool {
        self.ops
            .borrow()
            .values()
            .any(|op| matches!(op.kind, OpKind::Send { .. } | OpKind::Gather(_)))
    }

    /// Takes every waker held by sockets with operations in flight (loop shutdown).
    pub(crate) fn shutdown_wakers(&self, out: &mut Vec<Waker>) {
        let ops = self.ops.borrow();
        for op in ops.values() {
            match op {
                Op { io: Some(io), .. } => io.take_wakers(out),
                Op {
                    kind: OpKind::File(f),
                    ..
                } => out.extend(lock_std(&f.done.st).waker.take()),
                _ => {}
            }
        }
        for io in self.shared.dirty.take() {
            io.queued.store(false, Ordering::Release);
            io.take_wakers(out);
        }
        drop(self.shared.abandoned.take());
    }
}

impl Drop for UringReactor {
    fn drop(&mut self) {
        // Cancel everything and wait (briefly) for the kernel to let go of
        // the buffers before they are freed.
        // Bytes written before their sockets closed go out first (a server
        // that shuts down gracefully has answered its in-flight requests
        // only once they left): at most SHUTDOWN_LINGER.
        let until = Instant::now() + SHUTDOWN_LINGER;
        let _ = self.poll(Some(Duration::ZERO));
        while self.sends_in_flight() && Instant::now() < until {
            let _ = self.poll(Some(Duration::from_millis(10)));
        }
        drop(self.shared.dirty.take());
        self.push(
            opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(IGNORE),
        );
        let until = Instant::now() + Duration::from_secs(1);
        while self.ops.borrow().live() > 0 && Instant::now() < until {
            let _ = self.poll(Some(Duration::from_millis(10)));
            if self.ops.borrow().live() > 0 {
                self.push(
                    opcode::AsyncCancel2::new(types::CancelBuilder::any())
                        .build()
                        .user_data(IGNORE),
                );
            }
        }
        let clean = self.ops.borrow().live() == 0;
        // Sockets listed since, or released from now on: nobody takes them
        // any more, and listed they would never be dropped.
        drop(self.shared.dirty.end());
        drop(self.shared.abandoned.end());
        if let Some(b) = self.bufs.borrow_mut().take() {
            let unregistered = self
                .ring
                .borrow()
                .submitter()
                .unregister_buf_ring(BUF_GROUP)
                .is_ok();
            if clean && unregistered {
                // SAFETY: the kernel no longer refers to the entries (the
                // group is unregistered); allocated with this layout.
                unsafe { std::alloc::dealloc(b.entries as *mut u8, b.entries_layout) };
                drop(b);
            } else {
                // Operations outlived the cancel: the kernel may still write
                // into the buffers, so they are never freed.
                tracing::warn!(
                    "io_uring: operations outlived loop shutdown; leaking their buffers"
                );
                std::mem::forget(b);
            }
        }
        // The operations left (if any) keep their sockets open; drop them now
        // that the ring is about to close (closing the ring cancels them).
        let mut ops = self.ops.borrow_mut();
        let left = ops.take_all();
        if !clean {
            // Their send buffers may still be read by the kernel until the
            // ring is torn down, and fetches may still write into the
            // scratch memory: leak them as well.
            for op in left {
                std::mem::forget(op);
            }
            self.scratch.set(None);
        } else if let Some(p) = self.scratch.take() {
            // SAFETY: made by Box::leak in fetch_file, and no operation
            // is left that the kernel could still write into it with.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{give_spare, keep_buf, spare_buf, Accepting, Spare, St, ACCEPT_QUEUE, RX_LIMIT};
    use super::{
        lock_std, opcode, types, Io, NonZeroU64, Op, OpKind, RingConfig, UringReactor, Watch,
        BUF_GROUP, TAIL_PARTS,
    };
    use std::io::Write;
    use std::os::fd::{AsRawFd, IntoRawFd};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A blocking read with a 300 ms timeout on a socket nothing arrives
    /// on: how it ended.
    fn quiet_read_ends() -> std::io::ErrorKind {
        use std::io::Read;
        let (a, _b) = UnixStream::pair().unwrap();
        a.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        (&a).read(&mut [0u8; 1]).unwrap_err().kind()
    }

    /// A ring's creator is interrupted once the ring is torn down (the
    /// kernel's exit work sends it task work with a notification signal):
    /// a socket read with a timeout on that thread fails with EINTR. The
    /// probes run on a thread of their own, so the thread that asked (a
    /// server's builder, a test's client) never sees it.
    #[test]
    fn probes_leave_the_asking_thread_uninterrupted() {
        if super::unavailable().is_some() {
            return;
        }
        let probed = std::thread::spawn(|| {
            super::on_own_thread(super::probe_ring);
            super::on_own_thread(super::probe_recv_limit);
            quiet_read_ends()
        });
        assert_ne!(probed.join().unwrap(), std::io::ErrorKind::Interrupted);
        // The control: the same probe run on the reading thread.
        let here = std::thread::spawn(|| {
            super::probe_ring();
            quiet_read_ends()
        });
        let here = here.join().unwrap();
        eprintln!("a probe on the reading thread: its read ended {here:?}");
    }

    #[test]
    fn after_running_out_of_descriptors_accepts_go_one_at_a_time_for_a_while() {
        let fd = || std::fs::File::open("/dev/null").unwrap().into();
        let mut acc = Accepting {
            want: true,
            ..Default::default()
        };
        // Multishot while the queue has room.
        acc.accepted.push_back(fd());
        assert_eq!(acc.arm_next(), Some(false));
        acc.accepted.extend((1..ACCEPT_QUEUE).map(|_| fd()));
        assert_eq!(acc.arm_next(), None, "a full queue pauses accepting");
        acc.accepted.clear();
        // Paced: one armed only once the last one was taken.
        acc.paced_until = Some(Instant::now() + Duration::from_secs(60));
        assert_eq!(acc.arm_next(), Some(true));
        acc.accepted.push_back(fd());
        assert_eq!(acc.arm_next(), None);
        acc.accepted.clear();
        acc.armed = Some(1);
        assert_eq!(acc.arm_next(), None, "one in flight at most");
        acc.armed = None;
        // The pace ends by itself.
        acc.paced_until = Some(Instant::now() - Duration::from_millis(1));
        assert_eq!(acc.arm_next(), Some(false));
        assert!(acc.paced_until.is_none());
        acc.want = false;
        assert_eq!(acc.arm_next(), None, "nobody accepts");
    }

    /// A ring whose quiet receives are looked at every 20 ms, and the
    /// socket it wakes on; `None` where io_uring is refused.
    fn ring() -> Option<(UringReactor, UnixStream, UnixStream)> {
        ring_with(true)
    }

    /// [`ring`], its receives limited to their room where the kernel can
    /// (`recv_limit`) or only cancelled past it.
    fn ring_with(recv_limit: bool) -> Option<(UringReactor, UnixStream, UnixStream)> {
        if super::unavailable().is_some() {
            return None;
        }
        let (wake, peer) = UnixStream::pair().unwrap();
        let config = RingConfig {
            entries: 64,
            buffers: 64,
            buffer_size: 4096,
            quiet: Duration::from_millis(20),
            linger: Duration::from_millis(100),
            recv_limit,
        };
        let r = UringReactor::new(config, wake.as_raw_fd(), u16::MAX).unwrap();
        Some((r, wake, peer))
    }

    /// Turns of `r` until `done` says so, at most 5 s.
    fn turn_until(r: &UringReactor, what: &str, mut done: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < until, "{what}");
            r.poll(Some(Duration::from_millis(5))).unwrap();
        }
    }

    /// Where the kernel takes deferred task work (6.1+), a loop's ring
    /// uses it (with the single issuer it requires); and a ring so made
    /// still completes a receive and wakes a loop asleep in it.
    #[test]
    fn rings_defer_completion_work_where_the_kernel_can() {
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let kernel_can = io_uring::IoUring::<io_uring::squeue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(8)
            .is_ok();
        let single = r.ring.borrow().params().is_setup_single_issuer();
        assert_eq!(single, kernel_can && !super::cooperative_taskrun());
        // A sleeping wait ends when a peer on another thread writes.
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            peer.write_all(b"wake").unwrap();
            peer
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut buf = [0u8; 8];
        // Each wait is long: only the write can end it in time.
        let (start, wait) = (Instant::now(), Duration::from_secs(10));
        let n = loop {
            match io.poll_read(&mut cx, &mut buf) {
                std::task::Poll::Ready(n) => break n.unwrap(),
                std::task::Poll::Pending => {
                    assert!(start.elapsed() < wait, "the receive never woke the loop");
                    r.poll(Some(wait)).unwrap();
                }
            }
        };
        assert_eq!(&buf[..n], b"wake");
        drop(writer.join().unwrap());
    }

    /// A receive the kernel never completes (the race [`Watch`] is for,
    /// made here by arming the receive on another, silent socket) is
    /// found and restarted: its reader gets the bytes and the end its own
    /// socket holds. Before, the reader waited for ever.
    #[test]
    fn a_receive_the_kernel_never_completes_is_restarted() {
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let (silent, _silent_peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        {
            assert!(r.ensure_bufs());
            let mut st = lock_std(&io.st);
            st.want_recv = true;
            let look = Instant::now() + r.config.quiet;
            let ud = r.ops.borrow_mut().insert(Op {
                io: Some(io.clone()),
                kind: OpKind::Recv(Watch::new(look)),
            });
            st.recv = NonZeroU64::new(ud);
            r.quiet_due.set(Some(look));
            let fd = types::Fd(silent.as_raw_fd());
            r.push(opcode::RecvMulti::new(fd, BUF_GROUP).build().user_data(ud));
        }
        peer.write_all(b"last words").unwrap();
        drop(peer);
        turn_until(&r, "the stuck receive was never restarted", || {
            lock_std(&io.st).rx_eof
        });
        let st = lock_std(&io.st);
        assert_eq!(&st.rx[st.rx_pos as usize..], b"last words");
    }

    /// A closed socket's receive whose cancel was lost (made here by
    /// marking it cancelled without sending one) is cancelled again at a
    /// later look, even while its peer goes on sending (completions do not
    /// say the cancel arrived): the operation ends and lets its socket go.
    /// Before, it stayed in the table, holding the socket and its
    /// descriptor, for as long as the loop ran.
    #[test]
    fn a_closed_sockets_receive_whose_cancel_was_lost_is_cancelled_again() {
        use std::sync::atomic::{AtomicBool, Ordering};
        for sending in [false, true] {
            let Some((r, _wake, _w)) = ring() else {
                return;
            };
            let (mine, mut peer) = UnixStream::pair().unwrap();
            let io = Io::new(mine.into_raw_fd(), r.handle().clone());
            {
                assert!(r.ensure_bufs());
                let mut st = lock_std(&io.st);
                let look = Instant::now() + r.config.quiet;
                let ud = r.ops.borrow_mut().insert(Op {
                    io: Some(io.clone()),
                    kind: OpKind::Recv(Watch::new(look)),
                });
                st.recv = NonZeroU64::new(ud);
                st.closed = true;
                st.recv_cancelled = true;
                r.quiet_due.set(Some(look));
                let fd = types::Fd(io.fd);
                r.push(opcode::RecvMulti::new(fd, BUF_GROUP).build().user_data(ud));
            }
            let stop = Arc::new(AtomicBool::new(false));
            let sender = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while sending && !stop.load(Ordering::Relaxed) {
                        if peer.write_all(b"x").is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    peer
                })
            };
            let gone = Arc::downgrade(&io);
            drop(io);
            turn_until(&r, "the receive was never cancelled again", || {
                r.ops.borrow().live() == 0
            });
            stop.store(true, Ordering::Relaxed);
            drop(sender.join().unwrap());
            assert!(gone.upgrade().is_none(), "the socket outlived its receive");
        }
    }

    /// This thread's CPU time (user and system).
    fn thread_cpu() -> Duration {
        // SAFETY: getrusage fills the struct it is given; RUSAGE_THREAD
        // asks for the calling thread's figures.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            ru
        };
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
    }

    /// A TCP loopback client that has half-closed, and the server's end
    /// of it on `r`.
    fn half_closed_client(r: &UringReactor) -> (std::net::TcpStream, Arc<Io>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        (client, Io::new(server.into_raw_fd(), r.handle().clone()))
    }

    /// A client that half-closes, then reads slowly: sends that find its
    /// socket full come back with `EAGAIN` (its FIN ends their wait for
    /// room, and a half-closed socket keeps waking them). They were taken
    /// for errors (a half-closed HTTP client pipelining a large file lost
    /// the rest of its answers: "write timeout" after 1 s of a 60 s one);
    /// sent again at once, they spun the loop while the client paused.
    /// Now every byte arrives, and the paused client costs the loop little.
    #[test]
    fn sends_to_a_half_closed_client_lose_nothing_and_do_not_spin() {
        use std::io::Read;
        const TOTAL: usize = 8 << 20;
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mut client, io) = half_closed_client(&r);
        // The client reads 2 MiB at a time, pausing between them.
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 0];
            let mut buf = vec![0u8; 1 << 16];
            let mut next_pause = 1 << 20;
            loop {
                if got.len() >= next_pause {
                    std::thread::sleep(Duration::from_millis(300));
                    next_pause += 2 << 20;
                }
                match client.read(&mut buf) {
                    Ok(0) => return got,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("client read: {e}"),
                }
            }
        });
        // Responses as a web server sends a cached file: a head, the
        // shared body, an end (gather sends).
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let body: Arc<[u8]> = (0..60_000).map(|i| (i % 251) as u8).collect();
        let body = crate::net::SharedBytes::from(body);
        let (mut data, mut i) = (Vec::with_capacity(TOTAL + 70_000), 0);
        let (start, cpu) = (Instant::now(), thread_cpu());
        turn_until(&r, "the sends never finished", || {
            while data.len() < TOTAL {
                let mut head = format!("{i:08}").into_bytes();
                let whole = [&head[..], &body[..], b"\r\n"].concat();
                match io.poll_write_shared(&mut cx, &mut head, &body, 0..body.len(), b"\r\n") {
                    std::task::Poll::Ready(Ok(())) => {
                        data.extend_from_slice(&whole);
                        i += 1;
                    }
                    std::task::Poll::Ready(Err(e)) => {
                        panic!("write after {} bytes: {e}", data.len())
                    }
                    std::task::Poll::Pending => return false,
                }
            }
            lock_std(&io.st).tx_idle()
        });
        let (wall, busy) = (start.elapsed(), thread_cpu() - cpu);
        let got = close_and_join(&r, io, reader);
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the bytes differ");
        // A spin takes the whole pause (and more); waiting takes little.
        // Where the kernel's buffers took every byte before the client's
        // first pause (7 ms in one CI run), there was no pause to spin in.
        if wall >= Duration::from_millis(250) {
            assert!(
                busy < wall / 2,
                "the loop used {busy:?} of CPU in {wall:?} of a paused client"
            );
        }
    }

    /// A half-closed client that read a little and then stopped, still
    /// connected: once its socket is closed, dropping what is unsent (a
    /// write timeout) or lingering over it in vain, the socket, its
    /// descriptor and its queued bytes are let go, whether the send waits
    /// for room or behind its resend delay. Before, neither could be
    /// cancelled by descriptor and the socket stayed for as long as the
    /// client did (a resend every 512 ms, for ever).
    #[test]
    fn a_half_closed_client_that_stopped_reading_is_let_go() {
        use std::io::Read;
        use std::sync::atomic::{AtomicBool, Ordering};
        for (gather, discard) in [(true, true), (true, false), (false, true), (false, false)] {
            let Some((r, _wake, _w)) = ring() else {
                return;
            };
            let (mut client, io) = half_closed_client(&r);
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let stop = Arc::new(AtomicBool::new(false));
            let stopped = stop.clone();
            // Reads 1 MiB at a time with pauses until told to stop, then
            // nothing, connected until the test ends.
            let reader = std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                let mut got = 0;
                while !stopped.load(Ordering::Relaxed) {
                    got += client.read(&mut buf).unwrap();
                    if got >= 1 << 20 {
                        got = 0;
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                let _ = done_rx.recv();
            });
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let body: Arc<[u8]> = vec![7u8; 60_000].into();
            let body = crate::net::SharedBytes::from(body);
            let mut big = vec![b'z'; 64 << 20];
            if !gather {
                assert!(io.poll_write_vec(&mut cx, &mut big).is_ready());
            }
            // The client stops while a send waits: gather sends right
            // after one came back with EAGAIN (sent again behind its
            // delay), the plain one while it waits for room.
            let start = Instant::now();
            loop {
                if gather {
                    // Gather sends until one waits.
                    let mut head = b"head".to_vec();
                    while io
                        .poll_write_shared(&mut cx, &mut head, &body, 0..body.len(), b"")
                        .is_ready()
                    {
                        head = b"head".to_vec();
                    }
                }
                let resends = || lock_std(&io.st).cold.as_ref().map_or(0, |c| c.resends);
                let before = resends();
                r.poll(Some(Duration::from_millis(5))).unwrap();
                let waited = start.elapsed() > Duration::from_secs(1);
                if waited && (!gather || resends() > before) {
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(5), "no EAGAIN came");
            }
            stop.store(true, Ordering::Relaxed);
            assert!(!lock_std(&io.st).tx_idle(), "the client took everything");
            if discard {
                io.discard_unsent();
            }
            io.release();
            let gone = Arc::downgrade(&io);
            drop(io);
            let at = Instant::now();
            while gone.upgrade().is_some() {
                assert!(
                    at.elapsed() < Duration::from_secs(3),
                    "gather {gather} discard {discard}: the socket is still there after {:?}",
                    at.elapsed()
                );
                r.poll(Some(Duration::from_millis(10))).unwrap();
            }
            drop(done_tx);
            reader.join().unwrap();
        }
    }

    /// A client far ahead of its reader: receiving stops at the queue's
    /// limit, and the reader still gets every byte, in order, and the end.
    /// With the kernel's total per receive the queue never holds more than
    /// the limit and one buffer; with the cancel alone, no more than one
    /// reap's worth of the ring's buffers past it (the cancel goes in at
    /// once). Before, the cancel waited for the turn's end and a client
    /// pipelining without reading held ~620 KB of a server per connection.
    #[test]
    fn a_receive_ahead_of_its_reader_stops_near_the_limit() {
        const TOTAL: usize = 4 << 20;
        for limited in [true, false] {
            let Some((r, _wake, _w)) = ring_with(limited) else {
                return;
            };
            let exact = r.recv_limit;
            let (mine, mut peer) = UnixStream::pair().unwrap();
            let io = Io::new(mine.into_raw_fd(), r.handle().clone());
            let writer = std::thread::spawn(move || {
                let mut at = 0u32;
                let mut block = vec![0u8; 64 * 1024];
                for _ in 0..TOTAL / block.len() {
                    for b in block.chunks_mut(4) {
                        b.copy_from_slice(&at.to_le_bytes());
                        at += 1;
                    }
                    peer.write_all(&block).unwrap();
                }
            });
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(io.poll_readable(&mut cx).is_pending());
            let mut most = 0;
            turn_until(&r, "the receive never filled the queue", || {
                most = most.max(lock_std(&io.st).unread());
                most >= RX_LIMIT
            });
            // The writer is still blocked: a few more turns bring nothing
            // past the bound.
            for _ in 0..20 {
                r.poll(Some(Duration::from_millis(2))).unwrap();
                most = most.max(lock_std(&io.st).unread());
            }
            let bound = match exact {
                true => RX_LIMIT + r.config.buffer_size as usize,
                false => RX_LIMIT + r.config.buffers as usize * r.config.buffer_size as usize,
            };
            assert!(
                most <= bound,
                "limited {limited} (kernel: {exact}): {most} bytes queued"
            );
            // The reader takes it all, in order, to the end.
            let (mut got, mut next) = (0, 0u32);
            let mut buf = vec![0u8; 10_000];
            let mut carry = Vec::new();
            turn_until(&r, "the reader never got every byte", || loop {
                match io.poll_read(&mut cx, &mut buf) {
                    std::task::Poll::Ready(Ok(0)) => return true,
                    std::task::Poll::Ready(Ok(n)) => {
                        got += n;
                        carry.extend_from_slice(&buf[..n]);
                        let whole = carry.len() / 4 * 4;
                        for w in carry[..whole].chunks(4) {
                            assert_eq!(u32::from_le_bytes(w.try_into().unwrap()), next);
                            next += 1;
                        }
                        carry.drain(..whole);
                        most = most.max(lock_std(&io.st).unread());
                    }
                    std::task::Poll::Ready(Err(e)) => panic!("read: {e}"),
                    std::task::Poll::Pending => return false,
                }
            });
            writer.join().unwrap();
            assert_eq!(got, TOTAL);
            assert!(most <= bound, "{most} bytes queued while reading");
            io.release();
        }
    }

    /// An accept the kernel never completes (the race [`Watch`] is for,
    /// made here by arming the accept on another, silent listener) is
    /// found and restarted: the client waiting on its own listener is
    /// accepted. Before, it waited for ever.
    #[test]
    fn an_accept_the_kernel_never_completes_is_restarted() {
        use std::os::unix::net::UnixListener;
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("duality-uring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("accept.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let silent_path = dir.join("silent.sock");
        let _ = std::fs::remove_file(&silent_path);
        let silent = UnixListener::bind(&silent_path).unwrap();
        let io = Io::new(listener.into_raw_fd(), r.handle().clone());
        {
            let mut st = lock_std(&io.st);
            let acc = &mut st.cold.get_or_insert_with(Default::default).acc;
            acc.want = true;
            let look = Instant::now() + r.config.quiet;
            let ud = r.ops.borrow_mut().insert(Op {
                io: Some(io.clone()),
                kind: OpKind::Accept(Watch::new(look)),
            });
            acc.armed = Some(ud);
            r.quiet_due.set(Some(look));
            let fd = types::Fd(silent.as_raw_fd());
            r.push(opcode::AcceptMulti::new(fd).build().user_data(ud));
        }
        let _client = UnixStream::connect(&path).unwrap();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut accepted = None;
        turn_until(&r, "the stuck accept was never restarted", || {
            if let std::task::Poll::Ready(fd) = io.poll_accept(&mut cx) {
                accepted = Some(fd.unwrap());
            }
            accepted.is_some()
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Reads `n` bytes from `io` through `buf`, turning `r` as needed.
    fn read_n(r: &UringReactor, io: &Arc<Io>, buf: &mut [u8], n: usize) -> Vec<u8> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut got = Vec::new();
        turn_until(r, "the bytes arrive", || {
            while let std::task::Poll::Ready(k) = io.poll_read(&mut cx, buf) {
                got.extend_from_slice(&buf[..k.unwrap()]);
            }
            got.len() >= n
        });
        got
    }

    /// A large read stops the ring's receive and reads with `recv`, but
    /// not before that receive has ended (its completions may hold bytes
    /// that came first): the bytes come in order. Small reads after it
    /// stay direct for a while, then the ring receives again.
    #[test]
    fn a_large_read_goes_direct_once_the_rings_receive_has_ended() {
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut small = [0u8; 16];
        assert!(io.poll_read(&mut cx, &mut small).is_pending());
        turn_until(&r, "the receive is armed", || {
            lock_std(&io.st).recv.is_some()
        });
        // More than the ring's buffers hold: its receive takes what they
        // hold and ends for lack of buffers (ENOBUFS), its completions not
        // read yet; the rest waits in the socket, where a `recv` now would
        // find bytes that come after those.
        let first: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        // (Room for all of it in the socket: this thread cannot wait.)
        socket2::SockRef::from(&peer)
            .set_send_buffer_size(1 << 20)
            .unwrap();
        peer.write_all(&first).unwrap();
        peer.write_all(b"-second").unwrap();
        let mut big = vec![0u8; super::DIRECT_MIN];
        assert!(io.poll_read(&mut cx, &mut big).is_pending(), "no recv yet");
        let want = [&first[..], b"-second"].concat();
        assert!(read_n(&r, &io, &mut big, want.len()) == want, "in order");
        assert!(
            lock_std(&io.st).recv.is_none(),
            "direct: the ring does not receive"
        );
        // Small reads stay direct for `DIRECT_STICKY` reads that find bytes.
        for i in 0..super::DIRECT_STICKY {
            peer.write_all(&[i]).unwrap();
            let std::task::Poll::Ready(n) = io.poll_read(&mut cx, &mut small) else {
                panic!("read {i} found nothing");
            };
            assert_eq!((n.unwrap(), small[0]), (1, i));
        }
        assert!(io.poll_read(&mut cx, &mut small).is_pending());
        turn_until(&r, "the ring receives again", || {
            lock_std(&io.st).recv.is_some()
        });
        peer.write_all(b"ring").unwrap();
        assert_eq!(read_n(&r, &io, &mut small, 4), b"ring");
    }

    /// A socket dropped with bytes its peer never reads is closed once its
    /// linger ends by a loop that has nothing else to wait for: the wait
    /// ends for it. Before, the loop slept on and the socket, its
    /// descriptor and its bytes stayed until other traffic woke it.
    #[test]
    fn a_lingering_socket_closes_on_time_in_an_idle_loop() {
        closes_in_an_idle_loop(false);
    }

    /// A socket whose unsent bytes were given up on (the peer stopped
    /// reading: a write timed out) closes at once, without its linger.
    #[test]
    fn a_socket_that_gave_up_on_its_bytes_closes_at_once() {
        closes_in_an_idle_loop(true);
    }

    /// A socket released after its loop's ring is gone (a connection
    /// dropped off its loop at shutdown, say) is dropped and its descriptor
    /// closed. It was put on the ring's dirty list, which no loop takes any
    /// more and which it kept alive itself: both stayed for ever.
    #[test]
    fn a_socket_released_after_its_loop_ended_is_closed() {
        use std::io::Read;
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        drop(r);
        io.release();
        let gone = Arc::downgrade(&io);
        drop(io);
        assert!(gone.upgrade().is_none(), "the socket outlived its release");
        // Closed: the peer reads the end.
        assert_eq!(peer.read(&mut [0u8; 8]).unwrap(), 0);
    }

    fn closes_in_an_idle_loop(discard: bool) {
        let Some((mut r, _wake, mut poke)) = ring() else {
            return;
        };
        if discard {
            // Long enough to tell a linger from none.
            r.config.linger = Duration::from_secs(30);
        }
        let (mine, _peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // More than both sockets' buffers take: the send stalls.
        let mut bytes = vec![b'z'; 8 << 20];
        assert!(io.poll_write_vec(&mut cx, &mut bytes).is_ready());
        turn_until(&r, "the send never went in", || {
            lock_std(&io.st).tx_busy > 0
        });
        if discard {
            io.discard_unsent();
        }
        io.release();
        let gone = Arc::downgrade(&io);
        drop(io);
        // An endless wait (the old behaviour) ends here after 1.5 s.
        let poker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            let _ = poke.write_all(b"x");
        });
        let t0 = Instant::now();
        while gone.upgrade().is_some() && t0.elapsed() < Duration::from_secs(5) {
            r.poll(None).unwrap();
        }
        let took = t0.elapsed();
        poker.join().unwrap();
        assert!(gone.upgrade().is_none(), "the socket outlived its linger");
        assert!(
            took < Duration::from_secs(1),
            "closed after {took:?} (linger {:?})",
            r.config.linger
        );
    }

    /// Reads `peer` to its end on a thread of its own.
    fn read_to_end(peer: UnixStream) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut &peer, &mut got).unwrap();
            got
        })
    }

    /// Closes `io` and turns the ring until `reader` has read everything.
    fn close_and_join(
        r: &UringReactor,
        io: Arc<Io>,
        reader: std::thread::JoinHandle<Vec<u8>>,
    ) -> Vec<u8> {
        io.release();
        drop(io);
        turn_until(r, "the socket never closed", || reader.is_finished());
        reader.join().unwrap()
    }

    /// A shared body whose gather send comes back short (a peer that does
    /// not read) goes on from where it lies: what is in flight still points
    /// into the body, and no connection holds a copy of it. (The rest was
    /// copied: clients pipelining requests for a 60 KB file and never
    /// reading held 60 KB each.) The peer then gets every byte, in order.
    #[test]
    fn a_short_gather_send_goes_on_from_the_shared_body() {
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mine, peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let body: Arc<[u8]> = (0..(4u32 << 20)).map(|i| (i * 7) as u8).collect();
        let body = crate::net::SharedBytes::from(body);
        let mut head = b"head:".to_vec();
        assert!(io
            .poll_write_shared(&mut cx, &mut head, &body, 3..body.len(), b"")
            .is_ready());
        let in_flight = || {
            r.ops
                .borrow()
                .values()
                .find_map(|op| match (&op.io, &op.kind) {
                    (Some(o), OpKind::Gather(g)) if Arc::ptr_eq(o, &io) => {
                        Some((g.head.len(), g.tail.parts[0].start))
                    }
                    (Some(o), OpKind::Send { buf, .. }) if Arc::ptr_eq(o, &io) => {
                        Some((buf.len(), usize::MAX))
                    }
                    _ => None,
                })
        };
        // The socket's buffers take a few hundred KiB: the first gather
        // comes back short, and its rest is in flight.
        turn_until(&r, "no short send", || {
            in_flight().is_some_and(|(_, start)| start > 3)
        });
        let (head_len, start) = in_flight().unwrap();
        assert_eq!(head_len, 0, "the head went first");
        assert!(start < body.len(), "sent from the body, at {start}");
        let reader = read_to_end(peer);
        turn_until(&r, "the body was never sent", || lock_std(&io.st).tx_idle());
        let got = close_and_join(&r, io, reader);
        assert_eq!(&got[..5], b"head:");
        assert!(got[5..] == body[3..], "{} bytes", got.len());
    }

    /// Bodies written in one turn (a pipeline of large cache values) go in
    /// one gather send, each from where it lies, with the bytes between
    /// them; past [`TAIL_PARTS`] bodies the writer waits for the send. Short
    /// sends go on across the bodies, and the peer gets every byte in order.
    #[test]
    fn bodies_written_in_one_turn_go_in_one_gather_send() {
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mine, peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let body: Arc<[u8]> = (0..(300u32 << 10)).map(|i| (i * 7) as u8).collect();
        let body = crate::net::SharedBytes::from(body);
        let mut want = Vec::new();
        for i in 0..TAIL_PARTS {
            let mut head = format!("VALUE k{i}\r\n").into_bytes();
            let range = i * 1000..body.len() - i;
            want.extend_from_slice(&head);
            want.extend_from_slice(&body[range.clone()]);
            want.extend_from_slice(b"\r\nEND\r\n");
            assert!(io
                .poll_write_shared(&mut cx, &mut head, &body, range, b"\r\nEND\r\n")
                .is_ready());
            assert!(head.is_empty());
        }
        // Bytes written behind them join the last body's.
        assert!(io.poll_write(&mut cx, b"tail").is_ready());
        want.extend_from_slice(b"tail");
        let copies = {
            let st = lock_std(&io.st);
            let t = st.tx_tail.as_ref().unwrap();
            assert_eq!(t.parts.len(), TAIL_PARTS);
            st.tx.len() + t.copied()
        };
        assert!(copies < 300, "{copies} bytes copied");
        // One body more waits for the send.
        let mut head = b"more".to_vec();
        assert!(io
            .poll_write_shared(&mut cx, &mut head, &body, 0..10, b"")
            .is_pending());
        // One send in flight carries them all (the socket takes a few
        // hundred KiB of the ~4.7 MiB: it comes back short).
        r.poll(Some(Duration::ZERO)).unwrap();
        let gathers = || {
            r.ops
                .borrow()
                .values()
                .filter(|op| matches!(op.kind, OpKind::Gather(_)))
                .count()
        };
        assert_eq!(gathers(), 1);
        let reader = read_to_end(peer);
        turn_until(&r, "the bodies were never sent", || {
            lock_std(&io.st).tx_idle()
        });
        // Now it goes.
        assert!(io
            .poll_write_shared(&mut cx, &mut head, &body, 0..10, b"")
            .is_ready());
        want.extend_from_slice(b"more");
        want.extend_from_slice(&body[..10]);
        turn_until(&r, "the last body was never sent", || {
            lock_std(&io.st).tx_idle()
        });
        let got = close_and_join(&r, io, reader);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the byte stream differs");
    }

    /// A receive that completes as bytes come, or waits on a socket with
    /// nothing to read, is never taken for a stuck one. (Without the total
    /// limit: the stream here passes `RX_LIMIT`, where a limited receive
    /// ends by design.)
    #[test]
    fn a_healthy_receive_is_left_alone() {
        let Some((r, _wake, _w)) = ring_with(false) else {
            return;
        };
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(io.poll_readable(&mut cx).is_pending());
        turn_until(&r, "no receive armed", || lock_std(&io.st).recv.is_some());
        let armed = lock_std(&io.st).recv;
        // Ten looks' worth of silence, then a steady stream for as long.
        let quiet_until = Instant::now() + 10 * r.config.quiet;
        turn_until(&r, "", || Instant::now() > quiet_until);
        let mut sent = 0;
        let mut got = Vec::new();
        let busy_until = Instant::now() + 10 * r.config.quiet;
        turn_until(&r, "", || {
            peer.write_all(&[b'x'; 512]).unwrap();
            sent += 512;
            let mut buf = [0u8; 4096];
            let n = lock_std(&io.st).take_rx(&mut buf);
            got.extend_from_slice(&buf[..n]);
            Instant::now() > busy_until
        });
        assert_eq!(lock_std(&io.st).recv, armed, "the receive was restarted");
        turn_until(&r, "bytes missing", || {
            let mut buf = [0u8; 4096];
            let n = lock_std(&io.st).take_rx(&mut buf);
            got.extend_from_slice(&buf[..n]);
            got.len() == sent
        });
        assert!(got.iter().all(|&b| b == b'x'));
    }

    /// An idle connection's armed receive is an `Op` in the loop's table:
    /// its watch kept it at 40 bytes only with its time as a `Tick` (an
    /// `Instant` made it 48, 8 bytes more per idle connection: 606-608
    /// bytes each in `bench idle` against memcached's 602).
    #[test]
    fn an_armed_receive_stays_small() {
        assert!(
            std::mem::size_of::<super::Op>() <= 40,
            "Op is {} bytes",
            std::mem::size_of::<super::Op>()
        );
    }

    #[test]
    fn ticks_compare_across_the_wrap() {
        use super::Tick;
        let now = Instant::now();
        let t = Tick::of(now + Duration::from_millis(50));
        assert!(!t.by(now));
        assert!(t.by(now + Duration::from_millis(50)));
        assert!(t.by(now + Duration::from_secs(60)));
        let near = t.near(now);
        assert!(near >= now + Duration::from_millis(49) && near <= now + Duration::from_millis(51));
        // Across 2^32 ms: the difference decides, not the raw values.
        assert!(Tick(u32::MAX - 5).at_or_before(Tick(5)));
        assert!(!Tick(5).at_or_before(Tick(u32::MAX - 5)));
        assert!(Tick(7).at_or_before(Tick(7)));
    }

    /// Every connection, idle ones included, has an `Io` behind an `Arc`:
    /// keep it within the allocator's 160-byte class (it was 256; readiness,
    /// listener state and receive errors live in a box made on first use,
    /// a queued shared body in a box of its own, spare buffers in the
    /// thread's pool).
    #[test]
    fn a_sockets_ring_state_stays_small() {
        let arc_header = 2 * std::mem::size_of::<usize>();
        assert!(
            std::mem::size_of::<super::Io>() + arc_header <= 160,
            "Io is {} bytes",
            std::mem::size_of::<super::Io>()
        );
    }

    #[test]
    fn small_buffers_are_spares_for_the_next_socket_and_large_ones_are_freed() {
        let b: Vec<u8> = Vec::with_capacity(100);
        let p = b.as_ptr();
        keep_buf(b, Spare::Rx);
        // A socket receiving next takes it (an idle one held none).
        let mut st = St::default();
        st.push_rx(b"get k\r\n");
        assert_eq!(st.rx.as_ptr(), p);
        assert_eq!(&st.rx[..], b"get k\r\n");
        keep_buf(Vec::with_capacity(4 * Spare::Rx.keep()), Spare::Rx);
        assert_eq!(
            spare_buf(Spare::Rx).capacity(),
            0,
            "a large buffer is not kept"
        );
    }

    #[test]
    fn a_writer_whose_buffer_the_queue_took_gets_a_spare() {
        let sent: Vec<u8> = Vec::with_capacity(300);
        let p = sent.as_ptr();
        keep_buf(sent, Spare::Tx);
        // A drained receive queue is not what a writer gets.
        keep_buf(Vec::with_capacity(64), Spare::Rx);
        let mut out = Vec::new();
        give_spare(&mut out);
        assert_eq!(out.as_ptr(), p, "the kept buffer, not a new one");
        assert!(out.capacity() >= 300 && out.is_empty());
        // One that still has room keeps its own.
        let mut own = Vec::with_capacity(64);
        let q = own.as_ptr();
        give_spare(&mut own);
        assert_eq!(own.as_ptr(), q);
    }

    /// A reader that takes only part of what arrived, every time, while
    /// bytes keep coming: the queue holds about what is unread, not every
    /// byte ever received (it held all 64 MiB before `push_rx`).
    #[test]
    fn a_reader_that_never_catches_up_keeps_the_queue_small() {
        let mut st = St::default();
        let chunk = [7u8; 4096];
        for _ in 0..16 * 1024 {
            st.push_rx(&chunk);
            // Read three quarters of what is unread.
            st.rx_pos += (st.unread() * 3 / 4) as u32;
            assert!(st.unread() > 0);
        }
        assert!(
            st.rx.len() <= 4 * (st.unread() + chunk.len()),
            "queue {} bytes for {} unread",
            st.rx.len(),
            st.unread()
        );
        assert!(st.rx.capacity() < 1 << 20, "capacity {}", st.rx.capacity());
        assert!(st.rx[st.rx_pos as usize..].iter().all(|&b| b == 7));
    }

    /// A turn's completions can bring far more than `RX_LIMIT` before the
    /// receive's cancel takes effect: the excess is kept in chunks (the
    /// queue's capacity does not double for it), read back in order, and
    /// freed as it is read.
    #[test]
    fn bytes_past_the_limit_wait_in_chunks_in_order() {
        let mut st = St::default();
        let mut sent = 0u32;
        let mut chunk = [0u8; 4096];
        while st.unread() < RX_LIMIT + (2 << 20) {
            for b in chunk.chunks_mut(4) {
                b.copy_from_slice(&sent.to_le_bytes());
                sent += 1;
            }
            st.push_rx(&chunk);
        }
        assert!(
            st.rx.capacity() <= RX_LIMIT + chunk.len(),
            "capacity {}",
            st.rx.capacity()
        );
        let total = st.unread();
        let mut buf = vec![0u8; 10_000];
        let (mut got, mut next) = (0, 0u32);
        while st.unread() > 0 {
            let n = st.take_rx(&mut buf);
            assert!(n == buf.len() || st.unread() == 0, "a short read of {n}");
            got += n;
            // 4-byte words throughout (reads and chunks are multiples of 4).
            for w in buf[..n].chunks(4) {
                assert_eq!(u32::from_le_bytes(w.try_into().unwrap()), next);
                next += 1;
            }
        }
        assert_eq!(got, total);
        assert_eq!(next, sent);
        assert!(st.cold.as_ref().unwrap().rx_over.is_empty());
    }

    /// Appending keeps the unread bytes and their order.
    #[test]
    fn appending_keeps_what_is_unread_in_order() {
        let mut st = St::default();
        st.push_rx(b"abcdef");
        st.rx_pos = 4;
        st.push_rx(b"gh");
        assert_eq!(&st.rx[st.rx_pos as usize..], b"efgh");
        st.rx_pos += 1;
        st.push_rx(b"i");
        assert_eq!(&st.rx[st.rx_pos as usize..], b"fghi");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::DirtyList;
    use crate::event_loop::registry::SleepGate;
    use crate::loom::{thread, Arc, AtomicBool, AtomicUsize, Mutex};
    use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

    /// A socket released on another thread while its loop ends: it is
    /// either listed before the end, and the end hands it to the loop to
    /// drop, or not listed at all (its releaser keeps and drops it); never
    /// left on the list, where nobody would drop it.
    #[test]
    fn loom_dirty_list_vs_end() {
        loom::model(|| {
            let list = Arc::new(DirtyList::new());
            let queued = Arc::new(AtomicBool::new(false));
            let made = Arc::new(AtomicUsize::new(0));
            let releaser = {
                let (list, queued, made) = (list.clone(), queued.clone(), made.clone());
                thread::spawn(move || {
                    list.mark(&queued, || {
                        made.fetch_add(1, Relaxed);
                    })
                })
            };
            let mut ended = list.take().len();
            ended += list.end().len();
            let listed = releaser.join().unwrap();
            assert_eq!(made.load(Relaxed), usize::from(listed));
            assert_eq!(ended, usize::from(listed), "listed, yet not handed over");
            assert!(list.take().is_empty() && list.end().is_empty());
            assert!(!list.mark(&Arc::new(AtomicBool::new(false)), || ()));
        });
    }

    /// A socket changes its state twice from another thread (two writes,
    /// say) while its loop takes the dirty list and goes to sleep: whatever
    /// the interleaving, the loop either sees the last state or is woken,
    /// exactly once per sleep.
    #[test]
    fn loom_dirty_list_vs_sleep() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound.get_or_insert(3);
        model.check(|| {
            let list = Arc::new(DirtyList::new());
            let queued = Arc::new(AtomicBool::new(false));
            let state = Arc::new(Mutex::new(0u32));
            let gate = Arc::new(SleepGate::new());
            let wakes = Arc::new(AtomicUsize::new(0));
            let producer = {
                let (list, queued, state, gate, wakes) = (
                    list.clone(),
                    queued.clone(),
                    state.clone(),
                    gate.clone(),
                    wakes.clone(),
                );
                thread::spawn(move || {
                    for v in 1..=2 {
                        *crate::loom::lock(&state) = v;
                        if list.mark(&queued, || ()) && gate.notify() {
                            wakes.fetch_add(1, Relaxed);
                        }
                    }
                })
            };
            // The loop: announce the sleep, take the list, look at each item.
            let slept = gate.prepare_sleep(|| false);
            let mut seen = 0;
            for () in list.take() {
                queued.store(false, Release);
                seen = *crate::loom::lock(&state);
            }
            // Here the loop blocks in io_uring_enter if `slept`.
            producer.join().unwrap();
            let w = wakes.load(Relaxed);
            assert!(w <= 1, "one eventfd write per sleep");
            if slept && seen != 2 {
                assert_eq!(w, 1, "asleep with a change it never saw, and no wake-up");
            }
            // Whatever was missed is listed for the next turn.
            if seen != 2 {
                assert!(queued.load(Acquire));
                assert_eq!(list.take().len(), 1);
            }
        });
    }
}
