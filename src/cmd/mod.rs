//! One module per subcommand.

pub mod bench;
pub mod bench_balance;
pub mod bench_colors;
pub mod bench_disk;
pub mod bench_fairness;
pub mod bench_http;
pub mod bench_idle;
pub mod bench_kv;
pub mod bench_offload;
pub mod bench_soak;
pub mod bench_store;
pub mod http;
pub mod http_location;
pub mod internal;
pub mod kv;
pub mod nginx_conf;
pub mod process;

/// Watches for a second stop signal once a graceful stop has begun: one of
/// `stops` sets the returned flag (the server then cuts its connections off
/// at once instead of waiting out the grace, as a second Ctrl-C does
/// elsewhere) and says so. Other signals are ignored from then on.
///
/// Its own registration, made before `first` (the registration that saw
/// the first signal) is dropped; a signal that came to `first` after the one
/// its caller saw, before this registration existed, counts too. `first`
/// may have been closed (the cache's `shutdown` command closes it). Without
/// a thread to watch (none can be made), the stop is simply not cut short.
pub fn second_signal(
    server: &'static str,
    stops: &'static [i32],
    mut first: signal_hook::iterator::Signals,
) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let now = std::sync::Arc::new(AtomicBool::new(false));
    let say = move || {
        duality_rt::say!("duality {server}: a second stop signal: open connections are cut off now")
    };
    let signals = signal_hook::iterator::Signals::new(stops);
    // Checked after the new registration: one that came since reached both,
    // and is said once (no watcher is started).
    if first.pending().any(|sig| stops.contains(&sig)) {
        now.store(true, Relaxed);
        say();
        return now;
    }
    drop(first);
    let Ok(mut signals) = signals else {
        return now;
    };
    let flag = now.clone();
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if stops.contains(&sig) {
                    flag.store(true, Relaxed);
                    say();
                    break;
                }
            }
        });
    now
}

/// The soft descriptor limit (`ulimit -n`), if the kernel says.
pub fn nofile() -> Option<u64> {
    nofile_limits().map(|(soft, _)| soft)
}

/// Descriptors a server keeps beside its connections' under `model`,
/// listening on `tcp` addresses (each once per network loop under
/// [`Balance::ReusePort`](duality_models::Balance::ReusePort)) and `unix`
/// sockets: those open now (the standard streams, anything inherited), its
/// threads' ([`duality_models::Model::thread_descriptors`]), its listeners,
/// and 16 for what opens later (the signal pipe, a memory file, the metrics
/// listener, a pid file, a log reopened, `/proc` reads).
pub fn standing_descriptors(
    model: duality_models::Model,
    balance: duality_models::Balance,
    tcp: usize,
    unix: usize,
) -> u64 {
    let per_addr = match balance {
        duality_models::Balance::ReusePort => model.threads().max(1),
        _ => 1,
    };
    let listeners = tcp * per_addr + unix;
    let open_now = std::fs::read_dir("/proc/self/fd").map_or(3, |d| d.count().saturating_sub(1));
    (open_now + model.thread_descriptors() + listeners + 16) as u64
}

/// The soft and hard descriptor limits.
fn nofile_limits() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a live local struct.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0)
        .then_some((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft descriptor limit toward `want` (never past the hard
/// limit, never lowering it), as memcached does for its `-c`; returns the
/// soft limit in force afterwards.
pub fn raise_nofile(want: u64) -> Option<u64> {
    let (soft, hard) = nofile_limits()?;
    if soft >= want {
        return Some(soft);
    }
    let lim = libc::rlimit {
        rlim_cur: want.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads a live local struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        Some(lim.rlim_cur)
    } else {
        Some(soft)
    }
}

/// `--handoff`, beside `--model` on `duality kv`, `duality http` and the echo server.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct HandoffArg {
    /// Under the hand-off models (amped, seda, seda-s): `always` hands every
    /// batch of requests to a payload thread; `adaptive` runs a batch on its
    /// network loop while batches are learned to cost less than a hand-off
    /// (colors still exclusive, by color locks). The other models ignore it.
    #[arg(long, value_name = "always|adaptive", default_value = "always")]
    pub handoff: duality_models::Handoff,
}

impl HandoffArg {
    /// What start-up lines add after the model: " handoff adaptive" where
    /// it changes anything, nothing otherwise.
    pub fn label(&self, model: duality_models::Model) -> String {
        if model.hands_off() && self.handoff != duality_models::Handoff::Always {
            format!(" handoff {}", self.handoff)
        } else {
            String::new()
        }
    }
}

/// The longest idle spin the flags take: a spin is for requests that come
/// within microseconds; a spinning loop also answers a stop signal late.
const MAX_SPIN_US: u64 = 1_000_000;

/// The `--io` flag and the loop settings the servers share.
#[derive(clap::Args, Debug, Clone)]
pub struct IoArg {
    /// The OS interface for socket I/O: `epoll` (readiness, a system call
    /// per read and write) or `uring` (io_uring: receives, sends and accepts
    /// batched into one system call per loop turn; falls back to epoll with
    /// a log line where the kernel refuses it). Default: `DUALITY_IO`, else uring.
    #[arg(long = "io", value_name = "epoll|uring")]
    pub io: Option<duality_rt::IoBackend>,
    /// Microseconds an idle network loop keeps looking for work (yielding
    /// the core between looks) before it sleeps: a request arriving within
    /// it costs no wake-up. 0: sleep at once; at most 1000000 (a second).
    /// An idle server still sleeps after this long, so it uses no CPU.
    /// Default: 100 on io_uring (a loop asleep in the ring is dearer to
    /// wake), 30 on epoll.
    #[arg(
        long,
        value_name = "US",
        value_parser = clap::value_parser!(u64).range(..=MAX_SPIN_US),
        env = "DUALITY_IDLE_SPIN_US"
    )]
    pub idle_spin_us: Option<u64>,
    /// Microseconds an idle payload thread of a hand-off model (amped,
    /// seda, seda-s) keeps looking for jobs before it sleeps: a job arriving
    /// within it costs its network loop no wake-up. 0: sleep at once; at
    /// most 1000000 (a second).
    #[arg(
        long,
        value_name = "US",
        value_parser = clap::value_parser!(u64).range(..=MAX_SPIN_US),
        env = "DUALITY_PAYLOAD_SPIN_US",
        default_value_t = duality_models::DEFAULT_PAYLOAD_SPIN.as_micros() as u64
    )]
    pub payload_spin_us: u64,
    /// Pin the i-th network loop and the i-th payload thread to the i-th
    /// CPU (nginx's `worker_cpu_affinity`): `off` (the kernel places them),
    /// `auto` (the CPUs this process may use, in order) or a list such as
    /// `0-3,6`. Under seda-s a loop and the payload thread it hands to
    /// then share a core, and the requests they pass stay in its caches.
    /// The acceptor is not pinned.
    #[arg(
        long,
        value_name = "off|auto|LIST",
        default_value = "off",
        env = "DUALITY_CPU_AFFINITY"
    )]
    pub cpu_affinity: duality_models::CpuAffinity,
    /// Microseconds of CPU time slice every loop of the server (network
    /// loops, acceptor, payload threads) asks the kernel for (Linux 6.12
    /// and later; older kernels ignore it): a woken loop preempts a thread
    /// with a longer slice on its core at once instead of waiting up to
    /// that thread's slice (1.4 ms on two cores), while its share of the
    /// CPU stays the same. Matters where loops share cores with other busy
    /// threads; here, with the load generator beside the server, it was
    /// as often a loss as a gain (docs/results/models/slice-ab-93f9598/).
    /// 0 (the default): the slice the server was started with (the
    /// kernel's, unless its parent set its own), and 100 µs while the CPU
    /// pool runs raised out of the kernel's background class (its jobs
    /// starved there: the loops then wake behind compressing pool threads);
    /// else 100 to 100000, always.
    #[arg(
        long,
        value_name = "US",
        value_parser = loop_slice_us,
        env = "DUALITY_LOOP_SLICE_US",
        default_value_t = 0
    )]
    pub loop_slice_us: u64,
}

/// `--loop-slice-us`: 0, or what the kernel takes without clamping it.
fn loop_slice_us(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of microseconds"))?;
    if v == 0 || (100..=100_000).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v} is outside 100-100000 (the kernel's range; 0: its default)"
        ))
    }
}

impl IoArg {
    /// The loops' time slice (`None`: the kernel's default).
    pub fn loop_slice(&self) -> Option<std::time::Duration> {
        (self.loop_slice_us > 0).then(|| std::time::Duration::from_micros(self.loop_slice_us))
    }

    /// The network loops' idle spin if the flag gave one; `None` leaves
    /// the server its default for the backend [`IoArg::apply`] chose.
    pub fn idle_spin(&self) -> Option<std::time::Duration> {
        self.idle_spin_us.map(std::time::Duration::from_micros)
    }

    /// Says on stderr where `--cpu-affinity` pins `who`'s threads, unless off.
    pub fn say_affinity(&self, who: &str) {
        if self.cpu_affinity != duality_models::CpuAffinity::Off {
            duality_rt::say!(
                "{who}: network loop i and payload thread i pinned to CPU i of {} (--cpu-affinity)",
                match &self.cpu_affinity {
                    duality_models::CpuAffinity::Auto => duality_rt::affinity::allowed_cpus()
                        .map(|c| duality_rt::affinity::format_cpus(&c))
                        .unwrap_or_else(|_| "auto".into()),
                    l => l.to_string(),
                }
            );
        }
    }

    /// The payload threads' idle spin.
    pub fn payload_spin(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.payload_spin_us)
    }

    /// Makes every loop the server creates use the chosen backend; returns
    /// the backend its loops will really use (after any fallback).
    pub fn apply(&self) -> duality_rt::IoBackend {
        if let Some(b) = self.io {
            duality_rt::set_default_io_backend(b);
        }
        duality_rt::io_backend_in_use()
    }
}

/// The introspection flags both servers share.
#[derive(clap::Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Serve the metrics in Prometheus' text format (0.0.4) at
    /// http://ADDR/metrics, on a listener and thread of their own (the
    /// memcached and nginx exporters' convention). ADDR is IP:PORT (an IPv6
    /// address in brackets), HOST:PORT (its first address), or PORT, :PORT
    /// or *:PORT for every IPv4 interface (the exporters' :9150). Port 0 picks a
    /// free port; the address is printed on stderr as
    /// `metrics http://ADDR/metrics`. Off by default.
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// A single task poll longer than this many milliseconds is counted as
    /// a long poll (`duality_loop_long_polls_total`) and logged as a
    /// warning naming the task (at most a line a second per loop); 0 turns
    /// both off.
    #[arg(long, value_name = "MS", default_value_t = 10)]
    pub long_poll_warn_ms: u64,
}

/// Parses the command line as clap does, then refuses a value given twice
/// in a `duality bench` list (`--models sped,sped`, `--clients 8,8`): the
/// run measured the point twice and printed two rows of the same label.
/// The matches come back too: they say where each value stood.
pub fn parse_cli<T: clap::Parser>() -> (T, clap::ArgMatches) {
    let mut cmd = T::command();
    // Built, the subcommands know their full names for the usage line.
    cmd.build();
    let argv = nginx_conf::expand_args(std::env::args_os().collect());
    let argv = http_location::group_args(argv);
    let matches = cmd.clone().get_matches_from(argv);
    if let Some(("bench", bench)) = matches.subcommand() {
        let bench_cmd = cmd.find_subcommand("bench").expect("matched");
        if let Err(e) = no_value_twice(bench_cmd, bench) {
            e.exit();
        }
    }
    let parsed = T::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    (parsed, matches)
}

/// Refuses a value given twice to one comma-separated list of `cmd` or of
/// the subcommand `matches` went on to.
fn no_value_twice(cmd: &clap::Command, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
    for arg in cmd.get_arguments() {
        if arg.get_value_delimiter().is_none() {
            continue;
        }
        let id = arg.get_id().as_str();
        let Ok(Some(raw)) = matches.try_get_raw(id) else {
            continue;
        };
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = raw.into_iter().find(|v| !seen.insert(*v)) {
            let name = arg
                .get_long()
                .map_or_else(|| id.to_string(), |l| format!("--{l}"));
            return Err(cmd.clone().error(
                clap::error::ErrorKind::ValueValidation,
                format!("{name}: {} given twice", twice.to_string_lossy()),
            ));
        }
    }
    match matches.subcommand() {
        Some((name, sub)) => match cmd.find_subcommand(name) {
            Some(sub_cmd) => no_value_twice(sub_cmd, sub),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// `--metrics-listen`'s address: what `http --listen` takes (the first
/// address a host name resolves to), and `:PORT` as the exporters write it.
fn metrics_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    let any = s.strip_prefix(':').map(|p| format!("*:{p}"));
    let l: ListenAddr = any.as_deref().unwrap_or(s).parse()?;
    Ok(l.0[0])
}

impl MetricsArgs {
    /// The long-poll threshold for the loops (`None`: never warn).
    pub fn long_poll_threshold(&self) -> Option<std::time::Duration> {
        (self.long_poll_warn_ms > 0)
            .then(|| std::time::Duration::from_millis(self.long_poll_warn_ms))
    }

    /// Starts the metrics listener if asked, serving `render()`; prints
    /// where it listens on stderr.
    pub fn start(
        &self,
        server: &str,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> anyhow::Result<Option<duality_models::metrics::MetricsListener>> {
        let Some(addr) = self.metrics_listen else {
            return Ok(None);
        };
        let l = duality_models::metrics::MetricsListener::start(addr, render)?;
        duality_rt::say!("duality {server}: metrics http://{}/metrics", l.addr());
        Ok(Some(l))
    }
}

/// Catches SIGTERM and SIGINT (before any thread starts: see
/// `process::catch_signals`); [`wait_for_termination`] blocks on them.
pub fn catch_termination() -> std::io::Result<signal_hook::iterator::Signals> {
    process::catch_signals(&[signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
}

/// Blocks until one of `signals` comes.
pub fn wait_for_termination(mut signals: signal_hook::iterator::Signals) {
    signals.forever().next();
}

/// The addresses a host name resolves to, each once, in the resolver's
/// order (for listen flags given a name, as memcached's `-l localhost` and
/// nginx's `listen localhost:80`).
pub fn resolve_host(name: &str) -> Result<Vec<std::net::IpAddr>, String> {
    use std::net::ToSocketAddrs;
    let addrs = (name, 0)
        .to_socket_addrs()
        .map_err(|e| format!("not an address, and the host name does not resolve: {e}"))?;
    let mut ips = Vec::new();
    for a in addrs {
        if !ips.contains(&a.ip()) {
            ips.push(a.ip());
        }
    }
    if ips.is_empty() {
        return Err(format!("host name {name:?} resolves to no address"));
    }
    Ok(ips)
}

/// An address to listen on as nginx's `listen` takes it: `ADDR:PORT`
/// (`[V6]:PORT`), `HOST:PORT` (every address the name resolves to), `PORT`
/// or `*:PORT` (every IPv4 interface, 0.0.0.0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenAddr(pub Vec<std::net::SocketAddr>);

impl std::str::FromStr for ListenAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<ListenAddr, String> {
        use std::net::{Ipv4Addr, SocketAddr};
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(ListenAddr(vec![a]));
        }
        // Else `a:1,[::1]:1` was told to bracket an IPv6 address.
        if s.contains(',') {
            return Err(format!(
                "{s:?}: one address, not a comma-separated list (repeat --listen for several)"
            ));
        }
        let port = |p: &str| {
            p.parse::<u16>()
                .map_err(|_| format!("{s:?}: the port must be a number up to 65535"))
        };
        let any = |p: u16| ListenAddr(vec![SocketAddr::from((Ipv4Addr::UNSPECIFIED, p))]);
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(any(port(s)?));
        }
        let Some((host, p)) = s.rsplit_once(':') else {
            return Err(format!(
                "{s:?}: give ADDRESS:PORT, HOST:PORT, *:PORT or PORT"
            ));
        };
        let p = port(p)?;
        if host == "*" {
            return Ok(any(p));
        }
        // `::1:80` is itself an IPv6 address: nginx wants the brackets too.
        if host.contains(':') {
            return Err(format!(
                "{s:?}: write an IPv6 address in brackets, [ADDRESS]:PORT"
            ));
        }
        let ips = resolve_host(host).map_err(|e| format!("{host:?}: {e}"))?;
        Ok(ListenAddr(
            ips.into_iter().map(|ip| SocketAddr::new(ip, p)).collect(),
        ))
    }
}

/// A file holding this process's id (memcached's `-P`, nginx's `pid`):
/// written before the server says it is ready, so whoever waits for that
/// line finds it, and removed when dropped, at exit.
pub struct PidFile(std::path::PathBuf);

impl PidFile {
    /// Writes it; an error names `flag` and the path.
    pub fn write(path: &std::path::Path, flag: &str) -> anyhow::Result<PidFile> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
        Ok(PidFile(path.to_owned()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Turns transparent huge pages off (or back on) for this process's future
/// page faults. The allocator asks for huge pages on its arenas; on a
/// kernel in `madvise` mode each thread's arena then takes 2 MiB pages, and
/// an idle server, or one thread per connection, holds megabytes it never
/// uses (thread-per-conn: 870 KB per connection with them, 50 KB without).
pub fn transparent_huge_pages(enabled: bool) {
    // Varargs: each argument as the unsigned long the kernel reads.
    let (off, zero): (libc::c_ulong, libc::c_ulong) = (libc::c_ulong::from(!enabled), 0);
    // SAFETY: prctl(PR_SET_THP_DISABLE) takes plain integers and changes
    // only a flag of this process's memory map; no pointer is passed.
    let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, off, zero, zero, zero) };
    if r != 0 {
        tracing::debug!(
            "cannot set transparent huge pages: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The longest window, warm-up or run a `--seconds`-like flag may ask for.
pub const MAX_SECONDS: f64 = 24.0 * 3600.0;

/// A `flag` given in seconds as a duration: a finite number, positive (or
/// zero where `zero_ok`), at most a day; the error names the flag.
pub fn seconds(flag: &str, v: f64, zero_ok: bool) -> anyhow::Result<std::time::Duration> {
    let low_ok = if zero_ok { v >= 0.0 } else { v > 0.0 };
    let shown = if v.abs() < 1e6 {
        format!("{v}")
    } else {
        format!("{v:e}")
    };
    anyhow::ensure!(
        v.is_finite() && low_ok && v <= MAX_SECONDS,
        "{flag} {shown}: must be a {} number of seconds, at most {MAX_SECONDS} (a day)",
        if zero_ok { "non-negative" } else { "positive" }
    );
    Ok(std::time::Duration::from_secs_f64(v))
}

/// clap's parser for a flag in seconds: a finite number from 0 to a day
/// (a window of `inf` or `1e300` seconds is no window; a `Duration` cannot
/// hold it). Whether 0 is allowed is each experiment's check.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "must be a number of seconds from 0 to {MAX_SECONDS} (a day)"
        ))
    }
}

/// The flags every experiment shares (flattened into its arguments).
#[derive(clap::Args)]
pub struct OutputArgs {
    /// A smoke run that finishes in well under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Print JSON instead of Markdown tables.
    #[arg(long)]
    pub json: bool,
    /// Results directory (default: results/EXPERIMENT-UNIXTIME).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

/// Where an experiment writes its results (`out` if given, else
/// `results/<name>-<unix time>`), created and checked writable *before*
/// anything is measured: a run never ends in an unwritable directory. The
/// error names the path (`cannot write results to /x/y: File exists`).
pub fn results_dir(
    out: Option<&std::path::Path>,
    name: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let dir = out.map(std::path::Path::to_path_buf).unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        std::path::PathBuf::from("results").join(format!("{name}-{t}"))
    });
    let probe = dir.join(format!(".duality-write-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            // "File exists", not "File exists (os error 17)".
            let e = e.to_string();
            let e = e.split(" (os error").next().unwrap_or(&e).to_string();
            anyhow::anyhow!("cannot write results to {}: {e}", dir.display())
        })?;
    Ok(dir)
}

/// This process's command line as a results file states it: each argument
/// shell-quoted where it must be (an empty one, or one with spaces or shell
/// characters), so the line can be pasted back to run again.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().collect();
    quote_args(&args)
}

fn quote_args(args: &[String]) -> String {
    let plain = |a: &str| {
        !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b))
    };
    let quoted: Vec<String> = args
        .iter()
        .map(|a| match plain(a) {
            true => a.clone(),
            false => format!("'{}'", a.replace('\'', "'\\''")),
        })
        .collect();
    quoted.join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_command_line_quotes_what_the_shell_would_split_or_drop() {
        let args = [
            "duality",
            "bench",
            "--runtimes",
            "",
            "--x",
            "a b",
            "it's",
            "--m=sped,amped:2",
        ];
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            super::quote_args(&args),
            "duality bench --runtimes '' --x 'a b' 'it'\\''s' --m=sped,amped:2"
        );
    }

    #[test]
    fn metrics_addresses() {
        let sa = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        assert_eq!(
            super::metrics_addr("127.0.0.1:9150"),
            Ok(sa("127.0.0.1:9150"))
        );
        assert_eq!(super::metrics_addr("[::1]:0"), Ok(sa("[::1]:0")));
        for any in [":9150", "*:9150", "9150"] {
            assert_eq!(super::metrics_addr(any), Ok(sa("0.0.0.0:9150")), "{any}");
        }
        assert!(super::metrics_addr("localhost:9150")
            .unwrap()
            .ip()
            .is_loopback());
        for bad in ["", ":", "localhost", "::1:80", "x:y"] {
            assert!(super::metrics_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses_as_nginx_takes_them() {
        use super::ListenAddr;
        use std::net::SocketAddr;
        let one = |s: &str| s.parse::<ListenAddr>().map(|l| l.0);
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(one("127.0.0.1:80"), Ok(vec![sa("127.0.0.1:80")]));
        assert_eq!(one("[::1]:8080"), Ok(vec![sa("[::1]:8080")]));
        assert_eq!(one("8080"), Ok(vec![sa("0.0.0.0:8080")]));
        assert_eq!(one("*:81"), Ok(vec![sa("0.0.0.0:81")]));
        let local = one("localhost:82").unwrap();
        assert!(!local.is_empty() && local.iter().all(|a| a.port() == 82 && a.ip().is_loopback()));
        for bad in [
            "",
            "localhost",
            "x:y",
            "127.0.0.1:70000",
            "99999",
            "no-such-host.invalid:80",
            "::1:80",
        ] {
            assert!(one(bad).is_err(), "{bad:?} accepted");
        }
        let list = one("127.0.0.1:80,[::1]:80").unwrap_err();
        assert!(list.contains("not a comma-separated list"), "{list}");
    }

    use super::MetricsArgs;
    use std::time::Duration;

    #[test]
    fn seconds_refuse_what_a_duration_cannot_hold_and_name_the_flag() {
        for bad in [f64::INFINITY, f64::NAN, 1e300, -1.0, 0.0] {
            let e = super::seconds("--warmup", bad, false).unwrap_err();
            assert!(e.to_string().starts_with("--warmup "), "{e}");
        }
        assert_eq!(
            super::seconds("--warmup", 0.0, true).unwrap(),
            Duration::ZERO
        );
        assert_eq!(
            super::seconds("--seconds", 1.5, false).unwrap(),
            Duration::from_millis(1500)
        );
    }

    #[test]
    fn results_dir_names_the_path_it_cannot_write() {
        let file =
            std::env::temp_dir().join(format!("duality-results-file-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let e = super::results_dir(Some(&file), "x")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("cannot write results to {}: File exists", file.display())
        );
        std::fs::remove_file(&file).unwrap();
        let dir = file.with_extension("d");
        assert_eq!(super::results_dir(Some(&dir), "x").unwrap(), dir);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the probe is gone"
        );
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn long_poll_warn_ms_zero_turns_warnings_off() {
        let at = |ms| MetricsArgs {
            metrics_listen: None,
            long_poll_warn_ms: ms,
        };
        assert_eq!(at(0).long_poll_threshold(), None);
        assert_eq!(
            at(25).long_poll_threshold(),
            Some(Duration::from_millis(25))
        );
    }
}
