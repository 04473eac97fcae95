//! Protocol edges that real clients and hostile ones reach (issue 14),
//! over real sockets.

mod common;

use common::TestServer;

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
fn if_modified_since_in_the_future_is_ignored() {
    let s = TestServer::start("ims-future", |_| {});
    let mut c = s.client();
    let lm = c
        .get("/hello.txt")
        .header("last-modified")
        .unwrap()
        .to_owned();
    assert_eq!(
        c.get_with("/hello.txt", &format!("If-Modified-Since: {lm}\r\n"))
            .status,
        304
    );
    // Later than the server's clock: invalid (RFC 9110 §13.1.3), so the
    // file is sent as if the field were absent.
    let r = c.get_with(
        "/hello.txt",
        "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
}
