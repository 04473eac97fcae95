//! Conditional and range requests, the page cache and its invalidation, and
//! large files streamed intact with sendfile.

mod common;

use common::{fnv1a, read_file, TestServer, BIG};
use std::time::Duration;

#[test]
fn etag_and_dates_round_trip() {
    let s = TestServer::start("cond", |_| {});
    let mut c = s.client();
    for path in ["/hello.txt", "/big.bin", "/sub/"] {
        let r = c.get(path);
        let etag = r.header("etag").unwrap().to_owned();
        let lm = r.header("last-modified").unwrap().to_owned();
        assert_eq!(
            c.get_with(path, &format!("If-None-Match: {etag}\r\n"))
                .status,
            304
        );
        assert_eq!(
            c.get_with(path, &format!("If-None-Match: W/{etag}\r\n"))
                .status,
            304
        );
        assert_eq!(c.get_with(path, "If-None-Match: *\r\n").status, 304);
        assert_eq!(
            c.get_with(path, &format!("If-Modified-Since: {lm}\r\n"))
                .status,
            304
        );
        // If-None-Match wins over If-Modified-Since.
        let r = c.get_with(
            path,
            &format!("If-None-Match: \"x\"\r\nIf-Modified-Since: {lm}\r\n"),
        );
        assert_eq!(r.status, 200);
        // HEAD is conditional too.
        c.send(format!(
            "HEAD {path} HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n"
        ));
        assert_eq!(c.response(true).status, 304);
    }
}

#[test]
fn ranges_on_cached_and_sendfile_files() {
    let s = TestServer::start("ranges", |_| {});
    let big = read_file(&s.www().join("big.bin"));
    let mut c = s.client();
    for (range, start, end) in [
        ("bytes=0-0", 0, 1),
        ("bytes=1000-1999", 1000, 2000),
        ("bytes=-100", BIG - 100, BIG),
        ("bytes=3000000-", 3_000_000, BIG),
        ("bytes=5-99999999", 5, BIG),
    ] {
        let r = c.get_with("/big.bin", &format!("Range: {range}\r\n"));
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(r.body, &big[start..end], "{range}");
        assert_eq!(
            r.header("content-range").unwrap(),
            format!("bytes {start}-{}/{BIG}", end - 1)
        );
    }
    let r = c.get_with("/big.bin", &format!("Range: bytes={BIG}-\r\n"));
    assert_eq!(r.status, 416);
    // Several ranges apart: multipart/byteranges (see below).
    let r = c.get_with("/hello.txt", "Range: bytes=0-1,3-4\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(
        parts(&r),
        [
            ("bytes 0-1/13".into(), b"he".to_vec()),
            ("bytes 3-4/13".into(), b"lo".to_vec())
        ]
    );
    // Touching ranges are one span; unsatisfiable ones are dropped.
    let r = c.get_with("/hello.txt", "Range: bytes=0-1,2-4,99-\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "hello"));
    assert_eq!(r.header("content-range"), Some("bytes 0-4/13"));
    let r = c.get_with("/hello.txt", "Range: bytes=50-60,99-\r\n");
    assert_eq!(r.status, 416);
    // A precondition sent twice: 400 (nginx's answer), and the connection
    // closes.
    let r = c.get_with(
        "/hello.txt",
        "If-None-Match: \"a\"\r\nIf-None-Match: \"b\"\r\n",
    );
    assert_eq!(r.status, 400);
    let mut c = s.client();
    // If-Range with the current ETag honours the range, a stale one does not.
    let etag = c.get("/hello.txt").header("etag").unwrap().to_owned();
    let r = c.get_with(
        "/hello.txt",
        &format!("Range: bytes=0-4\r\nIf-Range: {etag}\r\n"),
    );
    assert_eq!((r.status, r.text().as_str()), (206, "hello"));
    let r = c.get_with("/hello.txt", "Range: bytes=0-4\r\nIf-Range: \"old\"\r\n");
    assert_eq!(r.status, 200);
}

/// The parts of a `multipart/byteranges` response: each one's
/// `Content-Range` and bytes. Checks the framing on the way: the boundary
/// named in the head, a `Content-Type` in every part, the closing
/// delimiter last.
fn parts(r: &common::Resp) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").expect("a Content-Type");
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("not multipart: {ct}"));
    let delimiter = format!("\r\n--{boundary}");
    let body = &r.body[..];
    let end = format!("{delimiter}--\r\n");
    assert!(
        body.ends_with(end.as_bytes()),
        "the closing delimiter ends the body"
    );
    let body = &body[..body.len() - end.len()];
    let mut found = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        rest = rest
            .strip_prefix(format!("{delimiter}\r\n").as_bytes())
            .expect("a part starts with the delimiter");
        let head_end = rest.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = std::str::from_utf8(&rest[..head_end]).unwrap();
        assert!(head.starts_with("Content-Type: "), "{head:?}");
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .expect("a Content-Range")
            .to_string();
        let (span, _) = range
            .strip_prefix("bytes ")
            .unwrap()
            .split_once('/')
            .unwrap();
        let (a, b) = span.split_once('-').unwrap();
        let len = b.parse::<usize>().unwrap() + 1 - a.parse::<usize>().unwrap();
        rest = &rest[head_end..];
        found.push((range, rest[..len].to_vec()));
        rest = &rest[len..];
    }
    found
}

/// Several ranges apart get a `multipart/byteranges` 206 (nginx answers
/// them so too), from the page cache and from a file sent with sendfile:
/// overlapping ones coalesced, parts in the order asked, the exact bytes,
/// and the connection still framed right for the next request.
#[test]
fn ranges_apart_come_in_parts() {
    let s = TestServer::start("multirange", |_| {});
    let big = read_file(&s.www().join("big.bin"));
    let mut c = s.client();
    let r = c.get_with(
        "/big.bin",
        "Range: bytes=3000000-3000099, 10-19,0-4,-7, 15-24\r\n",
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), None);
    // In the order asked; a coalesced span where its first range was.
    let want: Vec<(String, Vec<u8>)> = [(3_000_000, 3_000_100), (10, 25), (0, 5), (BIG - 7, BIG)]
        .iter()
        .map(|&(a, b)| (format!("bytes {a}-{}/{BIG}", b - 1), big[a..b].to_vec()))
        .collect();
    assert_eq!(parts(&r), want);
    // The same connection serves on: the length was exact.
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
    // Large spans of a file sent in pieces.
    let r = c.get_with("/big.bin", "Range: bytes=0-1499999,2000000-\r\n");
    let got = parts(&r);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, &big[..1_500_000]);
    assert_eq!(got[1].1, &big[2_000_000..]);
    // HEAD: the same head without a body; here, no ranges (GET only).
    c.send("HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1,3-4\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 200);
    // Pipelined behind one another, answers from memory.
    c.send(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-0,12-\r\n\r\n\
         GET /hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=7-11\r\n\r\n",
    );
    let r = c.response(false);
    assert_eq!(
        parts(&r),
        [
            ("bytes 0-0/13".into(), b"h".to_vec()),
            ("bytes 12-12/13".into(), b"\n".to_vec())
        ]
    );
    assert_eq!(c.response(false).text(), "world");
}

/// A large file answered from the page cache in many parts: the spans are
/// sent from the cache entry (past the output's 16 shared bodies, copied),
/// each in its place.
#[test]
fn many_parts_of_a_cached_file_come_in_order() {
    let s = TestServer::start("multirange-cached", |c| {
        c.cache_max_file = 8 << 20;
        c.cache_bytes = 64 << 20;
    });
    let big = read_file(&s.www().join("big.bin"));
    let mut c = s.client();
    assert_eq!(c.get("/big.bin").body, big, "now cached");
    let spans: Vec<(usize, usize)> = (0..40)
        .map(|i| (i * 70_000 + 3, i * 70_000 + 3 + 9_000 + i))
        .collect();
    let ranges: Vec<String> = spans
        .iter()
        .map(|(a, b)| format!("{a}-{}", b - 1))
        .collect();
    for _ in 0..2 {
        let r = c.get_with(
            "/big.bin",
            &format!("Range: bytes={}\r\n", ranges.join(",")),
        );
        let want: Vec<(String, Vec<u8>)> = spans
            .iter()
            .map(|&(a, b)| (format!("bytes {a}-{}/{BIG}", b - 1), big[a..b].to_vec()))
            .collect();
        assert_eq!(parts(&r), want);
    }
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
}

#[test]
fn a_large_file_is_streamed_intact() {
    let s = TestServer::start("big", |_| {});
    let want = read_file(&s.www().join("big.bin"));
    let mut c = s.client();
    for _ in 0..3 {
        let r = c.get("/big.bin");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
        assert_eq!(r.body.len(), BIG);
        assert_eq!(fnv1a(&r.body), fnv1a(&want));
    }
    // The server counts a piece after its sendfile returned, which may be
    // after the client has read it.
    common::eventually(Duration::from_secs(5), || {
        s.state.stats().sendfile_bytes >= 3 * BIG as u64
    });
    let st = s.state.stats();
    assert_eq!(st.sendfile_bytes, 3 * BIG as u64, "served with sendfile");
    assert_eq!(st.cache.entries, 0, "too large for the page cache");
}

#[test]
fn a_large_file_to_many_clients_at_once() {
    let s = TestServer::start("big-many", |_| {});
    let want = fnv1a(&read_file(&s.www().join("mid.bin")));
    let big = fnv1a(&read_file(&s.www().join("big.bin")));
    let addr = s.addr;
    let threads: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = common::Client::connect(addr);
                for _ in 0..3 {
                    let (p, w) = if i % 2 == 0 {
                        ("/mid.bin", want)
                    } else {
                        ("/big.bin", big)
                    };
                    assert_eq!(fnv1a(&c.get(p).body), w);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn the_cache_follows_file_changes() {
    // Stat on every request: a change is visible at once.
    let s = TestServer::start("invalidate", |c| c.revalidate = Duration::ZERO);
    let p = s.www().join("hello.txt");
    let mut c = s.client();
    let first = c.get("/hello.txt");
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
    assert!(s.state.stats().cache.hits >= 1);
    std::fs::write(&p, "changed!\n").unwrap();
    let r = c.get("/hello.txt");
    assert_eq!(r.text(), "changed!\n");
    assert_ne!(r.header("etag"), first.header("etag"));
    assert!(s.state.stats().cache.invalidations >= 1);
    // Replaced by rename (a new inode), same size.
    let tmp = s.www().join("hello.tmp");
    std::fs::write(&tmp, "renamed!\n").unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    assert_eq!(c.get("/hello.txt").text(), "renamed!\n");
    // A permission change (chmod moves the inode's change time, not its
    // mtime): the cached copy is dropped and the file opened again, which
    // is where a file made unreadable gets 403 (a test run as root reads
    // it anyway, so the drop is what is checked here), with the same ETag.
    let tag = c.get("/hello.txt").header("etag").unwrap().to_owned();
    let before = s.state.stats().cache.invalidations;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = c.get("/hello.txt");
    assert_eq!(r.header("etag"), Some(tag.as_str()));
    assert_eq!(s.state.stats().cache.invalidations, before + 1);
    std::fs::remove_file(&p).unwrap();
    assert_eq!(c.get("/hello.txt").status, 404);
}

#[test]
fn with_a_revalidation_window_a_change_shows_after_it() {
    let s = TestServer::start("window", |c| c.revalidate = Duration::from_millis(200));
    let p = s.www().join("hello.txt");
    let mut c = s.client();
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
    std::fs::write(&p, "changed!\n").unwrap();
    assert!(common::eventually(Duration::from_secs(3), || c
        .get("/hello.txt")
        .text()
        == "changed!\n"));
}

#[test]
fn the_page_cache_is_bounded() {
    let s = TestServer::start("bounded", |c| {
        c.cache_bytes = 64 * 1024;
        c.cache_max_file = 16 * 1024;
    });
    for i in 0..40 {
        std::fs::write(
            s.www().join(format!("f{i}.txt")),
            vec![b'a' + (i % 26) as u8; 8000],
        )
        .unwrap();
    }
    let mut c = s.client();
    for round in 0..2 {
        for i in 0..40 {
            let r = c.get(&format!("/f{i}.txt"));
            assert_eq!(
                r.body,
                vec![b'a' + (i % 26) as u8; 8000],
                "round {round} file {i}"
            );
        }
    }
    let st = s.state.stats().cache;
    assert!(st.bytes <= 64 * 1024, "{st:?}");
    assert!(st.evictions > 0, "{st:?}");
}

/// Once the page cache is full, a small file missed for the first time is
/// read on the blocking pool and written from memory (below the sendfile
/// threshold) and not cached; its second miss caches it. Bodies stay exact
/// and in order, also pipelined behind cached answers.
#[test]
fn a_full_cache_sends_a_first_miss_without_caching_it() {
    full_cache_first_misses(None);
}

/// The same with a sendfile threshold below the files' size: a first miss
/// is read into the kernel's page cache on the blocking pool and sent with
/// `sendfile`.
#[test]
fn a_full_cache_sendfiles_a_first_miss_at_the_threshold() {
    full_cache_first_misses(Some(4 * 1024));
}

fn full_cache_first_misses(sendfile_threshold: Option<u64>) {
    let s = TestServer::start("admission", |c| {
        c.cache_bytes = 64 * 1024;
        c.cache_max_file = 16 * 1024;
        if let Some(t) = sendfile_threshold {
            c.sendfile_threshold = t;
        }
    });
    let body = |i: usize| common::pseudo_random(8000 + i, i as u64);
    for i in 0..40 {
        std::fs::write(s.www().join(format!("f{i}.bin")), body(i)).unwrap();
    }
    let mut c = s.client();
    for i in 0..40 {
        assert_eq!(c.get(&format!("/f{i}.bin")).body, body(i), "file {i}");
    }
    let first = s.state.stats().cache;
    // 64 KiB hold about 7 of these files: the rest were first misses of a
    // full cache.
    assert!(first.not_admitted >= 25, "{first:?}");
    assert!(first.insertions <= 15, "{first:?}");
    // Counted once sendfile returned, which may be after the client read.
    let by_sendfile = || s.state.stats().sendfile_bytes;
    if sendfile_threshold.is_some() {
        let sent = common::eventually(Duration::from_secs(5), || by_sendfile() >= 25 * 8000);
        assert!(sent, "first misses sent with sendfile: {}", by_sendfile());
    } else {
        assert_eq!(by_sendfile(), 0, "first misses below the threshold");
    }
    // Pipelined: every file once more in one write; the answers come in
    // order, whether from the cache or from a file.
    let mut req = String::new();
    for i in 0..40 {
        req.push_str(&format!("GET /f{i}.bin HTTP/1.1\r\nHost: t\r\n\r\n"));
    }
    c.send(req);
    for i in 0..40 {
        assert_eq!(c.response(false).body, body(i), "pipelined file {i}");
    }
    let second = s.state.stats().cache;
    assert!(
        second.insertions > first.insertions,
        "second misses are cached: {first:?} then {second:?}"
    );
    assert!(second.bytes <= 64 * 1024, "{second:?}");
}

/// A file past the cache's largest but below the sendfile threshold is
/// sent with `sendfile` from the page cache, not read whole into memory for
/// each request (a threshold raised to mean "never sendfile" must not copy
/// every large file per reader).
#[test]
fn a_file_past_the_caches_largest_goes_out_with_sendfile_below_the_threshold() {
    let s = TestServer::start("pastlargest", |c| {
        c.cache_max_file = 16 * 1024;
        c.sendfile_threshold = 1 << 20;
    });
    let body = common::pseudo_random(100 * 1024, 7);
    std::fs::write(s.www().join("mid.dat"), &body).unwrap();
    let mut c = s.client();
    for _ in 0..3 {
        assert_eq!(c.get("/mid.dat").body, body);
    }
    let sent = common::eventually(Duration::from_secs(5), || {
        s.state.stats().sendfile_bytes >= 3 * body.len() as u64
    });
    assert!(sent, "{:?}", s.state.stats());
    assert_eq!(s.state.stats().cache.entries, 0);
}

#[test]
fn without_a_cache_small_files_are_read_each_time() {
    let s = TestServer::start("nocache", |c| c.cache_bytes = 0);
    let mut c = s.client();
    for _ in 0..3 {
        assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
        assert_eq!(c.get("/mid.bin").body.len(), 100 * 1024);
    }
    assert_eq!(s.state.stats().cache.entries, 0);
}
