//! Pages `duality http` makes besides files, as nginx makes them:
//! `--error-page` (nginx's `error_page`: a page of the root answering
//! errors under their own status, or as itself with `=200`, a single-page
//! application's fallback; a page that cannot be served leaves the built-in
//! one, said at start) and `--autoindex on` (directory listings, compared
//! with nginx's byte for byte where nginx is installed).

mod common;

use common::http::HttpServer;
use common::TempDir;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One request on its own connection: the status code, the head's fields
/// (lower-cased names) and the body.
fn call(
    url: &str,
    method: &str,
    path: &str,
    fields: &str,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = TcpStream::connect(url.strip_prefix("http://").unwrap()).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head");
    let head = String::from_utf8(raw[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let code = lines.next().unwrap()[9..12].parse().unwrap();
    let fields = lines
        .map(|l| {
            let (n, v) = l.split_once(": ").unwrap();
            (n.to_ascii_lowercase(), v.to_owned())
        })
        .collect();
    (code, fields, raw[end + 4..].to_vec())
}

/// What `duality http --root ROOT ARGS` says on its standard error when
/// it refuses to start (it must).
fn refused(root: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_duality"))
        .arg("http")
        .args(args)
        .arg("--root")
        .arg(root)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// [`refused`], saying `text`.
fn refused_saying(root: &Path, args: &[&str], text: &str) {
    let err = refused(root, args);
    assert!(err.contains(text), "{args:?}: {err}");
}

/// A chunked body's data (nginx streams its listing).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&body[..eol]).unwrap(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[eol + 2..eol + 2 + size]);
        body = &body[eol + 2 + size + 2..];
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The text of the log at `path` once it has `n` lines (or after `secs`
/// seconds, whatever it holds then): a server writes a request's line after
/// its answer.
fn log_lines(path: &Path, n: usize, secs: u64) -> String {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n || Instant::now() > until {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn site(dir: &Path) -> Vec<u8> {
    std::fs::create_dir_all(dir.join("errors")).unwrap();
    std::fs::create_dir_all(dir.join("dir")).unwrap();
    std::fs::write(dir.join("index.html"), "<h1>app</h1>\n").unwrap();
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    // Larger than the page cache takes: sent from the file.
    let page: Vec<u8> = b"<p>not here</p>\n"
        .iter()
        .copied()
        .cycle()
        .take(100_000)
        .collect();
    std::fs::write(dir.join("errors/404.html"), &page).unwrap();
    page
}

/// A root `<dir>/www` holding `files` (path, contents; a path ending in
/// `/` is an empty directory), their directories made as needed.
fn tree(tag: &str, files: &[(&str, &str)]) -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new(tag);
    let root = dir.0.join("www");
    std::fs::create_dir_all(&root).unwrap();
    for (name, text) in files {
        let path = root.join(name);
        match name.ends_with('/') {
            true => std::fs::create_dir_all(&path).unwrap(),
            false => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, text).unwrap();
            }
        }
    }
    (dir, root)
}

/// What `seen` gets from `duality http` under `flags` (where given), and
/// under `--nginx-config` of a file holding `server` (a `server` block's
/// directives, in an `http` block starting with `http`) must be `want`,
/// and so must what it gets from `nginx` with the same blocks.
fn as_nginx_does(
    dir: &Path,
    root: &Path,
    (http, server): (&str, &str),
    flags: Option<&[&str]>,
    nginx: Option<std::path::PathBuf>,
    seen: &dyn Fn(&str) -> Vec<String>,
    want: &[&str],
) {
    let conf = dir.join("site.conf");
    std::fs::write(&conf, format!("http {{\n{http}server {{\n{server}}}\n}}\n")).unwrap();
    let config = ["--nginx-config", conf.to_str().unwrap()];
    for args in flags.into_iter().chain([&config[..]]) {
        let d = HttpServer::start(root, args);
        assert_eq!(seen(&d.url), want, "{args:?}");
        assert!(d.stop().success());
    }
    if let Some(nginx) = nginx {
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, root, http, server)
            .unwrap();
        assert_eq!(seen(&format!("http://{}", n.addr)), want, "nginx");
    }
}

#[test]
fn errors_answer_with_pages_of_the_root() {
    let dir = TempDir::new("error-page");
    let root = dir.0.join("www");
    let page = site(&root);
    let log = dir.0.join("access.log");
    let server = HttpServer::start(
        &root,
        &[
            "--error-page",
            "404 /errors/404.html",
            "--error-page",
            "403 =200 /index.html",
            "--access-log",
            log.to_str().unwrap(),
        ],
    );
    let url = &server.url;

    // A missing file: the page, under 404, without the page's validators.
    let (code, fields, body) = call(url, "GET", "/no/such/file", "");
    assert_eq!(code, 404);
    assert_eq!(body, page);
    assert_eq!(field(&fields, "content-type"), Some("text/html"));
    assert_eq!(field(&fields, "etag"), None);
    assert_eq!(field(&fields, "last-modified"), None);
    let (code, fields, body) = call(url, "HEAD", "/no/such/file", "");
    assert_eq!((code, body.len()), (404, 0));
    assert_eq!(field(&fields, "content-length"), Some("100000"));
    // A range of a missing file is no range of the page.
    let (code, _, body) = call(url, "GET", "/nope", "Range: bytes=0-9\r\n");
    assert_eq!((code, body.len()), (404, page.len()));

    // 403 (a directory without index) =200: the page as if asked for.
    let (code, fields, body) = call(url, "GET", "/dir/", "");
    assert_eq!((code, body.as_slice()), (200, b"<h1>app</h1>\n".as_slice()));
    let etag = field(&fields, "etag")
        .expect("the page's own validators")
        .to_owned();
    let (code, _, body) = call(url, "GET", "/dir/", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!((code, body.len()), (304, 0));

    // Files that exist are untouched.
    let (code, _, body) = call(url, "GET", "/a.txt", "");
    assert_eq!((code, body.as_slice()), (200, b"a\n".as_slice()));

    // Logged with the status and the bytes sent.
    let until = Instant::now() + Duration::from_secs(5);
    let logged = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 6 || Instant::now() > until {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        logged.contains("\"GET /no/such/file HTTP/1.1\" 404 100000 "),
        "{logged}"
    );
    assert!(
        logged.contains("\"GET /dir/ HTTP/1.1\" 200 13 "),
        "{logged}"
    );
    assert!(server.stop().success());
}

/// `--error-page` with `=CODE` answers the page under that status, and
/// with an address elsewhere redirects there (302, or the redirection
/// `=CODE` names), as nginx's `error_page`, compared where it is installed.
#[test]
fn error_pages_change_the_status_or_redirect_as_nginx_does() {
    let (_dir, root) = tree("error-page-codes", &[("gone.html", "gone\n"), ("dir/", "")]);
    // Status, Location, and the body of a page that is not a redirection.
    let seen = |url: &str| -> Vec<(u16, Option<String>, Vec<u8>)> {
        ["/nope", "/dir/"]
            .iter()
            .map(|path| {
                let (code, fields, body) = call(url, "GET", path, "");
                let location = field(&fields, "location").map(str::to_owned);
                (
                    code,
                    location.clone(),
                    if location.is_none() { body } else { Vec::new() },
                )
            })
            .collect()
    };
    let nginx = duality_bench::http::find_nginx();
    for (rules, want) in [
        (
            [
                "404 =410 /gone.html",
                "403 https://example.com/forbidden?x=1",
            ],
            [
                (410, None),
                (302, Some("https://example.com/forbidden?x=1")),
            ],
        ),
        (
            ["404 =307 https://example.com/nf", "403 =503 /gone.html"],
            [(307, Some("https://example.com/nf")), (503, None)],
        ),
    ] {
        let args: Vec<&str> = rules.iter().flat_map(|r| ["--error-page", r]).collect();
        let server = HttpServer::start(&root, &args);
        let ours = seen(&server.url);
        assert!(server.stop().success());
        for ((code, location, body), (want_code, want_location)) in ours.iter().zip(want) {
            assert_eq!(
                (*code, location.as_deref()),
                (want_code, want_location),
                "{rules:?}"
            );
            if location.is_none() {
                assert_eq!(body, b"gone\n", "{rules:?}");
            }
        }
        if let Some(nginx) = &nginx {
            let directives: String = rules.iter().map(|r| format!("error_page {r};\n")).collect();
            let n = duality_bench::http::RunningServer::nginx_in_server(nginx, &root, &directives)
                .unwrap();
            assert_eq!(seen(&format!("http://{}", n.addr)), ours, "{rules:?}");
        }
    }
    refused_saying(
        &root,
        &["--error-page", "404 =299 /gone.html"],
        "give =CODE",
    );
}

#[test]
fn a_page_that_cannot_be_served_leaves_the_built_in_one() {
    let dir = TempDir::new("error-page-missing");
    site(&dir.0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["http", "--listen", "127.0.0.1:0", "--model", "sped"])
        .args(["--error-page", "404 /gone.html", "--root"])
        .arg(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let url = ready
        .trim()
        .strip_prefix("ready ")
        .expect("a ready line")
        .to_owned();
    // Said once at start, after the serving line (read on a thread: a
    // missing line fails the test instead of hanging it).
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let warning = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(10)).ok())
        .find(|l| l.contains("--error-page"));
    assert_eq!(
        warning.as_deref(),
        Some(
            "duality http: warning: --error-page 404 /gone.html: /gone.html is 404 Not Found \
             under --root: those errors get the built-in page until it can be served"
        )
    );
    let (code, _, body) = call(&url, "GET", "/nope", "");
    assert_eq!(code, 404);
    assert!(String::from_utf8_lossy(&body).contains("<title>404 Not Found</title>"));
    // Deployed later: served from then on.
    std::fs::write(dir.0.join("gone.html"), "later\n").unwrap();
    assert_eq!(call(&url, "GET", "/nope", "").2, b"later\n");
    assert!(common::http::terminate(&mut child).success());

    refused_saying(
        &dir.0,
        &["--error-page", "404 @fallback"],
        "the page must be a path of the root",
    );
}

#[test]
fn autoindex_lists_a_directory_as_nginx_does() {
    let dir = TempDir::new("autoindex");
    let root = dir.0.join("www");
    let list = root.join("files");
    std::fs::create_dir_all(list.join("sub dir")).unwrap();
    std::fs::create_dir_all(root.join("site")).unwrap();
    std::fs::write(root.join("site/index.html"), "site\n").unwrap();
    for (name, len) in [
        ("b.txt", 1234),
        ("a <&> \"q\" 100%.txt", 5),
        ("e!x*y(z)$a,b=c:d@e~f+g';h", 0),
        (
            "long-name-of-more-than-fifty-characters-in-all-0123456789.bin",
            7,
        ),
        ("ü.txt", 2),
        (".hidden", 1),
    ] {
        std::fs::write(list.join(name), vec![b'x'; len]).unwrap();
    }
    std::os::unix::fs::symlink("b.txt", list.join("link")).unwrap();
    let server = HttpServer::start(&root, &["--autoindex", "on"]);
    let (code, fields, page) = call(&server.url, "GET", "/files/", "");
    assert_eq!(code, 200);
    assert_eq!(
        field(&fields, "content-type"),
        Some("text/html; charset=utf-8")
    );
    let text = String::from_utf8(page.clone()).unwrap();
    assert!(text.starts_with("<html>\r\n<head><title>Index of /files/</title></head>"));
    assert!(!text.contains("hidden"), "{text}");
    // Directories first, then by name; every link answers.
    let links: Vec<&str> = text
        .split("<a href=\"")
        .skip(1)
        .map(|l| &l[..l.find('"').unwrap()])
        .collect();
    assert_eq!(links[..2], ["../", "sub%20dir/"]);
    assert_eq!(links.len(), 2 + 6, "{links:?}");
    for l in &links[1..] {
        let (code, _, _) = call(&server.url, "GET", &format!("/files/{l}"), "");
        assert_eq!(code, 200, "{l}");
    }
    // An index is still served; the slash is still asked for.
    assert_eq!(call(&server.url, "GET", "/site/", "").2, b"site\n");
    assert_eq!(call(&server.url, "GET", "/files", "").0, 301);
    let (code, fields, body) = call(&server.url, "HEAD", "/files/", "");
    assert_eq!((code, body.len()), (200, 0));
    assert_eq!(
        field(&fields, "content-length"),
        Some(page.len().to_string().as_str())
    );

    // The same page as nginx's `autoindex on` (with `charset utf-8`, which
    // counts a name's characters rather than its bytes), byte for byte.
    match duality_bench::http::find_nginx() {
        Some(nginx) => {
            let n = duality_bench::http::RunningServer::nginx_with(
                &nginx,
                &root,
                1,
                1024,
                "    autoindex on;\n    charset utf-8;\n",
            )
            .unwrap();
            let (code, fields, theirs) = call(&format!("http://{}", n.addr), "GET", "/files/", "");
            assert_eq!(code, 200);
            assert_eq!(
                field(&fields, "content-type"),
                Some("text/html; charset=utf-8")
            );
            assert_eq!(field(&fields, "transfer-encoding"), Some("chunked"));
            assert_eq!(String::from_utf8_lossy(&dechunk(&theirs)), text);
        }
        None => eprintln!("nginx not installed: the listing is not compared with nginx's"),
    }
    assert!(server.stop().success());

    // Off (the default): 403, as nginx's.
    let off = HttpServer::start(&root, &[]);
    assert_eq!(call(&off.url, "GET", "/files/", "").0, 403);
}

/// `--index` (nginx's `index`): a directory is served by the first of its
/// names found there, typed by that name; a name that is not a file name
/// is refused at start.
#[test]
fn index_names_are_tried_in_order() {
    let dir = TempDir::new("index-names");
    std::fs::create_dir_all(dir.0.join("both")).unwrap();
    std::fs::create_dir_all(dir.0.join("html")).unwrap();
    std::fs::write(dir.0.join("both/default.txt"), "txt\n").unwrap();
    std::fs::write(dir.0.join("both/index.html"), "both html\n").unwrap();
    std::fs::write(dir.0.join("html/index.html"), "html\n").unwrap();
    let server = HttpServer::start(&dir.0, &["--index", "default.txt", "--index", "index.html"]);
    let (code, fields, body) = call(&server.url, "GET", "/both/", "");
    assert_eq!((code, body.as_slice()), (200, b"txt\n".as_slice()));
    assert_eq!(
        field(&fields, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    let (code, fields, body) = call(&server.url, "GET", "/html/", "");
    assert_eq!((code, body.as_slice()), (200, b"html\n".as_slice()));
    assert_eq!(field(&fields, "content-type"), Some("text/html"));
    assert!(server.stop().success());
    refused_saying(&dir.0, &["--index", "../x.html"], "an index is a file name");
}

/// The fields an answer got from `--expires` / `--add-header` (nginx's
/// `expires` / `add_header`): its status, X-A, X-B, the Cache-Control
/// lines, and how far Expires lies after Date, in seconds.
type Added = (
    u16,
    Option<String>,
    Option<String>,
    Vec<String>,
    Option<i64>,
);

fn added(code: u16, fields: &[(String, String)]) -> Added {
    let secs = |name| {
        field(fields, name).map(|v| {
            let t = duality_http::date::parse(v.as_bytes()).expect(name);
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
        })
    };
    let cache_control = fields
        .iter()
        .filter(|(n, _)| n == "cache-control")
        .map(|(_, v)| v.clone())
        .collect();
    (
        code,
        field(fields, "x-a").map(str::to_owned),
        field(fields, "x-b").map(str::to_owned),
        cache_control,
        secs("expires").map(|e| e - secs("date").unwrap()),
    )
}

/// `--expires` and `--add-header[-always]`: on every way an answer is made
/// (from the file system, from memory, sent from a kept file, compressed,
/// a redirect, a 304), and only the `always` field on errors; the same as
/// nginx's with the same directives, where nginx is installed.
#[test]
fn expires_and_added_fields_as_nginx_sends_them() {
    let css = "p { color: red }\n".repeat(100);
    let (_dir, root) = tree(
        "fields",
        &[("dir/", ""), ("a.txt", "a\n"), ("style.css", &css)],
    );
    std::fs::write(root.join("big.bin"), vec![7u8; 300_000]).unwrap();
    let requests: &[(&str, &str, &str)] = &[
        ("GET", "/a.txt", ""),
        ("GET", "/a.txt", ""),
        ("HEAD", "/big.bin", ""),
        ("GET", "/big.bin", "Range: bytes=0-9\r\n"),
        ("GET", "/style.css", "Accept-Encoding: gzip\r\n"),
        ("GET", "/style.css", "Accept-Encoding: gzip\r\n"),
        ("GET", "/dir", ""),
        ("GET", "/nope", ""),
        ("GET", "/../x", ""),
    ];
    let answers = |url: &str| -> Vec<Added> {
        let mut got: Vec<Added> = requests
            .iter()
            .map(|(method, path, extra)| {
                let (code, fields, _) = call(url, method, path, extra);
                added(code, &fields)
            })
            .collect();
        // A 304 for the file's own tag.
        let (_, fields, _) = call(url, "GET", "/a.txt", "");
        let tag = field(&fields, "etag").unwrap().to_owned();
        let (code, fields, _) = call(url, "GET", "/a.txt", &format!("If-None-Match: {tag}\r\n"));
        got.push(added(code, &fields));
        got
    };
    let server = HttpServer::start(
        &root,
        &[
            "--expires",
            "30d",
            "--add-header",
            "X-A: 1",
            "--add-header",
            "Cache-Control: public",
            "--add-header-always",
            "X-B: 2",
            "--gzip",
            "on",
        ],
    );
    let ours = answers(&server.url);
    assert!(server.stop().success());
    let cached = |code| {
        (
            code,
            Some("1".to_owned()),
            Some("2".to_owned()),
            vec!["max-age=2592000".to_owned(), "public".to_owned()],
            Some(2_592_000),
        )
    };
    let error = |code| (code, None, Some("2".to_owned()), vec![], None);
    let want = vec![
        cached(200),
        cached(200),
        cached(200),
        cached(206),
        cached(200),
        cached(200),
        cached(301),
        error(404),
        error(400),
        cached(304),
    ];
    assert_eq!(ours, want);

    match duality_bench::http::find_nginx() {
        Some(nginx) => {
            let n = duality_bench::http::RunningServer::nginx_with(
                &nginx,
                &root,
                1,
                1024,
                "    expires 30d;\n    add_header X-A 1;\n    add_header Cache-Control public;\n    \
                 add_header X-B 2 always;\n    gzip on;\n    gzip_types text/css;\n",
            )
            .unwrap();
            assert_eq!(answers(&format!("http://{}", n.addr)), want);
        }
        None => eprintln!("nginx not installed: the fields are not compared with nginx's"),
    }

    // By type (nginx: a map of $sent_http_content_type): the page's own
    // type, its family, then the default; the server's pages are HTML.
    std::fs::write(root.join("index.html"), "<p>i</p>\n").unwrap();
    std::fs::write(root.join("dir/p.png"), "png").unwrap();
    let by_type = [
        ("/index.html", 200, "no-cache", -1),
        ("/dir/p.png", 200, "max-age=31536000", 31_536_000),
        ("/a.txt", 200, "max-age=315360000", 0),
        ("/dir", 301, "no-cache", -1),
    ];
    let check = |url: &str| {
        for (path, code, cache_control, after) in by_type {
            let (got, fields, _) = call(url, "GET", path, "");
            assert_eq!(got, code, "{path}");
            assert_eq!(
                field(&fields, "cache-control"),
                Some(cache_control),
                "{path}"
            );
            let at = added(got, &fields).4.unwrap();
            if path == "/a.txt" {
                // `max`: a fixed date.
                assert_eq!(
                    field(&fields, "expires"),
                    Some("Thu, 31 Dec 2037 23:55:55 GMT")
                );
            } else {
                assert_eq!(at, after, "{path}");
            }
        }
        let (_, fields, _) = call(url, "GET", "/nope", "");
        assert_eq!(field(&fields, "expires"), None);
    };
    let server = HttpServer::start(
        &root,
        &[
            "--expires",
            "text/html -1",
            "--expires",
            "max",
            "--expires",
            "image/ 1y",
        ],
    );
    check(&server.url);
    assert!(server.stop().success());
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n = duality_bench::http::RunningServer::nginx_with(
            &nginx,
            &root,
            1,
            1024,
            "    types {\n        text/html html;\n        text/plain txt;\n        image/png png;\n    }\n    \
             map $sent_http_content_type $expires {\n        default max;\n        \
             text/html -1;\n        ~image/ 1y;\n    }\n    expires $expires;\n",
        )
        .unwrap();
        check(&format!("http://{}", n.addr));
    }
    refused_saying(
        &root,
        &["--expires", "1d", "--expires", "2d"],
        "given twice",
    );

    // Off by default; a field the server writes itself is refused.
    let server = HttpServer::start(&root, &[]);
    let (_, fields, _) = call(&server.url, "GET", "/a.txt", "");
    assert_eq!(added(200, &fields), (200, None, None, vec![], None));
    assert!(server.stop().success());
    refused_saying(
        &root,
        &["--add-header", "Content-Length: 1"],
        "written by the server itself",
    );
    refused_saying(&root, &["--expires", "1x"], "--expires");
}

/// `--try-files` (nginx's `try_files`): a static site generator's clean
/// addresses (`/about` by `about.html`) and a single-page application's
/// fallback, each address answered as nginx answers it with the same
/// directive (status, redirect and body), also from memory the second
/// time; a last resort that names nothing is said at start.
#[test]
fn try_files_answers_as_nginx_does() {
    let (_dir, root) = tree(
        "try-files",
        &[
            ("index.html", "app\n"),
            ("a.txt", "a\n"),
            ("about.html", "about\n"),
            ("dir/index.html", "dir index\n"),
            ("dir2/", ""),
            ("sub.html", "sub page\n"),
            ("sub/index.html", "sub index\n"),
        ],
    );
    let paths = [
        "/dir",
        "/dir/",
        "/about",
        "/about.html",
        "/a.txt",
        "/nope",
        "/dir2",
        "/dir2/",
        "/sub",
        "/sub/",
        "/about?x=1",
        "/dir/nope",
    ];
    // Status, where a redirect leads (its path) and, for a 200, the body.
    let answers = |url: &str| -> Vec<(u16, Option<String>, String)> {
        paths
            .iter()
            .chain(&["/about", "/sub"])
            .map(|path| {
                let (code, fields, body) = call(url, "GET", path, "");
                // Its path (nginx's is absolute, with the Host sent).
                let location = field(&fields, "location").map(|l| match l.split_once("://") {
                    Some((_, rest)) => rest[rest.find('/').unwrap_or(rest.len())..].to_owned(),
                    None => l.to_owned(),
                });
                let body = match code {
                    200 => String::from_utf8(body).unwrap(),
                    _ => String::new(),
                };
                (code, location, body)
            })
            .collect()
    };
    let ok = |body: &str| (200, None, body.to_owned());
    let moved = |to: &str| (301, Some(to.to_owned()), String::new());
    let error = |code| (code, None, String::new());
    for (directive, want) in [
        (
            "$uri $uri.html $uri/ =404",
            vec![
                moved("/dir/"),
                ok("dir index\n"),
                ok("about\n"),
                ok("about\n"),
                ok("a\n"),
                error(404),
                moved("/dir2/"),
                error(403),
                ok("sub page\n"),
                ok("sub index\n"),
                ok("about\n"),
                error(404),
                ok("about\n"),
                ok("sub page\n"),
            ],
        ),
        (
            "$uri $uri/ /index.html",
            vec![
                moved("/dir/"),
                ok("dir index\n"),
                ok("app\n"),
                ok("about\n"),
                ok("a\n"),
                ok("app\n"),
                moved("/dir2/"),
                error(403),
                moved("/sub/"),
                ok("sub index\n"),
                ok("app\n"),
                ok("app\n"),
                ok("app\n"),
                moved("/sub/"),
            ],
        ),
    ] {
        let server = HttpServer::start(&root, &["--try-files", directive]);
        assert_eq!(answers(&server.url), want, "{directive}");
        assert!(server.stop().success());
        if let Some(nginx) = duality_bench::http::find_nginx() {
            let n = duality_bench::http::RunningServer::nginx_in_server(
                &nginx,
                &root,
                &format!("        try_files {directive};\n"),
            )
            .unwrap();
            assert_eq!(
                answers(&format!("http://{}", n.addr)),
                want,
                "nginx: {directive}"
            );
        }
    }

    // A last resort that names nothing is said at start (nginx answers a
    // redirection cycle with 500; this, 404); entries are checked.
    let server = HttpServer::start(&root, &["--try-files", "$uri /missing.html"]);
    assert_eq!(call(&server.url, "GET", "/nope", "").0, 404);
    assert_eq!(call(&server.url, "GET", "/a.txt", "").0, 200);
    assert!(server.says("--try-files: /missing.html is 404", Duration::from_secs(5)));
    assert!(server.stop().success());
    refused_saying(
        &root,
        &["--try-files", "$uri $args =404"],
        "$uri is the only variable",
    );
}

/// `--dotfiles deny` (nginx's common `location ~ /\. { deny all; }`): a
/// hidden path is 403 however it is written, also once an error page under
/// a hidden directory was served from it; `/.well-known/` is still served;
/// `allow` (the default) serves them, as nginx.
#[test]
fn dotfiles_deny_refuses_hidden_paths() {
    let (_dir, root) = tree(
        "dotfiles",
        &[
            (".env", "SECRET=1\n"),
            (".git/config", "[core]\n"),
            ("app/.htpasswd", "u:x\n"),
            (".well-known/acme-challenge/t", "token\n"),
            (".errors/404.html", "custom 404\n"),
            ("a.txt", "a\n"),
        ],
    );
    let server = HttpServer::start(
        &root,
        &[
            "--dotfiles",
            "deny",
            "--error-page",
            "404 /.errors/404.html",
        ],
    );
    let code = |path: &str| call(&server.url, "GET", path, "").0;
    for path in [
        "/.env",
        "/.git/config",
        "/.git/",
        "/app/.htpasswd",
        "/%2eenv",
        "/app/../.env",
        "/.well-known/../.env",
        "/.well-known/.x",
    ] {
        assert_eq!(code(path), 403, "{path}");
    }
    assert_eq!(code("/.well-known/acme-challenge/t"), 200);
    assert_eq!(code("/a.txt"), 200);
    // The error page is served as one, never by its own address.
    let (got, _, body) = call(&server.url, "GET", "/nope", "");
    assert_eq!((got, body.as_slice()), (404, b"custom 404\n".as_slice()));
    assert_eq!(code("/.errors/404.html"), 403);
    assert!(server.stop().success());

    let server = HttpServer::start(&root, &[]);
    let (got, _, body) = call(&server.url, "GET", "/.env", "");
    assert_eq!((got, body.as_slice()), (200, b"SECRET=1\n".as_slice()));
    assert!(server.stop().success());
    refused_saying(&root, &["--dotfiles", "hide"], "expected allow or deny");
}

/// `--charset utf-8` and `--type` (nginx's `charset utf-8` and `types`):
/// the same Content-Type as nginx's for each kind of file (nginx typed by
/// the same names here).
/// The `Content-Type` each of `files` (names under the root) is served
/// with; each must answer 200.
fn content_types(url: &str, files: &[&str]) -> Vec<String> {
    files
        .iter()
        .map(|f| {
            let (code, fields, _) = call(url, "GET", &format!("/{f}"), "");
            assert_eq!(code, 200, "{f}");
            field(&fields, "content-type").unwrap().to_owned()
        })
        .collect()
}

#[test]
fn charset_and_types_label_files_as_nginx_does() {
    let files = [
        "i.html", "a.txt", "s.css", "d.xml", "f.rss", "p.png", "j.json", "x.LOG", "y.md",
    ];
    let contents: Vec<(&str, &str)> = files.iter().map(|&f| (f, "x")).collect();
    let (dir, root) = tree("charset", &contents);
    let types = |url: &str| content_types(url, &files);
    let server = HttpServer::start(
        &root,
        &[
            "--charset",
            "utf-8",
            "--type",
            "text/plain log",
            "--type",
            "text/x-notes md",
        ],
    );
    let ours = types(&server.url);
    assert!(server.stop().success());
    assert_eq!(
        ours,
        [
            "text/html; charset=utf-8",
            "text/plain; charset=utf-8",
            "text/css",
            "text/xml; charset=utf-8",
            "application/rss+xml; charset=utf-8",
            "image/png",
            "application/json",
            "text/plain; charset=utf-8",
            "text/x-notes",
        ]
    );
    let block = "    types {\n        text/html html;\n        text/plain txt;\n        text/css css;\n        \
                 text/xml xml;\n        application/rss+xml rss;\n        image/png png;\n        \
                 application/json json;\n        text/plain log;\n        text/x-notes md;\n    }\n";
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let conf = format!("{block}    charset utf-8;\n");
        let n =
            duality_bench::http::RunningServer::nginx_with(&nginx, &root, 1, 1024, &conf).unwrap();
        assert_eq!(types(&format!("http://{}", n.addr)), ours);
    }
    // The same block as a file (nginx's `include mime.types`) types alike.
    let file = dir.0.join("mime.types");
    std::fs::write(&file, format!("# ours\n{block}")).unwrap();
    let file = file.to_str().unwrap();
    let server = HttpServer::start(&root, &["--charset", "utf-8", "--types-file", file]);
    assert_eq!(types(&server.url), ours);
    assert!(server.stop().success());
    let bad = dir.0.join("bad.types");
    std::fs::write(&bad, "types { text/plain txt }").unwrap();
    refused_saying(
        &root,
        &["--types-file", bad.to_str().unwrap()],
        "line 1: unexpected",
    );
    // Another charset replaces plain text's UTF-8; off (the default) labels
    // HTML with none.
    let server = HttpServer::start(&root, &["--charset", "koi8-r"]);
    assert_eq!(types(&server.url)[1], "text/plain; charset=koi8-r");
    assert!(server.stop().success());
    let server = HttpServer::start(&root, &[]);
    assert_eq!(
        types(&server.url)[..2],
        ["text/html", "text/plain; charset=utf-8"]
    );
    assert!(server.stop().success());
    refused_saying(&root, &["--charset", "utf 8"], "not a charset name");
    refused_saying(&root, &["--type", "log text/plain"], "not a media type");
    refused_saying(&root, &["--type", "text/plain .log"], "without its dot");
}

/// `--etag nginx`: nginx's entity tags, byte for byte, so a validator one
/// server gave is honoured by the other (304, and a range under If-Range);
/// the default tags carry the inode too, and nginx's do not match them.
#[test]
fn etag_nginx_tags_as_nginx_does() {
    let big = "b".repeat(70_000);
    let (_dir, root) = tree("etag", &[("a.txt", "a\n"), ("big.txt", &big)]);
    let tag = |url: &str, path: &str| {
        let (code, fields, _) = call(url, "GET", path, "");
        assert_eq!(code, 200);
        field(&fields, "etag").unwrap().to_owned()
    };
    let server = HttpServer::start(&root, &["--etag", "nginx"]);
    let ours: Vec<String> = ["/a.txt", "/big.txt"]
        .iter()
        .map(|p| tag(&server.url, p))
        .collect();
    for t in &ours {
        assert_eq!(t.matches('-').count(), 1, "{t}");
    }
    let default = HttpServer::start(&root, &[]);
    assert_ne!(tag(&default.url, "/a.txt"), ours[0]);
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n = duality_bench::http::RunningServer::nginx(&nginx, &root, 1, 1024).unwrap();
        let url = format!("http://{}", n.addr);
        let theirs: Vec<String> = ["/a.txt", "/big.txt"]
            .iter()
            .map(|p| tag(&url, p))
            .collect();
        assert_eq!(ours, theirs);
        // Each honours the other's validator.
        for (asked, given) in [(&server.url, &theirs[1]), (&url, &ours[1])] {
            let inm = format!("If-None-Match: {given}\r\n");
            assert_eq!(call(asked, "GET", "/big.txt", &inm).0, 304);
            let range = format!("If-Range: {given}\r\nRange: bytes=0-9\r\n");
            assert_eq!(call(asked, "GET", "/big.txt", &range).0, 206);
        }
        let inm = format!("If-None-Match: {}\r\n", tag(&default.url, "/a.txt"));
        assert_eq!(call(&url, "GET", "/a.txt", &inm).0, 200);
    }
    assert!(server.stop().success());
    assert!(default.stop().success());
    refused_saying(&root, &["--etag", "weak"], "expected inode, nginx or off");
}

/// `--log-format` and `--log-escape` write the lines nginx's `log_format`
/// writes (`escape=default|json|none`), compared line for line where nginx
/// is installed: the same requests, byte for byte, but for what differs on
/// purpose (error pages' sizes, `$uri` after an internal redirect).
#[test]
fn log_format_writes_what_nginx_writes() {
    let (dir, root) = tree("logfmt", &[("a.txt", "hello\n")]);
    let format = "$remote_addr|$remote_user|$request|$request_method|$request_uri|$uri|\
                  $args|$is_args|$server_protocol|$scheme|$host|$status|$request_length|\
                  $http_referer|$http_user_agent|$http_x_forwarded_for|$arg_q|$arg_Z|\
                  $cookie_sid|$content_type|$content_length|$connection_requests|${status}x|\
                  $upstream_addr|$upstream_http_x|$ssl_protocol|$http2|";
    let requests: [&[u8]; 10] = [
        b"GET /a.txt?q=1&z=%41&Z=x HTTP/1.1\r\nHost: Example.COM:8080\r\n\
          Referer: http://r/\"q\"\\\r\nUser-Agent: ua\t\xc3\xa9\r\nCookie: a=1; sid=abc\r\n\
          X-Forwarded-For: 1.2.3.4\r\nConnection: close\r\n\r\n",
        b"HEAD /a.txt HTTP/1.0\r\n\r\n",
        b"GET /missing HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\n\
          Content-Length: 5\r\nConnection: close\r\n\r\nhello",
        b"GET http://Abs.Example./a.txt?x HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n",
        b"GET /a.txt? HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close\r\n\r\n",
        b"GET /../x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
        b"GET /%C3%A9.txt?arg_q=no&q HTTP/1.1\r\nHost: h\r\nCookie: SID=up\r\n\
          Connection: close\r\n\r\n",
        b"GET /a.txt?q=&Z=1&z=2 HTTP/1.1\r\nHost: h\r\nCookie: x=1;sid=\r\n\
          Connection: close\r\n\r\n",
        b"GET http://h HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
        b"BREW /a.txt HTTP/1.1\r\nHost: h.\r\nConnection: close\r\n\r\n",
    ];
    let send = |url: &str| {
        for r in requests {
            let mut s = TcpStream::connect(url.strip_prefix("http://").unwrap()).unwrap();
            s.write_all(r).unwrap();
            let _ = s.read_to_end(&mut Vec::new());
        }
    };
    let lines = |path: &Path| {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read(path).unwrap_or_default();
            let n = text.iter().filter(|&&b| b == b'\n').count();
            if n >= requests.len() || Instant::now() > until {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let escapes = ["default", "json", "none"];
    let mut ours = Vec::new();
    for escape in escapes {
        let log = dir.0.join(format!("duality-{escape}.log"));
        let log_arg = log.to_str().unwrap();
        let args = [
            "--access-log",
            log_arg,
            "--log-format",
            format,
            "--log-escape",
            escape,
        ];
        let s = HttpServer::start(&root, &args);
        send(&s.url);
        ours.push(lines(&log));
        assert!(s.stop().success());
    }
    let first = |text: &[u8]| {
        let end = text.iter().position(|&b| b == b'\n').unwrap();
        text[..end].to_vec()
    };
    // The first request, as nginx writes it (`$request_length`: its head).
    let len = requests[0].len();
    assert_eq!(
        String::from_utf8(first(&ours[0])).unwrap(),
        format!(
            "127.0.0.1|-|GET /a.txt?q=1&z=%41&Z=x HTTP/1.1|GET|/a.txt?q=1&z=%41&Z=x|/a.txt|\
             q=1&z=%41&Z=x|?|HTTP/1.1|http|example.com|200|{len}|http://r/\\x22q\\x22\\x5C|\
             ua\\x09\\xC3\\xA9|1.2.3.4|1|%41|abc|-|-|1|200x|-|-|-||"
        )
    );
    let mut json = format!(
        "127.0.0.1||GET /a.txt?q=1&z=%41&Z=x HTTP/1.1|GET|/a.txt?q=1&z=%41&Z=x|/a.txt|\
         q=1&z=%41&Z=x|?|HTTP/1.1|http|example.com|200|{len}|http://r/\\\"q\\\"\\\\|ua\\t"
    )
    .into_bytes();
    json.extend_from_slice(b"\xc3\xa9|1.2.3.4|1|%41|abc|||1|200x|||||");
    assert_eq!(first(&ours[1]), json);
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let logs: Vec<_> = escapes
            .iter()
            .map(|e| dir.0.join(format!("nginx-{e}.log")))
            .collect();
        let http: String = escapes
            .iter()
            .map(|e| format!("log_format f{e} escape={e} '{format}';\n"))
            .collect();
        let server: String = escapes
            .iter()
            .zip(&logs)
            .map(|(e, l)| format!("access_log {} f{e};\n", l.display()))
            .collect();
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, &http, &server)
            .unwrap();
        send(&format!("http://{}", n.addr));
        // Line for line, in any order: nginx logs a request once its body
        // is dropped, which may be after the next request's line.
        let sorted = |text: &[u8]| {
            let mut lines: Vec<Vec<u8>> = text.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            lines.sort();
            lines
        };
        for (i, log) in logs.iter().enumerate() {
            let theirs = lines(log);
            assert_eq!(
                String::from_utf8_lossy(&sorted(&ours[i]).join(&b'\n')),
                String::from_utf8_lossy(&sorted(&theirs).join(&b'\n')),
                "escape={}",
                escapes[i]
            );
            assert_eq!(sorted(&ours[i]), sorted(&theirs));
        }
    }
    let refused = |args: &[&str], text: &str| {
        let log = dir.0.join("refused.log");
        let mut all = vec!["--access-log", log.to_str().unwrap()];
        all.extend_from_slice(args);
        refused_saying(&root, &all, text);
    };
    refused(&["--log-format", "$nope"], "unknown \"nope\" variable");
    refused(&["--log-format", "${status"], "closing bracket");
    refused(
        &["--log-format", "$status", "--log-escape", "xml"],
        "unknown log format escaping",
    );
    refused_saying(&root, &["--log-format", "$status"], "--access-log");
}

/// One `GET PATH` from the loopback address `from`: its status and body.
fn get_from(url: &str, from: [u8; 4], path: &str) -> (u16, Vec<u8>) {
    get_from_with(url, from, path, "")
}

/// [`get_from`] with `fields` (whole lines) in the request.
fn get_from_with(url: &str, from: [u8; 4], path: &str, fields: &str) -> (u16, Vec<u8>) {
    use socket2::{Domain, Socket, Type};
    let addr: std::net::SocketAddr = url.strip_prefix("http://").unwrap().parse().unwrap();
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from((from, 0)).into())
        .unwrap();
    s.connect(&addr.into()).unwrap();
    let mut s: TcpStream = s.into();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let code = std::str::from_utf8(&raw[9..12]).unwrap().parse().unwrap();
    (code, raw[end + 4..].to_vec())
}

/// `--allow` and `--deny` (nginx's access module): rules in the order
/// given, the first naming the client deciding, 403 before any lookup
/// (an error page answering it); the same statuses as nginx's for the
/// same rules, from three loopback addresses.
#[test]
fn allow_and_deny_decide_as_nginx_does() {
    let (_dir, root) = tree("acl", &[("a.txt", "a\n"), ("403.html", "no\n")]);
    let clients = [[127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 3]];
    // Rules (verb, whom), and the statuses the three clients get.
    type Case<'a> = (&'a [(&'a str, &'a str)], [u16; 3]);
    let cases: [Case<'_>; 6] = [
        (
            &[
                ("deny", "127.0.0.2"),
                ("allow", "127.0.0.0/8"),
                ("deny", "all"),
            ],
            [200, 403, 200],
        ),
        (
            &[("allow", "127.0.0.0/8"), ("deny", "127.0.0.2")],
            [200, 200, 200],
        ),
        (&[("allow", "127.0.0.1"), ("deny", "all")], [200, 403, 403]),
        (&[("deny", "127.0.0.0/31")], [403, 200, 200]),
        (&[("allow", "unix:"), ("deny", "all")], [403, 403, 403]),
        (&[("deny", "::1"), ("allow", "127.0.0.3")], [200, 200, 200]),
    ];
    let nginx = duality_bench::http::find_nginx();
    for (rules, want) in cases {
        let args: Vec<String> = rules
            .iter()
            .flat_map(|(verb, who)| [format!("--{verb}"), who.to_string()])
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = HttpServer::start(&root, &args);
        let got: Vec<u16> = clients
            .iter()
            .map(|&c| get_from(&server.url, c, "/a.txt").0)
            .collect();
        assert_eq!(got, want, "{rules:?}");
        // Refused before the lookup: a missing file is 403 too.
        if want[1] == 403 {
            assert_eq!(get_from(&server.url, clients[1], "/nope").0, 403);
        }
        assert!(server.stop().success());
        if let Some(nginx) = &nginx {
            let directives: String = rules
                .iter()
                .map(|(verb, who)| format!("{verb} {who};\n"))
                .collect();
            let n = duality_bench::http::RunningServer::nginx_in_server(nginx, &root, &directives)
                .unwrap();
            let url = format!("http://{}", n.addr);
            let theirs: Vec<u16> = clients
                .iter()
                .map(|&c| get_from(&url, c, "/a.txt").0)
                .collect();
            assert_eq!(theirs, want, "nginx, {rules:?}");
        }
    }
    // An error page answers the refusal.
    let args = [
        "--allow",
        "127.0.0.1",
        "--deny",
        "all",
        "--error-page",
        "403 /403.html",
    ];
    let server = HttpServer::start(&root, &args);
    assert_eq!(
        get_from(&server.url, [127, 0, 0, 1], "/a.txt"),
        (200, b"a\n".to_vec())
    );
    assert_eq!(
        get_from(&server.url, [127, 0, 0, 2], "/a.txt"),
        (403, b"no\n".to_vec())
    );
    assert!(server.stop().success());
    // Behind a trusted proxy, the client it names is checked (as nginx's
    // realip runs before its access check); an untrusted one's word is not.
    let args = ["--real-ip-from", "127.0.0.1", "--deny", "10.0.0.0/8"];
    let server = HttpServer::start(&root, &args);
    let named = "X-Real-IP: 10.1.2.3\r\n";
    assert_eq!(call(&server.url, "GET", "/a.txt", named).0, 403);
    assert_eq!(
        call(&server.url, "GET", "/a.txt", "X-Real-IP: 192.0.2.1\r\n").0,
        200
    );
    assert_eq!(call(&server.url, "GET", "/a.txt", "").0, 200);
    assert!(server.stop().success());
    let args = ["--real-ip-from", "127.0.0.2", "--deny", "10.0.0.0/8"];
    let server = HttpServer::start(&root, &args);
    assert_eq!(call(&server.url, "GET", "/a.txt", named).0, 200);
    assert!(server.stop().success());
    refused_saying(&root, &["--allow", "everyone"], "or all");
    refused_saying(&root, &["--deny", "10.0.0.0/33"], "prefix length");
}

/// `--return` (nginx's server-level `return`): every request gets the
/// same redirect (its address expanded), text or status, the same status,
/// `Location` and text as nginx's for the same directive; before
/// `--deny`; a status alone answered with its page, or `--error-page`'s.
#[test]
fn return_answers_every_request_as_nginx_does() {
    let (_dir, root) = tree("return", &[("a.txt", "a\n"), ("maint.html", "later\n")]);
    let answers = [
        "301 https://$host$request_uri",
        "308 http://other.example$uri$is_args$args",
        "302 https://x.example/$arg_next",
        "200 hi $arg_a $http_x_y|$host",
        "503",
        "404",
    ];
    let asks = [
        ("/a%20b/../c.txt?a=1&b=%C3&next=n", "X-Y: z\r\n"),
        ("/a.txt", "X-Y: \r\n"),
        ("/", ""),
    ];
    // The status, the `Location` and the body of a 200.
    let seen = |url: &str| -> Vec<(u16, Option<String>, Vec<u8>)> {
        asks.iter()
            .map(|(path, fields)| {
                let (code, fields, body) = call(url, "GET", path, fields);
                let location = field(&fields, "location").map(str::to_owned);
                (code, location, if code == 200 { body } else { Vec::new() })
            })
            .collect()
    };
    let nginx = duality_bench::http::find_nginx();
    for answer in answers {
        // Denied everybody: the answer goes first all the same.
        let server = HttpServer::start(&root, &["--return", answer, "--deny", "all"]);
        let ours = seen(&server.url);
        assert!(server.stop().success());
        let code: u16 = answer[..3].parse().unwrap();
        assert!(
            ours.iter().all(|(c, _, _)| *c == code),
            "{answer}: {ours:?}"
        );
        if let Some(nginx) = &nginx {
            let (code, text) = answer.split_once(' ').unwrap_or((answer, ""));
            let directive = match text {
                "" => format!("return {code};"),
                t => format!("return {code} \"{t}\";"),
            };
            let n = duality_bench::http::RunningServer::nginx_in_server(nginx, &root, &directive)
                .unwrap();
            let theirs = seen(&format!("http://{}", n.addr));
            assert_eq!(ours, theirs, "{answer}");
        }
    }
    let server = HttpServer::start(&root, &["--return", "301 https://$host$request_uri"]);
    let (_, fields, _) = call(&server.url, "GET", "/p?q", "");
    assert_eq!(field(&fields, "location"), Some("https://t/p?q"));
    let (code, _, body) = call(&server.url, "HEAD", "/", "");
    assert!(code == 301 && body.is_empty());
    assert!(server.stop().success());
    let args = ["--return", "200 ok", "--add-header", "X-A: 1"];
    let server = HttpServer::start(&root, &args);
    let (code, fields, body) = call(&server.url, "GET", "/anything", "");
    assert_eq!((code, body), (200, b"ok".to_vec()));
    assert_eq!(field(&fields, "x-a"), Some("1"));
    assert_eq!(field(&fields, "content-type"), Some("text/plain"));
    assert!(server.stop().success());
    let server = HttpServer::start(&root, &["--return", "200"]);
    let (code, fields, body) = call(&server.url, "GET", "/a.txt", "");
    assert_eq!((code, body.len()), (200, 0));
    assert_eq!(field(&fields, "content-length"), Some("0"));
    assert!(server.stop().success());
    // Maintenance: a status alone, answered with its error page.
    let args = ["--return", "503", "--error-page", "503 /maint.html"];
    let server = HttpServer::start(&root, &args);
    let (code, _, body) = call(&server.url, "GET", "/a.txt", "");
    assert_eq!((code, body), (503, b"later\n".to_vec()));
    assert!(server.stop().success());
    refused_saying(&root, &["--return", "301"], "needs the address");
    refused_saying(&root, &["--return", "204"], "a code of 200, 301");
    refused_saying(
        &root,
        &["--return", "302 $nope"],
        "unknown \"nope\" variable",
    );
}

/// `--return 444` and a limit's `status=444` (nginx's 444): no answer
/// at all, the connection closed, the request logged with 444 and 0 bytes,
/// as nginx does; answers to requests before it on the connection still
/// arrive.
#[test]
fn status_444_closes_without_an_answer_as_nginx_does() {
    let (dir, root) = tree("return-444", &[("a.txt", "a\n")]);
    let format = "$status $body_bytes_sent $request";
    // What a raw exchange gets: the bytes, then whether the server closed.
    let exchange = |url: &str, req: &str| -> (Vec<u8>, bool) {
        let addr = url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut got = Vec::new();
        let closed = match s.read_to_end(&mut got) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        (got, closed)
    };
    let get = "GET /a.txt?x=1 HTTP/1.1\r\nHost: t\r\n\r\n";
    let log = dir.0.join("ours.log");
    let args = [
        "--return",
        "444",
        "--access-log",
        log.to_str().unwrap(),
        "--log-format",
        format,
    ];
    let server = HttpServer::start(&root, &args);
    let ours = exchange(&server.url, get);
    let ours_log = log_lines(&log, 1, 5);
    assert!(server.stop().success());
    assert_eq!(ours, (Vec::new(), true));
    assert_eq!(ours_log, "444 0 GET /a.txt?x=1 HTTP/1.1\n");
    // A body still coming is not waited for (its rest never comes here:
    // read to its end, the exchange would outlast the 3 s read timeout).
    let post = "POST /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n0123456789";
    let server = HttpServer::start(&root, &args);
    let begun = Instant::now();
    assert_eq!(exchange(&server.url, post), (Vec::new(), true));
    assert!(
        begun.elapsed() < Duration::from_secs(2),
        "{:?}",
        begun.elapsed()
    );
    assert!(server.stop().success());
    // A limit refusing with 444: the first request's answer arrives, the
    // second (over the rate) closes the connection.
    let args = ["--limit-req", "1r/m status=444"];
    let server = HttpServer::start(&root, &args);
    let (got, closed) = exchange(&server.url, &get.repeat(3));
    assert!(server.stop().success());
    let text = String::from_utf8_lossy(&got);
    assert!(closed && text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert_eq!(text.matches("HTTP/1.1").count(), 1, "{text}");
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let log = dir.0.join("nginx.log");
        let http = format!("log_format f '{format}';\n");
        let server = format!("access_log {} f;\nreturn 444;\n", log.display());
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, &http, &server)
            .unwrap();
        assert_eq!(exchange(&format!("http://{}", n.addr), get), ours);
        assert_eq!(log_lines(&log, 1, 5), ours_log);
        assert_eq!(
            exchange(&format!("http://{}", n.addr), post),
            (Vec::new(), true)
        );
    }
    refused_saying(&root, &["--return", "444 bye"], "takes no text");
}

/// `n` requests for `/a.txt` at once, each on its own connection: their
/// statuses and how long each took, by status then time.
fn at_once(url: &str, n: usize) -> Vec<(u16, Duration)> {
    let mut got: Vec<(u16, Duration)> = std::thread::scope(|s| {
        let all: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    let t = Instant::now();
                    (call(url, "GET", "/a.txt", "").0, t.elapsed())
                })
            })
            .collect();
        all.into_iter().map(|h| h.join().unwrap()).collect()
    });
    got.sort();
    got
}

/// `--limit-req` (nginx's `limit_req` on `$binary_remote_addr`): six
/// requests at once at 2r/s with a burst of 2 get what nginx's get: one
/// at once, two after 0.5 s and 1 s, three refused at once; with
/// `nodelay` the burst is served at once; `status=429` and an error page
/// change the refusal.
#[test]
fn limit_req_holds_a_client_to_a_rate_as_nginx_does() {
    let (_dir, root) = tree(
        "limitreq",
        &[("a.txt", "a\n"), ("busy.html", "slow down\n")],
    );
    let codes = |got: &[(u16, Duration)]| got.iter().map(|g| g.0).collect::<Vec<_>>();
    let nginx = duality_bench::http::find_nginx();
    let zone = "limit_req_zone $binary_remote_addr zone=one:1m rate=2r/s;";
    for (flag, directive, want) in [
        (
            "2r/s burst=2",
            "limit_req zone=one burst=2;",
            [200, 200, 200, 503, 503, 503],
        ),
        (
            "2r/s burst=3 nodelay",
            "limit_req zone=one burst=3 nodelay;",
            [200, 200, 200, 200, 503, 503],
        ),
    ] {
        let server = HttpServer::start(&root, &["--limit-req", flag]);
        let ours = at_once(&server.url, 6);
        assert_eq!(codes(&ours), want, "{flag}: {ours:?}");
        // The waits: none for a refusal, the rate's for the burst's.
        let served: Vec<Duration> = ours.iter().filter(|g| g.0 == 200).map(|g| g.1).collect();
        let refused_at = ours.iter().filter(|g| g.0 == 503).map(|g| g.1).max();
        assert!(refused_at.unwrap() < Duration::from_millis(400), "{ours:?}");
        if !flag.contains("nodelay") {
            assert!(served[0] < Duration::from_millis(400), "{ours:?}");
            assert!(served[1] >= Duration::from_millis(450), "{ours:?}");
            assert!(served[2] >= Duration::from_millis(950), "{ours:?}");
        }
        assert!(server.stop().success());
        if let Some(nginx) = &nginx {
            let n =
                duality_bench::http::RunningServer::nginx_in_blocks(nginx, &root, zone, directive)
                    .unwrap();
            let theirs = at_once(&format!("http://{}", n.addr), 6);
            assert_eq!(codes(&theirs), want, "nginx, {directive}: {theirs:?}");
        }
    }
    // Two limits: over either's burst a request is refused and charged to
    // neither (the burst the other lets through is still there 1.1 s on).
    let two = |url: &str| {
        let mut got = codes(&at_once(url, 6));
        std::thread::sleep(Duration::from_millis(1100));
        got.push(call(url, "GET", "/a.txt", "").0);
        got
    };
    let args = [
        "--limit-req",
        "2r/s burst=1 nodelay",
        "--limit-req",
        "30r/m burst=3 nodelay status=429",
    ];
    let server = HttpServer::start(&root, &args);
    let ours = two(&server.url);
    assert!(server.stop().success());
    assert_eq!(ours, [200, 200, 503, 503, 503, 503, 200]);
    if let Some(nginx) = &nginx {
        let zones = "limit_req_zone $binary_remote_addr zone=one:1m rate=2r/s;\n\
                     limit_req_zone $binary_remote_addr zone=two:1m rate=30r/m;";
        let directives = "limit_req zone=one burst=1 nodelay;\n\
                          limit_req zone=two burst=3 nodelay;";
        let n =
            duality_bench::http::RunningServer::nginx_in_blocks(nginx, &root, zones, directives)
                .unwrap();
        assert_eq!(two(&format!("http://{}", n.addr)), ours, "nginx");
    }
    // Under every model the wait is the connection's own (no event loop
    // runs timers under thread-per-conn: its thread sleeps).
    for model in ["thread-per-conn", "amped:1"] {
        let server = HttpServer::start(&root, &["--limit-req", "2r/s burst=1", "--model", model]);
        let ours = at_once(&server.url, 3);
        assert_eq!(codes(&ours), [200, 200, 503], "{model}: {ours:?}");
        assert!(ours[1].1 >= Duration::from_millis(450), "{model}: {ours:?}");
        assert!(server.stop().success());
    }
    let args = [
        "--limit-req",
        "1r/m status=429",
        "--error-page",
        "429 /busy.html",
    ];
    let server = HttpServer::start(&root, &args);
    assert_eq!(call(&server.url, "GET", "/a.txt", "").0, 200);
    let (code, _, body) = call(&server.url, "GET", "/a.txt", "");
    assert_eq!((code, body), (429, b"slow down\n".to_vec()));
    assert!(server.stop().success());
    refused_saying(&root, &["--limit-req", "10r/h"], "invalid rate");
    refused_saying(
        &root,
        &["--limit-req", "1r/s burst=x"],
        "invalid \"burst=x\"",
    );
}

/// `--auth-basic` with `--auth-basic-user-file` (nginx's `auth_basic`):
/// the hashes `htpasswd` and `openssl passwd` write let their users in,
/// anybody else gets 401 with the challenge, as from nginx given the same
/// file; a user added to the file signs in without a restart; an error
/// page may answer the 401.
#[test]
fn auth_basic_lets_the_files_users_in_as_nginx_does() {
    let (dir, root) = tree("authbasic", &[("a.txt", "a\n"), ("who.html", "sign in\n")]);
    let users = dir.0.join("users");
    // `openssl passwd -apr1 / -6 / -5` of "secret pw", and bcrypt's
    // classic test vector for "password".
    std::fs::write(
        &users,
        "# staging\n\
         alice:$apr1$Xy3Rq1Zb$2snucGM5UkflqMeUszZPW.\n\
         bob:$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe\n\
         carol:$6$s$A2PH7ab.tKZK/Fyvln.049elbUP6lL3iAaPIhNoElbR7bgR8e3zuCERxkPSdf20LElxhApYEpwVdAPO30r0vn/:a comment\n\
         dan:$5$sixteencharsalt1$Ogcs/4AqtFlz6jqxsk8Pi8xdeTOmFrIDjGIbjkgCyd3\n\
         erin:{SHA}rS7uKHTXnyVCt9RR2Lh+fJ2k/DM=\n",
    )
    .unwrap();
    let basic = |creds: &str| {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(creds);
        format!("Authorization: Basic {token}\r\n")
    };
    let asks: Vec<String> = [
        "alice:secret pw",
        "alice:secret pW",
        "bob:password",
        "carol:secret pw",
        "dan:secret pw",
        "erin:secret pw",
        "mallory:secret pw",
        "alice",
    ]
    .iter()
    .map(|c| basic(c))
    .chain([
        String::new(),
        "Authorization: Bearer abc\r\n".to_owned(),
        "Authorization: Basic !!!\r\n".to_owned(),
        format!("Authorization: bAsIc {}", &basic("bob:password")[21..]),
    ])
    .collect();
    let want = [200, 401, 200, 200, 200, 200, 401, 401, 401, 401, 401, 200];
    let seen = |url: &str| -> Vec<(u16, Option<String>)> {
        asks.iter()
            .map(|a| {
                let (code, fields, _) = call(url, "GET", "/a.txt", a);
                (code, field(&fields, "www-authenticate").map(str::to_owned))
            })
            .collect()
    };
    let file = users.to_str().unwrap();
    let server = HttpServer::start(
        &root,
        &["--auth-basic", "Staging", "--auth-basic-user-file", file],
    );
    let ours = seen(&server.url);
    let codes: Vec<u16> = ours.iter().map(|o| o.0).collect();
    assert_eq!(codes, want);
    for (code, challenge) in &ours {
        let expected = (*code == 401).then(|| "Basic realm=\"Staging\"".to_owned());
        assert_eq!(challenge, &expected);
    }
    // A user added to the file signs in (the file is looked at again a
    // second after the last look at most).
    std::fs::write(
        &users,
        format!(
            "{}frank:{{PLAIN}}open\n",
            std::fs::read_to_string(&users).unwrap()
        ),
    )
    .unwrap();
    let frank = basic("frank:open");
    let until = Instant::now() + Duration::from_secs(5);
    while call(&server.url, "GET", "/a.txt", &frank).0 != 200 {
        assert!(Instant::now() < until, "the new user never got in");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        call(&server.url, "GET", "/a.txt", &basic("alice:secret pw")).0,
        200
    );
    // One taken out is out within seconds, remembered or not; a file
    // that is gone lets nobody in.
    let all = std::fs::read_to_string(&users).unwrap();
    let kept: String = all
        .lines()
        .filter(|l| !l.starts_with("alice:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&users, &kept).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while call(&server.url, "GET", "/a.txt", &basic("alice:secret pw")).0 != 401 {
        assert!(Instant::now() < until, "a removed user kept getting in");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(call(&server.url, "GET", "/a.txt", &frank).0, 200);
    std::fs::remove_file(&users).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while call(&server.url, "GET", "/a.txt", &frank).0 != 401 {
        assert!(
            Instant::now() < until,
            "a removed file kept letting users in"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::fs::write(&users, &all).unwrap();
    assert!(server.stop().success());
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let directives = format!("auth_basic \"Staging\";\nauth_basic_user_file {file};\n");
        let n = duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, &directives)
            .unwrap();
        assert_eq!(seen(&format!("http://{}", n.addr)), ours);
    }
    let args = [
        "--auth-basic",
        "x",
        "--auth-basic-user-file",
        file,
        "--error-page",
        "401 /who.html",
    ];
    let server = HttpServer::start(&root, &args);
    let (code, fields, body) = call(&server.url, "GET", "/a.txt", "");
    assert_eq!((code, body), (401, b"sign in\n".to_vec()));
    assert_eq!(
        field(&fields, "www-authenticate"),
        Some("Basic realm=\"x\"")
    );
    assert!(server.stop().success());
    let missing = dir.0.join("nobody");
    refused_saying(
        &root,
        &[
            "--auth-basic",
            "x",
            "--auth-basic-user-file",
            missing.to_str().unwrap(),
        ],
        "nobody",
    );
    refused_saying(&root, &["--auth-basic", "x"], "--auth-basic-user-file");
}

/// `--limit-rate` (nginx's `limit_rate`, with `limit_rate_after`): a 2 MB
/// file at 1 MiB a second takes about 0.9 s after the first second's worth,
/// as from nginx (1.0 s here, its timer's steps); the bytes before
/// `--limit-rate-after` go at once; under every model.
#[test]
fn limit_rate_paces_a_body_as_nginx_does() {
    let (dir, root) = tree("limitrate", &[("small.txt", "s\n")]);
    let big: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let fetch = |url: &str| {
        let t = Instant::now();
        let (code, _, body) = call(url, "GET", "/big.bin", "");
        assert_eq!(code, 200);
        assert!(body == big, "the body as on disk");
        t.elapsed()
    };
    let paced = Duration::from_millis(700)..Duration::from_millis(2500);
    for args in [
        &["--limit-rate", "1m"][..],
        &["--limit-rate", "1m", "--model", "thread-per-conn"],
        &["--limit-rate", "1024k", "--io", "epoll"],
    ] {
        let server = HttpServer::start(&root, args);
        let took = fetch(&server.url);
        assert!(paced.contains(&took), "{args:?}: {took:?}");
        assert!(server.stop().success());
    }
    // A small body answered from memory is not paced: at a byte a second,
    // a paced 2-byte file would take a second.
    let server = HttpServer::start(&root, &["--limit-rate", "1"]);
    let t = Instant::now();
    assert_eq!(call(&server.url, "GET", "/small.txt", "").2, b"s\n");
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    assert!(server.stop().success());
    let server = HttpServer::start(&root, &["--limit-rate", "1m", "--limit-rate-after", "1m"]);
    assert!(fetch(&server.url) < Duration::from_millis(600));
    assert!(server.stop().success());
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n =
            duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, "limit_rate 1m;")
                .unwrap();
        let took = fetch(&format!("http://{}", n.addr));
        assert!(paced.contains(&took), "nginx: {took:?}");
    }
    refused_saying(&root, &["--limit-rate", "fast"], "a size");
    refused_saying(&root, &["--limit-rate-after", "1m"], "--limit-rate");
    drop(dir);
}

/// `--etag off`, `--if-modified-since` and `--max-ranges` answer
/// conditional and range requests as nginx's `etag off`,
/// `if_modified_since` and `max_ranges` do, compared where nginx is
/// installed: the status and which validators and range fields come back.
#[test]
fn validators_and_ranges_as_nginx_sets_them() {
    let (_dir, root) = tree("validators", &[("a.txt", "0123456789\n")]);
    // 2024-01-01 00:00:00 UTC.
    let file = std::fs::File::options()
        .write(true)
        .open(root.join("a.txt"))
        .unwrap();
    file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_704_067_200))
        .unwrap();
    drop(file);
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let later = "Mon, 01 Jan 2024 01:00:00 GMT";
    let earlier = "Sun, 31 Dec 2023 23:00:00 GMT";
    let asks = [
        String::new(),
        "If-None-Match: *\r\n".to_owned(),
        "If-None-Match: \"x\"\r\n".to_owned(),
        "If-None-Match: \"\"\r\n".to_owned(),
        "If-Match: \"x\"\r\n".to_owned(),
        "If-Match: *\r\n".to_owned(),
        format!("If-Modified-Since: {lm}\r\n"),
        format!("If-Modified-Since: {later}\r\n"),
        format!("If-Modified-Since: {earlier}\r\n"),
        "Range: bytes=0-1\r\n".to_owned(),
        "Range: bytes=0-1,4-5\r\n".to_owned(),
        "Range: bytes=0-1,4-5,8-9\r\n".to_owned(),
        "Range: bytes=0-1\r\nIf-Range: \"x\"\r\n".to_owned(),
        format!("Range: bytes=0-1\r\nIf-Range: {lm}\r\n"),
    ];
    // The status, whether ETag and Accept-Ranges came (but on a 206: nginx
    // names only the unit it would take, we name it on every file answer),
    // and Content-Range.
    type Seen = Vec<(u16, bool, bool, Option<String>)>;
    let seen = |url: &str| -> Seen {
        asks.iter()
            .map(|fields| {
                let (code, fields, _) = call(url, "GET", "/a.txt", fields);
                (
                    code,
                    field(&fields, "etag").is_some(),
                    code != 206 && field(&fields, "accept-ranges").is_some(),
                    field(&fields, "content-range").map(str::to_owned),
                )
            })
            .collect()
    };
    let settings: [(&[&str], &str); 4] = [
        (
            &[
                "--etag",
                "off",
                "--if-modified-since",
                "before",
                "--max-ranges",
                "2",
            ],
            "etag off; if_modified_since before; max_ranges 2;",
        ),
        (
            &["--if-modified-since", "off", "--max-ranges", "0"],
            "if_modified_since off; max_ranges 0;",
        ),
        (&["--etag", "nginx", "--max-ranges", "1"], "max_ranges 1;"),
        (&[], ""),
    ];
    let nginx = duality_bench::http::find_nginx();
    let mut all = Vec::new();
    for (args, directives) in settings {
        let server = HttpServer::start(&root, args);
        let ours = seen(&server.url);
        assert!(server.stop().success());
        if let Some(nginx) = &nginx {
            let n = duality_bench::http::RunningServer::nginx_in_server(nginx, &root, directives)
                .unwrap();
            let theirs = seen(&format!("http://{}", n.addr));
            for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
                assert_eq!(o, t, "{args:?}, {:?}", asks[i]);
            }
        }
        all.push(ours);
    }
    // What each setting changes, nginx or not.
    let codes = |s: &Seen| s.iter().map(|a| a.0).collect::<Vec<_>>();
    let (off, dates_off, one, default) = (&all[0], &all[1], &all[2], &all[3]);
    assert!(off.iter().all(|a| !a.1) && default.iter().any(|a| a.1));
    assert_eq!(
        codes(off),
        [200, 304, 200, 200, 412, 200, 304, 304, 200, 206, 206, 200, 200, 206]
    );
    assert_eq!(
        codes(default),
        [200, 304, 200, 200, 412, 200, 304, 200, 200, 206, 206, 206, 200, 206]
    );
    assert_eq!(&codes(dates_off)[6..9], [200, 200, 200]);
    assert!(codes(dates_off)[9..].iter().all(|&c| c == 200));
    assert!(dates_off.iter().all(|a| !a.2));
    assert_eq!(&codes(one)[9..12], [206, 200, 200]);
    refused_saying(
        &root,
        &["--if-modified-since", "after"],
        "expected off, exact or before",
    );
    refused_saying(&root, &["--etag", "weak"], "expected inode, nginx or off");
}

/// `--default-type` types files no table knows, or without an extension,
/// as nginx's `default_type` does (with `charset`), compared where nginx is
/// installed; extensions a table names keep their type.
#[test]
fn default_type_types_unknown_files_as_nginx_does() {
    let files = ["README", "x.log", "a.bin", "i.html", "t.txt"];
    let contents: Vec<(&str, &str)> = files.iter().map(|&f| (f, "x")).collect();
    let (_dir, root) = tree("default-type", &contents);
    let types = |url: &str| content_types(url, &files);
    let args = ["--default-type", "text/plain", "--charset", "utf-8"];
    let server = HttpServer::start(&root, &args);
    let ours = types(&server.url);
    assert!(server.stop().success());
    assert_eq!(
        ours,
        [
            "text/plain; charset=utf-8",
            "text/plain; charset=utf-8",
            "application/octet-stream",
            "text/html; charset=utf-8",
            "text/plain; charset=utf-8",
        ]
    );
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let directives = "types { text/html html; text/plain txt; \
                          application/octet-stream bin; }\n\
                          default_type text/plain;\ncharset utf-8;\n";
        let n =
            duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, directives).unwrap();
        assert_eq!(types(&format!("http://{}", n.addr)), ours);
    }
    let server = HttpServer::start(&root, &[]);
    assert_eq!(types(&server.url)[..3], ["application/octet-stream"; 3]);
    assert!(server.stop().success());
    refused_saying(&root, &["--default-type", "text"], "not a media type");
}

/// `--gzip-types` chooses the types compressed as nginx's `gzip_types`
/// does (`text/html` always, `*` every type), compared where nginx is
/// installed: which files come back with `Content-Encoding: gzip`.
#[test]
fn gzip_types_choose_what_is_compressed_as_nginx_does() {
    let text = "duality gzip_types ".repeat(60);
    let files = ["i.html", "s.css", "t.txt", "d.cus", "p.png"];
    let contents: Vec<(&str, &str)> = files.iter().map(|&f| (f, text.as_str())).collect();
    let (_dir, root) = tree("gzip-types", &contents);
    let encoded = |url: &str| -> Vec<bool> {
        files
            .iter()
            .map(|f| {
                let (code, fields, _) =
                    call(url, "GET", &format!("/{f}"), "Accept-Encoding: gzip\r\n");
                assert_eq!(code, 200, "{f}");
                field(&fields, "content-encoding") == Some("gzip")
            })
            .collect()
    };
    let nginx = duality_bench::http::find_nginx();
    let types = "types { text/html html; text/css css; text/plain txt; \
                 application/x-custom cus; image/png png; }\n";
    for (list, want) in [
        (
            "text/css application/x-custom",
            [true, true, false, true, false],
        ),
        ("*", [true; 5]),
        ("text/plain", [true, false, true, false, false]),
    ] {
        let args = [
            "--gzip",
            "on",
            "--gzip-min-length",
            "1",
            "--type",
            "application/x-custom cus",
            "--gzip-types",
            list,
        ];
        let server = HttpServer::start(&root, &args);
        let ours = encoded(&server.url);
        assert!(server.stop().success());
        assert_eq!(ours, want, "{list}");
        if let Some(nginx) = &nginx {
            let directives = format!("{types}gzip on;\ngzip_min_length 1;\ngzip_types {list};\n");
            let n = duality_bench::http::RunningServer::nginx_in_server(nginx, &root, &directives)
                .unwrap();
            assert_eq!(encoded(&format!("http://{}", n.addr)), ours, "{list}");
        }
    }
    // Without the flag, the built-in list: plain text too, never PNG.
    let server = HttpServer::start(&root, &["--gzip", "on", "--gzip-min-length", "1"]);
    assert_eq!(encoded(&server.url), [true, true, true, false, false]);
    assert!(server.stop().success());
    refused_saying(&root, &["--gzip-types", "css"], "not a media type");
}

/// A `GET PATH` from 127.0.0.1 that the client never reads: with a small
/// receive buffer, a large answer stays in progress until it is dropped.
fn stalled_download(url: &str, path: &str) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let addr: std::net::SocketAddr = url.strip_prefix("http://").unwrap().parse().unwrap();
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&addr.into()).unwrap();
    let mut s: TcpStream = s.into();
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    s
}

/// One keep-alive `GET PATH` on `s`, its answer read whole: the status.
fn get_kept(s: &mut TcpStream, path: &str) -> u16 {
    get_kept_head(s, path)[9..12].parse().unwrap()
}

/// [`get_kept`]'s answer's head, lower-cased.
fn get_kept_head(s: &mut TcpStream, path: &str) -> String {
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "the head ended early");
        raw.push(byte[0]);
    }
    let head = String::from_utf8(raw).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    head.to_ascii_lowercase()
}

/// `--keepalive-time` (nginx's `keepalive_time`): a request begun after a
/// connection's time is answered with `Connection: close`, and the
/// connection closes, as nginx's; before it, the connection is kept.
#[test]
fn keepalive_time_renews_a_busy_connection_as_nginx_does() {
    let (_dir, root) = tree("keepalive-time", &[("a.txt", "a\n")]);
    let run = |url: &str| -> Vec<String> {
        let mut s = TcpStream::connect(url.strip_prefix("http://").unwrap()).unwrap();
        let connection = |head: String| {
            head.lines()
                .find_map(|l| l.strip_prefix("connection: ").map(str::to_owned))
                .unwrap_or_default()
        };
        let mut seen = vec![connection(get_kept_head(&mut s, "/a.txt"))];
        seen.push(connection(get_kept_head(&mut s, "/a.txt")));
        std::thread::sleep(Duration::from_millis(1300));
        seen.push(connection(get_kept_head(&mut s, "/a.txt")));
        // Closed after that answer.
        let mut rest = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
        seen
    };
    let want = ["keep-alive", "keep-alive", "close"];
    let server = HttpServer::start(&root, &["--keepalive-time", "1"]);
    assert_eq!(run(&server.url), want);
    assert!(server.stop().success());
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n = duality_bench::http::RunningServer::nginx_in_server(
            &nginx,
            &root,
            "keepalive_time 1s;\n",
        )
        .unwrap();
        assert_eq!(run(&format!("http://{}", n.addr)), want, "nginx");
    }
    refused_saying(
        &root,
        &["--keepalive-time", "0"],
        "must be a positive number",
    );
}

/// `--add-header` values naming variables are filled in per answer, as
/// nginx's `add_header` fills them (a value that comes out empty adds no
/// field), compared with nginx; `$request_id` is the same in the field and
/// the access log's line.
#[test]
fn added_fields_fill_variables_as_nginx_does() {
    let (dir, root) = tree("add-header-vars", &[("a.txt", "a\n")]);
    let asks = ["/a.txt?a=1&b=x%20y", "/a.txt", "/nope?a=2"];
    // (status, x-q, x-s, x-e) of each answer.
    type Seen = Vec<(u16, Option<String>, Option<String>, Option<String>)>;
    let seen = |url: &str| -> Seen {
        asks.iter()
            .map(|path| {
                let (code, fields, _) = call(url, "GET", path, "");
                let f = |n: &str| field(&fields, n).map(str::to_owned);
                (code, f("x-q"), f("x-s"), f("x-e"))
            })
            .collect()
    };
    let args = [
        "--add-header",
        "X-Q: a=$arg_a b=${arg_b}; host $host",
        "--add-header-always",
        "X-S: $status",
        "--add-header",
        "X-E: $arg_none",
    ];
    let server = HttpServer::start(&root, &args);
    let ours = seen(&server.url);
    assert!(server.stop().success());
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        ours,
        [
            (200, some("a=1 b=x%20y; host t"), some("200"), None),
            (200, some("a= b=; host t"), some("200"), None),
            (404, None, some("404"), None),
        ]
    );
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let directives = "add_header X-Q \"a=$arg_a b=${arg_b}; host $host\";\n\
                          add_header X-S $status always;\nadd_header X-E $arg_none;\n";
        let n =
            duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, directives).unwrap();
        assert_eq!(seen(&format!("http://{}", n.addr)), ours, "nginx");
    }
    // One `$request_id` per request, in the field and in the log.
    let log = dir.0.join("access.log");
    let args = [
        "--add-header",
        "X-Request-Id: $request_id",
        "--access-log",
        log.to_str().unwrap(),
        "--log-format",
        "$request_id $status",
    ];
    let server = HttpServer::start(&root, &args);
    let ids: Vec<String> = (0..2)
        .map(|_| {
            let (_, fields, _) = call(&server.url, "GET", "/a.txt", "");
            field(&fields, "x-request-id").unwrap().to_owned()
        })
        .collect();
    assert!(server.stop().success());
    assert_ne!(ids[0], ids[1]);
    assert!(ids
        .iter()
        .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    let lines = std::fs::read_to_string(&log).unwrap();
    let logged: Vec<&str> = lines
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(logged, ids);
    refused_saying(
        &root,
        &["--add-header", "X-Id: $nope"],
        "unknown \"nope\" variable",
    );
}

/// `--limit-conn` (nginx's `limit_conn` on `$binary_remote_addr`): a
/// download in progress holds its address's place, another address or a
/// connection whose answers are all written does not, and a connection
/// that goes away gives its place back; the same statuses as nginx's.
#[test]
fn limit_conn_counts_requests_in_progress_as_nginx_does() {
    let (dir, root) = tree("limitconn", &[("a.txt", "a\n"), ("busy.html", "busy\n")]);
    std::fs::write(root.join("big.bin"), vec![b'x'; 16 << 20]).unwrap();
    let run = |url: &str| -> Vec<u16> {
        let mut seen = Vec::new();
        // An answered keep-alive connection, waiting: it holds no place.
        let mut idle = TcpStream::connect(url.strip_prefix("http://").unwrap()).unwrap();
        seen.push(get_kept(&mut idle, "/a.txt"));
        let stuck = stalled_download(url, "/big.bin");
        std::thread::sleep(Duration::from_millis(300));
        seen.push(get_from(url, [127, 0, 0, 1], "/a.txt").0);
        seen.push(get_kept(&mut idle, "/a.txt"));
        seen.push(get_from(url, [127, 0, 0, 2], "/a.txt").0);
        drop(stuck);
        let gone = Instant::now();
        let code = loop {
            match get_from(url, [127, 0, 0, 1], "/a.txt").0 {
                503 if gone.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                code => break code,
            }
        };
        seen.push(code);
        seen.push(get_kept(&mut idle, "/a.txt"));
        // A download read whole: its place is given back at its end.
        seen.push(get_kept(&mut idle, "/big.bin"));
        seen.push(get_from(url, [127, 0, 0, 1], "/a.txt").0);
        seen
    };
    let want = [200, 503, 503, 200, 200, 200, 200, 200];
    for model in ["symped:2", "thread-per-conn", "amped:1"] {
        let server = HttpServer::start(&root, &["--limit-conn", "1", "--model", model]);
        assert_eq!(run(&server.url), want, "{model}");
        assert!(server.stop().success());
    }
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n = duality_bench::http::RunningServer::nginx_in_blocks(
            &nginx,
            &root,
            "limit_conn_zone $binary_remote_addr zone=c:1m;\n",
            "limit_conn c 1;\n",
        )
        .unwrap();
        assert_eq!(run(&format!("http://{}", n.addr)), want, "nginx");
    }
    // Two places; a refusal may be a 429 with its page.
    let args = [
        "--limit-conn",
        "2 status=429",
        "--error-page",
        "429 /busy.html",
    ];
    let server = HttpServer::start(&root, &args);
    let one = stalled_download(&server.url, "/big.bin");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(call(&server.url, "GET", "/a.txt", "").0, 200);
    let two = stalled_download(&server.url, "/big.bin");
    std::thread::sleep(Duration::from_millis(300));
    let (code, _, body) = call(&server.url, "GET", "/a.txt", "");
    assert_eq!((code, body), (429, b"busy\n".to_vec()));
    drop((one, two));
    assert!(server.stop().success());
    refused_saying(
        &root,
        &["--limit-conn", "0"],
        "invalid number of connections",
    );
    drop(dir);
}

/// `--autoindex-format json|jsonp|xml`, `--autoindex-exact-size off` and
/// `--autoindex-localtime on` write what nginx's `autoindex_format`,
/// `autoindex_exact_size` and `autoindex_localtime` write, byte for byte
/// where nginx is installed (with `charset utf-8`, as duality labels its
/// pages); a JSONP callback nginx refuses is refused too.
#[test]
fn autoindex_formats_as_nginx_writes_them() {
    let big = "b".repeat(20_000);
    let files = [
        ("files/a.txt", "hello"),
        ("files/big.bin", big.as_str()),
        ("files/say \"hi\" <&>.txt", "x"),
        ("files/sub/", ""),
    ];
    let (_dir, root) = tree("autoindex-formats", &files);
    // Status, Content-Type and body of each request.
    let seen = |url: &str, asks: &[&str]| -> Vec<(u16, String, Vec<u8>)> {
        asks.iter()
            .map(|path| {
                let (code, fields, body) = call(url, "GET", path, "");
                let body = match field(&fields, "transfer-encoding") {
                    Some("chunked") => dechunk(&body),
                    _ => body,
                };
                let ty = field(&fields, "content-type").unwrap_or("").to_owned();
                (code, ty, if code == 200 { body } else { Vec::new() })
            })
            .collect()
    };
    let nginx = duality_bench::http::find_nginx();
    let cases: [(&[&str], &str, &[&str]); 4] = [
        (
            &["--autoindex-format", "json"],
            "autoindex_format json;",
            &["/files/"],
        ),
        (
            &["--autoindex-format", "jsonp"],
            "autoindex_format jsonp;",
            &[
                "/files/?callback=show.list_2",
                "/files/",
                "/files/?callback=alert(1)",
            ],
        ),
        (
            &["--autoindex-format", "xml"],
            "autoindex_format xml;",
            &["/files/"],
        ),
        (
            &[
                "--autoindex-exact-size",
                "off",
                "--autoindex-localtime",
                "on",
            ],
            "autoindex_exact_size off; autoindex_localtime on;",
            &["/files/"],
        ),
    ];
    for (args, directives, asks) in cases {
        let server = HttpServer::start(&root, &[&["--autoindex", "on"], args].concat());
        let ours = seen(&server.url, asks);
        assert!(server.stop().success());
        assert!(ours.iter().any(|a| a.0 == 200), "{args:?}: {ours:?}");
        if let Some(nginx) = &nginx {
            let conf = format!("    autoindex on;\n    charset utf-8;\n    {directives}\n");
            let n = duality_bench::http::RunningServer::nginx_with(nginx, &root, 1, 1024, &conf)
                .unwrap();
            let theirs = seen(&format!("http://{}", n.addr), asks);
            for ((o, t), ask) in ours.iter().zip(&theirs).zip(asks) {
                assert_eq!(
                    (o.0, &o.1, String::from_utf8_lossy(&o.2)),
                    (t.0, &t.1, String::from_utf8_lossy(&t.2)),
                    "{args:?} {ask}"
                );
            }
        }
    }
    // What nginx cannot be shown here: a time zone east of UTC moves the
    // listed times (a POSIX TZ, no zone files needed), and sizes are
    // rounded.
    let listed = |env: &[(&str, &str)]| {
        let args = [
            "--autoindex",
            "on",
            "--autoindex-localtime",
            "on",
            "--autoindex-exact-size",
            "off",
        ];
        let server = HttpServer::start_with_env(&root, &args, env);
        let page = String::from_utf8(call(&server.url, "GET", "/files/", "").2).unwrap();
        assert!(server.stop().success());
        let line = page
            .lines()
            .find(|l| l.contains("big.bin</a>"))
            .unwrap()
            .to_owned();
        assert!(line.ends_with("    20K"), "{line}");
        line
    };
    let utc = listed(&[("TZ", "UTC0")]);
    let east = listed(&[("TZ", "ABC-3")]);
    let hour = |line: &str| -> u32 {
        let at = line.find(':').unwrap();
        line[at - 2..at].parse().unwrap()
    };
    assert_eq!((hour(&utc) + 3) % 24, hour(&east), "{utc}\n{east}");
    refused_saying(
        &root,
        &["--autoindex", "on", "--autoindex-format", "yaml"],
        "expected html, json, jsonp or xml",
    );
}

/// `--satisfy any` (nginx's `satisfy any`): an allowed address or a valid
/// password lets a request in, a refused address is asked for the
/// password; `all` (the default) needs both. The statuses nginx gives for
/// the same rules, users and clients.
#[test]
fn satisfy_any_lets_an_address_or_a_password_in_as_nginx_does() {
    let (dir, root) = tree("satisfy", &[("a.txt", "a\n")]);
    let users = dir.0.join("users");
    // `openssl passwd -apr1` of "secret pw".
    std::fs::write(&users, "alice:$apr1$Xy3Rq1Zb$2snucGM5UkflqMeUszZPW.\n").unwrap();
    let basic = |creds: &str| {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(creds);
        format!("Authorization: Basic {token}\r\n")
    };
    let (good, bad) = (basic("alice:secret pw"), basic("alice:nope"));
    let asks: [([u8; 4], &str); 5] = [
        ([127, 0, 0, 1], ""),
        ([127, 0, 0, 1], &good),
        ([127, 0, 0, 2], ""),
        ([127, 0, 0, 2], &good),
        ([127, 0, 0, 2], &bad),
    ];
    let seen = |url: &str| -> Vec<u16> {
        asks.iter()
            .map(|(from, fields)| get_from_with(url, *from, "/a.txt", fields).0)
            .collect()
    };
    let nginx = duality_bench::http::find_nginx();
    for (satisfy, want) in [
        ("any", [401, 200, 200, 200, 200]),
        ("all", [403, 403, 401, 200, 401]),
    ] {
        let args = [
            "--allow",
            "127.0.0.2",
            "--deny",
            "all",
            "--auth-basic",
            "staging",
            "--auth-basic-user-file",
            users.to_str().unwrap(),
            "--satisfy",
            satisfy,
        ];
        let server = HttpServer::start(&root, &args);
        assert_eq!(seen(&server.url), want, "{satisfy}");
        assert!(server.stop().success());
        if let Some(nginx) = &nginx {
            let directives = format!(
                "satisfy {satisfy};\nallow 127.0.0.2;\ndeny all;\nauth_basic staging;\n\
                 auth_basic_user_file {};\n",
                users.display()
            );
            let n = duality_bench::http::RunningServer::nginx_in_server(nginx, &root, &directives)
                .unwrap();
            assert_eq!(
                seen(&format!("http://{}", n.addr)),
                want,
                "nginx, {satisfy}"
            );
        }
    }
    refused_saying(&root, &["--satisfy", "some"], "invalid value");
}

/// `--proxy-protocol on` (nginx's `listen … proxy_protocol`): the PROXY
/// header's addresses, version 1 or 2, in the log's `$proxy_protocol_*`,
/// and with `--real-ip-header proxy_protocol` as the client's; a
/// connection without a header is closed unanswered. The lines nginx
/// writes for the same bytes.
#[test]
fn proxy_protocol_names_the_client_as_nginx_reads_it() {
    let (dir, root) = tree("proxy-protocol", &[("a.txt", "a\n")]);
    let get = b"GET /a.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let v2 = |command: u8, family: u8, body: &[u8]| {
        let mut h = duality_http::proxy_protocol::V2_SIGNATURE.to_vec();
        h.extend_from_slice(&[0x20 | command, family]);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h.extend_from_slice(get);
        h
    };
    let with = |line: &str| [line.as_bytes(), get].concat();
    // An IPv4 body with a TLV after the addresses (skipped).
    let inet = [
        203, 0, 113, 7, 198, 51, 100, 2, 0x1f, 0x90, 0x01, 0xbb, 0x04, 0x00, 0x01, 0x41,
    ];
    let sends: Vec<Vec<u8>> = vec![
        with("PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\n"),
        with("PROXY TCP6 2001:db8::1 2001:db8::2 40000 8443\r\n"),
        v2(1, 0x11, &inet),
        with("PROXY UNKNOWN\r\n"),
        get.to_vec(),
    ];
    // Each connection's status (0: closed unanswered).
    let send = |addr: &str| -> Vec<u16> {
        sends
            .iter()
            .map(|bytes| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(bytes).unwrap();
                let mut raw = Vec::new();
                let _ = s.read_to_end(&mut raw);
                raw.get(9..12)
                    .and_then(|c| std::str::from_utf8(c).ok()?.parse().ok())
                    .unwrap_or(0)
            })
            .collect()
    };
    let lines = |path: &Path| -> Vec<String> {
        let mut l: Vec<String> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        l.sort();
        l
    };
    let format = "$remote_addr|$proxy_protocol_addr $proxy_protocol_port \
                  $proxy_protocol_server_addr $proxy_protocol_server_port|$status";
    let nginx = duality_bench::http::find_nginx();
    for (i, realip) in [false, true].into_iter().enumerate() {
        let log = dir.0.join(format!("duality-{i}.log"));
        let mut args = vec![
            "--proxy-protocol",
            "on",
            "--access-log",
            log.to_str().unwrap(),
            "--log-format",
            format,
        ];
        if realip {
            args.extend([
                "--real-ip-from",
                "127.0.0.1",
                "--real-ip-header",
                "proxy_protocol",
            ]);
        }
        let server = HttpServer::start(&root, &args);
        let statuses = send(server.url.strip_prefix("http://").unwrap());
        assert!(server.stop().success());
        assert_eq!(statuses, [200, 200, 200, 200, 0], "realip {realip}");
        let ours = lines(&log);
        let client = |ip: &str| {
            if realip {
                ip.to_owned()
            } else {
                "127.0.0.1".to_owned()
            }
        };
        assert_eq!(
            ours,
            [
                "127.0.0.1|- - - -|200".to_owned(),
                format!(
                    "{}|192.0.2.1 51234 198.51.100.2 443|200",
                    client("192.0.2.1")
                ),
                format!(
                    "{}|2001:db8::1 40000 2001:db8::2 8443|200",
                    client("2001:db8::1")
                ),
                format!(
                    "{}|203.0.113.7 8080 198.51.100.2 443|200",
                    client("203.0.113.7")
                ),
            ]
        );
        if let Some(nginx) = &nginx {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let theirs_log = dir.0.join(format!("nginx-{i}.log"));
            let http = format!("log_format pp '{format}';\n");
            let mut server = format!(
                "listen 127.0.0.1:{port} proxy_protocol;\naccess_log {} pp;\n",
                theirs_log.display()
            );
            if realip {
                server.push_str("set_real_ip_from 127.0.0.1;\nreal_ip_header proxy_protocol;\n");
            }
            let n =
                duality_bench::http::RunningServer::nginx_in_blocks(nginx, &root, &http, &server)
                    .unwrap();
            assert_eq!(send(&format!("127.0.0.1:{port}")), statuses, "nginx");
            drop(n);
            assert_eq!(lines(&theirs_log), ours, "nginx, realip {realip}");
        }
    }
    // Under every model the header is read where requests are.
    for model in ["thread-per-conn", "amped:1", "seda:1:1"] {
        let log = dir.0.join(format!("{model}.log"));
        let args = [
            "--proxy-protocol",
            "on",
            "--access-log",
            log.to_str().unwrap(),
            "--log-format",
            format,
            "--model",
            model,
        ];
        let server = HttpServer::start(&root, &args);
        let statuses = send(server.url.strip_prefix("http://").unwrap());
        assert!(server.stop().success());
        assert_eq!(statuses, [200, 200, 200, 200, 0], "{model}");
        let logged = lines(&log);
        assert_eq!(logged.len(), 4, "{model}");
        assert!(logged.contains(&"127.0.0.1|192.0.2.1 51234 198.51.100.2 443|200".to_owned()));
    }
    refused_saying(
        &root,
        &[
            "--real-ip-from",
            "10.0.0.1",
            "--real-ip-header",
            "proxy_protocol",
        ],
        "needs --proxy-protocol on",
    );
}

/// `--valid-referers` (nginx's `valid_referers` with `if ($invalid_referer)
/// { return 403; }`): the same statuses as nginx's for the same list and
/// `Referer`s; an error page answers the 403.
#[test]
fn valid_referers_refuse_hot_links_as_nginx_does() {
    let (_dir, root) = tree(
        "referers",
        &[("a.png", "png"), ("no.html", "no hot links\n")],
    );
    let referers = [
        None,
        Some("http://example.com/page"),
        Some("HTTPS://Example.COM:8443/x"),
        Some("http://api.example.com/"),
        Some("http://a.b.example.org/"),
        Some("http://example.org/"),
        Some("http://example.net/"),
        Some("http://x.example.net/"),
        Some("http://www.example.co.uk/p"),
        Some("http://pics.test/gallery/1.html"),
        Some("http://pics.test/other/"),
        Some("http://evil.com/?example.com"),
        Some("blanked-by-proxy"),
        Some("http://a.b"),
    ];
    let seen = |url: &str| -> Vec<u16> {
        referers
            .iter()
            .map(|r| {
                let field = r.map_or(String::new(), |r| format!("Referer: {r}\r\n"));
                call(url, "GET", "/a.png", &field).0
            })
            .collect()
    };
    let nginx = duality_bench::http::find_nginx();
    for list in [
        "none blocked example.com *.example.org .example.net www.example.* pics.test/gallery/",
        "example.com www.example.*",
    ] {
        let server = HttpServer::start(&root, &["--valid-referers", list]);
        let ours = seen(&server.url);
        assert!(server.stop().success());
        assert!(
            ours.contains(&200) && ours.contains(&403),
            "{list}: {ours:?}"
        );
        if let Some(nginx) = &nginx {
            let directives =
                format!("valid_referers {list};\nif ($invalid_referer) {{ return 403; }}\n");
            let n = duality_bench::http::RunningServer::nginx_in_server(nginx, &root, &directives)
                .unwrap();
            assert_eq!(seen(&format!("http://{}", n.addr)), ours, "nginx: {list}");
        }
    }
    let args = [
        "--valid-referers",
        "none example.com",
        "--error-page",
        "403 /no.html",
    ];
    let server = HttpServer::start(&root, &args);
    let (code, _, body) = call(
        &server.url,
        "GET",
        "/a.png",
        "Referer: http://evil.com/\r\n",
    );
    assert_eq!((code, body), (403, b"no hot links\n".to_vec()));
    assert_eq!(call(&server.url, "GET", "/a.png", "").0, 200);
    assert!(server.stop().success());
    refused_saying(
        &root,
        &["--valid-referers", "~google"],
        "regular expressions",
    );
}

/// `--absolute-redirect on` writes the `Location` nginx's
/// `absolute_redirect` (its default) writes: `http://`, the request's host
/// or the address it came to, the port unless 80, the path (compared with
/// each server's own port in place).
#[test]
fn absolute_redirects_name_the_host_as_nginx_does() {
    let (_dir, root) = tree("absolute-redirect", &[("dir/index.html", "d\n")]);
    let asks = [
        "GET /dir HTTP/1.1\r\nHost: t\r\n",
        "GET /dir?x=1 HTTP/1.1\r\nHost: Example.COM.:8080\r\n",
        "GET /dir HTTP/1.0\r\n",
        "GET http://other.test/dir HTTP/1.1\r\nHost: t\r\n",
    ];
    // Each answer's status and Location, the server's port written PORT.
    let seen = |addr: &str| -> Vec<(u16, String)> {
        let port = addr.rsplit(':').next().unwrap().to_owned();
        asks.iter()
            .map(|ask| {
                let mut s = TcpStream::connect(addr).unwrap();
                write!(s, "{ask}Connection: close\r\n\r\n").unwrap();
                let mut raw = Vec::new();
                s.read_to_end(&mut raw).unwrap();
                let text = String::from_utf8_lossy(&raw).into_owned();
                let location = text
                    .lines()
                    .find_map(|l| l.strip_prefix("Location: "))
                    .unwrap_or_default()
                    .replace(&format!(":{port}/"), ":PORT/");
                (text[9..12].parse().unwrap(), location)
            })
            .collect()
    };
    let server = HttpServer::start(&root, &["--absolute-redirect", "on"]);
    let ours = seen(server.url.strip_prefix("http://").unwrap());
    assert!(server.stop().success());
    assert_eq!(
        ours,
        [
            (301, "http://t:PORT/dir/".to_owned()),
            (301, "http://example.com:PORT/dir/?x=1".to_owned()),
            (301, "http://127.0.0.1:PORT/dir/".to_owned()),
            (301, "http://other.test:PORT/dir/".to_owned()),
        ]
    );
    let relative = HttpServer::start(&root, &[]);
    assert_eq!(
        seen(relative.url.strip_prefix("http://").unwrap())[0],
        (301, "/dir/".to_owned())
    );
    assert!(relative.stop().success());
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n = duality_bench::http::RunningServer::nginx(&nginx, &root, 1, 1024).unwrap();
        assert_eq!(seen(&n.addr.to_string()), ours, "nginx");
    }
    // `--return` to a path of the server's own.
    let args = ["--absolute-redirect", "on", "--return", "301 /new$uri"];
    let server = HttpServer::start(&root, &args);
    let (_, fields, _) = call(&server.url, "GET", "/x", "");
    let port = server.url.rsplit(':').next().unwrap().to_owned();
    assert_eq!(
        field(&fields, "location"),
        Some(format!("http://t:{port}/new/x").as_str())
    );
    assert!(server.stop().success());
}

/// `--rewrite` (nginx's `rewrite` in a `server` block): paths changed or
/// redirected, captures escaped, queries carried, rules chained or ended,
/// and `--return` after them, each answer and log line as nginx's.
#[test]
fn rewrites_change_or_redirect_as_nginx_does() {
    let (dir, root) = tree(
        "rewrite",
        &[("new/a.txt", "new a\n"), ("dir/index.html", "d\n")],
    );
    let rules = [
        "^/old/(.*)$ /new/$1 permanent",
        "^/tmp/(.*)$ /new/$1 redirect",
        "^/in/(.*)$ /new/$1 last",
        "^/q/(.*)$ /new/$1?x=$1 last",
        "^/qq/(.*)$ /new/$1?x=$1? break",
        "^/ext/(.*)$ https://example.com/$1",
        "^/extq/(.*)$ https://example.com/$1?",
        "^/extn/(.*)$ https://example.com/?p=$1 permanent",
        "^/chain1/(.*)$ /chain2/$1",
        "^/chain2/(.*)$ /new/$1 break",
        "^/d$ /dir last",
        "^/sc/(.*)$ $scheme://h/$1",
        "^/hh/(.*)$ http://$host/$1$is_args$args? permanent",
        "^/nm/(?<rest>.*)$ /new/${rest}x permanent",
        "(?i)^/CI/(.*)$ /new/$1 permanent",
    ];
    let asks = [
        "/old/a.txt",
        "/old/a.txt?z=1",
        "/old/a%20b",
        "/old/a+b",
        "/old/a%2Bb?k=v",
        "/old/100%25",
        "/old/%41%3F",
        "/old/x%26y%3B%23%22%3C%7E",
        "/old/%C3%A9+%2B",
        "/tmp/a.txt",
        "/in/a.txt",
        "/in/a.txt?z=1",
        "/q/a.txt?z=1",
        "/qq/a.txt?z=1",
        "/q/a%20b?z=1",
        "/q/a+b%26?z=1",
        "/ext/a.txt?z=1",
        "/extq/a.txt?z=1",
        "/extn/a.txt?z=1",
        "/extn/a%20b%3F?z=1",
        "/chain1/a.txt",
        "/d?y=2",
        "/sc/a",
        "/hh/a?b=c",
        "/nm/a",
        "/Ci/a",
        "/new/a.txt",
        "/missing",
    ];
    let format = "$status uri=$uri args=$args is_args=$is_args ru=$request_uri";
    // Each answer's status, `Location` (the server's port written PORT)
    // and the body of a 200; then the log's lines.
    let seen = |url: &str, log: &Path, n: usize| {
        let port = url.rsplit(':').next().unwrap().to_owned();
        let answers: Vec<(u16, String, Vec<u8>)> = asks[..n]
            .iter()
            .map(|path| {
                let (code, fields, body) = call(url, "GET", path, "");
                let location = field(&fields, "location")
                    .unwrap_or_default()
                    .replace(&format!(":{port}/"), ":PORT/");
                (code, location, if code == 200 { body } else { Vec::new() })
            })
            .collect();
        let text = log_lines(log, n, 5);
        (answers, text)
    };
    let ours_log = dir.0.join("duality.log");
    let mut args = vec![
        "--absolute-redirect",
        "on",
        "--access-log",
        ours_log.to_str().unwrap(),
        "--log-format",
        format,
    ];
    for rule in rules {
        args.extend(["--rewrite", rule]);
    }
    let server = HttpServer::start(&root, &args);
    let ours = seen(&server.url, &ours_log, asks.len());
    assert!(server.stop().success());
    // The same under the other models (where `finish` answers, the head
    // is rewritten again).
    for model in ["thread-per-conn", "amped:1"] {
        let log = dir.0.join(format!("duality-{model}.log"));
        let mut args = args.clone();
        args[3] = log.to_str().unwrap();
        args.extend(["--model", model]);
        let server = HttpServer::start(&root, &args);
        assert_eq!(seen(&server.url, &log, asks.len()), ours, "{model}");
        assert!(server.stop().success());
    }
    let find = |path: &str| ours.0[asks.iter().position(|a| *a == path).unwrap()].clone();
    assert_eq!(find("/in/a.txt"), (200, String::new(), b"new a\n".to_vec()));
    assert_eq!(find("/chain1/a.txt").0, 200);
    assert_eq!(
        find("/old/a.txt?z=1"),
        (301, "http://t:PORT/new/a.txt?z=1".into(), Vec::new())
    );
    assert_eq!(find("/d?y=2").1, "http://t:PORT/dir/?y=2");
    assert!(ours
        .1
        .contains("200 uri=/new/a.txt args=x=a.txt&z=1 is_args=? ru=/q/a.txt?z=1\n"));
    // `--return` runs after the rules, unless one ended them.
    let then_return = |url: &str| -> Vec<u16> {
        ["/in/a.txt", "/chain1/a.txt", "/new/a.txt"]
            .iter()
            .map(|p| call(url, "GET", p, "").0)
            .collect()
    };
    let args = [
        "--rewrite",
        "^/in/(.*)$ /new/$1 last",
        "--rewrite",
        "^/chain1/(.*)$ /new/$1",
        "--return",
        "403",
    ];
    let server = HttpServer::start(&root, &args);
    let returned = then_return(&server.url);
    assert!(server.stop().success());
    assert_eq!(returned, [200, 403, 403]);
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let log = dir.0.join("nginx.log");
        let http = format!("log_format f '{format}';\n");
        let mut server = format!("access_log {} f;\n", log.display());
        for rule in rules {
            let words: Vec<&str> = rule.split(' ').collect();
            let flag = words.get(2).copied().unwrap_or_default();
            server += &format!("rewrite \"{}\" \"{}\" {flag};\n", words[0], words[1]);
        }
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, &http, &server)
            .unwrap();
        let theirs = seen(&format!("http://{}", n.addr), &log, asks.len());
        for (i, ask) in asks.iter().enumerate() {
            assert_eq!(ours.0[i], theirs.0[i], "{ask}");
        }
        assert_eq!(ours.1, theirs.1);
        let directives = "rewrite ^/in/(.*)$ /new/$1 last;\n\
                          rewrite ^/chain1/(.*)$ /new/$1;\nreturn 403;\n";
        let n =
            duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, directives).unwrap();
        assert_eq!(then_return(&format!("http://{}", n.addr)), returned);
    }
    // A rule that gives no path under the root: the server's error.
    let args = [
        "--rewrite",
        "^/up/(.*)$ /a/../../$1 last",
        "--rewrite",
        "^/v/(.*)$ $1 last",
    ];
    let server = HttpServer::start(&root, &args);
    assert_eq!(call(&server.url, "GET", "/up/etc/passwd", "").0, 500);
    assert_eq!(call(&server.url, "GET", "/v/new/a.txt", "").0, 500);
    assert_eq!(call(&server.url, "GET", "/new/a.txt", "").0, 200);
    assert!(server.stop().success());
    refused_saying(&root, &["--rewrite", "^/(a /b"], "unclosed group");
    refused_saying(&root, &["--rewrite", "^/a b last"], "starting with /");
    refused_saying(&root, &["--rewrite", "^/(a) /$2"], "has 1 capture");
    refused_saying(&root, &["--rewrite", "^/a /b often"], "the flag is");
}

/// `--secure-link` with `--secure-link-md5` (nginx's `secure_link` and
/// `secure_link_md5` with its documented `if`s: 403, 410): signed links
/// served, expired ones gone, wrong ones refused, each answer and
/// `$secure_link`, `$secure_link_expires` as nginx's.
#[test]
fn secure_links_let_signed_requests_in_as_nginx_does() {
    use duality_http::secure_link::sign;
    let (dir, root) = tree("secure-link", &[("dl/a.txt", "a\n"), ("a.txt", "open\n")]);
    let secret = "$secure_link_expires$uri$remote_addr s3cret";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (later, earlier) = (now + 3600, now - 60);
    let signed =
        |expires: &str, uri: &str| sign(format!("{expires}{uri}127.0.0.1 s3cret").as_bytes());
    let good = signed(&later.to_string(), "/dl/a.txt");
    let asks = [
        format!("/dl/a.txt?md5={good}&expires={later}"),
        format!("/dl/a.txt?md5={good}==&expires={later}"),
        format!(
            "/dl/a.txt?md5={}&expires={earlier}",
            signed(&earlier.to_string(), "/dl/a.txt")
        ),
        format!("/dl/a.txt?md5={good}&expires={}", later + 1),
        format!(
            "/dl/a.txt?md5={}&expires={later}",
            signed(&later.to_string(), "/dl/b.txt")
        ),
        format!("/dl/a.txt?md5={}", signed("", "/dl/a.txt")),
        format!("/dl/a.txt?md5={good}&expires=x{later}"),
        "/dl/a.txt".to_owned(),
        "/a.txt".to_owned(),
    ];
    let format = "$status|$secure_link|$secure_link_expires|$uri";
    let seen = |url: &str, log: &Path| {
        let answers: Vec<(u16, Vec<u8>)> = asks
            .iter()
            .map(|path| {
                let (code, _, body) = call(url, "GET", path, "");
                (code, if code == 200 { body } else { Vec::new() })
            })
            .collect();
        let text = log_lines(log, asks.len(), 5);
        (answers, text)
    };
    let log = dir.0.join("duality.log");
    let args = [
        "--secure-link",
        "$arg_md5,$arg_expires",
        "--secure-link-md5",
        secret,
        "--secure-link-prefix",
        "/dl/",
        "--access-log",
        log.to_str().unwrap(),
        "--log-format",
        format,
    ];
    let server = HttpServer::start(&root, &args);
    let ours = seen(&server.url, &log);
    assert!(server.stop().success());
    let codes: Vec<u16> = ours.0.iter().map(|a| a.0).collect();
    assert_eq!(codes, [200, 200, 410, 403, 403, 403, 403, 403, 200]);
    assert!(ours.1.starts_with(&format!("200|1|{later}|/dl/a.txt\n")));
    // nginx's directives, for nginx and as `--nginx-config` reads them.
    let http = format!("log_format f '{format}';\n");
    let server_block = |log: &Path| {
        format!(
            "access_log {} f;\nlocation /dl/ {{\nsecure_link $arg_md5,$arg_expires;\n\
             secure_link_md5 \"{secret}\";\nif ($secure_link = \"\") {{ return 403; }}\n\
             if ($secure_link = \"0\") {{ return 410; }}\n}}\n",
            log.display()
        )
    };
    let conf = dir.0.join("site.conf");
    let conf_log = dir.0.join("conf.log");
    let text = format!(
        "http {{\n{http}server {{\n{}}}\n}}\n",
        server_block(&conf_log)
    );
    std::fs::write(&conf, text).unwrap();
    let server = HttpServer::start(&root, &["--nginx-config", conf.to_str().unwrap()]);
    assert_eq!(seen(&server.url, &conf_log), ours);
    assert!(server.stop().success());
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let nginx_log = dir.0.join("nginx.log");
        let server = server_block(&nginx_log);
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, &http, &server)
            .unwrap();
        let theirs = seen(&format!("http://{}", n.addr), &nginx_log);
        assert_eq!(ours.0, theirs.0);
        assert_eq!(ours.1, theirs.1);
    }
    refused_saying(&root, &["--secure-link", "$arg_md5"], "--secure-link-md5");
    refused_saying(
        &root,
        &["--secure-link", "$arg_md5", "--secure-link-md5", "$nope"],
        "unknown \"nope\" variable",
    );
    let args = [
        "--secure-link",
        "$arg_a",
        "--secure-link-md5",
        "x",
        "--secure-link-prefix",
        "dl",
    ];
    refused_saying(&root, &args, "a path starts with /");
}

/// The log's variables of the answer and the connection (`$bytes_sent`,
/// `$sent_http_…`, `$pipe`, `$request_completion`, `$server_addr`, …):
/// what was sent, as nginx's count it, and nginx's values where the two
/// servers' answers agree.
#[test]
fn answer_variables_log_what_was_sent_as_nginx_does() {
    let big: String = "x".repeat(16 << 20);
    let (dir, root) = tree(
        "answer-vars",
        &[
            ("a.txt", "hello\n"),
            ("dir/index.html", "d\n"),
            ("big.bin", &big),
        ],
    );
    let format = "$bytes_sent|$body_bytes_sent|$sent_http_content_length|$sent_http_etag|\
                  $sent_http_location|$sent_http_nope|$pipe|$request_completion|$server_addr|\
                  $server_port|$server_name|$https|$request_body|$binary_remote_addr|\
                  $connection_time|$realip_remote_port";
    // Three requests in one write, answered in turn; then a download the
    // client abandons.
    let asks = "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\n\
                GET /dir HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let run = |url: &str, log: &Path| -> (Vec<usize>, u16, Vec<Vec<String>>) {
        let addr = url.strip_prefix("http://").unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        let port = s.local_addr().unwrap().port();
        s.write_all(asks.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        // Closed at once: nginx logs the last answer once its lingering
        // close ends.
        drop(s);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let starts: Vec<usize> = text.match_indices("HTTP/1.1 ").map(|(i, _)| i).collect();
        let mut sizes: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        sizes.push(raw.len() - starts[starts.len() - 1]);
        let mut d = TcpStream::connect(addr).unwrap();
        d.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut some = [0u8; 4096];
        d.read_exact(&mut some).unwrap();
        drop(d);
        let lines = log_lines(log, 4, 10);
        let lines = lines
            .lines()
            .map(|l| l.split('|').map(str::to_owned).collect())
            .collect();
        (sizes, port, lines)
    };
    let log = dir.0.join("duality.log");
    let args = [
        "--access-log",
        log.to_str().unwrap(),
        "--log-format",
        format,
    ];
    let server = HttpServer::start(&root, &args);
    let server_port = server.url.rsplit(':').next().unwrap().to_owned();
    let (sizes, port, lines) = run(&server.url, &log);
    assert!(server.stop().success());
    assert_eq!(lines.len(), 4, "{lines:?}");
    for (i, line) in lines[..3].iter().enumerate() {
        assert_eq!(line[0], sizes[i].to_string(), "{line:?}");
        assert_eq!(line[6], if i == 0 { "." } else { "p" });
        assert_eq!(line[7], "OK");
        assert_eq!(
            &line[8..14],
            [
                "127.0.0.1",
                &server_port,
                "",
                "",
                "-",
                "\\x7F\\x00\\x00\\x01"
            ]
        );
        let (secs, ms) = line[14].split_once('.').unwrap();
        assert!(secs.parse::<u64>().is_ok() && ms.len() == 3, "{line:?}");
        assert_eq!(line[15], port.to_string());
    }
    assert_eq!(&lines[0][2..6], ["6", &lines[0][3], "-", "-"]);
    assert!(lines[0][3].starts_with("\\x22"), "{:?}", lines[0]);
    assert_eq!(lines[2][4], "/dir/");
    // The abandoned download: not complete, fewer bytes than the file.
    let cut = &lines[3];
    assert_eq!(cut[7], "", "{cut:?}");
    assert!(cut[0].parse::<u64>().unwrap() < 16 << 20, "{cut:?}");
    assert_eq!(cut[2], (16u64 << 20).to_string());
    // `$gzip_ratio`: compressed here (then from the variant cache), or not.
    std::fs::write(root.join("t.txt"), "duality ".repeat(2000)).unwrap();
    let gzip_log = dir.0.join("gzip.log");
    let args = [
        "--gzip",
        "on",
        "--access-log",
        gzip_log.to_str().unwrap(),
        "--log-format",
        "$gzip_ratio|$sent_http_content_encoding",
    ];
    let server = HttpServer::start(&root, &args);
    for fields in ["Accept-Encoding: gzip\r\n", "Accept-Encoding: gzip\r\n", ""] {
        assert_eq!(call(&server.url, "GET", "/t.txt", fields).0, 200);
    }
    assert!(server.stop().success());
    let text = std::fs::read_to_string(&gzip_log).unwrap();
    let ratios: Vec<&str> = text.lines().collect();
    assert_eq!(ratios.len(), 3, "{text}");
    for r in &ratios[..2] {
        let (ratio, encoding) = r.split_once('|').unwrap();
        assert!(
            ratio.parse::<f64>().unwrap() > 10.0 && encoding == "gzip",
            "{text}"
        );
    }
    assert_eq!(ratios[2], "-|-");
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let nginx_log = dir.0.join("nginx.log");
        let http = format!("log_format f '{format}';\nabsolute_redirect off;\n");
        let server = format!("access_log {} f;\n", nginx_log.display());
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, &http, &server)
            .unwrap();
        let (sizes, port, theirs) = run(&format!("http://{}", n.addr), &nginx_log);
        assert_eq!(theirs.len(), 4, "{theirs:?}");
        for (i, line) in theirs[..3].iter().enumerate() {
            assert_eq!(line[0], sizes[i].to_string(), "nginx {line:?}");
            assert_eq!(line[15], port.to_string());
        }
        // What does not depend on the two servers' own heads and ports.
        let same = |lines: &[Vec<String>]| {
            let mut same: Vec<_> = lines
                .iter()
                .map(|l| [4, 5, 6, 7, 8, 10, 11, 12, 13].map(|i| l[i].clone()))
                .collect();
            same.sort();
            same
        };
        assert_eq!(same(&lines), same(&theirs));
    }
}

/// `--alias "/PREFIX/ DIR"` (nginx's `location /PREFIX/ { alias DIR/; }`):
/// paths under a prefix served from another directory, the longest prefix
/// first, with index files, redirects and 404s as nginx's.
#[test]
fn aliases_serve_prefixes_from_other_directories_as_nginx_does() {
    let (dir, root) = tree(
        "alias",
        &[
            ("a.txt", "root a\n"),
            ("static/css/a.css", "shadowed\n"),
            ("static.txt", "root static\n"),
        ],
    );
    let assets = dir.0.join("assets");
    let deep = dir.0.join("deep");
    for (path, text) in [
        (assets.join("css/a.css"), "alias css\n"),
        (assets.join("index.html"), "alias index\n"),
        (assets.join("sub/index.html"), "alias sub\n"),
        (deep.join("x.txt"), "deep x\n"),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    std::os::unix::fs::symlink(root.join("a.txt"), assets.join("out.txt")).unwrap();
    let asks = [
        "/static/css/a.css",
        "/static/",
        "/static",
        "/static/sub",
        "/static/sub/?q=1",
        "/static/missing",
        "/static/../a.txt",
        "/a.txt",
        "/static/deep/x.txt",
        "/static/deep",
        "/static.txt",
    ];
    let seen = |url: &str| -> Vec<(u16, String, Vec<u8>)> {
        asks.iter()
            .map(|path| {
                let (code, fields, body) = call(url, "GET", path, "");
                let location = field(&fields, "location").unwrap_or_default().to_owned();
                (code, location, if code == 200 { body } else { Vec::new() })
            })
            .collect()
    };
    let alias_static = format!("/static/ {}", assets.display());
    let alias_deep = format!("/static/deep/ {}", deep.display());
    let args = ["--alias", &alias_static, "--alias", &alias_deep];
    let server = HttpServer::start(&root, &args);
    let ours = seen(&server.url);
    // A symlink out of an alias's directory, as out of the root: 403.
    assert_eq!(call(&server.url, "GET", "/static/out.txt", "").0, 403);
    assert!(server.stop().success());
    let bodies: Vec<&[u8]> = ours.iter().map(|a| &a.2[..]).collect();
    assert_eq!(bodies[0], b"alias css\n");
    assert_eq!(bodies[1], b"alias index\n");
    assert_eq!((ours[3].0, ours[3].1.as_str()), (301, "/static/sub/"));
    assert_eq!(bodies[8], b"deep x\n");
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let server = format!(
            "absolute_redirect off;\nlocation /static/ {{ alias {}/; }}\n\
             location /static/deep/ {{ alias {}/; }}\n",
            assets.display(),
            deep.display()
        );
        let n =
            duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, &server).unwrap();
        let theirs = seen(&format!("http://{}", n.addr));
        for (i, ask) in asks.iter().enumerate() {
            assert_eq!(ours[i], theirs[i], "{ask}");
        }
    }
    refused_saying(&root, &["--alias", "/static /x"], "starts and ends with /");
    refused_saying(
        &root,
        &["--alias", "/static/"],
        "a prefix, then the directory",
    );
    refused_saying(&root, &["--alias", "/a/../b/ /x"], "a plain path");
    let missing = format!("/m/ {}", dir.0.join("nowhere").display());
    refused_saying(&root, &["--alias", &missing], "--alias /m/");
}

/// The log's variables of the root and the limits (`$document_root`,
/// `$request_filename`, `$realpath_root`, `$limit_rate`,
/// `$limit_req_status`, `$limit_conn_status`, `$invalid_referer`), as
/// nginx writes them under the same settings.
#[test]
fn root_and_limit_variables_log_as_nginx_does() {
    let (dir, root) = tree("root-vars", &[("a.txt", "a\n")]);
    let format = "$status|$document_root|$request_filename|$realpath_root|$limit_rate|\
                  $limit_req_status|$limit_conn_status|$invalid_referer";
    let asks = [
        ("/a.txt", ""),
        ("/missing", ""),
        ("/a.txt", "Referer: http://evil.test/\r\n"),
        ("/a.txt", "Referer: http://example.com/page\r\n"),
    ];
    let seen = |url: &str, log: &Path| {
        for (path, fields) in asks {
            call(url, "GET", path, fields);
        }
        log_lines(log, asks.len(), 5)
    };
    let log = dir.0.join("duality.log");
    let args = [
        "--limit-req",
        "100r/s burst=10 nodelay",
        "--limit-conn",
        "10",
        "--limit-rate",
        "1m",
        "--valid-referers",
        "none example.com",
        "--access-log",
        log.to_str().unwrap(),
        "--log-format",
        format,
    ];
    let server = HttpServer::start(&root, &args);
    let ours = seen(&server.url, &log);
    assert!(server.stop().success());
    let r = root.display();
    let real = root.canonicalize().unwrap();
    let real = real.display();
    assert_eq!(
        ours,
        format!(
            "200|{r}|{r}/a.txt|{real}|1048576|PASSED|PASSED|\n\
             404|{r}|{r}/missing|{real}|1048576|PASSED|PASSED|\n\
             403|{r}|{r}/a.txt|{real}|1048576|-|-|1\n\
             200|{r}|{r}/a.txt|{real}|1048576|PASSED|PASSED|\n"
        )
    );
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let nginx_log = dir.0.join("nginx.log");
        let http = format!(
            "log_format f '{format}';\n\
             limit_req_zone $binary_remote_addr zone=one:1m rate=100r/s;\n\
             limit_conn_zone $binary_remote_addr zone=addr:1m;\n"
        );
        let server = format!(
            "access_log {} f;\nlimit_req zone=one burst=10 nodelay;\nlimit_conn addr 10;\n\
             limit_rate 1m;\nvalid_referers none example.com;\n\
             if ($invalid_referer) {{ return 403; }}\n",
            nginx_log.display()
        );
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, &http, &server)
            .unwrap();
        assert_eq!(seen(&format!("http://{}", n.addr), &nginx_log), ours);
    }
}

/// `--nginx-config FILE`: an nginx configuration of a static site (an
/// `http` block with a log format and gzip, a `server` with index,
/// try_files, an error page, a header, expires, a rewrite, an alias and
/// the dot-file idiom) served by nginx from those directives and by
/// duality from the file: the same statuses, `Location`s, bodies, chosen
/// fields and log lines. Flags after it change what it said.
#[test]
fn an_nginx_configuration_serves_as_nginx_does() {
    let (dir, root) = tree(
        "nginx-config",
        &[
            ("a.txt", "a\n"),
            ("page.html", "<p>page</p>\n"),
            ("dir/index.html", "<p>dir</p>\n"),
            ("404.html", "<p>not here</p>\n"),
            (".git/config", "secret\n"),
            ("new/p.txt", "p\n"),
            ("big.txt", &"gzip me ".repeat(200)),
        ],
    );
    let assets = dir.0.join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    std::fs::write(assets.join("s.css"), "b{}\n").unwrap();
    // The types of nginx's own file where it is installed (both read it).
    let types = match Path::new("/etc/nginx/mime.types").is_file() {
        true => "include /etc/nginx/mime.types;\n",
        false => "",
    };
    let http = format!(
        "{types}log_format f '$status \"$request\" $request_uri $args $uri $document_uri';\n\
         gzip on; gzip_types text/plain; gzip_min_length 100;\n"
    );
    let server = format!(
        "index index.html;\n\
         try_files $uri $uri.html $uri/ =404;\n\
         error_page 404 /404.html;\n\
         add_header X-Frame-Options DENY;\n\
         expires 1h;\n\
         rewrite ^/old/(.*)$ /new/$1 permanent;\n\
         location ~ /\\. {{ deny all; }}\n\
         location /static/ {{ alias {}/; }}\n",
        assets.display()
    );
    // Some twice: the second from what the first's lookup kept.
    let asks: [(&str, &str); 13] = [
        ("/a.txt", ""),
        ("/page", ""),
        ("/page", ""),
        ("/dir/", ""),
        ("/missing", ""),
        ("/dir/", ""),
        ("/dir", ""),
        ("/missing", ""),
        ("/.git/config", ""),
        ("/static/s.css", ""),
        ("/old/p.txt?x=1", ""),
        ("/big.txt", "Accept-Encoding: gzip\r\n"),
        ("/new/p.txt", "If-None-Match: \"nope\"\r\n"),
    ];
    let seen = |url: &str| -> Vec<String> {
        asks.iter()
            .map(|(path, fields)| {
                let (code, fields, body) = call(url, "GET", path, fields);
                let f = |n| field(&fields, n).unwrap_or("-").to_owned();
                // The servers' own pages (a redirect's, a refusal's) differ.
                let own = code == 301 || code == 403;
                let body = match f("content-encoding").as_str() {
                    "gzip" => "<gzip>".into(),
                    _ if own => "<page>".into(),
                    _ => String::from_utf8_lossy(&body).into_owned(),
                };
                // Each server's own port in an absolute redirect.
                let mut location = f("location");
                if let Some(rest) = location.strip_prefix("http://t:") {
                    location = format!("http://t{}", &rest[rest.find('/').unwrap_or(rest.len())..]);
                }
                let mut ctype = f("content-type");
                if own {
                    ctype.truncate(ctype.find(';').unwrap_or(ctype.len()));
                }
                format!(
                    "{path}: {code} {} {} {} {} {} {body:?}",
                    location,
                    ctype,
                    f("content-encoding"),
                    f("x-frame-options"),
                    f("cache-control"),
                )
            })
            .collect()
    };
    let conf = dir.0.join("site.conf");
    let log = dir.0.join("ours.log");
    std::fs::write(
        &conf,
        format!(
            "http {{\n{http}\nserver {{\naccess_log {} f;\n{server}}}\n}}\n",
            log.display()
        ),
    )
    .unwrap();
    let server_d = HttpServer::start(&root, &["--nginx-config", conf.to_str().unwrap()]);
    let ours = seen(&server_d.url);
    let ours_log = log_lines(&log, asks.len(), 5);
    assert!(server_d.stop().success());
    assert!(
        ours[0].starts_with("/a.txt: 200 - text/plain"),
        "{}",
        ours[0]
    );
    assert!(
        ours[0].ends_with(" - DENY max-age=3600 \"a\\n\""),
        "{}",
        ours[0]
    );
    assert!(
        ours[10].starts_with("/old/p.txt?x=1: 301 http://t/new/p.txt?x=1"),
        "{}",
        ours[10]
    );
    assert!(ours[8].starts_with("/.git/config: 403"), "{}", ours[8]);
    // `$uri` follows the internal redirects, as nginx's does.
    let uris: Vec<&str> = ours_log
        .lines()
        .map(|l| l.rsplit(' ').nth(1).unwrap())
        .collect();
    assert_eq!(
        &uris[..5],
        [
            "/a.txt",
            "/page.html",
            "/page.html",
            "/dir/index.html",
            "/404.html"
        ]
    );
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let nlog = dir.0.join("nginx.log");
        let server = format!("access_log {} f;\n{server}", nlog.display());
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, &http, &server)
            .unwrap();
        let theirs = seen(&format!("http://{}", n.addr));
        for (o, t) in ours.iter().zip(&theirs) {
            assert_eq!(o, t);
        }
        assert_eq!(ours_log, log_lines(&nlog, asks.len(), 5));
    }
    // A flag after it wins; a directive with no counterpart is refused.
    let server_d = HttpServer::start(
        &root,
        &[
            "--nginx-config",
            conf.to_str().unwrap(),
            "--absolute-redirect",
            "off",
        ],
    );
    let (_, fields, _) = call(&server_d.url, "GET", "/dir", "");
    assert_eq!(field(&fields, "location"), Some("/dir/"));
    assert!(server_d.stop().success());
    std::fs::write(
        &conf,
        "server {\n  location / {\n    proxy_pass http://x;\n  }\n}\n",
    )
    .unwrap();
    let said = refused(&root, &["--nginx-config", conf.to_str().unwrap()]);
    assert!(
        said.contains(":3: \"proxy_pass\": not translated"),
        "{said}"
    );
}

/// `--nginx-config` with `location ~* \.(…)$ { expires …; }` (a
/// regular-expression `--location`) and the favicon idiom: the same
/// `Cache-Control` for each file as nginx's.
#[test]
fn an_nginx_location_by_extension_expires_as_nginx_does() {
    let (dir, root) = tree(
        "nginx-config-ext",
        &[
            ("a.txt", "a\n"),
            ("s.css", "b{}\n"),
            ("i.html", "<p>\n"),
            ("favicon.ico", "i"),
        ],
    );
    let types = match Path::new("/etc/nginx/mime.types").is_file() {
        true => "include /etc/nginx/mime.types;\n",
        false => "",
    };
    let server = "expires 1h;\n\
                  location = /favicon.ico { log_not_found off; access_log off; }\n\
                  location ~* \\.(css|txt)$ { expires 30d; }\n";
    let seen = |url: &str| -> Vec<String> {
        ["/a.txt", "/s.css", "/i.html", "/favicon.ico", "/A.TXT"]
            .iter()
            .map(|p| {
                let (code, fields, _) = call(url, "GET", p, "");
                format!("{p} {code} {:?}", field(&fields, "cache-control"))
            })
            .collect()
    };
    let conf = dir.0.join("site.conf");
    std::fs::write(
        &conf,
        format!("http {{\n{types}server {{\n{server}}}\n}}\n"),
    )
    .unwrap();
    let d = HttpServer::start(&root, &["--nginx-config", conf.to_str().unwrap()]);
    let ours = seen(&d.url);
    assert!(d.stop().success());
    assert_eq!(ours[0], "/a.txt 200 Some(\"max-age=2592000\")");
    assert_eq!(ours[2], "/i.html 200 Some(\"max-age=3600\")");
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n = duality_bench::http::RunningServer::nginx_in_blocks(&nginx, &root, types, server)
            .unwrap();
        assert_eq!(ours, seen(&format!("http://{}", n.addr)));
    }
}

/// `--autoindex-under /PREFIX/` (nginx's `location /PREFIX/ { autoindex
/// on; }`, through `--nginx-config`): directories list there, elsewhere a
/// directory without an index file is 403; the same statuses and listed
/// names as nginx's.
#[test]
fn listings_only_under_a_prefix_as_nginx_does() {
    let (dir, root) = tree(
        "autoindex-under",
        &[
            ("files/a.txt", "a\n"),
            ("files/sub/b.txt", "b\n"),
            ("other/c.txt", "c\n"),
        ],
    );
    let server = "location /files/ { autoindex on; }\n";
    let seen = |url: &str| -> Vec<String> {
        ["/files/", "/files/sub/", "/other/", "/", "/files/a.txt"]
            .iter()
            .map(|p| {
                let (code, _, body) = call(url, "GET", p, "");
                let body = String::from_utf8_lossy(&body);
                // The names listed, not the page around them.
                let listed: Vec<&str> = ["a.txt", "sub/", "b.txt"]
                    .into_iter()
                    .filter(|n| code == 200 && body.contains(&format!("href=\"{n}\"")))
                    .collect();
                format!("{p} {code} {listed:?}")
            })
            .collect()
    };
    let conf = dir.0.join("site.conf");
    std::fs::write(&conf, format!("server {{\n{server}}}\n")).unwrap();
    let d = HttpServer::start(&root, &["--nginx-config", conf.to_str().unwrap()]);
    let ours = seen(&d.url);
    assert!(d.stop().success());
    assert_eq!(ours[0], "/files/ 200 [\"a.txt\", \"sub/\"]");
    assert_eq!(ours[2], "/other/ 403 []");
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let n = duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, server).unwrap();
        assert_eq!(ours, seen(&format!("http://{}", n.addr)));
    }
    refused_saying(
        &root,
        &["--autoindex", "on", "--autoindex-under", "/files/"],
        "give one",
    );
}

/// `--location PATH { FLAGS }` (nginx's prefix and exact `location`
/// blocks): who is let in, a `return`, the added fields and their
/// inheritance by path, what is logged, given as flags and through
/// `--nginx-config`; the statuses, fields and log lines nginx has for the
/// same server block.
#[test]
fn locations_set_their_own_settings_as_nginx_does() {
    let (dir, root) = tree(
        "locations",
        &[
            ("index.html", "<p>\n"),
            ("admin/a.txt", "a\n"),
            ("admin/open/b.txt", "b\n"),
            ("static/s.css", "b{}\n"),
            ("private/x.txt", "x\n"),
            ("private/ok.txt", "ok\n"),
            ("privatex", "px\n"),
        ],
    );
    let users = dir.0.join("users");
    // `openssl passwd -apr1` of "secret pw".
    std::fs::write(&users, "alice:$apr1$Xy3Rq1Zb$2snucGM5UkflqMeUszZPW.\n").unwrap();
    let users = users.to_str().unwrap();
    // A prefix with a root of its own (nginx's root + the whole path).
    let other = dir.0.join("other");
    std::fs::create_dir_all(other.join("pub")).unwrap();
    std::fs::write(other.join("pub/p.txt"), "p\n").unwrap();
    let other = other.to_str().unwrap();
    let good = {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode("alice:secret pw");
        format!("Authorization: Basic {token}\r\n")
    };
    let asks: [(&str, &str); 12] = [
        ("/", ""),
        ("/admin/a.txt", ""),
        ("/admin/a.txt", &good),
        ("/admin/open/b.txt", ""),
        ("/static/s.css", ""),
        ("/static/none.css", ""),
        ("/old", ""),
        ("/private/x.txt", ""),
        ("/privatex", ""),
        ("/private/ok.txt", ""),
        ("/admin/../private/ok.txt", ""),
        ("/pub/p.txt", ""),
    ];
    let seen = |url: &str| -> Vec<String> {
        asks.iter()
            .map(|(path, fields)| {
                let (code, got, _) = call(url, "GET", path, fields);
                let shown: Vec<String> = [
                    "x-s",
                    "x-r",
                    "x-static",
                    "cache-control",
                    "location",
                    "www-authenticate",
                ]
                .iter()
                .filter_map(|n| field(&got, n).map(|v| format!("{n}={v}")))
                .collect();
                format!("{path} {code} {}", shown.join(" "))
            })
            .collect()
    };
    let want = [
        "/ 200 x-r=1",
        "/admin/a.txt 401 www-authenticate=Basic realm=\"Staff\"",
        "/admin/a.txt 200 x-s=1",
        "/admin/open/b.txt 200 x-s=1",
        "/static/s.css 200 x-static=yes cache-control=max-age=3600",
        "/static/none.css 404 ",
        "/old 301 x-s=1 location=/new",
        "/private/x.txt 403 ",
        "/privatex 403 ",
        "/private/ok.txt 200 x-s=1",
        "/admin/../private/ok.txt 200 x-s=1",
        "/pub/p.txt 200 x-s=1",
    ];
    let server = |log: &Path| {
        format!(
            "absolute_redirect off;\n\
         access_log {};\n\
         add_header X-S 1;\n\
         auth_basic_user_file {users};\n\
         location / {{ add_header X-R 1; }}\n\
         location /admin/ {{ auth_basic Staff; }}\n\
         location /admin/open/ {{ auth_basic off; }}\n\
         location /static/ {{ expires 1h; add_header X-Static yes; access_log off; }}\n\
         location = /old {{ return 301 /new; }}\n\
         location /private {{ deny all; }}\n\
         location = /private/ok.txt {{ allow all; }}\n\
         location /pub/ {{ root {other}; }}\n",
            log.display()
        )
    };
    // Two of the twelve are under /static/.
    let logged = |log: &Path| {
        let text = log_lines(log, 10, 5);
        assert_eq!(text.lines().count(), 10, "{}: {text}", log.display());
        assert!(!text.contains("/static/"), "{text}");
    };
    let log = dir.0.join("flags.log");
    let pub_alias = format!("/pub/ {other}/pub");
    let flags = [
        "--access-log",
        log.to_str().unwrap(),
        "--absolute-redirect",
        "off",
        "--add-header",
        "X-S: 1",
        "--auth-basic-user-file",
        users,
        "--location",
        "/",
        "{",
        "--add-header",
        "X-R: 1",
        "}",
        "--location",
        "/admin/ { --auth-basic Staff }",
        "--location",
        "/admin/open/",
        "{",
        "--auth-basic",
        "off",
        "}",
        "--location",
        "/static/ { --expires 1h --add-header 'X-Static: yes' --access-log off }",
        "--location",
        "=",
        "/old",
        "{",
        "--return",
        "301 /new",
        "}",
        "--location",
        "/private { --deny all }",
        "--location",
        "= /private/ok.txt { --allow all }",
        "--alias",
        &pub_alias,
        "--location",
        "/pub/ { }",
    ];
    let conf = dir.0.join("site.conf");
    let conf_log = dir.0.join("conf.log");
    std::fs::write(&conf, format!("server {{\n{}}}\n", server(&conf_log))).unwrap();
    let config = ["--nginx-config", conf.to_str().unwrap()];
    for (args, log) in [(&flags[..], &log), (&config[..], &conf_log)] {
        let d = HttpServer::start(&root, args);
        assert_eq!(seen(&d.url), want, "{args:?}");
        assert!(d.stop().success());
        logged(log);
    }
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let log = dir.0.join("nginx.log");
        let n = duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, &server(&log))
            .unwrap();
        assert_eq!(seen(&format!("http://{}", n.addr)), want, "nginx");
        logged(&log);
    }
    // A path twice, a realm with no file anywhere, a flag a location
    // does not take: refused at start, saying which.
    refused_saying(
        &root,
        &["--location", "/a/ { }", "--location", "/a/", "{", "}"],
        "--location /a/ is given twice",
    );
    refused_saying(
        &root,
        &["--location", "/a/ { --auth-basic Staff }"],
        "needs --auth-basic-user-file",
    );
    refused_saying(
        &root,
        &["--location", "/a/", "{", "--index", "i.html", "}"],
        "/a/: unexpected argument '--index'",
    );
}

/// Regular-expression locations (`~`, `~*`) and `^~` prefixes, chosen in
/// nginx's order, and `--try-files` by location (a location has its own or
/// none; the server's applies where no location does): the statuses,
/// bodies and fields nginx answers for the same server block, given as
/// flags and through `--nginx-config`.
#[test]
fn regular_expression_locations_choose_as_nginx_does() {
    let (dir, root) = tree(
        "regex-locations",
        &[
            ("index.html", "home\n"),
            ("app/index.html", "app\n"),
            ("app/a.js", "js\n"),
            ("raw/r.css", "raw\n"),
            ("blocked/b.txt", "b\n"),
            ("c.css", "c\n"),
            ("x.txt", "x\n"),
        ],
    );
    // A `^~` prefix served from elsewhere: no regex is tried under it.
    let other = dir.0.join("static");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("s.css"), "static\n").unwrap();
    let other = other.to_str().unwrap();
    let asks = [
        "/static/s.css",
        "/app/route",
        "/app/a.js",
        "/app/missing.js",
        "/raw/r.css",
        "/blocked/b.txt",
        "/c.css",
        "/x.txt",
        "/nothing",
    ];
    let seen = |url: &str| -> Vec<String> {
        asks.iter()
            .map(|path| {
                let (code, got, body) = call(url, "GET", path, "");
                let shown: Vec<String> = ["x-s", "x-asset", "x-raw", "cache-control"]
                    .iter()
                    .filter_map(|n| field(&got, n).map(|v| format!("{n}={v}")))
                    .collect();
                let body = match code {
                    200 => String::from_utf8_lossy(&body).trim().to_string(),
                    _ => String::new(),
                };
                format!("{path} {code} {body} {}", shown.join(" "))
            })
            .collect()
    };
    let want = [
        "/static/s.css 200 static x-s=1",
        "/app/route 200 app x-s=1",
        "/app/a.js 200 js x-asset=1 cache-control=max-age=2592000",
        "/app/missing.js 404  ",
        "/raw/r.css 200 raw x-raw=1",
        "/blocked/b.txt 403  ",
        "/c.css 200 c x-asset=1 cache-control=max-age=2592000",
        "/x.txt 200 x x-s=1",
        "/nothing 200 home x-s=1",
    ];
    let server = format!(
        "add_header X-S 1;\n\
                  try_files $uri /index.html;\n\
                  location ^~ /static/ {{ alias {other}/; }}\n\
                  location /app/ {{ try_files $uri /app/index.html; }}\n\
                  location ~* \\.(CSS|js)$ {{ expires 30d; add_header X-Asset 1; }}\n\
                  location ^~ /raw/ {{ add_header X-Raw 1; }}\n\
                  location ~ ^/raw/ {{ deny all; }}\n\
                  location ~ ^/blocked/ {{ deny all; }}\n"
    );
    let static_alias = format!("/static/ {other}");
    let flags = [
        "--alias",
        &static_alias,
        "--location",
        "^~ /static/ { }",
        "--add-header",
        "X-S: 1",
        "--try-files",
        "$uri /index.html",
        "--location",
        "/app/",
        "{",
        "--try-files",
        "$uri /app/index.html",
        "}",
        "--location",
        "~*",
        r"\.(CSS|js)$",
        "{",
        "--expires",
        "30d",
        "--add-header",
        "X-Asset: 1",
        "}",
        "--location",
        "^~ /raw/ { --add-header 'X-Raw: 1' }",
        "--location",
        "~ ^/raw/ { --deny all }",
        "--location",
        "~",
        "^/blocked/",
        "{",
        "--deny",
        "all",
        "}",
    ];
    let nginx = duality_bench::http::find_nginx();
    let blocks = ("", server.as_str());
    as_nginx_does(&dir.0, &root, blocks, Some(&flags), nginx, &seen, &want);
    refused_saying(
        &root,
        &["--location", "~ ( { --deny all }"],
        "regex parse error",
    );
}

/// `--internal` (nginx's `internal` in `location = /404.html`): a client
/// asking for the page gets 404, the page served as the error page all
/// the same (a direct request and a miss alike), as nginx answers.
#[test]
fn internal_locations_refuse_clients_as_nginx_does() {
    let (dir, root) = tree(
        "internal",
        &[("a.txt", "a\n"), ("errors/404.html", "<p>gone</p>\n")],
    );
    let seen = |url: &str| -> Vec<String> {
        ["/a.txt", "/errors/404.html", "/missing", "/errors/", "/old"]
            .iter()
            .map(|p| {
                let (code, _, body) = call(url, "GET", p, "");
                format!("{p} {code} {}", String::from_utf8_lossy(&body).trim())
            })
            .collect()
    };
    let want = [
        "/a.txt 200 a",
        "/errors/404.html 404 <p>gone</p>",
        "/missing 404 <p>gone</p>",
        "/errors/ 404 <p>gone</p>",
        // Moved there by a rewrite: an internal request, served.
        "/old 200 <p>gone</p>",
    ];
    let server = "error_page 404 /errors/404.html;\n\
                  rewrite ^/old$ /errors/404.html last;\n\
                  location /errors/ { internal; }\n";
    let flags = [
        "--error-page",
        "404 /errors/404.html",
        "--rewrite",
        "^/old$ /errors/404.html last",
        "--location",
        "/errors/ { --internal }",
    ];
    let nginx = duality_bench::http::find_nginx();
    let blocks = ("", server);
    as_nginx_does(&dir.0, &root, blocks, Some(&flags), nginx, &seen, &want);
}

/// An answer from another address (a directory's index file, a
/// `--try-files` fallback, an error page) goes out under that address's
/// location (its added fields), as nginx's after an internal redirect: a
/// single-page application's `location = /index.html` marking the page
/// not to be cached, whichever path asked for it.
#[test]
fn internal_redirects_take_their_location_as_nginx_does() {
    let (dir, root) = tree(
        "redirected",
        &[
            ("index.html", "app\n"),
            ("a.css", "b{}\n"),
            ("404.html", "gone\n"),
        ],
    );
    let seen = |url: &str| -> Vec<String> {
        ["/", "/route/x", "/index.html", "/a.css", "/missing.css"]
            .iter()
            .map(|p| {
                let (code, got, body) = call(url, "GET", p, "");
                let shown: Vec<String> = ["x-page", "x-css", "x-root"]
                    .iter()
                    .filter_map(|n| field(&got, n).map(|v| format!("{n}={v}")))
                    .collect();
                let body = String::from_utf8_lossy(&body).trim().to_string();
                format!("{p} {code} {body} {}", shown.join(" "))
            })
            .collect()
    };
    let want = [
        "/ 200 app x-page=index",
        "/route/x 200 app x-page=index",
        "/index.html 200 app x-page=index",
        "/a.css 200 b{} x-css=1",
        "/missing.css 404 gone x-root=1",
    ];
    let server = "error_page 404 /404.html;\n\
                  location / { try_files $uri $uri/ /index.html; add_header X-Root 1 always; }\n\
                  location = /index.html { add_header X-Page index; }\n\
                  location ~* \\.css$ { add_header X-Css 1; }\n";
    let nginx = duality_bench::http::find_nginx();
    as_nginx_does(&dir.0, &root, ("", server), None, nginx, &seen, &want);
}

/// `$uri` in an added field is the address answered from, as nginx's
/// after an internal redirect: a directory's index file, an error page.
#[test]
fn added_fields_name_the_uri_answered_as_nginx_does() {
    let (_dir, root) = tree(
        "add-header-uri",
        &[
            ("index.html", "i\n"),
            ("404.html", "nf\n"),
            ("a.txt", "a\n"),
        ],
    );
    let seen = |url: &str| -> Vec<String> {
        ["/", "/a.txt", "/missing"]
            .iter()
            .map(|p| {
                let (code, fields, _) = call(url, "GET", p, "");
                format!("{p} {code} {:?}", field(&fields, "x-uri"))
            })
            .collect()
    };
    let want = [
        "/ 200 Some(\"/index.html\")",
        "/a.txt 200 Some(\"/a.txt\")",
        "/missing 404 Some(\"/404.html\")",
    ];
    let args = [
        "--add-header-always",
        "X-Uri: $uri",
        "--error-page",
        "404 /404.html",
    ];
    let d = HttpServer::start(&root, &args);
    assert_eq!(seen(&d.url), want);
    assert!(d.stop().success());
    if let Some(nginx) = duality_bench::http::find_nginx() {
        let directives = "add_header X-Uri $uri always;\nerror_page 404 /404.html;\n";
        let n =
            duality_bench::http::RunningServer::nginx_in_server(&nginx, &root, directives).unwrap();
        assert_eq!(seen(&format!("http://{}", n.addr)), want, "nginx");
    }
}

/// `--error-page` in a `--location` (nginx's `error_page` there): its
/// pages replace the server's for the paths it takes.
#[test]
fn error_pages_by_location_as_nginx_does() {
    let (dir, root) = tree(
        "error-page-location",
        &[
            ("404.html", "site\n"),
            ("docs/404.html", "docs\n"),
            ("docs/a.txt", "a\n"),
        ],
    );
    let seen = |url: &str| -> Vec<String> {
        ["/missing", "/docs/missing", "/docs/a.txt"]
            .iter()
            .map(|p| {
                let (code, _, body) = call(url, "GET", p, "");
                format!("{p} {code} {}", String::from_utf8_lossy(&body).trim())
            })
            .collect()
    };
    let want = [
        "/missing 404 site",
        "/docs/missing 404 docs",
        "/docs/a.txt 200 a",
    ];
    let server = "error_page 404 /404.html;\n\
                  location /docs/ { error_page 404 /docs/404.html; }\n";
    let flags = [
        "--error-page",
        "404 /404.html",
        "--location",
        "/docs/ { --error-page '404 /docs/404.html' }",
    ];
    let nginx = duality_bench::http::find_nginx();
    let blocks = ("", server);
    as_nginx_does(&dir.0, &root, blocks, Some(&flags), nginx, &seen, &want);
}

/// gzip by location (`--gzip`, `--gzip-types` in a `--location`, nginx's
/// `gzip` and `gzip_types` there): which answers are compressed, as
/// nginx's.
#[test]
fn gzip_by_location_as_nginx_does() {
    let text = "compress me ".repeat(200);
    let (dir, root) = tree(
        "gzip-location",
        &[
            ("a.txt", &text),
            ("raw/a.txt", &text),
            ("css/s.css", &text),
            ("css/a.txt", &text),
        ],
    );
    let seen = |url: &str| -> Vec<String> {
        ["/a.txt", "/raw/a.txt", "/css/s.css", "/css/a.txt"]
            .iter()
            .map(|p| {
                let (code, got, _) = call(url, "GET", p, "Accept-Encoding: gzip\r\n");
                format!("{p} {code} {:?}", field(&got, "content-encoding"))
            })
            .collect()
    };
    let want = [
        "/a.txt 200 Some(\"gzip\")",
        "/raw/a.txt 200 None",
        "/css/s.css 200 Some(\"gzip\")",
        "/css/a.txt 200 None",
    ];
    let server = "gzip on; gzip_types text/plain; gzip_min_length 1;\n\
                  location /raw/ { gzip off; }\n\
                  location /css/ { gzip_types text/css; }\n";

    let flags = [
        "--gzip",
        "on",
        "--gzip-types",
        "text/plain",
        "--location",
        "/raw/ { --gzip off }",
        "--location",
        "/css/ { --gzip-types text/css }",
    ];
    // nginx types by its own file where it is installed (else all would
    // be its test server's default, text/html, always compressed).
    let types = match Path::new("/etc/nginx/mime.types").is_file() {
        true => "include /etc/nginx/mime.types;\n",
        false => "",
    };
    let nginx = duality_bench::http::find_nginx().filter(|_| !types.is_empty());
    as_nginx_does(
        &dir.0,
        &root,
        (types, server),
        Some(&flags),
        nginx,
        &seen,
        &want,
    );
}
