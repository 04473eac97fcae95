//! `duality bench http`: the seeds' Figure 3 (Knot) — requests/s and
//! bandwidth against concurrent clients, duality against nginx in the same
//! run.
//!
//! ```text
//!  load generator (this process, or child processes      server under test
//!  `duality bench http --child …` above the fd limit)     (its own process)
//!  ┌────────────────────────────────────────────┐         ┌──────────────────┐
//!  │ N closed-loop keep-alive clients, one      │  TCP    │ duality http     │
//!  │ request in flight each, on duality-rt      │ ──────► │   symped, Knot-C │
//!  │ loops; counts responses and body bytes     │ loopback│   symped, Knot-A │
//!  │ in the measured window                     │         │   sped           │
//!  └────────────────────────────────────────────┘         │ nginx 1 | 2 wkrs │
//!                                                         └──────────────────┘
//! ```
//!
//! Every server is started first; then for each workload file, each client
//! count, each repetition and each server in turn (see [`run`]): open the
//! connections (waiting for all of them, at most [`CONNECT_WAIT`]), warm up,
//! count completed responses over `seconds`, close them all with a reset (so
//! no `TIME_WAIT` piles up between points), go on. The median repetition is
//! reported. The servers are stopped (nginx by the PID in its pid file) at
//! the end, also on error.
//!
//! Bandwidth counts response **bodies** only (what the file workload is):
//! `Mbit/s = body bytes × 8 / 10⁶ / s`.
//!
//! nginx runs from a configuration written into a temporary prefix
//! ([`nginx_config`]): `worker_processes 1|2`, `access_log off`,
//! `keepalive_requests 100000`, `sendfile on`, and
//! `open_file_cache … open_file_cache_valid 1s`, the counterpart of
//! duality's `--revalidate-ms 1000` (both answer a hot file without
//! `open`/`stat` for up to a second). It runs in a process group of its
//! own, stopped as a group, so that workers whose master died are stopped
//! too.
//!
//! A server that exits during the run (checked after every point) or
//! answers nothing at a point is not reported as a real zero: its rows say
//! why ([`HttpRow::failed`]) and carry no figures (`-`, JSON null), and
//! the command fails once the results are written.

use crate::interrupt::SpawnUnlessInterrupted;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One point of the figure. A clean point is serialised as exactly its
/// first six fields; one with errors adds `errors`, a failed one `failed`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HttpRow {
    /// Server configuration (see [`ServerKind::label`]).
    pub server: String,
    /// Workload file (`100B` or `16KiB`).
    pub file: String,
    /// Concurrent client connections.
    pub clients: usize,
    /// Completed `200` responses per second; `None` where the point
    /// failed ([`HttpRow::failed`]).
    pub requests_per_sec: Option<f64>,
    /// Response-body bandwidth, Mbit/s; `None` where the point failed.
    pub mbit_per_sec: Option<f64>,
    /// The server's CPU time (user + system, every process and thread of
    /// it: nginx's master and workers) over the measured window, divided by
    /// the requests completed in it, microseconds. On a machine the load
    /// generator shares, this, not requests/s, says whose code is cheaper.
    /// `None` where the point failed, or where the CPU time read 0 clock
    /// ticks (a window shorter than the clock's 10 ms).
    pub cpu_us_per_request: Option<f64>,
    /// Failed requests and connections during the point (in the JSON
    /// where there were any).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub errors: u64,
    /// Client connections open at the end of the reported window (fewer
    /// than `clients` when some were still connecting; not in the JSON).
    #[serde(skip_serializing, default)]
    pub connected: usize,
    /// Why this point measured nothing of the server: `exited: …` (it
    /// died during the run: this point and every later one) or `no
    /// answer: …` (alive, but not one response in the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl HttpRow {
    /// `exited` or `no answer`: [`HttpRow::failed`] in a word or two.
    pub fn failed_tag(&self) -> Option<&str> {
        self.failed
            .as_deref()
            .map(|f| f.split(':').next().unwrap_or(f))
    }
}

/// The client counts of the figure.
pub const DEFAULT_CLIENTS: [usize; 8] = [1, 4, 16, 64, 256, 1024, 4096, 16384];

/// Longest wait for all connections of a point to open.
pub const CONNECT_WAIT: Duration = Duration::from_secs(15);

/// Descriptors kept free for everything that is not a client connection.
pub const FD_MARGIN: usize = 256;

/// Most nginx workers a server name may ask for (`nginx-1024w`): nginx's
/// own process table holds 1,024 (`NGX_MAX_PROCESSES`); `nginx-99999w`
/// forked workers until it failed, and left hundreds behind.
pub const MAX_NGINX_WORKERS: usize = 1024;

/// Most loops of `duality-knot-c:N` / `duality-knot-a:N`: as many threads
/// as `duality http --model symped:N` takes.
pub const MAX_LOOPS: usize = 1024;

/// Longest wait for `nginx -v` / `nginx -V` to answer.
pub const NGINX_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A workload: one file, requested over and over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Label in the results (`100B`, `16KiB`).
    pub label: String,
    /// File name under the document root.
    pub name: String,
    /// Its size in bytes.
    pub size: usize,
}

/// One file of `size` bytes: `100B`, `1KiB`, `16KiB` … (sizes that are not
/// whole KiB keep bytes); 100 bytes is the `index.html` of the defaults.
pub fn workload_of_size(size: usize) -> Workload {
    let (label, name) = match size {
        100 => ("100B".to_string(), "index.html".to_string()),
        16384 => ("16KiB".into(), "16k.html".into()),
        n if n >= 1024 && n % 1024 == 0 => {
            (format!("{}KiB", n / 1024), format!("{}k.html", n / 1024))
        }
        n => (format!("{n}B"), format!("{n}b.html")),
    };
    Workload { label, name, size }
}

/// The two workloads: a small `index.html`-like page and a 16 KiB file.
pub fn default_workloads() -> Vec<Workload> {
    vec![
        Workload {
            label: "100B".into(),
            name: "index.html".into(),
            size: 100,
        },
        Workload {
            label: "16KiB".into(),
            name: "16k.html".into(),
            size: 16 * 1024,
        },
    ]
}

/// A server configuration under test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// `duality http --model <model> --accept <accept>`.
    Duality {
        /// Label in the results.
        label: String,
        /// `--model`.
        model: String,
        /// `--accept`.
        accept: String,
        /// `--io` (the server's default when `None`).
        io: Option<String>,
    },
    /// nginx with this many worker processes.
    Nginx {
        /// `worker_processes`.
        workers: usize,
    },
}

impl ServerKind {
    /// The name in tables, JSON and plots.
    pub fn label(&self) -> String {
        match self {
            ServerKind::Duality { label, .. } => label.clone(),
            ServerKind::Nginx { workers } => format!("nginx-{workers}w"),
        }
    }
}

/// Every configuration, in the order measured: duality `symped` Knot-C
/// (favor-active) and Knot-A (favor-accept), duality `sped`, nginx with 1
/// and with 2 workers.
pub fn default_servers() -> Vec<ServerKind> {
    let d = |label: &str, model: &str, accept: &str| ServerKind::Duality {
        label: label.into(),
        model: model.into(),
        accept: accept.into(),
        io: None,
    };
    vec![
        d("duality-knot-c", "symped", "favor-active"),
        d("duality-knot-a", "symped", "favor-accept"),
        d("duality-sped", "sped", "favor-active"),
        ServerKind::Nginx { workers: 1 },
        ServerKind::Nginx { workers: 2 },
    ]
}

/// A server named on the command line: one of [`default_servers`], one
/// sized for a bigger machine, `nginx-<N>w` (N workers, at most
/// [`MAX_NGINX_WORKERS`]) or `duality-knot-c:<N>` / `duality-knot-a:<N>`
/// (`symped:<N>`: N loops, at most [`MAX_LOOPS`], so the server and the
/// load generator can split a many-core machine), or a hand-off model,
/// `duality-<model>[/<handoff>]` (`duality-amped:1`,
/// `duality-seda-s:2/adaptive`: `--model`, `--handoff`). The error says
/// what is wrong with the name, before anything is started.
pub fn parse_server(name: &str) -> anyhow::Result<ServerKind> {
    if let Some(k) = default_servers().into_iter().find(|k| k.label() == name) {
        return Ok(k);
    }
    if let Some(rest) = name.strip_prefix("duality-") {
        let (model, handoff) = split_handoff(rest);
        let parsed = model.parse::<duality_models::Model>();
        if let Ok(m) = &parsed {
            if m.hands_off() {
                if let Some(h) = handoff {
                    h.parse::<duality_models::Handoff>().map_err(|e| {
                        anyhow::anyhow!("server {name:?}: hand-off policy {h:?}: {e}")
                    })?;
                }
                return Ok(ServerKind::Duality {
                    label: name.into(),
                    model: rest.into(),
                    accept: "favor-active".into(),
                    io: None,
                });
            }
        }
        // A hand-off model's own complaint (`amped:2000`: too many threads).
        if let (Err(e), Some(family)) = (&parsed, model.split(':').next()) {
            if ["amped", "seda", "seda-s"].contains(&family) {
                anyhow::bail!("server {name:?}: {e}");
            }
        }
    }
    if let Some(n) = name
        .strip_prefix("nginx-")
        .and_then(|r| r.strip_suffix('w'))
    {
        let workers: usize = n.parse().ok().filter(|&w| w >= 1).ok_or_else(|| {
            anyhow::anyhow!("server {name:?}: nginx-<N>w takes 1 to {MAX_NGINX_WORKERS} workers")
        })?;
        anyhow::ensure!(
            workers <= MAX_NGINX_WORKERS,
            "server {name:?}: {workers} nginx workers is more than nginx runs \
             (at most {MAX_NGINX_WORKERS})"
        );
        return Ok(ServerKind::Nginx { workers });
    }
    let unknown = || {
        let names: Vec<String> = default_servers().iter().map(|k| k.label()).collect();
        anyhow::anyhow!(
            "unknown server {name:?}; choose from {} (or nginx-<N>w, duality-knot-c:<N>, \
             duality-knot-a:<N>, duality-<hand-off model>[/always|adaptive])",
            names.join(", ")
        )
    };
    let (base, loops) = name.split_once(':').ok_or_else(unknown)?;
    let loops: usize = loops.parse().ok().filter(|&n| n >= 1).ok_or_else(unknown)?;
    match default_servers().into_iter().find(|k| k.label() == base) {
        Some(ServerKind::Duality {
            model, accept, io, ..
        }) if model == "symped" => {
            anyhow::ensure!(
                loops <= MAX_LOOPS,
                "server {name:?}: {loops} loops is more threads than the server supports \
                 (at most {MAX_LOOPS})"
            );
            Ok(ServerKind::Duality {
                label: name.into(),
                model: format!("symped:{loops}"),
                accept,
                io,
            })
        }
        _ => Err(unknown()),
    }
}

/// `MODEL/HANDOFF` → (`MODEL`, `Some(HANDOFF)`); a plain model → `None`.
fn split_handoff(model: &str) -> (&str, Option<&str>) {
    match model.split_once('/') {
        Some((m, h)) => (m, Some(h)),
        None => (model, None),
    }
}

/// What one load run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadResult {
    /// Complete `200` responses in the window.
    pub requests: u64,
    /// Their body bytes.
    pub body_bytes: u64,
    /// Failed connects, bad or cut responses (over the whole run).
    pub errors: u64,
    /// Length of the window, seconds.
    pub seconds: f64,
    /// Connections open at the end of the window.
    pub connected: usize,
    /// CPU time the server's processes ([`LoadSpec::server_pids`]) used
    /// over the window, seconds.
    #[serde(default)]
    pub server_cpu_seconds: f64,
}

impl LoadResult {
    /// Adds another process's result (windows are taken as equal; each
    /// load process measured the same server's CPU over its own window, so
    /// the caller averages `server_cpu_seconds`: here they add up).
    pub fn merge(&mut self, o: &LoadResult) {
        self.server_cpu_seconds += o.server_cpu_seconds;
        self.requests += o.requests;
        self.body_bytes += o.body_bytes;
        self.errors += o.errors;
        self.seconds = self.seconds.max(o.seconds);
        self.connected += o.connected;
    }
}

/// What one load run does.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// The server.
    pub addr: SocketAddr,
    /// The request target, e.g. `/index.html`.
    pub path: String,
    /// Concurrent connections.
    pub clients: usize,
    /// Event-loop threads the clients are spread over.
    pub threads: usize,
    /// Warm-up after every connection is open.
    pub warmup: Duration,
    /// The measured window.
    pub measure: Duration,
    /// The server's processes, whose CPU time is read at both ends of the
    /// window (none: not measured).
    pub server_pids: Vec<u32>,
}

#[repr(align(128))]
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
}

struct Shared {
    stop: AtomicBool,
    connected: AtomicI64,
    /// Connects in flight: at most [`MAX_CONNECTING`], so that a burst of
    /// thousands of SYNs does not overflow the server's SYN backlog (whose
    /// drops cost the client seconds of retransmission back-off).
    connecting: AtomicUsize,
}

/// Most connects in flight per load process.
pub const MAX_CONNECTING: usize = 256;

/// Runs closed-loop keep-alive clients in this process: `spec.clients`
/// connections, one `GET` in flight each, on `spec.threads` duality loops.
/// Needs one descriptor per client.
pub fn load(spec: &LoadSpec) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(spec.clients > 0, "no clients");
    let threads = spec.threads.clamp(1, spec.clients);
    let request: Arc<[u8]> = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: duality-bench\r\n\r\n",
        spec.path, spec.addr
    )
    .into_bytes()
    .into();
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        connected: AtomicI64::new(0),
        connecting: AtomicUsize::new(0),
    });
    let counters: Vec<Arc<Counters>> = (0..threads).map(|_| Arc::default()).collect();
    let mut loops = Vec::new();
    for (t, c) in counters.iter().enumerate() {
        let lp = duality_rt::LoopThread::spawn(duality_rt::LoopConfig {
            name: Some(format!("http-load-{t}")),
            long_poll_threshold: None,
            ..Default::default()
        })?;
        let n = spec.clients / threads + usize::from(t < spec.clients % threads);
        for _ in 0..n {
            let (shared, c, request) = (shared.clone(), c.clone(), request.clone());
            drop(lp.handle().spawn(client(spec.addr, request, shared, c)));
        }
        loops.push(lp);
    }
    let sum = |f: fn(&Counters) -> &AtomicU64| -> u64 {
        counters.iter().map(|c| f(c).load(Relaxed)).sum()
    };

    let until = Instant::now() + CONNECT_WAIT;
    while (shared.connected.load(Relaxed) as usize) < spec.clients && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(spec.warmup);
    let cpu0 = crate::proc::cpu_time_of_all(&spec.server_pids);
    let (r0, b0) = (sum(|c| &c.requests), sum(|c| &c.bytes));
    let t0 = Instant::now();
    std::thread::sleep(spec.measure);
    let (r1, b1) = (sum(|c| &c.requests), sum(|c| &c.bytes));
    let seconds = t0.elapsed().as_secs_f64();
    let cpu1 = crate::proc::cpu_time_of_all(&spec.server_pids);
    let connected = shared.connected.load(Relaxed).max(0) as usize;
    shared.stop.store(true, Relaxed);
    // Clients stop after their current response; stragglers are cancelled
    // with their loops (and their sockets reset).
    let until = Instant::now() + Duration::from_secs(1);
    while shared.connected.load(Relaxed) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    for lp in loops {
        let _ = lp.join();
    }
    Ok(LoadResult {
        requests: r1 - r0,
        body_bytes: b1 - b0,
        errors: sum(|c| &c.errors),
        seconds,
        connected,
        server_cpu_seconds: cpu1.saturating_sub(cpu0).as_secs_f64(),
    })
}

/// One client: connect, then request/response until told to stop;
/// reconnects after a failure.
async fn client(addr: SocketAddr, request: Arc<[u8]>, shared: Arc<Shared>, c: Arc<Counters>) {
    let mut buf = vec![0u8; 17 * 1024];
    while !shared.stop.load(Relaxed) {
        while shared.connecting.fetch_add(1, Relaxed) >= MAX_CONNECTING {
            shared.connecting.fetch_sub(1, Relaxed);
            duality_rt::time::sleep(Duration::from_millis(1)).await;
        }
        let s = duality_rt::net::TcpStream::connect(addr).await;
        shared.connecting.fetch_sub(1, Relaxed);
        let s = match s {
            Ok(s) => s,
            Err(_) => {
                c.errors.fetch_add(1, Relaxed);
                duality_rt::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Reset on close: no TIME_WAIT left behind to exhaust ports.
        let _ = s.set_linger(Some(Duration::ZERO));
        let _ = s.set_nodelay(true);
        shared.connected.fetch_add(1, Relaxed);
        while !shared.stop.load(Relaxed) {
            if s.write_all(&request).await.is_err() {
                c.errors.fetch_add(1, Relaxed);
                break;
            }
            match read_response(&s, &mut buf).await {
                Ok(r) => {
                    c.requests.fetch_add(1, Relaxed);
                    c.bytes.fetch_add(r.body, Relaxed);
                    if r.close {
                        // The server's keep-alive limit (nginx's
                        // keepalive_requests): an answer, then a new
                        // connection, as a browser or wrk does; no error.
                        break;
                    }
                }
                Err(_) => {
                    if !shared.stop.load(Relaxed) {
                        c.errors.fetch_add(1, Relaxed);
                    }
                    break;
                }
            }
        }
        shared.connected.fetch_sub(1, Relaxed);
    }
}

/// One response read by [`read_response`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    /// Its body's length.
    pub body: u64,
    /// It said `Connection: close`: the server closes the connection after
    /// it.
    pub close: bool,
}

/// Reads one `200` response with a `Content-Length` body.
pub(crate) async fn read_response(
    s: &duality_rt::net::TcpStream,
    buf: &mut [u8],
) -> std::io::Result<Response> {
    use std::io::{Error, ErrorKind};
    let mut filled = 0;
    let head_end = loop {
        let n = s.read(&mut buf[filled..]).await?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        filled += n;
        if let Some(i) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if filled == buf.len() {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "response head too large",
            ));
        }
    };
    let head = &buf[..head_end];
    if !(head.starts_with(b"HTTP/1.1 200 ") || head.starts_with(b"HTTP/1.0 200 ")) {
        return Err(Error::new(ErrorKind::InvalidData, "status is not 200"));
    }
    let len = content_length(head)
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "no Content-Length"))?;
    let close = says_close(head);
    let mut have = (filled - head_end) as u64;
    while have < len {
        let n = s.read(buf).await?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        have += n as u64;
    }
    if have != len {
        return Err(Error::new(
            ErrorKind::InvalidData,
            "more bytes than the body",
        ));
    }
    Ok(Response { body: len, close })
}

/// The value of the header `name` in a response head (the first one).
fn header<'h>(head: &'h [u8], name: &[u8]) -> Option<&'h [u8]> {
    head.split(|&b| b == b'\n').find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (n, value) = line.split_at(colon);
        n.eq_ignore_ascii_case(name).then_some(&value[1..])
    })
}

/// The `Content-Length` of a response head.
pub fn content_length(head: &[u8]) -> Option<u64> {
    std::str::from_utf8(header(head, b"content-length")?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether a response head's `Connection` lists `close`.
fn says_close(head: &[u8]) -> bool {
    header(head, b"connection").is_some_and(|v| {
        v.split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

/// Raises this process's soft descriptor limit to its hard limit; returns
/// the soft limit now in force. Children (servers, load processes) inherit
/// it.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a live local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim = want;
            }
        }
    }
    lim.rlim_cur
}

/// The experiment's parameters.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// The `duality` binary (runs `duality http` and the load children).
    pub exe: PathBuf,
    /// Client counts, ascending.
    pub clients: Vec<usize>,
    /// Seconds measured per point.
    pub seconds: f64,
    /// Seconds of warm-up per point, after the connections are open.
    pub warmup: f64,
    /// Load-generator loop threads per process.
    pub client_threads: usize,
    /// Most clients one load process holds; above it, child processes.
    pub per_process: usize,
    /// Measurements per point (the median is kept).
    pub repeat: usize,
    /// Servers, in order.
    pub servers: Vec<ServerKind>,
    /// Workloads, in order.
    pub workloads: Vec<Workload>,
    /// nginx executable, if found.
    pub nginx: Option<PathBuf>,
}

/// Finds nginx on `PATH` or in the usual system places.
pub fn find_nginx() -> Option<PathBuf> {
    crate::servers::find_executable(
        "nginx",
        &["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"],
    )
}

/// Runs `nginx FLAG` (`-v`, `-V`: nginx answers on stderr) for at most
/// [`NGINX_PROBE_TIMEOUT`]; what it wrote, or why nginx is unusable, in
/// words that name it: one that hangs (a wrapper waiting on something)
/// is killed rather than waited for forever.
pub fn nginx_probe(nginx: &Path, flag: &str) -> anyhow::Result<String> {
    let out = Command::new(nginx)
        .arg(flag)
        .output_within(NGINX_PROBE_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("`{} {flag}`: {e}", nginx.display()))?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "`{} {flag}` failed ({}): {}",
        nginx.display(),
        out.status,
        text.trim()
    );
    Ok(text)
}

/// The version of an nginx binary (`nginx/1.22.1`), or why it cannot be
/// used: it cannot be run, did not answer `nginx -v` within
/// [`NGINX_PROBE_TIMEOUT`], or is not nginx.
pub fn nginx_version(nginx: &Path) -> anyhow::Result<String> {
    let text = nginx_probe(nginx, "-v")?;
    text.split_whitespace()
        .find(|w| w.starts_with("nginx/"))
        .map(str::to_owned)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "`{} -v` named no nginx version: {:?}",
                nginx.display(),
                text.trim().chars().take(80).collect::<String>()
            )
        })
}

/// A temporary directory, removed on drop or when the run is interrupted.
pub struct TempDir(pub PathBuf, pub crate::interrupt::TempPath);

impl TempDir {
    /// `<tmp>/duality-bench-http-<pid>-<n>-<tag>`, created empty (the
    /// error names it); `n` counts this process's, so that two made at once
    /// (two nginx of two tests of one binary) are two. Directories of runs
    /// that can no longer remove their own (killed with SIGKILL: their
    /// process is gone) are removed first, so that runs killed that way do
    /// not fill the temporary directory.
    pub fn new(tag: &str) -> std::io::Result<TempDir> {
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        sweep_dead(&std::env::temp_dir());
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("{TEMP_PREFIX}{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        let guard = crate::interrupt::TempPath::new(&p);
        std::fs::create_dir_all(&p).map_err(|e| naming(&p, e))?;
        Ok(TempDir(p, guard))
    }
}

/// The start of every [`TempDir`]'s name; the process id follows.
const TEMP_PREFIX: &str = "duality-bench-http-";

/// Removes the [`TempDir`]s in `tmp` whose process has ended. One whose id
/// a live process has taken since stays (it goes once that one ends too);
/// one of another user cannot be removed and is left as it is.
fn sweep_dead(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `e`, kind kept, its text naming `path` (`No space left on device`
/// alone did not say where).
fn naming(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Writes the workload files into `dir`: HTML-like text of the exact sizes,
/// streamed (a file of any size costs 64 KiB of memory to make).
pub fn write_workload_files(dir: &Path, workloads: &[Workload]) -> std::io::Result<()> {
    // Whole fillers, and one more to start a write at any phase of one.
    let block = FILLER.repeat(64 * 1024 / FILLER.len() + 1);
    for w in workloads {
        let path = dir.join(&w.name);
        write_file(&path, w.size, &block).map_err(|e| naming(&path, e))?;
    }
    Ok(())
}

const HEAD: &[u8] = b"<!doctype html><title>duality</title><p>";
const FILLER: &[u8] = b"The quick brown fox jumps over the lazy dog. ";

/// One file of [`write_workload_files`]: `size` bytes of its text, from
/// `block` (whole fillers and one more).
fn write_file(path: &Path, size: usize, block: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    // Every byte but the last, which is a newline.
    let body = size.saturating_sub(1);
    let head = HEAD.len().min(body);
    f.write_all(&HEAD[..head])?;
    let mut done = head;
    while done < body {
        let phase = (done - HEAD.len()) % FILLER.len();
        let n = (block.len() - FILLER.len()).min(body - done);
        f.write_all(&block[phase..phase + n])?;
        done += n;
    }
    if size > 0 {
        f.write_all(b"\n")?;
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// A server process under test; stopped on drop.
pub struct RunningServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where it serves Prometheus metrics (`duality http --metrics-listen`,
    /// started by [`RunningServer::duality_with`]).
    pub metrics: Option<SocketAddr>,
    child: Child,
    /// nginx's process group (its master's and workers'), stopped whole.
    group: Option<crate::interrupt::ProcessGroup>,
    _prefix: Option<TempDir>,
}

/// Requests per connection for `duality http`: as `keepalive_requests` in
/// the nginx configuration beside it ([`nginx_config`]).
const KEEPALIVE_REQUESTS: [&str; 2] = ["--keepalive-requests", "100000"];

impl RunningServer {
    /// Starts `duality http` and waits for its `ready http://ADDR` line.
    pub fn duality(
        exe: &Path,
        root: &Path,
        model: &str,
        accept: &str,
        io: Option<&str>,
        max_conns: usize,
    ) -> anyhow::Result<RunningServer> {
        let (model, handoff) = split_handoff(model);
        let mut child = Command::new(exe)
            .arg("http")
            .args(io.map(|b| ["--io", b]).into_iter().flatten())
            .args(handoff.map(|h| ["--handoff", h]).into_iter().flatten())
            .args([
                "--listen",
                "127.0.0.1:0",
                "--model",
                model,
                "--accept",
                accept,
            ])
            .arg("--root")
            .arg(root)
            .args(["--max-conns", &max_conns.to_string()])
            .args(KEEPALIVE_REQUESTS)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_unless_interrupted()?;
        let out = child.stdout.take().expect("piped stdout");
        let stderr = crate::servers::StderrTail::capture(&mut child);
        let mut line = String::new();
        let read = BufReader::new(out).read_line(&mut line);
        let addr = line
            .trim()
            .strip_prefix("ready http://")
            .and_then(|a| a.parse().ok());
        match (read, addr) {
            (Ok(_), Some(addr)) => Ok(RunningServer {
                addr,
                metrics: None,
                child,
                group: None,
                _prefix: None,
            }),
            _ => {
                let e = crate::servers::start_error(
                    &format!("duality http --model {model}"),
                    &mut child,
                    stderr.as_ref(),
                    &line,
                );
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// Starts `duality http --listen 127.0.0.1:0 --root ROOT ARGS…` and
    /// waits for its `ready http://ADDR` line. With `--metrics-listen` among
    /// `args`, the metrics address is read from the server's
    /// `metrics http://ADDR/metrics` line on stderr (printed before
    /// `ready`). Its stderr is drained by a thread of this process, so that
    /// log lines (long-poll warnings) never block the server.
    pub fn duality_with(exe: &Path, root: &Path, args: &[&str]) -> anyhow::Result<RunningServer> {
        let mut child = Command::new(exe)
            .args(["http", "--listen", "127.0.0.1:0"])
            .arg("--root")
            .arg(root)
            .args(KEEPALIVE_REQUESTS)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_unless_interrupted()?;
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let mut line = String::new();
        let read = BufReader::new(out).read_line(&mut line);
        let addr = line
            .trim()
            .strip_prefix("ready http://")
            .and_then(|a| a.parse().ok());
        let Some(addr) = read.ok().and(addr) else {
            let _ = child.kill();
            let _ = child.wait();
            let mut log = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(err), &mut log);
            anyhow::bail!(
                "duality http {} did not start: {line:?} {log}",
                args.join(" ")
            )
        };
        let mut err = BufReader::new(err);
        let mut metrics = None;
        if args.contains(&"--metrics-listen") {
            let mut l = String::new();
            while metrics.is_none() && err.read_line(&mut l).unwrap_or(0) > 0 {
                metrics = l
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("http://")?.strip_suffix("/metrics"))
                    .and_then(|a| a.parse().ok());
                l.clear();
            }
        }
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let server = RunningServer {
            addr,
            metrics,
            child,
            group: None,
            _prefix: None,
        };
        anyhow::ensure!(
            server.metrics.is_some() || !args.contains(&"--metrics-listen"),
            "duality http printed no metrics address"
        );
        Ok(server)
    }

    /// Starts nginx with `workers` workers from a configuration written into
    /// a temporary prefix, serving `root` on a free loopback port.
    pub fn nginx(
        nginx: &Path,
        root: &Path,
        workers: usize,
        fd_limit: u64,
    ) -> anyhow::Result<RunningServer> {
        RunningServer::nginx_with(nginx, root, workers, fd_limit, "")
    }

    /// [`RunningServer::nginx`] with `extra` directives added to the `http`
    /// block (e.g. `gzip on;`).
    pub fn nginx_with(
        nginx: &Path,
        root: &Path,
        workers: usize,
        fd_limit: u64,
        extra: &str,
    ) -> anyhow::Result<RunningServer> {
        RunningServer::nginx_start(nginx, root, workers, fd_limit, [extra, ""])
    }

    /// [`RunningServer::nginx`] with `directives` in its `server` block
    /// (those nginx takes only there, e.g. `try_files`).
    pub fn nginx_in_server(
        nginx: &Path,
        root: &Path,
        directives: &str,
    ) -> anyhow::Result<RunningServer> {
        RunningServer::nginx_start(nginx, root, 1, 1024, ["", directives])
    }

    /// [`RunningServer::nginx`] with directives in its `http` block and
    /// its `server` block (a `log_format` and the `access_log` using it).
    pub fn nginx_in_blocks(
        nginx: &Path,
        root: &Path,
        http: &str,
        server: &str,
    ) -> anyhow::Result<RunningServer> {
        RunningServer::nginx_start(nginx, root, 1, 1024, [http, server])
    }

    /// `extra`: directives for the `http` block and for the `server` block.
    fn nginx_start(
        nginx: &Path,
        root: &Path,
        workers: usize,
        fd_limit: u64,
        extra: [&str; 2],
    ) -> anyhow::Result<RunningServer> {
        // A free port: bind, read it, close (nginx binds it right after).
        // Another process may take it meanwhile: then another port.
        let mut tries = 0;
        loop {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            match RunningServer::nginx_on(nginx, root, workers, fd_limit, extra, addr) {
                Err(e) if tries < 2 && e.to_string().contains("Address already in use") => {
                    tries += 1
                }
                got => return got,
            }
        }
    }

    fn nginx_on(
        nginx: &Path,
        root: &Path,
        workers: usize,
        fd_limit: u64,
        [extra, in_server]: [&str; 2],
        addr: SocketAddr,
    ) -> anyhow::Result<RunningServer> {
        let prefix = TempDir::new(&format!("nginx-{workers}w"))?;
        let modules = nginx_probe(nginx, "-V")?;
        let mut conf = nginx_config(&prefix.0, root, addr, workers, fd_limit, &modules);
        if !in_server.is_empty() {
            let root_line = conf.find("        root ").expect("a root line");
            let at = root_line + conf[root_line..].find('\n').expect("a line") + 1;
            conf.insert_str(at, in_server);
        }
        if !extra.is_empty() {
            let at = conf.find("    server {").expect("a server block");
            conf.insert_str(at, extra);
        }
        let conf_path = prefix.0.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        // nginx runs its workers as `nobody` when started as root: they must
        // be able to enter the prefix.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prefix.0, std::fs::Permissions::from_mode(0o755))?;
        let pid_file = prefix.0.join("nginx.pid");
        // A group of its own: its workers are stopped with it, also after
        // the master itself was killed (they would serve on, orphaned).
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(nginx)
            .arg("-p")
            .arg(&prefix.0)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(prefix.0.join("error.log"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_unless_interrupted()
            .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", nginx.display()))?;
        let group = crate::interrupt::ProcessGroup::new(child.id());
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                let log = std::fs::read_to_string(prefix.0.join("error.log")).unwrap_or_default();
                anyhow::bail!("nginx exited at start ({status}): {err}{log}");
            }
            if pid_file.exists() && std::net::TcpStream::connect(addr).is_ok() {
                break;
            }
            if Instant::now() > until {
                group.signal(libc::SIGKILL);
                let _ = child.wait();
                anyhow::bail!("nginx did not start listening on {addr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(RunningServer {
            addr,
            metrics: None,
            child,
            group: Some(group),
            _prefix: Some(prefix),
        })
    }

    /// The server's (master's) process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the server (nginx: its master) ended, if it has: `killed by
    /// signal 9 (SIGKILL)`.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        Some(crate::servers::describe_exit(status))
    }

    /// Sends `sig` to the server: nginx's whole group, else the process.
    fn signal(&self, sig: i32) {
        match &self.group {
            Some(g) => g.signal(sig),
            // SAFETY: kill(2) on our own child's pid, which we have not
            // reaped (Drop reaps it after signalling).
            None => unsafe {
                libc::kill(self.child.id() as i32, sig);
            },
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        // nginx: the whole group (master and workers; workers whose master
        // died are stopped only so). A stopped server (SIGSTOP) acts on
        // SIGTERM only once continued.
        self.signal(libc::SIGTERM);
        self.signal(libc::SIGCONT);
        let until = Instant::now() + Duration::from_secs(10);
        let mut exited = false;
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(g) = &self.group {
            // The master stops its workers before it exits; orphans got
            // SIGTERM from the group signal: a moment, then SIGKILL.
            let until = Instant::now() + Duration::from_secs(2);
            while g.alive() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            g.signal(libc::SIGKILL);
        }
    }
}

/// nginx's configuration for the experiment. Every path lies in `prefix`;
/// temp-path directives are written only for modules this nginx has
/// (`modules` is its `nginx -V` output).
pub fn nginx_config(
    prefix: &Path,
    root: &Path,
    addr: SocketAddr,
    workers: usize,
    fd_limit: u64,
    modules: &str,
) -> String {
    let p = prefix.display();
    let connections = fd_limit.saturating_sub(64).max(512);
    let mut temp = format!("    client_body_temp_path {p}/client_body;\n");
    for m in ["proxy", "fastcgi", "uwsgi", "scgi"] {
        if !modules.contains(&format!("--without-http_{m}_module")) {
            temp.push_str(&format!("    {m}_temp_path {p}/{m};\n"));
        }
    }
    format!(
        "# Written by `duality bench http`.
daemon off;
worker_processes {workers};
worker_rlimit_nofile {fd_limit};
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{
    worker_connections {connections};
}}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 75s;
    keepalive_requests 100000;
    open_file_cache max=1024 inactive=60s;
    open_file_cache_valid 1s;
    default_type text/html;
{temp}    server {{
        listen {addr} backlog=4096;
        root {root};
    }}
}}
",
        root = root.display()
    )
}

/// Measures one point: in this process when the clients fit under
/// `per_process`, else split over child processes
/// (`exe bench http --child …`) started together. `server_pids`: the
/// server's processes, whose CPU time is measured over the window.
pub fn measure_point(
    x: &Experiment,
    addr: SocketAddr,
    path: &str,
    clients: usize,
    server_pids: &[u32],
) -> anyhow::Result<LoadResult> {
    let spec = LoadSpec {
        addr,
        path: path.to_owned(),
        clients,
        threads: x.client_threads,
        warmup: Duration::from_secs_f64(x.warmup),
        measure: Duration::from_secs_f64(x.seconds),
        server_pids: server_pids.to_vec(),
    };
    if clients <= x.per_process {
        return load(&spec);
    }
    let procs = clients.div_ceil(x.per_process);
    let mut children = Vec::new();
    for i in 0..procs {
        let n = clients / procs + usize::from(i < clients % procs);
        let child = Command::new(&x.exe)
            .args([
                "bench",
                "http",
                "--child",
                "--addr",
                &addr.to_string(),
                "--path",
                path,
            ])
            .args(["--clients", &n.to_string()])
            .args(["--seconds", &x.seconds.to_string()])
            .args(["--warmup", &x.warmup.to_string()])
            .args(["--client-threads", &x.client_threads.to_string()])
            .args(pids_arg(server_pids))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn_unless_interrupted()?;
        children.push(ChildGuard(Some(child)));
    }
    let mut total = LoadResult::default();
    for mut c in children {
        let child = c.0.take().expect("child present");
        let out = child.wait_with_output()?;
        anyhow::ensure!(out.status.success(), "load process failed ({})", out.status);
        let r: LoadResult = serde_json::from_slice(&out.stdout)?;
        total.merge(&r);
    }
    // Every child watched the same server over (nearly) the same window.
    total.server_cpu_seconds /= procs as f64;
    Ok(total)
}

/// `--server-pids P,Q` for a load child (nothing when there are none).
fn pids_arg(pids: &[u32]) -> Vec<String> {
    if pids.is_empty() {
        return Vec::new();
    }
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    vec!["--server-pids".into(), list.join(",")]
}

/// Kills a load child that was not waited for (an earlier one failed).
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the experiment: every server × workload × client count.
///
/// Every server is started first, warmed up (half a second of 16 clients
/// per workload, not reported), and stays up; each point is then measured
/// on each server in turn (rotating who goes first), `x.repeat` times, and
/// the median by requests/s is kept. On a shared machine whose load drifts,
/// this puts the peers' numbers for one point close together in time.
/// After every point the server is checked: one that has exited is not
/// measured again, and its rows from that point on are failed
/// ([`HttpRow::failed`]), as is a point where a live server answered
/// nothing. `progress` sees each row as it is decided. Every server is
/// stopped at the end, also on error.
pub fn run(x: &Experiment, progress: &mut dyn FnMut(&HttpRow)) -> anyhow::Result<Vec<HttpRow>> {
    let fd_limit = raise_fd_limit();
    let files = TempDir::new("www")?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&files.0, std::fs::Permissions::from_mode(0o755))?;
    write_workload_files(&files.0, &x.workloads)?;
    let max_clients = x.clients.iter().copied().max().unwrap_or(1);
    let mut servers: Vec<(String, RunningServer, Vec<u32>)> = Vec::new();
    for kind in &x.servers {
        let server = match kind {
            ServerKind::Duality {
                model, accept, io, ..
            } => RunningServer::duality(
                &x.exe,
                &files.0,
                model,
                accept,
                io.as_deref(),
                max_clients + 64,
            )?,
            ServerKind::Nginx { workers } => {
                let Some(nginx) = &x.nginx else { continue };
                RunningServer::nginx(nginx, &files.0, *workers, fd_limit)?
            }
        };
        // nginx's workers are its master's children; they stay for the run.
        let pids = crate::proc::process_tree(server.pid());
        servers.push((kind.label(), server, pids));
    }
    // A throwaway round first, so that no server's first point pays for
    // cold caches (its page cache, the kernel's, the CPUs' clocks).
    let warm = Experiment {
        seconds: 0.5,
        warmup: 0.0,
        ..x.clone()
    };
    // How each server ended, once it has (checked after every point).
    let mut exited: Vec<Option<String>> = vec![None; servers.len()];
    for (i, (_, server, pids)) in servers.iter_mut().enumerate() {
        for w in &x.workloads {
            if exited[i].is_none() {
                measure_point(&warm, server.addr, &format!("/{}", w.name), 16, pids)?;
                exited[i] = server.exited();
            }
        }
    }
    let repeat = x.repeat.max(1);
    let mut rows = Vec::new();
    for w in &x.workloads {
        let path = format!("/{}", w.name);
        for &clients in &x.clients {
            let mut samples: Vec<Vec<LoadResult>> = vec![Vec::new(); servers.len()];
            // Died at this point: its samples here are cut short too.
            let mut died_here = vec![false; servers.len()];
            for rep in 0..repeat {
                for k in 0..servers.len() {
                    let i = (k + rep) % servers.len();
                    if exited[i].is_some() {
                        continue;
                    }
                    let (label, server, pids) = &mut servers[i];
                    let r = measure_point(x, server.addr, &path, clients, pids)?;
                    exited[i] = server.exited();
                    died_here[i] = exited[i].is_some();
                    if r.connected < clients && !died_here[i] {
                        duality_rt::say!(
                            "{label} {} x{clients}: only {} connections were open at the end of the window",
                            w.label, r.connected
                        );
                    }
                    samples[i].push(r);
                    // Let the server take down the connections just reset.
                    std::thread::sleep(Duration::from_millis(50 + clients as u64 / 64));
                }
            }
            for (i, (label, ..)) in servers.iter().enumerate() {
                let row = point_row(
                    label,
                    &w.label,
                    clients,
                    &samples[i],
                    exited[i]
                        .as_deref()
                        .filter(|_| died_here[i] || samples[i].is_empty()),
                );
                progress(&row);
                rows.push(row);
            }
        }
    }
    drop(servers);
    Ok(rows)
}

/// The row of one server at one point from its `samples` (the median by
/// requests/s), failed where the server had `exited` by then or answered
/// nothing in the window kept.
pub fn point_row(
    server: &str,
    file: &str,
    clients: usize,
    samples: &[LoadResult],
    exited: Option<&str>,
) -> HttpRow {
    let errors = samples.iter().map(|r| r.errors).sum();
    let mut s = samples.to_vec();
    s.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    let m = s.get(s.len() / 2).cloned().unwrap_or_default();
    let failed = match exited {
        Some(how) => Some(format!("exited: {how}")),
        None if m.requests == 0 => Some(format!(
            "no answer: 0 responses in {:.2} s, {errors} errors, {} of {clients} connections open",
            m.seconds, m.connected
        )),
        None => None,
    };
    let ok = failed.is_none();
    HttpRow {
        server: server.to_string(),
        file: file.to_string(),
        clients,
        requests_per_sec: Some(rate(&m)).filter(|_| ok),
        mbit_per_sec: Some(m.body_bytes as f64 * 8.0 / 1e6 / m.seconds.max(1e-9)).filter(|_| ok),
        // 0 ticks read over the window: under the clock's resolution.
        cpu_us_per_request: Some(m.server_cpu_seconds * 1e6 / m.requests.max(1) as f64)
            .filter(|_| ok && m.server_cpu_seconds > 0.0),
        errors,
        connected: m.connected,
        failed,
    }
}

fn rate(r: &LoadResult) -> f64 {
    if r.seconds > 0.0 {
        r.requests as f64 / r.seconds
    } else {
        0.0
    }
}

/// The Markdown report: per workload, a requests/s, a Mbit/s and a server
/// CPU per request table (rows: clients, columns: servers), each with the
/// ratio of the best duality configuration to the best nginx one (for CPU
/// the lowest to the lowest). A failed point is `- (exited)` or `- (no
/// answer)` and takes no part in the ratio.
pub fn table(rows: &[HttpRow]) -> String {
    let mut servers: Vec<&str> = Vec::new();
    let mut files: Vec<&str> = Vec::new();
    let mut clients: Vec<usize> = Vec::new();
    for r in rows {
        if !servers.contains(&r.server.as_str()) {
            servers.push(&r.server);
        }
        if !files.contains(&r.file.as_str()) {
            files.push(&r.file);
        }
        if !clients.contains(&r.clients) {
            clients.push(r.clients);
        }
    }
    clients.sort_unstable();
    let has_nginx = servers.iter().any(|s| s.starts_with("nginx"));
    let has_duality = servers.iter().any(|s| s.starts_with("duality"));
    let mut out = String::new();
    for file in &files {
        for (what, get, fmt, lower_is_better) in [
            (
                "requests/s",
                (|r: &HttpRow| r.requests_per_sec) as fn(&HttpRow) -> Option<f64>,
                (|v: f64| crate::report::thousands(v)) as fn(f64) -> String,
                false,
            ),
            (
                "Mbit/s",
                |r: &HttpRow| r.mbit_per_sec,
                |v: f64| format!("{v:.1}"),
                false,
            ),
            (
                "server CPU µs per request",
                |r: &HttpRow| r.cpu_us_per_request,
                |v: f64| format!("{v:.2}"),
                true,
            ),
        ] {
            out.push_str(&format!("\n**{file} file, {what}**\n\n"));
            let mut header = vec!["clients"];
            header.extend(servers.iter().copied());
            if has_nginx && has_duality {
                header.push(if lower_is_better {
                    "lowest duality / lowest nginx"
                } else {
                    "best duality / best nginx"
                });
            }
            let cells: Vec<Vec<String>> = clients
                .iter()
                .map(|&c| {
                    let at = |s: &str| {
                        rows.iter()
                            .find(|r| r.server == s && r.file == *file && r.clients == c)
                    };
                    let mut line = vec![crate::report::thousands(c as f64)];
                    for s in &servers {
                        line.push(at(s).map_or_else(
                            || "-".into(),
                            |r| {
                                let mut cell = get(r).map_or_else(|| "-".into(), fmt);
                                if let Some(tag) = r.failed_tag() {
                                    cell.push_str(&format!(" ({tag})"));
                                }
                                if r.errors > 0 {
                                    cell.push_str(&format!(" ({} err)", r.errors));
                                }
                                if r.connected < r.clients {
                                    cell.push_str(&format!(
                                        " ({} open)",
                                        crate::report::thousands(r.connected as f64)
                                    ));
                                }
                                cell
                            },
                        ));
                    }
                    if has_nginx && has_duality {
                        let best = |prefix: &str| {
                            servers
                                .iter()
                                .filter(|s| s.starts_with(prefix))
                                .filter_map(|s| at(s).and_then(get))
                                .fold(None, |m: Option<f64>, v| {
                                    Some(m.map_or(v, |m| {
                                        if lower_is_better {
                                            m.min(v)
                                        } else {
                                            m.max(v)
                                        }
                                    }))
                                })
                        };
                        line.push(match (best("duality"), best("nginx")) {
                            (Some(d), Some(n)) if n > 0.0 => format!("{:.2}", d / n),
                            _ => "-".into(),
                        });
                    }
                    line
                })
                .collect();
            out.push_str(&crate::report::markdown_table(&header, &cells));
        }
    }
    out
}

/// CSV: one line per row, with the error count, the connections open and
/// why a failed point failed (its figures empty).
pub fn csv(rows: &[HttpRow]) -> String {
    let mut out = String::from(
        "server,file,clients,requests_per_sec,mbit_per_sec,cpu_us_per_request,errors,connected,failed\n",
    );
    let f = |v: Option<f64>, digits: usize| v.map_or_else(String::new, |v| format!("{v:.digits$}"));
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}\n",
            crate::report::csv_field(&r.server),
            crate::report::csv_field(&r.file),
            r.clients,
            f(r.requests_per_sec, 1),
            f(r.mbit_per_sec, 3),
            f(r.cpu_us_per_request, 3),
            r.errors,
            r.connected,
            crate::report::csv_field(r.failed.as_deref().unwrap_or(""))
        ));
    }
    out
}

/// Draws, per workload, bandwidth vs clients (the seed's Figure 3) and
/// requests/s vs clients, one line per server, into `dir`
/// (`http-<file>-mbit.{png,svg}`, `http-<file>-rps.{png,svg}`). Returns the
/// files written.
pub fn plots(rows: &[HttpRow], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<&str> = Vec::new();
    for r in rows {
        if !files.contains(&r.file.as_str()) {
            files.push(&r.file);
        }
    }
    let mut written = Vec::new();
    for file in files {
        for (tag, what, get) in [
            (
                "mbit",
                "Mbit/s",
                (|r: &HttpRow| r.mbit_per_sec) as fn(&HttpRow) -> Option<f64>,
            ),
            ("rps", "requests/s", |r: &HttpRow| r.requests_per_sec),
        ] {
            let mut series: Vec<crate::plot::Series> = Vec::new();
            // A failed point is left out of its line.
            for r in rows.iter().filter(|r| r.file == file) {
                let Some(y) = get(r) else { continue };
                let point = (r.clients as f64, y);
                match series.iter_mut().find(|(s, _)| *s == r.server) {
                    Some((_, pts)) => pts.push(point),
                    None => series.push((r.server.clone(), vec![point])),
                }
            }
            let stem = dir.join(format!("http-{}-{tag}", file.to_ascii_lowercase()));
            let (png, svg) = crate::plot::line_chart(
                &stem,
                &format!("Web server {what} vs concurrent clients ({file} file, keep-alive)"),
                "concurrent clients (log scale)",
                what,
                &series,
                true,
            )?;
            written.push(png);
            written.push(svg);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod workload_tests {
    use super::*;

    #[test]
    fn sizes_name_their_files() {
        assert_eq!(workload_of_size(100), default_workloads()[0]);
        assert_eq!(workload_of_size(16384), default_workloads()[1]);
        let w = workload_of_size(1024);
        assert_eq!((w.label.as_str(), w.name.as_str()), ("1KiB", "1k.html"));
        assert_eq!(workload_of_size(300).name, "300b.html");
    }
}

#[cfg(test)]
mod tests {
    /// A run killed with SIGKILL leaves its directories; the next run's
    /// `TempDir` removes those of ended processes and nothing else.
    #[test]
    fn directories_of_ended_runs_are_swept() {
        let tmp = std::env::temp_dir().join(format!("duality-sweep-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        // No process has an id above pid_max.
        let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let dead = tmp.join(format!("{}{}-www", super::TEMP_PREFIX, max + 1));
        let live = tmp.join(format!("{}{}-www", super::TEMP_PREFIX, std::process::id()));
        let odd = tmp.join(format!("{}nginx-1w", super::TEMP_PREFIX));
        let other = tmp.join(format!("duality-other-{}", max + 1));
        for d in [&dead, &live, &odd, &other] {
            std::fs::create_dir_all(d.join("sub")).unwrap();
            std::fs::write(d.join("sub/f"), b"x").unwrap();
        }
        super::sweep_dead(&tmp);
        assert!(!dead.exists(), "an ended run's directory goes");
        assert!(live.exists() && odd.exists() && other.exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn workload_files_are_the_text_they_were() {
        // As the files were made before they were streamed: the head, then
        // fillers, cut to the size, the last byte a newline.
        let old = |size: usize| {
            let mut body = b"<!doctype html><title>duality</title><p>".to_vec();
            while body.len() < size {
                body.extend_from_slice(b"The quick brown fox jumps over the lazy dog. ");
            }
            body.truncate(size);
            if size > 0 {
                body[size - 1] = b'\n';
            }
            body
        };
        let dir = super::TempDir::new("workload-files-test").unwrap();
        let sizes = [0, 1, 30, 41, 100, 16_384, 65_536, 65_579, 200_001];
        let w: Vec<_> = sizes.iter().map(|&n| super::workload_of_size(n)).collect();
        super::write_workload_files(&dir.0, &w).unwrap();
        for w in &w {
            let got = std::fs::read(dir.0.join(&w.name)).unwrap();
            assert!(got == old(w.size), "{} bytes differ", w.size);
        }
    }

    use super::*;

    #[test]
    fn servers_parse_with_sizes() {
        let parse = |name: &str| parse_server(name).ok();
        assert_eq!(parse("nginx-2w"), Some(ServerKind::Nginx { workers: 2 }));
        assert_eq!(parse("nginx-8w"), Some(ServerKind::Nginx { workers: 8 }));
        assert_eq!(parse("nginx-0w"), None);
        assert_eq!(parse("nginx-w"), None);
        match parse("duality-knot-a:8") {
            Some(ServerKind::Duality {
                label,
                model,
                accept,
                io: None,
            }) => {
                assert_eq!(label, "duality-knot-a:8");
                assert_eq!(model, "symped:8");
                assert_eq!(accept, "favor-accept");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse("duality-knot-c").map(|k| k.label()),
            Some("duality-knot-c".to_string())
        );
        // sped has one loop by definition; unknown names and zero loops fail.
        assert_eq!(parse("duality-sped:4"), None);
        assert_eq!(parse("duality-knot-c:0"), None);
        assert_eq!(parse("apache"), None);
        // Hand-off models, with or without a policy; not the inline ones.
        for name in [
            "duality-amped:1",
            "duality-seda:1:2/adaptive",
            "duality-seda-s:2/always",
        ] {
            match parse(name) {
                Some(ServerKind::Duality { label, model, .. }) => {
                    assert_eq!(label, name);
                    assert_eq!(model, name.strip_prefix("duality-").unwrap());
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert_eq!(
            split_handoff("amped:1/adaptive"),
            ("amped:1", Some("adaptive"))
        );
        assert_eq!(split_handoff("amped:1"), ("amped:1", None));
        for bad in [
            "duality-symped:2",
            "duality-amped:1/sometimes",
            "duality-amped:x",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    /// `nginx-99999w` forked workers until nginx failed and left 754
    /// behind; counts past what nginx (or the server) runs are refused by
    /// name, before anything starts.
    #[test]
    fn worker_and_loop_counts_past_the_cap_are_refused() {
        assert_eq!(
            parse_server("nginx-1024w").unwrap(),
            ServerKind::Nginx { workers: 1024 }
        );
        let e = parse_server("nginx-99999w").unwrap_err().to_string();
        assert_eq!(
            e,
            "server \"nginx-99999w\": 99999 nginx workers is more than nginx runs (at most 1024)"
        );
        let e = parse_server("duality-knot-c:5000").unwrap_err().to_string();
        assert!(
            e.contains("5000 loops is more threads than the server supports (at most 1024)"),
            "{e}"
        );
        let e = parse_server("duality-amped:2000").unwrap_err().to_string();
        assert!(
            e.contains("more threads than this server supports (1024)"),
            "{e}"
        );
        let e = parse_server("apache").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown server \"apache\"; choose from duality-knot-c, "),
            "{e}"
        );
    }

    #[test]
    fn content_length_is_found_in_any_case() {
        let h = b"HTTP/1.1 200 OK\r\nServer: x\r\ncontent-LENGTH:  42 \r\n\r\n";
        assert_eq!(content_length(h), Some(42));
        assert_eq!(content_length(b"HTTP/1.1 200 OK\r\n\r\n"), None);
    }

    #[test]
    fn connection_close_is_found_among_tokens() {
        let head = |c: &str| format!("HTTP/1.1 200 OK\r\nConnection: {c}\r\n\r\n");
        assert!(says_close(head("close").as_bytes()));
        assert!(says_close(head("Keep-Alive, CLOSE").as_bytes()));
        assert!(!says_close(head("keep-alive").as_bytes()));
        assert!(!says_close(head("closed").as_bytes()));
        assert!(!says_close(b"HTTP/1.1 200 OK\r\nX-Close: close\r\n\r\n"));
    }

    /// A server that closes each connection after its third answer (nginx's
    /// keepalive_requests 3) costs the load no error: it counts the answers
    /// and opens a new connection.
    #[test]
    fn a_keepalive_limit_close_is_no_error() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let server = std::thread::spawn(move || {
            l.set_nonblocking(true).unwrap();
            let mut conns = 0;
            while !stop2.load(Relaxed) {
                let Ok((mut s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                };
                conns += 1;
                s.set_nonblocking(false).unwrap();
                let mut buf = [0u8; 1024];
                'conn: for i in 0..3 {
                    let mut have = Vec::new();
                    while !have.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break 'conn,
                            Ok(n) => have.extend_from_slice(&buf[..n]),
                        }
                    }
                    let close = if i == 2 { "Connection: close\r\n" } else { "" };
                    let answer =
                        format!("HTTP/1.1 200 OK\r\n{close}Content-Length: 5\r\n\r\nhello");
                    if s.write_all(answer.as_bytes()).is_err() {
                        break;
                    }
                }
            }
            conns
        });
        let r = load(&LoadSpec {
            addr,
            path: "/".into(),
            clients: 1,
            threads: 1,
            warmup: Duration::from_millis(50),
            measure: Duration::from_millis(300),
            server_pids: Vec::new(),
        })
        .unwrap();
        stop.store(true, Relaxed);
        let conns = server.join().unwrap();
        assert!(r.requests > 3, "{r:?}");
        assert_eq!(r.errors, 0, "{r:?}");
        assert_eq!(r.body_bytes, 5 * r.requests, "{r:?}");
        assert!(conns > 1, "{conns} connections");
    }

    #[test]
    fn nginx_config_has_the_essentials() {
        let c = nginx_config(
            Path::new("/p"),
            Path::new("/www"),
            "127.0.0.1:8081".parse().unwrap(),
            2,
            20000,
            "--without-http_uwsgi_module",
        );
        for want in [
            "worker_processes 2;",
            "access_log off;",
            "keepalive_requests 100000;",
            "listen 127.0.0.1:8081 backlog=4096;",
            "root /www;",
            "pid /p/nginx.pid;",
            "error_log /p/error.log warn;",
            "worker_connections 19936;",
            "proxy_temp_path /p/proxy;",
        ] {
            assert!(c.contains(want), "{want} missing from\n{c}");
        }
        assert!(!c.contains("uwsgi_temp_path"));
    }

    fn row(server: &str, clients: usize, rps: f64) -> HttpRow {
        HttpRow {
            server: server.into(),
            file: "100B".into(),
            clients,
            requests_per_sec: Some(rps),
            mbit_per_sec: Some(rps * 800.0 / 1e6),
            cpu_us_per_request: Some(1e6 / rps),
            errors: 0,
            connected: clients,
            failed: None,
        }
    }

    #[test]
    fn table_and_csv_shapes() {
        let rows = vec![
            row("duality-knot-c", 1, 1000.0),
            row("nginx-1w", 1, 500.0),
            row("duality-knot-c", 4, 3000.0),
            row("nginx-1w", 4, 3000.0),
        ];
        let t = table(&rows);
        assert!(t.contains("| clients | duality-knot-c | nginx-1w | best duality / best nginx |"));
        assert!(t.contains("| 1 | 1,000 | 500 | 2.00 |"), "{t}");
        assert!(t.contains("| 4 | 3,000 | 3,000 | 1.00 |"), "{t}");
        // CPU: lower is better, so the ratio compares the lowest.
        assert!(
            t.contains("| clients | duality-knot-c | nginx-1w | lowest duality / lowest nginx |")
        );
        assert!(t.contains("| 1 | 1000.00 | 2000.00 | 0.50 |"), "{t}");
        let c = csv(&rows);
        assert_eq!(c.lines().count(), 5);
        assert!(c.contains("duality-knot-c,100B,1,1000.0,0.800,1000.000,0,1,\n"));
        let json = crate::report::json(&rows);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut keys: Vec<&String> = v[0].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "clients",
                "cpu_us_per_request",
                "file",
                "mbit_per_sec",
                "requests_per_sec",
                "server"
            ]
        );
    }

    /// A duality server killed mid-run gave `0 (761 err)` rows, a ratio of
    /// 0.00 to nginx, 0.00 µs of CPU per request, and JSON zeros without
    /// its errors; a stopped nginx 0 req/s with no error at all. Now both
    /// are failed points: `-`, JSON null, the reason, no ratio.
    #[test]
    fn a_dead_or_silent_server_is_no_zero() {
        let dead = LoadResult {
            errors: 761,
            seconds: 1.0,
            ..LoadResult::default()
        };
        let killed = point_row(
            "duality-sped",
            "100B",
            1,
            &[dead],
            Some("killed by signal 9 (SIGKILL)"),
        );
        assert_eq!(
            killed.failed.as_deref(),
            Some("exited: killed by signal 9 (SIGKILL)")
        );
        assert_eq!(
            (
                killed.requests_per_sec,
                killed.mbit_per_sec,
                killed.cpu_us_per_request
            ),
            (None, None, None)
        );
        // Later points: not measured at all.
        let later = point_row(
            "duality-sped",
            "100B",
            16,
            &[],
            Some("killed by signal 9 (SIGKILL)"),
        );
        assert_eq!(later.failed_tag(), Some("exited"));
        let stalled = LoadResult {
            seconds: 1.0,
            connected: 1,
            server_cpu_seconds: 0.0,
            ..LoadResult::default()
        };
        let silent = point_row("nginx-1w", "100B", 1, &[stalled], None);
        assert_eq!(
            silent.failed.as_deref(),
            Some("no answer: 0 responses in 1.00 s, 0 errors, 1 of 1 connections open")
        );
        assert_eq!(silent.requests_per_sec, None);
        let t = table(&[killed.clone(), row("nginx-1w", 1, 500.0)]);
        assert!(
            t.contains("| 1 | - (exited) (761 err) (0 open) | 500 | - |"),
            "{t}"
        );
        let t = table(&[row("duality-sped", 1, 500.0), silent.clone()]);
        assert!(t.contains("| 1 | 500 | - (no answer) | - |"), "{t}");
        let v: serde_json::Value = serde_json::from_str(&crate::report::json(&[killed])).unwrap();
        assert!(v[0]["requests_per_sec"].is_null(), "{v}");
        assert!(v[0]["cpu_us_per_request"].is_null(), "{v}");
        assert_eq!(v[0]["errors"], 761);
        assert_eq!(v[0]["failed"], "exited: killed by signal 9 (SIGKILL)");
        assert!(csv(&[silent]).lines().nth(1).unwrap().starts_with(
            "nginx-1w,100B,1,,,,0,1,\"no answer: 0 responses in 1.00 s, 0 errors, 1 of 1"
        ));
    }

    /// A window too short for the clock read the server's CPU as 0 ticks:
    /// no CPU figure rather than 0.00 µs per request.
    #[test]
    fn a_cpu_reading_of_no_ticks_is_no_figure() {
        let r = LoadResult {
            requests: 100,
            body_bytes: 10_000,
            seconds: 0.01,
            connected: 1,
            ..LoadResult::default()
        };
        let row = point_row("duality-sped", "100B", 1, &[r], None);
        assert_eq!(row.failed, None);
        assert_eq!(row.requests_per_sec, Some(10_000.0));
        assert_eq!(row.cpu_us_per_request, None);
    }

    #[test]
    fn workload_files_have_exact_sizes() {
        let d = TempDir::new("files-test").unwrap();
        write_workload_files(&d.0, &default_workloads()).unwrap();
        assert_eq!(
            std::fs::metadata(d.0.join("index.html")).unwrap().len(),
            100
        );
        assert_eq!(
            std::fs::metadata(d.0.join("16k.html")).unwrap().len(),
            16384
        );
    }
}
