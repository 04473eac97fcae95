//! A server that cannot start says why in one line and exits with status 1,
//! as memcached and nginx do: no backtrace, even where `RUST_BACKTRACE` is
//! set for other programs.

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};

fn duality(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_duality"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn one_line_error(o: &Output, cause: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("duality: ") && lines[0].contains(cause),
        "{err}"
    );
}

#[test]
fn a_port_in_use_is_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let o = duality(&["kv", "-l", "127.0.0.1", "-p", &port]);
    one_line_error(&o, "Address already in use");
}

#[test]
fn a_missing_document_root_is_one_line() {
    let o = duality(&[
        "http",
        "--listen",
        "127.0.0.1:0",
        "--root",
        "/nonexistent/duality-cli-errors",
    ]);
    one_line_error(&o, "/nonexistent/duality-cli-errors");
}
