//! File reads that never block a loop.
//!
//! On an io_uring loop a read goes through the loop's ring: a read the page
//! cache can answer completes at once, one that must wait for the disk is
//! done by the kernel's workers while the loop runs other tasks. Elsewhere
//! (epoll loops, or off a loop) it runs on the blocking pool.
//!
//! A read future dropped before it completes: on io_uring its read is
//! cancelled in the ring (the buffer stays the kernel's until the
//! cancelled read's completion, then is freed; a read already under way
//! on a disk may still finish first). On the blocking pool the job runs to
//! its end and its buffer is freed then.

use std::fs::File;
use std::future::poll_fn;
use std::io;
use std::sync::Arc;

/// Reads up to `len` bytes of `file` from `offset` (fewer at its end; none
/// past it; at most [`MAX_READ`] in one call) without blocking the calling
/// loop.
pub async fn read_at(file: Arc<File>, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    read_aligned(file, offset, len, 1).await
}

/// The block size [`read_direct`] aligns its memory to (and that `O_DIRECT`
/// offsets and lengths must be multiples of).
pub const DIRECT_ALIGN: usize = 4096;

/// [`read_at`] for a file opened with `O_DIRECT` (the page cache neither
/// answers nor keeps the read): the kernel reads into memory aligned to
/// [`DIRECT_ALIGN`]; `offset` and `len` must be multiples of it, or the
/// kernel refuses the read (`EINVAL`).
pub async fn read_direct(file: Arc<File>, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    read_aligned(file, offset, len, DIRECT_ALIGN).await
}

/// The most one read returns: Linux's own bound on a single read (a
/// multiple of [`DIRECT_ALIGN`]). Past it a read is short, as read(2) is;
/// it also keeps the ring's 32-bit length and the buffer's size in range.
pub const MAX_READ: usize = 0x7fff_f000;

async fn read_aligned(
    file: Arc<File>,
    offset: u64,
    len: usize,
    align: usize,
) -> io::Result<Vec<u8>> {
    let len = len.min(MAX_READ);
    let ring = crate::event_loop::with_current(|cur| match cur.map(|l| &l.reactor) {
        Some(crate::backend::Backend::Uring(r)) => {
            Some(r.read_file(file.clone(), offset, len, align))
        }
        _ => None,
    });
    match ring {
        Some(done) => {
            let mut read = InRing(Some(done));
            poll_fn(|cx| read.poll(|r| r.poll_done(cx))).await
        }
        None => crate::spawn_blocking(move || {
            use std::os::unix::fs::FileExt;
            // The buffer is zeroed before the read: a large one no larger
            // than what a regular file has left (rounded up to `align`, for
            // O_DIRECT). Small reads skip the fstat.
            let len = match (len > 1 << 16).then(|| file.metadata()) {
                Some(Ok(m)) if m.is_file() => {
                    let left = m
                        .len()
                        .saturating_sub(offset)
                        .next_multiple_of(align as u64);
                    len.min(usize::try_from(left).unwrap_or(usize::MAX))
                }
                _ => len,
            };
            let mut buf: Vec<u8> = Vec::with_capacity(len + align - 1);
            let pad = buf.as_mut_ptr().align_offset(align).min(align - 1);
            buf.resize(pad + len, 0);
            let n = file.read_at(&mut buf[pad..], offset)?;
            buf.truncate(pad + n);
            buf.drain(..pad);
            Ok(buf)
        })
        .await
        .map_err(|e| io::Error::other(e.to_string()))?,
    }
}

/// A read in a loop's ring until its answer is taken; dropped before
/// that, it has the ring cancel the read.
struct InRing(Option<Arc<crate::uring::FileRead>>);

impl InRing {
    fn poll<T>(
        &mut self,
        poll: impl FnOnce(&crate::uring::FileRead) -> std::task::Poll<T>,
    ) -> std::task::Poll<T> {
        let read = self.0.as_deref().expect("polled after its answer");
        let r = poll(read);
        if r.is_ready() {
            self.0 = None;
        }
        r
    }
}

impl Drop for InRing {
    fn drop(&mut self) {
        if let Some(read) = self.0.take() {
            read.abandon();
        }
    }
}

/// The most one [`fetch`] reads.
pub const FETCH_MAX: usize = 256 * 1024;

/// Brings up to `len` bytes of `file` from `offset` (at most [`FETCH_MAX`])
/// into the page cache without blocking the calling loop, for a `sendfile`
/// that follows; how many bytes the file had there (0 past its end). On an
/// io_uring loop the ring reads them into scratch memory the loop keeps, one
/// buffer however many fetches are in flight: a slow client's file costs no
/// memory of ours while it waits. Elsewhere the blocking pool reads them.
pub async fn fetch(file: Arc<File>, offset: u64, len: usize) -> io::Result<usize> {
    let len = len.min(FETCH_MAX);
    let ring = crate::event_loop::with_current(|cur| match cur.map(|l| &l.reactor) {
        Some(crate::backend::Backend::Uring(r)) => Some(r.fetch_file(file.clone(), offset, len)),
        _ => None,
    });
    match ring {
        Some(done) => {
            let mut read = InRing(Some(done));
            poll_fn(|cx| read.poll(|r| r.poll_read(cx))).await
        }
        None => crate::spawn_blocking(move || read_in(&file, offset, len as u64))
            .await
            .map_err(|e| io::Error::other(e.to_string()))?,
    }
}

/// [`fetch`] for a thread that may block (a pool's): reads `len` bytes of
/// `file` from `offset` into a per-thread scratch buffer and drops them,
/// waiting for the disk; how many bytes the file had there. A read, not
/// `readahead(2)`, which only starts the disk reads: a `sendfile` after it
/// still waited for them.
pub fn read_in(file: &File, offset: u64, len: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|buf| {
        if buf.is_empty() {
            buf.resize(FETCH_MAX, 0);
        }
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(buf.len() as u64) as usize;
            match file.read_at(&mut buf[..want], offset + done) {
                Ok(0) => break,
                Ok(n) => done += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventLoop, IoBackend, LoopConfig};
    use std::io::Write;

    /// Runs `body` on an event loop of each backend.
    fn on_each_backend(mut body: impl FnMut(IoBackend, &mut EventLoop)) {
        for io in [IoBackend::Epoll, IoBackend::Uring] {
            let mut lp = EventLoop::new(LoopConfig {
                io,
                ..LoopConfig::default()
            })
            .unwrap();
            body(io, &mut lp);
        }
    }

    #[test]
    fn reads_a_file_on_both_backends() {
        let path = std::env::temp_dir().join(format!("duality-fs-{}", std::process::id()));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        on_each_backend(|io, lp| {
            let file = Arc::new(File::open(&path).unwrap());
            lp.block_on(async {
                let mid = read_at(file.clone(), 1000, 5000).await.unwrap();
                assert_eq!(mid, &data[1000..6000]);
                let tail = read_at(file.clone(), 299_990, 100).await.unwrap();
                assert_eq!(tail, &data[299_990..]);
                let past = read_at(file.clone(), 400_000, 100).await.unwrap();
                assert!(past.is_empty());
                // A length past 4 GiB (the ring's 32 bits cut it to 100).
                let all = read_at(file.clone(), 1000, (4 << 30) + 100).await.unwrap();
                assert_eq!(all, &data[1000..], "{io:?}");
                // A read whose future is dropped at once: the ring keeps the
                // buffer until its completion; the loop goes on.
                let f = read_at(file.clone(), 0, 100_000);
                drop(f);
                let again = read_at(file, 0, 10).await.unwrap();
                assert_eq!(again, &data[..10]);
            });
        });
        std::fs::remove_file(&path).unwrap();
    }

    /// A read the kernel cannot answer yet (a FIFO with nothing in it),
    /// its future dropped: the ring cancels it, so the operation lets go of
    /// its file (and buffer) at once, and a byte written after is not lost
    /// to the cancelled read but read by the next one.
    #[test]
    fn a_dropped_read_is_cancelled_in_the_ring() {
        if let Some(why) = crate::uring_unavailable() {
            eprintln!("io_uring unavailable ({why}): skipped");
            return;
        }
        let path = std::env::temp_dir().join(format!("duality-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo only reads it.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        // Read and write: opening never waits for a writer. Both ends are
        // open before the name goes, so a failed run leaves nothing behind.
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap()
        };
        let file = Arc::new(open());
        let mut writer = open();
        std::fs::remove_file(&path).unwrap();
        let mut lp = EventLoop::new(LoopConfig {
            io: IoBackend::Uring,
            ..LoopConfig::default()
        })
        .unwrap();
        lp.block_on(async {
            // A read, a fetch, and a read dropped by another thread.
            for (fetching, elsewhere) in [(false, false), (true, false), (false, true)] {
                type Read = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
                let f = file.clone();
                let mut read: Read = match fetching {
                    false => Box::pin(async move {
                        let _ = read_at(f, 0, 4096).await;
                    }),
                    true => Box::pin(async move {
                        let _ = fetch(f, 0, 4096).await;
                    }),
                };
                let pending = futures_lite::future::poll_once(&mut read).await.is_none();
                assert!(pending, "a read of an empty FIFO waits");
                match elsewhere {
                    true => std::thread::spawn(move || drop(read)).join().unwrap(),
                    false => drop(read),
                }
                // The ring's operation holds the file until its completion.
                let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while Arc::strong_count(&file) > 1 && std::time::Instant::now() < until {
                    crate::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                assert_eq!(
                    Arc::strong_count(&file),
                    1,
                    "the dropped read (fetch: {fetching}, elsewhere: {elsewhere}) is still in the ring"
                );
            }
            writer.write_all(b"x").unwrap();
            assert_eq!(read_at(file.clone(), 0, 4096).await.unwrap(), b"x");
        });
        drop(lp);
    }

    #[test]
    fn fetches_a_file_on_both_backends() {
        let path = std::env::temp_dir().join(format!("duality-fetch-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 300_000]).unwrap();
        on_each_backend(|io, lp| {
            let file = Arc::new(File::open(&path).unwrap());
            lp.block_on(async {
                assert_eq!(fetch(file.clone(), 1000, 5000).await.unwrap(), 5000);
                // Capped at FETCH_MAX; short at the end; nothing past it.
                let whole = fetch(file.clone(), 0, 1 << 20).await.unwrap();
                assert_eq!(whole, FETCH_MAX, "{io:?}");
                assert_eq!(fetch(file.clone(), 299_990, 100).await.unwrap(), 10);
                assert_eq!(fetch(file.clone(), 400_000, 100).await.unwrap(), 0);
                // Many at once share the ring's scratch memory; each is
                // answered, also after one was dropped in flight.
                let mut early = Box::pin(fetch(file.clone(), 0, FETCH_MAX));
                let _ = futures_lite::future::poll_once(&mut early).await;
                drop(early);
                let all: Vec<_> = (0..10u64)
                    .map(|i| crate::spawn(fetch(file.clone(), i * 30_000, 40_000)))
                    .collect();
                for (i, task) in all.into_iter().enumerate() {
                    let want = 40_000.min(300_000 - i * 30_000);
                    assert_eq!(task.await.unwrap().unwrap(), want, "{io:?} fetch {i}");
                }
            });
        });
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn reads_an_o_direct_file_on_both_backends() {
        use std::os::unix::fs::OpenOptionsExt;
        // (A tmpfs refuses O_DIRECT: then the test says so and passes.)
        let path = std::env::temp_dir().join(format!("duality-direct-{}", std::process::id()));
        let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path);
        let Ok(direct) = direct else {
            eprintln!("this file system refuses O_DIRECT: skipped");
            return;
        };
        let file = Arc::new(direct);
        on_each_backend(|io, lp| {
            lp.block_on(async {
                for block in [0u64, 7, 63] {
                    let at = block * DIRECT_ALIGN as u64;
                    let got = read_direct(file.clone(), at, DIRECT_ALIGN).await.unwrap();
                    assert_eq!(
                        got,
                        &data[at as usize..at as usize + DIRECT_ALIGN],
                        "{io:?}"
                    );
                }
                let past = read_direct(file.clone(), 64 * 4096, DIRECT_ALIGN)
                    .await
                    .unwrap();
                assert!(past.is_empty());
                // Unaligned offsets are the kernel's to refuse, not a crash.
                assert!(read_direct(file.clone(), 100, DIRECT_ALIGN).await.is_err());
            });
        });
        std::fs::remove_file(&path).unwrap();
    }
}
