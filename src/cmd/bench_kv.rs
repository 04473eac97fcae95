//! `duality bench models` and `duality bench threads`: the cache under every
//! threading model against memcached and tokio (seed 001).

use clap::Args;
use duality_bench::models_kv::{self, KvRow, Plan};
use duality_bench::servers::ServerKind;
use duality_bench::workload::{KeyChoice, Workload};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct LoadArgs {
    /// Measurement windows per point (the paper: 5 runs); under `bench
    /// models --service echo`, rounds over every model (medians are
    /// reported). Default 5 (`--quick`: 2; the echo service 1 round).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    windows: Option<u64>,
    /// Requests each connection writes at once (pipelined, one write)
    /// before it reads their answers (memtier's `--pipeline`), 1-4096.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pipeline: u64,
    /// Seconds per window, 0.05 (enough clock ticks for the servers' CPU
    /// time) to 86,400. Default 1 (`--quick`: 0.15, the echo service 0.2).
    #[arg(long, value_parser = super::bench::parse_window)]
    seconds: Option<f64>,
    /// Rounds, every server measured in turn each round; figures are
    /// medians over rounds, `± sd` their spread, and (`bench models`) the
    /// `vs symped` (txn/s) and `CPU vs memcached -t 1` (server CPU per
    /// transaction) columns the medians of per-round ratios (the host's
    /// drift between servers cancels out). `--service echo` takes
    /// `--windows` as rounds instead.
    #[arg(long, default_value_t = 1, value_parser = super::bench::positive)]
    rounds: usize,
    /// Seconds of warm-up before each client count (the cache). Default
    /// 0.5 (`--quick`: 0.1).
    #[arg(long, value_parser = super::parse_seconds)]
    warmup: Option<f64>,
    /// Use TCP on 127.0.0.1 instead of Unix sockets.
    #[arg(long)]
    tcp: bool,
    /// Comma-separated I/O backends (`epoll`, `uring`): every duality row is
    /// run on each, labelled `MODEL@BACKEND` (default: the servers' default
    /// backend, unlabelled).
    #[arg(long, value_delimiter = ',')]
    io: Vec<duality_rt::IoBackend>,
    /// The load generator's I/O backend (`epoll` or `uring`; default epoll).
    /// The client shares the machine with the server: a cheaper client
    /// leaves the server more of it.
    #[arg(long)]
    client_io: Option<duality_rt::IoBackend>,
    /// Load-generator threads, each a duality loop with an even share of
    /// the connections. One (the paper's client) suits this 2-core machine;
    /// on a machine with cores to spare, raise it until the client is no
    /// longer the limit (the table marks a saturated client).
    #[arg(long, default_value_t = 1, value_parser = super::bench::positive)]
    client_threads: usize,
    /// Count the servers' system calls per transaction over the windows
    /// (with `perf stat` on the `raw_syscalls:sys_enter` tracepoint; `-`
    /// where perf is missing).
    #[arg(long)]
    syscalls: bool,
    /// Records in the data set (values of 10-103 bytes, log-distributed).
    /// Default 30,000 (`--quick`: 3,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    records: Option<u64>,
    /// Gets per set.
    #[arg(long, default_value_t = 9)]
    gets_per_set: u32,
    /// Key choice: uniform, zipf or zipf:S.
    #[arg(long, default_value = "uniform")]
    keys: KeyChoice,
    /// A smoke run that finishes in well under a minute: its short
    /// windows, few clients and small data set stand where the flags
    /// that set them are not given.
    #[arg(long)]
    quick: bool,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Results directory (default: results/EXPERIMENT-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
pub struct ModelsArgs {
    /// Which server: `kv` (the cache) or `echo` (the models' test service).
    #[arg(long, default_value = "kv")]
    service: String,
    /// Comma-separated models (default: every model with this machine's numbers).
    #[arg(long, value_delimiter = ',')]
    models: Vec<duality_models::Model>,
    /// Comma-separated client counts. Default 1,8,20,40,80,120,200
    /// (`--quick`: 1,8); a count past the file limit (`ulimit -n`, less 256
    /// kept free) or the server's connections (16,384; the echo server's
    /// 10,000) is refused.
    #[arg(long, value_delimiter = ',')]
    clients: Vec<usize>,
    /// Comma-separated hand-off policies (`always`, `adaptive`): every
    /// hand-off model (amped, seda, seda-s) is run with each, labelled
    /// `MODEL/adaptive` for the adaptive one (default: always, unlabelled).
    #[arg(long, value_delimiter = ',')]
    handoff: Vec<duality_models::Handoff>,
    /// Comma-separated CPU placements (`off`, `auto`, a list such as
    /// `0-1`; see `duality kv --cpu-affinity`): every duality model is run
    /// with each, labelled `MODEL%auto` for a pinned one (default: off,
    /// unlabelled). The peers are never pinned.
    #[arg(long, value_delimiter = ',', conflicts_with = "sweep")]
    cpu_affinity: Vec<duality_models::CpuAffinity>,
    /// Leave out memcached and tokio.
    #[arg(long)]
    no_peers: bool,
    /// Seed 001's thread-count sweeps (Fig. 2-5): amped over payload
    /// threads, seda over network × payload threads, seda-s over pairs, up
    /// to `--sweep-max` threads, at `--sweep-clients` clients; and each
    /// model's peak (Fig. 7). Writes sweep.md/json/csv and plots beside the
    /// usual results.
    #[arg(long)]
    sweep: bool,
    /// Client connections for `--sweep`. Default 40 (`--quick`: 8).
    #[arg(long, requires = "sweep")]
    sweep_clients: Option<usize>,
    /// Most threads of one kind for `--sweep` (powers of two up to it).
    /// Default 8 (`--quick`: 2).
    #[arg(long, requires = "sweep", value_parser = clap::value_parser!(u64).range(1..=1024))]
    sweep_max: Option<u64>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Args)]
pub struct ThreadsArgs {
    /// Server threads from 1 to this (default: twice the cores, at least
    /// 4; `--quick`: 2).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_threads: Option<u64>,
    /// Client connections; past the file limit (`ulimit -n`, less 256 kept
    /// free) or 16,384 they are refused.
    #[arg(long, default_value_t = 120)]
    clients: usize,
    #[command(flatten)]
    load: LoadArgs,
}

/// Client counts: positive, and as many connections as the load generator
/// and the server may hold open. Each client is a descriptor of this
/// process and of the server (which inherits this process's limit, raised
/// here to its hard limit as `bench http` does), so under `ulimit -n` with
/// [`duality_bench::limits::FD_MARGIN`] kept free; and a connection of the
/// server, which takes at most `server_conns`. Past either, the run
/// started and failed midway (1,500 clients under `ulimit -n 1024`).
fn check_clients(clients: &[usize], server_conns: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        !clients.is_empty() && clients.iter().all(|&c| c > 0),
        "--clients: client counts must be positive"
    );
    let most = clients.iter().copied().max().unwrap_or(1) as u64;
    clients_fit(most, duality_bench::http::raise_fd_limit(), server_conns)
}

/// [`check_clients`]'s bounds for `most` clients under the descriptor
/// limit `fd_limit`: the error names the bound that binds and the most
/// that fit.
fn clients_fit(most: u64, fd_limit: u64, server_conns: u64) -> anyhow::Result<()> {
    use duality_bench::limits::{max_for_descriptors, FD_MARGIN};
    let by_files = max_for_descriptors(fd_limit, 1, 0);
    anyhow::ensure!(
        most <= by_files,
        "--clients {most}: the load generator and the server each hold a descriptor per \
         client, and a process may open {fd_limit} files here (ulimit -n), {FD_MARGIN} kept \
         free; at most {by_files}"
    );
    anyhow::ensure!(
        most <= server_conns,
        "--clients {most}: the server is started to take at most {server_conns} connections; \
         at most {server_conns}"
    );
    Ok(())
}

impl LoadArgs {
    /// Records in the data set.
    fn records(&self) -> usize {
        self.records
            .map_or(if self.quick { 3_000 } else { 30_000 }, |r| r as usize)
    }
}

fn plan(load: &LoadArgs, clients: Vec<usize>) -> anyhow::Result<Plan> {
    let window = super::seconds(
        "--seconds",
        load.seconds.unwrap_or(if load.quick { 0.15 } else { 1.0 }),
        false,
    )?;
    let warmup = super::seconds(
        "--warmup",
        load.warmup.unwrap_or(if load.quick { 0.1 } else { 0.5 }),
        true,
    )?;
    let windows = load.windows.unwrap_or(if load.quick { 2 } else { 5 }) as usize;
    anyhow::ensure!(
        load.client_threads >= 1,
        "--client-threads must be at least 1"
    );
    check_clients(&clients, duality_bench::servers::DEFAULT_MAX_CONNS as u64)?;
    let records = load.records();
    Ok(Plan {
        exe: std::env::current_exe()?,
        servers: Vec::new(),
        clients,
        tcp: load.tcp,
        workload: Arc::new(Workload::new(records, load.gets_per_set, load.keys.clone())),
        warmup,
        window,
        windows,
        rounds: load.rounds.max(1),
        pipeline: load.pipeline as usize,
        count_syscalls: load.syscalls,
        client_io: load.client_io,
        client_threads: load.client_threads,
    })
}

/// The results directory, made (and checked writable) before measuring.
fn results_dir(load: &LoadArgs, name: &str) -> anyhow::Result<PathBuf> {
    super::bench::results_dir(load.out.as_deref(), name)
}

/// Says so where memcached is among `servers` but not installed (its rows
/// are left out).
fn note_missing_peers<'a>(servers: impl IntoIterator<Item = &'a ServerKind>) {
    let wanted = servers
        .into_iter()
        .any(|s| matches!(s, ServerKind::Memcached(_)));
    if wanted && duality_bench::servers::memcached_path().is_none() {
        duality_rt::say!(
            "memcached is not installed: measured without it (Debian: apt-get install memcached)"
        );
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "{} cores ({cpu}), client and servers on the same machine",
        duality_models::cores()
    )
}

/// The load generator in words, for the results' header.
fn client_threads(load: &LoadArgs) -> String {
    match load.client_threads.max(1) {
        1 => "one duality loop thread".to_string(),
        n => format!("{n} duality loop threads, the connections shared evenly"),
    }
}

fn finish(
    load: &LoadArgs,
    dir: &std::path::Path,
    title: &str,
    by_threads: bool,
    rows: &[KvRow],
    left_out: &str,
) -> anyhow::Result<()> {
    let cmd = super::command_line();
    let header = format!(
        "# {title}\n\nCommand: `{}`\n\nMachine: {}. Client: {}, closed loop, {} request(s) written at once per connection; {} sockets; {} records of 10-103 bytes, {}:1 gets to sets.",
        cmd,
        machine(),
        client_threads(load),
        load.pipeline as usize,
        if load.tcp { "TCP loopback" } else { "Unix" },
        load.records(),
        load.gets_per_set
    );
    let rounds = rows.first().map_or(1, |r| r.rounds);
    let header = if rounds > 1 {
        format!("{header} Servers took turns over {rounds} rounds: a point is the median over the rounds (`± sd`: the spread of the rounds' means), `vs symped` (and `vs sped`) the median of per-round ratios to the first `duality symped` (`duality sped`) row at the same client count, and `CPU vs memcached -t 1` the median of per-round ratios of server CPU per transaction to `memcached -t 1`'s.")
    } else {
        header
    };
    let pinned = if rows.iter().any(|r| r.server.contains('%')) {
        " `duality MODEL%CPUS`: the model run with `--cpu-affinity CPUS` (network loop i and payload thread i pinned to CPU i); memcached and tokio are not pinned."
    } else {
        ""
    };
    let header = format!("{header}{pinned}{left_out}");
    let written = models_kv::write_results(dir, rows, title, by_threads, &header)?;
    if load.json {
        duality_bench::report::print(&duality_bench::report::json(rows));
    } else {
        duality_bench::report::print(&models_kv::table(rows));
    }
    duality_rt::say!("results in {} ({} files)", dir.display(), written.len());
    Ok(())
}

pub(super) fn progress(total: usize) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb
}

pub fn models(a: ModelsArgs) -> anyhow::Result<()> {
    if a.sweep {
        return sweep(a);
    }
    let clients = match (a.clients.is_empty(), a.load.quick) {
        (false, _) => a.clients.clone(),
        (true, true) => vec![1, 8],
        (true, false) => vec![1, 8, 20, 40, 80, 120, 200],
    };
    let models = if a.models.is_empty() {
        duality_models::Model::all_defaults()
    } else {
        a.models.clone()
    };
    let models = with_handoffs(&models, &a.handoff);
    match a.service.as_str() {
        "echo" => {
            let models = with_affinities(&models, &a.cpu_affinity);
            return echo(&models, &clients, &a.load, a.no_peers);
        }
        "kv" => {}
        other => anyhow::bail!("unknown --service {other:?}; available: kv, echo"),
    }
    let p = plan(&a.load, clients.clone())?;
    let dir = results_dir(&a.load, "models")?;
    let cores = duality_models::cores();
    let mut servers: Vec<(usize, ServerKind)> =
        with_affinities(&with_backends(&models, &a.load.io), &a.cpu_affinity)
            .into_iter()
            .map(|m| (0, ServerKind::Duality(m)))
            .collect();
    if !a.no_peers {
        servers.extend(
            models_kv::model_servers(cores)
                .into_iter()
                .filter(|s| !matches!(s, ServerKind::Duality(_)))
                .map(|s| (0, s)),
        );
    }
    note_missing_peers(servers.iter().map(|(_, s)| s));
    let pb = progress(p.rounds * servers.len() * clients.len());
    let measured = models_kv::run_keeping(
        &p,
        &servers,
        &mut |r| {
            pb.set_message(format!(
                "{} x{}: {:.0} txn/s",
                r.server, r.clients, r.tps_mean
            ));
            pb.inc(1);
        },
        &mut |n| pb.println(n),
    );
    pb.finish_and_clear();
    // A server that fails is left out and the others measured: the run
    // writes what it has, then fails naming it.
    let why: Vec<String> = measured.failed.iter().map(|e| format!("{e:#}")).collect();
    let peer = why
        .iter()
        .any(|e| ["memcached", "tokio"].iter().any(|p| e.starts_with(p)));
    let hint = match peer && !a.no_peers {
        true => " (--no-peers measures duality alone)",
        false => "",
    };
    if !measured.rows.is_empty() {
        let left_out = why
            .iter()
            .map(|e| format!("\n\nLeft out: {e}."))
            .collect::<String>();
        finish(
            &a.load,
            &dir,
            "Transactions/s vs clients, every model and peer",
            false,
            &measured.rows,
            &left_out,
        )?;
    }
    match why.is_empty() {
        true => Ok(()),
        false => anyhow::bail!(
            "{}{hint}; {}",
            why.join("; "),
            match measured.rows.is_empty() {
                true => "nothing was measured",
                false => "the results hold the other servers",
            }
        ),
    }
}

/// Runs `servers` at the plan's one client count, one progress step each.
fn run_one_count(p: &Plan, servers: &[(usize, ServerKind)]) -> anyhow::Result<Vec<KvRow>> {
    let pb = progress(p.rounds * servers.len());
    let rows = models_kv::run(
        p,
        servers,
        &mut |r| {
            pb.set_message(format!("{}: {:.0} txn/s", r.server, r.tps_mean));
            pb.inc(1);
        },
        &mut |n| pb.println(n),
    )?;
    pb.finish_and_clear();
    Ok(rows)
}

/// `bench models --sweep`: the hand-off models over their thread counts.
fn sweep(a: ModelsArgs) -> anyhow::Result<()> {
    use duality_bench::sweep;
    anyhow::ensure!(
        a.service == "kv",
        "--sweep measures the cache (--service kv)"
    );
    let max = a.sweep_max.unwrap_or(if a.load.quick { 2 } else { 8 }) as usize;
    let clients = vec![a.sweep_clients.unwrap_or(if a.load.quick { 8 } else { 40 })];
    let families = sweep_families(&a.models)?;
    let p = plan(&a.load, clients.clone())?;
    let dir = results_dir(&a.load, "sweep")?;
    let models: Vec<String> = sweep::models(max)
        .into_iter()
        .filter(|m| families.iter().any(|f| family(m) == *f))
        .collect();
    let servers: Vec<(usize, ServerKind)> = with_backends(&models, &a.load.io)
        .into_iter()
        .map(|m| (0, ServerKind::Duality(m)))
        .collect();
    let rows = run_one_count(&p, &servers)?;
    let cmd = super::command_line();
    let header = format!(
        "# The hand-off models over their thread counts (seed 001, Fig. 2-5 and 7)\n\nCommand: `{}`\n\nMachine: {}. {} clients from {}, closed loop, {} sockets; {} records of 10-103 bytes, {}:1 gets to sets; each configuration its own server process, the mean of the windows.",
        cmd,
        machine(),
        clients[0],
        client_threads(&a.load),
        if a.load.tcp { "TCP loopback" } else { "Unix" },
        a.load.records(),
        a.load.gets_per_set
    );
    let points = sweep::points(&rows);
    let written = sweep::write(&dir, &header, &points)?;
    if a.load.json {
        duality_bench::report::print(&duality_bench::report::json(&points));
    } else {
        duality_bench::report::print(&sweep::markdown(&points));
    }
    duality_rt::say!("results in {} ({} files)", dir.display(), written.len());
    Ok(())
}

/// A model's family: `seda` for `seda:1:2`.
fn family(model: &str) -> &str {
    model.split(':').next().unwrap_or(model)
}

/// The families `--sweep` sweeps: those of `--models` (each a hand-off
/// model), or all three.
fn sweep_families(models: &[duality_models::Model]) -> anyhow::Result<Vec<String>> {
    if models.is_empty() {
        return Ok(["amped", "seda", "seda-s"].map(String::from).to_vec());
    }
    models
        .iter()
        .map(|m| {
            anyhow::ensure!(
                m.hands_off(),
                "--sweep sweeps the hand-off models (amped, seda, seda-s); {m} is not one"
            );
            Ok(family(&m.to_string()).to_string())
        })
        .collect()
}

/// Each hand-off model once per policy (`MODEL` for always, `MODEL/POLICY`
/// otherwise), the other models once.
fn with_handoffs(models: &[duality_models::Model], h: &[duality_models::Handoff]) -> Vec<String> {
    models
        .iter()
        .flat_map(|m| {
            let policies = if m.hands_off() && !h.is_empty() {
                h
            } else {
                &[duality_models::Handoff::Always][..]
            };
            policies.iter().map(move |p| match p {
                duality_models::Handoff::Always => m.to_string(),
                p => format!("{m}/{p}"),
            })
        })
        .collect()
}

/// Each model once per CPU placement (`MODEL%CPUS`, `MODEL` for off), or
/// as given with none.
fn with_affinities(models: &[String], a: &[duality_models::CpuAffinity]) -> Vec<String> {
    if a.is_empty() {
        return models.to_vec();
    }
    models
        .iter()
        .flat_map(|m| {
            a.iter().map(move |a| match a {
                duality_models::CpuAffinity::Off => m.clone(),
                a => format!("{m}%{a}"),
            })
        })
        .collect()
}

/// Each model once per backend (`MODEL@BACKEND`), or as given with no backends.
fn with_backends(models: &[String], io: &[duality_rt::IoBackend]) -> Vec<String> {
    if io.is_empty() {
        return models.to_vec();
    }
    models
        .iter()
        .flat_map(|m| io.iter().map(move |b| format!("{m}@{b}")))
        .collect()
}

pub fn threads(a: ThreadsArgs) -> anyhow::Result<()> {
    let max = match (a.max_threads, a.load.quick) {
        (Some(m), _) => m as usize,
        (None, true) => 2,
        (None, false) => (duality_models::cores() * 2).max(4),
    };
    refuse_for("bench threads", &[("--io", !a.load.io.is_empty())])?;
    let p = plan(&a.load, vec![a.clients])?;
    let dir = results_dir(&a.load, "threads")?;
    let servers = models_kv::thread_servers(max);
    note_missing_peers(servers.iter().map(|(_, s)| s));
    let rows = run_one_count(&p, &servers)?;
    finish(
        &a.load,
        &dir,
        "SYMPED transactions/s vs server threads",
        true,
        &rows,
        "",
    )
}

/// Refuses the flags in `given` that are set: they do not apply to `what`.
fn refuse_for(what: &str, given: &[(&str, bool)]) -> anyhow::Result<()> {
    let set: Vec<&str> = given
        .iter()
        .filter(|(_, on)| *on)
        .map(|(f, _)| *f)
        .collect();
    match set.as_slice() {
        [] => Ok(()),
        [one] => anyhow::bail!("{one} does not apply to {what}"),
        many => anyhow::bail!("{} do not apply to {what}", many.join(", ")),
    }
}

fn echo(
    models: &[String],
    clients: &[usize],
    load: &LoadArgs,
    no_peers: bool,
) -> anyhow::Result<()> {
    refuse_for(
        "--service echo",
        &[
            ("--io", !load.io.is_empty()),
            ("--client-io", load.client_io.is_some()),
            ("--syscalls", load.syscalls),
            ("--tcp", load.tcp),
            ("--keys", load.keys != KeyChoice::Uniform),
            ("--records", load.records.is_some()),
            ("--gets-per-set", load.gets_per_set != 9),
            (
                "--rounds (the echo service takes --windows as rounds)",
                load.rounds != 1,
            ),
            ("--warmup", load.warmup.is_some()),
            ("--no-peers (the echo service has none)", no_peers),
        ],
    )?;
    let seconds = load.seconds.unwrap_or(if load.quick { 0.2 } else { 1.0 });
    super::seconds("--seconds", seconds, false)?;
    let rounds = load.windows.unwrap_or(if load.quick { 1 } else { 5 }) as usize;
    anyhow::ensure!(
        load.client_threads >= 1,
        "--client-threads must be at least 1"
    );
    check_clients(clients, super::internal::ECHO_SERVER_CONNS as u64)?;
    let dir = results_dir(load, "models-echo")?;
    let exe = std::env::current_exe()?;
    let pb = progress(rounds * models.len() * clients.len());
    let rows = duality_bench::models_echo::run(
        &exe,
        models,
        clients,
        duality_bench::models_echo::EchoLoad {
            client_threads: load.client_threads.max(1),
            depth: load.pipeline as usize,
            seconds,
        },
        rounds,
        &mut |round, r| {
            // Every measurement is logged, also where the bar is hidden
            // (stderr not a terminal).
            pb.suspend(|| {
                duality_rt::say!(
                    "round {}/{rounds}: {} x{}: {:.0} req/s, {:.3} ctx/req",
                    round + 1,
                    r.model,
                    r.connections,
                    r.requests_per_sec,
                    r.ctx_switches_per_request
                )
            });
            pb.inc(1);
        },
    )?;
    pb.finish_and_clear();
    let cmd = super::command_line();
    let header = format!(
        "# Models: the echo service under every threading model\n\nCommand: `{}`\n\nMachine: {}. The client ({}, closed loop, Unix socket, {} request(s) written at once per connection) shares the cores with the server, its own process (`duality internal echo-server`); each payload job does 200 iterations of a small hash loop and checks its color's exclusivity. Context switches are the server's, over all its threads. A point is the median over {rounds} interleaved round(s) of {seconds} s; `vs symped` and `vs sped` are the medians of per-round ratios to the `symped` and the `sped` model at the same connection count; `MODEL/adaptive` is a hand-off model run with `--handoff adaptive`, `MODEL%CPUS` one run with `--cpu-affinity CPUS`.",
        cmd,
        machine(),
        client_threads(load),
        load.pipeline as usize,
    );
    let written = duality_bench::models_echo::write_results(&dir, &rows, &header)?;
    if load.json {
        duality_bench::report::print(&duality_bench::report::json(&rows));
    } else {
        duality_bench::report::print(&duality_bench::models_echo::table(&rows));
    }
    duality_rt::say!("results in {} ({} files)", dir.display(), written.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::clients_fit;

    #[test]
    fn client_counts_past_the_descriptor_limit_are_refused() {
        clients_fit(768, 1024, 16_384).unwrap();
        // `ulimit -n 1024`: 1,500 clients started and failed midway.
        let e = clients_fit(1500, 1024, 16_384).unwrap_err().to_string();
        assert_eq!(
            e,
            "--clients 1500: the load generator and the server each hold a descriptor per \
             client, and a process may open 1024 files here (ulimit -n), 256 kept free; at \
             most 768"
        );
        // A higher limit lets more through: no fixed 8,000.
        clients_fit(12_000, 20_000, 16_384).unwrap();
        clients_fit(19_744, 1 << 20, 16_384).unwrap_err();
    }

    #[test]
    fn client_counts_past_the_servers_connections_are_refused() {
        clients_fit(10_000, 1 << 20, 10_000).unwrap();
        let e = clients_fit(10_001, 1 << 20, 10_000)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--clients 10001: the server is started to take at most 10000 connections"),
            "{e}"
        );
    }
}
