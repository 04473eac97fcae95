//! Meta-command flags (`mg`, `ms`, `md`, `ma`).
//!
//! A flag is one token: a character, then (for some flags) an argument, e.g.
//! `v`, `T30`, `Oabc`. Responses echo flags *in the order the client sent
//! them*, so [`MetaFlags`] keeps that order next to the parsed values. As in
//! memcached, every command accepts every known flag and ignores the ones
//! that do not apply to it.

use super::{BAD_FORMAT, OPAQUE_MAX_LENGTH};
use crate::num::{parse_i32, parse_u32, parse_u64, push_i64, push_u64};

/// The most flags one meta command can carry: memcached allows 20 tokens per
/// meta command line, two of which are the command and the key.
pub const META_MAX_FLAGS: usize = 18;

/// The flags of one meta command, borrowed from the request line.
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
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaFlags<'a> {
    order: [u8; META_MAX_FLAGS],
    len: u8,
    seen: u128,
    opaque: Option<&'a [u8]>,
    hint_p: Option<&'a [u8]>,
    hint_l: Option<&'a [u8]>,
    ttl: Option<i32>,
    vivify: Option<i32>,
    recache: Option<i32>,
    compare_cas: Option<u64>,
    new_cas: Option<u64>,
    client_flags: Option<u32>,
    mode: Option<u8>,
    delta: Option<u64>,
    initial: Option<u64>,
}

impl std::fmt::Debug for MetaFlags<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = Vec::new();
        self.encode(&mut out);
        write!(f, "MetaFlags({:?})", String::from_utf8_lossy(&out))
    }
}

impl<'a> MetaFlags<'a> {
    /// No flags.
    pub fn new() -> MetaFlags<'a> {
        MetaFlags::default()
    }

    /// Parses flag tokens in order. Errors are memcached's `CLIENT_ERROR`
    /// messages.
    pub fn parse<I: IntoIterator<Item = &'a [u8]>>(
        tokens: I,
    ) -> Result<MetaFlags<'a>, &'static str> {
        let mut flags = MetaFlags::new();
        for t in tokens {
            flags.push(t)?;
        }
        Ok(flags)
    }

    /// Adds one flag token (e.g. `b"T30"`), as the parser does.
    pub fn push(&mut self, token: &'a [u8]) -> Result<(), &'static str> {
        let Some(&c) = token.first() else {
            return Err(BAD_FORMAT);
        };
        if c >= 127 || self.has(c) {
            return Err("duplicate flag");
        }
        if usize::from(self.len) == META_MAX_FLAGS {
            return Err("options flags are too long");
        }
        let arg = &token[1..];
        const BAD_TOKEN: &str = "bad token in command line format";
        match c {
            b'b' | b'c' | b'f' | b'h' | b'k' | b'l' | b'q' | b's' | b't' | b'u' | b'v' | b'x'
            | b'I' => {}
            b'O' => {
                if token.len() > OPAQUE_MAX_LENGTH {
                    return Err("opaque token too long");
                }
                self.opaque = Some(arg);
            }
            b'P' => self.hint_p = Some(arg),
            b'L' => self.hint_l = Some(arg),
            b'T' => self.ttl = Some(parse_i32(arg).ok_or(BAD_TOKEN)?),
            b'N' => self.vivify = Some(parse_i32(arg).ok_or(BAD_TOKEN)?),
            b'R' => self.recache = Some(parse_i32(arg).ok_or(BAD_TOKEN)?),
            b'C' => self.compare_cas = Some(parse_u64(arg).ok_or(BAD_TOKEN)?),
            b'E' => self.new_cas = Some(parse_u64(arg).ok_or(BAD_TOKEN)?),
            b'F' => self.client_flags = Some(parse_u32(arg).ok_or(BAD_FORMAT)?),
            b'M' => self.mode = arg.first().copied(),
            b'J' => self.initial = Some(parse_u64(arg).ok_or("invalid numeric initial value")?),
            b'D' => self.delta = Some(parse_u64(arg).ok_or("invalid numeric delta value")?),
            _ => return Err("invalid flag"),
        }
        self.seen |= 1 << c;
        self.order[usize::from(self.len)] = c;
        self.len += 1;
        Ok(())
    }

    /// Whether flag `c` was given.
    #[inline]
    pub fn has(&self, c: u8) -> bool {
        c < 128 && self.seen >> c & 1 == 1
    }

    /// The flag characters in the order given.
    pub fn order(&self) -> &[u8] {
        &self.order[..usize::from(self.len)]
    }

    /// `b`: the key is base64.
    pub fn base64(&self) -> bool {
        self.has(b'b')
    }

    /// `q`: quiet mode.
    pub fn quiet(&self) -> bool {
        self.has(b'q')
    }

    /// `O`: the opaque token's argument.
    pub fn opaque(&self) -> Option<&'a [u8]> {
        self.opaque
    }

    /// `T`: TTL.
    pub fn ttl(&self) -> Option<i32> {
        self.ttl
    }

    /// `N`: vivify-on-miss TTL.
    pub fn vivify(&self) -> Option<i32> {
        self.vivify
    }

    /// `R`: recache threshold TTL.
    pub fn recache(&self) -> Option<i32> {
        self.recache
    }

    /// `C`: CAS to compare.
    pub fn compare_cas(&self) -> Option<u64> {
        self.compare_cas
    }

    /// `E`: CAS to assign.
    pub fn new_cas(&self) -> Option<u64> {
        self.new_cas
    }

    /// `F`: client flags.
    pub fn client_flags(&self) -> Option<u32> {
        self.client_flags
    }

    /// `M`: the mode character (`None` when absent or empty).
    pub fn mode(&self) -> Option<u8> {
        self.mode
    }

    /// `D`: `ma` delta.
    pub fn delta(&self) -> Option<u64> {
        self.delta
    }

    /// `J`: `ma` initial value.
    pub fn initial(&self) -> Option<u64> {
        self.initial
    }

    /// Appends the flags as tokens, each preceded by a space.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for &c in self.order() {
            out.push(b' ');
            out.push(c);
            match c {
                b'O' => out.extend_from_slice(self.opaque.unwrap_or_default()),
                b'P' => out.extend_from_slice(self.hint_p.unwrap_or_default()),
                b'L' => out.extend_from_slice(self.hint_l.unwrap_or_default()),
                b'T' => push_i64(out, self.ttl.unwrap_or_default().into()),
                b'N' => push_i64(out, self.vivify.unwrap_or_default().into()),
                b'R' => push_i64(out, self.recache.unwrap_or_default().into()),
                b'C' => push_u64(out, self.compare_cas.unwrap_or_default()),
                b'E' => push_u64(out, self.new_cas.unwrap_or_default()),
                b'F' => push_u64(out, self.client_flags.unwrap_or_default().into()),
                b'J' => push_u64(out, self.initial.unwrap_or_default()),
                b'D' => push_u64(out, self.delta.unwrap_or_default()),
                b'M' => out.extend(self.mode),
                _ => {}
            }
        }
    }
}
