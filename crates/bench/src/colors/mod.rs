//! `duality bench colors`: seed 003's Figure 1 — the speed-up of a
//! compute-bound server with per-client colors on 1..N threads, against N
//! independent copies of the single-threaded server (the upper bound).
//!
//! The server is [`service::ColorService`], in the spirit of the SFS file
//! server: each request encrypts and authenticates a block with its
//! client's key (ChaCha20-Poly1305), touching that client's state under the
//! client's color; one request in [`Load::ledger_every`] updates a ledger
//! shared by all clients under the default color. Setups, at each N:
//!
//! | setup | server | what it is |
//! |---|---|---|
//! | `amped` | `amped:N` | one network loop, N payload threads; a client's color always on one thread |
//! | `seda` | `seda:1:N` | one network loop, N payload threads round-robin, color locks |
//! | `seda-s` | `seda-s:N` | N network loops, each with its own payload thread, color locks |
//! | `symped` | `symped:N` | N loops doing everything inline, color locks |
//! | `n-copy` | N × `sped` | N independent single-threaded servers, each with its share of the clients: the bound (the paper's "N-copy") |
//! | `tokio` | tokio, N workers | [`service::LockedService`]: no colors, one mutex, a lock per operation (the conventional peer) |
//!
//! N counts the threads that do the payload work: payload threads, loops,
//! copies or workers. The hand-off models add a network loop (`seda-s` N
//! of them) and every duality model an acceptor thread, so where cores are
//! free a hand-off model at N = 1 may beat one single-threaded copy.
//!
//! Every server runs as its own process(es) (`duality internal
//! colors-server` / `colors-tokio`), fresh for each measurement, so its CPU
//! time is read alone from `/proc`. The load generator runs in this
//! process: closed loop, one request in flight per connection, over Unix
//! sockets; each client has [`Load::conns_per_client`] connections (so two
//! requests of one client can arrive at once: the colors, not the
//! connections, keep its state consistent); in the `n-copy` setup client
//! `c` talks to copy `c mod N`. It checks a sample of tags (one in
//! [`Load::verify_every`] per connection) and, after each measurement,
//! audits every server ([`audit`]): the nonces a client was sent are
//! exactly `1..=counter` (none reused, none lost), its ledger entry equals
//! its counter, the entries add up to the ledger's total, and no color
//! violation was seen. A failed audit fails the run.
//!
//! Rounds interleave the setups at each N (a point is the median over
//! rounds), and every ratio is the median of per-round ratios: two servers
//! measured seconds apart see the same machine. With `r` the blocks sealed
//! per second:
//!
//! - speed-up = r(setup, N) / r(setup, 1);
//! - speed-up vs one copy = r(setup, N) / r(n-copy, 1), the paper's
//!   normalisation (Fig. 1 is relative to the original uniprocessor server);
//! - of bound = r(setup, N) / r(n-copy, N): the fraction of what N
//!   independent copies do at the same N (goal: ≥ 0.95).
//!
//! On a small machine the load generator shares the cores with the server:
//! the N-copy bound is measured in the same run under the same load
//! generator, so the ratio is fair, and a block large enough that the cipher
//! dominates keeps the client's share small.

pub mod service;
pub mod tokio_peer;

use crate::models_echo::ServerProcess;
use serde::{Deserialize, Serialize};
use service::{Request, RESPONSE, SEED};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The setups, in the order of the table.
pub const SETUPS: [&str; 6] = ["amped", "seda", "seda-s", "symped", "n-copy", "tokio"];

/// The setup that is the bound.
pub const BOUND: &str = "n-copy";

/// The fraction of the bound the colored setups aim for.
pub const GOAL: f64 = 0.95;

/// What one setup runs at `n` threads, as the table names it.
pub fn server_name(setup: &str, n: usize) -> anyhow::Result<String> {
    Ok(match setup {
        "amped" => format!("amped:{n}"),
        "seda" => format!("seda:1:{n}"),
        "seda-s" => format!("seda-s:{n}"),
        "symped" => format!("symped:{n}"),
        "n-copy" => format!("{n} × sped"),
        "tokio" => format!("tokio, {n} worker{}", if n == 1 { "" } else { "s" }),
        other => anyhow::bail!("unknown setup {other:?}; choose from {SETUPS:?}"),
    })
}

/// The default thread counts: powers of two up to `cores`, and `cores`.
pub fn default_threads(cores: usize) -> Vec<usize> {
    let cores = cores.max(1);
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n <= cores)
        .collect();
    if v.last() != Some(&cores) {
        v.push(cores);
    }
    v
}

/// The load one measurement puts on the server(s).
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Clients (each with its own key, counter and color).
    pub clients: usize,
    /// Connections per client.
    pub conns_per_client: usize,
    /// Bytes per block sealed.
    pub block: u32,
    /// Every this many requests of a connection is a LEDGER update under
    /// the default color (0: none).
    pub ledger_every: u64,
    /// Every this many seals of a connection, the first included, the
    /// client recomputes the tag and compares.
    pub verify_every: u64,
    /// Event-loop threads of the load generator.
    pub client_loops: usize,
    /// Load before the window.
    pub warmup: Duration,
    /// The window counted.
    pub measure: Duration,
}

/// What one measurement saw.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    /// Seals answered inside the window.
    pub seals: u64,
    /// The window's real length.
    pub took: Duration,
    /// Seals of the whole run that the audit accounted for.
    pub audited: u64,
}

/// What the connections share.
struct Ctl {
    stop: AtomicBool,
    seals: AtomicU64,
}

/// Closed-loop load on `sockets` (client `c` on `sockets[c % len]`) for
/// `warmup + measure`, `mark` called at the window's start and end; then
/// every server is audited ([`audit`]).
pub fn run_load(
    sockets: &[PathBuf],
    load: &Load,
    mark: &mut dyn FnMut(),
) -> anyhow::Result<Measured> {
    anyhow::ensure!(!sockets.is_empty(), "no server to load");
    anyhow::ensure!(
        load.clients >= 1 && load.conns_per_client >= 1 && load.block >= 1,
        "at least one client, one connection each, and a block of at least one byte"
    );
    let ctl = Arc::new(Ctl {
        stop: AtomicBool::new(false),
        seals: AtomicU64::new(0),
    });
    let file: Arc<[u8]> = service::file(SEED).into();
    let loops = load
        .client_loops
        .clamp(1, load.clients * load.conns_per_client);
    let mut plan: Vec<Vec<(u32, PathBuf)>> = vec![Vec::new(); loops];
    let mut k = 0;
    for c in 0..load.clients {
        for _ in 0..load.conns_per_client {
            plan[k % loops].push((c as u32, sockets[c % sockets.len()].clone()));
            k += 1;
        }
    }
    let threads: Vec<_> = plan
        .into_iter()
        .enumerate()
        .map(|(i, conns)| {
            let (ctl, file, load) = (ctl.clone(), file.clone(), *load);
            std::thread::Builder::new()
                .name(format!("colors-client-{i}"))
                .spawn(move || client_loop(conns, load, ctl, file))
        })
        .collect::<Result<_, _>>()?;
    std::thread::sleep(load.warmup);
    mark();
    let s0 = ctl.seals.load(Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(load.measure);
    let seals = ctl.seals.load(Relaxed) - s0;
    let took = t0.elapsed();
    mark();
    ctl.stop.store(true, Relaxed);
    let mut seen = vec![Vec::new(); load.clients];
    let mut failures = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(conns)) => {
                for (c, nonces) in conns {
                    seen[c as usize].extend(nonces);
                }
            }
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("a client thread panicked".into()),
        }
    }
    anyhow::ensure!(
        failures.is_empty(),
        "the load failed: {}",
        failures.join("; ")
    );
    let audited = audit(sockets, seen)?;
    Ok(Measured {
        seals,
        took,
        audited,
    })
}

/// One load-generator thread: its connections on one duality loop; returns
/// each connection's client and the nonce counters it was sent.
fn client_loop(
    conns: Vec<(u32, PathBuf)>,
    load: Load,
    ctl: Arc<Ctl>,
    file: Arc<[u8]>,
) -> Result<Vec<(u32, Vec<u64>)>, String> {
    let mut lp = duality_rt::EventLoop::new(duality_rt::LoopConfig {
        // A loop of a load generator sharing two busy cores is descheduled
        // for milliseconds at a time: that is no task's fault.
        long_poll_threshold: None,
        ..Default::default()
    })
    .map_err(|e| format!("cannot start a client loop: {e}"))?;
    lp.block_on(async move {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|(c, socket)| {
                let (ctl, file) = (ctl.clone(), file.clone());
                duality_rt::spawn(async move {
                    let r = connection(c, &socket, load, &ctl, &file).await;
                    if r.is_err() {
                        // One broken connection ends the measurement.
                        ctl.stop.store(true, Relaxed);
                    }
                    r.map(|nonces| (c, nonces))
                })
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(
                h.await
                    .map_err(|e| format!("a client task failed: {e}"))??,
            );
        }
        Ok(out)
    })
}

/// One closed-loop connection of `client`: seals (and every
/// `ledger_every`-th request a ledger update) until stopped, then reports
/// the seals not yet in the ledger. Returns the nonce counters received.
async fn connection(
    client: u32,
    socket: &Path,
    load: Load,
    ctl: &Ctl,
    file: &[u8],
) -> Result<Vec<u64>, String> {
    let s = duality_rt::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("client {client}: connect {}: {e}", socket.display()))?;
    let mut nonces = Vec::new();
    let mut unreported = 0u64;
    let mut resp = [0u8; RESPONSE];
    let io = |e: std::io::Error| format!("client {client}: {e}");
    let mut i = 0u64;
    loop {
        let stop = ctl.stop.load(Relaxed);
        i += 1;
        let ledger = stop || (load.ledger_every > 0 && i.is_multiple_of(load.ledger_every));
        if stop && unreported == 0 {
            return Ok(nonces);
        }
        let req = if ledger {
            Request::Ledger {
                client,
                seals: unreported,
            }
        } else {
            Request::Seal {
                client,
                index: i as u32,
                len: load.block,
            }
        };
        s.write_all(&req.encode()).await.map_err(io)?;
        s.read_exact(&mut resp).await.map_err(io)?;
        if ledger {
            unreported = 0;
            if stop {
                return Ok(nonces);
            }
            continue;
        }
        let counter = service::response_words(&resp)[2];
        nonces.push(counter);
        unreported += 1;
        ctl.seals.fetch_add(1, Relaxed);
        if (nonces.len() as u64 - 1).is_multiple_of(load.verify_every.max(1)) {
            let want = service::expected_tag(SEED, file, client, counter, i as u32, load.block);
            if resp[..16] != want {
                return Err(format!(
                    "client {client}: wrong tag for nonce {counter} of block {i}"
                ));
            }
        }
    }
}

/// Audits each server after a run: `seen[c]` holds every nonce counter
/// client `c` was sent (client `c` used `sockets[c % len]`). Returns the
/// seals accounted for; an error names the first broken invariant.
pub fn audit(sockets: &[PathBuf], mut seen: Vec<Vec<u64>>) -> anyhow::Result<u64> {
    let mut audited = 0;
    for (i, socket) in sockets.iter().enumerate() {
        let mut s = std::os::unix::net::UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mine: Vec<u32> = (0..seen.len() as u32)
            .filter(|&c| c as usize % sockets.len() == i)
            .collect();
        let mut sum = 0u64;
        let mut total = None;
        for &c in &mine {
            let mut req = Request::Audit { client: c }.encode().to_vec();
            req.extend_from_slice(
                &Request::Ledger {
                    client: c,
                    seals: 0,
                }
                .encode(),
            );
            s.write_all(&req)?;
            let mut resp = [0u8; 2 * RESPONSE];
            s.read_exact(&mut resp)?;
            let [counter, violations, _] = service::response_words(&resp[..RESPONSE]);
            let [entry, t, _] = service::response_words(&resp[RESPONSE..]);
            anyhow::ensure!(
                violations == 0,
                "{}: {violations} color violations",
                socket.display()
            );
            let nonces = &mut seen[c as usize];
            nonces.sort_unstable();
            anyhow::ensure!(
                nonces.len() as u64 == counter && nonces.iter().zip(1..).all(|(&n, k)| n == k),
                "client {c}: the server sealed {counter} blocks but sent {} nonces that are not 1..={counter}: a nonce reused or lost",
                nonces.len()
            );
            anyhow::ensure!(
                entry == counter,
                "client {c}: the shared ledger says {entry} seals, the client's own state {counter}"
            );
            sum += entry;
            total = Some(t);
        }
        if let Some(t) = total {
            anyhow::ensure!(
                sum == t,
                "{}: the ledger's entries add up to {sum}, its total says {t}",
                socket.display()
            );
        }
        audited += sum;
    }
    Ok(audited)
}

/// One measurement of one setup at one N in one round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Blocks sealed per second.
    pub blocks_per_sec: f64,
    /// Server CPU time (all its processes) per block, µs.
    pub cpu_us_per_block: f64,
}

/// The `--cpu-affinity` of a server whose first thread goes to the
/// `first`-th of `cpus`: the list turned round by `first` (`off` without
/// one).
fn affinity_arg(cpus: Option<&[usize]>, first: usize) -> String {
    match cpus {
        Some(c) if !c.is_empty() => {
            let k = first % c.len();
            let turned: Vec<String> = c[k..]
                .iter()
                .chain(&c[..k])
                .map(|c| c.to_string())
                .collect();
            turned.join(",")
        }
        _ => "off".into(),
    }
}

/// Starts `setup` at `n` threads: the server process(es) and their sockets.
/// With `cpus`, every setup is placed the same way: thread i of a server
/// (network loop i and payload thread i; tokio's worker i) on `cpus[i]`,
/// and copy i of `n-copy` on `cpus[i]`.
fn start(
    exe: &Path,
    setup: &str,
    n: usize,
    clients: usize,
    tag: usize,
    cpus: Option<&[usize]>,
) -> anyhow::Result<Vec<ServerProcess>> {
    let socket = |i: usize| {
        std::env::temp_dir().join(format!(
            "duality-colors-{}-{tag}-{i}.sock",
            std::process::id()
        ))
    };
    let colored = |model: String, path: PathBuf, first: usize| {
        let args = [
            "internal",
            "colors-server",
            "--model",
            &model,
            "--clients",
            &clients.to_string(),
            "--cpu-affinity",
            &affinity_arg(cpus, first),
            "--unix",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([path.display().to_string()])
        .collect::<Vec<_>>();
        ServerProcess::start(exe, &args, path)
    };
    Ok(match setup {
        "n-copy" => (0..n)
            .map(|i| colored("sped".into(), socket(i), i))
            .collect::<Result<_, _>>()?,
        "tokio" => {
            let args: Vec<String> = [
                "internal",
                "colors-tokio",
                "--threads",
                &n.to_string(),
                "--clients",
                &clients.to_string(),
                "--cpu-affinity",
                &affinity_arg(cpus, 0),
                "--unix",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([socket(0).display().to_string()])
            .collect();
            vec![ServerProcess::start(exe, &args, socket(0))?]
        }
        _ => {
            let model = server_name(setup, n)?;
            vec![colored(model, socket(0), 0)?]
        }
    })
}

/// Measures `setup` at `n` threads once, in fresh server processes.
pub fn measure(
    exe: &Path,
    setup: &str,
    n: usize,
    load: &Load,
    tag: usize,
    cpus: Option<&[usize]>,
) -> anyhow::Result<Sample> {
    let servers = start(exe, setup, n, load.clients, tag, cpus)?;
    let sockets: Vec<PathBuf> = servers.iter().map(|s| s.socket.clone()).collect();
    let cpu = || -> Duration {
        servers
            .iter()
            .filter_map(|s| crate::proc::cpu_time_of(s.pid()).ok())
            .sum()
    };
    let mut marks = Vec::new();
    let m = run_load(&sockets, load, &mut || marks.push(cpu()))?;
    let used = match marks[..] {
        [a, b] => b.saturating_sub(a),
        _ => Duration::ZERO,
    };
    Ok(Sample {
        blocks_per_sec: m.seals as f64 / m.took.as_secs_f64(),
        cpu_us_per_block: if m.seals > 0 {
            used.as_secs_f64() * 1e6 / m.seals as f64
        } else {
            0.0
        },
    })
}

/// One run's settings.
pub struct Plan<'a> {
    /// The `duality` executable.
    pub exe: &'a Path,
    /// Setups, from [`SETUPS`].
    pub setups: Vec<String>,
    /// Thread counts N.
    pub threads: Vec<usize>,
    /// The load of every measurement.
    pub load: Load,
    /// Rounds.
    pub rounds: usize,
    /// Pin every setup's threads to these CPUs (see `start`); `None`:
    /// the kernel places them.
    pub cpus: Option<Vec<usize>>,
}

/// Runs the experiment: in each round, at each N, every setup in turn;
/// `progress(round, setup, n)` after each measurement.
pub fn run(
    plan: &Plan,
    progress: &mut dyn FnMut(usize, &str, usize),
) -> anyhow::Result<Vec<ColorsRow>> {
    anyhow::ensure!(plan.rounds >= 1, "at least one round");
    for s in &plan.setups {
        server_name(s, 1)?;
    }
    // samples[setup][thread index][round]
    let mut samples =
        vec![vec![Vec::with_capacity(plan.rounds); plan.threads.len()]; plan.setups.len()];
    let mut tag = 0;
    for round in 0..plan.rounds {
        for (t, &n) in plan.threads.iter().enumerate() {
            for (s, setup) in plan.setups.iter().enumerate() {
                let got = measure(plan.exe, setup, n, &plan.load, tag, plan.cpus.as_deref())
                    .map_err(|e| anyhow::anyhow!("{setup} at {n} threads: {e}"))?;
                tag += 1;
                samples[s][t].push(got);
                progress(round, setup, n);
            }
        }
    }
    let mut rows = summarize(&plan.setups, &plan.threads, &samples)?;
    for r in &mut rows {
        r.block_bytes = plan.load.block;
        r.connections = plan.load.clients * plan.load.conns_per_client;
    }
    Ok(with_mib(rows))
}

/// One setup at one N.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ColorsRow {
    /// The setup ([`SETUPS`]).
    pub setup: String,
    /// What ran (`amped:2`, `2 × sped`, …).
    pub server: String,
    /// N: payload threads, loops, copies or workers.
    pub threads: usize,
    /// Blocks sealed per second (median over rounds).
    pub blocks_per_sec: f64,
    /// Lowest over rounds.
    pub blocks_per_sec_min: f64,
    /// Highest over rounds.
    pub blocks_per_sec_max: f64,
    /// MiB sealed per second (median).
    pub mib_per_sec: f64,
    /// Server CPU time per block, µs (median).
    pub server_cpu_us_per_block: f64,
    /// Rounds measured.
    pub rounds: usize,
    /// Speed-up over the same setup at one thread (absent without N = 1).
    pub speedup: Option<f64>,
    /// Speed-up over one single-threaded copy (the paper's normalisation).
    pub speedup_vs_one_copy: Option<f64>,
    /// The N-copy bound's own speed-up at this N.
    pub bound_speedup: Option<f64>,
    /// Blocks/s as a fraction of N independent copies' at this N.
    pub of_bound: Option<f64>,
    /// Bytes per block.
    pub block_bytes: u32,
    /// Client connections.
    pub connections: usize,
}

/// Median over rounds of `num[r] / den[r]`; `None` if no round has both
/// or a denominator is not positive.
pub fn median_ratio(num: &[f64], den: &[f64]) -> Option<f64> {
    let r: Vec<f64> = num
        .iter()
        .zip(den)
        .map(|(a, b)| (*b > 0.0).then(|| a / b))
        .collect::<Option<_>>()?;
    (!r.is_empty()).then(|| crate::summary::median(&r))
}

/// Rows from `samples[setup][thread index][round]`: medians, and the
/// ratios of the module doc, each a median of per-round ratios.
pub fn summarize(
    setups: &[String],
    threads: &[usize],
    samples: &[Vec<Vec<Sample>>],
) -> anyhow::Result<Vec<ColorsRow>> {
    let rate = |s: usize, t: usize| -> Vec<f64> {
        samples[s][t].iter().map(|x| x.blocks_per_sec).collect()
    };
    let one = threads.iter().position(|&n| n == 1);
    let bound = setups.iter().position(|s| s == BOUND);
    let mut rows = Vec::new();
    for (s, setup) in setups.iter().enumerate() {
        for (t, &n) in threads.iter().enumerate() {
            let r = rate(s, t);
            let median = crate::summary::median(&r);
            rows.push(ColorsRow {
                setup: setup.clone(),
                server: server_name(setup, n)?,
                threads: n,
                blocks_per_sec: median,
                blocks_per_sec_min: r.iter().copied().fold(f64::INFINITY, f64::min),
                blocks_per_sec_max: r.iter().copied().fold(0.0, f64::max),
                mib_per_sec: 0.0,
                server_cpu_us_per_block: crate::summary::median(
                    &samples[s][t]
                        .iter()
                        .map(|x| x.cpu_us_per_block)
                        .collect::<Vec<_>>(),
                ),
                rounds: r.len(),
                speedup: one.and_then(|o| median_ratio(&r, &rate(s, o))),
                speedup_vs_one_copy: one
                    .zip(bound)
                    .and_then(|(o, b)| median_ratio(&r, &rate(b, o))),
                bound_speedup: one
                    .zip(bound)
                    .and_then(|(o, b)| median_ratio(&rate(b, t), &rate(b, o))),
                of_bound: bound.and_then(|b| median_ratio(&r, &rate(b, t))),
                block_bytes: 0,
                connections: 0,
            });
        }
    }
    Ok(rows)
}

/// Fills in MiB/s from blocks/s and the block size.
pub fn with_mib(mut rows: Vec<ColorsRow>) -> Vec<ColorsRow> {
    for r in &mut rows {
        r.mib_per_sec = r.blocks_per_sec * f64::from(r.block_bytes) / (1u64 << 20) as f64;
    }
    rows
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// The Markdown table.
pub fn table(rows: &[ColorsRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.setup.clone(),
                r.server.clone(),
                r.threads.to_string(),
                crate::report::thousands(r.blocks_per_sec),
                format!(
                    "{} - {}",
                    crate::report::thousands(r.blocks_per_sec_min),
                    crate::report::thousands(r.blocks_per_sec_max)
                ),
                format!("{:.0}", r.mib_per_sec),
                format!("{:.1}", r.server_cpu_us_per_block),
                ratio(r.speedup),
                ratio(r.speedup_vs_one_copy),
                ratio(r.bound_speedup),
                ratio(r.of_bound),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "setup",
            "server",
            "N",
            "blocks/s (median)",
            "range over rounds",
            "MiB/s",
            "server CPU µs/block",
            "speed-up (vs own N=1)",
            "speed-up (vs 1 copy)",
            "N-copy speed-up",
            "of N-copy bound",
        ],
        &cells,
    )
}

/// The goal, per colored setup: its lowest fraction of the bound over
/// N ≥ 2, and whether that is at least [`GOAL`].
pub fn goals(rows: &[ColorsRow]) -> String {
    goal_checks(rows)
        .into_iter()
        .map(|(setup, f, n)| {
            format!(
                "- {setup}: lowest {f:.2} of the bound (N = {n}): {}\n",
                if f >= GOAL { "met" } else { "not met" }
            )
        })
        .collect()
}

/// Per colored setup, in first-seen order: its lowest fraction of the
/// bound over N ≥ 2 and the N it was at (setups without such a row are
/// left out).
pub fn goal_checks(rows: &[ColorsRow]) -> Vec<(String, f64, usize)> {
    let mut setups: Vec<&str> = Vec::new();
    for r in rows {
        if r.setup != BOUND && !setups.contains(&r.setup.as_str()) {
            setups.push(&r.setup);
        }
    }
    setups
        .into_iter()
        .filter_map(|setup| {
            rows.iter()
                .filter(|r| r.setup == setup && r.threads >= 2)
                .filter_map(|r| r.of_bound.map(|f| (setup.to_string(), f, r.threads)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
        })
        .collect()
}

/// The rows as CSV.
pub fn csv(rows: &[ColorsRow]) -> String {
    let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
    let mut s = String::from(
        "setup,server,threads,blocks_per_sec,blocks_per_sec_min,blocks_per_sec_max,mib_per_sec,server_cpu_us_per_block,rounds,speedup,speedup_vs_one_copy,bound_speedup,of_bound,block_bytes,connections\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{:.1},{:.1},{:.1},{:.2},{:.3},{},{},{},{},{},{},{}\n",
            crate::report::csv_field(&r.setup),
            crate::report::csv_field(&r.server),
            r.threads,
            r.blocks_per_sec,
            r.blocks_per_sec_min,
            r.blocks_per_sec_max,
            r.mib_per_sec,
            r.server_cpu_us_per_block,
            r.rounds,
            opt(r.speedup),
            opt(r.speedup_vs_one_copy),
            opt(r.bound_speedup),
            opt(r.of_bound),
            r.block_bytes,
            r.connections,
        ));
    }
    s
}

/// The figure's lines: each setup's speed-up over one copy against N, the
/// N-copy bound, and the ideal (y = N). Without an `n-copy` setup, each
/// setup's speed-up over itself at one thread.
pub fn series(rows: &[ColorsRow]) -> Vec<crate::plot::Series> {
    let has_bound = rows.iter().any(|r| r.setup == BOUND);
    let mut out: Vec<crate::plot::Series> = Vec::new();
    for r in rows.iter().filter(|r| r.setup != BOUND) {
        let y = if has_bound {
            r.speedup_vs_one_copy
        } else {
            r.speedup
        };
        let Some(y) = y else { continue };
        match out.iter_mut().find(|(name, _)| *name == r.setup) {
            Some((_, pts)) => pts.push((r.threads as f64, y)),
            None => out.push((r.setup.clone(), vec![(r.threads as f64, y)])),
        }
    }
    let bound: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.setup == BOUND)
        .filter_map(|r| Some((r.threads as f64, r.bound_speedup?)))
        .collect();
    if !bound.is_empty() {
        out.push(("N-copy (bound)".into(), bound));
    }
    let mut ns: Vec<usize> = rows.iter().map(|r| r.threads).collect();
    ns.sort_unstable();
    ns.dedup();
    out.push((
        "ideal".into(),
        ns.iter().map(|&n| (n as f64, n as f64)).collect(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use duality_models::{Driver, DriverConfig, Model, Server, ServerBuilder};

    /// The colored service under `model`, in this process, on a fresh socket.
    fn serve(model: &str, tag: &str) -> (Server, Arc<Driver<service::ColorService>>, PathBuf) {
        let path = std::env::temp_dir().join(format!(
            "duality-colors-unit-{}-{tag}.sock",
            std::process::id()
        ));
        let driver = Driver::new(
            service::ColorService::new(64, SEED),
            DriverConfig::default(),
        );
        let d = driver.clone();
        let server = ServerBuilder::new()
            .model(model.parse::<Model>().unwrap())
            .unix(&path)
            .serve(move |c, pay| duality_models::drive(c, pay, d.clone()))
            .unwrap();
        (server, driver, path)
    }

    fn small_load() -> Load {
        Load {
            clients: 6,
            conns_per_client: 2,
            block: 256,
            ledger_every: 5,
            verify_every: 3,
            client_loops: 2,
            warmup: Duration::from_millis(20),
            measure: Duration::from_millis(150),
        }
    }

    #[test]
    fn every_model_keeps_the_books_with_per_client_colors() {
        for model in ["sped", "amped:2", "seda:1:2", "seda-s:2", "symped:2"] {
            let (server, proto, path) = serve(model, &model.replace(':', "-"));
            let mut marks = 0;
            let m = run_load(std::slice::from_ref(&path), &small_load(), &mut || {
                marks += 1
            })
            .unwrap_or_else(|e| panic!("{model}: {e}"));
            assert_eq!(marks, 2);
            assert!(m.seals > 0, "{model}: nothing sealed in the window");
            assert!(m.audited >= m.seals, "{model}: {m:?}");
            assert_eq!(proto.protocol().violations(), 0, "{model}");
            server.shutdown(Duration::from_secs(5));
        }
    }

    #[test]
    fn the_audit_catches_a_reused_nonce_and_an_unbalanced_ledger() {
        let (server, _, path) = serve("sped", "audit");
        let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let mut call = |r: Request| {
            s.write_all(&r.encode()).unwrap();
            let mut resp = [0u8; RESPONSE];
            s.read_exact(&mut resp).unwrap();
            service::response_words(&resp)
        };
        let seal = Request::Seal {
            client: 1,
            index: 0,
            len: 64,
        };
        assert_eq!(call(seal)[2], 1);
        assert_eq!(call(seal)[2], 2);
        let sockets = [path.clone()];
        // Seen by client 1: nonces 1 and 2; client 0 sealed nothing.
        let seen = |n: Vec<u64>| vec![Vec::new(), n];
        let e = audit(&sockets, seen(vec![1, 2])).unwrap_err().to_string();
        assert!(e.contains("shared ledger says 0"), "{e}");
        call(Request::Ledger {
            client: 1,
            seals: 2,
        });
        assert_eq!(audit(&sockets, seen(vec![2, 1])).unwrap(), 2);
        let e = audit(&sockets, seen(vec![1, 1])).unwrap_err().to_string();
        assert!(e.contains("reused or lost"), "{e}");
        let e = audit(&sockets, seen(vec![1])).unwrap_err().to_string();
        assert!(e.contains("reused or lost"), "{e}");
        server.shutdown(Duration::from_secs(5));
    }

    fn s(rps: f64) -> Sample {
        Sample {
            blocks_per_sec: rps,
            cpu_us_per_block: 1e6 / rps,
        }
    }

    #[test]
    fn default_threads_are_powers_of_two_and_the_cores() {
        assert_eq!(default_threads(1), [1]);
        assert_eq!(default_threads(2), [1, 2]);
        assert_eq!(default_threads(6), [1, 2, 4, 6]);
        assert_eq!(default_threads(16), [1, 2, 4, 8, 16]);
        assert_eq!(default_threads(0), [1]);
    }

    #[test]
    fn median_of_per_round_ratios() {
        assert_eq!(median_ratio(&[2.0, 9.0, 4.0], &[1.0, 3.0, 1.0]), Some(3.0));
        assert_eq!(median_ratio(&[1.0], &[0.0]), None, "no zero denominator");
        assert_eq!(median_ratio(&[], &[]), None);
    }

    #[test]
    fn speedups_and_fraction_of_the_bound() {
        let setups = vec!["symped".to_string(), "n-copy".to_string()];
        // Two rounds; round 2 ran on a slower machine for everybody.
        let samples = vec![
            vec![vec![s(95.0), s(47.5)], vec![s(180.0), s(72.0)]],
            vec![vec![s(100.0), s(50.0)], vec![s(190.0), s(90.0)]],
        ];
        let rows = with_mib(summarize(&setups, &[1, 2], &samples).unwrap());
        assert_eq!(rows.len(), 4);
        let sym2 = &rows[1];
        assert_eq!((sym2.setup.as_str(), sym2.threads), ("symped", 2));
        assert_eq!(sym2.server, "symped:2");
        // Per round: 180/95 = 1.895, 72/47.5 = 1.516: median (even) 1.705.
        assert!((sym2.speedup.unwrap() - (180.0 / 95.0 + 72.0 / 47.5) / 2.0).abs() < 1e-9);
        // Against one copy: 180/100, 72/50.
        assert!((sym2.speedup_vs_one_copy.unwrap() - (1.8 + 1.44) / 2.0).abs() < 1e-9);
        // The bound's own speed-up: 190/100, 90/50.
        assert!((sym2.bound_speedup.unwrap() - 1.85).abs() < 1e-9);
        // Of the bound: 180/190, 72/90.
        assert!((sym2.of_bound.unwrap() - (180.0 / 190.0 + 0.8) / 2.0).abs() < 1e-9);
        assert_eq!(sym2.blocks_per_sec, 126.0, "the median of 180 and 72");
        assert_eq!(
            (sym2.blocks_per_sec_min, sym2.blocks_per_sec_max),
            (72.0, 180.0)
        );
        // The bound against itself.
        let copy1 = &rows[2];
        assert_eq!(copy1.server, "1 × sped");
        assert_eq!((copy1.speedup, copy1.of_bound), (Some(1.0), Some(1.0)));
        let copy2 = &rows[3];
        assert_eq!(copy2.of_bound, Some(1.0));
        assert_eq!(copy2.bound_speedup, copy2.speedup);
        // At one thread, symped is 0.95 of the single-threaded server.
        assert!((rows[0].of_bound.unwrap() - 0.95).abs() < 1e-9);
    }

    #[test]
    fn without_the_bound_or_one_thread_ratios_are_absent() {
        let rows = summarize(
            &["amped".to_string()],
            &[2, 4],
            &[vec![vec![s(10.0)], vec![s(20.0)]]],
        )
        .unwrap();
        assert!(rows
            .iter()
            .all(|r| r.speedup.is_none() && r.of_bound.is_none()));
        assert!(table(&rows).contains("| amped | amped:4 | 4 | 20 | 20 - 20 |"));
        assert!(summarize(&["nope".to_string()], &[1], &[vec![vec![s(1.0)]]]).is_err());
    }

    #[test]
    fn table_csv_goals_and_plot_lines() {
        let setups = vec!["amped".to_string(), "n-copy".to_string()];
        let samples = vec![
            vec![vec![s(100.0)], vec![s(190.0)]],
            vec![vec![s(100.0)], vec![s(195.0)]],
        ];
        let mut rows = summarize(&setups, &[1, 2], &samples).unwrap();
        for r in &mut rows {
            r.block_bytes = 1 << 19;
            r.connections = 64;
        }
        let rows = with_mib(rows);
        assert_eq!(rows[1].mib_per_sec, 95.0);
        let t = table(&rows);
        assert!(
            t.contains("| amped | amped:2 | 2 | 190 | 190 - 190 | 95 | 5263.2 | 1.90 | 1.90 | 1.95 | 0.97 |"),
            "{t}"
        );
        assert!(t.contains("| n-copy | 2 × sped | 2 | 195 |"), "{t}");
        assert_eq!(csv(&rows).lines().count(), rows.len() + 1);
        assert!(csv(&rows).contains("\namped,amped:2,2,190.0,"));
        // A server name with a comma stays one field.
        let mut tokio = rows.clone();
        for r in &mut tokio {
            r.server = server_name("tokio", r.threads).unwrap();
        }
        let text = csv(&tokio);
        let header = text.lines().next().unwrap().split(',').count();
        for line in text.lines().skip(1) {
            assert!(line.contains(",\"tokio, "), "{line}");
            assert_eq!(
                line.replace("\"tokio, ", "\"tokio ").split(',').count(),
                header,
                "{line}"
            );
        }
        assert_eq!(
            goals(&rows),
            "- amped: lowest 0.97 of the bound (N = 2): met\n"
        );
        let lines = series(&rows);
        let names: Vec<&str> = lines.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["amped", "N-copy (bound)", "ideal"]);
        assert_eq!(lines[0].1, [(1.0, 1.0), (2.0, 1.9)]);
        assert_eq!(lines[1].1, [(1.0, 1.0), (2.0, 1.95)]);
        assert_eq!(lines[2].1, [(1.0, 1.0), (2.0, 2.0)]);
    }

    #[test]
    fn setups_name_their_servers() {
        assert_eq!(server_name("seda", 3).unwrap(), "seda:1:3");
        assert_eq!(server_name("seda-s", 3).unwrap(), "seda-s:3");
        assert_eq!(server_name("tokio", 2).unwrap(), "tokio, 2 workers");
        assert_eq!(server_name("tokio", 1).unwrap(), "tokio, 1 worker");
        for s in SETUPS {
            assert!(server_name(s, 1).is_ok());
        }
        assert!(server_name("steal", 1).is_err());
    }
}
