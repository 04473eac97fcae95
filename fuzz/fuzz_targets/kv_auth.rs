//! Reads an unauthenticated connection's input (`duality_kv::auth::step`,
//! memcached's `-Y` authentication `set`) from arbitrary bytes and checks
//! its contract: it never panics; an answer covers at least one byte and no
//! more than the input, and is given the same for its own bytes alone (the
//! rest of a read does not change it); bytes still to drop come only past
//! the input's end; "need more" names a length past the input (or none,
//! for a line without its end, which stays below the line bound); a close
//! only past that bound; a token read is a user and a password without
//! spaces.
//!
//! Run: `fuzz/run 60 kv_auth`, or `cargo +nightly fuzz run kv_auth` (from
//! `fuzz/`).
#![no_main]

use duality_kv::auth::{step, Answer, Step, MAX_LINE, MAX_TOKEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match step(data) {
        Step::Answer {
            used,
            swallow,
            answer,
        } => {
            assert!(used > 0 && used <= data.len(), "{used} of {}", data.len());
            if swallow == 0 {
                assert_eq!(step(&data[..used]), step(data));
            } else {
                assert_eq!(used, data.len());
            }
            if let Answer::Token { user, password } = answer {
                assert!(!user.is_empty() && !password.is_empty());
                assert!(!user.contains(&b' ') && !password.contains(&b' '));
                assert!(user.len() + password.len() <= MAX_TOKEN);
            }
        }
        Step::Incomplete(need) => {
            assert!(need == 0 || need > data.len(), "{need} of {}", data.len());
            if need == 0 {
                assert!(data.len() <= MAX_LINE && !data.contains(&b'\n'));
            }
        }
        Step::Close => assert!(data.len() > MAX_LINE && !data.contains(&b'\n')),
    }
});
