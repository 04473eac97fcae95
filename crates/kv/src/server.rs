//! The cache server: the protocol and store of this crate, served on
//! `duality-models` under any threading model.
//!
//! [`KvProtocol`] is the cache as a `duality_models::Protocol`: the session
//! driver reads, finds requests ([`parse`], or [`parse_binary`] on a
//! connection whose first byte is the binary magic `0x80`: see [`Mode`]),
//! executes them and writes all
//! responses of a read at once; in the hand-off models it moves a whole
//! read's bytes to a payload thread and back, parsed once, there.
//!
//! One exclusion per request: every shard of the store has its own lock, and
//! a request touches its shards only through it (multi-key gets, `stats` and
//! `flush_all` take one shard at a time), so the protocol tells the driver it
//! keeps colors exclusive by itself (`LOCKS_ITSELF`): no color lock is taken
//! on top. A request's color (its key's shard) then only routes work —
//! `amped` keeps a shard on one payload thread, so its lock stays uncontended
//! there — and is not even computed in the inline models.

use crate::budget::{Holdings, LARGE};
use crate::command::{
    execute_part, lru_crawler_start, meta_split_start, meta_value_piece, metadump_classes,
    metadump_piece, resume_get, split_get, value_piece, Cachedump, GetCursor, Part, ValueChanged,
    DUMP_PIECE,
};
use crate::protocol::binary::{write_error, Opcode, Status, REQUEST_MAGIC};
use crate::watch;
use crate::{
    binary_request_shard, execute_binary, execute_binary_error, execute_binary_staged,
    execute_error, execute_staged, parse, parse_binary, parse_binary_head, parse_value_head,
    request_shard, BinError, BinRequest, BinaryHead, ExecContext, Flow, Limits, ParseError,
    Request, ServerStats, Store, StoreConfig, Time, ValueHead, KEY_MAX_LENGTH,
};
use duality_models::session::Reply;
use duality_models::{
    Conn, Driver, DriverConfig, ListenAddr, Parsed, Payload, Protocol, StatsHandle,
    LOOK_AHEAD_EVERY,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Settings of a cache server (memcached's flags).
#[derive(Clone, Debug)]
pub struct KvConfig {
    /// Memory limit for items, bytes (`-m` is in MiB).
    pub memory_limit: usize,
    /// The item size limit (`-I`), as memcached counts an item: see
    /// [`item_size`](crate::protocol::item_size).
    pub max_item_size: usize,
    /// Connection limit (`-c`), reported in `stats`.
    pub max_conns: usize,
    /// Worker threads, reported in `stats` (`-t`).
    pub threads: usize,
    /// The model, reported in `stats settings`.
    pub model: String,
    /// Verbosity (`-v`).
    pub verbosity: u32,
    /// How often the background sweep reclaims expired items.
    pub sweep_interval: Duration,
    /// The `shutdown` command stops the server (`-A`); off, it answers
    /// `ERROR: shutdown not enabled`, as memcached does.
    pub enable_shutdown: bool,
    /// The protocol connections speak (`-B`): `Unknown` detects it on each
    /// connection's first byte (memcached's `auto`); `Text` or `Binary`
    /// binds every connection to one, as memcached's `ascii` / `binary`.
    pub protocol: Mode,
    /// Most requests of one read executed before the responses are written
    /// and other connections get a turn (memcached's `-R`).
    pub requests_per_event: usize,
    /// Close a connection idle this long (memcached's `-o idle_timeout`);
    /// `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Keep item memory in this file so a restart after a graceful
    /// shutdown serves the items again (memcached's `-e`).
    pub memory_file: Option<std::path::PathBuf>,
    /// Bytes connections may hold in large buffers (values being received,
    /// responses being sent, each over [`LARGE`]): see
    /// [`budget`](crate::budget). `None`: the memory limit, at least 64 MiB;
    /// `Some(0)`: no limit (memcached's `-o read_buf_mem_limit=0`).
    pub buffer_limit: Option<usize>,
    /// Live items may be evicted to make room; off (memcached's `-M`), a full
    /// cache refuses stores with `SERVER_ERROR out of memory storing object`
    /// (see [`StoreConfig::evictions`]).
    pub evictions: bool,
    /// `flush_all` answers `CLIENT_ERROR flush_all not allowed` (memcached's
    /// `-F`).
    pub disable_flush_all: bool,
    /// `stats cachedump` and `lru_crawler metadump` are refused
    /// (memcached's `-X`).
    pub disable_dumping: bool,
    /// `watch` answers `CLIENT_ERROR watch commands not allowed`
    /// (memcached's `-W`).
    pub disable_watch: bool,
    /// Lines `stats settings` adds as given, after its own: how the server
    /// listens and flags accepted without effect (memcached's `tcpport`,
    /// `inter`, `growth_factor`, …), which the binary knows and the cache
    /// never reads.
    pub listen_settings: Vec<(&'static str, String)>,
    /// Users a connection must authenticate as first (memcached's `-Y`:
    /// see [`auth`](crate::auth)); `None`: no authentication.
    pub auth: Option<crate::auth::AuthFile>,
    /// Users a binary connection must authenticate as first, with SASL
    /// PLAIN (memcached's `-S`: see [`sasl`](crate::sasl)); `None`: no
    /// SASL (its frames are "Unknown command").
    pub sasl: Option<crate::auth::AuthFile>,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            memory_limit: 64 << 20,
            max_item_size: 1 << 20,
            max_conns: 1024,
            threads: 1,
            model: "sped".into(),
            verbosity: 0,
            sweep_interval: Duration::from_secs(1),
            enable_shutdown: false,
            protocol: Mode::Unknown,
            requests_per_event: DriverConfig::default().max_batch_requests,
            idle_timeout: None,
            memory_file: None,
            buffer_limit: None,
            evictions: true,
            disable_flush_all: false,
            disable_dumping: false,
            disable_watch: false,
            listen_settings: Vec::new(),
            auth: None,
            sasl: None,
        }
    }
}

/// Everything connections share.
pub struct KvState {
    /// The items.
    pub store: Store,
    limits: Limits,
    config: KvConfig,
    started: Instant,
    started_unix: u64,
    server: OnceLock<StatsHandle>,
    verbosity: AtomicU32,
    on_shutdown: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Open connections by descriptor, for `stats conns`.
    conns: Mutex<ConnTable>,
    /// The local addresses connections were accepted on, each once
    /// (`ConnInfo::listen_addr` indexes this; there are as many as the
    /// server has listening addresses and interfaces).
    listen_addrs: Mutex<Vec<ShortAddr>>,
    /// What connections hold in large buffers.
    buffers: Holdings,
    /// Gets answered a piece at a time (the buffer budget had no room for
    /// their whole answer), by connection ([`ConnInfo::who`]): where
    /// `finish` goes on. Kept here, not in the session that every idle
    /// connection holds: only a connection whose `split` flag is set has
    /// an entry.
    splits: Mutex<HashMap<usize, GetCursor>>,
    /// The server's counters (total and rejected connections, bytes read
    /// and written, the loops' long polls) at the last `stats reset`:
    /// `stats` reports what came since, as memcached's reset zeroes them.
    reset_base: Mutex<[u64; 5]>,
    /// Connections closed by `-o idle_timeout` since the last `stats
    /// reset` (memcached's `idle_kicks`).
    idle_kicks: AtomicU64,
    /// Authentication attempts since the last `stats reset`, and those
    /// refused (memcached's `auth_cmds`, `auth_errors`).
    auth_counts: [AtomicU64; 2],
}

/// What `stats conns` shows of one connection (48 bytes with its `Arc`
/// header: every open connection has one), and whether it holds any of the
/// buffer budget.
#[derive(Debug)]
struct ConnInfo {
    /// The cache whose table lists it (cleaned up after it there when its
    /// session drops): here rather than beside it in every connection's
    /// session, whose bytes are held in every connection's future.
    kv: Weak<KvState>,
    /// Its [`Holdings`] flags (what it holds is kept there, by address).
    holds: AtomicU8,
    fd: i32,
    /// The peer's address.
    addr: ShortAddr,
    /// The address it was accepted on: its index in `KvState::listen_addrs`.
    listen_addr: u16,
    /// Unix time of the last request (or of the accept).
    last_cmd: AtomicU32,
    /// `CONN_NEW`, `CONN_READ`, `CONN_BUSY` or `CONN_WATCH`.
    state: AtomicU8,
    /// It has an entry in `KvState::splits`.
    split: AtomicBool,
    /// Why it closes, for `watch connevents` (`CLOSE_*`).
    closing: AtomicU8,
}

/// A connection closes as its client left or asked (`quit`).
const CLOSE_NORMAL: u8 = 0;
/// A request it sent could not be read on from (a line too long, bad
/// binary framing).
const CLOSE_ERROR: u8 = 1;
/// It stayed silent past `-o idle_timeout`.
const CLOSE_IDLE: u8 = 2;

impl ConnInfo {
    /// The connection's name in [`Holdings`]: its entry's address.
    fn who(&self) -> usize {
        self as *const ConnInfo as usize
    }

    /// memcached's `type=conn_new` line, or `conn_close` (`closed`) with
    /// its reason (`normal`, `error` or `idle_timeout`; a read error or a
    /// shutdown reads `normal`: the driver does not say).
    fn log_event(&self, w: &watch::Watch, closed: bool) {
        use std::io::Write as _;
        let (rip, rport, transport) = match &self.addr {
            ShortAddr::Unix => ("unix".to_string(), 0, "local"),
            ShortAddr::V4(ip, port) => (std::net::Ipv4Addr::from(*ip).to_string(), *port, "tcp"),
            ShortAddr::V6(a) => (a.ip().to_string(), a.port(), "tcp"),
        };
        let (kind, reason) = match (closed, self.closing.load(Relaxed)) {
            (false, _) => ("conn_new", ""),
            (true, CLOSE_ERROR) => ("conn_close", " reason=error"),
            (true, CLOSE_IDLE) => ("conn_close", " reason=idle_timeout"),
            (true, _) => ("conn_close", " reason=normal"),
        };
        w.log(watch::CONNEVENTS, |o| {
            let _ = write!(
                o,
                "type={kind} rip={rip} rport={rport} transport={transport}{reason} cfd={}",
                self.fd
            );
        });
    }
}

/// A connection's address in 16 bytes (a `SocketAddr` takes 32): IPv4
/// inline, IPv6 boxed.
#[derive(Debug, PartialEq, Eq)]
enum ShortAddr {
    /// A Unix socket (no address).
    Unix,
    V4([u8; 4], u16),
    V6(Box<std::net::SocketAddrV6>),
}

impl ShortAddr {
    /// `None`: a Unix socket.
    fn new(a: Option<std::net::SocketAddr>) -> ShortAddr {
        match a {
            None => ShortAddr::Unix,
            Some(std::net::SocketAddr::V4(a)) => ShortAddr::V4(a.ip().octets(), a.port()),
            Some(std::net::SocketAddr::V6(a)) => ShortAddr::V6(Box::new(a)),
        }
    }

    /// As memcached's `stats conns` writes it: `tcp:<ip>:<port>` or `unix:`.
    fn show(&self) -> String {
        match self {
            ShortAddr::Unix => "unix:".to_string(),
            ShortAddr::V4(ip, port) => {
                format!("tcp:{}", std::net::SocketAddrV4::new((*ip).into(), *port))
            }
            ShortAddr::V6(a) => format!("tcp:{a}"),
        }
    }
}

/// The loops' long polls since the server started.
fn long_polls(h: &StatsHandle) -> u64 {
    h.loops().iter().map(|(_, l)| l.long_polls()).sum()
}

/// Most bytes of a get answered a piece at a time (see [`split_get`]) made
/// at once: one piece, its value line and `END` stay within [`LARGE`], the
/// output a connection holds without the buffer budget.
const SPLIT_PIECE: usize = LARGE - 1024;

/// No request yet (memcached: `conn_new_cmd`).
const CONN_NEW: u8 = 0;
/// Waiting for the next request (memcached: `conn_read`).
const CONN_READ: u8 = 1;
/// A request is executing (memcached: `conn_parse_cmd`).
const CONN_BUSY: u8 = 2;
/// Streaming `watch` lines (memcached: `conn_watch`).
const CONN_WATCH: u8 = 3;

/// A connection's `stats conns` entry, removed from the table when the
/// connection's session drops (its future ended or was dropped).
struct ConnGuard {
    info: Arc<ConnInfo>,
}

impl KvSession {
    /// Names this connection to `watch` as the one whose requests the
    /// thread runs (again after an await: others ran meanwhile).
    fn name_conn(&self) {
        if let Some(g) = &self.conn {
            watch::set_conn_fd(g.info.fd);
        }
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        // (The cache gone first: nothing is left to clean up.)
        let Some(state) = self.info.kv.upgrade() else {
            return;
        };
        if state.verbosity.load(Relaxed) >= 2 {
            duality_rt::say!("<{} connection closed.", self.info.fd);
        }
        let w = state.store.watch();
        if w.wants(watch::CONNEVENTS) {
            self.info.log_event(w, true);
        }
        state.buffers.release_all(self.info.who(), &self.info.holds);
        if self.info.split.load(Relaxed) {
            state.take_split(&self.info);
        }
        let mut conns = state.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.remove(&self.info);
    }
}

/// Open connections' `stats conns` entries, indexed by descriptor: a slot of
/// 8 bytes per descriptor number (they are dense: the kernel hands out the
/// lowest free one), where a B-tree map took about 20 per connection in its
/// half-full nodes.
#[derive(Default)]
struct ConnTable {
    slots: Vec<Option<Arc<ConnInfo>>>,
}

impl ConnTable {
    /// Lists `info` under its descriptor (a descriptor closed and reused
    /// names the newer connection).
    fn insert(&mut self, info: Arc<ConnInfo>) {
        let Ok(i) = usize::try_from(info.fd) else {
            return;
        };
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(info);
    }

    /// Unlists `info` unless its descriptor already names a newer
    /// connection. Trailing free slots go, and the storage with them once it
    /// is mostly free (a burst of connections that closed).
    fn remove(&mut self, info: &Arc<ConnInfo>) {
        let Some(slot) = usize::try_from(info.fd)
            .ok()
            .and_then(|i| self.slots.get_mut(i))
        else {
            return;
        };
        if !slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, info)) {
            return;
        }
        *slot = None;
        while self.slots.last().is_some_and(Option::is_none) {
            self.slots.pop();
        }
        if self.slots.capacity() > 4 * self.slots.len().max(64) {
            self.slots.shrink_to(2 * self.slots.len());
        }
    }

    /// The open connections, by descriptor.
    fn values(&self) -> impl Iterator<Item = &Arc<ConnInfo>> {
        self.slots.iter().flatten()
    }
}

impl KvState {
    /// Keeps where the split get of `info`'s connection goes on.
    fn put_split(&self, info: &ConnInfo, at: GetCursor) {
        let mut splits = self.splits.lock().unwrap_or_else(|e| e.into_inner());
        splits.insert(info.who(), at);
        info.split.store(true, Relaxed);
    }

    /// Takes the split get of `info`'s connection, if it has one.
    fn take_split(&self, info: &ConnInfo) -> Option<GetCursor> {
        if !info.split.swap(false, Relaxed) {
            return None;
        }
        let mut splits = self.splits.lock().unwrap_or_else(|e| e.into_inner());
        splits.remove(&info.who())
    }
}

impl KvState {
    /// The index of local address `a` in `listen_addrs`, added if new
    /// (`u16::MAX`, which names none, once 65,535 are known).
    fn listen_addr(&self, a: ShortAddr) -> u16 {
        let mut known = self.listen_addrs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = known.iter().position(|k| *k == a) {
            return i as u16;
        }
        if known.len() >= usize::from(u16::MAX) {
            return u16::MAX;
        }
        known.push(a);
        (known.len() - 1) as u16
    }

    /// Builds the store for `config`. Fails if the limits cannot work together.
    pub fn new(config: KvConfig) -> std::io::Result<Arc<KvState>> {
        if config.max_item_size < 1024 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "item size limit (-I) must be at least 1 KiB",
            ));
        }
        if config.max_item_size > config.memory_limit / 2 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "item size limit (-I {}) must be at most half the memory limit (-m {} MiB)",
                    config.max_item_size,
                    config.memory_limit >> 20
                ),
            ));
        }
        let mut sc = StoreConfig::new(config.memory_limit);
        sc.evictions = config.evictions;
        // Each shard must hold at least one largest item.
        while sc.shards > 1 && config.memory_limit / sc.shards < 2 * config.max_item_size {
            sc.shards /= 2;
        }
        let limits = Limits {
            max_item_size: config.max_item_size,
            ..Limits::default()
        };
        let store = match &config.memory_file {
            Some(path) => {
                let now = unix_now().max(1) as Time;
                let (store, line) = Store::with_memory_file(sc, config.max_item_size, path, now)
                    .map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("memory file {}: {e}", path.display()),
                        )
                    })?;
                duality_rt::say!("duality kv: {line}");
                store
            }
            None => Store::new(sc),
        };
        let buffer_limit = config
            .buffer_limit
            .unwrap_or(config.memory_limit.max(64 << 20));
        // A warm restart goes on from the first server's start, as
        // memcached's `uptime` does (its downtime included).
        let started_unix = store.started().map_or_else(unix_now, u64::from);
        let up = Duration::from_secs(unix_now().saturating_sub(started_unix));
        let started = Instant::now().checked_sub(up).unwrap_or_else(Instant::now);
        Ok(Arc::new(KvState {
            store: store.with_item_size_max(config.max_item_size),
            limits,
            verbosity: AtomicU32::new(config.verbosity),
            config,
            started,
            started_unix,
            server: OnceLock::new(),
            on_shutdown: OnceLock::new(),
            conns: Mutex::new(ConnTable::default()),
            listen_addrs: Mutex::new(Vec::new()),
            buffers: Holdings::new(buffer_limit),
            splits: Mutex::new(HashMap::new()),
            reset_base: Mutex::new([0; 5]),
            idle_kicks: AtomicU64::new(0),
            auth_counts: Default::default(),
        }))
    }

    /// The smallest share of the memory limit a shard may get: one largest
    /// item (`-I`, the longest key and the per-item overhead); the store adds
    /// the segments a shard keeps beside it.
    fn min_shard_bytes(&self) -> usize {
        self.config.max_item_size + crate::KEY_MAX_LENGTH + crate::ITEM_OVERHEAD
    }

    /// Applies `cache_memlimit`: the store's limit becomes `mib` MiB (no less
    /// than one largest item per shard) and is lowered at once, evicting
    /// from the LRU tails. Returns the limit applied, in bytes.
    pub fn set_memory_limit(&self, mib: u32) -> usize {
        let want = (mib as usize).saturating_mul(1 << 20);
        let now = unix_now().max(1) as Time;
        let applied = self.store.set_max_bytes(want, self.min_shard_bytes(), now);
        if applied != want {
            let why = if self.config.memory_file.is_some() && want > self.config.memory_limit {
                "the memory file (-e) was made for the starting limit (-m), which cannot grow"
                    .to_string()
            } else if self.config.evictions {
                format!(
                    "the least that leaves each of {} shards room for one largest item (-I {})",
                    self.store.shard_count(),
                    self.config.max_item_size
                )
            } else {
                "what live items hold, or the least per shard for one largest item: \
                 with evictions off (-M) nothing live is dropped"
                    .to_string()
            };
            duality_rt::say!("duality kv: cache_memlimit {mib}: applied {applied} bytes, {why}");
        }
        applied
    }

    /// Lets `stats` report the server's connections and threads.
    pub fn attach(&self, stats: StatsHandle) {
        let _ = self.server.set(stats);
    }

    /// The server's and the store's numbers in Prometheus' text exposition
    /// format (`duality kv --metrics-listen`): those of every server on the
    /// models ([`duality_models::metrics::server_metrics`]) and the store's
    /// memcached counters as `duality_kv_*`.
    pub fn prometheus(&self) -> String {
        let mut e = duality_models::metrics::Exposition::new();
        if let Some(h) = self.server.get() {
            duality_models::metrics::server_metrics(h, &mut e);
        }
        let s = self.store.stats();
        for (name, help, v) in [
            ("cmd_get", "Retrieval requests, one per key.", s.cmd_get),
            ("cmd_set", "Storage requests.", s.cmd_set),
            ("get_hits", "Retrievals that found the key.", s.get_hits),
            (
                "get_misses",
                "Retrievals that did not find the key.",
                s.get_misses,
            ),
            ("evictions", "Live items removed to make room.", s.evictions),
            (
                "get_expired",
                "Retrievals that found the key expired.",
                s.get_expired,
            ),
            (
                "get_flushed",
                "Retrievals that found the key flushed.",
                s.get_flushed,
            ),
            ("cmd_touch", "Touch requests, one per key.", s.cmd_touch),
            ("touch_hits", "Touches that found the key.", s.touch_hits),
            ("touch_misses", "Touches of a missing key.", s.touch_misses),
            ("cmd_flush", "flush_all requests.", s.cmd_flush),
            (
                "delete_hits",
                "Deletions that removed an item.",
                s.delete_hits,
            ),
            (
                "delete_misses",
                "Deletions of a missing key.",
                s.delete_misses,
            ),
            ("incr_hits", "Successful incr.", s.incr_hits),
            ("incr_misses", "incr of a missing key.", s.incr_misses),
            ("decr_hits", "Successful decr.", s.decr_hits),
            ("decr_misses", "decr of a missing key.", s.decr_misses),
            ("cas_hits", "cas that matched and stored.", s.cas_hits),
            ("cas_misses", "cas of a missing key.", s.cas_misses),
            (
                "cas_badval",
                "cas that found another CAS unique.",
                s.cas_badval,
            ),
            (
                "items_stored",
                "Items stored (stats' total_items).",
                s.total_items,
            ),
            (
                "reclaimed",
                "Expired or flushed items whose memory was reused.",
                s.reclaimed,
            ),
            (
                "expired_unfetched",
                "Expired items reclaimed that were never fetched.",
                s.expired_unfetched,
            ),
            (
                "evicted_unfetched",
                "Evicted items that were never fetched.",
                s.evicted_unfetched,
            ),
            (
                "store_too_large",
                "Storage requests refused: value over the item size limit.",
                s.store_too_large,
            ),
            (
                "store_no_memory",
                "Storage requests refused: no room for the item.",
                s.store_no_memory,
            ),
            (
                "auth",
                "Authentications decided, -Y or -S (stats' auth_cmds).",
                self.auth_counts[0].load(Relaxed),
            ),
            (
                "auth_errors",
                "Authentications refused (stats' auth_errors): a run of them is someone guessing.",
                self.auth_counts[1].load(Relaxed),
            ),
        ] {
            e.counter(&format!("duality_kv_{name}_total"), help, v);
        }
        e.gauge("duality_kv_items", "Items stored now.", s.curr_items as f64);
        e.gauge(
            "duality_kv_bytes",
            "Bytes charged for the items stored now.",
            s.bytes as f64,
        );
        e.gauge(
            "duality_kv_limit_bytes",
            "The memory limit for items (-m).",
            s.limit_maxbytes as f64,
        );
        e.finish()
    }

    /// `stats` lines of the per-request metrics (merged over the loops) and
    /// the loops' long polls, in microseconds.
    fn write_request_stats(&self, out: &mut Vec<u8>) {
        let Some(h) = self.server.get() else { return };
        let m = h.request_metrics();
        let us = |ns: u64| ns / 1_000;
        crate::write_stat(out, "duality_requests", m.ttfb.count());
        for (name, l) in [
            ("ttfb", &m.ttfb),
            ("loop_hold", &m.loop_hold),
            ("accept_latency", &m.accept_latency),
        ] {
            for (q, label) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p999")] {
                crate::write_stat(
                    out,
                    &format!("duality_{name}_{label}_us"),
                    us(l.quantile_ns(q)),
                );
            }
            crate::write_stat(out, &format!("duality_{name}_max_us"), us(l.max_ns()));
        }
        crate::write_stat(out, "duality_accepts", m.accept_latency.count());
        let base = self.reset_base.lock().unwrap_or_else(|e| e.into_inner())[4];
        let long = long_polls(h).saturating_sub(base);
        crate::write_stat(out, "duality_long_polls", long);
    }

    /// What the `shutdown` command does when enabled
    /// ([`KvConfig::enable_shutdown`]): the binary makes it stop the server
    /// as SIGTERM does. Only the first call counts.
    pub fn on_shutdown(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_shutdown.set(Box::new(f));
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            state: self,
            now: unix_now().max(1) as Time,
        }
    }

    /// `stats conns`, by descriptor as memcached numbers them: a listening
    /// socket's `<fd>:addr`, `:state` (`conn_listening`) and
    /// `:secs_since_last_cmd` (since the server started, as memcached's), and
    /// `<fd>:addr`, `:listen_addr`, `:state`, `:secs_since_last_cmd` per open
    /// connection. A connection's `state` is `conn_parse_cmd` while a request
    /// of the connection executes (the asking one's), `conn_read` between
    /// requests, `conn_new_cmd` before the first, `conn_watch` while it
    /// streams `watch` lines (memcached's words for these states).
    fn write_conns(&self, now: Time, out: &mut Vec<u8>) {
        // Every line of a descriptor, listeners and connections in fd order.
        let mut lines: BTreeMap<i32, Vec<(&str, String)>> = BTreeMap::new();
        let listeners = self.server.get().map(|h| h.listeners()).unwrap_or(&[]);
        let up = now.saturating_sub(self.started_unix as Time);
        for l in listeners {
            let addr = match &l.addr {
                ListenAddr::Tcp(a) => format!("tcp:{a}"),
                ListenAddr::Unix(p) => format!("unix:{}", p.display()),
            };
            lines.insert(
                l.fd,
                vec![
                    ("addr", addr),
                    ("state", "conn_listening".into()),
                    ("secs_since_last_cmd", up.to_string()),
                ],
            );
        }
        // A Unix socket connection has no local address of its own: it came
        // in on the Unix listener (`-s`: there is one), named as memcached
        // names it.
        let unix_listener = listeners.iter().find_map(|l| match &l.addr {
            ListenAddr::Unix(p) => Some(format!("unix:{}", p.display())),
            ListenAddr::Tcp(_) => None,
        });
        // Lock order: listen_addrs, then conns (a new connection takes them
        // one after the other).
        let listen = self.listen_addrs.lock().unwrap_or_else(|e| e.into_inner());
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for c in conns.values() {
            let state = match c.state.load(Relaxed) {
                CONN_NEW => "conn_new_cmd",
                CONN_READ => "conn_read",
                CONN_WATCH => "conn_watch",
                _ => "conn_parse_cmd",
            };
            let idle = now.saturating_sub(c.last_cmd.load(Relaxed));
            lines.insert(
                c.fd,
                vec![
                    ("addr", c.addr.show()),
                    (
                        "listen_addr",
                        match listen.get(usize::from(c.listen_addr)) {
                            Some(ShortAddr::Unix) => {
                                unix_listener.clone().unwrap_or_else(|| "unix:".into())
                            }
                            Some(a) => a.show(),
                            None => "tcp:?".into(),
                        },
                    ),
                    ("state", state.into()),
                    ("secs_since_last_cmd", idle.to_string()),
                ],
            );
        }
        drop(conns);
        drop(listen);
        for (fd, fields) in lines {
            for (name, value) in fields {
                crate::write_stat(out, &format!("{fd}:{name}"), value);
            }
        }
    }
}

/// How far a line without its end has been searched (saturating: see
/// `KvSession::no_eol`).
fn searched(input: &[u8]) -> u32 {
    u32::try_from(input.len()).unwrap_or(u32::MAX)
}

/// The second, from the kernel's coarse clock: every request is stamped
/// with it, and a precise clock read was 5% of a pipelined get's CPU.
fn unix_now() -> u64 {
    duality_rt::time::unix_seconds_coarse()
}

/// The execution context of one read's worth of requests.
struct Ctx<'a> {
    state: &'a KvState,
    now: Time,
}

impl ExecContext for Ctx<'_> {
    fn now(&self) -> Time {
        self.now
    }

    fn started(&self) -> Time {
        self.state.started_unix as Time
    }

    fn server_stats(&self) -> ServerStats {
        let s = self.state;
        let (user, system) = duality_rt::stats::process_cpu_time();
        let (curr, total) = s
            .server
            .get()
            .map(|h| {
                let (curr, total) = h.connections();
                (curr as u64, total)
            })
            .unwrap_or((0, 0));
        let (bytes_read, bytes_written) = s.server.get().map(|h| h.bytes()).unwrap_or((0, 0));
        let rejected = s.server.get().map_or(0, |h| h.rejected());
        let conn_yields = s.server.get().map_or(0, |h| h.request_yields());
        let base = *s.reset_base.lock().unwrap_or_else(|e| e.into_inner());
        let since = |v: u64, i: usize| v.saturating_sub(base[i]);
        let (mut total, rejected) = (since(total, 0), since(rejected, 1));
        if base[0] == 0 {
            // Until the first `stats reset` memcached counts its listening
            // sockets among total_connections (its reset zeroes them all);
            // base[0] is 0 only then, the reset's own connection counting.
            // One per address: reuseport's listener per loop is one
            // listening address to a user.
            if let Some(h) = s.server.get() {
                let mut addrs = Vec::new();
                for l in h.listeners() {
                    if !addrs.contains(&&l.addr) {
                        addrs.push(&l.addr);
                    }
                }
                total += addrs.len() as u64;
            }
        }
        let (bytes_read, bytes_written) = (since(bytes_read, 2), since(bytes_written, 3));
        // thread-per-conn serves each connection on a thread of its own.
        let threads = match s.config.threads {
            0 => curr,
            n => n as u64,
        };
        ServerStats {
            pid: std::process::id(),
            uptime: s.started.elapsed().as_secs(),
            rusage_user: user,
            rusage_system: system,
            max_connections: s.config.max_conns as u64,
            curr_connections: curr,
            total_connections: total,
            rejected_connections: rejected,
            bytes_read,
            bytes_written,
            threads,
            conn_yields,
            idle_kicks: s.config.idle_timeout.map(|_| s.idle_kicks.load(Relaxed)),
            auth_cmds: s.auth_counts[0].load(Relaxed),
            auth_errors: s.auth_counts[1].load(Relaxed),
        }
    }

    fn set_verbosity(&self, level: u32) {
        // memcached clamps the command's level to its most verbose, 2.
        self.state.verbosity.store(level.min(2), Relaxed);
    }

    fn shutdown_enabled(&self) -> bool {
        self.state.config.enable_shutdown
    }

    fn flush_all_enabled(&self) -> bool {
        !self.state.config.disable_flush_all
    }

    fn dumping_enabled(&self) -> bool {
        !self.state.config.disable_dumping
    }

    fn shutdown(&self) {
        if let Some(f) = self.state.on_shutdown.get() {
            f();
        }
    }

    fn set_memory_limit(&self, mib: u32) {
        self.state.set_memory_limit(mib);
    }

    fn reset_stats(&self) {
        self.state.idle_kicks.store(0, Relaxed);
        for c in &self.state.auth_counts {
            c.store(0, Relaxed);
        }
        if let Some(h) = self.state.server.get() {
            h.reset_request_metrics();
            let (read, written) = h.bytes();
            *self
                .state
                .reset_base
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = [
                h.connections().1,
                h.rejected(),
                read,
                written,
                long_polls(h),
            ];
        }
    }

    fn extra_stats(&self, group: &str, out: &mut Vec<u8>) -> bool {
        let s = self.state;
        match group {
            "" => {
                s.write_request_stats(out);
                true
            }
            "settings" => {
                crate::write_stat(out, "model", &s.config.model);
                crate::write_stat(
                    out,
                    "sweep_interval_ms",
                    s.config.sweep_interval.as_millis(),
                );
                crate::write_stat(out, "started_unix", s.started_unix);
                // memcached's names for -A and -R.
                let shutdown = if s.config.enable_shutdown {
                    "yes"
                } else {
                    "no"
                };
                crate::write_stat(out, "shutdown_command", shutdown);
                crate::write_stat(out, "reqs_per_event", s.config.requests_per_event);
                crate::write_stat(out, "item_size_max", s.config.max_item_size);
                crate::write_stat(out, "maxconns", s.config.max_conns);
                crate::write_stat(out, "num_threads", s.config.threads);
                let idle = s.config.idle_timeout.map_or(0, |d| d.as_secs());
                crate::write_stat(out, "idle_timeout", idle);
                crate::write_stat(out, "verbosity", s.verbosity.load(Relaxed));
                let binding = match s.config.protocol {
                    Mode::Unknown => "auto-negotiate",
                    Mode::Text => "ascii",
                    Mode::Binary => "binary",
                };
                crate::write_stat(out, "binding_protocol", binding);
                // In bytes, as memcached reports it (0: no limit).
                crate::write_stat(out, "read_buf_mem_limit", s.buffers.budget().limit());
                let file = s.config.memory_file.as_ref();
                let file = file.map_or("(null)".into(), |p| p.display().to_string());
                crate::write_stat(out, "memory_file", file);
                // Over the limit a connection is accepted and refused at
                // once, as memcached's maxconns_fast; one LRU per shard.
                for (name, v) in [
                    ("maxconns_fast", "yes"),
                    ("lru_segmented", "no"),
                    ("track_sizes", "no"),
                    ("ssl_enabled", "no"),
                ] {
                    crate::write_stat(out, name, v);
                }
                let sasl = if s.config.sasl.is_some() { "yes" } else { "no" };
                crate::write_stat(out, "auth_enabled_sasl", sasl);
                // As memcached: the file's path, where there is one.
                let auth = s.config.auth.as_ref().and_then(|a| a.path());
                let auth = auth.map_or("no".into(), |p| p.display().to_string());
                crate::write_stat(out, "auth_enabled_ascii", auth);
                for (name, v) in &s.config.listen_settings {
                    crate::write_stat(out, name, v);
                }
                true
            }
            "conns" => {
                s.write_conns(self.now, out);
                true
            }
            "duality" => {
                if let Some(h) = s.server.get() {
                    let st = h.stats();
                    crate::write_stat(out, "rejected_connections", st.rejected_connections);
                    for (k, v) in st.stat_lines() {
                        crate::write_stat(out, &k, v);
                    }
                }
                true
            }
            _ => false,
        }
    }
}

impl std::fmt::Debug for ConnGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info.fmt(f)
    }
}

/// The cache as a protocol of the session driver, over the shared state.
/// One per server: a connection driven by it is listed in `stats conns`
/// (its session holds the entry); sessions made by `Default` are not, and
/// their large values are buffered whole (they have no driver to call
/// `finish`, which receives one into its item).
pub struct KvProtocol(pub Arc<KvState>);

impl KvProtocol {
    /// The protocol over `state`.
    pub fn new(state: Arc<KvState>) -> KvProtocol {
        KvProtocol(state)
    }
}

/// Which protocol a connection speaks, decided on its first byte as
/// memcached does: `0x80` (the binary request magic) is binary, anything
/// else text, for the rest of the connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// No byte seen yet.
    #[default]
    Unknown,
    /// The text and meta protocols.
    Text,
    /// The binary protocol.
    Binary,
}

impl Mode {
    /// The mode of a connection whose first bytes are `input` (`Unknown`
    /// while it is empty).
    fn detect(input: &[u8]) -> Mode {
        match input.first() {
            None => Mode::Unknown,
            Some(&REQUEST_MAGIC) => Mode::Binary,
            Some(_) => Mode::Text,
        }
    }
}

/// A connection's protocol state: its mode, bytes of a refused value still
/// to discard (they may arrive over several reads, and are never buffered),
/// and how much of a command line still without its end has been searched.
#[derive(Default, Debug)]
pub struct KvSession {
    mode: Mode,
    swallow: usize,
    /// The first `no_eol` bytes of the pending request hold no `\n`: a line
    /// arriving a few bytes at a time is searched once, not once per read
    /// (which would be quadratic in its length). 32 bits (every idle
    /// connection holds a session): a longer line is searched again, which
    /// is only slower.
    no_eol: u32,
    /// Its `stats conns` entry (`None`: not listed).
    conn: Option<ConnGuard>,
    /// It authenticated (only asked where the server has users, `-Y` or
    /// `-S`).
    authenticated: bool,
    /// A SASL PLAIN auth without data was answered "continue" (`-S`).
    sasl_pending: bool,
}

impl KvSession {
    /// The protocol the connection speaks.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

/// One request of either protocol, or a parse error answered like one.
#[derive(Debug)]
pub enum KvRequest<'a> {
    /// A text or meta request.
    Text(Result<Request<'a>, ParseError<'a>>),
    /// A binary request.
    Binary(Result<BinRequest<'a>, BinError<'a>>),
    /// The head of a storage request whose large value is still coming:
    /// `finish` receives it straight into its item.
    Large(LargeHead<'a>),
    /// A request before the connection authenticated (`-Y`), answered.
    Auth(AuthAnswer),
}

/// What an unauthenticated connection's request came to (see
/// [`auth`](crate::auth)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthAnswer {
    /// Refused with this line.
    Refused(&'static [u8]),
    /// A user and password checked: `STORED` if they are the file's.
    Checked(bool),
    /// A line past its bound without an end: closed.
    Close,
    /// A binary answer (`-S`): header with this opcode, status and
    /// opaque, then the body; `close` after it.
    Binary {
        /// The request's opcode byte.
        opcode: u8,
        /// The request's opaque.
        opaque: u32,
        /// The answer's status.
        status: Status,
        /// Its body.
        body: &'static [u8],
        /// Close once it is written.
        close: bool,
    },
}

/// A storage request parsed before its large value (see
/// `KvProtocol::receive_value`).
#[derive(Clone, Copy, Debug)]
pub enum LargeHead<'a> {
    /// A text `set`, `add`, `replace`, `cas` or `ms` line.
    Text(ValueHead<'a>),
    /// A binary `set`, `add` or `replace` (or quiet form): header, extras, key.
    Binary(BinaryHead<'a>),
}

impl LargeHead<'_> {
    /// The key the item is stored under (`buf` holds a decoded one).
    fn key<'k>(&'k self, buf: &'k mut [u8; KEY_MAX_LENGTH]) -> &'k [u8] {
        match self {
            LargeHead::Text(h) => h.key(buf),
            LargeHead::Binary(h) => h.request.key,
        }
    }

    fn vlen(&self) -> usize {
        match self {
            LargeHead::Text(h) => h.vlen(),
            LargeHead::Binary(h) => h.vlen,
        }
    }

    /// The bytes after the value: a text data block's `\r\n`.
    fn trailer(&self) -> usize {
        match self {
            LargeHead::Text(_) => 2,
            LargeHead::Binary(_) => 0,
        }
    }
}

impl Protocol for KvProtocol {
    type Session = KvSession;
    type Request<'a> = KvRequest<'a>;

    const LOCKS_ITSELF: bool = true;

    fn max_request(&self) -> usize {
        // The text bound is the larger: a binary request is at most
        // 24 + 20 + 250 bytes beyond its value.
        let l = &self.0.limits;
        l.max_item_size + l.max_line.max(l.max_get_line) + 2
    }

    fn parse<'a>(&self, s: &mut KvSession, input: &'a [u8]) -> Parsed<Self::Request<'a>> {
        // The driver asks again after the last whole request of a read:
        // nothing there is nothing to parse (what follows would say the same
        // after about 150 instructions a request).
        if input.is_empty() {
            return Parsed::Incomplete(0);
        }
        if s.swallow > 0 {
            let n = s.swallow.min(input.len());
            s.swallow -= n;
            return if n == 0 {
                Parsed::Incomplete(0)
            } else {
                Parsed::Skip(n)
            };
        }
        // memcached's `-Y`: every byte goes through its reader of the
        // authentication `set` until one passes (binary ones too).
        if let (false, Some(users)) = (s.authenticated, &self.0.config.auth) {
            let parsed = self.parse_auth(s, users, input);
            return self.account_input(s, input, parsed);
        }
        if s.mode == Mode::Unknown {
            s.mode = match self.0.config.protocol {
                Mode::Unknown => Mode::detect(input),
                bound => bound,
            };
            if self.0.config.protocol == Mode::Unknown
                && s.mode != Mode::Unknown
                && self.0.verbosity.load(Relaxed) >= 2
            {
                let fd = s.conn.as_ref().map_or(-1, |g| g.info.fd);
                let name = if s.mode == Mode::Binary {
                    "binary"
                } else {
                    "ascii"
                };
                duality_rt::say!("{fd}: Client using the {name} protocol");
            }
        }
        let parsed = match s.mode {
            Mode::Unknown => Parsed::Incomplete(0),
            Mode::Text => self.parse_text(s, input),
            Mode::Binary => self.parse_bin(s, input),
        };
        if let Parsed::Request(_, n) = parsed {
            if self.0.verbosity.load(Relaxed) >= 2 {
                trace_command(s, '<', &input[..n]);
            }
        }
        self.account_input(s, input, parsed)
    }

    fn color(&self, req: &Self::Request<'_>) -> u64 {
        let shard = match req {
            KvRequest::Text(Ok(r)) => request_shard(r, &self.0.store),
            KvRequest::Binary(Ok(r)) => binary_request_shard(r, &self.0.store),
            KvRequest::Large(head) => {
                let mut buf = [0; KEY_MAX_LENGTH];
                Some(self.0.store.shard_of(head.key(&mut buf)))
            }
            KvRequest::Text(Err(_)) | KvRequest::Binary(Err(_)) | KvRequest::Auth(_) => None,
        };
        shard.unwrap_or(0) as u64
    }

    fn look_ahead(&self, s: &KvSession, rest: &[u8]) {
        // A value being discarded is not a request; an unknown protocol is
        // detected by the request itself.
        if s.swallow > 0 || s.mode == Mode::Unknown {
            return;
        }
        let binary = s.mode == Mode::Binary;
        // The keys go to the store together: it probes for them at once.
        let mut keys = [&[][..]; LOOK_AHEAD_EVERY];
        let mut n = 0;
        crate::protocol::keys_ahead(binary, rest, LOOK_AHEAD_EVERY, |key| {
            keys[n] = key;
            n += 1;
        });
        self.0.store.prefetch(keys[..n].iter().copied());
    }

    fn peek_color(&self, s: &KvSession, input: &[u8]) -> Option<u64> {
        if s.swallow > 0 {
            return None;
        }
        let mode = match (s.mode, self.0.config.protocol) {
            (Mode::Unknown, Mode::Unknown) => Mode::detect(input),
            (Mode::Unknown, bound) => bound,
            (m, _) => m,
        };
        let shard = match mode {
            Mode::Unknown => return None,
            Mode::Text => match parse(input, &self.0.limits) {
                Ok((req, _)) => request_shard(&req, &self.0.store),
                Err(_) => return None,
            },
            Mode::Binary => match parse_binary(input, &self.0.limits) {
                Ok((req, _)) => binary_request_shard(&req, &self.0.store),
                Err(_) => return None,
            },
        };
        Some(shard.unwrap_or(0) as u64)
    }

    fn execute(
        &self,
        session: &mut KvSession,
        req: Self::Request<'_>,
        out: &mut duality_models::Output,
    ) -> duality_models::Flow {
        let st = &*self.0;
        let conn = session.conn.as_ref().map(|g| &*g.info);
        let ctx = st.ctx();
        if let Some(c) = conn {
            c.last_cmd.store(ctx.now, Relaxed);
            c.state.store(CONN_BUSY, Relaxed);
            watch::set_conn_fd(c.fd);
        }
        // Lines this request logs go to watchers once it is done, outside
        // the shard's lock.
        let _lines = st.store.watch().batch();
        let before = out.len();
        // Where a refused response's error goes: a binary request's header.
        let binary = match &req {
            KvRequest::Binary(Ok(r)) => Some((r.opcode as u8, r.opaque)),
            _ => None,
        };
        let ending = match req {
            KvRequest::Text(Ok(r)) => {
                let ending = self.text_request(conn, &r, &ctx, out, before);
                // memcached writes its answers out after each text get and
                // `mn`: a line that closes the connection drops only the
                // answers after the last of them.
                if let Request::Get { .. } | Request::GetAndTouch { .. } | Request::MetaNoop = r {
                    out.commit();
                }
                ending
            }
            KvRequest::Text(Err(e)) if e.is_fatal() => {
                // Closed without a word: the answers since the last get or
                // `mn` (see below) are dropped, shared values with them.
                out.truncate(out.committed());
                if let Some(c) = conn {
                    c.closing.store(CLOSE_ERROR, Relaxed);
                }
                Ending::Close
            }
            KvRequest::Text(Err(e)) => Ending::Unaccounted(execute_error(&e, &st.store, &ctx, out)),
            KvRequest::Binary(Ok(r)) => {
                let shared = out.shared_count();
                let flow = execute_binary(&r, &st.store, &ctx, out);
                let get = matches!(
                    r.opcode.loud(),
                    Opcode::Get | Opcode::GetK | Opcode::Gat | Opcode::GatK
                );
                match (get && flow == Flow::Continue, conn) {
                    (true, Some(info)) => self.binary_get_done(info, out, before, shared),
                    _ => None,
                }
                .unwrap_or(Ending::Unaccounted(flow))
            }
            KvRequest::Binary(Err(e)) => {
                let flow = execute_binary_error(&e, &st.store, &ctx, out);
                if let (Flow::Close, Some(c)) = (flow, conn) {
                    c.closing.store(CLOSE_ERROR, Relaxed);
                }
                Ending::Unaccounted(flow)
            }
            // `finish` receives the value, then answers.
            KvRequest::Large(_) => Ending::Finish(RECEIVE),
            KvRequest::Auth(answer) => self.answer_auth(answer, out),
        };
        let flow = match ending {
            // The connection stays busy until `finish` has sent the rest.
            Ending::Finish(progress) => return duality_models::Flow::Finish(progress),
            Ending::Close => return duality_models::Flow::Close,
            Ending::Answered(flow) => flow,
            Ending::Unaccounted(flow) => {
                self.hold_response(conn, out, before, binary);
                flow
            }
        };
        if let Some(c) = conn {
            c.state.store(CONN_READ, Relaxed);
        }
        if st.verbosity.load(Relaxed) >= 2 {
            // A fatal error may have cleared what was before it.
            trace_command(session, '>', out.get(before..).unwrap_or_default());
        }
        match flow {
            Flow::Continue => duality_models::Flow::Continue,
            Flow::Close => duality_models::Flow::Close,
        }
    }

    /// The rest of a multi-key get whose values passed
    /// [`GET_BUFFER`](crate::command::GET_BUFFER): written a buffer at a
    /// time, so the connection never holds more than one such buffer (and
    /// a client that does not read holds the get there).
    async fn finish<'a>(
        &'a self,
        session: &'a mut KvSession,
        request: &'a [u8],
        progress: u32,
        mut reply: Reply<'a>,
    ) -> duality_models::Flow {
        let large = match (progress, session.mode) {
            (RECEIVE, Mode::Binary) => {
                parse_binary_head(request, &self.0.limits).map(LargeHead::Binary)
            }
            (RECEIVE, _) => parse_value_head(request, &self.0.limits).map(LargeHead::Text),
            _ => None,
        };
        session.name_conn();
        let flow = match large {
            Some(head) => self.receive_value(session, head, &mut reply).await,
            None if progress == METADUMP || progress == CACHEDUMP => {
                self.stream_dump(session, request, &mut reply).await
            }
            None if progress & !0xFF == WATCH => {
                if let Some(g) = &session.conn {
                    g.info.state.store(CONN_WATCH, Relaxed);
                }
                self.stream_watch(progress as u8, &mut reply).await
            }
            None => {
                self.finish_rest(session, request, progress, &mut reply)
                    .await
            }
        };
        if let Some(g) = &session.conn {
            g.info.state.store(CONN_READ, Relaxed);
        }
        flow
    }

    fn timed_out(
        &self,
        s: &mut KvSession,
        which: duality_models::Timeout,
        _partial: &[u8],
        _out: &mut duality_models::Output,
    ) {
        // memcached closes an idle connection without a word, too. (The
        // only request deadline here is the idle one: `request_timeout`.)
        use duality_models::Timeout;
        if let Timeout::Idle | Timeout::Request = which {
            self.0.idle_kicks.fetch_add(1, Relaxed);
            if let Some(g) = &s.conn {
                g.info.closing.store(CLOSE_IDLE, Relaxed);
            }
        }
    }

    /// memcached's idle timeout also closes a connection idle in the middle
    /// of a command line or a binary header (its `conn_read`), though not
    /// one receiving a value (`conn_nread`) or dropping a refused one: a
    /// stray byte from a dead client must not keep its slot for ever.
    fn request_timeout(&self, s: &KvSession, pending: &[u8]) -> Option<Duration> {
        let idle = self.0.config.idle_timeout?;
        let in_head = match s.mode {
            _ if s.swallow > 0 => false,
            Mode::Binary => pending.len() < crate::protocol::binary::HEADER_LEN,
            // The first `no_eol` bytes were searched already.
            _ => memchr::memchr(b'\n', pending.get(s.no_eol as usize..).unwrap_or_default())
                .is_none(),
        };
        in_head.then_some(idle)
    }

    /// A closing request (an error the stream cannot go on after, `quit`)
    /// with more input behind it: the answers before it still reach the
    /// client, where a close with unread input would send a reset that
    /// destroys what it has not read yet (memcached loses them so). Bound
    /// by time only (1 s), as nginx's lingering close: a byte bound would
    /// close on a client's pipelined requests while it still reads answers.
    fn linger(&self, _s: &KvSession, unread: bool) -> Option<duality_models::Linger> {
        unread.then(|| duality_models::Linger {
            bytes: usize::MAX,
            ..duality_models::Linger::default()
        })
    }

    fn drained(&self, s: &mut KvSession) {
        if let Some(g) = &s.conn {
            self.0.buffers.release_output(g.info.who(), &g.info.holds);
        }
    }

    fn mid_request(&self, s: &KvSession) -> bool {
        s.swallow > 0
    }

    fn session(&self, conn: &Conn) -> KvSession {
        let info = Arc::new(ConnInfo {
            kv: Arc::downgrade(&self.0),
            fd: conn.as_raw_fd(),
            addr: ShortAddr::new(conn.peer_addr()),
            listen_addr: self.0.listen_addr(ShortAddr::new(conn.local_addr())),
            last_cmd: AtomicU32::new(unix_now() as Time),
            state: AtomicU8::new(CONN_NEW),
            holds: AtomicU8::new(0),
            split: AtomicBool::new(false),
            closing: AtomicU8::new(CLOSE_NORMAL),
        });
        self.0
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(info.clone());
        let w = self.0.store.watch();
        if w.wants(watch::CONNEVENTS) {
            info.log_event(w, false);
        }
        if self.0.verbosity.load(Relaxed) >= 2 {
            // memcached's words, its `.` included.
            let fd = info.fd;
            match self.0.config.protocol {
                Mode::Unknown => duality_rt::say!("<{fd} new auto-negotiating client connection"),
                Mode::Text => duality_rt::say!("<{fd} new ascii client connection."),
                Mode::Binary => duality_rt::say!("<{fd} new binary client connection."),
            }
        }
        KvSession {
            conn: Some(ConnGuard { info }),
            ..KvSession::default()
        }
    }
}

/// The progress of a `Finish` that receives a large value (see
/// `KvProtocol::receive_value`); a get's is the index of a key.
const RECEIVE: u32 = u32::MAX;

/// `finish`'s progress for a `watch` (the kinds in the low byte).
const WATCH: u32 = 0xFFFF_0000;

/// `finish`'s progress for an `lru_crawler metadump`.
const METADUMP: u32 = 0xFFFE_0000;

/// `finish`'s progress for a `stats cachedump`.
const CACHEDUMP: u32 = 0xFFFD_0000;

/// Most bytes of log lines a watcher's connection writes at once.
const WATCH_BATCH: usize = 64 << 10;

/// How long a watcher's connection waits in a read for its client before
/// it looks at the queue again (a blocking socket's read, or one after a
/// readiness that found nothing): lines wait that long at most.
const WATCH_POLL: Duration = Duration::from_millis(50);

/// How a request's answer ends (see `KvProtocol::execute`).
enum Ending {
    /// Whole in the output, accounted against the buffer budget.
    Answered(Flow),
    /// Whole in the output, not yet accounted.
    Unaccounted(Flow),
    /// Its first piece is in the output; `finish` sends the rest.
    Finish(u32),
    Close,
}

impl KvProtocol {
    /// `watch`: refused under `-W`, `ERROR` for a kind memcached does not
    /// know; otherwise the connection becomes a stream of log lines
    /// (`finish`, after the answers before it).
    fn watch_request(&self, args: crate::Tokens<'_>, out: &mut duality_models::Output) -> Ending {
        if self.0.config.disable_watch {
            out.extend_from_slice(b"CLIENT_ERROR watch commands not allowed\r\n");
            return Ending::Answered(Flow::Continue);
        }
        match watch::kinds(args.iter()) {
            Some(kinds) => Ending::Finish(WATCH | u32::from(kinds)),
            None => {
                out.extend_from_slice(b"ERROR\r\n");
                Ending::Answered(Flow::Continue)
            }
        }
    }

    /// A watcher's connection: `OK`, then the log lines of `kinds` as they
    /// come, until the client leaves, its connection fails or the server
    /// stops. What the client sends meanwhile is read and dropped, as
    /// memcached does; lines it is too slow for are skipped (see
    /// [`watch`]), so a watcher that never reads holds a bounded queue.
    async fn stream_watch(&self, kinds: u8, reply: &mut Reply<'_>) -> duality_models::Flow {
        use duality_models::Flow::{Close, Continue};
        use std::future::Future as _;
        use std::task::Poll;
        let mut lines = match self.0.store.watch().add(kinds) {
            Ok(lines) => lines,
            Err(refused) => {
                reply.out().extend_from_slice(refused.answer());
                return Continue;
            }
        };
        reply.out().extend_from_slice(b"OK\r\n");
        // Between requests from here on: a shutdown ends the stream.
        reply.conn().set_mid_request(false);
        enum Woke {
            Line(Option<watch::Line>),
            Readable,
        }
        loop {
            if reply.flush().await.is_err() {
                return Close;
            }
            let woke = {
                let mut readable = std::pin::pin!(reply.conn().readable());
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(line) = lines.poll_recv(cx) {
                        return Poll::Ready(Woke::Line(line));
                    }
                    if readable.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Woke::Readable);
                    }
                    Poll::Pending
                })
                .await
            };
            match woke {
                // The server stops.
                Woke::Line(None) => return Close,
                Woke::Line(Some(first)) => {
                    let out = reply.out();
                    first.write_to(out);
                    while out.len() < WATCH_BATCH {
                        match lines.try_recv() {
                            Ok(line) => line.write_to(out),
                            Err(_) => break,
                        }
                    }
                }
                Woke::Readable => {
                    // On an event loop the read finds at once what made the
                    // socket readable. A blocking socket (`thread-per-conn`)
                    // is readable at once and its read waits on the thread:
                    // for at most WATCH_POLL, so queued lines still go out
                    // and a client that left is let go when no line comes.
                    let mut sink = [0u8; 512];
                    match reply.conn().read_for(&mut sink, Some(WATCH_POLL)).await {
                        // Gone, or the server's shutdown.
                        Ok(0) => return Close,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => return Close,
                    }
                }
            }
        }
    }

    /// Executes a text or meta request. An answer too large for the
    /// buffer budget goes out a piece at a time if it is a get's (memcached
    /// sends items by reference: clients that do not read a large value
    /// must not make everybody else's gets of it fail), else is refused as
    /// out of memory.
    fn text_request(
        &self,
        conn: Option<&ConnInfo>,
        r: &Request<'_>,
        ctx: &Ctx<'_>,
        out: &mut duality_models::Output,
        before: usize,
    ) -> Ending {
        let st = &*self.0;
        if let Request::Watch { args } = r {
            return self.watch_request(*args, out);
        }
        if let Request::Stats { args } = r {
            // A cachedump goes out from `finish`, a piece at a time: it
            // may look at every item.
            if matches!(args.first(), Some(b"cachedump")) && ctx.dumping_enabled() {
                return match Cachedump::start(*args) {
                    Ok(_) => Ending::Finish(CACHEDUMP),
                    Err(e) => {
                        out.extend_from_slice(e);
                        Ending::Unaccounted(Flow::Continue)
                    }
                };
            }
        }
        if let Request::LruCrawler { args } = r {
            // A metadump goes out from `finish`, a piece at a time.
            return match lru_crawler_start(&st.store, ctx.now, *args, ctx.dumping_enabled(), out) {
                Some(_) => Ending::Finish(METADUMP),
                None => Ending::Unaccounted(Flow::Continue),
            };
        }
        // Large values go from the store (see `Answer`): held as their
        // copies would be.
        let shared = out.shared_count();
        let part = execute_part(r, &st.store, ctx, out);
        if self.holds_shared(conn, out, before, shared) {
            return match part {
                Part::Done(flow) => Ending::Answered(flow),
                // The rest of a large multi-key get goes out a piece at a
                // time from `finish`, from key `next` (a line holds far
                // fewer than 2^32 keys).
                Part::More(next) => Ending::Finish(next as u32),
            };
        }
        if let Some(ending) = conn.and_then(|info| self.split_text(info, r, part, ctx, out, before))
        {
            return ending;
        }
        self.refuse_response(out, before, None);
        Ending::Answered(match part {
            Part::Done(flow) => flow,
            Part::More(_) => Flow::Continue,
        })
    }

    /// A get's answer the budget has no room for, cut to its first piece
    /// (the rest left to `finish`); `None`: not a get (refused then).
    fn split_text(
        &self,
        info: &ConnInfo,
        r: &Request<'_>,
        part: Part,
        ctx: &Ctx<'_>,
        out: &mut duality_models::Output,
        before: usize,
    ) -> Option<Ending> {
        let st = &*self.0;
        // A meta get's value is cut from the item it was copied from (a
        // shared one copied in first).
        if let (Part::Done(Flow::Continue), Request::MetaGet { .. }) = (part, r) {
            out.settle_after(before);
            if let Some(ending) = self.meta_split(info, r, ctx.now, out, before) {
                return Some(ending);
            }
        }
        let counted = match part {
            Part::More(next) => next,
            Part::Done(_) => usize::MAX,
        };
        out.truncate(before);
        out.shrink_to(before.max(LARGE));
        let at = GetCursor {
            counted,
            ..GetCursor::default()
        };
        match split_get(r, &st.store, ctx, out, at, SPLIT_PIECE)? {
            Ok(None) => Some(Ending::Answered(Flow::Continue)),
            Ok(Some(at)) => {
                st.put_split(info, at);
                Some(Ending::Finish(0))
            }
            Err(_) => Some(Ending::Close),
        }
    }

    /// Receives the large value of `head` straight into its item (see
    /// [`Store::stage`]; memcached reads a value into its item too) and
    /// stores it: it is neither buffered nor copied, as a smaller one is.
    /// The read-buffer budget is taken as the value arrives, as for a
    /// buffered one; without room there (or for the item), the answer is
    /// memcached's out of memory, and the rest of the value is dropped as
    /// it arrives.
    async fn receive_value(
        &self,
        session: &mut KvSession,
        head: LargeHead<'_>,
        reply: &mut Reply<'_>,
    ) -> duality_models::Flow {
        let st = &*self.0;
        let info = session.conn.as_ref().map(|g| g.info.clone());
        // Takes `n` bytes of the read-buffer budget in all (the first 64 KiB
        // are free, as a buffer's).
        let hold = |n: usize| match &info {
            Some(i) if n > LARGE => st.buffers.hold_input(i.who(), &i.holds, n),
            _ => true,
        };
        let vlen = head.vlen();
        let mut key = [0; KEY_MAX_LENGTH];
        let mut staged = st.store.stage(head.key(&mut key), vlen, hold);
        let mut got = 0;
        let mut gone = false;
        if let Some(staged) = &mut staged {
            let value = staged.value_mut();
            let mut held = 0;
            while got < vlen {
                if got == held {
                    held = vlen.min((got * 4).max(LARGE));
                    if !hold(held) {
                        break;
                    }
                }
                match reply.read(&mut value[got..held]).await {
                    Ok(0) | Err(_) => {
                        gone = true;
                        break;
                    }
                    Ok(n) => got += n,
                }
            }
        }
        if let Some(i) = &info {
            st.buffers.release_input(i.who(), &i.holds);
        }
        if gone {
            return duality_models::Flow::Close;
        }
        let ctx = st.ctx();
        let out = reply.out();
        let before = out.len();
        let flow = match (staged, head) {
            (Some(staged), LargeHead::Binary(head)) if got == vlen => {
                session.name_conn();
                execute_binary_staged(&head, staged, &st.store, ctx.now, out);
                Flow::Continue
            }
            (Some(staged), LargeHead::Text(head)) if got == vlen => {
                let mut end = [0; 2];
                if reply.read_exact(&mut end).await.is_err() {
                    return duality_models::Flow::Close;
                }
                let out = reply.out();
                if &end == b"\r\n" {
                    session.name_conn();
                    execute_staged(&head, staged, &st.store, ctx.now, out);
                    Flow::Continue
                } else {
                    execute_error(&head.bad_data_chunk(), &st.store, &ctx, out)
                }
            }
            (_, head) => {
                // The rest, a text block's `\r\n` with it, goes as it arrives.
                session.swallow = vlen - got + head.trailer();
                match head {
                    LargeHead::Text(h) => execute_error(&h.out_of_memory(), &st.store, &ctx, out),
                    LargeHead::Binary(h) => {
                        execute_binary_error(&h.out_of_memory(), &st.store, &ctx, out)
                    }
                }
            }
        };
        if st.verbosity.load(Relaxed) >= 2 {
            trace_command(session, '>', reply.out().get(before..).unwrap_or_default());
        }
        match flow {
            Flow::Continue => duality_models::Flow::Continue,
            Flow::Close => duality_models::Flow::Close,
        }
    }

    /// `finish`'s work: the rest of a get's answer after its first piece.
    async fn finish_rest(
        &self,
        session: &mut KvSession,
        request: &[u8],
        progress: u32,
        reply: &mut Reply<'_>,
    ) -> duality_models::Flow {
        let st = &*self.0;
        let mut from = progress as usize;
        let split = session.conn.as_ref().and_then(|g| st.take_split(&g.info));
        if session.mode == Mode::Binary {
            // Only a binary get split for the budget comes here: the rest
            // of its value (see `binary_get_done`).
            let (Ok((req, _)), Some(mut at)) = (parse_binary(request, &st.limits), split) else {
                return duality_models::Flow::Close;
            };
            let key = req.key;
            return self
                .write_pieces(session, reply, |st, out| {
                    value_piece(&st.store, st.ctx().now, key, &mut at, SPLIT_PIECE, out)
                })
                .await;
        }
        // The same line `parse` found the get in.
        let Ok((req, _)) = parse(request, &st.limits) else {
            return duality_models::Flow::Close;
        };
        if let (Some(mut at), Request::MetaGet { .. }) = (split, &req) {
            return self
                .write_pieces(session, reply, |st, out| {
                    meta_value_piece(&req, &st.store, st.ctx().now, &mut at, SPLIT_PIECE, out)
                })
                .await;
        }
        if let Some(at) = split {
            return self.finish_split(session, &req, at, reply).await;
        }
        loop {
            if reply.flush().await.is_err() {
                return duality_models::Flow::Close;
            }
            self.drained(session);
            session.name_conn();
            let ctx = st.ctx();
            let more = resume_get(&req, &st.store, &ctx, reply.out(), from);
            // A piece (all of the output: the flush gave back what the
            // last one held) the budget has no room for is dropped, and the
            // rest of the get, from the piece's first key, goes out split.
            let conn = session.conn.as_ref().map(|g| &*g.info);
            if !self.holds_shared(conn, reply.out(), 0, 0) {
                let out = reply.out();
                out.clear();
                out.shrink_to(LARGE);
                let at = GetCursor {
                    key: from,
                    counted: match more {
                        Some(Part::More(next)) => next,
                        _ => usize::MAX,
                    },
                    ..GetCursor::default()
                };
                return self.finish_split(session, &req, at, reply).await;
            }
            match more {
                Some(Part::More(next)) => from = next,
                Some(Part::Done(_)) => return duality_models::Flow::Continue,
                None => return duality_models::Flow::Close,
            }
        }
    }

    /// Accounts a binary get's large answer (`out` from `before` on, and
    /// its value if sent from the store: shared bodies from the `shared`th
    /// on): held against the
    /// budget, or where the budget has no room, cut to its
    /// header and first piece, the rest left to `finish` (as a text get's,
    /// see [`split_get`]). `None`: not large, or not a hit (the caller
    /// accounts for it as for any answer).
    fn binary_get_done(
        &self,
        info: &ConnInfo,
        out: &mut duality_models::Output,
        before: usize,
        shared: usize,
    ) -> Option<Ending> {
        if out.shared_count() > shared {
            // A value sent from the store: held as long as a send holds
            // it, or copied in to be cut.
            if self.holds_shared(Some(info), out, before, shared) {
                return Some(Ending::Answered(Flow::Continue));
            }
            out.settle_after(before);
        }
        let resp = out.get(before..)?;
        // A hit: status 0, then extras (flags), key and value.
        if resp.len() <= LARGE || resp.get(6..8)? != [0, 0] {
            return None;
        }
        if self.holds(Some(info), out, before) {
            return Some(Ending::Answered(Flow::Continue));
        }
        let klen = usize::from(u16::from_be_bytes([resp[2], resp[3]]));
        let value_at = before + 24 + usize::from(resp[4]) + klen;
        let cas = u64::from_be_bytes(resp[16..24].try_into().ok()?);
        let keep = (value_at + SPLIT_PIECE).min(out.len());
        out.truncate(keep);
        out.shrink_to(before.max(LARGE));
        let at = GetCursor {
            offset: keep - value_at,
            cas,
            counted: 1,
            ..GetCursor::default()
        };
        self.0.put_split(info, at);
        Some(Ending::Finish(0))
    }

    /// Cuts a meta get's large answer (`out` from `before` on) to its line
    /// and first piece, the rest of its value left to `finish` (see
    /// [`meta_split_start`]); `None` where it cannot be (refused then).
    fn meta_split(
        &self,
        info: &ConnInfo,
        req: &Request<'_>,
        now: Time,
        out: &mut duality_models::Output,
        before: usize,
    ) -> Option<Ending> {
        let st = &*self.0;
        let (value_at, mut at) = meta_split_start(req, &st.store, now, out.get(before..)?)?;
        let value_at = before + value_at;
        // The value and its line end follow the line.
        let len = out.len().checked_sub(value_at + 2)?;
        at.offset = len.min(SPLIT_PIECE);
        if at.offset == len {
            // Only the line made it large: whole, unaccounted (a few bytes
            // past LARGE).
            return Some(Ending::Answered(Flow::Continue));
        }
        out.truncate(value_at + at.offset);
        out.shrink_to(before.max(LARGE));
        st.put_split(info, at);
        Some(Ending::Finish(0))
    }

    /// The rest of an answer split for the budget, a piece at a time:
    /// `piece` appends the next one (true: it was the last; an error: the
    /// value changed, and half of it cannot be taken back), each written
    /// before the next is made, so the connection holds at most one, and
    /// none of the buffer budget.
    async fn write_pieces(
        &self,
        session: &mut KvSession,
        reply: &mut Reply<'_>,
        mut piece: impl FnMut(&KvState, &mut Vec<u8>) -> Result<bool, ValueChanged> + Send,
    ) -> duality_models::Flow {
        loop {
            if reply.flush().await.is_err() {
                return duality_models::Flow::Close;
            }
            self.drained(session);
            match piece(&self.0, reply.out()) {
                Ok(true) => return duality_models::Flow::Continue,
                // A piece may have looked at many items and written
                // nothing (a dump of a rare class): let the loop serve
                // others before the next.
                Ok(false) => duality_rt::yield_now().await,
                Err(ValueChanged) => return duality_models::Flow::Close,
            }
        }
    }

    /// `lru_crawler metadump` and `stats cachedump`: their lines a piece at
    /// a time, each written before the next is made (a connection holds
    /// one piece, however large the cache; a client that does not read
    /// holds the dump there).
    async fn stream_dump(
        &self,
        session: &mut KvSession,
        request: &[u8],
        reply: &mut Reply<'_>,
    ) -> duality_models::Flow {
        enum Dump {
            Meta(u64, crate::store::ItemCursor),
            Cache(Cachedump),
        }
        let dump = match parse(request, &self.0.limits) {
            Ok((Request::LruCrawler { args }, _)) => {
                metadump_classes(args).map(|set| Dump::Meta(set, Default::default()))
            }
            Ok((Request::Stats { args }, _)) => Cachedump::start(args).ok().map(Dump::Cache),
            _ => None,
        };
        let Some(mut dump) = dump else {
            return duality_models::Flow::Close;
        };
        self.write_pieces(session, reply, |st, out| {
            let now = st.ctx().now;
            let more = match &mut dump {
                Dump::Meta(set, at) => metadump_piece(&st.store, now, *set, at, DUMP_PIECE, out),
                Dump::Cache(d) => d.piece(&st.store, now, DUMP_PIECE, out),
            };
            Ok(!more)
        })
        .await
    }

    /// The rest of a get split for the budget, from `at` (see
    /// [`split_get`]).
    async fn finish_split(
        &self,
        session: &mut KvSession,
        req: &Request<'_>,
        mut at: GetCursor,
        reply: &mut Reply<'_>,
    ) -> duality_models::Flow {
        let fd = session.conn.as_ref().map_or(-1, |g| g.info.fd);
        self.write_pieces(session, reply, |st, out| {
            watch::set_conn_fd(fd);
            match split_get(req, &st.store, &st.ctx(), out, at, SPLIT_PIECE) {
                Some(Ok(Some(next))) => {
                    at = next;
                    Ok(false)
                }
                Some(Ok(None)) => Ok(true),
                Some(Err(e)) => Err(e),
                None => Err(ValueChanged),
            }
        })
        .await
    }

    /// Accounts a large request being received against the buffer budget
    /// (see [`crate::budget`]): one that needs more than [`LARGE`] bytes
    /// buffered asks the driver for room a step at a time as its bytes
    /// arrive (up to [`LARGE`] uncounted, then four times what it has, up to
    /// what it declared), each step taken from the budget before the buffer
    /// grows; one that cannot is refused as memcached refuses a value it
    /// cannot allocate, and its bytes are dropped as they arrive. What it
    /// took is given back once it is parsed whole (or refused), or when the
    /// connection ends. Why steps: a header alone (`set k 0 0 1000000`, then
    /// silence) took its whole value from the budget, so 67 silent clients
    /// sending 2.5 KB made every large store fail, and memory grew by what
    /// was declared rather than received.
    fn account_input<'a>(
        &self,
        s: &mut KvSession,
        input: &'a [u8],
        parsed: Parsed<KvRequest<'a>>,
    ) -> Parsed<KvRequest<'a>> {
        let Some(guard) = &s.conn else {
            return parsed;
        };
        let info = &guard.info;
        match parsed {
            Parsed::Incomplete(need) if need > LARGE => {
                let step = if input.len() < LARGE / 2 {
                    LARGE
                } else {
                    need.min(input.len().saturating_mul(4))
                };
                if step <= LARGE || self.0.buffers.hold_input(info.who(), &info.holds, step) {
                    return Parsed::Incomplete(step);
                }
                // Parsed with no room for any value, the request is refused
                // as too large; that refusal, for lack of memory instead.
                let none = Limits {
                    max_item_size: 0,
                    ..self.0.limits
                };
                let refused = match s.mode {
                    Mode::Binary => match parse_binary(input, &none) {
                        Err(e @ BinError::TooLarge { .. }) => {
                            let e = e.out_of_memory();
                            e.consumed().map(|c| (KvRequest::Binary(Err(e)), c))
                        }
                        _ => None,
                    },
                    _ => match parse(input, &none) {
                        Err(e @ ParseError::TooLarge { .. }) => {
                            let e = e.out_of_memory();
                            e.consumed().map(|c| (KvRequest::Text(Err(e)), c))
                        }
                        _ => None,
                    },
                };
                match refused {
                    Some((req, consumed)) => {
                        let here = consumed.min(input.len());
                        s.swallow = consumed - here;
                        Parsed::Request(req, here)
                    }
                    // Not a storage request (a long get line): as before.
                    None => Parsed::Incomplete(need),
                }
            }
            Parsed::Incomplete(need) => Parsed::Incomplete(need),
            parsed => {
                self.0.buffers.release_input(info.who(), &info.holds);
                parsed
            }
        }
    }

    /// Accounts the response just appended to `out` (from `before` on)
    /// against the buffer budget when it is large; false if the budget has
    /// no room for it (nothing is taken then).
    fn holds(&self, conn: Option<&ConnInfo>, out: &duality_models::Output, before: usize) -> bool {
        self.holds_shared(conn, out, before, out.shared_count())
    }

    /// [`holds`](Self::holds) for a response that shared values from the
    /// store (`out`'s shared bodies from the `shared`th on): each counts
    /// while a send holds it, even if its item goes, but once however many
    /// sends hold it (see [`Holdings`](crate::budget::Holdings)).
    fn holds_shared(
        &self,
        conn: Option<&ConnInfo>,
        out: &duality_models::Output,
        before: usize,
        shared: usize,
    ) -> bool {
        let Some(info) = conn else { return true };
        let copied = out.len().saturating_sub(before);
        let values = || out.shared_bodies(shared);
        if copied + values().map(<[u8]>::len).sum::<usize>() <= LARGE {
            return true;
        }
        self.0
            .buffers
            .hold_output_sharing(info.who(), &info.holds, copied, values())
    }

    /// Accounts the response just appended to `out` (from `before` on)
    /// against the buffer budget when it is large. One the budget has no
    /// room for is replaced by memcached's out-of-memory answer (`binary`:
    /// the request's opcode and opaque), its buffer freed; false then.
    fn hold_response(
        &self,
        conn: Option<&ConnInfo>,
        out: &mut duality_models::Output,
        before: usize,
        binary: Option<(u8, u32)>,
    ) -> bool {
        if self.holds(conn, out, before) {
            return true;
        }
        self.refuse_response(out, before, binary);
        false
    }

    /// Replaces the response appended to `out` from `before` on by
    /// memcached's out-of-memory answer (`binary`: the request's opcode
    /// and opaque), its buffer freed.
    fn refuse_response(
        &self,
        out: &mut duality_models::Output,
        before: usize,
        binary: Option<(u8, u32)>,
    ) {
        // A fatal error clears what the read had answered (`out` shrinks).
        let keep = before.min(out.len());
        out.truncate(keep);
        out.shrink_to(before.max(LARGE));
        match binary {
            Some((opcode, opaque)) => write_error(out, opcode, Status::OutOfMemory, opaque),
            None => out.extend_from_slice(b"SERVER_ERROR out of memory writing get response\r\n"),
        }
    }

    /// An unauthenticated connection's request (memcached's `-Y`): the
    /// session authenticates here, at once, so the requests parsed after
    /// it in the same read are read as any.
    fn parse_auth<'a>(
        &self,
        s: &mut KvSession,
        users: &crate::auth::AuthFile,
        input: &'a [u8],
    ) -> Parsed<KvRequest<'a>> {
        use crate::auth::{step, Answer, Step};
        let (used, swallow, answer) = match step(input) {
            Step::Incomplete(need) => return Parsed::Incomplete(need),
            Step::Close => return Parsed::Request(KvRequest::Auth(AuthAnswer::Close), input.len()),
            Step::Answer {
                used,
                swallow,
                answer,
            } => (used, swallow, answer),
        };
        s.swallow = swallow;
        let answer = match answer {
            Answer::Token { user, password } => {
                let ok = users.check(user, password);
                s.authenticated = ok;
                if ok {
                    // As memcached: the connection speaks text from now on.
                    s.mode = Mode::Text;
                }
                let [cmds, errors] = &self.0.auth_counts;
                cmds.fetch_add(1, Relaxed);
                if !ok {
                    errors.fetch_add(1, Relaxed);
                }
                AuthAnswer::Checked(ok)
            }
            other => AuthAnswer::Refused(other.line()),
        };
        Parsed::Request(KvRequest::Auth(answer), used)
    }

    /// Writes the answer to an unauthenticated connection's request.
    fn answer_auth(&self, answer: AuthAnswer, out: &mut duality_models::Output) -> Ending {
        let line: &[u8] = match answer {
            AuthAnswer::Close => return Ending::Close,
            AuthAnswer::Refused(line) => line,
            AuthAnswer::Checked(true) => b"STORED\r\n",
            AuthAnswer::Checked(false) => b"CLIENT_ERROR authentication failure\r\n",
            AuthAnswer::Binary {
                opcode,
                opaque,
                status,
                body,
                close,
            } => {
                let header = crate::protocol::binary::ResponseHeader {
                    opcode,
                    key_len: 0,
                    extras_len: 0,
                    status,
                    body_len: body.len() as u32,
                    opaque,
                    cas: 0,
                };
                crate::protocol::binary::write_response_header(out, &header);
                out.extend_from_slice(body);
                return Ending::Answered(if close { Flow::Close } else { Flow::Continue });
            }
        };
        out.extend_from_slice(line);
        Ending::Answered(Flow::Continue)
    }

    fn parse_text<'a>(&self, s: &mut KvSession, input: &'a [u8]) -> Parsed<KvRequest<'a>> {
        let no_eol = s.no_eol as usize;
        if no_eol > 0 && input.len() >= no_eol {
            let l = &self.0.limits;
            // Past the ordinary line limit without an end, only a retrieval
            // line is still waiting (the parser refused any other).
            let limit = if no_eol > l.max_line {
                l.max_get_line.max(l.max_line)
            } else {
                l.max_line
            };
            if input.len() <= limit && memchr::memchr(b'\n', &input[no_eol..]).is_none() {
                s.no_eol = searched(input);
                return Parsed::Incomplete(0);
            }
        }
        s.no_eol = 0;
        match parse(input, &self.0.limits) {
            Ok((req, used)) => Parsed::Request(KvRequest::Text(Ok(req)), used),
            Err(ParseError::Incomplete) => {
                let need = incomplete_need(input);
                // (Only the driver's sessions: a peer calling `serve_bytes`
                // alone, with a default session, has no `finish`.)
                if let Some(head) = s.conn.as_ref().and_then(|_| self.large_value(input, need)) {
                    let len = head.line_len();
                    return Parsed::Request(KvRequest::Large(LargeHead::Text(head)), len);
                }
                if need == 0 && memchr::memchr(b'\n', input).is_none() {
                    s.no_eol = searched(input);
                }
                Parsed::Incomplete(need)
            }
            Err(e) => {
                // Answer the error; drop what it covers, the rest as it arrives.
                let consumed = e.consumed().unwrap_or(input.len());
                let here = consumed.min(input.len());
                s.swallow = consumed - here;
                Parsed::Request(KvRequest::Text(Err(e)), here)
            }
        }
    }

    /// The line of a storage request at the front of `input` (needing
    /// `need` bytes in all) whose value is to be received into its item
    /// (see [`receive_value`](Self::receive_value)): one of 64 KiB or more
    /// not all here, of a `set`, `add`, `replace`, `cas` or `ms` (not an
    /// append or prepend: its item holds the old value too).
    fn large_value<'a>(&self, input: &'a [u8], need: usize) -> Option<ValueHead<'a>> {
        // (`need` is the request's whole length: a cheap first look.)
        if !self.0.store.stages(need) {
            return None;
        }
        let head = parse_value_head(input, &self.0.limits)?;
        (!head.edits() && self.0.store.stages(head.vlen())).then_some(head)
    }

    /// [`large_value`](Self::large_value) for a binary request: a `set`,
    /// `add` or `replace` (or quiet form) of 64 KiB or more.
    fn binary_large_value<'a>(&self, input: &'a [u8], need: usize) -> Option<BinaryHead<'a>> {
        if !self.0.store.stages(need) {
            return None;
        }
        let head = parse_binary_head(input, &self.0.limits)?;
        self.0.store.stages(head.vlen).then_some(head)
    }

    fn parse_bin<'a>(&self, s: &mut KvSession, input: &'a [u8]) -> Parsed<KvRequest<'a>> {
        if let Some(parsed) = self.parse_sasl(s, input) {
            return parsed;
        }
        match parse_binary(input, &self.0.limits) {
            Ok((req, used)) => Parsed::Request(KvRequest::Binary(Ok(req)), used),
            Err(BinError::Incomplete { need }) => {
                // (Only the driver's sessions, as for text.)
                let large = s
                    .conn
                    .as_ref()
                    .and_then(|_| self.binary_large_value(input, need));
                match large {
                    Some(head) => {
                        Parsed::Request(KvRequest::Large(LargeHead::Binary(head)), head.head_len)
                    }
                    None => Parsed::Incomplete(need),
                }
            }
            Err(e) => {
                // Fatal errors close after the answer: what they cover does
                // not matter. The rest is dropped as it arrives.
                let consumed = e.consumed().unwrap_or(input.len());
                let here = consumed.min(input.len());
                s.swallow = consumed - here;
                Parsed::Request(KvRequest::Binary(Err(e)), here)
            }
        }
    }
}

impl KvProtocol {
    /// A binary connection's SASL frames, and under `-S` the requests of
    /// one not yet authenticated (see [`sasl`](crate::sasl)); `None`: the
    /// binary parser's. Decided here, in the connection's order, so the
    /// requests after an auth in the same read see its outcome.
    fn parse_sasl<'a>(&self, s: &mut KvSession, input: &'a [u8]) -> Option<Parsed<KvRequest<'a>>> {
        use crate::protocol::binary::HEADER_LEN;
        use crate::sasl::Frame;
        let users = self.0.config.sasl.as_ref();
        let answer = |opcode, opaque, status: Status, close| {
            KvRequest::Auth(AuthAnswer::Binary {
                opcode,
                opaque,
                status,
                body: status.message(),
                close,
            })
        };
        let frame = crate::sasl::parse(input, &self.0.limits);
        let (users, frame) = match (users, frame) {
            (_, Frame::Invalid { opcode, opaque }) => {
                let used = HEADER_LEN.min(input.len());
                let req = answer(opcode, opaque, Status::InvalidArguments, true);
                return Some(Parsed::Request(req, used));
            }
            // Without -S the binary parser answers "Unknown command".
            (None, _) => return None,
            (Some(_), Frame::Other) => {
                // memcached: contradicting lengths first (the binary
                // parser's), then whether the connection may ask.
                if s.authenticated || input.first() != Some(&REQUEST_MAGIC) {
                    return None;
                }
                let h = input.get(..HEADER_LEN)?;
                let key_and_extras =
                    usize::from(u16::from_be_bytes([h[2], h[3]])) + usize::from(h[4]);
                if crate::sasl::allowed_before(h[1])
                    || key_and_extras > u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize
                {
                    return None;
                }
                let opaque = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
                let req = answer(h[1], opaque, Status::AuthError, true);
                return Some(Parsed::Request(req, HEADER_LEN));
            }
            (Some(users), frame) => (users, frame),
        };
        Some(match frame {
            Frame::Incomplete(need) => Parsed::Incomplete(need),
            Frame::Refused {
                opcode,
                opaque,
                status,
                consumed,
            } => {
                let here = consumed.min(input.len());
                s.swallow = consumed - here;
                Parsed::Request(answer(opcode, opaque, status, false), here)
            }
            Frame::Request {
                op,
                opcode,
                opaque,
                used,
            } => {
                let mut state = crate::sasl::State {
                    authenticated: s.authenticated,
                    pending: s.sasl_pending,
                };
                let a = crate::sasl::answer(&mut state, op, users);
                s.authenticated = state.authenticated;
                s.sasl_pending = state.pending;
                if let Some(ok) = a.decided {
                    let [cmds, errors] = &self.0.auth_counts;
                    cmds.fetch_add(1, Relaxed);
                    if !ok {
                        errors.fetch_add(1, Relaxed);
                    }
                }
                let req = KvRequest::Auth(AuthAnswer::Binary {
                    opcode,
                    opaque,
                    status: a.status,
                    body: a.body,
                    close: false,
                });
                Parsed::Request(req, used)
            }
            Frame::Other | Frame::Invalid { .. } => unreachable!("answered above"),
        })
    }
}

/// How many bytes an incomplete request needs in all, if its command line is
/// complete and declares a value (`set k 0 0 <bytes>`): line + value + 2.
/// 0 when unknown (the buffer then doubles as it fills).
fn incomplete_need(input: &[u8]) -> usize {
    let Some(eol) = memchr::memchr(b'\n', input) else {
        return 0;
    };
    let line = &input[..eol];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let len = match words.next() {
        Some(b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas") => words.nth(3),
        Some(b"ms") => words.nth(1),
        _ => None,
    };
    len.and_then(|w| std::str::from_utf8(w).ok())
        .and_then(|w| w.parse::<usize>().ok())
        .map_or(0, |n| eol + 1 + n.saturating_add(2))
}

/// The driver of a cache server over `state`: made once, shared by every
/// connection ([`serve_conn`]).
pub fn driver(state: Arc<KvState>) -> Arc<Driver<KvProtocol>> {
    let config = DriverConfig {
        max_batch_requests: state.config.requests_per_event.max(1),
        idle_timeout: state.config.idle_timeout,
        ..DriverConfig::default()
    };
    Driver::new(KvProtocol(state), config)
}

/// Serves one connection until it closes (or the server shuts down between
/// requests); it is listed in `stats conns` meanwhile.
///
/// A plain function returning the driver's future (not an `async fn`
/// wrapping it), so the connection's future does not hold its arguments twice.
pub fn serve_conn(
    conn: Conn,
    payload: Payload,
    driver: Arc<Driver<KvProtocol>>,
) -> impl std::future::Future<Output = ()> + Send {
    duality_models::drive(conn, payload, driver)
}

/// `-vv` (memcached's): one line per command and per response, `<FD` and
/// `>FD` then the first line of text (at most 200 bytes, escaped) or a
/// binary frame's opcode and length.
fn trace_command(s: &KvSession, dir: char, bytes: &[u8]) {
    let fd = s.conn.as_ref().map_or(-1, |g| g.info.fd);
    if bytes.is_empty() {
        return;
    }
    if s.mode == Mode::Binary {
        let op = bytes.get(1).copied().unwrap_or(0);
        duality_rt::say!("{dir}{fd} binary opcode 0x{op:02x}, {} bytes", bytes.len());
        return;
    }
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let shown = &line[..line.len().min(200)];
    let more = if shown.len() < line.len() { "..." } else { "" };
    duality_rt::say!("{dir}{fd} {}{more}", shown.escape_ascii());
}

/// Reclaims expired items in the background, one shard at a time, each under
/// its shard's color: never more than `batch` items per job, so a sweep never
/// stalls requests for long.
pub async fn sweep_forever(payload: Payload, state: Arc<KvState>) {
    const BATCH: usize = 256;
    loop {
        duality_rt::time::sleep(state.config.sweep_interval).await;
        if let Some(e) = crate::store::memfile::take_no_room() {
            duality_rt::say!(
                "duality kv: memory file: no segment allocated ({e}): the cache holds less than \
                 its memory limit (-m) until its file system has room"
            );
        }
        // `lru_crawler disable` stops it, as it stops memcached's crawler.
        if !state.store.crawler().enabled() {
            continue;
        }
        for shard in 0..state.store.shard_count() {
            let st = state.clone();
            payload
                .call_colored(shard as u64, move || {
                    st.store.sweep_shard(shard, unix_now() as Time, BATCH)
                })
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_addresses_show_as_memcached_writes_them() {
        let show = |a: &str| ShortAddr::new(Some(a.parse().unwrap())).show();
        assert_eq!(show("127.0.0.1:11211"), "tcp:127.0.0.1:11211");
        assert_eq!(show("[::1]:40000"), "tcp:[::1]:40000");
        assert_eq!(show("[fe80::1%2]:7"), "tcp:[fe80::1%2]:7");
        assert_eq!(ShortAddr::new(None).show(), "unix:");
        assert_eq!(std::mem::size_of::<ShortAddr>(), 16);
        // With the Arc's two counters: mimalloc's 56-byte class (its
        // pointer to the cache, 8 bytes, is out of every session).
        assert!(std::mem::size_of::<ConnInfo>() + 16 <= 56);
    }

    /// Every connection, idle ones included, is a task: a 32-byte header
    /// and the driver's future (`duality_rt`'s task tests), in mimalloc's
    /// 192-byte class while the future stays within 160 bytes (it was 184,
    /// in the 224-byte class, until a read's and a write's futures held one
    /// pointer to their buffer, a registration two pointers, and a
    /// session's `stats conns` entry one).
    #[test]
    fn a_connection_task_fits_the_192_byte_class() {
        fn future_of<A, B, C, R>(_: fn(A, B, C) -> R) -> usize {
            std::mem::size_of::<R>()
        }
        let size = future_of(duality_models::drive::<KvProtocol>);
        // Built with debug assertions, mio's sockets carry a word more (a
        // selector id, for its own checks): the class is a release build's.
        let debug_only = if cfg!(debug_assertions) { 8 } else { 0 };
        assert!(
            size + 32 <= 192 + debug_only,
            "the connection's future is {size} bytes"
        );
    }

    /// A new Unix socket connection's entry on descriptor `fd`.
    fn unix_conn(fd: i32) -> Arc<ConnInfo> {
        Arc::new(ConnInfo {
            kv: Weak::new(),
            fd,
            addr: ShortAddr::new(None),
            listen_addr: 0,
            last_cmd: AtomicU32::new(0),
            state: AtomicU8::new(CONN_NEW),
            holds: AtomicU8::new(0),
            split: AtomicBool::new(false),
            closing: AtomicU8::new(CLOSE_NORMAL),
        })
    }

    #[test]
    fn the_conn_table_lists_by_descriptor_and_forgets_closed_ones() {
        let info = unix_conn;
        let fds = |t: &ConnTable| t.values().map(|c| c.fd).collect::<Vec<_>>();
        let mut t = ConnTable::default();
        let (a, b, c) = (info(9), info(5), info(7));
        for i in [&a, &b, &c] {
            t.insert(i.clone());
        }
        assert_eq!(fds(&t), [5, 7, 9]);
        // Descriptor 5 closed and reused: the old connection's guard, dropped
        // late, leaves the new one listed.
        let b2 = info(5);
        t.insert(b2.clone());
        t.remove(&b);
        assert_eq!(fds(&t), [5, 7, 9]);
        assert!(Arc::ptr_eq(t.values().next().unwrap(), &b2));
        t.remove(&a);
        assert_eq!(fds(&t), [5, 7]);
        assert_eq!(t.slots.len(), 8, "trailing free slots dropped");
        t.insert(info(-1));
        assert_eq!(fds(&t), [5, 7], "no descriptor, not listed");
        // A burst that closed gives its storage back.
        let burst: Vec<_> = (10..5000).map(info).collect();
        burst.iter().for_each(|i| t.insert(i.clone()));
        assert_eq!(t.values().count(), 4992);
        burst.iter().for_each(|i| t.remove(i));
        assert_eq!(fds(&t), [5, 7]);
        assert!(t.slots.capacity() <= 4 * 64, "{}", t.slots.capacity());
    }

    /// Feeds `bytes` one more byte at a time, as a client trickling them
    /// would make the driver do, and returns what each parse said.
    fn trickle(bytes: &[u8]) -> Vec<&'static str> {
        let p = KvProtocol::new(KvState::new(KvConfig::default()).unwrap());
        let mut s = KvSession::default();
        (1..=bytes.len())
            .map(|n| match p.parse(&mut s, &bytes[..n]) {
                Parsed::Incomplete(_) => "incomplete",
                Parsed::Request(KvRequest::Text(Ok(_)), _) => "request",
                Parsed::Request(KvRequest::Text(Err(ParseError::LineTooLong)), _) => "too long",
                Parsed::Request(..) => "error",
                Parsed::Skip(_) => "skip",
            })
            .collect()
    }

    /// Which storage lines a connection receives into their items: large
    /// values of the commands that replace one, not appends, not small
    /// values, not a request already whole.
    #[test]
    fn large_values_of_replacing_stores_are_received_into_their_items() {
        let state = KvState::new(KvConfig::default()).unwrap();
        let p = KvProtocol::new(state.clone());
        let info = unix_conn(-1);
        let guard = |mode| KvSession {
            mode,
            conn: Some(ConnGuard { info: info.clone() }),
            ..KvSession::default()
        };
        let (mut s, mut b) = (guard(Mode::Text), guard(Mode::Binary));
        let mut received = |line: &str| match p.parse(&mut s, line.as_bytes()) {
            Parsed::Request(KvRequest::Large(head), n) => {
                assert_eq!(n, line.len(), "{line}");
                let mut buf = [0; KEY_MAX_LENGTH];
                Some(head.key(&mut buf).to_vec())
            }
            Parsed::Incomplete(_) => None,
            _ => panic!("{line}"),
        };
        let big = 100_000;
        for cmd in ["set k 0 0", "add k 0 0", "replace k 0 0", "ms k"] {
            assert_eq!(received(&format!("{cmd} {big}\r\n")), Some(b"k".to_vec()));
        }
        assert_eq!(
            received(&format!("cas k 0 0 {big} 1\r\n")),
            Some(b"k".to_vec())
        );
        let line = format!("ms a2V5 {big} b MR C5 T1\r\n");
        assert_eq!(received(&line), Some(b"key".to_vec()), "decoded key");
        for line in [
            format!("append k 0 0 {big}\r\n"),
            format!("prepend k 0 0 {big}\r\n"),
            format!("ms k {big} MA\r\n"),
            format!("ms k {big} MP N30\r\n"),
            "set k 0 0 1000\r\n".to_string(),
            "ms k 1000\r\n".to_string(),
        ] {
            assert_eq!(received(&line), None, "{line}");
        }
        // Binary: header, extras and key of a set, add or replace.
        let mut binary = |op: Opcode, vlen: usize| {
            let value = vec![0; vlen];
            let extras = match op.loud() {
                Opcode::Append => crate::Extras::None,
                _ => crate::Extras::Store {
                    flags: 0,
                    exptime: 0,
                },
            };
            let mut bytes = Vec::new();
            BinRequest {
                extras,
                key: b"bk",
                value: &value,
                ..BinRequest::new(op)
            }
            .encode(&mut bytes);
            let head = bytes.len() - vlen;
            match p.parse(&mut b, &bytes[..head]) {
                Parsed::Request(KvRequest::Large(LargeHead::Binary(h)), n) => {
                    assert_eq!((n, h.request.key), (head, &b"bk"[..]));
                    true
                }
                Parsed::Incomplete(_) => false,
                _ => panic!("{op:?}"),
            }
        };
        for op in [Opcode::Set, Opcode::AddQ, Opcode::Replace, Opcode::SetQ] {
            assert!(binary(op, big), "{op:?}");
        }
        assert!(!binary(Opcode::Append, big));
        assert!(!binary(Opcode::Set, 1000));
    }

    #[test]
    fn a_trickled_line_is_found_and_limited_as_a_whole_one() {
        let r = trickle(b"get k\r\n");
        assert_eq!(r.last(), Some(&"request"));
        assert!(r[..r.len() - 1].iter().all(|&x| x == "incomplete"));
        // 2048 bytes without an end wait; one more is too long.
        let mut line = b"set k 0 0 1".to_vec();
        line.resize(2049, b' ');
        let r = trickle(&line);
        assert_eq!(r[2047], "incomplete");
        assert_eq!(r[2048], "too long");
        // A retrieval line may grow to its own limit before it is refused.
        let max = Limits::default().max_get_line;
        let mut get = b"get".to_vec();
        while get.len() <= max {
            get.extend_from_slice(b" somekey");
        }
        get.truncate(max + 1);
        let r = trickle(&get);
        assert!(r[..max].iter().all(|&x| x == "incomplete"));
        assert_eq!(r[max], "too long");
        // And ends where its end arrives.
        let mut ok = get[..100_000].to_vec();
        ok.extend_from_slice(b"\r\n");
        assert_eq!(trickle(&ok).last(), Some(&"request"));
    }
}
