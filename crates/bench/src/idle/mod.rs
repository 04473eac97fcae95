//! `duality bench idle`: seed 004's FIFO-pipe test (Fig. 18) — does a fixed
//! set of busy connections slow down as idle ones pile up beside them, and
//! what does each idle connection cost in memory?
//!
//! Two halves, each with its peers in the same run:
//!
//! **pipes** — the seed's program. [`PAIRS`] pairs of tasks; in each pair one
//! side sends a [`MESSAGE`] (32 KiB) in [`CHUNK`] (4 KiB) writes, the other
//! reads it whole and sends one back, forever. Beside them K idle tasks each
//! wait to read a connection on which nothing ever arrives. Each runtime runs
//! in a fresh child process (`bench idle --child RUNTIME`):
//!
//! ```text
//!   measuring process                              holder process(es)
//!   ping ⇄ pong   ×128 (socket pairs, 4 KiB)
//!   idle task/thread ×K  ── one socket each ──────  the other end, silent
//! ```
//!
//! - `duality-epoll`, `duality-uring`: every task on one duality loop (the
//!   seed's one scheduler over epoll; the same on io_uring);
//! - `duality-loops:N`: N loops on N threads, connections dealt round-robin
//!   (symped's placement: a pair's two ends usually on different loops);
//! - `tokio`: a `current_thread` runtime;
//! - `os-threads`: one OS thread per task with a 32 KiB stack and blocking
//!   I/O (the seed's NPTL, configured the same way), at most
//!   [`os_thread_cap`] threads.
//!
//! *Pipes are Unix socket pairs here*: duality's io_uring backend receives
//! with socket operations (multishot `recv` into provided buffers), so a
//! FIFO would need a second receive path in that backend; every runtime
//! uses the same `AF_UNIX` stream sockets instead, with the send buffer set
//! to 4 KiB (the kernel doubles it) so that, as through the seed's 4 KiB
//! FIFOs, a writer waits for its reader within each message.
//!
//! The idle connections come from holder processes (`bench idle --hold`),
//! so the measuring process spends exactly one descriptor per idle
//! connection: under the 20,000-descriptor limit (`ulimit -n`) that leaves
//! room for `limit − 2 × 128 − 64` idle connections ([`max_idle_pipes`]).
//! Each holder keeps at most [`HOLD_PER_HELPER`] connections.
//!
//! **cache** — the same question for real servers on loopback TCP: `duality
//! kv` (its default model, and `thread-per-conn`), the same cache on tokio
//! (`duality internal kv-tokio`) and memcached, one fresh server process per
//! point. Holder processes open K connections, each served once (`version`)
//! and then silent; then the load generator drives the paper's workload
//! (seed 001: 9 gets to 1 set over 30,000 records) on a fixed set of active
//! connections (closed loop) and counts transactions/s and the server's CPU
//! time per transaction. The server's limits follow K: `-c` is K + active +
//! 64, never above the descriptor limit, which binds at
//! [`max_idle_cache`]; `thread-per-conn` needs a thread per connection and
//! stops at [`os_thread_cap`] less the active ones.
//!
//! Memory per idle connection = (RSS with K idle − RSS of the same process
//! just before they came) / K ([`bytes_per_conn`]). In the pipes half the
//! idle tasks start before the pairs, so nothing else moves the process's
//! memory between the two readings. For the cache the start
//! is read after the preload and a first short load (its connections
//! closed), and the server's RSS is read once more after every idle client
//! has closed (its descriptors and connection threads gone, then `settle`,
//! then until it stops falling, at most four times `settle` more): "after close / start"
//! should be near 1. The load that ran meanwhile may have grown the server
//! (the store keeps what it wrote), so RSS is also read right after the
//! load, the idle clients still connected, and "idle conns' share kept /
//! start" counts only what the idle connections took and did not give back.

mod cache;
mod holders;
mod pipes;

pub use cache::{measure_cache, parse_server};
pub use holders::{hold, HoldTarget, Holders};
use pipes::pipe_child;
pub use pipes::{measure_pipes, PipeRuntime, RUNTIMES};

use crate::servers::ServerKind;
use crate::workload::Workload;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Active pairs (the seed's 128).
pub const PAIRS: usize = 128;
/// Bytes each side sends before it waits for the answer (the seed's 32 KB).
pub const MESSAGE: usize = 32 * 1024;
/// Bytes per write and per read (the seed's 4 KB buffers).
pub const CHUNK: usize = 4 * 1024;
/// Connections one holder process keeps open.
pub const HOLD_PER_HELPER: u64 = 10_000;
/// Descriptors a measuring process or server keeps for itself beyond its
/// connections: standard streams, listener, epoll, eventfd, ring, pipes to
/// its helpers.
pub const RESERVED_FDS: u64 = 64;
/// Stack of each OS thread of the `os-threads` runtime (the seed's NPTL).
pub const THREAD_STACK: usize = 32 * 1024;
/// The throughput goal: at the largest idle count, at least this share of
/// the idle-free run's.
pub const THROUGHPUT_GOAL: f64 = 0.95;

const MIB: f64 = (1u64 << 20) as f64;

/// One pipe runtime at one idle count.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PipeRow {
    /// The runtime (see [`RUNTIMES`]).
    pub runtime: String,
    /// Idle connections asked for.
    pub idle: u64,
    /// Idle connections open, each with its task or thread waiting, while
    /// the pairs were counted (fewer than asked where a limit bound).
    pub held: u64,
    /// Bytes received by the active pairs per second, in MB (10^6).
    pub mb_per_sec: f64,
    /// `mb_per_sec` over the same runtime's idle-free run measured just
    /// before it, the median over the rounds ([`run`]); 1.0 for that run.
    pub vs_idle_free: Option<f64>,
    /// Resident memory of the runtime before any task, MiB.
    pub rss_base_mib: f64,
    /// Resident memory with the idle tasks waiting, before the pairs
    /// start, MiB.
    pub rss_idle_mib: f64,
    /// Resident bytes per idle connection ([`bytes_per_conn`]).
    pub bytes_per_idle: Option<f64>,
}

/// One cache server at one idle count.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CacheRow {
    /// `duality symped:2`, `duality thread-per-conn`, `tokio -t 2`, `memcached -t 2`.
    pub server: String,
    /// Idle connections asked for.
    pub idle: u64,
    /// Idle connections the server served and kept while the load ran.
    pub held: u64,
    /// Active (load) connections.
    pub active: usize,
    /// Transactions per second of the active connections.
    pub tps: f64,
    /// `tps` over [`tps_before_idle`](Self::tps_before_idle), the median
    /// over the rounds ([`run`]); 1.0 for the idle-free rows.
    pub vs_idle_free: Option<f64>,
    /// Transactions per second of the same server process under the same
    /// load in a window right before its idle clients connected (`None`
    /// where none connected).
    #[serde(default)]
    pub tps_before_idle: Option<f64>,
    /// 99th percentile latency of the active connections, µs.
    pub p99_us: u64,
    /// Server CPU time per transaction, µs.
    pub cpu_us_per_txn: f64,
    /// Server RSS after the preload, before any idle connection, MiB.
    pub rss_start_mib: f64,
    /// Server RSS with the idle connections open, MiB.
    pub rss_idle_mib: f64,
    /// Resident bytes per idle connection ([`bytes_per_conn`]).
    pub bytes_per_idle: Option<f64>,
    /// Server RSS once every idle client had closed, `settle` passed and the
    /// reading stopped falling, MiB.
    pub rss_closed_mib: f64,
    /// `rss_closed_mib / rss_start_mib`.
    pub closed_vs_start: f64,
    /// Server RSS right after the load, the idle clients still connected, MiB.
    #[serde(default)]
    pub rss_loaded_mib: f64,
    /// What the idle connections left behind once closed, net of what the
    /// load itself added (the store keeps its writes): `(RSS start + (RSS
    /// idle − RSS start) − (RSS loaded − RSS after close)) / RSS start`, i.e.
    /// the start plus what they took less what came back when they closed.
    /// 1.0: everything came back.
    #[serde(default)]
    pub closed_net_vs_start: Option<f64>,
    /// Cores the load generator used.
    pub client_cores: f64,
}

/// Where the limits bind on this machine.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    /// Descriptors per process (the soft limit, raised to the hard one).
    pub fd_limit: u64,
    /// The most idle connections of the pipes half ([`max_idle_pipes`]).
    pub max_idle_pipes: u64,
    /// The most idle connections of the cache half ([`max_idle_cache`]).
    pub max_idle_cache: u64,
    /// The most OS threads a process may start here ([`os_thread_cap`]).
    pub os_threads: u64,
    /// Connections per holder process.
    pub per_holder: u64,
}

/// A goal of the issue, checked against the rows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Goal {
    /// What is checked.
    pub goal: String,
    /// Whether it holds.
    pub met: bool,
    /// The numbers behind it.
    pub detail: String,
}

/// Everything one run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Results {
    /// The limits in force.
    pub limits: Limits,
    /// The pipes half (medians over rounds).
    pub pipes: Vec<PipeRow>,
    /// The cache half (medians over rounds).
    pub cache: Vec<CacheRow>,
    /// The goals, checked.
    pub goals: Vec<Goal>,
    /// Points that could not be measured, and why.
    pub notes: Vec<String>,
}

/// Resident bytes per connection: `(rss_with − rss_without) / conns`, from
/// two readings of the same process; `None` without connections.
pub fn bytes_per_conn(rss_with: u64, rss_without: u64, conns: u64) -> Option<f64> {
    (conns > 0).then(|| (rss_with as f64 - rss_without as f64) / conns as f64)
}

/// `v / base`; `None` where the base is not positive.
pub fn ratio(v: f64, base: f64) -> Option<f64> {
    (base > 0.0 && v.is_finite()).then(|| v / base)
}

/// A measured point, for medians and ratios shared by both halves.
pub trait Point {
    /// The runtime or server.
    fn who(&self) -> &str;
    /// Idle connections asked for.
    fn idle(&self) -> u64;
    /// What the active connections achieved.
    fn throughput(&self) -> f64;
    /// Sets the ratio to the idle-free run.
    fn set_vs_idle_free(&mut self, r: Option<f64>);
}

impl Point for PipeRow {
    fn who(&self) -> &str {
        &self.runtime
    }
    fn idle(&self) -> u64 {
        self.idle
    }
    fn throughput(&self) -> f64 {
        self.mb_per_sec
    }
    fn set_vs_idle_free(&mut self, r: Option<f64>) {
        self.vs_idle_free = r;
    }
}

impl Point for CacheRow {
    fn who(&self) -> &str {
        &self.server
    }
    fn idle(&self) -> u64 {
        self.idle
    }
    fn throughput(&self) -> f64 {
        self.tps
    }
    fn set_vs_idle_free(&mut self, r: Option<f64>) {
        self.vs_idle_free = r;
    }
}

/// Per (who, idle), the row of median throughput over the rounds, in the
/// order the points first appear.
pub fn medians<T: Point + Clone>(rows: &[T]) -> Vec<T> {
    let mut keys: Vec<(&str, u64)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.who(), r.idle())) {
            keys.push((r.who(), r.idle()));
        }
    }
    keys.iter()
        .map(|&(who, idle)| {
            let mut v: Vec<&T> = rows
                .iter()
                .filter(|r| r.who() == who && r.idle() == idle)
                .collect();
            v.sort_by(|a, b| a.throughput().total_cmp(&b.throughput()));
            v[(v.len() - 1) / 2].clone()
        })
        .collect()
}

/// Sets every row's ratio to the idle-free row (idle 0) of the same
/// runtime or server; `None` where that row is missing.
pub fn fill_ratios<T: Point>(rows: &mut [T]) {
    let base: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.idle() == 0)
        .map(|r| (r.who().to_string(), r.throughput()))
        .collect();
    for r in rows.iter_mut() {
        let b = base.iter().find(|(w, _)| w == r.who()).map(|(_, b)| *b);
        let v = b.and_then(|b| ratio(r.throughput(), b));
        r.set_vs_idle_free(v);
    }
}

/// `(who, idle, throughput over the idle-free run measured just before)`.
pub type Paired = (String, u64, f64);

/// Books `row` in a pair: an idle-free row becomes the pending base, a
/// row with idle connections is paired with the base measured just
/// before it (none if that one failed).
fn pair_up<T: Point>(base: &mut Option<f64>, row: &T, pairs: &mut Vec<Paired>) {
    if row.idle() == 0 {
        *base = Some(row.throughput());
    } else if let Some(r) = base.take().and_then(|b| ratio(row.throughput(), b)) {
        pairs.push((row.who().to_string(), row.idle(), r));
    }
}

/// A cache row's pair: its throughput over the same process's before its
/// idle clients connected.
fn cache_pair(row: &CacheRow) -> Option<Paired> {
    let r = ratio(row.tps, row.tps_before_idle?)?;
    (row.idle > 0).then(|| (row.server.clone(), row.idle, r))
}

/// Sets each row with idle connections to the median of its paired ratios
/// over the rounds ([`run`]), where it has any; rows without keep what
/// [`fill_ratios`] gave them.
pub fn fill_paired_ratios<T: Point>(rows: &mut [T], pairs: &[Paired]) {
    for r in rows.iter_mut().filter(|r| r.idle() > 0) {
        let v: Vec<f64> = pairs
            .iter()
            .filter(|(who, idle, _)| who == r.who() && *idle == r.idle())
            .map(|p| p.2)
            .collect();
        if !v.is_empty() {
            r.set_vs_idle_free(Some(crate::summary::median(&v)));
        }
    }
}

/// The most idle connections the pipes half can give one process:
/// two descriptors per pair and [`RESERVED_FDS`] stay with it.
pub fn max_idle_pipes(fd_limit: u64, pairs: usize) -> u64 {
    fd_limit.saturating_sub(2 * pairs as u64 + RESERVED_FDS)
}

/// The most idle connections a server can hold beside `active` ones under
/// `fd_limit` descriptors.
pub fn max_idle_cache(fd_limit: u64, active: usize) -> u64 {
    fd_limit.saturating_sub(active as u64 + RESERVED_FDS)
}

/// Refuses active pairs (`pipes`: the pipes half runs) or connections
/// (`cache`: the cache half runs) that do not fit one process's `fd_limit`
/// beside [`RESERVED_FDS`] even with no idle connection: two descriptors a
/// pair in the measuring process, one per active connection in the load
/// generator and in the server. (`--pairs 1000000` ran, every row "not
/// measured", and exited 0.)
pub fn check_active(
    fd_limit: u64,
    pairs: usize,
    active: usize,
    pipes: bool,
    cache: bool,
) -> anyhow::Result<()> {
    let room = fd_limit.saturating_sub(RESERVED_FDS);
    anyhow::ensure!(
        !pipes || (pairs as u64).saturating_mul(2) <= room,
        "--pairs {pairs}: two descriptors a pair, and a process may open {fd_limit} files here \
         (ulimit -n), {RESERVED_FDS} kept for itself; at most {} pairs",
        room / 2
    );
    anyhow::ensure!(
        !cache || active as u64 <= room,
        "--active {active}: a descriptor each in the load generator and the server, and a \
         process may open {fd_limit} files here (ulimit -n), {RESERVED_FDS} kept for itself; \
         at most {room}"
    );
    Ok(())
}

/// Cuts idle counts to `max`, keeping order and dropping repeats; says
/// which were cut.
pub fn clamp_idle(counts: &[u64], max: u64) -> (Vec<u64>, Vec<u64>) {
    let mut kept = Vec::new();
    let mut cut = Vec::new();
    for &c in counts {
        if c > max {
            cut.push(c);
        }
        let c = c.min(max);
        if !kept.contains(&c) {
            kept.push(c);
        }
    }
    (kept, cut)
}

/// How many OS threads one process may start here: the kernel's map limit
/// (see [`crate::disk::os_thread_cap`]) or the process ids left on the
/// machine (`kernel.pid_max` and `threads-max` are machine-wide; other
/// processes' threads count), whichever binds first.
pub fn os_thread_cap() -> u64 {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let ids = read("/proc/sys/kernel/pid_max")
        .unwrap_or(32_768)
        .min(read("/proc/sys/kernel/threads-max").unwrap_or(u64::MAX));
    // The fourth field of loadavg: running/total threads on the machine.
    let in_use = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(3)?
                .split('/')
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    crate::disk::os_thread_cap().min(ids.saturating_sub(in_use + 2048))
}

/// Open descriptors of process `pid`.
pub fn fd_count(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// Threads of process `pid` (0 if it cannot be read).
pub fn thread_count(pid: u32) -> u64 {
    crate::proc::field(pid, "status", "Threads:").unwrap_or(0)
}

/// One run's settings.
pub struct Plan<'a> {
    /// The `duality` executable.
    pub exe: &'a Path,
    /// Idle counts, already clamped to the limits.
    pub idle: Vec<u64>,
    /// Pipe runtimes (empty: no pipes half).
    pub runtimes: Vec<String>,
    /// Active pairs.
    pub pairs: usize,
    /// Cache servers (empty: no cache half).
    pub servers: Vec<ServerKind>,
    /// Active connections of the cache half.
    pub active: usize,
    /// The cache half's data set and mix.
    pub workload: Arc<Workload>,
    /// Before counting (each point).
    pub warmup: Duration,
    /// Counted (each point).
    pub window: Duration,
    /// After the idle clients of a server closed, before its RSS is read.
    pub settle: Duration,
    /// Rounds (points take turns; medians are reported).
    pub rounds: usize,
    /// The limits in force.
    pub limits: Limits,
}

impl Plan<'_> {
    /// Points measured in all (for a progress bar).
    pub fn points(&self) -> usize {
        let pipes: usize = sequence(&self.idle)
            .iter()
            .map(|(base, _)| 1 + usize::from(base.is_some()))
            .sum();
        self.rounds * (pipes * self.runtimes.len() + self.idle.len() * self.servers.len())
    }
}

/// What one round measures of each pipe runtime, in order: for each
/// idle count K > 0, an idle-free run and then K (`(Some(0), K)`); a lone
/// `(None, 0)` only where no K > 0 is asked.
pub fn sequence(idle: &[u64]) -> Vec<(Option<u64>, u64)> {
    let v: Vec<(Option<u64>, u64)> = idle
        .iter()
        .filter(|&&k| k > 0)
        .map(|&k| (Some(0), k))
        .collect();
    if v.is_empty() && idle.contains(&0) {
        return vec![(None, 0)];
    }
    v
}

/// Runs every point, `rounds` times, runtimes and servers taking turns;
/// `tick` hears of each point as it is done (`Err`: it failed, and the
/// message goes to the notes too).
///
/// Each ratio to the idle-free throughput is taken to a run seconds before
/// (this host's speed drifts by up to a quarter over tens of seconds,
/// `docs/results/models/two-speeds-b3f18e8/`, more than idle connections
/// cost, and a round visits K = 0 and the largest K minutes apart): a pipe
/// runtime's K > 0 right after an idle-free child of the same runtime
/// ([`sequence`]; an idle count of 0 alone only where no K > 0 is asked),
/// a cache server's K to the same server process's window right before
/// its idle clients connected ([`CacheRow::tps_before_idle`]).
pub fn run(plan: &Plan, tick: &mut dyn FnMut(Result<&str, &str>)) -> Results {
    let mut pipes = Vec::new();
    let mut cache = Vec::new();
    let (mut pipe_pairs, mut cache_pairs) = (Vec::new(), Vec::new());
    let mut notes = Vec::new();
    let mut failed = |what: String, e: anyhow::Error, tick: &mut dyn FnMut(Result<&str, &str>)| {
        let msg = format!("{what}: {e:#}");
        tick(Err(&msg));
        if !notes.contains(&msg) {
            notes.push(msg);
        }
    };
    let sequence = sequence(&plan.idle);
    for _ in 0..plan.rounds.max(1) {
        for &(base, k) in &sequence {
            for rt in &plan.runtimes {
                let mut base_row = None;
                for k in base.into_iter().chain([k]) {
                    match pipe_child(plan, rt, k) {
                        Ok(row) => {
                            tick(Ok(&format!(
                                "pipes {rt}, {k} idle: {:.0} MB/s",
                                row.mb_per_sec
                            )));
                            pair_up(&mut base_row, &row, &mut pipe_pairs);
                            pipes.push(row);
                        }
                        Err(e) => failed(format!("pipes {rt} with {k} idle"), e, tick),
                    }
                }
            }
        }
        for &k in &plan.idle {
            for kind in &plan.servers {
                match measure_cache(plan, kind, k) {
                    Ok(row) => {
                        tick(Ok(&format!(
                            "cache {}, {k} idle: {:.0} txn/s",
                            row.server, row.tps
                        )));
                        cache_pairs.extend(cache_pair(&row));
                        cache.push(row);
                    }
                    Err(e) => failed(format!("cache {} with {k} idle", kind.label()), e, tick),
                }
            }
        }
    }
    let mut pipes = medians(&pipes);
    let mut cache = medians(&cache);
    fill_ratios(&mut pipes);
    fill_ratios(&mut cache);
    fill_paired_ratios(&mut pipes, &pipe_pairs);
    fill_paired_ratios(&mut cache, &cache_pairs);
    let mut r = Results {
        limits: plan.limits.clone(),
        pipes,
        cache,
        goals: Vec::new(),
        notes,
    };
    r.goals = goals(&r);
    r
}

/// The issue's goals: for every duality runtime and server, throughput at
/// its largest idle count at least [`THROUGHPUT_GOAL`] of its idle-free
/// run; for every duality server, memory per idle connection at or below
/// memcached's at the largest idle count both held.
pub fn goals(r: &Results) -> Vec<Goal> {
    let mut out = Vec::new();
    let mut throughput = |who: &str, largest: Option<(u64, u64, Option<f64>)>| {
        if let Some((idle, held, Some(v))) = largest.filter(|l| l.0 > 0) {
            out.push(Goal {
                goal: format!("{who}: throughput with {held} idle ≥ {THROUGHPUT_GOAL} × idle-free"),
                met: v >= THROUGHPUT_GOAL,
                detail: format!("{v:.3} at {idle} idle asked, {held} held"),
            });
        }
    };
    let mut whos: Vec<&str> = Vec::new();
    for p in r.pipes.iter().map(|p| p.runtime.as_str()) {
        if p.starts_with("duality") && !whos.contains(&p) {
            whos.push(p);
        }
    }
    for who in &whos {
        let largest = r
            .pipes
            .iter()
            .filter(|p| p.runtime == *who)
            .max_by_key(|p| p.idle)
            .map(|p| (p.idle, p.held, p.vs_idle_free));
        throughput(&format!("pipes {who}"), largest);
    }
    let servers: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for s in r.cache.iter().map(|c| c.server.as_str()) {
            if s.starts_with("duality") && !v.contains(&s) {
                v.push(s);
            }
        }
        v
    };
    for who in &servers {
        let largest = r
            .cache
            .iter()
            .filter(|c| c.server == *who)
            .max_by_key(|c| c.idle)
            .map(|c| (c.idle, c.held, c.vs_idle_free));
        throughput(&format!("cache {who}"), largest);
    }
    for who in &servers {
        let common = r
            .cache
            .iter()
            .filter(|c| c.server == *who && c.held > 0)
            .filter_map(|c| {
                let m = r.cache.iter().find(|m| {
                    m.server.starts_with("memcached") && m.idle == c.idle && m.held > 0
                })?;
                Some((c, m))
            })
            .max_by_key(|(c, _)| c.idle);
        if let Some((c, m)) = common {
            if let Some(v) = c.closed_net_vs_start {
                out.push(Goal {
                    goal: format!(
                        "cache {who}: after its idle clients close, memory back within 10% of the start (net of the load)"
                    ),
                    met: v <= 1.10,
                    detail: format!("{v:.2} of the start after {} idle (memcached: {})", c.idle, m.closed_net_vs_start.map_or_else(|| "-".into(), |v| format!("{v:.2}"))),
                });
            }
            if let (Some(a), Some(b)) = (c.bytes_per_idle, m.bytes_per_idle) {
                out.push(Goal {
                    goal: format!("cache {who}: memory per idle connection ≤ {}'s", m.server),
                    met: a <= b,
                    detail: format!("{a:.0} B vs {b:.0} B at {} idle", c.idle),
                });
            }
        }
    }
    out
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// The pipes table.
pub fn pipes_table(rows: &[PipeRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                crate::report::thousands(r.idle as f64),
                r.runtime.clone(),
                crate::report::thousands(r.held as f64),
                format!("{:.0}", r.mb_per_sec),
                opt(r.vs_idle_free, |v| format!("{v:.2}")),
                format!("{:.1}", r.rss_idle_mib),
                opt(r.bytes_per_idle, crate::report::thousands),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "idle",
            "runtime",
            "held",
            "MB/s",
            "vs idle-free",
            "RSS idle MiB",
            "bytes/idle conn",
        ],
        &cells,
    )
}

/// The cache table.
pub fn cache_table(rows: &[CacheRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                crate::report::thousands(r.idle as f64),
                r.server.clone(),
                crate::report::thousands(r.held as f64),
                crate::report::thousands(r.tps),
                opt(r.vs_idle_free, |v| format!("{v:.2}")),
                r.p99_us.to_string(),
                format!("{:.2}", r.cpu_us_per_txn),
                format!("{:.1}", r.rss_start_mib),
                format!("{:.1}", r.rss_idle_mib),
                opt(r.bytes_per_idle, crate::report::thousands),
                format!("{:.1}", r.rss_closed_mib),
                format!("{:.2}", r.closed_vs_start),
                opt(r.closed_net_vs_start, |v| format!("{v:.2}")),
                format!("{:.2}", r.client_cores),
                opt(r.tps_before_idle, crate::report::thousands),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "idle",
            "server",
            "held",
            "txn/s",
            "vs idle-free",
            "p99 µs",
            "server CPU µs/txn",
            "RSS start MiB",
            "RSS idle MiB",
            "bytes/idle conn",
            "RSS after close MiB",
            "after close / start",
            "idle conns' share kept / start",
            "client cores",
            "txn/s before idle (same process)",
        ],
        &cells,
    )
}

/// Both tables, the goals and the notes, as Markdown sections.
pub fn tables(r: &Results) -> String {
    let mut s = String::new();
    if !r.pipes.is_empty() {
        s.push_str(&format!(
            "## Pipes: {PAIRS} pairs passing 32 KiB messages in 4 KiB writes, K idle connections beside them\n\n{}\n",
            pipes_table(&r.pipes)
        ));
    }
    if !r.cache.is_empty() {
        s.push_str(&format!(
            "## Cache: the paper's workload on {} active connections, K idle connections beside them (loopback TCP)\n\n{}\n",
            r.cache[0].active,
            cache_table(&r.cache)
        ));
    }
    if !r.goals.is_empty() {
        s.push_str("## Goals\n\n");
        for g in &r.goals {
            s.push_str(&format!(
                "- {} {}: {}\n",
                if g.met { "met:" } else { "MISSED:" },
                g.goal,
                g.detail
            ));
        }
        s.push('\n');
    }
    if !r.notes.is_empty() {
        s.push_str("## Not measured\n\n");
        for n in &r.notes {
            s.push_str(&format!("- {n}\n"));
        }
        s.push('\n');
    }
    s
}

fn csv_opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.3}"))
}

/// The pipes rows as CSV.
pub fn pipes_csv(rows: &[PipeRow]) -> String {
    let mut s = String::from(
        "runtime,idle,held,mb_per_sec,vs_idle_free,rss_base_mib,rss_idle_mib,bytes_per_idle\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{:.2},{},{:.2},{:.2},{}\n",
            crate::report::csv_field(&r.runtime),
            r.idle,
            r.held,
            r.mb_per_sec,
            csv_opt(r.vs_idle_free),
            r.rss_base_mib,
            r.rss_idle_mib,
            csv_opt(r.bytes_per_idle)
        ));
    }
    s
}

/// The cache rows as CSV.
pub fn cache_csv(rows: &[CacheRow]) -> String {
    let mut s = String::from("server,idle,held,active,tps,vs_idle_free,p99_us,cpu_us_per_txn,rss_start_mib,rss_idle_mib,bytes_per_idle,rss_closed_mib,closed_vs_start,rss_loaded_mib,closed_net_vs_start,client_cores,tps_before_idle\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{:.1},{},{},{:.3},{:.2},{:.2},{},{:.2},{:.3},{:.2},{},{:.3},{}\n",
            crate::report::csv_field(&r.server),
            r.idle,
            r.held,
            r.active,
            r.tps,
            csv_opt(r.vs_idle_free),
            r.p99_us,
            r.cpu_us_per_txn,
            r.rss_start_mib,
            r.rss_idle_mib,
            csv_opt(r.bytes_per_idle),
            r.rss_closed_mib,
            r.closed_vs_start,
            r.rss_loaded_mib,
            csv_opt(r.closed_net_vs_start),
            r.client_cores,
            r.tps_before_idle
                .map_or_else(String::new, |v| format!("{v:.1}"))
        ));
    }
    s
}

/// The plots' lines: throughput against idle connections held, one line
/// per runtime (pipes) and per server (cache), as in the seed's figure.
pub fn series(r: &Results) -> [Vec<crate::plot::Series>; 2] {
    fn lines<T>(
        rows: &[T],
        who: fn(&T) -> &str,
        point: fn(&T) -> (f64, f64),
    ) -> Vec<crate::plot::Series> {
        let mut out: Vec<crate::plot::Series> = Vec::new();
        for row in rows {
            let p = point(row);
            if !(p.0.is_finite() && p.1.is_finite()) {
                continue;
            }
            match out.iter_mut().find(|(n, _)| n == who(row)) {
                Some((_, pts)) => pts.push(p),
                None => out.push((who(row).to_string(), vec![p])),
            }
        }
        for (_, pts) in &mut out {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        out
    }
    [
        lines(&r.pipes, |p| &p.runtime, |p| (p.held as f64, p.mb_per_sec)),
        lines(&r.cache, |c| &c.server, |c| (c.held as f64, c.tps)),
    ]
}

/// Bytes per idle connection as grouped bars (the values span 100 B to
/// 60 KB: a logarithmic axis keeps them all readable): one group per idle
/// count asked (idle-free runs have none), one bar per pipe runtime and
/// cache server; a value that is not positive (the growth drowned in
/// noise) has no bar.
pub fn memory_bars(r: &Results) -> (Vec<String>, Vec<crate::plot::BarSeries>) {
    let mut counts: Vec<u64> = r
        .pipes
        .iter()
        .map(|p| p.idle)
        .chain(r.cache.iter().map(|c| c.idle))
        .filter(|&k| k > 0)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let categories = counts
        .iter()
        .map(|&k| format!("{} idle", crate::report::thousands(k as f64)))
        .collect();
    let mut bars: Vec<crate::plot::BarSeries> = Vec::new();
    let mut add = |name: String, at: &dyn Fn(u64) -> Option<f64>| {
        if bars.iter().any(|(n, _)| *n == name) {
            return;
        }
        let v: Vec<Option<f64>> = counts
            .iter()
            .map(|&k| at(k).filter(|b| b.is_finite() && *b > 0.0))
            .collect();
        if v.iter().any(Option::is_some) {
            bars.push((name, v));
        }
    };
    for p in &r.pipes {
        add(format!("pipes {}", p.runtime), &|k| {
            r.pipes
                .iter()
                .find(|x| x.runtime == p.runtime && x.idle == k)?
                .bytes_per_idle
        });
    }
    for c in &r.cache {
        add(format!("cache {}", c.server), &|k| {
            r.cache
                .iter()
                .find(|x| x.server == c.server && x.idle == k)?
                .bytes_per_idle
        });
    }
    (categories, bars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe(rt: &str, idle: u64, mbs: f64) -> PipeRow {
        PipeRow {
            runtime: rt.into(),
            idle,
            held: idle,
            mb_per_sec: mbs,
            vs_idle_free: None,
            rss_base_mib: 10.0,
            rss_idle_mib: 12.0,
            bytes_per_idle: bytes_per_conn(12 << 20, 10 << 20, idle),
        }
    }

    fn cache(server: &str, idle: u64, tps: f64, per_idle: f64) -> CacheRow {
        CacheRow {
            server: server.into(),
            idle,
            held: idle,
            active: 40,
            tps,
            vs_idle_free: None,
            tps_before_idle: (idle > 0).then_some(tps / 0.9),
            p99_us: 100,
            cpu_us_per_txn: 10.0,
            rss_start_mib: 10.0,
            rss_idle_mib: 10.0 + per_idle * idle as f64 / MIB,
            bytes_per_idle: (idle > 0).then_some(per_idle),
            rss_closed_mib: 10.5,
            closed_vs_start: 1.05,
            rss_loaded_mib: 10.0 + per_idle * idle as f64 / MIB,
            closed_net_vs_start: Some(1.05),
            client_cores: 0.5,
        }
    }

    #[test]
    fn memory_per_connection_is_the_growth_over_the_connections() {
        // 1,000 connections that grew RSS by 2 MiB: 2,097.152 bytes each.
        assert_eq!(bytes_per_conn(12 << 20, 10 << 20, 1000), Some(2_097.152));
        // Shrinking is reported as it is, not hidden.
        assert_eq!(bytes_per_conn(4096, 8192, 2), Some(-2048.0));
        assert_eq!(bytes_per_conn(12 << 20, 10 << 20, 0), None);
    }

    #[test]
    fn ratios_are_to_the_same_runtimes_idle_free_run() {
        let mut rows = vec![
            pipe("a", 0, 200.0),
            pipe("b", 0, 100.0),
            pipe("a", 1000, 190.0),
            pipe("b", 1000, 50.0),
            pipe("c", 1000, 50.0),
        ];
        fill_ratios(&mut rows);
        let r: Vec<Option<f64>> = rows.iter().map(|r| r.vs_idle_free).collect();
        assert_eq!(r, [Some(1.0), Some(1.0), Some(0.95), Some(0.5), None]);
        assert_eq!(ratio(1.0, 0.0), None);
    }

    #[test]
    fn each_idle_count_follows_an_idle_free_run_of_its_own() {
        assert_eq!(
            sequence(&[0, 1000, 19_000]),
            [(Some(0), 1000), (Some(0), 19_000)]
        );
        // Without 0 asked, the baselines are still measured.
        assert_eq!(sequence(&[200]), [(Some(0), 200)]);
        assert_eq!(sequence(&[0]), [(None, 0)]);
        assert!(sequence(&[]).is_empty());
    }

    #[test]
    fn paired_ratios_are_medians_over_rounds_of_each_pair() {
        // Pairs of 0.95, 1.0 and 0.71 (the host slowed inside round 3):
        // their median is 0.95, where the ratio of the medians (150 / 200)
        // says 0.75.
        let measured = [
            pipe("a", 0, 200.0),
            pipe("a", 1000, 190.0),
            pipe("a", 0, 150.0),
            pipe("a", 1000, 150.0),
            pipe("a", 0, 210.0),
            pipe("a", 1000, 150.0),
            pipe("b", 0, 100.0),
        ];
        let mut pairs = Vec::new();
        let mut base = None;
        for r in &measured {
            pair_up(&mut base, r, &mut pairs);
        }
        assert_eq!(pairs.len(), 3);
        let mut rows = medians(&measured);
        fill_ratios(&mut rows);
        let before: Vec<Option<f64>> = rows.iter().map(|r| r.vs_idle_free).collect();
        assert_eq!(before, [Some(1.0), Some(0.75), Some(1.0)]);
        fill_paired_ratios(&mut rows, &pairs);
        let got: Vec<Option<f64>> = rows.iter().map(|r| r.vs_idle_free).collect();
        assert_eq!(got, [Some(1.0), Some(0.95), Some(1.0)]);
        // A cache row is paired with its own process's window before its
        // idle clients came (the test rows': 0.9).
        let row = cache("s", 200, 900.0, 600.0);
        let (who, idle, r) = cache_pair(&row).unwrap();
        assert_eq!((who.as_str(), idle), ("s", 200));
        assert!((r - 0.9).abs() < 1e-9, "{r}");
        assert_eq!(cache_pair(&cache("s", 0, 900.0, 0.0)), None);
        // A point whose base failed has no pair: it keeps the fallback.
        let mut base = None;
        let mut none = Vec::new();
        pair_up(&mut base, &pipe("c", 1000, 90.0), &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn medians_pick_the_middle_round_per_point_in_first_seen_order() {
        let rows = vec![
            pipe("a", 0, 10.0),
            pipe("b", 0, 5.0),
            pipe("a", 0, 30.0),
            pipe("b", 0, 1.0),
            pipe("a", 0, 20.0),
            pipe("b", 0, 3.0),
            pipe("a", 9, 7.0),
        ];
        let m = medians(&rows);
        let got: Vec<(&str, u64, f64)> = m
            .iter()
            .map(|r| (r.runtime.as_str(), r.idle, r.mb_per_sec))
            .collect();
        assert_eq!(got, [("a", 0, 20.0), ("b", 0, 3.0), ("a", 9, 7.0)]);
        assert!(medians::<PipeRow>(&[]).is_empty());
    }

    #[test]
    fn idle_counts_stop_below_the_descriptor_limit() {
        assert_eq!(max_idle_pipes(20_000, 128), 20_000 - 256 - RESERVED_FDS);
        assert_eq!(max_idle_cache(20_000, 40), 20_000 - 40 - RESERVED_FDS);
        assert_eq!(max_idle_cache(50, 40), 0);
        check_active(20_000, 9_968, 19_936, true, true).unwrap();
        let e = check_active(20_000, 1_000_000, 40, true, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--pairs 1000000: two descriptors a pair, and a process may open 20000 files here \
             (ulimit -n), 64 kept for itself; at most 9968 pairs"
        );
        check_active(20_000, 1_000_000, 40, false, true).unwrap();
        let e = check_active(1024, 128, 5000, true, true).unwrap_err();
        assert!(e.to_string().starts_with("--active 5000: "), "{e}");
        check_active(1024, 128, 5000, true, false).unwrap();
        let (kept, cut) = clamp_idle(&[0, 1000, 19_000, 25_000], 19_680);
        assert_eq!(kept, [0, 1000, 19_000, 19_680]);
        assert_eq!(cut, [25_000]);
        // Two counts above the limit become one point.
        let (kept, cut) = clamp_idle(&[0, 30_000, 40_000], 100);
        assert_eq!(kept, [0, 100]);
        assert_eq!(cut, [30_000, 40_000]);
    }

    #[test]
    fn goals_compare_the_largest_idle_count_and_memcached() {
        let mut r = Results {
            pipes: vec![
                pipe("duality-epoll", 0, 100.0),
                pipe("duality-epoll", 5000, 96.0),
                pipe("duality-uring", 0, 100.0),
                pipe("duality-uring", 5000, 90.0),
                pipe("tokio", 0, 100.0),
                pipe("tokio", 5000, 10.0),
            ],
            cache: vec![
                cache("duality symped:2", 0, 1000.0, 0.0),
                cache("duality symped:2", 200, 990.0, 900.0),
                cache("memcached -t 2", 0, 1000.0, 0.0),
                cache("memcached -t 2", 200, 1000.0, 1000.0),
                cache("duality thread-per-conn", 0, 1000.0, 0.0),
                cache("duality thread-per-conn", 200, 900.0, 9000.0),
            ],
            ..Default::default()
        };
        fill_ratios(&mut r.pipes);
        fill_ratios(&mut r.cache);
        r.cache[5].closed_net_vs_start = Some(1.5);
        let g = goals(&r);
        let met: Vec<(&str, bool)> = g.iter().map(|g| (g.goal.as_str(), g.met)).collect();
        assert_eq!(
            met,
            [
                (
                    "pipes duality-epoll: throughput with 5000 idle ≥ 0.95 × idle-free",
                    true
                ),
                (
                    "pipes duality-uring: throughput with 5000 idle ≥ 0.95 × idle-free",
                    false
                ),
                (
                    "cache duality symped:2: throughput with 200 idle ≥ 0.95 × idle-free",
                    true
                ),
                (
                    "cache duality thread-per-conn: throughput with 200 idle ≥ 0.95 × idle-free",
                    false
                ),
                (
                    "cache duality symped:2: after its idle clients close, memory back within 10% of the start (net of the load)",
                    true
                ),
                (
                    "cache duality symped:2: memory per idle connection ≤ memcached -t 2's",
                    true
                ),
                (
                    "cache duality thread-per-conn: after its idle clients close, memory back within 10% of the start (net of the load)",
                    false
                ),
                (
                    "cache duality thread-per-conn: memory per idle connection ≤ memcached -t 2's",
                    false
                ),
            ]
        );
        // Peers (tokio) have no goal; without memcached there is no memory goal.
        r.cache.retain(|c| !c.server.starts_with("memcached"));
        assert!(goals(&r).iter().all(|g| !g.goal.contains("memory")));
    }

    #[test]
    fn tables_csv_and_series_carry_every_row() {
        let mut r = Results {
            pipes: vec![
                pipe("duality-epoll", 0, 100.0),
                pipe("duality-epoll", 200, 99.0),
            ],
            cache: vec![
                cache("memcached -t 2", 0, 1000.0, 0.0),
                cache("memcached -t 2", 200, 990.0, 512.0),
            ],
            ..Default::default()
        };
        fill_ratios(&mut r.pipes);
        fill_ratios(&mut r.cache);
        let t = tables(&r);
        assert!(
            t.contains("| 200 | duality-epoll | 200 | 99 | 0.99 | 12.0 | 10,486 |"),
            "{t}"
        );
        assert!(
            t.contains("| 0 | duality-epoll | 0 | 100 | 1.00 | 12.0 | - |"),
            "{t}"
        );
        assert!(
            t.contains("| 200 | memcached -t 2 | 200 | 990 | 0.99 | 100 | 10.00 |"),
            "{t}"
        );
        assert_eq!(pipes_csv(&r.pipes).lines().count(), 3);
        assert_eq!(cache_csv(&r.cache).lines().count(), 3);
        let [p, c] = series(&r);
        assert_eq!(
            p,
            [(
                "duality-epoll".to_string(),
                vec![(0.0, 100.0), (200.0, 99.0)]
            )]
        );
        assert_eq!(c[0].1.len(), 2);
        // Memory is per idle connection: the idle-free runs have no group.
        let (groups, bars) = memory_bars(&r);
        assert_eq!(groups, ["200 idle"]);
        let want: Vec<crate::plot::BarSeries> = vec![
            ("pipes duality-epoll".into(), vec![Some(10_485.76)]),
            ("cache memcached -t 2".into(), vec![Some(512.0)]),
        ];
        assert_eq!(bars, want);
        // A growth lost in noise (not positive) draws no bar.
        r.cache[1].bytes_per_idle = Some(-3.0);
        assert_eq!(memory_bars(&r).1.len(), 1);
    }

    #[test]
    fn the_os_thread_cap_is_positive_and_bounded() {
        let cap = os_thread_cap();
        assert!(cap > 0 && cap <= crate::disk::MAX_OS_THREADS, "{cap}");
    }
}
