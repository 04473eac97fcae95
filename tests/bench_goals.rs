//! `duality bench goals` judges the open issues' goals on the committed
//! results files, and the README's goal table is its output: a result
//! committed without regenerating the table, or a table edited by hand,
//! fails here.

mod common;

use std::process::{Command, Output};

fn goals(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_duality"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["bench", "goals"])
        .args(args)
        .output()
        .expect("run duality bench goals")
}

const BEGIN: &str = "<!-- bench goals: begin -->\n";
const END: &str = "<!-- bench goals: end -->";

#[test]
fn the_readme_goal_table_is_what_the_command_prints() {
    let out = goals(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(printed.contains(" goals met.\n"), "{printed}");
    assert!(printed.lines().filter(|l| l.starts_with("| 1")).count() > 10);
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme.find(BEGIN).expect("README has the goals block") + BEGIN.len();
    let end = start + readme[start..].find(END).expect("the block ends");
    let block = readme[start..end].trim_start_matches('\n');
    assert!(
        block == printed,
        "README's goal table differs from `duality bench goals`; regenerate it.\n--- README\n{block}\n--- printed\n{printed}"
    );
}

#[test]
fn json_holds_the_same_verdicts_as_the_table() {
    let table = String::from_utf8(goals(&[]).stdout).unwrap();
    let out = goals(&["--json"]);
    assert!(out.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let lines: Vec<&str> = table.lines().filter(|l| l.starts_with("| 1")).collect();
    assert_eq!(rows.len(), lines.len());
    let met = rows.iter().filter(|r| r["met"] == true).count();
    assert!(
        table.starts_with(&format!("{met} of {} goals met.", rows.len())),
        "{table}"
    );
    for (r, l) in rows.iter().zip(&lines) {
        assert!(l.starts_with(&format!("| {} |", r["issue"])), "{l}");
        assert!(l.contains(r["from"].as_str().unwrap()), "{l}");
    }
}

#[test]
fn a_bad_manifest_or_a_missing_file_is_named() {
    let dir = common::TempDir::new("bench-goals");
    let m = dir.path().join("goals.txt");
    // `bench goals` on `manifest` fails, saying `needle`.
    let fails_naming = |manifest: &str, needle: &str| {
        std::fs::write(&m, manifest).unwrap();
        let out = goals(&["--manifest", m.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{err}");
    };
    fails_naming("cache nowhere.json\n", "nowhere.json");

    std::fs::write(dir.path().join("idle.json"), "{\"not\": \"rows\"}").unwrap();
    fails_naming("cache idle.json\n", "is not a `cache` results file");

    // Rows that parse but hold none of the kind's setups: named, not
    // silently judged on nothing.
    std::fs::write(dir.path().join("peers.json"), "[]").unwrap();
    fails_naming("cache-tcp peers.json\n", "no goal could be judged");

    fails_naming("caches idle.json\n", "unknown kind");

    let out = goals(&[
        "--manifest",
        dir.path().join("absent.txt").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("absent.txt"), "{err}");
}
