//! Introspection: what each loop is doing, readable from any thread.

use crate::event_loop::registry::Shared;
use crate::loom::lock_std;
use std::sync::atomic::Ordering::Relaxed;

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
    #[test]
    fn parses_proc_status() {
        let text = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(super::parse_ctxt_switches(text), Some((12, 3)));
        assert_eq!(super::parse_ctxt_switches("Name: x"), None);
    }
}
