//! memcached's ASCII authentication (`-Y FILE`): a connection's first
//! request must be a `set` whose data is `user password`, one of the
//! file's `user:password` lines; until then every request is answered
//! `CLIENT_ERROR unauthenticated`. The key, flags and exptime of that `set`
//! are ignored and nothing is stored. The password crosses the network as
//! it is: this keeps out a neighbour on a private network, not one who can
//! read its traffic.
//!
//! [`step`] reads an unauthenticated connection's input as memcached reads
//! it (a pure function over bytes); [`AuthFile`] holds the users.

use std::path::Path;

/// The largest `set` data an unauthenticated connection may declare:
/// memcached reads it into a read buffer of a few KiB, and a declared
/// length is checked before anything waits for it.
pub const MAX_TOKEN: usize = 1024;

/// An unauthenticated line without its end past this many bytes is junk:
/// the connection closes (memcached's bound).
pub const MAX_LINE: usize = 2048;

/// A user and password.
type User = (Box<[u8]>, Box<[u8]>);

/// The users of an authentication file.
#[derive(Debug, Clone, Default)]
pub struct AuthFile {
    users: Vec<User>,
    /// Where it was read from (`stats settings` names it).
    path: Option<std::path::PathBuf>,
}

impl AuthFile {
    /// Reads `path`: `user:password` lines, as memcached takes them (the
    /// first `:` splits; a line without one, an empty line or a carriage
    /// return is refused).
    pub fn load(path: &Path) -> Result<AuthFile, String> {
        let text = std::fs::read(path).map_err(|e| {
            format!(
                "Could not open authfile [{}] for reading, error {e}",
                path.display()
            )
        })?;
        let mut file = AuthFile::parse(&text).map_err(|line| {
            format!(
                "Authfile [{}] has a malformed entry (line {line}). Should be 'user:password'",
                path.display()
            )
        })?;
        file.path = Some(path.to_owned());
        Ok(file)
    }

    /// The file it was read from, if it was.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The users of a file's text; `Err`: the number of a malformed line.
    pub fn parse(text: &[u8]) -> Result<AuthFile, usize> {
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let mut users = Vec::new();
        if text.is_empty() {
            return Ok(AuthFile { users, path: None });
        }
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let colon = line.iter().position(|&b| b == b':');
            match colon {
                Some(c) if !line.contains(&b'\r') => {
                    users.push((line[..c].into(), line[c + 1..].into()));
                }
                _ => return Err(i + 1),
            }
        }
        Ok(AuthFile { users, path: None })
    }

    /// Reads `path` as memcached's SASL password file
    /// (`MEMCACHED_SASL_PWDB`): `user:password` lines, the password up to
    /// a second `:` (the rest ignored) or a carriage return. A line without
    /// a `:` is ignored, as memcached ignores it: their numbers come back,
    /// for a warning.
    pub fn load_pwdb(path: &Path) -> Result<(AuthFile, Vec<usize>), String> {
        let text = std::fs::read(path).map_err(|e| {
            format!(
                "Could not open the SASL password file [{}] for reading, error {e}",
                path.display()
            )
        })?;
        let (mut file, ignored) = AuthFile::parse_pwdb(&text);
        file.path = Some(path.to_owned());
        Ok((file, ignored))
    }

    /// The users of a SASL password file's text (see
    /// [`load_pwdb`](Self::load_pwdb)), and the numbers of the non-empty
    /// lines it ignored.
    pub fn parse_pwdb(text: &[u8]) -> (AuthFile, Vec<usize>) {
        let mut users = Vec::new();
        let mut ignored = Vec::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let Some(c) = line.iter().position(|&b| b == b':') else {
                if !line.is_empty() && line != b"\r" {
                    ignored.push(i + 1);
                }
                continue;
            };
            let rest = &line[c + 1..];
            let end = rest.iter().position(|&b| b == b':' || b == b'\r');
            let password = &rest[..end.unwrap_or(rest.len())];
            users.push((line[..c].into(), password.into()));
        }
        (AuthFile { users, path: None }, ignored)
    }

    /// Whether `user` with `password` is one of the file's (every entry
    /// compared in full, whatever matched: how long a refusal takes says
    /// nothing of which user exists).
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let same = |a: &[u8], b: &[u8]| {
            a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
        };
        self.users
            .iter()
            .fold(false, |ok, (u, p)| ok | (same(u, user) & same(p, password)))
    }

    /// How many users the file has.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file has no user (then nobody can authenticate).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// What an unauthenticated connection's input comes to.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// Wait for this many bytes in all (0: more, however many).
    Incomplete(usize),
    /// A line past [`MAX_LINE`] without its end: close.
    Close,
    /// An answer for the first `used` bytes; `swallow` more (a declared
    /// token past [`MAX_TOKEN`], not yet all here) are dropped as they
    /// come.
    Answer {
        /// The bytes the answer covers.
        used: usize,
        /// Bytes after them to drop.
        swallow: usize,
        /// The answer.
        answer: Answer<'a>,
    },
}

/// The answer to an unauthenticated request.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// Not a `set` with a length: `CLIENT_ERROR unauthenticated`.
    Unauthenticated,
    /// The data does not end in `\r\n`: `CLIENT_ERROR bad command line
    /// termination`.
    BadTermination,
    /// The data is not `user password` (or is too long): `CLIENT_ERROR bad
    /// authentication token format`.
    BadFormat,
    /// A user and password to check.
    Token {
        /// The user.
        user: &'a [u8],
        /// The password.
        password: &'a [u8],
    },
}

impl Answer<'_> {
    /// The line answering it, where it is not a token.
    pub fn line(&self) -> &'static [u8] {
        match self {
            Answer::Unauthenticated => b"CLIENT_ERROR unauthenticated\r\n",
            Answer::BadTermination => b"CLIENT_ERROR bad command line termination\r\n",
            Answer::BadFormat | Answer::Token { .. } => {
                b"CLIENT_ERROR bad authentication token format\r\n"
            }
        }
    }
}

/// memcached's tokens: split at spaces, runs of them ignored (a line's
/// `\r` stays on its last token, as memcached leaves it).
fn tokens(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|&b| b == b' ').filter(|t| !t.is_empty())
}

/// memcached's `safe_strtoul`: optional leading whitespace and `+`,
/// digits, then the end or whitespace; no sign `-`.
fn length(token: &[u8]) -> Option<usize> {
    let t = token.trim_ascii_start();
    let t = t.strip_prefix(b"+").unwrap_or(t);
    let digits = t.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = &t[digits..];
    if digits == 0 || !(rest.is_empty() || rest[0].is_ascii_whitespace()) {
        return None;
    }
    // Past any length allowed here: the cap refuses it.
    Some(
        std::str::from_utf8(&t[..digits])
            .ok()?
            .parse()
            .unwrap_or(usize::MAX),
    )
}

/// Reads the request at the front of an unauthenticated connection's
/// `input`: `set KEY FLAGS EXPTIME BYTES[ …]\r\n` then BYTES of `user
/// password` and `\r\n`.
pub fn step(input: &[u8]) -> Step<'_> {
    let Some(eol) = input.iter().position(|&b| b == b'\n') else {
        return match input.len() > MAX_LINE {
            true => Step::Close,
            false => Step::Incomplete(0),
        };
    };
    let mut words = tokens(&input[..eol]);
    let first = words.next();
    let size = words.nth(3).and_then(length);
    let (Some(b"set"), Some(size)) = (first, size) else {
        let answer = Answer::Unauthenticated;
        return Step::Answer {
            used: eol + 1,
            swallow: 0,
            answer,
        };
    };
    let start = eol + 1;
    if size > MAX_TOKEN {
        let whole = start.saturating_add(size).saturating_add(2);
        let used = whole.min(input.len());
        return Step::Answer {
            used,
            swallow: whole - used,
            answer: Answer::BadFormat,
        };
    }
    let end = start + size + 2;
    if input.len() < end {
        return Step::Incomplete(end);
    }
    let data = &input[start..end];
    let answer = match data.strip_suffix(b"\r\n") {
        None => Answer::BadTermination,
        Some(token) => {
            let mut t = tokens(token);
            match (t.next(), t.next()) {
                (Some(user), Some(password)) => Answer::Token { user, password },
                _ => Answer::BadFormat,
            }
        }
    };
    Step::Answer {
        used: end,
        swallow: 0,
        answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(input: &str) -> Step<'_> {
        step(input.as_bytes())
    }

    fn answered(used: usize, answer: Answer<'_>) -> Step<'_> {
        Step::Answer {
            used,
            swallow: 0,
            answer,
        }
    }

    #[test]
    fn a_sasl_password_file_is_read_as_memcached_reads_it() {
        let text = b"alice:secret\r\nbob:pw:uid=7\n\nnocolon\ncarol:\n:x\n";
        let (f, ignored) = AuthFile::parse_pwdb(text);
        assert_eq!(ignored, [4]);
        assert!(f.check(b"alice", b"secret"));
        assert!(f.check(b"bob", b"pw"));
        assert!(!f.check(b"bob", b"pw:uid=7"));
        assert!(!f.check(b"alice", b"secret\r"));
        assert!(f.check(b"carol", b""));
        assert_eq!(f.len(), 4);
        assert_eq!(AuthFile::parse_pwdb(b"").0.len(), 0);
    }

    #[test]
    fn a_set_of_user_and_password_is_read_as_memcached_reads_it() {
        let token = |u: &'static str, p: &'static str| Answer::Token {
            user: u.as_bytes(),
            password: p.as_bytes(),
        };
        let s = "set x 0 0 12\r\nalice secret\r\nget a\r\n";
        assert_eq!(answer(s), answered(28, token("alice", "secret")));
        // Flags and key ignored, `noreply` too; spaces collapse; extra
        // words of the token ignored; a line ending in `\n` alone.
        let s = "set k 99 999 13 noreply\r\nalice  secret\r\n";
        assert_eq!(answer(s), answered(40, token("alice", "secret")));
        assert_eq!(
            answer("set x 0 0 14\nalice secret x\r\n"),
            answered(29, token("alice", "secret"))
        );
        assert_eq!(
            answer("set x 0 0 +3\r\nu p\r\n"),
            answered(19, token("u", "p"))
        );
    }

    #[test]
    fn anything_else_is_refused_line_by_line() {
        for line in [
            "get a\r\n",
            "version\r\n",
            "quit\r\n",
            "SET x 0 0 3\r\n",
            "set x 0 0\r\n",
            "set x 0 0 -1\r\n",
            "set x 0 0 3x\r\n",
            "mg a v\r\n",
        ] {
            assert_eq!(
                answer(line),
                answered(line.len(), Answer::Unauthenticated),
                "{line:?}"
            );
        }
        assert_eq!(
            answer("set x 0 0 5\r\nalice\r\n"),
            answered(20, Answer::BadFormat)
        );
        assert_eq!(
            answer("set x 0 0 12\r\nalice secretXXget"),
            answered(28, Answer::BadTermination)
        );
    }

    #[test]
    fn lengths_are_checked_before_anything_waits_for_them() {
        assert_eq!(answer("set x 0 0 12\r\nalice"), Step::Incomplete(28));
        assert_eq!(answer("set x 0"), Step::Incomplete(0));
        assert_eq!(step(&[b'x'; MAX_LINE + 1]), Step::Close);
        // A token past the cap: refused, its bytes dropped as they come.
        assert_eq!(
            answer("set x 0 0 4000000000\r\nab"),
            Step::Answer {
                used: 24,
                swallow: 4_000_000_000,
                answer: Answer::BadFormat
            }
        );
        let huge = "set x 0 0 99999999999999999999999\r\n";
        assert!(matches!(
            answer(huge),
            Step::Answer {
                answer: Answer::BadFormat,
                ..
            }
        ));
    }

    #[test]
    fn the_file_is_read_as_memcached_reads_it() {
        let f = AuthFile::parse(b"alice:secret\nbob:pw:with:colons\n:empty\nu:").unwrap();
        assert_eq!(f.len(), 4);
        assert!(f.check(b"alice", b"secret"));
        assert!(f.check(b"bob", b"pw:with:colons"));
        assert!(f.check(b"u", b""));
        assert!(!f.check(b"alice", b"secre"));
        assert!(!f.check(b"alice", b"secrets"));
        assert!(!f.check(b"carol", b"secret"));
        assert!(AuthFile::parse(b"").unwrap().is_empty());
        assert_eq!(AuthFile::parse(b"u:p\n\nv:q\n").unwrap_err(), 2);
        assert_eq!(AuthFile::parse(b"nocolon\n").unwrap_err(), 1);
        assert_eq!(AuthFile::parse(b"u:p\r\n").unwrap_err(), 1);
    }

    proptest::proptest! {
        /// Any input: an answer within it (or waiting for what it
        /// declared), never a panic.
        #[test]
        fn any_input_gets_a_step(input: Vec<u8>) {
            match step(&input) {
                Step::Answer { used, swallow, .. } => {
                    proptest::prop_assert!(used > 0 && used <= input.len());
                    proptest::prop_assert!(swallow == 0 || used == input.len());
                }
                Step::Incomplete(need) => proptest::prop_assert!(need == 0 || need > input.len()),
                Step::Close => proptest::prop_assert!(input.len() > MAX_LINE),
            }
        }
    }
}
