//! Shared by the `http_*` tests: a document tree in a temp dir, an
//! in-process server on 127.0.0.1:0, and a small blocking HTTP/1.1 client
//! that reads responses exactly (by `Content-Length`), so that pipelining
//! and keep-alive can be checked byte for byte.
#![allow(dead_code)]

use duality_http::{HttpConfig, HttpState};
use duality_models::{Server, ServerBuilder};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every read of the test client gives up after this: no test hangs.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "duality-http-test-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic pseudo-random bytes (xorshift), so a large file has no
/// repeating pattern that could hide a misplaced chunk.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// FNV-1a, 64 bits: the checksum the streaming tests compare.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Size of `big.bin`: well above the cache and sendfile thresholds.
pub const BIG: usize = 3 * 1024 * 1024 + 12345;
/// Size of `cached.bin`: kept in the page cache, and large enough that a
/// response with it alone sends the body from the cache entry itself.
pub const CACHED: usize = 20_000;

/// ```text
/// <tmp>/outside/secret.txt                 never served
/// <tmp>/www/                               the root
///   index.html  hello.txt  "sp ace.txt"  ü.txt  style.css  empty.txt
///   big.bin (BIG bytes, pseudo-random)     mid.bin (100 KiB)
///   sub/index.html  sub/page.html          "my dir"/index.html
///   noindex/  (no index.html)
///   link_in -> hello.txt                   dir_in -> sub
///   link_out -> ../outside/secret.txt      link_abs -> <tmp>/outside/secret.txt
///   dir_out -> ../outside                  loop -> loop
///   sub2/index.html -> ../../outside/secret.txt
/// ```
pub fn tree(tag: &str) -> TempDir {
    use std::fs;
    use std::os::unix::fs::symlink;
    let tmp = TempDir::new(tag);
    let out = tmp.0.join("outside");
    let www = tmp.0.join("www");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("secret.txt"), "TOP SECRET\n").unwrap();
    fs::create_dir_all(www.join("sub")).unwrap();
    fs::create_dir_all(www.join("my dir")).unwrap();
    fs::create_dir_all(www.join("noindex")).unwrap();
    fs::create_dir_all(www.join("sub2")).unwrap();
    fs::write(www.join("index.html"), "<h1>home</h1>\n").unwrap();
    fs::write(www.join("hello.txt"), "hello, world\n").unwrap();
    fs::write(www.join("sp ace.txt"), "space\n").unwrap();
    fs::write(www.join("ü.txt"), "umlaut\n").unwrap();
    fs::write(www.join("style.css"), "body{}\n").unwrap();
    fs::write(www.join("empty.txt"), "").unwrap();
    fs::write(www.join("big.bin"), pseudo_random(BIG, 7)).unwrap();
    fs::write(www.join("mid.bin"), pseudo_random(100 * 1024, 11)).unwrap();
    fs::write(www.join("cached.bin"), pseudo_random(CACHED, 13)).unwrap();
    fs::write(www.join("sub/index.html"), "<h1>sub</h1>\n").unwrap();
    fs::write(www.join("sub/page.html"), "<p>page</p>\n").unwrap();
    fs::write(www.join("my dir/index.html"), "<h1>my dir</h1>\n").unwrap();
    symlink("hello.txt", www.join("link_in")).unwrap();
    symlink("sub", www.join("dir_in")).unwrap();
    symlink("../outside/secret.txt", www.join("link_out")).unwrap();
    symlink(out.join("secret.txt"), www.join("link_abs")).unwrap();
    symlink("../outside", www.join("dir_out")).unwrap();
    symlink("loop", www.join("loop")).unwrap();
    symlink("../../outside/secret.txt", www.join("sub2/index.html")).unwrap();
    tmp
}

/// An in-process server over a fresh [`tree`], shut down on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    pub state: Arc<HttpState>,
    server: Option<Server>,
    pub dir: TempDir,
}

impl TestServer {
    /// `symped:1` with short timeouts; `tweak` adjusts the config.
    pub fn start(tag: &str, tweak: impl FnOnce(&mut HttpConfig)) -> TestServer {
        TestServer::with_model(tag, "symped:1", tweak)
    }

    pub fn with_model(tag: &str, model: &str, tweak: impl FnOnce(&mut HttpConfig)) -> TestServer {
        TestServer::with_builder(
            tag,
            ServerBuilder::new().model(model.parse().unwrap()),
            tweak,
        )
    }

    pub fn with_builder(
        tag: &str,
        builder: ServerBuilder,
        tweak: impl FnOnce(&mut HttpConfig),
    ) -> TestServer {
        let dir = tree(tag);
        let mut cfg = HttpConfig::new(dir.0.join("www"));
        cfg.head_timeout = Duration::from_secs(5);
        cfg.idle_timeout = Duration::from_secs(5);
        cfg.write_timeout = Duration::from_secs(5);
        tweak(&mut cfg);
        let state = HttpState::new(cfg).unwrap();
        let server =
            duality_http::serve(builder.tcp("127.0.0.1:0".parse().unwrap()), state.clone())
                .unwrap();
        TestServer {
            addr: server.tcp_addrs()[0],
            state,
            server: Some(server),
            dir,
        }
    }

    pub fn www(&self) -> PathBuf {
        self.dir.0.join("www")
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }

    /// Starts the graceful stop (`grace` for connections to close) on a
    /// thread of its own, which returns how long it took.
    pub fn stop_in_background(&mut self, grace: Duration) -> std::thread::JoinHandle<Duration> {
        let s = self.server.take().unwrap();
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            s.shutdown(grace);
            t0.elapsed()
        })
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(2));
        }
    }
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn keeps_alive(&self) -> bool {
        self.header("connection") == Some("keep-alive")
    }
}

/// A blocking HTTP/1.1 client over one connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        Client::from_stream(TcpStream::connect(addr).unwrap())
    }

    /// A client over a connection made otherwise.
    pub fn from_stream(stream: TcpStream) -> Client {
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.stream.write_all(bytes.as_ref()).unwrap();
    }

    /// Sends `GET path` (HTTP/1.1, keep-alive) with extra header lines.
    pub fn get_with(&mut self, path: &str, extra: &str) -> Resp {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n"));
        self.response(false)
    }

    pub fn get(&mut self, path: &str) -> Resp {
        self.get_with(path, "")
    }

    pub fn head(&mut self, path: &str) -> Resp {
        self.send(format!("HEAD {path} HTTP/1.1\r\nHost: t\r\n\r\n"));
        self.response(true)
    }

    /// One read, again after EINTR as `read_exact` would: a blocking read
    /// with a timeout is not restarted when a signal interrupts it.
    fn read_some(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.stream.read(b) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 64 * 1024];
        match self.read_some(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Err(e) => panic!(
                "read failed: {e} local {:?} peer {:?}",
                self.stream.local_addr(),
                self.stream.peer_addr()
            ),
        }
    }

    /// Reads one response. `head_only`: the request was HEAD (no body
    /// follows whatever `Content-Length` says).
    pub fn response(&mut self, head_only: bool) -> Resp {
        match self.try_response(head_only) {
            Ok(r) => r,
            Err(e) => panic!(
                "{e}: {:?} local {:?} peer {:?}",
                String::from_utf8_lossy(&self.buf),
                self.stream.local_addr(),
                self.stream.peer_addr()
            ),
        }
    }

    /// [`Client::response`], or what was missing when the connection closed
    /// (EOF or reset) before the response was complete.
    pub fn try_response(&mut self, head_only: bool) -> Result<Resp, String> {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            if self.fill() == 0 {
                return Err("connection closed before a complete head".into());
            }
        };
        let head = String::from_utf8(self.buf[..end].to_vec()).expect("head is UTF-8");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        let mut parts = status_line.splitn(3, ' ');
        assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
        let status: u16 = parts.next().unwrap().parse().unwrap();
        let reason = parts.next().unwrap_or("").to_owned();
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').expect("field has a colon");
                (n.to_owned(), v.trim().to_owned())
            })
            .collect();
        self.buf.drain(..end);
        let mut resp = Resp {
            status,
            reason,
            headers,
            body: Vec::new(),
        };
        let len: usize = match resp.header("content-length") {
            Some(v) => v.parse().unwrap(),
            None => 0,
        };
        if head_only || status == 304 {
            return Ok(resp);
        }
        while self.buf.len() < len {
            if self.fill() == 0 {
                return Err(format!(
                    "connection closed after {} of {len} body bytes",
                    self.buf.len()
                ));
            }
        }
        resp.body = self.buf.drain(..len).collect();
        Ok(resp)
    }

    /// True if the server closes the connection (EOF or reset) within
    /// `within`, with nothing more to read.
    pub fn closed_within(&mut self, within: Duration) -> bool {
        self.stream.set_read_timeout(Some(within)).unwrap();
        let mut b = [0u8; 1024];
        let r = self.read_some(&mut b);
        self.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        match r {
            Ok(0) => self.buf.is_empty(),
            Ok(n) => panic!(
                "unexpected bytes instead of a close: {:?}",
                String::from_utf8_lossy(&b[..n])
            ),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
            Err(_) => false,
        }
    }

    /// Bytes buffered but not yet taken by a response.
    pub fn leftover(&self) -> &[u8] {
        &self.buf
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Polls `cond` until it holds or `within` passes.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One request on a fresh connection with `Connection: close`; the raw
/// status code.
pub fn status_of(addr: SocketAddr, raw_request: &str) -> u16 {
    let mut c = Client::connect(addr);
    c.send(raw_request);
    c.response(false).status
}

pub fn read_file(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}
