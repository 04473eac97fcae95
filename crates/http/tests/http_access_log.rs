//! The access log: off by default, one line per response when on.

mod common;

use common::TestServer;
use std::time::Duration;

#[test]
fn access_log_lines() {
    let dir = common::TempDir::new("log");
    let path = dir.0.join("access.log");
    let p = path.clone();
    let s = TestServer::start("log", move |c| c.access_log = Some(p));
    let mut c = s.client();
    assert_eq!(
        c.get_with(
            "/hello.txt",
            "Referer: http://t/\r\nUser-Agent: a \"b\" é\r\n"
        )
        .status,
        200
    );
    let missing = c.get("/nope");
    assert_eq!(missing.status, 404);
    c.send("GET /../x HTTP/1.1\r\nHost: t\r\n\r\n");
    let bad = c.response(false);
    assert_eq!(bad.status, 400);
    assert!(common::eventually(Duration::from_secs(3), || {
        std::fs::read_to_string(&path).map_or(0, |t| t.lines().count()) == 3
    }));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // nginx's `combined` format, with its time format (in UTC) and its
    // escaping of what the client chose.
    let (addr, rest) = lines[0].split_once(" - - [").expect("combined format");
    assert_eq!(addr, "127.0.0.1", "{}", lines[0]);
    let (time, rest) = rest.split_once("] ").unwrap();
    assert_eq!(time.len(), 26, "{time}");
    assert!(
        time.ends_with(" +0000") && time.as_bytes()[2] == b'/',
        "{time}"
    );
    assert_eq!(
        rest,
        "\"GET /hello.txt HTTP/1.1\" 200 13 \"http://t/\" \"a \\x22b\\x22 \\xC3\\xA9\""
    );
    // Error pages count as sent (nginx's $body_bytes_sent), not 0.
    let sent = |r: &common::Resp| r.body.len();
    assert!(sent(&missing) > 0);
    assert!(
        lines[1].ends_with(&format!(
            "\"GET /nope HTTP/1.1\" 404 {} \"-\" \"-\"",
            sent(&missing)
        )),
        "{}",
        lines[1]
    );
    // A refused request is logged with its request line, as nginx logs it
    // (a traversal probe shows in the log).
    assert!(
        lines[2].ends_with(&format!(
            "\"GET /../x HTTP/1.1\" 400 {} \"-\" \"-\"",
            sent(&bad)
        )),
        "{}",
        lines[2]
    );
    assert_eq!(s.state.stats().log_dropped, 0);
}

#[test]
fn no_access_log_by_default() {
    let s = TestServer::start("nolog", |_| {});
    assert!(s.state.config().access_log.is_none());
    assert_eq!(s.client().get("/hello.txt").status, 200);
}

/// A rotation renames the log; `reopen_log` (the binary's SIGUSR1, as
/// `nginx -s reopen`) sends later lines to a new file at the path, and the
/// lines before stay in the renamed one.
#[test]
fn reopen_after_rotation_writes_a_new_file() {
    let dir = common::TempDir::new("logrot");
    let path = dir.0.join("access.log");
    let rotated = dir.0.join("access.log.1");
    let p = path.clone();
    let s = TestServer::start("logrot", move |c| c.access_log = Some(p));
    let lines = |p: &std::path::Path| std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
    let mut c = s.client();
    assert_eq!(c.get("/hello.txt").status, 200);
    assert!(common::eventually(Duration::from_secs(3), || lines(&path) == 1));
    std::fs::rename(&path, &rotated).unwrap();
    // Until the reopen, lines still go to the renamed file.
    assert_eq!(c.get("/nope").status, 404);
    assert!(common::eventually(Duration::from_secs(3), || lines(
        &rotated
    ) == 2));
    s.state.reopen_log();
    assert_eq!(c.get("/hello.txt").status, 200);
    assert!(common::eventually(Duration::from_secs(3), || lines(&path) == 1));
    assert_eq!(lines(&rotated), 2);
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("\"GET /hello.txt HTTP/1.1\" 200"));
    // A path that can no longer be opened: the old file is kept.
    let second = dir.0.join("access.log.2");
    std::fs::rename(&path, &second).unwrap();
    std::fs::create_dir(&path).unwrap();
    s.state.reopen_log();
    assert_eq!(c.get("/hello.txt").status, 200);
    assert_eq!(c.get("/hello.txt").status, 200);
    assert!(common::eventually(Duration::from_secs(3), || lines(
        &second
    ) == 3));
    assert_eq!(lines(&rotated), 2);
    assert_eq!(s.state.stats().log_dropped, 0);
}

/// A request that times out (408) is logged with the request line that
/// had come, ended or not, as nginx logs it.
#[test]
fn a_timed_out_request_logs_its_request_line() {
    let dir = common::TempDir::new("log408");
    let path = dir.0.join("access.log");
    let p = path.clone();
    let s = TestServer::start("log408", move |c| {
        c.access_log = Some(p);
        c.head_timeout = Duration::from_millis(300);
    });
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\n");
    assert_eq!(c.response(false).status, 408);
    let mut c = s.client();
    c.send("GET /hel");
    assert_eq!(c.response(false).status, 408);
    assert!(common::eventually(Duration::from_secs(3), || {
        std::fs::read_to_string(&path).map_or(0, |t| t.lines().count()) == 2
    }));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("\"GET /hello.txt HTTP/1.1\" 408 "),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("\"GET /hel\" 408 "), "{}", lines[1]);
}

/// `--log-format`'s `$request_time` runs from a request's first bytes (a
/// head that comes in pieces), `$connection_requests` counts a
/// connection's requests, and the 408 of a head that never ends counts
/// the time it was waited for.
#[test]
fn request_time_runs_from_the_first_bytes() {
    let dir = common::TempDir::new("log-time");
    let path = dir.0.join("access.log");
    let p = path.clone();
    let s = TestServer::start("log-time", move |c| {
        c.access_log = Some(p);
        c.head_timeout = Duration::from_millis(600);
        let f = "$status $request_time $connection_requests $connection";
        c.log_format = duality_http::LogFormat::parse(f, Default::default()).unwrap();
    });
    let mut c = s.client();
    assert_eq!(c.get("/hello.txt").status, 200);
    c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\n");
    std::thread::sleep(Duration::from_millis(300));
    c.send("\r\n");
    assert_eq!(c.response(false).status, 200);
    c.send("GET /hel");
    assert_eq!(c.response(false).status, 408);
    assert!(common::eventually(Duration::from_secs(3), || {
        std::fs::read_to_string(&path).map_or(0, |t| t.lines().count()) == 3
    }));
    let text = std::fs::read_to_string(&path).unwrap();
    let fields: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    let secs = |l: &[&str]| l[1].parse::<f64>().unwrap();
    assert_eq!(fields[0][0], "200", "{text}");
    assert!(secs(&fields[0]) < 0.25, "{text}");
    assert!(secs(&fields[1]) >= 0.25, "{text}");
    assert!(fields[2][0] == "408" && secs(&fields[2]) >= 0.5, "{text}");
    let counts: Vec<&str> = fields.iter().map(|l| l[2]).collect();
    assert_eq!(counts, ["1", "2", "3"], "{text}");
    // One connection: one serial number.
    assert!(fields.iter().all(|l| l[3] == fields[0][3]), "{text}");
}

/// A download the client abandons is logged with the body bytes that went
/// out, as nginx's `$body_bytes_sent`, not the file's size.
#[test]
fn an_abandoned_download_logs_the_bytes_sent() {
    use std::io::Read;
    let dir = common::TempDir::new("log-abandoned");
    let path = dir.0.join("access.log");
    let p = path.clone();
    let s = TestServer::start("log-abandoned", move |c| c.access_log = Some(p));
    let size: u64 = 64 << 20;
    std::fs::write(s.www().join("huge.bin"), vec![b'h'; size as usize]).unwrap();
    let mut c = s.client();
    c.send("GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut some = vec![0u8; 64 << 10];
    c.stream.read_exact(&mut some).unwrap();
    // Unread bytes at the close: a reset, and the server's write fails.
    drop(c);
    let (line, bytes) = logged_bytes(&path, 200);
    assert!(bytes > 0 && bytes < size, "{bytes} of {size}: {line}");
}

/// A multipart download cut off by the write timeout is logged with every
/// body byte that went out, the parts' heads included (nginx's
/// `$body_bytes_sent`): at least what the client then reads after the
/// response's head.
#[test]
fn a_cut_multipart_download_counts_the_part_heads() {
    use std::io::Read;
    let dir = common::TempDir::new("log-multipart");
    let path = dir.0.join("access.log");
    let p = path.clone();
    let s = TestServer::start("log-multipart", move |c| {
        c.access_log = Some(p);
        c.write_timeout = Duration::from_millis(300);
    });
    let f = std::fs::File::create(s.www().join("parts.bin")).unwrap();
    f.set_len(32 << 20).unwrap();
    let ranges: Vec<String> = (0..64u64)
        .map(|i| format!("{}-{}", i << 19, (i << 19) + 300_000))
        .collect();
    let mut c = s.client();
    c.send(format!(
        "GET /parts.bin HTTP/1.1\r\nHost: x\r\nRange: bytes={}\r\n\r\n",
        ranges.join(",")
    ));
    // Read nothing until the server gave up, then all it had sent.
    let (line, bytes) = logged_bytes(&path, 206);
    let mut got = Vec::new();
    let _ = c.stream.read_to_end(&mut got);
    let head = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let body = (got.len() - head) as u64;
    assert!(body > 0 && bytes < 64 * 300_001, "{bytes}: {line}");
    assert!(
        bytes >= body,
        "logged {bytes}, the client read {body} body bytes"
    );
}

/// Waits (up to 10 s) for the log at `path` to hold one line, with
/// `status`, and returns it and its body bytes.
fn logged_bytes(path: &std::path::Path, status: u16) -> (String, u64) {
    assert!(common::eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(path).map_or(0, |t| t.lines().count()) == 1
    }));
    let line = std::fs::read_to_string(path).unwrap();
    let bytes = line
        .split(&format!("\" {status} "))
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    (line, bytes)
}

/// A log the disk will not take (`/dev/full`: `ENOSPC` on every write):
/// the server answers on, and every line lost is counted, on the metrics
/// page too (the old writer dropped them without a word).
#[test]
fn lines_a_full_disk_refuses_are_counted_not_fatal() {
    let s = TestServer::start("log-full", |c| {
        c.access_log = Some(std::path::PathBuf::from("/dev/full"))
    });
    let mut c = s.client();
    for _ in 0..5 {
        assert_eq!(c.get("/hello.txt").status, 200);
    }
    assert!(common::eventually(Duration::from_secs(3), || {
        s.state.stats().log_failed == 5
    }));
    assert_eq!(s.state.stats().log_dropped, 0);
    let page = s.state.prometheus();
    assert!(
        page.contains("\nduality_http_log_lines_failed_total 5\n"),
        "{page}"
    );
    assert!(page.contains("\nduality_http_log_lines_dropped_total 0\n"));
    assert_eq!(c.get("/hello.txt").status, 200);
}
