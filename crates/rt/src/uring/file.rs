//! File reads through the ring: where a read's result waits for its future.

use super::*;

/// A file read: the buffer and the file are the operation's until its
/// completion.
pub(super) struct FileOp {
    /// Empty for a [fetch](UringReactor::fetch_file): the kernel writes into
    /// the ring's scratch memory instead.
    pub(super) buf: Vec<u8>,
    /// A fetch: the result is a count, the bytes are nobody's.
    pub(super) fetch: bool,
    /// Zeroed bytes before the read's first byte (alignment).
    pub(super) pad: usize,
    pub(super) _file: Arc<std::fs::File>,
    pub(super) done: Arc<FileRead>,
}

/// Where a file read's result waits for its future.
pub(crate) struct FileRead {
    pub(super) st: Mutex<FileReadSt>,
    /// The ring it was queued on, which cancels it if its future is dropped.
    pub(super) shared: Arc<UringShared>,
    /// On that ring's list of abandoned reads (see [`DirtyList`]).
    pub(super) queued: crate::loom::AtomicBool,
}

#[derive(Default)]
pub(super) struct FileReadSt {
    /// The read's result: how many bytes it read.
    pub(super) done: Option<io::Result<usize>>,
    /// Those bytes (none for a fetch).
    pub(super) buf: Vec<u8>,
    pub(super) waker: Option<Waker>,
    /// Its operation's key in the ring's table.
    pub(super) ud: u64,
}

impl FileRead {
    /// Its future was dropped before the answer: the ring's loop cancels
    /// the read in the kernel (from any thread; the loop is woken only if
    /// it sleeps). The buffer stays the operation's until the completion,
    /// which the cancel hastens: a read waiting on a pipe, a slow disk or
    /// a FUSE file then ends with `ECANCELED` and frees its buffer and
    /// file, instead of holding them until it would have been answered.
    pub(crate) fn abandon(self: &Arc<Self>) {
        {
            let mut st = lock_std(&self.st);
            if st.done.is_some() {
                return; // answered already: nothing is in the ring
            }
            st.waker = None;
        }
        if self.shared.abandoned.mark(&self.queued, || self.clone()) {
            if let Some(shared) = registry::get(self.shared.loop_id) {
                shared.notify();
            }
        }
    }

    /// The bytes read (fewer than asked at end of file), once the ring answered.
    pub(crate) fn poll_done(&self, cx: &mut Context<'_>) -> Poll<io::Result<Vec<u8>>> {
        self.poll_read(cx)
            .map(|r| r.map(|_| std::mem::take(&mut lock_std(&self.st).buf)))
    }

    /// How many bytes a fetch read, once the ring answered.
    pub(crate) fn poll_read(&self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut st = lock_std(&self.st);
        match st.done.take() {
            Some(r) => Poll::Ready(r),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
