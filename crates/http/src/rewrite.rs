//! [`Rewrite`]: nginx's `rewrite REGEX REPLACEMENT [FLAG]` at server level.
//! Rules run in order against the request's decoded path (`$uri`); one
//! that matches either changes the path a file is looked up by (and the
//! query, where its replacement has a `?`) or answers with a redirect.
//!
//! - `$1`…`$9` and named groups (`$name`, `${name}`) are the pattern's
//!   captures; any other `$variable` is one of the access log's.
//! - A replacement starting `http://`, `https://` or `$scheme`, or the flag
//!   `redirect` (302) or `permanent` (301), answers with a redirect: later
//!   rules do not run.
//! - `last` and `break` stop the rules after a rewrite (the same here, where
//!   the server has one location); without a flag the next rule sees the
//!   new path.
//! - The request's query goes along: after the replacement's own (`&`), or
//!   alone; a replacement ending in `?` drops it.
//!
//! As nginx escapes them: a capture going into the query of a rewrite or
//! into a redirect is percent-encoded when the request's path was (it held
//! a `%` or a `+`), and a redirect's address is then decoded where the
//! escape stands for a character that may stand as itself. The patterns
//! are the `regex` crate's: nginx's PCRE without look-around or
//! back-references.

use std::str::FromStr;

use regex::Regex;

use crate::log_format::{Escape, LogFormat};
use crate::status::Status;

/// One `--rewrite "REGEX REPLACEMENT [FLAG]"`.
#[derive(Debug, Clone)]
pub struct Rewrite {
    regex: Regex,
    parts: Vec<Part>,
    /// Where a redirect is the answer: its status.
    redirect: Option<Status>,
    /// `last` or `break` (or a redirect): no rule after this one runs.
    stops: bool,
    /// The request's query is kept (the replacement does not end in `?`).
    keeps_query: bool,
}

#[derive(Debug, Clone)]
enum Part {
    Text(LogFormat),
    /// A capture group's number.
    Capture(usize),
    /// The replacement's first `?`: what follows is the new query.
    Query,
}

/// What a rule that matched does.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// Answer with a redirect (status, `Location` as it goes out, before
    /// it is made absolute).
    Redirect(Status, Vec<u8>),
    /// Look the file up by another path.
    Internal {
        /// The new path (not yet checked: see
        /// [`crate::path::normalize_rewritten`]).
        path: Vec<u8>,
        /// If given, the request's new query (empty: none).
        query: Option<Vec<u8>>,
        /// No later rule runs (`last`, `break`).
        stops: bool,
    },
}

impl Rewrite {
    /// Applies the rule to a request whose decoded path is `path` and query
    /// is `query`; `quoted`: its path as sent held a `%` or a `+` (nginx's
    /// `quoted_uri`, `plus_in_uri`). `expand` writes an access-log text's
    /// value for the request. `None`: the pattern does not match.
    pub fn apply(
        &self,
        path: &str,
        query: Option<&[u8]>,
        quoted: bool,
        expand: &mut dyn FnMut(&LogFormat, &mut Vec<u8>),
    ) -> Option<Applied> {
        let caps = self.regex.captures(path)?;
        let redirect = self.redirect.is_some();
        let mut out = Vec::with_capacity(path.len() + 16);
        // Where the new query starts in `out`.
        let mut query_at = None;
        for part in &self.parts {
            match part {
                Part::Text(text) => expand(text, &mut out),
                Part::Capture(n) => {
                    let text = caps.get(*n).map_or("", |m| m.as_str()).as_bytes();
                    if quoted && (redirect || query_at.is_some()) {
                        escape_args(text, &mut out);
                    } else {
                        out.extend_from_slice(text);
                    }
                }
                Part::Query => {
                    query_at = Some(out.len());
                    out.push(b'?');
                }
            }
        }
        let old = query.filter(|q| !q.is_empty() && self.keeps_query);
        if let Some(status) = self.redirect {
            let mut location = unescape_redirect(&out);
            if let Some(q) = old {
                location.push(if query_at.is_some() { b'&' } else { b'?' });
                location.extend_from_slice(q);
            }
            return Some(Applied::Redirect(status, location));
        }
        let query = match query_at {
            Some(at) => {
                let mut new = out.split_off(at + 1);
                out.pop();
                if let Some(q) = old {
                    new.push(b'&');
                    new.extend_from_slice(q);
                }
                Some(new)
            }
            None => (!self.keeps_query).then(Vec::new),
        };
        Some(Applied::Internal {
            path: out,
            query,
            stops: self.stops,
        })
    }
}

impl FromStr for Rewrite {
    type Err = String;

    fn from_str(s: &str) -> Result<Rewrite, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let (pattern, replacement, flag) = match words[..] {
            [p, r] => (p, r, None),
            [p, r, f] => (p, r, Some(f)),
            _ => {
                return Err(format!(
                    "{s:?}: a pattern, a replacement and an optional flag (last, break, \
                     redirect or permanent), separated by spaces"
                ))
            }
        };
        let regex = Regex::new(pattern).map_err(|e| format!("{pattern:?}: {e}"))?;
        let (replacement, keeps_query) = match replacement.strip_suffix('?') {
            Some(r) => (r, false),
            None => (replacement, true),
        };
        if replacement.is_empty() {
            return Err(format!("{s:?}: empty replacement"));
        }
        let external = ["http://", "https://", "$scheme"]
            .iter()
            .any(|p| replacement.starts_with(p));
        let mut redirect = external.then_some(Status::Found);
        let mut stops = external;
        match flag {
            None => {}
            Some("last" | "break") => stops = true,
            Some("redirect") => redirect = Some(Status::Found),
            Some("permanent") => redirect = Some(Status::MovedPermanently),
            Some(f) => {
                return Err(format!(
                    "{f:?}: the flag is last, break, redirect or permanent"
                ))
            }
        }
        stops |= redirect.is_some();
        if redirect.is_none() && !replacement.starts_with(['/', '$']) {
            return Err(format!(
                "{replacement:?}: a rewrite (not a redirect) gives a path, starting with /"
            ));
        }
        let parts = parts(replacement, &regex)?;
        Ok(Rewrite {
            regex,
            parts,
            redirect,
            stops,
            keeps_query,
        })
    }
}

/// Compiles a replacement: captures (`$1`…`$9`, a named group's `$name` or
/// `${name}`), its first `?`, and text with the access log's variables
/// between them.
fn parts(replacement: &str, regex: &Regex) -> Result<Vec<Part>, String> {
    let b = replacement.as_bytes();
    let name_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut parts = Vec::new();
    let mut text_from = 0;
    let mut seen_query = false;
    let flush = |parts: &mut Vec<Part>, from: usize, to: usize| -> Result<(), String> {
        if from < to {
            parts.push(Part::Text(LogFormat::parse(
                &replacement[from..to],
                Escape::None,
            )?));
        }
        Ok(())
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'?' if !seen_query => {
                flush(&mut parts, text_from, i)?;
                parts.push(Part::Query);
                seen_query = true;
                i += 1;
                text_from = i;
            }
            b'$' => {
                let start = i;
                i += 1;
                if let Some(d @ b'1'..=b'9') = b.get(i).copied() {
                    let n = usize::from(d - b'0');
                    if n >= regex.captures_len() {
                        return Err(format!(
                            "${n}: the pattern {:?} has {} capture(s)",
                            regex.as_str(),
                            regex.captures_len() - 1
                        ));
                    }
                    flush(&mut parts, text_from, start)?;
                    parts.push(Part::Capture(n));
                    i += 1;
                    text_from = i;
                    continue;
                }
                let bracket = b.get(i) == Some(&b'{');
                let from = i + usize::from(bracket);
                let mut end = from;
                while end < b.len() && name_char(b[end]) {
                    end += 1;
                }
                let named = (!bracket || b.get(end) == Some(&b'}'))
                    .then(|| group(regex, &replacement[from..end]))
                    .flatten();
                i = end + usize::from(bracket);
                if let Some(n) = named {
                    flush(&mut parts, text_from, start)?;
                    parts.push(Part::Capture(n));
                    text_from = i;
                }
            }
            _ => i += 1,
        }
    }
    flush(&mut parts, text_from, b.len())?;
    Ok(parts)
}

/// The number of the group named `name`, if the pattern has one.
fn group(regex: &Regex, name: &str) -> Option<usize> {
    regex
        .capture_names()
        .position(|n| n == Some(name))
        .filter(|_| !name.is_empty())
}

/// Appends `text` percent-encoded as nginx encodes a query's value
/// (`NGX_ESCAPE_ARGS`): controls, space, bytes past ASCII and
/// `"#%&+;<>?\^`{|}`.
fn escape_args(text: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in text {
        let escaped = c <= b' ' || c >= 0x7f || br##""#%&+;<>?\^`{|}"##.contains(&c);
        if escaped {
            out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]);
        } else {
            out.push(c);
        }
    }
}

/// A redirect's address decoded as nginx decodes it
/// (`NGX_UNESCAPE_REDIRECT`): up to its first `?`, an escape of a
/// character after `%` and before DEL is that character (an escaped `?`
/// too, which ends the decoding), any other escape stays; an invalid escape
/// loses its `%` (and the character after it, where that was a hex digit).
fn unescape_redirect(s: &[u8]) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'?' => break,
            b'%' => match (s.get(i + 1).and_then(|&c| hex(c)), s.get(i + 2)) {
                (None, Some(_)) | (None, None) => {
                    // `%` then a non-hex character: the character stays.
                    if let Some(&c) = s.get(i + 1) {
                        out.push(c);
                    }
                    i += 2;
                }
                (Some(_), None) => i += 2,
                (Some(hi), Some(&lo)) => {
                    match hex(lo).map(|lo| hi << 4 | lo) {
                        Some(c) if c == b'?' => {
                            out.push(c);
                            i += 3;
                            break;
                        }
                        Some(c) if c > b'%' && c < 0x7f => out.push(c),
                        Some(_) => out.extend_from_slice(&s[i..i + 3]),
                        // An invalid second digit: both go.
                        None => {}
                    }
                    i += 3;
                }
            },
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out.extend_from_slice(&s[i.min(s.len())..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text's value for a request with no head (`$scheme` is `http`,
    /// `$uri` empty).
    fn expand(text: &LogFormat, out: &mut Vec<u8>) {
        text.expand(&crate::log_format::test_entry(None, None), out)
    }

    /// `rule` applied to `path?query`, a path sent without escapes.
    fn apply(rule: &str, target: &str) -> Option<Applied> {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q.as_bytes())),
            None => (target, None),
        };
        let rule: Rewrite = rule.parse().unwrap();
        rule.apply(path, query, false, &mut expand)
    }

    fn internal(path: &str, query: Option<&str>, stops: bool) -> Option<Applied> {
        Some(Applied::Internal {
            path: path.into(),
            query: query.map(Into::into),
            stops,
        })
    }

    fn redirect(code: u16, location: &str) -> Option<Applied> {
        Some(Applied::Redirect(
            Status::from_code(code).unwrap(),
            location.into(),
        ))
    }

    #[test]
    fn captures_fill_the_replacement() {
        let r = "^/old/(.*)$ /new/$1 permanent";
        assert_eq!(apply(r, "/old/a.txt"), redirect(301, "/new/a.txt"));
        assert_eq!(apply(r, "/old/a.txt?z=1"), redirect(301, "/new/a.txt?z=1"));
        assert_eq!(apply(r, "/other"), None);
        let r = "^/(?<a>x)/(?P<b>y)$ /$b/${a}z/$a";
        assert_eq!(apply(r, "/x/y"), internal("/y/xz/x", None, false));
        // `$12` is capture 1, then a 2.
        assert_eq!(apply("^/(a)$ /$12", "/a"), internal("/a2", None, false));
        assert_eq!(apply("(?i)^/A$ /b last", "/a"), internal("/b", None, true));
    }

    #[test]
    fn the_query_goes_along_unless_the_replacement_ends_in_a_question_mark() {
        let r = "^/q/(.*)$ /new/$1?x=$1 last";
        assert_eq!(
            apply(r, "/q/a?z=1"),
            internal("/new/a", Some("x=a&z=1"), true)
        );
        assert_eq!(apply(r, "/q/a"), internal("/new/a", Some("x=a"), true));
        let r = "^/q/(.*)$ /new/$1?x=$1? break";
        assert_eq!(apply(r, "/q/a?z=1"), internal("/new/a", Some("x=a"), true));
        assert_eq!(apply("^ /b?", "/a?z=1"), internal("/b", Some(""), false));
        let r = "^/e/(.*)$ https://example.com/?p=$1 permanent";
        assert_eq!(
            apply(r, "/e/a?z=1"),
            redirect(301, "https://example.com/?p=a&z=1")
        );
        let r = "^/e/(.*)$ https://example.com/$1?";
        assert_eq!(apply(r, "/e/a?z=1"), redirect(302, "https://example.com/a"));
        assert_eq!(apply("^ $scheme://h$uri", "/a"), redirect(302, "http://h"));
    }

    #[test]
    fn captures_of_an_escaped_path_are_escaped_in_a_query_or_a_redirect() {
        let rule: Rewrite = "^/q/(.*)$ /n/$1?x=$1".parse().unwrap();
        let got = rule.apply("/q/a&b c", None, true, &mut expand);
        assert_eq!(got, internal("/n/a&b c", Some("x=a%26b%20c"), false));
        let got = rule.apply("/q/a&b c", None, false, &mut expand);
        assert_eq!(got, internal("/n/a&b c", Some("x=a&b c"), false));
        // Escaped, then decoded where the character may stand as itself.
        let rule: Rewrite = "^/old/(.*)$ /new/$1 permanent".parse().unwrap();
        let got = rule.apply("/old/x&y;#\"<~ é+", None, true, &mut expand);
        assert_eq!(got, redirect(301, "/new/x&y;%23%22<~%20%C3%A9+"));
        let got = rule.apply("/old/A?", None, true, &mut expand);
        assert_eq!(got, redirect(301, "/new/A?"));
    }

    #[test]
    fn a_redirect_is_decoded_as_nginx_decodes_it() {
        let u = |s: &str| String::from_utf8(unescape_redirect(s.as_bytes())).unwrap();
        assert_eq!(u("/a%41%20%25%7e%7F"), "/aA%20%25~%7F");
        assert_eq!(u("/a?%41"), "/a?%41");
        assert_eq!(u("/a%3f%41"), "/a?%41");
        assert_eq!(u("/a%zz%4"), "/azz");
        assert_eq!(u("/a%4z/b"), "/a/b");
    }

    proptest::proptest! {
        /// Escaping leaves no byte a query's value may not hold, and
        /// decoding it gives the text back; decoding never grows a text.
        #[test]
        fn escapes_round_trip(text: Vec<u8>) {
            let mut escaped = Vec::new();
            escape_args(&text, &mut escaped);
            proptest::prop_assert!(escaped.iter().all(|&c| c > b' ' && c < 0x7f && !b"&+;?#".contains(&c)));
            let hex = |c: u8| (c as char).to_digit(16).unwrap() as u8;
            let mut back = Vec::new();
            let mut i = 0;
            while i < escaped.len() {
                if escaped[i] == b'%' {
                    back.push(hex(escaped[i + 1]) << 4 | hex(escaped[i + 2]));
                    i += 3;
                } else {
                    back.push(escaped[i]);
                    i += 1;
                }
            }
            proptest::prop_assert_eq!(back, text);
        }

        /// Any request's path and query, escaped or not, through rules of
        /// each kind: no panic, and a redirect's address no longer than
        /// what the rule wrote.
        #[test]
        fn any_request_is_rewritten_or_redirected(path in "/[ -~é]{0,40}", query: Option<Vec<u8>>, quoted: bool) {
            for rule in [
                "^/(.*)$ /n/$1?a=$1&b",
                "^/(?<x>[^/]*)(.*)$ https://h/$x$2? permanent",
                "(.)(.)?$ /$1$2 last",
            ] {
                let rule: Rewrite = rule.parse().unwrap();
                let _ = rule.apply(&path, query.as_deref(), quoted, &mut expand);
            }
            let mut escaped = Vec::new();
            escape_args(path.as_bytes(), &mut escaped);
            proptest::prop_assert!(unescape_redirect(&escaped).len() <= escaped.len());
            proptest::prop_assert!(unescape_redirect(path.as_bytes()).len() <= path.len());
        }
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        let err = |s: &str| s.parse::<Rewrite>().unwrap_err();
        assert!(err("^/a").contains("a pattern, a replacement"));
        assert!(err("^/a /b c d").contains("a pattern, a replacement"));
        assert!(err("^/(a /b").contains("unclosed group"));
        assert!(err("^/a ?").contains("empty replacement"));
        assert!(err("^/a /b often").contains("the flag is last"));
        assert!(err("^/a b").contains("starting with /"));
        assert!(err("^/(a) /$2").contains("has 1 capture"));
        assert!(err("^/a /$nope").contains("unknown \"nope\" variable"));
        // A relative redirect is an address like any other.
        assert_eq!(apply("^/a$ b redirect", "/a"), redirect(302, "b"));
    }
}
