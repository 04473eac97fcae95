//! Size classes: memcached's default slab-class ladder, laid over the item
//! sizes the store charges, so that `stats items`, `stats slabs`, `stats
//! cachedump` and `lru_crawler metadump` speak memcached's per-class
//! language.
//!
//! The store has no slab classes: items of every size share its segments
//! (see the module docs of [`store`](super)). A *class* here is only a
//! bucket of item sizes: an item charged `c` bytes (`key + value +`
//! [`ITEM_OVERHEAD`](super::ITEM_OVERHEAD)) belongs to the smallest class
//! whose chunk size is at least `c`, on memcached's default ladder (`-n 48
//! -f 1.25`, 1 MiB pages: 96, 120, 152, … 394840, and 524288 bytes for
//! class 39). Items larger than the last chunk (memcached chains such items
//! over several chunks) are counted in class 39.
//!
//! Per-class counters live beside the shard's other counters and follow the
//! same discipline (written under the shard's lock, read without it); see
//! [`ClassCounter`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// memcached's page size with its default `-I 1m`.
pub const PAGE_SIZE: usize = 1 << 20;

/// The number of classes (ids `1..=CLASSES`, as memcached numbers them).
pub const CLASSES: usize = 39;

/// Chunk sizes of classes `1..=CLASSES` (index 0 is class 1), computed as
/// memcached computes them: start at 96, multiply by 1.25 (truncating),
/// round up to 8, stop before reaching `chunk max / 1.25`; the last class is
/// the chunk max, half a page.
pub const CHUNK_SIZES: [usize; CLASSES] = ladder();

const fn ladder() -> [usize; CLASSES] {
    let mut out = [0usize; CLASSES];
    let chunk_max = PAGE_SIZE / 2;
    // size × 1.25 truncated = size × 5 / 4 truncated; size ≥ chunk_max / 1.25
    // is size × 5 ≥ chunk_max × 4.
    let mut size = 96usize;
    let mut i = 0;
    while i < CLASSES - 1 && size * 5 < chunk_max * 4 {
        if !size.is_multiple_of(8) {
            size += 8 - size % 8;
        }
        out[i] = size;
        size = size * 5 / 4;
        i += 1;
    }
    out[i] = chunk_max;
    out
}

/// The class (1..=[`CLASSES`]) of an item charged `charge` bytes.
#[inline]
pub fn class_of(charge: usize) -> usize {
    CHUNK_SIZES
        .partition_point(|&c| c < charge)
        .min(CLASSES - 1)
        + 1
}

/// The chunk size of class `id` (1..=[`CLASSES`]).
pub fn chunk_size(id: usize) -> usize {
    CHUNK_SIZES[id - 1]
}

/// How many chunks of class `id` one memcached page holds.
pub fn chunks_per_page(id: usize) -> usize {
    PAGE_SIZE / chunk_size(id)
}

macro_rules! class_counters {
    ($( $(#[$doc:meta])* $variant:ident => $field:ident, )*) => {
        /// A per-class counter, named after memcached's `stats items` /
        /// `stats slabs` field it feeds.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum ClassCounter {
            $( $(#[$doc])* $variant, )*
        }

        impl ClassCounter {
            /// How many there are.
            pub const COUNT: usize = [$(ClassCounter::$variant),*].len();
        }

        /// One class's counters summed over the shards, plus the age of its
        /// oldest item.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct ClassStats {
            /// The class id (1..=39).
            pub id: usize,
            $( $(#[$doc])* pub $field: u64, )*
            /// Seconds since the least recently used item of the class was
            /// stored or fetched (memcached's `age`: the age of its LRU tail).
            pub age: u64,
        }

        impl ClassStats {
            fn from_sums(id: usize, sums: &[u64; ClassCounter::COUNT]) -> ClassStats {
                ClassStats {
                    id,
                    $( $field: sums[ClassCounter::$variant as usize], )*
                    age: 0,
                }
            }
        }
    };
}

class_counters! {
    /// Items linked (a gauge).
    Number => number,
    /// Bytes charged for them (a gauge; memcached's `mem_requested`).
    MemRequested => mem_requested,
    /// Live items evicted from the LRU tail to make room.
    Evicted => evicted,
    /// Evicted items that had an expiry time.
    EvictedNonzero => evicted_nonzero,
    /// Seconds since the last evicted item was stored or fetched, at its
    /// eviction (a gauge).
    EvictedTime => evicted_time,
    /// Evicted items never fetched.
    EvictedUnfetched => evicted_unfetched,
    /// Evicted items read since they were written or last moved: their
    /// second chance found no room (memcached's `evicted_active`).
    EvictedActive => evicted_active,
    /// Expired items reclaimed that were never fetched.
    ExpiredUnfetched => expired_unfetched,
    /// Expired or flushed items reclaimed (on access, at the LRU tail, by a
    /// sweep).
    Reclaimed => reclaimed,
    /// Stores refused because the item exceeds a shard's share of memory.
    OutOfMemory => outofmemory,
    /// Items reclaimed by the background sweep or `lru_crawler crawl`.
    CrawlerReclaimed => crawler_reclaimed,
    /// Items the sweep or crawler examined.
    CrawlerItemsChecked => crawler_items_checked,
    /// Items stored (memcached's per-class `cmd_set`; counted when the new
    /// item is linked).
    CmdSet => cmd_set,
    /// Retrievals that found an item of the class.
    GetHits => get_hits,
    /// Deletions that removed one.
    DeleteHits => delete_hits,
    /// `incr` hits.
    IncrHits => incr_hits,
    /// `decr` hits.
    DecrHits => decr_hits,
    /// `cas` hits.
    CasHits => cas_hits,
    /// `cas` with a stale unique.
    CasBadval => cas_badval,
    /// Touches that found an item.
    TouchHits => touch_hits,
}

/// One shard's per-class counters: `[class][counter]`, class 0 unused.
pub(crate) struct ClassTable {
    cells: Box<[[AtomicU64; ClassCounter::COUNT]]>,
}

impl ClassTable {
    pub(crate) fn new() -> ClassTable {
        ClassTable {
            cells: (0..=CLASSES)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Adds `n` (wrapping, so `add(.., -1)` subtracts). The caller holds the
    /// shard's lock.
    #[inline]
    pub(crate) fn add(&self, class: usize, c: ClassCounter, n: i64) {
        let a = &self.cells[class][c as usize];
        a.store(a.load(Relaxed).wrapping_add(n as u64), Relaxed);
    }

    /// Sets a gauge. The caller holds the shard's lock.
    #[inline]
    pub(crate) fn set(&self, class: usize, c: ClassCounter, v: u64) {
        self.cells[class][c as usize].store(v, Relaxed);
    }

    pub(crate) fn add_into(&self, sums: &mut [[u64; ClassCounter::COUNT]]) {
        for (s, row) in sums.iter_mut().zip(self.cells.iter()) {
            for (x, a) in s.iter_mut().zip(row) {
                *x = x.wrapping_add(a.load(Relaxed));
            }
        }
    }

    /// Zeroes every counter but the gauges. The caller holds the shard's lock.
    pub(crate) fn reset(&self) {
        for row in self.cells.iter() {
            for (i, a) in row.iter().enumerate() {
                if i != ClassCounter::Number as usize && i != ClassCounter::MemRequested as usize {
                    a.store(0, Relaxed);
                }
            }
        }
    }
}

/// Sums per-shard class counters into per-class snapshots (classes with no
/// counts at all are left out). `ages[c]` is the age of class `c`'s oldest item.
pub(crate) fn snapshot(sums: &[[u64; ClassCounter::COUNT]], ages: &[u64]) -> Vec<ClassStats> {
    (1..=CLASSES)
        .filter(|&c| sums[c].iter().any(|&v| v != 0))
        .map(|c| ClassStats {
            age: ages[c],
            ..ClassStats::from_sums(c, &sums[c])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_is_memcacheds() {
        // `memcached -vv` (1.6.18, defaults) prints these chunk sizes.
        let want = [
            96, 120, 152, 192, 240, 304, 384, 480, 600, 752, 944, 1184, 1480, 1856, 2320, 2904,
            3632, 4544, 5680, 7104, 8880, 11104, 13880, 17352, 21696, 27120, 33904, 42384, 52984,
            66232, 82792, 103496, 129376, 161720, 202152, 252696, 315872, 394840, 524288,
        ];
        assert_eq!(CHUNK_SIZES, want);
        assert_eq!(chunks_per_page(1), 10922);
        assert_eq!(chunks_per_page(39), 2);
    }

    #[test]
    fn class_of_picks_the_smallest_chunk_that_fits() {
        assert_eq!(class_of(1), 1);
        assert_eq!(class_of(96), 1);
        assert_eq!(class_of(97), 2);
        assert_eq!(class_of(120), 2);
        assert_eq!(class_of(121), 3);
        assert_eq!(class_of(524288), 39);
        assert_eq!(class_of(1 << 30), 39);
    }
}
