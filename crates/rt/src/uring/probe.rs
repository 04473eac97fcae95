//! Whether io_uring can be used here, and what the kernel supports
//! (each probed once, on a thread of its own).

use super::*;

/// Runs a probe that creates a ring on a short-lived thread of its own.
/// The kernel ties a ring to the thread that created or submitted to it:
/// tearing the ring down sends that thread task work with a notification
/// signal, which interrupts its next blocking socket wait that has a
/// timeout (`EINTR`; a test's client read failed so). A probe must not
/// leave that to whichever thread asked first (a server's builder, a
/// caller's own thread). Where no thread can be started, runs here.
pub(super) fn on_own_thread<T: Send + 'static>(f: fn() -> T) -> T {
    match std::thread::Builder::new()
        .name("uring-probe".into())
        .spawn(f)
    {
        Ok(t) => t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
        Err(_) => f(),
    }
}

/// Why a process cannot use io_uring here, if it cannot (probed once, on
/// a thread of its own: [`on_own_thread`]).
pub(crate) fn unavailable() -> Option<&'static str> {
    static PROBE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            if std::env::var_os("DUALITY_URING_REFUSE").is_some() {
                return Some("refused by DUALITY_URING_REFUSE".into());
            }
            on_own_thread(probe_ring)
        })
        .as_deref()
}

/// What [`unavailable`] says, probed on the calling thread.
pub(super) fn probe_ring() -> Option<String> {
    match IoUring::new(8) {
        Err(e) => Some(format!("the kernel refused a ring: {e}")),
        Ok(ring) => {
            let mut probe = io_uring::Probe::new();
            if let Err(e) = ring.submitter().register_probe(&mut probe) {
                return Some(format!("cannot probe opcodes: {e}"));
            }
            let needed = [
                opcode::RecvMulti::CODE,
                opcode::Send::CODE,
                opcode::SendMsg::CODE,
                opcode::AcceptMulti::CODE,
                opcode::PollAdd::CODE,
                opcode::AsyncCancel::CODE,
            ];
            if needed.iter().any(|&c| !probe.is_supported(c)) {
                return Some("the kernel lacks an opcode the backend needs".into());
            }
            if !ring.params().is_feature_ext_arg() {
                return Some("the kernel lacks IORING_FEAT_EXT_ARG".into());
            }
            // Every receive needs the provided-buffer ring: a loop that
            // could not register one would fail its reads, so refuse here.
            if let Err(e) = BufRing::probe(&ring) {
                return Some(format!("cannot register a provided-buffer ring: {e}"));
            }
            None
        }
    }
}

/// Whether the kernel ends a multishot receive by itself after a total
/// number of bytes (`sqe->optlen`, Linux 6.17). With it a receive never
/// takes more than its connection's queue has room for; without it, a
/// receive that ran ahead is cancelled, and until the cancel is in, the
/// kernel goes on receiving (in 32-buffer bursts: over 128 KiB). Probed
/// once, on a socket pair with a byte waiting and no buffer group: a kernel
/// that knows the field answers `ENOBUFS`, an older one refuses it
/// (`EINVAL`: the same bytes were `file_index`, which receives reject).
/// On a thread of its own ([`on_own_thread`]).
pub(super) fn recv_limit_supported() -> bool {
    static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| on_own_thread(probe_recv_limit))
}

/// What [`recv_limit_supported`] says, probed on the calling thread.
pub(super) fn probe_recv_limit() -> bool {
    let probe = || -> io::Result<Option<i32>> {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let mut ring = IoUring::new(2)?;
        let (a, mut b) = std::os::unix::net::UnixStream::pair()?;
        b.write_all(b"x")?;
        let sqe = with_total_limit(
            opcode::RecvMulti::new(types::Fd(a.as_raw_fd()), BUF_GROUP)
                .build()
                .user_data(1),
            1,
        );
        // SAFETY: the entry carries no pointer (a provided-buffer
        // receive); the socket outlives the ring, dropped first below.
        unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
        let ts = types::Timespec::new().sec(1);
        let args = types::SubmitArgs::new().timespec(&ts);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) => return Err(e),
        }
        let res = ring.completion().next().map(|c| c.result());
        drop(ring);
        Ok(res)
    };
    matches!(probe(), Ok(Some(r)) if r != -libc::EINVAL)
}

/// `sqe` with its `optlen` set: for a multishot receive, the most bytes it
/// takes in all before it ends (0: no limit).
pub(super) fn with_total_limit(mut sqe: squeue::Entry, limit: u32) -> squeue::Entry {
    const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);
    // SAFETY: `squeue::Entry` is `#[repr(C)]` around the kernel's 64-byte
    // `struct io_uring_sqe` (checked above), whose bytes 44..48 are the
    // `u32 optlen` of its fifth union in the stable uapi layout; this
    // writes that plain integer, unaligned-safe, inside the entry.
    unsafe {
        (&mut sqe as *mut squeue::Entry)
            .cast::<u8>()
            .add(44)
            .cast::<u32>()
            .write_unaligned(limit);
    }
    sqe
}
