//! `duality bench http --quick` end to end: a real server process, every
//! point measured and written to the results files, with the server's CPU
//! time per request beside requests/s.

mod common;

#[test]
fn quick_http_run_writes_every_point_with_server_cpu() {
    let (r, file) = common::bench::run(
        &[
            "http",
            "--quick",
            "--sizes",
            "100",
            "--servers",
            "duality-sped,duality-knot-c:1",
            "--client-threads",
            "1",
        ],
        "http.json",
    );
    let out = &r.out.0;
    let rows = file.as_array().unwrap();
    // Every point of each server, the second one sized by name (one loop).
    for server in ["duality-sped", "duality-knot-c:1"] {
        let clients: Vec<u64> = rows
            .iter()
            .filter(|r| r["server"] == server)
            .map(|r| r["clients"].as_u64().unwrap())
            .collect();
        assert_eq!(clients, [1, 16, 256], "{server}: {rows:?}");
    }
    assert_eq!(rows.len(), 6, "{rows:?}");
    for r in rows {
        assert_eq!(r["file"], "100B");
        let rps = r["requests_per_sec"].as_f64().unwrap();
        assert!(rps > 0.0, "{r}");
        // 100-byte bodies: Mbit/s follows from requests/s.
        let mbit = r["mbit_per_sec"].as_f64().unwrap();
        assert!((mbit - rps * 800.0 / 1e6).abs() < 0.01 * mbit + 0.01, "{r}");
        // The server did work in the window: some CPU per request, and
        // less than a whole window of both cores per request.
        let us = r["cpu_us_per_request"].as_f64().unwrap();
        assert!(us > 0.0 && us < 1e6, "{r}");
    }
    let md = std::fs::read_to_string(out.join("http.md")).unwrap();
    let command = md.lines().find(|l| l.starts_with("Command: `"));
    assert!(
        command.is_some_and(|l| l.contains("bench http") && l.contains("--sizes 100")),
        "{md}"
    );
    assert!(
        md.contains("**100B file, server CPU µs per request**"),
        "{md}"
    );
    let csv = std::fs::read_to_string(out.join("http.csv")).unwrap();
    assert!(
        csv.starts_with("server,file,clients,requests_per_sec,mbit_per_sec,cpu_us_per_request,")
    );
    assert_eq!(csv.lines().count(), 7, "{csv}");
}

/// Scripts (`scripts/wrk-crosscheck.sh`) run nginx with the experiment's
/// own configuration, printed by a hidden flag.
#[test]
fn the_experiments_nginx_configuration_is_printed_for_scripts() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
            .args(["bench", "http", "--nginx-config", "2"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[
        "--addr",
        "127.0.0.1:18999",
        "--nginx-root",
        "/srv/www",
        "--nginx-prefix",
        "/tmp/p",
    ]);
    assert!(out.status.success());
    let conf = String::from_utf8(out.stdout).unwrap();
    for want in [
        "worker_processes 2;",
        "listen 127.0.0.1:18999 backlog=4096;",
        "root /srv/www;",
        "pid /tmp/p/nginx.pid;",
        "open_file_cache_valid 1s;",
    ] {
        assert!(conf.contains(want), "{want} missing from\n{conf}");
    }
    let out = run(&["--addr", "127.0.0.1:18999"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nginx-root"));
}

/// `--clients` and `--seconds` given beside `--quick` win over its presets.
#[test]
fn quick_takes_the_client_counts_given() {
    let (_r, file) = common::bench::run(
        &[
            "http",
            "--quick",
            "--clients",
            "2",
            "--seconds",
            "0.2",
            "--sizes",
            "100",
            "--servers",
            "duality-sped",
            "--client-threads",
            "1",
        ],
        "http.json",
    );
    let clients: Vec<u64> = file
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["clients"].as_u64().unwrap())
        .collect();
    assert_eq!(clients, [2]);
}

/// File sizes past the temp dir's free space (`--sizes 99999999999999` was
/// built in memory until the machine ran out), client counts past the file
/// limit (1,000,000 was cut to 16,384 with a note in the results only) and
/// zero threads are refused before anything runs.
#[test]
fn sizes_and_clients_past_the_machine_are_refused() {
    let out = common::TempDir::new("bench-http-refused");
    let res = out.path().join("r");
    common::bench::refused(
        &[
            "http",
            "--quick",
            "--sizes",
            "100,99999999999999",
            "--out",
            res.to_str().unwrap(),
        ],
        &["--sizes 100,99999999999999: needs 90.9 TiB in ", "free"],
    );
    common::bench::refused(
        &["http", "--quick", "--clients", "1,1000000"],
        &["--clients 1000000: ", "(ulimit -n)", "at most "],
    );
    common::bench::refused(
        &["http", "--quick", "--client-threads", "0"],
        &["--client-threads", "must be at least 1"],
    );
    assert!(!res.exists(), "a refused run made its results directory");
}

/// The parent pid of `pid`, from `/proc`.
fn ppid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A duality server killed mid-run gave `0 (761 err)` rows, a ratio of
/// 0.00 and 0.00 µs of CPU per request, and the run exited 0. Now its
/// points are failed (JSON null, the reason beside them) and the run fails
/// once the results are written, naming the server and how it ended.
#[test]
fn a_server_killed_mid_run_fails_its_points_and_the_run() {
    let out = common::TempDir::new("bench-http-killed");
    let bench = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
        .args([
            "bench",
            "http",
            "--servers",
            "duality-sped",
            "--clients",
            "1,2",
        ])
        .args([
            "--seconds",
            "0.3",
            "--warmup",
            "0",
            "--repeat",
            "1",
            "--sizes",
            "100",
        ])
        .args(["--client-threads", "1", "--json", "--out"])
        .arg(out.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let me = bench.id() as i32;
    // Its server: the child running `http --listen`.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let server = loop {
        let found = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .find(|&p| {
                ppid(p) == Some(me)
                    && std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--listen"))
            });
        if let Some(p) = found {
            break p;
        }
        assert!(std::time::Instant::now() < until, "no server started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // During the warm-up round, before any point.
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: kill(2) on the bench's server, found above by its parent.
    assert_eq!(unsafe { libc::kill(server, libc::SIGKILL) }, 0);
    let o = bench.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "duality-sped exited during the run (killed by signal 9 (SIGKILL)): 100B x1, 100B x2"
        ),
        "{err}"
    );
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("http.json")).unwrap())
            .unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in rows {
        assert!(r["requests_per_sec"].is_null(), "{r}");
        assert!(r["cpu_us_per_request"].is_null(), "{r}");
        assert_eq!(r["failed"], "exited: killed by signal 9 (SIGKILL)", "{r}");
    }
    let md = std::fs::read_to_string(out.path().join("http.md")).unwrap();
    assert!(md.contains("| 1 | - (exited)"), "{md}");
}
