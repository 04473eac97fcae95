//! `duality http` as a child process, for the `http_*` end-to-end tests.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `duality http --model symped:2` on a free port; SIGTERM (then SIGKILL
/// after 10 s) on drop.
pub struct HttpServer {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`, from its `ready` line.
    pub url: String,
}

impl HttpServer {
    /// Serves `root`, with `extra` flags.
    pub fn start(root: &Path, extra: &[&str]) -> HttpServer {
        HttpServer::try_start(root, extra).unwrap_or_else(|line| panic!("no ready line: {line:?}"))
    }

    /// As [`start`](Self::start); what it printed instead of a ready line
    /// when it did not start (an address named in `extra` was taken, say).
    pub fn try_start(root: &Path, extra: &[&str]) -> Result<HttpServer, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_duality"))
            .args(["http", "--listen", "127.0.0.1:0", "--model", "symped:2"])
            .arg("--root")
            .arg(root)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start duality http");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(url) = line.trim().strip_prefix("ready ").map(str::to_owned) else {
            terminate(&mut child);
            return Err(line);
        };
        Ok(HttpServer {
            child: Some(child),
            url,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM; the exit status.
    pub fn stop(mut self) -> ExitStatus {
        terminate(&mut self.child.take().unwrap())
    }
}

/// SIGTERM, then SIGKILL if it has not exited within 10 s; the status.
pub fn terminate(child: &mut Child) -> ExitStatus {
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait().unwrap()
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&mut c);
        }
    }
}
