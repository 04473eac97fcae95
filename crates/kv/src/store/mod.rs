//! The sharded item store: items in segments, hash tables, eviction under a
//! memory limit that counts everything (CLOCK over segments, approximating
//! LRU), expiry, `flush_all`, CAS uniques and counters.
//!
//! # Shards and colors
//!
//! The store is `N` shards (a power of two). A key's shard is picked from its
//! hash by [`Store::shard_of`]; each shard has its own `std::sync::Mutex`, its own
//! segments and `max_bytes / N` of the memory limit. The server colors payload
//! jobs by shard (`payload.call_colored(store.shard_of(key), job)`), and two
//! jobs of one color never run at the same time — so under that discipline a
//! shard's lock is never contended: taking it is one uncontended atomic
//! exchange, and the lock is there only to make the store safe when used
//! without colors (tests, the default color, multi-key `get`, `stats`).
//!
//! No code path holds two shard locks at once (a multi-key `get` takes each
//! key's shard in turn), so there is no lock order to respect and no deadlock.
//!
//! # Time
//!
//! The store never reads a clock: every operation takes `now`, the current
//! Unix time in seconds (≥ 1), so tests control time. Protocol expiry times
//! are converted by [`expiry`]: 0 = never, 1..=2592000 (30 days) = relative,
//! larger = absolute Unix time, negative = already expired.
//!
//! Expired and flushed items are never returned: every lookup checks them and
//! unlinks a dead item on the spot. [`Store::sweep`] reclaims dead items no one
//! asks for, a bounded number of slots per call, so a background task can run
//! it without stalling requests.
//!
//! # Memory: segments, bounded by construction
//!
//! Items are written into the shard's own segments (see `shard`): fixed-size
//! blocks of about a 64th of the shard (256 B to 1 MiB), each an anonymous
//! mapping; an item too large for one gets a segment of its own size, and
//! so does one larger than half of one, or than a quarter where its whole
//! pages waste less than packing does (counted as pages; not in a memory
//! file, whose slots are segments): items of one such size would otherwise
//! fill one segment each and leave up to half unused. What a
//! shard holds — its segments and its hash table — never exceeds its share of
//! the limit, whatever the mix of sizes, expiries and deletes: fragmentation
//! can only waste space inside segments, never grow the process. What an item
//! costs beyond its key and value, on a 64-bit target:
//!
//! | part | bytes |
//! |---|---|
//! | the header in its segment: CAS, expiry, access time, flags, value length, key length, state bits, flush epoch | 32 |
//! | alignment of the item to 8 bytes | 3.5 on average |
//! | the hash table entry: a `u32` location + 1 control byte, at hashbrown's 7/8 maximum load and ~60% average load | 8 on average |
//! | **total** | **~44** |
//!
//! `duality bench store` measures it at 1M items of the paper's sizes as
//! resident memory growth per item, memcached beside it
//! (`docs/results/store`). Replaced and deleted items leave garbage in their
//! segment until the segment is cleaned (at most a quarter live: its items
//! move to the head) or evicted; a segment with nothing live is freed at
//! once. [`ITEM_OVERHEAD`] is the header: `stats bytes` and the size classes
//! count header + key + value, as memcached counts its item header.
//!
//! With [`StoreConfig::evictions`] off (memcached's `-M`) no live item is
//! ever evicted: dead space is still reclaimed (segments with nothing live
//! freed, segments with dead bytes compacted, expired and flushed items
//! found by a pass over the shard), and a write that finds no room fails
//! with [`WriteError::OutOfMemory`], leaving any old item under its key
//! in place (the command layer drops it for a `set`, as memcached does).

mod block;
pub mod classes;
mod crawler;
mod detail;
pub mod memfile;
mod shard;
mod stats;

pub use block::SharedValue;
pub use classes::{ClassCounter, ClassStats};
pub use crawler::{CrawlerSettings, MAX_CRAWLER_SLEEP};
pub use detail::{PrefixStats, PREFIX_DELIMITER};
pub use stats::{Counter, Stats};

use crate::protocol::KEY_MAX_LENGTH;
use crate::watch::{self as log, Watch};
use block::Block;
use crossbeam_utils::CachePadded;
use duality_rt::sync::SeqPair;
use shard::{NewItem, Shard, ACCESSED, FETCHED, KEY_BINARY};
pub(crate) use shard::{SHARE_MIN, STALE, WIN_SENT};
use stats::{GlobalStats, ShardStats};
use std::hash::BuildHasher;
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

/// Unix time in seconds.
pub type Time = u32;

/// The store's key hasher: seeded, so that a memory file can keep its seed
/// and a restart finds every key in the shard it was written to.
pub(crate) type Hasher = foldhash::fast::FixedState;

/// A seed no client can guess (hash flooding), from the standard library's
/// per-process random keys.
fn random_seed() -> u64 {
    std::hash::RandomState::new().hash_one(0x5eed_u64)
}

/// The largest relative expiry time (30 days); larger values are absolute.
pub const MAX_RELATIVE_EXPTIME: i64 = 60 * 60 * 24 * 30;

/// The bytes an item's header takes beside its key and value, which `stats
/// bytes` and the size classes count (see the module docs for what an item
/// costs in all).
pub const ITEM_OVERHEAD: usize = shard::HEADER;

/// An absolute expiry that is always in the past (for `now` ≥ 1).
const EXPIRED: Time = 1;

/// Converts a protocol expiry time to an absolute one (0 = never).
///
/// 0 stays 0 (never expires); negative values are already expired; values up
/// to [`MAX_RELATIVE_EXPTIME`] are relative to `now`; larger values are
/// absolute Unix times (in the past = already expired).
pub fn expiry(exptime: i64, now: Time) -> Time {
    if exptime == 0 {
        0
    } else if exptime < 0 {
        EXPIRED
    } else if exptime <= MAX_RELATIVE_EXPTIME {
        now.saturating_add(exptime as Time)
    } else if exptime <= i64::from(now) {
        EXPIRED
    } else {
        exptime.min(i64::from(Time::MAX)) as Time
    }
}

/// Where a listing by [`Store::visit_items`] goes on from; the default is
/// the first item, oldest first ([`ItemCursor::newest_first`]: newest
/// first within each shard).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemCursor {
    shard: usize,
    /// A segment's `seq` and a byte offset in it (see `Shard::visit_from`
    /// and `Shard::visit_newest_from`).
    at: (u64, usize),
    /// The shard's last segment when the listing came to it: later ones
    /// are not listed, so a listing ends however fast the cache is written.
    last: u64,
    /// The listing has come to `shard` (`at` and `last` are set).
    begun: bool,
    /// Newest first within each shard (`stats cachedump`'s order).
    newest: bool,
}

impl ItemCursor {
    /// A listing that visits each shard's items newest first, as
    /// [`Store::for_each_item`] with `newest_first` does.
    pub fn newest_first() -> ItemCursor {
        ItemCursor {
            newest: true,
            ..ItemCursor::default()
        }
    }
}

/// What the store holds ([`Store::footprint`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of segment memory (items and the garbage beside them).
    pub segments: usize,
    /// Bytes of the hash tables (memcached's `hash_bytes`).
    pub tables: usize,
    /// Segments the kernel refused to map since start (memcached's
    /// `malloc_fails`).
    pub malloc_fails: u64,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A live item.
    Hit,
    /// No item.
    Miss,
    /// An expired item (now unlinked).
    Expired,
    /// An item invalidated by `flush_all` (now unlinked).
    Flushed,
}

/// Why a write failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// The item is larger than a shard's share of the memory limit, or
    /// (with evictions off, see [`StoreConfig::evictions`]) the shard is
    /// full of live items.
    OutOfMemory,
    /// An append or prepend would make the item larger than the item size
    /// limit ([`Store::with_item_size_max`]).
    TooLarge,
    /// The operation needs an existing item and there is none.
    NotFound,
}

/// How [`Entry::rewrite`] changes an existing value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit<'a> {
    /// Add bytes after the value.
    Append(&'a [u8]),
    /// Add bytes before the value.
    Prepend(&'a [u8]),
    /// Replace the value.
    Replace(&'a [u8]),
}

/// The store's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// The memory limit in bytes (memcached's `-m`, in bytes), split evenly
    /// over the shards.
    pub max_bytes: usize,
    /// The number of shards, rounded up to a power of two. Choose it so that
    /// `max_bytes / shards` is at least the item size limit, or the largest
    /// items cannot be stored.
    pub shards: usize,
    /// Whether a live item may be evicted to make room (the default).
    /// Without evictions (memcached's `-M`, `--disable-evictions`) a write
    /// that finds no room fails with [`WriteError::OutOfMemory`] instead:
    /// only dead space (expired, deleted, replaced and flushed items) is
    /// reclaimed, by freeing segments with nothing live and by compacting
    /// segments with garbage (their live items move to the head, which drops
    /// none). The `evictions` counter then stays 0.
    pub evictions: bool,
}

impl StoreConfig {
    /// A configuration with `max_bytes` and a default shard count: the largest
    /// power of two up to 64 that leaves each shard at least 2 MiB.
    pub fn new(max_bytes: usize) -> StoreConfig {
        let mut shards = 64;
        while shards > 1 && max_bytes / shards < 2 << 20 {
            shards /= 2;
        }
        StoreConfig {
            max_bytes,
            shards,
            evictions: true,
        }
    }
}

/// `flush_all` state, read once per lookup.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlushState {
    /// Items stored in an older epoch were flushed by an immediate `flush_all`.
    epoch: u32,
    /// Items last stored or accessed before this time are flushed (0 = none).
    fired: Time,
    /// A delayed `flush_all` for items accessed before this time (0 =
    /// none); it takes effect a second earlier, as memcached's.
    pending: Time,
}

impl FlushState {
    /// As [`Store`] keeps it: `(epoch, fired << 32 | pending)`.
    fn from_words((epoch, times): (u64, u64)) -> FlushState {
        FlushState {
            epoch: epoch as u32,
            fired: (times >> 32) as Time,
            pending: times as Time,
        }
    }

    fn words(self) -> (u64, u64) {
        let times = u64::from(self.fired) << 32 | u64::from(self.pending);
        (u64::from(self.epoch), times)
    }

    /// Items whose access time is below the returned value are flushed.
    #[inline]
    pub(crate) fn cutoff(self, now: Time) -> Time {
        if self.pending != 0 && now.saturating_add(1) >= self.pending {
            self.fired.max(self.pending)
        } else {
            self.fired
        }
    }
}

#[repr(align(128))]
struct ShardCell {
    shard: Mutex<Shard>,
    stats: ShardStats,
}

/// The sharded item store. `Sync`: share it by reference or `Arc`.
pub struct Store {
    cells: Box<[ShardCell]>,
    mask: usize,
    hasher: Hasher,
    next_cas: AtomicU64,
    /// `(epoch, fired << 32 | pending)` (see [`FlushState`]): read on every
    /// lookup, so read together without a lock. As two atomics, a lookup
    /// between a `flush_all`'s two stores could see the old epoch without
    /// the cut-off that hid items before it, and return them. On a cache
    /// line of its own: `next_cas`, bumped by every store, would otherwise
    /// take the line from every other core's lookups.
    flush: CachePadded<SeqPair>,
    global: GlobalStats,
    max_bytes: AtomicUsize,
    sweep_cursor: AtomicUsize,
    prefix_stats: PrefixStats,
    crawler: CrawlerSettings,
    /// The memory file behind a warm restart, if any.
    file: Option<Mutex<memfile::MemFile>>,
    /// With a memory file: when the server that first served its items
    /// started (Unix seconds; memcached keeps its `process_started`, and
    /// so `uptime`, across a warm restart). 0 without one.
    started: Time,
    /// Appends and prepends may not make an item's
    /// [`item_size`](crate::protocol::item_size) larger.
    item_size_max: usize,
    /// See [`StoreConfig::evictions`].
    evictions: bool,
    /// The clients watching what the store does (`watch`).
    watch: Arc<Watch>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.cells.len())
            .field("max_bytes", &self.max_bytes())
            .field("evictions", &self.evictions)
            .finish_non_exhaustive()
    }
}

/// The shard of a key's hash among `mask + 1`: hashbrown indexes buckets
/// with the low bits and filters with the top 7, so the shard comes from
/// bits 32.. to keep both well spread in a shard.
#[inline]
fn shard_index(hash: u64, mask: usize) -> usize {
    (hash >> 32) as usize & mask
}

/// How many keys one [`Store::prefetch`] hints at most.
const PREFETCH_MAX: usize = 16;

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding the lock leaves the shard consistent (every
    // mutation completes before anything that can panic), so keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Store {
    /// The store with an item size limit (memcached's `-I`): an append or
    /// prepend that would make an item's
    /// [`item_size`](crate::protocol::item_size) larger fails with
    /// [`WriteError::TooLarge`], as memcached refuses it. (Values stored
    /// whole are checked by the parser, before they arrive.) No limit by
    /// default.
    pub fn with_item_size_max(mut self, max: usize) -> Store {
        self.item_size_max = max;
        self
    }

    /// Creates an empty store.
    pub fn new(config: StoreConfig) -> Store {
        Store::with_seed(config, random_seed())
    }

    fn with_seed(config: StoreConfig, seed: u64) -> Store {
        let n = config.shards.clamp(1, 1 << 16).next_power_of_two();
        let per_shard = config.max_bytes / n;
        let hasher = Hasher::with_seed(seed);
        let evictions = config.evictions;
        let watch = Arc::new(Watch::default());
        let cells = (0..n)
            .map(|_| {
                let mut shard = Shard::new(per_shard, hasher);
                shard.evictions = evictions;
                ShardCell {
                    shard: Mutex::new(shard),
                    stats: ShardStats::new(watch.clone()),
                }
            })
            .collect();
        Store {
            cells,
            mask: n - 1,
            hasher,
            next_cas: AtomicU64::new(1),
            flush: CachePadded::new(SeqPair::new((0, 0))),
            global: GlobalStats::new(),
            max_bytes: AtomicUsize::new(config.max_bytes),
            sweep_cursor: AtomicUsize::new(0),
            prefix_stats: PrefixStats::default(),
            crawler: CrawlerSettings::default(),
            file: None,
            started: 0,
            item_size_max: usize::MAX,
            evictions,
            watch,
        }
    }

    /// A store whose item memory lives in the file at `path` (memcached's
    /// `-e`), restored from it when the last process using it with the same
    /// configuration and item size limit shut down gracefully
    /// ([`Store::close`]); empty otherwise. Returns the store (its item size
    /// limit set) and a line saying what happened, for the log.
    pub fn with_memory_file(
        config: StoreConfig,
        item_size_max: usize,
        path: &Path,
        now: Time,
    ) -> io::Result<(Store, String)> {
        let store = match Store::open_file(config.clone(), item_size_max, path, now, None)? {
            Ok(done) => done,
            Err(why) => {
                // Never serve what may be corrupt: start over, empty, in
                // the same file (its mode, its links and its directory's
                // permissions stay as the operator made them).
                let line = format!("memory file {}: {why}: starting empty", path.display());
                let (store, _) = Store::open_file(config, item_size_max, path, now, Some(why))?
                    .map_err(io::Error::other)?;
                (store, line)
            }
        };
        Ok((store.0.with_item_size_max(item_size_max), store.1))
    }

    fn open_file(
        config: StoreConfig,
        item_size_max: usize,
        path: &Path,
        now: Time,
        discard: Option<String>,
    ) -> io::Result<Result<(Store, String), String>> {
        let probe = Store::new(config.clone());
        let n = probe.cells.len();
        let per_shard = probe.max_bytes() / n;
        let seg = lock(&probe.cells[0].shard).seg_size();
        drop(probe);
        let settings = memfile::Settings {
            limit: per_shard * n,
            item_size_max,
            shards: n,
            slots: per_shard / seg,
            seg_size: seg,
        };
        let (file, opened) = memfile::MemFile::open(path, settings, random_seed(), discard)?;
        // Keys go to the shards the file's seed sent them to.
        let mut store = Store::with_seed(config, file.seed());
        for (i, cell) in store.cells.iter_mut().enumerate() {
            let shard = cell.shard.get_mut().unwrap_or_else(|e| e.into_inner());
            *shard = Shard::with_file(per_shard, store.hasher, file.shard(i)?);
            shard.evictions = store.evictions;
        }
        let line = match opened {
            memfile::Opened::Fresh(None) => format!("memory file {}: new", path.display()),
            memfile::Opened::Fresh(Some(why)) => {
                format!("memory file {}: {why}: starting empty", path.display())
            }
            memfile::Opened::Warm {
                epoch,
                next_cas,
                fired,
                pending,
                started,
            } => {
                // Counting never gets there: the rest would wrap to CAS 0.
                if next_cas >= 1 << 62 {
                    return Ok(Err(format!(
                        "its CAS counter ({next_cas}) is out of range: damaged"
                    )));
                }
                store.started = if started > 0 { started } else { now };
                store.next_cas.store(next_cas.max(1), Relaxed);
                store.set_flush(FlushState {
                    epoch,
                    fired,
                    pending,
                });
                let flush = store.flush_state();
                let mask = store.mask;
                if let Err((i, why)) = store.each_shard(|i, cell| {
                    // An item whose key hashes to another shard is damage:
                    // no lookup would reach it.
                    let here = |hash: u64| shard_index(hash, mask) == i;
                    lock(&cell.shard).restore(now, flush, &cell.stats, here)
                }) {
                    return Ok(Err(format!("shard {i}: {why}")));
                }
                // A `flush_all` cut-off ahead of the clock (set back since
                // the shutdown): what it flushed went in the restore; kept,
                // it would hide every item stored until the clock caught up.
                if fired > now {
                    store.set_flush(FlushState {
                        epoch,
                        fired: now,
                        pending,
                    });
                }
                format!(
                    "memory file {}: restored {} items",
                    path.display(),
                    store.stats().curr_items
                )
            }
        };
        if store.started == 0 {
            store.started = now;
        }
        let line = match file.room() {
            // memcached's -e takes a SIGBUS there; this cache evicts, but
            // it cannot hold -m, and each shard gets only what it takes
            // first.
            Some((room, total)) if room < total => format!(
                "{line}; its file system has room for {} of the {} MiB it takes full: \
                 the cache will hold less than its memory limit (-m), and a large item \
                 may be refused (out of memory) where its shard found no room",
                room >> 20,
                total.div_ceil(1 << 20)
            ),
            _ => line,
        };
        store.file = Some(Mutex::new(file));
        Ok(Ok((store, line)))
    }

    /// Makes the memory file (if any) consistent for the next start: every
    /// shard records its segments, then the file is marked clean and synced.
    /// Call it once, at a graceful shutdown (`now`), after requests have
    /// stopped: a byte changed later (an item stored or read) makes the
    /// next start begin empty, as any damage does (the items' checksums).
    pub fn close(&self, now: Time) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        self.each_shard(|_, cell| lock(&cell.shard).persist())
            .map_err(|(_, e)| e)?;
        let f = self.flush_state();
        // A delayed flush that has come is written as the cut-off it made:
        // left pending, a restart with the clock set back before it would
        // serve what it flushed.
        let (fired, pending) = match f.cutoff(now) {
            c if f.pending != 0 && c > f.fired => (c, 0),
            _ => (f.fired, f.pending),
        };
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        file.close_clean(
            f.epoch,
            self.next_cas.load(Relaxed),
            fired,
            pending,
            self.started,
        )
    }

    /// Runs `f` on every shard, on as many threads as there are cores
    /// (a restart and a shutdown read every byte of a memory file's
    /// items: one thread would take seconds per few GiB); the first error
    /// met, with its shard, stops the rest.
    fn each_shard<E: Send>(
        &self,
        f: impl Fn(usize, &ShardCell) -> Result<(), E> + Sync,
    ) -> Result<(), (usize, E)> {
        use std::sync::atomic::AtomicUsize;
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(self.cells.len());
        let next = AtomicUsize::new(0);
        let failed = Mutex::new(None);
        let work = || loop {
            let i = next.fetch_add(1, Relaxed);
            if i >= self.cells.len() {
                break;
            }
            if let Err(e) = f(i, &self.cells[i]) {
                // Nothing after it is started.
                next.store(self.cells.len(), Relaxed);
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert((i, e));
            }
        };
        std::thread::scope(|sc| {
            for _ in 1..threads {
                sc.spawn(work);
            }
            work();
        });
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// With a memory file, when the server that first served its items
    /// started (Unix seconds): kept across warm restarts, as memcached
    /// keeps its `uptime`. `None` without a file.
    pub fn started(&self) -> Option<Time> {
        (self.started > 0).then_some(self.started)
    }

    /// Whether [`stage`](Self::stage) may receive values in place: items
    /// of 64 KiB and more (those a get sends from the store), in a store
    /// without a memory file (whose items are written into its slots).
    pub fn stages(&self, vlen: usize) -> bool {
        self.file.is_none() && vlen >= shard::SHARE_MIN
    }

    /// An item for a value of `vlen` bytes under `key`, made before the
    /// value arrives, so that it is received straight into its place (as
    /// memcached reads a value into its item); stored with
    /// [`Entry::insert_staged`]. None where such items are not made apart
    /// (see [`stages`](Self::stages)), or no memory is left for it.
    ///
    /// A new mapping takes memory only as the value is written. The
    /// shard's spare block (the segment of an item that went, resident) is
    /// reused instead only if `hold` takes its length from the caller's
    /// budget: it leaves the shard's count, and a client that declares a
    /// value and never sends it must not hold resident memory no limit
    /// counts.
    pub fn stage(
        &self,
        key: &[u8],
        vlen: usize,
        hold: impl FnOnce(usize) -> bool,
    ) -> Option<Staged> {
        let cell = &self.cells[self.shard_index(self.hash(key))];
        let spare = lock(&cell.shard).staging(key.len(), vlen)?;
        let block = match spare {
            Ok(block) if hold(block.len()) => block,
            Ok(block) => {
                let len = block.len();
                lock(&cell.shard).give_spare(block);
                Block::new(len)?
            }
            // A new mapping is made outside the shard's lock.
            Err(len) => Block::new(len)?,
        };
        Some(Staged {
            block,
            klen: key.len(),
            vlen,
        })
    }

    /// If the store's memory file is no longer named by its path, what
    /// became of it (see [`memfile::MemFile::moved`]).
    pub fn memory_file_moved(&self) -> Option<&'static str> {
        let f = self.file.as_ref()?;
        f.lock().unwrap_or_else(|e| e.into_inner()).moved()
    }

    /// The memory file's path, if the store has one.
    pub fn memory_file(&self) -> Option<std::path::PathBuf> {
        self.file.as_ref().map(|f| {
            f.lock()
                .unwrap_or_else(|e| e.into_inner())
                .path()
                .to_path_buf()
        })
    }

    /// `stats detail`: per-prefix counts.
    pub fn prefix_stats(&self) -> &PrefixStats {
        &self.prefix_stats
    }

    /// `lru_crawler` settings.
    pub fn crawler(&self) -> &CrawlerSettings {
        &self.crawler
    }

    /// The number of shards (a power of two).
    pub fn shard_count(&self) -> usize {
        self.cells.len()
    }

    /// Whether live items may be evicted ([`StoreConfig::evictions`]).
    pub fn evictions(&self) -> bool {
        self.evictions
    }

    /// The clients watching the store's lookups, stores and evictions
    /// (memcached's `watch`).
    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// Logs a lookup of `key` that found nothing, for commands memcached
    /// looks up twice (a vivifying `ma` adds what its own lookup missed,
    /// and the add looks again): its watch lines show both.
    pub(crate) fn log_miss(&self, key: &[u8]) {
        if self.watch.wants(log::FETCHERS) {
            log_get(&self.watch, key, Lookup::Miss, None);
        }
    }

    /// The memory limit in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes.load(Relaxed)
    }

    /// Changes the memory limit (`cache_memlimit`) to `max_bytes`, but to no
    /// less than `min_per_shard` per shard plus two segments (so that the
    /// largest item still fits a shard beside the head segment and the one
    /// eviction may use), and returns the limit applied. Lowering it evicts at
    /// once: each shard, in turn under its lock, frees segments (cleaning
    /// mostly dead ones first, then evicting the oldest) until what it holds
    /// is within its new share. Evictions count as usual.
    ///
    /// With evictions off ([`StoreConfig::evictions`]) nothing live is
    /// evicted: each shard reclaims its dead space and compacts, and the
    /// limit applied is no lower than what the fullest shard still holds
    /// (plus a segment), so that the memory bound keeps holding.
    pub fn set_max_bytes(&self, max_bytes: usize, min_per_shard: usize, now: Time) -> usize {
        let segs = 2 * lock(&self.cells[0].shard).seg_size();
        let mut per_shard = (max_bytes / self.cells.len()).max(min_per_shard + segs);
        if self.file.is_some() {
            // The memory file was made for the starting limit.
            per_shard = per_shard.min(lock(&self.cells[0].shard).file_capacity());
        }
        let flush = self.flush_state();
        let mut need = per_shard;
        for cell in self.cells.iter() {
            let mut shard = lock(&cell.shard);
            shard.limit = per_shard;
            if !shard.shrink(now, flush, &cell.stats) && !self.evictions {
                // Live items hold more than the new share: keep what they
                // hold (the bound `allocated + table <= limit` stays true).
                let held = shard.allocated() + shard.table_bytes() + shard.seg_size();
                shard.limit = per_shard.max(held);
                need = need.max(shard.limit);
            }
        }
        if need > per_shard {
            for cell in self.cells.iter() {
                let mut shard = lock(&cell.shard);
                shard.limit = shard.limit.max(need);
            }
        }
        let applied = need * self.cells.len();
        self.max_bytes.store(applied, Relaxed);
        applied
    }

    #[inline]
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        shard_index(hash, self.mask)
    }

    /// The shard holding `key`: color the payload job with it.
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.shard_index(self.hash(key))
    }

    /// The next CAS unique (store-wide, starting at 1).
    pub fn next_cas(&self) -> u64 {
        self.next_cas.fetch_add(1, Relaxed)
    }

    fn flush_state(&self) -> FlushState {
        FlushState::from_words(self.flush.read())
    }

    fn set_flush(&self, f: FlushState) {
        self.flush.update(|_| (f.words(), ()));
    }

    /// Locks `key`'s shard and looks the key up (an expired or flushed item is
    /// unlinked on the way, see [`Entry::lookup`]). The lock is held until the
    /// entry is dropped: keep entries short-lived and never hold two.
    ///
    /// # Panics
    ///
    /// If `key` is longer than [`KEY_MAX_LENGTH`] (250) bytes; [`crate::parse`]
    /// never yields such a key.
    #[inline]
    pub fn entry<'s, 'k>(&'s self, key: &'k [u8], now: Time) -> Entry<'s, 'k> {
        self.entry_logged(key, now, true)
    }

    /// A hint that `keys` are about to be looked up (the first 16 of
    /// them): starts loading their items into the CPU's
    /// cache, so that a request naming many keys waits for several memory
    /// reads at once instead of one after another. Takes a shard's lock
    /// only if it is free, and all of them before any probe: a lock is a
    /// full memory barrier on x86, which would make each key's table probe
    /// wait for the one before it. Changes nothing.
    pub fn prefetch<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        let mut hashes = [0u64; PREFETCH_MAX];
        let mut n = 0;
        for key in keys.into_iter().take(PREFETCH_MAX) {
            hashes[n] = self.hash(key);
            n += 1;
        }
        // A one-key get asks with none: no guards to set up and drop.
        if n == 0 {
            return;
        }
        // The shards locked, each once (keys may share one).
        let mut held: [(usize, Option<MutexGuard<'_, Shard>>); PREFETCH_MAX] =
            std::array::from_fn(|_| (usize::MAX, None));
        let mut locked = 0;
        for &hash in &hashes[..n] {
            let i = self.shard_index(hash);
            if held[..locked].iter().all(|(s, _)| *s != i) {
                if let Ok(guard) = self.cells[i].shard.try_lock() {
                    held[locked] = (i, Some(guard));
                    locked += 1;
                }
            }
        }
        for &hash in &hashes[..n] {
            let i = self.shard_index(hash);
            if let Some((_, Some(shard))) = held[..locked].iter().find(|(s, _)| *s == i) {
                shard.prefetch(hash);
            }
        }
    }

    /// [`entry`](Self::entry) for a key the request looked up already (the
    /// next piece of a large value): not a lookup `watch` logs again.
    pub(crate) fn entry_again<'s, 'k>(&'s self, key: &'k [u8], now: Time) -> Entry<'s, 'k> {
        self.entry_logged(key, now, false)
    }

    #[inline]
    fn entry_logged<'s, 'k>(&'s self, key: &'k [u8], now: Time, log: bool) -> Entry<'s, 'k> {
        assert!(
            key.len() <= KEY_MAX_LENGTH,
            "key longer than {KEY_MAX_LENGTH} bytes"
        );
        let hash = self.hash(key);
        let cell = &self.cells[self.shard_index(hash)];
        let mut shard = lock(&cell.shard);
        let flush = self.flush_state();
        let mut idx = None;
        let mut lookup = Lookup::Miss;
        if let Some(i) = shard.find(hash, key) {
            lookup = shard.state(i, now, flush);
            if lookup == Lookup::Hit {
                idx = Some(i);
            } else {
                // Every lookup that finds an item dead counts it, stores and
                // deletes too (memcached's `do_item_get`, which they all
                // use); the next piece of a value looked up already does not.
                if log {
                    cell.stats.bump(match lookup {
                        Lookup::Expired => Counter::GetExpired,
                        _ => Counter::GetFlushed,
                    });
                }
                shard.drop_dead(i, &cell.stats);
            }
        }
        if log && self.watch.wants(log::FETCHERS) {
            let found = idx.map(|i| (shard.class(i), shard.item(i).value.len()));
            log_get(&self.watch, key, lookup, found);
        }
        Entry {
            store: self,
            stats: &cell.stats,
            shard,
            key,
            hash,
            now,
            flush,
            idx,
            lookup,
            removed_class: 0,
        }
    }

    /// Invalidates every item now (`delay` ≤ 0), or, for a later
    /// `at = expiry(delay, now)`, the items stored or accessed before `at`,
    /// from the second before `at` on: memcached's `oldest_live` is `at - 1`,
    /// so `flush_all 1` takes effect at once, on items stored in the rest of
    /// that second too. Flushed items are never returned again; their memory
    /// comes back through eviction or [`Store::sweep`]. A new flush replaces
    /// a pending one, as in memcached; an absolute `at` in the past flushes
    /// nothing (memcached's, for a time before it started). A flush that
    /// takes effect now uses up a CAS unique, as memcached's does.
    pub fn flush_all(&self, delay: i64, now: Time) {
        let at = if delay > 0 { expiry(delay, now) } else { 0 };
        if at == 0 || at <= now.saturating_add(1) {
            self.next_cas();
        }
        // One update (a lookup sees all of it or none), and one flush at a
        // time (each builds on the last).
        self.flush.update(|words| {
            let old = FlushState::from_words(words);
            // What earlier flushes took stays flushed, but not into this
            // second: memcached replaces its cut-off, and what is stored
            // from now on is the new flush's to judge.
            let fired = old.cutoff(now).min(now);
            let new = if at == 0 {
                // Every item stored so far is in an older epoch: no time
                // cut-off is needed, and none may hide what is stored from
                // now on.
                FlushState {
                    epoch: old.epoch.wrapping_add(1),
                    fired: 0,
                    pending: 0,
                }
            } else if at > now {
                FlushState {
                    epoch: old.epoch,
                    fired,
                    pending: at,
                }
            } else {
                FlushState {
                    epoch: old.epoch,
                    fired,
                    pending: 0,
                }
            };
            (new.words(), ())
        });
        self.global.bump(Counter::CmdFlush);
    }

    /// Reclaims expired and flushed items, examining at most `max_items` slots
    /// (across shards, round robin from where the last call stopped), and
    /// compacts the slot arrays by as many slots. Returns the number of items
    /// reclaimed. Each shard is locked only while its slots are examined.
    pub fn sweep(&self, now: Time, max_items: usize) -> usize {
        let start = self.sweep_cursor.fetch_add(1, Relaxed);
        let mut budget = max_items;
        let mut reclaimed = 0;
        for k in 0..self.cells.len() {
            if budget == 0 {
                break;
            }
            let (seen, got) = self.sweep_cell((start + k) & self.mask, now, budget);
            budget -= seen;
            reclaimed += got;
        }
        reclaimed
    }

    /// Like [`Store::sweep`] for one shard, for a job colored with `shard`.
    pub fn sweep_shard(&self, shard: usize, now: Time, max_items: usize) -> usize {
        self.sweep_cell(shard & self.mask, now, max_items).1
    }

    fn sweep_cell(&self, i: usize, now: Time, max: usize) -> (usize, usize) {
        let cell = &self.cells[i];
        let mut shard = lock(&cell.shard);
        let flush = self.flush_state();
        shard.sweep(now, flush, max, u64::MAX, &cell.stats)
    }

    /// `lru_crawler crawl`: examines every item of the classes `classes`
    /// selects (bit `c` for class `c`) and reclaims the expired and flushed
    /// ones, one shard at a time, `batch` slots per lock hold. Returns the
    /// number reclaimed.
    pub fn crawl(&self, now: Time, classes: u64, batch: usize) -> usize {
        let flush = self.flush_state();
        let mut reclaimed = 0;
        for cell in self.cells.iter() {
            let mut left = lock(&cell.shard).written_items();
            while left > 0 {
                let mut shard = lock(&cell.shard);
                let (seen, got) = shard.sweep(now, flush, batch.min(left), classes, &cell.stats);
                reclaimed += got;
                left = left.saturating_sub(seen.max(1));
            }
        }
        reclaimed
    }

    /// Per-class counters summed over the shards, for the classes that have
    /// any (see [`classes`]), with (`ages`) the age of each class's oldest
    /// item, found by walking each shard's segments from the oldest, those
    /// that may hold a class not yet seen (`stats slabs` needs no ages).
    pub fn class_stats(&self, now: Time, ages: bool) -> Vec<ClassStats> {
        let mut sums = vec![[0u64; ClassCounter::COUNT]; classes::CLASSES + 1];
        let mut oldest: Vec<Time> = vec![Time::MAX; classes::CLASSES + 1];
        for cell in self.cells.iter() {
            let shard = lock(&cell.shard);
            let mut row = vec![[0u64; ClassCounter::COUNT]; classes::CLASSES + 1];
            cell.stats.classes.add_into(&mut row);
            if ages {
                let want = row
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r[ClassCounter::Number as usize] != 0)
                    .fold(0u64, |m, (c, _)| m | 1 << c);
                shard.oldest_of_classes(want, |c, t| oldest[c] = oldest[c].min(t));
            }
            drop(shard);
            for (s, r) in sums.iter_mut().zip(&row) {
                for (x, v) in s.iter_mut().zip(r) {
                    *x = x.wrapping_add(*v);
                }
            }
        }
        let ages: Vec<u64> = oldest
            .iter()
            .map(|&t| {
                if t == Time::MAX {
                    0
                } else {
                    now.saturating_sub(t).into()
                }
            })
            .collect();
        classes::snapshot(&sums, &ages)
    }

    /// Calls `f` with every live item and its charge (key + value +
    /// [`ITEM_OVERHEAD`]), shard by shard, each shard's items from the oldest
    /// written (next in line for eviction), or from the newest with
    /// `newest_first`; stops when `f` returns false. Each shard is locked
    /// while its items are visited: keep `f` short.
    pub fn for_each_item(
        &self,
        now: Time,
        newest_first: bool,
        mut f: impl FnMut(&Item<'_>, usize) -> bool,
    ) {
        let flush = self.flush_state();
        for cell in self.cells.iter() {
            let shard = lock(&cell.shard);
            for l in shard.age_order(newest_first) {
                if shard.state(l, now, flush) != Lookup::Hit {
                    continue;
                }
                if !f(&shard.item(l), shard.charge(l)) {
                    return;
                }
            }
        }
    }

    /// Calls `f` with the live items from `cursor` on and their charges,
    /// as [`for_each_item`](Self::for_each_item) orders them (oldest
    /// first, or newest first within each shard for a cursor made by
    /// [`ItemCursor::newest_first`]), until `f` returns false; `cursor`
    /// then says where to go on from. Returns false once every item has
    /// been visited. Only the
    /// shard being visited is locked, so a listing can go out in pieces
    /// between which the store serves on: an item written, read again or
    /// moved meanwhile may be listed twice or not at all (as memcached's
    /// crawler lists a cache in use); the segments a shard opens after the
    /// listing came to it are not listed.
    pub fn visit_items(
        &self,
        now: Time,
        cursor: &mut ItemCursor,
        mut f: impl FnMut(&Item<'_>, usize) -> bool,
    ) -> bool {
        let flush = self.flush_state();
        while let Some(cell) = self.cells.get(cursor.shard) {
            let shard = lock(&cell.shard);
            if !cursor.begun {
                cursor.begun = true;
                cursor.last = shard.last_seq();
                cursor.at = if cursor.newest {
                    (cursor.last, usize::MAX)
                } else {
                    (0, 0)
                };
            }
            let mut visit =
                |l| shard.state(l, now, flush) != Lookup::Hit || f(&shard.item(l), shard.charge(l));
            let stop = if cursor.newest {
                shard.visit_newest_from(cursor.at, &mut visit)
            } else {
                shard.visit_from(cursor.at, cursor.last, &mut visit)
            };
            match stop {
                Some(at) => {
                    cursor.at = at;
                    return true;
                }
                None => {
                    cursor.shard += 1;
                    cursor.begun = false;
                }
            }
        }
        false
    }

    /// Bytes the store holds now: segments and hash tables, everything the
    /// memory limit counts (memcached's `total_malloced`).
    pub fn memory(&self) -> usize {
        let f = self.footprint();
        f.segments + f.tables
    }

    /// What the store holds, summed over the shards (each locked in turn).
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint::default();
        for c in self.cells.iter() {
            let s = lock(&c.shard);
            f.segments += s.allocated();
            f.tables += s.table_bytes();
            f.malloc_fails += s.malloc_fails;
        }
        f
    }

    /// Counts an event tied to no key (e.g. a value refused by the parser).
    pub fn count(&self, c: Counter) {
        self.global.bump(c);
    }

    /// Sums every counter; the counters one request bumps together agree.
    pub fn stats(&self) -> Stats {
        let mut sums = [0u64; Counter::COUNT];
        for cell in self.cells.iter() {
            // Under the shard's lock: a request bumps several counters
            // (cmd_get, then get_hits) and a snapshot between the two
            // told get_hits + get_misses one short of cmd_get. A copy of
            // a few dozen words; memcached also locks each thread's stats.
            let _held = lock(&cell.shard);
            cell.stats.add_into(&mut sums);
        }
        self.global.add_into(&mut sums);
        Stats::from_sums(&sums, self.max_bytes() as u64)
    }

    /// Zeroes the counters (`stats reset`) and forgets the `stats detail`
    /// prefixes, as memcached does; gauges (items, bytes) stay.
    pub fn reset_stats(&self) {
        self.prefix_stats.clear();
        for cell in self.cells.iter() {
            let _held = lock(&cell.shard);
            cell.stats.reset();
        }
        self.global.reset();
        self.watch.reset_stats();
    }

    #[cfg(test)]
    pub(crate) fn check(&self) {
        for cell in self.cells.iter() {
            lock(&cell.shard).check();
        }
    }

    #[cfg(test)]
    pub(crate) fn shard_len(&self, i: usize) -> usize {
        lock(&self.cells[i].shard).len()
    }
}

/// The size class (see [`classes`]) of an item of a `klen`-byte key and a
/// `vlen`-byte value.
pub(crate) fn class_for(klen: usize, vlen: usize) -> usize {
    classes::class_of(shard::HEADER + klen + vlen)
}

/// memcached's `type=item_get` line of a lookup (`found`: the live
/// item's class and value length).
#[cold]
fn log_get(watch: &Watch, key: &[u8], lookup: Lookup, found: Option<(usize, usize)>) {
    let status = match lookup {
        Lookup::Hit => "found",
        Lookup::Miss => "not_found",
        Lookup::Flushed => "flushed",
        Lookup::Expired => "expired",
    };
    let (class, size) = found.unwrap_or((0, 0));
    watch.log(log::FETCHERS, |o| {
        o.extend_from_slice(b"type=item_get ");
        log::write_key(o, key);
        let fd = log::conn_fd();
        let _ = write!(o, " status={status} clsid={class} cfd={fd} size={size}");
    });
}

/// A read-only view of a live item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// CAS unique.
    pub cas: u64,
    /// Absolute expiry time, 0 = never.
    pub exptime: Time,
    /// When the item was last stored or accessed.
    pub last_access: Time,
    /// Whether it has been fetched since it was stored.
    pub fetched: bool,
    /// Marked stale by `md … I` (meta invalidation).
    pub stale: bool,
    /// A client has been handed the recache win token (`W`).
    pub win_sent: bool,
    /// Stored by `ms` with a base64 key (memcached's `ITEM_KEY_BINARY`).
    pub key_binary: bool,
}

/// One key's shard, locked, with the key looked up. Operations apply to that
/// key; dropping the entry releases the lock.
pub struct Entry<'s, 'k> {
    store: &'s Store,
    stats: &'s ShardStats,
    shard: MutexGuard<'s, Shard>,
    key: &'k [u8],
    hash: u64,
    now: Time,
    flush: FlushState,
    idx: Option<u32>,
    lookup: Lookup,
    /// The size class of the item the entry removed last (0: none), so a
    /// hit counted after the removal still lands in the item's class.
    removed_class: usize,
}

impl std::fmt::Debug for Entry<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key)
            .field("lookup", &self.lookup)
            .field("item", &self.item())
            .finish()
    }
}

impl<'s, 'k> Entry<'s, 'k> {
    /// What the lookup found when the entry was made (later writes do not
    /// change it): `Expired` and `Flushed` mean a dead item was unlinked.
    pub fn lookup(&self) -> Lookup {
        self.lookup
    }

    /// The key.
    pub fn key(&self) -> &'k [u8] {
        self.key
    }

    /// The `now` the entry was made with.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The store.
    pub fn store(&self) -> &'s Store {
        self.store
    }

    /// The live item, if any.
    #[inline]
    pub fn item(&self) -> Option<Item<'_>> {
        Some(self.shard.item(self.idx?))
    }

    /// The live item's value, shared, where a send should take it from
    /// the store rather than a copy: large values outside a memory file.
    /// Its memory stays mapped while the returned value lives, even if the
    /// item is replaced or evicted meanwhile (memory outside the store's
    /// limit then: a caller holding it counts it, as it would a copy).
    pub fn share_value(&self) -> Option<std::sync::Arc<SharedValue>> {
        self.shard.share_value(self.idx?)
    }

    /// The live item's size class (see [`classes`]; 0: none).
    pub fn class(&self) -> usize {
        self.idx.map_or(0, |l| self.shard.class(l))
    }

    /// Whether there is a live item.
    pub fn exists(&self) -> bool {
        self.idx.is_some()
    }

    /// Records a fetch: marks the item fetched and recently used (it gets a
    /// second chance when its segment is evicted), sets its access time.
    #[inline]
    pub fn bump(&mut self) {
        if let Some(l) = self.idx {
            self.shard.touch(l, FETCHED | ACCESSED, self.now);
        }
    }

    /// Marks the item recently used and sets its access time without marking
    /// it fetched (`add` finding the key, as memcached does).
    pub fn promote(&mut self) {
        if let Some(l) = self.idx {
            self.shard.touch(l, ACCESSED, self.now);
        }
    }

    /// Sets the absolute expiry time (0 = never). An item set to expire at or
    /// before `now` stays readable through this entry and is gone for the
    /// next lookup.
    pub fn set_exptime(&mut self, exptime: Time) {
        if let Some(l) = self.idx {
            self.shard.set_exptime(l, exptime);
        }
    }

    /// Sets the CAS unique.
    pub fn set_cas(&mut self, cas: u64) {
        if let Some(l) = self.idx {
            self.shard.set_cas(l, cas);
        }
    }

    /// Marks or clears the stale bit.
    pub fn set_stale(&mut self, stale: bool) {
        self.set_bit(STALE, stale);
    }

    /// Marks the item as stored with a base64 key.
    pub fn set_key_binary(&mut self) {
        self.set_bit(KEY_BINARY, true);
    }

    /// Marks or clears the "win token sent" bit.
    pub fn set_win_sent(&mut self, sent: bool) {
        self.set_bit(WIN_SENT, sent);
    }

    fn set_bit(&mut self, bit: u8, on: bool) {
        if let Some(l) = self.idx {
            if on {
                self.shard.set_bits(l, bit, 0);
            } else {
                self.shard.set_bits(l, 0, bit);
            }
        }
    }

    /// Counts a store refused for lack of memory (`store_no_memory`), and
    /// takes back the `cmd_set` its command counted: memcached counts a set
    /// only once it has allocated the item.
    pub fn refused_for_memory(&self) {
        self.stats.bump(Counter::StoreNoMemory);
        self.stats.unbump(Counter::CmdSet);
    }

    /// Counts an event in this key's shard, and the hits memcached counts
    /// per slab class (`stats slabs`) in the class of the entry's item.
    pub fn count(&self, c: Counter) {
        self.stats.bump(c);
        let per_class = match c {
            Counter::GetHits => ClassCounter::GetHits,
            Counter::DeleteHits => ClassCounter::DeleteHits,
            Counter::IncrHits => ClassCounter::IncrHits,
            Counter::DecrHits => ClassCounter::DecrHits,
            Counter::CasHits => ClassCounter::CasHits,
            Counter::CasBadval => ClassCounter::CasBadval,
            Counter::TouchHits => ClassCounter::TouchHits,
            _ => return,
        };
        let class = match self.idx {
            Some(l) => self.shard.class(l),
            None => self.removed_class,
        };
        if class != 0 {
            self.stats.classes.add(class, per_class, 1);
        }
    }

    /// Stores a new item under the key, replacing any live one, and returns
    /// its CAS unique (`cas`, or the next store-wide one). Frees segments to
    /// make room. An item whose `exptime` has already passed replaces
    /// the old one and is not kept.
    pub fn insert(
        &mut self,
        value: &[u8],
        flags: u32,
        exptime: Time,
        cas: Option<u64>,
    ) -> Result<u64, WriteError> {
        self.put(&[value], flags, exptime, cas, 0)
    }

    /// Changes the live item's value, keeping its flags and expiry; the item
    /// gets a new CAS unique (`cas` or the next one) and is written anew.
    /// Its meta state as memcached's: a change written in place (an `incr`
    /// to as many digits or fewer) keeps an `md … I` invalidation and its
    /// win token, a new item (`append`, a growing `incr`) starts fresh; a
    /// base64 key stays one.
    pub fn rewrite(&mut self, edit: Edit<'_>, cas: Option<u64>) -> Result<u64, WriteError> {
        let l = self.idx.ok_or(WriteError::NotFound)?;
        let (flags, exptime) = (self.shard.flags(l), self.shard.exptime(l));
        let bits = self.shard.bits(l);
        // What the new item keeps: memcached's append and growing incr make
        // a new item, whose stale and win-token state goes with the old one;
        // its incr or decr to as many digits or fewer writes in place, and
        // the item keeps it (fewer digits are stored alone here, where
        // memcached pads them with spaces: see the README's deviations).
        let kept = match edit {
            Edit::Replace(d) if d.len() <= self.shard.item(l).value.len() => {
                bits & (STALE | WIN_SENT | KEY_BINARY)
            }
            _ => bits & KEY_BINARY,
        };
        if let Edit::Replace(d) = edit {
            if d.len() == self.shard.item(l).value.len() {
                // A counter keeping its digits: written in place, as
                // memcached's incr does, so it needs no room (a full cache
                // without evictions still counts).
                self.shard.overwrite_value(l, d);
                let cas = cas.unwrap_or_else(|| self.store.next_cas());
                self.shard.set_cas(l, cas);
                self.shard.touch(l, 0, self.now);
                return Ok(cas);
            }
        }
        if let Edit::Append(d) | Edit::Prepend(d) = edit {
            let old_len = self.shard.item(l).value.len();
            let size = crate::protocol::item_size(self.key.len(), flags, old_len + d.len());
            if size > self.store.item_size_max {
                return Err(WriteError::TooLarge);
            }
        }
        // The old value's bytes can be reused by the write: copy them out.
        let old = self.shard.item(l).value.to_vec();
        let parts: [&[u8]; 2] = match edit {
            Edit::Append(d) => [&old, d],
            Edit::Prepend(d) => [d, &old],
            Edit::Replace(d) => [d, &[]],
        };
        self.put(&parts, flags, exptime, cas, kept)
    }

    /// [`Entry::insert`] of a value received into `staged` (from
    /// [`Store::stage`] for this key): its block becomes the item's
    /// segment, the value is not copied.
    pub fn insert_staged(
        &mut self,
        staged: Staged,
        flags: u32,
        exptime: Time,
        cas: Option<u64>,
    ) -> Result<u64, WriteError> {
        self.put_staged(staged, flags, exptime, cas, 0)
    }

    /// Like [`Entry::insert_staged`], and the new item keeps `bits` (STALE,
    /// WIN_SENT).
    pub(crate) fn put_staged(
        &mut self,
        staged: Staged,
        flags: u32,
        exptime: Time,
        cas: Option<u64>,
        bits: u8,
    ) -> Result<u64, WriteError> {
        debug_assert_eq!(staged.klen, self.key.len());
        self.put_item(&[], Some(staged), flags, exptime, cas, bits)
    }

    /// Like [`Entry::insert`], and the new item keeps `bits` (STALE, WIN_SENT).
    pub(crate) fn put(
        &mut self,
        parts: &[&[u8]],
        flags: u32,
        exptime: Time,
        cas: Option<u64>,
        bits: u8,
    ) -> Result<u64, WriteError> {
        self.put_item(parts, None, flags, exptime, cas, bits)
    }

    /// [`put`](Self::put) of a value in `parts`, or in `staged` (`parts`
    /// then empty).
    fn put_item(
        &mut self,
        parts: &[&[u8]],
        staged: Option<Staged>,
        flags: u32,
        exptime: Time,
        cas: Option<u64>,
        bits: u8,
    ) -> Result<u64, WriteError> {
        let in_place = staged.as_ref().map_or(0, |s| s.vlen);
        let vlen = in_place + parts.iter().map(|p| p.len()).sum::<usize>();
        if !self.shard.fits(self.key.len(), vlen) {
            return Err(self.out_of_memory(self.key.len() + vlen + ITEM_OVERHEAD));
        }
        let cas = cas.unwrap_or_else(|| self.store.next_cas());
        let born_dead = exptime != 0 && exptime <= self.now;
        // With evictions, the old item goes first: its room helps. Without,
        // a write may fail for lack of room, and the old item stays then
        // (as in memcached, whose failed allocation leaves it alone; a
        // failed `set` drops it in the command layer): it goes once the new
        // one is in.
        let keep_old = !self.store.evictions && !born_dead && self.idx.is_some();
        if !keep_old {
            if let Some(old) = self.idx.take() {
                self.removed_class = self.shard.class(old);
                self.shard.unlink(old, self.stats);
            }
        }
        // memcached's total_items counts the items it links (one born
        // expired included), not the writes it could not allocate.
        if born_dead {
            self.stats.bump(Counter::TotalItems);
            return Ok(cas);
        }
        let item = NewItem {
            key: self.key,
            parts,
            staged: in_place,
            cas,
            exptime,
            atime: self.now,
            flags,
            epoch: self.flush.epoch,
            bits,
        };
        match self.shard.insert(
            self.hash,
            &item,
            staged.map(|s| s.block),
            self.now,
            self.flush,
            self.stats,
        ) {
            Some(l) => {
                self.stats.bump(Counter::TotalItems);
                if keep_old {
                    // The search for room may have moved the old item.
                    if let Some(old) = self.shard.find_other(self.hash, self.key, l) {
                        self.removed_class = self.shard.class(old);
                        self.shard.unlink(old, self.stats);
                    }
                }
                self.idx = Some(l);
                Ok(cas)
            }
            None => {
                if keep_old {
                    // Still there (moved, perhaps): nothing live is dropped.
                    self.idx = self.shard.find(self.hash, self.key);
                }
                Err(self.out_of_memory(self.key.len() + vlen + ITEM_OVERHEAD))
            }
        }
    }

    /// Counts an item of `charge` bytes refused for lack of memory in its
    /// class (memcached's `outofmemory`).
    fn out_of_memory(&self, charge: usize) -> WriteError {
        let class = classes::class_of(charge);
        self.stats.classes.add(class, ClassCounter::OutOfMemory, 1);
        WriteError::OutOfMemory
    }

    /// Unlinks the live item. Returns whether there was one.
    pub fn remove(&mut self) -> bool {
        match self.idx.take() {
            Some(l) => {
                self.removed_class = self.shard.class(l);
                self.shard.unlink(l, self.stats);
                true
            }
            None => false,
        }
    }
}

/// An item's memory made before its value arrives (see [`Store::stage`]).
pub struct Staged {
    block: Block,
    klen: usize,
    vlen: usize,
}

impl Staged {
    /// The value's length.
    pub fn len(&self) -> usize {
        self.vlen
    }

    /// Whether the value is empty (a staged one never is).
    pub fn is_empty(&self) -> bool {
        self.vlen == 0
    }

    /// Where the value goes: its bytes in the item.
    pub fn value_mut(&mut self) -> &mut [u8] {
        let at = shard::HEADER + self.klen;
        &mut self.block.bytes_mut()[at..at + self.vlen]
    }
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged").field("vlen", &self.vlen).finish()
    }
}

#[cfg(test)]
mod tests;
