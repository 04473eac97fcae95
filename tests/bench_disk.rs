//! `duality bench disk --quick` end to end: every runtime at every reader
//! count measured in its own child process and written to the results
//! files; a flag given (`--file-mib`, `--web-files`) wins over the preset.

mod common;

#[test]
fn quick_disk_run_writes_every_row() {
    let r = common::bench::BenchRun::start(&[
        "disk",
        "--quick",
        "--file-mib",
        "8",
        "--dir",
        env!("CARGO_TARGET_TMPDIR"),
    ]);
    let stderr = &r.stderr;
    if stderr.contains("cannot open") && stderr.contains("O_DIRECT") {
        eprintln!("this file system refuses O_DIRECT: not measured ({stderr})");
        return;
    }
    let file = r.json("disk.json");
    let out = &r.out.0;
    let rows = file.as_array().unwrap();
    for readers in [1, 64] {
        for rt in ["duality-pool", "duality-uring", "tokio", "os-threads"] {
            let r = rows
                .iter()
                .find(|r| r["runtime"] == rt && r["readers"] == readers)
                .unwrap_or_else(|| panic!("no row {rt} × {readers}: {rows:?}"));
            assert_eq!(r["ran"], readers, "{r}");
            assert!(r["reads_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            let (p50, p99) = (r["p50_us"].as_f64().unwrap(), r["p99_us"].as_f64().unwrap());
            assert!(p50 >= 1.0 && p50 <= p99, "{r}");
        }
    }
    let md = std::fs::read_to_string(out.join("disk.md")).unwrap();
    assert!(md.contains("| 64 | duality-uring | 64 |"), "{md}");
    assert!(md.contains("blocks of a 8 MiB file"), "{md}");
    assert_eq!(
        std::fs::read_to_string(out.join("disk.csv"))
            .unwrap()
            .lines()
            .count(),
        rows.len() + 1
    );
    for f in [
        "disk-reads.png",
        "disk-reads.svg",
        "disk-p99.png",
        "disk-p99.svg",
    ] {
        let p = out.join(f);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{p:?}"
        );
    }
}

/// `duality bench disk --web --quick` end to end: every server at every
/// client count served its files from an evicted page cache, and the
/// results directory holds what was printed.
#[test]
fn quick_web_run_writes_every_row() {
    let (r, file) = common::bench::run(
        &[
            "disk",
            "--web",
            "--quick",
            "--web-files",
            "1000",
            "--dir",
            env!("CARGO_TARGET_TMPDIR"),
        ],
        "disk-web.json",
    );
    let (stderr, out) = (&r.stderr, &r.out.0);
    let rows = file.as_array().unwrap();
    let servers: &[&str] = if stderr.contains("nginx is not installed") {
        &["duality"]
    } else {
        &["duality", "nginx", "nginx-aio"]
    };
    assert_eq!(rows.len(), servers.len() * 2, "{rows:?}");
    for clients in [4, 16] {
        for s in servers {
            let r = rows
                .iter()
                .find(|r| r["server"] == *s && r["clients"] == clients)
                .unwrap_or_else(|| panic!("no row {s} × {clients}: {rows:?}"));
            assert!(r["requests_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            // Every response was a whole 16 KiB file.
            let per_request = r["mib_per_sec"].as_f64().unwrap() * 1024.0
                / r["requests_per_sec"].as_f64().unwrap();
            assert!((per_request - 16.0).abs() < 0.01, "{r}");
            assert_eq!(r["errors"], 0, "{r}");
            let (p50, p99) = (r["p50_us"].as_f64().unwrap(), r["p99_us"].as_f64().unwrap());
            assert!(p50 >= 1.0 && p50 <= p99, "{r}");
        }
    }
    let md = std::fs::read_to_string(out.join("disk-web.md")).unwrap();
    assert!(md.contains("| 16 | duality |"), "{md}");
    assert!(md.contains("on 1000 files of 16384 bytes"), "{md}");
    assert_eq!(
        std::fs::read_to_string(out.join("disk-web.csv"))
            .unwrap()
            .lines()
            .count(),
        rows.len() + 1
    );
    for f in [
        "disk-web-rps.png",
        "disk-web-rps.svg",
        "disk-web-p99.png",
        "disk-web-p99.svg",
    ] {
        let p = out.join(f);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{p:?}"
        );
    }
}

/// A directory of its own under the target's temp dir (a disk file system
/// where `/tmp` may be tmpfs), removed on drop.
fn scratch(tag: &str) -> common::TempDir {
    let p = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("duality-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    common::TempDir(p)
}

/// `--file-mib` past the free space (it wrote 36 GB and filled the disk):
/// refused before the file, `--dir` or the results directory is made.
#[test]
fn a_file_past_the_free_space_is_refused_and_nothing_is_made() {
    let t = scratch("disk-huge");
    let (dir, out) = (t.path().join("files"), t.path().join("results"));
    common::bench::refused(
        &[
            "disk",
            "--quick",
            "--file-mib",
            "99999999",
            "--dir",
            dir.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &["--file-mib 99999999: needs 95.4 TiB in ", "GiB free"],
    );
    assert!(!dir.exists() && !out.exists());
}

/// A tmpfs `--dir` is refused before it is created (it was left behind).
#[test]
fn a_tmpfs_dir_is_refused_before_it_is_made() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = shm.join(format!("duality-disk-test-{}", std::process::id()));
    let err = common::bench::refused(
        &["disk", "--quick", "--dir", dir.join("x").to_str().unwrap()],
        &["is on "],
    );
    if err.contains("is on tmpfs") || err.contains("is on ramfs") {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reader counts past the seed's 65,536 (10,000,000 grew the child until
/// the machine ran out of memory) and zeros are refused by the flag.
#[test]
fn reader_counts_past_65536_are_refused() {
    common::bench::refused(
        &["disk", "--quick", "--readers", "1,10000000"],
        &["--readers", "10000000"],
    );
    common::bench::refused(&["disk", "--quick", "--readers", "0"], &["--readers"]);
    common::bench::refused(&["disk", "--quick", "--file-mib", "0"], &["--file-mib"]);
    common::bench::refused(&["disk", "--quick", "--rounds", "0"], &["--rounds"]);
}

/// SIGTERM while the file is being written removes it: a half-written file
/// is not kept for the next run (which would take it for whole only if
/// its size matched, but it is the run's temporary file until then).
#[test]
fn an_interrupted_prepare_removes_the_half_written_file() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let t = scratch("disk-int");
    let file = t.path().join("duality-disk-3072m.bin");
    let mut bench = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["bench", "disk", "--quick", "--file-mib", "3072", "--dir"])
        .arg(t.path())
        .arg("--out")
        .arg(t.path().join("results"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !std::fs::metadata(&file).is_ok_and(|m| m.len() > 0) {
        if Instant::now() > until || bench.try_wait().unwrap().is_some() {
            let _ = bench.kill();
            let o = bench.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            // A disk with less than 4 GiB free refuses the file: fine here.
            assert!(err.contains("needs 3.0 GiB"), "no file written: {err}");
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(bench.id() as i32, libc::SIGTERM) }, 0);
    let o = bench.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() == Some(143) {
        assert!(!file.exists(), "half-written file left: {err}");
    } else {
        // It finished writing before the signal came: then the file is whole.
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 3072 << 20, "{err}");
    }
}

/// SIGTERM while `--web`'s file set is being written removes it: no
/// marker, no half-made set. The writer did not look for the interrupt and
/// raced the removal: it left 36,609 of 131,072 files and the marker, and
/// every later run failed with "No such file or directory".
#[test]
fn an_interrupted_web_prepare_removes_the_half_made_set() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let t = scratch("disk-web-int");
    let n = 100_000;
    let root = t.path().join(format!("duality-web-{n}x1"));
    let mut bench = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["bench", "disk", "--web", "--quick", "--web-file-size", "1"])
        .args(["--web-files", &n.to_string(), "--dir"])
        .arg(t.path())
        .arg("--out")
        .arg(t.path().join("results"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Signalled while it writes, some 10,000 files in (41 directories of
    // 256): enough that the removal takes a while, which the old writer
    // raced every time in six tries (at 256 files, one time in three).
    let until = Instant::now() + Duration::from_secs(30);
    while !root.join("d040").exists() {
        if Instant::now() > until || bench.try_wait().unwrap().is_some() {
            let _ = bench.kill();
            let o = bench.wait_with_output().unwrap();
            panic!("no files written: {}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(bench.id() as i32, libc::SIGTERM) }, 0);
    let until = Instant::now() + Duration::from_secs(20);
    while bench.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = bench.kill();
            panic!("bench did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = bench.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(143), "{err}");
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("duality:"))
            .collect::<Vec<_>>(),
        ["duality: interrupted (SIGTERM)"],
        "{err}"
    );
    let marker = root.join(format!("complete-{n}x1"));
    if marker.exists() {
        // Written whole before the signal came: then every file is there.
        let files: usize = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|d| std::fs::read_dir(d.path()).unwrap().count())
            .sum();
        assert_eq!(files, n, "a marked set with files missing");
    } else {
        assert!(!root.exists(), "half-made set left: {err}");
    }
}

/// A set whose marker is there but whose files are not all (as the
/// interrupted writer above used to leave it) is written again, and the
/// run succeeds; it failed with a bare "No such file or directory".
#[test]
fn a_marked_web_set_with_files_missing_is_written_again() {
    let t = scratch("disk-web-broken");
    let root = t.path().join("duality-web-300x64");
    std::fs::create_dir_all(root.join("d000")).unwrap();
    std::fs::write(root.join("d000/f000000"), [0u8; 64]).unwrap();
    std::fs::write(root.join("complete-300x64"), b"").unwrap();
    let (r, file) = common::bench::run(
        &[
            "disk",
            "--web",
            "--quick",
            "--web-files",
            "300",
            "--web-file-size",
            "64",
            "--web-servers",
            "duality",
            "--web-clients",
            "2",
            "--dir",
            t.path().to_str().unwrap(),
        ],
        "disk-web.json",
    );
    assert_eq!(file.as_array().unwrap().len(), 1, "{}", r.stderr);
    assert!(root.join("d001/f000299").exists());
    assert_eq!(
        std::fs::metadata(root.join("d001/f000299")).unwrap().len(),
        64
    );
}
