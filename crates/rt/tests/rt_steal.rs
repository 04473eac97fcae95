//! Loops in one WorkGroup share ready tasks: an idle loop gets work from a
//! busy one (the `steal` model).

use duality_rt::{LoopConfig, LoopThread, WorkGroup};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

#[test]
fn an_idle_loop_takes_ready_tasks_from_a_busy_one() {
    let group = WorkGroup::new();
    let config = |name: &str| LoopConfig {
        name: Some(name.into()),
        work_group: Some(group.clone()),
        long_poll_threshold: None,
        ..Default::default()
    };
    let busy = LoopThread::spawn(config("busy")).unwrap();
    let idle = LoopThread::spawn(config("idle")).unwrap();
    let idle_id = idle.handle().id();
    let ran_on_idle = Arc::new(AtomicU64::new(0));
    let mut joins = Vec::new();
    // Every task starts on the busy loop and does CPU work between yields.
    for _ in 0..64 {
        let ran = ran_on_idle.clone();
        joins.push(busy.handle().spawn(async move {
            for _ in 0..50 {
                let mut x = 0u64;
                for i in 0..5_000u64 {
                    x = std::hint::black_box(x.wrapping_add(i));
                }
                std::hint::black_box(x);
                if duality_rt::event_loop::current().map(|h| h.id()) == Some(idle_id) {
                    ran.fetch_add(1, Relaxed);
                }
                duality_rt::yield_now().await;
            }
        }));
    }
    duality_rt::block_on(async move {
        for j in joins {
            j.await.unwrap();
        }
    });
    assert!(group.tasks_moved() > 0, "no task was moved");
    assert!(ran_on_idle.load(Relaxed) > 0, "the idle loop ran nothing");
    assert!(idle.handle().snapshot().polls > 0);
    drop(busy);
    drop(idle);
}
