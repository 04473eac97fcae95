//! A handle to an ended loop cannot act on the loop that reuses its slot.

use duality_rt::{LoopConfig, LoopThread};

#[test]
fn stop_through_a_stale_handle_leaves_the_next_loop_running() {
    // Loop slots are recycled: run a few rounds so one lands on a reused slot.
    for _ in 0..8 {
        let first = LoopThread::spawn(LoopConfig::default()).unwrap();
        let stale = first.handle();
        first.join().unwrap();
        assert!(!stale.is_current(), "an ended loop's handle is stale");
        let second = LoopThread::spawn(LoopConfig::default()).unwrap();
        assert!(second.handle().is_current());
        stale.stop();
        // The second loop still runs tasks.
        let h = second.handle().spawn(async { 7 });
        assert_eq!(duality_rt::block_on(h).unwrap(), 7);
        assert!(!stale.is_current(), "a reused slot has a new generation");
        second.join().unwrap();
    }
}

/// `load()` of a loop that went to sleep after a busy turn is zero, not the
/// depth its last busy turn published: the favor-active acceptor waits for
/// loads to fall, and a stale depth made it wait for a sleeping loop forever.
#[test]
fn a_sleeping_loop_reports_no_load() {
    let lt = LoopThread::spawn(LoopConfig::default()).unwrap();
    let h = lt.handle();
    // More tasks than one turn's budget, pushed at once, so a turn ends with
    // ready tasks left over.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let joins: Vec<_> = (0..1000)
        .map(|_| {
            let done = done.clone();
            h.spawn(async move {
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
        })
        .collect();
    for j in joins {
        duality_rt::block_on(j).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while h.load() != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(h.load(), 0, "an idle loop reports ready work");
    lt.join().unwrap();
}

/// A loop given a CPU runs its tasks there only; one given a CPU the
/// process may not use does not start, and says why.
#[test]
fn a_loop_pinned_to_a_cpu_runs_there() {
    let allowed = duality_rt::affinity::allowed_cpus().unwrap();
    let cpu = *allowed.last().unwrap();
    let lt = LoopThread::spawn(LoopConfig {
        cpu: Some(cpu),
        ..Default::default()
    })
    .unwrap();
    let h = lt
        .handle()
        .spawn(async { duality_rt::affinity::allowed_cpus().unwrap() });
    assert_eq!(duality_rt::block_on(h).unwrap(), vec![cpu]);
    lt.join().unwrap();
    let outside = (0..4096).find(|c| !allowed.contains(c)).unwrap();
    let e = LoopThread::spawn(LoopConfig {
        cpu: Some(outside),
        ..Default::default()
    })
    .err()
    .expect("a loop on a CPU outside the mask started");
    assert!(e.to_string().contains(&format!("CPU {outside}")), "{e}");
}
