//! nginx's `location` blocks (prefix, `^~` prefix, exact, regular
//! expression), for the settings that may differ by path: who is let in
//! (`allow`/`deny`, `auth_basic`, `satisfy`, `internal`), a `return`,
//! `try_files`, error pages, gzip, the fields added (`add_header`,
//! `expires`), `limit_rate`, and whether requests are logged (`access_log
//! off`). The rest of a server's settings are the server's.
//!
//! A request takes the location nginx would give it: an exact one naming
//! its path, else (unless the longest prefix is `^~`) the first regular
//! expression that matches, else the longest prefix, else none (the
//! server's settings). A location's setting replaces the server's of the
//! same kind whole, as nginx's inheritance does: its `allow`/`deny` rules
//! replace the server's list, its `add_header` fields the server's fields;
//! `try_files` is never inherited (nginx's server-level one applies only
//! where no location does).

use std::path::PathBuf;
use std::sync::Arc;

use crate::fields::ExpiresRule;
use crate::{Access, AddedField, AuthBasic, ResponseFields, Return};

/// Which paths a location takes (nginx's `location PREFIX`, `location ^~
/// PREFIX`, `location = PATH`, `location ~ REGEX` and `location ~* REGEX`).
#[derive(Debug, Clone)]
pub enum Match {
    /// Paths starting with it (the longest such prefix wins, unless a
    /// regular expression takes the path).
    Prefix(String),
    /// nginx's `^~ PREFIX`: as [`Prefix`](Match::Prefix), and the longest
    /// prefix being this one, no regular expression is tried.
    PrefixOnly(String),
    /// This path alone (before anything else).
    Exact(String),
    /// Paths it matches (the `regex` crate's syntax), the first in order
    /// that does, tried after the prefixes; `~*`: case-insensitive.
    Regex {
        /// The pattern as given.
        pattern: String,
        /// `~*`.
        caseless: bool,
        /// Compiled.
        regex: regex::Regex,
    },
}

impl PartialEq for Match {
    /// The same kind and text (two such locations are one twice, as nginx
    /// refuses them).
    fn eq(&self, other: &Match) -> bool {
        use Match::*;
        match (self, other) {
            (Prefix(a) | PrefixOnly(a), Prefix(b) | PrefixOnly(b)) | (Exact(a), Exact(b)) => a == b,
            (
                Regex {
                    pattern: a,
                    caseless: x,
                    ..
                },
                Regex {
                    pattern: b,
                    caseless: y,
                    ..
                },
            ) => a == b && x == y,
            _ => false,
        }
    }
}

impl Eq for Match {}

impl Match {
    /// `PREFIX`, `^~ PREFIX`, `= PATH`, `~ REGEX` or `~* REGEX` (the space
    /// after the operator optional, as in nginx's `=/PATH`): a path
    /// starts with `/`, compared decoded and normalised as requests'
    /// paths are.
    pub fn parse(s: &str) -> Result<Match, String> {
        let (op, rest) = ["~*", "^~", "~", "="]
            .iter()
            .find_map(|op| s.strip_prefix(op).map(|r| (*op, r.trim_start())))
            .unwrap_or(("", s));
        if op.starts_with('~') {
            let caseless = op == "~*";
            let full = match caseless {
                true => format!("(?i){rest}"),
                false => rest.to_owned(),
            };
            if rest.is_empty() {
                return Err(format!("{s:?}: a regular expression after {op}"));
            }
            let regex = regex::Regex::new(&full).map_err(|e| format!("{s:?}: {e}"))?;
            return Ok(Match::Regex {
                pattern: rest.to_owned(),
                caseless,
                regex,
            });
        }
        let path = rest;
        if !path.starts_with('/') {
            return Err(format!(
                "{s:?}: a location is a path starting with / (or = PATH, ^~ PATH, ~ REGEX, ~* REGEX)"
            ));
        }
        // Requests' paths are compared decoded and normalised: a prefix
        // that is not would take none.
        if crate::path::normalize_rewritten(path.as_bytes().to_vec()).as_deref() != Some(path) {
            return Err(format!(
                "{s:?}: a location is a decoded path without . or .. segments or control characters"
            ));
        }
        let path = path.to_owned();
        Ok(match op {
            "=" => Match::Exact(path),
            "^~" => Match::PrefixOnly(path),
            _ => Match::Prefix(path),
        })
    }
}

impl std::fmt::Display for Match {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Match::Prefix(p) => f.write_str(p),
            Match::PrefixOnly(p) => write!(f, "^~ {p}"),
            Match::Exact(p) => write!(f, "= {p}"),
            Match::Regex {
                pattern, caseless, ..
            } => write!(f, "{} {pattern}", if *caseless { "~*" } else { "~" }),
        }
    }
}

/// One location's settings; `None`: the server's.
#[derive(Debug, Clone)]
pub struct Location {
    /// The paths it takes.
    pub matcher: Match,
    /// Its `allow`/`deny` rules, in order.
    pub access: Option<Access>,
    /// Its realm and user file (`Some(None)`: nginx's `auth_basic off`).
    pub auth_basic: Option<Option<(String, PathBuf)>>,
    /// nginx's `satisfy any` (else all).
    pub satisfy_any: Option<bool>,
    /// Its `return`, run after the server's `--return` would have.
    pub answer: Option<Return>,
    /// Its `expires` rules.
    pub expires: Option<Vec<ExpiresRule>>,
    /// Its added fields.
    pub added: Option<Vec<AddedField>>,
    /// Its `limit_rate` and `limit_rate_after`, in bytes.
    pub limit_rate: Option<(u64, u64)>,
    /// Its `try_files` (never the server's: nginx's server-level one
    /// applies only where no location does).
    pub try_files: Option<crate::TryFiles>,
    /// Whether its requests get access log lines (`false`: nginx's
    /// `access_log off` there).
    pub logged: Option<bool>,
    /// nginx's `internal`: a client's request it takes is answered 404
    /// (an error page or `--try-files` may still serve its paths).
    pub internal: bool,
    /// Its `error_page`s (replacing the server's list).
    pub error_pages: Option<Vec<crate::ErrorPage>>,
    /// Its `gzip`, `gzip_static`, `gzip_types` and `gzip_min_length`
    /// (each the server's where not given).
    pub gzip: GzipOverride,
}

/// A location's gzip settings; `None`: the server's.
#[derive(Debug, Clone, Copy, Default)]
pub struct GzipOverride {
    /// `gzip on|off`.
    pub enabled: Option<bool>,
    /// `gzip_static on|off`.
    pub static_files: Option<bool>,
    /// `gzip_types`.
    pub types: Option<crate::GzipTypes>,
    /// `gzip_min_length`.
    pub min_length: Option<u64>,
}

impl GzipOverride {
    /// `server`'s settings with these in place.
    fn over(&self, server: crate::GzipConfig) -> crate::GzipConfig {
        crate::GzipConfig {
            enabled: self.enabled.unwrap_or(server.enabled),
            static_files: self.static_files.unwrap_or(server.static_files),
            types: self.types.unwrap_or(server.types),
            min_length: self.min_length.unwrap_or(server.min_length),
            ..server
        }
    }
}

impl Location {
    /// A location taking `matcher` that sets nothing of its own.
    pub fn new(matcher: Match) -> Location {
        Location {
            matcher,
            access: None,
            auth_basic: None,
            satisfy_any: None,
            answer: None,
            expires: None,
            added: None,
            limit_rate: None,
            try_files: None,
            logged: None,
            internal: false,
            error_pages: None,
            gzip: GzipOverride::default(),
        }
    }
}

/// The settings one request is answered under.
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) access: Access,
    pub(crate) auth: Option<Arc<AuthBasic>>,
    pub(crate) satisfy_any: bool,
    /// A location's own `return` (the server's is checked before).
    pub(crate) answer: Option<Return>,
    pub(crate) fields: ResponseFields,
    pub(crate) limit_rate: u64,
    pub(crate) limit_rate_after: u64,
    /// Whether its requests are logged (where the server has a log).
    pub(crate) logged: bool,
    pub(crate) try_files: Option<crate::TryFiles>,
    /// Client requests get 404 (nginx's `internal`).
    pub(crate) internal: bool,
    pub(crate) error_pages: Vec<crate::ErrorPage>,
    pub(crate) gzip: crate::GzipConfig,
}

impl Scope {
    /// `--limit-rate` and `--limit-rate-after`.
    pub(crate) fn pace(&self) -> (u64, u64) {
        (self.limit_rate, self.limit_rate_after)
    }
}

/// The server's settings and its locations'.
#[derive(Debug)]
pub(crate) struct Scopes {
    pub(crate) server: Scope,
    locations: Vec<(Match, Scope)>,
}

impl Scopes {
    /// `server`, and `locations` over it; `auth` builds a realm's checker
    /// from its file (once for each location that names one).
    pub(crate) fn new(
        server: Scope,
        locations: &[Location],
        mut auth: impl FnMut(&str, &std::path::Path) -> std::io::Result<AuthBasic>,
    ) -> Result<Scopes, String> {
        let mut built: Vec<(Match, Scope)> = Vec::with_capacity(locations.len());
        for l in locations {
            if built.iter().any(|(m, _)| *m == l.matcher) {
                return Err(format!("--location {} is given twice", l.matcher));
            }
            let auth = match &l.auth_basic {
                None => server.auth.clone(),
                Some(None) => None,
                Some(Some((realm, file))) => {
                    Some(Arc::new(auth(realm, file).map_err(|e| {
                        format!("--location {}: {}: {e}", l.matcher, file.display())
                    })?))
                }
            };
            let fields = server
                .fields
                .over(l.expires.clone(), l.added.clone())
                .map_err(|e| format!("--location {}: {e}", l.matcher))?;
            let (limit_rate, limit_rate_after) = l
                .limit_rate
                .unwrap_or((server.limit_rate, server.limit_rate_after));
            let scope = Scope {
                access: l.access.clone().unwrap_or_else(|| server.access.clone()),
                auth,
                satisfy_any: l.satisfy_any.unwrap_or(server.satisfy_any),
                answer: l.answer.clone(),
                fields,
                limit_rate,
                limit_rate_after,
                logged: l.logged.unwrap_or(server.logged),
                try_files: l.try_files.clone(),
                internal: l.internal,
                error_pages: l
                    .error_pages
                    .clone()
                    .unwrap_or_else(|| server.error_pages.clone()),
                gzip: l.gzip.over(server.gzip),
            };
            built.push((l.matcher.clone(), scope));
        }
        Ok(Scopes {
            server,
            locations: built,
        })
    }

    /// The settings for a request of `path`, as nginx picks its
    /// location: an exact one, else (unless the longest prefix is `^~`)
    /// the first regular expression matching, else the longest prefix,
    /// else the server's.
    pub(crate) fn for_path(&self, path: &str) -> &Scope {
        // (longest prefix's length, whether `^~`, its settings)
        let mut best: Option<(usize, bool, &Scope)> = None;
        let mut regexes = false;
        for (m, scope) in &self.locations {
            match m {
                Match::Exact(p) if p == path => return scope,
                Match::Prefix(p) | Match::PrefixOnly(p)
                    if path.starts_with(p.as_str()) && best.is_none_or(|(n, ..)| p.len() > n) =>
                {
                    best = Some((p.len(), matches!(m, Match::PrefixOnly(_)), scope))
                }
                Match::Regex { .. } => regexes = true,
                _ => {}
            }
        }
        if regexes && !best.is_some_and(|(_, only, _)| only) {
            for (m, scope) in &self.locations {
                if let Match::Regex { regex, .. } = m {
                    if regex.is_match(path) {
                        return scope;
                    }
                }
            }
        }
        best.map_or(&self.server, |(.., s)| s)
    }

    /// Whether any location has settings of its own.
    pub(crate) fn has_locations(&self) -> bool {
        !self.locations.is_empty()
    }

    /// Every scope: the server's, then the locations'.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Scope> {
        std::iter::once(&self.server).chain(self.locations.iter().map(|(_, s)| s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(limit_rate: u64) -> Scope {
        Scope {
            access: Access::default(),
            auth: None,
            satisfy_any: false,
            answer: None,
            fields: ResponseFields::default(),
            limit_rate,
            limit_rate_after: 0,
            logged: true,
            try_files: None,
            internal: false,
            error_pages: Vec::new(),
            gzip: crate::GzipConfig::default(),
        }
    }

    fn no_auth(_: &str, _: &std::path::Path) -> std::io::Result<AuthBasic> {
        Err(std::io::Error::other("no file here"))
    }

    #[test]
    fn exact_then_longest_prefix_then_the_server() {
        let at = |m: &str, rate: u64| Location {
            limit_rate: Some((rate, 0)),
            ..Location::new(Match::parse(m).unwrap())
        };
        let locations = [at("/a/", 1), at("/a/b/", 2), at("=/a/b/c", 3), at("/a", 4)];
        let s = Scopes::new(scope(9), &locations, no_auth).unwrap();
        let rate = |p: &str| s.for_path(p).limit_rate;
        assert_eq!(rate("/a/b/c"), 3);
        assert_eq!(rate("/a/b/cd"), 2);
        assert_eq!(rate("/a/b/"), 2);
        assert_eq!(rate("/a/x"), 1);
        assert_eq!(rate("/ab"), 4);
        assert_eq!(rate("/a"), 4);
        assert_eq!(rate("/"), 9);
        assert_eq!(rate("/b/a/"), 9);
        // Regular expressions after the prefixes, the first that matches;
        // not after a `^~` prefix; never before an exact path.
        let locations = [
            at("/a/", 1),
            at("^~ /a/b/", 2),
            at("~* \\.CSS$", 3),
            at("~ \\.css$", 4),
            at("= /a/x.css", 5),
            at("~ ^/a/", 6),
        ];
        let s = Scopes::new(scope(9), &locations, no_auth).unwrap();
        let rate = |p: &str| s.for_path(p).limit_rate;
        assert_eq!(rate("/a/y.css"), 3);
        assert_eq!(rate("/y.Css"), 3);
        assert_eq!(rate("/a/b/y.css"), 2);
        assert_eq!(rate("/a/x.css"), 5);
        assert_eq!(rate("/a/y.txt"), 6);
        assert_eq!(rate("/y.txt"), 9);
    }

    #[test]
    fn a_location_keeps_what_it_does_not_set() {
        let mut server = scope(7);
        server.satisfy_any = true;
        server.access = Access {
            rules: vec![crate::AccessRule::new(false, "all").unwrap()],
        };
        let own = Location {
            access: Some(Access::default()),
            ..Location::new(Match::parse("/open/").unwrap())
        };
        let s = Scopes::new(
            server,
            &[own, Location::new(Match::parse("/x/").unwrap())],
            no_auth,
        )
        .unwrap();
        let open = s.for_path("/open/f");
        assert!(open.access.is_empty());
        assert_eq!((open.limit_rate, open.satisfy_any), (7, true));
        assert!(!s.for_path("/x/f").access.is_empty());
        assert!(!s.for_path("/f").access.is_empty());
    }

    #[test]
    fn refusals() {
        assert!(Match::parse("admin/")
            .unwrap_err()
            .contains("starting with /"));
        assert!(Match::parse("= x").is_err());
        assert_eq!(Match::parse("= /x").unwrap(), Match::Exact("/x".into()));
        assert_eq!(Match::parse("=/x").unwrap(), Match::Exact("/x".into()));
        assert_eq!(Match::parse("^~ /x").unwrap().to_string(), "^~ /x");
        assert_eq!(Match::parse("~*\\.js$").unwrap().to_string(), "~* \\.js$");
        assert!(Match::parse("~ (")
            .unwrap_err()
            .contains("regex parse error"));
        assert!(Match::parse("~*")
            .unwrap_err()
            .contains("a regular expression after"));
        // One path twice, whatever the prefix's kind.
        assert_eq!(
            Match::parse("^~ /x/").unwrap(),
            Match::parse("/x/").unwrap()
        );
        let twice = [
            Location::new(Match::parse("/a/").unwrap()),
            Location::new(Match::parse("/a/").unwrap()),
        ];
        let e = Scopes::new(scope(0), &twice, no_auth).unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        let locked = Location {
            auth_basic: Some(Some(("R".into(), "/nowhere".into()))),
            ..Location::new(Match::parse("/a/").unwrap())
        };
        let e = Scopes::new(scope(0), &[locked], no_auth).unwrap_err();
        assert!(e.contains("--location /a/: /nowhere: no file here"), "{e}");
    }
}
