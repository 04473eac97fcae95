//! Helpers shared by the integration tests: in-process kv servers on any
//! model, the `duality kv` binary as a child process, a blocking client that
//! compares exact response bytes, (`http`) the `duality http` binary and
//! (`bench`) `duality bench` runs.
#![allow(dead_code)]

pub mod bench;
pub mod http;

use duality_kv::server::{driver, serve_conn, KvConfig, KvState};
use duality_models::{Model, Server, ServerBuilder};
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a client waits for any one read before the test fails.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// One configuration of each threading model, small enough for 2 cores.
pub const MODELS: [&str; 7] = [
    "sped",
    "amped:1",
    "seda:2:1",
    "seda-s:1",
    "symped:2",
    "steal:2",
    "thread-per-conn",
];

/// Shows bytes readably in assertion messages.
pub fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if s.len() > 600 {
        // Cut at a character (a lossy string of binary bytes has many).
        let cut: String = s.chars().take(600).collect();
        format!("{cut:?}… ({} bytes)", b.len())
    } else {
        format!("{s:?}")
    }
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "duality-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a server listens.
#[derive(Clone, Debug)]
pub enum Addr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A blocking client connection with a read timeout.
pub struct Client {
    s: Stream,
}

impl Client {
    pub fn connect(addr: &Addr) -> Client {
        Client::try_connect(addr).unwrap_or_else(|e| panic!("connect to {addr:?}: {e}"))
    }

    pub fn try_connect(addr: &Addr) -> io::Result<Client> {
        let s = match addr {
            Addr::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, IO_TIMEOUT)?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                Stream::Tcp(s)
            }
            Addr::Unix(p) => {
                let s = UnixStream::connect(p)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                Stream::Unix(s)
            }
        };
        Ok(Client { s })
    }

    /// This end's address (TCP only).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match &self.s {
            Stream::Tcp(s) => s.local_addr().ok(),
            Stream::Unix(_) => None,
        }
    }

    pub fn set_read_timeout(&self, t: Duration) {
        match &self.s {
            Stream::Tcp(s) => s.set_read_timeout(Some(t)),
            Stream::Unix(s) => s.set_read_timeout(Some(t)),
        }
        .expect("set timeout");
    }

    fn rd(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.s {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    /// Writes all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        let r = match &mut self.s {
            Stream::Tcp(s) => s.write_all(bytes),
            Stream::Unix(s) => s.write_all(bytes),
        };
        r.unwrap_or_else(|e| panic!("send {}: {e}", show(&bytes[..bytes.len().min(80)])));
    }

    /// Closes the write side (the server sees end-of-stream).
    pub fn shutdown_write(&self) {
        let _ = match &self.s {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }

    /// Reads exactly `n` bytes.
    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        let mut have = 0;
        while have < n {
            match self.rd(&mut out[have..]) {
                Ok(0) => panic!(
                    "connection closed after {have} of {n} bytes: {}",
                    show(&out[..have])
                ),
                Ok(k) => have += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read ({have} of {n} bytes: {}): {e}", show(&out[..have])),
            }
        }
        out
    }

    /// Reads until the bytes read end with `suffix`.
    pub fn read_until(&mut self, suffix: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        while !out.ends_with(suffix) {
            match self.rd(&mut buf) {
                Ok(0) => panic!(
                    "connection closed before {}; got {}",
                    show(suffix),
                    show(&out)
                ),
                Ok(k) => out.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read before {}: {e}; got {}", show(suffix), show(&out)),
            }
        }
        out
    }

    /// Reads until the server closes; returns everything read.
    pub fn read_to_eof(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        loop {
            match self.rd(&mut buf) {
                Ok(0) => return out,
                Ok(k) => out.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return out,
                Err(e) => panic!("read to end of stream: {e}; got {}", show(&out)),
            }
        }
    }

    /// Sends `req` followed by `mn` and returns everything the server
    /// answered before `MN`: the exact response to `req`, however many
    /// requests it holds (or none, for quiet ones).
    pub fn call(&mut self, req: &[u8]) -> Vec<u8> {
        let mut r = Vec::with_capacity(req.len() + 4);
        r.extend_from_slice(req);
        r.extend_from_slice(b"mn\r\n");
        self.send(&r);
        let mut out = self.read_until(b"MN\r\n");
        out.truncate(out.len() - 4);
        out
    }

    /// Asserts the exact response to `req` (see [`Client::call`]).
    #[track_caller]
    pub fn expect(&mut self, req: &[u8], want: &[u8]) {
        let got = self.call(req);
        assert!(
            got == want,
            "request {}\n  want {}\n  got  {}",
            show(req),
            show(want),
            show(&got)
        );
    }

    /// Like [`Client::expect`] for text.
    #[track_caller]
    pub fn expect_str(&mut self, req: &str, want: &str) {
        self.expect(req.as_bytes(), want.as_bytes());
    }

    /// `gets <key>` → the item's CAS unique.
    #[track_caller]
    pub fn cas_of(&mut self, key: &str) -> u64 {
        let r = self.call(format!("gets {key}\r\n").as_bytes());
        let line = String::from_utf8_lossy(&r);
        let first = line.lines().next().unwrap_or("");
        let parts: Vec<&str> = first.split(' ').collect();
        assert!(
            parts.len() == 5 && parts[0] == "VALUE" && parts[1] == key,
            "gets {key}: {}",
            show(&r)
        );
        parts[4]
            .parse()
            .unwrap_or_else(|_| panic!("gets {key}: {}", show(&r)))
    }

    /// `stats [group]` as a map.
    pub fn stats(&mut self, group: &str) -> HashMap<String, String> {
        let cmd = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        self.send(cmd.as_bytes());
        let r = self.read_until(b"END\r\n");
        parse_stats(&r)
    }
}

/// `STAT name value` lines → map (panics on anything else but `END`).
pub fn parse_stats(r: &[u8]) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(r);
    let mut m = HashMap::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        if line == "END" {
            continue;
        }
        let mut it = line.splitn(3, ' ');
        assert_eq!(it.next(), Some("STAT"), "bad stats line {line:?}");
        let name = it.next().expect("stat name").to_string();
        let value = it.next().unwrap_or("").to_string();
        m.insert(name, value);
    }
    m
}

/// A server running in this process on 127.0.0.1:0 (or a Unix socket).
pub struct InProc {
    server: Option<Server>,
    pub addr: Addr,
    pub state: Arc<KvState>,
    pub model: Model,
    _dir: Option<TempDir>,
}

/// The config the in-process servers use unless told otherwise: 64 KiB
/// items, so limit tests stay small.
pub fn small_config(model: &Model) -> KvConfig {
    KvConfig {
        memory_limit: 64 << 20,
        max_item_size: 64 << 10,
        threads: 2,
        model: model.to_string(),
        ..KvConfig::default()
    }
}

impl InProc {
    /// `model` over TCP with [`small_config`].
    pub fn tcp(model: &str) -> InProc {
        let m: Model = model.parse().expect("model");
        InProc::start(m, small_config(&m), false)
    }

    /// `model` over a Unix socket with [`small_config`].
    pub fn unix(model: &str) -> InProc {
        let m: Model = model.parse().expect("model");
        InProc::start(m, small_config(&m), true)
    }

    pub fn start(model: Model, config: KvConfig, unix: bool) -> InProc {
        InProc::start_with_faults(model, config, unix, duality_rt::faults::Faults::NONE)
    }

    /// `model` over TCP with [`small_config`], its loops injecting `faults`.
    pub fn tcp_with_faults(model: &str, faults: duality_rt::faults::Faults) -> InProc {
        let m: Model = model.parse().expect("model");
        InProc::start_with_faults(m, small_config(&m), false, faults)
    }

    pub fn start_with_faults(
        model: Model,
        config: KvConfig,
        unix: bool,
        faults: duality_rt::faults::Faults,
    ) -> InProc {
        InProc::start_tuned(model, config, unix, |b| b.faults(faults))
    }

    /// [`InProc::start`] with the server's builder adjusted by `tune`.
    pub fn start_tuned(
        model: Model,
        config: KvConfig,
        unix: bool,
        tune: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> InProc {
        let state = KvState::new(config).expect("kv config");
        let mut b = tune(
            ServerBuilder::new()
                .name("kvtest")
                .model(model)
                .refusal_message("ERROR Too many open connections\r\n"),
        );
        let mut dir = None;
        let mut sock = None;
        if unix {
            let d = TempDir::new("kv-unix");
            let p = d.path().join("kv.sock");
            b = b.unix(&p);
            sock = Some(p);
            dir = Some(d);
        } else {
            b = b.tcp("127.0.0.1:0".parse().unwrap());
        }
        let d = driver(state.clone());
        let server = b
            .serve(move |c, p| serve_conn(c, p, d.clone()))
            .expect("start in-process server");
        state.attach(server.stats_handle());
        let addr = match sock {
            Some(p) => Addr::Unix(p),
            None => Addr::Tcp(server.tcp_addrs()[0]),
        };
        InProc {
            server: Some(server),
            addr,
            state,
            model,
            _dir: dir,
        }
    }

    pub fn connect(&self) -> Client {
        Client::connect(&self.addr)
    }

    /// Jobs the server's payload threads have run (0 in the inline models).
    pub fn payload_jobs(&self) -> u64 {
        let stats = self.server.as_ref().expect("running").stats();
        let payload = stats
            .threads
            .iter()
            .filter(|t| t.role == duality_models::ThreadRole::Payload);
        payload.map(|t| t.jobs).sum()
    }
}

impl Drop for InProc {
    fn drop(&mut self) {
        // As the binary does: watchers' streams end (a blocking socket's
        // learns it only so).
        self.state.store.watch().close();
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_millis(500));
        }
    }
}

/// A free TCP port on 127.0.0.1 (free when asked; a later bind may race).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Collects a child's output stream in the background.
fn drain(r: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = r;
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    })
}

/// How a [`KvProc`] is started beyond its arguments.
#[derive(Default)]
struct Spawn {
    /// Descriptor limits (soft, hard) set before it runs.
    nofile: Option<(u64, u64)>,
    /// Environment variables set for it.
    env: Vec<(&'static str, std::ffi::OsString)>,
}

/// `duality kv` as a child process; killed (and reaped) on drop.
pub struct KvProc {
    child: Option<Child>,
    pub port: u16,
    pub addr: Addr,
    pub ready_line: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_done: Option<std::thread::JoinHandle<()>>,
}

impl KvProc {
    /// Starts `duality kv -p <free port> <args>` and waits for its `ready`
    /// line; retries on another port if the chosen one was taken meanwhile.
    pub fn start(args: &[&str]) -> KvProc {
        KvProc::start_with(args, &Spawn::default())
    }

    /// Starts `duality kv <args>` (the caller gives `-p` or `-s`).
    pub fn start_raw(args: &[&str]) -> KvProc {
        KvProc::spawn(0, args).unwrap_or_else(|e| panic!("duality kv did not start: {e}"))
    }

    /// Starts `duality kv -p PORT <args>`; the reason when it did not start.
    pub fn try_start(port: u16, args: &[&str]) -> Result<KvProc, String> {
        KvProc::try_start_limited(port, args, &Spawn::default())
    }

    /// As [`start`](Self::start), the server's descriptor limits (soft,
    /// hard) set to `nofile` before it runs.
    pub fn start_with_nofile(args: &[&str], nofile: (u64, u64)) -> KvProc {
        KvProc::start_with(
            args,
            &Spawn {
                nofile: Some(nofile),
                ..Spawn::default()
            },
        )
    }

    /// As [`start`](Self::start), with `env` set for the server.
    pub fn start_with_env(args: &[&str], env: &[(&'static str, &std::ffi::OsStr)]) -> KvProc {
        let env = env.iter().map(|(k, v)| (*k, v.to_os_string())).collect();
        KvProc::start_with(args, &Spawn { env, nofile: None })
    }

    /// Tries five free ports: one may be taken again before the server binds it.
    fn start_with(args: &[&str], how: &Spawn) -> KvProc {
        let mut last = String::new();
        for _ in 0..5 {
            match KvProc::try_start_limited(free_port(), args, how) {
                Ok(p) => return p,
                Err(e) => last = e,
            }
        }
        panic!("duality kv did not start: {last}");
    }

    fn try_start_limited(port: u16, args: &[&str], how: &Spawn) -> Result<KvProc, String> {
        let p = port.to_string();
        let mut all = vec!["-p", p.as_str()];
        all.extend_from_slice(args);
        KvProc::spawn_limited(port, &all, how)
    }

    fn spawn(port: u16, args: &[&str]) -> Result<KvProc, String> {
        KvProc::spawn_limited(port, args, &Spawn::default())
    }

    fn spawn_limited(port: u16, args: &[&str], how: &Spawn) -> Result<KvProc, String> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_duality"));
        cmd.envs(how.env.iter().map(|(k, v)| (k, v)));
        if let Some((soft, hard)) = how.nofile {
            use std::os::unix::process::CommandExt;
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: setrlimit is async-signal-safe and reads a struct
            // copied into the closure; nothing is allocated after fork.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = cmd
            .arg("kv")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_done = drain(child.stderr.take().unwrap(), stderr.clone());
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // Keep reading so the server never writes into a closed pipe.
            let mut sink = Vec::new();
            let _ = r.read_to_end(&mut sink);
        });
        let mut proc = KvProc {
            child: Some(child),
            port,
            addr: Addr::Tcp(SocketAddr::from(([127, 0, 0, 1], port))),
            ready_line: String::new(),
            stderr,
            stderr_done: Some(stderr_done),
        };
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.starts_with("ready") => {
                proc.ready_line = line.trim_end().to_string();
                Ok(proc)
            }
            Ok(line) => {
                let status = proc.kill();
                Err(format!(
                    "no ready line (got {line:?}, {status:?}); stderr: {}",
                    proc.stderr_text()
                ))
            }
            Err(_) => {
                proc.kill();
                Err(format!(
                    "no ready line within 20 s; stderr: {}",
                    proc.stderr_text()
                ))
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn connect(&self) -> Client {
        Client::connect(&self.addr)
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Sends `sig` to the server.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; it has not been reaped
        // (the child is reaped only by `wait_exit`/`kill`, which take it).
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(r, 0, "kill({}, {sig})", self.pid());
    }

    /// Waits up to `limit` for the server to exit; `None` if it did not.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + limit;
        loop {
            let c = self.child.as_mut()?;
            if let Some(st) = c.try_wait().expect("try_wait") {
                self.child = None;
                // All of its stderr is in once the pipe is at its end.
                if let Some(h) = self.stderr_done.take() {
                    let _ = h.join();
                }
                return Some(st);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills (SIGKILL) and reaps the server if it still runs.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        let _ = c.kill();
        c.wait().ok()
    }

    /// Resident set size now, bytes.
    pub fn rss(&self) -> usize {
        rss_of(self.pid())
    }

    /// Peak resident set size (VmHWM), bytes.
    pub fn peak_rss(&self) -> usize {
        status_kib(self.pid(), "VmHWM:") * 1024
    }
}

impl Drop for KvProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Resident set size of `pid` from `/proc/<pid>/statm`, bytes.
pub fn rss_of(pid: i32) -> usize {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).expect("read statm");
    let pages: usize = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm rss");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    pages * page
}

/// A `kB` field of `/proc/<pid>/status`.
pub fn status_kib(pid: i32, field: &str) -> usize {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// Any child process started by a test (python, nutcracker); killed and
/// reaped on drop, also when the test panics.
pub struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What the conformance checks need to know about a server under test.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: Addr,
    /// The item size limit (`-I`).
    pub max_item: usize,
    /// The model, as `stats settings` reports it.
    pub model: String,
    /// The server's process id.
    pub pid: u32,
    /// The memory limit, bytes.
    pub memory_limit: usize,
}

impl Target {
    pub fn connect(&self) -> Client {
        Client::connect(&self.addr)
    }
}

impl InProc {
    pub fn target(&self) -> Target {
        let cfg = small_config(&self.model);
        Target {
            addr: self.addr.clone(),
            max_item: cfg.max_item_size,
            model: self.model.to_string(),
            pid: std::process::id(),
            memory_limit: cfg.memory_limit,
        }
    }
}

impl Client {
    /// Sends `req` as is and asserts that exactly `want` comes back, then
    /// that nothing else is pending (for requests that carry their own `mn`).
    #[track_caller]
    pub fn expect_raw(&mut self, req: &[u8], want: &[u8]) {
        self.send(req);
        let got = self.read_n(want.len());
        assert!(
            got == want,
            "request {}\n  want {}\n  got  {}",
            show(req),
            show(want),
            show(&got)
        );
        let rest = self.call(b"");
        assert!(
            rest.is_empty(),
            "request {}: unexpected extra bytes {}",
            show(req),
            show(&rest)
        );
    }

    /// `mg <key> t` → the TTL left (-1: never), `None` on a miss.
    #[track_caller]
    pub fn ttl_of(&mut self, key: &str) -> Option<i64> {
        let r = self.call(format!("mg {key} t\r\n").as_bytes());
        if r == b"EN\r\n" {
            return None;
        }
        let s = String::from_utf8_lossy(&r);
        let t = s
            .strip_prefix("HD t")
            .and_then(|t| t.strip_suffix("\r\n"))
            .and_then(|t| t.parse().ok());
        Some(t.unwrap_or_else(|| panic!("mg {key} t: {}", show(&r))))
    }
}

/// The current Unix time, seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

impl Client {
    /// Reads one `\r\n`-terminated line, or what came before the server
    /// closed the connection.
    pub fn read_to_eof_or_line(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while !out.ends_with(b"\r\n") {
            match self.rd(&mut buf) {
                Ok(0) => break,
                Ok(k) => out.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("read a line: {e}; got {}", show(&out)),
            }
        }
        out
    }
}

impl Client {
    /// The socket's descriptor (for socket options).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match &self.s {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Client {
    /// Reads exactly `n` `\r\n`-terminated lines (the caller knows no more
    /// is coming), without their terminators.
    pub fn read_lines(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let count = |b: &[u8]| b.windows(2).filter(|w| w == b"\r\n").count();
        while count(&out) < n {
            match self.rd(&mut buf) {
                Ok(0) => panic!("connection closed after {}", show(&out)),
                Ok(k) => out.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read {n} lines: {e}; got {}", show(&out)),
            }
        }
        let text = out.strip_suffix(b"\r\n").unwrap_or_else(|| {
            panic!("more than {n} lines: {}", show(&out));
        });
        let lines: Vec<Vec<u8>> = text
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
            .collect();
        assert_eq!(lines.len(), n, "lines: {}", show(&out));
        lines
    }
}

impl KvProc {
    /// Waits up to `limit` for the server's stderr to contain `text`.
    pub fn wait_stderr(&self, text: &str, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.stderr_text().contains(text) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The real memcached, for byte-for-byte comparisons: `memcached -p <port>
/// -U 0 -l 127.0.0.1 -m 64 -t 2 <extra>`, killed on drop.
pub struct Memcached {
    _child: ChildGuard,
    /// Where it listens.
    pub addr: SocketAddr,
}

pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

impl Memcached {
    /// The memcached binary, if installed.
    pub fn binary() -> Option<&'static str> {
        ["/usr/bin/memcached", "/usr/local/bin/memcached"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
    }

    /// Starts it with `extra` arguments (64 MiB, 2 threads).
    pub fn start(extra: &[&str]) -> Memcached {
        let binary = extra.windows(2).any(|w| w == ["-B", "binary"]);
        Memcached::start_probed(extra, |addr| {
            duality_bench::servers::stats_pid(addr, binary)
        })
    }

    /// [`Memcached::start`] with `-Y`: its readiness probe first sends
    /// `login` (a `set` of `user password`).
    pub fn start_authenticated(extra: &[&str], login: &str) -> Memcached {
        Memcached::start_probed(extra, |addr| {
            let mut s = std::net::TcpStream::connect(addr).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            s.write_all(format!("{login}stats\r\n").as_bytes()).ok()?;
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.ends_with(b"END\r\n") {
                let n = s.read(&mut buf).ok()?;
                if n == 0 {
                    return None;
                }
                got.extend_from_slice(&buf[..n]);
            }
            let text = String::from_utf8_lossy(&got).into_owned();
            let line = text.lines().find(|l| l.starts_with("STAT pid "))?;
            line["STAT pid ".len()..].trim().parse().ok()
        })
    }

    /// [`Memcached::start`] with `-S` and Cyrus SASL's configuration in
    /// `conf_dir` (`SASL_CONF_PATH`): its readiness probe first sends a
    /// binary PLAIN auth of `plain` (`authzid NUL user NUL password`).
    pub fn start_sasl(extra: &[&str], conf_dir: &std::path::Path, plain: &[u8]) -> Memcached {
        let mut auth = vec![0x80, 0x21, 0, 5, 0, 0, 0, 0];
        auth.extend_from_slice(&(5 + plain.len() as u32).to_be_bytes());
        auth.extend_from_slice(&[0; 12]);
        auth.extend_from_slice(b"PLAIN");
        auth.extend_from_slice(plain);
        let mut all = vec!["-S"];
        all.extend_from_slice(extra);
        Memcached::start_with(&all, &[("SASL_CONF_PATH", conf_dir.as_os_str())], |addr| {
            let mut s = std::net::TcpStream::connect(addr).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            s.write_all(&auth).ok()?;
            let mut head = [0u8; 24];
            s.read_exact(&mut head).ok()?;
            let mut body =
                vec![0; u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize];
            s.read_exact(&mut body).ok()?;
            (head[6..8] == [0, 0]).then_some(())?;
            // Then a binary stat on the authenticated connection.
            duality_bench::servers::stats_pid_on(s, true).ok()
        })
    }

    /// Starts it; `pid_at` reads the pid of what answers at an address.
    fn start_probed(extra: &[&str], pid_at: impl Fn(SocketAddr) -> Option<u32>) -> Memcached {
        Memcached::start_with(extra, &[], pid_at)
    }

    /// [`start_probed`](Self::start_probed) with `env` set for it.
    fn start_with(
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
        pid_at: impl Fn(SocketAddr) -> Option<u32>,
    ) -> Memcached {
        let bin = Memcached::binary()
            .expect("memcached is not installed (apt-get install memcached; CI installs it)");
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new(bin);
            cmd.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"]);
            cmd.args(["-m", "64", "-t", "2"]).args(extra);
            cmd.envs(env.iter().copied());
            if running_as_root() {
                // memcached refuses to run as root without -u.
                cmd.args(["-u", "root"]);
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn memcached");
            let pid = child.id();
            let mut guard = ChildGuard(Some(child));
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                // Another test's server may have taken the port between
                // free_port() and memcached's bind: only an answer from this
                // child's pid counts (memcached then exits, and we retry).
                if pid_at(addr) == Some(pid) {
                    return Memcached {
                        _child: guard,
                        addr,
                    };
                }
                if let Ok(Some(st)) = guard.0.as_mut().unwrap().try_wait() {
                    last = format!("memcached exited: {st}");
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("memcached did not start: {last}");
    }
}

/// duality on `model` with memcached's defaults (64 MiB, 1 MiB items), the
/// other side of a byte-for-byte comparison with [`Memcached`].
pub fn like_memcached(model: &str, enable_shutdown: bool) -> InProc {
    let m: Model = model.parse().expect("model");
    let config = KvConfig {
        enable_shutdown,
        ..like_memcached_config(&m)
    };
    InProc::start(m, config, false)
}

/// The configuration [`like_memcached`] starts `m` with.
pub fn like_memcached_config(m: &Model) -> KvConfig {
    KvConfig {
        memory_limit: 64 << 20,
        max_item_size: 1 << 20,
        threads: 2,
        model: m.to_string(),
        ..KvConfig::default()
    }
}

/// Starts `duality ARGS` with stdout and stderr piped and reads its ready
/// line; stderr's pipe stays with the child (the caller may close it).
pub fn spawn_ready(args: &[&std::ffi::OsStr]) -> (Child, String) {
    spawn_ready_with(|c| {
        c.args(args);
    })
}

/// [`spawn_ready`] with the command as `set_up` makes it (its arguments,
/// its environment).
pub fn spawn_ready_with(set_up: impl FnOnce(&mut Command)) -> (Child, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_duality"));
    set_up(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn duality");
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .expect("read the ready line");
    (child, ready)
}

/// The CPUs this process may use, and the lowest CPU it may not (for
/// `--cpu-affinity` refusals).
pub fn cpus_and_one_outside() -> (Vec<usize>, usize) {
    let allowed = duality_rt::affinity::allowed_cpus().unwrap();
    let outside = (0..1024).find(|c| !allowed.contains(c)).unwrap();
    (allowed, outside)
}
