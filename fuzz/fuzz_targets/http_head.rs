//! Parses arbitrary bytes as a stream of pipelined HTTP requests under
//! several `Limits` — each head with `parse_head`, then its body dropped
//! with `Discard`, as the connection handler does — and checks their
//! contract with it: they never panic; `consumed` is inside the input and
//! not 0; "read more" only comes while the bytes kept are fewer than
//! `max_request()`; every error closes; and a request that parses parses
//! the same whatever the reads it arrived in (every proper prefix is "read
//! more", the same bytes followed by anything parse the same).
//!
//! Run: `fuzz/run 60 http_head`, or `cargo +nightly fuzz run http_head --
//! -dict=http.dict` (from `fuzz/`).
#![no_main]

use duality_http::{parse_head, request::continue_due, Discard, Head, HttpError, Limits, RealIp};
use libfuzzer_sys::fuzz_target;

const LIMITS: [Limits; 4] = [
    // The server's defaults (nginx's).
    Limits {
        max_head: 32 * 1024,
        max_uri: 8 * 1024,
        max_headers: 256,
        max_body: 1024 * 1024,
    },
    // Small enough that short inputs reach every limit.
    Limits {
        max_head: 96,
        max_uri: 16,
        max_headers: 3,
        max_body: 8,
    },
    Limits {
        max_head: 512,
        max_uri: 128,
        max_headers: 16,
        max_body: 64,
    },
    // Degenerate: nothing fits, the field count is clamped to the cap.
    Limits {
        max_head: 0,
        max_uri: 0,
        max_headers: usize::MAX,
        max_body: 0,
    },
];

fuzz_target!(|data: &[u8]| {
    for limits in &LIMITS {
        let mut rest = data;
        // Pipelined requests, one after the other, as the handler drops
        // `consumed` bytes each time.
        while !rest.is_empty() {
            match whole(rest, limits) {
                Ok(None) => break,
                Err(e) => {
                    assert!(e.close, "an error after a bad head must close");
                    break;
                }
                Ok(Some((head, consumed))) => {
                    assert!(consumed > 0 && consumed <= rest.len());
                    check_head(&head, limits);
                    check_splits(rest, &head, consumed, limits);
                    rest = &rest[consumed..];
                }
            }
        }
    }
});

fn check_head(head: &Head<'_>, limits: &Limits) {
    assert!(head.target.len() <= limits.max_uri);
    assert!(head.content_length <= limits.max_body);
    assert!(head.path.starts_with('/'));
    assert!(!head.path.split('/').any(|s| s == ".."));
    assert!(head.raw.ends_with(b"\n"));
    // A trusted proxy's X-Forwarded-For, walked through every address.
    let real = RealIp {
        from: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
        header: "X-Forwarded-For".to_owned(),
        recursive: true,
    };
    let _ = real.client(head);
}

/// The whole request at the front of `buf` as the connection handler
/// finds it: its head, then its body dropped; `Ok(None)` while either has
/// not all come, and then the bytes still kept must fit the read buffer.
fn whole<'a>(buf: &'a [u8], limits: &Limits) -> Result<Option<(Head<'a>, usize)>, HttpError> {
    let Some((head, n)) = parse_head(buf, limits)? else {
        assert!(
            buf.len() < limits.max_request(),
            "read buffer full, no answer"
        );
        return Ok(None);
    };
    assert!(n > 0 && n <= buf.len());
    let _ = continue_due(&head, &buf[n..]);
    let Some(mut body) = Discard::new(&head) else {
        return Ok(Some((head, n)));
    };
    let s = body.skip(&buf[n..], limits)?;
    assert!(s.used <= buf.len() - n);
    if !s.done {
        assert!(
            buf.len() - n - s.used < limits.max_request(),
            "read buffer full, no answer"
        );
        return Ok(None);
    }
    Ok(Some((head, n + s.used)))
}

/// The request at the start of `buf` arrives in two reads, split at `cut`:
/// the first read must ask for more, the second gives the same answer.
fn check_splits(buf: &[u8], head: &Head<'_>, consumed: usize, limits: &Limits) {
    // Alone, without what follows it, the request parses the same.
    let alone = whole(&buf[..consumed], limits);
    assert_eq!(alone, Ok(Some((head.clone(), consumed))));
    // Every cut of a short request; of a long one the first and last
    // bytes, those around the end of the head and a sample of the rest, so
    // that one execution stays near-linear in the input.
    let head_end = match parse_head(buf, limits) {
        Ok(Some((_, n))) => n,
        other => panic!("the head parsed before: {other:?}"),
    };
    for cut in 0..consumed {
        let checked = consumed <= 256
            || cut < 64
            || cut + 16 >= consumed
            || cut.abs_diff(head_end) <= 8
            || cut % (consumed / 32) == 0;
        if !checked {
            continue;
        }
        assert_eq!(
            whole(&buf[..cut], limits),
            Ok(None),
            "a proper prefix ({cut} of {consumed} bytes) must ask for more"
        );
    }
}
