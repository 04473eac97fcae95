//! [`PageCache`]: small files kept in memory, bounded in bytes, LRU.
//!
//! An entry is keyed by the file's canonical path and remembers the
//! [`FileMeta`] it was read under. [`PageCache::get`] answers a hit only when
//! the caller's fresh `stat` still shows the same size, mtime and inode;
//! otherwise the entry is dropped (an *invalidation*) and the lookup is a
//! miss. So a changed file is never served from memory once its change is
//! visible to `stat`.
//!
//! Layout: the cache is split into shards by a hash of the path (up to 16,
//! fewer when the byte budget is small, so that every shard can still hold a
//! file of the largest cacheable size), each a `Mutex` around a hash map and
//! an intrusive doubly linked LRU list kept in a slab. Each shard owns an
//! equal share of the byte budget and evicts from its own LRU tail: the
//! eviction order is LRU per shard, not global. Counters live in the shards,
//! under the lock already taken, and [`PageCache::stats`] adds them up.
//!
//! Lock discipline: every method takes exactly one shard lock, and
//! `Shard`'s methods expect it held. No lock is held while the caller reads
//! files: the caller reads, then [`insert`](PageCache::insert)s.
//!
//! What an entry costs against the budget: its bytes plus its path's bytes.
//!
//! Admission ([`PageCache::admit`]): while a shard has room, every small
//! file read goes in. Once it is full, a file goes in only on its second
//! miss within a while (a *doorkeeper*: each shard remembers fingerprints of
//! recently missed paths in a small direct-mapped table). A working set far
//! larger than the cache would otherwise churn it, each miss paying to copy
//! the file into memory and to evict an entry that would have hit later;
//! a file not admitted is sent with `sendfile` instead, without a copy.
//!
//! The same cache holds **derived** bytes too: the server keeps the gzip
//! variants of files in a second `PageCache` ([`insert_variant`]), keyed by
//! the *source* file's path and validators, so a variant is dropped as soon
//! as its source changes, exactly as a cached file is.
//!
//! [`insert_variant`]: PageCache::insert_variant

use std::hash::BuildHasher;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hashbrown::{DefaultHashBuilder, HashMap};

use crate::file::FileMeta;

const MAX_SHARDS: usize = 16;
const NIL: usize = usize::MAX;

/// A thread-safe, byte-bounded LRU cache of whole small files.
#[derive(Debug)]
pub struct PageCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: DefaultHashBuilder,
    max_file_size: usize,
    max_bytes: usize,
}

/// Counters of a [`PageCache`], summed over its shards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from memory.
    pub hits: u64,
    /// Lookups not answered (absent or stale).
    pub misses: u64,
    /// Entries dropped to make room.
    pub evictions: u64,
    /// Entries dropped because the file changed.
    pub invalidations: u64,
    /// Entries stored.
    pub insertions: u64,
    /// Bytes held (file bytes plus path bytes).
    pub bytes: u64,
    /// Entries held.
    pub entries: u64,
    /// Misses of small files not admitted (the cache was full and the file
    /// was missed for the first time in a while): sent without caching.
    pub not_admitted: u64,
}

impl PageCache {
    /// A cache holding at most `max_bytes`, of files of at most
    /// `max_file_size` bytes each (clamped to `max_bytes`).
    pub fn new(max_bytes: usize, max_file_size: usize) -> PageCache {
        let max_file_size = max_file_size.min(max_bytes);
        let mut shards = MAX_SHARDS;
        while shards > 1 && max_bytes / shards < max_file_size.max(1) {
            shards /= 2;
        }
        let capacity = max_bytes / shards;
        PageCache {
            shards: (0..shards)
                .map(|_| Mutex::new(Shard::new(capacity)))
                .collect(),
            hasher: DefaultHashBuilder::default(),
            max_file_size,
            max_bytes,
        }
    }

    /// The byte budget.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The largest file the cache takes.
    pub fn max_file_size(&self) -> usize {
        self.max_file_size
    }

    /// Whether a file of `size` bytes may be cached: the handler reads such a
    /// file whole (and inserts it) rather than sending it with `sendfile`.
    pub fn admits(&self, size: u64) -> bool {
        size <= self.max_file_size as u64
    }

    /// Whether a file of `size` bytes that just missed should be read into
    /// the cache: yes while its shard has room for it, else only if `path`
    /// missed recently before (see the module docs). Records the miss.
    pub fn admit(&self, path: &Path, size: u64) -> bool {
        if !self.admits(size) {
            return false;
        }
        let hash = self.hasher.hash_one(path);
        let mut shard = self.shards[hash as usize % self.shards.len()]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        shard.admit(hash, size as usize + path.as_os_str().len())
    }

    /// The bytes of `path` if cached under the same `meta` (size, mtime,
    /// inode); a stale entry is dropped and `None` returned.
    pub fn get(&self, path: &Path, meta: &FileMeta) -> Option<Arc<[u8]>> {
        self.shard(path).get(path, meta)
    }

    /// Stores `bytes` as the contents of `path` under `meta`, evicting least
    /// recently used entries of its shard as needed, and replacing an older
    /// entry for the same path. Returns `false` (and stores nothing) when the
    /// file is too large, or when `bytes.len()` differs from `meta.size` (the
    /// file changed between `stat` and `read`).
    pub fn insert(&self, path: &Path, meta: &FileMeta, bytes: Arc<[u8]>) -> bool {
        if bytes.len() as u64 != meta.size || bytes.len() > self.max_file_size {
            return false;
        }
        self.shard(path).insert(path, meta, bytes)
    }

    /// Stores `bytes` derived from the file `path` under `meta` (its gzip
    /// variant, say): as [`insert`](PageCache::insert), but `bytes` may have
    /// any length up to the largest size the cache takes; [`get`] with the
    /// source's validators finds it, and a change of the source drops it.
    ///
    /// [`get`]: PageCache::get
    pub fn insert_variant(&self, path: &Path, meta: &FileMeta, bytes: Arc<[u8]>) -> bool {
        if bytes.len() > self.max_file_size {
            return false;
        }
        self.shard(path).insert(path, meta, bytes)
    }

    /// Drops the entry for `path`; `true` if there was one.
    pub fn remove(&self, path: &Path) -> bool {
        let mut shard = self.shard(path);
        match shard.map.get(path).copied() {
            Some(i) => {
                shard.unlink_and_free(i);
                true
            }
            None => false,
        }
    }

    /// The counters, summed over the shards (each shard read under its lock;
    /// the sum is not one atomic snapshot).
    pub fn stats(&self) -> CacheStats {
        let mut total = CacheStats::default();
        for shard in self.shards.iter() {
            let s = lock(shard).stats;
            total.hits += s.hits;
            total.misses += s.misses;
            total.evictions += s.evictions;
            total.invalidations += s.invalidations;
            total.insertions += s.insertions;
            total.bytes += s.bytes;
            total.entries += s.entries;
            total.not_admitted += s.not_admitted;
        }
        total
    }

    fn shard(&self, path: &Path) -> MutexGuard<'_, Shard> {
        let i = self.hasher.hash_one(path) as usize % self.shards.len();
        lock(&self.shards[i])
    }
}

/// A poisoned shard is still consistent: no method of `Shard` panics between
/// two link updates (only allocation can fail, and that aborts).
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One shard. Its methods expect the shard's lock held (they take `&mut`).
///
/// Invariants: `map` and the list hold the same entries; `head` is the most
/// recently used, `tail` the least; `stats.bytes` is the sum of the entries'
/// charges and never exceeds `capacity`; free slots are in `free` and have
/// `entry: None`.
#[derive(Debug)]
struct Shard {
    map: HashMap<Arc<Path>, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    capacity: usize,
    stats: CacheStats,
    /// The doorkeeper: fingerprints of recently missed paths, direct-mapped
    /// by hash (a newer miss overwrites an older one in its slot). Made on
    /// the first miss that finds the shard full.
    seen: Vec<u32>,
}

/// Doorkeeper slots per shard.
const SEEN_SLOTS: usize = 4096;

#[derive(Debug)]
struct Slot {
    prev: usize,
    next: usize,
    entry: Option<Entry>,
}

#[derive(Debug)]
struct Entry {
    path: Arc<Path>,
    meta: FileMeta,
    bytes: Arc<[u8]>,
    charge: usize,
}

impl Shard {
    fn new(capacity: usize) -> Shard {
        Shard {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity,
            stats: CacheStats::default(),
            seen: Vec::new(),
        }
    }

    /// See [`PageCache::admit`]; `charge` is what the entry would cost.
    fn admit(&mut self, hash: u64, charge: usize) -> bool {
        if self.stats.bytes as usize + charge <= self.capacity {
            return true;
        }
        if self.seen.is_empty() {
            self.seen = vec![0; SEEN_SLOTS];
        }
        // The shard index used the low bits: slot and fingerprint come from
        // the rest. A fingerprint is never 0, so an empty slot never matches.
        let slot = (hash >> 8) as usize % SEEN_SLOTS;
        let fp = ((hash >> 32) as u32).max(1);
        if self.seen[slot] == fp {
            self.seen[slot] = 0;
            return true;
        }
        self.seen[slot] = fp;
        self.stats.not_admitted += 1;
        false
    }

    fn get(&mut self, path: &Path, meta: &FileMeta) -> Option<Arc<[u8]>> {
        let Some(&i) = self.map.get(path) else {
            self.stats.misses += 1;
            return None;
        };
        let entry = self.slots[i].entry.as_ref().expect("mapped slot is full");
        if entry.meta != *meta {
            self.unlink_and_free(i);
            self.stats.invalidations += 1;
            self.stats.misses += 1;
            return None;
        }
        let bytes = Arc::clone(&entry.bytes);
        self.unlink(i);
        self.push_front(i);
        self.stats.hits += 1;
        Some(bytes)
    }

    fn insert(&mut self, path: &Path, meta: &FileMeta, bytes: Arc<[u8]>) -> bool {
        let charge = bytes.len() + path.as_os_str().len();
        if charge > self.capacity {
            return false;
        }
        if let Some(&i) = self.map.get(path) {
            self.unlink_and_free(i);
        }
        while self.stats.bytes as usize + charge > self.capacity {
            let victim = self.tail;
            debug_assert_ne!(victim, NIL, "bytes > 0 implies an entry");
            self.unlink_and_free(victim);
            self.stats.evictions += 1;
        }
        let path: Arc<Path> = Arc::from(path);
        let entry = Entry {
            path: Arc::clone(&path),
            meta: *meta,
            bytes,
            charge,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i].entry = Some(entry);
                i
            }
            None => {
                self.slots.push(Slot {
                    prev: NIL,
                    next: NIL,
                    entry: Some(entry),
                });
                self.slots.len() - 1
            }
        };
        self.push_front(i);
        self.map.insert(path, i);
        self.stats.bytes += charge as u64;
        self.stats.entries += 1;
        self.stats.insertions += 1;
        true
    }

    /// Removes slot `i` from list and map, and frees it.
    fn unlink_and_free(&mut self, i: usize) {
        self.unlink(i);
        let entry = self.slots[i].entry.take().expect("linked slot is full");
        self.map.remove(&*entry.path);
        self.free.push(i);
        self.stats.bytes -= entry.charge as u64;
        self.stats.entries -= 1;
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.slots[i].prev, self.slots[i].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n].prev = prev,
        }
        self.slots[i].prev = NIL;
        self.slots[i].next = NIL;
    }

    fn push_front(&mut self, i: usize) {
        self.slots[i].prev = NIL;
        self.slots[i].next = self.head;
        match self.head {
            NIL => self.tail = i,
            h => self.slots[h].prev = i,
        }
        self.head = i;
    }

    /// Checks the invariants (tests only).
    #[cfg(test)]
    fn check(&self) {
        let mut n = 0;
        let mut bytes = 0;
        let mut prev = NIL;
        let mut i = self.head;
        while i != NIL {
            let slot = &self.slots[i];
            assert_eq!(slot.prev, prev);
            let entry = slot.entry.as_ref().unwrap();
            assert_eq!(self.map.get(&*entry.path), Some(&i));
            n += 1;
            bytes += entry.charge;
            prev = i;
            i = slot.next;
        }
        assert_eq!(self.tail, prev);
        assert_eq!(n, self.map.len());
        assert_eq!(n as u64, self.stats.entries);
        assert_eq!(bytes as u64, self.stats.bytes);
        assert!(bytes <= self.capacity);
        assert_eq!(n + self.free.len(), self.slots.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::{Duration, UNIX_EPOCH};

    fn meta(size: usize, v: u64) -> FileMeta {
        FileMeta {
            size: size as u64,
            mtime: UNIX_EPOCH + Duration::from_secs(v),
            inode: 1,
            changed: 0,
        }
    }

    fn bytes(n: usize) -> Arc<[u8]> {
        vec![7u8; n].into()
    }

    fn check(c: &PageCache) {
        for s in c.shards.iter() {
            lock(s).check();
        }
    }

    #[test]
    fn hit_miss_and_invalidation() {
        let c = PageCache::new(1 << 20, 1 << 10);
        let p = Path::new("/www/a.txt");
        assert!(c.get(p, &meta(3, 1)).is_none());
        assert!(c.insert(p, &meta(3, 1), bytes(3)));
        assert_eq!(&*c.get(p, &meta(3, 1)).unwrap(), &[7, 7, 7]);
        // Changed mtime, size or inode: stale, dropped.
        assert!(c.get(p, &meta(3, 2)).is_none());
        assert!(c.get(p, &meta(3, 1)).is_none(), "stale entry was dropped");
        assert!(c.insert(p, &meta(3, 1), bytes(3)));
        let mut other_inode = meta(3, 1);
        other_inode.inode = 2;
        assert!(c.get(p, &other_inode).is_none());
        let s = c.stats();
        assert_eq!(
            (s.hits, s.misses, s.invalidations, s.insertions, s.entries),
            (1, 4, 2, 2, 0)
        );
        assert_eq!(s.bytes, 0);
        check(&c);
    }

    #[test]
    fn refuses_too_large_and_mismatched() {
        let c = PageCache::new(1000, 100);
        let p = Path::new("/a");
        assert!(!c.insert(p, &meta(101, 1), bytes(101)));
        assert!(!c.insert(p, &meta(5, 1), bytes(4)), "size changed under us");
        assert!(c.admits(100) && !c.admits(101));
        assert_eq!(c.stats().entries, 0);
        // max_file_size is clamped to the budget.
        assert_eq!(PageCache::new(10, 100).max_file_size(), 10);
    }

    #[test]
    fn a_full_cache_admits_a_file_on_its_second_miss() {
        let c = PageCache::new(40, 30);
        let (a, b, d) = (Path::new("a"), Path::new("b"), Path::new("d"));
        // Room left: admitted at once, whatever was missed before.
        assert!(c.admit(a, 12));
        assert!(c.insert(a, &meta(12, 1), bytes(12)));
        assert!(c.admit(b, 12));
        assert!(c.insert(b, &meta(12, 1), bytes(12)));
        // 26 of 40 bytes used: a 20-byte file does not fit. First miss: no;
        // second: yes (and the slot is spent: a third needs two more).
        assert!(!c.admit(d, 20));
        assert!(c.admit(d, 20));
        assert!(!c.admit(d, 20));
        // Too large for the cache at all: never, and not counted.
        assert!(!c.admit(d, 31));
        assert!(!c.admit(d, 31));
        assert_eq!(c.stats().not_admitted, 2);
        // Still room for a small one: admitted without a first miss.
        assert!(c.admit(Path::new("e"), 5));
        assert_eq!(c.stats().entries, 2);
    }

    #[test]
    fn lru_eviction_in_one_shard() {
        // A budget that leaves a single shard: exact LRU order.
        let c = PageCache::new(40, 30);
        assert_eq!(c.shards.len(), 1);
        let (a, b, d) = (Path::new("a"), Path::new("b"), Path::new("d"));
        assert!(c.insert(a, &meta(12, 1), bytes(12))); // charge 13
        assert!(c.insert(b, &meta(12, 1), bytes(12))); // charge 13
        assert!(c.get(a, &meta(12, 1)).is_some()); // a is now most recent
        assert!(c.insert(d, &meta(20, 1), bytes(20))); // 21: evicts b
        assert!(c.get(b, &meta(12, 1)).is_none());
        assert!(c.get(a, &meta(12, 1)).is_some());
        assert!(c.get(d, &meta(20, 1)).is_some());
        let s = c.stats();
        assert_eq!((s.evictions, s.entries, s.bytes), (1, 2, 34));
        check(&c);
    }

    #[test]
    fn replace_same_path() {
        let c = PageCache::new(100, 50);
        let p = Path::new("x");
        assert!(c.insert(p, &meta(10, 1), bytes(10)));
        assert!(c.insert(p, &meta(20, 2), bytes(20)));
        let s = c.stats();
        assert_eq!((s.entries, s.bytes, s.evictions), (1, 21, 0));
        assert_eq!(c.get(p, &meta(20, 2)).unwrap().len(), 20);
        assert!(c.remove(p));
        assert!(!c.remove(p));
        check(&c);
    }

    #[test]
    fn variants_are_bounded_and_follow_their_source() {
        // 16 shards of 64 KiB; variants of up to 4 KiB.
        let c = PageCache::new(1 << 20, 4 << 10);
        let src = meta(100_000, 1);
        let p = Path::new("/www/big.txt");
        // Any length up to the largest entry, unlike insert.
        assert!(!c.insert(p, &src, bytes(1000)));
        assert!(c.insert_variant(p, &src, bytes(1000)));
        assert!(!c.insert_variant(p, &src, bytes((4 << 10) + 1)));
        assert_eq!(c.get(p, &src).unwrap().len(), 1000);
        // The source changed: the variant is gone.
        assert!(c.get(p, &meta(100_000, 2)).is_none());
        assert_eq!(c.stats().invalidations, 1);
        // Far more variants than fit: the byte bound holds throughout.
        for i in 0..5000 {
            let p = PathBuf::from(format!("/www/f{i}.js"));
            c.insert_variant(&p, &src, bytes(1000 + i % 3000));
            assert!(c.stats().bytes <= 1 << 20);
        }
        let s = c.stats();
        assert!(s.evictions > 0 && s.bytes > (1 << 20) / 2, "{s:?}");
        check(&c);
    }

    #[test]
    fn shard_count_follows_budget() {
        assert_eq!(PageCache::new(64 << 20, 256 << 10).shards.len(), 16);
        assert_eq!(PageCache::new(1 << 20, 256 << 10).shards.len(), 4);
        assert_eq!(PageCache::new(100, 100).shards.len(), 1);
        assert_eq!(PageCache::new(0, 0).shards.len(), 1);
    }

    #[test]
    fn concurrent_use_keeps_invariants() {
        let c = Arc::new(PageCache::new(4096, 256));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for i in 0..2000usize {
                        let p = PathBuf::from(format!("/f{}", (i * 7 + t) % 50));
                        let size = (i * 13) % 200;
                        let m = meta(size, (i % 3) as u64);
                        if c.get(&p, &m).is_none() {
                            c.insert(&p, &m, bytes(size));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        check(&c);
        let s = c.stats();
        assert_eq!(s.hits + s.misses, 8000);
        assert!(s.bytes <= 4096);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Get(u8, u8),
            Insert(u8, u8, u8),
            Remove(u8),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0u8..8, 0u8..3).prop_map(|(p, v)| Op::Get(p, v)),
                (0u8..8, 0u8..3, 0u8..40).prop_map(|(p, v, s)| Op::Insert(p, v, s)),
                (0u8..8).prop_map(Op::Remove),
            ]
        }

        proptest! {
            /// Against a model without a bound: a hit always returns what was
            /// last inserted under the same meta; invariants always hold.
            #[test]
            fn matches_model(ops in prop::collection::vec(op(), 0..200)) {
                let c = PageCache::new(100, 40);
                let mut model: std::collections::HashMap<u8, (FileMeta, Arc<[u8]>)> = Default::default();
                for op in ops {
                    match op {
                        Op::Get(p, v) => {
                            let path = PathBuf::from(format!("p{p}"));
                            let size = model.get(&p).map_or(0, |(m, _)| m.size as usize);
                            let m = meta(size, u64::from(v));
                            if let Some(got) = c.get(&path, &m) {
                                let (mm, mb) = model.get(&p).expect("hit on never-inserted path");
                                prop_assert_eq!(mm, &m);
                                prop_assert_eq!(&got, mb);
                            }
                        }
                        Op::Insert(p, v, s) => {
                            let path = PathBuf::from(format!("p{p}"));
                            let m = meta(usize::from(s), u64::from(v));
                            let b: Arc<[u8]> = vec![p ^ v ^ s; usize::from(s)].into();
                            if c.insert(&path, &m, Arc::clone(&b)) {
                                model.insert(p, (m, b));
                            }
                        }
                        Op::Remove(p) => {
                            c.remove(&PathBuf::from(format!("p{p}")));
                            model.remove(&p);
                        }
                    }
                    check(&c);
                }
            }
        }
    }
}
