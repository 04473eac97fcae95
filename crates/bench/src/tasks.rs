//! `duality bench tasks`: how much memory a task costs, and how fast tasks
//! that loop on `yield_now` are switched, for duality and its peers.
//!
//! Each runtime is measured in a fresh child process (memory freed by one
//! runtime would otherwise be reused by the next and hide its cost):
//! bytes per task = (RSS after every task has been polled once − RSS before
//! the runtime was created) / tasks. Yields per second are counted over a
//! fixed interval with all tasks alive. OS threads (std, smallest stack the
//! platform allows) are the baseline, at most 10,000 of them.
//!
//! Everything runs on one OS thread per runtime (tokio `current_thread`, one
//! smol `Executor`, one duality loop), with the same global allocator. Go's
//! goroutines are measured by a small Go program (`crates/bench/go/tasks`,
//! built by the command with the Go toolchain found on the machine) with
//! `GOMAXPROCS=1`, at most [`MAX_GOROUTINES`] of them.

use crate::interrupt::SpawnUnlessInterrupted;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// One measured runtime.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TaskRow {
    /// `duality`, `tokio`, `smol` or `os-threads`.
    pub runtime: String,
    /// Tasks (or threads) alive during the measurement.
    pub tasks: u64,
    /// RSS growth divided by `tasks`.
    pub bytes_per_task: f64,
    /// `yield_now` calls completed per second, all tasks together.
    pub yields_per_sec: f64,
}

/// The runtimes compared.
pub const RUNTIMES: [&str; 5] = ["duality", "tokio", "smol", "go", "os-threads"];

/// At most this many OS threads are started for the baseline.
pub const MAX_OS_THREADS: u64 = 10_000;

/// At most this many goroutines: each takes a 2 KiB stack at least, so ten
/// million would not fit this machine's 24 GiB beside everything else.
pub const MAX_GOROUTINES: u64 = 2_000_000;

/// The most memory a task of `runtime` is taken to cost when a run is
/// checked against the machine's memory, bytes: about 1.3-1.5 times what
/// each was measured at on 2026-11-27 (`docs/results/tasks/`: duality 32,
/// tokio 142, smol 121, a goroutine 2,758, an OS thread 15,600).
pub fn bytes_per_task_bound(runtime: &str) -> u64 {
    match runtime {
        "duality" => 48,
        "go" => 3_600,
        "os-threads" => 20_000,
        _ => 192,
    }
}

/// The tasks `runtime` runs when asked for `count`: goroutines stop at
/// [`MAX_GOROUTINES`], OS threads at [`MAX_OS_THREADS`].
pub fn tasks_run(runtime: &str, count: u64) -> u64 {
    match runtime {
        "go" => count.min(MAX_GOROUTINES),
        "os-threads" => count.min(MAX_OS_THREADS),
        _ => count,
    }
}

/// About the memory `runtime` needs for `count` tasks (see
/// [`bytes_per_task_bound`]).
pub fn memory_needed(runtime: &str, count: u64) -> u64 {
    tasks_run(runtime, count).saturating_mul(bytes_per_task_bound(runtime))
}

/// The Go peer's source.
const GO_TASKS: &str = include_str!("../go/tasks/main.go");

/// The `go` command: on `PATH`, or where the official tarball puts it.
pub fn find_go() -> Option<std::path::PathBuf> {
    crate::servers::find_executable("go", &["/usr/local/go/bin"])
}

/// Builds the Go peer into a temporary directory (its build cache kept in
/// the temp dir between runs); `None`, said on stderr, where Go is missing.
pub fn build_go() -> anyhow::Result<Option<std::path::PathBuf>> {
    let Some(go) = find_go() else {
        duality_rt::say!(
            "go is not installed: its rows are left out (install it from https://go.dev/dl/ \
             into /usr/local/go, or apt-get install golang-go)"
        );
        return Ok(None);
    };
    let dir = std::env::temp_dir().join(format!("duality-go-tasks-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("main.go"), GO_TASKS)?;
    let cache = std::env::temp_dir().join("duality-go-cache");
    let out = Command::new(&go)
        .current_dir(&dir)
        .args(["build", "-o", "tasks", "main.go"])
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", cache.join("build"))
        .env("GOPATH", cache.join("gopath"))
        .env("GOFLAGS", "")
        .output_unless_interrupted()?;
    anyhow::ensure!(
        out.status.success(),
        "go build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Some(dir.join("tasks")))
}

static STARTED: AtomicU64 = AtomicU64::new(0);
static YIELDS: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

/// The task every runtime runs: count the first poll, then yield forever.
macro_rules! yield_task {
    ($yield_now:expr) => {
        async {
            STARTED.fetch_add(1, Relaxed);
            loop {
                YIELDS.fetch_add(1, Relaxed);
                $yield_now.await;
            }
        }
    };
}

/// Runs in the parent: measures each runtime in its own child process
/// (`exe bench tasks --child RUNTIME ...`; `go`: the program `go_bin`, or
/// left out without it).
pub fn run_children(
    exe: &Path,
    go_bin: Option<&Path>,
    runtimes: &[String],
    count: u64,
    seconds: f64,
) -> anyhow::Result<Vec<TaskRow>> {
    let mut rows = Vec::new();
    for rt in runtimes {
        let out = if rt == "go" {
            let Some(bin) = go_bin else { continue };
            Command::new(bin)
                .arg(tasks_run("go", count).to_string())
                .arg(seconds.to_string())
                .env("GOMAXPROCS", "1")
                .output_unless_interrupted()?
        } else {
            Command::new(exe)
                .args(["bench", "tasks", "--child", rt, "--counts"])
                .arg(count.to_string())
                .arg("--seconds")
                .arg(seconds.to_string())
                .output_unless_interrupted()?
        };
        if !out.status.success() {
            anyhow::bail!(
                "measuring {rt} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let line = String::from_utf8_lossy(&out.stdout);
        let row: TaskRow = serde_json::from_str(line.trim())
            .map_err(|e| anyhow::anyhow!("bad output from the {rt} child: {e}: {line}"))?;
        rows.push(row);
    }
    Ok(rows)
}

/// Measures one runtime in this process (call once per process).
pub fn measure(runtime: &str, count: u64, run_for: Duration) -> anyhow::Result<TaskRow> {
    let rss0 = crate::proc::rss_bytes()?;
    let (tasks, rss1, yields, elapsed) = match runtime {
        "duality" => measure_duality(count, run_for)?,
        "tokio" => measure_tokio(count, run_for)?,
        "smol" => measure_smol(count, run_for),
        "os-threads" => measure_threads(count.min(MAX_OS_THREADS), run_for)?,
        "go" => anyhow::bail!("go is measured by its own program, not in this process"),
        other => anyhow::bail!("unknown runtime {other:?} (one of {RUNTIMES:?})"),
    };
    Ok(TaskRow {
        runtime: runtime.to_string(),
        tasks,
        bytes_per_task: rss1.saturating_sub(rss0) as f64 / tasks as f64,
        yields_per_sec: yields as f64 / elapsed.as_secs_f64(),
    })
}

type Measured = (u64, u64, u64, Duration);

/// The main future shared by the async runtimes: wait for every task's first
/// poll, read RSS, then count yields for `run_for`.
async fn observe<Y: Future<Output = ()>>(
    count: u64,
    run_for: Duration,
    mut yield_now: impl FnMut() -> Y,
) -> (u64, u64, Duration) {
    while STARTED.load(Relaxed) < count {
        yield_now().await;
    }
    let rss1 = crate::proc::rss_bytes().unwrap_or(0);
    let y0 = YIELDS.load(Relaxed);
    let t0 = Instant::now();
    while t0.elapsed() < run_for {
        yield_now().await;
    }
    (rss1, YIELDS.load(Relaxed) - y0, t0.elapsed())
}

fn measure_duality(count: u64, run_for: Duration) -> anyhow::Result<Measured> {
    let config = duality_rt::LoopConfig {
        long_poll_threshold: None,
        ..Default::default()
    };
    let mut lp = duality_rt::EventLoop::new(config)?;
    let (rss1, y, el) = lp.block_on(async {
        for _ in 0..count {
            drop(duality_rt::spawn(yield_task!(duality_rt::yield_now())));
        }
        observe(count, run_for, duality_rt::yield_now).await
    });
    Ok((count, rss1, y, el))
}

fn measure_tokio(count: u64, run_for: Duration) -> anyhow::Result<Measured> {
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let (rss1, y, el) = rt.block_on(async {
        for _ in 0..count {
            drop(tokio::spawn(yield_task!(tokio::task::yield_now())));
        }
        observe(count, run_for, tokio::task::yield_now).await
    });
    Ok((count, rss1, y, el))
}

fn measure_smol(count: u64, run_for: Duration) -> Measured {
    let ex = async_executor::Executor::new();
    let (rss1, y, el) = futures_lite::future::block_on(ex.run(async {
        for _ in 0..count {
            ex.spawn(yield_task!(futures_lite::future::yield_now()))
                .detach();
        }
        observe(count, run_for, futures_lite::future::yield_now).await
    }));
    (count, rss1, y, el)
}

fn measure_threads(count: u64, run_for: Duration) -> anyhow::Result<Measured> {
    // The smallest stack the platform accepts (glibc: PTHREAD_STACK_MIN).
    let stack = libc::PTHREAD_STACK_MIN;
    let mut threads = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let t = std::thread::Builder::new().stack_size(stack).spawn(|| {
            STARTED.fetch_add(1, Relaxed);
            while !STOP.load(Relaxed) {
                YIELDS.fetch_add(1, Relaxed);
                std::thread::yield_now();
            }
        });
        match t {
            Ok(t) => threads.push(t),
            Err(e) => {
                STOP.store(true, Relaxed);
                for t in threads {
                    let _ = t.join();
                }
                anyhow::bail!("could not start OS thread {}: {e}", STARTED.load(Relaxed));
            }
        }
    }
    while STARTED.load(Relaxed) < count {
        std::thread::sleep(Duration::from_millis(1));
    }
    let rss1 = crate::proc::rss_bytes()?;
    let y0 = YIELDS.load(Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(run_for);
    let y = YIELDS.load(Relaxed) - y0;
    let el = t0.elapsed();
    STOP.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    Ok((count, rss1, y, el))
}

/// One runtime at one task count over several rounds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TaskSummary {
    /// The runtime.
    pub runtime: String,
    /// Tasks asked for.
    pub count: u64,
    /// Tasks (or threads, goroutines) that ran.
    pub tasks: u64,
    /// Median bytes per task over the rounds.
    pub bytes_per_task: f64,
    /// Median yields per second over the rounds.
    pub yields_per_sec: f64,
    /// Each round's yields per second.
    pub runs: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        f64::NAN
    } else {
        s[(s.len() - 1) / 2]
    }
}

/// Medians over rounds: `rounds[r]` holds round `r`'s rows for `count`
/// tasks, in the runtimes' order.
pub fn summarize(count: u64, rounds: &[Vec<TaskRow>]) -> Vec<TaskSummary> {
    let mut out: Vec<TaskSummary> = Vec::new();
    for row in rounds.iter().flatten() {
        match out.iter_mut().find(|s| s.runtime == row.runtime) {
            Some(s) => s.runs.push(row.yields_per_sec),
            None => out.push(TaskSummary {
                runtime: row.runtime.clone(),
                count,
                tasks: row.tasks,
                bytes_per_task: 0.0,
                yields_per_sec: 0.0,
                runs: vec![row.yields_per_sec],
            }),
        }
    }
    for s in &mut out {
        let rows = rounds.iter().flatten().filter(|r| r.runtime == s.runtime);
        s.bytes_per_task = median(&rows.map(|r| r.bytes_per_task).collect::<Vec<_>>());
        s.yields_per_sec = median(&s.runs);
    }
    out
}

/// The Markdown table of one task count's summaries, with each runtime's
/// ratios to duality.
pub fn summary_table(rows: &[TaskSummary]) -> String {
    let base = rows.iter().find(|r| r.runtime == "duality");
    let ratio = |v: f64, b: Option<f64>| match b {
        Some(b) if b > 0.0 => format!("{:.2}x", v / b),
        _ => "-".into(),
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.runtime.clone(),
                crate::report::thousands(r.tasks as f64),
                format!("{:.1}", r.bytes_per_task),
                ratio(r.bytes_per_task, base.map(|b| b.bytes_per_task)),
                crate::report::thousands(r.yields_per_sec),
                r.runs
                    .iter()
                    .map(|v| format!("{:.1}", v / 1e6))
                    .collect::<Vec<_>>()
                    .join(", "),
                ratio(r.yields_per_sec, base.map(|b| b.yields_per_sec)),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "runtime",
            "tasks",
            "bytes/task (median)",
            "memory vs duality",
            "yields/s (median)",
            "runs (M yields/s)",
            "speed vs duality",
        ],
        &cells,
    )
}

/// The summaries as CSV.
pub fn csv(rows: &[TaskSummary]) -> String {
    let mut s = String::from("count,runtime,tasks,bytes_per_task,yields_per_sec,runs\n");
    for r in rows {
        let runs: Vec<String> = r.runs.iter().map(|v| format!("{v:.0}")).collect();
        s.push_str(&format!(
            "{},{},{},{:.2},{:.0},{}\n",
            r.count,
            crate::report::csv_field(&r.runtime),
            r.tasks,
            r.bytes_per_task,
            r.yields_per_sec,
            runs.join("/")
        ));
    }
    s
}

/// The Markdown table of a run, with each peer's ratio to duality.
pub fn table(rows: &[TaskRow]) -> String {
    let base = rows.iter().find(|r| r.runtime == "duality");
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (mem_ratio, speed_ratio) = match base {
                Some(b) if b.bytes_per_task > 0.0 && b.yields_per_sec > 0.0 => (
                    format!("{:.2}x", r.bytes_per_task / b.bytes_per_task),
                    format!("{:.2}x", r.yields_per_sec / b.yields_per_sec),
                ),
                _ => ("-".into(), "-".into()),
            };
            vec![
                r.runtime.clone(),
                crate::report::thousands(r.tasks as f64),
                format!("{:.1}", r.bytes_per_task),
                mem_ratio,
                crate::report::thousands(r.yields_per_sec),
                speed_ratio,
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "runtime",
            "tasks",
            "bytes/task",
            "memory vs duality",
            "yields/s",
            "speed vs duality",
        ],
        &cells,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unknown_runtime() {
        assert!(measure("nope", 1, Duration::ZERO).is_err());
        assert!(measure("go", 1, Duration::ZERO).is_err());
    }

    fn row(rt: &str, tasks: u64, bytes: f64, yields: f64) -> TaskRow {
        TaskRow {
            runtime: rt.into(),
            tasks,
            bytes_per_task: bytes,
            yields_per_sec: yields,
        }
    }

    #[test]
    fn summaries_take_medians_over_rounds() {
        let rounds = vec![
            vec![row("duality", 10, 30.0, 3e6), row("go", 10, 2600.0, 1e6)],
            vec![row("duality", 10, 34.0, 1e6), row("go", 10, 2700.0, 2e6)],
            vec![row("duality", 10, 32.0, 2e6), row("go", 10, 2500.0, 3e6)],
        ];
        let s = summarize(10, &rounds);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].bytes_per_task, s[0].yields_per_sec), (32.0, 2e6));
        assert_eq!(s[0].runs, [3e6, 1e6, 2e6]);
        assert_eq!((s[1].bytes_per_task, s[1].yields_per_sec), (2600.0, 2e6));
        let t = summary_table(&s);
        assert!(
            t.contains("| go | 10 | 2600.0 | 81.25x | 2,000,000 | 1.0, 2.0, 3.0 | 1.00x |"),
            "{t}"
        );
        assert!(csv(&s).contains("10,go,10,2600.00,2000000,1000000/2000000/3000000"));
    }

    #[test]
    fn table_reports_ratios_against_duality() {
        let rows = vec![
            TaskRow {
                runtime: "duality".into(),
                tasks: 10,
                bytes_per_task: 32.0,
                yields_per_sec: 100.0,
            },
            TaskRow {
                runtime: "tokio".into(),
                tasks: 10,
                bytes_per_task: 128.0,
                yields_per_sec: 50.0,
            },
        ];
        let t = table(&rows);
        assert!(
            t.contains("| tokio | 10 | 128.0 | 4.00x | 50 | 0.50x |"),
            "{t}"
        );
    }
}
