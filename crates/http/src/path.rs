//! Safe path handling, in two steps.
//!
//! 1. [`normalize`] (pure, no file system): request-target → a decoded,
//!    normalised URL path. It takes the path of an absolute-form target
//!    (`http://host/x` → `/x`), drops query and fragment, percent-decodes, and
//!    **refuses with 400** everything that could name something outside the
//!    root or confuse a later step:
//!    - a `..` segment that would climb above the root (`/..`, `/a/../..`),
//!      raw or encoded in any case mix (`%2e%2e`, `%2E.`, `.%2e`), also
//!      where an encoded `/` (`%2f`, decoded to a separator before the path
//!      is split, as nginx decodes it) parts it;
//!    - NUL and every other control byte (`%00`, `%0d%0a`, …), raw or encoded;
//!    - an invalid escape (`%zz`, `%4`, a lone `%`) or a decoded path that is
//!      not UTF-8 (overlong forms such as `%c0%ae` included);
//!    - a target that is neither origin-form (`/…`) nor an `http`/`https`
//!      absolute-form (`*`, `file:///…`, `a/b`), or an absolute-form whose
//!      authority is not a host and an optional port (`http:///x`,
//!      `http://user@host/x`, `http://host:abc/x`), as nginx refuses them.
//!
//!    A backslash, raw or `%5c`, is a byte of a file name like any other
//!    (it separates nothing here; nginx looks such a name up too).
//!    `.` segments and empty segments (`//`) are dropped, and a `..` inside
//!    the root drops the segment before it, on the text alone (RFC 3986's
//!    remove_dot_segments, as nginx does: `/a/../b` is `/b` whether or not
//!    `a` exists or is a link; `/a/..` is the directory `/`). The result
//!    starts with `/`, holds only real segments, and ends with `/` exactly
//!    when the request did or its last segment was `.` or `..` (that slash
//!    matters for directories, below).
//! 2. [`Root::resolve`] (file system): joins the path to the root (itself
//!    resolved again each time, so a root symlink switched to a new release
//!    is followed at once), resolves it with [`std::fs::canonicalize`] (every
//!    symlink followed) and checks that the result still lies under the
//!    canonical root: a symlink that
//!    leads out of the root, directly or through a directory, is **403**
//!    (unless [`Symlinks::Any`] lets links lead anywhere, nginx's default).
//!    A directory is served by its index file (`index.html`, or the first
//!    found of [`Root::with_index`]'s names), itself resolved and checked
//!    the same way. Only regular files are served: FIFOs, sockets and devices
//!    are 403.
//!
//! Choices:
//! - A directory asked for **without** its trailing slash answers **301**
//!   with `Location: <path>/` (as nginx and Apache do), so that relative links
//!   inside its index resolve against the directory; the query is carried
//!   over (see [`write_redirect`](crate::write_redirect)).
//! - A directory without an index file is **403** (listing is forbidden
//!   unless [`Root::with_autoindex`], as in nginx), a file asked for with a
//!   trailing slash (`/a.txt/`) is 404.
//! - Dot-files (`/.well-known/…`, `/.git/…`) are served like any other file:
//!   what lies under the root is public.
//! - Between [`Root::resolve`] and opening the file a symlink could be swapped
//!   in; [`file::open`](crate::file::open) refuses a final component that is a
//!   symlink (`O_NOFOLLOW`). A root whose inner directories are writable by an
//!   attacker is outside this server's threat model.

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::file::FileMeta;
use crate::status::{HttpError, Status};

/// The file a directory is served by.
pub const INDEX: &str = "index.html";

const fn bad_request() -> HttpError {
    HttpError::keep(Status::BadRequest)
}

/// Turns a request-target into a decoded, normalised URL path, or refuses it
/// with 400 (see the [module docs](self) for the rules).
///
/// ```
/// use duality_http::path::normalize;
/// assert_eq!(normalize("/a/./b//c%20d?q=1").unwrap(), "/a/b/c d");
/// assert_eq!(normalize("http://example.com/x/").unwrap(), "/x/");
/// assert_eq!(normalize("/a/%2e%2E/b").unwrap(), "/b");
/// assert!(normalize("/a/%2e%2E/../etc/passwd").is_err());
/// ```
pub fn normalize(target: &str) -> Result<String, HttpError> {
    let raw = origin_path(target).ok_or_else(bad_request)?;
    let decoded = String::from_utf8(decode(raw)?).map_err(|_| bad_request())?;
    dot_segments(&decoded)
}

/// The path a `--rewrite` gave a request ([`crate::rewrite`]), decoded
/// already, checked and normalised as a request's is: it starts with `/`,
/// is UTF-8 without control bytes, and its dot segments are removed (none
/// may climb above the root). `None` otherwise: the rule gave no path a
/// file can be looked up by.
///
/// ```
/// use duality_http::path::normalize_rewritten;
/// assert_eq!(normalize_rewritten(b"/a/./b/../c%20d".to_vec()).as_deref(), Some("/a/c%20d"));
/// assert_eq!(normalize_rewritten(b"/../etc/passwd".to_vec()), None);
/// assert_eq!(normalize_rewritten(b"a.txt".to_vec()), None);
/// ```
pub fn normalize_rewritten(path: Vec<u8>) -> Option<String> {
    let path = String::from_utf8(path).ok()?;
    if !path.starts_with('/') || path.bytes().any(forbidden) {
        return None;
    }
    dot_segments(&path).ok()
}

/// `decoded` without its empty and dot segments (nginx's and RFC 3986's
/// dot-segment removal); 400 if one climbs above the root.
fn dot_segments(decoded: &str) -> Result<String, HttpError> {
    let mut out = String::with_capacity(decoded.len());
    let mut trailing_slash = false;
    for segment in decoded.split('/').skip(1) {
        match segment {
            "" | "." => trailing_slash = true,
            // The segment before goes (nginx's and RFC 3986's dot-segment
            // removal); there is none above the root.
            ".." => {
                let cut = out.rfind('/').ok_or_else(bad_request)?;
                out.truncate(cut);
                trailing_slash = true;
            }
            _ => {
                out.push('/');
                out.push_str(segment);
                trailing_slash = false;
            }
        }
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    Ok(out)
}

/// The path part of an origin-form or `http(s)` absolute-form target, without
/// query and fragment. `None` for any other form.
fn origin_path(target: &str) -> Option<&str> {
    let end = target.find(['?', '#']).unwrap_or(target.len());
    let target = &target[..end];
    if target.starts_with('/') {
        return Some(target);
    }
    let (scheme, rest) = target.split_once("://")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return None;
    }
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    valid_authority(authority).then_some(path)
}

/// Whether the authority of an `http(s)` absolute-form target is a host and
/// an optional port, as nginx checks it: an empty host is invalid (RFC 9110
/// §4.2.1: "MUST reject"), userinfo (`user:pw@`) an error (§4.2.4), a port
/// digits only. The host is a bracketed IP literal or a reg-name of
/// unreserved, sub-delim and percent characters (RFC 3986 §3.2.2).
fn valid_authority(authority: &str) -> bool {
    let port_ok = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if let Some(v6) = authority.strip_prefix('[') {
        let Some((literal, after)) = v6.split_once(']') else {
            return false;
        };
        let port = if after.is_empty() {
            Some("")
        } else {
            after.strip_prefix(':')
        };
        return !literal.is_empty()
            && literal
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
            && port.is_some_and(port_ok);
    }
    let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
    let reg_name = |b: u8| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            )
    };
    !host.is_empty() && host.bytes().all(reg_name) && port_ok(port)
}

/// Percent-decodes `raw`, refusing invalid escapes and the bytes that have no
/// business in a file path (see [`forbidden`]), raw or encoded.
fn decode(raw: &str) -> Result<Vec<u8>, HttpError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hi = bytes.get(i + 1).and_then(|&c| hex(c));
            let lo = bytes.get(i + 2).and_then(|&c| hex(c));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(bad_request());
            };
            let c = hi << 4 | lo;
            if forbidden(c) {
                return Err(bad_request());
            }
            out.push(c);
            i += 3;
        } else {
            if forbidden(b) {
                return Err(bad_request());
            }
            out.push(b);
            i += 1;
        }
    }
    Ok(out)
}

/// Bytes refused anywhere in a path: controls (NUL, CR, LF, …) and DEL.
fn forbidden(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Percent-encodes a normalised path for a `Location` field: everything but
/// unreserved characters, sub-delimiters, `:`, `@` and `/` is escaped.
pub fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        let keep = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
        if keep {
            out.push(b as char);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
    out
}

/// Whether the normalised `path` names something hidden: a segment
/// starting with `.` (`/.git/config`, `/app/.env`), other than a first
/// `.well-known` (RFC 8615: ACME challenges, `security.txt`).
///
/// ```
/// use duality_http::path::hidden;
/// assert!(hidden("/.env") && hidden("/a/.git/config") && hidden("/.well-known/.x"));
/// assert!(!hidden("/.well-known/acme-challenge/t") && !hidden("/a.b/c.txt") && !hidden("/"));
/// ```
pub fn hidden(path: &str) -> bool {
    let rest = path.strip_prefix("/.well-known/").unwrap_or(path);
    rest.split('/').any(|s| s.starts_with('.'))
}

/// Whether `name` may be an index file's name (`--index`): a file name,
/// not a path, `.` or `..`, with no control byte.
pub fn valid_index_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(format!(
            "{name:?}: an index is a file name, such as index.html"
        ));
    }
    if name.bytes().any(forbidden) {
        return Err(format!("{name:?}: a control character in an index name"));
    }
    Ok(())
}

/// What a path resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A regular file under the root.
    File {
        /// Its canonical path (no symlink, under [`Root::dir`]).
        path: PathBuf,
        /// Its validators at resolution time.
        meta: FileMeta,
    },
    /// A directory asked for without its trailing slash: answer 301 with this
    /// (percent-encoded) `Location`.
    Redirect {
        /// The path with a trailing slash, percent-encoded.
        location: String,
    },
    /// A directory without an index file, with listings on
    /// ([`Root::with_autoindex`]): list it ([`crate::autoindex`]).
    Listing {
        /// Its canonical path (under [`Root::dir`] unless symlinks may lead
        /// anywhere).
        path: PathBuf,
    },
}

/// The directory the server serves. Its path is resolved again at every
/// lookup, as nginx resolves its `root`: a root that is a symlink switched
/// to a new release (`current -> releases/N`, the atomic-deploy pattern) is
/// served from the new release at once.
#[derive(Debug, Clone)]
pub struct Root {
    /// The root as given, made absolute.
    given: PathBuf,
    /// Its canonical path at start-up.
    dir: PathBuf,
    /// Where a symlink under the root may lead.
    symlinks: Symlinks,
    /// Whether a directory without index resolves to a listing.
    autoindex: bool,
    /// The files a directory is served by, the first found (nginx's
    /// `index`).
    index: Arc<[String]>,
    /// The root directory as last opened, for [`Root::resolve`]'s short
    /// way (shared by clones: they name the same root).
    opened: Arc<Mutex<Option<Arc<RootDir>>>>,
    /// Whether [`Root::resolve`] tries the short way first (tests compare
    /// both ways).
    short_way: bool,
}

/// The root directory, opened.
#[derive(Debug)]
struct RootDir {
    /// Its canonical path.
    path: PathBuf,
    /// An `O_PATH` descriptor of it.
    fd: OwnedFd,
    /// Its device and inode: while the root as given and `path` both still
    /// lead to them, this is the root now (while `fd` holds the directory
    /// its inode cannot go to another one made under the same name).
    id: DirId,
}

/// Where a symlink under the root may lead (`--symlinks`). Either way a
/// request can only reach what lies under the root or a link placed there:
/// [`normalize`] refuses a `..` that climbs above the root and resolves the
/// others on the text, before any link is followed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Symlinks {
    /// Only to files and directories under the root; one that leads out,
    /// directly or through a directory, is 403 (the default).
    #[default]
    InsideRoot,
    /// Anywhere the server may read: nginx's default (`disable_symlinks
    /// off`), for release layouts such as `public/uploads ->
    /// ../../shared/uploads`. Whoever can place a link under the root can
    /// then publish any file the server can read.
    Any,
}

impl std::str::FromStr for Symlinks {
    type Err = String;

    fn from_str(s: &str) -> Result<Symlinks, String> {
        match s {
            "inside-root" => Ok(Symlinks::InsideRoot),
            "any" => Ok(Symlinks::Any),
            _ => Err(format!("{s:?}: expected inside-root or any")),
        }
    }
}

impl Root {
    /// Takes `dir`, which must be a directory.
    pub fn new(dir: impl AsRef<Path>) -> io::Result<Root> {
        let given = std::path::absolute(dir.as_ref())?;
        let dir = fs::canonicalize(&given)?;
        if !fs::metadata(&dir)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "document root is not a directory",
            ));
        }
        Ok(Root {
            given,
            dir,
            symlinks: Symlinks::InsideRoot,
            autoindex: false,
            index: Arc::from([INDEX.to_owned()]),
            opened: Arc::default(),
            short_way: true,
        })
    }

    /// This root with `policy` for where its symlinks may lead.
    pub fn with_symlinks(self, policy: Symlinks) -> Root {
        Root {
            symlinks: policy,
            ..self
        }
    }

    /// With `on`, a directory without an index file resolves to
    /// [`Resolved::Listing`] instead of 403 (nginx's `autoindex`).
    pub fn with_autoindex(self, on: bool) -> Root {
        Root {
            autoindex: on,
            ..self
        }
    }

    /// A directory is served by the first of `names` found in it (nginx's
    /// `index`; [`INDEX`] alone by default). Each must be a file name (no
    /// `/`, not `.` or `..`), and there must be one at least: see
    /// [`valid_index_name`].
    pub fn with_index(self, names: &[String]) -> Root {
        assert!(
            !names.is_empty() && names.iter().all(|n| valid_index_name(n).is_ok()),
            "index names {names:?}"
        );
        Root {
            index: Arc::from(names),
            ..self
        }
    }

    /// The index name `file` (a file [`resolve`](Root::resolve) found for
    /// a directory) was found under: its own name where that is one of
    /// them, else (an index that is a symlink, resolved) the first.
    pub fn index_name_of(&self, file: &Path) -> &str {
        let own = file.file_name().and_then(|n| n.to_str());
        self.index
            .iter()
            .find(|n| Some(n.as_str()) == own)
            .unwrap_or(&self.index[0])
    }

    /// Whether a symlink leading to `real` (canonical) may be followed: under
    /// the root, unless symlinks may lead anywhere.
    pub fn allows(&self, real: &Path) -> bool {
        self.current()
            .is_ok_and(|root| self.may_lead_to(&root, real))
    }

    /// Whether `real` (canonical) may be served under `root` (canonical):
    /// it lies there, or symlinks may lead anywhere.
    fn may_lead_to(&self, root: &Path, real: &Path) -> bool {
        // `Path::starts_with` compares whole components: `/srv/www2` is not
        // under `/srv/www`.
        self.symlinks == Symlinks::Any || real.starts_with(root)
    }

    /// The canonical root directory at start-up.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The root as given, made absolute (nginx's `$document_root`).
    pub fn given(&self) -> &Path {
        &self.given
    }

    /// The canonical root directory now.
    fn current(&self) -> Result<PathBuf, HttpError> {
        fs::canonicalize(&self.given).map_err(io_status)
    }

    /// The root directory now, opened: the one kept while the root as
    /// given still leads to the same directory (one `stat`), else opened
    /// again (a release switched in). `None`: take the long way.
    fn opened(&self) -> Option<Arc<RootDir>> {
        use std::os::unix::fs::OpenOptionsExt;
        let id = DirId::of(&fs::metadata(&self.given).ok()?);
        let kept = self
            .opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(dir) = kept.filter(|d| d.id == id) {
            // Its path must lead there too: a parent renamed (or a mount
            // moved) leaves the directory as it was and its old path naming
            // another place, which the server would then open files under.
            if fs::metadata(&dir.path).is_ok_and(|md| DirId::of(&md) == id) {
                return Some(dir);
            }
        }
        // Opened afresh outside the lock: lookups meanwhile go on with the
        // kept one or the long way.
        let path = fs::canonicalize(&self.given).ok()?;
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&path)
            .ok()?;
        if DirId::of(&file.metadata().ok()?) != id {
            return None; // switched while we looked: the long way, this time
        }
        let dir = Arc::new(RootDir {
            path,
            fd: file.into(),
            id,
        });
        *self.opened.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir.clone());
        Some(dir)
    }

    /// [`Root::sibling`] the short way, as [`Root::resolve_short`]: `None`
    /// where the long way must answer. A name missing (`ENOENT`, or
    /// `ENOTDIR` on the way) is the answer: the walk met no symlink before
    /// it, so the long way would miss it too.
    fn sibling_short(&self, name: &Path) -> Option<Option<(PathBuf, FileMeta)>> {
        let dir = self.opened()?;
        let rel = name.strip_prefix(&dir.path).ok()?;
        if name.as_os_str().len() >= libc::PATH_MAX as usize {
            return None;
        }
        match stat_beneath(&dir, rel) {
            Ok(md) if md.is_file() => Some(Some((name.to_owned(), FileMeta::from_metadata(&md)))),
            Ok(md) if md.is_dir() => Some(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Some(None),
            _ => None,
        }
    }

    /// [`Root::resolve`] the short way, for `rel` (the path's segments,
    /// checked) with no symlink on the way: one `openat2(2)` under the
    /// opened root and an `fstat` per name looked at, where the long way
    /// `realpath`s the root and the path (a `readlink` per component, each
    /// walking from `/`) and `stat`s the result. Without a symlink the
    /// canonical path is the root's joined with `rel`, so both ways answer
    /// alike. `None` wherever the short way does not find a regular file
    /// or a directory (a symlink, a missing file, no `openat2`): the long
    /// way then gives the answer and its status.
    fn resolve_short(&self, rel: &Path, path: &str) -> Option<Result<Resolved, HttpError>> {
        let dir = self.opened()?;
        // A path the long way cannot `realpath` (past PATH_MAX, index
        // included) is its answer (404), not a file or redirect found here.
        let index_len = self.index.iter().map(String::len).max().unwrap_or(0);
        let longest = dir.path.as_os_str().len() + rel.as_os_str().len() + index_len + 2;
        if longest >= libc::PATH_MAX as usize {
            return None;
        }
        let md = stat_beneath(&dir, rel).ok()?;
        let wants_dir = path.ends_with('/');
        if md.is_file() {
            return Some(if wants_dir {
                Err(HttpError::keep(Status::NotFound))
            } else {
                Ok(Resolved::File {
                    path: dir.path.join(rel),
                    meta: FileMeta::from_metadata(&md),
                })
            });
        }
        if !md.is_dir() {
            return None;
        }
        if !wants_dir {
            return Some(Ok(Resolved::Redirect {
                location: encode(&format!("{path}/")),
            }));
        }
        // The first index file there; anything else (a symlink, an error,
        // none at all) is the long way's to answer.
        for name in self.index.iter() {
            let index = rel.join(name);
            match stat_beneath(&dir, &index) {
                Ok(md) if md.is_file() => {
                    return Some(Ok(Resolved::File {
                        path: dir.path.join(index),
                        meta: FileMeta::from_metadata(&md),
                    }))
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                _ => return None,
            }
        }
        None
    }

    /// Resolves a path made by [`normalize`] (as in
    /// [`Head::path`](crate::Head::path)) to a file under the root.
    ///
    /// Errors: 404 (absent, or a file asked for as a directory), 403 (outside
    /// the root through a symlink, a symlink loop, a directory without an
    /// index file unless listed, not a regular file, no permission), 400 (a path that
    /// [`normalize`] would not have produced), 500 (any other I/O error).
    /// This is a blocking call (`openat2`, `fstat`; where a symlink or an
    /// error is met, `realpath` and `stat`): a handler runs it where
    /// blocking is allowed.
    pub fn resolve(&self, path: &str) -> Result<Resolved, HttpError> {
        if !path.starts_with('/') {
            return Err(bad_request());
        }
        let mut rel = PathBuf::new();
        for segment in path.split('/').filter(|s| !s.is_empty()) {
            // Defence in depth: `normalize` never lets these through.
            if segment == "." || segment == ".." || segment.bytes().any(forbidden) {
                return Err(bad_request());
            }
            rel.push(segment);
        }
        if self.short_way {
            if let Some(found) = self.resolve_short(&rel, path) {
                return found;
            }
        }
        let root = self.current()?;
        let mut candidate = root.clone();
        if !rel.as_os_str().is_empty() {
            candidate.push(&rel);
        }
        let wants_dir = path.ends_with('/');

        let (real, md) = self.confine(&root, &candidate)?;
        if md.is_file() {
            return if wants_dir {
                Err(HttpError::keep(Status::NotFound))
            } else {
                Ok(Resolved::File {
                    path: real,
                    meta: FileMeta::from_metadata(&md),
                })
            };
        }
        if !md.is_dir() {
            return Err(HttpError::keep(Status::Forbidden));
        }
        if !wants_dir {
            return Ok(Resolved::Redirect {
                location: encode(&format!("{path}/")),
            });
        }
        for name in self.index.iter() {
            let (file, md) = match self.confine(&root, &real.join(name)) {
                Err(e) if e.status == Status::NotFound => continue,
                other => other?,
            };
            if !md.is_file() {
                return Err(HttpError::keep(Status::Forbidden));
            }
            return Ok(Resolved::File {
                path: file,
                meta: FileMeta::from_metadata(&md),
            });
        }
        if self.autoindex {
            return Ok(Resolved::Listing { path: real });
        }
        Err(HttpError::keep(Status::Forbidden))
    }

    /// The regular file named `file` + `suffix` (`index.html` → `index.html.gz`),
    /// where `file` is a path [`resolve`](Root::resolve) returned, checked
    /// exactly as `resolve` checks a file: canonicalised, so symlinks are
    /// followed, and refused unless it lies under the root. `None` when
    /// there is no such file, or it is refused, or not a regular file.
    /// Blocking, like `resolve`.
    pub fn sibling(&self, file: &Path, suffix: &str) -> Option<(PathBuf, FileMeta)> {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        if self.short_way {
            if let Some(found) = self.sibling_short(Path::new(&name)) {
                return found;
            }
        }
        let root = self.current().ok()?;
        let (real, md) = self.confine(&root, Path::new(&name)).ok()?;
        md.is_file().then(|| (real, FileMeta::from_metadata(&md)))
    }

    /// Canonicalises `candidate`, checks that it lies under `root`
    /// (canonical) unless symlinks may lead anywhere, and returns it with
    /// its metadata.
    fn confine(&self, root: &Path, candidate: &Path) -> Result<(PathBuf, fs::Metadata), HttpError> {
        let real = fs::canonicalize(candidate).map_err(io_status)?;
        if !self.may_lead_to(root, &real) {
            return Err(HttpError::keep(Status::Forbidden));
        }
        let md = fs::metadata(&real).map_err(io_status)?;
        Ok((real, md))
    }
}

/// The root with the directories `--alias` serves paths from (nginx's
/// `location /PREFIX/ { alias DIR/; }`): a path under a prefix is looked
/// up under its directory, the longest prefix first; any other under the
/// root. Each directory confines its own symlinks, as the root does.
#[derive(Debug, Clone)]
pub struct Roots {
    main: Root,
    /// Prefixes (starting and ending with `/`) and their directories,
    /// longest first.
    aliases: Vec<(String, Root)>,
    /// Where listings are made, if only under these prefixes (nginx's
    /// `location /PREFIX/ { autoindex on; }`); empty: wherever the
    /// directories list.
    listing_under: Vec<String>,
}

impl Roots {
    /// The root alone.
    pub fn new(main: Root) -> Roots {
        Roots {
            main,
            aliases: Vec::new(),
            listing_under: Vec::new(),
        }
    }

    /// With paths under `prefix` (it starts and ends with `/`) served from
    /// `dir`.
    pub fn with_alias(mut self, prefix: String, dir: Root) -> Roots {
        assert!(
            prefix.starts_with('/') && prefix.ends_with('/'),
            "{prefix:?}"
        );
        self.aliases.push((prefix, dir));
        self.aliases
            .sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        self
    }

    /// The directory serving `path`, and the path under it.
    fn pick<'p>(&self, path: &'p str) -> (&Root, &'p str) {
        for (prefix, dir) in &self.aliases {
            if path.starts_with(prefix.as_str()) {
                // The prefix's last `/` starts the path under the directory.
                return (dir, &path[prefix.len() - 1..]);
            }
        }
        (&self.main, path)
    }

    /// Listings only under these prefixes (each starts and ends with
    /// `/`): elsewhere a directory without an index file is 403, as where
    /// nginx's `autoindex` is off. The directories must list
    /// ([`Root::with_autoindex`]).
    pub fn listing_only_under(mut self, prefixes: Vec<String>) -> Roots {
        self.listing_under = prefixes;
        self
    }

    /// [`Root::resolve`] in the directory serving `path`; a directory's
    /// redirect names the path as asked.
    pub fn resolve(&self, path: &str) -> Result<Resolved, HttpError> {
        let (dir, under) = self.pick(path);
        match dir.resolve(under) {
            Ok(Resolved::Redirect { .. }) if under.len() != path.len() => Ok(Resolved::Redirect {
                location: encode(&format!("{path}/")),
            }),
            Ok(Resolved::Listing { .. })
                if !self.listing_under.is_empty()
                    && !self
                        .listing_under
                        .iter()
                        .any(|p| path.starts_with(p.as_str())) =>
            {
                Err(HttpError::keep(Status::Forbidden))
            }
            found => found,
        }
    }

    /// Whether a symlink leading to `real` may be followed: where the root
    /// or an alias's directory allows it.
    pub fn allows(&self, real: &Path) -> bool {
        self.main.allows(real) || self.aliases.iter().any(|(_, d)| d.allows(real))
    }

    /// [`Root::sibling`] in the directory `file` lies under.
    pub fn sibling(&self, file: &Path, suffix: &str) -> Option<(PathBuf, FileMeta)> {
        self.aliases
            .iter()
            .map(|(_, d)| d)
            .filter(|d| file.starts_with(d.dir()))
            .max_by_key(|d| d.dir().as_os_str().len())
            .unwrap_or(&self.main)
            .sibling(file, suffix)
    }

    /// The directory serving `path` as given (nginx's `$document_root`) and
    /// the path under it: `$request_filename` is the one joined to the
    /// other.
    pub fn document_root<'p>(&self, path: &'p str) -> (&Path, &'p str) {
        let (dir, under) = self.pick(path);
        (dir.given(), under)
    }

    /// The canonical directory serving `path` now (nginx's
    /// `$realpath_root`); `None` where it cannot be resolved.
    pub fn realpath_root(&self, path: &str) -> Option<PathBuf> {
        self.pick(path).0.current().ok()
    }

    /// [`Root::index_name_of`] (every directory has the root's index names).
    pub fn index_name_of(&self, file: &Path) -> &str {
        self.main.index_name_of(file)
    }
}

/// A directory's device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirId {
    dev: u64,
    ino: u64,
}

impl DirId {
    fn of(md: &fs::Metadata) -> DirId {
        use std::os::unix::fs::MetadataExt;
        DirId {
            dev: md.dev(),
            ino: md.ino(),
        }
    }
}

/// The metadata of `rel` under the opened root, found the short way
/// ([`crate::sys::open_path_beneath`]); an error where that refuses.
fn stat_beneath(dir: &RootDir, rel: &Path) -> io::Result<fs::Metadata> {
    use std::os::unix::ffi::OsStrExt;
    let name = match rel.as_os_str().as_bytes() {
        b"" => c".".to_owned(),
        bytes => std::ffi::CString::new(bytes)?,
    };
    let fd = crate::sys::open_path_beneath(dir.fd.as_fd(), &name)?;
    fs::File::from(fd).metadata()
}

/// The status for an I/O error met while resolving.
fn io_status(e: io::Error) -> HttpError {
    HttpError::from_io(&e)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("duality-http-{tag}-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// ```text
    /// <tmp>/outside/secret.txt
    /// <tmp>/www/                       the root
    ///   index.html  a.txt  "sp ace.txt"  "ü.txt"  ....   sock (a socket)
    ///   sub/index.html  sub/b.css
    ///   "my dir"/index.html
    ///   empty/                         no index
    ///   sub2/index.html -> ../../outside/secret.txt
    ///   link_in  -> a.txt              dir_in -> sub
    ///   link_out -> ../outside/secret.txt
    ///   link_abs -> <tmp>/outside/secret.txt (absolute)
    ///   dir_out  -> ../outside         loop -> loop
    /// ```
    pub(crate) fn tree(tag: &str) -> (TempDir, Root) {
        let tmp = TempDir::new(tag);
        let out = tmp.0.join("outside");
        let www = tmp.0.join("www");
        fs::create_dir_all(&out).unwrap();
        fs::write(out.join("secret.txt"), "secret").unwrap();
        for d in ["sub", "my dir", "empty", "sub2"] {
            fs::create_dir_all(www.join(d)).unwrap();
        }
        for (f, body) in [
            ("index.html", "root index"),
            ("a.txt", "hello"),
            ("sp ace.txt", "space"),
            ("ü.txt", "umlaut"),
            ("....", "dots"),
            ("sub/index.html", "sub index"),
            ("sub/b.css", "b{}"),
            ("my dir/index.html", "my dir"),
        ] {
            fs::write(www.join(f), body).unwrap();
        }
        symlink("../../outside/secret.txt", www.join("sub2/index.html")).unwrap();
        symlink("a.txt", www.join("link_in")).unwrap();
        symlink("sub", www.join("dir_in")).unwrap();
        symlink("../outside/secret.txt", www.join("link_out")).unwrap();
        symlink(out.join("secret.txt"), www.join("link_abs")).unwrap();
        symlink("../outside", www.join("dir_out")).unwrap();
        symlink("loop", www.join("loop")).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(www.join("sock")).unwrap();
        let root = Root::new(&www).unwrap();
        (tmp, root)
    }

    #[derive(Debug, PartialEq)]
    enum Want<S> {
        File(S),
        Redirect(S),
        Err(u16),
    }

    impl Want<String> {
        fn as_str(&self) -> Want<&str> {
            match self {
                Want::File(s) => Want::File(s),
                Want::Redirect(s) => Want::Redirect(s),
                Want::Err(c) => Want::Err(*c),
            }
        }
    }

    fn run(root: &Root, target: &str) -> Want<String> {
        match normalize(target).and_then(|p| root.resolve(&p)) {
            Ok(Resolved::File { path, meta }) => {
                assert!(path.starts_with(root.dir()), "{target} -> {path:?}");
                assert_eq!(meta.size, fs::metadata(&path).unwrap().len());
                let rel = path.strip_prefix(root.dir()).unwrap();
                Want::File(rel.to_str().unwrap().to_owned())
            }
            Ok(Resolved::Redirect { location }) => Want::Redirect(location),
            Ok(Resolved::Listing { path }) => panic!("{target} listed {path:?} without autoindex"),
            Err(e) => {
                assert!(!e.close);
                Want::Err(e.status.code())
            }
        }
    }

    #[test]
    fn symlinks_may_lead_out_only_when_allowed() {
        let (_tmp, root) = tree("any");
        let any = root.clone().with_symlinks(Symlinks::Any);
        let secret =
            |root: &Root, target: &str| match normalize(target).and_then(|p| root.resolve(&p)) {
                Ok(Resolved::File { path, .. }) => fs::read_to_string(path).unwrap(),
                Ok(other) => panic!("{other:?}"),
                Err(e) => e.status.code().to_string(),
            };
        for target in ["/link_out", "/link_abs", "/dir_out/secret.txt", "/sub2/"] {
            assert_eq!(secret(&root, target), "403", "{target}");
            assert_eq!(secret(&any, target), "secret", "{target}");
        }
        // Still no climbing out by the path itself, and loops stay 403.
        assert_eq!(secret(&any, "/../outside/secret.txt"), "400");
        assert_eq!(secret(&any, "/loop"), "403");
        assert_eq!(secret(&any, "/a.txt"), "hello");
        assert_eq!("any".parse(), Ok(Symlinks::Any));
        assert_eq!("inside-root".parse(), Ok(Symlinks::InsideRoot));
        assert!("on".parse::<Symlinks>().is_err());
    }

    #[test]
    fn siblings_are_confined_like_files() {
        let (tmp, root) = tree("sibling");
        let www = root.dir().to_path_buf();
        fs::write(www.join("a.txt.gz"), "gz").unwrap();
        fs::write(tmp.0.join("outside/secret.txt.gz"), "secret gz").unwrap();
        // Beside a file, and beside a directory's index.
        fs::write(www.join("sub/index.html.gz"), "sub gz").unwrap();
        let a = match root.resolve("/a.txt").unwrap() {
            Resolved::File { path, .. } => path,
            other => panic!("{other:?}"),
        };
        let (gz, meta) = root.sibling(&a, ".gz").unwrap();
        assert_eq!((gz, meta.size), (www.join("a.txt.gz"), 2));
        let index = match root.resolve("/sub/").unwrap() {
            Resolved::File { path, .. } => path,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            root.sibling(&index, ".gz").unwrap().0,
            www.join("sub/index.html.gz")
        );
        // Absent; a .gz that is a symlink out of the root; a .gz that is a
        // directory; a symlink inside the root is followed.
        assert!(root.sibling(&www.join("sub/b.css"), ".gz").is_none());
        symlink("../outside/secret.txt.gz", www.join("....gz")).unwrap();
        assert!(root.sibling(&www.join("...."), ".gz").is_none());
        fs::create_dir(www.join("sp ace.txt.gz")).unwrap();
        assert!(root.sibling(&www.join("sp ace.txt"), ".gz").is_none());
        symlink("a.txt.gz", www.join("ü.txt.gz")).unwrap();
        assert_eq!(
            root.sibling(&www.join("ü.txt"), ".gz").unwrap().0,
            www.join("a.txt.gz")
        );
        // Both ways answer alike, also where the name is missing on the way
        // or below a file.
        fs::create_dir(www.join("sub/deep.gz")).unwrap();
        let long = long_way(&root);
        for file in [
            "a.txt",
            "sub/index.html",
            "sub/b.css",
            "....",
            "sp ace.txt",
            "ü.txt",
            "nope",
            "nope/x",
            "a.txt/x",
            "sub/deep",
            "dir_in/b.css",
            "link_out",
            "",
        ] {
            let file = www.join(file);
            assert_eq!(
                root.sibling(&file, ".gz"),
                long.sibling(&file, ".gz"),
                "{file:?}"
            );
        }
        assert!(root.opened.lock().unwrap().is_some());
    }

    #[test]
    fn hostile_and_friendly_targets() {
        use Want::*;
        let (_tmp, root) = tree("table");
        let table: &[(&str, Want<&str>)] = &[
            // Climbing out: every spelling of `..` above the root is 400.
            ("/../outside/secret.txt", Err(400)),
            ("/..", Err(400)),
            ("/%2e%2e/outside/secret.txt", Err(400)),
            ("/%2E%2E/outside/secret.txt", Err(400)),
            ("/%2e./outside/secret.txt", Err(400)),
            ("/.%2E/outside/secret.txt", Err(400)),
            ("/%2E./%2e%2E/outside/secret.txt", Err(400)),
            ("/sub/../../outside/secret.txt", Err(400)),
            ("/sub/%2e%2e/%2E./outside/secret.txt", Err(400)),
            ("/link_in/../../outside/secret.txt", Err(400)),
            ("http://evil/../outside/secret.txt", Err(400)),
            // Separator tricks.
            ("/..%2foutside%2fsecret.txt", Err(400)),
            ("/%2f..%2f", Err(400)),
            // An encoded `/` separates (as nginx decodes it); a backslash
            // is part of a name.
            ("/%2F", File("index.html")),
            ("/sub%2Fb.css", File("sub/b.css")),
            ("/..\\outside\\secret.txt", Err(404)),
            ("/%5c..%5coutside", Err(404)),
            ("/%5C", Err(404)),
            // NUL, CR/LF, other controls, bad escapes, non-UTF-8.
            ("/a.txt%00.html", Err(400)),
            ("/%00", Err(400)),
            ("/%0d%0aSet-Cookie:%20x", Err(400)),
            ("/a%09b", Err(400)),
            ("/a%7f", Err(400)),
            ("/%zz", Err(400)),
            ("/%2", Err(400)),
            ("/%", Err(400)),
            ("/%%32%65", Err(400)),
            ("/%c0%ae%c0%ae/outside", Err(400)),
            ("/%ff", Err(400)),
            // Not origin-form, not http(s) absolute-form.
            ("*", Err(400)),
            ("a.txt", Err(400)),
            ("file:///etc/passwd", Err(400)),
            ("ftp://host/a.txt", Err(400)),
            // An absolute-form target whose authority is not a host and port.
            ("http:///a.txt", Err(400)),
            ("http://", Err(400)),
            ("http://:80/a.txt", Err(400)),
            ("http://u:p@host/a.txt", Err(400)),
            ("http://host:abc/a.txt", Err(400)),
            ("http://ho st/a.txt", Err(400)),
            ("http://[::1/a.txt", Err(400)),
            ("http://[]/a.txt", Err(400)),
            ("http://[::1]x/a.txt", Err(400)),
            ("", Err(400)),
            // Symlinks out of the root, directly or through a directory.
            ("/link_out", Err(403)),
            ("/link_abs", Err(403)),
            ("/dir_out/secret.txt", Err(403)),
            ("/dir_out/", Err(403)),
            ("/dir_out", Err(403)),
            ("/sub2/", Err(403)),
            ("/loop", Err(403)),
            // Not a regular file, no index.
            ("/sock", Err(403)),
            ("/empty/", Err(403)),
            // Harmless look-alikes stay inside.
            ("//etc/passwd", Err(404)),
            ("/....", File("....")),
            ("/..;/outside", Err(404)),
            ("/...", Err(404)),
            ("/nope.txt", Err(404)),
            ("/a.txt/", Err(404)),
            ("/a.txt/x", Err(404)),
            // Friendly targets.
            ("/", File("index.html")),
            ("/a.txt", File("a.txt")),
            ("/a.txt?x=/../../etc/passwd", File("a.txt")),
            ("/a.txt#frag/../..", File("a.txt")),
            ("/./a.txt", File("a.txt")),
            // `..` inside the root, resolved on the text as nginx does.
            ("/sub/../a.txt", File("a.txt")),
            ("/sub/%2e%2E/a.txt", File("a.txt")),
            ("/sub/..%2fa.txt", File("a.txt")),
            ("/nope/../a.txt", File("a.txt")),
            ("/sub/..", File("index.html")),
            ("/sub/b.css/..", File("sub/index.html")),
            ("/x/y/../../sub/./b.css", File("sub/b.css")),
            // A link's `..` is not the file system's: `dir_out/..` is the
            // root, not the link target's parent.
            ("/dir_out/../a.txt", File("a.txt")),
            ("//sub//b.css", File("sub/b.css")),
            ("/sub/./b.css", File("sub/b.css")),
            ("/%61.txt", File("a.txt")),
            ("/sp%20ace.txt", File("sp ace.txt")),
            ("/%C3%BC.txt", File("ü.txt")),
            ("/ü.txt", File("ü.txt")),
            ("http://host/a.txt", File("a.txt")),
            ("HTTPS://host", File("index.html")),
            ("http://host?q", File("index.html")),
            ("/link_in", File("a.txt")),
            ("/dir_in/b.css", File("sub/b.css")),
            ("/sub/", File("sub/index.html")),
            ("/sub/.", File("sub/index.html")),
            ("/sub", Redirect("/sub/")),
            ("/my%20dir", Redirect("/my%20dir/")),
            ("/dir_in", Redirect("/dir_in/")),
        ];
        assert!(table.len() >= 20);
        for root in [&root, &long_way(&root)] {
            for (target, want) in table {
                assert_eq!(&run(root, target).as_str(), want, "target {target:?}");
            }
        }
    }

    /// `root` resolving only the long way (`realpath`, then `stat`).
    fn long_way(root: &Root) -> Root {
        Root {
            short_way: false,
            opened: Arc::default(),
            ..root.clone()
        }
    }

    #[test]
    fn a_path_without_symlinks_takes_the_short_way_and_one_with_them_the_long() {
        let (_tmp, root) = tree("short");
        let kept = |root: &Root| root.opened.lock().unwrap().clone();
        assert!(kept(&root).is_none());
        assert_eq!(run(&root, "/sub/b.css").as_str(), Want::File("sub/b.css"));
        let dir = kept(&root).expect("the root opened for the short way");
        assert_eq!(dir.path, root.dir());
        // Answered the short way again: the same opened root.
        assert_eq!(run(&root, "/").as_str(), Want::File("index.html"));
        assert!(Arc::ptr_eq(&dir, &kept(&root).unwrap()));
        // The short way stops at a symlink; the long way follows it.
        let dir_in = stat_beneath(&dir, Path::new("dir_in/b.css"));
        assert_eq!(dir_in.unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(
            run(&root, "/dir_in/b.css").as_str(),
            Want::File("sub/b.css")
        );
        let sock = stat_beneath(&dir, Path::new("sock")).unwrap();
        assert!(!sock.is_file() && !sock.is_dir());
        assert_eq!(run(&root, "/sock").as_str(), Want::Err(403));
    }

    #[test]
    fn a_parent_renamed_under_the_opened_root_is_not_followed_out_of_it() {
        let base = std::env::temp_dir().join(format!("duality-root-mv-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(base.join("site/www")).unwrap();
        fs::create_dir_all(base.join("outside")).unwrap();
        fs::write(base.join("site/www/c.txt"), "public").unwrap();
        fs::write(base.join("outside/c.txt"), "secret").unwrap();
        let cur = base.join("cur");
        std::os::unix::fs::symlink("site/www", &cur).unwrap();
        let root = Root::new(&cur).unwrap();
        let read = |root: &Root| match root.resolve("/c.txt") {
            Ok(Resolved::File { path, .. }) => fs::read_to_string(path).unwrap(),
            other => format!("{other:?}"),
        };
        assert_eq!(read(&root), "public");
        assert!(root.opened.lock().unwrap().is_some());
        // The release's parent renamed, the link following it: the root
        // directory is the same one, its old path leads elsewhere.
        fs::rename(base.join("site"), base.join("site2")).unwrap();
        let tmp = base.join("cur.tmp");
        std::os::unix::fs::symlink("site2/www", &tmp).unwrap();
        fs::rename(&tmp, &cur).unwrap();
        fs::create_dir(base.join("site")).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), base.join("site/www")).unwrap();
        for root in [&root, &long_way(&root)] {
            assert_eq!(read(root), "public");
        }
        let _ = fs::remove_dir_all(&base);
    }

    /// Paths near PATH_MAX: the long way cannot `realpath` past it (404);
    /// the short way must not find a file or a directory there either.
    #[test]
    fn both_ways_answer_alike_past_path_max() {
        let (tmp, root) = tree("pathmax");
        let www = tmp.0.join("www");
        // 16 names of 254 bytes: under PATH_MAX below the root (openat2
        // takes it), past it from `/` (realpath does not).
        let segment = "d".repeat(254);
        for depth in [15usize, 16] {
            let rel = vec![segment.as_str(); depth].join("/");
            // `mkdir -p` and the shell walk relative paths, which stay under
            // PATH_MAX where the absolute ones do not.
            let made = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "cd '{}' && mkdir -p {rel}/sub && echo x > {rel}/x.txt && echo i > {rel}/sub/index.html",
                    www.display()
                ))
                .status()
                .unwrap();
            assert!(made.success());
            for target in ["x.txt", "sub", "sub/", "nope"] {
                let p = format!("/{rel}/{target}");
                let short = root.resolve(&p).map(|r| format!("{r:?}"));
                let long = long_way(&root).resolve(&p).map(|r| format!("{r:?}"));
                assert_eq!(
                    format!("{short:?}"),
                    format!("{long:?}"),
                    "depth {depth} {target}"
                );
            }
        }
    }

    #[test]
    fn a_root_made_again_under_its_name_is_served_from_the_new_one() {
        let (tmp, root) = tree("remade");
        assert_eq!(run(&root, "/a.txt").as_str(), Want::File("a.txt"));
        let www = tmp.0.join("www");
        fs::remove_dir_all(&www).unwrap();
        assert_eq!(run(&root, "/a.txt").as_str(), Want::Err(404));
        fs::create_dir(&www).unwrap();
        fs::write(www.join("b.txt"), "new").unwrap();
        assert_eq!(run(&root, "/a.txt").as_str(), Want::Err(404));
        match root.resolve("/b.txt") {
            Ok(Resolved::File { path, .. }) => {
                assert_eq!(fs::read_to_string(path).unwrap(), "new")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn normalize_shapes() {
        for (input, want) in [
            ("/", "/"),
            ("//", "/"),
            ("/.", "/"),
            ("/a", "/a"),
            ("/a/", "/a/"),
            ("/a/.", "/a/"),
            ("/a//b", "/a/b"),
            ("/a/./b/", "/a/b/"),
            ("/a?b/../c", "/a"),
            ("/a/..", "/"),
            ("/a/../", "/"),
            ("/a/b/..", "/a/"),
            ("/a/b/../c", "/a/c"),
            ("/a/./../b/", "/b/"),
            ("/a//..//b", "/b"),
            ("http://h/a/../b", "/b"),
            ("http://h", "/"),
            ("http://h/", "/"),
            ("http://h:80/x%20y", "/x y"),
            ("http://h:/x", "/x"),
            ("http://h:123456/x", "/x"),
            ("http://[::1]:8080/x", "/x"),
            ("http://[::1]", "/"),
            ("HTTP://127.0.0.1/a", "/a"),
        ] {
            assert_eq!(normalize(input).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn encode_round_trips_through_normalize() {
        for p in ["/a b/", "/ü/", "/100%/", "/a?b#c/", "/x;y=z/"] {
            assert_eq!(normalize(&encode(p)).unwrap(), p);
        }
        assert_eq!(encode("/a b?#%"), "/a%20b%3F%23%25");
    }

    #[test]
    fn a_root_symlink_switched_to_a_new_release_is_followed() {
        let base = std::env::temp_dir().join(format!("duality-root-flip-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        for (rel, text) in [("r1", "one"), ("r2", "two")] {
            fs::create_dir_all(base.join(rel)).unwrap();
            fs::write(base.join(rel).join("v.txt"), text).unwrap();
        }
        fs::write(base.join("r2").join("new.txt"), "new").unwrap();
        let current = base.join("current");
        std::os::unix::fs::symlink(base.join("r1"), &current).unwrap();
        let root = Root::new(&current).unwrap();
        let file = |p: &str| match root.resolve(p) {
            Ok(Resolved::File { path, .. }) => fs::read_to_string(path).unwrap(),
            Ok(other) => panic!("{other:?}"),
            Err(e) => format!("{}", e.status.code()),
        };
        assert_eq!(file("/v.txt"), "one");
        assert_eq!(file("/new.txt"), "404");
        // The deploy: a new link renamed over the old one (atomic).
        let tmp = base.join("current.tmp");
        std::os::unix::fs::symlink(base.join("r2"), &tmp).unwrap();
        fs::rename(&tmp, &current).unwrap();
        assert_eq!(file("/v.txt"), "two");
        assert_eq!(file("/new.txt"), "new");
        // The old release is gone: nothing of it is served.
        fs::remove_dir_all(base.join("r1")).unwrap();
        assert_eq!(file("/v.txt"), "two");
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn a_directory_without_index_is_listed_only_with_autoindex() {
        let (_tmp, root) = tree("autoindex");
        assert_eq!(
            root.resolve("/empty/").unwrap_err().status,
            Status::Forbidden
        );
        let listing = root.clone().with_autoindex(true);
        for r in [listing.clone(), long_way(&listing)] {
            match r.resolve("/empty/") {
                Ok(Resolved::Listing { path }) => assert_eq!(path, r.dir().join("empty")),
                other => panic!("{other:?}"),
            }
            // An index is still served, one that leads out still refused,
            // and the slash still asked for.
            assert!(matches!(r.resolve("/sub/"), Ok(Resolved::File { .. })));
            assert_eq!(r.resolve("/sub2/").unwrap_err().status, Status::Forbidden);
            assert!(matches!(r.resolve("/empty"), Ok(Resolved::Redirect { .. })));
        }
        // Where a listed symlink may lead.
        assert!(listing.allows(&listing.dir().join("a.txt")));
        assert!(!listing.allows(Path::new("/etc/passwd")));
        // Listings under a prefix only: elsewhere the same 403.
        let under = Roots::new(listing.clone()).listing_only_under(vec!["/emp".into()]);
        assert!(matches!(
            under.resolve("/empty/"),
            Ok(Resolved::Listing { .. })
        ));
        let elsewhere = Roots::new(listing.clone()).listing_only_under(vec!["/other/".into()]);
        assert_eq!(
            elsewhere.resolve("/empty/").unwrap_err().status,
            Status::Forbidden
        );
        assert!(matches!(
            elsewhere.resolve("/sub/"),
            Ok(Resolved::File { .. })
        ));
        assert!(listing
            .with_symlinks(Symlinks::Any)
            .allows(Path::new("/etc/passwd")));
    }

    #[test]
    fn a_directory_is_served_by_the_first_index_found() {
        let (tmp, root) = tree("index");
        let multi = tmp.0.join("www/multi");
        fs::create_dir(&multi).unwrap();
        fs::write(multi.join("default.htm"), "d").unwrap();
        fs::write(multi.join("index.html"), "i").unwrap();
        fs::create_dir(multi.join("home.html")).unwrap();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let served = |r: &Root, p: &str| match r.resolve(p) {
            Ok(Resolved::File { path, .. }) => {
                Ok(path.file_name().unwrap().to_str().unwrap().to_owned())
            }
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.status.code()),
        };
        let two = root
            .clone()
            .with_index(&names(&["default.htm", "index.html"]));
        let absent_first = root
            .clone()
            .with_index(&names(&["nope.html", "index.html"]));
        let a_dir = root
            .clone()
            .with_index(&names(&["home.html", "index.html"]));
        let none = root.clone().with_index(&names(&["nope.html"]));
        for short in [true, false] {
            let way = |r: &Root| if short { r.clone() } else { long_way(r) };
            assert_eq!(served(&way(&root), "/multi/"), Ok("index.html".into()));
            assert_eq!(served(&way(&two), "/multi/"), Ok("default.htm".into()));
            assert_eq!(
                served(&way(&absent_first), "/multi/"),
                Ok("index.html".into())
            );
            // An index name that is a directory is refused, as one that is
            // not a regular file.
            assert_eq!(served(&way(&a_dir), "/multi/"), Err(403));
            assert_eq!(served(&way(&none), "/sub/"), Err(403));
        }
        assert_eq!(two.index_name_of(&multi.join("default.htm")), "default.htm");
        // An index reached through a symlink is typed by the first name.
        assert_eq!(two.index_name_of(Path::new("/x/page.txt")), "default.htm");
        for bad in ["", ".", "..", "a/b", "a\x01"] {
            assert!(valid_index_name(bad).is_err(), "{bad:?}");
        }
        assert!(valid_index_name("index.htm").is_ok());
    }

    #[test]
    fn resolve_refuses_unnormalised_input() {
        let (_tmp, root) = tree("raw");
        for p in [
            "a.txt",
            "/../outside/secret.txt",
            "/sub/../a.txt",
            "/a\0",
            "/a\x7f",
        ] {
            assert_eq!(
                root.resolve(p).unwrap_err().status,
                Status::BadRequest,
                "{p}"
            );
        }
    }

    #[test]
    fn root_must_be_a_directory() {
        let (tmp, _root) = tree("rootfile");
        assert!(Root::new(tmp.0.join("www/a.txt")).is_err());
        assert!(Root::new(tmp.0.join("missing")).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// A piece of a path segment: mostly names of the test tree, some
        /// dot and escape tricks, some noise.
        fn piece() -> impl Strategy<Value = String> {
            let names = prop::sample::select(vec![
                "a.txt",
                "sub",
                "b.css",
                "dir_in",
                "dir_out",
                "link_out",
                "link_abs",
                "link_in",
                "secret.txt",
                "outside",
                "www",
                "index.html",
                "sub2",
                "loop",
                "sock",
                "empty",
                "....",
                "sp%20ace.txt",
            ]);
            let tricks = prop::sample::select(vec![
                ".", "..", "%2e", "%2E", "%2e%2e", "%2E.", ".%2e", "%2f", "%2F", "%5c", "\\",
                "%00", "%", "%zz", "?", "#", ";", "%c0%ae", "//",
            ]);
            prop_oneof![
                6 => names.prop_map(str::to_owned),
                3 => tricks.prop_map(str::to_owned),
                1 => "[ -~]{0,3}",
                1 => any::<String>().prop_map(|s| s.chars().take(3).collect()),
            ]
        }

        /// A request-target: origin- or absolute-form, segments of pieces.
        fn target() -> impl Strategy<Value = String> {
            let segment = prop_oneof![
                3 => piece(),
                1 => prop::collection::vec(piece(), 0..3).prop_map(|v| v.concat()),
            ];
            (
                prop::sample::select(vec!["", "", "", "http://h", "HTTP://h:80", "x"]),
                prop::collection::vec(segment, 0..6),
                any::<bool>(),
            )
                .prop_map(|(prefix, segments, slash)| {
                    let mut t = prefix.to_owned();
                    for s in segments {
                        t.push('/');
                        t.push_str(&s);
                    }
                    if slash || t.is_empty() {
                        t.push('/');
                    }
                    t
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]

            /// Whatever the target, a resolved file lies under the root and
            /// is never the secret outside it.
            #[test]
            fn never_outside_the_root(t in prop_oneof![4 => target(), 1 => any::<String>()]) {
                thread_local! {
                    static TREE: (TempDir, Root) = tree("prop");
                }
                TREE.with(|(tmp, root)| {
                    if let Ok(p) = normalize(&t) {
                        prop_assert!(p.starts_with('/'));
                        prop_assert!(!p.bytes().any(forbidden));
                        prop_assert!(p.split('/').all(|s| s != ".." && s != "."));
                        let found = root.resolve(&p);
                        if let Ok(Resolved::File { path, .. }) = &found {
                            prop_assert!(path.starts_with(root.dir()));
                            prop_assert!(!path.starts_with(tmp.0.join("outside")));
                        }
                        // Both ways answer alike.
                        let long = long_way(root).resolve(&p);
                        prop_assert_eq!(format!("{found:?}"), format!("{long:?}"));
                    }
                    Ok(())
                })?;
            }

            /// `normalize` is idempotent on its own output.
            #[test]
            fn normalize_is_idempotent(t in target()) {
                if let Ok(p) = normalize(&t) {
                    prop_assert_eq!(normalize(&encode(&p)).unwrap(), p);
                }
            }
        }
    }
}
