//! Meta-command flags (`mg`, `ms`, `md`, `ma`).
//!
//! A flag is one token: a character, then (for some flags) an argument, e.g.
//! `v`, `T30`, `Oabc`. Responses echo flags *in the order the client sent
//! them*, so [`MetaFlags`] keeps the flag text as sent (responses walk it, as
//! memcached does) next to the values it parsed and checked once. As in
//! memcached, every command accepts every known flag and ignores the ones
//! that do not apply to it.

use super::{Tokens, BAD_FORMAT, OPAQUE_MAX_LENGTH};
use crate::num::{parse_i32, parse_u32, parse_u64};

/// The most flags one meta command can carry: memcached refuses 20 tokens
/// per meta command line (its count includes an end marker), two of which
/// are the command and the key (`ms` has one more, the length).
pub const META_MAX_FLAGS: usize = 17;

/// The flags of one meta command: the flag text borrowed from the request
/// line, checked, with the numeric arguments parsed.
///
/// | flag | argument | meaning |
/// |---|---|---|
/// | `b` | | the key is base64 |
/// | `c` `f` `h` `k` `l` `s` `t` | | return CAS, client flags, hit-before, key, seconds since last access, size, TTL |
/// | `v` | | return the value |
/// | `q` | | quiet: suppress the nominal response (`EN` for `mg`, `HD` otherwise) |
/// | `u` | | do not bump the item in the LRU |
/// | `x` | | `md`: drop the value, keep the item |
/// | `I` | | invalidate: `md` marks stale, `ms` may store a stale value |
/// | `O` | opaque (≤ 31 bytes) | echoed back |
/// | `P` `L` | anything | proxy hints, ignored |
/// | `T` | TTL | new TTL (`mg`, `ma`, `md` with `I`); TTL (`ms`) |
/// | `N` | TTL | vivify on miss with this TTL |
/// | `R` | TTL | win the recache token if the TTL left is below this |
/// | `C` | u64 | compare CAS |
/// | `E` | u64 | use as the new CAS |
/// | `F` | u32 | client flags (`ms`) |
/// | `M` | one char | mode: `ms` E A P R S, `ma` I + D - |
/// | `D` | u64 | `ma` delta (default 1) |
/// | `J` | u64 | `ma` initial value on vivify (default 0) |
///
/// Two values are equal when their flag tokens are (spacing aside).
#[derive(Clone, Copy, Default)]
pub struct MetaFlags<'a> {
    /// The flag tokens as sent.
    raw: &'a [u8],
    /// One bit per flag letter present (bit `c - b'A'`).
    seen: u64,
    ttl: i32,
    vivify: i32,
    recache: i32,
    client_flags: u32,
    compare_cas: u64,
    new_cas: u64,
    delta: u64,
    initial: u64,
    /// The `M` character, 0 when absent or empty.
    mode: u8,
}

/// Why one flag token was refused (see [`MetaFlags::parse`]).
enum FlagError {
    /// Unknown or repeated: the flags are refused with this at once.
    Fatal(&'static str),
    /// A bad argument: refused with this once all flags are seen.
    Arg(&'static str),
    /// A bad `F` argument: memcached notes the error without a message.
    ClientFlags,
    /// An `O` token over [`OPAQUE_MAX_LENGTH`].
    LongOpaque,
}

/// The `seen` bit of a flag letter.
#[inline]
fn bit(c: u8) -> Option<u64> {
    c.is_ascii_alphabetic().then(|| 1u64 << (c - b'A'))
}

impl std::fmt::Debug for MetaFlags<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetaFlags({:?})", Tokens::new(self.raw))
    }
}

impl PartialEq for MetaFlags<'_> {
    fn eq(&self, other: &Self) -> bool {
        Tokens::new(self.raw) == Tokens::new(other.raw)
    }
}

impl Eq for MetaFlags<'_> {}

impl<'a> MetaFlags<'a> {
    /// Parses and checks space-separated flag tokens (e.g. `b"v t T30"`).
    /// Errors are memcached's `CLIENT_ERROR` messages.
    pub fn parse(raw: &'a [u8]) -> Result<MetaFlags<'a>, &'static str> {
        Self::parse_keyed(raw, || true)
    }

    /// [`parse`](Self::parse) for a key that `decodes` as base64 or not: a
    /// `b` flag on a key that does not is a bad argument like any other, so
    /// "error decoding key" is reported where memcached's flag pass reports
    /// it (a later bad argument or any unknown flag wins over it, and it over
    /// a too long opaque).
    pub(crate) fn parse_keyed(
        raw: &'a [u8],
        decodes: impl Fn() -> bool,
    ) -> Result<MetaFlags<'a>, &'static str> {
        let mut f = MetaFlags {
            raw,
            ..MetaFlags::default()
        };
        // As memcached's flag pass: an unknown or repeated flag fails at
        // once; a bad argument is noted and the pass goes on (the last such
        // error is reported, an unknown flag after it still wins); a too
        // long opaque is found only once the flags are good.
        let mut bad_arg = None;
        let mut long_opaque = false;
        for (n, t) in Tokens::new(raw).iter().enumerate() {
            if n == META_MAX_FLAGS {
                return Err("options flags are too long");
            }
            match f.add(t) {
                Ok(()) if t[0] == b'b' && !decodes() => bad_arg = Some("error decoding key"),
                Ok(()) => {}
                Err(FlagError::Fatal(e)) => return Err(e),
                Err(FlagError::Arg(e)) => bad_arg = Some(e),
                // A bad `F` keeps the message of an earlier bad argument.
                Err(FlagError::ClientFlags) => bad_arg = bad_arg.or(Some(BAD_FORMAT)),
                Err(FlagError::LongOpaque) => long_opaque = true,
            }
        }
        match bad_arg {
            Some(e) => Err(e),
            None if long_opaque => Err(super::LONG_OPAQUE),
            None => Ok(f),
        }
    }

    fn add(&mut self, token: &'a [u8]) -> Result<(), FlagError> {
        use FlagError::{Arg, ClientFlags, Fatal};
        let c = token[0];
        if c >= 127 {
            return Err(Fatal("duplicate flag"));
        }
        let Some(bit) = bit(c) else {
            return Err(Fatal("invalid flag"));
        };
        if self.seen & bit != 0 {
            return Err(Fatal("duplicate flag"));
        }
        let arg = &token[1..];
        const BAD_TOKEN: FlagError = Arg("bad token in command line format");
        // Seen even when its argument is bad, as in memcached.
        self.seen |= bit;
        match c {
            b'b' | b'c' | b'f' | b'h' | b'k' | b'l' | b'q' | b's' | b't' | b'u' | b'v' | b'x'
            | b'I' | b'P' | b'L' => {}
            b'O' if token.len() > OPAQUE_MAX_LENGTH => return Err(FlagError::LongOpaque),
            b'O' => {}
            b'T' => self.ttl = parse_i32(arg).ok_or(BAD_TOKEN)?,
            b'N' => self.vivify = parse_i32(arg).ok_or(BAD_TOKEN)?,
            b'R' => self.recache = parse_i32(arg).ok_or(BAD_TOKEN)?,
            b'C' => self.compare_cas = parse_u64(arg).ok_or(BAD_TOKEN)?,
            b'E' => self.new_cas = parse_u64(arg).ok_or(BAD_TOKEN)?,
            b'F' => self.client_flags = parse_u32(arg).ok_or(ClientFlags)?,
            b'M' if arg.len() != 1 => return Err(Arg("incorrect length for M token")),
            b'M' => self.mode = arg[0],
            b'J' => self.initial = parse_u64(arg).ok_or(Arg("invalid numeric initial value"))?,
            b'D' => self.delta = parse_u64(arg).ok_or(Arg("invalid numeric delta value"))?,
            _ => {
                self.seen &= !bit;
                return Err(Fatal("invalid flag"));
            }
        }
        Ok(())
    }

    /// Whether flag `c` was given.
    #[inline]
    pub fn has(&self, c: u8) -> bool {
        bit(c).is_some_and(|b| self.seen & b != 0)
    }

    /// The flag tokens in the order given (`v`, `T30`, `Oabc`, …).
    pub fn tokens(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        Tokens::new(self.raw).iter()
    }

    /// `b`: the key is base64.
    pub fn base64(&self) -> bool {
        self.has(b'b')
    }

    /// `q`: quiet mode.
    pub fn quiet(&self) -> bool {
        self.has(b'q')
    }

    fn get<T: Copy>(&self, c: u8, v: T) -> Option<T> {
        self.has(c).then_some(v)
    }

    /// `O`: the opaque token's argument.
    pub fn opaque(&self) -> Option<&'a [u8]> {
        if !self.has(b'O') {
            return None;
        }
        self.tokens().find(|t| t[0] == b'O').map(|t| &t[1..])
    }

    /// `T`: TTL.
    pub fn ttl(&self) -> Option<i32> {
        self.get(b'T', self.ttl)
    }

    /// `N`: vivify-on-miss TTL.
    pub fn vivify(&self) -> Option<i32> {
        self.get(b'N', self.vivify)
    }

    /// `R`: recache threshold TTL.
    pub fn recache(&self) -> Option<i32> {
        self.get(b'R', self.recache)
    }

    /// `C`: CAS to compare.
    pub fn compare_cas(&self) -> Option<u64> {
        self.get(b'C', self.compare_cas)
    }

    /// `E`: CAS to assign.
    pub fn new_cas(&self) -> Option<u64> {
        self.get(b'E', self.new_cas)
    }

    /// `F`: client flags.
    pub fn client_flags(&self) -> Option<u32> {
        self.get(b'F', self.client_flags)
    }

    /// `M`: the mode character (`None` when absent or empty).
    pub fn mode(&self) -> Option<u8> {
        (self.mode != 0).then_some(self.mode)
    }

    /// The storage command an `ms` with these flags is (memcached's
    /// `watch` lines name it): the mode's, `cas` for a set or replace with
    /// `C`.
    pub fn store_command(&self) -> super::StoreCommand {
        use super::StoreCommand as C;
        let cas = self.compare_cas().is_some();
        match self.mode().unwrap_or(b'S') {
            b'S' | b'R' if cas => C::Cas,
            b'E' => C::Add,
            b'A' => C::Append,
            b'P' => C::Prepend,
            b'R' => C::Replace,
            _ => C::Set,
        }
    }

    /// `D`: `ma` delta.
    pub fn delta(&self) -> Option<u64> {
        self.get(b'D', self.delta)
    }

    /// `J`: `ma` initial value.
    pub fn initial(&self) -> Option<u64> {
        self.get(b'J', self.initial)
    }

    /// Appends the flag tokens, each preceded by a space.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for t in self.tokens() {
            out.push(b' ');
            out.extend_from_slice(t);
        }
    }
}
