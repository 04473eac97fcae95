//! `duality bench store`: the cache's memory under size waves, bytes per
//! item and hit ratio under Zipf keys, against memcached at the same `-m`.
//! See `duality_bench::store`.

use super::bench::given_or;
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
    /// `-m` for the size waves, MiB, at least 4; refused past the memory
    /// available. Default 16 (`--quick`: 4).
    #[arg(long)]
    wave_limit: Option<u64>,
    /// Items written for the bytes-per-item figure. Default 1,000,000
    /// (`--quick`: 20,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    items: Option<u64>,
    /// Keys in the hit-ratio working set (values of 10-103 bytes, about 50
    /// bytes a key with the key). Default 1,000,000 (`--quick`: 200,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    keys: Option<u64>,
    /// Counted gets per hit-ratio point (as many again warm the cache), at
    /// least 64 (they go in batches of 64). Default 2,000,000 (`--quick`:
    /// 20,000).
    #[arg(long)]
    requests: Option<usize>,
    /// Comma-separated Zipf skews. Default 0.8,1.0,1.2 (`--quick`: 1.0).
    #[arg(long, value_delimiter = ',')]
    skews: Vec<f64>,
    /// Comma-separated cache sizes, as fractions of the working set; a
    /// cache below 4 MiB (the smallest `-m`) is refused. Default 0.1,0.5
    /// (`--quick`: 0.5).
    #[arg(long, value_delimiter = ',')]
    fractions: Vec<f64>,
    /// A smoke run that finishes in seconds: its small limits, data sets
    /// and request counts stand where the flags that set them are not given.
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of Markdown tables.
    #[arg(long)]
    json: bool,
    /// Results directory (default: results/store-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// What a run measures: each flag given, else the preset of `--quick` (a
/// flag given wins over it) or of a full run. The waves' value sizes have
/// no flag: `--quick` runs three of them.
#[derive(Debug, PartialEq)]
struct Settings {
    wave_limit: u64,
    wave_sizes: Vec<usize>,
    items: u64,
    keys: u64,
    requests: usize,
    skews: Vec<f64>,
    fractions: Vec<f64>,
}

impl StoreArgs {
    fn settings(&self) -> Settings {
        let q = self.quick;
        Settings {
            wave_limit: self.wave_limit.unwrap_or(if q { 4 } else { 16 }),
            wave_sizes: if q {
                vec![100_000, 500, 300_000]
            } else {
                vec![100_000, 1000, 300_000, 500, 50_000, 100, 200_000, 2000]
            },
            items: self.items.unwrap_or(if q { 20_000 } else { 1_000_000 }),
            keys: self.keys.unwrap_or(if q { 200_000 } else { 1_000_000 }),
            requests: self.requests.unwrap_or(if q { 20_000 } else { 2_000_000 }),
            skews: given_or(&self.skews, q, &[1.0], &[0.8, 1.0, 1.2]),
            fractions: given_or(&self.fractions, q, &[0.5], &[0.1, 0.5]),
        }
    }
}

impl Settings {
    /// Refuses what the run cannot measure as asked, before anything runs.
    fn check(&self, mem_available: Option<u64>) -> anyhow::Result<()> {
        for &s in &self.skews {
            anyhow::ensure!(s > 0.0 && s.is_finite(), "--skews must be positive");
        }
        for &f in &self.fractions {
            anyhow::ensure!(f > 0.0 && f <= 1.0, "--fractions must be in (0, 1]");
        }
        anyhow::ensure!(
            self.wave_limit >= store::MIN_LIMIT_MIB,
            "--wave-limit must be at least {} MiB",
            store::MIN_LIMIT_MIB
        );
        anyhow::ensure!(
            self.requests >= 64,
            "--requests {}: at least 64 (gets go in batches of 64)",
            self.requests
        );
        if let Some(available) = mem_available {
            // Each measure alone: the servers run one at a time.
            for (what, need) in [
                (
                    format!("--wave-limit {}", self.wave_limit),
                    store::memory_needed(self.wave_limit, 0, 0),
                ),
                (
                    format!("--items {}", self.items),
                    store::memory_needed(0, self.items, 0),
                ),
                (
                    format!("--keys {}", self.keys),
                    store::memory_needed(0, 0, self.keys),
                ),
            ] {
                duality_bench::limits::check_memory(&what, need, available)?;
            }
        }
        // After the memory: the working set is counted key by key.
        let keys = self.keys as usize;
        store::check_fractions(keys, store::working_set(keys), &self.fractions)?;
        Ok(())
    }
}

pub fn run(a: StoreArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    duality_bench::servers::check_duality_spec(&a.model).context("--model")?;
    let s = a.settings();
    s.check(duality_bench::limits::mem_available())?;
    let mut servers = vec![ServerKind::Duality(a.model.clone())];
    if !a.no_peers {
        match memcached_path() {
            Some(_) => servers.push(ServerKind::Memcached(1)),
            None => duality_rt::say!("memcached is not installed: duality only"),
        }
    }
    let dir = super::bench::results_dir(a.out.as_deref(), "store")?;
    let exe = std::env::current_exe()?;
    let plan = Plan {
        exe: &exe,
        servers,
        wave_limit_mib: s.wave_limit,
        wave_sizes: s.wave_sizes,
        items: s.items as usize,
        keys: s.keys as usize,
        requests: s.requests,
        skews: s.skews,
        fractions: s.fractions,
    };
    let results = store::run(&plan, &mut |line| duality_rt::say!("{line}"))?;
    let cmd = super::command_line();
    let md = format!(
        "# The store: memory under size waves, bytes per item, hit ratio\n\nCommand: `{}`\n\nMachine: {} cores. One server at a time, on a Unix socket, the client pipelining; memcached gets the same `-m`. Size waves: each wave writes twice the limit in values of one size. Bytes per item: resident memory growth over the items written (keys `rec:NNNNNN`, values of 10-103 bytes, log-distributed), less their keys and values, per item stored. Hit ratio: `get` of Zipf-distributed keys, `set` on a miss; the first half of the gets warm the cache and are not counted.\n\n{}",
        cmd,
        duality_models::cores(),
        store::tables(&results)
    );
    duality_bench::report::write(&dir.join("store.md"), &md)?;
    let json = serde_json::to_string_pretty(&results)?;
    duality_bench::report::write(&dir.join("store.json"), &json)?;
    for (name, body) in store::csv(&results) {
        duality_bench::report::write(&dir.join(name), body)?;
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
            duality_rt::say!("no {file} plot: {e}");
        }
    }
    if a.json {
        duality_bench::report::print(&json);
    } else {
        duality_bench::report::print(&store::tables(&results));
    }
    duality_rt::say!("results in {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Settings, StoreArgs};

    fn settings(args: &[&str]) -> Settings {
        super::super::bench::parse_args::<StoreArgs>(args)
            .unwrap()
            .settings()
    }

    fn full() -> Settings {
        Settings {
            wave_limit: 16,
            wave_sizes: vec![100_000, 1000, 300_000, 500, 50_000, 100, 200_000, 2000],
            items: 1_000_000,
            keys: 1_000_000,
            requests: 2_000_000,
            skews: vec![0.8, 1.0, 1.2],
            fractions: vec![0.1, 0.5],
        }
    }

    fn quick() -> Settings {
        Settings {
            wave_limit: 4,
            wave_sizes: vec![100_000, 500, 300_000],
            items: 20_000,
            keys: 200_000,
            requests: 20_000,
            skews: vec![1.0],
            fractions: vec![0.5],
        }
    }

    #[test]
    fn quick_presets_only_what_is_not_given() {
        assert_eq!(settings(&[]), full());
        assert_eq!(settings(&["--quick"]), quick());
        // Before, --quick ignored every one of these.
        assert_eq!(
            settings(&[
                "--quick",
                "--items",
                "5000",
                "--keys",
                "300000",
                "--requests",
                "640",
                "--wave-limit",
                "8",
                "--fractions",
                "0.25",
                "--skews",
                "0.9,1.1",
            ]),
            Settings {
                wave_limit: 8,
                items: 5000,
                keys: 300_000,
                requests: 640,
                skews: vec![0.9, 1.1],
                fractions: vec![0.25],
                ..quick()
            }
        );
        assert_eq!(
            settings(&["--keys", "2000000"]),
            Settings {
                keys: 2_000_000,
                ..full()
            }
        );
    }

    #[test]
    fn the_presets_pass_their_own_checks() {
        let gib = 1u64 << 30;
        settings(&[]).check(Some(4 * gib)).unwrap();
        settings(&["--quick"]).check(Some(gib)).unwrap();
        settings(&["--quick"]).check(None).unwrap();
    }

    #[test]
    fn what_the_run_cannot_measure_as_asked_is_refused() {
        let gib = 1u64 << 30;
        let err = |args: &[&str]| {
            settings(args)
                .check(Some(16 * gib))
                .unwrap_err()
                .to_string()
        };
        // The kv server grew to GBs.
        let e = err(&["--wave-limit", "100000000"]);
        assert!(
            e.starts_with("--wave-limit 100000000: needs about 95.4 TiB of memory"),
            "{e}"
        );
        assert!(err(&["--quick", "--items", "100000000"]).starts_with("--items 100000000: "));
        // Rows at 1%, 10% and 50% all ran at -m 4.
        let e = err(&["--fractions", "0.01,0.1,0.5"]);
        assert!(
            e.starts_with("--fractions 0.01: 1% of the working set"),
            "{e}"
        );
        let e = err(&["--quick", "--keys", "20000"]);
        assert!(
            e.starts_with("--fractions 0.5: 50% of the working set"),
            "{e}"
        );
        assert!(err(&["--requests", "10"]).starts_with("--requests 10: at least 64"));
        assert!(err(&["--wave-limit", "2"]).contains("at least 4 MiB"));
    }
}
