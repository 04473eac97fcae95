//! `duality bench tasks --quick` end to end: every runtime measured in its
//! own process (Go's goroutines by a Go program the command builds) and the
//! table, JSON, CSV and plots written by the command itself.

mod common;

#[test]
fn quick_tasks_run_writes_every_row() {
    let (r, file) = common::bench::run(&["tasks", "--quick"], "tasks.json");
    let (stderr, out) = (&r.stderr, &r.out.0);
    let rows = file.as_array().unwrap();
    let mut want = vec!["duality", "tokio", "smol", "os-threads"];
    if rows.iter().any(|r| r["runtime"] == "go") {
        want.push("go");
    } else {
        // .ci/run installs Go; elsewhere its row is left out, said so.
        assert!(stderr.contains("go is not installed"), "{stderr}");
    }
    assert_eq!(rows.len(), want.len(), "{rows:?}");
    for rt in want {
        let r = rows
            .iter()
            .find(|r| r["runtime"] == rt)
            .unwrap_or_else(|| panic!("no {rt} row: {rows:?}"));
        let tasks = r["tasks"].as_u64().unwrap();
        assert_eq!(
            tasks,
            if rt == "os-threads" { 10_000 } else { 100_000 },
            "{r}"
        );
        assert!(r["bytes_per_task"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["yields_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["runs"].as_array().unwrap().len(), 1, "{r}");
    }
    let md = std::fs::read_to_string(out.join("tasks.md")).unwrap();
    assert!(md.contains("## 100,000 tasks"), "{md}");
    assert!(md.contains("| duality | 100,000 |"), "{md}");
    assert_eq!(
        std::fs::read_to_string(out.join("tasks.csv"))
            .unwrap()
            .lines()
            .count(),
        rows.len() + 1
    );
    for f in [
        "tasks-memory.png",
        "tasks-memory.svg",
        "tasks-speed.png",
        "tasks-speed.svg",
    ] {
        let p = out.join(f);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{p:?}"
        );
    }
}

/// Task counts past the machine's memory (99999999999999 grew a child until
/// the machine ran out) and zero rounds are refused before anything runs.
#[test]
fn task_counts_past_the_memory_are_refused() {
    common::bench::refused(
        &["tasks", "--counts", "1000,99999999999999"],
        &[
            "--counts 99999999999999: ",
            "tokio tasks at 192 B each: needs about 17.1 PiB of memory",
            "available (MemAvailable)",
        ],
    );
    common::bench::refused(&["tasks", "--rounds", "0"], &["--rounds", "at least 1"]);
}
