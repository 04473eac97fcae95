//! The memcached text and meta protocols: [`parse`] a request out of a byte
//! buffer, [`Request::encode`] one back into bytes.
//!
//! [`parse`] is a pure function: it looks at the front of a read buffer and
//! returns one [`Request`] borrowing keys and values from the buffer, with the
//! number of bytes it used, or a [`ParseError`] saying what the server should
//! do. It never allocates and decides everything about a storage command —
//! including "this value is too large" — from the command line alone, before
//! any of the value has to arrive.
//!
//! Syntax and error strings follow memcached's `doc/protocol.txt` and its
//! parser: tokens are separated by one or more spaces, a line ends in `\r\n` (a
//! bare `\n` is accepted), keys are at most 250 bytes without a space, line
//! feed or NUL, numbers are plain decimals. Where memcached accepts something
//! odd (extra tokens after a command's arguments) so does this parser; the
//! deviations are listed on [`parse`].

pub mod binary;
mod cursor;
mod encode;
mod meta;

pub use binary::{
    parse_binary, parse_binary_head, BinError, BinRequest, BinaryHead, Extras, Opcode, Status,
};
pub use cursor::Cursor;
pub use meta::{MetaFlags, META_MAX_FLAGS};

use crate::base64;
use crate::num::{parse_i32, parse_u32, parse_u64};

/// The longest key, in bytes (memcached's `KEY_MAX_LENGTH`).
pub const KEY_MAX_LENGTH: usize = 250;

/// The longest opaque token (`O` flag), counting the `O`.
pub const OPAQUE_MAX_LENGTH: usize = 32;

/// A meta command line of this many tokens or more (command and key
/// included) is refused: memcached's limit of 20 counts its tokenizer's end
/// marker too.
pub const META_MAX_TOKENS: usize = 20;

pub(crate) const BAD_FORMAT: &str = "bad command line format";
/// The error of a data block not ended by `\r\n` (memcached counts the
/// set all the same: see `execute_error`).
pub(crate) const BAD_DATA_CHUNK: &str = "bad data chunk";

/// memcached's answer to `delete <key> <time>` with a time other than 0.
pub(crate) const DELETE_USAGE: &str = "bad command line format.  Usage: delete <key> [noreply]";

/// Size limits the parser enforces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest command line, in bytes before its `\n`, for commands other
    /// than `get`/`gets`/`gat`/`gats` (memcached closes the connection after
    /// 2048 bytes without a newline).
    pub max_line: usize,
    /// The longest retrieval command line while its end has not arrived
    /// (multi-key gets can be long: 1 MiB holds 4,000 keys of 250 bytes);
    /// a connection's read buffer may grow this far for one.
    pub max_get_line: usize,
    /// The item size limit (memcached's `-I`): a value is refused when its
    /// [`item_size`] is larger, as memcached refuses it. [`parse`] needs a
    /// whole request in the buffer, so a connection's read buffer must be
    /// able to grow to `max_line + max_item_size + 2` bytes.
    pub max_item_size: usize,
}

impl Limits {
    /// Whether an item of this key length, client flags and value length is
    /// within [`Limits::max_item_size`].
    pub fn fits(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        item_size(key_len, flags, value_len) <= self.max_item_size
    }
}

/// What memcached (64-bit, CAS on) counts of an item against its `-I`
/// limit: its 48-byte header, the key and a NUL, 4 bytes of client flags
/// unless they are 0, the value and its `\r\n`, and the 8-byte CAS unique.
/// With `-I 1m` and a 5-byte key the largest value is 1048512 bytes.
pub const fn item_size(key_len: usize, flags: u32, value_len: usize) -> usize {
    let flags = if flags == 0 { 0 } else { 4 };
    48 + key_len + 1 + flags + value_len + 2 + 8
}

impl Default for Limits {
    /// 2048-byte lines, 1 MiB retrieval lines, 1 MiB values.
    fn default() -> Limits {
        Limits {
            max_line: 2048,
            max_get_line: 1024 * 1024,
            max_item_size: 1024 * 1024,
        }
    }
}

/// The classic storage commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreCommand {
    /// Store unconditionally.
    Set,
    /// Store only if the key is absent.
    Add,
    /// Store only if the key is present.
    Replace,
    /// Add to the end of an existing value.
    Append,
    /// Add to the start of an existing value.
    Prepend,
    /// Store only if the CAS unique still matches.
    Cas,
}

impl StoreCommand {
    /// The command's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            StoreCommand::Set => "set",
            StoreCommand::Add => "add",
            StoreCommand::Replace => "replace",
            StoreCommand::Append => "append",
            StoreCommand::Prepend => "prepend",
            StoreCommand::Cas => "cas",
        }
    }
}

/// `incr` or `decr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// Add, wrapping at 2^64.
    Incr,
    /// Subtract, stopping at 0.
    Decr,
}

/// A space-separated list of tokens borrowed from a request line (the keys of
/// a `get`, the arguments of `stats`). Compares token by token.
#[derive(Clone, Copy)]
pub struct Tokens<'a> {
    raw: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// Wraps raw text; tokens are the non-empty runs between spaces.
    pub fn new(raw: &'a [u8]) -> Tokens<'a> {
        Tokens { raw }
    }

    /// The tokens.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        // memchr finds each token's end a vector at a time (a key is often
        // 20-40 bytes); runs of spaces between tokens are rare and short.
        let mut rest = self.raw;
        std::iter::from_fn(move || {
            let start = rest.iter().position(|&b| b != b' ')?;
            let token = &rest[start..];
            let end = memchr::memchr(b' ', token).unwrap_or(token.len());
            rest = &token[end..];
            Some(&token[..end])
        })
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The first token.
    pub fn first(&self) -> Option<&'a [u8]> {
        self.iter().next()
    }
}

impl PartialEq for Tokens<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Tokens<'_> {}

impl std::fmt::Debug for Tokens<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// One request, borrowing from the buffer it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get <key>+` / `gets <key>+` (`cas`: return CAS uniques).
    Get {
        /// The keys, each valid.
        keys: Tokens<'a>,
        /// `gets`.
        cas: bool,
    },
    /// `gat <exptime> <key>+` / `gats …`.
    GetAndTouch {
        /// The new expiry time.
        exptime: i32,
        /// The keys, each valid.
        keys: Tokens<'a>,
        /// `gats`.
        cas: bool,
    },
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]`
    /// or `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]`, with the
    /// data block.
    Store {
        /// Which storage command.
        command: StoreCommand,
        /// The key.
        key: &'a [u8],
        /// Client flags.
        flags: u32,
        /// Expiry time.
        exptime: i32,
        /// The data block (without its `\r\n`).
        value: &'a [u8],
        /// The CAS unique to compare (`cas` only; 0 otherwise).
        cas_unique: u64,
        /// Send no response.
        noreply: bool,
    },
    /// `delete <key> [noreply]`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// Send no response.
        noreply: bool,
    },
    /// `incr|decr <key> <delta> [noreply]`.
    Arith {
        /// Which one.
        op: ArithOp,
        /// The key.
        key: &'a [u8],
        /// The amount.
        delta: u64,
        /// Send no response.
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiry time.
        exptime: i32,
        /// Send no response.
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`.
    FlushAll {
        /// When to flush, as sent.
        delay: FlushDelay,
        /// Send no response.
        noreply: bool,
    },
    /// `version`.
    Version,
    /// `shutdown [graceful]`: stop the server if that is enabled (`-A`).
    Shutdown {
        /// The arguments (`graceful` or none; others are refused).
        args: Tokens<'a>,
    },
    /// `cache_memlimit <MiB> [noreply]`.
    CacheMemlimit {
        /// The new limit in MiB; `None` when it is not a number (memcached
        /// answers `ERROR`).
        mib: Option<u32>,
        /// Send no response.
        noreply: bool,
    },
    /// `verbosity <level> [noreply]`.
    Verbosity {
        /// The level.
        level: u32,
        /// Send no response.
        noreply: bool,
    },
    /// `stats [args…]`.
    Stats {
        /// The arguments (empty for general statistics).
        args: Tokens<'a>,
    },
    /// `lru_crawler <subcommand> [arg]`.
    LruCrawler {
        /// The arguments (`crawl all`, `metadump 1,2`, `enable`, …).
        args: Tokens<'a>,
    },
    /// `slabs <subcommand> [args…]` (`reassign`, `automove`).
    Slabs {
        /// The arguments.
        args: Tokens<'a>,
    },
    /// `lru <subcommand> [args…]` (`tune`, `mode`, `temp_ttl`).
    Lru {
        /// The arguments.
        args: Tokens<'a>,
    },
    /// `watch [kind…]`: the connection becomes a stream of log lines (see
    /// [`crate::watch`]).
    Watch {
        /// The kinds asked for.
        args: Tokens<'a>,
    },
    /// `quit`: close the connection.
    Quit,
    /// `mg <key> <flags>*`.
    MetaGet {
        /// The key as sent (base64 when `flags.base64()`).
        key: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `ms <key> <datalen> <flags>*` with the data block.
    MetaSet {
        /// The key as sent (base64 when `flags.base64()`).
        key: &'a [u8],
        /// The data block (without its `\r\n`).
        value: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `md <key> <flags>*`.
    MetaDelete {
        /// The key as sent (base64 when `flags.base64()`).
        key: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `ma <key> <flags>*`.
    MetaArith {
        /// The key as sent (base64 when `flags.base64()`).
        key: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `mn`: answers `MN`.
    MetaNoop,
    /// `me <key> [b]`: item metadata for debugging.
    MetaDebug {
        /// The key as sent.
        key: &'a [u8],
        /// The key is base64.
        base64: bool,
    },
}

impl<'a> Request<'a> {
    /// The request's single key as sent (possibly base64, see
    /// [`Request::key_is_base64`]); `None` for requests with no key or several.
    pub fn key(&self) -> Option<&'a [u8]> {
        match *self {
            Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } => {
                let mut it = keys.iter();
                let k = it.next()?;
                it.next().is_none().then_some(k)
            }
            Request::Store { key, .. }
            | Request::Delete { key, .. }
            | Request::Arith { key, .. }
            | Request::Touch { key, .. }
            | Request::MetaGet { key, .. }
            | Request::MetaSet { key, .. }
            | Request::MetaDelete { key, .. }
            | Request::MetaArith { key, .. }
            | Request::MetaDebug { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Whether [`Request::key`] is base64 (meta commands with `b`).
    pub fn key_is_base64(&self) -> bool {
        match self {
            Request::MetaGet { flags, .. }
            | Request::MetaSet { flags, .. }
            | Request::MetaDelete { flags, .. }
            | Request::MetaArith { flags, .. } => flags.base64(),
            Request::MetaDebug { base64, .. } => *base64,
            _ => false,
        }
    }
}

/// Why [`parse`] returned no request, and what the server should do.
///
/// Every variant but `Incomplete` and `LineTooLong` carries `consumed`: the
/// bytes to drop from the front of the buffer before parsing again. For a
/// storage command it includes the data block the client is still sending, so
/// it **may exceed the bytes buffered so far**: the server drops what it has
/// and discards the rest as it arrives. [`crate::execute_error`] writes the
/// response (and applies the side effects memcached has for a refused value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError<'a> {
    /// The request is not complete: read more bytes and parse again.
    Incomplete,
    /// No end of line within the limit: close the connection without an
    /// answer, as memcached does (the stream cannot be resynchronized).
    LineTooLong,
    /// An HTTP request line (an unknown command whose last token starts
    /// with `HTTP/`): close without an answer, as memcached does, so a
    /// browser or health check pointed at the port gets no garbage.
    Http,
    /// An unknown command: answer `ERROR` (even after `noreply`, as
    /// memcached does: the word means nothing to a command it does not
    /// know), drop `consumed`.
    UnknownCommand {
        /// Bytes to drop.
        consumed: usize,
    },
    /// A malformed request: answer `CLIENT_ERROR <message>` (unless
    /// `noreply`), drop `consumed` (possibly more than buffered).
    Client {
        /// memcached's message, e.g. `bad command line format`.
        message: &'static str,
        /// Bytes to drop.
        consumed: usize,
        /// A classic command ending in `noreply`: send nothing.
        noreply: bool,
    },
    /// A storage command whose declared length exceeds
    /// [`Limits::max_item_size`]: answer `SERVER_ERROR object too large for
    /// cache` (unless `noreply`) and drop `consumed` = line + value + 2 bytes
    /// (possibly more than buffered). Decided from the command line alone.
    TooLarge {
        /// The key as sent.
        key: &'a [u8],
        /// The key is base64 (`ms … b`).
        key_base64: bool,
        /// memcached deletes the key's old item for `set` and `ms`, so a
        /// failed store does not leave stale data behind.
        invalidate: bool,
        /// A classic command ending in `noreply`: send nothing.
        noreply: bool,
        /// Bytes to drop.
        consumed: usize,
        /// The storage command (an `ms` by its mode, see
        /// [`MetaFlags::store_command`]), for `watch` lines.
        command: StoreCommand,
        /// The value's declared length (at most `i32::MAX`).
        vlen: u32,
    },
    /// A storage command the server has no room to buffer the value of (its
    /// connection buffers are at their limit): answer `SERVER_ERROR out of
    /// memory storing object` (unless `noreply`), as memcached does when it
    /// cannot allocate the item, and drop `consumed` bytes. The fields are
    /// [`TooLarge`](ParseError::TooLarge)'s; never made by [`parse`], only by
    /// [`out_of_memory`](ParseError::out_of_memory).
    NoMemory {
        /// The key as sent.
        key: &'a [u8],
        /// The key is base64 (`ms … b`).
        key_base64: bool,
        /// A `set` or `ms` drops the key's old item.
        invalidate: bool,
        /// A classic command ending in `noreply`: send nothing.
        noreply: bool,
        /// Bytes to drop.
        consumed: usize,
        /// As [`TooLarge`](ParseError::TooLarge)'s.
        command: StoreCommand,
        /// The value's declared length.
        vlen: u32,
    },
}

impl<'a> ParseError<'a> {
    /// The same storage request refused for lack of memory instead: a
    /// server that finds it cannot buffer a value parses the request with
    /// an item size limit of 0, which refuses every value as
    /// [`TooLarge`](ParseError::TooLarge), and turns that into this. Other
    /// errors are returned as they are.
    pub fn out_of_memory(self) -> ParseError<'a> {
        match self {
            ParseError::TooLarge {
                key,
                key_base64,
                invalidate,
                noreply,
                consumed,
                command,
                vlen,
            } => ParseError::NoMemory {
                key,
                key_base64,
                invalidate,
                noreply,
                consumed,
                command,
                vlen,
            },
            e => e,
        }
    }
}

impl ParseError<'_> {
    /// The bytes to drop from the buffer (see the type docs); `None` for
    /// `Incomplete` and `LineTooLong`.
    pub fn consumed(&self) -> Option<usize> {
        match *self {
            ParseError::Incomplete | ParseError::LineTooLong | ParseError::Http => None,
            ParseError::UnknownCommand { consumed, .. }
            | ParseError::Client { consumed, .. }
            | ParseError::TooLarge { consumed, .. }
            | ParseError::NoMemory { consumed, .. } => Some(consumed),
        }
    }

    /// Whether the connection must be closed after the response.
    pub fn is_fatal(&self) -> bool {
        matches!(self, ParseError::LineTooLong | ParseError::Http)
    }

    /// Appends the response line memcached sends for this error (nothing for
    /// `Incomplete`, `LineTooLong`, `Http` or when the request said `noreply`).
    pub fn write_response(&self, out: &mut Vec<u8>) {
        match *self {
            ParseError::Incomplete | ParseError::LineTooLong | ParseError::Http => {}
            ParseError::UnknownCommand { .. } => out.extend_from_slice(b"ERROR\r\n"),
            ParseError::Client {
                message, noreply, ..
            } => {
                if !noreply {
                    out.extend_from_slice(b"CLIENT_ERROR ");
                    out.extend_from_slice(message.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            }
            ParseError::TooLarge { noreply, .. } => {
                if !noreply {
                    out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
                }
            }
            ParseError::NoMemory { noreply, .. } => {
                if !noreply {
                    out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
                }
            }
        }
    }
}

/// `flush_all`'s delay as sent. A malformed one is not a parse failure:
/// memcached counts the command (`cmd_flush`) and refuses it when flushing
/// is disabled before it reads the delay, so the executor decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushDelay {
    /// No delay: flush now.
    Now,
    /// Seconds (or a Unix time) until the flush.
    After(i32),
    /// Not a 32-bit number: answered `CLIENT_ERROR invalid exptime argument`.
    Invalid,
}

/// A failure found on the command line: (message, noreply).
struct Fail {
    message: &'static str,
    noreply: bool,
}

impl From<&'static str> for Fail {
    fn from(message: &'static str) -> Fail {
        Fail {
            message,
            noreply: false,
        }
    }
}

/// Up to this many tokens after the command are kept (classic commands
/// need at most five); more are counted.
const MAX_ARGS: usize = 5;

/// The tokens after a classic command, split once.
struct Args<'a> {
    toks: [&'a [u8]; MAX_ARGS],
    /// Tokens on the line after the command (may exceed `MAX_ARGS`).
    total: usize,
    /// The last token of the whole line (the command when there are no args).
    last: &'a [u8],
}

impl<'a> Args<'a> {
    fn split(cmd: &'a [u8], rest: &'a [u8]) -> Args<'a> {
        let mut a = Args {
            toks: [&[]; MAX_ARGS],
            total: 0,
            last: cmd,
        };
        for t in Tokens::new(rest).iter() {
            if let Some(slot) = a.toks.get_mut(a.total) {
                *slot = t;
            }
            a.total += 1;
            a.last = t;
        }
        a
    }

    /// The line has more than `min` arguments and the last one is `noreply`.
    fn noreply(&self, min: usize) -> bool {
        self.total > min && self.last == b"noreply"
    }
}

/// The first token of `s` and what follows it.
fn next_token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let s = trim_start(s);
    if s.is_empty() {
        return None;
    }
    let end = memchr::memchr(b' ', s).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

fn trim_start(s: &[u8]) -> &[u8] {
    let i = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    &s[i..]
}

/// A classic key: 1..=250 bytes, none a space, a line feed or a NUL. Other
/// control bytes are key bytes, as in memcached (`doc/protocol.txt` says keys
/// have none, but memcached takes them, and clients send them: libmemcached's
/// `memaslap` puts eight 0x10 bytes before every key). A NUL ends the line
/// for memcached's command parser, so the key it would store is not the one
/// sent: refused instead.
pub(crate) fn valid_key(k: &[u8]) -> bool {
    // memchr3 looks at a vector of bytes at a time (a fold over the bytes
    // did not vectorize: about four instructions a byte).
    !k.is_empty() && k.len() <= KEY_MAX_LENGTH && memchr::memchr3(b' ', b'\n', 0, k).is_none()
}

/// The keys of the requests at the front of `input`, each given to `hint`
/// in order, looking at most `max` requests: what the server hints the
/// store with while the request before them runs
/// ([`Store::prefetch`](crate::Store::prefetch)). Every request that names
/// an item is hinted (a multi-key get by its first key; a base64 meta key
/// comes still encoded: only a guess), one that names none is stepped
/// over, and it stops at the first request whose end it cannot find (see
/// [`request_ahead`]). Returns how many keys it hinted.
pub(crate) fn keys_ahead<'a>(
    binary: bool,
    input: &'a [u8],
    max: usize,
    mut hint: impl FnMut(&'a [u8]),
) -> usize {
    let mut at = 0;
    let mut hinted = 0;
    for _ in 0..max {
        let Some(ahead) = request_ahead(binary, &input[at..]) else {
            break;
        };
        if let Some(key) = ahead.key {
            hint(key);
            hinted += 1;
        }
        at += ahead.len;
    }
    hinted
}

/// How far [`request_ahead`] looks for the end of a text line (a get of
/// 100 keys of 10 bytes is about 1.1 KB).
const LINE_AHEAD_MAX: usize = 2048;

/// A request found at the front of a read by [`request_ahead`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ahead<'a> {
    /// The item it names first, as sent: 1..=250 bytes; `None` for a
    /// request that names none (`mn`, `stats`, a binary `NOOP`, …).
    pub key: Option<&'a [u8]>,
    /// Its length (line and data block, or frame): all of it has arrived.
    pub len: usize,
}

/// The request at the front of `input`, if all of it has arrived and its
/// end can be found cheaply: a text line ended within 2,048 bytes
/// (`LINE_AHEAD_MAX`), with the data block its line declares for `set`,
/// `add`, `replace`, `append`, `prepend`, `cas` and `ms`; or a binary
/// frame.
/// Only a guess for the look-ahead, never for serving: lines the parser
/// would refuse are sized all the same (a declared length it would refuse
/// ends the walk), and nothing is allocated or checked beyond the bytes
/// it reads.
pub fn request_ahead(binary: bool, input: &[u8]) -> Option<Ahead<'_>> {
    let item_key = |k: &'_ [u8]| !k.is_empty() && k.len() <= KEY_MAX_LENGTH;
    if binary {
        let h = input.get(..binary::HEADER_LEN)?;
        if h[0] != binary::REQUEST_MAGIC {
            return None;
        }
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        let len = binary::HEADER_LEN.checked_add(usize::try_from(body).ok()?)?;
        if len > input.len() {
            return None;
        }
        let names_item = Opcode::from_u8(h[1]).is_some_and(|op| {
            use Opcode::*;
            matches!(
                op.loud(),
                Get | GetK
                    | Set
                    | Add
                    | Replace
                    | Delete
                    | Increment
                    | Decrement
                    | Append
                    | Prepend
                    | Touch
                    | Gat
                    | GatK
            )
        });
        let start = binary::HEADER_LEN + usize::from(h[4]);
        let key_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let key = input
            .get(start..start + key_len)
            .filter(|k| names_item && item_key(k) && start + key_len <= len);
        return Some(Ahead { key, len });
    }
    let nl = memchr::memchr(b'\n', &input[..input.len().min(LINE_AHEAD_MAX)])?;
    let line = match &input[..nl] {
        [l @ .., b'\r'] => l,
        l => l,
    };
    let mut tokens = Tokens::new(line).iter();
    let command = tokens.next().unwrap_or_default();
    // Where the key is among the tokens after the command, and where the
    // length of a data block is.
    let (key_at, data_at) = match command {
        b"get" | b"gets" | b"delete" | b"incr" | b"decr" | b"touch" | b"mg" | b"md" | b"ma"
        | b"me" => (Some(0), None),
        b"gat" | b"gats" => (Some(1), None),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => (Some(0), Some(3)),
        b"ms" => (Some(0), Some(1)),
        _ => (None, None),
    };
    let mut key = None;
    let mut data = 0;
    for (i, t) in tokens
        .enumerate()
        .take(data_at.max(key_at).map_or(0, |n| n + 1))
    {
        if Some(i) == key_at {
            key = Some(t).filter(|k| item_key(k));
        }
        if Some(i) == data_at {
            data = parse_vlen(t)?.checked_add(2)?;
        }
    }
    let len = (nl + 1).checked_add(data)?;
    (len <= input.len()).then_some(Ahead { key, len })
}

/// Checks a meta key: plain, or base64 that decodes to 1..=250 bytes.
fn check_meta_key(key: &[u8], base64: bool) -> Result<(), &'static str> {
    if key.len() > KEY_MAX_LENGTH {
        return Err(BAD_FORMAT);
    }
    if base64 {
        let mut buf = [0u8; KEY_MAX_LENGTH];
        base64::decode(key, &mut buf).ok_or("error decoding key")?;
        Ok(())
    } else if valid_key(key) {
        Ok(())
    } else {
        Err(BAD_FORMAT)
    }
}

/// The key a meta command operates on: `raw` itself, or its base64 decoding
/// into `buf`. The parser has checked it, so decoding cannot fail for keys
/// from [`parse`]; an undecodable key yields the raw bytes.
pub fn decode_key<'k>(raw: &'k [u8], base64: bool, buf: &'k mut [u8; KEY_MAX_LENGTH]) -> &'k [u8] {
    if base64 {
        if let Some(n) = base64::decode(raw, buf) {
            return &buf[..n];
        }
    }
    raw
}

/// Whether a line without its end yet may grow past the line limit: as in
/// memcached, a `get` or `gets` after at most 100 spaces (multi-key gets can
/// be long; `gat` lines cannot).
fn is_retrieval_prefix(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let buf = &buf[spaces..];
    spaces <= 100 && (buf.starts_with(b"get ") || buf.starts_with(b"gets "))
}

/// Finds the `\n` ending the first line. As in memcached, a line whose end
/// has arrived is parsed whatever its length; the limit only applies while
/// no end is buffered (the buffer then holds at most the limit plus a read).
fn find_newline(buf: &[u8], limits: &Limits) -> Result<usize, ParseError<'static>> {
    let limit = if is_retrieval_prefix(buf) {
        limits.max_get_line.max(limits.max_line)
    } else {
        limits.max_line
    };
    match memchr::memchr(b'\n', buf) {
        Some(i) => Ok(i),
        None if buf.len() > limit => Err(ParseError::LineTooLong),
        None => Err(ParseError::Incomplete),
    }
}

/// The command line at the front of `buf`: its command, the rest of it
/// (empty without arguments) and its length, `\n` included.
fn command_line<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<(&'a [u8], &'a [u8], usize), ParseError<'a>> {
    let nl = find_newline(buf, limits)?;
    let line = match &buf[..nl] {
        [rest @ .., b'\r'] => rest,
        l => l,
    };
    // memcached's tokenizer skips spaces before the command too.
    let line = trim_start(line);
    Ok(match memchr::memchr(b' ', line) {
        Some(i) => (&line[..i], &line[i + 1..], nl + 1),
        None => (line, &line[line.len()..], nl + 1),
    })
}

/// Parses one request from the front of `buf`.
///
/// Returns the request and the bytes it used (line and data block), or what to
/// do instead (see [`ParseError`]). Never panics, never allocates; keys and
/// values borrow from `buf`.
///
/// Differences from memcached, all at the edges: `noreply` is recognized only
/// after a command's required arguments (memcached also takes `delete noreply`
/// as "delete key `noreply` quietly"); a NUL byte in a line is refused
/// (memcached ends the line there); the `O` length check is made here,
/// before the command runs; a lone `\n` ends a line of any length
/// (memcached wants at least 4 bytes);
/// numbers that do not fit their 32 or 64 bits are refused (memcached wraps
/// a 32-bit one). The README's "Deviations from memcached" lists them all.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Result<(Request<'a>, usize), ParseError<'a>> {
    let (cmd, rest, line_len) = command_line(buf, limits)?;
    let fail = |f: Fail| ParseError::Client {
        message: f.message,
        consumed: line_len,
        noreply: f.noreply,
    };
    let storage = |c| parse_storage(c, cmd, rest, buf, line_len, limits);
    let req = match cmd {
        // memcached answers ERROR to a command without the tokens it needs
        // (a retrieval without a key, `incr`/`decr`/`touch` without two
        // arguments or with more than three, `flush_all` with more than two).
        b"get" | b"gets" | b"gat" | b"gats" if Tokens::new(rest).is_empty() => {
            return Err(unknown(line_len))
        }
        b"get" => parse_get(rest, false),
        b"gets" => parse_get(rest, true),
        b"gat" => parse_gat(rest, false),
        b"gats" => parse_gat(rest, true),
        b"set" => return storage(StoreCommand::Set),
        b"add" => return storage(StoreCommand::Add),
        b"replace" => return storage(StoreCommand::Replace),
        b"append" => return storage(StoreCommand::Append),
        b"prepend" => return storage(StoreCommand::Prepend),
        b"cas" => return storage(StoreCommand::Cas),
        b"delete" => match parse_delete(Args::split(cmd, rest)) {
            Some(r) => r,
            None => return Err(unknown(line_len)),
        },
        b"incr" | b"decr" | b"touch" if !(2..=3).contains(&Args::split(cmd, rest).total) => {
            return Err(unknown(line_len))
        }
        b"flush_all" if Args::split(cmd, rest).total > 2 => return Err(unknown(line_len)),
        b"incr" => parse_arith(ArithOp::Incr, Args::split(cmd, rest)),
        b"decr" => parse_arith(ArithOp::Decr, Args::split(cmd, rest)),
        b"touch" => parse_touch(Args::split(cmd, rest)),
        b"flush_all" => Ok(parse_flush_all(Args::split(cmd, rest))),
        b"version" => Ok(Request::Version),
        b"verbosity" => match parse_verbosity(Args::split(cmd, rest)) {
            Some(r) => r,
            None => return Err(unknown(line_len)),
        },
        b"shutdown" => Ok(Request::Shutdown {
            args: Tokens::new(rest),
        }),
        b"cache_memlimit" => match parse_memlimit(Args::split(cmd, rest)) {
            Some(r) => Ok(r),
            None => return Err(unknown(line_len)),
        },
        b"stats" => Ok(Request::Stats {
            args: Tokens::new(rest),
        }),
        b"lru_crawler" => Ok(Request::LruCrawler {
            args: Tokens::new(rest),
        }),
        b"slabs" => Ok(Request::Slabs {
            args: Tokens::new(rest),
        }),
        b"lru" => Ok(Request::Lru {
            args: Tokens::new(rest),
        }),
        b"watch" => Ok(Request::Watch {
            args: Tokens::new(rest),
        }),
        b"quit" => Ok(Request::Quit),
        b"mn" => Ok(Request::MetaNoop),
        // memcached answers ERROR to a meta command without a key.
        b"mg" | b"ms" | b"md" | b"ma" if Tokens::new(rest).is_empty() => {
            return Err(unknown(line_len))
        }
        b"mg" => parse_meta(
            rest,
            |key, flags| Request::MetaGet { key, flags },
            MetaCmd::Get,
        ),
        b"md" => parse_meta(
            rest,
            |key, flags| Request::MetaDelete { key, flags },
            MetaCmd::Delete,
        ),
        b"ma" => parse_meta(
            rest,
            |key, flags| Request::MetaArith { key, flags },
            MetaCmd::Arith,
        ),
        b"me" => parse_meta_debug(rest),
        b"ms" => return parse_mset(rest, buf, line_len, limits),
        _ => {
            let a = Args::split(cmd, rest);
            if a.last.starts_with(b"HTTP/") {
                return Err(ParseError::Http);
            }
            return Err(ParseError::UnknownCommand { consumed: line_len });
        }
    };
    req.map(|r| (r, line_len)).map_err(fail)
}

/// `ERROR` for a known command with a token count memcached does not take.
fn unknown(consumed: usize) -> ParseError<'static> {
    ParseError::UnknownCommand { consumed }
}

fn parse_get(rest: &[u8], cas: bool) -> Result<Request<'_>, Fail> {
    let keys = Tokens::new(rest);
    let mut n = 0;
    for k in keys.iter() {
        if !valid_key(k) {
            return Err(BAD_FORMAT.into());
        }
        n += 1;
    }
    if n == 0 {
        return Err(BAD_FORMAT.into());
    }
    Ok(Request::Get { keys, cas })
}

/// `gat <exptime> <key>*`: as memcached, an exptime without keys answers
/// `END`, and a bad exptime is reported before the keys are looked at.
fn parse_gat(rest: &[u8], cas: bool) -> Result<Request<'_>, Fail> {
    let (first, keys) = next_token(rest).unwrap_or_default();
    let keys = Tokens::new(keys);
    let exptime = parse_i32(first).ok_or("invalid exptime argument")?;
    if !keys.iter().all(valid_key) {
        return Err(BAD_FORMAT.into());
    }
    Ok(Request::GetAndTouch { exptime, keys, cas })
}

/// A classic storage command's line, parsed before its data block (see
/// [`parse_value_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreHead<'a> {
    /// Which storage command.
    pub command: StoreCommand,
    /// The key.
    pub key: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// Expiry time.
    pub exptime: i32,
    /// The data block's length (without its `\r\n`), within the limits.
    pub vlen: usize,
    /// The CAS unique to compare (`cas` only; 0 otherwise).
    pub cas_unique: u64,
    /// Send no response.
    pub noreply: bool,
    /// The line's length, `\r\n` included: where the data block starts.
    pub line_len: usize,
}

/// A storage request's line at the front of `buf` whose data block has not
/// all arrived: a server may then receive the value itself, straight into
/// where it is stored. `None` for anything else ([`parse`] says what).
pub fn parse_value_head<'a>(buf: &'a [u8], limits: &Limits) -> Option<ValueHead<'a>> {
    let (cmd, rest, line_len) = command_line(buf, limits).ok()?;
    let command = match cmd {
        b"set" => StoreCommand::Set,
        b"add" => StoreCommand::Add,
        b"replace" => StoreCommand::Replace,
        b"append" => StoreCommand::Append,
        b"prepend" => StoreCommand::Prepend,
        b"cas" => StoreCommand::Cas,
        b"ms" => {
            let head = ValueHead::MetaSet(mset_head(rest, line_len, limits).ok()?);
            return head.still_coming(buf.len());
        }
        _ => return None,
    };
    let head = ValueHead::Store(store_head(command, cmd, rest, line_len, limits).ok()?);
    head.still_coming(buf.len())
}

/// A storage request's line, parsed before its data block (see
/// [`parse_value_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueHead<'a> {
    /// `set`, `add`, `replace`, `append`, `prepend`, `cas`.
    Store(StoreHead<'a>),
    /// `ms`.
    MetaSet(MetaSetHead<'a>),
}

/// An `ms` line, parsed before its data block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaSetHead<'a> {
    /// The key as sent (base64 with the `b` flag).
    pub key: &'a [u8],
    /// The flags.
    pub flags: MetaFlags<'a>,
    /// The data block's length (without its `\r\n`), within the limits.
    pub vlen: usize,
    /// The line's length, `\r\n` included: where the data block starts.
    pub line_len: usize,
}

impl<'a> ValueHead<'a> {
    /// The data block's length (without its `\r\n`).
    pub fn vlen(&self) -> usize {
        match self {
            ValueHead::Store(h) => h.vlen,
            ValueHead::MetaSet(h) => h.vlen,
        }
    }

    /// The line's length, `\r\n` included: where the data block starts.
    pub fn line_len(&self) -> usize {
        match self {
            ValueHead::Store(h) => h.line_len,
            ValueHead::MetaSet(h) => h.line_len,
        }
    }

    /// The key the item is stored under (`buf` holds a decoded base64 one).
    pub fn key<'k>(&'k self, buf: &'k mut [u8; KEY_MAX_LENGTH]) -> &'k [u8] {
        match self {
            ValueHead::Store(h) => h.key,
            ValueHead::MetaSet(h) => decode_key(h.key, h.flags.base64(), buf),
        }
    }

    /// Whether the request changes a stored value rather than replacing it
    /// (`append`, `prepend`, `ms` in mode A or P): the new item holds the
    /// old value too.
    pub fn edits(&self) -> bool {
        match self {
            ValueHead::Store(h) => {
                matches!(h.command, StoreCommand::Append | StoreCommand::Prepend)
            }
            ValueHead::MetaSet(h) => matches!(h.flags.mode(), Some(b'A' | b'P')),
        }
    }

    /// The error answered for a data block not ended by `\r\n` (its bytes
    /// and terminator are dropped).
    pub fn bad_data_chunk(&self) -> ParseError<'a> {
        let noreply = match self {
            ValueHead::Store(h) => h.noreply,
            ValueHead::MetaSet(_) => false,
        };
        ParseError::Client {
            message: BAD_DATA_CHUNK,
            consumed: self.line_len() + self.vlen() + 2,
            noreply,
        }
    }

    /// The error answered when no memory is left for the value (its bytes
    /// and terminator are dropped; a `set`'s old item goes too).
    pub fn out_of_memory(&self) -> ParseError<'a> {
        let consumed = self.line_len() + self.vlen() + 2;
        match self {
            ValueHead::Store(h) => ParseError::NoMemory {
                key: h.key,
                key_base64: false,
                invalidate: h.command == StoreCommand::Set,
                noreply: h.noreply,
                consumed,
                command: h.command,
                vlen: self.vlen() as u32,
            },
            ValueHead::MetaSet(h) => ParseError::NoMemory {
                key: h.key,
                key_base64: h.flags.base64(),
                invalidate: true,
                noreply: false,
                consumed,
                command: h.flags.store_command(),
                vlen: self.vlen() as u32,
            },
        }
    }

    /// The request with its data block, `value`.
    pub fn request(&self, value: &'a [u8]) -> Request<'a> {
        match *self {
            ValueHead::Store(h) => Request::Store {
                command: h.command,
                key: h.key,
                flags: h.flags,
                exptime: h.exptime,
                value,
                cas_unique: h.cas_unique,
                noreply: h.noreply,
            },
            ValueHead::MetaSet(h) => Request::MetaSet {
                key: h.key,
                value,
                flags: h.flags,
            },
        }
    }

    /// The head, if `have` bytes do not hold its whole request.
    fn still_coming(self, have: usize) -> Option<Self> {
        (have < self.line_len() + self.vlen() + 2).then_some(self)
    }
}

/// A storage command's line; errors as [`parse`] answers them.
fn store_head<'a>(
    command: StoreCommand,
    cmd: &'a [u8],
    rest: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Result<StoreHead<'a>, ParseError<'a>> {
    let a = Args::split(cmd, rest);
    let min = if command == StoreCommand::Cas { 5 } else { 4 };
    // memcached takes the arguments and one more token (`noreply` or not),
    // and answers any other count with `ERROR`.
    if a.total != min && a.total != min + 1 {
        return Err(unknown(line_len));
    }
    // Errors on the command line drop the line only, as memcached does: the
    // data block that follows is then read as commands (memcached skips a
    // data block only for a value it refuses, too large or out of memory).
    // memcached has read `noreply` (the last token) by then.
    let line_error = ParseError::Client {
        message: BAD_FORMAT,
        consumed: line_len,
        noreply: a.last == b"noreply",
    };
    let key = a.toks[0];
    if !valid_key(key) {
        return Err(line_error);
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (
        parse_u32(a.toks[1]),
        parse_i32(a.toks[2]),
        parse_vlen(a.toks[3]),
    ) else {
        return Err(line_error);
    };
    let cas_unique = if command == StoreCommand::Cas {
        parse_u64(a.toks[4]).ok_or(line_error)?
    } else {
        0
    };
    let noreply = a.noreply(min);
    if !limits.fits(key.len(), flags, vlen) {
        return Err(ParseError::TooLarge {
            key,
            key_base64: false,
            invalidate: command == StoreCommand::Set,
            noreply,
            consumed: line_len + vlen + 2,
            command,
            vlen: vlen as u32,
        });
    }
    Ok(StoreHead {
        command,
        key,
        flags,
        exptime,
        vlen,
        cas_unique,
        noreply,
        line_len,
    })
}

fn parse_storage<'a>(
    command: StoreCommand,
    cmd: &'a [u8],
    rest: &'a [u8],
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Result<(Request<'a>, usize), ParseError<'a>> {
    let head = ValueHead::Store(store_head(command, cmd, rest, line_len, limits)?);
    let value =
        data_block(buf, line_len, head.vlen()).map_err(|e| e.unwrap_or(head.bad_data_chunk()))?;
    Ok((head.request(value), line_len + head.vlen() + 2))
}

/// A data block length: memcached takes 0 ..= `i32::MAX - 2` (the length
/// plus its `\r\n` must fit an `int`), anything else is a bad command line.
fn parse_vlen(tok: &[u8]) -> Option<usize> {
    match parse_i32(tok) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => Some(v as usize),
        _ => None,
    }
}

/// The `vlen` bytes after the line, checking the `\r\n` after them.
/// `Err(Some(Incomplete))` when they have not all arrived, `Err(None)` when the
/// terminator is wrong.
fn data_block(
    buf: &[u8],
    line_len: usize,
    vlen: usize,
) -> Result<&[u8], Option<ParseError<'static>>> {
    let end = line_len + vlen;
    match buf.get(end..end + 2) {
        None => Err(Some(ParseError::Incomplete)),
        Some(b"\r\n") => Ok(&buf[line_len..end]),
        Some(_) => Err(None),
    }
}

/// `delete <key> [0] [noreply]` (the 0 is the hold time of old memcached
/// versions, still accepted); `None`: a token count memcached answers with
/// `ERROR`.
fn parse_delete(a: Args<'_>) -> Option<Result<Request<'_>, Fail>> {
    if !(1..=3).contains(&a.total) {
        return None;
    }
    let noreply = a.noreply(1);
    if a.total > 1 {
        let zero = a.toks[1] == b"0";
        let valid = (a.total == 2 && (zero || noreply)) || (a.total == 3 && zero && noreply);
        if !valid {
            return Some(Err(Fail {
                message: DELETE_USAGE,
                noreply,
            }));
        }
    }
    if !valid_key(a.toks[0]) {
        return Some(Err(Fail {
            message: BAD_FORMAT,
            noreply,
        }));
    }
    Some(Ok(Request::Delete {
        key: a.toks[0],
        noreply,
    }))
}

fn parse_arith(op: ArithOp, a: Args<'_>) -> Result<Request<'_>, Fail> {
    if a.total < 2 {
        return Err(BAD_FORMAT.into());
    }
    // memcached takes the last token as `noreply` whatever the count, so
    // `incr k noreply` fails silently.
    let noreply = a.last == b"noreply";
    let fail = |message| Fail { message, noreply };
    if !valid_key(a.toks[0]) {
        return Err(fail(BAD_FORMAT));
    }
    let delta = parse_u64(a.toks[1]).ok_or_else(|| fail("invalid numeric delta argument"))?;
    Ok(Request::Arith {
        op,
        key: a.toks[0],
        delta,
        noreply,
    })
}

fn parse_touch(a: Args<'_>) -> Result<Request<'_>, Fail> {
    if a.total < 2 {
        return Err(BAD_FORMAT.into());
    }
    // memcached takes the last token as `noreply` whatever the count, so
    // `incr k noreply` fails silently.
    let noreply = a.last == b"noreply";
    let fail = |message| Fail { message, noreply };
    if !valid_key(a.toks[0]) {
        return Err(fail(BAD_FORMAT));
    }
    let exptime = parse_i32(a.toks[1]).ok_or_else(|| fail("invalid exptime argument"))?;
    Ok(Request::Touch {
        key: a.toks[0],
        exptime,
        noreply,
    })
}

fn parse_flush_all(a: Args<'_>) -> Request<'_> {
    let noreply = a.noreply(0);
    let delay = if a.total == usize::from(noreply) {
        FlushDelay::Now
    } else {
        parse_i32(a.toks[0]).map_or(FlushDelay::Invalid, FlushDelay::After)
    };
    Request::FlushAll { delay, noreply }
}

/// `verbosity <level> [noreply]`; `None` without a level or with more than
/// two arguments (memcached answers `ERROR`). memcached reads `noreply` as
/// the last token before the level, so `verbosity noreply` is silent.
fn parse_verbosity(a: Args<'_>) -> Option<Result<Request<'_>, Fail>> {
    if !(1..=2).contains(&a.total) {
        return None;
    }
    let noreply = a.last == b"noreply";
    Some(
        parse_u32(a.toks[0])
            .map(|level| Request::Verbosity { level, noreply })
            .ok_or(Fail {
                message: BAD_FORMAT,
                noreply,
            }),
    )
}

/// `cache_memlimit <MiB> [noreply]`; `None` for a token count memcached
/// answers with `ERROR`.
fn parse_memlimit(a: Args<'_>) -> Option<Request<'_>> {
    if !(1..=2).contains(&a.total) {
        return None;
    }
    Some(Request::CacheMemlimit {
        // Larger than 32 bits reads as u32::MAX: refused as bytes, not MiB.
        mib: parse_u64(a.toks[0]).map(|v| v.min(u64::from(u32::MAX)) as u32),
        noreply: a.last == b"noreply",
    })
}

/// [`MetaFlags::parse`]'s error for an opaque over 32 bytes.
const LONG_OPAQUE: &str = "opaque token too long";

/// Whether the flags `raw` name a one-letter mode (`M?`) not in `modes`.
fn bad_mode(raw: &[u8], modes: &[u8]) -> bool {
    Tokens::new(raw)
        .iter()
        .any(|t| t.len() == 2 && t[0] == b'M' && !modes.contains(&t[1]))
}

/// Key and flags of `mg`, `md`, `ma` (`arith`: memcached reports every flag
/// error of `ma` as "invalid or duplicate flag" and checks its mode).
/// Which of the keyed meta commands [`parse_meta`] parses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MetaCmd {
    Get,
    Delete,
    Arith,
}

fn parse_meta<'a>(
    rest: &'a [u8],
    make: impl FnOnce(&'a [u8], MetaFlags<'a>) -> Request<'a>,
    cmd: MetaCmd,
) -> Result<Request<'a>, Fail> {
    let (key, raw) = next_token(rest).ok_or(BAD_FORMAT)?;
    // memcached checks an `md` or `ma` key before its flags and calls a bad
    // one a bad command line; every error of their flags (a base64 key that
    // does not decode included) is "invalid or duplicate flag".
    let strict = cmd != MetaCmd::Get;
    if strict {
        let base64 = Tokens::new(raw).iter().any(|t| t == b"b");
        if key.len() > KEY_MAX_LENGTH || (!base64 && !valid_key(key)) {
            return Err(BAD_FORMAT.into());
        }
    }
    let flags = match meta_key_and_flags(key, raw, 2) {
        Ok(f) => f,
        // memcached checks `ma`'s mode, then the opaque's length, each with
        // its own message.
        Err(LONG_OPAQUE) if cmd == MetaCmd::Arith && bad_mode(raw, b"I+D-") => {
            return Err("invalid mode for ma M token".into())
        }
        Err(LONG_OPAQUE) => return Err(LONG_OPAQUE.into()),
        Err(_) if strict => return Err("invalid or duplicate flag".into()),
        Err(e) => return Err(e.into()),
    };
    if cmd == MetaCmd::Arith && !matches!(flags.mode(), None | Some(b'I' | b'+' | b'D' | b'-')) {
        return Err("invalid mode for ma M token".into());
    }
    Ok(make(key, flags))
}

/// Checks the token count (`before` tokens precede the flags), the key and
/// the flags.
fn meta_key_and_flags<'a>(
    key: &'a [u8],
    raw: &'a [u8],
    before: usize,
) -> Result<MetaFlags<'a>, &'static str> {
    if key.len() > KEY_MAX_LENGTH {
        return Err(BAD_FORMAT);
    }
    if before + Tokens::new(raw).iter().count() >= META_MAX_TOKENS {
        return Err("options flags are too long");
    }
    let flags = MetaFlags::parse_keyed(raw, || {
        base64::decode(key, &mut [0u8; KEY_MAX_LENGTH]).is_some()
    })?;
    // A base64 key was checked by the flag pass.
    if !flags.base64() && !valid_key(key) {
        return Err(BAD_FORMAT);
    }
    Ok(flags)
}

fn parse_meta_debug(rest: &[u8]) -> Result<Request<'_>, Fail> {
    let (key, after) = next_token(rest).ok_or(BAD_FORMAT)?;
    let base64 = next_token(after).is_some_and(|(t, _)| t == b"b");
    check_meta_key(key, base64).map_err(|_| BAD_FORMAT)?;
    Ok(Request::MetaDebug { key, base64 })
}

fn parse_mset<'a>(
    rest: &'a [u8],
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Result<(Request<'a>, usize), ParseError<'a>> {
    let head = ValueHead::MetaSet(mset_head(rest, line_len, limits)?);
    let value =
        data_block(buf, line_len, head.vlen()).map_err(|e| e.unwrap_or(head.bad_data_chunk()))?;
    Ok((head.request(value), line_len + head.vlen() + 2))
}

/// An `ms` line; errors as [`parse`] answers them.
fn mset_head<'a>(
    rest: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Result<MetaSetHead<'a>, ParseError<'a>> {
    let line_error = ParseError::Client {
        message: BAD_FORMAT,
        consumed: line_len,
        noreply: false,
    };
    let (key, after_key) = next_token(rest).ok_or(line_error)?;
    // As memcached: errors found before the length is read leave the data
    // block to be read as commands.
    if key.len() > KEY_MAX_LENGTH {
        return Err(line_error);
    }
    let (len, raw) = next_token(after_key).ok_or(line_error)?;
    if 3 + Tokens::new(raw).iter().count() >= META_MAX_TOKENS {
        return Err(ParseError::Client {
            message: "options flags too long",
            consumed: line_len,
            noreply: false,
        });
    }
    // Until the length is known the data block cannot be skipped.
    let vlen = match parse_vlen(len) {
        Some(v) => v,
        None => return Err(line_error),
    };
    let consumed = line_len + vlen + 2;
    let swallow = |message| ParseError::Client {
        message,
        consumed,
        noreply: false,
    };
    let flags = match meta_key_and_flags(key, raw, 3) {
        // The mode is checked before the opaque's length, as memcached's.
        Err(LONG_OPAQUE) if bad_mode(raw, b"EAPRS") => {
            return Err(swallow("invalid mode for ms M token"))
        }
        f => f.map_err(swallow)?,
    };
    if !matches!(flags.mode(), None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
        return Err(swallow("invalid mode for ms M token"));
    }
    let mut key_buf = [0u8; KEY_MAX_LENGTH];
    let key_len = decode_key(key, flags.base64(), &mut key_buf).len();
    if !limits.fits(key_len, flags.client_flags().unwrap_or(0), vlen) {
        return Err(ParseError::TooLarge {
            key,
            key_base64: flags.base64(),
            invalidate: true,
            noreply: false,
            consumed,
            command: flags.store_command(),
            vlen: vlen as u32,
        });
    }
    Ok(MetaSetHead {
        key,
        flags,
        vlen,
        line_len,
    })
}

#[cfg(test)]
mod tests;
