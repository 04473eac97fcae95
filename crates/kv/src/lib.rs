//! # duality-kv — the cache's protocol and store
//!
//! A memcached-compatible cache without the networking: the server crate reads
//! bytes from sockets, hands them to this crate, and writes back what it gets.
//! Below [`server`], nothing here is async, spawns threads or reads a clock
//! (but the timestamps of [`watch`]'s lines): callers pass the time.
//!
//! | module | what it does |
//! |---|---|
//! | [`protocol`] | [`parse`]: bytes → one [`Request`] (borrowing the buffer) + bytes used; [`Request::encode`]: the way back; [`parse_binary`] / [`BinRequest::encode`]: the same for the binary protocol |
//! | [`store`] | [`Store`]: sharded hash tables with LRU eviction under a memory limit, expiry, CAS, counters |
//! | [`command`] | [`execute`] / [`execute_binary`]: a request against the store → memcached's exact response bytes |
//! | [`watch`] | memcached's `watch` log streams: lines of lookups, stores, evictions and connections for the clients that watch |
//!
//! The text protocol is complete (`set add replace append prepend cas get gets
//! gat gats delete incr decr touch flush_all version verbosity stats quit
//! shutdown cache_memlimit lru_crawler`, with `noreply`; `stats` with the
//! groups `settings items slabs sizes conns detail cachedump reset`, the
//! per-class ones over memcached's size-class ladder: see
//! [`store::classes`]), and so are the meta commands `mg ms md ma mn me` with
//! their flags (base64 keys, opaque tokens, quiet mode, `ms` modes, `ma`
//! auto-vivify, stale invalidation and recache tokens). So is the binary
//! protocol as memcached 1.6 speaks it ([`protocol::binary`]: every opcode
//! with its quiet form, CAS, memcached's status codes and error bodies),
//! chosen per connection on its first byte as memcached does (`0x80`:
//! binary, anything else: text); `tests/kv_binary.rs` compares it byte for
//! byte with memcached.
//!
//! ## How a server uses it
//!
//! One connection keeps a read buffer and an output buffer; each time bytes
//! arrive it runs this loop (the *network* stage parses, the *payload* stage
//! executes — inline or on a payload thread, colored by [`request_shard`]):
//!
//! ```
//! use duality_kv::{execute, execute_error, parse, Flow, Limits, ParseError, SimpleContext, Store, StoreConfig};
//!
//! let store = Store::new(StoreConfig::new(64 << 20));
//! let limits = Limits::default();
//! let ctx = SimpleContext::at(1_700_000_000);
//! let mut rbuf: Vec<u8> = b"set k 0 0 2\r\nhi\r\nget k\r\n".to_vec();
//! let mut out = Vec::new();
//! let mut swallow = 0; // bytes still to discard after an error
//! let mut close = false;
//! loop {
//!     let skip = swallow.min(rbuf.len());
//!     rbuf.drain(..skip);
//!     swallow -= skip;
//!     if swallow > 0 {
//!         break; // read more, keep discarding
//!     }
//!     match parse(&rbuf, &limits) {
//!         Ok((req, used)) => {
//!             close = execute(&req, &store, &ctx, &mut out) == Flow::Close;
//!             rbuf.drain(..used);
//!         }
//!         Err(ParseError::Incomplete) => break, // write `out`, read more
//!         Err(e) => {
//!             close = execute_error(&e, &store, &ctx, &mut out) == Flow::Close;
//!             swallow = e.consumed().unwrap_or(0); // may exceed what is buffered
//!         }
//!     }
//!     if close {
//!         break; // write `out`, then close
//!     }
//! }
//! assert_eq!(out, b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n");
//! ```
//!
//! A storage command whose item (as memcached counts it: [`protocol::item_size`])
//! exceeds [`Limits::max_item_size`] is refused
//! from its command line alone ([`ParseError::TooLarge`]): the server answers
//! and discards the value as it arrives without ever buffering it. A line with
//! no end within the limit is [`ParseError::LineTooLong`]: close without an
//! answer, as memcached does (a line whose end has arrived is parsed whatever
//! its length, also as memcached does). `tests/kv_compat.rs` compares these
//! edges of the text protocol byte for byte with memcached.
//!
//! ## Memory accounting
//!
//! Items live in the store's own segments (anonymous mappings, see
//! [`store`]): a 32-byte header ([`ITEM_OVERHEAD`]), the key and the value,
//! 8-byte aligned, plus a 4-byte hash-table entry. The limit is split evenly
//! over the shards and counts **everything the store allocates**: segments
//! and hash tables. A shard frees a segment (cleaning a mostly dead one, or
//! evicting the oldest with a second chance for items read since) before it
//! would exceed its share, so no mix of sizes, expiries or deletes can take
//! the store past `limit_maxbytes` (`stats bytes` is the live items' header,
//! key and value; `stats slabs` `total_malloced` what the store holds).
//! `cache_memlimit` changes the limit live ([`Store::set_max_bytes`]):
//! lowered, every shard frees segments down to its new share at once. The
//! parse and read buffers are the server's, not counted.
//!
//! **Resident memory (RSS) is the limit plus the idle process** — code,
//! thread stacks, the runtime, connection buffers: 11–18 MiB for an idle
//! server, release or debug build. `duality bench store` writes waves of one
//! size at a time (100 KB, 1 KB, 300 KB, 500 B, 50 KB, 100 B, 200 KB, 2 KB)
//! at `-m 16` and reports RSS after each (`docs/results/store`);
//! `tests/kv_limits.rs` checks `peak RSS ≤ limit + 32 MiB` (`-m 16`, 64 MiB
//! of 1–8 KB values written). Plan a node's memory as `-m` + 32 MiB.
//!
//! ## Locks and colors
//!
//! Each shard has a `std::sync::Mutex`. The server runs each request as a
//! payload job colored with [`request_shard`] (the key's [`Store::shard_of`]),
//! and two jobs of one color never run at once, so a shard's lock is never
//! contended: it costs one uncontended atomic exchange. Requests spanning
//! shards (multi-key `get`, `stats`, `flush_all`) take each shard's lock in
//! turn and never hold two, so there is no lock order and no deadlock. Shard
//! counters are plain per-shard atomics written under the shard's lock;
//! `stats` reads them without locking. [`Store::sweep_shard`] lets a
//! background job reclaim expired items under the shard's own color.
#![warn(missing_docs)]
// Unsafe only where the store maps its memory (`store::memfile`,
// `store::block`).
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod auth;
mod base64;
pub mod budget;
pub mod command;
mod num;
pub mod protocol;
pub mod sasl;
pub mod server;
pub mod store;
pub mod watch;

pub use command::{
    binary_request_shard, execute, execute_binary, execute_binary_error, execute_binary_staged,
    execute_error, execute_staged, request_shard, write_stat, ExecContext, Flow, ServerStats,
    SimpleContext, DEFAULT_VERSION,
};
pub use protocol::{
    parse, parse_binary, parse_binary_head, parse_value_head, request_ahead, Ahead, ArithOp,
    BinError, BinRequest, BinaryHead, Cursor, Extras, FlushDelay, Limits, MetaFlags, MetaSetHead,
    Opcode, ParseError, Request, Status, StoreCommand, StoreHead, Tokens, ValueHead,
    KEY_MAX_LENGTH,
};
pub use store::{
    expiry, Counter, Entry, Footprint, Item, Lookup, Staged, Stats, Store, StoreConfig, Time,
    ITEM_OVERHEAD,
};
