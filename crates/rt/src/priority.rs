//! Scheduling priority of pool threads: a nice value, and the "background"
//! class (`SCHED_IDLE`) that the CPU pool uses while it keeps up.
//!
//! Under `SCHED_IDLE` a thread runs only on a core no other thread wants,
//! and a waking event loop preempts it at once (a nice value alone lets the
//! running thread finish its slice first, about a millisecond). But the
//! kernel lets an unprivileged thread into that class and not back out:
//! [`may_leave_idle`] says whether this process can, and the pool uses the
//! class only if it can (it must be able to raise a starving job).

use std::io;

/// The nice value of thread `tid`.
fn nice_of(tid: i32) -> io::Result<i32> {
    // SAFETY: getpriority takes and returns plain integers; with
    // PRIO_PROCESS and a thread id it reads only that thread. -1 is a valid
    // value, told apart from an error by errno, which is cleared first.
    unsafe {
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if now == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(now)
    }
}

/// Raises the calling thread's nice value by `by` (at most to 19; Linux
/// keeps one per thread, and a new thread starts with its creator's).
/// Returns the thread's nice value afterwards.
pub(crate) fn raise_nice(by: i32) -> io::Result<i32> {
    let tid = crate::stats::current_tid() as i32;
    let target = (nice_of(tid)? + by).min(19);
    // SAFETY: setpriority takes plain integers and changes only thread `tid`.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, target) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(target)
}

/// `struct sched_attr` up to its first version's end (48 bytes), as
/// `sched_setattr(2)` reads it.
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Puts thread `tid` (0: the caller) in `SCHED_IDLE` (`background`) or
/// back in `SCHED_OTHER` at `nice`.
pub(crate) fn set_background(tid: i32, background: bool, nice: i32) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: if background {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        } as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: 0,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_setattr reads `attr.size` bytes from a live, initialised
    // `SchedAttr` of that size; it changes only thread `tid`'s scheduling.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid,
            &attr as *const SchedAttr,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a thread of this process at nice `nice` can leave `SCHED_IDLE`
/// again (root, `CAP_SYS_NICE`, or an `RLIMIT_NICE` that allows it). Tried
/// on a thread of its own (created by the caller: it starts at the
/// caller's nice value), which ends with the test.
pub(crate) fn may_leave_idle(nice: i32) -> bool {
    std::thread::Builder::new()
        .name("duality-prio-probe".into())
        .spawn(move || {
            set_background(0, true, nice).is_ok() && set_background(0, false, nice).is_ok()
        })
        .ok()
        .and_then(|h| h.join().ok())
        .unwrap_or(false)
}

/// Whether the calling thread is in `SCHED_IDLE`.
pub(crate) fn is_background() -> bool {
    // SAFETY: sched_getscheduler takes a pid (0: the caller) and returns an int.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
}
