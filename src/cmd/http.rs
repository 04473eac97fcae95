//! `duality http`: the static-file web server (the seeds' Knot) under any
//! threading model, until SIGTERM, SIGINT or SIGQUIT.

use clap::Args;
use duality_http::request::MAX_HEADERS_CAP;
use duality_http::try_files::Last;
use duality_http::{GzipConfig, HttpConfig, HttpState, Limits, Offload};
use duality_models::{AcceptPolicy, Balance, Model, ServerBuilder};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct HttpArgs {
    /// Directory to serve.
    #[arg(long)]
    root: PathBuf,
    /// Take the settings of an nginx configuration serving static files
    /// (one `server`, in `http` or alone; `include`d files read, a types
    /// file as --types-file): its directives become these flags, as the
    /// table in the README maps them, and the start-up line lists the
    /// flags and what had no effect (sendfile, error_log…). A flag of one
    /// value given after it replaces the file's; a repeatable one
    /// (--index, --add-header, --expires…) adds to them. Where nginx's
    /// defaults differ from duality's they are nginx's (absolute
    /// redirects, its ETags, a 75 s keep-alive, gzip of text/html alone
    /// from 20 bytes); links stay inside the root unless the file says
    /// `disable_symlinks off`. A server without `listen` keeps this
    /// flag's default. Locations are taken where a flag stands for them
    /// (`/`, a prefix with alias or secure_link, `~ /\.` deny all, `=
    /// PATH` stub_status; any prefix, exact or regular-expression one of
    /// try_files, error_page, gzip, allow, deny, auth_basic, return,
    /// expires, add_header, limit_rate: a --location; the README lists
    /// them). A directive with
    /// no counterpart (proxy_pass, TLS, other locations, map, …) is
    /// refused with its file and line
    #[arg(long, value_name = "FILE")]
    nginx_config: Option<PathBuf>,
    /// Serve the paths under a prefix from another directory (nginx's
    /// `location /PREFIX/ { alias DIR/; }`): "/PREFIX/ DIR", e.g.
    /// "/static/ /srv/app/static" serves /static/css/a.css from
    /// /srv/app/static/css/a.css. The prefix starts and ends with / (so
    /// /static, without it, is the root's); the longest prefix that
    /// matches wins. Index files, listings, `--try-files`, `--symlinks`
    /// (confined to DIR) and `.gz` files work there as under the root.
    /// Repeat for several
    #[arg(long = "alias", value_name = "/PREFIX/ DIR", value_parser = alias)]
    aliases: Vec<(String, PathBuf)>,
    /// Where symlinks under the root may lead: `inside-root` (a link out of
    /// the root, directly or through a directory, is 403) or `any` (nginx's
    /// default, `disable_symlinks off`: for release layouts such as
    /// `public/uploads -> ../../shared/uploads`; whoever can place a link
    /// under the root can then publish any file the server can read).
    /// A `..` in a request is resolved on its text, as nginx's, and one that
    /// climbs above the root is 400 either way.
    #[arg(long, value_name = "inside-root|any", default_value = "inside-root")]
    symlinks: duality_http::Symlinks,
    /// Address to listen on, as nginx's `listen`: ADDRESS:PORT, HOST:PORT
    /// (every address the name resolves to), PORT or *:PORT (all IPv4
    /// interfaces), or unix:PATH (a Unix socket, for a proxy in front:
    /// made with mode 0666 as nginx makes it, replacing only a stale socket
    /// at PATH, removed at exit). Repeat for several. Port 0 picks a free
    /// port (see the `ready` line).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: Vec<Listen>,
    #[command(flatten)]
    io: super::IoArg,
    #[command(flatten)]
    metrics: super::MetricsArgs,
    /// Answer GET PATH (e.g. /nginx_status) with nginx's `stub_status`
    /// page: active connections; accepted, handled and requests; and
    /// connections reading, writing, waiting. Off by default.
    #[arg(long, value_name = "PATH")]
    stub_status: Option<String>,
    /// Threading model: sped, amped:P, seda:N:P, seda-s:N, symped:N,
    /// thread-per-conn, steal:N. Numbers left out make the busy threads
    /// match the cores (symped, steal: all; amped: cores − 1 payload
    /// threads; seda, seda-s: half the cores each for network and payload).
    #[arg(long, default_value = "symped")]
    model: Model,
    #[command(flatten)]
    handoff: super::HandoffArg,
    /// Accept policy: favor-active (Knot-C) or favor-accept (Knot-A).
    #[arg(long, default_value = "favor-active")]
    accept: AcceptPolicy,
    /// How connections are spread over the network loops: round-robin,
    /// least-loaded (fewest open connections) or reuseport (a listener per
    /// loop, `SO_REUSEPORT`).
    #[arg(long, default_value = "round-robin")]
    accept_balance: Balance,
    /// Page-cache size in MiB (0 disables it).
    #[arg(long, default_value_t = 64)]
    cache_size: usize,
    /// Largest file kept in the page cache, in KiB.
    #[arg(long, default_value_t = 64)]
    cache_max_file: usize,
    /// Files not cached and at least this large (KiB) go out with sendfile.
    #[arg(long, default_value_t = 64)]
    sendfile_threshold: u64,
    /// A file kept open (see --open-file-cache) at least this large (KiB)
    /// goes out with sendfile (the kernel's pages) even when the page cache
    /// holds a copy of ours (0: never).
    #[arg(long, default_value_t = 32)]
    sendfile_kept: u64,
    /// A file kept open from this size (KiB) up to --sendfile-kept goes out
    /// as a copy from the page cache or with sendfile, whichever the thread
    /// answering has measured to cost it less CPU time per request (the copy
    /// is the cheaper while clients read at once, sendfile behind slower
    /// readers; measured again every few thousand requests). 0: never
    /// learned (copied below --sendfile-kept).
    #[arg(long, default_value_t = 16)]
    sendfile_learn: u64,
    /// Milliseconds: a learning epoch of --sendfile-learn (about a thousand
    /// such requests on one thread) that took longer than this is not
    /// learned from, the load being too light for its CPU time to measure
    /// the requests.
    #[arg(long, default_value_t = 500)]
    sendfile_learn_epoch_ms: u64,
    /// Milliseconds a file's stat is trusted before a cache hit stats again (0: every request).
    #[arg(long, default_value_t = 1000)]
    revalidate_ms: u64,
    /// Connections above this are refused with 503, once connections idle
    /// a second or more between requests have been closed to make room
    /// (as nginx reuses idle keep-alive connections). Each takes a descriptor,
    /// and one more while it sends a file: default 1024, or less where the
    /// descriptor limit (`ulimit -n`, its soft limit raised at start toward
    /// what this and --open-file-cache need, never past the hard one) would
    /// not leave that many two each beside 32 for the server itself (more
    /// with many threads: three per loop thread) and room for max-conns / 8
    /// refused connections lingered over (about (limit - 32) / 2.125). A
    /// larger value is taken, with a warning, while one descriptor each, the
    /// refusals and a shared room for files (a sixteenth of the connections,
    /// at least 16) fit; one the hard limit cannot hold even so is lowered
    /// to what it holds, and said at start. A file that cannot be opened
    /// for lack of descriptors gets 503.
    #[arg(long, value_parser = positive_usize)]
    max_conns: Option<usize>,
    /// Descriptors of files sent with sendfile kept open between requests
    /// (nginx's `open_file_cache max=N`): while a file's stat is trusted
    /// (--revalidate-ms) its next request is answered from the open file.
    /// A kept descriptor closes once its stat is stale (a sweep runs every
    /// --revalidate-ms), so a deleted file's space is freed within about
    /// two periods; a file rewritten in place (same inode) may go out with
    /// its old length and validators until its stat is stale (replace
    /// files by rename). 0: none.
    /// Default 1000, or what the descriptor limit leaves beside
    /// --max-conns' descriptors (see there).
    #[arg(long)]
    open_file_cache: Option<usize>,
    /// Seconds a client has to send a whole request head, from its first byte (→ 408).
    #[arg(long, default_value_t = 10.0)]
    head_timeout: f64,
    /// Seconds an idle keep-alive connection is kept.
    #[arg(long, default_value_t = 60.0)]
    idle_timeout: f64,
    /// Seconds a response may wait for the client to take more of it (per
    /// wait, as nginx's send_timeout).
    #[arg(long, default_value_t = 60.0)]
    write_timeout: f64,
    /// Seconds of silence allowed inside a request body being dropped after
    /// its answer, or in what a client still sends after an answer that
    /// closes the connection (nginx's lingering_timeout); then it closes.
    #[arg(long, default_value_t = 5.0)]
    lingering_timeout: f64,
    /// Seconds a request body may take to be dropped, from its answer, and
    /// the longest lingering close (nginx's lingering_time); then the
    /// connection closes.
    #[arg(long, default_value_t = 30.0)]
    lingering_time: f64,
    /// Requests served on one connection (nginx's keepalive_requests): the
    /// answer to the last carries `Connection: close`. 0: no keep-alive.
    #[arg(long, default_value_t = 1000)]
    keepalive_requests: u64,
    /// Seconds one connection may make requests (nginx's keepalive_time):
    /// the answer to a request begun later carries `Connection: close`
    #[arg(long, default_value_t = 3600.0)]
    keepalive_time: f64,
    /// Write an access log to this file (`-` for stderr), one line per
    /// response in nginx's `combined` format (times in UTC) or
    /// `--log-format`'s; off by default. SIGUSR1 opens it again (nginx's
    /// `-s reopen`), after a rotation. Lines a full disk refuses are
    /// counted and said (once a minute).
    #[arg(long)]
    access_log: Option<PathBuf>,
    /// The access log's line, as nginx's `log_format`: text with
    /// `$variable`s (or `${variable}`), nginx's names: `$remote_addr`,
    /// `$remote_port`, `$remote_user`, `$realip_remote_addr`, `$time_local`,
    /// `$time_iso8601` (both UTC), `$msec`, `$request`, `$request_method`,
    /// `$request_uri`, `$uri`, `$args`, `$is_args`, `$server_protocol`,
    /// `$scheme`, `$host`, `$status`, `$body_bytes_sent`, `$request_length`
    /// (the head's bytes), `$request_time`, `$connection`,
    /// `$connection_requests`, `$pid`, `$hostname`, `$content_type`,
    /// `$content_length`, `$http_NAME`, `$arg_NAME`, `$cookie_NAME`,
    /// `$request_id`, `$proxy_protocol_addr`, `_port`, `_server_addr`,
    /// `_server_port` (`--proxy-protocol`), `$secure_link`,
    /// `$secure_link_expires`, `$bytes_sent`, `$sent_http_NAME`,
    /// `$gzip_ratio`, `$pipe`, `$request_completion`, `$server_addr`,
    /// `$server_port`, `$connection_time`, `$binary_remote_addr`,
    /// `$realip_remote_port`, `$document_root`, `$request_filename`,
    /// `$realpath_root`, `$limit_rate`, `$limit_req_status`,
    /// `$limit_conn_status`, `$invalid_referer`; `$upstream_*`, `$ssl_*`, `$sent_trailer_*`
    /// and `$request_body` are missing and `$http2`, `$https`,
    /// `$server_name` empty, as from nginx serving files over plain
    /// HTTP/1.x; any other is refused at start. nginx's `combined` by
    /// default
    #[arg(long, value_name = "FORMAT", requires = "access_log")]
    log_format: Option<String>,
    /// How `--log-format`'s values are escaped (nginx's `escape=`):
    /// `default` (`\xHH` for bytes outside printable ASCII, `"` and `\`;
    /// a missing value is `-`), `json` (for a JSON string; a missing value
    /// is empty) or `none`
    #[arg(
        long,
        value_name = "default|json|none",
        default_value = "default",
        requires = "log_format"
    )]
    log_escape: duality_http::log_format::Escape,
    /// Largest request head (request line, header fields, blank line) in bytes;
    /// a larger one gets 431. Also bounds each connection's read buffer.
    #[arg(long, default_value_t = Limits::default().max_head)]
    max_head_bytes: usize,
    /// Largest request body a `Content-Length` may announce, in bytes; a
    /// larger one gets 413 (nginx's `client_max_body_size`, 1 MiB). A body is
    /// never read into memory: the answer goes out at the head and the body
    /// is dropped as it arrives (a chunked one, of any size, as nginx does).
    /// 0: no limit, as nginx's `client_max_body_size 0`.
    #[arg(long, default_value_t = Limits::default().max_body)]
    max_body_bytes: usize,
    /// Longest request-target (URI) in bytes; a longer one gets 414.
    #[arg(long, default_value_t = Limits::default().max_uri)]
    max_uri_bytes: usize,
    /// Most header fields in a request; more get 431 (at most 512).
    #[arg(long, default_value_t = Limits::default().max_headers)]
    max_headers: usize,
    /// Seconds in-flight requests get to finish after SIGTERM, SIGINT or
    /// SIGQUIT (0: cut them at once).
    #[arg(long, default_value_t = 5.0)]
    shutdown_grace: f64,
    /// Write the process id to this file before `ready` (nginx's `pid`),
    /// removed at exit: for logrotate's `kill -USR1 $(cat FILE)`, which
    /// reopens the access log.
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Started as root (to bind a port below 1024), serve as this user, as
    /// nginx's `user`: the listeners are bound and the access log opened
    /// as root, then the server takes USER's identity (its group,
    /// supplementary groups dropped) before any connection is served, so
    /// files are opened with USER's permissions (a file USER cannot read is
    /// 403); the pid file, and the access log when SIGUSR1 reopens it, are
    /// written as USER; a --root USER cannot search stops the start.
    /// Ignored, with a warning, when not started as root.
    /// Without it a server started as root serves as root, and says so.
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// The file a directory asked for with its slash is served by (nginx's
    /// `index`): repeat for several, the first found applies.
    #[arg(long, value_name = "NAME", default_value = "index.html",
          value_parser = index_name)]
    index: Vec<String>,
    /// List a directory asked for with its slash and without an index file
    /// (nginx's `autoindex on`, in its format): directories first, then
    /// files, by name, without names starting with `.`; at most 10,000
    /// entries in about 2 MiB. Off by default: such a directory is 403, as
    /// in nginx.
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = on_off,
          action = clap::ArgAction::Set)]
    autoindex: bool,
    /// List directories only under this prefix (nginx's `location
    /// /PREFIX/ { autoindex on; }`), e.g. /downloads/: elsewhere a
    /// directory without an index file stays 403. Repeat for several; with
    /// --autoindex off (on lists everywhere)
    #[arg(long, value_name = "/PREFIX/", value_parser = url_prefix)]
    autoindex_under: Vec<String>,
    /// The listing's format (nginx's autoindex_format): `html`; `json`, an
    /// array of {"name", "type", "mtime", "size"}; `jsonp`, that JSON in a
    /// call of the request's `callback` argument (letters, digits, `_`,
    /// `.`; another is 400; none: plain JSON); `xml`, a `<list>`
    #[arg(
        long,
        value_name = "html|json|jsonp|xml",
        default_value = "html",
        requires = "autoindex"
    )]
    autoindex_format: duality_http::autoindex::Format,
    /// Sizes in an HTML listing in bytes (`on`, the default), or rounded
    /// to K, M and G (nginx's autoindex_exact_size off)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = on_off,
          action = clap::ArgAction::Set, requires = "autoindex")]
    autoindex_exact_size: bool,
    /// Times in an HTML listing in the server's time zone (TZ, else
    /// /etc/localtime) rather than UTC (nginx's autoindex_localtime on; its
    /// JSON and XML times stay UTC, as nginx's)
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = on_off,
          action = clap::ArgAction::Set, requires = "autoindex")]
    autoindex_localtime: bool,
    /// Answer some errors with a page of the root, as nginx's `error_page`:
    /// "CODES [=200] PAGE", e.g. "404 /404.html" (the page, with the
    /// error's status and no validators) or "404 =200 /index.html" (the
    /// page as if asked for: 200, its validators, ranges and gzip; a
    /// single-page application's fallback, nginx's `try_files $uri
    /// /index.html`). `=CODE` answers the page under another status ("404
    /// =410 /gone.html"); an address, `http://…` or `https://…`, redirects
    /// there (302, or the 301, 303, 307 or 308 =CODE names:
    /// `"404 =301 https://example.com/"`). Codes 400-599; a lookup answers 403, 404,
    /// 500 and 503. A page that cannot be served itself leaves the built-in
    /// one. Repeat for several; the first naming a code applies.
    #[arg(long, value_name = "CODES [=CODE] PAGE|URL")]
    error_page: Vec<duality_http::ErrorPage>,
    /// The names a request may be served by, in order, then a last resort
    /// (nginx's `try_files`): "$uri $uri.html $uri/ =404" serves /about by
    /// about.html when there is no file about (a static site generator's
    /// clean addresses); "$uri $uri/ /index.html" answers any address that
    /// names nothing with /index.html (a single-page application). An entry
    /// names a file, or ending in / a directory (answered as without this:
    /// its redirect, index or listing); $uri (the path, without its query)
    /// is the only variable; the last is =403, =404, =500, =503 (then
    /// --error-page applies) or an address of the root. What was found
    /// answers the address from memory until its stat is stale
    /// (--revalidate-ms). A request a --location takes has that location's
    /// --try-files or none, as nginx's server-level try_files
    #[arg(long, value_name = "ENTRIES LAST")]
    try_files: Option<duality_http::TryFiles>,
    /// `deny`: answer 403 to a path with a segment starting with `.`
    /// (`/.git/config`, `/.env`, `/app/.htpasswd`) instead of serving it,
    /// as nginx's common `location ~ /\. { deny all; }`; `/.well-known/`
    /// (RFC 8615: ACME challenges, security.txt) is still served. `allow`
    /// (the default, as nginx): served as any file. Listings leave such
    /// names out either way
    #[arg(long, value_name = "allow|deny", default_value = "allow", value_parser = allow_deny,
          action = clap::ArgAction::Set)]
    dotfiles: bool,
    /// Label text types with this charset (nginx's `charset`, e.g. utf-8):
    /// text/html, text/plain, text/xml, JavaScript, RSS and WML get
    /// `; charset=NAME`. `off` (the default, as nginx): none, but plain
    /// text, Markdown and CSV go out as UTF-8
    #[arg(long, value_name = "NAME|off", default_value = "off", value_parser = charset)]
    charset: String,
    /// Type files of these extensions so (an entry of nginx's `types`
    /// block, in its order): "text/plain log" or "application/x-apple-aspen-config
    /// mobileconfig", before the built-in table (nginx's mime.types and a
    /// few newer types). Repeat for several; a later one for the same
    /// extension wins
    #[arg(long = "type", value_name = "MEDIA/TYPE EXT…")]
    types: Vec<duality_http::mime::TypeRule>,
    /// An nginx `mime.types` file (`types { MEDIA/TYPE EXT…; … }`, what
    /// nginx's `include mime.types` reads): its entries type files before
    /// the built-in table, `--type` before them. An extension neither
    /// names keeps the built-in type (nginx's `default_type`,
    /// --default-type here, applies there instead)
    #[arg(long, value_name = "FILE")]
    types_file: Option<PathBuf>,
    /// The type of a file whose extension neither --type, --types-file nor
    /// the built-in table know, or that has none (nginx's default_type,
    /// e.g. text/plain); labelled by --charset as any type. Default:
    /// application/octet-stream (what nginx's stock nginx.conf sets)
    #[arg(long, value_name = "MEDIA/TYPE", value_parser = media_type)]
    default_type: Option<String>,
    /// How entity tags are written: `inode` (the default),
    /// `"<inode>-<size>-<mtime in ns>"`, changing with any replacement of a
    /// file; `nginx`, nginx's `"<mtime in s>-<size>"`, the same on every
    /// server holding the same files with the same times (replicas behind a
    /// load balancer: a client's revalidation gets 304 whichever answers;
    /// a rolling switch from nginx keeps clients' cached validators), but,
    /// as nginx's, blind to a rewrite of the same size within a second;
    /// `off`, no tag at all (nginx's `etag off`): an If-None-Match
    /// or If-Match then holds only for `*`, an If-Range with a tag sends the
    /// whole file, and dates still validate
    #[arg(long, value_name = "inode|nginx|off", default_value = "inode")]
    etag: duality_http::file::ETagFormat,
    /// How If-Modified-Since makes a 304 when no If-None-Match came (nginx's
    /// if_modified_since): `exact`, only for the file's Last-Modified itself
    /// (nginx's default: a file rolled back to an older date is sent
    /// again); `before`, for that date or a later one (RFC 9110's rule);
    /// `off`, never (a tag still does). A date later than the answer's Date
    /// is ignored under each
    #[arg(long, value_name = "off|exact|before", default_value = "exact")]
    if_modified_since: duality_http::IfModifiedSince,
    /// The most byte ranges one request may ask for (nginx's max_ranges): a
    /// Range with more satisfiable ones gets the whole file (200); 0 turns
    /// ranges off (no Accept-Ranges either). Default: no limit of its own
    /// (a Range whose ranges stay more than 64 spans apart after merging
    /// gets the whole file)
    #[arg(long, value_name = "N")]
    max_ranges: Option<u32>,
    /// `Expires` and `Cache-Control` on answers of 200, 206, 301 and 304
    /// (nginx's `expires`): a TIME after the answer (`30d`, `12h`, `1h
    /// 30m`, `90`: seconds; units y M w d h m s) as `max-age`, `modified
    /// TIME` after the file's Last-Modified, `@TIME` the next such time of
    /// day (UTC), a negative TIME (`-1`) or `epoch` for `no-cache`, `max`
    /// for ten years. Before it, a media type or family limits it to those
    /// answers (nginx's `map $sent_http_content_type $expires`): repeat,
    /// e.g. "text/html epoch", "image/ 30d", "max" (every other type; the
    /// server's own pages are text/html). Off by default: neither field, as
    /// in nginx
    #[arg(
        long,
        value_name = "[TYPE] [modified] TIME|@TIME|epoch|max|off",
        allow_hyphen_values = true
    )]
    expires: Vec<duality_http::fields::ExpiresRule>,
    /// Add a field to answers of 200, 206, 301 and 304 (nginx's
    /// `add_header`): "NAME: VALUE", e.g. "X-Content-Type-Options: nosniff"
    /// or "Cache-Control: public". Repeat for several; they go out in the
    /// order given. Fields the server writes itself (Server, Date,
    /// Content-*, Last-Modified, ETag, Location, Connection…) are refused,
    /// and Expires is set with --expires. A value may name the variables of
    /// --log-format ("X-Request-Id: $request_id"), filled in for each
    /// answer as nginx's add_header fills them; one that comes out empty
    /// adds no field
    #[arg(long, value_name = "NAME: VALUE")]
    add_header: Vec<duality_http::AddedField>,
    /// --add-header on every answer, errors included (nginx's `add_header
    /// … always`), after the --add-header fields; not on the 503 that a
    /// connection over --max-conns gets before any request is read
    #[arg(long, value_name = "NAME: VALUE")]
    add_header_always: Vec<duality_http::AddedField>,
    /// Behind a proxy (nginx's `set_real_ip_from`): a connection from this
    /// address, network (ADDRESS/BITS) or `unix:` (a Unix socket) is
    /// a trusted proxy's, and the client's address its --real-ip-header
    /// names stands for the proxy's: in the access log, `--allow` /
    /// `--deny` and `--limit-req` (where the server uses a client's
    /// address). Repeat for several
    #[arg(long, value_name = "ADDRESS[/BITS]|unix:")]
    real_ip_from: Vec<duality_http::Trusted>,
    /// The field a trusted proxy names the client in (nginx's
    /// `real_ip_header`): X-Real-IP, X-Forwarded-For (every line of it, as
    /// one list) or any other (its first line), its last address taken; or
    /// `proxy_protocol`, the connection's PROXY header (--proxy-protocol on)
    #[arg(long, value_name = "NAME", default_value = "X-Real-IP", requires = "real_ip_from",
          value_parser = real_ip_header)]
    real_ip_header: String,
    /// Take the last address of --real-ip-header that is not itself a
    /// trusted proxy, walking from the right (nginx's `real_ip_recursive
    /// on`): for a chain of proxies. Off: the last address, as nginx
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = on_off,
          action = clap::ArgAction::Set, requires = "real_ip_from")]
    real_ip_recursive: bool,
    /// Serve clients from these addresses (nginx's `allow`): ADDRESS,
    /// ADDRESS/BITS, `unix:` or `all`. With `--deny`, rules are checked in
    /// the order given, the first naming the client deciding; a client no
    /// rule names is served. Behind a proxy the client is the address it
    /// names (`--real-ip-from`), as in nginx. Repeat for several
    #[arg(long, value_name = "ADDRESS[/BITS]|unix:|all", value_parser = allow_rule)]
    allow: Vec<duality_http::AccessRule>,
    /// Answer clients from these addresses 403 (nginx's `deny`), before
    /// anything is looked up (`--error-page 403` applies): e.g. `--allow
    /// 10.0.0.0/8 --deny all` serves only 10.0.0.0/8. Repeat for several
    #[arg(long, value_name = "ADDRESS[/BITS]|unix:|all", value_parser = deny_rule)]
    deny: Vec<duality_http::AccessRule>,
    /// Answer every request the same (nginx's `return` in a `server`
    /// block): "301 https://$host$request_uri" (a redirect: 301, 302, 303,
    /// 307 or 308 and the address, the access log's variables expanded;
    /// bytes a field may not hold percent-encoded), "200 TEXT" (a text/plain
    /// body), or a code alone: 200 (empty), 403, 404, 410, 500, 503 (its
    /// page; `--error-page` applies), or 444 (nginx's: the connection
    /// closes without an answer, the request logged with 444). Checked
    /// before anything else, `--deny` included, as nginx's
    #[arg(long = "return", value_name = "CODE [URL|TEXT]")]
    answer: Option<duality_http::Return>,
    /// Change a request's path, or redirect it, by a pattern (nginx's
    /// `rewrite` in a `server` block): "REGEX REPLACEMENT
    /// [last|break|redirect|permanent]", e.g.
    /// "^/blog/(.*)$ /articles/$1 permanent" (a 301; `redirect`: a 302, as
    /// a replacement starting http://, https:// or $scheme), "^/p/(\d+)$
    /// /page.html?id=$1 last" (served /page.html; `last` or `break`: no
    /// later rule runs; no flag: the next one sees the new path). Matched
    /// against the decoded path; $1…$9 and named groups are the captures,
    /// other variables the access log's; the query goes along unless the
    /// replacement ends in "?". Repeat for several, run in order, before
    /// `--return` and the access checks, as nginx's. Patterns are the
    /// `regex` crate's (no look-around or back-references; a space is \s
    /// or \x20). A rule giving no path under the root answers 500
    #[arg(long = "rewrite", value_name = "REGEX REPLACEMENT [FLAG]")]
    rewrites: Vec<duality_http::Rewrite>,
    /// Hold each client address to a rate (nginx's `limit_req_zone
    /// $binary_remote_addr` with `limit_req`): "RATE [burst=N]
    /// [nodelay|delay=N] [zone=SIZE] [status=503|429|444]", e.g. "10r/s
    /// burst=20 nodelay". A leaky bucket per address, drained at RATE (Nr/s
    /// or Nr/m); a request beyond `burst` is answered 503 (or 429;
    /// `--error-page` applies; 444 closes without an answer), one within it waits its turn unless
    /// `nodelay` (or the first N, `delay=N`). `zone` bounds the buckets
    /// (64 bytes each, nginx's count; 10m by default). The address is the
    /// one a trusted proxy names (`--real-ip-from`); Unix-socket clients are
    /// not limited. Repeat for several (nginx's `limit_req` with two zones:
    /// "10r/s burst=20" beside "300r/m"): a request over any one's burst is
    /// refused (its status) and charged to none; otherwise it waits the
    /// longest of their waits
    #[arg(long, value_name = "RATE [burst=N] [nodelay]…")]
    limit_req: Vec<duality_http::LimitReqConfig>,
    /// Connections of one client address that may have a request in
    /// progress at once (nginx's `limit_conn_zone $binary_remote_addr` with
    /// `limit_conn`): "N [status=503|429|444]". A download being sent counts, a
    /// keep-alive connection waiting for its next request does not; a
    /// request over N is answered 503 (or 429; `--error-page` applies).
    /// Checked after `--limit-req`, before `--deny`; the address is the one
    /// a trusted proxy names (`--real-ip-from`); Unix-socket clients are
    /// not limited
    #[arg(long, value_name = "N [status=503|429|444]")]
    limit_conn: Option<duality_http::LimitConnConfig>,
    /// Send each response's body at most this fast, in bytes a second
    /// (nginx's `limit_rate`: `500k`, `2m`; the first second's worth goes
    /// at once). Bodies sent from a file (from `--sendfile-threshold`, or
    /// kept open) are paced; a small one from memory goes at once. 0 (the
    /// default): no limit
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = nginx_size)]
    limit_rate: u64,
    /// Bytes of a body sent before `--limit-rate` applies (nginx's
    /// `limit_rate_after`: `1m`)
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = nginx_size,
          requires = "limit_rate")]
    limit_rate_after: u64,
    /// Ask for a user and password for every request (nginx's
    /// `auth_basic REALM`; browsers show the realm), checked against
    /// `--auth-basic-user-file`. Without valid credentials: 401 with
    /// `WWW-Authenticate` (`--error-page 401` applies). Over plain HTTP the
    /// password crosses the network readable: put TLS in front
    #[arg(long, value_name = "REALM", requires = "auth_basic_user_file")]
    auth_basic: Option<String>,
    /// The users for `--auth-basic` (nginx's `auth_basic_user_file`):
    /// `user:hash` lines as `htpasswd` or `openssl passwd` write them
    /// (`$apr1$`, `$1$`, `$5$`, `$6$`, bcrypt `$2y$`, `{SHA}`, `{SSHA}`,
    /// `{PLAIN}`); read again when it changes. Must be readable at start.
    /// Without --auth-basic: the file of the --location groups that give
    /// a realm alone
    #[arg(long, value_name = "FILE")]
    auth_basic_user_file: Option<PathBuf>,
    /// With --allow/--deny and --auth-basic both given: `all` (the
    /// default), a request needs an allowed address and a valid password;
    /// `any`, either lets it in, and a refused address is asked for the
    /// password (401) (nginx's satisfy)
    #[arg(long, value_name = "all|any", default_value = "all",
          value_parser = clap::builder::PossibleValuesParser::new(["all", "any"]))]
    satisfy: String,
    /// Settings of their own for some paths (nginx's `location` blocks): a
    /// prefix (`/admin/`), `^~ PREFIX` (no regular expression tried after
    /// it), `= PATH` (that path alone) or a regular expression, `~ REGEX`
    /// or `~* REGEX` (case-insensitive; the `regex` crate's syntax, matched
    /// against the decoded path), then its flags between braces:
    /// `--location /admin/ { --auth-basic Staff --allow 10.0.0.0/8 --deny
    /// all }`, `--location '~*' '\.(css|js)$' { --expires 1y }`, the braces
    /// words of their own (or the whole group one quoted word). Inside:
    /// --allow/--deny, --auth-basic (a realm, taking the server's
    /// --auth-basic-user-file unless given its own; `off`: no password
    /// there), --satisfy, --return, --expires, --add-header(-always),
    /// --limit-rate(-after), --try-files, --error-page (its pages
    /// replacing the server's), --gzip, --gzip-static, --gzip-types,
    /// --gzip-min-length, `--access-log off` (its
    /// requests not logged) and --internal (nginx's `internal`: a client's
    /// request there is answered 404; an error page, a --try-files
    /// fallback or a path a --rewrite moved there is served). A request takes the location nginx would give
    /// it (after --rewrite): an exact one, else the first regular
    /// expression matching (unless the longest prefix is `^~`), else the
    /// longest prefix, else none. A location's setting replaces the
    /// server's of that kind whole (its --add-header fields the server's
    /// fields), as nginx's inheritance does; what it does not set is the
    /// server's, but for --try-files, which is the location's own or none
    /// (nginx's server-level try_files applies where no location does).
    /// The server's --return still comes first. An answer from another
    /// address (an index file, a --try-files name, an error page) has
    /// that address's location's fields, pace and logging, as nginx's
    /// after an internal redirect. The other settings are the server's.
    /// Repeat for several
    #[arg(long, value_name = "[=|^~|~|~*] PATH { FLAGS }", value_parser = super::http_location::parse)]
    location: Vec<super::http_location::LocationArgs>,
    /// Every connection begins with a PROXY protocol header, version 1 or
    /// 2, as a TCP load balancer (HAProxy, AWS NLB…) sends it (nginx's
    /// `listen … proxy_protocol`): the client's address it names is
    /// `$proxy_protocol_addr` (and, with `--real-ip-from` trusting the
    /// balancer and `--real-ip-header proxy_protocol`, the client's for
    /// the log, --allow/--deny and the limits); a connection without one
    /// is closed unanswered. For every listener
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = on_off,
          action = clap::ArgAction::Set)]
    proxy_protocol: bool,
    /// Refuse (403; `--error-page 403` applies) a request whose Referer is
    /// not one of these (nginx's valid_referers with `if ($invalid_referer)
    /// { return 403; }`, hot-link protection): `none` (no Referer),
    /// `blocked` (one without http(s)://host, blanked by a proxy), and host
    /// names: example.com, *.example.com, .example.com (both), www.example.*,
    /// each perhaps with a path the referring page's must start with
    /// (example.com/pics/). nginx's server_names and regular expressions
    /// are not taken
    #[arg(long, value_name = "none|blocked|NAME…")]
    valid_referers: Option<duality_http::ValidReferers>,
    /// Serve only links signed with a secret (nginx's `secure_link`, with
    /// `if ($secure_link = "") { return 403; }` and `if ($secure_link =
    /// "0") { return 410; }`): what a request brings, "HASH,EXPIRES" or "HASH" with
    /// the access log's variables, e.g. "$arg_md5,$arg_expires". HASH is
    /// the base64url MD5 of `--secure-link-md5`'s text, EXPIRES (optional)
    /// Unix seconds: a wrong or missing link is answered 403, an expired
    /// one 410 (`--error-page` applies). Checked after `--return`, before
    /// `--valid-referers` and the access checks
    #[arg(long, value_name = "TEXT", value_parser = log_text, requires = "secure_link_md5")]
    secure_link: Option<duality_http::LogFormat>,
    /// The text whose MD5 a `--secure-link` hash must be (nginx's
    /// `secure_link_md5`), with the access log's variables and
    /// $secure_link_expires, e.g. "$secure_link_expires$uri$remote_addr
    /// SECRET" (a link for one file, one client, until it expires). Keep it
    /// out of logs and process lists: `DUALITY_SECURE_LINK_MD5` takes it
    /// from the environment
    #[arg(long, value_name = "TEXT", value_parser = log_text, requires = "secure_link",
          env = "DUALITY_SECURE_LINK_MD5", hide_env_values = true)]
    secure_link_md5: Option<duality_http::LogFormat>,
    /// Check `--secure-link` only on paths starting with this (nginx's
    /// `location /PREFIX/` holding the directives), e.g. /downloads/;
    /// every path by default
    #[arg(long, value_name = "PREFIX", requires = "secure_link", value_parser = url_prefix)]
    secure_link_prefix: Option<String>,
    /// Redirections to the server's own paths (a directory without its
    /// slash, `--return 301 /path`) carry an absolute Location,
    /// `http://HOST[:PORT]/path`: the request's host (else the address it
    /// came to) and the port it came to unless 80, as nginx's
    /// absolute_redirect (on there by default) with port_in_redirect.
    /// Off: relative, as RFC 9110 allows
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = on_off,
          action = clap::ArgAction::Set)]
    absolute_redirect: bool,
    /// gzip responses (nginx's `gzip on`): text/*, JSON, JavaScript, XML, SVG,
    /// WebAssembly, TTF/OTF, ICO/BMP (and any +json/+xml type) of at least
    /// --gzip-min-length bytes go out with `Content-Encoding: gzip` to clients
    /// whose Accept-Encoding prefers it, with `Vary: Accept-Encoding` and an
    /// ETag of their own; Range requests get the identity body. Off by
    /// default, as in nginx.
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = on_off,
          action = clap::ArgAction::Set)]
    gzip: bool,
    /// The media types --gzip and --gzip-static give variants (nginx's
    /// gzip_types): text/html always, and these (space-separated or
    /// repeated; `*`: every type). Default: the list --gzip names, where
    /// nginx's is text/html alone
    #[arg(long, value_name = "MEDIA/TYPE…|*", value_delimiter = ' ',
          value_parser = gzip_type)]
    gzip_types: Option<Vec<String>>,
    /// gzip level, 1 (fastest, nginx's default) to 9 (smallest).
    #[arg(long, default_value_t = GzipConfig::default().level,
          value_parser = clap::value_parser!(u32).range(1..=9))]
    gzip_level: u32,
    /// Smallest file compressed, in bytes (nginx's gzip_min_length).
    #[arg(long, default_value_t = GzipConfig::default().min_length)]
    gzip_min_length: u64,
    /// Largest file compressed on request, in MiB; a larger one goes out
    /// uncompressed unless a fresh FILE.gz is beside it.
    #[arg(long, default_value_t = GzipConfig::default().max_length >> 20)]
    gzip_max_size: u64,
    /// Serve a pre-compressed FILE.gz beside FILE (same root checks, at least
    /// as new as FILE; the types and minimum length of --gzip) to clients
    /// that take gzip (nginx's gzip_static). Default: as --gzip; on with
    /// --gzip off serves .gz files and compresses nothing, as nginx's
    /// `gzip_static on` without `gzip on`.
    #[arg(long, value_name = "on|off", value_parser = on_off, action = clap::ArgAction::Set)]
    gzip_static: Option<bool>,
    /// Oldest HTTP version whose requests get gzip (nginx's
    /// gzip_http_version): 1.1 by default, as nginx, since HTTP/1.0 caches
    /// may ignore Vary; 1.0 compresses for both.
    #[arg(long, value_name = "1.0|1.1", default_value = "1.1", value_parser = ["1.0", "1.1"])]
    gzip_http_version: String,
    /// Memory for compressed variants, in MiB (0: compress on every request).
    #[arg(long, default_value_t = GzipConfig::default().cache_bytes >> 20)]
    gzip_cache: usize,
    /// Where compression runs: `inline` on the loop that serves the request
    /// (as nginx does in its workers), `pool` (the runtime's CPU pool; a full
    /// queue makes the request wait its turn, never run inline), or
    /// `adaptive`: per size class, inline while its learned cost is below a
    /// hand-off's (and a loop turn's budget), on the pool otherwise (the
    /// default: with large compressible files inline, every other request
    /// waits behind their compression, see docs/results/offload).
    #[arg(long, default_value_t = GzipConfig::default().offload)]
    offload: Offload,
    /// Threads of the runtime's CPU pool, where `--offload pool|adaptive`
    /// compresses (nginx's `thread_pool … threads=N`). Default: one per core.
    /// They run below the loops' priority while they keep up, so fewer
    /// threads matter only when the pool falls behind and is raised.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    cpu_threads: Option<u16>,
}

pub(super) fn on_off(v: &str) -> Result<bool, String> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{v:?}: expected on or off")),
    }
}

/// A charset name for `--charset` (a token, as HTTP's parameter value).
fn charset(v: &str) -> Result<String, String> {
    match duality_http::fields::is_token(v) {
        true => Ok(v.to_owned()),
        false => Err(format!(
            "{v:?} is not a charset name (utf-8, koi8-r, windows-1251…)"
        )),
    }
}

/// `--dotfiles`: whether hidden paths are denied.
fn allow_deny(v: &str) -> Result<bool, String> {
    match v {
        "allow" => Ok(false),
        "deny" => Ok(true),
        _ => Err(format!("{v:?}: expected allow or deny")),
    }
}

/// A `--gzip-types` value: `TYPE/SUBTYPE` or `*`.
pub(super) fn gzip_type(s: &str) -> Result<String, String> {
    match s == "*" {
        true => Ok(s.to_owned()),
        false => media_type(s),
    }
}

/// A `--default-type` value: `TYPE/SUBTYPE`.
fn media_type(s: &str) -> Result<String, String> {
    match duality_http::mime::is_media_type(s) {
        true => Ok(s.to_owned()),
        false => Err(format!(
            "{s:?} is not a media type: give TYPE/SUBTYPE, e.g. text/plain"
        )),
    }
}

/// `--types-file`'s entries, then `--type`'s (a later one wins).
fn types(a: &HttpArgs) -> anyhow::Result<Vec<duality_http::mime::TypeRule>> {
    let mut rules = Vec::new();
    if let Some(path) = &a.types_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--types-file {}: {e}", path.display()))?;
        rules = duality_http::mime::parse_types_file(&text)
            .map_err(|e| anyhow::anyhow!("--types-file {}: {e}", path.display()))?;
    }
    rules.extend(a.types.iter().cloned());
    Ok(rules)
}

/// A size as nginx writes one (bytes, or with `k`, `m` or `g`).
pub(super) fn nginx_size(v: &str) -> Result<u64, String> {
    duality_http::fields::parse_size(v)
        .ok_or_else(|| format!("{v:?}: a size (bytes, or with k, m or g)"))
}

/// A text with the access log's variables, their values as they are
/// (`--secure-link`, `--secure-link-md5`).
fn log_text(v: &str) -> Result<duality_http::LogFormat, String> {
    duality_http::LogFormat::parse(v, duality_http::log_format::Escape::None)
}

/// `--alias "/PREFIX/ DIR"`.
fn alias(v: &str) -> Result<(String, PathBuf), String> {
    let (prefix, dir) = v
        .trim()
        .split_once(char::is_whitespace)
        .ok_or_else(|| format!("{v:?}: a prefix, then the directory"))?;
    if !(prefix.starts_with('/') && prefix.ends_with('/') && prefix.len() > 1) {
        return Err(format!(
            "{prefix:?}: a prefix starts and ends with / (and is not / alone: that is --root)"
        ));
    }
    if duality_http::path::normalize(prefix).ok().as_deref() != Some(prefix) {
        return Err(format!(
            "{prefix:?}: a prefix is a plain path (no //, . or .., no %)"
        ));
    }
    Ok((prefix.to_owned(), PathBuf::from(dir.trim())))
}

/// A path prefix (`--secure-link-prefix`): it starts with `/`.
fn url_prefix(v: &str) -> Result<String, String> {
    match v.starts_with('/') {
        true => Ok(v.to_owned()),
        false => Err(format!("{v:?}: a path starts with /")),
    }
}

/// `--allow`.
pub(super) fn allow_rule(v: &str) -> Result<duality_http::AccessRule, String> {
    duality_http::AccessRule::new(true, v)
}

/// `--deny`.
pub(super) fn deny_rule(v: &str) -> Result<duality_http::AccessRule, String> {
    duality_http::AccessRule::new(false, v)
}

/// The `--location` groups, a realm alone given the server's user file;
/// a user file that no realm uses is refused.
fn locations(a: &HttpArgs) -> anyhow::Result<Vec<duality_http::Location>> {
    let used = a.auth_basic.is_some() || a.location.iter().any(|l| l.takes_server_file());
    anyhow::ensure!(
        used || a.auth_basic_user_file.is_none(),
        "--auth-basic-user-file without --auth-basic (here or in a --location)"
    );
    a.location
        .iter()
        .map(|l| l.resolve(a.auth_basic_user_file.as_ref()))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)
}

/// `--allow` and `--deny` in the order they were given (nginx's rules are
/// ordered), from where each stood on the command line (`m`: the `http`
/// subcommand's matches; without them, allows first).
fn access_rules(a: &HttpArgs, m: Option<&clap::ArgMatches>) -> duality_http::Access {
    ordered_rules(&a.allow, &a.deny, m)
}

/// `allow` and `deny` interleaved as they stood in `m` (a `--location`'s
/// flags, or the `http` subcommand's).
pub(super) fn ordered_rules(
    allow: &[duality_http::AccessRule],
    deny: &[duality_http::AccessRule],
    m: Option<&clap::ArgMatches>,
) -> duality_http::Access {
    let mut rules = Vec::new();
    for (id, list) in [("allow", allow), ("deny", deny)] {
        let at: Vec<usize> = m
            .and_then(|m| m.indices_of(id))
            .map(|i| i.collect())
            .unwrap_or_default();
        for (k, rule) in list.iter().enumerate() {
            rules.push((at.get(k).copied().unwrap_or(usize::MAX), *rule));
        }
    }
    rules.sort_by_key(|&(at, _)| at);
    duality_http::Access {
        rules: rules.into_iter().map(|(_, r)| r).collect(),
    }
}

/// A field name for --real-ip-header, or `proxy_protocol`.
fn real_ip_header(v: &str) -> Result<String, String> {
    match v {
        duality_http::real_ip::PROXY_PROTOCOL => Ok(v.to_owned()),
        _ if !duality_http::fields::is_token(v) => Err(format!("{v:?} is not a field name")),
        _ => Ok(v.to_owned()),
    }
}

fn seconds(name: &str, v: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        v.is_finite() && v > 0.0,
        "--{name} must be a positive number of seconds"
    );
    Duration::try_from_secs_f64(v).map_err(|_| anyhow::anyhow!("--{name} {v}: too many seconds"))
}

/// `--shutdown-grace`: 0 (cut at once) or a number of seconds.
fn grace(v: f64) -> anyhow::Result<Duration> {
    if v == 0.0 {
        return Ok(Duration::ZERO);
    }
    seconds("shutdown-grace", v)
        .map_err(|_| anyhow::anyhow!("--shutdown-grace must be 0 or a number of seconds: {v}"))
}

/// The request size limits of the flags, checked: a limit the parser would
/// silently clamp, or that no request can meet, is refused at start-up.
fn limits(a: &HttpArgs) -> anyhow::Result<Limits> {
    // The shortest complete head: "GET / HTTP/1.0\r\n\r\n".
    const SHORTEST_HEAD: usize = 18;
    anyhow::ensure!(
        a.max_head_bytes >= SHORTEST_HEAD,
        "--max-head-bytes must be at least {SHORTEST_HEAD}"
    );
    anyhow::ensure!(a.max_uri_bytes >= 1, "--max-uri-bytes must be at least 1");
    anyhow::ensure!(
        !a.autoindex || a.autoindex_under.is_empty(),
        "--autoindex-under lists only under its prefixes, --autoindex on everywhere: give one"
    );
    anyhow::ensure!(
        (1..=MAX_HEADERS_CAP).contains(&a.max_headers),
        "--max-headers must be between 1 and {MAX_HEADERS_CAP}"
    );
    Ok(Limits {
        max_head: a.max_head_bytes,
        max_uri: a.max_uri_bytes,
        max_headers: a.max_headers,
        // Dropped as it arrives: no limit costs no memory.
        max_body: match a.max_body_bytes {
            0 => usize::MAX,
            n => n,
        },
    })
}

/// An `--index` name: a file name.
fn index_name(s: &str) -> Result<String, String> {
    duality_http::path::valid_index_name(s).map(|()| s.to_owned())
}

/// One `--listen` value: nginx's forms of a TCP address, or `unix:PATH`.
#[derive(Clone, Debug)]
enum Listen {
    Tcp(super::ListenAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        match s.strip_prefix("unix:") {
            Some("") => Err(format!(
                "{s:?}: give the socket's path, unix:PATH (unix:/run/duality-http.sock)"
            )),
            Some(path) => Ok(Listen::Unix(path.into())),
            None => s.parse().map(Listen::Tcp),
        }
    }
}

/// The Unix socket paths of `--listen` values, each once.
fn unix_listeners(list: &[Listen]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for l in list {
        if let Listen::Unix(p) = l {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
    }
    out
}

/// The TCP sockets to bind for `--listen` values: each address once
/// (`localhost:80` and `127.0.0.1:80`), and an IPv4 address left out where
/// `*:PORT` takes its port anyway (binding both would fail; nginx serves
/// such a pair from the wildcard socket too).
fn listeners(list: &[Listen]) -> Vec<SocketAddr> {
    let all: Vec<SocketAddr> = list
        .iter()
        .filter_map(|l| match l {
            Listen::Tcp(a) => Some(a),
            Listen::Unix(_) => None,
        })
        .flat_map(|l| l.0.iter().copied())
        .collect();
    let wildcard = |port: u16| {
        all.iter()
            .any(|a| a.port() == port && a.is_ipv4() && a.ip().is_unspecified())
    };
    let mut out = Vec::new();
    for a in all.iter().copied() {
        let covered =
            a.is_ipv4() && !a.ip().is_unspecified() && a.port() != 0 && wildcard(a.port());
        if !covered && !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// A count of at least 1 (0 would start a server that refuses everyone).
fn positive_usize(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The default `--max-conns`: 1024, or what the descriptor limit leaves
/// beside `reserved` (see [`descriptors_for`]).
fn default_max_conns(reserved: u64) -> usize {
    super::nofile().map_or(1024, |n| max_conns_for_limit(n, reserved))
}

fn max_conns_for_limit(nofile: u64, reserved: u64) -> usize {
    conns_within(nofile, reserved).clamp(1, 1024)
}

/// Descriptors the server keeps for itself: what
/// [`super::standing_descriptors`] counts for its model and listeners, and
/// at least 32.
fn reserved_descriptors(model: duality_models::Model, balance: Balance, listeners: usize) -> u64 {
    super::standing_descriptors(model, balance, listeners, 0).max(32)
}

/// Descriptors `max_conns` connections take at most: two each (its socket
/// and a file it sends), the refusals lingered over beside them, and
/// `reserved` for the server.
fn descriptors_for(max_conns: usize, reserved: u64) -> u64 {
    reserved + 2 * max_conns as u64 + duality_models::lingering_refusals(max_conns) as u64
}

/// The most connections whose descriptors fit `nofile`.
fn conns_within(nofile: u64, reserved: u64) -> usize {
    most_within(nofile, nofile.saturating_sub(reserved) / 2, |c| {
        descriptors_for(c, reserved)
    })
}

/// The most connections, from `start` down, whose `need` fits `nofile`
/// (0 when none does).
fn most_within(nofile: u64, start: u64, need: impl Fn(usize) -> u64) -> usize {
    let mut c = start as usize;
    while c > 0 && need(c) > nofile {
        c -= 1;
    }
    c
}

/// Connections that may send a file of their own at once when not all of
/// them can: a sixteenth, at least 16. Files from the page cache or the
/// open-file cache take no descriptor of the connection's; only a file
/// opened for one request does.
fn shared_file_room(max_conns: usize) -> u64 {
    (max_conns as u64 / 16).max(16)
}

/// Descriptors `max_conns` connections take with one each and a shared
/// room for files ([`shared_file_room`]), beside the refusals lingered
/// over and `reserved`: what an explicit `--max-conns` past
/// [`descriptors_for`] needs to be honoured.
fn descriptors_shared(max_conns: usize, reserved: u64) -> u64 {
    reserved
        + max_conns as u64
        + duality_models::lingering_refusals(max_conns) as u64
        + shared_file_room(max_conns)
}

/// The most connections whose descriptors fit `nofile` with a shared room
/// for files ([`descriptors_shared`]).
fn conns_within_shared(nofile: u64, reserved: u64) -> usize {
    most_within(nofile, nofile.saturating_sub(reserved), |c| {
        descriptors_shared(c, reserved)
    })
}

/// The default `--open-file-cache`: 1000, or what `nofile` leaves beside
/// `max_conns` connections' descriptors ([`descriptors_for`]).
fn open_files_for_limit(nofile: u64, max_conns: usize, reserved: u64) -> usize {
    open_files_room(nofile, max_conns, reserved).min(1000) as usize
}

/// Descriptors `nofile` leaves beside `max_conns` connections'
/// ([`descriptors_for`], or [`descriptors_shared`] where a file each does
/// not fit).
fn open_files_room(nofile: u64, max_conns: usize, reserved: u64) -> u64 {
    let need = descriptors_for(max_conns, reserved);
    let need = if need > nofile {
        descriptors_shared(max_conns, reserved)
    } else {
        need
    };
    nofile.saturating_sub(need)
}

pub fn run(mut a: HttpArgs, matches: Option<&clap::ArgMatches>) -> anyhow::Result<()> {
    // The servers' own writes (memory file, logs): not their children's.
    super::process::ignore_file_size_signal();
    a.io.apply();
    if let Some(n) = a.cpu_threads {
        duality_rt::pool::configure_cpu_pool(duality_rt::pool::PoolConfig {
            max_threads: n.into(),
            ..duality_rt::pool::PoolConfig::cpu()
        })?;
    }
    // The soft descriptor limit is raised toward what the connections and
    // the open-file cache take (never past the hard limit), as the cache's
    // -c does: a shell's usual 1024 would otherwise halve --max-conns and
    // turn the open-file cache off.
    let reserved = reserved_descriptors(
        a.model,
        a.accept_balance,
        listeners(&a.listen).len() + unix_listeners(&a.listen).len(),
    );
    super::raise_nofile(
        descriptors_for(a.max_conns.unwrap_or(1024), reserved)
            .saturating_add(a.open_file_cache.unwrap_or(1000) as u64),
    );
    let mut max_conns = *a
        .max_conns
        .get_or_insert_with(|| default_max_conns(reserved));
    if let Some(n) = super::nofile() {
        let need = descriptors_for(max_conns, reserved);
        let shared = descriptors_shared(max_conns, reserved);
        if need > n && shared <= n {
            // One descriptor each and a room for files fit: taken as asked,
            // as nginx takes worker_connections past the limit with a
            // warning (seed 000's 16,384 clients under this machine's
            // 20,000). Files from the caches need no descriptor; past the
            // room, a file opened for one request may get 503.
            let room = n - shared + shared_file_room(max_conns);
            duality_rt::say!(
                "duality http: warning: --max-conns {max_conns} takes up to {need} descriptors \
                 when every connection sends a file of its own, more than `ulimit -n` {n} \
                 allows; past about {room} such files at once (files not in the page or \
                 open-file cache), requests for them get 503"
            );
        } else if need > n {
            // Lowered to what fits, as the cache's -c: taken past it, the
            // connections' own descriptors leave none for the files they
            // ask for, and a burst gets 503 for every file (a reviewer's
            // 55 clients at `ulimit -n` 64: none served, seven never
            // accepted). nginx warns ("worker_connections exceed open file
            // resource limit") and carries on; its one accept per event
            // interleaves serving, ours drains the backlog at once.
            let fits = conns_within(n, reserved).max(conns_within_shared(n, reserved));
            anyhow::ensure!(
                fits > 0,
                "--max-conns {max_conns}: `ulimit -n` {n} leaves no descriptors for connections \
                 (the server keeps {reserved} for itself)"
            );
            duality_rt::say!(
                "duality http: warning: --max-conns {max_conns} takes up to {need} descriptors, \
                 more than `ulimit -n` {n} allows (and cannot be raised); taking at most {fits} \
                 connections, the rest get 503"
            );
            max_conns = fits;
            a.max_conns = Some(fits);
        }
    }
    let open_files = a.open_file_cache.unwrap_or_else(|| {
        super::nofile().map_or(0, |n| open_files_for_limit(n, max_conns, reserved))
    });
    if let Some(n) = super::nofile() {
        let room = open_files_room(n, max_conns, reserved);
        if open_files as u64 > room {
            duality_rt::say!(
                "duality http: warning: --open-file-cache {open_files} is more than the {room} \
                 descriptors `ulimit -n` {n} leaves beside --max-conns {max_conns}; when they \
                 run out, requests get 503"
            );
        }
    }
    if let Some(p) = &a.stub_status {
        anyhow::ensure!(
            p.starts_with('/'),
            "--stub-status must be a URL path starting with /, e.g. /nginx_status"
        );
    }
    anyhow::ensure!(
        a.real_ip_header != duality_http::real_ip::PROXY_PROTOCOL || a.proxy_protocol,
        "--real-ip-header proxy_protocol needs --proxy-protocol on"
    );
    let cfg = HttpConfig {
        root: a.root.clone(),
        aliases: a.aliases.clone(),
        symlinks: a.symlinks,
        cache_bytes: a.cache_size.saturating_mul(1 << 20),
        cache_max_file: a.cache_max_file.saturating_mul(1 << 10),
        sendfile_threshold: a.sendfile_threshold.saturating_mul(1 << 10),
        sendfile_kept: kib_or_never(a.sendfile_kept),
        sendfile_learn: kib_or_never(a.sendfile_learn),
        sendfile_learn_epoch: Duration::from_millis(a.sendfile_learn_epoch_ms),
        revalidate: Duration::from_millis(a.revalidate_ms),
        head_timeout: seconds("head-timeout", a.head_timeout)?,
        idle_timeout: seconds("idle-timeout", a.idle_timeout)?,
        write_timeout: seconds("write-timeout", a.write_timeout)?,
        lingering_timeout: seconds("lingering-timeout", a.lingering_timeout)?,
        lingering_time: seconds("lingering-time", a.lingering_time)?,
        keepalive_requests: a.keepalive_requests,
        keepalive_time: seconds("keepalive-time", a.keepalive_time)?,
        access_log: a.access_log.clone(),
        log_format: match &a.log_format {
            Some(f) => duality_http::LogFormat::parse(f, a.log_escape)
                .map_err(|e| anyhow::anyhow!("--log-format: {e}"))?,
            None => duality_http::LogFormat::default(),
        },
        limits: limits(&a)?,
        gzip: GzipConfig {
            enabled: a.gzip,
            level: a.gzip_level,
            min_length: a.gzip_min_length,
            max_length: a.gzip_max_size.saturating_mul(1 << 20),
            static_files: a.gzip_static.unwrap_or(a.gzip),
            http10: a.gzip_http_version == "1.0",
            cache_bytes: a.gzip_cache.saturating_mul(1 << 20),
            offload: a.offload,
            types: match &a.gzip_types {
                Some(list) => duality_http::GzipTypes::listed(list),
                None => duality_http::GzipTypes::Builtin,
            },
        },
        stub_status: a.stub_status.clone(),
        open_files,
        index: a.index.clone(),
        autoindex: a.autoindex,
        autoindex_under: a.autoindex_under.clone(),
        autoindex_style: duality_http::autoindex::Style {
            format: a.autoindex_format,
            exact_size: a.autoindex_exact_size,
            localtime: a.autoindex_localtime,
        },
        error_pages: a.error_page.clone(),
        try_files: a.try_files.clone(),
        deny_dotfiles: a.dotfiles,
        charset: (a.charset != "off").then(|| a.charset.clone()),
        types: types(&a)?,
        default_type: a.default_type.clone(),
        etag: a.etag,
        if_modified_since: a.if_modified_since,
        max_ranges: a.max_ranges,
        fields: duality_http::ResponseFields::new(
            a.expires.clone(),
            a.add_header
                .iter()
                .cloned()
                .chain(a.add_header_always.iter().map(|f| f.clone().always()))
                .collect(),
        )
        .map_err(anyhow::Error::msg)?,
        real_ip: duality_http::RealIp {
            from: a.real_ip_from.clone(),
            header: a.real_ip_header.clone(),
            recursive: a.real_ip_recursive,
        },
        access: access_rules(&a, matches),
        answer: a.answer.clone(),
        rewrites: a.rewrites.clone(),
        limit_req: a.limit_req.clone(),
        limit_conn: a.limit_conn,
        auth_basic: a.auth_basic.clone().zip(a.auth_basic_user_file.clone()),
        satisfy_any: a.satisfy == "any",
        proxy_protocol: a.proxy_protocol,
        valid_referers: a.valid_referers.clone(),
        secure_link: a
            .secure_link
            .clone()
            .zip(a.secure_link_md5.clone())
            .map(|(link, md5)| duality_http::SecureLink {
                link,
                md5,
                under: a.secure_link_prefix.clone(),
            }),
        absolute_redirect: a.absolute_redirect,
        limit_rate: a.limit_rate,
        limit_rate_after: a.limit_rate_after,
        locations: locations(&a)?,
    };
    let grace = grace(a.shutdown_grace)?;
    // Stop signals are caught from here on: before any thread starts (the
    // state's file closer and access log; see catch_signals), after the
    // descriptors are counted (the signal pipe is among the 16 kept for
    // later), and before `ready`: one sent while the server starts stops
    // it once it is up, cleanly.
    let mut signals = super::process::catch_signals(&[
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGQUIT,
        signal_hook::consts::SIGUSR1,
        signal_hook::consts::SIGHUP,
    ])?;
    let state = HttpState::new(cfg)?;
    // A page that cannot be served now leaves the built-in one: said once
    // at start (it may be deployed later, so not refused).
    let unservable: Vec<String> = a
        .error_page
        .iter()
        .filter(|p| !p.redirect)
        .filter_map(|p| match state.root().resolve(&p.uri) {
            Ok(duality_http::Resolved::File { .. }) => None,
            Ok(
                duality_http::Resolved::Redirect { .. } | duality_http::Resolved::Listing { .. },
            ) => Some(format!("--error-page {p}: {} is a directory", p.uri)),
            Err(e) => Some(format!(
                "--error-page {p}: {} is {}",
                p.uri,
                e.status.text()
            )),
        })
        .collect();
    if a.model == duality_models::Model::ThreadPerConn {
        // Connection threads come and go: allocate from the C library's
        // shared arenas, and give freed memory back.
        crate::alloc::use_system();
        crate::alloc::spawn_reclaimer(Duration::from_secs(1))?;
    }
    // Every loop thread gives back what it freed once it falls idle (memory
    // of closed connections would otherwise stay with the thread).
    duality_rt::set_default_idle_hook(crate::alloc::collect);
    let mut builder = ServerBuilder::new()
        .name("http")
        .model(a.model)
        .handoff(a.handoff.handoff)
        .accept_policy(a.accept)
        .balance(a.accept_balance)
        .long_poll_threshold(a.metrics.long_poll_threshold())
        .idle_spin(a.io.idle_spin())
        .cpu_affinity(a.io.cpu_affinity.clone())
        .loop_slice(a.io.loop_slice())
        .payload_spin(a.io.payload_spin())
        .max_conns(max_conns);
    for addr in listeners(&a.listen) {
        builder = builder.tcp(addr);
    }
    // As nginx: whoever may reach the path may connect (a proxy running as
    // another user); put it in a directory that limits who may.
    for path in unix_listeners(&a.listen) {
        builder = builder.unix(path).unix_mode(Some(0o666));
    }
    let root = super::process::is_root();
    if let (Some(user), true) = (&a.user, root) {
        let (user, dir) = (user.clone(), a.root.clone());
        builder = builder.after_bind(move || {
            super::process::assume_user(&user, "--user", "http")
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            // A root the user cannot search would answer every request 403.
            std::fs::metadata(dir.join(".")).map(drop).map_err(|e| {
                std::io::Error::other(format!(
                    "--user {user} cannot open --root {}: {e}",
                    dir.display()
                ))
            })
        });
    }
    let server = duality_http::serve(builder, state.clone())?;
    let st = state.clone();
    let _metrics = a.metrics.start("http", move || st.prometheus())?;
    // The URLs the server answers on, TCP first, in nginx's notation.
    let on: Vec<String> = server
        .tcp_addrs()
        .iter()
        .map(|a| format!("http://{a}"))
        .chain(
            unix_listeners(&a.listen)
                .iter()
                .map(|p| format!("unix:{}", p.display())),
        )
        .collect();
    let first = on
        .first()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no listening address"))?;
    let _pid_file = a
        .pid_file
        .as_deref()
        .map(|p| super::PidFile::write(p, "--pid-file"))
        .transpose()?;
    duality_rt::say_out!("ready {first}");
    use std::io::Write as _;
    std::io::stdout().flush()?;
    duality_rt::say!(
        "duality http: serving {} on {} ({}{}, {}, max {} connections, {} files kept open, gzip {})",
        a.root.display(),
        on.join(", "),
        a.model,
        a.handoff.label(a.model),
        a.accept,
        max_conns,
        open_files,
        match (a.gzip, a.gzip_static) {
            (true, _) => format!("on, level {}, offload {}", a.gzip_level, a.offload),
            (false, Some(true)) => "static files only".to_owned(),
            (false, _) => "off".to_owned(),
        }
    );
    a.io.say_affinity("duality http");
    // Said after the serving line: a start that fails says its one line
    // only.
    if let Some(Last::Uri(uri)) = a.try_files.as_ref().map(|t| t.last()) {
        if let Err(e) = state.root().resolve(uri) {
            duality_rt::say!(
                "duality http: warning: --try-files: {uri} is {} under --root: requests no \
                 entry names get that answer until it can be served",
                e.status.text()
            );
        }
    }
    for what in &unservable {
        duality_rt::say!(
            "duality http: warning: {what} under --root: those errors get the built-in page \
             until it can be served"
        );
    }
    match (&a.user, root) {
        (Some(user), false) => {
            duality_rt::say!("duality http: warning: --user {user} ignored: not started as root")
        }
        (None, true) => duality_rt::say!(
            "duality http: warning: serving as root: every file root can read under --root \
             can be served; give --user (nginx's `user`, e.g. --user nobody)"
        ),
        _ => {}
    }
    // SIGUSR1 reopens the access log (nginx's reopen); SIGHUP, nginx's
    // reload, has nothing to reload here and no longer kills the server;
    // SIGTERM, SIGINT and SIGQUIT (nginx's graceful quit) stop it, with
    // --shutdown-grace for requests in flight.
    for sig in signals.forever() {
        match sig {
            signal_hook::consts::SIGUSR1 => state.reopen_log(),
            signal_hook::consts::SIGHUP => {
                duality_rt::say!(
                    "duality http: SIGHUP ignored (there is no configuration to reload)"
                )
            }
            _ => break,
        }
    }
    use signal_hook::consts::{SIGINT, SIGQUIT, SIGTERM};
    let now = super::second_signal("http", &[SIGTERM, SIGINT, SIGQUIT], signals);
    let report = server.shutdown_or(grace, &now);
    if report.cut_off > 0 {
        duality_rt::say!(
            "duality http: {} connection{} cut off at shutdown",
            report.cut_off,
            if report.cut_off == 1 { "" } else { "s" }
        );
    }
    // Every answer's line is in the log before the process ends (its
    // writer thread would be cut off with lines still queued).
    if !state.sync_log(Duration::from_secs(5)) {
        duality_rt::say!("duality http: the access log's last lines were not written within 5 s");
    }
    Ok(())
}

/// A size flag in KiB where 0 means never: bytes, or `u64::MAX`.
fn kib_or_never(kib: u64) -> u64 {
    match kib {
        0 => u64::MAX,
        kib => kib.saturating_mul(1 << 10),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_size_in_kib_of_zero_is_never() {
        assert_eq!(super::kib_or_never(0), u64::MAX);
        assert_eq!(super::kib_or_never(16), 16 << 10);
        assert_eq!(super::kib_or_never(u64::MAX), u64::MAX);
    }

    #[test]
    fn listeners_bind_each_address_once_and_defer_to_a_wildcard() {
        let parse =
            |v: &[&str]| -> Vec<super::Listen> { v.iter().map(|s| s.parse().unwrap()).collect() };
        let got = |v: &[&str]| -> Vec<String> {
            super::listeners(&parse(v))
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(got(&["127.0.0.1:80", "127.0.0.1:80"]), ["127.0.0.1:80"]);
        assert_eq!(got(&["127.0.0.1:80", "*:80"]), ["0.0.0.0:80"]);
        assert_eq!(
            got(&["127.0.0.1:80", "*:81", "[::1]:80"]),
            ["127.0.0.1:80", "0.0.0.0:81", "[::1]:80"]
        );
        // Port 0 picks a port per socket: never covered by a wildcard's.
        assert_eq!(got(&["127.0.0.1:0", "*:0"]), ["127.0.0.1:0", "0.0.0.0:0"]);
        // Unix sockets are bound apart, each path once.
        let mixed = parse(&[
            "unix:/run/a.sock",
            "127.0.0.1:80",
            "unix:/run/a.sock",
            "unix:b",
        ]);
        assert_eq!(super::listeners(&mixed), ["127.0.0.1:80".parse().unwrap()]);
        assert_eq!(
            super::unix_listeners(&mixed),
            [std::path::PathBuf::from("/run/a.sock"), "b".into()]
        );
        let err = "unix:".parse::<super::Listen>().unwrap_err();
        assert!(err.contains("unix:PATH"), "{err}");
    }

    #[test]
    fn max_conns_follows_the_descriptor_limit() {
        assert_eq!(super::max_conns_for_limit(20_000, 32), 1024);
        // 32 + 2 x 467 + 467 / 8 = 1024.
        assert_eq!(super::max_conns_for_limit(1024, 32), 467);
        assert_eq!(super::descriptors_for(467, 32), 1024);
        // At least 4 refusals may linger: 32 + 2 x 2 + 4.
        assert_eq!(super::max_conns_for_limit(40, 32), 2);
        assert_eq!(super::max_conns_for_limit(10, 32), 1);
        // A server that keeps more for itself takes fewer: 131 + 2 x 420
        // + 420 / 8 = 1023.
        assert_eq!(super::max_conns_for_limit(1024, 131), 420);
    }

    #[test]
    fn the_reserve_grows_with_the_threads() {
        use duality_models::{Balance, Model};
        // What is open in this process (parallel tests open files too)
        // moves these a little: relations, not exact counts.
        let small = super::reserved_descriptors(Model::Symped { n: 1 }, Balance::RoundRobin, 1);
        assert!(small >= 32, "{small}");
        let many = super::reserved_descriptors(Model::Symped { n: 32 }, Balance::RoundRobin, 1);
        // Three for each of 32 loops and the acceptor, the listener, 16
        // spare, and the standard streams.
        assert!(many >= 99 + 1 + 16 + 3, "{many}");
        let per_loop = super::reserved_descriptors(Model::Symped { n: 32 }, Balance::ReusePort, 1);
        assert!(per_loop >= many + 16, "{per_loop} against {many}");
    }

    #[test]
    fn open_files_take_what_connections_leave() {
        assert_eq!(super::open_files_for_limit(20_000, 1024, 32), 1000);
        // 1024 connections take 32 + 2048 + 128.
        assert_eq!(super::open_files_for_limit(3_000, 1024, 32), 792);
        // 1024 descriptors: max_conns 467 takes them all.
        assert_eq!(super::open_files_for_limit(1024, 467, 32), 0);
        assert_eq!(super::open_files_for_limit(10, 1, 32), 0);
        // Past a file each: what one each, the refusals and the shared
        // room for files leave (32 + 16448 + 2056 + 1028).
        assert_eq!(super::open_files_for_limit(20_000, 16_448, 32), 436);
    }

    #[test]
    fn one_descriptor_each_and_a_shared_room_for_files() {
        assert_eq!(super::shared_file_room(100), 16);
        assert_eq!(super::shared_file_room(16_448), 1028);
        assert_eq!(super::descriptors_shared(16_448, 32), 19_564);
        // Seed 000's 16,384 clients (and the bench's 64 more) fit 20,000;
        // a file each would not (9,397).
        let fits = super::conns_within_shared(20_000, 32);
        assert!(fits >= 16_448, "{fits}");
        assert!(super::descriptors_shared(fits, 32) <= 20_000);
        assert!(super::descriptors_shared(fits + 1, 32) > 20_000);
        assert_eq!(super::conns_within(20_000, 32), 9_397);
        // At `ulimit -n` 64 a file each still admits more (14 against 12).
        assert_eq!(super::conns_within_shared(64, 32), 12);
        assert_eq!(super::conns_within(64, 32), 14);
    }
}
