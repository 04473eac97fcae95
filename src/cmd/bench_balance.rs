//! `duality bench balance`: seed 002's uneven load — how evenly the network
//! loops share the work under each accept balance, memcached beside them.
//! See `duality_bench::balance`.

use clap::Args;
use duality_bench::balance::{self, Plan};

#[derive(Args)]
pub struct BalanceArgs {
    /// Network loops: duality `symped:N`, memcached `-t N` (default: the cores, at least 2).
    #[arg(long)]
    loops: Option<usize>,
    /// Comma-separated accept balances of duality.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "round-robin,least-loaded,reuseport"
    )]
    balances: Vec<duality_models::Balance>,
    /// Heavy connections (kept open, pipelining gets), each a descriptor
    /// here and in the server: refused past the file limit. Default 8
    /// (`--quick`: 4).
    #[arg(long, value_parser = super::bench::positive)]
    heavy: Option<usize>,
    /// Gets each heavy connection writes at once, 1-4096.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pipeline: u64,
    /// Short connections (connect, one get, close) per second.
    #[arg(long, default_value_t = 200.0)]
    short_rate: f64,
    /// Seconds measured per server and round. Default 5 (`--quick`: 0.5).
    #[arg(long, value_parser = super::parse_seconds)]
    seconds: Option<f64>,
    /// Rounds (servers take turns; medians are reported). Default 3
    /// (`--quick`: 1).
    #[arg(long, value_parser = super::bench::positive)]
    rounds: Option<usize>,
    #[command(flatten)]
    output: super::OutputArgs,
}

/// What a run measures: each flag given, else the preset of `--quick` (a
/// flag given wins over it) or of a full run.
#[derive(Debug, PartialEq)]
struct Settings {
    heavy: usize,
    seconds: f64,
    rounds: usize,
}

impl BalanceArgs {
    fn settings(&self) -> Settings {
        let q = self.output.quick;
        Settings {
            heavy: self.heavy.unwrap_or(if q { 4 } else { 8 }),
            seconds: self.seconds.unwrap_or(if q { 0.5 } else { 5.0 }),
            rounds: self.rounds.unwrap_or(if q { 1 } else { 3 }),
        }
    }
}

pub fn run(a: BalanceArgs) -> anyhow::Result<()> {
    let Settings {
        heavy,
        seconds,
        rounds,
    } = a.settings();
    let loops = a.loops.unwrap_or_else(|| duality_models::cores().max(2));
    anyhow::ensure!(
        loops >= 2,
        "--loops must be at least 2: one loop has nothing to balance"
    );
    for b in &a.balances {
        duality_bench::servers::check_duality_spec(&format!("symped:{loops}+{b}"))
            .map_err(|e| anyhow::anyhow!("--loops {loops}: {e}"))?;
    }
    check_heavy(heavy, duality_bench::limits::fd_limit())?;
    // Each heavy connection's thread holds its pipeline's requests.
    duality_bench::limits::ensure_memory(
        &format!("--heavy {heavy} --pipeline {}", a.pipeline),
        (heavy as u64).saturating_mul(a.pipeline).saturating_mul(64),
    )?;
    anyhow::ensure!(
        a.short_rate.is_finite() && a.short_rate > 0.0,
        "--short-rate must be a positive number"
    );
    anyhow::ensure!(
        seconds.is_finite() && seconds > 0.0,
        "--seconds must be a positive number"
    );
    let dir = super::bench::results_dir(a.output.out.as_deref(), "balance")?;
    let exe = std::env::current_exe()?;
    let plan = Plan {
        exe: &exe,
        loops,
        balances: a.balances.iter().map(|b| b.to_string()).collect(),
        heavy,
        pipeline: a.pipeline as usize,
        short_rate: a.short_rate,
        seconds,
        rounds,
    };
    let servers =
        a.balances.len() + usize::from(duality_bench::servers::memcached_path().is_some());
    let pb = super::bench_kv::progress(servers * rounds);
    let rows = balance::run(&plan, &mut |label, round| {
        pb.set_message(format!("round {}: {label}", round + 1));
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let cmd = super::command_line();
    let md = format!(
        "# Balance: how evenly {loops} network loops share the work\n\nCommand: `{}`\n\nMachine: {} cores; clients and servers on the same machine, TCP loopback. {heavy} heavy connections (pipelines of {} gets, closed loop) arrive interleaved with short ones (connect, one get, close); then for {seconds} s the heavy ones pipeline while {} short connections a second are timed from connect to answer. Loop CPU shares are each network loop's (memcached: each worker's) CPU time over the window; imbalance is the busiest loop's over the mean (1 = even, {loops} = one loop does everything). Medians of {rounds} round(s), servers taking turns.\n\n{}",
        cmd,
        duality_models::cores(),
        a.pipeline,
        a.short_rate,
        balance::table(&rows)
    );
    duality_bench::report::write(&dir.join("balance.md"), &md)?;
    duality_bench::report::write(
        &dir.join("balance.json"),
        duality_bench::report::json(&rows),
    )?;
    duality_bench::report::write(&dir.join("balance.csv"), balance::csv(&rows))?;
    let plotted: Vec<_> = rows.iter().filter(|r| r.imbalance.is_finite()).collect();
    if !plotted.is_empty() {
        duality_bench::plot::bar_chart(
            &dir.join("imbalance"),
            &format!("Busiest of {loops} loops over the mean (1 = even)"),
            "imbalance",
            &plotted.iter().map(|r| r.server.clone()).collect::<Vec<_>>(),
            &[(
                "imbalance".to_string(),
                plotted.iter().map(|r| Some(r.imbalance)).collect(),
            )],
            1.0,
        )?;
    }
    if a.output.json {
        duality_bench::report::print(&duality_bench::report::json(&rows));
    } else {
        duality_bench::report::print(&balance::table(&rows));
    }
    duality_rt::say!("results in {}", dir.display());
    Ok(())
}

/// Refuses heavy connections past what this process and the servers may
/// hold open: each is a descriptor here (under `fd_limit`, with
/// [`duality_bench::limits::FD_MARGIN`] kept free for the short ones and
/// the rest) and a connection of the server (`-c`). 100,000 hung silently.
fn check_heavy(heavy: usize, fd_limit: u64) -> anyhow::Result<()> {
    use duality_bench::limits::{max_for_descriptors, FD_MARGIN};
    let server = duality_bench::servers::DEFAULT_MAX_CONNS as u64;
    let max = max_for_descriptors(fd_limit.min(server), 1, 0);
    anyhow::ensure!(
        heavy as u64 <= max,
        "--heavy {heavy}: each heavy connection is a descriptor here and a connection of \
         the server (-c {server}), and a process may open {fd_limit} files here (ulimit -n), \
         {FD_MARGIN} kept free; at most {max}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{BalanceArgs, Settings};

    #[test]
    fn heavy_connections_past_the_file_limit_are_refused() {
        super::check_heavy(8, 1024).unwrap();
        super::check_heavy(768, 1024).unwrap();
        let e = super::check_heavy(769, 1024).unwrap_err().to_string();
        assert_eq!(
            e,
            "--heavy 769: each heavy connection is a descriptor here and a connection of the \
             server (-c 16384), and a process may open 1024 files here (ulimit -n), 256 kept \
             free; at most 768"
        );
        // The server's -c binds before a larger file limit.
        super::check_heavy(16_128, 1 << 20).unwrap();
        assert!(super::check_heavy(100_000, 1 << 20)
            .unwrap_err()
            .to_string()
            .ends_with("at most 16128"));
    }

    fn settings(args: &[&str]) -> Settings {
        super::super::bench::parse_args::<BalanceArgs>(args)
            .unwrap()
            .settings()
    }

    #[test]
    fn quick_presets_only_what_is_not_given() {
        let full = Settings {
            heavy: 8,
            seconds: 5.0,
            rounds: 3,
        };
        let quick = Settings {
            heavy: 4,
            seconds: 0.5,
            rounds: 1,
        };
        assert_eq!(settings(&[]), full);
        assert_eq!(settings(&["--quick"]), quick);
        assert_eq!(
            settings(&["--quick", "--heavy", "2"]),
            Settings { heavy: 2, ..quick }
        );
        assert_eq!(
            settings(&["--seconds", "0.25", "--quick"]),
            Settings {
                seconds: 0.25,
                ..quick
            }
        );
        assert_eq!(
            settings(&["--quick", "--rounds", "2"]),
            Settings { rounds: 2, ..quick }
        );
        assert_eq!(
            settings(&["--quick", "--heavy", "6", "--seconds", "2", "--rounds", "5"]),
            Settings {
                heavy: 6,
                seconds: 2.0,
                rounds: 5
            }
        );
        assert_eq!(settings(&["--heavy", "3"]), Settings { heavy: 3, ..full });
        // Zeros are refused by the flag (--rounds 0 ran once).
        for flag in ["--rounds", "--heavy", "--pipeline"] {
            let e = super::super::bench::parse_args::<BalanceArgs>(&[flag, "0"])
                .err()
                .unwrap_or_else(|| panic!("{flag} 0 accepted"));
            let e = e.to_string();
            assert!(
                e.contains("must be at least 1") || e.contains("0 is not in 1..="),
                "{e}"
            );
        }
    }
}
