//! nginx's prefix and exact `location` blocks, for the settings that may
//! differ by path: who is let in (`allow`/`deny`, `auth_basic`,
//! `satisfy`), a `return`, the fields added (`add_header`, `expires`) and
//! `limit_rate`, and whether they are logged (`access_log off`). The rest
//! of a server's settings are the server's.
//!
//! A request takes the location nginx would give it: an exact one naming
//! its path, else the longest prefix of its path, else none (the server's
//! settings). A location's setting replaces the server's of the same kind
//! whole, as nginx's inheritance does: its `allow`/`deny` rules replace the
//! server's list, its `add_header` fields the server's fields.

use std::path::PathBuf;
use std::sync::Arc;

use crate::fields::ExpiresRule;
use crate::{Access, AddedField, AuthBasic, ResponseFields, Return};

/// Which paths a location takes (nginx's `location PREFIX` and
/// `location = PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Paths starting with it (the longest such prefix wins).
    Prefix(String),
    /// This path alone (before any prefix).
    Exact(String),
}

impl Match {
    /// `PREFIX` or `=PATH` (nginx's `location = PATH`): a path starting
    /// with `/`, decoded as requests' paths are compared.
    pub fn parse(s: &str) -> Result<Match, String> {
        let (exact, path) = match s.strip_prefix('=') {
            Some(p) => (true, p.trim_start()),
            None => (false, s),
        };
        if !path.starts_with('/') {
            return Err(format!(
                "{s:?}: a location is a path starting with / (or =/PATH for that path alone)"
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
        Ok(if exact {
            Match::Exact(path)
        } else {
            Match::Prefix(path)
        })
    }
}

impl std::fmt::Display for Match {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Match::Prefix(p) => f.write_str(p),
            Match::Exact(p) => write!(f, "={p}"),
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
    /// Whether its requests get access log lines (`false`: nginx's
    /// `access_log off` there).
    pub logged: Option<bool>,
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
            logged: None,
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
            };
            built.push((l.matcher.clone(), scope));
        }
        Ok(Scopes {
            server,
            locations: built,
        })
    }

    /// The settings for a request of `path`: an exact location's, else
    /// the longest prefix's, else the server's.
    pub(crate) fn for_path(&self, path: &str) -> &Scope {
        let mut best: Option<(usize, &Scope)> = None;
        for (m, scope) in &self.locations {
            match m {
                Match::Exact(p) if p == path => return scope,
                Match::Prefix(p)
                    if path.starts_with(p.as_str()) && best.is_none_or(|(n, _)| p.len() > n) =>
                {
                    best = Some((p.len(), scope))
                }
                _ => {}
            }
        }
        best.map_or(&self.server, |(_, s)| s)
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
