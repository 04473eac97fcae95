//! `duality bench models` and `duality bench threads`: the cache under every
//! threading model, side by side with memcached and the same cache on tokio
//! (seed 001, Figures 1-7 and 6), in one run on this machine.
//!
//! Every server runs as its own process. For each client count the load
//! generator warms up, then measures `windows` back-to-back windows (the
//! paper's 5 runs): transactions/s is their mean and sample deviation;
//! latency percentiles are the median over windows; the server's CPU time
//! and context switches (all its threads, from `/proc/<pid>`) are divided by
//! the transactions of all windows.

use crate::loadgen::{self, LoadConfig, Mode, Target};
use crate::servers::{memcached_path, ServerKind, ServerProcess, DEFAULT_MAX_CONNS};
use crate::summary::{mean_sd, median};
use crate::workload::Workload;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// One point: a server at a client count.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KvRow {
    /// `duality symped:2`, `memcached -t 2`, `tokio -t 2`, …
    pub server: String,
    /// Concurrent client connections.
    pub clients: usize,
    /// Server threads (for `bench threads`; 0 where not applicable).
    pub threads: usize,
    /// Mean transactions per second over the windows.
    pub tps_mean: f64,
    /// Their sample standard deviation.
    pub tps_sd: f64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// 99.9th percentile latency, µs.
    pub p999_us: u64,
    /// Server CPU time per transaction, µs.
    pub cpu_us_per_txn: f64,
    /// Server context switches per transaction.
    pub ctx_switches_per_txn: f64,
    /// Server system calls per transaction (`--syscalls`: counted with perf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_per_txn: Option<f64>,
    /// Cores the client used (all its threads).
    pub client_cores: f64,
    /// The client used (nearly) a whole core per thread: it, not the server,
    /// may have been the limit.
    pub client_saturated: bool,
    /// Rounds merged into this row (servers taking turns each round): the
    /// figures above are then medians over them, `tps_sd` the spread of
    /// the rounds' means.
    #[serde(default = "one")]
    pub rounds: usize,
    /// Median over rounds of this row's transactions/s divided by the first
    /// `duality symped` row's at the same client count in the same round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_symped: Option<f64>,
    /// The same against the first `duality sped` row (the yardstick of the
    /// hand-off models with requests pipelined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_sped: Option<f64>,
    /// Median over rounds of this row's server CPU per transaction divided
    /// by `memcached -t 1`'s at the same client count in the same round (the
    /// issue's yardstick for CPU; per round, so the host's drift between
    /// servers measured minutes apart cancels out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_vs_memcached: Option<f64>,
}

fn one() -> usize {
    1
}

#[cfg(test)]
impl KvRow {
    /// A row of `server` at `clients` with `tps` and `cpu` (µs per
    /// transaction), one round, every other figure zero or absent (tests).
    pub(crate) fn for_test(server: &str, clients: usize, tps: f64, cpu: f64) -> KvRow {
        KvRow {
            server: server.into(),
            clients,
            threads: 0,
            tps_mean: tps,
            tps_sd: 0.0,
            p50_us: 0,
            p99_us: 0,
            p999_us: 0,
            cpu_us_per_txn: cpu,
            ctx_switches_per_txn: 0.0,
            syscalls_per_txn: None,
            client_cores: 0.0,
            client_saturated: false,
            rounds: 1,
            vs_symped: None,
            vs_sped: None,
            cpu_vs_memcached: None,
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The `duality` binary (servers and helpers are started from it).
    pub exe: PathBuf,
    /// Servers, in table order.
    pub servers: Vec<ServerKind>,
    /// Client counts.
    pub clients: Vec<usize>,
    /// Unix socket (the paper's) or TCP on loopback.
    pub tcp: bool,
    /// The data set and mix.
    pub workload: Arc<Workload>,
    /// Warm-up before each client count.
    pub warmup: Duration,
    /// Each measurement window.
    pub window: Duration,
    /// Windows per point (the paper: 5).
    pub windows: usize,
    /// Rounds: every server measured in turn, again and again; figures
    /// are medians over rounds (see [`merge_rounds`]).
    pub rounds: usize,
    /// Requests each connection writes at once before reading the replies.
    pub pipeline: usize,
    /// Count the server's system calls over the windows (needs `perf`).
    pub count_syscalls: bool,
    /// The load generator's I/O backend (`None`: the process default, epoll).
    pub client_io: Option<duality_rt::IoBackend>,
    /// Load-generator threads (each a duality loop with an even share of
    /// the connections).
    pub client_threads: usize,
}

/// The client core share above which the client counts as saturated.
pub const SATURATED: f64 = 0.9;

/// The default server list of `bench models` on a machine with `cores` cores.
pub fn model_servers(cores: usize) -> Vec<ServerKind> {
    let mut v: Vec<ServerKind> = duality_models::Model::all_defaults()
        .iter()
        .map(|m| ServerKind::Duality(m.to_string()))
        .collect();
    v.push(ServerKind::Memcached(1));
    if cores > 1 {
        v.push(ServerKind::Memcached(cores));
    }
    v.push(ServerKind::Tokio(cores));
    v
}

/// The server list of `bench threads`: SYMPED and memcached at 1..=max threads.
pub fn thread_servers(max: usize) -> Vec<(usize, ServerKind)> {
    (1..=max.max(1))
        .flat_map(|n| {
            [
                (n, ServerKind::Duality(format!("symped:{n}"))),
                (n, ServerKind::Memcached(n)),
            ]
        })
        .collect()
}

/// Measures one server at every client count. `tick` is called after each point.
pub fn measure_server(
    plan: &Plan,
    kind: &ServerKind,
    threads: usize,
    tick: &mut dyn FnMut(&KvRow),
) -> anyhow::Result<Vec<KvRow>> {
    let (mut server, target) = if plan.tcp {
        let (s, addr) =
            ServerProcess::start_on_free_port(&plan.exe, kind, 1024, DEFAULT_MAX_CONNS)?;
        (s, Target::Tcp(addr))
    } else {
        let target = Target::Unix(std::env::temp_dir().join(format!(
            "duality-bench-{}-{}.sock",
            std::process::id(),
            kind.label().replace([' ', ':', '/'], "_")
        )));
        (ServerProcess::start(&plan.exe, kind, &target)?, target)
    };
    loadgen::preload(&target, &plan.workload).map_err(|e| failed(&mut server, &kind.label(), e))?;
    let pid = server.pid();
    let mut rows = Vec::new();
    for &clients in &plan.clients {
        let mut marks = Vec::new();
        let mut counter: Option<crate::proc::SyscallCounter> = None;
        let mut syscalls = None;
        let windows = loadgen::run(
            &LoadConfig {
                target: target.clone(),
                conns: clients,
                workload: plan.workload.clone(),
                warmup: plan.warmup,
                window: plan.window,
                windows: plan.windows,
                mode: Mode::Closed,
                seed: clients as u64,
                pipeline: plan.pipeline,
                io: plan.client_io,
                threads: plan.client_threads,
                reply_timeout: loadgen::reply_timeout(plan.window),
            },
            &mut |w| {
                if plan.count_syscalls && w == 0 {
                    counter = crate::proc::SyscallCounter::start(pid);
                }
                marks.push((
                    crate::proc::cpu_time_of(pid).unwrap_or_default(),
                    crate::proc::ctx_switches_of(pid),
                ));
                if w == plan.windows {
                    syscalls = counter.take().and_then(|c| c.finish());
                }
            },
        )
        .map_err(|e| {
            failed(
                &mut server,
                &format!("{} with {clients} clients", kind.label()),
                e,
            )
        })?;
        let tps: Vec<f64> = windows.iter().map(|w| w.tps()).collect();
        let (tps_mean, tps_sd) = mean_sd(&tps);
        let txns: u64 = windows.iter().map(|w| w.txns).sum::<u64>().max(1);
        let (first, last) = (marks[0], marks[marks.len() - 1]);
        let client_cores =
            windows.iter().map(|w| w.client_cores).sum::<f64>() / windows.len() as f64;
        let pct = |f: fn(&crate::summary::Percentiles) -> u64| {
            median(
                &windows
                    .iter()
                    .map(|w| f(&w.latency) as f64)
                    .collect::<Vec<_>>(),
            ) as u64
        };
        let row = KvRow {
            server: kind.label(),
            clients,
            threads,
            tps_mean,
            tps_sd,
            p50_us: pct(|p| p.p50_us),
            p99_us: pct(|p| p.p99_us),
            p999_us: pct(|p| p.p999_us),
            cpu_us_per_txn: last.0.saturating_sub(first.0).as_secs_f64() * 1e6 / txns as f64,
            ctx_switches_per_txn: last.1.saturating_sub(first.1) as f64 / txns as f64,
            syscalls_per_txn: syscalls.map(|n| n as f64 / txns as f64),
            client_cores,
            client_saturated: client_cores
                >= SATURATED * plan.client_threads.clamp(1, clients) as f64,
            rounds: 1,
            vs_symped: None,
            vs_sped: None,
            cpu_vs_memcached: None,
        };
        tick(&row);
        rows.push(row);
    }
    drop(server);
    Ok(rows)
}

/// `what: e`, or, where the server has exited, that it did (its requests
/// then failed or went unanswered because it was gone, not slow).
fn failed(server: &mut ServerProcess, what: &str, e: anyhow::Error) -> anyhow::Error {
    // A killed server's last connections may fail a moment before its
    // exit is seen.
    let until = std::time::Instant::now() + Duration::from_millis(200);
    loop {
        if let Some(how) = server.exited() {
            return anyhow::anyhow!("{what}: the server {how} during the run");
        }
        if std::time::Instant::now() >= until {
            return anyhow::anyhow!("{what}: {e}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `servers` (label, threads) in turn. memcached missing: say how to
/// install it and go on without it. The first server that fails ends the
/// run.
pub fn run(
    plan: &Plan,
    servers: &[(usize, ServerKind)],
    tick: &mut dyn FnMut(&KvRow),
    note: &mut dyn FnMut(String),
) -> anyhow::Result<Vec<KvRow>> {
    let measured = run_inner(plan, servers, tick, note, false);
    match measured.failed.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(measured.rows),
    }
}

/// What [`run_keeping`] measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// The servers that never failed, merged over the rounds.
    pub rows: Vec<KvRow>,
    /// The servers that failed, each with why: left out of every round.
    pub failed: Vec<anyhow::Error>,
}

/// [`run`], going on past a server that fails: it is left out of the
/// rounds (those before too, so that every round holds the same points)
/// and named in [`Measured::failed`], and the others are measured as
/// planned (a peer dying at the end of an hour's run loses none of the
/// hour). An interrupt still ends the run.
pub fn run_keeping(
    plan: &Plan,
    servers: &[(usize, ServerKind)],
    tick: &mut dyn FnMut(&KvRow),
    note: &mut dyn FnMut(String),
) -> Measured {
    run_inner(plan, servers, tick, note, true)
}

fn run_inner(
    plan: &Plan,
    servers: &[(usize, ServerKind)],
    tick: &mut dyn FnMut(&KvRow),
    note: &mut dyn FnMut(String),
    keep_going: bool,
) -> Measured {
    let mut rounds: Vec<Vec<KvRow>> = Vec::new();
    let mut failed: Vec<(usize, anyhow::Error)> = Vec::new();
    let mut warned = false;
    for _ in 0..plan.rounds.max(1) {
        let mut rows = Vec::new();
        for (i, (threads, kind)) in servers.iter().enumerate() {
            if failed.iter().any(|(f, _)| *f == i) {
                continue;
            }
            if matches!(kind, ServerKind::Memcached(_)) && memcached_path().is_none() {
                if !warned {
                    note("memcached is not installed, so it is left out of this run; install it with `apt-get install memcached`".into());
                    warned = true;
                }
                continue;
            }
            match measure_server(plan, kind, *threads, tick) {
                Ok(r) => rows.extend(r),
                Err(e) if keep_going => {
                    crate::interrupt::park_if_interrupted();
                    let label = kind.label();
                    note(format!("{e:#}; {label} is left out of the results"));
                    for round in &mut rounds {
                        round.retain(|r| r.server != label);
                    }
                    failed.push((i, e));
                }
                Err(e) => {
                    return Measured {
                        rows: Vec::new(),
                        failed: vec![e],
                    }
                }
            }
        }
        rounds.push(rows);
    }
    Measured {
        rows: merge_rounds(rounds),
        failed: failed.into_iter().map(|(_, e)| e).collect(),
    }
}

/// Merges rounds of the same points (every round measured the same servers
/// at the same client counts, in the same order): per point the median of
/// each figure over the rounds, `tps_sd` the spread of the rounds' means
/// (with one round: as measured), and `vs_symped` the median of per-round
/// ratios to the first `duality symped` row at the same client count. The
/// host's drift between rounds moves a row and its yardstick together, so
/// the ratio keeps what the medians lose.
pub fn merge_rounds(rounds: Vec<Vec<KvRow>>) -> Vec<KvRow> {
    let n = rounds.len();
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    let ratio_to = |model: &'static str| {
        move |round: &[KvRow], r: &KvRow| {
            round
                .iter()
                .find(|b| {
                    let m = b.server.strip_prefix("duality ").unwrap_or("");
                    m.split([':', '/', '@', '+']).next() == Some(model) && b.clients == r.clients
                })
                .map(|b| r.tps_mean / b.tps_mean.max(1e-9))
        }
    };
    let (symped, sped) = (ratio_to("symped"), ratio_to("sped"));
    // A CPU reading of 0 ticks (under a clock tick: too short a window)
    // is no measurement: no ratio (it was 49,751,243,781 over 1e-9).
    let cpu_ratio = |round: &[KvRow], r: &KvRow| {
        round
            .iter()
            .find(|b| b.server == "memcached -t 1" && b.clients == r.clients)
            .filter(|b| b.cpu_us_per_txn > 0.0 && r.cpu_us_per_txn > 0.0)
            .map(|b| r.cpu_us_per_txn / b.cpu_us_per_txn)
    };
    let median_of = |f: &dyn Fn(&[KvRow], &KvRow) -> Option<f64>, i: usize| {
        let v: Vec<f64> = rounds
            .iter()
            .filter_map(|round| f(round, &round[i]))
            .collect();
        (!v.is_empty()).then(|| median(&v))
    };
    let med = |f: &dyn Fn(&KvRow) -> f64, i: usize| {
        median(&rounds.iter().map(|round| f(&round[i])).collect::<Vec<_>>())
    };
    (0..first.len())
        .map(|i| {
            let mut row = first[i].clone();
            debug_assert!(rounds
                .iter()
                .all(|r| r[i].server == row.server && r[i].clients == row.clients));
            row.vs_symped = median_of(&symped, i);
            row.vs_sped = median_of(&sped, i);
            row.cpu_vs_memcached = median_of(&cpu_ratio, i);
            row.rounds = n;
            if n > 1 {
                let means: Vec<f64> = rounds.iter().map(|r| r[i].tps_mean).collect();
                row.tps_mean = median(&means);
                row.tps_sd = mean_sd(&means).1;
                row.p50_us = med(&|r| r.p50_us as f64, i) as u64;
                row.p99_us = med(&|r| r.p99_us as f64, i) as u64;
                row.p999_us = med(&|r| r.p999_us as f64, i) as u64;
                row.cpu_us_per_txn = med(&|r| r.cpu_us_per_txn, i);
                row.ctx_switches_per_txn = med(&|r| r.ctx_switches_per_txn, i);
                row.syscalls_per_txn = row
                    .syscalls_per_txn
                    .map(|_| med(&|r| r.syscalls_per_txn.unwrap_or(0.0), i));
                row.client_cores = med(&|r| r.client_cores, i);
                // Per round, against that round's own client threads: the
                // majority of rounds decides.
                row.client_saturated =
                    rounds.iter().filter(|r| r[i].client_saturated).count() * 2 > n;
            }
            row
        })
        .collect()
}

/// The Markdown table: each row's throughput also as a ratio to a memcached
/// peer at the same client count — the one with the same thread count in the
/// threads experiment, otherwise the one with the most threads.
pub fn table(rows: &[KvRow]) -> String {
    let by_threads = rows.iter().any(|r| r.threads > 0);
    let largest = rows
        .iter()
        .filter(|r| r.server.starts_with("memcached"))
        .map(|r| r.server.clone())
        .max();
    let peer = |r: &KvRow| -> Option<&KvRow> {
        rows.iter().find(|x| {
            x.server.starts_with("memcached")
                && x.clients == r.clients
                && if by_threads {
                    x.threads == r.threads
                } else {
                    Some(&x.server) == largest.as_ref()
                }
        })
    };
    // With rounds, the ratio that survives the host's drift between them.
    let per_round = rows.iter().any(|r| r.rounds > 1 && r.vs_symped.is_some());
    let sped_per_round = rows.iter().any(|r| r.rounds > 1 && r.vs_sped.is_some());
    let cpu_per_round = rows
        .iter()
        .any(|r| r.rounds > 1 && r.cpu_vs_memcached.is_some());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                r.server.clone(),
                r.clients.to_string(),
                format!(
                    "{} ± {}",
                    crate::report::thousands(r.tps_mean),
                    crate::report::thousands(r.tps_sd)
                ),
                peer(r)
                    .map(|b| format!("{:.2}", r.tps_mean / b.tps_mean.max(1e-9)))
                    .unwrap_or_else(|| "-".into()),
            ];
            if per_round {
                cells.push(
                    r.vs_symped
                        .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
                );
            }
            if sped_per_round {
                cells.push(r.vs_sped.map_or_else(|| "-".into(), |v| format!("{v:.2}")));
            }
            cells.extend([
                r.p50_us.to_string(),
                r.p99_us.to_string(),
                // 0: no clock tick in the windows, not "free".
                if r.cpu_us_per_txn > 0.0 {
                    format!("{:.2}", r.cpu_us_per_txn)
                } else {
                    "-".into()
                },
            ]);
            if cpu_per_round {
                cells.push(
                    r.cpu_vs_memcached
                        .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
                );
            }
            cells.extend([
                format!("{:.3}", r.ctx_switches_per_txn),
                r.syscalls_per_txn
                    .map_or_else(|| "-".into(), |s| format!("{s:.3}")),
                format!(
                    "{:.2}{}",
                    r.client_cores,
                    if r.client_saturated {
                        " (saturated)"
                    } else {
                        ""
                    }
                ),
            ]);
            cells
        })
        .collect();
    let vs = match (&largest, by_threads) {
        (_, true) => "vs memcached, same threads".to_string(),
        (Some(b), false) => format!("vs {b}"),
        (None, false) => "vs memcached".into(),
    };
    let mut headers = vec!["server", "clients", "txn/s (mean ± sd)", &vs];
    if per_round {
        headers.push("vs symped (median per round)");
    }
    if sped_per_round {
        headers.push("vs sped (median per round)");
    }
    headers.extend(["p50 µs", "p99 µs", "server CPU µs/txn"]);
    if cpu_per_round {
        headers.push("CPU vs memcached -t 1 (median per round)");
    }
    headers.extend(["ctx switches/txn", "syscalls/txn", "client cores"]);
    crate::report::markdown_table(&headers, &cells)
}

/// CSV of the rows (header + one line each).
pub fn csv(rows: &[KvRow]) -> String {
    let mut s = String::from("server,clients,threads,tps_mean,tps_sd,p50_us,p99_us,p999_us,cpu_us_per_txn,ctx_switches_per_txn,syscalls_per_txn,client_cores,client_saturated,rounds,vs_symped,cpu_vs_memcached,vs_sped\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{:.1},{:.1},{},{},{},{:.3},{:.4},{},{:.3},{},{},{},{},{}\n",
            crate::report::csv_field(&r.server),
            r.clients,
            r.threads,
            r.tps_mean,
            r.tps_sd,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.cpu_us_per_txn,
            r.ctx_switches_per_txn,
            r.syscalls_per_txn
                .map_or_else(String::new, |s| format!("{s:.4}")),
            r.client_cores,
            r.client_saturated,
            r.rounds,
            r.vs_symped.map_or_else(String::new, |v| format!("{v:.4}")),
            r.cpu_vs_memcached
                .map_or_else(String::new, |v| format!("{v:.4}")),
            r.vs_sped.map_or_else(String::new, |v| format!("{v:.4}"))
        ));
    }
    s
}

/// Writes table.md, results.json, results.csv and the plot (`x` picks the
/// plot's x axis: clients or threads) into `dir`.
pub fn write_results(
    dir: &Path,
    rows: &[KvRow],
    title: &str,
    by_threads: bool,
    header: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let md = dir.join("table.md");
    crate::report::write(&md, format!("{header}\n\n{}", table(rows)))?;
    written.push(md);
    let json = dir.join("results.json");
    crate::report::write(&json, crate::report::json(rows))?;
    written.push(json);
    let csvp = dir.join("results.csv");
    crate::report::write(&csvp, csv(rows))?;
    written.push(csvp);
    let mut series: Vec<crate::plot::Series> = Vec::new();
    for r in rows {
        let name = if by_threads {
            r.server.split([' ', ':']).next().unwrap_or("").to_string()
                + if r.server.starts_with("memcached") {
                    " -t N"
                } else {
                    " symped:N"
                }
        } else {
            r.server.clone()
        };
        let x = if by_threads {
            r.threads as f64
        } else {
            r.clients as f64
        };
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push((x, r.tps_mean)),
            None => series.push((name, vec![(x, r.tps_mean)])),
        }
    }
    let x_label = if by_threads {
        "server threads"
    } else {
        "clients"
    };
    match crate::plot::line_chart(
        &dir.join("plot"),
        title,
        x_label,
        "transactions/s",
        &series,
        false,
    ) {
        Ok((png, svg)) => {
            written.push(png);
            written.push(svg);
        }
        Err(e) => duality_rt::say!("no plot: {e}"),
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(server: &str, clients: usize, tps: f64) -> KvRow {
        KvRow {
            server: server.into(),
            clients,
            threads: 0,
            tps_mean: tps,
            tps_sd: 1.0,
            p50_us: 10,
            p99_us: 20,
            p999_us: 30,
            cpu_us_per_txn: 5.0,
            ctx_switches_per_txn: 0.5,
            syscalls_per_txn: None,
            client_cores: 0.95,
            client_saturated: true,
            rounds: 1,
            vs_symped: None,
            vs_sped: None,
            cpu_vs_memcached: None,
        }
    }

    /// Rounds merge into medians; the per-round ratio to symped survives a
    /// round where the whole host was slow.
    #[test]
    fn rounds_merge_into_medians_and_per_round_ratios() {
        let round = |symped: f64, amped: f64, cpu: f64, memcached_cpu: f64| {
            let mut a = row("duality amped:1/adaptive", 8, amped);
            a.cpu_us_per_txn = cpu;
            let mut m = row("memcached -t 1", 8, 90.0);
            m.cpu_us_per_txn = memcached_cpu;
            vec![row("duality symped:2", 8, symped), a, m]
        };
        // Round 2: the host at half speed, both rows alike.
        let rows = merge_rounds(vec![
            round(100.0, 110.0, 3.0, 2.0),
            round(50.0, 56.0, 6.0, 6.0),
            round(104.0, 98.0, 2.0, 2.5),
        ]);
        assert_eq!(rows.len(), 3);
        assert!(rows.iter().all(|r| r.rounds == 3));
        let (s, a) = (&rows[0], &rows[1]);
        assert_eq!(
            (s.tps_mean, a.tps_mean),
            (100.0, 98.0),
            "medians of the means"
        );
        assert_eq!(s.vs_symped, Some(1.0));
        // Per round 1.10, 1.12, 0.94: median 1.10 (the medians' ratio: 0.98).
        assert!((a.vs_symped.unwrap() - 1.10).abs() < 1e-9, "{a:?}");
        assert_eq!(a.cpu_us_per_txn, 3.0);
        // CPU per round 1.5, 1.0, 0.8: median 1.0 (the medians' ratio: 1.2).
        assert!((a.cpu_vs_memcached.unwrap() - 1.0).abs() < 1e-9, "{a:?}");
        assert_eq!(rows[2].cpu_vs_memcached, Some(1.0));
        assert!(a.tps_sd > 20.0, "the rounds' spread: {}", a.tps_sd);
        let t = table(&rows);
        assert!(t.contains("| vs symped (median per round) |"), "{t}");
        assert!(t.contains("| duality amped:1/adaptive | 8 | 98 ± "), "{t}");
        assert!(t.contains(" | 1.10 | "), "{t}");
        assert!(
            t.contains("| CPU vs memcached -t 1 (median per round) |"),
            "{t}"
        );
        assert!(t.contains(" | 3.00 | 1.00 | "), "{t}");
        assert!(csv(&rows).contains(",3,1.1000,1.0000,\n"));
        assert!(!t.contains("vs sped"), "no sped row, no column: {t}");
        // One round: figures as measured, the ratio computed, no column.
        let one = merge_rounds(vec![round(100.0, 110.0, 3.0, 2.0)]);
        assert_eq!(
            (one[1].tps_mean, one[1].tps_sd, one[1].rounds),
            (110.0, 1.0, 1)
        );
        assert!((one[1].vs_symped.unwrap() - 1.1).abs() < 1e-9);
        assert!((one[1].cpu_vs_memcached.unwrap() - 1.5).abs() < 1e-9);
        assert!(!table(&one).contains("vs symped"));
        assert!(!table(&one).contains("CPU vs memcached"));
    }

    /// With a `sped` row, each row's ratio to it too (the hand-off models'
    /// yardstick with requests pipelined), found by model whatever the
    /// policy, backend or balance written after it.
    #[test]
    fn rounds_give_a_ratio_to_sped_where_sped_ran() {
        let round = |sped: f64, seda_s: f64| {
            vec![
                row("duality sped@uring", 8, sped),
                row("duality seda-s:1/adaptive", 8, seda_s),
                row("duality symped:2", 8, 100.0),
            ]
        };
        let rows = merge_rounds(vec![
            round(100.0, 90.0),
            round(50.0, 60.0),
            round(80.0, 100.0),
        ]);
        assert_eq!(rows[0].vs_sped, Some(1.0));
        // Per round 0.90, 1.20, 1.25: median 1.20.
        assert!((rows[1].vs_sped.unwrap() - 1.2).abs() < 1e-9, "{rows:?}");
        assert!((rows[1].vs_symped.unwrap() - 0.9).abs() < 1e-9, "{rows:?}");
        let t = table(&rows);
        assert!(t.contains("| vs sped (median per round) |"), "{t}");
        assert!(t.contains(" | 0.90 | 1.20 | "), "{t}");
        assert!(csv(&rows).contains(",3,0.9000,,1.2000\n"), "{}", csv(&rows));
        assert!(crate::report::json(&rows).contains("\"vs_sped\": 1.2"));
    }

    /// `--seconds 0.005`: memcached's CPU read 0 ticks, and the ratio to
    /// it was 49,751,243,781; now no ratio, and `-` for the reading.
    #[test]
    fn a_cpu_reading_of_no_ticks_gives_no_ratio() {
        let mut m = row("memcached -t 1", 8, 90.0);
        m.cpu_us_per_txn = 0.0;
        let rows = merge_rounds(vec![vec![row("duality symped:2", 8, 100.0), m]]);
        assert_eq!(rows[0].cpu_vs_memcached, None);
        assert_eq!(rows[1].cpu_vs_memcached, None);
        let t = table(&rows);
        assert!(
            t.contains("| memcached -t 1 | 8 | 90 ± 1 | 1.00 | 10 | 20 | - |"),
            "{t}"
        );
        assert!(!crate::report::json(&rows).contains("cpu_vs_memcached"));
    }

    #[test]
    fn table_compares_with_the_largest_memcached() {
        let rows = vec![
            row("duality symped:2", 8, 150.0),
            row("memcached -t 1", 8, 50.0),
            row("memcached -t 2", 8, 100.0),
        ];
        let t = table(&rows);
        assert!(t.contains("vs memcached -t 2"), "{t}");
        assert!(
            t.contains("| duality symped:2 | 8 | 150 ± 1 | 1.50 |"),
            "{t}"
        );
        assert!(t.contains("(saturated)"));
    }

    #[test]
    fn threads_table_compares_at_the_same_thread_count() {
        let mut a = row("duality symped:1", 120, 90.0);
        a.threads = 1;
        let mut b = row("memcached -t 1", 120, 100.0);
        b.threads = 1;
        let mut c = row("memcached -t 2", 120, 300.0);
        c.threads = 2;
        let t = table(&[a, b, c]);
        assert!(
            t.contains("| duality symped:1 | 120 | 90 ± 1 | 0.90 |"),
            "{t}"
        );
    }

    #[test]
    fn csv_has_a_line_per_row() {
        let c = csv(&[row("a", 1, 2.0), row("b", 1, 3.0)]);
        assert_eq!(c.lines().count(), 3);
        assert!(c
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("a,1,0,2.0,1.0,10,20,30,"));
    }

    #[test]
    fn default_servers_cover_every_model_and_peer() {
        let s = model_servers(2);
        assert_eq!(
            s.iter()
                .filter(|k| matches!(k, ServerKind::Duality(_)))
                .count(),
            7
        );
        assert!(s.contains(&ServerKind::Memcached(1)));
        assert!(s.contains(&ServerKind::Memcached(2)));
        assert!(s.contains(&ServerKind::Tokio(2)));
        assert_eq!(thread_servers(3).len(), 6);
    }
}
