//! Slow clients cannot pin connections: the head deadline (slowloris), the
//! idle timeout, and a client that never reads its responses.

mod common;

use common::TestServer;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// The read-side deadlines are `Conn`'s in every model: an evented one and
/// `thread-per-conn`, whose blocking reads have no timer to fire.
const READ_SIDE: [&str; 2] = ["symped:1", "thread-per-conn"];

#[test]
fn a_head_sent_one_byte_at_a_time_within_the_deadline_succeeds() {
    let s = TestServer::start("dribble", |c| c.head_timeout = Duration::from_secs(3));
    let mut c = s.client();
    let req = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: slow\r\n\r\n";
    for &b in req.iter() {
        c.send([b]);
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
    // And the next head gets a deadline of its own.
    for &b in req.iter() {
        c.send([b]);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(c.response(false).status, 200);
}

#[test]
fn a_client_that_stalls_mid_head_is_cut_off() {
    for model in READ_SIDE {
        let s = TestServer::with_model("stall", model, |c| {
            c.head_timeout = Duration::from_millis(400)
        });
        let mut c = s.client();
        let t0 = Instant::now();
        c.send("GET /hello.txt HTTP/1.1\r\nHost:");
        let r = c.response(false);
        assert_eq!(r.status, 408, "{model}");
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(350), "{model}: {took:?}");
        assert!(took < Duration::from_secs(3), "{model}: {took:?}");
        assert!(c.closed_within(Duration::from_secs(3)), "{model}");
    }
}

#[test]
fn slowloris_dribbling_beyond_the_deadline_is_cut_off() {
    for model in READ_SIDE {
        slowloris_is_cut_off(model);
    }
}

fn slowloris_is_cut_off(model: &str) {
    // Steady progress does not extend the deadline: it counts from the
    // head's first byte.
    let s = TestServer::with_model("slowloris", model, |c| {
        c.head_timeout = Duration::from_millis(500)
    });
    let mut c = s.client();
    let t0 = Instant::now();
    c.send("GET /hello.txt HTTP/1.1\r\n");
    let mut cut = false;
    for i in 0..100 {
        if c.stream
            .write_all(format!("X-{i}: a\r\n").as_bytes())
            .is_err()
        {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        if t0.elapsed() > Duration::from_millis(1500) {
            break;
        }
    }
    let r = if cut { None } else { Some(c.response(false)) };
    if let Some(r) = r {
        assert_eq!(r.status, 408, "{model}");
    }
    assert!(t0.elapsed() < Duration::from_secs(3), "{model}");
    assert_eq!(s.state.stats().head_timeouts, 1, "{model}");
}

#[test]
fn many_slow_clients_do_not_block_a_fast_one() {
    let s = TestServer::start("many-slow", |c| c.head_timeout = Duration::from_secs(2));
    let mut slow: Vec<_> = (0..50).map(|_| s.client()).collect();
    for c in &mut slow {
        c.send("GET /hello.txt HTTP/1.1\r\n");
    }
    let mut fast = s.client();
    let t0 = Instant::now();
    for _ in 0..20 {
        assert_eq!(fast.get("/hello.txt").status, 200);
    }
    // Well under the slow ones' 2 s head timeout: not waiting for them.
    assert!(t0.elapsed() < Duration::from_millis(1500));
    for c in &mut slow {
        assert_eq!(c.response(false).status, 408);
    }
}

#[test]
fn idle_timeout_closes_without_a_response() {
    for model in READ_SIDE {
        let s = TestServer::with_model("idle", model, |c| {
            c.idle_timeout = Duration::from_millis(300)
        });
        // Timed from before the connect: the server's timer starts after it.
        let t0 = Instant::now();
        let mut c = s.client();
        let mut b = [0u8; 16];
        let n = c.stream.read(&mut b).unwrap();
        assert_eq!(n, 0, "{model}: closed without a byte");
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(250), "{model}: {took:?}");
        assert!(took < Duration::from_secs(3), "{model}: {took:?}");
    }
}

#[test]
fn a_client_that_never_reads_is_cut_off() {
    let s = TestServer::start("noread", |c| c.write_timeout = Duration::from_millis(500));
    let c = s.client();
    // Ask for far more than the socket buffers hold, and never read.
    let req = "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n".repeat(20);
    (&c.stream).write_all(req.as_bytes()).unwrap();
    assert!(
        common::eventually(Duration::from_secs(5), || s.state.stats().write_timeouts
            == 1),
        "{:?}",
        s.state.stats()
    );
    assert!(common::eventually(Duration::from_secs(3), || s
        .server()
        .connections()
        == 0));
}

/// A file sent with sendfile to a client that never reads is cut off one
/// write timeout after the socket stopped taking it, under
/// `thread-per-conn` as under the event loops: a blocking sendfile waited
/// the timeout for each trickle of room the kernel found, and such a
/// connection (and its thread) lasted about four timeouts.
#[test]
fn a_client_that_never_reads_a_file_is_cut_off_on_time_in_every_model() {
    for model in ["thread-per-conn", "sped"] {
        let s = TestServer::with_model("noread-file", model, |c| {
            c.write_timeout = Duration::from_millis(1000)
        });
        std::fs::write(s.www().join("huge.bin"), vec![b'h'; 32 << 20]).unwrap();
        let c = s.client();
        (&c.stream)
            .write_all(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let t0 = Instant::now();
        assert!(
            common::eventually(Duration::from_secs(10), || s.state.stats().write_timeouts
                == 1),
            "{model}: {:?}",
            s.state.stats()
        );
        let took = t0.elapsed();
        assert!(
            took < Duration::from_millis(2800),
            "{model}: cut off after {took:?}"
        );
    }
}

/// A client that reads a large body slowly but steadily gets all of it and
/// keeps its connection: the write timeout bounds each wait for the client
/// to take more (nginx's `send_timeout`), not the whole send, and the idle
/// timeout starts once the body has gone. A body from memory (the page
/// cache) was cut one write timeout after its write began under epoll;
/// under io_uring the connection went idle with megabytes queued and its
/// idle timeout closed it mid-body.
#[test]
fn a_slow_steady_reader_gets_a_large_body_whole_and_keeps_its_connection() {
    let s = TestServer::start("slowread", |c| {
        c.write_timeout = Duration::from_millis(300);
        c.idle_timeout = Duration::from_secs(1);
        c.cache_max_file = 32 << 20;
        c.cache_bytes = 64 << 20;
    });
    let body = common::pseudo_random(16 << 20, 5);
    std::fs::write(s.www().join("large.bin"), &body).unwrap();
    // Into the page cache first, read at full speed.
    assert_eq!(s.client().get("/large.bin").body.len(), body.len());
    // A small receive buffer keeps what the kernels hold small, so that the
    // body's end reaches the client soon after the server handed it over
    // (the idle timeout runs from then).
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(64 << 10).unwrap();
    sock.connect(&s.addr.into()).unwrap();
    let mut c = common::Client::from_stream(sock.into());
    c.send("GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    // At most 64 KiB every 5 ms (~12 MB/s): over a second for the body,
    // longer than both timeouts.
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let t0 = Instant::now();
    let whole = loop {
        let head = common::find(&got, b"\r\n\r\n").map(|i| i + 4);
        if head.is_some_and(|h| got.len() >= h + body.len()) {
            break head.unwrap();
        }
        match (&c.stream).read(&mut chunk) {
            Ok(0) | Err(_) => panic!("closed after {} bytes in {:?}", got.len(), t0.elapsed()),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(got.starts_with(b"HTTP/1.1 200 "));
    assert_eq!(got.len(), whole + body.len(), "nothing after the body");
    assert!(got[whole..] == body[..], "the body's bytes");
    // The connection is still served.
    assert_eq!(c.get("/hello.txt").text(), "hello, world\n");
}

/// The write timeout counts from when the client last took something, as
/// nginx's `send_timeout`, give or take a quarter of it: a large body from
/// memory was judged in whole windows of the timeout, so a client that
/// stopped reading was cut only after two of them (4.0 s with
/// `--write-timeout 2`; 2.5 s now). Here: a 1 s timeout, a client that
/// stops for 1.7 s is cut; one that stops for 0.5 s gets the whole body.
#[test]
fn a_stalled_reader_is_cut_one_write_timeout_after_it_stopped() {
    let s = TestServer::start("stalled", |c| {
        c.write_timeout = Duration::from_secs(1);
        c.cache_max_file = 8 << 20;
        c.cache_bytes = 64 << 20;
    });
    let body = common::pseudo_random(4 << 20, 9);
    std::fs::write(s.www().join("large.bin"), &body).unwrap();
    assert_eq!(s.client().get("/large.bin").body.len(), body.len());
    let fetch = |pause: Duration| -> usize {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(16 << 10).unwrap();
        sock.connect(&s.addr.into()).unwrap();
        let mut c = common::Client::from_stream(sock.into());
        c.send("GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut got = 0;
        let mut chunk = vec![0u8; 16 << 10];
        let mut paused = false;
        loop {
            if !paused && got >= 256 << 10 {
                std::thread::sleep(pause);
                paused = true;
            }
            match (&c.stream).read(&mut chunk) {
                Ok(0) | Err(_) => return got,
                Ok(n) => got += n,
            }
            if got >= body.len() {
                return got;
            }
        }
    };
    assert!(
        fetch(Duration::from_millis(500)) >= body.len(),
        "a short pause cut"
    );
    assert!(
        fetch(Duration::from_millis(1700)) < body.len(),
        "a pause of 1.7 timeouts was not cut"
    );
}
