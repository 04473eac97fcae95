use super::reactor::{Op, OpKind};
use super::{keep_buf, spare_buf, Accepting, Queue, Spare, St, ACCEPT_QUEUE, MOVE_MIN, RX_LIMIT};
use super::{
    lock_std, opcode, types, Io, NonZeroU64, RingConfig, UringReactor, Watch, BUF_GROUP, TAIL_PARTS,
};
use std::io::Write;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A blocking read with a 300 ms timeout on a socket nothing arrives
/// on: how it ended.
fn quiet_read_ends() -> std::io::ErrorKind {
    use std::io::Read;
    let (a, _b) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    (&a).read(&mut [0u8; 1]).unwrap_err().kind()
}

/// A ring's creator is interrupted once the ring is torn down (the
/// kernel's exit work sends it task work with a notification signal):
/// a socket read with a timeout on that thread fails with EINTR. The
/// probes run on a thread of their own, so the thread that asked (a
/// server's builder, a test's client) never sees it.
#[test]
fn probes_leave_the_asking_thread_uninterrupted() {
    if super::unavailable().is_some() {
        return;
    }
    let probed = std::thread::spawn(|| {
        super::on_own_thread(super::probe_ring);
        super::on_own_thread(super::probe_recv_limit);
        quiet_read_ends()
    });
    assert_ne!(probed.join().unwrap(), std::io::ErrorKind::Interrupted);
    // The control: the same probe run on the reading thread.
    let here = std::thread::spawn(|| {
        super::probe_ring();
        quiet_read_ends()
    });
    let here = here.join().unwrap();
    eprintln!("a probe on the reading thread: its read ended {here:?}");
}

#[test]
fn after_running_out_of_descriptors_accepts_go_one_at_a_time_for_a_while() {
    let fd = || std::fs::File::open("/dev/null").unwrap().into();
    let mut acc = Accepting {
        want: true,
        ..Default::default()
    };
    // Multishot while the queue has room.
    acc.accepted.push_back(fd());
    assert_eq!(acc.arm_next(), Some(false));
    acc.accepted.extend((1..ACCEPT_QUEUE).map(|_| fd()));
    assert_eq!(acc.arm_next(), None, "a full queue pauses accepting");
    acc.accepted.clear();
    // Paced: one armed only once the last one was taken.
    acc.paced_until = Some(Instant::now() + Duration::from_secs(60));
    assert_eq!(acc.arm_next(), Some(true));
    acc.accepted.push_back(fd());
    assert_eq!(acc.arm_next(), None);
    acc.accepted.clear();
    acc.armed = Some(1);
    assert_eq!(acc.arm_next(), None, "one in flight at most");
    acc.armed = None;
    // The pace ends by itself.
    acc.paced_until = Some(Instant::now() - Duration::from_millis(1));
    assert_eq!(acc.arm_next(), Some(false));
    assert!(acc.paced_until.is_none());
    acc.want = false;
    assert_eq!(acc.arm_next(), None, "nobody accepts");
}

/// A ring whose quiet receives are looked at every 20 ms, and the
/// socket it wakes on; `None` where io_uring is refused.
fn ring() -> Option<(UringReactor, UnixStream, UnixStream)> {
    ring_with(true)
}

/// [`ring`], its receives limited to their room where the kernel can
/// (`recv_limit`) or only cancelled past it.
fn ring_with(recv_limit: bool) -> Option<(UringReactor, UnixStream, UnixStream)> {
    if super::unavailable().is_some() {
        return None;
    }
    let (wake, peer) = UnixStream::pair().unwrap();
    let config = RingConfig {
        entries: 64,
        buffers: 64,
        buffer_size: 4096,
        quiet: Duration::from_millis(20),
        linger: Duration::from_millis(100),
        recv_limit,
    };
    let r = UringReactor::new(config, wake.as_raw_fd(), u16::MAX).unwrap();
    Some((r, wake, peer))
}

/// Turns of `r` until `done` says so, at most 5 s.
fn turn_until(r: &UringReactor, what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < until, "{what}");
        r.poll(Some(Duration::from_millis(5))).unwrap();
    }
}

/// Where the kernel takes deferred task work (6.1+), a loop's ring
/// uses it (with the single issuer it requires); and a ring so made
/// still completes a receive and wakes a loop asleep in it.
#[test]
fn rings_defer_completion_work_where_the_kernel_can() {
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let kernel_can = io_uring::IoUring::<io_uring::squeue::Entry>::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(8)
        .is_ok();
    let single = r.ring.borrow().params().is_setup_single_issuer();
    assert_eq!(single, kernel_can && !super::reactor::cooperative_taskrun());
    // A sleeping wait ends when a peer on another thread writes.
    let (mine, mut peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        peer.write_all(b"wake").unwrap();
        peer
    });
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut buf = [0u8; 8];
    // Each wait is long: only the write can end it in time.
    let (start, wait) = (Instant::now(), Duration::from_secs(10));
    let n = loop {
        match io.poll_read(&mut cx, &mut buf) {
            std::task::Poll::Ready(n) => break n.unwrap(),
            std::task::Poll::Pending => {
                assert!(start.elapsed() < wait, "the receive never woke the loop");
                r.poll(Some(wait)).unwrap();
            }
        }
    };
    assert_eq!(&buf[..n], b"wake");
    drop(writer.join().unwrap());
}

/// A receive the kernel never completes (the race [`Watch`] is for,
/// made here by arming the receive on another, silent socket) is
/// found and restarted: its reader gets the bytes and the end its own
/// socket holds. Before, the reader waited for ever.
#[test]
fn a_receive_the_kernel_never_completes_is_restarted() {
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let (mine, mut peer) = UnixStream::pair().unwrap();
    let (silent, _silent_peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    {
        assert!(r.ensure_bufs());
        let mut st = lock_std(&io.st);
        st.want_recv = true;
        let look = Instant::now() + r.config.quiet;
        let ud = r.ops.borrow_mut().insert(Op {
            io: Some(io.clone()),
            kind: OpKind::Recv(Watch::new(look)),
        });
        st.recv = NonZeroU64::new(ud);
        r.quiet_due.set(Some(look));
        let fd = types::Fd(silent.as_raw_fd());
        r.push(opcode::RecvMulti::new(fd, BUF_GROUP).build().user_data(ud));
    }
    peer.write_all(b"last words").unwrap();
    drop(peer);
    turn_until(&r, "the stuck receive was never restarted", || {
        lock_std(&io.st).rx_eof
    });
    let st = lock_std(&io.st);
    assert_eq!(&st.rx[st.rx_pos as usize..], b"last words");
}

/// A closed socket's receive whose cancel was lost (made here by
/// marking it cancelled without sending one) is cancelled again at a
/// later look, even while its peer goes on sending (completions do not
/// say the cancel arrived): the operation ends and lets its socket go.
/// Before, it stayed in the table, holding the socket and its
/// descriptor, for as long as the loop ran.
#[test]
fn a_closed_sockets_receive_whose_cancel_was_lost_is_cancelled_again() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for sending in [false, true] {
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        {
            assert!(r.ensure_bufs());
            let mut st = lock_std(&io.st);
            let look = Instant::now() + r.config.quiet;
            let ud = r.ops.borrow_mut().insert(Op {
                io: Some(io.clone()),
                kind: OpKind::Recv(Watch::new(look)),
            });
            st.recv = NonZeroU64::new(ud);
            st.closed = true;
            st.recv_cancelled = true;
            r.quiet_due.set(Some(look));
            let fd = types::Fd(io.fd);
            r.push(opcode::RecvMulti::new(fd, BUF_GROUP).build().user_data(ud));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while sending && !stop.load(Ordering::Relaxed) {
                    if peer.write_all(b"x").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                peer
            })
        };
        let gone = Arc::downgrade(&io);
        drop(io);
        turn_until(&r, "the receive was never cancelled again", || {
            r.ops.borrow().live() == 0
        });
        stop.store(true, Ordering::Relaxed);
        drop(sender.join().unwrap());
        assert!(gone.upgrade().is_none(), "the socket outlived its receive");
    }
}

/// This thread's CPU time (user and system).
fn thread_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_THREAD
    // asks for the calling thread's figures.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
}

/// A TCP loopback client that has half-closed, and the server's end
/// of it on `r`.
fn half_closed_client(r: &UringReactor) -> (std::net::TcpStream, Arc<Io>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (server, _) = l.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    (client, Io::new(server.into_raw_fd(), r.handle().clone()))
}

/// A client that half-closes, then reads slowly: sends that find its
/// socket full come back with `EAGAIN` (its FIN ends their wait for
/// room, and a half-closed socket keeps waking them). They were taken
/// for errors (a half-closed HTTP client pipelining a large file lost
/// the rest of its answers: "write timeout" after 1 s of a 60 s one);
/// sent again at once, they spun the loop while the client paused.
/// Now every byte arrives, and the paused client costs the loop little.
#[test]
fn sends_to_a_half_closed_client_lose_nothing_and_do_not_spin() {
    use std::io::Read;
    const TOTAL: usize = 8 << 20;
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let (mut client, io) = half_closed_client(&r);
    // The client reads 2 MiB at a time, pausing between them.
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; 0];
        let mut buf = vec![0u8; 1 << 16];
        let mut next_pause = 1 << 20;
        loop {
            if got.len() >= next_pause {
                std::thread::sleep(Duration::from_millis(300));
                next_pause += 2 << 20;
            }
            match client.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("client read: {e}"),
            }
        }
    });
    // Responses as a web server sends a cached file: a head, the
    // shared body, an end (gather sends).
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let body: Arc<[u8]> = (0..60_000).map(|i| (i % 251) as u8).collect();
    let body = crate::net::SharedBytes::from(body);
    let (mut data, mut i) = (Vec::with_capacity(TOTAL + 70_000), 0);
    let (start, cpu) = (Instant::now(), thread_cpu());
    turn_until(&r, "the sends never finished", || {
        while data.len() < TOTAL {
            let mut head = format!("{i:08}").into_bytes();
            let whole = [&head[..], &body[..], b"\r\n"].concat();
            match io.poll_write_shared(&mut cx, &mut head, &body, 0..body.len(), b"\r\n") {
                std::task::Poll::Ready(Ok(())) => {
                    data.extend_from_slice(&whole);
                    i += 1;
                }
                std::task::Poll::Ready(Err(e)) => {
                    panic!("write after {} bytes: {e}", data.len())
                }
                std::task::Poll::Pending => return false,
            }
        }
        lock_std(&io.st).tx_idle()
    });
    let (wall, busy) = (start.elapsed(), thread_cpu() - cpu);
    let got = close_and_join(&r, io, reader);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the bytes differ");
    // A spin takes the whole pause (and more); waiting takes little.
    // Where the kernel's buffers took every byte before the client's
    // first pause (7 ms in one CI run), there was no pause to spin in.
    if wall >= Duration::from_millis(250) {
        assert!(
            busy < wall / 2,
            "the loop used {busy:?} of CPU in {wall:?} of a paused client"
        );
    }
}

/// A half-closed client that read a little and then stopped, still
/// connected: once its socket is closed, dropping what is unsent (a
/// write timeout) or lingering over it in vain, the socket, its
/// descriptor and its queued bytes are let go, whether the send waits
/// for room or behind its resend delay. Before, neither could be
/// cancelled by descriptor and the socket stayed for as long as the
/// client did (a resend every 512 ms, for ever).
#[test]
fn a_half_closed_client_that_stopped_reading_is_let_go() {
    use std::io::Read;
    use std::sync::atomic::{AtomicBool, Ordering};
    for (gather, discard) in [(true, true), (true, false), (false, true), (false, false)] {
        let Some((r, _wake, _w)) = ring() else {
            return;
        };
        let (mut client, io) = half_closed_client(&r);
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        // Reads 1 MiB at a time with pauses until told to stop, then
        // nothing, connected until the test ends.
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            let mut got = 0;
            while !stopped.load(Ordering::Relaxed) {
                got += client.read(&mut buf).unwrap();
                if got >= 1 << 20 {
                    got = 0;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            let _ = done_rx.recv();
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let body: Arc<[u8]> = vec![7u8; 60_000].into();
        let body = crate::net::SharedBytes::from(body);
        let mut big = vec![b'z'; 64 << 20];
        if !gather {
            assert!(io.poll_write_vec(&mut cx, &mut big).is_ready());
        }
        // The client stops while a send waits: gather sends right
        // after one came back with EAGAIN (sent again behind its
        // delay), the plain one while it waits for room.
        let start = Instant::now();
        loop {
            if gather {
                // Gather sends until one waits.
                let mut head = b"head".to_vec();
                while io
                    .poll_write_shared(&mut cx, &mut head, &body, 0..body.len(), b"")
                    .is_ready()
                {
                    head = b"head".to_vec();
                }
            }
            let resends = || lock_std(&io.st).cold.as_ref().map_or(0, |c| c.resends);
            let before = resends();
            r.poll(Some(Duration::from_millis(5))).unwrap();
            let waited = start.elapsed() > Duration::from_secs(1);
            if waited && (!gather || resends() > before) {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "no EAGAIN came");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(!lock_std(&io.st).tx_idle(), "the client took everything");
        if discard {
            io.discard_unsent();
        }
        io.release();
        let gone = Arc::downgrade(&io);
        drop(io);
        let at = Instant::now();
        while gone.upgrade().is_some() {
            assert!(
                at.elapsed() < Duration::from_secs(3),
                "gather {gather} discard {discard}: the socket is still there after {:?}",
                at.elapsed()
            );
            r.poll(Some(Duration::from_millis(10))).unwrap();
        }
        drop(done_tx);
        reader.join().unwrap();
    }
}

/// A client far ahead of its reader: receiving stops at the queue's
/// limit, and the reader still gets every byte, in order, and the end.
/// With the kernel's total per receive the queue never holds more than
/// the limit and one buffer; with the cancel alone, no more than one
/// reap's worth of the ring's buffers past it (the cancel goes in at
/// once). Before, the cancel waited for the turn's end and a client
/// pipelining without reading held ~620 KB of a server per connection.
#[test]
fn a_receive_ahead_of_its_reader_stops_near_the_limit() {
    const TOTAL: usize = 4 << 20;
    for limited in [true, false] {
        let Some((r, _wake, _w)) = ring_with(limited) else {
            return;
        };
        let exact = r.recv_limit;
        let (mine, mut peer) = UnixStream::pair().unwrap();
        let io = Io::new(mine.into_raw_fd(), r.handle().clone());
        let writer = std::thread::spawn(move || {
            let mut at = 0u32;
            let mut block = vec![0u8; 64 * 1024];
            for _ in 0..TOTAL / block.len() {
                for b in block.chunks_mut(4) {
                    b.copy_from_slice(&at.to_le_bytes());
                    at += 1;
                }
                peer.write_all(&block).unwrap();
            }
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(io.poll_readable(&mut cx).is_pending());
        let mut most = 0;
        turn_until(&r, "the receive never filled the queue", || {
            most = most.max(lock_std(&io.st).unread());
            most >= RX_LIMIT
        });
        // The writer is still blocked: a few more turns bring nothing
        // past the bound.
        for _ in 0..20 {
            r.poll(Some(Duration::from_millis(2))).unwrap();
            most = most.max(lock_std(&io.st).unread());
        }
        let bound = match exact {
            true => RX_LIMIT + r.config.buffer_size as usize,
            false => RX_LIMIT + r.config.buffers as usize * r.config.buffer_size as usize,
        };
        assert!(
            most <= bound,
            "limited {limited} (kernel: {exact}): {most} bytes queued"
        );
        // The reader takes it all, in order, to the end.
        let (mut got, mut next) = (0, 0u32);
        let mut buf = vec![0u8; 10_000];
        let mut carry = Vec::new();
        turn_until(&r, "the reader never got every byte", || loop {
            match io.poll_read(&mut cx, &mut buf) {
                std::task::Poll::Ready(Ok(0)) => return true,
                std::task::Poll::Ready(Ok(n)) => {
                    got += n;
                    carry.extend_from_slice(&buf[..n]);
                    let whole = carry.len() / 4 * 4;
                    for w in carry[..whole].chunks(4) {
                        assert_eq!(u32::from_le_bytes(w.try_into().unwrap()), next);
                        next += 1;
                    }
                    carry.drain(..whole);
                    most = most.max(lock_std(&io.st).unread());
                }
                std::task::Poll::Ready(Err(e)) => panic!("read: {e}"),
                std::task::Poll::Pending => return false,
            }
        });
        writer.join().unwrap();
        assert_eq!(got, TOTAL);
        assert!(most <= bound, "{most} bytes queued while reading");
        io.release();
    }
}

/// An accept the kernel never completes (the race [`Watch`] is for,
/// made here by arming the accept on another, silent listener) is
/// found and restarted: the client waiting on its own listener is
/// accepted. Before, it waited for ever.
#[test]
fn an_accept_the_kernel_never_completes_is_restarted() {
    use std::os::unix::net::UnixListener;
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("duality-uring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("accept.sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let silent_path = dir.join("silent.sock");
    let _ = std::fs::remove_file(&silent_path);
    let silent = UnixListener::bind(&silent_path).unwrap();
    let io = Io::new(listener.into_raw_fd(), r.handle().clone());
    {
        let mut st = lock_std(&io.st);
        let acc = &mut st.cold.get_or_insert_with(Default::default).acc;
        acc.want = true;
        let look = Instant::now() + r.config.quiet;
        let ud = r.ops.borrow_mut().insert(Op {
            io: Some(io.clone()),
            kind: OpKind::Accept(Watch::new(look)),
        });
        acc.armed = Some(ud);
        r.quiet_due.set(Some(look));
        let fd = types::Fd(silent.as_raw_fd());
        r.push(opcode::AcceptMulti::new(fd).build().user_data(ud));
    }
    let _client = UnixStream::connect(&path).unwrap();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut accepted = None;
    turn_until(&r, "the stuck accept was never restarted", || {
        if let std::task::Poll::Ready(fd) = io.poll_accept(&mut cx) {
            accepted = Some(fd.unwrap());
        }
        accepted.is_some()
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads `n` bytes from `io` through `buf`, turning `r` as needed.
fn read_n(r: &UringReactor, io: &Arc<Io>, buf: &mut [u8], n: usize) -> Vec<u8> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut got = Vec::new();
    turn_until(r, "the bytes arrive", || {
        while let std::task::Poll::Ready(k) = io.poll_read(&mut cx, buf) {
            got.extend_from_slice(&buf[..k.unwrap()]);
        }
        got.len() >= n
    });
    got
}

/// A large read stops the ring's receive and reads with `recv`, but
/// not before that receive has ended (its completions may hold bytes
/// that came first): the bytes come in order. Small reads after it
/// stay direct for a while, then the ring receives again.
#[test]
fn a_large_read_goes_direct_once_the_rings_receive_has_ended() {
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let (mine, mut peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut small = [0u8; 16];
    assert!(io.poll_read(&mut cx, &mut small).is_pending());
    turn_until(&r, "the receive is armed", || {
        lock_std(&io.st).recv.is_some()
    });
    // More than the ring's buffers hold: its receive takes what they
    // hold and ends for lack of buffers (ENOBUFS), its completions not
    // read yet; the rest waits in the socket, where a `recv` now would
    // find bytes that come after those.
    let first: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    // (Room for all of it in the socket: this thread cannot wait.)
    socket2::SockRef::from(&peer)
        .set_send_buffer_size(1 << 20)
        .unwrap();
    peer.write_all(&first).unwrap();
    peer.write_all(b"-second").unwrap();
    let mut big = vec![0u8; super::DIRECT_MIN];
    assert!(io.poll_read(&mut cx, &mut big).is_pending(), "no recv yet");
    let want = [&first[..], b"-second"].concat();
    assert!(read_n(&r, &io, &mut big, want.len()) == want, "in order");
    assert!(
        lock_std(&io.st).recv.is_none(),
        "direct: the ring does not receive"
    );
    // Small reads stay direct for `DIRECT_STICKY` reads that find bytes.
    for i in 0..super::DIRECT_STICKY {
        peer.write_all(&[i]).unwrap();
        let std::task::Poll::Ready(n) = io.poll_read(&mut cx, &mut small) else {
            panic!("read {i} found nothing");
        };
        assert_eq!((n.unwrap(), small[0]), (1, i));
    }
    assert!(io.poll_read(&mut cx, &mut small).is_pending());
    turn_until(&r, "the ring receives again", || {
        lock_std(&io.st).recv.is_some()
    });
    peer.write_all(b"ring").unwrap();
    assert_eq!(read_n(&r, &io, &mut small, 4), b"ring");
}

/// A socket dropped with bytes its peer never reads is closed once its
/// linger ends by a loop that has nothing else to wait for: the wait
/// ends for it. Before, the loop slept on and the socket, its
/// descriptor and its bytes stayed until other traffic woke it.
#[test]
fn a_lingering_socket_closes_on_time_in_an_idle_loop() {
    closes_in_an_idle_loop(false);
}

/// A socket whose unsent bytes were given up on (the peer stopped
/// reading: a write timed out) closes at once, without its linger.
#[test]
fn a_socket_that_gave_up_on_its_bytes_closes_at_once() {
    closes_in_an_idle_loop(true);
}

/// A socket released after its loop's ring is gone (a connection
/// dropped off its loop at shutdown, say) is dropped and its descriptor
/// closed. It was put on the ring's dirty list, which no loop takes any
/// more and which it kept alive itself: both stayed for ever.
#[test]
fn a_socket_released_after_its_loop_ended_is_closed() {
    use std::io::Read;
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let (mine, mut peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    drop(r);
    io.release();
    let gone = Arc::downgrade(&io);
    drop(io);
    assert!(gone.upgrade().is_none(), "the socket outlived its release");
    // Closed: the peer reads the end.
    assert_eq!(peer.read(&mut [0u8; 8]).unwrap(), 0);
}

fn closes_in_an_idle_loop(discard: bool) {
    let Some((mut r, _wake, mut poke)) = ring() else {
        return;
    };
    if discard {
        // Long enough to tell a linger from none.
        r.config.linger = Duration::from_secs(30);
    }
    let (mine, _peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // More than both sockets' buffers take: the send stalls.
    let mut bytes = vec![b'z'; 8 << 20];
    assert!(io.poll_write_vec(&mut cx, &mut bytes).is_ready());
    turn_until(&r, "the send never went in", || {
        lock_std(&io.st).tx_busy > 0
    });
    if discard {
        io.discard_unsent();
    }
    io.release();
    let gone = Arc::downgrade(&io);
    drop(io);
    // An endless wait (the old behaviour) ends here after 1.5 s.
    let poker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let _ = poke.write_all(b"x");
    });
    let t0 = Instant::now();
    while gone.upgrade().is_some() && t0.elapsed() < Duration::from_secs(5) {
        r.poll(None).unwrap();
    }
    let took = t0.elapsed();
    poker.join().unwrap();
    assert!(gone.upgrade().is_none(), "the socket outlived its linger");
    assert!(
        took < Duration::from_secs(1),
        "closed after {took:?} (linger {:?})",
        r.config.linger
    );
}

/// Reads `peer` to its end on a thread of its own.
fn read_to_end(peer: UnixStream) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &peer, &mut got).unwrap();
        got
    })
}

/// Closes `io` and turns the ring until `reader` has read everything.
fn close_and_join(
    r: &UringReactor,
    io: Arc<Io>,
    reader: std::thread::JoinHandle<Vec<u8>>,
) -> Vec<u8> {
    io.release();
    drop(io);
    turn_until(r, "the socket never closed", || reader.is_finished());
    reader.join().unwrap()
}

/// A shared body whose gather send comes back short (a peer that does
/// not read) goes on from where it lies: what is in flight still points
/// into the body, and no connection holds a copy of it. (The rest was
/// copied: clients pipelining requests for a 60 KB file and never
/// reading held 60 KB each.) The peer then gets every byte, in order.
#[test]
fn a_short_gather_send_goes_on_from_the_shared_body() {
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let (mine, peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let body: Arc<[u8]> = (0..(4u32 << 20)).map(|i| (i * 7) as u8).collect();
    let body = crate::net::SharedBytes::from(body);
    let mut head = b"head:".to_vec();
    assert!(io
        .poll_write_shared(&mut cx, &mut head, &body, 3..body.len(), b"")
        .is_ready());
    let in_flight = || {
        r.ops
            .borrow()
            .values()
            .find_map(|op| match (&op.io, &op.kind) {
                (Some(o), OpKind::Gather(g)) if Arc::ptr_eq(o, &io) => {
                    Some((g.head.len(), g.tail.parts[0].start))
                }
                (Some(o), OpKind::Send { buf, .. }) if Arc::ptr_eq(o, &io) => {
                    Some((buf.len(), usize::MAX))
                }
                _ => None,
            })
    };
    // The socket's buffers take a few hundred KiB: the first gather
    // comes back short, and its rest is in flight.
    turn_until(&r, "no short send", || {
        in_flight().is_some_and(|(_, start)| start > 3)
    });
    let (head_len, start) = in_flight().unwrap();
    assert_eq!(head_len, 0, "the head went first");
    assert!(start < body.len(), "sent from the body, at {start}");
    let reader = read_to_end(peer);
    turn_until(&r, "the body was never sent", || lock_std(&io.st).tx_idle());
    let got = close_and_join(&r, io, reader);
    assert_eq!(&got[..5], b"head:");
    assert!(got[5..] == body[3..], "{} bytes", got.len());
}

/// Bodies written in one turn (a pipeline of large cache values) go in
/// one gather send, each from where it lies, with the bytes between
/// them; past [`TAIL_PARTS`] bodies the writer waits for the send. Short
/// sends go on across the bodies, and the peer gets every byte in order.
#[test]
fn bodies_written_in_one_turn_go_in_one_gather_send() {
    let Some((r, _wake, _w)) = ring() else {
        return;
    };
    let (mine, peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let body: Arc<[u8]> = (0..(300u32 << 10)).map(|i| (i * 7) as u8).collect();
    let body = crate::net::SharedBytes::from(body);
    let mut want = Vec::new();
    for i in 0..TAIL_PARTS {
        let mut head = format!("VALUE k{i}\r\n").into_bytes();
        let range = i * 1000..body.len() - i;
        want.extend_from_slice(&head);
        want.extend_from_slice(&body[range.clone()]);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert!(io
            .poll_write_shared(&mut cx, &mut head, &body, range, b"\r\nEND\r\n")
            .is_ready());
        assert!(head.is_empty());
    }
    // Bytes written behind them join the last body's.
    assert!(io.poll_write(&mut cx, b"tail").is_ready());
    want.extend_from_slice(b"tail");
    let copies = {
        let st = lock_std(&io.st);
        let t = st.tx_tail.as_ref().unwrap();
        assert_eq!(t.parts.len(), TAIL_PARTS);
        st.tx.len() + t.copied()
    };
    assert!(copies < 300, "{copies} bytes copied");
    // One body more waits for the send.
    let mut head = b"more".to_vec();
    assert!(io
        .poll_write_shared(&mut cx, &mut head, &body, 0..10, b"")
        .is_pending());
    // One send in flight carries them all (the socket takes a few
    // hundred KiB of the ~4.7 MiB: it comes back short).
    r.poll(Some(Duration::ZERO)).unwrap();
    let gathers = || {
        r.ops
            .borrow()
            .values()
            .filter(|op| matches!(op.kind, OpKind::Gather(_)))
            .count()
    };
    assert_eq!(gathers(), 1);
    let reader = read_to_end(peer);
    turn_until(&r, "the bodies were never sent", || {
        lock_std(&io.st).tx_idle()
    });
    // Now it goes.
    assert!(io
        .poll_write_shared(&mut cx, &mut head, &body, 0..10, b"")
        .is_ready());
    want.extend_from_slice(b"more");
    want.extend_from_slice(&body[..10]);
    turn_until(&r, "the last body was never sent", || {
        lock_std(&io.st).tx_idle()
    });
    let got = close_and_join(&r, io, reader);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the byte stream differs");
}

/// A receive that completes as bytes come, or waits on a socket with
/// nothing to read, is never taken for a stuck one. (Without the total
/// limit: the stream here passes `RX_LIMIT`, where a limited receive
/// ends by design.)
#[test]
fn a_healthy_receive_is_left_alone() {
    let Some((r, _wake, _w)) = ring_with(false) else {
        return;
    };
    let (mine, mut peer) = UnixStream::pair().unwrap();
    let io = Io::new(mine.into_raw_fd(), r.handle().clone());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(io.poll_readable(&mut cx).is_pending());
    turn_until(&r, "no receive armed", || lock_std(&io.st).recv.is_some());
    let armed = lock_std(&io.st).recv;
    // Ten looks' worth of silence, then a steady stream for as long.
    let quiet_until = Instant::now() + 10 * r.config.quiet;
    turn_until(&r, "", || Instant::now() > quiet_until);
    let mut sent = 0;
    let mut got = Vec::new();
    let busy_until = Instant::now() + 10 * r.config.quiet;
    turn_until(&r, "", || {
        peer.write_all(&[b'x'; 512]).unwrap();
        sent += 512;
        let mut buf = [0u8; 4096];
        let n = lock_std(&io.st).take_rx(&mut buf);
        got.extend_from_slice(&buf[..n]);
        Instant::now() > busy_until
    });
    assert_eq!(lock_std(&io.st).recv, armed, "the receive was restarted");
    turn_until(&r, "bytes missing", || {
        let mut buf = [0u8; 4096];
        let n = lock_std(&io.st).take_rx(&mut buf);
        got.extend_from_slice(&buf[..n]);
        got.len() == sent
    });
    assert!(got.iter().all(|&b| b == b'x'));
}

/// An idle connection's armed receive is an `Op` in the loop's table:
/// its watch kept it at 40 bytes only with its time as a `Tick` (an
/// `Instant` made it 48, 8 bytes more per idle connection: 606-608
/// bytes each in `bench idle` against memcached's 602), and 32 once a
/// send's buffer was a one-pointer `Queue`.
#[test]
fn an_armed_receive_stays_small() {
    assert!(
        std::mem::size_of::<super::reactor::Op>() <= 32,
        "Op is {} bytes",
        std::mem::size_of::<super::reactor::Op>()
    );
}

#[test]
fn ticks_compare_across_the_wrap() {
    use super::Tick;
    let now = Instant::now();
    let t = Tick::of(now + Duration::from_millis(50));
    assert!(!t.by(now));
    assert!(t.by(now + Duration::from_millis(50)));
    assert!(t.by(now + Duration::from_secs(60)));
    let near = t.near(now);
    assert!(near >= now + Duration::from_millis(49) && near <= now + Duration::from_millis(51));
    // Across 2^32 ms: the difference decides, not the raw values.
    assert!(Tick(u32::MAX - 5).at_or_before(Tick(5)));
    assert!(!Tick(5).at_or_before(Tick(u32::MAX - 5)));
    assert!(Tick(7).at_or_before(Tick(7)));
}

/// Every connection, idle ones included, has an `Io` behind an `Arc`:
/// keep it within the allocator's 128-byte class (it was 256; readiness,
/// listener state and receive errors live in a box made on first use,
/// a queued shared body in a box of its own, spare buffers in the
/// thread's pool; 160 until the queues were one-pointer `Queue`s).
#[test]
fn a_sockets_ring_state_stays_small() {
    let arc_header = 2 * std::mem::size_of::<usize>();
    assert!(
        std::mem::size_of::<super::Io>() + arc_header <= 128,
        "Io is {} bytes",
        std::mem::size_of::<super::Io>()
    );
}

#[test]
fn small_buffers_are_spares_for_the_next_socket_and_large_ones_are_freed() {
    let b = Queue::with_capacity(100);
    let p = b.as_ptr();
    keep_buf(b, Spare::Rx);
    // A socket receiving next takes it (an idle one held none).
    let mut st = St::default();
    st.push_rx(b"get k\r\n");
    assert_eq!(st.rx.as_ptr(), p);
    assert_eq!(&st.rx[..], b"get k\r\n");
    keep_buf(Queue::with_capacity(4 * Spare::Rx.keep()), Spare::Rx);
    assert_eq!(
        spare_buf(Spare::Rx).capacity(),
        0,
        "a large buffer is not kept"
    );
}

#[test]
fn a_small_first_write_is_copied_into_a_spare_queue_and_the_writer_keeps_its_buffer() {
    let sent = Queue::with_capacity(300);
    let p = sent.as_ptr();
    keep_buf(sent, Spare::Tx);
    // A drained receive queue is not what a writer's queue gets.
    keep_buf(Queue::with_capacity(64), Spare::Rx);
    let mut st = St::default();
    let mut out = Vec::with_capacity(2000);
    out.extend_from_slice(b"VALUE k 0 5\r\nhello\r\nEND\r\n");
    let q = out.as_ptr();
    st.queue_first(&mut out);
    assert_eq!(st.tx.as_ptr(), p, "the kept send buffer, not a new one");
    assert_eq!(&st.tx[..], b"VALUE k 0 5\r\nhello\r\nEND\r\n");
    assert!(st.tx_tail.is_none());
    assert!(out.is_empty() && out.as_ptr() == q && out.capacity() == 2000);
}

#[test]
fn a_large_first_write_moves_into_the_tail_uncopied() {
    let mut st = St::default();
    let mut out: Vec<u8> = (0..MOVE_MIN + 1).map(|i| i as u8).collect();
    let (p, want) = (out.as_ptr(), out.clone());
    st.queue_first(&mut out);
    assert!(out.is_empty(), "the writer's buffer is left empty");
    assert!(st.tx.is_empty(), "nothing copied into the queue");
    let tail = st.tx_tail.as_ref().expect("the buffer is the tail");
    assert_eq!(tail.parts.len(), 1);
    assert_eq!(
        tail.parts[0].bytes().as_ptr(),
        p,
        "the same bytes, not a copy"
    );
    assert_eq!(tail.parts[0].bytes(), &want[..]);
    assert_eq!(st.tx_copied(), 0, "a moved buffer is not counted as copied");
    // What is written next goes behind it, in order.
    st.queue(b"END\r\n");
    assert_eq!(st.tx_tail.as_ref().unwrap().parts[0].after, b"END\r\n");
}

/// A reader that takes only part of what arrived, every time, while
/// bytes keep coming: the queue holds about what is unread, not every
/// byte ever received (it held all 64 MiB before `push_rx`).
#[test]
fn a_reader_that_never_catches_up_keeps_the_queue_small() {
    let mut st = St::default();
    let chunk = [7u8; 4096];
    for _ in 0..16 * 1024 {
        st.push_rx(&chunk);
        // Read three quarters of what is unread.
        st.rx_pos += (st.unread() * 3 / 4) as u32;
        assert!(st.unread() > 0);
    }
    assert!(
        st.rx.len() <= 4 * (st.unread() + chunk.len()),
        "queue {} bytes for {} unread",
        st.rx.len(),
        st.unread()
    );
    assert!(st.rx.capacity() < 1 << 20, "capacity {}", st.rx.capacity());
    assert!(st.rx[st.rx_pos as usize..].iter().all(|&b| b == 7));
}

/// A turn's completions can bring far more than `RX_LIMIT` before the
/// receive's cancel takes effect: the excess is kept in chunks (the
/// queue's capacity does not double for it), read back in order, and
/// freed as it is read.
#[test]
fn bytes_past_the_limit_wait_in_chunks_in_order() {
    let mut st = St::default();
    let mut sent = 0u32;
    let mut chunk = [0u8; 4096];
    while st.unread() < RX_LIMIT + (2 << 20) {
        for b in chunk.chunks_mut(4) {
            b.copy_from_slice(&sent.to_le_bytes());
            sent += 1;
        }
        st.push_rx(&chunk);
    }
    assert!(
        st.rx.capacity() <= RX_LIMIT + chunk.len(),
        "capacity {}",
        st.rx.capacity()
    );
    let total = st.unread();
    let mut buf = vec![0u8; 10_000];
    let (mut got, mut next) = (0, 0u32);
    while st.unread() > 0 {
        let n = st.take_rx(&mut buf);
        assert!(n == buf.len() || st.unread() == 0, "a short read of {n}");
        got += n;
        // 4-byte words throughout (reads and chunks are multiples of 4).
        for w in buf[..n].chunks(4) {
            assert_eq!(u32::from_le_bytes(w.try_into().unwrap()), next);
            next += 1;
        }
    }
    assert_eq!(got, total);
    assert_eq!(next, sent);
    assert!(st.cold.as_ref().unwrap().rx_over.is_empty());
}

/// Appending keeps the unread bytes and their order.
#[test]
fn appending_keeps_what_is_unread_in_order() {
    let mut st = St::default();
    st.push_rx(b"abcdef");
    st.rx_pos = 4;
    st.push_rx(b"gh");
    assert_eq!(&st.rx[st.rx_pos as usize..], b"efgh");
    st.rx_pos += 1;
    st.push_rx(b"i");
    assert_eq!(&st.rx[st.rx_pos as usize..], b"fghi");
}
