//! A segment's memory, which a send may share: a get of a large value hands
//! the socket a reference to the value where it lies (memcached sends from
//! the item, holding a reference count) instead of a copy of it.
//!
//! The rules that keep it sound, all enforced here:
//! - the whole block is written only while the shard holds the one
//!   reference ([`Block::bytes_mut`] panics otherwise): a block is filled
//!   before anything is shared from it, and a freed block a send still
//!   holds is never reused (see [`Block::unique`]);
//! - an item's header may be written while its value is shared
//!   ([`Block::header_mut`]): a share covers the value's bytes only, never a
//!   header;
//! - nothing writes a shared value: an item's value is written once, when
//!   the item is (an `incr` in place only rewrites values far smaller than
//!   anything shared).
#![allow(unsafe_code)]

use memmap2::MmapRaw;
use std::ops::Range;
use std::sync::Arc;

/// One mapping of its own (anonymous, or a memory file's slots), so that
/// freeing a segment gives its pages back to the kernel at once (an
/// allocator may keep freed blocks, and resident memory would then exceed
/// the limit). Pages never written are never resident. Empty when the
/// segment id is free.
#[derive(Default)]
pub(super) struct Block(Option<Arc<MmapRaw>>);

impl Block {
    /// An anonymous block; None when the kernel has no memory for it.
    pub(super) fn new(size: usize) -> Option<Block> {
        memmap2::MmapMut::map_anon(size)
            .ok()
            .map(|m| Block(Some(Arc::new(m.into()))))
    }

    /// A block over a mapping made elsewhere (a memory file's slots).
    pub(super) fn mapped(map: memmap2::MmapMut) -> Block {
        Block(Some(Arc::new(map.into())))
    }

    /// True if nothing shares the block (a send holds none of it).
    pub(super) fn unique(&self) -> bool {
        self.0.as_ref().is_none_or(|m| Arc::strong_count(m) == 1)
    }

    /// The whole block, to write. Panics if a send shares it: nothing may
    /// write a block others read (see the module's rules).
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        let Some(m) = &mut self.0 else {
            return &mut [];
        };
        let m = Arc::get_mut(m).expect("a shared segment is never written whole");
        // SAFETY: the mapping is valid for `len` bytes for as long as `m`
        // lives, and `get_mut` proves this is its only reference: no other
        // slice of it exists while the returned one does.
        unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr(), m.len()) }
    }

    /// An item's header at `at`, to write even while its value is shared.
    pub(super) fn header_mut<const N: usize>(&mut self, at: usize) -> &mut [u8; N] {
        let m = self.0.as_ref().expect("a header of a free segment");
        assert!(at + N <= m.len(), "a header past its segment");
        // SAFETY: in bounds (checked above) of a mapping that lives as long
        // as `self`; `&mut self` excludes every other slice the shard made
        // of it, and shares cover values only, never a header (the module's
        // rules), so no other reference to these bytes exists.
        unsafe { &mut *(m.as_mut_ptr().add(at) as *mut [u8; N]) }
    }

    /// `range` of the block, shared: the bytes stay mapped as long as the
    /// returned owner lives, whatever becomes of the segment. None if
    /// `range` is outside the block.
    pub(super) fn share(&self, range: Range<usize>) -> Option<Arc<SharedValue>> {
        let m = self.0.as_ref()?;
        (range.start <= range.end && range.end <= m.len()).then(|| {
            Arc::new(SharedValue {
                map: m.clone(),
                range,
            })
        })
    }
}

impl std::ops::Deref for Block {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            // SAFETY: the mapping is valid for `len` bytes while `self`
            // lives; writes need `&mut self` (see `bytes_mut` and
            // `header_mut`), and a share's owner only reads.
            Some(m) => unsafe { std::slice::from_raw_parts(m.as_ptr(), m.len()) },
            None => &[],
        }
    }
}

/// Asks the CPU to start bringing the cache line at `p` in (a hint: it
/// never faults, whatever `p` is, and changes no state that code can see).
#[inline(always)]
pub(super) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults and reads nothing the
    // program observes, so any address is fine.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// An item's value shared with a send (see [`Entry::share_value`]): its
/// segment's memory stays mapped while this lives, whatever becomes of the
/// item.
///
/// [`Entry::share_value`]: super::Entry::share_value
pub struct SharedValue {
    map: Arc<MmapRaw>,
    range: Range<usize>,
}

impl AsRef<[u8]> for SharedValue {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `range` was checked to be inside the mapping, which lives
        // as long as `self.map`; the bytes of a shared value are never
        // written (the module's rules).
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.range.start), self.range.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_outlives_its_block_and_sees_its_bytes() {
        let mut b = Block::new(8192).unwrap();
        b.bytes_mut()[100..105].copy_from_slice(b"hello");
        assert!(b.unique());
        let s = b.share(100..105).unwrap();
        assert!(!b.unique(), "a send holds it");
        // The header may still be written while the value is shared.
        b.header_mut::<4>(0).copy_from_slice(b"head");
        assert_eq!(&b[..4], b"head");
        drop(b);
        assert_eq!((*s).as_ref(), b"hello");
        assert!(Block::new(64).unwrap().share(60..65).is_none());
    }

    #[test]
    #[should_panic(expected = "never written whole")]
    fn a_shared_block_is_not_written_whole() {
        let mut b = Block::new(4096).unwrap();
        let _s = b.share(0..1).unwrap();
        b.bytes_mut()[0] = 1;
    }
}
