//! # duality-http — the static web server (the seeds' Knot)
//!
//! Two layers. Everything the server *decides* is pure functions over bytes
//! plus a few blocking file-system calls, with no sockets, no async and no
//! runtime; [`HttpProtocol`] puts it on the session driver of
//! `duality-models` (the same connection loop as the cache's), which does the
//! reading, batching, writing and timeouts under any threading model; the
//! protocol's `finish` sends file bodies (`sendfile`, or reads through the
//! io_uring ring) and runs lookups on the blocking pool.
//!
//! | module | what |
//! |---|---|
//! | [`request`] | [`parse_head`]: request head from a byte buffer (`httparse`), limits, keep-alive, pipelining |
//! | [`path`] | [`normalize`](path::normalize) (decode, refuse hostile targets) and [`Root::resolve`] (symlinks confined to the root); [`Roots`], the root with `--alias`'s directories |
//! | [`mime`] | `Content-Type` by extension |
//! | [`encoding`] | [`AcceptEncoding`]: the `Accept-Encoding` list, parsed (pure, property-tested) |
//! | [`gzip`] | which files and requests get gzip, the type list, [`gzip::compress`] and the one seam it runs through ([`gzip::run`], inline or on the CPU pool) |
//! | [`response`] | [`plan_file`] / [`plan_encoded`], [`write_error`], [`write_redirect`]: status decision (304/206/416/405…) and the response head, identity or gzip |
//! | [`cache`] | [`PageCache`]: bounded, sharded LRU of small files (and, as a second instance, of gzip variants), invalidated by size+mtime+inode |
//! | [`mod@file`] | [`FileMeta`] (validators), [`ETag`], [`file::open`] |
//! | [`date`] | [`DateCache`]: the `Date` field, formatted at most once per second |
//! | [`status`] | [`Status`], [`HttpError`] (status + whether to close) |
//! | [`autoindex`] | directory listings in nginx's `autoindex` format |
//! | [`error_page`] | [`ErrorPage`]: nginx's `error_page`, a page of the root answering some errors |
//! | [`access`] | [`Access`]: nginx's `allow` / `deny`, who is served at all |
//! | [`limit_conn`] | [`LimitConn`]: nginx's `limit_conn`, connections per client address with a request in progress |
//! | [`limit_req`] | [`LimitReq`]: nginx's `limit_req`, requests per client address held to a rate (leaky buckets, bounded) |
//! | [`location`] | [`Location`]: nginx's `location` blocks (prefix, `^~`, exact, regex), for the settings that may differ by path (access, `auth_basic`, `return`, `try_files`, error pages, gzip, added fields, `limit_rate`, logging) |
//! | [`log_format`] | [`LogFormat`]: nginx's `log_format`, the access log's line with its variables and escaping |
//! | [`auth_basic`] | [`AuthBasic`]: nginx's `auth_basic` with a user file, a password over the whole server (hashes checked on the blocking pool) |
//! | [`real_ip`] | [`RealIp`]: nginx's realip, the client's address as a trusted proxy reports it, for the access log, `allow`/`deny` and `limit_req` |
//! | [`proxy_protocol`] | [`proxy_protocol::parse`]: the PROXY protocol header (v1, v2) a TCP load balancer sends first, nginx's `listen … proxy_protocol` (pure, property-tested, fuzzed) |
//! | [`referer`] | [`ValidReferers`]: nginx's `valid_referers` with `if ($invalid_referer) { return 403; }`, hot-link protection |
//! | [`return_directive`] | [`Return`]: nginx's server-level `return`, one answer (a redirect, a text, a status) for every request |
//! | [`rewrite`] | [`Rewrite`]: nginx's server-level `rewrite`, a request's path changed by a pattern, or a redirect |
//! | [`secure_link`] | [`SecureLink`]: nginx's `secure_link` and `secure_link_md5`, links signed with a secret and an expiry (403, 410) |
//! | [`try_files`] | [`TryFiles`]: nginx's `try_files`, the names a request may be served by, then a last resort |
//! | [`fields`] | [`ResponseFields`]: nginx's `expires` ([`Expires`]) and `add_header` ([`AddedField`]), fields added to answers |
//! | [`server`] | [`HttpConfig`], [`HttpState`] (root, page cache, variant cache, fresh index, access log), [`serve`] |
//! | `connection` | [`HttpProtocol`] on the session driver ([`driver`]): parse, execute from memory, finish on the loop (lookups, `sendfile`, gzip), timeouts' answers, lingering close |
//! | `sys` | `sendfile(2)` and blocking-socket timeouts: the crate's only `unsafe` |
//!
//! ## How a connection uses it ([`HttpProtocol`] on the driver does this)
//!
//! ```text
//! loop:
//!   read into buf (capacity limits.max_request()), with the header timeout
//!     timeout → write_error(HttpError::close(Status::RequestTimeout), None, …), close
//!   while let Some((head, n)) = parse_head(&buf, &limits)?   // Err → write_refusal(e, line, …), close
//!     continue_due(&head, &buf[n..]) → out += CONTINUE
//!     Discard::new(&head) → drop its body as it arrives (skip), before the next head
//!     method not GET/HEAD → write_error(405)
//!     root.resolve(&head.path)                               // blocking: Payload::blocking (payload threads or the blocking pool)
//!       Redirect → write_redirect;  Err(e) → write_error(e, Some(&head), …)
//!       File { path, meta } →
//!         cache.get(&path, &meta) = Some(bytes) → plan_file(&head, &meta, …); body = bytes[range]
//!         else file::open(&path) → (file, meta)             // validators from fstat
//!           plan_file(&head, &meta, mime::for_path(&path), date, &mut out)
//!           cache.admits(meta.size) → read whole, cache.insert, body = bytes[range]
//!           otherwise                → sendfile(file, plan.body) after writing out
//!     drop n bytes of buf
//!   write out (all pipelined responses of this read in one write), then bodies
//!   if !plan.keep_alive: close
//! ```
//!
//! With gzip on (see [`gzip`]), a request that [wants](gzip::wanted) gzip
//! for an [eligible](gzip::eligible) file is answered with its gzip variant
//! instead: from the variant cache, a fresh `FILE.gz`, or the file
//! compressed through [`gzip::run`], its head written by [`plan_encoded`].
//!
//! Responses to pipelined requests are appended to the same `out` buffer in
//! order, so one `write` carries many heads: that is the batching point.
//! If a file shrinks between `fstat` and the read, the promised
//! `Content-Length` cannot be met: close the connection after what could be
//! sent.
//!
//! The same flow, synchronous and over in-memory buffers (a file body is
//! appended to `out` where the real handler would `sendfile`):
//!
//! ```
//! use std::io::Read;
//! use std::os::unix::fs::FileExt;
//! use std::sync::Arc;
//! use duality_http::{
//!     file, mime, parse_head, plan_file, write_error, write_redirect, write_refusal, DateCache,
//!     Head, HttpError, Limits, Method, PageCache, Plan, Resolved, Root, Status,
//! };
//!
//! /// Answers every complete request at the front of `input`; returns the
//! /// bytes consumed and whether the connection stays open.
//! fn answer(input: &[u8], root: &Root, cache: &PageCache, date: &str, out: &mut Vec<u8>) -> (usize, bool) {
//!     let limits = Limits::default();
//!     let mut used = 0;
//!     loop {
//!         match parse_head(&input[used..], &limits) {
//!             Ok(None) => return (used, true), // read more
//!             Err(e) => {
//!                 write_refusal(e, Some(&input[used..]), date, out);
//!                 return (used, false);
//!             }
//!             Ok(Some((head, n))) => {
//!                 used += n;
//!                 if !respond(&head, root, cache, date, out).keep_alive {
//!                     return (used, false);
//!                 }
//!             }
//!         }
//!     }
//! }
//!
//! fn respond(head: &Head<'_>, root: &Root, cache: &PageCache, date: &str, out: &mut Vec<u8>) -> Plan {
//!     if head.method == Method::Other {
//!         return write_error(HttpError::keep(Status::MethodNotAllowed), Some(head), date, out);
//!     }
//!     let (path, meta) = match root.resolve(&head.path) {
//!         Ok(Resolved::File { path, meta }) => (path, meta),
//!         Ok(Resolved::Redirect { location }) => return write_redirect(head, &location, date, out),
//!         // Only a root made `with_autoindex(true)` lists directories.
//!         Ok(Resolved::Listing { .. }) => unreachable!(),
//!         Err(e) => return write_error(e, Some(head), date, out),
//!     };
//!     let content_type = mime::for_path(&path);
//!     if let Some(bytes) = cache.get(&path, &meta) {
//!         let plan = plan_file(head, &meta, content_type, date, out);
//!         if let Some(r) = plan.body {
//!             out.extend_from_slice(&bytes[r.start as usize..r.end() as usize]);
//!         } else if let Some(parts) = &plan.parts {
//!             // Several ranges: multipart/byteranges (false: the file shrank).
//!             assert!(parts.write(&bytes, out));
//!         }
//!         return plan;
//!     }
//!     let (mut f, meta) = match file::open(&path) {
//!         Ok(opened) => opened,
//!         Err(e) => return write_error(HttpError::from_io(&e), Some(head), date, out),
//!     };
//!     let plan = plan_file(head, &meta, content_type, date, out);
//!     if cache.admits(meta.size) {
//!         let mut bytes = Vec::with_capacity(meta.size as usize);
//!         f.read_to_end(&mut bytes).unwrap();
//!         let bytes: Arc<[u8]> = bytes.into();
//!         cache.insert(&path, &meta, Arc::clone(&bytes));
//!         if let Some(r) = plan.body {
//!             out.extend_from_slice(&bytes[r.start as usize..r.end() as usize]);
//!         } else if let Some(parts) = &plan.parts {
//!             assert!(parts.write(&bytes, out));
//!         }
//!     } else if let Some(r) = plan.body {
//!         // The real handler writes `out`, then sendfile(f, r.start, r.len).
//!         let mut body = vec![0; r.len as usize];
//!         f.read_exact_at(&mut body, r.start).unwrap();
//!         out.extend_from_slice(&body);
//!     } else if let Some(parts) = &plan.parts {
//!         // Each part's head, then its span (sendfile in the real handler).
//!         for (part_head, r) in &parts.parts {
//!             out.extend_from_slice(part_head);
//!             let mut body = vec![0; r.len as usize];
//!             f.read_exact_at(&mut body, r.start).unwrap();
//!             out.extend_from_slice(&body);
//!         }
//!         out.extend_from_slice(&parts.end);
//!     }
//!     plan
//! }
//!
//! let dir = std::env::temp_dir().join(format!("duality-http-doc-{}", std::process::id()));
//! std::fs::create_dir_all(dir.join("docs")).unwrap();
//! std::fs::write(dir.join("hello.txt"), "hello, world").unwrap();
//! let root = Root::new(&dir).unwrap();
//! let cache = PageCache::new(1 << 20, 64 << 10);
//! let mut dates = DateCache::new();
//!
//! let input = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n\
//!               GET /hello.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=7-\r\n\r\n\
//!               GET /docs HTTP/1.1\r\nHost: x\r\n\r\n\
//!               GET /../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n\
//!               GET /never-reached HTTP/1.1\r\nHost: x\r\n\r\n";
//! let mut out = Vec::new();
//! let (used, keep_alive) = answer(input, &root, &cache, dates.now(), &mut out);
//! let text = String::from_utf8(out).unwrap();
//!
//! assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
//! assert!(text.contains("\r\n\r\nhello, worldHTTP/1.1 206 Partial Content\r\n"));
//! assert!(text.contains("Content-Range: bytes 7-11/12\r\n"));
//! assert!(text.contains("\r\n\r\nworldHTTP/1.1 301 Moved Permanently\r\n"));
//! assert!(text.contains("Location: /docs/\r\n"));
//! assert!(text.contains("HTTP/1.1 400 Bad Request\r\n"));
//! assert!(!keep_alive && !text.contains("never-reached"));
//! assert!(input[used..].starts_with(b"GET /../etc/passwd"));
//! assert_eq!(cache.stats().hits, 1);
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! Invariants, tested beside the code: `parse_head` never panics and answers
//! `Ok(None)` for every proper prefix of a valid request (property tests);
//! no target resolves outside the root (table of hostile targets with
//! symlinks in a temp dir, and a property test); the page cache never serves
//! bytes under validators other than those they were stored with.
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]
// `unsafe` is allowed in `sys` only.
#![deny(unsafe_code)]

pub mod access;
pub mod auth_basic;
pub mod autoindex;
pub mod cache;
mod connection;
pub mod date;
pub mod encoding;
pub mod error_page;
pub mod fields;
pub mod file;
pub mod gzip;
pub mod limit_conn;
pub mod limit_req;
pub mod location;
pub mod log_format;
pub mod mime;
pub mod path;
pub mod proxy_protocol;
pub mod real_ip;
pub mod referer;
pub mod request;
pub mod response;
pub mod return_directive;
pub mod rewrite;
pub mod secure_link;
mod send_path;
pub mod server;
pub mod status;
mod sys;
pub mod try_files;

pub use access::{Access, AccessRule};
pub use auth_basic::AuthBasic;
pub use cache::{CacheStats, PageCache};
pub use connection::{driver, HttpProtocol, HttpRequest, HttpSession};
pub use date::DateCache;
pub use encoding::AcceptEncoding;
pub use error_page::ErrorPage;
pub use fields::{AddedField, Expires, ResponseFields};
pub use file::{ETag, FileMeta};
pub use gzip::{GzipConfig, GzipTypes, Offload};
pub use limit_conn::{LimitConn, LimitConnConfig};
pub use limit_req::{LimitReq, LimitReqConfig};
pub use location::Location;
pub use log_format::LogFormat;
pub use path::{Resolved, Root, Roots, Symlinks};
pub use real_ip::{RealIp, Trusted};
pub use referer::ValidReferers;
pub use request::{parse_head, Discard, Head, Limits, Method, Version};
pub use response::{
    plan_encoded, plan_error_page, plan_file, write_error, write_redirect, write_redirect_to,
    write_refusal, write_returned, ByteRange, Encoding, IfModifiedSince, Parts, Plan, MAX_PARTS,
};
pub use return_directive::Return;
pub use rewrite::Rewrite;
pub use secure_link::SecureLink;
pub use server::{serve, stub_status, HttpConfig, HttpState, HttpStats};
pub use status::{HttpError, Status};
pub use try_files::TryFiles;
