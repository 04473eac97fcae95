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
    /// Its standard error so far (the first 64 KiB).
    said: std::sync::Arc<std::sync::Mutex<String>>,
}

impl HttpServer {
    /// Serves `root`, with `extra` flags (under `symped:2` unless they
    /// name a `--model`).
    pub fn start(root: &Path, extra: &[&str]) -> HttpServer {
        HttpServer::try_start(root, extra).unwrap_or_else(|line| panic!("no ready line: {line:?}"))
    }

    /// As [`start`](Self::start); what it printed instead of a ready line
    /// when it did not start (an address named in `extra` was taken, say),
    /// with its standard error and exit status.
    pub fn try_start(root: &Path, extra: &[&str]) -> Result<HttpServer, String> {
        HttpServer::try_start_with_env(root, extra, &[])
    }

    /// As [`start`](Self::start), with `env` added to its environment.
    #[allow(dead_code)]
    pub fn start_with_env(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> HttpServer {
        HttpServer::try_start_with_env(root, extra, env)
            .unwrap_or_else(|line| panic!("no ready line: {line:?}"))
    }

    fn try_start_with_env(
        root: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<HttpServer, String> {
        let model: &[&str] = match extra.contains(&"--model") {
            true => &[],
            false => &["--model", "symped:2"],
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_duality"))
            .args(["http", "--listen", "127.0.0.1:0"])
            .args(model)
            .arg("--root")
            .arg(root)
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start duality http");
        // Its standard error, kept (a server that did not start says why
        // there), the rest drained and dropped.
        let stderr = child.stderr.take().unwrap();
        let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let keep = said.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut k = keep.lock().unwrap();
                if k.len() < 64 * 1024 {
                    k.push_str(&l);
                    k.push('\n');
                }
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(url) = line.trim().strip_prefix("ready ").map(str::to_owned) else {
            let status = terminate(&mut child);
            // The drain thread reads to the end once the process is gone.
            std::thread::sleep(Duration::from_millis(100));
            let said = said.lock().unwrap().clone();
            return Err(format!("{line}{said}({status})"));
        };
        Ok(HttpServer {
            child: Some(child),
            url,
            said,
        })
    }

    /// Whether its standard error has said `text` within `limit`.
    pub fn says(&self, text: &str, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.said.lock().unwrap().contains(text) {
                return true;
            }
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
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
