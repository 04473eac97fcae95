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
//! seda:N:P        [accept] → [network]×N ⇄ [payload]×P               jobs round-robin
//! seda-s:N        [accept] → [network_i ⇄ payload_i]×N               fixed pairs
//! symped:N        [accept] → [network + payload]×N                   inline
//! thread-per-conn [accept] → [one OS thread per connection]          blocking I/O
//! steal:N         [accept] → [network + payload]×N ⇄ share ready tasks
//! ```
//!
//! Where payload work runs and how colors stay exclusive is in [`payload`];
//! the cost of a hand-off, and how it is kept low, in `stage.rs`.
#![warn(missing_docs)]

mod conn;
pub mod echo;
mod model;
pub mod payload;
mod server;
mod stage;
mod stats;

pub use conn::Conn;
pub use model::{cores, AcceptPolicy, Model, ParseModelError, MODEL_NAMES};
pub use payload::{Call, Payload, DEFAULT_COLOR};
pub use server::{Server, ServerBuilder, ShutdownReport, StatsHandle};
pub use stats::{ServerStats, ThreadRole, ThreadStats};
