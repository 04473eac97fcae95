//! Parses arbitrary bytes as a stream of memcached requests, consuming what
//! each result says, and checks that every parsed request survives
//! encode → parse unchanged.
//!
//! Run: `cargo +nightly fuzz run kv_parse -- -dict=kv.dict` (from `fuzz/`).
#![no_main]

use duality_kv::{parse, Limits, ParseError};
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
        match parse(buf, &limits) {
            Ok((req, used)) => {
                assert!(used > 0 && used <= buf.len());
                encoded.clear();
                req.encode(&mut encoded);
                let (again, n) = parse(&encoded, &unlimited).expect("an encoded request parses");
                assert_eq!(again, req);
                assert_eq!(n, encoded.len());
                buf = &buf[used..];
            }
            Err(ParseError::Incomplete | ParseError::LineTooLong | ParseError::Http) => break,
            Err(e) => {
                let used = e.consumed().expect("non-fatal errors say what to skip");
                assert!(used > 0);
                buf = &buf[used.min(buf.len())..];
            }
        }
    }
});
