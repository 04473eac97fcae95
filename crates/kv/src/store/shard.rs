//! One shard: a hash table of slot indices, a slab of slots, an LRU list
//! threaded through the slots, and the shard's byte count.
//!
//! Everything here runs with the shard's lock held: a `Shard` is only reachable
//! through the `MutexGuard` of its cell (memcached's `do_x()` convention: the
//! caller holds the lock).
//!
//! # Layout
//!
//! ```text
//!  table: HashTable<u32> ──► slots: Vec<Slot>   (index = slot number)
//!                             ├─ live slot: data = key ++ value, on the LRU list
//!                             └─ free slot: data empty, on the free list
//!  head ◄──► … ◄──► tail      (most recently used at the head, evict at the tail)
//! ```
//!
//! Both lists run through the slots' `prev`/`next` fields. Freed slots are
//! reused before the array grows; `compact` (run by sweeps, a bounded number
//! of moves per call) moves live slots from the end of the array into holes
//! and shrinks it while more than a quarter of it is free, so a shift from many
//! small items to few large ones does not leave the memory of idle slots
//! behind.
//!
//! Invariants (checked by `check` in tests):
//! - a slot is live iff it is in the table iff it is on the LRU list;
//! - the other slots form the doubly linked free list, `free_len` long;
//! - `bytes` is the sum of `charge()` over live slots and never exceeds `limit`
//!   after `make_room` + `link`.

use super::classes::{class_of, ClassCounter};
use super::stats::{Counter, ShardStats};
use super::{FlushState, Lookup, Time, ITEM_OVERHEAD};
use hashbrown::HashTable;

/// The end of a list.
pub(crate) const NIL: u32 = u32::MAX;

pub(crate) const LIVE: u8 = 1;
pub(crate) const FETCHED: u8 = 2;
pub(crate) const STALE: u8 = 4;
pub(crate) const WIN_SENT: u8 = 8;
/// Stored by `ms` with a base64 key (`me` shows it in base64).
pub(crate) const KEY_BINARY: u8 = 16;

/// One item (or a free slot). 64 bytes: one cache line.
pub(crate) struct Slot {
    /// The key followed by the value, in one allocation of exactly that size.
    pub(crate) data: Box<[u8]>,
    /// The key's hash, kept so the table can grow without re-hashing keys.
    pub(crate) hash: u64,
    /// CAS unique.
    pub(crate) cas: u64,
    /// Absolute expiry (Unix seconds), 0 = never.
    pub(crate) exptime: Time,
    /// Last store or access (Unix seconds).
    pub(crate) atime: Time,
    /// Client flags.
    pub(crate) flags: u32,
    /// The store's flush epoch when the item was stored.
    pub(crate) epoch: u32,
    /// Neighbour towards the head of the LRU (or free) list, or NIL.
    pub(crate) prev: u32,
    /// Neighbour towards the tail of the LRU (or free) list, or NIL.
    pub(crate) next: u32,
    /// Key length (keys are at most 250 bytes).
    pub(crate) klen: u8,
    /// LIVE, FETCHED, STALE, WIN_SENT, KEY_BINARY.
    pub(crate) bits: u8,
}

impl Slot {
    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        &self.data[..self.klen as usize]
    }

    #[inline]
    pub(crate) fn value(&self) -> &[u8] {
        &self.data[self.klen as usize..]
    }

    #[inline]
    pub(crate) fn charge(&self) -> usize {
        self.data.len() + ITEM_OVERHEAD
    }

    /// The size class (see `classes`).
    #[inline]
    pub(crate) fn class(&self) -> usize {
        class_of(self.charge())
    }

    #[inline]
    pub(crate) fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }

    fn free() -> Slot {
        Slot {
            data: Box::default(),
            hash: 0,
            cas: 0,
            exptime: 0,
            atime: 0,
            flags: 0,
            epoch: 0,
            prev: NIL,
            next: NIL,
            klen: 0,
            bits: 0,
        }
    }
}

pub(crate) struct Shard {
    table: HashTable<u32>,
    pub(crate) slots: Vec<Slot>,
    free: u32,
    free_len: usize,
    head: u32,
    tail: u32,
    pub(crate) bytes: usize,
    pub(crate) limit: usize,
    sweep_pos: usize,
}

impl Shard {
    pub(crate) fn new(limit: usize) -> Shard {
        Shard {
            table: HashTable::new(),
            slots: Vec::new(),
            free: NIL,
            free_len: 0,
            head: NIL,
            tail: NIL,
            bytes: 0,
            limit,
            sweep_pos: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    #[inline]
    pub(crate) fn slot(&self, i: u32) -> &Slot {
        &self.slots[i as usize]
    }

    #[inline]
    pub(crate) fn slot_mut(&mut self, i: u32) -> &mut Slot {
        &mut self.slots[i as usize]
    }

    pub(crate) fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let slots = &self.slots;
        self.table
            .find(hash, |&i| slots[i as usize].key() == key)
            .copied()
    }

    /// What a reader would see in slot `i` at `now`.
    pub(crate) fn state(&self, i: u32, now: Time, flush: FlushState) -> Lookup {
        let s = self.slot(i);
        if s.epoch != flush.epoch || s.atime < flush.cutoff(now) {
            Lookup::Flushed
        } else if s.exptime != 0 && s.exptime <= now {
            Lookup::Expired
        } else {
            Lookup::Hit
        }
    }

    fn lru_unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = self.slot(i);
            (s.prev, s.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.slot_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slot_mut(next).prev = prev;
        }
    }

    fn lru_push_head(&mut self, i: u32) {
        let old = self.head;
        {
            let s = self.slot_mut(i);
            s.prev = NIL;
            s.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            self.slot_mut(old).prev = i;
        }
        self.head = i;
    }

    /// Moves slot `i` to the head of the LRU list.
    pub(crate) fn lru_touch(&mut self, i: u32) {
        if self.head != i {
            self.lru_unlink(i);
            self.lru_push_head(i);
        }
    }

    fn free_push(&mut self, i: u32) {
        let old = self.free;
        {
            let s = self.slot_mut(i);
            s.prev = NIL;
            s.next = old;
        }
        if old != NIL {
            self.slot_mut(old).prev = i;
        }
        self.free = i;
        self.free_len += 1;
    }

    fn free_remove(&mut self, i: u32) {
        let (prev, next) = {
            let s = self.slot(i);
            (s.prev, s.next)
        };
        if prev == NIL {
            self.free = next;
        } else {
            self.slot_mut(prev).next = next;
        }
        if next != NIL {
            self.slot_mut(next).prev = prev;
        }
        self.free_len -= 1;
    }

    /// Shrinks the slot array while more than a quarter of it is free, at most
    /// `budget` slots per call: a free last slot is dropped, a live one moves
    /// into a hole (its table entry and LRU neighbours follow). Returns the
    /// number of slots removed.
    pub(crate) fn compact(&mut self, budget: usize) -> usize {
        let mut removed = 0;
        while removed < budget && self.free_len > 0 && self.free_len * 4 > self.slots.len() {
            let last = (self.slots.len() - 1) as u32;
            if self.slot(last).has(LIVE) {
                let hole = self.free;
                self.free_remove(hole);
                self.relocate(last, hole);
            } else {
                self.free_remove(last);
            }
            self.slots.pop();
            removed += 1;
        }
        let len = self.slots.len();
        if removed > 0 && self.slots.capacity() > len + len / 2 + 16 {
            // Large arrays are mmap'd by the allocator: shrinking remaps
            // pages rather than copying.
            self.slots.shrink_to(len + len / 4);
        }
        removed
    }

    /// Moves live slot `from` into free slot `to` (already off the free list);
    /// `from` is left as a free slot for the caller to drop.
    fn relocate(&mut self, from: u32, to: u32) {
        let hash = self.slot(from).hash;
        match self.table.find_mut(hash, |&j| j == from) {
            Some(e) => *e = to,
            None => unreachable!("live slot {from} missing from the table"),
        }
        self.slots.swap(from as usize, to as usize);
        let (prev, next) = {
            let s = self.slot(to);
            (s.prev, s.next)
        };
        if prev == NIL {
            self.head = to;
        } else {
            self.slot_mut(prev).next = to;
        }
        if next == NIL {
            self.tail = to;
        } else {
            self.slot_mut(next).prev = to;
        }
    }

    /// Links a new item: table, LRU head, byte count. The caller made room.
    pub(crate) fn link(&mut self, mut slot: Slot, stats: &ShardStats) -> u32 {
        slot.bits |= LIVE;
        let charge = slot.charge();
        let hash = slot.hash;
        let i = if self.free != NIL {
            let i = self.free;
            self.free_remove(i);
            self.slots[i as usize] = slot;
            i
        } else {
            if self.slots.len() == self.slots.capacity() {
                // Grow by a quarter, not a doubling: the slot array's slack is
                // part of the per-item overhead we charge (see ITEM_OVERHEAD).
                let more = (self.slots.len() / 4).max(16);
                self.slots.reserve_exact(more);
            }
            self.slots.push(slot);
            (self.slots.len() - 1) as u32
        };
        let slots = &self.slots;
        self.table
            .insert_unique(hash, i, |&j| slots[j as usize].hash);
        self.lru_push_head(i);
        self.bytes += charge;
        stats.set(Counter::Bytes, self.bytes as u64);
        stats.set(Counter::CurrItems, self.table.len() as u64);
        let class = class_of(charge);
        stats.classes.add(class, ClassCounter::Number, 1);
        stats
            .classes
            .add(class, ClassCounter::MemRequested, charge as i64);
        stats.classes.add(class, ClassCounter::CmdSet, 1);
        i
    }

    /// Removes slot `i` from the table and the LRU list, frees its memory.
    pub(crate) fn unlink(&mut self, i: u32, stats: &ShardStats) {
        let hash = self.slot(i).hash;
        match self.table.find_entry(hash, |&j| j == i) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => unreachable!("live slot {i} missing from the table"),
        }
        self.lru_unlink(i);
        let charge = self.slot(i).charge();
        self.bytes -= charge;
        let class = class_of(charge);
        stats.classes.add(class, ClassCounter::Number, -1);
        stats
            .classes
            .add(class, ClassCounter::MemRequested, -(charge as i64));
        *self.slot_mut(i) = Slot::free();
        self.free_push(i);
        stats.set(Counter::Bytes, self.bytes as u64);
        stats.set(Counter::CurrItems, self.table.len() as u64);
    }

    /// Unlinks an item found expired or flushed, counting it as reclaimed.
    pub(crate) fn reclaim(&mut self, i: u32, state: Lookup, stats: &ShardStats) {
        let class = self.slot(i).class();
        if state == Lookup::Expired && !self.slot(i).has(FETCHED) {
            stats.bump(Counter::ExpiredUnfetched);
            stats.classes.add(class, ClassCounter::ExpiredUnfetched, 1);
        }
        stats.bump(Counter::Reclaimed);
        stats.classes.add(class, ClassCounter::Reclaimed, 1);
        self.unlink(i, stats);
    }

    /// Evicts from the LRU tail until `need` more bytes fit. Returns false (and
    /// evicts nothing) when `need` alone exceeds the shard's limit.
    pub(crate) fn make_room(
        &mut self,
        need: usize,
        now: Time,
        flush: FlushState,
        stats: &ShardStats,
    ) -> bool {
        if need > self.limit {
            return false;
        }
        while self.bytes + need > self.limit {
            let t = self.tail;
            debug_assert!(t != NIL, "bytes > 0 with an empty LRU list");
            if t == NIL {
                break;
            }
            match self.state(t, now, flush) {
                Lookup::Hit => {
                    let s = self.slot(t);
                    let class = s.class();
                    stats.bump(Counter::Evictions);
                    stats.classes.add(class, ClassCounter::Evicted, 1);
                    if s.exptime != 0 {
                        stats.classes.add(class, ClassCounter::EvictedNonzero, 1);
                    }
                    let age = now.saturating_sub(s.atime);
                    stats
                        .classes
                        .set(class, ClassCounter::EvictedTime, age.into());
                    if !s.has(FETCHED) {
                        stats.bump(Counter::EvictedUnfetched);
                        stats.classes.add(class, ClassCounter::EvictedUnfetched, 1);
                    }
                    self.unlink(t, stats);
                }
                dead => self.reclaim(t, dead, stats),
            }
        }
        true
    }

    /// Examines up to `max` slots from the sweep cursor on, reclaiming expired
    /// and flushed items of the classes `classes` selects (bit `c` for class
    /// `c`), then compacts up to as many slots. Returns (slots examined, items
    /// reclaimed).
    pub(crate) fn sweep(
        &mut self,
        now: Time,
        flush: FlushState,
        max: usize,
        classes: u64,
        stats: &ShardStats,
    ) -> (usize, usize) {
        let n = self.slots.len();
        let todo = max.min(n);
        let mut reclaimed = 0;
        for _ in 0..todo {
            let i = self.sweep_pos % n;
            self.sweep_pos = i + 1;
            let i = i as u32;
            let s = self.slot(i);
            if s.has(LIVE) {
                let class = s.class();
                if classes & (1 << class) == 0 {
                    continue;
                }
                stats
                    .classes
                    .add(class, ClassCounter::CrawlerItemsChecked, 1);
                let state = self.state(i, now, flush);
                if state != Lookup::Hit {
                    stats.classes.add(class, ClassCounter::CrawlerReclaimed, 1);
                    self.reclaim(i, state, stats);
                    reclaimed += 1;
                }
            }
        }
        self.compact(todo.max(1));
        (todo, reclaimed)
    }

    /// Live slots from the LRU tail (least recently used) to the head, or
    /// from the head with `newest_first`.
    pub(crate) fn lru_order(&self, newest_first: bool) -> impl Iterator<Item = u32> + '_ {
        let first = if newest_first { self.head } else { self.tail };
        std::iter::successors((first != NIL).then_some(first), move |&i| {
            let s = self.slot(i);
            let next = if newest_first { s.next } else { s.prev };
            (next != NIL).then_some(next)
        })
    }

    /// Checks the invariants listed in the module docs (tests only).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut live = 0;
        let mut bytes = 0;
        let mut prev = NIL;
        let mut i = self.head;
        while i != NIL {
            let s = self.slot(i);
            assert!(s.has(LIVE));
            assert_eq!(s.prev, prev);
            assert_eq!(self.find(s.hash, s.key()), Some(i));
            live += 1;
            bytes += s.charge();
            prev = i;
            i = s.next;
        }
        assert_eq!(self.tail, prev);
        assert_eq!(live, self.table.len());
        assert_eq!(bytes, self.bytes);
        assert!(self.bytes <= self.limit);
        let mut free = 0;
        let mut prev = NIL;
        let mut f = self.free;
        while f != NIL {
            let s = self.slot(f);
            assert!(!s.has(LIVE));
            assert!(s.data.is_empty());
            assert_eq!(s.prev, prev);
            free += 1;
            prev = f;
            f = s.next;
        }
        assert_eq!(free, self.free_len);
        assert_eq!(live + free, self.slots.len());
    }
}
