//! # duality-rt — the runtime core
//!
//! Threads and events are one model (Lauer and Needham's duality): each
//! connection is written as straight-line `async fn` code, and an event-driven
//! scheduler underneath decides where every piece of it runs.
//!
//! The layers, bottom up (see `../shared/DESIGN.md`):
//!
//! | module | layer |
//! |---|---|
//! | [`reactor`] (private) | readiness through `mio` (epoll), cross-thread wake-ups through its waker |
//! | [`event_loop`] | one loop per OS thread: local run queue, hand-off queue, reactor, timers |
//! | [`coop`] | the per-poll I/O budget: a task whose socket is always ready yields after its share |
//! | [`task`] | `spawn`, `JoinHandle`, `yield_now`; tasks are a few words plus the future |
//! | [`time`] | `sleep`, `timeout` over a hierarchical timer wheel |
//! | [`net`] | thread-style `TcpListener`/`TcpStream`/`UnixListener`/`UnixStream` |
//! | [`sync`] | task-aware `Mutex`, `Semaphore`, `oneshot`, bounded `mpsc` |
//! | [`pool`] | `spawn_blocking` for blocking calls, `offload` for CPU-heavy work |
//! | [`stats`] | per-loop introspection snapshots |
//!
//! `unsafe` lives in `task::raw`, `task::waker` and `task::queue` only; every
//! block there says why it holds.
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

pub(crate) mod loom;

pub mod coop;

pub mod event_loop;
pub mod net;
pub mod pool;
pub(crate) mod reactor;
pub mod stats;
pub mod sync;
pub mod task;
pub mod time;

pub use event_loop::{
    block_on, EventLoop, LoopConfig, LoopHandle, LoopThread, RemoteWait, WorkGroup,
};
pub use pool::{offload, spawn_blocking};
pub use task::{spawn, spawn_on, yield_now, JoinError, JoinHandle};
