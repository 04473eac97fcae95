//! Starting and stopping the servers an experiment compares, each as its own
//! process, stopped by its PID (SIGTERM, then SIGKILL after 5 s) even when the
//! experiment fails. A server's standard error is kept (its last lines) so
//! that one that fails to start says why.

use crate::interrupt::SpawnUnlessInterrupted;
use crate::interrupt::TempPath;
use crate::loadgen::Target;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The last lines a child wrote to its standard error, read by a thread of
/// this process (so a chatty server never blocks on a full pipe).
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl StderrTail {
    /// Lines kept.
    const KEEP: usize = 8;

    /// Takes `child`'s piped stderr (`None` if it was not piped).
    pub fn capture(child: &mut Child) -> Option<StderrTail> {
        let err = child.stderr.take()?;
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let kept = Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == StderrTail::KEEP {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        Some(StderrTail { lines, reader })
    }

    /// What the child wrote last, on one line (`; ` between its lines),
    /// after waiting up to `within` for the child to close its stderr
    /// (it has exited) so that its last words are in.
    pub fn last_words(&self, within: Duration) -> String {
        let until = Instant::now() + within;
        while !self.reader.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let words: Vec<&str> = lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect();
        words.join("; ")
    }
}

/// `what did not start: …` with the child's last words, or its exit status
/// where it said nothing.
pub fn start_error(
    what: &str,
    child: &mut Child,
    tail: Option<&StderrTail>,
    stdout_line: &str,
) -> anyhow::Error {
    let words = tail
        .map(|t| t.last_words(Duration::from_secs(2)))
        .unwrap_or_default();
    let status = match child.try_wait() {
        Ok(Some(s)) => format!(" ({s})"),
        _ => String::new(),
    };
    let said = match (words.is_empty(), stdout_line.trim().is_empty()) {
        (false, _) => words,
        (true, false) => stdout_line.trim().to_string(),
        (true, true) => "it said nothing".to_string(),
    };
    anyhow::anyhow!("{what} did not start{status}: {said}")
}

/// A server under test.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerKind {
    /// `duality kv --model M`; `M/POLICY` adds `--handoff POLICY`,
    /// `M@BACKEND` `--io BACKEND`, `M+BALANCE` `--accept-balance BALANCE`
    /// (in that order: `amped:1/adaptive@uring+reuseport`).
    Duality(String),
    /// `memcached -t N`.
    Memcached(usize),
    /// The kv server on tokio with N workers.
    Tokio(usize),
}

impl ServerKind {
    /// The label used in tables and JSON (`duality symped:2`, `memcached -t 2`, `tokio -t 2`).
    pub fn label(&self) -> String {
        match self {
            ServerKind::Duality(m) => format!("duality {m}"),
            ServerKind::Memcached(t) => format!("memcached -t {t}"),
            ServerKind::Tokio(t) => format!("tokio -t {t}"),
        }
    }
}

/// Checks a [`ServerKind::Duality`] spec
/// (`MODEL[/POLICY][@BACKEND][+BALANCE][%CPUS]`) before anything is
/// measured, with the same words `duality kv` would use.
pub fn check_duality_spec(spec: &str) -> anyhow::Result<()> {
    let (spec, affinity) = split_affinity(spec);
    if let Some(a) = affinity.get(1) {
        a.parse::<duality_models::CpuAffinity>()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let (rest, balance) = match spec.split_once('+') {
        Some((m, b)) => (m, Some(b)),
        None => (spec, None),
    };
    let (rest, io) = match rest.split_once('@') {
        Some((m, io)) => (m, Some(io)),
        None => (rest, None),
    };
    let (model, policy) = match rest.split_once('/') {
        Some((m, p)) => (m, Some(p)),
        None => (rest, None),
    };
    model
        .parse::<duality_models::Model>()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(p) = policy {
        p.parse::<duality_models::Handoff>()
            .map_err(|e| anyhow::anyhow!("hand-off policy {p:?}: {e}"))?;
    }
    if let Some(io) = io {
        io.parse::<duality_rt::IoBackend>()
            .map_err(|e| anyhow::anyhow!("I/O backend {io:?}: {e}"))?;
    }
    if let Some(b) = balance {
        b.parse::<duality_models::Balance>()
            .map_err(|e| anyhow::anyhow!("accept balance {b:?}: {e}"))?;
    }
    Ok(())
}

/// `SPEC%CPUS` as the rest of the spec and the `--cpu-affinity` arguments
/// that pin its threads; `off` without `%`, so a `DUALITY_CPU_AFFINITY` in
/// the bench's environment cannot pin a row whose label does not say so.
pub fn split_affinity(spec: &str) -> (&str, Vec<&str>) {
    match spec.rsplit_once('%') {
        Some((m, cpus)) => (m, vec!["--cpu-affinity", cpus]),
        None => (spec, vec!["--cpu-affinity", "off"]),
    }
}

/// `MODEL/POLICY` as the model and the `--handoff` arguments that make it.
pub fn split_handoff(model: &str) -> (&str, Vec<&str>) {
    match model.split_once('/') {
        Some((m, policy)) => (m, vec!["--handoff", policy]),
        None => (model, Vec::new()),
    }
}

/// Is memcached installed? The first `memcached` on `PATH`, else in
/// /usr/bin or /usr/local/bin (not always on a service's `PATH`).
pub fn memcached_path() -> Option<PathBuf> {
    find_executable("memcached", &["/usr/bin", "/usr/local/bin"])
}

/// The first executable file `name` in `$PATH`'s directories, then in
/// `extra` (where a package puts it though `$PATH` may lack the directory).
pub(crate) fn find_executable(name: &str, extra: &[&str]) -> Option<PathBuf> {
    find_executable_in(&std::env::var_os("PATH").unwrap_or_default(), name, extra)
}

/// [`find_executable`] over the search path `path`. A file that is not
/// executable is passed over, as a shell does (one such `nginx` first on
/// the path failed the run with "Permission denied").
fn find_executable_in(path: &std::ffi::OsStr, name: &str, extra: &[&str]) -> Option<PathBuf> {
    std::env::split_paths(path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The servers' `-c` (most connections) unless an experiment sets it.
pub const DEFAULT_MAX_CONNS: usize = 16_384;

/// memcached's `-c` for `wanted` connections under the hard descriptor
/// limit `hard`: memcached sets its descriptor limit (soft and hard) to
/// `-c` and exits (71, "failed to set rlimit for open files") where that
/// is above the hard limit, so `-c` is at most `hard`. Experiments bound
/// their clients by the limit less a margin up front
/// ([`crate::limits::check_descriptors`]), so the clients still fit.
pub fn memcached_max_conns(wanted: usize, hard: u64) -> usize {
    wanted
        .min(usize::try_from(hard).unwrap_or(usize::MAX))
        .max(1)
}

/// How a child ended, in words: `exited with status 1`, `killed by signal
/// 9 (SIGKILL)`.
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => {
            let name = match s {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGINT => " (SIGINT)",
                _ => "",
            };
            format!("killed by signal {s}{name}")
        }
        _ => format!("ended ({status})"),
    }
}

/// A running server process.
pub struct ServerProcess {
    child: Child,
    /// Its Unix socket, removed when it stops.
    _socket: Option<TempPath>,
    /// What it last wrote on stderr.
    stderr: Option<StderrTail>,
    /// How to reach it.
    pub target: Target,
}

impl ServerProcess {
    /// Starts `kind` listening on `target` (its Unix socket path or TCP port)
    /// with a 1 GiB cache.
    pub fn start(exe: &Path, kind: &ServerKind, target: &Target) -> anyhow::Result<ServerProcess> {
        ServerProcess::start_with_memory(exe, kind, target, 1024)
    }

    /// Like [`ServerProcess::start`] with `-m mib` (the tokio peer ignores it).
    pub fn start_with_memory(
        exe: &Path,
        kind: &ServerKind,
        target: &Target,
        mib: usize,
    ) -> anyhow::Result<ServerProcess> {
        ServerProcess::start_with_limits(exe, kind, target, mib, DEFAULT_MAX_CONNS)
    }

    /// Like [`ServerProcess::start_with_memory`] with `-c max_conns` (the
    /// tokio peer has no connection limit). memcached sets its descriptor
    /// limit to `-c` itself; duality's servers inherit this process's.
    pub fn start_with_limits(
        exe: &Path,
        kind: &ServerKind,
        target: &Target,
        mib: usize,
        max_conns: usize,
    ) -> anyhow::Result<ServerProcess> {
        let mib = mib.to_string();
        let max_conns_n = max_conns;
        let max_conns = max_conns.to_string();
        let mut cmd;
        let mut wait_line = true;
        match kind {
            ServerKind::Duality(model) => {
                cmd = Command::new(exe);
                let (model, affinity) = split_affinity(model);
                let (model, balance) = match model.split_once('+') {
                    Some((m, b)) => (m, Some(b)),
                    None => (model, None),
                };
                let (model, io) = match model.split_once('@') {
                    Some((m, io)) => (m, Some(io)),
                    None => (model, None),
                };
                let (model, handoff) = split_handoff(model);
                cmd.args(["kv", "--model", model, "-m", &mib, "-c", &max_conns]);
                cmd.args(handoff);
                cmd.args(affinity);
                if let Some(io) = io {
                    cmd.args(["--io", io]);
                }
                if let Some(b) = balance {
                    cmd.args(["--accept-balance", b]);
                }
                match target {
                    Target::Unix(p) => cmd.args(["-p", "0", "-s"]).arg(p),
                    Target::Tcp(a) => {
                        cmd.args(["-l", &a.ip().to_string(), "-p", &a.port().to_string()])
                    }
                };
            }
            ServerKind::Tokio(t) => {
                cmd = Command::new(exe);
                cmd.args(["internal", "kv-tokio", "--threads", &t.to_string()]);
                match target {
                    Target::Unix(p) => cmd.arg("--unix").arg(p),
                    Target::Tcp(a) => cmd.args(["--tcp", &a.to_string()]),
                };
            }
            ServerKind::Memcached(t) => {
                let bin = memcached_path().ok_or_else(|| {
                    anyhow::anyhow!(
                        "memcached is not installed (Debian: apt-get install memcached)"
                    )
                })?;
                cmd = Command::new(bin);
                let conns = memcached_max_conns(max_conns_n, crate::limits::fd_hard_limit());
                cmd.args([
                    "-t",
                    &t.to_string(),
                    "-m",
                    &mib,
                    "-c",
                    &conns.to_string(),
                    "-U",
                    "0",
                ]);
                // SAFETY: geteuid only reads the process's credentials.
                if unsafe { libc::geteuid() } == 0 {
                    cmd.args(["-u", "root"]);
                }
                match target {
                    Target::Unix(p) => cmd.arg("-s").arg(p),
                    Target::Tcp(a) => {
                        cmd.args(["-l", &a.ip().to_string(), "-p", &a.port().to_string()])
                    }
                };
                wait_line = false;
            }
        }
        if let Target::Unix(p) = target {
            let _ = std::fs::remove_file(p);
        }
        let socket = match target {
            Target::Unix(p) => Some(TempPath::new(p)),
            Target::Tcp(_) => None,
        };
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_unless_interrupted()
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot run {} ({}): {e}",
                    kind.label(),
                    Path::new(cmd.get_program()).display()
                )
            })?;
        let out = child.stdout.take().expect("piped");
        let stderr = StderrTail::capture(&mut child);
        let mut me = ServerProcess {
            child,
            _socket: socket,
            stderr,
            target: target.clone(),
        };
        if wait_line {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            if !line.starts_with("ready") {
                return Err(start_error(
                    &kind.label(),
                    &mut me.child,
                    me.stderr.as_ref(),
                    &line,
                ));
            }
        }
        if let Err(e) = me.wait_connectable(Duration::from_secs(5)) {
            let words = me
                .stderr
                .as_ref()
                .map(|t| t.last_words(Duration::from_millis(500)))
                .filter(|w| !w.is_empty())
                .map(|w| format!(": {w}"))
                .unwrap_or_default();
            anyhow::bail!("{} is not accepting connections: {e}{words}", kind.label());
        }
        Ok(me)
    }

    /// Starts `kind` on a free loopback TCP port with `-m mib -c
    /// max_conns`. Another process may take the port between choosing it
    /// and the server's bind (memcached says nothing when it starts, so only
    /// a connection tells): the server counts as started when `stats` on
    /// that port names its own pid; otherwise it is stopped and started
    /// again on another port.
    pub fn start_on_free_port(
        exe: &Path,
        kind: &ServerKind,
        mib: usize,
        max_conns: usize,
    ) -> anyhow::Result<(ServerProcess, std::net::SocketAddr)> {
        let mut last = String::new();
        for _ in 0..3 {
            let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
            match ServerProcess::start_with_limits(exe, kind, &Target::Tcp(addr), mib, max_conns) {
                Ok(s) => match stats_pid_or_why(addr, false) {
                    Ok(pid) if pid == s.pid() => return Ok((s, addr)),
                    Ok(pid) => last = format!("another process (pid {pid}) answered on {addr}"),
                    Err(why) => last = format!("{addr}: {why}"),
                },
                Err(e) => last = e.to_string(),
            }
        }
        anyhow::bail!("{} did not start: {last}", kind.label())
    }

    fn wait_connectable(&mut self, within: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + within;
        loop {
            let ok = match &self.target {
                Target::Unix(p) => std::os::unix::net::UnixStream::connect(p).is_ok(),
                Target::Tcp(a) => std::net::TcpStream::connect(a).is_ok(),
            };
            if ok {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("exited with {status}");
            }
            anyhow::ensure!(Instant::now() < until, "timed out");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How it ended, if it has (`killed by signal 9 (SIGKILL)`), with its
    /// last words on stderr where it exited by itself (a killed server's
    /// are whatever it logged last): a server that died mid-run is
    /// reported as such, not as a load generator's failed requests.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        let words = self
            .stderr
            .as_ref()
            .filter(|_| status.code().is_some())
            .map(|t| t.last_words(Duration::from_millis(500)))
            .filter(|w| !w.is_empty())
            .map(|w| format!(": {}", w.chars().take(300).collect::<String>()))
            .unwrap_or_default();
        Some(format!("{}{words}", describe_exit(status)))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        // A stopped server (SIGSTOP) acts on SIGTERM only once continued.
        // SAFETY: as above.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `pid` the memcached-protocol server at `addr` reports in `stats`
/// (through the binary protocol's stat command with `binary`, for a server
/// that speaks only that); `None` if nothing answers so. A server started
/// on a port picked free counts as started only when its own pid answers:
/// another process may have taken the port meanwhile.
pub fn stats_pid(addr: std::net::SocketAddr, binary: bool) -> Option<u32> {
    stats_pid_or_why(addr, binary).ok()
}

/// [`stats_pid`], or what went wrong in words: no connection, no answer
/// within 2 s, the connection closed, or an answer without a pid.
pub fn stats_pid_or_why(addr: std::net::SocketAddr, binary: bool) -> Result<u32, String> {
    let s = std::net::TcpStream::connect(addr).map_err(|e| format!("connecting: {e}"))?;
    stats_pid_on(s, binary)
}

/// [`stats_pid_or_why`] on a connection already made (one that has
/// authenticated, say).
pub fn stats_pid_on(mut s: std::net::TcpStream, binary: bool) -> Result<u32, String> {
    use std::io::{Read, Write};
    s.set_read_timeout(Some(STATS_WAIT))
        .map_err(|e| e.to_string())?;
    let read = |s: &mut std::net::TcpStream, buf: &mut [u8]| match s.read(buf) {
        Ok(0) => Err("it closed the connection".to_string()),
        Ok(n) => Ok(n),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(format!(
                "no answer to `stats` within {} s",
                STATS_WAIT.as_secs()
            ))
        }
        Err(e) => Err(format!("reading: {e}")),
    };
    let no_pid = || "its `stats` has no pid".to_string();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    if binary {
        // A stat request (opcode 0x10); the answer is one packet per stat,
        // the last with an empty key.
        let mut req = [0u8; 24];
        req[0] = 0x80;
        req[1] = 0x10;
        s.write_all(&req).map_err(|e| format!("writing: {e}"))?;
        loop {
            while out.len() < 24 || out.len() < 24 + be32(&out[8..12]) {
                let n = read(&mut s, &mut buf)?;
                out.extend_from_slice(&buf[..n]);
            }
            let klen = usize::from(u16::from_be_bytes([out[2], out[3]]));
            let (xlen, body) = (usize::from(out[4]), be32(&out[8..12]));
            let key = &out[24 + xlen..24 + xlen + klen];
            if key.is_empty() {
                return Err(no_pid());
            }
            if key == b"pid" {
                let v = &out[24 + xlen + klen..24 + body];
                return std::str::from_utf8(v)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(no_pid);
            }
            out.drain(..24 + body);
        }
    }
    s.write_all(b"stats\r\n")
        .map_err(|e| format!("writing: {e}"))?;
    while !out.ends_with(b"END\r\n") {
        let n = read(&mut s, &mut buf)?;
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out)
        .lines()
        .find_map(|l| l.strip_prefix("STAT pid "))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(no_pid)
}

/// How long [`stats_pid`] waits for an answer.
const STATS_WAIT: Duration = Duration::from_secs(2);

fn be32(b: &[u8]) -> usize {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_names_its_cpu_placement_last() {
        assert_eq!(
            split_affinity("seda-s:2@uring+least-loaded%0-1"),
            ("seda-s:2@uring+least-loaded", vec!["--cpu-affinity", "0-1"])
        );
        assert_eq!(
            split_affinity("symped:2"),
            ("symped:2", vec!["--cpu-affinity", "off"])
        );
        check_duality_spec("seda-s:2/adaptive@epoll%auto").unwrap();
        let e = check_duality_spec("seda-s:2%0-x").unwrap_err().to_string();
        assert!(e.contains("use off, auto or a CPU list"), "{e}");
    }

    #[test]
    fn a_program_that_is_not_executable_is_passed_over() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("duality-find-exe-{}", std::process::id()));
        let (a, b) = (base.join("a"), base.join("b"));
        for (d, mode) in [(&a, 0o644), (&b, 0o755)] {
            std::fs::create_dir_all(d).unwrap();
            let f = d.join("prog");
            std::fs::write(&f, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(find_executable_in(&path, "prog", &[]), Some(b.join("prog")));
        let only_a = std::env::join_paths([&a]).unwrap();
        assert_eq!(find_executable_in(&only_a, "prog", &[]), None);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A peer on `addr` that answers each connection with `answer` (and
    /// holds it open `hold`) after reading a request.
    fn peer(answer: &'static [u8], hold: Duration) -> std::net::SocketAddr {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 64];
            let _ = c.read(&mut buf);
            let _ = c.write_all(answer);
            std::thread::sleep(hold);
        });
        addr
    }

    /// A peer that took the port but is not the server started there is
    /// reported for what it did, not as "another process answered".
    #[test]
    fn a_stats_without_a_pid_says_why() {
        let ok = peer(b"STAT uptime 1\r\nSTAT pid 42\r\nEND\r\n", Duration::ZERO);
        assert_eq!(stats_pid_or_why(ok, false), Ok(42));
        let closes = peer(b"", Duration::ZERO);
        assert_eq!(
            stats_pid_or_why(closes, false),
            Err("it closed the connection".into())
        );
        let no_pid = peer(b"STAT uptime 1\r\nEND\r\n", Duration::ZERO);
        assert_eq!(
            stats_pid_or_why(no_pid, false),
            Err("its `stats` has no pid".into())
        );
        let silent = peer(b"", STATS_WAIT * 2);
        let e = stats_pid_or_why(silent, false).unwrap_err();
        assert!(e.starts_with("no answer to `stats` within"), "{e}");
    }

    /// Under a hard limit of 4,096 memcached was still given `-c 16384`
    /// and exited at start ("failed to set rlimit for open files").
    #[test]
    fn memcached_connections_stay_under_the_hard_limit() {
        assert_eq!(memcached_max_conns(DEFAULT_MAX_CONNS, 4096), 4096);
        assert_eq!(memcached_max_conns(DEFAULT_MAX_CONNS, 1 << 20), 16_384);
        assert_eq!(memcached_max_conns(100, 4096), 100);
        assert_eq!(memcached_max_conns(100, u64::MAX), 100);
    }

    #[test]
    fn an_exit_is_described_by_status_or_signal() {
        use std::os::unix::process::ExitStatusExt;
        let s = std::process::ExitStatus::from_raw;
        assert_eq!(describe_exit(s(1 << 8)), "exited with status 1");
        assert_eq!(describe_exit(s(9)), "killed by signal 9 (SIGKILL)");
        assert_eq!(describe_exit(s(10)), "killed by signal 10");
    }

    /// A server that exits mid-run says so, with its last words.
    #[test]
    fn a_server_that_died_says_how() {
        let mut child = Command::new("sh")
            .args(["-c", "echo bye >&2; exit 3"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = StderrTail::capture(&mut child);
        let mut s = ServerProcess {
            child,
            _socket: None,
            stderr,
            target: Target::Tcp("127.0.0.1:1".parse().unwrap()),
        };
        let until = Instant::now() + Duration::from_secs(5);
        let said = loop {
            if let Some(said) = s.exited() {
                break said;
            }
            assert!(Instant::now() < until, "still running");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(said, "exited with status 3: bye");
    }
}
