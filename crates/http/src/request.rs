//! Parsing a request head: [`parse_head`] over the bytes read so far.
//!
//! The tokenising is `httparse`'s; this module adds the limits, picks out the
//! header fields a static server acts on, decides keep-alive and decodes the
//! target (through [`path::normalize`]).
//!
//! Contract with the connection handler:
//! - `Ok(None)`: incomplete, read more and call again with the longer buffer.
//!   This is only answered while `buf.len() < limits.max_request()`, so a
//!   read buffer of [`Limits::max_request`] bytes never fills up without an
//!   answer.
//! - `Ok(Some((head, len)))`: a request head, `len` bytes long. A body
//!   (`Content-Length` up to [`Limits::max_body`], or chunked, of any size)
//!   follows it: [`Discard`] drops its bytes as they arrive, and what follows
//!   it is the next pipelined request. The response need not wait for the
//!   body, as nginx answers a static request and discards its body.
//! - `Err(e)`: answer `e.status` and close (`e.close` is always `true` here:
//!   after a bad head nobody knows where the next request starts).
//!
//! A head with `Expect: 100-continue` and a body ([`Head::expect_continue`])
//! is owed `HTTP/1.1 100 Continue` before its answer while none of the body
//! has come: such a client (curl, for bodies over 1 KiB) holds the body back
//! until then, and sends it once it reads the interim answer.
//!
//! Versions: `HTTP/1.0`, `HTTP/1.1`, and any later `HTTP/1.x` (x a digit)
//! taken as 1.1, the highest minor version this server implements (RFC 9110
//! §2.5; `httparse` refuses them, so a small function of this module reads
//! their request line).
//!
//! Errors: a head longer than [`Limits::max_head`] or with more than
//! [`Limits::max_headers`] fields → 431; a request-target longer than
//! [`Limits::max_uri`] → 414 (also while it is still arriving); a version
//! other than `HTTP/1.x` (the HTTP/2 preface included) → 505; an HTTP/1.1
//! request without `Host`, two `Host` fields, conflicting `Content-Length`s,
//! `Transfer-Encoding` with `Content-Length`, sent twice or not ending in
//! `chunked`, a target [`normalize`](crate::path::normalize) refuses, a
//! malformed chunked body, or anything `httparse` refuses → 400; a coding
//! besides one `chunked` (`gzip, chunked`) → 501, as nginx; a
//! `Content-Length` over [`Limits::max_body`] → 413 (nginx's
//! `client_max_body_size`; like nginx, a chunked body being discarded is not
//! counted: it costs no memory).

use std::mem::MaybeUninit;
use std::time::SystemTime;

use crate::date;
use crate::encoding::AcceptEncoding;
use crate::path;
use crate::status::{HttpError, Status};

/// Header fields per request that [`parse_head`] can hold (the array lives on
/// the stack, 32 bytes a field, left uninitialised, so a large cap costs no
/// time; 16 KiB still fits the smallest `thread-per-conn` stack of 64 KiB);
/// [`Limits::max_headers`] is clamped to it.
pub const MAX_HEADERS_CAP: usize = 512;

/// Size limits on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest head (request line, fields, blank line) in bytes → 431 beyond.
    pub max_head: usize,
    /// Longest request-target in bytes → 414 beyond.
    pub max_uri: usize,
    /// Most header fields → 431 beyond (clamped to [`MAX_HEADERS_CAP`]).
    pub max_headers: usize,
    /// Largest `Content-Length` a request may announce → 413 beyond
    /// (nginx's `client_max_body_size`). Bodies are dropped as they arrive,
    /// never held.
    pub max_body: usize,
}

impl Limits {
    /// The most bytes [`parse_head`] or [`Discard::skip`] may need to see at
    /// once (a head, a framing line of a chunked body): the bound of the
    /// handler's read buffer.
    pub const fn max_request(&self) -> usize {
        self.max_head
    }
}

impl Default for Limits {
    /// 32 KiB heads, 8 KiB targets, 256 fields, 1 MiB bodies: what nginx
    /// accepts by default (`large_client_header_buffers 4 8k`: a request
    /// line up to 8 KiB, 32 KiB of head in all, no field count limit;
    /// `client_max_body_size 1m`), so that a request nginx serves is not
    /// refused here.
    fn default() -> Limits {
        Limits {
            max_head: 32 * 1024,
            max_uri: 8 * 1024,
            max_headers: 256,
            max_body: 1024 * 1024,
        }
    }
}

/// The request method, as far as this server cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// Anything else: answered 405.
    Other,
}

/// The protocol version of the request. Responses are always `HTTP/1.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: keep-alive only on request (`Connection: keep-alive`).
    Http10,
    /// HTTP/1.1 (and any later HTTP/1.x, answered as 1.1): keep-alive
    /// unless `Connection: close`.
    Http11,
}

/// A parsed request head. Field values borrow from the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head<'a> {
    /// The method.
    pub method: Method,
    /// The method as sent (for logs).
    pub method_name: &'a str,
    /// The request-target as sent (for logs and a redirect's query): any
    /// bytes, a query need not be UTF-8.
    pub target: &'a [u8],
    /// The decoded, normalised path (see [`path::normalize`]); what
    /// [`Root::resolve`](crate::Root::resolve) takes.
    pub path: String,
    /// The protocol version.
    pub version: Version,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// `Host`.
    pub host: Option<&'a [u8]>,
    /// `If-Modified-Since`, if a valid HTTP date (RFC 9110 §13.1.3 says to
    /// ignore it otherwise). Each precondition field may come once: a
    /// request with two of the same gets 400, as nginx answers.
    pub if_modified_since: Option<SystemTime>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Match`.
    pub if_match: Option<&'a [u8]>,
    /// `If-Unmodified-Since`, if a valid HTTP date.
    pub if_unmodified_since: Option<SystemTime>,
    /// `Range`, if present once (two fields are two ranges: ignored).
    pub range: Option<&'a [u8]>,
    /// `If-Range`.
    pub if_range: Option<&'a [u8]>,
    /// `Accept-Encoding`, every field of it ([`AcceptEncoding::default`]
    /// without one).
    pub accept_encoding: AcceptEncoding,
    /// The body length (`Content-Length`, 0 without one); the body is
    /// dropped ([`Discard`]).
    pub content_length: usize,
    /// Whether the body is chunked (`Transfer-Encoding: chunked`, HTTP/1.1):
    /// its end is found by reading its framing ([`Discard`]); dropped, as
    /// nginx discards a static request's body.
    pub chunked: bool,
    /// `Referer` (for logs).
    pub referer: Option<&'a [u8]>,
    /// `User-Agent` (for logs).
    pub user_agent: Option<&'a [u8]>,
    /// `Expect: 100-continue` in an HTTP/1.1 request (RFC 9110 §10.1.1: it
    /// is ignored in 1.0; other expectations are ignored too, as nginx
    /// does).
    pub expect_continue: bool,
    /// The whole head as sent, blank line included: for the fields read
    /// only now and then ([`Head::field_values`]).
    pub raw: &'a [u8],
    /// The query a `--rewrite` gave the request (empty: none), in place of
    /// the target's; `None` where no rule gave one.
    pub rewritten_query: Option<Vec<u8>>,
    /// A `--rewrite` with `last` or `break` matched: the rules ended, and
    /// `--return` does not run (nginx's rewrite phase ended there).
    pub rewrites_ended: bool,
    /// A `--rewrite` changed the path: an internal request, as nginx's
    /// `internal` locations count it.
    pub rewritten: bool,
}

impl<'a> Head<'a> {
    /// The values of every `name` field (any case), in order, trimmed: read
    /// from [`raw`](Head::raw) on demand, for fields too rarely wanted to
    /// pick out of every request (a proxy's `X-Forwarded-For`).
    pub fn field_values<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        self.raw
            .split(|&b| b == b'\n')
            .skip(1)
            .filter_map(move |line| {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let colon = line.iter().position(|&b| b == b':')?;
                line[..colon]
                    .eq_ignore_ascii_case(name.as_bytes())
                    .then(|| trim(&line[colon + 1..]))
            })
    }
}

/// Parses the request head at the start of `buf` (see the [module docs](self)
/// for what each result asks of the caller).
pub fn parse_head<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(Head<'a>, usize)>, HttpError> {
    parse_fields(buf, limits)
}

/// Whether `head` is owed `HTTP/1.1 100 Continue` before its answer:
/// it expects it, announces a body, and none of that body (`body`: what
/// came after the head) has arrived. Once the body has begun the client is
/// sending anyway (RFC 9110 §10.1.1 lets a server omit it then).
pub fn continue_due(head: &Head<'_>, body: &[u8]) -> bool {
    head.expect_continue && body.is_empty() && Discard::new(head).is_some()
}

/// A request body being dropped as its bytes arrive: what is left of a
/// `Content-Length`, or where a chunked body's framing stands. Pure over
/// each slice it is given; the state between slices is all it keeps, so a
/// body of any size costs no memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discard(Framing);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Bytes of a `Content-Length` body still to come.
    Length(u64),
    /// Before a chunk-size line.
    Size,
    /// Data bytes of the current chunk still to come.
    Data(u64),
    /// The line end after a chunk's data.
    DataEnd,
    /// Trailer fields, up to the empty line that ends the body.
    Trailer,
}

/// What [`Discard::skip`] did with a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    /// Bytes at the front of the slice that were body (dropped).
    pub used: usize,
    /// The body ended within them: what follows is the next request.
    pub done: bool,
}

impl Discard {
    /// The discard of `head`'s body; `None` if it has none.
    pub fn new(head: &Head<'_>) -> Option<Discard> {
        if head.chunked {
            Some(Discard(Framing::Size))
        } else if head.content_length > 0 {
            Some(Discard(Framing::Length(head.content_length as u64)))
        } else {
            None
        }
    }

    /// Drops the body bytes at the front of `input`. `used` falls short of
    /// `input` only where the body ends (`done`) or a framing line has not
    /// ended yet (call again with its bytes and more). A framing line that
    /// reaches [`Limits::max_head`] bytes, or framing RFC 9112 §7.1 does not
    /// allow → 400. Line ends may be bare LF, as nginx reads them.
    pub fn skip(&mut self, input: &[u8], limits: &Limits) -> Result<Skipped, HttpError> {
        let bad = || HttpError::close(Status::BadRequest);
        // A framing line not ended yet: come back with more, unless it can
        // no longer end within the limit. (A line is refused by the bytes
        // before its LF, ended or not, so that how the body was split into
        // reads never changes the answer.)
        let partial = |at: usize| {
            if input.len() - at >= limits.max_head {
                Err(bad())
            } else {
                Ok(Skipped {
                    used: at,
                    done: false,
                })
            }
        };
        let mut at = 0;
        loop {
            let rest = &input[at..];
            match self.0 {
                Framing::Length(left) | Framing::Data(left) => {
                    let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                    at += n;
                    let left = left - n as u64;
                    let chunk = matches!(self.0, Framing::Data(_));
                    self.0 = match (left, chunk) {
                        (0, true) => Framing::DataEnd,
                        (_, true) => Framing::Data(left),
                        (_, false) => Framing::Length(left),
                    };
                    if left > 0 || !chunk {
                        return Ok(Skipped {
                            used: at,
                            done: left == 0,
                        });
                    }
                }
                Framing::Size => match chunk_size(rest) {
                    Ok(Some((n, _))) if n > limits.max_head => return Err(bad()),
                    Ok(Some((n, size))) => {
                        at += n;
                        self.0 = if size == 0 {
                            Framing::Trailer
                        } else {
                            Framing::Data(size)
                        };
                    }
                    Ok(None) => return partial(at),
                    Err(()) => return Err(bad()),
                },
                Framing::DataEnd => {
                    at += match rest {
                        [b'\r', b'\n', ..] => 2,
                        [b'\n', ..] => 1,
                        [] | [b'\r'] => {
                            return Ok(Skipped {
                                used: at,
                                done: false,
                            })
                        }
                        _ => return Err(bad()),
                    };
                    self.0 = Framing::Size;
                }
                Framing::Trailer => {
                    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                        return partial(at);
                    };
                    if end >= limits.max_head {
                        return Err(bad());
                    }
                    at += end + 1;
                    let line = &rest[..end];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if line.is_empty() {
                        return Ok(Skipped {
                            used: at,
                            done: true,
                        });
                    }
                    // A field (ignored): a token, then a colon.
                    let name_len = line.iter().position(|&b| b == b':').unwrap_or(0);
                    if name_len == 0 || !line[..name_len].iter().all(|&b| is_tchar(b)) {
                        return Err(bad());
                    }
                }
            }
        }
    }
}

/// Whether a head that the strict parse refused for a bad field may be
/// parsed again dropping such fields, as nginx drops them: not when a
/// field's name (up to its colon, or the whole line) is empty or holds white
/// space or a control byte, which nginx answers with 400 — among them white
/// space before the colon and a line folded onto the one before, where RFC
/// 9112 §5.1-5.2 wants a 400 (`Content-Length : 5` dropped would leave the
/// body to be read as the next request) — nor when a value holds a NUL, nor
/// when a field that frames or routes the request (`Content-Length`,
/// `Transfer-Encoding`, `Host`, `Connection`) has a value with a control
/// byte: dropped, a front end that reads `Content-Length: 36\x01` as 36 would
/// see one request where this server sees two (nginx keeps such a value,
/// and refuses it).
fn may_drop_bad_fields(head: &[u8]) -> bool {
    let mut lines = head[request_line_start(head)..].split(|&b| b == b'\n');
    lines.next(); // the request line
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return true;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => (&line[..colon], &line[colon + 1..]),
            None => (line, &b""[..]),
        };
        if name.is_empty() || name.iter().any(|&b| b <= b' ' || b == 0x7f) || value.contains(&0) {
            return false;
        }
        let framing = [
            &b"content-length"[..],
            b"transfer-encoding",
            b"host",
            b"connection",
        ]
        .iter()
        .any(|f| name.eq_ignore_ascii_case(f));
        if framing && value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return false;
        }
    }
    true
}

/// The head at the start of `buf` and its length.
fn parse_fields<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(Head<'a>, usize)>, HttpError> {
    let close = HttpError::close;
    // A head that fits the limit is complete within its first `max_head`
    // bytes; parsing no more than that bounds the work on hostile input.
    let window = &buf[..buf.len().min(limits.max_head)];
    let slots = limits.max_headers.min(MAX_HEADERS_CAP);
    let mut storage = [const { MaybeUninit::<httparse::Header<'a>>::uninit() }; MAX_HEADERS_CAP];
    // Only for requests of a later HTTP/1.x, which httparse refuses.
    let mut spill = Vec::new();
    let mut config = parser_config();
    let mut req = httparse::Request::new(&mut []);
    let mut parsed =
        config.parse_request_with_uninit_headers(&mut req, window, &mut storage[..slots]);
    if bad_field(&parsed) && may_drop_bad_fields(window) {
        config.ignore_invalid_headers_in_requests(true);
        req = httparse::Request::new(&mut []);
        parsed = config.parse_request_with_uninit_headers(&mut req, window, &mut storage[..slots]);
    }
    let (method, target, minor, headers, head_len) = match parsed {
        Ok(httparse::Status::Complete(n)) => {
            let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version)
            else {
                return Err(close(Status::BadRequest));
            };
            (method, target.as_bytes(), minor, &*req.headers, n)
        }
        Ok(httparse::Status::Partial) => return incomplete(buf, window, limits),
        Err(httparse::Error::TooManyHeaders) => return Err(close(Status::HeaderFieldsTooLarge)),
        Err(httparse::Error::Version) => match later_minor_digit(window) {
            LaterMinor::At(digit) => match parse_copy(window, Some(digit), slots, &mut spill) {
                Ok(Some((method, target, minor, n))) => (method, target, minor, &spill[..], n),
                Ok(None) => return incomplete(buf, window, limits),
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(close(Status::HeaderFieldsTooLarge))
                }
                Err(_) => return Err(close(Status::BadRequest)),
            },
            LaterMinor::Partial => return incomplete(buf, window, limits),
            LaterMinor::No => return Err(close(version_error(window))),
        },
        // httparse takes only a UTF-8 target; nginx serves a query of
        // other bytes (a form sent in Latin-1), and so does this: parsed
        // from a copy whose target bytes past ASCII read `x`.
        Err(_) if !target_is_utf8(window) => {
            let digit = match later_minor_digit(window) {
                LaterMinor::At(digit) => Some(digit),
                // httparse refuses the digit before the line has ended.
                LaterMinor::Partial => return incomplete(buf, window, limits),
                LaterMinor::No => None,
            };
            match parse_copy(window, digit, slots, &mut spill) {
                Ok(Some((method, target, minor, n))) => (method, target, minor, &spill[..], n),
                Ok(None) => return incomplete(buf, window, limits),
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(close(Status::HeaderFieldsTooLarge))
                }
                Err(_) => return Err(close(Status::BadRequest)),
            }
        }
        Err(_) => return Err(close(Status::BadRequest)),
    };
    if target.len() > limits.max_uri {
        return Err(close(Status::UriTooLong));
    }
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let method_name = method;
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };

    let mut fields = Fields::default();
    for h in headers {
        fields.add(h.name, h.value)?;
    }

    if version == Version::Http11 && fields.host.is_none() {
        return Err(close(Status::BadRequest));
    }
    if let Some(chunked_last) = fields.transfer_encoding {
        // RFC 9112 §6.1-6.3: with Content-Length it smells of smuggling;
        // in 1.0 it is not defined; a final coding other than chunked leaves
        // the body length unknown.
        if fields.content_length.is_some() || version == Version::Http10 || !chunked_last {
            return Err(close(Status::BadRequest));
        }
        // Chunked over another coding: framed, but not a body this server
        // can take.
        if fields.other_coding {
            return Err(close(Status::NotImplemented));
        }
    }
    let content_length = fields.content_length.unwrap_or(0);
    if content_length > limits.max_body as u64 {
        return Err(close(Status::ContentTooLarge));
    }
    let content_length = content_length as usize;

    // The path must be UTF-8 (decoded, too); the query may be anything.
    let path_end = target
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(target.len());
    let path = std::str::from_utf8(&target[..path_end])
        .map_err(|_| close(Status::BadRequest))
        .and_then(|p| path::normalize(p).map_err(|e| close(e.status)))?;

    let keep_alive = !fields.close
        && match version {
            Version::Http11 => true,
            Version::Http10 => fields.keep_alive,
        };
    let head = Head {
        method,
        method_name,
        target,
        path,
        version,
        keep_alive,
        host: fields.host,
        if_modified_since: fields.if_modified_since.and_then(date::parse),
        if_none_match: fields.if_none_match,
        if_match: fields.if_match,
        if_unmodified_since: fields.if_unmodified_since.and_then(date::parse),
        range: match fields.range {
            Some(Some(v)) => Some(v),
            _ => None,
        },
        if_range: fields.if_range,
        accept_encoding: fields.accept_encoding,
        content_length,
        chunked: fields.transfer_encoding.is_some(),
        referer: fields.referer,
        user_agent: fields.user_agent,
        expect_continue: fields.expect_continue && version == Version::Http11,
        raw: &buf[..head_len],
        rewritten_query: None,
        rewrites_ended: false,
        rewritten: false,
    };
    Ok(Some((head, head_len)))
}

/// The answer to a head that has not ended yet: an error once it can no
/// longer fit the limits, else "read more".
fn incomplete<'a>(
    buf: &[u8],
    window: &[u8],
    limits: &Limits,
) -> Result<Option<(Head<'a>, usize)>, HttpError> {
    if partial_target_len(window) > limits.max_uri {
        return Err(HttpError::close(Status::UriTooLong));
    }
    if buf.len() >= limits.max_head {
        return Err(HttpError::close(Status::HeaderFieldsTooLarge));
    }
    Ok(None)
}

/// The header fields of interest, gathered in one pass.
#[derive(Default)]
struct Fields<'a> {
    host: Option<&'a [u8]>,
    close: bool,
    keep_alive: bool,
    content_length: Option<u64>,
    /// `Some(final coding is chunked)` once a `Transfer-Encoding` was seen.
    transfer_encoding: Option<bool>,
    /// A coding besides one `chunked` was named (`gzip, chunked`,
    /// `chunked, chunked`): 501, as nginx, unless the final one is not
    /// chunked (400).
    other_coding: bool,
    if_modified_since: Option<&'a [u8]>,
    if_none_match: Option<&'a [u8]>,
    if_match: Option<&'a [u8]>,
    if_unmodified_since: Option<&'a [u8]>,
    /// `Some(None)` when sent more than once.
    range: Option<Option<&'a [u8]>>,
    if_range: Option<&'a [u8]>,
    accept_encoding: AcceptEncoding,
    referer: Option<&'a [u8]>,
    user_agent: Option<&'a [u8]>,
    expect_continue: bool,
}

impl<'a> Fields<'a> {
    fn add(&mut self, name: &str, value: &'a [u8]) -> Result<(), HttpError> {
        let bad = || HttpError::close(Status::BadRequest);
        let is = |want: &str| name.eq_ignore_ascii_case(want);
        // A precondition sent twice is refused rather than half read (which
        // of two tags or dates would the client mean?), as nginx does.
        let once = |slot: &mut Option<&'a [u8]>| match slot.replace(value) {
            Some(_) => Err(bad()),
            None => Ok(()),
        };
        // Dispatch on the length first: one comparison per field, not nine.
        match name.len() {
            4 if is("host") => {
                if self.host.is_some() || !valid_host(value) {
                    return Err(bad());
                }
                self.host = Some(value);
            }
            5 if is("range") => {
                self.range = Some(if self.range.is_some() {
                    None
                } else {
                    Some(value)
                });
            }
            6 if is("expect") => {
                self.expect_continue |=
                    tokens(value).any(|t| t.eq_ignore_ascii_case(b"100-continue"));
            }
            8 if is("if-range") => once(&mut self.if_range)?,
            8 if is("if-match") => once(&mut self.if_match)?,
            10 if is("connection") => {
                for token in tokens(value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        self.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        self.keep_alive = true;
                    }
                }
            }
            13 if is("if-none-match") => once(&mut self.if_none_match)?,
            15 if is("accept-encoding") => self.accept_encoding.add(value),
            14 if is("content-length") => {
                for token in value.split(|&b| b == b',') {
                    let n = parse_length(trim(token)).ok_or_else(bad)?;
                    if self.content_length.replace(n).is_some_and(|old| old != n) {
                        return Err(bad());
                    }
                }
            }
            17 if is("if-modified-since") => once(&mut self.if_modified_since)?,
            19 if is("if-unmodified-since") => once(&mut self.if_unmodified_since)?,
            7 if is("referer") => self.referer = Some(value),
            10 if is("user-agent") => self.user_agent = Some(value),
            17 if is("transfer-encoding") => {
                // Sent twice: which line frames the body depends on the
                // reader (a proxy may take the first); refused, as nginx.
                if self.transfer_encoding.is_some() {
                    return Err(bad());
                }
                self.other_coding = tokens(value).count() > 1;
                match tokens(value).last() {
                    Some(last) => {
                        self.transfer_encoding = Some(last.eq_ignore_ascii_case(b"chunked"))
                    }
                    // Present with no coding (`Transfer-Encoding: ,`): a
                    // body whose framing is not chunked, refused as such; a
                    // proxy that frames on the field's mere presence must
                    // not read this request differently from us.
                    None => self.transfer_encoding = Some(false),
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Whether `value` is a `Host` field value RFC 9112 §3.2 allows
/// (`uri-host [ ":" port ]`; an empty one too), else 400. A bracketed
/// IP-literal holds hex digits, `:` and `.` (and a `v…` future form's
/// characters); a name holds unreserved, sub-delimiter and `%` characters;
/// a port only digits, and needs a host before it (as nginx).
fn valid_host(value: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = value.strip_prefix(b"[") {
        let Some(end) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..end];
        let ok = !literal.is_empty()
            && literal
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b":.-_~!$&'()*+,;=".contains(&b));
        if !ok {
            return false;
        }
        (&value[..end + 2], &rest[end + 1..])
    } else {
        let (name, port) = match value.iter().position(|&b| b == b':') {
            Some(i) => (&value[..i], &value[i..]),
            None => (value, &[][..]),
        };
        let name_ok = name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b));
        if !name_ok {
            return false;
        }
        (name, port)
    };
    match port.strip_prefix(b":") {
        None => port.is_empty(),
        Some(digits) => !host.is_empty() && digits.iter().all(u8::is_ascii_digit),
    }
}

/// The non-empty, trimmed elements of a comma-separated list.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim)
        .filter(|t| !t.is_empty())
}

/// `value` without leading and trailing spaces and tabs.
pub(crate) fn trim(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &value[start..end]
}

/// A `Content-Length`: one or more digits, at most `i64::MAX` (nginx's
/// `off_t` bound; a length past it is malformed, 400, never taken as some
/// other number: with no body limit that would misframe the body).
fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits
        .iter()
        .try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .filter(|&n| n <= i64::MAX as u64)
}

/// How much of the request-target has arrived in an incomplete head.
fn partial_target_len(window: &[u8]) -> usize {
    let line = &window[request_line_start(window)..];
    let Some(sp) = line.iter().position(|&b| b == b' ') else {
        return 0;
    };
    let target = &line[sp + 1..];
    target
        .iter()
        .position(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .unwrap_or(target.len())
}

/// Where the request line starts: httparse skips empty lines before it,
/// and so does every look at the line here.
fn request_line_start(head: &[u8]) -> usize {
    head.iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(head.len())
}

/// How requests are parsed: as nginx, words of the request line may be
/// parted by several spaces (RFC 9112 §3 lets a server split on whitespace).
fn parser_config() -> httparse::ParserConfig {
    let mut config = httparse::ParserConfig::default();
    config.allow_multiple_spaces_in_request_line_delimiters(true);
    config
}

/// Whether httparse refused a field line; then nginx's
/// `ignore_invalid_headers` (its default) drops such a field — a name that
/// is not a token, a value with a control byte — and serves the request,
/// where [`may_drop_bad_fields`] allows it.
fn bad_field<T>(parsed: &Result<T, httparse::Error>) -> bool {
    matches!(
        parsed,
        Err(httparse::Error::HeaderName | httparse::Error::HeaderValue)
    )
}

/// What [`later_minor_digit`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LaterMinor {
    /// A request line ending in `HTTP/1.x`, `x` from 2 to 9, at this index.
    At(usize),
    /// Such a line, but its end has not arrived yet.
    Partial,
    /// Something else.
    No,
}

/// Where the minor version digit is in a request line ending in `HTTP/1.x`
/// with `x` from 2 to 9, which `httparse` refuses. The rest of the line is
/// left for httparse to check (see [`parse_later_minor`]).
fn later_minor_digit(window: &[u8]) -> LaterMinor {
    let start = request_line_start(window);
    let rest = &window[start..];
    let (line, ended) = match rest.iter().position(|&b| b == b'\n') {
        Some(end) => (&rest[..end], true),
        None => (rest, false),
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // A CR may only end the line.
    let later = match line.len().checked_sub(b" HTTP/1.x".len()) {
        Some(at) if !line.contains(&b'\r') => {
            line[at..].starts_with(b" HTTP/1.") && (b'2'..=b'9').contains(&line[line.len() - 1])
        }
        _ => false,
    };
    match (later, ended) {
        (true, true) => LaterMinor::At(start + line.len() - 1),
        (true, false) => LaterMinor::Partial,
        (false, _) => LaterMinor::No,
    }
}

/// Whether the request-target of the request line at the start of
/// `window` (between its first two spaces) is UTF-8 — or has not arrived
/// whole, or is not there to find.
fn target_is_utf8(window: &[u8]) -> bool {
    match target_range(window) {
        Some((target, true)) => std::str::from_utf8(&window[target]).is_ok(),
        _ => true,
    }
}

/// Where the request line's target lies: from its first space to the next
/// one (true: found) or to the line's end (empty lines before the request
/// line are skipped, as httparse does); `None` if the line has no space.
fn target_range(window: &[u8]) -> Option<(std::ops::Range<usize>, bool)> {
    let line_start = request_line_start(window);
    let line_end = window[line_start..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(window.len(), |n| line_start + n);
    let start = line_start
        + 1
        + window[line_start..line_end]
            .iter()
            .position(|&b| b == b' ')?;
    Some(
        match window[start..line_end].iter().position(|&b| b == b' ') {
            Some(n) => (start..start + n, true),
            None => (start..line_end, false),
        },
    )
}

/// A request httparse refuses as sent but this server takes, parsed from a
/// copy that it takes, so it meets every check any request meets, its bad
/// fields dropped the same way: a later HTTP/1.x (minor digit at `digit`),
/// answered as 1.1 (RFC 9110 §2.5), whose digit reads 1 in the copy; a
/// request-target not in UTF-8, whose bytes past ASCII read `x` in the
/// copy. Method, target and fields are then taken from `window` at the
/// same offsets, into `fields`; the minor version is the copy's. `Ok(None)`
/// while the head is incomplete.
#[allow(clippy::type_complexity)] // one use, its parts named above
fn parse_copy<'a>(
    window: &'a [u8],
    digit: Option<usize>,
    slots: usize,
    fields: &mut Vec<httparse::Header<'a>>,
) -> Result<Option<(&'a str, &'a [u8], u8, usize)>, httparse::Error> {
    let mut copy = window.to_vec();
    if let Some(digit) = digit {
        copy[digit] = b'1';
    }
    if let Some((target, _)) = target_range(&copy) {
        for b in &mut copy[target] {
            if !b.is_ascii() {
                *b = b'x';
            }
        }
    }
    let mut config = parser_config();
    let mut storage = vec![httparse::EMPTY_HEADER; slots];
    let mut req = httparse::Request::new(&mut storage);
    let mut parsed = config.parse_request(&mut req, &copy);
    if bad_field(&parsed) && may_drop_bad_fields(window) {
        config.ignore_invalid_headers_in_requests(true);
        req = httparse::Request::new(&mut storage);
        parsed = config.parse_request(&mut req, &copy);
    }
    let httparse::Status::Complete(n) = parsed? else {
        return Ok(None);
    };
    // The same bytes at the same offsets, so the same UTF-8.
    // The same bytes of `window` as `part` of `copy`; an empty part may
    // point anywhere (then it is the empty slice at the start).
    let same = |part: &[u8]| -> Result<&'a [u8], httparse::Error> {
        if part.is_empty() {
            return Ok(&window[..0]);
        }
        let from = (part.as_ptr() as usize).wrapping_sub(copy.as_ptr() as usize);
        window
            .get(from..from.saturating_add(part.len()))
            .ok_or(httparse::Error::Token)
    };
    let text = |part: &str| {
        std::str::from_utf8(same(part.as_bytes())?).map_err(|_| httparse::Error::Token)
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(httparse::Error::Token);
    };
    let (method, target) = (text(method)?, same(target.as_bytes())?);
    fields.clear();
    for field in req.headers.iter() {
        fields.push(httparse::Header {
            name: text(field.name)?,
            value: same(field.value)?,
        });
    }
    Ok(Some((method, target, minor, n)))
}

/// A chunk-size line at the start of `buf` (RFC 9112 §7.1: hex digits,
/// then extensions, which are ignored): `Some((line length, size))`, `None`
/// while its end has not arrived, `Err` for anything else (no digit, a size
/// over 16 hex digits past leading zeros, control bytes, a CR not before LF). httparse's
/// `parse_chunk_size` is not used: it takes an empty line as size 0 and a
/// bare LF inside an extension.
fn chunk_size(buf: &[u8]) -> Result<Option<(usize, u64)>, ()> {
    let digits = buf.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    // Leading zeros are allowed in any number (`1*HEXDIG`); what is left
    // must fit 64 bits.
    let zeros = buf[..digits].iter().take_while(|&&b| b == b'0').count();
    if digits - zeros > 16 {
        return Err(());
    }
    if digits == buf.len() {
        return Ok(None);
    }
    if digits == 0 {
        return Err(());
    }
    let size = buf[..digits].iter().fold(0u64, |n, &d| {
        n << 4 | u64::from((d as char).to_digit(16).unwrap_or(0))
    });
    // The line so far (a CR is fine only as its last byte): nothing but
    // white space before an extension, no control byte.
    let rest = &buf[digits..];
    let lf = rest.iter().position(|&b| b == b'\n');
    let seen = &rest[..lf.unwrap_or(rest.len())];
    let seen = seen.strip_suffix(b"\r").unwrap_or(seen);
    let ext = seen.trim_ascii_start();
    let ok = (ext.is_empty() || ext[0] == b';')
        && seen.iter().all(|&b| !b.is_ascii_control() || b == b'\t');
    match (ok, lf) {
        (false, _) => Err(()),
        (true, None) => Ok(None),
        (true, Some(lf)) => Ok(Some((digits + lf + 1, size))),
    }
}

/// A `tchar` of RFC 9110 §5.6.2 (what a method, a field name or a coding
/// is made of).
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// 505 if the request line ends in an `HTTP/<digit>` version this server
/// does not take, 400 if it is not a version at all.
fn version_error(window: &[u8]) -> Status {
    let line = &window[request_line_start(window)..];
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let version = line.split(|&b| b == b' ').nth(2).unwrap_or(b"");
    match version.strip_prefix(b"HTTP/") {
        Some([d, ..]) if d.is_ascii_digit() => Status::VersionNotSupported,
        _ => Status::BadRequest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// A whole request: its head, and the bytes of head and body once the
    /// body has all come (`Ok(None)` until then).
    fn whole<'a>(buf: &'a [u8], limits: &Limits) -> Result<Option<(Head<'a>, usize)>, HttpError> {
        let Some((head, n)) = parse_head(buf, limits)? else {
            return Ok(None);
        };
        let Some(mut body) = Discard::new(&head) else {
            return Ok(Some((head, n)));
        };
        let skipped = body.skip(&buf[n..], limits)?;
        Ok(skipped.done.then_some((head, n + skipped.used)))
    }

    fn parse(req: &str) -> Result<Option<(Head<'_>, usize)>, HttpError> {
        whole(req.as_bytes(), &Limits::default())
    }

    fn head(req: &str) -> Head<'_> {
        let (head, n) = parse(req).unwrap().unwrap();
        assert_eq!(n, req.len());
        head
    }

    fn status(req: &str) -> u16 {
        let e = parse(req).unwrap_err();
        assert!(e.close);
        e.status.code()
    }

    #[test]
    fn host_values_the_grammar_allows() {
        for host in [
            "",
            "h",
            "example.com:8080",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "[v1.fe80::a+en1]",
            "xn--caf-dma.example",
            "a%20b",
            // RFC 3986 reg-names nginx refuses (README).
            "a_b",
            "a!b",
            "x..y",
        ] {
            let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(head(&req).host, Some(host.as_bytes()), "{host:?}");
        }
        // Not a host and port (nginx serves the last three).
        for host in ["a@b", "[::1", "[::1]x", "x:y", "x\\y"] {
            let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(status(&req), 400, "{host:?}");
        }
    }

    /// A query of bytes that are not UTF-8 (a Latin-1 form) is served as
    /// nginx serves it, the target kept as sent; a path of such bytes is
    /// still refused (the file names are UTF-8), and so is what httparse
    /// refuses for other reasons.
    #[test]
    fn a_query_not_in_utf8_is_taken() {
        fn parse_bytes(req: &[u8]) -> Result<Option<(Head<'_>, usize)>, HttpError> {
            parse_head(req, &Limits::default())
        }
        let req = b"GET /a.txt?q=\xe9t\xe9 HTTP/1.1\r\nHost: h\r\n\r\nGET /";
        let (h, n) = parse_bytes(req).unwrap().unwrap();
        assert_eq!(n, req.len() - 5);
        assert_eq!(h.target, b"/a.txt?q=\xe9t\xe9");
        assert_eq!(h.path, "/a.txt");
        assert_eq!((h.method, h.version), (Method::Get, Version::Http11));
        assert_eq!(h.host, Some(&b"h"[..]));
        // A later minor version too, and an absolute-form target.
        let (h, _) = parse_bytes(b"GET http://h/b?\xff HTTP/1.2\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.path.as_str(), h.version), ("/b", Version::Http11));
        // Not arrived whole yet: wait for more (a later minor version's
        // line too, whose digit httparse refuses before the line ends:
        // found by fuzzing), and after empty lines.
        assert!(parse_bytes(b"GET /a?\xe9 HTTP/1.1\r\nHo")
            .unwrap()
            .is_none());
        let later = b"POST /p?\x9e  HTTP/1.5\r\nHost: h\r\nContent-Length: 0\r\n\r\n";
        for cut in 0..later.len() {
            assert!(parse_bytes(&later[..cut]).unwrap().is_none(), "{cut}");
        }
        let (h, _) = parse_bytes(later).unwrap().unwrap();
        assert_eq!((h.target, h.version), (&b"/p?\x9e"[..], Version::Http11));
        let (h, _) = parse_bytes(b"\r\n\r\nGET /a?\xe9 HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.target, b"/a?\xe9");
        // A path not in UTF-8, raw or percent-encoded: 400.
        for req in [
            &b"GET /caf\xe9 HTTP/1.1\r\nHost: h\r\n\r\n"[..],
            b"GET /caf%e9 HTTP/1.1\r\nHost: h\r\n\r\n",
            // A control byte in the target, and a method not a token.
            b"GET /a?\xe9\x01 HTTP/1.1\r\nHost: h\r\n\r\n",
            b"G\xe9T /a?\xe9 HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            let e = parse_bytes(req).err().map(|e| e.status);
            assert_eq!(e, Some(Status::BadRequest), "{req:?}");
        }
    }

    #[test]
    fn simple_get() {
        let h = head("GET /a%20b?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.target, b"/a%20b?x=1");
        assert_eq!(h.path, "/a b");
        assert_eq!(h.version, Version::Http11);
        assert!(h.keep_alive);
        assert_eq!(h.host, Some(&b"h"[..]));
        assert_eq!(h.content_length, 0);
    }

    #[test]
    fn methods() {
        assert_eq!(
            head("HEAD / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Head
        );
        assert_eq!(
            head("POST / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Other
        );
        // Methods are case-sensitive.
        assert_eq!(
            head("get / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Other
        );
    }

    #[test]
    fn keep_alive_rules() {
        for (req, want) in [
            ("GET / HTTP/1.1\r\nHost: h\r\n\r\n", true),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                false,
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, CLOSE\r\n\r\n",
                false,
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
                true,
            ),
            ("GET / HTTP/1.0\r\n\r\n", false),
            ("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
            (
                "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
                false,
            ),
            (
                "GET / HTTP/1.0\r\nConnection: foo\r\nConnection: keep-alive\r\n\r\n",
                true,
            ),
        ] {
            assert_eq!(head(req).keep_alive, want, "{req:?}");
        }
    }

    #[test]
    fn conditional_and_range_fields() {
        let h = head(
            "GET /f HTTP/1.1\r\nhost: h\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             If-None-Match: \"x\"\r\nRANGE: bytes=0-1\r\nIf-Range: \"x\"\r\n\
             Referer: http://h/\r\nUser-Agent: t/1\r\n\r\n",
        );
        assert_eq!(
            h.if_modified_since,
            Some(UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(h.if_none_match, Some(&b"\"x\""[..]));
        assert_eq!(h.range, Some(&b"bytes=0-1"[..]));
        assert_eq!(h.if_range, Some(&b"\"x\""[..]));
        assert_eq!(h.referer, Some(&b"http://h/"[..]));
        assert_eq!(h.user_agent, Some(&b"t/1"[..]));
        assert_eq!(h.method_name, "GET");

        let h = head(
            "GET /f HTTP/1.1\r\nHost: h\r\nIf-Modified-Since: garbage\r\n\
             Range: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n",
        );
        assert_eq!(h.if_modified_since, None);
        assert_eq!(h.range, None, "two Range fields are ignored");
    }

    #[test]
    fn a_precondition_sent_twice_is_refused() {
        for field in [
            "If-Match: \"x\"",
            "If-None-Match: \"x\"",
            "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT",
            "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT",
            "If-Range: \"x\"",
        ] {
            let req = format!("GET /f HTTP/1.1\r\nHost: h\r\n{field}\r\n{field}\r\n\r\n");
            match parse_head(req.as_bytes(), &Limits::default()) {
                Err(e) => assert_eq!(e.status, Status::BadRequest, "{field}"),
                Ok(_) => panic!("{field} twice was accepted"),
            }
            // Once is fine.
            let req = format!("GET /f HTTP/1.1\r\nHost: h\r\n{field}\r\n\r\n");
            assert!(parse_head(req.as_bytes(), &Limits::default()).is_ok());
        }
    }

    #[test]
    fn accept_encoding_fields_are_one_list() {
        assert_eq!(
            head("GET / HTTP/1.1\r\nHost: h\r\n\r\n").accept_encoding,
            AcceptEncoding::default()
        );
        let h = head("GET / HTTP/1.1\r\nHost: h\r\nACCEPT-ENCODING: br\r\naccept-encoding: x-gzip;q=0.5\r\n\r\n");
        assert_eq!(h.accept_encoding.gzip, Some(500));
        assert!(h.accept_encoding.prefers_gzip());
        let h = head("GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip\r\nAccept-Encoding: gzip;q=0\r\n\r\n");
        assert!(!h.accept_encoding.prefers_gzip());
    }

    #[test]
    fn absolute_form_takes_the_path() {
        let h = head("GET http://example.com/x/y?q HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(h.path, "/x/y");
    }

    /// As nginx's `ignore_invalid_headers`: a field whose name is not a
    /// token (no colon, `(`, a non-ASCII byte) or whose value holds a
    /// control byte is dropped and the request served; the words of the
    /// request line may be parted by several spaces.
    #[test]
    fn bad_fields_are_dropped_as_nginx_drops_them() {
        for req in [
            "GET /a HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n",
            "GET /a HTTP/1.1\r\nX(y): 1\r\nHost: h\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: h\r\nX-\u{e9}: 1\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: h\r\nX: a\x7fb\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: h\r\nRange: by\x08tes=0-1\r\n\r\n",
            "GET  /a  HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            let h = head(req);
            assert_eq!((h.path.as_str(), h.range), ("/a", None), "{req:?}");
            assert!(h.keep_alive, "{req:?}");
        }
        // The fields around a dropped one still count.
        let h = head("GET /a HTTP/1.1\r\nHost: h\r\nBad(1\r\nRange: bytes=0-1\r\n\r\n");
        assert_eq!(h.range, Some(&b"bytes=0-1"[..]));
        // A field dropped in a head still arriving: complete once it is.
        assert!(parse("GET /a HTTP/1.1\r\nX(y): 1\r\nHo").unwrap().is_none());
    }

    #[test]
    fn errors() {
        let long_uri = format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(8192));
        let many = format!(
            "GET / HTTP/1.1\r\nHost: h\r\n{}\r\n",
            "X-A: b\r\n".repeat(256)
        );
        let big = format!(
            "GET / HTTP/1.1\r\nHost: h\r\nX-Big: {}\r\n\r\n",
            "b".repeat(32 * 1024)
        );
        let many_later = format!(
            "GET / HTTP/1.2\r\nHost: h\r\n{}\r\n",
            "X-A: b\r\n".repeat(256)
        );
        let long_uri_later = format!("GET /{} HTTP/1.2\r\nHost: h\r\n\r\n", "a".repeat(8192));
        for (req, want) in [
            ("GET / HTTP/2.0\r\n\r\n", 505),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
            ("GET / HTTP/3\r\n\r\n", 505),
            ("GET / HTTP/0.9\r\n\r\n", 505),
            // httparse reads HTTP/1.1 and then no line end.
            ("GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400),
            ("GET / HTTP/1.x\r\nHost: h\r\n\r\n", 505),
            ("GET / HTTP/1.2x\r\nHost: h\r\n\r\n", 505),
            // A later 1.x is 1.1 and needs what 1.1 needs.
            ("GET / HTTP/1.2\r\n\r\n", 400),
            ("GET / HTTP/1.2\r\nBad Header: x\r\nHost: h\r\n\r\n", 400),
            ("GET /%2e%2e/x HTTP/1.2\r\nHost: h\r\n\r\n", 400),
            (&many_later, 431),
            (&long_uri_later, 414),
            ("GET / FOO/1.1\r\n\r\n", 400),
            ("GET /\r\n\r\n", 400),
            // Fields nginx refuses rather than drops: white space or a
            // control byte in the name (before the colon, or folded).
            ("GET / HTTP/1.1\r\nHost: h\r\nContent-Length : 1\r\n\r\nx", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nX(y): 1\r\nA : b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nX(y): 1\r\n folded\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding\x01: chunked\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\n: empty\r\n\r\n", 400),
            // Empty lines before the request line do not hide the fields.
            ("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\nContent-Length : 1\r\n\r\nx", 400),
            ("\n\r\nGET / HTTP/1.1\r\nHost: h\r\n Transfer-Encoding: chunked\r\n\r\n", 400),
            // A field that frames or routes the request is never dropped.
            ("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\x01\r\n\r\nx", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\ncontent-length: 1\x7f\r\n\r\nx", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\x0b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nHost: x\x01\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\x01\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nBad Header: x\r\nHost: h\r\n\r\n", 400),
            ("\x01GET / HTTP/1.1\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("GET /%2e%2e/x HTTP/1.1\r\nHost: h\r\n\r\n", 400),
            ("GET /a%00 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
            ("GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                400,
            ),
            (
                "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ,\r\nContent-Length: 3\r\n\r\nabc",
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n",
                400,
            ),
            // A second Transfer-Encoding line (nginx: 400); another coding
            // under chunked, chunked twice (nginx: 501).
            (
                "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
                501,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
                501,
            ),
            ("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a/../b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: :80\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: h:8x\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: u@h\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 400),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1048577\r\n\r\n",
                413,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                400,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9223372036854775808\r\n\r\n",
                400,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9223372036854775807\r\n\r\n",
                413,
            ),
            (&long_uri, 414),
            (&many, 431),
            (&big, 431),
        ] {
            assert_eq!(status(req), want, "{req:?}");
        }
    }

    #[test]
    fn later_minor_versions_are_answered_as_http11() {
        for req in [
            "GET /a HTTP/1.2\r\nHost: h\r\n\r\n",
            "GET /a HTTP/1.9\r\nHost: h\r\n\r\n",
            "\r\n\nGET /a HTTP/1.2\nHost: h\n\n",
        ] {
            let h = head(req);
            assert_eq!(
                (h.method, h.path.as_str(), h.version, h.keep_alive),
                (Method::Get, "/a", Version::Http11, true),
                "{req:?}"
            );
            assert_eq!(h.host, Some(&b"h"[..]));
        }
        let h = head(
            "HEAD /x%20y?q HTTP/1.5\r\nHost: h\r\nConnection: close\r\nRange: bytes=0-1\r\n\r\n",
        );
        assert_eq!(
            (h.method, h.target, h.path.as_str()),
            (Method::Head, &b"/x%20y?q"[..], "/x y")
        );
        assert!(!h.keep_alive);
        assert_eq!(h.range, Some(&b"bytes=0-1"[..]));
        // Pipelined behind and before other requests, with a body.
        let reqs = "POST /p HTTP/1.3\r\nHost: h\r\nContent-Length: 2\r\n\r\nabGET /b HTTP/1.1\r\nHost: h\r\n\r\n";
        let (h, n) = parse(reqs).unwrap().unwrap();
        assert_eq!((h.method, h.content_length), (Method::Other, 2));
        assert_eq!(head(&reqs[n..]).path, "/b");
        // The field limit holds for them too.
        let limits = Limits {
            max_headers: 2,
            ..Limits::default()
        };
        let ok = "GET / HTTP/1.2\r\nHost: h\r\nA: b\r\n\r\n";
        assert!(parse_head(ok.as_bytes(), &limits).unwrap().is_some());
        let too_many = "GET / HTTP/1.2\r\nHost: h\r\nA: b\r\nC: d\r\n\r\n";
        assert_eq!(
            parse_head(too_many.as_bytes(), &limits).unwrap_err().status,
            Status::HeaderFieldsTooLarge
        );
    }

    #[test]
    fn later_minor_digit_shapes() {
        use LaterMinor::*;
        for (line, want) in [
            ("GET / HTTP/1.2\r\n", At(13)),
            ("\r\nGET / HTTP/1.2\n", At(15)),
            ("M-1 /\u{e9} HTTP/1.9\r\nrest", At(15)),
            ("GET  /  HTTP/1.2\r\n", At(15)),
            ("GET / HTTP/1.2", Partial),
            ("GET / HTTP/1.2\r", Partial),
            ("GET / HTTP/1.2\rx", No),
            ("GET / HTTP/1.2\rx\n", No),
            ("GET / HTTP/1.1\r\n", No),
            ("GET / HTTP/1.0\r\n", No),
            ("GET / HTTP/2.0\r\n", No),
            ("GET / HTTP/1.", No),
            ("HTTP/1.2\r\n", No),
            ("", No),
        ] {
            assert_eq!(later_minor_digit(line.as_bytes()), want, "{line:?}");
        }
        // What the digit's line holds besides is httparse's to check.
        for bad in [
            " GET / HTTP/1.2\r\n\r\n",
            "G(T / HTTP/1.2\r\n\r\n",
            "GET /\x7f HTTP/1.2\r\n\r\n",
            "GET /\u{1} HTTP/1.2\r\n\r\n",
        ] {
            let err = parse_head(bad.as_bytes(), &Limits::default()).unwrap_err();
            assert_eq!(err.status, Status::BadRequest, "{bad:?}");
        }
        let err = parse_head(b"GET /\xff HTTP/1.2\r\n\r\n", &Limits::default()).unwrap_err();
        assert_eq!(err.status, Status::BadRequest);
    }

    #[test]
    fn later_minor_versions_meet_the_checks_of_any_request() {
        // A field line httparse refuses is dropped, as in 1.0 and 1.1
        // (nginx's ignore_invalid_headers), not a 400.
        for minor in ['1', '2', '9'] {
            let req =
                format!("GET /a HTTP/1.{minor}\r\nHost: h\r\nBad(Name): x\r\nX-Ok: y\r\n\r\n");
            let h = head(&req);
            assert_eq!(
                (h.path.as_str(), h.host),
                ("/a", Some(&b"h"[..])),
                "{req:?}"
            );
        }
        // Several spaces between the words, as any request.
        let h = head("GET   /b   HTTP/1.4\r\nHost: h\r\n\r\n");
        assert_eq!((h.path.as_str(), h.version), ("/b", Version::Http11));
        // A field that frames the request is never dropped.
        let framing = "POST / HTTP/1.2\r\nHost: h\r\nContent-Length: 3\x01\r\n\r\n";
        let err = parse_head(framing.as_bytes(), &Limits::default()).unwrap_err();
        assert_eq!(err.status, Status::BadRequest);
        // A head cut anywhere is incomplete, not refused.
        let whole_req = b"GET /c HTTP/1.3\r\nHost: h\r\nA: b\r\n\r\n";
        for cut in 1..whole_req.len() {
            assert_eq!(
                parse_head(&whole_req[..cut], &Limits::default()),
                Ok(None),
                "{cut}"
            );
        }
    }

    #[test]
    fn expect_continue_field() {
        for (req, want) in [
            (
                "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n",
                true,
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nexpect:  100-Continue \r\n\r\n",
                true,
            ),
            (
                "POST / HTTP/1.2\r\nHost: h\r\nExpect: 100-continue\r\n\r\n",
                true,
            ),
            // RFC 9110 §10.1.1: ignored in HTTP/1.0.
            ("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", false),
            // Unknown expectations are ignored (as nginx does), not 417.
            (
                "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n",
                false,
            ),
            ("POST / HTTP/1.1\r\nHost: h\r\n\r\n", false),
        ] {
            assert_eq!(head(req).expect_continue, want, "{req:?}");
        }
    }

    #[test]
    fn continue_is_due_only_before_the_body() {
        let limits = Limits::default();
        let due = |req: &str| {
            let (h, n) = parse_head(req.as_bytes(), &limits).unwrap().unwrap();
            continue_due(&h, &req.as_bytes()[n..])
        };
        let head =
            "POST /u HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
        assert!(due(head));
        assert!(due(&head.replace("\r\n", "\n")), "bare LF heads too");
        assert!(due(&head.replace("HTTP/1.1", "HTTP/1.2")));
        assert!(due(
            &head.replace("Content-Length: 5", "Transfer-Encoding: chunked")
        ));
        // Once a body byte is in, the client is sending: no interim answer
        // (so it never goes out twice).
        assert!(!due(&format!("{head}h")));
        assert!(!due(&format!("{head}hello")));
        // No body, no expectation, 1.0.
        assert!(!due(&head.replace("Content-Length: 5", "Content-Length: 0")));
        assert!(!due(&head.replace("Expect: 100-continue", "X: y")));
        assert!(!due(&head.replace("HTTP/1.1", "HTTP/1.0")));
    }

    /// What nginx serves with its default buffers is served here too.
    #[test]
    fn default_limits_take_nginx_sized_requests() {
        let long_uri = format!("GET /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(7 * 1024));
        assert_eq!(head(&long_uri).path.len(), 7 * 1024 + 1);
        let fields: String = (0..100).map(|i| format!("X-Field-{i:03}: v\r\n")).collect();
        assert!(fields.len() >= 1300);
        let many = format!("GET / HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
        head(&many);
        let big = format!(
            "GET / HTTP/1.1\r\nHost: h\r\nCookie: {}\r\n\r\n",
            "c".repeat(16 * 1024)
        );
        head(&big);
    }

    #[test]
    fn max_headers_is_clamped_to_the_cap() {
        let limits = Limits {
            max_headers: usize::MAX,
            ..Limits::default()
        };
        let req = |n: usize| {
            format!(
                "GET / HTTP/1.1\r\nHost: h\r\n{}\r\n",
                "A: b\r\n".repeat(n - 1)
            )
        };
        let at_cap = req(MAX_HEADERS_CAP);
        assert!(parse_head(at_cap.as_bytes(), &limits).unwrap().is_some());
        let over = req(MAX_HEADERS_CAP + 1);
        assert_eq!(
            parse_head(over.as_bytes(), &limits).unwrap_err().status,
            Status::HeaderFieldsTooLarge
        );
    }

    #[test]
    fn limits_apply_while_incomplete() {
        let limits = Limits::default();
        // The target alone is too long before the line ends: 414 at once.
        let req = format!("GET /{}", "a".repeat(limits.max_uri + 1));
        assert_eq!(
            parse_head(req.as_bytes(), &limits).unwrap_err().status,
            Status::UriTooLong
        );
        // A head that reaches max_head without ending: 431.
        let req = format!("GET / HTTP/1.1\r\nX: {}", "b".repeat(limits.max_head));
        assert_eq!(
            parse_head(req.as_bytes(), &limits).unwrap_err().status,
            Status::HeaderFieldsTooLarge
        );
        // One byte short of the limit: still waiting.
        let req = format!("GET / HTTP/1.1\r\nX: {}", "b".repeat(limits.max_head - 20));
        assert_eq!(req.len(), limits.max_head - 1);
        assert!(parse_head(req.as_bytes(), &limits).unwrap().is_none());
    }

    #[test]
    fn head_of_exactly_max_head_is_accepted() {
        let limits = Limits {
            max_head: 64,
            ..Limits::default()
        };
        let prefix = "GET / HTTP/1.1\r\nHost: h\r\nX: ";
        let pad = 64 - prefix.len() - 4;
        let req = format!("{prefix}{}\r\n\r\n", "p".repeat(pad));
        assert_eq!(req.len(), 64);
        let (_, n) = parse_head(req.as_bytes(), &limits).unwrap().unwrap();
        assert_eq!(n, 64);
        let longer = format!("{prefix}{}\r\n\r\n", "p".repeat(pad + 1));
        assert_eq!(
            parse_head(longer.as_bytes(), &limits).unwrap_err().status,
            Status::HeaderFieldsTooLarge
        );
    }

    #[test]
    fn max_headers_is_respected() {
        let limits = Limits {
            max_headers: 2,
            ..Limits::default()
        };
        let ok = "GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n\r\n";
        assert!(parse_head(ok.as_bytes(), &limits).unwrap().is_some());
        let too_many = "GET / HTTP/1.1\r\nHost: h\r\nA: b\r\nC: d\r\n\r\n";
        assert_eq!(
            parse_head(too_many.as_bytes(), &limits).unwrap_err().status,
            Status::HeaderFieldsTooLarge
        );
    }

    #[test]
    fn body_is_dropped_as_it_arrives() {
        let limits = Limits::default();
        let req = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let (h, n) = parse_head(req, &limits).unwrap().unwrap();
        assert_eq!(h.method, Method::Other);
        assert_eq!(h.content_length, 5);
        // The head is a request before any of its body has come.
        assert_eq!(&req[n..n + 5], b"hello");
        let mut body = Discard::new(&h).unwrap();
        let took = |used, done| Ok(Skipped { used, done });
        assert_eq!(body.skip(&req[n..n + 2], &limits), took(2, false));
        assert_eq!(body.skip(&req[n + 2..], &limits), took(3, true));
        assert_eq!(&req[n + 5..n + 8], b"GET");
        // Equal repeated lengths are fine ("5, 5").
        let h = head("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 2, 2\r\n\r\nab");
        assert_eq!(h.content_length, 2);
        // No body, nothing to drop.
        let h = head("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(Discard::new(&h), None);
        // A Content-Length past the limit is refused at the head.
        let big = format!(
            "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
            1024 * 1024 + 1
        );
        assert_eq!(status(&big), 413);
        let at = big.replace("1048577", "1048576");
        assert!(parse_head(at.as_bytes(), &limits).unwrap().is_some());
    }

    #[test]
    fn pipelined_requests_parse_one_by_one() {
        let reqs = "GET /a HTTP/1.1\r\nHost: h\r\n\r\nHEAD /b HTTP/1.1\r\nHost: h\r\n\r\n\r\nGET /c HTTP/1.0\r\n\r\n";
        let mut rest = reqs.as_bytes();
        let mut seen = vec![];
        while !rest.is_empty() {
            let (h, n) = parse_head(rest, &Limits::default()).unwrap().unwrap();
            seen.push((h.method, h.path.clone()));
            rest = &rest[n..];
        }
        assert_eq!(
            seen,
            [
                (Method::Get, "/a".to_owned()),
                (Method::Head, "/b".to_owned()),
                (Method::Get, "/c".to_owned()),
            ]
        );
    }

    #[test]
    fn chunked_bodies_are_consumed_whole() {
        let head = "GET /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
        for body in [
            "0\r\n\r\n",
            "0\n\n",
            "5\r\nhello\r\n0\r\n\r\n",
            "A\r\n0123456789\r\n00\r\n\r\n",
            "1;ext\r\nx\r\n1 ; a=\"q\"\r\ny\r\n0\r\n\r\n",
            "3\r\n\r\n\n\r\n0\r\nA: 1\r\nB-c:\r\n\r\n",
            "fF\t;x\r\n{ff}\r\n0000000000000000\r\n\r\n",
            "5;a\nhello\r\n0\r\n\r\n",
            "0000000000000000005\r\nhello\r\n00000000000000000000\r\n\r\n",
        ] {
            let body = body.replace("{ff}", &"y".repeat(0xff));
            let req = format!("{head}{body}");
            let (h, n) = parse(&req).unwrap().unwrap();
            assert!(h.chunked, "{body:?}");
            assert_eq!(n, req.len(), "{body:?}");
            // Followed by the next request: only the body is consumed.
            let piped = format!("{req}GET / HTTP/1.1\r\nHost: h\r\n\r\n");
            assert_eq!(parse(&piped).unwrap().unwrap().1, req.len(), "{body:?}");
        }
        for body in [
            "",
            "5",
            "5\r\nhel",
            "5\r\nhello",
            "5\r\nhello\r",
            "0\r\n",
            "0\r\nA: 1\r\n",
        ] {
            assert_eq!(parse(&format!("{head}{body}")), Ok(None), "{body:?}");
        }
        for body in [
            "zz\r\n",
            "-1\r\n",
            "5\r\nhelloXX0\r\n\r\n",
            "0\r\nno colon\r\n\r\n",
            "0\r\n: v\r\n\r\n",
            "0\r\nBad Name: v\r\n\r\n",
            "ffffffffffffffffffff\r\n",
            "10000000000000000\r\n",
            "\r\n",
            ";x\r\n",
            "5 x\r\n",
            "5;a\rb\r\n",
            "5\r\r\n",
            "5;a\x01\r\n",
            "5x",
        ] {
            assert_eq!(status(&format!("{head}{body}")), 400, "{body:?}");
        }
        // No limit on a chunked body (it costs nothing to drop, as nginx
        // discards one): a chunk larger than any buffer is skipped as its
        // bytes come, and a framing line that cannot end within the head
        // limit is refused.
        let limits = Limits::default();
        let (h, n) = parse_head(head.as_bytes(), &limits).unwrap().unwrap();
        let mut body = Discard::new(&h).unwrap();
        assert_eq!(body.skip(b"100000\r\n", &limits).map(|s| s.used), Ok(8));
        for _ in 0..16 {
            assert_eq!(
                body.skip(&[b'x'; 0x10000], &limits).map(|s| s.done),
                Ok(false)
            );
        }
        assert_eq!(
            body.skip(b"\r\n0\r\n\r\nGET", &limits),
            Ok(Skipped {
                used: 7,
                done: true
            })
        );
        assert_eq!(n, head.len());
        // A chunk-size line and a trailer line that reach the head limit.
        for long in [
            format!("5;{}", "e".repeat(limits.max_head)),
            format!("0\r\nT: {}", "v".repeat(limits.max_head)),
            format!("0\r\nT: {}\r\n", "v".repeat(limits.max_head)),
        ] {
            let mut body = Discard::new(&h).unwrap();
            let e = body.skip(long.as_bytes(), &limits).unwrap_err();
            assert_eq!(e.status.code(), 400, "{}", &long[..8]);
        }
    }

    #[test]
    fn empty_buffer_is_incomplete() {
        assert!(parse("").unwrap().is_none());
        assert!(parse("\r\n").unwrap().is_none());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const VALID: &[&str] = &[
            "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
            "HEAD /a/b.txt?x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "GET /f HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"a\"\r\nRange: bytes=1-2\r\n\r\n",
            "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody",
            "GET /v HTTP/1.2\r\nHost: h\r\n\r\n",
            "\r\nPOST /p HTTP/1.9\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
            "PUT /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4;a=b\r\nbody\r\n1\nx\n0\r\nT: v\r\n\r\n",
        ];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]

            #[test]
            fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse_head(&bytes, &Limits::default());
                let tight = Limits { max_head: 32, max_uri: 8, max_headers: 2, max_body: 4 };
                let _ = whole(&bytes, &tight);
                let _ = whole(&bytes, &Limits::default());
                let _ = later_minor_digit(&bytes);
            }

            #[test]
            fn never_panics_near_valid(
                i in 0..VALID.len(),
                at in any::<prop::sample::Index>(),
                junk in prop::collection::vec(any::<u8>(), 0..16),
            ) {
                let mut bytes = VALID[i].as_bytes().to_vec();
                let at = at.index(bytes.len() + 1);
                bytes.splice(at..at, junk);
                let _ = whole(&bytes, &Limits::default());
            }

            /// A request of HTTP/1.2-1.9 parses exactly as the same bytes
            /// saying 1.1: any request line, any field lines (bad ones
            /// included), whole or cut anywhere.
            #[test]
            fn later_minors_parse_as_http11(
                i in 0..VALID.len(),
                minor in b'2'..=b'9',
                fields in prop::collection::vec(
                    prop::collection::vec(
                        prop::sample::select(b"aZ-_:; \t\x01\x7f\xc3(=,0".to_vec()), 0..12),
                    0..6),
                cut in any::<prop::sample::Index>(),
            ) {
                let valid = VALID[i].as_bytes();
                let Some(line_end) = valid.windows(2).position(|w| w == b"\r\n") else {
                    return Ok(());
                };
                prop_assume!(valid[..line_end].ends_with(b" HTTP/1.1"));
                let mut req = valid[..line_end + 2].to_vec();
                for f in &fields {
                    req.extend_from_slice(f);
                    req.extend_from_slice(b"\r\n");
                }
                req.extend_from_slice(&valid[line_end + 2..]);
                let mut later = req.clone();
                later[line_end - 1] = minor;
                let cut = cut.index(req.len() + 1);
                let limits = Limits::default();
                // The same head but for its raw bytes (the version's digit).
                let head = |bytes| {
                    parse_head(bytes, &limits).map(|h| h.map(|(h, n)| (Head { raw: b"", ..h }, n)))
                };
                prop_assert_eq!(head(&later[..cut]), head(&req[..cut]));
            }

            /// A body cut into chunks of any sizes is consumed exactly.
            #[test]
            fn chunked_any_split(
                body in prop::collection::vec(any::<u8>(), 0..2048),
                cuts in prop::collection::vec(1usize..300, 0..40),
                reads in prop::collection::vec(1usize..64, 1..8),
            ) {
                let mut req = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                let mut rest = &body[..];
                for c in cuts.iter().chain(std::iter::once(&usize::MAX)) {
                    let (chunk, more) = rest.split_at((*c).min(rest.len()));
                    if !chunk.is_empty() {
                        req.extend(format!("{:x}\r\n", chunk.len()).bytes());
                        req.extend(chunk);
                        req.extend(b"\r\n");
                    }
                    rest = more;
                }
                req.extend(b"0\r\n\r\n");
                let limits = Limits::default();
                let (_, n) = whole(&req, &limits).unwrap().unwrap();
                prop_assert_eq!(n, req.len());
                for cut in [req.len() - 1, req.len() / 2] {
                    prop_assert_eq!(whole(&req[..cut], &limits), Ok(None));
                }
                // Fed as reads of any sizes (what a read leaves unused is
                // kept, as the connection's buffer keeps it), the body ends
                // exactly at its last byte, with the next request after it.
                let (h, head_len) = parse_head(&req, &limits).unwrap().unwrap();
                let mut discard = Discard::new(&h).unwrap();
                req.extend(b"GET / HTTP/1.1\r\n\r\n");
                let (mut at, mut end, mut done) = (head_len, head_len, false);
                for r in reads.iter().cycle() {
                    end = (end + r).min(req.len());
                    let s = discard.skip(&req[at..end], &limits).unwrap();
                    at += s.used;
                    if s.done {
                        done = true;
                        break;
                    }
                }
                prop_assert!(done);
                prop_assert_eq!(at, n);
            }

            /// Every proper prefix of a valid request is incomplete; the whole
            /// request parses, consuming exactly its bytes.
            #[test]
            fn split_points(i in 0..VALID.len(), trailing in "[A-Z]{0,4}") {
                let req = VALID[i].as_bytes();
                for cut in 0..req.len() {
                    prop_assert_eq!(whole(&req[..cut], &Limits::default()), Ok(None));
                }
                let mut full = req.to_vec();
                full.extend_from_slice(trailing.as_bytes());
                let (_, n) = whole(&full, &Limits::default()).unwrap().unwrap();
                prop_assert_eq!(n, req.len());
            }
        }
    }
}
