//! `duality`: the command-line entry point. It only composes the crates:
//! servers come from `duality-kv` / `duality-http`, experiments from
//! `duality-bench`.

use clap::{Args, Parser, Subcommand};
use std::time::Duration;

// Small, size-classed allocations without per-object headers: a 32-byte task
// costs 32 bytes. Every runtime measured in one process shares it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "duality",
    version,
    about = "One runtime, seven threading models, two servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks and experiments, each with its peers in the same run.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum Bench {
    /// Bytes per task and yields/s: duality vs tokio, smol and OS threads.
    Tasks(TasksArgs),
}

#[derive(Args)]
struct TasksArgs {
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

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Bench(Bench::Tasks(a)) => bench_tasks(a),
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
