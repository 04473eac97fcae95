//! `duality bench disk --web`: the second half of seed 004's disk test
//! (Fig. 19) — a web server whose working set is many small files that the
//! page cache does not hold, against nginx with and without `aio threads`.
//!
//! ```text
//!  clients ×N (this process, duality loops)             server (its own process)
//!  loop { f = random of F files; GET /f; time it }  ──► duality http (its 100 MiB cache)
//!                                                       nginx (sendfile)
//!                                                       nginx (sendfile, aio threads)
//! ```
//!
//! The seed: 128K files of 16 KB, the kernel's disk cache flushed before
//! each trial, the server's own cache at 100 MB, throughput against client
//! connections. Here: the same file set (fewer where the disk lacks room:
//! the command says what it used), and before every trial each file is
//! dropped from the page cache with `posix_fadvise(DONTNEED)` (no root
//! needed, and nothing else on the machine loses its cache). duality
//! serves small files by reading them whole on its blocking pool (or its
//! payload threads) and keeps them in its own cache; nginx sends them with
//! `sendfile` from its worker, which blocks on the disk unless `aio
//! threads` moves the read to its thread pool.
//!
//! Per point: requests/s, body MiB/s, p50/p99 time per request (from
//! writing the request to the whole response), server CPU per request and
//! the bytes the server read from storage per request (its process tree's
//! `/proc/<pid>/io` `read_bytes`: how disk-bound the trial really was).

use crate::http::{read_response, RunningServer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One server at one client count.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WebRow {
    /// `duality`, `nginx` or `nginx-aio`.
    pub server: String,
    /// Concurrent keep-alive connections, one request in flight each.
    pub clients: usize,
    /// Complete `200` responses per second.
    pub requests_per_sec: f64,
    /// Response bodies, MiB/s.
    pub mib_per_sec: f64,
    /// Median time per request, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Server CPU time (its whole process tree) per request, microseconds.
    pub cpu_us_per_request: f64,
    /// Bytes the server read from storage per request, KiB.
    pub disk_kib_per_request: f64,
    /// Failed requests or connections in the trial.
    pub errors: u64,
}

/// The servers compared, in the order they take turns.
pub const SERVERS: [&str; 3] = ["duality", "nginx", "nginx-aio"];

/// The file set: `count` files of `size` bytes under `root`, 256 to a
/// directory, named `/d<NNN>/f<NNNNNN>`.
#[derive(Clone, Debug)]
pub struct FileSet {
    /// Directory served.
    pub root: PathBuf,
    /// Number of files.
    pub count: usize,
    /// Bytes per file.
    pub size: usize,
}

impl FileSet {
    /// The URL path of file `i`.
    pub fn url(i: usize) -> String {
        format!("/d{:03}/f{i:06}", i / 256)
    }

    fn path(&self, i: usize) -> PathBuf {
        self.root.join(&Self::url(i)[1..])
    }

    /// The marker a whole set holds, written after its last file.
    fn marker(root: &Path, count: usize, size: usize) -> PathBuf {
        root.join(format!("complete-{count}x{size}"))
    }

    /// Writes the files unless a previous run left them whole (see
    /// [`FileSet::ready`]); returns the set. A set found incomplete is
    /// removed and written again.
    pub fn prepare(root: &Path, count: usize, size: usize) -> anyhow::Result<FileSet> {
        let set = FileSet {
            root: root.to_path_buf(),
            count,
            size,
        };
        if FileSet::ready(root, count, size) {
            return Ok(set);
        }
        // A set left half-made (an error, or the run interrupted) is
        // removed, not kept for the next run. Every write is a step of the
        // guard: once interrupted, none runs, so the signal thread's
        // removal is never raced by this loop (which recreated folders
        // behind it and then wrote the marker).
        let guard = crate::interrupt::TempPath::new(root);
        guard.step(|| match std::fs::remove_dir_all(root) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        })?;
        let mut body = vec![0u8; size];
        let mut rng = fastrand::Rng::with_seed(19);
        for i in 0..count {
            let p = set.path(i);
            guard.step(|| {
                if i % 256 == 0 {
                    std::fs::create_dir_all(p.parent().expect("a parent"))?;
                }
                // Incompressible, different per file: nothing dedups or
                // caches one file for another.
                rng.fill(&mut body);
                std::fs::write(&p, &body)
            })?;
        }
        guard.step(|| std::fs::write(FileSet::marker(root, count, size), b""))?;
        guard.keep();
        Ok(set)
    }

    /// Whether the set of `count` files of `size` bytes under `root` is
    /// there, whole, from an earlier run: its marker, and every file at its
    /// size (a marker alone was trusted, and a set whose files had gone, as
    /// an interrupted run's writer left it, failed every later run with a
    /// bare "No such file or directory").
    pub fn ready(root: &Path, count: usize, size: usize) -> bool {
        let set = FileSet {
            root: root.to_path_buf(),
            count,
            size,
        };
        FileSet::marker(root, count, size).exists()
            && (0..count).all(|i| {
                std::fs::symlink_metadata(set.path(i))
                    .is_ok_and(|m| m.is_file() && m.len() == size as u64)
            })
    }

    /// Drops every file of the set from the page cache (written back first:
    /// only clean pages can be dropped).
    pub fn evict(&self) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: sync(2) takes no arguments; it writes dirty pages back.
        unsafe { libc::sync() };
        for i in 0..self.count {
            let p = self.path(i);
            let f = std::fs::File::open(&p)
                .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", p.display()))?;
            // SAFETY: posix_fadvise only advises the kernel about an open
            // descriptor we own; no memory is passed.
            let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            anyhow::ensure!(
                r == 0,
                "posix_fadvise: {}",
                std::io::Error::from_raw_os_error(r)
            );
        }
        Ok(())
    }
}

/// `read_bytes` of `/proc/<pid>/io`: bytes this process caused to be read
/// from storage.
pub fn storage_read_bytes(pid: u32) -> u64 {
    crate::proc::field(pid, "io", "read_bytes:").unwrap_or(0)
}

/// CPU time and storage reads of a process tree, summed.
fn tree_usage(pid: u32) -> (Duration, u64) {
    crate::proc::process_tree(pid)
        .into_iter()
        .fold((Duration::ZERO, 0), |(c, r), p| {
            (
                c + crate::proc::cpu_time_of(p).unwrap_or_default(),
                r + storage_read_bytes(p),
            )
        })
}

struct Shared {
    stop: AtomicBool,
    measuring: AtomicBool,
    connected: AtomicUsize,
    requests: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
}

/// Closed-loop keep-alive clients, each asking for a random file of `files`
/// per request, on `threads` duality loops; what the window saw.
struct Load {
    requests: u64,
    bytes: u64,
    errors: u64,
    seconds: f64,
    hist: Histogram<u64>,
}

fn load(
    addr: SocketAddr,
    files: usize,
    clients: usize,
    threads: usize,
    warmup: Duration,
    window: Duration,
    on_window: &mut dyn FnMut(bool),
) -> anyhow::Result<Load> {
    let threads = threads.clamp(1, clients.max(1));
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        measuring: AtomicBool::new(false),
        connected: AtomicUsize::new(0),
        requests: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let hists: Vec<Arc<Mutex<Histogram<u64>>>> = (0..threads)
        .map(|_| Arc::new(Mutex::new(Histogram::new(3).expect("histogram"))))
        .collect();
    let mut loops = Vec::new();
    for (t, hist) in hists.iter().enumerate() {
        let lp = duality_rt::LoopThread::spawn(duality_rt::LoopConfig {
            name: Some(format!("web-load-{t}")),
            long_poll_threshold: None,
            ..Default::default()
        })?;
        let n = clients / threads + usize::from(t < clients % threads);
        for c in 0..n {
            let seed = (t * 100_003 + c) as u64;
            drop(
                lp.handle()
                    .spawn(client(addr, files, seed, shared.clone(), hist.clone())),
            );
        }
        loops.push(lp);
    }
    let until = Instant::now() + Duration::from_secs(10);
    while shared.connected.load(Relaxed) < clients && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(warmup);
    on_window(true);
    let (r0, b0) = (shared.requests.load(Relaxed), shared.bytes.load(Relaxed));
    shared.measuring.store(true, Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(window);
    shared.measuring.store(false, Relaxed);
    let seconds = t0.elapsed().as_secs_f64();
    let (r1, b1) = (shared.requests.load(Relaxed), shared.bytes.load(Relaxed));
    on_window(false);
    shared.stop.store(true, Relaxed);
    let until = Instant::now() + Duration::from_secs(2);
    while shared.connected.load(Relaxed) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    for lp in loops {
        let _ = lp.join();
    }
    let mut hist = Histogram::new(3).expect("histogram");
    for h in &hists {
        hist.add(&*h.lock().unwrap_or_else(|e| e.into_inner()))?;
    }
    Ok(Load {
        requests: r1 - r0,
        bytes: b1 - b0,
        errors: shared.errors.load(Relaxed),
        seconds,
        hist,
    })
}

async fn client(
    addr: SocketAddr,
    files: usize,
    seed: u64,
    shared: Arc<Shared>,
    hist: Arc<Mutex<Histogram<u64>>>,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut buf = vec![0u8; 20 * 1024];
    // A connection the server closed after an answer (its keep-alive limit)
    // is opened again, as a browser does; a failure ends the client.
    while !shared.stop.load(Relaxed) {
        let s = match duality_rt::net::TcpStream::connect(addr).await {
            Ok(s) => s,
            Err(_) => {
                shared.errors.fetch_add(1, Relaxed);
                return;
            }
        };
        // Reset on close: no TIME_WAIT left between trials.
        let _ = s.set_linger(Some(Duration::ZERO));
        let _ = s.set_nodelay(true);
        shared.connected.fetch_add(1, Relaxed);
        let closed = serve_requests(&s, files, &mut rng, &mut buf, &shared, &hist).await;
        shared.connected.fetch_sub(1, Relaxed);
        if !closed {
            return;
        }
    }
}

/// Requests on one connection until told to stop (false), a failure
/// (false) or an answer that closes it (true).
async fn serve_requests(
    s: &duality_rt::net::TcpStream,
    files: usize,
    rng: &mut fastrand::Rng,
    buf: &mut [u8],
    shared: &Shared,
    hist: &Mutex<Histogram<u64>>,
) -> bool {
    while !shared.stop.load(Relaxed) {
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: bench\r\n\r\n",
            FileSet::url(rng.usize(..files))
        );
        let t = Instant::now();
        if s.write_all(req.as_bytes()).await.is_err() {
            shared.errors.fetch_add(1, Relaxed);
            return false;
        }
        match read_response(s, buf).await {
            Ok(r) => {
                shared.requests.fetch_add(1, Relaxed);
                shared.bytes.fetch_add(r.body, Relaxed);
                if shared.measuring.load(Relaxed) {
                    let us = t.elapsed().as_micros() as u64;
                    let _ = hist
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .record(us.max(1));
                }
                if r.close {
                    return true;
                }
            }
            Err(_) => {
                if !shared.stop.load(Relaxed) {
                    shared.errors.fetch_add(1, Relaxed);
                }
                return false;
            }
        }
    }
    false
}

/// The experiment's parameters.
pub struct Plan<'a> {
    /// The `duality` binary.
    pub exe: &'a Path,
    /// The files served.
    pub files: &'a FileSet,
    /// Servers (of [`SERVERS`]), in turn.
    pub servers: Vec<String>,
    /// Client counts.
    pub clients: Vec<usize>,
    /// duality's own cache, MiB (the seed's server: 100 MB).
    pub cache_mib: usize,
    /// nginx workers (duality runs its default model on as many cores).
    pub nginx_workers: usize,
    /// Seconds after the connections are open, before the window.
    pub warmup: f64,
    /// Seconds counted.
    pub seconds: f64,
    /// Load-generator loop threads.
    pub client_threads: usize,
}

/// Starts `server` on the plan's files.
fn start(plan: &Plan, server: &str, fd_limit: u64) -> anyhow::Result<RunningServer> {
    let nginx = || {
        crate::http::find_nginx()
            .ok_or_else(|| anyhow::anyhow!("nginx is not installed (apt-get install nginx-light)"))
    };
    match server {
        "duality" => RunningServer::duality_with(
            plan.exe,
            &plan.files.root,
            &[
                "--cache-size",
                &plan.cache_mib.to_string(),
                "--max-conns",
                &(fd_limit.saturating_sub(64)).to_string(),
            ],
        ),
        "nginx" => RunningServer::nginx(&nginx()?, &plan.files.root, plan.nginx_workers, fd_limit),
        "nginx-aio" => RunningServer::nginx_with(
            &nginx()?,
            &plan.files.root,
            plan.nginx_workers,
            fd_limit,
            "    aio threads;\n",
        ),
        other => anyhow::bail!("unknown server {other:?}; choose from {SERVERS:?}"),
    }
}

/// Runs every server at every client count (servers take turns per client
/// count; each trial starts from an evicted page cache and a fresh server,
/// so no trial inherits another's cache).
pub fn run(plan: &Plan, tick: &mut dyn FnMut(&WebRow)) -> anyhow::Result<Vec<WebRow>> {
    let fd_limit = crate::http::raise_fd_limit();
    let mut rows = Vec::new();
    for &clients in &plan.clients {
        for server in &plan.servers {
            plan.files.evict()?;
            let s = start(plan, server, fd_limit)?;
            let pid = s.pid();
            let mut at_start = (Duration::ZERO, 0);
            let mut usage = (Duration::ZERO, 0);
            let got = load(
                s.addr,
                plan.files.count,
                clients,
                plan.client_threads,
                Duration::from_secs_f64(plan.warmup),
                Duration::from_secs_f64(plan.seconds),
                &mut |start| {
                    let u = tree_usage(pid);
                    if start {
                        at_start = u;
                    } else {
                        usage = (
                            u.0.saturating_sub(at_start.0),
                            u.1.saturating_sub(at_start.1),
                        );
                    }
                },
            )?;
            drop(s);
            let per = |v: f64| v / got.requests.max(1) as f64;
            let row = WebRow {
                server: server.clone(),
                clients,
                requests_per_sec: got.requests as f64 / got.seconds,
                mib_per_sec: got.bytes as f64 / got.seconds / (1 << 20) as f64,
                p50_us: got.hist.value_at_quantile(0.5) as f64,
                p99_us: got.hist.value_at_quantile(0.99) as f64,
                cpu_us_per_request: per(usage.0.as_secs_f64() * 1e6),
                disk_kib_per_request: per(usage.1 as f64 / 1024.0),
                errors: got.errors,
            };
            tick(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The Markdown table, with each server's requests/s relative to duality's
/// at the same client count.
pub fn table(rows: &[WebRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let base = rows
                .iter()
                .find(|d| d.server == "duality" && d.clients == r.clients)
                .map(|d| d.requests_per_sec);
            vec![
                r.clients.to_string(),
                r.server.clone(),
                crate::report::thousands(r.requests_per_sec),
                base.filter(|b| *b > 0.0)
                    .map(|b| format!("{:.2}", r.requests_per_sec / b))
                    .unwrap_or_else(|| "-".into()),
                format!("{:.1}", r.mib_per_sec),
                format!("{:.0}", r.p50_us),
                format!("{:.0}", r.p99_us),
                format!("{:.1}", r.cpu_us_per_request),
                format!("{:.1}", r.disk_kib_per_request),
                r.errors.to_string(),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "clients",
            "server",
            "requests/s",
            "vs duality",
            "MiB/s",
            "p50 µs",
            "p99 µs",
            "server CPU µs/request",
            "disk KiB/request",
            "errors",
        ],
        &cells,
    )
}

/// CSV of the rows (header + one line each).
pub fn csv(rows: &[WebRow]) -> String {
    let mut s = String::from("server,clients,requests_per_sec,mib_per_sec,p50_us,p99_us,cpu_us_per_request,disk_kib_per_request,errors\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{:.1},{:.3},{:.0},{:.0},{:.3},{:.3},{}\n",
            crate::report::csv_field(&r.server),
            r.clients,
            r.requests_per_sec,
            r.mib_per_sec,
            r.p50_us,
            r.p99_us,
            r.cpu_us_per_request,
            r.disk_kib_per_request,
            r.errors
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(server: &str, clients: usize, rps: f64) -> WebRow {
        WebRow {
            server: server.into(),
            clients,
            requests_per_sec: rps,
            mib_per_sec: rps / 64.0,
            p50_us: 100.0,
            p99_us: 900.0,
            cpu_us_per_request: 20.0,
            disk_kib_per_request: 12.0,
            errors: 0,
        }
    }

    #[test]
    fn table_compares_with_duality_at_the_same_client_count() {
        let rows = vec![
            row("duality", 16, 1000.0),
            row("nginx", 16, 500.0),
            row("nginx", 64, 800.0),
        ];
        let t = table(&rows);
        assert!(t.contains("| 16 | nginx | 500 | 0.50 |"), "{t}");
        assert!(t.contains("| 16 | duality | 1,000 | 1.00 |"), "{t}");
        // No duality row at 64 clients: no ratio.
        assert!(t.contains("| 64 | nginx | 800 | - |"), "{t}");
        assert_eq!(csv(&rows).lines().count(), 4);
    }

    #[test]
    fn urls_spread_files_over_directories_of_256() {
        assert_eq!(FileSet::url(0), "/d000/f000000");
        assert_eq!(FileSet::url(255), "/d000/f000255");
        assert_eq!(FileSet::url(256), "/d001/f000256");
        assert_eq!(FileSet::url(131_071), "/d511/f131071");
    }

    #[test]
    fn prepared_files_are_reused_and_evictable() {
        let dir = std::env::temp_dir().join(format!("duality-web-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let set = FileSet::prepare(&dir, 300, 1024).unwrap();
        assert!(FileSet::ready(&dir, 300, 1024));
        assert_eq!(std::fs::metadata(set.path(299)).unwrap().len(), 1024);
        assert_ne!(
            std::fs::read(set.path(0)).unwrap(),
            std::fs::read(set.path(1)).unwrap()
        );
        // A second prepare finds the set whole and writes nothing.
        std::fs::write(set.path(0), [7u8; 1024]).unwrap();
        FileSet::prepare(&dir, 300, 1024).unwrap();
        assert_eq!(std::fs::read(set.path(0)).unwrap(), [7u8; 1024]);
        set.evict().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The marker with files missing (an interrupted run's writer, racing
    /// the removal, left 36,609 of 131,072 and the marker): not ready, and
    /// written again whole; the next run failed on the missing files.
    #[test]
    fn a_marked_set_with_files_missing_is_written_again() {
        let dir = std::env::temp_dir().join(format!("duality-web-broken-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let set = FileSet::prepare(&dir, 600, 64).unwrap();
        std::fs::remove_dir_all(dir.join("d001")).unwrap();
        std::fs::write(set.path(599), b"short").unwrap();
        std::fs::write(dir.join("stray"), b"x").unwrap();
        assert!(FileSet::marker(&dir, 600, 64).exists());
        assert!(!FileSet::ready(&dir, 600, 64));
        FileSet::prepare(&dir, 600, 64).unwrap();
        assert!(FileSet::ready(&dir, 600, 64));
        // Rebuilt from nothing: what the broken set held is gone.
        assert!(!dir.join("stray").exists());
        set.evict().unwrap();
        // A file gone after the check is named in the error.
        std::fs::remove_file(set.path(300)).unwrap();
        let e = set.evict().unwrap_err().to_string();
        assert!(e.contains("d001/f000300"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
