//! The per-loop ring: submissions batched per turn, completions reaped
//! and handed to the sockets and file reads they belong to.

use super::*;

/// Rings run completion work cooperatively (`COOP_TASKRUN`) instead of
/// deferred where `DUALITY_URING_COOP` is set: the earlier default, kept to
/// compare the two on a host.
pub(super) fn cooperative_taskrun() -> bool {
    static COOP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COOP.get_or_init(|| std::env::var_os("DUALITY_URING_COOP").is_some())
}

pub(super) enum OpKind {
    /// A file read (`crate::fs::read_at`). Boxed: an idle connection's
    /// armed receive is an `Op` too, and the largest variant sizes them all.
    File(Box<FileOp>),
    Recv(Watch),
    Send {
        buf: Queue,
        off: usize,
    },
    /// Queued bytes and a shared tail (boxed, as `File`).
    Gather(Box<GatherSend>),
    Accept(Watch),
    Poll {
        write: bool,
    },
    /// The delay before a direction's next poll ([`POLL_RETRY`]).
    PollDelay {
        write: bool,
    },
}

pub(super) struct Op {
    /// The socket, for socket operations.
    pub(super) io: Option<Arc<Io>>,
    pub(super) kind: OpKind,
}

/// The per-loop ring. Only the loop's thread uses it.
pub(crate) struct UringReactor {
    pub(super) ring: RefCell<IoUring>,
    /// In-flight operations, addressed by their user data.
    pub(super) ops: RefCell<GenTable<Op>>,
    bufs: RefCell<Option<BufRing>>,
    pub(super) config: RingConfig,
    shared: Arc<UringShared>,
    wake_fd: RawFd,
    wake_armed: Cell<bool>,
    lingering: RefCell<Vec<(Instant, Arc<Io>)>>,
    /// When the next look at quiet receives is due ([`Watch`]); `None`:
    /// no receive is armed.
    pub(super) quiet_due: Cell<Option<Instant>>,
    /// What fetches read into ([`UringReactor::fetch_file`]); made on the
    /// first, freed with the ring. A raw pointer, never a reference: the
    /// kernel may be writing into it whenever a fetch is in flight.
    scratch: Cell<Option<std::ptr::NonNull<[u8]>>>,
    /// Receives are armed with a total limit ([`RingConfig::recv_limit`]).
    pub(super) recv_limit: bool,
}

impl UringReactor {
    pub(crate) fn new(
        config: RingConfig,
        wake_fd: RawFd,
        loop_id: u16,
    ) -> io::Result<UringReactor> {
        if let Some(why) = unavailable() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        let entries = config.entries.clamp(8, 32768);
        // Completion work runs only when the loop enters the kernel for
        // completions (no interrupts of a busy loop; the loop's thread is
        // the ring's only submitter), and the kernel flags the ring when
        // some waits. Deferred (DEFER_TASKRUN, 6.1+) rather than cooperative
        // (COOP_TASKRUN, 5.19+): a sleeping loop is then woken by the
        // socket's own wake-up instead of through task work: on a 6.18 VM,
        // 2.2x sped's transactions/s at 8 clients over Unix sockets, 1.0-1.1x
        // elsewhere (docs/results/io_uring/taskrun-ab/). An earlier kernel
        // stalled pipelined gets under it; 6.18 does not. Older kernels
        // refuse the flags: cooperative, then plain.
        let tuned = |defer: bool| {
            let mut b = IoUring::builder();
            match defer {
                true => b.setup_single_issuer().setup_defer_taskrun(),
                false => b.setup_coop_taskrun(),
            };
            b.setup_taskrun_flag()
                .setup_cqsize(entries * 4)
                .build(entries)
        };
        let defer = !cooperative_taskrun();
        let ring = tuned(defer)
            .or_else(|e| if defer { tuned(false) } else { Err(e) })
            .or_else(|_| IoUring::builder().setup_cqsize(entries * 4).build(entries))?;
        let r = UringReactor {
            ring: RefCell::new(ring),
            ops: RefCell::new(GenTable::default()),
            bufs: RefCell::new(None),
            shared: Arc::new(UringShared {
                loop_id,
                dirty: DirtyList::new(),
                abandoned: DirtyList::new(),
                live: AtomicUsize::new(0),
            }),
            wake_fd,
            wake_armed: Cell::new(false),
            lingering: RefCell::new(Vec::new()),
            quiet_due: Cell::new(None),
            scratch: Cell::new(None),
            recv_limit: config.recv_limit && recv_limit_supported(),
            config,
        };
        r.arm_wake();
        Ok(r)
    }

    pub(crate) fn handle(&self) -> &Arc<UringShared> {
        &self.shared
    }

    pub(crate) fn sources(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    pub(crate) fn has_no_sources(&self) -> bool {
        self.sources() == 0
    }

    pub(super) fn push(&self, sqe: squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        loop {
            // SAFETY: every pointer an entry carries is owned by the
            // operation table entry named by its user data until its
            // completion (a send's bytes; a gather send's boxed message and
            // its iovecs; a file read's buffer), or by the ring until its
            // drop, which waits for or leaks what is in flight (the scratch
            // memory fetches read into), or is a static (a poll delay's
            // `POLL_RETRY` timespec). Receives use provided buffers.
            if unsafe { ring.submission().push(&sqe) }.is_ok() {
                return;
            }
            // Full: submit what is queued (rare; the queue holds a turn's worth).
            if let Err(e) = ring.submit() {
                if e.raw_os_error() != Some(libc::EBUSY) && e.raw_os_error() != Some(libc::EINTR) {
                    tracing::warn!(error = %e, "io_uring submit failed");
                }
                ring.completion().sync();
            }
        }
    }

    fn arm_wake(&self) {
        let sqe = opcode::PollAdd::new(types::Fd(self.wake_fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(WAKE);
        self.push(sqe);
        self.wake_armed.set(true);
    }

    fn cancel(&self, ud: u64) {
        self.push(opcode::AsyncCancel::new(ud).build().user_data(IGNORE));
    }

    pub(super) fn ensure_bufs(&self) -> bool {
        if self.bufs.borrow().is_some() {
            return true;
        }
        match BufRing::new(
            &self.ring.borrow(),
            self.config.buffers,
            self.config.buffer_size,
        ) {
            Ok(b) => {
                *self.bufs.borrow_mut() = Some(b);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "io_uring: cannot register the provided-buffer ring");
                false
            }
        }
    }

    /// Turns what sockets asked for into submissions, and cancels the file
    /// reads whose futures were dropped.
    fn flush_dirty(&self) {
        for io in self.shared.dirty.take() {
            io.queued.store(false, Ordering::Release);
            self.plan(&io);
        }
        for read in self.shared.abandoned.take() {
            read.queued.store(false, Ordering::Release);
            let ud = lock_std(&read.st).ud;
            // Still in flight (the table's keys are generational: a key
            // reused since names another operation and misses).
            let live = matches!(
                self.ops.borrow().get(ud),
                Some(Op { kind: OpKind::File(f), .. }) if Arc::ptr_eq(&f.done, &read)
            );
            if live {
                self.cancel(ud);
            }
        }
    }

    fn plan(&self, io: &Arc<Io>) {
        let mut st = lock_std(&io.st);
        let fd = types::Fd(io.fd);
        if st.closed {
            if let Some(ud) = st.recv {
                if !st.recv_cancelled {
                    st.recv_cancelled = true;
                    self.cancel(ud.get());
                }
            }
            if let Some(cold) = st.cold.as_mut() {
                if let Some(ud) = cold.acc.armed.take() {
                    self.cancel(ud);
                }
                cold.acc.want = false;
                for ud in cold.polls.iter_mut().filter_map(Option::take) {
                    self.cancel(ud.get());
                }
                for ud in cold.delays.iter_mut().filter_map(Option::take) {
                    self.cancel(ud.get());
                }
                cold.want_poll = 0;
            }
            st.want_recv = false;
        }
        if !st.want_recv && !st.recv_cancelled {
            // Its reader receives directly now (see `Io::try_read`).
            if let Some(ud) = st.recv {
                st.recv_cancelled = true;
                self.cancel(ud.get());
            }
        }
        if st.want_recv && st.recv.is_none() && !st.rx_eof && st.unread() < RX_LIMIT {
            if self.ensure_bufs() {
                let ud = self.insert_watched(io, OpKind::Recv);
                st.recv = NonZeroU64::new(ud);
                st.recv_cancelled = false;
                let sqe = opcode::RecvMulti::new(fd, BUF_GROUP).build().user_data(ud);
                // At most what the queue has room for: the receive ends
                // there (a completion without `MORE`, as when buffers ran
                // out), and the reader's catching up arms the next one.
                let room = (RX_LIMIT - st.unread()) as u32;
                self.push(match self.recv_limit {
                    true => with_total_limit(sqe, room),
                    false => sqe,
                });
            } else {
                st.set_rx_err(io::Error::other("io_uring: no receive buffers"));
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
        }
        if let Some(acc) = st.cold.as_mut().map(|c| &mut c.acc) {
            if let Some(paced) = acc.arm_next() {
                let ud = self.insert_watched(io, OpKind::Accept);
                acc.armed = Some(ud);
                let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
                let sqe = if paced {
                    let (addr, len) = (std::ptr::null_mut(), std::ptr::null_mut());
                    opcode::Accept::new(fd, addr, len).flags(flags).build()
                } else {
                    opcode::AcceptMulti::new(fd).flags(flags).build()
                };
                self.push(sqe.user_data(ud));
            }
        }
        if st.tx_busy == 0 && st.tx_err.is_none() {
            self.submit_queued(io, &mut st);
        }
        for (i, write) in [(0, false), (1, true)] {
            let bit = if write { WRITABLE } else { READABLE };
            let Some(cold) = st.cold.as_mut() else {
                break;
            };
            if cold.want_poll & bit != 0 && cold.polls[i].is_none() && cold.delays[i].is_none() {
                let level = cold.backoff[i] as usize;
                if level > 0 && cold.delayed & bit == 0 {
                    let ud = self.ops.borrow_mut().insert(Op {
                        io: Some(io.clone()),
                        kind: OpKind::PollDelay { write },
                    });
                    cold.delays[i] = NonZeroU64::new(ud);
                    let ts: *const types::Timespec = &POLL_RETRY[level - 1];
                    self.push(opcode::Timeout::new(ts).build().user_data(ud));
                    continue;
                }
                cold.delayed &= !bit;
                let ud = self.ops.borrow_mut().insert(Op {
                    io: Some(io.clone()),
                    kind: OpKind::Poll { write },
                });
                cold.polls[i] = NonZeroU64::new(ud);
                let mask = if write { libc::POLLOUT } else { libc::POLLIN };
                self.push(opcode::PollAdd::new(fd, mask as u32).build().user_data(ud));
            }
        }
        if st.closed && st.tx_busy > 0 && !st.lingering {
            st.lingering = true;
            if st.discard {
                // The peer stopped reading: close now, as epoll's close
                // leaves the rest to the kernel.
                self.give_up(io);
            } else {
                self.lingering
                    .borrow_mut()
                    .push((Instant::now() + self.config.linger, io.clone()));
            }
        }
    }

    /// Submits what `st` has queued (nothing if nothing is): `tx` alone, or
    /// `tx` and the shared tail in one gather send.
    /// Files a multishot op that a quiet watch looks after (a receive or
    /// an accept) and brings the next quiet check forward to its look;
    /// returns its user data.
    fn insert_watched(&self, io: &Arc<Io>, kind: fn(Watch) -> OpKind) -> u64 {
        // The turn's time (no clock read per op armed).
        let look = crate::time::loop_now() + self.config.quiet;
        let ud = self.ops.borrow_mut().insert(Op {
            io: Some(io.clone()),
            kind: kind(Watch::new(look)),
        });
        if self.quiet_due.get().is_none_or(|d| d > look) {
            self.quiet_due.set(Some(look));
        }
        ud
    }

    fn submit_queued(&self, io: &Arc<Io>, st: &mut St) {
        let tail = st.tx_tail.take();
        if st.tx.is_empty() && tail.is_none() {
            return;
        }
        let buf = std::mem::take(&mut st.tx);
        match tail {
            None => {
                st.tx_busy = in_flight(&buf);
                self.submit_send(io, buf, 0);
            }
            Some(tail) => {
                st.tx_busy = u32::try_from(buf.len() + tail.len()).unwrap_or(u32::MAX);
                self.submit_gather(io, buf, tail);
            }
        }
    }

    /// One `sendmsg` of `head`, then each of `tail`'s bodies and the bytes
    /// after it.
    fn submit_gather(&self, io: &Arc<Io>, head: Queue, tail: Box<Tail>) {
        self.submit_gather_after(io, head, tail, None);
    }

    fn submit_gather_after(
        &self,
        io: &Arc<Io>,
        head: Queue,
        tail: Box<Tail>,
        delay: Option<&'static types::Timespec>,
    ) {
        let iov = |b: &[u8]| libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
        let empty = iov(&[]);
        let mut g = Box::new(GatherSend {
            iov: [empty; 1 + 2 * TAIL_PARTS],
            head,
            tail,
            // SAFETY: an all-zero msghdr is valid: no name, no control
            // data, no iovecs (set just below), no flags.
            msg: unsafe { std::mem::zeroed() },
        });
        let mut n = 0;
        let pieces = std::iter::once(&g.head[..])
            .chain(g.tail.parts.iter().flat_map(|p| [p.bytes(), &p.after[..]]));
        let mut iovs = [empty; 1 + 2 * TAIL_PARTS];
        for piece in pieces.filter(|p| !p.is_empty()) {
            iovs[n] = iov(piece);
            n += 1;
        }
        g.iov = iovs;
        g.msg.msg_iov = g.iov.as_mut_ptr();
        g.msg.msg_iovlen = n as _;
        // The box's heap block does not move when the box moves into the
        // table: the message, the iovecs and the bytes they point at stay
        // where they are until the completion removes the operation.
        let msg: *const libc::msghdr = &g.msg;
        let ud = self.ops.borrow_mut().insert(Op {
            io: Some(io.clone()),
            kind: OpKind::Gather(g),
        });
        let sqe = opcode::SendMsg::new(types::Fd(io.fd), msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(ud);
        self.push_after(delay, sqe);
    }

    fn submit_send(&self, io: &Arc<Io>, buf: Queue, off: usize) {
        self.submit_send_after(io, buf, off, None);
    }

    fn submit_send_after(
        &self,
        io: &Arc<Io>,
        buf: Queue,
        off: usize,
        delay: Option<&'static types::Timespec>,
    ) {
        let ptr = buf[off..].as_ptr();
        let len = (buf.len() - off) as u32;
        let ud = self.ops.borrow_mut().insert(Op {
            io: Some(io.clone()),
            kind: OpKind::Send { buf, off },
        });
        let sqe = opcode::Send::new(types::Fd(io.fd), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(ud);
        self.push_after(delay, sqe);
    }

    /// After a send came back with `EAGAIN`: the delay before it goes
    /// again. The kernel ends a send's wait for room on any wake-up of the
    /// socket and, once it waited, hands a send that still finds no room to
    /// a worker, whose try on the non-blocking socket fails: a client's FIN
    /// on a full socket does it, and a half-closed socket wakes every wait
    /// for as long as it lasts (as polls, see [`POLL_RETRY`]). So not an
    /// error (taken for one, it cut the answers a half-closed client was
    /// still reading), and not sent again at once (that spun a core while
    /// such a client paused): after 1 ms, doubling while it repeats, reset
    /// by a send that goes.
    fn resend(st: &mut St) -> &'static types::Timespec {
        let cold = st.cold.get_or_insert_with(Default::default);
        cold.resends = (cold.resends + 1).min(POLL_RETRY.len() as u8);
        &POLL_RETRY[cold.resends as usize - 1]
    }

    /// Pushes `sqe`, behind a timeout of `delay` linked before it if any
    /// (an expired timeout counts as a success, so the link goes on).
    fn push_after(&self, delay: Option<&'static types::Timespec>, sqe: squeue::Entry) {
        let Some(ts) = delay else {
            return self.push(sqe);
        };
        {
            // Both in one submission, or the link would end at the first.
            let mut ring = self.ring.borrow_mut();
            let room = {
                let sq = ring.submission();
                sq.capacity() - sq.len()
            };
            if room < 2 {
                if let Err(e) = ring.submit() {
                    tracing::warn!(error = %e, "io_uring submit failed");
                }
            }
        }
        let wait = opcode::Timeout::new(ts)
            .flags(types::TimeoutFlags::ETIME_SUCCESS)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(IGNORE);
        self.push(wait);
        self.push(sqe);
    }

    /// After the send of `buf` (all of it, or failed with `res`): records
    /// an error, submits what was queued meanwhile, or shuts down as asked;
    /// wakes the writer.
    fn send_done(&self, io: &Arc<Io>, mut st: std::sync::MutexGuard<'_, St>, res: i32, buf: Queue) {
        st.tx_busy = 0;
        if let Some(c) = st.cold.as_mut() {
            c.tx_sent = 0;
        }
        if res < 0 {
            let e = io::Error::from_raw_os_error(-res);
            st.tx_err = Some(if res == -libc::ECANCELED {
                io::ErrorKind::BrokenPipe
            } else {
                e.kind()
            });
            st.clear_tx();
        } else if res == 0 {
            st.tx_err = Some(io::ErrorKind::WriteZero);
            st.clear_tx();
        }
        keep_buf(buf, Spare::Tx);
        if !st.tx.is_empty() || st.tx_tail.is_some() {
            self.submit_queued(io, &mut st);
        } else if let Some(how) = st.shutdown_after_tx.take() {
            let _ = shutdown_fd(io.fd, how);
        }
        if let Some(w) = st.writer.take() {
            w.wake();
        }
    }

    /// Reads up to `len` bytes of `file` at `offset` through the ring (the
    /// kernel's workers do a read that would block, never the loop), into
    /// memory aligned to `align` bytes (a power of two; `O_DIRECT` files
    /// need their block size).
    pub(crate) fn read_file(
        &self,
        file: Arc<std::fs::File>,
        offset: u64,
        len: usize,
        align: usize,
    ) -> Arc<FileRead> {
        debug_assert!(len <= crate::fs::MAX_READ, "fs caps a read's length");
        let mut buf: Vec<u8> = Vec::with_capacity(len + align - 1);
        let pad = buf.as_mut_ptr().align_offset(align).min(align - 1);
        // The bytes before the aligned start are initialised, so the whole
        // prefix of the buffer is once the kernel has written its part.
        buf.resize(pad, 0);
        // SAFETY: `pad + len` is within the capacity reserved above.
        let ptr = unsafe { buf.as_mut_ptr().add(pad) };
        // SAFETY: the Vec moved into the operation keeps its heap buffer
        // (capacity `pad + len`) until the completion: `ptr` stays valid.
        unsafe { self.push_file_read(file, offset, ptr, len, Some((buf, pad))) }
    }

    /// Reads up to `len` bytes (at most [`FETCH_MAX`](crate::fs::FETCH_MAX))
    /// of `file` at
    /// `offset` through the ring into scratch memory nobody reads: what
    /// matters is that the file's pages are in the page cache once it
    /// completes (a `sendfile` then does not wait for the disk). Scratch
    /// memory is one buffer per ring, whatever the number of fetches.
    pub(crate) fn fetch_file(
        &self,
        file: Arc<std::fs::File>,
        offset: u64,
        len: usize,
    ) -> Arc<FileRead> {
        let scratch = self.scratch.get().unwrap_or_else(|| {
            let b = vec![0u8; crate::fs::FETCH_MAX].into_boxed_slice();
            let p = std::ptr::NonNull::from(Box::leak(b));
            self.scratch.set(Some(p));
            p
        });
        let len = len.min(crate::fs::FETCH_MAX);
        // SAFETY: the scratch memory holds FETCH_MAX bytes and lives until
        // the ring is dropped, after its operations (or is leaked with them).
        unsafe { self.push_file_read(file, offset, scratch.as_ptr().cast(), len, None) }
    }

    /// Queues a read of `len` bytes of `file` at `offset` into `ptr`: into
    /// the heap memory of `read`'s buffer (kept in the operation, with its
    /// `pad` bytes before `ptr`), or, `None`, a fetch into the ring's
    /// scratch.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes until the operation
    /// completes (or the ring is dropped).
    unsafe fn push_file_read(
        &self,
        file: Arc<std::fs::File>,
        offset: u64,
        ptr: *mut u8,
        len: usize,
        read: Option<(Vec<u8>, usize)>,
    ) -> Arc<FileRead> {
        use std::os::fd::AsRawFd;
        let done = Arc::new(FileRead {
            st: Mutex::new(FileReadSt::default()),
            shared: self.shared.clone(),
            queued: crate::loom::AtomicBool::new(false),
        });
        let fd = file.as_raw_fd();
        let fetch = read.is_none();
        let (buf, pad) = read.unwrap_or_default();
        let ud = self.ops.borrow_mut().insert(Op {
            io: None,
            kind: OpKind::File(Box::new(FileOp {
                fetch,
                buf,
                pad,
                _file: file,
                done: done.clone(),
            })),
        });
        lock_std(&done.st).ud = ud;
        let sqe = opcode::Read::new(types::Fd(fd), ptr, len as u32)
            .offset(offset)
            .build()
            .user_data(ud);
        // A fetch is for pages believed not in memory; the ring would still
        // first try the read inline, in the loop's io_uring_enter, and
        // where no disk wait is needed it is done there: a sparse file's
        // holes were zero-filled into the page cache on the loop (12 ms
        // polls). Straight to the kernel's workers instead.
        self.push(match fetch {
            true => sqe.flags(io_uring::squeue::Flags::ASYNC),
            false => sqe,
        });
        done
    }

    /// Cancels what sockets dropped with unsent bytes still have in flight
    /// after [`RingConfig::linger`] (a peer that never reads); the wait, cut
    /// short where a linger ends first: a loop with nothing else to do
    /// still closes such a socket on time (it slept on, and the socket and
    /// its descriptor stayed until other traffic woke it).
    fn expire_lingering(&self, timeout: Option<Duration>) -> Option<Duration> {
        if self.lingering.borrow().is_empty() {
            return timeout;
        }
        let now = Instant::now();
        let mut expired = Vec::new();
        let mut next: Option<Instant> = None;
        self.lingering.borrow_mut().retain(|(at, io)| {
            let done = lock_std(&io.st).tx_busy == 0;
            if !done && *at <= now {
                expired.push(io.clone());
            }
            let keep = !done && *at > now;
            if keep {
                next = Some(next.map_or(*at, |n| n.min(*at)));
            }
            keep
        });
        for io in expired {
            lock_std(&io.st).discard = true;
            self.give_up(&io);
        }
        match next {
            None => timeout,
            Some(at) => {
                let left = at.saturating_duration_since(now);
                Some(timeout.map_or(left, |t| t.min(left)))
            }
        }
    }

    /// Ends the sends of a closed socket whose peer is not taking them (its
    /// `discard` set): they are cancelled, and the socket is shut down both
    /// ways, because a cancel by descriptor misses some: a send parked on
    /// a socket whose peer half-closed (seen on 6.18), and one linked
    /// behind its resend delay (not issued yet, on no list a cancel
    /// searches). Shut down, each fails with `EPIPE` when it next tries,
    /// and a send that fails with `EAGAIN` is not sent again. Without it
    /// such a socket, its descriptor and its queued bytes stayed for as
    /// long as the client kept the connection open.
    fn give_up(&self, io: &Io) {
        self.push(
            opcode::AsyncCancel2::new(types::CancelBuilder::fd(types::Fd(io.fd)).all())
                .build()
                .user_data(IGNORE),
        );
        // SAFETY: `io.fd` is this socket's descriptor, open until `io` and
        // its last operation are gone; shutdown(2) only reads the number.
        unsafe { libc::shutdown(io.fd, libc::SHUT_RDWR) };
    }

    /// Submits the turn's operations and waits (at most `timeout`) for
    /// completions; dispatches them. Returns (completions, wake fd fired).
    pub(crate) fn poll(&self, timeout: Option<Duration>) -> io::Result<(usize, bool)> {
        self.flush_dirty();
        let timeout = self.expire_lingering(timeout);
        let timeout = self.watch_quiet(timeout);
        if !self.wake_armed.get() {
            self.arm_wake();
        }
        {
            let mut ring = self.ring.borrow_mut();
            let (pending_sq, kernel_work) = {
                let sq = ring.submission();
                (!sq.is_empty(), sq.taskrun() || sq.cq_overflow())
            };
            let ready = !ring.completion().is_empty();
            let wait = timeout != Some(Duration::ZERO) && !ready;
            if pending_sq || kernel_work || wait {
                let r = match timeout {
                    _ if !wait => ring.submit(),
                    None => ring.submit_and_wait(1),
                    Some(d) => {
                        let ts = types::Timespec::new()
                            .sec(d.as_secs())
                            .nsec(d.subsec_nanos());
                        let args = types::SubmitArgs::new().timespec(&ts);
                        ring.submitter().submit_with_args(1, &args)
                    }
                };
                match r {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                        ) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(self.reap())
    }

    /// Looks at receives and accepts due a look ([`Watch`]); the wait, cut
    /// short where the next look comes first.
    fn watch_quiet(&self, timeout: Option<Duration>) -> Option<Duration> {
        let Some(due) = self.quiet_due.get() else {
            return timeout;
        };
        // The turn's time: a turn late at worst, no clock read per turn.
        let now = crate::time::loop_now();
        if now >= due {
            self.look_at_watched(now);
        }
        match self.quiet_due.get() {
            None => timeout,
            Some(due) => {
                let left = due.saturating_duration_since(now);
                Some(timeout.map_or(left, |t| t.min(left)))
            }
        }
    }

    /// One look at every watched receive and accept due one (and those due
    /// within half a `quiet`, so that looks come in batches, at most one a
    /// `quiet`).
    fn look_at_watched(&self, now: Instant) {
        let quiet = self.config.quiet;
        let horizon = now + quiet / 2;
        let mut next: Option<Instant> = None;
        let (mut receives, mut accepts, mut again) = (Vec::new(), Vec::new(), Vec::new());
        for (ud, op) in self.ops.borrow_mut().iter_mut() {
            let (w, io, accept) = match (&mut op.kind, &op.io) {
                (OpKind::Recv(w), Some(io)) => (w, io, false),
                (OpKind::Accept(w), Some(io)) => (w, io, true),
                _ => continue,
            };
            if w.next.by(horizon) {
                // Cancelled for good (its socket closed, its reader past
                // the limit or reading directly, its listener's queue full
                // or closed: an accept no longer armed). Completions since
                // the last look do not say its cancel arrived.
                let dying = {
                    let st = lock_std(&io.st);
                    st.closed
                        || match accept {
                            false => st.recv_cancelled,
                            true => st.cold.as_ref().is_none_or(|c| c.acc.armed != Some(ud)),
                        }
                };
                if !dying && w.seen != w.looked {
                    // It completed since the last look (a cancel that
                    // found it running left it armed: watched again).
                    w.looked = w.seen;
                    w.level = 0;
                    w.suspect = false;
                    w.cancelled = false;
                    w.waited = false;
                    w.next = Tick::of(now + quiet);
                } else if dying || w.cancelled {
                    // Its cancel is on the way (pushed this turn, maybe,
                    // and not yet submitted). Still here a look later, it
                    // was lost (the kernel races above, or a cancel that
                    // found it running): sent again, less often each time,
                    // or the operation, its socket and its descriptor
                    // would stay for as long as the loop (and a receive
                    // that goes on completing, its queue grow).
                    w.looked = w.seen;
                    if w.waited {
                        again.push(ud);
                        w.level = (w.level + 1).min(QUIET_LEVELS);
                    } else {
                        w.level = 0;
                    }
                    w.waited = true;
                    w.next = Tick::of(now + quiet * (1 << w.level));
                } else if readable_now(io.fd) {
                    if w.suspect {
                        w.cancelled = true;
                        if accept { &mut accepts } else { &mut receives }.push(ud);
                    }
                    w.suspect = true;
                    w.next = Tick::of(now + quiet);
                } else {
                    w.suspect = false;
                    // A listener is looked at every `quiet` (a server has a
                    // few): the next client must not wait a minute.
                    if !accept {
                        w.level = (w.level + 1).min(QUIET_LEVELS);
                    }
                    w.next = Tick::of(now + quiet * (1 << w.level));
                }
            }
            let at = w.next.near(now);
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        self.quiet_due.set(next.map(|n| n.max(now + quiet)));
        static SAID: [std::sync::atomic::AtomicBool; 2] = [
            std::sync::atomic::AtomicBool::new(false),
            std::sync::atomic::AtomicBool::new(false),
        ];
        if !receives.is_empty() && !SAID[0].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                receives = receives.len(),
                "io_uring: a receive the kernel never completed on a socket with \
                 something to read (a kernel race after a reset); restarting it"
            );
        }
        if !accepts.is_empty() && !SAID[1].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                accepts = accepts.len(),
                "io_uring: an accept the kernel never completed on a listener with \
                 connections waiting (a kernel race); restarting it"
            );
        }
        for ud in receives.into_iter().chain(accepts).chain(again) {
            self.cancel(ud);
        }
    }

    fn reap(&self) -> (usize, bool) {
        let mut n = 0;
        let mut woke = false;
        let mut recycled = false;
        loop {
            let cqe = {
                let mut ring = self.ring.borrow_mut();
                let mut cq = ring.completion();
                match cq.next() {
                    Some(c) => c,
                    None => break,
                }
            };
            let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            match ud {
                IGNORE => continue,
                WAKE => {
                    woke = true;
                    if !cqueue::more(flags) {
                        self.wake_armed.set(false);
                    }
                    continue;
                }
                _ => {}
            }
            n += 1;
            recycled |= self.complete(ud, res, flags);
        }
        if recycled {
            if let Some(b) = self.bufs.borrow().as_ref() {
                b.publish();
            }
        }
        (n, woke)
    }

    /// Handles one completion; true if a provided buffer went back.
    fn complete(&self, ud: u64, res: i32, flags: u32) -> bool {
        let more = cqueue::more(flags);
        let mut ops = self.ops.borrow_mut();
        let Some(op) = ops.get_mut(ud) else {
            return false;
        };
        if let OpKind::File(_) = op.kind {
            let Some(Op {
                kind: OpKind::File(file),
                ..
            }) = ops.remove(ud)
            else {
                return false;
            };
            let FileOp {
                mut buf,
                pad,
                done,
                fetch,
                ..
            } = *file;
            let r = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else if fetch {
                // A fetch: the bytes went to the scratch memory.
                Ok(res as usize)
            } else {
                let n = (res as usize).min(buf.capacity() - pad);
                // SAFETY: the first `pad` bytes were zeroed and the kernel
                // wrote the `n` after them (the read's result), so they are
                // initialised.
                unsafe { buf.set_len(pad + n) };
                buf.drain(..pad);
                Ok(n)
            };
            let mut st = lock_std(&done.st);
            st.done = Some(r);
            st.buf = buf;
            if let Some(w) = st.waker.take() {
                w.wake();
            }
            return false;
        }
        let Some(io) = op.io.clone() else {
            return false;
        };
        let mut recycled = false;
        match &mut op.kind {
            OpKind::File(_) => unreachable!("file reads are completed above"),
            OpKind::Recv(w) => {
                w.seen = w.seen.wrapping_add(1);
                let mut st = lock_std(&io.st);
                if let Some(bid) = cqueue::buffer_select(flags) {
                    if let Some(b) = self.bufs.borrow().as_ref() {
                        if res > 0 && !st.closed {
                            st.push_rx(b.bytes(bid, res as usize));
                        }
                        b.push(bid);
                        recycled = true;
                    }
                }
                match res {
                    0 => st.rx_eof = true,
                    r if r < 0 => match -r {
                        // EAGAIN: see `Send` below; received again.
                        libc::ENOBUFS | libc::ECANCELED | libc::EAGAIN => {}
                        e => {
                            let err = io::Error::from_raw_os_error(e);
                            // A reset connection takes no more bytes either:
                            // writes fail now rather than after their send.
                            if st.tx_err.is_none() {
                                st.tx_err = Some(err.kind());
                                st.clear_tx();
                            }
                            st.set_rx_err(err);
                            if let Some(w) = st.writer.take() {
                                w.wake();
                            }
                        }
                    },
                    _ => {}
                }
                if !more {
                    st.recv = None;
                    st.recv_cancelled = false;
                    drop(ops.remove(ud));
                    // Ended for lack of buffers, or cancelled (stuck, or
                    // too far ahead of its reader): again next turn, where
                    // the reader still wants bytes and has room.
                    if (res == -libc::ENOBUFS || res == -libc::ECANCELED || res == -libc::EAGAIN)
                        && st.want_recv
                        && !st.closed
                    {
                        drop(st);
                        io.schedule();
                        st = lock_std(&io.st);
                    }
                } else if st.unread() >= RX_LIMIT && !st.recv_cancelled {
                    // The reader fell behind: stop receiving until it catches up.
                    st.recv_cancelled = true;
                    drop(ops);
                    self.cancel(ud);
                    // Submitted now, not at the turn's end: until the kernel
                    // has it, the receive keeps filling the queue's overflow
                    // with whatever the client sent ahead (hundreds of KiB
                    // per connection in a long turn).
                    let _ = self.ring.borrow_mut().submit();
                }
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
            OpKind::Send { buf, off } => {
                let mut st = lock_std(&io.st);
                if res == -libc::EAGAIN && !st.given_up() {
                    // Not an error (see `resend`): sent again, later.
                    let (buf, off) = (std::mem::take(buf), *off);
                    drop(ops.remove(ud));
                    drop(ops);
                    let delay = Self::resend(&mut st);
                    drop(st);
                    self.submit_send_after(&io, buf, off, Some(delay));
                    return false;
                }
                if res > 0 {
                    if let Some(c) = st.cold.as_mut() {
                        c.resends = 0;
                    }
                }
                if res >= 0 && (*off + res as usize) < buf.len() && res > 0 {
                    // A short send: the rest goes next, before anything newer.
                    // What went shows as progress in `Io::unsent`.
                    st.cold.get_or_insert_with(Default::default).tx_sent += res as usize;
                    let buf = std::mem::take(buf);
                    let off = *off + res as usize;
                    drop(ops.remove(ud));
                    drop(ops);
                    drop(st);
                    self.submit_send(&io, buf, off);
                    return false;
                }
                let Some(Op {
                    kind: OpKind::Send { buf, .. },
                    ..
                }) = ops.remove(ud)
                else {
                    return false;
                };
                drop(ops);
                self.send_done(&io, st, res, buf);
            }
            OpKind::Gather(g) => {
                let mut st = lock_std(&io.st);
                let head_len = g.head.len();
                let total = head_len + g.tail.len();
                // Sent again: the rest after a short send, the bodies
                // still sent from where they lie (it was copied: with a
                // client that pipelines and does not read, every
                // connection held a copy of the body, 60 KB each for a 60
                // KB file); all of it, later, after EAGAIN (as a `Send`).
                let again = if res == -libc::EAGAIN && !st.given_up() {
                    Some((0, Some(Self::resend(&mut st))))
                } else if res > 0 && (res as usize) < total {
                    st.cold.get_or_insert_with(Default::default).tx_sent += res as usize;
                    Some((res as usize, None))
                } else {
                    None
                };
                if res > 0 {
                    if let Some(c) = st.cold.as_mut() {
                        c.resends = 0;
                    }
                }
                let Some(Op {
                    kind: OpKind::Gather(g),
                    ..
                }) = ops.remove(ud)
                else {
                    return false;
                };
                drop(ops);
                if let Some((sent, delay)) = again {
                    drop(st);
                    let GatherSend {
                        mut head, mut tail, ..
                    } = *g;
                    let from_head = sent.min(head_len);
                    head.consume(from_head);
                    tail.advance(sent - from_head);
                    self.submit_gather_after(&io, head, tail, delay);
                    return false;
                }
                self.send_done(&io, st, res, g.head);
            }
            OpKind::Accept(w) => {
                w.seen = w.seen.wrapping_add(1);
                let mut st = lock_std(&io.st);
                let st = &mut *st;
                let closed = st.closed;
                let acc = &mut st.cold.get_or_insert_with(Default::default).acc;
                if res >= 0 {
                    // SAFETY: a successful accept returns a new descriptor
                    // that nothing else owns.
                    let fd = unsafe { OwnedFd::from_raw_fd(res) };
                    if closed {
                        drop(fd);
                    } else {
                        acc.accepted.push_back(fd);
                    }
                } else if res != -libc::ECANCELED {
                    if res == -libc::EMFILE || res == -libc::ENFILE {
                        acc.paced_until = Some(Instant::now() + PACED_ACCEPT);
                    }
                    acc.err = Some(io::Error::from_raw_os_error(-res));
                }
                if !more {
                    // A cancelled multishot's last word may come after a
                    // new accept was armed: that one stays tracked.
                    if acc.armed == Some(ud) {
                        acc.armed = None;
                    }
                    drop(ops.remove(ud));
                } else if acc.accepted.len() >= ACCEPT_QUEUE {
                    // Nobody is taking them: leave the rest in the backlog.
                    // (An older accept still completing leaves the one
                    // armed after it tracked: its own completions end it.)
                    if acc.armed == Some(ud) {
                        acc.armed = None;
                    }
                    drop(ops);
                    self.cancel(ud);
                }
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
            OpKind::Poll { write } => {
                let write = *write;
                drop(ops.remove(ud));
                let mut guard = lock_std(&io.st);
                let st = &mut *guard;
                let closed = st.closed;
                let cold = st.cold.get_or_insert_with(Default::default);
                let i = write as usize;
                cold.polls[i] = None;
                let own = if write { WRITABLE } else { READABLE };
                // A failed poll (should not happen on a socket) wakes the
                // waiter too: its retried call sees the error itself.
                let bits = if res >= 0 {
                    let ev = res as i16;
                    let gone = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
                    let mut bits = 0;
                    if ev & (libc::POLLIN | libc::POLLRDHUP | gone) != 0 {
                        bits |= READABLE;
                    }
                    if ev & (libc::POLLOUT | gone) != 0 {
                        bits |= WRITABLE;
                    }
                    bits
                } else if res != -libc::ECANCELED && !closed {
                    READABLE | WRITABLE
                } else {
                    0
                };
                if bits != 0 {
                    cold.ready |= bits;
                    cold.ready_tick += 1;
                    cold.want_poll &= !bits;
                }
                // Every direction this poll found ready is woken (a hang-up
                // or error is both), its backoff over.
                for (d, bit) in [(0, READABLE), (1, WRITABLE)] {
                    if bits & bit != 0 {
                        cold.backoff[d] = 0;
                    }
                }
                let reader = (bits & READABLE != 0).then(|| st.reader.take()).flatten();
                let writer = (bits & WRITABLE != 0).then(|| st.writer.take()).flatten();
                for w in [reader, writer].into_iter().flatten() {
                    w.wake();
                }
                if bits & own == 0 && res >= 0 && !closed && cold.want_poll & own != 0 {
                    // io_uring completes every poll on the peer's half-close
                    // (POLLRDHUP), which lasts: a write wait woken so is not
                    // writable. Poll again after a delay, not at once (that
                    // would spin until the peer reads).
                    cold.backoff[i] = (cold.backoff[i] + 1).min(POLL_RETRY.len() as u8);
                    drop(guard);
                    io.schedule();
                }
            }
            OpKind::PollDelay { write } => {
                let bit = if *write { WRITABLE } else { READABLE };
                let i = *write as usize;
                drop(ops.remove(ud));
                let mut st = lock_std(&io.st);
                let closed = st.closed;
                let cold = st.cold.get_or_insert_with(Default::default);
                cold.delays[i] = None;
                // Cancelled: the socket closed or the loop is ending.
                if !closed && res != -libc::ECANCELED {
                    cold.delayed |= bit;
                    drop(st);
                    io.schedule();
                }
            }
        }
        recycled
    }

    /// Whether a send is in flight on this ring (a poll submits the queued ones).
    fn sends_in_flight(&self) -> bool {
        self.ops
            .borrow()
            .values()
            .any(|op| matches!(op.kind, OpKind::Send { .. } | OpKind::Gather(_)))
    }

    /// Takes every waker held by sockets with operations in flight (loop shutdown).
    pub(crate) fn shutdown_wakers(&self, out: &mut Vec<Waker>) {
        let ops = self.ops.borrow();
        for op in ops.values() {
            match op {
                Op { io: Some(io), .. } => io.take_wakers(out),
                Op {
                    kind: OpKind::File(f),
                    ..
                } => out.extend(lock_std(&f.done.st).waker.take()),
                _ => {}
            }
        }
        for io in self.shared.dirty.take() {
            io.queued.store(false, Ordering::Release);
            io.take_wakers(out);
        }
        drop(self.shared.abandoned.take());
    }
}

impl Drop for UringReactor {
    fn drop(&mut self) {
        // Cancel everything and wait (briefly) for the kernel to let go of
        // the buffers before they are freed.
        // Bytes written before their sockets closed go out first (a server
        // that shuts down gracefully has answered its in-flight requests
        // only once they left): at most SHUTDOWN_LINGER.
        let until = Instant::now() + SHUTDOWN_LINGER;
        let _ = self.poll(Some(Duration::ZERO));
        while self.sends_in_flight() && Instant::now() < until {
            let _ = self.poll(Some(Duration::from_millis(10)));
        }
        drop(self.shared.dirty.take());
        self.push(
            opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(IGNORE),
        );
        let until = Instant::now() + Duration::from_secs(1);
        while self.ops.borrow().live() > 0 && Instant::now() < until {
            let _ = self.poll(Some(Duration::from_millis(10)));
            if self.ops.borrow().live() > 0 {
                self.push(
                    opcode::AsyncCancel2::new(types::CancelBuilder::any())
                        .build()
                        .user_data(IGNORE),
                );
            }
        }
        let clean = self.ops.borrow().live() == 0;
        // Sockets listed since, or released from now on: nobody takes them
        // any more, and listed they would never be dropped.
        drop(self.shared.dirty.end());
        drop(self.shared.abandoned.end());
        if let Some(b) = self.bufs.borrow_mut().take() {
            let unregistered = self
                .ring
                .borrow()
                .submitter()
                .unregister_buf_ring(BUF_GROUP)
                .is_ok();
            if clean && unregistered {
                // SAFETY: the kernel no longer refers to the entries (the
                // group is unregistered); allocated with this layout.
                unsafe { std::alloc::dealloc(b.entries as *mut u8, b.entries_layout) };
                drop(b);
            } else {
                // Operations outlived the cancel: the kernel may still write
                // into the buffers, so they are never freed.
                tracing::warn!(
                    "io_uring: operations outlived loop shutdown; leaking their buffers"
                );
                std::mem::forget(b);
            }
        }
        // The operations left (if any) keep their sockets open; drop them now
        // that the ring is about to close (closing the ring cancels them).
        let mut ops = self.ops.borrow_mut();
        let left = ops.take_all();
        if !clean {
            // Their send buffers may still be read by the kernel until the
            // ring is torn down, and fetches may still write into the
            // scratch memory: leak them as well.
            for op in left {
                std::mem::forget(op);
            }
            self.scratch.set(None);
        } else if let Some(p) = self.scratch.take() {
            // SAFETY: made by Box::leak in fetch_file, and no operation
            // is left that the kernel could still write into it with.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}
