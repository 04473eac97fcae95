//! Plans the response to a request with arbitrary `Range`, `If-Range`,
//! `If-None-Match`, `If-Modified-Since` and `Date` values for a file of
//! arbitrary size and mtime (`plan_file`, which parses the `Range`), and
//! checks the plan against rules written out here independently: it never
//! panics; a 206 span is non-empty and inside the file and only answers a GET
//! with a Range whose If-Range (if any) matches; a 304 only when a validator
//! matches; 416 names the size; the head written agrees with the plan.
//!
//! Input: lines separated by `\n`. Line 0: a flags byte, then optional
//! decimal numbers `size mtime_secs mtime_nanos inode`. Lines 1-5: Range,
//! If-Range, If-None-Match, If-Modified-Since (an HTTP date or seconds since
//! the epoch), Date; a flag bit leaves each out.
//!
//! Run: `fuzz/run 60 http_range`, or `cargo +nightly fuzz run http_range --
//! -dict=http.dict` (from `fuzz/`).
#![no_main]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use duality_http::{date, plan_file, FileMeta, Head, Method, Plan, Status, Version, MAX_PARTS};
use libfuzzer_sys::fuzz_target;

/// The response's `Date` when the input gives none: later than the default
/// mtime, so that If-Modified-Since can hold.
const NOW: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|&b| b == b'\n');
    let control = lines.next().unwrap_or_default();
    let flags = control.first().copied().unwrap_or(0);
    let mut numbers = control
        .get(1..)
        .unwrap_or_default()
        .split(|&b| b == b' ')
        .map(decimal);
    let mut next_number = |default: u64| numbers.next().flatten().unwrap_or(default);
    let file = FileMeta {
        size: next_number(100),
        mtime: UNIX_EPOCH
            .checked_add(Duration::new(
                next_number(1_000_000_000),
                (next_number(500) % 1_000_000_000) as u32,
            ))
            .unwrap_or(UNIX_EPOCH),
        inode: next_number(42),
        changed: 0,
    };
    // Bit 2 + i leaves field i out; a missing line is left out too.
    let mut fields = [None; 5];
    for (i, field) in fields.iter_mut().enumerate() {
        let line = lines.next();
        if flags & (4 << i) == 0 {
            *field = line;
        }
    }
    let [range, if_range, if_none_match, ims_raw, date_raw] = fields;
    let if_modified_since = ims_raw.and_then(|v| {
        date::parse(v)
            .or_else(|| decimal(v).and_then(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s))))
    });
    // The Date value comes from the server's clock, never from a client: one
    // with line breaks would only break this harness's reading of the head.
    let now = match date_raw {
        Some(d) if !d.iter().any(u8::is_ascii_control) => String::from_utf8_lossy(d).into_owned(),
        _ => NOW.to_owned(),
    };
    let head = Head {
        method: match flags & 3 {
            0 | 1 => Method::Get,
            2 => Method::Head,
            _ => Method::Other,
        },
        method_name: "GET",
        target: b"/f",
        path: "/f".to_owned(),
        version: Version::Http11,
        keep_alive: flags & 0x80 == 0,
        host: Some(b"h"),
        if_modified_since,
        if_none_match,
        if_match: None,
        if_unmodified_since: None,
        range,
        if_range,
        accept_encoding: Default::default(),
        content_length: 0,
        chunked: false,
        referer: None,
        user_agent: None,
        expect_continue: false,
        raw: b"",
        rewritten_query: None,
        rewrites_ended: false,
        rewritten: false,
    };

    let mut out = Vec::new();
    let plan = plan_file(&head, &file, "text/plain", &now, &mut out);
    check(&head, &file, &now, &plan, &out);
});

fn check(head: &Head<'_>, file: &FileMeta, now: &str, plan: &Plan, out: &[u8]) {
    let etag = file.etag();
    assert_eq!(plan.keep_alive, head.keep_alive);
    assert!(out.starts_with(b"HTTP/1.1 "));
    let text = String::from_utf8_lossy(out);
    let head_len = text.find("\r\n\r\n").expect("the head ends") + 4;
    let fields = &text[..head_len];
    let content_range = fields
        .split("\r\n")
        .find_map(|l| l.strip_prefix("Content-Range: "));

    if head.method == Method::Other {
        assert_eq!(plan.status, Status::MethodNotAllowed);
        return;
    }
    match plan.status {
        Status::NotModified => {
            assert_eq!((plan.body, &plan.parts), (None, &None));
            assert_eq!(out.len(), head_len, "a 304 has no body");
            assert!(validator_matches(head, file, now), "304 without a match");
        }
        Status::PartialContent => {
            assert_eq!(head.method, Method::Get);
            assert!(head.range.is_some());
            if let Some(if_range) = head.if_range {
                let v = trim(if_range);
                assert!(
                    v == etag.as_bytes()
                        || date::parse(v) == Some(date::to_http_seconds(file.mtime)),
                    "206 although If-Range does not match"
                );
            }
            if let Some(parts) = &plan.parts {
                // Several spans: inside the file and apart, each part
                // exactly its delimiter, type and range; the head names the
                // boundary and the body's length (counted here from the
                // parts as they must be written), and no Content-Range.
                assert_eq!(plan.body, None);
                assert!(parts.parts.len() >= 2 && parts.parts.len() <= MAX_PARTS);
                let mut spans: Vec<_> = parts.parts.iter().map(|(_, s)| *s).collect();
                spans.sort_unstable_by_key(|s| s.start);
                for w in spans.windows(2) {
                    assert!(w[0].end() < w[1].start, "{:?}", parts.parts);
                }
                let b = &parts.boundary;
                let mut length: u128 = format!("\r\n--{b}--\r\n").len() as u128;
                for (part_head, span) in &parts.parts {
                    assert!(span.len > 0 && span.end() <= file.size, "{span:?}");
                    let want = format!(
                        "\r\n--{b}\r\nContent-Type: text/plain\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
                        span.start,
                        span.end() - 1,
                        file.size
                    );
                    assert_eq!(String::from_utf8_lossy(part_head), want);
                    length += want.len() as u128 + span.len as u128;
                }
                assert_eq!(content_range, None);
                let ct = format!("Content-Type: multipart/byteranges; boundary={b}\r\n");
                assert!(fields.contains(&ct));
                assert!(fields.contains(&format!("Content-Length: {length}\r\n")));
                return;
            }
            let span = plan.body.expect("a 206 has a body");
            assert!(
                span.len > 0 && span.end() <= file.size,
                "{span:?} outside {}",
                file.size
            );
            let want = format!("bytes {}-{}/{}", span.start, span.end() - 1, file.size);
            assert_eq!(content_range, Some(want.as_str()));
            let length = format!("Content-Length: {}\r\n", span.len);
            assert!(fields.contains(&length));
        }
        Status::RangeNotSatisfiable => {
            // An empty file is sent whole, as nginx sends it.
            assert!(file.size > 0, "416 for an empty file");
            assert_eq!((plan.body, &plan.parts), (None, &None));
            assert_eq!(head.method, Method::Get);
            assert!(head.range.is_some());
            let want = format!("bytes */{}", file.size);
            assert_eq!(content_range, Some(want.as_str()));
        }
        Status::Ok => {
            assert_eq!(plan.parts, None);
            let want = (head.method == Method::Get && file.size > 0).then_some(file.size);
            assert_eq!(plan.body.map(|s| (s.start, s.len)), want.map(|n| (0, n)));
            assert_eq!(content_range, None);
            // A validator that matches exactly must have given 304.
            if let Some(inm) = head.if_none_match {
                assert!(trim(inm) != etag.as_bytes(), "exact ETag match, but 200");
            }
            // A plain satisfiable range must have given 206.
            if head.method == Method::Get && head.if_range.is_none() {
                if let Some((a, b)) = head.range.and_then(simple_range) {
                    assert!(
                        a > b || a >= file.size,
                        "bytes={a}-{b} of {}, but 200",
                        file.size
                    );
                }
            }
        }
        other => panic!("unexpected status {other:?}"),
    }
}

/// Whether a 304 is allowed (RFC 9110 §13.1.2-3, §13.2.2): a listed tag
/// whose opaque part is the file's, `*`, or, without If-None-Match, an
/// If-Modified-Since not before the mtime and not after now.
fn validator_matches(head: &Head<'_>, file: &FileMeta, now: &str) -> bool {
    let etag = file.etag();
    if let Some(inm) = head.if_none_match {
        if trim(inm) == b"*" {
            return true;
        }
        // `"opaque"` somewhere in the list: necessary for a tag to match.
        return inm
            .windows(etag.as_bytes().len())
            .any(|w| w == etag.as_bytes());
    }
    let Some(ims) = head.if_modified_since else {
        return false;
    };
    let now = date::parse(now.as_bytes()).unwrap_or_else(SystemTime::now);
    date::to_http_seconds(file.mtime) <= ims && ims <= now
}

/// `bytes=a-b` in its plainest spelling.
fn simple_range(v: &[u8]) -> Option<(u64, u64)> {
    let rest = v.strip_prefix(b"bytes=")?;
    let dash = rest.iter().position(|&b| b == b'-')?;
    Some((decimal(&rest[..dash])?, decimal(&rest[dash + 1..])?))
}

/// Plain decimal digits that fit a u64 (not saturating, unlike the server:
/// the oracle stays on the numbers it can state exactly).
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn trim(v: &[u8]) -> &[u8] {
    let is_ws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = v.iter().position(|b| !is_ws(b)).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !is_ws(b)).map_or(start, |i| i + 1);
    &v[start..end]
}
