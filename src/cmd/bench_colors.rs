//! `duality bench colors`: seed 003's Figure 1 — a compute-bound service
//! with per-client colors on 1..N threads under the hand-off models and
//! `symped`, vs N independent single-threaded copies (the bound) and the
//! same service on tokio with a mutex. See `duality_bench::colors`.

use clap::Args;
use duality_bench::colors::{self, Load, Plan};
use std::time::Duration;

#[derive(Args)]
pub struct ColorsArgs {
    /// Comma-separated setups: amped (amped:N), seda (seda:1:N), seda-s
    /// (seda-s:N), symped (symped:N), n-copy (N × sped, the bound), tokio
    /// (N workers, one mutex).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "amped,seda,seda-s,symped,n-copy,tokio"
    )]
    setups: Vec<String>,
    /// Comma-separated thread counts N (default: powers of two up to the
    /// cores, and the cores).
    #[arg(long, value_delimiter = ',', conflicts_with = "quick")]
    threads: Vec<usize>,
    /// Clients, each with its own key, nonce counter and color (default:
    /// 32, or 4 per thread of the largest N if more).
    #[arg(long, conflicts_with = "quick", value_parser = super::bench::positive)]
    clients: Option<usize>,
    /// Connections per client (more than one: two requests of a client can
    /// arrive at once, and only its color keeps its state consistent).
    #[arg(long, default_value_t = 2, conflicts_with = "quick", value_parser = super::bench::positive)]
    conns_per_client: usize,
    /// Bytes per block encrypted and authenticated (at most 1 MiB). Large
    /// enough that the cipher, not the network or the load generator, is
    /// the load: about 50 µs of server CPU per block on this machine's
    /// cores (AMD EPYC, AVX2), against a few µs of client work.
    #[arg(long, default_value_t = 65536, conflicts_with = "quick")]
    block: u32,
    /// One request in this many (per connection) updates the shared ledger
    /// under the default color; 0: never.
    #[arg(long, default_value_t = 64, conflicts_with = "quick")]
    ledger_every: u64,
    /// The client checks the tag of one seal in this many per connection.
    #[arg(long, default_value_t = 256, conflicts_with = "quick",
          value_parser = clap::value_parser!(u64).range(1..))]
    verify_every: u64,
    /// Event-loop threads of the load generator (raise on a large machine,
    /// where one thread cannot keep N servers busy).
    #[arg(long, default_value_t = 1, conflicts_with = "quick", value_parser = super::bench::positive)]
    client_loops: usize,
    /// Seconds of load before each window.
    #[arg(long, default_value_t = 0.5, value_parser = super::parse_seconds, conflicts_with = "quick")]
    warmup: f64,
    /// Seconds counted per setup and N.
    #[arg(long, default_value_t = 2.0, value_parser = super::parse_seconds, conflicts_with = "quick")]
    seconds: f64,
    /// Rounds (setups take turns at each N; medians, and medians of
    /// per-round ratios, are reported).
    #[arg(long, default_value_t = 3, conflicts_with = "quick", value_parser = super::bench::positive)]
    rounds: usize,
    /// Where every setup's threads run: `auto` pins thread i of a server
    /// (network loop i and payload thread i, tokio's worker i) and copy i
    /// of `n-copy` to the i-th CPU this process may use, so every setup is
    /// placed alike and `seda-s`'s loop and payload thread of a pair share
    /// a core; a list such as `0-3` uses those CPUs in order; `off` leaves
    /// placement to the kernel. The load generator is never pinned.
    #[arg(long, value_name = "off|auto|LIST", default_value = "auto")]
    cpu_affinity: duality_models::CpuAffinity,
    #[command(flatten)]
    output: super::OutputArgs,
}

pub fn run(a: ColorsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0 && a.warmup.is_finite() && a.warmup >= 0.0,
        "--seconds must be positive and --warmup not negative"
    );
    anyhow::ensure!(
        a.block >= 1 && a.block as usize <= colors::service::FILE_BYTES,
        "--block must be 1 to {} bytes",
        colors::service::FILE_BYTES
    );
    anyhow::ensure!(
        a.threads.iter().all(|&n| (1..=1024).contains(&n)),
        "every thread count must be 1 to 1024"
    );
    anyhow::ensure!(
        a.conns_per_client >= 1,
        "--conns-per-client must be at least 1"
    );
    for s in &a.setups {
        colors::server_name(s, 1)?;
    }
    let cpus = match &a.cpu_affinity {
        duality_models::CpuAffinity::Off => None,
        duality_models::CpuAffinity::Auto => Some(duality_rt::affinity::allowed_cpus()?),
        duality_models::CpuAffinity::List(l) => {
            let allowed = duality_rt::affinity::allowed_cpus()?;
            for i in 0..l.len() {
                a.cpu_affinity.cpu_for(i, &allowed)?;
            }
            Some(l.clone())
        }
    };
    let cores = duality_models::cores();
    let (threads, load, rounds) = if a.output.quick {
        // N = 1, 2 whatever the machine: the test suite checks both.
        let load = Load {
            clients: 8,
            conns_per_client: 2,
            block: 4096,
            ledger_every: 16,
            verify_every: 16,
            client_loops: 1,
            warmup: Duration::from_millis(100),
            measure: Duration::from_millis(300),
        };
        (vec![1, 2], load, 1)
    } else {
        let threads = if a.threads.is_empty() {
            colors::default_threads(cores)
        } else {
            a.threads.clone()
        };
        let biggest = threads.iter().copied().max().unwrap_or(1);
        let load = Load {
            clients: a.clients.unwrap_or((4 * biggest).max(32)).max(1),
            conns_per_client: a.conns_per_client,
            block: a.block,
            ledger_every: a.ledger_every,
            verify_every: a.verify_every,
            client_loops: a.client_loops.max(1),
            warmup: Duration::from_secs_f64(a.warmup),
            measure: Duration::from_secs_f64(a.seconds),
        };
        (threads, load, a.rounds.max(1))
    };
    // Each connection is a descriptor of the load generator and of a
    // server (which inherits this process's limit, raised here).
    duality_bench::limits::check_descriptors(
        "--clients × --conns-per-client",
        load.clients.saturating_mul(load.conns_per_client) as u64,
        1,
        0,
        duality_bench::http::raise_fd_limit(),
    )?;
    let out = super::bench::results_dir(a.output.out.as_deref(), "colors")?;
    let exe = std::env::current_exe()?;
    let plan = Plan {
        exe: &exe,
        setups: a.setups.clone(),
        threads: threads.clone(),
        load,
        rounds,
        cpus: cpus.clone(),
    };
    let pb = super::bench_kv::progress(rounds * threads.len() * a.setups.len());
    let rows = colors::run(&plan, &mut |round, setup, n| {
        pb.set_message(format!("round {}: {setup} at N = {n}", round + 1));
        pb.inc(1);
    })?;
    pb.finish_and_clear();

    let cmd = super::command_line();
    let md = format!(
        "# Colors: per-client cryptography on 1..N threads vs N independent copies (seed 003, Fig. 1)\n\n\
         Command: `{}`\n\n\
         Machine: {cores} cores, shared by the servers and the load generator ({} event-loop thread(s)); \
         duality's servers on their default I/O backend (`DUALITY_IO`, else io_uring). \
         Each request encrypts and authenticates a {} byte block with its client's key (ChaCha20-Poly1305) under the client's color; \
         one request in {} per connection updates a ledger shared by all clients under the default color. \
         {} clients × {} connections, one request in flight each, over Unix sockets; in `n-copy`, client c talks to copy c mod N. \
         {}\
         Every setup and N in fresh server processes, {} s counted after {} s, setups taking turns in each of {rounds} round(s); \
         blocks/s is the median over rounds, every ratio the median of per-round ratios. \
         Speed-up (vs 1 copy) is Fig. 1's normalisation; of N-copy bound = blocks/s ÷ the N copies' blocks/s at the same N (goal: ≥ {}). \
         After every measurement each server was audited: every client's nonces exactly 1..=counter (none reused or lost), \
         its ledger entry equal to its counter, the entries adding up to the ledger's total, no color violation.\n\n\
         {}\n## Goal: ≥ {} of the N-copy bound at every N ≥ 2\n\n{}",
        cmd,
        load.client_loops,
        load.block,
        load.ledger_every,
        load.clients,
        load.conns_per_client,
        match &cpus {
            Some(c) => format!(
                "Threads pinned (`--cpu-affinity {}`): thread i of a server (network loop i and payload thread i, tokio's worker i) \
                 and copy i of `n-copy` on CPU i of {}; the load generator unpinned. ",
                a.cpu_affinity,
                duality_rt::affinity::format_cpus(c)
            ),
            None => "Threads placed by the kernel (`--cpu-affinity off`). ".to_string(),
        },
        load.measure.as_secs_f64(),
        load.warmup.as_secs_f64(),
        colors::GOAL,
        colors::table(&rows),
        colors::GOAL,
        colors::goals(&rows),
    );
    duality_bench::report::write(&out.join("colors.md"), &md)?;
    duality_bench::report::write(&out.join("colors.json"), duality_bench::report::json(&rows))?;
    duality_bench::report::write(&out.join("colors.csv"), colors::csv(&rows))?;
    let has_bound = a.setups.iter().any(|s| s == colors::BOUND);
    duality_bench::plot::line_chart(
        &out.join("colors-speedup"),
        if has_bound {
            "Speed-up relative to one single-threaded copy"
        } else {
            "Speed-up relative to the same setup at one thread"
        },
        "threads (N)",
        "speed-up",
        &colors::series(&rows),
        false,
    )?;
    if a.output.json {
        duality_bench::report::print(&duality_bench::report::json(&rows));
    } else {
        duality_bench::report::print(&colors::table(&rows));
        duality_bench::report::print(colors::goals(&rows).trim_end());
    }
    duality_rt::say!("results in {}", out.display());
    Ok(())
}
