//! [`AuthBasic`]: nginx's `auth_basic` with `auth_basic_user_file`, a
//! password over the whole server (a staging site, an internal mirror).
//!
//! As nginx's: a request without valid `Authorization: Basic` credentials
//! gets 401 with `WWW-Authenticate: Basic realm="…"`; the file has
//! `user:hash[:comment]` lines (`#` starts a comment line) and is read
//! again when it changes (looked at at most once a second), so users are
//! added without a restart. The hashes nginx and `htpasswd` / `openssl
//! passwd` write: `$apr1$` and `$1$` (MD5-crypt), `$5$` and `$6$`
//! (SHA-crypt), `$2a$`/`$2b$`/`$2y$` (bcrypt), `{SHA}`, `{SSHA}` and
//! `{PLAIN}`; the old DES `crypt` is not taken (said at start). Checking a
//! hash is slow on purpose, so it runs on the blocking pool, never on a
//! loop; credentials that passed are remembered (a keyed 128-bit digest of
//! them, never the password) until the file changes, so a client's next
//! requests are answered from the loop.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use md5::{Digest as _, Md5};
use sha_crypt::PasswordVerifier as _;

use crate::request::Head;

/// Credentials remembered as passed, at most; then forgotten all at once.
const REMEMBERED: usize = 4096;

/// How often the file's modification is looked at, at most.
const RECHECK: Duration = Duration::from_secs(1);

/// The users of a password file, by name.
#[derive(Debug, Default)]
struct Users {
    hashes: HashMap<String, String>,
    /// The file's modification time and size when read.
    stamp: Option<(SystemTime, u64)>,
    /// When the stamp was last compared with the file's.
    looked: Option<Instant>,
}

/// `--auth-basic` with its user file: see the [module](self).
#[derive(Debug)]
pub struct AuthBasic {
    /// `Basic realm="…"`, the `WWW-Authenticate` value.
    challenge: String,
    file: PathBuf,
    users: RwLock<Users>,
    /// Keyed digests of credentials that passed.
    passed: Mutex<hashbrown::HashSet<u128>>,
    keys: [std::collections::hash_map::RandomState; 2],
}

/// What the loop can tell of a request's credentials without a hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quick {
    /// Remembered as passed.
    Passed,
    /// None, or not `Basic user:password`: 401.
    Refused,
    /// To be checked on the blocking pool ([`AuthBasic::verify`]).
    Check,
}

impl AuthBasic {
    /// Reads `file` (an error if it cannot be read: the server does not
    /// start); `realm` is shown by browsers. Returns the lines not taken
    /// (a hash of a kind not served), to be said at start.
    pub fn new(realm: &str, file: &Path) -> io::Result<(AuthBasic, Vec<String>)> {
        let escaped = realm.replace('\\', "\\\\").replace('"', "\\\"");
        let auth = AuthBasic {
            challenge: format!("Basic realm=\"{escaped}\""),
            file: file.to_owned(),
            users: RwLock::default(),
            passed: Mutex::default(),
            keys: Default::default(),
        };
        let (users, skipped) = read_users(file)?;
        *auth.users.write().unwrap_or_else(|e| e.into_inner()) = users;
        Ok((auth, skipped))
    }

    /// The `WWW-Authenticate` value of a 401.
    pub fn challenge(&self) -> &str {
        &self.challenge
    }

    /// What the loop can decide of `head` at once.
    pub fn quick(&self, head: &Head<'_>) -> Quick {
        let Some((user, password)) = credentials(head) else {
            return Quick::Refused;
        };
        // The file not looked at for a while: checked on the pool, which
        // reads it again if it changed (a user removed is out at once).
        let fresh = {
            let users = self.users.read().unwrap_or_else(|e| e.into_inner());
            users.looked.is_some_and(|t| t.elapsed() < RECHECK)
        };
        let passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        match fresh && passed.contains(&self.digest(&user, &password)) {
            true => Quick::Passed,
            false => Quick::Check,
        }
    }

    /// Whether `user` and `password` (a request's [`credentials`]) match
    /// the file, read again first if it changed. Slow: call it off the
    /// loops.
    pub fn verify(&self, user: &str, password: &[u8]) -> bool {
        self.reread();
        let digest = self.digest(user, password);
        if self
            .passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&digest)
        {
            return true;
        }
        let hash = {
            let users = self.users.read().unwrap_or_else(|e| e.into_inner());
            match users.hashes.get(user) {
                Some(h) => h.clone(),
                None => return false,
            }
        };
        if !matches(password, &hash) {
            return false;
        }
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        if passed.len() >= REMEMBERED {
            passed.clear();
        }
        passed.insert(digest);
        true
    }

    /// Reads the file again if it changed since (looked at once a second
    /// at most); what was remembered as passed is forgotten then. A file
    /// that cannot be read (removed) lets nobody in until it can.
    fn reread(&self) {
        let now = Instant::now();
        let stamp = {
            let mut users = self.users.write().unwrap_or_else(|e| e.into_inner());
            if users
                .looked
                .is_some_and(|t| now.duration_since(t) < RECHECK)
            {
                return;
            }
            users.looked = Some(now);
            let stamp = std::fs::metadata(&self.file)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())));
            if stamp.is_some() && stamp == users.stamp {
                return;
            }
            stamp
        };
        let mut fresh = read_users(&self.file).map_or_else(|_| Users::default(), |(u, _)| u);
        fresh.stamp = stamp.and(fresh.stamp);
        fresh.looked = Some(now);
        *self.users.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// A keyed 128-bit digest of the credentials: what is remembered.
    fn digest(&self, user: &str, password: &[u8]) -> u128 {
        let one = |k: &std::collections::hash_map::RandomState| k.hash_one((user, password));
        (u128::from(one(&self.keys[0])) << 64) | u128::from(one(&self.keys[1]))
    }
}

/// The users of `file`, and the lines not taken (said at start).
fn read_users(file: &Path) -> io::Result<(Users, Vec<String>)> {
    let meta = std::fs::metadata(file)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
    let text = std::fs::read_to_string(file)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
    let mut users = Users {
        stamp: meta.modified().ok().map(|m| (m, meta.len())),
        ..Users::default()
    };
    let mut skipped = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((user, rest)) = line.split_once(':') else {
            skipped.push(format!("line {}: no ':' after the user name", n + 1));
            continue;
        };
        // `user:hash:comment` (htpasswd's); `{PLAIN}` keeps its colons.
        let hash = match rest.starts_with("{PLAIN}") {
            true => rest,
            false => rest.split(':').next().unwrap_or_default(),
        };
        if !served(hash) {
            skipped.push(format!(
                "line {} (user {user:?}): a hash of a kind not served (DES crypt?)",
                n + 1
            ));
            continue;
        }
        users
            .hashes
            .entry(user.to_owned())
            .or_insert_with(|| hash.to_owned());
    }
    Ok((users, skipped))
}

/// Whether `hash` is of a kind [`matches`] checks.
fn served(hash: &str) -> bool {
    [
        "$apr1$", "$1$", "$5$", "$6$", "$2a$", "$2b$", "$2y$", "{SHA}", "{SSHA}", "{PLAIN}",
    ]
    .iter()
    .any(|p| hash.starts_with(p))
}

/// The user and password of `head`'s `Authorization: Basic` field (the
/// scheme in any case; the password may hold colons, the user may not).
pub fn credentials(head: &Head<'_>) -> Option<(String, Vec<u8>)> {
    let value = head.field_values("authorization").next()?;
    let (scheme, token) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let token = token.trim_ascii();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// Whether `password` matches `hash` (see the [module](self)).
pub fn matches(password: &[u8], hash: &str) -> bool {
    let b64 = base64::engine::general_purpose::STANDARD;
    if let Some(plain) = hash.strip_prefix("{PLAIN}") {
        return same(password, plain.as_bytes());
    }
    if let Some(encoded) = hash.strip_prefix("{SHA}") {
        let Ok(want) = b64.decode(encoded) else {
            return false;
        };
        return same(&sha1::Sha1::digest(password), &want);
    }
    if let Some(encoded) = hash.strip_prefix("{SSHA}") {
        let Ok(decoded) = b64.decode(encoded) else {
            return false;
        };
        if decoded.len() <= 20 {
            return false;
        }
        let (want, salt) = decoded.split_at(20);
        let mut sha = sha1::Sha1::new();
        sha.update(password);
        sha.update(salt);
        return same(&sha.finalize(), want);
    }
    for magic in ["$apr1$", "$1$"] {
        if let Some(rest) = hash.strip_prefix(magic) {
            let Some((salt, _)) = rest.split_once('$') else {
                return false;
            };
            return same(
                md5_crypt(password, salt.as_bytes(), magic).as_bytes(),
                hash.as_bytes(),
            );
        }
    }
    if hash.starts_with("$5$") || hash.starts_with("$6$") {
        return sha_crypt::ShaCrypt::default()
            .verify_password(password, hash)
            .is_ok();
    }
    if hash.starts_with("$2") {
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    false
}

/// Compares in time that does not depend on where the two differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// MD5-crypt (P.-H. Kamp's, `$1$`; Apache's `$apr1$` differs only in its
/// magic string): the whole `magic salt $ hash` string.
fn md5_crypt(password: &[u8], salt: &[u8], magic: &str) -> String {
    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let salt = &salt[..salt.len().min(8)];
    let alternate = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .chain_update(password)
        .finalize();
    let mut ctx = Md5::new()
        .chain_update(password)
        .chain_update(magic.as_bytes())
        .chain_update(salt);
    let mut left = password.len();
    while left > 0 {
        ctx.update(&alternate[..left.min(16)]);
        left = left.saturating_sub(16);
    }
    let mut bits = password.len();
    while bits > 0 {
        match bits & 1 {
            1 => ctx.update([0u8]),
            _ => ctx.update(&password[..password.len().min(1)]),
        }
        bits >>= 1;
    }
    let mut digest = ctx.finalize();
    // A thousand rounds, to slow a guesser down.
    for round in 0..1000 {
        let mut c = Md5::new();
        match round & 1 {
            1 => c.update(password),
            _ => c.update(digest),
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        match round & 1 {
            1 => c.update(digest),
            _ => c.update(password),
        }
        digest = c.finalize();
    }
    let mut out = format!("{magic}{}$", String::from_utf8_lossy(salt));
    let d = |i: usize| u32::from(digest[i]);
    let mut push = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(char::from(ITOA64[(v & 0x3f) as usize]));
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        push((d(a) << 16) | (d(b) << 8) | d(c), 4);
    }
    push(d(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_hash_nginx_takes() {
        // Written by `openssl passwd` (and the {SHA}/{SSHA} forms by hand
        // from openssl's SHA-1) for "secret pw"; bcrypt's for "password".
        let pw = b"secret pw";
        for hash in [
            "$apr1$Xy3Rq1Zb$2snucGM5UkflqMeUszZPW.",
            "$1$saltsalt$ZtMHw9WXbhe3pPBkCQJKC1",
            "$5$sixteencharsalt1$Ogcs/4AqtFlz6jqxsk8Pi8xdeTOmFrIDjGIbjkgCyd3",
            "$6$s$A2PH7ab.tKZK/Fyvln.049elbUP6lL3iAaPIhNoElbR7bgR8e3zuCERxkPSdf20LElxhApYEpwVdAPO30r0vn/",
            "{SHA}rS7uKHTXnyVCt9RR2Lh+fJ2k/DM=",
            "{SSHA}kL13qJirebFRu74LMHz7cU35G6pOYUNs",
            "{PLAIN}secret pw",
        ] {
            assert!(served(hash), "{hash}");
            assert!(matches(pw, hash), "{hash}");
            assert!(!matches(b"secret pW", hash), "{hash}");
            assert!(!matches(b"", hash), "{hash}");
        }
        let bcrypt = "$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe";
        assert!(matches(b"password", bcrypt) && !matches(b"passwore", bcrypt));
        // An empty salt, as `openssl passwd -apr1 -salt ''` makes.
        assert!(matches(b"p", "$apr1$$ybkELnS08iMsIO3qVjHYv."));
        for bad in [
            "abJnggxhB/yWI",
            "$apr1$nodollar",
            "{SHA}!!",
            "{SSHA}AAAA",
            "$6$x",
            "",
        ] {
            assert!(!matches(pw, bad), "{bad}");
        }
        assert!(!served("abJnggxhB/yWI"), "DES crypt is not taken");
    }

    mod props {
        use super::*;
        use crate::request::{parse_head, Limits};
        use proptest::prelude::*;

        fn head_with(field: &[u8]) -> Vec<u8> {
            let mut req = b"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: ".to_vec();
            req.extend_from_slice(field);
            req.extend_from_slice(b"\r\n\r\n");
            req
        }

        proptest! {
            /// Any user without a colon and any password come back as sent.
            #[test]
            fn credentials_round_trip(
                user in "[^:\u{0}]{0,16}",
                password in prop::collection::vec(any::<u8>(), 0..32),
            ) {
                let mut plain = user.as_bytes().to_vec();
                plain.push(b':');
                plain.extend_from_slice(&password);
                let token = base64::engine::general_purpose::STANDARD.encode(&plain);
                let req = head_with(format!("Basic {token}").as_bytes());
                let (h, _) = parse_head(&req, &Limits::default()).unwrap().unwrap();
                prop_assert_eq!(credentials(&h), Some((user, password)));
            }

            /// Any field value is read without a panic.
            #[test]
            fn any_field(value in prop::collection::vec(any::<u8>(), 0..64)) {
                let value: Vec<u8> = value.into_iter().filter(|&b| b != b'\r' && b != b'\n').collect();
                let req = head_with(&value);
                if let Ok(Some((h, _))) = parse_head(&req, &Limits::default()) {
                    let _ = credentials(&h);
                }
            }
        }
    }
}
