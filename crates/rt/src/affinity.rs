//! CPU affinity: which cores a thread may run on.
//!
//! A loop pinned to a core keeps its sockets' buffers, its run queue and
//! the requests it hands to a payload thread pinned beside it in that
//! core's caches (nginx's `worker_cpu_affinity`, seastar's and glommio's
//! one thread per core). The set a process may use is what `taskset`, a
//! cgroup's cpuset or a container allows; [`allowed_cpus`] reads it, and
//! a placement picks from it.

use std::io;

/// The CPUs the calling thread may run on (its affinity mask, which a new
/// thread inherits from its creator), in ascending order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero `cpu_set_t` is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most `size_of::<cpu_set_t>()`
    // bytes into `set`, which is live and that large; pid 0 is the caller.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads bit `c` of `set`, below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Restricts the calling thread to CPU `cpu`. Fails with a message naming
/// the CPUs allowed when `cpu` is not one of them.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "CPU {cpu} is beyond the {} this system can name",
                libc::CPU_SETSIZE
            ),
        ));
    }
    // SAFETY: an all-zero `cpu_set_t` is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above): the bit is in `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: sched_setaffinity reads `size_of::<cpu_set_t>()` bytes from
    // the live `set`; pid 0 changes only the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        let e = io::Error::last_os_error();
        let allowed = allowed_cpus()
            .map(|c| format_cpus(&c))
            .unwrap_or_else(|_| "unknown".into());
        return Err(io::Error::new(
            e.kind(),
            format!("cannot pin a thread to CPU {cpu} ({e}); this process may use CPUs {allowed}"),
        ));
    }
    Ok(())
}

/// `0-3,6` style, as `taskset -c` and `/proc/*/status` write CPU lists.
pub fn format_cpus(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", cpus[i], cpus[j])
        } else {
            cpus[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_only_on_its_cpu() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        let cpu = *allowed.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
            // SAFETY: sched_getcpu takes nothing and returns an integer.
            assert_eq!(unsafe { libc::sched_getcpu() }, cpu as i32);
        })
        .join()
        .unwrap();
        // The caller's own mask is untouched.
        assert_eq!(allowed_cpus().unwrap(), allowed);
    }

    #[test]
    fn pinning_to_a_cpu_not_allowed_says_which_are() {
        let allowed = allowed_cpus().unwrap();
        let outside = (0..libc::CPU_SETSIZE as usize)
            .find(|c| !allowed.contains(c))
            .unwrap();
        let e = std::thread::spawn(move || pin_current_thread(outside).unwrap_err())
            .join()
            .unwrap();
        let msg = e.to_string();
        assert!(msg.contains(&format!("CPU {outside}")), "{msg}");
        assert!(msg.contains(&format_cpus(&allowed)), "{msg}");
        let e = pin_current_thread(libc::CPU_SETSIZE as usize).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn cpu_lists_read_as_taskset_writes_them() {
        assert_eq!(format_cpus(&[]), "");
        assert_eq!(format_cpus(&[0]), "0");
        assert_eq!(format_cpus(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(format_cpus(&[1, 3, 4]), "1,3-4");
    }
}
