//! [`ErrorPage`]: nginx's `error_page`, a file of the root answering some
//! errors instead of the built-in page.
//!
//! `--error-page "404 /404.html"` answers a missing file with `/404.html`
//! under the error's own status (404), as nginx's `error_page 404
//! /404.html;`; `--error-page "404 =200 /index.html"` answers it with the
//! page as if it had been asked for (200, its validators, conditionals and
//! ranges), the single-page application's fallback (nginx's `error_page 404
//! =200 /index.html;`, or `try_files $uri /index.html;`). A page that
//! cannot be served itself (missing, a directory, forbidden) leaves the
//! built-in page of the first error: there is no second redirection.
//!
//! As nginx's, `=CODE` answers the page under another status (`"404 =410
//! /gone.html"`), and a page elsewhere, `http://` or `https://…`, is a
//! redirection there: 302, or the 301, 303, 307 or 308 that `=CODE` names
//! (`"404 =301 https://example.com/"`).

use std::fmt;

use crate::path::normalize;
use crate::status::Status;

/// One `--error-page` rule: the codes it replaces and the page that
/// answers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    /// The status codes it replaces (400 to 599; those a lookup never
    /// answers here, such as 502, never apply, as in a static nginx).
    pub codes: Vec<u16>,
    /// The page's URL path under the root, normalised; or, where
    /// [`redirect`](Self::redirect) says so, the address redirected to.
    pub uri: String,
    /// `=200` (or `=`): the page is answered as itself, with 200 and its
    /// validators; otherwise with the error's status (or `status`) and no
    /// validators.
    pub as_ok: bool,
    /// `=CODE` other than 200: the status the page is answered with in
    /// place of the error's; for a redirection, its status.
    pub status: Option<Status>,
    /// `uri` is an address elsewhere: the error is answered with a
    /// redirection there (302 unless `status` is another redirection).
    pub redirect: bool,
}

impl ErrorPage {
    /// The first of `pages` that replaces `status`.
    pub fn find(pages: &[ErrorPage], status: Status) -> Option<&ErrorPage> {
        pages.iter().find(|p| p.codes.contains(&status.code()))
    }
}

impl std::str::FromStr for ErrorPage {
    type Err = String;

    /// nginx's `error_page code ... [=200] uri` (without the `;`): codes,
    /// an optional `=200` or `=`, then a path of the root.
    fn from_str(s: &str) -> Result<ErrorPage, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let Some((&uri, rest)) = words.split_last() else {
            return Err("give codes and a page: \"404 /404.html\"".to_owned());
        };
        let redirect = uri.starts_with("http://") || uri.starts_with("https://");
        if !redirect && !uri.starts_with('/') {
            return Err(format!(
                "{uri:?}: the page must be a path of the root, such as /404.html, or an \
                 address (http://…, https://…) to redirect to (a named location is not \
                 supported)"
            ));
        }
        let uri = match redirect {
            // Sent as given in `Location`: bytes a field holds, no blank.
            true if uri.bytes().all(|b| (0x21..0x7f).contains(&b)) => uri.to_owned(),
            true => return Err(format!("{uri:?}: not an address a Location can hold")),
            false => normalize(uri).map_err(|_| format!("{uri:?}: not a valid path"))?,
        };
        let (rest, as_ok, status) = match rest.split_last() {
            Some((&"=", codes)) | Some((&"=200", codes)) => (codes, true, None),
            Some((last, codes)) if last.starts_with('=') => {
                let status = last[1..]
                    .parse::<u16>()
                    .ok()
                    .and_then(Status::from_code)
                    .filter(|s| !matches!(s.code(), 206 | 304))
                    .ok_or_else(|| {
                        format!(
                            "{last:?}: give =CODE with a status the server sends \
                             (200, 301-308, 400-505)"
                        )
                    })?;
                (codes, false, Some(status))
            }
            _ => (rest, false, None),
        };
        // nginx: a redirection's status is 302 unless another is named.
        let (as_ok, status) = match redirect {
            true => (
                false,
                Some(status.filter(|s| s.redirects()).unwrap_or(Status::Found)),
            ),
            false => (as_ok, status),
        };
        if rest.is_empty() {
            return Err(format!(
                "{s:?}: give at least one status code before the page"
            ));
        }
        let codes = rest
            .iter()
            .map(|c| match c.parse::<u16>() {
                Ok(n @ 400..=599) => Ok(n),
                _ => Err(format!("{c:?}: a status code from 400 to 599")),
            })
            .collect::<Result<Vec<u16>, String>>()?;
        Ok(ErrorPage {
            codes,
            uri,
            as_ok,
            status,
            redirect,
        })
    }
}

impl fmt::Display for ErrorPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.codes {
            write!(f, "{c} ")?;
        }
        if self.as_ok {
            f.write_str("=200 ")?;
        }
        if let Some(s) = self.status {
            write!(f, "={} ", s.code())?;
        }
        f.write_str(&self.uri)
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorPage;
    use crate::status::Status;

    fn page(s: &str) -> Result<ErrorPage, String> {
        s.parse()
    }

    #[test]
    fn parses_nginx_forms() {
        let p = page("404 /404.html").unwrap();
        assert_eq!(
            (p.codes.as_slice(), p.uri.as_str(), p.as_ok),
            (&[404][..], "/404.html", false)
        );
        let p = page("500 502 503 504 /50x.html").unwrap();
        assert_eq!(p.codes, [500, 502, 503, 504]);
        let p = page(" 404  =200 /index.html ").unwrap();
        assert!(p.as_ok);
        assert_eq!(p.to_string(), "404 =200 /index.html");
        assert!(page("403 404 = /app/").unwrap().as_ok);
        // Normalised as a request's path would be.
        assert_eq!(
            page("404 /err/./x/../404.html").unwrap().uri,
            "/err/404.html"
        );
        let p = page("404 =410 /gone.html").unwrap();
        assert_eq!(
            (p.as_ok, p.status, p.redirect),
            (false, Some(Status::Gone), false)
        );
        assert_eq!(p.to_string(), "404 =410 /gone.html");
        let p = page("404 https://example.com/x?y").unwrap();
        assert_eq!(
            (p.uri.as_str(), p.status, p.redirect),
            ("https://example.com/x?y", Some(Status::Found), true)
        );
        assert_eq!(
            page("404 =301 http://e/").unwrap().status,
            Some(Status::MovedPermanently)
        );
        // nginx: a code that is not a redirection makes a 302.
        assert_eq!(
            page("404 =200 http://e/").unwrap().status,
            Some(Status::Found)
        );
        assert_eq!(
            page("404 =410 http://e/").unwrap().status,
            Some(Status::Found)
        );
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        for (bad, says) in [
            ("", "give codes and a page"),
            ("/404.html", "at least one status code"),
            ("=200 /index.html", "at least one status code"),
            ("404 404.html", "a path of the root"),
            ("404 @fallback", "a path of the root"),
            ("404 http://a\u{1}b/", "not an address"),
            ("404 =299 /x.html", "give =CODE"),
            ("404 =304 /x.html", "give =CODE"),
            ("200 /x.html", "from 400 to 599"),
            ("600 /x.html", "from 400 to 599"),
            ("abc /x.html", "from 400 to 599"),
            ("404 /../x.html", "not a valid path"),
        ] {
            let err = page(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_first_rule_for_a_code_applies() {
        let pages = [
            page("404 /a.html").unwrap(),
            page("403 404 /b.html").unwrap(),
        ];
        assert_eq!(
            ErrorPage::find(&pages, Status::NotFound).unwrap().uri,
            "/a.html"
        );
        assert_eq!(
            ErrorPage::find(&pages, Status::Forbidden).unwrap().uri,
            "/b.html"
        );
        assert!(ErrorPage::find(&pages, Status::InternalServerError).is_none());
    }
}
