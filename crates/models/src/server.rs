//! The server builder: listeners + model + handler → running threads.

use crate::conn::{Accepted, Conn, ConnShared, LingerSlot, Lingering};
use crate::model::{AcceptPolicy, Balance, CpuAffinity, Model};
use crate::payload::{ColorLocks, Dispatch, Handoff, Lane, Payload, Spread};
use crate::stage::Stage;
use crate::stats::{loop_thread_stats, ServerStats, ThreadRole};
use duality_rt::net::{TcpListener, UnixListener};
use duality_rt::{LoopConfig, LoopHandle, LoopThread, WorkGroup};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type HandlerFn = dyn Fn(Conn, Payload) -> BoxFuture + Send + Sync;
/// Spawns the handler's future for a connection on the current loop: the
/// future itself becomes the task (no box, no wrapper around it, which
/// every idle connection would hold).
type SpawnFn = dyn Fn(Conn, Payload) + Send + Sync;

/// Configures and starts a server. Every model serves the same handler.
pub struct ServerBuilder {
    name: String,
    tcp: Vec<SocketAddr>,
    unix: Vec<PathBuf>,
    model: Model,
    accept: AcceptPolicy,
    balance: Balance,
    max_conns: usize,
    lingering: Option<usize>,
    handoff_capacity: usize,
    handoff: Handoff,
    refusal: Vec<u8>,
    long_poll: Option<Duration>,
    thread_stack: usize,
    faults: duality_rt::faults::Faults,
    idle_spin: Option<Duration>,
    payload_spin: Duration,
    backlog: i32,
    unix_mode: Option<u32>,
    reclaim_idle: bool,
    receive_buffers: Option<(u16, u32)>,
    cpu_affinity: CpuAffinity,
    loop_slice: Option<Duration>,
    after_bind: Option<AfterBind>,
}

/// What runs once the listeners are bound, before any thread of the server
/// starts (see [`ServerBuilder::after_bind`]).
type AfterBind = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// Most refused connections lingered over at once under `max_conns`
/// (each holds a descriptor for up to a second): an eighth of the admitted
/// connections' share, at least 4. A server's descriptor budget keeps room
/// for them beside its connections', or a burst of refusals takes what
/// admitted connections need.
pub fn lingering_refusals(max_conns: usize) -> usize {
    (max_conns / 8).max(4)
}

/// The listen backlog unless [`ServerBuilder::backlog`] says otherwise (the
/// kernel caps it at `net.core.somaxconn`).
pub const DEFAULT_BACKLOG: i32 = 4096;

/// How long an idle epoll network loop keeps polling before it sleeps,
/// unless [`ServerBuilder::idle_spin`] says otherwise. Measured on the
/// cache and the echo service (2 cores, 8-120 connections, one request in
/// flight each): 30 µs roughly halves `symped:2`'s context switches per
/// request and raises its throughput by 1.3-2x; an idle server still
/// sleeps after it.
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(30);

/// [`DEFAULT_IDLE_SPIN`] for io_uring loops, whose sleep in the ring costs
/// more to wake from: on a 6.18 VM, with one client the 30 µs spin missed
/// the next request 0.65-0.75 times per transaction and 100 µs served
/// 2.2-2.5x the transactions/s (as epoll's), 1.00-1.05x from 8 clients up
/// (docs/results/models/spin-ab-60fd68b/).
pub const DEFAULT_IDLE_SPIN_URING: Duration = Duration::from_micros(100);

/// The idle spin a network loop on `io` gets unless told otherwise.
pub fn default_idle_spin(io: duality_rt::IoBackend) -> Duration {
    match io {
        duality_rt::IoBackend::Uring => DEFAULT_IDLE_SPIN_URING,
        duality_rt::IoBackend::Epoll => DEFAULT_IDLE_SPIN,
    }
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            name: "duality".into(),
            tcp: Vec::new(),
            unix: Vec::new(),
            model: Model::Symped {
                n: crate::model::cores(),
            },
            accept: AcceptPolicy::default(),
            balance: Balance::default(),
            max_conns: 1024,
            lingering: None,
            handoff_capacity: 1024,
            handoff: Handoff::Always,
            refusal: Vec::new(),
            long_poll: Some(Duration::from_millis(10)),
            thread_stack: 256 * 1024,
            faults: duality_rt::faults::default_faults(),
            idle_spin: None,
            payload_spin: crate::stage::DEFAULT_PAYLOAD_SPIN,
            backlog: DEFAULT_BACKLOG,
            unix_mode: None,
            reclaim_idle: false,
            receive_buffers: None,
            cpu_affinity: CpuAffinity::Off,
            loop_slice: None,
            after_bind: None,
        }
    }
}

impl ServerBuilder {
    /// A builder with defaults: `symped` on all cores, favor-active, 1024 connections.
    pub fn new() -> ServerBuilder {
        ServerBuilder::default()
    }
    /// Thread-name prefix.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    /// Listens on a TCP address (port 0 picks a free port; see [`Server::tcp_addrs`]).
    pub fn tcp(mut self, addr: SocketAddr) -> Self {
        self.tcp.push(addr);
        self
    }
    /// Listens on a Unix socket path.
    pub fn unix(mut self, path: impl Into<PathBuf>) -> Self {
        self.unix.push(path.into());
        self
    }
    /// The listen backlog of every listener (memcached's `-b`; default
    /// [`DEFAULT_BACKLOG`]): connections the kernel queues before they are
    /// accepted.
    pub fn backlog(mut self, backlog: i32) -> Self {
        self.backlog = backlog;
        self
    }
    /// The permission bits of the Unix sockets' files (memcached's `-a`,
    /// e.g. `0o700`: only this user may connect). `None`: whatever the
    /// umask gives.
    pub fn unix_mode(mut self, mode: Option<u32>) -> Self {
        self.unix_mode = mode;
        self
    }
    /// The threading model.
    pub fn model(mut self, model: Model) -> Self {
        self.model = model;
        self
    }
    /// How connections are spread over the network loops.
    pub fn balance(mut self, b: Balance) -> Self {
        self.balance = b;
        self
    }

    /// The accept policy.
    pub fn accept_policy(mut self, p: AcceptPolicy) -> Self {
        self.accept = p;
        self
    }
    /// Connections above this are refused (the refusal message is sent, then closed).
    pub fn max_conns(mut self, n: usize) -> Self {
        self.max_conns = n.max(1);
        self
    }
    /// At the connection limit, close the connections waiting longest
    /// between requests to make room for new ones, as nginx reuses its
    /// keep-alive connections (default: off, memcached's way: a connection
    /// over the limit is refused). Event-loop models only: a
    /// `thread-per-conn` connection blocks in its read and is not closed.
    pub fn reclaim_idle(mut self, on: bool) -> Self {
        self.reclaim_idle = on;
        self
    }
    /// Most refused connections lingered over at once (default:
    /// [`lingering_refusals`] of `max_conns`); past them a refusal is
    /// closed at once. For a descriptor limit that leaves fewer beside the
    /// connections' own; at least 1.
    pub fn lingering_refusals(mut self, n: usize) -> Self {
        self.lingering = Some(n.max(1));
        self
    }
    /// Whether the hand-off models hand every batch to a payload thread or
    /// only the batches that pay for it (see [`Handoff`]). Default: always.
    pub fn handoff(mut self, h: Handoff) -> Self {
        self.handoff = h;
        self
    }

    /// Bound of each payload thread's job queue (back-pressure above it).
    pub fn handoff_capacity(mut self, n: usize) -> Self {
        self.handoff_capacity = n.max(1);
        self
    }
    /// Bytes written to a connection refused by the limit, before closing it.
    pub fn refusal_message(mut self, msg: impl Into<Vec<u8>>) -> Self {
        self.refusal = msg.into();
        self
    }
    /// Faults the network loops inject into socket I/O (tests; default
    /// `DUALITY_FAULTS`, normally none). `thread-per-conn` connections, on
    /// blocking sockets, get none.
    pub fn faults(mut self, f: duality_rt::faults::Faults) -> Self {
        self.faults = f;
        self
    }

    /// Long-poll warning threshold for the loops.
    pub fn long_poll_threshold(mut self, t: Option<Duration>) -> Self {
        self.long_poll = t;
        self
    }
    /// How long an idle network loop keeps polling (yielding the core
    /// between looks) before it sleeps (`LoopConfig::idle_spin`): a loop
    /// whose next request arrives within it pays no sleep and wake-up.
    /// Zero: sleep at once. `None` (the default): [`default_idle_spin`] of
    /// the backend the loops will use.
    pub fn idle_spin(mut self, spin: impl Into<Option<Duration>>) -> Self {
        self.idle_spin = spin.into();
        self
    }

    /// How long an idle payload thread of a hand-off model keeps looking
    /// for jobs before it sleeps: a job arriving within it costs its
    /// network loop no wake-up. Zero: sleep at once. Default:
    /// [`DEFAULT_PAYLOAD_SPIN`](crate::DEFAULT_PAYLOAD_SPIN).
    pub fn payload_spin(mut self, spin: Duration) -> Self {
        self.payload_spin = spin;
        self
    }

    /// io_uring: each network loop's provided receive buffers, `count` of
    /// `size` bytes ([`LoopConfig::ring_buffers`] and `ring_buffer_size`;
    /// default the runtime's). Connections beyond `count` receiving at once
    /// wait a turn for a buffer; none fails for want of one.
    pub fn receive_buffers(mut self, count: u16, size: u32) -> Self {
        self.receive_buffers = Some((count, size));
        self
    }

    /// Which CPUs the network loops and payload threads are pinned to
    /// (default: off, the kernel places them). See [`CpuAffinity`].
    pub fn cpu_affinity(mut self, a: CpuAffinity) -> Self {
        self.cpu_affinity = a;
        self
    }

    /// The time slice every loop of the server (network loops, acceptor,
    /// payload threads) asks the kernel for (`LoopConfig::slice`): a woken
    /// loop preempts a thread with a longer one at once. `None` (the
    /// default): the slice the threads inherit, and
    /// [`duality_rt::RAISED_SLICE`] while a CPU pool runs raised out of the
    /// background class. On two cores shared with the load generator
    /// 100 µs moved the cache's `symped:2` between its two speeds (about
    /// 185 K and 255 K txn/s at 8 clients) in either direction from one
    /// minute to the next (docs/results/models/slice-ab-93f9598/), so it
    /// is not on by default.
    pub fn loop_slice(mut self, slice: Option<Duration>) -> Self {
        self.loop_slice = slice;
        self
    }

    /// Stack size of thread-per-conn connection threads.
    pub fn thread_stack(mut self, bytes: usize) -> Self {
        self.thread_stack = bytes.max(64 * 1024);
        self
    }

    /// Runs `f` once the listeners are bound and before any of the server's
    /// threads starts: where a server started as root to bind a low port
    /// takes another user's identity (nginx's `user`), so that no
    /// connection is ever served as root. An error stops the start.
    pub fn after_bind(mut self, f: impl FnOnce() -> io::Result<()> + Send + 'static) -> Self {
        self.after_bind = Some(Box::new(f));
        self
    }

    /// Binds the listeners and starts the model's threads. `handler` runs once
    /// per connection, as straight-line code.
    pub fn serve<H, F>(self, handler: H) -> io::Result<Server>
    where
        H: Fn(Conn, Payload) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        if self.tcp.is_empty() && self.unix.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a server needs at least one TCP address or Unix socket path",
            ));
        }
        let handler = Arc::new(handler);
        let h = handler.clone();
        let boxed: Arc<HandlerFn> = Arc::new(move |c, p| Box::pin(h(c, p)) as BoxFuture);
        let spawn: Arc<SpawnFn> = Arc::new(move |c, p| drop(duality_rt::spawn(handler(c, p))));
        start(self, boxed, spawn)
    }
}

/// A listening socket of a [`Server`], as `stats conns` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Its descriptor.
    pub fd: std::os::fd::RawFd,
    /// Where it listens.
    pub addr: ListenAddr,
}

/// The address of a [`Listener`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address (with the real port when 0 was asked for).
    Tcp(SocketAddr),
    /// A Unix socket path.
    Unix(PathBuf),
}

/// A listener bound before the threads start, so bind errors surface at once.
enum Bound {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// `reuse_port`: one of several listeners on the same address, one per
/// network loop, among which the kernel spreads connections.
fn bind_tcp(addr: SocketAddr, reuse_port: bool, backlog: i32) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // In use, tried again for up to half a second: a server killed a moment
    // ago (SIGKILL, then a restart at once) can keep its listener until the
    // kernel has torn its io_uring down.
    let mut tries = 0;
    while let Err(e) = socket.bind(&addr.into()) {
        tries += 1;
        if e.kind() != io::ErrorKind::AddrInUse || tries > 25 {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot listen on {addr}: {e}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Connects to the Unix socket at `path`, again for up to 200 ms while it
/// answers: a server killed a moment ago (SIGKILL, then a restart at once)
/// can leave its listener accepting until the kernel has torn its io_uring
/// down. Ok: something listens there. The connect does not block: a live
/// server that is stopped or hung, its backlog full, would keep a blocking
/// one (and this start, deaf to SIGTERM) waiting for ever; a full backlog
/// (EAGAIN) means a listener, so the path is in use unless it closes.
fn connect_settled(path: &Path) -> io::Result<()> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let addr = SockAddr::unix(path)?;
    for _ in 0..10 {
        let s = Socket::new(Domain::UNIX, Type::STREAM.nonblocking(), None)?;
        match s.connect(&addr) {
            Ok(()) => {}
            // A listener with a full backlog: tried again, as a connect
            // that succeeds (it may be a killed server's, closing).
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(e) => return Err(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The file at `path` (not following a link) as device and inode.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// `mode`: the socket file's permission bits, set before it listens (so no
/// client connects while the umask's bits hold).
fn bind_unix(
    path: &Path,
    backlog: i32,
    mode: Option<u32>,
) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        // A socket file nobody listens on is left over from a crash: replace
        // it. Anything else there (a file, a link, a directory) is someone's
        // data: refuse, as memcached does, rather than delete it.
        Ok(meta) if meta.file_type().is_socket() => {
            match connect_settled(path) {
                Ok(()) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{} is in use by another server", path.display()),
                    ))
                }
                // Refused: nobody listens. Another error (no permission to
                // connect, say) cannot tell, and a live server's socket
                // must not be taken from it.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    std::fs::remove_file(path)?
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "cannot listen on {}: a socket is there, and connecting to it to see \
                             whether it is stale failed ({e}): left as it is",
                            path.display()
                        ),
                    ))
                }
            }
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "cannot listen on {}: it exists and is not a socket (left as it is)",
                    path.display()
                ),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}", path.display()),
            ))
        }
    }
    let cannot = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {}: {e}", path.display()),
        )
    };
    let addr = socket2::SockAddr::unix(path).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot listen on {}: the path is {} bytes, more than a Unix socket address \
                 holds (107)",
                path.display(),
                path.as_os_str().len()
            ),
        )
    })?;
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.bind(&addr).map_err(cannot)?;
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(cannot)?;
    }
    socket.listen(backlog).map_err(cannot)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

struct Shared {
    model: Model,
    accept: AcceptPolicy,
    balance: Balance,
    max_conns: usize,
    refusal: Vec<u8>,
    /// Refused connections lingering now, and their bound.
    lingering: Arc<Lingering>,
    /// Counts and the shutdown signal, shared with every `Conn`.
    counter: Arc<ConnShared>,
    /// thread-per-conn: the handler, its future boxed (polled by the thread).
    handler: Arc<HandlerFn>,
    /// Event loops: spawns the handler's future as a task of its own.
    spawn_conn: Arc<SpawnFn>,
    payload: Payload,
    network: Vec<LoopHandle>,
    next_loop: AtomicUsize,
    thread_stack: usize,
    tpc_threads: AtomicU64,
    /// thread-per-conn: a thread that cannot be started is logged at most
    /// once a second (at the thread limit every new connection fails).
    spawn_failed: Mutex<duality_rt::time::LogEvery>,
    /// Name of thread-per-conn connection threads (`<name>-conn`).
    conn_thread_name: String,
    /// The listening sockets, in the order they were given.
    listeners: Vec<Listener>,
    /// Connections waiting for a slot at a full table (see `accept_loop`):
    /// a shutdown lets them be answered before the loops stop.
    waiting: AtomicUsize,
}

/// One connection waiting for a slot, counted off when its task ends or is
/// dropped.
struct Waiting(Arc<Shared>);

impl Waiting {
    fn new(shared: &Arc<Shared>) -> Waiting {
        shared.waiting.fetch_add(1, SeqCst);
        Waiting(shared.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, SeqCst);
    }
}

impl Shared {
    /// Whether every connection slot is taken.
    fn full(&self) -> bool {
        self.counter.live.load(SeqCst) >= self.max_conns
    }

    /// Knot-C: are the network loops (or loop `on`, which accepts for
    /// itself) too busy to take a new connection?
    fn loops_busy(&self, on: Option<usize>) -> bool {
        const BUSY_DEPTH: usize = 64;
        match on {
            Some(i) => self.network[i].load() > BUSY_DEPTH,
            None => !self.network.is_empty() && self.network.iter().all(|h| h.load() > BUSY_DEPTH),
        }
    }

    /// The network loop for a new connection, by the balance policy.
    fn pick_loop(&self) -> usize {
        let n = self.network.len();
        let start = self.next_loop.fetch_add(1, Relaxed) % n;
        if self.balance != Balance::LeastLoaded {
            return start;
        }
        (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| self.counter.loop_conns[i].load(Relaxed))
            .unwrap_or(start)
    }

    /// Refuses `a` with the server's message, counted.
    fn refuse(&self, a: Accepted) {
        self.counter.refused.fetch_add(1, Relaxed);
        a.refuse(&self.refusal, &self.lingering);
    }

    /// `accepted_at`: the start of the acceptor's poll that took `a`; `on`:
    /// the network loop that accepted it for itself (`SO_REUSEPORT`).
    fn dispatch(
        self: &Arc<Self>,
        a: Accepted,
        accepted_at: Option<duality_rt::stats::Stamp>,
        on: Option<usize>,
    ) {
        let live = self.counter.live.fetch_add(1, SeqCst);
        if live >= self.max_conns {
            self.counter.live.fetch_sub(1, SeqCst);
            self.refuse(a);
            return;
        }
        self.counter.total.fetch_add(1, Relaxed);
        let me = self.clone();
        if self.model == Model::ThreadPerConn {
            // The seeds' NPTL baseline: one OS thread with a small stack and
            // blocking socket I/O, one descriptor, and nothing an event loop
            // needs (no epoll, eventfd, event buffer or histogram). The
            // handler's future is polled by the thread itself, which parks
            // while it waits (a blocking socket never makes it wait).
            // The socket stays reachable here so that a thread that cannot
            // be started still gets a refusal, not a silent drop.
            let slot = Arc::new(Mutex::new(Some(a)));
            let theirs = slot.clone();
            let spawned = std::thread::Builder::new()
                .name(self.conn_thread_name.clone())
                .stack_size(self.thread_stack)
                .spawn(move || {
                    let a = theirs.lock().unwrap_or_else(|e| e.into_inner()).take();
                    drop(theirs);
                    let Some(a) = a else { return };
                    match Conn::blocking(a, me.counter.clone()) {
                        Ok(conn) => {
                            futures_lite::future::block_on((me.handler)(conn, me.payload.clone()))
                        }
                        Err(e) => {
                            me.counter.live.fetch_sub(1, SeqCst);
                            tracing::debug!("dropping a connection: {e}");
                        }
                    }
                });
            match spawned {
                Ok(_) => {
                    self.tpc_threads.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    self.counter.live.fetch_sub(1, SeqCst);
                    self.counter.refused.fetch_add(1, Relaxed);
                    let log = self
                        .spawn_failed
                        .lock()
                        .map(|mut l| l.check(Instant::now()));
                    match log.unwrap_or(Some(0)) {
                        Some(0) => tracing::warn!("cannot start a connection thread: {e}"),
                        Some(quiet) => tracing::warn!(
                            "cannot start a connection thread: {e} ({quiet} more since the last line)"
                        ),
                        None => {}
                    }
                    let a = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                    if let Some(a) = a {
                        a.refuse(&self.refusal, &self.lingering);
                    }
                }
            }
            return;
        }
        let i = on.unwrap_or_else(|| self.pick_loop());
        // Counted off when the `Conn` drops (its task ended or was
        // cancelled), or by `Conn::evented` if it cannot be made.
        self.counter.loop_conns[i].fetch_add(1, Relaxed);
        // A short task that registers the socket on the loop (it must run
        // there) and spawns the connection's own task beside it.
        drop(self.network[i].spawn(async move {
            if let Some(at) = accepted_at {
                duality_rt::stats::record_accept(at);
            }
            match Conn::evented(a, me.counter.clone(), i) {
                Ok(conn) => (me.spawn_conn)(conn, me.payload.clone()),
                Err(e) => {
                    me.counter.live.fetch_sub(1, SeqCst);
                    tracing::debug!("dropping a connection: {e}");
                }
            }
        }));
    }
}

/// `on`: the network loop this listener accepts for (`SO_REUSEPORT`), or
/// `None` for a listener shared by all loops.
async fn accept_loop(listener: Bound, shared: Arc<Shared>, on: Option<usize>) {
    enum L {
        Tcp(TcpListener),
        Unix(UnixListener),
    }
    let l = match listener {
        Bound::Tcp(l) => TcpListener::from_std(l).map(L::Tcp),
        Bound::Unix(l) => UnixListener::from_std(l).map(L::Unix),
    };
    let l = match l {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("acceptor cannot register its listener: {e}");
            return;
        }
    };
    // Failures are logged at most once a second (with how many were not):
    // at the descriptor limit accept fails every few milliseconds.
    let mut warned = duality_rt::time::LogEvery::default();
    loop {
        if shared.counter.shutdown.is_set() {
            return;
        }
        if shared.accept == AcceptPolicy::FavorActive {
            while shared.loops_busy(on) && !shared.counter.shutdown.is_set() {
                duality_rt::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let r = match &l {
            L::Tcp(l) => l.accept_std().await.map(|(s, _)| Accepted::Tcp(s)),
            L::Unix(l) => l.accept_std().await.map(Accepted::Unix),
        };
        match r {
            Ok(a) => {
                let accepted_at = duality_rt::stats::poll_started();
                if shared.full() {
                    // Where the server reclaims idle connections, some
                    // are told to close: the wait below takes a slot they
                    // free.
                    shared.counter.reclaim_idle();
                    // A client that closed a connection and opened another
                    // at once (a pool recycling one at the limit) finds its
                    // close not yet seen by the loop that held it: a slot
                    // is about to be free. The connection waits for it on
                    // a task of its own, so the acceptor goes on; waiting
                    // takes one of the lingering refusals' places (their
                    // descriptors are budgeted), so a flood past the limit
                    // finds them taken and is refused at once, not queued.
                    if let Some(place) = shared.lingering.take() {
                        let waiting = Waiting::new(&shared);
                        drop(duality_rt::spawn(wait_for_slot(
                            waiting,
                            place,
                            a,
                            accepted_at,
                            on,
                        )));
                        continue;
                    }
                }
                shared.dispatch(a, accepted_at, on)
            }
            // accept backs off by itself after EMFILE; log and go on.
            Err(e) => match warned.check(Instant::now()) {
                Some(0) => tracing::warn!("accept failed: {e}"),
                Some(quiet) => {
                    tracing::warn!("accept failed: {e} ({quiet} more since the last line)")
                }
                None => {}
            },
        }
    }
}

/// `a`, which found every slot taken, waits for one (at most
/// [`FULL_TABLE_WAIT`]) in the lingering refusal's `place` it holds, then
/// is dispatched.
async fn wait_for_slot(
    waiting: Waiting,
    place: LingerSlot,
    a: Accepted,
    accepted_at: Option<duality_rt::stats::Stamp>,
    on: Option<usize>,
) {
    let shared = &waiting.0;
    let until = Instant::now() + FULL_TABLE_WAIT;
    while shared.full() && Instant::now() < until && !shared.counter.shutdown.is_set() {
        duality_rt::time::sleep(Duration::from_millis(1)).await;
    }
    // Its refusal may linger in the place it held. At shutdown it is
    // refused even if the closes made room: admitted now it would be
    // closed with its request unread (a reset).
    drop(place);
    if shared.counter.shutdown.is_set() {
        shared.refuse(a);
    } else {
        shared.dispatch(a, accepted_at, on)
    }
    // `waiting` is counted off here, after the answer.
}

/// How long a connection that finds every slot taken waits for one to
/// free (a close the loop holding it has not seen yet) before it is
/// refused. A client closing and reopening a connection at once at `-c 8`
/// was refused 61-80 times in 200 without a wait (memcached: 6-25); most
/// closes are seen within 2 ms, but a loaded machine (CI's two cores
/// running tests side by side) delays the loop that must see it by tens of
/// milliseconds. At most as many connections wait at once as refusals may
/// linger (see [`lingering_refusals`]).
const FULL_TABLE_WAIT: Duration = Duration::from_millis(50);

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    acceptor: Option<LoopThread>,
    network: Vec<LoopThread>,
    stages: Vec<Arc<Stage>>,
    accept_tasks: Vec<duality_rt::JoinHandle<()>>,
    tcp_addrs: Vec<SocketAddr>,
    /// Unix socket paths and the socket files bound there.
    unix_paths: Vec<(PathBuf, Option<(u64, u64)>)>,
}

fn start(
    mut b: ServerBuilder,
    handler: Arc<HandlerFn>,
    spawn_conn: Arc<SpawnFn>,
) -> io::Result<Server> {
    let (n_network, n_payload) = match b.model {
        Model::Sped => (1, 0),
        Model::Amped { payload } => (1, payload),
        Model::Seda { network, payload } => (network, payload),
        Model::SedaS { n } => (n, n),
        Model::Symped { n } | Model::Steal { n } => (n, 0),
        Model::ThreadPerConn => (0, 0),
    };
    // With `SO_REUSEPORT`, each network loop gets a listener of its own on
    // every TCP address (the first binds the port, the others share it).
    let per_loop = b.balance == Balance::ReusePort && n_network > 1;
    // (listener, the network loop it accepts for)
    let mut bound: Vec<(Bound, Option<usize>)> = Vec::new();
    let mut tcp_addrs = Vec::new();
    let mut listen_addrs = Vec::new();
    for a in &b.tcp {
        let l = bind_tcp(*a, per_loop, b.backlog)?;
        let real = l.local_addr()?;
        tcp_addrs.push(real);
        listen_addrs.push(ListenAddr::Tcp(real));
        bound.push((Bound::Tcp(l), per_loop.then_some(0)));
        for i in 1..if per_loop { n_network } else { 1 } {
            listen_addrs.push(ListenAddr::Tcp(real));
            bound.push((Bound::Tcp(bind_tcp(real, true, b.backlog)?), Some(i)));
        }
    }
    let mut unix_paths = Vec::new();
    for p in &b.unix {
        bound.push((Bound::Unix(bind_unix(p, b.backlog, b.unix_mode)?), None));
        listen_addrs.push(ListenAddr::Unix(p.clone()));
        unix_paths.push((p.clone(), file_id(p)));
    }
    let listeners = bound
        .iter()
        .zip(listen_addrs)
        .map(|((l, _), addr)| {
            use std::os::fd::AsRawFd;
            let fd = match l {
                Bound::Tcp(l) => l.as_raw_fd(),
                Bound::Unix(l) => l.as_raw_fd(),
            };
            Listener { fd, addr }
        })
        .collect();
    if let Some(f) = b.after_bind.take() {
        f()?;
    }
    let defaults = LoopConfig::default();
    let (ring_buffers, ring_buffer_size) = b
        .receive_buffers
        .unwrap_or((defaults.ring_buffers, defaults.ring_buffer_size));
    let allowed = match b.cpu_affinity {
        CpuAffinity::Off => Vec::new(),
        _ => duality_rt::affinity::allowed_cpus()?,
    };
    // Every thread's CPU, checked before any thread starts.
    let cpus = (0..n_network.max(n_payload))
        .map(|i| b.cpu_affinity.cpu_for(i, &allowed))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let loop_config = |name: String, group: Option<Arc<WorkGroup>>| LoopConfig {
        name: Some(name),
        long_poll_threshold: b.long_poll,
        track_spawn_locations: true,
        work_group: group,
        faults: b.faults,
        idle_spin: b
            .idle_spin
            .unwrap_or_else(|| default_idle_spin(duality_rt::io_backend_in_use())),
        ring_buffers,
        ring_buffer_size,
        slice: b.loop_slice,
        ..Default::default()
    };
    let group = matches!(b.model, Model::Steal { .. }).then(WorkGroup::new);
    let mut network = Vec::new();
    for (i, &cpu) in cpus.iter().enumerate().take(n_network) {
        network.push(LoopThread::spawn(LoopConfig {
            cpu,
            ..loop_config(format!("{}-net-{i}", b.name), group.clone())
        })?);
    }
    let mut stages = Vec::new();
    for (i, &cpu) in cpus.iter().enumerate().take(n_payload) {
        stages.push(Stage::start(
            i,
            b.handoff_capacity,
            format!("{}-payload-{i}", b.name),
            b.payload_spin,
            cpu,
            b.loop_slice,
        )?);
    }
    let handles: Vec<LoopHandle> = network.iter().map(|l| l.handle()).collect();
    let dispatch = match b.model {
        Model::Sped => Dispatch::Inline(Lane::single()),
        Model::Symped { .. } | Model::Steal { .. } | Model::ThreadPerConn => {
            Dispatch::Inline(Lane::locked(ColorLocks::new()))
        }
        Model::Amped { .. } => Dispatch::Affinity(stages.clone()),
        Model::Seda { .. } => {
            Dispatch::RoundRobin(stages.clone(), Spread::new(), ColorLocks::new())
        }
        Model::SedaS { .. } => {
            let pairs: HashMap<u16, usize> = handles
                .iter()
                .enumerate()
                .map(|(i, h)| (h.id(), i))
                .collect();
            Dispatch::Paired(stages.clone(), pairs, ColorLocks::new())
        }
    };
    let shared = Arc::new(Shared {
        model: b.model,
        accept: b.accept,
        balance: b.balance,
        max_conns: b.max_conns,
        refusal: b.refusal,
        lingering: Lingering::new(
            b.lingering
                .unwrap_or_else(|| lingering_refusals(b.max_conns)),
        ),
        counter: Arc::new(ConnShared::new(handles.len(), b.reclaim_idle)),
        handler,
        spawn_conn,
        payload: Payload::new(dispatch, b.handoff, &handles),
        network: handles,
        next_loop: AtomicUsize::new(0),
        thread_stack: b.thread_stack,
        tpc_threads: AtomicU64::new(0),
        spawn_failed: Mutex::new(duality_rt::time::LogEvery::default()),
        conn_thread_name: format!("{}-conn", b.name),
        listeners,
        waiting: AtomicUsize::new(0),
    });
    // SPED accepts on its one loop; every other model has an acceptor thread.
    let acceptor = if b.model == Model::Sped {
        None
    } else {
        Some(LoopThread::spawn(loop_config(
            format!("{}-accept", b.name),
            None,
        ))?)
    };
    let accept_on = acceptor
        .as_ref()
        .map(|a| a.handle())
        .unwrap_or_else(|| network[0].handle());
    let accept_tasks = bound
        .into_iter()
        .map(|(l, on)| match on {
            Some(i) => network[i]
                .handle()
                .spawn(accept_loop(l, shared.clone(), on)),
            None => accept_on.spawn(accept_loop(l, shared.clone(), None)),
        })
        .collect();
    Ok(Server {
        shared,
        acceptor,
        network,
        stages,
        accept_tasks,
        tcp_addrs,
        unix_paths,
    })
}

/// What [`Server::shutdown`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Connections still open at the deadline (their tasks were cancelled).
    pub cut_off: usize,
}

impl Server {
    /// The bound TCP addresses (with the real port when 0 was asked for).
    pub fn tcp_addrs(&self) -> &[SocketAddr] {
        &self.tcp_addrs
    }

    /// The listening sockets: TCP ones first, then Unix ones.
    pub fn listeners(&self) -> &[Listener] {
        &self.shared.listeners
    }

    /// Spawns a background task (e.g. a periodic sweep) on the acceptor's
    /// loop (SPED: its one loop). It gets the server's [`Payload`], so its
    /// work runs where the model puts payload work, under color exclusivity.
    /// It is cancelled when the server shuts down.
    pub fn spawn_background<F, Fut>(&mut self, f: F)
    where
        F: FnOnce(Payload) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let fut = f(self.shared.payload.clone());
        let on = self
            .acceptor
            .as_ref()
            .map(|a| a.handle())
            .or_else(|| self.shared.network.first().copied());
        if let Some(h) = on {
            self.accept_tasks.push(h.spawn(fut));
        }
    }

    /// The model the server runs.
    pub fn model(&self) -> Model {
        self.shared.model
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.shared.counter.live.load(SeqCst)
    }

    /// The numbers of every thread.
    pub fn stats(&self) -> ServerStats {
        stats_of(
            &self.shared,
            self.acceptor.as_ref().map(|a| a.handle()),
            &self.stages,
        )
    }

    /// A cheap handle that can read stats while the server runs (e.g. from a
    /// `stats` command inside the handler).
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            shared: self.shared.clone(),
            acceptor: self.acceptor.as_ref().map(|a| a.handle()),
            stages: self.stages.clone(),
        }
    }

    /// Stops accepting, lets in-flight requests finish (idle connections see
    /// end-of-stream), waits up to `deadline` for connections to close, then
    /// stops every thread; connections still open are cut off.
    pub fn shutdown(self, deadline: Duration) -> ShutdownReport {
        self.shutdown_or(deadline, &AtomicBool::new(false))
    }

    /// [`Server::shutdown`], cut short when `now` becomes true (a second
    /// signal: the operator will not wait).
    pub fn shutdown_or(mut self, deadline: Duration, now: &AtomicBool) -> ShutdownReport {
        for t in self.accept_tasks.drain(..) {
            t.abort();
        }
        self.shared.counter.shutdown.trigger();
        let until = Instant::now() + deadline;
        // Connections waiting for a slot end their waits at the signal and
        // are answered (a refusal) before the loops stop.
        while (self.connections() > 0 || self.shared.waiting.load(SeqCst) > 0)
            && Instant::now() < until
            && !now.load(Relaxed)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        let cut_off = self.connections();
        self.stop_threads();
        ShutdownReport { cut_off }
    }

    fn stop_threads(&mut self) {
        // Every loop is asked first and joined after: each may linger for
        // what its closed sockets still had queued (io_uring), and those
        // waits overlap rather than add up, loop after loop.
        if let Some(a) = &mut self.acceptor {
            a.stop();
        }
        for l in &mut self.network {
            l.stop();
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for l in self.network.drain(..) {
            let _ = l.join();
        }
        for s in &self.stages {
            s.stop();
        }
        // Only the socket this server made: another server may have
        // replaced it since (after removing ours).
        for (p, id) in &self.unix_paths {
            if id.is_some() && file_id(p) == *id {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for t in self.accept_tasks.drain(..) {
            t.abort();
        }
        self.shared.counter.shutdown.trigger();
        self.stop_threads();
    }
}

/// Reads a server's stats from anywhere.
#[derive(Clone)]
pub struct StatsHandle {
    shared: Arc<Shared>,
    acceptor: Option<LoopHandle>,
    stages: Vec<Arc<Stage>>,
}

impl StatsHandle {
    /// (connections open now, connections accepted since start): two atomic
    /// loads, no per-thread snapshot.
    pub fn connections(&self) -> (usize, u64) {
        (
            self.shared.counter.live.load(SeqCst),
            self.shared.counter.total.load(Relaxed),
        )
    }

    /// Connections refused over the limit since start (one atomic load).
    pub fn rejected(&self) -> u64 {
        self.shared.counter.refused.load(Relaxed)
    }

    /// (bytes read, bytes written) by all connections, summed over the
    /// loops' counters.
    pub fn bytes(&self) -> (u64, u64) {
        self.shared.counter.bytes()
    }

    /// See [`Server::stats`].
    pub fn stats(&self) -> ServerStats {
        stats_of(&self.shared, self.acceptor, &self.stages)
    }

    /// Every loop of the server with its role: the acceptor's (if it has
    /// its own), the network loops, the payload loops.
    pub fn loops(&self) -> Vec<(ThreadRole, LoopHandle)> {
        let mut v = Vec::new();
        if let Some(a) = self.acceptor {
            v.push((ThreadRole::Acceptor, a));
        }
        v.extend(
            self.shared
                .network
                .iter()
                .map(|h| (ThreadRole::Network, *h)),
        );
        v.extend(self.stages.iter().map(|s| (ThreadRole::Payload, s.handle)));
        v
    }

    /// The per-request metrics of every loop, merged (loop hold, time to
    /// first byte, accept latency). Connections of `thread-per-conn` run on
    /// no loop and are not recorded.
    pub fn request_metrics(&self) -> duality_rt::stats::RequestMetrics {
        let mut m = duality_rt::stats::RequestMetrics::default();
        for (_, h) in self.loops() {
            m.add(&h.request_metrics());
        }
        m
    }

    /// Times a connection yielded its loop with requests still to serve,
    /// summed over the loops (see `RequestMetrics::yields`).
    pub fn request_yields(&self) -> u64 {
        self.loops().iter().map(|(_, h)| h.request_yields()).sum()
    }

    /// Forgets the per-request metrics of every loop (`stats reset`).
    pub fn reset_request_metrics(&self) {
        for (_, h) in self.loops() {
            h.reset_request_metrics();
        }
    }

    /// See [`Server::listeners`].
    pub fn listeners(&self) -> &[Listener] {
        &self.shared.listeners
    }
}

fn stats_of(shared: &Shared, acceptor: Option<LoopHandle>, stages: &[Arc<Stage>]) -> ServerStats {
    let mut threads = Vec::new();
    if let Some(a) = acceptor {
        threads.push(loop_thread_stats(ThreadRole::Acceptor, &a));
    }
    for (h, open) in shared.network.iter().zip(shared.counter.loop_conns.iter()) {
        let mut t = loop_thread_stats(ThreadRole::Network, h);
        t.connections = open.load(Relaxed);
        threads.push(t);
    }
    for s in stages {
        threads.push(s.stats());
    }
    ServerStats {
        model: shared.model.to_string(),
        balance: shared.balance.to_string(),
        curr_connections: shared.counter.live.load(SeqCst),
        total_connections: shared.counter.total.load(Relaxed),
        rejected_connections: shared.counter.refused.load(Relaxed),
        reclaimed_connections: shared.counter.reclaimed.load(Relaxed),
        threads,
        handoff: shared.payload.handoff_stats(),
        color_locks: shared.payload.color_locks_taken(),
    }
}

#[cfg(test)]
mod tests {
    use super::bind_unix;

    #[test]
    fn a_unix_path_that_is_not_a_stale_socket_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("duality-bind-unix-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A regular file, and a link to it: refused, both intact.
        let file = dir.join("data");
        std::fs::write(&file, b"precious").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        for p in [&file, &link, &dir] {
            let e = bind_unix(p, 16, None).expect_err("bound over something not a socket");
            assert!(e.to_string().contains("not a socket"), "{e}");
            assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        }
        assert_eq!(std::fs::read(&link).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        // A live socket: refused; a stale one (its listener gone): replaced.
        let sock = dir.join("s.sock");
        let live = bind_unix(&sock, 16, None).unwrap();
        let e = bind_unix(&sock, 16, None).expect_err("bound over a live socket");
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        drop(live);
        assert!(sock.exists(), "a dropped listener leaves its file");
        bind_unix(&sock, 16, None).expect("a stale socket is replaced");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The hook runs with the listeners bound (it can connect), before the
    /// server runs; its error stops the start and is the start's error.
    #[test]
    fn after_bind_runs_once_bound_and_its_error_stops_the_start() {
        use super::ServerBuilder;
        use crate::Model;
        let dir = std::env::temp_dir().join(format!("duality-after-bind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("a.sock");
        let p = sock.clone();
        let server = ServerBuilder::new()
            .model(Model::Sped)
            .unix(&sock)
            .after_bind(move || std::os::unix::net::UnixStream::connect(&p).map(drop))
            .serve(|_c, _p| async {})
            .expect("the hook connected to the bound listener");
        server.shutdown(std::time::Duration::ZERO);
        let e = ServerBuilder::new()
            .model(Model::Sped)
            .unix(dir.join("b.sock"))
            .after_bind(|| Err(std::io::Error::other("refused by the hook")))
            .serve(|_c, _p| async {})
            .err()
            .expect("the hook's error stops the start");
        assert!(e.to_string().contains("refused by the hook"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_unix_socket_takes_the_mode_asked_for() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("duality-unix-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for mode in [0o700, 0o766, 0o600] {
            let sock = dir.join(format!("{mode:o}.sock"));
            let _l = bind_unix(&sock, 16, Some(mode)).unwrap();
            let got = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
            assert_eq!(got, mode, "{sock:?}");
            std::os::unix::net::UnixStream::connect(&sock).expect("it listens");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
