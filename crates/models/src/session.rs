//! The session driver: one connection loop under every server, and the small
//! protocol seam a server implements to use it.
//!
//! A server is a [`Protocol`] — how to find one request in bytes (pure, over
//! a slice), which color it has, how to execute it and append its response
//! (pelikan's `Parse` / `Execute` / `Compose`). A [`Driver`] (the protocol
//! and the batch limits, made once per server) and [`drive`] do the rest,
//! the same way in every threading model:
//!
//! ```text
//! loop
//!   idle: wait for readability holding no buffer          (readable_for)
//!   take a buffer set from this thread's pool, read into its free tail
//!   serve the buffered bytes as batches:                  ← batching point:
//!     inline models:    serve_bytes here, under color locks   one job per read,
//!     hand-off models:  move the set (one box) + session to    not per request
//!                       a payload thread, serve_bytes there, move back
//!     a batch stops at: an incomplete request, a color that belongs to
//!     another payload thread (amped), its request or output budget, Close
//!   write every response of the read with one write       ← batching point
//!   nothing left over → the set goes back to the pool
//! ```
//!
//! Metrics (always on, no clock read of their own but one per write): the
//! start of the poll whose read completed the requests is their arrival;
//! each write of responses records, for the requests it answers, the time
//! to first byte and how long the writing poll has held the loop
//! (`duality_rt::stats::record_first_byte`).
//!
//! Buffer rules: a read buffer is zero-filled once, when it is made, never
//! per read; it grows only as far as the pending request says it needs
//! ([`Parsed::Incomplete`]), up to [`Protocol::max_request`], and is swapped
//! back for a standard one as soon as the large request is served. An idle
//! connection holds no buffer: its task is the driver's future (the
//! connection, the session, a pointer to the driver, a timer slot; 184 bytes
//! for the cache in a release build, 192 in a debug one, which
//! `tests/kv_limits.rs` holds),
//! and the set (read and response buffers and where the connection is in
//! them) is a box taken per busy spell. Per-thread pools keep at most
//! [`POOL_KEEP`] sets, so memory goes back once connections close. A loop
//! with that many hand-offs out (a burst queued on the payload threads)
//! hands a small request off in a buffer of its size and keeps the set.
//!
//! Fairness: a batch executes at most [`DriverConfig::max_batch_requests`]
//! requests and buffers at most [`DriverConfig::max_batch_output`] bytes of
//! responses before the driver writes them and yields to the loop; the
//! runtime's I/O budget (`duality_rt::coop`) bounds the rest.
//!
//! Responses that cannot be made from bytes alone: a response may carry a
//! shared body ([`Output::share`], a cached file or a cache value sent from
//! where it lies, not copied; the bodies of a batch go in one gather send
//! under io_uring), and a request whose answer must wait
//! (the file system, a body sent from a file with `sendfile`, a job on a
//! pool) returns [`Flow::Finish`]: the driver writes the responses before
//! it, then awaits [`Protocol::finish`] on the connection's loop, boxed (its
//! state stays out of every idle connection's future), and serves on.
//!
//! Timeouts ([`DriverConfig`]), each optional, through one timer per
//! connection moved at each wait: `idle_timeout` bounds the wait for a
//! request's first byte; `request_timeout` is a deadline for the whole
//! request from its first byte (a client dribbling a byte at a time is cut
//! off however steadily it dribbles); `write_timeout` bounds each write. A
//! protocol may answer a timeout before the connection closes
//! ([`Protocol::timed_out`], say a `408`) and may ask for a lingering close
//! ([`Protocol::linger`]).

use crate::payload::{Held, Lane};
use crate::{Conn, Payload, DEFAULT_COLOR};
use duality_rt::net::SharedBytes;
use duality_rt::time::{loop_now, sleep_until, Sleep};
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the driver does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Serve the next request.
    Continue,
    /// Write what is buffered, then close the connection.
    Close,
    /// The response must wait for something (the file system, a body sent
    /// from a file, a job on a pool, a client reading a long answer): the
    /// driver writes what is buffered (the responses before it, and any
    /// beginning of its own that `execute` appended), then awaits
    /// [`Protocol::finish`] for this request on the connection's loop and
    /// serves on after it. The number goes to `finish` as it is: how far
    /// `execute` got (a key number), or anything the protocol likes.
    Finish(u32),
}

/// Which of [`DriverConfig`]'s timeouts ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// No request began within `idle_timeout`.
    Idle,
    /// A request began and did not arrive whole within `request_timeout`.
    Request,
    /// The client took none of a response for `write_timeout`.
    Write,
}

/// Where [`Protocol::execute`] puts its response: bytes (an `Output`
/// dereferences to the `Vec<u8>` they are appended to) with shared bodies
/// among them, sent from where they lie instead of being copied.
#[derive(Debug, Default)]
pub struct Output {
    bytes: Vec<u8>,
    /// In the order of their places (`at` never decreases).
    shared: Vec<Shared>,
    /// Bytes committed (see [`commit`](Self::commit)).
    committed: usize,
}

#[derive(Debug)]
struct Shared {
    body: SharedBytes,
    range: Range<usize>,
    /// Where in `bytes` the body goes (their length when it was shared).
    at: usize,
}

impl Output {
    /// Most bodies an output shares; more are copied in.
    pub const MAX_SHARED: usize = 16;

    /// An empty output whose bytes have room for `n` without growing.
    pub fn with_capacity(n: usize) -> Output {
        Output {
            bytes: Vec::with_capacity(n),
            shared: Vec::new(),
            committed: 0,
        }
    }

    /// Sends `body[range]` after the bytes appended so far, from `body`
    /// itself (a cached file's body, a cache item's value: no copy); bytes
    /// appended later follow it. The driver writes the output (in one
    /// gather send under io_uring) once a batch ends, or once its bodies
    /// reach [`MAX_SHARED`](Self::MAX_SHARED) or 1 MiB; a body past
    /// `MAX_SHARED` is copied in. A `range` outside `body` is an empty body.
    pub fn share(&mut self, body: impl Into<SharedBytes>, range: Range<usize>) {
        let body = body.into();
        if self.shared.len() >= Self::MAX_SHARED {
            self.bytes
                .extend_from_slice(body.get(range).unwrap_or_default());
            return;
        }
        let at = self.bytes.len();
        self.shared.push(Shared { body, range, at });
    }

    /// True if a body waits to be sent among the bytes.
    pub fn has_shared(&self) -> bool {
        !self.shared.is_empty()
    }

    /// True if a body was shared after the first `at` bytes were appended
    /// (its place is past them): bytes from `at` on are not to be cut then.
    pub fn has_shared_after(&self, at: usize) -> bool {
        self.shared.last().is_some_and(|s| s.at > at)
    }

    /// Bytes of the shared bodies (0 if none).
    #[inline]
    pub fn shared_len(&self) -> usize {
        // (Asked per request: most outputs share nothing.)
        if self.shared.is_empty() {
            return 0;
        }
        self.shared
            .iter()
            .filter_map(|s| s.body.get(s.range.clone()))
            .map(<[u8]>::len)
            .sum()
    }

    /// How many bodies are shared so far: what
    /// [`shared_bodies`](Self::shared_bodies) of a response appended later
    /// starts from.
    #[inline]
    pub fn shared_count(&self) -> usize {
        self.shared.len()
    }

    /// The bodies shared from the `from`th on, as they will be sent (a
    /// protocol accounting for memory its sends hold: the same body shared
    /// twice holds it once).
    pub fn shared_bodies(&self, from: usize) -> impl Iterator<Item = &[u8]> {
        self.shared
            .get(from..)
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s.body.get(s.range.clone()))
    }

    /// Marks the answers so far as ones a protocol closing the connection
    /// still sends (memcached writes its answers out after each text get):
    /// it cuts the output at [`committed`](Self::committed). The mark goes
    /// when the output is written.
    pub fn commit(&mut self) {
        self.committed = self.bytes.len();
    }

    /// Bytes committed (see [`commit`](Self::commit)); 0 if none.
    pub fn committed(&self) -> usize {
        self.committed
    }

    /// Drops everything: the bytes, the shared bodies and the mark.
    #[inline]
    pub fn clear(&mut self) {
        self.bytes.clear();
        if !self.shared.is_empty() {
            self.shared.clear();
        }
        self.committed = 0;
    }

    /// Keeps the first `len` bytes and the bodies shared before them
    /// (placed at or before `len`); drops the rest.
    pub fn truncate(&mut self, len: usize) {
        self.committed = self.committed.min(len);
        self.bytes.truncate(len);
        while self.shared.last().is_some_and(|s| s.at > len) {
            self.shared.pop();
        }
    }

    /// What has been appended, as a figure that changes whenever bytes or
    /// a shared body are appended (not a length).
    #[inline]
    fn size(&self) -> (usize, usize) {
        (self.bytes.len(), self.shared.len())
    }

    /// True if anything waits to be written.
    pub fn is_pending(&self) -> bool {
        !self.bytes.is_empty() || !self.shared.is_empty()
    }

    /// Copies the shared bodies into the bytes, where they belong (for a
    /// writer that can only send bytes, or one that cuts the output).
    pub fn settle(&mut self) {
        // Last first: an insertion moves only the bytes after it.
        while let Some(Shared { body, range, at }) = self.shared.pop() {
            self.insert(at, body.get(range).unwrap_or(&[]));
        }
    }

    /// Copies the bodies shared after the first `at` bytes were appended
    /// into the bytes, where they belong (for a protocol that cuts its
    /// answer from `at` on); the bytes before `at` stay where they are.
    pub fn settle_after(&mut self, at: usize) {
        // Last first: an insertion moves only the bytes after it.
        while self.shared.last().is_some_and(|s| s.at > at) {
            let Some(Shared { body, range, at }) = self.shared.pop() else {
                break;
            };
            self.insert(at, body.get(range).unwrap_or(&[]));
        }
    }

    /// Copies `part` in at byte `at` (a body that was shared there).
    fn insert(&mut self, at: usize, part: &[u8]) {
        let at = at.min(self.bytes.len());
        if at < self.committed {
            self.committed += part.len();
        }
        self.bytes.splice(at..at, part.iter().copied());
    }

    /// True when a batch should stop to write: its shared bodies are as
    /// many as an output takes, or 1 MiB (memory held for the send).
    #[inline]
    fn shared_full(&self) -> bool {
        !self.shared.is_empty()
            && (self.shared.len() >= Self::MAX_SHARED || self.shared_len() >= SHARED_BATCH)
    }
}

/// Bytes of shared bodies past which a batch stops to write them.
const SHARED_BATCH: usize = 1 << 20;

impl Deref for Output {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl AsRef<[u8]> for Output {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl DerefMut for Output {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

/// How many requests apart the driver shows a protocol what follows
/// ([`Protocol::look_ahead`]): hints of several requests at once overlap
/// their own memory reads (a hint per request would wait for each).
pub const LOOK_AHEAD_EVERY: usize = 8;

/// What [`Protocol::parse`] found at the front of its input.
#[derive(Debug)]
pub enum Parsed<R> {
    /// One request, `usize` bytes long.
    Request(R, usize),
    /// No whole request yet. The number is how many bytes (from the front of
    /// the input) the request needs in all, if the protocol knows (a declared
    /// value length), else 0: the driver grows its buffer only that far.
    Incomplete(usize),
    /// Bytes to drop without a response (e.g. the rest of a value being
    /// discarded after an error). Must be at least 1.
    Skip(usize),
}

/// A server's protocol: everything the driver needs to know about it.
///
/// `parse` must be pure over its input (plus the session's own state) and
/// must never ask for more than [`max_request`](Protocol::max_request) bytes:
/// it decides "too large" before the bytes arrive.
pub trait Protocol: Send + Sync + 'static {
    /// Per-connection protocol state (e.g. bytes still to discard). It moves
    /// with the buffers when a batch hops to a payload thread.
    type Session: Default + Send + 'static;
    /// One parsed request, borrowing the input.
    type Request<'a>;

    /// False (the default): colors are kept exclusive by the model (color
    /// locks or affinity). True: the protocol's own state already keeps each
    /// color exclusive (e.g. one lock per shard), so the driver takes no
    /// second lock; colors then only route work.
    const LOCKS_ITSELF: bool = false;

    /// False (the default): at the server's shutdown, requests that had
    /// arrived are answered before the connection closes (a cache: its
    /// clients do not send a request twice). True: the connection ends at
    /// the next response boundary, requests buffered behind the batch in
    /// progress not started (HTTP: a client retries them elsewhere, as after
    /// nginx's close at a graceful stop; a client pipelining without end
    /// would hold the stop for its whole grace).
    const SHUTDOWN_AT_BOUNDARY: bool = false;

    /// The most bytes one request may need buffered at once: how far the
    /// driver lets its buffer grow (at least 16 KiB) for a request still
    /// coming. The driver does not answer an oversized request itself: past
    /// the bound it closes the connection silently, so `parse` should refuse
    /// one first (a request of its own that `execute` answers with an
    /// error, see `examples/counter.rs`).
    fn max_request(&self) -> usize;

    /// Finds the request at the front of `input`.
    fn parse<'a>(&self, session: &mut Self::Session, input: &'a [u8]) -> Parsed<Self::Request<'a>>;

    /// The request's color: two requests of one color never execute at the
    /// same time.
    fn color(&self, _req: &Self::Request<'_>) -> u64 {
        DEFAULT_COLOR
    }

    /// The color of the request at the front of `input`, without changing
    /// the session; `None` if unknown. Used where the model routes a batch by
    /// its first request's color (`amped` with several payload threads).
    fn peek_color(&self, _session: &Self::Session, _input: &[u8]) -> Option<u64> {
        None
    }

    /// A hint of the bytes that follow a request in the same read (`rest`:
    /// the next requests, the last perhaps in part), just before it
    /// executes: a protocol may start fetching what the next requests will
    /// need, so that their memory reads overlap each other and this one's
    /// work (the cache hints the items of pipelined requests). The driver calls
    /// it before the first request of a batch and every
    /// [`LOOK_AHEAD_EVERY`]th after it, whenever bytes follow: hints for up
    /// to that many requests ahead are all it asks for. It must change
    /// nothing a request can see, and be cheap. The default does nothing.
    fn look_ahead(&self, _session: &Self::Session, _rest: &[u8]) {}

    /// Executes `req`, appending its response to `out`.
    fn execute(
        &self,
        session: &mut Self::Session,
        req: Self::Request<'_>,
        out: &mut Output,
    ) -> Flow;

    /// Finishes the response to a request whose `execute` returned
    /// [`Flow::Finish`]`(progress)` (`request`: the bytes `parse` consumed
    /// for it), on the
    /// connection's own loop, after the responses before it were written.
    /// It appends to [`Reply::out`] and writes with [`Reply::flush`] or
    /// through [`Reply::conn`] as it needs; the driver writes what it
    /// leaves. The default, for protocols that never finish: close.
    fn finish<'a>(
        &'a self,
        _session: &'a mut Self::Session,
        _request: &'a [u8],
        _progress: u32,
        _reply: Reply<'a>,
    ) -> impl Future<Output = Flow> + Send + 'a {
        async { Flow::Close }
    }

    /// The driver is about to wait for the client, holding `partial` of its
    /// next request (empty: none). What the protocol appends to `out` (an
    /// interim `100 Continue`, say) is written first.
    fn waiting(&self, _session: &mut Self::Session, _partial: &[u8], _out: &mut Output) {}

    /// One of the driver's timeouts ran out, holding `partial` of the next
    /// request (empty: none; what a log may show of it); what the protocol
    /// appends to `out` (say, a `408`) is written before the connection
    /// closes.
    fn timed_out(
        &self,
        _session: &mut Self::Session,
        _which: Timeout,
        _partial: &[u8],
        _out: &mut Output,
    ) {
    }

    /// A request closed the connection (`unread`: the client had sent more
    /// after it): `Some` to close lingering within those bounds — shut the
    /// write side, then read and drop what the client still sends: closing
    /// a socket with unread input makes the kernel send a reset, which can
    /// destroy the last response before the client reads it (nginx's
    /// `lingering_close`). [`Linger::default`] is short (1 s, 64 KiB).
    fn linger(&self, _session: &Self::Session, _unread: bool) -> Option<Linger> {
        None
    }

    /// The driver has written every response buffered so far (the output
    /// is empty): a protocol that accounts for memory its responses hold
    /// gives it back here.
    fn drained(&self, _session: &mut Self::Session) {}

    /// How long the connection may now stay silent before it closes
    /// ([`Timeout::Idle`]), where it differs from the driver's idle timeout
    /// (`None`: the driver's). E.g. a request body the protocol drops as it
    /// arrives is given less than a keep-alive wait.
    fn idle_timeout(&self, _session: &Self::Session) -> Option<Duration> {
        None
    }

    /// How long a request that has begun (`pending`: its bytes so far) may
    /// take to arrive whole ([`Timeout::Request`]), where it differs from the
    /// driver's request timeout (`None`: the driver's). Asked at each wait
    /// for more of it; a deadline once set stays until the protocol says
    /// `None`. E.g. the cache gives a command line that has not ended its
    /// idle timeout (memcached closes a connection idle in mid-line), but
    /// not a value on its way.
    fn request_timeout(&self, _session: &Self::Session, _pending: &[u8]) -> Option<Duration> {
        None
    }

    /// True while the session is inside a request although no bytes of it
    /// are buffered (a shutdown then lets it finish).
    fn mid_request(&self, _session: &Self::Session) -> bool {
        false
    }

    /// The session of a new connection (by default `Session::default()`):
    /// where a server records what it keeps per connection (e.g. the
    /// cache's `stats conns` entry, removed when the session drops).
    fn session(&self, _conn: &Conn) -> Self::Session {
        Self::Session::default()
    }
}

/// Why [`serve_bytes`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The rest is an incomplete request needing this many bytes in all (0:
    /// unknown), or nothing.
    NeedMore(usize),
    /// The batch's request or output budget is spent: write, yield, go on.
    Budget,
    /// The next request's color belongs to another payload thread.
    Elsewhere(u64),
    /// The next request's color lock is another thread's, and the lane is a
    /// loop's, which does not wait for it: wait for it with
    /// [`Lane::hold`] (as a task) and serve on holding it.
    Busy(u64),
    /// A request asked to close the connection.
    Close,
    /// A response shares a body ([`Output::share`]): write before serving
    /// on.
    Write,
    /// The last request served, the last `len` bytes of the input used,
    /// waits for [`Protocol::finish`] (not counted in `requests`), with the
    /// `progress` its [`Flow::Finish`] gave.
    Finish {
        /// The request's length.
        len: usize,
        /// What `execute` handed on.
        progress: u32,
    },
}

/// What [`serve_bytes`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// Bytes of the input consumed.
    pub used: usize,
    /// Requests executed.
    pub requests: usize,
    /// Requests among them that appended an answer (a `noreply` store, or
    /// a quiet hit, appends none): those the time-to-first-byte metrics
    /// count, whatever else shares their read.
    pub answered: usize,
    /// Why it stopped.
    pub stop: Stop,
}

/// Bounds of one batch.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    /// Most requests executed.
    pub max_requests: usize,
    /// Stop once this many response bytes are buffered.
    pub max_output: usize,
}

/// Parses and executes the requests at the front of `input` in order,
/// appending their responses to `out`, while `lane` admits their colors and
/// the batch's limits allow. The core every driver shares (the tokio peer
/// calls it with [`Lane::single`]).
pub fn serve_bytes<P: Protocol>(
    proto: &P,
    session: &mut P::Session,
    input: &[u8],
    out: &mut Output,
    lane: &Lane,
    limits: BatchLimits,
) -> Served {
    serve_holding(proto, session, input, out, lane, limits, None)
}

/// [`serve_bytes`], starting with `held` (a color lock waited for after
/// [`Stop::Busy`]) as the current run's lock.
pub(crate) fn serve_holding<'l, P: Protocol>(
    proto: &P,
    session: &mut P::Session,
    input: &[u8],
    out: &mut Output,
    lane: &'l Lane,
    limits: BatchLimits,
    mut held: Option<Held<'l>>,
) -> Served {
    let mut used = 0;
    let mut requests = 0;
    let mut answered = 0;
    // A protocol that locks itself, on a lane without affinity, never needs
    // a color: do not compute one (for the cache, a hash per request).
    let colored = lane.uses_colors(!P::LOCKS_ITSELF);
    // `held`: the color lock of the current run of one color (dropped on
    // return: never held across the write or an await).
    loop {
        if out.shared_full() {
            return Served {
                used,
                requests,
                answered,
                stop: Stop::Write,
            };
        }
        // A spent budget yields only with input left to serve (else the
        // driver reads next anyway; memcached's conn_yields counts the same).
        if (requests >= limits.max_requests || out.len() >= limits.max_output) && used < input.len()
        {
            return Served {
                used,
                requests,
                answered,
                stop: Stop::Budget,
            };
        }
        match proto.parse(session, &input[used..]) {
            Parsed::Incomplete(need) => {
                proto.waiting(session, &input[used..], out);
                return Served {
                    used,
                    requests,
                    answered,
                    stop: Stop::NeedMore(need),
                };
            }
            Parsed::Skip(n) => {
                let n = n.min(input.len() - used);
                if n == 0 {
                    proto.waiting(session, &input[used..], out);
                    return Served {
                        used,
                        requests,
                        answered,
                        stop: Stop::NeedMore(0),
                    };
                }
                used += n;
            }
            Parsed::Request(req, n) => {
                let color = if colored {
                    proto.color(&req)
                } else {
                    DEFAULT_COLOR
                };
                if !lane.admits(color) {
                    return Served {
                        used,
                        requests,
                        answered,
                        stop: Stop::Elsewhere(color),
                    };
                }
                let before = out.size();
                let rest = &input[used + n..];
                let look = requests.is_multiple_of(LOOK_AHEAD_EVERY) && !rest.is_empty();
                let Some(flow) = lane.run_held(color, !P::LOCKS_ITSELF, &mut held, || {
                    if look {
                        proto.look_ahead(session, rest);
                    }
                    proto.execute(session, req, out)
                }) else {
                    return Served {
                        used,
                        requests,
                        answered,
                        stop: Stop::Busy(color),
                    };
                };
                used += n;
                // (A request handed to `finish` is counted there.)
                let grew = usize::from(out.size() != before);
                match flow {
                    Flow::Continue => {
                        requests += 1;
                        answered += grew;
                    }
                    Flow::Close => {
                        return Served {
                            used,
                            requests: requests + 1,
                            answered: answered + grew,
                            stop: Stop::Close,
                        }
                    }
                    Flow::Finish(progress) => {
                        return Served {
                            used,
                            requests,
                            answered,
                            stop: Stop::Finish { len: n, progress },
                        }
                    }
                }
            }
        }
    }
}

/// How the driver treats a connection.
#[derive(Clone, Copy, Debug)]
pub struct DriverConfig {
    /// Close a connection that sends nothing for this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Close a connection whose request began but has not arrived whole
    /// this long after its first byte (`None`: never), after
    /// [`Protocol::timed_out`]'s answer: a deadline, not a per-read bound.
    pub request_timeout: Option<Duration>,
    /// Close a connection whose client takes none of a response for this
    /// long (`None`: wait as long as it takes).
    pub write_timeout: Option<Duration>,
    /// Most requests of one read executed before the driver writes their
    /// responses and lets the loop run others.
    pub max_batch_requests: usize,
    /// Most response bytes buffered before the driver writes them.
    pub max_batch_output: usize,
}

impl Default for DriverConfig {
    /// No timeouts, 64 requests or 64 KiB of responses per batch: a
    /// flooded loop then answers a newcomer within about a millisecond
    /// (`duality bench fairness`), and a yield every 64 requests costs
    /// nothing measurable.
    fn default() -> Self {
        DriverConfig {
            idle_timeout: None,
            request_timeout: None,
            write_timeout: None,
            max_batch_requests: 64,
            max_batch_output: 64 * 1024,
        }
    }
}

/// The bounds of a lingering close ([`Protocol::linger`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linger {
    /// The longest the whole close lasts (nginx's `lingering_time`).
    pub total: Duration,
    /// The longest one wait for more input lasts (nginx's
    /// `lingering_timeout`).
    pub idle: Duration,
    /// The most bytes read and dropped.
    pub bytes: usize,
}

impl Default for Linger {
    /// 1 s and 64 KiB: enough for a response to reach a client that sent a
    /// little more than it was answered for.
    fn default() -> Linger {
        Linger {
            total: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            bytes: 64 * 1024,
        }
    }
}

/// What [`Protocol::finish`] answers through: the connection, the payload
/// (for work on the blocking pool), and the output the driver writes.
pub struct Reply<'a> {
    conn: &'a mut Conn,
    payload: &'a Payload,
    out: &'a mut Output,
    answered: &'a mut Answered,
    write_timeout: Option<Duration>,
    /// The bytes buffered after the request, and how many of them
    /// [`read`](Reply::read) took (the driver drops those).
    input: &'a [u8],
    taken: &'a mut usize,
    /// When the request timeout runs out for what `finish` reads (counted
    /// from when `finish` began: the request's head had come whole).
    deadline: Option<Instant>,
}

impl Reply<'_> {
    /// Where the response goes; [`flush`](Self::flush) writes it, and the
    /// driver writes what is left when `finish` returns.
    pub fn out(&mut self) -> &mut Output {
        self.out
    }

    /// The connection, for a body the protocol sends itself (after a
    /// [`flush`](Self::flush) of what comes before it).
    pub fn conn(&mut self) -> &mut Conn {
        self.conn
    }

    /// Where the connection's payload work runs (the model decides), for
    /// work that may block.
    pub fn payload(&self) -> &Payload {
        self.payload
    }

    /// The driver's [`DriverConfig::write_timeout`].
    pub fn write_timeout(&self) -> Option<Duration> {
        self.write_timeout
    }

    /// Reads the next bytes the client sent after the request into `dst`
    /// (a body the protocol receives itself, straight where it goes):
    /// first what the driver has buffered, then from the connection. Never
    /// reads past `dst`, so what follows stays for the driver. `Ok(0)`: the
    /// client closed (or `dst` is empty). A shutdown lets the body finish,
    /// as a request still arriving does; the driver's request timeout
    /// bounds the whole body, from when `finish` began (`TimedOut`).
    pub async fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let buffered = &self.input[*self.taken..];
        if !buffered.is_empty() || dst.is_empty() {
            let n = buffered.len().min(dst.len());
            dst[..n].copy_from_slice(&buffered[..n]);
            *self.taken += n;
            return Ok(n);
        }
        self.conn.set_mid_request(true);
        let wait = match self.deadline {
            None => None,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                Some(left)
            }
        };
        self.conn.read_for(dst, wait).await
    }

    /// [`read`](Self::read) until `dst` is full; `UnexpectedEof` if the
    /// client closes first.
    pub async fn read_exact(&mut self, mut dst: &mut [u8]) -> io::Result<()> {
        while !dst.is_empty() {
            match self.read(dst).await? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => dst = &mut dst[n..],
            }
        }
        Ok(())
    }

    /// Writes the output (its bytes, then its shared body), giving up with
    /// `TimedOut` after the write timeout; the first write of the response
    /// records its time to first byte.
    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_pending() {
            return Ok(());
        }
        self.answered.first_byte();
        let r = write_output(self.conn, self.out, self.write_timeout).await;
        written(self.out);
        r
    }

    /// Sends the output and then a body the protocol sends itself with a
    /// write-side system call (`sendfile`), in one go: when the socket can
    /// take more, `f(fd, head)` gets the output's bytes not sent yet, sends
    /// them first (advancing `head`; with `MSG_MORE`, so that they leave in
    /// one segment with the body) and then its body. A `WouldBlock` from `f`
    /// waits for room and calls it again; `TimedOut` as
    /// [`write_timeout`](Self::write_timeout) says. An output with shared
    /// bodies is [flushed](Self::flush) first (`head` is then empty). Saves
    /// the head its own write and, under io_uring, its own loop turn.
    pub async fn flush_with<R>(
        &mut self,
        mut f: impl FnMut(std::os::fd::RawFd, &mut &[u8]) -> io::Result<R>,
    ) -> io::Result<R> {
        if self.out.has_shared() {
            self.flush().await?;
        }
        if !self.out.is_pending() {
            return self
                .conn
                .write_with_for(self.write_timeout, |fd| f(fd, &mut &[][..]))
                .await;
        }
        self.answered.first_byte();
        let mut head: &[u8] = &self.out.bytes;
        let r = self
            .conn
            .write_with_for(self.write_timeout, |fd| f(fd, &mut head))
            .await;
        written(self.out);
        r
    }
}

/// Writes `out` (bytes with shared bodies among them) on the slow path:
/// shared bodies, a write timeout or a large answer (the driver's own
/// write, without any, is `write_all`). The bytes before each body are
/// copied into a head of their own: the send queue may keep the head's
/// buffer, and `out`'s stays in the thread's pool. Untimed, returns once
/// the kernel has every byte (a protocol counting the bodies' memory in
/// `Protocol::drained` counts it while it is held).
async fn write_output(conn: &mut Conn, out: &mut Output, wait: Option<Duration>) -> io::Result<()> {
    if out.has_shared() {
        let mut shared = std::mem::take(&mut out.shared);
        let last = shared.len();
        let mut head = Vec::new();
        let mut from = 0;
        for (i, s) in shared.drain(..).enumerate() {
            let at = s.at.clamp(from, out.bytes.len());
            head.extend_from_slice(&out.bytes[from..at]);
            let after = if i + 1 == last { &out.bytes[at..] } else { &[] };
            conn.write_vec_shared_for(&mut head, &s.body, s.range, after, wait)
                .await?;
            from = at;
        }
        // The vector's room is kept for the next output.
        out.shared = shared;
        // Timed, a small rest goes on while the connection reads on; a
        // large one is waited for (each wait bounded, not the whole send):
        // else the connection could go idle, time out or close with
        // megabytes queued, and a slow reader that kept reading lost the
        // end of its body when the close's linger ran out.
        return match wait {
            Some(_) if conn.unsent() < FLUSH_AFTER => Ok(()),
            wait => conn.flush_for(wait).await,
        };
    }
    // A large answer (a multi-key get of large values) is not pooled
    // anyway (see `written`): the send queue takes the buffer itself
    // rather than a copy, 64 KiB at a time (io_uring), and the write
    // ends once the kernel has it all, so that a protocol counting the
    // buffer's memory (`Protocol::drained`) counts it while it is held.
    // Untimed only: a timeout there bounds each wait for the client,
    // not a whole large send.
    if wait.is_none() && out.bytes.len() > OUT_KEEP {
        conn.write_vec_for(&mut out.bytes, None).await
    } else {
        conn.write_all_for(&out.bytes, wait).await
    }
}

/// Bytes a timed write of shared bodies may leave queued (io_uring) when it
/// returns; more are waited for (see [`write_output`]).
const FLUSH_AFTER: usize = 256 * 1024;

/// Size of a standard read buffer (and the first size of a response buffer).
pub const BUF_SIZE: usize = 16 * 1024;
/// Buffer sets a thread's pool keeps for reuse; more are freed.
pub const POOL_KEEP: usize = 64;
/// A response buffer that grew past this is freed after its write.
const OUT_KEEP: usize = 4 * BUF_SIZE;

/// Most bytes a hand-off carries in a buffer of their own once this thread
/// has [`POOL_KEEP`] hand-offs out (see [`compact`]).
const COMPACT_MAX: usize = 2048;

thread_local! {
    /// The spare buffer sets of the connections of this thread's loop,
    /// boxed as connections hold them (taking one moves a pointer).
    #[allow(clippy::vec_box)]
    static POOL: RefCell<Vec<Box<Active>>> = const { RefCell::new(Vec::new()) };
    /// Hand-offs of this thread's connections on a payload thread now.
    static HANDED_OFF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one hand-off out in [`HANDED_OFF`] while it lives (a connection
/// dropped mid hand-off, at shutdown, counts down too).
struct HandedOff;

impl HandedOff {
    fn count() -> HandedOff {
        HANDED_OFF.with(|n| n.set(n.get() + 1));
        HandedOff
    }
}

impl Drop for HandedOff {
    fn drop(&mut self) {
        HANDED_OFF.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Before a hand-off: once this thread has [`POOL_KEEP`] hand-offs out (a
/// burst of connections, each with a request queued on a payload thread),
/// the buffered bytes of a few requests go in a buffer of their size and
/// the standard set stays in the pool for the next read. Otherwise every
/// queued request would hold a standard set (8-14 KB resident each, what
/// its pages the read and response touched): 8,000 connections asking at
/// once took a 2-loop `amped` web server from 23 to 88 MB. Below the
/// bound, and for a set holding more (a large value), the set moves whole:
/// no copy on the steady path.
fn compact(mut a: Box<Active>) -> Box<Active> {
    let live = a.end - a.start;
    let out = HANDED_OFF.with(|n| n.get());
    if out < POOL_KEEP
        || live > COMPACT_MAX
        || a.buf.len() != BUF_SIZE
        || a.out.is_pending()
        || a.finish != (0, 0)
    {
        return a;
    }
    let small = Box::new(Active {
        buf: a.buf[a.start..a.end].to_vec(),
        start: 0,
        end: live,
        // Room for a few short responses; it grows as any output does.
        out: Output::with_capacity(512),
        need: a.need,
        finish: (0, 0),
        answered: Answered {
            requests: a.answered.requests,
            read_at: a.answered.read_at.take(),
        },
        next_color: a.next_color.take(),
        busy: a.busy.take(),
    });
    give_active(a);
    small
}

/// A standard buffer set, from this thread's pool if it has one.
fn take_active() -> Box<Active> {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| {
        Box::new(Active {
            buf: vec![0; BUF_SIZE],
            start: 0,
            end: 0,
            out: Output::with_capacity(BUF_SIZE),
            need: 0,
            finish: (0, 0),
            answered: Answered {
                requests: 0,
                read_at: None,
            },
            next_color: None,
            busy: None,
        })
    })
}

/// Gives a buffer set with nothing pending back to this thread's pool (one
/// whose buffers grew is freed instead).
fn give_active(mut a: Box<Active>) {
    if a.buf.len() != BUF_SIZE || a.out.capacity() < BUF_SIZE || a.out.capacity() > OUT_KEEP {
        return;
    }
    a.start = 0;
    a.end = 0;
    a.need = 0;
    a.finish = (0, 0);
    a.out.clear();
    a.answered = Answered {
        requests: 0,
        read_at: None,
    };
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_KEEP {
            p.push(a);
        }
    });
}

/// Buffer sets (a read and a response buffer each) pooled on this thread now.
pub fn pooled_buffers() -> usize {
    POOL.with(|p| p.borrow().len())
}

/// What a connection holds while it has bytes to serve: its buffers and
/// where it is in them. Taken from the thread's pool when a read finds bytes,
/// given back once nothing is pending: an idle connection holds none, and a
/// hand-off moves one pointer.
struct Active {
    buf: Vec<u8>,
    /// Buffered input is `buf[start..end]`.
    start: usize,
    end: usize,
    out: Output,
    /// Bytes the pending request needs in all (0: unknown).
    need: usize,
    /// The length of the request before `start` that waits for
    /// [`Protocol::finish`], and the progress its `execute` handed on.
    finish: (usize, u32),
    /// Requests served whose responses are not written yet.
    answered: Answered,
    /// The color of the next batch's first request, where the last batch
    /// stopped at it (amped: it belongs to another payload thread).
    next_color: Option<u64>,
    /// The color whose lock the last batch found another thread's
    /// ([`Stop::Busy`]): the next one waits for it.
    busy: Option<u64>,
}

/// A protocol and how the driver treats its connections: made once per
/// server, shared by all of its connections (one pointer in each).
pub struct Driver<P> {
    proto: P,
    limits: BatchLimits,
    idle_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl<P: Protocol> Driver<P> {
    /// The idle timeout of a connection in `session`'s state.
    fn idle_timeout_of(&self, session: &P::Session) -> Option<Duration> {
        self.proto.idle_timeout(session).or(self.idle_timeout)
    }

    fn request_timeout_of(&self, session: &P::Session, pending: &[u8]) -> Option<Duration> {
        self.proto
            .request_timeout(session, pending)
            .or(self.request_timeout)
    }

    /// Serves `proto` under `cfg`.
    pub fn new(proto: P, cfg: DriverConfig) -> Arc<Driver<P>> {
        Arc::new(Driver {
            proto,
            limits: BatchLimits {
                max_requests: cfg.max_batch_requests.max(1),
                max_output: cfg.max_batch_output.max(1),
            },
            idle_timeout: cfg.idle_timeout,
            request_timeout: cfg.request_timeout,
            write_timeout: cfg.write_timeout,
        })
    }

    /// The protocol served.
    pub fn protocol(&self) -> &P {
        &self.proto
    }
}

impl Active {
    /// Serves a batch of the buffered bytes (see [`serve_bytes`]).
    fn serve<P: Protocol>(
        &mut self,
        d: &Driver<P>,
        session: &mut P::Session,
        lane: &Lane,
    ) -> Served {
        self.serve_holding(d, session, lane, None)
    }

    /// [`Active::serve`] with `held` as the first run's color lock.
    fn serve_holding<'l, P: Protocol>(
        &mut self,
        d: &Driver<P>,
        session: &mut P::Session,
        lane: &'l Lane,
        held: Option<Held<'l>>,
    ) -> Served {
        let s = serve_holding(
            &d.proto,
            session,
            &self.buf[self.start..self.end],
            &mut self.out,
            lane,
            d.limits,
            held,
        );
        self.start += s.used;
        s
    }
}

/// Serves one connection with `driver`'s protocol until it closes, a
/// timeout, a request that closes, or the server's shutdown (between
/// requests).
///
/// A plain function returning the connection's future, not an `async fn`:
/// an `async fn` keeps its arguments twice in its state (as captured and as
/// the body's locals), and every idle connection holds that state. Callers
/// should likewise return this future, not await it inside a block of
/// theirs (which would hold it twice again).
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub fn drive<P: Protocol>(
    mut conn: Conn,
    payload: Payload,
    driver: Arc<Driver<P>>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // Every byte of this future is held by every connection, idle ones
    // included: what is the same for all of them lives in `driver`, and
    // what only some protocols need (a timer, `finish`, a shared body's
    // write, a lingering close) is boxed where it is used.
    async move {
        let mut session = driver.proto.session(&conn);
        // The connection's buffers while it is busy. One variable for the
        // idle wait's take and the busy loop (two would each get a slot in
        // the future).
        let mut a: Box<Active>;
        // The connection's one timer (with any timeout configured), moved
        // at each wait rather than made per wait.
        let mut timer: Option<Box<Sleep>> = None;
        loop {
            // Idle: wait holding no buffer; take a set only for bytes that
            // have arrived (readiness can be stale: a read may find nothing).
            // What a wait returns is turned into a plain flag before the next
            // await: an `io::Error` kept across it would sit in the future.
            let idle_timed_out = 'wait: loop {
                conn.set_mid_request(driver.proto.mid_request(&session));
                let ready = match driver.idle_timeout_of(&session) {
                    None => conn.readable().await,
                    Some(w) => conn.readable_until(arm(&mut timer, loop_now() + w)).await,
                };
                // (The idle timeout is read again rather than kept: a flag
                // held across the read below would cost the future 8 bytes.)
                if let Some(late) = ready
                    .err()
                    .map(|e| driver.idle_timeout_of(&session).is_some() && timed_out(&e))
                {
                    a = take_active();
                    break 'wait late;
                }
                a = take_active();
                let read = match conn.try_read_into(&mut a.buf).await {
                    Ok(Some(0)) => return,
                    Ok(Some(n)) => Some(n),
                    Ok(None) => None,
                    // A blocking socket's wait ends in its read.
                    Err(e) => {
                        break 'wait driver.idle_timeout_of(&session).is_some() && timed_out(&e)
                    }
                };
                match read {
                    Some(n) => {
                        // Out of its loop's idle table: not a connection
                        // to close for room while this is served.
                        conn.busy();
                        a.end = n;
                        a.answered.read_at = duality_rt::stats::poll_started();
                        break 'wait false;
                    }
                    None => give_active(a),
                }
            };
            if idle_timed_out {
                Box::pin(answer_timeout(
                    &driver,
                    &mut session,
                    Timeout::Idle,
                    &mut conn,
                    &mut a,
                ))
                .await;
                return;
            }
            if a.end == 0 {
                // The wait failed otherwise (the socket's error).
                return;
            }
            // Busy until nothing is pending. `armed`: the pending request's
            // deadline is on the timer (a request served since, or a write
            // that moved the timer, makes the next partial request arm it
            // again).
            let mut armed = false;
            loop {
                // Serve everything buffered, batch by batch; write what a
                // batch made when it used up its budget (then let the loop
                // run others) and once at the end of the read: one write
                // site, awaited inline (a future of its own would sit in
                // every connection's).
                a.next_color = None;
                a.busy = None;
                let mut then = Then::Serve;
                loop {
                    then = if let Then::Finish = then {
                        // The request before `start` waits for `finish`,
                        // the responses before it written: it runs here, on
                        // the connection's loop, boxed.
                        let (len, progress) = std::mem::take(&mut a.finish);
                        a.answered.requests += 1;
                        let flow = {
                            let Active {
                                buf,
                                start,
                                end,
                                out,
                                answered,
                                ..
                            } = &mut *a;
                            let mut taken = 0;
                            let reply = Reply {
                                conn: &mut conn,
                                payload: &payload,
                                out,
                                answered,
                                write_timeout: driver.write_timeout,
                                input: &buf[*start..*end],
                                taken: &mut taken,
                                deadline: driver.request_timeout.map(|w| loop_now() + w),
                            };
                            let request = &buf[*start - len..*start];
                            let flow = Box::pin(driver.proto.finish(
                                &mut session,
                                request,
                                progress,
                                reply,
                            ))
                            .await;
                            // What `finish` read of the buffered bytes is
                            // its request's.
                            *start += taken;
                            flow
                        };
                        armed = false;
                        match flow {
                            Flow::Continue => Then::Serve,
                            Flow::Close | Flow::Finish(_) => Then::Close,
                        }
                    } else {
                        loop {
                            // The inline lane is dropped before the hand-off
                            // is awaited (a match would keep it in the future).
                            let inline = match a.busy {
                                // A color lock another thread held: waited
                                // for as a task, the loop serving others
                                // (boxed: only contention pays for it).
                                Some(c) => match payload.waiting_lane() {
                                    Some(lane) => {
                                        a.busy = None;
                                        Some(
                                            Box::pin(async {
                                                let held = lane.hold(c).await;
                                                a.serve_holding(&driver, &mut session, lane, held)
                                            })
                                            .await,
                                        )
                                    }
                                    // Every batch is handed off: `busy` goes
                                    // with it, its payload thread waits.
                                    None => None,
                                },
                                None => payload
                                    .inline_lane()
                                    .map(|lane| a.serve(&driver, &mut session, &lane)),
                            };
                            let served = match inline {
                                Some(served) => served,
                                None => {
                                    let color = match a.busy.or(a.next_color.take()) {
                                        Some(c) => Some(c),
                                        None if payload.routes_by_color() => driver
                                            .proto
                                            .peek_color(&session, &a.buf[a.start..a.end]),
                                        None => None,
                                    };
                                    let d = driver.clone();
                                    let small = compact(a);
                                    let payload = &payload;
                                    // Boxed: the hop's state (a payload-thread
                                    // call) would otherwise sit in every
                                    // connection's future, idle ones and inline
                                    // models included; one allocation per batch
                                    // is small beside a cross-thread hop.
                                    let (a2, s2, served) = Box::pin(async move {
                                        let _out = HandedOff::count();
                                        payload
                                            .batch(color, move |lane| async move {
                                                let (mut a, mut session) = (small, session);
                                                // A color another thread holds
                                                // is waited for here, as a task
                                                // (the payload thread runs other
                                                // batches meanwhile), unless
                                                // answers wait to be written.
                                                let mut held = match a.busy.take() {
                                                    Some(c) => lane.hold(c).await,
                                                    None => None,
                                                };
                                                loop {
                                                    let s = a.serve_holding(
                                                        &d,
                                                        &mut session,
                                                        &lane,
                                                        held,
                                                    );
                                                    match s.stop {
                                                        Stop::Busy(c)
                                                            if s.used == 0
                                                                && !a.out.is_pending() =>
                                                        {
                                                            held = lane.hold(c).await
                                                        }
                                                        _ => return (a, session, s),
                                                    }
                                                }
                                            })
                                            .await
                                    })
                                    .await;
                                    a = a2;
                                    session = s2;
                                    served
                                }
                            };
                            a.answered.requests += served.answered as u64;
                            if served.used > 0 {
                                armed = false;
                            }
                            // What follows the write (decided before it: a
                            // byte, not a `Stop`, is kept across its await).
                            match served.stop {
                                Stop::Elsewhere(c) => a.next_color = Some(c),
                                Stop::Busy(c) => {
                                    a.busy = Some(c);
                                    // What the batch answered goes out
                                    // before the wait.
                                    if a.out.is_pending() {
                                        break Then::Serve;
                                    }
                                }
                                Stop::NeedMore(n) => {
                                    a.need = n;
                                    break Then::Read;
                                }
                                Stop::Budget => break Then::Yield,
                                Stop::Close => break Then::Close,
                                Stop::Write => break Then::Serve,
                                Stop::Finish { len, progress } => {
                                    a.finish = (len, progress);
                                    break Then::Finish;
                                }
                            }
                        }
                    };
                    // At shutdown (see `Protocol::SHUTDOWN_AT_BOUNDARY`) a
                    // connection ends once the batch in progress is
                    // answered: requests buffered behind it, whole or in
                    // part, are not started (an HTTP client pipelining kept
                    // it serving to the grace's end, then lost a body half
                    // sent). Only a request that answered nothing yet reads
                    // on (one arriving when the stop came). Decided before
                    // the write: no flag of its own outlives the await (the
                    // future is every connection's).
                    if P::SHUTDOWN_AT_BOUNDARY
                        && (matches!(then, Then::Serve | Then::Yield)
                            || (a.out.is_pending() && matches!(then, Then::Read)))
                        && conn.shutting_down()
                    {
                        then = Then::Close;
                    }
                    if a.out.is_pending() {
                        a.answered.first_byte();
                        // Bytes alone, untimed (the cache's): inline. A
                        // timed write, a shared body or a large untimed
                        // answer: boxed, so that their larger state stays
                        // out of every connection's future.
                        let slow_path = a.out.has_shared()
                            || (driver.write_timeout.is_none() && a.out.len() > OUT_KEEP);
                        let r = match (slow_path, driver.write_timeout) {
                            (false, None) => conn.write_all_from(&a.out).await,
                            (false, Some(w)) => {
                                armed = false;
                                let t = arm(&mut timer, loop_now() + w);
                                Box::pin(conn.write_all_until(&a.out, t)).await
                            }
                            (true, wait) => {
                                Box::pin(write_output(&mut conn, &mut a.out, wait)).await
                            }
                        };
                        written(&mut a.out);
                        driver.proto.drained(&mut session);
                        if let Err(e) = r {
                            // The client stopped reading, or is gone: the
                            // rest of the output is not worth a linger.
                            conn.discard_unsent();
                            if timed_out(&e) {
                                let partial = &a.buf[a.start..a.end];
                                driver.proto.timed_out(
                                    &mut session,
                                    Timeout::Write,
                                    partial,
                                    &mut a.out,
                                );
                            }
                            return;
                        }
                    }
                    match then {
                        Then::Read => break,
                        Then::Yield => {
                            duality_rt::stats::record_yield();
                            duality_rt::yield_now().await
                        }
                        Then::Serve | Then::Finish => {}
                        Then::Close => {
                            if conn.shutting_down() {
                                // The loops stop soon, and with them what
                                // io_uring still queues: it goes now (within
                                // the write timeout). The linger reads on
                                // though the server is closing.
                                let _ = Box::pin(conn.flush_for(driver.write_timeout)).await;
                                conn.set_mid_request(true);
                            }
                            // Unread: buffered here, or sent after what was
                            // read (a client pipelining past a closing answer).
                            let unread = a.start < a.end || conn.input_pending();
                            if let Some(mut bounds) = driver.proto.linger(&session, unread) {
                                if conn.shutting_down() {
                                    // A client that never closes must not
                                    // hold the stop for its whole grace.
                                    let short = Linger::default();
                                    bounds.total = bounds.total.min(short.total);
                                    bounds.idle = bounds.idle.min(short.idle);
                                }
                                Box::pin(linger(&mut conn, &mut a.buf, bounds)).await;
                            }
                            return;
                        }
                    }
                }
                if a.start == a.end {
                    // Nothing pending: the connection goes idle without buffers.
                    give_active(a);
                    break;
                }
                // A partial request: read on into the same buffers.
                make_room(&mut a, driver.proto.max_request().max(BUF_SIZE));
                if a.end == a.buf.len() {
                    // The pending request would not fit even in the largest
                    // buffer: the protocol broke its contract. Never grow past
                    // the bound.
                    tracing::debug!("closing a connection whose request outgrew the buffer bound");
                    return;
                }
                conn.set_mid_request(true);
                match driver.request_timeout_of(&session, &a.buf[a.start..a.end]) {
                    Some(w) if !armed => {
                        arm(&mut timer, loop_now() + w);
                        armed = true;
                    }
                    Some(_) => {}
                    // (A protocol's own deadline, for a part of the request
                    // that has arrived now, no longer holds.)
                    None => armed = false,
                }
                // The read's result is a temporary of this statement: only a
                // plain number outlives it (see the idle wait).
                if !armed {
                    // A blocking socket keeps the idle wait's timeout: a
                    // partial request must not be cut off by it.
                    conn.untimed_reads();
                }
                let n = match match timer.as_deref_mut().filter(|_| armed) {
                    None => conn.read_into(Unfilled(&mut a)).await,
                    Some(t) => conn.read_into_until(Unfilled(&mut a), t).await,
                } {
                    Ok(0) => return,
                    Ok(n) => n,
                    Err(e) if armed && timed_out(&e) => 0,
                    Err(_) => return,
                };
                if n == 0 {
                    Box::pin(answer_timeout(
                        &driver,
                        &mut session,
                        Timeout::Request,
                        &mut conn,
                        &mut a,
                    ))
                    .await;
                    return;
                }
                a.answered.read_at = duality_rt::stats::poll_started();
                a.end += n;
            }
        }
    }
}

/// The buffer's room after the buffered bytes, as one pointer (a read's
/// future holding a slice, two words, would grow every connection's).
struct Unfilled<'a>(&'a mut Active);

impl AsMut<[u8]> for Unfilled<'_> {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.0.buf[self.0.end..]
    }
}

/// A read timeout ran out: the protocol's answer to it, if any, is written
/// (best effort: the connection closes next).
async fn answer_timeout<P: Protocol>(
    driver: &Driver<P>,
    session: &mut P::Session,
    which: Timeout,
    conn: &mut Conn,
    a: &mut Active,
) {
    driver
        .proto
        .timed_out(session, which, &a.buf[a.start..a.end], &mut a.out);
    if a.out.is_pending() {
        a.answered.first_byte();
        let _ = write_output(conn, &mut a.out, driver.write_timeout).await;
    }
}

/// The connection's timer, moved to `deadline` (made on first use).
fn arm(timer: &mut Option<Box<Sleep>>, deadline: Instant) -> &mut Sleep {
    match timer {
        Some(t) => {
            t.extend(deadline);
            t
        }
        None => timer.insert(Box::new(sleep_until(deadline))),
    }
}

/// True if `e` is a timeout: a timer's, or a blocking socket's (which the
/// kernel reports as `WouldBlock`).
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// Lingering close ([`Protocol::linger`]): shuts the write side, then reads
/// and drops what the client still sends, within `bounds`. Uses `buf` as
/// scratch space.
async fn linger(conn: &mut Conn, buf: &mut [u8], bounds: Linger) {
    if conn.shutdown_write().is_err() {
        return;
    }
    // A hand-off's small buffer ([`compact`]) would make many small reads
    // (or, empty, end the linger at once).
    let mut own = Vec::new();
    let buf = if buf.len() < BUF_SIZE {
        own.resize(BUF_SIZE, 0);
        &mut own[..]
    } else {
        buf
    };
    let until = Instant::now() + bounds.total;
    let mut left = bounds.bytes;
    while left > 0 {
        let wait = until
            .saturating_duration_since(Instant::now())
            .min(bounds.idle);
        if wait.is_zero() {
            return;
        }
        match conn.read_for(buf, Some(wait)).await {
            Ok(n) if n > 0 => left = left.saturating_sub(n),
            _ => return,
        }
    }
}

/// Makes room at the end of the read buffer: drops served bytes, grows it
/// as far as the pending request needs (up to `max`), and swaps a large
/// buffer back for a standard one once what it holds fits.
fn make_room(h: &mut Active, max: usize) {
    let need = h.need;
    let live = h.end - h.start;
    if h.buf.len() < BUF_SIZE {
        // A hand-off's own small buffer ([`compact`]) reading on: a
        // standard one (or what the request declared) from here.
        let mut b = vec![0; need.clamp(BUF_SIZE, max.max(BUF_SIZE))];
        b[..live].copy_from_slice(&h.buf[h.start..h.end]);
        h.buf = b;
        h.start = 0;
        h.end = live;
        return;
    }
    let big = h.buf.len() > BUF_SIZE;
    if big && live < BUF_SIZE && need <= BUF_SIZE {
        let mut small = vec![0; BUF_SIZE];
        small[..live].copy_from_slice(&h.buf[h.start..h.end]);
        h.buf = small;
        h.start = 0;
        h.end = live;
        return;
    }
    if h.start > 0 && (h.end == h.buf.len() || live == 0) {
        h.buf.copy_within(h.start..h.end, 0);
        h.start = 0;
        h.end = live;
    }
    if h.end == h.buf.len() && h.buf.len() < max {
        // Full with one partial request: grow once to what it declared
        // (zero-filling only the new bytes, once), else double.
        let want = if need > h.buf.len() {
            need
        } else {
            h.buf.len() * 2
        };
        h.buf.resize(want.min(max), 0);
    }
}

/// What the driver does after writing a batch's responses.
#[derive(Clone, Copy)]
enum Then {
    /// Read more (the buffered bytes end in a partial request, or none).
    Read,
    /// Let the loop run other tasks, then serve on.
    Yield,
    /// Serve on at once (the batch's shared bodies had to go first).
    Serve,
    /// Run [`Protocol::finish`] for the request before `start`.
    Finish,
    /// Close the connection.
    Close,
}

/// Requests served and not yet answered on the socket.
struct Answered {
    requests: u64,
    /// The start of the poll whose read completed them.
    read_at: Option<duality_rt::stats::Stamp>,
}

impl Answered {
    /// Before the responses of the requests answered so far are written:
    /// records their time to first byte.
    fn first_byte(&mut self) {
        if let Some(at) = self.read_at {
            duality_rt::stats::record_first_byte(at, self.requests);
        }
        self.requests = 0;
    }
}

/// After a response buffer was written (awaited inline in `drive`, not in
/// a future of its own, which every connection's future would hold): it is
/// emptied, and one that grew large is swapped for a standard one. A copy
/// into the socket (small for the responses of one read) keeps the buffer
/// in this thread's pool; `write_vec` would hand it to the socket's send
/// queue.
fn written(out: &mut Output) {
    out.clear();
    if out.capacity() > OUT_KEEP {
        out.bytes = Vec::with_capacity(BUF_SIZE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(buf: Vec<u8>, start: usize, end: usize) -> Active {
        Active {
            buf,
            start,
            end,
            out: Output::default(),
            need: 0,
            finish: (0, 0),
            answered: Answered {
                requests: 0,
                read_at: None,
            },
            next_color: None,
            busy: None,
        }
    }

    fn make_room_for(h: &mut Active, need: usize, max: usize) {
        h.need = need;
        make_room(h, max);
    }

    impl Output {
        /// The shared bodies, each with its place in the bytes.
        fn take_shared(&mut self) -> Vec<(SharedBytes, Range<usize>, usize)> {
            self.shared
                .drain(..)
                .map(|s| (s.body, s.range, s.at))
                .collect()
        }
    }

    #[test]
    fn shared_bodies_go_among_the_bytes_and_past_the_most_are_copied() {
        let body: Arc<[u8]> = Arc::from(&b"0123456789"[..]);
        let body = SharedBytes::from(body);
        let mut out = Output::default();
        out.extend_from_slice(b"head:");
        out.share(body.clone(), 2..6);
        assert!(out.has_shared() && out.is_pending());
        assert_eq!(out.shared_len(), 4);
        // Nothing after it: sent from the body itself, after the bytes.
        assert_eq!(out.take_shared(), vec![(body.clone(), 2..6, 5)]);
        assert_eq!(&out[..], b"head:");
        assert!(!out.has_shared() && out.shared_len() == 0);
        // Bytes appended after one follow it; each keeps its place.
        let mut out = Output::default();
        out.extend_from_slice(b"a:");
        out.share(body.clone(), 0..3);
        out.extend_from_slice(b";b");
        out.share(body.clone(), 9..10);
        out.extend_from_slice(b"!");
        assert_eq!(out.shared_len(), 4);
        assert!(out.has_shared_after(3) && !out.has_shared_after(4));
        assert_eq!(
            out.take_shared(),
            vec![(body.clone(), 0..3, 2), (body.clone(), 9..10, 4)]
        );
        assert_eq!(&out[..], b"a:;b!");
        // Settled, they are copied in where they belonged.
        let mut out = Output::default();
        out.extend_from_slice(b"a:");
        out.share(body.clone(), 0..3);
        out.extend_from_slice(b";b");
        out.share(body.clone(), 9..10);
        out.share(body.clone(), 4..5);
        out.extend_from_slice(b"!");
        out.settle_after(3);
        assert_eq!(&out[..], b"a:;b94!");
        assert_eq!(out.shared_len(), 3);
        out.settle();
        assert_eq!(&out[..], b"a:012;b94!");
        assert!(!out.has_shared());
        let mut out = Output::default();
        out.share(body.clone(), 0..2);
        out.share(body.clone(), 2..3);
        out.settle();
        assert_eq!(&out[..], b"012");
        // Cut, the bodies placed past the cut go with the bytes; cleared,
        // all of them.
        let mut out = Output::default();
        out.extend_from_slice(b"a");
        out.share(body.clone(), 0..1);
        out.share(body.clone(), 1..2);
        out.extend_from_slice(b"b");
        out.share(body.clone(), 2..3);
        out.truncate(1);
        assert_eq!(out.shared_len(), 2);
        out.truncate(0);
        assert!(!out.is_pending());
        out.share(body.clone(), 0..1);
        out.clear();
        assert!(!out.is_pending());
        // Committed answers stay where a cut at the mark leaves them,
        // settled or not.
        let mut out = Output::default();
        out.extend_from_slice(b"a");
        out.share(body.clone(), 0..2);
        out.extend_from_slice(b"b");
        out.commit();
        out.extend_from_slice(b"c");
        out.share(body.clone(), 2..3);
        assert_eq!(out.committed(), 2);
        out.truncate(out.committed());
        assert_eq!((&out[..], out.shared_len()), (&b"ab"[..], 2));
        out.settle();
        assert_eq!((&out[..], out.committed()), (&b"a01b"[..], 4));
        out.clear();
        assert_eq!(out.committed(), 0);
        // Past the most an output shares, bodies are copied in at their
        // place.
        let mut out = Output::default();
        for i in 0..Output::MAX_SHARED {
            out.share(body.clone(), i % 10..i % 10 + 1);
        }
        out.extend_from_slice(b"|");
        out.share(body.clone(), 9..10);
        assert_eq!(&out[..], b"|9");
        assert_eq!(out.take_shared().len(), Output::MAX_SHARED);
        // A range outside the body settles to nothing rather than panic.
        let mut out = Output::default();
        out.share(body, 8..20);
        assert_eq!(out.shared_len(), 0);
        out.settle();
        assert!(out.is_empty() && !out.is_pending());
    }

    /// Lines: `x` → `x`, `s` → a shared body, `L` → a shared body of
    /// 600 KiB, `f` → finish, `c` → close.
    struct Lines;
    impl Protocol for Lines {
        type Session = Vec<Vec<u8>>;
        type Request<'a> = &'a [u8];
        fn max_request(&self) -> usize {
            64
        }
        fn parse<'a>(&self, _: &mut Self::Session, input: &'a [u8]) -> Parsed<&'a [u8]> {
            match input.iter().position(|&b| b == b'\n') {
                Some(i) => Parsed::Request(&input[..i], i + 1),
                None => Parsed::Incomplete(0),
            }
        }
        fn execute(&self, _: &mut Self::Session, req: &[u8], out: &mut Output) -> Flow {
            match req {
                b"s" => out.share(Arc::<[u8]>::from(&b"S"[..]), 0..1),
                b"L" => out.share(Arc::<[u8]>::from(vec![b'L'; 600 << 10]), 0..600 << 10),
                b"f" => return Flow::Finish(7),
                b"c" => return Flow::Close,
                r => out.extend_from_slice(r),
            }
            Flow::Continue
        }
        fn waiting(&self, seen: &mut Self::Session, partial: &[u8], _: &mut Output) {
            seen.push(partial.to_vec());
        }
    }

    /// Lines that log, in order, each look-ahead's bytes and each execution.
    #[derive(Default)]
    struct Ahead(std::sync::Mutex<Vec<String>>);
    impl Protocol for Ahead {
        type Session = ();
        type Request<'a> = &'a [u8];
        fn max_request(&self) -> usize {
            64
        }
        fn parse<'a>(&self, _: &mut (), input: &'a [u8]) -> Parsed<&'a [u8]> {
            Lines.parse(&mut Vec::new(), input)
        }
        fn look_ahead(&self, _: &(), rest: &[u8]) {
            let rest = String::from_utf8_lossy(rest);
            self.0.lock().unwrap().push(format!("ahead {rest:?}"));
        }
        fn execute(&self, _: &mut (), req: &[u8], _: &mut Output) -> Flow {
            let req = String::from_utf8_lossy(req);
            self.0.lock().unwrap().push(format!("exec {req}"));
            Flow::Continue
        }
    }

    /// The first request of a batch, and every `LOOK_AHEAD_EVERY`th after
    /// it, is preceded by a look at the bytes after it, when there are any,
    /// a partial request's included.
    #[test]
    fn the_driver_shows_a_protocol_what_follows_every_few_requests() {
        let limits = BatchLimits {
            max_requests: 100,
            max_output: 1 << 20,
        };
        let p = Ahead::default();
        let mut input: Vec<u8> = (0..=LOOK_AHEAD_EVERY)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        input.extend_from_slice(b"x");
        let s = serve_bytes(
            &p,
            &mut (),
            &input,
            &mut Output::default(),
            &Lane::single(),
            limits,
        );
        assert_eq!(s.requests, LOOK_AHEAD_EVERY + 1);
        let log = std::mem::take(&mut *p.0.lock().unwrap());
        let mut want = vec![format!("ahead {:?}", String::from_utf8_lossy(&input[2..]))];
        want.extend((0..LOOK_AHEAD_EVERY).map(|i| format!("exec {i}")));
        want.push("ahead \"x\"".to_string());
        want.push(format!("exec {LOOK_AHEAD_EVERY}"));
        assert_eq!(log, want);
        serve_bytes(
            &p,
            &mut (),
            b"a\n",
            &mut Output::default(),
            &Lane::single(),
            limits,
        );
        let log = std::mem::take(&mut *p.0.lock().unwrap());
        assert_eq!(log, ["exec a"], "nothing follows: no look");
    }

    /// Time to first byte is recorded for requests that answered: one that
    /// appends nothing (an empty line here, a `noreply` store in the cache)
    /// is executed but not answered, whatever shares its read.
    #[test]
    fn requests_that_append_nothing_are_not_answered() {
        let limits = BatchLimits {
            max_requests: 100,
            max_output: 1 << 20,
        };
        let (mut out, mut seen) = (Output::default(), Vec::new());
        let s = serve_bytes(
            &Lines,
            &mut seen,
            b"\n\na\n\ns\n\nc\n",
            &mut out,
            &Lane::single(),
            limits,
        );
        assert_eq!((s.requests, s.answered, s.stop), (7, 2, Stop::Close));
        let s = serve_bytes(
            &Lines,
            &mut seen,
            b"\n\n\n",
            &mut out,
            &Lane::single(),
            limits,
        );
        assert_eq!((s.requests, s.answered), (3, 0));
        let s = serve_bytes(
            &Lines,
            &mut seen,
            b"x\nc\n",
            &mut out,
            &Lane::single(),
            limits,
        );
        assert_eq!((s.requests, s.answered, s.stop), (2, 1, Stop::Close));
    }

    #[test]
    fn a_batch_stops_to_write_shared_bodies_when_full_and_before_a_finish() {
        let serve = |input: &[u8], out: &mut Output, seen: &mut Vec<Vec<u8>>| {
            let limits = BatchLimits {
                max_requests: 100,
                max_output: 1 << 20,
            };
            serve_bytes(&Lines, seen, input, out, &Lane::single(), limits)
        };
        let (mut out, mut seen) = (Output::default(), Vec::new());
        // Bodies join the output up to the most it shares.
        let many = b"s\n".repeat(Output::MAX_SHARED + 1);
        let s = serve(&many, &mut out, &mut seen);
        let n = Output::MAX_SHARED;
        assert_eq!((s.used, s.requests, s.stop), (2 * n, n, Stop::Write));
        assert_eq!(out.take_shared().len(), n);
        // Or up to 1 MiB of them.
        let s = serve(b"L\nx\nL\nL\n", &mut out, &mut seen);
        assert_eq!((s.used, s.requests, s.stop), (6, 3, Stop::Write));
        assert_eq!(out.take_shared().len(), 2);
        assert_eq!(&out[..], b"x");
        out.clear();
        let input = b"a\ns\nb\nf\nc\npart";
        // Full, nothing is served until they are written.
        let mut pending = Output::default();
        for _ in 0..n {
            pending.share(Arc::<[u8]>::from(&b"S"[..]), 0..1);
        }
        let s = serve(input, &mut pending, &mut seen);
        assert_eq!((s.used, s.requests, s.stop), (0, 0, Stop::Write));
        let s = serve(input, &mut out, &mut seen);
        let finish = Stop::Finish {
            len: 2,
            progress: 7,
        };
        // `f` waits for finish: consumed, not counted, its length given;
        // the body shared before it is in the output.
        assert_eq!((s.used, s.requests, s.stop), (8, 3, finish));
        assert_eq!(&out[..], b"ab");
        assert_eq!(out.take_shared().len(), 1);
        out.clear();
        let s = serve(&input[8..], &mut out, &mut seen);
        assert_eq!((s.used, s.requests, s.stop), (2, 1, Stop::Close));
        // The protocol hears what is left of an incomplete request.
        let s = serve(&input[10..], &mut out, &mut seen);
        assert_eq!((s.used, s.requests, s.stop), (0, 0, Stop::NeedMore(0)));
        assert_eq!(seen, vec![b"part".to_vec()]);
    }

    #[test]
    fn a_declared_large_request_grows_the_buffer_once_to_its_size() {
        let mut h = held(vec![7; BUF_SIZE], 0, BUF_SIZE);
        make_room_for(&mut h, 300_000, 1 << 20);
        assert_eq!(h.buf.len(), 300_000, "grown exactly to the declared need");
        assert_eq!(
            &h.buf[..BUF_SIZE],
            &[7; BUF_SIZE][..],
            "what was read is kept"
        );
        // Never past the bound.
        let mut h = held(vec![0; BUF_SIZE], 0, BUF_SIZE);
        make_room_for(&mut h, 5 << 20, 1 << 20);
        assert_eq!(h.buf.len(), 1 << 20);
    }

    #[test]
    fn without_a_declared_size_a_full_buffer_doubles() {
        let mut h = held(vec![0; BUF_SIZE], 0, BUF_SIZE);
        make_room_for(&mut h, 0, 1 << 20);
        assert_eq!(h.buf.len(), 2 * BUF_SIZE);
    }

    #[test]
    fn a_large_buffer_shrinks_back_once_its_request_is_served() {
        let mut big = vec![0; 300_000];
        big[299_991..].copy_from_slice(b"get k\r\nge");
        // The large request (299,997 bytes) was served; 2 bytes of the next
        // one remain.
        let mut h = held(big, 299_997, 300_000);
        make_room_for(&mut h, 0, 1 << 20);
        assert_eq!(h.buf.len(), BUF_SIZE);
        assert_eq!((h.start, h.end), (0, 3));
        assert_eq!(&h.buf[..3], b"\nge");
    }

    #[test]
    fn served_bytes_are_dropped_only_when_room_is_needed() {
        let mut h = held(vec![1; BUF_SIZE], 100, 200);
        make_room_for(&mut h, 0, 1 << 20);
        assert_eq!(
            (h.start, h.end),
            (100, 200),
            "no copy while the tail is free"
        );
        let mut h = held(vec![1; BUF_SIZE], 100, BUF_SIZE);
        make_room_for(&mut h, 0, 1 << 20);
        assert_eq!((h.start, h.end), (0, BUF_SIZE - 100), "moved to the front");
        assert_eq!(h.buf.len(), BUF_SIZE);
    }

    #[test]
    fn pools_keep_a_bounded_number_of_buffers() {
        let sets: Vec<_> = (0..POOL_KEEP + 10).map(|_| take_active()).collect();
        for a in sets {
            give_active(a);
        }
        assert_eq!(pooled_buffers(), POOL_KEEP);
        // A set whose buffers grew is never pooled.
        let mut grown = take_active();
        grown.buf.resize(2 * BUF_SIZE, 0);
        give_active(grown);
        assert_eq!(pooled_buffers(), POOL_KEEP - 1);
        let mut grown = take_active();
        grown.out.reserve(2 * OUT_KEEP);
        give_active(grown);
        assert_eq!(pooled_buffers(), POOL_KEEP - 2);
        // A set given back is emptied.
        let mut a = take_active();
        (a.start, a.end, a.need) = (3, 9, 100);
        a.out.extend_from_slice(b"left over");
        give_active(a);
        let a = take_active();
        assert_eq!((a.start, a.end, a.need, a.out.len()), (0, 0, 0, 0));
    }

    /// A standard set holding `bytes` from offset 100 on.
    fn loaded(bytes: &[u8]) -> Box<Active> {
        let mut a = take_active();
        a.buf[100..100 + bytes.len()].copy_from_slice(bytes);
        (a.start, a.end) = (100, 100 + bytes.len());
        a
    }

    #[test]
    fn hand_offs_past_the_pool_carry_only_their_bytes() {
        // Fewer than POOL_KEEP hand-offs out: the set moves whole.
        let a = compact(loaded(b"get a\r\nget"));
        assert_eq!(a.buf.len(), BUF_SIZE);
        give_active(a);
        let _out: Vec<_> = (0..POOL_KEEP).map(|_| HandedOff::count()).collect();
        let pooled = pooled_buffers();
        let mut a = compact(loaded(b"get a\r\nget"));
        assert_eq!(&a.buf[..], b"get a\r\nget", "only the bytes, at the front");
        assert_eq!((a.start, a.end), (0, 10));
        assert_eq!(pooled_buffers(), pooled, "the standard set went back");
        // The partial request reads on into a standard buffer (or one of
        // the size it declared).
        a.start = 7;
        make_room(&mut a, 4 * BUF_SIZE);
        assert_eq!((a.buf.len(), a.start, a.end), (BUF_SIZE, 0, 3));
        assert_eq!(&a.buf[..3], b"get");
        let mut b = compact(loaded(b"set k 0 0 40000\r\n"));
        b.need = 40_017;
        make_room(&mut b, 4 * BUF_SIZE);
        assert_eq!(b.buf.len(), 40_017);
        // More than a small request's bytes, pending output or a finish
        // to run: the set moves whole.
        assert_eq!(compact(loaded(&[7; COMPACT_MAX + 1])).buf.len(), BUF_SIZE);
        let mut c = loaded(b"x");
        c.out.extend_from_slice(b"answer");
        assert_eq!(compact(c).buf.len(), BUF_SIZE);
        let mut c = loaded(b"x");
        c.finish = (3, 0);
        assert_eq!(compact(c).buf.len(), BUF_SIZE);
        drop(_out);
        assert_eq!(
            HANDED_OFF.with(|n| n.get()),
            0,
            "each counted hand-off counts down"
        );
    }
}
