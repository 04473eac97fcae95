//! The process allocator, and giving its memory back.
//!
//! mimalloc by default: small, size-classed allocations without per-object
//! headers (a 32-byte task costs 32 bytes), and every runtime measured in
//! one process shares it.
//!
//! `thread-per-conn` switches the process to the C library's allocator at
//! start-up ([`use_system`]). There every connection is an OS thread, and
//! mimalloc gives each thread that ever ran a heap descriptor (8 KB) from
//! metadata pages it never unmaps, plus pages of its own: 62 KB per idle
//! connection, and 131 MB still resident after 10,000 connection threads had
//! ended (9.3x the server's start). With glibc (one arena, see
//! [`use_system`]) an idle connection takes 29 KB, and it is back once its
//! thread has ended (`docs/results/idle/`).
//!
//! A switch made after start-up must still free what mimalloc handed out
//! before it, so while the system allocator is on, a free asks mimalloc
//! whether it owns the block (a page-map lookup). While it is off (every
//! other model) an allocation pays one relaxed load that never changes.
//!
//! Freed memory goes back to the kernel in two ways: under `thread-per-conn`
//! a reclaimer thread trims every second, and each event loop collects when
//! it falls idle (`duality_rt::set_default_idle_hook`), since a connection's
//! task is made on the acceptor's thread and freed on its loop's, and
//! mimalloc returns such a block to its heap only when that thread allocates
//! or collects again.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mimalloc::MiMalloc;

/// Transparent huge pages off before `main` and the Rust runtime's first
/// allocations (an `.init_array` entry): mimalloc asks for huge pages on its
/// arena, and the few blocks made before `main` faulted in two 2 MiB pages
/// (an idle cache server held 13.9 MB resident, 8.8 MB with them off;
/// memcached 4.7 MB). `main` turns them on again where asked for
/// ([`crate::cmd::transparent_huge_pages`]); processes started from here
/// inherit the flag.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static THP_OFF_AT_START: extern "C" fn() = {
    extern "C" fn off() {
        // Varargs: each argument as the unsigned long the kernel reads.
        let (on, zero): (libc::c_ulong, libc::c_ulong) = (1, 0);
        // SAFETY: prctl(PR_SET_THP_DISABLE) takes plain integers and only
        // sets a flag of this process's memory map; it needs nothing the
        // Rust runtime sets up, so it may run before `main`.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, zero, zero, zero) };
    }
    off
};

/// Whether new allocations come from the C library (set once, never unset).
static SYSTEM: AtomicBool = AtomicBool::new(false);

/// The global allocator: mimalloc, or the C library's after [`use_system`].
pub struct Allocator;

impl Allocator {
    /// Whether mimalloc handed out `ptr` (only asked while the system
    /// allocator is on: before that, every block is mimalloc's).
    fn mimalloc_owns(ptr: *mut u8) -> bool {
        // SAFETY: a lookup in mimalloc's page map; it reads no memory at
        // `ptr`, and any address may be asked.
        unsafe { libmimalloc_sys::mi_is_in_heap_region(ptr as *const c_void) }
    }
}

// SAFETY: every block is freed by the allocator that made it: blocks are
// mimalloc's until SYSTEM is set, which happens once and is never undone,
// and from then on a free or resize asks mimalloc's page map who owns the
// block. Both allocators meet GlobalAlloc's contract for the layouts given.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if SYSTEM.load(Ordering::Relaxed) {
            // SAFETY: the caller's layout contract, passed on.
            unsafe { System.alloc(layout) }
        } else {
            // SAFETY: as above.
            unsafe { MiMalloc.alloc(layout) }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if SYSTEM.load(Ordering::Relaxed) {
            // SAFETY: the caller's layout contract, passed on.
            unsafe { System.alloc_zeroed(layout) }
        } else {
            // SAFETY: as above.
            unsafe { MiMalloc.alloc_zeroed(layout) }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if SYSTEM.load(Ordering::Relaxed) && !Self::mimalloc_owns(ptr) {
            // SAFETY: not mimalloc's, so System made it (see the impl's
            // comment), with this layout by the caller's contract.
            unsafe { System.dealloc(ptr, layout) }
        } else {
            // SAFETY: mimalloc made it, with this layout.
            unsafe { MiMalloc.dealloc(ptr, layout) }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !SYSTEM.load(Ordering::Relaxed) {
            // SAFETY: mimalloc made it; the caller's contract, passed on.
            return unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        }
        if !Self::mimalloc_owns(ptr) {
            // SAFETY: System made it; the caller's contract, passed on.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // A block from before the switch moves to the system allocator.
        // SAFETY: the caller guarantees new_size is valid for the alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: new_size is non-zero by the caller's contract.
        let new = unsafe { System.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks hold at least the smaller size and are
            // distinct allocations; the old one was mimalloc's.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                MiMalloc.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// Makes every later allocation come from the C library's allocator (for
/// `thread-per-conn`; see the module's comment). Call it at start-up.
pub fn use_system() {
    // What a connection thread allocates must go back when it ends:
    // - Blocks of 16 KiB and more (a connection's read and response
    //   buffers) get mappings of their own, unmapped when freed.
    // - One arena. A thread arena's free top is trimmed only by a large free
    //   merging into it, never by malloc_trim, which trims only the main
    //   arena's top: with glibc's default of eight arenas a core, each kept
    //   its connections' small blocks (1.3 MiB for 600 connections) resident
    //   after they closed, 14-40 MiB in all after 10,000. Connection threads
    //   mostly wait on their sockets, so one arena's lock costs little.
    // A fixed mmap threshold also keeps the trim threshold from sliding up.
    // SAFETY: mallopt takes no pointers; called at start-up, before the
    // threads that would use the C library's allocator exist.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 16 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    SYSTEM.store(true, Ordering::Relaxed);
}

/// Returns freed memory to the kernel now: mimalloc's (the calling thread's
/// heap, blocks other threads freed into it included, all threads' abandoned
/// heaps and the arenas' free pages) and, once it is in use, the C library's
/// (every arena's free pages).
pub fn collect() {
    // SAFETY: mi_collect takes no pointers; mimalloc synchronizes its own
    // shared state, and any thread may call it at any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
    if SYSTEM.load(Ordering::Relaxed) {
        // SAFETY: malloc_trim takes no pointers and locks each arena itself.
        unsafe { libc::malloc_trim(0) };
    }
}

/// Starts a thread that calls [`collect`] every `every`.
pub fn spawn_reclaimer(every: Duration) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("mem-reclaim".into())
        .stack_size(64 * 1024)
        .spawn(move || loop {
            std::thread::sleep(every);
            collect();
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The switch is process-wide and one-way, so one test walks it: blocks
    // made before it are freed and resized across it, blocks made after it
    // are the C library's.
    #[test]
    fn blocks_from_before_the_switch_survive_it() {
        let before: Vec<u64> = (0..1000).collect();
        let mut grown: Vec<u8> = vec![7; 100];
        assert!(Allocator::mimalloc_owns(before.as_ptr() as *mut u8));
        use_system();
        let after: Vec<u64> = (0..1000).collect();
        assert!(!Allocator::mimalloc_owns(after.as_ptr() as *mut u8));
        grown.resize(100_000, 9);
        assert!(!Allocator::mimalloc_owns(grown.as_mut_ptr()));
        assert!(grown[..100].iter().all(|&b| b == 7) && grown[100..].iter().all(|&b| b == 9));
        assert_eq!(before.iter().sum::<u64>(), after.iter().sum::<u64>());
        drop(before);
        drop(after);
        collect();
    }
}
