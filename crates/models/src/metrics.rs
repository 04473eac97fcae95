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
//! takes a turn from a connection. Each connection is answered on a thread
//! of its own (at most [`MAX_CLIENTS`] at once; past that, 503 at once), and
//! gets [`DEADLINE`] in all to send its request and take the answer, so a
//! client that trickles or stalls holds one thread for that long and never
//! keeps a scrape waiting, as each connection gets a goroutine in the
//! memcached and nginx exporters. It answers `GET /metrics` (any query
//! string; `HEAD` too), 405 to another method there, 404 to another path,
//! 400 to what is not HTTP and 431 to a head over 8 KiB or 256 fields, one
//! request per connection (HTTP/1.0, `Connection: close`: a scrape every
//! few seconds costs a connection, which keeps a stalled scraper from
//! holding a thread between scrapes).
//!
//! Names are prefixed `duality_`; counters end in `_total`; latencies are
//! histograms in seconds (`_bucket{le=…}`, `_sum`, `_count`).

use crate::server::StatsHandle;
use duality_rt::stats::Latency;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        // The format's escapes in a HELP text: backslash and line feed.
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
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
    e.counter(
        "duality_connections_reclaimed_total",
        "Idle connections (between requests) closed to make room for new ones at the connection limit (the web server's; nginx's reusable connections).",
        st.reclaimed_connections,
    );
    e.counter("duality_read_bytes_total", "Bytes read from clients.", read);
    e.counter(
        "duality_written_bytes_total",
        "Bytes written to clients from memory (file bodies the web server sends from the file are counted in duality_http_sendfile_bytes_total instead).",
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
        .map(|(l, h)| (l.as_str(), h.long_polls()))
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
        let clients = Arc::new(AtomicUsize::new(0));
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
                            Ok(s) => serve(s, &render, &clients),
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
/// Connections answered at once; past that, 503 without reading.
pub const MAX_CLIENTS: usize = 16;
/// Time a connection gets in all to send its request and take the answer.
pub const DEADLINE: Duration = Duration::from_secs(2);

/// Answers `s` on a thread of its own, or 503 when [`MAX_CLIENTS`] are
/// being answered (or no thread can be made).
fn serve(mut s: TcpStream, render: &Arc<Render>, clients: &Arc<AtomicUsize>) {
    // Never waits: the accept thread refuses a flood one by one.
    let refuse = |s: &mut TcpStream| {
        if s.set_nonblocking(true).is_ok() {
            let _ = s.write_all(&reply(Route::Busy, false, &|| String::new()));
            close_quietly(s);
        }
    };
    if clients.fetch_add(1, SeqCst) >= MAX_CLIENTS {
        clients.fetch_sub(1, SeqCst);
        refuse(&mut s);
        return;
    }
    let (render, done) = (render.clone(), clients.clone());
    let Ok(twin) = s.try_clone() else {
        clients.fetch_sub(1, SeqCst);
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("metrics-client".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            if let Err(e) = answer(twin, &*render) {
                tracing::debug!("metrics request: {e}");
            }
            done.fetch_sub(1, SeqCst);
        });
    if spawned.is_err() {
        clients.fetch_sub(1, SeqCst);
        refuse(&mut s);
    }
}

/// What a request head asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// `GET` or `HEAD /metrics`.
    Metrics,
    /// Another method on `/metrics`: 405.
    Method,
    /// Another path: 404.
    NotFound,
    /// Not HTTP: 400.
    Bad,
    /// A head over [`MAX_HEAD`] or 256 fields: 431.
    TooLarge,
    /// Too many clients at once: 503.
    Busy,
}

/// Reads one request head, within [`DEADLINE`] in all, and answers it.
fn answer(mut s: TcpStream, render: &Render) -> io::Result<()> {
    let until = Instant::now() + DEADLINE;
    let left = || {
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "request deadline"))
    };
    let mut buf = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    let route = loop {
        if filled == buf.len() {
            break Route::TooLarge;
        }
        s.set_read_timeout(Some(left()?))?;
        let n = s.read(&mut buf[filled..])?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        if let Some(r) = route(&buf[..filled]) {
            break r;
        }
    };
    s.set_write_timeout(Some(left()?))?;
    s.write_all(&reply(route, is_head(&buf[..filled]), render))?;
    let _ = s.set_nonblocking(true);
    close_quietly(&mut s);
    Ok(())
}

/// Ends the answer on `s` (non-blocking) and drops what the client sent
/// that is already here: closing with it unread would reset the
/// connection, which can destroy the answer before the client reads it.
fn close_quietly(s: &mut TcpStream) {
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    for _ in 0..64 {
        if !matches!(s.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
}

/// Whether the request whose head (or start of one) is `head` is a `HEAD`:
/// its answer, whatever the route, has no body (RFC 9110 9.3.2).
fn is_head(head: &[u8]) -> bool {
    // httparse skips empty lines before the request line; so does this.
    let start = head.iter().position(|&b| b != b'\r' && b != b'\n');
    start.is_some_and(|at| head[at..].starts_with(b"HEAD "))
}

/// The whole answer to `route`; `head`: to a `HEAD`, without the body.
fn reply(route: Route, head: bool, render: &Render) -> Vec<u8> {
    let (status, body) = match route {
        Route::Metrics => ("200 OK", render()),
        Route::Method => ("405 Method Not Allowed", "GET or HEAD only\n".into()),
        Route::NotFound => ("404 Not Found", "not found\n".into()),
        Route::Bad => ("400 Bad Request", "bad request\n".into()),
        Route::TooLarge => (
            "431 Request Header Fields Too Large",
            "request head over 8 KiB or 256 fields\n".into(),
        ),
        Route::Busy => ("503 Service Unavailable", "busy, retry\n".into()),
    };
    let kind = match route {
        Route::Metrics => CONTENT_TYPE,
        _ => "text/plain",
    };
    let allow = if route == Route::Method {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    // Date: RFC 9110 6.6.1 (an origin server with a clock sends it).
    let mut out = format!(
        "HTTP/1.0 {status}\r\nDate: {}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        httpdate::fmt_http_date(std::time::SystemTime::now()),
        body.len()
    )
    .into_bytes();
    if !head {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// What the head at the start of `head` asks for; `None` while incomplete.
fn route(head: &[u8]) -> Option<Route> {
    // As many fields as an 8 KiB head of short ones holds (a scraper
    // sends a few; a proxy in front may add some).
    let mut headers = [httparse::EMPTY_HEADER; 256];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {
            let path = req.path.unwrap_or("");
            // The absolute form (`http://host:port/metrics`, RFC 9112 3.2.2)
            // names the same path.
            let path = match path.split_once("://") {
                Some((scheme, rest)) if !scheme.contains('/') => {
                    rest.find('/').map_or("/", |at| &rest[at..])
                }
                _ => path,
            };
            let path = path.split('?').next().unwrap_or("");
            Some(match (req.method, path) {
                (Some("GET" | "HEAD"), "/metrics") => Route::Metrics,
                (_, "/metrics") => Route::Method,
                _ => Route::NotFound,
            })
        }
        Ok(httparse::Status::Partial) => None,
        // More fields than the array holds: a head this listener need not
        // read (a scraper sends a few).
        Err(httparse::Error::TooManyHeaders) => Some(Route::TooLarge),
        Err(_) => Some(Route::Bad),
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
        e.counter("duality_z_total", "a\\b\nc", 1);
        let page = e.finish();
        assert!(
            page.contains("# HELP duality_z_total a\\\\b\\nc\n"),
            "{page}"
        );
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
        let page = Route::Metrics;
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(page)
        );
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Some(page));
        assert_eq!(route(b"HEAD /metrics HTTP/1.0\r\n\r\n"), Some(page));
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost"), None);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Some(Route::Method)
        );
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Some(Route::NotFound));
        assert_eq!(route(b"\x00\x01 nonsense\r\n\r\n"), Some(Route::Bad));
        let many = |n| format!("GET /metrics HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(n));
        assert_eq!(route(many(40).as_bytes()), Some(page));
        assert_eq!(route(many(300).as_bytes()), Some(Route::TooLarge));
        assert_eq!(
            route(b"GET http://127.0.0.1:9150/metrics HTTP/1.1\r\n\r\n"),
            Some(page)
        );
        assert_eq!(
            route(b"GET http://127.0.0.1:9150 HTTP/1.1\r\n\r\n"),
            Some(Route::NotFound)
        );
        let head = reply(Route::Metrics, true, &|| "a_total 1\n".into());
        let head = String::from_utf8(head).unwrap();
        assert!(
            head.ends_with("Content-Length: 10\r\nConnection: close\r\n\r\n"),
            "{head}"
        );
        // No body to a HEAD on any route; a GET's error has one. Every
        // answer is dated.
        for r in [Route::NotFound, Route::TooLarge, Route::Method] {
            let a = String::from_utf8(reply(r, true, &String::new)).unwrap();
            assert!(a.ends_with("Connection: close\r\n\r\n"), "{a}");
            let date = a
                .split("\r\nDate: ")
                .nth(1)
                .and_then(|d| d.split("\r\n").next());
            let when = date.and_then(|d| httpdate::parse_http_date(d).ok());
            let now = std::time::SystemTime::now();
            assert!(
                when.is_some_and(|w| now.duration_since(w).is_ok_and(|d| d.as_secs() < 5)),
                "{a}"
            );
            let a = String::from_utf8(reply(r, false, &String::new)).unwrap();
            assert!(!a.ends_with("\r\n\r\n"), "{a}");
        }
        assert!(is_head(b"\r\nHEAD /x HTTP/1.1\r\n"));
        assert!(!is_head(b"GET /x HTTP/1.1\r\n"));
        assert!(!is_head(b"HEADX /x HTTP/1.1\r\n"));
        let no = String::from_utf8(reply(Route::Method, false, &String::new)).unwrap();
        assert!(
            no.starts_with("HTTP/1.0 405 ") && no.contains("Allow: GET, HEAD\r\n"),
            "{no}"
        );
    }

    /// A client that trickles its request, or stalls, holds one thread for
    /// at most the deadline and never keeps a scrape waiting.
    #[test]
    fn a_slow_client_does_not_hold_up_a_scrape() {
        let l = MetricsListener::start("127.0.0.1:0".parse().unwrap(), || "a_total 1\n".into())
            .unwrap();
        let mut idle: Vec<TcpStream> = (0..4)
            .map(|_| {
                let mut s = TcpStream::connect(l.addr()).unwrap();
                s.write_all(b"GET /met").unwrap();
                s
            })
            .collect();
        let t0 = Instant::now();
        let mut s = TcpStream::connect(l.addr()).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        assert!(r.starts_with("HTTP/1.0 200 OK\r\n"), "{r}");
        assert!(t0.elapsed() < DEADLINE, "{:?}", t0.elapsed());
        // Past MAX_CLIENTS at once: 503 at once, and a scrape is answered
        // again once the stalled ones are gone.
        let scrape = || {
            let mut s = TcpStream::connect(l.addr()).unwrap();
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut r = String::new();
            s.read_to_string(&mut r).unwrap();
            r
        };
        // (Two more than the slots: the scrape's thread may still hold one.)
        idle.extend((idle.len()..MAX_CLIENTS + 2).map(|_| {
            let mut s = TcpStream::connect(l.addr()).unwrap();
            s.write_all(b"GET /met").unwrap();
            s
        }));
        // (A 503, or a reset where the request came after the refusal's
        // close: the refusal never waits for it.) A 200 means a slot was
        // free after all: the first scrape's thread let its slot go after
        // the stalled ones were refused, or (on a loaded machine) the first
        // stalled ones met their deadline. Another stalled client takes
        // such a slot, and the next request is refused; a few tries.
        let refused = (0..4).any(|_| {
            let mut s = TcpStream::connect(l.addr()).unwrap();
            let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            let mut busy = String::new();
            if s.read_to_string(&mut busy).is_err() || busy.is_empty() {
                return true;
            }
            if busy.starts_with("HTTP/1.0 503 ") {
                return true;
            }
            assert!(busy.starts_with("HTTP/1.0 200 "), "{busy}");
            let mut s = TcpStream::connect(l.addr()).unwrap();
            s.write_all(b"GET /met").unwrap();
            idle.push(s);
            false
        });
        assert!(refused, "never refused with every slot held");
        // The stalled ones are closed at their deadline (or were refused).
        for s in &mut idle {
            s.set_read_timeout(Some(DEADLINE * 3)).unwrap();
            let mut b = [0u8; 64];
            let n = s.read(&mut b).unwrap_or(0);
            let got = String::from_utf8_lossy(&b[..n]);
            assert!(n == 0 || got.starts_with("HTTP/1.0 503 "), "{got:?}");
        }
        let again = (0..50)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(20));
                scrape()
            })
            .find(|r| r.starts_with("HTTP/1.0 200 OK"));
        assert!(again.is_some());
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
