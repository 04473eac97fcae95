//! [`SecureLink`]: nginx's `secure_link` and `secure_link_md5`, with the
//! checks its documentation pairs them with (`if ($secure_link = "") {
//! return 403; }`, `if ($secure_link = "0") { return 410; }`): a link
//! signed by whoever knows the secret, valid until it expires.
//!
//! The link's value (`$arg_md5,$arg_expires`, say) is a hash, base64url
//! (padding optional), and after a comma an optional expiry in Unix
//! seconds (`$secure_link_expires`). The request is let in when the hash
//! is the MD5 of the `--secure-link-md5` text (`"$secure_link_expires$uri
//! secret"`, say), refused 410 when it is but the expiry has passed, 403
//! otherwise. MD5 is nginx's choice: links signed for nginx stay valid.

use base64::Engine as _;

use crate::log_format::LogFormat;

/// `--secure-link` with `--secure-link-md5`.
#[derive(Debug, Clone)]
pub struct SecureLink {
    /// The hash and expiry a request brings (nginx's `secure_link`).
    pub link: LogFormat,
    /// The text whose MD5 the hash must be (nginx's `secure_link_md5`).
    pub md5: LogFormat,
    /// The paths checked: those starting with it (nginx's `location`
    /// holding the directives); every path where `None`.
    pub under: Option<String>,
}

impl SecureLink {
    /// Whether requests for `path` are checked.
    pub fn covers(&self, path: &str) -> bool {
        self.under.as_deref().is_none_or(|p| path.starts_with(p))
    }
}

/// What a request's link came to (nginx's `$secure_link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The hash matches and the link has not expired: `1`.
    Valid,
    /// The hash matches, the expiry has passed: `0` (answered 410).
    Expired,
    /// No link, a malformed one, or a wrong hash: empty (answered 403).
    Invalid,
}

/// A request's link as checked so far: its expiry's text once read
/// (`$secure_link_expires`), then the verdict (`$secure_link`).
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The expiry's text, where the link brought a valid one.
    pub expires: Option<Vec<u8>>,
    /// The verdict, once reached.
    pub verdict: Option<Verdict>,
}

/// A link's value split as nginx splits it: the hash's text, and the
/// expiry's text and value where a comma brings one. `None`: an expiry
/// that is not a positive number of seconds (nginx's `ngx_atotm`).
pub fn split(value: &[u8]) -> Option<(&[u8], Option<Expiry<'_>>)> {
    let Some(comma) = value.iter().position(|&b| b == b',') else {
        return Some((value, None));
    };
    let text = &value[comma + 1..];
    let expires = (!text.is_empty() && text.iter().all(u8::is_ascii_digit))
        .then(|| std::str::from_utf8(text).ok()?.parse::<i64>().ok())
        .flatten()
        .filter(|&e| e > 0)?;
    Some((
        &value[..comma],
        Some(Expiry {
            text,
            secs: expires,
        }),
    ))
}

/// A link's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry<'a> {
    /// As it came (`$secure_link_expires`).
    pub text: &'a [u8],
    /// Its value, Unix seconds.
    pub secs: i64,
}

/// The verdict on `hash` (its base64url text) against the MD5 of `signed`,
/// with `expires` checked against `now` (Unix seconds).
pub fn check(hash: &[u8], signed: &[u8], expires: Option<i64>, now: i64) -> Verdict {
    // Compared in constant time: how long a refusal takes says nothing of
    // how much of a guessed hash was right.
    let expected = md5_of(signed);
    match decode(hash) {
        Some(h) if h.iter().zip(&expected).fold(0, |d, (a, b)| d | (a ^ b)) == 0 => {}
        _ => return Verdict::Invalid,
    }
    match expires {
        Some(e) if e < now => Verdict::Expired,
        _ => Verdict::Valid,
    }
}

/// The hash a link signing `signed` brings: its MD5 in base64url without
/// padding, as `openssl md5 -binary | openssl base64 | tr +/ -_ | tr -d =`
/// writes it.
pub fn sign(signed: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(md5_of(signed))
}

/// The 16 bytes a hash's base64url text stands for, decoded as nginx's
/// `ngx_decode_base64url`: at most 24 characters, the first `=` ends it,
/// unused trailing bits are ignored.
fn decode(text: &[u8]) -> Option<[u8; 16]> {
    if text.len() > 24 {
        return None;
    }
    let end = text.iter().position(|&b| b == b'=').unwrap_or(text.len());
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
    );
    engine.decode(&text[..end]).ok()?.try_into().ok()
}

/// The MD5 of `data`.
fn md5_of(data: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(text: &str) -> String {
        super::sign(text.as_bytes())
    }

    #[test]
    fn a_link_is_split_at_its_comma() {
        assert_eq!(split(b"abc"), Some((&b"abc"[..], None)));
        assert_eq!(
            split(b"abc,2147483647"),
            Some((
                &b"abc"[..],
                Some(Expiry {
                    text: b"2147483647",
                    secs: 2147483647
                })
            ))
        );
        assert_eq!(split(b"abc,"), None);
        assert_eq!(split(b"abc,0"), None);
        assert_eq!(split(b"abc,-5"), None);
        assert_eq!(split(b"abc,12x"), None);
        assert_eq!(
            split(b",7"),
            Some((
                &b""[..],
                Some(Expiry {
                    text: b"7",
                    secs: 7
                })
            ))
        );
    }

    #[test]
    fn the_hash_must_be_the_md5_of_the_signed_text() {
        let text = "2000000000/file.txt secret";
        let hash = sign(text);
        assert_eq!(hash.len(), 22);
        let now = 1_900_000_000;
        let c = |h: &str, t: &str, e| check(h.as_bytes(), t.as_bytes(), e, now);
        assert_eq!(c(&hash, text, Some(2_000_000_000)), Verdict::Valid);
        assert_eq!(c(&hash, text, None), Verdict::Valid);
        assert_eq!(c(&hash, text, Some(now - 1)), Verdict::Expired);
        assert_eq!(c(&hash, text, Some(now)), Verdict::Valid);
        assert_eq!(
            c(&hash, "2000000000/file.txt other", None),
            Verdict::Invalid
        );
        // Padding is optional; what follows the first `=` is not read.
        assert_eq!(c(&format!("{hash}=="), text, None), Verdict::Valid);
        assert_eq!(c(&format!("{hash}=x"), text, None), Verdict::Valid);
        assert_eq!(c(&format!("{hash}===="), text, None), Verdict::Invalid);
        // The standard alphabet's `+` and `/` are not base64url.
        let standard = hash.replace('-', "+").replace('_', "/");
        if standard != hash {
            assert_eq!(c(&standard, text, None), Verdict::Invalid);
        }
        assert_eq!(c("", text, None), Verdict::Invalid);
        assert_eq!(c(&hash[..21], text, None), Verdict::Invalid);
    }

    proptest::proptest! {
        /// Any link text: a verdict, no panic; a valid one only for the
        /// signed text's own hash.
        #[test]
        fn any_link_gets_a_verdict(value: Vec<u8>, signed: Vec<u8>) {
            if let Some((hash, expires)) = split(&value) {
                let v = check(hash, &signed, expires.map(|e| e.secs), 0);
                if v != Verdict::Invalid {
                    proptest::prop_assert_eq!(decode(hash), Some(md5_of(&signed)));
                }
            }
        }
    }
}
