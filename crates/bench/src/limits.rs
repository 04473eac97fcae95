//! What a run may ask of this machine, checked before anything is started
//! or written: memory (`MemAvailable`), open files (`RLIMIT_NOFILE`) and
//! disk space (`statvfs`). A flag past what the machine holds is refused
//! in one line that names the flag, its value and the bound, rather than
//! growing a process until the kernel kills it, filling a disk, or
//! measuring a load generator that ran out of descriptors.
//!
//! Each check takes what the flag asks for as a byte or descriptor count;
//! the caller, which knows the flag, says how a value becomes that count.

use std::path::Path;

/// Descriptors a process of the experiment keeps for itself beside those
/// its flags ask for (listeners, pipes to children, files, the runtime's
/// own): as `http::FD_MARGIN`.
pub const FD_MARGIN: u64 = 256;

/// Free disk space a run leaves on the file system it writes to.
pub const DISK_MARGIN: u64 = 1 << 30;

/// `n` bytes in binary units: `512 B`, `16.0 MiB`, `36.0 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The memory the kernel can give without swapping (`MemAvailable`), in
/// bytes; `None` where `/proc/meminfo` does not say.
pub fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&info, "MemAvailable:")
}

fn meminfo_field(info: &str, name: &str) -> Option<u64> {
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Refuses `what` (a flag and its value, `--counts 1000000000`) when it
/// needs more than `available` bytes of memory.
pub fn check_memory(what: &str, need: u64, available: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        need <= available,
        "{what}: needs about {} of memory, and this machine has {} available (MemAvailable)",
        human_bytes(need),
        human_bytes(available)
    );
    Ok(())
}

/// [`check_memory`] against this machine's [`mem_available`] (no check
/// where it cannot be read).
pub fn ensure_memory(what: &str, need: u64) -> anyhow::Result<()> {
    match mem_available() {
        Some(available) => check_memory(what, need, available),
        None => Ok(()),
    }
}

/// The soft descriptor limit of this process (`ulimit -n`).
pub fn fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a live local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    }
}

/// The hard descriptor limit of this process (`ulimit -Hn`): what a child
/// may raise its own soft limit to.
pub fn fd_hard_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a live local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_max
    } else {
        1024
    }
}

/// The most of a thing that takes `per_item` descriptors a process with
/// `limit` of them may open beside [`FD_MARGIN`] and `reserved` more.
pub fn max_for_descriptors(limit: u64, per_item: u64, reserved: u64) -> u64 {
    limit.saturating_sub(FD_MARGIN + reserved) / per_item.max(1)
}

/// Refuses `flag value` when `value` things of `per_item` descriptors each
/// (and `reserved` more) do not fit under `limit` with [`FD_MARGIN`] kept
/// free: the error gives the most that fit.
pub fn check_descriptors(
    flag: &str,
    value: u64,
    per_item: u64,
    reserved: u64,
    limit: u64,
) -> anyhow::Result<()> {
    let max = max_for_descriptors(limit, per_item, reserved);
    anyhow::ensure!(
        value <= max,
        "{flag} {value}: a process may open {limit} files here (ulimit -n), {}{FD_MARGIN} kept free; at most {max} fit",
        if per_item > 1 {
            format!("{per_item} per one, ")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// The nearest of `path` and its ancestors that exists (`.` for a
/// relative path none of whose parts does).
pub fn nearest_existing(path: &Path) -> &Path {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_ok())
        .unwrap_or(Path::new("."))
}

/// Bytes an unprivileged process may still write on the file system that
/// holds `path` (or would hold it: its nearest existing ancestor).
pub fn free_space(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let at = nearest_existing(path);
    let c = std::ffi::CString::new(at.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: all-zero bytes are a valid `statvfs`; statvfs(2) reads a
    // NUL-terminated path and writes that one struct, on this stack.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Refuses `what` when writing `need` bytes would leave less than
/// [`DISK_MARGIN`] of `free` on the file system of `dir`.
pub fn check_space(what: &str, dir: &Path, need: u64, free: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        need.saturating_add(DISK_MARGIN) <= free,
        "{what}: needs {} in {}, which has {} free (a run leaves {} free)",
        human_bytes(need),
        dir.display(),
        human_bytes(free),
        human_bytes(DISK_MARGIN)
    );
    Ok(())
}

/// [`check_space`] against the file system's free space now.
pub fn ensure_space(what: &str, dir: &Path, need: u64) -> anyhow::Result<()> {
    let free = free_space(dir)
        .map_err(|e| anyhow::anyhow!("cannot read the free space of {}: {e}", dir.display()))?;
    check_space(what, dir, need, free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(16 << 20), "16.0 MiB");
        assert_eq!(human_bytes(36 << 30), "36.0 GiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn meminfo_is_read_in_bytes() {
        let info = "MemTotal:       24683652 kB\nMemAvailable:   23822764 kB\n";
        assert_eq!(
            meminfo_field(info, "MemAvailable:"),
            Some(23_822_764 * 1024)
        );
        assert_eq!(meminfo_field(info, "Nope:"), None);
        assert!(mem_available().is_some_and(|m| m > 0));
    }

    #[test]
    fn memory_past_what_is_available_is_refused_by_name() {
        check_memory("--x 1", 1 << 20, 1 << 30).unwrap();
        let e = check_memory("--counts 99999999999999", 1 << 45, 1 << 34).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--counts 99999999999999: needs about 32.0 TiB of memory, and this machine has 16.0 GiB available (MemAvailable)"
        );
    }

    #[test]
    fn descriptors_keep_the_margin_free() {
        assert_eq!(max_for_descriptors(20_000, 1, 0), 19_744);
        assert_eq!(max_for_descriptors(20_000, 2, 100), 9_822);
        assert_eq!(max_for_descriptors(100, 1, 0), 0);
        check_descriptors("--heavy", 19_744, 1, 0, 20_000).unwrap();
        let e = check_descriptors("--heavy", 100_000, 1, 0, 20_000).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--heavy 100000: a process may open 20000 files here (ulimit -n), 256 kept free; at most 19744 fit"
        );
        let e = check_descriptors("--pairs", 10_000, 2, 0, 20_000).unwrap_err();
        assert!(
            e.to_string()
                .contains("2 per one, 256 kept free; at most 9872 fit"),
            "{e}"
        );
    }

    #[test]
    fn space_is_read_where_the_path_would_be() {
        let missing = std::env::temp_dir().join("duality-no-such-dir/a/b");
        assert_eq!(nearest_existing(&missing), std::env::temp_dir());
        assert_eq!(
            nearest_existing(Path::new("no-such-relative/x")),
            Path::new(".")
        );
        assert!(free_space(&missing).unwrap() > 0);
        check_space("--x", Path::new("/d"), 1, 2 << 30).unwrap();
        let e = check_space(
            "--file-mib 99999999",
            Path::new("/d"),
            99_999_999 << 20,
            35 << 30,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--file-mib 99999999: needs 95.4 TiB in /d, which has 35.0 GiB free (a run leaves 1.0 GiB free)"
        );
        let e = check_space("--x", Path::new("/d"), 1, 1 << 30).unwrap_err();
        assert!(e.to_string().contains("needs 1 B"), "{e}");
    }
}
