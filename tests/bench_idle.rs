//! `duality bench idle --quick` end to end: every pipe runtime in its own
//! child process and every cache server as its own process, each with 0
//! and 200 idle connections held by holder processes, written to the
//! results files.

mod common;

#[test]
fn quick_idle_run_measures_every_runtime_and_server() {
    let (r, file) = common::bench::run(&["idle", "--quick"], "idle.json");
    let (stderr, out) = (&r.stderr, &r.out.0);
    assert_eq!(file["notes"], serde_json::json!([]), "{stderr}");
    let limits = &file["limits"];
    assert!(limits["fd_limit"].as_u64().unwrap() > 200, "{limits}");

    let pipes = file["pipes"].as_array().unwrap();
    for rt in [
        "duality-epoll",
        "duality-uring",
        "duality-loops:2",
        "tokio",
        "os-threads",
    ] {
        for idle in [0, 200] {
            let r = pipes
                .iter()
                .find(|r| r["runtime"] == rt && r["idle"] == idle)
                .unwrap_or_else(|| panic!("no pipes row {rt} × {idle}: {pipes:?}"));
            // Every idle connection was held by its own waiting task or thread.
            assert_eq!(r["held"], idle, "{r}");
            assert!(r["mb_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            let ratio = r["vs_idle_free"].as_f64().unwrap();
            assert!(ratio > 0.0, "{r}");
            if idle == 0 {
                assert_eq!(ratio, 1.0, "{r}");
                assert!(r["bytes_per_idle"].is_null(), "{r}");
            } else {
                assert!(r["bytes_per_idle"].is_number(), "{r}");
            }
        }
    }

    let cache = file["cache"].as_array().unwrap();
    // memcached is installed by .ci/run.
    let n = cores();
    for server in [
        format!("duality symped:{n}"),
        "duality thread-per-conn".to_string(),
        format!("tokio -t {n}"),
        format!("memcached -t {n}"),
    ] {
        for idle in [0, 200] {
            let r = cache
                .iter()
                .find(|r| r["server"] == server.as_str() && r["idle"] == idle)
                .unwrap_or_else(|| panic!("no cache row {server} × {idle}: {cache:?}"));
            // Each idle connection was answered once by the server and kept.
            assert_eq!(r["held"], idle, "{r}");
            assert_eq!(r["active"], 40, "{r}");
            assert!(r["tps"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["cpu_us_per_txn"].as_f64().unwrap() > 0.0, "{r}");
            let (start, closed) = (
                r["rss_start_mib"].as_f64().unwrap(),
                r["rss_closed_mib"].as_f64().unwrap(),
            );
            assert!(start > 0.0 && closed > 0.0, "{r}");
            assert!(r["rss_loaded_mib"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["closed_net_vs_start"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["bytes_per_idle"].is_null(), idle == 0, "{r}");
            // With idle clients, the same process was measured idle-free
            // first, and the ratio is to that window.
            match r["tps_before_idle"].as_f64() {
                Some(before) => {
                    assert!(idle > 0 && before > 0.0, "{r}");
                    let want = r["tps"].as_f64().unwrap() / before;
                    let got = r["vs_idle_free"].as_f64().unwrap();
                    assert!((got - want).abs() < 1e-6, "one round: {got} vs {want}: {r}");
                }
                None => assert_eq!(idle, 0, "{r}"),
            }
        }
    }

    let md = std::fs::read_to_string(out.join("idle.md")).unwrap();
    assert!(md.contains("| 200 | duality-epoll | 200 |"), "{md}");
    assert!(md.contains("| 200 | os-threads | 200 |"), "{md}");
    assert!(md.contains("## Goals"), "{md}");
    for (name, rows) in [
        ("idle-pipes.csv", pipes.len()),
        ("idle-cache.csv", cache.len()),
    ] {
        let csv = std::fs::read_to_string(out.join(name)).unwrap();
        assert_eq!(csv.lines().count(), rows + 1, "{name}: {csv}");
    }
    for f in [
        "idle-pipes.png",
        "idle-pipes.svg",
        "idle-cache.png",
        "idle-cache.svg",
        "idle-memory.png",
        "idle-memory.svg",
    ] {
        let p = out.join(f);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{p:?}"
        );
    }
}

/// The machine's cores, as the command counts them (duality's default
/// model and the peers' thread counts follow them).
fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Active pairs past the descriptor limit are refused up front (a million
/// ran, every row "not measured: Too many open files", and exited 0).
#[test]
fn active_pairs_past_the_descriptor_limit_are_refused() {
    let out = common::TempDir::new("bench-idle-refused");
    let res = out.path().join("r");
    common::bench::refused(
        &[
            "idle",
            "--quick",
            "--pairs",
            "1000000",
            "--out",
            res.to_str().unwrap(),
        ],
        &[
            "--pairs 1000000: two descriptors a pair",
            "(ulimit -n)",
            "at most ",
        ],
    );
    assert!(!res.exists());
    common::bench::refused(
        &["idle", "--quick", "--runtimes=", "--active", "1000000"],
        &["--active 1000000: "],
    );
    common::bench::refused(
        &["idle", "--quick", "--pairs", "0"],
        &["--pairs", "at least 1"],
    );
}
