//! The pipes half: one runtime in this (child) process — the seed's
//! 128 pairs passing 32 KiB messages in 4 KiB writes, and K idle tasks or
//! threads each waiting on a connection a holder process keeps silent.

use super::{
    bytes_per_conn, os_thread_cap, HoldTarget, Holders, PipeRow, Plan, CHUNK, HOLD_PER_HELPER,
    MESSAGE, MIB, THREAD_STACK,
};
use crate::interrupt::SpawnUnlessInterrupted;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The pipe runtimes, in table order.
pub const RUNTIMES: [&str; 5] = [
    "duality-epoll",
    "duality-uring",
    "duality-loops:2",
    "tokio",
    "os-threads",
];

/// A runtime of the pipes half.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PipeRuntime {
    /// `loops` duality loops on `io`.
    Duality {
        /// The loops' backend.
        io: duality_rt::IoBackend,
        /// How many loops (threads).
        loops: usize,
    },
    /// tokio's `current_thread` runtime.
    Tokio,
    /// One OS thread per task, blocking I/O.
    OsThreads,
}

impl std::str::FromStr for PipeRuntime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use duality_rt::IoBackend::{Epoll, Uring};
        match s {
            "duality-epoll" => Ok(PipeRuntime::Duality {
                io: Epoll,
                loops: 1,
            }),
            "duality-uring" => Ok(PipeRuntime::Duality {
                io: Uring,
                loops: 1,
            }),
            "tokio" => Ok(PipeRuntime::Tokio),
            "os-threads" => Ok(PipeRuntime::OsThreads),
            _ => match s.strip_prefix("duality-loops:").map(str::parse::<usize>) {
                Some(Ok(n)) if (1..=64).contains(&n) => Ok(PipeRuntime::Duality {
                    io: Epoll,
                    loops: n,
                }),
                _ => Err(format!(
                    "unknown runtime {s:?}: one of duality-epoll, duality-uring, \
                     duality-loops:N (1 ≤ N ≤ 64), tokio, os-threads"
                )),
            },
        }
    }
}

/// Bytes of whole messages received by the pairs.
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Idle tasks or threads that have started waiting.
static IDLE_WAITING: AtomicU64 = AtomicU64::new(0);
/// Set when a pair failed (a closed or broken socket).
static FAILED: AtomicBool = AtomicBool::new(false);

/// Accepts `want` idle connections from holder processes on a fresh Unix
/// socket; returns the sockets and the holders (who keep the other ends
/// for as long as they live).
fn accept_idle(exe: &Path, want: u64) -> anyhow::Result<(Vec<StdUnixStream>, Option<Holders>)> {
    if want == 0 {
        return Ok((Vec::new(), None));
    }
    let path = std::env::temp_dir().join(format!("duality-idle-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let _socket_file = crate::interrupt::TempPath::new(&path);
    let listener = StdUnixListener::bind(&path)?;
    listener.set_nonblocking(true)?;
    let mut holders = Holders::start(
        exe,
        &HoldTarget::Unix(path.clone()),
        want,
        false,
        HOLD_PER_HELPER,
    )?;
    let mut socks = Vec::with_capacity(want as usize);
    let until = Instant::now() + Duration::from_secs(120);
    let r = loop {
        match listener.accept() {
            // Blocking (accept does not pass O_NONBLOCK on): the OS-thread
            // runtime reads it as is; the others set their own mode.
            Ok((s, _)) => socks.push(s),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match holders.try_held() {
                    // A holder's connect returns once queued: everything
                    // reported is in the backlog or already accepted.
                    Ok(Some(held)) if socks.len() as u64 >= held => break Ok(()),
                    Err(e) => break Err(e),
                    _ => {}
                }
                if Instant::now() > until {
                    break Err(anyhow::anyhow!(
                        "only {} of {want} idle connections arrived",
                        socks.len()
                    ));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => break Err(e.into()),
        }
    };
    let _ = std::fs::remove_file(&path);
    r?;
    Ok((socks, Some(holders)))
}

/// A connected pair with the small send buffers of the seed's FIFOs.
fn pair() -> io::Result<(StdUnixStream, StdUnixStream)> {
    let (a, b) = StdUnixStream::pair()?;
    for s in [&a, &b] {
        socket2::SockRef::from(s).set_send_buffer_size(CHUNK)?;
    }
    Ok((a, b))
}

/// What a runtime reports back to [`measure_pipes`].
struct Measured {
    held: u64,
    rss_base: u64,
    rss_idle: u64,
    bytes: u64,
    elapsed: Duration,
}

/// Measures one pipe runtime with `idle` idle connections in this process
/// (call once per process: the counters are process-wide).
pub fn measure_pipes(
    exe: &Path,
    runtime: &str,
    idle: u64,
    pairs: usize,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<PipeRow> {
    let rt: PipeRuntime = runtime.parse().map_err(anyhow::Error::msg)?;
    crate::http::raise_fd_limit();
    let want = match rt {
        PipeRuntime::OsThreads => idle.min(os_thread_cap().saturating_sub(2 * pairs as u64 + 16)),
        _ => idle,
    };
    let (idle_socks, _holders) = accept_idle(exe, want)?;
    let pairs: Vec<_> = (0..pairs).map(|_| pair()).collect::<io::Result<_>>()?;
    let m = match rt {
        PipeRuntime::Duality { io, loops } => {
            run_duality(io, loops, pairs, idle_socks, warmup, window)?
        }
        PipeRuntime::Tokio => run_tokio(pairs, idle_socks, warmup, window)?,
        PipeRuntime::OsThreads => run_threads(pairs, idle_socks, warmup, window)?,
    };
    anyhow::ensure!(
        !FAILED.load(Relaxed),
        "a pair's connection failed during the run"
    );
    Ok(PipeRow {
        runtime: runtime.to_string(),
        idle,
        held: m.held,
        mb_per_sec: m.bytes as f64 / m.elapsed.as_secs_f64().max(1e-9) / 1e6,
        vs_idle_free: None,
        rss_base_mib: m.rss_base as f64 / MIB,
        rss_idle_mib: m.rss_idle as f64 / MIB,
        bytes_per_idle: bytes_per_conn(m.rss_idle, m.rss_base, m.held),
    })
}

/// The main thread's part, the same for every runtime: read RSS, start
/// the idle waiters (`start_idle` returns how many started), wait until
/// they all wait, read RSS again, then start the pairs, let them warm up
/// and count their bytes over `window`. The idle ones come first so that
/// nothing else changes the process's memory between the two readings,
/// and so that starting thousands of OS threads does not compete with 256
/// busy ones for the cores.
fn observe(
    warmup: Duration,
    window: Duration,
    start_idle: impl FnOnce() -> u64,
    start_pairs: impl FnOnce() -> io::Result<()>,
) -> anyhow::Result<Measured> {
    let rss_base = crate::proc::rss_bytes()?;
    let held = start_idle();
    let until = Instant::now() + Duration::from_secs(120);
    while IDLE_WAITING.load(Relaxed) < held {
        anyhow::ensure!(
            Instant::now() < until,
            "only {} of {held} idle tasks started",
            IDLE_WAITING.load(Relaxed)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // The last ones counted themselves just before their first wait.
    std::thread::sleep(Duration::from_millis(20));
    let rss_idle = crate::proc::rss_bytes()?;
    start_pairs()?;
    std::thread::sleep(warmup);
    let b0 = BYTES.load(Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let bytes = BYTES.load(Relaxed) - b0;
    Ok(Measured {
        held,
        rss_base,
        rss_idle,
        bytes,
        elapsed: t0.elapsed(),
    })
}

/// The two operations a pair needs, for the async runtimes.
trait PairIo: Sized {
    /// Takes over a connected std socket on the current runtime.
    fn adopt(s: StdUnixStream) -> io::Result<Self>;
    async fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    async fn write_chunk(&mut self, buf: &[u8]) -> io::Result<()>;
    async fn wait_readable(&mut self) -> io::Result<()>;
}

impl PairIo for duality_rt::net::UnixStream {
    fn adopt(s: StdUnixStream) -> io::Result<Self> {
        duality_rt::net::UnixStream::from_std(s)
    }
    async fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf).await
    }
    async fn write_chunk(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf).await
    }
    async fn wait_readable(&mut self) -> io::Result<()> {
        self.readable().await
    }
}

impl PairIo for tokio::net::UnixStream {
    fn adopt(s: StdUnixStream) -> io::Result<Self> {
        s.set_nonblocking(true)?;
        tokio::net::UnixStream::from_std(s)
    }
    async fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        tokio::io::AsyncReadExt::read(self, buf).await
    }
    async fn write_chunk(&mut self, buf: &[u8]) -> io::Result<()> {
        tokio::io::AsyncWriteExt::write_all(self, buf).await
    }
    async fn wait_readable(&mut self) -> io::Result<()> {
        self.readable().await
    }
}

/// One side of a pair: `first` sends first. Each whole message received
/// counts in [`BYTES`].
async fn active<S: PairIo>(s: StdUnixStream, first: bool) {
    let r: io::Result<()> = async {
        let mut s = S::adopt(s)?;
        let out = [0x5a_u8; CHUNK];
        let mut buf = [0u8; CHUNK];
        if first {
            send_async(&mut s, &out).await?;
        }
        loop {
            let mut got = 0;
            while got < MESSAGE {
                let want = CHUNK.min(MESSAGE - got);
                match s.read_some(&mut buf[..want]).await? {
                    0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                    n => got += n,
                }
            }
            BYTES.fetch_add(MESSAGE as u64, Relaxed);
            send_async(&mut s, &out).await?;
        }
    }
    .await;
    if let Err(e) = r {
        duality_rt::say!("pair failed: {e}");
        FAILED.store(true, Relaxed);
    }
}

async fn send_async<S: PairIo>(s: &mut S, chunk: &[u8; CHUNK]) -> io::Result<()> {
    for _ in 0..MESSAGE / CHUNK {
        s.write_chunk(chunk).await?;
    }
    Ok(())
}

/// An idle connection's task: counts itself, then waits for a byte that
/// never comes (no buffer held while it waits, as a server's idle
/// connection would).
async fn idle_task<S: PairIo>(s: StdUnixStream) {
    let Ok(mut s) = S::adopt(s) else {
        return;
    };
    IDLE_WAITING.fetch_add(1, Relaxed);
    let _ = s.wait_readable().await;
}

fn run_duality(
    io: duality_rt::IoBackend,
    loops: usize,
    pairs: Vec<(StdUnixStream, StdUnixStream)>,
    idle: Vec<StdUnixStream>,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Measured> {
    let threads: Vec<duality_rt::LoopThread> = (0..loops)
        .map(|i| {
            duality_rt::LoopThread::spawn(duality_rt::LoopConfig {
                name: Some(format!("idle-loop-{i}")),
                io,
                long_poll_threshold: None,
                ..Default::default()
            })
        })
        .collect::<io::Result<_>>()?;
    let handles: Vec<duality_rt::LoopHandle> = threads.iter().map(|t| t.handle()).collect();
    type S = duality_rt::net::UnixStream;
    // Connections dealt to the loops in turn, as symped's acceptor does.
    let next = std::cell::Cell::new(0);
    let place = || {
        let i = next.replace(next.get() + 1);
        handles[i % handles.len()]
    };
    let m = observe(
        warmup,
        window,
        || {
            let n = idle.len() as u64;
            for s in idle {
                drop(place().spawn(idle_task::<S>(s)));
            }
            n
        },
        || {
            for (a, b) in pairs {
                drop(place().spawn(active::<S>(a, true)));
                drop(place().spawn(active::<S>(b, false)));
            }
            Ok(())
        },
    )?;
    // The process exits once the row is printed: stopping the loops (and
    // cancelling every task one by one) would only cost time.
    std::mem::forget(threads);
    Ok(m)
}

fn run_tokio(
    pairs: Vec<(StdUnixStream, StdUnixStream)>,
    idle: Vec<StdUnixStream>,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Measured> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = rt.handle().clone();
    type S = tokio::net::UnixStream;
    // The runtime's one thread; it runs until the process exits.
    std::thread::Builder::new()
        .name("idle-tokio".into())
        .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    observe(
        warmup,
        window,
        || {
            let n = idle.len() as u64;
            for s in idle {
                drop(handle.spawn(idle_task::<S>(s)));
            }
            n
        },
        || {
            for (a, b) in pairs {
                drop(handle.spawn(active::<S>(a, true)));
                drop(handle.spawn(active::<S>(b, false)));
            }
            Ok(())
        },
    )
}

fn run_threads(
    pairs: Vec<(StdUnixStream, StdUnixStream)>,
    idle: Vec<StdUnixStream>,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Measured> {
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(THREAD_STACK)
            .spawn(f)
    };
    let start_pairs = || {
        for (a, b) in pairs {
            spawn("ping", Box::new(move || active_blocking(a, true)))?;
            spawn("pong", Box::new(move || active_blocking(b, false)))?;
        }
        Ok(())
    };
    let start_idle = || {
        let total = idle.len();
        let mut started = 0;
        for s in idle {
            let r = spawn(
                "idle",
                Box::new(move || {
                    IDLE_WAITING.fetch_add(1, Relaxed);
                    let mut b = [0u8; 64];
                    let _ = (&s).read(&mut b);
                }),
            );
            match r {
                Ok(_) => started += 1,
                // Where the thread count binds: the row says how many ran.
                Err(e) => {
                    duality_rt::say!("OS thread {} of {total} idle ones: {e}", started + 1);
                    break;
                }
            }
        }
        started
    };
    observe(warmup, window, start_idle, start_pairs)
}

/// A pair's side on an OS thread: blocking reads and writes.
fn active_blocking(s: StdUnixStream, first: bool) {
    let r: io::Result<()> = (|| {
        let out = [0x5a_u8; CHUNK];
        let mut buf = [0u8; CHUNK];
        let send = |mut s: &StdUnixStream| -> io::Result<()> {
            for _ in 0..MESSAGE / CHUNK {
                s.write_all(&out)?;
            }
            Ok(())
        };
        if first {
            send(&s)?;
        }
        loop {
            let mut got = 0;
            while got < MESSAGE {
                let want = CHUNK.min(MESSAGE - got);
                match (&s).read(&mut buf[..want])? {
                    0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                    n => got += n,
                }
            }
            BYTES.fetch_add(MESSAGE as u64, Relaxed);
            send(&s)?;
        }
    })();
    if let Err(e) = r {
        duality_rt::say!("pair failed: {e}");
        FAILED.store(true, Relaxed);
    }
}

/// Runs `cmd` and returns its stdout, killing it by PID after `within`.
fn output_within(mut cmd: Command, within: Duration) -> anyhow::Result<String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_unless_interrupted()?;
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let until = Instant::now() + within;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (out, err) = (
        out_t.join().unwrap_or_default(),
        err_t.join().unwrap_or_default(),
    );
    match status {
        Some(st) if st.success() => Ok(out),
        Some(st) => anyhow::bail!("{st}: {}", err.trim()),
        None => anyhow::bail!("killed after {within:?}: {}", err.trim()),
    }
}

pub(super) fn pipe_child(plan: &Plan, rt: &str, idle: u64) -> anyhow::Result<PipeRow> {
    let mut cmd = Command::new(plan.exe);
    cmd.args(["bench", "idle", "--child", rt, "--child-idle"])
        .arg(idle.to_string())
        .arg("--pairs")
        .arg(plan.pairs.to_string())
        .arg("--warmup")
        .arg(plan.warmup.as_secs_f64().to_string())
        .arg("--seconds")
        .arg(plan.window.as_secs_f64().to_string());
    let out = output_within(cmd, plan.warmup + plan.window + Duration::from_secs(180))?;
    serde_json::from_str(out.trim())
        .map_err(|e| anyhow::anyhow!("bad output from the {rt} child: {e}: {out}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_parse() {
        assert_eq!(
            "duality-loops:3".parse::<PipeRuntime>(),
            Ok(PipeRuntime::Duality {
                io: duality_rt::IoBackend::Epoll,
                loops: 3
            })
        );
        for rt in RUNTIMES {
            assert!(rt.parse::<PipeRuntime>().is_ok(), "{rt}");
        }
        assert!("duality-loops:0".parse::<PipeRuntime>().is_err());
        assert!("nope".parse::<PipeRuntime>().is_err());
    }
}
