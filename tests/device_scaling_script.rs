//! `scripts/device-scaling.sh BINARY OUT check`: every step of the script
//! that a lent 16-core machine runs starts with the arguments the script
//! gives it (each stopped after two seconds). A refused argument fails the
//! step at once; on the device it cost a call a step (the echo step's
//! `--no-peers`, the colors step's `--threads` beside `--quick`).

mod common;

use std::process::Command;

#[test]
fn every_step_of_the_device_script_accepts_its_arguments() {
    let out = common::TempDir::new("device-check");
    let steps = "kv echo threads colors sweep offload kvtcp http affinity";
    let run = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/device-scaling.sh"
        ))
        .arg(env!("CARGO_BIN_EXE_duality"))
        .arg(out.path())
        .arg("check")
        .env("STEPS", steps)
        .output()
        .expect("run the script");
    let log = std::fs::read_to_string(out.path().join("device-scaling.log")).unwrap_or_default();
    assert!(
        run.status.success(),
        "{}\n{log}",
        String::from_utf8_lossy(&run.stderr)
    );
    for step in steps.split(' ') {
        // A step runs as itself or as parts named `STEP-…`.
        assert!(
            log.contains(&format!("== {step}: ")) || log.contains(&format!("== {step}-")),
            "{step} ran:\n{log}"
        );
    }
    // A step that exits at once with an error counts: `check` fails.
    let bad = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/device-scaling.sh"
        ))
        .arg("/bin/false")
        .arg(out.path().join("bad"))
        .arg("check")
        .env("STEPS", "threads")
        .output()
        .expect("run the script");
    assert!(!bad.status.success(), "a failing step fails the check");
}
