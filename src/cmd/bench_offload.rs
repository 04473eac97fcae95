//! `duality bench offload`: seed 002 — 1% of requests gzip a large file
//! (milliseconds of CPU); compression inline, on the CPU pool or adaptive,
//! against nginx with `gzip on`, open loop at fractions of the measured
//! capacity. See `duality_bench::offload`.

use clap::Args;
use duality_bench::offload::{self, Mix, Plan};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct OffloadArgs {
    /// duality's threading model (more than one loop where the cores allow).
    #[arg(long, default_value = "symped")]
    model: duality_models::Model,
    /// Comma-separated offered loads, percent of the measured capacity.
    #[arg(long, value_delimiter = ',', default_value = "50,80")]
    loads: Vec<u32>,
    /// Requests/s taken as capacity instead of probing `duality inline`.
    #[arg(long)]
    capacity: Option<f64>,
    /// Seconds measured per row.
    #[arg(long, default_value_t = 10.0, value_parser = super::parse_seconds)]
    seconds: f64,
    /// Seconds of load before each window (sent, not counted).
    #[arg(long, default_value_t = 1.0, value_parser = super::parse_seconds)]
    warmup: f64,
    /// Seconds of the closed-loop capacity probe (and, halved, of each
    /// server's warm-up).
    #[arg(long, default_value_t = 3.0, value_parser = super::parse_seconds)]
    probe_seconds: f64,
    /// Client threads (each holds one keep-alive connection).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Percent of requests that ask for a large file with gzip.
    #[arg(long, default_value_t = 1.0)]
    heavy_pct: f64,
    /// Percent of requests sent on a connection of their own.
    #[arg(long, default_value_t = 10)]
    new_conn_pct: u64,
    /// Size of each large JSON file, KiB.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    heavy_kib: u64,
    /// Number of large files.
    #[arg(long, default_value_t = 4)]
    heavy_files: usize,
    /// Number of small (1-4 KiB) files.
    #[arg(long, default_value_t = 1000)]
    small_files: usize,
    /// duality's CPU pool threads (`duality http --cpu-threads`; default:
    /// the server's, one per core).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    cpu_threads: Option<u16>,
    /// nginx's worker processes (default: the cores).
    #[arg(long)]
    nginx_workers: Option<usize>,
    /// Leave nginx out.
    #[arg(long)]
    no_nginx: bool,
    /// Seed of the request mix.
    #[arg(long, default_value_t = 2)]
    seed: u64,
    /// A smoke run of seconds: 0.8 s per row, 256 KiB large files.
    #[arg(long)]
    quick: bool,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Results directory (default: results/offload-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        v.is_finite() && v >= 0.0,
        "--{name} must be a number of seconds"
    );
    Ok(Duration::from_secs_f64(v))
}

pub fn run(a: OffloadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!a.loads.is_empty(), "--loads needs at least one value");
    anyhow::ensure!(
        a.loads.iter().all(|&l| (1..=1000).contains(&l)),
        "--loads are percentages between 1 and 1000"
    );
    anyhow::ensure!(
        (0.0..=100.0).contains(&a.heavy_pct),
        "--heavy-pct must be between 0 and 100"
    );
    anyhow::ensure!(a.new_conn_pct <= 100, "--new-conn-pct must be at most 100");
    anyhow::ensure!(a.clients >= 1, "--clients must be at least 1");
    if let Some(c) = a.capacity {
        anyhow::ensure!(c.is_finite() && c > 0.0, "--capacity must be positive");
    }
    let dir = super::results_dir(a.out.as_deref(), "offload")?;
    let plan = Plan {
        exe: std::env::current_exe()?,
        model: a.model.to_string(),
        cpu_threads: a.cpu_threads.map(usize::from),
        nginx_workers: a.nginx_workers.unwrap_or_else(duality_models::cores),
        loads: a.loads.clone(),
        capacity: a.capacity,
        probe: secs("probe-seconds", if a.quick { 0.6 } else { a.probe_seconds })?
            .max(Duration::from_millis(100)),
        warmup: secs("warmup", if a.quick { 0.2 } else { a.warmup })?,
        measure: secs("seconds", if a.quick { 0.8 } else { a.seconds })?
            .max(Duration::from_millis(100)),
        drain: Duration::from_secs(if a.quick { 2 } else { 5 }),
        clients: if a.quick {
            a.clients.min(16)
        } else {
            a.clients
        },
        small_files: if a.quick { 200 } else { a.small_files },
        heavy_files: if a.quick { 2 } else { a.heavy_files },
        heavy_bytes: if a.quick { 256 } else { a.heavy_kib as usize } << 10,
        mix: Mix {
            small: 0,
            heavy: 0,
            heavy_bp: (a.heavy_pct * 100.0).round() as u64,
            new_conn_pct: a.new_conn_pct,
            seed: a.seed,
        },
        no_nginx: a.no_nginx,
    };
    let report = offload::run(&plan, &mut |line| eprintln!("{line}"))?;
    let rows = &report.rows;
    let goals = offload::goals(rows);
    let cmd: Vec<String> = std::env::args().collect();
    let md = format!(
        "# Offload: 1% gzip requests and everybody else's p99 (seed 002)\n\n\
Command: `{}`\n\n\
Machine: {} cores; the load generator (this process, {} client threads) and the server share them, TCP loopback.\n\n\
Workload: {} small HTML files (1-4 KiB, page-cache hits, requested without `Accept-Encoding`) and {} JSON files of {} KiB requested with `Accept-Encoding: gzip` ({}% of requests; duality `--gzip on --gzip-cache 0 --model {}`, so each costs a compression at level 1; nginx `gzip on; gzip_comp_level 1`, {} workers); {}% of requests open a connection of their own. \
Open loop: request *i* is due at *i*/rate and its latency counts from then (no coordinated omission); {:.1} s of warm-up, then {:.1} s measured per row. \
Capacity: {:.0} requests/s ({}); each load is a percentage of it, the same for every server.\n\n\
Columns: latencies in ms, client side from the due time to the whole response; TTFB (client) from the due time to the first response byte, every request; TTFB (server), accept latency (acceptor to the connection's first poll on its loop) and loop hold (per request, the longest single poll of its loop serving it) from duality's Prometheus histograms over the window, quantiles interpolated inside buckets as Prometheus does (nginx has none: `-`). With 1% heavy requests, the loop hold's p99.9 is theirs. `duality adaptive, no heavy` is the same schedule with every heavy request replaced by a cheap one.\n\n\
{}\n**Each p99 as a percentage of `duality inline`'s at the same load** (the seed's figures: 100% is the baseline)\n\n{}\n**Goals (issue 12)**\n\n{}",
        cmd.join(" "),
        duality_models::cores(),
        plan.clients,
        plan.small_files,
        plan.heavy_files,
        plan.heavy_bytes >> 10,
        a.heavy_pct,
        match plan.cpu_threads {
            Some(n) => format!("{} --cpu-threads {n}", plan.model),
            None => plan.model.clone(),
        },
        plan.nginx_workers,
        a.new_conn_pct,
        plan.warmup.as_secs_f64(),
        plan.measure.as_secs_f64(),
        report.capacity,
        if report.probed {
            "closed-loop probe of duality inline on the same mix"
        } else {
            "given with --capacity"
        },
        offload::table(rows),
        offload::relative_table(rows),
        offload::goals_text(&goals),
    );
    std::fs::write(dir.join("offload.md"), &md)?;
    std::fs::write(dir.join("offload.json"), duality_bench::report::json(rows))?;
    std::fs::write(dir.join("offload.csv"), offload::csv(rows))?;
    match offload::plots(rows, &dir) {
        Ok(files) => {
            for f in files {
                eprintln!("plot {}", f.display());
            }
        }
        Err(e) => eprintln!("no plot: {e:#}"),
    }
    if a.json {
        println!("{}", duality_bench::report::json(rows));
    } else {
        println!("{}", offload::table(rows));
        println!("{}", offload::relative_table(rows));
    }
    eprint!("goals:\n{}", offload::goals_text(&goals));
    eprintln!("results in {}", dir.display());
    Ok(())
}
