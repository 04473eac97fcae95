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
//! connection, the session, a pointer to the driver; 176 bytes for the
//! cache), and the set (read and response buffers and where the connection
//! is in them) is a box taken per busy spell. Per-thread pools keep at most
//! [`POOL_KEEP`] sets, so memory goes back once connections close.
//!
//! Fairness: a batch executes at most [`DriverConfig::max_batch_requests`]
//! requests and buffers at most [`DriverConfig::max_batch_output`] bytes of
//! responses before the driver writes them and yields to the loop; the
//! runtime's I/O budget (`duality_rt::coop`) bounds the rest.

use crate::payload::Lane;
use crate::{Conn, Payload, DEFAULT_COLOR};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

/// What the driver does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Serve the next request.
    Continue,
    /// Write what is buffered, then close the connection.
    Close,
}

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

    /// The most bytes one request may need buffered at once.
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

    /// Executes `req`, appending its response to `out`.
    fn execute(
        &self,
        session: &mut Self::Session,
        req: Self::Request<'_>,
        out: &mut Vec<u8>,
    ) -> Flow;

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
    /// A request asked to close the connection.
    Close,
}

/// What [`serve_bytes`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// Bytes of the input consumed.
    pub used: usize,
    /// Requests executed.
    pub requests: usize,
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
    out: &mut Vec<u8>,
    lane: &Lane,
    limits: BatchLimits,
) -> Served {
    let mut used = 0;
    let mut requests = 0;
    // A protocol that locks itself, on a lane without affinity, never needs
    // a color: do not compute one (for the cache, a hash per request).
    let colored = lane.uses_colors(!P::LOCKS_ITSELF);
    // The color lock of the current run of one color (dropped on return:
    // never held across the write or an await).
    let mut held = None;
    loop {
        if requests >= limits.max_requests || out.len() >= limits.max_output {
            return Served {
                used,
                requests,
                stop: Stop::Budget,
            };
        }
        match proto.parse(session, &input[used..]) {
            Parsed::Incomplete(need) => {
                return Served {
                    used,
                    requests,
                    stop: Stop::NeedMore(need),
                }
            }
            Parsed::Skip(n) => {
                let n = n.min(input.len() - used);
                if n == 0 {
                    return Served {
                        used,
                        requests,
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
                        stop: Stop::Elsewhere(color),
                    };
                }
                let flow = lane.run_held(color, !P::LOCKS_ITSELF, &mut held, || {
                    proto.execute(session, req, out)
                });
                used += n;
                requests += 1;
                if flow == Flow::Close {
                    return Served {
                        used,
                        requests,
                        stop: Stop::Close,
                    };
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
    /// Most requests of one read executed before the driver writes their
    /// responses and lets the loop run others.
    pub max_batch_requests: usize,
    /// Most response bytes buffered before the driver writes them.
    pub max_batch_output: usize,
}

impl Default for DriverConfig {
    /// No idle timeout, 64 requests or 64 KiB of responses per batch: a
    /// flooded loop then answers a newcomer within about a millisecond
    /// (`duality bench fairness`), and a yield every 64 requests costs
    /// nothing measurable.
    fn default() -> Self {
        DriverConfig {
            idle_timeout: None,
            max_batch_requests: 64,
            max_batch_output: 64 * 1024,
        }
    }
}

/// Size of a standard read buffer (and the first size of a response buffer).
pub const BUF_SIZE: usize = 16 * 1024;
/// Buffer sets a thread's pool keeps for reuse; more are freed.
pub const POOL_KEEP: usize = 64;
/// A response buffer that grew past this is freed after its write.
const OUT_KEEP: usize = 4 * BUF_SIZE;

thread_local! {
    /// The spare buffer sets of the connections of this thread's loop,
    /// boxed as connections hold them (taking one moves a pointer).
    #[allow(clippy::vec_box)]
    static POOL: RefCell<Vec<Box<Active>>> = const { RefCell::new(Vec::new()) };
}

/// A standard buffer set, from this thread's pool if it has one.
fn take_active() -> Box<Active> {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| {
        Box::new(Active {
            buf: vec![0; BUF_SIZE],
            start: 0,
            end: 0,
            out: Vec::with_capacity(BUF_SIZE),
            need: 0,
            answered: Answered {
                requests: 0,
                read_at: None,
            },
            next_color: None,
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
    out: Vec<u8>,
    /// Bytes the pending request needs in all (0: unknown).
    need: usize,
    /// Requests served whose responses are not written yet.
    answered: Answered,
    /// The color of the next batch's first request, where the last batch
    /// stopped at it (amped: it belongs to another payload thread).
    next_color: Option<u64>,
}

/// A protocol and how the driver treats its connections: made once per
/// server, shared by all of its connections (one pointer in each).
pub struct Driver<P> {
    proto: P,
    limits: BatchLimits,
    idle_timeout: Option<Duration>,
}

impl<P: Protocol> Driver<P> {
    /// Serves `proto` under `cfg`.
    pub fn new(proto: P, cfg: DriverConfig) -> Arc<Driver<P>> {
        Arc::new(Driver {
            proto,
            limits: BatchLimits {
                max_requests: cfg.max_batch_requests.max(1),
                max_output: cfg.max_batch_output.max(1),
            },
            idle_timeout: cfg.idle_timeout,
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
        let s = serve_bytes(
            &d.proto,
            session,
            &self.buf[self.start..self.end],
            &mut self.out,
            lane,
            d.limits,
        );
        self.start += s.used;
        s
    }
}

/// Serves one connection with `driver`'s protocol until it closes, an idle
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
    // included: what is the same for all of them lives in `driver`.
    async move {
        let mut session = driver.proto.session(&conn);
        // The connection's buffers while it is busy. One variable for the
        // idle wait's take and the busy loop (two would each get a slot in
        // the future).
        let mut a: Box<Active>;
        loop {
            // Idle: wait holding no buffer; take a set only for bytes that
            // have arrived (readiness can be stale: a read may find nothing).
            loop {
                conn.set_mid_request(driver.proto.mid_request(&session));
                let ready = match driver.idle_timeout {
                    None => conn.readable().await,
                    // Boxed: a timer's state stays out of the futures of
                    // servers without an idle timeout.
                    Some(w) => Box::pin(conn.readable_for(Some(w))).await,
                }
                .is_ok();
                if !ready {
                    return;
                }
                a = take_active();
                match conn.try_read(&mut a.buf).await {
                    Ok(Some(0)) | Err(_) => return,
                    Ok(Some(n)) => {
                        a.end = n;
                        a.answered.read_at = duality_rt::stats::poll_started();
                        break;
                    }
                    Ok(None) => give_active(a),
                }
            }
            // Busy until nothing is pending.
            loop {
                // Serve everything buffered, batch by batch; write what a
                // batch made when it used up its budget (then let the loop
                // run others) and once at the end of the read: one write
                // site, awaited inline (a future of its own would sit in
                // every connection's).
                a.next_color = None;
                loop {
                    let then = loop {
                        let served = match payload.inline_lane() {
                            Some(lane) => a.serve(&driver, &mut session, &lane),
                            None => {
                                let color = match a.next_color.take() {
                                    Some(c) => c,
                                    None if payload.routes_by_color() => driver
                                        .proto
                                        .peek_color(&session, &a.buf[a.start..a.end])
                                        .unwrap_or(DEFAULT_COLOR),
                                    None => DEFAULT_COLOR,
                                };
                                let d = driver.clone();
                                // Boxed: the hop's state (a payload-thread call)
                                // would otherwise sit in every connection's
                                // future, idle ones and inline models included;
                                // one allocation per batch is small beside a
                                // cross-thread hop.
                                let (a2, s2, served) =
                                    Box::pin(payload.batch(color, move |lane| {
                                        let (mut a, mut session) = (a, session);
                                        let s = a.serve(&d, &mut session, lane);
                                        (a, session, s)
                                    }))
                                    .await;
                                a = a2;
                                session = s2;
                                served
                            }
                        };
                        a.answered.requests += served.requests as u64;
                        // What follows the write (decided before it: a
                        // byte, not a `Stop`, is kept across its await).
                        match served.stop {
                            Stop::Elsewhere(c) => a.next_color = Some(c),
                            Stop::NeedMore(n) => {
                                a.need = n;
                                break Then::Read;
                            }
                            Stop::Budget => break Then::Yield,
                            Stop::Close => break Then::Close,
                        }
                    };
                    if !a.out.is_empty() {
                        a.answered.first_byte();
                        let r = conn.write_all(&a.out).await;
                        written(&mut a.out);
                        if r.is_err() {
                            return;
                        }
                    }
                    match then {
                        Then::Read => break,
                        Then::Yield => duality_rt::yield_now().await,
                        Then::Close => return,
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
                let end = a.end;
                let n = match conn.read(&mut a.buf[end..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                a.answered.read_at = duality_rt::stats::poll_started();
                a.end += n;
            }
        }
    }
}

/// Makes room at the end of the read buffer: drops served bytes, grows it
/// as far as the pending request needs (up to `max`), and swaps a large
/// buffer back for a standard one once what it holds fits.
fn make_room(h: &mut Active, max: usize) {
    let need = h.need;
    let live = h.end - h.start;
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
fn written(out: &mut Vec<u8>) {
    out.clear();
    if out.capacity() > OUT_KEEP {
        *out = Vec::with_capacity(BUF_SIZE);
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
            out: Vec::new(),
            need: 0,
            answered: Answered {
                requests: 0,
                read_at: None,
            },
            next_color: None,
        }
    }

    fn make_room_for(h: &mut Active, need: usize, max: usize) {
        h.need = need;
        make_room(h, max);
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
}
