//! The door through which this crate's own cross-thread handshake reaches
//! its atomics and its lock.
//!
//! The shutdown signal (`conn::ShutdownSignal`) meets blocking handlers in a
//! Dekker pair of flags and tasks in a registry under a lock; a lone network
//! loop counts the colored jobs it has out on payload threads
//! (`payload::Away`). Under `--cfg loom` those are loom's, so
//! `conn::loom_tests` and `payload::loom_tests` model-check them with the
//! real code:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p duality-models --release --lib -- loom_tests`
//! (run by `.ci/run` beside the runtime's models). Everything else this
//! crate shares across threads is a counter or a lock-protected table, or is
//! built from `duality-rt`'s parts, model-checked there. Outside loom these
//! are the `std` types at zero cost.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool, AtomicUsize},
    Mutex,
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicUsize},
    Mutex,
};
