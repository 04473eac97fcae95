//! A memcached-protocol load generator on the duality runtime.
//!
//! - **Closed loop** (the paper's client): each connection has one request in
//!   flight and sends the next as soon as the answer arrives.
//! - **Open loop**: requests are due at a fixed rate; each latency counts from
//!   the time the request was *due*, so a stalling server cannot hide the
//!   queueing it caused (no coordinated omission). The runtime's timers tick
//!   in milliseconds, so a late send adds at most 1 ms — to the latency, never
//!   hidden from it.
//!
//! The client is one duality loop on one thread by default, or several
//! (`LoadConfig::threads`), each its own loop with an even share of the
//! connections, for a machine whose cores one client thread cannot keep
//! busy. It reports its own CPU use next to the numbers: a client using about
//! one full core per thread was the bottleneck, and the results say so.
//!
//! Every connect and every request waits at most
//! [`LoadConfig::reply_timeout`] for the server: one that stops answering
//! (stopped, wedged) ends the run with an error that says so, where the
//! client used to wait on it forever.

use crate::summary::{corrected_latency, latency_histogram, record, Percentiles};
use crate::workload::Workload;
use duality_rt::net::{TcpStream, UnixStream};
use hdrhistogram::Histogram;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the server listens.
#[derive(Clone, Debug)]
pub enum Target {
    /// A Unix socket (the paper's choice).
    Unix(PathBuf),
    /// TCP on loopback.
    Tcp(SocketAddr),
}

/// How requests are issued.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// One request in flight per connection.
    Closed,
    /// This many requests per second in total, spread over the connections.
    Open {
        /// Requests per second.
        rate: f64,
    },
}

/// One load run: warm up, then `windows` measurement windows back to back.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The server.
    pub target: Target,
    /// Concurrent connections.
    pub conns: usize,
    /// What to request.
    pub workload: Arc<Workload>,
    /// Warm-up before the first window.
    pub warmup: Duration,
    /// Length of each window.
    pub window: Duration,
    /// Number of windows (the paper's "5 runs").
    pub windows: usize,
    /// Closed or open loop.
    pub mode: Mode,
    /// Seed of the request mix.
    pub seed: u64,
    /// Closed loop: requests each connection writes at once (one write)
    /// before it reads their replies (memtier's `--pipeline`); 1 otherwise.
    pub pipeline: usize,
    /// The client loop's I/O backend (`None`: the process default).
    pub io: Option<duality_rt::IoBackend>,
    /// Client threads, each one duality loop with an even share of the
    /// connections (1: the paper's single client; more than `conns` is
    /// taken as `conns`).
    pub threads: usize,
    /// Longest wait for a connect or a request's answers (all of a
    /// pipelined batch); past it the connection gives up and the run
    /// fails: see [`reply_timeout`].
    pub reply_timeout: Duration,
}

/// The [`LoadConfig::reply_timeout`] for windows of `window`: 5 s, or four
/// windows where that is longer. A server on loopback answers in
/// microseconds to milliseconds; one that has answered nothing for seconds
/// (and for more than a window) has stopped.
pub fn reply_timeout(window: Duration) -> Duration {
    (window.saturating_mul(4)).max(Duration::from_secs(5))
}

/// What one window measured.
#[derive(Clone, Debug)]
pub struct WindowResult {
    /// Transactions completed in the window.
    pub txns: u64,
    /// Its real length.
    pub elapsed: Duration,
    /// Latency percentiles.
    pub latency: Percentiles,
    /// Cores the client used (CPU time / wall time), all its threads.
    pub client_cores: f64,
}

impl WindowResult {
    /// Transactions per second.
    pub fn tps(&self) -> f64 {
        self.txns as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    async fn connect(t: &Target) -> std::io::Result<Conn> {
        Ok(match t {
            Target::Unix(p) => Conn::Unix(UnixStream::connect(p).await?),
            Target::Tcp(a) => {
                let s = TcpStream::connect(*a).await?;
                s.set_nodelay(true)?;
                Conn::Tcp(s)
            }
        })
    }
    async fn write_all(&self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.write_all(b).await,
            Conn::Tcp(s) => s.write_all(b).await,
        }
    }
    async fn read(&self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(b).await,
            Conn::Tcp(s) => s.read(b).await,
        }
    }
    /// Reads until the buffer ends with `end` (or an error line arrives),
    /// through `chunk`.
    async fn read_reply(
        &self,
        buf: &mut Vec<u8>,
        chunk: &mut [u8],
        end: &[u8],
    ) -> std::io::Result<bool> {
        buf.clear();
        loop {
            let n = self.read(chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.ends_with(end) {
                return Ok(true);
            }
            if buf.ends_with(b"\r\n") && is_error_line(buf) {
                return Ok(false);
            }
        }
    }
}

impl Conn {
    /// Reads until `n` whole replies (`END` or `STORED` ends each) have
    /// arrived, through `chunk`; false if one was an error line.
    async fn read_replies(
        &self,
        buf: &mut Vec<u8>,
        chunk: &mut [u8],
        n: usize,
    ) -> std::io::Result<bool> {
        buf.clear();
        loop {
            let r = self.read(chunk).await?;
            if r == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..r]);
            let (done, errors) = count_replies(buf);
            if done >= n {
                return Ok(errors == 0);
            }
        }
    }
}

/// Whole replies in `buf` (each ends with `END` or `STORED`, or is an error
/// line), and how many of them were errors. `VALUE` lines are skipped with
/// their data, so a value holding `END` is never miscounted.
pub fn count_replies(buf: &[u8]) -> (usize, usize) {
    let (mut done, mut errors, mut at) = (0, 0, 0);
    while let Some(eol) = buf[at..].windows(2).position(|w| w == b"\r\n") {
        let line = &buf[at..at + eol];
        at += eol + 2;
        if let Some(rest) = line.strip_prefix(b"VALUE ") {
            let len = std::str::from_utf8(rest)
                .ok()
                .and_then(|r| r.split(' ').nth(2))
                .and_then(|l| l.parse::<usize>().ok());
            match len {
                Some(len) if buf.len() >= at + len + 2 => at += len + 2,
                _ => return (done, errors),
            }
        } else if line == b"END" || line == b"STORED" {
            done += 1;
        } else {
            done += 1;
            errors += 1;
        }
    }
    (done, errors)
}

fn is_error_line(buf: &[u8]) -> bool {
    buf.starts_with(b"ERROR")
        || buf.starts_with(b"CLIENT_ERROR")
        || buf.starts_with(b"SERVER_ERROR")
}

/// Appends a `set` of record `i` to `out`.
pub fn encode_set(out: &mut Vec<u8>, i: usize) {
    use std::io::Write;
    let n = Workload::value_size(i);
    // Formatted straight into `out` (writing to a Vec cannot fail): no
    // String per request on the client's hot path.
    let _ = write!(out, "set {} 0 0 {n}\r\n", Workload::key_display(i));
    out.resize(out.len() + n, b'v');
    out.extend_from_slice(b"\r\n");
}

/// Appends a `get` of record `i` to `out`.
pub fn encode_get(out: &mut Vec<u8>, i: usize) {
    use std::io::Write;
    let _ = write!(out, "get {}\r\n", Workload::key_display(i));
}

/// Longest wait for the server during [`preload`]: a connect, or the
/// answers to one batch of 100 sets.
pub const PRELOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Stores every record of the workload (pipelined, 100 at a time) so the
/// measurement starts from a full data set.
pub fn preload(target: &Target, workload: &Workload) -> anyhow::Result<()> {
    let mut lp = duality_rt::EventLoop::new(duality_rt::LoopConfig::default())?;
    let stalled = || {
        anyhow::anyhow!(
            "preload: no answer within {} s (the server stopped answering)",
            PRELOAD_TIMEOUT.as_secs()
        )
    };
    lp.block_on(async {
        let c = duality_rt::time::timeout(PRELOAD_TIMEOUT, Conn::connect(target))
            .await
            .map_err(|_| stalled())??;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        let mut i = 0;
        while i < workload.records {
            out.clear();
            let batch = (workload.records - i).min(100);
            for k in i..i + batch {
                encode_set(&mut out, k);
            }
            let exchange = async {
                c.write_all(&out).await?;
                let mut stored = 0;
                let mut chunk = [0u8; 4096];
                while stored < batch {
                    let n = c.read(&mut chunk).await?;
                    anyhow::ensure!(n > 0, "server closed the connection during preload");
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
                        let line: Vec<u8> = buf.drain(..p + 2).collect();
                        anyhow::ensure!(
                            line == b"STORED\r\n",
                            "preload: {}",
                            String::from_utf8_lossy(&line).trim_end()
                        );
                        stored += 1;
                    }
                }
                Ok(())
            };
            duality_rt::time::timeout(PRELOAD_TIMEOUT, exchange)
                .await
                .map_err(|_| stalled())??;
            i += batch;
        }
        Ok(())
    })
}

/// Bytes one read of a connection's answers takes at most.
const READ_CHUNK: usize = 16384;

const WARMUP: usize = usize::MAX;
const STOP: usize = usize::MAX - 1;

/// The connections client thread `t` of `threads` drives: an even share,
/// the first `conns % threads` threads one more.
pub fn share(conns: usize, threads: usize, t: usize) -> std::ops::Range<usize> {
    let threads = threads.max(1);
    let (base, extra) = (conns / threads, conns % threads);
    let lo = t * base + t.min(extra);
    lo..lo + base + usize::from(t < extra)
}

/// What the client threads share: the phase (warm-up, window i, stop),
/// per-window counts and the error count.
#[derive(Clone)]
struct Shared {
    phase: Arc<AtomicUsize>,
    counts: Arc<Vec<AtomicU64>>,
    errors: Arc<AtomicU64>,
    /// Connections that gave up waiting for the server.
    stalled: Arc<AtomicU64>,
    /// Connections open or given up: the warm-up starts once all are.
    settled: Arc<AtomicUsize>,
}

/// One connection's closed or open loop until the phase says stop; returns
/// its per-window latency histograms.
async fn drive(c: usize, cfg: LoadConfig, sh: Shared, start: Instant) -> Vec<Histogram<u64>> {
    let windows = cfg.windows;
    let mut hists: Vec<Histogram<u64>> = (0..windows).map(|_| latency_histogram()).collect();
    let mut rng = fastrand::Rng::with_seed(cfg.seed ^ (c as u64).wrapping_mul(0x9e37_79b9));
    let conn = duality_rt::time::timeout(cfg.reply_timeout, Conn::connect(&cfg.target)).await;
    sh.settled.fetch_add(1, Relaxed);
    let conn = match conn {
        Ok(Ok(conn)) => conn,
        Ok(Err(_)) => {
            sh.errors.fetch_add(1, Relaxed);
            return hists;
        }
        Err(_) => {
            sh.stalled.fetch_add(1, Relaxed);
            return hists;
        }
    };
    let interval = match cfg.mode {
        Mode::Open { rate } => Some(Duration::from_secs_f64(cfg.conns as f64 / rate.max(1e-3))),
        Mode::Closed => None,
    };
    let mut out = Vec::with_capacity(256);
    let mut buf = Vec::with_capacity(256);
    // The read buffer lives beside the connection, not in the request's
    // future: a 16 KiB array there made each request's future that large,
    // zeroed and moved (into the watchdog race) once per request, which cost
    // the client a sixth of its throughput.
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut k: u32 = 0;
    let mut watchdog = duality_rt::time::sleep(cfg.reply_timeout);
    loop {
        let p = sh.phase.load(Relaxed);
        if p == STOP {
            return hists;
        }
        let intended = match interval {
            Some(iv) => {
                let due = start + iv * k;
                k += 1;
                if due > Instant::now() {
                    duality_rt::time::sleep_until(due).await;
                }
                due
            }
            None => Instant::now(),
        };
        out.clear();
        let depth = if interval.is_some() {
            1
        } else {
            cfg.pipeline.max(1)
        };
        let mut end: &[u8] = b"";
        for _ in 0..depth {
            let rec = cfg.workload.pick(&mut rng);
            end = if cfg.workload.is_set(&mut rng) {
                encode_set(&mut out, rec);
                b"STORED\r\n"
            } else {
                encode_get(&mut out, rec);
                b"END\r\n"
            };
        }
        // One timer per connection, pushed back at every request (it
        // registers again only when it fires early): not a timer made and
        // cancelled per request on the client's hot path.
        watchdog.extend(duality_rt::time::loop_now() + cfg.reply_timeout);
        let exchange = async {
            conn.write_all(&out).await?;
            if depth == 1 {
                conn.read_reply(&mut buf, &mut chunk, end).await
            } else {
                conn.read_replies(&mut buf, &mut chunk, depth).await
            }
        };
        let answered = futures_lite::future::or(async { Some(exchange.await) }, async {
            (&mut watchdog).await;
            None
        });
        match answered.await {
            Some(Ok(true)) => {}
            Some(Ok(false)) => {
                sh.errors.fetch_add(1, Relaxed);
            }
            Some(Err(_)) => {
                sh.errors.fetch_add(1, Relaxed);
                return hists;
            }
            None => {
                sh.stalled.fetch_add(1, Relaxed);
                return hists;
            }
        }
        let p = sh.phase.load(Relaxed);
        if p < windows {
            sh.counts[p].fetch_add(depth as u64, Relaxed);
            let took = corrected_latency(intended, Instant::now());
            for _ in 0..depth {
                record(&mut hists[p], took);
            }
        }
    }
}

/// Starts thread `t`'s connections on the current loop and waits for them
/// all; their histograms merged per window.
async fn drive_share(
    cfg: &LoadConfig,
    threads: usize,
    t: usize,
    sh: &Shared,
    start: Instant,
) -> Vec<Histogram<u64>> {
    let tasks: Vec<_> = share(cfg.conns, threads, t)
        .map(|c| duality_rt::spawn(drive(c, cfg.clone(), sh.clone(), start)))
        .collect();
    let mut merged: Vec<Histogram<u64>> = (0..cfg.windows).map(|_| latency_histogram()).collect();
    for task in tasks {
        if let Ok(hs) = task.await {
            for (m, h) in merged.iter_mut().zip(hs) {
                let _ = m.add(&h);
            }
        }
    }
    merged
}

/// Client threads 1..n of a load generator, each running its share of the
/// connections on a duality loop of its own (share 0 is the caller's).
pub(crate) struct ClientThreads<T>(Vec<std::thread::JoinHandle<anyhow::Result<T>>>);

impl<T: Send + 'static> ClientThreads<T> {
    /// Starts `work(t)` for `t` in `1..threads`, on threads named
    /// `NAME-t`; if one cannot start, calls `stop`, waits for those
    /// started and fails.
    pub(crate) fn start<F>(
        threads: usize,
        name: &str,
        config: &duality_rt::LoopConfig,
        mut work: impl FnMut(usize) -> F,
        stop: impl FnOnce(),
    ) -> anyhow::Result<Self>
    where
        F: std::future::Future<Output = T> + Send + 'static,
    {
        let mut started = Vec::new();
        for t in 1..threads {
            let (work, config) = (work(t), config.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{t}"))
                .spawn(move || -> anyhow::Result<T> {
                    Ok(duality_rt::EventLoop::new(config)?.block_on(work))
                });
            match spawned {
                Ok(h) => started.push(h),
                Err(e) => {
                    stop();
                    for h in started {
                        let _ = h.join();
                    }
                    return Err(anyhow::anyhow!("starting client thread {t}: {e}"));
                }
            }
        }
        Ok(ClientThreads(started))
    }

    /// Waits for every thread: their results in order, or the first error.
    pub(crate) fn join(self) -> anyhow::Result<Vec<T>> {
        self.0
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a client thread panicked"))?
            })
            .collect()
    }
}

/// Runs the load and returns one result per window; `mark(i)` is called at
/// the start of window i and once more (with `windows`) after the last, so
/// the caller can read the server's counters at the same instants.
pub fn run(cfg: &LoadConfig, mark: &mut dyn FnMut(usize)) -> anyhow::Result<Vec<WindowResult>> {
    anyhow::ensure!(
        cfg.conns > 0 && cfg.windows > 0,
        "need at least one connection and one window"
    );
    let windows = cfg.windows;
    let threads = cfg.threads.clamp(1, cfg.conns);
    let sh = Shared {
        phase: Arc::new(AtomicUsize::new(WARMUP)),
        counts: Arc::new((0..windows).map(|_| AtomicU64::new(0)).collect()),
        errors: Arc::new(AtomicU64::new(0)),
        stalled: Arc::new(AtomicU64::new(0)),
        settled: Arc::new(AtomicUsize::new(0)),
    };
    // The client's own polls are not the subject: no long-poll warnings.
    let mut config = duality_rt::LoopConfig {
        long_poll_threshold: None,
        ..Default::default()
    };
    if let Some(io) = cfg.io {
        config.io = io;
    }
    let start = Instant::now() + Duration::from_millis(5);
    // Threads 1.. run their shares on loops of their own; this thread runs
    // share 0 and keeps the time.
    let helpers = ClientThreads::start(
        threads,
        "loadgen",
        &config,
        |t| {
            let (cfg, shared) = (cfg.clone(), sh.clone());
            async move { drive_share(&cfg, threads, t, &shared, start).await }
        },
        || sh.phase.store(STOP, Relaxed),
    )?;
    let mut lp = duality_rt::EventLoop::new(config)?;
    let (mut hists, per_window, cpu) = lp.block_on(async {
        let mine = duality_rt::spawn({
            let (cfg, sh) = (cfg.clone(), sh.clone());
            async move { drive_share(&cfg, threads, 0, &sh, start).await }
        });
        let mut per_window: Vec<Duration> = Vec::new();
        let mut cpu_use: Vec<f64> = Vec::new();
        // The warm-up and the windows start once every connection is open
        // (thousands take longer than a short warm-up: a window then
        // measured connects, not transactions). One that fails or stalls
        // counts as settled; the run then fails below.
        while sh.settled.load(Relaxed) < cfg.conns {
            duality_rt::time::sleep(Duration::from_millis(1)).await;
        }
        duality_rt::time::sleep(cfg.warmup).await;
        for w in 0..windows {
            mark(w);
            let t0 = Instant::now();
            let cpu0 = cpu_seconds();
            sh.phase.store(w, Relaxed);
            duality_rt::time::sleep(cfg.window).await;
            let took = t0.elapsed();
            let cpu = cpu_seconds() - cpu0;
            per_window.push(took);
            cpu_use.push(cpu / took.as_secs_f64().max(1e-9));
        }
        sh.phase.store(STOP, Relaxed);
        mark(windows);
        let merged = mine
            .await
            .unwrap_or_else(|_| (0..windows).map(|_| latency_histogram()).collect());
        (merged, per_window, cpu_use)
    });
    for hs in helpers.join()? {
        for (m, h) in hists.iter_mut().zip(hs) {
            let _ = m.add(&h);
        }
    }
    let stalled = sh.stalled.load(Relaxed);
    anyhow::ensure!(
        stalled == 0,
        "{stalled} of {} connections got no answer within {} s: the server stopped answering",
        cfg.conns,
        cfg.reply_timeout.as_secs_f64()
    );
    let e = sh.errors.load(Relaxed);
    anyhow::ensure!(
        e == 0,
        "{e} requests or connections failed (server errors, resets or refused connections)"
    );
    Ok((0..windows)
        .map(|w| WindowResult {
            txns: sh.counts[w].load(Relaxed),
            elapsed: per_window[w],
            latency: Percentiles::of(&hists[w]),
            client_cores: cpu[w],
        })
        .collect())
}

/// CPU seconds this process has used.
fn cpu_seconds() -> f64 {
    let (u, s) = duality_rt::stats::process_cpu_time();
    (u + s).as_secs_f64()
}

#[cfg(test)]
mod pipeline_tests {
    use super::count_replies;

    #[test]
    fn replies_are_counted_whole_and_values_skipped() {
        let b = b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\nSTORED\r\nVALUE x 0 3\r\nab";
        assert_eq!(count_replies(b), (2, 0));
        assert_eq!(
            count_replies(b"SERVER_ERROR out of memory\r\nEND\r\n"),
            (2, 1)
        );
        assert_eq!(count_replies(b"EN"), (0, 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_connection_once_and_differ_by_at_most_one() {
        for conns in 1..40 {
            for threads in 1..=conns {
                let shares: Vec<_> = (0..threads).map(|t| share(conns, threads, t)).collect();
                let mut next = 0;
                for r in &shares {
                    assert_eq!(r.start, next, "{conns} conns, {threads} threads");
                    assert!(!r.is_empty());
                    next = r.end;
                }
                assert_eq!(next, conns);
                let (lo, hi) = (
                    shares.iter().map(|r| r.len()).min().unwrap(),
                    shares.iter().map(|r| r.len()).max().unwrap(),
                );
                assert!(hi - lo <= 1);
            }
        }
    }

    #[test]
    fn encodes_requests_like_memcached_expects() {
        let mut out = Vec::new();
        encode_get(&mut out, 7);
        assert_eq!(out, b"get rec:000007\r\n");
        out.clear();
        encode_set(&mut out, 7);
        let n = Workload::value_size(7);
        let head = format!("set rec:000007 0 0 {n}\r\n");
        assert!(out.starts_with(head.as_bytes()));
        assert_eq!(out.len(), head.len() + n + 2);
        assert!(out.ends_with(b"\r\n"));
    }

    /// A server that accepts and then answers nothing (a stopped one: its
    /// socket still takes connections) ends the run with an error within
    /// the reply timeout; the client used to wait for it forever.
    #[test]
    fn a_server_that_stops_answering_fails_the_run() {
        let dir =
            std::env::temp_dir().join(format!("duality-loadgen-stall-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let listener = std::os::unix::net::UnixListener::bind(&dir).unwrap();
        // Held, never read: a connection to a stopped server.
        let held = std::thread::spawn(move || {
            let mut conns = Vec::new();
            listener.set_nonblocking(true).unwrap();
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                if let Ok((c, _)) = listener.accept() {
                    conns.push(c);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let cfg = LoadConfig {
            target: Target::Unix(dir.clone()),
            conns: 2,
            workload: Arc::new(Workload::new(10, 9, crate::workload::KeyChoice::Uniform)),
            warmup: Duration::ZERO,
            window: Duration::from_millis(50),
            windows: 1,
            mode: Mode::Closed,
            seed: 1,
            pipeline: 1,
            io: None,
            threads: 1,
            reply_timeout: Duration::from_millis(300),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(
                run(&cfg, &mut |_| {})
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            );
        });
        let got = rx
            .recv_timeout(Duration::from_secs(8))
            .expect("the load generator still waits for a server that stopped answering");
        assert_eq!(
            got,
            Err(
                "2 of 2 connections got no answer within 0.3 s: the server stopped answering"
                    .to_string()
            )
        );
        let _ = std::fs::remove_file(&dir);
        drop(held);
    }

    #[test]
    fn the_reply_timeout_is_well_above_a_window() {
        assert_eq!(
            reply_timeout(Duration::from_millis(150)),
            Duration::from_secs(5)
        );
        assert_eq!(
            reply_timeout(Duration::from_secs(10)),
            Duration::from_secs(40)
        );
    }

    #[test]
    fn error_lines_are_recognised() {
        assert!(is_error_line(b"SERVER_ERROR out of memory\r\n"));
        assert!(is_error_line(b"ERROR\r\n"));
        assert!(!is_error_line(b"VALUE x 0 1\r\n"));
    }
}
