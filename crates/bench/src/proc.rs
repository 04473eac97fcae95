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
