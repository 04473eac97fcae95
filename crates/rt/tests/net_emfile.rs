//! `accept` when the process is out of descriptors (`EMFILE`): the error
//! surfaces, the loop does not spin while the condition lasts, and accepting
//! resumes once descriptors are available again.
//!
//! The test lowers the process's own `RLIMIT_NOFILE`, so it is the only test
//! of this binary.

use duality_rt::net::{is_resource_exhaustion, TcpListener, ACCEPT_BACKOFF};
use duality_rt::time::{sleep, timeout};
use duality_rt::{block_on, event_loop, spawn};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn nofile() -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes into a live local of the right type.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim
}

fn set_nofile(lim: libc::rlimit) {
    // SAFETY: reads a live local of the right type.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

/// User + system CPU time of the process (no descriptor needed to read it).
fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is valid; getrusage fills it in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: writes into a live local of the right type.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The soft limit below which exactly `spare` descriptor numbers are free
/// (the kernel hands out the lowest free number; inherited descriptors may
/// sit high, leaving holes below them).
fn limit_leaving(spare: usize) -> u64 {
    let open: std::collections::HashSet<u64> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut free = 0;
    (0..)
        .find(|n| {
            if open.contains(n) {
                return false;
            }
            free += 1;
            free > spare
        })
        .unwrap()
}

#[test]
fn accept_under_emfile_backs_off_and_recovers() {
    const CLIENTS: usize = 24;
    const SPARE: usize = 4;
    block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        // The clients connect before the limit drops (the handshakes complete
        // in the kernel's accept queue), so only `accept` needs descriptors.
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();

        let saved = nofile();
        set_nofile(libc::rlimit {
            rlim_cur: limit_leaving(SPARE),
            rlim_max: saved.rlim_max,
        });

        let accepted = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(AtomicUsize::new(0));
        let first_error = Arc::new(Mutex::new(None));
        let (a, e, fe) = (accepted.clone(), errors.clone(), first_error.clone());
        let server = spawn(async move {
            let mut streams = Vec::new();
            while streams.len() < CLIENTS {
                match listener.accept().await {
                    Ok((s, _)) => {
                        streams.push(s);
                        a.fetch_add(1, SeqCst);
                    }
                    Err(err) => {
                        e.fetch_add(1, SeqCst);
                        fe.lock().unwrap().get_or_insert(err);
                    }
                }
            }
            streams
        });

        // Out of descriptors for a while.
        sleep(Duration::from_millis(50)).await;
        let lp = event_loop::current().unwrap();
        let (turns0, errors0, cpu0) = (lp.snapshot().turns, errors.load(SeqCst), cpu_time());
        sleep(Duration::from_millis(250)).await;
        let turns = lp.snapshot().turns - turns0;
        let retries = errors.load(SeqCst) - errors0;
        let cpu = cpu_time() - cpu0;

        let took = accepted.load(SeqCst);
        eprintln!("{took} accepted, then in 250 ms: {retries} retries, {turns} turns, {cpu:?} CPU");
        assert!(took < CLIENTS, "the limit stopped accept ({took} accepted)");
        let err = first_error
            .lock()
            .unwrap()
            .take()
            .expect("accept surfaced an error");
        assert_eq!(err.raw_os_error(), Some(libc::EMFILE), "{err}");
        assert!(is_resource_exhaustion(&err));
        // A spinning loop would turn (and retry accept) hundreds of
        // thousands of times in 250 ms; backing off it retries every 50 ms.
        let max_retries = (250 / ACCEPT_BACKOFF.as_millis() as usize) + 2;
        assert!(retries >= 1 && retries <= max_retries, "{retries} retries");
        assert!(turns < 100, "{turns} loop turns while out of descriptors");
        assert!(
            cpu < Duration::from_millis(100),
            "{cpu:?} of CPU while backing off"
        );

        // Descriptors again: every waiting connection is accepted.
        set_nofile(saved);
        let streams = timeout(Duration::from_secs(2), server)
            .await
            .expect("accept resumed")
            .unwrap();
        assert_eq!(streams.len(), CLIENTS);
        drop(clients);
    });
}
