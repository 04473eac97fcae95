//! Per-server statistics: one row per thread, by role.

use duality_rt::stats::LoopSnapshot;

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
    /// Per-thread rows (thread-per-conn connection threads are not listed).
    pub threads: Vec<ThreadStats>,
}

impl ServerStats {
    /// Renders `STAT` lines in memcached's style, prefixed per thread.
    pub fn stat_lines(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("model".to_string(), self.model.clone()),
            ("accept_balance".to_string(), self.balance.clone()),
            ("threads".to_string(), self.threads.len().to_string()),
        ];
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
