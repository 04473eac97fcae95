//! Protocol edges that real clients and hostile ones reach (issue 14):
//! `Expect: 100-continue`, nginx-sized heads, later HTTP/1.x versions and
//! `If-Modified-Since` dates in the future, over real sockets.

mod common;

use common::{Client, TestServer};
use std::io::Read;
use std::time::Duration;

const CONTINUE: &str = "HTTP/1.1 100 Continue\r\n\r\n";

/// Reads exactly `n` bytes (the test client's buffer is bypassed, so call
/// this only when nothing else is buffered).
fn read_exact(c: &mut Client, n: usize) -> String {
    let mut b = vec![0u8; n];
    c.stream.read_exact(&mut b).unwrap();
    String::from_utf8_lossy(&b).into_owned()
}

/// True if nothing arrives within `within`.
fn silent_for(c: &mut Client, within: Duration) -> bool {
    c.stream.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 256];
    let r = c.stream.read(&mut b);
    c.stream
        .set_read_timeout(Some(common::READ_TIMEOUT))
        .unwrap();
    match r {
        Ok(n) => panic!("unexpected {:?}", String::from_utf8_lossy(&b[..n])),
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn expect_100_continue_is_answered_before_the_body() {
    let s = TestServer::start("expect", |_| {});
    let mut c = s.client();
    c.send(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    );
    // Without the interim answer the client would hold its body back
    // (curl: 1 s, others: for ever). The final answer follows at once, as
    // nginx's does: a static server needs none of the body.
    assert_eq!(read_exact(&mut c, CONTINUE.len()), CONTINUE);
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
    assert!(r.keeps_alive());
    // The body is dropped as it comes: the connection goes on after it.
    c.send("hello");
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");

    // Sent once only, also when the body dribbles in afterwards.
    let mut c = s.client();
    c.send(
        "HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n",
    );
    assert_eq!(read_exact(&mut c, CONTINUE.len()), CONTINUE);
    assert_eq!(c.response(true).status, 200);
    c.send("a");
    assert!(silent_for(&mut c, Duration::from_millis(200)));
    c.send("bc");
    assert_eq!(c.get("/hello.txt").status, 200);

    // Behind a pipelined request: its response comes first.
    let mut c = s.client();
    c.send(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
         GET /hello.txt HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
    );
    assert_eq!(c.response(false).status, 200);
    assert_eq!(c.response(false).status, 100);
    assert_eq!(c.response(false).status, 200);
    c.send("ok");
    assert_eq!(c.get("/hello.txt").status, 200);

    // Before an error or a redirect, none (as nginx): the client is spared
    // the upload; a body that comes anyway is dropped.
    for (target, status) in [("/x", 404), ("/sub", 301)] {
        let mut c = s.client();
        c.send(format!(
            "GET {target} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        ));
        assert_eq!(c.response(false).status, status, "{target}");
        c.send("ok");
        assert_eq!(c.get("/hello.txt").status, 200, "{target}");
    }
    let mut c = s.client();
    c.send(
        "POST /hello.txt HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
    );
    assert_eq!(c.response(false).status, 405);
}

#[test]
fn expect_100_continue_is_not_sent_when_it_is_not_needed() {
    let s = TestServer::start("expect-not", |_| {});
    // The body came with the head: straight to the final answer.
    let mut c = s.client();
    c.send("POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok");
    assert_eq!(c.response(false).status, 405);
    // No body at all.
    assert_eq!(
        c.get_with("/hello.txt", "Expect: 100-continue\r\n").status,
        200
    );
    // HTTP/1.0 (RFC 9110 §10.1.1) and unknown expectations (nginx ignores
    // them rather than answering 417): no interim answer, just the final one.
    for head in [
        "POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: t\r\nExpect: something-else\r\nContent-Length: 2\r\n\r\n",
    ] {
        let mut c = s.client();
        c.send(head);
        assert_eq!(c.response(false).status, 405, "{head:?}");
    }
    // A body over the limit: 413 at once, never 100, and close.
    let mut c = s.client();
    c.send(
        "POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2000000\r\n\r\n",
    );
    let r = c.response(false);
    assert_eq!(r.status, 413);
    assert!(c.closed_within(Duration::from_secs(3)));
}

/// A request body is dropped as it arrives, as nginx discards a static
/// request's body: the answer does not wait for it, a body of any framing
/// and (chunked) any size costs no memory, and the next request after it is
/// served; bad framing after the answer closes the connection.
#[test]
fn request_bodies_are_dropped_as_they_arrive() {
    let s = TestServer::start("discard", |_| {});
    // 100 KB announced, answered before any of it came.
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    assert_eq!(c.response(false).text(), "hello, world\n");
    c.send(vec![b'x'; 100_000]);
    assert_eq!(c.get("/hello.txt").status, 200);
    // A 4 MiB chunked body, in 64 KiB reads, then a pipelined request.
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n400000\r\n");
    assert_eq!(c.response(false).status, 200);
    for _ in 0..64 {
        c.send(vec![b'y'; 64 * 1024]);
    }
    c.send("\r\n0\r\nTrailer: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).text(), "hello, world\n");
    // An answer that closes the connection (Connection: close, HTTP/1.0)
    // while the body is still coming: the body is read to its end first,
    // and the client reads the whole answer, not a reset.
    for (version, close) in [("1.1", "Connection: close\r\n"), ("1.0", "")] {
        let mut c = s.client();
        c.send(format!(
            "GET /big.bin HTTP/{version}\r\nHost: t\r\n{close}Content-Length: 100000\r\n\r\n"
        ));
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..10 {
            c.send(vec![b'b'; 10_000]);
        }
        let r = c.response(false);
        assert_eq!(
            (r.status, r.body.len()),
            (200, common::BIG),
            "HTTP/{version}"
        );
        assert!(c.closed_within(Duration::from_secs(3)), "HTTP/{version}");
    }
    // A client that half-closes mid-body still gets its answer.
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc");
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(c.response(false).status, 200);
    assert!(c.closed_within(Duration::from_secs(3)));
    // Bad framing that came with the head: 400. After the answer: the
    // connection closes, and nothing more is said.
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    assert_eq!(c.response(false).status, 400);
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    c.send("zz\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(c.closed_within(Duration::from_secs(3)));
}

/// A body being dropped after its answer gets `lingering_timeout` of
/// silence and `lingering_time` in all (nginx's 5 s and 30 s), then the
/// connection closes: a client that never sends the body it announced, or
/// trickles it, cannot pin a connection.
#[test]
fn a_body_being_dropped_is_bounded_in_time() {
    let s = TestServer::start("linger-time", |c| {
        // The trickle below writes every ~150 ms: four times that is the
        // silence bound, so a loaded machine does not close it early.
        c.lingering_timeout = Duration::from_millis(600);
        c.lingering_time = Duration::from_millis(1200);
    });
    for head in [
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 100\r\n\r\n",
        "POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n",
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let mut c = s.client();
        let t0 = std::time::Instant::now();
        c.send(head);
        c.response(false);
        assert!(c.closed_within(Duration::from_secs(3)), "{head:?}");
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(550), "{head:?}: {took:?}");
    }
    // Trickled under the silence bound: closed at the total bound.
    let mut c = s.client();
    let t0 = std::time::Instant::now();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    let closed = (0..40).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        use std::io::Write;
        c.stream.write_all(b"x").is_err() || c.closed_within(Duration::from_millis(50))
    });
    assert!(closed, "still open after {:?}", t0.elapsed());
    assert!(
        t0.elapsed() >= Duration::from_millis(1100),
        "{:?}",
        t0.elapsed()
    );
}

/// Requests nginx serves with its default buffers are served, not refused.
#[test]
fn nginx_sized_uris_and_heads_are_served() {
    let s = TestServer::start("sizes", |_| {});
    let mut c = s.client();
    // A 7 KB target (a long query string on an existing file).
    let target = format!("/hello.txt?q={}", "a".repeat(7 * 1000));
    let r = c.get(&target);
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
    // 100 ordinary fields, about 1.3 KB.
    let fields: String = (0..100).map(|i| format!("X-Field-{i:02}: v\r\n")).collect();
    assert!(fields.len() >= 1300, "{}", fields.len());
    let r = c.get_with("/hello.txt", &fields);
    assert_eq!(r.status, 200);
    // A 20 KB cookie (under nginx's 32 KiB of large buffers, one 8 KiB
    // line aside).
    let r = c.get_with(
        "/hello.txt",
        &format!("Cookie: {}\r\n", "c".repeat(20 * 1000)),
    );
    assert_eq!(r.status, 200);
    assert!(r.keeps_alive());
}

#[test]
fn limits_come_from_the_config_and_bound_the_read() {
    let s = TestServer::start("limits", |cfg| {
        cfg.limits.max_head = 1024;
        cfg.limits.max_uri = 100;
        cfg.limits.max_headers = 4;
    });
    let status = |raw: String| common::status_of(s.addr, &raw);
    let uri = |n: usize| format!("/hello.txt?{}", "q".repeat(n - 11));
    assert_eq!(
        status(format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", uri(100))),
        200
    );
    assert_eq!(
        status(format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", uri(101))),
        414
    );
    let fields = |n: usize| "A: b\r\n".repeat(n);
    assert_eq!(
        status(format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", fields(3))),
        200
    );
    assert_eq!(
        status(format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", fields(4))),
        431
    );
    // A head that never ends is cut off at the limit, not buffered: 431
    // long before the megabyte is sent (the client's write would block
    // otherwise once the socket buffers fill, so send from a thread).
    let mut c = s.client();
    c.send("GET / HTTP/1.1\r\nHost: t\r\nX: ");
    let mut w = c.stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let junk = vec![b'x'; 64 * 1024];
        for _ in 0..16 {
            if w.write_all(&junk).is_err() {
                break;
            }
        }
    });
    assert_eq!(c.response(false).status, 431);
    writer.join().unwrap();
}

#[test]
fn later_http_1x_is_answered_as_http_1_1() {
    let s = TestServer::start("http12", |_| {});
    let mut c = s.client();
    for version in ["HTTP/1.2", "HTTP/1.9"] {
        c.send(format!("GET /hello.txt {version}\r\nHost: t\r\n\r\n"));
        // The client checks the status line is HTTP/1.1.
        let r = c.response(false);
        assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
        assert!(r.keeps_alive(), "1.x > 1 keeps alive like 1.1");
    }
    c.send("HEAD /hello.txt HTTP/1.2\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(c.response(true).status, 200);
    assert!(c.closed_within(Duration::from_secs(3)));
    // Other majors are still refused.
    for raw in [
        "GET / HTTP/2.0\r\nHost: t\r\n\r\n",
        "GET / HTTP/0.9\r\nHost: t\r\n\r\n",
        "GET / HTTP/3\r\nHost: t\r\n\r\n",
    ] {
        assert_eq!(common::status_of(s.addr, raw), 505, "{raw:?}");
    }
}

/// `/hello.txt` asked for with `If-Modified-Since: {date}`.
/// hello.txt's `Last-Modified`, from a GET.
fn last_modified(c: &mut Client) -> String {
    c.get("/hello.txt")
        .header("last-modified")
        .unwrap()
        .to_owned()
}

fn since(c: &mut Client, date: &str) -> common::Resp {
    c.get_with("/hello.txt", &format!("If-Modified-Since: {date}\r\n"))
}

#[test]
fn if_modified_since_in_the_future_is_ignored() {
    let s = TestServer::start("ims-future", |_| {});
    let mut c = s.client();
    let lm = last_modified(&mut c);
    assert_eq!(since(&mut c, &lm).status, 304);
    // Later than the server's clock: invalid (RFC 9110 §13.1.3), so the
    // file is sent as if the field were absent.
    let r = c.get_with(
        "/hello.txt",
        "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
}

/// `If-Modified-Since` is a 304 only at the file's own `Last-Modified`, as
/// nginx's default (`if_modified_since exact`): a file rolled back to an
/// older copy (older mtime) is sent again to a client that holds the newer
/// one, which RFC 9110's "not later than" would have told it was unchanged.
#[test]
fn if_modified_since_is_exact() {
    let s = TestServer::start("ims-exact", |c| c.revalidate = std::time::Duration::ZERO);
    let path = s.www().join("hello.txt");
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    let newer = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    f.set_modified(newer).unwrap();
    let mut c = s.client();
    let lm = last_modified(&mut c);
    assert_eq!(since(&mut c, &lm).status, 304);
    // The older copy back in place.
    f.set_modified(newer - std::time::Duration::from_secs(3600))
        .unwrap();
    let mut c = s.client();
    let r = since(&mut c, &lm);
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
}

/// A HEAD request refused while its head is read (a bad target, a field
/// sent twice) gets its error's head alone, as every HEAD answer: the
/// connection closes after it, but a client reading the head must not find
/// a body it was told would not come.
#[test]
fn a_refused_head_request_gets_no_body() {
    let s = TestServer::start("head-refused", |_| {});
    for raw in [
        "HEAD /%2e%2e/x HTTP/1.1\r\nHost: x\r\n\r\n",
        "HEAD /hello.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: *\r\nIf-None-Match: *\r\n\r\n",
        "HEAD /hello.txt HTTP/1.1\r\nHost: a b\r\n\r\n",
    ] {
        let mut c = s.client();
        c.send(raw);
        let mut all = Vec::new();
        c.stream.read_to_end(&mut all).unwrap();
        let text = String::from_utf8_lossy(&all);
        assert!(text.starts_with("HTTP/1.1 400 "), "{raw:?}: {text:?}");
        assert!(text.ends_with("\r\n\r\n"), "{raw:?}: {text:?}");
        assert_eq!(text.matches("\r\n\r\n").count(), 1, "{raw:?}: {text:?}");
        // The same refusal for GET has its body.
        let mut c = s.client();
        c.send(raw.replacen("HEAD", "GET", 1));
        let mut all = Vec::new();
        c.stream.read_to_end(&mut all).unwrap();
        assert!(
            !String::from_utf8_lossy(&all).ends_with("\r\n\r\n"),
            "{raw:?}"
        );
    }
}

/// A body past the limit gets its 413 at once, and is then read and
/// dropped to its end before the connection closes (within nginx's
/// `lingering_time` and `lingering_timeout`), as nginx does: closing with
/// the body still coming resets the connection, and a client still sending
/// got EPIPE and could lose the 413 (the lingering close stopped after 1 s
/// or 64 KiB).
#[test]
fn a_body_past_the_limit_is_dropped_to_its_end_after_the_413() {
    use std::io::Write;
    let s = TestServer::start("413-linger", |c| c.limits.max_body = 1024);
    let mut c = s.client();
    let body = 256 * 1024;
    c.send(format!(
        "PUT /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: {body}\r\n\r\n"
    ));
    let piece = vec![b'x'; 16 * 1024];
    for i in 0..body / piece.len() {
        // A client on a slow link: half the body, a pause, the rest.
        if i == body / piece.len() / 2 {
            std::thread::sleep(Duration::from_millis(1500));
        }
        if let Err(e) = c.stream.write_all(&piece) {
            panic!("write {i} of the body failed: {e}");
        }
    }
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut all = Vec::new();
    c.stream.read_to_end(&mut all).unwrap();
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert!(text.contains("Connection: close\r\n"), "{text}");
}

/// Requests sent after a closing answer, while it is still going out, are
/// read off before the close (nginx's lingering close): closed with them
/// unread, the kernel reset the connection and the client lost the rest of
/// the answer (on epoll: a 4 MiB body cut off at 2-3 MB).
#[test]
fn requests_after_a_closing_answer_do_not_reset_it() {
    use std::io::Write;
    let s = TestServer::start("late-requests", |_| {});
    // Well past what the socket buffers hold while the client does not
    // read (the server's send buffer grows to `tcp_wmem`'s maximum, 4 MiB
    // by default): a 4 MiB body sometimes fit whole, the server closed
    // before the late requests came, and the kernel reset the connection
    // as it would for nginx.
    let wmem_max = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|t| t.split_whitespace().nth(2)?.parse::<usize>().ok())
        .unwrap_or(4 << 20);
    let size = (4 * wmem_max).max(16 << 20);
    std::fs::write(s.www().join("big.bin"), vec![b'b'; size]).unwrap();
    let mut c = s.client();
    c.send("GET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let late = "GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n".repeat(100);
    c.stream.write_all(late.as_bytes()).unwrap();
    // The answer fills the socket buffers meanwhile; the server finishes
    // writing and closes while the late requests wait unread.
    std::thread::sleep(Duration::from_millis(1000));
    let mut all = Vec::new();
    c.stream
        .read_to_end(&mut all)
        .expect("the answer, then the end of the stream (no reset)");
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(all.starts_with(b"HTTP/1.1 200 "));
    assert_eq!(
        all.len() - head_end,
        size,
        "the whole body, nothing after it"
    );
}

/// A response whose body the client does not take whole (it goes away
/// mid-file) is still counted by its status class, as the access log
/// records it (nginx logs it too): every answered request has a class.
#[test]
fn an_abandoned_file_response_is_counted_by_its_status() {
    let s = TestServer::start("abandoned", |_| {});
    std::fs::write(s.www().join("huge.bin"), vec![b'h'; 16 << 20]).unwrap();
    let mut c = s.client();
    c.send("GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut some = vec![0u8; 64 << 10];
    c.stream.read_exact(&mut some).unwrap();
    assert!(some.starts_with(b"HTTP/1.1 200 "));
    // Unread bytes at the close: a reset, and the server's write fails.
    drop(c);
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let st = s.state.stats();
        if st.requests == 1 && st.responses == [0, 1, 0, 0, 0] {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "{:?} of {}",
            st.responses,
            st.requests
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// As nginx's `keepalive_requests`: the answer to the last request a
/// connection may make carries `Connection: close` and ends it, whether it
/// is made from memory or by `finish` (a file sent with sendfile); a
/// request pipelined behind it is not answered, and the connection ends
/// without a reset. 0 allows no keep-alive at all.
#[test]
fn a_connection_closes_after_its_last_allowed_request() {
    use std::io::Write;
    let s = TestServer::start("keepalive-requests", |c| c.keepalive_requests = 3);
    std::fs::write(s.www().join("big.bin"), vec![b'b'; 256 << 10]).unwrap();
    let mut c = s.client();
    assert!(c.get("/hello.txt").keeps_alive());
    assert!(c.get("/hello.txt").keeps_alive());
    c.stream
        .write_all(
            b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .unwrap();
    let last = c.response(false);
    assert_eq!((last.status, last.body.len()), (200, 256 << 10));
    assert_eq!(last.header("connection"), Some("close"));
    let mut rest = Vec::new();
    c.stream
        .read_to_end(&mut rest)
        .expect("the end of the stream, not a reset");
    assert!(rest.is_empty() && c.leftover().is_empty(), "{rest:?}");
    // A new connection counts afresh; its last answer comes from memory.
    let mut c = s.client();
    assert!(c.get("/big.bin").keeps_alive());
    assert!(c.get("/hello.txt").keeps_alive());
    assert_eq!(c.get("/hello.txt").header("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(5)));

    let s = TestServer::start("no-keepalive", |c| c.keepalive_requests = 0);
    let mut c = s.client();
    let r = c.get("/hello.txt");
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert!(c.closed_within(Duration::from_secs(5)));
}
