//! `duality bench …` refuses what it cannot do before it measures anything,
//! in one line that names the flag or path at fault; a server that fails
//! to start is reported with its own last words.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The shortest `bench models` run that still measures: one short window,
/// no warm-up, a tiny data set.
const SHORTEST_MODELS_RUN: [&str; 8] = [
    "--seconds",
    "0.05",
    "--windows",
    "1",
    "--warmup",
    "0",
    "--records",
    "100",
];

/// Runs `duality bench ARGS…`; fails the test if it is still running after
/// 20 s (these all fail at once; the measurements they would start, if
/// they did not, take longer).
fn bench(args: &[&str], env: &[(&str, &std::path::Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_duality"));
    c.arg("bench").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    within_20s(c, args)
}

/// [`bench`] under `ulimit -n nofile` (soft and hard: it cannot raise it).
fn bench_under_ulimit(nofile: u64, args: &[&str]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" bench \"$@\""))
        .arg(env!("CARGO_BIN_EXE_duality"))
        .args(args);
    within_20s(c, args)
}

fn within_20s(mut c: Command, args: &[&str]) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("duality bench {args:?} still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts a failure (status 1 or clap's 2) whose stderr names every one of `words`.
fn fails_saying(o: &Output, words: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "{:?}: {err}",
        o.status
    );
    for w in words {
        assert!(err.contains(w), "{w:?} not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_server_that_cannot_start_says_why() {
    // A socket path past the kernel's 108 bytes: the server's own message.
    let long = common::TempDir::new(&"x".repeat(90));
    let out = common::TempDir::new("bench-err");
    let out = out.path().join("r");
    let o = bench(
        &[
            "models",
            "--quick",
            "--models",
            "sped",
            "--no-peers",
            "--out",
            out.to_str().unwrap(),
        ],
        &[("TMPDIR", long.path())],
    );
    fails_saying(
        &o,
        &[
            "duality sped did not start",
            "more than a Unix socket address holds",
        ],
    );
}

#[test]
fn store_and_balance_check_their_models_up_front() {
    let o = bench(&["store", "--quick", "--model", "foo"], &[]);
    fails_saying(&o, &["--model", "unknown model \"foo\""]);
    let o = bench(&["balance", "--quick", "--loops", "5000"], &[]);
    fails_saying(&o, &["--loops 5000", "1024"]);
}

/// An `--out` that cannot be a directory is refused before a 30-second
/// window starts, naming the path.
#[test]
fn an_unusable_out_is_refused_before_measuring() {
    let tmp = common::TempDir::new("bench-out");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let file = file.to_str().unwrap();
    let said = format!("cannot write results to {file}: not a directory");
    let long = ["--seconds", "30", "--out", file];
    let o = bench(
        &[
            &["models", "--models", "sped", "--no-peers", "--clients", "1"],
            &long[..],
        ]
        .concat(),
        &[],
    );
    fails_saying(&o, &[&said]);
    let o = bench(
        &[
            &[
                "models",
                "--service",
                "echo",
                "--models",
                "sped",
                "--clients",
                "1",
            ],
            &long[..],
        ]
        .concat(),
        &[],
    );
    fails_saying(&o, &[&said]);
    let o = bench(&["store", "--no-peers", "--out", file], &[]);
    fails_saying(&o, &[&said]);
    let o = bench(
        &[
            "tasks",
            "--runtimes",
            "os-threads",
            "--seconds",
            "30",
            "--out",
            file,
        ],
        &[],
    );
    fails_saying(&o, &[&said]);
    let o = bench(&["http", "--seconds", "30", "--out", "/proc/nope"], &[]);
    fails_saying(&o, &["cannot write results to /proc/nope: "]);
}

/// Seconds a `Duration` cannot hold, or that are no window, are refused by
/// the flag's name (they panicked).
#[test]
fn seconds_out_of_range_name_their_flag() {
    for (args, flag) in [
        (&["models", "--seconds", "inf"][..], "'--seconds"),
        (&["models", "--warmup", "nan"], "'--warmup"),
        (&["models", "--warmup", "1e300"], "'--warmup"),
        (&["threads", "--seconds", "inf"], "'--seconds"),
        (
            &["models", "--service", "echo", "--seconds", "inf"],
            "'--seconds",
        ),
        (&["colors", "--seconds", "1e300"], "'--seconds"),
        (&["offload", "--probe-seconds", "1e300"], "'--probe-seconds"),
        (&["fairness", "--warmup=-1"], "'--warmup"),
    ] {
        fails_saying(&bench(args, &[]), &[flag]);
    }
    // The range said is the range taken: "from 0" was said of flags
    // that refuse 0, and windows too short for CPU's clock ticks ran.
    for args in [
        &["models", "--seconds", "nan"][..],
        &["models", "--seconds", "0.005"],
        &["models", "--service", "echo", "--seconds", "0"],
        &["threads", "--seconds", "0"],
        &["http", "--seconds", "0.01"],
    ] {
        fails_saying(
            &bench(args, &[]),
            &["'--seconds", "from 0.05 to 86400 (a day)", "CPU time"],
        );
    }
    for args in [
        &["soak", "--seconds", "0"][..],
        &["tasks", "--seconds", "nan"],
    ] {
        fails_saying(
            &bench(args, &[]),
            &["'--seconds", "above 0 and at most 86400"],
        );
    }
}

/// `nginx-99999w` forked workers until nginx failed and left 754 behind;
/// worker (and loop) counts past what can run are refused up front.
#[test]
fn worker_counts_past_the_cap_are_refused_up_front() {
    for (server, said) in [
        (
            "nginx-99999w",
            "99999 nginx workers is more than nginx runs (at most 1024)",
        ),
        (
            "duality-knot-c:5000",
            "5000 loops is more threads than the server supports",
        ),
    ] {
        let o = bench(&["http", "--servers", server, "--out", "/proc/nope"], &[]);
        fails_saying(&o, &[server, said]);
    }
    let o = bench(&["offload", "--nginx-workers", "5000"], &[]);
    fails_saying(&o, &["--nginx-workers", "5000"]);
}

/// A fake `nginx` first on `PATH`, with `body` as its script and `mode` as
/// its permissions; returns the directory to put on `PATH` (kept alive by
/// the returned guard).
fn fake_nginx(body: &str, mode: u32) -> (common::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::TempDir::new("fake-nginx");
    let nginx = dir.path().join("nginx");
    std::fs::write(&nginx, body).unwrap();
    std::fs::set_permissions(&nginx, std::fs::Permissions::from_mode(mode)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (dir, path)
}

/// An nginx whose `nginx -v` never returns hung `bench http` forever: now
/// unusable, said so with the program's path. One that cannot be run (not
/// executable) first on `PATH` said only "Permission denied (os error
/// 13)", then failed the run though another nginx was installed: now
/// passed over.
#[test]
fn an_nginx_that_hangs_or_cannot_run_is_named_and_left_out() {
    // `bench http` with only nginx, found first on `path`.
    let nginx_only = |path: &std::ffi::OsStr| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_duality"));
        c.args([
            "bench",
            "http",
            "--servers",
            "nginx-1w",
            "--out",
            "/proc/nope",
        ])
        .env("PATH", path);
        c
    };
    let (dir, path) = fake_nginx("#!/bin/sh\nexec sleep 1000\n", 0o755);
    let t0 = Instant::now();
    let o = within_20s(nginx_only(path.as_ref()), &["http", "(hanging nginx)"]);
    assert!(t0.elapsed() < Duration::from_secs(15));
    let nginx = dir.path().join("nginx");
    fails_saying(
        &o,
        &[
            &format!(
                "nginx cannot be used (`{} -v`: gave no answer within 5 s)",
                nginx.display()
            ),
            "every server asked for is nginx",
        ],
    );
    // A file that cannot be run is passed over, as a shell does: the run
    // goes on with the nginx installed (and fails here on --out only), or
    // says none is.
    let (_dir, path) = fake_nginx("#!/bin/sh\necho nginx version: nginx/1.0 >&2\n", 0o644);
    let o = within_20s(
        nginx_only(path.as_ref()),
        &["http", "(non-executable nginx)"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("Permission denied"), "{err}");
    let installed = duality_bench::http::find_nginx().is_some();
    fails_saying(
        &o,
        &[match installed {
            true => "cannot write results to /proc/nope",
            false => "nginx",
        }],
    );
}

/// Under a hard descriptor limit below 16,384, memcached was still given
/// `-c 16384`, exited at start ("failed to set rlimit for open files"),
/// and the rows measured before it were thrown away.
#[test]
fn memcached_starts_under_a_low_hard_descriptor_limit() {
    if !std::path::Path::new("/usr/bin/memcached").exists() {
        eprintln!("memcached is not installed: skipped");
        return;
    }
    let tmp = common::TempDir::new("bench-mc-nofile");
    let out = tmp.path().join("r");
    let args = [
        &["models", "--models", "sped", "--clients", "1"][..],
        &SHORTEST_MODELS_RUN,
        &["--json", "--out", out.to_str().unwrap()],
    ]
    .concat();
    let o = bench_under_ulimit(4096, &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let servers: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["server"].as_str().unwrap())
        .collect();
    assert!(servers.contains(&"memcached -t 1"), "{servers:?}");
}

/// `duality bench … | head -1`: the reader gone, printing panicked ("failed
/// printing to stdout: Broken pipe"); now the output ends quietly.
#[test]
fn a_closed_stdout_ends_the_output_quietly() {
    let tmp = common::TempDir::new("bench-pipe");
    let out = tmp.path().join("r");
    let args = [
        &["models", "--models", "sped", "--no-peers", "--clients", "1"],
        &SHORTEST_MODELS_RUN[..],
        &["--out", out.to_str().unwrap()],
    ]
    .concat();
    let mut child = common::bench::spawn(&args);
    // The reader goes before anything is printed.
    drop(child.stdout.take());
    let o = common::bench::wait_within(child, &args, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}: {err}", o.status);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.join("results.json").exists());
}

/// Both pipes closed (a terminal hung up, a log collector gone) before a
/// bench that prints its table on stdout and its progress on stderr: the
/// run still ends 0 with its results files written. `bench balance`
/// printed with `println!`/`eprintln!`, which panicked on the first line.
#[test]
fn closed_stdout_and_stderr_lose_no_results() {
    let tmp = common::TempDir::new("bench-pipes");
    let out = tmp.path().join("r");
    let args = ["balance", "--quick", "--loops", "2", "--seconds", "0.4"];
    let args = [&args[..], &["--out", out.to_str().unwrap()]].concat();
    let mut child = common::bench::spawn(&args);
    drop(child.stdout.take());
    drop(child.stderr.take());
    let o = common::bench::wait_within(child, &args, Duration::from_secs(60));
    assert!(o.status.success(), "{:?}", o.status);
    assert!(out.join("balance.json").exists());
}

/// `bench models` and `bench threads` bound `--clients` by the real
/// descriptor limit, as `bench http` does: a fixed 8,000 let 1,500 clients
/// start under `ulimit -n 1024` and fail midway (593 requests failed),
/// with a message that claimed 20,000 files whatever the limit.
#[test]
fn client_counts_past_the_descriptor_limit_are_refused() {
    let tmp = common::TempDir::new("bench-nofile");
    let out = tmp.path().join("r");
    let out = out.to_str().unwrap();
    let said = [
        "--clients 1500: ",
        "1024 files here (ulimit -n), 256 kept free; at most 768",
    ];
    for args in [
        &[
            "models",
            "--models",
            "sped",
            "--no-peers",
            "--clients",
            "1,1500",
        ][..],
        &[
            "models",
            "--service",
            "echo",
            "--models",
            "sped",
            "--clients",
            "1500",
        ],
        &[
            "models",
            "--sweep",
            "--models",
            "amped",
            "--sweep-clients",
            "1500",
        ],
        &["threads", "--clients", "1500"],
    ] {
        let o = bench_under_ulimit(1024, &[args, &["--quick", "--out", out]].concat());
        fails_saying(&o, &said);
        assert!(!tmp.path().join("r").exists(), "{args:?} made its results");
    }
}

/// The echo service refuses what it would not honour, and client counts
/// the cache refuses too.
#[test]
fn echo_refuses_flags_it_does_not_honour() {
    let echo = ["models", "--service", "echo"];
    for (extra, said) in [
        (&["--clients", "0"][..], "--clients"),
        (&["--clients", "1,20000"], "--clients 20000"),
        (&["--windows", "0"], "'--windows"),
        (
            &["--syscalls"],
            "--syscalls does not apply to --service echo",
        ),
        (&["--tcp"], "--tcp does not apply to --service echo"),
        (
            &["--io", "epoll,uring"],
            "--io does not apply to --service echo",
        ),
        (&["--client-io", "uring"], "--client-io does not apply"),
        (&["--keys", "zipf"], "--keys does not apply"),
        (
            &["--no-peers"],
            "--no-peers (the echo service has none) does not apply",
        ),
    ] {
        fails_saying(&bench(&[&echo[..], extra].concat(), &[]), &[said]);
    }
    let o = bench(&["models", "--sweep", "--models", "sped"], &[]);
    fails_saying(
        &o,
        &["--sweep sweeps the hand-off models", "sped is not one"],
    );
    let o = bench(&["threads", "--io", "uring"], &[]);
    fails_saying(&o, &["--io does not apply to bench threads"]);
}

/// Counts that would run for minutes, or that meant nothing when
/// silently raised to 1, are refused by name; presets of `--quick` that a
/// flag would change are refused together with it where the flag cannot win.
#[test]
fn unbounded_or_zero_counts_and_quick_conflicts_are_refused() {
    for (args, said) in [
        (&["fairness", "--floods", "100000"][..], "'--floods"),
        (&["fairness", "--samples", "0"], "'--samples"),
        (&["soak", "--good", "0"], "'--good"),
        (
            &["tasks", "--quick", "--counts", "5"],
            "'--quick' cannot be used with '--counts",
        ),
        (
            &["colors", "--quick", "--block", "4096"],
            "'--quick' cannot be used with '--block",
        ),
        (&["models", "--records", "0"], "'--records"),
        (&["store", "--items", "0"], "'--items"),
        (&["store", "--keys", "0"], "'--keys"),
        (&["offload", "--heavy-kib", "0"], "'--heavy-kib"),
        (&["models", "--sweep-max", "4"], "--sweep"),
        // Zeros that some experiments ran as 1 and others refused.
        (&["models", "--rounds", "0"], "'--rounds"),
        (&["models", "--pipeline", "0"], "'--pipeline"),
        (&["models", "--client-threads", "0"], "'--client-threads"),
        (&["threads", "--rounds", "0"], "'--rounds"),
        (&["colors", "--rounds", "0"], "'--rounds"),
        (&["colors", "--clients", "0"], "'--clients"),
        (&["colors", "--client-loops", "0"], "'--client-loops"),
        (&["balance", "--pipeline", "0"], "'--pipeline"),
        (&["idle", "--rounds", "0"], "'--rounds"),
        (&["http", "--clients", "0"], "'--clients"),
        (&["http", "--per-process", "0"], "'--per-process"),
        (&["offload", "--clients", "0"], "'--clients"),
        (&["colors", "--verify-every", "0"], "'--verify-every"),
        // Past what one write of requests may sensibly hold.
        (&["models", "--pipeline", "5000"], "'--pipeline"),
        (&["balance", "--pipeline", "5000"], "'--pipeline"),
    ] {
        fails_saying(&bench(args, &[]), &[said]);
    }
}

/// A `--dir` on tmpfs is refused (O_DIRECT reads there come from memory),
/// before it is created where it did not exist (it was left behind).
#[test]
fn disk_refuses_a_memory_file_system() {
    let shm = std::path::Path::new("/dev/shm");
    if duality_bench::disk::memory_fs(shm).ok().flatten().is_none() {
        eprintln!("skipped: /dev/shm is not tmpfs here");
        return;
    }
    let dir = shm.join(format!("duality-disk-test-{}", std::process::id()));
    let sub = dir.join("new");
    let out = common::TempDir::new("bench-disk-out");
    let results = out.path().join("r");
    for web in [false, true] {
        let mut args = vec!["disk", "--quick", "--dir", sub.to_str().unwrap()];
        args.extend(["--out", results.to_str().unwrap()]);
        if web {
            args.push("--web");
        }
        let o = bench(&args, &[]);
        let made = dir.exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!made, "{} was created", dir.display());
        fails_saying(&o, &[&format!("{} is on tmpfs", sub.display()), "--dir"]);
        assert!(!results.exists(), "nothing measured, nothing written");
    }
}

/// `bench disk` and `bench disk --web` are two experiments: each refuses
/// the other's flags instead of ignoring them.
#[test]
fn disk_halves_refuse_each_others_flags() {
    let o = bench(&["disk", "--web", "--readers", "4", "--file-mib", "8"], &[]);
    fails_saying(&o, &["--readers, --file-mib do not apply to --web"]);
    let o = bench(&["disk", "--web", "--runtimes", "tokio"], &[]);
    fails_saying(&o, &["--runtimes does not apply to --web"]);
    let o = bench(&["disk", "--web-files", "10"], &[]);
    fails_saying(&o, &["--web-files does not apply without --web"]);
}

/// A value given twice in a list measured the point twice and printed two
/// rows of one label: refused before anything starts, naming the flag.
#[test]
fn a_value_given_twice_in_a_list_is_refused() {
    for (args, said) in [
        (
            &["models", "--quick", "--models", "sped,sped"][..],
            "--models: sped given twice",
        ),
        (
            &["models", "--quick", "--clients", "8,1,8"][..],
            "--clients: 8 given twice",
        ),
        (
            &["http", "--quick", "--sizes", "100,100"][..],
            "--sizes: 100 given twice",
        ),
    ] {
        common::bench::refused(args, &[said, "Usage: duality bench "]);
    }
}

/// A directory holding a `memcached` that fails at once, and PATH with it
/// first.
fn failing_memcached_first_on_path(name: &str) -> (common::TempDir, std::ffi::OsString) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = common::TempDir::new(name);
    let fake = tmp.path().join("memcached");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'fake memcached: failing' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(std::iter::once(tmp.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    (tmp, path)
}

/// A peer that fails is left out and the others measured: the results
/// hold them and say why the peer is missing, and the run fails naming it
/// and saying how to run without the peers.
#[test]
fn a_failing_peer_says_how_to_leave_the_peers_out() {
    let (tmp, path) = failing_memcached_first_on_path("bench-peer-fails");
    let out = tmp.path().join("out");
    let o = bench(
        &[
            "models",
            "--quick",
            "--models",
            "sped",
            "--clients",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        &[("PATH", std::path::Path::new(&path))],
    );
    fails_saying(
        &o,
        &[
            "memcached -t 1",
            "fake memcached: failing",
            "--no-peers",
            "the results hold the other servers",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    // What was measured is kept: duality's row, the others', and why the
    // peer is missing.
    let table = std::fs::read_to_string(out.join("table.md")).expect("table.md");
    assert!(table.contains("duality sped"), "{table}");
    assert!(table.contains("tokio"), "{table}");
    assert!(
        table.contains("Left out: memcached -t 1") && table.contains("fake memcached: failing"),
        "{table}"
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    assert!(!csv.contains("memcached -t 1"), "{csv}");
}

/// `bench fairness` likewise: a memcached that cannot start loses none of
/// duality's rows; the run writes them, says why memcached is missing and
/// fails naming it.
#[test]
fn a_fairness_peer_that_cannot_start_is_left_out() {
    let (tmp, path) = failing_memcached_first_on_path("bench-fairness-peer-fails");
    let out = tmp.path().join("out");
    let o = bench(
        &[
            "fairness",
            "--quick",
            "--samples",
            "3",
            "--services",
            "kv",
            "--models",
            "sped",
            "--out",
            out.to_str().unwrap(),
        ],
        &[("PATH", std::path::Path::new(&path))],
    );
    fails_saying(
        &o,
        &[
            "memcached -t 1",
            "fake memcached: failing",
            "the results hold the other servers",
        ],
    );
    let md = std::fs::read_to_string(out.join("fairness.md")).expect("fairness.md");
    assert!(md.contains("| kv | duality sped |"), "{md}");
    assert!(md.contains("Left out: memcached -t 1"), "{md}");
    assert!(!md.contains("| kv | memcached"), "{md}");
}

/// An `--out` directory holding an earlier run's files: the run says
/// which ones it did not write (they would mix with its results), and
/// removes nothing; a file it rewrote is not named.
#[test]
fn files_left_in_out_by_an_earlier_run_are_named() {
    let out = common::TempDir::new("bench-out-earlier");
    std::fs::write(out.0.join("old-plot.svg"), b"<svg/>").unwrap();
    std::fs::write(out.0.join("tasks.json"), b"{}").unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args([
            "bench",
            "tasks",
            "--quick",
            "--runtimes",
            "duality",
            "--out",
        ])
        .arg(&out.0)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "note: {} also holds 1 file(s) this run did not write (from before it): old-plot.svg\n",
            out.0.display()
        )),
        "{stderr}"
    );
    assert!(out.0.join("old-plot.svg").exists());
    assert_ne!(std::fs::read(out.0.join("tasks.json")).unwrap(), b"{}");
}
