//! Deciding the response and writing its head: [`plan_file`] for a file that
//! was found, [`write_error`] and [`write_redirect`] for everything else.
//!
//! Each function appends one complete response head (and, for errors and
//! redirects, its small HTML body) to `out` and returns a [`Plan`]: the
//! status, which bytes of the file to send after the head, and whether the
//! connection stays open. Several responses may be appended to the same `out`
//! before it is written: that is how pipelined requests share one `write`.
//!
//! Decisions for a file (RFC 9110):
//! 1. A method other than GET or HEAD → 405 with `Allow: GET, HEAD`.
//! 2. `If-Match` present → 412 unless one of its tags matches the file's
//!    [`ETag`] by strong comparison (or it is `*`); otherwise
//!    `If-Unmodified-Since` → 412 if the file's mtime, in whole seconds, is
//!    later than it (§13.2.2: these come before the others; a client that
//!    resumes a download with them must not splice two versions of a file).
//! 3. `If-None-Match` present → 304 if any of its tags matches the file's
//!    [`ETag`] by weak comparison (or is `*`), and `If-Modified-Since` is
//!    **ignored** (§13.2.2: `If-None-Match` takes precedence). Otherwise
//!    `If-Modified-Since` → 304 if it is the file's mtime in whole seconds
//!    (nginx's `if_modified_since exact`, its default; RFC 9110's "not
//!    later than" would keep clients on their copy when a file is replaced
//!    by one with an older mtime: a rollback, `rsync -t`, an unpacked
//!    archive; [`IfModifiedSince`] chooses another rule), unless it is
//!    later than the response's `Date`: a date in the future is invalid
//!    (§13.1.3) and ignored.
//! 4. `Range` (GET only; ignored when an `If-Range` does not match the
//!    file's strong `ETag` or equal its `Last-Modified`):
//!    - one range, `bytes=a-b`, `bytes=a-` or `bytes=-n`, satisfiable → 206
//!      with `Content-Range: bytes first-last/size`;
//!    - one range that no byte satisfies (`a ≥ size`, `-0`, `a-` or `a-b` on
//!      an empty file) → 416 with `Content-Range: bytes */size` (a suffix
//!      `-n` on an empty file is satisfiable yet empty: ignored, 200);
//!    - several ranges: those no byte satisfies are dropped (none left →
//!      416); the rest are coalesced where they overlap or touch (§15.3.7.2
//!      allows it, whatever their order): one span left → 206 as for one
//!      range; several apart (`bytes=0-1,5-6`) → 206 `multipart/byteranges`
//!      (§14.6), one part per span in the order the ranges were asked (a
//!      coalesced span where its first range was), each with its
//!      `Content-Type` and `Content-Range`, as nginx answers (nginx does not
//!      coalesce); more than [`MAX_PARTS`] spans → the Range is ignored
//!      (200; §14.2 allows it, and it bounds the parts' overhead), as are
//!      more satisfiable ranges than [`set_max_ranges`] allows (0: no
//!      ranges at all, nor `Accept-Ranges`);
//!    - another unit or a syntax error → the Range is **ignored** and the
//!      whole file is sent with 200.
//! 5. Otherwise 200 with the whole file.
//!
//! Every response carries `Date`, `Server: duality`, `Connection:
//! keep-alive` or `close`, and, except 304, `Content-Length`; file
//! responses carry `Last-Modified`, `ETag` (strong, see [`ETag`]) and
//! `Accept-Ranges: bytes`. The status line is always `HTTP/1.1`. A HEAD
//! request gets the same head as GET, without the body.
//!
//! [`plan_encoded`] plans the same for a chosen [`Encoding`] (see
//! [`crate::gzip`] for the choice): `Identity { vary: true }` adds
//! `Vary: Accept-Encoding` to every response (304 and 416 included);
//! `Gzip { len }` answers with the gzip variant: its own [`ETag`]
//! ([`ETag::gzip_variant`]) for `If-None-Match`, `Content-Encoding: gzip`,
//! `Content-Length: len`, `Vary`, no `Accept-Ranges`, and `Range` ignored
//! (the caller only chooses gzip for requests without one). [`plan_file`] is
//! `plan_encoded` with `Identity { vary: false }`.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};
use std::time::SystemTime;

use crate::date;
use crate::file::{ETag, FileMeta};
use crate::request::{trim, Head, Method};
use crate::status::{HttpError, Status};

/// The interim response to a request with `Expect: 100-continue`, sent before
/// the final one while none of its body has come (see
/// [`continue_due`](crate::request::continue_due)).
/// The only status line not built from a [`Status`].
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A span of the file to send after the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// Offset of the first byte.
    pub start: u64,
    /// Number of bytes (never 0).
    pub len: u64,
}

impl ByteRange {
    /// One past the last byte.
    pub const fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// What the handler does after writing the head appended to `out`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The status written.
    pub status: Status,
    /// Bytes of the file to send after the head; `None` when the response
    /// is complete in `out` (HEAD, 304, errors, redirects, empty files) or
    /// its body is `parts`.
    pub body: Option<ByteRange>,
    /// The body of a `multipart/byteranges` answer (a GET with several
    /// ranges apart), to send after the head.
    pub parts: Option<Box<Parts>>,
    /// Keep the connection open after this response.
    pub keep_alive: bool,
    /// Bytes of a body written whole into the output after the head (an
    /// error or redirect page, the status page), or of a body cut short:
    /// what the access log counts as sent when there is neither `body` nor
    /// `parts`, as nginx's `$body_bytes_sent`.
    pub inline_body: u64,
}

impl Plan {
    /// The body's bytes after the head: what the access log counts as sent
    /// (nginx's `$body_bytes_sent`) when the whole body went out.
    pub fn body_bytes(&self) -> u64 {
        match (&self.body, &self.parts) {
            (Some(b), _) => b.len,
            (None, Some(p)) => p.len,
            (None, None) => self.inline_body,
        }
    }
}

/// Most spans a `multipart/byteranges` answer carries; a Range with more
/// (after coalescing) gets the whole file. Each part costs about 100
/// bytes of its own head, and from a file a write and a `sendfile`.
pub const MAX_PARTS: usize = 64;

/// The body of a `multipart/byteranges` response (RFC 9110 §14.6): each
/// part's head, then its span of the file; after the last, `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    /// The delimiter's boundary, named in the head's `Content-Type`.
    pub boundary: String,
    /// Each part: its head (the delimiter, `Content-Type`,
    /// `Content-Range`, a blank line) and the span of the file it carries.
    pub parts: Vec<(Vec<u8>, ByteRange)>,
    /// The closing delimiter.
    pub end: Vec<u8>,
    /// The whole body's length.
    len: u64,
}

impl Parts {
    /// Spans of a file of `size` bytes of type `content_type`, delimited
    /// by `boundary`; None if the body's length would not fit a `u64` (a
    /// size no file has, given through the public API).
    fn new(spans: &[ByteRange], content_type: &str, size: u64, boundary: String) -> Option<Parts> {
        let parts: Vec<(Vec<u8>, ByteRange)> = spans
            .iter()
            .map(|span| {
                let mut head = Vec::with_capacity(110 + boundary.len() + content_type.len());
                head.extend_from_slice(b"\r\n--");
                head.extend_from_slice(boundary.as_bytes());
                head.extend_from_slice(b"\r\n");
                field(&mut head, "Content-Type", content_type.as_bytes());
                content_range(&mut head, *span, size);
                head.extend_from_slice(b"\r\n");
                (head, *span)
            })
            .collect();
        let end = format!("\r\n--{boundary}--\r\n").into_bytes();
        let len = parts.iter().try_fold(end.len() as u64, |n, (head, span)| {
            n.checked_add(head.len() as u64)?.checked_add(span.len)
        })?;
        Some(Parts {
            end,
            boundary,
            parts,
            len,
        })
    }

    /// The body made of `bytes` (the whole file), appended to `out`. False
    /// if a span lies past `bytes` (the file shrank): the body is then
    /// short of its `Content-Length`, and the connection must close.
    pub fn write(&self, bytes: &[u8], out: &mut Vec<u8>) -> bool {
        for (head, span) in &self.parts {
            out.extend_from_slice(head);
            match bytes.get(span.start as usize..span.end() as usize) {
                Some(b) => out.extend_from_slice(b),
                None => return false,
            }
        }
        out.extend_from_slice(&self.end);
        true
    }
}

/// A boundary no two responses of the process share and no file is likely
/// to hold: 16 hex digits from a per-process random key and a counter
/// (nginx uses the counter alone).
fn boundary() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::OnceLock;
    static KEY: OnceLock<RandomState> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Relaxed);
    format!("{:016x}", KEY.get_or_init(RandomState::new).hash_one(n))
}

/// Which representation of a file a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// The file's bytes. `vary`: the file also has a gzip variant, so the
    /// response says it depends on `Accept-Encoding`.
    Identity {
        /// Send `Vary: Accept-Encoding`.
        vary: bool,
    },
    /// The gzip variant, `len` bytes long; the [`Plan`]'s body span is a
    /// span of those bytes.
    Gzip {
        /// Length of the gzip body.
        len: u64,
    },
}

impl Encoding {
    /// The tag of this representation of `file`.
    pub fn etag(&self, file: &FileMeta) -> ETag {
        match self {
            Encoding::Identity { .. } => file.etag(),
            Encoding::Gzip { .. } => file.etag().gzip_variant(),
        }
    }

    fn vary(&self) -> bool {
        !matches!(self, Encoding::Identity { vary: false })
    }
}

/// Plans the response to `head` for a file with validators `file` and type
/// `content_type`, and appends its head to `out` (see the
/// [module docs](self) for the decisions). `date` is the current
/// IMF-fixdate (from a [`DateCache`](crate::DateCache)); it is also the
/// "now" that `If-Modified-Since` must not be later than.
pub fn plan_file(
    head: &Head<'_>,
    file: &FileMeta,
    content_type: &str,
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    plan_encoded(
        head,
        file,
        content_type,
        Encoding::Identity { vary: false },
        date,
        out,
    )
}

/// Whether the conditional fields of `head` make the answer a 304 for the
/// representation tagged `etag` of `file` (If-None-Match, else
/// If-Modified-Since; see the [module docs](self)). [`plan_encoded`]
/// decides with it; a caller asks it first to skip work a 304 does not
/// need (compressing a body).
pub fn not_modified(head: &Head<'_>, etag: &ETag, file: &FileMeta, date: &str) -> bool {
    not_modified_by(IfModifiedSince::current(), head, etag, file, date)
}

/// [`not_modified`] with `If-Modified-Since` compared as `ims_rule` says.
fn not_modified_by(
    ims_rule: IfModifiedSince,
    head: &Head<'_>,
    etag: &ETag,
    file: &FileMeta,
    date: &str,
) -> bool {
    match (head.if_none_match, head.if_modified_since) {
        (Some(inm), _) => none_match_hits(inm, etag),
        (None, Some(ims)) => {
            ims_rule.holds(date::to_http_seconds(file.mtime), ims) && !in_future(ims, date)
        }
        (None, None) => false,
    }
}

/// How `If-Modified-Since` is compared with a file's `Last-Modified`
/// (`--if-modified-since`, nginx's `if_modified_since`), for every server
/// of the process. A date later than the response's `Date` is ignored
/// under every rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IfModifiedSince {
    /// Ignored: a date never makes a 304 (an `If-None-Match` still does).
    Off,
    /// 304 only for the file's `Last-Modified` exactly (nginx's default;
    /// see the [module docs](self) why).
    #[default]
    Exact,
    /// 304 for the file's `Last-Modified` or a later date (RFC 9110's "not
    /// later than").
    Before,
}

/// The process's [`IfModifiedSince`], as a `u8`.
static IMS_RULE: AtomicU8 = AtomicU8::new(IfModifiedSince::Exact as u8);

/// The process's largest number of ranges a `Range` may ask for
/// (`--max-ranges`; `u32::MAX`: no limit but [`MAX_PARTS`]).
static MAX_RANGES: AtomicU32 = AtomicU32::new(u32::MAX);

impl IfModifiedSince {
    /// Makes this the rule of every answer the process plans from now on:
    /// a server's setting, made once at start.
    pub fn set(self) {
        IMS_RULE.store(self as u8, Relaxed);
    }

    fn current() -> IfModifiedSince {
        match IMS_RULE.load(Relaxed) {
            0 => IfModifiedSince::Off,
            2 => IfModifiedSince::Before,
            _ => IfModifiedSince::Exact,
        }
    }

    /// Whether a file last modified at `mtime` is unmodified since `ims`
    /// (both in whole seconds) under this rule.
    fn holds(self, mtime: SystemTime, ims: SystemTime) -> bool {
        match self {
            IfModifiedSince::Off => false,
            IfModifiedSince::Exact => mtime == ims,
            IfModifiedSince::Before => mtime <= ims,
        }
    }
}

impl std::str::FromStr for IfModifiedSince {
    type Err = String;

    fn from_str(s: &str) -> Result<IfModifiedSince, String> {
        match s {
            "off" => Ok(IfModifiedSince::Off),
            "exact" => Ok(IfModifiedSince::Exact),
            "before" => Ok(IfModifiedSince::Before),
            _ => Err(format!("{s:?}: expected off, exact or before")),
        }
    }
}

/// Limits the ranges one `Range` may ask for, for every answer the process
/// plans from now on (`--max-ranges`, nginx's `max_ranges`; a server's
/// setting, made once at start): a request asking for more satisfiable
/// ranges than `max` gets the whole file (200); `Some(0)` turns ranges off
/// (no `Accept-Ranges` either); `None` leaves only [`MAX_PARTS`].
pub fn set_max_ranges(max: Option<u32>) {
    MAX_RANGES.store(max.unwrap_or(u32::MAX), Relaxed);
}

/// [`plan_file`] for the representation `encoding` of the file (see the
/// [module docs](self)).
pub fn plan_encoded(
    head: &Head<'_>,
    file: &FileMeta,
    content_type: &str,
    encoding: Encoding,
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    if head.method == Method::Other {
        return write_error(
            HttpError::keep(Status::MethodNotAllowed),
            Some(head),
            date,
            out,
        );
    }
    let etag = encoding.etag(file);
    let vary = encoding.vary();

    if precondition_failed(head, &etag, file) {
        return file_error(out, Status::PreconditionFailed, head, date, |out| {
            if vary {
                out.extend_from_slice(VARY);
            }
        });
    }
    let max_ranges = MAX_RANGES.load(Relaxed);
    if not_modified(head, &etag, file, date) {
        let keep_alive = head.keep_alive;
        status_line(out, Status::NotModified, date);
        validators(out, &etag, file);
        if vary {
            out.extend_from_slice(VARY);
        }
        connection(out, keep_alive);
        return Plan {
            status: Status::NotModified,
            body: None,
            parts: None,
            keep_alive,
            inline_body: 0,
        };
    }

    let (size, gzip) = match encoding {
        Encoding::Identity { .. } => (file.size, false),
        Encoding::Gzip { len } => (len, true),
    };
    let range = match head.range {
        Some(range)
            if !gzip
                && max_ranges > 0
                && head.method == Method::Get
                && if_range_holds(head, &etag, file) =>
        {
            parse_range(range, file.size, max_ranges)
        }
        _ => RangeSpec::Ignore,
    };
    let whole = ByteRange {
        start: 0,
        len: size,
    };
    let (status, span, parts) = match range {
        RangeSpec::Ignore => (Status::Ok, whole, None),
        RangeSpec::Span(span) => (Status::PartialContent, span, None),
        RangeSpec::Parts(spans) => match Parts::new(&spans, content_type, file.size, boundary()) {
            Some(parts) => (Status::PartialContent, whole, Some(Box::new(parts))),
            None => (Status::Ok, whole, None),
        },
        RangeSpec::Unsatisfiable => {
            return file_error(out, Status::RangeNotSatisfiable, head, date, |out| {
                out.extend_from_slice(b"Content-Range: bytes */");
                push_u64(out, file.size);
                out.extend_from_slice(b"\r\n");
                if vary {
                    out.extend_from_slice(VARY);
                }
            });
        }
    };

    status_line(out, status, date);
    match &parts {
        Some(p) => {
            out.extend_from_slice(b"Content-Type: multipart/byteranges; boundary=");
            out.extend_from_slice(p.boundary.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        None => field(out, "Content-Type", content_type.as_bytes()),
    }
    if gzip {
        out.extend_from_slice(b"Content-Encoding: gzip\r\n");
    }
    out.extend_from_slice(b"Content-Length: ");
    push_u64(out, parts.as_ref().map_or(span.len, |p| p.len));
    out.extend_from_slice(b"\r\n");
    validators(out, &etag, file);
    if vary {
        out.extend_from_slice(VARY);
    }
    if !gzip && max_ranges > 0 {
        out.extend_from_slice(b"Accept-Ranges: bytes\r\n");
    }
    // A multipart body names each part's range in the part.
    if status == Status::PartialContent && parts.is_none() {
        content_range(out, span, file.size);
    }
    connection(out, head.keep_alive);
    Plan {
        status,
        body: (head.method == Method::Get && parts.is_none() && span.len > 0).then_some(span),
        parts,
        keep_alive: head.keep_alive,
        inline_body: 0,
    }
}

/// Appends the head of an error answered with a page of the root (nginx's
/// `error_page` without `=`): the error's `status`, the page's type and
/// length, no validators or ranges (the page is not what was asked for,
/// and a cache must not take it for that), and a body of the page's `size`
/// bytes for GET (none for HEAD).
pub fn plan_error_page(
    head: &Head<'_>,
    status: Status,
    size: u64,
    content_type: &str,
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    status_line(out, status, date);
    field(out, "Content-Type", content_type.as_bytes());
    out.extend_from_slice(b"Content-Length: ");
    push_u64(out, size);
    out.extend_from_slice(b"\r\n");
    connection(out, head.keep_alive);
    Plan {
        status,
        body: (head.method == Method::Get && size > 0).then_some(ByteRange {
            start: 0,
            len: size,
        }),
        parts: None,
        keep_alive: head.keep_alive,
        inline_body: 0,
    }
}

/// Appends an error response for `err` (head and a small HTML body, no body
/// for HEAD). `head` is the request if one was parsed: without it (a parse
/// error, a timeout) or when `err.close` is set, the connection closes.
/// 405 carries `Allow: GET, HEAD`.
pub fn write_error(err: HttpError, head: Option<&Head<'_>>, date: &str, out: &mut Vec<u8>) -> Plan {
    let keep_alive = !err.close && head.is_some_and(|h| h.keep_alive);
    let head_only = head.is_some_and(|h| h.method == Method::Head);
    error_plan(err, keep_alive, head_only, date, out)
}

/// Appends the error response for a request refused before its head was
/// whole (a bad line or field, a timeout): the connection closes. `line` is
/// what came of its request line: a HEAD request's answer has no body,
/// as nginx, which knows the method once the line's first word has come.
pub fn write_refusal(err: HttpError, line: Option<&[u8]>, date: &str, out: &mut Vec<u8>) -> Plan {
    let head_only = line.is_some_and(|l| l.starts_with(b"HEAD "));
    error_plan(err, false, head_only, date, out)
}

fn error_plan(
    err: HttpError,
    keep_alive: bool,
    head_only: bool,
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    let inline_body = error_response(out, err.status, keep_alive, head_only, date, |out| {
        if err.status == Status::MethodNotAllowed {
            out.extend_from_slice(b"Allow: GET, HEAD\r\n");
        }
        if err.vary {
            out.extend_from_slice(VARY);
        }
    });
    Plan {
        status: err.status,
        body: None,
        parts: None,
        keep_alive,
        inline_body,
    }
}

/// Appends a 301 to `location` (a [`Resolved::Redirect`](crate::Resolved)
/// location, already percent-encoded), with a small HTML body unless HEAD.
/// The request's query goes along (`/dir?page=2` → `/dir/?page=2`), as
/// nginx's redirect keeps it.
pub fn write_redirect(head: &Head<'_>, location: &str, date: &str, out: &mut Vec<u8>) -> Plan {
    let rewritten;
    let query = match &head.rewritten_query {
        // A `--rewrite`'s query goes along instead (nginx's `$args`).
        Some(q) if q.is_empty() => None,
        Some(q) => {
            rewritten = [b"?", &q[..]].concat();
            Some(&rewritten[..])
        }
        None => redirect_query(head.target),
    };
    let keep_alive = head.keep_alive;
    let head_only = head.method == Method::Head;
    let inline_body = error_response(
        out,
        Status::MovedPermanently,
        keep_alive,
        head_only,
        date,
        |out| {
            out.extend_from_slice(b"Location: ");
            out.extend_from_slice(location.as_bytes());
            // Bytes past ASCII (a query not in UTF-8 either) go percent-
            // encoded: a field value of raw octets is obsolete (RFC 9110
            // §5.5), and decoding gives the same query back.
            for &b in query.unwrap_or(b"") {
                if b.is_ascii() {
                    out.push(b);
                } else {
                    out.extend_from_slice(format!("%{b:02X}").as_bytes());
                }
            }
            out.extend_from_slice(b"\r\n");
        },
    );
    Plan {
        status: Status::MovedPermanently,
        body: None,
        parts: None,
        keep_alive,
        inline_body,
    }
}

/// The query a redirect keeps: from the `?` that ends the path to the
/// fragment, if any; none when empty or when the `?` is in the fragment
/// (`/dir#x?y` is `/dir` with a fragment), as nginx's `Location`.
fn redirect_query(target: &[u8]) -> Option<&[u8]> {
    let end = target
        .iter()
        .position(|&b| b == b'#')
        .unwrap_or(target.len());
    let target = &target[..end];
    let q = &target[target.iter().position(|&b| b == b'?')?..];
    (q.len() > 1).then_some(q)
}

/// Appends a 200 whose body is `body` (of type `content_type`), not
/// cacheable, with no body for HEAD: the stub status page.
pub fn write_text(
    head: &Head<'_>,
    content_type: &str,
    body: &[u8],
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    let no_cache = b"Cache-Control: no-cache\r\n";
    write_body(head, Status::Ok, content_type, body, no_cache, date, out)
}

/// Appends a `status` whose body is `body` (`text/plain`, nginx's default
/// type), with no body for HEAD: `--return CODE TEXT`, as nginx's `return`.
pub fn write_returned(
    head: &Head<'_>,
    status: Status,
    body: &[u8],
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    write_body(head, status, "text/plain", body, b"", date, out)
}

/// Appends a `status` (a redirect: 301, 302, 303, 307, 308) to `location`
/// as given, with the small page errors have unless HEAD: `--return CODE
/// URL`, as nginx's `return`.
pub fn write_redirect_to(
    head: &Head<'_>,
    status: Status,
    location: &[u8],
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    let keep_alive = head.keep_alive;
    let head_only = head.method == Method::Head;
    let inline_body = error_response(out, status, keep_alive, head_only, date, |out| {
        field(out, "Location", location);
    });
    Plan {
        status,
        body: None,
        parts: None,
        keep_alive,
        inline_body,
    }
}

fn write_body(
    head: &Head<'_>,
    status: Status,
    content_type: &str,
    body: &[u8],
    extra: &[u8],
    date: &str,
    out: &mut Vec<u8>,
) -> Plan {
    status_line(out, status, date);
    field(out, "Content-Type", content_type.as_bytes());
    out.extend_from_slice(b"Content-Length: ");
    push_u64(out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(extra);
    connection(out, head.keep_alive);
    let inline_body = if head.method != Method::Head {
        out.extend_from_slice(body);
        body.len() as u64
    } else {
        0
    };
    Plan {
        status,
        body: None,
        parts: None,
        keep_alive: head.keep_alive,
        inline_body,
    }
}

/// The field every response for a file with a gzip variant carries.
const VARY: &[u8] = b"Vary: Accept-Encoding\r\n";

const BODY_START: &str = "<html><head><title>";
const BODY_MIDDLE: &str = "</title></head><body><h1>";
const BODY_END: &str = "</h1><hr>duality</body></html>\n";

/// An error answering a request for a file that was found (412, 416): the
/// connection stays as the request asked, HEAD gets the head alone, and
/// `extra` adds fields.
fn file_error(
    out: &mut Vec<u8>,
    status: Status,
    head: &Head<'_>,
    date: &str,
    extra: impl FnOnce(&mut Vec<u8>),
) -> Plan {
    let keep_alive = head.keep_alive;
    let head_only = head.method == Method::Head;
    let inline_body = error_response(out, status, keep_alive, head_only, date, extra);
    Plan {
        status,
        body: None,
        parts: None,
        keep_alive,
        inline_body,
    }
}

/// A response whose body is the status as a tiny HTML page; `extra` adds
/// fields. Returns the body's length (0 for HEAD, which gets none).
fn error_response(
    out: &mut Vec<u8>,
    status: Status,
    keep_alive: bool,
    head_only: bool,
    date: &str,
    extra: impl FnOnce(&mut Vec<u8>),
) -> u64 {
    let text = status.text();
    let len = BODY_START.len() + BODY_MIDDLE.len() + BODY_END.len() + 2 * text.len();
    status_line(out, status, date);
    out.extend_from_slice(b"Content-Type: text/html; charset=utf-8\r\nContent-Length: ");
    push_u64(out, len as u64);
    out.extend_from_slice(b"\r\n");
    extra(out);
    connection(out, keep_alive);
    if head_only {
        return 0;
    }
    for part in [BODY_START, text, BODY_MIDDLE, text, BODY_END] {
        out.extend_from_slice(part.as_bytes());
    }
    len as u64
}

fn status_line(out: &mut Vec<u8>, status: Status, date: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.text().as_bytes());
    out.extend_from_slice(b"\r\nServer: duality\r\nDate: ");
    out.extend_from_slice(date.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn validators(out: &mut Vec<u8>, etag: &ETag, file: &FileMeta) {
    out.extend_from_slice(b"Last-Modified: ");
    out.extend_from_slice(&date::format_memo(file.mtime));
    if !etag.is_absent() {
        out.extend_from_slice(b"\r\nETag: ");
        out.extend_from_slice(etag.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// Ends the head with the `Connection` field and the blank line.
fn connection(out: &mut Vec<u8>, keep_alive: bool) {
    out.extend_from_slice(if keep_alive {
        b"Connection: keep-alive\r\n\r\n".as_slice()
    } else {
        b"Connection: close\r\n\r\n".as_slice()
    });
}

fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `Content-Range: bytes first-last/size`.
fn content_range(out: &mut Vec<u8>, span: ByteRange, size: u64) {
    out.extend_from_slice(b"Content-Range: bytes ");
    push_u64(out, span.start);
    out.push(b'-');
    push_u64(out, span.end() - 1);
    out.push(b'/');
    push_u64(out, size);
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal without going through `fmt`.
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Whether `t` is later than `now` (an IMF-fixdate; the clock if it does not
/// parse, so a bad `date` argument cannot turn the check off).
fn in_future(t: SystemTime, now: &str) -> bool {
    t > date::parse(now.as_bytes()).unwrap_or_else(SystemTime::now)
}

/// Whether an `If-None-Match` value matches `etag` by weak comparison: `*`,
/// or any listed tag with the same opaque part, `W/` or not. A malformed list
/// stops matching where it breaks (answering 200 is always safe).
fn none_match_hits(value: &[u8], etag: &ETag) -> bool {
    list_hits(value, etag, false)
}

/// Whether the conditions that come first fail for the representation
/// tagged `etag` of `file` (see the [module docs](self), step 2): 412.
fn precondition_failed(head: &Head<'_>, etag: &ETag, file: &FileMeta) -> bool {
    match (head.if_match, head.if_unmodified_since) {
        (Some(im), _) => !list_hits(im, etag, true),
        (None, Some(ius)) => date::to_http_seconds(file.mtime) > ius,
        (None, None) => false,
    }
}

/// Whether the entity-tag list `value` (or `*`) names `etag`; `strong`: a
/// weak tag in the list never does (If-Match's strong comparison).
fn list_hits(value: &[u8], etag: &ETag, strong: bool) -> bool {
    let mut rest = trim(value);
    if rest == b"*" {
        return true;
    }
    loop {
        rest = trim_list_start(rest);
        if rest.is_empty() {
            return false;
        }
        let Some((opaque, weak, after)) = entity_tag(rest) else {
            return false;
        };
        if etag.named_by(opaque) && !(strong && weak) {
            return true;
        }
        rest = after;
    }
}

/// Splits one entity-tag (`"x"` or `W/"x"`) off the front of `s`:
/// `(opaque, weak, rest)`.
fn entity_tag(s: &[u8]) -> Option<(&[u8], bool, &[u8])> {
    let (weak, s) = match s.strip_prefix(b"W/") {
        Some(s) => (true, s),
        None => (false, s),
    };
    let s = s.strip_prefix(b"\"")?;
    let close = s.iter().position(|&b| b == b'"')?;
    Some((&s[..close], weak, &s[close + 1..]))
}

/// Skips spaces, tabs and commas.
fn trim_list_start(s: &[u8]) -> &[u8] {
    let i = s
        .iter()
        .position(|&b| !matches!(b, b' ' | b'\t' | b','))
        .unwrap_or(s.len());
    &s[i..]
}

/// Whether the Range may be honoured given `If-Range` (RFC 9110 §13.1.5):
/// no If-Range, or a strong tag equal to ours, or a date equal to our
/// Last-Modified.
fn if_range_holds(head: &Head<'_>, etag: &ETag, file: &FileMeta) -> bool {
    let Some(value) = head.if_range.map(trim) else {
        return true;
    };
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return matches!(entity_tag(value), Some((opaque, false, rest))
            if etag.named_by(opaque) && rest.is_empty());
    }
    date::parse(value) == Some(date::to_http_seconds(file.mtime))
}

/// How a `Range` applies to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RangeSpec {
    /// Send the whole file (no usable range, or more than [`MAX_PARTS`]).
    Ignore,
    /// Send this span with 206.
    Span(ByteRange),
    /// Send these spans (apart, in the order asked, at most
    /// [`MAX_PARTS`]) as a `multipart/byteranges` 206.
    Parts(Vec<ByteRange>),
    /// 416.
    Unsatisfiable,
}

/// Interprets a `Range` value for a file of `size` bytes.
///
/// Ranges no byte satisfies are dropped from a list (416 if none is left,
/// as nginx answers); the rest are coalesced where they overlap or touch
/// (RFC 9110 §15.3.7.2 lets a server do so whatever their order): one span
/// left goes out with 206, several as the parts of a
/// `multipart/byteranges` 206 in the order the ranges were asked, a
/// coalesced span where its first range was (§15.3.7.2: parts SHOULD
/// follow that order); more than [`MAX_PARTS`] get the whole file with 200
/// (§14.2 lets a server ignore the field), as do more than `max`
/// satisfiable ranges before coalescing (nginx's `max_ranges` counts so).
/// A syntax error in any range ignores the field.
fn parse_range(value: &[u8], size: u64, max: u32) -> RangeSpec {
    // An empty file: no range names a byte of it (RFC 9110 would answer
    // 416), and nginx sends it whole (200, no body): a download resumed at
    // 0 then ends rather than failing.
    if size == 0 {
        return RangeSpec::Ignore;
    }
    let value = trim(value);
    let Some(unit) = value.get(..6) else {
        return RangeSpec::Ignore;
    };
    if !unit.eq_ignore_ascii_case(b"bytes=") {
        return RangeSpec::Ignore;
    }
    // (start, end exclusive) of each satisfiable range; the list is bounded
    // by the head's size limit.
    // (start, end exclusive, place in the list) of each satisfiable range.
    let mut spans: Vec<(u64, u64, usize)> = Vec::new();
    let mut any = false;
    for spec in value[6..].split(|&b| b == b',').map(trim) {
        if spec.is_empty() {
            continue; // an empty list element (RFC 9110 §5.6.1)
        }
        any = true;
        match one_range(spec, size) {
            None => return RangeSpec::Ignore,
            Some(None) => {}
            Some(Some(span)) => {
                if spans.len() >= max as usize {
                    return RangeSpec::Ignore;
                }
                spans.push((span.start, span.end(), spans.len()))
            }
        }
    }
    if !any {
        return RangeSpec::Ignore;
    }
    // Coalesced in offset order; each span then goes where its first
    // range was asked.
    spans.sort_unstable();
    let mut merged: Vec<(usize, ByteRange)> = Vec::new();
    for (s, e, at) in spans {
        match merged.last_mut() {
            Some((first, last)) if s <= last.end() => {
                last.len = last.len.max(e - last.start);
                *first = (*first).min(at);
            }
            _ => merged.push((
                at,
                ByteRange {
                    start: s,
                    len: e - s,
                },
            )),
        }
    }
    merged.sort_unstable_by_key(|&(at, _)| at);
    match merged.len() {
        0 => RangeSpec::Unsatisfiable,
        1 => RangeSpec::Span(merged[0].1),
        n if n > MAX_PARTS => RangeSpec::Ignore,
        _ => RangeSpec::Parts(merged.into_iter().map(|(_, span)| span).collect()),
    }
}

/// One `range-spec` for a file of `size` bytes: `None` if it is not one,
/// `Some(None)` if no byte satisfies it.
fn one_range(spec: &[u8], size: u64) -> Option<Option<ByteRange>> {
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    match (number(first), number(last)) {
        // bytes=-n on an empty file: satisfiable (RFC 9110 14.1.2), yet no
        // 206 can show it: the field is ignored (200).
        (None, Some(n)) if first.is_empty() && n > 0 && size == 0 => None,
        // bytes=-n: the last n bytes.
        (None, Some(n)) if first.is_empty() => Some((n > 0 && size > 0).then(|| {
            let len = n.min(size);
            ByteRange {
                start: size - len,
                len,
            }
        })),
        // bytes=a-
        (Some(a), None) if last.is_empty() => Some((a < size).then(|| ByteRange {
            start: a,
            len: size - a,
        })),
        // bytes=a-b
        (Some(a), Some(b)) if a <= b => Some((a < size).then(|| ByteRange {
            start: a,
            len: b.min(size - 1) - a + 1,
        })),
        _ => None,
    }
}

/// Digits as a number, saturating at `u64::MAX`; `None` if empty or not
/// all digits.
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{parse_head, Limits};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// "Now" for every response: later than the file's mtime.
    const DATE: &str = "Mon, 01 Jan 2024 00:00:00 GMT";
    // 2001-09-09 01:46:40 GMT, plus some nanoseconds.
    const MTIME_SECS: u64 = 1_000_000_000;
    const LM: &str = "Sun, 09 Sep 2001 01:46:40 GMT";

    /// nginx's `Location` for these targets of a directory without its
    /// slash (checked by a helper against nginx 1.22).
    #[test]
    fn a_redirect_keeps_the_query_and_not_the_fragment() {
        let q =
            |t: &'static str| redirect_query(t.as_bytes()).map(|q| std::str::from_utf8(q).unwrap());
        assert_eq!(q("/dir"), None);
        assert_eq!(q("/dir?a=1"), Some("?a=1"));
        assert_eq!(q("/dir?a=1#f?g"), Some("?a=1"));
        assert_eq!(q("/dir#x?y=1"), None);
        assert_eq!(q("/dir?"), None);
        assert_eq!(q("/dir?#f"), None);
        assert_eq!(redirect_query(b"/dir?q=\xe9"), Some(&b"?q=\xe9"[..]));
    }

    fn file(size: u64) -> FileMeta {
        FileMeta {
            size,
            mtime: UNIX_EPOCH + Duration::new(MTIME_SECS, 500),
            inode: 42,
            changed: 0,
        }
    }

    fn respond(fields: &str, size: u64) -> (Plan, String) {
        respond_method("GET", fields, size)
    }

    fn respond_method(method: &str, fields: &str, size: u64) -> (Plan, String) {
        let req = format!("{method} /f.txt HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
        let (head, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        let plan = plan_file(
            &head,
            &file(size),
            "text/plain; charset=utf-8",
            DATE,
            &mut out,
        );
        (plan, String::from_utf8(out).unwrap())
    }

    fn etag(size: u64) -> String {
        String::from_utf8(file(size).etag().as_bytes().to_vec()).unwrap()
    }

    /// The head's fields, split; panics if it does not end in a blank line.
    fn fields(text: &str) -> Vec<&str> {
        let head = &text[..text.find("\r\n\r\n").expect("head ends") + 2];
        head.split("\r\n").filter(|l| !l.is_empty()).collect()
    }

    #[test]
    fn full_get() {
        let (plan, text) = respond("", 100);
        assert_eq!(
            plan,
            Plan {
                status: Status::Ok,
                body: Some(ByteRange { start: 0, len: 100 }),
                parts: None,
                keep_alive: true,
                inline_body: 0,
            }
        );
        let want = format!(
            "HTTP/1.1 200 OK\r\nServer: duality\r\nDate: {DATE}\r\n\
             Content-Type: text/plain; charset=utf-8\r\nContent-Length: 100\r\n\
             Last-Modified: {LM}\r\nETag: {}\r\nAccept-Ranges: bytes\r\n\
             Connection: keep-alive\r\n\r\n",
            etag(100)
        );
        assert_eq!(text, want);
    }

    fn respond_encoded(
        method: &str,
        fields: &str,
        size: u64,
        encoding: Encoding,
    ) -> (Plan, String) {
        let req = format!("{method} /f.txt HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
        let (head, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        let plan = plan_encoded(&head, &file(size), "text/css", encoding, DATE, &mut out);
        (plan, String::from_utf8(out).unwrap())
    }

    #[test]
    fn gzip_variant_head() {
        let gz = Encoding::Gzip { len: 40 };
        let gz_tag =
            String::from_utf8(file(100).etag().gzip_variant().as_bytes().to_vec()).unwrap();
        assert!(gz_tag.ends_with("-gzip\""));
        let (plan, text) = respond_encoded("GET", "", 100, gz);
        assert_eq!(
            plan,
            Plan {
                status: Status::Ok,
                body: Some(ByteRange { start: 0, len: 40 }),
                parts: None,
                keep_alive: true,
                inline_body: 0,
            }
        );
        let want = format!(
            "HTTP/1.1 200 OK\r\nServer: duality\r\nDate: {DATE}\r\n\
             Content-Type: text/css\r\nContent-Encoding: gzip\r\nContent-Length: 40\r\n\
             Last-Modified: {LM}\r\nETag: {gz_tag}\r\nVary: Accept-Encoding\r\n\
             Connection: keep-alive\r\n\r\n"
        );
        assert_eq!(text, want);
        // HEAD: the same head, no body.
        let (plan, head_text) = respond_encoded("HEAD", "", 100, gz);
        assert_eq!((plan.status, plan.body), (Status::Ok, None));
        assert_eq!(head_text, want);
        // A Range is not applied to the variant.
        let (plan, _) = respond_encoded("GET", "Range: bytes=0-9\r\n", 100, gz);
        assert_eq!(plan.body, Some(ByteRange { start: 0, len: 40 }));
        assert_eq!(plan.status, Status::Ok);
    }

    #[test]
    fn gzip_variant_conditionals() {
        let gz = Encoding::Gzip { len: 40 };
        let gz_tag =
            String::from_utf8(file(100).etag().gzip_variant().as_bytes().to_vec()).unwrap();
        for (fields, want) in [
            (format!("If-None-Match: {gz_tag}\r\n"), 304),
            (format!("If-None-Match: W/{gz_tag}\r\n"), 304),
            (format!("If-None-Match: \"x\", {gz_tag}\r\n"), 304),
            (format!("If-None-Match: {}\r\n", etag(100)), 200),
            ("If-None-Match: *\r\n".to_owned(), 304),
            (format!("If-Modified-Since: {LM}\r\n"), 304),
        ] {
            let (plan, text) = respond_encoded("GET", &fields, 100, gz);
            assert_eq!(plan.status.code(), want, "{fields:?}");
            if want == 304 {
                assert!(text.contains(&format!("ETag: {gz_tag}\r\n")));
                assert!(text.contains("Vary: Accept-Encoding\r\n"));
                assert!(!text.contains("Content-Length"));
                assert!(!text.contains("Content-Encoding"));
            }
        }
        // And the identity representation does not match the variant's tag.
        let identity = Encoding::Identity { vary: true };
        let (plan, _) = respond_encoded(
            "GET",
            &format!("If-None-Match: {gz_tag}\r\n"),
            100,
            identity,
        );
        assert_eq!(plan.status, Status::Ok);
    }

    #[test]
    fn identity_with_vary_on_every_status() {
        let identity = Encoding::Identity { vary: true };
        for (fields, want) in [
            (String::new(), 200),
            ("Range: bytes=0-9\r\n".to_owned(), 206),
            ("Range: bytes=500-\r\n".to_owned(), 416),
            (format!("If-None-Match: {}\r\n", etag(100)), 304),
        ] {
            let (plan, text) = respond_encoded("GET", &fields, 100, identity);
            assert_eq!(plan.status.code(), want, "{fields:?}");
            assert_eq!(
                text.matches("Vary: Accept-Encoding\r\n").count(),
                1,
                "{text}"
            );
            assert!(!text.contains("Content-Encoding"));
        }
        // Without a variant, no Vary anywhere: plan_file is unchanged.
        let (_, text) = respond_encoded("GET", "", 100, Encoding::Identity { vary: false });
        assert!(!text.contains("Vary"));
    }

    #[test]
    fn head_has_length_but_no_body() {
        let (plan, text) = respond_method("HEAD", "", 100);
        assert_eq!(plan.status, Status::Ok);
        assert_eq!(plan.body, None);
        assert!(text.contains("Content-Length: 100\r\n"));
        assert!(text.ends_with("\r\n\r\n"));
        // HEAD ignores Range.
        let (plan, _) = respond_method("HEAD", "Range: bytes=0-1\r\n", 100);
        assert_eq!(plan.status, Status::Ok);
    }

    #[test]
    fn an_error_page_keeps_the_errors_status_and_no_validators() {
        let page = |method: &str, fields: &str| {
            let req = format!("{method} /gone HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
            let (head, _) = parse_head(req.as_bytes(), &Limits::default())
                .unwrap()
                .unwrap();
            let mut out = Vec::new();
            let plan = plan_error_page(&head, Status::NotFound, 120, "text/html", DATE, &mut out);
            (plan, String::from_utf8(out).unwrap())
        };
        // Conditionals and ranges are about the file asked for, not the page.
        let (plan, text) = page("GET", "Range: bytes=0-1\r\nIf-None-Match: *\r\n");
        assert_eq!(plan.status, Status::NotFound);
        assert_eq!(plan.body, Some(ByteRange { start: 0, len: 120 }));
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        assert!(text.contains("Content-Type: text/html\r\nContent-Length: 120\r\n"));
        for absent in ["ETag", "Last-Modified", "Accept-Ranges", "Content-Range"] {
            assert!(!text.contains(absent), "{absent}: {text}");
        }
        assert!(plan.keep_alive && text.ends_with("Connection: keep-alive\r\n\r\n"));
        let (plan, text) = page("HEAD", "Connection: close\r\n");
        assert_eq!((plan.body, plan.keep_alive), (None, false));
        assert!(text.contains("Content-Length: 120\r\n"));
    }

    #[test]
    fn empty_file_has_no_body_span() {
        let (plan, text) = respond("", 0);
        assert_eq!((plan.status, plan.body), (Status::Ok, None));
        assert!(text.contains("Content-Length: 0\r\n"));
    }

    #[test]
    fn connection_close_is_written() {
        let (plan, text) = respond("Connection: close\r\n", 1);
        assert!(!plan.keep_alive);
        assert!(text.ends_with("Connection: close\r\n\r\n"));
    }

    #[test]
    fn conditionals() {
        let tag = etag(10);
        let opaque = tag.trim_matches('"');
        let later = "Sun, 09 Sep 2001 01:46:41 GMT";
        let earlier = "Sun, 09 Sep 2001 01:46:39 GMT";
        for (fields, want) in [
            (format!("If-None-Match: {tag}\r\n"), 304),
            (format!("If-None-Match: W/{tag}\r\n"), 304),
            (format!("If-None-Match: \"a\", W/\"{opaque}\"\r\n"), 304),
            (format!("If-None-Match: \"a\",{tag}\r\n"), 304),
            ("If-None-Match: *\r\n".to_owned(), 304),
            ("If-None-Match: \"other\"\r\n".to_owned(), 200),
            ("If-None-Match: garbage\r\n".to_owned(), 200),
            (format!("If-None-Match: {opaque}\r\n"), 200),
            (format!("If-Modified-Since: {LM}\r\n"), 304),
            // Only the file's own date: nginx's `if_modified_since exact`.
            (format!("If-Modified-Since: {later}\r\n"), 200),
            (format!("If-Modified-Since: {earlier}\r\n"), 200),
            ("If-Modified-Since: not a date\r\n".to_owned(), 200),
            (format!("If-Modified-Since: {DATE}\r\n"), 200),
            (
                "If-Modified-Since: Mon, 01 Jan 2024 00:00:01 GMT\r\n".to_owned(),
                200,
            ),
            (
                "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n".to_owned(),
                200,
            ),
            // If-None-Match wins over If-Modified-Since, both ways.
            (
                format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {later}\r\n"),
                200,
            ),
            (
                format!("If-None-Match: {tag}\r\nIf-Modified-Since: {earlier}\r\n"),
                304,
            ),
        ] {
            let (plan, text) = respond(&fields, 10);
            assert_eq!(plan.status.code(), want, "{fields:?}");
            if want == 304 {
                assert_eq!(plan.body, None);
                assert!(!text.contains("Content-Length"));
                assert!(text.contains(&format!("ETag: {tag}\r\n")));
                assert!(text.contains(&format!("Last-Modified: {LM}\r\n")));
            }
        }
    }

    #[test]
    fn if_match_and_if_unmodified_since_come_first() {
        let tag = etag(10);
        let later = "Sun, 09 Sep 2001 01:46:41 GMT";
        let earlier = "Sun, 09 Sep 2001 01:46:39 GMT";
        for (fields, want) in [
            (format!("If-Match: {tag}\r\n"), 200),
            (format!("If-Match: \"a\", {tag}\r\n"), 200),
            ("If-Match: *\r\n".to_owned(), 200),
            // Strong comparison: a weak tag never matches.
            (format!("If-Match: W/{tag}\r\n"), 412),
            ("If-Match: \"other\"\r\n".to_owned(), 412),
            ("If-Match: garbage\r\n".to_owned(), 412),
            (format!("If-Unmodified-Since: {LM}\r\n"), 200),
            (format!("If-Unmodified-Since: {later}\r\n"), 200),
            (format!("If-Unmodified-Since: {earlier}\r\n"), 412),
            ("If-Unmodified-Since: not a date\r\n".to_owned(), 200),
            // If-Match wins over If-Unmodified-Since, both ways.
            (
                format!("If-Match: {tag}\r\nIf-Unmodified-Since: {earlier}\r\n"),
                200,
            ),
            (
                format!("If-Match: \"x\"\r\nIf-Unmodified-Since: {later}\r\n"),
                412,
            ),
            // Before If-None-Match and Range.
            (format!("If-Match: \"x\"\r\nIf-None-Match: {tag}\r\n"), 412),
            (
                format!("If-Unmodified-Since: {earlier}\r\nRange: bytes=0-1\r\n"),
                412,
            ),
            (format!("If-Match: {tag}\r\nRange: bytes=0-1\r\n"), 206),
        ] {
            let (plan, text) = respond(&fields, 10);
            assert_eq!(plan.status.code(), want, "{fields:?}");
            if want == 412 {
                assert_eq!(plan.body, None);
                assert!(plan.keep_alive);
                assert!(
                    text.starts_with("HTTP/1.1 412 Precondition Failed\r\n"),
                    "{text}"
                );
            }
        }
        // HEAD: the same head, no body.
        let (plan, text) = respond_method("HEAD", "If-Match: \"x\"\r\n", 10);
        assert_eq!(plan.status.code(), 412);
        assert!(text.ends_with("\r\n\r\n"), "{text}");
    }

    #[test]
    fn future_if_modified_since_is_ignored_against_the_clock_too() {
        // A `date` that does not parse falls back to the clock, so a date
        // far in the future still cannot produce 304.
        let req = "GET /f HTTP/1.1\r\nHost: h\r\nIf-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n\r\n";
        let (head, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        let plan = plan_file(&head, &file(10), "text/plain", "not a date", &mut out);
        assert_eq!(plan.status, Status::Ok);
        assert!(in_future(
            SystemTime::now() + Duration::from_secs(60),
            "garbage"
        ));
        assert!(!in_future(
            SystemTime::now() - Duration::from_secs(60),
            "garbage"
        ));
    }

    #[test]
    fn ranges() {
        let span = |start, len| Some(ByteRange { start, len });
        for (range, want, body, content_range) in [
            ("bytes=0-9", 206, span(0, 10), Some("bytes 0-9/100")),
            ("bytes=10-19", 206, span(10, 10), Some("bytes 10-19/100")),
            ("bytes=90-", 206, span(90, 10), Some("bytes 90-99/100")),
            ("bytes=-5", 206, span(95, 5), Some("bytes 95-99/100")),
            ("bytes=-500", 206, span(0, 100), Some("bytes 0-99/100")),
            ("bytes=50-5000", 206, span(50, 50), Some("bytes 50-99/100")),
            ("bytes=99-99", 206, span(99, 1), Some("bytes 99-99/100")),
            (
                "bytes=0-99999999999999999999999",
                206,
                span(0, 100),
                Some("bytes 0-99/100"),
            ),
            ("BYTES = 1-1", 200, span(0, 100), None),
            ("Bytes=1-1", 206, span(1, 1), Some("bytes 1-1/100")),
            (" bytes= 1 - 2 ", 206, span(1, 2), Some("bytes 1-2/100")),
            ("bytes=100-", 416, None, Some("bytes */100")),
            ("bytes=100-200", 416, None, Some("bytes */100")),
            ("bytes=-0", 416, None, Some("bytes */100")),
            (
                "bytes=99999999999999999999999-",
                416,
                None,
                Some("bytes */100"),
            ),
            ("bytes=5-1", 200, span(0, 100), None),
            // Lists: apart -> multipart (no single span, see below);
            // touching or overlapping -> one span; unsatisfiable ones
            // dropped; none left -> 416.
            ("bytes=0-1,5-6", 206, None, None),
            ("bytes=0-1,2-3", 206, span(0, 4), Some("bytes 0-3/100")),
            ("bytes=5-9, 0-6", 206, span(0, 10), Some("bytes 0-9/100")),
            ("bytes=0-1,0-1", 206, span(0, 2), Some("bytes 0-1/100")),
            ("bytes=-5,90-", 206, span(90, 10), Some("bytes 90-99/100")),
            ("bytes=1-2, 200-300", 206, span(1, 2), Some("bytes 1-2/100")),
            ("bytes=,1-2,", 206, span(1, 2), Some("bytes 1-2/100")),
            ("bytes=100-200,300-400", 416, None, Some("bytes */100")),
            ("bytes=1-2,x", 200, span(0, 100), None),
            ("bytes=,", 200, span(0, 100), None),
            ("items=0-1", 200, span(0, 100), None),
            ("bytes=", 200, span(0, 100), None),
            ("bytes=-", 200, span(0, 100), None),
            ("bytes=a-b", 200, span(0, 100), None),
            ("bytes=1", 200, span(0, 100), None),
            ("bytes=+1-2", 200, span(0, 100), None),
        ] {
            let (plan, text) = respond(&format!("Range: {range}\r\n"), 100);
            assert_eq!(plan.status.code(), want, "{range:?}");
            assert_eq!(plan.body, body, "{range:?}");
            let got = fields(&text)
                .into_iter()
                .find_map(|l| l.strip_prefix("Content-Range: "));
            assert_eq!(got, content_range, "{range:?}");
            if let Some(b) = body {
                assert!(text.contains(&format!("Content-Length: {}\r\n", b.len)));
            }
        }
    }

    #[test]
    fn ranges_apart_are_answered_in_parts() {
        let (plan, text) = respond("Range: bytes=90-, 10-12,0-1,11-14\r\n", 100);
        assert_eq!(plan.status, Status::PartialContent);
        assert_eq!(plan.body, None);
        let parts = plan.parts.as_deref().expect("a multipart body");
        let b = &parts.boundary;
        assert_eq!(b.len(), 16, "{b:?}");
        // Coalesced (10-12 with 11-14) and in the order asked.
        let spans: Vec<_> = parts.parts.iter().map(|(_, s)| (s.start, s.len)).collect();
        assert_eq!(spans, [(90, 10), (10, 5), (0, 2)]);
        let file_bytes: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
        let mut body = Vec::new();
        assert!(parts.write(&file_bytes, &mut body));
        let want = format!(
            "\r\n--{b}\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Range: bytes 90-99/100\r\n\r\nmnopqrstuv\
             \r\n--{b}\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Range: bytes 10-14/100\r\n\r\nklmno\
             \r\n--{b}\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Range: bytes 0-1/100\r\n\r\nab\
             \r\n--{b}--\r\n"
        );
        assert_eq!(String::from_utf8(body.clone()).unwrap(), want);
        assert_eq!(plan.body_bytes(), body.len() as u64);
        // A file shorter than the spans (it shrank): the body is not whole.
        assert!(!parts.write(&file_bytes[..95], &mut Vec::new()));
        let head = fields(&text);
        assert!(
            head.contains(&format!("Content-Type: multipart/byteranges; boundary={b}").as_str())
        );
        assert!(head.contains(&format!("Content-Length: {}", body.len()).as_str()));
        assert!(head.contains(&"Accept-Ranges: bytes"));
        assert!(
            !head.iter().any(|f| f.starts_with("Content-Range")),
            "{head:?}"
        );
        // Each answer has its own boundary.
        let (again, _) = respond("Range: bytes=0-1,5-6\r\n", 100);
        assert_ne!(again.parts.unwrap().boundary, *b);
        // HEAD and a failed If-Range: no ranges at all.
        let (plan, _) = respond_method("HEAD", "Range: bytes=0-1,5-6\r\n", 100);
        assert_eq!((plan.status, plan.parts), (Status::Ok, None));
        let (plan, _) = respond("Range: bytes=0-1,5-6\r\nIf-Range: \"x\"\r\n", 100);
        assert_eq!((plan.status, plan.parts), (Status::Ok, None));
        // More spans than MAX_PARTS: the whole file.
        let many: Vec<String> = (0..=MAX_PARTS).map(|i| format!("{0}-{0}", 2 * i)).collect();
        let (plan, _) = respond(&format!("Range: bytes={}\r\n", many.join(",")), 1000);
        assert_eq!((plan.status, plan.parts), (Status::Ok, None));
        let (plan, _) = respond(&format!("Range: bytes={}\r\n", many[1..].join(",")), 1000);
        assert_eq!(plan.parts.map(|p| p.parts.len()), Some(MAX_PARTS));
        // A body whose length would not fit a u64 (a size no file has):
        // the whole file, not a wrapped Content-Length.
        let (plan, _) = respond("Range: bytes=0-0,2-\r\n", u64::MAX);
        assert_eq!((plan.status, plan.parts), (Status::Ok, None));
    }

    /// An empty file is sent whole whatever its Range asks (nginx 1.22
    /// answers each of these 200); a longer file's unsatisfiable range is
    /// still 416.
    #[test]
    fn ranges_on_empty_file_are_ignored_as_nginx_does() {
        for r in ["bytes=0-0", "bytes=0-", "bytes=-0", "bytes=-1", "bytes=5-9"] {
            let (plan, text) = respond(&format!("Range: {r}\r\n"), 0);
            assert_eq!((plan.status, plan.parts), (Status::Ok, None), "{r}");
            assert!(text.contains("Content-Length: 0\r\n"), "{text}");
        }
        let (plan, text) = respond("Range: bytes=5-9\r\n", 5);
        assert_eq!(plan.status, Status::RangeNotSatisfiable);
        assert!(text.contains("Content-Range: bytes */5\r\n"));
    }

    #[test]
    fn max_ranges_counts_satisfiable_ranges_before_coalescing() {
        let span = |start, len| ByteRange { start, len };
        assert!(matches!(
            parse_range(b"bytes=0-1,5-6", 100, 2),
            RangeSpec::Parts(_)
        ));
        assert_eq!(parse_range(b"bytes=0-1,5-6", 100, 1), RangeSpec::Ignore);
        // Two ranges asked, though they make one span.
        assert_eq!(parse_range(b"bytes=0-5,3-9", 100, 1), RangeSpec::Ignore);
        assert_eq!(
            parse_range(b"bytes=0-5,3-9", 100, 2),
            RangeSpec::Span(span(0, 10))
        );
        // One no byte satisfies is not counted.
        assert_eq!(
            parse_range(b"bytes=0-5,500-", 100, 1),
            RangeSpec::Span(span(0, 6))
        );
        assert_eq!(parse_range(b"bytes=500-", 100, 1), RangeSpec::Unsatisfiable);
    }

    #[test]
    fn if_modified_since_rules() {
        let earlier = "Sun, 09 Sep 2001 01:46:39 GMT";
        let later = "Sun, 09 Sep 2001 01:46:41 GMT";
        let future = "Tue, 01 Jan 2030 00:00:00 GMT";
        let check = |rule: IfModifiedSince, fields: &str| {
            let req = format!("GET /f.txt HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
            let (head, _) = parse_head(req.as_bytes(), &Limits::default())
                .unwrap()
                .unwrap();
            not_modified_by(rule, &head, &file(10).etag(), &file(10), DATE)
        };
        let ims = |date: &str| format!("If-Modified-Since: {date}\r\n");
        for (date, exact, before) in [
            (LM, true, true),
            (later, false, true),
            (earlier, false, false),
            (future, false, false),
        ] {
            assert!(!check(IfModifiedSince::Off, &ims(date)), "{date}");
            assert_eq!(check(IfModifiedSince::Exact, &ims(date)), exact, "{date}");
            assert_eq!(check(IfModifiedSince::Before, &ims(date)), before, "{date}");
        }
        // A tag still validates with dates off.
        let inm = format!("If-None-Match: {}\r\n{}", etag(10), ims(earlier));
        assert!(check(IfModifiedSince::Off, &inm));
        assert_eq!("before".parse(), Ok(IfModifiedSince::Before));
        assert!("later".parse::<IfModifiedSince>().is_err());
    }

    #[test]
    fn if_range() {
        let tag = etag(100);
        for (if_range, want) in [
            (tag.clone(), 206),
            (format!("W/{tag}"), 200),
            ("\"other\"".to_owned(), 200),
            (LM.to_owned(), 206),
            ("Sun, 09 Sep 2001 01:46:41 GMT".to_owned(), 200),
            ("nonsense".to_owned(), 200),
        ] {
            let (plan, _) = respond(
                &format!("Range: bytes=0-0\r\nIf-Range: {if_range}\r\n"),
                100,
            );
            assert_eq!(plan.status.code(), want, "{if_range:?}");
        }
    }

    #[test]
    fn conditional_beats_range() {
        let (plan, _) = respond(
            &format!("Range: bytes=0-0\r\nIf-None-Match: {}\r\n", etag(100)),
            100,
        );
        assert_eq!(plan.status, Status::NotModified);
    }

    #[test]
    fn method_not_allowed() {
        let (plan, text) = respond_method("POST", "", 100);
        assert_eq!(plan.status, Status::MethodNotAllowed);
        assert_eq!(plan.body, None);
        assert!(plan.keep_alive);
        assert!(text.contains("Allow: GET, HEAD\r\n"));
    }

    /// Every error has a correct Content-Length and an HTML body (none for
    /// HEAD).
    #[test]
    fn error_bodies() {
        let get = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let (get, _) = parse_head(get.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let head = "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n";
        let (head, _) = parse_head(head.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        for status in [
            Status::BadRequest,
            Status::Forbidden,
            Status::NotFound,
            Status::MethodNotAllowed,
            Status::RequestTimeout,
            Status::ContentTooLarge,
            Status::UriTooLong,
            Status::HeaderFieldsTooLarge,
            Status::InternalServerError,
            Status::VersionNotSupported,
        ] {
            let mut out = Vec::new();
            let plan = write_error(HttpError::keep(status), Some(&get), DATE, &mut out);
            assert!(plan.keep_alive);
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with(&format!("HTTP/1.1 {}\r\n", status.text())));
            let (head_part, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(head_part.contains(&format!("Content-Length: {}\r\n", body.len())));
            assert!(body.contains(&format!("<h1>{}</h1>", status.text())));

            let mut out = Vec::new();
            write_error(HttpError::keep(status), Some(&head), DATE, &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(text.ends_with("\r\n\r\n"), "HEAD gets no body");
            assert!(text.contains(&format!("Content-Length: {}\r\n", body.len())));
        }
    }

    #[test]
    fn errors_without_a_request_close() {
        let mut out = Vec::new();
        let plan = write_error(HttpError::close(Status::BadRequest), None, DATE, &mut out);
        assert!(!plan.keep_alive);
        assert!(String::from_utf8(out.clone())
            .unwrap()
            .contains("Connection: close\r\n"));
        let get = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let (get, _) = parse_head(get.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let plan = write_error(
            HttpError::close(Status::NotFound),
            Some(&get),
            DATE,
            &mut out,
        );
        assert!(!plan.keep_alive);
    }

    #[test]
    fn redirect() {
        let req = "GET /dir HTTP/1.1\r\nHost: h\r\n\r\n";
        let (head, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        let plan = write_redirect(&head, "/my%20dir/", DATE, &mut out);
        assert_eq!(plan.status, Status::MovedPermanently);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 301 Moved Permanently\r\n"));
        assert!(text.contains("Location: /my%20dir/\r\n"));

        let req = "GET /dir?page=2&q=a%20b HTTP/1.1\r\nHost: h\r\n\r\n";
        let (head, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        write_redirect(&head, "/dir/", DATE, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Location: /dir/?page=2&q=a%20b\r\n"),
            "{text}"
        );
    }

    #[test]
    fn ancient_and_far_mtimes_do_not_panic() {
        let req = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let (head, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        for mtime in [
            UNIX_EPOCH - Duration::from_secs(1_000_000),
            UNIX_EPOCH + Duration::from_secs(400_000_000_000),
            SystemTime::now(),
        ] {
            let meta = FileMeta {
                size: 1,
                mtime,
                inode: 1,
                changed: 0,
            };
            let mut out = Vec::new();
            assert_eq!(
                plan_file(&head, &meta, "x/y", DATE, &mut out).status,
                Status::Ok
            );
        }
    }

    #[test]
    fn push_u64_digits() {
        for n in [0, 7, 10, 1234567890, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the Range, a 206 span lies inside the file and is not
            /// empty; parts are apart and at most MAX_PARTS.
            #[test]
            fn range_spans_stay_inside(value in "(bytes=)?([0-9 ]{0,4}-?[0-9 ]{0,4},){0,4}[0-9 ]{0,6}-?[0-9 ]{0,6}(,[0-9]-)?", size in 0u64..1000) {
                match parse_range(value.as_bytes(), size, u32::MAX) {
                    RangeSpec::Span(s) => {
                        prop_assert!(s.len > 0);
                        prop_assert!(s.end() <= size);
                    }
                    RangeSpec::Parts(spans) => {
                        prop_assert!(spans.len() >= 2 && spans.len() <= MAX_PARTS);
                        for s in &spans {
                            prop_assert!(s.len > 0 && s.end() <= size);
                        }
                        let mut sorted = spans.clone();
                        sorted.sort_unstable_by_key(|s| s.start);
                        for w in sorted.windows(2) {
                            prop_assert!(w[0].end() < w[1].start, "{:?}", spans);
                        }
                    }
                    RangeSpec::Unsatisfiable | RangeSpec::Ignore => {}
                }
            }

            #[test]
            fn range_never_panics(value in prop::collection::vec(any::<u8>(), 0..32), size in any::<u64>()) {
                let _ = parse_range(&value, size, u32::MAX);
            }
        }
    }
}
