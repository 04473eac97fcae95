//! One shard: items packed into fixed-size segments, a hash table of item
//! locations, segment-level eviction with a second chance, and the shard's
//! memory budget.
//!
//! Everything here runs with the shard's lock held: a `Shard` is only reachable
//! through the `MutexGuard` of its cell (memcached's `do_x()` convention: the
//! caller holds the lock).
//!
//! # Layout
//!
//! ```text
//!  table: HashTable<Loc> ──► segs[seg]: [ header key value | header key value | … ]
//!  fifo:  oldest segment … newest (the head, where new items are appended)
//! ```
//!
//! An item is a 32-byte header, its key and its value, 8-byte aligned, written
//! once at the end of the head segment (log-structured, as pelikan's
//! segcache). The table holds a `u32` location per item and no hash: the hash
//! is recomputed from the key when the table grows. Replacing or deleting an
//! item only clears its `LIVE` bit and the bytes become garbage of their
//! segment; a segment whose items are all dead is freed at once.
//!
//! Memory is **bounded by construction**: item memory comes only from
//! segments (normal ones of `seg_size` bytes; an item too large for one, or
//! outside a memory file larger than a quarter of one where that wastes
//! less, gets a segment of its own in whole pages: see `Shard::single`),
//! and segments plus the table never exceed the
//! shard's limit. When a new item needs room, the shard frees a segment:
//! - *cleaning*: a segment at most a quarter live (deletes, overwrites,
//!   expiry) has its live items moved to the head and is freed — garbage is
//!   reclaimed before anything live is evicted;
//! - otherwise *eviction* of the oldest segment, with a second chance: items
//!   read since they were written (the `ACCESSED` bit) move to the head (up to
//!   half a segment's worth per eviction, their bit cleared), the rest are
//!   evicted. This is CLOCK at segment granularity, which tracks LRU closely
//!   without any per-item list links or writes on a hit beyond one bit.
//!
//! Without evictions (`StoreConfig::evictions` false, memcached's `-M`)
//! nothing live is dropped: room comes only from cleaning, from compacting
//! a segment with enough dead bytes (its live items move to the head, every
//! one, `ACCESSED` or not) and from a pass that reclaims expired and flushed
//! items; when none of them gives room the write fails (see `free_dead`).
//!
//! Moves during eviction may use one segment beyond the budget for a moment,
//! so the budget is the limit less one segment. (When the hash table has
//! just grown, a shard can be over its budget until the insert that grew it
//! has freed enough: the moment may then take one segment past the limit.)
//!
//! Invariants (checked by `check` in tests):
//! - an item is live iff its `LIVE` bit is set iff the table holds its location;
//! - each segment's `live` is the sum of its live items' sizes, and `bytes`
//!   the sum of the live items' charges;
//! - a free segment id holds no memory and is in neither the fifo nor in use;
//! - `allocated + table_bytes() <= limit`.

use super::block::{Block, SharedValue};
use super::classes::{class_of, ClassCounter};
use super::memfile::{ShardFile, SlotEntry};
use super::stats::{Counter, ShardStats};
use super::{FlushState, Item, Lookup, Time};
use hashbrown::HashTable;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;

pub(crate) const LIVE: u8 = 1;
pub(crate) const FETCHED: u8 = 2;
pub(crate) const STALE: u8 = 4;
pub(crate) const WIN_SENT: u8 = 8;
/// Read since written or last given a second chance.
pub(crate) const ACCESSED: u8 = 16;
/// Stored by `ms` with a base64 key (`me` shows it in base64).
pub(crate) const KEY_BINARY: u8 = 32;

/// Values at least this large get a segment of their own (outside a memory
/// file, whose slots are reused at once) and a get sends them from there
/// (see `block`): a copy of them costs more than the part of a page they
/// may leave unused.
pub(crate) const SHARE_MIN: usize = 64 * 1024;

/// Bytes of an item's header in its segment.
pub(crate) const HEADER: usize = 32;

/// How many cache lines of an item a hint loads ([`Shard::prefetch`]): an
/// item is 8-aligned, not line-aligned, so the header, key and a small
/// value (the paper's 10-103 bytes: items of 50-150 bytes) often straddle
/// three lines, and the value's copy into the answer waited for the lines
/// after the header's (a get of 16 keys of 64-byte values in a store of a
/// million items: 0.90x the server CPU of one line's hint,
/// `docs/results/kv-multiget/prefetch/lines-0308bb0/`).
const PREFETCH_LINES: usize = 3;

/// Bytes of a cache line (x86-64 and most ARM cores).
const CACHE_LINE: usize = 64;

// Header layout (little endian).
const H_CAS: usize = 0;
const H_EXPTIME: usize = 8;
const H_ATIME: usize = 12;
const H_FLAGS: usize = 16;
const H_VLEN: usize = 20;
const H_KLEN: usize = 24;
const H_BITS: usize = 25;
const H_EPOCH: usize = 28;

/// The largest normal segment (memcached's page size); smaller shards get
/// smaller ones (see [`seg_size_for`]) so that eviction frees a small share
/// of the shard at a time.
pub(crate) const MAX_SEG: usize = 1 << 20;
const MIN_SEG: usize = 256;
/// The page size the segments of one item are rounded to.
const PAGE: usize = 4096;
/// Offsets inside a segment are stored in 8-byte units, 17 bits of a [`Loc`].
const OFF_BITS: u32 = 17;
/// Segment ids take the other 15 bits.
const MAX_SEGS: usize = 1 << (32 - OFF_BITS);

/// An item's location: segment id and offset / 8.
pub(crate) type Loc = u32;

#[inline]
fn loc(seg: u32, off: usize) -> Loc {
    debug_assert!(off.is_multiple_of(8) && off < MAX_SEG);
    seg << OFF_BITS | (off >> 3) as u32
}

#[inline]
fn seg_of(l: Loc) -> usize {
    (l >> OFF_BITS) as usize
}

#[inline]
fn off_of(l: Loc) -> usize {
    ((l & ((1 << OFF_BITS) - 1)) as usize) << 3
}

#[inline]
fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Copies `src` into `dst` (of the same length) in pieces of at most 2 KiB.
/// Why: glibc's `memcpy` takes `rep movsb` from 2,112 bytes on, and on this
/// project's AMD EPYC machines that made a 12 KB set cost 10.5-13.5 us of
/// server CPU where the vector loop it uses below that costs 7.5-10 (the
/// same server under `GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold`
/// raised); on CPUs where `rep movsb` is fast the loop is as fast.
#[inline]
fn copy_chunked(dst: &mut [u8], src: &[u8]) {
    const PIECE: usize = 2048;
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        d.copy_from_slice(s);
    }
}

/// Bytes an item of `klen` + `vlen` takes in a segment.
#[inline]
pub(crate) fn item_size(klen: usize, vlen: usize) -> usize {
    align8(HEADER + klen + vlen)
}

/// The normal segment size for a shard limited to `limit` bytes: about a
/// 64th of it, a power of two between 256 bytes and 1 MiB.
pub(crate) fn seg_size_for(limit: usize) -> usize {
    (limit / 64)
        .clamp(MIN_SEG, MAX_SEG)
        .next_power_of_two()
        .min(MAX_SEG)
}

/// The hash of the key stored at a location: the table keeps no hashes, so
/// it rehashes from the segments when it grows, shrinks or inserts.
fn rehash<'a>(segs: &'a [Segment], hasher: &'a super::Hasher) -> impl Fn(&Loc) -> u64 + 'a {
    move |&l| {
        let r = &segs[seg_of(l)].data[off_of(l)..];
        hasher.hash_one(&r[HEADER..HEADER + r[H_KLEN] as usize])
    }
}

/// An item's header, as a fixed-size array: fields at constant offsets are
/// read and written without bounds checks (a get reads several).
type Header = [u8; HEADER];

#[inline(always)]
fn rd32(h: &Header, at: usize) -> u32 {
    u32::from_le_bytes(h[at..at + 4].try_into().unwrap())
}

#[inline(always)]
fn wr32(h: &mut Header, at: usize, v: u32) {
    h[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// What a new item is made of.
pub(crate) struct NewItem<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) parts: &'a [&'a [u8]],
    /// Bytes of the value already in place in the staged block given with
    /// it (see [`Shard::insert`]); `parts` is then empty.
    pub(crate) staged: usize,
    pub(crate) cas: u64,
    pub(crate) exptime: Time,
    pub(crate) atime: Time,
    pub(crate) flags: u32,
    pub(crate) epoch: u32,
    pub(crate) bits: u8,
}

impl NewItem<'_> {
    fn vlen(&self) -> usize {
        self.staged + self.parts.iter().map(|p| p.len()).sum::<usize>()
    }
}

#[derive(Default)]
struct Segment {
    data: Block,
    /// Bytes written (items are appended).
    used: usize,
    /// Bytes of live items.
    live: usize,
    /// Opening order (the memory file keeps it for a restart).
    seq: u64,
    /// A segment of one item, made for it (see [`Shard::single`]): freed
    /// with its item, never a head, never cleaned.
    single: bool,
    /// Bit `c` set once an item of class `c` was written here (a superset
    /// of the classes of its live items): `stats items` looks for each
    /// class's oldest item only in segments that may hold one.
    classes: u64,
}

/// The classes an item of `size` bytes (its charge rounded up to 8) may be
/// in, as [`Segment::classes`] bits.
fn class_bits(size: usize) -> u64 {
    (1 << class_of(size.saturating_sub(7).max(1))) | (1 << class_of(size))
}

pub(crate) struct Shard {
    table: HashTable<Loc>,
    hasher: super::Hasher,
    segs: Vec<Segment>,
    free_ids: Vec<u32>,
    /// Segments in the order they were opened; the head is the last.
    fifo: VecDeque<u32>,
    head: Option<u32>,
    /// One freed segment kept for the next of its size, so eviction does
    /// not go back to the kernel each time (a mapping made and unmapped per
    /// stored item doubled the CPU of a set of 20 KB). Counted in
    /// `allocated`. Given back by a sweep that finds it unused since the
    /// last (a large value received into its item takes the spare while its
    /// old item lives, so overwrites keep one: held only while they go on).
    spare: Option<Block>,
    /// The spare was taken or made since the last sweep.
    spare_used: bool,
    seg_size: usize,
    /// Bytes of segment memory held (including `spare`).
    allocated: usize,
    /// The segment being emptied by eviction (not freed by `unlink`).
    evicting: Option<usize>,
    /// False once a look for a sealed normal segment at most a quarter
    /// live (cleaning's victim) found none, until one may exist again (an
    /// item of one died, a head was sealed): evicting one large item per
    /// store then does not scan every segment each time.
    sparse: bool,
    /// The sum of live items' charges (`stats bytes`).
    pub(crate) bytes: usize,
    pub(crate) limit: usize,
    sweep_pos: (usize, usize),
    /// With a memory file: the segments are its slots (a segment's id is
    /// its first slot), and `taken` says which slots are in use.
    file: Option<ShardFile>,
    taken: Vec<bool>,
    seq: u64,
    /// Whether live items may be evicted (see `StoreConfig::evictions`).
    pub(crate) evictions: bool,
    /// Without evictions: items linked that a flush already hid (written
    /// in the second of a delayed flush's cut-off), the one way something
    /// dies without the time or the flush state changing.
    born_hidden: u64,
    /// Without evictions: the (time, flush epoch, flush cut-off,
    /// `born_hidden`) at which a pass over the shard last found no expired
    /// or flushed item, so that writes failing again before any of them
    /// changes skip the pass (at most one pass a second under churn).
    no_dead: Option<(Time, u32, Time, u64)>,
    /// Segments the kernel refused to map (memcached's `malloc_fails`).
    pub(crate) malloc_fails: u64,
    /// Times the table grew (tests count rehashes with it).
    #[cfg(test)]
    pub(crate) table_grows: usize,
}

impl Shard {
    pub(crate) fn new(limit: usize, hasher: super::Hasher) -> Shard {
        Shard {
            table: HashTable::new(),
            hasher,
            segs: Vec::new(),
            free_ids: Vec::new(),
            fifo: VecDeque::new(),
            head: None,
            spare: None,
            spare_used: false,
            seg_size: seg_size_for(limit),
            allocated: 0,
            evicting: None,
            sparse: true,
            bytes: 0,
            limit,
            sweep_pos: (0, 0),
            file: None,
            taken: Vec::new(),
            seq: 0,
            evictions: true,
            born_hidden: 0,
            no_dead: None,
            malloc_fails: 0,
            #[cfg(test)]
            table_grows: 0,
        }
    }

    /// A shard whose segments live in `file` (see `memfile`), empty.
    pub(crate) fn with_file(limit: usize, hasher: super::Hasher, file: ShardFile) -> Shard {
        let mut s = Shard::new(limit, hasher);
        let slots = file.slots();
        s.segs.resize_with(slots, Segment::default);
        s.taken = vec![false; slots];
        s.file = Some(file);
        s
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// What the memory file holds for this shard (unbounded without one).
    pub(crate) fn file_capacity(&self) -> usize {
        match &self.file {
            Some(f) => f.slots() * self.seg_size,
            None => usize::MAX,
        }
    }

    /// The size of a normal segment.
    pub(crate) fn seg_size(&self) -> usize {
        self.seg_size
    }

    /// Bytes of segment memory held.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated
    }

    /// What the table takes: a `u32` and a control byte per bucket, buckets
    /// being capacity × 8/7.
    pub(crate) fn table_bytes(&self) -> usize {
        self.table.capacity() * 8 / 7 * 5
    }

    /// The most segment memory the shard may hold between operations.
    fn budget(&self) -> usize {
        self.limit
            .saturating_sub(self.seg_size)
            .saturating_sub(self.table_bytes())
    }

    /// Whether an item of `klen` + `vlen` can ever be stored here.
    pub(crate) fn fits(&self, klen: usize, vlen: usize) -> bool {
        let size = item_size(klen, vlen);
        if size <= self.seg_size {
            self.budget() >= self.seg_size
        } else {
            self.block_size(size) <= self.budget()
        }
    }

    #[inline]
    fn raw(&self, l: Loc) -> &[u8] {
        &self.segs[seg_of(l)].data[off_of(l)..]
    }

    #[inline]
    fn raw_mut(&mut self, l: Loc) -> &mut [u8] {
        &mut self.segs[seg_of(l)].data.bytes_mut()[off_of(l)..]
    }

    #[inline]
    fn hdr(&self, l: Loc) -> &Header {
        self.raw(l)[..HEADER].try_into().unwrap()
    }

    #[inline]
    fn hdr_mut(&mut self, l: Loc) -> &mut Header {
        // Not `raw_mut`: the item's value may be shared with a send.
        self.segs[seg_of(l)].data.header_mut(off_of(l))
    }

    #[inline]
    fn klen(&self, l: Loc) -> usize {
        self.hdr(l)[H_KLEN] as usize
    }

    #[inline]
    fn vlen(&self, l: Loc) -> usize {
        rd32(self.hdr(l), H_VLEN) as usize
    }

    #[inline]
    pub(crate) fn key(&self, l: Loc) -> &[u8] {
        let r = self.raw(l);
        &r[HEADER..HEADER + r[H_KLEN] as usize]
    }

    #[inline]
    pub(crate) fn bits(&self, l: Loc) -> u8 {
        self.hdr(l)[H_BITS]
    }

    #[inline]
    pub(crate) fn has(&self, l: Loc, bit: u8) -> bool {
        self.bits(l) & bit != 0
    }

    pub(crate) fn set_bits(&mut self, l: Loc, set: u8, clear: u8) {
        let b = &mut self.hdr_mut(l)[H_BITS];
        *b = (*b | set) & !clear;
    }

    /// A read: sets `bits` and the access time in one go.
    #[inline]
    pub(crate) fn touch(&mut self, l: Loc, bits: u8, t: Time) {
        let h = self.hdr_mut(l);
        h[H_BITS] |= bits;
        wr32(h, H_ATIME, t);
    }

    pub(crate) fn atime(&self, l: Loc) -> Time {
        rd32(self.hdr(l), H_ATIME)
    }

    pub(crate) fn exptime(&self, l: Loc) -> Time {
        rd32(self.hdr(l), H_EXPTIME)
    }

    pub(crate) fn set_exptime(&mut self, l: Loc, t: Time) {
        wr32(self.hdr_mut(l), H_EXPTIME, t);
    }

    pub(crate) fn set_cas(&mut self, l: Loc, cas: u64) {
        self.hdr_mut(l)[H_CAS..H_CAS + 8].copy_from_slice(&cas.to_le_bytes());
    }

    pub(crate) fn flags(&self, l: Loc) -> u32 {
        rd32(self.hdr(l), H_FLAGS)
    }

    /// What the item charges to `stats bytes`: header, key and value.
    #[inline]
    pub(crate) fn charge(&self, l: Loc) -> usize {
        let h = self.hdr(l);
        HEADER + h[H_KLEN] as usize + rd32(h, H_VLEN) as usize
    }

    /// The size class (see `classes`).
    #[inline]
    pub(crate) fn class(&self, l: Loc) -> usize {
        class_of(self.charge(l))
    }

    /// Writes `value` over the value of the item at `l`, which has exactly
    /// its length (an `incr` keeping its digits): no room needed.
    pub(crate) fn overwrite_value(&mut self, l: Loc, value: &[u8]) {
        let r = self.raw_mut(l);
        let klen = r[H_KLEN] as usize;
        let vlen = u32::from_le_bytes(r[H_VLEN..H_VLEN + 4].try_into().unwrap()) as usize;
        assert_eq!(vlen, value.len(), "an overwrite keeps the length");
        r[HEADER + klen..HEADER + klen + vlen].copy_from_slice(value);
    }

    /// The value of the item at `l`, shared (see `block`): for a value of
    /// at least [`SHARE_MIN`] bytes in a segment of its own.
    pub(crate) fn share_value(&self, l: Loc) -> Option<Arc<SharedValue>> {
        let vlen = self.vlen(l);
        let s = &self.segs[seg_of(l)];
        if self.file.is_some() || !s.single || vlen < SHARE_MIN {
            return None;
        }
        let at = off_of(l) + HEADER + self.klen(l);
        s.data.share(at..at + vlen)
    }

    /// The read-only view of the item at `l`.
    #[inline]
    pub(crate) fn item(&self, l: Loc) -> Item<'_> {
        let r = self.raw(l);
        let h: &Header = r[..HEADER].try_into().unwrap();
        let klen = h[H_KLEN] as usize;
        let vlen = rd32(h, H_VLEN) as usize;
        let bits = h[H_BITS];
        let (key, value) = r[HEADER..HEADER + klen + vlen].split_at(klen);
        Item {
            key,
            value,
            flags: rd32(h, H_FLAGS),
            cas: u64::from_le_bytes(h[H_CAS..H_CAS + 8].try_into().unwrap()),
            exptime: rd32(h, H_EXPTIME),
            last_access: rd32(h, H_ATIME),
            fetched: bits & FETCHED != 0,
            stale: bits & STALE != 0,
            win_sent: bits & WIN_SENT != 0,
            key_binary: bits & KEY_BINARY != 0,
        }
    }

    fn hash_key(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    pub(crate) fn find(&self, hash: u64, key: &[u8]) -> Option<Loc> {
        self.table.find(hash, |&l| self.key(l) == key).copied()
    }

    /// Starts loading the items that may be under `hash` (those whose
    /// table tag matches), without comparing keys: the first
    /// [`PREFETCH_LINES`] cache lines of each from its header on.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        for &l in self.table.iter_hash(hash) {
            let p = self.raw(l).as_ptr();
            for line in 0..PREFETCH_LINES {
                // Past the segment's end the address is only a hint's
                // (`wrapping_add`: never dereferenced).
                super::block::prefetch(p.wrapping_add(line * CACHE_LINE));
            }
        }
    }

    /// The item under `key` other than the one at `not` (a write that keeps
    /// the old item until the new one is linked has both for a moment).
    pub(crate) fn find_other(&self, hash: u64, key: &[u8], not: Loc) -> Option<Loc> {
        self.table
            .find(hash, |&l| l != not && self.key(l) == key)
            .copied()
    }

    /// What a reader would see at `l` at `now`.
    #[inline]
    pub(crate) fn state(&self, l: Loc, now: Time, flush: FlushState) -> Lookup {
        let h = self.hdr(l);
        let exptime = rd32(h, H_EXPTIME);
        if rd32(h, H_EPOCH) != flush.epoch || rd32(h, H_ATIME) < flush.cutoff(now) {
            Lookup::Flushed
        } else if exptime != 0 && exptime <= now {
            Lookup::Expired
        } else {
            Lookup::Hit
        }
    }

    // ---- segments ----

    /// What a segment of one item of `size` bytes takes: whole slots in a
    /// memory file, else whole pages (what the mapping holds resident;
    /// shards too small for segments of pages count bytes).
    fn block_size(&self, size: usize) -> usize {
        if self.file.is_some() {
            size.div_ceil(self.seg_size) * self.seg_size
        } else if self.seg_size >= 2 * PAGE {
            size.next_multiple_of(PAGE)
        } else {
            size
        }
    }

    /// Whether an item of `size` bytes gets a segment of its own: when it
    /// is larger than a segment, or (outside a memory file, whose slots are
    /// segments) larger than a quarter of one and its whole pages waste less
    /// than the end of a segment that `n` such items fill. Items of one size
    /// in (seg/2, seg] would leave up to half of every segment unused, in
    /// (seg/3, seg/2] up to a third (12,000 B values in 32 KiB segments, as
    /// `-m 64` has, held 71% of the limit); in pages of their own they waste
    /// less than a page each. Smaller items waste at most a fifth of a
    /// segment (memcached's slab classes, 1.25 apart, waste as much), and
    /// stay packed: a segment per item costs a mapping.
    fn single(&self, size: usize) -> bool {
        if size > self.seg_size || (self.file.is_none() && size >= SHARE_MIN) {
            return true;
        }
        if self.file.is_some() || self.seg_size < 2 * PAGE || size <= self.seg_size / 4 {
            return false;
        }
        let n = self.seg_size / size;
        n == 1 || n * self.block_size(size) < self.seg_size
    }

    fn new_file_segment(&mut self, size: usize) -> Option<u32> {
        let span = size.div_ceil(self.seg_size);
        let slot = self
            .taken
            .windows(span)
            .position(|w| w.iter().all(|t| !t))?;
        let Ok(map) = self.file.as_ref()?.map(slot, span) else {
            self.malloc_fails += 1;
            return None;
        };
        // Filled from its start and never read before it is written: the
        // kernel's readahead would bring in (for a new file's unwritten
        // blocks: zero-fill) far more pages than each write fault needs, on
        // the serving loop (a 200 ms poll at a new file's first burst). Not
        // for the restore's mappings, which are read whole.
        let _ = map.advise(memmap2::Advice::Random);
        self.taken[slot..slot + span].fill(true);
        self.seq += 1;
        self.segs[slot] = Segment {
            data: Block::mapped(map),
            used: 0,
            live: 0,
            seq: self.seq,
            single: span > 1,
            classes: 0,
        };
        self.allocated += span * self.seg_size;
        self.write_slot(slot, 0);
        self.fifo.push_back(slot as u32);
        Some(slot as u32)
    }

    /// Records segment `id` in the memory file's slot table.
    fn write_slot(&mut self, id: usize, sum: u64) {
        let s = &self.segs[id];
        let e = SlotEntry {
            seq: s.seq,
            used: s.used as u32,
            span: (s.data.len() / self.seg_size) as u32,
            sum,
        };
        if let Some(f) = self.file.as_mut() {
            f.set_slot(id, e);
        }
    }

    /// A new segment of `size` bytes, for one item if `single`; `given`'s
    /// block (of `size` bytes, outside `allocated`) becomes it if there is one.
    fn new_segment(&mut self, size: usize, single: bool, given: &mut Option<Block>) -> Option<u32> {
        if self.file.is_some() {
            return self.new_file_segment(size);
        }
        // Checked first: a given block is taken only where it stays.
        if self.free_ids.is_empty() && self.segs.len() >= MAX_SEGS {
            return None;
        }
        let data = match (given.take(), self.spare.take()) {
            (Some(d), spare) => {
                debug_assert_eq!(d.len(), size);
                self.spare = spare;
                self.allocated += d.len();
                d
            }
            // Eviction just freed a segment of this size, most often.
            (None, Some(d)) if d.len() == size => {
                self.spare_used = true;
                d
            }
            (None, other) => {
                if let Some(d) = other {
                    self.allocated -= d.len();
                }
                let Some(d) = Block::new(size) else {
                    self.malloc_fails += 1;
                    return None;
                };
                self.allocated += size;
                d
            }
        };
        self.seq += 1;
        let seg = Segment {
            data,
            used: 0,
            live: 0,
            seq: self.seq,
            single,
            classes: 0,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.segs[id as usize] = seg;
                id
            }
            None => {
                self.segs.push(seg);
                (self.segs.len() - 1) as u32
            }
        };
        self.fifo.push_back(id);
        Some(id)
    }

    fn free_segment(&mut self, id: usize) {
        if let Some(p) = self.fifo.iter().position(|&s| s as usize == id) {
            self.fifo.remove(p);
        }
        if self.head == Some(id as u32) {
            self.head = None;
        }
        let data = std::mem::take(&mut self.segs[id].data);
        self.segs[id].single = false;
        self.segs[id].used = 0;
        self.segs[id].live = 0;
        self.segs[id].seq = 0;
        if self.file.is_some() {
            let span = data.len() / self.seg_size;
            self.taken[id..id + span].fill(false);
            self.write_slot(id, 0);
            self.allocated -= data.len();
        } else {
            // Not one a send still holds: the spare is written again.
            if self.spare.is_none() && data.unique() {
                self.spare = Some(data);
                self.spare_used = true;
            } else {
                self.allocated -= data.len();
            }
            self.free_ids.push(id as u32);
        }
        if self.sweep_pos.0 == id {
            self.sweep_pos.1 = 0;
        }
    }

    /// Takes back a spare block [`staging`](Self::staging) handed out (if
    /// the shard has none meanwhile; else it goes back to the kernel).
    pub(crate) fn give_spare(&mut self, block: Block) {
        if self.spare.is_none() {
            self.allocated += block.len();
            self.spare = Some(block);
        }
    }

    /// Gives the spare segment back while the shard is over its budget.
    fn trim_spare(&mut self) {
        if self.allocated > self.budget() {
            if let Some(d) = self.spare.take() {
                self.allocated -= d.len();
            }
        }
    }

    /// Room for `size` bytes at the end of the head segment, opening a new
    /// head when it is full. `over` lets the shard go one segment beyond its
    /// budget (eviction's moves). None when there is no memory.
    fn room(&mut self, size: usize, over: bool) -> Option<Loc> {
        if let Some(h) = self.head {
            let s = &mut self.segs[h as usize];
            if s.used + size <= s.data.len() {
                let at = s.used;
                s.used += size;
                s.classes |= class_bits(size);
                return Some(loc(h, at));
            }
        }
        if let Some(old) = self.head.take() {
            if self.segs[old as usize].live == 0 {
                // Everything written to it died while it was the head.
                self.free_segment(old as usize);
            } else {
                self.note_live_fell(old as usize);
            }
        }
        let held = self.allocated - self.spare.as_ref().map_or(0, |d| d.len());
        // Eviction's moves may take one segment beyond what the shard holds
        // (the victim is freed right after) even when a table growth just
        // left it over its budget: a read item keeps its second chance.
        let limit = if over {
            self.budget().max(held) + self.seg_size
        } else {
            self.budget()
        };
        if held + self.seg_size > limit {
            return None;
        }
        let h = self.new_segment(self.seg_size, false, &mut None)?;
        self.head = Some(h);
        self.segs[h as usize].used = size;
        self.segs[h as usize].classes = class_bits(size);
        Some(loc(h, 0))
    }

    /// Writes `it` at `l` (room already taken). A staged value is in place
    /// already, unless its block did not become the item's segment
    /// (`unused`): it is copied from there then.
    fn write(&mut self, l: Loc, it: &NewItem<'_>, unused: Option<&Block>) {
        let vlen = it.vlen();
        let r = self.raw_mut(l);
        let h: &mut Header = (&mut r[..HEADER]).try_into().unwrap();
        h[H_CAS..H_CAS + 8].copy_from_slice(&it.cas.to_le_bytes());
        wr32(h, H_EXPTIME, it.exptime);
        wr32(h, H_ATIME, it.atime);
        wr32(h, H_FLAGS, it.flags);
        wr32(h, H_VLEN, vlen as u32);
        h[H_KLEN] = it.key.len() as u8;
        h[H_BITS] = it.bits | LIVE;
        wr32(h, H_EPOCH, it.epoch);
        let mut at = HEADER;
        r[at..at + it.key.len()].copy_from_slice(it.key);
        at += it.key.len();
        if let Some(b) = unused {
            copy_chunked(&mut r[at..at + it.staged], &b[at..at + it.staged]);
        }
        for p in it.parts {
            copy_chunked(&mut r[at..at + p.len()], p);
            at += p.len();
        }
    }

    /// A block to receive a value of `vlen` bytes under a key of `klen` in
    /// place (at `HEADER + klen`), to be given to [`insert`](Self::insert)
    /// as the item's own segment: the spare segment if it has the length
    /// (its pages are resident already: overwriting a key reuses its old
    /// item's), else the length of a new one. None where items of that
    /// size do not get a segment of their own (a memory file, a small
    /// value) or cannot fit at all.
    pub(crate) fn staging(&mut self, klen: usize, vlen: usize) -> Option<Result<Block, usize>> {
        let size = item_size(klen, vlen);
        if self.file.is_some() || size < SHARE_MIN || !self.single(size) || !self.fits(klen, vlen) {
            return None;
        }
        let len = self.block_size(size);
        Some(match self.spare.take() {
            Some(d) if d.len() == len => {
                self.allocated -= len;
                self.spare_used = true;
                Ok(d)
            }
            other => {
                self.spare = other;
                Err(len)
            }
        })
    }

    /// Stores a new item (the caller unlinked any old one under the key):
    /// finds room (evicting as needed), writes it, links it. None when the
    /// item can never fit (see [`Shard::fits`]). `staged`: a block of
    /// [`staging`](Self::staging)'s length holding the item's value (of
    /// `it.staged` bytes) in place, which becomes the item's segment.
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        it: &NewItem<'_>,
        mut staged: Option<Block>,
        now: Time,
        flush: FlushState,
        stats: &ShardStats,
    ) -> Option<Loc> {
        if !self.evictions && !self.growth_paid(now, flush, stats) {
            return None;
        }
        // Reserve the table slot first: its growth counts against the budget.
        #[cfg(test)]
        let cap = self.table.capacity();
        self.table.reserve(1, rehash(&self.segs, &self.hasher));
        #[cfg(test)]
        if self.table.capacity() != cap {
            self.table_grows += 1;
        }
        let Some(l) = self.place(it, &mut staged, now, flush, stats) else {
            if !self.evictions {
                // Nothing live may go to pay for the growth: give it back,
                // so the shard stays within its limit.
                let len = self.table.len();
                self.table.shrink_to(len, rehash(&self.segs, &self.hasher));
            }
            return None;
        };
        // A staged block left over (not `staging`'s length) is copied from.
        self.write(l, it, staged.as_ref());
        self.link(l, hash, stats);
        if !self.evictions && self.state(l, now, flush) != Lookup::Hit {
            self.born_hidden += 1;
        }
        Some(l)
    }

    /// Without evictions, before a full table grows: whether dead space pays
    /// for the larger table (freed here if needed). A growth nothing pays
    /// for is refused before it is made, so a full shard's refused writes
    /// do not rehash its whole table twice each (grow, then give back).
    fn growth_paid(&mut self, now: Time, flush: FlushState, stats: &ShardStats) -> bool {
        let cap = self.table.capacity();
        // Past 7 slots hashbrown doubles the buckets, and so the capacity.
        if self.table.len() < cap || cap < 8 {
            return true;
        }
        let mut tries = 0;
        loop {
            let after = self.allocated + 2 * self.table_bytes();
            if after <= self.limit {
                return true;
            }
            tries += 1;
            if !self.free_one(now, flush, stats, self.may_move(tries), after - self.limit) {
                return false;
            }
        }
    }

    /// Room for `it` after the table grew: first back under the limit if
    /// the growth took the shard past it (the one segment of slack may be
    /// less than a growth), then a place of the item's size.
    fn place(
        &mut self,
        it: &NewItem<'_>,
        staged: &mut Option<Block>,
        now: Time,
        flush: FlushState,
        stats: &ShardStats,
    ) -> Option<Loc> {
        let vlen = it.vlen();
        if !self.fits(it.key.len(), vlen) {
            return None;
        }
        let mut tries = 0;
        while self.allocated + self.table_bytes() > self.limit {
            tries += 1;
            let over = self.allocated + self.table_bytes() - self.limit;
            if !self.free_one(now, flush, stats, self.may_move(tries), over) {
                return None;
            }
        }
        let size = item_size(it.key.len(), vlen);
        if self.single(size) {
            return self.room_large(size, staged, now, flush, stats);
        }
        let mut tries = 0;
        loop {
            if let Some(l) = self.room(size, false) {
                return Some(l);
            }
            tries += 1;
            if !self.free_one(now, flush, stats, self.may_move(tries), size) {
                return None;
            }
        }
    }

    fn room_large(
        &mut self,
        size: usize,
        staged: &mut Option<Block>,
        now: Time,
        flush: FlushState,
        stats: &ShardStats,
    ) -> Option<Loc> {
        let block = self.block_size(size);
        let mut tries = 0;
        let id = loop {
            let held = self.allocated - self.spare.as_ref().map_or(0, |d| d.len());
            if held + block <= self.budget() {
                // In a memory file the slots must also be consecutive.
                // A staged block of another length (not `staging`'s) stays
                // out: `write` copies its value.
                let fits = staged.as_ref().is_some_and(|b| b.len() == block);
                let given = if fits { &mut *staged } else { &mut None };
                if let Some(id) = self.new_segment(block, true, given) {
                    break id;
                }
            }
            tries += 1;
            if !self.free_one(now, flush, stats, self.may_move(tries), block) {
                return None;
            }
        };
        self.segs[id as usize].used = size;
        self.segs[id as usize].classes = class_bits(size);
        Some(loc(id, 0))
    }

    fn link(&mut self, l: Loc, hash: u64, stats: &ShardStats) {
        let Shard {
            table,
            segs,
            hasher,
            ..
        } = self;
        table.insert_unique(hash, l, rehash(segs, hasher));
        let charge = self.charge(l);
        let size = align8(charge);
        self.segs[seg_of(l)].live += size;
        self.bytes += charge;
        stats.set(Counter::Bytes, self.bytes as u64);
        stats.set(Counter::CurrItems, self.table.len() as u64);
        let class = class_of(charge);
        stats.classes.add(class, ClassCounter::Number, 1);
        stats
            .classes
            .add(class, ClassCounter::MemRequested, charge as i64);
        stats.classes.add(class, ClassCounter::CmdSet, 1);
    }

    /// Removes the item at `l` from the table; its bytes become garbage, and
    /// its segment is freed when nothing live is left in it.
    pub(crate) fn unlink(&mut self, l: Loc, stats: &ShardStats) {
        let hash = self.hash_key(self.key(l));
        match self.table.find_entry(hash, |&j| j == l) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => unreachable!("live item {l} missing from the table"),
        }
        let charge = self.charge(l);
        self.set_bits(l, 0, LIVE);
        self.bytes -= charge;
        let class = class_of(charge);
        stats.classes.add(class, ClassCounter::Number, -1);
        stats
            .classes
            .add(class, ClassCounter::MemRequested, -(charge as i64));
        stats.set(Counter::Bytes, self.bytes as u64);
        stats.set(Counter::CurrItems, self.table.len() as u64);
        let seg = seg_of(l);
        self.segs[seg].live -= align8(charge);
        self.note_live_fell(seg);
        if self.segs[seg].live == 0 && self.head != Some(seg as u32) && self.evicting != Some(seg) {
            self.free_segment(seg);
        }
    }

    /// Unlinks an item a lookup found expired or flushed. Not counted as
    /// reclaimed: memcached counts `reclaimed` and `expired_unfetched` only
    /// where it takes a dead item's memory (the LRU tail, the crawler); a
    /// read that finds one counts in `get_expired`/`get_flushed` alone.
    pub(crate) fn drop_dead(&mut self, l: Loc, stats: &ShardStats) {
        self.unlink(l, stats);
    }

    /// Unlinks an item found expired or flushed where its memory is taken
    /// (eviction's walk, the sweep), counting it as reclaimed.
    pub(crate) fn reclaim(&mut self, l: Loc, state: Lookup, stats: &ShardStats) {
        let class = self.class(l);
        if state == Lookup::Expired && !self.has(l, FETCHED) {
            stats.bump(Counter::ExpiredUnfetched);
            stats.classes.add(class, ClassCounter::ExpiredUnfetched, 1);
        }
        stats.bump(Counter::Reclaimed);
        stats.classes.add(class, ClassCounter::Reclaimed, 1);
        self.unlink(l, stats);
    }

    fn evict(&mut self, l: Loc, now: Time, stats: &ShardStats) {
        let class = self.class(l);
        if stats.watch.wants(crate::watch::EVICTIONS) {
            self.log_eviction(l, now, &stats.watch);
        }
        stats.bump(Counter::Evictions);
        stats.classes.add(class, ClassCounter::Evicted, 1);
        if self.exptime(l) != 0 {
            stats.classes.add(class, ClassCounter::EvictedNonzero, 1);
        }
        let age = now.saturating_sub(self.atime(l));
        stats
            .classes
            .set(class, ClassCounter::EvictedTime, age.into());
        if !self.has(l, FETCHED) {
            stats.bump(Counter::EvictedUnfetched);
            stats.classes.add(class, ClassCounter::EvictedUnfetched, 1);
        }
        if self.has(l, ACCESSED) {
            stats.bump(Counter::EvictedActive);
            stats.classes.add(class, ClassCounter::EvictedActive, 1);
        }
        self.unlink(l, stats);
    }

    /// memcached's `type=eviction` line for the item at `l`.
    #[cold]
    fn log_eviction(&self, l: Loc, now: Time, watch: &crate::watch::Watch) {
        use std::io::Write as _;
        let item = self.item(l);
        let fetch = if item.fetched { "yes" } else { "no" };
        let ttl = match item.exptime {
            0 => -1,
            t => (i64::from(t) - i64::from(now)).max(0),
        };
        let la = now.saturating_sub(item.last_access);
        let (class, size) = (self.class(l), item.value.len());
        watch.log(crate::watch::EVICTIONS, |o| {
            o.extend_from_slice(b"type=eviction ");
            crate::watch::write_key(o, item.key);
            let _ = write!(
                o,
                " fetch={fetch} ttl={ttl} la={la} clsid={class} size={size}"
            );
        });
    }

    /// The locations of the items written in segment `id`, oldest first.
    fn items_of(&self, id: usize) -> Vec<Loc> {
        self.items_in(id).collect()
    }

    /// The items written in segment `id` (live or not), in order, read as
    /// they are asked for: a walk that stops early reads no more (a
    /// segment holds up to tens of thousands of small items).
    fn items_in(&self, id: usize) -> impl Iterator<Item = Loc> + '_ {
        let s = &self.segs[id];
        let mut at = 0;
        std::iter::from_fn(move || {
            if at + HEADER > s.used {
                return None;
            }
            let r: &Header = s.data[at..at + HEADER].try_into().unwrap();
            let size = item_size(r[H_KLEN] as usize, rd32(r, H_VLEN) as usize);
            debug_assert!(at + size <= s.used, "item past the end of seg {id}");
            let l = loc(id as u32, at);
            at += size;
            Some(l)
        })
    }

    /// Whether the `tries`-th call of [`free_one`](Self::free_one) in one
    /// search for room may still move items (clean, or give second
    /// chances). Moves can take a segment of their own, so a call that
    /// moves may free no memory on balance; after as many tries as there
    /// are segments (every item has had its chance by then) a call only
    /// evicts, which frees a segment every time: the search always ends.
    fn may_move(&self, tries: usize) -> bool {
        tries <= self.fifo.len() + 2
    }

    /// Frees one segment: cleans a mostly dead one, or evicts the oldest
    /// with a second chance for items read since they were written (with
    /// `moves` false: evicts the oldest, moving nothing). Returns false when
    /// there is nothing left to free. Without evictions, see
    /// [`free_dead`](Self::free_dead) (`need`: the bytes the caller wants).
    fn free_one(
        &mut self,
        now: Time,
        flush: FlushState,
        stats: &ShardStats,
        moves: bool,
        need: usize,
    ) -> bool {
        if !self.evictions {
            // Past the tries that may move, a search would only evict: fail.
            return moves && self.free_dead(now, flush, stats, need);
        }
        // A large segment holds one item: freed with it or given its second
        // chance by going to the back of the queue, without a copy.
        let mut victim = None;
        let mut cleaning = false;
        let quarter = self.seg_size / 4;
        if moves && self.sparse {
            match self
                .fifo
                .iter()
                .filter(|&&id| Some(id) != self.head && !self.segs[id as usize].single)
                .map(|&id| (self.segs[id as usize].live, id))
                .min()
            {
                Some((live, id)) if live <= quarter => {
                    victim = Some(id as usize);
                    cleaning = true;
                }
                _ => self.sparse = false,
            }
        }
        if victim.is_none() {
            let oldest = match self.fifo.front() {
                Some(&id) => id,
                None => return false,
            };
            if Some(oldest) == self.head {
                // Only the head is left: seal it and evict from it.
                self.head = None;
            }
            victim = Some(oldest as usize);
        }
        let id = victim.unwrap();
        if self.segs[id].single {
            let l = loc(id as u32, 0);
            match self.state(l, now, flush) {
                Lookup::Hit if moves && self.has(l, ACCESSED) => {
                    self.set_bits(l, 0, ACCESSED);
                    self.fifo.pop_front();
                    self.fifo.push_back(id as u32);
                }
                Lookup::Hit => self.evict(l, now, stats),
                dead => self.reclaim(l, dead, stats),
            }
            // The freed block may have become the spare: over the budget
            // (a table growth), it must go, or one eviction frees nothing.
            self.trim_spare();
            return true;
        }
        self.evicting = Some(id);
        let mut moved = 0;
        let budget = self.seg_size / 2;
        for l in self.items_of(id) {
            if !self.has(l, LIVE) {
                continue;
            }
            match self.state(l, now, flush) {
                Lookup::Hit => {
                    let size = align8(self.charge(l));
                    let keep = moves && (cleaning || self.has(l, ACCESSED));
                    // At least one item moves, however large.
                    if keep && (moved == 0 || moved + size <= budget) {
                        if let Some(to) = self.room(size, true) {
                            moved += size;
                            self.relocate(l, to, size);
                            continue;
                        }
                    }
                    self.evict(l, now, stats);
                }
                dead => self.reclaim(l, dead, stats),
            }
        }
        self.evicting = None;
        self.free_segment(id);
        self.trim_spare();
        true
    }

    /// Without evictions: makes room from dead space only, never dropping a
    /// live item. Returns whether it made progress (false: the shard is full
    /// of live items, as far as `need` goes).
    ///
    /// 1. *Compaction*: a sealed normal segment has its live items moved to
    ///    the head and is freed, when that wins room back: the one with the
    ///    fewest live bytes if it is at most a quarter live (cleaning, as
    ///    with evictions); else the one with the most dead bytes (deleted,
    ///    replaced) if they alone are `need`, or if the dead bytes of all
    ///    sealed segments are `need` and a segment more (compactions then
    ///    add up to the room wanted, each winning its dead bytes for good).
    ///    An item that finds no room stays where it is, and so does its
    ///    segment. No second chance is
    ///    involved: every live item moves, `ACCESSED` or not (a move clears
    ///    the bit, which nothing reads without evictions).
    /// 2. Otherwise a *pass* over every segment reclaims the expired and
    ///    flushed items (a large segment goes with its item, a normal one
    ///    when nothing live is left); the counts of step 1 then see their
    ///    room. A pass that found nothing is not repeated at the same time
    ///    and flush state (unless an item a flush hides was linked).
    ///
    /// Large segments (one item each) are freed only when their item dies.
    fn free_dead(&mut self, now: Time, flush: FlushState, stats: &ShardStats, need: usize) -> bool {
        // Dead bytes (`used - live`) are what compaction wins back; the
        // unused tail of a segment is not (the moved items pack as tightly).
        let mut dead = 0;
        let mut emptiest: Option<(usize, u32)> = None;
        let mut deadest: Option<(usize, u32)> = None;
        for &id in &self.fifo {
            let s = &self.segs[id as usize];
            if Some(id) == self.head || s.single {
                continue;
            }
            dead += s.used - s.live;
            if emptiest.is_none_or(|e| (s.live, id) < e) {
                emptiest = Some((s.live, id));
            }
            if deadest.is_none_or(|d| (s.used - s.live, id) > d) {
                deadest = Some((s.used - s.live, id));
            }
        }
        let victim = match (emptiest, deadest) {
            (Some((live, id)), _) if live <= self.seg_size / 4 => Some(id),
            (_, Some((d, id))) if d >= need || dead >= need.saturating_add(self.seg_size) => {
                Some(id)
            }
            _ => None,
        };
        if let Some(id) = victim {
            if self.compact(id as usize, now, flush, stats) {
                return true;
            }
        }
        let key = (now, flush.epoch, flush.cutoff(now), self.born_hidden);
        if self.no_dead == Some(key) {
            return false;
        }
        let mut reclaimed = 0;
        let ids: Vec<u32> = self.fifo.iter().copied().collect();
        for id in ids {
            let id = id as usize;
            // Kept until its items have been seen, then freed if empty.
            self.evicting = Some(id);
            for l in self.items_of(id) {
                if !self.has(l, LIVE) {
                    continue;
                }
                let state = self.state(l, now, flush);
                if state != Lookup::Hit {
                    self.reclaim(l, state, stats);
                    reclaimed += 1;
                }
            }
            self.evicting = None;
            if self.segs[id].live == 0 && self.head != Some(id as u32) {
                self.free_segment(id);
            }
        }
        self.trim_spare();
        if reclaimed == 0 {
            self.no_dead = Some(key);
        }
        reclaimed > 0
    }

    /// Moves the live items of normal segment `id` to the head, reclaims its
    /// dead ones, and frees it when nothing live is left (an item that finds
    /// no room stays). Returns whether anything changed.
    fn compact(&mut self, id: usize, now: Time, flush: FlushState, stats: &ShardStats) -> bool {
        let before = self.segs[id].live;
        self.evicting = Some(id);
        for l in self.items_of(id) {
            if !self.has(l, LIVE) {
                continue;
            }
            match self.state(l, now, flush) {
                Lookup::Hit => {
                    let size = align8(self.charge(l));
                    if let Some(to) = self.room(size, true) {
                        self.relocate(l, to, size);
                    }
                }
                dead => self.reclaim(l, dead, stats),
            }
        }
        self.evicting = None;
        let live = self.segs[id].live;
        if live == 0 {
            self.free_segment(id);
            self.trim_spare();
        }
        live < before
    }

    /// Moves the live item at `from` to `to` (room taken), clearing its
    /// second-chance bit.
    fn relocate(&mut self, from: Loc, to: Loc, size: usize) {
        let (fs, fo) = (seg_of(from), off_of(from));
        let (ts, to_off) = (seg_of(to), off_of(to));
        debug_assert_ne!(fs, ts);
        let src = std::mem::take(&mut self.segs[fs].data);
        self.segs[ts].data.bytes_mut()[to_off..to_off + size].copy_from_slice(&src[fo..fo + size]);
        self.segs[fs].data = src;
        let hash = self.hash_key(self.key(to));
        match self.table.find_mut(hash, |&j| j == from) {
            Some(e) => *e = to,
            None => unreachable!("live item {from} missing from the table"),
        }
        self.set_bits(from, 0, LIVE);
        self.set_bits(to, 0, ACCESSED);
        self.segs[fs].live -= size;
        self.segs[ts].live += size;
        self.note_live_fell(fs);
    }

    /// After segment `id` lost live bytes (or stopped being the head):
    /// whether cleaning may find a victim again.
    #[inline]
    fn note_live_fell(&mut self, id: usize) {
        let s = &self.segs[id];
        if !s.single && s.live <= self.seg_size / 4 && self.head != Some(id as u32) {
            self.sparse = true;
        }
    }

    /// Evicts until the shard is within its limit (after the limit was
    /// lowered). Returns false if it could not get there.
    pub(crate) fn shrink(&mut self, now: Time, flush: FlushState, stats: &ShardStats) -> bool {
        if let Some(d) = self.spare.take() {
            self.allocated -= d.len();
        }
        let mut tries = 0;
        while self.allocated + self.table_bytes() > self.limit.saturating_sub(self.seg_size) {
            tries += 1;
            let need = self.seg_size;
            if !self.free_one(now, flush, stats, self.may_move(tries), need) {
                return false;
            }
            if let Some(d) = self.spare.take() {
                self.allocated -= d.len();
            }
        }
        true
    }

    /// Examines up to `max` items from the sweep cursor on, reclaiming
    /// expired and flushed items of the classes `classes` selects (bit `c` for
    /// class `c`), and gives back a spare segment unused since the last
    /// sweep. Returns (items examined, items reclaimed).
    pub(crate) fn sweep(
        &mut self,
        now: Time,
        flush: FlushState,
        max: usize,
        classes: u64,
        stats: &ShardStats,
    ) -> (usize, usize) {
        if !std::mem::take(&mut self.spare_used) {
            if let Some(d) = self.spare.take() {
                self.allocated -= d.len();
            }
        }
        let mut seen = 0;
        let mut reclaimed = 0;
        let mut segs_left = self.segs.len() + 1;
        while seen < max && segs_left > 0 && !self.segs.is_empty() {
            let (mut id, mut at) = self.sweep_pos;
            if id >= self.segs.len() {
                (id, at) = (0, 0);
            }
            let s = &self.segs[id];
            if at + HEADER > s.used {
                self.sweep_pos = (id + 1, 0);
                segs_left -= 1;
                continue;
            }
            let l = loc(id as u32, at);
            let size = item_size(self.klen(l), self.vlen(l));
            self.sweep_pos = (id, at + size);
            seen += 1;
            if !self.has(l, LIVE) {
                continue;
            }
            let class = self.class(l);
            if classes & (1 << class) == 0 {
                continue;
            }
            stats
                .classes
                .add(class, ClassCounter::CrawlerItemsChecked, 1);
            stats.bump(Counter::CrawlerItemsChecked);
            let state = self.state(l, now, flush);
            if state != Lookup::Hit {
                stats.classes.add(class, ClassCounter::CrawlerReclaimed, 1);
                stats.bump(Counter::CrawlerReclaimed);
                self.reclaim(l, state, stats);
                reclaimed += 1;
            }
        }
        (seen, reclaimed)
    }

    /// Items written in this shard so far (live or not), for crawls.
    pub(crate) fn written_items(&self) -> usize {
        self.fifo
            .iter()
            .map(|&id| self.items_in(id as usize).count())
            .sum()
    }

    /// Live items from the oldest (next to be evicted) to the newest, or the
    /// other way with `newest_first`.
    /// Calls `found(c, atime)` with the access time of the oldest live item
    /// of each class `c` in `want` (bit `c`), walking the segments from the
    /// oldest and only those that may hold an item of a class still sought:
    /// the cost is in segments, and in items only of the segments that
    /// hold a sought class (a class with only new items no longer walks
    /// every item of the shard: 2M small items with a few large ones among
    /// the newest took `stats items` from 28-43 ms to 5 ms).
    pub(crate) fn oldest_of_classes(&self, mut want: u64, mut found: impl FnMut(usize, Time)) {
        for &id in &self.fifo {
            if want == 0 {
                return;
            }
            if self.segs[id as usize].classes & want == 0 {
                continue;
            }
            for l in self.items_in(id as usize) {
                if !self.has(l, LIVE) {
                    continue;
                }
                let c = self.class(l);
                if want & (1 << c) != 0 {
                    want &= !(1 << c);
                    found(c, self.atime(l));
                    if want == 0 {
                        return;
                    }
                }
            }
        }
    }

    /// Visits the live items (by `f`, as `age_order` lists them: in the
    /// order their segments were opened, then as written) from `at` on:
    /// the item at byte `at.1` of the segment opened `at.0`-th, or the
    /// first of the next segment opened after it if that one is gone. `f`
    /// returns false to stop after its item: the place to go on from is
    /// returned (`None`: every item was visited). A place stays valid
    /// across unlocking: a segment's bytes up to `used` never change until
    /// it is freed, and a segment opened again gets a new `seq`.
    /// Segments opened after the `last`-th are not visited (a listing
    /// that began before them ends: writes cannot keep it going).
    pub(crate) fn visit_from(
        &self,
        at: (u64, usize),
        last: u64,
        mut f: impl FnMut(Loc) -> bool,
    ) -> Option<(u64, usize)> {
        for (seq, id) in self.segments_by_seq(at.0..=last) {
            let s = &self.segs[id as usize];
            let mut off = if seq == at.0 { at.1 } else { 0 };
            while off + HEADER <= s.used {
                let r: &Header = s.data[off..off + HEADER].try_into().unwrap();
                let l = loc(id, off);
                off += item_size(r[H_KLEN] as usize, rd32(r, H_VLEN) as usize);
                if self.has(l, LIVE) && !f(l) {
                    return Some((seq, off));
                }
            }
        }
        None
    }

    /// Like [`visit_from`](Self::visit_from), newest first: the live items
    /// of the segment opened `at.0`-th that lie before byte `at.1`, last
    /// written first, then those of each segment opened before it, the
    /// segments newest first (`at` = (`last_seq`, `usize::MAX`) starts at
    /// the newest item). Returns where to go on from (the items before the
    /// one `f` stopped at), `None` once every item was visited. A place
    /// stays valid across unlocking for the same reasons; items written
    /// after the place was taken are not visited.
    pub(crate) fn visit_newest_from(
        &self,
        at: (u64, usize),
        mut f: impl FnMut(Loc) -> bool,
    ) -> Option<(u64, usize)> {
        for (seq, id) in self.segments_by_seq(0..=at.0).into_iter().rev() {
            let below = if seq == at.0 { at.1 } else { usize::MAX };
            for &l in self.items_of(id as usize).iter().rev() {
                if off_of(l) < below && self.has(l, LIVE) && !f(l) {
                    return Some((seq, off_of(l)));
                }
            }
        }
        None
    }

    /// The segments opened `seqs`-th (their `seq` and id), in the order
    /// they were opened: where a listing goes next.
    fn segments_by_seq(&self, seqs: std::ops::RangeInclusive<u64>) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self
            .fifo
            .iter()
            .map(|&id| (self.segs[id as usize].seq, id))
            .filter(|(seq, _)| seqs.contains(seq))
            .collect();
        v.sort_unstable();
        v
    }

    /// The `seq` of the segment opened last.
    pub(crate) fn last_seq(&self) -> u64 {
        self.seq
    }

    pub(crate) fn age_order(&self, newest_first: bool) -> impl Iterator<Item = Loc> + '_ {
        let ids: Box<dyn Iterator<Item = &u32>> = if newest_first {
            Box::new(self.fifo.iter().rev())
        } else {
            Box::new(self.fifo.iter())
        };
        ids.flat_map(move |&id| {
            let mut items = self.items_of(id as usize);
            if newest_first {
                items.reverse();
            }
            items.into_iter().filter(|&l| self.has(l, LIVE))
        })
    }

    /// Writes every segment's fill level to the memory file's slot table
    /// (a graceful shutdown, before the file is marked clean).
    pub(crate) fn persist(&mut self) -> std::io::Result<()> {
        if self.file.is_none() {
            return Ok(());
        }
        let ids: Vec<u32> = self.fifo.iter().copied().collect();
        for id in ids {
            let s = &self.segs[id as usize];
            let sum = super::memfile::content_sum(&s.data[..s.used]);
            self.write_slot(id as usize, sum);
        }
        self.file.as_ref().map_or(Ok(()), |f| f.flush())
    }

    /// Rebuilds the shard from its memory file after a graceful shutdown:
    /// maps the segments the slot table lists, checks every item header, and
    /// links the live, unexpired, unflushed items. Any inconsistency is an
    /// error (the caller starts empty instead: never serve what may be
    /// corrupt).
    pub(crate) fn restore(
        &mut self,
        now: Time,
        flush: FlushState,
        stats: &ShardStats,
        here: impl Fn(u64) -> bool,
    ) -> Result<(), String> {
        let Some(file) = self.file.as_ref() else {
            return Ok(());
        };
        let slots = file.slots();
        let mut found = Vec::new();
        let mut slot = 0;
        while slot < slots {
            let e = file.slot(slot);
            if e.seq == 0 {
                slot += 1;
                continue;
            }
            let span = e.span as usize;
            // A sequence this large never comes from counting segments; one
            // near the end of u64 would wrap to 0 (a free slot) later on.
            if span == 0
                || slot + span > slots
                || e.used as usize > span * self.seg_size
                || e.seq >= 1 << 62
            {
                return Err(format!("slot {slot}: bad entry {e:?}"));
            }
            let map = file
                .map(slot, span)
                .map_err(|err| format!("slot {slot}: {err}"))?;
            if super::memfile::content_sum(&map[..e.used as usize]) != e.sum {
                return Err(format!(
                    "slot {slot}: its items do not match their checksum (damaged)"
                ));
            }
            found.push((e.seq, slot, span, e.used as usize, map));
            slot += span;
        }
        found.sort_by_key(|f| f.0);
        for (seq, slot, span, used, map) in found {
            self.taken[slot..slot + span].fill(true);
            self.segs[slot] = Segment {
                data: Block::mapped(map),
                used,
                live: 0,
                seq,
                single: span > 1,
                // Whatever the file holds.
                classes: u64::MAX,
            };
            self.seq = self.seq.max(seq);
            self.allocated += span * self.seg_size;
            self.fifo.push_back(slot as u32);
            let mut at = 0;
            while at < used {
                if at + HEADER > used {
                    return Err(format!("slot {slot}: a header past the end"));
                }
                let r: &Header = self.segs[slot].data[at..at + HEADER].try_into().unwrap();
                let klen = r[H_KLEN] as usize;
                let size = item_size(klen, rd32(r, H_VLEN) as usize);
                if klen == 0 || klen > crate::protocol::KEY_MAX_LENGTH || at + size > used {
                    return Err(format!("slot {slot}: a bad item at {at}"));
                }
                if span > 1 && (at != 0 || size <= self.seg_size) {
                    return Err(format!("slot {slot}: a large segment out of shape"));
                }
                let l = loc(slot as u32, at);
                if self.has(l, LIVE) {
                    if self.state(l, now, flush) == Lookup::Hit {
                        let hash = self.hash_key(self.key(l));
                        if !here(hash) {
                            return Err(format!("slot {slot}: a key of another shard at {at}"));
                        }
                        if self.find(hash, self.key(l)).is_some() {
                            return Err(format!("slot {slot}: a key stored twice"));
                        }
                        self.link_restored(l, hash, stats);
                    } else {
                        self.set_bits(l, 0, LIVE);
                    }
                }
                at += size;
            }
        }
        // Segments with nothing live go back at once.
        let empty: Vec<usize> = self
            .fifo
            .iter()
            .map(|&id| id as usize)
            .filter(|&id| self.segs[id].live == 0)
            .collect();
        for id in empty {
            self.free_segment(id);
        }
        Ok(())
    }

    fn link_restored(&mut self, l: Loc, hash: u64, stats: &ShardStats) {
        self.link(l, hash, stats);
        // `link` counted a set: a restored item is not one. It is an item
        // linked, as memcached's restart counts it in `total_items`.
        stats.classes.add(self.class(l), ClassCounter::CmdSet, -1);
        stats.bump(Counter::TotalItems);
    }

    /// Checks the invariants listed in the module docs (tests only).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut live_items = 0;
        let mut bytes = 0;
        let mut held = self.spare.as_ref().map_or(0, |d| d.len());
        for (id, s) in self.segs.iter().enumerate() {
            let in_fifo = self.fifo.iter().filter(|&&f| f as usize == id).count();
            if s.data.is_empty() {
                if self.file.is_none() {
                    assert!(self.free_ids.contains(&(id as u32)), "seg {id} lost");
                }
                assert_eq!(in_fifo, 0);
                continue;
            }
            assert_eq!(in_fifo, 1, "seg {id} in the fifo {in_fifo} times");
            if !self.sparse && !s.single && self.head != Some(id as u32) {
                assert!(
                    s.live > self.seg_size / 4,
                    "seg {id} may be cleaned, unnoticed"
                );
            }
            if s.single {
                assert_ne!(self.head, Some(id as u32), "single seg {id} is the head");
                assert_eq!(self.items_of(id).len(), 1, "single seg {id}");
            } else {
                assert_eq!(s.data.len(), self.seg_size, "normal seg {id}");
            }
            held += s.data.len();
            let mut live = 0;
            for l in self.items_of(id) {
                if self.has(l, LIVE) {
                    let hash = self.hash_key(self.key(l));
                    assert_eq!(self.find(hash, self.key(l)), Some(l));
                    live += align8(self.charge(l));
                    bytes += self.charge(l);
                    live_items += 1;
                }
            }
            assert_eq!(live, s.live, "seg {id} live bytes");
            assert!(
                s.live > 0 || self.head == Some(id as u32),
                "empty seg {id} kept"
            );
        }
        assert_eq!(held, self.allocated);
        assert_eq!(live_items, self.table.len());
        assert_eq!(bytes, self.bytes);
        assert!(
            self.allocated + self.table_bytes() <= self.limit,
            "{} + {} > {}",
            self.allocated,
            self.table_bytes(),
            self.limit
        );
    }
}
