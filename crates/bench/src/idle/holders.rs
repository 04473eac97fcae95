//! The processes at the far end of the idle connections: each opens its
//! share, has each served once where asked, reports how many it holds,
//! and keeps them silent until its parent closes its standard input.

use crate::interrupt::SpawnUnlessInterrupted;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where a holder connects.
#[derive(Clone, Debug, PartialEq)]
pub enum HoldTarget {
    /// A Unix socket path (the pipes half).
    Unix(PathBuf),
    /// A TCP address (the cache half).
    Tcp(SocketAddr),
}

impl std::fmt::Display for HoldTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HoldTarget::Unix(p) => write!(f, "unix:{}", p.display()),
            HoldTarget::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl std::str::FromStr for HoldTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(HoldTarget::Unix(PathBuf::from(p)));
        }
        match s.strip_prefix("tcp:").map(str::parse) {
            Some(Ok(a)) => Ok(HoldTarget::Tcp(a)),
            _ => Err(format!("{s:?}: expected unix:PATH or tcp:IP:PORT")),
        }
    }
}

/// Runs in a holder process: opens up to `count` connections to `target`
/// one after the other — with `hello`, each sends `version` and waits for
/// the answer, so the server has accepted and served it — prints `held N`,
/// then keeps them, silent, until its standard input closes. It stops
/// opening at the first refusal (an answer other than `VERSION`, a closed
/// connection, a failed connect) and says why on stderr.
pub fn hold(target: &HoldTarget, count: u64, hello: bool) -> anyhow::Result<()> {
    crate::http::raise_fd_limit();
    let mut unix: Vec<StdUnixStream> = Vec::new();
    let mut tcp: Vec<std::net::TcpStream> = Vec::new();
    let mut line = Vec::with_capacity(64);
    for i in 0..count {
        let r: io::Result<()> = (|| {
            match target {
                HoldTarget::Unix(p) => unix.push(StdUnixStream::connect(p)?),
                HoldTarget::Tcp(a) => {
                    let s = std::net::TcpStream::connect(a)?;
                    if hello {
                        s.set_read_timeout(Some(Duration::from_secs(10)))?;
                        (&s).write_all(b"version\r\n")?;
                        read_line(&s, &mut line)?;
                        if !line.starts_with(b"VERSION") {
                            return Err(io::Error::other(format!(
                                "answered {:?}",
                                String::from_utf8_lossy(&line).trim_end()
                            )));
                        }
                    }
                    tcp.push(s);
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            duality_rt::say!("holder: connection {} of {count} to {target}: {e}", i + 1);
            break;
        }
    }
    let held = unix.len() + tcp.len();
    let mut out = io::stdout().lock();
    writeln!(out, "held {held}")?;
    out.flush()?;
    drop(out);
    // Hold until the parent closes our stdin (or dies).
    let mut sink = [0u8; 64];
    while matches!(io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}

/// Reads one line (up to `\n`) byte by byte: the holder's answers are a
/// few bytes, and no byte of a later answer may be swallowed.
fn read_line(mut s: &std::net::TcpStream, line: &mut Vec<u8>) -> io::Result<()> {
    line.clear();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("closed after {:?}", String::from_utf8_lossy(line)),
            ));
        }
        line.push(b[0]);
    }
    Ok(())
}

/// The holder processes of one point, stopped by PID when dropped.
pub struct Holders {
    children: Vec<Child>,
    reports: mpsc::Receiver<anyhow::Result<u64>>,
    reported: usize,
    held: u64,
}

impl Holders {
    /// Starts holders (`exe bench idle --hold …`) for `count` connections,
    /// at most `per_holder` each; they connect while this returns.
    pub fn start(
        exe: &Path,
        target: &HoldTarget,
        count: u64,
        hello: bool,
        per_holder: u64,
    ) -> anyhow::Result<Holders> {
        let (tx, rx) = mpsc::channel();
        let mut h = Holders {
            children: Vec::new(),
            reports: rx,
            reported: 0,
            held: 0,
        };
        let mut left = count;
        while left > 0 {
            let n = left.min(per_holder.max(1));
            left -= n;
            let mut cmd = Command::new(exe);
            cmd.args(["bench", "idle", "--hold"])
                .arg(target.to_string())
                .arg("--hold-count")
                .arg(n.to_string());
            if hello {
                cmd.arg("--hold-hello");
            }
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn_unless_interrupted()?;
            let out = child.stdout.take().expect("piped");
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let r = BufReader::new(out)
                    .read_line(&mut line)
                    .map_err(anyhow::Error::from)
                    .and_then(|_| {
                        line.trim()
                            .strip_prefix("held ")
                            .and_then(|n| n.parse::<u64>().ok())
                            .ok_or_else(|| anyhow::anyhow!("holder said {line:?}"))
                    });
                let _ = tx.send(r);
            });
            h.children.push(child);
        }
        Ok(h)
    }

    /// The connections held once every holder has reported; `None` before.
    pub fn try_held(&mut self) -> anyhow::Result<Option<u64>> {
        while self.reported < self.children.len() {
            match self.reports.try_recv() {
                Ok(r) => {
                    self.held += r?;
                    self.reported += 1;
                }
                Err(mpsc::TryRecvError::Empty) => return Ok(None),
                Err(mpsc::TryRecvError::Disconnected) => {
                    anyhow::bail!("a holder ended without reporting")
                }
            }
        }
        Ok(Some(self.held))
    }

    /// Waits up to `within` for every holder's report.
    pub fn wait_held(&mut self, within: Duration) -> anyhow::Result<u64> {
        let until = Instant::now() + within;
        while self.reported < self.children.len() {
            let left = until.saturating_duration_since(Instant::now());
            anyhow::ensure!(!left.is_zero(), "holders did not report within {within:?}");
            match self.reports.recv_timeout(left) {
                Ok(r) => {
                    self.held += r?;
                    self.reported += 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("a holder ended without reporting")
                }
            }
        }
        Ok(self.held)
    }

    /// Closes every held connection: stdin closed (each holder exits and
    /// the kernel closes its sockets), SIGKILL by PID after 5 s.
    pub fn close(&mut self) {
        for c in &mut self.children {
            drop(c.stdin.take());
        }
        let until = Instant::now() + Duration::from_secs(5);
        for c in &mut self.children {
            while Instant::now() < until && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.children.clear();
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_print() {
        let t: HoldTarget = "tcp:127.0.0.1:11211".parse().unwrap();
        assert_eq!(t.to_string(), "tcp:127.0.0.1:11211");
        let u: HoldTarget = "unix:/tmp/x.sock".parse().unwrap();
        assert_eq!(u, HoldTarget::Unix("/tmp/x.sock".into()));
        assert!("udp:1".parse::<HoldTarget>().is_err());
    }

    #[test]
    fn a_holder_reads_one_answer_and_nothing_after_it() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(b"VERSION 1\r\nEXTRA").unwrap();
            s
        });
        let c = std::net::TcpStream::connect(a).unwrap();
        let mut line = Vec::new();
        read_line(&c, &mut line).unwrap();
        assert_eq!(line, b"VERSION 1\r\n");
        let _s = t.join().unwrap();
    }
}
