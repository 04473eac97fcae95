//! Process-level settings memcached users set with flags: the user the
//! server runs as (`-u`), core dumps (`-r`), locked memory (`-k`) and
//! running as a daemon (`-d`), and the servers' signal dispositions. Each is one or two system calls; they
//! live here so that the binary's other modules stay free of `unsafe`.

use std::ffi::CString;
use std::io::{self, Read as _};

/// Whether this process runs as root (its effective user id is 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Takes the identity of `user` when running as root, as memcached's `-u`
/// and nginx's `user` do: supplementary groups dropped, then the user's
/// group and id. Returns whether it switched (`false`: not root, nothing
/// to drop, as memcached ignores `-u` then). Call it before anything is
/// opened that the user should not hold. `flag` and `server` name the
/// flag and the server in errors and warnings.
pub fn assume_user(user: &str, flag: &str, server: &str) -> anyhow::Result<bool> {
    if !is_root() {
        return Ok(false);
    }
    let name = CString::new(user).map_err(|_| anyhow::anyhow!("{flag}: a user name has no NUL"))?;
    // SAFETY: an all-zero passwd is a valid value for getpwnam_r to fill.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to live memory of the sizes given; the
    // strings getpwnam_r writes stay in `buf`, which outlives their use
    // (only the two ids are read).
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    anyhow::ensure!(
        rc == 0 && !found.is_null(),
        "{flag} {user}: can't find the user {user} to switch to"
    );
    let (uid, gid) = (pwd.pw_uid, pwd.pw_gid);
    // SAFETY: setgroups with a count of 0 reads no list.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        let e = io::Error::last_os_error();
        // Refused in some user namespaces; memcached carries on there too.
        if e.raw_os_error() != Some(libc::EPERM) {
            anyhow::bail!("{flag} {user}: failed to drop supplementary groups: {e}");
        }
        duality_rt::say!(
            "duality {server}: warning: {flag} {user}: supplementary groups kept ({e})"
        );
    }
    // SAFETY: setgid/setuid take plain ids; glibc applies them to every
    // thread of the process.
    if unsafe { libc::setgid(gid) } != 0 || unsafe { libc::setuid(uid) } != 0 {
        anyhow::bail!(
            "{flag} {user}: failed to assume identity of user {user}: {}",
            io::Error::last_os_error()
        );
    }
    Ok(true)
}

/// Raises the core-file size limit to its hard limit (memcached's `-r`).
pub fn enable_coredumps() -> io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a live local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads a live local struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Locks every page the process maps now and later in memory (memcached's
/// `-k`), so the cache is never paged out. Only where locked memory is
/// unlimited (the limit is raised to its hard value first): under a limit,
/// every allocation past it would fail and stop the server, so it refuses
/// and says why instead.
pub fn lock_memory() -> io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a live local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur != libc::RLIM_INFINITY {
        // Unlimited where allowed (root), else up to the hard limit.
        let unlimited = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads live local structs. A refusal leaves the
        // limit as it was: `lim` then says what holds (checked below).
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
            lim = unlimited;
        } else if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
            // SAFETY: as above.
            unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
        }
    }
    if lim.rlim_cur != libc::RLIM_INFINITY {
        return Err(io::Error::other(format!(
            "locked memory is limited to {} KiB (`ulimit -l`): allocations past it \
             would fail, so nothing is locked; raise the limit to unlimited",
            lim.rlim_cur >> 10
        )));
    }
    // SAFETY: mlockall takes flags only.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ignores SIGXFSZ: a write past the file-size limit (`ulimit -f`: the
/// memory file, a log) then fails with EFBIG, which the caller reports,
/// instead of killing the process without a word.
pub fn ignore_file_size_signal() {
    // SAFETY: sets the disposition of one signal to SIG_IGN; no handler
    // runs, nothing is shared.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

/// signal-hook's iterator over `signals`, losing none while it is set up.
///
/// signal-hook-registry installs a signal's handler before it records the
/// handler's action, and a signal that comes between the two is dropped
/// (the previous disposition, the default action, is not run either): a
/// SIGTERM sent just as the handler appears (`SigCgt` in /proc) was lost,
/// and the server never stopped. The signals are blocked in this thread
/// meanwhile, so one sent then stays pending and is taken, by the
/// iterator, once the actions are in place. That holds only while no other
/// thread can take them: call this before the process starts threads.
///
/// They are left unblocked, even where the process inherited them blocked
/// (the mask survives exec: a supervisor that blocks SIGTERM around its
/// fork made the server deaf to it), so the threads started later take them
/// too.
pub fn catch_signals(signals: &[libc::c_int]) -> io::Result<signal_hook::iterator::Signals> {
    // (Not checked where /proc cannot say.)
    debug_assert!(
        one_thread() != Some(false),
        "stop signals caught after a thread started"
    );
    // SAFETY: an all-zero sigset_t is valid storage; sigemptyset/sigaddset
    // initialise and fill the local set.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live local; sigemptyset only writes it.
    unsafe { libc::sigemptyset(&mut set) };
    for &sig in signals {
        // SAFETY: `set` is initialised; an invalid number fails with EINVAL
        // and leaves it as it was.
        unsafe { libc::sigaddset(&mut set, sig) };
    }
    // SAFETY: `set` is a live local; this changes this thread's mask only.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let caught = signal_hook::iterator::Signals::new(signals);
    // A signal that came meanwhile is delivered here, now, to the handler
    // that records it.
    // SAFETY: as above.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    caught
}

/// A daemon's line back to the process that started it (see
/// [`daemonize`]).
pub struct Daemon(std::os::fd::OwnedFd);

impl Daemon {
    /// Tells the starting process that the server is up (it exits 0), then
    /// leaves the terminal: standard input, output and error go to
    /// `/dev/null`, unless `keep` (memcached keeps them with `-v`).
    pub fn ready(self, keep: bool) {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let _ = std::fs::File::from(self.0).write_all(b"r");
        if keep {
            return;
        }
        let Ok(null) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        else {
            return;
        };
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto a standard descriptor this process owns;
            // `null` stays open for the call.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// memcached's `-d`: the server goes on in a child process of its own
/// session (detached from the terminal), and the process started waits
/// until it is ready (exit 0) or has failed (its status; the child said
/// why on the standard error they share), so a script that starts it knows
/// either way, where memcached's parent returns at once. Returns in the
/// child. Call it before any thread starts and before anything is locked
/// (memory locks and `fcntl` locks do not pass to a child).
pub fn daemonize() -> anyhow::Result<Daemon> {
    use std::os::fd::{FromRawFd, OwnedFd};
    debug_assert!(
        one_thread() != Some(false),
        "daemonize after a thread started"
    );
    let mut fds = [0; 2];
    // SAFETY: `fds` is a live array of two descriptors for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        anyhow::bail!("-d: pipe: {}", io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both are open descriptors owned by nobody
    // else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process has one thread (asserted above; the servers'
    // threads start later), so the child's copy of memory holds no lock
    // another thread took.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        anyhow::bail!("-d: fork: {}", io::Error::last_os_error());
    }
    if pid == 0 {
        drop(read);
        // SAFETY: setsid has no preconditions; a fresh child is never a
        // process group leader, so it does not fail.
        unsafe { libc::setsid() };
        return Ok(Daemon(write));
    }
    drop(write);
    let mut byte = [0u8; 1];
    let mut read = std::fs::File::from(read);
    let ready = loop {
        match read.read(&mut byte) {
            Ok(n) => break n == 1,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break false,
        }
    };
    let code = if ready {
        0
    } else {
        let mut status = 0;
        // SAFETY: `pid` is this process's child, not yet reaped; `status`
        // is a live local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        match (r == pid, libc::WIFEXITED(status)) {
            (true, true) => libc::WEXITSTATUS(status),
            _ => 1,
        }
    };
    // The child owns everything now (the pid file, the sockets): nothing of
    // this process's may be dropped or flushed.
    // SAFETY: _exit ends the process without running destructors.
    unsafe { libc::_exit(code) }
}

/// Whether the process has one thread, as /proc says. A thread already
/// joined can still be counted for a moment: the kernel wakes its joiner
/// before it is done with it (the io_uring probe's thread, joined just
/// before the servers catch their signals, failed this check in 16 of 300
/// debug starts of `duality http --io uring`, which then exited before
/// `ready`). So a count above one is read again, for up to a second.
fn one_thread() -> Option<bool> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let n = threads()?;
        if n == 1 || std::time::Instant::now() >= deadline {
            return Some(n == 1);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The process's threads, as /proc says.
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let n = status.lines().find_map(|l| l.strip_prefix("Threads:"))?;
    n.trim().parse().ok()
}
