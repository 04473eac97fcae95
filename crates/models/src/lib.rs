//! # duality-models — one server, seven mappings onto threads
//!
//! A server is three code paths — **accept**, **network** (read, frame,
//! write) and **payload** (parse, execute, build the response). The handler is
//! one `async fn(conn, payload)` written in thread style; the [`Model`] chosen
//! at start-up maps the three paths onto OS threads (seed 001, Table I):
//!
//! ```text
//! sped            [accept + network + payload]                       one thread
//! amped:P         [accept] → [network] ⇄ [payload]×P                 payload by color
//! seda:N:P        [accept] → [network]×N ⇄ [payload]×P               jobs in turn, a color after its own
//! seda-s:N        [accept] → [network_i ⇄ payload_i]×N               fixed pairs
//! symped:N        [accept] → [network + payload]×N                   inline
//! thread-per-conn [accept] → [one OS thread per connection]          blocking I/O
//! steal:N         [accept] → [network + payload]×N ⇄ share ready tasks
//! ```
//!
//! A server is a [`Protocol`] served by one generic connection driver
//! ([`session`]); where payload work runs and how colors stay exclusive is
//! in [`payload`]; a hand-off, and how it is kept cheap, in `stage.rs`.
#![warn(missing_docs)]

mod conn;
pub mod echo;
pub mod flood;
mod loom;
pub mod metrics;
mod model;
pub mod payload;
mod server;
pub mod session;
mod stage;
mod stats;

pub use conn::Conn;
pub use model::{cores, AcceptPolicy, Balance, CpuAffinity, Model, ParseModelError, MODEL_NAMES};
pub use payload::{Handoff, Held, Lane, Payload, DEFAULT_COLOR};
pub use server::{
    default_idle_spin, lingering_refusals, ListenAddr, Listener, Server, ServerBuilder,
    ShutdownReport, StatsHandle, DEFAULT_BACKLOG, DEFAULT_IDLE_SPIN, DEFAULT_IDLE_SPIN_URING,
};
pub use session::{
    drive, Driver, DriverConfig, Flow, Linger, Output, Parsed, Protocol, Reply, Timeout,
    LOOK_AHEAD_EVERY,
};
pub use stage::DEFAULT_PAYLOAD_SPIN;
pub use stats::{HandoffStats, ServerStats, ThreadRole, ThreadStats};
