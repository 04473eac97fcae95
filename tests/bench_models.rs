//! `duality bench models --quick` end to end against real `duality kv`
//! processes: the output files parse and contain every model and peer.

use std::process::{Command, Output};

/// Runs `duality bench models ARGS…` and asserts it succeeded.
fn bench_models<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let run = Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(["bench", "models"])
        .args(args)
        .output()
        .expect("run duality bench models");
    assert!(
        run.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    run
}

#[test]
fn quick_models_run_writes_every_model() {
    let out = std::env::temp_dir().join(format!("duality-bench-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = bench_models([
        std::ffi::OsStr::new("--quick"),
        "--json".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    let stdout: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(stdout, file);
    let rows = file.as_array().unwrap();
    let servers: Vec<&str> = rows.iter().map(|r| r["server"].as_str().unwrap()).collect();
    for model in [
        "sped",
        "amped",
        "seda",
        "seda-s",
        "symped",
        "thread-per-conn",
        "steal",
    ] {
        assert!(
            servers.iter().any(|s| s
                .strip_prefix("duality ")
                .is_some_and(|m| m.split(':').next() == Some(model))),
            "no row for {model}: {servers:?}"
        );
    }
    assert!(
        servers.iter().any(|s| s.starts_with("tokio")),
        "no tokio row"
    );
    assert!(
        servers.iter().any(|s| s.starts_with("memcached")),
        "no memcached row (apt-get install memcached)"
    );
    for r in rows {
        for k in [
            "clients",
            "tps_mean",
            "tps_sd",
            "p50_us",
            "p99_us",
            "cpu_us_per_txn",
            "ctx_switches_per_txn",
        ] {
            assert!(r[k].is_number(), "{k} missing in {r}");
        }
        assert!(
            r["tps_mean"].as_f64().unwrap() > 0.0,
            "no transactions: {r}"
        );
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    assert!(std::fs::read_to_string(out.join("table.md"))
        .unwrap()
        .contains("| server |"));
    for plot in ["plot.png", "plot.svg"] {
        assert!(
            std::fs::metadata(out.join(plot))
                .map(|m| m.len() > 1000)
                .unwrap_or(false),
            "{plot}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `duality bench models --service echo` with two short rounds: one row per
/// model and connection count, medians within the rounds' range, ratios to
/// symped present.
#[test]
fn echo_models_run_reports_medians_over_rounds() {
    let run = bench_models([
        "--service",
        "echo",
        "--models",
        "symped:2,amped:1,sped",
        "--clients",
        "1,4",
        "--seconds",
        "0.1",
        "--windows",
        "2",
        "--json",
    ]);
    let rows: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3 * 2, "{rows:?}");
    for r in rows {
        assert_eq!(r["rounds"], 2, "{r}");
        let (lo, mid, hi) = (
            r["requests_per_sec_min"].as_f64().unwrap(),
            r["requests_per_sec"].as_f64().unwrap(),
            r["requests_per_sec_max"].as_f64().unwrap(),
        );
        assert!(lo > 0.0 && lo <= mid && mid <= hi, "{r}");
        assert!(r["ctx_switches_per_request"].is_number(), "{r}");
        let ratio = r["vs_symped"].as_f64().unwrap();
        if r["model"] == "symped:2" {
            assert_eq!(ratio, 1.0);
        } else {
            assert!(ratio > 0.0, "{r}");
        }
    }
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("round 2/2"), "{stderr}");
}
