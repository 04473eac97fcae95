//! The store's counters: one array of atomics per shard plus one global array.
//!
//! # Who writes what
//!
//! Every counter of a shard is written only while that shard's lock is held
//! (by [`Entry`](super::Entry) and the shard's own eviction and sweeping), so an
//! increment is a plain `load` + `store` (no read-modify-write instruction, no
//! bus lock); the atomics let a reader copy them without a data race. A
//! snapshot ([`Store::stats`](super::Store::stats)) copies each shard's
//! array under that shard's lock, so the counters one request bumps
//! together (`cmd_get` and `get_hits`) agree in it. The global array (for events tied to no key, such as
//! `flush_all` or a value refused by the parser) uses `fetch_add`.
//!
//! Each shard's array sits in the same 128-byte-aligned cell as its lock, so two
//! shards never share a cache line and counting costs no cross-core traffic.

use super::classes::ClassTable;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident => $field:ident, )*) => {
        /// A counter of the store, named after memcached's `stats` line it feeds.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Counter {
            $( $(#[$doc])* $variant, )*
        }

        impl Counter {
            /// How many counters there are.
            pub const COUNT: usize = [$(Counter::$variant),*].len();
        }

        /// A snapshot of every counter, summed over the shards, with memcached's
        /// stat names as field names.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $( $(#[$doc])* pub $field: u64, )*
            /// The configured memory limit in bytes.
            pub limit_maxbytes: u64,
        }

        impl Stats {
            pub(crate) fn from_sums(sums: &[u64; Counter::COUNT], limit_maxbytes: u64) -> Stats {
                Stats {
                    $( $field: sums[Counter::$variant as usize], )*
                    limit_maxbytes,
                }
            }
        }
    };
}

counters! {
    /// Retrieval requests, one per key (`get`, `gets`, `mg`).
    CmdGet => cmd_get,
    /// Storage requests (`set`, `add`, `replace`, `append`, `prepend`, `cas`, `ms`).
    CmdSet => cmd_set,
    /// `flush_all` requests.
    CmdFlush => cmd_flush,
    /// Touch requests, one per key (`touch`, `gat`, `gats`, `mg` with `T`).
    CmdTouch => cmd_touch,
    /// `me` (meta debug) commands: memcached 1.6 counts only these in its
    /// `cmd_meta`, not `mg`/`ms`/`md`/`ma`.
    CmdMeta => cmd_meta,
    /// Retrievals that found the key.
    GetHits => get_hits,
    /// Retrievals that did not find the key.
    GetMisses => get_misses,
    /// Retrievals that found the key expired.
    GetExpired => get_expired,
    /// Retrievals that found the key invalidated by `flush_all`.
    GetFlushed => get_flushed,
    /// Deletions that removed an item.
    DeleteHits => delete_hits,
    /// Deletions of a missing key.
    DeleteMisses => delete_misses,
    /// Successful `incr`.
    IncrHits => incr_hits,
    /// `incr` of a missing key.
    IncrMisses => incr_misses,
    /// Successful `decr`.
    DecrHits => decr_hits,
    /// `decr` of a missing key.
    DecrMisses => decr_misses,
    /// `cas` that matched and stored.
    CasHits => cas_hits,
    /// `cas` of a missing key.
    CasMisses => cas_misses,
    /// `cas` that found the key with another CAS unique.
    CasBadval => cas_badval,
    /// Touches that found the key.
    TouchHits => touch_hits,
    /// Touches of a missing key.
    TouchMisses => touch_misses,
    /// Storage requests refused because the value exceeds the item size limit.
    StoreTooLarge => store_too_large,
    /// Storage requests refused because the item exceeds a shard's memory.
    StoreNoMemory => store_no_memory,
    /// Live items removed to make room.
    Evictions => evictions,
    /// Evicted items that were never fetched.
    EvictedUnfetched => evicted_unfetched,
    /// Evicted items read since they were written or last moved (their
    /// second chance found no room).
    EvictedActive => evicted_active,
    /// Expired items reclaimed (as `reclaimed` counts them) that were never
    /// fetched.
    ExpiredUnfetched => expired_unfetched,
    /// Expired or flushed items reclaimed where their memory is taken
    /// (eviction's walk, a sweep); not those a read finds (memcached's
    /// `get_expired`, `get_flushed`).
    Reclaimed => reclaimed,
    /// Dead items the background sweep or `lru_crawler crawl` reclaimed.
    CrawlerReclaimed => crawler_reclaimed,
    /// Items the background sweep or `lru_crawler crawl` examined.
    CrawlerItemsChecked => crawler_items_checked,
    /// Items currently linked (a gauge; expired items count until reclaimed).
    CurrItems => curr_items,
    /// Items stored since start.
    TotalItems => total_items,
    /// Bytes charged for the linked items (a gauge; see `ITEM_OVERHEAD`).
    Bytes => bytes,
}

/// One shard's counters (written under that shard's lock only), with its
/// per-size-class counters.
pub(crate) struct ShardStats {
    counters: [AtomicU64; Counter::COUNT],
    pub(crate) classes: ClassTable,
    /// Where the shard's evictions are logged (the store's `watch`).
    pub(crate) watch: std::sync::Arc<crate::watch::Watch>,
}

impl ShardStats {
    pub(crate) fn new(watch: std::sync::Arc<crate::watch::Watch>) -> ShardStats {
        ShardStats {
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
            classes: ClassTable::new(),
            watch,
        }
    }

    /// Adds one. The caller holds the shard's lock (see the module docs).
    #[inline]
    pub(crate) fn bump(&self, c: Counter) {
        let a = &self.counters[c as usize];
        a.store(a.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Takes back one [`bump`](Self::bump) of this request. The caller holds
    /// the shard's lock.
    #[inline]
    pub(crate) fn unbump(&self, c: Counter) {
        let a = &self.counters[c as usize];
        a.store(a.load(Relaxed).wrapping_sub(1), Relaxed);
    }

    /// Sets a gauge. The caller holds the shard's lock.
    #[inline]
    pub(crate) fn set(&self, c: Counter, v: u64) {
        self.counters[c as usize].store(v, Relaxed);
    }

    pub(crate) fn add_into(&self, sums: &mut [u64; Counter::COUNT]) {
        for (s, a) in sums.iter_mut().zip(&self.counters) {
            *s = s.wrapping_add(a.load(Relaxed));
        }
    }

    /// Zeroes every counter except the gauges. The caller holds the shard's lock.
    pub(crate) fn reset(&self) {
        for (i, a) in self.counters.iter().enumerate() {
            if i != Counter::CurrItems as usize && i != Counter::Bytes as usize {
                a.store(0, Relaxed);
            }
        }
        self.classes.reset();
    }
}

/// Counters tied to no shard, bumped with `fetch_add`.
pub(crate) struct GlobalStats {
    counters: [AtomicU64; Counter::COUNT],
}

impl GlobalStats {
    pub(crate) fn new() -> GlobalStats {
        GlobalStats {
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub(crate) fn bump(&self, c: Counter) {
        self.counters[c as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn add_into(&self, sums: &mut [u64; Counter::COUNT]) {
        for (s, a) in sums.iter_mut().zip(&self.counters) {
            *s = s.wrapping_add(a.load(Relaxed));
        }
    }

    pub(crate) fn reset(&self) {
        for a in &self.counters {
            a.store(0, Relaxed);
        }
    }
}
