//! `duality bench soak`: well-behaved clients beside hostile ones, for a
//! bounded time, against the cache and the web server.
//!
//! ```text
//!  good clients ×G ── request, check the answer, repeat ──▶ server
//!  flooders     ×F ══ pipelined requests without pause  ══▶   │   RSS sampled
//!  slowloris    ×S ── one byte every 200 ms             ──▶   │   every second
//!  resetters    ×R ── half a request, then a reset      ──▶   │
//!  churners     ×C ── connect, one request, close       ──▶   ▼
//! ```
//!
//! Every answer a good client gets is checked (a value it stored, a file's
//! exact bytes). The report gives, per server: good requests, errors the
//! good clients saw (the goal is zero), their p99 latency, and resident
//! memory after warm-up and at the end (the goal is flat). Loopback only;
//! every thread stops at the deadline and every process is stopped by PID.
//! A server that exits during its soak ends it early: its row says how
//! ([`SoakRow::exited`]), with no memory reading past its death (it read
//! as 0 KiB), and the command fails.

use crate::http;
use crate::servers::{ServerKind as KvServer, ServerProcess, DEFAULT_MAX_CONNS};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One server's soak figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SoakRow {
    /// `kv` or `http`.
    pub service: String,
    /// The server.
    pub server: String,
    /// Seconds soaked.
    pub seconds: f64,
    /// Requests the good clients completed and checked.
    pub good_requests: u64,
    /// Errors the good clients saw (wrong answer, reset, timeout).
    pub good_errors: u64,
    /// The good clients' p99 latency, milliseconds.
    pub good_p99_ms: f64,
    /// Connections the hostile clients opened.
    pub hostile_connections: u64,
    /// Resident memory after the first fifth of the run, KiB (`None`:
    /// the server was gone by then).
    pub rss_warm_kib: Option<u64>,
    /// Highest resident memory, KiB.
    pub rss_max_kib: Option<u64>,
    /// Resident memory at the end, KiB (`None`: the server was gone).
    pub rss_end_kib: Option<u64>,
    /// How the server ended where it exited during the soak (`killed by
    /// signal 9 (SIGKILL)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exited: Option<String>,
}

/// What one server's soak measured.
struct Soaked {
    good: u64,
    errors: u64,
    p99: f64,
    hostile: u64,
    /// Resident memory warm, highest and at the end, KiB.
    rss: [Option<u64>; 3],
    /// How the server ended, where it did.
    exited: Option<String>,
}

/// How many of each client.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// Well-behaved clients.
    pub good: usize,
    /// Flooders.
    pub floods: usize,
    /// Slowloris connections.
    pub slow: usize,
    /// Threads that reset connections mid-request.
    pub resets: usize,
    /// Threads that open and close connections.
    pub churn: usize,
}

impl Mix {
    /// Descriptors the load generator (this process) holds at once: one
    /// per good client, slowloris connection, resetting and churning
    /// thread, two per flooder (its socket and the clone its reader holds).
    pub fn descriptors(&self) -> u64 {
        [self.good, self.slow, self.resets, self.churn]
            .iter()
            .fold(0u64, |t, &n| t.saturating_add(n as u64))
            .saturating_add((self.floods as u64).saturating_mul(2))
    }

    /// Refuses a mix whose connections this process cannot open under
    /// `fd_limit` with [`crate::limits::FD_MARGIN`] kept free: past it,
    /// the load generator's own "too many open files" was counted as the
    /// server's errors.
    pub fn check(&self, fd_limit: u64) -> anyhow::Result<()> {
        let (need, margin) = (self.descriptors(), crate::limits::FD_MARGIN);
        anyhow::ensure!(
            need.saturating_add(margin) <= fd_limit,
            "--good {} --floods {} --slow {} --resets {} --churn {}: the load generator holds \
             {need} descriptors (two per flood), and a process may open {fd_limit} files here \
             (ulimit -n), {margin} kept free; at most {} in all",
            self.good,
            self.floods,
            self.slow,
            self.resets,
            self.churn,
            fd_limit.saturating_sub(margin)
        );
        Ok(())
    }
}

impl Default for Mix {
    fn default() -> Mix {
        Mix {
            good: 4,
            floods: 2,
            slow: 50,
            resets: 1,
            churn: 1,
        }
    }
}

/// What a service's clients send and expect.
trait Service: Send + Sync + 'static {
    /// One checked request on `s` by good client `id`, round `n`.
    fn good(&self, s: &mut TcpStream, id: usize, n: u64) -> std::io::Result<()>;
    /// Pipelined requests a flooder repeats.
    fn flood(&self) -> Vec<u8>;
    /// A request, whole.
    fn request(&self) -> Vec<u8>;
}

struct Kv;

impl Service for Kv {
    fn good(&self, s: &mut TcpStream, id: usize, n: u64) -> std::io::Result<()> {
        let key = format!("soak:{id}:{}", n % 64);
        let value = format!("{n:020}");
        write!(
            s,
            "set {key} 0 0 {}\r\n{value}\r\nget {key}\r\n",
            value.len()
        )?;
        let want = format!(
            "STORED\r\nVALUE {key} 0 {}\r\n{value}\r\nEND\r\n",
            value.len()
        );
        expect(s, want.as_bytes())
    }
    fn flood(&self) -> Vec<u8> {
        b"get soak:flood\r\n".repeat(1024)
    }
    fn request(&self) -> Vec<u8> {
        b"get soak:churn\r\n".to_vec()
    }
}

struct Http;

/// The web server's soak file: 8 KiB of numbered lines, large enough that
/// a response alone in its write is sent from the server's cache entry
/// (the gather path), while pipelined ones are copied behind it.
static BODY: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let mut b = Vec::with_capacity(BODY_LEN);
    let mut line = 0;
    while b.len() < BODY_LEN {
        b.extend_from_slice(format!("soak body line {line:05}\n").as_bytes());
        line += 1;
    }
    b.truncate(BODY_LEN);
    b
});
const BODY_LEN: usize = 8192;

impl Service for Http {
    fn good(&self, s: &mut TcpStream, _: usize, _: u64) -> std::io::Result<()> {
        s.write_all(b"GET /soak.txt HTTP/1.1\r\nHost: soak\r\n\r\n")?;
        // Read the head, then exactly the body it announces.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = find(&got, b"\r\n\r\n") {
                break i + 4;
            }
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got.extend_from_slice(&buf[..n]);
        };
        if !got.starts_with(b"HTTP/1.1 200") {
            return Err(std::io::Error::other("not a 200"));
        }
        while got.len() < head_end + BODY.len() {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got.extend_from_slice(&buf[..n]);
        }
        if got[head_end..] != BODY[..] {
            return Err(std::io::Error::other("wrong body"));
        }
        Ok(())
    }
    fn flood(&self) -> Vec<u8> {
        b"GET /soak.txt HTTP/1.1\r\nHost: soak\r\n\r\n".repeat(256)
    }
    fn request(&self) -> Vec<u8> {
        b"GET /soak.txt HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n".to_vec()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads exactly `want.len()` bytes and compares them.
fn expect(s: &mut TcpStream, want: &[u8]) -> std::io::Result<()> {
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got)?;
    if got != want {
        return Err(std::io::Error::other("wrong answer"));
    }
    Ok(())
}

/// Resident memory of `pid`, KiB (`None`: it is gone, or a zombie).
pub fn rss_kib(pid: u32) -> Option<u64> {
    crate::proc::field(pid, "status", "VmRSS:")
}

/// The 99th percentile of `v` (sorted here), nearest rank.
pub fn p99(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::fairness::percentile(v, 0.99)
}

struct Shared {
    stop: AtomicBool,
    good: AtomicU64,
    errors: AtomicU64,
    hostile: AtomicU64,
    latencies: Mutex<Vec<f64>>,
}

/// Soaks the server at `addr` (process `pid`) for `run_for`, or until
/// `exited` (asked at every memory sample) says how it ended.
fn soak_one(
    service: Arc<dyn Service>,
    addr: SocketAddr,
    pid: u32,
    mix: Mix,
    run_for: Duration,
    exited: &mut dyn FnMut() -> Option<String>,
) -> Soaked {
    let sh = Arc::new(Shared {
        stop: AtomicBool::new(false),
        good: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        hostile: AtomicU64::new(0),
        latencies: Mutex::new(Vec::new()),
    });
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for id in 0..mix.good {
        let (sh, svc) = (sh.clone(), service.clone());
        threads.push(std::thread::spawn(move || {
            let mut lat = Vec::new();
            let mut n = 0u64;
            'outer: while !sh.stop.load(Relaxed) {
                let Ok(mut s) = TcpStream::connect(addr) else {
                    sh.errors.fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.set_nodelay(true);
                // A few hundred requests per connection, then a new one.
                for _ in 0..500 {
                    if sh.stop.load(Relaxed) {
                        break 'outer;
                    }
                    let t0 = Instant::now();
                    match svc.good(&mut s, id, n) {
                        Ok(()) => {
                            lat.push(t0.elapsed().as_secs_f64() * 1e3);
                            sh.good.fetch_add(1, Relaxed);
                        }
                        Err(_) => {
                            sh.errors.fetch_add(1, Relaxed);
                            continue 'outer;
                        }
                    }
                    n += 1;
                }
            }
            sh.latencies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(lat);
        }));
    }
    let flood_stop = Arc::new(AtomicBool::new(false));
    let mut floods = Vec::new();
    for _ in 0..mix.floods {
        floods.push(duality_models::flood::flood(
            addr,
            service.flood(),
            flood_stop.clone(),
        ));
    }
    if mix.slow > 0 {
        let (sh, req) = (sh.clone(), service.request());
        threads.push(std::thread::spawn(move || {
            // Slowloris: each connection sends one more byte every 200 ms
            // and reconnects once the server has had enough of it.
            let mut conns: Vec<(TcpStream, usize)> = Vec::new();
            while !sh.stop.load(Relaxed) {
                while conns.len() < mix.slow {
                    match TcpStream::connect(addr) {
                        Ok(s) => {
                            let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
                            sh.hostile.fetch_add(1, Relaxed);
                            conns.push((s, 0));
                        }
                        Err(_) => break,
                    }
                }
                conns.retain_mut(|(s, sent)| {
                    let byte = req[*sent % (req.len() - 1)];
                    *sent += 1;
                    s.write_all(&[byte]).is_ok()
                });
                std::thread::sleep(Duration::from_millis(200));
            }
        }));
    }
    for _ in 0..mix.resets {
        let (sh, req) = (sh.clone(), service.request());
        threads.push(std::thread::spawn(move || {
            while !sh.stop.load(Relaxed) {
                if let Ok(s) = TcpStream::connect(addr) {
                    sh.hostile.fetch_add(1, Relaxed);
                    let _ = (&s).write_all(&req[..req.len() / 2]);
                    // Closing with linger 0 sends a reset, not a FIN.
                    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    for _ in 0..mix.churn {
        let (sh, req) = (sh.clone(), service.request());
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while !sh.stop.load(Relaxed) {
                if let Ok(mut s) = TcpStream::connect(addr) {
                    sh.hostile.fetch_add(1, Relaxed);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    let _ = s.write_all(&req);
                    let _ = s.read(&mut buf);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }));
    }
    let t0 = Instant::now();
    let warm_at = run_for / 5;
    let (mut warm, mut max, mut end) = (None, None, None);
    let mut how = None;
    while t0.elapsed() < run_for {
        std::thread::sleep(Duration::from_millis(250));
        how = exited();
        if how.is_some() {
            // Its memory reads as nothing from here on: no end reading.
            end = None;
            break;
        }
        end = rss_kib(pid);
        max = max.max(end);
        if warm.is_none() && t0.elapsed() >= warm_at {
            warm = end;
        }
    }
    sh.stop.store(true, Relaxed);
    flood_stop.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    // Each flooder's connections count as hostile ones, reconnections too.
    for t in floods {
        sh.hostile.fetch_add(t.join().unwrap_or(1), Relaxed);
    }
    let mut lat = std::mem::take(&mut *sh.latencies.lock().unwrap_or_else(|e| e.into_inner()));
    Soaked {
        good: sh.good.load(Relaxed),
        errors: sh.errors.load(Relaxed),
        p99: p99(&mut lat),
        hostile: sh.hostile.load(Relaxed),
        rss: [warm, max, end],
        exited: how,
    }
}

/// One soak run's settings.
pub struct Plan<'a> {
    /// The `duality` executable.
    pub exe: &'a Path,
    /// `kv`, `http` or both.
    pub services: Vec<String>,
    /// The model the servers run.
    pub model: String,
    /// Seconds per server.
    pub seconds: f64,
    /// The clients.
    pub mix: Mix,
}

impl SoakRow {
    /// The row of what `server` of `service` went through in `seconds`.
    fn of(service: &str, server: String, seconds: f64, got: Soaked) -> SoakRow {
        SoakRow {
            service: service.into(),
            server,
            seconds,
            good_requests: got.good,
            good_errors: got.errors,
            good_p99_ms: got.p99,
            hostile_connections: got.hostile,
            rss_warm_kib: got.rss[0],
            rss_max_kib: got.rss[1],
            rss_end_kib: got.rss[2],
            exited: got.exited,
        }
    }
}

/// Soaks each service's server in turn; `tick` sees each row.
pub fn run(plan: &Plan, tick: &mut dyn FnMut(&SoakRow)) -> anyhow::Result<Vec<SoakRow>> {
    let run_for = Duration::from_secs_f64(plan.seconds);
    let mut rows = Vec::new();
    let mut row = |service: &str, server: String, got: Soaked| {
        let r = SoakRow::of(service, server, plan.seconds, got);
        tick(&r);
        rows.push(r);
    };
    if plan.services.iter().any(|s| s == "kv") {
        let kind = KvServer::Duality(plan.model.clone());
        let (mut server, addr) =
            ServerProcess::start_on_free_port(plan.exe, &kind, 1024, DEFAULT_MAX_CONNS)?;
        let pid = server.pid();
        let got = soak_one(Arc::new(Kv), addr, pid, plan.mix, run_for, &mut || {
            server.exited()
        });
        drop(server);
        row("kv", kind.label(), got);
    }
    if plan.services.iter().any(|s| s == "http") {
        let dir = http::TempDir::new("soak-www")?;
        std::fs::write(dir.0.join("soak.txt"), &*BODY)?;
        let mut s = http::RunningServer::duality(
            plan.exe,
            &dir.0,
            &plan.model,
            "favor-active",
            None,
            1024,
        )?;
        let (addr, pid) = (s.addr, s.pid());
        let got = soak_one(Arc::new(Http), addr, pid, plan.mix, run_for, &mut || {
            s.exited()
        });
        drop(s);
        row("http", format!("duality {}", plan.model), got);
    }
    Ok(rows)
}

/// The Markdown table.
pub fn table(rows: &[SoakRow]) -> String {
    let header = [
        "service",
        "server",
        "seconds",
        "good requests",
        "good-client errors",
        "good p99 ms",
        "hostile connections",
        "RSS warm KiB",
        "RSS max KiB",
        "RSS end KiB",
    ];
    let kib = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.service.clone(),
                r.server.clone(),
                format!("{:.0}", r.seconds),
                r.good_requests.to_string(),
                r.good_errors.to_string(),
                format!("{:.2}", r.good_p99_ms),
                r.hostile_connections.to_string(),
                kib(r.rss_warm_kib),
                kib(r.rss_max_kib),
                // How it ended: in the JSON and the command's error.
                match &r.exited {
                    Some(_) => "- (exited)".into(),
                    None => kib(r.rss_end_kib),
                },
            ]
        })
        .collect();
    crate::report::markdown_table(&header, &body)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_mix_past_the_file_limit_is_refused() {
        let m = super::Mix::default();
        assert_eq!(m.descriptors(), 4 + 2 * 2 + 50 + 1 + 1);
        m.check(1024).unwrap();
        let m = super::Mix { slow: 100_000, ..m };
        let e = m.check(20_000).unwrap_err().to_string();
        assert_eq!(
            e,
            "--good 4 --floods 2 --slow 100000 --resets 1 --churn 1: the load generator holds \
             100010 descriptors (two per flood), and a process may open 20000 files here \
             (ulimit -n), 256 kept free; at most 19744 in all"
        );
    }

    use super::*;

    #[test]
    fn p99_takes_the_nearest_rank_of_the_sorted_latencies() {
        let mut v: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        assert_eq!(p99(&mut v), 198.0);
        assert!(p99(&mut []).is_nan());
    }

    #[test]
    fn rss_of_this_process_is_read() {
        assert!(rss_kib(std::process::id()).unwrap() > 0);
        assert_eq!(rss_kib(u32::MAX), None);
    }

    /// A server killed mid-soak read `RSS 20692 -> 0 KiB`: now the soak
    /// stops at its death, says how it ended, and reads no memory of it.
    #[test]
    fn a_server_that_dies_mid_soak_is_reported_so() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Nothing listens there: the good clients fail to connect.
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mix = Mix {
            good: 1,
            floods: 0,
            slow: 0,
            resets: 0,
            churn: 0,
        };
        let mut samples = 0;
        let t0 = Instant::now();
        let got = soak_one(
            Arc::new(Kv),
            addr,
            pid,
            mix,
            Duration::from_secs(20),
            &mut || {
                samples += 1;
                if samples == 3 {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map(crate::servers::describe_exit)
            },
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "the soak went on");
        assert_eq!(got.exited.as_deref(), Some("killed by signal 9 (SIGKILL)"));
        assert_eq!(got.rss[2], None, "no end reading of a dead server");
        assert!(got.rss[1].is_some_and(|k| k > 0), "{:?}", got.rss);
        let row = SoakRow::of("kv", "duality sped".into(), 20.0, got);
        let t = table(std::slice::from_ref(&row));
        assert!(t.contains(" | - (exited) |"), "{t}");
        let v: serde_json::Value = serde_json::from_str(&crate::report::json(&[row])).unwrap();
        assert!(v[0]["rss_end_kib"].is_null(), "{v}");
        assert_eq!(v[0]["exited"], "killed by signal 9 (SIGKILL)");
    }
}
