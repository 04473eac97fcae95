//! Spare receive and send buffers, per thread: a socket holds a buffer
//! only while it has bytes queued, so an idle connection holds none.

use super::*;

/// Spare buffers a thread keeps, of each kind.
const SPARES: usize = 64;

/// The two kinds of spare buffer, kept apart: a receive queue holds one
/// request (often under 100 bytes), a send buffer one or more responses, and
/// a response written into a drained receive queue would grow it again.
#[derive(Clone, Copy)]
pub(super) enum Spare {
    /// Drained receive queues, kept up to 512 bytes of capacity.
    Rx = 0,
    /// Buffers whose sends completed, kept up to 1 KiB.
    Tx = 1,
}

impl Spare {
    /// The largest capacity kept.
    pub(super) fn keep(self) -> usize {
        match self {
            Spare::Rx => 512,
            Spare::Tx => 1024,
        }
    }
}

thread_local! {
    /// Small receive queues drained by their readers and send buffers whose
    /// sends completed, for the next socket that receives or sends on this
    /// thread: a socket holds a buffer only while it has bytes queued, so an
    /// idle connection holds none.
    static SPARE: RefCell<[Vec<Queue>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

/// An empty buffer: a spare one of `kind` if this thread has one.
pub(super) fn spare_buf(kind: Spare) -> Queue {
    SPARE
        .with(|s| s.borrow_mut()[kind as usize].pop())
        .unwrap_or_default()
}

/// Keeps `buf` as a spare of `kind` if its capacity is at most what that
/// kind keeps (else frees it).
pub(super) fn keep_buf(mut buf: Queue, kind: Spare) {
    if buf.capacity() > 0 && buf.capacity() <= kind.keep() {
        buf.clear();
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            let s = &mut s[kind as usize];
            if s.len() < SPARES {
                s.push(buf);
            }
        });
    }
}
