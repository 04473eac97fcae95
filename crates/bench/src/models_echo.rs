//! `duality bench models --service echo`: the test service under every
//! threading model, requests/s and context switches per request, at several
//! connection counts (seed 001's experiment, first version).
//!
//! The server runs as a separate process (`duality internal echo-server`), so
//! its context switches are counted alone: summed over every thread in
//! `/proc/<pid>/task/*/status`. The client is closed-loop, one request in
//! flight per connection, over a Unix socket (as in the paper), on one duality
//! loop in this process.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One measurement.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EchoRow {
    /// The model as `--model` takes it.
    pub model: String,
    /// Concurrent client connections.
    pub connections: usize,
    /// Completed requests per second.
    pub requests_per_sec: f64,
    /// Server context switches (voluntary + involuntary) per request.
    pub ctx_switches_per_request: f64,
}

/// Context switches of every thread of process `pid`.
pub use crate::proc::ctx_switches_of as process_ctx_switches;

/// A server child process, stopped (SIGTERM, then waited for) on drop.
pub struct ServerProcess {
    child: Child,
    /// Where it listens.
    pub socket: PathBuf,
}

impl ServerProcess {
    /// Starts `exe args…` and waits for it to print a line starting with `ready`.
    pub fn start(exe: &Path, args: &[String], socket: PathBuf) -> anyhow::Result<ServerProcess> {
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let out = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if !line.starts_with("ready") {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("server {args:?} did not start: {line:?}");
        }
        Ok(ServerProcess { child, socket })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_file(&self.socket);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Closed-loop load: `conns` connections, one request in flight each, for
/// `warmup + measure`; returns requests completed during `measure` and the
/// time it really took, and calls `mark` at the start and end of `measure`.
pub fn closed_loop_echo(
    socket: &Path,
    conns: usize,
    warmup: Duration,
    measure: Duration,
    mark: &mut dyn FnMut(),
) -> anyhow::Result<(u64, Duration)> {
    use duality_models::echo;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let socket = socket.to_path_buf();
    let mut lp = duality_rt::EventLoop::new(duality_rt::LoopConfig::default())?;
    let (n, took) = lp.block_on(async {
        let mut hs = Vec::new();
        for id in 0..conns as u64 {
            let (done, stop, errors, socket) =
                (done.clone(), stop.clone(), errors.clone(), socket.clone());
            hs.push(duality_rt::spawn(async move {
                let Ok(s) = duality_rt::net::UnixStream::connect(&socket).await else {
                    errors.fetch_add(1, Relaxed);
                    return;
                };
                let mut r = [0u8; echo::FRAME];
                let mut v = 0u64;
                while !stop.load(Relaxed) {
                    v += 1;
                    let ok = s.write_all(&echo::request(id, v)).await.is_ok()
                        && s.read_exact(&mut r).await.is_ok()
                        && echo::response(&r) == (id, echo::answer(v));
                    if !ok {
                        errors.fetch_add(1, Relaxed);
                        return;
                    }
                    done.fetch_add(1, Relaxed);
                }
            }));
        }
        duality_rt::time::sleep(warmup).await;
        mark();
        let d0 = done.load(Relaxed);
        let t0 = Instant::now();
        duality_rt::time::sleep(measure).await;
        let n = done.load(Relaxed) - d0;
        let took = t0.elapsed();
        mark();
        stop.store(true, Relaxed);
        for h in hs {
            let _ = h.await;
        }
        (n, took)
    });
    let e = errors.load(Relaxed);
    anyhow::ensure!(e == 0, "{e} client connections failed");
    Ok((n, took))
}

/// Runs the experiment.
pub fn run(
    exe: &Path,
    models: &[String],
    connections: &[usize],
    seconds: f64,
    progress: &mut dyn FnMut(&EchoRow),
) -> anyhow::Result<Vec<EchoRow>> {
    let mut rows = Vec::new();
    for model in models {
        let socket = std::env::temp_dir().join(format!(
            "duality-echo-{}-{}.sock",
            std::process::id(),
            rows.len()
        ));
        let args = vec![
            "internal".to_string(),
            "echo-server".to_string(),
            "--model".to_string(),
            model.clone(),
            "--unix".to_string(),
            socket.display().to_string(),
        ];
        let server = ServerProcess::start(exe, &args, socket.clone())?;
        for &c in connections {
            let pid = server.pid();
            let mut marks = Vec::new();
            let (n, took) = closed_loop_echo(
                &socket,
                c,
                Duration::from_millis(300),
                Duration::from_secs_f64(seconds),
                &mut || marks.push(process_ctx_switches(pid)),
            )?;
            let ctx = marks
                .get(1)
                .zip(marks.first())
                .map(|(b, a)| b.saturating_sub(*a))
                .unwrap_or(0);
            let row = EchoRow {
                model: model.clone(),
                connections: c,
                requests_per_sec: n as f64 / took.as_secs_f64(),
                ctx_switches_per_request: if n > 0 { ctx as f64 / n as f64 } else { 0.0 },
            };
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The Markdown table, with each row's ratio to `symped` at the same
/// connection count.
pub fn table(rows: &[EchoRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let base = rows
                .iter()
                .find(|b| b.model.starts_with("symped") && b.connections == r.connections);
            vec![
                r.model.clone(),
                r.connections.to_string(),
                crate::report::thousands(r.requests_per_sec),
                base.map(|b| format!("{:.2}", r.requests_per_sec / b.requests_per_sec))
                    .unwrap_or_else(|| "-".into()),
                format!("{:.3}", r.ctx_switches_per_request),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "model",
            "connections",
            "requests/s",
            "vs symped",
            "ctx switches/request",
        ],
        &cells,
    )
}
