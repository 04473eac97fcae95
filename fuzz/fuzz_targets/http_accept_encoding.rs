//! Parses arbitrary `Accept-Encoding` values (`AcceptEncoding::parse` and
//! `add`) and checks what must hold whatever the bytes: it never panics; a
//! weight is at most 1000; a list split into two fields at a comma (each
//! comma of a short list, eight spread over a long one) reads as the whole
//! list; case does not matter; appending `gzip;q=0` (or
//! `x-gzip;q=0`) always refuses gzip; appending `identity;q=0` never takes
//! gzip away.
//!
//! Run: `fuzz/run 60 http_accept_encoding`, or `cargo +nightly fuzz run
//! http_accept_encoding -- -dict=http.dict` (from `fuzz/`).
#![no_main]

use duality_http::AcceptEncoding;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = AcceptEncoding::parse(data);
    for w in [whole.gzip, whole.identity, whole.any].into_iter().flatten() {
        assert!(w <= 1000, "weight {w}");
    }
    // Every comma for short lists; for long ones, eight spread over the
    // list (each check parses the whole input, so all of them would make
    // an execution quadratic in the number of commas).
    let commas: Vec<usize> = (0..data.len()).filter(|&i| data[i] == b',').collect();
    let step = commas.len().div_ceil(8).max(1);
    let picked = commas.iter().step_by(step).chain(commas.last());
    for &i in picked {
        let mut split = AcceptEncoding::parse(&data[..i]);
        split.add(&data[i + 1..]);
        assert_eq!(split, whole, "split at byte {i}");
    }
    assert_eq!(AcceptEncoding::parse(&data.to_ascii_uppercase()), whole);
    assert_eq!(AcceptEncoding::parse(&data.to_ascii_lowercase()), whole);
    for refusal in [&b"gzip;q=0"[..], b"x-gzip ; q=0.000"] {
        let mut a = whole;
        a.add(refusal);
        assert!(!a.prefers_gzip());
    }
    let mut a = whole;
    a.add(b"identity;q=0");
    assert!(!whole.prefers_gzip() || a.prefers_gzip());
});
