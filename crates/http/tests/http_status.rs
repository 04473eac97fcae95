//! Every status code the server sends, over real sockets.

mod common;

use common::{Client, TestServer};
use std::time::Duration;

#[test]
fn status_200_with_every_field() {
    let s = TestServer::start("200", |_| {});
    let mut c = s.client();
    let r = c.get("/hello.txt");
    assert_eq!((r.status, r.reason.as_str()), (200, "OK"));
    assert_eq!(r.text(), "hello, world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("13"));
    assert_eq!(r.header("server"), Some("duality"));
    assert!(r.header("date").unwrap().ends_with(" GMT"));
    assert!(r.header("last-modified").unwrap().ends_with(" GMT"));
    let etag = r.header("etag").unwrap();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(r.keeps_alive());
    // Served again (now from the page cache): the same bytes and validators.
    let again = c.get("/hello.txt");
    assert_eq!(again.body, r.body);
    assert_eq!(again.header("etag"), Some(etag));
    assert!(s.state.stats().cache.hits >= 1);
}

#[test]
fn status_200_index_html_for_directories_and_types() {
    let s = TestServer::start("index", |_| {});
    let mut c = s.client();
    let r = c.get("/");
    assert_eq!((r.status, r.text().as_str()), (200, "<h1>home</h1>\n"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(c.get("/sub/").text(), "<h1>sub</h1>\n");
    assert_eq!(c.get("/my%20dir/").text(), "<h1>my dir</h1>\n");
    assert_eq!(c.get("/sp%20ace.txt").text(), "space\n");
    assert_eq!(c.get("/%C3%BC.txt").text(), "umlaut\n");
    assert_eq!(c.get("/sub/./page.html?x=1#f").text(), "<p>page</p>\n");
    assert_eq!(c.get("/style.css").header("content-type"), Some("text/css"));
    assert_eq!(c.get("/link_in").text(), "hello, world\n");
    assert_eq!(c.get("/dir_in/page.html").text(), "<p>page</p>\n");
    // The type is the name's asked for, not the symlink target's (nginx):
    // a `.txt` that leads to HTML is never HTML a browser would run.
    std::os::unix::fs::symlink("sub/page.html", s.dir.0.join("www/notes.txt")).unwrap();
    std::os::unix::fs::symlink("../index.html", s.dir.0.join("www/sub/home.css")).unwrap();
    let r = c.get("/notes.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "<p>page</p>\n"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(
        c.get("/sub/home.css").header("content-type"),
        Some("text/css")
    );
    assert_eq!(
        c.get("/link_in").header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(c.get("/dir_in/").header("content-type"), Some("text/html"));
    let empty = c.get("/empty.txt");
    assert_eq!((empty.status, empty.body.len()), (200, 0));
    assert_eq!(empty.header("content-length"), Some("0"));
}

#[test]
fn status_206_and_416() {
    let s = TestServer::start("range", |_| {});
    let mut c = s.client();
    let r = c.get_with("/hello.txt", "Range: bytes=7-11\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "world"));
    assert_eq!(r.header("content-range"), Some("bytes 7-11/13"));
    let r = c.get_with("/hello.txt", "Range: bytes=100-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */13"));
    assert!(r.keeps_alive());
    assert_eq!(c.get("/hello.txt").status, 200);
}

#[test]
fn status_301_for_a_directory_without_slash() {
    let s = TestServer::start("301", |_| {});
    let mut c = s.client();
    let r = c.get("/sub");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/sub/"));
    let r = c.get("/my%20dir");
    assert_eq!(r.header("location"), Some("/my%20dir/"));
}

#[test]
fn status_304_for_if_none_match_and_if_modified_since() {
    let s = TestServer::start("304", |_| {});
    let mut c = s.client();
    let r = c.get("/hello.txt");
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();
    let r = c.get_with("/hello.txt", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(r.header("content-length"), None);
    let r = c.get_with("/hello.txt", &format!("If-Modified-Since: {lm}\r\n"));
    assert_eq!(r.status, 304);
    let r = c.get_with("/hello.txt", "If-None-Match: \"other\"\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
    let r = c.get_with(
        "/hello.txt",
        "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn status_400_for_malformed_requests() {
    let s = TestServer::start("400", |_| {});
    for raw in [
        "GET /hello.txt HTTP/1.1\r\n\r\n",                       // no Host
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", // two Hosts
        "GET /a%zz HTTP/1.1\r\nHost: t\r\n\r\n",                 // bad escape
        "GET hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",             // not origin-form
        "GET /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: t\r\nContent-Length: zz\r\n\r\n",
        "\x01\x02garbage\r\n\r\n",
    ] {
        let mut c = s.client();
        c.send(raw);
        let r = c.response(false);
        assert_eq!(r.status, 400, "{raw:?}");
        assert_eq!(r.header("connection"), Some("close"), "{raw:?}");
        assert!(c.closed_within(Duration::from_secs(3)), "{raw:?}");
    }
}

#[test]
fn status_403_404() {
    let s = TestServer::start("403", |_| {});
    let mut c = s.client();
    assert_eq!(c.get("/noindex/").status, 403);
    assert_eq!(c.get("/link_out").status, 403);
    assert_eq!(c.get("/loop").status, 403);
    let r = c.get("/nope.txt");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("404 Not Found"));
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    assert_eq!(c.get("/hello.txt/").status, 404);
    assert!(r.keeps_alive());
    assert_eq!(c.get("/hello.txt").status, 200);
}

#[test]
fn status_405_with_allow() {
    let s = TestServer::start("405", |_| {});
    let mut c = s.client();
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "get"] {
        c.send(format!("{method} /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n"));
        let r = c.response(false);
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
        assert!(r.keeps_alive());
    }
    // A POST with a small body: the body is skipped, the next request works.
    c.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhelloGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).status, 405);
    assert_eq!(c.response(false).text(), "hello, world\n");
}

#[test]
fn status_408_when_the_head_does_not_arrive_in_time() {
    let s = TestServer::start("408", |c| c.head_timeout = Duration::from_millis(300));
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHo");
    let r = c.response(false);
    assert_eq!(r.status, 408);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(3)));
    assert_eq!(s.state.stats().head_timeouts, 1);
}

#[test]
fn status_413_for_large_bodies_and_chunked_bodies_dropped() {
    let s = TestServer::start("413", |_| {});
    // Past nginx's client_max_body_size (1 MiB).
    let mut c = s.client();
    c.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1048577\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 413);
    assert!(c.closed_within(Duration::from_secs(3)));
    // A chunked body (extensions, a trailer field, bare LF as nginx reads
    // them) is dropped, like a Content-Length one; the request
    // behind it is answered on the same connection (nginx: 200, 200).
    let mut c = s.client();
    c.send(concat!(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
        "5;name=v\r\nhello\r\n3\nabc\n0\r\nX-Trailer: 1\r\n\r\n",
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    ));
    for _ in 0..2 {
        let r = c.response(false);
        assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
        assert!(r.keeps_alive());
    }
    // A method other than GET and HEAD with a chunked body: 405, and the
    // connection goes on (the body was consumed).
    c.send("POST /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_eq!(c.response(false).status, 405);
    assert_eq!(c.get("/hello.txt").status, 200);
    // A chunked body is not limited (nginx discards one of any size: it
    // costs no memory): a 1 MiB chunk, then the next request.
    let mut c = s.client();
    c.send("PUT /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n");
    assert_eq!(c.response(false).status, 405);
    c.send(vec![b'z'; 0x100000]);
    c.send("\r\n0\r\n\r\n");
    assert_eq!(c.get("/hello.txt").status, 200);
    // Bad framing: 400 and closed.
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    assert_eq!(c.response(false).status, 400);
    assert!(c.closed_within(Duration::from_secs(3)));
}

#[test]
fn status_413_is_read_by_a_client_still_sending_its_body() {
    // The lingering close keeps the 413 from being destroyed by a reset.
    let s = TestServer::start("413b", |c| c.limits.max_body = 8 * 1024);
    let mut c = s.client();
    let mut req = b"PUT /x HTTP/1.1\r\nHost: t\r\nContent-Length: 40000\r\n\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'x', 40000));
    c.send(req);
    assert_eq!(c.response(false).status, 413);
}

#[test]
fn status_414_and_431() {
    let s = TestServer::start("414", |_| {});
    // Just over the defaults (nginx's: 8 KiB request line, 32 KiB head);
    // http_edge checks that what is under them is served.
    let long = format!("/{}", "a".repeat(8 * 1024));
    let mut c = s.client();
    c.send(format!("GET {long} HTTP/1.1\r\nHost: t\r\n\r\n"));
    assert_eq!(c.response(false).status, 414);
    assert!(c.closed_within(Duration::from_secs(3)));
    // A HEAD's 414 has no body, its line ended or not (a target past the
    // limit before the line's end came: in one write past 16 KiB).
    for (target, end) in [
        (long.clone(), " HTTP/1.1\r\nHost: t\r\n\r\n"),
        ("/".to_string() + &"a".repeat(20 * 1024), ""),
    ] {
        let mut c = s.client();
        c.send(format!("HEAD {target}{end}"));
        assert_eq!(c.response(true).status, 414);
        assert!(
            c.closed_within(Duration::from_secs(3)),
            "a body followed the 414"
        );
    }

    let many: String = (0..300).map(|i| format!("X-F{i}: v\r\n")).collect();
    let mut c = s.client();
    c.send(format!("GET / HTTP/1.1\r\nHost: t\r\n{many}\r\n"));
    assert_eq!(c.response(false).status, 431);

    let big = format!("X-Big: {}\r\n", "b".repeat(33 * 1024));
    let mut c = s.client();
    c.send(format!("GET / HTTP/1.1\r\nHost: t\r\n{big}\r\n"));
    assert_eq!(c.response(false).status, 431);
}

#[test]
fn status_505_for_other_versions() {
    let s = TestServer::start("505", |_| {});
    for raw in [
        "GET / HTTP/2.0\r\nHost: t\r\n\r\n",
        "GET / HTTP/3.0\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        let mut c = s.client();
        c.send(raw);
        assert_eq!(c.response(false).status, 505, "{raw:?}");
    }
}

#[test]
fn status_503_above_the_connection_limit() {
    let s = TestServer::with_builder(
        "503",
        duality_models::ServerBuilder::new()
            .model("symped:1".parse().unwrap())
            .max_conns(2),
        |_| {},
    );
    let mut a = s.client();
    let mut b = s.client();
    assert_eq!(a.get("/hello.txt").status, 200);
    assert_eq!(b.get("/hello.txt").status, 200);
    let mut c = Client::connect(s.addr);
    let r = c.response(false);
    assert_eq!(r.status, 503);
    assert!(c.closed_within(Duration::from_secs(3)));
    drop(a);
    assert!(common::eventually(Duration::from_secs(3), || s
        .server()
        .connections()
        < 2));
    let mut d = s.client();
    assert_eq!(d.get("/hello.txt").status, 200);
    assert_eq!(b.get("/hello.txt").status, 200);
}
