//! The system calls the server makes directly, and the only `unsafe` of
//! this crate: `sendfile(2)`, `cachestat(2)`, `preadv2(2)`,
//! `readahead(2)` and `openat2(2)`.
//!
//! It takes a raw descriptor because that is what
//! [`Conn::write_with_for`](duality_models::Conn::write_with_for) gives. A
//! descriptor that is not open is not a memory-safety problem: the kernel
//! answers `EBADF`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

/// Sends up to `count` bytes of `file` from `*offset` to `socket`, advancing
/// `*offset` by what was sent. `Ok(0)`: the file ends before `*offset`.
/// On a non-blocking socket that is full: `Err(WouldBlock)`.
pub(crate) fn sendfile(
    socket: RawFd,
    file: RawFd,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(*offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    // SAFETY: `sendfile` reads two descriptors (an invalid one yields EBADF,
    // never undefined behaviour) and reads and writes one `off_t` through the
    // pointer, which points to `off`, a live, aligned local for the whole call.
    let n = unsafe { libc::sendfile(socket, file, &mut off, count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(n as usize)
}

/// Sends `buf` to `socket` without waiting, saying more follows
/// (`MSG_MORE`: TCP holds it to leave in one segment with the next send,
/// the body's `sendfile`). `Err(WouldBlock)` when the socket is full.
pub(crate) fn send_more(socket: RawFd, buf: &[u8]) -> io::Result<usize> {
    let flags = libc::MSG_MORE | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    // SAFETY: `send` reads `buf.len()` bytes from `buf`, a live slice, and
    // one descriptor (an invalid one yields EBADF).
    let n = unsafe { libc::send(socket, buf.as_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `openat2(2)`'s `struct open_how` (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Set once `openat2(2)` answered `ENOSYS` (kernels before 5.6) or
/// `EPERM` (a seccomp filter): every later call answers `Unsupported`
/// without asking.
static NO_OPENAT2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// An `O_PATH` descriptor of `rel` under the directory `dir`, found without
/// leaving `dir` and without meeting a symlink on the way (`openat2(2)`
/// with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): one path walk, where
/// `realpath(3)` reads every component's link again from `/`. `O_PATH`
/// opens nothing for I/O: a FIFO or a device under the root is not
/// touched. Any refusal (a symlink, `ELOOP`; a missing file; no
/// `openat2`, `Unsupported`) is an error for the caller to take the long
/// way.
pub(crate) fn open_path_beneath(
    dir: std::os::fd::BorrowedFd<'_>,
    rel: &std::ffi::CStr,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::atomic::Ordering::Relaxed;
    if NO_OPENAT2.load(Relaxed) {
        return Err(io::ErrorKind::Unsupported.into());
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: openat2 reads a descriptor (a closed one yields EBADF), the
    // NUL-terminated string `rel` (live for the call) and `how`, a live
    // local of the size passed; it writes no memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        // ENOSYS: no openat2 (before 5.6); EPERM: most often a seccomp
        // filter's refusal. Either way only the short way is given up.
        if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
            NO_OPENAT2.store(true, Relaxed);
        }
        return Err(e);
    }
    // SAFETY: `r` is a descriptor the kernel just opened for this call and
    // nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as RawFd) })
}

/// Starts reading `len` bytes of `file` from `offset` into the page cache
/// (`readahead(2)`: it returns once the reads are issued, not done), for a
/// reader that will go through them in order off the loops anyway.
pub(crate) fn readahead(file: &std::fs::File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let offset = libc::off64_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    // SAFETY: readahead only reads a descriptor (an invalid one yields
    // EBADF) and integers; no memory is passed.
    let r = unsafe { libc::readahead(file.as_raw_fd(), offset, len as usize) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Can the bytes at `offset` and at `offset + len - 1` of `file` be read
/// now, without waiting for the disk? A one-byte `preadv2(RWF_NOWAIT)` at
/// each end: `cachestat(2)` counts pages the kernel is still reading in
/// (read-ahead past a read, up to megabytes) as cached, and a `sendfile`
/// of them waited on the loop. A heuristic: pages between the two ends
/// may still be on their way (read-ahead fills a range in order, so
/// rarely), and a probe that finds a page missing starts its read-ahead.
/// `true` where the kernel cannot say.
fn readable_now(file: RawFd, offset: u64, len: u64) -> bool {
    [offset, offset + len - 1].into_iter().all(|at| {
        let Ok(at) = libc::off_t::try_from(at) else {
            return true;
        };
        let mut byte = 0u8;
        let iov = libc::iovec {
            iov_base: (&mut byte as *mut u8).cast(),
            iov_len: 1,
        };
        // SAFETY: preadv2 reads one descriptor (an invalid one yields
        // EBADF) and one iovec, a live local that points to `byte`, a live
        // local one byte long, the most the kernel writes.
        let r = unsafe { libc::preadv2(file, &iov, 1, at, libc::RWF_NOWAIT) };
        r >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN)
    })
}

/// `cachestat(2)`'s number (Linux 6.5+); the same in the generic table and
/// x86-64's. The `libc` crate does not name it for glibc targets yet.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const SYS_CACHESTAT: libc::c_long = 451;

/// Set once `cachestat(2)` has answered ENOSYS or EPERM (an older kernel, a
/// seccomp filter): then every later call answers `None` without asking.
static NO_CACHESTAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Are all pages of `len` bytes of `file` from `offset` in the page cache,
/// and read in (not still on their way from the disk)? `None` when the
/// kernel cannot say (no `cachestat(2)`, and both ends can be read now):
/// the caller then assumes they may not be. Three system calls, no memory
/// mapped: what lets a loop `sendfile` a hot file itself (the disk cannot
/// make it wait) and leave a cold one to the ring's workers or the pool.
pub(crate) fn cached(file: RawFd, offset: u64, len: u64) -> Option<bool> {
    if len == 0 {
        return Some(true);
    }
    match present(file, offset, len) {
        Some(false) => Some(false),
        Some(true) => Some(readable_now(file, offset, len)),
        None => (!readable_now(file, offset, len)).then_some(false),
    }
}

/// `cachestat(2)`: are all pages of the range in the page cache (`None`:
/// the kernel cannot say)?
fn present(file: RawFd, offset: u64, len: u64) -> Option<bool> {
    use std::sync::atomic::Ordering::Relaxed;
    if NO_CACHESTAT.load(Relaxed) {
        return None;
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        let range = Range { off: offset, len };
        let mut st = Stat::default();
        // SAFETY: cachestat reads one descriptor (an invalid one yields
        // EBADF) and the range struct, and writes the stat struct; both are
        // live, aligned locals laid out as the kernel's `struct
        // cachestat_range` / `struct cachestat` (repr(C), u64 fields).
        let r = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                file,
                &range as *const Range,
                &mut st as *mut Stat,
                0u32,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error().raw_os_error();
            if matches!(e, Some(libc::ENOSYS) | Some(libc::EPERM)) {
                NO_CACHESTAT.store(true, Relaxed);
            }
            return None;
        }
        let page = page_size();
        let pages = (offset + len).div_ceil(page) - offset / page;
        Some(st.nr_cache >= pages)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (file, offset);
        NO_CACHESTAT.store(true, Relaxed);
        None
    }
}

fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf only reads its integer argument.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    })
}

/// Seconds east of UTC of the process's time zone now (`TZ`, else
/// `/etc/localtime`; 0 when the C library cannot say): nginx's
/// `autoindex_localtime` shifts every listed time by today's offset.
pub(crate) fn utc_offset_now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as libc::time_t);
    let mut tm = std::mem::MaybeUninit::<libc::tm>::zeroed();
    // SAFETY: `localtime_r` reads the `time_t` behind its first pointer, a
    // live local, and writes one `struct tm` through the second, which
    // points to `tm`, zeroed (a valid `tm`: plain integers and a null
    // zone name) and live for the call; it is the reentrant form, so no
    // static buffer is shared with another thread.
    let filled = unsafe { !libc::localtime_r(&now, tm.as_mut_ptr()).is_null() };
    match filled {
        // SAFETY: zeroed then filled by `localtime_r`: initialised either way.
        // (`from`: `c_long` is 32 bits on 32-bit targets.)
        #[allow(clippy::useless_conversion)]
        true => i64::from(unsafe { tm.assume_init() }.tm_gmtoff),
        false => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn sendfile_sends_a_span_and_reports_the_end() {
        let dir = std::env::temp_dir().join(format!("duality-http-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::File::create(&p)
            .unwrap()
            .write_all(b"0123456789")
            .unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut off = 3;
        assert_eq!(
            sendfile(b.as_raw_fd(), f.as_raw_fd(), &mut off, 4).unwrap(),
            4
        );
        assert_eq!(off, 7);
        let mut got = [0u8; 4];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"3456");
        let mut off = 10;
        assert_eq!(
            sendfile(b.as_raw_fd(), f.as_raw_fd(), &mut off, 4).unwrap(),
            0
        );
        assert!(sendfile(-1, f.as_raw_fd(), &mut off, 4).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cached_counts_the_pages_of_the_span() {
        let dir = std::env::temp_dir().join(format!("duality-http-cst-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, vec![7u8; 3 * 4096 + 100]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        // Just written: its pages are in the page cache.
        match cached(f.as_raw_fd(), 0, 3 * 4096 + 100) {
            None => {
                // No cachestat here (old kernel, seccomp): say so and stop.
                eprintln!("cachestat unavailable; skipping");
                std::fs::remove_dir_all(&dir).unwrap();
                return;
            }
            Some(all) => assert!(all),
        }
        assert_eq!(cached(f.as_raw_fd(), 5000, 10), Some(true));
        assert_eq!(cached(f.as_raw_fd(), 0, 0), Some(true));
        // Pages past the end of the file are never cached.
        assert_eq!(cached(f.as_raw_fd(), 0, 1 << 20), Some(false));
        assert_eq!(cached(f.as_raw_fd(), 1 << 20, 4096), Some(false));
        // A bad descriptor: no answer, and the call stays available.
        assert_eq!(cached(-1, 0, 10), None);
        assert_eq!(cached(f.as_raw_fd(), 0, 10), Some(true));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dropped_span_is_neither_cached_nor_readable_now_until_read_in() {
        let dir = std::env::temp_dir().join(format!("duality-http-rin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, vec![9u8; 64 * 1024]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        f.sync_all().unwrap();
        // SAFETY: posix_fadvise only reads a live descriptor and integers.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
        let fd = f.as_raw_fd();
        if readable_now(fd, 0, 64 * 1024) {
            // tmpfs keeps its pages: nothing is ever cold there.
            eprintln!("the pages stayed (tmpfs?); skipping");
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
        assert_ne!(cached(fd, 0, 64 * 1024), Some(true));
        duality_rt::fs::read_in(&f, 0, 64 * 1024).unwrap();
        assert!(readable_now(fd, 0, 64 * 1024));
        assert_ne!(cached(fd, 0, 64 * 1024), Some(false));
        // Past the end: nothing to read, nothing to wait for.
        assert_eq!(
            duality_rt::fs::read_in(&f, 60 * 1024, 1 << 20).unwrap(),
            4096
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
