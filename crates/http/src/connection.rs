//! [`serve_conn`]: one HTTP/1.x connection, written in thread style.
//!
//! ```text
//! loop
//!   answer every complete request at the front of the buffer, in order,
//!   appending each response to `out`                 ← batching point: the
//!     (flushed early before a sendfile body, or past FLUSH_AT)   responses to
//!   flush `out`                                        pipelined requests
//!     (a lone cached body goes from the cache itself)    share one write
//!   a response that closes → flush, lingering close
//!   read more:
//!     buffer empty → wait at most idle_timeout, then close silently
//!     a head begun → wait until its deadline, then 408 and close
//! ```
//!
//! Timeouts, so that slow clients cannot pin connections:
//! - `idle_timeout` bounds the wait for the first byte of a request;
//! - `head_timeout` is a **deadline** for the whole head (and its small
//!   body), counted from its first byte, not a per-read timeout: a client
//!   dribbling one byte at a time (slowloris) is cut off at the deadline
//!   however steadily it dribbles;
//! - `write_timeout` bounds each wait for the socket to take more of a
//!   response, so a client that never reads is cut off too.
//!
//! `Conn` keeps these bounds in every threading model (`read_for`,
//! `write_all_for`, `write_with_for`): the handler never asks which model
//! runs it.
//!
//! Closing after an error (or with unread requests behind the response), the
//! handler shuts its write side and reads and discards what the client still
//! sends, for at most [`LINGER`] and [`LINGER_BYTES`]: closing a socket
//! with unread input makes the kernel send RST, which can destroy the error
//! response before the client reads it (nginx's `lingering_close`).
//!
//! Metrics: each write of responses records, for the requests it answers,
//! the time to first byte (from the start of the poll whose read completed
//! their heads) and how long the writing poll has held the loop
//! (`duality_rt::stats::record_first_byte`, one clock read per write).
//! With the stub status page on, the connection also counts itself as
//! reading, writing or waiting.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use duality_models::{Conn, Payload};
use duality_rt::time::{loop_now, sleep_until, timeout, Sleep};

use crate::date;
use crate::file::FileMeta;
use crate::gzip::{self, GzipInput, GzipJob};
use crate::request::{continue_due, parse_head, Head, Method, Version};
use crate::response::{
    not_modified, plan_encoded, write_error, write_redirect, write_text, ByteRange, Encoding, Plan,
    CONTINUE,
};
use crate::server::{Found, HttpState, Phase};
use crate::status::{HttpError, Status};
use crate::sys;

/// First size of a connection's read buffer; it grows (doubling) up to
/// [`Limits::max_request`](crate::Limits::max_request) for larger requests.
const INITIAL_BUF: usize = 2048;
/// `out` is written once it holds this much, even mid-batch.
const FLUSH_AT: usize = 64 * 1024;
/// An `out` buffer larger than this is freed after it is written, so idle
/// connections hold little memory.
const OUT_KEEP: usize = 4096;
/// Requests answered from one read before the task lets its loop run others:
/// with 64, four flooding clients kept a newcomer waiting 30-40 ms under
/// `sped`; with 16, about 1 ms (`duality bench fairness`).
const REQUESTS_PER_TURN: usize = 16;
/// Bytes per `sendfile` call; the task yields between calls so that one
/// large file does not hold its loop.
const SENDFILE_CHUNK: u64 = 256 * 1024;
/// A cached body at least this large, answering the first request of a
/// write, is not copied into `out`: the write sends it from the cache entry
/// (`Conn::write_vec_shared_for`). Smaller ones cost less to copy than a
/// second segment does.
const SHARED_BODY_MIN: usize = 4096;
/// Bytes per file read through the ring (io_uring loops).
const RING_FILE_CHUNK: u64 = 64 * 1024;
/// Longest lingering close.
pub const LINGER: Duration = Duration::from_secs(1);
/// Most bytes read and discarded in a lingering close.
pub const LINGER_BYTES: usize = 64 * 1024;

/// Serves one connection until the client closes, a timeout, an error that
/// closes, or the server's shutdown (which ends it between requests).
pub async fn serve_conn(conn: Conn, payload: Payload, state: Arc<HttpState>) {
    let peer = if state.log.is_some() {
        conn.tcp()
            .and_then(|s| s.peer_addr().ok())
            .map_or_else(|| "-".to_owned(), |a| a.ip().to_string())
    } else {
        String::new()
    };
    let mut c = Connection {
        conn,
        payload,
        track_phase: state.cfg.stub_status.is_some(),
        state,
        out: Vec::new(),
        shared_body: None,
        peer,
        answered: 0,
        read_at: None,
        phase: Phase::Waiting,
    };
    let _ = c.run().await;
}

struct Connection {
    conn: Conn,
    /// Where file-system work on a cache miss runs (the model decides).
    payload: Payload,
    state: Arc<HttpState>,
    /// Response bytes not yet written.
    out: Vec<u8>,
    /// A cached body that follows `out` (sent from the cache entry, not
    /// copied): only ever after the one response `out` holds.
    shared_body: Option<(Arc<[u8]>, std::ops::Range<usize>)>,
    /// The client's address, for the access log.
    peer: String,
    /// Requests whose responses are in `out` (or being sent), not yet
    /// counted in the time-to-first-byte metrics.
    answered: u64,
    /// The start of the poll whose read completed the pending heads.
    read_at: Option<duality_rt::stats::Stamp>,
    /// Count this connection in the stub status's reading/writing.
    track_phase: bool,
    phase: Phase,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.set_phase(Phase::Waiting);
    }
}

impl Connection {
    fn set_phase(&mut self, to: Phase) {
        if self.track_phase && self.phase != to {
            self.state.phases.change(self.phase, to);
            self.phase = to;
        }
    }

    async fn run(&mut self) -> io::Result<()> {
        let limits = self.state.cfg.limits;
        let cap = limits.max_request();
        let mut buf = vec![0u8; INITIAL_BUF.min(cap)];
        let mut filled = 0;
        let mut head_deadline: Option<Instant> = None;
        // One timer for the connection's life, pushed back at each wait.
        let mut timer: Option<Sleep> = None;
        loop {
            // Answer every complete request at the front of the buffer.
            let mut used = 0;
            let mut answered = 0usize;
            let mut last: Option<Plan> = None;
            loop {
                match parse_head(&buf[used..filled], &limits) {
                    Ok(None) => {
                        // Sent after the responses before it, by the flush below.
                        if continue_due(&buf[used..filled], &limits) {
                            self.settle_body();
                            self.out.extend_from_slice(CONTINUE);
                        }
                        break;
                    }
                    Err(e) => {
                        last = Some(self.error(e, None));
                        break;
                    }
                    Ok(Some((head, n))) => {
                        used += n;
                        self.set_phase(Phase::Writing);
                        self.answered += 1;
                        let plan = self.respond(&head).await?;
                        if !plan.keep_alive {
                            last = Some(plan);
                            break;
                        }
                        answered += 1;
                        if answered % REQUESTS_PER_TURN == 0 {
                            // Fairness: a client pipelining hundreds of
                            // requests per read gets its answers, then the
                            // loop runs the others before the rest.
                            self.flush().await?;
                            duality_rt::yield_now().await;
                        } else if self.out.len() >= FLUSH_AT {
                            self.flush().await?;
                        }
                    }
                }
            }
            self.flush().await?;
            if let Some(plan) = last {
                if plan.status.code() >= 400 || used < filled {
                    self.linger(&mut buf).await;
                }
                return Ok(());
            }
            buf.copy_within(used..filled, 0);
            filled -= used;
            if filled == 0 {
                head_deadline = None;
            } else if used > 0 {
                // What is left is the start of the next head.
                head_deadline = Some(loop_now() + self.state.cfg.head_timeout);
            }
            if filled == buf.len() {
                if buf.len() >= cap {
                    // parse_head never waits for more than `cap` bytes;
                    // this only guards against a broken contract.
                    let plan = self.error(HttpError::close(Status::HeaderFieldsTooLarge), None);
                    debug_assert!(!plan.keep_alive);
                    self.flush().await?;
                    return Ok(());
                }
                buf.resize((buf.len() * 2).min(cap), 0);
            }

            let deadline =
                head_deadline.unwrap_or_else(|| loop_now() + self.state.cfg.idle_timeout);
            self.set_phase(if filled == 0 {
                Phase::Waiting
            } else {
                Phase::Reading
            });
            let timer = match &mut timer {
                Some(t) => {
                    t.extend(deadline);
                    t
                }
                None => timer.insert(sleep_until(deadline)),
            };
            match self.conn.read_until(&mut buf[filled..], timer).await {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    self.read_at = duality_rt::stats::poll_started();
                    self.set_phase(Phase::Reading);
                    if filled == 0 {
                        head_deadline = Some(loop_now() + self.state.cfg.head_timeout);
                    }
                    filled += n;
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    if filled == 0 {
                        self.state.counters.idle_timeouts.fetch_add(1, Relaxed);
                    } else {
                        self.state.counters.head_timeouts.fetch_add(1, Relaxed);
                        self.error(HttpError::close(Status::RequestTimeout), None);
                        self.flush().await?;
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Copies a shared body into `out`, so that another response can
    /// follow it.
    fn settle_body(&mut self) {
        if let Some((body, range)) = self.shared_body.take() {
            self.out.extend_from_slice(&body[range]);
        }
    }

    /// Appends the body `span` of `bytes` after the head just written to
    /// `out`: shared rather than copied when it is large and the only
    /// response `out` holds (`alone`).
    fn push_cached_body(&mut self, bytes: &Arc<[u8]>, span: Option<ByteRange>, alone: bool) {
        let Some(span) = span else { return };
        let range = span.start as usize..span.end() as usize;
        if alone && range.len() >= SHARED_BODY_MIN && range.end <= bytes.len() {
            self.shared_body = Some((bytes.clone(), range));
        } else {
            push_body(&mut self.out, bytes, Some(span));
        }
    }

    /// Writes and empties `out` (and the shared body after it).
    async fn flush(&mut self) -> io::Result<()> {
        if self.out.is_empty() && self.shared_body.is_none() {
            return Ok(());
        }
        self.note_first_byte();
        let wait = Some(self.state.cfg.write_timeout);
        let r = match self.shared_body.take() {
            Some((body, range)) => {
                self.conn
                    .write_vec_shared_for(&mut self.out, &body, range, wait)
                    .await
            }
            None => self.conn.write_vec_for(&mut self.out, wait).await,
        };
        if matches!(&r, Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock))
        {
            self.state.counters.write_timeouts.fetch_add(1, Relaxed);
        }
        self.reset_out();
        r
    }

    /// Appends the response to a request that could not be parsed (or
    /// timed out) and logs it.
    fn error(&mut self, e: HttpError, head: Option<&Head<'_>>) -> Plan {
        self.settle_body();
        let date = now();
        let plan = write_error(e, head, as_str(&date), &mut self.out);
        self.state.phases.request();
        self.log(head, &plan);
        plan
    }

    /// Answers one request: appends its response to `out` (flushing and
    /// sending a large file body itself). A plan that does not keep alive
    /// ends the connection.
    async fn respond(&mut self, head: &Head<'_>) -> io::Result<Plan> {
        self.settle_body();
        let alone = self.out.is_empty();
        if head.method == Method::Other {
            return Ok(self.error(HttpError::keep(Status::MethodNotAllowed), Some(head)));
        }
        self.state.phases.request();
        let date = now();
        let date = as_str(&date);
        if self.state.cfg.stub_status.as_deref() == Some(head.path.as_str()) {
            let body = self.state.stub_status_text();
            let plan = write_text(head, "text/plain", body.as_bytes(), date, &mut self.out);
            self.log(Some(head), &plan);
            return Ok(plan);
        }

        let gzip_cfg = self.state.cfg.gzip;
        let want_gzip = gzip::wanted(&gzip_cfg, head);

        // Fast path: a recent stat and the bytes in memory; no system call.
        // A request that wants gzip is answered from the variant cache only.
        if let Some(f) = self.state.fresh.get(&head.path) {
            let eligible = gzip::eligible(&gzip_cfg, &f.path, f.content_type, f.meta.size);
            let hit = if eligible && want_gzip {
                let bytes = self.state.gzip_cache.get(&f.path, &f.meta);
                bytes.map(|b| {
                    (
                        Encoding::Gzip {
                            len: b.len() as u64,
                        },
                        b,
                    )
                })
            } else {
                let bytes = self.state.cache.get(&f.path, &f.meta);
                bytes.map(|b| (Encoding::Identity { vary: eligible }, b))
            };
            if let Some((encoding, bytes)) = hit {
                let plan =
                    plan_encoded(head, &f.meta, f.content_type, encoding, date, &mut self.out);
                self.push_cached_body(&bytes, plan.body, alone);
                self.log(Some(head), &plan);
                return Ok(plan);
            }
            // A large file kept open: its body goes out with sendfile.
            if let (Some(open), false) = (&f.file, eligible && want_gzip) {
                self.state.counters.open_file_hits.fetch_add(1, Relaxed);
                let encoding = Encoding::Identity { vary: eligible };
                let plan =
                    plan_encoded(head, &f.meta, f.content_type, encoding, date, &mut self.out);
                let plan = self.send_body(plan, open.file.clone(), false).await?;
                self.log(Some(head), &plan);
                return Ok(plan);
            }
        }

        let state = self.state.clone();
        let url = head.path.clone();
        let found = match self
            .payload
            .blocking(move || state.lookup(&url, want_gzip))
            .await
        {
            Ok(found) => found,
            Err(_) => Err(HttpError::keep(Status::InternalServerError)),
        };
        let plan = match found {
            Err(e) => write_error(e, Some(head), date, &mut self.out),
            Ok(Found::Redirect(location)) => write_redirect(head, &location, date, &mut self.out),
            Ok(Found::Bytes {
                meta,
                content_type,
                encoding,
                bytes,
            }) => {
                let plan = plan_encoded(head, &meta, content_type, encoding, date, &mut self.out);
                self.push_cached_body(&bytes, plan.body, alone);
                plan
            }
            Ok(Found::File {
                file,
                meta,
                content_type,
                encoding,
                resident,
            }) => {
                let plan = plan_encoded(head, &meta, content_type, encoding, date, &mut self.out);
                self.send_body(plan, file, resident).await?
            }
            Ok(Found::Compress {
                path,
                meta,
                content_type,
                input,
            }) => {
                self.compressed(head, &path, meta, content_type, input, date)
                    .await?
            }
        };
        self.log(Some(head), &plan);
        Ok(plan)
    }

    /// Answers `head` with the gzip variant of the file `path` (validators
    /// `meta`, contents `input`), compressing it through [`gzip::run`] (the
    /// one place where the offload policy applies) unless the answer is a
    /// 304; keeps the result in the variant cache. If compression could not
    /// run, the identity body.
    async fn compressed(
        &mut self,
        head: &Head<'_>,
        path: &std::path::Path,
        meta: FileMeta,
        content_type: &'static str,
        input: GzipInput,
        date: &str,
    ) -> io::Result<Plan> {
        // Nothing of this response is in `out` yet: `respond`'s `alone`.
        let alone = self.out.is_empty();
        let cfg = self.state.cfg.gzip;
        if not_modified(head, &meta.etag().gzip_variant(), &meta, date) {
            // A 304 carries no length: nothing to compress.
            let encoding = Encoding::Gzip { len: 0 };
            return Ok(plan_encoded(
                head,
                &meta,
                content_type,
                encoding,
                date,
                &mut self.out,
            ));
        }
        let job = GzipJob {
            input: input.clone(),
            level: cfg.level,
        };
        let Some(gz) = gzip::run(&self.state.offloader, job).await else {
            let encoding = Encoding::Identity { vary: true };
            let plan = plan_encoded(head, &meta, content_type, encoding, date, &mut self.out);
            return match input {
                GzipInput::Bytes(bytes) => {
                    self.push_cached_body(&bytes, plan.body, alone);
                    Ok(plan)
                }
                // A file that changed ends the connection short of its
                // length, as any file that shrinks while sent.
                GzipInput::File { file, .. } => self.send_body(plan, file, false).await,
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
                .record(&head.path, path, meta, content_type);
        }
        let encoding = Encoding::Gzip {
            len: gz.len() as u64,
        };
        let plan = plan_encoded(head, &meta, content_type, encoding, date, &mut self.out);
        self.push_cached_body(&gz, plan.body, alone);
        Ok(plan)
    }

    /// Sends the head in `out` and then `plan`'s body span of `file`; a
    /// file that ended first ends the connection (the promised length
    /// cannot be met).
    async fn send_body(
        &mut self,
        mut plan: Plan,
        file: Arc<File>,
        resident: bool,
    ) -> io::Result<Plan> {
        if let Some(span) = plan.body {
            self.flush().await?;
            if !self.send_file(file, span, resident).await? {
                plan.keep_alive = false;
            }
        }
        Ok(plan)
    }

    /// Time to first byte of the requests answered since the last write.
    fn note_first_byte(&mut self) {
        if self.answered > 0 {
            if let Some(at) = self.read_at {
                duality_rt::stats::record_first_byte(at, self.answered);
            }
            self.answered = 0;
        }
    }

    /// Empties `out` once written, giving back a large buffer.
    fn reset_out(&mut self) {
        if self.out.capacity() > OUT_KEEP {
            self.out = Vec::new();
        } else {
            self.out.clear();
        }
    }

    /// Sends `span` of `file` with `sendfile`, so that no loop waits for the
    /// disk: a span `resident` (just read into the page cache) or found
    /// there by `cachestat` goes out at once; otherwise on an io_uring loop
    /// the ring reads it, and on epoll each chunk that `cachestat` finds
    /// out of the page cache is read in on the blocking pool first.
    /// `false` if the file ended first.
    async fn send_file(
        &mut self,
        file: Arc<File>,
        span: ByteRange,
        resident: bool,
    ) -> io::Result<bool> {
        let uring =
            duality_rt::event_loop::current_io_backend() == Some(duality_rt::IoBackend::Uring);
        if uring && !resident && sys::cached(file.as_raw_fd(), span.start, span.len) != Some(true) {
            return self.send_file_ring(file, span).await;
        }
        let fd = file.as_raw_fd();
        let end = span.end();
        let mut offset = span.start;
        let wait = self.state.cfg.write_timeout;
        while offset < end {
            let count = (end - offset).min(SENDFILE_CHUNK) as usize;
            // Only where the kernel says the chunk is not there: without
            // cachestat, sendfile as before (the page cache usually has it).
            if !uring && !resident && sys::cached(fd, offset, count as u64) == Some(false) {
                self.state.counters.cold_reads.fetch_add(1, Relaxed);
                let (f, at) = (file.clone(), offset);
                // A failed read-ahead leaves sendfile to read (and report).
                let _ = self
                    .payload
                    .blocking(move || sys::readahead(&f, at, count as u64))
                    .await;
            }
            let call = self.conn.write_with_for(Some(wait), |sock| {
                sys::sendfile(sock, fd, &mut offset, count)
            });
            let sent = match call.await {
                Ok(n) => n,
                Err(e) => {
                    if e.kind() == io::ErrorKind::TimedOut {
                        self.state.counters.write_timeouts.fetch_add(1, Relaxed);
                    }
                    return Err(e);
                }
            };
            if sent == 0 {
                return Ok(false);
            }
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

    /// [`send_file`](Self::send_file) on an io_uring loop: each chunk is read
    /// through the ring (a read that must wait for the disk waits in the
    /// kernel's workers, never on the loop) and queued to the socket; the
    /// socket's send queue bound makes a slow reader hold back the next read.
    async fn send_file_ring(&mut self, file: Arc<File>, span: ByteRange) -> io::Result<bool> {
        let end = span.end();
        let mut offset = span.start;
        let wait = self.state.cfg.write_timeout;
        while offset < end {
            let count = (end - offset).min(RING_FILE_CHUNK) as usize;
            self.state.counters.cold_reads.fetch_add(1, Relaxed);
            let chunk = duality_rt::fs::read_at(file.clone(), offset, count).await?;
            if chunk.is_empty() {
                return Ok(false);
            }
            if let Err(e) = self.conn.write_all_for(&chunk, Some(wait)).await {
                if e.kind() == io::ErrorKind::TimedOut {
                    self.state.counters.write_timeouts.fetch_add(1, Relaxed);
                }
                return Err(e);
            }
            offset += chunk.len() as u64;
            self.state
                .counters
                .sendfile_bytes
                .fetch_add(chunk.len() as u64, Relaxed);
        }
        Ok(true)
    }

    /// Lingering close: see the module docs. Uses `buf` as scratch space.
    async fn linger(&mut self, buf: &mut [u8]) {
        let Some(s) = self.conn.tcp() else { return };
        if s.shutdown(std::net::Shutdown::Write).is_err() {
            return;
        }
        let until = Instant::now() + LINGER;
        let mut left = LINGER_BYTES;
        while left > 0 {
            let wait = until.saturating_duration_since(Instant::now());
            match timeout(wait, self.conn.read(buf)).await {
                Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
                _ => return,
            }
        }
    }

    fn log(&self, head: Option<&Head<'_>>, plan: &Plan) {
        let Some(log) = &self.state.log else { return };
        let (method, target, version) = match head {
            Some(h) => (
                match h.method {
                    Method::Get => "GET",
                    Method::Head => "HEAD",
                    Method::Other => "-",
                },
                h.target,
                match h.version {
                    Version::Http10 => "HTTP/1.0",
                    Version::Http11 => "HTTP/1.1",
                },
            ),
            None => ("-", "-", "-"),
        };
        let date = now();
        log.write(format!(
            "{} - - [{}] \"{method} {} {version}\" {} {}\n",
            self.peer,
            as_str(&date),
            target.escape_debug(),
            plan.status.code(),
            plan.body.map_or(0, |b| b.len),
        ));
    }
}

/// Appends `span` of `bytes` to `out`.
fn push_body(out: &mut Vec<u8>, bytes: &[u8], span: Option<ByteRange>) {
    if let Some(span) = span {
        if let Some(b) = bytes.get(span.start as usize..span.end() as usize) {
            out.extend_from_slice(b);
        }
    }
}

/// The current `Date` value, from this thread's cache (formatted at most
/// once per second per thread).
fn now() -> [u8; date::LEN] {
    date::with_now(|d| {
        let mut a = [b' '; date::LEN];
        let n = d.len().min(date::LEN);
        a[..n].copy_from_slice(&d.as_bytes()[..n]);
        a
    })
}

fn as_str(d: &[u8; date::LEN]) -> &str {
    std::str::from_utf8(d).unwrap_or("")
}
