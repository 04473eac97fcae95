//! gzip end to end, over real sockets: round trips for every compressible
//! type, what is never compressed, `Vary`, HEAD and 304 against GET, Range
//! answered from the identity body, `gzip_static` (fresh, stale, confined,
//! alone, never to clients that do not take gzip), the variant cache (bound and
//! invalidation), both offload policies under several threading models.

mod common;

use common::{read_file, Client, Resp, TestServer};
use duality_http::{GzipConfig, HttpConfig, Offload};
use flate2::read::GzDecoder;
use std::io::Read as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

const GZ: &str = "Accept-Encoding: gzip, deflate, br\r\n";

fn gzip_on(cfg: &mut HttpConfig) {
    cfg.gzip = GzipConfig::on();
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    GzDecoder::new(b)
        .read_to_end(&mut out)
        .expect("a valid gzip body");
    out
}

fn gzip_bytes(b: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// Compressible text of `len` bytes.
fn text(len: usize, seed: &str) -> Vec<u8> {
    let line = format!("{seed}: the quick brown fox jumps over the lazy dog {{}} <p/>\n");
    line.as_bytes().iter().copied().cycle().take(len).collect()
}

/// Sets the mtime of `p` to `t`.
fn set_mtime(p: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn assert_gzip_of(r: &Resp, want: &[u8], what: &str) {
    assert_eq!(r.status, 200, "{what}");
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{what}");
    assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{what}");
    assert_eq!(r.header("accept-ranges"), None, "{what}");
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string(),
        "{what}"
    );
    assert!(gunzip(&r.body) == want, "{what}: decompressed body differs");
}

fn assert_identity(r: &Resp, want: &[u8], vary: bool, what: &str) {
    assert_eq!(r.status, 200, "{what}");
    assert_eq!(r.header("content-encoding"), None, "{what}");
    assert_eq!(
        r.header("vary"),
        vary.then_some("Accept-Encoding"),
        "{what}"
    );
    assert!(r.body == want, "{what}: body differs");
}

#[test]
fn gzip_round_trip_for_every_compressible_type() {
    let s = TestServer::start("gz-types", gzip_on);
    let files = [
        ("page.html", "text/html"),
        ("style.css", "text/css"),
        ("app.js", "text/javascript"),
        ("mod.mjs", "text/javascript"),
        ("notes.txt", "text/plain; charset=utf-8"),
        ("readme.md", "text/markdown; charset=utf-8"),
        ("table.csv", "text/csv; charset=utf-8"),
        ("feed.xml", "text/xml"),
        ("cal.ics", "text/calendar; charset=utf-8"),
        ("data.json", "application/json"),
        ("app.js.map", "application/json"),
        ("ld.jsonld", "application/ld+json"),
        ("site.webmanifest", "application/manifest+json"),
        ("logo.svg", "image/svg+xml"),
        ("app.wasm", "application/wasm"),
        ("favicon.ico", "image/x-icon"),
        ("pic.bmp", "image/bmp"),
        ("font.ttf", "font/ttf"),
        ("font.otf", "font/otf"),
    ];
    // Sizes: in the page cache, above it (read for compressing), and past
    // the sendfile threshold.
    for (i, size) in [300usize, 70_000, 300_000].into_iter().enumerate() {
        for (name, content_type) in files {
            let name = format!("{i}-{name}");
            let body = text(size, &name);
            std::fs::write(s.www().join(&name), &body).unwrap();
            let mut c = s.client();
            let identity = c.get(&format!("/{name}"));
            assert_identity(&identity, &body, true, &name);
            let r = c.get_with(&format!("/{name}"), GZ);
            assert_gzip_of(&r, &body, &name);
            assert_eq!(r.header("content-type"), Some(content_type), "{name}");
            assert!(r.body.len() < body.len() / 2, "{name}: compressed");
            // The variant's tag: the identity tag with -gzip.
            let tag = identity.header("etag").unwrap();
            let want_tag = format!("{}-gzip\"", &tag[..tag.len() - 1]);
            assert_eq!(r.header("etag"), Some(want_tag.as_str()), "{name}");
            assert_eq!(r.header("last-modified"), identity.header("last-modified"));
            // Again: from the variant cache, the same bytes.
            let again = c.get_with(&format!("/{name}"), GZ);
            assert_eq!(again.body, r.body, "{name}");
        }
    }
    let st = s.state.stats();
    assert_eq!(st.gzip_compressed, 3 * files.len() as u64, "{st:?}");
    assert!(st.gzip_cache.hits >= 3 * files.len() as u64, "{st:?}");
}

#[test]
fn what_is_never_compressed() {
    let s = TestServer::start("gz-never", |cfg| {
        gzip_on(cfg);
        cfg.gzip.max_length = 100_000;
    });
    let www = s.www();
    let small = text(255, "small");
    let edge = text(256, "edge");
    let png = text(5000, "png");
    let svgz = text(5000, "svgz");
    let bin = text(5000, "bin");
    let huge = text(100_001, "huge");
    let body = text(5000, "body");
    std::fs::write(www.join("small.txt"), &small).unwrap();
    std::fs::write(www.join("edge.txt"), &edge).unwrap();
    std::fs::write(www.join("image.png"), &png).unwrap();
    std::fs::write(www.join("image.svgz"), &svgz).unwrap();
    std::fs::write(www.join("data.bin"), &bin).unwrap();
    std::fs::write(www.join("huge.txt"), &huge).unwrap();
    std::fs::write(www.join("body.txt"), &body).unwrap();
    let mut c = s.client();
    // Below the minimum, not on the list: no gzip and no Vary.
    assert_identity(&c.get_with("/small.txt", GZ), &small, false, "small");
    assert_gzip_of(&c.get_with("/edge.txt", GZ), &edge, "min length itself");
    assert_identity(&c.get_with("/image.png", GZ), &png, false, "png");
    assert_identity(&c.get_with("/image.svgz", GZ), &svgz, false, "svgz");
    assert_identity(&c.get_with("/data.bin", GZ), &bin, false, "bin");
    // Above the maximum: identity, but Vary (a .gz could be served).
    assert_identity(&c.get_with("/huge.txt", GZ), &huge, true, "huge");
    // Not accepted, in every spelling.
    for fields in [
        "",
        "Accept-Encoding: \r\n",
        "Accept-Encoding: identity\r\n",
        "Accept-Encoding: gzip;q=0\r\n",
        "Accept-Encoding: gzip;q=0, *\r\n",
        "Accept-Encoding: *;q=0\r\n",
        "Accept-Encoding: br, deflate\r\n",
        "Accept-Encoding: gzip;q=0.5, identity\r\n",
        "Accept-Encoding: gzip;q=garbage\r\n",
        "Accept-Encoding: ;;;,,,==\r\n",
    ] {
        assert_identity(&c.get_with("/body.txt", fields), &body, true, fields);
    }
    // identity refused without gzip acceptable: identity all the same, not 406.
    let r = c.get_with("/body.txt", "Accept-Encoding: identity;q=0\r\n");
    assert_identity(&r, &body, true, "identity;q=0");
    // Accepted in other spellings.
    for fields in [
        "Accept-Encoding: GZIP\r\n",
        "Accept-Encoding: x-gzip\r\n",
        "Accept-Encoding: *\r\n",
        "Accept-Encoding:   deflate ,\tgzip ; q=0.2 \r\n",
        "Accept-Encoding: br\r\nAccept-Encoding: gzip\r\n",
        "Accept-Encoding: identity;q=0\r\nAccept-Encoding: gzip\r\n",
    ] {
        assert_gzip_of(&c.get_with("/body.txt", fields), &body, fields);
    }
    // Errors and redirects are never compressed.
    let r = c.get_with("/missing.txt", GZ);
    assert_eq!((r.status, r.header("content-encoding")), (404, None));
    let r = c.get_with("/sub", GZ);
    assert_eq!((r.status, r.header("content-encoding")), (301, None));
}

#[test]
fn gzip_off_changes_nothing() {
    let s = TestServer::start("gz-off", |_| {});
    let body = text(5000, "off");
    std::fs::write(s.www().join("a.txt"), &body).unwrap();
    std::fs::write(s.www().join("a.txt.gz"), gzip_bytes(b"static")).unwrap();
    let mut c = s.client();
    assert_identity(&c.get_with("/a.txt", GZ), &body, false, "off");
    assert_eq!(s.state.stats().gzip_compressed, 0);
}

#[test]
fn head_and_304_agree_with_get() {
    // No variant cache: every GET compresses, so a 304 that compressed
    // would show in the counter.
    let s = TestServer::start("gz-cond", |cfg| {
        gzip_on(cfg);
        cfg.gzip.cache_bytes = 0;
    });
    let body = text(20_000, "cond");
    std::fs::write(s.www().join("c.css"), &body).unwrap();
    let mut c = s.client();
    // HEAD first, before any variant exists: it still knows the length.
    c.send(format!("HEAD /c.css HTTP/1.1\r\nHost: t\r\n{GZ}\r\n"));
    let head = c.response(true);
    let get = c.get_with("/c.css", GZ);
    assert_gzip_of(&get, &body, "get");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for field in [
        "content-type",
        "content-encoding",
        "content-length",
        "etag",
        "last-modified",
        "vary",
        "accept-ranges",
    ] {
        assert_eq!(head.header(field), get.header(field), "{field}");
    }
    let gz_tag = get.header("etag").unwrap().to_owned();
    let identity = c.get("/c.css");
    let id_tag = identity.header("etag").unwrap().to_owned();
    assert_ne!(gz_tag, id_tag);

    let compressed = s.state.stats().gzip_compressed;
    // The variant's tag → 304, with the variant's headers, for GET and HEAD.
    let r = c.get_with("/c.css", &format!("{GZ}If-None-Match: {gz_tag}\r\n"));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(gz_tag.as_str()));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.header("last-modified"), get.header("last-modified"));
    c.send(format!(
        "HEAD /c.css HTTP/1.1\r\nHost: t\r\n{GZ}If-None-Match: W/{gz_tag}\r\n\r\n"
    ));
    let r = c.response(true);
    assert_eq!((r.status, r.header("etag")), (304, Some(gz_tag.as_str())));
    let lm = get.header("last-modified").unwrap();
    let r = c.get_with("/c.css", &format!("{GZ}If-Modified-Since: {lm}\r\n"));
    assert_eq!((r.status, r.header("etag")), (304, Some(gz_tag.as_str())));
    assert_eq!(
        s.state.stats().gzip_compressed,
        compressed,
        "a 304 compresses nothing"
    );
    // The identity tag names another representation: 200 gzip.
    let r = c.get_with("/c.css", &format!("{GZ}If-None-Match: {id_tag}\r\n"));
    assert_gzip_of(&r, &body, "identity tag, gzip accepted");
    // And the other way round.
    let r = c.get_with("/c.css", &format!("If-None-Match: {gz_tag}\r\n"));
    assert_identity(&r, &body, true, "gzip tag, gzip not accepted");
    let r = c.get_with("/c.css", &format!("If-None-Match: {id_tag}\r\n"));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("etag"), Some(id_tag.as_str()));
}

#[test]
fn range_requests_get_the_identity_body() {
    let s = TestServer::start("gz-range", gzip_on);
    let body = text(200_000, "range");
    std::fs::write(s.www().join("r.js"), &body).unwrap();
    let mut c = s.client();
    let gz = c.get_with("/r.js", GZ);
    let gz_tag = gz.header("etag").unwrap().to_owned();
    for _ in 0..2 {
        let r = c.get_with("/r.js", &format!("{GZ}Range: bytes=100-199\r\n"));
        assert_eq!(r.status, 206);
        assert_eq!(r.header("content-encoding"), None);
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(r.header("content-range"), Some("bytes 100-199/200000"));
        assert_eq!(r.body, &body[100..200]);
    }
    // If-Range with the gzip variant's tag: that is not the identity body,
    // so the whole identity body (a download resumed from gzip bytes must not
    // get identity bytes spliced in).
    let r = c.get_with(
        "/r.js",
        &format!("{GZ}Range: bytes=100-199\r\nIf-Range: {gz_tag}\r\n"),
    );
    assert_identity(&r, &body, true, "if-range with the gzip tag");
    // An unusable Range is ignored, and the answer is still identity.
    let r = c.get_with("/r.js", &format!("{GZ}Range: bytes=5-1\r\n"));
    assert_identity(&r, &body, true, "unusable range");
    // Several ranges: identity parts, with Vary.
    let r = c.get_with("/r.js", &format!("{GZ}Range: bytes=0-1,5-6\r\n"));
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let ct = r.header("content-type").unwrap();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        text.contains("Content-Range: bytes 5-6/200000\r\n"),
        "{text}"
    );
    // Unsatisfiable: 416 with Vary.
    let r = c.get_with("/r.js", &format!("{GZ}Range: bytes=999999-\r\n"));
    assert_eq!(r.status, 416);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
}

#[test]
fn gzip_static_fresh_stale_and_confined() {
    let s = TestServer::start("gz-static", |cfg| {
        gzip_on(cfg);
        cfg.revalidate = Duration::ZERO;
    });
    let www = s.www();
    let body = text(10_000, "identity");
    // A .gz whose content differs from the file, so that the test can tell
    // which one was sent.
    let marker = text(10_000, "from the .gz file");
    let js = www.join("s.js");
    let gz = www.join("s.js.gz");
    std::fs::write(&js, &body).unwrap();
    std::fs::write(&gz, gzip_bytes(&marker)).unwrap();
    let t0 = SystemTime::now() - Duration::from_secs(100);
    set_mtime(&js, t0);
    set_mtime(&gz, t0); // as new: fresh
    let mut c = s.client();
    let r = c.get_with("/s.js", GZ);
    assert_gzip_of(&r, &marker, "fresh .gz");
    assert_eq!(r.body, read_file(&gz), "the .gz bytes themselves");
    assert_eq!(r.header("content-type"), Some("text/javascript"));
    let id_tag = c.get("/s.js").header("etag").unwrap().to_owned();
    let gz_tag = r.header("etag").unwrap().to_owned();
    assert!(gz_tag.ends_with("-gzip\"") && gz_tag != id_tag, "{gz_tag}");
    assert_eq!(s.state.stats().gzip_compressed, 0);
    assert!(s.state.stats().gzip_static >= 1);
    // Again: the same bytes and tag (from the variant cache now).
    let again = c.get_with("/s.js", GZ);
    assert_eq!(
        (again.header("etag"), &again.body),
        (Some(gz_tag.as_str()), &r.body)
    );
    // The .gz replaced (the file unchanged): its new bytes, a new tag, and
    // the old tag no longer answers 304.
    let marker2 = text(10_000, "from the second .gz file");
    let tmp = www.join("s.js.gz.new");
    std::fs::write(&tmp, gzip_bytes(&marker2)).unwrap();
    set_mtime(&tmp, t0 + Duration::from_secs(5));
    std::fs::rename(&tmp, &gz).unwrap();
    let r2 = c.get_with("/s.js", GZ);
    assert_gzip_of(&r2, &marker2, "replaced .gz");
    let gz_tag2 = r2.header("etag").unwrap().to_owned();
    assert_ne!(gz_tag2, gz_tag);
    let r3 = c.get_with("/s.js", &format!("{GZ}If-None-Match: {gz_tag}\r\n"));
    assert_eq!(r3.status, 200);
    assert_gzip_of(&r3, &marker2, "old tag");
    let r4 = c.get_with("/s.js", &format!("{GZ}If-None-Match: {gz_tag2}\r\n"));
    assert_eq!(r4.status, 304);
    // Never to a client that does not take gzip.
    for fields in [
        "",
        "Accept-Encoding: gzip;q=0\r\n",
        "Accept-Encoding: br\r\n",
    ] {
        assert_identity(&c.get_with("/s.js", fields), &body, true, fields);
    }
    // Nor to a Range request.
    let r = c.get_with("/s.js", &format!("{GZ}Range: bytes=0-9\r\n"));
    assert_eq!((r.status, &r.body[..]), (206, &body[..10]));
    // HEAD: the .gz's length.
    c.send(format!("HEAD /s.js HTTP/1.1\r\nHost: t\r\n{GZ}\r\n"));
    let h = c.response(true);
    assert_eq!(
        h.header("content-length"),
        Some(read_file(&gz).len().to_string().as_str())
    );

    // The file changes after its .gz: the .gz is stale, the server
    // compresses the file itself.
    std::fs::write(&js, &body).unwrap();
    set_mtime(&js, t0 + Duration::from_secs(10));
    let r = c.get_with("/s.js", GZ);
    assert_gzip_of(&r, &body, "stale .gz");
    assert_eq!(s.state.stats().gzip_compressed, 1);

    // A .gz beside an index file.
    std::fs::write(www.join("sub/index.html.gz"), gzip_bytes(&marker)).unwrap();
    std::fs::write(www.join("sub/index.html"), text(1000, "index")).unwrap();
    set_mtime(&www.join("sub/index.html"), t0);
    assert_gzip_of(&c.get_with("/sub/", GZ), &marker, "index .gz");

    // A .gz that is a symlink out of the root is never read.
    let outside = s.dir.0.join("outside");
    std::fs::write(outside.join("o.txt.gz"), gzip_bytes(b"TOP SECRET")).unwrap();
    let o = text(1000, "o");
    std::fs::write(www.join("o.txt"), &o).unwrap();
    set_mtime(&www.join("o.txt"), t0);
    std::os::unix::fs::symlink("../outside/o.txt.gz", www.join("o.txt.gz")).unwrap();
    assert_gzip_of(&c.get_with("/o.txt", GZ), &o, "outside .gz not used");
    // A directory named like a .gz is not a file.
    let d = text(1000, "d");
    std::fs::write(www.join("d.txt"), &d).unwrap();
    std::fs::create_dir(www.join("d.txt.gz")).unwrap();
    assert_gzip_of(&c.get_with("/d.txt", GZ), &d, "directory .gz not used");
    // The .gz itself is an ordinary file, served as such.
    let r = c.get("/s.js.gz");
    assert_eq!(r.header("content-type"), Some("application/gzip"));
    assert_eq!(r.header("content-encoding"), None);
}

#[test]
fn gzip_static_without_compression_serves_only_the_gz_files() {
    let s = TestServer::start("gz-static-only", |cfg| {
        cfg.gzip.static_files = true;
        cfg.revalidate = Duration::ZERO;
    });
    let www = s.www();
    let body = text(10_000, "identity");
    let marker = text(10_000, "from the .gz file");
    std::fs::write(www.join("s.js"), &body).unwrap();
    std::fs::write(www.join("s.js.gz"), gzip_bytes(&marker)).unwrap();
    let t0 = SystemTime::now() - Duration::from_secs(100);
    set_mtime(&www.join("s.js"), t0);
    set_mtime(&www.join("s.js.gz"), t0);
    let plain = text(10_000, "no .gz beside it");
    std::fs::write(www.join("p.txt"), &plain).unwrap();
    std::fs::write(www.join("lone.css.gz"), gzip_bytes(&marker)).unwrap();
    let mut c = s.client();
    assert_gzip_of(&c.get_with("/s.js", GZ), &marker, "fresh .gz");
    // Vary only where a fresh .gz is beside the file (nginx's gzip_static
    // with gzip_vary): a file with one variant does not vary.
    assert_identity(&c.get("/s.js"), &body, true, "no Accept-Encoding");
    assert_identity(&c.get_with("/p.txt", GZ), &plain, false, "no .gz");
    assert_identity(&c.get("/p.txt"), &plain, false, "no .gz, identity");
    assert_gzip_of(&c.get_with("/lone.css", GZ), &marker, "lone .gz");
    // A stale .gz: the identity body, never a compression.
    std::fs::write(www.join("s.js"), &body).unwrap();
    set_mtime(&www.join("s.js"), t0 + Duration::from_secs(10));
    assert_identity(&c.get_with("/s.js", GZ), &body, false, "stale .gz");
    assert_identity(&c.get("/s.js"), &body, false, "stale .gz, identity");
    let stats = s.state.stats();
    assert_eq!(stats.gzip_compressed, 0);
    assert!(stats.gzip_static >= 2, "{}", stats.gzip_static);
}

/// The same from the fresh index (a stat trusted for a while): a hit
/// varies as the lookup that recorded it found.
#[test]
fn gzip_static_without_compression_varies_cache_hits_as_their_lookup() {
    let s = TestServer::start("gz-static-only-hits", |cfg| {
        cfg.gzip.static_files = true;
        cfg.revalidate = Duration::from_secs(60);
    });
    let www = s.www();
    let body = text(10_000, "identity");
    std::fs::write(www.join("s.js"), &body).unwrap();
    std::fs::write(www.join("s.js.gz"), gzip_bytes(&body)).unwrap();
    std::fs::write(www.join("p.txt"), &body).unwrap();
    let mut c = s.client();
    for round in ["miss", "hit", "hit again"] {
        assert_identity(&c.get("/s.js"), &body, true, round);
        assert_identity(&c.get("/p.txt"), &body, false, round);
        assert_gzip_of(&c.get_with("/s.js", GZ), &body, round);
        assert_identity(&c.get_with("/p.txt", GZ), &body, false, round);
    }
}

#[test]
fn gzip_static_alone_answers_clients_that_take_gzip() {
    let s = TestServer::start("gz-alone", |cfg| {
        gzip_on(cfg);
        cfg.revalidate = Duration::ZERO;
    });
    let www = s.www();
    let marker = text(3000, "only the .gz exists");
    std::fs::write(www.join("app.css.gz"), gzip_bytes(&marker)).unwrap();
    let mut c = s.client();
    let r = c.get_with("/app.css", GZ);
    assert_gzip_of(&r, &marker, "a .gz alone");
    assert_eq!(r.header("content-type"), Some("text/css"));
    let tag = r.header("etag").unwrap().to_owned();
    // Its own validators: a 304, and the same bytes again from the cache.
    let r2 = c.get_with("/app.css", &format!("{GZ}If-None-Match: {tag}\r\n"));
    assert_eq!(r2.status, 304);
    assert_gzip_of(&c.get_with("/app.css", GZ), &marker, "again");
    // A Range cannot be taken from an identity body that does not exist:
    // the whole .gz, 200 (a server may ignore a Range; nginx sends that
    // range of the .gz).
    let r = c.get_with("/app.css", &format!("{GZ}Range: bytes=0-9\r\n"));
    assert_eq!(r.status, 200);
    assert_gzip_of(&r, &marker, "a .gz alone, with a Range");
    // A client that does not take gzip gets the 404 (nginx without
    // gunzip), with Vary (nginx's gzip_vary): a shared cache must not give
    // it to clients that take gzip. A name with no .gz gets none.
    for r in [
        c.get("/app.css"),
        c.get_with("/app.css", "Accept-Encoding: gzip;q=0\r\n"),
    ] {
        assert_eq!(r.status, 404);
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    }
    let r = c.get("/other.css");
    assert_eq!((r.status, r.header("vary")), (404, None));
    // A client preferring identity but taking gzip gets the .gz: there is
    // no identity body to prefer (nginx sends it too).
    let r = c.get_with("/app.css", "Accept-Encoding: gzip;q=0.5, identity;q=1\r\n");
    assert_gzip_of(&r, &marker, "a .gz alone, identity preferred");
    // Replaced: the new bytes, a new tag.
    let marker2 = text(3000, "the second .gz");
    let tmp = www.join("app.css.gz.new");
    std::fs::write(&tmp, gzip_bytes(&marker2)).unwrap();
    set_mtime(&tmp, SystemTime::now() + Duration::from_secs(5));
    std::fs::rename(&tmp, www.join("app.css.gz")).unwrap();
    let r3 = c.get_with("/app.css", GZ);
    assert_gzip_of(&r3, &marker2, "replaced");
    assert_ne!(r3.header("etag"), Some(tag.as_str()));
    // Never out of the root, never for a directory path.
    let outside = s.dir.0.join("outside");
    std::fs::write(outside.join("x.txt.gz"), gzip_bytes(b"TOP SECRET")).unwrap();
    std::os::unix::fs::symlink("../outside/x.txt.gz", www.join("x.txt.gz")).unwrap();
    assert_eq!(c.get_with("/x.txt", GZ).status, 404);
    std::fs::create_dir(www.join("d")).unwrap();
    std::fs::write(www.join("d/.gz"), gzip_bytes(b"dir")).unwrap();
    assert_eq!(c.get_with("/d/", GZ).status, 403);
    // --gzip-static off: 404.
    let off = TestServer::start("gz-alone-off", |cfg| {
        gzip_on(cfg);
        cfg.gzip.static_files = false;
    });
    std::fs::write(off.www().join("app.css.gz"), gzip_bytes(&marker)).unwrap();
    assert_eq!(off.client().get_with("/app.css", GZ).status, 404);
}

#[test]
fn large_gzip_static_goes_out_with_sendfile() {
    let s = TestServer::start("gz-static-big", |cfg| {
        gzip_on(cfg);
        cfg.gzip.cache_bytes = 0;
        cfg.gzip.max_length = 0; // nothing compressed on request
    });
    let www = s.www();
    let body = common::pseudo_random(600_000, 3);
    let gz = gzip_bytes(&body); // random bytes: about as large
    assert!(gz.len() as u64 > s.state.config().sendfile_threshold);
    std::fs::write(www.join("big.json"), &body).unwrap();
    std::fs::write(www.join("big.json.gz"), &gz).unwrap();
    let mut c = s.client();
    let before = s.state.stats().sendfile_bytes;
    let r = c.get_with("/big.json", GZ);
    assert_gzip_of(&r, &body, "big .gz");
    // The server counts a piece after its sendfile returned, which may be
    // after the client has read it.
    let sent = || s.state.stats().sendfile_bytes - before;
    common::eventually(Duration::from_secs(5), || sent() >= gz.len() as u64);
    assert_eq!(sent(), gz.len() as u64);
    // Keep-alive still in step afterwards.
    assert_identity(&c.get("/big.json"), &body, true, "identity after");
}

#[test]
fn variant_cache_is_invalidated_when_the_file_changes() {
    let s = TestServer::start("gz-inval", |cfg| {
        gzip_on(cfg);
        cfg.revalidate = Duration::ZERO;
    });
    let p = s.www().join("v.txt");
    let one = text(4000, "version one");
    let two = text(5000, "version two");
    std::fs::write(&p, &one).unwrap();
    let mut c = s.client();
    let r1 = c.get_with("/v.txt", GZ);
    assert_gzip_of(&r1, &one, "v1");
    assert_gzip_of(&c.get_with("/v.txt", GZ), &one, "v1 cached");
    std::fs::write(&p, &two).unwrap();
    let r2 = c.get_with("/v.txt", GZ);
    assert_gzip_of(&r2, &two, "v2");
    assert_ne!(r1.header("etag"), r2.header("etag"));
    let st = s.state.stats();
    assert_eq!(st.gzip_compressed, 2);
    assert_eq!(st.gzip_cache.invalidations, 1, "{st:?}");
    assert_eq!(st.gzip_cache.hits, 1, "{st:?}");
}

#[test]
fn variant_cache_respects_its_bound() {
    let budget = 256 << 10;
    let s = TestServer::start("gz-bound", |cfg| {
        gzip_on(cfg);
        cfg.gzip.cache_bytes = budget;
        cfg.cache_bytes = 0;
    });
    let mut c = s.client();
    for i in 0..200 {
        // Pseudo-random text: compresses to about 3/4, so each variant
        // takes some 3 to 20 KiB.
        let words: Vec<u8> = common::pseudo_random(4000 + 100 * i, i as u64)
            .iter()
            .map(|b| b'a' + b % 26)
            .collect();
        let name = format!("f{i}.txt");
        std::fs::write(s.www().join(&name), &words).unwrap();
        assert_gzip_of(&c.get_with(&format!("/{name}"), GZ), &words, &name);
        let st = s.state.stats().gzip_cache;
        assert!(st.bytes <= budget as u64, "{st:?}");
    }
    let st = s.state.stats().gzip_cache;
    assert!(st.evictions > 0, "{st:?}");
    assert!(st.bytes > budget as u64 / 2, "the budget is used: {st:?}");
}

#[test]
fn offload_pool_under_several_models() {
    for model in ["sped", "amped:1", "seda:1:1", "thread-per-conn", "steal:2"] {
        for offload in [Offload::Inline, Offload::Pool, Offload::Adaptive] {
            let s = TestServer::with_model("gz-models", model, |cfg| {
                gzip_on(cfg);
                cfg.gzip.offload = offload;
                cfg.gzip.cache_bytes = 0;
            });
            let body = text(100_000, model);
            std::fs::write(s.www().join("m.html"), &body).unwrap();
            let mut c = s.client();
            // Pipelined: gzip, identity, gzip, in order.
            c.send(format!(
                "GET /m.html HTTP/1.1\r\nHost: t\r\n{GZ}\r\n\
                 GET /m.html HTTP/1.1\r\nHost: t\r\n\r\n\
                 GET /m.html HTTP/1.1\r\nHost: t\r\n{GZ}\r\n"
            ));
            let what = format!("{model} {offload}");
            assert_gzip_of(&c.response(false), &body, &what);
            assert_identity(&c.response(false), &body, true, &what);
            assert_gzip_of(&c.response(false), &body, &what);
            assert_eq!(s.state.stats().gzip_compressed, 2, "{what}");
        }
    }
}

/// A client that reads a gzip body slowly does not hold anything up: the
/// pool's compression and the write happen as for any body.
#[test]
fn many_clients_at_once_with_the_pool() {
    let s = TestServer::with_model("gz-many", "symped:2", |cfg| {
        gzip_on(cfg);
        cfg.gzip.offload = Offload::Pool;
        cfg.gzip.cache_bytes = 0;
    });
    let body = text(50_000, "many");
    std::fs::write(s.www().join("x.txt"), &body).unwrap();
    let addr = s.addr;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..5 {
                    assert_gzip_of(&c.get_with("/x.txt", GZ), &body, "many");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.state.stats().gzip_compressed, 40);
}

/// How long compressing `input` at level 9 takes here (at least 60 ms, or
/// the orderings below would be too close to call).
fn compression_time(input: &[u8]) -> Duration {
    use duality_http::gzip::{compress, GzipInput, GzipJob};
    let job = GzipJob {
        input: GzipInput::Bytes(input.to_vec().into()),
        level: 9,
    };
    let t = std::time::Instant::now();
    assert!(compress(&job).is_some());
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(60),
        "compressed in {took:?}: use more input"
    );
    took
}

/// Under `sped` (one loop for everything): with `--offload pool` a small
/// request on another connection is answered while a large file is still
/// being compressed (and with `adaptive`, which sends a size class it has
/// not measured yet to the pool); with `inline` the loop is busy compressing until the
/// large response has started. (Orderings, not timings: the small request
/// is sent a third of the way into the large file's compression, as long as
/// it takes on this machine, measured first.)
#[test]
fn pool_keeps_the_loop_serving_while_compressing() {
    let words: Vec<u8> = common::pseudo_random(16 << 20, 5)
        .iter()
        .map(|b| b'a' + b % 26)
        .collect();
    let head_start = compression_time(&words) / 3;
    // `adaptive` has never seen this size class: it goes to the pool.
    for offload in [Offload::Pool, Offload::Adaptive, Offload::Inline] {
        let s = TestServer::with_model("gz-loop", "sped", |cfg| {
            gzip_on(cfg);
            cfg.gzip.offload = offload;
            cfg.gzip.level = 9;
            cfg.gzip.cache_bytes = 0;
        });
        std::fs::write(s.www().join("large.txt"), &words).unwrap();
        let mut large = s.client();
        large.send(format!("GET /large.txt HTTP/1.1\r\nHost: t\r\n{GZ}\r\n"));
        std::thread::sleep(head_start);
        let small = s.client().get("/hello.txt");
        assert_eq!(
            (small.status, small.text().as_str()),
            (200, "hello, world\n")
        );
        large.stream.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let started = match large.stream.peek(&mut b) {
            Ok(n) => n > 0,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(e) => panic!("{e}"),
        };
        large.stream.set_nonblocking(false).unwrap();
        match offload {
            Offload::Pool | Offload::Adaptive => {
                assert!(!started, "{offload}: answered before the compression ended")
            }
            Offload::Inline => assert!(started, "inline: the loop was compressing"),
        }
        assert_gzip_of(&large.response(false), &words, &format!("{offload}"));
    }
}
