//! The cache half: one server at one idle count, as its own process, with
//! holder processes for the idle connections and the load generator for
//! the active ones.

use super::{
    bytes_per_conn, fd_count, ratio, thread_count, CacheRow, HoldTarget, Holders, Plan, MIB,
    RESERVED_FDS,
};
use crate::loadgen::{self, LoadConfig, Mode, Target};
use crate::servers::{ServerKind, ServerProcess};
use std::time::{Duration, Instant};

/// Picks a cache server by its short name: `duality` (the default model,
/// `symped:cores`), `duality:MODEL` (`duality:MODEL@epoll|uring` on that backend), `thread-per-conn`, `tokio` (as many
/// workers as cores) or `memcached` (`-t cores`, as duality's default).
pub fn parse_server(name: &str, cores: usize) -> Result<ServerKind, String> {
    match name {
        "duality" => Ok(ServerKind::Duality(format!("symped:{cores}"))),
        "thread-per-conn" => Ok(ServerKind::Duality("thread-per-conn".into())),
        "tokio" => Ok(ServerKind::Tokio(cores)),
        "memcached" => Ok(ServerKind::Memcached(cores)),
        _ => match name.strip_prefix("duality:") {
            Some(spec) => {
                // `MODEL@BACKEND` runs it on that I/O backend.
                let (m, io) = match spec.split_once('@') {
                    Some((m, io)) => (m, Some(io)),
                    None => (spec, None),
                };
                let m = m
                    .parse::<duality_models::Model>()
                    .map_err(|e| format!("{name}: {e}"))?;
                if let Some(io) = io {
                    io.parse::<duality_rt::IoBackend>()
                        .map_err(|e| format!("{name}: {e}"))?;
                }
                Ok(ServerKind::Duality(match io {
                    Some(io) => format!("{m}@{io}"),
                    None => m.to_string(),
                }))
            }
            None => Err(format!(
                "unknown server {name:?}: one of duality, duality:MODEL, thread-per-conn, tokio, memcached"
            )),
        },
    }
}

/// One server at one idle count: a fresh server, preloaded; the load
/// (measured where K > 0: the idle-free base); RSS; K idle clients; RSS;
/// the load, measured; the idle clients close; RSS once more.
pub fn measure_cache(plan: &Plan, kind: &ServerKind, idle: u64) -> anyhow::Result<CacheRow> {
    let want = if matches!(kind, ServerKind::Duality(m) if m == "thread-per-conn") {
        idle.min(
            plan.limits
                .os_threads
                .saturating_sub(plan.active as u64 + 64),
        )
    } else {
        idle
    };
    let max_conns = (want + plan.active as u64 + RESERVED_FDS).min(plan.limits.fd_limit.max(1));
    let (server, addr) = ServerProcess::start_on_free_port(plan.exe, kind, 64, max_conns as usize)?;
    let target = Target::Tcp(addr);
    let pid = server.pid();
    loadgen::preload(&target, &plan.workload)?;
    let load = |warmup: Duration, window: Duration| LoadConfig {
        target: target.clone(),
        conns: plan.active,
        workload: plan.workload.clone(),
        warmup,
        window,
        windows: 1,
        mode: Mode::Closed,
        seed: idle,
        pipeline: 1,
        io: None,
        threads: 1,
        reply_timeout: loadgen::reply_timeout(window),
    };
    // A first load (its connections then closed), so that the start
    // already holds what serving the load leaves behind (pools, buffers,
    // arenas) and "after close / start" isolates the idle connections.
    // Where idle clients will come it is a whole measured window: the
    // idle-free throughput their window is compared with, seconds apart in
    // the same process (the host's speed drifts over minutes).
    let fds_quiet = fd_count(pid);
    let first = if want > 0 {
        load(plan.warmup, plan.window)
    } else {
        load(Duration::ZERO, plan.warmup.max(Duration::from_millis(100)))
    };
    let before = loadgen::run(&first, &mut |_| {})?;
    let tps_before_idle = (want > 0).then(|| before[0].tps());
    wait_fds_at_most(pid, fds_quiet);
    let rss = || crate::proc::rss_of(&pid.to_string());
    let fds_start = fd_count(pid);
    let threads_start = thread_count(pid);
    let rss_start = rss()?;
    let mut holders = None;
    let mut held = 0;
    if want > 0 {
        let mut h = Holders::start(
            plan.exe,
            &HoldTarget::Tcp(addr),
            want,
            true,
            plan.limits.per_holder,
        )?;
        held = h.wait_held(Duration::from_secs(600))?;
        holders = Some(h);
    }
    let rss_idle = rss()?;
    let mut marks = Vec::new();
    let windows = loadgen::run(&load(plan.warmup, plan.window), &mut |_| {
        marks.push(crate::proc::cpu_time_of(pid).unwrap_or_default())
    })?;
    let rss_loaded = rss()?;
    if let Some(mut h) = holders {
        h.close();
    }
    // Every idle client (and the load's) closed: wait for the server to
    // close its ends and end their threads (thread-per-conn: 10,000 threads
    // unmapping their stacks at once take a while after their sockets
    // close, and a thread's memory is free only once it has ended), then
    // let it give memory back.
    wait_at_most(pid, fds_start, threads_start);
    std::thread::sleep(plan.settle);
    let rss_closed = settled(rss, SETTLE_STEP, plan.settle * 4)?;
    drop(server);
    let w = &windows[0];
    let cpu = marks
        .last()
        .zip(marks.first())
        .map(|(b, a)| b.saturating_sub(*a))
        .unwrap_or_default();
    Ok(CacheRow {
        server: kind.label(),
        idle,
        held,
        active: plan.active,
        tps: w.tps(),
        vs_idle_free: None,
        tps_before_idle,
        p99_us: w.latency.p99_us,
        cpu_us_per_txn: cpu.as_secs_f64() * 1e6 / w.txns.max(1) as f64,
        rss_start_mib: rss_start as f64 / MIB,
        rss_idle_mib: rss_idle as f64 / MIB,
        bytes_per_idle: bytes_per_conn(rss_idle, rss_start, held),
        rss_closed_mib: rss_closed as f64 / MIB,
        closed_vs_start: ratio(rss_closed as f64, rss_start as f64).unwrap_or(f64::NAN),
        rss_loaded_mib: rss_loaded as f64 / MIB,
        closed_net_vs_start: closed_net(rss_start, rss_idle, rss_loaded, rss_closed),
        client_cores: w.client_cores,
    })
}

/// The start plus what the idle connections took less what came back when
/// they closed, over the start ([`CacheRow::closed_net_vs_start`]): the load
/// that ran between "idle" and "loaded" may grow the process (the store
/// keeps what it wrote), and that is not the idle connections' to give back.
fn closed_net(start: u64, idle: u64, loaded: u64, closed: u64) -> Option<f64> {
    let taken = idle as f64 - start as f64;
    let returned = loaded as f64 - closed as f64;
    ratio(start as f64 + taken - returned, start as f64)
}

/// How often [`settled`] reads memory again, and what it counts as a fall.
const SETTLE_STEP: Duration = Duration::from_millis(250);
const SETTLE_FALL: u64 = 256 << 10;

/// Reads `read` until it stops falling: again every `step` while a reading
/// is at least [`SETTLE_FALL`] below the one before, for at most `more`.
/// An allocator returns freed pages on a schedule of its own (mimalloc
/// purges with a delay): one reading taken a moment after the last client
/// closed sometimes caught megabytes still on their way back.
fn settled(
    mut read: impl FnMut() -> std::io::Result<u64>,
    step: Duration,
    more: Duration,
) -> std::io::Result<u64> {
    let until = Instant::now() + more;
    let mut last = read()?;
    while Instant::now() < until {
        std::thread::sleep(step);
        let now = read()?;
        let fell = now + SETTLE_FALL <= last;
        last = last.min(now);
        if !fell {
            break;
        }
    }
    Ok(last)
}

/// Waits (up to 30 s) until server `pid` holds at most `n` descriptors
/// (two more are let pass: a closing connection the client side has
/// finished with may linger a moment).
fn wait_fds_at_most(pid: u32, n: u64) {
    wait_at_most(pid, n, u64::MAX);
}

/// Waits (up to 30 s) until server `pid` holds at most `fds` descriptors
/// and `threads` threads (two more of each let pass, as in
/// [`wait_fds_at_most`]).
fn wait_at_most(pid: u32, fds: u64, threads: u64) {
    let until = Instant::now() + Duration::from_secs(30);
    while (fd_count(pid) > fds + 2 || thread_count(pid) > threads.saturating_add(2))
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_load_added_is_not_counted_against_the_idle_connections() {
        const M: u64 = 1 << 20;
        // 10 MiB at the start, 20 with the idle clients, the load adds 5,
        // and all 10 the clients took come back: 1.0.
        assert_eq!(closed_net(10 * M, 20 * M, 25 * M, 15 * M), Some(1.0));
        // Only 8 of their 10 come back: 1.2 of the start stays.
        assert_eq!(closed_net(10 * M, 20 * M, 25 * M, 17 * M), Some(1.2));
        assert_eq!(closed_net(0, 20 * M, 25 * M, 17 * M), None);
    }

    #[test]
    fn memory_is_read_until_it_stops_falling() {
        const M: u64 = 1 << 20;
        let readings = |v: Vec<u64>| {
            let mut it = v.into_iter();
            move || Ok(it.next().expect("read past the readings"))
        };
        let step = Duration::ZERO;
        let long = Duration::from_secs(5);
        // Falling by megabytes, then level: the level.
        let r = settled(readings(vec![30 * M, 28 * M, 25 * M, 25 * M]), step, long);
        assert_eq!(r.unwrap(), 25 * M);
        // A fall under the threshold ends it (and a rise keeps the lowest).
        let r = settled(readings(vec![30 * M, 30 * M - 4096]), step, long);
        assert_eq!(r.unwrap(), 30 * M - 4096);
        let r = settled(readings(vec![30 * M, 31 * M]), step, long);
        assert_eq!(r.unwrap(), 30 * M);
        // No time for more: the first reading.
        let r = settled(readings(vec![30 * M]), step, Duration::ZERO);
        assert_eq!(r.unwrap(), 30 * M);
    }

    #[test]
    fn servers_parse() {
        assert_eq!(
            parse_server("duality", 2),
            Ok(ServerKind::Duality("symped:2".into()))
        );
        assert_eq!(
            parse_server("thread-per-conn", 2),
            Ok(ServerKind::Duality("thread-per-conn".into()))
        );
        assert_eq!(
            parse_server("duality:sped", 2),
            Ok(ServerKind::Duality("sped".into()))
        );
        assert_eq!(parse_server("tokio", 4), Ok(ServerKind::Tokio(4)));
        assert_eq!(parse_server("memcached", 4), Ok(ServerKind::Memcached(4)));
        assert_eq!(
            parse_server("duality:symped:2@epoll", 2),
            Ok(ServerKind::Duality("symped:2@epoll".into()))
        );
        assert!(parse_server("duality:symped:2@kqueue", 2).is_err());
        assert!(parse_server("duality:bogus", 2).is_err());
        assert!(parse_server("nginx", 2).is_err());
    }
}
