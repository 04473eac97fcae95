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
    /// Heavy connections (kept open, pipelining gets).
    #[arg(long, default_value_t = 8)]
    heavy: usize,
    /// Gets each heavy connection writes at once.
    #[arg(long, default_value_t = 16)]
    pipeline: usize,
    /// Short connections (connect, one get, close) per second.
    #[arg(long, default_value_t = 200.0)]
    short_rate: f64,
    /// Seconds measured per server and round.
    #[arg(long, default_value_t = 5.0, value_parser = super::parse_seconds)]
    seconds: f64,
    /// Rounds (servers take turns; medians are reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[command(flatten)]
    output: super::OutputArgs,
}

pub fn run(a: BalanceArgs) -> anyhow::Result<()> {
    let loops = a.loops.unwrap_or_else(|| duality_models::cores().max(2));
    anyhow::ensure!(
        loops >= 2,
        "--loops must be at least 2: one loop has nothing to balance"
    );
    for b in &a.balances {
        duality_bench::servers::check_duality_spec(&format!("symped:{loops}+{b}"))
            .map_err(|e| anyhow::anyhow!("--loops {loops}: {e}"))?;
    }
    anyhow::ensure!(
        a.heavy >= 1 && a.pipeline >= 1,
        "--heavy and --pipeline must be at least 1"
    );
    anyhow::ensure!(
        a.short_rate.is_finite() && a.short_rate > 0.0,
        "--short-rate must be a positive number"
    );
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0,
        "--seconds must be a positive number"
    );
    let (heavy, seconds, rounds) = if a.output.quick {
        (4, 0.5, 1)
    } else {
        (a.heavy, a.seconds, a.rounds.max(1))
    };
    let dir = super::results_dir(a.output.out.as_deref(), "balance")?;
    let exe = std::env::current_exe()?;
    let plan = Plan {
        exe: &exe,
        loops,
        balances: a.balances.iter().map(|b| b.to_string()).collect(),
        heavy,
        pipeline: a.pipeline,
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
    let cmd: Vec<String> = std::env::args().collect();
    let md = format!(
        "# Balance: how evenly {loops} network loops share the work\n\nCommand: `{}`\n\nMachine: {} cores; clients and servers on the same machine, TCP loopback. {heavy} heavy connections (pipelines of {} gets, closed loop) arrive interleaved with short ones (connect, one get, close); then for {seconds} s the heavy ones pipeline while {} short connections a second are timed from connect to answer. Loop CPU shares are each network loop's (memcached: each worker's) CPU time over the window; imbalance is the busiest loop's over the mean (1 = even, {loops} = one loop does everything). Medians of {rounds} round(s), servers taking turns.\n\n{}",
        cmd.join(" "),
        duality_models::cores(),
        a.pipeline,
        a.short_rate,
        balance::table(&rows)
    );
    std::fs::write(dir.join("balance.md"), &md)?;
    std::fs::write(dir.join("balance.json"), duality_bench::report::json(&rows))?;
    std::fs::write(dir.join("balance.csv"), balance::csv(&rows))?;
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
        println!("{}", duality_bench::report::json(&rows));
    } else {
        println!("{}", balance::table(&rows));
    }
    eprintln!("results in {}", dir.display());
    Ok(())
}
