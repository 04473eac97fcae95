//! The sharded item store: hash tables, LRU eviction under a memory limit,
//! expiry, `flush_all`, CAS uniques and counters.
//!
//! # Shards and colors
//!
//! The store is `N` shards (a power of two). A key's shard is picked from its
//! hash by [`Store::shard_of`]; each shard has its own `std::sync::Mutex`, its own
//! LRU list and `max_bytes / N` of the memory limit. The server colors payload
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
//! # Memory accounting
//!
//! Each item is charged `key.len() + value.len() + ITEM_OVERHEAD` bytes, and a
//! shard evicts from its LRU tail until a new item fits within its share of the
//! limit. [`ITEM_OVERHEAD`] is what an item costs beyond its key and value on a
//! 64-bit target:
//!
//! | part | bytes |
//! |---|---|
//! | the slot (`Slot`: data pointer and length, hash, CAS, expiry, access time, flags, flush epoch, LRU links, key length, state bits) | 64 |
//! | the hash table entry (a `u32` slot index + 1 control byte, at hashbrown's 7/8 maximum load and ~60% average load) | 8 |
//! | the heap block holding key + value (glibc malloc: 8-byte header, rounded up to 16) | 16 on average |
//! | slack of the slot array (it grows by a quarter: about 12% of 64 on average) | 8 |
//! | **total** | **96** |
//!
//! The table and slot array are charged per item rather than per allocation so
//! that eviction does not jump when they grow. A unit test pins the slot at 64
//! bytes. Slots freed by deletes and evictions are reused first; when more
//! than a quarter of a shard's slots are free (many small items replaced by a
//! few large ones), [`Store::sweep`] moves live slots into the holes and
//! shrinks the array, a bounded number of slots per call. Between sweeps, idle
//! slots are the one cost the per-item charge does not cover (64 bytes each).

pub mod classes;
mod crawler;
mod detail;
mod shard;
mod stats;

pub use classes::{ClassCounter, ClassStats};
pub use crawler::{CrawlerSettings, MAX_CRAWLER_SLEEP};
pub use detail::{PrefixStats, PREFIX_DELIMITER};
pub use stats::{Counter, Stats};

use crate::protocol::KEY_MAX_LENGTH;
use shard::{Shard, Slot, FETCHED, KEY_BINARY};
pub(crate) use shard::{STALE, WIN_SENT};
use stats::{GlobalStats, ShardStats};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

/// Unix time in seconds.
pub type Time = u32;

/// The largest relative expiry time (30 days); larger values are absolute.
pub const MAX_RELATIVE_EXPTIME: i64 = 60 * 60 * 24 * 30;

/// Bytes charged per item beyond its key and value (see the module docs).
pub const ITEM_OVERHEAD: usize = SLOT_SIZE + 8 + 16 + 8;

/// The size of one slot, pinned by a test.
const SLOT_SIZE: usize = 64;

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
    /// The item is larger than a shard's share of the memory limit.
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
}

impl StoreConfig {
    /// A configuration with `max_bytes` and a default shard count: the largest
    /// power of two up to 64 that leaves each shard at least 2 MiB.
    pub fn new(max_bytes: usize) -> StoreConfig {
        let mut shards = 64;
        while shards > 1 && max_bytes / shards < 2 << 20 {
            shards /= 2;
        }
        StoreConfig { max_bytes, shards }
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
    hasher: hashbrown::DefaultHashBuilder,
    next_cas: AtomicU64,
    flush_epoch: AtomicU32,
    /// `fired << 32 | pending` (see [`FlushState`]).
    flush_times: AtomicU64,
    global: GlobalStats,
    max_bytes: AtomicUsize,
    sweep_cursor: AtomicUsize,
    prefix_stats: PrefixStats,
    crawler: CrawlerSettings,
    /// Appends and prepends may not make an item's
    /// [`item_size`](crate::protocol::item_size) larger.
    item_size_max: usize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.cells.len())
            .field("max_bytes", &self.max_bytes())
            .finish_non_exhaustive()
    }
}

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
        let n = config.shards.clamp(1, 1 << 16).next_power_of_two();
        let per_shard = config.max_bytes / n;
        let cells = (0..n)
            .map(|_| ShardCell {
                shard: Mutex::new(Shard::new(per_shard)),
                stats: ShardStats::new(),
            })
            .collect();
        Store {
            cells,
            mask: n - 1,
            hasher: hashbrown::DefaultHashBuilder::default(),
            next_cas: AtomicU64::new(1),
            flush_epoch: AtomicU32::new(0),
            flush_times: AtomicU64::new(0),
            global: GlobalStats::new(),
            max_bytes: AtomicUsize::new(config.max_bytes),
            sweep_cursor: AtomicUsize::new(0),
            prefix_stats: PrefixStats::default(),
            crawler: CrawlerSettings::default(),
            item_size_max: usize::MAX,
        }
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

    /// The memory limit in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes.load(Relaxed)
    }

    /// Changes the memory limit (`cache_memlimit`) to `max_bytes`, but to no
    /// less than `min_per_shard` per shard (so that the largest item still
    /// fits a shard), and returns the limit applied. Lowering it evicts at
    /// once: each shard, in turn under its lock, evicts from its LRU tail
    /// (expired items first as they come) until it is within its new share,
    /// so `bytes` never exceeds `limit_maxbytes`. Evictions count as usual.
    pub fn set_max_bytes(&self, max_bytes: usize, min_per_shard: usize, now: Time) -> usize {
        let per_shard = (max_bytes / self.cells.len()).max(min_per_shard);
        let applied = per_shard * self.cells.len();
        self.max_bytes.store(applied, Relaxed);
        let flush = self.flush_state();
        for cell in self.cells.iter() {
            let mut shard = lock(&cell.shard);
            shard.limit = per_shard;
            let fits = shard.make_room(0, now, flush, &cell.stats);
            debug_assert!(fits);
        }
        applied
    }

    #[inline]
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// hashbrown indexes buckets with the low bits and filters with the top 7,
    /// so the shard comes from bits 32.. to keep both well spread in a shard.
    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.mask
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
        let times = self.flush_times.load(Relaxed);
        FlushState {
            epoch: self.flush_epoch.load(Relaxed),
            fired: (times >> 32) as Time,
            pending: times as Time,
        }
    }

    /// Locks `key`'s shard and looks the key up (an expired or flushed item is
    /// unlinked on the way, see [`Entry::lookup`]). The lock is held until the
    /// entry is dropped: keep entries short-lived and never hold two.
    ///
    /// # Panics
    ///
    /// If `key` is longer than [`KEY_MAX_LENGTH`] (250) bytes; [`crate::parse`]
    /// never yields such a key.
    pub fn entry<'s, 'k>(&'s self, key: &'k [u8], now: Time) -> Entry<'s, 'k> {
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
                shard.reclaim(i, lookup, &cell.stats);
            }
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
    /// comes back through the LRU tail or [`Store::sweep`]. A new flush
    /// replaces a pending one, as in memcached; an absolute `at` in the past
    /// flushes nothing (memcached's, for a time before it started). A flush
    /// that takes effect now uses up a CAS unique, as memcached's does.
    pub fn flush_all(&self, delay: i64, now: Time) {
        // What earlier flushes took stays flushed, but not into this second:
        // memcached replaces its cut-off, and what is stored from now on is
        // the new flush's to judge.
        let fired = self.flush_state().cutoff(now).min(now);
        let at = if delay > 0 { expiry(delay, now) } else { 0 };
        if at == 0 || at <= now.saturating_add(1) {
            self.next_cas();
        }
        if at == 0 {
            // Every item stored so far is in an older epoch: no time cut-off
            // is needed, and none may hide what is stored from now on.
            self.flush_times.store(0, Relaxed);
            self.flush_epoch.fetch_add(1, Relaxed);
        } else if at > now {
            self.flush_times
                .store(u64::from(fired) << 32 | u64::from(at), Relaxed);
        } else {
            self.flush_times.store(u64::from(fired) << 32, Relaxed);
        }
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
            let mut left = lock(&cell.shard).slots.len();
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
    /// any (see [`classes`]), with the age of each class's least recently
    /// used item found by walking each shard's LRU list from its tail (it
    /// stops once every class present in the shard has been seen).
    pub fn class_stats(&self, now: Time) -> Vec<ClassStats> {
        let mut sums = vec![[0u64; ClassCounter::COUNT]; classes::CLASSES + 1];
        let mut oldest: Vec<Time> = vec![Time::MAX; classes::CLASSES + 1];
        for cell in self.cells.iter() {
            let shard = lock(&cell.shard);
            let mut row = vec![[0u64; ClassCounter::COUNT]; classes::CLASSES + 1];
            cell.stats.classes.add_into(&mut row);
            let mut missing = row
                .iter()
                .filter(|r| r[ClassCounter::Number as usize] != 0)
                .count();
            let mut seen = [false; classes::CLASSES + 1];
            for i in shard.lru_order(false) {
                if missing == 0 {
                    break;
                }
                let s = shard.slot(i);
                let c = s.class();
                if !seen[c] {
                    seen[c] = true;
                    missing -= 1;
                    oldest[c] = oldest[c].min(s.atime);
                }
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
    /// [`ITEM_OVERHEAD`]), shard by shard, each shard's items from its LRU
    /// tail (least recently used first), or from its head with
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
            for i in shard.lru_order(newest_first) {
                if shard.state(i, now, flush) != Lookup::Hit {
                    continue;
                }
                let s = shard.slot(i);
                let item = item_of(s);
                if !f(&item, s.charge()) {
                    return;
                }
            }
        }
    }

    /// Counts an event tied to no key (e.g. a value refused by the parser).
    pub fn count(&self, c: Counter) {
        self.global.bump(c);
    }

    /// Sums every counter (lock-free; values may be a few events old).
    pub fn stats(&self) -> Stats {
        let mut sums = [0u64; Counter::COUNT];
        for cell in self.cells.iter() {
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

/// The read-only view of the item in slot `s`.
fn item_of(s: &shard::Slot) -> Item<'_> {
    Item {
        key: s.key(),
        value: s.value(),
        flags: s.flags,
        cas: s.cas,
        exptime: s.exptime,
        last_access: s.atime,
        fetched: s.has(FETCHED),
        stale: s.has(STALE),
        win_sent: s.has(WIN_SENT),
        key_binary: s.has(KEY_BINARY),
    }
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
    pub fn item(&self) -> Option<Item<'_>> {
        let s = self.shard.slot(self.idx?);
        Some(item_of(s))
    }

    /// Whether there is a live item.
    pub fn exists(&self) -> bool {
        self.idx.is_some()
    }

    fn slot_mut(&mut self) -> Option<&mut Slot> {
        let i = self.idx?;
        Some(self.shard.slot_mut(i))
    }

    /// Records a fetch: marks the item fetched, sets its access time, moves it
    /// to the head of the LRU list.
    pub fn bump(&mut self) {
        if let Some(i) = self.idx {
            let now = self.now;
            let s = self.shard.slot_mut(i);
            s.bits |= FETCHED;
            s.atime = now;
            self.shard.lru_touch(i);
        }
    }

    /// Moves the item to the LRU head and sets its access time without marking
    /// it fetched (`add` finding the key, as memcached does).
    pub fn promote(&mut self) {
        if let Some(i) = self.idx {
            self.shard.slot_mut(i).atime = self.now;
            self.shard.lru_touch(i);
        }
    }

    /// Sets the absolute expiry time (0 = never). An item set to expire at or
    /// before `now` stays readable through this entry and is gone for the
    /// next lookup.
    pub fn set_exptime(&mut self, exptime: Time) {
        if let Some(s) = self.slot_mut() {
            s.exptime = exptime;
        }
    }

    /// Sets the CAS unique.
    pub fn set_cas(&mut self, cas: u64) {
        if let Some(s) = self.slot_mut() {
            s.cas = cas;
        }
    }

    /// Marks or clears the stale bit.
    pub fn set_stale(&mut self, stale: bool) {
        if let Some(s) = self.slot_mut() {
            s.bits = if stale {
                s.bits | STALE
            } else {
                s.bits & !STALE
            };
        }
    }

    /// Marks the item as stored with a base64 key.
    pub fn set_key_binary(&mut self) {
        if let Some(s) = self.slot_mut() {
            s.bits |= KEY_BINARY;
        }
    }

    /// Marks or clears the "win token sent" bit.
    pub fn set_win_sent(&mut self, sent: bool) {
        if let Some(s) = self.slot_mut() {
            s.bits = if sent {
                s.bits | WIN_SENT
            } else {
                s.bits & !WIN_SENT
            };
        }
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
            Some(i) => self.shard.slot(i).class(),
            None => self.removed_class,
        };
        if class != 0 {
            self.stats.classes.add(class, per_class, 1);
        }
    }

    /// Stores a new item under the key, replacing any live one, and returns
    /// its CAS unique (`cas`, or the next store-wide one). Evicts from the LRU
    /// tail to make room. An item whose `exptime` has already passed replaces
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
    /// gets a new CAS unique (`cas` or the next one) and goes to the LRU head.
    pub fn rewrite(&mut self, edit: Edit<'_>, cas: Option<u64>) -> Result<u64, WriteError> {
        let i = self.idx.ok_or(WriteError::NotFound)?;
        let old = self.shard.slot(i);
        let (flags, exptime) = (old.flags, old.exptime);
        // Build the new value while the old one is still borrowed.
        let old_value = old.value();
        if let Edit::Append(d) | Edit::Prepend(d) = edit {
            let size = crate::protocol::item_size(self.key.len(), flags, old_value.len() + d.len());
            if size > self.store.item_size_max {
                return Err(WriteError::TooLarge);
            }
        }
        let data = match edit {
            Edit::Append(d) => join(self.key, &[old_value, d]),
            Edit::Prepend(d) => join(self.key, &[d, old_value]),
            Edit::Replace(d) => join(self.key, &[d]),
        };
        self.put_data(data, flags, exptime, cas, 0)
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
        let len = self.key.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        if len + ITEM_OVERHEAD > self.shard.limit {
            return Err(self.out_of_memory(len + ITEM_OVERHEAD));
        }
        let data = join(self.key, parts);
        self.put_data(data, flags, exptime, cas, bits)
    }

    fn put_data(
        &mut self,
        data: Box<[u8]>,
        flags: u32,
        exptime: Time,
        cas: Option<u64>,
        bits: u8,
    ) -> Result<u64, WriteError> {
        let charge = data.len() + ITEM_OVERHEAD;
        if charge > self.shard.limit {
            return Err(self.out_of_memory(charge));
        }
        let cas = cas.unwrap_or_else(|| self.store.next_cas());
        if let Some(old) = self.idx.take() {
            self.removed_class = self.shard.slot(old).class();
            self.shard.unlink(old, self.stats);
        }
        self.stats.bump(Counter::TotalItems);
        if exptime != 0 && exptime <= self.now {
            return Ok(cas);
        }
        let made = self
            .shard
            .make_room(charge, self.now, self.flush, self.stats);
        debug_assert!(made);
        let slot = Slot {
            data,
            hash: self.hash,
            cas,
            exptime,
            atime: self.now,
            flags,
            epoch: self.flush.epoch,
            prev: shard::NIL,
            next: shard::NIL,
            klen: self.key.len() as u8,
            bits,
        };
        self.idx = Some(self.shard.link(slot, self.stats));
        Ok(cas)
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
            Some(i) => {
                self.removed_class = self.shard.slot(i).class();
                self.shard.unlink(i, self.stats);
                true
            }
            None => false,
        }
    }
}

/// `key ++ parts…` in one exactly sized allocation.
fn join(key: &[u8], parts: &[&[u8]]) -> Box<[u8]> {
    let len = key.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(key);
    for p in parts {
        v.extend_from_slice(p);
    }
    v.into_boxed_slice()
}

#[cfg(test)]
mod tests;
