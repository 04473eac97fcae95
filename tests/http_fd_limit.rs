//! `duality http` under a small descriptor limit (`ulimit -n 64`): its
//! default `--max-conns` follows the limit (32 + 2 x 14 + 4 lingering
//! refusals = 64: 14), and 40 clients connected at once each get a whole
//! answer — the file (200) for at most 14, a clean refusal (503) for the
//! others — never a 500 or a
//! silent close; afterwards it serves again. And a burst far past the
//! limit leaves every admitted connection its file (on io_uring too, whose
//! multishot accept would take the whole backlog at once).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_small_descriptor_limit_gives_200_or_503_never_500() {
    let root = std::env::temp_dir().join(format!("duality-fdlimit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    // Above the page cache's per-file limit: each request opens the file.
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &body).unwrap();

    let server = Limited::start(&root, 64, &["--model", "symped:2"]);
    let (addr, serving) = (server.addr.clone(), server.first.clone());
    assert!(
        serving.contains("max 14 connections"),
        "the default follows the limit: {serving:?}"
    );
    // The connections' two descriptors each leave none to keep files open.
    assert!(
        serving.contains(" 0 files kept open"),
        "no room for open files: {serving:?}"
    );

    // All 40 connect before any asks: the first 14 stay open, so the rest
    // meet the limit (the refusal is written as they are accepted).
    let conns: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // All accepted: the 26 past the limit have their refusal to read.
    let refusal_came = |s: &TcpStream| {
        s.set_nonblocking(true).unwrap();
        let r = s.peek(&mut [0u8; 1]);
        s.set_nonblocking(false).unwrap();
        matches!(r, Ok(n) if n > 0)
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = conns.iter().filter(|s| refusal_came(s)).count();
        if n >= 26 {
            break;
        }
        assert!(std::time::Instant::now() < until, "{n} refusals in 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let clients: Vec<_> = conns
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                // A refused connection may be closed already: its 503 waits
                // to be read all the same.
                let _ =
                    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                got
            })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for c in clients {
        let got = c.join().unwrap();
        let head_end = got
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no whole answer: {:?}", String::from_utf8_lossy(&got)));
        let head = String::from_utf8_lossy(&got[..head_end]);
        if head.starts_with("HTTP/1.1 200") {
            assert!(got[head_end + 4..] == body[..], "a whole body");
            ok += 1;
        } else if head.starts_with("HTTP/1.1 503") {
            refused += 1;
        } else {
            panic!("neither 200 nor 503: {head}");
        }
    }
    assert!(
        (1..=14).contains(&ok) && refused >= 26,
        "{ok} served, {refused} refused"
    );
    assert_eq!(ok + refused, 40);

    // The limit passed, it serves again.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert!(got.starts_with(b"HTTP/1.1 200"));

    let said = server.stop();
    assert!(!said.contains("panicked"), "{said}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `duality http` under `ulimit -n LIMIT`: its address, its first log line
/// and, once stopped, the rest of what it logged.
struct Limited {
    child: std::process::Child,
    addr: String,
    first: String,
    said: Option<std::thread::JoinHandle<String>>,
}

impl Limited {
    fn start(root: &std::path::Path, limit: u32, extra: &[&str]) -> Limited {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_duality"))
            .args(["http", "--listen", "127.0.0.1:0"])
            .args(extra)
            .arg("--root")
            .arg(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start duality http under sh");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        let mut first = String::new();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        stderr.read_line(&mut first).unwrap();
        // The rest, read to its end (a closed pipe would make the server's
        // next log line fail).
        let said = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stderr.read_to_string(&mut rest);
            rest
        });
        let Some(addr) = ready
            .trim()
            .strip_prefix("ready http://")
            .map(str::to_owned)
        else {
            // It did not start: why is on its standard error and in its
            // exit status (a shell that could not set the limit included).
            let _ = child.kill();
            let status = child.wait();
            let rest = said.join().unwrap_or_default();
            panic!(
                "no ready line from {extra:?} under ulimit -n {limit}: {ready:?}; \
                 it said {first:?} {rest:?} ({status:?})"
            );
        };
        Limited {
            child,
            addr,
            first,
            said: Some(said),
        }
    }

    /// Stops it with SIGTERM; returns what it logged after its first line.
    fn stop(mut self) -> String {
        // SAFETY: kill sends SIGTERM to our own child by its PID.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        self.said
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or_default()
    }
}

impl Drop for Limited {
    /// A test that fails before `stop` leaves no server behind (`kill`
    /// does nothing to a child already waited for).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` clients that each ask for /big.bin as soon as they are connected
/// and read nothing until all are: how many got 200 and how many 503.
fn burst(addr: &str, n: usize, io: &str) -> (usize, usize) {
    burst_for(addr, "/big.bin", n, io)
}

/// [`burst`] for the file at `path`.
fn burst_for(addr: &str, path: &str, n: usize, io: &str) -> (usize, usize) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
    // Each asks as soon as it is connected and reads nothing yet, as a
    // crowd of real clients would.
    let mut conns: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            let _ = s.write_all(request.as_bytes());
            s
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    // All stay open until every one has its answer.
    for s in &mut conns {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut status = [0u8; 12];
        match s.read_exact(&mut status) {
            Ok(()) if status.starts_with(b"HTTP/1.1 200") => ok += 1,
            Ok(()) if status.starts_with(b"HTTP/1.1 503") => refused += 1,
            r => panic!("{io}: neither 200 nor 503: {r:?} {status:?}"),
        }
    }
    (ok, refused)
}

/// A root holding big.bin: larger than the socket buffers of a client that
/// does not read, so every admitted connection holds its file open; sparse,
/// so cheap.
fn big_file_root(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("duality-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let f = std::fs::File::create(root.join("big.bin")).unwrap();
    f.set_len(32 << 20).unwrap();
    root
}

#[test]
fn a_burst_past_the_limit_leaves_every_admitted_connection_its_file() {
    let root = big_file_root("fdburst");
    for io in ["uring", "epoll"] {
        let server = Limited::start(&root, 128, &["--model", "symped:2", "--io", io]);
        let (addr, serving) = (&server.addr, &server.first);
        assert!(serving.contains("max 45 connections"), "{serving:?}");
        // Every admitted connection got its file: none was refused for
        // want of a descriptor that refusals were holding.
        assert_eq!(burst(addr, 300, io), (45, 255), "{io}: 200s and 503s");
        let said = server.stop();
        assert!(!said.contains("panicked"), "{said}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A --max-conns the descriptor limit cannot hold is lowered to what it
/// holds and said at start (nginx only warns: "worker_connections exceed
/// open file resource limit"), so a burst still leaves every admitted
/// connection its file. Taken as asked, the burst's connections took every
/// descriptor and no file could be opened: all 503, some never accepted.
#[test]
fn max_conns_past_the_descriptor_limit_is_lowered_and_said_at_start() {
    let root = big_file_root("fdwarn");
    for io in ["uring", "epoll"] {
        let args = ["--max-conns", "100", "--model", "sped", "--io", io];
        let server = Limited::start(&root, 64, &args);
        let (addr, first) = (&server.addr, &server.first);
        assert!(
            first.contains("warning: --max-conns 100 takes up to 244 descriptors")
                && first.contains("taking at most 14 connections"),
            "{first:?}"
        );
        assert_eq!(burst(addr, 60, io), (14, 46), "{io}: 200s and 503s");
        let said = server.stop();
        assert!(said.contains("max 14 connections"), "{said}");
        assert!(!said.contains("panicked"), "{said}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A client that pipelines, half-closes, reads a while and then stops,
/// still connected, is cut at the write timeout and its descriptor given
/// back. Under io_uring its socket was never let go (a send to a
/// half-closed peer, or one waiting behind its resend delay, escaped the
/// cancel at the close): a descriptor, the socket and its queued bytes per
/// such client, for as long as it stayed.
#[test]
fn a_half_closed_client_that_stops_reading_gives_its_descriptor_back() {
    let root = big_file_root("fdhalf");
    std::fs::write(root.join("f.bin"), vec![5u8; 60_000]).unwrap();
    for io in ["uring", "epoll"] {
        let server = Limited::start(&root, 256, &["--write-timeout", "1", "--io", io]);
        // All but the root's directory, which stays open once a request
        // has looked a file up.
        let root_dir = std::fs::canonicalize(&root).unwrap();
        let fds = || {
            std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| *l != root_dir)
                .count()
        };
        let before = fds();
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(64 << 10).unwrap();
        sock.connect(&server.addr.parse::<std::net::SocketAddr>().unwrap().into())
            .unwrap();
        let mut c: TcpStream = sock.into();
        c.write_all(&b"GET /f.bin HTTP/1.1\r\nHost: t\r\n\r\n".repeat(300))
            .unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut chunk = vec![0u8; 64 << 10];
        let mut got = 0;
        while got < 2 << 20 {
            got += c.read(&mut chunk).unwrap();
            if got % (1 << 20) < chunk.len() {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // Stopped, connected: cut 1-1.25 s on, and its descriptor closed.
        let until = std::time::Instant::now() + Duration::from_secs(4);
        while fds() > before {
            assert!(
                std::time::Instant::now() < until,
                "{io}: {} descriptors, {before} before the client came",
                fds()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(c);
        let said = server.stop();
        assert!(!said.contains("panicked"), "{said}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A --max-conns past a file each but within one descriptor each, the
/// refusals and a shared room for files is taken as asked, with a warning
/// (nginx's way; seed 000's 16,384 clients under a 20,000 limit): at
/// `ulimit -n` 256, 150 connections (a file each would take 350), and 140
/// clients of a small file, more than a file each would admit (105), all
/// get it — from the page cache, which holds no descriptor of theirs.
#[test]
fn a_max_conns_past_a_file_each_is_taken_with_a_warning() {
    let root = big_file_root("fdshared");
    std::fs::write(root.join("small.txt"), b"small and cached\n").unwrap();
    for io in ["uring", "epoll"] {
        let args = ["--max-conns", "150", "--model", "sped", "--io", io];
        let server = Limited::start(&root, 256, &args);
        let (addr, first) = (&server.addr, &server.first);
        assert!(
            first.contains("warning: --max-conns 150 takes up to 350 descriptors when every"),
            "{first:?}"
        );
        assert_eq!(burst_for(addr, "/small.txt", 140, io), (140, 0), "{io}");
        let said = server.stop();
        assert!(said.contains("max 150 connections"), "{said}");
        assert!(!said.contains("panicked"), "{said}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
