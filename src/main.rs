//! `duality`: the command-line entry point. It only composes the crates:
//! servers come from `duality-kv` / `duality-http` on `duality-models`,
//! experiments from `duality-bench`. One file per subcommand under `cmd/`.

mod alloc;
mod cmd;

use clap::{Parser, Subcommand};
use std::io::IsTerminal;

// mimalloc, or the C library's allocator under `thread-per-conn` (alloc.rs).
#[global_allocator]
static GLOBAL: alloc::Allocator = alloc::Allocator;

#[derive(Parser)]
#[command(
    name = "duality",
    version,
    about = "One runtime, seven threading models, two servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The memcached-compatible cache server.
    Kv(cmd::kv::KvArgs),
    /// The static-file web server.
    // A flag given twice: the later wins, so flags after --nginx-config
    // change what the configuration said.
    #[command(args_override_self = true)]
    Http(Box<cmd::http::HttpArgs>),
    /// Benchmarks and experiments, each with its peers in the same run.
    #[command(subcommand)]
    Bench(cmd::bench::Bench),
    /// Helpers the benchmarks start as separate processes.
    #[command(subcommand, hide = true)]
    Internal(cmd::internal::Internal),
}

fn main() -> std::process::ExitCode {
    let result = run();
    // A `duality bench` run stopped by SIGINT/SIGTERM fails because its
    // servers were stopped; its signal thread reports and exits instead.
    duality_bench::interrupt::park_if_interrupted();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The message and its causes on one line, as memcached and nginx
            // report a failed start; no backtrace (`RUST_BACKTRACE` set for
            // other programs would otherwise print one after every error).
            duality_rt::say!("duality: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // No colour codes in a log file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        // A failed write (a closed stderr) is otherwise reported with
        // `eprintln!`, which panics on the same closed stderr: a warning on
        // a loop thread then killed the loop and its connections (seen in
        // CI: `a_closed_stderr_loses_no_items`, a long-poll warning). The
        // line is dropped instead, as `say!` drops its own.
        .log_internal_errors(false)
        .init();
    // The matches say where each value stood (`--allow`/`--deny` order).
    let (cli, matches): (Cli, _) = cmd::parse_cli();
    cmd::transparent_huge_pages(matches!(&cli.command, Command::Kv(a) if a.large_pages));
    match cli.command {
        Command::Kv(a) => cmd::kv::run(a),
        Command::Http(a) => cmd::http::run(*a, matches.subcommand_matches("http")),
        Command::Bench(b) => cmd::bench::run(b),
        Command::Internal(i) => cmd::internal::run(i),
    }
}
