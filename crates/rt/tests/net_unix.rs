//! Unix-domain stream sockets: echo through a listener in a temp dir, pairs,
//! EOF and the `futures-io` traits.

use duality_rt::net::{UnixListener, UnixStream};
use duality_rt::{block_on, spawn};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::path::PathBuf;

/// A fresh socket path, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> TempPath {
        let p = std::env::temp_dir().join(format!("duality-{}-{name}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempPath(p)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn echo_through_a_listener() {
    let path = TempPath::new("echo");
    let p = path.0.clone();
    block_on(async move {
        let listener = UnixListener::bind(&p).unwrap();
        drop(spawn(async move {
            loop {
                let s = listener.accept().await.unwrap();
                drop(spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => s.write_all(&buf[..n]).await.unwrap(),
                        }
                    }
                }));
            }
        }));
        let clients: Vec<_> = (0..4u8)
            .map(|c| {
                let p = p.clone();
                spawn(async move {
                    let s = UnixStream::connect(&p).await.unwrap();
                    for round in 0..20u8 {
                        s.write_all(&[c, round]).await.unwrap();
                        let mut back = [0u8; 2];
                        s.read_exact(&mut back).await.unwrap();
                        assert_eq!(back, [c, round]);
                    }
                })
            })
            .collect();
        for c in clients {
            c.await.unwrap();
        }
    });
}

#[test]
fn a_pair_talks_and_sees_eof() {
    block_on(async {
        let (a, b) = UnixStream::pair().unwrap();
        let writer = spawn(async move {
            let big = vec![7u8; 1 << 20]; // beyond the socket buffer: WouldBlock
            a.write_all(&big).await.unwrap();
            // `a` dropped here: EOF for `b`
        });
        let mut got = vec![0u8; 1 << 20];
        b.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&x| x == 7));
        writer.await.unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(b.read(&mut buf).await.unwrap(), 0);
        assert_eq!(
            b.read_exact(&mut buf).await.unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
    });
}

#[test]
fn a_pair_through_futures_io() {
    block_on(async {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        AsyncWriteExt::write_all(&mut a, b"ping").await.unwrap();
        a.close().await.unwrap(); // half-close
        let mut got = Vec::new();
        AsyncReadExt::read_to_end(&mut b, &mut got).await.unwrap();
        assert_eq!(got, b"ping");
        AsyncWriteExt::write_all(&mut b, b"pong").await.unwrap();
        let mut back = [0u8; 4];
        AsyncReadExt::read_exact(&mut a, &mut back).await.unwrap();
        assert_eq!(&back, b"pong");
    });
}

#[test]
fn connecting_to_a_missing_path_fails() {
    let path = TempPath::new("missing");
    block_on(async move {
        assert!(UnixStream::connect(&path.0).await.is_err());
    });
}

/// The peer consuming what we wrote must not wake our loop: sockets watch
/// writability only after a write had to wait (one useless wake-up per
/// request otherwise).
#[test]
fn a_peer_reading_our_data_does_not_wake_the_loop() {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut theirs = theirs;
        let mut buf = [0u8; 16];
        theirs.read_exact(&mut buf).unwrap();
        (buf, theirs) // kept open: its close would be a (real) event
    });
    let events = block_on(async move {
        let s = UnixStream::from_std(ours).unwrap();
        let me = duality_rt::event_loop::current().unwrap();
        let before = me.snapshot().io_events;
        s.write_all(&[9u8; 16]).await.unwrap();
        // The reader takes the bytes while this loop sleeps.
        duality_rt::time::sleep(std::time::Duration::from_millis(200)).await;
        let after = me.snapshot().io_events;
        drop(s);
        // Under io_uring the send itself completes once (our own event).
        let own = match duality_rt::event_loop::current_io_backend() {
            Some(duality_rt::IoBackend::Uring) => 1,
            _ => 0,
        };
        after - before - own
    });
    assert_eq!(reader.join().unwrap().0, [9u8; 16]);
    assert_eq!(events, 0, "the loop was woken by its peer's read");
}

/// A listener whose queue of connections not yet accepted is full: a
/// connect waits for room, as a blocking `connect(2)` does, instead of
/// failing with `EAGAIN` (a load generator opening thousands of
/// connections failed past the backlog).
#[test]
fn a_connect_to_a_full_listener_waits_for_room() {
    use std::os::fd::FromRawFd;
    let path = TempPath::new("backlog");
    // A listener with a backlog of 0: one connection waits in its queue,
    // the next finds it full.
    // SAFETY: plain socket calls on a descriptor made here and handed to
    // the std listener below, which owns and closes it; `addr` is a local
    // sockaddr_un large enough for the path.
    let listener = unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.0.as_os_str().as_encoded_bytes();
        assert!(bytes.len() < addr.sun_path.len());
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len),
            0
        );
        assert_eq!(libc::listen(fd, 0), 0);
        std::os::unix::net::UnixListener::from_raw_fd(fd)
    };
    let p = path.0.clone();
    block_on(async move {
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                spawn(async move { UnixStream::connect(&p).await })
            })
            .collect();
        // Long enough for the attempts past the queue to have failed.
        duality_rt::time::sleep(std::time::Duration::from_millis(50)).await;
        // Room at last: every connection gets through.
        let accepter = std::thread::spawn(move || {
            (0..4)
                .map(|_| listener.accept().unwrap().0)
                .collect::<Vec<_>>()
        });
        for c in clients {
            c.await.unwrap().expect("a connect failed on a full queue");
        }
        assert_eq!(accepter.join().unwrap().len(), 4);
    });
}
