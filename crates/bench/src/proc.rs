//! Reading this process's (or another's) resource use from `/proc`.

use crate::interrupt::SpawnUnlessInterrupted;
use std::io;

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> io::Result<u64> {
    rss_of("self")
}

/// Resident set size of process `pid` (or `"self"`), in bytes.
pub fn rss_of(pid: &str) -> io::Result<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm"))?;
    let resident: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other("unexpected /proc/statm format"))?;
    Ok(resident * page_size())
}

/// The first number after `key` (e.g. `"Threads:"`) on a line of
/// `/proc/<pid>/<file>` (`status`, `io`); `None` if it cannot be read.
pub fn field(pid: u32, file: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The system page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

/// CPU time (user + system) of process `pid`, its ended threads' included:
/// from the process's CPU clock (nanoseconds), else from
/// `/proc/<pid>/stat` (clock ticks, 10 ms here: a short quick run under a
/// loaded machine read 0).
pub fn cpu_time_of(pid: u32) -> io::Result<std::time::Duration> {
    if let Some(t) = cpu_clock_of(pid) {
        return Ok(t);
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    cpu_time_from_stat(&stat, clock_ticks())
        .ok_or_else(|| io::Error::other("unexpected /proc/<pid>/stat format"))
}

/// The CPU clock of process `pid` (`clock_getcpuclockid`), if it can be read.
fn cpu_clock_of(pid: u32) -> Option<std::time::Duration> {
    // The clock id holds the pid shifted: past the kernel's largest pid
    // (2^22) it would name another clock.
    if pid == 0 || pid > 1 << 22 {
        return None;
    }
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: writes a clock id into a live local.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a live local timespec.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(std::time::Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// Parses utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line.
pub fn cpu_time_from_stat(stat: &str, ticks_per_sec: u64) -> Option<std::time::Duration> {
    // The command name (field 2) may hold spaces: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(std::time::Duration::from_secs_f64(
        (utime + stime) as f64 / ticks_per_sec.max(1) as f64,
    ))
}

/// Clock ticks per second (`_SC_CLK_TCK`).
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

/// Process `pid` and its children (nginx's workers), from `/proc`.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let ppid = std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    s[s.rfind(')')? + 2..]
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                });
            if ppid == Some(pid) {
                pids.push(p);
            }
        }
    }
    pids
}

/// CPU time (user + system) of the processes `pids`, summed (one that
/// has gone counts nothing).
pub fn cpu_time_of_all(pids: &[u32]) -> std::time::Duration {
    pids.iter()
        .map(|&p| cpu_time_of(p).unwrap_or_default())
        .sum()
}

/// Context switches (voluntary + involuntary) of every live thread of `pid`.
pub fn ctx_switches_of(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|s| duality_rt::stats::parse_ctxt_switches(&s))
        .map(|(v, i)| v + i)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_time_even_with_spaces_in_the_name() {
        let stat =
            "1234 (my server) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 2 3";
        assert_eq!(
            cpu_time_from_stat(stat, 100),
            Some(std::time::Duration::from_secs(3))
        );
        assert_eq!(cpu_time_from_stat("garbage", 100), None);
    }

    #[test]
    fn reads_this_process() {
        assert!(rss_bytes().unwrap() > 0);
        // Finer than a clock tick: 2 ms of work shows.
        let before = cpu_time_of(std::process::id()).unwrap();
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        assert!(cpu_time_of(std::process::id()).unwrap() > before);
        // A process that is gone has no CPU time.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        assert!(cpu_time_of(child.id()).is_err());
        assert!(cpu_time_of(u32::MAX / 2).is_err());
        assert!(ctx_switches_of(std::process::id()) > 0);
        let me = std::process::id();
        let t = std::thread::spawn(move || field(me, "status", "Threads:"));
        assert!(
            t.join().unwrap().unwrap() >= 2,
            "this thread and the one asking"
        );
        assert!(field(me, "status", "VmRSS:").unwrap() > 0);
        assert_eq!(field(me, "status", "NoSuchKey:"), None);
        assert_eq!(field(me, "no-such-file", "Threads:"), None);
    }
}

/// Counts the system calls of another process while it lives, with `perf
/// stat` on the `raw_syscalls:sys_enter` tracepoint (a counter in the kernel:
/// no per-call trip to user space, unlike strace). `None` where perf is
/// missing or not allowed to trace.
pub struct SyscallCounter {
    child: std::process::Child,
}

impl SyscallCounter {
    /// Starts counting the system calls of every thread of `pid`.
    pub fn start(pid: u32) -> Option<SyscallCounter> {
        let child = std::process::Command::new("perf")
            .args(["stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p"])
            .arg(pid.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn_unless_interrupted()
            .ok()?;
        // perf attaches asynchronously: give it a moment before the window.
        std::thread::sleep(std::time::Duration::from_millis(50));
        Some(SyscallCounter { child })
    }

    /// Stops counting (SIGINT, as perf expects) and returns the count.
    pub fn finish(self) -> Option<u64> {
        // SAFETY: kill sends a signal to our own child by its PID.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let out = self.child.wait_with_output().ok()?;
        parse_perf_count(&String::from_utf8_lossy(&out.stderr))
    }
}

/// The count from `perf stat -x,` output (`12345,,raw_syscalls:sys_enter,...`).
pub fn parse_perf_count(out: &str) -> Option<u64> {
    out.lines()
        .find(|l| l.contains("raw_syscalls:sys_enter"))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod syscall_tests {
    #[test]
    fn perf_csv_is_parsed() {
        let out = "1234567,,raw_syscalls:sys_enter,2001234,100.00,,\n";
        assert_eq!(super::parse_perf_count(out), Some(1234567));
        assert_eq!(
            super::parse_perf_count("<not counted>,,raw_syscalls:sys_enter"),
            None
        );
        assert_eq!(super::parse_perf_count(""), None);
    }

    #[test]
    fn the_process_tree_holds_the_process_and_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let tree = super::process_tree(me);
        assert_eq!(tree[0], me);
        assert!(tree.contains(&child.id()), "{tree:?}");
        let _ = child.kill();
        let _ = child.wait();
    }
}
