//! What the server knows about a file it serves: [`FileMeta`] (size, mtime,
//! inode), the [`ETag`] derived from it, and [`open`], which opens a resolved
//! file without following a last-moment symlink or blocking on a FIFO.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The validators of a file: enough to build `Content-Length`,
/// `Last-Modified` and `ETag`, and to tell that a cached copy is stale.
///
/// Two `FileMeta` are equal when size, mtime (to the nanosecond), inode and
/// change time are equal; [`PageCache`](crate::PageCache) serves a cached
/// copy only then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileMeta {
    /// Size in bytes.
    pub size: u64,
    /// Last modification time.
    pub mtime: SystemTime,
    /// Inode number (a file replaced by `rename` gets a new one).
    pub inode: u64,
    /// Inode change time (`ctime`) in nanoseconds: a `chmod` or `chown`
    /// moves it, so a cached copy of a file whose permissions changed is
    /// dropped and the file opened again (a file made unreadable gets 403,
    /// as nginx answers). Not part of the [`ETag`]: the bytes are the same.
    pub changed: u64,
}

impl FileMeta {
    /// The validators of `md`.
    pub fn from_metadata(md: &fs::Metadata) -> FileMeta {
        FileMeta {
            size: md.len(),
            mtime: md.modified().unwrap_or(UNIX_EPOCH),
            inode: md.ino(),
            changed: (md.ctime().max(0) as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(md.ctime_nsec().max(0) as u64),
        }
    }

    /// The entity tag of this version of the file.
    pub fn etag(&self) -> ETag {
        ETag::of(self)
    }
}

impl From<&fs::Metadata> for FileMeta {
    fn from(md: &fs::Metadata) -> FileMeta {
        FileMeta::from_metadata(md)
    }
}

/// How [`ETag`]s are written (`--etag`), for every server of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ETagFormat {
    /// `"<inode>-<size>-<mtime ns>"`: changes with any replacement.
    #[default]
    Inode,
    /// nginx's `"<mtime s>-<size>"`: the same on every server holding the
    /// same files with the same times (replicas behind a load balancer; a
    /// rolling switch from nginx keeps clients' validators), at the price
    /// of missing a same-size rewrite within the same second, as nginx's.
    Nginx,
    /// No tag at all (nginx's `etag off`): responses carry no `ETag`,
    /// `If-None-Match` and `If-Match` hold only for `*`, and an `If-Range`
    /// with a tag sends the whole file; dates still validate.
    Off,
}

/// The process's [`ETagFormat`], as a `u8`.
static FORMAT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

impl ETagFormat {
    /// Makes this the format of every tag the process writes from now on:
    /// a server's setting, made once at start.
    pub fn set(self) {
        FORMAT.store(self as u8, std::sync::atomic::Ordering::Relaxed);
    }

    fn current() -> ETagFormat {
        match FORMAT.load(std::sync::atomic::Ordering::Relaxed) {
            1 => ETagFormat::Nginx,
            2 => ETagFormat::Off,
            _ => ETagFormat::Inode,
        }
    }
}

impl std::str::FromStr for ETagFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<ETagFormat, String> {
        match s {
            "inode" => Ok(ETagFormat::Inode),
            "nginx" => Ok(ETagFormat::Nginx),
            "off" => Ok(ETagFormat::Off),
            _ => Err(format!("{s:?}: expected inode, nginx or off")),
        }
    }
}

/// A **strong** entity tag, `"<inode>-<size>-<mtime ns>"` in lower-case hex
/// (or nginx's `"<mtime s>-<size>"`: [`ETagFormat`]).
///
/// Strong because it changes whenever the bytes can have changed: a write
/// moves mtime (nanosecond resolution on every Linux file system in use), a
/// replacement by `rename` changes the inode. Strong tags are what `If-Range`
/// needs (RFC 9110 §13.1.5); `If-None-Match` compares weakly, which a strong
/// tag also satisfies. It lives on the stack: no allocation per response.
///
/// The gzip variant of a file has its own tag, [`ETag::gzip_variant`]: the
/// file's tag with `-gzip` inside the quotes (Apache's `AddSuffix`), never
/// equal to an identity tag (whose opaque part is hex digits and dashes).
/// It is strong, and the same whether the server compressed the file or
/// served a fresh `file.gz` beside it: both are *the* gzip coding of this
/// version of the file, and a client's validator must not flip when the
/// variant cache evicts an entry or a `.gz` appears. (nginx weakens the tag
/// when it compresses, `W/"…"`, and gives a `.gz` its own tag; a weak tag
/// would do for `If-None-Match` but could never be used with `If-Range`.)
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ETag {
    buf: [u8; ETag::CAP],
    len: u8,
}

impl ETag {
    /// Two quotes, three hex numbers (16 + 16 + 32 digits at most), two
    /// dashes and room for [`ETag::GZIP_SUFFIX`].
    const CAP: usize = 2 + 16 + 1 + 16 + 1 + 32 + ETag::GZIP_SUFFIX.len();

    /// What [`ETag::gzip_variant`] appends to the opaque part.
    pub const GZIP_SUFFIX: &'static [u8] = b"-gzip";

    /// The tag of `meta`, in the process's [`ETagFormat`].
    pub fn of(meta: &FileMeta) -> ETag {
        ETag::in_format(meta, ETagFormat::current())
    }

    /// The tag of `meta` in `format`; [absent](ETag::is_absent) when the
    /// format is [`ETagFormat::Off`].
    pub fn in_format(meta: &FileMeta, format: ETagFormat) -> ETag {
        if format == ETagFormat::Off {
            return ETag {
                buf: [0; ETag::CAP],
                len: 0,
            };
        }
        let since = meta.mtime.duration_since(UNIX_EPOCH);
        // By hand, not `write!`: every file response carries the tag, and
        // the formatter machinery showed in the server's profile.
        let mut buf = [0u8; ETag::CAP];
        buf[0] = b'"';
        let mut len = 1;
        // The size between the format's first and last parts.
        let last = match format {
            ETagFormat::Inode => {
                len += hex(&mut buf[len..], u128::from(meta.inode));
                buf[len] = b'-';
                len += 1;
                Some(since.map_or(0, |d| d.as_nanos()))
            }
            ETagFormat::Nginx | ETagFormat::Off => {
                len += hex(
                    &mut buf[len..],
                    u128::from(since.map_or(0, |d| d.as_secs())),
                );
                buf[len] = b'-';
                len += 1;
                None
            }
        };
        len += hex(&mut buf[len..], u128::from(meta.size));
        if let Some(last) = last {
            buf[len] = b'-';
            len += 1;
            len += hex(&mut buf[len..], last);
        }
        buf[len] = b'"';
        ETag {
            buf,
            len: (len + 1) as u8,
        }
    }

    /// The tag of the gzip variant of the file this tag describes (see the
    /// type's docs). Applied to a variant's tag it appends again.
    /// An absent tag stays absent.
    pub fn gzip_variant(&self) -> ETag {
        let mut tag = *self;
        let len = self.len as usize;
        let end = (len + ETag::GZIP_SUFFIX.len()).saturating_sub(1);
        if self.is_absent() || end + 1 > ETag::CAP {
            return tag;
        }
        tag.buf[len - 1..end].copy_from_slice(ETag::GZIP_SUFFIX);
        tag.buf[end] = b'"';
        tag.len = (end + 1) as u8;
        tag
    }

    /// The tag with its quotes, as sent in the `ETag` field (empty when
    /// [absent](ETag::is_absent)).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// Whether there is no tag (`--etag off`): no `ETag` field is sent, and
    /// no tag a client sends [names](ETag::named_by) it.
    pub fn is_absent(&self) -> bool {
        self.len == 0
    }

    /// The opaque part, between the quotes (empty when absent).
    pub fn opaque(&self) -> &[u8] {
        match self.len {
            0 => &[],
            n => &self.buf[1..n as usize - 1],
        }
    }

    /// Whether a client's tag with this opaque part names this tag: never
    /// when absent (a client's `""` must not match the missing tag).
    pub fn named_by(&self, opaque: &[u8]) -> bool {
        !self.is_absent() && opaque == self.opaque()
    }
}

/// Writes `v` in lower-case hex without leading zeros (`0` for zero) at the
/// start of `out`, which has room for 32 digits; returns the digits written.
fn hex(out: &mut [u8], v: u128) -> usize {
    let digits = (128 - (v | 1).leading_zeros()).div_ceil(4) as usize;
    for (i, d) in out[..digits].iter_mut().enumerate() {
        let nibble = (v >> (4 * (digits - 1 - i))) as usize & 0xf;
        *d = b"0123456789abcdef"[nibble];
    }
    digits
}

impl fmt::Debug for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

/// Opens a file that [`Root::resolve`](crate::Root::resolve) found, read-only,
/// and returns it with its validators taken from the open descriptor.
///
/// `O_NOFOLLOW` refuses a final component that became a symlink since the
/// resolution, `O_NONBLOCK` keeps a file that became a FIFO from blocking the
/// open, and anything but a regular file is refused (`PermissionDenied`). The
/// validators come from `fstat`, so the head describes exactly the bytes that
/// will be read. This is a blocking call: a handler runs it on its blocking
/// pool (or inline where the model allows).
///
/// Out of descriptors (`EMFILE`, `ENFILE`), it tries again for up to about
/// 15 ms before it gives up: under a tight limit a burst of refused
/// connections holds descriptors for a moment (an io_uring loop accepts a
/// burst at once, before any is refused). An injected fault stands for a
/// limit that lasts and is not retried. The waits hold the calling thread
/// (a blocking-pool thread, or a payload thread under the hand-off
/// models).
pub fn open(path: &Path) -> io::Result<(File, FileMeta)> {
    if let Some(e) = duality_rt::faults::open_fault() {
        return Err(e);
    }
    let file = retry_out_of_files(OPEN_RETRIES, || {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
    })?;
    let md = file.metadata()?;
    if !md.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not a regular file",
        ));
    }
    Ok((file, FileMeta::from_metadata(&md)))
}

/// Waits before each retry of an open out of descriptors: 15 ms in all.
const OPEN_RETRIES: [std::time::Duration; 4] = [
    std::time::Duration::from_millis(1),
    std::time::Duration::from_millis(2),
    std::time::Duration::from_millis(4),
    std::time::Duration::from_millis(8),
];

/// Runs `op`, and again after each wait of `waits` while it fails for want
/// of descriptors; the last answer.
fn retry_out_of_files<T>(
    waits: impl IntoIterator<Item = std::time::Duration>,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let out_of_files =
        |e: &io::Error| matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
    let mut waits = waits.into_iter();
    loop {
        match op() {
            Err(e) if out_of_files(&e) => match waits.next() {
                Some(wait) => std::thread::sleep(wait),
                None => return Err(e),
            },
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn meta(size: u64, secs: u64, nanos: u32, inode: u64) -> FileMeta {
        FileMeta {
            size,
            mtime: UNIX_EPOCH + Duration::new(secs, nanos),
            inode,
            changed: 0,
        }
    }

    #[test]
    fn etag_format() {
        let tag = ETag::in_format(&meta(0x10, 1, 5, 0xab), ETagFormat::Inode);
        assert_eq!(tag.as_bytes(), b"\"ab-10-3b9aca05\"");
        assert_eq!(tag.opaque(), b"ab-10-3b9aca05");
    }

    #[test]
    fn nginx_etag_format() {
        // nginx 1.22.1 here tags a 6-byte file of 2026-01-01 00:00:00 UTC
        // "6955b900-6".
        let tag = ETag::in_format(&meta(6, 1_767_225_600, 5, 0xab), ETagFormat::Nginx);
        assert_eq!(tag.as_bytes(), b"\"6955b900-6\"");
        assert_eq!(tag.gzip_variant().as_bytes(), b"\"6955b900-6-gzip\"");
        let old = FileMeta {
            mtime: UNIX_EPOCH - Duration::from_secs(10),
            ..meta(0, 0, 0, 1)
        };
        assert_eq!(
            ETag::in_format(&old, ETagFormat::Nginx).as_bytes(),
            b"\"0-0\""
        );
        assert_eq!("nginx".parse(), Ok(ETagFormat::Nginx));
        assert_eq!("off".parse(), Ok(ETagFormat::Off));
        assert_eq!("inode".parse(), Ok(ETagFormat::Inode));
        assert!("weak".parse::<ETagFormat>().is_err());
    }

    #[test]
    fn etag_off_is_absent_and_named_by_nothing() {
        let tag = ETag::in_format(&meta(6, 1_767_225_600, 5, 0xab), ETagFormat::Off);
        assert!(tag.is_absent());
        assert_eq!(tag.as_bytes(), b"");
        assert!(!tag.named_by(b""));
        assert!(tag.gzip_variant().is_absent());
        let on = ETag::in_format(&meta(6, 1_767_225_600, 5, 0xab), ETagFormat::Nginx);
        assert!(on.named_by(b"6955b900-6") && !on.named_by(b""));
    }

    #[test]
    fn etag_fits_extremes() {
        let m = FileMeta {
            size: u64::MAX,
            mtime: UNIX_EPOCH + Duration::new(1 << 40, 999_999_999),
            inode: u64::MAX,
            changed: 0,
        };
        let tag = ETag::in_format(&m, ETagFormat::Inode);
        assert_eq!(tag.as_bytes().first(), Some(&b'"'));
        assert_eq!(tag.as_bytes().last(), Some(&b'"'));
        // Before the epoch: counted as 0 ns, no panic.
        let old = FileMeta {
            mtime: UNIX_EPOCH - Duration::from_secs(10),
            ..meta(1, 0, 0, 1)
        };
        assert_eq!(
            ETag::in_format(&old, ETagFormat::Inode).as_bytes(),
            b"\"1-1-0\""
        );
    }

    proptest::proptest! {
        #[test]
        fn etag_is_the_hex_of_its_parts(inode: u64, size: u64, secs in 0u64..1 << 40, nanos in 0u32..1_000_000_000) {
            let m = meta(size, secs, nanos, inode);
            let ns = u128::from(secs) * 1_000_000_000 + u128::from(nanos);
            let want = format!("\"{inode:x}-{size:x}-{ns:x}\"");
            let tag = ETag::in_format(&m, ETagFormat::Inode);
            proptest::prop_assert_eq!(tag.as_bytes(), want.as_bytes());
        }
    }

    #[test]
    fn gzip_variant_tag() {
        let tag = ETag::in_format(&meta(0x10, 1, 5, 0xab), ETagFormat::Inode);
        let gz = tag.gzip_variant();
        assert_eq!(gz.as_bytes(), b"\"ab-10-3b9aca05-gzip\"");
        assert_eq!(gz.opaque(), b"ab-10-3b9aca05-gzip");
        assert_ne!(gz, tag);
        // The longest identity tag still has room for the suffix.
        let m = FileMeta {
            size: u64::MAX,
            mtime: UNIX_EPOCH + Duration::new(1 << 40, 999_999_999),
            inode: u64::MAX,
            changed: 0,
        };
        let gz = ETag::in_format(&m, ETagFormat::Inode).gzip_variant();
        assert!(gz.as_bytes().ends_with(b"-gzip\""), "{gz:?}");
        assert_eq!(
            gz.as_bytes().len(),
            ETag::in_format(&m, ETagFormat::Inode).as_bytes().len() + 5
        );
    }

    #[test]
    fn etag_changes_with_each_validator() {
        let base = ETag::in_format(&meta(10, 100, 1, 7), ETagFormat::Inode);
        assert_ne!(
            base,
            ETag::in_format(&meta(11, 100, 1, 7), ETagFormat::Inode)
        );
        assert_ne!(
            base,
            ETag::in_format(&meta(10, 100, 2, 7), ETagFormat::Inode)
        );
        assert_ne!(
            base,
            ETag::in_format(&meta(10, 100, 1, 8), ETagFormat::Inode)
        );
    }

    #[test]
    fn an_open_out_of_descriptors_is_tried_again_a_bounded_number_of_times() {
        let emfile = || io::Error::from_raw_os_error(libc::EMFILE);
        let waits = [Duration::from_millis(1); 3];
        // Descriptors back after two tries: the third answers.
        let mut tries = 0;
        let r = retry_out_of_files(waits, || {
            tries += 1;
            if tries < 3 {
                Err(emfile())
            } else {
                Ok(tries)
            }
        });
        assert_eq!(r.unwrap(), 3);
        // Never back: one try per wait and one more, then the error.
        let mut tries = 0;
        let r: io::Result<()> = retry_out_of_files(waits, || {
            tries += 1;
            Err(io::Error::from_raw_os_error(libc::ENFILE))
        });
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENFILE));
        assert_eq!(tries, 4);
        // Any other error is the answer at once.
        let mut tries = 0;
        let r: io::Result<()> = retry_out_of_files(waits, || {
            tries += 1;
            Err(io::ErrorKind::NotFound.into())
        });
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(tries, 1);
    }
}
