//! `duality bench models --service echo`: the test service under every
//! threading model, requests/s and context switches per request, at several
//! connection counts (seed 001's experiment, first version).
//!
//! The server runs as a separate process (`duality internal echo-server`), so
//! its context switches are counted alone: summed over every thread in
//! `/proc/<pid>/task/*/status`. The client is closed-loop, one request in
//! flight per connection, over a Unix socket (as in the paper), on one duality
//! loop in this process (or several, `--client-threads`, where one client
//! thread cannot keep a large machine's server busy).
//!
//! On a small shared machine one measurement moves by ±30% from run to run
//! (thread placement, other tenants), so the experiment runs in rounds: each
//! round measures every model at every connection count, models interleaved,
//! and a point reports the median over rounds. Its ratio to `symped` is the
//! median of per-round ratios: two servers measured seconds apart see the
//! same machine.

use crate::interrupt::SpawnUnlessInterrupted;
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
    /// Requests each connection keeps in flight (written together, one
    /// pipelined batch at a time).
    #[serde(default = "one")]
    pub pipeline: usize,
    /// Completed requests per second.
    pub requests_per_sec: f64,
    /// Server context switches (voluntary + involuntary) per request.
    pub ctx_switches_per_request: f64,
    /// Rounds measured (the figures above are medians over them).
    #[serde(default)]
    pub rounds: usize,
    /// Lowest and highest requests/s over the rounds.
    #[serde(default)]
    pub requests_per_sec_min: f64,
    /// See `requests_per_sec_min`.
    #[serde(default)]
    pub requests_per_sec_max: f64,
    /// Median over rounds of requests/s divided by `symped`'s in the same
    /// round (absent when no `symped` model ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_symped: Option<f64>,
    /// The same against `sped` (absent when `sped` did not run): the
    /// hand-off models' yardstick with pipelined requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_sped: Option<f64>,
}

fn one() -> usize {
    1
}

/// Context switches of every thread of process `pid`.
pub use crate::proc::ctx_switches_of as process_ctx_switches;

/// A server child process, stopped (SIGTERM, then waited for) on drop.
pub struct ServerProcess {
    child: Child,
    /// Where it listens.
    pub socket: PathBuf,
    /// Removes the socket when it stops, or when the run is interrupted.
    _socket_file: crate::interrupt::TempPath,
}

impl ServerProcess {
    /// Starts `exe args…` and waits for it to print a line starting with `ready`.
    pub fn start(exe: &Path, args: &[String], socket: PathBuf) -> anyhow::Result<ServerProcess> {
        let socket_file = crate::interrupt::TempPath::new(&socket);
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn_unless_interrupted()?;
        let out = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if !line.starts_with("ready") {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("server {args:?} did not start: {line:?}");
        }
        Ok(ServerProcess {
            child,
            socket,
            _socket_file: socket_file,
        })
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

/// One echo connection: writes `depth` requests at once, checks their
/// answers, again until `stop`; counts answered requests in `done`.
async fn echo_conn(
    socket: PathBuf,
    id: u64,
    depth: usize,
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
) {
    use duality_models::echo;
    let Ok(s) = duality_rt::net::UnixStream::connect(&socket).await else {
        errors.fetch_add(1, Relaxed);
        return;
    };
    let depth = depth.max(1);
    let mut req = Vec::with_capacity(echo::FRAME * depth);
    let mut r = vec![0u8; echo::FRAME * depth];
    let mut v = 0u64;
    while !stop.load(Relaxed) {
        req.clear();
        for i in 0..depth as u64 {
            req.extend_from_slice(&echo::request(id, v + i));
        }
        let ok = s.write_all(&req).await.is_ok()
            && s.read_exact(&mut r).await.is_ok()
            && r.chunks_exact(echo::FRAME)
                .zip(v..)
                .all(|(f, x)| echo::response(f) == (id, echo::answer(x)));
        if !ok {
            errors.fetch_add(1, Relaxed);
            return;
        }
        v += depth as u64;
        done.fetch_add(depth as u64, Relaxed);
    }
}

/// Closed-loop load: `conns` connections over `threads` client threads
/// (each a duality loop with an even share), each connection writing
/// `depth` pipelined requests at once and reading their answers before the
/// next batch, for `warmup + measure`; returns requests completed during
/// `measure` and the time it really took, and calls `mark` at the start and
/// end of `measure`.
pub fn closed_loop_echo(
    socket: &Path,
    conns: usize,
    threads: usize,
    depth: usize,
    warmup: Duration,
    measure: Duration,
    mark: &mut dyn FnMut(),
) -> anyhow::Result<(u64, Duration)> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let threads = threads.clamp(1, conns.max(1));
    // The client's own polls are not the subject: no long-poll warnings.
    let config = duality_rt::LoopConfig {
        long_poll_threshold: None,
        ..Default::default()
    };
    let start_share = |t: usize| {
        let (done, stop, errors, socket) = (
            done.clone(),
            stop.clone(),
            errors.clone(),
            socket.to_path_buf(),
        );
        let ids = crate::loadgen::share(conns, threads, t);
        async move {
            let hs: Vec<_> = ids
                .map(|id| {
                    duality_rt::spawn(echo_conn(
                        socket.clone(),
                        id as u64,
                        depth,
                        done.clone(),
                        stop.clone(),
                        errors.clone(),
                    ))
                })
                .collect();
            for h in hs {
                let _ = h.await;
            }
        }
    };
    let helpers =
        crate::loadgen::ClientThreads::start(threads, "echo-client", &config, start_share, || {
            stop.store(true, Relaxed)
        })?;
    let mut lp = duality_rt::EventLoop::new(config)?;
    let (n, took) = lp.block_on(async {
        let mine = duality_rt::spawn(start_share(0));
        duality_rt::time::sleep(warmup).await;
        mark();
        let d0 = done.load(Relaxed);
        let t0 = Instant::now();
        duality_rt::time::sleep(measure).await;
        let n = done.load(Relaxed) - d0;
        let took = t0.elapsed();
        mark();
        stop.store(true, Relaxed);
        let _ = mine.await;
        (n, took)
    });
    helpers.join()?;
    let e = errors.load(Relaxed);
    anyhow::ensure!(e == 0, "{e} client connections failed");
    Ok((n, took))
}

/// One measured point of one round.
#[derive(Clone, Copy, Debug)]
struct Sample {
    requests_per_sec: f64,
    ctx_switches_per_request: f64,
}

/// How the client loads each point.
#[derive(Clone, Copy, Debug)]
pub struct EchoLoad {
    /// Client threads (each a duality loop with an even share of the
    /// connections).
    pub client_threads: usize,
    /// Requests each connection writes at once.
    pub depth: usize,
    /// Seconds measured per point (after 0.3 s of warm-up).
    pub seconds: f64,
}

/// Measures `model` at every connection count (one server process).
fn measure_model(
    exe: &Path,
    model: &str,
    connections: &[usize],
    load: EchoLoad,
    tag: usize,
) -> anyhow::Result<Vec<Sample>> {
    let socket =
        std::env::temp_dir().join(format!("duality-echo-{}-{tag}.sock", std::process::id()));
    let (model, affinity) = crate::servers::split_affinity(model);
    let (model, handoff) = crate::servers::split_handoff(model);
    let mut args = vec![
        "internal".to_string(),
        "echo-server".to_string(),
        "--model".to_string(),
        model.to_string(),
        "--unix".to_string(),
        socket.display().to_string(),
    ];
    args.extend(handoff.iter().chain(&affinity).map(|s| s.to_string()));
    let server = ServerProcess::start(exe, &args, socket.clone())?;
    let mut out = Vec::new();
    for &c in connections {
        let pid = server.pid();
        let mut marks = Vec::new();
        let (n, took) = closed_loop_echo(
            &socket,
            c,
            load.client_threads,
            load.depth,
            Duration::from_millis(300),
            Duration::from_secs_f64(load.seconds),
            &mut || marks.push(process_ctx_switches(pid)),
        )?;
        let ctx = marks
            .get(1)
            .zip(marks.first())
            .map(|(b, a)| b.saturating_sub(*a))
            .unwrap_or(0);
        out.push(Sample {
            requests_per_sec: n as f64 / took.as_secs_f64(),
            ctx_switches_per_request: if n > 0 { ctx as f64 / n as f64 } else { 0.0 },
        });
    }
    Ok(out)
}

/// Runs the experiment: `rounds` rounds of every model at every connection
/// count; `progress` sees each round's measurement as it is taken.
pub fn run(
    exe: &Path,
    models: &[String],
    connections: &[usize],
    load: EchoLoad,
    rounds: usize,
    progress: &mut dyn FnMut(usize, &EchoRow),
) -> anyhow::Result<Vec<EchoRow>> {
    anyhow::ensure!(rounds >= 1, "at least one round");
    // samples[model][connection index][round]
    let mut samples = vec![vec![Vec::with_capacity(rounds); connections.len()]; models.len()];
    for round in 0..rounds {
        for (m, model) in models.iter().enumerate() {
            let got = measure_model(exe, model, connections, load, round * models.len() + m)?;
            for (i, s) in got.into_iter().enumerate() {
                progress(
                    round,
                    &EchoRow {
                        model: model.clone(),
                        connections: connections[i],
                        pipeline: load.depth,
                        requests_per_sec: s.requests_per_sec,
                        ctx_switches_per_request: s.ctx_switches_per_request,
                        rounds: 1,
                        requests_per_sec_min: s.requests_per_sec,
                        requests_per_sec_max: s.requests_per_sec,
                        vs_symped: None,
                        vs_sped: None,
                    },
                );
                samples[m][i].push(s);
            }
        }
    }
    let mut rows = summarize(models, connections, &samples);
    for r in &mut rows {
        r.pipeline = load.depth;
    }
    Ok(rows)
}

/// Medians over rounds; ratios to the first `symped` and the `sped` model,
/// round by round.
fn summarize(
    models: &[String],
    connections: &[usize],
    samples: &[Vec<Vec<Sample>>],
) -> Vec<EchoRow> {
    let median = |v: Vec<f64>| crate::summary::median(&v);
    let symped = models.iter().position(|m| m.starts_with("symped"));
    let sped = models.iter().position(|m| m == "sped");
    let mut rows = Vec::new();
    for (m, model) in models.iter().enumerate() {
        for (i, &c) in connections.iter().enumerate() {
            let s = &samples[m][i];
            let rps: Vec<f64> = s.iter().map(|x| x.requests_per_sec).collect();
            let vs = |base: Option<usize>| {
                base.map(|b| {
                    median(
                        s.iter()
                            .zip(&samples[b][i])
                            .map(|(x, y)| {
                                x.requests_per_sec / y.requests_per_sec.max(f64::MIN_POSITIVE)
                            })
                            .collect(),
                    )
                })
            };
            rows.push(EchoRow {
                model: model.clone(),
                connections: c,
                pipeline: 1,
                requests_per_sec: median(rps.clone()),
                ctx_switches_per_request: median(
                    s.iter().map(|x| x.ctx_switches_per_request).collect(),
                ),
                rounds: s.len(),
                requests_per_sec_min: rps.iter().copied().fold(f64::INFINITY, f64::min),
                requests_per_sec_max: rps.iter().copied().fold(0.0, f64::max),
                vs_symped: vs(symped),
                vs_sped: vs(sped),
            });
        }
    }
    rows
}

/// The Markdown table: medians, the range over rounds, and each row's
/// median per-round ratios to `symped` and `sped` at the same connection
/// count.
pub fn table(rows: &[EchoRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.model.clone(),
                r.connections.to_string(),
                r.pipeline.to_string(),
                crate::report::thousands(r.requests_per_sec),
                format!(
                    "{} - {}",
                    crate::report::thousands(r.requests_per_sec_min),
                    crate::report::thousands(r.requests_per_sec_max)
                ),
                ratio(r.vs_symped),
                ratio(r.vs_sped),
                format!("{:.3}", r.ctx_switches_per_request),
            ]
        })
        .collect();
    crate::report::markdown_table(
        &[
            "model",
            "connections",
            "pipelined",
            "requests/s (median)",
            "range over rounds",
            "vs symped",
            "vs sped",
            "ctx switches/request",
        ],
        &cells,
    )
}

fn ratio(r: Option<f64>) -> String {
    r.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

/// CSV of the rows (header + one line each).
pub fn csv(rows: &[EchoRow]) -> String {
    let mut s = String::from("model,connections,pipeline,requests_per_sec,requests_per_sec_min,requests_per_sec_max,vs_symped,vs_sped,ctx_switches_per_request,rounds\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{:.1},{:.1},{:.1},{},{},{:.4},{}\n",
            crate::report::csv_field(&r.model),
            r.connections,
            r.pipeline,
            r.requests_per_sec,
            r.requests_per_sec_min,
            r.requests_per_sec_max,
            r.vs_symped.map_or_else(String::new, |v| format!("{v:.4}")),
            r.vs_sped.map_or_else(String::new, |v| format!("{v:.4}")),
            r.ctx_switches_per_request,
            r.rounds
        ));
    }
    s
}

/// Writes `echo.md` (`header`, then the table), `echo.json`, `echo.csv` and
/// `echo.{png,svg}` (median requests/s against connections, one line per
/// model) into `dir`; returns the paths written. A plot that cannot be drawn
/// (no font) is reported, the numbers are written regardless.
pub fn write_results(dir: &Path, rows: &[EchoRow], header: &str) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (name, body) in [
        ("echo.md", format!("{header}\n\n{}", table(rows))),
        ("echo.json", crate::report::json(rows)),
        ("echo.csv", csv(rows)),
    ] {
        let p = dir.join(name);
        crate::report::write(&p, body)?;
        written.push(p);
    }
    let mut series: Vec<crate::plot::Series> = Vec::new();
    for r in rows {
        let point = (r.connections as f64, r.requests_per_sec);
        match series.iter_mut().find(|(n, _)| *n == r.model) {
            Some((_, pts)) => pts.push(point),
            None => series.push((r.model.clone(), vec![point])),
        }
    }
    let pipeline = rows.first().map_or(1, |r| r.pipeline);
    let title = if pipeline > 1 {
        format!("Echo service, {pipeline} requests pipelined per connection")
    } else {
        "Echo service, one request in flight per connection".to_string()
    };
    match crate::plot::line_chart(
        &dir.join("echo"),
        &title,
        "connections",
        "requests/s (median of rounds)",
        &series,
        false,
    ) {
        Ok((png, svg)) => written.extend([png, svg]),
        Err(e) => duality_rt::say!("plot not drawn: {e:#}"),
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rps: f64) -> Sample {
        Sample {
            requests_per_sec: rps,
            ctx_switches_per_request: rps / 1000.0,
        }
    }

    #[test]
    fn medians_and_per_round_ratios() {
        let models = vec!["symped:2".to_string(), "amped:1".to_string()];
        // One connection count, three rounds; the machine was slow in round 2.
        let samples = vec![
            vec![vec![sample(100.0), sample(50.0), sample(110.0)]],
            vec![vec![sample(90.0), sample(50.0), sample(88.0)]],
        ];
        let rows = summarize(&models, &[8], &samples);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].requests_per_sec, 100.0);
        assert_eq!(rows[0].vs_symped, Some(1.0));
        assert_eq!(rows[1].requests_per_sec, 88.0);
        assert_eq!(
            (rows[1].requests_per_sec_min, rows[1].requests_per_sec_max),
            (50.0, 90.0)
        );
        // Per-round ratios 0.9, 1.0, 0.8: median 0.9 (the ratio of medians would be 0.88).
        assert!((rows[1].vs_symped.unwrap() - 0.9).abs() < 1e-9);
        assert_eq!(rows[1].rounds, 3);
        assert_eq!(rows[1].vs_sped, None, "no sped ran");
        let t = table(&rows);
        assert!(
            t.contains("| amped:1 | 8 | 1 | 88 | 50 - 90 | 0.90 | - |"),
            "{t}"
        );
    }

    #[test]
    fn ratios_to_sped_round_by_round() {
        let models = vec!["sped".to_string(), "amped:1/adaptive".to_string()];
        let samples = vec![
            vec![vec![sample(100.0), sample(200.0), sample(100.0)]],
            vec![vec![sample(105.0), sample(180.0), sample(95.0)]],
        ];
        let rows = summarize(&models, &[8], &samples);
        // Per-round 1.05, 0.90, 0.95: median 0.95.
        assert!((rows[1].vs_sped.unwrap() - 0.95).abs() < 1e-9);
        assert_eq!(rows[0].vs_sped, Some(1.0));
        assert!(table(&rows).contains("| amped:1/adaptive | 8 | 1 | 105 | 95 - 180 | - | 0.95 |"));
    }

    #[test]
    fn csv_has_a_line_per_row_and_an_empty_ratio_without_symped() {
        let rows = summarize(
            &["sped".to_string()],
            &[1, 8],
            &[vec![vec![sample(10.0)], vec![sample(20.0)]]],
        );
        let c = csv(&rows);
        assert_eq!(c.lines().count(), 3, "{c}");
        assert!(
            c.contains("\nsped,8,1,20.0,20.0,20.0,,1.0000,0.0200,1\n"),
            "{c}"
        );
    }

    #[test]
    fn no_symped_no_ratio() {
        let rows = summarize(&["sped".to_string()], &[1], &[vec![vec![sample(10.0)]]]);
        assert_eq!(rows[0].vs_symped, None);
        assert!(table(&rows).contains("| sped | 1 | 1 | 10 | 10 - 10 | - | 1.00 |"));
    }
}
