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
    /// Helpers the benchmarks start as separate processes.
    #[command(subcommand, hide = true)]
    Internal(Internal),
}

#[derive(Subcommand)]
enum Internal {
    /// The models' test service, until SIGTERM/SIGINT.
    EchoServer(EchoServerArgs),
}

#[derive(Args)]
struct EchoServerArgs {
    /// Threading model.
    #[arg(long, default_value = "symped")]
    model: duality_models::Model,
    /// Unix socket path.
    #[arg(long)]
    unix: Option<std::path::PathBuf>,
    /// TCP address.
    #[arg(long)]
    tcp: Option<std::net::SocketAddr>,
    /// Payload work per request (hash-loop iterations).
    #[arg(long, default_value_t = 200)]
    work: u64,
}

#[derive(Subcommand)]
enum Bench {
    /// Bytes per task and yields/s: duality vs tokio, smol and OS threads.
    Tasks(TasksArgs),
    /// Requests/s and context switches per request under every threading model.
    Models(ModelsArgs),
}

#[derive(Args)]
struct ModelsArgs {
    /// Which server: `echo` (the models' test service).
    #[arg(long, default_value = "echo")]
    service: String,
    /// Comma-separated models (default: every model with this machine's numbers).
    #[arg(long, value_delimiter = ',')]
    models: Vec<duality_models::Model>,
    /// Comma-separated client connection counts.
    #[arg(long, value_delimiter = ',', default_value = "1,8,40,120")]
    connections: Vec<usize>,
    /// Seconds measured per point (after 0.3 s of warm-up).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
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
        Command::Bench(Bench::Models(a)) => bench_models(a),
        Command::Internal(Internal::EchoServer(a)) => echo_server(a),
    }
}

/// Blocks until SIGTERM or SIGINT.
fn wait_for_termination() -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    signals.forever().next();
    Ok(())
}

fn echo_server(a: EchoServerArgs) -> anyhow::Result<()> {
    let mut b = duality_models::ServerBuilder::new()
        .model(a.model)
        .max_conns(10_000);
    if let Some(p) = &a.unix {
        b = b.unix(p);
    }
    if let Some(t) = a.tcp {
        b = b.tcp(t);
    }
    let d = duality_models::echo::Detector::new(a.work);
    let server = b.serve(move |c, p| duality_models::echo::serve(c, p, d.clone()))?;
    println!("ready {:?}", server.tcp_addrs());
    wait_for_termination()?;
    server.shutdown(Duration::from_secs(5));
    Ok(())
}

fn bench_models(a: ModelsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.service == "echo",
        "unknown --service {:?}; available: echo",
        a.service
    );
    anyhow::ensure!(a.seconds > 0.0, "--seconds must be positive");
    let models: Vec<String> = if a.models.is_empty() {
        duality_models::Model::all_defaults()
            .iter()
            .map(|m| m.to_string())
            .collect()
    } else {
        a.models.iter().map(|m| m.to_string()).collect()
    };
    let exe = std::env::current_exe()?;
    let rows =
        duality_bench::models_echo::run(&exe, &models, &a.connections, a.seconds, &mut |r| {
            eprintln!(
                "{} x{}: {:.0} req/s, {:.3} ctx/req",
                r.model, r.connections, r.requests_per_sec, r.ctx_switches_per_request
            )
        })?;
    if a.json {
        println!("{}", duality_bench::report::json(&rows));
    } else {
        println!("{}", duality_bench::models_echo::table(&rows));
    }
    Ok(())
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
