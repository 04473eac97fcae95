//! The colors experiment's service: a compute-bound server in the spirit of
//! the SFS file server (seed 003 §4), whose load is cryptography.
//!
//! A client asks for a block of a file the server holds in memory (SFS's
//! 200 MB file in the buffer cache; here 1 MiB); the server copies the block
//! into the client's own buffer, encrypts it with the client's key under a
//! fresh nonce (ChaCha20, a stream cipher) and authenticates it (Poly1305, a
//! MAC), and answers with the tag and the nonce's sequence number. The
//! answer is short, so the network is not the load: the cipher is.
//!
//! # Wire format (little-endian)
//!
//! ```text
//! request, 16 bytes:   op u8 | 3 zero bytes | client u32 | arg u64
//!   SEAL   (1)  arg = index u32 | len u32     color: the client's
//!   LEDGER (2)  arg = seals to add to the      color: DEFAULT_COLOR
//!               client's entry (0: just read)
//!   AUDIT  (3)  arg unused                     color: the client's
//! response, 24 bytes:
//!   SEAL    tag (16 bytes) | counter u64       (the nonce's sequence number)
//!   LEDGER  the client's entry | total u64 | updates u64
//!   AUDIT   counter u64 | violations u64 | 0
//! ```
//!
//! A malformed request (unknown op, a client past the table, a block length
//! of 0 or more than the file) closes the connection.
//!
//! # State, and who may touch it
//!
//! - **Per-client state** (key, nonce counter, block buffer): touched only
//!   by SEAL and AUDIT, which have the client's color ([`client_color`]).
//!   A client may have several connections, so two of its requests can
//!   arrive at once on two loops: the color, not the connection, keeps them
//!   apart. The nonce is `client u32 | counter u64`: a counter used twice
//!   would reuse a nonce under one key (the stream cipher's keystream twice)
//!   — exactly what a data race on the counter would do.
//! - **Shared state** (the [`Ledger`]: each client's reported seals, their
//!   total, the number of updates): touched only by LEDGER, which has
//!   [`DEFAULT_COLOR`], so all LEDGER requests of all clients are
//!   serialised, as SFS's lease and user tables are.
//!
//! Each piece of state sits behind a `Mutex` that is a *witness*, not a
//! lock: under every model the colors already keep its jobs apart, so
//! [`ColorService`] only ever `try_lock`s it. A lock found held is a color
//! violation: it is counted (AUDIT reports it, and the experiment fails the
//! run) and then waited out, so the state stays right.
//!
//! After a run the load generator checks, per client, that the nonces it
//! was sent are exactly `1..=counter` (none reused, none lost), that the
//! ledger's entry equals the counter, and per server that the entries add
//! up to the ledger's total and no violation was seen
//! ([`super::audit`]).
//!
//! [`LockedService`] is the conventional threaded peer (the same server on
//! tokio): no colors, every client's counter and the ledger behind one
//! mutex, taken once per request and never held across the cryptography.
//!
//! The keys and the file are derived from a seed and the client's number
//! ([`client_key`], [`file()`]) so that the load generator can check a sample
//! of tags without asking: the cryptography is the load, not the product.

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use duality_models::{Flow, Output, Parsed, Protocol, DEFAULT_COLOR};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, TryLockError};

/// Bytes in one request.
pub const REQUEST: usize = 16;
/// Bytes in one response.
pub const RESPONSE: usize = 24;
/// Bytes of the file blocks are cut from (the largest block).
pub const FILE_BYTES: usize = 1 << 20;
/// The seed the servers and the load generator share.
pub const SEED: u64 = 0x5f5_c0105;

const OP_SEAL: u8 = 1;
const OP_LEDGER: u8 = 2;
const OP_AUDIT: u8 = 3;

/// One request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Encrypt and authenticate block `index` (of `len` bytes) for `client`.
    Seal {
        /// The client.
        client: u32,
        /// Which block (taken modulo the blocks of that length in the file).
        index: u32,
        /// Block length, 1 to [`FILE_BYTES`].
        len: u32,
    },
    /// Add `seals` to `client`'s entry in the shared ledger.
    Ledger {
        /// The client.
        client: u32,
        /// Seals to add (0: read only).
        seals: u64,
    },
    /// Read `client`'s nonce counter and the violations seen.
    Audit {
        /// The client.
        client: u32,
    },
}

impl Request {
    /// The client the request names.
    pub fn client(&self) -> u32 {
        match *self {
            Request::Seal { client, .. }
            | Request::Ledger { client, .. }
            | Request::Audit { client } => client,
        }
    }

    /// Its color: the client's, but the ledger's shared state is
    /// [`DEFAULT_COLOR`].
    pub fn color(&self) -> u64 {
        match self {
            Request::Ledger { .. } => DEFAULT_COLOR,
            r => client_color(r.client()),
        }
    }

    /// The 16 bytes on the wire.
    pub fn encode(&self) -> [u8; REQUEST] {
        let (op, client, arg) = match *self {
            Request::Seal { client, index, len } => {
                (OP_SEAL, client, u64::from(index) | (u64::from(len) << 32))
            }
            Request::Ledger { client, seals } => (OP_LEDGER, client, seals),
            Request::Audit { client } => (OP_AUDIT, client, 0),
        };
        let mut f = [0u8; REQUEST];
        f[0] = op;
        f[4..8].copy_from_slice(&client.to_le_bytes());
        f[8..].copy_from_slice(&arg.to_le_bytes());
        f
    }

    /// Decodes 16 bytes; `None` for an unknown op or a SEAL whose length
    /// is 0 or more than [`FILE_BYTES`].
    pub fn decode(f: &[u8; REQUEST]) -> Option<Request> {
        let client = u32::from_le_bytes(f[4..8].try_into().expect("4 bytes"));
        let arg = u64::from_le_bytes(f[8..].try_into().expect("8 bytes"));
        match f[0] {
            OP_SEAL => {
                let (index, len) = (arg as u32, (arg >> 32) as u32);
                (len >= 1 && len as usize <= FILE_BYTES).then_some(Request::Seal {
                    client,
                    index,
                    len,
                })
            }
            OP_LEDGER => Some(Request::Ledger { client, seals: arg }),
            OP_AUDIT => Some(Request::Audit { client }),
            _ => None,
        }
    }
}

/// The color of `client`'s own state (never [`DEFAULT_COLOR`]).
pub fn client_color(client: u32) -> u64 {
    u64::from(client) + 1
}

/// A response as three words (a SEAL's tag is the first two).
pub fn response_words(f: &[u8]) -> [u64; 3] {
    let w = |i: usize| u64::from_le_bytes(f[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    [w(0), w(1), w(2)]
}

/// `client`'s key: reproducible from the seed, so that the load generator
/// can check a sample of tags (not a key schedule: the cipher is the load).
pub fn client_key(seed: u64, client: u32) -> [u8; 32] {
    let mut k = [0u8; 32];
    fastrand::Rng::with_seed(seed ^ u64::from(client).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .fill(&mut k);
    k
}

/// The file blocks are cut from: [`FILE_BYTES`] pseudo-random bytes.
pub fn file(seed: u64) -> Box<[u8]> {
    let mut f = vec![0u8; FILE_BYTES];
    fastrand::Rng::with_seed(seed).fill(&mut f);
    f.into_boxed_slice()
}

/// Block `index` of length `len` (`index` modulo the file's blocks).
pub fn block(file: &[u8], index: u32, len: u32) -> &[u8] {
    let len = (len as usize).clamp(1, file.len());
    let at = (index as usize % (file.len() / len)) * len;
    &file[at..at + len]
}

/// Encrypts `buf` in place with `key` under the nonce `client | counter`
/// and returns the tag that authenticates it.
pub fn seal(key: &[u8; 32], client: u32, counter: u64, buf: &mut [u8]) -> [u8; 16] {
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&client.to_le_bytes());
    nonce[4..].copy_from_slice(&counter.to_le_bytes());
    ChaCha20Poly1305::new(Key::from_slice(key))
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), b"", buf)
        .expect("a block is far below the cipher's length limit")
        .into()
}

/// The tag the server must answer to the `counter`-th seal of block
/// `index` for `client` (what the load generator checks on a sample).
pub fn expected_tag(
    seed: u64,
    file: &[u8],
    client: u32,
    counter: u64,
    index: u32,
    len: u32,
) -> [u8; 16] {
    let mut b = block(file, index, len).to_vec();
    seal(&client_key(seed, client), client, counter, &mut b)
}

/// The shared state: what each client reported, and the sum.
#[derive(Debug, Default)]
pub struct Ledger {
    per_client: Vec<u64>,
    total: u64,
    updates: u64,
}

impl Ledger {
    fn new(clients: usize) -> Ledger {
        Ledger {
            per_client: vec![0; clients],
            total: 0,
            updates: 0,
        }
    }

    /// Adds `seals` to `client`'s entry and to the total; returns the
    /// LEDGER response's words.
    fn record(&mut self, client: u32, seals: u64) -> [u64; 3] {
        let e = &mut self.per_client[client as usize];
        *e += seals;
        self.total += seals;
        self.updates += 1;
        [*e, self.total, self.updates]
    }
}

/// One client's own state, under its color.
struct ClientState {
    key: [u8; 32],
    /// Seals done: the last nonce's sequence number.
    counter: u64,
    /// The client's buffer: a block is copied in and encrypted here.
    buf: Vec<u8>,
}

fn put_words(out: &mut Vec<u8>, w: [u64; 3]) {
    for x in w {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Finds a request at the front of `input`; a malformed one is `None`.
fn parse_frame(input: &[u8], clients: usize) -> Parsed<Option<Request>> {
    match input.first_chunk::<REQUEST>() {
        Some(f) => Parsed::Request(
            Request::decode(f).filter(|r| (r.client() as usize) < clients),
            REQUEST,
        ),
        None => Parsed::Incomplete(REQUEST),
    }
}

/// The service under duality's models: per-client state under per-client
/// colors, the ledger under the default color.
pub struct ColorService {
    seed: u64,
    file: Box<[u8]>,
    clients: Box<[Mutex<ClientState>]>,
    ledger: Mutex<Ledger>,
    violations: AtomicU64,
}

impl ColorService {
    /// A service for clients `0..clients`, keys and file from `seed`.
    pub fn new(clients: usize, seed: u64) -> ColorService {
        ColorService {
            seed,
            file: file(seed),
            clients: (0..clients as u32)
                .map(|c| {
                    Mutex::new(ClientState {
                        key: client_key(seed, c),
                        counter: 0,
                        buf: Vec::new(),
                    })
                })
                .collect(),
            ledger: Mutex::new(Ledger::new(clients)),
            violations: AtomicU64::new(0),
        }
    }

    /// The seed its keys and file come from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Color violations seen so far.
    pub fn violations(&self) -> u64 {
        self.violations.load(Relaxed)
    }

    /// Runs `f` on what `m` guards, which the colors keep exclusive: a held
    /// witness is a violation, counted, then waited out.
    fn exclusive<T, R>(&self, m: &Mutex<T>, f: impl FnOnce(&mut T) -> R) -> R {
        let mut g = match m.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => {
                self.violations.fetch_add(1, Relaxed);
                m.lock().unwrap_or_else(|e| e.into_inner())
            }
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        f(&mut g)
    }
}

impl Protocol for ColorService {
    type Session = ();
    type Request<'a> = Option<Request>;

    fn max_request(&self) -> usize {
        REQUEST
    }

    fn parse(&self, _: &mut (), input: &[u8]) -> Parsed<Option<Request>> {
        parse_frame(input, self.clients.len())
    }

    fn color(&self, req: &Option<Request>) -> u64 {
        req.map_or(DEFAULT_COLOR, |r| r.color())
    }

    fn peek_color(&self, _: &(), input: &[u8]) -> Option<u64> {
        match parse_frame(input, self.clients.len()) {
            Parsed::Request(r, _) => Some(self.color(&r)),
            _ => None,
        }
    }

    fn execute(&self, _: &mut (), req: Option<Request>, out: &mut Output) -> Flow {
        let Some(req) = req else { return Flow::Close };
        match req {
            Request::Seal { client, index, len } => {
                let src = block(&self.file, index, len);
                let (tag, n) = self.exclusive(&self.clients[client as usize], |c| {
                    // SFS's three callbacks in one job: copy into the
                    // client's buffer, encrypt there, hand the tag out.
                    c.buf.clear();
                    c.buf.extend_from_slice(src);
                    c.counter += 1;
                    (seal(&c.key, client, c.counter, &mut c.buf), c.counter)
                });
                out.extend_from_slice(&tag);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Request::Ledger { client, seals } => {
                let w = self.exclusive(&self.ledger, |l| l.record(client, seals));
                put_words(out, w);
            }
            Request::Audit { client } => {
                let n = self.exclusive(&self.clients[client as usize], |c| c.counter);
                put_words(out, [n, self.violations(), 0]);
            }
        }
        Flow::Continue
    }
}

/// What [`LockedService`]'s one mutex guards.
struct Table {
    /// Each client's key and nonce counter.
    clients: Vec<([u8; 32], u64)>,
    ledger: Ledger,
}

/// The conventional threaded peer: no colors; every client's counter and
/// the ledger behind one mutex, taken once per request to take a nonce or
/// update the ledger, never held across the cryptography (held across it,
/// the lock would serialise every request: a straw man). The block is
/// encrypted in the connection's own buffer.
pub struct LockedService {
    file: Box<[u8]>,
    table: Mutex<Table>,
    clients: usize,
}

impl LockedService {
    /// A service for clients `0..clients`, keys and file from `seed`.
    pub fn new(clients: usize, seed: u64) -> LockedService {
        LockedService {
            file: file(seed),
            table: Mutex::new(Table {
                clients: (0..clients as u32)
                    .map(|c| (client_key(seed, c), 0))
                    .collect(),
                ledger: Ledger::new(clients),
            }),
            clients,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Protocol for LockedService {
    /// The connection's block buffer.
    type Session = Vec<u8>;
    type Request<'a> = Option<Request>;
    const LOCKS_ITSELF: bool = true;

    fn max_request(&self) -> usize {
        REQUEST
    }

    fn parse(&self, _: &mut Vec<u8>, input: &[u8]) -> Parsed<Option<Request>> {
        parse_frame(input, self.clients)
    }

    fn execute(&self, buf: &mut Vec<u8>, req: Option<Request>, out: &mut Output) -> Flow {
        let Some(req) = req else { return Flow::Close };
        match req {
            Request::Seal { client, index, len } => {
                let (key, n) = {
                    let mut t = self.table();
                    let c = &mut t.clients[client as usize];
                    c.1 += 1;
                    (c.0, c.1)
                };
                buf.clear();
                buf.extend_from_slice(block(&self.file, index, len));
                out.extend_from_slice(&seal(&key, client, n, buf));
                out.extend_from_slice(&n.to_le_bytes());
            }
            Request::Ledger { client, seals } => {
                let w = self.table().ledger.record(client, seals);
                put_words(out, w);
            }
            Request::Audit { client } => {
                let n = self.table().clients[client as usize].1;
                put_words(out, [n, 0, 0]);
            }
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use duality_models::session::{serve_bytes, BatchLimits, Stop};
    use duality_models::Lane;

    fn run<P: Protocol>(p: &P, s: &mut P::Session, reqs: &[Request]) -> (Vec<u8>, Stop) {
        let input: Vec<u8> = reqs.iter().flat_map(|r| r.encode()).collect();
        let mut out = Output::default();
        let limits = BatchLimits {
            max_requests: 1000,
            max_output: 1 << 20,
        };
        let served = serve_bytes(p, s, &input, &mut out, &Lane::single(), limits);
        (out.to_vec(), served.stop)
    }

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        for r in [
            Request::Seal {
                client: 7,
                index: 3,
                len: 4096,
            },
            Request::Ledger {
                client: 1,
                seals: u64::MAX,
            },
            Request::Audit { client: u32::MAX },
        ] {
            assert_eq!(Request::decode(&r.encode()), Some(r));
        }
        let mut f = Request::Audit { client: 1 }.encode();
        f[0] = 9;
        assert_eq!(Request::decode(&f), None, "unknown op");
        for len in [0, FILE_BYTES as u32 + 1] {
            let f = Request::Seal {
                client: 1,
                index: 0,
                len,
            }
            .encode();
            assert_eq!(Request::decode(&f), None, "length {len}");
        }
    }

    #[test]
    fn colors_are_per_client_and_the_ledger_is_default() {
        assert_eq!(Request::Audit { client: 0 }.color(), 1);
        let seal = Request::Seal {
            client: 5,
            index: 0,
            len: 1,
        };
        assert_eq!(seal.color(), 6);
        let ledger = Request::Ledger {
            client: 5,
            seals: 1,
        };
        assert_eq!(ledger.color(), DEFAULT_COLOR);
        let s = ColorService::new(8, 1);
        assert_eq!(s.peek_color(&(), &seal.encode()), Some(6));
        assert_eq!(s.peek_color(&(), &seal.encode()[..8]), None);
    }

    #[test]
    fn a_seal_is_real_authenticated_encryption_of_the_block() {
        let s = ColorService::new(4, 42);
        let (out, stop) = run(
            &s,
            &mut (),
            &[Request::Seal {
                client: 2,
                index: 5,
                len: 1000,
            }],
        );
        assert_eq!(stop, Stop::NeedMore(REQUEST));
        assert_eq!(out.len(), RESPONSE);
        let counter = response_words(&out)[2];
        assert_eq!(counter, 1, "the first nonce of a client");
        let tag: [u8; 16] = out[..16].try_into().unwrap();
        let f = file(42);
        assert_eq!(tag, expected_tag(42, &f, 2, 1, 5, 1000));
        // Decrypting what the server encrypted (its buffer still holds it)
        // with the client's key gives the block back, and the tag checks.
        let cipher = {
            let c = s.clients[2].lock().unwrap();
            c.buf.clone()
        };
        assert_ne!(&cipher[..], block(&f, 5, 1000));
        let mut plain = cipher;
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&2u32.to_le_bytes());
        nonce[4..].copy_from_slice(&1u64.to_le_bytes());
        ChaCha20Poly1305::new(Key::from_slice(&client_key(42, 2)))
            .decrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                b"",
                &mut plain,
                chacha20poly1305::Tag::from_slice(&tag),
            )
            .expect("the tag authenticates the ciphertext");
        assert_eq!(&plain[..], block(&f, 5, 1000));
        // Another client's key gives another tag.
        assert_ne!(tag, expected_tag(42, &f, 3, 1, 5, 1000));
    }

    #[test]
    fn blocks_wrap_inside_the_file() {
        let f = file(1);
        assert_eq!(block(&f, 0, 4096), &f[..4096]);
        assert_eq!(block(&f, 256, 4096), &f[..4096], "256 blocks of 4 KiB");
        assert_eq!(block(&f, 3, FILE_BYTES as u32).len(), FILE_BYTES);
        assert_eq!(block(&f, 2, 3), &f[6..9]);
    }

    /// Both services keep the same invariants on the same requests: nonces
    /// count up per client, the ledger adds up.
    fn ledger_and_counters_agree<P: Protocol>(p: &P, s: &mut P::Session) {
        let seal = |client| Request::Seal {
            client,
            index: client,
            len: 64,
        };
        let (out, _) = run(
            p,
            s,
            &[
                seal(0),
                seal(1),
                seal(0),
                Request::Ledger {
                    client: 0,
                    seals: 2,
                },
                Request::Ledger {
                    client: 1,
                    seals: 1,
                },
                Request::Audit { client: 0 },
                Request::Audit { client: 1 },
            ],
        );
        let words: Vec<[u64; 3]> = out.chunks_exact(RESPONSE).map(response_words).collect();
        assert_eq!(words.len(), 7);
        let counters: Vec<u64> = words[..3].iter().map(|w| w[2]).collect();
        assert_eq!(counters, [1, 1, 2]);
        assert_eq!(words[3], [2, 2, 1], "entry, total, updates");
        assert_eq!(words[4], [1, 3, 2]);
        assert_eq!(words[5], [2, 0, 0], "client 0: 2 seals, no violation");
        assert_eq!(words[6], [1, 0, 0]);
    }

    #[test]
    fn the_colored_and_the_locked_service_keep_the_same_books() {
        ledger_and_counters_agree(&ColorService::new(2, 3), &mut ());
        ledger_and_counters_agree(&LockedService::new(2, 3), &mut Vec::new());
        // Both answer a seal with the same tag.
        let r = [Request::Seal {
            client: 1,
            index: 9,
            len: 512,
        }];
        assert_eq!(
            run(&ColorService::new(2, 3), &mut (), &r).0,
            run(&LockedService::new(2, 3), &mut Vec::new(), &r).0
        );
    }

    #[test]
    fn a_malformed_request_closes_the_connection() {
        let s = ColorService::new(2, 3);
        let (out, stop) = run(&s, &mut (), &[Request::Audit { client: 2 }]);
        assert_eq!(stop, Stop::Close, "client 2 is past a table of 2");
        assert!(out.is_empty());
        let (_, stop) = run(
            &LockedService::new(2, 3),
            &mut Vec::new(),
            &[Request::Audit { client: 5 }],
        );
        assert_eq!(stop, Stop::Close);
    }

    #[test]
    fn two_jobs_of_one_color_at_once_are_counted_as_a_violation() {
        let s = std::sync::Arc::new(ColorService::new(2, 3));
        // Another job of client 1's color holds its state…
        let held = s.clients[1].lock().unwrap();
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            run(
                &*s2,
                &mut (),
                &[Request::Seal {
                    client: 1,
                    index: 0,
                    len: 64,
                }],
            )
            .0
        });
        // …so the seal finds the witness taken, counts it, and waits.
        while s.violations() == 0 {
            std::thread::yield_now();
        }
        drop(held);
        let out = t.join().unwrap();
        assert_eq!(response_words(&out)[2], 1, "the seal still ran, once");
        let (out, _) = run(&*s, &mut (), &[Request::Audit { client: 1 }]);
        assert_eq!(response_words(&out), [1, 1, 0], "AUDIT reports it");
    }
}
