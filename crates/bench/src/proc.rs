//! Reading this process's (or another's) resource use from `/proc`.

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

/// CPU time (user + system) of process `pid`, from `/proc/<pid>/stat`.
pub fn cpu_time_of(pid: u32) -> io::Result<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    cpu_time_from_stat(&stat, clock_ticks())
        .ok_or_else(|| io::Error::other("unexpected /proc/<pid>/stat format"))
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
        assert!(cpu_time_of(std::process::id()).is_ok());
        assert!(ctx_switches_of(std::process::id()) > 0);
    }
}
