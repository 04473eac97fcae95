//! # duality-rt — the runtime core
//!
//! Threads and events are one model (Lauer and Needham's duality): each
//! connection is written as straight-line `async fn` code, and an event-driven
//! scheduler underneath decides where every piece of it runs.
//!
//! The layers, bottom up (the project's DESIGN.md describes them at length):
//!
//! | module | layer |
//! |---|---|
//! | `reactor` (private) | readiness through `mio` (epoll), cross-thread wake-ups through its eventfd |
//! | `uring` (private) | the io_uring backend: multishot receives into provided buffers, sends and accepts batched per turn |
//! | [`event_loop`] | one loop per OS thread: local run queue, hand-off queue, reactor, timers |
//! | [`coop`] | the per-poll I/O budget: a task whose socket is always ready yields after its share |
//! | [`task`] | `spawn`, `JoinHandle`, `yield_now`; tasks are a few words plus the future |
//! | [`time`] | `sleep`, `timeout` over a hierarchical timer wheel |
//! | [`fs`] | file reads that never block a loop (through the ring on io_uring loops) |
//! | [`net`] | thread-style `TcpListener`/`TcpStream`/`UnixListener`/`UnixStream` |
//! | [`sync`] | task-aware `Mutex`, `Semaphore`, `oneshot`, bounded `mpsc` |
//! | [`adaptive`] | where a heavy job runs: inline, on the CPU pool, or wherever its class has been cheaper |
//! | [`pool`] | `spawn_blocking` for blocking calls, `offload` for CPU-heavy work |
//! | [`stats`] | per-loop introspection snapshots |
//! | [`affinity`] | the CPUs a process may use; pinning a loop's thread to one |
//!
//! `unsafe` lives in `task` (`raw`, `waker`, `queue`, `join`), the waker
//! slot (`waker_slot`), `uring` (the ring's submissions and provided
//! buffers), the loops' registry and thread context, `net` (a descriptor
//! changing owners, a `poll(2)`), and system calls
//! in `time` (`clock_gettime`), `stats` (`gettid`, `getrusage`) and
//! `priority` (the pool threads' nice value and scheduling class) and
//! `affinity` (`sched_getaffinity`/`sched_setaffinity`) only;
//! every block there says why it holds.
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

pub(crate) mod loom;

/// `eprintln!` that never panics. A server's log line to a closed pipe or a
/// hung-up terminal is dropped: Rust ignores SIGPIPE, so the write fails,
/// and `eprintln!` turns a failed write into a panic (a lost cache with
/// `-e`, a web server killed by an ssh logout).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that never panics (see [`say!`]): a `ready` line to a closed
/// stdout is dropped.
#[macro_export]
macro_rules! say_out {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let mut out = ::std::io::stdout().lock();
        let _ = ::std::writeln!(out, $($arg)*).and_then(|()| out.flush());
    }};
}

pub mod adaptive;
pub mod affinity;
pub mod coop;

mod backend;
pub mod event_loop;
pub mod faults;
pub mod fs;
pub mod gen_table;
pub mod net;
pub mod pool;
mod priority;
pub(crate) mod reactor;
pub mod stats;
pub mod sync;
pub mod task;
pub mod time;
pub(crate) mod uring;
mod waker_slot;

pub use backend::{
    default_io_backend, io_backend_in_use, set_default_io_backend, uring_unavailable, IoBackend,
};
pub use event_loop::{
    block_on, set_default_idle_hook, EventLoop, LoopConfig, LoopHandle, LoopThread, RemoteWait,
    WorkGroup, IDLE_HOOK_EVERY, IDLE_HOOK_QUIET, RAISED_SLICE,
};
pub use gen_table::GenTable;
pub use pool::{offload, spawn_blocking};
pub use task::{spawn, spawn_on, yield_now, JoinError, JoinHandle};
