//! File reads that never block a loop.
//!
//! On an io_uring loop a read goes through the loop's ring: a read the page
//! cache can answer completes at once, one that must wait for the disk is
//! done by the kernel's workers while the loop runs other tasks. Elsewhere
//! (epoll loops, or off a loop) it runs on the blocking pool.

use std::fs::File;
use std::future::poll_fn;
use std::io;
use std::sync::Arc;

/// Reads up to `len` bytes of `file` from `offset` (fewer at its end; none
/// past it) without blocking the calling loop.
pub async fn read_at(file: Arc<File>, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let ring = crate::event_loop::with_current(|cur| match cur.map(|l| &l.reactor) {
        Some(crate::backend::Backend::Uring(r)) => Some(r.read_file(file.clone(), offset, len)),
        _ => None,
    });
    match ring {
        Some(done) => poll_fn(|cx| done.poll_done(cx)).await,
        None => crate::spawn_blocking(move || {
            use std::os::unix::fs::FileExt;
            let mut buf = vec![0u8; len];
            let n = file.read_at(&mut buf, offset)?;
            buf.truncate(n);
            Ok(buf)
        })
        .await
        .map_err(|e| io::Error::other(e.to_string()))?,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventLoop, IoBackend, LoopConfig};
    use std::io::Write;

    #[test]
    fn reads_a_file_on_both_backends() {
        let path = std::env::temp_dir().join(format!("duality-fs-{}", std::process::id()));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        for io in [IoBackend::Epoll, IoBackend::Uring] {
            let mut lp = EventLoop::new(LoopConfig {
                io,
                ..LoopConfig::default()
            })
            .unwrap();
            let file = Arc::new(File::open(&path).unwrap());
            lp.block_on(async {
                let mid = read_at(file.clone(), 1000, 5000).await.unwrap();
                assert_eq!(mid, &data[1000..6000]);
                let tail = read_at(file.clone(), 299_990, 100).await.unwrap();
                assert_eq!(tail, &data[299_990..]);
                let past = read_at(file.clone(), 400_000, 100).await.unwrap();
                assert!(past.is_empty());
                // A read whose future is dropped at once: the ring keeps the
                // buffer until its completion; the loop goes on.
                let f = read_at(file.clone(), 0, 100_000);
                drop(f);
                let again = read_at(file, 0, 10).await.unwrap();
                assert_eq!(again, &data[..10]);
            });
        }
        std::fs::remove_file(&path).unwrap();
    }
}
