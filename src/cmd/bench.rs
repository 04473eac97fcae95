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
}

#[derive(Args)]
pub struct TasksArgs {
    /// Tasks per runtime (OS threads stop at 10,000).
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Seconds to count yields for, per runtime.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Comma-separated runtimes to measure.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "duality,tokio,smol,os-threads"
    )]
    runtimes: Vec<String>,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Internal: measure one runtime in this process and print one JSON row.
    #[arg(long, hide = true)]
    child: Option<String>,
}

pub fn run(b: Bench) -> anyhow::Result<()> {
    // The load generators run in this process: they stay on epoll (the
    // backend every committed result's client used) unless DUALITY_IO says
    // otherwise; `bench models --client-io` picks per run. The servers under
    // test are separate processes with their own default (`--io` rows).
    if std::env::var_os("DUALITY_IO").is_none() {
        duality_rt::set_default_io_backend(duality_rt::IoBackend::Epoll);
    }
    match b {
        Bench::Tasks(a) => bench_tasks(a),
        Bench::Models(a) => super::bench_kv::models(a),
        Bench::Threads(a) => super::bench_kv::threads(a),
        Bench::Http(a) => super::bench_http::run(a),
        Bench::Fairness(a) => super::bench_fairness::run(a),
        Bench::Balance(a) => super::bench_balance::run(a),
        Bench::Disk(a) => super::bench_disk::run(a),
        Bench::Offload(a) => super::bench_offload::run(a),
        Bench::Soak(a) => super::bench_soak::run(a),
        Bench::Store(a) => super::bench_store::run(a),
    }
}

fn bench_tasks(a: TasksArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.count > 0, "--count must be at least 1");
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0,
        "--seconds must be a positive number"
    );
    let run_for = Duration::from_secs_f64(a.seconds);
    if let Some(rt) = a.child {
        let row = duality_bench::tasks::measure(&rt, a.count, run_for)?;
        println!("{}", serde_json::to_string(&row)?);
        return Ok(());
    }
    for rt in &a.runtimes {
        anyhow::ensure!(
            duality_bench::tasks::RUNTIMES.contains(&rt.as_str()),
            "unknown runtime {rt:?}; choose from {:?}",
            duality_bench::tasks::RUNTIMES
        );
    }
    let exe = std::env::current_exe()?;
    let rows = duality_bench::tasks::run_children(&exe, &a.runtimes, a.count, a.seconds)?;
    if a.json {
        println!("{}", duality_bench::report::json(&rows));
    } else {
        println!("{}", duality_bench::tasks::table(&rows));
    }
    Ok(())
}
