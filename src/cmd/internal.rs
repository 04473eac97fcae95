//! `duality internal …`: processes the benchmarks start (hidden from help).

use clap::{Args, Subcommand};
use std::time::Duration;

#[derive(Subcommand)]
pub enum Internal {
    /// The models' test service, until SIGTERM/SIGINT.
    EchoServer(EchoServerArgs),
    /// The kv server on tokio (the runtime peer of `bench models`).
    KvTokio(KvTokioArgs),
}

#[derive(Args)]
pub struct KvTokioArgs {
    /// Unix socket path.
    #[arg(long)]
    unix: Option<std::path::PathBuf>,
    /// TCP address.
    #[arg(long)]
    tcp: Option<std::net::SocketAddr>,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Item memory in MiB.
    #[arg(short = 'm', default_value_t = 1024)]
    memory: usize,
}

#[derive(Args)]
pub struct EchoServerArgs {
    /// Threading model.
    #[arg(long, default_value = "symped")]
    model: duality_models::Model,
    /// Unix socket path.
    #[arg(long)]
    unix: Option<std::path::PathBuf>,
    /// TCP address.
    #[arg(long)]
    tcp: Option<std::net::SocketAddr>,
    /// Payload work per request (hash-loop iterations).
    #[arg(long, default_value_t = 200)]
    work: u64,
    #[command(flatten)]
    io: super::IoArg,
}

pub fn run(i: Internal) -> anyhow::Result<()> {
    match i {
        Internal::EchoServer(a) => echo_server(a),
        Internal::KvTokio(a) => {
            duality_bench::kv_tokio::serve(a.unix, a.tcp, a.threads, a.memory << 20)
        }
    }
}

fn echo_server(a: EchoServerArgs) -> anyhow::Result<()> {
    a.io.apply();
    let mut b = duality_models::ServerBuilder::new()
        .model(a.model)
        .idle_spin(a.io.idle_spin())
        .max_conns(10_000);
    if let Some(p) = &a.unix {
        b = b.unix(p);
    }
    if let Some(t) = a.tcp {
        b = b.tcp(t);
    }
    let d = duality_models::echo::Detector::new(a.work);
    let server = b.serve(move |c, p| duality_models::echo::serve(c, p, d.clone()))?;
    println!("ready {:?}", server.tcp_addrs());
    super::wait_for_termination()?;
    server.shutdown(Duration::from_secs(5));
    Ok(())
}
