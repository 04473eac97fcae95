//! The web server as a [`Protocol`] on the session driver
//! (`duality_models::session`): the driver reads, batches, writes, times
//! out and lingers; this module says what a request is and answers it.
//!
//! ```text
//! parse      parse_head over the buffered bytes (pure): a head and its
//!            (small) body, or "need more", or an error that closes
//! execute    on whatever thread the model runs payload work:
//!              405, the stub status, a cached file (its body shared from
//!              the cache when it is the only response of the write)
//!              → the response, appended; the driver serves on
//!              a large file kept open, or anything not in the caches
//!              → Flow::Finish: nothing appended yet
//! finish     on the connection's loop, after the responses before it went
//!            out: the lookup on the blocking pool (the payload threads in
//!            the hand-off models, as Flash's AMPED helpers), then bytes,
//!            a redirect, an error, a gzip variant compressed through the
//!            offload policy, or a body sent with sendfile / read through
//!            the ring
//! waiting    before the driver waits: a 100 Continue that is due; the
//!            stub status's reading / waiting
//! timed_out  idle: close silently; request: 408 and close; write: close
//! linger     after an error that closes, or with unread requests behind
//! ```
//!
//! Timeouts, so that slow clients cannot pin connections (the driver's, see
//! [`driver`]): `idle_timeout` bounds the wait for the first byte of a
//! request; `head_timeout` is a **deadline** for the whole head (and its
//! small body) from its first byte, not a per-read timeout: a client
//! dribbling one byte at a time (slowloris) is cut off at the deadline
//! however steadily it dribbles; `write_timeout` bounds each write, and
//! each wait of a `sendfile`, so a client that never reads is cut off too.
//! `Conn` keeps them in every threading model: the protocol never asks
//! which model runs it.
//!
//! Metrics: the driver records each request's time to first byte and loop
//! hold at the write that answers it; with the stub status page on, the
//! connection also counts itself as reading, writing or waiting.

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use duality_rt::time::loop_now;

use duality_models::session::{Output, Reply, Timeout};
use duality_models::{Conn, Driver, DriverConfig, Flow, Linger, Parsed, Protocol};

use crate::auth_basic::{credentials, Quick};
use crate::date;
use crate::error_page::ErrorPage;
use crate::file::FileMeta;
use crate::gzip::{self, GzipInput, GzipJob};
use crate::limit_req::Verdict;
use crate::location::Scope;
use crate::log_format::Entry;
use crate::path;
use crate::request::{continue_due, parse_head, Discard, Head, Method};
use crate::response::{
    not_modified, plan_encoded, plan_error_page, write_error, write_redirect, write_redirect_to,
    write_refusal, write_returned, write_text, ByteRange, Encoding, Parts, Plan, CONTINUE,
};
use crate::return_directive::Return;
use crate::rewrite::Applied;
use crate::send_path::{self, SendPath};
use crate::server::{Found, HttpState, OpenFile, Phase};
use crate::status::{HttpError, Status};
use crate::sys;

/// A response whose body could not be sent whole (the client went away,
/// or stopped reading past the write timeout): its plan, for the log.
struct Aborted {
    plan: Plan,
    error: io::Error,
    /// Bytes of the body handed to the kernel before the error.
    sent: u64,
}

/// Requests answered from one read before the driver writes their
/// responses and lets the loop run others: with 64, four flooding clients
/// kept a newcomer waiting 30-40 ms under `sped`; with 16, about 1 ms
/// (`duality bench fairness`).
const REQUESTS_PER_TURN: usize = 16;
/// Response bytes buffered before the driver writes them, even mid-batch.
const FLUSH_AT: usize = 64 * 1024;
/// Bytes per `sendfile` call; the task yields between calls so that one
/// large file does not hold its loop.
const SENDFILE_CHUNK: u64 = duality_rt::fs::FETCH_MAX as u64;
/// The largest body sent in one call with its head ([`Reply::flush_with`]);
/// a larger one's head is written first.
const HEAD_WITH_BODY_MAX: u64 = 64 * 1024;
/// A cached body at least this large, answering the first request of a
/// write, is not copied into the output: the write sends it from the cache
/// entry ([`Output::share`]). Smaller ones cost less to copy than a second
/// segment does.
const SHARED_BODY_MIN: usize = 4096;

/// The session driver for the web server with `state`'s timeouts and
/// batch bounds: one per server, shared by its connections.
pub fn driver(state: Arc<HttpState>) -> Arc<Driver<HttpProtocol>> {
    let cfg = &state.cfg;
    let config = DriverConfig {
        idle_timeout: Some(cfg.idle_timeout),
        request_timeout: Some(cfg.head_timeout),
        write_timeout: Some(cfg.write_timeout),
        max_batch_requests: REQUESTS_PER_TURN,
        max_batch_output: FLUSH_AT,
    };
    Driver::new(HttpProtocol { state }, config)
}

/// HTTP/1.x over the server's state: what the session driver serves.
pub struct HttpProtocol {
    state: Arc<HttpState>,
}

/// One request as `parse` found it: a head, or why there is none.
pub struct HttpRequest<'a> {
    what: Seen<'a>,
    /// The connection's color.
    color: u64,
    /// It came in the same read as the request before it (`$pipe`).
    pipelined: bool,
}

/// What `parse` found.
// The head is large beside the other variants, but boxing it would cost an
// allocation per request; a `Seen` lives on the stack for one call.
#[allow(clippy::large_enum_variant)]
enum Seen<'a> {
    /// A head. Its body, if any, is dropped as it arrives: `body` is where
    /// its discard stands after the bytes that came with the head (`None`:
    /// no body, or all of it came).
    Head {
        head: Head<'a>,
        body: Option<Discard>,
        /// `100 Continue` goes out before the answer.
        continue_first: bool,
    },
    /// A refused head: why, and its request line (for the log).
    Refused(HttpError, Option<&'a [u8]>),
    /// The body of a request already answered broke its framing: the
    /// connection closes with nothing more to say (as nginx's does).
    BadBody,
    /// The body of an answer that closes the connection has all come: now
    /// it closes.
    BodyEnded,
    /// `--proxy-protocol`: the connection did not begin with a PROXY
    /// header; it closes without an answer, as nginx's does.
    BadProxyHeader,
}

/// What a connection keeps between requests (it moves with a batch to a
/// payload thread and back).
#[derive(Default)]
pub struct HttpSession {
    /// The client's address, for the access log (empty with no log).
    peer: String,
    /// The client is a trusted proxy (`--real-ip-from`): the access log
    /// takes the address its requests name.
    proxy: bool,
    /// Spreads connections over the payload threads where the model routes
    /// by color: the server's state locks itself, so any color will do.
    /// Counted from 1 per connection, it is also the log's `$connection`.
    color: u64,
    /// The state to count this connection's phase in (stub status on).
    phases: Option<Arc<HttpState>>,
    phase: Phase,
    /// The response that closes the connection was an error: linger.
    failed: bool,
    /// What `finish` does for the request `execute` left to it.
    pending: Option<Pending>,
    /// The body of the last request, being dropped as it arrives, and
    /// when dropping it must be over (`lingering_time` from its answer).
    discard: Option<(Discard, Instant)>,
    /// The answer to that request closes the connection once the body has
    /// all come.
    close_after_body: bool,
    /// `finish` sends `100 Continue` where it answers the file.
    interim: bool,
    /// An answer could not be written (timed out, reset): the connection
    /// closes without lingering, as nginx's after a send error.
    write_failed: bool,
    /// Request heads answered on this connection, this one included.
    requests: u64,
    /// When the connection was opened (`--keepalive-time`).
    opened: Option<Instant>,
    /// `--proxy-protocol`: the PROXY header is still to come.
    proxy_pending: bool,
    /// What the connection's PROXY header said.
    proxy_header: Option<crate::proxy_protocol::ProxyHeader>,
    /// The address the client connected to (`--absolute-redirect on`,
    /// `$server_addr`, `$server_port`).
    local: Option<std::net::SocketAddr>,
    /// The current request's `$request_id`, once a field or the log used
    /// it: the same in both. Reset by each request and each timeout.
    request_id: std::sync::OnceLock<[u8; 32]>,
    /// The current request's `--secure-link`, as far as it was checked.
    secure_link: Option<crate::secure_link::Seen>,
    /// The input left after the last request parsed holds more.
    more_follows: bool,
    /// The current request came behind another (`$pipe`).
    pipelined: bool,
    /// What `--limit-req` and `--limit-conn` did to the current request
    /// (`$limit_req_status`, `$limit_conn_status`).
    limited: [Option<&'static str>; 2],
    /// Whether `--valid-referers` refused the current request's Referer.
    invalid_referer: Option<bool>,
    /// The current answer's head and gzip sizes, kept for the log where a
    /// format wants them (`$bytes_sent`, `$sent_http_…`, `$gzip_ratio`):
    /// written where `session` is shared; its `uri` also chooses the
    /// location of an answer from another address. Made only then, or
    /// where the server has locations (most servers do not keep it, and
    /// a session's size is each connection's cost).
    sent: Option<Box<std::sync::Mutex<Sent>>>,
    /// The client's address, for the access log and `--allow` / `--deny`
    /// (none for a Unix socket, or where neither is on).
    ip: Option<IpAddr>,
    /// The client's port, for the access log (none for a Unix socket).
    port: Option<u16>,
    /// The request was held to `--limit-req`'s rate and is now answered:
    /// not charged again.
    paced: bool,
    /// The request's credentials passed `--auth-basic` on the blocking
    /// pool: not checked again. Both flags are the current request's only.
    verified: bool,
    /// The connection's place in `--limit-conn`'s count while it has a
    /// request in progress: taken by the request that passes the check,
    /// given back once every answer is written (or the connection closes).
    conn_slot: Option<crate::limit_conn::ConnSlot>,
    /// When the first bytes of a request not yet whole came (access log
    /// on), for its `$request_time`.
    reading: Option<Instant>,
    /// When the request being answered began: its first bytes, or its
    /// head where it came whole in one read.
    began: Option<Instant>,
}

/// What the log keeps of an answer (see `HttpSession::sent`).
#[derive(Default)]
struct Sent {
    /// Its head.
    head: Vec<u8>,
    /// Its body's bytes before and after compression here.
    gzip: Option<(u64, u64)>,
    /// The address it was served from, where not the request's (`$uri`
    /// after an index file, a `--try-files` name, an error page).
    uri: Option<Arc<str>>,
}

/// What the `--rewrite` rules made of a request.
enum Rewritten {
    /// Its path and query, changed or not, are looked up.
    Kept,
    /// A rule answers it with a redirect.
    Redirect(Status, Vec<u8>),
    /// A rule gave a path no file can be looked up by.
    Failed,
}

/// A response `execute` could not make from memory.
enum Pending {
    /// A large file kept open: its body goes out with `sendfile`.
    Open {
        open: Arc<OpenFile>,
        meta: FileMeta,
        content_type: &'static str,
        encoding: Encoding,
    },
    /// Over `--limit-req`'s rate, within its burst: answered after this
    /// wait.
    Paced(Duration),
    /// Credentials for `--auth-basic` to check on the blocking pool (the
    /// user and the password).
    Verify(String, Vec<u8>),
    /// Not in the caches: the blocking lookup decides (`refused`: the
    /// request is answered this error instead, `--deny` or `--return`;
    /// an error page may still answer).
    Miss {
        want_gzip: bool,
        refused: Option<Status>,
    },
}

/// A body being sent: its bytes handed to the kernel so far, and its pace.
struct Progress {
    sent: u64,
    pace: Option<Pace>,
}

/// A body's pace under `--limit-rate`: nginx's `limit_rate` arithmetic, a
/// second's worth of bytes allowed at once, then the rate.
struct Pace {
    /// Bytes a second.
    rate: u64,
    /// Bytes sent before the pace applies.
    after: u64,
    /// When the body began.
    start: Instant,
}

impl Pace {
    /// How many more bytes may go now, having sent `sent`; or how long to
    /// wait before any may.
    fn allows(&self, sent: u64, now: Instant) -> Result<usize, Duration> {
        let ms = now.saturating_duration_since(self.start).as_millis() as u64;
        let allowed = self
            .after
            .saturating_add(self.rate.saturating_mul(ms + 1000) / 1000);
        match allowed.checked_sub(sent) {
            Some(n) if n > 0 => Ok(n.min(usize::MAX as u64) as usize),
            _ => Err(Duration::from_millis(
                (sent - allowed).saturating_mul(1000) / self.rate + 1,
            )),
        }
    }
}

/// What is known of whether a file's pages are in the page cache before
/// its body is sent ([`HttpProtocol::send_file`]).
enum Residency {
    /// Just read in.
    Known,
    /// Not known: each piece is asked.
    Ask,
    /// A file kept open (`u64`: its size): asked, the answer remembered
    /// there when the file is small ([`HEAD_WITH_BODY_MAX`]).
    Remembered(Arc<OpenFile>, u64),
}

impl HttpSession {
    fn set_phase(&mut self, to: Phase) {
        if let Some(st) = &self.phases {
            if self.phase != to {
                st.phases.change(self.phase, to);
                self.phase = to;
            }
        }
    }
}

impl Drop for HttpSession {
    fn drop(&mut self) {
        self.set_phase(Phase::Waiting);
    }
}

/// Colors handed to connections in turn.
static NEXT_COLOR: AtomicU64 = AtomicU64::new(1);

impl Protocol for HttpProtocol {
    type Session = HttpSession;
    type Request<'a> = HttpRequest<'a>;

    const LOCKS_ITSELF: bool = true;

    // As nginx's graceful stop: a pipeline's requests not started by then
    // are the client's to send again.
    const SHUTDOWN_AT_BOUNDARY: bool = true;

    fn max_request(&self) -> usize {
        self.state.cfg.limits.max_request()
    }

    fn session(&self, conn: &Conn) -> HttpSession {
        // nginx's `$remote_addr` for a Unix socket is `unix:`.
        // The address is looked up only where the log, `--allow` /
        // `--deny` or `--limit-req` need it.
        let logged = self.state.log.is_some();
        let wanted = logged
            || self.state.scopes.all().any(|s| !s.access.is_empty())
            || !self.state.limiter.is_empty()
            || self.state.conn_limit.is_some();
        let (peer, ip, port, proxy) = if !wanted {
            (String::new(), None, None, false)
        } else if conn.is_unix() {
            let peer = if logged { "unix:" } else { "" };
            (
                peer.to_owned(),
                None,
                None,
                self.state.cfg.real_ip.trusts(None),
            )
        } else {
            let addr = conn.peer_addr();
            let ip = addr.map(|a| a.ip());
            let peer = match (logged, ip) {
                (false, _) => String::new(),
                (true, Some(ip)) => ip.to_string(),
                (true, None) => "-".to_owned(),
            };
            let trusted = ip.is_some() && self.state.cfg.real_ip.trusts(ip);
            (peer, ip, addr.map(|a| a.port()), trusted)
        };
        HttpSession {
            peer,
            proxy,
            color: NEXT_COLOR.fetch_add(1, Relaxed),
            phases: self
                .state
                .cfg
                .stub_status
                .is_some()
                .then(|| self.state.clone()),
            phase: Phase::Waiting,
            failed: false,
            pending: None,
            discard: None,
            close_after_body: false,
            interim: false,
            write_failed: false,
            requests: 0,
            request_id: std::sync::OnceLock::new(),
            secure_link: None,
            more_follows: false,
            pipelined: false,
            limited: [None; 2],
            invalid_referer: None,
            sent: (crate::log_format::head_wanted()
                || crate::log_format::uri_wanted()
                || self.state.scopes.has_locations())
            .then(Box::default),
            opened: Some(loop_now()),
            proxy_pending: self.state.cfg.proxy_protocol,
            proxy_header: None,
            local: match self.state.cfg.absolute_redirect || crate::log_format::local_wanted() {
                true => conn.local_addr(),
                false => None,
            },
            ip,
            port,
            paced: false,
            verified: false,
            conn_slot: None,
            reading: None,
            began: None,
        }
    }

    fn parse<'a>(&self, session: &mut HttpSession, input: &'a [u8]) -> Parsed<HttpRequest<'a>> {
        let color = session.color;
        let limits = &self.state.cfg.limits;
        let refused = |what| {
            let pipelined = false;
            Parsed::Request(
                HttpRequest {
                    what,
                    color,
                    pipelined,
                },
                input.len(),
            )
        };
        if session.proxy_pending {
            return match crate::proxy_protocol::parse(input) {
                Ok(None) => Parsed::Incomplete(0),
                Ok(Some((header, n))) => {
                    session.proxy_pending = false;
                    session.proxy_header = Some(header);
                    Parsed::Skip(n)
                }
                Err(_) => refused(Seen::BadProxyHeader),
            };
        }
        if let Some((body, _)) = &mut session.discard {
            match body.skip(input, limits) {
                Ok(s) => {
                    if s.done {
                        session.discard = None;
                        if session.close_after_body {
                            return refused(Seen::BodyEnded);
                        }
                    }
                    if s.used > 0 {
                        return Parsed::Skip(s.used);
                    }
                    if !s.done {
                        return Parsed::Incomplete(0);
                    }
                }
                Err(_) => return refused(Seen::BadBody),
            }
        }
        match parse_head(input, limits) {
            Ok(None) => Parsed::Incomplete(0),
            Ok(Some((head, n))) => {
                let after = &input[n..];
                let continue_first = continue_due(&head, after);
                // What of the body came with the head is dropped now: bad
                // framing in it is still answered (400), as nginx reads
                // what is there before it answers.
                let mut len = n;
                let mut body = Discard::new(&head);
                if let Some(d) = &mut body {
                    match d.skip(after, limits) {
                        Ok(s) => {
                            len += s.used;
                            if s.done {
                                body = None;
                            }
                        }
                        Err(e) => return refused(Seen::Refused(e, request_line(input))),
                    }
                }
                let what = Seen::Head {
                    head,
                    body,
                    continue_first,
                };
                // nginx's `$pipe`: this request was in the input the last
                // one left; the next is if this one leaves some.
                let pipelined = std::mem::replace(&mut session.more_follows, input.len() > len);
                Parsed::Request(
                    HttpRequest {
                        what,
                        color,
                        pipelined,
                    },
                    len,
                )
            }
            // The connection closes after the error: the rest is dropped.
            // A line that has not ended (a target past its limit) still
            // says its method: a HEAD's answer has no body.
            Err(e) => refused(Seen::Refused(
                e,
                request_line(input).or_else(|| line_so_far(input)),
            )),
        }
    }

    fn color(&self, req: &HttpRequest<'_>) -> u64 {
        req.color
    }

    fn peek_color(&self, session: &HttpSession, _input: &[u8]) -> Option<u64> {
        Some(session.color)
    }

    fn execute(&self, session: &mut HttpSession, req: HttpRequest<'_>, out: &mut Output) -> Flow {
        // Where a `100 Continue` went, if one did.
        let mut interim = None;
        if self.state.log.is_some() {
            session.began = Some(session.reading.take().unwrap_or_else(loop_now));
        }
        // A new request: the last one's waits, checks and id are not its
        // own.
        session.paced = false;
        session.verified = false;
        session.request_id.take();
        session.secure_link = None;
        session.pipelined = req.pipelined;
        session.limited = [None; 2];
        session.invalid_referer = None;
        if let Some(sent) = session.sent.as_deref_mut() {
            let sent = match sent.get_mut() {
                Ok(s) => s,
                Err(e) => e.into_inner(),
            };
            sent.head.clear();
            sent.gzip = None;
            sent.uri = None;
        }
        let head = match req.what {
            Seen::Head {
                mut head,
                body,
                continue_first,
            } => {
                // As nginx's keepalive_requests: the answer to the last
                // request a connection may make closes it.
                session.requests += 1;
                if self.last_allowed(session) {
                    head.keep_alive = false;
                }
                // Answered before its body is in, as nginx answers a static
                // request; the body is dropped as it comes.
                let linger = self.state.cfg.lingering_time;
                session.discard = body.map(|b| (b, loop_now() + linger));
                if continue_first {
                    interim = Some(out.len());
                    out.extend_from_slice(CONTINUE);
                }
                head
            }
            Seen::Refused(e, line) => {
                self.error(session, e, None, line, out);
                session.failed = true;
                return Flow::Close;
            }
            Seen::BadBody | Seen::BadProxyHeader => {
                session.failed = true;
                return Flow::Close;
            }
            // The body of an answer that closes the connection has ended.
            Seen::BodyEnded => return Flow::Close,
        };
        session.set_phase(Phase::Writing);
        let mut head = head;
        let answered = match self.rewrite(session, &mut head) {
            Rewritten::Kept => self.respond_now(session, &head, out),
            Rewritten::Redirect(status, location) => {
                self.state.phases.request();
                Some(self.redirect(session, &head, status, location, out))
            }
            Rewritten::Failed => {
                // The rule gave no path a file can be looked up by: the
                // server's error, as nginx's 500 for an empty one.
                self.state.phases.request();
                session.pending = Some(Pending::Miss {
                    want_gzip: gzip::wanted(&self.gzip_of(&head), &head),
                    refused: Some(Status::InternalServerError),
                });
                None
            }
        };
        match answered {
            Some(plan) => {
                // As nginx: the interim answer invites the body only where
                // the file is answered; before an error or a redirect the
                // client is spared the upload (the body, if it comes anyway,
                // is dropped). An answer `finish` makes keeps it.
                if let Some(at) = interim {
                    if !about_the_file(plan.status) && !out.has_shared_after(at) {
                        out.drain(at..at + CONTINUE.len());
                    }
                }
                self.flow(session, &plan)
            }
            None => {
                // `finish` knows the answer: the interim one is its to send.
                if let Some(at) = interim {
                    out.truncate(at);
                }
                session.interim = interim.is_some();
                Flow::Finish(0)
            }
        }
    }

    async fn finish<'a>(
        &'a self,
        session: &'a mut HttpSession,
        request: &'a [u8],
        _progress: u32,
        mut reply: Reply<'a>,
    ) -> Flow {
        // The same bytes `parse` found a head in.
        let (Ok(Some((mut head, _))), Some(pending)) = (
            parse_head(request, &self.state.cfg.limits),
            session.pending.take(),
        ) else {
            return Flow::Close;
        };
        // The same request `execute` counted: its head is parsed again, and
        // rewritten again as it was (a redirect or a failed rule was
        // answered there, or is pending as an error).
        if self.last_allowed(session) {
            head.keep_alive = false;
        }
        self.rewrite(session, &mut head);
        let interim = std::mem::take(&mut session.interim);
        // Held to `--limit-req`'s rate, or its credentials checked: then
        // answered as if it came now, those steps passed.
        let mut pending = pending;
        let pending = loop {
            match pending {
                Pending::Paced(wait) => {
                    reply.conn().pause(wait).await;
                    session.paced = true;
                }
                Pending::Verify(user, password) => {
                    // The realm of the request's location.
                    let auth = self.state.scopes.for_path(&head.path).auth.clone();
                    let check = move || auth.is_some_and(|a| a.verify(&user, &password));
                    if !reply.payload().blocking(check).await.unwrap_or(false) {
                        break Pending::Miss {
                            want_gzip: gzip::wanted(&self.gzip_of(&head), &head),
                            refused: Some(Status::Unauthorized),
                        };
                    }
                    session.paced = true;
                    session.verified = true;
                }
                pending => break pending,
            }
            if let Some(plan) = self.respond_now(&mut *session, &head, reply.out()) {
                return self.flow(session, &plan);
            }
            match session.pending.take() {
                Some(next) => pending = next,
                None => return Flow::Close,
            }
        };
        match self
            .respond_later(session, &head, pending, interim, &mut reply)
            .await
        {
            Ok(plan) => {
                self.log(session, Some(&head), None, &plan);
                if !reply.out().is_pending() {
                    // The answer is all written: the request is over.
                    session.conn_slot = None;
                }
                self.flow(session, &plan)
            }
            Err(Aborted {
                mut plan,
                error: e,
                sent,
            }) => {
                // Logged and counted with the status its head carried, and
                // the body bytes it sent, as nginx logs a response the client
                // did not take whole (an answer from memory is logged with
                // its planned bytes, before it is written).
                plan.body = None;
                plan.parts = None;
                plan.inline_body = sent;
                session.write_failed = true;
                self.log(session, Some(&head), None, &plan);
                if e.kind() == io::ErrorKind::TimedOut {
                    self.state.counters.write_timeouts.fetch_add(1, Relaxed);
                }
                // What is queued behind the file will not be read either.
                reply.conn().discard_unsent();
                session.write_failed = true;
                Flow::Close
            }
        }
    }

    fn drained(&self, session: &mut HttpSession) {
        // Every answer so far is written: unless `finish` has one to make
        // (what `execute` left it is pending until `finish` takes it), the
        // connection has no request in progress (`--limit-conn`).
        if session.pending.is_none() {
            session.conn_slot = None;
        }
    }

    fn waiting(&self, session: &mut HttpSession, partial: &[u8], _out: &mut Output) {
        if partial.is_empty() {
            session.set_phase(Phase::Waiting);
            return;
        }
        session.set_phase(Phase::Reading);
        if self.state.log.is_some() && session.reading.is_none() {
            session.reading = Some(loop_now());
        }
    }

    fn timed_out(
        &self,
        session: &mut HttpSession,
        which: Timeout,
        partial: &[u8],
        out: &mut Output,
    ) {
        session.request_id.take();
        session.secure_link = None;
        session.limited = [None; 2];
        session.invalid_referer = None;
        let c = &self.state.counters;
        match which {
            Timeout::Idle => c.idle_timeouts.fetch_add(1, Relaxed),
            // The body of an answered request stopped coming: nothing
            // more to say (nginx closes such a connection too).
            Timeout::Request if session.discard.is_some() => c.head_timeouts.fetch_add(1, Relaxed),
            Timeout::Request => {
                // Logged with what came of its request line, ended or not,
                // as nginx logs it.
                let e = HttpError::close(Status::RequestTimeout);
                let line = request_line(partial).or_else(|| line_so_far(partial));
                self.error(session, e, None, line, out);
                c.head_timeouts.fetch_add(1, Relaxed)
            }
            Timeout::Write => c.write_timeouts.fetch_add(1, Relaxed),
        };
    }

    fn idle_timeout(&self, session: &HttpSession) -> Option<Duration> {
        // Inside a body being dropped: the shorter of `lingering_timeout`
        // and what is left of `lingering_time` (then the connection
        // closes, unlogged).
        let (_, until) = session.discard?;
        let left = until.saturating_duration_since(loop_now());
        Some(left.min(self.state.cfg.lingering_timeout))
    }

    fn linger(&self, session: &HttpSession, unread: bool) -> Option<Linger> {
        // nginx's bounds (`lingering_time`, `lingering_timeout`), so a body
        // still coming after a 413 or a 400 is dropped to its end and the
        // client reads its answer instead of a reset.
        (!session.write_failed && (session.failed || unread)).then(|| Linger {
            total: self.state.cfg.lingering_time,
            idle: self.state.cfg.lingering_timeout,
            bytes: usize::MAX,
        })
    }
}

impl HttpProtocol {
    /// The request just counted is the last `keepalive_requests` allows.
    fn last_allowed(&self, session: &HttpSession) -> bool {
        let cfg = &self.state.cfg;
        session.requests >= cfg.keepalive_requests
            || session
                .opened
                .is_some_and(|t| loop_now().saturating_duration_since(t) > cfg.keepalive_time)
    }

    /// What the driver does after `plan`'s response.
    fn flow(&self, session: &mut HttpSession, plan: &Plan) -> Flow {
        if plan.keep_alive {
            return Flow::Continue;
        }
        session.failed = plan.status.code() >= 400;
        // nginx's 444 closes at once, a body still coming or not: there is
        // no answer to keep from a reset, and a client refused so is not
        // waited for.
        if session.discard.is_some() && plan.status != Status::NoResponse {
            // The answer closes the connection, but its request's body is
            // still coming: it is read to its end first, as nginx's
            // discarding does. Closing with it unread would reset the
            // connection, which can destroy the answer before the client
            // has read it.
            session.close_after_body = true;
            return Flow::Continue;
        }
        Flow::Close
    }

    /// Appends the response to a request that could not be parsed (or
    /// timed out, or is not allowed) and logs it (`line`: the request line
    /// of a refused head, for the log).
    fn error(
        &self,
        session: &HttpSession,
        e: HttpError,
        head: Option<&Head<'_>>,
        line: Option<&[u8]>,
        out: &mut Output,
    ) -> Plan {
        let now = now();
        let start = out.len();
        let plan = match head {
            Some(_) => write_error(e, head, now.date(), out),
            None => write_refusal(e, line, now.date(), out),
        };
        self.add_fields(&plan, &now, (HTML, None), (session, head), out, start);
        self.state.phases.request();
        self.log(session, head, line, &plan);
        plan
    }

    /// Adds the fields of `--expires` and `--add-header` to the head of
    /// `plan`, written into `out` from `start` (`carried`: the type and
    /// last modification of what it carries).
    /// `about`: the connection and request answered, whose variables an
    /// added field's value may name.
    fn add_fields(
        &self,
        plan: &Plan,
        now: &Now,
        carried: (&str, Option<std::time::SystemTime>),
        (session, head): (&HttpSession, Option<&Head<'_>>),
        out: &mut Vec<u8>,
        start: usize,
    ) {
        let scope = self.scope_of(session, head);
        let fields = &scope.fields;
        // As nginx's: the answer's status, no body sent yet, `$uri` the
        // address answered from (after an index file, an error page…).
        let fill = |value: &crate::LogFormat, into: &mut Vec<u8>| {
            let moved = session.sent.as_ref().and_then(|s| {
                let sent = s.lock().unwrap_or_else(|e| e.into_inner());
                sent.uri.clone()
            });
            let mut entry = self.entry(session, head, None, plan.status.code(), 0);
            entry.uri = moved.as_deref();
            value.expand(&entry, into)
        };
        let (secs, date) = (now.secs, now.date());
        fields.add_to_head_filled(plan.status, secs, date, carried, &fill, out, start);
        // A 401 says how to sign in.
        if let (Status::Unauthorized, Some(auth)) = (plan.status, &scope.auth) {
            let line = format!("WWW-Authenticate: {}\r\n", auth.challenge());
            crate::fields::insert_field(out, start, line.as_bytes());
        }
        // The head is whole: kept for `$bytes_sent` and `$sent_http_…`.
        if let Some(sent) = session
            .sent
            .as_ref()
            .filter(|_| crate::log_format::head_wanted())
        {
            let written = &out[start..];
            let end = written
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map_or(written.len(), |i| i + 4);
            let mut sent = sent.lock().unwrap_or_else(|e| e.into_inner());
            sent.head.clear();
            sent.head.extend_from_slice(&written[..end]);
        }
    }

    /// Answers `head` from memory if it can: appends the response and
    /// returns its plan. `None`: the answer must wait for the file system
    /// (or a body sent from a file); `session.pending` says what `finish`
    /// does, and nothing was appended.
    fn respond_now(
        &self,
        session: &mut HttpSession,
        head: &Head<'_>,
        out: &mut Output,
    ) -> Option<Plan> {
        let alone = out.is_empty();
        // A server-level `--return` goes first, as nginx's runs first (after
        // the `--rewrite` rules, unless one ended them).
        if let Some(answer) = self
            .state
            .cfg
            .answer
            .as_ref()
            .filter(|_| !head.rewrites_ended)
        {
            self.state.phases.request();
            return self.answer(answer, session, head, out);
        }
        // The location's: not for clients if `internal` (nginx checks it
        // as it finds the location; a request a `--rewrite` moved there is
        // internal), then its `return` (its rewrite phase, before its
        // access checks).
        let scope = self.state.scopes.for_path(&head.path);
        if scope.internal && !head.rewritten {
            self.state.phases.request();
            session.pending = Some(Pending::Miss {
                want_gzip: gzip::wanted(&self.gzip_of(head), head),
                refused: Some(Status::NotFound),
            });
            return None;
        }
        if let Some(answer) = scope.answer.as_ref().filter(|_| !head.rewrites_ended) {
            self.state.phases.request();
            return self.answer(answer, session, head, out);
        }
        // nginx's `valid_referers` with `if ($invalid_referer) { return
        // 403; }` (its rewrite phase, like `return`), then limit_req, then
        // its limit_conn, then its access check, then the password (whose
        // hashes are checked off the loop, remembered once they pass). A
        // request let through after its wait or its check is not charged or
        // checked again. A refusal goes where a lookup's error would (an
        // error page may answer it).
        let access = &scope.access;
        let limits = !self.state.limiter.is_empty() || self.state.conn_limit.is_some();
        let client = match limits || !access.is_empty() {
            true => self.client(session, head),
            false => None,
        };
        let referers = self.state.cfg.valid_referers.as_ref();
        let mut refused = self.secure_link_refusal(session, head);
        if let (None, Some(v)) = (refused, referers) {
            let invalid = !v.valid(head.referer);
            session.invalid_referer = Some(invalid);
            refused = invalid.then_some(Status::Forbidden);
        }
        let limiters = &self.state.limiter;
        if let (None, false, false) = (refused, limiters.is_empty(), session.paced) {
            match crate::limit_req::check_all(limiters, client, loop_now()) {
                Verdict::Pass => session.limited[0] = Some("PASSED"),
                Verdict::Delay(wait) => {
                    self.state.counters.delayed.fetch_add(1, Relaxed);
                    session.limited[0] = Some("DELAYED");
                    session.pending = Some(Pending::Paced(wait));
                    return None;
                }
                Verdict::Reject(status) => {
                    self.state.counters.limited.fetch_add(1, Relaxed);
                    session.limited[0] = Some("REJECTED");
                    refused = Some(status);
                }
            }
        }
        if let (None, Some(limit), None) = (refused, &self.state.conn_limit, &session.conn_slot) {
            match limit.acquire(client) {
                Ok(slot) => {
                    session.conn_slot = slot;
                    session.limited[1] = Some("PASSED");
                }
                Err(status) => {
                    session.limited[1] = Some("REJECTED");
                    self.state.counters.limited.fetch_add(1, Relaxed);
                    refused = Some(status);
                }
            }
        }
        // nginx's `satisfy any`: the address or the password lets a request
        // in (a refused address is then asked for the password, so its
        // answer is 401); `all`: both must.
        let either = scope.satisfy_any && scope.auth.is_some();
        let mut let_in = session.verified;
        if refused.is_none() && !access.is_empty() {
            match (access.allows(client), either) {
                (true, true) => let_in = true,
                (false, false) => refused = Some(Status::Forbidden),
                _ => {}
            }
        }
        if let (None, Some(auth), false) = (refused, &scope.auth, let_in) {
            match auth.quick(head) {
                Quick::Passed => {}
                Quick::Refused => refused = Some(Status::Unauthorized),
                Quick::Check => {
                    let (user, password) = credentials(head).unwrap_or_default();
                    session.pending = Some(Pending::Verify(user, password));
                    return None;
                }
            }
        }
        if let Some(status) = refused {
            self.state.phases.request();
            if status == Status::NoResponse {
                return Some(self.no_response(session, head));
            }
            session.pending = Some(Pending::Miss {
                want_gzip: gzip::wanted(&self.gzip_of(head), head),
                refused: Some(status),
            });
            return None;
        }
        if head.method == Method::Other {
            return Some(self.error(
                session,
                HttpError::keep(Status::MethodNotAllowed),
                Some(head),
                None,
                out,
            ));
        }
        self.state.phases.request();
        let now = now();
        let date = now.date();
        if self.state.cfg.stub_status.as_deref() == Some(head.path.as_str()) {
            let body = self.state.stub_status_text();
            return Some(self.answered(session, head, out, |date, out| {
                write_text(head, "text/plain", body.as_bytes(), date, out)
            }));
        }

        let gzip_cfg = scope.gzip;
        let want_gzip = gzip::wanted(&gzip_cfg, head);

        // A hidden path (`--dotfiles deny`) is refused where lookups are
        // (the fresh index may hold an error page's).
        let denied = self.state.cfg.deny_dotfiles && path::hidden(&head.path);
        // Fast path: a recent stat and the bytes in memory; no system call.
        // A request that wants gzip is answered from the variant cache only.
        if let Some(f) = (!denied)
            .then(|| self.state.fresh.get(&head.path))
            .flatten()
        {
            note_uri(session, f.uri.as_ref());
            let eligible = gzip::eligible(&gzip_cfg, &f.path, f.content_type, f.meta.size);
            let gzip = eligible && want_gzip;
            // Large enough to go out with sendfile, the kernel's pages
            // rather than a copy of ours (`HttpConfig::sendfile_kept`), if
            // kept open; in the learned range, as this thread found cheaper.
            let cfg = &self.state.cfg;
            let learned = (!gzip
                && f.file.is_some()
                && (cfg.sendfile_learn..cfg.sendfile_kept).contains(&f.meta.size))
            .then(|| learned_path(cfg.sendfile_learn_epoch))
            .flatten();
            let kept = !gzip
                && f.file.is_some()
                && (f.meta.size >= cfg.sendfile_kept || learned == Some(SendPath::Sendfile));
            let hit = if gzip {
                let bytes = self.state.gzip_cache.get(&f.path, &f.meta);
                bytes.map(|b| {
                    (
                        Encoding::Gzip {
                            len: b.len() as u64,
                        },
                        b,
                    )
                })
            } else if kept {
                None
            } else {
                let bytes = self.state.cache.get(&f.path, &f.meta);
                bytes.map(|b| (Encoding::Identity { vary: f.varies }, b))
            };
            if let Some((encoding, bytes)) = hit {
                if let Encoding::Gzip { len } = encoding {
                    note_gzip(session, f.meta.size, len);
                }
                if learned == Some(SendPath::Copy) {
                    self.state.counters.learned_copy.fetch_add(1, Relaxed);
                }
                let start = out.len();
                let mut plan = plan_encoded(head, &f.meta, f.content_type, encoding, date, out);
                let carried = (f.content_type, Some(f.meta.mtime));
                self.add_fields(&plan, &now, carried, (session, Some(head)), out, start);
                push_cached_body(out, &bytes, &mut plan, alone);
                self.log(session, Some(head), None, &plan);
                return Some(plan);
            }
            // A file kept open: its body goes out with sendfile.
            if let (Some(open), false) = (&f.file, gzip) {
                self.state.counters.open_file_hits.fetch_add(1, Relaxed);
                // Chosen, or the copy's bytes were not in the cache after all.
                if learned.is_some() {
                    self.state.counters.learned_sendfile.fetch_add(1, Relaxed);
                }
                session.pending = Some(Pending::Open {
                    open: open.clone(),
                    meta: f.meta,
                    content_type: f.content_type,
                    encoding: Encoding::Identity { vary: f.varies },
                });
                return None;
            }
        }
        session.pending = Some(Pending::Miss {
            want_gzip,
            refused: None,
        });
        None
    }

    /// Answers `head` as `pending` says, on the connection's loop: the head
    /// goes into `reply`'s output, a body from a file is sent after a flush.
    async fn respond_later(
        &self,
        session: &HttpSession,
        head: &Head<'_>,
        pending: Pending,
        interim: bool,
        reply: &mut Reply<'_>,
    ) -> Result<Plan, Aborted> {
        let now = now();
        let date = now.date();
        let (want_gzip, refused) = match pending {
            Pending::Open {
                open,
                meta,
                content_type,
                encoding,
            } => {
                if interim {
                    reply.out().extend_from_slice(CONTINUE);
                }
                let start = reply.out().len();
                let plan = plan_encoded(head, &meta, content_type, encoding, date, reply.out());
                let carried = (content_type, Some(meta.mtime));
                self.add_fields(
                    &plan,
                    &now,
                    carried,
                    (session, Some(head)),
                    reply.out(),
                    start,
                );
                let file = open.file.clone();
                let residency = Residency::Remembered(open, meta.size);
                let pace = self.scope_of(session, Some(head)).pace();
                return self
                    .send_body(plan, file, residency, (&head.path, pace), reply)
                    .await;
            }
            Pending::Miss { want_gzip, refused } => (want_gzip, refused),
            // `finish` sees to these first.
            Pending::Paced(_) => (gzip::wanted(&self.gzip_of(head), head), None),
            Pending::Verify(..) => (
                gzip::wanted(&self.gzip_of(head), head),
                Some(Status::Unauthorized),
            ),
        };
        let state = self.state.clone();
        let url = head.path.clone();
        let takes_gzip = gzip::takes(&self.gzip_of(head), head);
        let callback = match state.cfg.autoindex_style.format {
            crate::autoindex::Format::Jsonp => {
                crate::log_format::argument_of(head, b"callback").map(<[u8]>::to_vec)
            }
            _ => None,
        };
        let found = if let Some(status) = refused {
            Err(HttpError::keep(status))
        } else if state.cfg.deny_dotfiles && path::hidden(&url) {
            Err(HttpError::keep(Status::Forbidden))
        } else {
            match reply
                .payload()
                .blocking(move || state.lookup(&url, want_gzip, takes_gzip, callback))
                .await
            {
                Ok((found, uri)) => {
                    note_uri(session, uri.as_ref());
                    found
                }
                Err(_) => Err(HttpError::keep(Status::InternalServerError)),
            }
        };
        // An error with a page of its own (nginx's `error_page`) answers
        // with that page: under the error's status (`error`), or as the
        // page itself with `=200`.
        let (found, error) = match found {
            // (The requested path's location's pages.)
            Err(e) if !e.close => match ErrorPage::find(
                &self.state.scopes.for_path(&head.path).error_pages,
                e.status,
            ) {
                Some(page) => {
                    let (found, status, uri) =
                        self.error_page(page, e, want_gzip, takes_gzip, reply).await;
                    note_uri(session, uri.as_ref());
                    (found, status)
                }
                None => (Err(e), None),
            },
            found => (found, None),
        };
        let out = reply.out();
        // `100 Continue` where the file is answered (see `about_the_file`).
        let moved = matches!(found, Ok(Found::Redirect(_) | Found::Elsewhere(..)));
        if interim && error.is_none() && found.is_ok() && !moved {
            out.extend_from_slice(CONTINUE);
        }
        // Every arm below writes its head from here.
        let start = out.len();
        let plan = |meta: &FileMeta, content_type: &str, encoding, out: &mut Vec<u8>| {
            let plan = match error {
                Some(status) => plan_error_page(head, status, meta.size, content_type, date, out),
                None => plan_encoded(head, meta, content_type, encoding, date, out),
            };
            self.add_fields(
                &plan,
                &now,
                (content_type, Some(meta.mtime)),
                (session, Some(head)),
                out,
                start,
            );
            plan
        };
        // Answers without a file of their own: pages of the server's.
        let alone = |plan: Plan, out: &mut Vec<u8>| {
            self.add_fields(&plan, &now, (HTML, None), (session, Some(head)), out, start);
            plan
        };
        Ok(match found {
            Err(e) => alone(write_error(e, Some(head), date, out), out),
            Ok(Found::Redirect(location)) => {
                let location = self.absolute(session, head, location.into_bytes());
                let location = String::from_utf8_lossy(&location);
                alone(write_redirect(head, &location, date, out), out)
            }
            Ok(Found::Elsewhere(status, location)) => alone(
                write_redirect_to(head, status, location.as_bytes(), date, out),
                out,
            ),
            Ok(Found::Listing(page)) => {
                let plan = write_text(head, page.content_type, &page.body, date, out);
                self.add_fields(
                    &plan,
                    &now,
                    (page.content_type, None),
                    (session, Some(head)),
                    out,
                    start,
                );
                plan
            }
            Ok(Found::Bytes {
                meta,
                content_type,
                encoding,
                bytes,
            }) => {
                let mut plan = plan(&meta, content_type, encoding, out);
                push_cached_body(out, &bytes, &mut plan, true);
                plan
            }
            Ok(Found::File {
                file,
                meta,
                content_type,
                encoding,
                resident,
            }) => {
                let plan = plan(&meta, content_type, encoding, out);
                let residency = if resident {
                    Residency::Known
                } else {
                    Residency::Ask
                };
                let pace = self.scope_of(session, Some(head)).pace();
                self.send_body(plan, file, residency, (&head.path, pace), reply)
                    .await?
            }
            Ok(Found::Compress {
                path,
                meta,
                content_type,
                input,
            }) => {
                self.compressed(session, head, &path, meta, content_type, input, &now, reply)
                    .await?
            }
        })
    }

    /// What answers error `e` instead of its built-in page: the lookup of
    /// `page`, and the status to answer it with (`None`: as the page
    /// itself, `=200`). A page that cannot be served itself (missing, a
    /// directory, forbidden) leaves `e`, as nginx sends its own page when
    /// the error page fails; there is no second redirection.
    async fn error_page(
        &self,
        page: &ErrorPage,
        e: HttpError,
        want_gzip: bool,
        takes_gzip: bool,
        reply: &mut Reply<'_>,
    ) -> (Result<Found, HttpError>, Option<Status>, Option<Arc<str>>) {
        if page.redirect {
            let status = page.status.unwrap_or(Status::Found);
            return (Ok(Found::Elsewhere(status, page.uri.clone())), None, None);
        }
        let state = self.state.clone();
        let url = page.uri.clone();
        // Under the error's status the page goes out as it is: no gzip
        // variant to vary on, no validators.
        let gzip = page.as_ok;
        let found = reply
            .payload()
            .blocking(move || state.lookup(&url, want_gzip && gzip, takes_gzip && gzip, None))
            .await;
        match found {
            Ok((Ok(Found::Redirect(_) | Found::Listing(_) | Found::Elsewhere(..)), _))
            | Ok((Err(_), _))
            | Err(_) => (Err(e), None, None),
            // Under `=CODE`, or the error's own status; as itself with `=200`.
            // Served from the page's address (`$uri`), or its index.
            Ok((Ok(found), uri)) => (
                Ok(found),
                (!page.as_ok).then(|| page.status.unwrap_or(e.status)),
                Some(uri.unwrap_or_else(|| page.uri.as_str().into())),
            ),
        }
    }

    /// Answers `head` with the gzip variant of the file `path` (validators
    /// `meta`, contents `input`), compressing it through [`gzip::run`] (the
    /// one place where the offload policy applies) unless the answer is a
    /// 304; keeps the result in the variant cache. If compression could not
    /// run, the identity body.
    #[allow(clippy::too_many_arguments)]
    async fn compressed(
        &self,
        session: &HttpSession,
        head: &Head<'_>,
        path: &std::path::Path,
        meta: FileMeta,
        content_type: &'static str,
        input: GzipInput,
        now: &Now,
        reply: &mut Reply<'_>,
    ) -> Result<Plan, Aborted> {
        let cfg = self.gzip_of(head);
        let date = now.date();
        let carried = (content_type, Some(meta.mtime));
        // The head of the answer in `encoding`, with its added fields.
        let planned = |encoding, out: &mut Vec<u8>| {
            let start = out.len();
            let plan = plan_encoded(head, &meta, content_type, encoding, date, out);
            self.add_fields(&plan, now, carried, (session, Some(head)), out, start);
            plan
        };
        if not_modified(head, &meta.etag().gzip_variant(), &meta, date) {
            // A 304 carries no length: nothing to compress.
            return Ok(planned(Encoding::Gzip { len: 0 }, reply.out()));
        }
        let job = GzipJob {
            input: input.clone(),
            level: cfg.level,
        };
        let Some(gz) = gzip::run(&self.state.offloader, job).await else {
            let mut plan = planned(Encoding::Identity { vary: true }, reply.out());
            return match input {
                GzipInput::Bytes(bytes) => {
                    push_cached_body(reply.out(), &bytes, &mut plan, true);
                    Ok(plan)
                }
                // A file that changed ends the connection short of its
                // length, as any file that shrinks while sent.
                GzipInput::File { file, .. } => {
                    let pace = self.scope_of(session, Some(head)).pace();
                    self.send_body(plan, file, Residency::Ask, (&head.path, pace), reply)
                        .await
                }
            };
        };
        self.state.counters.gzip_compressed.fetch_add(1, Relaxed);
        if self
            .state
            .gzip_cache
            .insert_variant(path, &meta, gz.clone())
        {
            self.state
                .fresh
                .record(&head.path, path, meta, content_type, true);
        }
        let len = gz.len() as u64;
        note_gzip(session, meta.size, len);
        let mut plan = planned(Encoding::Gzip { len }, reply.out());
        push_cached_body(reply.out(), &gz, &mut plan, true);
        Ok(plan)
    }

    /// Sends the head in the output and then `plan`'s body span of `file`
    /// (or each part's head and span of a multipart body, then its end);
    /// a file that ended first ends the connection (the promised length
    /// cannot be met), and is said on stderr, as nginx's error log does
    /// (`path`: the request's; `pace`: `--limit-rate` and its `-after`).
    async fn send_body(
        &self,
        mut plan: Plan,
        file: Arc<File>,
        residency: Residency,
        (path, (rate, after)): (&str, (u64, u64)),
        reply: &mut Reply<'_>,
    ) -> Result<Plan, Aborted> {
        // `--limit-rate` (its location's): the body's pace, from now.
        let mut progress = Progress {
            sent: 0,
            pace: (rate > 0).then(|| Pace {
                rate,
                after,
                start: loop_now(),
            }),
        };
        let done = match (&plan.body, &plan.parts) {
            (Some(span), _) => {
                self.send_file(file, *span, &residency, reply, &mut progress, 0)
                    .await
            }
            (None, Some(parts)) => {
                self.send_parts(parts, file, &residency, reply, &mut progress)
                    .await
            }
            (None, None) => Ok(true),
        };
        let sent = progress.sent;
        match done {
            Ok(true) => {}
            Ok(false) => {
                // The file ended first: logged with what went out.
                duality_rt::say!(
                    "duality http: {path}: the file ended after {sent} of the {} body bytes \
                     promised (it shrank while sent): connection closed",
                    plan.body_bytes()
                );
                plan.keep_alive = false;
                plan.body = None;
                plan.parts = None;
                plan.inline_body = sent;
            }
            Err(error) => return Err(Aborted { plan, error, sent }),
        }
        Ok(plan)
    }

    /// Sends a multipart body: each part's head (sent with what is before
    /// it in the output, ahead of its span), then its span of `file`; the
    /// end is left in the output. `false` if the file ended first.
    async fn send_parts(
        &self,
        parts: &Parts,
        file: Arc<File>,
        residency: &Residency,
        reply: &mut Reply<'_>,
        progress: &mut Progress,
    ) -> io::Result<bool> {
        for (head, span) in &parts.parts {
            reply.out().extend_from_slice(head);
            // The log counts the parts' heads as body bytes sent, as
            // nginx's `$body_bytes_sent` does.
            let whole = self
                .send_file(file.clone(), *span, residency, reply, progress, head.len())
                .await?;
            if !whole {
                return Ok(false);
            }
        }
        reply.out().extend_from_slice(&parts.end);
        Ok(true)
    }

    /// Sends what the output holds (the head) and then `span` of `file`
    /// with `sendfile`, so that no loop waits for the disk: the head goes
    /// in one call with a body of up to [`HEAD_WITH_BODY_MAX`]
    /// ([`Reply::flush_with`]), before a larger one. A span known
    /// resident (just read into the page cache) goes out at once; otherwise
    /// each piece is asked of [`sys::cached`] first (`cachestat`, and
    /// whether both its ends can be read without waiting) — a file kept
    /// open and no larger than [`HEAD_WITH_BODY_MAX`] is asked whole, and
    /// not asked again for [`OpenFile::RESIDENT_FOR`] once found in — and a
    /// piece found
    /// cold is read in off the loop before it is sent: on an io_uring loop
    /// by the ring ([`duality_rt::fs::fetch`]), on epoll by a read on the
    /// blocking pool. Either way the bytes waiting for a slow reader are
    /// the page cache's, not copies of ours. Where the kernel cannot say (no
    /// `cachestat`), epoll sends at once and io_uring reads each piece in.
    /// `false` if the file ended first. `progress` counts the body bytes
    /// handed to the kernel, an error or not: the span's, and those of the
    /// last `body_head` bytes of the output (a part's head); its pace
    /// (`--limit-rate`) holds the pieces back.
    async fn send_file(
        &self,
        file: Arc<File>,
        span: ByteRange,
        residency: &Residency,
        reply: &mut Reply<'_>,
        progress: &mut Progress,
        body_head: usize,
    ) -> io::Result<bool> {
        let sent_so_far = &mut progress.sent;
        let pace = progress.pace.as_ref();
        let uring =
            duality_rt::event_loop::current_io_backend() == Some(duality_rt::IoBackend::Uring);
        let fd = file.as_raw_fd();
        let end = span.end();
        let mut offset = span.start;
        // A small file kept open: asked whole, the answer remembered. (A
        // larger one is asked per piece, as before: remembering made a
        // 256 KiB file slower on epoll, checked interactively; not
        // understood.)
        let small = match residency {
            Residency::Remembered(open, size) if *size <= HEAD_WITH_BODY_MAX => Some((open, *size)),
            _ => None,
        };
        // Bytes before this were read in (or found ready) and are still to
        // send: a sendfile cut short by a full socket does not make the rest
        // of its piece look cold and be read again.
        let mut ready_to = match (residency, small) {
            (Residency::Known, _) => end,
            (_, Some((open, _))) if open.resident_since(loop_now()) => end,
            _ => offset,
        };
        // A large body's head goes first on its own: sent with it (the head
        // held back by MSG_MORE), a 256 KiB body cost 2.4-2.6x the CPU per
        // request and served 0.5-0.6x the requests/s on io_uring
        // (docs/results/http-sendfile/ab-0f0f8ba).
        if span.len > HEAD_WITH_BODY_MAX {
            reply.flush().await?;
            *sent_so_far += body_head as u64;
        }
        while offset < end {
            let mut count = (end - offset).min(SENDFILE_CHUNK) as usize;
            if let Some(pace) = pace {
                match pace.allows(*sent_so_far, loop_now()) {
                    Ok(bytes) => count = count.min(bytes),
                    // What is queued (a part's head) goes with the next
                    // piece, counted there.
                    Err(wait) => {
                        reply.conn().pause(wait).await;
                        continue;
                    }
                }
            }
            if offset < ready_to {
                count = count.min((ready_to - offset) as usize);
            } else {
                let here = match small {
                    Some((open, size)) => {
                        let here = sys::cached(fd, 0, size);
                        if here == Some(true) {
                            open.found_resident(loop_now());
                        }
                        here
                    }
                    None => sys::cached(fd, offset, count as u64),
                };
                if uring && here != Some(true) {
                    self.state.counters.cold_reads.fetch_add(1, Relaxed);
                    count = count.min(duality_rt::fs::fetch(file.clone(), offset, count).await?);
                    if count == 0 {
                        return Ok(false);
                    }
                } else if here == Some(false) {
                    self.state.counters.cold_reads.fetch_add(1, Relaxed);
                    let (f, at) = (file.clone(), offset);
                    // A failed read leaves sendfile to read (and report).
                    let _ = reply
                        .payload()
                        .blocking(move || duality_rt::fs::read_in(&f, at, count as u64))
                        .await;
                }
                ready_to = offset + count as u64;
            }
            // (Only the first piece has a head: the output's bytes; later
            // ones find the output empty.)
            let head_len = reply.out().len();
            let counted_from = head_len.saturating_sub(body_head);
            let mut send = |sock, head: &mut &[u8]| {
                while !head.is_empty() {
                    let at = head_len.saturating_sub(head.len());
                    let n = sys::send_more(sock, head)?;
                    *head = &head[n..];
                    *sent_so_far += (at + n).saturating_sub(at.max(counted_from)) as u64;
                }
                sys::sendfile(sock, fd, &mut offset, count)
            };
            let sent = reply.flush_with(&mut send).await?;
            if sent == 0 {
                return Ok(false);
            }
            *sent_so_far += sent as u64;
            self.state
                .counters
                .sendfile_bytes
                .fetch_add(sent as u64, Relaxed);
            if offset < end {
                duality_rt::yield_now().await;
            }
        }
        Ok(true)
    }

    /// Answers `head` as `--return` says: a redirect to its address, its
    /// text, or (no text) the status's own page, which an error page may
    /// answer.
    fn answer(
        &self,
        answer: &Return,
        session: &mut HttpSession,
        head: &Head<'_>,
        out: &mut Output,
    ) -> Option<Plan> {
        let Some(text) = &answer.text else {
            if answer.status == Status::NoResponse {
                return Some(self.no_response(session, head));
            }
            if answer.status == Status::Ok {
                return Some(self.answered(session, head, out, |date, out| {
                    write_returned(head, Status::Ok, b"", date, out)
                }));
            }
            session.pending = Some(Pending::Miss {
                want_gzip: gzip::wanted(&self.gzip_of(head), head),
                refused: Some(answer.status),
            });
            return None;
        };
        let mut expanded = Vec::new();
        let code = answer.status.code();
        text.expand(
            &self.entry(session, Some(head), None, code, 0),
            &mut expanded,
        );
        let plan = if answer.redirects() {
            self.redirect(session, head, answer.status, expanded, out)
        } else {
            self.answered(session, head, out, |date, out| {
                write_returned(head, answer.status, &expanded, date, out)
            })
        };
        Some(plan)
    }

    /// nginx's 444: nothing is written, the connection closes (after the
    /// answers before it), the request is logged with 444.
    fn no_response(&self, session: &HttpSession, head: &Head<'_>) -> Plan {
        let plan = Plan {
            status: Status::NoResponse,
            body: None,
            parts: None,
            keep_alive: false,
            inline_body: 0,
        };
        self.log(session, Some(head), None, &plan);
        plan
    }

    /// Answers `head` with a redirect to `location` (`--return`'s or a
    /// `--rewrite`'s).
    fn redirect(
        &self,
        session: &HttpSession,
        head: &Head<'_>,
        status: Status,
        location: Vec<u8>,
        out: &mut Output,
    ) -> Plan {
        // No byte a field may not hold: what a client sent (a raw query,
        // `$http_…`) goes percent-encoded.
        let mut safe = Vec::with_capacity(location.len());
        for b in location {
            match b {
                0x21..0x7f => safe.push(b),
                _ => safe.extend_from_slice(format!("%{b:02X}").as_bytes()),
            }
        }
        let location = self.absolute(session, head, safe);
        self.answered(session, head, out, |date, out| {
            write_redirect_to(head, status, &location, date, out)
        })
    }

    /// `--secure-link`'s refusal of `head`, if any: 403 for a link missing,
    /// malformed or wrongly signed, 410 for one expired (nginx's
    /// documented pair of `if ($secure_link …)`). What it saw is kept for
    /// `$secure_link` and `$secure_link_expires`.
    fn secure_link_refusal(&self, session: &mut HttpSession, head: &Head<'_>) -> Option<Status> {
        use crate::secure_link::{self, Seen, Verdict};
        let link = self.state.cfg.secure_link.as_ref()?;
        if !link.covers(&head.path) {
            return None;
        }
        session.secure_link = Some(Seen::default());
        let mut value = Vec::new();
        link.link
            .expand(&self.entry(session, Some(head), None, 0, 0), &mut value);
        let verdict = match secure_link::split(&value) {
            None => Verdict::Invalid,
            Some((hash, expires)) => {
                if let (Some(seen), Some(e)) = (session.secure_link.as_mut(), expires) {
                    seen.expires = Some(e.text.to_vec());
                }
                let mut signed = Vec::new();
                link.md5
                    .expand(&self.entry(session, Some(head), None, 0, 0), &mut signed);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                secure_link::check(hash, &signed, expires.map(|e| e.secs), now)
            }
        };
        if let Some(seen) = session.secure_link.as_mut() {
            seen.verdict = Some(verdict);
        }
        match verdict {
            Verdict::Valid => None,
            Verdict::Expired => Some(Status::Gone),
            Verdict::Invalid => Some(Status::Forbidden),
        }
    }

    /// Runs the `--rewrite` rules on `head`: its path (and query) changed
    /// as the rules say, or the redirect one answers with.
    fn rewrite(&self, session: &HttpSession, head: &mut Head<'_>) -> Rewritten {
        let rules = &self.state.cfg.rewrites;
        if rules.is_empty() {
            return Rewritten::Kept;
        }
        // As nginx's `quoted_uri` and `plus_in_uri`: the path as sent.
        let sent = head.target;
        let sent = &sent[..sent.iter().position(|&b| b == b'?').unwrap_or(sent.len())];
        let quoted = sent.iter().any(|&b| b == b'%' || b == b'+');
        for rule in rules {
            let applied = {
                let h = &*head;
                let query = h
                    .rewritten_query
                    .as_deref()
                    .or_else(|| crate::log_format::query_of(h));
                rule.apply(&h.path, query, quoted, &mut |text, into| {
                    text.expand(&self.entry(session, Some(h), None, 0, 0), into)
                })
            };
            match applied {
                None => {}
                Some(Applied::Redirect(status, location)) => {
                    return Rewritten::Redirect(status, location)
                }
                Some(Applied::Internal { path, query, stops }) => {
                    let Some(path) = crate::path::normalize_rewritten(path) else {
                        return Rewritten::Failed;
                    };
                    head.path = path;
                    head.rewritten = true;
                    if query.is_some() {
                        head.rewritten_query = query;
                    }
                    if stops {
                        head.rewrites_ended = true;
                        break;
                    }
                }
            }
        }
        Rewritten::Kept
    }

    /// A `Location` of the server's own (`/…`) made absolute under
    /// `--absolute-redirect on`, as nginx's `absolute_redirect` makes it:
    /// `http://`, the request's host (else the address it came to), the
    /// port it came to unless 80, then the path. Any other as it is.
    fn absolute(&self, session: &HttpSession, head: &Head<'_>, location: Vec<u8>) -> Vec<u8> {
        let absolute = self.state.cfg.absolute_redirect && location.starts_with(b"/");
        let Some(local) = session.local.filter(|_| absolute) else {
            return location;
        };
        let mut host = crate::log_format::request_host(head);
        if host.is_empty() {
            host = match local.ip() {
                IpAddr::V6(ip) => format!("[{ip}]").into_bytes(),
                ip => ip.to_string().into_bytes(),
            };
        }
        let mut out = b"http://".to_vec();
        out.extend_from_slice(&host);
        if local.port() != 80 {
            out.extend_from_slice(format!(":{}", local.port()).as_bytes());
        }
        out.extend_from_slice(&location);
        out
    }

    /// Writes the answer `write` makes into `out`, adds `--expires` and
    /// `--add-header` fields, and logs it.
    fn answered(
        &self,
        session: &HttpSession,
        head: &Head<'_>,
        out: &mut Output,
        write: impl FnOnce(&str, &mut Vec<u8>) -> Plan,
    ) -> Plan {
        let now = now();
        let start = out.len();
        let plan = write(now.date(), out);
        self.add_fields(
            &plan,
            &now,
            ("text/plain", None),
            (session, Some(head)),
            out,
            start,
        );
        self.log(session, Some(head), None, &plan);
        plan
    }

    /// The client's address (`None`: over a Unix socket): the
    /// connection's, or the one a trusted proxy names (`--real-ip-from`).
    fn client(&self, session: &HttpSession, head: &Head<'_>) -> Option<IpAddr> {
        self.real_client(session, Some(head))
            .map(|a| a.0)
            .or(session.ip)
    }

    /// The address (and port, where it says one) a trusted proxy names:
    /// its field, or its PROXY header (`--real-ip-header proxy_protocol`).
    fn real_client(
        &self,
        session: &HttpSession,
        head: Option<&Head<'_>>,
    ) -> Option<(IpAddr, Option<u16>)> {
        if !session.proxy {
            return None;
        }
        let real_ip = &self.state.cfg.real_ip;
        match real_ip.header == crate::real_ip::PROXY_PROTOCOL {
            true => session
                .proxy_header
                .and_then(|h| h.source)
                .map(|a| (a.ip(), Some(a.port()))),
            false => head.and_then(|h| real_ip.client(h)).map(|ip| (ip, None)),
        }
    }

    /// One access log line, in `--log-format` (nginx's `combined` by
    /// default). Without a head, the request is `request` (a refused
    /// request's line, as nginx logs it) or missing.
    fn log(
        &self,
        session: &HttpSession,
        head: Option<&Head<'_>>,
        request: Option<&[u8]>,
        plan: &Plan,
    ) {
        self.state.phases.response(plan.status.code());
        let Some(log) = &self.state.log else { return };
        // `access_log off` in its location.
        if !self.scope_of(session, head).logged {
            return;
        }
        let mut entry = self.entry(
            session,
            head,
            request,
            plan.status.code(),
            plan.body_bytes(),
        );
        let sent = session
            .sent
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(sent) = &sent {
            entry.sent_head = Some(&sent.head);
            entry.gzip = sent.gzip;
            entry.uri = sent.uri.as_deref();
        }
        let mut line = Vec::with_capacity(160);
        self.state.cfg.log_format.write(&entry, &mut line);
        log.write(line);
    }

    /// What the log's variables (and `--return`'s) are filled from.
    fn entry<'a>(
        &'a self,
        session: &'a HttpSession,
        head: Option<&'a Head<'a>>,
        request: Option<&'a [u8]>,
        status: u16,
        body_bytes: u64,
    ) -> Entry<'a> {
        let real = self.real_client(session, head);
        let now = loop_now();
        let began = session.reading.or(session.began).unwrap_or(now);
        Entry {
            head,
            line: request,
            peer: &session.peer,
            port: session.port,
            real: real.map(|r| r.0),
            real_port: real.and_then(|r| r.1),
            status,
            body_bytes,
            request_time: now.saturating_duration_since(began),
            connection: session.color,
            // A refused request was not counted, but nginx counts it.
            connection_requests: session.requests + u64::from(head.is_none()),
            request_id: Some(&session.request_id),
            proxy: session.proxy_header.as_ref(),
            secure_link: session.secure_link.as_ref(),
            local: session.local,
            connection_time: session
                .opened
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
            completed: !session.write_failed,
            pipelined: session.pipelined,
            sent_head: None,
            gzip: None,
            roots: Some(&self.state.root),
            limit_rate: self.scope_of(session, head).limit_rate,
            limited: session.limited,
            invalid_referer: session.invalid_referer,
            uri: None,
        }
    }
}

/// Keeps, for `$gzip_ratio`, that a body of `identity` bytes went out as
/// `gzipped` (deflate's part: gzip's 18 bytes of header and trailer are
/// not counted, as nginx does not count them).
/// Keeps, for `$uri`, the address `session`'s answer is served from
/// where it is not the request's (a new request starts without one).
impl HttpProtocol {
    /// The gzip settings of `head`'s location.
    fn gzip_of(&self, head: &Head<'_>) -> crate::GzipConfig {
        self.state.scopes.for_path(&head.path).gzip
    }

    /// The settings the answer to `head` goes out under: its location's,
    /// or that of the address it was answered from where that moved (an
    /// index file, a `--try-files` name, an error page: `Sent::uri`), as
    /// nginx's after an internal redirect.
    fn scope_of<'s>(&'s self, session: &HttpSession, head: Option<&Head<'_>>) -> &'s Scope {
        let scopes = &self.state.scopes;
        if !scopes.has_locations() {
            return &scopes.server;
        }
        let moved = session.sent.as_ref().and_then(|s| {
            let sent = s.lock().unwrap_or_else(|e| e.into_inner());
            sent.uri.clone()
        });
        match (moved, head) {
            (Some(uri), _) => scopes.for_path(&uri),
            (None, Some(h)) => scopes.for_path(&h.path),
            (None, None) => &scopes.server,
        }
    }
}

fn note_uri(session: &HttpSession, uri: Option<&Arc<str>>) {
    if let (Some(sent), Some(uri)) = (&session.sent, uri) {
        let mut sent = sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.uri = Some(uri.clone());
    }
}

fn note_gzip(session: &HttpSession, identity: u64, gzipped: u64) {
    if let Some(sent) = &session.sent {
        let mut sent = sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.gzip = Some((identity, gzipped.saturating_sub(18)));
    }
}

/// The request line at the start of a refused request (after the empty
/// lines RFC 9112 §2.2 lets a client send first), without its line end;
/// `None` while it has not ended, or past 16 KiB (a line nobody reads).
fn request_line(input: &[u8]) -> Option<&[u8]> {
    let start = input.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let rest = &input[start..input.len().min(start + 16 * 1024)];
    let end = rest.iter().position(|&b| b == b'\n')?;
    let line = &rest[..end];
    Some(line.strip_suffix(b"\r").unwrap_or(line))
}

/// Whether an answer of `status` is about the requested file (a body, a
/// part of it, or a precondition's verdict on it), which nginx answers
/// after inviting the body with `100 Continue`; errors and redirects come
/// without one.
fn about_the_file(status: Status) -> bool {
    matches!(status.code(), 200..=299 | 304 | 412 | 416)
}

/// The start of a request line that has not ended (a timed-out or
/// refused request's, for its answer and the log), at most its first
/// 16 KiB: `None` if nothing but line ends came.
fn line_so_far(input: &[u8]) -> Option<&[u8]> {
    let start = input.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let rest = &input[start..input.len().min(start + 16 * 1024)];
    Some(rest.strip_suffix(b"\r").unwrap_or(rest))
}

/// Appends `plan`'s body, from `bytes`, after the head just written to
/// `out`: each span (the body's, or each part's of a multipart body after
/// its head) shared rather than copied when it is large and the response
/// is the only one of the write (`alone`); past [`Output::MAX_SHARED`]
/// spans the output copies them. A span past `bytes` (never expected: the
/// cache keeps bytes of the size it was asked for) leaves the body short
/// of its length: the plan then closes the connection.
fn push_cached_body(out: &mut Output, bytes: &Arc<[u8]>, plan: &mut Plan, alone: bool) {
    let whole = match &plan.parts {
        Some(parts) => {
            let whole = parts.parts.iter().all(|(head, span)| {
                out.extend_from_slice(head);
                push_span(out, bytes, *span, alone)
            });
            if whole {
                out.extend_from_slice(&parts.end);
            }
            whole
        }
        None => match plan.body {
            Some(span) => push_span(out, bytes, span, alone),
            None => true,
        },
    };
    debug_assert!(whole, "a cached body shorter than its plan");
    if !whole {
        plan.keep_alive = false;
    }
}

/// Appends `span` of `bytes`, shared when large and `alone` (see
/// [`push_cached_body`]); false if it lies past `bytes`.
fn push_span(out: &mut Output, bytes: &Arc<[u8]>, span: ByteRange, alone: bool) -> bool {
    let range = span.start as usize..span.end() as usize;
    if range.end > bytes.len() {
        return false;
    }
    if alone && range.len() >= SHARED_BODY_MIN {
        out.share(bytes.clone(), range);
    } else {
        out.extend_from_slice(&bytes[range]);
    }
    true
}

/// How a request for a kept file of the learned range goes out, as this
/// thread has measured cheaper ([`crate::send_path`]); the caller counts it
/// as it went out (a copy whose bytes the cache no longer holds goes out
/// with `sendfile` after all). `None` on a payload thread (the hand-off
/// models), which does not send: nothing is learned or counted there, and
/// the body is copied, as below the learned range.
fn learned_path(max_epoch: Duration) -> Option<SendPath> {
    (!duality_models::payload::on_payload_thread()).then(|| send_path::choose(max_epoch))
}

/// The type of the server's own pages (errors, redirects, listings), as
/// `--expires` rules see it.
const HTML: &str = "text/html";

/// A response's date: its `Date` text and that second.
struct Now {
    text: [u8; date::LEN],
    secs: u64,
}

impl Now {
    fn date(&self) -> &str {
        std::str::from_utf8(&self.text).unwrap_or("")
    }
}

/// The current `Date` value, from this thread's cache (formatted at most
/// once per second per thread).
fn now() -> Now {
    date::with_now_secs(|d, secs| {
        let mut text = [b' '; date::LEN];
        let n = d.len().min(date::LEN);
        text[..n].copy_from_slice(&d.as_bytes()[..n]);
        Now { text, secs }
    })
}

#[cfg(test)]
mod tests {
    use super::{line_so_far, request_line, Pace};
    use std::time::{Duration, Instant};

    #[test]
    fn a_pace_allows_a_seconds_worth_then_the_rate() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let pace = Pace {
            rate: 1000,
            after: 500,
            start,
        };
        // At once: what comes before the pace, and a second's worth.
        assert_eq!(pace.allows(0, at(0)), Ok(1500));
        assert_eq!(pace.allows(1000, at(0)), Ok(500));
        // All of it sent: wait for the rate to allow more (1 ms at least).
        assert_eq!(pace.allows(1500, at(0)), Err(Duration::from_millis(1)));
        assert_eq!(pace.allows(2000, at(0)), Err(Duration::from_millis(501)));
        assert_eq!(pace.allows(1500, at(250)), Ok(250));
        assert_eq!(pace.allows(2000, at(500)), Err(Duration::from_millis(1)));
    }

    #[test]
    fn the_request_line_of_a_refused_request() {
        let line = |s: &[u8]| request_line(s).map(|l| String::from_utf8_lossy(l).into_owned());
        assert_eq!(
            line(b"GET /../x HTTP/1.1\r\nHost: h\r\n\r\n").as_deref(),
            Some("GET /../x HTTP/1.1")
        );
        assert_eq!(
            line(b"\r\n\r\nPOST /p HTTP/1.0\n").as_deref(),
            Some("POST /p HTTP/1.0")
        );
        assert_eq!(line(b"GET /still-arriving"), None);
        assert_eq!(line(b"\r\n"), None);
        let long = [b"GET /".as_slice(), &[b'a'; 20 * 1024], b" HTTP/1.1\r\n"].concat();
        assert_eq!(line(&long), None);
        let so_far = |s: &[u8]| line_so_far(s).map(|l| String::from_utf8_lossy(l).into_owned());
        assert_eq!(
            so_far(b"\r\nGET /still-arr").as_deref(),
            Some("GET /still-arr")
        );
        assert_eq!(so_far(b"GET /x\r").as_deref(), Some("GET /x"));
        assert_eq!(so_far(b"\r\n\r\n"), None);
        // Past 16 KiB, its first 16 KiB (the method, for a HEAD's answer).
        assert_eq!(
            line_so_far(&long[..17 * 1024]).map(<[u8]>::len),
            Some(16 * 1024)
        );
    }
}
