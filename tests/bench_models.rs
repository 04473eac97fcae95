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
/// model (the hand-off model once per `--handoff` policy) and connection
/// count, medians within the rounds' range, ratios to symped present, and
/// the results directory holds what was printed. Three client threads: more
/// than one connection's worth at 1 connection (taken as one), 2+1+1 at 4.
#[test]
fn echo_models_run_reports_medians_over_rounds() {
    let out = std::env::temp_dir().join(format!("duality-bench-echo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = bench_models([
        std::ffi::OsStr::new("--service"),
        "echo".as_ref(),
        "--models".as_ref(),
        "symped:2,amped:1,sped".as_ref(),
        "--handoff".as_ref(),
        "always,adaptive".as_ref(),
        "--clients".as_ref(),
        "1,4".as_ref(),
        "--client-threads".as_ref(),
        "3".as_ref(),
        "--seconds".as_ref(),
        "0.1".as_ref(),
        "--windows".as_ref(),
        "2".as_ref(),
        "--json".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    let rows: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("echo.json")).unwrap()).unwrap();
    assert_eq!(rows, file);
    let md = std::fs::read_to_string(out.join("echo.md")).unwrap();
    assert!(md.contains("| amped:1 | 4 | 1 |"), "{md}");
    assert!(md.contains("3 duality loop threads"), "{md}");
    assert!(md.contains("| amped:1/adaptive | 4 | 1 |"), "{md}");
    let csv = std::fs::read_to_string(out.join("echo.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4 * 2 + 1, "{csv}");
    for f in ["echo.png", "echo.svg"] {
        let p = out.join(f);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{p:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 4 * 2, "{rows:?}");
    for r in rows {
        assert_eq!(r["rounds"], 2, "{r}");
        let (lo, mid, hi) = (
            r["requests_per_sec_min"].as_f64().unwrap(),
            r["requests_per_sec"].as_f64().unwrap(),
            r["requests_per_sec_max"].as_f64().unwrap(),
        );
        assert!(lo > 0.0 && lo <= mid && mid <= hi, "{r}");
        assert!(r["ctx_switches_per_request"].is_number(), "{r}");
        let to_sped = r["vs_sped"].as_f64().unwrap();
        assert!(
            to_sped > 0.0 && (r["model"] != "sped" || to_sped == 1.0),
            "{r}"
        );
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

/// The cache with `--handoff adaptive` over two rounds: the row is
/// labelled and served, and merged with a ratio to symped. The load comes
/// from two client threads, and the header says so.
#[test]
fn quick_models_run_takes_the_adaptive_hand_off() {
    let out = std::env::temp_dir().join(format!("duality-bench-handoff-{}", std::process::id()));
    let run = bench_models([
        std::ffi::OsStr::new("--quick"),
        "--no-peers".as_ref(),
        "--models".as_ref(),
        "amped:1,symped:1".as_ref(),
        "--handoff".as_ref(),
        "adaptive".as_ref(),
        "--client-threads".as_ref(),
        "2".as_ref(),
        "--rounds".as_ref(),
        "2".as_ref(),
        "--json".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    let rows: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let mut servers: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(r["tps_mean"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["rounds"], 2, "{r}");
            assert!(r["vs_symped"].as_f64().unwrap() > 0.0, "{r}");
            r["server"].as_str().unwrap()
        })
        .collect();
    servers.dedup();
    // symped does not hand off: run once, unlabelled.
    assert_eq!(servers, ["duality amped:1/adaptive", "duality symped:1"]);
    let md = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(md.contains("Client: 2 duality loop threads"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}

/// `--cpu-affinity off,auto`: each model once unpinned and once pinned,
/// labelled `MODEL%auto`, both served; the header says what the label means.
#[test]
fn quick_models_run_takes_each_cpu_placement() {
    let out = std::env::temp_dir().join(format!("duality-bench-affinity-{}", std::process::id()));
    let run = bench_models([
        std::ffi::OsStr::new("--quick"),
        "--no-peers".as_ref(),
        "--models".as_ref(),
        "seda-s:1".as_ref(),
        "--clients".as_ref(),
        "8".as_ref(),
        "--cpu-affinity".as_ref(),
        "off,auto".as_ref(),
        "--json".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    let rows: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let servers: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(r["tps_mean"].as_f64().unwrap() > 0.0, "{r}");
            r["server"].as_str().unwrap()
        })
        .collect();
    assert_eq!(servers, ["duality seda-s:1", "duality seda-s:1%auto"]);
    let md = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(
        md.contains("`duality MODEL%CPUS`: the model run with `--cpu-affinity CPUS`"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn quick_sweep_lays_the_hand_off_models_out_by_thread_count() {
    let out = std::env::temp_dir().join(format!("duality-bench-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = bench_models([
        std::ffi::OsStr::new("--sweep"),
        std::ffi::OsStr::new("--quick"),
        std::ffi::OsStr::new("--json"),
        std::ffi::OsStr::new("--out"),
        out.as_os_str(),
    ]);
    let stdout: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(stdout, file);
    let points = file.as_array().unwrap();
    let models: Vec<&str> = points
        .iter()
        .map(|p| p["model"].as_str().unwrap())
        .collect();
    assert_eq!(
        models,
        [
            "amped:1", "amped:2", "seda:1:1", "seda:1:2", "seda:2:1", "seda:2:2", "seda-s:1",
            "seda-s:2"
        ]
    );
    for p in points {
        assert!(p["tps"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["cpu_us_per_txn"].as_f64().unwrap() > 0.0, "{p}");
        let (n, w) = (
            p["network"].as_u64().unwrap(),
            p["payload"].as_u64().unwrap(),
        );
        let model = p["model"].as_str().unwrap();
        assert!(model.ends_with(&w.to_string()) && n >= 1, "{p}");
    }
    let md = std::fs::read_to_string(out.join("sweep.md")).unwrap();
    for section in ["## amped", "## seda\n", "## seda-s", "## Peaks (Fig. 7)"] {
        assert!(md.contains(section), "{section}: {md}");
    }
    for f in [
        "sweep-amped.png",
        "sweep-seda.svg",
        "sweep-seda-s.png",
        "sweep-peaks.svg",
        "sweep.csv",
    ] {
        assert!(out.join(f).exists(), "{f}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Flags given beside `--quick` win over its presets: one client count
/// asked, one measured.
#[test]
fn quick_takes_the_client_counts_given() {
    let out = std::env::temp_dir().join(format!("duality-bench-quick-{}", std::process::id()));
    let run = bench_models([
        std::ffi::OsStr::new("--quick"),
        "--no-peers".as_ref(),
        "--models".as_ref(),
        "sped".as_ref(),
        "--clients".as_ref(),
        "3".as_ref(),
        "--windows".as_ref(),
        "1".as_ref(),
        "--json".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    let _ = std::fs::remove_dir_all(&out);
    let rows: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let clients: Vec<u64> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["clients"].as_u64().unwrap())
        .collect();
    assert_eq!(clients, [3]);
}

/// Thousands of clients take longer to connect than `--quick`'s warm-up:
/// the windows used to start meanwhile, one of the two measuring connects
/// (6,000 clients: 39,960 ± 56,502 txn/s, one window all but empty). Now
/// they start once every connection is open: both windows serve.
#[test]
fn windows_start_once_every_connection_is_open() {
    // The bench raises its soft limit to the hard one, and needs a
    // descriptor per client plus its margin.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes one rlimit into the live local it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_max < 6_500 {
        eprintln!(
            "a hard file limit of {} is under 6,500: skipped",
            lim.rlim_max
        );
        return;
    }
    let out = std::env::temp_dir().join(format!("duality-bench-many-{}", std::process::id()));
    let run = bench_models([
        "--quick",
        "--no-peers",
        "--models",
        "sped",
        "--clients",
        "6000",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_dir_all(&out);
    let rows: serde_json::Value = serde_json::from_slice(&run.stdout).expect("stdout is JSON");
    let row = &rows.as_array().unwrap()[0];
    let (mean, sd) = (
        row["tps_mean"].as_f64().unwrap(),
        row["tps_sd"].as_f64().unwrap(),
    );
    // Two windows: sd = |a - b| / √2, at mean·√2 when one is empty; under
    // the mean unless one served under a sixth of the other.
    assert!(mean > 0.0 && sd < mean, "windows {mean} ± {sd}");
}
