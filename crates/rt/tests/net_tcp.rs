//! TCP in thread style: echo, `read_exact`, EOF, reset, refused and pending
//! connects, and the `futures-io` traits.

use duality_rt::net::{TcpListener, TcpStream};
use duality_rt::time::timeout;
use duality_rt::{block_on, spawn};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Serves every connection with an echo task (the `examples/echo.rs` shape).
fn echo_server(listener: TcpListener) {
    drop(spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            drop(spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => stream.write_all(&buf[..n]).await.unwrap(),
                    }
                }
            }));
        }
    }));
}

#[test]
fn echo() {
    block_on(async {
        let listener = TcpListener::bind(local()).unwrap();
        let addr = listener.local_addr().unwrap();
        echo_server(listener);
        let mut clients = Vec::new();
        for c in 0..8u8 {
            clients.push(spawn(async move {
                let s = TcpStream::connect(addr).await.unwrap();
                s.set_nodelay(true).unwrap();
                assert_eq!(s.peer_addr().unwrap(), addr);
                for round in 0..10u8 {
                    let msg = [c, round, 0xab, 0xcd];
                    s.write_all(&msg).await.unwrap();
                    let mut back = [0u8; 4];
                    s.read_exact(&mut back).await.unwrap();
                    assert_eq!(back, msg);
                }
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
    });
}

#[test]
fn a_large_transfer_reads_and_writes_concurrently() {
    const LEN: usize = 4 << 20;
    block_on(async {
        let listener = TcpListener::bind(local()).unwrap();
        let addr = listener.local_addr().unwrap();
        echo_server(listener);
        let s = std::sync::Arc::new(TcpStream::connect(addr).await.unwrap());
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        let expected = data.clone();
        // One task writes while another reads: far more than the socket
        // buffers hold, so both sides hit WouldBlock many times.
        let w = s.clone();
        let writer = spawn(async move { w.write_all(&data).await });
        let mut back = vec![0u8; LEN];
        s.read_exact(&mut back).await.unwrap();
        writer.await.unwrap().unwrap();
        assert!(back == expected);
    });
}

#[test]
fn eof_reads_zero_and_read_exact_fails_short() {
    block_on(async {
        let listener = TcpListener::bind(local()).unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.write_all(b"abc").unwrap();
            // dropped: FIN
        });
        let (s, _) = listener.accept().await.unwrap();
        client.join().unwrap();
        let mut buf = [0u8; 8];
        assert!(s.read_exact(&mut buf).await.unwrap_err().kind() == io::ErrorKind::UnexpectedEof);
        assert_eq!(s.read(&mut buf).await.unwrap(), 0, "EOF is Ok(0)");
        assert_eq!(s.read(&mut buf).await.unwrap(), 0, "and stays so");

        // A half-close from our side: the peer sees EOF and can still reply.
        let peer = std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            c.write_all(b"bye").unwrap();
            got
        });
        let (s, _) = listener.accept().await.unwrap();
        s.write_all(b"hello").await.unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = [0u8; 3];
        s.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"bye");
        assert_eq!(peer.join().unwrap(), b"hello");
    });
}

#[test]
fn a_reset_surfaces_as_an_error() {
    block_on(async {
        let listener = TcpListener::bind(local()).unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.write_all(b"x").await.unwrap();
        client.set_linger(Some(Duration::ZERO)).unwrap();
        drop(client); // RST
        let mut buf = [0u8; 16];
        let first = server.read(&mut buf).await;
        // The byte sent before the reset may or may not be readable first.
        let err = match first {
            Ok(1) => server.read(&mut buf).await.unwrap_err(),
            Ok(n) => panic!("read {n} bytes after a reset"),
            Err(e) => e,
        };
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        // Writing to a reset connection fails too (EPIPE or ECONNRESET).
        let mut w = Ok(());
        for _ in 0..3 {
            w = server.write_all(&[0u8; 1024]).await;
            if w.is_err() {
                break;
            }
        }
        assert!(w.is_err());
    });
}

#[test]
fn a_refused_connect_is_an_error() {
    // A port that was just free: nobody listens there now.
    let addr = std::net::TcpListener::bind(local())
        .unwrap()
        .local_addr()
        .unwrap();
    block_on(async move {
        let r = timeout(Duration::from_secs(5), TcpStream::connect(addr)).await;
        let err = r.expect("a refused connect fails fast").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    });
}

/// A connect the peer has not answered yet waits, rather than failing with
/// `NotConnected`, and completes once the peer takes it.
#[test]
fn a_pending_connect_waits_for_the_handshake() {
    // A listener whose accept queue is full drops new SYNs, so the next
    // connect stays in progress until the queue has room again.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&local().into()).unwrap();
    socket.listen(0).unwrap();
    let listener: std::net::TcpListener = socket.into();
    let addr = listener.local_addr().unwrap();
    let filler = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).unwrap();
    let overflow = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(50));
    assert!(overflow.is_err(), "the accept queue is full");

    block_on(async move {
        let connect = spawn(TcpStream::connect(addr));
        duality_rt::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !connect.is_finished(),
            "connect resolved during the handshake"
        );
        // Make room; the client's SYN is retried (after ~1 s) and succeeds.
        let server = std::thread::spawn(move || {
            let (first, _) = listener.accept().unwrap();
            let (ours, _) = listener.accept().unwrap();
            (first, ours)
        });
        let s = timeout(Duration::from_secs(5), connect)
            .await
            .expect("connect completes once the peer has room")
            .unwrap()
            .unwrap();
        assert_eq!(s.peer_addr().unwrap(), addr);
        let (_first, ours) = server.join().unwrap();
        assert_eq!(ours.peer_addr().unwrap(), s.local_addr().unwrap());
    });
    drop(filler);
}

#[test]
fn futures_io_traits_work() {
    block_on(async {
        let listener = TcpListener::bind(local()).unwrap();
        let addr = listener.local_addr().unwrap();
        echo_server(listener);
        let mut s = TcpStream::connect(addr).await.unwrap();
        // Called through the traits (the inherent methods share their names).
        AsyncWriteExt::write_all(&mut s, b"through futures-io")
            .await
            .unwrap();
        AsyncWriteExt::flush(&mut s).await.unwrap();
        let mut back = [0u8; 18];
        AsyncReadExt::read_exact(&mut s, &mut back).await.unwrap();
        assert_eq!(&back, b"through futures-io");
        // `&TcpStream` implements the traits too; close() half-closes.
        let mut r = &s;
        AsyncWriteExt::write_all(&mut r, b"!").await.unwrap();
        s.close().await.unwrap();
        let mut rest = Vec::new();
        (&s).read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"!");
    });
}
