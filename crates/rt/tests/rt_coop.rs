//! The cooperative I/O budget: a task whose socket is always ready still
//! lets the loop's other tasks run.

use duality_rt::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

#[test]
fn a_task_whose_socket_is_always_ready_yields_to_others() {
    duality_rt::block_on(async {
        let (a, b) = UnixStream::pair().unwrap();
        // 64 KiB waiting: every one-byte read below is ready at once.
        a.write_all(&vec![1u8; 64 * 1024]).await.unwrap();
        let ticked = Arc::new(AtomicBool::new(false));
        let t = ticked.clone();
        let ticker = duality_rt::spawn(async move { t.store(true, SeqCst) });
        let reader = duality_rt::spawn(async move {
            let mut byte = [0u8; 1];
            let mut seen_tick_at = None;
            for i in 0..64 * 1024 {
                assert_eq!(b.read(&mut byte).await.unwrap(), 1);
                if seen_tick_at.is_none() && ticked.load(SeqCst) {
                    seen_tick_at = Some(i);
                }
            }
            seen_tick_at
        });
        let at = reader.await.unwrap();
        ticker.await.unwrap();
        // Without the budget the reader never returns to the loop and the
        // ticker runs only after all 65,536 reads.
        let at = at.expect("the other task ran only after the reader finished");
        assert!(
            at <= 2 * duality_rt::coop::BUDGET as usize,
            "the other task first ran after {at} reads"
        );
    });
}
