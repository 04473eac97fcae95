//! The memcached binary protocol: [`parse_binary`] one request out of a byte
//! buffer, [`BinRequest::encode`] one back into bytes, and the response
//! header ([`write_response_header`]) the executor composes answers with.
//!
//! A request is a 24-byte header (magic `0x80`, opcode, key length, extras
//! length, data type, vbucket, total body length, opaque, CAS) followed by
//! extras, key and value. [`parse_binary`] is pure and never allocates: it
//! validates the header — lengths against each other, the key length
//! against 250, the extras each opcode requires, the value length against
//! [`Limits::max_item_size`] — before asking for the body, so a huge
//! declared body is refused from the header (plus its short extras and key,
//! which name the item to invalidate), never buffered.
//!
//! Errors follow memcached 1.6: lengths that contradict each other answer
//! "Unknown command" and close; a key over 250 bytes or extras, key or body
//! lengths an opcode does not take answer "Invalid arguments" (`0x0004`) and
//! close; an unknown opcode answers "Unknown command" (`0x0081`) and its body
//! is skipped; a value over the item size limit answers "Too large."
//! (`0x0003`) and its body is skipped; a bad magic byte closes silently.
//!
//! Deliberate differences from memcached 1.6.18, at the edges: `stat`,
//! `touch` and the `gat` family must carry exactly their key (and extras) —
//! memcached ignores the declared body length there and reads what follows
//! as the next request; an unknown opcode skips exactly its body (memcached
//! skips the extras and key twice, which desynchronizes the stream);
//! `verbosity` (`0x1b`) is executed as the protocol document specifies
//! (memcached 1.6 answers "Unknown command").

use super::{Limits, KEY_MAX_LENGTH};

/// The first byte of every binary request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every binary response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Bytes in a request or response header.
pub const HEADER_LEN: usize = 24;

macro_rules! opcodes {
    ($($(#[$doc:meta])* $name:ident = $code:literal,)*) => {
        /// The opcodes memcached 1.6 serves (plus `Verbosity`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Opcode {
            $($(#[$doc])* $name = $code,)*
        }

        impl Opcode {
            /// Every opcode, in code order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];

            /// The opcode with this code, if it is one.
            pub fn from_u8(code: u8) -> Option<Opcode> {
                match code {
                    $($code => Some(Opcode::$name),)*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    /// Get a value.
    Get = 0x00,
    /// Store unconditionally (CAS: only if it matches).
    Set = 0x01,
    /// Store if absent.
    Add = 0x02,
    /// Store if present.
    Replace = 0x03,
    /// Delete.
    Delete = 0x04,
    /// Add to a counter (creating it unless the expiry is `0xffffffff`).
    Increment = 0x05,
    /// Subtract from a counter, stopping at 0.
    Decrement = 0x06,
    /// Answer, then close.
    Quit = 0x07,
    /// Invalidate every item (now or after a delay).
    Flush = 0x08,
    /// Quiet get: nothing on a miss.
    GetQ = 0x09,
    /// Answer with an empty response (flushes a pipeline of quiet requests).
    Noop = 0x0a,
    /// The server's version.
    Version = 0x0b,
    /// Get, answering with the key.
    GetK = 0x0c,
    /// Quiet get with the key.
    GetKQ = 0x0d,
    /// Add bytes after a value.
    Append = 0x0e,
    /// Add bytes before a value.
    Prepend = 0x0f,
    /// Statistics: one response per stat, then one with an empty key.
    Stat = 0x10,
    /// Quiet set: nothing on success.
    SetQ = 0x11,
    /// Quiet add.
    AddQ = 0x12,
    /// Quiet replace.
    ReplaceQ = 0x13,
    /// Quiet delete.
    DeleteQ = 0x14,
    /// Quiet increment.
    IncrementQ = 0x15,
    /// Quiet decrement.
    DecrementQ = 0x16,
    /// Close without answering.
    QuitQ = 0x17,
    /// Quiet flush.
    FlushQ = 0x18,
    /// Quiet append.
    AppendQ = 0x19,
    /// Quiet prepend.
    PrependQ = 0x1a,
    /// Set the logging level.
    Verbosity = 0x1b,
    /// Change an item's expiry.
    Touch = 0x1c,
    /// Get and touch.
    Gat = 0x1d,
    /// Quiet get and touch.
    GatQ = 0x1e,
    /// Get and touch, answering with the key.
    GatK = 0x23,
    /// Quiet get and touch with the key.
    GatKQ = 0x24,
}

impl Opcode {
    /// The loud form of a quiet opcode (itself if it is not quiet).
    pub fn loud(self) -> Opcode {
        use Opcode::*;
        match self {
            GetQ => Get,
            GetKQ => GetK,
            SetQ => Set,
            AddQ => Add,
            ReplaceQ => Replace,
            DeleteQ => Delete,
            IncrementQ => Increment,
            DecrementQ => Decrement,
            QuitQ => Quit,
            FlushQ => Flush,
            AppendQ => Append,
            PrependQ => Prepend,
            GatQ => Gat,
            GatKQ => GatK,
            o => o,
        }
    }

    /// Whether this is a quiet form: gets say nothing on a miss, the others
    /// nothing on success; errors are always answered.
    pub fn is_quiet(self) -> bool {
        self.loud() != self
    }

    /// What the opcode requires of a request's lengths.
    fn shape(self) -> Shape {
        use Opcode::*;
        let (extras, key, value) = match self.loud() {
            Get | GetK | Delete => (Ext::Exactly(0), true, false),
            Set | Add | Replace => (Ext::Exactly(8), true, true),
            Increment | Decrement => (Ext::Exactly(20), true, false),
            Quit | Noop | Version => (Ext::Exactly(0), false, false),
            Flush => (Ext::NoneOr4, false, false),
            Append | Prepend => (Ext::Exactly(0), true, true),
            Stat => (Ext::Exactly(0), false, false),
            Verbosity => (Ext::Exactly(4), false, false),
            Touch | Gat | GatK => (Ext::Exactly(4), true, false),
            // Every quiet opcode has a loud form above.
            GetQ | GetKQ | SetQ | AddQ | ReplaceQ | DeleteQ | IncrementQ | DecrementQ | QuitQ
            | FlushQ | AppendQ | PrependQ | GatQ | GatKQ => unreachable!("loud() is loud"),
        };
        let key = if self.loud() == Stat {
            KeyRule::Optional
        } else if key {
            KeyRule::Required
        } else {
            KeyRule::None
        };
        Shape { extras, key, value }
    }
}

/// Extras lengths an opcode takes.
#[derive(Clone, Copy)]
enum Ext {
    Exactly(u8),
    NoneOr4,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyRule {
    None,
    Optional,
    Required,
}

#[derive(Clone, Copy)]
struct Shape {
    extras: Ext,
    key: KeyRule,
    /// A value may follow the key (else the body is exactly extras + key).
    value: bool,
}

/// The extras of a request, by what its opcode carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extras {
    /// No extras.
    None,
    /// `set`/`add`/`replace`: client flags and expiry.
    Store {
        /// Client flags.
        flags: u32,
        /// Expiry time (memcached's exptime rules).
        exptime: u32,
    },
    /// `incr`/`decr`: delta, initial value, expiry (`0xffffffff`: do not
    /// create a missing counter).
    Arith {
        /// The amount.
        delta: u64,
        /// The value a missing counter is created with.
        initial: u64,
        /// Expiry of a created counter.
        exptime: u32,
    },
    /// `touch`/`gat*`: the new expiry; `flush`: the delay.
    Expiry(u32),
    /// `verbosity`: the level.
    Level(u32),
}

impl Extras {
    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        match self {
            Extras::None => 0,
            Extras::Store { .. } => 8,
            Extras::Arith { .. } => 20,
            Extras::Expiry(_) | Extras::Level(_) => 4,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        matches!(self, Extras::None)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Extras::None => {}
            Extras::Store { flags, exptime } => {
                out.extend_from_slice(&flags.to_be_bytes());
                out.extend_from_slice(&exptime.to_be_bytes());
            }
            Extras::Arith {
                delta,
                initial,
                exptime,
            } => {
                out.extend_from_slice(&delta.to_be_bytes());
                out.extend_from_slice(&initial.to_be_bytes());
                out.extend_from_slice(&exptime.to_be_bytes());
            }
            Extras::Expiry(v) | Extras::Level(v) => out.extend_from_slice(&v.to_be_bytes()),
        }
    }

    /// Decodes the extras `op` carries; the length was checked.
    fn decode(op: Opcode, b: &[u8]) -> Extras {
        use Opcode::*;
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| (u64::from(u32_at(i)) << 32) | u64::from(u32_at(i + 4));
        match (op.loud(), b.len()) {
            (_, 0) => Extras::None,
            (Set | Add | Replace, _) => Extras::Store {
                flags: u32_at(0),
                exptime: u32_at(4),
            },
            (Increment | Decrement, _) => Extras::Arith {
                delta: u64_at(0),
                initial: u64_at(8),
                exptime: u32_at(16),
            },
            (Verbosity, _) => Extras::Level(u32_at(0)),
            _ => Extras::Expiry(u32_at(0)),
        }
    }
}

/// One binary request, borrowing key and value from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BinRequest<'a> {
    /// What to do.
    pub opcode: Opcode,
    /// The data type byte (memcached ignores it; kept for round trips).
    pub data_type: u8,
    /// The vbucket id (ignored, as memcached does).
    pub vbucket: u16,
    /// Echoed in every response to this request.
    pub opaque: u32,
    /// The CAS to compare (0: none).
    pub cas: u64,
    /// The opcode's extras.
    pub extras: Extras,
    /// The key (for `stat`, the group).
    pub key: &'a [u8],
    /// The value (storage commands only).
    pub value: &'a [u8],
}

impl BinRequest<'_> {
    /// A request with no CAS, opaque 0 and no extras, key or value.
    pub fn new(opcode: Opcode) -> BinRequest<'static> {
        BinRequest {
            opcode,
            data_type: 0,
            vbucket: 0,
            opaque: 0,
            cas: 0,
            extras: Extras::None,
            key: b"",
            value: b"",
        }
    }

    /// Bytes on the wire.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.extras.len() + self.key.len() + self.value.len()
    }

    /// Appends the request in wire format. [`parse_binary`] of the output
    /// yields an equal request when the request is valid for its opcode.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let body = self.extras.len() + self.key.len() + self.value.len();
        out.reserve(HEADER_LEN + body);
        out.push(REQUEST_MAGIC);
        out.push(self.opcode as u8);
        out.extend_from_slice(&(self.key.len() as u16).to_be_bytes());
        out.push(self.extras.len() as u8);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket.to_be_bytes());
        out.extend_from_slice(&(body as u32).to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
        self.extras.encode(out);
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.value);
    }
}

/// Why [`parse_binary`] returned no request, and what the server does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinError<'a> {
    /// Not all of the request is buffered: `need` bytes in all (from the
    /// front of the buffer). Never more than a valid request can take.
    Incomplete {
        /// Bytes the request needs.
        need: usize,
    },
    /// The first byte is not `0x80`: close without an answer.
    BadMagic,
    /// Key and extras lengths exceed the body length: answer "Unknown
    /// command" and close (the stream cannot be resynchronized).
    BadLengths {
        /// The request's opcode byte.
        opcode: u8,
        /// The request's opaque.
        opaque: u32,
    },
    /// A key over 250 bytes, or lengths the opcode does not take: answer
    /// "Invalid arguments" and close.
    Invalid {
        /// The request's opcode byte.
        opcode: u8,
        /// The request's opaque.
        opaque: u32,
    },
    /// An opcode memcached does not serve: answer "Unknown command", drop
    /// `consumed` bytes (possibly more than buffered).
    UnknownCommand {
        /// The request's opcode byte.
        opcode: u8,
        /// The request's opaque.
        opaque: u32,
        /// Bytes to drop: header and body.
        consumed: usize,
    },
    /// A value over the item size limit: answer "Too large.", drop
    /// `consumed` bytes (possibly more than buffered). Decided from the
    /// header, extras and key alone.
    TooLarge {
        /// The request's opcode.
        opcode: Opcode,
        /// The request's opaque.
        opaque: u32,
        /// The key, whose old item a `set` drops (as memcached does).
        key: &'a [u8],
        /// Bytes to drop: header and body.
        consumed: usize,
    },
    /// A value the server has no room to buffer (its connection buffers are
    /// at their limit): answer "Out of memory", drop `consumed` bytes. The
    /// fields are [`TooLarge`](BinError::TooLarge)'s; made only by
    /// [`out_of_memory`](BinError::out_of_memory).
    NoMemory {
        /// The request's opcode.
        opcode: Opcode,
        /// The request's opaque.
        opaque: u32,
        /// The key, whose old item a `set` drops.
        key: &'a [u8],
        /// Bytes to drop: header and body.
        consumed: usize,
    },
}

impl<'a> BinError<'a> {
    /// The same request refused for lack of memory (see
    /// [`ParseError::out_of_memory`](crate::protocol::ParseError::out_of_memory):
    /// parsed with an item size limit of 0, a storage request is
    /// [`TooLarge`](BinError::TooLarge)); other errors as they are.
    pub fn out_of_memory(self) -> BinError<'a> {
        match self {
            BinError::TooLarge {
                opcode,
                opaque,
                key,
                consumed,
            } => BinError::NoMemory {
                opcode,
                opaque,
                key,
                consumed,
            },
            e => e,
        }
    }
}

impl BinError<'_> {
    /// The bytes to drop before parsing again; `None` where the connection
    /// closes or more must be read.
    pub fn consumed(&self) -> Option<usize> {
        match *self {
            BinError::UnknownCommand { consumed, .. }
            | BinError::TooLarge { consumed, .. }
            | BinError::NoMemory { consumed, .. } => Some(consumed),
            _ => None,
        }
    }

    /// Whether the connection closes after the answer.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            BinError::BadMagic | BinError::BadLengths { .. } | BinError::Invalid { .. }
        )
    }

    /// Appends memcached's answer (nothing for `Incomplete` and `BadMagic`).
    pub fn write_response(&self, out: &mut Vec<u8>) {
        match *self {
            BinError::Incomplete { .. } | BinError::BadMagic => {}
            BinError::BadLengths { opcode, opaque }
            | BinError::UnknownCommand { opcode, opaque, .. } => {
                write_error(out, opcode, Status::UnknownCommand, opaque)
            }
            BinError::Invalid { opcode, opaque } => {
                write_error(out, opcode, Status::InvalidArguments, opaque)
            }
            BinError::TooLarge { opcode, opaque, .. } => {
                write_error(out, opcode as u8, Status::TooLarge, opaque)
            }
            BinError::NoMemory { opcode, opaque, .. } => {
                write_error(out, opcode as u8, Status::OutOfMemory, opaque)
            }
        }
    }
}

/// Response status codes memcached sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// Success.
    Ok = 0x0000,
    /// Key not found.
    NotFound = 0x0001,
    /// Key exists (or CAS mismatch).
    Exists = 0x0002,
    /// Value too large.
    TooLarge = 0x0003,
    /// Invalid arguments.
    InvalidArguments = 0x0004,
    /// Item not stored.
    NotStored = 0x0005,
    /// Incr/decr on a non-numeric value.
    DeltaBadValue = 0x0006,
    /// Authentication failed; memcached also answers it to a flush that
    /// `-F` forbids.
    AuthError = 0x0020,
    /// A SASL authentication goes on: send a step (`-S`).
    AuthContinue = 0x0021,
    /// Unknown command.
    UnknownCommand = 0x0081,
    /// Out of memory.
    OutOfMemory = 0x0082,
}

impl Status {
    /// The body memcached sends with an error status (empty for `Ok`).
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Ok => b"",
            Status::NotFound => b"Not found",
            Status::Exists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::DeltaBadValue => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::AuthContinue => b"",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }
}

/// The fields of a response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The request's opcode byte.
    pub opcode: u8,
    /// Key bytes in the body.
    pub key_len: u16,
    /// Extras bytes in the body.
    pub extras_len: u8,
    /// The status.
    pub status: Status,
    /// Extras + key + value bytes.
    pub body_len: u32,
    /// The request's opaque.
    pub opaque: u32,
    /// The item's CAS (0 for errors).
    pub cas: u64,
}

/// Appends a 24-byte response header.
pub fn write_response_header(out: &mut Vec<u8>, h: &ResponseHeader) {
    out.push(RESPONSE_MAGIC);
    out.push(h.opcode);
    out.extend_from_slice(&h.key_len.to_be_bytes());
    out.push(h.extras_len);
    out.push(0);
    out.extend_from_slice(&(h.status as u16).to_be_bytes());
    out.extend_from_slice(&h.body_len.to_be_bytes());
    out.extend_from_slice(&h.opaque.to_be_bytes());
    out.extend_from_slice(&h.cas.to_be_bytes());
}

/// Appends an error response: the status and its message, CAS 0.
pub fn write_error(out: &mut Vec<u8>, opcode: u8, status: Status, opaque: u32) {
    let msg = status.message();
    write_response_header(
        out,
        &ResponseHeader {
            opcode,
            key_len: 0,
            extras_len: 0,
            status,
            body_len: msg.len() as u32,
            opaque,
            cas: 0,
        },
    );
    out.extend_from_slice(msg);
}

/// Parses one binary request from the front of `buf`.
///
/// Returns the request and the bytes it used, or what to do instead (see
/// [`BinError`]). Never panics, never allocates; the value's declared length
/// is checked against [`Limits::max_item_size`] before the value is waited
/// for, so [`BinError::Incomplete`] never asks for more than header + 20
/// bytes of extras + 250 of key + the item size limit.
pub fn parse_binary<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<(BinRequest<'a>, usize), BinError<'a>> {
    let head = binary_head(buf, limits)?;
    let end = head.head_len + head.vlen;
    let Some(value) = buf.get(head.head_len..end) else {
        return Err(BinError::Incomplete { need: end });
    };
    Ok((
        BinRequest {
            value,
            ..head.request
        },
        end,
    ))
}

/// A binary `set`, `add` or `replace` (or a quiet form) at the front of
/// `buf` whose header, extras and key have arrived but not all its value: a
/// server may then receive the value itself, straight into where it is
/// stored. `None` for anything else ([`parse_binary`] says what).
pub fn parse_binary_head<'a>(buf: &'a [u8], limits: &Limits) -> Option<BinaryHead<'a>> {
    let head = binary_head(buf, limits).ok()?;
    let stores = matches!(
        head.request.opcode.loud(),
        Opcode::Set | Opcode::Add | Opcode::Replace
    );
    (stores && buf.len() < head.head_len + head.vlen).then_some(head)
}

/// A binary request's header, extras and key, parsed before its value
/// (see [`parse_binary_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryHead<'a> {
    /// The request, its value empty.
    pub request: BinRequest<'a>,
    /// The value's length, within the limits.
    pub vlen: usize,
    /// Header, extras and key: where the value starts.
    pub head_len: usize,
}

impl<'a> BinaryHead<'a> {
    /// The error answered when no memory is left for the value (its bytes
    /// are dropped; a `set`'s old item goes too).
    pub fn out_of_memory(&self) -> BinError<'a> {
        BinError::NoMemory {
            opcode: self.request.opcode,
            opaque: self.request.opaque,
            key: self.request.key,
            consumed: self.head_len + self.vlen,
        }
    }
}

/// [`parse_binary`] up to the value: `Incomplete` (for the whole request)
/// until the key has arrived.
fn binary_head<'a>(buf: &'a [u8], limits: &Limits) -> Result<BinaryHead<'a>, BinError<'a>> {
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Err(BinError::Incomplete { need: HEADER_LEN });
    };
    if h[0] != REQUEST_MAGIC {
        return Err(BinError::BadMagic);
    }
    let code = h[1];
    let key_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let extras_len = usize::from(h[4]);
    let data_type = h[5];
    let vbucket = u16::from_be_bytes([h[6], h[7]]);
    let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let opaque = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
    let cas = u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]);

    // memcached's order: contradicting lengths, then the key limit, then
    // what the opcode takes.
    if key_len + extras_len > body_len {
        return Err(BinError::BadLengths {
            opcode: code,
            opaque,
        });
    }
    let invalid = BinError::Invalid {
        opcode: code,
        opaque,
    };
    if key_len > KEY_MAX_LENGTH {
        return Err(invalid);
    }
    let Some(opcode) = Opcode::from_u8(code) else {
        return Err(BinError::UnknownCommand {
            opcode: code,
            opaque,
            consumed: HEADER_LEN + body_len,
        });
    };
    let shape = opcode.shape();
    let extras_ok = match shape.extras {
        Ext::Exactly(n) => extras_len == usize::from(n),
        Ext::NoneOr4 => extras_len == 0 || extras_len == 4,
    };
    let key_ok = match shape.key {
        KeyRule::None => key_len == 0,
        KeyRule::Optional => true,
        KeyRule::Required => key_len > 0,
    };
    let value_len = body_len - key_len - extras_len;
    if !extras_ok || !key_ok || (!shape.value && value_len > 0) {
        return Err(invalid);
    }
    let key_end = HEADER_LEN + extras_len + key_len;
    // The client flags count when the item is near the limit (see
    // `item_size`): then the extras must have arrived to decide.
    let too_large = if limits.fits(key_len, 0xffff_ffff, value_len) {
        false
    } else if !limits.fits(key_len, 0, value_len) {
        true
    } else {
        let extras = buf
            .get(HEADER_LEN..HEADER_LEN + extras_len)
            .ok_or(BinError::Incomplete { need: key_end })?;
        let flags = match extras {
            [a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]),
            _ => 0,
        };
        !limits.fits(key_len, flags, value_len)
    };
    if too_large {
        // Refused before the value arrives; the key names the old item a
        // refused set drops.
        let key = buf
            .get(HEADER_LEN + extras_len..key_end)
            .ok_or(BinError::Incomplete { need: key_end })?;
        return Err(BinError::TooLarge {
            opcode,
            opaque,
            key,
            consumed: HEADER_LEN + body_len,
        });
    }
    if buf.len() < key_end {
        return Err(BinError::Incomplete {
            need: HEADER_LEN + body_len,
        });
    }
    let request = BinRequest {
        opcode,
        data_type,
        vbucket,
        opaque,
        cas,
        extras: Extras::decode(opcode, &buf[HEADER_LEN..HEADER_LEN + extras_len]),
        key: &buf[HEADER_LEN + extras_len..key_end],
        value: &[],
    };
    Ok(BinaryHead {
        request,
        vlen: value_len,
        head_len: key_end,
    })
}

#[cfg(test)]
mod tests;
