//! `ServerBuilder::loop_slice`: every loop of a server (network loops,
//! acceptor, payload threads) asks the kernel for the time slice it names;
//! without one they keep the kernel's.

use duality_models::echo::{self, Detector};
use duality_models::{Model, Server, ServerBuilder, ThreadRole};
use std::time::Duration;

/// The slice thread `tid` of this process runs with, in nanoseconds, as
/// `/proc` says (`None` where the kernel does not say).
fn slice_of(tid: i64) -> Option<u64> {
    let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).ok()?;
    sched
        .lines()
        .find_map(|l| l.strip_prefix("se.slice"))
        .and_then(|v| v.trim().trim_start_matches(':').trim().parse().ok())
}

fn server(b: ServerBuilder) -> Server {
    let d = Detector::new(10);
    b.model(Model::SedaS { n: 1 })
        .tcp("127.0.0.1:0".parse().unwrap())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap()
}

/// Each role's slices, in nanoseconds.
fn slices(s: &Server) -> Vec<(ThreadRole, Option<u64>)> {
    s.stats()
        .threads
        .iter()
        .filter(|t| {
            matches!(
                t.role,
                ThreadRole::Network | ThreadRole::Payload | ThreadRole::Acceptor
            )
        })
        .map(|t| (t.role, slice_of(t.tid)))
        .collect()
}

#[test]
fn every_loop_of_a_server_asks_for_its_slice() {
    // A kernel with per-thread slices (Linux 6.12+) shows an unusual one.
    let probe = server(ServerBuilder::new().loop_slice(Some(Duration::from_micros(250))));
    let probed = slices(&probe);
    probe.shutdown(Duration::from_secs(5));
    assert_eq!(probed.len(), 3, "{probed:?}");
    if probed.iter().any(|(_, s)| *s != Some(250_000)) {
        eprintln!("skipped: this kernel shows no per-thread slice ({probed:?})");
        return;
    }
    // By default: the kernel's own, whatever it is, not that one.
    let default = server(ServerBuilder::new());
    let got = slices(&default);
    default.shutdown(Duration::from_secs(5));
    assert!(
        got.iter().all(|(_, s)| *s != Some(250_000) && s.is_some()),
        "{got:?}"
    );
}
