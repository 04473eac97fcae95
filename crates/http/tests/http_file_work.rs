//! Where the file server's blocking file-system work (the lookup: stat,
//! open, read) runs: through the payload stage in the hand-off models, as
//! Flash's AMPED helpers do it, and on the runtime's blocking pool in the
//! others — never on a network loop. One test in this binary: the blocking
//! pool's counter is process-wide.

mod common;

use common::TestServer;
use duality_models::ThreadRole;

/// Files of the test tree not asked for before: each is a cache miss.
const FRESH: [&str; 5] = [
    "/hello.txt",
    "/index.html",
    "/style.css",
    "/sp%20ace.txt",
    "/sub/page.html",
];

fn pool_jobs() -> u64 {
    duality_rt::pool::blocking_pool().stats().completed
}

fn payload_jobs(s: &TestServer) -> u64 {
    let stats = s.server().stats();
    let payload = stats
        .threads
        .iter()
        .filter(|t| t.role == ThreadRole::Payload);
    payload.map(|t| t.jobs).sum()
}

#[test]
fn file_work_runs_where_the_model_puts_it() {
    let n = FRESH.len() as u64;
    for (model, hand_off) in [
        ("amped:1", true),
        ("seda:1:1", true),
        ("seda-s:1", true),
        ("sped", false),
        ("symped:2", false),
    ] {
        let s = TestServer::with_model("file-work", model, |_| {});
        let mut c = s.client();
        let (pool0, jobs0) = (pool_jobs(), payload_jobs(&s));
        for path in FRESH {
            assert_eq!(c.get(path).status, 200, "{model} {path}");
        }
        let (pool, jobs) = (pool_jobs() - pool0, payload_jobs(&s) - jobs0);
        if hand_off {
            // Each request is a batch on a payload thread, and its lookup a
            // job of the payload stage of its own.
            assert_eq!(pool, 0, "{model}: the blocking pool ran file work");
            assert!(jobs >= 2 * n, "{model}: {jobs} payload jobs for {n} misses");
        } else {
            assert_eq!(jobs, 0, "{model} has no payload threads");
            assert!(pool >= n, "{model}: {pool} pool jobs for {n} misses");
        }
    }
}
