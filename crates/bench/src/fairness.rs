//! `duality bench fairness`: how long a newcomer waits for its first answer
//! while other clients flood the server with pipelined requests.
//!
//! ```text
//!  flooders ×F ══ pipelined requests, answers read and dropped ══▶ server
//!  newcomer   ── connect, one request, first answer ─────────────▶ (timed)
//! ```
//!
//! A loop that lets one always-ready connection run until it has nothing
//! left to do keeps a newcomer waiting for seconds; memcached and nginx
//! answer it in milliseconds. Per server: F flooding connections (TCP,
//! loopback) pipeline `get`s (kv) or `GET`s (http) without pause; after a
//! warm-up, `samples` newcomers connect one after another, 10 ms apart, each
//! sends one request and the time from `connect` to its whole answer is
//! taken. The table gives the median, p90 and max of those times. Servers
//! take turns, each its own process, stopped by its PID.

use crate::http;
use crate::servers::{ServerKind as KvServer, ServerProcess, DEFAULT_MAX_CONNS};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// One server's figures.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FairnessRow {
    /// `kv` or `http`.
    pub service: String,
    /// The server (`duality sped`, `memcached -t 2`, `nginx-2w`, …).
    pub server: String,
    /// Flooding connections.
    pub floods: usize,
    /// Newcomers timed.
    pub samples: usize,
    /// Median time to the first answer, milliseconds.
    pub p50_ms: f64,
    /// 90th percentile, milliseconds.
    pub p90_ms: f64,
    /// Longest, milliseconds.
    pub max_ms: f64,
    /// Newcomers that got no answer within the deadline (counted, not timed).
    pub failed: usize,
}

/// The requests of one service.
pub struct Probe {
    /// What a flooder sends again and again (many pipelined requests).
    pub flood: Vec<u8>,
    /// A newcomer's one request.
    pub request: Vec<u8>,
    /// The answer is whole once the bytes read end with this.
    pub answer_ends: Vec<u8>,
}

impl Probe {
    /// The cache: floods of `get`, a newcomer's `version`.
    pub fn kv() -> Probe {
        Probe {
            flood: b"get fairness:key\r\n".repeat(1024),
            request: b"version\r\n".to_vec(),
            answer_ends: b"\r\n".to_vec(),
        }
    }

    /// The web server: floods of `GET /hello.txt`, a newcomer's same request.
    pub fn http() -> Probe {
        let req = b"GET /hello.txt HTTP/1.1\r\nHost: bench\r\n\r\n".to_vec();
        Probe {
            flood: req.repeat(256),
            request: req,
            answer_ends: HELLO.to_vec(),
        }
    }
}

/// The body of the web server's probe file.
pub const HELLO: &[u8] = b"hello, fairness\n";

/// Percentile `p` (0..=1) of sorted `v`, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarizes newcomer times (seconds) into a row.
pub fn row(
    service: &str,
    server: &str,
    floods: usize,
    times: &[Duration],
    failed: usize,
) -> FairnessRow {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    FairnessRow {
        service: service.into(),
        server: server.into(),
        floods,
        samples: times.len() + failed,
        p50_ms: percentile(&ms, 0.5),
        p90_ms: percentile(&ms, 0.9),
        max_ms: ms.last().copied().unwrap_or(f64::NAN),
        failed,
    }
}

/// Time from connect to the whole first answer; `None` past `deadline`.
fn first_answer(addr: SocketAddr, probe: &Probe, deadline: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, deadline).ok()?;
    s.set_read_timeout(Some(deadline)).ok()?;
    s.write_all(&probe.request).ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(&probe.answer_ends) {
        match s.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
        if t0.elapsed() > deadline {
            return None;
        }
    }
    Some(t0.elapsed())
}

/// Floods `addr` with `floods` clients and times `samples` newcomers.
pub fn measure(
    addr: SocketAddr,
    probe: &Probe,
    floods: usize,
    samples: usize,
    warmup: Duration,
) -> (Vec<Duration>, usize) {
    duality_models::flood::while_flooded(addr, floods, &probe.flood, || {
        std::thread::sleep(warmup);
        let mut times = Vec::new();
        let mut failed = 0;
        for _ in 0..samples {
            match first_answer(addr, probe, Duration::from_secs(10)) {
                Some(t) => times.push(t),
                None => failed += 1,
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (times, failed)
    })
}

/// One run's settings.
pub struct Plan<'a> {
    /// The `duality` executable.
    pub exe: &'a Path,
    /// Models to measure.
    pub models: Vec<String>,
    /// Services: `kv`, `http` or both.
    pub services: Vec<String>,
    /// Flooding connections.
    pub floods: usize,
    /// Newcomers per server.
    pub samples: usize,
    /// Flooding before the first newcomer.
    pub warmup: Duration,
}

/// What [`run`] measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// A row per server measured.
    pub rows: Vec<FairnessRow>,
    /// Peers (memcached, nginx) that failed to start, each with why: left
    /// out, the others measured.
    pub failed: Vec<anyhow::Error>,
}

/// Runs the experiment; `tick` is called after each server. A peer that
/// fails to start is left out (named in [`Outcome::failed`]); duality
/// failing ends the run.
pub fn run(plan: &Plan, tick: &mut dyn FnMut(&FairnessRow)) -> anyhow::Result<Outcome> {
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    let mut push = |r: FairnessRow, rows: &mut Vec<FairnessRow>| {
        tick(&r);
        rows.push(r);
    };
    if plan.services.iter().any(|s| s == "kv") {
        let probe = Probe::kv();
        let mut kinds: Vec<KvServer> = plan
            .models
            .iter()
            .map(|m| KvServer::Duality(m.clone()))
            .collect();
        if crate::servers::memcached_path().is_some() {
            kinds.push(KvServer::Memcached(1));
            kinds.push(KvServer::Memcached(2));
        } else {
            duality_rt::say!(
                "memcached is not installed (apt-get install memcached): its rows are left out"
            );
        }
        for k in kinds {
            let started = ServerProcess::start_on_free_port(plan.exe, &k, 1024, DEFAULT_MAX_CONNS);
            let (server, addr) = match started {
                Err(e) if !matches!(k, KvServer::Duality(_)) => {
                    duality_rt::say!("{e:#}: its row is left out");
                    failed.push(e);
                    continue;
                }
                started => started?,
            };
            let (times, failed) = measure(addr, &probe, plan.floods, plan.samples, plan.warmup);
            drop(server);
            push(
                row("kv", &k.label(), plan.floods, &times, failed),
                &mut rows,
            );
        }
    }
    if plan.services.iter().any(|s| s == "http") {
        let probe = Probe::http();
        let dir = http::TempDir::new("fairness-www")?;
        std::fs::write(dir.0.join("hello.txt"), HELLO)?;
        let fd_limit = http::raise_fd_limit();
        for m in &plan.models {
            let s = http::RunningServer::duality(plan.exe, &dir.0, m, "favor-active", None, 1024)?;
            let (times, failed) = measure(s.addr, &probe, plan.floods, plan.samples, plan.warmup);
            drop(s);
            let label = format!("duality {m}");
            push(row("http", &label, plan.floods, &times, failed), &mut rows);
        }
        // Bounded: an nginx that never answers `nginx -v` hung the run.
        let nginx = http::find_nginx().map(|n| http::nginx_version(&n).map(|_| n));
        match nginx {
            Some(Err(e)) => {
                duality_rt::say!("nginx cannot be used ({e:#}): its rows are left out")
            }
            Some(Ok(nginx)) => {
                for workers in [1, 2] {
                    let s = match http::RunningServer::nginx(&nginx, &dir.0, workers, fd_limit) {
                        Ok(s) => s,
                        Err(e) => {
                            let e = e.context(format!("nginx-{workers}w"));
                            duality_rt::say!("{e:#}: its row is left out");
                            failed.push(e);
                            continue;
                        }
                    };
                    let (times, failed) =
                        measure(s.addr, &probe, plan.floods, plan.samples, plan.warmup);
                    drop(s);
                    let label = format!("nginx-{workers}w");
                    push(row("http", &label, plan.floods, &times, failed), &mut rows);
                }
            }
            None => duality_rt::say!(
                "nginx is not installed (apt-get install nginx-light): its rows are left out"
            ),
        }
    }
    Ok(Outcome { rows, failed })
}

/// The Markdown table.
pub fn table(rows: &[FairnessRow]) -> String {
    let header = [
        "service",
        "server",
        "flooding clients",
        "newcomers",
        "first answer p50 ms",
        "p90 ms",
        "max ms",
        "no answer",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.service.clone(),
                r.server.clone(),
                r.floods.to_string(),
                r.samples.to_string(),
                format!("{:.2}", r.p50_ms),
                format!("{:.2}", r.p90_ms),
                format!("{:.2}", r.max_ms),
                r.failed.to_string(),
            ]
        })
        .collect();
    crate::report::markdown_table(&header, &body)
}

/// The rows as CSV.
pub fn csv(rows: &[FairnessRow]) -> String {
    let mut s = String::from("service,server,floods,samples,p50_ms,p90_ms,max_ms,failed\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{:.3},{:.3},{:.3},{}\n",
            crate::report::csv_field(&r.service),
            crate::report::csv_field(&r.server),
            r.floods,
            r.samples,
            r.p50_ms,
            r.p90_ms,
            r.max_ms,
            r.failed
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(percentile(&v, 0.5), 5.0);
        assert_eq!(percentile(&v, 0.9), 9.0);
        assert_eq!(percentile(&v, 1.0), 10.0);
        assert_eq!(percentile(&v[..1], 0.9), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_row_counts_failures_as_samples_but_does_not_time_them() {
        let times = [3, 1, 2].map(Duration::from_millis);
        let r = row("kv", "x", 4, &times, 1);
        assert_eq!((r.samples, r.failed), (4, 1));
        assert_eq!((r.p50_ms, r.max_ms), (2.0, 3.0));
        assert!(csv(std::slice::from_ref(&r))
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("kv,x,4,4,2.000"));
        assert!(table(&[r]).contains("| kv | x | 4 | 4 | 2.00 |"));
    }
}
