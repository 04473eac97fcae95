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
    /// Seconds measured per row (at least 0.1). Default 10 (`--quick`: 0.8).
    #[arg(long, value_parser = super::parse_seconds)]
    seconds: Option<f64>,
    /// Seconds of load before each window (sent, not counted). Default 1
    /// (`--quick`: 0.2).
    #[arg(long, value_parser = super::parse_seconds)]
    warmup: Option<f64>,
    /// Seconds of the closed-loop capacity probe (and, halved, of each
    /// server's warm-up; at least 0.1). Default 3 (`--quick`: 0.6).
    #[arg(long, value_parser = super::parse_seconds)]
    probe_seconds: Option<f64>,
    /// Slices `duality adaptive` and its no-heavy baseline are each measured
    /// in, taking turns on the same server (A B, B A, A B, …; each slice
    /// warmed up as a row is, `--seconds` split between them), so the
    /// host's drift over the pair falls on both alike; 1: one window each,
    /// one after the other. Default 4 (`--quick`: 2).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    slices: Option<u32>,
    /// Client threads (each holds one keep-alive connection). Default 32
    /// (`--quick`: 16).
    #[arg(long, value_parser = super::bench::positive)]
    clients: Option<usize>,
    /// Percent of requests that ask for a large file with gzip.
    #[arg(long, default_value_t = 1.0)]
    heavy_pct: f64,
    /// Percent of requests sent on a connection of their own.
    #[arg(long, default_value_t = 10)]
    new_conn_pct: u64,
    /// Size of each large JSON file, KiB. Default 2048 (`--quick`: 256).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    heavy_kib: Option<u64>,
    /// Number of large files. Default 4 (`--quick`: 2).
    #[arg(long, value_parser = super::bench::positive)]
    heavy_files: Option<usize>,
    /// Number of small (1-4 KiB) files. Default 1000 (`--quick`: 200).
    #[arg(long, value_parser = super::bench::positive)]
    small_files: Option<usize>,
    /// duality's CPU pool threads (`duality http --cpu-threads`; default:
    /// the server's, one per core).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    cpu_threads: Option<u16>,
    /// nginx's worker processes, 1-1024 (nginx runs at most 1,024;
    /// default: the cores).
    #[arg(long, value_parser = super::bench::positive)]
    nginx_workers: Option<usize>,
    /// duality's gzip level, 1-9 (`duality http --gzip-level`). nginx runs
    /// at level 1 (`gzip_comp_level 1`), zlib's `deflate_fast`; duality's
    /// level 1 is zlib-rs's quicker strategy, whose output is larger, and
    /// its level 2 is `deflate_fast`: 2 makes both servers do like work
    /// (the table's "heavy body KiB" shows what each made of the files).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    gzip_level: u32,
    /// Leave nginx out.
    #[arg(long)]
    no_nginx: bool,
    /// Seed of the request mix.
    #[arg(long, default_value_t = 2)]
    seed: u64,
    /// A smoke run of seconds: 0.8 s per row, 256 KiB large files, 16
    /// clients (each where the flag that sets it is not given: --seconds,
    /// --warmup, --probe-seconds, --slices, --clients, --heavy-kib,
    /// --heavy-files, --small-files).
    #[arg(long)]
    quick: bool,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Results directory (default: results/offload-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The shortest window and probe `--help` promises to measure: a row of
/// 0.05 s was run as 0.1 s and reported as asked.
const MIN_SECONDS: f64 = 0.1;

/// A flag in seconds of at least `min`, as a duration.
fn secs(name: &str, v: f64, min: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        v.is_finite() && v >= min,
        "--{name} {v}: must be a number of seconds{}",
        if min > 0.0 {
            format!(", at least {min}")
        } else {
            String::new()
        }
    );
    Ok(Duration::from_secs_f64(v))
}

/// What a run measures: each flag given, else the preset of `--quick` (a
/// flag given wins over it) or of a full run. How long the servers get to
/// drain between rows has no flag: `--quick` shortens it.
#[derive(Debug, PartialEq)]
struct Settings {
    seconds: f64,
    warmup: f64,
    probe_seconds: f64,
    slices: u32,
    drain: Duration,
    clients: usize,
    small_files: usize,
    heavy_files: usize,
    heavy_kib: u64,
}

impl OffloadArgs {
    fn settings(&self) -> Settings {
        let q = self.quick;
        Settings {
            seconds: self.seconds.unwrap_or(if q { 0.8 } else { 10.0 }),
            warmup: self.warmup.unwrap_or(if q { 0.2 } else { 1.0 }),
            probe_seconds: self.probe_seconds.unwrap_or(if q { 0.6 } else { 3.0 }),
            slices: self.slices.unwrap_or(if q { 2 } else { 4 }),
            drain: Duration::from_secs(if q { 2 } else { 5 }),
            clients: self.clients.unwrap_or(if q { 16 } else { 32 }),
            small_files: self.small_files.unwrap_or(if q { 200 } else { 1000 }),
            heavy_files: self.heavy_files.unwrap_or(if q { 2 } else { 4 }),
            heavy_kib: self.heavy_kib.unwrap_or(if q { 256 } else { 2048 }),
        }
    }
}

pub fn run(a: OffloadArgs) -> anyhow::Result<()> {
    let s = a.settings();
    if let Some(w) = a.nginx_workers {
        anyhow::ensure!(
            w <= duality_bench::http::MAX_NGINX_WORKERS,
            "--nginx-workers {w}: nginx runs at most {} workers",
            duality_bench::http::MAX_NGINX_WORKERS
        );
    }
    anyhow::ensure!(
        !(a.no_nginx && a.nginx_workers.is_some()),
        "--nginx-workers does not apply with --no-nginx"
    );
    // Each client thread holds a connection, and one more for each request
    // sent on a connection of its own.
    duality_bench::limits::check_descriptors(
        "--clients",
        s.clients as u64,
        2,
        0,
        duality_bench::http::raise_fd_limit(),
    )?;
    // The files are written to the temp dir: small ones under 4 KiB.
    let bytes = (s.heavy_files as u64)
        .saturating_mul(s.heavy_kib << 10)
        .saturating_add((s.small_files as u64).saturating_mul(4096));
    duality_bench::limits::ensure_space(
        &format!(
            "--heavy-files {} --heavy-kib {} --small-files {}",
            s.heavy_files, s.heavy_kib, s.small_files
        ),
        &std::env::temp_dir(),
        bytes,
    )?;
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
    if let Some(c) = a.capacity {
        anyhow::ensure!(c.is_finite() && c > 0.0, "--capacity must be positive");
    }
    let probe = secs("probe-seconds", s.probe_seconds, MIN_SECONDS)?;
    let warmup = secs("warmup", s.warmup, 0.0)?;
    let measure = secs("seconds", s.seconds, MIN_SECONDS)?;
    anyhow::ensure!(
        s.seconds / f64::from(s.slices) >= MIN_SECONDS,
        "--seconds {} in --slices {}: a slice must be at least {MIN_SECONDS} s",
        s.seconds,
        s.slices
    );
    let dir = super::bench::results_dir(a.out.as_deref(), "offload")?;
    let plan = Plan {
        exe: std::env::current_exe()?,
        model: a.model.to_string(),
        cpu_threads: a.cpu_threads.map(usize::from),
        nginx_workers: a.nginx_workers.unwrap_or_else(duality_models::cores),
        loads: a.loads.clone(),
        capacity: a.capacity,
        probe,
        warmup,
        measure,
        drain: s.drain,
        clients: s.clients,
        small_files: s.small_files,
        heavy_files: s.heavy_files,
        heavy_bytes: (s.heavy_kib as usize) << 10,
        mix: Mix {
            small: 0,
            heavy: 0,
            heavy_bp: (a.heavy_pct * 100.0).round() as u64,
            new_conn_pct: a.new_conn_pct,
            seed: a.seed,
        },
        no_nginx: a.no_nginx,
        gzip_level: a.gzip_level,
        slices: s.slices,
    };
    let report = offload::run(&plan, &mut |line| duality_rt::say!("{line}"))?;
    let rows = &report.rows;
    let goals = offload::goals(rows);
    // A server that answered nothing at a load (a peer that hangs): said in
    // the results, and the run fails once they are written, as `bench http`.
    let failures: Vec<String> = rows
        .iter()
        .filter(|r| r.requests_per_sec == 0.0)
        .map(|r| format!("{} answered nothing at {}%", r.server, r.load_pct))
        .collect();
    let cmd = super::command_line();
    let mut md = format!(
        "# Offload: 1% gzip requests and everybody else's p99 (seed 002)\n\n\
Command: `{}`\n\n\
Machine: {} cores; the load generator (this process, {} client threads) and the server share them, TCP loopback.\n\n\
Workload: {} small HTML files (1-4 KiB, page-cache hits, requested without `Accept-Encoding`) and {} JSON files of {} KiB requested with `Accept-Encoding: gzip` ({}% of requests; duality `--gzip on --gzip-cache 0 --model {}`, so each costs a compression at level {}; nginx `gzip on; gzip_comp_level 1`, {} workers; a level's work shows in its bytes: heavy body KiB); {}% of requests open a connection of their own. \
Open loop: request *i* is due at *i*/rate and its latency counts from then (no coordinated omission); {:.1} s of warm-up, then {:.1} s measured per row. \
Capacity: {:.0} requests/s ({}); each load is a percentage of it, the same for every server.\n\n\
Columns: latencies in ms, client side from the due time to the whole response; TTFB (client) from the due time to the first response byte, every request; TTFB (server), accept latency (acceptor to the connection's first poll on its loop) and loop hold (per request, the longest single poll of its loop serving it) from duality's Prometheus histograms over the window, quantiles interpolated inside buckets as Prometheus does (nginx has none: `-`). With 1% heavy requests, the loop hold's p99.9 is theirs. `duality adaptive, no heavy` is the same schedule with every heavy request replaced by a cheap one, on the same server as `duality adaptive`: {}.\n\n\
{}\n**Each p99 as a percentage of `duality inline`'s at the same load** (the seed's figures: 100% is the baseline)\n\n{}\n**Goals (issue 12)**\n\n{}",
        cmd,
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
        plan.gzip_level,
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
        if plan.slices > 1 {
            format!(
                "the two rows were measured in {} slices each of {:.2} s (each after its own warm-up), taking turns (A B, B A, …), and each row merges its slices",
                plan.slices,
                plan.measure.as_secs_f64() / f64::from(plan.slices)
            )
        } else {
            "measured right after it".to_owned()
        },
        offload::table(rows),
        offload::relative_table(rows),
        offload::goals_text(&goals),
    );
    for f in &failures {
        md.push_str(&format!("\nNote: {f}.\n"));
    }
    duality_bench::report::write(&dir.join("offload.md"), &md)?;
    duality_bench::report::write(&dir.join("offload.json"), duality_bench::report::json(rows))?;
    duality_bench::report::write(&dir.join("offload.csv"), offload::csv(rows))?;
    match offload::plots(rows, &dir) {
        Ok(files) => {
            for f in files {
                duality_rt::say!("plot {}", f.display());
            }
        }
        Err(e) => duality_rt::say!("no plot: {e:#}"),
    }
    if a.json {
        duality_bench::report::print(&duality_bench::report::json(rows));
    } else {
        duality_bench::report::print(&offload::table(rows));
        duality_bench::report::print(&offload::relative_table(rows));
    }
    duality_rt::say!("goals:\n{}", offload::goals_text(&goals).trim_end());
    duality_rt::say!("results in {}", dir.display());
    anyhow::ensure!(
        failures.is_empty(),
        "{}; the results mark those rows",
        failures.join("; ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{OffloadArgs, Settings};
    use std::time::Duration;

    fn settings(args: &[&str]) -> Settings {
        super::super::bench::parse_args::<OffloadArgs>(args)
            .unwrap()
            .settings()
    }

    fn quick() -> Settings {
        Settings {
            seconds: 0.8,
            warmup: 0.2,
            probe_seconds: 0.6,
            slices: 2,
            drain: Duration::from_secs(2),
            clients: 16,
            small_files: 200,
            heavy_files: 2,
            heavy_kib: 256,
        }
    }

    #[test]
    fn quick_presets_only_what_is_not_given() {
        let full = Settings {
            seconds: 10.0,
            warmup: 1.0,
            probe_seconds: 3.0,
            slices: 4,
            drain: Duration::from_secs(5),
            clients: 32,
            small_files: 1000,
            heavy_files: 4,
            heavy_kib: 2048,
        };
        assert_eq!(settings(&[]), full);
        assert_eq!(settings(&["--quick"]), quick());
        for (flags, want) in [
            (
                &["--quick", "--seconds", "2", "--warmup", "0"][..],
                Settings {
                    seconds: 2.0,
                    warmup: 0.0,
                    ..quick()
                },
            ),
            (
                &["--probe-seconds", "1", "--quick"],
                Settings {
                    probe_seconds: 1.0,
                    ..quick()
                },
            ),
            // More clients than the preset's: before, --quick cut them to 16.
            (
                &["--quick", "--clients", "64"],
                Settings {
                    clients: 64,
                    ..quick()
                },
            ),
            (
                &["--quick", "--heavy-kib", "1024", "--heavy-files", "3"],
                Settings {
                    heavy_kib: 1024,
                    heavy_files: 3,
                    ..quick()
                },
            ),
            (
                &["--quick", "--small-files", "50"],
                Settings {
                    small_files: 50,
                    ..quick()
                },
            ),
            (&["--clients", "8"], Settings { clients: 8, ..full }),
            (
                &["--quick", "--slices", "1"],
                Settings {
                    slices: 1,
                    ..quick()
                },
            ),
        ] {
            assert_eq!(settings(flags), want, "{flags:?}");
        }
    }
}
