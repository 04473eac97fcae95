//! `duality internal …`: processes the benchmarks start (hidden from help).

use clap::{Args, Subcommand};
use std::time::Duration;

#[derive(Subcommand)]
pub enum Internal {
    /// The models' test service, until SIGTERM/SIGINT.
    EchoServer(EchoServerArgs),
    /// The kv server on tokio (the runtime peer of `bench models`).
    KvTokio(KvTokioArgs),
    /// The colors experiment's service under a model, until SIGTERM/SIGINT.
    ColorsServer(ColorsServerArgs),
    /// The colors experiment's service on tokio with one mutex (its peer).
    ColorsTokio(ColorsTokioArgs),
}

#[derive(Args)]
pub struct ColorsServerArgs {
    /// Threading model.
    #[arg(long, default_value = "sped")]
    model: duality_models::Model,
    /// Unix socket path.
    #[arg(long)]
    unix: std::path::PathBuf,
    /// Clients served (ids 0..N), each with its own key and color.
    #[arg(long, default_value_t = 1024)]
    clients: usize,
    #[command(flatten)]
    io: super::IoArg,
}

#[derive(Args)]
pub struct ColorsTokioArgs {
    /// Unix socket path.
    #[arg(long)]
    unix: std::path::PathBuf,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Clients served (ids 0..N).
    #[arg(long, default_value_t = 1024)]
    clients: usize,
    /// Pin worker i to CPU i of this list (`off`: the kernel places them).
    #[arg(long, default_value = "off")]
    cpu_affinity: duality_models::CpuAffinity,
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
    handoff: super::HandoffArg,
    #[command(flatten)]
    io: super::IoArg,
}

pub fn run(i: Internal) -> anyhow::Result<()> {
    match i {
        Internal::EchoServer(a) => echo_server(a),
        Internal::KvTokio(a) => {
            let signals = super::catch_termination()?;
            let stop = move || super::wait_for_termination(signals);
            duality_bench::kv_tokio::serve(a.unix, a.tcp, a.threads, a.memory << 20, stop)
        }
        Internal::ColorsServer(a) => colors_server(a),
        Internal::ColorsTokio(a) => {
            let signals = super::catch_termination()?;
            let stop = move || super::wait_for_termination(signals);
            let allowed = duality_rt::affinity::allowed_cpus()?;
            let cpus = (0..a.threads.max(1))
                .map(|i| a.cpu_affinity.cpu_for(i, &allowed))
                .collect::<Result<Option<Vec<_>>, _>>()?;
            duality_bench::colors::tokio_peer::serve(a.unix, a.threads, a.clients, cpus, stop)
        }
    }
}

fn colors_server(a: ColorsServerArgs) -> anyhow::Result<()> {
    use duality_bench::colors::service::{ColorService, SEED};
    let signals = super::catch_termination()?;
    let io = a.io.apply();
    let driver = duality_models::Driver::new(
        ColorService::new(a.clients, SEED),
        duality_models::DriverConfig::default(),
    );
    let server = duality_models::ServerBuilder::new()
        .name("colors")
        .model(a.model)
        .idle_spin(a.io.idle_spin())
        .cpu_affinity(a.io.cpu_affinity.clone())
        .loop_slice(a.io.loop_slice())
        .payload_spin(a.io.payload_spin())
        .max_conns(10_000)
        // Every request is CPU-heavy by design, and a debug build's cipher
        // is slow: no long-poll warnings in the middle of the bench's table.
        .long_poll_threshold(None)
        .unix(&a.unix)
        .serve(move |c, p| duality_models::drive(c, p, driver.clone()))?;
    duality_rt::say_out!("ready colors {} on {io:?}", a.model.name());
    super::wait_for_termination(signals);
    server.shutdown(Duration::from_secs(5));
    Ok(())
}

/// Connections the echo server takes (`bench models --service echo`
/// refuses more clients).
pub const ECHO_SERVER_CONNS: usize = 10_000;

fn echo_server(a: EchoServerArgs) -> anyhow::Result<()> {
    let signals = super::catch_termination()?;
    a.io.apply();
    let mut b = duality_models::ServerBuilder::new()
        .model(a.model)
        .handoff(a.handoff.handoff)
        .idle_spin(a.io.idle_spin())
        .cpu_affinity(a.io.cpu_affinity.clone())
        .loop_slice(a.io.loop_slice())
        .payload_spin(a.io.payload_spin())
        .max_conns(ECHO_SERVER_CONNS);
    if let Some(p) = &a.unix {
        b = b.unix(p);
    }
    if let Some(t) = a.tcp {
        b = b.tcp(t);
    }
    let d = duality_models::echo::Detector::new(a.work);
    let server = b.serve(move |c, p| duality_models::echo::serve(c, p, d.clone()))?;
    duality_rt::say_out!("ready {:?}", server.tcp_addrs());
    super::wait_for_termination(signals);
    server.shutdown(Duration::from_secs(5));
    Ok(())
}
