//! `Content-Type` by file extension.
//!
//! The extension is matched without regard to case; the table covers
//! nginx's `mime.types` and a few newer types. Documents that can declare
//! their own encoding (HTML's `<meta charset>`, CSS's `@charset`, the XML
//! declaration, scripts) get no charset, as nginx sends them (an HTTP
//! charset would override theirs); plain text, Markdown, CSV and calendars
//! carry `; charset=utf-8`. Anything unknown (or without an extension) is
//! [`DEFAULT`], which browsers download rather than render, unless
//! [`Types::with_default`] names another (nginx's `default_type`).

use std::path::Path;

/// The type of a file whose extension is unknown.
pub const DEFAULT: &str = "application/octet-stream";

/// nginx's `charset NAME`: the types it labels (nginx's default
/// `charset_types`, JavaScript typed as this table types it), each with
/// `; charset=NAME` in place of any charset of the table's.
#[derive(Debug, Clone, Default)]
pub struct Charset {
    /// (the type's essence, the type labelled)
    labelled: Vec<(&'static str, &'static str)>,
}

impl Charset {
    /// What `charset` labels (plus `text/javascript`, this table's type for
    /// scripts, where nginx's `mime.types` has `application/javascript`).
    pub const TYPES: [&'static str; 7] = [
        "text/html",
        "text/xml",
        "text/plain",
        "text/vnd.wap.wml",
        "text/javascript",
        "application/javascript",
        "application/rss+xml",
    ];

    /// Labels with `name`. The labelled types are made once per server
    /// and kept for the process (as the table's are static).
    pub fn new(name: &str) -> Charset {
        let labelled = Charset::TYPES
            .iter()
            .map(|&t| {
                let full: &'static str = Box::leak(format!("{t}; charset={name}").into_boxed_str());
                (t, full)
            })
            .collect();
        Charset { labelled }
    }

    /// `content_type` (one of this table's), labelled if it is of
    /// [`TYPES`](Self::TYPES).
    ///
    /// ```
    /// use duality_http::mime::{for_path, Charset};
    /// let utf8 = Charset::new("utf-8");
    /// assert_eq!(utf8.apply(for_path("i.html".as_ref())), "text/html; charset=utf-8");
    /// assert_eq!(Charset::new("koi8-r").apply(for_path("a.txt".as_ref())), "text/plain; charset=koi8-r");
    /// assert_eq!(utf8.apply(for_path("s.css".as_ref())), "text/css");
    /// assert_eq!(Charset::default().apply("text/html"), "text/html");
    /// ```
    pub fn apply(&self, content_type: &'static str) -> &'static str {
        let essence = content_type.split(';').next().unwrap_or(content_type);
        self.labelled
            .iter()
            .find(|(t, _)| *t == essence)
            .map_or(content_type, |(_, full)| full)
    }
}

/// One `--type "MEDIA/TYPE ext…"` (an entry of nginx's `types` block):
/// files with these extensions are of that type, whatever the table says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeRule {
    /// The media type, as written.
    pub media: String,
    /// The extensions, lower-cased, without their dot.
    pub extensions: Vec<String>,
}

/// The entries of an nginx `mime.types` file (`types { MEDIA/TYPE EXT…;
/// … }`, `#` comments; the `types` wrapper may be left out), in order, as
/// [`TypeRule`]s; an entry that is not one says where.
pub fn parse_types_file(text: &str) -> Result<Vec<TypeRule>, String> {
    // Words with the line each is on; `{`, `}` and `;` are words of their own.
    let mut words = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let spaced = line
            .replace('{', " { ")
            .replace('}', " } ")
            .replace(';', " ; ");
        words.extend(spaced.split_whitespace().map(|w| (n + 1, w.to_owned())));
    }
    let mut words = words.into_iter().peekable();
    let wrapped = words.peek().is_some_and(|(_, w)| w == "types");
    if wrapped {
        words.next();
        match words.next() {
            Some((_, w)) if w == "{" => {}
            other => {
                let line = other.map_or(0, |(n, _)| n);
                return Err(format!("line {line}: \"types\" without its \"{{\""));
            }
        }
    }
    let mut rules = Vec::new();
    let mut entry: Vec<String> = Vec::new();
    let mut done = false;
    for (line, w) in words {
        if done {
            return Err(format!("line {line}: {w:?} after the types block"));
        }
        match w.as_str() {
            "}" if wrapped && entry.is_empty() => done = true,
            ";" => {
                let rule = entry.join(" ").parse::<TypeRule>();
                rules.push(rule.map_err(|e| format!("line {line}: {e}"))?);
                entry.clear();
            }
            "{" | "}" => return Err(format!("line {line}: unexpected {w:?}")),
            _ => entry.push(w),
        }
    }
    if !entry.is_empty() {
        return Err(format!("{:?}: an entry without its \";\"", entry.join(" ")));
    }
    if wrapped && !done {
        return Err("the types block has no \"}\"".to_owned());
    }
    Ok(rules)
}

impl std::str::FromStr for TypeRule {
    type Err = String;

    /// `MEDIA/TYPE EXT [EXT…]`, nginx's order (`application/wasm wasm`).
    fn from_str(s: &str) -> Result<TypeRule, String> {
        let mut words = s.split_whitespace();
        let media = words.next().unwrap_or("");
        if !is_media_type(media) {
            return Err(format!(
                "{media:?} is not a media type: give \"MEDIA/TYPE EXT…\", e.g. \"text/plain log\""
            ));
        }
        let extensions: Vec<String> = words.map(str::to_ascii_lowercase).collect();
        if extensions.is_empty() {
            return Err(format!(
                "{media}: give the extensions it types, e.g. \"{media} ext\""
            ));
        }
        if let Some(bad) = extensions
            .iter()
            .find(|e| e.contains(['/', '.']) || e.chars().any(char::is_control))
        {
            return Err(format!(
                "{bad:?}: an extension without its dot, as nginx's types take it"
            ));
        }
        Ok(TypeRule {
            media: media.to_owned(),
            extensions,
        })
    }
}

/// Whether `s` is a media type without parameters, `TYPE/SUBTYPE` (two
/// tokens).
pub fn is_media_type(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(t, sub)| crate::fields::is_token(t) && crate::fields::is_token(sub))
}

/// How the server types a file: by `--type` rules first, else by
/// [`for_path`]'s table, else by the default type, then labelled by
/// `--charset` ([`Charset`]).
#[derive(Debug, Default)]
pub struct Types {
    /// Extension (lower case) → type, from the rules.
    added: std::collections::HashMap<String, &'static str>,
    /// The type of a file neither the rules nor the table know
    /// (`--default-type`); [`DEFAULT`] when `None`.
    fallback: Option<&'static str>,
    charset: Charset,
}

impl Types {
    /// `rules` (a later one for the same extension wins, as in nginx's
    /// `types` block) and `charset`. Their types are made once per server
    /// and kept for the process, as the table's are static.
    pub fn new(rules: &[TypeRule], charset: Option<&str>) -> Types {
        let mut added = std::collections::HashMap::new();
        for rule in rules {
            let media: &'static str = Box::leak(rule.media.clone().into_boxed_str());
            for ext in &rule.extensions {
                added.insert(ext.clone(), media);
            }
        }
        Types {
            added,
            fallback: None,
            charset: charset.map(Charset::new).unwrap_or_default(),
        }
    }

    /// These types, with `media` for a file that neither the rules nor the
    /// table know, or that has no extension (nginx's `default_type`), in
    /// place of [`DEFAULT`]. Extensions the table types as `DEFAULT`
    /// (`.bin`, `.exe`, `.iso` …, as nginx's `mime.types` does) keep it.
    ///
    /// ```
    /// use duality_http::mime::Types;
    /// let types = Types::new(&[], Some("utf-8")).with_default("text/plain");
    /// assert_eq!(types.of("README".as_ref()), "text/plain; charset=utf-8");
    /// assert_eq!(types.of("x.bin".as_ref()), "application/octet-stream");
    /// ```
    pub fn with_default(mut self, media: &str) -> Types {
        self.fallback = Some(Box::leak(media.to_owned().into_boxed_str()));
        self
    }

    /// The `Content-Type` for `path`.
    ///
    /// ```
    /// use duality_http::mime::{TypeRule, Types};
    /// let rules: Vec<TypeRule> = vec!["text/plain log LOG2".parse().unwrap()];
    /// let types = Types::new(&rules, Some("utf-8"));
    /// assert_eq!(types.of("a/x.Log".as_ref()), "text/plain; charset=utf-8");
    /// assert_eq!(types.of("x.log2".as_ref()), "text/plain; charset=utf-8");
    /// assert_eq!(types.of("i.html".as_ref()), "text/html; charset=utf-8");
    /// assert_eq!(Types::default().of("x.log".as_ref()), "application/octet-stream");
    /// ```
    pub fn of(&self, path: &Path) -> &'static str {
        let ext = path.extension().and_then(|e| e.to_str());
        let added = match ext {
            Some(e) if !self.added.is_empty() => self.added.get(&e.to_ascii_lowercase()).copied(),
            _ => None,
        };
        let media = added
            .or_else(|| ext.and_then(known))
            .or(self.fallback)
            .unwrap_or(DEFAULT);
        self.charset.apply(media)
    }
}

/// The `Content-Type` for `path`, by its extension.
///
/// ```
/// use duality_http::mime;
/// assert_eq!(mime::for_path("a/INDEX.HTML".as_ref()), "text/html");
/// assert_eq!(mime::for_path("a/b".as_ref()), mime::DEFAULT);
/// ```
pub fn for_path(path: &Path) -> &'static str {
    path.extension()
        .and_then(|e| e.to_str())
        .map_or(DEFAULT, for_extension)
}

/// The `Content-Type` for an extension given without its dot ([`DEFAULT`]
/// for one the table does not know).
pub fn for_extension(ext: &str) -> &'static str {
    known(ext).unwrap_or(DEFAULT)
}

/// The table's `Content-Type` for an extension given without its dot, if it
/// knows the extension.
pub fn known(ext: &str) -> Option<&'static str> {
    // Every known extension is short: lower-case it on the stack.
    let mut buf = [0u8; 12];
    let lower = buf.get_mut(..ext.len())?;
    lower.copy_from_slice(ext.as_bytes());
    lower.make_ascii_lowercase();
    Some(match &*lower {
        b"html" | b"htm" | b"shtml" => "text/html",
        b"css" => "text/css",
        b"js" | b"mjs" => "text/javascript",
        b"xml" => "text/xml",
        b"txt" | b"text" => "text/plain; charset=utf-8",
        b"md" | b"markdown" => "text/markdown; charset=utf-8",
        b"csv" => "text/csv; charset=utf-8",
        b"ics" => "text/calendar; charset=utf-8",
        b"vtt" => "text/vtt; charset=utf-8",
        b"mml" => "text/mathml",
        b"htc" => "text/x-component",
        b"jad" => "text/vnd.sun.j2me.app-descriptor",
        b"wml" => "text/vnd.wap.wml",
        b"xhtml" => "application/xhtml+xml",
        b"rss" => "application/rss+xml",
        b"atom" => "application/atom+xml",
        b"xspf" => "application/xspf+xml",
        b"json" | b"map" => "application/json",
        b"jsonld" => "application/ld+json",
        b"webmanifest" => "application/manifest+json",
        b"wasm" => "application/wasm",
        b"pdf" => "application/pdf",
        b"rtf" => "application/rtf",
        b"ps" | b"eps" | b"ai" => "application/postscript",
        b"epub" => "application/epub+zip",
        b"doc" => "application/msword",
        b"xls" => "application/vnd.ms-excel",
        b"ppt" => "application/vnd.ms-powerpoint",
        b"docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        b"xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        b"pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        b"odt" => "application/vnd.oasis.opendocument.text",
        b"ods" => "application/vnd.oasis.opendocument.spreadsheet",
        b"odp" => "application/vnd.oasis.opendocument.presentation",
        b"odg" => "application/vnd.oasis.opendocument.graphics",
        b"kml" => "application/vnd.google-earth.kml+xml",
        b"kmz" => "application/vnd.google-earth.kmz",
        b"apk" => "application/vnd.android.package-archive",
        b"m3u8" => "application/vnd.apple.mpegurl",
        b"eot" => "application/vnd.ms-fontobject",
        b"wmlc" => "application/vnd.wap.wmlc",
        b"zip" => "application/zip",
        b"gz" => "application/gzip",
        b"tar" => "application/x-tar",
        b"7z" => "application/x-7z-compressed",
        b"rar" => "application/x-rar-compressed",
        b"jar" | b"war" | b"ear" => "application/java-archive",
        b"jnlp" => "application/x-java-jnlp-file",
        b"jardiff" => "application/x-java-archive-diff",
        b"hqx" => "application/mac-binhex40",
        b"pem" | b"crt" | b"der" => "application/x-x509-ca-cert",
        b"rpm" => "application/x-redhat-package-manager",
        b"swf" => "application/x-shockwave-flash",
        b"xpi" => "application/x-xpinstall",
        b"pl" | b"pm" => "application/x-perl",
        b"tcl" | b"tk" => "application/x-tcl",
        b"sit" => "application/x-stuffit",
        b"run" => "application/x-makeself",
        b"svg" | b"svgz" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"bmp" => "image/bmp",
        b"ico" => "image/x-icon",
        b"tif" | b"tiff" => "image/tiff",
        b"jng" => "image/x-jng",
        b"wbmp" => "image/vnd.wap.wbmp",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"ttf" => "font/ttf",
        b"otf" => "font/otf",
        b"mp4" | b"m4v" => "video/mp4",
        b"webm" => "video/webm",
        b"ogv" => "video/ogg",
        b"ts" => "video/mp2t",
        b"mov" => "video/quicktime",
        b"mpeg" | b"mpg" => "video/mpeg",
        b"avi" => "video/x-msvideo",
        b"3gp" | b"3gpp" => "video/3gpp",
        b"flv" => "video/x-flv",
        b"wmv" => "video/x-ms-wmv",
        b"asf" | b"asx" => "video/x-ms-asf",
        b"mng" => "video/x-mng",
        b"mp3" => "audio/mpeg",
        b"m4a" => "audio/mp4",
        b"aac" => "audio/aac",
        b"ogg" | b"oga" => "audio/ogg",
        b"wav" => "audio/wav",
        b"flac" => "audio/flac",
        b"mid" | b"midi" | b"kar" => "audio/midi",
        b"ra" => "audio/x-realaudio",
        // Named in nginx's mime.types, so `default_type` does not apply.
        b"bin" | b"exe" | b"dll" | b"deb" | b"dmg" | b"iso" | b"img" | b"msi" | b"msp" | b"msm" => {
            DEFAULT
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nginx_mime_types_files() {
        let text =
            "\n# ours\ntypes {\n    text/html  html htm;\n    application/wasm wasm; # new\n\
                    image/avif\n        avif;\n}\n";
        let rules = parse_types_file(text).unwrap();
        let got: Vec<(&str, Vec<&str>)> = rules
            .iter()
            .map(|r| {
                (
                    r.media.as_str(),
                    r.extensions.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("text/html", vec!["html", "htm"]),
                ("application/wasm", vec!["wasm"]),
                ("image/avif", vec!["avif"]),
            ]
        );
        // Without the wrapper, entries alone.
        assert_eq!(parse_types_file("text/x-a a;").unwrap().len(), 1);
        for (bad, says) in [
            ("types { text/html html }", "unexpected \"}\""),
            ("types { text/html html;", "no \"}\""),
            ("types { text/html html; } x", "after the types block"),
            ("types { html; }", "not a media type"),
            ("types text/html html;", "without its \"{\""),
            ("types { text/html; }", "give the extensions"),
        ] {
            let e = parse_types_file(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        // The file nginx ships, where it is installed.
        if let Ok(text) = std::fs::read_to_string("/etc/nginx/mime.types") {
            let rules = parse_types_file(&text).unwrap();
            assert!(rules.len() > 50, "{}", rules.len());
            let types = Types::new(&rules, None);
            assert_eq!(types.of(std::path::Path::new("a.css")), "text/css");
        }
    }

    #[test]
    fn table() {
        for (name, want) in [
            ("index.html", "text/html"),
            ("a.htm", "text/html"),
            ("s.CSS", "text/css"),
            ("app.js", "text/javascript"),
            ("mod.mjs", "text/javascript"),
            ("d.json", "application/json"),
            ("r.txt", "text/plain; charset=utf-8"),
            ("f.xml", "text/xml"),
            ("p.xhtml", "application/xhtml+xml"),
            ("feed.rss", "application/rss+xml"),
            ("live.m3u8", "application/vnd.apple.mpegurl"),
            ("seg.ts", "video/mp2t"),
            ("f.eot", "application/vnd.ms-fontobject"),
            (
                "r.docx",
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            ),
            ("a.7z", "application/x-7z-compressed"),
            ("c.pem", "application/x-x509-ca-cert"),
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
