//! Files sent with sendfile kept open between requests (nginx's
//! `open_file_cache`): answered without a lookup while their stat is
//! trusted, replaced and closed once it is not, bounded by `open_files`.

mod common;

use common::{fnv1a, pseudo_random, read_file, TestServer, BIG};
use std::time::Duration;

#[test]
fn a_kept_file_answers_gets_ranges_heads_and_conditionals() {
    let s = TestServer::start("openf", |c| c.revalidate = Duration::from_secs(60));
    let big = read_file(&s.www().join("big.bin"));
    let mut c = s.client();
    let first = c.get("/big.bin");
    assert_eq!(fnv1a(&first.body), fnv1a(&big));
    assert_eq!(s.state.stats().open_file_hits, 0);
    assert_eq!(s.state.stats().open_files, 1);
    for _ in 0..3 {
        assert_eq!(fnv1a(&c.get("/big.bin").body), fnv1a(&big));
    }
    let r = c.get_with("/big.bin", "Range: bytes=1000-200999\r\n");
    assert_eq!((r.status, &r.body[..]), (206, &big[1000..201_000]));
    let h = c.head("/big.bin");
    assert_eq!(h.header("content-length"), Some(&*BIG.to_string()));
    let etag = first.header("etag").unwrap();
    let r = c.get_with("/big.bin", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(r.status, 304);
    // Pipelined behind a small response and before another.
    c.send(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
         GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n\
         GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    assert_eq!(c.response(false).text(), "hello, world\n");
    assert_eq!(fnv1a(&c.response(false).body), fnv1a(&big));
    assert_eq!(c.response(false).text(), "hello, world\n");
    let st = s.state.stats();
    assert_eq!(st.open_file_hits, 7, "every request after the first");
    assert_eq!(st.open_files, 1);
}

/// A file the page cache holds that is at least `sendfile_kept` large is
/// kept open too, and its next requests go out with sendfile (the kernel's
/// pages, not a copy of ours), ranges and pipelined requests included; with
/// `sendfile_kept` off they are copied from the page cache, as smaller files
/// always are.
#[test]
fn a_cached_file_large_enough_goes_out_with_sendfile_once_kept_open() {
    use common::CACHED;
    for kept in [16 << 10, u64::MAX] {
        let s = TestServer::start("openf-kept", |c| {
            c.revalidate = Duration::from_secs(60);
            c.sendfile_kept = kept;
            c.sendfile_learn = u64::MAX;
        });
        let cached = read_file(&s.www().join("cached.bin"));
        assert!(cached.len() as u64 >= 16 << 10 && cached.len() <= 64 << 10);
        let mut c = s.client();
        for _ in 0..3 {
            assert_eq!(fnv1a(&c.get("/cached.bin").body), fnv1a(&cached));
        }
        let r = c.get_with("/cached.bin", "Range: bytes=100-199,1000-1099\r\n");
        assert_eq!(r.status, 206);
        for part in [&cached[100..200], &cached[1000..1100]] {
            assert!(r.body.windows(100).any(|w| w == part), "a part missing");
        }
        c.send(
            "GET /cached.bin HTTP/1.1\r\nHost: t\r\n\r\n\
             GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
        );
        assert_eq!(fnv1a(&c.response(false).body), fnv1a(&cached));
        assert_eq!(c.response(false).text(), "hello, world\n");
        let st = s.state.stats();
        if kept == u64::MAX {
            assert_eq!((st.open_file_hits, st.sendfile_bytes), (0, 0));
            assert_eq!(st.open_files, 0);
        } else {
            // Every request after the first (which read it in).
            assert_eq!(st.open_file_hits, 4);
            assert_eq!(st.open_files, 1);
            assert!(st.sendfile_bytes >= 3 * CACHED as u64, "{st:?}");
        }
    }
}

/// A cached file of the learned range (`sendfile_learn`..`sendfile_kept`)
/// is kept open and goes out both ways as the loop measures them: copied
/// first, then `sendfile` probed after an epoch of a couple of thousand
/// requests; every body whole, pipelined or not. A request the loop would
/// copy whose bytes our page cache does not hold goes out with `sendfile`
/// and is counted so. With learning off it is neither kept open nor sent
/// with `sendfile`.
#[test]
fn a_cached_file_of_the_learned_range_goes_out_by_copy_and_by_sendfile() {
    use common::CACHED;
    let s = TestServer::start("openf-learn", |c| {
        c.revalidate = Duration::from_secs(60);
        c.sendfile_kept = 64 << 10;
        c.sendfile_learn = 16 << 10;
        // A debug build beside the other tests on 2 cores answers ~1,600
        // requests/s: an epoch takes longer than the default allows.
        c.sendfile_learn_epoch = Duration::from_secs(30);
    });
    let cached = read_file(&s.www().join("cached.bin"));
    let want = fnv1a(&cached);
    let mut c = s.client();
    assert_eq!(fnv1a(&c.get("/cached.bin").body), want);
    let batch = "GET /cached.bin HTTP/1.1\r\nHost: t\r\n\r\n".repeat(16);
    // Both paths within two epochs (4,096 requests); more only if the
    // machine was so slow that an epoch was not measured. (A connection
    // serves 1,000 requests, as nginx's: a new one every 800.)
    let mut sent = 0;
    while s.state.stats().learned_sendfile < 64 && sent < 40_000 {
        if sent % 800 == 0 {
            c = s.client();
        }
        c.send(&batch);
        for _ in 0..16 {
            let r = c.response(false);
            assert_eq!((r.status, fnv1a(&r.body)), (200, want), "request {sent}");
            sent += 1;
        }
    }
    let st = s.state.stats();
    assert!(
        st.learned_copy >= 1_000 && st.learned_sendfile >= 64,
        "{st:?}"
    );
    assert_eq!(st.learned_copy + st.learned_sendfile, sent, "{st:?}");
    assert_eq!(st.open_files, 1);
    assert!(
        st.sendfile_bytes >= st.learned_sendfile * CACHED as u64,
        "{st:?}"
    );

    // Two such files where our page cache holds one: requests for the
    // other, which the loop would copy (all of them, in the first epoch),
    // go out with sendfile after all, and count there.
    let s = TestServer::start("openf-learn-uncached", |c| {
        c.revalidate = Duration::from_secs(60);
        c.sendfile_kept = 64 << 10;
        c.sendfile_learn = 16 << 10;
        c.cache_bytes = CACHED + CACHED / 2;
    });
    std::fs::write(s.www().join("other.bin"), &cached).unwrap();
    let mut c = s.client();
    for i in 0..100 {
        let path = ["/cached.bin", "/other.bin"][i % 2];
        assert_eq!(fnv1a(&c.get(path).body), want);
    }
    let st = s.state.stats();
    assert!(st.learned_copy >= 40 && st.learned_sendfile >= 40, "{st:?}");
    assert!(
        st.learned_copy * CACHED as u64 + st.sendfile_bytes <= 100 * CACHED as u64,
        "a request counted as copied went out with sendfile: {st:?}"
    );

    let s = TestServer::start("openf-nolearn", |c| {
        c.revalidate = Duration::from_secs(60);
        c.sendfile_kept = 64 << 10;
        c.sendfile_learn = u64::MAX;
    });
    let mut c = s.client();
    for _ in 0..200 {
        assert_eq!(fnv1a(&c.get("/cached.bin").body), want);
    }
    let st = s.state.stats();
    assert_eq!((st.learned_copy, st.learned_sendfile), (0, 0), "{st:?}");
    assert_eq!((st.open_files, st.sendfile_bytes), (0, 0), "{st:?}");
}

#[test]
fn a_changed_or_deleted_file_is_seen_after_revalidate_and_its_descriptor_closed() {
    let s = TestServer::start("openf-change", |c| {
        c.revalidate = Duration::from_millis(300)
    });
    let path = s.www().join("big.bin");
    let mut c = s.client();
    assert_eq!(c.get("/big.bin").body.len(), BIG);
    // Replaced by a new file (a new inode, as deployments do).
    let new = pseudo_random(200_000, 99);
    let tmp = s.www().join(".big.new");
    std::fs::write(&tmp, &new).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    std::thread::sleep(Duration::from_millis(350));
    let r = c.get("/big.bin");
    assert_eq!(fnv1a(&r.body), fnv1a(&new));
    assert_eq!(s.state.stats().open_files, 1, "the old descriptor closed");
    assert_eq!(fnv1a(&c.get("/big.bin").body), fnv1a(&new));
    // Deleted: a 404 once the stat is stale, and nothing kept open.
    std::fs::remove_file(&path).unwrap();
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(c.get("/big.bin").status, 404);
    assert_eq!(s.state.stats().open_files, 0);
}

#[test]
fn a_deleted_file_nobody_asks_for_again_is_closed_within_two_periods() {
    let s = TestServer::start("openf-closer", |c| {
        c.revalidate = Duration::from_millis(200)
    });
    let mut c = s.client();
    assert_eq!(c.get("/big.bin").body.len(), BIG);
    assert_eq!(c.get("/mid.bin").body.len(), 100 * 1024);
    assert_eq!(s.state.stats().open_files, 2);
    std::fs::remove_file(s.www().join("big.bin")).unwrap();
    // No request looks at either again: the closer thread drops them.
    assert!(common::eventually(Duration::from_secs(5), || {
        s.state.stats().open_files == 0
    }));
}

#[test]
fn open_files_bound_the_descriptors_kept() {
    let s = TestServer::start("openf-bound", |c| {
        c.revalidate = Duration::from_secs(60);
        c.open_files = 1;
    });
    let big = fnv1a(&read_file(&s.www().join("big.bin")));
    let mid = fnv1a(&read_file(&s.www().join("mid.bin")));
    let mut c = s.client();
    for _ in 0..3 {
        assert_eq!(fnv1a(&c.get("/big.bin").body), big);
        assert_eq!(fnv1a(&c.get("/mid.bin").body), mid);
    }
    let st = s.state.stats();
    assert_eq!(st.open_files, 1);
    assert_eq!(st.open_file_hits, 2, "only big.bin is kept");

    let off = TestServer::start("openf-off", |c| c.open_files = 0);
    let mut c = off.client();
    for _ in 0..3 {
        assert_eq!(fnv1a(&c.get("/big.bin").body), big);
    }
    assert_eq!(off.state.stats().open_file_hits, 0);
    assert_eq!(off.state.stats().open_files, 0);
}

/// A file whose pages left the page cache is read in off the loop — by
/// a read through the ring on an io_uring loop, by a read-ahead on the blocking
/// pool on epoll, before its `sendfile` — and arrives intact either way.
/// (`POSIX_FADV_DONTNEED` drops clean pages on disk file systems; on tmpfs
/// it cannot, and nothing is cold there.)
#[test]
fn a_file_out_of_the_page_cache_is_read_in_off_the_loop_and_sent_intact() {
    let s = TestServer::start("openf-cold", |c| c.revalidate = Duration::from_secs(60));
    let path = s.www().join("big.bin");
    let big = fnv1a(&read_file(&path));
    let on_tmpfs = is_tmpfs(&path);
    let mut c = s.client();
    for round in 0..3 {
        dont_need(&std::fs::File::open(&path).unwrap());
        assert_eq!(fnv1a(&c.get("/big.bin").body), big, "round {round}");
        let r = c.get_with("/big.bin", "Range: bytes=-70000\r\n");
        assert_eq!(r.body.len(), 70_000, "round {round}");
    }
    let cold = s.state.stats().cold_reads;
    assert!(on_tmpfs || cold >= 3, "{cold} cold reads");
    // Hot now: nothing more is read in. A page still being read ahead by
    // the last request (or one the kernel let go since) is rightly called
    // cold, so a few tries, each intact; a server that reads in every time
    // still fails.
    let hot = (0..5).any(|_| {
        let before = s.state.stats().cold_reads;
        assert_eq!(fnv1a(&c.get("/big.bin").body), big);
        let after = s.state.stats().cold_reads;
        after == before || {
            std::thread::sleep(Duration::from_millis(50));
            false
        }
    });
    assert!(
        hot,
        "every hot read read in again ({cold} cold reads before)"
    );
}

/// A small file kept open (one the page cache holds too, large enough to go
/// out with sendfile) is asked of the page cache whole, and a "resident"
/// answer is trusted for 100 ms (no system calls to ask it per request):
/// once that ran out, a file dropped from the page cache is found cold
/// again and read in off the loop, and sent intact. A server that trusted
/// the answer for good would send it from the disk on its loop and count
/// no cold read.
#[test]
fn a_small_kept_file_dropped_from_the_page_cache_is_read_in_again_once_trust_ran_out() {
    let s = TestServer::start("openf-memo", |c| {
        c.revalidate = Duration::from_secs(60);
        c.sendfile_kept = 16 << 10;
    });
    let path = s.www().join("cached.bin");
    let want = fnv1a(&read_file(&path));
    if is_tmpfs(&path) {
        eprintln!("skipped: tmpfs keeps its pages, nothing is ever cold there");
        return;
    }
    // Read in and kept open; then found resident by the next requests.
    let mut c = s.client();
    for _ in 0..3 {
        assert_eq!(fnv1a(&c.get("/cached.bin").body), want);
    }
    drop(c);
    assert!(s.state.stats().sendfile_bytes > 0, "not sent with sendfile");
    // The kernel drops no page something still holds, and the socket
    // buffers that carried a file sent with sendfile hold its pages until
    // they are freed, which the kernel defers to the CPU that sent them
    // (`skb_attempt_defer_free`) and an idle CPU may put off. Here, under
    // io_uring, `POSIX_FADV_DONTNEED` then left the pages in 11 rounds of
    // 12 for half a second each (none with `net.core.skb_defer_max=0`;
    // under epoll every drop took). So a round counts only when a page is
    // seen gone just before its request.
    let mut dropped = 0;
    for round in 0..6 {
        // Well past the 100 ms the server trusts what it found.
        std::thread::sleep(Duration::from_millis(250));
        if !drop_from_page_cache(&path) {
            continue;
        }
        dropped += 1;
        let before = s.state.stats().cold_reads;
        let mut c = s.client();
        assert_eq!(fnv1a(&c.get("/cached.bin").body), want, "round {round}");
        assert!(
            s.state.stats().cold_reads > before,
            "round {round}: a page was out of the page cache, yet nothing was read in"
        );
        if dropped == 2 {
            return;
        }
    }
    if dropped == 0 {
        eprintln!("not checked: the kernel kept the file's pages in all 6 rounds");
    }
}

/// Drops `path` from the page cache and says whether a page at least is
/// out (tries for up to 200 ms: a page still held stays).
fn drop_from_page_cache(path: &std::path::Path) -> bool {
    let f = std::fs::File::open(path).unwrap();
    for _ in 0..20 {
        dont_need(&f);
        if !every_page_resident(&f) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Writes `f` out and asks the kernel to drop its clean pages from the page
/// cache (it keeps any page something still holds).
fn dont_need(f: &std::fs::File) {
    use std::os::fd::AsRawFd;
    f.sync_all().unwrap();
    // SAFETY: posix_fadvise only reads a live descriptor and integers.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
}

/// Whether every page of `f` is in the page cache (mincore over a
/// read-only mapping, which reads nothing in).
fn every_page_resident(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: sysconf takes an integer.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: a fresh read-only shared mapping of a live descriptor, `len`
    // bytes; mincore writes one byte per page of it into `resident`, which
    // has that many; the mapping is unmapped right after.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let r = libc::mincore(p, len, resident.as_mut_ptr());
        libc::munmap(p, len);
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    }
    resident.iter().all(|b| b & 1 != 0)
}

#[test]
fn a_few_cold_pages_of_a_large_file_are_read_alone_the_rest_goes_by_sendfile() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let s = TestServer::start("openf-one-cold", |c| c.revalidate = Duration::from_secs(60));
    let path = s.www().join("big.bin");
    let big = read_file(&path);
    let f = std::fs::File::open(&path).unwrap();
    f.sync_all().unwrap();
    // Drop the file, then read it back page by page without read-ahead
    // (small folios, and nothing read past what is asked) but for a 64 KiB
    // hole: dropping a few pages of a file written in one go may not work,
    // its pages sit in large folios.
    // SAFETY: posix_fadvise only reads a live descriptor and integers.
    let advise = |advice| unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, advice) };
    assert_eq!(advise(libc::POSIX_FADV_DONTNEED), 0);
    assert_eq!(advise(libc::POSIX_FADV_RANDOM), 0);
    let hole = 2 * 1024 * 1024..2 * 1024 * 1024 + 64 * 1024;
    let mut page = [0u8; 4096];
    for at in (0..big.len()).step_by(4096).filter(|at| !hole.contains(at)) {
        f.read_at(&mut page, at as u64).unwrap();
    }
    let before = s.state.stats().cold_reads;
    let mut c = s.client();
    assert_eq!(fnv1a(&c.get("/big.bin").body), fnv1a(&big));
    let cold = s.state.stats().cold_reads - before;
    // The 256 KiB chunk with the hole is read in (one fetch through the
    // ring, or one read-ahead on epoll); the old code read the whole file
    // through the ring, 49 reads.
    let on_tmpfs = cold == 0 && is_tmpfs(&path);
    assert!(
        (1..=2).contains(&cold) || on_tmpfs,
        "{cold} cold reads for 16 cold pages of {}",
        common::BIG
    );
}

/// Whether `path` is on tmpfs, where clean pages cannot be dropped.
fn is_tmpfs(path: &std::path::Path) -> bool {
    // SAFETY: statfs writes into a live, zeroed local struct.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        libc::statfs(p.as_ptr(), &mut st) == 0 && st.f_type == libc::TMPFS_MAGIC
    }
}

/// A file cut short while its body goes out (cold or not) ends the
/// response early: the client gets what there was and the connection
/// closes (the length promised cannot be kept), as nginx does; the server
/// goes on.
#[test]
fn a_file_cut_short_while_it_is_sent_ends_the_connection_and_nothing_else() {
    use std::io::{Read, Write};
    const SIZE: usize = 24 << 20;
    for cold in [false, true] {
        let s = TestServer::start("openf-cut", |c| c.revalidate = Duration::from_secs(60));
        let path = s.www().join("huge.bin");
        std::fs::write(&path, pseudo_random(SIZE, 3)).unwrap();
        let mut c = std::net::TcpStream::connect(s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut got = vec![0u8; 1 << 20];
        c.read_exact(&mut got).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(4 << 20).unwrap();
        if cold {
            dont_need(&f);
        }
        c.read_to_end(&mut got).unwrap();
        let body = got.len() - got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() - 4;
        assert!(
            (1 << 20..SIZE).contains(&body),
            "cold {cold}: {body} body bytes of {SIZE}"
        );
        assert_eq!(s.client().get("/hello.txt").text(), "hello, world\n");
    }
}
