//! `duality http --gzip …` as a user runs it: the flags in `--help` and
//! checked at start-up, and curl's `--compressed` (its own zlib) as the
//! client, cross-checking what the in-process tests of
//! `crates/http/tests/http_gzip.rs` decode with flate2. Without curl the
//! cross-check prints a line and passes (`.ci/run` installs curl).

mod common;

use common::http::HttpServer;
use common::TempDir;
use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

type Server = HttpServer;

/// `duality` with `args`, killed after 10 s (a bad flag wrongly accepted
/// would start a server).
fn duality(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

#[test]
fn gzip_flags_are_documented_and_checked() {
    let help = duality(&["http", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--gzip <on|off>",
        "--gzip-level",
        "--gzip-min-length",
        "--gzip-max-size",
        "--gzip-static <on|off>",
        "--gzip-cache",
        "--gzip-http-version <1.0|1.1>",
        "--symlinks <inside-root|any>",
        "--offload",
        "--cpu-threads <N>",
        "--handoff <always|adaptive>",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    let dir = TempDir::new("flags");
    let root = dir.0.to_str().unwrap();
    for bad in [
        ["--gzip", "maybe"],
        ["--gzip-level", "0"],
        ["--gzip-level", "10"],
        ["--gzip-static", "yes"],
        ["--offload", "sometimes"],
        ["--gzip-cache", "lots"],
        ["--gzip-min-length", "1k"],
        ["--cpu-threads", "0"],
        ["--cpu-threads", "many"],
        ["--handoff", "sometimes"],
        ["--gzip-http-version", "2"],
        ["--symlinks", "on"],
        ["--max-conns", "0"],
    ] {
        let mut args = vec!["http", "--listen", "127.0.0.1:0", "--root", root];
        args.extend_from_slice(&bad);
        let o = duality(&args);
        assert!(!o.status.success(), "{bad:?} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(bad[0]), "{bad:?}: {err}");
    }
}

fn curl_present() -> bool {
    match Command::new("curl").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        _ => {
            println!("curl not found: skipping the curl --compressed cross-check");
            false
        }
    }
}

/// `curl` with `args`; (head, body).
fn curl(args: &[&str]) -> (String, Vec<u8>) {
    let o = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--max-time",
            "10",
            "--dump-header",
            "-",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let end = o
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    (
        String::from_utf8_lossy(&o.stdout[..end]).to_ascii_lowercase(),
        o.stdout[end..].to_vec(),
    )
}

fn text(len: usize, seed: &str) -> Vec<u8> {
    let line = format!("{seed}: lorem ipsum dolor sit amet {{ color: red }}\n");
    line.as_bytes().iter().copied().cycle().take(len).collect()
}

#[test]
fn curl_compressed_cross_check() {
    if !curl_present() {
        return;
    }
    let dir = TempDir::new("curl");
    let page = text(150_000, "page");
    let tiny = text(100, "tiny");
    let marker = text(5000, "from the .gz");
    std::fs::write(dir.0.join("page.html"), &page).unwrap();
    std::fs::write(dir.0.join("tiny.txt"), &tiny).unwrap();
    std::fs::write(dir.0.join("s.css"), text(5000, "identity")).unwrap();
    std::fs::write(dir.0.join("s.css.gz"), gzip(&marker)).unwrap();
    let old = SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(dir.0.join("s.css"))
        .unwrap()
        .set_modified(old)
        .unwrap();

    for offload in ["inline", "pool", "adaptive"] {
        let s = Server::start(&dir.0, &["--gzip", "on", "--offload", offload]);
        let u = |p: &str| format!("{}{p}", s.url);
        let (head, body) = curl(&["--compressed", &u("/page.html")]);
        assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
        assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
        assert!(body == page, "curl's gunzip differs ({offload})");
        let (head, body) = curl(&[&u("/page.html")]);
        assert!(!head.contains("content-encoding"), "{head}");
        assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
        assert!(body == page);
        let (head, body) = curl(&["--compressed", &u("/tiny.txt")]);
        assert!(
            !head.contains("content-encoding") && !head.contains("vary"),
            "{head}"
        );
        assert_eq!(body, tiny);
        // gzip_static, decoded by curl.
        let (head, body) = curl(&["--compressed", &u("/s.css")]);
        assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
        assert!(body == marker, "the .gz was not served");
    }
    // HTTP/1.0 gets the identity body (with Vary), as nginx's
    // gzip_http_version 1.1, unless --gzip-http-version 1.0.
    let s = Server::start(&dir.0, &["--gzip", "on"]);
    let (head, body) = curl(&["--http1.0", "--compressed", &format!("{}/page.html", s.url)]);
    assert!(!head.contains("content-encoding"), "{head}");
    assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
    assert!(body == page);
    let s = Server::start(&dir.0, &["--gzip", "on", "--gzip-http-version", "1.0"]);
    let (head, body) = curl(&["--http1.0", "--compressed", &format!("{}/page.html", s.url)]);
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert!(body == page);
    // --gzip-static off: the .gz is ignored, the file compressed.
    let s = Server::start(&dir.0, &["--gzip", "on", "--gzip-static", "off"]);
    let (head, body) = curl(&["--compressed", &format!("{}/s.css", s.url)]);
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert_eq!(body, text(5000, "identity"));
    // Off by default, .gz files too.
    let s = Server::start(&dir.0, &[]);
    let (head, body) = curl(&["--compressed", &format!("{}/page.html", s.url)]);
    assert!(
        !head.contains("content-encoding") && !head.contains("vary"),
        "{head}"
    );
    assert!(body == page);
    let (head, body) = curl(&["--compressed", &format!("{}/s.css", s.url)]);
    assert!(!head.contains("content-encoding"), "{head}");
    assert_eq!(body, text(5000, "identity"));
    // --gzip-static on alone (nginx's gzip_static without gzip): the .gz is
    // served, nothing is compressed, and only a file with a .gz beside it
    // varies (as nginx's gzip_vary there).
    let s = Server::start(&dir.0, &["--gzip-static", "on"]);
    let (head, body) = curl(&["--compressed", &format!("{}/s.css", s.url)]);
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
    assert!(body == marker, "the .gz was not served");
    let (head, body) = curl(&["--compressed", &format!("{}/page.html", s.url)]);
    assert!(!head.contains("content-encoding"), "{head}");
    assert!(!head.contains("vary"), "{head}");
    assert!(body == page);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// `--symlinks any` lets a link under the root lead out of it (nginx's
/// `disable_symlinks off`, for release layouts); the default refuses it.
#[test]
fn symlinks_out_of_the_root_follow_the_flag() {
    if !curl_present() {
        return;
    }
    let dir = TempDir::new("symlinks");
    let root = dir.0.join("www");
    let shared = dir.0.join("shared");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("upload.txt"), "uploaded").unwrap();
    std::os::unix::fs::symlink("../shared", root.join("uploads")).unwrap();
    let status = |s: &Server, path: &str| {
        let (head, body) = curl(&[&format!("{}{path}", s.url)]);
        (head.lines().next().unwrap_or("").to_owned(), body)
    };
    let s = Server::start(&root, &[]);
    let (line, _) = status(&s, "/uploads/upload.txt");
    assert!(line.contains(" 403 "), "{line}");
    let s = Server::start(&root, &["--symlinks", "any"]);
    let (line, body) = status(&s, "/uploads/upload.txt");
    assert!(line.contains(" 200 "), "{line}");
    assert_eq!(body, b"uploaded");
    // A request cannot climb out by itself (curl would squash `..`).
    let (line, _) = status(&s, "/%2e%2e/shared/upload.txt");
    assert!(line.contains(" 400 "), "{line}");
}
