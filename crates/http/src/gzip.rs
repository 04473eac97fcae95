//! gzip for `duality http`, as nginx users expect from `gzip on` (plus
//! `gzip_static`, `gzip_vary` and a cache of compressed variants).
//!
//! Off by default, as in nginx; [`GzipConfig`] turns it on (compression on
//! request, `.gz` files, or both: [`GzipConfig::on`] is `--gzip on`, and
//! `.gz` files alone are nginx's `gzip_static on` without `gzip on`). Then a
//! file is **eligible** ([`eligible`]) when its type is on the list ([`compressible`],
//! [`TYPES`]) and it has at least [`GzipConfig::min_length`] bytes; every
//! response for an eligible file, encoded or not (304, 206, HEAD, 416
//! included), carries `Vary: Accept-Encoding` (with `.gz` files alone, only
//! where a fresh `.gz` lies beside the file: nginx's `gzip_static` varies
//! only those). A request **wants** gzip
//! ([`wanted`]) when its `Accept-Encoding` prefers it
//! ([`AcceptEncoding::prefers_gzip`](crate::encoding::AcceptEncoding)) and it
//! has no `Range`: range requests are answered from the identity body, 206
//! as without gzip. Both hold → the response is the gzip variant:
//!
//! ```text
//!   1. the variant cache (key: the file's canonical path; valid only under
//!      the size, mtime and inode it was made from)            → answer
//!   2. gzip_static: `<file>.gz` beside the file (found by the same
//!      Root code as any file: confined to the root, symlinks followed only
//!      inside it), a regular file at least as new as the file → answer from
//!      it (read into the variant cache if it fits, else sendfile)
//!   3. compression is on and the file has at most `max_length` bytes →
//!      compress it ([`run`]: the
//!      single place compression runs, inline or on the CPU pool), store the
//!      result in the variant cache                           → answer
//!   4. otherwise the identity body (with Vary).
//! ```
//!
//! The variant's head: the file's `Content-Type` and `Last-Modified`,
//! `Content-Encoding: gzip`, the `Content-Length` of the gzip body (HEAD
//! too, so a HEAD may compress), the variant's own strong `ETag`
//! ([`ETag::gzip_variant`](crate::ETag::gzip_variant), the file's tag with
//! `-gzip`: see there why), `Vary`, and no `Accept-Ranges`. `If-None-Match`
//! is compared with that tag, and a 304 is decided **before** anything is
//! compressed. A `.gz` is only ever sent to a request that wants gzip: a
//! request for `file` never gets `file.gz` otherwise, and a stale `.gz`
//! (older than `file`) is never sent. A `file.gz` whose `file` does not
//! exist is sent, typed by `file`'s name and with its own validators, to a
//! request that [`takes`] gzip (as nginx's `gzip_static` does); any other
//! gets the 404, with `Vary` (nginx's `gzip_vary`).
//!
//! Defaults, and why (figures: flate2 with zlib-rs, release build, on 20 KB
//! and 1 MB of this repository's sources, the 2-core machine, noisy):
//! - level 1, nginx's `gzip_comp_level` default. In zlib-rs (as in
//!   zlib-ng) it is the "quick" strategy: 0.09 ms for 20 KB, 6-8 ms per MB,
//!   output 46% / 39% of the input; level 2 gives 36% / 30% for 1.5-2.3x
//!   that CPU, level 6 34% / 26% for 3-5x. Level 2 is the knee:
//!   `--gzip-level 2` where bandwidth matters more than CPU.
//! - 256-byte minimum: below that the 18-byte gzip frame and the work save
//!   next to nothing.
//! - 16 MiB maximum for compressing on request: at level 1 such a file holds
//!   a core for about 0.1-0.15 s (read in pieces, its result held whole in
//!   memory);
//!   pre-compress larger files, `gzip_static` has no maximum.
//! - a 64 MiB variant cache (the page cache's size);
//! - compression inline on the loop (what nginx does in its workers;
//!   `--offload pool` moves it to the CPU pool, `--offload adaptive`
//!   decides per size class; both through [`run`]).

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use flate2::write::GzEncoder;
use flate2::Compression;

use crate::request::{Head, Version};

/// How gzip behaves (see the [module docs](self)); [`GzipConfig::default`]
/// is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GzipConfig {
    /// Whether files are compressed on request (`--gzip on|off`).
    pub enabled: bool,
    /// Compression level, 1 (fastest) to 9 (smallest).
    pub level: u32,
    /// Files smaller than this (bytes) are never compressed nor get `Vary`.
    pub min_length: u64,
    /// Files larger than this (bytes) are not compressed on request (a
    /// fresh `.gz` beside them is still served).
    pub max_length: u64,
    /// Whether a fresh `file.gz` beside `file` is served as its gzip variant
    /// (nginx's `gzip_static`), with or without `enabled`.
    pub static_files: bool,
    /// Whether HTTP/1.0 requests get gzip variants too (nginx's
    /// `gzip_http_version 1.0`); by default only HTTP/1.1 ones do, as
    /// nginx's `gzip_http_version 1.1`, since an HTTP/1.0 cache may ignore
    /// `Vary` and hand the encoded body to a client that cannot read it.
    /// Their responses still carry `Vary`.
    pub http10: bool,
    /// Budget of the variant cache in bytes (0: off).
    pub cache_bytes: usize,
    /// Where compression runs.
    pub offload: Offload,
    /// Which types have a variant (nginx's `gzip_types`).
    pub types: GzipTypes,
}

/// Which media types have a gzip variant (`--gzip-types`, nginx's
/// `gzip_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GzipTypes {
    /// The built-in list, [`compressible`] (nginx's default is `text/html`
    /// alone, which nearly every configuration widens).
    #[default]
    Builtin,
    /// `text/html` (always, as in nginx) and these types, lower-case, without
    /// parameters.
    Listed(&'static [&'static str]),
    /// Every type (`*`).
    Any,
}

impl GzipTypes {
    /// The types `list` names, as `--gzip-types` gives them (`*` among them:
    /// [`GzipTypes::Any`]). Made once per server and kept for the process.
    pub fn listed(list: &[String]) -> GzipTypes {
        if list.iter().any(|t| t == "*") {
            return GzipTypes::Any;
        }
        let types: Vec<&'static str> = list
            .iter()
            .map(|t| &*Box::leak(t.to_ascii_lowercase().into_boxed_str()))
            .collect();
        GzipTypes::Listed(Box::leak(types.into_boxed_slice()))
    }

    /// Whether a file of `content_type` at `path` has a variant under these
    /// types.
    pub fn admit(self, path: &Path, content_type: &str) -> bool {
        match self {
            GzipTypes::Builtin => compressible(path, content_type),
            GzipTypes::Any => true,
            GzipTypes::Listed(types) => {
                let essence = essence(content_type);
                essence.eq_ignore_ascii_case("text/html")
                    || types.iter().any(|t| t.eq_ignore_ascii_case(essence))
            }
        }
    }
}

/// A `Content-Type` value without its parameters and the blanks around.
fn essence(content_type: &str) -> &str {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim_matches([' ', '\t'])
}

impl Default for GzipConfig {
    /// Off; when turned on: level 1, 256 bytes minimum, 16 MiB maximum,
    /// a 64 MiB variant cache, compression adaptive.
    fn default() -> GzipConfig {
        GzipConfig {
            enabled: false,
            level: 1,
            min_length: 256,
            max_length: 16 << 20,
            static_files: false,
            http10: false,
            cache_bytes: 64 << 20,
            // `duality bench offload`: 30-39x lower p99 for everybody else
            // than inline at the same heavy throughput.
            offload: Offload::Adaptive,
            types: GzipTypes::Builtin,
        }
    }
}

impl GzipConfig {
    /// What `--gzip on` gives: compression on request and `.gz` files, the
    /// rest as [`Default`].
    pub fn on() -> GzipConfig {
        GzipConfig {
            enabled: true,
            static_files: true,
            ..GzipConfig::default()
        }
    }

    /// Whether any file may have a gzip variant: compression or `.gz` files.
    pub fn has_variants(&self) -> bool {
        self.enabled || self.static_files
    }

    /// The largest variant the cache takes: an eighth of its budget (so it
    /// keeps 8 shards at least, see [`PageCache`](crate::PageCache)).
    pub fn cache_max_entry(&self) -> usize {
        self.cache_bytes / 8
    }
}

/// Where CPU-heavy work of a request (compression) runs: inline, on the CPU
/// pool, or adaptively per size class (`--offload`).
pub use duality_rt::adaptive::OffloadPolicy as Offload;

/// The media types compressed, besides every `text/*` and every
/// `…+json` / `…+xml` type. Images, audio, video, fonts in WOFF and archives
/// are compressed already and are not on it.
pub const TYPES: &[&str] = &[
    "application/json",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "application/xml",
    "application/wasm",
    "application/x-ndjson",
    "image/svg+xml",
    "image/x-icon",
    "image/vnd.microsoft.icon",
    "image/bmp",
    "font/ttf",
    "font/otf",
];

/// Whether a file of `content_type` (a `Content-Type` value; parameters and
/// case do not matter) at `path` is worth compressing: `text/*`, a type
/// ending in `+json` or `+xml`, or one of [`TYPES`]. `.svgz` files, gzip
/// already though typed `image/svg+xml`, are not.
pub fn compressible(path: &Path, content_type: &str) -> bool {
    let essence = essence(content_type);
    let starts = |prefix: &str| {
        essence
            .get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    let ends = |suffix: &str| {
        essence.len() > suffix.len()
            && essence
                .get(essence.len() - suffix.len()..)
                .is_some_and(|s| s.eq_ignore_ascii_case(suffix))
    };
    let listed = (starts("text/") && essence.len() > 5)
        || ends("+json")
        || ends("+xml")
        || TYPES.iter().any(|t| t.eq_ignore_ascii_case(essence));
    listed
        && !path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svgz"))
}

/// Whether a file has a gzip variant under `cfg`: compression or `.gz`
/// files on, a type [`cfg.types`](GzipConfig::types) admits
/// ([`compressible`] by default), at least `min_length` bytes (a `.gz`
/// beside any other file is not sent: the same files get `Vary` whichever
/// way their variant is made). Its responses carry `Vary: Accept-Encoding`.
pub fn eligible(cfg: &GzipConfig, path: &Path, content_type: &str, size: u64) -> bool {
    cfg.has_variants() && size >= cfg.min_length && cfg.types.admit(path, content_type)
}

/// Whether `head` is answered with the gzip variant of an [`eligible`] file:
/// it [`takes`] gzip, its `Accept-Encoding` prefers gzip to identity, and it
/// has no `Range` (a range is served from the identity body).
pub fn wanted(cfg: &GzipConfig, head: &Head<'_>) -> bool {
    takes(cfg, head) && head.accept_encoding.prefers_gzip() && head.range.is_none()
}

/// Whether `head` may be sent a gzip body at all: compression or `.gz` files
/// on, its `Accept-Encoding` accepts gzip (a weight above 0), and it is
/// HTTP/1.1 (or [`GzipConfig::http10`] allows HTTP/1.0). A lone `file.gz`
/// answers such a request, even one preferring identity (there is none to
/// prefer) or with a `Range` (the whole body, 200: there is no identity
/// body to take the range from).
pub fn takes(cfg: &GzipConfig, head: &Head<'_>) -> bool {
    cfg.has_variants()
        && (cfg.http10 || head.version == Version::Http11)
        && head.accept_encoding.gzip_weight() > 0
}

/// What a compression reads: bytes in memory (a small file, read whole
/// into the page cache), or a large file read in pieces by the job itself,
/// wherever it runs, so that no thread at the loops' priority copies it
/// whole first (the file was read ahead on the blocking pool).
#[derive(Debug, Clone)]
pub enum GzipInput {
    /// The identity body.
    Bytes(Arc<[u8]>),
    /// The first `len` bytes of `file`.
    File {
        /// Open for reading.
        file: Arc<std::fs::File>,
        /// Bytes to compress; a file found shorter fails the job.
        len: u64,
    },
}

impl GzipInput {
    /// Bytes to compress.
    pub fn len(&self) -> u64 {
        match self {
            GzipInput::Bytes(b) => b.len() as u64,
            GzipInput::File { len, .. } => *len,
        }
    }

    /// Whether there is nothing to compress.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One compression: the input and the level.
#[derive(Debug, Clone)]
pub struct GzipJob {
    /// What to compress.
    pub input: GzipInput,
    /// 1 to 9 (clamped).
    pub level: u32,
}

/// Compresses `job.input` into one gzip member (no file name, mtime 0, so
/// equal inputs give equal bytes). `None` if a file input cannot be read or
/// ends before its length (it changed: the caller sends what it has as is);
/// the encoder itself does not fail writing into memory.
pub fn compress(job: &GzipJob) -> Option<Vec<u8>> {
    let out = Vec::with_capacity(job.input.len() as usize / 4 + 64);
    let mut enc = GzEncoder::new(out, Compression::new(job.level.clamp(1, 9)));
    // In pieces of tens of microseconds, each followed by a point where a
    // job on the CPU pool lets a waiting loop have its core.
    match &job.input {
        GzipInput::Bytes(input) => {
            for piece in input.chunks(COMPRESS_PIECE) {
                enc.write_all(piece).ok()?;
                duality_rt::pool::checkpoint();
            }
        }
        GzipInput::File { file, len } => {
            use std::os::unix::fs::FileExt as _;
            let mut piece = vec![0u8; COMPRESS_PIECE];
            let mut at = 0u64;
            while at < *len {
                let want = (*len - at).min(COMPRESS_PIECE as u64) as usize;
                let n = match file.read_at(&mut piece[..want], at) {
                    Ok(0) => return None,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => return None,
                };
                enc.write_all(&piece[..n]).ok()?;
                at += n as u64;
                duality_rt::pool::checkpoint();
            }
        }
    }
    enc.finish().ok()
}

/// Bytes compressed between [`duality_rt::pool::checkpoint`]s: about 50 µs
/// at level 1 here.
const COMPRESS_PIECE: usize = 32 << 10;

/// Runs `job` where `offloader` places it: **the** seam through which every
/// compression of the server goes. Its class for the adaptive policy is the
/// level and the input's size in powers of two (a compression's cost grows
/// with both). The result is shared (`Arc`) where the job ran, so that a
/// loop never copies a large body. `None` if it could not run (the pool
/// lost the job) or its file could not be read: the caller answers with
/// the identity body.
pub async fn run(offloader: &duality_rt::adaptive::Offloader, job: GzipJob) -> Option<Arc<[u8]>> {
    let class =
        (u64::from(job.level) << 8) | u64::from(u64::BITS - job.input.len().leading_zeros());
    offloader
        .run(class, move || compress(&job).map(Arc::<[u8]>::from))
        .await
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mime;
    use crate::request::{parse_head, Limits};
    use flate2::read::GzDecoder;
    use std::io::Read as _;

    fn on() -> GzipConfig {
        GzipConfig::on()
    }

    #[test]
    fn type_list() {
        for (name, want) in [
            ("a.html", true),
            ("a.css", true),
            ("a.js", true),
            ("a.mjs", true),
            ("a.txt", true),
            ("a.md", true),
            ("a.csv", true),
            ("a.xml", true),
            ("a.ics", true),
            ("a.json", true),
            ("a.map", true),
            ("a.jsonld", true),
            ("a.webmanifest", true),
            ("a.svg", true),
            ("a.wasm", true),
            ("favicon.ico", true),
            ("a.bmp", true),
            ("a.ttf", true),
            ("a.otf", true),
            ("a.svgz", false),
            ("a.SVGZ", false),
            ("a.png", false),
            ("a.jpg", false),
            ("a.gif", false),
            ("a.webp", false),
            ("a.avif", false),
            ("a.woff", false),
            ("a.woff2", false),
            ("a.gz", false),
            ("a.zip", false),
            ("a.pdf", false),
            ("a.mp4", false),
            ("a.mp3", false),
            ("noext", false),
            ("a.bin", false),
        ] {
            let p = Path::new(name);
            assert_eq!(compressible(p, mime::for_path(p)), want, "{name}");
        }
        let p = Path::new("x");
        for (ct, want) in [
            ("text/plain", true),
            ("TEXT/HTML; charset=utf-8", true),
            (" application/JSON ", true),
            ("application/javascript", true),
            ("application/xml", true),
            ("application/rss+xml", true),
            ("application/atom+xml; charset=utf-8", true),
            ("application/problem+json", true),
            ("image/svg+xml", true),
            ("text/", false),
            ("+json", false),
            ("application/octet-stream", false),
            ("image/png", false),
            ("application/jsonx", false),
            ("", false),
        ] {
            assert_eq!(compressible(p, ct), want, "{ct:?}");
        }
    }

    #[test]
    fn eligibility_needs_on_type_and_size() {
        let p = Path::new("a.txt");
        let ct = mime::for_path(p);
        assert!(
            !eligible(&GzipConfig::default(), p, ct, 1000),
            "off by default"
        );
        assert!(eligible(&on(), p, ct, 256));
        assert!(!eligible(&on(), p, ct, 255));
        assert!(
            eligible(&on(), p, ct, u64::MAX),
            "max_length bounds compressing only"
        );
        assert!(!eligible(&on(), Path::new("a.png"), "image/png", 1000));
    }

    #[test]
    fn gzip_types_replace_the_list_but_html() {
        let list = |types: &[&str]| {
            GzipTypes::listed(&types.iter().map(|t| t.to_string()).collect::<Vec<_>>())
        };
        let css = list(&["Text/CSS", "application/x-custom"]);
        let p = Path::new("x");
        assert!(css.admit(p, "text/css; charset=utf-8"));
        assert!(css.admit(p, "application/x-custom"));
        assert!(css.admit(p, "TEXT/HTML"), "text/html always");
        assert!(!css.admit(p, "text/plain"));
        assert!(!css.admit(p, "text/css2"));
        let any = list(&["text/css", "*"]);
        assert_eq!(any, GzipTypes::Any);
        assert!(any.admit(Path::new("a.png"), "image/png"));
        assert!(GzipTypes::Builtin.admit(p, "text/plain"));
        let cfg = GzipConfig { types: css, ..on() };
        assert!(!eligible(&cfg, Path::new("a.txt"), "text/plain", 1000));
        assert!(eligible(&cfg, Path::new("a.css"), "text/css", 1000));
    }

    #[test]
    fn wanted_needs_accept_and_no_range() {
        let limits = Limits::default();
        let req = |fields: &str| format!("GET /a.txt HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
        for (fields, want) in [
            ("Accept-Encoding: gzip\r\n", true),
            ("Accept-Encoding: br\r\nAccept-Encoding: gzip\r\n", true),
            ("accept-encoding: GZIP;q=0.5\r\n", true),
            ("", false),
            ("Accept-Encoding: \r\n", false),
            ("Accept-Encoding: gzip;q=0\r\n", false),
            ("Accept-Encoding: gzip\r\nRange: bytes=0-1\r\n", false),
            ("Accept-Encoding: gzip\r\nRange: garbage\r\n", false),
        ] {
            let text = req(fields);
            let (head, _) = parse_head(text.as_bytes(), &limits).unwrap().unwrap();
            assert_eq!(wanted(&on(), &head), want, "{fields:?}");
            assert!(!wanted(&GzipConfig::default(), &head));
        }
    }

    #[test]
    fn http10_gets_gzip_only_when_allowed() {
        let limits = Limits::default();
        let text = "GET /a.txt HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n";
        let (head, _) = parse_head(text.as_bytes(), &limits).unwrap().unwrap();
        assert!(!wanted(&on(), &head));
        let http10 = GzipConfig {
            http10: true,
            ..on()
        };
        assert!(wanted(&http10, &head));
    }

    #[test]
    fn compress_round_trips_and_is_deterministic() {
        let input: Arc<[u8]> = b"hello hello hello hello hello\n".repeat(100).into();
        for level in [0, 1, 6, 9, 42] {
            let job = GzipJob {
                input: GzipInput::Bytes(input.clone()),
                level,
            };
            let gz = compress(&job).unwrap();
            assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
            assert!(gz.len() < input.len() / 10);
            assert_eq!(compress(&job).unwrap(), gz, "same input, same bytes");
            let mut back = Vec::new();
            GzDecoder::new(&gz[..]).read_to_end(&mut back).unwrap();
            assert_eq!(&back[..], &input[..]);
        }
        let empty = compress(&GzipJob {
            input: GzipInput::Bytes(Arc::from(&b""[..])),
            level: 1,
        })
        .unwrap();
        let mut back = Vec::new();
        GzDecoder::new(&empty[..]).read_to_end(&mut back).unwrap();
        assert!(back.is_empty());
    }

    #[test]
    fn both_offloads_give_the_same_bytes() {
        let input: Arc<[u8]> = (0..50_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect::<Vec<u8>>()
            .into();
        let job = GzipJob {
            input: GzipInput::Bytes(input),
            level: 6,
        };
        let want = compress(&job).map(Arc::<[u8]>::from);
        for offload in [Offload::Inline, Offload::Pool, Offload::Adaptive] {
            let o = duality_rt::adaptive::Offloader::new(offload);
            for _ in 0..3 {
                let got = block_on(run(&o, job.clone()));
                assert_eq!(got, want, "{offload}");
            }
        }
    }

    #[test]
    fn a_file_input_is_read_in_pieces_and_must_have_its_length() {
        // Three and a half pieces, so the last read is a short one.
        let input: Vec<u8> = (0..COMPRESS_PIECE * 7 / 2)
            .map(|i| (i % 97) as u8)
            .collect();
        let dir = std::env::temp_dir().join(format!("duality-gzip-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.json");
        std::fs::write(&path, &input).unwrap();
        let file = Arc::new(std::fs::File::open(&path).unwrap());
        let from_file = |len: u64| {
            compress(&GzipJob {
                input: GzipInput::File {
                    file: file.clone(),
                    len,
                },
                level: 1,
            })
        };
        let from_bytes = compress(&GzipJob {
            input: GzipInput::Bytes(input.clone().into()),
            level: 1,
        });
        let gz = from_file(input.len() as u64).unwrap();
        assert_eq!(Some(&gz), from_bytes.as_ref(), "same bytes either way");
        let mut back = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, input);
        // Fewer bytes than the file has: only those (what was stat'ed).
        let mut back = Vec::new();
        GzDecoder::new(&from_file(1000).unwrap()[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, &input[..1000]);
        // The file is shorter than promised (it shrank): no answer.
        assert_eq!(from_file(input.len() as u64 + 1), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn offload_names() {
        for o in [Offload::Inline, Offload::Pool, Offload::Adaptive] {
            assert_eq!(o.to_string().parse::<Offload>(), Ok(o));
        }
        assert!("sometimes".parse::<Offload>().is_err());
    }

    /// Polls `f` to completion on this thread (the pool's job wakes it
    /// through its waker).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        use std::task::{Context, Poll, Wake, Waker};
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }
}
