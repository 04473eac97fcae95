//! The Prometheus side of a server's numbers: the text exposition format
//! (version 0.0.4) and a tiny listener that serves it (`--metrics-listen`).
//!
//! ```text
//!  scraper ── GET /metrics ──► metrics thread ── render() ──► loops' published
//!                              (own OS thread,                 copies, merged
//!                               blocking socket)               when read
//! ```
//!
//! The listener runs on its own thread, away from the loops: a scrape never
//! takes a turn from a connection, and a stuck scraper (2 s timeouts) holds
//! only this thread. It answers `GET /metrics` (any query string) and 404 to
//! everything else, one request per connection (HTTP/1.0, `Connection:
//! close`), as the memcached and nginx exporters do.
//!
//! Names are prefixed `duality_`; counters end in `_total`; latencies are
//! histograms in seconds (`_bucket{le=…}`, `_sum`, `_count`).

use crate::server::StatsHandle;
use duality_rt::stats::Latency;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Upper bounds of the latency histograms' buckets, in seconds.
pub const BUCKETS: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A page in the text exposition format, written family by family.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// A counter (`name` must end in `_total`) without labels.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.counters(name, help, &[("", value)]);
    }

    /// A counter family: one sample per label set (`""`: none; else e.g.
    /// `loop="kv-net-0"`).
    pub fn counters(&mut self, name: &str, help: &str, samples: &[(&str, u64)]) {
        debug_assert!(name.ends_with("_total"), "{name}");
        self.header(name, help, "counter");
        for (labels, v) in samples {
            self.sample(name, labels, &v.to_string());
        }
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.gauges(name, help, &[("", value)]);
    }

    /// A gauge family: one sample per label set.
    pub fn gauges(&mut self, name: &str, help: &str, samples: &[(&str, f64)]) {
        self.header(name, help, "gauge");
        for (labels, v) in samples {
            self.sample(name, labels, &v.to_string());
        }
    }

    /// A latency histogram family in seconds: one series per label set.
    pub fn histograms(&mut self, name: &str, help: &str, series: &[(&str, &Latency)]) {
        self.header(name, help, "histogram");
        for (labels, l) in series {
            let sep = if labels.is_empty() { "" } else { "," };
            for b in BUCKETS {
                let le = format!("{labels}{sep}le=\"{b}\"");
                let n = l.count_at_most((b * 1e9) as u64);
                self.sample(&format!("{name}_bucket"), &le, &n.to_string());
            }
            let le = format!("{labels}{sep}le=\"+Inf\"");
            self.sample(&format!("{name}_bucket"), &le, &l.count().to_string());
            let sum = l.sum_ns() as f64 / 1e9;
            self.sample(&format!("{name}_sum"), labels, &sum.to_string());
            self.sample(&format!("{name}_count"), labels, &l.count().to_string());
        }
    }

    fn sample(&mut self, name: &str, labels: &str, value: &str) {
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {value}");
        } else {
            let _ = writeln!(self.out, "{name}{{{labels}}} {value}");
        }
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Appends what every server on the models has: connections, bytes, the
/// per-request metrics merged over its loops, and each loop's poll-time
/// histogram and long polls.
pub fn server_metrics(stats: &StatsHandle, e: &mut Exposition) {
    let st = stats.stats();
    let (read, written) = stats.bytes();
    e.gauge(
        "duality_connections",
        "Connections open now.",
        st.curr_connections as f64,
    );
    e.counter(
        "duality_connections_accepted_total",
        "Connections accepted.",
        st.total_connections,
    );
    e.counter(
        "duality_connections_rejected_total",
        "Connections refused by the connection limit.",
        st.rejected_connections,
    );
    e.counter("duality_read_bytes_total", "Bytes read from clients.", read);
    e.counter(
        "duality_written_bytes_total",
        "Bytes written to clients.",
        written,
    );
    let m = stats.request_metrics();
    e.counter(
        "duality_connection_yields_total",
        "Times a connection gave its loop to others with requests still to serve, its batch spent (memcached's conn_yields).",
        m.yields,
    );
    e.histograms(
        "duality_request_loop_hold_seconds",
        "Per request: the longest time one poll of its loop spent serving it, up to its response's first write.",
        &[("", &m.loop_hold)],
    );
    e.histograms(
        "duality_request_ttfb_seconds",
        "Per request: time from its bytes arriving complete to its response's first byte written.",
        &[("", &m.ttfb)],
    );
    e.histograms(
        "duality_accept_latency_seconds",
        "Per connection: time from the acceptor taking it to its first read armed on its loop.",
        &[("", &m.accept_latency)],
    );
    let loops: Vec<(String, duality_rt::LoopHandle)> = stats
        .loops()
        .into_iter()
        .map(|(role, h)| {
            let name = h.snapshot().name;
            (format!("loop=\"{}\",role=\"{role}\"", escape(&name)), h)
        })
        .collect();
    let polls: Vec<Latency> = loops.iter().map(|(_, h)| h.poll_latency()).collect();
    let series: Vec<(&str, &Latency)> = loops
        .iter()
        .zip(&polls)
        .map(|((l, _), p)| (l.as_str(), p))
        .collect();
    e.histograms(
        "duality_loop_poll_seconds",
        "Per loop: how long single task polls held it (the sum is estimated from the histogram).",
        &series,
    );
    let long: Vec<(&str, u64)> = loops
        .iter()
        .map(|(l, h)| (l.as_str(), h.snapshot().long_polls))
        .collect();
    e.counters(
        "duality_loop_long_polls_total",
        "Per loop: polls longer than the long-poll warning threshold.",
        &long,
    );
    pool_metrics(e);
}

/// The runtime's process-wide pools that have been used (blocking calls;
/// offloaded CPU work): whether they keep up.
fn pool_metrics(e: &mut Exposition) {
    let pools: Vec<(String, duality_rt::pool::PoolStats)> = duality_rt::pool::started_pools()
        .map(|p| {
            let s = p.stats();
            (format!("pool=\"{}\"", escape(&s.name)), s)
        })
        .collect();
    if pools.is_empty() {
        return;
    }
    let gauge = |f: fn(&duality_rt::pool::PoolStats) -> usize| -> Vec<(&str, f64)> {
        pools
            .iter()
            .map(|(l, s)| (l.as_str(), f(s) as f64))
            .collect()
    };
    let counter = |f: fn(&duality_rt::pool::PoolStats) -> u64| -> Vec<(&str, u64)> {
        pools.iter().map(|(l, s)| (l.as_str(), f(s))).collect()
    };
    e.gauges(
        "duality_pool_threads",
        "Per pool: threads alive (running a job or idle).",
        &gauge(|s| s.threads),
    );
    e.gauges(
        "duality_pool_queued_jobs",
        "Per pool: jobs waiting for a thread.",
        &gauge(|s| s.queued),
    );
    e.counters(
        "duality_pool_jobs_completed_total",
        "Per pool: jobs run to the end.",
        &counter(|s| s.completed),
    );
    e.counters(
        "duality_pool_raises_total",
        "Per pool: times its threads left the background class because a job waited or ran there too long.",
        &counter(|s| s.raises),
    );
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running metrics listener; stops (after the request in progress) on drop.
pub struct MetricsListener {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Render = dyn Fn() -> String + Send + Sync;

impl MetricsListener {
    /// Binds `addr` (port 0 picks one: see [`addr`](Self::addr)) and serves
    /// `render()`'s page at `/metrics` from its own thread.
    pub fn start(
        addr: SocketAddr,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> io::Result<MetricsListener> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot listen on {addr} for metrics: {e}"),
            )
        })?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let render: Arc<Render> = Arc::new(render);
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || {
                    for s in listener.incoming() {
                        if stop.load(SeqCst) {
                            return;
                        }
                        match s {
                            Ok(s) => {
                                if let Err(e) = answer(s, &*render) {
                                    tracing::debug!("metrics request: {e}");
                                }
                            }
                            // Out of descriptors, most likely: do not spin.
                            Err(e) => {
                                tracing::debug!("metrics accept: {e}");
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    }
                })?
        };
        Ok(MetricsListener {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsListener {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;

/// Reads one request head and answers it.
fn answer(mut s: TcpStream, render: &Render) -> io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    let target = loop {
        if filled == buf.len() {
            break None;
        }
        let n = s.read(&mut buf[filled..])?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        match route(&buf[..filled]) {
            Ok(Some(ok)) => break Some(ok),
            Ok(None) => continue,
            Err(()) => break None,
        }
    };
    let response = match target {
        Some(true) => {
            let body = render();
            format!(
                "HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        _ => "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n".to_owned(),
    };
    s.write_all(response.as_bytes())
}

/// `Ok(Some(true))`: a complete `GET /metrics`; `Ok(Some(false))`: a
/// complete head asking for something else; `Ok(None)`: incomplete;
/// `Err`: not HTTP.
fn route(head: &[u8]) -> Result<Option<bool>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {
            let path = req.path.unwrap_or("");
            let path = path.split('?').next().unwrap_or("");
            Ok(Some(req.method == Some("GET") && path == "/metrics"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_used_pool_reports_its_jobs() {
        duality_rt::block_on(duality_rt::spawn_blocking(|| ())).unwrap();
        let mut e = Exposition::new();
        pool_metrics(&mut e);
        let page = e.finish();
        let done = page
            .lines()
            .find_map(|l| {
                l.strip_prefix("duality_pool_jobs_completed_total{pool=\"duality-blocking\"} ")
            })
            .unwrap_or_else(|| panic!("{page}"));
        assert!(done.parse::<u64>().unwrap() >= 1, "{page}");
        for family in [
            "# TYPE duality_pool_threads gauge",
            "# TYPE duality_pool_queued_jobs gauge",
            "# TYPE duality_pool_raises_total counter",
        ] {
            assert!(page.contains(family), "{family}: {page}");
        }
    }

    #[test]
    fn histograms_are_cumulative_and_end_in_inf_sum_and_count() {
        let mut l = Latency::new();
        l.record_n(20_000, 2); // 20 µs
        l.record_n(3_000_000, 1); // 3 ms
        let mut e = Exposition::new();
        e.histograms("duality_x_seconds", "X.", &[("loop=\"a\"", &l)]);
        e.counter("duality_y_total", "Y.", 7);
        let page = e.finish();
        assert!(
            page.starts_with("# HELP duality_x_seconds X.\n# TYPE duality_x_seconds histogram\n")
        );
        assert!(
            page.contains("duality_x_seconds_bucket{loop=\"a\",le=\"0.00001\"} 0\n"),
            "{page}"
        );
        assert!(
            page.contains("duality_x_seconds_bucket{loop=\"a\",le=\"0.000025\"} 2\n"),
            "{page}"
        );
        assert!(
            page.contains("duality_x_seconds_bucket{loop=\"a\",le=\"0.0025\"} 2\n"),
            "{page}"
        );
        assert!(
            page.contains("duality_x_seconds_bucket{loop=\"a\",le=\"0.005\"} 3\n"),
            "{page}"
        );
        assert!(
            page.contains("duality_x_seconds_bucket{loop=\"a\",le=\"+Inf\"} 3\n"),
            "{page}"
        );
        assert!(
            page.contains("duality_x_seconds_sum{loop=\"a\"} 0.00304\n"),
            "{page}"
        );
        assert!(
            page.contains("duality_x_seconds_count{loop=\"a\"} 3\n"),
            "{page}"
        );
        assert!(
            page.contains("# TYPE duality_y_total counter\nduality_y_total 7\n"),
            "{page}"
        );
    }

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(Some(true))
        );
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Ok(Some(true)));
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost"), Ok(None));
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Ok(Some(false)));
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Ok(Some(false)));
        assert_eq!(route(b"\x00\x01 nonsense\r\n\r\n"), Err(()));
    }

    #[test]
    fn the_listener_serves_the_page_and_404_otherwise() {
        let l = MetricsListener::start("127.0.0.1:0".parse().unwrap(), || "a_total 1\n".into())
            .unwrap();
        let get = |req: &str| {
            let mut s = TcpStream::connect(l.addr()).unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut r = String::new();
            s.read_to_string(&mut r).unwrap();
            r
        };
        let ok = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.0 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains(CONTENT_TYPE) && ok.ends_with("\r\n\r\na_total 1\n"),
            "{ok}"
        );
        assert!(get("GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.0 404 "));
        // A second listener on the same address: a clear error.
        let e = MetricsListener::start(l.addr(), String::new).err().unwrap();
        assert!(e.to_string().contains("for metrics"), "{e}");
    }
}
