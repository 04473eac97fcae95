//! Parses arbitrary bytes as a stream of binary memcached requests,
//! consuming what each result says, and checks that every parsed request
//! survives encode → parse unchanged, that no result asks to buffer more
//! than a valid request can take, and that a store whose value is still
//! coming (`parse_binary_head`) has the fields its whole request has, and
//! that the look-ahead (`request_ahead`) sizes a request as the parser does.
//!
//! Run: `cargo +nightly fuzz run kv_binary -- -dict=kv_binary.dict` (from `fuzz/`).
#![no_main]

use duality_kv::{
    parse_binary, parse_binary_head, request_ahead, BinError, BinRequest, Limits, Opcode,
};
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
        let head = parse_binary_head(buf, &limits);
        if let Some(h) = head {
            assert!(h.head_len <= buf.len() && buf.len() < h.head_len + h.vlen);
            assert!(matches!(
                parse_binary(buf, &limits),
                Err(BinError::Incomplete { .. })
            ));
        }
        match parse_binary(buf, &limits) {
            Ok((req, used)) => {
                assert!(head.is_none(), "a whole request has no head");
                let stores = matches!(
                    req.opcode.loud(),
                    Opcode::Set | Opcode::Add | Opcode::Replace
                );
                if stores && !req.value.is_empty() {
                    // Cut anywhere in its value: the same fields.
                    let cut = used - 1 - (buf[0] as usize % req.value.len());
                    let h = parse_binary_head(&buf[..cut], &limits).expect("a head");
                    let value = req.value;
                    assert_eq!(BinRequest { value, ..h.request }, req);
                    assert_eq!(h.head_len + h.vlen, used);
                }
                assert!(used >= 24 && used <= buf.len());
                assert_eq!(used, req.encoded_len());
                let a = request_ahead(true, buf).expect("a whole frame is sized");
                assert_eq!(a.len, used);
                assert!(a.key.is_none_or(|k| k == req.key));
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
