//! `duality bench fairness`: a newcomer's first answer while other clients
//! flood the server with pipelined requests; every model against memcached
//! and nginx in the same run. See `duality_bench::fairness`.

use clap::Args;
use duality_bench::fairness::{self, Plan};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct FairnessArgs {
    /// Comma-separated services: kv, http.
    #[arg(long, value_delimiter = ',', default_value = "kv,http")]
    services: Vec<String>,
    /// Comma-separated models (default: every model with this machine's numbers).
    #[arg(long, value_delimiter = ',')]
    models: Vec<duality_models::Model>,
    /// Flooding connections (1-256: each is an OS thread of this process,
    /// and a few already keep two cores busy).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    floods: u16,
    /// Newcomers timed per server. Default 30 (`--quick`: 5).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    samples: Option<u32>,
    /// Seconds of flooding before the first newcomer. Default 0.5
    /// (`--quick`: 0.2).
    #[arg(long, value_parser = super::parse_seconds)]
    warmup: Option<f64>,
    /// A smoke run: 5 newcomers per server, 0.2 s of warm-up (where
    /// --samples, --warmup are not given).
    #[arg(long)]
    quick: bool,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Results directory (default: results/fairness-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// What a run measures: each flag given, else the preset of `--quick` or of
/// a full run.
#[derive(Debug, PartialEq)]
struct Settings {
    samples: usize,
    warmup: f64,
}

impl FairnessArgs {
    fn settings(&self) -> Settings {
        let q = self.quick;
        Settings {
            samples: self.samples.map_or(if q { 5 } else { 30 }, |n| n as usize),
            warmup: self.warmup.unwrap_or(if q { 0.2 } else { 0.5 }),
        }
    }
}

pub fn run(a: FairnessArgs) -> anyhow::Result<()> {
    for s in &a.services {
        anyhow::ensure!(
            s == "kv" || s == "http",
            "unknown service {s:?}: choose kv, http"
        );
    }
    let Settings { samples, warmup } = a.settings();
    anyhow::ensure!(
        warmup.is_finite() && warmup >= 0.0,
        "--warmup must not be negative"
    );
    let models: Vec<String> = if a.models.is_empty() {
        duality_models::Model::all_defaults()
            .iter()
            .map(|m| m.to_string())
            .collect()
    } else {
        a.models.iter().map(|m| m.to_string()).collect()
    };
    let dir = super::bench::results_dir(a.out.as_deref(), "fairness")?;
    let exe = std::env::current_exe()?;
    let plan = Plan {
        exe: &exe,
        models,
        services: a.services.clone(),
        floods: usize::from(a.floods),
        samples,
        warmup: Duration::from_secs_f64(warmup),
    };
    let fairness::Outcome { rows, failed } = fairness::run(&plan, &mut |r| {
        duality_rt::say!(
            "{} {}: p50 {:.2} ms, max {:.2} ms",
            r.service,
            r.server,
            r.p50_ms,
            r.max_ms
        )
    })?;
    let cmd = super::command_line();
    let why: Vec<String> = failed.iter().map(|e| format!("{e:#}")).collect();
    let left_out: String = why.iter().map(|e| format!("Left out: {e}.\n\n")).collect();
    let md = format!(
        "# Fairness: a newcomer's first answer while {} clients flood the server\n\nCommand: `{}`\n\nMachine: {} cores, flooders, newcomers and servers on the same machine, TCP loopback. Each flooder pipelines requests without pause and reads the answers on another thread; after the warm-up, newcomers connect one after another (10 ms apart), send one request and wait for its whole answer (time from `connect`).\n\n{left_out}{}",
        a.floods,
        cmd,
        duality_models::cores(),
        fairness::table(&rows)
    );
    duality_bench::report::write(&dir.join("fairness.md"), &md)?;
    duality_bench::report::write(
        &dir.join("fairness.json"),
        duality_bench::report::json(&rows),
    )?;
    duality_bench::report::write(&dir.join("fairness.csv"), fairness::csv(&rows))?;
    if a.json {
        duality_bench::report::print(&duality_bench::report::json(&rows));
    } else {
        duality_bench::report::print(&fairness::table(&rows));
    }
    duality_rt::say!("results in {}", dir.display());
    // The others are written; the run still fails, naming the peer.
    anyhow::ensure!(
        why.is_empty(),
        "{}; the results hold the other servers",
        why.join("; ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{FairnessArgs, Settings};

    fn settings(args: &[&str]) -> Settings {
        super::super::bench::parse_args::<FairnessArgs>(args)
            .unwrap()
            .settings()
    }

    #[test]
    fn quick_presets_only_what_is_not_given() {
        let full = Settings {
            samples: 30,
            warmup: 0.5,
        };
        let quick = Settings {
            samples: 5,
            warmup: 0.2,
        };
        assert_eq!(settings(&[]), full);
        assert_eq!(settings(&["--quick"]), quick);
        assert_eq!(
            settings(&["--quick", "--samples", "12"]),
            Settings {
                samples: 12,
                ..quick
            }
        );
        assert_eq!(
            settings(&["--warmup", "0", "--quick"]),
            Settings {
                warmup: 0.0,
                ..quick
            }
        );
        assert_eq!(
            settings(&["--quick", "--samples", "7", "--warmup", "1.5"]),
            Settings {
                samples: 7,
                warmup: 1.5
            }
        );
        assert_eq!(
            settings(&["--samples", "7"]),
            Settings { samples: 7, ..full }
        );
    }
}
