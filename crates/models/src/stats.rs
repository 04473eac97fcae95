//! Per-server statistics: one row per thread, by role.

use crate::payload::Handoff;
use duality_rt::stats::LoopSnapshot;
use std::time::Duration;

/// What a thread does in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadRole {
    /// Accepts connections and hands them to network loops.
    Acceptor,
    /// Runs an event loop doing network I/O (and inline payload work).
    Network,
    /// Runs payload jobs handed off by network loops.
    Payload,
}

impl std::fmt::Display for ThreadRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ThreadRole::Acceptor => "acceptor",
            ThreadRole::Network => "network",
            ThreadRole::Payload => "payload",
        })
    }
}

/// One thread's numbers.
#[derive(Clone, Debug)]
pub struct ThreadStats {
    /// Its role.
    pub role: ThreadRole,
    /// Its name.
    pub name: String,
    /// OS thread id.
    pub tid: i64,
    /// The loop's snapshot, for threads running a loop.
    pub loop_snapshot: Option<LoopSnapshot>,
    /// Payload jobs run (payload threads).
    pub jobs: u64,
    /// Batches those jobs were taken in.
    pub batches: u64,
    /// Times the thread had to be woken from sleep.
    pub wakeups: u64,
    /// Jobs waiting in its queue.
    pub queue_depth: usize,
    /// Connections open on it (network loops; how even the accept balance
    /// keeps them).
    pub connections: usize,
    /// Voluntary context switches (`/proc/self/task/<tid>/status`).
    pub voluntary_ctxt_switches: u64,
    /// Involuntary context switches.
    pub involuntary_ctxt_switches: u64,
}

/// A server's numbers.
#[derive(Clone, Debug)]
pub struct ServerStats {
    /// The model, as `--model` takes it.
    pub model: String,
    /// How connections are spread over the network loops.
    pub balance: String,
    /// Connections open now.
    pub curr_connections: usize,
    /// Connections accepted since start.
    pub total_connections: u64,
    /// Connections refused by the connection limit.
    pub rejected_connections: u64,
    /// Idle connections closed to make room at the limit
    /// ([`ServerBuilder::reclaim_idle`](crate::ServerBuilder::reclaim_idle)).
    pub reclaimed_connections: u64,
    /// Per-thread rows (thread-per-conn connection threads are not listed).
    pub threads: Vec<ThreadStats>,
    /// How a hand-off model places its batches (`None` in the inline models).
    pub handoff: Option<HandoffStats>,
    /// Times a color lock was taken: once per run of one color in a batch,
    /// not once per request (lock coalescing); none where the model keeps
    /// colors apart without locks or the protocol locks itself.
    pub color_locks: u64,
}

/// Where a hand-off model's batches run (`--handoff`), with what the
/// adaptive policy has learned: an operator can see why batches stay on the
/// network loop or go to the payload threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandoffStats {
    /// The policy.
    pub policy: Handoff,
    /// Adaptive: the learned cost of one batch (`None` before a sample).
    pub batch_cost: Option<Duration>,
    /// Adaptive: what a trip to a payload thread was learned to add to a
    /// batch's wait (`None` before the first hand-off). The rule values a
    /// trip at 20 µs at least.
    pub trip: Option<Duration>,
    /// Where the rule sends the next batch: `true` the network loop. Always
    /// `false` under [`Handoff::Always`].
    pub next_inline: bool,
}

impl ServerStats {
    /// Renders `STAT` lines in memcached's style, prefixed per thread.
    pub fn stat_lines(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("model".to_string(), self.model.clone()),
            ("accept_balance".to_string(), self.balance.clone()),
            ("threads".to_string(), self.threads.len().to_string()),
            ("color_locks".to_string(), self.color_locks.to_string()),
        ];
        if let Some(h) = &self.handoff {
            v.push(("handoff".to_string(), h.policy.to_string()));
            if h.policy == Handoff::Adaptive {
                let ns = |d: Option<Duration>| d.map(|d| d.as_nanos().to_string());
                // Unknown until learned: left out, as memcached leaves out
                // what it has no value for.
                v.extend(ns(h.batch_cost).map(|c| ("handoff_batch_cost_ns".to_string(), c)));
                v.extend(ns(h.trip).map(|t| ("handoff_trip_ns".to_string(), t)));
                let next = if h.next_inline { "loop" } else { "payload" };
                v.push(("handoff_next_batch".to_string(), next.to_string()));
            }
        }
        for (i, t) in self.threads.iter().enumerate() {
            let p = format!("thread:{i}:");
            v.push((format!("{p}role"), t.role.to_string()));
            v.push((format!("{p}name"), t.name.clone()));
            v.push((format!("{p}tid"), t.tid.to_string()));
            v.push((
                format!("{p}voluntary_ctxt_switches"),
                t.voluntary_ctxt_switches.to_string(),
            ));
            v.push((
                format!("{p}involuntary_ctxt_switches"),
                t.involuntary_ctxt_switches.to_string(),
            ));
            if t.role == ThreadRole::Network {
                v.push((format!("{p}curr_connections"), t.connections.to_string()));
            }
            if t.role == ThreadRole::Payload {
                v.push((format!("{p}jobs"), t.jobs.to_string()));
                v.push((format!("{p}batches"), t.batches.to_string()));
                v.push((format!("{p}wakeups"), t.wakeups.to_string()));
                v.push((format!("{p}queue_depth"), t.queue_depth.to_string()));
            }
            if let Some(s) = &t.loop_snapshot {
                for (k, val) in [
                    ("tasks_alive", s.tasks_alive.to_string()),
                    ("run_queue_depth", s.run_queue_depth.to_string()),
                    ("handoff_depth", s.handoff_depth.to_string()),
                    ("polls", s.polls.to_string()),
                    ("wakeups", s.wakeups.to_string()),
                    ("handoffs", s.handoffs.to_string()),
                    ("handoff_batches", s.handoff_batches.to_string()),
                    ("io_events", s.io_events.to_string()),
                    ("long_polls", s.long_polls.to_string()),
                    ("poll_p50_ns", s.poll_times.p50_ns.to_string()),
                    ("poll_p99_ns", s.poll_times.p99_ns.to_string()),
                    ("poll_max_ns", s.poll_times.max_ns.to_string()),
                ] {
                    v.push((format!("{p}{k}"), val));
                }
            }
        }
        v
    }
}

pub(crate) fn loop_thread_stats(role: ThreadRole, h: &duality_rt::LoopHandle) -> ThreadStats {
    let snap = h.snapshot();
    let (vol, invol) = duality_rt::stats::thread_context_switches(snap.tid).unwrap_or((0, 0));
    ThreadStats {
        role,
        name: snap.name.clone(),
        tid: snap.tid,
        jobs: 0,
        batches: 0,
        wakeups: snap.wakeups,
        queue_depth: snap.handoff_depth,
        connections: 0,
        loop_snapshot: Some(snap),
        voluntary_ctxt_switches: vol,
        involuntary_ctxt_switches: invol,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(handoff: Option<HandoffStats>) -> Vec<(String, String)> {
        let s = ServerStats {
            model: "amped:1".into(),
            balance: "round-robin".into(),
            curr_connections: 0,
            total_connections: 0,
            rejected_connections: 0,
            reclaimed_connections: 0,
            threads: Vec::new(),
            handoff,
            color_locks: 0,
        };
        s.stat_lines()
            .into_iter()
            .filter(|(k, _)| k.starts_with("handoff"))
            .collect()
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn handoff_lines_say_the_policy_and_only_what_was_learned() {
        assert!(lines(None).is_empty(), "inline models have no hand-off");
        let always = HandoffStats {
            policy: Handoff::Always,
            batch_cost: None,
            trip: None,
            next_inline: false,
        };
        assert_eq!(lines(Some(always.clone())), [pair("handoff", "always")]);
        let fresh = HandoffStats {
            policy: Handoff::Adaptive,
            ..always
        };
        assert_eq!(
            lines(Some(fresh.clone())),
            [
                pair("handoff", "adaptive"),
                pair("handoff_next_batch", "payload")
            ]
        );
        let learned = HandoffStats {
            batch_cost: Some(Duration::from_nanos(1_500)),
            trip: Some(Duration::from_micros(7)),
            next_inline: true,
            ..fresh
        };
        assert_eq!(
            lines(Some(learned)),
            [
                pair("handoff", "adaptive"),
                pair("handoff_batch_cost_ns", "1500"),
                pair("handoff_trip_ns", "7000"),
                pair("handoff_next_batch", "loop"),
            ]
        );
    }
}
