//! `duality bench soak`: well-behaved clients beside floods, slowloris,
//! resets and connection churn, for a bounded time, against the cache and
//! the web server. See `duality_bench::soak`.

use clap::Args;
use duality_bench::soak::{self, Mix, Plan};
use std::path::PathBuf;

#[derive(Args)]
pub struct SoakArgs {
    /// Seconds per server, above 0 and at most 86,400. Default 60
    /// (`--quick`: 3).
    #[arg(long, value_parser = super::bench::parse_positive_seconds)]
    seconds: Option<f64>,
    /// Comma-separated services: kv, http.
    #[arg(long, value_delimiter = ',', default_value = "kv,http")]
    services: Vec<String>,
    /// The servers' threading model.
    #[arg(long, default_value = "symped")]
    model: duality_models::Model,
    /// Well-behaved clients.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    good: u64,
    /// Clients pipelining requests without pause (two descriptors each).
    #[arg(long, default_value_t = 2)]
    floods: usize,
    /// Slowloris connections (one byte every 200 ms). The load generator's
    /// descriptors (good, slow, two per flood, resets, churn) are refused
    /// past the file limit less 256.
    #[arg(long, default_value_t = 50)]
    slow: usize,
    /// Threads resetting connections in the middle of a request.
    #[arg(long, default_value_t = 1)]
    resets: usize,
    /// Threads opening a connection per request.
    #[arg(long, default_value_t = 1)]
    churn: usize,
    /// A smoke run: 3 s per server (where --seconds is not given).
    #[arg(long)]
    quick: bool,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Results directory (default: results/soak-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: SoakArgs) -> anyhow::Result<()> {
    for s in &a.services {
        anyhow::ensure!(
            s == "kv" || s == "http",
            "unknown service {s:?}: choose kv, http"
        );
    }
    let seconds = a.seconds.unwrap_or(if a.quick { 3.0 } else { 60.0 });
    anyhow::ensure!(
        seconds.is_finite() && seconds > 0.0 && seconds <= 24.0 * 3600.0,
        "--seconds must be a positive number of seconds (at most a day)"
    );
    let mix = Mix {
        good: a.good as usize,
        floods: a.floods,
        slow: a.slow,
        resets: a.resets,
        churn: a.churn,
    };
    mix.check(duality_bench::limits::fd_limit())?;
    let dir = super::bench::results_dir(a.out.as_deref(), "soak")?;
    let exe = std::env::current_exe()?;
    let plan = Plan {
        exe: &exe,
        services: a.services.clone(),
        model: a.model.to_string(),
        seconds,
        mix,
    };
    let rows = soak::run(&plan, &mut |r| {
        let kib = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| format!("{v} KiB"));
        duality_rt::say!(
            "{} {}: {} good requests, {} errors, p99 {:.2} ms, RSS {} -> {}",
            r.service,
            r.server,
            r.good_requests,
            r.good_errors,
            r.good_p99_ms,
            kib(r.rss_warm_kib),
            match &r.exited {
                Some(how) => format!("- (the server {how})"),
                None => kib(r.rss_end_kib),
            }
        )
    })?;
    let cmd = super::command_line();
    let m = plan.mix;
    let md = format!(
        "# Soak: good clients beside hostile ones\n\nCommand: `{}`\n\nMachine: {} cores, clients and servers on the same machine, TCP loopback. Per server, {seconds} s: {} good clients (each request's answer checked), {} flooders, {} slowloris connections, {} resetting and {} churning threads. RSS sampled every 250 ms (warm: after the first fifth of the run).\n\n{}",
        cmd,
        duality_models::cores(),
        m.good,
        m.floods,
        m.slow,
        m.resets,
        m.churn,
        soak::table(&rows)
    );
    duality_bench::report::write(&dir.join("soak.md"), &md)?;
    duality_bench::report::write(&dir.join("soak.json"), duality_bench::report::json(&rows))?;
    if a.json {
        duality_bench::report::print(&duality_bench::report::json(&rows));
    } else {
        duality_bench::report::print(&soak::table(&rows));
    }
    duality_rt::say!("results in {}", dir.display());
    // A server that died was not soaked: the run fails (after writing its
    // results), as where good clients lost requests.
    let died: Vec<String> = rows
        .iter()
        .filter_map(|r| Some(format!("{} {} {}", r.service, r.server, r.exited.as_ref()?)))
        .collect();
    anyhow::ensure!(
        died.is_empty(),
        "servers exited during the soak ({})",
        died.join(", ")
    );
    // The soak's question is whether good clients lose anything: a run
    // where they did fails (after writing its results).
    let lost: Vec<String> = rows
        .iter()
        .filter(|r| r.good_errors > 0)
        .map(|r| format!("{} {}: {}", r.service, r.server, r.good_errors))
        .collect();
    anyhow::ensure!(
        lost.is_empty(),
        "good clients saw errors ({})",
        lost.join(", ")
    );
    Ok(())
}
