use duality_rt::{block_on, spawn, yield_now};

#[test]
fn spawn_and_join() {
    let v = block_on(async {
        let h = spawn(async { 40 + 2 });
        h.await.unwrap()
    });
    assert_eq!(v, 42);
}

#[test]
fn many_yields() {
    let total = block_on(async {
        let mut hs = Vec::new();
        for i in 0..100u64 {
            hs.push(spawn(async move {
                for _ in 0..100 {
                    yield_now().await;
                }
                i
            }));
        }
        let mut s = 0;
        for h in hs {
            s += h.await.unwrap();
        }
        s
    });
    assert_eq!(total, 4950);
    assert_eq!(duality_rt::task::alive(), 0);
}

/// A loop made and dropped inside a running one leaves the running one
/// current and working (its drop took the thread's current loop with it:
/// a dangling pointer, and the next spawn hung).
#[test]
fn a_loop_dropped_inside_a_running_one_leaves_it_intact() {
    use duality_rt::{EventLoop, LoopConfig};
    block_on(async {
        let id = duality_rt::event_loop::current().map(|h| h.id());
        let r = spawn(async {
            drop(EventLoop::new(LoopConfig::default()).unwrap());
            7
        })
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(duality_rt::event_loop::current().map(|h| h.id()), id);
        assert_eq!(spawn(async { 42 }).await.unwrap(), 42);
    });
}

/// A nested block_on panics, as documented, and the panic is caught like
/// any other (it aborted the process: the drop of the inner loop panicked
/// again while unwinding).
#[test]
fn a_nested_block_on_panics_without_aborting() {
    let r = std::panic::catch_unwind(|| block_on(async { block_on(async {}) }));
    assert!(r.is_err());
    block_on(async {
        assert!(spawn(async { block_on(async {}) }).await.is_err());
        assert_eq!(spawn(async { 1 }).await.unwrap(), 1);
    });
}

/// Durations past what an `Instant` holds mean "never", and a loop set to
/// poll 0 tasks a turn still polls one (each panicked or hung).
#[test]
fn extreme_durations_and_budgets_do_not_panic_or_hang() {
    use duality_rt::time::{sleep, timeout};
    use std::time::Duration;
    block_on(async {
        let r = timeout(Duration::from_millis(20), sleep(Duration::MAX)).await;
        assert!(r.is_err());
        assert_eq!(timeout(Duration::MAX, async { 5 }).await.unwrap(), 5);
    });
    for config in [
        duality_rt::LoopConfig {
            budget: 0,
            ..Default::default()
        },
        duality_rt::LoopConfig {
            turn_time: Duration::ZERO,
            ..Default::default()
        },
    ] {
        let mut lp = duality_rt::EventLoop::new(config).unwrap();
        assert_eq!(lp.block_on(async { spawn(async { 3 }).await.unwrap() }), 3);
    }
}
