//! The session driver: one connection loop under every server, and the small
//! protocol seam a server implements to use it.
//!
//! A server is a [`Protocol`] — how to find one request in bytes (pure, over
//! a slice), which color it has, how to execute it and append its response
//! (pelikan's `Parse` / `Execute` / `Compose`). [`drive`] does the rest, the
//! same way in every threading model:
//!
//! ```text
//! loop
//!   idle: wait for readability holding no buffer          (readable_for)
//!   take a read buffer from this thread's pool, read into its free tail
//!   serve the buffered bytes as batches:                  ← batching point:
//!     inline models:    serve_bytes here, under color locks   one job per read,
//!     hand-off models:  move buf + out + session to a payload  not per request
//!                       thread, serve_bytes there, move back
//!     a batch stops at: an incomplete request, a color that belongs to
//!     another payload thread (amped), its request or output budget, Close
//!   write every response of the read with one write       ← batching point
//!   nothing left over → the buffers go back to the pool
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
//! connection holds no buffer. Per-thread pools keep at most [`POOL_KEEP`]
//! buffers, so memory goes back once connections close.
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
                let flow = lane.run(color, !P::LOCKS_ITSELF, || proto.execute(session, req, out));
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
/// Buffers a thread's pool keeps for reuse; more are freed.
pub const POOL_KEEP: usize = 64;
/// A response buffer that grew past this is freed after its write.
const OUT_KEEP: usize = 4 * BUF_SIZE;

/// A thread's spare buffers: read buffers (len == capacity == BUF_SIZE,
/// initialized) and response buffers (empty).
type Pool = (Vec<Vec<u8>>, Vec<Vec<u8>>);

thread_local! {
    /// The spare buffers of the connections of this thread's loop.
    static POOL: RefCell<Pool> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fn take_read_buf() -> Vec<u8> {
    POOL.with(|p| p.borrow_mut().0.pop())
        .unwrap_or_else(|| vec![0; BUF_SIZE])
}

fn give_read_buf(b: Vec<u8>) {
    if b.len() == BUF_SIZE {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.0.len() < POOL_KEEP {
                p.0.push(b);
            }
        });
    }
}

fn take_out_buf() -> Vec<u8> {
    POOL.with(|p| p.borrow_mut().1.pop())
        .unwrap_or_else(|| Vec::with_capacity(BUF_SIZE))
}

fn give_out_buf(mut b: Vec<u8>) {
    if b.capacity() >= BUF_SIZE && b.capacity() <= OUT_KEEP {
        b.clear();
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.1.len() < POOL_KEEP {
                p.1.push(b);
            }
        });
    }
}

/// Buffers pooled on this thread now: (read buffers, response buffers).
pub fn pooled_buffers() -> (usize, usize) {
    POOL.with(|p| {
        let p = p.borrow();
        (p.0.len(), p.1.len())
    })
}

/// One connection's buffers and protocol state: what a hand-off moves.
struct Held<S> {
    buf: Vec<u8>,
    /// Buffered input is `buf[start..end]`.
    start: usize,
    end: usize,
    out: Vec<u8>,
    session: S,
}

/// Serves one connection with `proto` until it closes, an idle timeout, a
/// request that closes, or the server's shutdown (between requests).
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
    proto: Arc<P>,
    cfg: DriverConfig,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // Only what the loop below uses is captured (each byte is held by every
    // connection, idle ones included).
    let limits = BatchLimits {
        max_requests: cfg.max_batch_requests.max(1),
        max_output: cfg.max_batch_output.max(1),
    };
    let idle_timeout = cfg.idle_timeout;
    async move {
        let inline = payload.inline_lane();
        let routes = payload.routes_by_color();
        let mut held = Held {
            buf: Vec::new(),
            start: 0,
            end: 0,
            out: Vec::new(),
            session: P::Session::default(),
        };
        // Bytes the pending request needs in all (0: unknown).
        let mut need = 0;
        // Requests served whose responses are not written yet, and when the
        // read that completed them happened (its poll's start).
        let mut answered = Answered {
            requests: 0,
            read_at: None,
        };
        loop {
            if held.buf.is_empty() {
                // Idle: wait holding no buffer; take one only for bytes that
                // have arrived (readiness can be stale: a read may find nothing).
                let n = loop {
                    conn.set_mid_request(proto.mid_request(&held.session));
                    let ready = match idle_timeout {
                        None => conn.readable().await,
                        // Boxed: a timer's state stays out of the futures of
                        // servers without an idle timeout.
                        Some(w) => Box::pin(conn.readable_for(Some(w))).await,
                    };
                    if ready.is_err() {
                        return;
                    }
                    let mut b = take_read_buf();
                    match conn.try_read(&mut b).await {
                        Ok(Some(0)) | Err(_) => return,
                        Ok(Some(n)) => {
                            held.buf = b;
                            answered.read_at = duality_rt::stats::poll_started();
                            break n;
                        }
                        Ok(None) => give_read_buf(b),
                    }
                };
                held.start = 0;
                held.end = n;
            } else {
                make_room(&mut held, need, proto.max_request().max(BUF_SIZE));
                if held.end == held.buf.len() {
                    // The pending request would not fit even in the largest
                    // buffer: the protocol broke its contract. Never grow past
                    // the bound.
                    tracing::debug!("closing a connection whose request outgrew the buffer bound");
                    return;
                }
                conn.set_mid_request(true);
                let n = match conn.read(&mut held.buf[held.end..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                answered.read_at = duality_rt::stats::poll_started();
                held.end += n;
            }
            if held.out.capacity() == 0 {
                held.out = take_out_buf();
            }

            // Serve everything buffered, batch by batch; write what a batch
            // made when it used up its budget (then let the loop run others)
            // and once at the end of the read: one write site, awaited
            // inline (a future of its own would sit in every connection's).
            let mut next_color = None;
            loop {
                let then = loop {
                    let served = match &inline {
                        Some(lane) => {
                            let Held {
                                buf,
                                start,
                                end,
                                out,
                                session,
                            } = &mut held;
                            let s = serve_bytes(
                                &*proto,
                                session,
                                &buf[*start..*end],
                                out,
                                lane,
                                limits,
                            );
                            *start += s.used;
                            s
                        }
                        None => {
                            let color = match next_color.take() {
                                Some(c) => c,
                                None if routes => proto
                                    .peek_color(&held.session, &held.buf[held.start..held.end])
                                    .unwrap_or(DEFAULT_COLOR),
                                None => DEFAULT_COLOR,
                            };
                            let p = proto.clone();
                            let mut h = std::mem::replace(
                                &mut held,
                                Held {
                                    buf: Vec::new(),
                                    start: 0,
                                    end: 0,
                                    out: Vec::new(),
                                    session: P::Session::default(),
                                },
                            );
                            // Boxed: the hop's state (a payload-thread call) would
                            // otherwise sit in every connection's future, idle
                            // ones and inline models included; one allocation per
                            // batch is small beside a cross-thread hop.
                            let (h, s) = Box::pin(payload.batch(color, move |lane| {
                                let s = serve_bytes(
                                    &*p,
                                    &mut h.session,
                                    &h.buf[h.start..h.end],
                                    &mut h.out,
                                    lane,
                                    limits,
                                );
                                h.start += s.used;
                                (h, s)
                            }))
                            .await;
                            held = h;
                            s
                        }
                    };
                    answered.requests += served.requests as u64;
                    // What follows the write (decided before it: a byte,
                    // not a `Stop`, is kept across its await).
                    match served.stop {
                        Stop::Elsewhere(c) => next_color = Some(c),
                        Stop::NeedMore(n) => {
                            need = n;
                            break Then::Read;
                        }
                        Stop::Budget => break Then::Yield,
                        Stop::Close => break Then::Close,
                    }
                };
                if !held.out.is_empty() {
                    answered.first_byte();
                    let r = conn.write_all(&held.out).await;
                    written(&mut held.out);
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
            if held.start == held.end {
                // Nothing pending: the connection goes idle without buffers.
                give_read_buf(std::mem::take(&mut held.buf));
                give_out_buf(std::mem::take(&mut held.out));
                need = 0;
            }
        }
    }
}

/// Makes room at the end of the read buffer: drops served bytes, grows it
/// as far as the pending request needs (up to `max`), and swaps a large
/// buffer back for a standard one once what it holds fits.
fn make_room<S>(h: &mut Held<S>, need: usize, max: usize) {
    let live = h.end - h.start;
    let big = h.buf.len() > BUF_SIZE;
    if big && live < BUF_SIZE && need <= BUF_SIZE {
        let mut small = take_read_buf();
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
        *out = take_out_buf();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(buf: Vec<u8>, start: usize, end: usize) -> Held<()> {
        Held {
            buf,
            start,
            end,
            out: Vec::new(),
            session: (),
        }
    }

    #[test]
    fn a_declared_large_request_grows_the_buffer_once_to_its_size() {
        let mut h = held(vec![7; BUF_SIZE], 0, BUF_SIZE);
        make_room(&mut h, 300_000, 1 << 20);
        assert_eq!(h.buf.len(), 300_000, "grown exactly to the declared need");
        assert_eq!(
            &h.buf[..BUF_SIZE],
            &[7; BUF_SIZE][..],
            "what was read is kept"
        );
        // Never past the bound.
        let mut h = held(vec![0; BUF_SIZE], 0, BUF_SIZE);
        make_room(&mut h, 5 << 20, 1 << 20);
        assert_eq!(h.buf.len(), 1 << 20);
    }

    #[test]
    fn without_a_declared_size_a_full_buffer_doubles() {
        let mut h = held(vec![0; BUF_SIZE], 0, BUF_SIZE);
        make_room(&mut h, 0, 1 << 20);
        assert_eq!(h.buf.len(), 2 * BUF_SIZE);
    }

    #[test]
    fn a_large_buffer_shrinks_back_once_its_request_is_served() {
        let mut big = vec![0; 300_000];
        big[299_991..].copy_from_slice(b"get k\r\nge");
        // The large request (299,997 bytes) was served; 2 bytes of the next
        // one remain.
        let mut h = held(big, 299_997, 300_000);
        make_room(&mut h, 0, 1 << 20);
        assert_eq!(h.buf.len(), BUF_SIZE);
        assert_eq!((h.start, h.end), (0, 3));
        assert_eq!(&h.buf[..3], b"\nge");
    }

    #[test]
    fn served_bytes_are_dropped_only_when_room_is_needed() {
        let mut h = held(vec![1; BUF_SIZE], 100, 200);
        make_room(&mut h, 0, 1 << 20);
        assert_eq!(
            (h.start, h.end),
            (100, 200),
            "no copy while the tail is free"
        );
        let mut h = held(vec![1; BUF_SIZE], 100, BUF_SIZE);
        make_room(&mut h, 0, 1 << 20);
        assert_eq!((h.start, h.end), (0, BUF_SIZE - 100), "moved to the front");
        assert_eq!(h.buf.len(), BUF_SIZE);
    }

    #[test]
    fn pools_keep_a_bounded_number_of_buffers() {
        let bufs: Vec<_> = (0..POOL_KEEP + 10).map(|_| take_read_buf()).collect();
        for b in bufs {
            give_read_buf(b);
        }
        assert_eq!(pooled_buffers().0, POOL_KEEP);
        // A grown buffer is never pooled.
        give_read_buf(vec![0; 2 * BUF_SIZE]);
        assert_eq!(pooled_buffers().0, POOL_KEEP);
    }
}
