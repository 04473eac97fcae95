//! [`TryFiles`]: nginx's `try_files`, the names a request may be served
//! by, tried in order, then a last resort.
//!
//! `--try-files '$uri $uri.html $uri/ =404'` serves `/about` by
//! `about.html` when there is no file `about` (the clean addresses of a
//! static site generator); `'$uri $uri/ /index.html'` answers every
//! address that names nothing with the application's page (a single-page
//! application). As in nginx, an entry names a file (`$uri`,
//! `$uri.html`, `/maintenance.html`) or, ending in `/`, a directory
//! (`$uri/`: then the directory is answered as it would be, a redirect to
//! its address with a slash, its index, or a listing); the last is a
//! status (`=404`) or an address served when none of the others exists.

use std::str::FromStr;

use crate::path::{normalize, Resolved};
use crate::status::{HttpError, Status};

/// One entry before the last: `before` + the request's path (if `uri`) +
/// `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Try {
    before: String,
    uri: bool,
    after: String,
    /// Ends in `/`: it names a directory.
    dir: bool,
}

/// The last entry: what answers when no other names anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Last {
    /// `=CODE`: this error (then `--error-page` applies, as in nginx).
    Status(Status),
    /// An address of the root, served as if asked for.
    Uri(String),
}

/// nginx's `try_files` (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TryFiles {
    tries: Vec<Try>,
    last: Last,
}

/// The errors `=CODE` may name: those a lookup answers.
const CODES: [Status; 4] = [
    Status::Forbidden,
    Status::NotFound,
    Status::InternalServerError,
    Status::ServiceUnavailable,
];

impl FromStr for TryFiles {
    type Err = String;

    /// nginx's `try_files` arguments: entries with `$uri` (the request's
    /// path, its query left out) or without, then `=CODE` or an address.
    fn from_str(s: &str) -> Result<TryFiles, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let Some((&last, tries)) = words.split_last().filter(|(_, t)| !t.is_empty()) else {
            return Err("give entries and a last resort: \"$uri $uri.html $uri/ =404\"".to_owned());
        };
        let last = match last.strip_prefix('=') {
            Some(code) => Last::Status(
                CODES
                    .into_iter()
                    .find(|s| code.parse() == Ok(s.code()))
                    .ok_or_else(|| {
                        format!("{last:?}: the last resort may be =403, =404, =500 or =503")
                    })?,
            ),
            None if last.starts_with('/') && !last.contains(['$', '?', '#']) => {
                Last::Uri(normalize(last).map_err(|_| format!("{last:?}: not a valid path"))?)
            }
            None => {
                return Err(format!(
                "{last:?}: the last resort is =CODE or an address of the root such as /index.html"
            ))
            }
        };
        let tries = tries
            .iter()
            .map(|&t| {
                let (before, uri, after) = match t.split_once("$uri") {
                    Some((before, after)) => (before, true, after),
                    None => (t, false, ""),
                };
                // The entry with a sample path must already be a
                // normalised path: no `..`, `.`, `%`, query or other
                // variable in what it adds.
                let sample = join(before, if uri { "/x" } else { "" }, after);
                let valid = !t.contains(['?', '#', '%'])
                    && !before.contains('$')
                    && !after.contains('$')
                    && (before.is_empty() || before.starts_with('/'))
                    && (uri || before.starts_with('/'))
                    && normalize(&sample).is_ok_and(|n| n == sample);
                match valid {
                    true => Ok(Try {
                        before: before.to_owned(),
                        uri,
                        after: after.to_owned(),
                        dir: t.ends_with('/'),
                    }),
                    false => Err(format!(
                        "{t:?}: an entry is $uri with a path before or after it (\"$uri.html\", \"$uri/\", \
                         \"/cache$uri\"), or a path of the root; $uri is the only variable known here"
                    )),
                }
            })
            .collect::<Result<Vec<Try>, String>>()?;
        Ok(TryFiles { tries, last })
    }
}

/// `before` + `path` + `after`, with the slash doubled where they meet
/// made one.
fn join(before: &str, path: &str, after: &str) -> String {
    let mut out = String::with_capacity(before.len() + path.len() + after.len());
    for part in [before, path, after] {
        match (out.ends_with('/'), part.strip_prefix('/')) {
            (true, Some(rest)) => out.push_str(rest),
            _ => out.push_str(part),
        }
    }
    out
}

impl TryFiles {
    /// What answers when no entry names anything.
    pub fn last(&self) -> &Last {
        &self.last
    }

    /// Resolves the request's `path` (normalised) by the first entry that
    /// names something under `root`, else by the last: the address served
    /// (its type, listing and `.gz` are of it) and what the root found
    /// there. An entry names a regular file or (one ending in `/`) a
    /// directory; one that is forbidden counts as found (it exists), and is
    /// answered 403, as in nginx.
    pub fn resolve(
        &self,
        root: &crate::path::Roots,
        path: &str,
    ) -> (String, Result<Resolved, HttpError>) {
        let absent = |r: &Result<Resolved, HttpError>| matches!(r, Err(e) if matches!(e.status, Status::NotFound | Status::BadRequest));
        for t in &self.tries {
            let path = if t.uri { path } else { "" };
            if t.dir {
                // The directory itself, as it is answered without this:
                // the entry without its last slash (`$uri/` of `/d` is `/d`,
                // redirected; of `/d/`, `/d/`, its index).
                let dir = match t.uri {
                    true => join(
                        &t.before,
                        path,
                        t.after.strip_suffix('/').unwrap_or(&t.after),
                    ),
                    false => t.before.strip_suffix('/').unwrap_or(&t.before).to_owned(),
                };
                let dir = if dir.is_empty() { "/".to_owned() } else { dir };
                let found = root.resolve(&dir);
                let file = !dir.ends_with('/') && matches!(found, Ok(Resolved::File { .. }));
                if !absent(&found) && !file {
                    return (dir, found);
                }
                continue;
            }
            let name = join(&t.before, path, &t.after);
            if !name.ends_with('/') {
                let found = root.resolve(&name);
                // A directory (answered by a redirect) is not a file.
                if !absent(&found) && !matches!(found, Ok(Resolved::Redirect { .. })) {
                    return (name, found);
                }
            }
        }
        match &self.last {
            Last::Status(status) => (path.to_owned(), Err(HttpError::keep(*status))),
            Last::Uri(uri) => (uri.clone(), root.resolve(uri)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::tests::TempDir;
    use crate::path::Root;

    #[test]
    fn entries_as_nginx_writes_them() {
        let t: TryFiles = "$uri $uri.html /cache$uri/index.html $uri/ /maintenance.html =404"
            .parse()
            .unwrap();
        assert_eq!(t.tries.len(), 5);
        assert_eq!(
            t.tries.iter().map(|t| t.dir).collect::<Vec<_>>(),
            [false, false, false, true, false]
        );
        assert_eq!(t.last(), &Last::Status(Status::NotFound));
        let t: TryFiles = "$uri /index.html".parse().unwrap();
        assert_eq!(t.last(), &Last::Uri("/index.html".to_owned()));
        for bad in [
            "",
            "$uri",
            "=404",
            "$uri =410",
            "$uri =abc",
            "$uri index.html",
            "$uri /index.php?q=$uri",
            "$uri /$uri",
            "$uri $args =404",
            "$uri$uri =404",
            "x$uri =404",
            "$uri/../x =404",
            "$uri/./x =404",
            "$uri%2e =404",
            "/a//b =404",
            "$request_uri =404",
        ] {
            assert!(bad.parse::<TryFiles>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slashes_where_the_parts_meet_are_one() {
        assert_eq!(join("", "/d/", "/"), "/d/");
        assert_eq!(join("/cache/", "/d", ".html"), "/cache/d.html");
        assert_eq!(join("", "/", "/index.html"), "/index.html");
        assert_eq!(join("/m.html", "", ""), "/m.html");
    }

    #[test]
    fn the_first_entry_that_names_something() {
        let dir = TempDir::new("try-files");
        for d in ["d", "sub", "empty", "cache/about"] {
            std::fs::create_dir_all(dir.0.join(d)).unwrap();
        }
        for f in [
            "index.html",
            "about.html",
            "d/index.html",
            "sub.html",
            "sub/index.html",
            "cache/about/index.html",
        ] {
            std::fs::write(dir.0.join(f), f).unwrap();
        }
        let root = crate::path::Roots::new(Root::new(&dir.0).unwrap());
        let served = |t: &str, path: &str| -> (String, Result<&'static str, u16>) {
            let t: TryFiles = t.parse().unwrap();
            let (served, found) = t.resolve(&root, path);
            let kind = match found {
                Ok(Resolved::File { .. }) => Ok("file"),
                Ok(Resolved::Redirect { .. }) => Ok("redirect"),
                Ok(Resolved::Listing { .. }) => Ok("listing"),
                Err(e) => Err(e.status.code()),
            };
            (served, kind)
        };
        let clean = "$uri $uri.html $uri/ =404";
        assert_eq!(served(clean, "/about"), ("/about.html".into(), Ok("file")));
        assert_eq!(
            served(clean, "/about.html"),
            ("/about.html".into(), Ok("file"))
        );
        // A directory is not a file: `$uri.html` comes first.
        assert_eq!(served(clean, "/sub"), ("/sub.html".into(), Ok("file")));
        assert_eq!(served(clean, "/sub/"), ("/sub/".into(), Ok("file")));
        assert_eq!(served(clean, "/d"), ("/d".into(), Ok("redirect")));
        assert_eq!(served(clean, "/d/"), ("/d/".into(), Ok("file")));
        assert_eq!(served(clean, "/empty/"), ("/empty/".into(), Err(403)));
        assert_eq!(served(clean, "/nope"), ("/nope".into(), Err(404)));
        assert_eq!(served(clean, "/"), ("/".into(), Ok("file")));
        let app = "$uri $uri/ /index.html";
        assert_eq!(
            served(app, "/nope/deeper"),
            ("/index.html".into(), Ok("file"))
        );
        assert_eq!(served(app, "/sub"), ("/sub".into(), Ok("redirect")));
        // A path before $uri, and an entry without it.
        let cached = "/cache$uri/index.html /index.html";
        assert_eq!(
            served(cached, "/about"),
            ("/cache/about/index.html".into(), Ok("file"))
        );
        assert_eq!(served(cached, "/x"), ("/index.html".into(), Ok("file")));
        let down = "/maintenance.html $uri =503";
        assert_eq!(
            served(down, "/about.html"),
            ("/about.html".into(), Ok("file"))
        );
        std::fs::write(dir.0.join("maintenance.html"), "down").unwrap();
        assert_eq!(
            served(down, "/about.html"),
            ("/maintenance.html".into(), Ok("file"))
        );
        assert_eq!(served("$uri =503", "/nope"), ("/nope".into(), Err(503)));
    }
}
