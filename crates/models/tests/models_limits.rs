//! Back-pressure, the connection limit, shutdown, and thread-per-conn's threads.

use duality_models::echo::{self, Detector, FRAME};
use duality_models::{Model, ServerBuilder, ThreadRole};
use duality_rt::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn addr() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

async fn round_trip(s: &TcpStream, color: u64, value: u64) -> std::io::Result<(u64, u64)> {
    s.write_all(&echo::request(color, value)).await?;
    let mut r = [0u8; FRAME];
    s.read_exact(&mut r).await?;
    Ok(echo::response(&r))
}

#[test]
fn slow_payload_pushes_back_instead_of_buffering() {
    const CAP: usize = 4;
    // A payload job that takes 2 ms: far slower than the clients.
    let server = ServerBuilder::new()
        .model(Model::Amped { payload: 1 })
        .handoff_capacity(CAP)
        .tcp(addr())
        .serve(|conn, payload| echo_slow(conn, payload, Duration::from_millis(2)))
        .unwrap();
    let a = server.tcp_addrs()[0];
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    const CLIENTS: usize = 8;
    // Each client tries to push 64 MiB: far more than the kernel buffers hold.
    const WANT: usize = 64 << 20;
    let rss_before = rss();
    duality_rt::block_on(async move {
        let mut hs = Vec::new();
        for _ in 0..CLIENTS {
            let w = w.clone();
            hs.push(duality_rt::spawn(async move {
                let s = TcpStream::connect(a).await.unwrap();
                let chunk = vec![0u8; 64 * 1024];
                let mut sent = 0;
                while sent < WANT {
                    match s.write(&chunk).await {
                        Ok(n) => {
                            sent += n;
                            w.fetch_add(n as u64, Relaxed);
                        }
                        Err(_) => break,
                    }
                }
            }));
        }
        duality_rt::time::sleep(Duration::from_millis(600)).await;
        for h in &hs {
            h.abort();
        }
    });
    let stats = server.stats();
    let payload = stats
        .threads
        .iter()
        .find(|t| t.role == ThreadRole::Payload)
        .unwrap();
    assert!(
        payload.queue_depth <= CAP,
        "queue grew past its bound: {}",
        payload.queue_depth
    );
    let total = written.load(Relaxed) as usize;
    assert!(
        total < CLIENTS * WANT / 2,
        "clients pushed {total} bytes: TCP back-pressure should have stopped them"
    );
    let grew = rss().saturating_sub(rss_before);
    assert!(grew < 64 << 20, "memory grew by {grew} bytes");
    drop(server);
}

/// Like `echo::serve`, with a payload job that sleeps `delay`.
async fn echo_slow(
    mut conn: duality_models::Conn,
    payload: duality_models::Payload,
    delay: Duration,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut have = 0;
    loop {
        let n = match conn.read(&mut buf[have..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        have += n;
        let whole = have / FRAME * FRAME;
        let mut out = Vec::new();
        for f in buf[..whole].chunks_exact(FRAME) {
            let (c, v) = echo::response(f);
            let r = payload
                .call_colored(c, move || {
                    std::thread::sleep(delay);
                    echo::answer(v)
                })
                .await;
            out.extend_from_slice(&echo::request(c, r));
        }
        buf.copy_within(whole..have, 0);
        have -= whole;
        if conn.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 4096
}

#[test]
fn connection_above_the_limit_is_refused_and_others_keep_working() {
    let d = Detector::new(10);
    let server = ServerBuilder::new()
        .model(Model::Symped { n: 2 })
        .max_conns(3)
        .refusal_message("SERVER_ERROR too many open connections\r\n")
        .tcp(addr())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap();
    let a = server.tcp_addrs()[0];
    duality_rt::block_on(async move {
        let mut open = Vec::new();
        for i in 0..3 {
            let s = TcpStream::connect(a).await.unwrap();
            assert_eq!(round_trip(&s, i, i).await.unwrap(), (i, echo::answer(i)));
            open.push(s);
        }
        let extra = TcpStream::connect(a).await.unwrap();
        let mut buf = vec![0u8; 128];
        let mut got = Vec::new();
        loop {
            match extra.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        assert_eq!(got, b"SERVER_ERROR too many open connections\r\n");
        for (i, s) in open.iter().enumerate() {
            let i = i as u64 + 10;
            assert_eq!(round_trip(s, i, i).await.unwrap(), (i, echo::answer(i)));
        }
        // Closing one makes room for a new one.
        drop(open.pop());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = TcpStream::connect(a).await.unwrap();
            // Until the server has seen the close, a new connection is
            // still refused (the refusal then reads as a garbled frame).
            match round_trip(&s, 1, 1).await {
                Ok(r) if r == (1, echo::answer(1)) => break,
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    duality_rt::time::sleep(Duration::from_millis(5)).await
                }
                Ok(r) => panic!("no room after a close: got {r:?}"),
                Err(e) => panic!("no room after a close: {e}"),
            }
        }
    });
    assert!(server.stats().rejected_connections >= 1);
}

/// Whether the server closed `s`'s other end (rather than reading on): a
/// write after the close is answered by a reset, so a later write fails.
/// (Three writes: on a busy machine the first may still reach the
/// refusal's drain, before the close.)
fn server_closed(s: &mut std::net::TcpStream) -> bool {
    use std::io::Write;
    (0..3).any(|_| {
        let failed = s.write_all(b"more\n").is_err();
        std::thread::sleep(Duration::from_millis(30));
        failed
    })
}

/// Reads until the server's end of the stream.
fn read_to_end(s: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

#[test]
fn refusals_hold_no_descriptors_once_answered_and_lingering_ones_are_bounded() {
    use std::io::Write;
    const MSG: &[u8] = b"SERVER_ERROR too many open connections\r\n";
    let d = Detector::new(10);
    let server = ServerBuilder::new()
        .model(Model::Symped { n: 1 })
        .max_conns(1)
        .refusal_message(MSG)
        .tcp(addr())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap();
    let a = server.tcp_addrs()[0];
    let mut admitted = std::net::TcpStream::connect(a).unwrap();
    admitted.write_all(&echo::request(1, 1)).unwrap();
    let mut r = [0u8; FRAME];
    std::io::Read::read_exact(&mut admitted, &mut r).unwrap();
    // A request cut short (no line end yet) is lingered over: the rest of
    // it arrives to an open socket, not to a reset.
    // (The refusal comes once the connection has waited for a slot; the
    // rest is sent a moment after it: what arrives while the server writes
    // the refusal is read with it, and a whole request is closed at once.)
    let mut s = std::net::TcpStream::connect(a).unwrap();
    s.write_all(b"get k").unwrap();
    let mut refusal = vec![0u8; MSG.len()];
    std::io::Read::read_exact(&mut s, &mut refusal).unwrap();
    assert_eq!(refusal, MSG);
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(b"ey\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !server_closed(&mut s),
        "a half-sent request was not lingered over"
    );
    assert_eq!(read_to_end(&mut s), b"");
    drop(s);
    // (Its linger ends with the close.)
    std::thread::sleep(Duration::from_millis(50));
    // Clients that sent their request with the connection are answered and
    // closed at once (they held a descriptor each for a second before); one
    // accepted before its request arrived is lingered over, at most 4 at
    // once here (all are kept open).
    let mut open = Vec::new();
    let mut lingered = 0;
    for i in 0..8 {
        let mut s = std::net::TcpStream::connect(a).unwrap();
        s.write_all(b"get k\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(read_to_end(&mut s), MSG, "client {i}");
        if !server_closed(&mut s) {
            lingered += 1;
        }
        open.push(s);
    }
    assert!(lingered <= 4, "{lingered} of 8 lingered");
    // Their lingers end with their closes.
    drop(open);
    std::thread::sleep(Duration::from_millis(50));
    // Clients that sent nothing are lingered over (so a request sent late
    // does not reset the refusal away): the first 4, the rest closed.
    let silent: Vec<_> = (0..12)
        .map(|_| std::net::TcpStream::connect(a).unwrap())
        .collect();
    let mut lingered = 0;
    for (i, mut s) in silent.into_iter().enumerate() {
        assert_eq!(read_to_end(&mut s), MSG, "silent client {i}");
        if !server_closed(&mut s) {
            lingered += 1;
        }
    }
    assert!((1..=4).contains(&lingered), "{lingered} of 12 lingered");
    assert_eq!(server.stats().rejected_connections, 21);
}

#[test]
fn a_refused_unix_client_that_writes_late_still_reads_the_refusal() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    const MSG: &[u8] = b"SERVER_ERROR too many open connections\r\n";
    let path = std::env::temp_dir().join(format!("duality-refuse-{}.sock", std::process::id()));
    let d = Detector::new(10);
    let server = ServerBuilder::new()
        .model(Model::Symped { n: 1 })
        .max_conns(1)
        .refusal_message(MSG)
        .unix(&path)
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap();
    let mut admitted = UnixStream::connect(&path).unwrap();
    admitted.write_all(&echo::request(1, 1)).unwrap();
    let mut r = [0u8; FRAME];
    admitted.read_exact(&mut r).unwrap();
    for i in 0..3 {
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // memcached's clients write their command first, then read: a
        // socket closed at once failed that write with EPIPE.
        std::thread::sleep(Duration::from_millis(100));
        s.write_all(b"get k\r\n")
            .unwrap_or_else(|e| panic!("client {i}: {e}"));
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, MSG, "client {i}");
    }
    drop(server);
}

#[test]
fn shutdown_lets_in_flight_requests_finish() {
    for model in ["sped", "amped:1", "symped:2", "thread-per-conn"] {
        let server = ServerBuilder::new()
            .model(model.parse().unwrap())
            .tcp(addr())
            .serve(|conn, payload| echo_slow(conn, payload, Duration::from_millis(150)))
            .unwrap();
        let a = server.tcp_addrs()[0];
        use std::io::Write;
        let mut busy = std::net::TcpStream::connect(a).unwrap();
        let idle = std::net::TcpStream::connect(a).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        busy.write_all(&echo::request(3, 5)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let stopper = std::thread::spawn(move || server.shutdown(Duration::from_secs(3)));
        use std::io::Read;
        let mut r = [0u8; FRAME];
        busy.read_exact(&mut r)
            .expect("in-flight request answered during shutdown");
        assert_eq!(echo::response(&r), (3, echo::answer(5)), "{model}");
        let report = stopper.join().unwrap();
        assert_eq!(report.cut_off, 0, "{model}");
        let mut idle = idle;
        assert_eq!(
            idle.read(&mut r).unwrap_or(0),
            0,
            "{model}: idle connection closed"
        );
    }
}

#[test]
fn thread_per_conn_runs_one_os_thread_per_connection() {
    let d = Detector::new(1);
    let server = ServerBuilder::new()
        .name("tpc-count")
        .model(Model::ThreadPerConn)
        .tcp(addr())
        .serve(move |c, p| echo::serve(c, p, d.clone()))
        .unwrap();
    let a = server.tcp_addrs()[0];
    // Connection threads only: other tests of this binary start and stop
    // threads meanwhile.
    let threads = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "tpc-count-conn")
            .count()
    };
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = threads();
    let fds_before = fds();
    let conns: Vec<std::net::TcpStream> = (0..20)
        .map(|i| {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(a).unwrap();
            s.write_all(&echo::request(i, i)).unwrap();
            let mut r = [0u8; FRAME];
            s.read_exact(&mut r).unwrap();
            s
        })
        .collect();
    assert!(
        threads() >= before + 20,
        "{} threads before, {} with 20 connections",
        before,
        threads()
    );
    // One descriptor per connection on each side (the client's sockets
    // live in this process too): no epoll, eventfd or duplicated socket
    // per connection. Other tests of this binary open and close sockets
    // meanwhile, hence the margin.
    let grew = fds().saturating_sub(fds_before);
    assert!(grew <= 2 * 20 + 10, "{grew} descriptors for 20 connections");
    drop(conns);
    drop(server);
}
