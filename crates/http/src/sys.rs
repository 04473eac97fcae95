//! The two system calls the connection handler makes directly, and the only
//! `unsafe` of this crate: `sendfile(2)` and the receive/send timeouts of a
//! blocking socket (`setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)`).
//!
//! Both take a raw descriptor because that is what
//! [`Conn::write_with`](duality_models::Conn::write_with) and
//! [`Conn::as_raw_fd`](duality_models::Conn::as_raw_fd) give. A descriptor
//! that is not open is not a memory-safety problem for either call: the
//! kernel answers `EBADF`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

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

/// Sets `SO_RCVTIMEO` (`read`) and `SO_SNDTIMEO` (`write`) of a blocking
/// socket, those given, so that a blocking read or write gives up with
/// `WouldBlock` after them (the timers of an event loop cannot interrupt a
/// blocked thread). A zero duration would mean "forever" to the kernel: it
/// is raised to 1 ms.
pub(crate) fn set_blocking_timeouts(
    socket: RawFd,
    read: Option<Duration>,
    write: Option<Duration>,
) {
    let given = [(libc::SO_RCVTIMEO, read), (libc::SO_SNDTIMEO, write)];
    for (opt, d) in given.into_iter().filter_map(|(o, d)| Some((o, d?))) {
        let d = d.max(Duration::from_millis(1));
        let tv = libc::timeval {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_usec: d.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: `setsockopt` reads `size_of::<timeval>()` bytes from a
        // pointer to `tv`, a live local of exactly that type; an invalid
        // descriptor yields EBADF.
        let _ = unsafe {
            libc::setsockopt(
                socket,
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
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
}
