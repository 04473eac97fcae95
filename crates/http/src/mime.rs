//! `Content-Type` by file extension.
//!
//! The extension is matched without regard to case. Text types carry
//! `; charset=utf-8`; anything unknown (or without an extension) is
//! [`DEFAULT`], which browsers download rather than render.

use std::path::Path;

/// The type of a file whose extension is unknown.
pub const DEFAULT: &str = "application/octet-stream";

/// The `Content-Type` for `path`, by its extension.
///
/// ```
/// use duality_http::mime;
/// assert_eq!(mime::for_path("a/INDEX.HTML".as_ref()), "text/html; charset=utf-8");
/// assert_eq!(mime::for_path("a/b".as_ref()), mime::DEFAULT);
/// ```
pub fn for_path(path: &Path) -> &'static str {
    path.extension()
        .and_then(|e| e.to_str())
        .map_or(DEFAULT, for_extension)
}

/// The `Content-Type` for an extension given without its dot.
pub fn for_extension(ext: &str) -> &'static str {
    // Every known extension is short: lower-case it on the stack.
    let mut buf = [0u8; 12];
    let Some(lower) = buf.get_mut(..ext.len()) else {
        return DEFAULT;
    };
    lower.copy_from_slice(ext.as_bytes());
    lower.make_ascii_lowercase();
    match &*lower {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" => "text/javascript; charset=utf-8",
        b"txt" | b"text" => "text/plain; charset=utf-8",
        b"md" | b"markdown" => "text/markdown; charset=utf-8",
        b"csv" => "text/csv; charset=utf-8",
        b"xml" => "text/xml; charset=utf-8",
        b"ics" => "text/calendar; charset=utf-8",
        b"json" | b"map" => "application/json",
        b"jsonld" => "application/ld+json",
        b"webmanifest" => "application/manifest+json",
        b"wasm" => "application/wasm",
        b"pdf" => "application/pdf",
        b"zip" => "application/zip",
        b"gz" => "application/gzip",
        b"tar" => "application/x-tar",
        b"svg" | b"svgz" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"bmp" => "image/bmp",
        b"ico" => "image/x-icon",
        b"tif" | b"tiff" => "image/tiff",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"ttf" => "font/ttf",
        b"otf" => "font/otf",
        b"mp4" | b"m4v" => "video/mp4",
        b"webm" => "video/webm",
        b"ogv" => "video/ogg",
        b"mp3" => "audio/mpeg",
        b"m4a" => "audio/mp4",
        b"ogg" | b"oga" => "audio/ogg",
        b"wav" => "audio/wav",
        b"flac" => "audio/flac",
        _ => DEFAULT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        for (name, want) in [
            ("index.html", "text/html; charset=utf-8"),
            ("a.htm", "text/html; charset=utf-8"),
            ("s.CSS", "text/css; charset=utf-8"),
            ("app.js", "text/javascript; charset=utf-8"),
            ("mod.mjs", "text/javascript; charset=utf-8"),
            ("d.json", "application/json"),
            ("r.txt", "text/plain; charset=utf-8"),
            ("f.xml", "text/xml; charset=utf-8"),
            ("i.svg", "image/svg+xml"),
            ("i.png", "image/png"),
            ("i.jpg", "image/jpeg"),
            ("i.JPEG", "image/jpeg"),
            ("i.gif", "image/gif"),
            ("i.webp", "image/webp"),
            ("favicon.ico", "image/x-icon"),
            ("m.wasm", "application/wasm"),
            ("d.pdf", "application/pdf"),
            ("f.woff", "font/woff"),
            ("f.woff2", "font/woff2"),
            ("v.mp4", "video/mp4"),
            ("noext", DEFAULT),
            (".hidden", DEFAULT),
            ("a.unknownextension", DEFAULT),
            ("a.tar.gz", "application/gzip"),
            ("a.", DEFAULT),
        ] {
            assert_eq!(for_path(Path::new(name)), want, "{name}");
        }
    }

    #[test]
    fn non_utf8_extension_is_default() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"a.\xff"));
        assert_eq!(for_path(p), DEFAULT);
    }
}
