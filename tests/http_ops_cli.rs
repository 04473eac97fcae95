//! `duality http` as logrotate and init scripts drive nginx: `--pid-file`
//! written before `ready` and removed at exit, SIGUSR1 (`kill -USR1 $(cat
//! FILE)`, nginx's `-s reopen`) opening the access log again after a
//! rename, SIGHUP (nginx's reload) not killing it, SIGQUIT (nginx's `-s
//! quit`) stopping it gracefully.

mod common;

use common::http::HttpServer;
use common::TempDir;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One `GET path` on the connection `s`, which it closes; the whole answer.
fn exchange(s: impl Read + Write, path: &str) -> String {
    exchange_with(s, path, "")
}

/// [`exchange`] with more header `fields` (each line ending in CRLF).
fn exchange_with(mut s: impl Read + Write, path: &str, fields: &str) -> String {
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// One `GET path` on its own connection; the status code.
fn get(url: &str, path: &str) -> u16 {
    let addr = url.strip_prefix("http://").unwrap();
    exchange(TcpStream::connect(addr).unwrap(), path)[9..12]
        .parse()
        .unwrap()
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

fn within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

#[test]
fn sigusr1_reopens_the_access_log_named_by_the_pid_file() {
    let dir = TempDir::new("ops");
    let root = dir.0.join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    let log = dir.0.join("access.log");
    let rotated = dir.0.join("access.log.1");
    let pid_file = dir.0.join("http.pid");
    let server = HttpServer::start(
        &root,
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--pid-file",
            pid_file.to_str().unwrap(),
        ],
    );
    // There by the time `ready` is printed.
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(get(&server.url, "/a.txt"), 200);
    assert!(within(Duration::from_secs(3), || lines(&log) == 1));
    std::fs::rename(&log, &rotated).unwrap();
    // SAFETY: kill(2) with a plain pid and signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    // The reopen comes through the signal thread: wait for the new file.
    assert!(within(Duration::from_secs(3), || log.exists()));
    assert_eq!(get(&server.url, "/missing"), 404);
    assert!(within(Duration::from_secs(3), || lines(&log) == 1));
    assert_eq!(lines(&rotated), 1);
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("\"GET /missing HTTP/1.1\" 404"));
    // SIGHUP: nothing to reload; still serving.
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get(&server.url, "/a.txt"), 200);
    // SIGQUIT stops it gracefully (status 0) and the pid file goes.
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGQUIT) }, 0);
    assert!(within(Duration::from_secs(10), || !pid_file.exists()));
    assert!(server.stop().success());
}

#[test]
fn an_unwritable_pid_file_is_a_clear_error() {
    let dir = TempDir::new("ops-bad");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["http", "--listen", "127.0.0.1:0", "--root"])
        .arg(&dir.0)
        .args(["--pid-file", "/nonexistent-dir/http.pid"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--pid-file /nonexistent-dir/http.pid"),
        "{err}"
    );
}

/// `--listen` takes what nginx's `listen` takes: a host name (every address
/// it resolves to) and several listeners; a name that does not resolve is
/// refused with the reason.
#[test]
fn listen_takes_host_names_and_repeats() {
    let dir = TempDir::new("ops-listen");
    std::fs::write(dir.0.join("a.txt"), "a\n").unwrap();
    // The free port may be taken again before the server binds it (another
    // test's connection, or ::1's port under the same name): another one.
    let (p, server) = (0..5)
        .find_map(|_| {
            let p = common::free_port();
            let by_name = format!("localhost:{p}");
            HttpServer::try_start(&dir.0, &["--listen", &by_name])
                .ok()
                .map(|s| (p, s))
        })
        .expect("no free port took the named listener in 5 tries");
    // The first listener (the helper's 127.0.0.1:0) and the named one.
    assert_eq!(get(&server.url, "/a.txt"), 200);
    assert_eq!(get(&format!("http://127.0.0.1:{p}"), "/a.txt"), 200);
    drop(server);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["http", "--listen", "no-such-host.invalid:80", "--root"])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not resolve"), "{err}");
}

/// A closed stderr and stdout (a hung-up terminal, a log collector that
/// died) do not kill the server: the line SIGHUP logs is dropped (it panicked
/// on the failed write, exit 101, as an ssh logout would), and the graceful
/// stop still exits 0.
#[test]
fn a_closed_stderr_does_not_kill_it() {
    let dir = TempDir::new("ops-stderr");
    std::fs::write(dir.0.join("a.txt"), "a\n").unwrap();
    let args = ["http", "--listen", "127.0.0.1:0", "--root"].map(std::ffi::OsStr::new);
    let (mut child, ready) = common::spawn_ready(&[&args[..], &[dir.0.as_os_str()]].concat());
    let url = ready.trim().strip_prefix("ready ").unwrap().to_string();
    // Both pipes' read ends closed: every later write to them fails.
    drop(child.stderr.take());
    let pid = child.id() as i32;
    assert_eq!(get(&url, "/a.txt"), 200);
    // SAFETY: kill(2) with a plain pid and signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "died on SIGHUP");
    assert_eq!(get(&url, "/a.txt"), 200);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "no exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

/// A second stop signal cuts the grace short: a client that sends half a
/// head would hold the stop for all of `--shutdown-grace` (20 s here).
#[test]
fn a_second_signal_stops_at_once() {
    let dir = TempDir::new("ops-second");
    std::fs::write(dir.0.join("a.txt"), "a\n").unwrap();
    let server = HttpServer::start(&dir.0, &["--shutdown-grace", "20"]);
    let addr = server.url.strip_prefix("http://").unwrap().to_string();
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET /a.txt HTTP/1.1\r\nHo").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let pid = server.pid() as i32;
    let t = Instant::now();
    // SAFETY: kill(2) with a plain pid and signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGQUIT) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    // `stop` sends the second: SIGTERM.
    assert!(server.stop().success());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// A file that shrinks while its body goes out ends the connection short
/// (the length promised cannot be kept) and says so on stderr, as nginx's
/// error log does ("sendfile() reported that … was truncated"): it was
/// seen only as a short byte count in the access log.
#[test]
fn a_file_that_shrank_while_sent_is_said() {
    let dir = TempDir::new("ops-shrank");
    let file = dir.0.join("huge.bin");
    std::fs::write(&file, vec![7u8; 24 << 20]).unwrap();
    let args = ["http", "--listen", "127.0.0.1:0", "--root"].map(std::ffi::OsStr::new);
    let (child, ready) = common::spawn_ready(&[&args[..], &[dir.0.as_os_str()]].concat());
    let addr = ready
        .trim()
        .strip_prefix("ready http://")
        .unwrap()
        .to_string();
    let mut c = TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 1 << 20];
    c.read_exact(&mut got).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(4 << 20).unwrap();
    c.read_to_end(&mut got).unwrap();
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/huge.bin: the file ended after") && err.contains("of the 25165824 body"),
        "{err}"
    );
}

/// Whether this test runs as root (from `/proc`, its effective user id).
fn running_as_root() -> bool {
    uid_fields(std::process::id()).get(1) == Some(&0)
}

/// The `Uid:` line of `/proc/PID/status`: real, effective, saved, file
/// system user ids.
fn uid_fields(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line[4..]
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect()
}

/// `--user` (nginx's `user`): started as root, the server binds, then
/// serves as that user, so a file only root may read is 403 and none of
/// the process's user ids is root's; an unknown user stops the start. Not
/// started as root, the flag is ignored (the server runs as who started
/// it, which may read its own files).
#[test]
fn user_serves_with_that_users_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("ops-user");
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(&dir.0, 0o755).unwrap();
    for (name, m) in [("pub.txt", 0o644), ("own.txt", 0o600)] {
        std::fs::write(dir.0.join(name), "x\n").unwrap();
        mode(&dir.0.join(name), m).unwrap();
    }
    let server = HttpServer::start(&dir.0, &["--user", "nobody"]);
    assert_eq!(get(&server.url, "/pub.txt"), 200);
    if !running_as_root() {
        assert_eq!(get(&server.url, "/own.txt"), 200);
        return;
    }
    assert_eq!(get(&server.url, "/own.txt"), 403);
    let ids = uid_fields(server.pid());
    assert!(ids.len() == 4 && !ids.contains(&0), "{ids:?}");
    assert!(server.stop().success());
    // A start refused: what it said instead of a ready line.
    let refused = |user: &str| match HttpServer::try_start(&dir.0, &["--user", user]) {
        Ok(_) => panic!("--user {user} started"),
        Err(said) => said,
    };
    let err = refused("no-such-user-x");
    assert!(
        err.contains("--user no-such-user-x: can't find the user"),
        "{err}"
    );
    // A root the user cannot search (every request would be 403).
    mode(&dir.0, 0o700).unwrap();
    let err = refused("nobody");
    assert!(err.contains("--user nobody cannot open --root"), "{err}");
}

/// One `GET path` over the Unix socket at `sock`; the whole answer.
fn get_unix(sock: &Path, path: &str) -> String {
    exchange(std::os::unix::net::UnixStream::connect(sock).unwrap(), path)
}

/// `--listen unix:PATH`, nginx's `listen unix:`: beside a TCP listener or
/// alone (then the ready line names it), a socket anyone may connect to
/// (0666, as nginx's), `unix:` as the access log's client address, the
/// socket removed at exit; any other file at the path stops the start and
/// is left as it was.
#[test]
fn listen_takes_a_unix_socket() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = TempDir::new("ops-unix");
    let root = dir.0.join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "unix a\n").unwrap();
    let sock = dir.0.join("h.sock");
    let log = dir.0.join("access.log");
    let listen = format!("unix:{}", sock.display());
    let server = HttpServer::start(
        &root,
        &["--listen", &listen, "--access-log", log.to_str().unwrap()],
    );
    let meta = std::fs::metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);
    let answer = get_unix(&sock, "/a.txt");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.ends_with("\r\n\r\nunix a\n"), "{answer}");
    assert_eq!(get(&server.url, "/a.txt"), 200);
    assert!(within(Duration::from_secs(5), || lines(&log) == 2));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.lines().next().unwrap().starts_with("unix: - - ["),
        "{logged}"
    );
    assert!(
        logged
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("127.0.0.1 - - ["),
        "{logged}"
    );
    assert!(server.stop().success());
    assert!(!sock.exists(), "the socket outlived the server");

    // Alone: the ready line names the socket.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["http", "--model", "sped", "--listen", &listen, "--root"])
        .arg(&root)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), format!("ready {listen}"));
    assert!(get_unix(&sock, "/a.txt").starts_with("HTTP/1.1 200 "));
    assert!(common::http::terminate(&mut child).success());
    assert!(!sock.exists());

    // A file that is not a socket is not replaced.
    std::fs::write(&sock, "keep me").unwrap();
    let err = match HttpServer::try_start(&root, &["--listen", &listen]) {
        Ok(_) => panic!("started over a regular file"),
        Err(said) => said,
    };
    assert!(err.contains("it exists and is not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&sock).unwrap(), "keep me");
}

/// `--real-ip-from` (nginx's realip, for a server behind a proxy): the
/// access log writes the client a trusted proxy names (here over the Unix
/// socket, in X-Forwarded-For), the connection's own address for anyone
/// else, and for a trusted request that names none.
#[test]
fn the_access_log_takes_the_client_a_trusted_proxy_names() {
    let dir = TempDir::new("ops-real-ip");
    let root = dir.0.join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    let sock = dir.0.join("h.sock");
    let log = dir.0.join("access.log");
    let listen = format!("unix:{}", sock.display());
    let server = HttpServer::start(
        &root,
        &[
            "--listen",
            &listen,
            "--access-log",
            log.to_str().unwrap(),
            "--real-ip-from",
            "unix:",
            "--real-ip-from",
            "10.0.0.0/8",
            "--real-ip-header",
            "X-Forwarded-For",
            "--real-ip-recursive",
            "on",
        ],
    );
    let xff = "X-Forwarded-For: 203.0.113.9, 198.51.100.7, 10.0.0.1\r\n";
    let unix = || std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let tcp = || TcpStream::connect(server.url.strip_prefix("http://").unwrap()).unwrap();
    assert!(exchange_with(unix(), "/a.txt", xff).starts_with("HTTP/1.1 200 "));
    assert!(exchange_with(tcp(), "/a.txt", xff).starts_with("HTTP/1.1 200 "));
    assert!(exchange_with(unix(), "/nope", "").starts_with("HTTP/1.1 404 "));
    assert!(
        exchange_with(unix(), "/a.txt", "X-Forwarded-For: [2001:db8::5]:443\r\n")
            .starts_with("HTTP/1.1 200 ")
    );
    assert!(within(Duration::from_secs(5), || lines(&log) == 4));
    let logged = std::fs::read_to_string(&log).unwrap();
    let clients: Vec<&str> = logged
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        clients,
        ["198.51.100.7", "127.0.0.1", "unix:", "2001:db8::5"],
        "{logged}"
    );
    assert!(server.stop().success());
}
