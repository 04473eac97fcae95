//! The memory file behind a warm restart (`duality kv --memory-file PATH`,
//! memcached's `-e`): the store's segments are mappings of ranges of one
//! file, so the items outlive the process.
//!
//! ```text
//!  0      header (4 KiB): magic, version, clean flag, settings, counters
//!  4096   per shard, page-aligned: its slot table, per slot: sequence (u64),
//!         used (u32), span (u32)
//!  data   per shard: `slots` slots of `seg_size` bytes
//! ```
//!
//! A shard's segment is `span` consecutive slots (one for a normal segment,
//! more for an item larger than a segment); the sequence number orders the
//! segments oldest first, 0 marks a free slot. The file is trusted only when
//! its clean flag is set: it is set by a graceful shutdown after every shard
//! wrote its table, and cleared as soon as a process opens the file, so a
//! crash leaves it cleared and the next start begins empty. Settings that
//! differ (limit, shards, segment size) also begin empty.

// Mapping a file is unsafe in Rust's terms (another process could change
// it); this module is the one place the cache does it.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"DUALKVMF";
const VERSION: u32 = 1;
const HEADER: u64 = 4096;
const SLOT_ENTRY: usize = 16;

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
}

/// The open memory file: its header. Each shard gets a `ShardFile`.
pub struct MemFile {
    file: File,
    path: PathBuf,
    head: memmap2::MmapMut,
    layout: Layout,
}

#[derive(Clone, Copy, Debug)]
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

/// One shard's part of the memory file: its slot table (mapped, written under
/// the shard's lock) and its data slots.
pub(crate) struct ShardFile {
    file: File,
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

impl MemFile {
    /// Opens (or creates) `path` for `shards` shards of `slots` slots of
    /// `seg_size` bytes, and says whether it holds a cache to restore. A new
    /// or discarded file takes `seed` as its hasher seed. The clean flag is
    /// cleared before this returns.
    pub fn open(
        path: &Path,
        limit: usize,
        shards: usize,
        slots: usize,
        seg_size: usize,
        seed: u64,
    ) -> io::Result<(MemFile, Opened)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
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
        let layout = Layout {
            shards,
            slots,
            seg_size,
        };
        let total = layout.total();
        let old_len = file.metadata()?.len();
        if old_len < total {
            // Sparse: disk blocks are taken as segments are written.
            file.set_len(total)?;
        }
        // SAFETY: the mapping is of a file this process opened for writing;
        // the store is its only user in this process. Another process
        // changing the file under a running cache is outside the contract
        // (as for memcached's -e file).
        let mut head = unsafe {
            memmap2::MmapOptions::new()
                .len(HEADER as usize)
                .map_mut(&file)?
        };
        let opened = if old_len == 0 {
            Opened::Fresh(None)
        } else if &head[..8] != MAGIC || rd32(&head, F_VERSION) != VERSION {
            Opened::Fresh(Some("not a duality memory file of this version".into()))
        } else if rd64(&head, F_LIMIT) != limit as u64
            || rd32(&head, F_SHARDS) as usize != shards
            || rd32(&head, F_SEG) as usize != seg_size
            || rd32(&head, F_SLOTS) as usize != slots
        {
            Opened::Fresh(Some(format!(
                "made for other settings (memory limit {} bytes, {} shards, segments of {} bytes; now {limit}, {shards}, {seg_size})",
                rd64(&head, F_LIMIT),
                rd32(&head, F_SHARDS),
                rd32(&head, F_SEG)
            )))
        } else if rd32(&head, F_CLEAN) != 1 {
            Opened::Fresh(Some(
                "was not closed by a graceful shutdown (crash or kill)".into(),
            ))
        } else {
            Opened::Warm {
                epoch: rd32(&head, F_EPOCH),
                next_cas: rd64(&head, F_CAS),
                fired: rd32(&head, F_FIRED),
                pending: rd32(&head, F_PENDING),
            }
        };
        if !matches!(opened, Opened::Warm { .. }) {
            // Every slot free: zero the tables (they are small).
            let mut tables = file.try_clone()?;
            use std::io::{Seek, Write};
            tables.seek(io::SeekFrom::Start(HEADER))?;
            let zeros = vec![0u8; layout.table_len() as usize];
            for _ in 0..shards {
                tables.write_all(&zeros)?;
            }
            head.fill(0);
            head[..8].copy_from_slice(MAGIC);
            head[F_VERSION..F_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
            head[F_LIMIT..F_LIMIT + 8].copy_from_slice(&(limit as u64).to_le_bytes());
            head[F_SHARDS..F_SHARDS + 4].copy_from_slice(&(shards as u32).to_le_bytes());
            head[F_SEG..F_SEG + 4].copy_from_slice(&(seg_size as u32).to_le_bytes());
            head[F_SLOTS..F_SLOTS + 4].copy_from_slice(&(slots as u32).to_le_bytes());
            head[F_SEED..F_SEED + 8].copy_from_slice(&seed.to_le_bytes());
        }
        // In use from now on: a crash must not leave it trusted.
        head[F_CLEAN..F_CLEAN + 4].copy_from_slice(&0u32.to_le_bytes());
        head.flush()?;
        Ok((
            MemFile {
                file,
                path: path.to_path_buf(),
                head,
                layout,
            },
            opened,
        ))
    }

    /// The seed of the key hasher the file's items were placed with.
    pub(crate) fn seed(&self) -> u64 {
        rd64(&self.head, F_SEED)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Shard `shard`'s part of the file.
    pub(crate) fn shard(&self, shard: usize) -> io::Result<ShardFile> {
        let l = self.layout;
        assert!(shard < l.shards);
        let file = self.file.try_clone()?;
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
    ) -> io::Result<()> {
        // Segments and tables first, then the flag that makes them trusted.
        self.head[F_EPOCH..F_EPOCH + 4].copy_from_slice(&epoch.to_le_bytes());
        self.head[F_CAS..F_CAS + 8].copy_from_slice(&next_cas.to_le_bytes());
        self.head[F_FIRED..F_FIRED + 4].copy_from_slice(&fired.to_le_bytes());
        self.head[F_PENDING..F_PENDING + 4].copy_from_slice(&pending.to_le_bytes());
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
        }
    }

    pub(crate) fn set_slot(&mut self, slot: usize, e: SlotEntry) {
        let at = slot * SLOT_ENTRY;
        self.table[at..at + 8].copy_from_slice(&e.seq.to_le_bytes());
        self.table[at + 8..at + 12].copy_from_slice(&e.used.to_le_bytes());
        self.table[at + 12..at + 16].copy_from_slice(&e.span.to_le_bytes());
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
            return Err(io::Error::from_raw_os_error(rc));
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
