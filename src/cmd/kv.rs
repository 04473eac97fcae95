//! `duality kv`: the memcached-compatible cache, with memcached's flags.

use clap::Args;
use duality_kv::server::{serve_conn, sweep_forever, KvConfig, KvState, Mode};
use duality_models::{Model, ServerBuilder};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct KvArgs {
    /// TCP port to listen on (0: no TCP listener).
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// Interface to listen on; repeat or comma-separate for several.
    #[arg(
        short = 'l',
        long = "listen",
        value_delimiter = ',',
        default_value = "127.0.0.1"
    )]
    listen: Vec<IpAddr>,
    /// Unix socket path to listen on (as well).
    #[arg(short = 's', long = "unix-socket")]
    unix_socket: Option<PathBuf>,
    /// Worker threads: the N of the default model `symped:N` (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Item memory in megabytes (resident memory stays below this + 32 MiB).
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    memory_limit: usize,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "max-conns", default_value_t = 1024)]
    max_conns: usize,
    /// Largest item size, e.g. 1m, 512k or bytes (default 1m).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    max_item_size: usize,
    /// Verbose logging (-v, -vv).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(flatten)]
    io: super::IoArg,
    /// Threading model (sped, amped:P, seda:N:P, seda-s:N, symped:N, thread-per-conn, steal:N).
    #[arg(long)]
    model: Option<Model>,
    /// Let the kernel back memory with transparent huge pages (memcached's
    /// -L). Off by default: with them every thread's allocator arena and
    /// every idle connection costs far more resident memory.
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,
    /// Let the `shutdown` command stop the server gracefully, as SIGTERM
    /// does (memcached's -A). Without it `shutdown` is refused.
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// UDP port: only 0 (off) is accepted; UDP is not supported.
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,
    /// Protocol: auto (detected per connection), ascii (text and meta
    /// only) or binary (binary only).
    #[arg(short = 'B', long = "protocol", default_value = "auto", value_parser = ["auto", "ascii", "binary"])]
    protocol: String,
    /// Most requests of one read served before the connection yields to
    /// others (memcached's -R; default 64).
    #[arg(short = 'R', long = "max-reqs-per-event")]
    reqs_per_event: Option<usize>,
    /// Accepted for memcached compatibility and ignored: CAS stays enabled.
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// Refused: duality kv does not daemonize.
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Write the process id to this file (removed at exit).
    #[arg(short = 'P', long = "pidfile")]
    pidfile: Option<PathBuf>,
    /// Print the version (`duality-kv <version>`) and exit.
    #[arg(short = 'V', long = "version")]
    version: bool,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mult) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1 << 10),
        Some('m') => (&s[..s.len() - 1], 1 << 20),
        _ => (&s[..], 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (use bytes, or a number with k or m)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

pub fn run(a: KvArgs) -> anyhow::Result<()> {
    if a.version {
        // memcached prints `memcached 1.6.x`.
        println!("duality-kv {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    let io = a.io.apply();
    anyhow::ensure!(
        !a.daemon,
        "-d: run duality kv under a supervisor (systemd, runit); it does not daemonize"
    );
    anyhow::ensure!(
        a.udp_port == 0,
        "-U {}: UDP is not supported (duality kv serves TCP and Unix sockets); use -U 0",
        a.udp_port
    );
    if let Some(0) = a.reqs_per_event {
        anyhow::bail!("-R must be at least 1");
    }
    let protocol = match a.protocol.as_str() {
        "ascii" => Mode::Text,
        "binary" => Mode::Binary,
        _ => Mode::Unknown,
    };
    anyhow::ensure!(a.memory_limit > 0, "-m must be at least 1 (megabyte)");
    anyhow::ensure!(a.max_conns > 0, "-c must be at least 1");
    if let Some(0) = a.threads {
        anyhow::bail!("-t must be at least 1");
    }
    let threads = a.threads.unwrap_or_else(duality_models::cores);
    let model = a.model.unwrap_or(Model::Symped { n: threads });
    anyhow::ensure!(
        a.port != 0 || a.unix_socket.is_some(),
        "nothing to listen on: give a port (-p) or a Unix socket (-s)"
    );
    let config = KvConfig {
        memory_limit: a.memory_limit << 20,
        max_item_size: a.max_item_size,
        max_conns: a.max_conns,
        threads,
        model: model.to_string(),
        verbosity: a.verbose as u32,
        enable_shutdown: a.enable_shutdown,
        protocol,
        requests_per_event: a
            .reqs_per_event
            .unwrap_or(KvConfig::default().requests_per_event),
        ..KvConfig::default()
    };
    let state = KvState::new(config)?;
    // Registered before the listeners open, so neither a signal nor the
    // `shutdown` command can arrive before the graceful path is in place.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    let handle = signals.handle();
    state.on_shutdown(move || handle.close());
    let mut b = ServerBuilder::new()
        .name("kv")
        .model(model)
        .max_conns(a.max_conns)
        .refusal_message("ERROR Too many open connections\r\n");
    if a.port != 0 {
        for ip in &a.listen {
            b = b.tcp(SocketAddr::new(*ip, a.port));
        }
    }
    if let Some(p) = &a.unix_socket {
        b = b.unix(p);
    }
    let st = state.clone();
    let mut server = b.serve(move |c, p| serve_conn(c, p, st.clone()))?;
    state.attach(server.stats_handle());
    let st = state.clone();
    server.spawn_background(move |p| sweep_forever(p, st));
    let mut at: Vec<String> = server.tcp_addrs().iter().map(|a| a.to_string()).collect();
    if let Some(p) = &a.unix_socket {
        at.push(p.display().to_string());
    }
    // Written before the ready line, so whoever waits for it finds the file.
    let pidfile = match &a.pidfile {
        Some(p) => {
            std::fs::write(p, format!("{}\n", std::process::id()))
                .map_err(|e| anyhow::anyhow!("-P {}: {e}", p.display()))?;
            Some(p)
        }
        None => None,
    };
    println!(
        "ready kv {} model {} io {} on {}",
        env!("CARGO_PKG_VERSION"),
        model,
        io,
        at.join(", ")
    );
    if a.verbose > 0 {
        eprintln!("duality kv: {config:?}", config = a);
    }
    if a.disable_cas && a.verbose > 0 {
        eprintln!("duality kv: -C ignored: CAS stays enabled");
    }
    // Ends on SIGTERM/SIGINT, or when `shutdown` closes the handle.
    signals.forever().next();
    let report = server.shutdown(Duration::from_secs(5));
    if report.cut_off > 0 {
        eprintln!(
            "duality kv: {} connections cut off at shutdown",
            report.cut_off
        );
    }
    if let Some(p) = pidfile {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2048"), Ok(2048));
        assert!(parse_size("x").is_err());
    }
}
