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
