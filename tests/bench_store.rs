//! `duality bench store --quick` end to end against real server processes:
//! every measure has its rows, the figures are sane, and the files agree.

mod common;

use std::process::Command;

#[test]
fn quick_store_run_measures_both_servers() {
    let out = std::env::temp_dir().join(format!("duality-bench-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["bench", "store", "--quick", "--json"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run duality bench store");
    assert!(
        run.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("store.json")).unwrap()).unwrap();
    assert_eq!(stdout, file);
    // memcached is installed by .ci/run.
    for server in ["duality sped", "memcached -t 1"] {
        let waves: Vec<&serde_json::Value> = file["waves"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["server"] == server)
            .collect();
        assert_eq!(waves.len(), 3, "{server}: {waves:?}");
        for w in &waves {
            let (idle, rss) = (
                w["idle_rss_mib"].as_f64().unwrap(),
                w["rss_mib"].as_f64().unwrap(),
            );
            assert!(idle > 0.0 && rss >= idle * 0.5, "{w}");
        }
        let items: Vec<&serde_json::Value> = file["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["server"] == server)
            .collect();
        assert_eq!(items.len(), 1);
        // 20,000 items fit the cache: all stored.
        assert_eq!(items[0]["stored"], 20_000, "{}", items[0]);
        let hits: Vec<&serde_json::Value> = file["hits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["server"] == server)
            .collect();
        assert_eq!(hits.len(), 1);
        let ratio = hits[0]["hit_ratio"].as_f64().unwrap();
        // Half the working set cached under Zipf 1.0: most gets hit, and
        // the cold start misses some.
        assert!(ratio > 0.5 && ratio < 1.0, "{}", hits[0]);
    }
    for (name, rows) in [("waves.csv", 7), ("items.csv", 3), ("hits.csv", 3)] {
        let csv = std::fs::read_to_string(out.join(name)).unwrap();
        assert_eq!(csv.lines().count(), rows, "{name}: {csv}");
    }
    let md = std::fs::read_to_string(out.join("store.md")).unwrap();
    assert!(md.contains("| duality sped | 1 | 50% |"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}

/// With `--quick` the flags given count (they were ignored), and what the
/// run cannot measure as asked is refused up front: a wave limit past the
/// memory (the server grew to GBs), a cache below the smallest `-m` (rows
/// for 1%, 10% and 50% all ran at `-m 4`).
#[test]
fn flags_given_with_quick_are_checked_and_refused() {
    common::bench::refused(
        &["store", "--quick", "--wave-limit", "100000000"],
        &["--wave-limit 100000000: needs about 95.4 TiB of memory"],
    );
    common::bench::refused(
        &["store", "--fractions", "0.01,0.1,0.5"],
        &[
            "--fractions 0.01: 1% of the working set",
            "below the smallest cache (-m 4)",
            "give --keys",
        ],
    );
    common::bench::refused(
        &["store", "--quick", "--keys", "20000"],
        &["--fractions 0.5: 50% of the working set"],
    );
}
