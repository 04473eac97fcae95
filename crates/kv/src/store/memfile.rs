//! The memory file behind a warm restart (`duality kv --memory-file PATH`,
//! memcached's `-e`): the store's segments are mappings of ranges of one
//! file, so the items outlive the process.
//!
//! ```text
//!  0      header (4 KiB): magic, version, clean flag, settings, counters
//!  4096   per shard, page-aligned: its slot table, per slot: sequence (u64),
//!         used (u32), span (u32), checksum of the used bytes (u64)
//!  data   per shard: `slots` slots of `seg_size` bytes
//! ```
//!
//! A shard's segment is `span` consecutive slots (one for a normal segment,
//! more for an item larger than a segment); the sequence number orders the
//! segments oldest first, 0 marks a free slot. The file is trusted only when
//! its clean flag is set: it is set by a graceful shutdown after every shard
//! wrote its table, and cleared as soon as a process opens the file, so a
//! crash leaves it cleared and the next start begins empty. Settings that
//! differ (memory and item size limits, shards, segment size) and a file
//! whose length is not what its settings make also begin empty, and so does
//! one whose header, slot tables or items do not match their checksums (a
//! flipped bit in an item's length could otherwise make a client's value
//! read as items of its own).

// Mapping a file is unsafe in Rust's terms (another process could change
// it); this module is the one place the cache does it.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"DUALKVMF";
/// 2: the item size limit is recorded (`F_ITEM_MAX`); 3: a checksum of the
/// header and the slot tables (`F_CHECK`); 4: a checksum of each segment's
/// items in its slot entry.
const VERSION: u32 = 4;
const HEADER: u64 = 4096;
const SLOT_ENTRY: usize = 24;

// Header fields.
const F_VERSION: usize = 8;
const F_CLEAN: usize = 12;
const F_LIMIT: usize = 16;
const F_SHARDS: usize = 24;
const F_SEG: usize = 28;
const F_SLOTS: usize = 32;
const F_EPOCH: usize = 36;
const F_CAS: usize = 40;
const F_FIRED: usize = 48;
const F_PENDING: usize = 52;
const F_SEED: usize = 56;
const F_ITEM_MAX: usize = 64;
const F_STARTED: usize = 72;
/// FNV-1a of the header before it (as it reads when clean) and of every
/// slot table, written by a graceful shutdown: a flipped flush epoch or
/// hasher seed would otherwise restore nothing, or items no key reaches.
const F_CHECK: usize = 80;

/// What a restart finds in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// A file left by a graceful shutdown with these settings: its segments
    /// are to be scanned.
    Warm {
        /// The flush epoch then.
        epoch: u32,
        /// The next CAS unique then.
        next_cas: u64,
        /// The `flush_all` cut-off then.
        fired: u32,
        /// A delayed `flush_all` still to come then (0: none).
        pending: u32,
        /// When the first server of these items started (0: unknown).
        started: u32,
    },
    /// Nothing to restore, and why (None: a new file).
    Fresh(Option<String>),
}

/// One slot's entry in the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotEntry {
    pub(crate) seq: u64,
    pub(crate) used: u32,
    pub(crate) span: u32,
    /// [`content_sum`] of the segment's used bytes, written by a graceful
    /// shutdown (0 while the cache runs: the file is not trusted then).
    pub(crate) sum: u64,
}

/// A checksum of a segment's bytes, for a warm restart: four lanes of
/// 8-byte words, each step a bijection (xor, odd multiply, rotate), so a
/// change to one word always shows (several may cancel out, at odds of
/// about 2^-64); it runs at memory speed, four
/// independent multiplies per 32 bytes.
pub(crate) fn content_sum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [K, K.rotate_left(16), K.rotate_left(32), K.rotate_left(48)];
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
            *lane = (*lane ^ w).wrapping_mul(K).rotate_left(31);
        }
    }
    let mut tail = [0u8; 32];
    let rest = blocks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    let mut h = bytes.len() as u64;
    for (i, lane) in lanes.iter_mut().enumerate() {
        let w = u64::from_le_bytes(tail[i * 8..i * 8 + 8].try_into().unwrap());
        *lane = (*lane ^ w).wrapping_mul(K).rotate_left(31);
        h = (h ^ *lane).wrapping_mul(K).rotate_left(27);
    }
    h
}

/// The open memory file: its header. Each shard gets a `ShardFile`.
pub struct MemFile {
    /// Shared with every shard's [`ShardFile`]: one descriptor for the
    /// whole file (a descriptor per shard took 65 of a small `ulimit -n`).
    file: Arc<File>,
    path: PathBuf,
    head: memmap2::MmapMut,
    layout: Layout,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    shards: usize,
    slots: usize,
    seg_size: usize,
}

impl Layout {
    fn table_len(&self) -> u64 {
        ((self.slots * SLOT_ENTRY) as u64).next_multiple_of(4096)
    }

    fn table_off(&self, shard: usize) -> u64 {
        HEADER + shard as u64 * self.table_len()
    }

    fn data_off(&self, shard: usize) -> u64 {
        self.table_off(self.shards) + (shard * self.slots * self.seg_size) as u64
    }

    fn total(&self) -> u64 {
        self.data_off(self.shards)
    }
}

/// The layout a header records.
fn layout_of(head: &[u8]) -> Layout {
    Layout {
        shards: rd32(head, F_SHARDS) as usize,
        slots: rd32(head, F_SLOTS) as usize,
        seg_size: rd32(head, F_SEG) as usize,
    }
}

/// [`F_CHECK`]'s value for the header `head` and the slot tables in `file`
/// (written to it: the table mappings are shared).
fn checksum(file: &File, head: &[u8], layout: Layout) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    const BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    let fnv = |mut h: u64, bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut h = fnv(BASIS, &head[..F_CLEAN]);
    h = fnv(h, &1u32.to_le_bytes());
    h = fnv(h, &head[F_CLEAN + 4..F_CHECK]);
    let mut buf = vec![0u8; 64 << 10];
    let (mut at, end) = (HEADER, layout.table_off(layout.shards));
    while at < end {
        let n = buf.len().min((end - at) as usize);
        file.read_exact_at(&mut buf[..n], at)?;
        h = fnv(h, &buf[..n]);
        at += n as u64;
    }
    Ok(h)
}

/// One shard's part of the memory file: its slot table (mapped, written under
/// the shard's lock) and its data slots.
pub(crate) struct ShardFile {
    file: Arc<File>,
    table: memmap2::MmapMut,
    data_off: u64,
    seg_size: usize,
    slots: usize,
}

impl std::fmt::Debug for MemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFile").field("path", &self.path).finish()
    }
}

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn rd64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// What a memory file is made for: a file made for other settings is not
/// restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The memory limit, in bytes (`-m`).
    pub limit: usize,
    /// The item size limit, in bytes (`-I`).
    pub item_size_max: usize,
    /// Shards of the store.
    pub shards: usize,
    /// Data slots per shard.
    pub slots: usize,
    /// Bytes per slot (a normal segment).
    pub seg_size: usize,
}

impl MemFile {
    /// Bytes the file may still take on its file system (its free space
    /// plus the blocks the file holds already), and bytes the file takes
    /// when every segment is used. `None` when the file system says nothing.
    pub fn room(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: fstatvfs writes one `statvfs` into `st` for a descriptor
        // this file owns; `st` is read only after it succeeded.
        let st = unsafe {
            if libc::fstatvfs(self.file.as_raw_fd(), st.as_mut_ptr()) != 0 {
                return None;
            }
            st.assume_init()
        };
        if st.f_blocks == 0 || st.f_frsize == 0 {
            // Unlimited (tmpfs size=0) or not said.
            return None;
        }
        let held = self.file.metadata().ok()?.blocks() * 512;
        let free = (st.f_bavail as u64).saturating_mul(st.f_frsize as u64);
        Some((free.saturating_add(held), self.layout.total()))
    }

    /// Opens (or creates, readable by this user only) `path` for `set`,
    /// and says whether it holds a cache to restore; `discard` (and why)
    /// starts it empty whatever it holds. A new or discarded file takes
    /// `seed` as its hasher seed, and gives back every block it held. The
    /// clean flag is cleared before this returns.
    ///
    /// A file that is neither empty nor a memory file is refused, left as
    /// it is: `-e` naming the wrong file must not destroy it.
    pub fn open(
        path: &Path,
        set: Settings,
        seed: u64,
        discard: Option<String>,
    ) -> io::Result<(MemFile, Opened)> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let open = |new: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true);
            if new {
                o.create_new(true);
            } else {
                o.create(true).truncate(false);
            }
            // The items are the clients' data: private, as memcached's file.
            o.mode(0o600).open(path)
        };
        // Made by this start (O_EXCL) or found: only a file it made is
        // removed when the start fails.
        let (file, made) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (open(false)?, false),
            Err(e) => return Err(e),
        };
        match Self::init(&file, set, seed, discard) {
            Ok((head, layout, opened)) => Ok((
                MemFile {
                    file: Arc::new(file),
                    path: path.to_path_buf(),
                    head,
                    layout,
                },
                opened,
            )),
            Err(e) => {
                // A file this start made and could not make whole (a full
                // file system) is not left behind: removed while it is
                // still locked, and only if the path still names it.
                if made {
                    if let (Ok(a), Ok(b)) = (file.metadata(), std::fs::symlink_metadata(path)) {
                        if a.dev() == b.dev() && a.ino() == b.ino() {
                            let _ = std::fs::remove_file(path);
                        }
                    }
                }
                Err(e)
            }
        }
    }

    /// Locks and checks (or makes) the open file: its header's mapping,
    /// its layout and what a restart finds.
    fn init(
        file: &File,
        set: Settings,
        seed: u64,
        discard: Option<String>,
    ) -> io::Result<(memmap2::MmapMut, Layout, Opened)> {
        use std::os::unix::fs::FileExt;
        // One cache per file: a second process would re-initialise what the
        // first has mapped, under it (memcached does not guard this). The
        // lock lasts as long as the descriptor, so a crash releases it.
        // SAFETY: flock on a descriptor this function owns; no memory.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(if e.kind() == io::ErrorKind::WouldBlock {
                // The caller names the file.
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "in use by another running cache (locked)",
                )
            } else {
                e
            });
        }
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is not a regular file",
            ));
        }
        let layout = Layout {
            shards: set.shards,
            slots: set.slots,
            seg_size: set.seg_size,
        };
        let total = layout.total();
        let old_len = meta.len();
        // Read, not mapped: past the end of a short file a mapping faults.
        let mut old = vec![0u8; HEADER as usize];
        let mut got = 0;
        while got < old.len() {
            match file.read_at(&mut old[got..], got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        // A file this code makes has its magic before anything else (see
        // below), so a crash while making one leaves it empty or marked.
        if old_len > 0 && &old[..8] != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "exists and is not a duality memory file: left as it is \
                 (remove it or name another file)",
            ));
        }
        let opened = if let Some(why) = discard {
            Opened::Fresh(Some(why))
        } else if old_len == 0 {
            Opened::Fresh(None)
        } else if rd32(&old, F_VERSION) != VERSION {
            Opened::Fresh(Some(format!(
                "was made by another version of duality (format {}, now {VERSION})",
                rd32(&old, F_VERSION)
            )))
        } else if rd32(&old, F_CLEAN) == 1
            && layout_of(&old) == layout
            && old_len == total
            && checksum(file, &old, layout)? != rd64(&old, F_CHECK)
        {
            Opened::Fresh(Some(
                "is damaged (its header or slot tables do not match their checksum)".into(),
            ))
        } else if rd64(&old, F_LIMIT) != set.limit as u64
            || rd64(&old, F_ITEM_MAX) != set.item_size_max as u64
        {
            Opened::Fresh(Some(format!(
                "was made for other settings (-m {} MiB -I {} bytes; now -m {} MiB -I {} bytes)",
                rd64(&old, F_LIMIT) >> 20,
                rd64(&old, F_ITEM_MAX),
                set.limit >> 20,
                set.item_size_max
            )))
        } else if rd32(&old, F_SHARDS) as usize != set.shards
            || rd32(&old, F_SEG) as usize != set.seg_size
            || rd32(&old, F_SLOTS) as usize != set.slots
        {
            Opened::Fresh(Some(format!(
                "was made for another layout ({} shards of {} slots of {} bytes; now {}, {}, {})",
                rd32(&old, F_SHARDS),
                rd32(&old, F_SLOTS),
                rd32(&old, F_SEG),
                set.shards,
                set.slots,
                set.seg_size
            )))
        } else if rd32(&old, F_CLEAN) != 1 {
            Opened::Fresh(Some(
                "was not closed by a graceful shutdown (crash or kill)".into(),
            ))
        } else if old_len != total {
            // Its settings fix its length: a cut (or grown) file is damaged.
            Opened::Fresh(Some(format!(
                "is {old_len} bytes where its settings make {total}: damaged"
            )))
        } else {
            Opened::Warm {
                epoch: rd32(&old, F_EPOCH),
                next_cas: rd64(&old, F_CAS),
                fired: rd32(&old, F_FIRED),
                pending: rd32(&old, F_PENDING),
                started: rd32(&old, F_STARTED),
            }
        };
        let warm = matches!(opened, Opened::Warm { .. });
        if !warm {
            // Every block given back (a file made for a larger limit
            // shrinks; no old byte survives), the header first (the file is
            // a memory file, not yet clean, from its first byte on), then
            // the new length, sparse: disk blocks are taken as segments are
            // first used.
            file.set_len(0)?;
            let mut head = vec![0u8; HEADER as usize];
            head[..8].copy_from_slice(MAGIC);
            head[F_VERSION..F_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
            head[F_LIMIT..F_LIMIT + 8].copy_from_slice(&(set.limit as u64).to_le_bytes());
            head[F_ITEM_MAX..F_ITEM_MAX + 8]
                .copy_from_slice(&(set.item_size_max as u64).to_le_bytes());
            head[F_SHARDS..F_SHARDS + 4].copy_from_slice(&(set.shards as u32).to_le_bytes());
            head[F_SEG..F_SEG + 4].copy_from_slice(&(set.seg_size as u32).to_le_bytes());
            head[F_SLOTS..F_SLOTS + 4].copy_from_slice(&(set.slots as u32).to_le_bytes());
            head[F_SEED..F_SEED + 8].copy_from_slice(&seed.to_le_bytes());
            file.write_all_at(&head, 0)?;
            file.set_len(total)?;
        }
        // The header and the slot tables are written through mappings: their
        // blocks are allocated now, so a file system without room fails
        // the start here instead of faulting (SIGBUS) on the first store.
        // The tables of a new file read as zeros: every slot free.
        let meta_len = layout.table_off(layout.shards);
        // SAFETY: posix_fallocate on a descriptor this function owns.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, meta_len as libc::off_t) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: the mapping is of a file this process opened for writing
        // and holds locked; the store is its only user in this process.
        // Another process changing the file under a running cache is
        // outside the contract (as for memcached's -e file).
        let mut head = unsafe {
            memmap2::MmapOptions::new()
                .len(HEADER as usize)
                .map_mut(file)?
        };
        // In use from now on: a crash must not leave it trusted.
        head[F_CLEAN..F_CLEAN + 4].copy_from_slice(&0u32.to_le_bytes());
        head.flush()?;
        Ok((head, layout, opened))
    }

    /// The seed of the key hasher the file's items were placed with.
    pub(crate) fn seed(&self) -> u64 {
        rd64(&self.head, F_SEED)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What became of the file this cache opened if its path no longer
    /// names it: `removed` (no name left: its items go when the process
    /// ends) or `renamed or replaced` (they stay in the file under its new
    /// name, where a start at the path does not find them).
    pub fn moved(&self) -> Option<&'static str> {
        use std::os::unix::fs::MetadataExt;
        let a = self.file.metadata().ok()?;
        if a.nlink() == 0 {
            return Some("removed");
        }
        match std::fs::metadata(&self.path) {
            Ok(b) if a.dev() == b.dev() && a.ino() == b.ino() => None,
            _ => Some("renamed or replaced"),
        }
    }

    /// Shard `shard`'s part of the file.
    pub(crate) fn shard(&self, shard: usize) -> io::Result<ShardFile> {
        let l = self.layout;
        assert!(shard < l.shards);
        let file = self.file.clone();
        // SAFETY: as in `open`; each shard's table is a page range of its
        // own, mapped once, so no two mappings of this process alias.
        let table = unsafe {
            memmap2::MmapOptions::new()
                .offset(l.table_off(shard))
                .len(l.table_len() as usize)
                .map_mut(&file)?
        };
        Ok(ShardFile {
            file,
            table,
            data_off: l.data_off(shard),
            seg_size: l.seg_size,
            slots: l.slots,
        })
    }

    /// Marks the file consistent (after every shard wrote its table) with
    /// the store's counters, and writes it to disk.
    pub(crate) fn close_clean(
        &mut self,
        epoch: u32,
        next_cas: u64,
        fired: u32,
        pending: u32,
        started: u32,
    ) -> io::Result<()> {
        // Segments and tables first, then the flag that makes them trusted.
        self.head[F_EPOCH..F_EPOCH + 4].copy_from_slice(&epoch.to_le_bytes());
        self.head[F_CAS..F_CAS + 8].copy_from_slice(&next_cas.to_le_bytes());
        self.head[F_FIRED..F_FIRED + 4].copy_from_slice(&fired.to_le_bytes());
        self.head[F_PENDING..F_PENDING + 4].copy_from_slice(&pending.to_le_bytes());
        self.head[F_STARTED..F_STARTED + 4].copy_from_slice(&started.to_le_bytes());
        let check = checksum(&self.file, &self.head, self.layout)?;
        self.head[F_CHECK..F_CHECK + 8].copy_from_slice(&check.to_le_bytes());
        self.file.sync_data()?;
        self.head.flush()?;
        self.head[F_CLEAN..F_CLEAN + 4].copy_from_slice(&1u32.to_le_bytes());
        self.head.flush()
    }
}

impl ShardFile {
    /// Slots in this shard.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    pub(crate) fn slot(&self, slot: usize) -> SlotEntry {
        let at = slot * SLOT_ENTRY;
        SlotEntry {
            seq: rd64(&self.table, at),
            used: rd32(&self.table, at + 8),
            span: rd32(&self.table, at + 12),
            sum: rd64(&self.table, at + 16),
        }
    }

    pub(crate) fn set_slot(&mut self, slot: usize, e: SlotEntry) {
        let at = slot * SLOT_ENTRY;
        self.table[at..at + 8].copy_from_slice(&e.seq.to_le_bytes());
        self.table[at + 8..at + 12].copy_from_slice(&e.used.to_le_bytes());
        self.table[at + 12..at + 16].copy_from_slice(&e.span.to_le_bytes());
        self.table[at + 16..at + 24].copy_from_slice(&e.sum.to_le_bytes());
    }

    /// Maps `span` slots from `slot` on, their disk blocks allocated first:
    /// the file is sparse, and a store into a mapped page the file system
    /// has no room for is a SIGBUS, whereas a failed allocation here is an
    /// error the shard answers as a full cache (it evicts instead).
    pub(crate) fn map(&self, slot: usize, span: usize) -> io::Result<memmap2::MmapMut> {
        debug_assert!(slot + span <= self.slots);
        let off = self.data_off + (slot * self.seg_size) as u64;
        let len = (span * self.seg_size) as u64;
        // SAFETY: posix_fallocate on a descriptor this file owns; no memory.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            let e = io::Error::from_raw_os_error(rc);
            note_no_room(&e);
            return Err(e);
        }
        // SAFETY: as in `MemFile::open`; the shard hands each slot to one
        // segment at a time, so no two live mappings of this process overlap.
        unsafe {
            memmap2::MmapOptions::new()
                .offset(off)
                .len(len as usize)
                .map_mut(&self.file)
        }
    }

    /// Writes the slot table to disk.
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.table.flush()
    }
}

/// Test support: recomputes every checksum of a cleanly closed file at
/// `path` after a test edited it, so that what restore checks beyond the
/// checksums can be reached.
#[cfg(test)]
pub(crate) fn reseal(path: &Path) {
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut head = vec![0u8; HEADER as usize];
    file.read_exact_at(&mut head, 0).unwrap();
    let l = layout_of(&head);
    for shard in 0..l.shards {
        for slot in 0..l.slots {
            let at = l.table_off(shard) + (slot * SLOT_ENTRY) as u64;
            let mut e = [0u8; SLOT_ENTRY];
            file.read_exact_at(&mut e, at).unwrap();
            if rd64(&e, 0) == 0 {
                continue;
            }
            let mut data = vec![0u8; rd32(&e, 8) as usize];
            let off = l.data_off(shard) + (slot * l.seg_size) as u64;
            file.read_exact_at(&mut data, off).unwrap();
            file.write_all_at(&content_sum(&data).to_le_bytes(), at + 16)
                .unwrap();
        }
    }
    let sum = checksum(&file, &head, l).unwrap();
    file.write_all_at(&sum.to_le_bytes(), F_CHECK as u64)
        .unwrap();
}

/// The last error a segment's allocation met (0: none since the last
/// [`take_no_room`]): noted under the shard's lock, logged by whoever calls
/// `take_no_room` outside it (a write to a stalled stderr must not hold a
/// shard).
static NO_ROOM: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

fn note_no_room(e: &io::Error) {
    NO_ROOM.store(
        e.raw_os_error().unwrap_or(libc::ENOSPC),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The error the memory file's file system last refused a segment with
/// since the last call, at most once a minute: the cache then evicts (or
/// refuses stores with `-M`) below its memory limit, which `stats` alone
/// would not explain.
pub fn take_no_room() -> Option<io::Error> {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST.load(Relaxed);
    if now < last + 60 || NO_ROOM.load(Relaxed) == 0 {
        return None;
    }
    LAST.store(now, Relaxed);
    Some(io::Error::from_raw_os_error(NO_ROOM.swap(0, Relaxed)))
}
