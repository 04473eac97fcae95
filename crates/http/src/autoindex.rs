//! Directory listings, nginx's `autoindex on` (`--autoindex on`): a
//! directory asked for with its slash and without an index file is answered
//! with an HTML page of its entries in nginx's format with `charset
//! utf-8` (directories first, then by name; names over 50 characters cut
//! after 47, counted in characters; the time in UTC; sizes in bytes),
//! instead of 403.
//!
//! As nginx's, names starting with `.` are left out; here also names that
//! are not UTF-8 (no request can name them), broken symlinks (nginx lists
//! them with the link's own size; a request for one is 404) and, unless
//! symlinks may lead anywhere, symlinks that lead out of the root (a
//! request for them is 403, and their size and time are another file's).
//! A listing holds at most [`MAX_ENTRIES`] entries, the first the
//! directory gives, in a page of at most about [`MAX_PAGE`] bytes (long
//! names take up to 30 bytes a character, escaped), and says how many more
//! it left out: its memory stays bounded however large the directory
//! (nginx builds its whole page in one buffer, however many entries).
//!
//! [`Style`] holds nginx's other `autoindex_*` directives: the format
//! (`autoindex_format html|json|jsonp|xml`, [`render_as`]), sizes rounded
//! to K, M, G (`autoindex_exact_size off`) and times in the server's time
//! zone (`autoindex_localtime on`), each written as nginx writes it.

use std::fs;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use crate::date;

/// Most entries one listing reads.
pub const MAX_ENTRIES: usize = 10_000;

/// Bytes of entries past which a listing's page lists no more.
pub const MAX_PAGE: usize = 2 << 20;

/// Characters of a name shown before it is cut (nginx's 50).
const NAME_WIDTH: usize = 50;

/// How listings are written: nginx's `autoindex_format`,
/// `autoindex_exact_size` and `autoindex_localtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// The page's format.
    pub format: Format,
    /// Sizes in bytes (the default), or rounded to K, M, G (HTML only).
    pub exact_size: bool,
    /// Times in the server's time zone rather than UTC (HTML only, as
    /// nginx: JSON and XML times are always UTC).
    pub localtime: bool,
}

impl Default for Style {
    /// HTML, exact sizes, UTC: nginx's defaults.
    fn default() -> Style {
        Style {
            format: Format::Html,
            exact_size: true,
            localtime: false,
        }
    }
}

/// A listing's format (`--autoindex-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// nginx's HTML page.
    #[default]
    Html,
    /// A JSON array of `{ "name", "type", "mtime", "size" }` objects.
    Json,
    /// The JSON wrapped in a call of the request's `callback` argument
    /// (plain JSON without one).
    Jsonp,
    /// `<list>` of `<directory>`, `<file>` and `<other>` elements.
    Xml,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "html" => Ok(Format::Html),
            "json" => Ok(Format::Json),
            "jsonp" => Ok(Format::Jsonp),
            "xml" => Ok(Format::Xml),
            _ => Err(format!("{s:?}: expected html, json, jsonp or xml")),
        }
    }
}

/// A rendered listing: its bytes and their `Content-Type` (nginx's, with
/// `charset utf-8` where nginx's `charset_types` would add it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The body.
    pub body: Vec<u8>,
    /// The `Content-Type`.
    pub content_type: &'static str,
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the directory.
    pub name: String,
    /// A directory (listed with a trailing `/` and no size).
    pub dir: bool,
    /// A regular file (neither this nor `dir`: a FIFO, socket or device,
    /// typed `other` in JSON and XML, without a size).
    pub file: bool,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time.
    pub mtime: SystemTime,
}

/// Reads the directory `dir` (blocking): its listable entries, at most
/// `max` (the server's: [`MAX_ENTRIES`]), and how many more it had.
/// `allowed` says whether a symlink's canonical target may be listed.
pub fn read(
    dir: &Path,
    max: usize,
    allowed: impl Fn(&Path) -> bool,
) -> io::Result<(Vec<Entry>, u64)> {
    let mut entries = Vec::new();
    let mut more = 0u64;
    for e in fs::read_dir(dir)? {
        let e = e?;
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        if entries.len() == max {
            more += 1;
            continue;
        }
        let path = e.path();
        if e.file_type()?.is_symlink() {
            match fs::canonicalize(&path) {
                Ok(real) if allowed(&real) => {}
                _ => continue,
            }
        }
        // Followed through a symlink, as nginx's `stat`.
        let Ok(md) = fs::metadata(&path) else {
            continue;
        };
        entries.push(Entry {
            name,
            dir: md.is_dir(),
            file: md.is_file(),
            size: md.len(),
            mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        });
    }
    Ok((entries, more))
}

/// The listing page of the directory at URL path `url_path` (ending with
/// `/`): nginx's `autoindex` HTML, entries sorted as nginx sorts them,
/// and, when `more` entries were left out, a line that says so.
pub fn render(url_path: &str, entries: &mut [Entry], more: u64) -> Vec<u8> {
    html(url_path, entries, more, true, 0)
}

/// The listing in `style` (see [`render`] for HTML). `callback`: a JSONP
/// call's name, [checked](jsonp_callback) (without one, JSONP is plain
/// JSON). `utc_offset`: seconds east of UTC of the server's time zone, for
/// [`Style::localtime`]. JSON and XML carry no "more entries" note: their
/// readers take the entries only.
pub fn render_as(
    style: &Style,
    url_path: &str,
    entries: &mut [Entry],
    more: u64,
    callback: Option<&str>,
    utc_offset: i64,
) -> Page {
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
    match (style.format, callback) {
        (Format::Html, _) => Page {
            body: html(
                url_path,
                entries,
                more,
                style.exact_size,
                if style.localtime { utc_offset } else { 0 },
            ),
            content_type: "text/html; charset=utf-8",
        },
        (Format::Json, _) | (Format::Jsonp, None) => Page {
            body: json(entries, None),
            content_type: "application/json",
        },
        (Format::Jsonp, Some(name)) => Page {
            body: json(entries, Some(name)),
            content_type: "application/javascript; charset=utf-8",
        },
        (Format::Xml, _) => Page {
            body: xml(entries),
            content_type: "text/xml; charset=utf-8",
        },
    }
}

/// The `callback` argument of a JSONP listing request, as nginx takes it:
/// `Ok(None)` without one (or empty), `Err(400)` for one over 128 bytes
/// or with a byte other than letters, digits, `_` and `.`.
pub fn jsonp_callback(value: Option<&[u8]>) -> Result<Option<String>, crate::Status> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let ok = v.len() <= 128
        && v.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    match ok {
        true => Ok(Some(String::from_utf8_lossy(v).into_owned())),
        false => Err(crate::Status::BadRequest),
    }
}

/// nginx's HTML page; `exact`: sizes in bytes; `offset`: seconds added to
/// each time (its `autoindex_localtime`).
fn html(url_path: &str, entries: &mut [Entry], more: u64, exact: bool, offset: i64) -> Vec<u8> {
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
    let title = html_escape(url_path);
    let mut out = format!(
        "<html>\r\n<head><title>Index of {title}</title></head>\r\n<body>\r\n\
         <h1>Index of {title}</h1><hr><pre><a href=\"../\">../</a>\r\n"
    )
    .into_bytes();
    let mut more = more;
    for (i, e) in entries.iter().enumerate() {
        if out.len() >= MAX_PAGE {
            more += (entries.len() - i) as u64;
            break;
        }
        let slash = if e.dir { "/" } else { "" };
        out.extend_from_slice(b"<a href=\"");
        out.extend_from_slice(encode_name(&e.name).as_bytes());
        out.extend_from_slice(slash.as_bytes());
        out.extend_from_slice(b"\">");
        // The name shown with its slash, cut to fit the column.
        let shown: Vec<char> = e.name.chars().chain(slash.chars()).collect();
        let len = shown.len();
        if len > NAME_WIDTH {
            let cut: String = shown[..NAME_WIDTH - 3].iter().collect();
            out.extend_from_slice(html_escape(&cut).as_bytes());
            out.extend_from_slice(b"..&gt;</a>");
        } else {
            let whole: String = shown.iter().collect();
            out.extend_from_slice(html_escape(&whole).as_bytes());
            out.extend_from_slice(b"</a>");
            out.resize(out.len() + NAME_WIDTH - len, b' ');
        }
        out.push(b' ');
        out.extend_from_slice(&date::format_listing(shifted(e.mtime, offset)));
        out.push(b' ');
        match (exact, e.dir) {
            (true, true) => out.extend_from_slice(format!("{:>19}", "-").as_bytes()),
            (true, false) => out.extend_from_slice(format!("{:>19}", e.size).as_bytes()),
            (false, true) => out.extend_from_slice(b"      -"),
            (false, false) => out.extend_from_slice(rounded(e.size).as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }
    if more > 0 {
        out.extend_from_slice(
            format!("\r\n({more} more entries not listed: a listing is bounded)\r\n").as_bytes(),
        );
    }
    out.extend_from_slice(b"</pre><hr></body>\r\n</html>\r\n");
    out
}

/// `t` moved by `offset` seconds (either way; clamped at the epoch).
fn shifted(t: SystemTime, offset: i64) -> SystemTime {
    let by = std::time::Duration::from_secs(offset.unsigned_abs());
    match offset >= 0 {
        true => t.checked_add(by).unwrap_or(t),
        false => t.checked_sub(by).unwrap_or(SystemTime::UNIX_EPOCH),
    }
}

/// A size as nginx's `autoindex_exact_size off` writes it: up to 9999
/// bytes as they are (` %6i`), then K, M or G rounded half up (`%6i%c`).
fn rounded(size: u64) -> String {
    const K: u64 = 1024;
    let (unit, scale) = match size {
        s if s >= K * K * K => (K * K * K, 'G'),
        s if s >= K * K => (K * K, 'M'),
        s if s > 9999 => (K, 'K'),
        s => return format!(" {s:>6}"),
    };
    let n = size / unit + u64::from(size % unit >= unit / 2);
    format!("{n:>6}{scale}")
}

/// nginx's JSON listing (`/* callback */` and the call around it for
/// JSONP).
fn json(entries: &[Entry], callback: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(name) = callback {
        out.extend_from_slice(b"/* callback */\r\n");
        out.extend_from_slice(name.as_bytes());
        out.push(b'(');
    }
    out.push(b'[');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"\r\n{ \"name\":\"");
        crate::log_format::escape_json(e.name.as_bytes(), &mut out);
        out.extend_from_slice(b"\", \"type\":\"");
        out.extend_from_slice(kind(e).as_bytes());
        out.extend_from_slice(b"\", \"mtime\":\"");
        out.extend_from_slice(&date::format(e.mtime));
        out.push(b'"');
        if e.file && !e.dir {
            out.extend_from_slice(format!(", \"size\":{}", e.size).as_bytes());
        }
        out.extend_from_slice(b" }");
    }
    out.extend_from_slice(b"\r\n]");
    if callback.is_some() {
        out.extend_from_slice(b");");
    }
    out
}

/// nginx's XML listing.
fn xml(entries: &[Entry]) -> Vec<u8> {
    let mut out = b"<?xml version=\"1.0\"?>\r\n<list>\r\n".to_vec();
    for e in entries {
        let kind = kind(e);
        out.push(b'<');
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b" mtime=\"");
        // `2026-12-06T23:41:07` of `…+00:00`, with nginx's `Z`.
        out.extend_from_slice(&date::format_iso8601(e.mtime)[..19]);
        out.push(b'Z');
        if e.file && !e.dir {
            out.extend_from_slice(format!("\" size=\"{}", e.size).as_bytes());
        }
        out.extend_from_slice(b"\">");
        out.extend_from_slice(html_escape(&e.name).as_bytes());
        out.extend_from_slice(b"</");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b">\r\n");
    }
    out.extend_from_slice(b"</list>\r\n");
    out
}

/// An entry's type in JSON and XML.
fn kind(e: &Entry) -> &'static str {
    match (e.dir, e.file) {
        (true, _) => "directory",
        (false, true) => "file",
        (false, false) => "other",
    }
}

/// A name as one segment of a link: every byte but RFC 3986's unreserved
/// ones percent-encoded, as nginx encodes a URI component.
fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn entry(name: &str, dir: bool, size: u64) -> Entry {
        Entry {
            name: name.to_owned(),
            dir,
            file: !dir,
            size,
            // 2026-12-06 23:41:07 UTC
            mtime: UNIX_EPOCH + Duration::from_secs(1_796_600_467),
        }
    }

    #[test]
    fn nginx_format_sorted_directories_first() {
        let mut e = vec![
            entry("b.txt", false, 1234),
            entry("sub", true, 4096),
            entry("a.txt", false, 2),
        ];
        let page = String::from_utf8(render("/dir/", &mut e, 0)).unwrap();
        let want = "<html>\r\n<head><title>Index of /dir/</title></head>\r\n<body>\r\n\
            <h1>Index of /dir/</h1><hr><pre><a href=\"../\">../</a>\r\n\
            <a href=\"sub/\">sub/</a>                                               \
            06-Dec-2026 23:41                   -\r\n\
            <a href=\"a.txt\">a.txt</a>                                              \
            06-Dec-2026 23:41                   2\r\n\
            <a href=\"b.txt\">b.txt</a>                                              \
            06-Dec-2026 23:41                1234\r\n\
            </pre><hr></body>\r\n</html>\r\n";
        assert_eq!(page, want);
    }

    #[test]
    fn rounded_sizes_and_local_times_as_nginx_writes_them() {
        for (size, want) in [
            (0, "      0"),
            (9999, "   9999"),
            (10_000, "    10K"),
            (10_751, "    10K"),
            (10_752, "    11K"),
            ((1 << 20) - 1, "  1024K"),
            (1 << 20, "     1M"),
            ((3 << 20) / 2, "     2M"),
            ((3 << 30) / 2 - 1, "     1G"),
            (5 << 30, "     5G"),
        ] {
            assert_eq!(rounded(size), want, "{size}");
        }
        let mut e = vec![entry("a.txt", false, 20_000), entry("sub", true, 0)];
        let style = Style {
            exact_size: false,
            localtime: true,
            ..Style::default()
        };
        let page = render_as(&style, "/", &mut e, 0, None, 5 * 3600 + 1800);
        let text = String::from_utf8(page.body).unwrap();
        assert!(
            text.contains(
                "</a>                                               07-Dec-2026 05:11       -\r\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "</a>                                              07-Dec-2026 05:11     20K\r\n"
            ),
            "{text}"
        );
        let west = render_as(&style, "/", &mut e, 0, None, -3600);
        assert!(String::from_utf8(west.body)
            .unwrap()
            .contains("06-Dec-2026 22:41"));
    }

    #[test]
    fn json_and_xml_as_nginx_writes_them() {
        let mut e = vec![
            entry("b \"q\"\\.txt", false, 12),
            entry("sub", true, 4096),
            Entry {
                file: false,
                ..entry("fifo", false, 0)
            },
        ];
        let json = |cb| {
            render_as(
                &Style {
                    format: Format::Jsonp,
                    ..Style::default()
                },
                "/",
                &mut e.clone(),
                0,
                cb,
                0,
            )
        };
        let page = json(None);
        assert_eq!(page.content_type, "application/json");
        let text = String::from_utf8(page.body).unwrap();
        assert_eq!(
            text,
            "[\r\n{ \"name\":\"sub\", \"type\":\"directory\", \"mtime\":\"Sun, 06 Dec 2026 23:41:07 GMT\" },\r\n\
             { \"name\":\"b \\\"q\\\"\\\\.txt\", \"type\":\"file\", \"mtime\":\"Sun, 06 Dec 2026 23:41:07 GMT\", \"size\":12 },\r\n\
             { \"name\":\"fifo\", \"type\":\"other\", \"mtime\":\"Sun, 06 Dec 2026 23:41:07 GMT\" }\r\n]"
        );
        let called = json(Some("cb.x_1"));
        assert_eq!(called.content_type, "application/javascript; charset=utf-8");
        let body = String::from_utf8(called.body).unwrap();
        assert_eq!(body, format!("/* callback */\r\ncb.x_1({text});"));
        let empty = render_as(
            &Style {
                format: Format::Json,
                ..Style::default()
            },
            "/",
            &mut [],
            0,
            None,
            0,
        );
        assert_eq!(empty.body, b"[\r\n]");
        let xml = render_as(
            &Style {
                format: Format::Xml,
                ..Style::default()
            },
            "/",
            &mut e,
            0,
            None,
            0,
        );
        assert_eq!(xml.content_type, "text/xml; charset=utf-8");
        assert_eq!(
            String::from_utf8(xml.body).unwrap(),
            "<?xml version=\"1.0\"?>\r\n<list>\r\n\
             <directory mtime=\"2026-12-06T23:41:07Z\">sub</directory>\r\n\
             <file mtime=\"2026-12-06T23:41:07Z\" size=\"12\">b &quot;q&quot;\\.txt</file>\r\n\
             <other mtime=\"2026-12-06T23:41:07Z\">fifo</other>\r\n</list>\r\n"
        );
        assert_eq!(jsonp_callback(None), Ok(None));
        assert_eq!(jsonp_callback(Some(b"")), Ok(None));
        assert_eq!(jsonp_callback(Some(b"a.B_9")), Ok(Some("a.B_9".into())));
        assert!(jsonp_callback(Some(b"alert(1)")).is_err());
        assert!(jsonp_callback(Some("x".repeat(129).as_bytes())).is_err());
        assert_eq!("xml".parse(), Ok(Format::Xml));
        assert!("yaml".parse::<Format>().is_err());
    }

    #[test]
    fn names_are_escaped_and_cut() {
        let long = "x".repeat(60);
        let mut e = vec![
            entry("a <b> & \"c\".txt", false, 1),
            entry("100% #1?.txt", false, 1),
            entry(&long, false, 1),
            entry("ü.txt", false, 1),
            entry("e!x*y(z)$a,b=c:d@e~f+g';h", false, 1),
        ];
        let page = String::from_utf8(render("/<x>/", &mut e, 0)).unwrap();
        assert!(page.contains("<title>Index of /&lt;x&gt;/</title>"));
        assert!(page.contains(
            "<a href=\"a%20%3Cb%3E%20%26%20%22c%22.txt\">a &lt;b&gt; &amp; &quot;c&quot;.txt</a>"
        ));
        assert!(page.contains("<a href=\"100%25%20%231%3F.txt\">100% #1?.txt</a>"));
        assert!(page.contains(&format!(
            "<a href=\"{long}\">{}..&gt;</a> 06-Dec",
            &long[..47]
        )));
        // As nginx: all but unreserved characters encoded in a link.
        assert!(page.contains("href=\"e%21x%2Ay%28z%29%24a%2Cb%3Dc%3Ad%40e~f%2Bg%27%3Bh\""));
        // Padded by characters, not bytes.
        assert!(page.contains(&format!(
            "<a href=\"%C3%BC.txt\">ü.txt</a>{} 06-Dec",
            " ".repeat(45)
        )));
    }

    #[test]
    fn a_bounded_listing_says_what_it_left_out() {
        let page = String::from_utf8(render("/", &mut [], 3)).unwrap();
        assert!(page.contains("\r\n(3 more entries not listed: a listing is bounded)\r\n</pre>"));
        // Long names fill the page sooner: the rest is counted.
        let name = "<".repeat(250);
        let mut many: Vec<Entry> = (0..4000)
            .map(|i| entry(&format!("{i:04}{name}"), false, 1))
            .collect();
        let page = render("/", &mut many, 5);
        assert!(page.len() < MAX_PAGE + 4096, "{}", page.len());
        let listed = page.windows(9).filter(|w| w == b"<a href=\"").count() - 1;
        let said = format!("({} more entries not listed", 4000 - listed + 5);
        assert!(listed < 4000 && String::from_utf8_lossy(&page).contains(&said));
    }

    #[test]
    fn reads_what_nginx_lists() {
        let dir = std::env::temp_dir().join(format!("duality-autoindex-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("a.txt"), "aa").unwrap();
        fs::write(dir.join(".hidden"), "h").unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("broken")).unwrap();
        std::os::unix::fs::symlink("a.txt", dir.join("in")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("out")).unwrap();
        let canon = fs::canonicalize(&dir).unwrap();
        let (mut got, more) = read(&dir, 10, |p| p.starts_with(&canon)).unwrap();
        got.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<(&str, bool, u64)> = got
            .iter()
            .map(|e| (e.name.as_str(), e.dir, e.size))
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(&names[..2], [("a.txt", false, 2), ("in", false, 2)]);
        assert_eq!((names[2].0, names[2].1), ("sub", true));
        assert_eq!(more, 0);
        // Links may lead anywhere: the one out of the root is listed too.
        let (all, _) = read(&dir, 10, |_| true).unwrap();
        assert_eq!(
            all.len(),
            3 + usize::from(Path::new("/etc/hostname").exists())
        );
        // Bounded: the rest counted, not kept.
        let (two, more) = read(&dir, 2, |_| true).unwrap();
        assert_eq!((two.len() as u64, more), (2, all.len() as u64 - 2));
        let _ = fs::remove_dir_all(&dir);
    }
}
