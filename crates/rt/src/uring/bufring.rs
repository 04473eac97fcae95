//! The provided-buffer ring multishot receives take their buffers from.

use super::*;

/// The provided-buffer ring: `count` buffers of `size` bytes that the kernel
/// picks from for multishot receives. Made on the first receive, so loops
/// without sockets (payload loops) never allocate it.
pub(super) struct BufRing {
    pub(super) entries: *mut types::BufRingEntry,
    pub(super) entries_layout: std::alloc::Layout,
    data: Box<[u8]>,
    size: usize,
    mask: u16,
    tail: Cell<u16>,
}

impl BufRing {
    pub(super) fn new(ring: &IoUring, count: u16, size: u32) -> io::Result<BufRing> {
        let count = count.clamp(1, 32768).next_power_of_two();
        let size = size.max(64) as usize;
        let layout = std::alloc::Layout::from_size_align(
            count as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) } as *mut types::BufRingEntry;
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        // SAFETY: `entries` is page-aligned memory for `count` entries that
        // lives until the ring is unregistered (`UringReactor::drop`).
        let r = unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, BUF_GROUP, 0)
        };
        if let Err(e) = r {
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(entries as *mut u8, layout) };
            return Err(e);
        }
        // The kernel sees no buffer until the tail is published below.
        let br = BufRing {
            entries,
            entries_layout: layout,
            data: vec![0u8; count as usize * size].into_boxed_slice(),
            size,
            mask: count - 1,
            tail: Cell::new(0),
        };
        for bid in 0..count {
            br.push(bid);
        }
        br.publish();
        Ok(br)
    }

    /// Whether `ring` takes a provided-buffer ring: registers one of a
    /// single entry, then unregisters it.
    pub(super) fn probe(ring: &IoUring) -> io::Result<()> {
        let b = BufRing::new(ring, 1, 64)?;
        if ring.submitter().unregister_buf_ring(BUF_GROUP).is_ok() {
            // SAFETY: unregistered, so the kernel no longer refers to the
            // entries; allocated with this layout in `new`.
            unsafe { std::alloc::dealloc(b.entries as *mut u8, b.entries_layout) };
        }
        // (Still registered, its page is leaked: the kernel may read it
        // until the ring closes.)
        Ok(())
    }

    /// Adds buffer `bid` at the tail (visible to the kernel after `publish`).
    pub(super) fn push(&self, bid: u16) {
        let t = self.tail.get();
        let idx = (t & self.mask) as usize;
        // SAFETY: `idx` is below the entry count; only the loop thread writes
        // entries, and the kernel reads only entries below the published tail.
        let e = unsafe { &mut *self.entries.add(idx) };
        e.set_addr(self.data.as_ptr() as u64 + bid as u64 * self.size as u64);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.tail.set(t.wrapping_add(1));
    }

    pub(super) fn publish(&self) {
        // SAFETY: the tail field overlays entry 0's reserved field; it is
        // updated with a release store so the kernel sees the entries first.
        unsafe {
            let tail =
                types::BufRingEntry::tail(self.entries) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail.get(), Ordering::Release);
        }
    }

    pub(super) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.size;
        &self.data[start..start + len.min(self.size)]
    }
}
