//! The server: [`HttpConfig`], the [`HttpState`] shared by every connection
//! of one server, and [`serve`], which starts a `duality-models` server whose
//! handler is the session driver over [`HttpProtocol`](crate::HttpProtocol).
//!
//! ```text
//!            loop thread (any model)                  blocking pool
//!  request ─► fresh index hit? ─► page cache hit? ─► answer from memory
//!                  │                    │ no: file kept open? ─► sendfile
//!                  │ no                 │ no
//!                  └────────────────────┴────────► lookup(): resolve (realpath,
//!                                                  stat), page cache, open,
//!  answer ◄── head + bytes | head + sendfile ◄──── read small files whole
//! ```
//!
//! What the state holds, and who touches it:
//! - `root`, `cfg`: read-only after start-up.
//! - `cache` ([`PageCache`]): whole small files, bounded in bytes; filled on
//!   the blocking pool, read on the loops; its own shard locks.
//! - `gzip_cache` (a second [`PageCache`]): gzip variants, keyed by the
//!   source file's path and validators ([`PageCache::insert_variant`]),
//!   bounded by [`GzipConfig::cache_bytes`]; filled where a variant is made
//!   (a `.gz` read on the blocking pool, a compression where
//!   [`gzip::run`] runs it), read on the loops. See [`crate::gzip`].
//! - `fresh` (`FreshIndex`): URL path → canonical path, validators and
//!   type, as the last `stat` on the blocking pool found them. A hit younger
//!   than [`HttpConfig::revalidate`] is answered on the loop without any
//!   system call; an older one goes back to the pool, whose `stat` drops a
//!   changed file from the page cache. So a change is served at most
//!   `revalidate` late (nginx's `open_file_cache_valid` is the same idea);
//!   `revalidate = 0` stats on every request. The index holds no file bytes
//!   (the page cache is the only memory bound) and at most
//!   [`FRESH_ENTRIES`] entries. An entry for a file sent with `sendfile`
//!   may keep it open ([`HttpConfig::open_files`] of them at most, nginx's
//!   `open_file_cache`): a hit then sends from it on the loop, no lookup.
//! - `log`: a bounded queue to one writer thread. A loop never waits on the
//!   log file: when the queue is full, the line is dropped and counted.
//! - counters: relaxed atomics.
//!
//! A request that [wants](gzip::wanted) gzip, for an [eligible](gzip::eligible)
//! file, is answered on the loop from `gzip_cache` (never from `cache`); on a
//! miss, the blocking lookup looks for a fresh `.gz`, else returns the
//! identity bytes to compress, or for a file too large for `cache` the open
//! file, read ahead into the kernel's page cache (`Found::Compress`), and
//! the connection compresses it through [`gzip::run`].

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use duality_models::{Server, ServerBuilder, StatsHandle};
use hashbrown::{DefaultHashBuilder, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::AtomicI64;
use std::sync::OnceLock;

use crate::cache::{CacheStats, PageCache};
use crate::file::{self, FileMeta};
use crate::gzip::{self, GzipConfig, GzipInput};
use crate::location::{Scope, Scopes};
use crate::mime;
use crate::path::{Resolved, Root, Roots, Symlinks};
use crate::request::Limits;
use crate::response::Encoding;
use crate::status::{HttpError, Status};
use crate::sys;

/// Most entries of the fresh index (over all shards).
pub const FRESH_ENTRIES: usize = 64 * 1024;

/// What a connection refused by the connection limit receives.
pub const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nServer: duality\r\n\
Content-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";

/// How one server behaves. [`HttpConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The directory served.
    pub root: PathBuf,
    /// Paths under a prefix (starting and ending with `/`) served from
    /// another directory (nginx's `location /PREFIX/ { alias DIR/; }`);
    /// none by default.
    pub aliases: Vec<(String, PathBuf)>,
    /// Where symlinks under the root may lead (inside it, by default).
    pub symlinks: Symlinks,
    /// Page-cache budget in bytes (0 disables the cache).
    pub cache_bytes: usize,
    /// Largest file the page cache takes.
    pub cache_max_file: usize,
    /// Files not cached and at least this large are sent with `sendfile`;
    /// smaller ones are read on the blocking pool and written from memory.
    pub sendfile_threshold: u64,
    /// A file whose descriptor is kept open (see
    /// [`open_files`](Self::open_files)) and at least this large is sent
    /// with `sendfile` even when the page cache holds a copy (the socket
    /// gets the kernel's pages, not a copy of ours): by wrk that costs less
    /// from 16 KiB; by `bench http`'s own client only at 64 KiB, 32 KiB
    /// being close in requests/s (`docs/results/http-sendfile`).
    /// `u64::MAX`: never.
    pub sendfile_kept: u64,
    /// A file kept open from this size up to [`sendfile_kept`](Self::sendfile_kept)
    /// goes out as a copy from the page cache or with `sendfile`,
    /// whichever the thread answering has measured to cost it less CPU time
    /// per request (see `send_path`: the copy is the cheaper while the
    /// client reads at once, `sendfile` behind a slower reader).
    /// `u64::MAX`: never learned (copied below `sendfile_kept`).
    pub sendfile_learn: u64,
    /// A learning epoch (about a thousand requests of the learned range
    /// on one thread) whose measure took longer than this is not learned
    /// from: under light load its CPU time holds idle turns as much as
    /// requests. 500 ms by default; a slow build or a crowded machine
    /// that must still learn needs longer.
    pub sendfile_learn_epoch: Duration,
    /// How long a `stat` stays trusted for answering from memory (see the
    /// [module docs](self)); zero stats on every request.
    pub revalidate: Duration,
    /// The whole head (and its small body) must arrive within this, from
    /// its first byte → 408 and close.
    pub head_timeout: Duration,
    /// Longest wait for the first byte of a request → close silently.
    pub idle_timeout: Duration,
    /// Longest wait for the socket to take more of a response → close.
    pub write_timeout: Duration,
    /// Longest silence inside a request body being dropped after its
    /// answer, or in a lingering close → close (nginx's
    /// `lingering_timeout`).
    pub lingering_timeout: Duration,
    /// Longest time a request body may take to be dropped, from its answer
    /// → close (nginx's `lingering_time`): a client that trickles a body
    /// nobody needs cannot pin a connection; also the longest lingering
    /// close (after a 413, a 400).
    pub lingering_time: Duration,
    /// Requests one connection may make (nginx's `keepalive_requests`):
    /// the answer to the last one carries `Connection: close`, so that a
    /// long-lived client's connection is renewed now and then (its buffers
    /// returned, its next connection balanced afresh). 0: no keep-alive.
    pub keepalive_requests: u64,
    /// How long one connection may make requests (nginx's
    /// `keepalive_time`, one hour by default): the answer to a request
    /// begun later closes it, so that a client that never pauses is still
    /// renewed now and then.
    pub keepalive_time: Duration,
    /// Where the access log goes (`-` for stderr); `None`: no log.
    pub access_log: Option<PathBuf>,
    /// The access log's line (nginx's `log_format`); nginx's `combined`
    /// by default.
    pub log_format: crate::LogFormat,
    /// Request size limits.
    pub limits: Limits,
    /// gzip (off by default; see [`crate::gzip`]).
    pub gzip: GzipConfig,
    /// The URL path that answers nginx's `stub_status` page instead of a
    /// file (`None`, the default: no such page). See [`stub_status`].
    pub stub_status: Option<String>,
    /// Most descriptors of `sendfile`d files kept open between requests
    /// (nginx's `open_file_cache max=N`): a request for such a file whose
    /// `stat` is younger than [`revalidate`](Self::revalidate) is answered
    /// on its loop from the open file, without the blocking pool. A kept
    /// descriptor is closed once its entry is stale: when a request looks
    /// at it, when the limit needs its slot, or by a sweep every
    /// `revalidate` (so a deleted file's space is freed within about two
    /// periods). A file rewritten in place (the same inode) may go out
    /// with its old length and validators until then, as with nginx's
    /// cache; a file replaced by a rename is one version or the other.
    /// 0 keeps none.
    pub open_files: usize,
    /// The files a directory is served by, the first found (nginx's
    /// `index`): file names, at least one (see
    /// [`valid_index_name`](crate::path::valid_index_name)).
    pub index: Vec<String>,
    /// List directories without an index file (nginx's `autoindex`)
    /// instead of answering 403; off by default.
    pub autoindex: bool,
    /// List them only under these prefixes (nginx's `location /PREFIX/ {
    /// autoindex on; }`), with `autoindex` off.
    pub autoindex_under: Vec<String>,
    /// How listings are written (nginx's `autoindex_format`,
    /// `autoindex_exact_size`, `autoindex_localtime`): its HTML by default.
    pub autoindex_style: crate::autoindex::Style,
    /// Errors answered with a page of the root (nginx's `error_page`), the
    /// first rule naming a status applying; none by default.
    pub error_pages: Vec<crate::ErrorPage>,
    /// The names a request may be served by, in order (nginx's
    /// `try_files`); none by default: the request's own.
    pub try_files: Option<crate::TryFiles>,
    /// Answer 403 to a path with a hidden segment ([`crate::path::hidden`]:
    /// `.git/`, `.env`) rather than serve it; off by default, as in nginx.
    pub deny_dotfiles: bool,
    /// The charset text types are labelled with (nginx's `charset`); none
    /// by default, as in nginx (but plain text, Markdown and CSV, labelled
    /// UTF-8 by [`mime`]).
    pub charset: Option<String>,
    /// Types for extensions, before the built-in table (nginx's `types`);
    /// none by default.
    pub types: Vec<mime::TypeRule>,
    /// The type of a file neither `types` nor the built-in table know
    /// (nginx's `default_type`); [`mime::DEFAULT`] when `None`.
    pub default_type: Option<String>,
    /// How entity tags are written; process-wide, set by
    /// [`HttpState::new`] (see [`ETagFormat`](crate::file::ETagFormat)).
    pub etag: crate::file::ETagFormat,
    /// How `If-Modified-Since` is compared; process-wide, set by
    /// [`HttpState::new`] (see [`IfModifiedSince`](crate::IfModifiedSince)).
    pub if_modified_since: crate::IfModifiedSince,
    /// The most ranges one request may ask for (`Some(0)`: ranges off);
    /// process-wide, set by [`HttpState::new`] (see
    /// [`set_max_ranges`](crate::response::set_max_ranges)). No limit but
    /// [`MAX_PARTS`](crate::MAX_PARTS) by default.
    pub max_ranges: Option<u32>,
    /// Fields added to answers (nginx's `expires` and `add_header`); none
    /// by default.
    pub fields: crate::ResponseFields,
    /// Whose word about the client's address the access log, `access`
    /// and `limit_req` take (nginx's realip); nobody's by default.
    pub real_ip: crate::RealIp,
    /// Who is served at all (nginx's `allow` / `deny`); everybody by
    /// default.
    pub access: crate::Access,
    /// One answer for every request (nginx's server-level `return`); none
    /// by default.
    pub answer: Option<crate::Return>,
    /// Rules that change a request's path or redirect it, in order
    /// (nginx's server-level `rewrite`), before `answer`; none by default.
    pub rewrites: Vec<crate::Rewrite>,
    /// Links that must be signed (nginx's `secure_link` and
    /// `secure_link_md5`, refused 403, or 410 once expired); none by
    /// default.
    pub secure_link: Option<crate::SecureLink>,
    /// Requests per client address held to a rate (nginx's `limit_req`);
    /// no limit by default.
    pub limit_req: Vec<crate::LimitReqConfig>,
    /// Connections per client address with a request in progress (nginx's
    /// `limit_conn`); no limit by default.
    pub limit_conn: Option<crate::LimitConnConfig>,
    /// A password over the whole server (nginx's `auth_basic` and
    /// `auth_basic_user_file`): the realm and the user file; none by
    /// default.
    pub auth_basic: Option<(String, PathBuf)>,
    /// With both `access` rules and `auth_basic`: either lets a request in
    /// (nginx's `satisfy any`) rather than both (`satisfy all`, the
    /// default).
    pub satisfy_any: bool,
    /// Every connection begins with a PROXY protocol header (nginx's
    /// `listen … proxy_protocol`): one that does not is closed.
    pub proxy_protocol: bool,
    /// The `Referer`s a request may carry (nginx's `valid_referers`; any
    /// other is 403, its `if ($invalid_referer) { return 403; }`); any by
    /// default.
    pub valid_referers: Option<crate::ValidReferers>,
    /// Redirections to the server's own paths carry an absolute
    /// `Location`, `http://host[:port]/…` (nginx's `absolute_redirect`,
    /// on there by default); relative, as RFC 9110 allows, by default.
    pub absolute_redirect: bool,
    /// Bytes a second a response's body may go out at (nginx's
    /// `limit_rate`), after its first `limit_rate_after` bytes; 0 (the
    /// default): no limit. Bodies sent from a file (`sendfile`, from
    /// [`sendfile_threshold`](Self::sendfile_threshold) or kept open) are
    /// paced; a small body from memory goes at once.
    pub limit_rate: u64,
    /// See [`limit_rate`](Self::limit_rate) (nginx's `limit_rate_after`).
    pub limit_rate_after: u64,
    /// Paths with settings of their own (nginx's prefix and exact
    /// `location` blocks): who is let in, a `return`, added fields,
    /// `limit_rate` (see [`Location`](crate::Location)).
    pub locations: Vec<crate::Location>,
}

impl HttpConfig {
    /// The defaults for `root`: 64 MiB cache of files up to 64 KiB,
    /// `sendfile` from 64 KiB (from 32 KiB for a file kept open; from 16
    /// KiB learned per thread, see [`sendfile_learn`](Self::sendfile_learn)),
    /// revalidation after 1 s, 10 s head timeout, 60 s idle and write timeouts, 1,000 requests per connection (nginx's
    /// default), no access log, [`Limits::default`],
    /// gzip off ([`GzipConfig::default`]), up to 1,000 open files kept,
    /// symlinks only inside the root, `index.html` as a directory's index,
    /// no listings, no error pages, no added fields, no trusted proxies.
    pub fn new(root: impl Into<PathBuf>) -> HttpConfig {
        HttpConfig {
            root: root.into(),
            aliases: Vec::new(),
            symlinks: Symlinks::InsideRoot,
            cache_bytes: 64 << 20,
            cache_max_file: 64 << 10,
            sendfile_threshold: 64 << 10,
            sendfile_kept: 32 << 10,
            sendfile_learn: 16 << 10,
            sendfile_learn_epoch: crate::send_path::MAX_EPOCH,
            revalidate: Duration::from_secs(1),
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            lingering_timeout: Duration::from_secs(5),
            lingering_time: Duration::from_secs(30),
            keepalive_requests: 1000,
            keepalive_time: Duration::from_secs(3600),
            access_log: None,
            log_format: crate::LogFormat::default(),
            limits: Limits::default(),
            gzip: GzipConfig::default(),
            stub_status: None,
            open_files: 1000,
            index: vec![crate::path::INDEX.to_owned()],
            autoindex: false,
            autoindex_under: Vec::new(),
            autoindex_style: crate::autoindex::Style::default(),
            error_pages: Vec::new(),
            try_files: None,
            deny_dotfiles: false,
            charset: None,
            types: Vec::new(),
            default_type: None,
            etag: crate::file::ETagFormat::default(),
            if_modified_since: crate::IfModifiedSince::default(),
            max_ranges: None,
            fields: crate::ResponseFields::default(),
            real_ip: crate::RealIp::default(),
            access: crate::Access::default(),
            answer: None,
            rewrites: Vec::new(),
            secure_link: None,
            limit_req: Vec::new(),
            limit_conn: None,
            auth_basic: None,
            satisfy_any: false,
            proxy_protocol: false,
            valid_referers: None,
            absolute_redirect: false,
            limit_rate: 0,
            limit_rate_after: 0,
            locations: Vec::new(),
        }
    }

    /// Whether a file of `size` the page cache holds is worth keeping open
    /// for `sendfile` (always from `sendfile_kept`, or as learned from
    /// `sendfile_learn`).
    pub(crate) fn keeps_open(&self, size: u64) -> bool {
        size >= self.sendfile_kept.min(self.sendfile_learn)
    }
}

/// Counters of one server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Requests answered (every status).
    pub requests: u64,
    /// Responses by status class: 1xx, 2xx, 3xx, 4xx, 5xx.
    pub responses: [u64; 5],
    /// Connections closed with 408 (head not complete in time).
    pub head_timeouts: u64,
    /// Connections closed silently after the idle timeout.
    pub idle_timeouts: u64,
    /// Connections closed because a write did not progress in time.
    pub write_timeouts: u64,
    /// Body bytes sent with `sendfile`.
    pub sendfile_bytes: u64,
    /// Requests answered from a file kept open ([`HttpConfig::open_files`]).
    pub open_file_hits: u64,
    /// Requests for a file of the learned range
    /// ([`HttpConfig::sendfile_learn`]) kept open, answered by copy from
    /// the page cache and by `sendfile`, as the answering thread chose (a
    /// copy whose bytes the cache had dropped went out with `sendfile` and
    /// counts there).
    pub learned_copy: u64,
    /// See [`learned_copy`](Self::learned_copy).
    pub learned_sendfile: u64,
    /// Pieces of `sendfile`d bodies found out of the kernel's page cache and
    /// read in off the loops (a read through the ring, or a read on the
    /// blocking pool under epoll) so no loop waited for the disk.
    pub cold_reads: u64,
    /// Files kept open now.
    pub open_files: u64,
    /// Access-log lines dropped because the writer fell behind.
    pub log_dropped: u64,
    /// Access-log lines the file did not take (a full disk, an I/O error).
    pub log_failed: u64,
    /// The page cache's counters.
    pub cache: CacheStats,
    /// Bodies compressed by the server.
    pub gzip_compressed: u64,
    /// Pre-compressed `.gz` files opened to answer a request.
    pub gzip_static: u64,
    /// The gzip variant cache's counters.
    pub gzip_cache: CacheStats,
    /// Requests refused over `--limit-req`'s burst or `--limit-conn`'s
    /// connections.
    pub limited: u64,
    /// Requests `--limit-req` delayed.
    pub delayed: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) head_timeouts: AtomicU64,
    pub(crate) idle_timeouts: AtomicU64,
    pub(crate) write_timeouts: AtomicU64,
    pub(crate) sendfile_bytes: AtomicU64,
    pub(crate) open_file_hits: AtomicU64,
    pub(crate) learned_copy: AtomicU64,
    pub(crate) learned_sendfile: AtomicU64,
    pub(crate) cold_reads: AtomicU64,
    pub(crate) gzip_compressed: AtomicU64,
    pub(crate) gzip_static: AtomicU64,
    pub(crate) limited: AtomicU64,
    pub(crate) delayed: AtomicU64,
}

/// Everything the connections of one server share. Build it once with
/// [`HttpState::new`] and hand an `Arc` of it to every connection.
pub struct HttpState {
    pub(crate) cfg: HttpConfig,
    pub(crate) root: Roots,
    pub(crate) cache: PageCache,
    pub(crate) gzip_cache: PageCache,
    pub(crate) fresh: Arc<FreshIndex>,
    pub(crate) log: Option<AccessLog>,
    pub(crate) counters: Counters,
    /// `--limit-req`'s buckets.
    pub(crate) limiter: Vec<crate::LimitReq>,
    /// `--limit-conn`'s counts.
    pub(crate) conn_limit: Option<Arc<crate::LimitConn>>,
    /// The server's settings that a location may change, and its
    /// locations' (`--auth-basic`'s users among them).
    pub(crate) scopes: Scopes,
    /// Where compressions run (`--offload`), and what it learned.
    pub(crate) offloader: duality_rt::adaptive::Offloader,
    /// The running server's numbers (set by [`serve`]).
    server: OnceLock<StatsHandle>,
    /// Requests answered, and connections reading a head or writing a
    /// response (these kept only while the stub status page is on).
    pub(crate) phases: PhaseCounts,
    /// How files are typed (`--type`, the table, `--charset`).
    types: mime::Types,
}

/// What a connection is doing, as nginx's `stub_status` counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Idle between requests (keep-alive).
    #[default]
    Waiting,
    /// Part of a request head has arrived.
    Reading,
    /// A request is being answered.
    Writing,
}

/// Slots of [`PhaseCounts`] (loop ids are taken modulo this).
const PHASE_SLOTS: usize = 64;

/// Requests answered, and connections reading and writing, one cache line
/// per loop (a connection counts on the loop it runs on at each change, so
/// a moved connection adds on one slot and subtracts on another), summed
/// when read: no counter shared by every loop on the hot path (a shared
/// request counter was the hottest instruction of the connection's future
/// at 1,000 connections, `perf annotate`).
pub(crate) struct PhaseCounts {
    slots: Box<[crossbeam_utils::CachePadded<LoopCounts>]>,
}

#[derive(Default)]
struct LoopCounts {
    reading: AtomicI64,
    writing: AtomicI64,
    requests: AtomicU64,
    /// Responses by status class (1xx..5xx).
    classes: [AtomicU64; 5],
}

impl PhaseCounts {
    fn new() -> PhaseCounts {
        PhaseCounts {
            slots: (0..PHASE_SLOTS).map(|_| Default::default()).collect(),
        }
    }

    /// This thread's slot (its loop's; slot 0 off a loop).
    fn mine(&self) -> &LoopCounts {
        let slot = duality_rt::event_loop::current().map_or(0, |h| h.id() as usize % PHASE_SLOTS);
        &self.slots[slot]
    }

    /// A connection goes from `from` to `to`.
    pub(crate) fn change(&self, from: Phase, to: Phase) {
        if from == to {
            return;
        }
        let counts = self.mine();
        let count = |p| match p {
            Phase::Reading => Some(&counts.reading),
            Phase::Writing => Some(&counts.writing),
            Phase::Waiting => None,
        };
        if let Some(c) = count(from) {
            c.fetch_sub(1, Relaxed);
        }
        if let Some(c) = count(to) {
            c.fetch_add(1, Relaxed);
        }
    }

    /// One more request answered.
    pub(crate) fn request(&self) {
        self.mine().requests.fetch_add(1, Relaxed);
    }

    /// One more response of status `code` (counted by class).
    pub(crate) fn response(&self, code: u16) {
        if let Some(c) = (code / 100)
            .checked_sub(1)
            .and_then(|i| self.mine().classes.get(i as usize))
        {
            c.fetch_add(1, Relaxed);
        }
    }

    /// Responses so far by status class, 1xx first.
    fn classes(&self) -> [u64; 5] {
        let mut sums = [0; 5];
        for s in self.slots.iter() {
            for (sum, c) in sums.iter_mut().zip(&s.classes) {
                *sum += c.load(Relaxed);
            }
        }
        sums
    }

    /// (reading, writing) now.
    fn read(&self) -> (u64, u64) {
        let (mut r, mut w) = (0i64, 0i64);
        for s in self.slots.iter() {
            r += s.reading.load(Relaxed);
            w += s.writing.load(Relaxed);
        }
        (r.max(0) as u64, w.max(0) as u64)
    }

    /// Requests answered so far.
    fn requests(&self) -> u64 {
        self.slots.iter().map(|s| s.requests.load(Relaxed)).sum()
    }
}

/// nginx's `stub_status` text, byte for byte in its format.
pub fn stub_status(
    active: u64,
    accepts: u64,
    handled: u64,
    requests: u64,
    reading: u64,
    writing: u64,
    waiting: u64,
) -> String {
    format!(
        "Active connections: {active} \nserver accepts handled requests\n {accepts} {handled} {requests} \nReading: {reading} Writing: {writing} Waiting: {waiting} \n"
    )
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("cfg", &self.cfg)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// What the blocking pool found for a request path. `meta` and
/// `content_type` are always the requested file's (the validators and type
/// of every representation); `encoding` says what the bytes are.
pub(crate) enum Found {
    /// A directory asked for without its slash.
    Redirect(String),
    /// An error answered elsewhere (`--error-page "404 URL"`): a
    /// redirection there with this status.
    Elsewhere(Status, String),
    /// A directory's listing page (`--autoindex on`): HTML, not cached.
    Listing(crate::autoindex::Page),
    /// The whole body in memory (cached, or small enough to read).
    Bytes {
        meta: FileMeta,
        content_type: &'static str,
        encoding: Encoding,
        bytes: Arc<[u8]>,
    },
    /// An open file to `sendfile` the body from (the file itself, or its
    /// `.gz` for [`Encoding::Gzip`]).
    File {
        file: Arc<File>,
        meta: FileMeta,
        content_type: &'static str,
        encoding: Encoding,
        /// Its bytes were just read into the page cache: `sendfile` will
        /// not wait for the disk, on any backend.
        resident: bool,
    },
    /// The request wants the gzip variant and none exists yet: the file
    /// (`input`: its bytes, or the open file if it is too large for the
    /// cache; exactly `meta.size` bytes) for the connection to compress
    /// through [`gzip::run`].
    Compress {
        path: PathBuf,
        meta: FileMeta,
        content_type: &'static str,
        input: GzipInput,
    },
}

impl HttpState {
    /// Canonicalises the root (it must be a directory), sizes the cache and
    /// opens the access log.
    pub fn new(cfg: HttpConfig) -> io::Result<Arc<HttpState>> {
        let dir = |path: &Path, what: &str| {
            Root::new(path)
                .map_err(|e| io::Error::new(e.kind(), format!("{what} {}: {e}", path.display())))
                .map(|r| {
                    r.with_symlinks(cfg.symlinks)
                        .with_autoindex(cfg.autoindex || !cfg.autoindex_under.is_empty())
                        .with_index(&cfg.index)
                })
        };
        let mut root = Roots::new(dir(&cfg.root, "document root")?);
        for (prefix, path) in &cfg.aliases {
            root = root.with_alias(prefix.clone(), dir(path, &format!("--alias {prefix}"))?);
        }
        if !cfg.autoindex {
            root = root.listing_only_under(cfg.autoindex_under.clone());
        }
        let log = match &cfg.access_log {
            Some(p) => Some(AccessLog::open(p)?),
            None => None,
        };
        cfg.etag.set();
        cfg.if_modified_since.set();
        crate::response::set_max_ranges(cfg.max_ranges);
        let fresh = Arc::new(FreshIndex::new(cfg.revalidate, cfg.open_files));
        FreshIndex::spawn_closer(&fresh)?;
        // A realm's users, each unreadable line said once at start.
        let users = |realm: &str, file: &Path| -> io::Result<crate::AuthBasic> {
            let (auth, skipped) = crate::AuthBasic::new(realm, file)?;
            for line in skipped {
                duality_rt::say!(
                    "duality http: warning: {}: {line}: that user cannot sign in",
                    file.display()
                );
            }
            Ok(auth)
        };
        let server = Scope {
            access: cfg.access.clone(),
            auth: match &cfg.auth_basic {
                Some((realm, file)) => Some(Arc::new(users(realm, file)?)),
                None => None,
            },
            satisfy_any: cfg.satisfy_any,
            answer: None,
            fields: cfg.fields.clone(),
            limit_rate: cfg.limit_rate,
            limit_rate_after: cfg.limit_rate_after,
            logged: true,
            try_files: cfg.try_files.clone(),
            internal: false,
            error_pages: cfg.error_pages.clone(),
            gzip: cfg.gzip,
        };
        let scopes = Scopes::new(server, &cfg.locations, users)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(Arc::new(HttpState {
            cache: PageCache::new(cfg.cache_bytes, cfg.cache_max_file),
            gzip_cache: PageCache::new(cfg.gzip.cache_bytes, cfg.gzip.cache_max_entry()),
            fresh,
            root,
            log,
            counters: Counters::default(),
            limiter: cfg
                .limit_req
                .iter()
                .cloned()
                .map(crate::LimitReq::new)
                .collect(),
            conn_limit: cfg.limit_conn.map(|c| Arc::new(crate::LimitConn::new(c))),
            scopes,
            offloader: duality_rt::adaptive::Offloader::new(cfg.gzip.offload),
            server: OnceLock::new(),
            phases: PhaseCounts::new(),
            types: match &cfg.default_type {
                Some(media) => {
                    mime::Types::new(&cfg.types, cfg.charset.as_deref()).with_default(media)
                }
                None => mime::Types::new(&cfg.types, cfg.charset.as_deref()),
            },
            cfg,
        }))
    }

    /// The stub status page now (see [`stub_status`]): active connections,
    /// connections accepted (refused ones included, as nginx counts those
    /// over its limit), handled (not refused), requests, and connections
    /// reading a head, writing a response, or waiting.
    pub fn stub_status_text(&self) -> String {
        let (active, total, refused) = self.server.get().map_or((0, 0, 0), |h| {
            let st = h.stats();
            (
                st.curr_connections as u64,
                st.total_connections,
                st.rejected_connections,
            )
        });
        let (reading, writing) = self.phases.read();
        let waiting = active.saturating_sub(reading + writing);
        stub_status(
            active,
            total + refused,
            total,
            self.phases.requests(),
            reading,
            writing,
            waiting,
        )
    }

    /// The server's numbers in Prometheus' text exposition format
    /// (`duality http --metrics-listen`): those of every server on the
    /// models ([`duality_models::metrics::server_metrics`]) and the
    /// server's own counters as `duality_http_*`.
    pub fn prometheus(&self) -> String {
        let mut e = duality_models::metrics::Exposition::new();
        if let Some(h) = self.server.get() {
            duality_models::metrics::server_metrics(h, &mut e);
        }
        let s = self.stats();
        let labels = [
            "code=\"1xx\"",
            "code=\"2xx\"",
            "code=\"3xx\"",
            "code=\"4xx\"",
            "code=\"5xx\"",
        ];
        let classes: Vec<(&str, u64)> = labels.into_iter().zip(s.responses).collect();
        e.counters(
            "duality_http_responses_total",
            "Responses by status class (as the access log's status).",
            &classes,
        );
        for (name, help, v) in [
            ("requests", "Requests answered (every status).", s.requests),
            (
                "head_timeouts",
                "Connections closed with 408.",
                s.head_timeouts,
            ),
            ("idle_timeouts", "Idle connections closed.", s.idle_timeouts),
            (
                "write_timeouts",
                "Connections closed because a write did not progress.",
                s.write_timeouts,
            ),
            (
                "sendfile_bytes",
                "Body bytes sent from the file (sendfile, or read through the io_uring ring), not counted in duality_written_bytes_total.",
                s.sendfile_bytes,
            ),
            (
                "open_file_hits",
                "Requests answered from a file kept open, without a lookup.",
                s.open_file_hits,
            ),
            (
                "learned_copy",
                "Requests for a file of the learned range (--sendfile-learn) answered by a copy from the page cache.",
                s.learned_copy,
            ),
            (
                "learned_sendfile",
                "Requests for a file of the learned range (--sendfile-learn) answered with sendfile.",
                s.learned_sendfile,
            ),
            (
                "cold_reads",
                "Pieces of sendfile bodies read into the page cache off the loops.",
                s.cold_reads,
            ),
            (
                "cache_hits",
                "Page-cache lookups answered from memory.",
                s.cache.hits,
            ),
            (
                "cache_misses",
                "Page-cache lookups not answered.",
                s.cache.misses,
            ),
            (
                "cache_not_admitted",
                "Small files sent without caching them: missed for the first time while the cache was full.",
                s.cache.not_admitted,
            ),
            (
                "gzip_compressed",
                "Bodies compressed by the server.",
                s.gzip_compressed,
            ),
            (
                "requests_limited",
                "Requests refused over --limit-req's burst or --limit-conn's connections (503, or 429).",
                s.limited,
            ),
            (
                "requests_delayed",
                "Requests --limit-req delayed to hold its rate.",
                s.delayed,
            ),
            (
                "log_lines_dropped",
                "Access-log lines dropped because the log's writer fell behind (its queue full).",
                s.log_dropped,
            ),
            (
                "log_lines_failed",
                "Access-log lines the file did not take (a full disk, an I/O error).",
                s.log_failed,
            ),
        ] {
            e.counter(&format!("duality_http_{name}_total"), help, v);
        }
        e.gauge(
            "duality_http_open_files",
            "Files kept open between requests.",
            s.open_files as f64,
        );
        e.finish()
    }

    /// Opens the access log's file again, as nginx does on SIGUSR1 (`nginx
    /// -s reopen`): after a rotation renamed it, lines go to a new file at
    /// the configured path. Lines queued before are written to the old
    /// one. Blocks while the log's queue is full; a no-op without a log.
    pub fn reopen_log(&self) {
        if let Some(log) = &self.log {
            log.reopen();
        }
    }

    /// Waits (at most `limit`) until every line logged so far is written
    /// to the access log: at exit, where the writer thread would otherwise
    /// be cut off with lines still queued. `false`: not within `limit`.
    pub fn sync_log(&self, limit: Duration) -> bool {
        match &self.log {
            Some(log) => log.sync(limit),
            None => true,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// The root, with `--alias`'s directories.
    pub fn root(&self) -> &Roots {
        &self.root
    }

    /// The counters now.
    pub fn stats(&self) -> HttpStats {
        let c = &self.counters;
        HttpStats {
            requests: self.phases.requests(),
            responses: self.phases.classes(),
            head_timeouts: c.head_timeouts.load(Relaxed),
            idle_timeouts: c.idle_timeouts.load(Relaxed),
            write_timeouts: c.write_timeouts.load(Relaxed),
            sendfile_bytes: c.sendfile_bytes.load(Relaxed),
            open_file_hits: c.open_file_hits.load(Relaxed),
            learned_copy: c.learned_copy.load(Relaxed),
            learned_sendfile: c.learned_sendfile.load(Relaxed),
            cold_reads: c.cold_reads.load(Relaxed),
            open_files: self.fresh.open_files() as u64,
            log_dropped: self.log.as_ref().map_or(0, |l| l.dropped.load(Relaxed)),
            log_failed: self.log.as_ref().map_or(0, |l| l.failed.load(Relaxed)),
            cache: self.cache.stats(),
            gzip_compressed: c.gzip_compressed.load(Relaxed),
            gzip_static: c.gzip_static.load(Relaxed),
            gzip_cache: self.gzip_cache.stats(),
            limited: c.limited.load(Relaxed),
            delayed: c.delayed.load(Relaxed),
        }
    }

    /// Finds what answers `request` (a [`Head::path`](crate::Head::path)),
    /// through `--try-files` where given (its next requests are then
    /// answered from memory by what was found); `want_gzip`: the request
    /// [wants](gzip::wanted) the gzip variant; `takes_gzip`: it
    /// [takes](gzip::takes) a gzip body (a lone `.gz`). Blocking
    /// (`realpath`, `stat`, `open`, `read`): runs on the blocking pool.
    /// `callback`: the request's `callback` argument where listings are
    /// JSONP (checked only if a listing answers).
    ///
    /// Also the address served where it is not `request` (an index file,
    /// a `--try-files` name): the log's `$uri`, as nginx's follows its
    /// internal redirects; noted on the entry the lookup recorded, for the
    /// requests answered from it.
    pub(crate) fn lookup(
        &self,
        request: &str,
        want_gzip: bool,
        takes_gzip: bool,
        callback: Option<Vec<u8>>,
    ) -> (Result<Found, HttpError>, Option<Arc<str>>) {
        let mut uri = None;
        let found = self.lookup_as(request, want_gzip, takes_gzip, callback, &mut uri);
        if let (Some(u), Ok(Found::Bytes { .. } | Found::File { .. })) = (&uri, &found) {
            self.fresh.note_uri(request, u);
        }
        (found, uri)
    }

    /// [`lookup`](Self::lookup), the address served into `uri`.
    fn lookup_as(
        &self,
        request: &str,
        want_gzip: bool,
        takes_gzip: bool,
        callback: Option<Vec<u8>>,
        uri: &mut Option<Arc<str>>,
    ) -> Result<Found, HttpError> {
        // The request's location's (the server's where none takes it).
        let scope = self.scopes.for_path(request);
        let try_files = scope.try_files.as_ref();
        let (served, resolved) = match try_files {
            Some(t) => {
                let (served, resolved) = t.resolve(&self.root, request);
                (std::borrow::Cow::Owned(served), resolved)
            }
            None => (request.into(), self.root.resolve(request)),
        };
        // The address served: its type, listing and `.gz` are of it.
        let url_path: &str = &served;
        let (path, meta) = match resolved {
            Ok(Resolved::Redirect { location }) => return Ok(Found::Redirect(location)),
            Ok(Resolved::Listing { path }) => {
                let (mut entries, more) =
                    crate::autoindex::read(&path, crate::autoindex::MAX_ENTRIES, |real| {
                        self.root.allows(real)
                    })
                    .map_err(|e| HttpError::from_io(&e))?;
                let style = &self.cfg.autoindex_style;
                // As nginx: a bad callback is the client's error.
                let callback = crate::autoindex::jsonp_callback(callback.as_deref())
                    .map_err(HttpError::keep)?;
                let offset = match style.localtime {
                    true => crate::sys::utc_offset_now(),
                    false => 0,
                };
                let page = crate::autoindex::render_as(
                    style,
                    url_path,
                    &mut entries,
                    more,
                    callback.as_deref(),
                    offset,
                );
                return Ok(Found::Listing(page));
            }
            Ok(Resolved::File { path, meta }) => (path, meta),
            // A lone `.gz` is not a file try_files finds (nor nginx's).
            Err(e)
                if e.status == Status::NotFound
                    && scope.gzip.static_files
                    && try_files.is_none() =>
            {
                return match takes_gzip {
                    true => self.gzip_static_alone(url_path).ok_or(e),
                    // nginx's gzip_static with gzip_vary: the 404 varies
                    // where a client taking gzip gets the `.gz`.
                    false if self.lone_gz(url_path).is_some() => Err(e.varied()),
                    false => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        // Kept only where a log format asks (an index's, on every hit of
        // `/`, would cost its reference count there).
        // (Wanted too where locations are: the answer's is the address
        // it was served from.)
        *uri = if !crate::log_format::uri_wanted() && !self.scopes.has_locations() {
            None
        } else if url_path.ends_with('/') {
            Some(format!("{url_path}{}", self.root.index_name_of(&path)).into())
        } else if url_path != request {
            Some(url_path.into())
        } else {
            None
        };
        // The type of the name asked for (a directory's: its index), as
        // nginx: not of where a symlink leads (`notes.txt -> page.html` is
        // text, never HTML a browser would run).
        let named = if url_path.ends_with('/') {
            Path::new(self.root.index_name_of(&path))
        } else {
            Path::new(url_path)
        };
        let content_type = self.types.of(named);
        let eligible = gzip::eligible(&scope.gzip, named, content_type, meta.size);
        if eligible && want_gzip {
            if let Some(found) = self.lookup_gzip(request, &path, meta, content_type)? {
                return Ok(found);
            }
        }
        // With `.gz` files alone, only a file with a fresh one beside it
        // has another variant (as nginx varies it).
        let vary = eligible && (scope.gzip.enabled || self.fresh_gz_beside(&path, meta));
        let encoding = Encoding::Identity { vary };
        if let Some(bytes) = self.cache.get(&path, &meta) {
            // Kept open for its next requests where sendfile costs less
            // than the copy (a file the open did not find as stat did is
            // left to the next lookup).
            let opened = (self.cfg.keeps_open(meta.size) && self.fresh.has_room())
                .then(|| file::open(&path).ok())
                .flatten()
                .filter(|(_, m)| *m == meta);
            match opened {
                Some((file, _)) => {
                    let file = Arc::new(file);
                    self.fresh.record_open(
                        request,
                        &path,
                        meta,
                        content_type,
                        vary,
                        &file,
                        AtLimit::GoWithout,
                    );
                }
                None => self.fresh.record(request, &path, meta, content_type, vary),
            }
            return Ok(Found::Bytes {
                meta,
                content_type,
                encoding,
                bytes,
            });
        }
        let (file, meta) = file::open(&path).map_err(|e| HttpError::from_io(&e))?;
        if !self.cache.admits(meta.size) && meta.size >= self.cfg.sendfile_threshold {
            let file = Arc::new(file);
            self.fresh.record_open(
                request,
                &path,
                meta,
                content_type,
                vary,
                &file,
                AtLimit::Sweep,
            );
            return Ok(Found::File {
                file,
                meta,
                content_type,
                encoding,
                resident: false,
            });
        }
        if !self.cache.admit(&path, meta.size) {
            // A file the cache does not take now: full (no eviction of
            // entries that would hit), off, or the file past its largest.
            // A file below the sendfile threshold that the cache could hold
            // is read here, where blocking is allowed, and written from
            // memory: the head and body go in one send (a read into the
            // page cache, then a `sendfile` after the head, cost 11-19%
            // more CPU per 16 KiB request: docs/results/disk-web). Others
            // are read into the page cache here and the connection
            // `sendfile`s them without waiting for the disk: no copy of a
            // file larger than the cache's largest held per reader.
            if meta.size < self.cfg.sendfile_threshold && self.cache.admits(meta.size) {
                let (meta, bytes) = read_whole(&file, meta)?;
                return Ok(Found::Bytes {
                    meta,
                    content_type,
                    encoding,
                    bytes,
                });
            }
            if duality_rt::fs::read_in(&file, 0, meta.size).is_ok() {
                return Ok(Found::File {
                    file: Arc::new(file),
                    meta,
                    content_type,
                    encoding,
                    resident: true,
                });
            }
        }
        let (meta, bytes) = self.read_file(request, &path, file, meta, content_type, vary)?;
        Ok(Found::Bytes {
            meta,
            content_type,
            encoding,
            bytes,
        })
    }

    /// The gzip variant of the file `path` (validators `meta`), in the
    /// order of the [`crate::gzip`] docs: the variant cache, a fresh `.gz`,
    /// the file to compress. `None`: answer with the identity body.
    fn lookup_gzip(
        &self,
        url_path: &str,
        path: &Path,
        meta: FileMeta,
        content_type: &'static str,
    ) -> Result<Option<Found>, HttpError> {
        // A fresh `.gz` first: the cache keys it by its own validators too,
        // so a replaced one is never answered from a stale entry.
        let gz = self.scopes.for_path(url_path).gzip;
        if gz.static_files {
            if let Some(found) = self.gzip_static(path, meta, content_type) {
                return Ok(Some(found));
            }
        }
        if let Some(bytes) = self.gzip_cache.get(path, &meta) {
            self.fresh.record(url_path, path, meta, content_type, true);
            return Ok(Some(Found::Bytes {
                meta,
                content_type,
                encoding: Encoding::Gzip {
                    len: bytes.len() as u64,
                },
                bytes,
            }));
        }
        if !gz.enabled || meta.size > gz.max_length {
            return Ok(None);
        }
        let (meta, input) = match self.cache.get(path, &meta) {
            Some(bytes) => (meta, GzipInput::Bytes(bytes)),
            None => {
                let (file, meta) = file::open(path).map_err(|e| HttpError::from_io(&e))?;
                if !self.cache.admits(meta.size) {
                    // Too large for the cache: its reads into the page
                    // cache start here, and the compression reads it in
                    // pieces, waiting for what has not arrived (off the
                    // loops unless the policy is `inline`).
                    let _ = sys::readahead(&file, 0, meta.size);
                    let input = GzipInput::File {
                        file: Arc::new(file),
                        len: meta.size,
                    };
                    return Ok(Some(Found::Compress {
                        path: path.to_owned(),
                        meta,
                        content_type,
                        input,
                    }));
                }
                let (read, bytes) =
                    self.read_file(url_path, path, file, meta, content_type, true)?;
                if read != meta {
                    // It shrank while read: send what was read, as is.
                    return Ok(Some(Found::Bytes {
                        meta: read,
                        content_type,
                        encoding: Encoding::Identity { vary: true },
                        bytes,
                    }));
                }
                (meta, GzipInput::Bytes(bytes))
            }
        };
        Ok(Some(Found::Compress {
            path: path.to_owned(),
            meta,
            content_type,
            input,
        }))
    }

    /// A `.gz` beside `path`, confined to the root like any file and at
    /// least as new as the file (`meta`), as the file's gzip variant: from
    /// the variant cache, else read into it when it fits, else to be sent
    /// with sendfile. Its validators are [`static_variant`]'s, so its ETag
    /// and cache entry change when the `.gz` does. `None` when there is
    /// none, it is stale, or it cannot be read.
    fn gzip_static(
        &self,
        path: &Path,
        meta: FileMeta,
        content_type: &'static str,
    ) -> Option<Found> {
        let (gz_path, gz_meta) = self.root.sibling(path, ".gz")?;
        if gz_meta.mtime < meta.mtime {
            return None;
        }
        if let Some(found) = self.cached_gz(path, static_variant(&meta, &gz_meta), content_type) {
            return Some(found);
        }
        // Validators from the open descriptor: what is sent.
        let (gz_file, gz_meta) = file::open(&gz_path).ok()?;
        if gz_meta.mtime < meta.mtime {
            return None;
        }
        let meta = static_variant(&meta, &gz_meta);
        self.gz_body(path, gz_file, gz_meta.size, meta, content_type)
    }

    /// Whether a `.gz` at least as new as the file `path` (validators
    /// `meta`) lies beside it: one stat.
    fn fresh_gz_beside(&self, path: &Path, meta: FileMeta) -> bool {
        self.root
            .sibling(path, ".gz")
            .is_some_and(|(_, gz)| gz.mtime >= meta.mtime)
    }

    /// A `FILE.gz` under the root whose `FILE` does not exist, sent as
    /// `FILE`'s gzip variant (typed by `FILE`'s name) to a client that takes
    /// gzip, as nginx's `gzip_static` sends it; a client that does not gets
    /// the 404. Its validators are the `.gz`'s own. `None` when there is no
    /// such file or it cannot be read.
    fn gzip_static_alone(&self, url_path: &str) -> Option<Found> {
        let (gz_path, meta) = self.lone_gz(url_path)?;
        // Typed by the name asked for (the `.gz` may be a link to any name);
        // cached under the `.gz`'s own path.
        let content_type = self.types.of(Path::new(url_path));
        if let Some(found) = self.cached_gz(&gz_path, meta, content_type) {
            return Some(found);
        }
        let (gz_file, gz_meta) = file::open(&gz_path).ok()?;
        self.gz_body(&gz_path, gz_file, gz_meta.size, gz_meta, content_type)
    }

    /// The `FILE.gz` under the root that answers `url_path` (a `FILE`
    /// not found) for a client taking gzip, if there is one.
    fn lone_gz(&self, url_path: &str) -> Option<(PathBuf, FileMeta)> {
        if url_path.ends_with('/') {
            return None;
        }
        match self.root.resolve(&format!("{url_path}.gz")) {
            Ok(Resolved::File { path, meta }) => Some((path, meta)),
            _ => None,
        }
    }

    /// A `.gz`'s bytes from the variant cache, under `key` while its
    /// validators are `meta`.
    fn cached_gz(&self, key: &Path, meta: FileMeta, content_type: &'static str) -> Option<Found> {
        let bytes = self.gzip_cache.get(key, &meta)?;
        self.counters.gzip_static.fetch_add(1, Relaxed);
        Some(Found::Bytes {
            meta,
            content_type,
            encoding: Encoding::Gzip {
                len: bytes.len() as u64,
            },
            bytes,
        })
    }

    /// The body of a `.gz` (`gz_file`, `size` bytes) answering `path`'s
    /// gzip variant (validators `meta`): read into the variant cache when it
    /// fits, else sent with sendfile. `None` if it changed while read.
    fn gz_body(
        &self,
        path: &Path,
        gz_file: std::fs::File,
        size: u64,
        meta: FileMeta,
        content_type: &'static str,
    ) -> Option<Found> {
        self.counters.gzip_static.fetch_add(1, Relaxed);
        let encoding = Encoding::Gzip { len: size };
        let fits = size <= self.gzip_cache.max_file_size() as u64;
        if !fits && size >= self.cfg.sendfile_threshold {
            return Some(Found::File {
                file: Arc::new(gz_file),
                meta,
                content_type,
                encoding,
                resident: false,
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        gz_file.take(size).read_to_end(&mut bytes).ok()?;
        if bytes.len() as u64 != size {
            return None; // changed under us: compress or send identity
        }
        let bytes: Arc<[u8]> = bytes.into();
        // Not recorded in the fresh index, which holds the file's own
        // validators: the next request looks the `.gz` up again (a stat).
        self.gzip_cache.insert_variant(path, &meta, bytes.clone());
        Some(Found::Bytes {
            meta,
            content_type,
            encoding,
            bytes,
        })
    }

    /// Reads the open `file` (validators `meta`, from its `fstat`) whole,
    /// into the page cache if it fits. The validators returned describe the
    /// bytes: if the file shrank between fstat and read, its real length
    /// (and nothing is cached).
    fn read_file(
        &self,
        url_path: &str,
        path: &Path,
        file: File,
        meta: FileMeta,
        content_type: &'static str,
        varies: bool,
    ) -> Result<(FileMeta, Arc<[u8]>), HttpError> {
        let (read, bytes) = read_whole(&file, meta)?;
        if read != meta {
            return Ok((read, bytes));
        }
        if self.cache.admits(meta.size) && self.cache.insert(path, &meta, bytes.clone()) {
            // Its next requests go out with sendfile if it is large enough
            // and a descriptor is free (see `HttpConfig::sendfile_kept`).
            if self.cfg.keeps_open(meta.size) {
                let file = Arc::new(file);
                self.fresh.record_open(
                    url_path,
                    path,
                    meta,
                    content_type,
                    varies,
                    &file,
                    AtLimit::GoWithout,
                );
            } else {
                self.fresh
                    .record(url_path, path, meta, content_type, varies);
            }
        }
        Ok((meta, bytes))
    }
}

/// Reads the open `file` (validators `meta`) whole into memory of its own;
/// if it shrank between `fstat` and the read, the validators returned give
/// the length read.
fn read_whole(file: &File, meta: FileMeta) -> Result<(FileMeta, Arc<[u8]>), HttpError> {
    let mut bytes = Vec::with_capacity(meta.size as usize);
    file.take(meta.size)
        .read_to_end(&mut bytes)
        .map_err(|_| HttpError::keep(Status::InternalServerError))?;
    let bytes: Arc<[u8]> = bytes.into();
    let meta = FileMeta {
        size: bytes.len() as u64,
        ..meta
    };
    Ok((meta, bytes))
}

/// The validators of a pre-compressed `.gz` (`gz`) served as the gzip
/// variant of a file (`file`): they change when either file does — the
/// later mtime, and an identity mixing both files' — so the variant's
/// `ETag` and its variant-cache entry follow a replaced `.gz` (nginx's
/// `gzip_static` uses the `.gz`'s own).
fn static_variant(file: &FileMeta, gz: &FileMeta) -> FileMeta {
    FileMeta {
        size: file.size,
        mtime: file.mtime.max(gz.mtime),
        inode: file.inode ^ gz.inode.rotate_left(32) ^ gz.size.rotate_left(16),
        changed: file.changed.max(gz.changed),
    }
}

/// Starts `builder`'s server with the HTTP handler (and a 503 for
/// connections over the limit).
pub fn serve(builder: ServerBuilder, state: Arc<HttpState>) -> io::Result<Server> {
    let driver = crate::connection::driver(state.clone());
    let server = builder
        .refusal_message(REFUSAL)
        // nginx closes idle keep-alive connections for new ones at its
        // limit: a full table of idle clients must not refuse every new one.
        .reclaim_idle(true)
        .serve(move |conn, payload| duality_models::drive(conn, payload, driver.clone()))?;
    let _ = state.server.set(server.stats_handle());
    Ok(server)
}

/// A fresh-index entry: what the last `stat` found for a URL path.
#[derive(Debug, Clone)]
pub(crate) struct Fresh {
    pub(crate) path: Arc<Path>,
    pub(crate) meta: FileMeta,
    pub(crate) content_type: &'static str,
    /// Its responses carry `Vary: Accept-Encoding`: an eligible file with
    /// compression on, or with a fresh `.gz` beside it (nginx's
    /// `gzip_static` with `gzip_vary` varies only those).
    pub(crate) varies: bool,
    /// The file, open, for a body sent with `sendfile` (nginx's
    /// `open_file_cache`): a hit answers without the blocking pool.
    pub(crate) file: Option<Arc<OpenFile>>,
    /// The address served where it is not the one asked (an index file,
    /// a `--try-files` name): the log's `$uri`.
    pub(crate) uri: Option<Arc<str>>,
    checked: Instant,
}

/// What [`FreshIndex::record_open`] does when every descriptor allowed is
/// held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtLimit {
    /// Drop stale entries holding descriptors to make room (a file only
    /// `sendfile` answers).
    Sweep,
    /// Record the entry without a descriptor (a file the page cache holds
    /// too, which a copy answers anyway).
    GoWithout,
}

/// A descriptor the fresh index keeps open, counted against
/// [`HttpConfig::open_files`] until the last clone is dropped (an entry
/// replaced or found stale, and any send still using it).
#[derive(Debug)]
pub(crate) struct OpenFile {
    pub(crate) file: Arc<File>,
    open: Arc<std::sync::atomic::AtomicUsize>,
    /// When the whole file was last found in the page cache, in
    /// microseconds after `opened`, plus one (0: never). A hint any loop
    /// may set, read without ordering.
    resident_at: std::sync::atomic::AtomicU64,
    opened: Instant,
}

impl OpenFile {
    /// How long a file found wholly in the page cache is trusted to stay
    /// there without asking again ([`resident_since`](Self::resident_since)).
    /// Pages just sent sit on the kernel's active list; one evicted within
    /// this costs its loop one disk read in `sendfile`, where asking costs
    /// every request three system calls.
    pub(crate) const RESIDENT_FOR: Duration = Duration::from_millis(100);

    /// Whether the whole file was found in the page cache within
    /// [`RESIDENT_FOR`](Self::RESIDENT_FOR) before `now`.
    pub(crate) fn resident_since(&self, now: Instant) -> bool {
        let at = self.resident_at.load(Relaxed);
        at != 0
            && now.saturating_duration_since(self.opened).as_micros() as u64 + 1
                < at.saturating_add(Self::RESIDENT_FOR.as_micros() as u64)
    }

    /// Records that the whole file was found in the page cache at `now`.
    pub(crate) fn found_resident(&self, now: Instant) {
        let at = now.saturating_duration_since(self.opened).as_micros() as u64 + 1;
        self.resident_at.store(at, Relaxed);
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Relaxed);
    }
}

const FRESH_SHARDS: usize = 16;

/// One shard of the fresh index.
type FreshShard = HashMap<Box<str>, Fresh>;

/// URL path → [`Fresh`], sharded by a hash of the path; every method takes
/// exactly one shard lock and no lock is held across anything else.
pub(crate) struct FreshIndex {
    shards: Box<[Mutex<FreshShard>]>,
    hasher: DefaultHashBuilder,
    ttl: Duration,
    /// Descriptors held ([`OpenFile`]s alive), and the most allowed.
    open: Arc<std::sync::atomic::AtomicUsize>,
    open_max: usize,
}

impl FreshIndex {
    fn new(ttl: Duration, open_max: usize) -> FreshIndex {
        FreshIndex {
            shards: (0..FRESH_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            hasher: DefaultHashBuilder::default(),
            ttl,
            open: Arc::default(),
            open_max,
        }
    }

    /// Descriptors held open now.
    pub(crate) fn open_files(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// Whether another descriptor may be kept now (without sweeping).
    pub(crate) fn has_room(&self) -> bool {
        !self.ttl.is_zero() && self.open_files() < self.open_max
    }

    fn shard(&self, url: &str) -> MutexGuard<'_, FreshShard> {
        let i = self.hasher.hash_one(url) as usize % FRESH_SHARDS;
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry for `url` if its `stat` is younger than the TTL. A stale
    /// entry that holds a descriptor is dropped here, closing it (the next
    /// lookup opens the file again if it is still there).
    pub(crate) fn get(&self, url: &str) -> Option<Fresh> {
        if self.ttl.is_zero() {
            return None;
        }
        let mut shard = self.shard(url);
        let e = shard.get(url)?;
        // The loop's clock: no clock read per request (it trails by at most a
        // turn, so an entry may live that much past its TTL).
        if duality_rt::time::loop_now().saturating_duration_since(e.checked) < self.ttl {
            return Some(e.clone());
        }
        if e.file.is_some() {
            shard.remove(url);
        }
        None
    }

    /// Records what a `stat` just found. A full shard first drops its stale
    /// entries, and everything if none was stale.
    pub(crate) fn record(
        &self,
        url: &str,
        path: &Path,
        meta: FileMeta,
        content_type: &'static str,
        varies: bool,
    ) {
        self.insert(url, path, meta, content_type, varies, None);
    }

    /// Notes that `url` is answered from another address (see
    /// [`Fresh::uri`]), on the entry just recorded for it.
    pub(crate) fn note_uri(&self, url: &str, uri: &str) {
        if let Some(e) = self.shard(url).get_mut(url) {
            e.uri = Some(uri.into());
        }
    }

    /// [`record`](Self::record), keeping `file` (opened by that `stat`'s
    /// lookup) open with the entry while fewer than the allowed descriptors
    /// are held. At the limit, [`AtLimit`] says whether stale entries holding
    /// descriptors are dropped first; if none was, the entry keeps no
    /// descriptor.
    #[allow(clippy::too_many_arguments)] // what a stat found, and how to keep it
    pub(crate) fn record_open(
        &self,
        url: &str,
        path: &Path,
        meta: FileMeta,
        content_type: &'static str,
        varies: bool,
        file: &Arc<File>,
        at_limit: AtLimit,
    ) {
        if self.ttl.is_zero() || self.open_max == 0 {
            return self.record(url, path, meta, content_type, varies);
        }
        // The entry this one replaces gives its descriptor back first.
        {
            let mut shard = self.shard(url);
            if shard.get(url).is_some_and(|e| e.file.is_some()) {
                shard.remove(url);
            }
        }
        let reserve = || {
            self.open
                .fetch_update(Relaxed, Relaxed, |n| (n < self.open_max).then_some(n + 1))
                .is_ok()
        };
        let mut held = reserve();
        if !held && at_limit == AtLimit::Sweep {
            self.drop_stale_files();
            held = reserve();
        }
        let file = held.then(|| {
            Arc::new(OpenFile {
                file: file.clone(),
                open: self.open.clone(),
                resident_at: Default::default(),
                opened: Instant::now(),
            })
        });
        self.insert(url, path, meta, content_type, varies, file);
    }

    /// Starts the thread that closes descriptors gone stale that no request
    /// looks at again (a deleted file's space is then freed within about
    /// two revalidate periods, as nginx's `open_file_cache inactive=`
    /// does). It ends within a period of the index being dropped. Nothing
    /// to do, and no thread, when no descriptor can be kept.
    fn spawn_closer(index: &Arc<FreshIndex>) -> io::Result<()> {
        if index.ttl.is_zero() || index.open_max == 0 {
            return Ok(());
        }
        let weak = Arc::downgrade(index);
        let every = index.ttl.max(Duration::from_millis(100));
        std::thread::Builder::new()
            .name("duality-http-files".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                let Some(index) = weak.upgrade() else { return };
                if index.open_files() > 0 {
                    index.drop_stale_files();
                }
            })?;
        Ok(())
    }

    /// Drops every stale entry that holds a descriptor, one shard at a time.
    fn drop_stale_files(&self) {
        for shard in self.shards.iter() {
            let ttl = self.ttl;
            shard
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|_, e| e.file.is_none() || e.checked.elapsed() < ttl);
        }
    }

    fn insert(
        &self,
        url: &str,
        path: &Path,
        meta: FileMeta,
        content_type: &'static str,
        varies: bool,
        file: Option<Arc<OpenFile>>,
    ) {
        if self.ttl.is_zero() {
            return;
        }
        let entry = Fresh {
            path: path.into(),
            meta,
            content_type,
            varies,
            file,
            uri: None,
            checked: Instant::now(),
        };
        let mut shard = self.shard(url);
        if shard.len() >= FRESH_ENTRIES / FRESH_SHARDS && !shard.contains_key(url) {
            let ttl = self.ttl;
            shard.retain(|_, e| e.checked.elapsed() < ttl);
            if shard.len() >= FRESH_ENTRIES / FRESH_SHARDS {
                shard.clear();
            }
        }
        shard.insert(url.into(), entry);
    }
}

/// Lines waiting for the log writer, at most.
const LOG_QUEUE: usize = 16 * 1024;

/// What the access log's writer thread is sent.
enum LogMsg {
    Line(Vec<u8>),
    /// Open the file again (after a rotation renamed it): nginx's reopen.
    Reopen,
    /// Write out what came before, then say so.
    Sync(mpsc::Sender<()>),
}

/// The access log: a bounded queue to a writer thread, which flushes
/// whenever the queue runs empty. The thread ends when the state is dropped.
pub(crate) struct AccessLog {
    tx: SyncSender<LogMsg>,
    pub(crate) dropped: AtomicU64,
    /// Lines the file did not take (a full disk, an I/O error), counted by
    /// the writer thread.
    pub(crate) failed: Arc<AtomicU64>,
}

/// How often a log that cannot be written says so again (nginx: once a
/// minute).
const LOG_ERROR_EVERY: Duration = Duration::from_secs(60);

/// The writer thread's side: lines gathered since the last write, written
/// at once; lines a failed write lost are counted and said.
struct LogWriter {
    sink: Box<dyn io::Write + Send>,
    /// Where the lines go, for what is said when they cannot.
    name: String,
    batch: Vec<u8>,
    lines: u64,
    failed: Arc<AtomicU64>,
    /// When a failure was last said, and lines lost since.
    said: Option<Instant>,
    lost_since: u64,
}

impl LogWriter {
    fn push(&mut self, line: &[u8]) {
        self.batch.extend_from_slice(line);
        self.lines += 1;
        // A burst that never lets the queue run empty is written in
        // pieces, not held.
        if self.batch.len() >= 64 * 1024 {
            self.flush();
        }
    }

    /// Writes the batch; where the file refuses it (`ENOSPC`, `EIO`), its
    /// lines are counted lost (a line cut short by a partial write
    /// included) and the operator told: at once, then at most once a
    /// minute with how many were lost since. The server goes on.
    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let r = self
            .sink
            .write_all(&self.batch)
            .and_then(|()| self.sink.flush());
        if let Err(e) = r {
            self.failed.fetch_add(self.lines, Relaxed);
            self.lost_since += self.lines;
            let now = Instant::now();
            if self
                .said
                .is_none_or(|t| now.duration_since(t) >= LOG_ERROR_EVERY)
            {
                duality_rt::say!(
                    "duality http: writing the access log {}: {e}; {} line(s) lost (counted in duality_http_log_lines_failed_total)",
                    self.name,
                    self.lost_since
                );
                self.said = Some(now);
                self.lost_since = 0;
            }
        }
        self.batch.clear();
        self.lines = 0;
        if self.batch.capacity() > 256 * 1024 {
            self.batch.shrink_to(64 * 1024);
        }
    }
}

/// Opens the log file for appending (`-`: standard error).
fn open_log(path: &Path) -> io::Result<Box<dyn io::Write + Send>> {
    if path == Path::new("-") {
        return Ok(Box::new(io::stderr()));
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("access log {}: {e}", path.display())))?;
    Ok(Box::new(f))
}

impl AccessLog {
    fn open(path: &Path) -> io::Result<AccessLog> {
        let sink = open_log(path)?;
        let path = path.to_owned();
        let failed = Arc::new(AtomicU64::new(0));
        let mut w = LogWriter {
            sink,
            name: if path == Path::new("-") {
                "on standard error".into()
            } else {
                path.display().to_string()
            },
            batch: Vec::new(),
            lines: 0,
            failed: failed.clone(),
            said: None,
            lost_since: 0,
        };
        let (tx, rx) = mpsc::sync_channel::<LogMsg>(LOG_QUEUE);
        std::thread::Builder::new()
            .name("duality-http-log".into())
            .spawn(move || {
                let take = |w: &mut LogWriter, m: LogMsg| match m {
                    LogMsg::Line(line) => w.push(&line),
                    LogMsg::Sync(done) => {
                        w.flush();
                        let _ = done.send(());
                    }
                    LogMsg::Reopen => {
                        w.flush();
                        // As nginx: the old file is kept when the new one
                        // cannot be opened, and the operator told why.
                        match open_log(&path) {
                            Ok(sink) => w.sink = sink,
                            Err(e) => duality_rt::say!(
                                "duality http: reopening the {e}; still writing to the old file"
                            ),
                        }
                    }
                };
                while let Ok(m) = rx.recv() {
                    take(&mut w, m);
                    while let Ok(m) = rx.try_recv() {
                        take(&mut w, m);
                    }
                    w.flush();
                }
            })?;
        Ok(AccessLog {
            tx,
            dropped: AtomicU64::new(0),
            failed,
        })
    }

    pub(crate) fn write(&self, line: Vec<u8>) {
        match self.tx.try_send(LogMsg::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Asks the writer to open the file again; waits for room in the queue
    /// (never dropped, unlike a line), so call it off the loops.
    fn reopen(&self) {
        let _ = self.tx.send(LogMsg::Reopen);
    }

    /// Waits until the lines queued before it are written (see
    /// [`HttpState::sync_log`]); off the loops.
    fn sync(&self, limit: Duration) -> bool {
        let (done, written) = mpsc::channel();
        self.tx.send(LogMsg::Sync(done)).is_ok() && written.recv_timeout(limit).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_synced_log_holds_every_line_written_before() {
        let path = std::env::temp_dir().join(format!("duality-log-sync-{}", std::process::id()));
        let log = AccessLog::open(&path).unwrap();
        for i in 0..1000 {
            log.write(format!("line {i}\n").into_bytes());
        }
        assert!(log.sync(Duration::from_secs(5)));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1000);
        assert!(text.ends_with("line 999\n"));
        drop(log);
        let _ = std::fs::remove_file(&path);
    }

    /// Validators for a file of `size` bytes, and an open file (this test
    /// binary) to keep.
    fn kept_file(size: u64) -> (FileMeta, Arc<File>) {
        let meta = FileMeta {
            size,
            mtime: std::time::UNIX_EPOCH,
            inode: 1,
            changed: 0,
        };
        let f = Arc::new(File::open(std::env::current_exe().unwrap()).unwrap());
        (meta, f)
    }

    #[test]
    fn fresh_index_keeps_at_most_open_max_files_and_closes_stale_ones() {
        let idx = FreshIndex::new(Duration::from_millis(400), 2);
        let (meta, f) = kept_file(1 << 20);
        let open = |url: &str| {
            idx.record_open(
                url,
                Path::new("/r/x"),
                meta,
                "x/y",
                false,
                &f,
                AtLimit::Sweep,
            );
        };
        open("/a");
        open("/b");
        open("/c");
        assert!(idx.get("/a").unwrap().file.is_some());
        assert!(idx.get("/b").unwrap().file.is_some());
        // Over the limit: recorded, but without a descriptor.
        assert!(idx.get("/c").unwrap().file.is_none());
        assert_eq!(idx.open_files(), 2);
        // A fresh stat of a kept file keeps it (its old descriptor goes).
        open("/a");
        assert!(idx.get("/a").unwrap().file.is_some());
        assert_eq!(idx.open_files(), 2);
        // A send in flight keeps its descriptor counted past its entry.
        let in_flight = idx.get("/b").unwrap().file.unwrap();
        std::thread::sleep(Duration::from_millis(420));
        // Stale entries give their descriptors to a new one.
        open("/d");
        assert!(idx.get("/d").unwrap().file.is_some());
        assert_eq!(idx.open_files(), 2, "/d and the send in flight");
        drop(in_flight);
        assert_eq!(idx.open_files(), 1);
        // Looking at a stale entry closes its descriptor.
        std::thread::sleep(Duration::from_millis(420));
        assert!(idx.get("/d").is_none());
        assert_eq!(idx.open_files(), 0);
        // No descriptors at all when the limit is 0.
        let none = FreshIndex::new(Duration::from_secs(1), 0);
        none.record_open(
            "/a",
            Path::new("/r/x"),
            meta,
            "x/y",
            false,
            &f,
            AtLimit::Sweep,
        );
        assert!(none.get("/a").unwrap().file.is_none());
        assert_eq!(none.open_files(), 0);
    }

    #[test]
    fn a_kept_file_is_trusted_resident_only_for_a_while_after_found_so() {
        let idx = FreshIndex::new(Duration::from_secs(60), 1);
        let (meta, f) = kept_file(1 << 10);
        idx.record_open(
            "/a",
            Path::new("/r/x"),
            meta,
            "x/y",
            false,
            &f,
            AtLimit::Sweep,
        );
        let open = idx.get("/a").unwrap().file.unwrap();
        let t = Instant::now() + Duration::from_millis(5);
        // Never found resident: asked.
        assert!(!open.resident_since(t));
        open.found_resident(t);
        assert!(open.resident_since(t));
        let within = OpenFile::RESIDENT_FOR - Duration::from_millis(1);
        assert!(open.resident_since(t + within));
        assert!(!open.resident_since(t + OpenFile::RESIDENT_FOR));
        // Found again later: trusted from then on.
        open.found_resident(t + Duration::from_secs(2));
        assert!(open.resident_since(t + Duration::from_secs(2) + within));
        // The index hands out the same file: the memory is shared by loops.
        assert!(idx
            .get("/a")
            .unwrap()
            .file
            .unwrap()
            .resident_since(t + Duration::from_secs(2)));
    }

    #[test]
    fn fresh_index_expires_and_stays_bounded() {
        // Long enough that a busy machine's pauses between the record and
        // the get stay under it.
        let idx = FreshIndex::new(Duration::from_millis(500), 0);
        let meta = FileMeta {
            size: 1,
            mtime: std::time::UNIX_EPOCH,
            inode: 1,
            changed: 0,
        };
        idx.record("/a", Path::new("/r/a"), meta, "text/plain", false);
        assert_eq!(&*idx.get("/a").unwrap().path, Path::new("/r/a"));
        assert!(idx.get("/b").is_none());
        std::thread::sleep(Duration::from_millis(520));
        assert!(idx.get("/a").is_none());
        for i in 0..FRESH_ENTRIES * 2 {
            idx.record(&format!("/f{i}"), Path::new("/r/f"), meta, "x/y", false);
        }
        let total: usize = idx.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= FRESH_ENTRIES, "{total}");
    }

    #[test]
    fn zero_ttl_disables_the_index() {
        let idx = FreshIndex::new(Duration::ZERO, 10);
        let meta = FileMeta {
            size: 1,
            mtime: std::time::UNIX_EPOCH,
            inode: 1,
            changed: 0,
        };
        idx.record("/a", Path::new("/r/a"), meta, "text/plain", false);
        assert!(idx.get("/a").is_none());
    }
}

#[cfg(test)]
mod stub_tests {
    use super::*;

    #[test]
    fn stub_status_is_nginx_format_byte_for_byte() {
        assert_eq!(
            stub_status(3, 10, 9, 42, 1, 1, 1),
            "Active connections: 3 \nserver accepts handled requests\n 10 9 42 \nReading: 1 Writing: 1 Waiting: 1 \n"
        );
    }

    #[test]
    fn phase_counts_sum_over_slots() {
        let p = PhaseCounts::new();
        p.change(Phase::Waiting, Phase::Reading);
        p.change(Phase::Reading, Phase::Writing);
        p.change(Phase::Waiting, Phase::Reading);
        assert_eq!(p.read(), (1, 1));
        p.change(Phase::Writing, Phase::Waiting);
        p.change(Phase::Reading, Phase::Reading);
        assert_eq!(p.read(), (1, 0));
        // Requests counted off a loop and on two loops add up.
        p.request();
        let on_loops: Vec<_> = (0..2)
            .map(|_| {
                duality_rt::LoopThread::spawn(duality_rt::LoopConfig::default())
                    .expect("loop thread")
            })
            .collect();
        let phases = std::sync::Arc::new(p);
        for l in &on_loops {
            let p = phases.clone();
            duality_rt::block_on(l.handle().spawn(async move {
                p.request();
                p.request();
            }))
            .expect("ran on the loop");
        }
        assert_eq!(phases.requests(), 5);
    }
}
