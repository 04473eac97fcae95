//! Parses arbitrary bytes as a stream of binary memcached requests,
//! consuming what each result says, and checks that every parsed request
//! survives encode → parse unchanged and that no result asks to buffer more
//! than a valid request can take.
//!
//! Run: `cargo +nightly fuzz run kv_binary -- -dict=kv_binary.dict` (from `fuzz/`).
#![no_main]

use duality_kv::{parse_binary, BinError, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A small item limit, so "too large" is reached too.
    let limits = Limits {
        max_item_size: 256,
        ..Limits::default()
    };
    let unlimited = Limits {
        max_item_size: usize::MAX,
        ..Limits::default()
    };
    let mut buf = data;
    let mut encoded = Vec::new();
    while !buf.is_empty() {
        match parse_binary(buf, &limits) {
            Ok((req, used)) => {
                assert!(used >= 24 && used <= buf.len());
                assert_eq!(used, req.encoded_len());
                encoded.clear();
                req.encode(&mut encoded);
                assert_eq!(&encoded[..], &buf[..used], "encode is the inverse of parse");
                let again = parse_binary(&encoded, &unlimited).expect("an encoded request parses");
                assert_eq!(again, (req, used));
                buf = &buf[used..];
            }
            Err(BinError::Incomplete { need }) => {
                assert!(need > buf.len() && need <= 24 + 20 + 250 + limits.max_item_size);
                break;
            }
            Err(e) if e.is_fatal() => break,
            Err(e) => {
                let used = e.consumed().expect("non-fatal errors say what to skip");
                assert!(used >= 24);
                buf = &buf[used.min(buf.len())..];
            }
        }
    }
});
