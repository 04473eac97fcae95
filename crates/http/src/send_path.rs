//! Copy or `sendfile` for a hot file of middling size, learned per thread
//! from what each has cost it here.
//!
//! A file the page cache holds can go out as a copy of our bytes (the head
//! and body in one send) or with `sendfile` from a descriptor kept open
//! (the socket takes the kernel's pages). Which costs the server less
//! depends on the client, not on the file: at 16 KiB the copy cost 4.4-5.6
//! µs per request under `duality bench http`'s client and 7.2-8.4 under
//! wrk, `sendfile` 6.2-7.4 under both (`docs/results/http-sendfile`). The
//! copy is cheap while the socket's buffer pages come back before the next
//! send (the client read them at once) and dear when they are still
//! queued unread, as behind a slow reader or a real network. No static
//! size threshold is right for both, so for sizes in
//! [`HttpConfig::sendfile_learn`](crate::HttpConfig::sendfile_learn)..
//! [`sendfile_kept`](crate::HttpConfig::sendfile_kept) each thread that
//! answers requests measures both.
//!
//! Requests of that range are counted in epochs: [`WARM`] requests not
//! measured, then the thread's CPU time over the next [`MEASURE`] requests
//! (all its work: both paths' kernel work runs on the sending thread) gives
//! the epoch's cost per request. An epoch that took longer than
//! [`HttpConfig::sendfile_learn_epoch`](crate::HttpConfig::sendfile_learn_epoch)
//! (the load too light or stopping) is not measured. The
//! thread settles on one path and every [`PROBE_EVERY`] epochs probes the
//! other for one, then takes it if it cost less than the settled path in
//! each of the epochs on both sides of it (a probe that lost by far doubles
//! the wait for the next, up to [`PROBE_EVERY_MAX`] epochs); a client that
//! changes is followed within a few seconds of busy load.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// How a body in the learned range goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendPath {
    /// A copy of the page cache's bytes, with the head, in one send.
    Copy,
    /// `sendfile` from the descriptor kept open.
    Sendfile,
}

impl SendPath {
    fn other(self) -> SendPath {
        match self {
            SendPath::Copy => SendPath::Sendfile,
            SendPath::Sendfile => SendPath::Copy,
        }
    }
}

/// Requests after a change of path before an epoch's measure starts: about
/// one per connection of a busy loop, so that the socket buffers the old
/// path filled have drained (a copy looks cheap until they have).
pub(crate) const WARM: u32 = 1024;
/// Requests measured per epoch: some milliseconds of a busy loop, many more
/// than the scheduler's preemptions that land in one.
pub(crate) const MEASURE: u32 = 1024;
/// The default of [`HttpConfig::sendfile_learn_epoch`](crate::HttpConfig::sendfile_learn_epoch):
/// an epoch longer than this is not learned from, its CPU time would hold
/// idle turns (spins) as much as requests.
pub(crate) const MAX_EPOCH: Duration = Duration::from_millis(500);
/// Epochs on the settled path between two probes of the other, at first
/// and after a switch or a close probe.
pub(crate) const PROBE_EVERY: u32 = 16;
/// The longest wait between probes, reached after probes that lost by
/// more than [`FAR`]: the paths differ by 30% under some clients, where
/// probing the dearer one every 16 epochs costs 2% of the CPU.
pub(crate) const PROBE_EVERY_MAX: u32 = 64;
/// A probe that cost this much more than the settled path on both sides
/// of it lost by far.
pub(crate) const FAR: f64 = 0.12;
/// The probed path must cost this much less than the settled one around it
/// to be taken: no flapping between two paths that cost the same.
pub(crate) const MARGIN: f64 = 0.03;

/// Where a [`Learner`] is in its cycle.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// On the settled path; `epochs` of it measured since the last probe.
    Settled { epochs: u32 },
    /// Measuring the other path for one epoch; `before`: the settled
    /// path's cost in the epoch just before.
    Probing { before: f64 },
    /// Back on the settled path for one epoch, to compare the probe with
    /// the settled path's cost on both sides of it: the probe is taken only
    /// if it beat both, so neither a cost that drifts with the load nor one
    /// slow neighbour (a burst of other work) is taken for a difference
    /// between the paths.
    Confirming { before: f64, probe: f64 },
}

/// One thread's learning (see the [module docs](self)).
///
/// Per-epoch costs wander by 10% or more on a busy 2-core machine while
/// the paths differ by about that much, so the paths are compared only
/// side by side in time: settled, probe, settled again; the probe is taken
/// if it cost less than each neighbour by [`MARGIN`].
#[derive(Debug)]
pub(crate) struct Learner {
    /// The path taken between probes.
    settled: SendPath,
    /// Epochs between probes now: [`PROBE_EVERY`], doubled by each probe
    /// that lost by far, up to [`PROBE_EVERY_MAX`].
    every: u32,
    phase: Phase,
    /// Requests of the current epoch so far.
    seen: u32,
    /// Thread CPU time and wall time when the measure started.
    start: Option<(Duration, Instant)>,
}

impl Learner {
    /// Nothing learned: the copy (the path below the learned range), and
    /// `sendfile` probed after its first measured epoch.
    pub(crate) const fn new() -> Learner {
        Learner {
            settled: SendPath::Copy,
            every: PROBE_EVERY,
            phase: Phase::Settled {
                epochs: PROBE_EVERY - 1,
            },
            seen: 0,
            start: None,
        }
    }

    /// The path the next request takes.
    fn path(&self) -> SendPath {
        match self.phase {
            Phase::Probing { .. } => self.settled.other(),
            _ => self.settled,
        }
    }

    /// The path for the next request of the learned range. `clock` gives
    /// the thread's CPU time and the wall time; it is read twice an epoch.
    /// An epoch whose measure took longer than `max_epoch` is not learned
    /// from.
    pub(crate) fn choose(
        &mut self,
        max_epoch: Duration,
        clock: impl FnOnce() -> (Duration, Instant),
    ) -> SendPath {
        self.seen += 1;
        if self.seen == WARM {
            self.start = Some(clock());
        } else if self.seen >= WARM + MEASURE {
            let (cpu, wall) = clock();
            let cost = self
                .start
                .take()
                .filter(|&(_, wall0)| wall.saturating_duration_since(wall0) <= max_epoch)
                .map(|(cpu0, _)| cpu.saturating_sub(cpu0).as_nanos() as f64 / MEASURE as f64);
            self.seen = 0;
            self.phase = self.next_phase(cost);
        }
        self.path()
    }

    /// The phase after an epoch that cost `cost` per request (`None`: not
    /// measured). An epoch not measured breaks a comparison: the cycle
    /// starts again on the settled path.
    fn next_phase(&mut self, cost: Option<f64>) -> Phase {
        let settled = Phase::Settled { epochs: 0 };
        let Some(cost) = cost else {
            return match self.phase {
                Phase::Settled { epochs } => Phase::Settled { epochs },
                _ => settled,
            };
        };
        match self.phase {
            Phase::Settled { epochs } if epochs + 1 >= self.every => {
                Phase::Probing { before: cost }
            }
            Phase::Settled { epochs } => Phase::Settled { epochs: epochs + 1 },
            Phase::Probing { before } => Phase::Confirming {
                before,
                probe: cost,
            },
            Phase::Confirming { before, probe } => {
                if probe < before.min(cost) * (1.0 - MARGIN) {
                    self.settled = self.settled.other();
                    self.every = PROBE_EVERY;
                } else if probe > before.max(cost) * (1.0 + FAR) {
                    self.every = (self.every * 2).min(PROBE_EVERY_MAX);
                } else {
                    self.every = PROBE_EVERY;
                }
                settled
            }
        }
    }
}

thread_local! {
    static LEARNER: RefCell<Learner> = const { RefCell::new(Learner::new()) };
}

/// The path for the next request of the learned range on this thread
/// (`max_epoch`: see [`Learner::choose`]).
pub(crate) fn choose(max_epoch: Duration) -> SendPath {
    LEARNER.with(|l| {
        l.borrow_mut().choose(max_epoch, || {
            (
                duality_rt::time::thread_cpu_time(),
                duality_rt::time::loop_now(),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a learner with a fake clock: each request of `path` costs
    /// `cost(path, epoch number)` of CPU time and 1 µs of wall time.
    struct Sim {
        learner: Learner,
        cpu: Duration,
        wall: Instant,
        n: u64,
        taken: [u64; 2],
    }

    const EPOCH: u64 = (WARM + MEASURE) as u64;
    /// Epochs from one probe to the next.
    const CYCLE: u64 = PROBE_EVERY as u64 + 2;

    impl Sim {
        fn new() -> Sim {
            Sim {
                learner: Learner::new(),
                cpu: Duration::ZERO,
                wall: Instant::now(),
                n: 0,
                taken: [0; 2],
            }
        }

        fn epochs(&mut self, epochs: u64, cost: impl Fn(SendPath, u64) -> u64) {
            for _ in 0..epochs * EPOCH {
                let (cpu, wall) = (self.cpu, self.wall);
                let path = self.learner.choose(MAX_EPOCH, || (cpu, wall));
                self.taken[path as usize] += 1;
                self.cpu += Duration::from_nanos(cost(path, self.n / EPOCH));
                self.wall += Duration::from_micros(1);
                self.n += 1;
            }
        }

        fn share(&self, path: SendPath) -> f64 {
            self.taken[path as usize] as f64 / self.taken.iter().sum::<u64>() as f64
        }
    }

    fn by_path(copy: u64, sendfile: u64) -> impl Fn(SendPath, u64) -> u64 {
        move |p, _| if p == SendPath::Copy { copy } else { sendfile }
    }

    #[test]
    fn copy_first_then_sendfile_probed_then_the_cheaper_settled() {
        let mut s = Sim::new();
        s.epochs(1, by_path(7_000, 6_000));
        // The epoch's last request already takes the probed path.
        assert_eq!(s.taken, [EPOCH - 1, 1]);
        assert_eq!(s.learner.path(), SendPath::Sendfile);
        s.epochs(2, by_path(7_000, 6_000));
        assert_eq!(s.learner.settled, SendPath::Sendfile);
        let mut s = Sim::new();
        s.epochs(3, by_path(5_000, 6_800));
        assert_eq!(s.learner.settled, SendPath::Copy);
    }

    /// After `warm` epochs at these costs, `cheap` is settled and taken
    /// all but about one epoch in `cycle` over the next four cycles.
    fn settles(copy: u64, sendfile: u64, cheap: SendPath, warm: u64, cycle: u64) -> Sim {
        let mut s = Sim::new();
        s.epochs(warm, by_path(copy, sendfile));
        s.taken = [0; 2];
        s.epochs(4 * cycle, by_path(copy, sendfile));
        let share = s.share(cheap);
        assert!(
            (1.0 - 1.5 / cycle as f64..1.0).contains(&share),
            "{cheap:?} taken {share:.3} of the time at {copy}/{sendfile} ns"
        );
        assert_eq!(s.learner.settled, cheap);
        s
    }

    #[test]
    fn the_cheaper_path_is_kept_and_the_other_only_probed() {
        // Closer than FAR: probed every PROBE_EVERY epochs.
        for (copy, sendfile, cheap) in [
            (6_900, 6_500, SendPath::Sendfile),
            (6_000, 6_500, SendPath::Copy),
        ] {
            let s = settles(copy, sendfile, cheap, 3, CYCLE);
            assert_eq!(s.learner.every, PROBE_EVERY);
        }
    }

    #[test]
    fn probes_that_lose_by_far_come_less_often() {
        for (copy, sendfile, cheap) in [
            (7_500, 6_500, SendPath::Sendfile),
            (5_000, 6_800, SendPath::Copy),
        ] {
            // 16, 32, then 64 epochs between probes.
            let s = settles(
                copy,
                sendfile,
                cheap,
                3 + CYCLE + (2 * CYCLE - 2),
                PROBE_EVERY_MAX as u64 + 2,
            );
            assert_eq!(s.learner.every, PROBE_EVERY_MAX);
        }
    }

    #[test]
    fn a_client_that_changes_is_followed() {
        let mut s = Sim::new();
        // First the copy is cheap (a fast reader), then dear (a slow one).
        let flip = 3 + 2 * CYCLE;
        let cost = move |p: SendPath, epoch: u64| match (p, epoch < flip) {
            (SendPath::Copy, true) => 5_000,
            (SendPath::Copy, false) => 8_000,
            (SendPath::Sendfile, _) => 6_500,
        };
        s.epochs(flip, cost);
        assert_eq!(s.learner.settled, SendPath::Copy);
        // Probes lost by far until then: the next comes within the
        // longest wait.
        s.epochs(PROBE_EVERY_MAX as u64 + 3, cost);
        assert_eq!(s.learner.settled, SendPath::Sendfile);
        s.taken = [0; 2];
        s.epochs(4 * CYCLE, cost);
        assert!(s.share(SendPath::Sendfile) > 0.9, "{:?}", s.taken);
    }

    #[test]
    fn a_cost_that_drifts_with_the_load_is_not_taken_for_a_difference() {
        // Both paths cost the same, 4% more each epoch (or less): a probe
        // compared with the epoch before it alone would look 4% dearer (or
        // cheaper) and switch; against both neighbours it is level.
        for step in [1.04f64, 1.0 / 1.04] {
            let mut s = Sim::new();
            let cost = move |_, epoch: u64| (5_000.0 * step.powi(epoch as i32 % 30)) as u64;
            let mut switches = 0;
            let mut last = s.learner.settled;
            for _ in 0..6 * CYCLE {
                s.epochs(1, cost);
                switches += usize::from(s.learner.settled != last);
                last = s.learner.settled;
            }
            assert_eq!(switches, 0, "drift {step}");
        }
    }

    #[test]
    fn one_slow_epoch_beside_a_probe_is_not_taken_for_a_difference() {
        let mut s = Sim::new();
        // The same cost, but every epoch after a probe is 60% dearer (a
        // burst of other work): compared with the mean of its neighbours
        // the probe would look 23% cheaper every time.
        let cost = |_, epoch: u64| if epoch % CYCLE == 2 { 8_000 } else { 5_000 };
        for _ in 0..6 * CYCLE {
            s.epochs(1, cost);
            assert_eq!(s.learner.settled, SendPath::Copy);
        }
    }

    #[test]
    fn paths_that_cost_the_same_do_not_flap() {
        let mut s = Sim::new();
        // Within the margin.
        let cost = |p: SendPath, epoch: u64| match (p, epoch % 3) {
            (SendPath::Sendfile, _) => 6_000,
            (SendPath::Copy, 0) => 6_100,
            (SendPath::Copy, _) => 5_950,
        };
        let mut last = s.learner.settled;
        for _ in 0..8 * CYCLE {
            s.epochs(1, cost);
            assert_eq!(s.learner.settled, last);
            last = s.learner.settled;
        }
    }

    #[test]
    fn slow_epochs_are_not_measured_and_change_nothing() {
        let mut l = Learner::new();
        let t0 = Instant::now();
        let mut cpu = Duration::ZERO;
        for i in 0..4 * EPOCH {
            // Each epoch's measured part spans more than MAX_EPOCH.
            let wall = t0 + MAX_EPOCH * 4 * (i as u32) / EPOCH as u32;
            cpu += Duration::from_micros(5);
            assert_eq!(l.choose(MAX_EPOCH, || (cpu, wall)), SendPath::Copy);
        }
        // A probe cut by a slow epoch is dropped: back on the settled path.
        let mut s = Sim::new();
        s.epochs(1, by_path(7_000, 6_000));
        assert_eq!(s.learner.path(), SendPath::Sendfile);
        for _ in 0..EPOCH {
            s.wall += MAX_EPOCH / 512;
            let (cpu, wall) = (s.cpu, s.wall);
            s.learner.choose(MAX_EPOCH, || (cpu, wall));
        }
        assert_eq!(s.learner.phase, Phase::Settled { epochs: 0 });
        assert_eq!(s.learner.path(), SendPath::Copy);
    }
}
