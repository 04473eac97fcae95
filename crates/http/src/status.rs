//! Status codes this server sends, and [`HttpError`]: a status to answer with
//! and whether the connection must close afterwards.

use std::fmt;
use std::io;

/// The status codes this server sends. Nothing else is ever written on a
/// final status line, so a `match` over this enum sees every response (the
/// one interim response, `100 Continue`, is
/// [`response::CONTINUE`](crate::response::CONTINUE)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// 200: the whole file follows.
    Ok,
    /// 206: one byte range of the file follows.
    PartialContent,
    /// 301: a directory asked for without its trailing slash.
    MovedPermanently,
    /// 302: `--return 302 URL`.
    Found,
    /// 303: `--return 303 URL`.
    SeeOther,
    /// 304: the client's copy is current (conditional GET/HEAD).
    NotModified,
    /// 307: `--return 307 URL`.
    TemporaryRedirect,
    /// 308: `--return 308 URL`.
    PermanentRedirect,
    /// 400: malformed head or hostile target.
    BadRequest,
    /// 401: no valid credentials for `--auth-basic` (sent with
    /// `WWW-Authenticate`).
    Unauthorized,
    /// 403: the target exists but may not be served (outside the root,
    /// a directory without index, not a regular file, no permission).
    Forbidden,
    /// 404: no such file.
    NotFound,
    /// 405: a method other than GET or HEAD (sent with `Allow: GET, HEAD`).
    MethodNotAllowed,
    /// 408: the client was too slow to send its head (the handler's timeout).
    RequestTimeout,
    /// 410: `--return 410`.
    Gone,
    /// 412: `If-Match` or `If-Unmodified-Since` does not hold for the file.
    PreconditionFailed,
    /// 413: a request body larger than [`Limits::max_body`](crate::Limits::max_body).
    ContentTooLarge,
    /// 414: a request-target longer than [`Limits::max_uri`](crate::Limits::max_uri).
    UriTooLong,
    /// 416: a `Range` that no byte of the file satisfies (sent with
    /// `Content-Range: bytes */size`).
    RangeNotSatisfiable,
    /// 429: over `--limit-req`'s burst, with `status=429`.
    TooManyRequests,
    /// 431: a head larger than [`Limits::max_head`](crate::Limits::max_head)
    /// or with more than [`Limits::max_headers`](crate::Limits::max_headers)
    /// header fields.
    HeaderFieldsTooLarge,
    /// 500: the server failed (an I/O error reading a file it had found).
    InternalServerError,
    /// 501: a request body in a transfer coding besides `chunked` (RFC
    /// 9112 §6.1; nginx answers the same).
    NotImplemented,
    /// 503: the server is out of a resource for now (descriptors: the file
    /// could not be opened); the client may retry.
    ServiceUnavailable,
    /// 505: a version other than HTTP/1.x (HTTP/2 preface included).
    VersionNotSupported,
    /// 444, nginx's own: the connection closes without an answer
    /// (`--return 444`, a limit's `status=444`). Logged, never sent, so
    /// not in [`Status::ALL`].
    NoResponse,
}

impl Status {
    /// The three-digit code.
    pub const fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::PartialContent => 206,
            Status::MovedPermanently => 301,
            Status::Found => 302,
            Status::SeeOther => 303,
            Status::NotModified => 304,
            Status::TemporaryRedirect => 307,
            Status::PermanentRedirect => 308,
            Status::BadRequest => 400,
            Status::Unauthorized => 401,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::Gone => 410,
            Status::PreconditionFailed => 412,
            Status::ContentTooLarge => 413,
            Status::UriTooLong => 414,
            Status::RangeNotSatisfiable => 416,
            Status::TooManyRequests => 429,
            Status::HeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::ServiceUnavailable => 503,
            Status::NotImplemented => 501,
            Status::VersionNotSupported => 505,
            Status::NoResponse => 444,
        }
    }

    /// The reason phrase of RFC 9110.
    pub const fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::PartialContent => "Partial Content",
            Status::MovedPermanently => "Moved Permanently",
            Status::Found => "Found",
            Status::SeeOther => "See Other",
            Status::NotModified => "Not Modified",
            Status::TemporaryRedirect => "Temporary Redirect",
            Status::PermanentRedirect => "Permanent Redirect",
            Status::BadRequest => "Bad Request",
            Status::Unauthorized => "Unauthorized",
            Status::Forbidden => "Forbidden",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::RequestTimeout => "Request Timeout",
            Status::Gone => "Gone",
            Status::PreconditionFailed => "Precondition Failed",
            Status::ContentTooLarge => "Content Too Large",
            Status::UriTooLong => "URI Too Long",
            Status::RangeNotSatisfiable => "Range Not Satisfiable",
            Status::TooManyRequests => "Too Many Requests",
            Status::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::InternalServerError => "Internal Server Error",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::NotImplemented => "Not Implemented",
            Status::VersionNotSupported => "HTTP Version Not Supported",
            Status::NoResponse => "No Response",
        }
    }

    /// `"<code> <reason>"`, e.g. `"404 Not Found"`.
    pub const fn text(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::PartialContent => "206 Partial Content",
            Status::MovedPermanently => "301 Moved Permanently",
            Status::Found => "302 Found",
            Status::SeeOther => "303 See Other",
            Status::NotModified => "304 Not Modified",
            Status::TemporaryRedirect => "307 Temporary Redirect",
            Status::PermanentRedirect => "308 Permanent Redirect",
            Status::BadRequest => "400 Bad Request",
            Status::Unauthorized => "401 Unauthorized",
            Status::Forbidden => "403 Forbidden",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::RequestTimeout => "408 Request Timeout",
            Status::Gone => "410 Gone",
            Status::PreconditionFailed => "412 Precondition Failed",
            Status::ContentTooLarge => "413 Content Too Large",
            Status::UriTooLong => "414 URI Too Long",
            Status::RangeNotSatisfiable => "416 Range Not Satisfiable",
            Status::TooManyRequests => "429 Too Many Requests",
            Status::HeaderFieldsTooLarge => "431 Request Header Fields Too Large",
            Status::InternalServerError => "500 Internal Server Error",
            Status::ServiceUnavailable => "503 Service Unavailable",
            Status::NotImplemented => "501 Not Implemented",
            Status::VersionNotSupported => "505 HTTP Version Not Supported",
            Status::NoResponse => "444 No Response",
        }
    }
}

impl Status {
    /// Every status this server sends.
    pub const ALL: [Status; 25] = [
        Status::Ok,
        Status::PartialContent,
        Status::MovedPermanently,
        Status::Found,
        Status::SeeOther,
        Status::NotModified,
        Status::TemporaryRedirect,
        Status::PermanentRedirect,
        Status::BadRequest,
        Status::Unauthorized,
        Status::Forbidden,
        Status::NotFound,
        Status::MethodNotAllowed,
        Status::RequestTimeout,
        Status::Gone,
        Status::PreconditionFailed,
        Status::ContentTooLarge,
        Status::UriTooLong,
        Status::RangeNotSatisfiable,
        Status::TooManyRequests,
        Status::HeaderFieldsTooLarge,
        Status::InternalServerError,
        Status::NotImplemented,
        Status::ServiceUnavailable,
        Status::VersionNotSupported,
    ];

    /// The status of `code`, if this server sends it.
    pub fn from_code(code: u16) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.code() == code)
    }

    /// A redirection with a `Location`: 301, 302, 303, 307 or 308.
    pub const fn redirects(self) -> bool {
        matches!(
            self,
            Status::MovedPermanently
                | Status::Found
                | Status::SeeOther
                | Status::TemporaryRedirect
                | Status::PermanentRedirect
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// A request that gets an error response: the status to answer with,
/// whether the connection must be closed after it, and whether the answer
/// depends on the request's `Accept-Encoding`.
///
/// `close` is `true` whenever the handler can no longer tell where the next
/// request starts (every error of [`parse_head`](crate::parse_head)); errors
/// found after a complete head (path resolution, method) leave it `false` and
/// the request's own keep-alive decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpError {
    /// The status to answer with.
    pub status: Status,
    /// Close the connection after answering.
    pub close: bool,
    /// Send `Vary: Accept-Encoding`: a client taking gzip would have been
    /// answered otherwise (a 404 beside a lone `FILE.gz`), so a shared
    /// cache must not give this answer to it.
    pub vary: bool,
}

impl HttpError {
    /// An error after which the connection can go on (if the request allows).
    pub const fn keep(status: Status) -> HttpError {
        HttpError {
            status,
            close: false,
            vary: false,
        }
    }

    /// An error after which the connection must close.
    pub const fn close(status: Status) -> HttpError {
        HttpError {
            status,
            close: true,
            vary: false,
        }
    }

    /// The same error, with `Vary: Accept-Encoding`.
    pub const fn varied(self) -> HttpError {
        HttpError { vary: true, ..self }
    }

    /// The answer to an I/O error met while finding or opening a file: 404
    /// for an absent file (or a path through a non-directory, or a name too
    /// long), 403 for no permission or a symlink loop, 503 when the process
    /// is out of descriptors or memory (a retry may succeed), 500 otherwise.
    /// The connection can go on.
    pub fn from_io(e: &io::Error) -> HttpError {
        let status = match e.kind() {
            io::ErrorKind::NotFound => Status::NotFound,
            io::ErrorKind::PermissionDenied => Status::Forbidden,
            _ => match e.raw_os_error() {
                Some(libc::ENOTDIR) | Some(libc::ENAMETOOLONG) => Status::NotFound,
                Some(libc::ELOOP) => Status::Forbidden,
                Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOMEM) => {
                    Status::ServiceUnavailable
                }
                _ => Status::InternalServerError,
            },
        };
        HttpError::keep(status)
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.status)?;
        if self.close {
            f.write_str(" (close)")?;
        }
        Ok(())
    }
}

impl std::error::Error for HttpError {}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Status; 17] = [
        Status::Ok,
        Status::PartialContent,
        Status::MovedPermanently,
        Status::NotModified,
        Status::BadRequest,
        Status::Forbidden,
        Status::NotFound,
        Status::MethodNotAllowed,
        Status::RequestTimeout,
        Status::ContentTooLarge,
        Status::UriTooLong,
        Status::RangeNotSatisfiable,
        Status::HeaderFieldsTooLarge,
        Status::InternalServerError,
        Status::ServiceUnavailable,
        Status::NotImplemented,
        Status::VersionNotSupported,
    ];

    #[test]
    fn text_is_code_and_reason() {
        for s in ALL {
            assert_eq!(s.text(), format!("{} {}", s.code(), s.reason()));
        }
    }

    #[test]
    fn from_io() {
        let status = |e: io::Error| HttpError::from_io(&e).status;
        assert_eq!(status(io::ErrorKind::NotFound.into()), Status::NotFound);
        assert_eq!(
            status(io::ErrorKind::PermissionDenied.into()),
            Status::Forbidden
        );
        assert_eq!(
            status(io::Error::from_raw_os_error(libc::ENOTDIR)),
            Status::NotFound
        );
        assert_eq!(
            status(io::Error::from_raw_os_error(libc::ELOOP)),
            Status::Forbidden
        );
        assert_eq!(
            status(io::Error::from_raw_os_error(libc::EIO)),
            Status::InternalServerError
        );
        assert_eq!(
            status(io::Error::from_raw_os_error(libc::EMFILE)),
            Status::ServiceUnavailable
        );
    }

    #[test]
    fn error_display() {
        assert_eq!(
            HttpError::close(Status::BadRequest).to_string(),
            "400 Bad Request (close)"
        );
        assert_eq!(
            HttpError::keep(Status::NotFound).to_string(),
            "404 Not Found"
        );
    }
}
