//! `duality bench …`: the experiments, each with its peers in the same run.

use clap::{Args, Subcommand};
use std::time::Duration;

#[derive(Subcommand)]
pub enum Bench {
    /// Bytes per task and yields/s: duality vs tokio, smol and OS threads.
    Tasks(TasksArgs),
    /// The cache (or the echo service) under every threading model vs memcached and tokio.
    Models(super::bench_kv::ModelsArgs),
    /// SYMPED transactions/s against server threads, memcached -t N beside it.
    Threads(super::bench_kv::ThreadsArgs),
    /// Requests/s and Mbit/s vs concurrent clients: duality (Knot-A, Knot-C, SPED) vs nginx.
    Http(super::bench_http::HttpBenchArgs),
    /// A newcomer's first answer while clients flood the server: every model vs memcached and nginx.
    Fairness(super::bench_fairness::FairnessArgs),
    /// Seed 004's FIFO-pipe test: active pairs' throughput and memory per idle connection as idle connections grow, vs tokio and OS threads; the cache vs thread-per-conn, tokio and memcached.
    Idle(super::bench_idle::IdleArgs),
    /// Seed 004's disk test: N readers of random 4 KiB O_DIRECT blocks through the blocking pool or io_uring, vs tokio and OS threads.
    Disk(super::bench_disk::DiskArgs),
    /// Seed 002's uneven load: how evenly the loops share the work under each accept balance, vs memcached.
    Balance(super::bench_balance::BalanceArgs),
    /// 1% gzip requests: p99s of everybody else with compression inline, on the pool or adaptive, vs nginx gzip on.
    Offload(super::bench_offload::OffloadArgs),
    /// The cache's memory under size waves, bytes per item and hit ratio under Zipf keys, vs memcached.
    Store(super::bench_store::StoreArgs),
    /// Good clients beside floods, slowloris, resets and churn: errors, p99 and memory over time.
    Soak(super::bench_soak::SoakArgs),
    /// Seed 003 Fig. 1: speed-up of per-client cryptography with per-client colors on 1..N threads, vs N independent copies and tokio with a mutex.
    Colors(super::bench_colors::ColorsArgs),
    /// The open issues' benchmark goals, judged on the committed results files a manifest names (measures nothing).
    Goals(GoalsArgs),
}

#[derive(Args)]
pub struct GoalsArgs {
    /// The manifest: one `KIND PATH` line per results file (PATH relative
    /// to the manifest). The README's goal table is this command's output
    /// on the default.
    #[arg(long, default_value = "docs/results/goals.txt")]
    manifest: std::path::PathBuf,
    /// Print the verdicts as JSON (issue, goal, figure, met, from) instead
    /// of the Markdown table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct TasksArgs {
    /// Comma-separated task counts per runtime (OS threads stop at 10,000,
    /// goroutines at 2,000,000); refused past what the machine's available
    /// memory holds.
    #[arg(
        long,
        alias = "count",
        value_delimiter = ',',
        default_value = "1000000,10000000",
        conflicts_with = "quick"
    )]
    counts: Vec<u64>,
    /// Seconds to count yields for, per runtime.
    #[arg(long, default_value_t = 2.0, value_parser = parse_positive_seconds, conflicts_with = "quick")]
    seconds: f64,
    /// Rounds (runtimes take turns; medians are reported, every run listed).
    #[arg(long, default_value_t = 3, conflicts_with = "quick", value_parser = positive)]
    rounds: usize,
    /// Comma-separated runtimes to measure.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "duality,tokio,smol,go,os-threads"
    )]
    runtimes: Vec<String>,
    #[command(flatten)]
    output: super::OutputArgs,
    /// Internal: measure one runtime in this process and print one JSON row.
    #[arg(long, hide = true)]
    child: Option<String>,
}

pub fn run(b: Bench) -> anyhow::Result<()> {
    // Reads files only: no servers, no signal handling, no note on `--out`.
    if let Bench::Goals(a) = b {
        let all = duality_bench::goals::check_all(&a.manifest)?;
        if a.json {
            duality_bench::report::print(&duality_bench::goals::json(&all));
        } else {
            // `print` adds the newline the table ends with.
            let table = duality_bench::goals::table(&all);
            duality_bench::report::print(table.trim_end_matches('\n'));
        }
        return Ok(());
    }
    // The load generators run in this process: they stay on epoll (the
    // backend every committed result's client used) unless DUALITY_IO says
    // otherwise; `bench models --client-io` picks per run. The servers under
    // test are separate processes with their own default (`--io` rows).
    if std::env::var_os("DUALITY_IO").is_none() {
        duality_rt::set_default_io_backend(duality_rt::IoBackend::Epoll);
    }
    // SIGINT/SIGTERM stop every server this run started and remove its
    // temporary files before the process exits (130/143).
    duality_bench::interrupt::install(super::process::catch_signals)?;
    let r = match b {
        Bench::Tasks(a) => bench_tasks(a),
        Bench::Models(a) => super::bench_kv::models(a),
        Bench::Threads(a) => super::bench_kv::threads(a),
        Bench::Http(a) => super::bench_http::run(a),
        Bench::Fairness(a) => super::bench_fairness::run(a),
        Bench::Balance(a) => super::bench_balance::run(a),
        Bench::Disk(a) => super::bench_disk::run(a),
        Bench::Idle(a) => super::bench_idle::run(a),
        Bench::Offload(a) => super::bench_offload::run(a),
        Bench::Soak(a) => super::bench_soak::run(a),
        Bench::Store(a) => super::bench_store::run(a),
        Bench::Colors(a) => super::bench_colors::run(a),
        Bench::Goals(_) => unreachable!("answered above"),
    };
    note_earlier_files();
    r
}

/// A file of a directory: its name, length and modification time.
type FileState = (std::ffi::OsString, u64, Option<std::time::SystemTime>);

/// An `--out` directory as it was before the run wrote to it.
struct Before {
    dir: std::path::PathBuf,
    files: Vec<FileState>,
}

static BEFORE: std::sync::Mutex<Option<Before>> = std::sync::Mutex::new(None);

fn listing(dir: &std::path::Path) -> Vec<FileState> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let m = e.metadata().ok().filter(|m| m.is_file())?;
            Some((e.file_name(), m.len(), m.modified().ok()))
        })
        .collect()
}

/// Says which files of the `--out` directory this run did not write (left
/// from an earlier run, and unchanged): results read from that directory
/// would otherwise mix two runs without a word. Nothing is removed (a
/// results directory may hold several runs' files on purpose).
fn note_earlier_files() {
    let Some(before) = BEFORE.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    let now = listing(&before.dir);
    let mut kept: Vec<String> = before
        .files
        .iter()
        .filter(|f| now.contains(f))
        .map(|(name, ..)| name.to_string_lossy().into_owned())
        .collect();
    if kept.is_empty() {
        return;
    }
    kept.sort();
    let n = kept.len();
    let shown = kept.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let more = if n > 5 { " …" } else { "" };
    duality_rt::say!(
        "note: {} also holds {n} file(s) this run did not write (from before it): {shown}{more}",
        before.dir.display()
    );
}

fn bench_tasks(a: TasksArgs) -> anyhow::Result<()> {
    use duality_bench::tasks;
    anyhow::ensure!(
        !a.counts.is_empty() && a.counts.iter().all(|&c| c > 0),
        "--counts must be positive"
    );
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0,
        "--seconds must be a positive number"
    );
    if let Some(rt) = a.child {
        check_task_memory(
            std::slice::from_ref(&rt),
            &a.counts[..1],
            duality_bench::limits::mem_available(),
        )?;
        let row = tasks::measure(&rt, a.counts[0], Duration::from_secs_f64(a.seconds))?;
        duality_bench::report::print(&serde_json::to_string(&row)?);
        return Ok(());
    }
    for rt in &a.runtimes {
        anyhow::ensure!(
            tasks::RUNTIMES.contains(&rt.as_str()),
            "unknown runtime {rt:?}; choose from {:?}",
            tasks::RUNTIMES
        );
    }
    let (counts, seconds, rounds) = if a.output.quick {
        (vec![100_000], 0.3, 1)
    } else {
        (a.counts.clone(), a.seconds, a.rounds)
    };
    check_task_memory(&a.runtimes, &counts, duality_bench::limits::mem_available())?;
    let dir = results_dir(a.output.out.as_deref(), "tasks")?;
    let go_bin = if a.runtimes.iter().any(|r| r == "go") {
        tasks::build_go()?
    } else {
        None
    };
    // The built program's directory, removed at the end or on an interrupt.
    let _go_dir = go_bin
        .as_deref()
        .and_then(std::path::Path::parent)
        .map(duality_bench::interrupt::TempPath::new);
    let exe = std::env::current_exe()?;
    let pb = super::bench_kv::progress(counts.len() * rounds);
    let mut summaries = Vec::new();
    let mut md = String::new();
    for &count in &counts {
        let mut per_round = Vec::new();
        for r in 0..rounds {
            pb.set_message(format!("{count} tasks, round {}", r + 1));
            per_round.push(tasks::run_children(
                &exe,
                go_bin.as_deref(),
                &a.runtimes,
                count,
                seconds,
            )?);
            pb.inc(1);
        }
        let s = tasks::summarize(count, &per_round);
        md.push_str(&format!(
            "## {} tasks\n\n{}\n",
            duality_bench::report::thousands(count as f64),
            tasks::summary_table(&s)
        ));
        summaries.extend(s);
    }
    pb.finish_and_clear();
    let cmd = super::command_line();
    let doc = format!(
        "# Tasks: bytes per task and yields per second\n\nCommand: `{}`\n\nMachine: {} cores. Each runtime in its own child process, runtimes taking turns in each of {rounds} round(s); medians, every run listed. Every task loops on its runtime's yield (`yield_now`, `runtime.Gosched()`); bytes per task = RSS growth / tasks once every task has been polled; yields/s counted over {seconds} s with all tasks alive, one OS thread per runtime (tokio `current_thread`, one smol `Executor`, one duality loop, Go with `GOMAXPROCS=1`). OS threads: at most {} std threads with the smallest stack glibc allows; goroutines: at most {}.\n\n{md}",
        cmd,
        duality_models::cores(),
        tasks::MAX_OS_THREADS,
        tasks::MAX_GOROUTINES,
    );
    duality_bench::report::write(&dir.join("tasks.md"), &doc)?;
    duality_bench::report::write(
        &dir.join("tasks.json"),
        duality_bench::report::json(&summaries),
    )?;
    duality_bench::report::write(&dir.join("tasks.csv"), tasks::csv(&summaries))?;
    // Ratios to duality per runtime, one group of bars per task count.
    let runtimes: Vec<String> = a
        .runtimes
        .iter()
        .filter(|rt| summaries.iter().any(|s| &s.runtime == *rt))
        .cloned()
        .collect();
    let ratios = |f: fn(&tasks::TaskSummary) -> f64| -> Vec<duality_bench::plot::BarSeries> {
        counts
            .iter()
            .map(|&c| {
                let of = |rt: &str| summaries.iter().find(|s| s.count == c && s.runtime == rt);
                let base = of("duality").map(f).filter(|b| *b > 0.0);
                let vals = runtimes
                    .iter()
                    .map(|rt| Some(f(of(rt)?) / base?).filter(|v| v.is_finite() && *v > 0.0))
                    .collect();
                (
                    format!("{} tasks", duality_bench::report::thousands(c as f64)),
                    vals,
                )
            })
            .collect()
    };
    if summaries.iter().any(|s| s.runtime == "duality") {
        duality_bench::plot::bar_chart(
            &dir.join("tasks-memory"),
            "Bytes per task, relative to duality",
            "x duality",
            &runtimes,
            &ratios(|s| s.bytes_per_task),
            1.0,
        )?;
        duality_bench::plot::bar_chart(
            &dir.join("tasks-speed"),
            "Yields per second, relative to duality",
            "x duality",
            &runtimes,
            &ratios(|s| s.yields_per_sec),
            1.0,
        )?;
    }
    if a.output.json {
        duality_bench::report::print(&duality_bench::report::json(&summaries));
    } else {
        duality_bench::report::print(&md);
    }
    duality_rt::say!("results in {}", dir.display());
    Ok(())
}

/// Refuses a task count whose tasks, in any of `runtimes` (each in its own
/// process), need more memory than `available` (no check where it is not
/// known): `--counts 99999999999999` grew a child until the machine ran out.
fn check_task_memory(
    runtimes: &[String],
    counts: &[u64],
    available: Option<u64>,
) -> anyhow::Result<()> {
    use duality_bench::tasks;
    let Some(available) = available else {
        return Ok(());
    };
    for &count in counts {
        // The first of the hungriest (max_by_key would give the last).
        let Some(rt) = runtimes
            .iter()
            .min_by_key(|rt| std::cmp::Reverse(tasks::memory_needed(rt, count)))
        else {
            continue;
        };
        duality_bench::limits::check_memory(
            &format!(
                "--counts {count}: {} {rt} tasks at {} B each",
                tasks::tasks_run(rt, count),
                tasks::bytes_per_task_bound(rt)
            ),
            tasks::memory_needed(rt, count),
            available,
        )?;
    }
    Ok(())
}

/// Where an experiment writes its results, made and checked writable
/// before anything is measured: `out` if given (refused, "not a
/// directory", where it is a file), else a directory of this run's own
/// under `results/`: `NAME-UNIXTIME`, or `NAME-UNIXTIME-2`, `-3` … where
/// another run took that name in the same second (it was overwritten).
pub(super) fn results_dir(
    out: Option<&std::path::Path>,
    name: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let dir = match out {
        Some(out) => {
            // "File exists", from making it, says the wrong thing.
            if std::fs::metadata(out).is_ok_and(|m| !m.is_dir()) {
                anyhow::bail!("cannot write results to {}: not a directory", out.display());
            }
            let files = listing(out);
            if !files.is_empty() {
                *BEFORE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Before {
                    dir: out.to_path_buf(),
                    files,
                });
            }
            out.to_path_buf()
        }
        None => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let base = std::path::Path::new("results");
            new_dir(base, &format!("{name}-{t}"))
                .map_err(|e| anyhow::anyhow!("cannot write results to {}: {e}", base.display()))?
        }
    };
    super::results_dir(Some(&dir), name)
}

/// Makes `base/stem`, or `base/stem-2`, `-3` … where that is taken: each
/// made with one `mkdir`, which fails if the name exists, so two runs never
/// get the same directory.
fn new_dir(base: &std::path::Path, stem: &str) -> std::io::Result<std::path::PathBuf> {
    std::fs::create_dir_all(base)?;
    for n in 1u32.. {
        let dir = match n {
            1 => base.join(stem),
            n => base.join(format!("{stem}-{n}")),
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => {}
            Err(e) => return Err(e),
        }
    }
    unreachable!("the loop returns")
}

/// A list flag's values where it was given, else the preset of `--quick` or
/// of a full run: a flag given always wins over `--quick`.
pub(super) fn given_or<T: Clone>(
    given: &[T],
    quick: bool,
    quick_preset: &[T],
    full: &[T],
) -> Vec<T> {
    match (given.is_empty(), quick) {
        (false, _) => given.to_vec(),
        (true, true) => quick_preset.to_vec(),
        (true, false) => full.to_vec(),
    }
}

/// clap's parser for a count that must be at least 1 (`--rounds`,
/// `--pipeline`, `--client-threads` …): 0 is refused by the flag's name
/// rather than run as 1.
pub(super) fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The shortest window an experiment that reports the servers' CPU time
/// takes: that time is read from `/proc` in clock ticks (10 ms at the
/// usual 100 Hz), so a shorter window reads 0 or 1 tick, and its ratios
/// came out in the billions.
pub(super) const MIN_WINDOW: f64 = 0.05;

/// clap's parser for a measurement window in seconds (`--seconds` of
/// `bench models`, `threads`, `http`): from [`MIN_WINDOW`] to a day. Its
/// message gives the range that is taken: `parse_seconds` said "from 0"
/// of a flag that refused 0.
pub(super) fn parse_window(s: &str) -> Result<f64, String> {
    let range = || {
        format!(
            "must be a number of seconds from {MIN_WINDOW} to {} (a day); a shorter window \
             is too short to measure the servers' CPU time (read in 10 ms clock ticks)",
            super::MAX_SECONDS
        )
    };
    let v: f64 = s.parse().map_err(|e| format!("{e}; {}", range()))?;
    if v.is_finite() && (MIN_WINDOW..=super::MAX_SECONDS).contains(&v) {
        Ok(v)
    } else {
        Err(range())
    }
}

/// clap's parser for a positive number of seconds (`bench soak`,
/// `bench tasks`: 0 is refused), at most a day.
pub(super) fn parse_positive_seconds(s: &str) -> Result<f64, String> {
    let range = || {
        format!(
            "must be a number of seconds above 0 and at most {} (a day)",
            super::MAX_SECONDS
        )
    };
    let v: f64 = s.parse().map_err(|e| format!("{e}; {}", range()))?;
    if v.is_finite() && v > 0.0 && v <= super::MAX_SECONDS {
        Ok(v)
    } else {
        Err(range())
    }
}

/// Parses one experiment's flags as `duality bench NAME …` would, for the
/// tests of how each resolves `--quick` against the flags given.
#[cfg(test)]
pub(super) fn parse_args<A: clap::Args + clap::FromArgMatches>(
    args: &[&str],
) -> Result<A, clap::Error> {
    let m = A::augment_args(clap::Command::new("bench"))
        .try_get_matches_from(std::iter::once("bench").chain(args.iter().copied()))?;
    A::from_arg_matches(&m)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_new_results_directory_never_takes_one_that_exists() {
        let base = std::env::temp_dir().join(format!("duality-results-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let a = super::new_dir(&base, "models-100").unwrap();
        let b = super::new_dir(&base, "models-100").unwrap();
        let c = super::new_dir(&base, "models-100").unwrap();
        assert_eq!(a, base.join("models-100"));
        assert_eq!(b, base.join("models-100-2"));
        assert_eq!(c, base.join("models-100-3"));
        // Runs at once each get their own.
        let dirs: Vec<_> = (0..8)
            .map(|_| {
                let base = base.clone();
                std::thread::spawn(move || super::new_dir(&base, "x-1").unwrap())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let mut unique = dirs.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 8, "{dirs:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// `--seconds nan` said "from 0 to 86400" of a flag that refused 0,
    /// and `--seconds 0.005` ran, its CPU ratios in the billions.
    #[test]
    fn windows_state_the_range_they_take() {
        assert_eq!(super::parse_window("0.05"), Ok(0.05));
        assert_eq!(super::parse_window("86400"), Ok(86400.0));
        for bad in ["nan", "0", "0.005", "inf", "86401", "x"] {
            let e = super::parse_window(bad).unwrap_err();
            assert!(
                e.contains("from 0.05 to 86400 (a day)") && e.contains("CPU time"),
                "{bad}: {e}"
            );
        }
        assert_eq!(super::parse_positive_seconds("0.001"), Ok(0.001));
        for bad in ["nan", "0", "-1", "1e300"] {
            let e = super::parse_positive_seconds(bad).unwrap_err();
            assert!(e.contains("above 0 and at most 86400"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_file_given_as_out_is_not_a_directory() {
        let f = std::env::temp_dir().join(format!("duality-out-file-{}", std::process::id()));
        std::fs::write(&f, b"x").unwrap();
        let e = super::results_dir(Some(&f), "x").unwrap_err().to_string();
        assert_eq!(
            e,
            format!("cannot write results to {}: not a directory", f.display())
        );
        std::fs::remove_file(&f).unwrap();
    }

    #[test]
    fn task_counts_past_the_memory_are_refused_by_the_hungriest_runtime() {
        let rts: Vec<String> = ["duality", "tokio", "go", "os-threads"]
            .map(String::from)
            .to_vec();
        let gib = 1u64 << 30;
        // The defaults fit 24 GiB: 10M tokio tasks ~1.8 GiB, 2M goroutines ~6.7 GiB.
        super::check_task_memory(&rts, &[1_000_000, 10_000_000], Some(24 * gib)).unwrap();
        let e = super::check_task_memory(&rts, &[99_999_999_999_999], Some(24 * gib))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--counts 99999999999999: 99999999999999 tokio tasks at 192 B each: needs about 17.1 PiB of memory, and this machine has 24.0 GiB available"),
            "{e}"
        );
        // Goroutines stop at 2M: a count they alone run is bounded by them.
        let go = ["go".to_string()];
        super::check_task_memory(&go, &[u64::MAX], Some(8 * gib)).unwrap();
        assert!(super::check_task_memory(&go, &[u64::MAX], Some(4 * gib)).is_err());
        // Unknown memory: no check.
        super::check_task_memory(&rts, &[u64::MAX], None).unwrap();
    }
}
