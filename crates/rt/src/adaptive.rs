//! Where a heavy job runs: on the loop, on the CPU pool, or — adaptively —
//! wherever this job's class has been cheaper (seed 002's offload policy).
//!
//! [`OffloadPolicy::Adaptive`] keeps, per job class (the caller's key, e.g.
//! gzip by input-size bucket), a moving estimate of what a job costs, and a
//! moving estimate of what a hand-off to the pool costs beyond the job
//! itself (queueing, two cross-thread wake-ups), both measured on every run
//! wherever it ran. A job runs inline when its class is known to cost less
//! than a hand-off and less than a loop turn's budget; otherwise (unknown
//! classes too) on the pool. A class whose cost changes is re-learned: every
//! run refreshes its estimate, so a class that grew leaves the loop after
//! one slow run, and one that shrank comes back.
//!
//! When the pool's bounded queue is full, a job waits for room in FIFO order
//! (its task is parked, its loop serves others); it is never dropped and
//! never run inline instead, so a burst of heavy jobs cannot turn into loop
//! stalls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where heavy jobs run (a server's `--offload` flag).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OffloadPolicy {
    /// On the loop that runs the request (nginx's way).
    #[default]
    Inline,
    /// Always on the CPU pool.
    Pool,
    /// Per job class, where it has been cheaper (see the module docs).
    Adaptive,
}

impl std::str::FromStr for OffloadPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<OffloadPolicy, String> {
        match s {
            "inline" => Ok(OffloadPolicy::Inline),
            "pool" => Ok(OffloadPolicy::Pool),
            "adaptive" => Ok(OffloadPolicy::Adaptive),
            _ => Err(format!(
                "unknown offload policy {s:?} (inline, pool or adaptive)"
            )),
        }
    }
}

impl std::fmt::Display for OffloadPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OffloadPolicy::Inline => "inline",
            OffloadPolicy::Pool => "pool",
            OffloadPolicy::Adaptive => "adaptive",
        })
    }
}

/// Where one job ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On the calling task's thread.
    Inline,
    /// On the CPU pool.
    Pool,
}

/// Weight of a new sample in a moving estimate.
const ALPHA: f64 = 0.25;
/// The hand-off estimate before any was measured.
const HANDOFF_PRIOR: Duration = Duration::from_micros(20);
/// The most a job may be expected to hold a loop.
const LOOP_BUDGET: Duration = Duration::from_millis(1);

/// Runs jobs where an [`OffloadPolicy`] says, learning costs per class.
#[derive(Debug)]
pub struct Offloader {
    policy: OffloadPolicy,
    /// Per class: the moving estimate of one job's cost, in nanoseconds.
    costs: Mutex<HashMap<u64, f64>>,
    /// The moving estimate of a hand-off's own cost, in nanoseconds.
    handoff_ns: AtomicU64,
    inline_runs: AtomicU64,
    pool_runs: AtomicU64,
}

impl Offloader {
    /// An offloader with `policy` and nothing learned yet.
    pub fn new(policy: OffloadPolicy) -> Offloader {
        Offloader {
            policy,
            costs: Mutex::new(HashMap::new()),
            handoff_ns: AtomicU64::new(HANDOFF_PRIOR.as_nanos() as u64),
            inline_runs: AtomicU64::new(0),
            pool_runs: AtomicU64::new(0),
        }
    }

    /// The policy.
    pub fn policy(&self) -> OffloadPolicy {
        self.policy
    }

    /// Where the next job of `class` would run.
    pub fn placement(&self, class: u64) -> Placement {
        match self.policy {
            OffloadPolicy::Inline => Placement::Inline,
            OffloadPolicy::Pool => Placement::Pool,
            OffloadPolicy::Adaptive => match self.estimate(class) {
                Some(cost) if cost < self.handoff_cost().min(LOOP_BUDGET) => Placement::Inline,
                _ => Placement::Pool,
            },
        }
    }

    /// The learned cost of one job of `class` (`None` before its first run).
    pub fn estimate(&self, class: u64) -> Option<Duration> {
        crate::loom::lock_std(&self.costs)
            .get(&class)
            .map(|&ns| Duration::from_nanos(ns as u64))
    }

    /// The learned cost of a hand-off to the pool, beyond the job itself.
    pub fn handoff_cost(&self) -> Duration {
        Duration::from_nanos(self.handoff_ns.load(Relaxed))
    }

    /// Jobs run inline and on the pool so far.
    pub fn runs(&self) -> (u64, u64) {
        (self.inline_runs.load(Relaxed), self.pool_runs.load(Relaxed))
    }

    fn learn(&self, class: u64, took: Duration) {
        let ns = took.as_nanos() as f64;
        let mut costs = crate::loom::lock_std(&self.costs);
        let e = costs.entry(class).or_insert(ns);
        *e += ALPHA * (ns - *e);
    }

    fn learn_handoff(&self, overhead: Duration) {
        let old = self.handoff_ns.load(Relaxed) as f64;
        let new = old + ALPHA * (overhead.as_nanos() as f64 - old);
        self.handoff_ns.store(new.max(0.0) as u64, Relaxed);
    }

    /// Runs `f`, a job of `class`, where the policy places it, and learns
    /// from the run. `None` if the pool lost the job (shut down, or `f`
    /// panicked there).
    pub async fn run<T, F>(&self, class: u64, f: F) -> Option<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match self.placement(class) {
            Placement::Inline => {
                self.inline_runs.fetch_add(1, Relaxed);
                let t0 = Instant::now();
                let out = f();
                self.learn(class, t0.elapsed());
                Some(out)
            }
            Placement::Pool => {
                self.pool_runs.fetch_add(1, Relaxed);
                let t0 = Instant::now();
                let (out, took) = crate::offload(move || {
                    let t = Instant::now();
                    let out = f();
                    (out, t.elapsed())
                })
                .await
                .ok()?;
                self.learn(class, took);
                self.learn_handoff(t0.elapsed().saturating_sub(took));
                Some(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    fn placements(o: &Offloader, class: u64, n: usize, cost: Duration) -> (usize, usize) {
        let (mut inline, mut pool) = (0, 0);
        for _ in 0..n {
            match o.placement(class) {
                Placement::Inline => inline += 1,
                Placement::Pool => pool += 1,
            }
            assert!(crate::block_on(o.run(class, move || spin(cost))).is_some());
        }
        (inline, pool)
    }

    #[test]
    fn fixed_policies_do_not_learn_where() {
        let o = Offloader::new(OffloadPolicy::Inline);
        assert_eq!(placements(&o, 1, 3, Duration::from_millis(2)), (3, 0));
        let o = Offloader::new(OffloadPolicy::Pool);
        assert_eq!(placements(&o, 1, 3, Duration::ZERO), (0, 3));
        assert_eq!(o.runs(), (0, 3));
    }

    /// The decision from learned costs alone (synthetic samples: no timing).
    #[test]
    fn a_class_whose_cost_changes_is_relearned() {
        let o = Offloader::new(OffloadPolicy::Adaptive);
        assert_eq!(o.placement(3), Placement::Pool, "unknown: the pool");
        o.learn(3, Duration::from_micros(1));
        assert_eq!(o.placement(3), Placement::Inline, "far below a hand-off");
        // It grows: one slow run moves it (a quarter of 3 ms is past 20 µs).
        o.learn(3, Duration::from_millis(3));
        assert_eq!(o.placement(3), Placement::Pool);
        // It shrinks: each cheap run takes a quarter off the estimate.
        let mut runs = 0;
        while o.placement(3) == Placement::Pool {
            o.learn(3, Duration::from_micros(1));
            runs += 1;
        }
        assert!(
            (3..=20).contains(&runs),
            "back inline after {runs} cheap runs"
        );
        // A cheaper hand-off than the class keeps it on the pool.
        o.learn_handoff(Duration::ZERO);
        o.learn_handoff(Duration::ZERO);
        o.learn(9, Duration::from_micros(15));
        assert_eq!(o.placement(9), Placement::Pool);
        // Past the loop's budget nothing runs inline, however dear a hand-off.
        for _ in 0..40 {
            o.learn_handoff(Duration::from_millis(50));
        }
        o.learn(10, Duration::from_millis(2));
        assert_eq!(o.placement(10), Placement::Pool);
    }

    /// Real runs: a cheap class ends up inline, an expensive one never is.
    #[test]
    fn cheap_classes_go_inline_and_expensive_ones_stay_off_the_loop() {
        let o = Offloader::new(OffloadPolicy::Adaptive);
        let mut runs = 0;
        while o.placement(7) == Placement::Pool {
            placements(&o, 7, 1, Duration::ZERO);
            runs += 1;
            assert!(runs < 100, "still on the pool after {runs} cheap runs");
        }
        assert_eq!(placements(&o, 7, 1, Duration::ZERO), (1, 0));
        // Measured at 3 ms or more every time: past the loop's budget.
        assert_eq!(placements(&o, 8, 5, Duration::from_millis(3)), (0, 5));
        assert!(o.estimate(8).unwrap() >= Duration::from_millis(3));
        let (inline, pool) = o.runs();
        assert!(
            inline >= 1 && pool >= 6,
            "{inline} inline, {pool} on the pool"
        );
    }

    #[test]
    fn policies_parse_and_print() {
        for p in [
            OffloadPolicy::Inline,
            OffloadPolicy::Pool,
            OffloadPolicy::Adaptive,
        ] {
            assert_eq!(p.to_string().parse::<OffloadPolicy>(), Ok(p));
        }
        assert!("sometimes".parse::<OffloadPolicy>().is_err());
    }
}
