//! The servers' introspection, end to end: `duality kv`'s `stats` lines and
//! `stats reset`, both servers' `--metrics-listen` pages read with a real
//! Prometheus parser (PyPI `prometheus_client`, installed by `.ci/run`),
//! `duality http --stub-status`, and the flags' errors.
//!
//! Counts are checked exactly against what the test sent; timings only for
//! their shape (cumulative buckets ending in `+Inf` = `_count`). Loops merge
//! what they recorded before they sleep (or every 10 ms), so a check waits
//! until the expected count is reached and fails at once if it is passed.

mod common;

use common::{Client, KvProc, TempDir, IO_TIMEOUT};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `python3`, with prometheus_client importable.
fn python_with_prometheus_client() -> &'static str {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client.parser"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success());
    match ok {
        Ok(true) => "python3",
        Ok(false) => panic!(
            "the Python package prometheus_client is not installed: \
             `pip install prometheus_client` (CI installs it in .ci/run)"
        ),
        Err(e) => panic!(
            "python3 is not available ({e}): install python3 and `pip install prometheus_client`"
        ),
    }
}

/// Parses a page with `prometheus_client.parser.text_string_to_metric_families`
/// and prints one line per family (`F <name> <type>`) and per sample
/// (`S <name> <labels as k=v,k=v> <value>`).
const PARSE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    print("F", f.name, f.type)
    for s in f.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print("S", s.name, labels or "-", repr(float(s.value)))
"#;

/// A page as the real parser read it.
#[derive(Debug, Default)]
struct Page {
    /// Family name → type.
    families: HashMap<String, String>,
    /// (sample name, labels) → value.
    samples: HashMap<(String, String), f64>,
}

impl Page {
    fn parse(text: &str) -> Page {
        let mut child = Command::new(python_with_prometheus_client())
            .args(["-c", PARSE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start python3");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "prometheus_client refused the page: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut page = Page::default();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["F", name, kind] => {
                    page.families.insert(name.to_string(), kind.to_string());
                }
                ["S", name, labels, value] => {
                    let labels = if *labels == "-" { "" } else { labels };
                    page.samples.insert(
                        (name.to_string(), labels.to_string()),
                        value.parse().unwrap(),
                    );
                }
                _ => panic!("parser output {line:?}"),
            }
        }
        page
    }

    fn value(&self, name: &str, labels: &str) -> f64 {
        *self
            .samples
            .get(&(name.to_string(), labels.to_string()))
            .unwrap_or_else(|| panic!("no sample {name}{{{labels}}}"))
    }

    /// The series of a histogram family: its label sets (without `le`).
    fn series(&self, family: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .samples
            .keys()
            .filter(|(n, _)| n == &format!("{family}_count"))
            .map(|(_, l)| l.clone())
            .collect();
        v.sort();
        v
    }

    /// Checks a histogram family's shape (type, cumulative buckets, `+Inf`
    /// equal to `_count`) for every series; returns the counts by labels.
    fn histogram(&self, family: &str) -> HashMap<String, u64> {
        assert_eq!(
            self.families.get(family).map(String::as_str),
            Some("histogram"),
            "{family}"
        );
        let mut counts = HashMap::new();
        for labels in self.series(family) {
            let count = self.value(&format!("{family}_count"), &labels);
            let mut buckets: Vec<(f64, f64)> = self
                .samples
                .iter()
                .filter(|((n, l), _)| n == &format!("{family}_bucket") && strip_le(l).0 == labels)
                .map(|((_, l), v)| (strip_le(l).1, *v))
                .collect();
            buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
            assert!(
                buckets.len() > 2,
                "{family}{{{labels}}}: buckets {buckets:?}"
            );
            assert!(
                buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                "{family}{{{labels}}}: buckets not cumulative {buckets:?}"
            );
            let last = buckets.last().unwrap();
            assert!(last.0.is_infinite(), "{family}: last bucket {last:?}");
            assert_eq!(last.1, count, "{family}{{{labels}}}: +Inf bucket vs _count");
            let sum = self.value(&format!("{family}_sum"), &labels);
            assert!(
                sum >= 0.0 && (count > 0.0 || sum == 0.0),
                "{family}: sum {sum}"
            );
            counts.insert(labels, count as u64);
        }
        counts
    }
}

/// Splits `le=…` off a label string: (the other labels, the bound).
fn strip_le(labels: &str) -> (String, f64) {
    let mut rest = Vec::new();
    let mut le = f64::NAN;
    for kv in labels.split(',') {
        match kv.strip_prefix("le=") {
            Some(v) => {
                le = if v == "+Inf" {
                    f64::INFINITY
                } else {
                    v.parse().unwrap()
                }
            }
            None => rest.push(kv),
        }
    }
    (rest.join(","), le)
}

/// `GET path` over HTTP/1.0 on a fresh connection: (status code, body).
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("a head");
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    if code == 200 {
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4"),
            "{head}"
        );
    }
    (code, body.to_string())
}

/// The address in a `metrics http://ADDR/metrics` line of `stderr`.
fn metrics_addr(stderr: &str) -> Option<SocketAddr> {
    let line = stderr.lines().find(|l| l.contains("metrics http://"))?;
    let rest = line.split("metrics http://").nth(1)?;
    rest.strip_suffix("/metrics")?.parse().ok()
}

/// Scrapes until `done(page)`, at most 10 s; `check` runs on every page
/// and must hold on each (counts never pass what was sent).
fn scrape_until(addr: SocketAddr, check: impl Fn(&Page), done: impl Fn(&Page) -> bool) -> Page {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http_get(addr, "/metrics");
        assert_eq!(code, 200);
        let page = Page::parse(&body);
        check(&page);
        if done(&page) {
            return page;
        }
        assert!(
            Instant::now() < until,
            "never reached the expected counts:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kv_with_metrics(model: &str) -> (KvProc, SocketAddr) {
    let kv = KvProc::start(&["--model", model, "--metrics-listen", "127.0.0.1:0"]);
    assert!(
        kv.wait_stderr("/metrics", Duration::from_secs(10)),
        "no metrics line: {}",
        kv.stderr_text()
    );
    let addr = metrics_addr(&kv.stderr_text()).expect("metrics address");
    // Announced once it can answer in full: the runtime's families too.
    let (code, body) = http_get(addr, "/metrics");
    assert_eq!(code, 200);
    assert!(body.contains("\nduality_connections "), "{model}: {body}");
    (kv, addr)
}

/// `duality kv --metrics-listen`: the page parses, and its counts are what
/// the clients did: one TTFB and loop-hold sample per request, one accept
/// latency per connection, the store's counters, one poll series per loop.
#[test]
fn kv_metrics_listener_counts_what_was_sent() {
    for model in ["sped", "symped:2", "seda:1:1"] {
        let (kv, addr) = kv_with_metrics(model);
        const CONNS: usize = 3;
        const GETS: usize = 7;
        let mut clients: Vec<Client> = (0..CONNS).map(|_| kv.connect()).collect();
        for (i, c) in clients.iter_mut().enumerate() {
            c.expect_str(&format!("set k{i} 0 0 1\r\nx\r\n"), "STORED\r\n");
            for _ in 0..GETS {
                c.expect_str(
                    &format!("get k{i}\r\n"),
                    &format!("VALUE k{i} 0 1\r\nx\r\nEND\r\n"),
                );
            }
        }
        // `expect_str` follows each request with an `mn` (see `Client::call`).
        let requests = (2 * CONNS * (GETS + 1)) as f64;
        let page = scrape_until(
            addr,
            |p| {
                for f in [
                    "duality_request_ttfb_seconds",
                    "duality_request_loop_hold_seconds",
                ] {
                    let n = p.value(&format!("{f}_count"), "");
                    assert!(n <= requests, "{model}: {f} counted {n} of {requests}");
                }
                let n = p.value("duality_accept_latency_seconds_count", "");
                assert!(n <= CONNS as f64, "{model}: {n} accepts");
            },
            |p| {
                // The poll histogram is published on the loop's own cadence
                // (every 10 ms and before it sleeps): wait for it too.
                p.value("duality_request_ttfb_seconds_count", "") == requests
                    && p.value("duality_request_loop_hold_seconds_count", "") == requests
                    && p.value("duality_accept_latency_seconds_count", "") == CONNS as f64
                    && p.histogram("duality_loop_poll_seconds")
                        .values()
                        .sum::<u64>()
                        >= CONNS as u64
            },
        );
        for f in [
            "duality_request_ttfb_seconds",
            "duality_request_loop_hold_seconds",
            "duality_accept_latency_seconds",
        ] {
            page.histogram(f);
        }
        let polls = page.histogram("duality_loop_poll_seconds");
        let network = polls.keys().filter(|l| l.contains("role=network")).count();
        let want_network = if model == "symped:2" { 2 } else { 1 };
        assert_eq!(network, want_network, "{model}: poll series {polls:?}");
        // At least a poll per connection; not one per call: on epoll a
        // connection's poll goes on reading while the client keeps up, so
        // one poll can serve several calls.
        assert!(
            polls.values().sum::<u64>() >= CONNS as u64,
            "{model}: every connection took a poll: {polls:?}"
        );
        for (name, want) in [
            ("duality_kv_cmd_get_total", CONNS * GETS),
            ("duality_kv_get_hits_total", CONNS * GETS),
            ("duality_kv_cmd_set_total", CONNS),
            ("duality_kv_items_stored_total", CONNS),
            ("duality_kv_delete_misses_total", 0),
            ("duality_connections_accepted_total", CONNS),
        ] {
            assert_eq!(page.value(name, ""), want as f64, "{model}: {name}");
        }
        assert_eq!(page.families["duality_kv_cmd_get"], "counter");
        // One request per read: no batch ever reached -R (64).
        assert_eq!(page.families["duality_connection_yields"], "counter");
        assert_eq!(page.value("duality_connection_yields_total", ""), 0.0);
        assert_eq!(page.value("duality_connections", ""), CONNS as f64);
        assert_eq!(page.value("duality_kv_items", ""), CONNS as f64);
        assert!(page.value("duality_kv_limit_bytes", "") > 0.0);
        // Anything but GET /metrics: 404.
        assert_eq!(http_get(addr, "/").0, 404);
        assert_eq!(http_get(addr, "/metricsx").0, 404);
        drop(clients);
    }
}

/// `stats reset` clears the loops' long polls in `stats` too (they counted
/// on from the start).
#[test]
fn kv_stats_reset_clears_long_polls() {
    let kv = KvProc::start(&["-t", "2", "-m", "256", "--long-poll-warn-ms", "1"]);
    let mut c = kv.connect();
    let value = vec![b'v'; 900_000];
    for i in 0..20 {
        let mut set = format!("set k{i} 0 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        c.send(&set);
        assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
    }
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let get = format!("get {}\r\n", keys.join(" "));
    let long =
        |c: &mut common::Client| -> u64 { c.stats("")["duality_long_polls"].parse().unwrap() };
    // At least 3: the polls that serve `stats reset` and the `stats` after
    // it may take over 1 ms themselves (a debug build on a busy machine:
    // CI once saw 1 before and 1 after).
    let mut seen = 0;
    for _ in 0..40 {
        c.send(get.as_bytes());
        c.read_until(b"END\r\n");
        seen = long(&mut c);
        if seen >= 3 {
            break;
        }
    }
    if seen < 3 {
        eprintln!("skipped: only {seen} polls took over 1 ms here");
        return;
    }
    c.expect_str("stats reset\r\n", "RESET\r\n");
    assert!(long(&mut c) < seen, "long polls not cleared from {seen}");
}

/// `stats` ends with the duality lines; they count what was sent, and
/// `stats reset` clears them.
#[test]
fn kv_stats_has_request_metrics_and_reset_clears_them() {
    let kv = KvProc::start(&["--model", "symped:2"]);
    let mut work = kv.connect();
    work.expect_str("set a 0 0 1\r\nx\r\n", "STORED\r\n");
    for _ in 0..9 {
        work.expect_str("get a\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n");
    }
    // Stores without an answer have no first byte and are not counted,
    // though an answered get shares their read (they were, then).
    let quiet = "set q 0 0 1 noreply\r\nx\r\n".repeat(10);
    work.expect_str(&(quiet + "get a\r\n"), "VALUE a 0 1\r\nx\r\nEND\r\n");
    let mut admin = kv.connect();
    let names = [
        "duality_requests",
        "duality_ttfb_p50_us",
        "duality_ttfb_p99_us",
        "duality_ttfb_p999_us",
        "duality_ttfb_max_us",
        "duality_loop_hold_p50_us",
        "duality_loop_hold_p99_us",
        "duality_loop_hold_p999_us",
        "duality_loop_hold_max_us",
        "duality_accept_latency_p50_us",
        "duality_accept_latency_p99_us",
        "duality_accept_latency_p999_us",
        "duality_accept_latency_max_us",
        "duality_accepts",
        "duality_long_polls",
    ];
    let num = |st: &HashMap<String, String>, k: &str| -> u64 {
        st.get(k)
            .unwrap_or_else(|| panic!("no STAT {k}: {st:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("STAT {k} {:?} is not a number", st[k]))
    };
    // Eleven answered requests on `work`, each followed by an `mn` (see
    // `Client::call`), plus each earlier `stats` on `admin` (a `stats`
    // answer does not count itself: it is recorded when written).
    let until = Instant::now() + Duration::from_secs(10);
    let mut asked = 0;
    loop {
        let st = admin.stats("");
        for n in names {
            num(&st, n);
        }
        let want = 22 + asked;
        let got = num(&st, "duality_requests");
        assert!(got <= want, "{got} requests counted, {want} made");
        if got == want && num(&st, "duality_accepts") == 2 {
            assert!(num(&st, "duality_ttfb_max_us") >= num(&st, "duality_ttfb_p50_us"));
            break;
        }
        assert!(num(&st, "duality_accepts") <= 2);
        assert!(Instant::now() < until, "stats never counted {want}: {st:?}");
        asked += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    admin.expect_str("stats reset\r\n", "RESET\r\n");
    let st = admin.stats("");
    // At most the `stats reset` and its `mn`, answered after the reset.
    assert!(num(&st, "duality_requests") <= 2, "{st:?}");
    assert_eq!(num(&st, "duality_accepts"), 0, "{st:?}");
    assert_eq!(num(&st, "duality_accept_latency_max_us"), 0, "{st:?}");
    // And they count again afterwards.
    work.expect_str("get a\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let st = admin.stats("");
        if num(&st, "duality_requests") >= 2 {
            break;
        }
        assert!(
            Instant::now() < until,
            "requests not counted after reset: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `duality http` with a metrics listener and the stub status page, its
/// stderr drained; SIGTERM on drop.
struct Http {
    child: std::process::Child,
    url_addr: SocketAddr,
    metrics: SocketAddr,
}

impl Http {
    fn start(root: &std::path::Path) -> Http {
        let mut child = Command::new(env!("CARGO_BIN_EXE_duality"))
            .args(["http", "--listen", "127.0.0.1:0", "--model", "symped:2"])
            .args([
                "--metrics-listen",
                "127.0.0.1:0",
                "--stub-status",
                "/nginx_status",
            ])
            .arg("--root")
            .arg(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start duality http");
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let stderr = stderr.clone();
            let mut r = BufReader::new(child.stderr.take().unwrap());
            std::thread::spawn(move || {
                let mut line = String::new();
                while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                    stderr.lock().unwrap().push_str(&line);
                    line.clear();
                }
            });
        }
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url_addr = line
            .trim()
            .strip_prefix("ready http://")
            .unwrap_or_else(|| panic!("no ready line: {line:?}"))
            .parse()
            .unwrap();
        // Printed before the ready line; the drain thread may lag.
        let until = Instant::now() + Duration::from_secs(10);
        let metrics = loop {
            if let Some(a) = metrics_addr(&stderr.lock().unwrap()) {
                break a;
            }
            assert!(Instant::now() < until, "no metrics line");
            std::thread::sleep(Duration::from_millis(5));
        };
        Http {
            child,
            url_addr,
            metrics,
        }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        common::http::terminate(&mut self.child);
    }
}

/// One keep-alive HTTP/1.1 connection.
struct KeepAlive {
    s: BufReader<TcpStream>,
}

impl KeepAlive {
    fn connect(addr: SocketAddr) -> KeepAlive {
        let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).unwrap();
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        KeepAlive {
            s: BufReader::new(s),
        }
    }

    /// GET `path`: (status code, body).
    fn get(&mut self, path: &str) -> (u16, String) {
        write!(
            self.s.get_mut(),
            "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"
        )
        .unwrap();
        let mut status = String::new();
        self.s.read_line(&mut status).unwrap();
        let code = status.split(' ').nth(1).unwrap().parse().unwrap();
        let mut len = 0;
        loop {
            let mut line = String::new();
            self.s.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        self.s.read_exact(&mut body).unwrap();
        (code, String::from_utf8(body).unwrap())
    }
}

/// Parses nginx's stub_status text, checking its exact format:
/// [active, accepts, handled, requests, reading, writing, waiting].
fn parse_stub_status(text: &str) -> [u64; 7] {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert_eq!(lines.len(), 4, "{text:?}");
    let num = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("{s:?} in {text:?}")) };
    let active = lines[0]
        .strip_prefix("Active connections: ")
        .and_then(|s| s.strip_suffix(" \n"))
        .unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(lines[1], "server accepts handled requests\n", "{text:?}");
    let counts: Vec<u64> = lines[2]
        .strip_prefix(' ')
        .and_then(|s| s.strip_suffix(" \n"))
        .unwrap_or_else(|| panic!("{text:?}"))
        .split(' ')
        .map(num)
        .collect();
    assert_eq!(counts.len(), 3, "{text:?}");
    let rest = lines[3]
        .strip_suffix(" \n")
        .unwrap_or_else(|| panic!("{text:?}"));
    let parts: Vec<&str> = rest.split(' ').collect();
    assert_eq!(parts.len(), 6, "{text:?}");
    assert_eq!(
        [parts[0], parts[2], parts[4]],
        ["Reading:", "Writing:", "Waiting:"]
    );
    [
        num(active),
        counts[0],
        counts[1],
        counts[2],
        num(parts[1]),
        num(parts[3]),
        num(parts[5]),
    ]
}

/// `duality http --stub-status` answers nginx's format with the right
/// numbers, and `--metrics-listen` counts every request and connection.
#[test]
fn http_stub_status_and_metrics_listener() {
    let dir = TempDir::new("http-metrics");
    std::fs::write(dir.path().join("index.html"), "hello\n").unwrap();
    let h = Http::start(dir.path());
    const GETS: u64 = 5;
    let mut a = KeepAlive::connect(h.url_addr);
    let mut b = KeepAlive::connect(h.url_addr);
    for c in [&mut a, &mut b] {
        for _ in 0..GETS {
            assert_eq!(c.get("/index.html"), (200, "hello\n".into()));
        }
    }
    // Both idle connections end up waiting; the status connection is the
    // one writing (as nginx counts its own request).
    let mut status = KeepAlive::connect(h.url_addr);
    let until = Instant::now() + Duration::from_secs(10);
    let mut asked = 0;
    loop {
        let (code, text) = status.get("/nginx_status");
        asked += 1;
        assert_eq!(code, 200);
        let [active, accepts, handled, requests, reading, writing, waiting] =
            parse_stub_status(&text);
        assert_eq!((active, accepts, handled), (3, 3, 3), "{text}");
        assert_eq!(requests, 2 * GETS + asked, "{text}");
        assert_eq!(reading + writing + waiting, active, "{text}");
        assert!(writing >= 1, "{text}");
        if (reading, writing, waiting) == (0, 1, 2) {
            break;
        }
        assert!(
            Instant::now() < until,
            "idle connections never waiting: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(status.get("/missing").0, 404);
    let requests = (2 * GETS + asked + 1) as f64;
    let page = scrape_until(
        h.metrics,
        |p| {
            let n = p.value("duality_request_ttfb_seconds_count", "");
            assert!(n <= requests, "{n} of {requests}");
        },
        |p| {
            p.value("duality_request_ttfb_seconds_count", "") == requests
                && p.value("duality_request_loop_hold_seconds_count", "") == requests
                && p.value("duality_accept_latency_seconds_count", "") == 3.0
        },
    );
    page.histogram("duality_request_ttfb_seconds");
    page.histogram("duality_request_loop_hold_seconds");
    page.histogram("duality_accept_latency_seconds");
    let polls = page.histogram("duality_loop_poll_seconds");
    assert_eq!(
        polls.keys().filter(|l| l.contains("role=network")).count(),
        2,
        "{polls:?}"
    );
    assert_eq!(page.value("duality_http_requests_total", ""), requests);
    assert_eq!(
        page.value("duality_http_responses_total", "code=2xx"),
        requests - 1.0
    );
    assert_eq!(page.value("duality_http_responses_total", "code=4xx"), 1.0);
    assert_eq!(page.value("duality_http_responses_total", "code=5xx"), 0.0);
    assert_eq!(page.families["duality_http_requests"], "counter");
    assert_eq!(page.value("duality_connections_accepted_total", ""), 3.0);
    assert_eq!(page.value("duality_connections", ""), 3.0);
    // The first request for index.html opened it on the blocking pool.
    let pool = "pool=duality-blocking";
    assert!(page.value("duality_pool_jobs_completed_total", pool) >= 1.0);
    assert_eq!(page.families["duality_pool_jobs_completed"], "counter");
    assert_eq!(page.families["duality_pool_threads"], "gauge");
    assert_eq!(page.value("duality_pool_queued_jobs", pool), 0.0);
    assert_eq!(page.value("duality_pool_raises_total", pool), 0.0);
}

/// A metrics address that cannot be bound stops the server with the reason.
#[test]
fn a_metrics_address_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = TempDir::new("http-metrics-taken");
    for args in [
        vec!["kv", "-p", "0", "-s"],
        vec!["http", "--listen", "127.0.0.1:0", "--root"],
    ] {
        let sock = dir.path().join("kv.sock");
        let last = if args[0] == "kv" {
            sock.as_os_str()
        } else {
            dir.path().as_os_str()
        };
        let out = Command::new(env!("CARGO_BIN_EXE_duality"))
            .args(&args)
            .arg(last)
            .args(["--metrics-listen", &addr])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot listen on {addr} for metrics")),
            "{args:?}: {stderr}"
        );
    }
}

/// The flags are documented in `--help`; a stub status path must be a path.
#[test]
fn metrics_flags_are_in_help() {
    let help = |sub: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_duality"))
            .args([sub, "--help"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for sub in ["kv", "http"] {
        let h = help(sub);
        for flag in ["--metrics-listen", "--long-poll-warn-ms"] {
            assert!(h.contains(flag), "{sub} --help lacks {flag}");
        }
    }
    assert!(help("http").contains("--stub-status"));
    let dir = TempDir::new("http-stub-bad");
    let out = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["http", "--listen", "127.0.0.1:0", "--stub-status", "status"])
        .arg("--root")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stub-status must be a URL path"));
}
