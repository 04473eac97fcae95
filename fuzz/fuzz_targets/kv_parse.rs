//! Parses arbitrary bytes as a stream of memcached requests, consuming what
//! each result says, and checks that every parsed request survives
//! encode → parse unchanged, and that a storage line whose data block is
//! still coming (`parse_value_head`) has the fields its whole request has,
//! and that the look-ahead (`request_ahead`) sizes a request as the parser
//! does and names its first key.
//!
//! Run: `cargo +nightly fuzz run kv_parse -- -dict=kv.dict` (from `fuzz/`).
#![no_main]

use duality_kv::{parse, parse_value_head, request_ahead, Limits, ParseError, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits, so the line and item limits are reached too.
    let limits = Limits {
        max_line: 512,
        max_get_line: 2048,
        max_item_size: 256,
    };
    let unlimited = Limits {
        max_line: usize::MAX,
        max_get_line: usize::MAX,
        max_item_size: usize::MAX,
    };
    let mut buf = data;
    let mut encoded = Vec::new();
    while !buf.is_empty() {
        let head = parse_value_head(buf, &limits);
        if let Some(h) = head {
            assert!(h.line_len() <= buf.len() && buf.len() < h.line_len() + h.vlen() + 2);
            assert!(matches!(parse(buf, &limits), Err(ParseError::Incomplete)));
        }
        match parse(buf, &limits) {
            Ok((req, used)) => {
                assert!(used > 0 && used <= buf.len());
                assert!(head.is_none(), "a whole request has no head");
                if let Some(a) = request_ahead(false, buf) {
                    let first = match req {
                        Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } => {
                            keys.first()
                        }
                        _ => req.key(),
                    };
                    assert_eq!((a.key, a.len), (first, used));
                }
                if let Request::Store { value, .. } | Request::MetaSet { value, .. } = req {
                    // Cut anywhere in its data block: the same fields.
                    let cut = used - 1 - (buf[0] as usize % (value.len() + 2));
                    let h = parse_value_head(&buf[..cut], &limits).expect("a head");
                    assert_eq!(h.request(value), req);
                    assert_eq!(h.line_len() + h.vlen() + 2, used);
                }
                encoded.clear();
                req.encode(&mut encoded);
                let (again, n) = parse(&encoded, &unlimited).expect("an encoded request parses");
                assert_eq!(again, req);
                assert_eq!(n, encoded.len());
                buf = &buf[used..];
            }
            Err(ParseError::Incomplete | ParseError::LineTooLong | ParseError::Http) => break,
            Err(e) => {
                if let Some(a) = request_ahead(false, buf) {
                    assert!(a.len > 0 && a.len <= buf.len());
                }
                let used = e.consumed().expect("non-fatal errors say what to skip");
                assert!(used > 0);
                buf = &buf[used.min(buf.len())..];
            }
        }
    }
});
