//! 503: the server found the file but could not open it for lack of
//! descriptors (a retry may succeed, unlike a 500). The only portable way to
//! make `open` fail for a file that `stat` finds (root ignores file
//! permissions) is to run out of descriptors, so this test lowers the
//! process's descriptor limit while one request is in flight. It is the only
//! test of this binary: the limit is process-wide.

mod common;

use common::TestServer;

fn nofile() -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a live local struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim
}

fn set_nofile(lim: &libc::rlimit) {
    // SAFETY: setrlimit reads a live local struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, lim) }, 0);
}

/// The lowest descriptor number not in use: with the soft limit set to it,
/// every new descriptor fails with EMFILE.
fn lowest_free_fd() -> u64 {
    (0..)
        // SAFETY: F_GETFD only asks whether `n` is an open descriptor.
        .find(|&n| unsafe { libc::fcntl(n, libc::F_GETFD) } == -1)
        .unwrap() as u64
}

/// Waits (up to 10 s) until no descriptor of this process names a file
/// called `name`.
fn wait_closed(name: &str) {
    let open = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .any(|p| p.file_name().is_some_and(|n| n == name))
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while open() {
        assert!(std::time::Instant::now() < until, "{name} never closed");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn status_503_when_out_of_descriptors() {
    // No page cache, stat on every request: each request opens the file.
    let s = TestServer::start("503", |c| {
        c.cache_bytes = 0;
        c.revalidate = std::time::Duration::ZERO;
    });
    let mut c = s.client();
    assert_eq!(c.get("/hello.txt").status, 200);
    // The server may close the file it sent a moment after the client has
    // the response: wait, or the limit below would leave room for it.
    wait_closed("hello.txt");
    let saved = nofile();
    // Connected before the limit drops; the request is sent after.
    let low = libc::rlimit {
        rlim_cur: lowest_free_fd(),
        rlim_max: saved.rlim_max,
    };
    set_nofile(&low);
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response(false);
    set_nofile(&saved);
    assert_eq!(r.status, 503);
    assert!(r.text().contains("503 Service Unavailable"));
    assert!(r.keeps_alive());
    // Descriptors back: the same connection is served again.
    assert_eq!(c.get("/hello.txt").status, 200);
}
