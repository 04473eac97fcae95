//! Introspection: what each loop is doing, readable from any thread.

use crate::event_loop::registry::{new_histogram, Shared};
use crate::event_loop::with_current;
use crate::loom::lock_std;
use hdrhistogram::Histogram;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Percentiles of how long single task polls held the loop, in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollTimes {
    /// Polls recorded.
    pub count: u64,
    /// Median poll time.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Longest single poll: the longest time one task blocked the loop.
    pub max_ns: u64,
}

/// One loop's numbers at one moment.
#[derive(Clone, Debug, Default)]
pub struct LoopSnapshot {
    /// Loop id.
    pub id: u16,
    /// Loop (thread) name.
    pub name: String,
    /// OS thread id.
    pub tid: i64,
    /// Tasks spawned on this loop whose futures have not been dropped yet.
    pub tasks_alive: i64,
    /// Tasks ready to run (at the end of the last turn).
    pub run_queue_depth: usize,
    /// Tasks pushed by other threads, not yet taken.
    pub handoff_depth: usize,
    /// Task polls.
    pub polls: u64,
    /// Times another thread had to wake this loop from its sleep (eventfd writes).
    pub wakeups: u64,
    /// Tasks received through the hand-off queue.
    pub handoffs: u64,
    /// Batches in which those were taken (one atomic swap each).
    pub handoff_batches: u64,
    /// I/O readiness events dispatched.
    pub io_events: u64,
    /// Timers fired.
    pub timers_fired: u64,
    /// Polls over the long-poll threshold.
    pub long_polls: u64,
    /// Loop turns.
    pub turns: u64,
    /// Registered I/O sources.
    pub io_sources: usize,
    /// Timers waiting in the wheel.
    pub timers_pending: usize,
    /// Poll-time percentiles.
    pub poll_times: PollTimes,
}

impl LoopSnapshot {
    pub(crate) fn read(shared: &Shared) -> LoopSnapshot {
        let s = &shared.stats;
        let poll_times = {
            let h = lock_std(&shared.poll_hist);
            if h.is_empty() {
                PollTimes::default()
            } else {
                PollTimes {
                    count: h.len(),
                    p50_ns: h.value_at_quantile(0.5),
                    p99_ns: h.value_at_quantile(0.99),
                    max_ns: h.max(),
                }
            }
        };
        LoopSnapshot {
            id: shared.id,
            name: lock_std(&shared.name).clone(),
            tid: shared.tid.load(Relaxed),
            tasks_alive: s.tasks_alive.load(Relaxed),
            run_queue_depth: s.run_queue_depth.load(Relaxed),
            handoff_depth: shared.handoff.len(),
            polls: s.polls.load(Relaxed),
            wakeups: s.wakeups.load(Relaxed),
            handoffs: s.handoffs.load(Relaxed),
            handoff_batches: s.handoff_batches.load(Relaxed),
            io_events: s.io_events.load(Relaxed),
            timers_fired: s.timers_fired.load(Relaxed),
            long_polls: s.long_polls.load(Relaxed),
            turns: s.turns.load(Relaxed),
            io_sources: s.io_sources.load(Relaxed),
            timers_pending: s.timers_pending.load(Relaxed),
            poll_times,
        }
    }
}

/// A latency distribution: a histogram (nanoseconds, two significant
/// digits) and the exact sum of what it recorded.
#[derive(Clone, Debug)]
pub struct Latency {
    hist: Histogram<u64>,
    sum_ns: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    /// An empty distribution (1 ns to one hour).
    pub fn new() -> Latency {
        Latency {
            hist: new_histogram(),
            sum_ns: 0,
        }
    }

    pub(crate) fn from_histogram(hist: Histogram<u64>) -> Latency {
        // The poll histogram keeps no sum: its mean times its count.
        let sum_ns = (hist.mean() * hist.len() as f64) as u64;
        Latency { hist, sum_ns }
    }

    /// Records `n` samples of `ns` nanoseconds (longer than an hour counts
    /// as an hour).
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n > 0 {
            self.hist.saturating_record_n(ns, n);
            self.sum_ns = self.sum_ns.saturating_add(ns.saturating_mul(n));
        }
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Sum of the samples, in nanoseconds.
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The value at quantile `q` (0..=1), in nanoseconds; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.value_at_quantile(q)
        }
    }

    /// The largest sample, in nanoseconds; 0 when empty.
    pub fn max_ns(&self) -> u64 {
        self.hist.max()
    }

    /// Samples of at most `ns` nanoseconds (to the histogram's precision):
    /// a cumulative bucket.
    pub fn count_at_most(&self, ns: u64) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.count_between(0, ns)
        }
    }

    /// Adds `other`'s samples.
    pub fn add(&mut self, other: &Latency) {
        // Same bounds on both sides: addition cannot fail.
        let _ = self.hist.add(&other.hist);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// Forgets every sample.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.sum_ns = 0;
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }
}

/// The per-request metrics of one loop (or, merged, of a server).
///
/// Recorded by the servers on the loop that serves the connection, into that
/// loop's own copy (no shared counter per request); the loop merges its copy
/// into the readable one every few milliseconds and before it sleeps.
#[derive(Clone, Debug, Default)]
pub struct RequestMetrics {
    /// Per request: the longest stretch of one poll of its loop spent
    /// serving it, from the poll's start to its response's first write.
    pub loop_hold: Latency,
    /// Per request: from its bytes arriving complete (the start of the poll
    /// that read them) to its response's first byte handed to the socket.
    pub ttfb: Latency,
    /// Per connection: from the acceptor taking it (the start of the
    /// acceptor's poll that saw it) to its first poll on its own loop, where
    /// its first read is armed.
    pub accept_latency: Latency,
    /// Times a connection gave its loop to the others with requests still
    /// to serve, its batch's budget spent (memcached's `conn_yields`).
    pub yields: u64,
}

impl RequestMetrics {
    /// Adds `other`'s samples.
    pub fn add(&mut self, other: &RequestMetrics) {
        self.loop_hold.add(&other.loop_hold);
        self.ttfb.add(&other.ttfb);
        self.accept_latency.add(&other.accept_latency);
        self.yields += other.yields;
    }

    /// Forgets every sample.
    pub fn reset(&mut self) {
        self.loop_hold.reset();
        self.ttfb.reset();
        self.accept_latency.reset();
        self.yields = 0;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.loop_hold.is_empty()
            && self.ttfb.is_empty()
            && self.accept_latency.is_empty()
            && self.yields == 0
    }
}

/// A point in time on the loops' clock: the TSC where the processor has a
/// reliable one (half the cost of `clock_gettime`, read once per poll),
/// comparable across threads.
pub type Stamp = quanta::Instant;

/// When the poll running now on this thread's loop started (`None` off a
/// loop). The loop reads the clock once per poll anyway (for the poll-time
/// histogram); this hands that reading out, so a server can time a request
/// without a clock read of its own.
pub fn poll_started() -> Option<Stamp> {
    with_current(|cur| cur.map(|l| l.poll_start.get()))
}

/// A response's first byte is being written: records, for `requests`
/// requests answered by this write, their time to first byte (from
/// `ready_at`, the [`poll_started`] of the poll that read them) and how long
/// this poll has held the loop (from [`poll_started`]). One clock read.
/// Does nothing off a loop.
pub fn record_first_byte(ready_at: Stamp, requests: u64) {
    if requests == 0 {
        return;
    }
    with_current(|cur| {
        if let Some(l) = cur {
            let now = Stamp::now();
            let mut m = l.requests.borrow_mut();
            let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
            m.ttfb
                .record_n(ns(now.saturating_duration_since(ready_at)), requests);
            m.loop_hold.record_n(
                ns(now.saturating_duration_since(l.poll_start.get())),
                requests,
            );
        }
    })
}

/// A connection taken by the acceptor at `accepted_at` (its
/// [`poll_started`]) is polled for the first time on its own loop: records
/// the accept latency, up to the start of this poll. No clock read. Does
/// nothing off a loop.
pub fn record_accept(accepted_at: Stamp) {
    with_current(|cur| {
        if let Some(l) = cur {
            let d = l.poll_start.get().saturating_duration_since(accepted_at);
            l.requests
                .borrow_mut()
                .accept_latency
                .record_n(d.as_nanos().min(u64::MAX as u128) as u64, 1);
        }
    })
}

/// A connection yields its loop with requests still to serve (see
/// [`RequestMetrics::yields`]). Does nothing off a loop.
pub fn record_yield() {
    with_current(|cur| {
        if let Some(l) = cur {
            l.requests.borrow_mut().yields += 1;
        }
    })
}

/// Voluntary and involuntary context switches of one thread of this process,
/// from `/proc/self/task/<tid>/status`.
pub fn thread_context_switches(tid: i64) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    parse_ctxt_switches(&text)
}

/// Parses `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` from a
/// `/proc/.../status` text.
pub fn parse_ctxt_switches(status: &str) -> Option<(u64, u64)> {
    let mut vol = None;
    let mut invol = None;
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("voluntary_ctxt_switches:") {
            vol = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
            invol = v.trim().parse().ok();
        }
    }
    Some((vol?, invol?))
}

/// The calling thread's OS thread id.
pub fn current_tid() -> i64 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() as i64 }
}

/// User and system CPU time of this process so far.
pub fn process_cpu_time() -> (std::time::Duration, std::time::Duration) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the live, zeroed buffer.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0;
    if !ok {
        return Default::default();
    }
    // SAFETY: initialised by the successful call (and zeroed before).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| {
        std::time::Duration::from_secs(t.tv_sec as u64)
            + std::time::Duration::from_micros(t.tv_usec as u64)
    };
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_keeps_counts_sums_and_cumulative_buckets() {
        let mut l = Latency::new();
        assert_eq!(
            (l.count(), l.quantile_ns(0.5), l.count_at_most(10)),
            (0, 0, 0)
        );
        l.record_n(1_000, 3);
        l.record_n(2_000_000, 1);
        l.record_n(5, 0);
        assert_eq!(l.count(), 4);
        assert_eq!(l.sum_ns(), 2_003_000);
        assert_eq!(l.count_at_most(10_000), 3);
        assert_eq!(l.count_at_most(10_000_000), 4);
        assert!(l.max_ns() >= 2_000_000);
        let mut m = Latency::new();
        m.add(&l);
        m.add(&l);
        assert_eq!((m.count(), m.sum_ns()), (8, 4_006_000));
        m.reset();
        assert!(m.is_empty() && m.sum_ns() == 0);
    }

    // Real loops: not under loom, whose models run without them.
    #[cfg(not(loom))]
    #[test]
    fn recording_off_a_loop_does_nothing_and_on_a_loop_is_published() {
        assert!(poll_started().is_none());
        record_first_byte(Stamp::now(), 1);
        let (h, ttfb, hold) = crate::block_on(async {
            let h = crate::event_loop::current().unwrap();
            let j = crate::spawn(async {
                let at = poll_started().expect("on a loop");
                record_first_byte(at, 3);
                record_accept(at);
            });
            j.await.unwrap();
            // Published before the loop sleeps, or within 10 ms.
            let m = loop {
                let m = h.request_metrics();
                if m.ttfb.count() == 3 {
                    break m;
                }
                crate::time::sleep(Duration::from_millis(2)).await;
            };
            (h, m.ttfb, m.loop_hold)
        });
        assert_eq!((ttfb.count(), hold.count()), (3, 3));
        let _ = h;
    }

    // Real loops: not under loom, whose models run without them.
    #[cfg(not(loom))]
    #[test]
    fn reset_forgets_published_and_pending_samples() {
        crate::block_on(async {
            let h = crate::event_loop::current().unwrap();
            crate::spawn(async { record_first_byte(poll_started().unwrap(), 2) })
                .await
                .unwrap();
            // Pending on the loop, not yet merged: the reset must win.
            h.reset_request_metrics();
            crate::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(h.request_metrics().ttfb.count(), 0);
            crate::spawn(async { record_first_byte(poll_started().unwrap(), 1) })
                .await
                .unwrap();
            crate::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(h.request_metrics().ttfb.count(), 1);
        });
    }

    // Real loops: not under loom, whose models run without them.
    #[cfg(not(loom))]
    #[test]
    fn samples_after_a_reset_of_merged_ones_count() {
        // The reset finds nothing pending (everything merged): the samples
        // that come after it must count, not be taken for older ones.
        let lt = crate::event_loop::LoopThread::spawn(Default::default()).unwrap();
        let handle = lt.handle();
        let record = |n| {
            handle.spawn(async move { record_first_byte(poll_started().unwrap(), n) });
        };
        let wait_for = |n| {
            let t0 = std::time::Instant::now();
            while handle.request_metrics().ttfb.count() != n {
                assert!(t0.elapsed() < Duration::from_secs(5), "never {n}");
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        record(2);
        wait_for(2);
        handle.reset_request_metrics();
        record(5);
        wait_for(5);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(handle.request_metrics().ttfb.count(), 5);
    }

    #[test]
    fn parses_proc_status() {
        let text = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_ctxt_switches(text), Some((12, 3)));
        assert_eq!(parse_ctxt_switches("Name: x"), None);
    }
}
