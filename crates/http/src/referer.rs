//! [`ValidReferers`]: nginx's `valid_referers` with the idiom that goes with
//! it, `if ($invalid_referer) { return 403; }` — hot-link protection: a
//! request whose `Referer` names another site is refused.
//!
//! As nginx decides: no `Referer` is valid with `none`; one that does not
//! start with `http://` or `https://` and a host (a firewall or proxy
//! blanked it) is valid with `blocked`; otherwise the host after the scheme
//! (lower-cased, up to its port or path, at most 256 bytes) must be one of
//! the names: `example.com` exactly, `*.example.com` any name under it,
//! `.example.com` both, `www.example.*` any ending; a name with a path
//! (`example.com/pics/`) also needs the referring page's path to start with
//! it. nginx's `server_names` and regular expressions (`~…`) are not taken.

use std::str::FromStr;

/// One `--valid-referers` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidReferers {
    /// `none`: a request without `Referer` is valid.
    none: bool,
    /// `blocked`: one whose `Referer` has no `http(s)://host` is valid.
    blocked: bool,
    names: Vec<Name>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Name {
    host: Host,
    /// The start the referring page's path must have.
    path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// `example.com`.
    Exact(String),
    /// `*.example.com` (`.example.com` below it; `exact_too`: the
    /// `.example.com` form, which takes `example.com` as well).
    Under { suffix: String, exact_too: bool },
    /// `www.example.*`: `www.example.` then anything.
    Starting(String),
}

impl FromStr for ValidReferers {
    type Err = String;

    /// nginx's arguments: `none`, `blocked` and names, space-separated.
    fn from_str(s: &str) -> Result<ValidReferers, String> {
        let mut v = ValidReferers {
            none: false,
            blocked: false,
            names: Vec::new(),
        };
        for word in s.split_whitespace() {
            match word {
                "none" => v.none = true,
                "blocked" => v.blocked = true,
                "server_names" => {
                    return Err("server_names: there are no server names here; list the \
                                site's own names"
                        .to_owned())
                }
                w if w.starts_with('~') => {
                    return Err(format!(
                        "{w:?}: regular expressions are not taken; list the names \
                         (*.example.com, www.example.*)"
                    ))
                }
                w => v.names.push(w.parse()?),
            }
        }
        if !v.none && !v.blocked && v.names.is_empty() {
            return Err("give none, blocked or names, e.g. \"none *.example.com\"".to_owned());
        }
        Ok(v)
    }
}

impl FromStr for Name {
    type Err = String;

    fn from_str(w: &str) -> Result<Name, String> {
        let (host, path) = match w.find('/') {
            Some(i) => (&w[..i], Some(w[i..].to_owned())),
            None => (w, None),
        };
        let host = host.to_ascii_lowercase();
        let bad = || format!("{w:?}: not a host name (example.com, *.example.com, www.example.*)");
        let plain = |h: &str| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        };
        let host = if let Some(rest) = host.strip_prefix("*.") {
            plain(rest).then(|| Host::Under {
                suffix: format!(".{rest}"),
                exact_too: false,
            })
        } else if let Some(rest) = host.strip_prefix('.') {
            plain(rest).then(|| Host::Under {
                suffix: format!(".{rest}"),
                exact_too: true,
            })
        } else if let Some(rest) = host.strip_suffix(".*") {
            plain(rest).then(|| Host::Starting(format!("{rest}.")))
        } else {
            plain(&host).then(|| Host::Exact(host.clone()))
        };
        Ok(Name {
            host: host.ok_or_else(bad)?,
            path,
        })
    }
}

impl ValidReferers {
    /// Whether a request with this `Referer` (`None`: without one) is let
    /// through (nginx's `$invalid_referer` empty).
    pub fn valid(&self, referer: Option<&[u8]>) -> bool {
        let Some(r) = referer else {
            return self.none;
        };
        let after_scheme = |scheme: &[u8]| {
            // nginx wants a host of four bytes at least ("http://i.ru").
            (r.len() >= scheme.len() + 4 && r[..scheme.len()].eq_ignore_ascii_case(scheme))
                .then(|| &r[scheme.len()..])
        };
        let Some(rest) = after_scheme(b"http://").or_else(|| after_scheme(b"https://")) else {
            return self.blocked;
        };
        let end = rest
            .iter()
            .position(|&b| b == b'/' || b == b':')
            .unwrap_or(rest.len());
        if end > 256 {
            return false;
        }
        let host = rest[..end].to_ascii_lowercase();
        // After the host: its port, then the page's path.
        let path_at = rest[end..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(rest.len(), |i| end + i);
        let path = &rest[path_at..];
        // nginx's order: exact names, then `*.` ones, then `.*` ones.
        let exact = self
            .names
            .iter()
            .find(|n| matches!(&n.host, Host::Exact(h) if h.as_bytes() == host));
        let under = || {
            self.names
                .iter()
                .filter(|n| match &n.host {
                    Host::Under { suffix, exact_too } => {
                        (host.len() > suffix.len() && host.ends_with(suffix.as_bytes()))
                            || (*exact_too && host == suffix.as_bytes()[1..])
                    }
                    _ => false,
                })
                .max_by_key(|n| match &n.host {
                    Host::Under { suffix, .. } => suffix.len(),
                    _ => 0,
                })
        };
        let starting = || {
            self.names
                .iter()
                .filter(|n| match &n.host {
                    Host::Starting(p) => host.len() > p.len() && host.starts_with(p.as_bytes()),
                    _ => false,
                })
                .max_by_key(|n| match &n.host {
                    Host::Starting(p) => p.len(),
                    _ => 0,
                })
        };
        match exact.or_else(under).or_else(starting) {
            None => false,
            Some(Name { path: None, .. }) => true,
            Some(Name { path: Some(p), .. }) => path.starts_with(p.as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &str) -> ValidReferers {
        s.parse().unwrap()
    }

    #[test]
    fn decides_as_nginx() {
        let v = list(
            "none blocked example.com *.example.org .example.net www.example.* pics.test/gallery/",
        );
        for (referer, want) in [
            (None, true),
            (Some("http://example.com/page"), true),
            (Some("HTTPS://EXAMPLE.COM:8443/x"), true),
            (Some("http://api.example.com/"), false),
            (Some("http://www.example.com/"), true),
            (Some("http://a.example.org/"), true),
            (Some("http://a.b.example.org"), true),
            (Some("http://example.org/"), false),
            (Some("http://example.net/"), true),
            (Some("http://x.example.net/"), true),
            (Some("http://www.example.co.uk/p"), true),
            (Some("http://www.example/"), false),
            (Some("http://pics.test/gallery/1.html"), true),
            (Some("http://pics.test:80/gallery/"), true),
            (Some("http://pics.test/other/"), false),
            (Some("http://evil.com/?example.com"), false),
            (Some("example.com"), true),
            (Some("http://a.b"), true),
            (Some(""), true),
        ] {
            assert_eq!(v.valid(referer.map(str::as_bytes)), want, "{referer:?}");
        }
        let strict = list("example.com");
        assert!(!strict.valid(None));
        assert!(!strict.valid(Some(b"blanked-by-proxy")));
        let long = format!("http://{}.example.com/", "a".repeat(300));
        assert!(!list("*.example.com").valid(Some(long.as_bytes())));
    }

    #[test]
    fn refuses_what_it_cannot_take() {
        for (bad, says) in [
            ("", "give none, blocked or names"),
            ("server_names", "no server names"),
            ("~\\.google\\.", "regular expressions"),
            ("exa mple.com *.", "not a host name"),
            ("ex%ample.com", "not a host name"),
        ] {
            let err = bad.parse::<ValidReferers>().unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }
}
