//! [`LogFormat`]: the access log's line, as nginx's `log_format` makes it:
//! text with `$variable`s (or `${variable}`), compiled once at start,
//! each variable's value escaped as `escape=default|json|none` says.
//!
//! As nginx's: by default a value's bytes outside printable ASCII and its
//! `"` and `\` are written `\xHH`, and a value that does not exist (no
//! `Referer`, no query) is `-`; with `json` a value is escaped for a JSON
//! string (`\"`, `\\`, `\n`, `\u0001`; other bytes as they are) and one
//! that does not exist is empty, so `"$http_referer"` stays a string; with
//! `none` values go as they are. The text between variables is written as
//! given. A variable duality cannot fill is refused at start, naming it.

use std::io::Write as _;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::request::{Head, Version};

/// nginx's predefined `combined` format: the default.
pub const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" \
                            $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// How variables' values are escaped (nginx's `escape=` parameter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Escape {
    /// `\xHH` for bytes outside printable ASCII, `"` and `\`; a missing
    /// value is `-`.
    #[default]
    Default,
    /// For a JSON string: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`,
    /// `\u00HH` for other control bytes; a missing value is empty.
    Json,
    /// As they are; a missing value is empty.
    None,
}

impl std::str::FromStr for Escape {
    type Err = String;

    fn from_str(s: &str) -> Result<Escape, String> {
        match s {
            "default" => Ok(Escape::Default),
            "json" => Ok(Escape::Json),
            "none" => Ok(Escape::None),
            _ => Err(format!(
                "unknown log format escaping \"{s}\" (default, json or none)"
            )),
        }
    }
}

/// A compiled format: see the [module](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFormat {
    pieces: Vec<Piece>,
    escape: Escape,
}

impl Default for LogFormat {
    fn default() -> LogFormat {
        LogFormat::parse(COMBINED, Escape::Default).expect("combined compiles")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(Box<[u8]>),
    Var(Var),
}

/// The variables duality fills, by nginx's names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Var {
    RemoteAddr,
    RemotePort,
    RemoteUser,
    RealipRemoteAddr,
    TimeLocal,
    TimeIso8601,
    Msec,
    Request,
    RequestMethod,
    RequestUri,
    Uri,
    Args,
    IsArgs,
    ServerProtocol,
    Scheme,
    Host,
    Status,
    BodyBytesSent,
    RequestLength,
    RequestTime,
    Connection,
    ConnectionRequests,
    Pid,
    Hostname(Box<[u8]>),
    /// `$http_NAME`, `$content_type`, `$content_length`: a request field,
    /// by its name with `-` for `_`.
    Field(Box<str>),
    /// `$arg_NAME`: a query argument (raw, as sent).
    Arg(Box<[u8]>),
    /// `$cookie_NAME`.
    Cookie(Box<[u8]>),
    /// `$request_id`: 32 hex digits, new for each request.
    RequestId,
    /// `$secure_link`: `1`, `0` (expired) or missing.
    SecureLink,
    /// `$secure_link_expires`: the link's expiry, as it came.
    SecureLinkExpires,
    /// `$server_addr` (or, `port`, `$server_port`): where the connection
    /// came to.
    Server {
        port: bool,
    },
    /// `$realip_remote_port`: the connection's own port.
    RealipRemotePort,
    /// `$binary_remote_addr`: the client's address in 4 or 16 bytes.
    BinaryRemoteAddr,
    /// `$connection_time`: seconds since the connection was accepted.
    ConnectionTime,
    /// `$request_completion`: `OK` once the whole answer went out.
    RequestCompletion,
    /// `$pipe`: `p` for a request that came behind another, else `.`.
    Pipe,
    /// `$bytes_sent`: the answer's head and body bytes.
    BytesSent,
    /// `$sent_http_NAME`: a field of the answer's head, by its name with
    /// `-` for `_`.
    SentField(Box<str>),
    /// `$gzip_ratio`: how many times smaller the answer's body was made.
    GzipRatio,
    /// `$document_root`: the directory serving the path, as given.
    DocumentRoot,
    /// `$realpath_root`: the same, canonical.
    RealpathRoot,
    /// `$request_filename`: the file the path names under it.
    RequestFilename,
    /// `$limit_rate`: `--limit-rate`'s bytes a second (0: none).
    LimitRate,
    /// `$limit_req_status`, `$limit_conn_status`: what the limit did.
    LimitStatus {
        conn: bool,
    },
    /// `$invalid_referer`: `1` for a Referer `--valid-referers` refuses.
    InvalidReferer,
    /// `$proxy_protocol_addr` (the source, else the destination:
    /// `server`) and `_port`, from the connection's PROXY header.
    Proxy {
        server: bool,
        port: bool,
    },
    /// nginx's variables of what a static server over plain HTTP/1.x has
    /// none of (`$upstream_*`, `$ssl_*`): missing, as
    /// nginx writes them there, so a format written for nginx starts.
    Absent,
    /// `$http2`: empty (not HTTP/2).
    Empty,
}

/// The variables [`LogFormat::parse`] knows, for its error message.
const KNOWN: &str = "$remote_addr $remote_port $remote_user $realip_remote_addr \
    $time_local $time_iso8601 $msec $request $request_method $request_uri $uri \
    $document_uri $args $query_string $is_args $server_protocol $scheme $host \
    $status $body_bytes_sent $request_length $request_time $connection \
    $connection_requests $pid $hostname $content_type $content_length \
    $http_NAME $arg_NAME $cookie_NAME $request_id $proxy_protocol_addr \
    $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port \
    $secure_link $secure_link_expires $server_addr $server_port \
    $realip_remote_port $binary_remote_addr $connection_time $request_completion \
    $pipe $bytes_sent $sent_http_NAME $gzip_ratio $document_root $realpath_root \
    $request_filename $limit_rate $limit_req_status $limit_conn_status \
    $invalid_referer; \
    missing: $upstream_*, $ssl_*, $sent_trailer_*, $request_body; \
    empty: $http2, $https, $server_name";

impl Var {
    fn named(name: &str) -> Option<Var> {
        let v = match name {
            "remote_addr" => Var::RemoteAddr,
            "remote_port" => Var::RemotePort,
            "remote_user" => Var::RemoteUser,
            "realip_remote_addr" => Var::RealipRemoteAddr,
            "realip_remote_port" => Var::RealipRemotePort,
            "binary_remote_addr" => Var::BinaryRemoteAddr,
            "server_addr" | "server_port" => {
                LOCAL_WANTED.store(true, Relaxed);
                Var::Server {
                    port: name == "server_port",
                }
            }
            "connection_time" => Var::ConnectionTime,
            "request_completion" => Var::RequestCompletion,
            "pipe" => Var::Pipe,
            "bytes_sent" => {
                HEAD_WANTED.store(true, Relaxed);
                Var::BytesSent
            }
            "gzip_ratio" => {
                HEAD_WANTED.store(true, Relaxed);
                Var::GzipRatio
            }
            "document_root" => {
                URI_WANTED.store(true, Relaxed);
                Var::DocumentRoot
            }
            "realpath_root" => {
                URI_WANTED.store(true, Relaxed);
                Var::RealpathRoot
            }
            "request_filename" => {
                URI_WANTED.store(true, Relaxed);
                Var::RequestFilename
            }
            "limit_rate" => Var::LimitRate,
            "limit_req_status" => Var::LimitStatus { conn: false },
            "limit_conn_status" => Var::LimitStatus { conn: true },
            "invalid_referer" => Var::InvalidReferer,
            // No `server_name` or TLS here: empty, as nginx's without them.
            "server_name" | "https" => Var::Empty,
            // A static server drops request bodies unread.
            "request_body" => Var::Absent,
            "time_local" => Var::TimeLocal,
            "time_iso8601" => Var::TimeIso8601,
            "msec" => Var::Msec,
            "request" => Var::Request,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "uri" | "document_uri" => {
                URI_WANTED.store(true, Relaxed);
                Var::Uri
            }
            "args" | "query_string" => Var::Args,
            "is_args" => Var::IsArgs,
            "server_protocol" => Var::ServerProtocol,
            "scheme" => Var::Scheme,
            "host" => Var::Host,
            "status" => Var::Status,
            "body_bytes_sent" => Var::BodyBytesSent,
            "request_length" => Var::RequestLength,
            "request_time" => Var::RequestTime,
            "connection" => Var::Connection,
            "connection_requests" => Var::ConnectionRequests,
            "pid" => Var::Pid,
            "hostname" => Var::Hostname(hostname().into_bytes().into()),
            "content_type" => Var::Field("content-type".into()),
            "content_length" => Var::Field("content-length".into()),
            "request_id" => Var::RequestId,
            "secure_link" => Var::SecureLink,
            "secure_link_expires" => Var::SecureLinkExpires,
            "http2" => Var::Empty,
            "upstream_addr"
            | "upstream_bytes_received"
            | "upstream_bytes_sent"
            | "upstream_cache_status"
            | "upstream_connect_time"
            | "upstream_header_time"
            | "upstream_queue_time"
            | "upstream_response_length"
            | "upstream_response_time"
            | "upstream_status" => Var::Absent,
            "proxy_protocol_addr" => Var::Proxy {
                server: false,
                port: false,
            },
            "proxy_protocol_port" => Var::Proxy {
                server: false,
                port: true,
            },
            "proxy_protocol_server_addr" => Var::Proxy {
                server: true,
                port: false,
            },
            "proxy_protocol_server_port" => Var::Proxy {
                server: true,
                port: true,
            },
            _ if [
                "upstream_http_",
                "upstream_cookie_",
                "upstream_trailer_",
                "ssl_",
                "sent_trailer_",
            ]
            .iter()
            .any(|p| name.len() > p.len() && name.starts_with(p)) =>
            {
                Var::Absent
            }
            _ => {
                let sub = |prefix: &str| name.strip_prefix(prefix).filter(|s| !s.is_empty());
                if let Some(n) = sub("http_") {
                    Var::Field(n.replace('_', "-").into())
                } else if let Some(n) = sub("arg_") {
                    Var::Arg(n.as_bytes().into())
                } else if let Some(n) = sub("cookie_") {
                    Var::Cookie(n.as_bytes().into())
                } else if let Some(n) = sub("sent_http_") {
                    HEAD_WANTED.store(true, Relaxed);
                    Var::SentField(n.replace('_', "-").into())
                } else {
                    return None;
                }
            }
        };
        Some(v)
    }
}

/// A `$request_id`: 128 random bits in hex, as nginx's (two hashes of
/// nothing under fresh keys: std's keys are random per thread and move
/// on with each `RandomState`).
fn request_id() -> [u8; 32] {
    use std::hash::BuildHasher;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = [0u8; 32];
    for half in 0..2 {
        let bits = std::collections::hash_map::RandomState::new().hash_one(half);
        for (i, d) in id[half * 16..half * 16 + 16].iter_mut().enumerate() {
            *d = HEX[((bits >> (60 - 4 * i)) & 15) as usize];
        }
    }
    id
}

/// This machine's name (nginx's `$hostname`), read once.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// What one access log line is made from.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The request's head; `None` for a request refused before one parsed.
    pub head: Option<&'a Head<'a>>,
    /// A refused request's line, as far as it came (for `$request`).
    pub line: Option<&'a [u8]>,
    /// The connection's address (`unix:` for a Unix socket).
    pub peer: &'a str,
    /// The connection's port (none for a Unix socket).
    pub port: Option<u16>,
    /// The client's address a trusted proxy named (`--real-ip-from`).
    pub real: Option<IpAddr>,
    /// Its port, where the proxy named one (a PROXY protocol header).
    pub real_port: Option<u16>,
    /// The status answered.
    pub status: u16,
    /// The body's bytes sent.
    pub body_bytes: u64,
    /// From the request's first byte read (or its head, where all of it
    /// came in one read) to the line.
    pub request_time: Duration,
    /// The connection's serial number, from 1.
    pub connection: u64,
    /// Requests made on the connection, this one included.
    pub connection_requests: u64,
    /// The request's `$request_id`, made at its first use and kept, so
    /// that an added field and the log line show the same (`None`: a new
    /// one for each line).
    pub request_id: Option<&'a std::sync::OnceLock<[u8; 32]>>,
    /// The connection's PROXY protocol header (`--proxy-protocol`).
    pub proxy: Option<&'a crate::proxy_protocol::ProxyHeader>,
    /// The request's `--secure-link`, as far as it was checked.
    pub secure_link: Option<&'a crate::secure_link::Seen>,
    /// Where the connection came to (TCP; where a format wants it, see
    /// [`local_wanted`]).
    pub local: Option<std::net::SocketAddr>,
    /// Since the connection was accepted.
    pub connection_time: Duration,
    /// The whole answer went out.
    pub completed: bool,
    /// The request came behind another, in the same read.
    pub pipelined: bool,
    /// The answer's head as written (where a format wants it, see
    /// [`head_wanted`]).
    pub sent_head: Option<&'a [u8]>,
    /// A body compressed here: its bytes before and after (deflate's
    /// output, without gzip's header and trailer).
    pub gzip: Option<(u64, u64)>,
    /// The root and `--alias` directories (`$document_root`, …).
    pub roots: Option<&'a crate::path::Roots>,
    /// `--limit-rate`.
    pub limit_rate: u64,
    /// What `--limit-req` and `--limit-conn` did to the request (`PASSED`,
    /// `DELAYED`, `REJECTED`), where they ran.
    pub limited: [Option<&'static str>; 2],
    /// Whether `--valid-referers` refused the request's Referer, where it
    /// was checked.
    pub invalid_referer: Option<bool>,
    /// The address served where it is not the request's path: an index
    /// file (`/dir/index.html`), a `--try-files` name, an error page
    /// (`$uri` follows nginx's internal redirects).
    pub uri: Option<&'a str>,
}

/// Whether a text parsed so far names `$server_addr` or `$server_port`:
/// connections then look up their local address.
static LOCAL_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a text parsed so far names `$bytes_sent`, `$sent_http_…` or
/// `$gzip_ratio`: answers then keep a copy of their head (and what gzip
/// made of their body) for the log.
static HEAD_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a text parsed so far names `$uri` (or `$document_uri`,
/// `$document_root`, `$realpath_root`, `$request_filename`): answers then
/// keep the address they served from where it is not the request's (an
/// index file, a `--try-files` name, an error page).
static URI_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a text parsed so far wants the address served.
pub fn uri_wanted() -> bool {
    URI_WANTED.load(Relaxed)
}

/// Whether a text parsed so far wants the connection's local address.
pub fn local_wanted() -> bool {
    LOCAL_WANTED.load(Relaxed)
}

/// Whether a text parsed so far wants the answer's head.
pub fn head_wanted() -> bool {
    HEAD_WANTED.load(Relaxed)
}

/// A variable's value.
enum Value<'a> {
    /// Does not exist: `-` by default, empty otherwise.
    Missing,
    Bytes(&'a [u8]),
    /// Several (a field sent twice), joined by `sep`.
    Joined(Vec<&'a [u8]>, &'static [u8]),
    /// Written already (numbers, times: nothing to escape).
    Done,
}

impl LogFormat {
    /// Compiles `format` as nginx compiles a `log_format`'s text.
    pub fn parse(format: &str, escape: Escape) -> Result<LogFormat, String> {
        let mut pieces = Vec::new();
        let b = format.as_bytes();
        let mut i = 0;
        let name_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        while i < b.len() {
            if b[i] != b'$' {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'$')
                    .map_or(b.len(), |n| i + n);
                pieces.push(Piece::Text(b[i..end].into()));
                i = end;
                continue;
            }
            i += 1;
            let bracket = b.get(i) == Some(&b'{');
            if bracket {
                i += 1;
            }
            let start = i;
            while i < b.len() && name_char(b[i]) {
                i += 1;
            }
            let name = &format[start..i];
            if bracket {
                if b.get(i) != Some(&b'}') {
                    return Err(format!(
                        "the closing bracket in \"{name}\" variable is missing"
                    ));
                }
                i += 1;
            }
            if name.is_empty() {
                return Err(format!(
                    "a \"$\" without a variable name at byte {start} (a variable is $name or ${{name}})"
                ));
            }
            let var = Var::named(name)
                .ok_or_else(|| format!("unknown \"{name}\" variable (duality knows {KNOWN})"))?;
            pieces.push(Piece::Var(var));
        }
        Ok(LogFormat { pieces, escape })
    }

    /// Appends `e`'s line to `line`, with its line end.
    pub fn write(&self, e: &Entry<'_>, line: &mut Vec<u8>) {
        self.expand(e, line);
        line.push(b'\n');
    }

    /// Appends the text with `e`'s values, without a line end (the text
    /// or address of `--return`).
    pub fn expand(&self, e: &Entry<'_>, out: &mut Vec<u8>) {
        // One clock reading for every time of a line, and one id,
        // wherever they appear.
        let (mut now, mut id) = (None, None);
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.extend_from_slice(t),
                Piece::Var(v) => {
                    let value = self.value(v, e, (&mut now, &mut id), out);
                    self.put(value, out);
                }
            }
        }
    }

    fn value<'a>(
        &self,
        v: &'a Var,
        e: &Entry<'a>,
        (now, id): (&mut Option<SystemTime>, &mut Option<[u8; 32]>),
        line: &mut Vec<u8>,
    ) -> Value<'a> {
        let head = e.head;
        let mut time = || *now.get_or_insert_with(SystemTime::now);
        let mut text = |s: std::fmt::Arguments<'_>| {
            let _ = line.write_fmt(s);
            Value::Done
        };
        match v {
            Var::RemoteAddr => match e.real {
                Some(ip) => text(format_args!("{ip}")),
                None => Value::Bytes(e.peer.as_bytes()),
            },
            Var::RealipRemoteAddr => Value::Bytes(e.peer.as_bytes()),
            Var::RemotePort => match (e.real, e.real_port, e.port) {
                (None, _, Some(p)) | (Some(_), Some(p), _) => text(format_args!("{p}")),
                // nginx's realip takes the port the proxy named, if any.
                _ => Value::Bytes(b""),
            },
            Var::RemoteUser => Value::Missing,
            Var::TimeLocal => {
                line.extend_from_slice(&crate::date::format_clf(time()));
                Value::Done
            }
            Var::TimeIso8601 => {
                line.extend_from_slice(&crate::date::format_iso8601(time()));
                Value::Done
            }
            Var::Msec => {
                let d = time().duration_since(UNIX_EPOCH).unwrap_or_default();
                text(format_args!("{}.{:03}", d.as_secs(), d.subsec_millis()))
            }
            Var::Request => match (head, e.line) {
                (Some(h), _) => {
                    let version: &'static [u8] = match h.version {
                        Version::Http10 => b"HTTP/1.0",
                        Version::Http11 => b"HTTP/1.1",
                    };
                    let parts = vec![h.method_name.as_bytes(), h.target, version];
                    Value::Joined(parts, b" ")
                }
                (None, Some(l)) => Value::Bytes(l),
                (None, None) => Value::Missing,
            },
            // A refused request's method and protocol are read from its
            // line, as nginx has them from its parse of the line.
            Var::RequestMethod => match (head, e.line) {
                (Some(h), _) => Value::Bytes(h.method_name.as_bytes()),
                (None, Some(l)) => l
                    .split(|&b| b == b' ')
                    .next()
                    .map_or(Value::Missing, Value::Bytes),
                (None, None) => Value::Missing,
            },
            Var::RequestUri => head.map_or(Value::Missing, |h| Value::Bytes(origin_form(h.target))),
            Var::Uri => match (head, e.line) {
                (Some(h), _) => Value::Bytes(e.uri.unwrap_or(&h.path).as_bytes()),
                (None, Some(_)) => Value::Bytes(b""),
                (None, None) => Value::Missing,
            },
            Var::Args => match head.and_then(query) {
                Some(q) if !q.is_empty() => Value::Bytes(q),
                _ => Value::Missing,
            },
            Var::IsArgs => match head.and_then(query) {
                Some(q) if !q.is_empty() => Value::Bytes(b"?"),
                _ => Value::Bytes(b""),
            },
            Var::ServerProtocol => match (head.map(|h| h.version), e.line) {
                (Some(Version::Http10), _) => Value::Bytes(b"HTTP/1.0"),
                (Some(Version::Http11), _) => Value::Bytes(b"HTTP/1.1"),
                (None, Some(l)) => match l.rsplit(|&b| b == b' ').next() {
                    Some(v) if v.starts_with(b"HTTP/") && v.len() < l.len() => Value::Bytes(v),
                    _ => Value::Missing,
                },
                (None, None) => Value::Missing,
            },
            Var::Scheme => Value::Bytes(b"http"),
            Var::Host => {
                // As nginx's `$host`: the target's authority, else `Host`,
                // without its port and final dot, in lower case; else the
                // server's name, which duality has none of.
                let from_target = |h: &Head<'a>| absolute_form(h.target).map(|(a, _)| a);
                let host = head.and_then(|h| from_target(h).or(h.host));
                let name = host.map_or(&b""[..], host_name);
                line.extend(name.iter().map(u8::to_ascii_lowercase));
                Value::Done
            }
            Var::Status => text(format_args!("{:03}", e.status)),
            Var::BodyBytesSent => text(format_args!("{}", e.body_bytes)),
            // The head's bytes (nginx does not count a body it drops);
            // of a refused request, its line's.
            Var::RequestLength => {
                let n = match (head, e.line) {
                    (Some(h), _) => h.raw.len(),
                    (None, l) => l.map_or(0, |l| l.len() + 2),
                };
                text(format_args!("{n}"))
            }
            Var::RequestTime => {
                let ms = e.request_time.as_millis();
                text(format_args!("{}.{:03}", ms / 1000, ms % 1000))
            }
            Var::Connection => text(format_args!("{}", e.connection)),
            Var::ConnectionRequests => text(format_args!("{}", e.connection_requests)),
            Var::Pid => text(format_args!("{}", std::process::id())),
            Var::Hostname(name) => Value::Bytes(name),
            // The two of `combined`, as the head parsed them.
            Var::Field(name) if &**name == "referer" => head
                .and_then(|h| h.referer)
                .map_or(Value::Missing, Value::Bytes),
            Var::Field(name) if &**name == "user-agent" => head
                .and_then(|h| h.user_agent)
                .map_or(Value::Missing, Value::Bytes),
            Var::Field(name) => match head {
                Some(h) => {
                    let values: Vec<&[u8]> = h.field_values(name).collect();
                    // As nginx (1.23 on): a field sent twice is one value,
                    // cookies joined by `; `, others by `, `.
                    let sep: &'static [u8] = match name.eq_ignore_ascii_case("cookie") {
                        true => b"; ",
                        false => b", ",
                    };
                    match values.len() {
                        0 => Value::Missing,
                        1 => Value::Bytes(values[0]),
                        _ => Value::Joined(values, sep),
                    }
                }
                None => Value::Missing,
            },
            Var::Arg(name) => match head.and_then(query).and_then(|q| argument(q, name)) {
                Some(a) => Value::Bytes(a),
                None => Value::Missing,
            },
            Var::Cookie(name) => match head.and_then(|h| cookie(h, name)) {
                Some(c) => Value::Bytes(c),
                None => Value::Missing,
            },
            // Missing without a PROXY header, as nginx's.
            Var::Proxy { server, port } => {
                let side = e.proxy.and_then(|h| match server {
                    true => h.destination,
                    false => h.source,
                });
                match (side, port) {
                    (None, _) => Value::Missing,
                    (Some(a), false) => text(format_args!("{}", a.ip())),
                    (Some(a), true) => text(format_args!("{}", a.port())),
                }
            }
            Var::RequestId => {
                let made = match e.request_id {
                    Some(kept) => kept.get_or_init(request_id),
                    None => id.get_or_insert_with(request_id),
                };
                line.extend_from_slice(&made[..]);
                Value::Done
            }
            Var::SecureLink => {
                use crate::secure_link::Verdict;
                match e.secure_link.and_then(|s| s.verdict) {
                    Some(Verdict::Valid) => Value::Bytes(b"1"),
                    Some(Verdict::Expired) => Value::Bytes(b"0"),
                    _ => Value::Missing,
                }
            }
            Var::Server { port } => match (e.local, port) {
                (Some(a), false) => text(format_args!("{}", a.ip())),
                (Some(a), true) => text(format_args!("{}", a.port())),
                // A Unix socket: as nginx names one.
                (None, false) if e.peer == "unix:" => Value::Bytes(b"unix:"),
                (None, _) => Value::Bytes(b""),
            },
            Var::RealipRemotePort => match e.port {
                Some(p) => text(format_args!("{p}")),
                None => Value::Bytes(b""),
            },
            Var::BinaryRemoteAddr => {
                let ip = e.real.or_else(|| e.peer.parse().ok());
                // Escaped as any value (its bytes are mostly not text).
                match ip {
                    Some(IpAddr::V4(a)) => escaped(self.escape, &a.octets(), line),
                    Some(IpAddr::V6(a)) => escaped(self.escape, &a.octets(), line),
                    None => {}
                }
                Value::Done
            }
            Var::ConnectionTime => {
                let ms = e.connection_time.as_millis();
                text(format_args!("{}.{:03}", ms / 1000, ms % 1000))
            }
            Var::RequestCompletion => Value::Bytes(if e.completed { b"OK" } else { b"" }),
            Var::Pipe => Value::Bytes(if e.pipelined { b"p" } else { b"." }),
            Var::BytesSent => {
                let head = e.sent_head.map_or(0, |h| h.len() as u64);
                text(format_args!("{}", head + e.body_bytes))
            }
            Var::DocumentRoot | Var::RequestFilename | Var::RealpathRoot => {
                let (Some(roots), Some(h)) = (e.roots, head) else {
                    return Value::Missing;
                };
                // Of the address served, as nginx's after an internal redirect.
                let served = e.uri.unwrap_or(&h.path);
                let (root, under) = roots.document_root(served);
                let written = match v {
                    Var::DocumentRoot => root.display().to_string(),
                    Var::RealpathRoot => match roots.realpath_root(served) {
                        Some(real) => real.display().to_string(),
                        None => return Value::Missing,
                    },
                    _ => format!("{}{under}", root.display()),
                };
                escaped(self.escape, written.as_bytes(), line);
                Value::Done
            }
            Var::LimitRate => text(format_args!("{}", e.limit_rate)),
            Var::LimitStatus { conn } => match e.limited[usize::from(*conn)] {
                Some(s) => Value::Bytes(s.as_bytes()),
                None => Value::Missing,
            },
            Var::InvalidReferer => match e.invalid_referer {
                Some(true) => Value::Bytes(b"1"),
                _ => Value::Bytes(b""),
            },
            Var::GzipRatio => match e.gzip {
                Some((before, after)) if before > 0 && after > 0 => {
                    let (whole, hundredths) = gzip_ratio(before, after);
                    text(format_args!("{whole}.{hundredths:02}"))
                }
                _ => Value::Missing,
            },
            Var::SentField(name) => match e.sent_head.and_then(|h| sent_field(h, name)) {
                Some(v) => Value::Bytes(v),
                None => Value::Missing,
            },
            Var::SecureLinkExpires => match e.secure_link.and_then(|s| s.expires.as_deref()) {
                Some(x) => Value::Bytes(x),
                None => Value::Missing,
            },
            Var::Absent => Value::Missing,
            Var::Empty => Value::Bytes(b""),
        }
    }

    fn put(&self, value: Value<'_>, line: &mut Vec<u8>) {
        match value {
            Value::Done => {}
            Value::Missing => {
                if self.escape == Escape::Default {
                    line.push(b'-');
                }
            }
            Value::Bytes(b) => escaped(self.escape, b, line),
            Value::Joined(parts, sep) => {
                for (i, p) in parts.into_iter().enumerate() {
                    if i > 0 {
                        line.extend_from_slice(sep);
                    }
                    escaped(self.escape, p, line);
                }
            }
        }
    }
}

/// Appends `bytes` escaped as nginx's `ngx_escape_json` escapes them
/// (its `escape=json`, and its `autoindex_format json`).
pub(crate) fn escape_json(bytes: &[u8], out: &mut Vec<u8>) {
    escaped(Escape::Json, bytes, out)
}

/// Appends `bytes` escaped as `escape` says.
fn escaped(escape: Escape, bytes: &[u8], line: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    match escape {
        Escape::None => line.extend_from_slice(bytes),
        // nginx's log escaping: a client cannot forge a line or a field.
        Escape::Default => {
            for &b in bytes {
                if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
                    line.push(b);
                } else {
                    let hex = [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]];
                    line.extend_from_slice(&[b'\\', b'x', hex[0], hex[1]]);
                }
            }
        }
        // nginx's `ngx_escape_json`: bytes from 0x80 go as they are.
        Escape::Json => {
            for &b in bytes {
                match b {
                    b'"' | b'\\' => line.extend_from_slice(&[b'\\', b]),
                    b'\n' => line.extend_from_slice(b"\\n"),
                    b'\r' => line.extend_from_slice(b"\\r"),
                    b'\t' => line.extend_from_slice(b"\\t"),
                    0x08 => line.extend_from_slice(b"\\b"),
                    0x0c => line.extend_from_slice(b"\\f"),
                    0..=0x1f => {
                        let hex = [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]];
                        line.extend_from_slice(&[b'\\', b'u', b'0', b'0', hex[0], hex[1]]);
                    }
                    _ => line.push(b),
                }
            }
        }
    }
}

/// `before / after` with two decimals, rounded half up at the third, as
/// nginx's `$gzip_ratio` (2.125 is 2.13).
fn gzip_ratio(before: u64, after: u64) -> (u64, u64) {
    let (mut whole, mut hundredths) = (before / after, before * 100 / after % 100);
    if before * 1000 / after % 10 > 4 {
        hundredths += 1;
        if hundredths > 99 {
            whole += 1;
            hundredths = 0;
        }
    }
    (whole, hundredths)
}

/// The value of the first field `name` (lower case) of an answer's
/// `head`, trimmed.
fn sent_field<'a>(head: &'a [u8], name: &str) -> Option<&'a [u8]> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name.as_bytes())
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// The value of the argument `name` of `head`'s query (nginx's `$arg_`).
pub(crate) fn argument_of<'a>(head: &'a Head<'a>, name: &[u8]) -> Option<&'a [u8]> {
    argument(query(head)?, name)
}

/// The query of `head`'s target, after its `?` (`None` without one).
pub(crate) fn query_of<'a>(head: &Head<'a>) -> Option<&'a [u8]> {
    let t = head.target;
    t.iter().position(|&b| b == b'?').map(|i| &t[i + 1..])
}

/// The query of `head`'s target, after its `?` (`None` without one), or
/// the one a `--rewrite` gave it.
fn query<'a>(head: &'a Head<'a>) -> Option<&'a [u8]> {
    if let Some(q) = &head.rewritten_query {
        return Some(q);
    }
    query_of(head)
}

/// The value of the argument `name` (any case, as nginx's `$arg_`) in a
/// query: after its `=`, up to the next `&` (a name without `=` is not an
/// argument).
fn argument<'a>(query: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    query.split(|&b| b == b'&').find_map(|pair| {
        let i = pair.iter().position(|&b| b == b'=')?;
        pair[..i].eq_ignore_ascii_case(name).then(|| &pair[i + 1..])
    })
}

/// An absolute-form target's path and query (nginx's `$request_uri`);
/// other targets as they are.
fn origin_form(target: &[u8]) -> &[u8] {
    match absolute_form(target) {
        Some((_, b"")) => b"/",
        Some((_, rest)) => rest,
        None => target,
    }
}

/// The value of the cookie `name` (any case, as nginx's `$cookie_`) in
/// the request's `Cookie` fields.
fn cookie<'a>(head: &Head<'a>, name: &[u8]) -> Option<&'a [u8]> {
    head.field_values("cookie").find_map(|line| {
        line.split(|&b| b == b';').find_map(|pair| {
            let pair = trim(pair);
            let i = pair.iter().position(|&b| b == b'=')?;
            pair[..i]
                .eq_ignore_ascii_case(name)
                .then(|| trim(&pair[i + 1..]))
        })
    })
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|&c| c != b' ').unwrap_or(b.len());
    let end = b.iter().rposition(|&c| c != b' ').map_or(start, |i| i + 1);
    &b[start..end]
}

/// The authority of an absolute-form target (`http://host:port/…`), and
/// what follows it.
fn absolute_form(target: &[u8]) -> Option<(&[u8], &[u8])> {
    let scheme_end = target.windows(3).position(|w| w == b"://")?;
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case(b"http") && !scheme.eq_ignore_ascii_case(b"https") {
        return None;
    }
    let rest = &target[scheme_end + 3..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    Some(rest.split_at(end))
}

/// A host and port's host, without a final dot (`[::1]` keeps its
/// brackets).
/// The request's host as nginx's `$host` has it (the target's authority,
/// else `Host`, without port or final dot, lower-cased); empty without one.
pub(crate) fn request_host(head: &Head<'_>) -> Vec<u8> {
    let host = absolute_form(head.target).map(|(a, _)| a).or(head.host);
    host.map_or(&b""[..], host_name)
        .iter()
        .map(u8::to_ascii_lowercase)
        .collect()
}

fn host_name(authority: &[u8]) -> &[u8] {
    let host = match authority.strip_prefix(b"[") {
        Some(_) => {
            let end = authority
                .iter()
                .position(|&b| b == b']')
                .map_or(authority.len(), |i| i + 1);
            &authority[..end]
        }
        None => {
            let end = authority
                .iter()
                .position(|&b| b == b':')
                .unwrap_or(authority.len());
            &authority[..end]
        }
    };
    host.strip_suffix(b".").unwrap_or(host)
}

/// An entry for tests: a request from 127.0.0.1:4242, answered 200 with
/// 13 body bytes after 1.234 s, the connection's third.
#[cfg(test)]
pub(crate) fn test_entry<'a>(head: Option<&'a Head<'a>>, line: Option<&'a [u8]>) -> Entry<'a> {
    Entry {
        head,
        line,
        peer: "127.0.0.1",
        port: Some(4242),
        real: None,
        real_port: None,
        status: 200,
        body_bytes: 13,
        request_time: Duration::from_millis(1234),
        connection: 7,
        connection_requests: 3,
        request_id: None,
        proxy: None,
        secure_link: None,
        local: None,
        connection_time: Duration::ZERO,
        completed: true,
        pipelined: false,
        sent_head: None,
        gzip: None,
        roots: None,
        limit_rate: 0,
        limited: [None; 2],
        invalid_referer: None,
        uri: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{parse_head, Limits};

    fn entry<'a>(head: Option<&'a Head<'a>>, line: Option<&'a [u8]>) -> Entry<'a> {
        test_entry(head, line)
    }

    fn line(format: &str, escape: Escape, e: &Entry<'_>) -> String {
        let mut out = Vec::new();
        LogFormat::parse(format, escape).unwrap().write(e, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// `format`'s line (default escaping) for the request `req`.
    fn of(req: &str, format: &str) -> String {
        let (h, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        line(format, Escape::Default, &entry(Some(&h), None))
    }

    #[test]
    fn combined_is_the_default() {
        let req = "GET /a?b HTTP/1.1\r\nHost: h\r\nUser-Agent: a \"b\" é\r\n\r\n";
        let (h, _) = parse_head(req.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        LogFormat::default().write(&entry(Some(&h), None), &mut out);
        let text = String::from_utf8(out).unwrap();
        let (addr, rest) = text.split_once(" - - [").unwrap();
        assert_eq!(addr, "127.0.0.1");
        let (time, rest) = rest.split_once("] ").unwrap();
        assert!(time.ends_with(" +0000") && time.len() == 26, "{time}");
        assert_eq!(
            rest,
            "\"GET /a?b HTTP/1.1\" 200 13 \"-\" \"a \\x22b\\x22 \\xC3\\xA9\"\n"
        );
    }

    #[test]
    fn each_escaping_as_nginx_escapes() {
        let bytes = b"a\x01\x08\x0c\n\r\t\x1f\"\\\x7f\xc3\xa9";
        let run = |escape| {
            let mut out = Vec::new();
            escaped(escape, bytes, &mut out);
            out
        };
        assert_eq!(
            run(Escape::Default),
            b"a\\x01\\x08\\x0C\\x0A\\x0D\\x09\\x1F\\x22\\x5C\\x7F\\xC3\\xA9"
        );
        assert_eq!(
            run(Escape::Json),
            b"a\\u0001\\b\\f\\n\\r\\t\\u001F\\\"\\\\\x7f\xc3\xa9"
        );
        assert_eq!(run(Escape::None), bytes);
        // A missing value: `-`, or nothing where the format quotes it.
        let e = entry(None, None);
        assert_eq!(line("[$http_referer]", Escape::Default, &e), "[-]\n");
        assert_eq!(line("[$http_referer]", Escape::Json, &e), "[]\n");
        assert_eq!(line("[$http_referer]", Escape::None, &e), "[]\n");
        // Text between variables is written as given.
        assert_eq!(line("\"\\ $status", Escape::Json, &e), "\"\\ 200\n");
    }

    #[test]
    fn formats_that_do_not_compile_are_refused_naming_why() {
        let err = |f: &str| LogFormat::parse(f, Escape::Default).unwrap_err();
        assert!(
            err("$nope").contains("unknown \"nope\" variable"),
            "{}",
            err("$nope")
        );
        assert!(err("$status_").contains("unknown \"status_\""));
        assert!(err("$http_").contains("unknown \"http_\""));
        assert!(err("${status").contains("closing bracket"));
        assert!(err("a $ b").contains("without a variable name"));
        assert!(err("$").contains("without a variable name"));
        assert!("json".parse::<Escape>().is_ok());
        assert!("xml".parse::<Escape>().unwrap_err().contains("unknown"));
        let e = entry(None, None);
        assert_eq!(
            line("${status}x$status.", Escape::Default, &e),
            "200x200.\n"
        );
        assert_eq!(line("", Escape::Default, &e), "\n");
    }

    #[test]
    fn uri_follows_the_address_served() {
        let text = "GET /dir/?a=1 HTTP/1.1\r\nHost: h\r\n\r\n";
        let (head, _) = crate::request::parse_head(text.as_bytes(), &Default::default())
            .unwrap()
            .unwrap();
        let e = entry(Some(&head), None);
        assert_eq!(
            line("$uri|$document_uri|$request_uri", Escape::Default, &e),
            "/dir/|/dir/|/dir/?a=1\n"
        );
        let served = Entry {
            uri: Some("/dir/index.html"),
            ..entry(Some(&head), None)
        };
        assert_eq!(
            line("$uri|$document_uri|$request_uri", Escape::Default, &served),
            "/dir/index.html|/dir/index.html|/dir/?a=1\n"
        );
        assert!(uri_wanted());
    }

    #[test]
    fn gzip_ratios_round_as_nginx_rounds_them() {
        assert_eq!(gzip_ratio(2125, 1000), (2, 13));
        assert_eq!(gzip_ratio(2124, 1000), (2, 12));
        assert_eq!(gzip_ratio(1999, 1000), (2, 0));
        assert_eq!(gzip_ratio(100, 3), (33, 33));
        let e = Entry {
            gzip: Some((3000, 1000)),
            ..entry(None, None)
        };
        assert_eq!(line("$gzip_ratio", Escape::Default, &e), "3.00\n");
        assert_eq!(
            line("$gzip_ratio", Escape::Default, &entry(None, None)),
            "-\n"
        );
    }

    #[test]
    fn the_query_and_its_arguments() {
        let f = "$args|$is_args|$arg_a|$arg_b|$arg_c|$query_string";
        assert_eq!(of("GET /p HTTP/1.1\r\nHost: h\r\n\r\n", f), "-||-|-|-|-\n");
        assert_eq!(of("GET /p? HTTP/1.1\r\nHost: h\r\n\r\n", f), "-||-|-|-|-\n");
        assert_eq!(
            of("GET /p?A=1&b=&c&xa=9 HTTP/1.1\r\nHost: h\r\n\r\n", f),
            "A=1&b=&c&xa=9|?|1||-|A=1&b=&c&xa=9\n"
        );
    }

    #[test]
    fn host_uri_and_fields() {
        let f = "$host|$request_uri|$uri|$server_protocol|$request_method";
        assert_eq!(
            of(
                "GET /a%20b/../c?x HTTP/1.1\r\nHost: Example.COM.:80\r\n\r\n",
                f
            ),
            "example.com|/a%20b/../c?x|/c|HTTP/1.1|GET\n"
        );
        assert_eq!(
            of("GET http://X.Y./p?q HTTP/1.1\r\nHost: other\r\n\r\n", f),
            "x.y|/p?q|/p|HTTP/1.1|GET\n"
        );
        assert_eq!(
            of("GET http://h HTTP/1.1\r\nHost: h\r\n\r\n", f),
            "h|/|/|HTTP/1.1|GET\n"
        );
        assert_eq!(
            of("HEAD / HTTP/1.1\r\nHost: [::1]:8\r\n\r\n", f),
            "[::1]|/|/|HTTP/1.1|HEAD\n"
        );
        assert_eq!(of("GET / HTTP/1.0\r\n\r\n", f), "|/|/|HTTP/1.0|GET\n");
        let f = "$http_x_a|$cookie_sid|$cookie_b|$cookie_c|$content_length|$request_length";
        let req = "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nCookie: a=1; SID=x\r\n\
                   x-a: 2\r\nCookie: b= 2 \r\n\r\n";
        assert_eq!(of(req, f), format!("1, 2|x|2|-|-|{}\n", req.len()));
    }

    #[test]
    fn what_a_static_server_has_none_of_and_request_ids() {
        let e = entry(None, None);
        let f = "$upstream_addr|$upstream_response_time|$upstream_http_server|$ssl_protocol|\
                 $proxy_protocol_addr|$http2|";
        let header = crate::proxy_protocol::ProxyHeader {
            source: Some("[2001:db8::1]:4000".parse().unwrap()),
            destination: Some("10.0.0.1:443".parse().unwrap()),
        };
        let proxied = Entry {
            proxy: Some(&header),
            ..entry(None, None)
        };
        let p = "$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr \
                 $proxy_protocol_server_port";
        assert_eq!(
            line(p, Escape::Default, &proxied),
            "2001:db8::1 4000 10.0.0.1 443\n"
        );
        assert_eq!(line(p, Escape::Default, &e), "- - - -\n");
        assert_eq!(line(f, Escape::Default, &e), "-|-|-|-|-||\n");
        assert_eq!(line(f, Escape::Json, &e), "||||||\n");
        assert!(LogFormat::parse("$upstream_", Escape::Default).is_err());
        assert!(LogFormat::parse("$upstream_nope", Escape::Default).is_err());
        // One id for a line however often it appears; another for the next.
        let ids =
            |l: String| -> Vec<String> { l.trim_end().split(' ').map(str::to_owned).collect() };
        let first = ids(line("$request_id $request_id", Escape::Default, &e));
        let second = ids(line("$request_id", Escape::Default, &e));
        assert_eq!(first[0], first[1]);
        assert_ne!(first[0], second[0]);
        for id in [&first[0], &second[0]] {
            assert!(
                id.len() == 32
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                "{id}"
            );
        }
    }

    #[test]
    fn a_refused_request_logs_what_its_line_says() {
        let f = "$request|$request_method|$request_uri|$uri|$server_protocol|$request_length";
        let refused = |l: &str| line(f, Escape::Default, &entry(None, Some(l.as_bytes())));
        assert_eq!(
            refused("GET /../x HTTP/1.1"),
            "GET /../x HTTP/1.1|GET|-||HTTP/1.1|20\n"
        );
        assert_eq!(refused("BLAH"), "BLAH|BLAH|-||-|6\n");
        assert_eq!(
            line(f, Escape::Default, &entry(None, None)),
            "-|-|-|-|-|0\n"
        );
    }

    #[test]
    fn numbers_addresses_and_times() {
        let f = "$status $body_bytes_sent $request_time $connection $connection_requests \
                 $remote_addr $remote_port $realip_remote_addr $scheme";
        let mut e = entry(None, None);
        assert_eq!(
            line(f, Escape::Default, &e),
            "200 13 1.234 7 3 127.0.0.1 4242 127.0.0.1 http\n"
        );
        // A trusted proxy's word: nginx's realip names no port.
        e.real = Some(IpAddr::from([10, 0, 0, 1]));
        e.status = 4;
        assert_eq!(
            line(f, Escape::Default, &e),
            "004 13 1.234 7 3 10.0.0.1  127.0.0.1 http\n"
        );
        let t = line("$time_iso8601|$msec|$time_local|$pid", Escape::Default, &e);
        let parts: Vec<&str> = t.trim_end().split('|').collect();
        assert_eq!(parts[0].len(), 25, "{t}");
        assert!(parts[0].ends_with("+00:00") && parts[0].as_bytes()[10] == b'T');
        let (s, ms) = parts[1].split_once('.').unwrap();
        assert!(
            s.parse::<u64>().unwrap() > 1_700_000_000 && ms.len() == 3,
            "{t}"
        );
        assert_eq!(parts[2].len(), 26);
        // One clock reading per line: the two times agree.
        assert_eq!(&parts[0][11..19], &parts[2][12..20]);
        assert_eq!(parts[3], std::process::id().to_string());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// `req`'s head with `value` in a `User-Agent` and an `X-A` field
        /// (line ends left out), if it parses.
        fn with_value(target: &str, value: &[u8]) -> Vec<u8> {
            let value: Vec<u8> = value
                .iter()
                .copied()
                .filter(|&b| b != b'\r' && b != b'\n')
                .collect();
            let mut req = format!("GET {target} HTTP/1.1\r\nHost: h\r\nUser-Agent: ").into_bytes();
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\nX-A: ");
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n\r\n");
            req
        }

        proptest! {
            /// Whatever a client sends, a line escaped by default or for
            /// JSON is one line: no control byte below 0x20 before its
            /// line end (a client cannot forge a line or split one), and
            /// by default nothing but printable ASCII (JSON, as nginx's,
            /// leaves DEL and bytes from 0x80 as they are: valid in a
            /// JSON string).
            #[test]
            fn a_client_cannot_forge_a_line(
                target in "/[!-~]{0,24}",
                value in prop::collection::vec(any::<u8>(), 0..48),
            ) {
                let req = with_value(&target, &value);
                let Ok(Some((h, _))) = parse_head(&req, &Limits::default()) else {
                    return Ok(());
                };
                let f = "$request|$http_user_agent|$http_x_a|$uri|$args|$request_uri|$cookie_a";
                for escape in [Escape::Default, Escape::Json] {
                    let mut out = Vec::new();
                    LogFormat::parse(f, escape).unwrap().write(&entry(Some(&h), None), &mut out);
                    prop_assert_eq!(out.last(), Some(&b'\n'));
                    let body = &out[..out.len() - 1];
                    prop_assert!(!body.iter().any(|&b| b < 0x20), "{:?}", body);
                    if escape == Escape::Default {
                        prop_assert!(body.iter().all(|&b| (0x20..0x7f).contains(&b)));
                    }
                }
            }

            /// A JSON-escaped value in quotes is a JSON string, which reads
            /// back as the value sent (trimmed, as a field's value is).
            #[test]
            fn json_escaping_makes_json(value in "[ -~\u{80}-\u{10FFFF}\t\u{1}-\u{1f}]{0,32}") {
                let req = with_value("/", value.as_bytes());
                let Ok(Some((h, _))) = parse_head(&req, &Limits::default()) else {
                    return Ok(());
                };
                let Some(sent) = h.field_values("x-a").next() else {
                    return Ok(());
                };
                let mut out = Vec::new();
                let f = LogFormat::parse("{\"v\":\"$http_x_a\"}", Escape::Json).unwrap();
                f.write(&entry(Some(&h), None), &mut out);
                let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
                prop_assert_eq!(parsed["v"].as_str().unwrap().as_bytes(), sent);
            }
        }
    }
}
