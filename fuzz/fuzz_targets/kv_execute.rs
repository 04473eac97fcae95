//! Parses arbitrary bytes as a connection would and executes every request
//! against a small store (a few hundred items), with a clock that the input
//! moves and a sweep every few requests: nothing may panic and the store stays
//! within its memory limit.
//!
//! Run: `cargo +nightly fuzz run kv_execute -- -dict=kv.dict` (from `fuzz/`).
#![no_main]

use duality_kv::{
    execute, execute_error, parse, Flow, Limits, ParseError, SimpleContext, Store, StoreConfig,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let store = Store::new(StoreConfig {
        max_bytes: 64 * 1024,
        shards: 4,
        evictions: true,
    });
    let limits = Limits {
        max_line: 512,
        max_get_line: 2048,
        max_item_size: 4096,
    };
    let mut ctx = SimpleContext::at(1_700_000_000);
    let mut out = Vec::new();
    let mut buf = data;
    let mut steps = 0u32;
    while !buf.is_empty() {
        steps += 1;
        if steps & 7 == 0 {
            // Reclaim and compact as the background sweep would.
            store.sweep(ctx.now, 16);
        }
        // The first byte of each step advances the clock a little.
        ctx.now += u32::from(buf[0] % 4);
        let flow = match parse(buf, &limits) {
            Ok((req, used)) => {
                buf = &buf[used..];
                execute(&req, &store, &ctx, &mut out)
            }
            Err(ParseError::Incomplete) => break,
            Err(e) => {
                let flow = execute_error(&e, &store, &ctx, &mut out);
                buf = &buf[e.consumed().unwrap_or(buf.len()).min(buf.len())..];
                flow
            }
        };
        assert!(store.stats().bytes <= 64 * 1024);
        out.clear();
        if flow == Flow::Close {
            break;
        }
    }
    store.sweep(ctx.now + 100, 1000);
});
