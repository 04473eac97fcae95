//! `duality bench colors --quick` end to end: every setup at N = 1 and 2
//! measured against real server processes (and audited), written to the
//! results files.

mod common;

const SETUPS: [&str; 6] = ["amped", "seda", "seda-s", "symped", "n-copy", "tokio"];

#[test]
fn quick_colors_run_writes_every_setup_at_every_n() {
    let (r, file) = common::bench::run(&["colors", "--quick"], "colors.json");
    let out = &r.out.0;
    let rows = file.as_array().unwrap();
    assert_eq!(rows.len(), SETUPS.len() * 2, "{rows:?}");
    let row = |setup: &str, n: u64| {
        rows.iter()
            .find(|r| r["setup"] == setup && r["threads"] == n)
            .unwrap_or_else(|| panic!("no row {setup} at N = {n}: {rows:?}"))
    };
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    for setup in SETUPS {
        for n in [1, 2] {
            let r = row(setup, n);
            assert!(f(&r["blocks_per_sec"]) > 0.0, "{r}");
            assert!(f(&r["server_cpu_us_per_block"]) > 0.0, "{r}");
            assert_eq!(r["rounds"], 1, "{r}");
            // Every ratio is there, each against the right denominator.
            let rate = f(&r["blocks_per_sec"]);
            let own1 = f(&row(setup, 1)["blocks_per_sec"]);
            let copy1 = f(&row("n-copy", 1)["blocks_per_sec"]);
            let copies = f(&row("n-copy", n)["blocks_per_sec"]);
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
            assert!(close(f(&r["speedup"]), rate / own1), "{r}");
            assert!(close(f(&r["speedup_vs_one_copy"]), rate / copy1), "{r}");
            assert!(close(f(&r["of_bound"]), rate / copies), "{r}");
            assert!(close(f(&r["bound_speedup"]), copies / copy1), "{r}");
        }
    }
    assert_eq!(row("n-copy", 2)["server"], "2 × sped");
    assert_eq!(row("seda", 2)["server"], "seda:1:2");
    assert_eq!(f(&row("n-copy", 2)["of_bound"]), 1.0);
    let md = std::fs::read_to_string(out.join("colors.md")).unwrap();
    assert!(md.contains("| symped | symped:2 | 2 |"), "{md}");
    assert!(md.contains("| tokio | tokio, 1 worker | 1 |"), "{md}");
    assert!(md.contains("audited"), "{md}");
    // Pinned by default, every setup alike, and the file says so.
    assert!(
        md.contains("Threads pinned (`--cpu-affinity auto`)"),
        "{md}"
    );
    assert!(md.contains("- amped: lowest"), "{md}");
    assert_eq!(
        std::fs::read_to_string(out.join("colors.csv"))
            .unwrap()
            .lines()
            .count(),
        rows.len() + 1
    );
    for name in ["colors-speedup.png", "colors-speedup.svg"] {
        let p = out.join(name);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{p:?}"
        );
    }
    let svg = std::fs::read_to_string(out.join("colors-speedup.svg")).unwrap();
    assert!(svg.contains("N-copy (bound)") && svg.contains("ideal"));
}

/// Connections past the file limit (100,000 per client took 2.2 GB and
/// failed midway) are refused before any server starts.
#[test]
fn connections_past_the_file_limit_are_refused() {
    let out = common::TempDir::new("bench-colors-refused");
    let res = out.path().join("r");
    common::bench::refused(
        &[
            "colors",
            "--conns-per-client",
            "100000",
            "--threads",
            "1",
            "--out",
            res.to_str().unwrap(),
        ],
        &["--clients × --conns-per-client ", "(ulimit -n)", "at most "],
    );
    assert!(!res.exists());
}

/// A CPU list the servers could not be pinned to is refused before any
/// server starts, naming the CPUs this process may use.
#[test]
fn a_cpu_affinity_outside_the_allowed_cpus_is_refused() {
    let (allowed, outside) = common::cpus_and_one_outside();
    let out = common::TempDir::new("bench-colors-affinity");
    let res = out.path().join("r");
    let list = format!("{},{outside}", allowed[0]);
    common::bench::refused(
        &[
            "colors",
            "--cpu-affinity",
            &list,
            "--out",
            res.to_str().unwrap(),
        ],
        &[
            &format!("CPU {outside} is not one this process may use"),
            &duality_rt::affinity::format_cpus(&allowed),
        ],
    );
    common::bench::refused(
        &[
            "colors",
            "--cpu-affinity",
            "2-1",
            "--out",
            res.to_str().unwrap(),
        ],
        &["use off, auto or a CPU list"],
    );
    assert!(!res.exists());
}
