//! An interrupted run leaves nothing behind: no server it started, no
//! temporary file or directory.
//!
//! [`install`] starts one thread that waits for SIGINT, SIGTERM or SIGHUP
//! (the terminal closed: by default it killed the bench alone and left its
//! servers running). On any of them it
//!
//! 1. marks the run [`interrupted`] (the main thread, whose measurement now
//!    fails, must not report that failure: see [`park_if_interrupted`]);
//! 2. closes the spawn gate: every child this crate starts goes through
//!    [`SpawnUnlessInterrupted`], whose calls hold the gate while they fork and
//!    refuse once it is closed, so a child is either started before the
//!    gate closes (and found by the next step) or never started (a server
//!    the main thread was about to start as the signal came, between two
//!    measurements, would otherwise outlive the run); and closes the write
//!    gate the same way: a path made in many steps (a set of files) is
//!    written through [`TempPath::step`], so no step runs once removal may
//!    have begun (a writer that did not look recreated directories behind
//!    the remover, then marked the half-made set complete);
//! 3. sends SIGTERM to every child process of this one, waits up to
//!    [`GRACE`] for them and their own children (nginx's workers) to exit,
//!    then sends SIGKILL to every descendant still alive, and looks again
//!    until no descendant is left (a child spawned meanwhile is caught too);
//! 4. removes every path registered with [`TempPath`];
//! 5. prints one line, `duality: interrupted (SIGTERM)`, and exits with
//!    128 + the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for
//!    SIGHUP), as a shell reports a command a signal ended.
//!
//! A bench killed outright (SIGKILL, or a crash) runs none of this. For
//! that, every child started through [`SpawnUnlessInterrupted`] asks the
//! kernel for SIGTERM when its parent dies (`PR_SET_PDEATHSIG`), and a
//! child that runs a group of its own (nginx: master and workers) is
//! registered as a [`ProcessGroup`], signalled as a whole, so that workers
//! whose master died are stopped too.
//!
//! Children are found by their parent pid in `/proc`, not by a list kept at
//! every spawn: whatever spawns them (`Command::spawn`, `output`, a helper
//! on another thread) they are found, if they exist when the signal thread
//! looks; the gate makes sure none is started after it has looked for the
//! last time. Temporary paths are registered where they are made (before
//! the file or the process that makes them), and unregistered (and
//! removed) when their guard drops, or kept with [`TempPath::keep`] (a
//! file made whole, for the next run). A path is removed by one side only:
//! the signal thread if it took it from the register, else its guard,
//! which holds the register while it removes (the signal thread, which
//! exits the process once it has removed its own, waits for it).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long children get to exit after SIGTERM before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// The signal that interrupted the run, 0 while none has.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Temporary paths to remove on an interrupt, by registration id.
fn temp_paths() -> &'static Mutex<HashMap<u64, PathBuf>> {
    static PATHS: OnceLock<Mutex<HashMap<u64, PathBuf>>> = OnceLock::new();
    PATHS.get_or_init(Default::default)
}

/// A file or directory this run made and must not leave behind: removed
/// when the guard drops, or by the signal thread if the run is interrupted
/// first.
#[derive(Debug)]
pub struct TempPath {
    id: u64,
    path: PathBuf,
}

impl TempPath {
    /// Registers `path` (which need not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> TempPath {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = path.into();
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        lock_paths().insert(id, path.clone());
        TempPath { id, path }
    }

    /// The registered path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `step`, one step of making the path (a file of a set, say),
    /// unless the run has been interrupted: an `Interrupted` error then. The
    /// signal thread closes the gate, after any step in progress, before it
    /// removes the registered paths, so nothing is written under a path
    /// once its removal may have begun.
    pub fn step<T>(&self, step: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
        WRITES.pass(step)
    }

    /// Unregisters the path and leaves it in place: a file made whole, to be
    /// kept for the next run. (Interrupted before this, it is removed.)
    pub fn keep(mut self) -> PathBuf {
        lock_paths().remove(&self.id);
        // Drop then finds an empty path: nothing to remove.
        std::mem::take(&mut self.path)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        // Taken by the signal thread (or kept): not ours to remove. Ours:
        // removed with the register held, so that the signal thread does
        // not exit the process halfway through (a set of files takes a
        // while) nor remove it at the same time.
        let mut paths = lock_paths();
        if paths.remove(&self.id).is_some() {
            remove(&self.path);
        }
    }
}

fn lock_paths() -> std::sync::MutexGuard<'static, HashMap<u64, PathBuf>> {
    // A panic while the map was held leaves it whole: keep using it.
    temp_paths().lock().unwrap_or_else(|e| e.into_inner())
}

fn remove(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

/// Whether the work it guards may still go on: held while a piece of it
/// runs, closed (set to true, for good) by the signal thread before it
/// undoes that work (stops the children, removes the paths).
struct Gate {
    closed: Mutex<bool>,
    /// What a refusal says.
    refusal: &'static str,
}

impl Gate {
    const fn new(refusal: &'static str) -> Gate {
        Gate {
            closed: Mutex::new(false),
            refusal,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.closed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` unless the gate is closed (an `Interrupted` error then).
    /// The gate is held until `f` returns, so [`Gate::close`] returns only
    /// once every piece of work that passed has finished.
    fn pass<T>(&self, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
        let closed = self.lock();
        if *closed {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                self.refusal,
            ));
        }
        f()
    }

    /// Closes the gate, after any piece of work in progress has finished.
    fn close(&self) {
        *self.lock() = true;
    }
}

/// Held while a child is started: once closed, every child is in /proc.
static SPAWNS: Gate = Gate::new("the run was interrupted: no process is started any more");

/// Writes a results file (a table, JSON, CSV or a plot) unless the run has
/// been interrupted: an `Interrupted` error then. A write in progress when
/// the signal comes finishes before the process exits (the gate is held
/// while it runs), so an interrupted run leaves no half-written file, and
/// none after the signal: an experiment that goes on after a failed
/// measurement (its rows then read "not measured") does not write a set
/// that looks finished.
pub fn results_step<T, E: From<std::io::Error>>(
    write: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    let closed = WRITES.lock();
    if *closed {
        return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, WRITES.refusal).into());
    }
    write()
}

/// Held while a step of a [`TempPath`] or a results file is written: once
/// closed, nothing is written under a registered path, nor a results file,
/// any more.
static WRITES: Gate = Gate::new("the run was interrupted: no file is written any more");

/// [`Command::spawn`] and [`Command::output`] unless the run has been
/// interrupted: every child of an experiment is started through these, so
/// that none is started after the signal thread has stopped the others.
///
/// Each child also gets SIGTERM from the kernel when the bench dies
/// without stopping it (SIGKILL, a crash): `PR_SET_PDEATHSIG`, set in the
/// child before it runs its program. Linux sends it when the *thread* that
/// started the child exits, not the process: children are started from
/// the thread that runs the experiment (the main thread, which lives as
/// long as the run); one started from a short-lived thread would be
/// stopped when that thread ends.
pub trait SpawnUnlessInterrupted {
    /// [`Command::spawn`], or an `Interrupted` error once the run is.
    fn spawn_unless_interrupted(&mut self) -> std::io::Result<Child>;
    /// [`Command::output`] (stdin from /dev/null, stdout and stderr
    /// captured), or an `Interrupted` error once the run is.
    fn output_unless_interrupted(&mut self) -> std::io::Result<Output>;
    /// [`SpawnUnlessInterrupted::output_unless_interrupted`] for a program
    /// that must answer within `limit` (a version probe): past it the
    /// child is killed by its PID and the error (`TimedOut`) says so.
    fn output_within(&mut self, limit: Duration) -> std::io::Result<Output>;
}

impl SpawnUnlessInterrupted for Command {
    fn spawn_unless_interrupted(&mut self) -> std::io::Result<Child> {
        die_with_this_process(self);
        SPAWNS.pass(|| self.spawn())
    }

    fn output_unless_interrupted(&mut self) -> std::io::Result<Output> {
        self.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_unless_interrupted()?
            .wait_with_output()
    }

    fn output_within(&mut self, limit: Duration) -> std::io::Result<Output> {
        use std::io::Read;
        let mut child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_unless_interrupted()?;
        // Read on threads of their own: a child that fills a pipe would
        // otherwise never exit, and one that never closes it (a program it
        // left running) must not hold this thread either.
        let read = |pipe: Option<Box<dyn Read + Send>>| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut buf);
                }
                let _ = tx.send(buf);
            });
            rx
        };
        let out = read(child.stdout.take().map(|p| Box::new(p) as _));
        let err = read(child.stderr.take().map(|p| Box::new(p) as _));
        let until = Instant::now() + limit;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() >= until {
                // By its PID: our own child, not yet reaped.
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("gave no answer within {} s", limit.as_secs_f64()),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // What it wrote before it exited; a pipe something else still
        // holds open is not waited for past the limit.
        let rest = until.saturating_duration_since(Instant::now()) + Duration::from_millis(100);
        Ok(Output {
            status,
            stdout: out.recv_timeout(rest).unwrap_or_default(),
            stderr: err.recv_timeout(rest).unwrap_or_default(),
        })
    }
}

/// Has the kernel send `cmd`'s child SIGTERM when this process dies
/// (`PR_SET_PDEATHSIG`; see [`SpawnUnlessInterrupted`] for the thread it
/// is tied to). A bench that died while the child was being started is
/// caught too: the child then refuses to run its program.
fn die_with_this_process(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it makes two system calls
    // (prctl, getppid) and builds errors from raw codes, allocating
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: no signal will come.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Process groups this run started, by group id.
fn lock_groups() -> std::sync::MutexGuard<'static, HashSet<i32>> {
    static GROUPS: OnceLock<Mutex<HashSet<i32>>> = OnceLock::new();
    // A panic while the set was held leaves it whole: keep using it.
    GROUPS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A process group this run started (a child spawned with
/// `process_group(0)`: nginx, whose master and workers share it). While
/// registered, an interrupt kills the whole group, also members whose
/// leader has died (they are no descendants of this process any more).
/// Unregistered on drop; stopping the group is its owner's job
/// ([`ProcessGroup::signal`]).
#[derive(Debug)]
pub struct ProcessGroup {
    pgid: i32,
}

impl ProcessGroup {
    /// Registers the group led by `leader`, a child spawned in a group of
    /// its own.
    pub fn new(leader: u32) -> ProcessGroup {
        let pgid = leader as i32;
        lock_groups().insert(pgid);
        ProcessGroup { pgid }
    }

    /// Sends `sig` to every process of the group (none left: nothing).
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) takes plain integers; -pgid names our own group,
        // whose leader the owner has not reaped, or whose id is still held
        // by a member (the kernel does not reuse it while one lives).
        unsafe { libc::kill(-self.pgid, sig) };
    }

    /// Whether any process of the group is alive (not a zombie).
    pub fn alive(&self) -> bool {
        members(self.pgid).next().is_some()
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        lock_groups().remove(&self.pgid);
    }
}

/// The live (not zombie) processes of group `pgid`, from `/proc`.
fn members(pgid: i32) -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(move |pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| parse_stat_group(&s))
                .is_some_and(|(state, g)| g == pgid && state != 'Z' && state != 'X')
        })
}

/// The signal that interrupted this run, if one has.
pub fn interrupted() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Called by the main thread when the experiment returns: if the run was
/// interrupted, its result (likely an error caused by the servers being
/// stopped) is not the run's outcome, and the signal thread is exiting the
/// process; wait for it instead of reporting.
pub fn park_if_interrupted() {
    if interrupted().is_some() {
        loop {
            std::thread::park();
        }
    }
}

/// Starts the signal thread (once per process; later calls do nothing).
/// `catch` makes the signal iterator over the signals it is given (the
/// binary's, which loses none that come while it is set up).
pub fn install(
    catch: impl FnOnce(&[i32]) -> std::io::Result<signal_hook::iterator::Signals>,
) -> std::io::Result<()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut wanted = vec![signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];
    // Under `nohup` SIGHUP comes ignored: the run is meant to outlive the
    // terminal, so it stays ignored.
    if !ignored(libc::SIGHUP) {
        wanted.push(signal_hook::consts::SIGHUP);
    }
    let mut signals = catch(&wanted)?;
    let _ = INSTALLED.set(());
    std::thread::Builder::new()
        .name("interrupt".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                SIGNAL.store(sig, Ordering::SeqCst);
                // No child is started from here on; one being started now
                // is in /proc before `close` returns. Nothing is written
                // under a registered path either (closed first: the writer
                // stops at once, not after the children).
                SPAWNS.close();
                WRITES.close();
                stop_descendants(GRACE);
                // Groups whose leader is gone are no descendants any more
                // (nginx's workers after their master died): by group.
                for g in lock_groups().iter() {
                    // SAFETY: kill(2) takes plain integers; a negative pid
                    // names a process group this run started.
                    unsafe { libc::kill(-g, libc::SIGKILL) };
                }
                let paths: Vec<PathBuf> = lock_paths().drain().map(|(_, p)| p).collect();
                for p in &paths {
                    remove(p);
                }
                let name = signal_name(sig);
                duality_rt::say!("duality: interrupted ({name})");
                std::process::exit(128 + sig);
            }
        })?;
    Ok(())
}

/// Whether `sig` is ignored (`SIG_IGN`) in this process.
fn ignored(sig: i32) -> bool {
    // SAFETY: all-zero bytes are a valid `sigaction`; with a null new
    // action, sigaction(2) only writes the current one into it.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `old` is a live local.
    let r = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    r == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// The name a shell gives the signals [`install`] waits for.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGHUP => "SIGHUP",
        _ => "SIGTERM",
    }
}

/// SIGTERM to this process's children, up to `grace` for every descendant
/// to exit, then SIGKILL to the rest, until none is left (bounded: a
/// process that survives SIGKILL for long is not waited for forever).
fn stop_descendants(grace: Duration) {
    let me = std::process::id() as i32;
    let mut termed = HashSet::new();
    let until = Instant::now() + grace;
    let give_up = until + Duration::from_secs(3);
    loop {
        let tree = descendants(me);
        if tree.is_empty() || Instant::now() > give_up {
            return;
        }
        let killing = Instant::now() >= until;
        for d in &tree {
            if killing {
                // SAFETY: kill(2) takes plain integers.
                unsafe { libc::kill(d.pid, libc::SIGKILL) };
            } else if d.ppid == me && termed.insert(d.pid) {
                // Our own children get SIGTERM (they stop their own
                // children, as nginx's master its workers).
                // SAFETY: kill(2) takes plain integers.
                unsafe { libc::kill(d.pid, libc::SIGTERM) };
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Proc {
    pid: i32,
    ppid: i32,
}

/// The live (not zombie) descendants of `root`, from `/proc`.
fn descendants(root: i32) -> Vec<Proc> {
    let mut all = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if let Some((state, ppid)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| parse_stat(&s))
            {
                all.push((Proc { pid, ppid }, state));
            }
        }
    }
    let mut tree: HashSet<i32> = HashSet::from([root]);
    let mut out = Vec::new();
    // Parents may be listed after their children: repeat until no growth.
    loop {
        let before = tree.len();
        for (p, _) in &all {
            if tree.contains(&p.ppid) {
                tree.insert(p.pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    for (p, state) in all {
        if p.pid != root && tree.contains(&p.pid) && state != 'Z' && state != 'X' {
            out.push(p);
        }
    }
    out
}

/// The state and parent pid in a `/proc/PID/stat` line (the command name,
/// in parentheses, may hold spaces and parentheses itself).
fn parse_stat(s: &str) -> Option<(char, i32)> {
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The state and process group in a `/proc/PID/stat` line.
fn parse_stat_group(s: &str) -> Option<(char, i32)> {
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let pgrp = f.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_stat_reads_past_a_name_with_parentheses() {
        assert_eq!(parse_stat("42 (a) b (c)) S 7 42 42 0 -1"), Some(('S', 7)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn parse_stat_group_reads_the_fifth_field() {
        assert_eq!(
            parse_stat_group("42 (a) b (c)) S 7 40 40 0 -1"),
            Some(('S', 40))
        );
        assert_eq!(parse_stat_group("42 (x) S 7"), None);
    }

    #[test]
    fn every_awaited_signal_has_its_shell_name() {
        assert_eq!(signal_name(libc::SIGINT), "SIGINT");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGHUP), "SIGHUP");
    }

    /// A child gets SIGTERM when the thread that started it ends (the
    /// bench dying runs no handler of ours): before, it slept on.
    #[test]
    fn a_child_is_stopped_when_its_starter_dies() {
        let child = std::thread::spawn(|| {
            Command::new("sleep")
                .arg("30")
                .stdin(Stdio::null())
                .spawn_unless_interrupted()
                .unwrap()
        })
        .join()
        .unwrap();
        let mut child = child;
        let until = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child outlived the thread that started it");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn output_within_kills_a_program_that_does_not_answer() {
        let t0 = Instant::now();
        // An argument no other test's `sleep` has: they run in this process too.
        let e = Command::new("sleep")
            .arg("30.125")
            .output_within(Duration::from_millis(200))
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(e.to_string(), "gave no answer within 0.2 s");
        assert!(t0.elapsed() < Duration::from_secs(5));
        // Reaped: no child of this process runs it any more.
        let me = std::process::id() as i32;
        assert!(!descendants(me).iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{}/cmdline", p.pid))
                .is_ok_and(|c| c == "sleep\x0030.125\x00")
        }));
        let o = Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output_within(Duration::from_secs(10))
            .unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(
            (&o.stdout[..], &o.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
    }

    /// A group outlives its leader (nginx's workers after their master
    /// died); signalled as a group, it is gone.
    #[test]
    fn a_process_group_is_stopped_without_its_leader() {
        use std::os::unix::process::CommandExt;
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn_unless_interrupted()
            .unwrap();
        let pgid = leader.id() as i32;
        let group = ProcessGroup::new(leader.id());
        assert!(lock_groups().contains(&pgid));
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(leader.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let worker: i32 = line.trim().parse().unwrap();
        leader.kill().unwrap();
        leader.wait().unwrap();
        assert!(group.alive(), "the worker lives on without its leader");
        group.signal(libc::SIGKILL);
        let until = Instant::now() + Duration::from_secs(5);
        while group.alive() {
            assert!(Instant::now() < until, "worker {worker} still alive");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(group);
        assert!(!lock_groups().contains(&pgid));
    }

    #[test]
    fn a_child_is_a_descendant_until_it_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let pid = child.id() as i32;
        assert!(descendants(me).iter().any(|p| p.pid == pid && p.ppid == me));
        child.kill().unwrap();
        // Killed but not reaped: a zombie, no longer counted.
        let until = Instant::now() + Duration::from_secs(5);
        while descendants(me).iter().any(|p| p.pid == pid) {
            assert!(Instant::now() < until, "still alive");
            std::thread::sleep(Duration::from_millis(10));
        }
        child.wait().unwrap();
    }

    #[test]
    fn a_closed_gate_starts_nothing() {
        let gate = Gate::new("closed");
        let mut ok = gate.pass(|| Command::new("true").spawn()).unwrap();
        ok.wait().unwrap();
        gate.close();
        let e = gate
            .pass(|| Command::new("sleep").arg("30").spawn())
            .expect_err("a closed gate started a process");
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
    }

    #[test]
    fn a_closed_gate_runs_no_step() {
        let gate = Gate::new("closed");
        let mut ran = 0;
        gate.pass(|| {
            ran += 1;
            Ok(())
        })
        .unwrap();
        gate.close();
        let e = gate
            .pass(|| {
                ran += 1;
                Ok(())
            })
            .expect_err("a closed gate ran a step");
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
        assert_eq!(e.to_string(), "closed");
        assert_eq!(ran, 1);
    }

    #[test]
    fn close_waits_for_work_in_progress() {
        // A spawn or a step holding the gate (here: held by hand, as `pass`
        // holds it across its work) delays `close` until it is done.
        let gate = std::sync::Arc::new(Gate::new("closed"));
        let held = gate.lock();
        let g2 = gate.clone();
        let closer = std::thread::spawn(move || g2.close());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!closer.is_finished(), "closed while a spawn held the gate");
        assert!(!*held);
        drop(held);
        closer.join().unwrap();
        assert!(*gate.lock());
    }

    #[test]
    fn a_kept_temp_path_stays_and_is_unregistered() {
        let p = std::env::temp_dir().join(format!("duality-keep-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        let t = TempPath::new(&p);
        assert_eq!(t.keep(), p);
        assert!(p.exists());
        assert!(!lock_paths().values().any(|q| q == &p));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_temp_path_is_removed_and_unregistered_on_drop() {
        let p = std::env::temp_dir().join(format!("duality-interrupt-{}", std::process::id()));
        std::fs::create_dir_all(p.join("x")).unwrap();
        let t = TempPath::new(&p);
        assert!(lock_paths().values().any(|q| q == &p));
        drop(t);
        assert!(!p.exists());
        assert!(!lock_paths().values().any(|q| q == &p));
    }

    #[test]
    fn a_path_the_signal_thread_took_is_left_to_it() {
        // Drained from the register (as the signal thread does before it
        // removes): the guard's drop must not remove it at the same time.
        let p = std::env::temp_dir().join(format!("duality-taken-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        let t = TempPath::new(&p);
        assert_eq!(lock_paths().remove(&t.id), Some(p.clone()));
        drop(t);
        assert!(p.exists());
        std::fs::remove_file(&p).unwrap();
    }
}
