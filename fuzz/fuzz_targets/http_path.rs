//! Normalises arbitrary request-targets (`path::normalize`) and checks what
//! an accepted path may hold: it never panics; an accepted path starts with
//! `/`, has no `.`, `..` or empty segment, no NUL or other control byte
//! (a backslash is a name byte), and joined to a root stays under it; normalising it again
//! (percent-encoded, as a `Location` carries it, or as is when it has nothing
//! to decode) gives the same path.
//!
//! Run: `fuzz/run 60 http_path`, or `cargo +nightly fuzz run http_path --
//! -dict=http.dict` (from `fuzz/`).
#![no_main]

use std::path::{Component, Path};

use duality_http::path::{encode, normalize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Targets are `&str` (httparse checks them); invalid UTF-8 here still
    // makes a target, with replacement characters.
    let target = String::from_utf8_lossy(data);
    let Ok(path) = normalize(&target) else {
        return;
    };
    assert!(path.starts_with('/'), "{path:?}");
    let inner = path.strip_suffix('/').unwrap_or(&path);
    assert!(
        inner
            .split('/')
            .skip(1)
            .all(|s| !matches!(s, "" | "." | "..")),
        "{target:?} -> {path:?}"
    );
    assert!(
        !path.bytes().any(|b| b < 0x20 || b == 0x7f),
        "{target:?} -> {path:?}"
    );

    // Lexically, joined to a root: only plain names below it.
    let root = Path::new("/srv/www");
    let joined = root.join(&path[1..]);
    assert!(joined.starts_with(root));
    assert!(joined
        .strip_prefix(root)
        .unwrap()
        .components()
        .all(|c| matches!(c, Component::Normal(_))));

    assert_eq!(normalize(&encode(&path)).as_ref(), Ok(&path), "{target:?}");
    if !path.contains(['%', '?', '#']) {
        assert_eq!(normalize(&path).as_ref(), Ok(&path), "{target:?}");
    }
});
