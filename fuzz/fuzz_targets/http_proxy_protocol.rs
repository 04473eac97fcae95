//! Reads a PROXY protocol header (`duality_http::proxy_protocol::parse`)
//! from arbitrary bytes, as a connection under `--proxy-protocol on` begins,
//! and checks its contract: it never panics; a header found lies inside the
//! input, is found the same in its own bytes alone and with the bytes that
//! follow, and each of its proper prefixes (all up to 128 bytes, a sample
//! beyond) answers "need more" — the header arrives in two reads split at
//! any point; "need more" only while the bytes are fewer than a header may
//! take.
//!
//! Run: `fuzz/run 60 http_proxy_protocol`, or `cargo +nightly fuzz run
//! http_proxy_protocol` (from `fuzz/`).
#![no_main]

use duality_http::proxy_protocol::{parse, V1_MAX, V2_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(None) => assert!(
            data.len() < V1_MAX.max(V2_MAX),
            "need more of {} bytes",
            data.len()
        ),
        Ok(Some((header, n))) => {
            assert!(n > 0 && n <= data.len(), "{n} of {}", data.len());
            assert!(n <= V2_MAX);
            assert_eq!(parse(&data[..n]), Ok(Some((header, n))));
            let step = if n > 128 { n / 64 } else { 1 };
            for cut in (0..n).step_by(step) {
                assert_eq!(parse(&data[..cut]), Ok(None), "cut at {cut} of {n}");
            }
            // Addresses come together or not at all.
            assert_eq!(header.source.is_some(), header.destination.is_some());
        }
        Err(_) => {
            // Whatever follows cannot make the bytes a header.
            let mut more = data.to_vec();
            more.extend_from_slice(b"\r\n");
            assert!(parse(&more).is_err() || data.is_empty());
        }
    }
});
