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
/// The least a [`Placer`] takes a trip to cost, whatever it measured.
const TRIP_FLOOR: Duration = Duration::from_micros(20);
/// The most a job may be expected to hold a loop.
const LOOP_BUDGET: Duration = Duration::from_millis(1);

/// Runs jobs where an [`OffloadPolicy`] says, learning costs per class.
#[derive(Debug)]
pub struct Offloader {
    policy: OffloadPolicy,
    /// Per class: the moving estimate of one job's cost, in nanoseconds.
    costs: Mutex<HashMap<u64, f64>>,
    /// The moving estimate of a hand-off's own cost.
    handoff: Estimate,
    inline_runs: AtomicU64,
    pool_runs: AtomicU64,
}

impl Offloader {
    /// An offloader with `policy` and nothing learned yet.
    pub fn new(policy: OffloadPolicy) -> Offloader {
        Offloader {
            policy,
            costs: Mutex::new(HashMap::new()),
            handoff: Estimate::prior(HANDOFF_PRIOR),
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
            OffloadPolicy::Adaptive => decide(self.estimate(class), self.handoff_cost()),
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
        self.handoff.get().unwrap_or(HANDOFF_PRIOR)
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
        self.handoff.learn(overhead);
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

/// The adaptive rule: inline when the job is known to cost less than a
/// hand-off and less than a loop turn's budget.
fn decide(cost: Option<Duration>, handoff: Duration) -> Placement {
    match cost {
        Some(cost) if cost < handoff.min(LOOP_BUDGET) => Placement::Inline,
        _ => Placement::Pool,
    }
}

/// A moving estimate of a duration, lock-free: racing updates may lose a
/// sample, which an estimate can afford (a lock shared by every loop could
/// not be afforded per job).
#[derive(Debug)]
struct Estimate(AtomicU64);

/// An [`Estimate`] with no sample yet.
const UNSET: u64 = u64::MAX;

impl Estimate {
    const fn unset() -> Estimate {
        Estimate(AtomicU64::new(UNSET))
    }

    fn prior(d: Duration) -> Estimate {
        Estimate(AtomicU64::new(d.as_nanos().min(UNSET as u128 - 1) as u64))
    }

    fn get(&self) -> Option<Duration> {
        match self.0.load(Relaxed) {
            UNSET => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Moves the estimate a quarter of the way to `d` (to `d` if unset).
    fn learn(&self, d: Duration) {
        let ns = d.as_nanos().min(UNSET as u128 - 1) as u64;
        let new = match self.0.load(Relaxed) {
            UNSET => ns,
            old => (old as f64 + ALPHA * (ns as f64 - old as f64)).max(0.0) as u64,
        };
        self.0.store(new, Relaxed);
    }
}

/// [`OffloadPolicy::Adaptive`]'s decision for one class of job whose
/// hand-off the caller makes itself (the models' payload stages: a
/// "hand-off" there is a trip to a payload thread, not to the CPU pool).
/// Lock-free, cheap enough to consult per batch of requests.
#[derive(Debug)]
pub struct Placer {
    cost: Estimate,
    handoff: Estimate,
}

impl Default for Placer {
    fn default() -> Placer {
        Placer::new()
    }
}

impl Placer {
    /// Nothing learned: the first jobs are handed off.
    pub const fn new() -> Placer {
        Placer {
            cost: Estimate::unset(),
            handoff: Estimate::unset(),
        }
    }

    /// Where the next job should run: [`Placement::Inline`] once jobs are
    /// known to cost less than a hand-off (and less than a loop turn's
    /// budget), [`Placement::Pool`] (handed off) otherwise.
    ///
    /// A trip is valued at 20 µs at least. What it is measured to add to
    /// the wait misses what it costs the machine: the wake-up, the spin of
    /// the thread that waits, two threads busy for one job. While both
    /// threads spin a trip adds little to the wait, and without the floor
    /// batches of 16 pipelined echo requests (a few µs) stayed handed off
    /// for whole rounds on 2 cores, much slower than on the loop.
    pub fn placement(&self) -> Placement {
        let trip = self.handoff.get().unwrap_or(HANDOFF_PRIOR);
        decide(self.cost.get(), trip.max(TRIP_FLOOR))
    }

    /// True if what a hand-off costs could move the next job: a job learned
    /// to cost less than a trip's floor runs inline whatever the trip costs,
    /// so a caller that hands one off only to measure the trip need not.
    pub fn trip_matters(&self) -> bool {
        self.cost.get().is_none_or(|c| c >= TRIP_FLOOR)
    }

    /// A job ran inline and took `took`.
    pub fn ran_inline(&self, took: Duration) {
        self.cost.learn(took);
    }

    /// A job was handed off: it cost `took`, and the trip added
    /// `overhead` to its caller's wait (from sending it to having the
    /// answer, less the job's own wall time).
    ///
    /// Where the job ran on a thread that competes for cores, measure
    /// `took` in that thread's CPU time (`time::thread_cpu_time`), not a
    /// wall clock: preemptions mid-job would make jobs look dear exactly
    /// while threads compete for cores, when handing off is dearest.
    pub fn ran_handed_off(&self, took: Duration, overhead: Duration) {
        self.cost.learn(took);
        self.handoff.learn(overhead);
    }

    /// The learned cost of one job (`None` before the first).
    pub fn cost(&self) -> Option<Duration> {
        self.cost.get()
    }

    /// The learned cost of a hand-off beyond the job (`None` before the first).
    pub fn handoff_cost(&self) -> Option<Duration> {
        self.handoff.get()
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

    /// The per-batch placer: handed off until it has learned both costs;
    /// cheap jobs then stay inline, and a job that grows leaves again.
    #[test]
    fn a_placer_learns_inline_and_leaves_when_jobs_grow() {
        let p = Placer::new();
        assert_eq!(p.placement(), Placement::Pool, "nothing learned");
        p.ran_handed_off(Duration::from_micros(1), Duration::from_micros(10));
        assert_eq!(p.cost(), Some(Duration::from_micros(1)));
        assert_eq!(p.handoff_cost(), Some(Duration::from_micros(10)));
        assert_eq!(p.placement(), Placement::Inline);
        // A warm trip measured cheaper than the job still counts as 20 us.
        for _ in 0..20 {
            p.ran_handed_off(Duration::from_micros(5), Duration::from_micros(2));
        }
        assert_eq!(p.placement(), Placement::Inline, "5 us jobs, 2 us trips");
        // Jobs grow past a hand-off: a few inline runs move it out.
        let mut runs = 0;
        while p.placement() == Placement::Inline {
            p.ran_inline(Duration::from_micros(40));
            runs += 1;
            assert!(runs < 10, "still inline after {runs} runs of 40 us");
        }
        // A dearer hand-off (say the payload threads queue up) brings the
        // same jobs back, but never past the loop's budget.
        for _ in 0..20 {
            p.ran_handed_off(Duration::from_micros(40), Duration::from_micros(500));
        }
        assert_eq!(p.placement(), Placement::Inline);
        for _ in 0..20 {
            p.ran_handed_off(Duration::from_millis(2), Duration::from_millis(58));
        }
        assert_eq!(p.placement(), Placement::Pool, "past the loop's budget");
    }

    /// Below the trip's floor a job stays inline whatever a trip costs: no
    /// trip needs measuring there, and does again once jobs grow past it.
    #[test]
    fn a_trip_matters_only_for_jobs_at_or_above_its_floor() {
        let p = Placer::new();
        assert!(p.trip_matters(), "nothing learned");
        p.ran_inline(Duration::from_micros(2));
        assert!(!p.trip_matters());
        for trip in [1, 15, 20, 500] {
            p.ran_handed_off(Duration::from_micros(2), Duration::from_micros(trip));
            assert_eq!(p.placement(), Placement::Inline, "{trip} us trips");
        }
        assert!(!p.trip_matters());
        while p.cost() < Some(TRIP_FLOOR) {
            p.ran_inline(Duration::from_micros(40));
        }
        assert!(p.trip_matters(), "a trip may now decide");
    }
}
