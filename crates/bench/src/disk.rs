//! `duality bench disk`: seed 004's disk test (Fig. 17) — N readers each
//! reading random 4 KiB blocks of a large file opened with `O_DIRECT` (so
//! the page cache answers nothing), for N from one to tens of thousands.
//!
//! ```text
//!  reader ×N: loop { block = random; pread(file, 4 KiB, block × 4 KiB) }   (timed per read)
//! ```
//!
//! Runtimes, each in a fresh child process, in turn:
//! - `duality-pool`: N tasks on one duality loop (epoll); each read runs on
//!   the runtime's blocking pool (`duality_rt::fs::read_direct`);
//! - `duality-uring`: the same tasks on an io_uring loop: each read goes
//!   through the ring (the kernel does `O_DIRECT` reads asynchronously);
//! - `tokio`: N tasks on a `current_thread` runtime, each read in
//!   `spawn_blocking` (tokio's blocking pool, up to 512 threads);
//! - `os-threads`: one OS thread per reader, blocking `pread` (the seed's
//!   NPTL), at most [`os_thread_cap`] (the kernel's map limit binds first).
//!
//! Reads/s counts reads completed in the window; the per-read time runs from
//! the reader asking to the bytes being there (queueing included), p50 and
//! p99 from a histogram of every read in the window.

use crate::interrupt::SpawnUnlessInterrupted;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One runtime at one reader count.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DiskRow {
    /// `duality-pool`, `duality-uring`, `tokio` or `os-threads`.
    pub runtime: String,
    /// Concurrent readers asked for.
    pub readers: u64,
    /// Readers that ran (OS threads stop at [`os_thread_cap`]).
    pub ran: u64,
    /// 4 KiB reads completed per second.
    pub reads_per_sec: f64,
    /// Median time per read, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Resident memory of the measuring process at the end, MiB.
    pub rss_mib: f64,
}

/// The runtimes compared.
pub const RUNTIMES: [&str; 4] = ["duality-pool", "duality-uring", "tokio", "os-threads"];

/// At most this many OS threads are started for the baseline (fewer where
/// the kernel's map limit binds: see [`os_thread_cap`]).
pub const MAX_OS_THREADS: u64 = 16_384;

/// How many reader threads this machine allows: each takes about five
/// memory mappings (stack, guard page, signal stack and its guard, …), and
/// a process may hold `vm.max_map_count` of them (65,530 by default).
pub fn os_thread_cap() -> u64 {
    let maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(65_530);
    MAX_OS_THREADS.min(maps / 6)
}

/// Bytes per read.
pub const BLOCK: usize = 4096;

/// The name of the memory file system `dir` is on (`tmpfs`, `ramfs`), if
/// it is on one: there `O_DIRECT` reads (which this kernel accepts on
/// tmpfs) and evicted pages come from memory, and a disk test measures
/// nothing of a disk.
pub fn memory_fs(dir: &Path) -> std::io::Result<Option<&'static str>> {
    use std::os::unix::ffi::OsStrExt;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statfs(2) reads a NUL-terminated path and writes one struct
    // that lives on this stack; all-zero bytes are a valid `statfs`.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(match st.f_type as i64 {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    })
}

/// Refuses `dir` for a disk experiment's files if it is (or would be, made
/// in its nearest existing ancestor) on a memory file system. Creates
/// nothing. Errors name the directory.
pub fn check_disk_dir(dir: &Path) -> anyhow::Result<()> {
    let existing = crate::limits::nearest_existing(dir);
    let fs = memory_fs(existing)
        .map_err(|e| anyhow::anyhow!("cannot check --dir {}: {e}", dir.display()))?;
    if let Some(fs) = fs {
        anyhow::bail!(
            "{} is on {fs}: O_DIRECT reads and evicted files would come from memory, \
             not a disk; pass --dir on a disk file system",
            dir.display()
        );
    }
    Ok(())
}

/// Where a disk experiment keeps its files: `dir`, after
/// [`check_disk_dir`] (so a refused `dir` is not left behind), created if
/// missing.
pub fn disk_dir(dir: &Path) -> anyhow::Result<()> {
    check_disk_dir(dir)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create --dir {}: {e}", dir.display()))?;
    Ok(())
}

/// Most readers a point may ask for: the seed's largest count.
pub const MAX_READERS: u64 = 65_536;

/// Bytes in `mib` MiB, `None` past what a file can hold.
pub fn file_bytes(mib: u64) -> Option<u64> {
    mib.checked_mul(1 << 20).filter(|&b| b <= i64::MAX as u64)
}

/// Whether `path` is there at `mib` MiB already (a file [`prepare_file`]
/// made whole, kept from an earlier run).
pub fn file_ready(path: &Path, mib: u64) -> bool {
    std::fs::metadata(path).is_ok_and(|m| Some(m.len()) == file_bytes(mib))
}

/// Refuses a file of `mib` MiB at `path` that no file can be, or that
/// would leave its file system less than [`crate::limits::DISK_MARGIN`]
/// free (a file there at another size is replaced: its bytes count as
/// free). Nothing to check where the file is ready.
pub fn check_file(path: &Path, mib: u64) -> anyhow::Result<()> {
    if file_ready(path, mib) {
        return Ok(());
    }
    let want = file_bytes(mib)
        .ok_or_else(|| anyhow::anyhow!("--file-mib {mib}: no file is that large"))?;
    let had = std::fs::metadata(path).map_or(0, |m| m.len());
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::limits::ensure_space(&format!("--file-mib {mib}"), dir, want.saturating_sub(had))
}

/// Writes `path` with `mib` MiB of pseudo-random bytes unless it is there
/// already at that size (reused from run to run: writing 1 GiB takes time),
/// after [`check_file`]. A file left half-written (an error, or the run
/// interrupted) is removed, never kept for the next run.
pub fn prepare_file(path: &Path, mib: u64) -> anyhow::Result<()> {
    use std::io::Write;
    if file_ready(path, mib) {
        return Ok(());
    }
    check_file(path, mib)?;
    let guard = crate::interrupt::TempPath::new(path);
    // Each write a step: none lands once the signal thread may be removing
    // the file (a create after its removal would leave the file behind).
    let mut f = guard.step(|| File::create(path))?;
    let mut rng = fastrand::Rng::with_seed(0xd15c);
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..mib {
        rng.fill(&mut chunk);
        guard.step(|| f.write_all(&chunk))?;
    }
    guard.step(|| f.sync_all())?;
    guard.keep();
    Ok(())
}

/// Opens `path` for `O_DIRECT` reads, with a clear error where the file
/// system refuses them (tmpfs).
pub fn open_direct(path: &Path) -> anyhow::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot open {} with O_DIRECT ({e}); put it on a disk file system with --dir",
                path.display()
            )
        })
}

/// What the readers share: the stop flag, whether reads count yet, and
/// the histogram of read times (microseconds).
struct Shared {
    stop: AtomicBool,
    counting: AtomicBool,
    started: AtomicU64,
    hist: Mutex<Histogram<u64>>,
    blocks: u64,
}

impl Shared {
    fn new(blocks: u64) -> Arc<Shared> {
        Arc::new(Shared {
            stop: AtomicBool::new(false),
            counting: AtomicBool::new(false),
            started: AtomicU64::new(0),
            hist: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds")),
            blocks,
        })
    }

    fn record(&self, t: Duration) {
        if self.counting.load(Relaxed) {
            let us = (t.as_micros() as u64).clamp(1, 60_000_000);
            let _ = self
                .hist
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(us);
        }
    }

    /// A random block's offset.
    fn offset(&self, rng: &mut fastrand::Rng) -> u64 {
        rng.u64(..self.blocks) * BLOCK as u64
    }

    /// Waits for every reader to start, counts for `window`, stops them.
    fn observe(&self, readers: u64, warmup: Duration, window: Duration) -> Duration {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.started.load(Relaxed) < readers && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(warmup);
        self.counting.store(true, Relaxed);
        let t0 = Instant::now();
        std::thread::sleep(window);
        self.counting.store(false, Relaxed);
        let el = t0.elapsed();
        self.stop.store(true, Relaxed);
        el
    }
}

/// Reads into an aligned buffer with `pread` (the blocking readers).
fn pread_direct(file: &File, offset: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut buf: Vec<u8> = vec![0; BLOCK * 2];
    let pad = buf.as_ptr().align_offset(BLOCK).min(BLOCK);
    file.read_at(&mut buf[pad..pad + BLOCK], offset)
}

/// Measures one runtime in this process (call once per process).
pub fn measure(
    runtime: &str,
    path: &Path,
    readers: u64,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<DiskRow> {
    let file = Arc::new(open_direct(path)?);
    let blocks = file.metadata()?.len() / BLOCK as u64;
    anyhow::ensure!(blocks > 0, "{} is smaller than one block", path.display());
    let sh = Shared::new(blocks);
    let ran = match runtime {
        "duality-pool" => run_duality(
            duality_rt::IoBackend::Epoll,
            &file,
            &sh,
            readers,
            warmup,
            window,
        )?,
        "duality-uring" => run_duality(
            duality_rt::IoBackend::Uring,
            &file,
            &sh,
            readers,
            warmup,
            window,
        )?,
        "tokio" => run_tokio(&file, &sh, readers, warmup, window)?,
        "os-threads" => run_threads(&file, &sh, readers.min(os_thread_cap()), warmup, window)?,
        other => anyhow::bail!("unknown runtime {other:?} (one of {RUNTIMES:?})"),
    };
    let (n, p50, p99) = {
        let h = sh.hist.lock().unwrap_or_else(|e| e.into_inner());
        (h.len(), h.value_at_quantile(0.5), h.value_at_quantile(0.99))
    };
    Ok(DiskRow {
        runtime: runtime.into(),
        readers,
        ran: ran.0,
        reads_per_sec: n as f64 / ran.1.as_secs_f64(),
        p50_us: p50 as f64,
        p99_us: p99 as f64,
        rss_mib: crate::proc::rss_bytes().unwrap_or(0) as f64 / (1 << 20) as f64,
    })
}

fn run_duality(
    io: duality_rt::IoBackend,
    file: &Arc<File>,
    sh: &Arc<Shared>,
    readers: u64,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<(u64, Duration)> {
    let mut lp = duality_rt::EventLoop::new(duality_rt::LoopConfig {
        io,
        long_poll_threshold: None,
        ..Default::default()
    })?;
    let el = lp.block_on(async {
        if duality_rt::event_loop::current_io_backend() != Some(io) {
            duality_rt::say!("{io:?} is not available here: measured on the fallback backend");
        }
        for i in 0..readers {
            let (file, sh) = (file.clone(), sh.clone());
            drop(duality_rt::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(i);
                sh.started.fetch_add(1, Relaxed);
                while !sh.stop.load(Relaxed) {
                    let t = Instant::now();
                    let r =
                        duality_rt::fs::read_direct(file.clone(), sh.offset(&mut rng), BLOCK).await;
                    if !matches!(r, Ok(ref b) if b.len() == BLOCK) {
                        duality_rt::say!("read failed: {:?}", r.map(|b| b.len()));
                        sh.stop.store(true, Relaxed);
                        return;
                    }
                    sh.record(t.elapsed());
                }
            }));
        }
        let sh2 = sh.clone();
        duality_rt::spawn_blocking(move || sh2.observe(readers, warmup, window))
            .await
            .unwrap_or_default()
    });
    Ok((readers, el))
}

fn run_tokio(
    file: &Arc<File>,
    sh: &Arc<Shared>,
    readers: u64,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<(u64, Duration)> {
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let el = rt.block_on(async {
        for i in 0..readers {
            let (file, sh) = (file.clone(), sh.clone());
            drop(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(i);
                sh.started.fetch_add(1, Relaxed);
                while !sh.stop.load(Relaxed) {
                    let t = Instant::now();
                    let off = sh.offset(&mut rng);
                    let f = file.clone();
                    match tokio::task::spawn_blocking(move || pread_direct(&f, off)).await {
                        Ok(Ok(n)) if n == BLOCK => sh.record(t.elapsed()),
                        other => {
                            duality_rt::say!("read failed: {other:?}");
                            sh.stop.store(true, Relaxed);
                            return;
                        }
                    }
                }
            }));
        }
        let sh2 = sh.clone();
        tokio::task::spawn_blocking(move || sh2.observe(readers, warmup, window))
            .await
            .unwrap_or_default()
    });
    // Readers still in a blocking read finish it; do not wait for them.
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok((readers, el))
}

fn run_threads(
    file: &Arc<File>,
    sh: &Arc<Shared>,
    readers: u64,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<(u64, Duration)> {
    let mut threads = Vec::with_capacity(readers as usize);
    // Readers wait here until all are spawned: where the disk answers at
    // once, thousands of reading threads kept the spawning one from the
    // cores (10,921 took 9 minutes to start on one host).
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let open = |gate: &(Mutex<bool>, Condvar)| {
        *gate.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        gate.1.notify_all();
    };
    for i in 0..readers {
        let (file, shared, go_gate) = (file.clone(), sh.clone(), gate.clone());
        // A small stack (64 KiB): a reader needs little, and tens of
        // thousands of default 8 MiB stacks would exhaust the address space.
        let t = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let sh = shared;
                let mut rng = fastrand::Rng::with_seed(i);
                {
                    let (lock, cv) = &*go_gate;
                    let go = lock.lock().unwrap_or_else(|e| e.into_inner());
                    drop(
                        cv.wait_while(go, |go| !*go)
                            .unwrap_or_else(|e| e.into_inner()),
                    );
                }
                sh.started.fetch_add(1, Relaxed);
                while !sh.stop.load(Relaxed) {
                    let t = Instant::now();
                    match pread_direct(&file, sh.offset(&mut rng)) {
                        Ok(n) if n == BLOCK => sh.record(t.elapsed()),
                        other => {
                            duality_rt::say!("read failed: {other:?}");
                            sh.stop.store(true, Relaxed);
                            return;
                        }
                    }
                }
            });
        match t {
            Ok(t) => threads.push(t),
            Err(e) => {
                sh.stop.store(true, Relaxed);
                open(&gate);
                for t in threads {
                    let _ = t.join();
                }
                anyhow::bail!("could not start OS thread {i}: {e}");
            }
        }
    }
    open(&gate);
    let el = sh.observe(readers, warmup, window);
    for t in threads {
        let _ = t.join();
    }
    Ok((readers, el))
}

/// One run's settings.
pub struct Plan<'a> {
    /// The `duality` executable.
    pub exe: &'a Path,
    /// The file read (prepared by [`prepare_file`]).
    pub file: &'a Path,
    /// Runtimes to measure.
    pub runtimes: Vec<String>,
    /// Reader counts.
    pub readers: Vec<u64>,
    /// Seconds before counting.
    pub warmup: f64,
    /// Seconds counted.
    pub seconds: f64,
    /// Rounds (runtimes take turns; medians are reported).
    pub rounds: usize,
}

/// Runs in the parent: each runtime at each reader count in its own child
/// process (`exe bench disk --child RUNTIME …`), `rounds` times in turn;
/// the row of the median reads/s per (runtime, readers). `tick` is called
/// after each child.
pub fn run_children(plan: &Plan, tick: &mut dyn FnMut(&DiskRow)) -> anyhow::Result<Vec<DiskRow>> {
    let mut all: Vec<Vec<DiskRow>> = Vec::new();
    for _ in 0..plan.rounds.max(1) {
        let mut round = Vec::new();
        for &n in &plan.readers {
            for rt in &plan.runtimes {
                let out = Command::new(plan.exe)
                    .args(["bench", "disk", "--child", rt, "--child-readers"])
                    .arg(n.to_string())
                    .arg("--file")
                    .arg(plan.file)
                    .arg("--warmup")
                    .arg(plan.warmup.to_string())
                    .arg("--seconds")
                    .arg(plan.seconds.to_string())
                    .output_unless_interrupted()?;
                anyhow::ensure!(
                    out.status.success(),
                    "measuring {rt} with {n} readers failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                let line = String::from_utf8_lossy(&out.stdout);
                let row: DiskRow = serde_json::from_str(line.trim())
                    .map_err(|e| anyhow::anyhow!("bad output from the {rt} child: {e}: {line}"))?;
                tick(&row);
                round.push(row);
            }
        }
        all.push(round);
    }
    Ok(medians(&all))
}

/// Per position, the row whose reads/s is the median over the rounds.
pub fn medians(rounds: &[Vec<DiskRow>]) -> Vec<DiskRow> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let mut v: Vec<&DiskRow> = rounds.iter().filter_map(|r| r.get(i)).collect();
            v.sort_by(|a, b| a.reads_per_sec.total_cmp(&b.reads_per_sec));
            v[(v.len() - 1) / 2].clone()
        })
        .collect()
}

/// The Markdown table, each row's reads/s also as a ratio to
/// `duality-uring`'s (or `duality-pool`'s) at the same reader count.
pub fn table(rows: &[DiskRow]) -> String {
    let base = |n: u64| {
        ["duality-uring", "duality-pool"]
            .iter()
            .find_map(|b| rows.iter().find(|r| r.runtime == *b && r.readers == n))
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let ratio = match base(r.readers) {
                Some(b) if b.reads_per_sec > 0.0 => {
                    format!("{:.2}x", r.reads_per_sec / b.reads_per_sec)
                }
                _ => "-".into(),
            };
            vec![
                crate::report::thousands(r.readers as f64),
                r.runtime.clone(),
                crate::report::thousands(r.ran as f64),
                crate::report::thousands(r.reads_per_sec),
                ratio,
                format!("{:.0}", r.p50_us),
                format!("{:.0}", r.p99_us),
                format!("{:.1}", r.rss_mib),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "readers",
            "runtime",
            "ran",
            "reads/s",
            "vs duality",
            "p50 µs",
            "p99 µs",
            "RSS MiB",
        ],
        &cells,
    )
}

/// The rows as CSV.
pub fn csv(rows: &[DiskRow]) -> String {
    let mut s = String::from("readers,runtime,ran,reads_per_sec,p50_us,p99_us,rss_mib\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{:.1},{:.1},{:.1},{:.2}\n",
            r.readers,
            crate::report::csv_field(&r.runtime),
            r.ran,
            r.reads_per_sec,
            r.p50_us,
            r.p99_us,
            r.rss_mib
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rt: &str, n: u64, rps: f64) -> DiskRow {
        DiskRow {
            runtime: rt.into(),
            readers: n,
            ran: n,
            reads_per_sec: rps,
            p50_us: 100.0,
            p99_us: 900.0,
            rss_mib: 10.0,
        }
    }

    #[test]
    fn medians_pick_the_middle_round_per_position() {
        let rounds = vec![
            vec![row("a", 1, 10.0), row("b", 1, 5.0)],
            vec![row("a", 1, 30.0), row("b", 1, 1.0)],
            vec![row("a", 1, 20.0), row("b", 1, 3.0)],
        ];
        let m = medians(&rounds);
        assert_eq!(m[0].reads_per_sec, 20.0);
        assert_eq!(m[1].reads_per_sec, 3.0);
        assert!(medians(&[]).is_empty());
    }

    #[test]
    fn table_compares_with_duality_at_the_same_reader_count() {
        let rows = [
            row("duality-uring", 4, 1000.0),
            row("tokio", 4, 500.0),
            row("tokio", 8, 500.0),
        ];
        let t = table(&rows);
        assert!(
            t.contains("| 4 | tokio | 4 | 500 | 0.50x | 100 | 900 | 10.0 |"),
            "{t}"
        );
        assert!(t.contains("| 8 | tokio | 8 | 500 | - |"), "{t}");
        assert_eq!(csv(&rows).lines().count(), 4);
    }

    #[test]
    fn memory_file_systems_are_named() {
        if std::path::Path::new("/dev/shm").exists() {
            let shm = memory_fs(std::path::Path::new("/dev/shm")).unwrap();
            // Where /dev/shm is tmpfs (nearly everywhere), it is said.
            if shm.is_some() {
                assert_eq!(shm, Some("tmpfs"));
                let e = disk_dir(std::path::Path::new("/dev/shm")).unwrap_err();
                assert!(e.to_string().contains("/dev/shm is on tmpfs"), "{e}");
            }
        }
        assert_eq!(memory_fs(std::path::Path::new("/proc")).unwrap(), None);
        assert!(memory_fs(std::path::Path::new("/nonexistent-duality")).is_err());
    }

    #[test]
    fn a_refused_dir_is_not_created() {
        let shm = std::path::Path::new("/dev/shm");
        if !matches!(memory_fs(shm), Ok(Some(_))) {
            return;
        }
        let d = shm.join(format!("duality-disk-refused-{}/x", std::process::id()));
        let e = disk_dir(&d).unwrap_err();
        assert!(e.to_string().contains("is on tmpfs"), "{e}");
        assert!(!d.parent().unwrap().exists(), "{} was created", d.display());
    }

    #[test]
    fn a_file_past_the_free_space_is_refused_before_a_byte_is_written() {
        let path = std::env::temp_dir().join(format!("duality-disk-huge-{}", std::process::id()));
        let e = prepare_file(&path, 99_999_999).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--file-mib 99999999: needs 95.4 TiB in "),
            "{e}"
        );
        assert!(!path.exists());
        let e = prepare_file(&path, u64::MAX).unwrap_err();
        assert!(e.to_string().contains("no file is that large"), "{e}");
        assert!(!file_ready(&path, u64::MAX));
    }

    #[test]
    fn a_file_that_fails_half_written_is_removed() {
        // /dev/full takes the create and fails every write (ENOSPC); here
        // through a symlink, as a file whose disk filled up.
        if !std::path::Path::new("/dev/full").exists() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("duality-disk-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        std::os::unix::fs::symlink("/dev/full", &path).unwrap();
        assert!(prepare_file(&path, 1).is_err());
        assert!(std::fs::symlink_metadata(&path).is_err(), "left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rejects_an_unknown_runtime() {
        let path = std::env::temp_dir().join(format!("duality-disk-unit-{}", std::process::id()));
        prepare_file(&path, 1).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        if open_direct(&path).is_ok() {
            assert!(measure("nope", &path, 1, Duration::ZERO, Duration::ZERO).is_err());
        }
        std::fs::remove_file(&path).unwrap();
    }
}
