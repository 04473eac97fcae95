//! `duality bench store`: the cache's memory under size waves, bytes per
//! item and hit ratio under Zipf keys, against memcached at the same `-m`.
//! See `duality_bench::store`.

use clap::Args;
use duality_bench::servers::{memcached_path, ServerKind};
use duality_bench::store::{self, Plan};
use std::path::PathBuf;

#[derive(Args)]
pub struct StoreArgs {
    /// The duality model serving the cache.
    #[arg(long, default_value = "sped")]
    model: String,
    /// Leave out memcached.
    #[arg(long)]
    no_peers: bool,
    /// `-m` for the size waves, MiB.
    #[arg(long, default_value_t = 16)]
    wave_limit: u64,
    /// Items written for the bytes-per-item figure.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    items: u64,
    /// Keys in the hit-ratio working set (values of 10-103 bytes).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    keys: u64,
    /// Counted gets per hit-ratio point (as many again warm the cache).
    #[arg(long, default_value_t = 2_000_000)]
    requests: usize,
    /// Comma-separated Zipf skews.
    #[arg(long, value_delimiter = ',', default_value = "0.8,1.0,1.2")]
    skews: Vec<f64>,
    /// Comma-separated cache sizes, as fractions of the working set.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.5")]
    fractions: Vec<f64>,
    /// A smoke run that finishes in seconds.
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of Markdown tables.
    #[arg(long)]
    json: bool,
    /// Results directory (default: results/store-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: StoreArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    duality_bench::servers::check_duality_spec(&a.model).context("--model")?;
    for &s in &a.skews {
        anyhow::ensure!(s > 0.0 && s.is_finite(), "--skews must be positive");
    }
    for &f in &a.fractions {
        anyhow::ensure!(f > 0.0 && f <= 1.0, "--fractions must be in (0, 1]");
    }
    anyhow::ensure!(a.wave_limit >= 4, "--wave-limit must be at least 4 MiB");
    let mut servers = vec![ServerKind::Duality(a.model.clone())];
    if !a.no_peers {
        match memcached_path() {
            Some(_) => servers.push(ServerKind::Memcached(1)),
            None => eprintln!("memcached is not installed: duality only"),
        }
    }
    let dir = super::results_dir(a.out.as_deref(), "store")?;
    let exe = std::env::current_exe()?;
    let plan = if a.quick {
        Plan {
            exe: &exe,
            servers,
            wave_limit_mib: 4,
            wave_sizes: vec![100_000, 500, 300_000],
            items: 20_000,
            keys: 20_000,
            requests: 5_000,
            skews: vec![1.0],
            fractions: vec![0.5],
        }
    } else {
        Plan {
            exe: &exe,
            servers,
            wave_limit_mib: a.wave_limit,
            wave_sizes: vec![100_000, 1000, 300_000, 500, 50_000, 100, 200_000, 2000],
            items: a.items as usize,
            keys: a.keys as usize,
            requests: a.requests.max(64),
            skews: a.skews.clone(),
            fractions: a.fractions.clone(),
        }
    };
    let results = store::run(&plan, &mut |line| eprintln!("{line}"))?;
    let cmd: Vec<String> = std::env::args().collect();
    let md = format!(
        "# The store: memory under size waves, bytes per item, hit ratio\n\nCommand: `{}`\n\nMachine: {} cores. One server at a time, on a Unix socket, the client pipelining; memcached gets the same `-m`. Size waves: each wave writes twice the limit in values of one size. Bytes per item: resident memory growth over the items written (keys `rec:NNNNNN`, values of 10-103 bytes, log-distributed), less their keys and values, per item stored. Hit ratio: `get` of Zipf-distributed keys, `set` on a miss; the first half of the gets warm the cache and are not counted.\n\n{}",
        cmd.join(" "),
        duality_models::cores(),
        store::tables(&results)
    );
    std::fs::write(dir.join("store.md"), &md)?;
    let json = serde_json::to_string_pretty(&results)?;
    std::fs::write(dir.join("store.json"), &json)?;
    for (name, body) in store::csv(&results) {
        std::fs::write(dir.join(name), body)?;
    }
    let plots = [
        (
            "hit-ratio",
            "Hit ratio vs Zipf skew (demand-filled cache)",
            "zipf skew",
            "hit ratio",
            store::hit_series(&results),
        ),
        (
            "waves",
            "Resident memory after each size wave",
            "wave",
            "RSS (MiB)",
            store::wave_series(&results),
        ),
    ];
    for (file, title, x, y, series) in plots {
        if let Err(e) =
            duality_bench::plot::line_chart(&dir.join(file), title, x, y, &series, false)
        {
            eprintln!("no {file} plot: {e}");
        }
    }
    if a.json {
        println!("{json}");
    } else {
        println!("{}", store::tables(&results));
    }
    eprintln!("results in {}", dir.display());
    Ok(())
}
