//! Many servers started and stopped at the same time in one process (as the
//! other tests do): every one answers from its first connection on. This
//! caught a runtime bug where stopping a finished loop a second time stopped
//! whichever new loop had reused its slot (refused, reset or unanswered
//! first connections).

mod common;

use duality_http::{HttpConfig, HttpState};
use duality_models::ServerBuilder;
use std::time::Duration;

#[test]
fn servers_started_and_stopped_in_parallel_all_answer() {
    let tree = common::tree("parallel");
    let www = tree.0.join("www");
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let www = www.clone();
            std::thread::spawn(move || {
                for round in 0..25 {
                    let state = HttpState::new(HttpConfig::new(&www)).unwrap();
                    let builder = ServerBuilder::new()
                        .model("symped:1".parse().unwrap())
                        .tcp("127.0.0.1:0".parse().unwrap());
                    let server = duality_http::serve(builder, state).unwrap();
                    let mut c = common::Client::connect(server.tcp_addrs()[0]);
                    let r = c.get("/hello.txt");
                    assert_eq!(r.status, 200, "thread {t} round {round}");
                    drop(c);
                    server.shutdown(Duration::from_millis(500));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
