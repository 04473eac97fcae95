//! `duality bench offload`: seed 002 — what 1% of CPU-heavy requests (gzip
//! on the fly) do to everybody else's latency, with compression inline on
//! the loop, on the CPU pool, or placed adaptively; nginx with `gzip on`
//! (compressing in its workers: the seed's "before") in the same run.
//!
//! ```text
//!  open-loop clients (this process)                 server under test
//!  ┌──────────────────────────────────────┐         ┌──────────────────────────┐
//!  │ ticket i is due at start + i/rate;   │  TCP    │ duality http --gzip on   │
//!  │ any idle client thread takes the     │ ──────► │  --gzip-cache 0          │
//!  │ next ticket, sleeps until it is due, │ loopback│  --offload inline|pool|  │
//!  │ sends it; latency from the due time  │         │            adaptive      │
//!  │  99%: a small file (page-cache hit)  │         │ nginx gzip on,           │
//!  │   1%: a large JSON, Accept-Encoding: │         │  gzip_comp_level 1       │
//!  │       gzip (milliseconds of CPU)     │         └──────────────────────────┘
//!  │ 10%: a new connection for the ticket │           /metrics scraped before
//!  └──────────────────────────────────────┘           and after each window
//! ```
//!
//! The **schedule** is fixed: ticket `i` is due at `start + i / rate`, and
//! what it asks for ([`Mix::ticket`]) is a hash of `i`, so every server gets
//! exactly the same requests at the same offsets. Latency counts from the
//! due time, not the send, so a server that stalls cannot hide the queue it
//! caused (no coordinated omission); a ticket taken late because every
//! client thread was busy counts its wait too. Tickets due in the warm-up
//! are sent but not counted.
//!
//! The **capacity** is found first with a closed-loop probe of `duality
//! inline` on the same mix (every client thread sends its next request as
//! soon as the answer arrives); the open-loop rates are fractions of it
//! (50% and 80% by default), the same for every server.
//!
//! Per server and rate, the row gives client-side latency percentiles of
//! cheap and heavy requests, the client-side time to first byte (due time
//! to first response byte, every request), and from duality's Prometheus
//! histograms (the difference of two scrapes around the measured window,
//! quantiles interpolated inside buckets as Prometheus'
//! `histogram_quantile` does, see [`Histogram::quantile`]) its own time to
//! first byte, accept latency and loop-hold time per request. nginx has no
//! such metrics: `-`. A fifth row, `duality adaptive, no heavy`, sends the
//! same schedule with every heavy ticket turned into a cheap one: the
//! baseline of the first goal ([`goals`]). It runs on the adaptive server,
//! and the two rows take turns in [`Plan::slices`] slices (A B, B A, …),
//! each merging its slices: a goal that compares two rows should not
//! compare two stretches of a drifting host.

use crate::http::{RunningServer, TempDir};
use crate::summary::{corrected_latency, latency_histogram, record};
use hdrhistogram::Histogram as Hdr;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// One server at one rate.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OffloadRow {
    /// `duality inline`, `duality pool`, `duality adaptive`,
    /// `duality adaptive, no heavy` or `nginx gzip on`.
    pub server: String,
    /// Offered load, percent of the measured capacity.
    pub load_pct: u32,
    /// Offered requests/s.
    pub rate: f64,
    /// Cheap requests' latency percentiles, ms (from the due time).
    pub cheap_p50_ms: f64,
    /// 99th percentile.
    pub cheap_p99_ms: f64,
    /// 99.9th percentile.
    pub cheap_p999_ms: f64,
    /// Heavy requests' latency percentiles, ms (`None`: none sent).
    pub heavy_p50_ms: Option<f64>,
    /// 99th percentile.
    pub heavy_p99_ms: Option<f64>,
    /// 99.9th percentile.
    pub heavy_p999_ms: Option<f64>,
    /// Client side: due time to the first response byte, p99 over every
    /// request, ms.
    pub ttfb_p99_ms: f64,
    /// Server side (duality's `request_ttfb` histogram): request complete
    /// to first byte written, p99, ms.
    pub server_ttfb_p99_ms: Option<f64>,
    /// duality's accept latency (acceptor to the connection's first poll on
    /// its loop), p99, ms.
    pub accept_p99_ms: Option<f64>,
    /// duality's loop-hold time per request (the longest single poll of
    /// its loop serving it), p99, ms.
    pub loop_hold_p99_ms: Option<f64>,
    /// Its 99.9th percentile (with 1% heavy requests, theirs).
    pub loop_hold_p999_ms: Option<f64>,
    /// Responses completed in the window, per second.
    pub requests_per_sec: f64,
    /// Heavy responses completed in the window, per second.
    pub heavy_per_sec: f64,
    /// Mean body of a heavy response, KiB: what each server's compression
    /// made of the same file (their levels' work differs with it).
    /// `None`: no heavy response in the window.
    #[serde(default)]
    pub heavy_body_kib: Option<f64>,
    /// Failed requests (connect, read, status, a heavy answer not gzipped).
    pub errors: u64,
    /// Tickets never sent: due, but taken after the drain deadline.
    pub unsent: u64,
    /// Times duality's CPU pool was raised out of the kernel's background
    /// class during the window (`duality_pool_raises_total`): the loops
    /// left it too little. `None`: no CPU pool (inline) or no metrics.
    #[serde(default)]
    pub pool_raises: Option<u64>,
    /// Cheap requests' p99 (ms) of each slice, in the order measured, where
    /// the row was measured in slices (`Plan::slices`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slice_cheap_p99_ms: Vec<f64>,
}

/// The server labels, in the order measured.
pub const INLINE: &str = "duality inline";
/// `--offload pool`.
pub const POOL: &str = "duality pool";
/// `--offload adaptive`.
pub const ADAPTIVE: &str = "duality adaptive";
/// `--offload adaptive`, every ticket cheap.
pub const NO_HEAVY: &str = "duality adaptive, no heavy";
/// nginx with `gzip on`.
pub const NGINX: &str = "nginx gzip on";

// ---------------------------------------------------------------------------
// The request mix.

/// What the tickets ask for.
#[derive(Clone, Debug)]
pub struct Mix {
    /// Small files (`/s/NNNN.html`).
    pub small: usize,
    /// Large JSON files (`/big-N.json`).
    pub heavy: usize,
    /// Share of heavy tickets, in basis points (100 = 1%).
    pub heavy_bp: u64,
    /// Share of tickets sent on a new connection, percent.
    pub new_conn_pct: u64,
    /// Seed of the hashes.
    pub seed: u64,
}

/// One ticket's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// A heavy (gzip) request.
    pub heavy: bool,
    /// The file: index into the small or the heavy files.
    pub file: usize,
    /// Sent on a connection of its own.
    pub new_conn: bool,
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Mix {
    /// Ticket `i`'s request: a pure function of `i` and the seed.
    pub fn ticket(&self, i: u64) -> Ticket {
        let h = splitmix64(self.seed ^ i);
        let heavy = self.heavy > 0 && h % 10_000 < self.heavy_bp;
        let h2 = splitmix64(h);
        let n = if heavy { self.heavy } else { self.small };
        Ticket {
            heavy,
            file: (h2 % n.max(1) as u64) as usize,
            new_conn: (h2 >> 32) % 100 < self.new_conn_pct,
        }
    }

    /// The same tickets with no heavy ones (each becomes a cheap one).
    pub fn without_heavy(&self) -> Mix {
        Mix {
            heavy_bp: 0,
            ..self.clone()
        }
    }
}

/// The request bytes of every file.
pub struct Requests {
    small: Vec<Vec<u8>>,
    heavy: Vec<Vec<u8>>,
}

impl Requests {
    /// `GET` requests for `files`: the small ones plain, the heavy ones with
    /// `Accept-Encoding: gzip`.
    pub fn new(files: &Files) -> Requests {
        let get = |p: &str, extra: &str| {
            format!("GET /{p} HTTP/1.1\r\nHost: bench\r\nUser-Agent: duality-bench{extra}\r\n\r\n")
                .into_bytes()
        };
        Requests {
            small: files.small.iter().map(|p| get(p, "")).collect(),
            heavy: files
                .heavy
                .iter()
                .map(|p| get(p, "\r\nAccept-Encoding: gzip"))
                .collect(),
        }
    }

    fn of(&self, t: Ticket) -> &[u8] {
        if t.heavy {
            &self.heavy[t.file]
        } else {
            &self.small[t.file]
        }
    }
}

/// The document root's files, relative to it.
pub struct Files {
    /// Small HTML files, 1-4 KiB.
    pub small: Vec<String>,
    /// Large JSON files.
    pub heavy: Vec<String>,
}

/// Writes `small` HTML files of 1-4 KiB under `dir/s/` and `heavy` JSON
/// files of `heavy_bytes` each (records of varied numbers and words, which
/// gzip level 1 shrinks to about a fifth).
pub fn write_files(
    dir: &Path,
    small: usize,
    heavy: usize,
    heavy_bytes: usize,
) -> std::io::Result<Files> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir.join("s"))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(dir.join("s"), std::fs::Permissions::from_mode(0o755))?;
    let mut files = Files {
        small: Vec::new(),
        heavy: Vec::new(),
    };
    for i in 0..small {
        let size = 1024 + (splitmix64(i as u64) % 3072) as usize;
        let mut body = format!("<!doctype html><title>page {i}</title><p>").into_bytes();
        while body.len() < size {
            body.extend_from_slice(b"The quick brown fox jumps over the lazy dog. ");
        }
        body.truncate(size);
        body[size - 1] = b'\n';
        let name = format!("s/{i:04}.html");
        std::fs::write(dir.join(&name), body)?;
        files.small.push(name);
    }
    const WORDS: [&str; 8] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    ];
    for f in 0..heavy {
        let mut body = String::from("[\n");
        let mut n = 0u64;
        while body.len() < heavy_bytes {
            let h = splitmix64((f as u64) << 40 | n);
            body.push_str(&format!(
                "{{\"id\":{n},\"user\":\"{}-{}\",\"score\":{},\"ratio\":0.{:06},\"tags\":[\"{}\",\"{}\"],\"active\":{}}},\n",
                WORDS[(h % 8) as usize],
                h % 100_000,
                (h >> 20) % 1_000_000,
                (h >> 40) % 1_000_000,
                WORDS[((h >> 8) % 8) as usize],
                WORDS[((h >> 12) % 8) as usize],
                h & 1 == 0,
            ));
            n += 1;
        }
        body.push_str("{}]\n");
        let name = format!("big-{f}.json");
        std::fs::write(dir.join(&name), body)?;
        files.heavy.push(name);
    }
    Ok(files)
}

// ---------------------------------------------------------------------------
// Responses.

/// What a response said.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Encoding: gzip`.
    pub gzip: bool,
    /// Body bytes (chunk data only, when chunked).
    pub body: u64,
}

/// A chunked body that breaks the encoding's rules.
#[derive(Debug, PartialEq, Eq)]
pub struct BadChunk;

/// Where a chunked body ends: `Ok(Some((bytes consumed, data bytes)))` once
/// `buf` holds the whole body (last chunk and trailer included),
/// `Ok(None)` while it does not, `Err` if it is not chunked encoding.
pub fn chunked_end(buf: &[u8]) -> Result<Option<(usize, u64)>, BadChunk> {
    let mut at = 0;
    let mut data = 0u64;
    loop {
        let Some(eol) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&buf[at..at + eol]).map_err(|_| BadChunk)?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let len = u64::from_str_radix(hex, 16).map_err(|_| BadChunk)?;
        at += eol + 2;
        if len == 0 {
            // Trailer fields, then an empty line.
            loop {
                let Some(eol) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some((at, data)));
                }
            }
        }
        let end = at + len as usize + 2;
        if buf.len() < end {
            return Ok(None);
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(BadChunk);
        }
        data += len;
        at = end;
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads one response from `s` into `buf` (cleared first); `first` gets the
/// time its first byte arrived.
fn read_response(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    first: &mut Option<Instant>,
) -> std::io::Result<Response> {
    use std::io::{Error, ErrorKind};
    let bad = |m: &str| Error::new(ErrorKind::InvalidData, m.to_owned());
    buf.clear();
    let mut chunk = [0u8; 64 * 1024];
    let mut fill = |s: &mut TcpStream, buf: &mut Vec<u8>| -> std::io::Result<()> {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        first.get_or_insert_with(Instant::now);
        buf.extend_from_slice(&chunk[..n]);
        Ok(())
    };
    let head_end = loop {
        fill(s, buf)?;
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(bad("response head too large"));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let gzip = header(&head, "content-encoding").is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    let chunked = header(&head, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        loop {
            match chunked_end(&buf[head_end..]) {
                Ok(Some((_, data))) => break data,
                Ok(None) => fill(s, buf)?,
                Err(BadChunk) => return Err(bad("bad chunked body")),
            }
        }
    } else {
        let len: u64 = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad("no Content-Length"))?;
        while ((buf.len() - head_end) as u64) < len {
            fill(s, buf)?;
        }
        len
    };
    Ok(Response { status, gzip, body })
}

// ---------------------------------------------------------------------------
// The load generator.

/// One load run.
pub struct Load<'a> {
    /// The server.
    pub addr: SocketAddr,
    /// What the tickets ask for.
    pub mix: &'a Mix,
    /// The schedule's first ticket: the load's ticket `i` asks for what
    /// ticket `first_ticket + i` of the mix does (a slice of a row covers
    /// its own stretch of the schedule, not the first one again).
    pub first_ticket: u64,
    /// Their bytes.
    pub requests: &'a Requests,
    /// Requests/s (open loop); `None`: closed loop, every client thread
    /// sends its next request as soon as it has the answer.
    pub rate: Option<f64>,
    /// Tickets due before this much time are sent but not counted.
    pub warmup: Duration,
    /// The measured window.
    pub measure: Duration,
    /// Client threads (each holds one keep-alive connection).
    pub clients: usize,
    /// After the window, time left to finish what is in flight; tickets
    /// taken after it are counted as unsent.
    pub drain: Duration,
}

/// What a load run measured (latencies in µs).
pub struct Outcome {
    /// Cheap requests' latency, due time to whole response.
    pub cheap: Hdr<u64>,
    /// Heavy requests' latency.
    pub heavy: Hdr<u64>,
    /// Due time to first response byte, every request.
    pub ttfb: Hdr<u64>,
    /// Responses (and heavy ones) completed inside the window.
    pub done: u64,
    /// Heavy ones among them.
    pub done_heavy: u64,
    /// Their bodies' bytes, together.
    pub heavy_body: u64,
    /// Failed requests.
    pub errors: u64,
    /// Tickets never sent.
    pub unsent: u64,
    /// The window's length, seconds.
    pub seconds: f64,
}

impl Outcome {
    fn new() -> Outcome {
        Outcome {
            cheap: latency_histogram(),
            heavy: latency_histogram(),
            ttfb: latency_histogram(),
            done: 0,
            done_heavy: 0,
            heavy_body: 0,
            errors: 0,
            unsent: 0,
            seconds: 0.0,
        }
    }

    fn add(&mut self, o: &Outcome) {
        self.cheap.add(&o.cheap).expect("same bounds");
        self.heavy.add(&o.heavy).expect("same bounds");
        self.ttfb.add(&o.ttfb).expect("same bounds");
        self.done += o.done;
        self.done_heavy += o.done_heavy;
        self.heavy_body += o.heavy_body;
        self.errors += o.errors;
        self.unsent += o.unsent;
    }
}

/// One row's windows, merged: its outcome and, from a server with metrics,
/// the two scrapes around each window.
struct Measured {
    outcome: Outcome,
    pages: Option<Vec<(String, String)>>,
    /// Each slice's cheap p99 (ms), where the row has slices.
    slices: Vec<f64>,
}

impl Measured {
    fn empty() -> Measured {
        Measured {
            outcome: Outcome::new(),
            pages: None,
            slices: Vec::new(),
        }
    }

    /// Adds a window (a slice of the row).
    fn add(&mut self, w: Measured) {
        self.slices
            .push(pct_ms(&w.outcome.cheap, 0.99).unwrap_or(f64::NAN));
        self.outcome.add(&w.outcome);
        self.outcome.seconds += w.outcome.seconds;
        if let Some(p) = w.pages {
            self.pages.get_or_insert_with(Vec::new).extend(p);
        }
    }
}

struct Window {
    start: Instant,
    from: Instant,
    end: Instant,
    deadline: Instant,
}

/// Runs `load`; `at_window` is called (on this thread) when the measured
/// window opens and when it closes, to scrape the server's metrics.
pub fn run_load(load: &Load, at_window: &mut dyn FnMut(bool)) -> Outcome {
    let start = Instant::now() + Duration::from_millis(20);
    let w = Window {
        start,
        from: start + load.warmup,
        end: start + load.warmup + load.measure,
        deadline: start + load.warmup + load.measure + load.drain,
    };
    let next = AtomicU64::new(0);
    let mut total = Outcome::new();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..load.clients.max(1))
            .map(|_| scope.spawn(|| client(load, &w, &next)))
            .collect();
        sleep_until(w.from);
        at_window(true);
        sleep_until(w.end);
        at_window(false);
        for h in workers {
            total.add(&h.join().expect("client thread"));
        }
    });
    total.seconds = (w.end - w.from).as_secs_f64();
    total
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // A reset on close: no TIME_WAIT piles up from the per-request connections.
    socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
    Ok(s)
}

/// One client thread: takes tickets until the schedule (or the window, in
/// closed loop) ends.
fn client(load: &Load, w: &Window, next: &AtomicU64) -> Outcome {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and changes
    // only this thread's timer slack (1 µs: sleeps end when asked).
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    let mut out = Outcome::new();
    let mut keep: Option<TcpStream> = None;
    let mut buf = Vec::with_capacity(64 * 1024);
    let timeout = load.drain.max(Duration::from_secs(1));
    loop {
        let i = next.fetch_add(1, Relaxed);
        let due = match load.rate {
            Some(rate) => {
                let due = w.start + Duration::from_secs_f64(i as f64 / rate);
                if due >= w.end {
                    break;
                }
                sleep_until(due);
                due
            }
            None => {
                let now = Instant::now();
                if now >= w.end {
                    break;
                }
                now
            }
        };
        if Instant::now() > w.deadline {
            out.unsent += 1;
            continue;
        }
        let t = load.mix.ticket(load.first_ticket + i);
        let mut own;
        let s = if t.new_conn {
            match connect(load.addr, timeout) {
                Ok(s) => {
                    own = s;
                    &mut own
                }
                Err(_) => {
                    out.errors += 1;
                    continue;
                }
            }
        } else {
            if keep.is_none() {
                keep = connect(load.addr, timeout).ok();
            }
            match keep.as_mut() {
                Some(s) => s,
                None => {
                    out.errors += 1;
                    continue;
                }
            }
        };
        let mut first = None;
        let r = s
            .write_all(load.requests.of(t))
            .and_then(|_| read_response(s, &mut buf, &mut first));
        let done = Instant::now();
        let body = match &r {
            Ok(r) if r.status == 200 && r.gzip == t.heavy && r.body > 0 => r.body,
            _ => 0,
        };
        if body == 0 {
            out.errors += 1;
            if !t.new_conn {
                keep = None;
            }
            continue;
        }
        if due >= w.from {
            let h = if t.heavy {
                &mut out.heavy
            } else {
                &mut out.cheap
            };
            record(h, corrected_latency(due, done));
            record(&mut out.ttfb, corrected_latency(due, first.unwrap_or(done)));
        }
        if done >= w.from && done < w.end {
            out.done += 1;
            if t.heavy {
                out.done_heavy += 1;
                out.heavy_body += body;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Prometheus histograms.

/// One histogram series from a Prometheus text page: cumulative counts at
/// ascending upper bounds, the last `+Inf`.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// `(le, cumulative count)`.
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    /// The unlabelled series of histogram `family` (samples
    /// `family_bucket{le="…"} N`) in `page`; `None` if it has none.
    pub fn parse(page: &str, family: &str) -> Option<Histogram> {
        let prefix = format!("{family}_bucket{{le=\"");
        let mut buckets: Vec<(f64, u64)> = page
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(&prefix)?;
                let (le, rest) = rest.split_once("\"}")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, rest.trim().parse::<f64>().ok()? as u64))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        (!buckets.is_empty()).then_some(Histogram { buckets })
    }

    /// What was recorded between `before` and `self` (same buckets).
    pub fn since(&self, before: &Histogram) -> Histogram {
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, n)| {
                    let was = before.buckets.iter().find(|b| b.0 == le).map_or(0, |b| b.1);
                    (le, n.saturating_sub(was))
                })
                .collect(),
        }
    }

    /// Both histograms' counts together (a bound only one has keeps its
    /// own count; the series of one family share their bounds).
    pub fn plus(&self, other: &Histogram) -> Histogram {
        let mut buckets = self.buckets.clone();
        for &(le, n) in &other.buckets {
            match buckets.iter_mut().find(|b| b.0 == le) {
                Some(b) => b.1 += n,
                None => buckets.push((le, n)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Histogram { buckets }
    }

    /// Samples counted.
    pub fn count(&self) -> u64 {
        self.buckets.last().map_or(0, |b| b.1)
    }

    /// Quantile `q` (0..=1) as Prometheus' `histogram_quantile` computes
    /// it: find the bucket holding rank `q × count`, interpolate linearly
    /// between its bounds (the first bucket's lower bound is 0); a rank in
    /// the `+Inf` bucket gives the largest finite bound. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let i = self.buckets.iter().position(|b| b.1 as f64 >= rank)?;
        let (upper, cum) = self.buckets[i];
        let (lower, prev) = if i == 0 {
            (0.0, 0)
        } else {
            self.buckets[i - 1]
        };
        if upper.is_infinite() {
            return Some(lower);
        }
        let n = cum - prev;
        if n == 0 {
            return Some(upper);
        }
        Some(lower + (upper - lower) * (rank - prev as f64) / n as f64)
    }
}

/// The value of one counter sample (`name{labels}` as the page writes
/// it) in a Prometheus text page; `None` if the page has no such sample.
pub fn counter_value(page: &str, sample: &str) -> Option<u64> {
    page.lines().find_map(|l| {
        let v = l.strip_prefix(sample)?.strip_prefix(' ')?;
        Some(v.trim().parse::<f64>().ok()? as u64)
    })
}

/// The CPU pool's raises between two scrapes: `None` if the pool had not
/// been used by the second (a pool first used within the window counts
/// from 0).
pub fn pool_raises(before: &str, after: &str) -> Option<u64> {
    const SAMPLE: &str = "duality_pool_raises_total{pool=\"duality-cpu\"}";
    let a = counter_value(after, SAMPLE)?;
    Some(a.saturating_sub(counter_value(before, SAMPLE).unwrap_or(0)))
}

/// `GET /metrics` from a metrics listener: the page's text.
pub fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut page = String::new();
    s.read_to_string(&mut page)?;
    Ok(page
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default())
}

/// The server-side p99s of one window from two scrapes (ms):
/// `(ttfb p99, accept p99, loop hold p99, loop hold p99.9)`.
pub fn server_quantiles(
    before: &str,
    after: &str,
) -> (Option<f64>, Option<f64>, Option<f64>, Option<f64>) {
    server_quantiles_over(&[(before.to_owned(), after.to_owned())])
}

/// [`server_quantiles`] of several windows together: each histogram's
/// counts between the two scrapes of every window, summed.
pub fn server_quantiles_over(
    windows: &[(String, String)],
) -> (Option<f64>, Option<f64>, Option<f64>, Option<f64>) {
    let delta = |family: &str| {
        windows
            .iter()
            .filter_map(|(before, after)| {
                let a = Histogram::parse(after, family)?;
                let b = Histogram::parse(before, family).unwrap_or(Histogram {
                    buckets: Vec::new(),
                });
                Some(a.since(&b))
            })
            .reduce(|x, y| x.plus(&y))
    };
    let q = |family: &str, q: f64| delta(family)?.quantile(q).map(|s| s * 1e3);
    (
        q("duality_request_ttfb_seconds", 0.99),
        q("duality_accept_latency_seconds", 0.99),
        q("duality_request_loop_hold_seconds", 0.99),
        q("duality_request_loop_hold_seconds", 0.999),
    )
}

// ---------------------------------------------------------------------------
// The experiment.

/// One run's settings.
pub struct Plan {
    /// The `duality` executable.
    pub exe: PathBuf,
    /// duality's `--model`.
    pub model: String,
    /// duality's `--cpu-threads` (`None`: its default).
    pub cpu_threads: Option<usize>,
    /// nginx's worker processes.
    pub nginx_workers: usize,
    /// Offered loads, percent of capacity.
    pub loads: Vec<u32>,
    /// Requests/s taken as capacity; `None`: probe `duality inline`.
    pub capacity: Option<f64>,
    /// The closed-loop probe's length.
    pub probe: Duration,
    /// Warm-up per row.
    pub warmup: Duration,
    /// Measured window per row.
    pub measure: Duration,
    /// Drain time after each window.
    pub drain: Duration,
    /// Client threads.
    pub clients: usize,
    /// Small files.
    pub small_files: usize,
    /// Heavy files.
    pub heavy_files: usize,
    /// Bytes per heavy file.
    pub heavy_bytes: usize,
    /// The mix's shares and seed (its file counts are set from the above).
    pub mix: Mix,
    /// Leave nginx out even if installed.
    pub no_nginx: bool,
    /// duality's `--gzip-level` (nginx's is 1; see [`NGINX_GZIP`]).
    pub gzip_level: u32,
    /// Slices the `adaptive` row and its no-heavy baseline are measured
    /// in, taking turns on the same server (A B, B A, …), each `measure /
    /// slices` long after its own warm-up; 1: one window each, one after
    /// the other.
    pub slices: u32,
}

/// nginx's additions for the experiment: gzip as duality's
/// `--gzip on --gzip-cache 0` does it (level 1, 256-byte minimum, JSON).
pub const NGINX_GZIP: &str = "    gzip on;
    gzip_comp_level 1;
    gzip_min_length 256;
    gzip_types application/json;
    types { text/html html; application/json json; }
";

/// What [`run`] found.
pub struct Report {
    /// Requests/s taken as capacity.
    pub capacity: f64,
    /// Whether it was probed (else given).
    pub probed: bool,
    /// The rows.
    pub rows: Vec<OffloadRow>,
}

/// Runs the experiment: starts the servers, warms them, probes the
/// capacity, then measures every server at every load; `progress` sees each
/// row. Every server is stopped at the end, also on error.
pub fn run(plan: &Plan, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Report> {
    let fd_limit = crate::http::raise_fd_limit();
    let root = TempDir::new("offload-www")?;
    let files = write_files(
        &root.0,
        plan.small_files,
        plan.heavy_files,
        plan.heavy_bytes,
    )?;
    let requests = Requests::new(&files);
    let mix = Mix {
        small: files.small.len(),
        heavy: files.heavy.len(),
        ..plan.mix.clone()
    };
    let mut servers: Vec<(&str, RunningServer)> = Vec::new();
    let cpu_threads = plan.cpu_threads.map(|n| n.to_string());
    let level = plan.gzip_level.to_string();
    for (label, policy) in [(INLINE, "inline"), (POOL, "pool"), (ADAPTIVE, "adaptive")] {
        let mut args = vec![
            "--model",
            &plan.model,
            "--gzip",
            "on",
            "--gzip-cache",
            "0",
            "--gzip-level",
            &level,
            "--offload",
            policy,
            "--metrics-listen",
            "127.0.0.1:0",
            "--long-poll-warn-ms",
            "0",
        ];
        if let Some(n) = &cpu_threads {
            args.extend(["--cpu-threads", n]);
        }
        servers.push((
            label,
            RunningServer::duality_with(&plan.exe, &root.0, &args)?,
        ));
    }
    match crate::http::find_nginx() {
        Some(_) if plan.no_nginx => {}
        Some(nginx) => {
            let s = RunningServer::nginx_with(
                &nginx,
                &root.0,
                plan.nginx_workers,
                fd_limit,
                NGINX_GZIP,
            )?;
            servers.push((NGINX, s));
        }
        None => {
            progress("nginx is not installed (apt-get install nginx-light): its rows are left out")
        }
    }
    let load = |addr, mix: &Mix, rate, warmup, measure| {
        let l = Load {
            addr,
            mix,
            first_ticket: 0,
            requests: &requests,
            rate,
            warmup,
            measure,
            clients: plan.clients,
            drain: plan.drain,
        };
        run_load(&l, &mut |_| {})
    };
    // Warm every server on the mix (caches, the adaptive policy's costs).
    for (label, s) in &servers {
        let o = load(s.addr, &mix, None, Duration::ZERO, plan.probe / 2);
        progress(&format!("warm-up {label}: {:.0} requests/s", o.rate()));
    }
    let (capacity, probed) = match plan.capacity {
        Some(c) => (c, false),
        None => {
            let o = load(servers[0].1.addr, &mix, None, plan.probe / 4, plan.probe);
            anyhow::ensure!(o.done > 0, "the capacity probe completed no request");
            (o.rate(), true)
        }
    };
    progress(&format!(
        "capacity ({}): {capacity:.0} requests/s",
        if probed {
            "closed-loop probe of duality inline"
        } else {
            "given"
        }
    ));
    let no_heavy = mix.without_heavy();
    let adaptive = &servers
        .iter()
        .find(|(l, _)| *l == ADAPTIVE)
        .expect("adaptive")
        .1;
    let slices = plan.slices.max(1);
    let mut rows = Vec::new();
    for &pct in &plan.loads {
        let rate = capacity * f64::from(pct) / 100.0;
        let window = |server: &RunningServer, m: &Mix, first_ticket: u64, measure: Duration| {
            let l = Load {
                addr: server.addr,
                mix: m,
                first_ticket,
                requests: &requests,
                rate: Some(rate),
                warmup: plan.warmup,
                measure,
                clients: plan.clients,
                drain: plan.drain,
            };
            let (mut before, mut after) = (String::new(), String::new());
            let o = run_load(&l, &mut |opening| {
                if let Some(a) = server.metrics {
                    let page = scrape(a).unwrap_or_default();
                    if opening {
                        before = page;
                    } else {
                        after = page;
                    }
                }
            });
            // Let the server take down the connections just reset.
            std::thread::sleep(Duration::from_millis(50));
            Measured {
                outcome: o,
                pages: server.metrics.map(|_| vec![(before, after)]),
                slices: Vec::new(),
            }
        };
        let mut push = |label: &str, m: Measured, progress: &mut dyn FnMut(&str)| {
            let server_q = m
                .pages
                .as_deref()
                .map_or((None, None, None, None), server_quantiles_over);
            let mut r = row(label, pct, rate, &m.outcome, server_q);
            if m.slices.len() > 1 {
                r.slice_cheap_p99_ms = m.slices;
            }
            r.pool_raises = m.pages.as_deref().and_then(|p| {
                p.iter()
                    .filter_map(|(b, a)| pool_raises(b, a))
                    .reduce(|x, y| x + y)
            });
            progress(&format!(
                "{pct}% ({rate:.0}/s) {label}: cheap p99 {:.2} ms, heavy p99 {} ms, {:.0} requests/s, {} errors",
                r.cheap_p99_ms,
                r.heavy_p99_ms.map_or("-".into(), |v| format!("{v:.2}")),
                r.requests_per_sec,
                r.errors
            ));
            rows.push(r);
        };
        for (label, server) in &servers {
            if *label != ADAPTIVE {
                let m = window(server, &mix, 0, plan.measure);
                push(label, m, progress);
                continue;
            }
            // The adaptive row and its no-heavy baseline take turns in
            // slices (A B, B A, A B, …) on the same server, so the host's
            // drift over the pair falls on both alike.
            let (mut with, mut without) = (Measured::empty(), Measured::empty());
            // Slice i measures the tickets a single window would have
            // measured in its i-th stretch: together, the same tickets (and
            // heavy ones) as every other row.
            let slice = plan.measure / slices;
            for i in 0..slices {
                let first = slice_first_ticket(slice, i, rate);
                let mut pair = [(ADAPTIVE, &mix), (NO_HEAVY, &no_heavy)];
                if i % 2 == 1 {
                    pair.reverse();
                }
                for (l, m) in pair {
                    let got = window(adaptive, m, first, slice);
                    if slices > 1 {
                        progress(&format!(
                            "{pct}% {l}, slice {}/{slices}: cheap p99 {:.2} ms",
                            i + 1,
                            pct_ms(&got.outcome.cheap, 0.99).unwrap_or(f64::NAN)
                        ));
                    }
                    if l == ADAPTIVE {
                        &mut with
                    } else {
                        &mut without
                    }
                    .add(got);
                }
            }
            push(ADAPTIVE, with, progress);
            push(NO_HEAVY, without, progress);
        }
    }
    drop(servers);
    Ok(Report {
        capacity,
        probed,
        rows,
    })
}

/// The first ticket of slice `i` (of slices `slice` long, at `rate`): its
/// tickets due after its warm-up are those a single window would have had
/// due in `[i × slice, (i + 1) × slice)` after the same warm-up.
pub fn slice_first_ticket(slice: Duration, i: u32, rate: f64) -> u64 {
    (slice.as_secs_f64() * f64::from(i) * rate).round() as u64
}

impl Outcome {
    /// Responses completed in the window per second.
    pub fn rate(&self) -> f64 {
        self.done as f64 / self.seconds.max(1e-9)
    }
}

fn pct_ms(h: &Hdr<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
}

/// A row from a load's outcome and the server's quantiles.
pub fn row(
    server: &str,
    load_pct: u32,
    rate: f64,
    o: &Outcome,
    (server_ttfb, accept, hold, hold999): (Option<f64>, Option<f64>, Option<f64>, Option<f64>),
) -> OffloadRow {
    let nan = f64::NAN;
    OffloadRow {
        server: server.into(),
        load_pct,
        rate,
        cheap_p50_ms: pct_ms(&o.cheap, 0.5).unwrap_or(nan),
        cheap_p99_ms: pct_ms(&o.cheap, 0.99).unwrap_or(nan),
        cheap_p999_ms: pct_ms(&o.cheap, 0.999).unwrap_or(nan),
        heavy_p50_ms: pct_ms(&o.heavy, 0.5),
        heavy_p99_ms: pct_ms(&o.heavy, 0.99),
        heavy_p999_ms: pct_ms(&o.heavy, 0.999),
        ttfb_p99_ms: pct_ms(&o.ttfb, 0.99).unwrap_or(nan),
        server_ttfb_p99_ms: server_ttfb,
        accept_p99_ms: accept,
        loop_hold_p99_ms: hold,
        loop_hold_p999_ms: hold999,
        requests_per_sec: o.rate(),
        heavy_per_sec: o.done_heavy as f64 / o.seconds.max(1e-9),
        heavy_body_kib: (o.done_heavy > 0)
            .then(|| o.heavy_body as f64 / o.done_heavy as f64 / 1024.0),
        errors: o.errors,
        unsent: o.unsent,
        pool_raises: None,
        slice_cheap_p99_ms: Vec::new(),
    }
}

// ---------------------------------------------------------------------------
// Reporting.

/// Milliseconds with enough digits for both 0.05 and 150.
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v < 1.0 {
        format!("{v:.3}")
    } else if v < 100.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), ms)
}

/// The Markdown table of every row.
pub fn table(rows: &[OffloadRow]) -> String {
    let header = [
        "load",
        "server",
        "offered req/s",
        "cheap p50 ms",
        "cheap p99 ms",
        "cheap p99.9 ms",
        "heavy p50 ms",
        "heavy p99 ms",
        "heavy p99.9 ms",
        "TTFB p99 ms (client)",
        "TTFB p99 ms (server)",
        "accept p99 ms (server)",
        "loop hold p99 ms",
        "loop hold p99.9 ms",
        "req/s",
        "heavy/s",
        "heavy body KiB",
        "errors",
        "pool raises",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut errors = r.errors.to_string();
            if r.unsent > 0 {
                errors.push_str(&format!(" ({} unsent)", r.unsent));
            }
            vec![
                format!("{}%", r.load_pct),
                r.server.clone(),
                crate::report::thousands(r.rate),
                ms(r.cheap_p50_ms),
                ms(r.cheap_p99_ms),
                ms(r.cheap_p999_ms),
                opt_ms(r.heavy_p50_ms),
                opt_ms(r.heavy_p99_ms),
                opt_ms(r.heavy_p999_ms),
                ms(r.ttfb_p99_ms),
                opt_ms(r.server_ttfb_p99_ms),
                opt_ms(r.accept_p99_ms),
                opt_ms(r.loop_hold_p99_ms),
                opt_ms(r.loop_hold_p999_ms),
                crate::report::thousands(r.requests_per_sec),
                format!("{:.1}", r.heavy_per_sec),
                r.heavy_body_kib.map_or("-".into(), |k| format!("{k:.0}")),
                errors,
                r.pool_raises.map_or("-".into(), |n| n.to_string()),
            ]
        })
        .collect();
    crate::report::markdown_table(&header, &body)
}

/// Reads one metric of a row (`None`: the server has no such metric).
pub type Metric = fn(&OffloadRow) -> Option<f64>;

/// The metrics compared with `inline` (the seed's figures: each p99 as a
/// percentage of the baseline's).
pub const RELATIVE: [(&str, Metric); 6] = [
    ("cheap p99", |r| Some(r.cheap_p99_ms)),
    ("heavy p99", |r| r.heavy_p99_ms),
    ("TTFB p99 (client)", |r| Some(r.ttfb_p99_ms)),
    ("accept p99", |r| r.accept_p99_ms),
    ("loop hold p99", |r| r.loop_hold_p99_ms),
    ("loop hold p99.9", |r| r.loop_hold_p999_ms),
];

/// `value` as a percentage of `base` (`None` unless both are positive).
pub fn percent_of(value: Option<f64>, base: Option<f64>) -> Option<f64> {
    match (value, base) {
        (Some(v), Some(b)) if v.is_finite() && b > 0.0 && b.is_finite() => Some(v / b * 100.0),
        _ => None,
    }
}

/// Per load, each server's metrics as a percentage of `duality inline`'s
/// at that load: `(load, server, [percent per RELATIVE entry])`.
pub fn relative(rows: &[OffloadRow]) -> Vec<(u32, String, Vec<Option<f64>>)> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.server != INLINE) {
        let Some(base) = rows
            .iter()
            .find(|b| b.server == INLINE && b.load_pct == r.load_pct)
        else {
            continue;
        };
        let v = RELATIVE
            .iter()
            .map(|(_, f)| percent_of(f(r), f(base)))
            .collect();
        out.push((r.load_pct, r.server.clone(), v));
    }
    out
}

/// The relative figures as a Markdown table.
pub fn relative_table(rows: &[OffloadRow]) -> String {
    let mut header = vec!["load", "server"];
    header.extend(RELATIVE.iter().map(|(n, _)| *n));
    let body: Vec<Vec<String>> = relative(rows)
        .into_iter()
        .map(|(load, server, v)| {
            let mut line = vec![format!("{load}%"), server];
            line.extend(
                v.iter()
                    .map(|p| p.map_or_else(|| "-".into(), |p| format!("{p:.0}%"))),
            );
            line
        })
        .collect();
    crate::report::markdown_table(&header, &body)
}

/// The rows as CSV (empty fields where a server has no such metric).
pub fn csv(rows: &[OffloadRow]) -> String {
    let mut s = String::from(
        "server,load_pct,rate,cheap_p50_ms,cheap_p99_ms,cheap_p999_ms,heavy_p50_ms,heavy_p99_ms,heavy_p999_ms,ttfb_p99_ms,server_ttfb_p99_ms,accept_p99_ms,loop_hold_p99_ms,loop_hold_p999_ms,requests_per_sec,heavy_per_sec,errors,unsent,pool_raises,heavy_body_kib\n",
    );
    // A figure not measured (no sample: NaN, or `None`) is an empty cell.
    let o = |v: Option<f64>| {
        v.filter(|v| v.is_finite())
            .map_or(String::new(), |v| format!("{v:.4}"))
    };
    for r in rows {
        s.push_str(&format!(
            "{},{},{:.1},{},{},{},{},{},{},{},{},{},{},{},{:.1},{:.2},{},{},{},{}\n",
            crate::report::csv_field(&r.server),
            r.load_pct,
            r.rate,
            o(Some(r.cheap_p50_ms)),
            o(Some(r.cheap_p99_ms)),
            o(Some(r.cheap_p999_ms)),
            o(r.heavy_p50_ms),
            o(r.heavy_p99_ms),
            o(r.heavy_p999_ms),
            o(Some(r.ttfb_p99_ms)),
            o(r.server_ttfb_p99_ms),
            o(r.accept_p99_ms),
            o(r.loop_hold_p99_ms),
            o(r.loop_hold_p999_ms),
            r.requests_per_sec,
            r.heavy_per_sec,
            r.errors,
            r.unsent,
            r.pool_raises.map_or(String::new(), |n| n.to_string()),
            o(r.heavy_body_kib),
        ));
    }
    s
}

/// One goal of issue 12 at one load.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Goal {
    /// The load, percent of capacity.
    pub load_pct: u32,
    /// What is compared.
    pub what: String,
    /// The measured ratio (`None`: a row it needs is missing).
    pub ratio: Option<f64>,
    /// The target, in words.
    pub target: String,
    /// Whether the ratio meets it.
    pub met: bool,
}

/// The goals, per load, computed from the rows:
/// 1. `adaptive` cheap p99 ≤ 1.2 × the same with no heavy requests (and,
///    where the two were measured in slices, the median over the slice
///    pairs of the same ratio);
/// 2. `inline` cheap p99 ≥ 10 × `adaptive`'s;
/// 3. `adaptive` heavy responses/s ≥ 0.95 × `inline`'s (not below it,
///    within the ±5% that a 1% share leaves to chance in a window);
/// 4. nginx's cheap p99 ≥ 5 × `adaptive`'s.
pub fn goals(rows: &[OffloadRow]) -> Vec<Goal> {
    let mut loads: Vec<u32> = rows.iter().map(|r| r.load_pct).collect();
    loads.dedup();
    let mut out = Vec::new();
    for load in loads {
        let at = |s: &str| rows.iter().find(|r| r.server == s && r.load_pct == load);
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if a.is_finite() && b.is_finite() && b > 0.0 => Some(a / b),
            _ => None,
        };
        let cheap = |s: &str| at(s).map(|r| r.cheap_p99_ms);
        let heavy = |s: &str| at(s).map(|r| r.heavy_per_sec);
        let mut goal = |what: &str, r: Option<f64>, target: &str, ok: fn(f64) -> bool| {
            out.push(Goal {
                load_pct: load,
                what: what.into(),
                ratio: r,
                target: target.into(),
                met: r.is_some_and(ok),
            })
        };
        goal(
            "adaptive cheap p99 / the same with no heavy requests",
            ratio(cheap(ADAPTIVE), cheap(NO_HEAVY)),
            "≤ 1.2",
            |r| r <= 1.2,
        );
        // The same per pair of slices measured side by side, the median
        // over the pairs: a stall of the host inside one slice (of either
        // row) decides the merged p99 of its row, not this figure.
        if let (Some(a), Some(b)) = (at(ADAPTIVE), at(NO_HEAVY)) {
            if !a.slice_cheap_p99_ms.is_empty()
                && a.slice_cheap_p99_ms.len() == b.slice_cheap_p99_ms.len()
            {
                let pairs: Vec<f64> = a
                    .slice_cheap_p99_ms
                    .iter()
                    .zip(&b.slice_cheap_p99_ms)
                    .filter_map(|(&x, &y)| ratio(Some(x), Some(y)))
                    .collect();
                goal(
                    &format!(
                        "the same, per slice pair: median of {} pairs' ratios",
                        pairs.len()
                    ),
                    median(pairs),
                    "≤ 1.2",
                    |r| r <= 1.2,
                );
            }
        }
        goal(
            "inline cheap p99 / adaptive cheap p99",
            ratio(cheap(INLINE), cheap(ADAPTIVE)),
            "≥ 10",
            |r| r >= 10.0,
        );
        goal(
            "adaptive heavy/s / inline heavy/s",
            ratio(heavy(ADAPTIVE), heavy(INLINE)),
            "≥ 0.95 (not below)",
            |r| r >= 0.95,
        );
        goal(
            "nginx gzip on cheap p99 / adaptive cheap p99",
            ratio(cheap(NGINX), cheap(ADAPTIVE)),
            "≥ 5",
            |r| r >= 5.0,
        );
    }
    out
}

/// The median of `v` (the mean of the middle two for an even count);
/// `None` when empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The goals as Markdown lines.
pub fn goals_text(goals: &[Goal]) -> String {
    let mut s = String::new();
    for g in goals {
        s.push_str(&format!(
            "- {}%: {} = {} (goal {}): **{}**\n",
            g.load_pct,
            g.what,
            g.ratio.map_or("-".into(), |r| format!("{r:.2}")),
            g.target,
            match (g.ratio, g.met) {
                (None, _) => "not measured",
                (_, true) => "met",
                (_, false) => "not met",
            }
        ));
    }
    s
}

/// Draws, per load, each server's p99s as a percentage of `inline`'s (the
/// seed's figures: 100% is the baseline) into `dir/offload-<load>.{png,svg}`.
pub fn plots(rows: &[OffloadRow], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let rel = relative(rows);
    let mut loads: Vec<u32> = rel.iter().map(|r| r.0).collect();
    loads.dedup();
    let categories: Vec<String> = RELATIVE.iter().map(|(n, _)| n.to_string()).collect();
    let mut written = Vec::new();
    for load in loads {
        let series: Vec<(String, Vec<Option<f64>>)> = rel
            .iter()
            .filter(|r| r.0 == load)
            .map(|r| (r.1.clone(), r.2.clone()))
            .collect();
        let (png, svg) = crate::plot::bar_chart(
            &dir.join(format!("offload-{load}")),
            &format!("p99s as % of duality inline's, {load}% of capacity (1% gzip requests)"),
            "% of inline (log scale; 100% = inline)",
            &categories,
            &series,
            100.0,
        )?;
        written.push(png);
        written.push(svg);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# TYPE duality_request_loop_hold_seconds histogram
duality_request_loop_hold_seconds_bucket{le=\"0.001\"} 90
duality_request_loop_hold_seconds_bucket{le=\"0.0025\"} 99
duality_request_loop_hold_seconds_bucket{le=\"0.005\"} 100
duality_request_loop_hold_seconds_bucket{le=\"+Inf\"} 100
duality_request_loop_hold_seconds_sum 0.05
duality_request_loop_hold_seconds_count 100
duality_loop_poll_seconds_bucket{loop=\"a\",le=\"0.001\"} 5
";

    #[test]
    fn histograms_parse_unlabelled_series_only() {
        let h = Histogram::parse(PAGE, "duality_request_loop_hold_seconds").unwrap();
        assert_eq!(
            h.buckets,
            [
                (0.001, 90),
                (0.0025, 99),
                (0.005, 100),
                (f64::INFINITY, 100)
            ]
        );
        assert_eq!(h.count(), 100);
        assert!(Histogram::parse(PAGE, "duality_loop_poll_seconds").is_none());
        assert!(Histogram::parse("", "x").is_none());
    }

    #[test]
    fn quantiles_interpolate_inside_buckets_as_prometheus_does() {
        let h = Histogram::parse(PAGE, "duality_request_loop_hold_seconds").unwrap();
        // Rank 50 of 100 lies in the first bucket (0..1 ms, 90 samples).
        let q50 = h.quantile(0.5).unwrap();
        assert!((q50 - 0.001 * 50.0 / 90.0).abs() < 1e-12, "{q50}");
        // Rank 99: the top of the second bucket.
        assert!((h.quantile(0.99).unwrap() - 0.0025).abs() < 1e-12);
        // Rank 99.5: half-way through the third (2.5..5 ms, one sample).
        assert!((h.quantile(0.995).unwrap() - 0.003_75).abs() < 1e-12);
        // A rank in +Inf gives the largest finite bound.
        let inf = Histogram {
            buckets: vec![(0.001, 1), (f64::INFINITY, 10)],
        };
        assert_eq!(inf.quantile(0.99), Some(0.001));
        let empty = Histogram {
            buckets: vec![(0.001, 0), (f64::INFINITY, 0)],
        };
        assert_eq!(empty.quantile(0.99), None);
    }

    #[test]
    fn a_window_is_the_difference_of_two_scrapes() {
        let after = Histogram::parse(PAGE, "duality_request_loop_hold_seconds").unwrap();
        let before = Histogram {
            buckets: vec![(0.001, 80), (0.0025, 80), (0.005, 80), (f64::INFINITY, 80)],
        };
        let d = after.since(&before);
        assert_eq!(
            d.buckets,
            [(0.001, 10), (0.0025, 19), (0.005, 20), (f64::INFINITY, 20)]
        );
        // 20 samples in the window: p99 (rank 19.8) is in 2.5..5 ms.
        assert!((d.quantile(0.99).unwrap() - (0.0025 + 0.0025 * 0.8)).abs() < 1e-12);
        let (ttfb, accept, hold, hold999) = server_quantiles("", PAGE);
        assert_eq!((ttfb, accept), (None, None));
        assert!((hold.unwrap() - 2.5).abs() < 1e-9);
        assert!((hold999.unwrap() - 4.75).abs() < 1e-9);
    }

    #[test]
    fn slices_merge_their_windows_counts() {
        // Two windows: all of PAGE's 100 samples, and 100 more, all in
        // 2.5..5 ms (scraped from 0 to 100 in every bucket up from 5 ms).
        let second = "duality_request_loop_hold_seconds_bucket{le=\"0.001\"} 0
duality_request_loop_hold_seconds_bucket{le=\"0.0025\"} 0
duality_request_loop_hold_seconds_bucket{le=\"0.005\"} 100
duality_request_loop_hold_seconds_bucket{le=\"+Inf\"} 100
";
        let family = "duality_request_loop_hold_seconds";
        let a = Histogram::parse(PAGE, family).unwrap();
        let b = Histogram::parse(second, family).unwrap();
        let sum = a.plus(&b);
        assert_eq!(
            sum.buckets,
            [
                (0.001, 90),
                (0.0025, 99),
                (0.005, 200),
                (f64::INFINITY, 200)
            ]
        );
        // A bound only one side has keeps its own count.
        let odd = Histogram {
            buckets: vec![(0.002, 7)],
        };
        assert_eq!(b.plus(&odd).buckets[1], (0.002, 7));
        let windows = [
            (String::new(), PAGE.to_owned()),
            (String::new(), second.to_owned()),
        ];
        let (_, _, hold, _) = server_quantiles_over(&windows);
        // p99 of 200 (rank 198) is in 2.5..5 ms: 99 below, 101 in it.
        let want = 2.5 + 2.5 * (198.0 - 99.0) / 101.0;
        assert!((hold.unwrap() - want).abs() < 1e-9, "{hold:?}");
        // One window alone: its own p99, not the pair's.
        assert!((server_quantiles("", PAGE).2.unwrap() - 2.5).abs() < 1e-9);
        assert_eq!(server_quantiles_over(&[]), (None, None, None, None));
    }

    #[test]
    fn slices_cover_the_single_windows_tickets_once() {
        // 1,000 requests/s, 1 s of warm-up (tickets 0..1000 unmeasured),
        // a 10 s row in 4 slices of 2.5 s: slice i measures its local
        // tickets 1000..3500, i.e. the schedule's 1000 + 2500 i onwards.
        let (rate, slice) = (1000.0, Duration::from_millis(2500));
        let measured: Vec<(u64, u64)> = (0..4)
            .map(|i| {
                let f = slice_first_ticket(slice, i, rate);
                (f + 1000, f + 3500)
            })
            .collect();
        assert_eq!(
            measured,
            [(1000, 3500), (3500, 6000), (6000, 8500), (8500, 11000)]
        );
        assert_eq!(slice_first_ticket(slice, 0, rate), 0);
    }

    #[test]
    fn the_mix_is_fixed_by_the_ticket_and_has_its_shares() {
        let mix = Mix {
            small: 100,
            heavy: 4,
            heavy_bp: 100,
            new_conn_pct: 10,
            seed: 7,
        };
        assert_eq!(mix.ticket(12345), mix.ticket(12345));
        let n = 100_000;
        let tickets: Vec<Ticket> = (0..n).map(|i| mix.ticket(i)).collect();
        let heavy = tickets.iter().filter(|t| t.heavy).count();
        let fresh = tickets.iter().filter(|t| t.new_conn).count();
        assert!((800..1200).contains(&heavy), "{heavy} heavy of {n}");
        assert!((9_000..11_000).contains(&fresh), "{fresh} new connections");
        assert!(tickets
            .iter()
            .all(|t| t.file < if t.heavy { 4 } else { 100 }));
        // Without heavy: the same connections, every ticket cheap.
        let cheap = mix.without_heavy();
        assert!((0..n)
            .all(|i| !cheap.ticket(i).heavy && cheap.ticket(i).new_conn == mix.ticket(i).new_conn));
    }

    #[test]
    fn chunked_bodies_end_at_the_last_chunk_and_trailer() {
        let body = b"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n";
        assert_eq!(chunked_end(body), Ok(Some((body.len(), 8))));
        assert_eq!(chunked_end(&body[..body.len() - 1]), Ok(None));
        assert_eq!(chunked_end(&body[..7]), Ok(None));
        assert_eq!(chunked_end(b"0\r\nX-T: 1\r\n\r\n"), Ok(Some((13, 0))));
        assert_eq!(chunked_end(b"zz\r\n"), Err(BadChunk));
        assert_eq!(chunked_end(b"2\r\nabXY"), Err(BadChunk));
    }

    #[test]
    fn pool_raises_are_a_counter_difference() {
        let page = |n: u64| {
            format!(
                "# TYPE duality_pool_raises_total counter\n\
                 duality_pool_raises_total{{pool=\"duality-blocking\"}} 99\n\
                 duality_pool_raises_total{{pool=\"duality-cpu\"}} {n}\n"
            )
        };
        assert_eq!(pool_raises(&page(3), &page(7)), Some(4));
        // The pool first used inside the window: counted from 0.
        assert_eq!(pool_raises("", &page(2)), Some(2));
        // No CPU pool (inline) or no metrics at all.
        assert_eq!(pool_raises("", "duality_connections 3\n"), None);
        assert_eq!(pool_raises("", ""), None);
        assert_eq!(
            counter_value(
                &page(5),
                "duality_pool_raises_total{pool=\"duality-blocking\"}"
            ),
            Some(99)
        );
    }

    fn r(server: &str, load: u32, cheap: f64, heavy_s: f64) -> OffloadRow {
        OffloadRow {
            server: server.into(),
            load_pct: load,
            rate: 1000.0,
            cheap_p50_ms: cheap / 4.0,
            cheap_p99_ms: cheap,
            cheap_p999_ms: cheap * 2.0,
            heavy_p50_ms: Some(10.0),
            heavy_p99_ms: Some(20.0),
            heavy_p999_ms: Some(30.0),
            ttfb_p99_ms: cheap,
            server_ttfb_p99_ms: (server != NGINX).then_some(0.1),
            accept_p99_ms: (server != NGINX).then_some(0.05),
            loop_hold_p99_ms: (server != NGINX).then_some(0.02),
            loop_hold_p999_ms: (server != NGINX).then_some(if server == INLINE {
                15.0
            } else {
                0.5
            }),
            requests_per_sec: 1000.0,
            heavy_per_sec: heavy_s,
            heavy_body_kib: Some(400.0),
            errors: 0,
            unsent: 0,
            pool_raises: None,
            slice_cheap_p99_ms: Vec::new(),
        }
    }

    #[test]
    fn goals_are_computed_from_the_rows() {
        let rows = vec![
            r(INLINE, 80, 20.0, 10.0),
            r(POOL, 80, 1.0, 10.0),
            r(ADAPTIVE, 80, 1.1, 9.6),
            r(NO_HEAVY, 80, 1.0, 0.0),
            r(NGINX, 80, 30.0, 10.0),
        ];
        let g = goals(&rows);
        assert_eq!(g.len(), 4);
        assert!(g.iter().all(|g| g.met), "{g:?}");
        assert!((g[0].ratio.unwrap() - 1.1).abs() < 1e-9);
        assert!((g[1].ratio.unwrap() - 20.0 / 1.1).abs() < 1e-9);
        // Slower adaptive, no nginx: goals fail or are not measured.
        let rows = vec![
            r(INLINE, 50, 5.0, 10.0),
            r(ADAPTIVE, 50, 2.0, 9.0),
            r(NO_HEAVY, 50, 1.0, 0.0),
        ];
        let g = goals(&rows);
        assert_eq!(g.iter().filter(|g| g.met).count(), 0, "{g:?}");
        assert_eq!(g[3].ratio, None);
        let text = goals_text(&g);
        assert!(text.contains("- 50%: adaptive cheap p99 / the same with no heavy requests = 2.00 (goal ≤ 1.2): **not met**"), "{text}");
        assert!(text.contains("**not measured**"), "{text}");
        // Measured in slices: one stalled slice (5 ms) decides the merged
        // p99 (2.0 against 1.0), not the median of the pairs' ratios
        // (1.1, 1.2, 0.1, 1.15: 1.125).
        let mut a = r(ADAPTIVE, 50, 2.0, 9.0);
        a.slice_cheap_p99_ms = vec![0.22, 0.24, 0.5, 0.23];
        let mut b = r(NO_HEAVY, 50, 1.0, 0.0);
        b.slice_cheap_p99_ms = vec![0.2, 0.2, 5.0, 0.2];
        let g = goals(&[r(INLINE, 50, 5.0, 10.0), a, b]);
        assert_eq!(g.len(), 5, "{g:?}");
        assert!(!g[0].met && g[1].met, "{g:?}");
        assert!((g[1].ratio.unwrap() - 1.125).abs() < 1e-9, "{g:?}");
        assert!(goals_text(&g).contains(
            "- 50%: the same, per slice pair: median of 4 pairs' ratios = 1.12 (goal ≤ 1.2): **met**"
        ));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(Vec::new()), None);
    }

    #[test]
    fn relative_figures_are_percentages_of_inline_at_the_same_load() {
        let rows = vec![
            r(INLINE, 50, 20.0, 10.0),
            r(ADAPTIVE, 50, 1.0, 10.0),
            r(NGINX, 50, 40.0, 10.0),
            r(ADAPTIVE, 80, 1.0, 10.0),
        ];
        let rel = relative(&rows);
        assert_eq!(rel.len(), 2, "no inline at 80%: no figures");
        assert_eq!(rel[0].2[0], Some(5.0));
        assert!((rel[0].2[5].unwrap() - 0.5 / 15.0 * 100.0).abs() < 1e-9);
        assert_eq!(rel[1].2[0], Some(200.0));
        assert_eq!(rel[1].2[3], None, "nginx has no accept metric");
        let t = relative_table(&rows);
        assert!(
            t.contains("| 50% | duality adaptive | 5% | 100% | 5% |"),
            "{t}"
        );
        assert!(
            t.contains("| 50% | nginx gzip on | 200% | 100% | 200% | - |"),
            "{t}"
        );
        assert_eq!(percent_of(Some(1.0), Some(0.0)), None);
    }

    #[test]
    fn table_and_csv_shapes() {
        let rows = vec![r(INLINE, 50, 20.0, 10.0), r(NGINX, 50, 40.0, 10.0)];
        let t = table(&rows);
        assert!(
            t.contains("| 50% | duality inline | 1,000 | 5.00 | 20.00 | 40.00 |"),
            "{t}"
        );
        assert!(
            t.contains("| 0.100 | 0.050 | 0.020 | 15.00 | 1,000 | 10.0 | 400 | 0 |"),
            "{t}"
        );
        assert!(
            t.contains("| nginx gzip on |") && t.contains("| - | - | - | - |"),
            "{t}"
        );
        let c = csv(&rows);
        assert_eq!(c.lines().count(), 3);
        assert!(
            c.lines()
                .all(|l| l.ends_with("heavy_body_kib") || l.ends_with(",400.0000")),
            "{c}"
        );
        assert!(
            c.lines().nth(2).unwrap().contains(",40.0000,,,,,1000.0,"),
            "{c}"
        );
        // A server that answered nothing has no latencies: empty cells,
        // as every figure not measured (it wrote `NaN`).
        let mut silent = r(NGINX, 50, f64::NAN, 10.0);
        silent.cheap_p50_ms = f64::NAN;
        silent.cheap_p999_ms = f64::NAN;
        silent.ttfb_p99_ms = f64::NAN;
        let c = csv(&[silent]);
        assert!(!c.contains("NaN"), "{c}");
        assert!(
            c.lines()
                .nth(1)
                .unwrap()
                .starts_with("nginx gzip on,50,1000.0,,,,"),
            "{c}"
        );
        assert_eq!(ms(0.0123), "0.012");
        assert_eq!(ms(12.345), "12.35");
        assert_eq!(ms(1234.6), "1235");
    }

    #[test]
    fn files_have_their_sizes_and_the_json_compresses() {
        let d = TempDir::new("offload-files-test").unwrap();
        let f = write_files(&d.0, 3, 1, 100_000).unwrap();
        for s in &f.small {
            let n = std::fs::metadata(d.0.join(s)).unwrap().len();
            assert!((1024..4096).contains(&n), "{s}: {n}");
        }
        let big = std::fs::read(d.0.join(&f.heavy[0])).unwrap();
        assert!(big.len() >= 100_000 && big.len() < 100_200);
        assert!(big.starts_with(b"[\n{\"id\":0,") && big.ends_with(b"{}]\n"));
    }
}
