//! `duality bench balance`: how evenly the network loops share the work
//! under each accept balance (seed 002's "uneven load"), with memcached's
//! round-robin dispatch to its worker threads beside them.
//!
//! ```text
//!  placement: heavy₁ short₁ heavy₂ short₂ …   (a short connection asks once, closes)
//!  window:    heavy ×H ══ pipelined gets, closed loop ══▶ server (N loops)
//!             short      ── connect, one get, close, every 1/rate s ──▶ (timed)
//! ```
//!
//! Heavy connections (kept open, pipelining) and short ones (one request,
//! then closed) arrive interleaved, as persistent clients beside clients that
//! reconnect per request. Dealt in turn to two loops, every heavy connection
//! lands on the same loop, which then does the work while the other idles:
//! the imbalance the seed saw behind uneven accept. Least-loaded sends each
//! to the loop with the fewest open connections; `SO_REUSEPORT` lets the
//! kernel hash them. Per server and round: the CPU time each network loop
//! (memcached: each `mc-worker`) spent over the window, its share, the
//! imbalance (busiest loop's CPU time over the mean), requests/s, server CPU
//! per request and the short connections' time from connect to answer.
//! Servers take turns, each round in a fresh process; medians over rounds.

use crate::servers::{ServerKind, ServerProcess, DEFAULT_MAX_CONNS};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One server's figures (medians over the rounds).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BalanceRow {
    /// `duality symped:2 round-robin`, `memcached -t 2`, …
    pub server: String,
    /// Rounds measured.
    pub rounds: usize,
    /// Connections open on each network loop once placed, busiest first, as
    /// duality's `stats` shows them (the asking connection included; empty
    /// for memcached, which does not show them).
    pub conns_per_loop: Vec<usize>,
    /// Each loop's share of the loops' CPU time, busiest first (the round
    /// with the median imbalance).
    pub loop_shares: Vec<f64>,
    /// Busiest loop's CPU time over the mean (1 = even; N = one loop of N
    /// does everything).
    pub imbalance: f64,
    /// Requests answered per second (heavy and short).
    pub requests_per_sec: f64,
    /// Server CPU time (all threads) per request, microseconds.
    pub cpu_us_per_req: f64,
    /// Short connections: connect to answer, median, milliseconds.
    pub short_p50_ms: f64,
    /// Short connections: 99th percentile, milliseconds.
    pub short_p99_ms: f64,
    /// Short connections that got no answer within 5 s.
    pub short_failed: u64,
}

/// Busiest over mean of per-loop CPU times (1 = even); NaN without any.
pub fn imbalance(cpu: &[f64]) -> f64 {
    let total: f64 = cpu.iter().sum();
    if cpu.is_empty() || total <= 0.0 {
        return f64::NAN;
    }
    let max = cpu.iter().copied().fold(f64::MIN, f64::max);
    max / (total / cpu.len() as f64)
}

/// Each loop's share of the total, busiest first.
pub fn shares(cpu: &[f64]) -> Vec<f64> {
    let total: f64 = cpu.iter().sum();
    let mut v: Vec<f64> = cpu
        .iter()
        .map(|c| if total > 0.0 { c / total } else { 0.0 })
        .collect();
    v.sort_by(|a, b| b.total_cmp(a));
    v
}

/// Median of `v` (the lower middle for an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        f64::NAN
    } else {
        s[(s.len() - 1) / 2]
    }
}

/// One round of one server.
#[derive(Clone, Debug)]
struct Round {
    conns_per_loop: Vec<usize>,
    loop_cpu: Vec<f64>,
    requests_per_sec: f64,
    cpu_us_per_req: f64,
    short_ms: Vec<f64>,
    short_failed: u64,
}

/// Combines rounds into a row: medians; the shares of the round whose
/// imbalance is the median.
fn row(server: &str, rounds: &[Round]) -> BalanceRow {
    let imb: Vec<f64> = rounds.iter().map(|r| imbalance(&r.loop_cpu)).collect();
    let mid = median(&imb);
    let pick = rounds
        .iter()
        .zip(&imb)
        .find(|(_, i)| i.total_cmp(&mid).is_eq())
        .map(|(r, _)| shares(&r.loop_cpu))
        .unwrap_or_default();
    let p = |q: f64| {
        median(
            &rounds
                .iter()
                .map(|r| {
                    let mut s = r.short_ms.clone();
                    s.sort_by(f64::total_cmp);
                    crate::fairness::percentile(&s, q)
                })
                .collect::<Vec<_>>(),
        )
    };
    BalanceRow {
        server: server.into(),
        rounds: rounds.len(),
        conns_per_loop: rounds
            .iter()
            .zip(&imb)
            .find(|(_, i)| i.total_cmp(&mid).is_eq())
            .map(|(r, _)| r.conns_per_loop.clone())
            .unwrap_or_default(),
        loop_shares: pick,
        imbalance: mid,
        requests_per_sec: median(
            &rounds
                .iter()
                .map(|r| r.requests_per_sec)
                .collect::<Vec<_>>(),
        ),
        cpu_us_per_req: median(&rounds.iter().map(|r| r.cpu_us_per_req).collect::<Vec<_>>()),
        short_p50_ms: p(0.5),
        short_p99_ms: p(0.99),
        short_failed: rounds.iter().map(|r| r.short_failed).sum(),
    }
}

/// One run's settings.
pub struct Plan<'a> {
    /// The `duality` executable.
    pub exe: &'a Path,
    /// Network loops (duality `symped:N`, memcached `-t N`).
    pub loops: usize,
    /// Accept balances of duality to measure.
    pub balances: Vec<String>,
    /// Heavy (pipelining) connections.
    pub heavy: usize,
    /// Gets each heavy connection writes at once.
    pub pipeline: usize,
    /// Short connections opened per second during the window.
    pub short_rate: f64,
    /// Seconds measured per round.
    pub seconds: f64,
    /// Rounds (servers take turns in each).
    pub rounds: usize,
}

/// CPU time of each of `pid`'s threads whose name starts with `prefix`
/// (seconds, in thread-id order).
fn thread_cpu(pid: u32, prefix: &str) -> anyhow::Result<Vec<f64>> {
    let mut v = Vec::new();
    let mut tids: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    for tid in tids {
        let dir = format!("/proc/{pid}/task/{tid}");
        let Ok(comm) = std::fs::read_to_string(format!("{dir}/comm")) else {
            continue;
        };
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("{dir}/stat"))?;
        let t = crate::proc::cpu_time_from_stat(&stat, crate::proc::clock_ticks())
            .ok_or_else(|| anyhow::anyhow!("unexpected {dir}/stat"))?;
        v.push(t.as_secs_f64());
    }
    Ok(v)
}

/// Open connections per network loop from duality's `stats duality`
/// (`thread:K:curr_connections`), busiest first; empty where the server
/// shows none.
fn loop_connections(addr: SocketAddr) -> anyhow::Result<Vec<usize>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"stats duality\r\n")?;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while !got.ends_with(b"END\r\n") && !got.ends_with(b"ERROR\r\n") {
        let n = s.read(&mut buf)?;
        anyhow::ensure!(n > 0, "server closed the stats connection");
        got.extend_from_slice(&buf[..n]);
    }
    Ok(parse_loop_connections(&String::from_utf8_lossy(&got)))
}

/// The `thread:K:curr_connections` values of a `stats` answer, busiest first.
pub fn parse_loop_connections(stats: &str) -> Vec<usize> {
    let mut v: Vec<usize> = stats
        .lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            (it.next()? == "STAT").then_some(())?;
            let name = it.next()?;
            let value = it.next()?;
            let k = name.strip_prefix("thread:")?;
            (k.split_once(':')?.1 == "curr_connections").then_some(())?;
            value.parse().ok()
        })
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

/// Connects, sends one get, waits for its `END`; the time taken.
fn short_request(addr: SocketAddr) -> Option<Duration> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"get balance:short\r\n").ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"END\r\n") {
        match s.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    Some(t0.elapsed())
}

/// A heavy connection: pipelines `pipeline` gets, reads their answers, again
/// until `stop`; counts answered requests.
fn heavy_loop(mut s: TcpStream, pipeline: usize, stop: &AtomicBool, done: &AtomicU64) {
    let req = b"get balance:heavy\r\n".repeat(pipeline);
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Relaxed) {
        if s.write_all(&req).is_err() {
            return;
        }
        let mut ends = 0;
        while ends < pipeline {
            match s.read(&mut buf) {
                Ok(n) if n > 0 => {
                    ends += buf[..n].windows(5).filter(|w| w == b"END\r\n").count();
                }
                _ => return,
            }
        }
        done.fetch_add(pipeline as u64, Relaxed);
    }
}

/// Measures one server process for one round.
fn measure(
    server: &ServerProcess,
    addr: SocketAddr,
    threads: &str,
    plan: &Plan,
) -> anyhow::Result<Round> {
    // Placement: heavy and short connections interleaved.
    let mut heavy = Vec::new();
    for _ in 0..plan.heavy {
        let mut h = TcpStream::connect(addr)?;
        h.set_read_timeout(Some(Duration::from_secs(10)))?;
        h.set_nodelay(true)?;
        // Answered: the connection has been given to a loop.
        h.write_all(b"get balance:heavy\r\n")?;
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while !got.ends_with(b"END\r\n") {
            let n = h.read(&mut buf)?;
            anyhow::ensure!(n > 0, "server closed a heavy connection");
            got.extend_from_slice(&buf[..n]);
        }
        heavy.push(h);
        anyhow::ensure!(
            short_request(addr).is_some(),
            "no answer to a short connection"
        );
        // Let the server count the short connection off before the next
        // heavy one arrives (a loaded machine may take a while to see the
        // close).
        std::thread::sleep(Duration::from_millis(30));
    }
    // memcached does not show its workers' connections.
    let conns_per_loop = if threads == "kv-net-" {
        loop_connections(addr)?
    } else {
        Vec::new()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let pid = server.pid();
    let cpu0 = thread_cpu(pid, threads)?;
    let proc0 = crate::proc::cpu_time_of(pid)?;
    let t0 = Instant::now();
    let workers: Vec<_> = heavy
        .into_iter()
        .map(|h| {
            let (stop, done) = (stop.clone(), done.clone());
            let pipeline = plan.pipeline;
            std::thread::spawn(move || heavy_loop(h, pipeline, &stop, &done))
        })
        .collect();
    let window = Duration::from_secs_f64(plan.seconds);
    let gap = Duration::from_secs_f64(1.0 / plan.short_rate.max(0.1));
    let (mut short_ms, mut short_failed) = (Vec::new(), 0);
    let mut next = t0;
    while t0.elapsed() < window {
        match short_request(addr) {
            Some(t) => short_ms.push(t.as_secs_f64() * 1e3),
            None => short_failed += 1,
        }
        next += gap;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu1 = thread_cpu(pid, threads)?;
    let proc1 = crate::proc::cpu_time_of(pid)?;
    let answered = done.load(Relaxed) + short_ms.len() as u64;
    stop.store(true, Relaxed);
    for w in workers {
        let _ = w.join();
    }
    anyhow::ensure!(
        cpu0.len() == cpu1.len() && !cpu0.is_empty(),
        "found no {threads}* threads in process {pid}"
    );
    let loop_cpu: Vec<f64> = cpu1.iter().zip(&cpu0).map(|(b, a)| b - a).collect();
    Ok(Round {
        conns_per_loop,
        loop_cpu,
        requests_per_sec: answered as f64 / elapsed,
        cpu_us_per_req: (proc1 - proc0).as_secs_f64() * 1e6 / answered.max(1) as f64,
        short_ms,
        short_failed,
    })
}

/// Runs the experiment; `tick` is called after each server's round.
pub fn run(plan: &Plan, tick: &mut dyn FnMut(&str, usize)) -> anyhow::Result<Vec<BalanceRow>> {
    let model = format!("symped:{}", plan.loops);
    // (label, server kind, the name prefix of its network threads)
    let mut servers: Vec<(String, ServerKind, &str)> = plan
        .balances
        .iter()
        .map(|b| {
            (
                format!("duality {model} {b}"),
                ServerKind::Duality(format!("{model}+{b}")),
                "kv-net-",
            )
        })
        .collect();
    if crate::servers::memcached_path().is_some() {
        servers.push((
            format!("memcached -t {} (round-robin)", plan.loops),
            ServerKind::Memcached(plan.loops),
            "mc-worker",
        ));
    } else {
        duality_rt::say!(
            "memcached is not installed (apt-get install memcached): its row is left out"
        );
    }
    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); servers.len()];
    for round in 0..plan.rounds {
        for (i, (label, kind, threads)) in servers.iter().enumerate() {
            let (server, addr) =
                ServerProcess::start_on_free_port(plan.exe, kind, 64, DEFAULT_MAX_CONNS)?;
            let r = measure(&server, addr, threads, plan)?;
            drop(server);
            rounds[i].push(r);
            tick(label, round);
        }
    }
    Ok(servers
        .iter()
        .zip(&rounds)
        .map(|((label, ..), r)| row(label, r))
        .collect())
}

/// The Markdown table.
pub fn table(rows: &[BalanceRow]) -> String {
    let header = [
        "server",
        "connections per loop",
        "loop CPU shares (busiest first)",
        "imbalance (max/mean)",
        "requests/s",
        "server CPU µs/req",
        "short conn p50 ms",
        "p99 ms",
        "no answer",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.server.clone(),
                if r.conns_per_loop.is_empty() {
                    "-".to_string()
                } else {
                    r.conns_per_loop
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(" / ")
                },
                r.loop_shares
                    .iter()
                    .map(|s| format!("{:.0}%", s * 100.0))
                    .collect::<Vec<_>>()
                    .join(" / "),
                format!("{:.2}", r.imbalance),
                crate::report::thousands(r.requests_per_sec),
                format!("{:.2}", r.cpu_us_per_req),
                format!("{:.2}", r.short_p50_ms),
                format!("{:.2}", r.short_p99_ms),
                r.short_failed.to_string(),
            ]
        })
        .collect();
    crate::report::markdown_table(&header, &body)
}

/// The rows as CSV (shares joined by `/`).
pub fn csv(rows: &[BalanceRow]) -> String {
    let mut s = String::from(
        "server,rounds,conns_per_loop,loop_shares,imbalance,requests_per_sec,cpu_us_per_req,short_p50_ms,short_p99_ms,short_failed\n",
    );
    for r in rows {
        let shares: Vec<String> = r.loop_shares.iter().map(|v| format!("{v:.4}")).collect();
        let conns: Vec<String> = r.conns_per_loop.iter().map(|c| c.to_string()).collect();
        s.push_str(&format!(
            "{},{},{},{},{:.4},{:.1},{:.3},{:.3},{:.3},{}\n",
            crate::report::csv_field(&r.server),
            r.rounds,
            conns.join("/"),
            shares.join("/"),
            r.imbalance,
            r.requests_per_sec,
            r.cpu_us_per_req,
            r.short_p50_ms,
            r.short_p99_ms,
            r.short_failed
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imbalance_is_busiest_over_mean() {
        assert_eq!(imbalance(&[1.0, 1.0]), 1.0);
        assert_eq!(imbalance(&[2.0, 0.0]), 2.0);
        assert_eq!(imbalance(&[3.0, 1.0, 2.0]), 1.5);
        assert!(imbalance(&[]).is_nan());
        assert!(imbalance(&[0.0, 0.0]).is_nan());
    }

    #[test]
    fn shares_sum_to_one_busiest_first() {
        assert_eq!(shares(&[1.0, 3.0]), [0.75, 0.25]);
        assert_eq!(shares(&[0.0, 0.0]), [0.0, 0.0]);
    }

    #[test]
    fn a_row_takes_medians_and_the_median_rounds_shares() {
        let r = |cpu: [f64; 2], rps: f64, ms: f64| Round {
            conns_per_loop: vec![rps as usize / 100, 1],
            loop_cpu: cpu.to_vec(),
            requests_per_sec: rps,
            cpu_us_per_req: rps / 1000.0,
            short_ms: vec![ms; 10],
            short_failed: 1,
        };
        let rounds = [
            r([1.0, 1.0], 100.0, 1.0),
            r([3.0, 1.0], 300.0, 3.0),
            r([1.9, 0.1], 200.0, 2.0),
        ];
        let row = row("x", &rounds);
        assert_eq!(row.imbalance, 1.5);
        assert_eq!(row.loop_shares, [0.75, 0.25]);
        assert_eq!(row.requests_per_sec, 200.0);
        assert_eq!(row.cpu_us_per_req, 0.2);
        assert_eq!((row.short_p50_ms, row.short_p99_ms), (2.0, 2.0));
        assert_eq!(row.short_failed, 3);
        assert_eq!(row.conns_per_loop, [3, 1]);
        assert!(
            table(std::slice::from_ref(&row)).contains("| x | 3 / 1 | 75% / 25% | 1.50 | 200 |")
        );
        assert!(csv(&[row])
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("x,3,3/1,0.7500/0.2500,1.5000,200.0"));
    }

    #[test]
    fn loop_connections_come_from_the_network_threads_stats() {
        let stats =
            "STAT pid 1\r\nSTAT thread:0:role acceptor\r\nSTAT thread:1:curr_connections 2\r\n\
                     STAT thread:2:curr_connections 5\r\nSTAT curr_connections 7\r\nEND\r\n";
        assert_eq!(parse_loop_connections(stats), [5, 2]);
        assert!(parse_loop_connections("STAT curr_connections 3\r\nEND\r\n").is_empty());
    }
}
