//! The server: [`HttpConfig`], the [`HttpState`] shared by every connection
//! of one server, and [`serve`], which starts a `duality-models` server whose
//! handler is [`serve_conn`](crate::serve_conn).
//!
//! ```text
//!            loop thread (any model)                  blocking pool
//!  request ─► fresh index hit? ─► page cache hit? ─► answer from memory
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
//! - `fresh` (`FreshIndex`): URL path → canonical path, validators and
//!   type, as the last `stat` on the blocking pool found them. A hit younger
//!   than [`HttpConfig::revalidate`] is answered on the loop without any
//!   system call; an older one goes back to the pool, whose `stat` drops a
//!   changed file from the page cache. So a change is served at most
//!   `revalidate` late (nginx's `open_file_cache_valid` is the same idea);
//!   `revalidate = 0` stats on every request. The index holds no file bytes
//!   (the page cache is the only memory bound) and at most
//!   [`FRESH_ENTRIES`] entries.
//! - `log`: a bounded queue to one writer thread. A loop never waits on the
//!   log file: when the queue is full, the line is dropped and counted.
//! - counters: relaxed atomics.

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use duality_models::{Server, ServerBuilder};
use hashbrown::{DefaultHashBuilder, HashMap};
use std::hash::BuildHasher;

use crate::cache::{CacheStats, PageCache};
use crate::file::{self, FileMeta};
use crate::mime;
use crate::path::{Resolved, Root};
use crate::request::Limits;
use crate::status::{HttpError, Status};

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
    /// Page-cache budget in bytes (0 disables the cache).
    pub cache_bytes: usize,
    /// Largest file the page cache takes.
    pub cache_max_file: usize,
    /// Files not cached and at least this large are sent with `sendfile`;
    /// smaller ones are read on the blocking pool and written from memory.
    pub sendfile_threshold: u64,
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
    /// Where the access log goes (`-` for stderr); `None`: no log.
    pub access_log: Option<PathBuf>,
    /// Request size limits.
    pub limits: Limits,
}

impl HttpConfig {
    /// The defaults for `root`: 64 MiB cache of files up to 64 KiB,
    /// `sendfile` from 64 KiB, revalidation after 1 s, 10 s head timeout,
    /// 60 s idle and write timeouts, no access log, [`Limits::default`].
    pub fn new(root: impl Into<PathBuf>) -> HttpConfig {
        HttpConfig {
            root: root.into(),
            cache_bytes: 64 << 20,
            cache_max_file: 64 << 10,
            sendfile_threshold: 64 << 10,
            revalidate: Duration::from_secs(1),
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            access_log: None,
            limits: Limits::default(),
        }
    }
}

/// Counters of one server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Requests answered (every status).
    pub requests: u64,
    /// Connections closed with 408 (head not complete in time).
    pub head_timeouts: u64,
    /// Connections closed silently after the idle timeout.
    pub idle_timeouts: u64,
    /// Connections closed because a write did not progress in time.
    pub write_timeouts: u64,
    /// Body bytes sent with `sendfile`.
    pub sendfile_bytes: u64,
    /// Access-log lines dropped because the writer fell behind.
    pub log_dropped: u64,
    /// The page cache's counters.
    pub cache: CacheStats,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) head_timeouts: AtomicU64,
    pub(crate) idle_timeouts: AtomicU64,
    pub(crate) write_timeouts: AtomicU64,
    pub(crate) sendfile_bytes: AtomicU64,
}

/// Everything the connections of one server share. Build it once with
/// [`HttpState::new`] and hand an `Arc` of it to every connection.
pub struct HttpState {
    pub(crate) cfg: HttpConfig,
    pub(crate) root: Root,
    pub(crate) cache: PageCache,
    pub(crate) fresh: FreshIndex,
    pub(crate) log: Option<AccessLog>,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("cfg", &self.cfg)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// What the blocking pool found for a request path.
pub(crate) enum Found {
    /// A directory asked for without its slash.
    Redirect(String),
    /// The whole file in memory (cached, or small enough to read).
    Bytes {
        meta: FileMeta,
        content_type: &'static str,
        bytes: Arc<[u8]>,
    },
    /// An open file to `sendfile` from.
    File {
        file: File,
        meta: FileMeta,
        content_type: &'static str,
    },
}

impl HttpState {
    /// Canonicalises the root (it must be a directory), sizes the cache and
    /// opens the access log.
    pub fn new(cfg: HttpConfig) -> io::Result<Arc<HttpState>> {
        let root = Root::new(&cfg.root).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("document root {}: {e}", cfg.root.display()),
            )
        })?;
        let log = match &cfg.access_log {
            Some(p) => Some(AccessLog::open(p)?),
            None => None,
        };
        Ok(Arc::new(HttpState {
            cache: PageCache::new(cfg.cache_bytes, cfg.cache_max_file),
            fresh: FreshIndex::new(cfg.revalidate),
            root,
            log,
            counters: Counters::default(),
            cfg,
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// The canonical root.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The counters now.
    pub fn stats(&self) -> HttpStats {
        let c = &self.counters;
        HttpStats {
            requests: c.requests.load(Relaxed),
            head_timeouts: c.head_timeouts.load(Relaxed),
            idle_timeouts: c.idle_timeouts.load(Relaxed),
            write_timeouts: c.write_timeouts.load(Relaxed),
            sendfile_bytes: c.sendfile_bytes.load(Relaxed),
            log_dropped: self.log.as_ref().map_or(0, |l| l.dropped.load(Relaxed)),
            cache: self.cache.stats(),
        }
    }

    /// Finds what answers `url_path` (a [`Head::path`](crate::Head::path)).
    /// Blocking (`realpath`, `stat`, `open`, `read`): runs on the blocking
    /// pool.
    pub(crate) fn lookup(&self, url_path: &str) -> Result<Found, HttpError> {
        let (path, meta) = match self.root.resolve(url_path)? {
            Resolved::Redirect { location } => return Ok(Found::Redirect(location)),
            Resolved::File { path, meta } => (path, meta),
        };
        let content_type = mime::for_path(&path);
        if let Some(bytes) = self.cache.get(&path, &meta) {
            self.fresh.record(url_path, &path, meta, content_type);
            return Ok(Found::Bytes {
                meta,
                content_type,
                bytes,
            });
        }
        let (file, meta) = file::open(&path).map_err(|e| HttpError::from_io(&e))?;
        let cacheable = self.cache.admits(meta.size);
        if !cacheable && meta.size >= self.cfg.sendfile_threshold {
            return Ok(Found::File {
                file,
                meta,
                content_type,
            });
        }
        let mut bytes = Vec::with_capacity(meta.size as usize);
        file.take(meta.size)
            .read_to_end(&mut bytes)
            .map_err(|_| HttpError::keep(Status::InternalServerError))?;
        let bytes: Arc<[u8]> = bytes.into();
        if bytes.len() as u64 != meta.size {
            // The file shrank between fstat and read: send what was read,
            // described by its real length, and cache nothing.
            let meta = FileMeta {
                size: bytes.len() as u64,
                ..meta
            };
            return Ok(Found::Bytes {
                meta,
                content_type,
                bytes,
            });
        }
        if cacheable && self.cache.insert(&path, &meta, bytes.clone()) {
            self.fresh.record(url_path, &path, meta, content_type);
        }
        Ok(Found::Bytes {
            meta,
            content_type,
            bytes,
        })
    }
}

/// Starts `builder`'s server with the HTTP handler (and a 503 for
/// connections over the limit).
pub fn serve(builder: ServerBuilder, state: Arc<HttpState>) -> io::Result<Server> {
    builder
        .refusal_message(REFUSAL)
        .serve(move |conn, payload| crate::connection::serve_conn(conn, payload, state.clone()))
}

/// A fresh-index entry: what the last `stat` found for a URL path.
#[derive(Debug, Clone)]
pub(crate) struct Fresh {
    pub(crate) path: Arc<Path>,
    pub(crate) meta: FileMeta,
    pub(crate) content_type: &'static str,
    checked: Instant,
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
}

impl FreshIndex {
    fn new(ttl: Duration) -> FreshIndex {
        FreshIndex {
            shards: (0..FRESH_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            hasher: DefaultHashBuilder::default(),
            ttl,
        }
    }

    fn shard(&self, url: &str) -> MutexGuard<'_, FreshShard> {
        let i = self.hasher.hash_one(url) as usize % FRESH_SHARDS;
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry for `url` if its `stat` is younger than the TTL.
    pub(crate) fn get(&self, url: &str) -> Option<Fresh> {
        if self.ttl.is_zero() {
            return None;
        }
        let shard = self.shard(url);
        let e = shard.get(url)?;
        (e.checked.elapsed() < self.ttl).then(|| e.clone())
    }

    /// Records what a `stat` just found. A full shard first drops its stale
    /// entries, and everything if none was stale.
    fn record(&self, url: &str, path: &Path, meta: FileMeta, content_type: &'static str) {
        if self.ttl.is_zero() {
            return;
        }
        let entry = Fresh {
            path: path.into(),
            meta,
            content_type,
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

/// The access log: a bounded queue to a writer thread, which flushes
/// whenever the queue runs empty. The thread ends when the state is dropped.
pub(crate) struct AccessLog {
    tx: SyncSender<String>,
    pub(crate) dropped: AtomicU64,
}

impl AccessLog {
    fn open(path: &Path) -> io::Result<AccessLog> {
        let sink: Box<dyn io::Write + Send> = if path == Path::new("-") {
            Box::new(io::stderr())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| {
                        io::Error::new(e.kind(), format!("access log {}: {e}", path.display()))
                    })?,
            )
        };
        let (tx, rx) = mpsc::sync_channel::<String>(LOG_QUEUE);
        std::thread::Builder::new()
            .name("duality-http-log".into())
            .spawn(move || {
                let mut w = io::BufWriter::new(sink);
                while let Ok(line) = rx.recv() {
                    let _ = w.write_all(line.as_bytes());
                    while let Ok(line) = rx.try_recv() {
                        let _ = w.write_all(line.as_bytes());
                    }
                    let _ = w.flush();
                }
            })?;
        Ok(AccessLog {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    pub(crate) fn write(&self, line: String) {
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_index_expires_and_stays_bounded() {
        let idx = FreshIndex::new(Duration::from_millis(50));
        let meta = FileMeta {
            size: 1,
            mtime: std::time::UNIX_EPOCH,
            inode: 1,
        };
        idx.record("/a", Path::new("/r/a"), meta, "text/plain");
        assert_eq!(&*idx.get("/a").unwrap().path, Path::new("/r/a"));
        assert!(idx.get("/b").is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(idx.get("/a").is_none());
        for i in 0..FRESH_ENTRIES * 2 {
            idx.record(&format!("/f{i}"), Path::new("/r/f"), meta, "x/y");
        }
        let total: usize = idx.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= FRESH_ENTRIES, "{total}");
    }

    #[test]
    fn zero_ttl_disables_the_index() {
        let idx = FreshIndex::new(Duration::ZERO);
        let meta = FileMeta {
            size: 1,
            mtime: std::time::UNIX_EPOCH,
            inode: 1,
        };
        idx.record("/a", Path::new("/r/a"), meta, "text/plain");
        assert!(idx.get("/a").is_none());
    }
}
