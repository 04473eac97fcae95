//! `duality bench soak --quick` end to end: good clients beside floods,
//! slowloris, resets and churn get every answer right, under both servers.

mod common;

use std::process::Command;

#[test]
fn quick_soak_loses_nothing_for_good_clients() {
    let out = std::env::temp_dir().join(format!("duality-bench-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["bench", "soak", "--quick", "--slow", "20", "--json"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run duality bench soak");
    assert!(
        run.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in rows {
        assert!(r["good_requests"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["good_errors"], 0, "a good client saw an error: {r}");
        assert!(r["hostile_connections"].as_u64().unwrap() > 0, "{r}");
        assert!(r["rss_end_kib"].as_u64().unwrap() > 0, "{r}");
    }
    let md = std::fs::read_to_string(out.join("soak.md")).unwrap();
    assert!(md.contains("| kv | duality symped"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Connections the load generator cannot open (its own "too many open
/// files" was reported as the server's errors) are refused up front.
#[test]
fn a_mix_past_the_file_limit_is_refused() {
    common::bench::refused(
        &["soak", "--quick", "--slow", "100000", "--services", "http"],
        &[
            "--slow 100000",
            "the load generator holds 100010 descriptors",
            "(ulimit -n)",
        ],
    );
}
