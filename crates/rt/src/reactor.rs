//! The reactor: readiness from `mio` (epoll, edge-triggered), turned into task
//! wake-ups.
//!
//! Each I/O object owns a [`Registration`]: an `IoShared` with a readiness
//! word and one waker per direction, and a slot in its loop's source table.
//! The token given to epoll is `generation << 32 | slot`, so an event for a
//! slot that was freed and reused is recognised and ignored.
//!
//! The readiness word holds direction bits, whether write interest is on,
//! and a tick that counts events. A task that saw "readable" at tick t and
//! then got `WouldBlock` clears the bit only if the tick is still t: an event
//! that arrived in between is never lost.
//!
//! Sockets are registered for reading only; write interest is added the
//! first time a task must wait to write (a full socket buffer, a connect in
//! progress) and kept from then on. Registering both from the start would
//! wake a sleeping loop every time its peer consumes data (the kernel
//! signals "writable" to every waiter on each freed buffer), one useless
//! wake-up per request on a request/response connection.
//!
//! The source table is behind a mutex taken once per batch of events (and on
//! register/deregister), so an I/O object may be dropped on any thread.

use crate::gen_table::GenTable;
use crate::loom::lock_std;
use crate::waker_slot::WakerSlot;
use mio::event::Source;
use mio::{Events, Interest, Poll as MioPoll, Registry, Token};
use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

pub(crate) const READABLE: usize = 1;
pub(crate) const WRITABLE: usize = 2;
const READ_CLOSED: usize = 4;
const WRITE_CLOSED: usize = 8;
const ERROR: usize = 16;
/// The socket has had urgent (out-of-band) data (`EPOLLPRI`). Sticky: a
/// read stops short at the urgent mark with more queued behind it, so on
/// such a socket a short read no longer means the queue is empty (see
/// [`Registration::poll_io_drained`]).
const URGENT: usize = 32;
/// Epoll also reports writability for this source (write interest added
/// with the OS). Kept in the word, not beside it: every connection's
/// stream holds its registration.
const WRITE_ARMED: usize = 64;
const TICK_SHIFT: usize = 8;
const DIR_MASK: usize = (1 << TICK_SHIFT) - 1;

/// The eventfd that other threads write to wake the loop.
pub(crate) const WAKE_TOKEN: Token = Token(usize::MAX);

/// Which way a task waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Read,
    Write,
}

impl Direction {
    fn mask(self) -> usize {
        match self {
            Direction::Read => READABLE | READ_CLOSED | ERROR,
            Direction::Write => WRITABLE | WRITE_CLOSED | ERROR,
        }
    }
}

/// A readiness observation: the bits and the tick they were seen at.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadyEvent {
    word: usize,
}

/// One I/O object's readiness and waiting tasks: the loop sets readiness
/// and wakes; the tasks, on any thread, check, register and check again
/// (`loom_tests` checks that handshake with the tick rule of
/// [`clear_readiness`](IoShared::clear_readiness)).
pub(crate) struct IoShared {
    readiness: crate::loom::AtomicUsize,
    reader: WakerSlot,
    writer: WakerSlot,
    token: AtomicUsize,
}

impl IoShared {
    fn new() -> IoShared {
        IoShared {
            // Optimistic: try the system call first; a WouldBlock clears it.
            readiness: crate::loom::AtomicUsize::new(READABLE | WRITABLE),
            reader: WakerSlot::new(),
            writer: WakerSlot::new(),
            token: AtomicUsize::new(0),
        }
    }

    /// Ready in `dir`? If not, runs `arm` (adds interest with the OS) and
    /// registers `cx`'s waker, then checks again: an event that landed in
    /// between is seen. An error only from `arm`.
    fn poll_ready(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
        arm: impl FnOnce() -> io::Result<()>,
    ) -> Poll<io::Result<ReadyEvent>> {
        let word = self.readiness.load(Ordering::Acquire);
        if word & dir.mask() != 0 {
            return Poll::Ready(Ok(ReadyEvent { word }));
        }
        if let Err(e) = arm() {
            return Poll::Ready(Err(e));
        }
        match dir {
            Direction::Read => self.reader.register(cx.waker()),
            Direction::Write => self.writer.register(cx.waker()),
        }
        let word = self.readiness.load(Ordering::Acquire);
        if word & dir.mask() != 0 {
            return Poll::Ready(Ok(ReadyEvent { word }));
        }
        Poll::Pending
    }

    /// After `WouldBlock`: forget readiness in `dir`, unless a newer event
    /// arrived (the tick moved since `seen`).
    fn clear_readiness(&self, dir: Direction, seen: ReadyEvent) {
        let clear = match dir {
            Direction::Read => READABLE,
            Direction::Write => WRITABLE,
        };
        let _ = self.readiness.compare_exchange(
            seen.word,
            seen.word & !clear,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Whether this caller is the one to add write interest: it sets
    /// [`WRITE_ARMED`] (false once it is set). The bit leaves the
    /// handshake's tick rule alone: a `clear_readiness` that raced it fails
    /// its exchange, and its task only looks again.
    fn take_write_arming(&self) -> bool {
        self.readiness.load(Ordering::Relaxed) & WRITE_ARMED == 0
            && self.readiness.fetch_or(WRITE_ARMED, Ordering::AcqRel) & WRITE_ARMED == 0
    }

    /// The OS refused the write interest: the next wait tries again.
    fn undo_write_arming(&self) {
        self.readiness.fetch_and(!WRITE_ARMED, Ordering::AcqRel);
    }

    fn set_readiness(&self, bits: usize) {
        let _ = self
            .readiness
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                let tick = (w >> TICK_SHIFT).wrapping_add(1);
                Some((tick << TICK_SHIFT) | (w & DIR_MASK) | bits)
            });
        if bits & (READABLE | READ_CLOSED | ERROR) != 0 {
            self.reader.wake();
        }
        if bits & (WRITABLE | WRITE_CLOSED | ERROR) != 0 {
            self.writer.wake();
        }
    }

    /// Drops both wakers (loop shutdown: breaks task ↔ I/O reference cycles).
    fn forget_wakers(&self) {
        drop(self.reader.take());
        drop(self.writer.take());
    }
}

pub(crate) struct ReactorShared {
    registry: Registry,
    /// Registered sources by token.
    sources: Mutex<GenTable<Arc<IoShared>>>,
    /// `sources.live`, readable without the lock: a loop with no sources
    /// (a payload loop) skips `epoll_wait` while it has work.
    live: std::sync::atomic::AtomicUsize,
}

/// The per-loop reactor. Only the loop's thread polls it.
pub(crate) struct Reactor {
    poll: RefCell<MioPoll>,
    events: RefCell<Events>,
    shared: Arc<ReactorShared>,
}

impl Reactor {
    pub(crate) fn new(capacity: usize, wake_fd: i32) -> io::Result<Reactor> {
        let poll = MioPoll::new()?;
        let registry = poll.registry().try_clone()?;
        registry.register(
            &mut mio::unix::SourceFd(&wake_fd),
            WAKE_TOKEN,
            Interest::READABLE,
        )?;
        Ok(Reactor {
            poll: RefCell::new(poll),
            events: RefCell::new(Events::with_capacity(capacity.max(16))),
            shared: Arc::new(ReactorShared {
                registry,
                sources: Mutex::new(GenTable::default()),
                live: std::sync::atomic::AtomicUsize::new(0),
            }),
        })
    }

    pub(crate) fn handle(&self) -> &Arc<ReactorShared> {
        &self.shared
    }

    pub(crate) fn sources(&self) -> usize {
        lock_std(&self.shared.sources).live()
    }

    /// True if no I/O source is registered (only the wake fd).
    pub(crate) fn has_no_sources(&self) -> bool {
        self.shared.live.load(Ordering::Relaxed) == 0
    }

    /// Waits for events (at most `timeout`), dispatches them, and returns
    /// (events dispatched, whether the wake fd fired).
    pub(crate) fn poll(&self, timeout: Option<Duration>) -> io::Result<(usize, bool)> {
        let mut events = self.events.borrow_mut();
        match self.poll.borrow_mut().poll(&mut events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok((0, false)),
            Err(e) => return Err(e),
        }
        let mut woke = false;
        let mut n = 0;
        if events.is_empty() {
            return Ok((0, false));
        }
        let sources = lock_std(&self.shared.sources);
        for ev in events.iter() {
            let token = ev.token();
            if token == WAKE_TOKEN {
                woke = true;
                continue;
            }
            let Some(io) = sources.get(token.0 as u64) else {
                continue;
            };
            let mut bits = 0;
            if ev.is_readable() {
                bits |= READABLE;
            }
            if ev.is_writable() {
                bits |= WRITABLE;
            }
            if ev.is_read_closed() {
                bits |= READ_CLOSED;
            }
            if ev.is_write_closed() {
                bits |= WRITE_CLOSED;
            }
            if ev.is_error() {
                bits |= ERROR;
            }
            if ev.is_priority() {
                bits |= URGENT;
            }
            io.set_readiness(bits);
            n += 1;
        }
        Ok((n, woke))
    }

    /// Takes every waker held by this reactor's sources (loop shutdown).
    pub(crate) fn shutdown_wakers(&self, out: &mut Vec<std::task::Waker>) {
        let sources = lock_std(&self.shared.sources);
        for io in sources.values() {
            out.extend(io.reader.take());
            out.extend(io.writer.take());
        }
    }
}

/// An I/O source registered with one loop's reactor. Two pointers: its
/// descriptor is the source's (passed where write interest may be added),
/// and whether that interest is on is a bit of the readiness word.
pub(crate) struct Registration {
    io: Arc<IoShared>,
    reactor: Arc<ReactorShared>,
}

impl Registration {
    /// Registers `source` with the current thread's loop, for readability;
    /// write interest is added on demand.
    pub(crate) fn new(source: &mut impl Source) -> io::Result<Registration> {
        match crate::event_loop::current_reactor() {
            Some(crate::backend::BackendRef::Epoll(reactor)) => {
                Registration::with_reactor(source, reactor)
            }
            _ => Err(io::Error::other(
                "duality I/O objects must be created on a duality event loop",
            )),
        }
    }

    fn with_reactor(
        source: &mut impl Source,
        reactor: Arc<ReactorShared>,
    ) -> io::Result<Registration> {
        let io = Arc::new(IoShared::new());
        let token = {
            let mut s = lock_std(&reactor.sources);
            let key = s.insert(io.clone());
            reactor.live.store(s.live(), Ordering::Relaxed);
            key as usize
        };
        io.token.store(token, Ordering::Relaxed);
        if let Err(e) = reactor.registry.register(
            source,
            Token(token),
            Interest::READABLE | Interest::PRIORITY,
        ) {
            remove(&reactor, token);
            return Err(e);
        }
        Ok(Registration { io, reactor })
    }

    /// Adds write interest for the source, whose descriptor is `fd` (once).
    /// Called with the WRITABLE bit already cleared, so the event epoll
    /// reports for a socket that is writable at the time of the change sets
    /// it again: no edge is lost.
    fn arm_writable(&self, fd: RawFd) -> io::Result<()> {
        if !self.io.take_write_arming() {
            return Ok(());
        }
        let token = Token(self.io.token.load(Ordering::Relaxed));
        let r = self.reactor.registry.reregister(
            &mut mio::unix::SourceFd(&fd),
            token,
            Interest::READABLE | Interest::WRITABLE | Interest::PRIORITY,
        );
        if r.is_err() {
            self.io.undo_write_arming();
        }
        r
    }

    /// Ready in `dir`? Registers the waker when not. An error only when
    /// write interest could not be added (the source's descriptor is `fd`).
    pub(crate) fn poll_ready(
        &self,
        dir: Direction,
        fd: RawFd,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<ReadyEvent>> {
        self.io.poll_ready(dir, cx, || match dir {
            Direction::Write => self.arm_writable(fd),
            Direction::Read => Ok(()),
        })
    }

    /// After `WouldBlock`: forget readiness in `dir`, unless a newer event arrived.
    pub(crate) fn clear_readiness(&self, dir: Direction, seen: ReadyEvent) {
        self.io.clear_readiness(dir, seen)
    }

    /// Runs `f` until it does not return `WouldBlock`, waiting for
    /// readiness. Where `drained(&result)` says the call emptied the socket
    /// in `dir` (a TCP read that returned fewer bytes than it asked for, and
    /// some), readiness is then forgotten as after
    /// `WouldBlock`, unless an event came since (end of stream and errors
    /// stay: they are never cleared) or the socket has had urgent data
    /// (a read stops at its mark with bytes queued behind, and no event
    /// comes for them). The next call waits for the next
    /// event instead of making a system call that would only say
    /// `WouldBlock`: one system call per request fewer for a server that
    /// reads each request whole (memcached, level-triggered, never makes
    /// it; tokio clears on a short read too).
    pub(crate) fn poll_io_drained<R>(
        &self,
        dir: Direction,
        fd: RawFd,
        cx: &mut Context<'_>,
        mut f: impl FnMut() -> io::Result<R>,
        drained: impl Fn(&R) -> bool,
    ) -> Poll<io::Result<R>> {
        // Fairness: a task whose socket is always ready yields after its
        // share of operations (see `coop`).
        if crate::coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        loop {
            let ev = match self.poll_ready(dir, fd, cx) {
                Poll::Ready(Ok(ev)) => ev,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            match f() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.clear_readiness(dir, ev),
                r => {
                    if ev.word & URGENT == 0 && matches!(&r, Ok(v) if drained(v)) {
                        self.clear_readiness(dir, ev);
                    }
                    crate::coop::spend();
                    return Poll::Ready(r);
                }
            }
        }
    }

    /// Removes the source from epoll and the table. Call before closing the fd.
    pub(crate) fn deregister(&self, source: &mut impl Source) {
        let _ = self.reactor.registry.deregister(source);
        remove(&self.reactor, self.io.token.load(Ordering::Relaxed));
        self.io.forget_wakers();
    }
}

fn remove(reactor: &ReactorShared, token: usize) {
    let mut s = lock_std(&reactor.sources);
    if s.remove(token as u64).is_some() {
        reactor.live.store(s.live(), Ordering::Relaxed);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The readiness handshake: the loop's thread sets readiness and wakes;
    //! a task on another thread waits, reads, and on `WouldBlock` clears
    //! readiness by the tick rule. The task waits for a wake-up by yielding
    //! until its waker's count moves; a lost event makes that wait endless,
    //! which loom reports.
    use super::*;
    use crate::loom::{thread, Arc};
    use crate::task::loom_tests::{counting_waker, yield_until_woken};
    use std::sync::atomic::Ordering::{AcqRel, Release, SeqCst};

    /// `bytes` arrive one at a time, each followed by its readiness event;
    /// the task runs `poll_io_drained`'s loop until it has read them all.
    /// Each read takes all that has arrived; with `short_read_clears` a read
    /// that found bytes also forgets readiness (a short read drained the
    /// socket), as `Evented::poll_read` does under epoll.
    fn reader_sees_every_event(start: usize, bytes: usize, short_read_clears: bool) {
        reader_sees_every_event_while(start, bytes, short_read_clears, false)
    }

    /// [`reader_sees_every_event`], with `arming`: a writer on a third
    /// thread adds write interest meanwhile, which the OS refuses (the
    /// readiness word's `WRITE_ARMED` bit set, then cleared).
    fn reader_sees_every_event_while(
        start: usize,
        bytes: usize,
        short_read_clears: bool,
        arming: bool,
    ) {
        // The yielding waits make long schedules; bound preemptions as the
        // crate's other models do, and allow the branches they need.
        let mut model = loom::model::Builder::new();
        model.preemption_bound.get_or_insert(3);
        model.max_branches = 100_000;
        model.check(move || {
            let io = Arc::new(IoShared::new());
            io.readiness.store(start, Release);
            let data = Arc::new(crate::loom::AtomicUsize::new(0));
            let t = {
                let (io, data) = (io.clone(), data.clone());
                thread::spawn(move || {
                    for _ in 0..bytes {
                        data.fetch_add(1, Release);
                        io.set_readiness(READABLE);
                    }
                })
            };
            let writer = arming.then(|| {
                let io = io.clone();
                thread::spawn(move || {
                    assert!(io.take_write_arming());
                    assert!(!io.take_write_arming(), "armed once");
                    io.undo_write_arming();
                })
            });
            let count = Arc::new(crate::loom::AtomicUsize::new(0));
            let waker = counting_waker(&count);
            let mut cx = Context::from_waker(&waker);
            let mut read = 0;
            while read < bytes {
                let before = count.load(SeqCst);
                match io.poll_ready(Direction::Read, &mut cx, || Ok(())) {
                    Poll::Ready(Ok(seen)) => match data.swap(0, AcqRel) {
                        // WouldBlock: forget readiness unless an event came.
                        0 => io.clear_readiness(Direction::Read, seen),
                        n => {
                            read += n;
                            if short_read_clears {
                                io.clear_readiness(Direction::Read, seen);
                            }
                        }
                    },
                    Poll::Ready(Err(e)) => panic!("{e}"),
                    Poll::Pending => yield_until_woken(&count, before),
                }
            }
            t.join().unwrap();
            if let Some(w) = writer {
                w.join().unwrap();
            }
            assert_eq!(io.readiness.load(SeqCst) & WRITE_ARMED, 0);
        });
    }

    #[test]
    fn an_event_racing_a_would_block_is_never_lost() {
        // Fresh (optimistically ready) and after a WouldBlock (not ready).
        reader_sees_every_event(READABLE | WRITABLE, 1, false);
        reader_sees_every_event(0, 1, false);
    }

    #[test]
    fn two_events_in_a_row_are_both_read() {
        reader_sees_every_event(0, 2, false);
    }

    /// Write interest added (and refused) beside a read: the bit it sets in
    /// the readiness word costs the reader no event.
    #[test]
    fn arming_write_interest_beside_a_read_loses_no_event() {
        reader_sees_every_event_while(0, 1, false, true);
    }

    /// A short read forgets readiness without a `WouldBlock`: bytes (and
    /// their event) arriving around it are still read.
    #[test]
    fn an_event_racing_a_short_read_is_never_lost() {
        reader_sees_every_event(READABLE | WRITABLE, 1, true);
        reader_sees_every_event(0, 2, true);
    }
}
