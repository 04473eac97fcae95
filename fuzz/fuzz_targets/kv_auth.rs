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
//! Input that starts as a binary request is read instead as a stream of
//! SASL frames (`duality_kv::sasl`, memcached's `-S`), each answered
//! against one connection's state: a request's length is what its bytes
//! alone parse to; "need more" names a length past the input and within a
//! frame's bound; a refusal skips at least a header; only a decided
//! authentication is counted, and success only for the file's password.
//!
//! Run: `fuzz/run 60 kv_auth`, or `cargo +nightly fuzz run kv_auth` (from
//! `fuzz/`).
#![no_main]

use duality_kv::auth::{step, Answer, AuthFile, Step, MAX_LINE, MAX_TOKEN};
use duality_kv::sasl::{self, Frame, Op};
use duality_kv::Limits;
use libfuzzer_sys::fuzz_target;

fn sasl_stream(data: &[u8]) {
    let users = AuthFile::parse_pwdb(b"alice:secret\n").0;
    let limits = Limits {
        max_item_size: 256,
        ..Limits::default()
    };
    let mut state = sasl::State::default();
    let mut buf = data;
    loop {
        match sasl::parse(buf, &limits) {
            Frame::Request { op, used, .. } => {
                assert!(used >= 24 && used <= buf.len());
                assert_eq!(sasl::parse(&buf[..used], &limits), sasl::parse(buf, &limits));
                let before = state.authenticated;
                let a = sasl::answer(&mut state, op, &users);
                match (op, a.decided) {
                    (Op::List, _) => assert_eq!(state.authenticated, before),
                    (_, None) => assert!(!state.authenticated && state.pending),
                    (_, Some(ok)) => assert_eq!(ok, state.authenticated),
                }
                if a.decided == Some(true) {
                    let data = match op {
                        Op::Auth { data, .. } | Op::Step { data } => data,
                        Op::List => unreachable!("a list decides nothing"),
                    };
                    assert!(data.ends_with(b"\0secret"), "{data:?}");
                }
                buf = &buf[used..];
            }
            Frame::Incomplete(need) => {
                assert!(need > buf.len() && need <= 24 + 32 + 256);
                break;
            }
            Frame::Refused { consumed, .. } => {
                assert!(consumed > 24);
                buf = &buf[consumed.min(buf.len())..];
            }
            Frame::Invalid { .. } | Frame::Other => break,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.first() == Some(&0x80) {
        return sasl_stream(data);
    }
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
