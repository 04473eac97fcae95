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

/// `sched_setattr(2)` for thread `tid` (0: the caller): `policy` at
/// `nice`, with the time slice `runtime` in nanoseconds (0: the kernel's).
fn set_attr(tid: i32, policy: i32, nice: i32, runtime: u64) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: policy as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime,
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

/// Puts thread `tid` (0: the caller) in `SCHED_IDLE` (`background`) or
/// back in `SCHED_OTHER` at `nice`, there with the time slice `slice`
/// (`None`: the kernel's; see [`set_slice`]).
pub(crate) fn set_background(
    tid: i32,
    background: bool,
    nice: i32,
    slice: Option<std::time::Duration>,
) -> io::Result<()> {
    let (policy, runtime) = if background {
        (libc::SCHED_IDLE, 0)
    } else {
        (libc::SCHED_OTHER, slice.map_or(0, nanos))
    };
    set_attr(tid, policy, nice, runtime)
}

fn nanos(d: std::time::Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// Asks the kernel to give the calling thread time slices of `slice`
/// (EEVDF's custom slice, Linux 6.12 and later: `sched_runtime` of a
/// `SCHED_OTHER` thread, 0.1-100 ms): a thread with a shorter slice than
/// the one running preempts it when it wakes, instead of waiting for that
/// one's slice (0.75 ms and more) to run out. Keeps its nice value. An older
/// kernel ignores the field.
pub(crate) fn set_slice(slice: std::time::Duration) -> io::Result<()> {
    let tid = crate::stats::current_tid() as i32;
    set_attr(tid, libc::SCHED_OTHER, nice_of(tid)?, nanos(slice))
}

/// The time slice thread `tid` (0: the caller) runs with, as the kernel
/// reports it (`sched_getattr`'s `sched_runtime`; zero from kernels that
/// keep no slice per thread, before Linux 6.12).
pub(crate) fn slice_of(tid: i32) -> io::Result<std::time::Duration> {
    let mut attr = SchedAttr {
        size: 0,
        policy: 0,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: 0,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_getattr writes at most the size given (that of a live
    // `SchedAttr`) into it, and reads nothing else of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(std::time::Duration::from_nanos(attr.runtime))
}

/// Whether a thread of this process at nice `nice` can leave `SCHED_IDLE`
/// again (root, `CAP_SYS_NICE`, or an `RLIMIT_NICE` that allows it). Tried
/// on a thread of its own (created by the caller: it starts at the
/// caller's nice value), which ends with the test.
pub(crate) fn may_leave_idle(nice: i32) -> bool {
    std::thread::Builder::new()
        .name("duality-prio-probe".into())
        .spawn(move || {
            set_background(0, true, nice, None).is_ok()
                && set_background(0, false, nice, None).is_ok()
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

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{block_on, LoopConfig, LoopThread};
    use std::time::Duration;

    /// A loop asks for the slice its config names, on its own thread only.
    #[test]
    fn a_loop_runs_with_the_slice_it_asked_for() {
        let asked = Duration::from_micros(150);
        let slice_on = |slice| {
            let lp = LoopThread::spawn(LoopConfig {
                slice,
                ..Default::default()
            })
            .expect("loop thread");
            block_on(lp.handle().spawn(async { super::slice_of(0) }))
                .expect("joined")
                .expect("sched_getattr")
        };
        let with = slice_on(Some(asked));
        if with.is_zero() {
            eprintln!("skipped: this kernel keeps no time slice per thread (Linux 6.12+ does)");
            return;
        }
        assert_eq!(with, asked);
        assert_ne!(
            slice_on(None),
            asked,
            "a loop that asked for none keeps the kernel's"
        );
        assert_ne!(
            super::slice_of(0).unwrap(),
            asked,
            "the caller's thread keeps its own"
        );
    }

    /// While a pool is raised out of the background class, a loop with no
    /// slice of its own runs on `RAISED_SLICE` and gets its slice back
    /// after; a loop with its own keeps it throughout.
    #[test]
    fn a_loop_shortens_its_slice_while_a_pool_is_raised() {
        let plain = LoopThread::spawn(LoopConfig::default()).expect("loop thread");
        let own = Duration::from_micros(250);
        let its_own = LoopThread::spawn(LoopConfig {
            slice: Some(own),
            ..Default::default()
        })
        .expect("loop thread");
        // A task's look at its loop's slice; the loop follows a raise when
        // it goes to sleep, so look until the wanted one shows (or 5 s).
        let slice_of = |lp: &LoopThread| {
            block_on(lp.handle().spawn(async { super::slice_of(0) }))
                .expect("joined")
                .expect("sched_getattr")
        };
        let wait_for = |lp: &LoopThread, want: Duration| {
            let until = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let got = slice_of(lp);
                if got == want || std::time::Instant::now() > until {
                    return got;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        // Other tests' pools may be raised now: start from a quiet moment.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let before = loop {
            let got = slice_of(&plain);
            let quiet = !crate::pool::raised() && got != crate::RAISED_SLICE;
            if quiet || std::time::Instant::now() > until {
                break got;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if before.is_zero() {
            eprintln!("skipped: this kernel keeps no time slice per thread (Linux 6.12+ does)");
            return;
        }
        assert_ne!(before, crate::RAISED_SLICE);
        crate::pool::mark_raised_for(Duration::from_millis(300));
        assert_eq!(wait_for(&plain, crate::RAISED_SLICE), crate::RAISED_SLICE);
        assert_eq!(slice_of(&its_own), own, "a loop with a slice of its own");
        // The raise ends (other tests' pools may prolong it a little).
        assert_eq!(wait_for(&plain, before), before, "the slice comes back");
        assert_eq!(slice_of(&its_own), own);
    }
}
