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
//! smol `Executor`, one duality loop), with the same global allocator.

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
pub const RUNTIMES: [&str; 4] = ["duality", "tokio", "smol", "os-threads"];

/// At most this many OS threads are started for the baseline.
pub const MAX_OS_THREADS: u64 = 10_000;

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
/// (`exe bench tasks --child RUNTIME ...`).
pub fn run_children(
    exe: &Path,
    runtimes: &[String],
    count: u64,
    seconds: f64,
) -> anyhow::Result<Vec<TaskRow>> {
    let mut rows = Vec::new();
    for rt in runtimes {
        let out = Command::new(exe)
            .args(["bench", "tasks", "--child", rt, "--count"])
            .arg(count.to_string())
            .arg("--seconds")
            .arg(seconds.to_string())
            .output()?;
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
