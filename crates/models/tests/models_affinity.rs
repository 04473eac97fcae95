//! `ServerBuilder::cpu_affinity`: the i-th network loop and the i-th payload
//! thread share the i-th CPU; the acceptor is not pinned.

use duality_models::echo::{self, Detector, FRAME};
use duality_models::{CpuAffinity, Model, ServerBuilder, ThreadRole};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The CPUs thread `tid` of this process may run on, as its status says.
fn cpus_of(tid: i64) -> String {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn seda_s_pairs_share_a_cpu_and_still_serve() {
    let allowed = duality_rt::affinity::allowed_cpus().unwrap();
    let all = duality_rt::affinity::format_cpus(&allowed);
    // Two pairs on the last CPU and the first (the same one on a
    // one-CPU machine), listed in that order.
    let (a, b) = (*allowed.last().unwrap(), allowed[0]);
    let d = Detector::new(10);
    let s = ServerBuilder::new()
        .model(Model::SedaS { n: 2 })
        .cpu_affinity(CpuAffinity::List(vec![a, b]))
        .tcp("127.0.0.1:0".parse().unwrap())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap();
    let mut c = TcpStream::connect(s.tcp_addrs()[0]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&echo::request(3, 7)).unwrap();
    let mut r = [0u8; FRAME];
    c.read_exact(&mut r).unwrap();
    assert_eq!(echo::response(&r), (3, echo::answer(7)));
    let threads = s.stats().threads;
    let placed = |role: ThreadRole| -> Vec<String> {
        threads
            .iter()
            .filter(|t| t.role == role)
            .map(|t| cpus_of(t.tid))
            .collect()
    };
    let want = vec![a.to_string(), b.to_string()];
    assert_eq!(placed(ThreadRole::Network), want);
    assert_eq!(placed(ThreadRole::Payload), want);
    assert_eq!(placed(ThreadRole::Acceptor), vec![all]);
    drop(c);
    s.shutdown(Duration::from_secs(5));
}

#[test]
fn a_cpu_the_process_may_not_use_fails_the_start() {
    let allowed = duality_rt::affinity::allowed_cpus().unwrap();
    let outside = (0..1024).find(|c| !allowed.contains(c)).unwrap();
    let d = Detector::new(10);
    let e = ServerBuilder::new()
        .model(Model::Symped { n: 1 })
        .cpu_affinity(CpuAffinity::List(vec![outside]))
        .tcp("127.0.0.1:0".parse().unwrap())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .err()
        .expect("a server pinned outside its CPUs started");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains(&format!("CPU {outside}")), "{e}");
}
