//! memcached's binary SASL authentication (`-S`): until a connection
//! authenticates, every binary request but `version` and the three SASL
//! ones (list mechanisms `0x20`, auth `0x21`, step `0x22`) is answered
//! "Auth failure." and the connection closes. The one mechanism is
//! `PLAIN` (RFC 4616: `authzid NUL user NUL password`), checked against a
//! memcached password file (`user:password` lines, the format of
//! memcached's `MEMCACHED_SASL_PWDB`). The password crosses the network
//! as it is, as with memcached's PLAIN.
//!
//! Answers follow memcached 1.6.18 built with Cyrus SASL (Debian's), which
//! the end-to-end tests run beside: an auth whose data is empty is
//! answered "continue" (`0x21`, empty) and a step then carries the
//! credentials; a failed auth or step leaves the connection
//! unauthenticated (it was, or not, before); a mechanism of more than 32
//! bytes is "Invalid arguments" and data past the item size limit "Out of
//! memory", both with the body dropped and the connection kept; a frame of
//! the wrong shape (extras, an auth or step without a mechanism, a list
//! with a key or value) is "Invalid arguments" and closes. Without `-S`
//! the same wrong shapes close too, and well-formed SASL frames are
//! "Unknown command".
//!
//! [`parse`] reads a frame (pure, over bytes, never allocating);
//! [`answer`] runs one against a connection's [`State`].

use crate::auth::AuthFile;
use crate::protocol::binary::{Status, HEADER_LEN, REQUEST_MAGIC};
use crate::protocol::{Limits, KEY_MAX_LENGTH};

/// List the mechanisms.
pub const LIST_MECHS: u8 = 0x20;
/// Start an authentication: key the mechanism, value its first data.
pub const AUTH: u8 = 0x21;
/// Continue one: value the next data.
pub const STEP: u8 = 0x22;
/// What `LIST_MECHS` answers.
pub const MECHANISMS: &[u8] = b"PLAIN";
/// memcached's longest mechanism name.
pub const MAX_MECH: usize = 32;

/// Whether a binary request with this opcode byte may run before the
/// connection has authenticated.
pub fn allowed_before(opcode: u8) -> bool {
    // 0x0b: version.
    matches!(opcode, LIST_MECHS | AUTH | STEP | 0x0b)
}

/// A well-formed SASL request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// List the mechanisms.
    List,
    /// Start with `mech` and its initial `data` (empty: none yet).
    Auth {
        /// The mechanism's name, as sent.
        mech: &'a [u8],
        /// Its initial response.
        data: &'a [u8],
    },
    /// The next `data` of a started authentication.
    Step {
        /// The response.
        data: &'a [u8],
    },
}

/// What the front of a binary input is, to SASL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Not a SASL request (another opcode, a bad magic byte, or lengths
    /// that contradict each other): the binary parser's to answer.
    Other,
    /// Wait for this many bytes in all.
    Incomplete(usize),
    /// A request of `used` bytes.
    Request {
        /// What it asks.
        op: Op<'a>,
        /// Its opcode byte.
        opcode: u8,
        /// Its opaque, echoed.
        opaque: u32,
        /// Its bytes.
        used: usize,
    },
    /// A frame of the wrong shape: "Invalid arguments", then close.
    Invalid {
        /// Its opcode byte.
        opcode: u8,
        /// Its opaque.
        opaque: u32,
    },
    /// Refused with `status`, the connection kept: `consumed` bytes (maybe
    /// more than the input holds) are dropped.
    Refused {
        /// Its opcode byte.
        opcode: u8,
        /// Its opaque.
        opaque: u32,
        /// "Invalid arguments" (a mechanism past [`MAX_MECH`]) or "Out of
        /// memory" (data past the item size limit).
        status: Status,
        /// Header and body.
        consumed: usize,
    },
}

/// Reads the SASL request at the front of `buf`, if it is one. The
/// header alone decides every refusal, so a declared body is never
/// waited for before it is known to be taken.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Frame<'a> {
    match buf {
        [REQUEST_MAGIC, LIST_MECHS..=STEP, ..] => {}
        _ => return Frame::Other,
    }
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Frame::Incomplete(HEADER_LEN);
    };
    let opcode = h[1];
    let key_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let extras_len = usize::from(h[4]);
    let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let opaque = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
    if key_len + extras_len > body_len {
        return Frame::Other;
    }
    let value_len = body_len - key_len;
    let shape_ok = extras_len == 0
        && key_len <= KEY_MAX_LENGTH
        && match opcode {
            LIST_MECHS => body_len == 0,
            _ => key_len > 0,
        };
    if !shape_ok {
        return Frame::Invalid { opcode, opaque };
    }
    let refused = |status| Frame::Refused {
        opcode,
        opaque,
        status,
        consumed: HEADER_LEN + body_len,
    };
    if key_len > MAX_MECH {
        return refused(Status::InvalidArguments);
    }
    if !limits.fits(key_len, 0, value_len) {
        return refused(Status::OutOfMemory);
    }
    let used = HEADER_LEN + body_len;
    let Some(body) = buf.get(HEADER_LEN..used) else {
        return Frame::Incomplete(used);
    };
    let (key, data) = body.split_at(key_len);
    let op = match opcode {
        LIST_MECHS => Op::List,
        AUTH => Op::Auth { mech: key, data },
        _ => Op::Step { data },
    };
    Frame::Request {
        op,
        opcode,
        opaque,
        used,
    }
}

/// PLAIN's message (RFC 4616): the identity to act as, the user, the
/// password. `None` without its two NUL separators.
pub fn plain(data: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let mut parts = data.splitn(3, |&b| b == 0);
    let authzid = parts.next()?;
    let user = parts.next()?;
    let password = parts.next()?;
    Some((authzid, user, password))
}

/// Whether PLAIN `data` names one of `users` with its password, acting
/// as itself (an empty identity, or the user's own name).
pub fn plain_ok(data: &[u8], users: &AuthFile) -> bool {
    match plain(data) {
        Some((authzid, user, password)) => {
            // Checked whatever the shape, so a refusal's time says little.
            let known = users.check(user, password);
            known
                && !user.is_empty()
                && !password.is_empty()
                && (authzid.is_empty() || authzid == user)
        }
        None => false,
    }
}

/// A connection's authentication.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// It may send any request.
    pub authenticated: bool,
    /// A PLAIN auth without data was answered "continue": a step carries
    /// the credentials.
    pub pending: bool,
}

/// The answer to one SASL request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Its status.
    pub status: Status,
    /// Its body.
    pub body: &'static [u8],
    /// An authentication decided (`Some(true)`: accepted), as `stats`
    /// counts them in `auth_cmds` and, refused, `auth_errors`; `None` for
    /// a list or a "continue".
    pub decided: Option<bool>,
}

/// Runs `op` against a connection's `state`.
pub fn answer(state: &mut State, op: Op<'_>, users: &AuthFile) -> Answer {
    let decided = |ok: bool| Answer {
        status: if ok { Status::Ok } else { Status::AuthError },
        body: if ok {
            b"Authenticated"
        } else {
            Status::AuthError.message()
        },
        decided: Some(ok),
    };
    let ok = match op {
        Op::List => {
            return Answer {
                status: Status::Ok,
                body: MECHANISMS,
                decided: None,
            }
        }
        Op::Auth { mech, data } => {
            state.authenticated = false;
            state.pending = false;
            if !mech.eq_ignore_ascii_case(MECHANISMS) {
                false
            } else if data.is_empty() {
                state.pending = true;
                return Answer {
                    status: Status::AuthContinue,
                    body: b"",
                    decided: None,
                };
            } else {
                plain_ok(data, users)
            }
        }
        // A failed step may be tried again (as Cyrus's PLAIN takes it).
        Op::Step { data } => {
            state.authenticated = false;
            state.pending && plain_ok(data, users)
        }
    };
    if ok {
        state.authenticated = true;
        state.pending = false;
    }
    decided(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
        let mut f = vec![REQUEST_MAGIC, opcode];
        f.extend_from_slice(&(key.len() as u16).to_be_bytes());
        f.push(extras.len() as u8);
        f.extend_from_slice(&[0, 0, 0]);
        let body = (extras.len() + key.len() + value.len()) as u32;
        f.extend_from_slice(&body.to_be_bytes());
        f.extend_from_slice(&opaque.to_be_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(extras);
        f.extend_from_slice(key);
        f.extend_from_slice(value);
        f
    }

    fn limits() -> Limits {
        Limits {
            max_item_size: 1 << 20,
            ..Limits::default()
        }
    }

    fn users() -> AuthFile {
        AuthFile::parse_pwdb(b"alice:secret\nbob:pw:extra\n").0
    }

    #[test]
    fn frames() {
        let l = limits();
        let auth = frame(AUTH, b"", b"PLAIN", b"\0alice\0secret", 7);
        assert_eq!(
            parse(&auth, &l),
            Frame::Request {
                op: Op::Auth {
                    mech: b"PLAIN",
                    data: b"\0alice\0secret"
                },
                opcode: AUTH,
                opaque: 7,
                used: auth.len()
            }
        );
        for n in 0..auth.len() {
            let want = if n < HEADER_LEN {
                HEADER_LEN
            } else {
                auth.len()
            };
            assert_eq!(parse(&auth[..n.max(2)], &l), Frame::Incomplete(want), "{n}");
        }
        assert_eq!(parse(&auth[..1], &l), Frame::Other);
        assert_eq!(parse(&frame(0x00, b"", b"k", b"", 0), &l), Frame::Other);
        assert_eq!(parse(&frame(0x23, b"", b"k", b"", 0), &l), Frame::Other);
        let list = frame(LIST_MECHS, b"", b"", b"", 1);
        assert!(matches!(
            parse(&list, &l),
            Frame::Request {
                op: Op::List,
                used: 24,
                ..
            }
        ));
        // Wrong shapes close.
        for bad in [
            frame(LIST_MECHS, b"", b"k", b"", 2),
            frame(LIST_MECHS, b"", b"", b"v", 2),
            frame(AUTH, b"", b"", b"\0a\0b", 2),
            frame(STEP, b"", b"", b"\0a\0b", 2),
            frame(AUTH, b"1234", b"PLAIN", b"", 2),
            frame(AUTH, b"", &[b'P'; 251], b"", 2),
        ] {
            assert_eq!(
                parse(&bad, &l),
                Frame::Invalid {
                    opcode: bad[1],
                    opaque: 2
                }
            );
            // Decided from the header alone.
            assert_eq!(
                parse(&bad[..HEADER_LEN], &l),
                Frame::Invalid {
                    opcode: bad[1],
                    opaque: 2
                }
            );
        }
        // Refused, kept: the body goes (decided before it arrives).
        let long = frame(AUTH, b"", &[b'P'; 33], b"xy", 3);
        assert_eq!(
            parse(&long[..HEADER_LEN], &l),
            Frame::Refused {
                opcode: AUTH,
                opaque: 3,
                status: Status::InvalidArguments,
                consumed: long.len()
            }
        );
        let mut big = frame(AUTH, b"", b"PLAIN", b"", 4);
        big[8..12].copy_from_slice(&(5 + (2u32 << 20)).to_be_bytes());
        assert_eq!(
            parse(&big, &l),
            Frame::Refused {
                opcode: AUTH,
                opaque: 4,
                status: Status::OutOfMemory,
                consumed: HEADER_LEN + 5 + (2 << 20)
            }
        );
        // Lengths that contradict each other: the binary parser's.
        let mut contra = frame(AUTH, b"", b"PLAIN", b"", 5);
        contra[11] = 2;
        assert_eq!(parse(&contra, &l), Frame::Other);
    }

    #[test]
    fn plain_messages() {
        let u = users();
        assert!(plain_ok(b"\0alice\0secret", &u));
        assert!(plain_ok(b"alice\0alice\0secret", &u));
        assert!(plain_ok(b"\0bob\0pw", &u));
        for bad in [
            &b"bob\0alice\0secret"[..],
            b"\0alice\0secret\0x",
            b"\0alice\0secre",
            b"\0alice\0",
            b"\0\0secret",
            b"alicesecret",
            b"\0alicesecret",
            b"\0bob\0pw:extra",
            b"\0carol\0secret",
            b"",
        ] {
            assert!(!plain_ok(bad, &u), "{bad:?}");
        }
        assert_eq!(
            plain(b"a\0b\0c\0d"),
            Some((&b"a"[..], &b"b"[..], &b"c\0d"[..]))
        );
    }

    #[test]
    fn conversations() {
        let u = users();
        let ok = b"\0alice\0secret";
        let mut s = State::default();
        let list = answer(&mut s, Op::List, &u);
        assert_eq!(
            (list.status, list.body, list.decided),
            (Status::Ok, MECHANISMS, None)
        );
        // A step before a start fails.
        let a = answer(&mut s, Op::Step { data: ok }, &u);
        assert_eq!((a.status, a.decided), (Status::AuthError, Some(false)));
        assert!(!s.authenticated);
        // Initial response; any case of the name.
        let a = answer(
            &mut s,
            Op::Auth {
                mech: b"plain",
                data: ok,
            },
            &u,
        );
        assert_eq!(
            (a.status, a.body, a.decided),
            (Status::Ok, &b"Authenticated"[..], Some(true))
        );
        assert!(s.authenticated);
        // A failed auth drops what was.
        let a = answer(
            &mut s,
            Op::Auth {
                mech: b"PLAIN",
                data: b"\0alice\0no",
            },
            &u,
        );
        assert_eq!((a.body, a.decided), (&b"Auth failure."[..], Some(false)));
        assert!(!s.authenticated);
        let a = answer(
            &mut s,
            Op::Auth {
                mech: b"CRAM-MD5",
                data: ok,
            },
            &u,
        );
        assert_eq!(a.decided, Some(false));
        // Without an initial response: continue, then steps (a failed one
        // may be retried; one after success fails).
        let a = answer(
            &mut s,
            Op::Auth {
                mech: b"PLAIN",
                data: b"",
            },
            &u,
        );
        assert_eq!(
            (a.status, a.body, a.decided),
            (Status::AuthContinue, &b""[..], None)
        );
        assert!(!s.authenticated && s.pending);
        assert_eq!(
            answer(&mut s, Op::Step { data: b"" }, &u).decided,
            Some(false)
        );
        assert_eq!(
            answer(&mut s, Op::Step { data: ok }, &u).decided,
            Some(true)
        );
        assert!(s.authenticated && !s.pending);
        assert_eq!(
            answer(&mut s, Op::Step { data: ok }, &u).decided,
            Some(false)
        );
        assert!(!s.authenticated);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_overreads(input in proptest::collection::vec(proptest::num::u8::ANY, 0..80),
                                 op in LIST_MECHS..=STEP) {
            let mut input = input;
            if input.len() >= 2 {
                input[0] = REQUEST_MAGIC;
                input[1] = op;
            }
            match parse(&input, &limits()) {
                Frame::Request { used, .. } => proptest::prop_assert!(used >= HEADER_LEN && used <= input.len()),
                Frame::Incomplete(need) => proptest::prop_assert!(need > input.len()),
                Frame::Refused { consumed, .. } => proptest::prop_assert!(consumed > HEADER_LEN),
                Frame::Invalid { .. } | Frame::Other => proptest::prop_assert!(input.len() >= HEADER_LEN || input.len() < 2),
            }
        }
    }
}
