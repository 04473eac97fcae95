//! `duality http` at `--max-conns`: connections idle for a while between
//! requests (keep-alive, or silent since they connected) are closed to make
//! room for new clients, as nginx reuses its idle connections; ones in the
//! middle of a request, or idle only briefly, are not, and a new client
//! then gets the 503.

mod common;

use common::http::HttpServer;
use common::TempDir;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn root() -> TempDir {
    let dir = TempDir::new("http-max-conns");
    std::fs::write(dir.path().join("a.txt"), b"hello").unwrap();
    dir
}

fn connect(url: &str) -> TcpStream {
    let s = TcpStream::connect(url.strip_prefix("http://").unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// One keep-alive `GET /a.txt` on `s`; its status line.
fn get_keep_alive(s: &mut TcpStream) -> String {
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    response(s)
}

/// The whole answer to a `GET /a.txt` on `s`; its status line.
fn response(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    // The head and the 5-byte body.
    while !got.windows(4).any(|w| w == b"\r\n\r\n") || !got.ends_with(b"hello") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    text.lines().next().unwrap().to_owned()
}

/// A new client's `GET /a.txt` (closing); its status line.
fn get_new(url: &str) -> String {
    let mut s = connect(url);
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.lines().next().unwrap_or("").to_owned()
}

/// Whether the server closed `s` (end of stream or a reset) within `wait`.
fn closed_within(mut s: &TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    match s.read(&mut [0u8; 16]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn connections_idle_for_a_second_make_room_for_new_ones() {
    let dir = root();
    let server = HttpServer::start(dir.path(), &["--max-conns", "8"]);
    // Eight keep-alive clients, each served once, then idle; and the limit
    // is reached.
    let mut held: Vec<TcpStream> = (0..8).map(|_| connect(&server.url)).collect();
    for s in &mut held {
        assert_eq!(get_keep_alive(s), "HTTP/1.1 200 OK");
    }
    std::thread::sleep(Duration::from_millis(1300));
    // The old code refused every new client until the idle timeout (60 s).
    for _ in 0..3 {
        assert_eq!(get_new(&server.url), "HTTP/1.1 200 OK");
    }
    let closed = held
        .iter()
        .filter(|s| closed_within(s, Duration::from_millis(200)))
        .count();
    assert!(
        (1..=8).contains(&closed),
        "{closed} of the idle connections were closed"
    );
    // Silent connections (nothing sent since they connected) fill the
    // table again and are reclaimed in turn.
    drop(held);
    std::thread::sleep(Duration::from_millis(100));
    let silent: Vec<TcpStream> = (0..8).map(|_| connect(&server.url)).collect();
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(get_new(&server.url), "HTTP/1.1 200 OK");
    let closed = silent
        .iter()
        .filter(|s| closed_within(s, Duration::from_millis(200)))
        .count();
    assert!(closed >= 1, "no silent connection was closed");
}

#[test]
fn connections_mid_request_or_just_idle_are_kept_and_new_ones_refused() {
    let dir = root();
    let server = HttpServer::start(dir.path(), &["--max-conns", "4"]);
    // Four clients each with half a request head sent.
    let mut mid: Vec<TcpStream> = (0..4).map(|_| connect(&server.url)).collect();
    for s in &mut mid {
        s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n").unwrap();
    }
    std::thread::sleep(Duration::from_millis(1300));
    let at = Instant::now();
    assert!(get_new(&server.url).starts_with("HTTP/1.1 503"));
    assert!(at.elapsed() < Duration::from_secs(3));
    // Each finishes its request and is answered.
    for s in &mut mid {
        s.write_all(b"\r\n").unwrap();
        assert_eq!(response(s), "HTTP/1.1 200 OK");
    }
    // Just served (idle well under a second): kept, and a new client is
    // refused.
    assert!(get_new(&server.url).starts_with("HTTP/1.1 503"));
    for s in &mut mid {
        assert_eq!(get_keep_alive(s), "HTTP/1.1 200 OK");
    }
}
