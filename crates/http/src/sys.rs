//! The system calls the server makes directly, and the only `unsafe` of
//! this crate: `sendfile(2)` and `readahead(2)`.
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

/// Reads `len` bytes of `file` from its start into the page cache and
/// waits for them (`readahead(2)` blocks until the data is read), so that a
/// later `sendfile` of them does not wait for the disk. Call it where
/// blocking is allowed (the blocking pool).
pub(crate) fn readahead(file: &std::fs::File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: readahead only reads a descriptor (an invalid one yields
    // EBADF) and two integers; no memory is passed.
    let r = unsafe { libc::readahead(file.as_raw_fd(), 0, len as usize) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
