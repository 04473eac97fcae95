//! `duality bench idle`: seed 004's FIFO-pipe test (Fig. 18) — the active
//! pairs' throughput, and memory per idle connection, as idle connections
//! grow to the descriptor limit; then the same for the cache against
//! thread-per-conn, tokio and memcached. See `duality_bench::idle`.

use super::bench::given_or;
use clap::Args;
use duality_bench::idle::{self, Limits, Plan};
use duality_bench::servers::{memcached_path, ServerKind};
use duality_bench::workload::{KeyChoice, Workload};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct IdleArgs {
    /// Comma-separated idle connection counts (cut to what the descriptor
    /// limit allows: about 19,680 for the pipes and 19,896 for the cache
    /// under `ulimit -n` 20,000). Default 0,1000,5000,10000,19000
    /// (`--quick`: 0,200).
    #[arg(long, value_delimiter = ',')]
    idle: Vec<u64>,
    /// Comma-separated runtimes of the pipes half (empty: no pipes half):
    /// duality-epoll, duality-uring, duality-loops:N, tokio, os-threads.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "duality-epoll,duality-uring,duality-loops:2,tokio,os-threads"
    )]
    runtimes: Vec<String>,
    /// Comma-separated servers of the cache half (empty: no cache half):
    /// duality (its default model), duality:MODEL, thread-per-conn, tokio,
    /// memcached.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "duality,thread-per-conn,tokio,memcached"
    )]
    servers: Vec<String>,
    /// Active pairs of the pipes half (the seed: 128); two descriptors
    /// each, refused past the descriptor limit.
    #[arg(long, default_value_t = idle::PAIRS, value_parser = super::bench::positive)]
    pairs: usize,
    /// Active connections of the cache half; refused past the descriptor
    /// limit.
    #[arg(long, default_value_t = 40, value_parser = super::bench::positive)]
    active: usize,
    /// Seconds of load before each point is counted. Default 1
    /// (`--quick`: 0.1).
    #[arg(long, value_parser = super::parse_seconds)]
    warmup: Option<f64>,
    /// Seconds counted per point. Default 3 (`--quick`: 0.3).
    #[arg(long, value_parser = super::parse_seconds)]
    seconds: Option<f64>,
    /// Seconds after a server's idle clients have closed before its
    /// resident memory is read again (then again every 250 ms while it
    /// falls, for at most four times as long). Default 1 (`--quick`: 0.2).
    #[arg(long, value_parser = super::parse_seconds)]
    settle: Option<f64>,
    /// Rounds (points take turns; the median round is reported). Default 3
    /// (`--quick`: 1).
    #[arg(long, value_parser = super::bench::positive)]
    rounds: Option<usize>,
    #[command(flatten)]
    output: super::OutputArgs,
    /// Internal: measure one pipe runtime in this process, print one JSON row.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal: the child's idle connections.
    #[arg(long, hide = true, default_value_t = 0)]
    child_idle: u64,
    /// Internal: hold idle connections to unix:PATH or tcp:ADDR until stdin closes.
    #[arg(long, hide = true)]
    hold: Option<idle::HoldTarget>,
    /// Internal: how many the holder opens.
    #[arg(long, hide = true, default_value_t = 0)]
    hold_count: u64,
    /// Internal: the holder has each connection served once (`version`).
    #[arg(long, hide = true)]
    hold_hello: bool,
}

/// What a run measures: each flag given, else the preset of `--quick` (a
/// flag given wins over it) or of a full run. The cache's data set has no
/// flag: `--quick` makes it smaller.
#[derive(Debug, PartialEq)]
struct Settings {
    idle: Vec<u64>,
    warmup: f64,
    seconds: f64,
    settle: f64,
    rounds: usize,
    records: usize,
}

impl IdleArgs {
    fn settings(&self) -> Settings {
        let q = self.output.quick;
        Settings {
            idle: given_or(&self.idle, q, &[0, 200], &[0, 1000, 5000, 10000, 19000]),
            warmup: self.warmup.unwrap_or(if q { 0.1 } else { 1.0 }),
            seconds: self.seconds.unwrap_or(if q { 0.3 } else { 3.0 }),
            settle: self.settle.unwrap_or(if q { 0.2 } else { 1.0 }),
            rounds: self.rounds.unwrap_or(if q { 1 } else { 3 }),
            records: if q { 3_000 } else { 30_000 },
        }
    }
}

pub fn run(a: IdleArgs) -> anyhow::Result<()> {
    if let Some(t) = &a.hold {
        return idle::hold(t, a.hold_count, a.hold_hello);
    }
    let Settings {
        idle: asked,
        warmup,
        seconds: window,
        settle,
        rounds,
        records,
    } = a.settings();
    anyhow::ensure!(
        window.is_finite()
            && window > 0.0
            && warmup.is_finite()
            && warmup >= 0.0
            && settle.is_finite()
            && settle >= 0.0,
        "--seconds must be positive, --warmup and --settle not negative"
    );
    let exe = std::env::current_exe()?;
    if let Some(rt) = &a.child {
        let row = idle::measure_pipes(
            &exe,
            rt,
            a.child_idle,
            a.pairs,
            Duration::from_secs_f64(warmup),
            Duration::from_secs_f64(window),
        )?;
        duality_bench::report::print(&serde_json::to_string(&row)?);
        // Thousands of tasks or threads are still parked: leave them to
        // the kernel instead of tearing each one down.
        std::process::exit(0);
    }
    let runtimes: Vec<String> = a
        .runtimes
        .iter()
        .filter(|r| !r.is_empty())
        .cloned()
        .collect();
    for rt in &runtimes {
        rt.parse::<idle::PipeRuntime>()
            .map_err(anyhow::Error::msg)?;
    }
    let cores = duality_models::cores();
    let mut servers: Vec<ServerKind> = Vec::new();
    for s in a.servers.iter().filter(|s| !s.is_empty()) {
        let kind = idle::parse_server(s, cores).map_err(anyhow::Error::msg)?;
        if matches!(kind, ServerKind::Memcached(_)) && memcached_path().is_none() {
            duality_rt::say!("memcached is not installed (apt-get install memcached): left out");
            continue;
        }
        servers.push(kind);
    }
    anyhow::ensure!(
        !runtimes.is_empty() || !servers.is_empty(),
        "nothing to measure: give --runtimes or --servers"
    );
    // Children (servers, holders, measuring processes) inherit the raised limit.
    let fd_limit = duality_bench::http::raise_fd_limit();
    idle::check_active(
        fd_limit,
        a.pairs,
        a.active,
        !runtimes.is_empty(),
        !servers.is_empty(),
    )?;
    let limits = Limits {
        fd_limit,
        max_idle_pipes: idle::max_idle_pipes(fd_limit, a.pairs),
        max_idle_cache: idle::max_idle_cache(fd_limit, a.active),
        os_threads: idle::os_thread_cap(),
        per_holder: idle::HOLD_PER_HELPER.min(fd_limit.saturating_sub(idle::RESERVED_FDS)),
    };
    // One idle list for both halves: the tighter limit of those run.
    let max = match (runtimes.is_empty(), servers.is_empty()) {
        (false, false) => limits.max_idle_pipes.min(limits.max_idle_cache),
        (false, true) => limits.max_idle_pipes,
        _ => limits.max_idle_cache,
    };
    let (idle_counts, cut) = idle::clamp_idle(&asked, max);
    let cut_note = if cut.is_empty() {
        String::new()
    } else {
        format!(
            "Idle counts {cut:?} were cut to {max}: a process may open {fd_limit} descriptors \
             (ulimit -n), and the measuring process or server spends one per idle connection \
             beside its own. "
        )
    };
    if !cut.is_empty() {
        duality_rt::say!("{cut_note}");
    }
    let plan = Plan {
        exe: &exe,
        idle: idle_counts.clone(),
        runtimes,
        pairs: a.pairs,
        servers,
        active: a.active,
        workload: Arc::new(Workload::new(records, 9, KeyChoice::Uniform)),
        warmup: Duration::from_secs_f64(warmup),
        window: Duration::from_secs_f64(window),
        settle: Duration::from_secs_f64(settle),
        rounds,
        limits: limits.clone(),
    };
    let dir = super::bench::results_dir(a.output.out.as_deref(), "idle")?;
    let pb = super::bench_kv::progress(plan.points());
    let results = idle::run(&plan, &mut |r| {
        match r {
            Ok(m) => pb.set_message(m.to_string()),
            Err(m) => pb.println(format!("not measured: {m}")),
        }
        pb.inc(1);
    });
    pb.finish_and_clear();
    let cmd = super::command_line();
    let md = format!(
        "# Idle connections: active throughput and memory per idle connection (seed 004, Fig. 18)\n\n\
         Command: `{}`\n\n\
         Machine: {cores} cores; {fd_limit} descriptors per process. Idle counts {idle_counts:?}; \
         {window} s counted after {warmup} s per point; the median of {rounds} round(s) by throughput, \
         runtimes and servers taking turns. `vs idle-free` is the median over the rounds of \
         K's throughput over an idle-free run seconds before it (the host's speed drifts more over \
         minutes than idle connections cost): for the pipes, a child of the same runtime measured \
         right before K (an idle-free row is the median of those children); for the cache, the \
         same server process measured under the same load right before its idle clients connect \
         (the last column). {cut_note}\n\n\
         Pipes: each runtime in a fresh process with {} active pairs; each pair passes 32 KiB messages \
         in 4 KiB writes both ways over a Unix socket pair whose send buffer is 4 KiB (the runtime has \
         no pipe type: its io_uring backend receives with socket operations), and K idle tasks (or \
         threads) each wait to read a socket whose other end a holder process keeps silent. MB/s: \
         bytes of whole messages received per second. Bytes per idle connection: (RSS with the idle \
         tasks waiting − RSS just before them, same process; the pairs start after) / K. The \
         measuring process spends one descriptor \
         per idle connection: at most {} fit beside the pairs. OS threads: 32 KiB stacks (the seed's \
         NPTL setting), at most {} threads per process here (the kernel's map limit or the machine's \
         free process ids, whichever binds first): the `held` column says where that cut the idle ones.\n\n\
         Cache: one fresh server process per point (`-m 64`, `-c` = K + {} + 64, never above \
         {fd_limit}), preloaded, then a first load whose connections close (RSS start is read after it; where \
         K > 0 a whole measured window, the idle-free base); holder processes (at most {} connections each) open K connections, each served \
         one `version`, then silent; then the load generator runs the paper's workload ({records} \
         records, 9 gets to 1 set) closed-loop on {} active connections. Bytes per idle connection: \
         (server RSS with them − its RSS just before them) / K. After close: server RSS once the \
         idle clients have exited and its descriptors and threads are back to the start, plus {settle} s, \
         then read every 250 ms while it falls (by 256 KiB or more), for at most {} s more. At \
         most {} idle connections fit under the descriptor limit beside the active ones; \
         thread-per-conn stops {} short of the OS-thread limit.\n\n{}",
        cmd,
        a.pairs,
        limits.max_idle_pipes,
        limits.os_threads,
        a.active,
        limits.per_holder,
        a.active,
        settle * 4.0,
        limits.max_idle_cache,
        a.active + 64,
        idle::tables(&results)
    );
    duality_bench::report::write(&dir.join("idle.md"), &md)?;
    let json = serde_json::to_string_pretty(&results)?;
    duality_bench::report::write(&dir.join("idle.json"), &json)?;
    duality_bench::report::write(&dir.join("idle-pipes.csv"), idle::pipes_csv(&results.pipes))?;
    duality_bench::report::write(&dir.join("idle-cache.csv"), idle::cache_csv(&results.cache))?;
    let [pipes, cache] = idle::series(&results);
    let plots = [
        (
            "idle-pipes",
            "Active pairs' throughput vs idle connections (seed 004, Fig. 18)",
            "MB/s",
            pipes,
        ),
        (
            "idle-cache",
            "Cache: active connections' throughput vs idle connections",
            "txn/s",
            cache,
        ),
    ];
    for (file, title, y, series) in plots {
        if series.is_empty() {
            continue;
        }
        if let Err(e) = duality_bench::plot::line_chart(
            &dir.join(file),
            title,
            "idle connections",
            y,
            &series,
            false,
        ) {
            duality_rt::say!("no {file} plot: {e}");
        }
    }
    let (groups, bars) = idle::memory_bars(&results);
    if !bars.is_empty() {
        if let Err(e) = duality_bench::plot::bar_chart(
            &dir.join("idle-memory"),
            "Resident bytes per idle connection (line: one 4 KiB page)",
            "bytes per idle connection",
            &groups,
            &bars,
            4096.0,
        ) {
            duality_rt::say!("no idle-memory plot: {e}");
        }
    }
    if a.output.json {
        duality_bench::report::print(&json);
    } else {
        duality_bench::report::print(&idle::tables(&results));
    }
    duality_rt::say!("results in {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{IdleArgs, Settings};

    fn settings(args: &[&str]) -> Settings {
        super::super::bench::parse_args::<IdleArgs>(args)
            .unwrap()
            .settings()
    }

    fn quick() -> Settings {
        Settings {
            idle: vec![0, 200],
            warmup: 0.1,
            seconds: 0.3,
            settle: 0.2,
            rounds: 1,
            records: 3_000,
        }
    }

    #[test]
    fn quick_presets_only_what_is_not_given() {
        let full = Settings {
            idle: vec![0, 1000, 5000, 10000, 19000],
            warmup: 1.0,
            seconds: 3.0,
            settle: 1.0,
            rounds: 3,
            records: 30_000,
        };
        assert_eq!(settings(&[]), full);
        assert_eq!(settings(&["--quick"]), quick());
        for (flags, want) in [
            (
                &["--quick", "--idle", "0,50"][..],
                Settings {
                    idle: vec![0, 50],
                    ..quick()
                },
            ),
            (
                &["--warmup", "0", "--quick", "--seconds", "1"],
                Settings {
                    warmup: 0.0,
                    seconds: 1.0,
                    ..quick()
                },
            ),
            (
                &["--quick", "--settle", "2", "--rounds", "2"],
                Settings {
                    settle: 2.0,
                    rounds: 2,
                    ..quick()
                },
            ),
            (
                &["--idle", "100"],
                Settings {
                    idle: vec![100],
                    ..full
                },
            ),
        ] {
            assert_eq!(settings(flags), want, "{flags:?}");
        }
    }
}
