//! The driver's answers that are not bytes alone, under every model: shared
//! bodies, responses finished on the connection's loop, and its timeouts —
//! through a small line protocol written for these tests.

use duality_models::session::{Output, Reply, Timeout};
use duality_models::{Driver, DriverConfig, Flow, Linger, Parsed, Protocol, ServerBuilder};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MODELS: [&str; 9] = [
    "sped",
    "amped:1",
    "amped:2",
    "seda:2:1",
    "seda-s:1",
    "seda:2:1/adaptive",
    "symped:2",
    "steal:2",
    "thread-per-conn",
];

const SHARED: &[u8] = b"a body sent from where it lies\n";

/// Lines: `echo X` → `X`; `share` → `S:` and a shared body; `later X` →
/// finished on the loop after a blocking job: `L:` and X upper-cased;
/// `big N` → N bytes of `x` and a newline; `body N` → the N bytes after
/// the line, received by `finish` itself, echoed as `B:` and a newline
/// (`body-timeout` and close if they do not come in time); `bye` → `bye`,
/// then close.
#[derive(Default)]
struct Lines {
    timeouts: [AtomicUsize; 3],
    lingers: AtomicUsize,
}

impl Lines {
    fn count(&self, which: Timeout) -> usize {
        self.timeouts[which as usize].load(SeqCst)
    }
}

impl Protocol for Lines {
    type Session = ();
    type Request<'a> = &'a [u8];

    fn max_request(&self) -> usize {
        1024
    }

    fn parse<'a>(&self, _: &mut (), input: &'a [u8]) -> Parsed<&'a [u8]> {
        match input.iter().position(|&b| b == b'\n') {
            Some(i) => Parsed::Request(&input[..i], i + 1),
            None => Parsed::Incomplete(0),
        }
    }

    fn execute(&self, _: &mut (), line: &[u8], out: &mut Output) -> Flow {
        let (verb, arg) = match line.iter().position(|&b| b == b' ') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        match verb {
            b"echo" => {
                out.extend_from_slice(arg);
                out.push(b'\n');
            }
            b"share" => {
                out.extend_from_slice(b"S:");
                out.share(Arc::from(SHARED), 0..SHARED.len());
            }
            b"later" | b"body" => return Flow::Finish(0),
            b"big" => {
                let n: usize = std::str::from_utf8(arg).unwrap().parse().unwrap();
                let len = out.len() + n;
                out.resize(len, b'x');
                out.push(b'\n');
            }
            _ => {
                out.extend_from_slice(b"bye\n");
                return Flow::Close;
            }
        }
        Flow::Continue
    }

    async fn finish<'a>(
        &'a self,
        _: &'a mut (),
        request: &'a [u8],
        _: u32,
        mut reply: Reply<'a>,
    ) -> Flow {
        if let Some(n) = request.strip_prefix(b"body ") {
            let n: usize = std::str::from_utf8(&n[..n.len() - 1])
                .unwrap()
                .parse()
                .unwrap();
            // Read in pieces of at most 1000 bytes: several reads, some
            // from what the driver buffered, some from the socket.
            let mut body = vec![0; n];
            for piece in body.chunks_mut(1000) {
                match reply.read_exact(piece).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                        reply.out().extend_from_slice(b"body-timeout\n");
                        return Flow::Close;
                    }
                    Err(_) => return Flow::Close,
                }
            }
            reply.out().extend_from_slice(b"B:");
            reply.out().extend_from_slice(&body);
            reply.out().push(b'\n');
            return Flow::Continue;
        }
        // The bytes parse consumed for the request, newline included.
        let arg = request
            .strip_prefix(b"later ")
            .and_then(|r| r.strip_suffix(b"\n"))
            .unwrap()
            .to_vec();
        let up = reply
            .payload()
            .blocking(move || arg.to_ascii_uppercase())
            .await
            .unwrap();
        reply.out().extend_from_slice(b"L:");
        reply.out().extend_from_slice(&up);
        reply.out().push(b'\n');
        // Half through a flush, half left for the driver to write.
        reply.flush().await.unwrap();
        reply.out().extend_from_slice(b"+\n");
        Flow::Continue
    }

    fn timed_out(&self, _: &mut (), which: Timeout, _: &[u8], out: &mut Output) {
        self.timeouts[which as usize].fetch_add(1, SeqCst);
        if which == Timeout::Request {
            out.extend_from_slice(b"timeout\n");
        }
    }

    fn linger(&self, _: &(), unread: bool) -> Option<Linger> {
        self.lingers.fetch_add(1, SeqCst);
        unread.then(Linger::default)
    }
}

fn serve(model: &str, cfg: DriverConfig) -> (duality_models::Server, Arc<Driver<Lines>>) {
    let (m, h) = match model.split_once('/') {
        Some((m, h)) => (m, h.parse().unwrap()),
        None => (model, duality_models::Handoff::Always),
    };
    let driver = Driver::new(Lines::default(), cfg);
    let d = driver.clone();
    let server = ServerBuilder::new()
        .model(m.parse().unwrap())
        .handoff(h)
        .tcp("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .serve(move |c, p| duality_models::drive(c, p, d.clone()))
        .unwrap();
    (server, driver)
}

fn connect(a: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn read_to_end(mut s: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    got
}

/// What arrives until the end of the stream or a reset (a client that
/// wrote after the server closed may get one: what came before counts).
fn read_until_closed(mut s: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Waits (at most 10 s) until `f` holds.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < until, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn finished_and_shared_responses_keep_request_order() {
    for model in MODELS {
        let (server, _) = serve(model, DriverConfig::default());
        let mut s = connect(server.tcp_addrs()[0]);
        // One write: the driver meets every kind in one read.
        s.write_all(b"echo a\nlater b\nshare\necho c\nlater d\nshare\nbye\n")
            .unwrap();
        let got = read_to_end(s);
        let want = [
            &b"a\nL:B\n+\nS:"[..],
            SHARED,
            b"c\nL:D\n+\nS:",
            SHARED,
            b"bye\n",
        ]
        .concat();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{model}"
        );
        // And one request per write, each waiting for its answer.
        let mut s = connect(server.tcp_addrs()[0]);
        for (req, want) in [
            (&b"later x\n"[..], &b"L:X\n+\n"[..]),
            (b"share\n", &[&b"S:"[..], SHARED].concat()),
            (b"echo y\n", b"y\n"),
        ] {
            s.write_all(req).unwrap();
            let mut r = vec![0; want.len()];
            s.read_exact(&mut r).unwrap();
            assert_eq!(r, want, "{model}");
        }
    }
}

#[test]
fn a_request_that_never_completes_is_answered_at_its_deadline() {
    let cfg = DriverConfig {
        request_timeout: Some(Duration::from_millis(300)),
        ..DriverConfig::default()
    };
    for model in MODELS {
        let (server, driver) = serve(model, cfg);
        let a = server.tcp_addrs()[0];
        // A whole request first, then one dribbled a byte at a time: the
        // deadline counts from its first byte, not from the last read.
        let mut s = connect(a);
        s.write_all(b"echo 1\n").unwrap();
        let t0 = Instant::now();
        for b in b"echo never" {
            // Past the deadline the server has closed: writes may fail.
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let got = read_until_closed(s);
        assert_eq!(got, b"1\ntimeout\n", "{model}");
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "{model}: cut off after {took:?}"
        );
        assert_eq!(driver.protocol().count(Timeout::Request), 1, "{model}");
        // No idle timeout configured: an idle connection stays, a new one
        // and one whose earlier request arrived in pieces alike.
        let mut idle = connect(a);
        let mut pieces = connect(a);
        pieces.write_all(b"echo in ").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        pieces.write_all(b"pieces\n").unwrap();
        let mut r = [0; 10];
        pieces.read_exact(&mut r).unwrap();
        assert_eq!(&r, b"in pieces\n", "{model}");
        std::thread::sleep(Duration::from_millis(400));
        for c in [&mut idle, &mut pieces] {
            c.write_all(b"echo still\n").unwrap();
            let mut r = [0; 6];
            c.read_exact(&mut r).unwrap();
            assert_eq!(&r, b"still\n", "{model}");
        }
    }
}

/// A body `finish` receives itself comes whole, in order, from the bytes
/// the driver had buffered and then from the socket, and the requests after
/// it are served from where it ended; one that does not come in time is cut
/// off at the request timeout.
#[test]
fn a_body_finish_reads_itself_leaves_what_follows() {
    let cfg = DriverConfig {
        request_timeout: Some(Duration::from_millis(300)),
        ..DriverConfig::default()
    };
    let body: Vec<u8> = (0..30_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    for model in MODELS {
        let (server, _) = serve(model, cfg);
        let a = server.tcp_addrs()[0];
        let mut s = connect(a);
        // All buffered, a request behind it in the same write.
        s.write_all(b"body 5\nhelloecho x\nbody 0\necho y\n")
            .unwrap();
        let mut r = [0; 15];
        s.read_exact(&mut r).unwrap();
        assert_eq!(&r, b"B:hello\nx\nB:\ny\n", "{model}");
        // Part buffered, the rest in pieces, the next request in the last.
        let mut req = format!("body {}\n", body.len()).into_bytes();
        req.extend_from_slice(&body);
        req.extend_from_slice(b"echo z\n");
        for piece in req.chunks(7_000) {
            s.write_all(piece).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut want = b"B:".to_vec();
        want.extend_from_slice(&body);
        want.extend_from_slice(b"\nz\n");
        let mut got = vec![0; want.len()];
        s.read_exact(&mut got).unwrap();
        assert!(got == want, "{model}: a body in pieces");
        // Never all sent: cut off at the request timeout.
        let t0 = Instant::now();
        s.write_all(b"body 10\nabc").unwrap();
        assert_eq!(read_until_closed(s), b"body-timeout\n", "{model}");
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(5),
            "{model}: cut off after {took:?}"
        );
    }
}

#[test]
fn idle_connections_close_after_the_idle_timeout() {
    let cfg = DriverConfig {
        idle_timeout: Some(Duration::from_millis(200)),
        ..DriverConfig::default()
    };
    for model in MODELS {
        let (server, driver) = serve(model, cfg);
        let a = server.tcp_addrs()[0];
        let silent = connect(a);
        let mut served = connect(a);
        served.write_all(b"echo once\n").unwrap();
        let mut r = [0; 5];
        served.read_exact(&mut r).unwrap();
        assert_eq!(read_to_end(silent), b"", "{model}");
        assert_eq!(read_to_end(served), b"", "{model}");
        eventually("two idle timeouts counted", || {
            driver.protocol().count(Timeout::Idle) == 2
        });
    }
}

/// `idle_timeout` bounds the wait for a request's first byte only: a
/// request partly in (no `request_timeout`) waits on, in every model
/// (under thread-per-conn the idle wait's socket timeout cut it off).
#[test]
fn the_idle_timeout_does_not_cut_a_partial_request() {
    let cfg = DriverConfig {
        idle_timeout: Some(Duration::from_millis(200)),
        ..DriverConfig::default()
    };
    for model in MODELS {
        let (server, _driver) = serve(model, cfg);
        let mut c = connect(server.tcp_addrs()[0]);
        c.write_all(b"echo sl").unwrap();
        std::thread::sleep(Duration::from_millis(500));
        c.write_all(b"ow\n").unwrap();
        let mut r = [0; 5];
        c.read_exact(&mut r).unwrap();
        assert_eq!(&r, b"slow\n", "{model}");
    }
}

#[test]
fn a_client_that_never_reads_is_cut_off_by_the_write_timeout() {
    let cfg = DriverConfig {
        write_timeout: Some(Duration::from_millis(300)),
        ..DriverConfig::default()
    };
    for model in ["symped:2", "amped:1", "thread-per-conn"] {
        let (server, driver) = serve(model, cfg);
        let mut s = connect(server.tcp_addrs()[0]);
        // Far more than the socket buffers hold, never read.
        s.write_all(b"big 60000000\n").unwrap();
        eventually("a write timeout", || {
            driver.protocol().count(Timeout::Write) == 1
        });
        drop(s);
    }
}

#[test]
fn a_close_with_unread_bytes_lingers_and_the_answer_arrives() {
    for model in ["sped", "amped:1", "thread-per-conn"] {
        let (server, driver) = serve(model, DriverConfig::default());
        let mut s = connect(server.tcp_addrs()[0]);
        // Requests behind the one that closes: unread, so the close lingers
        // (a plain close would reset, and could destroy the answer).
        let mut reqs = b"bye\n".to_vec();
        reqs.extend(std::iter::repeat_n(b'z', 40_000));
        s.write_all(&reqs).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_to_end(s), b"bye\n", "{model}");
        assert_eq!(driver.protocol().lingers.load(SeqCst), 1, "{model}");
    }
}
