//! `duality http` with real clients: `curl` and Python's `http.client`,
//! against the built binary on loopback. Both clients must be installed
//! (`.ci/run` installs the Debian packages `curl` and `python3`); a missing
//! one fails the test with a message saying so.

mod common;

use common::http::HttpServer;
use common::TempDir;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every client command is killed after this.
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// `duality http` with the interop tests' timeouts (5 s head and idle).
struct Server;

impl Server {
    fn start(root: &Path) -> HttpServer {
        Server::start_with(root, &[])
    }

    /// With more flags.
    fn start_with(root: &Path, extra: &[&str]) -> HttpServer {
        let mut args = vec!["--head-timeout", "5", "--idle-timeout", "5"];
        args.extend_from_slice(extra);
        HttpServer::start(root, &args)
    }
}

/// Runs `cmd` to completion, killing it after [`COMMAND_LIMIT`]; panics
/// with an install hint if the program is missing.
fn run(mut cmd: Command, package: &str) -> Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{program}` is not installed: this test needs the Debian package `{package}` \
             (.ci/run installs it: apt-get install -y {package})"
        ),
        Err(e) => panic!("cannot run {program}: {e}"),
    };
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let watchdog = std::thread::spawn(move || {
        let until = Instant::now() + COMMAND_LIMIT;
        while !d.load(Ordering::SeqCst) {
            if Instant::now() > until {
                // SAFETY: kill(2) on our child; `done` is still false, so it
                // has not been reaped yet.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
    out
}

fn curl(args: &[&str]) -> Output {
    let mut c = Command::new("curl");
    c.args(["--silent", "--show-error", "--max-time", "10"])
        .args(args);
    run(c, "curl")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A document root: index.html, hello.txt, a 2 MiB binary file, sub/.
fn root(tag: &str) -> (TempDir, Vec<u8>) {
    let t = TempDir::new(tag);
    let www = t.0.join("www");
    std::fs::create_dir_all(www.join("sub")).unwrap();
    std::fs::write(www.join("index.html"), "<h1>interop</h1>\n").unwrap();
    std::fs::write(www.join("hello.txt"), "hello, world\n").unwrap();
    std::fs::write(www.join("sub/index.html"), "sub\n").unwrap();
    std::fs::write(t.0.join("secret.txt"), "TOP SECRET\n").unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let big: Vec<u8> = (0..2 * 1024 * 1024 + 7)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(www.join("big.bin"), &big).unwrap();
    (t, big)
}

#[test]
fn curl_interop() {
    let (dir, big) = root("curl");
    let s = Server::start(&dir.0.join("www"));
    let u = |p: &str| format!("{}{p}", s.url);

    let o = curl(&["--include", &u("/hello.txt")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.contains("Content-Type: text/plain; charset=utf-8\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nhello, world\n"), "{text}");

    // Index, HEAD, 404, 405, traversal (curl would otherwise squash `..`).
    assert_eq!(stdout(&curl(&[&u("/")])), "<h1>interop</h1>\n");
    let o = curl(&["--head", &u("/big.bin")]);
    assert!(stdout(&o).contains(&format!("Content-Length: {}\r\n", big.len())));
    let code = |args: &[&str]| {
        let mut a = vec!["--output", "/dev/null", "--write-out", "%{http_code}"];
        a.extend_from_slice(args);
        stdout(&curl(&a))
    };
    assert_eq!(code(&[&u("/nope")]), "404");
    assert_eq!(
        code(&["-X", "POST", "--data", "x=1", &u("/hello.txt")]),
        "405"
    );
    assert_eq!(code(&["--path-as-is", &u("/../secret.txt")]), "400");
    assert_eq!(code(&["--path-as-is", &u("/%2e%2e/secret.txt")]), "400");
    // A `..` that stays inside the root resolves, as nginx resolves it.
    assert_eq!(
        stdout(&curl(&["--path-as-is", &u("/sub/../hello.txt")])),
        stdout(&curl(&[&u("/hello.txt")]))
    );
    assert_eq!(code(&[&u("/sub")]), "301");
    assert_eq!(stdout(&curl(&["--location", &u("/sub")])), "sub\n");
    assert_eq!(code(&["--http1.0", &u("/hello.txt")]), "200");

    // Range and conditional requests.
    assert_eq!(
        stdout(&curl(&["--range", "7-11", &u("/hello.txt")])),
        "world"
    );
    let o = curl(&["--include", "--range", "99999-", &u("/hello.txt")]);
    assert!(stdout(&o).starts_with("HTTP/1.1 416"), "{}", stdout(&o));
    let head = stdout(&curl(&["--head", &u("/hello.txt")]));
    let etag = head
        .lines()
        .find_map(|l| l.strip_prefix("ETag: "))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        code(&[
            "--header",
            &format!("If-None-Match: {etag}"),
            &u("/hello.txt")
        ]),
        "304"
    );
    let ts = dir.0.join("www/hello.txt");
    assert_eq!(
        code(&["--time-cond", ts.to_str().unwrap(), &u("/hello.txt")]),
        "304"
    );

    // Keep-alive: several URLs on one connection.
    let o = curl(&["--verbose", &u("/hello.txt"), &u("/"), &u("/hello.txt")]);
    assert_eq!(stdout(&o), "hello, world\n<h1>interop</h1>\nhello, world\n");
    let verbose = stderr(&o);
    assert_eq!(
        verbose.matches("Re-using existing connection").count(),
        2,
        "{verbose}"
    );

    // A large file, intact.
    let got = dir.0.join("got.bin");
    let o = curl(&["--output", got.to_str().unwrap(), &u("/big.bin")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read(&got).unwrap() == big,
        "downloaded file differs"
    );

    assert!(s.stop().success(), "duality http exits 0 on SIGTERM");
}

#[test]
fn curl_expect_100_continue_does_not_stall() {
    let (dir, _) = root("expect");
    let s = Server::start(&dir.0.join("www"));
    let url = format!("{}/hello.txt", s.url);
    let small = dir.0.join("small.txt");
    std::fs::write(&small, "x".repeat(4000)).unwrap();
    let large = dir.0.join("large.txt");
    std::fs::write(&large, "x".repeat(1_100_000)).unwrap();
    // curl waits --expect100-timeout (1 s by default) for the interim
    // answer before sending the body anyway; with 20 s (past --max-time) a
    // missing answer fails the transfer instead of only slowing it.
    let post = |file: &Path, method: &str| {
        let t0 = Instant::now();
        let data = format!("@{}", file.display());
        let o = curl(&[
            "--request",
            method,
            "--verbose",
            "--header",
            "Expect: 100-continue",
            "--expect100-timeout",
            "20",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code}",
            "--data-binary",
            &data,
            &url,
        ]);
        (o, t0.elapsed())
    };
    // A GET with a body: invited, then answered.
    let (o, took) = post(&small, "GET");
    assert_eq!(stdout(&o), "200", "{}", stderr(&o));
    assert!(
        stderr(&o).contains("HTTP/1.1 100 Continue"),
        "{}",
        stderr(&o)
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // A POST (405): the final answer at once, no invitation (as nginx).
    let (o, took) = post(&small, "POST");
    assert_eq!(stdout(&o), "405", "{}", stderr(&o));
    assert!(!stderr(&o).contains("100 Continue"), "{}", stderr(&o));
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Past the body limit (1 MiB, nginx's): the final answer at once,
    // without 100.
    let (o, took) = post(&large, "GET");
    assert_eq!(stdout(&o), "413", "{}", stderr(&o));
    assert!(!stderr(&o).contains("100 Continue"), "{}", stderr(&o));
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(s.stop().success());
}

/// One raw request on a fresh connection; the status code of the answer.
fn raw_status(addr: &str, request: &str) -> u16 {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = c.read(&mut b).unwrap();
        assert!(n > 0, "closed before a response: {head:?}");
        head.extend_from_slice(&b[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

#[test]
fn request_size_limit_flags() {
    let (dir, _) = root("limits");
    let www = dir.0.join("www");
    let get = |target: &str, fields: &str| {
        format!("GET {target} HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n")
    };
    let query = |len: usize| format!("/hello.txt?{}", "q".repeat(len - "/hello.txt?".len()));
    let fields = |n: usize| "X-A: b\r\n".repeat(n);

    // The defaults take what nginx's do: a 7 KB target, 100 fields.
    let s = Server::start(&www);
    let addr = s.url.strip_prefix("http://").unwrap().to_owned();
    assert_eq!(raw_status(&addr, &get(&query(7000), "")), 200);
    assert_eq!(raw_status(&addr, &get("/hello.txt", &fields(100))), 200);
    assert!(s.stop().success());

    let s = Server::start_with(
        &www,
        &[
            "--max-head-bytes",
            "2048",
            "--max-uri-bytes",
            "100",
            "--max-headers",
            "8",
            "--max-body-bytes",
            "1000",
        ],
    );
    let addr = s.url.strip_prefix("http://").unwrap().to_owned();
    assert_eq!(raw_status(&addr, &get(&query(100), "")), 200);
    assert_eq!(raw_status(&addr, &get(&query(101), "")), 414);
    // Host and Connection count: 6 more make 8.
    assert_eq!(raw_status(&addr, &get("/hello.txt", &fields(6))), 200);
    assert_eq!(raw_status(&addr, &get("/hello.txt", &fields(7))), 431);
    let big = format!("X-Big: {}\r\n", "b".repeat(2048));
    assert_eq!(raw_status(&addr, &get("/hello.txt", &big)), 431);
    let body = |n: usize| format!("Content-Length: {n}\r\n");
    assert_eq!(raw_status(&addr, &get("/hello.txt", &body(1000))), 200);
    assert_eq!(raw_status(&addr, &get("/hello.txt", &body(1001))), 413);
    assert!(s.stop().success());

    // 0: no body limit, as nginx's client_max_body_size 0.
    let s = Server::start_with(&www, &["--max-body-bytes", "0"]);
    let addr = s.url.strip_prefix("http://").unwrap().to_owned();
    let huge = format!("Content-Length: {}\r\n", u32::MAX);
    assert_eq!(raw_status(&addr, &get("/hello.txt", &huge)), 200);
    // A length past 63 bits is malformed, never taken as another number.
    let over = "Content-Length: 18446744073709551616\r\n";
    assert_eq!(raw_status(&addr, &get("/hello.txt", over)), 400);
    assert!(s.stop().success());

    // Documented, and checked at start-up.
    let help = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["http", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--max-head-bytes",
        "--max-uri-bytes",
        "--max-headers",
        "--max-body-bytes",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    for bad in [
        ["--max-headers", "0"],
        ["--max-headers", "100000"],
        ["--max-head-bytes", "3"],
        ["--max-uri-bytes", "0"],
    ] {
        // Through `run`: a value wrongly accepted starts a server, which
        // the watchdog then kills.
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_duality"));
        cmd.args(["http", "--listen", "127.0.0.1:0", "--root"])
            .arg(&www)
            .args(bad);
        let o = run(cmd, "duality");
        assert!(!o.status.success(), "{bad:?} accepted");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(bad[0]),
            "{bad:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

const PYTHON_CLIENT: &str = r#"
import email.parser, email.policy, hashlib, http.client, sys
host, port, big_sha = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = http.client.HTTPConnection(host, port, timeout=10)
def req(method, path, headers={}):
    c.request(method, path, headers=headers)
    r = c.getresponse()
    return r, r.read()
r, body = req("GET", "/hello.txt")
assert (r.status, body) == (200, b"hello, world\n"), (r.status, body)
assert r.getheader("Content-Type") == "text/plain; charset=utf-8"
etag, lm = r.getheader("ETag"), r.getheader("Last-Modified")
sock = c.sock
r, body = req("HEAD", "/big.bin")
assert r.status == 200 and body == b"", (r.status, body)
r, body = req("GET", "/hello.txt", {"If-None-Match": etag})
assert r.status == 304 and body == b"", r.status
r, body = req("GET", "/hello.txt", {"If-Modified-Since": lm})
assert r.status == 304, r.status
r, body = req("GET", "/hello.txt", {"Range": "bytes=0-4"})
assert (r.status, body) == (206, b"hello"), (r.status, body)
assert r.getheader("Content-Range") == "bytes 0-4/13"
r, body = req("GET", "/missing")
assert r.status == 404 and b"404 Not Found" in body
r, body = req("DELETE", "/hello.txt")
assert r.status == 405 and r.getheader("Allow") == "GET, HEAD"
r, body = req("GET", "/big.bin")
assert r.status == 200 and hashlib.sha256(body).hexdigest() == big_sha
big = body
# Several ranges: multipart/byteranges, read by Python's own MIME parser.
def parts(r, body):
    ct = r.getheader("Content-Type")
    assert r.status == 206 and ct.startswith("multipart/byteranges; boundary="), (r.status, ct)
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + ct.encode() + b"\r\n\r\n" + body)
    assert msg.is_multipart()
    return [(p["Content-Range"], p.get_payload(decode=True)) for p in msg.iter_parts()]
r, body = req("GET", "/hello.txt", {"Range": "bytes=7-11,0-4"})
assert parts(r, body) == [("bytes 7-11/13", b"world"), ("bytes 0-4/13", b"hello")], body
r, body = req("GET", "/big.bin", {"Range": "bytes=0-99999,1000000-1099999,-10"})
n = len(big)
want = [("bytes 0-99999/%d" % n, big[:100000]),
        ("bytes 1000000-1099999/%d" % n, big[1000000:1100000]),
        ("bytes %d-%d/%d" % (n - 10, n - 1, n), big[-10:])]
got = parts(r, body)
assert [g[0] for g in got] == [w[0] for w in want], got
assert all(g[1] == w[1] for g, w in zip(got, want)), "multipart bytes differ"
r, body = req("GET", "/")
assert body == b"<h1>interop</h1>\n"
assert c.sock is sock, "one persistent connection for every request"
c.close()
c = http.client.HTTPConnection(host, port, timeout=10)
c.putrequest("GET", "/%2e%2e/secret.txt", skip_accept_encoding=True)
c.endheaders()
r = c.getresponse()
assert r.status == 400 and b"SECRET" not in r.read()
print("OK")
"#;

#[test]
fn python_http_client_interop() {
    let (dir, big) = root("python");
    let s = Server::start(&dir.0.join("www"));
    let addr = s.url.strip_prefix("http://").unwrap().to_owned();
    let (host, port) = addr.rsplit_once(':').unwrap();
    let sha = sha256_hex_with_python(&big, &dir.0);
    let mut c = Command::new("python3");
    c.args(["-c", PYTHON_CLIENT, host, port, &sha]);
    let o = run(c, "python3");
    assert!(
        o.status.success() && stdout(&o).trim() == "OK",
        "python client failed:\n{}{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(s.stop().success());
}

/// The SHA-256 of `bytes`, computed by Python from a file (so the test needs
/// no hashing crate).
fn sha256_hex_with_python(bytes: &[u8], dir: &Path) -> String {
    let p = dir.join("expected.bin");
    std::fs::write(&p, bytes).unwrap();
    let mut c = Command::new("python3");
    c.args([
        "-c",
        "import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())",
    ])
    .arg(&p);
    let o = run(c, "python3");
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).trim().to_owned()
}

#[test]
fn sigterm_shuts_down_with_open_keep_alive_connections() {
    let (dir, _) = root("sigterm");
    let s = Server::start(&dir.0.join("www"));
    let addr = s.url.strip_prefix("http://").unwrap().to_owned();
    let mut conns: Vec<std::net::TcpStream> = (0..5)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    use std::io::{Read, Write};
    for c in &mut conns {
        c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 512];
        assert!(c.read(&mut b).unwrap() > 0);
    }
    let t0 = Instant::now();
    assert!(s.stop().success());
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}
