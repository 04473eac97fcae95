//! `Conn`: one client connection as the handler sees it, whatever the model.

use crate::loom::AtomicBool;
use duality_rt::net::{SharedBytes, TcpStream, UnixStream};
use duality_rt::GenTable;
use socket2::SockRef;
use std::future::Future;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

/// Tells connections that the server is shutting down.
///
/// A connection waiting for its next request then sees end-of-stream, while
/// one in the middle of a request still reads what has arrived and writes
/// its response: in-flight requests finish, idle connections close.
///
/// A blocking handler and `trigger` meet in a Dekker pair of `SeqCst`
/// accesses: the handler stores its mid-request flag, then (before it
/// blocks in a read) loads the shutdown flag (`Conn::closing`); `trigger`
/// stores the shutdown flag, then loads the mid-request flag. One of them
/// always sees the other's store, so a handler between requests either
/// sees the shutdown or has its read side shut. A task and `trigger` meet
/// in the registry's lock: the task registers its waker and then looks at
/// the flag, `trigger` sets the flag and then takes every waker. The same
/// shape as the loops' sleep handshake (duality-rt's `SleepGate`); both
/// are model-checked in `loom_tests` below. Loom treats `SeqCst` accesses
/// as `AcqRel`, so under `cfg(loom)` each side of the Dekker pair carries
/// the equivalent `fence(SeqCst)`; normal builds are unchanged.
#[derive(Default)]
pub(crate) struct ShutdownSignal {
    flag: AtomicBool,
    /// Who to wake, one slot per waiting connection (24 bytes; a hash map
    /// would hold about twice that with its slack).
    waiters: crate::loom::Mutex<GenTable<Waiter>>,
}

enum Waiter {
    Task(Waker),
    /// A blocking socket (thread-per-conn): shut its read side to unblock it,
    /// unless its handler is in the middle of a request (the flag). The
    /// socket is shared with its `Conn`, not duplicated: one descriptor per
    /// connection, closed when both let go.
    /// Boxed: the registry holds an entry per connection, and most are tasks.
    Socket(Box<(Arc<AtomicBool>, BlockingSocket)>),
}

#[derive(Clone)]
enum BlockingSocket {
    Tcp(Arc<std::net::TcpStream>),
    Unix(Arc<std::os::unix::net::UnixStream>),
}

impl BlockingSocket {
    fn shutdown_read(&self) {
        let _ = match self {
            BlockingSocket::Tcp(s) => s.shutdown(std::net::Shutdown::Read),
            BlockingSocket::Unix(s) => s.shutdown(std::net::Shutdown::Read),
        };
    }
}

impl ShutdownSignal {
    /// Whether the server is shutting down; in the handshake, the handler's
    /// look after it stored its mid-request flag.
    pub(crate) fn is_set(&self) -> bool {
        #[cfg(loom)]
        crate::loom::fence(SeqCst);
        self.flag.load(SeqCst)
    }

    pub(crate) fn trigger(&self) {
        self.flag.store(true, SeqCst);
        #[cfg(loom)]
        crate::loom::fence(SeqCst);
        let waiters = self
            .waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_all();
        for w in waiters {
            match w {
                Waiter::Task(w) => w.wake(),
                Waiter::Socket(socket) => {
                    let (mid, s) = &*socket;
                    if !mid.load(SeqCst) {
                        s.shutdown_read();
                    }
                }
            }
        }
    }

    /// Registers `w` under `*key` (0: none yet; set to the new key), in
    /// place if that key is still there (a shutdown takes every waiter).
    fn register(&self, key: &mut u64, w: Waiter) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        match waiters.get_mut(*key) {
            Some(slot) => *slot = w,
            None => *key = waiters.insert(w),
        }
    }

    /// A task's side: registers `waker` under `*key` (see
    /// [`register`](Self::register)), then true if the shutdown has come
    /// (it may have taken the waiters before this registration: the caller
    /// must not wait). False: a later `trigger` wakes `waker`.
    fn watch(&self, key: &mut u64, waker: &Waker) -> bool {
        self.register(key, Waiter::Task(waker.clone()));
        self.is_set()
    }

    /// The table gives its storage back once a crowd has closed.
    fn unregister(&self, key: u64) {
        drop(
            self.waiters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key),
        );
    }
}

/// What every connection of a server shares: the counts (live ones is
/// decremented when a `Conn` drops) and the shutdown signal. One pointer in
/// each `Conn`.
pub(crate) struct ConnShared {
    pub(crate) shutdown: ShutdownSignal,
    /// Connections open on each network loop (the least-loaded choice),
    /// counted off when a `Conn` made for that loop drops.
    pub(crate) loop_conns: Box<[AtomicUsize]>,
    pub(crate) live: AtomicUsize,
    pub(crate) total: AtomicU64,
    pub(crate) refused: AtomicU64,
    /// Bytes read and written, one cache line per loop (by loop id), summed
    /// when read: no counter is shared by every loop on the hot path.
    bytes: Box<[CachePadded<ByteCounts>]>,
    /// Connections waiting between requests, one table per network loop
    /// (`None`: idle connections are never reclaimed; see
    /// [`reclaim_idle`](Self::reclaim_idle)).
    idle: Option<Box<[CachePadded<IdleTable>]>>,
    /// Idle connections told to close to make room.
    pub(crate) reclaimed: AtomicU64,
    /// Of those, the ones that have not yet seen it: while any has not, a
    /// full table waits for them rather than picking more.
    reclaiming: AtomicUsize,
}

/// One network loop's connections waiting between requests.
type IdleTable = Mutex<GenTable<Idle>>;

/// A connection waiting for its next request (or its first), in its loop's
/// idle table.
struct Idle {
    waker: Waker,
    /// When it began to wait: the longest waiting go first.
    since: Instant,
    /// Told to close: it closes at its next look (or, where a request has
    /// arrived meanwhile, once that is answered).
    reclaimed: bool,
}

/// Most idle connections one reclaim closes, and the share of the idle
/// ones it takes (nginx's reusable-connection drain: an eighth, 1 to 32).
const RECLAIM_MAX: usize = 32;
const RECLAIM_SHARE: usize = 8;
/// How long a connection must have waited to be reclaimed. Unlike nginx,
/// which may close any, a connection whose request is on its way (a burst
/// of new clients past the limit) or a keep-alive client between quick
/// requests is left alone: new connections are refused (503) while only
/// those are open, as the limit says.
const RECLAIM_MIN_IDLE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct ByteCounts {
    read: AtomicU64,
    written: AtomicU64,
}

/// Slots of the per-loop byte counters (loop ids are taken modulo this).
const BYTE_SLOTS: usize = 64; // fits the u8 `Conn::slot`

impl ConnShared {
    /// For a server with `loops` network loops; `reclaim`: its idle
    /// connections may be closed to make room ([`reclaim_idle`](Self::reclaim_idle)).
    pub(crate) fn new(loops: usize, reclaim: bool) -> ConnShared {
        ConnShared {
            shutdown: ShutdownSignal::default(),
            loop_conns: (0..loops).map(|_| AtomicUsize::new(0)).collect(),
            live: AtomicUsize::new(0),
            total: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            bytes: (0..BYTE_SLOTS).map(|_| CachePadded::default()).collect(),
            idle: reclaim.then(|| (0..loops).map(|_| CachePadded::default()).collect()),
            reclaimed: AtomicU64::new(0),
            reclaiming: AtomicUsize::new(0),
        }
    }

    fn idle_table(&self, home: u16) -> Option<&IdleTable> {
        self.idle.as_ref()?.get(usize::from(home)).map(|t| &**t)
    }

    /// With every connection slot taken: tells the connections waiting
    /// longest between requests (keep-alive ones, and ones that have sent
    /// nothing yet), for a second at least, to close: an eighth of those
    /// (1 to 32), as
    /// nginx drains its reusable connections; a client of a closed
    /// keep-alive connection opens another, as it would after a timeout.
    /// Nothing while earlier ones have not closed yet (a flood of new
    /// connections closes a batch at a time, not one per arrival), or where
    /// the server does not reclaim. Connections mid-request and
    /// thread-per-conn ones are never picked.
    pub(crate) fn reclaim_idle(&self) {
        let Some(tables) = &self.idle else { return };
        if self.reclaiming.load(SeqCst) > 0 {
            return;
        }
        let Some(before) = Instant::now().checked_sub(RECLAIM_MIN_IDLE) else {
            return;
        };
        let mut idle: Vec<(Instant, usize, u64)> = Vec::new();
        for (i, t) in tables.iter().enumerate() {
            let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
            idle.extend(
                t.iter_mut()
                    .filter(|(_, e)| !e.reclaimed && e.since <= before)
                    .map(|(k, e)| (e.since, i, k)),
            );
        }
        if idle.is_empty() {
            return;
        }
        let n = (idle.len() / RECLAIM_SHARE).clamp(1, RECLAIM_MAX);
        if idle.len() > n {
            idle.select_nth_unstable(n - 1);
            idle.truncate(n);
        }
        let mut wake = Vec::with_capacity(idle.len());
        for (_, i, k) in idle {
            let mut t = tables[i].lock().unwrap_or_else(|e| e.into_inner());
            // It may have got a request (or closed) since the scan.
            if let Some(e) = t.get_mut(k).filter(|e| !e.reclaimed) {
                e.reclaimed = true;
                self.reclaiming.fetch_add(1, SeqCst);
                self.reclaimed.fetch_add(1, Relaxed);
                wake.push(e.waker.clone());
            }
        }
        // Woken outside the tables' locks.
        for w in wake {
            w.wake();
        }
    }

    /// (bytes read, bytes written) by every connection so far.
    pub(crate) fn bytes(&self) -> (u64, u64) {
        self.bytes.iter().fold((0, 0), |(r, w), b| {
            (r + b.read.load(Relaxed), w + b.written.load(Relaxed))
        })
    }
}

enum Io {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A blocking socket, the receive timeout last set on it and whether its
    /// handler is in the middle of a request (shared with the shutdown
    /// registry, which must not cut such a read short). Kept here, not in
    /// every `Conn`: event-loop connections hold their `Conn` in their
    /// futures.
    BlockingTcp(Arc<std::net::TcpStream>, Option<Duration>, Arc<AtomicBool>),
    BlockingUnix(
        Arc<std::os::unix::net::UnixStream>,
        Option<Duration>,
        Arc<AtomicBool>,
    ),
}

/// A client connection. Read and write in thread style; the model decides
/// whether a wait parks the task (event loops) or the OS thread
/// (thread-per-conn).
pub struct Conn {
    io: Io,
    /// Its key in the shutdown registry (0: not registered).
    waiter: u64,
    shared: Arc<ConnShared>,
    /// Which waker a shutdown wakes: its data pointer with the low bit set
    /// (0: none registered). A task's waker keeps its data pointer, so a
    /// changed pointer means a new waker to register; a pointer, not a
    /// `Waker` (16 bytes), because every idle connection holds this.
    registered: usize,
    /// The handler holds part of a request: shutdown lets it finish reading
    /// (a blocking socket's flag is in its `Io`, shared with the registry).
    mid_request: bool,
    /// This connection's slot in the per-loop byte counters.
    slot: u8,
    /// The network loop it is counted on in `ConnShared::loop_conns`
    /// ([`NO_LOOP`]: none).
    home: u16,
    /// Its slot in its loop's idle table + 1 while it waits between
    /// requests (0: not there), or [`RECLAIMED`]. A slot index, not a key
    /// (4 bytes, where a key would grow every connection's future past
    /// its allocation size class): only the connection removes its entry,
    /// so the slot is not reused under it.
    idle: u32,
}

/// `Conn::idle` of a connection told to close to make room
/// (`ConnShared::reclaim_idle`): between requests it reads end-of-stream,
/// as at a shutdown.
const RECLAIMED: u32 = u32::MAX;

/// `Conn::home` of a connection counted on no network loop.
const NO_LOOP: u16 = u16::MAX;

/// Spreads connections made off an event loop (thread-per-conn) over the
/// byte counters.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

/// A socket accepted by the acceptor, not yet bound to a loop.
pub(crate) enum Accepted {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

/// Longest lingering close of a refused connection.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Most bytes a refusal reads at once before it closes; a client still
/// sending after that is lingered over.
const REFUSAL_DRAIN: usize = 64 * 1024;

impl Accepted {
    /// Refuses the connection: a best-effort, non-blocking write of
    /// `message`, then a close that does not destroy it. Closing a socket
    /// with unread input makes the kernel send a reset, which can destroy
    /// the message before the client reads it; so the write side is shut
    /// and what the client already sent is read and dropped. A client that
    /// sent its request (the usual case: it arrives with the connection;
    /// one ending in a line end) is closed at once, so a burst of refusals holds no descriptors that the
    /// admitted connections need under a tight limit. One that sent nothing
    /// yet, or still sends, is lingered over (at most [`REFUSAL_LINGER`], by
    /// a task of the current loop) while fewer than `lingering`'s bound
    /// are; past that bound, and off a loop, it is closed at once.
    pub(crate) fn refuse(self, message: &[u8], lingering: &Arc<Lingering>) {
        // A Unix socket keeps what was written for the client after the
        // close, but a client that writes after it gets EPIPE (memcached's
        // clients then report a broken pipe, not the refusal): it is
        // lingered over as a TCP socket is.
        let done = match &self {
            Accepted::Tcp(s) => answer(s, message),
            Accepted::Unix(s) => answer(s, message),
        };
        if done || duality_rt::event_loop::current().is_none() {
            return;
        }
        let Some(held) = lingering.take() else { return };
        let refused = match self {
            Accepted::Tcp(s) => TcpStream::from_std(s).map(Refused::Tcp),
            Accepted::Unix(s) => UnixStream::from_std(s).map(Refused::Unix),
        };
        if let Ok(s) = refused {
            drop(duality_rt::spawn(async move {
                s.linger().await;
                drop(held);
            }));
        }
    }
}

/// Writes `message` (best effort, non-blocking), [drains](drained) what the
/// client sent and shuts the write side: whether the socket may close at
/// once.
fn answer<S: std::os::fd::AsFd>(mut s: &S, message: &[u8]) -> bool
where
    for<'a> &'a S: Read + Write,
{
    let sock = SockRef::from(s);
    if sock.set_nonblocking(true).is_err() {
        // Reading could block the loop: close as before.
        return true;
    }
    let _ = s.write(message);
    // Drained before the write side is shut: a client that waits for the
    // end of the refusal writes nothing more the drain could miss.
    let done = drained(&mut s);
    let _ = sock.shutdown(std::net::Shutdown::Write);
    done
}

/// Reads what a refused client has sent so far (at most
/// [`REFUSAL_DRAIN`]): whether it closed, or sent what looks like whole
/// requests (ending in a line end, as text protocols' do) with nothing
/// left unread, so that a close now sends no reset. A request still on
/// its way (a body, a binary frame) is lingered over.
fn drained(s: &mut impl Read) -> bool {
    let mut buf = [0u8; 4096];
    let mut got = 0;
    let mut last = None;
    while got < REFUSAL_DRAIN {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => {
                got += n;
                last = Some(buf[n - 1]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return last == Some(b'\n'),
            Err(_) => return true,
        }
    }
    false
}

/// How many refused connections may linger at once (each holds a
/// descriptor for up to [`REFUSAL_LINGER`]).
pub(crate) struct Lingering {
    now: AtomicUsize,
    bound: usize,
}

/// One lingering refusal, counted off when dropped.
pub(crate) struct LingerSlot(Arc<Lingering>);

impl Lingering {
    pub(crate) fn new(bound: usize) -> Arc<Lingering> {
        Arc::new(Lingering {
            now: AtomicUsize::new(0),
            bound,
        })
    }

    pub(crate) fn take(self: &Arc<Self>) -> Option<LingerSlot> {
        self.now
            .fetch_update(Relaxed, Relaxed, |n| (n < self.bound).then_some(n + 1))
            .ok()
            .map(|_| LingerSlot(self.clone()))
    }
}

impl Drop for LingerSlot {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Relaxed);
    }
}

/// A refused socket lingered over.
enum Refused {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Refused {
    /// Reads and drops what the client sends until it closes or
    /// [`REFUSAL_LINGER`] has passed.
    async fn linger(self) {
        let mut buf = [0u8; 512];
        let until = std::time::Instant::now() + REFUSAL_LINGER;
        loop {
            let wait = until.saturating_duration_since(std::time::Instant::now());
            let read = async {
                match &self {
                    Refused::Tcp(s) => s.read(&mut buf).await,
                    Refused::Unix(s) => s.read(&mut buf).await,
                }
            };
            match duality_rt::time::timeout(wait, read).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        }
    }
}

impl Conn {
    /// Registers the socket with the current loop (event-loop models), the
    /// network loop `home` counts it (see `ConnShared::loop_conns`: the
    /// count is taken by the caller, and given back when the `Conn` drops,
    /// or here if it cannot be made).
    pub(crate) fn evented(a: Accepted, shared: Arc<ConnShared>, home: usize) -> io::Result<Conn> {
        let home = u16::try_from(home).unwrap_or(NO_LOOP);
        let io = match Self::register(a) {
            Ok(io) => io,
            Err(e) => {
                if let Some(n) = shared.loop_conns.get(usize::from(home)) {
                    n.fetch_sub(1, Relaxed);
                }
                return Err(e);
            }
        };
        let mut conn = Conn::with(io, shared);
        conn.home = home;
        Ok(conn)
    }

    fn register(a: Accepted) -> io::Result<Io> {
        let io = match a {
            Accepted::Tcp(s) => {
                let s = TcpStream::from_std(s)?;
                s.set_nodelay(true)?;
                Io::Tcp(s)
            }
            Accepted::Unix(s) => Io::Unix(UnixStream::from_std(s)?),
        };
        Ok(io)
    }

    /// Keeps the socket blocking (thread-per-conn).
    pub(crate) fn blocking(a: Accepted, shared: Arc<ConnShared>) -> io::Result<Conn> {
        let mid = Arc::new(AtomicBool::new(false));
        let (io, socket) = match a {
            Accepted::Tcp(s) => {
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                let s = Arc::new(s);
                (
                    Io::BlockingTcp(s.clone(), None, mid.clone()),
                    BlockingSocket::Tcp(s),
                )
            }
            Accepted::Unix(s) => {
                s.set_nonblocking(false)?;
                let s = Arc::new(s);
                (
                    Io::BlockingUnix(s.clone(), None, mid.clone()),
                    BlockingSocket::Unix(s),
                )
            }
        };
        let mut conn = Conn::with(io, shared);
        let shutdown = &conn.shared.shutdown;
        shutdown.register(&mut conn.waiter, Waiter::Socket(Box::new((mid, socket))));
        if shutdown.is_set() {
            shutdown.trigger();
        }
        Ok(conn)
    }

    fn with(io: Io, shared: Arc<ConnShared>) -> Conn {
        let slot = (duality_rt::event_loop::current()
            .map_or_else(|| NEXT_SLOT.fetch_add(1, Relaxed), |h| h.id() as usize)
            % BYTE_SLOTS) as u8;
        Conn {
            io,
            waiter: 0,
            shared,
            registered: 0,
            mid_request: false,
            slot,
            home: NO_LOOP,
            idle: 0,
        }
    }

    /// Tells the connection whether the handler holds part of a request.
    /// While it does, a shutdown does not end the connection's reads, so the
    /// request can arrive whole and be answered (within the server's
    /// shutdown deadline); between requests, a shutdown reads as end-of-stream.
    pub fn set_mid_request(&mut self, mid: bool) {
        match self.shared_mid_request() {
            Some(shared) => shared.store(mid, SeqCst),
            None => self.mid_request = mid,
        }
        if mid {
            self.busy();
        }
    }

    /// A request's bytes have arrived: the connection is no longer idle
    /// (nothing to do where it was not in its loop's idle table). One told
    /// to close meanwhile answers what arrived, then closes.
    pub(crate) fn busy(&mut self) {
        if self.idle != 0 && self.idle != RECLAIMED {
            self.leave_idle();
        }
    }

    fn leave_idle(&mut self) {
        let slot = std::mem::take(&mut self.idle) - 1;
        let Some(table) = self.shared.idle_table(self.home) else {
            return;
        };
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        let left = t.key_at(slot).and_then(|k| t.remove(k));
        drop(t);
        if left.is_some_and(|e| e.reclaimed) {
            self.idle = RECLAIMED;
            self.shared.reclaiming.fetch_sub(1, SeqCst);
        }
    }

    /// A task about to wait between requests: puts it in its loop's idle
    /// table (or keeps its waker there current). True once it has been
    /// told to close.
    fn watch_idle(&mut self, waker: &Waker) -> bool {
        if self.mid_request || self.idle == RECLAIMED {
            return self.idle == RECLAIMED && !self.mid_request;
        }
        let Some(table) = self.shared.idle_table(self.home) else {
            return false;
        };
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        let key = self.idle.checked_sub(1).and_then(|slot| t.key_at(slot));
        match key.and_then(|k| Some((k, t.get_mut(k)?))) {
            Some((k, e)) if e.reclaimed => {
                t.remove(k);
                drop(t);
                self.idle = RECLAIMED;
                self.shared.reclaiming.fetch_sub(1, SeqCst);
                true
            }
            Some((_, e)) => {
                if !e.waker.will_wake(waker) {
                    e.waker = waker.clone();
                }
                false
            }
            None => {
                let key = t.insert(Idle {
                    waker: waker.clone(),
                    since: duality_rt::time::loop_now(),
                    reclaimed: false,
                });
                // Slot + 1, clear of RECLAIMED (a table that large is
                // not reclaimed from: left out).
                match u32::try_from((key & 0xffff_ffff) + 1) {
                    Ok(idle) if idle != RECLAIMED => self.idle = idle,
                    _ => drop(t.remove(key)),
                }
                false
            }
        }
    }

    /// A blocking socket's mid-request flag, which the shutdown registry
    /// reads too (`None`: the flag is `Conn::mid_request`, read only here).
    fn shared_mid_request(&self) -> Option<&AtomicBool> {
        match &self.io {
            Io::BlockingTcp(.., shared) | Io::BlockingUnix(.., shared) => Some(shared),
            Io::Tcp(_) | Io::Unix(_) => None,
        }
    }

    /// Before a task waits on the socket: true if the server is closing this
    /// connection now; otherwise makes sure a shutdown will wake `waker`.
    fn closing_or_watch(&mut self, waker: &Waker) -> bool {
        if self.closing() {
            return true;
        }
        let key = waker.data() as usize | 1;
        if self.registered != key {
            self.registered = key;
            // A shutdown between the check and the registration.
            if self.shared.shutdown.watch(&mut self.waiter, waker) && self.closing() {
                return true;
            }
        }
        self.watch_idle(waker)
    }

    fn closing(&self) -> bool {
        (self.shared.shutdown.is_set() || self.idle == RECLAIMED)
            && !self
                .shared_mid_request()
                .map_or(self.mid_request, |shared| shared.load(SeqCst))
    }

    /// Reads into `buf`. `Ok(0)`: the client closed, or the server is
    /// shutting down, nothing more has arrived and the handler is not in the
    /// middle of a request (see [`set_mid_request`](Self::set_mid_request)).
    pub fn read<'a>(
        &'a mut self,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        self.read_into(buf)
    }

    /// [`read`](Self::read) into `buf`'s bytes.
    pub(crate) fn read_into<'a, B>(
        &'a mut self,
        buf: B,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a
    where
        B: AsMut<[u8]> + Unpin + Send + 'a,
    {
        // A flat future of two references (no nested async calls): it sits
        // in every connection's future while the connection waits.
        ReadFuture { conn: self, buf }
    }

    /// Polls an event-loop socket's read; `Ok(0)` once the server is
    /// closing the connection.
    fn poll_read_evented(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let r = match &self.io {
            Io::Tcp(s) => s.poll_read(cx, buf),
            Io::Unix(s) => s.poll_read(cx, buf),
            _ => unreachable!("blocking sockets are read by blocking_read"),
        };
        if r.is_ready() {
            return r;
        }
        if self.closing_or_watch(cx.waker()) {
            return Poll::Ready(Ok(0));
        }
        Poll::Pending
    }

    fn count_read(&self, n: usize) {
        self.shared.bytes[usize::from(self.slot)]
            .read
            .fetch_add(n as u64, Relaxed);
    }

    fn count_written(&self, n: usize) {
        self.shared.bytes[usize::from(self.slot)]
            .written
            .fetch_add(n as u64, Relaxed);
    }

    /// A blocking socket's read (the thread waits in it); `None` for a
    /// socket on an event loop.
    #[inline]
    fn blocking_read(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        if !self.is_blocking() {
            return None;
        }
        self.blocking_read_slow(buf)
    }

    /// [`blocking_read`](Self::blocking_read) past its check (kept apart so
    /// that the check inlines into every evented read).
    fn blocking_read_slow(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        if self.closing() {
            // What has already arrived is still a request the client sent:
            // read it without waiting; end of stream only once nothing has.
            let sock = match &self.io {
                Io::BlockingTcp(s, ..) => SockRef::from(&**s),
                Io::BlockingUnix(s, ..) => SockRef::from(&**s),
                _ => return None,
            };
            let r = sock.set_nonblocking(true).and_then(|()| match &self.io {
                Io::BlockingTcp(s, ..) => (&**s).read(buf),
                Io::BlockingUnix(s, ..) => (&**s).read(buf),
                _ => Ok(0),
            });
            let restored = sock.set_nonblocking(false);
            let r = match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                r => r,
            };
            return Some(r.and_then(|n| restored.map(|()| n)));
        }
        match &self.io {
            Io::BlockingTcp(s, ..) => Some((&**s).read(buf)),
            Io::BlockingUnix(s, ..) => Some((&**s).read(buf)),
            _ => None,
        }
    }

    /// Waits until a read would find data, end of stream, or the server's
    /// shutdown (then the next [`read`](Self::read) returns `Ok(0)`), without
    /// holding a buffer. Blocking sockets return at once: their read waits.
    pub fn readable(&mut self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        // Flat, like `read`'s: it sits in every idle connection's future.
        ReadableFuture {
            conn: self,
            untimed: true,
        }
    }

    /// Reads what has arrived without waiting: `Ok(None)` if nothing has
    /// (the next [`readable`](Self::readable) waits for more). Blocking
    /// sockets wait, as their reads do. `Ok(Some(0))`: end of stream, or the
    /// server's shutdown between requests once nothing more has arrived.
    pub fn try_read<'a>(
        &'a mut self,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<Option<usize>>> + Send + 'a {
        self.try_read_into(buf)
    }

    /// [`try_read`](Self::try_read) into `buf`'s bytes.
    pub(crate) fn try_read_into<'a, B>(
        &'a mut self,
        buf: B,
    ) -> impl Future<Output = io::Result<Option<usize>>> + Send + 'a
    where
        B: AsMut<[u8]> + Unpin + Send + 'a,
    {
        TryReadFuture {
            conn: self,
            buf,
            yielded: false,
        }
    }

    /// [`read`](Self::read), waiting at most `wait` (`None`: no limit);
    /// `ErrorKind::TimedOut` after that. Works in every model: on event loops
    /// through the loop's timers, on a blocking socket through its receive
    /// timeout.
    pub async fn read_for(&mut self, buf: &mut [u8], wait: Option<Duration>) -> io::Result<usize> {
        if self.is_blocking() {
            self.set_blocking_rcv_timeout(wait)?;
            return match self.read(buf).await {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(timed_out()),
                r => r,
            };
        }
        match wait {
            None => self.read(buf).await,
            Some(w) => match duality_rt::time::timeout(w, self.read(buf)).await {
                Ok(r) => r,
                Err(_) => Err(timed_out()),
            },
        }
    }

    /// [`read`](Self::read) until `timer` fires; `TimedOut` then. For a
    /// caller that keeps one timer across its reads and moves it with
    /// [`Sleep::extend`](duality_rt::time::Sleep::extend): an idle deadline
    /// pushed back at every request is then not a new timer per request, as
    /// [`read_for`](Self::read_for)'s is. On a blocking socket the time left
    /// goes on the socket as its receive timeout.
    pub fn read_until<'a>(
        &'a mut self,
        buf: &'a mut [u8],
        timer: &'a mut duality_rt::time::Sleep,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        self.read_into_until(buf, timer)
    }

    /// [`read_until`](Self::read_until) into `buf`'s bytes.
    pub(crate) fn read_into_until<'a, B>(
        &'a mut self,
        buf: B,
        timer: &'a mut duality_rt::time::Sleep,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a
    where
        B: AsMut<[u8]> + Unpin + Send + 'a,
    {
        self.blocking_deadline(timer, false);
        Timed {
            inner: ReadFuture { conn: self, buf },
            timer,
        }
    }

    /// [`readable`](Self::readable) until `timer` fires; `TimedOut` then (as
    /// [`read_until`](Self::read_until)). On a blocking socket it returns at
    /// once, and the time left goes on the socket for the read that follows.
    pub fn readable_until<'a>(
        &'a mut self,
        timer: &'a mut duality_rt::time::Sleep,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        self.blocking_deadline(timer, false);
        Timed {
            inner: ReadableFuture {
                conn: self,
                untimed: false,
            },
            timer,
        }
    }

    /// [`write_all`](Self::write_all) until `timer` fires; `TimedOut` then
    /// (a deadline for the whole of `buf`). On a blocking socket the time
    /// left goes on the socket as its send timeout.
    pub fn write_all_until<'a>(
        &'a mut self,
        buf: &'a [u8],
        timer: &'a mut duality_rt::time::Sleep,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        self.blocking_deadline(timer, true);
        Timed {
            inner: WriteAllFuture {
                conn: self,
                buf,
                done: 0,
            },
            timer,
        }
    }

    /// [`readable`](Self::readable), waiting at most `wait`; `TimedOut` after
    /// that. On a blocking socket it returns at once, and the timeout goes on
    /// the socket for the read that follows.
    pub async fn readable_for(&mut self, wait: Option<Duration>) -> io::Result<()> {
        if self.is_blocking() {
            return self.set_blocking_rcv_timeout(wait);
        }
        match wait {
            None => self.readable().await,
            Some(w) => match duality_rt::time::timeout(w, self.readable()).await {
                Ok(r) => r,
                Err(_) => Err(timed_out()),
            },
        }
    }

    /// On a blocking socket, whose operations wait inside their poll: the
    /// time left until `timer` fires becomes its send (`write`) or receive
    /// timeout. Nothing for a socket on a loop, whose waits race the timer.
    /// A refused setting is logged: the wait is then bounded only by the
    /// socket's earlier timeout.
    fn blocking_deadline(&mut self, timer: &duality_rt::time::Sleep, write: bool) {
        if !self.is_blocking() {
            return;
        }
        let left = timer.deadline().saturating_duration_since(Instant::now());
        let r = if write {
            // At least a millisecond: zero means none to the kernel.
            let wait = Some(left.max(Duration::from_millis(1)));
            match &self.io {
                Io::BlockingTcp(s, ..) => s.set_write_timeout(wait),
                Io::BlockingUnix(s, ..) => s.set_write_timeout(wait),
                _ => Ok(()),
            }
        } else {
            self.set_blocking_rcv_timeout(Some(left))
        };
        if let Err(e) = r {
            tracing::debug!("a socket timeout was refused: {e}");
        }
    }

    /// On a blocking socket, takes off the receive timeout an earlier
    /// timed wait left there, so the next [`read`](Self::read) waits as long
    /// as it must (as a socket on a loop does). Nothing on a loop's socket.
    pub fn untimed_reads(&mut self) {
        if let Err(e) = self.set_blocking_rcv_timeout(None) {
            tracing::debug!("a socket timeout was refused: {e}");
        }
    }

    fn set_blocking_rcv_timeout(&mut self, wait: Option<Duration>) -> io::Result<()> {
        // A zero timeout means "none" to the kernel: use the smallest real one.
        let wait = wait.map(|w| w.max(Duration::from_millis(1)));
        match &mut self.io {
            Io::BlockingTcp(_, set, _) | Io::BlockingUnix(_, set, _) if *set == wait => {}
            Io::BlockingTcp(s, set, _) => {
                s.set_read_timeout(wait)?;
                *set = wait;
            }
            Io::BlockingUnix(s, set, _) => {
                s.set_read_timeout(wait)?;
                *set = wait;
            }
            _ => {}
        }
        Ok(())
    }

    /// Writes all of `buf`.
    pub fn write_all<'a>(
        &'a mut self,
        buf: &'a [u8],
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        self.write_all_from(buf)
    }

    /// [`write_all`](Self::write_all) of `buf`'s bytes.
    pub(crate) fn write_all_from<'a, B>(
        &'a mut self,
        buf: B,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a
    where
        B: AsRef<[u8]> + Unpin + Send + 'a,
    {
        WriteAllFuture {
            conn: self,
            buf,
            done: 0,
        }
    }

    /// Writes all of `buf`, leaves it empty (its capacity may change: under
    /// io_uring an idle connection's send queue takes the buffer itself and
    /// gives back its spare, saving a copy) and returns once the kernel has
    /// taken every byte: a caller may count `buf`'s memory as its own until
    /// then. With `wait`, gives up with `TimedOut` when all that takes
    /// longer.
    pub async fn write_vec_for(
        &mut self,
        buf: &mut Vec<u8>,
        wait: Option<Duration>,
    ) -> io::Result<()> {
        let n = buf.len();
        let r = match (&mut self.io, wait) {
            (Io::Tcp(s), _) => {
                within(wait, async {
                    s.write_vec(buf).await?;
                    s.flush().await
                })
                .await
            }
            (Io::Unix(s), _) => {
                within(wait, async {
                    s.write_vec(buf).await?;
                    s.flush().await
                })
                .await
            }
            (Io::BlockingTcp(..) | Io::BlockingUnix(..), _) => {
                let r = self.write_all_for(buf, wait).await;
                buf.clear();
                return r;
            }
        };
        buf.clear();
        if r.is_ok() {
            self.count_written(n);
        }
        r
    }

    /// Writes all of `head`, then `body[range]`, then `after`, and leaves
    /// `head` empty (as [`write_vec_for`](Self::write_vec_for)): a response
    /// head, a shared body (a cached file's, a cache item's value) and what
    /// ends the response. Under io_uring the body is sent from where it
    /// lies, never copied, and bodies written before the task next waits go
    /// in one gather send; under epoll it is one `writev`. Returns once the
    /// bytes are queued: [`flush`](Self::flush) waits until the kernel has
    /// them (for a caller counting the body's memory while it is held). A
    /// `range` outside `body` is `InvalidInput`. `wait` bounds each wait for
    /// the client to take more, not the whole write: a slow reader that
    /// keeps reading is not cut off (nginx's `send_timeout`).
    pub async fn write_vec_shared_for(
        &mut self,
        head: &mut Vec<u8>,
        body: &SharedBytes,
        range: std::ops::Range<usize>,
        after: &[u8],
        wait: Option<Duration>,
    ) -> io::Result<()> {
        let Some(n) = body
            .get(range.clone())
            .map(|b| head.len() + b.len() + after.len())
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "write_vec_shared_for: range outside the body",
            ));
        };
        // Taken up again after each window (see `Stall`): progress is bytes
        // of this write, or (io_uring, waiting for room in the queue) bytes
        // the send before it gave the kernel.
        let mut done = 0;
        let mut stall = Stall::new(wait);
        let r = loop {
            let (before, queued) = (done, self.unsent());
            let r = match &mut self.io {
                Io::Tcp(s) => {
                    within(
                        stall.window(),
                        s.write_vec_shared_from(head, body, range.clone(), after, &mut done),
                    )
                    .await
                }
                Io::Unix(s) => {
                    within(
                        stall.window(),
                        s.write_vec_shared_from(head, body, range.clone(), after, &mut done),
                    )
                    .await
                }
                Io::BlockingTcp(..) | Io::BlockingUnix(..) => break None,
            };
            match r {
                Err(e)
                    if e.kind() == io::ErrorKind::TimedOut
                        && stall.again(done > before || self.unsent() < queued) => {}
                r => break Some(r),
            }
        };
        let r = match r {
            Some(r) => r,
            None => {
                let mut r = self.write_all_for(head, wait).await;
                if r.is_ok() {
                    r = self.write_all_for(&body[range], wait).await;
                }
                if r.is_ok() {
                    r = self.write_all_for(after, wait).await;
                }
                head.clear();
                return r;
            }
        };
        head.clear();
        if r.is_ok() {
            self.count_written(n);
        }
        r
    }

    /// Waits until the kernel has every byte written so far (under
    /// io_uring, until the sends complete; at once where writes are direct).
    pub async fn flush(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => s.flush().await,
            Io::Unix(s) => s.flush().await,
            Io::BlockingTcp(..) | Io::BlockingUnix(..) => Ok(()),
        }
    }

    /// Bytes written that the kernel has not taken yet (io_uring's send
    /// queue; 0 where writes are direct).
    pub fn unsent(&self) -> usize {
        match &self.io {
            Io::Tcp(s) => s.unsent(),
            Io::Unix(s) => s.unsent(),
            Io::BlockingTcp(..) | Io::BlockingUnix(..) => 0,
        }
    }

    /// [`flush`](Self::flush), giving up with `TimedOut` once the client
    /// has taken nothing for `wait` (per wait, as
    /// [`write_all_for`](Self::write_all_for)).
    pub async fn flush_for(&mut self, wait: Option<Duration>) -> io::Result<()> {
        let mut stall = Stall::new(wait);
        loop {
            let before = self.unsent();
            match within(stall.window(), self.flush()).await {
                Err(e)
                    if e.kind() == io::ErrorKind::TimedOut
                        && stall.again(self.unsent() < before) => {}
                r => return r,
            }
        }
    }

    /// [`write_all`](Self::write_all), giving up with `TimedOut` when the
    /// client has taken nothing more for `wait` (a client that never reads):
    /// the bound is per wait, not for the whole buffer. Works in every model,
    /// like [`read_for`](Self::read_for).
    pub async fn write_all_for(&mut self, buf: &[u8], wait: Option<Duration>) -> io::Result<()> {
        let wait = wait.map(|w| w.max(Duration::from_millis(1)));
        let r = match (&mut self.io, wait) {
            (Io::BlockingTcp(s, ..), _) => s
                .set_write_timeout(wait)
                .and_then(|_| (&**s).write_all(buf)),
            (Io::BlockingUnix(s, ..), _) => s
                .set_write_timeout(wait)
                .and_then(|_| (&**s).write_all(buf)),
            (Io::Tcp(s), None) => s.write_all(buf).await,
            (Io::Unix(s), None) => s.write_all(buf).await,
            (io, Some(w)) => {
                let mut rest = buf;
                while !rest.is_empty() {
                    let step = async {
                        match io {
                            Io::Tcp(s) => s.write(rest).await,
                            Io::Unix(s) => s.write(rest).await,
                            _ => unreachable!("blocking sockets handled above"),
                        }
                    };
                    match duality_rt::time::timeout(w, step).await {
                        Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(Ok(n)) => rest = &rest[n..],
                        Ok(Err(e)) => return Err(e),
                        Err(_) => return Err(timed_out()),
                    }
                }
                Ok(())
            }
        };
        let r = match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(timed_out()),
            r => r,
        };
        if r.is_ok() {
            self.count_written(buf.len());
        }
        r
    }

    /// The raw descriptor (for `sendfile`).
    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match &self.io {
            Io::Tcp(s) => s.as_raw_fd(),
            Io::Unix(s) => s.as_raw_fd(),
            Io::BlockingTcp(s, ..) => s.as_raw_fd(),
            Io::BlockingUnix(s, ..) => s.as_raw_fd(),
        }
    }

    /// Whether this is a blocking socket (`thread-per-conn`): its reads
    /// wait on the thread, and [`readable`](Self::readable) returns at once.
    pub fn is_blocking(&self) -> bool {
        matches!(self.io, Io::BlockingTcp(..) | Io::BlockingUnix(..))
    }

    /// Waits `wait` before going on with this connection, under any model:
    /// a timer on an event loop (the loop serves others meanwhile); the
    /// connection's own thread sleeps under `thread-per-conn`, where no
    /// loop runs timers and the thread has nothing else to do.
    pub async fn pause(&self, wait: std::time::Duration) {
        if self.is_blocking() {
            std::thread::sleep(wait);
        } else {
            duality_rt::time::sleep(wait).await;
        }
    }

    /// Whether the connection came through a Unix socket.
    pub fn is_unix(&self) -> bool {
        matches!(self.io, Io::Unix(_) | Io::BlockingUnix(..))
    }

    /// The remote address of a TCP connection (`None` for Unix sockets).
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        match &self.io {
            Io::Tcp(s) => s.peer_addr().ok(),
            Io::BlockingTcp(s, ..) => s.peer_addr().ok(),
            Io::Unix(_) | Io::BlockingUnix(..) => None,
        }
    }

    /// The local address of a TCP connection (`None` for Unix sockets).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match &self.io {
            Io::Tcp(s) => s.local_addr().ok(),
            Io::BlockingTcp(s, ..) => s.local_addr().ok(),
            Io::Unix(_) | Io::BlockingUnix(..) => None,
        }
    }

    /// Shuts the sending side: the client reads end of stream after what
    /// was sent (a lingering close), in every model.
    pub fn shutdown_write(&self) -> io::Result<()> {
        let how = std::net::Shutdown::Write;
        match &self.io {
            Io::Tcp(s) => s.shutdown(how),
            Io::Unix(s) => s.shutdown(how),
            Io::BlockingTcp(s, ..) => s.shutdown(how),
            Io::BlockingUnix(s, ..) => s.shutdown(how),
        }
    }

    /// The client stopped reading (a write timed out or failed): what is
    /// still queued to send is dropped, so the connection closes at once
    /// when it drops (an io_uring socket would linger over it for up to
    /// 5 s; blocking and epoll sockets leave it to the kernel, as nginx's
    /// close after a send timeout does).
    pub fn discard_unsent(&self) {
        match &self.io {
            Io::Tcp(s) => s.discard_unsent(),
            Io::Unix(s) => s.discard_unsent(),
            Io::BlockingTcp(..) | Io::BlockingUnix(..) => {}
        }
    }

    /// At a shutdown, with the socket's readiness saying nothing has
    /// arrived: whether bytes have nevertheless (one `recv(MSG_PEEK)`). The
    /// runtime learns of bytes from the reactor's next event, and a read
    /// that took all there was forgets readiness at once (epoll), so a
    /// request that arrived just before the stop may not be reported yet:
    /// the connection then waits for the report (its waker is registered)
    /// and reads it, where it would otherwise close with it unread.
    fn arrived_unreported(&self) -> bool {
        self.input_pending()
    }

    /// Whether the client has sent bytes not read yet (buffered by the
    /// runtime or still in the kernel), without reading them: closing with
    /// them unread would reset the connection.
    pub fn input_pending(&self) -> bool {
        use duality_rt::net::peek_pending;
        use socket2::SockRef;
        match &self.io {
            Io::Tcp(s) => s.input_pending(),
            Io::Unix(s) => s.input_pending(),
            Io::BlockingTcp(s, ..) => peek_pending(SockRef::from(&**s)),
            Io::BlockingUnix(s, ..) => peek_pending(SockRef::from(&**s)),
        }
    }

    /// The TCP stream, if this is an event-loop TCP connection.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match &self.io {
            Io::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// Runs a write-side system call `f(fd)` (for `sendfile`) when the
    /// socket can take more, retrying on `WouldBlock`; `TimedOut` if it could
    /// not for `wait`. Works in every model: on a blocking socket `f` runs
    /// non-blocking and the thread waits for room itself
    /// (`blocking_write_with`).
    pub async fn write_with_for<R>(
        &mut self,
        wait: Option<Duration>,
        mut f: impl FnMut(std::os::fd::RawFd) -> io::Result<R>,
    ) -> io::Result<R> {
        let fd = self.as_raw_fd();
        let wait = wait.map(|w| w.max(Duration::from_millis(1)));
        let r = match (&self.io, wait) {
            (Io::BlockingTcp(s, ..), _) => blocking_write_with(SockRef::from(&**s), wait, || f(fd)),
            (Io::BlockingUnix(s, ..), _) => {
                blocking_write_with(SockRef::from(&**s), wait, || f(fd))
            }
            (Io::Tcp(s), None) => s.write_with(|| f(fd)).await,
            (Io::Unix(s), None) => s.write_with(|| f(fd)).await,
            (Io::Tcp(s), Some(w)) => duality_rt::time::timeout(w, s.write_with(|| f(fd)))
                .await
                .unwrap_or_else(|_| Err(timed_out())),
            (Io::Unix(s), Some(w)) => duality_rt::time::timeout(w, s.write_with(|| f(fd)))
                .await
                .unwrap_or_else(|_| Err(timed_out())),
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(timed_out()),
            r => r,
        }
    }

    /// True once the server started shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shared.shutdown.is_set()
    }
}

/// `f` on a blocking socket as the event loops run it: non-blocking, and
/// on `WouldBlock` a wait for room (as epoll reports it) of at most `wait`
/// in all. A blocking `sendfile` under a send timeout waited that long for
/// each trickle of room the kernel found, not in all: a client that never
/// read kept its connection (and thread) for about four write timeouts.
fn blocking_write_with<R>(
    sock: SockRef<'_>,
    wait: Option<Duration>,
    mut f: impl FnMut() -> io::Result<R>,
) -> io::Result<R> {
    sock.set_nonblocking(true)?;
    let deadline = wait.map(|w| Instant::now() + w);
    let r = loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                if left == Some(Duration::ZERO) {
                    break Err(timed_out());
                }
                match duality_rt::net::wait_writable(std::os::fd::AsFd::as_fd(&*sock), left) {
                    Ok(true) => {}
                    Ok(false) => break Err(timed_out()),
                    Err(e) => break Err(e),
                }
            }
            r => break r,
        }
    };
    let restored = sock.set_nonblocking(false);
    r.and_then(|v| restored.map(|()| v))
}

/// A timed write's judge of progress, for waits that cannot tell when the
/// client took bytes, only whether it did (a shared body's send, a flush):
/// they wait in quarters of the timeout, and time out once four quarters in
/// a row saw nothing taken, so a client that stops reading is cut between
/// one timeout and a quarter more after it last took something (nginx's
/// `send_timeout`; whole windows cut it after up to two timeouts).
struct Stall {
    quarter: Option<Duration>,
    quiet: u8,
}

impl Stall {
    /// Windows of a quarter of `wait`; `None`: no timeout.
    fn new(wait: Option<Duration>) -> Stall {
        Stall {
            quarter: wait.map(|w| (w / 4).max(Duration::from_millis(1))),
            quiet: 0,
        }
    }

    fn window(&self) -> Option<Duration> {
        self.quarter
    }

    /// After a window ran out: whether to wait on, given whether the
    /// client took something in it.
    fn again(&mut self, progressed: bool) -> bool {
        self.quiet = if progressed { 0 } else { self.quiet + 1 };
        self.quiet < 4
    }
}

/// `f`, given up with `TimedOut` after `wait` (at least a millisecond).
async fn within<T>(
    wait: Option<Duration>,
    f: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match wait {
        None => f.await,
        Some(w) => duality_rt::time::timeout(w.max(Duration::from_millis(1)), f)
            .await
            .unwrap_or_else(|_| Err(timed_out())),
    }
}

fn timed_out() -> io::Error {
    io::ErrorKind::TimedOut.into()
}

/// [`Conn::read`]'s future. The buffer is anything that lends the bytes to
/// fill: a slice for callers, one pointer for the session driver (this
/// future sits in every connection's while it waits for a request's rest).
struct ReadFuture<'a, B> {
    conn: &'a mut Conn,
    buf: B,
}

impl<B: AsMut<[u8]> + Unpin> Future for ReadFuture<'_, B> {
    type Output = io::Result<usize>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let r = match this.conn.blocking_read(this.buf.as_mut()) {
            Some(r) => r,
            None => match this.conn.poll_read_evented(cx, this.buf.as_mut()) {
                Poll::Ready(r) => r,
                Poll::Pending => return Poll::Pending,
            },
        };
        if let Ok(n) = r {
            this.conn.count_read(n);
        }
        Poll::Ready(r)
    }
}

/// [`Conn::try_read`]'s future (its buffer as [`ReadFuture`]'s).
struct TryReadFuture<'a, B> {
    conn: &'a mut Conn,
    buf: B,
    yielded: bool,
}

impl<B: AsMut<[u8]> + Unpin> Future for TryReadFuture<'_, B> {
    type Output = io::Result<Option<usize>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let conn = &mut *this.conn;
        let r = if let Some(r) = conn.blocking_read(this.buf.as_mut()) {
            r.map(Some)
        } else if !this.yielded && duality_rt::coop::remaining() == Some(0) {
            // The poll's I/O budget is spent: come back on the next poll (a
            // read now would only say "not yet").
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        } else {
            let r = match &conn.io {
                Io::Tcp(s) => s.poll_read(cx, this.buf.as_mut()),
                Io::Unix(s) => s.poll_read(cx, this.buf.as_mut()),
                _ => unreachable!("blocking sockets are read by blocking_read"),
            };
            // At a shutdown, what has already arrived is still a request
            // the client sent: read it; end of stream only once nothing has.
            match r {
                Poll::Ready(r) => r.map(Some),
                Poll::Pending if conn.closing() && !conn.arrived_unreported() => Ok(Some(0)),
                Poll::Pending => Ok(None),
            }
        };
        if let Ok(Some(n)) = r {
            conn.count_read(n);
        }
        Poll::Ready(r)
    }
}

/// [`Conn::readable`]'s future.
struct ReadableFuture<'a> {
    conn: &'a mut Conn,
    /// No time limit: a blocking socket's receive timeout is lifted.
    untimed: bool,
}

impl Future for ReadableFuture<'_> {
    type Output = io::Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let conn = &mut *this.conn;
        let r = match &conn.io {
            Io::Tcp(s) => s.poll_readable(cx),
            Io::Unix(s) => s.poll_readable(cx),
            // The read that follows waits: untimed, a receive timeout left by
            // an earlier timed wait must not cut it short.
            Io::BlockingTcp(..) | Io::BlockingUnix(..) if this.untimed => {
                return Poll::Ready(conn.set_blocking_rcv_timeout(None));
            }
            Io::BlockingTcp(..) | Io::BlockingUnix(..) => return Poll::Ready(Ok(())),
        };
        if let Poll::Ready(r) = r {
            return Poll::Ready(r);
        }
        if conn.closing_or_watch(cx.waker()) && !conn.arrived_unreported() {
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

/// A connection future bounded by a timer the caller keeps: `TimedOut`
/// once it fires. A flat future (the connection's futures sit in every
/// connection's). On a blocking socket, whose operation waits inside its
/// poll, the time left went on the socket when the future was made
/// ([`Conn::blocking_deadline`]), and the kernel's `WouldBlock` at its end
/// reads as `TimedOut`.
struct Timed<'t, F> {
    inner: F,
    timer: &'t mut duality_rt::time::Sleep,
}

impl<F, T> Future for Timed<'_, F>
where
    F: Future<Output = io::Result<T>> + Unpin,
{
    type Output = io::Result<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll(cx) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                Poll::Ready(Err(timed_out()))
            }
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => match Pin::new(&mut *this.timer).poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(timed_out())),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// [`Conn::write_all`]'s future (its buffer as [`ReadFuture`]'s).
struct WriteAllFuture<'a, B> {
    conn: &'a mut Conn,
    buf: B,
    done: usize,
}

impl<B: AsRef<[u8]> + Unpin> Future for WriteAllFuture<'_, B> {
    type Output = io::Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let buf = this.buf.as_ref();
        let r = match &this.conn.io {
            Io::BlockingTcp(s, ..) => (&**s).write_all(buf),
            Io::BlockingUnix(s, ..) => (&**s).write_all(buf),
            io => loop {
                if this.done == buf.len() {
                    break Ok(());
                }
                let r = match io {
                    Io::Tcp(s) => s.poll_write(cx, &buf[this.done..]),
                    Io::Unix(s) => s.poll_write(cx, &buf[this.done..]),
                    _ => unreachable!("blocking sockets handled above"),
                };
                match r {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(0)) => break Err(io::ErrorKind::WriteZero.into()),
                    Poll::Ready(Ok(n)) => this.done += n,
                    Poll::Ready(Err(e)) => break Err(e),
                }
            },
        };
        if r.is_ok() {
            this.conn.count_written(buf.len());
        }
        Poll::Ready(r)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.waiter != 0 {
            self.shared.shutdown.unregister(self.waiter);
        }
        self.busy();
        if let Some(n) = self.shared.loop_conns.get(usize::from(self.home)) {
            n.fetch_sub(1, Relaxed);
        }
        self.shared.live.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop_waker() -> Waker {
        Waker::noop().clone()
    }

    /// Four quiet quarters in a row time a write out; any progress starts
    /// the count again, so a stall is cut between one timeout and a
    /// quarter more after the client last took something.
    #[test]
    fn a_write_times_out_after_four_quiet_quarters_in_a_row() {
        let mut s = Stall::new(Some(Duration::from_secs(60)));
        assert_eq!(s.window(), Some(Duration::from_secs(15)));
        assert!(s.again(false) && s.again(false) && s.again(false));
        assert!(s.again(true), "progress in the fourth window");
        assert!(s.again(false) && s.again(false) && s.again(false));
        assert!(!s.again(false), "a whole timeout without progress");
        assert_eq!(Stall::new(None).window(), None);
        assert_eq!(
            Stall::new(Some(Duration::from_micros(10))).window(),
            Some(Duration::from_millis(1))
        );
    }

    #[test]
    fn the_shutdown_registry_gives_back_its_table_once_connections_close() {
        let s = ShutdownSignal::default();
        let mut keys = vec![0u64; 20_000];
        for k in &mut keys {
            s.register(k, Waiter::Task(noop_waker()));
        }
        let full = s.waiters.lock().unwrap().capacity();
        assert!(full >= 20_000);
        // A second registration under a key replaces its waiter.
        let before = keys[3];
        s.register(&mut keys[3], Waiter::Task(noop_waker()));
        assert_eq!(keys[3], before);
        assert_eq!(s.waiters.lock().unwrap().live(), 20_000);
        for &k in &keys[10..] {
            s.unregister(k);
        }
        let after = s.waiters.lock().unwrap().capacity();
        assert!(after <= 2048, "the table kept {after} of {full} slots");
        // The rest are still woken at shutdown.
        assert_eq!(s.waiters.lock().unwrap().live(), 10);
        s.trigger();
        assert!(s.is_set() && s.waiters.lock().unwrap().live() == 0);
        // A key from before the shutdown names nothing now: registering
        // under it makes a new entry, and removing it removes nothing else.
        let mut old = keys[0];
        s.register(&mut old, Waiter::Task(noop_waker()));
        assert_ne!(old, keys[0]);
        s.unregister(keys[1]);
        assert_eq!(s.waiters.lock().unwrap().live(), 1);
    }
}

/// Model checks of the shutdown handshake (see [`ShutdownSignal`]): every
/// interleaving of a handler with `trigger`, on real sockets. A blocking
/// handler that would wait in a read either sees the shutdown or has its
/// read side shut; one in the middle of a request is never cut; a task that
/// would wait either sees the shutdown or is woken.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use std::os::unix::net::UnixStream as StdUnix;
    use std::task::Wake;

    /// A thread-per-conn connection on one end of a socket pair, with a
    /// handle on its socket to look at afterwards and the client's end
    /// (kept open: a closed peer would read as end-of-stream too).
    fn blocking_conn(shared: &Arc<ConnShared>) -> (Conn, StdUnix, StdUnix) {
        let (server, client) = StdUnix::pair().unwrap();
        let look = server.try_clone().unwrap();
        let conn = Conn::blocking(Accepted::Unix(server), shared.clone()).unwrap();
        (conn, look, client)
    }

    /// Runs `handler` on its own thread, then `Conn::closing`'s look (what
    /// `blocking_read` does before it waits), while this thread triggers
    /// the shutdown. Returns the look and the connection, kept open so
    /// its socket can still be looked at.
    fn race_shutdown(
        shared: &Arc<ConnShared>,
        handler: impl FnOnce() -> Conn + Send + 'static,
    ) -> (bool, Conn) {
        let h = loom::thread::spawn(move || {
            let conn = handler();
            (conn.closing(), conn)
        });
        shared.shutdown.trigger();
        h.join().unwrap()
    }

    /// Whether the socket's read side was shut: nothing was sent, so a
    /// read that is not shut would wait.
    fn read_shut(s: &StdUnix) -> bool {
        s.set_nonblocking(true).unwrap();
        match (&*s).read(&mut [0u8; 1]) {
            Ok(0) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            r => panic!("unexpected read: {r:?}"),
        }
    }

    #[test]
    fn a_handler_ending_a_request_sees_the_shutdown_or_has_its_read_shut() {
        loom::model(|| {
            let shared = Arc::new(ConnShared::new(1, false));
            let (mut conn, look, _client) = blocking_conn(&shared);
            conn.set_mid_request(true);
            let (closing, _conn) = race_shutdown(&shared, move || {
                conn.set_mid_request(false);
                conn
            });
            assert!(
                closing || read_shut(&look),
                "the handler would wait forever"
            );
        });
    }

    #[test]
    fn a_handler_in_the_middle_of_a_request_is_not_cut() {
        loom::model(|| {
            let shared = Arc::new(ConnShared::new(1, false));
            let (mut conn, look, _client) = blocking_conn(&shared);
            conn.set_mid_request(true);
            let (closing, _conn) = race_shutdown(&shared, move || conn);
            assert!(!closing && !read_shut(&look), "a request was cut short");
        });
    }

    #[test]
    fn a_handler_accepted_as_the_server_shuts_down_is_not_missed() {
        loom::model(|| {
            let shared = Arc::new(ConnShared::new(1, false));
            let (server, _client) = StdUnix::pair().unwrap();
            let look = server.try_clone().unwrap();
            let s = shared.clone();
            let (closing, _conn) = race_shutdown(&shared, move || {
                Conn::blocking(Accepted::Unix(server), s).unwrap()
            });
            assert!(
                closing || read_shut(&look),
                "the handler would wait forever"
            );
        });
    }

    struct Woken(AtomicBool);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, SeqCst);
        }
    }

    #[test]
    fn a_task_about_to_wait_sees_the_shutdown_or_is_woken() {
        loom::model(|| {
            let shared = Arc::new(ConnShared::new(1, false));
            let woken = Arc::new(Woken(AtomicBool::new(false)));
            let (s, w) = (shared.clone(), woken.clone());
            let task = loom::thread::spawn(move || {
                // `Conn::closing_or_watch`: a look, then the registration
                // and its look.
                let mut key = 0;
                s.shutdown.is_set() || s.shutdown.watch(&mut key, &Waker::from(w))
            });
            shared.shutdown.trigger();
            let closing = task.join().unwrap();
            assert!(
                closing || woken.0.load(SeqCst),
                "the task would wait forever"
            );
        });
    }
}
