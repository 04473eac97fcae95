//! `duality bench fairness --quick` end to end against real server
//! processes: every row is present, timed and written to the results files;
//! a flag given (`--samples`) wins over the preset.

use std::process::Command;

#[test]
fn quick_fairness_run_writes_every_server() {
    let out = std::env::temp_dir().join(format!("duality-bench-fairness-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args([
            "bench",
            "fairness",
            "--quick",
            "--samples",
            "6",
            "--models",
            "sped,amped:1",
            "--json",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run duality bench fairness");
    assert!(
        run.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fairness.json")).unwrap()).unwrap();
    assert_eq!(stdout, file);
    let rows = file.as_array().unwrap();
    let servers: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["service"].as_str().unwrap(),
                r["server"].as_str().unwrap()
            )
        })
        .collect();
    // memcached and nginx are installed by .ci/run.
    for want in [
        "kv duality sped",
        "kv duality amped:1",
        "kv memcached -t 1",
        "http duality sped",
        "http duality amped:1",
        "http nginx-1w",
    ] {
        assert!(
            servers.iter().any(|s| s == want),
            "no row {want:?} in {servers:?}"
        );
    }
    for r in rows {
        assert_eq!(r["samples"], 6, "{r}");
        let (p50, p90, max) = (
            r["p50_ms"].as_f64().unwrap(),
            r["p90_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p90 && p90 <= max, "{r}");
    }
    let csv = std::fs::read_to_string(out.join("fairness.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    let md = std::fs::read_to_string(out.join("fairness.md")).unwrap();
    assert!(md.contains("| kv | duality sped |"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}
