//! memcached protocol conformance of `duality kv` over real sockets: every
//! text and meta command, their error cases, the key, line and item limits,
//! and pipelining — the same checks under every threading model (in-process
//! servers on 127.0.0.1:0), over a Unix socket, and against the `duality kv`
//! binary with memcached's flags.
//!
//! Responses are compared byte for byte. Where duality deliberately answers
//! differently from memcached 1.6 the check says so in a comment.

mod common;

use common::*;
use duality_kv::DEFAULT_VERSION;
use std::collections::HashMap;
use std::thread;
use std::time::Duration;

/// Runs every check against one server.
fn conformance(t: &Target) {
    storage(t);
    cas(t);
    retrieval(t);
    keys(t);
    delete(t);
    arith(t);
    touch_and_exptime(t);
    meta(t);
    meta_errors(t);
    misc_commands(t);
    quit(t);
    item_size_limit(t);
    line_limits(t);
    data_chunk(t);
    pipelining(t);
    interleaved_connections(t);
    // Last: it empties the cache.
    flush_all(t);
}

fn storage(t: &Target) {
    let mut c = t.connect();
    c.expect_str("set k 0 0 5\r\nhello\r\n", "STORED\r\n");
    c.expect_str("get k\r\n", "VALUE k 0 5\r\nhello\r\nEND\r\n");
    c.expect_str("set k 42 0 3\r\nbye\r\n", "STORED\r\n");
    c.expect_str("get k\r\n", "VALUE k 42 3\r\nbye\r\nEND\r\n");

    // Flags are 32 bits: the largest round-trips, one more is refused. As
    // memcached does, a refused line drops the line only: its data block is
    // read as a command (here an unknown one).
    c.expect_str("set f 4294967295 0 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("get f\r\n", "VALUE f 4294967295 1\r\nx\r\nEND\r\n");
    c.expect_str(
        "set f 4294967296 0 1\r\ny\r\n",
        "CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    c.expect_str(
        "set f -1 0 1\r\ny\r\n",
        "CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    c.expect_str(
        "set f x 0 1\r\ny\r\n",
        "CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    c.expect_str(
        "set f 0 x 1\r\ny\r\n",
        "CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    c.expect_str("get f\r\n", "VALUE f 4294967295 1\r\nx\r\nEND\r\n");
    // A length that is not a number: the block cannot be skipped; duality
    // answers the line and then the data line on its own.
    c.expect_str(
        "set f 0 0 x\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
    c.expect_str(
        "set f 0 0 -1\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
    // Too few arguments: ERROR, as memcached 1.6 answers.
    c.expect_str("set f 0 0\r\n", "ERROR\r\n");
    c.expect_str("set\r\n", "ERROR\r\n");

    // Empty and binary values, a value holding "\r\n" and "END".
    c.expect_str("set e 0 0 0\r\n\r\n", "STORED\r\n");
    c.expect_str("get e\r\n", "VALUE e 0 0\r\n\r\nEND\r\n");
    c.expect(b"set bin 0 0 10\r\na\r\n\0\xffEND\r\n\r\n", b"STORED\r\n");
    c.expect(
        b"get bin\r\n",
        b"VALUE bin 0 10\r\na\r\n\0\xffEND\r\n\r\nEND\r\n",
    );

    // add / replace.
    c.expect_str("add k 0 0 1\r\nz\r\n", "NOT_STORED\r\n");
    c.expect_str("get k\r\n", "VALUE k 42 3\r\nbye\r\nEND\r\n");
    c.expect_str("add a 7 0 1\r\nz\r\n", "STORED\r\n");
    c.expect_str("get a\r\n", "VALUE a 7 1\r\nz\r\nEND\r\n");
    c.expect_str("replace nope 0 0 1\r\nz\r\n", "NOT_STORED\r\n");
    c.expect_str("get nope\r\n", "END\r\n");
    c.expect_str("replace a 8 0 2\r\nzz\r\n", "STORED\r\n");
    c.expect_str("get a\r\n", "VALUE a 8 2\r\nzz\r\nEND\r\n");

    // append / prepend: only to an existing item, flags unchanged.
    c.expect_str("append nope 0 0 1\r\nz\r\n", "NOT_STORED\r\n");
    c.expect_str("prepend nope 0 0 1\r\nz\r\n", "NOT_STORED\r\n");
    c.expect_str("get nope\r\n", "END\r\n");
    c.expect_str("append a 99 0 3\r\n>>>\r\n", "STORED\r\n");
    c.expect_str("prepend a 99 0 3\r\n<<<\r\n", "STORED\r\n");
    c.expect_str("get a\r\n", "VALUE a 8 8\r\n<<<zz>>>\r\nEND\r\n");

    // noreply on every storage command, whatever the outcome.
    c.expect_str("set n 1 0 1 noreply\r\na\r\n", "");
    c.expect_str("add n 2 0 1 noreply\r\nb\r\n", "");
    c.expect_str("replace n 3 0 1 noreply\r\nc\r\n", "");
    c.expect_str("append n 0 0 1 noreply\r\nd\r\n", "");
    c.expect_str("prepend n 0 0 1 noreply\r\ne\r\n", "");
    c.expect_str("replace nope 0 0 1 noreply\r\nc\r\n", "");
    c.expect_str("get n nope\r\n", "VALUE n 3 3\r\necd\r\nEND\r\n");
    let cas = c.cas_of("n");
    c.expect_str(&format!("cas n 4 0 1 {} noreply\r\nf\r\n", cas + 1), "");
    c.expect_str("get n\r\n", "VALUE n 3 3\r\necd\r\nEND\r\n");
    c.expect_str(&format!("cas n 4 0 1 {cas} noreply\r\nf\r\n"), "");
    c.expect_str("get n\r\n", "VALUE n 4 1\r\nf\r\nEND\r\n");
    c.expect_str("cas nope 0 0 1 1 noreply\r\nf\r\n", "");
    c.expect_str("add fresh 0 0 1 noreply\r\nq\r\n", "");
    c.expect_str("get fresh\r\n", "VALUE fresh 0 1\r\nq\r\nEND\r\n");
}

fn cas(t: &Target) {
    let mut c = t.connect();
    c.expect_str("cas c 0 0 1 1\r\nx\r\n", "NOT_FOUND\r\n");
    c.expect_str("set c 0 0 1\r\nx\r\n", "STORED\r\n");
    let v = c.cas_of("c");
    assert_ne!(v, 0);
    c.expect_str("gets c\r\n", &format!("VALUE c 0 1 {v}\r\nx\r\nEND\r\n"));
    c.expect_str(&format!("cas c 0 0 1 {}\r\ny\r\n", v + 1), "EXISTS\r\n");
    // A CAS unique of 0 never matches.
    c.expect_str("cas c 0 0 1 0\r\ny\r\n", "EXISTS\r\n");
    c.expect_str("get c\r\n", "VALUE c 0 1\r\nx\r\nEND\r\n");
    c.expect_str(&format!("cas c 5 0 1 {v}\r\ny\r\n"), "STORED\r\n");
    c.expect_str("get c\r\n", "VALUE c 5 1\r\ny\r\nEND\r\n");
    let v2 = c.cas_of("c");
    assert_ne!(v2, v, "a store changes the CAS unique");
    c.expect_str(&format!("cas c 0 0 1 {v}\r\nz\r\n"), "EXISTS\r\n");
    // Every modification changes it: append, incr, touch does not.
    c.expect_str("append c 0 0 1\r\n1\r\n", "STORED\r\n");
    let v3 = c.cas_of("c");
    assert_ne!(v3, v2);
    c.expect_str("touch c 0\r\n", "TOUCHED\r\n");
    assert_eq!(c.cas_of("c"), v3, "touch keeps the CAS unique");
    c.expect_str(
        "cas c 0 0 1 x\r\nz\r\n",
        "CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    c.expect_str("cas c 0 0 1\r\n", "ERROR\r\n");

    // CAS uniques are 64 bits (ms E sets one explicitly).
    c.expect_str("ms big64 1 E18446744073709551615\r\nx\r\n", "HD\r\n");
    c.expect_str(
        "gets big64\r\n",
        "VALUE big64 0 1 18446744073709551615\r\nx\r\nEND\r\n",
    );
    c.expect_str("mg big64 c\r\n", "HD c18446744073709551615\r\n");
    c.expect_str(
        "cas big64 0 0 1 18446744073709551614\r\ny\r\n",
        "EXISTS\r\n",
    );
    c.expect_str(
        "cas big64 0 0 1 18446744073709551616\r\nz\r\n",
        "CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    c.expect_str(
        "cas big64 0 0 1 18446744073709551615\r\ny\r\n",
        "STORED\r\n",
    );
    c.expect_str("get big64\r\n", "VALUE big64 0 1\r\ny\r\nEND\r\n");
}

fn retrieval(t: &Target) {
    let mut c = t.connect();
    for (k, v) in [("r1", "a"), ("r2", "bb"), ("r3", "ccc")] {
        c.expect_str(&format!("set {k} 1 0 {}\r\n{v}\r\n", v.len()), "STORED\r\n");
    }
    c.expect_str("get missing\r\n", "END\r\n");
    // Hits in request order, misses left out, repeated keys repeated.
    c.expect_str(
        "get r3 missing r1 r2 r1\r\n",
        "VALUE r3 1 3\r\nccc\r\nVALUE r1 1 1\r\na\r\nVALUE r2 1 2\r\nbb\r\nVALUE r1 1 1\r\na\r\nEND\r\n",
    );
    // Extra spaces between keys are fine.
    c.expect_str(
        "get  r1   r2 \r\n",
        "VALUE r1 1 1\r\na\r\nVALUE r2 1 2\r\nbb\r\nEND\r\n",
    );
    // A bare \n ends a line too.
    c.expect_str("get r1\n", "VALUE r1 1 1\r\na\r\nEND\r\n");
    let (c1, c2) = (c.cas_of("r1"), c.cas_of("r2"));
    c.expect_str(
        "gets r1 nope r2\r\n",
        &format!("VALUE r1 1 1 {c1}\r\na\r\nVALUE r2 1 2 {c2}\r\nbb\r\nEND\r\n"),
    );
    // Without a key: ERROR, as memcached answers.
    c.expect_str("get\r\n", "ERROR\r\n");
    c.expect_str("gets\r\n", "ERROR\r\n");

    // gat / gats: fetch and set a new TTL.
    c.expect_str("gat 100 r1 missing\r\n", "VALUE r1 1 1\r\na\r\nEND\r\n");
    let ttl = c.ttl_of("r1").expect("r1 alive");
    assert!((98..=100).contains(&ttl), "ttl {ttl}");
    c.expect_str(
        "gats 0 r2\r\n",
        &format!("VALUE r2 1 2 {c2}\r\nbb\r\nEND\r\n"),
    );
    assert_eq!(c.ttl_of("r2"), Some(-1));
    assert_eq!(c.cas_of("r2"), c2, "gat keeps the CAS unique");
    // A negative TTL returns the item and expires it.
    c.expect_str("gat -1 r3\r\n", "VALUE r3 1 3\r\nccc\r\nEND\r\n");
    c.expect_str("get r3\r\n", "END\r\n");
    c.expect_str("gat 10 missing\r\n", "END\r\n");
    c.expect_str(
        "gat abc r1\r\n",
        "CLIENT_ERROR invalid exptime argument\r\n",
    );
    // gat without keys: memcached 1.6 answers END, duality a client error.
    // An exptime and no key: nothing to retrieve (memcached: END).
    c.expect_str("gat 10\r\n", "END\r\n");
    c.expect_str("gat\r\n", "ERROR\r\n");

    // A multi-get line longer than the 2048-byte command line limit.
    let mut line = String::from("get");
    let mut want = String::new();
    for i in 0..600 {
        line.push_str(&format!(" multi-{i}"));
        if i % 7 == 0 {
            c.expect_str(
                &format!("set multi-{i} {i} 0 1\r\n{}\r\n", i % 10),
                "STORED\r\n",
            );
            want.push_str(&format!("VALUE multi-{i} {i} 1\r\n{}\r\n", i % 10));
        }
    }
    assert!(line.len() > 4096);
    line.push_str("\r\n");
    want.push_str("END\r\n");
    c.expect_str(&line, &want);
}

fn keys(t: &Target) {
    let mut c = t.connect();
    let k250 = "k".repeat(250);
    let k251 = "k".repeat(251);
    c.expect_str(&format!("set {k250} 0 0 1\r\nx\r\n"), "STORED\r\n");
    c.expect_str(
        &format!("get {k250}\r\n"),
        &format!("VALUE {k250} 0 1\r\nx\r\nEND\r\n"),
    );
    c.expect_str(&format!("mg {k250} v\r\n"), "VA 1\r\nx\r\n");
    let bad = "CLIENT_ERROR bad command line format\r\n";
    // Too long: refused by every command. As memcached does, a storage
    // command's data block is then read as a command (`x`: ERROR), `ms`'s
    // too (memcached checks its key before reading the length).
    let bad_then_error = format!("{bad}ERROR\r\n");
    c.expect_str(&format!("get {k251}\r\n"), bad);
    c.expect_str(&format!("get a {k251}\r\n"), bad);
    c.expect_str(&format!("set {k251} 0 0 1\r\nx\r\n"), &bad_then_error);
    c.expect_str(&format!("add {k251} 0 0 1\r\nx\r\n"), &bad_then_error);
    c.expect_str(&format!("delete {k251}\r\n"), bad);
    c.expect_str(&format!("incr {k251} 1\r\n"), bad);
    c.expect_str(&format!("touch {k251} 1\r\n"), bad);
    c.expect_str(&format!("mg {k251} v\r\n"), bad);
    c.expect_str(&format!("ms {k251} 1\r\nx\r\n"), &bad_then_error);
    c.expect_str(&format!("md {k251}\r\n"), bad);
    c.expect_str(&format!("ma {k251}\r\n"), bad);
    // Control characters are key bytes, as memcached takes them; a NUL is
    // refused (memcached ends the line there).
    for k in ["a\x01b", "a\x7fb", "a\tb", "a\x1bb", "a\rb", "a\r"] {
        c.expect(format!("get {k}\r\n").as_bytes(), b"END\r\n");
        c.expect(format!("set {k} 0 0 1\r\nx\r\n").as_bytes(), b"STORED\r\n");
        c.expect(format!("mg {k} v\r\n").as_bytes(), b"VA 1\r\nx\r\n");
    }
    c.expect(b"get a\x00b\r\n", bad.as_bytes());
    c.expect(b"set a\x00b 0 0 1\r\nx\r\n", bad_then_error.as_bytes());
    c.expect(b"mg a\x00b v\r\n", bad.as_bytes());
    // Bytes above 0x7f are allowed.
    c.expect(b"set caf\xc3\xa9 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.expect(
        b"get caf\xc3\xa9\r\n",
        b"VALUE caf\xc3\xa9 0 1\r\nx\r\nEND\r\n",
    );
}

fn delete(t: &Target) {
    let mut c = t.connect();
    c.expect_str("set d 0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("delete d\r\n", "DELETED\r\n");
    c.expect_str("delete d\r\n", "NOT_FOUND\r\n");
    c.expect_str("get d\r\n", "END\r\n");
    c.expect_str("set d 0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("delete d noreply\r\n", "");
    c.expect_str("delete d noreply\r\n", "");
    c.expect_str("get d\r\n", "END\r\n");
    // The legacy time argument 0 is accepted.
    c.expect_str("set d 0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("delete d 0\r\n", "DELETED\r\n");
    c.expect_str("delete d 0 noreply\r\n", "");
    c.expect_str("delete\r\n", "ERROR\r\n");
    c.expect_str(
        "delete d 5\r\n",
        "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
    );
}

fn arith(t: &Target) {
    let mut c = t.connect();
    c.expect_str("set n 5 0 2\r\n10\r\n", "STORED\r\n");
    c.expect_str("incr n 5\r\n", "15\r\n");
    c.expect_str("decr n 3\r\n", "12\r\n");
    c.expect_str("get n\r\n", "VALUE n 5 2\r\n12\r\nEND\r\n");
    // decr stops at 0.
    c.expect_str("decr n 100\r\n", "0\r\n");
    c.expect_str("decr n 1\r\n", "0\r\n");
    // incr wraps at 2^64.
    c.expect_str(
        "incr n 18446744073709551615\r\n",
        "18446744073709551615\r\n",
    );
    c.expect_str("incr n 1\r\n", "0\r\n");
    c.expect_str("set n 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n");
    c.expect_str("incr n 2\r\n", "1\r\n");
    c.expect_str("incr n 18446744073709551615\r\n", "0\r\n");
    // The value grows and shrinks with its digits (memcached pads a
    // shrinking decr with spaces: "99 "; duality stores "99").
    c.expect_str("set n 0 0 2\r\n99\r\n", "STORED\r\n");
    c.expect_str("incr n 1\r\n", "100\r\n");
    c.expect_str("get n\r\n", "VALUE n 0 3\r\n100\r\nEND\r\n");
    c.expect_str("decr n 1\r\n", "99\r\n");
    c.expect_str("get n\r\n", "VALUE n 0 2\r\n99\r\nEND\r\n");
    // Leading zeros are read as decimal.
    c.expect_str("set n 0 0 4\r\n0012\r\n", "STORED\r\n");
    c.expect_str("incr n 1\r\n", "13\r\n");
    let before = c.cas_of("n");
    c.expect_str("incr n 1\r\n", "14\r\n");
    assert_ne!(c.cas_of("n"), before, "incr changes the CAS unique");

    c.expect_str("incr nope 1\r\n", "NOT_FOUND\r\n");
    c.expect_str("decr nope 1\r\n", "NOT_FOUND\r\n");
    c.expect_str("get nope\r\n", "END\r\n");

    // memcached's exact errors for non-numeric values and deltas.
    let non_numeric = "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
    for v in ["abc", "-1", "1x", "", "0x10"] {
        c.expect_str(&format!("set s 0 0 {}\r\n{v}\r\n", v.len()), "STORED\r\n");
        c.expect_str("incr s 1\r\n", non_numeric);
        c.expect_str("decr s 1\r\n", non_numeric);
        c.expect_str(
            "get s\r\n",
            &format!("VALUE s 0 {}\r\n{v}\r\nEND\r\n", v.len()),
        );
    }
    // A number of more than 64 bits is not a counter.
    c.expect_str("set s 0 0 20\r\n18446744073709551616\r\n", "STORED\r\n");
    c.expect_str("incr s 1\r\n", non_numeric);
    // Like memcached (strtoull): leading blanks, a sign and trailing blanks are fine.
    for (v, next) in [(" 1", "2"), ("12 ", "13"), ("+5", "6")] {
        c.expect_str(&format!("set s 0 0 {}\r\n{v}\r\n", v.len()), "STORED\r\n");
        c.expect_str("incr s 1\r\n", &format!("{next}\r\n"));
    }
    let bad_delta = "CLIENT_ERROR invalid numeric delta argument\r\n";
    c.expect_str("incr n abc\r\n", bad_delta);
    c.expect_str("incr n -1\r\n", bad_delta);
    c.expect_str("decr n 1.5\r\n", bad_delta);
    c.expect_str("incr n 18446744073709551616\r\n", bad_delta);
    c.expect_str("incr n\r\n", "ERROR\r\n");
    c.expect_str("decr\r\n", "ERROR\r\n");
    // noreply, for results and errors.
    c.expect_str("incr n 10 noreply\r\n", "");
    c.expect_str("decr n 4 noreply\r\n", "");
    c.expect_str("incr nope 1 noreply\r\n", "");
    c.expect_str("incr n x noreply\r\n", "");
    c.expect_str("get n\r\n", "VALUE n 0 2\r\n20\r\nEND\r\n");
}

fn touch_and_exptime(t: &Target) {
    let mut c = t.connect();
    c.expect_str("set t 0 0 1\r\nx\r\n", "STORED\r\n");
    assert_eq!(c.ttl_of("t"), Some(-1));
    c.expect_str("touch t 100\r\n", "TOUCHED\r\n");
    let ttl = c.ttl_of("t").expect("alive");
    assert!((98..=100).contains(&ttl), "ttl {ttl}");
    c.expect_str("touch t 0\r\n", "TOUCHED\r\n");
    assert_eq!(c.ttl_of("t"), Some(-1));
    c.expect_str("touch nope 10\r\n", "NOT_FOUND\r\n");
    c.expect_str(
        "touch t abc\r\n",
        "CLIENT_ERROR invalid exptime argument\r\n",
    );
    c.expect_str("touch t\r\n", "ERROR\r\n");
    c.expect_str("touch t 50 noreply\r\n", "");
    c.expect_str("touch nope 50 noreply\r\n", "");
    c.expect_str("touch t x noreply\r\n", "");
    let ttl = c.ttl_of("t").expect("alive");
    assert!((48..=50).contains(&ttl), "ttl {ttl}");
    c.expect_str("touch t -1\r\n", "TOUCHED\r\n");
    c.expect_str("get t\r\n", "END\r\n");

    // exptime: negative = already expired; up to 30 days = relative; above
    // = absolute Unix time (in the past = expired).
    let now = unix_now();
    c.expect_str("set x 0 -1 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("get x\r\n", "END\r\n");
    c.expect_str(&format!("set x 0 {} 1\r\nx\r\n", now - 100), "STORED\r\n");
    c.expect_str("get x\r\n", "END\r\n");
    c.expect_str(&format!("set x 0 {} 1\r\nx\r\n", now + 1000), "STORED\r\n");
    // The server stamps requests with the kernel's coarse clock, which can
    // lag the precise one this test read by a tick across a second boundary.
    let ttl = c.ttl_of("x").expect("alive");
    assert!((997..=1001).contains(&ttl), "absolute exptime: ttl {ttl}");
    c.expect_str("set x 0 2592000 1\r\nx\r\n", "STORED\r\n");
    let ttl = c.ttl_of("x").expect("alive");
    assert!((2591998..=2592000).contains(&ttl), "30 days: ttl {ttl}");
    c.expect_str("set x 0 2592001 1\r\nx\r\n", "STORED\r\n");
    c.expect_str("get x\r\n", "END\r\n");
    c.expect_str("add x 0 0 1\r\ny\r\n", "STORED\r\n");
    c.expect_str("get x\r\n", "VALUE x 0 1\r\ny\r\nEND\r\n");
}

fn meta(t: &Target) {
    let mut c = t.connect();
    c.expect_raw(b"mn\r\n", b"MN\r\n");
    c.expect_str("ms m1 2 T0 F5\r\nhi\r\n", "HD\r\n");
    c.expect_str(
        "mg m1 v f t s k Oxx\r\n",
        "VA 2 f5 t-1 s2 km1 Oxx\r\nhi\r\n",
    );
    c.expect_str("mg m1\r\n", "HD\r\n");
    c.expect_str("mg m1 k v\r\n", "VA 2 km1\r\nhi\r\n");
    c.expect_str("get m1\r\n", "VALUE m1 5 2\r\nhi\r\nEND\r\n");
    let cas = c.cas_of("m1");
    c.expect_str("mg m1 c\r\n", &format!("HD c{cas}\r\n"));
    // Misses: EN, with the opaque token and key echoed in the order given.
    c.expect_str("mg nope v\r\n", "EN\r\n");
    c.expect_str("mg nope v Oab k\r\n", "EN Oab knope\r\n");
    // Quiet mode: only the nominal answer (EN for mg, HD otherwise) is left out.
    c.expect_str("mg nope v q\r\n", "");
    c.expect_str("mg m1 v q Oz\r\n", "VA 2 Oz\r\nhi\r\n");
    c.expect_raw(
        b"ms q1 1 q\r\na\r\nms q2 1 q Oz\r\nb\r\nmg q1 v q k\r\nmg nope v q O1\r\nmd nope q O2\r\nmd q2 q\r\nmg q2 v q\r\nms q1 1 q ME O3\r\nc\r\nmn\r\n",
        b"VA 1 kq1\r\na\r\nNF O2\r\nNS O3\r\nMN\r\n",
    );

    // ms returns the new CAS with c; the flags set with F and TTL with T.
    let r = String::from_utf8(c.call(b"ms m2 3 c F7 T100\r\nabc\r\n")).unwrap();
    let new_cas: u64 = r
        .strip_prefix("HD c")
        .and_then(|s| s.strip_suffix("\r\n"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("ms c: {r:?}"));
    assert_eq!(c.cas_of("m2"), new_cas);
    c.expect_str("get m2\r\n", "VALUE m2 7 3\r\nabc\r\nEND\r\n");
    let ttl = c.ttl_of("m2").expect("alive");
    assert!((98..=100).contains(&ttl), "ttl {ttl}");
    // mg T updates the TTL; the 32-bit flag and 64-bit CAS fields.
    c.expect_str("mg m2 T0 t v\r\n", "VA 3 t-1\r\nabc\r\n");
    c.expect_str("ms m2 1 F4294967295\r\nz\r\n", "HD\r\n");
    c.expect_str("mg m2 f v\r\n", "VA 1 f4294967295\r\nz\r\n");
    c.expect_str(
        "ms m2 1 F4294967296\r\nz\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );

    // ms modes: E(add) A(append) P(prepend) R(replace) S(set).
    c.expect_str("ms m3 2 MR\r\nab\r\n", "NS\r\n");
    c.expect_str("ms m3 2 MA\r\nab\r\n", "NS\r\n");
    c.expect_str("ms m3 2 ME\r\nab\r\n", "HD\r\n");
    c.expect_str("ms m3 2 ME\r\nxx\r\n", "NS\r\n");
    c.expect_str("ms m3 2 MA\r\ncd\r\n", "HD\r\n");
    c.expect_str("ms m3 2 MP\r\n01\r\n", "HD\r\n");
    c.expect_str("mg m3 v\r\n", "VA 6\r\n01abcd\r\n");
    c.expect_str("ms m3 2 MR\r\nzz\r\n", "HD\r\n");
    c.expect_str("ms m3 2 MS\r\nyy\r\n", "HD\r\n");
    c.expect_str("mg m3 v\r\n", "VA 2\r\nyy\r\n");
    // Compare-and-set: EX on mismatch, NF on a miss.
    let cas = c.cas_of("m3");
    c.expect_str(&format!("ms m3 1 C{}\r\nq\r\n", cas + 1), "EX\r\n");
    c.expect_str(&format!("ms m3 1 C{cas}\r\nq\r\n"), "HD\r\n");
    c.expect_str("ms nope 1 C5\r\nq\r\n", "NF\r\n");
    c.expect_str("mg m3 v\r\n", "VA 1\r\nq\r\n");

    // md: HD, NF, CAS mismatch EX, quiet.
    c.expect_str("md m3 Oa k\r\n", "HD Oa km3\r\n");
    c.expect_str("md m3\r\n", "NF\r\n");
    c.expect_str("md m3 q\r\n", "NF\r\n");
    c.expect_str("ms m4 1\r\nx\r\n", "HD\r\n");
    c.expect_str("md m4 C1\r\n", "EX\r\n");
    c.expect_str("md m4 q\r\n", "");
    c.expect_str("mg m4\r\n", "EN\r\n");

    // ma: NF on a miss, auto-vivify with N and J, delta D, decrement mode.
    c.expect_str("ma m5\r\n", "NF\r\n");
    c.expect_str("ma m5 q\r\n", "NF\r\n");
    c.expect_str("ma m5 N0 J10 v\r\n", "VA 2\r\n10\r\n");
    c.expect_str("ma m5 v\r\n", "VA 2\r\n11\r\n");
    c.expect_str("ma m5 D9 v Oo k\r\n", "VA 2 Oo km5\r\n20\r\n");
    c.expect_str("ma m5 MD D5 v\r\n", "VA 2\r\n15\r\n");
    c.expect_str("ma m5 M- D100 v\r\n", "VA 1\r\n0\r\n");
    c.expect_str("ma m5 MI D18446744073709551615\r\n", "HD\r\n");
    c.expect_str("ma m5 v\r\n", "VA 1\r\n0\r\n");
    c.expect_str("ma m5 q\r\n", "");
    c.expect_str("get m5\r\n", "VALUE m5 0 1\r\n1\r\nEND\r\n");
    let cas = c.cas_of("m5");
    c.expect_str(&format!("ma m5 C{}\r\n", cas + 1), "EX\r\n");
    c.expect_str(
        "ma m1\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );

    // Base64 keys.
    c.expect_str("ms Zm9v 2 b\r\nhi\r\n", "HD\r\n");
    c.expect_str("get foo\r\n", "VALUE foo 0 2\r\nhi\r\nEND\r\n");
    c.expect_str("mg Zm9v b k v\r\n", "VA 2 kZm9v b\r\nhi\r\n");
    c.expect_str("mg !!!! b v\r\n", "CLIENT_ERROR error decoding key\r\n");

    // Stale-while-revalidate: md I marks stale, the first reader wins.
    c.expect_str("ms sw 1 T100\r\nx\r\n", "HD\r\n");
    c.expect_str("md sw I T30\r\n", "HD\r\n");
    c.expect_str("mg sw v\r\n", "VA 1 X W\r\nx\r\n");
    c.expect_str("mg sw v\r\n", "VA 1 Z X\r\nx\r\n");
    // Vivify on miss: the first client wins the right to fill it.
    c.expect_str("mg viv N30 v t\r\n", "VA 0 t30 W\r\n\r\n");
    c.expect_str("mg viv N30 v\r\n", "VA 0 Z\r\n\r\n");

    // me: item metadata.
    c.expect_str("me nope\r\n", "EN\r\n");
    c.expect_str("set dbg 0 0 3\r\nabc\r\n", "STORED\r\n");
    let cas = c.cas_of("dbg");
    let r = String::from_utf8(c.call(b"me dbg\r\n")).unwrap();
    assert!(
        r.starts_with("ME dbg exp=-1 la=")
            && r.contains(&format!(" cas={cas} fetch=yes cls=1 size=")),
        "me: {r:?}"
    );
}

fn meta_errors(t: &Target) {
    let mut c = t.connect();
    let bad = "CLIENT_ERROR bad command line format\r\n";
    // Without a key: ERROR, as memcached answers (`me`: a bad line).
    c.expect_str("mg\r\n", "ERROR\r\n");
    c.expect_str("ms mek\r\n", bad);
    c.expect_str("ms mek x\r\n", bad);
    c.expect_str("ms mek -1\r\n", bad);
    c.expect_str("md\r\n", "ERROR\r\n");
    c.expect_str("ma\r\n", "ERROR\r\n");
    c.expect_str("me\r\n", bad);
    c.expect_str("mg mek !\r\n", "CLIENT_ERROR invalid flag\r\n");
    c.expect_str("ms mek 2 Z\r\nhi\r\n", "CLIENT_ERROR invalid flag\r\n");
    c.expect_str("mg mek v v\r\n", "CLIENT_ERROR duplicate flag\r\n");
    c.expect_str(
        "mg mek Tx\r\n",
        "CLIENT_ERROR bad token in command line format\r\n",
    );
    c.expect_str(
        "ms mek 2 MZ\r\nhi\r\n",
        "CLIENT_ERROR invalid mode for ms M token\r\n",
    );
    c.expect_str(
        "ma mek MZ\r\n",
        "CLIENT_ERROR invalid mode for ma M token\r\n",
    );
    c.expect_str(
        "ma mek Dabc\r\n",
        "CLIENT_ERROR invalid or duplicate flag\r\n",
    );
    // Opaque tokens up to 32 bytes counting the O.
    let o31 = "7".repeat(31);
    c.expect_str(&format!("mg mek O{o31}\r\n"), &format!("EN O{o31}\r\n"));
    c.expect_str(
        &format!("mg mek O{o31}7\r\n"),
        "CLIENT_ERROR opaque token too long\r\n",
    );
    c.expect_str(
        &format!("ms mek 2 O{o31}7\r\nhi\r\n"),
        "CLIENT_ERROR opaque token too long\r\n",
    );
    // At most 20 tokens per meta line.
    c.expect_str(
        "mg mek a b c d e f g h i j k l m n o p q r s\r\n",
        "CLIENT_ERROR options flags are too long\r\n",
    );
    // None of the refused ms commands stored anything.
    c.expect_str("mg mek v\r\n", "EN\r\n");
}

fn misc_commands(t: &Target) {
    let mut c = t.connect();
    c.expect_str("version\r\n", &format!("VERSION {DEFAULT_VERSION}\r\n"));
    c.expect_str("verbosity 1\r\n", "OK\r\n");
    c.expect_str("verbosity 0 noreply\r\n", "");
    c.expect_str("verbosity\r\n", "ERROR\r\n");
    c.expect_str(
        "verbosity x\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );

    c.expect_str("bogus\r\n", "ERROR\r\n");
    c.expect_str("bogus with args\r\n", "ERROR\r\n");
    c.expect_str("GET k\r\n", "ERROR\r\n");
    c.expect_str("mz\r\n", "ERROR\r\n");
    // An empty line is an unknown command, as for memcached.
    c.expect_str("\r\n", "ERROR\r\n");

    c.expect_str("set st 0 0 1\r\nx\r\n", "STORED\r\n");
    let s = c.stats("");
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "get_hits",
        "curr_items",
        "total_items",
        "bytes",
        "evictions",
        "limit_maxbytes",
        "threads",
        "bytes_read",
        "bytes_written",
    ] {
        assert!(s.contains_key(name), "stats lacks {name}: {s:?}");
    }
    assert_eq!(s["pid"], t.pid.to_string());
    assert_eq!(s["version"], DEFAULT_VERSION);
    assert_eq!(s["limit_maxbytes"], t.memory_limit.to_string());
    assert!(s["curr_items"].parse::<u64>().unwrap() >= 1);
    assert!(s["curr_connections"].parse::<u64>().unwrap() >= 1);
    let time: i64 = s["time"].parse().unwrap();
    assert!((time - unix_now()).abs() <= 2, "stats time {time}");
    let settings = c.stats("settings");
    assert_eq!(settings["model"], t.model);
    assert_eq!(settings["maxbytes"], t.memory_limit.to_string());
    let items = c.stats("items");
    // "st" + "x" + 32 bytes: class 1 (chunks of 96) on memcached's ladder.
    assert!(items.contains_key("items:1:number"), "{items:?}");
    c.stats("slabs");
    c.stats("duality");
    c.expect_str("stats reset\r\n", "RESET\r\n");
    assert_eq!(c.stats("")["get_hits"], "0");
    c.expect_str("stats nosuch\r\n", "ERROR\r\n");
}

fn quit(t: &Target) {
    let mut c = t.connect();
    // quit: no answer, the connection closes, later requests are not run.
    c.send(b"set qa 0 0 1\r\nx\r\nquit\r\nset qb 0 0 1\r\ny\r\n");
    assert_eq!(show(&c.read_to_eof()), show(b"STORED\r\n"));
    let mut c = t.connect();
    c.expect_str("get qa qb\r\n", "VALUE qa 0 1\r\nx\r\nEND\r\n");
    let mut c = t.connect();
    c.send(b"quit\r\n");
    assert_eq!(c.read_to_eof(), b"");
}

fn item_size_limit(t: &Target) {
    let max = t.max_item;
    let mut c = t.connect();
    let too_large = b"SERVER_ERROR object too large for cache\r\n";
    c.expect_str("set big 0 0 1\r\nx\r\n", "STORED\r\n");
    // Decided from the command line alone: the answer arrives before any of
    // the value is sent. Then the value is discarded as it arrives, over
    // many reads, and the connection goes on.
    let n = max * 16 + 1;
    c.send(format!("set big 0 0 {n}\r\n").as_bytes());
    assert_eq!(show(&c.read_n(too_large.len())), show(too_large));
    let chunk = vec![b'v'; 64 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        c.send(&chunk[..k]);
        left -= k;
    }
    c.send(b"\r\n");
    // A refused set drops the old value, as memcached does.
    c.expect_str("get big\r\n", "END\r\n");
    // Other commands keep it; noreply silences the error.
    c.expect_str("set big 0 0 1\r\nx\r\n", "STORED\r\n");
    let value = vec![b'w'; max + 1];
    for cmd in ["add", "replace", "append", "prepend"] {
        let mut req = format!("{cmd} big 0 0 {}\r\n", max + 1).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        c.expect(&req, too_large);
        let mut req = format!("{cmd} big 0 0 {} noreply\r\n", max + 1).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        c.expect(&req, b"");
    }
    c.expect_str("get big\r\n", "VALUE big 0 1\r\nx\r\nEND\r\n");
    // ms too.
    c.send(format!("ms big {} T0\r\n", max + 1).as_bytes());
    assert_eq!(show(&c.read_n(too_large.len())), show(too_large));
    c.send(&value);
    c.send(b"\r\n");
    c.expect_str("mg big v\r\n", "EN\r\n");
    // Exactly the limit is fine, and round-trips: memcached counts its item
    // header, the key, the flags and the CAS unique too.
    let largest = max - duality_kv::protocol::item_size(3, 3, 0);
    let mut req = format!("set lim 3 0 {}\r\n", largest + 1).into_bytes();
    req.extend_from_slice(&vec![b'w'; largest + 1]);
    req.extend_from_slice(b"\r\n");
    c.expect(&req, too_large);
    let value: Vec<u8> = (0..largest).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = format!("set lim 3 0 {largest}\r\n").into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    c.expect(&req, b"STORED\r\n");
    let mut want = format!("VALUE lim 3 {largest}\r\n").into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    c.expect(b"get lim\r\n", &want);
    let s = c.stats("");
    assert!(
        s["store_too_large"].parse::<u64>().unwrap() >= 10,
        "store_too_large {}",
        s["store_too_large"]
    );
}

fn line_limits(t: &Target) {
    // A command line of 2048 bytes is fine; one byte more without a newline
    // closes the connection without an answer, as memcached does.
    let mut c = t.connect();
    let mut line = b"bogus ".to_vec();
    line.resize(2048, b'x');
    line.push(b'\n');
    c.expect(&line, b"ERROR\r\n");
    let mut line = b"set k 0 0 1".to_vec();
    line.resize(2049, b' ');
    c.send(&line);
    assert_eq!(show(&c.read_to_eof()), show(b""));
    let mut c = t.connect();
    c.send(&[b'x'; 2049]);
    assert_eq!(show(&c.read_to_eof()), show(b""));
    // Retrieval lines may be longer (1 MiB), but not without end either.
    let max = duality_kv::Limits::default().max_get_line;
    let mut c = t.connect();
    let mut line = b"get".to_vec();
    while line.len() <= max {
        line.extend_from_slice(b" somekey");
    }
    line.truncate(max + 1);
    c.send(&line);
    assert_eq!(show(&c.read_to_eof()), show(b""));
    // The server is still fine.
    t.connect()
        .expect_str("version\r\n", &format!("VERSION {DEFAULT_VERSION}\r\n"));
}

fn data_chunk(t: &Target) {
    let mut c = t.connect();
    c.expect_str("set dc 0 0 1\r\nx\r\n", "STORED\r\n");
    let sets = |c: &mut Client| c.stats("")["cmd_set"].parse::<u64>().unwrap();
    let before = sets(&mut c);
    // The value's \r\n is checked; a bad block is consumed as declared.
    c.expect_str("set dc 0 0 2\r\nabcd", "CLIENT_ERROR bad data chunk\r\n");
    c.expect_str("set dc 0 0 2\r\nab\n\n", "CLIENT_ERROR bad data chunk\r\n");
    c.expect_str("set dc 0 0 2 noreply\r\nabcd", "");
    c.expect_str("ms dc 2\r\nabcd", "CLIENT_ERROR bad data chunk\r\n");
    // memcached counts each of them in cmd_set all the same.
    assert_eq!(sets(&mut c) - before, 4, "{}", t.model);
    c.expect_str("get dc\r\n", "VALUE dc 0 1\r\nx\r\nEND\r\n");
}

fn pipelining(t: &Target) {
    // Everything in one write: all of it runs, responses in order, with no
    // further input from the client.
    let mut c = t.connect();
    let mut req = Vec::new();
    let mut want = Vec::new();
    req.extend_from_slice(b"set pc 0 0 1\r\n0\r\n");
    want.extend_from_slice(b"STORED\r\n");
    for i in 0..150 {
        let v = format!("value-{i}-{}", "z".repeat(i % 40));
        req.extend_from_slice(format!("set p{i} {i} 0 {}\r\n{v}\r\n", v.len()).as_bytes());
        want.extend_from_slice(b"STORED\r\n");
        req.extend_from_slice(format!("get p{i}\r\n").as_bytes());
        want.extend_from_slice(format!("VALUE p{i} {i} {}\r\n{v}\r\nEND\r\n", v.len()).as_bytes());
        req.extend_from_slice(b"incr pc 1\r\n");
        want.extend_from_slice(format!("{}\r\n", i + 1).as_bytes());
        req.extend_from_slice(format!("mg p{i} s k q\r\nmg nope{i} v q\r\n").as_bytes());
        want.extend_from_slice(format!("HD s{} kp{i}\r\n", v.len()).as_bytes());
        if i > 0 {
            req.extend_from_slice(format!("delete p{}\r\n", i - 1).as_bytes());
            want.extend_from_slice(b"DELETED\r\n");
        }
        req.extend_from_slice(b"bogus\r\n");
        want.extend_from_slice(b"ERROR\r\n");
    }
    req.extend_from_slice(b"mn\r\n");
    want.extend_from_slice(b"MN\r\n");
    c.send(&req);
    let got = c.read_n(want.len());
    assert!(
        got == want,
        "pipeline: want {}\n got {}",
        show(&want),
        show(&got)
    );
    c.expect_str(
        "get pc p149 p148\r\n",
        &format!(
            "VALUE pc 0 3\r\n150\r\nVALUE p149 149 {}\r\nvalue-149-{}\r\nEND\r\n",
            10 + 29,
            "z".repeat(29)
        ),
    );

    // The same requests one byte at a time: requests split at every point.
    let req =
        b"set s1 0 0 5\r\nhello\r\nget s1\r\nms s2 2 T0\r\nhi\r\nmg s2 v\r\nincr pc 5\r\nmn\r\n";
    let want = b"STORED\r\nVALUE s1 0 5\r\nhello\r\nEND\r\nHD\r\nVA 2\r\nhi\r\n155\r\nMN\r\n";
    for b in req {
        c.send(&[*b]);
    }
    assert_eq!(show(&c.read_n(want.len())), show(want));

    // Large values spanning many reads, pipelined both ways.
    let size = t.max_item.min(60_000);
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 0..8u8 {
        req.extend_from_slice(format!("set lv{i} 0 0 {size}\r\n").as_bytes());
        req.extend_from_slice(&vec![b'A' + i; size]);
        req.extend_from_slice(b"\r\n");
        want.extend_from_slice(b"STORED\r\n");
    }
    c.send(&req);
    assert_eq!(show(&c.read_n(want.len())), show(&want));
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in (0..8u8).rev() {
        req.extend_from_slice(format!("get lv{i}\r\n").as_bytes());
        want.extend_from_slice(format!("VALUE lv{i} 0 {size}\r\n").as_bytes());
        want.extend_from_slice(&vec![b'A' + i; size]);
        want.extend_from_slice(b"\r\nEND\r\n");
    }
    c.send(&req);
    let got = c.read_n(want.len());
    assert!(got == want, "large pipelined gets differ");
    c.expect(b"", b"");
}

fn interleaved_connections(t: &Target) {
    // Several connections, each holding a partial request while the others
    // run theirs: every connection keeps its own buffer.
    let mut cs: Vec<Client> = (0..4).map(|_| t.connect()).collect();
    for (i, c) in cs.iter_mut().enumerate() {
        c.send(format!("set il{i} 0 0 6\r\nval").as_bytes());
    }
    for (i, c) in cs.iter_mut().enumerate() {
        c.expect_str(
            &format!("ue{i}\r\nget il{i}\r\n"),
            &format!("STORED\r\nVALUE il{i} 0 6\r\nvalue{i}\r\nEND\r\n"),
        );
    }
}

fn flush_all(t: &Target) {
    let mut c = t.connect();
    c.expect_str(
        "set fa 0 0 1\r\na\r\nset fb 0 0 1\r\nb\r\n",
        "STORED\r\nSTORED\r\n",
    );
    c.expect_str("flush_all\r\n", "OK\r\n");
    c.expect_str("get fa fb\r\n", "END\r\n");
    c.expect_str("set fa 0 0 1\r\nA\r\n", "STORED\r\n");
    c.expect_str("get fa\r\n", "VALUE fa 0 1\r\nA\r\nEND\r\n");
    c.expect_str("flush_all noreply\r\n", "");
    c.expect_str("get fa\r\n", "END\r\n");
    c.expect_str("set fa 0 0 1\r\nA\r\n", "STORED\r\n");
    c.expect_str("flush_all 0\r\n", "OK\r\n");
    c.expect_str("get fa\r\n", "END\r\n");
    // A delayed flush leaves items alone until then.
    c.expect_str("set fa 0 0 1\r\nA\r\n", "STORED\r\n");
    c.expect_str("flush_all 100\r\n", "OK\r\n");
    c.expect_str("get fa\r\n", "VALUE fa 0 1\r\nA\r\nEND\r\n");
    c.expect_str(
        "flush_all abc\r\n",
        "CLIENT_ERROR invalid exptime argument\r\n",
    );
    c.expect_str("flush_all\r\n", "OK\r\n");
    c.expect_str("get fa\r\n", "END\r\n");
    c.expect_str("set fa 0 0 1\r\nB\r\n", "STORED\r\n");
    c.expect_str("get fa\r\n", "VALUE fa 0 1\r\nB\r\nEND\r\n");
}

// ---- the matrix: every model over TCP, one over a Unix socket ----

#[test]
fn conformance_sped() {
    conformance(&InProc::tcp("sped").target());
}

#[test]
fn conformance_amped() {
    conformance(&InProc::tcp("amped:2").target());
}

#[test]
fn conformance_seda_s() {
    conformance(&InProc::tcp("seda-s:2").target());
}

#[test]
fn conformance_symped() {
    conformance(&InProc::tcp("symped:2").target());
}

#[test]
fn conformance_seda() {
    conformance(&InProc::tcp("seda:2:2").target());
}

#[test]
fn conformance_steal() {
    conformance(&InProc::tcp("steal:2").target());
}

#[test]
fn conformance_thread_per_conn() {
    conformance(&InProc::tcp("thread-per-conn").target());
}

#[test]
fn conformance_unix_socket() {
    conformance(&InProc::unix("amped:2").target());
}

/// Every check again with the server's sockets moving one byte at a time,
/// waking spuriously and hit by `EINTR` (`duality_rt::faults`), under every
/// evented model: nothing lost, duplicated, reordered or hung.
fn conformance_under_faults(model: &str) {
    let srv = InProc::tcp_with_faults(model, duality_rt::faults::Faults::ALL);
    conformance(&srv.target());
}

#[test]
fn faults_sped() {
    conformance_under_faults("sped");
}

#[test]
fn faults_amped() {
    conformance_under_faults("amped:2");
}

#[test]
fn faults_seda_s() {
    conformance_under_faults("seda-s:2");
}

#[test]
fn faults_symped() {
    conformance_under_faults("symped:2");
}

#[test]
fn faults_seda() {
    conformance_under_faults("seda:2:2");
}

#[test]
fn faults_steal() {
    conformance_under_faults("steal:2");
}

/// Connections reset by the peer part-way (`duality_rt::faults` `reset`:
/// every third connection, after its 1st..7th read or write) and accepts
/// failing with `EMFILE` (every third, the connection waiting in the
/// backlog): a reset loses only its own connection, a value whose request
/// was cut is never stored in part, every other connection is answered in
/// full and in order, and the server keeps serving.
fn resets_and_emfile(model: &str) {
    use std::io::{Read, Write};
    let faults = duality_rt::faults::Faults {
        reset: true,
        emfile: true,
        ..duality_rt::faults::Faults::NONE
    };
    let srv = InProc::tcp_with_faults(model, faults);
    let Addr::Tcp(addr) = srv.addr.clone() else {
        unreachable!()
    };
    let value = |c: usize, i: usize| format!("v{c}-{i}-").repeat(40 + i * 13);
    // Sends `parts` (with a pause between, so the server reads them apart)
    // and reads until `want` has come or the connection ended. Whatever came
    // must be a prefix of `want`: nothing duplicated, reordered or garbled.
    let exchange = |s: &mut std::net::TcpStream, parts: &[&[u8]], want: &[u8]| -> bool {
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                thread::sleep(Duration::from_millis(2));
            }
            if s.write_all(p).is_err() {
                break;
            }
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < want.len() {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        assert!(want.starts_with(&got), "{model}: got {:?}", show(&got));
        got.len() == want.len()
    };
    let (mut whole, mut cut) = (0, 0);
    for c in 0..30 {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        let set = |i: usize| {
            let v = value(c, i);
            format!("set k{c}-{i} 7 0 {}\r\n{v}\r\n", v.len()).into_bytes()
        };
        let (s0, s1, s2) = (set(0), set(1), set(2));
        let v0 = value(c, 0);
        let s2get0 = [&s2[..], format!("get k{c}-0\r\n").as_bytes()].concat();
        let steps: [(Vec<&[u8]>, String); 3] = [
            // A value that arrives in two reads: a reset between them cuts
            // the request in the middle.
            (
                vec![&s0[..s0.len() / 2], &s0[s0.len() / 2..]],
                "STORED\r\n".into(),
            ),
            (vec![&s1[..]], "STORED\r\n".into()),
            // Two requests in one write, two answers.
            (
                vec![&s2get0[..]],
                format!("STORED\r\nVALUE k{c}-0 7 {}\r\n{v0}\r\nEND\r\n", v0.len()),
            ),
        ];
        let all = steps
            .iter()
            .all(|(parts, want)| exchange(&mut s, parts, want.as_bytes()));
        if all {
            whole += 1;
        } else {
            cut += 1;
        }
        // Each item is absent or whole: a cut request stored nothing.
        for i in 0..3 {
            let key = format!("k{c}-{i}");
            let now = duality_rt::time::unix_seconds_coarse() as u32;
            let e = srv.state.store.entry(key.as_bytes(), now);
            if let Some(it) = e.item() {
                assert_eq!(it.value, value(c, i).as_bytes(), "{model}: {key}");
                assert_eq!(it.flags, 7);
            }
        }
    }
    eprintln!("{model}: {whole} whole, {cut} cut");
    // One connection in three is reset, within its first seven reads and
    // writes (counted over the whole process, which other tests share).
    assert!(whole >= 10 && cut >= 3, "{model}: {whole} whole, {cut} cut");
    // Still serving: a connection that is not reset answers (one in three
    // is, so at most three tries).
    let served = (0..3).any(|_| {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(b"version\r\n");
        let mut buf = [0u8; 64];
        matches!(s.read(&mut buf), Ok(n) if n > 0 && buf[..n].starts_with(b"VERSION "))
    });
    assert!(served, "{model}: no answer after the resets");
}

#[test]
fn resets_and_emfile_sped() {
    resets_and_emfile("sped");
}

#[test]
fn resets_and_emfile_amped() {
    resets_and_emfile("amped:2");
}

#[test]
fn resets_and_emfile_seda() {
    resets_and_emfile("seda:2:2");
}

#[test]
fn resets_and_emfile_seda_s() {
    resets_and_emfile("seda-s:2");
}

#[test]
fn resets_and_emfile_symped() {
    resets_and_emfile("symped:2");
}

#[test]
fn resets_and_emfile_steal() {
    resets_and_emfile("steal:2");
}

/// TTLs and a delayed flush_all, in real time (one model: it sleeps).
#[test]
fn expiry_in_real_time() {
    // The items below must outlive the checks made before sleeping; a
    // machine that paused for most of a second between them gets another
    // try on a fresh server.
    let mut tries = 0;
    let (_srv, mut c) = loop {
        let srv = InProc::tcp("symped:2");
        let mut c = srv.connect();
        // Start just after a second begins: the server's clock has
        // one-second steps.
        let into = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_millis();
        thread::sleep(Duration::from_millis(u64::from(1010 - into)));
        let began = std::time::Instant::now();
        c.expect_str("set e1 0 1 1\r\nx\r\n", "STORED\r\n");
        c.expect_str("set e2 0 100 1\r\ny\r\n", "STORED\r\n");
        c.expect_str("set e3 0 0 1\r\nz\r\n", "STORED\r\n");
        c.expect_str("ms e4 1 T1\r\nw\r\n", "HD\r\n");
        c.expect_str("set e5 0 0 1\r\nv\r\n", "STORED\r\n");
        c.expect_str("touch e5 1\r\n", "TOUCHED\r\n");
        // Takes effect from the second before its time (memcached's
        // `oldest_live`): not yet.
        c.expect_str("flush_all 2\r\n", "OK\r\n");
        c.send(b"get e1 e3\r\n");
        let got = c.read_until(b"END\r\n");
        let want = b"VALUE e1 0 1\r\nx\r\nVALUE e3 0 1\r\nz\r\nEND\r\n";
        if got == want {
            break (srv, c);
        }
        tries += 1;
        assert!(
            tries < 3 && began.elapsed() > Duration::from_millis(500),
            "{} after {:?}",
            show(&got),
            began.elapsed()
        );
    };
    thread::sleep(Duration::from_millis(2100));
    // Relative TTLs ran out; the delayed flush took the rest.
    c.expect_str("get e1 e2 e3 e4 e5\r\n", "END\r\n");
    c.expect_str("mg e4 v\r\n", "EN\r\n");
    // New items after the flush time are fine.
    c.expect_str("set e1 0 0 1\r\nn\r\n", "STORED\r\n");
    c.expect_str("get e1\r\n", "VALUE e1 0 1\r\nn\r\nEND\r\n");
    let s = c.stats("");
    let dead: u64 =
        s["get_expired"].parse::<u64>().unwrap() + s["get_flushed"].parse::<u64>().unwrap();
    assert!(dead >= 3, "get_expired + get_flushed = {dead}");
}

// ---- the binary: memcached's flags, end to end ----

/// The binary, end to end: the full conformance run over TCP against
/// `duality kv` on its default model.
#[test]
fn binary_conformance() {
    let mut srv = KvProc::start(&["-t", "2", "-m", "8", "-I", "64k"]);
    let target = Target {
        addr: srv.addr.clone(),
        max_item: 64 << 10,
        model: "symped:2".into(),
        pid: srv.pid() as u32,
        memory_limit: 8 << 20,
    };
    conformance(&target);
    srv.signal(libc::SIGINT);
    let st = srv
        .wait_exit(Duration::from_secs(10))
        .expect("exits after SIGINT");
    assert!(st.success(), "exit status {st:?}");
}

/// `duality kv` with every memcached flag: TCP and a Unix socket serving one
/// cache, the limits reported by `stats` and enforced.
#[test]
fn binary_memcached_flags() {
    let dir = TempDir::new("kv-bin");
    let sock = dir.path().join("kv.sock");
    let sock_s = sock.to_str().unwrap().to_string();
    let mut srv = KvProc::start(&[
        "-l",
        "127.0.0.1",
        "-s",
        &sock_s,
        "-t",
        "2",
        "-m",
        "8",
        "-c",
        "4",
        "-I",
        "2k",
        "-v",
    ]);
    // The backend: what DUALITY_IO asks for (io_uring by default), epoll
    // where io_uring is refused.
    let io = match std::env::var("DUALITY_IO").as_deref() {
        Ok("epoll") => "epoll",
        _ if duality_rt::uring_unavailable().is_none() => "uring",
        _ => "epoll",
    };
    assert_eq!(
        srv.ready_line,
        format!(
            "ready kv {} model symped:2 io {io} on 127.0.0.1:{}, {sock_s}",
            env!("CARGO_PKG_VERSION"),
            srv.port
        )
    );
    let mut tcp = srv.connect();
    let mut unix = Client::connect(&Addr::Unix(sock.clone()));
    tcp.expect_str("set shared 0 0 2\r\nok\r\n", "STORED\r\n");
    unix.expect_str("get shared\r\n", "VALUE shared 0 2\r\nok\r\nEND\r\n");
    let s = unix.stats("");
    assert_eq!(s["threads"], "2");
    assert_eq!(s["max_connections"], "4");
    assert_eq!(s["limit_maxbytes"], (8 << 20).to_string());
    assert_eq!(s["pid"], srv.pid().to_string());
    assert_eq!(unix.stats("settings")["model"], "symped:2");
    assert!(
        srv.wait_stderr(
            "duality kv: settings: -m 8 MiB, -c 4,",
            Duration::from_secs(5)
        ),
        "-v logs the settings: {}",
        srv.stderr_text()
    );
    // -I 2k: 2048 bytes of item, memcached's header and the key included.
    let largest = 2048 - duality_kv::protocol::item_size(3, 0, 0);
    let mut req = format!("set big 0 0 {largest}\r\n").into_bytes();
    req.extend_from_slice(&vec![b'x'; largest]);
    req.extend_from_slice(b"\r\n");
    tcp.expect(&req, b"STORED\r\n");
    let mut req = format!("set big 0 0 {}\r\n", largest + 1).into_bytes();
    req.extend_from_slice(&vec![b'x'; largest + 1]);
    req.extend_from_slice(b"\r\n");
    tcp.expect(&req, b"SERVER_ERROR object too large for cache\r\n");

    // -c 4: with 4 connections open the 5th is refused with memcached's message.
    let mut more: Vec<Client> = (0..2).map(|_| srv.connect()).collect();
    for c in &mut more {
        c.expect_str("version\r\n", &format!("VERSION {DEFAULT_VERSION}\r\n"));
    }
    let mut refused = srv.connect();
    assert_eq!(
        show(&refused.read_to_eof()),
        show(b"ERROR Too many open connections\r\n")
    );
    // memcached's counter of them (memcached_exporter reads it).
    assert_eq!(more[0].stats("")["rejected_connections"], "1");
    drop(more);
    // Closed connections free their slots.
    let mut served = false;
    for _ in 0..200 {
        let mut c = srv.connect();
        c.send(b"version\r\n");
        let r = c.read_to_eof_or_line();
        if r.starts_with(b"VERSION") {
            served = true;
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert!(served, "a slot frees up after connections close");

    srv.signal(libc::SIGTERM);
    let st = srv
        .wait_exit(Duration::from_secs(10))
        .expect("exits after SIGTERM");
    assert!(st.success(), "exit status {st:?}");
    assert!(!sock.exists(), "the Unix socket file is removed at exit");
}

/// Bad flags are refused with a message and a failing exit status.
#[test]
fn binary_refuses_bad_flags() {
    let port = free_port().to_string();
    for args in [
        &["-p", "0"][..],
        &["-p", &port, "-m", "0"],
        &["-p", &port, "-c", "0"],
        &["-p", &port, "-t", "0"],
        &["-p", &port, "-I", "1x"],
        &["-p", &port, "-I", "512"],
        &["-p", &port, "-m", "1", "-I", "1m"],
        &["-p", &port, "--model", "nosuch"],
    ] {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_duality"))
            .arg("kv")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run duality kv");
        // Killed on drop should it start serving after all.
        let mut guard = ChildGuard(Some(child));
        let until = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = guard.0.as_mut().unwrap().try_wait().expect("try_wait") {
                break st;
            }
            assert!(
                std::time::Instant::now() < until,
                "duality kv {args:?} kept running"
            );
            thread::sleep(Duration::from_millis(5));
        };
        let out = guard.0.take().unwrap().wait_with_output().expect("output");
        assert!(!status.success(), "duality kv {args:?} should fail");
        assert!(!out.stderr.is_empty(), "duality kv {args:?}: no message");
        assert!(
            out.stdout.is_empty(),
            "duality kv {args:?} printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// In the hand-off models a read of pipelined gets is one hand-off to a
/// payload thread, not one per request.
#[test]
fn a_pipelined_read_of_gets_makes_one_hand_off_not_one_per_request() {
    const N: usize = 100;
    let req = "get k\r\n".repeat(N);
    let want = "VALUE k 0 1\r\nv\r\nEND\r\n".repeat(N);
    for model in ["amped:1", "seda:1:1", "seda-s:1"] {
        let srv = InProc::tcp(model);
        let mut c = srv.connect();
        c.send(b"set k 0 0 1\r\nv\r\n");
        assert_eq!(c.read_n(8), b"STORED\r\n");
        let before = srv.payload_jobs();
        let writes = 5;
        for _ in 0..writes {
            c.send(req.as_bytes());
            assert!(c.read_n(want.len()) == want.as_bytes(), "{model}");
        }
        let jobs = srv.payload_jobs() - before;
        // 100 gets in 600 bytes usually arrive in one read (a split read
        // makes one more batch), never one job each.
        assert!(
            (writes..=3 * writes).contains(&jobs),
            "{model}: {jobs} hand-offs for {writes} pipelined writes of {N} gets"
        );
    }
}

/// `stats cachedump` through a server goes out in pieces (each looks at a
/// bounded number of items, the loop serving others in between): whole,
/// in order, one `END`, in every kind of model; a class with no items
/// answers `END` after looking at them all.
#[test]
fn a_cachedump_of_many_items_is_whole() {
    const N: usize = 40_000;
    let mut sets = String::new();
    for i in 0..N {
        sets += &format!("set k{i:05} 0 0 1 noreply\r\nx\r\n");
    }
    for model in ["sped", "amped:1", "symped:2", "thread-per-conn"] {
        let kv = KvProc::start(&["--model", model]);
        let mut c = kv.connect();
        c.send(sets.as_bytes());
        c.expect_str("get k39999\r\n", "VALUE k39999 0 1\r\nx\r\nEND\r\n");
        c.send(b"stats cachedump 1 0\r\n");
        let dump = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
        assert_eq!(dump.matches("ITEM k").count(), N, "{model}");
        assert_eq!(dump.matches("END").count(), 1, "{model}");
        assert!(dump.ends_with(" [1 b; 0 s]\r\nEND\r\n"), "{model}");
        c.expect_str("stats cachedump 9 0\r\n", "END\r\n");
        c.expect_str("stats cachedump 9\r\n", "CLIENT_ERROR bad command line\r\n");
    }
}

/// One lock per request: the cache keeps each shard exclusive with the
/// shard's own lock, so no model takes a color lock around its requests as
/// well (`stats duality`'s `color_locks`, which counts them; the models'
/// session tests show it counting for a protocol that does not lock itself).
#[test]
fn the_cache_takes_no_color_lock_besides_its_shard_lock() {
    for model in ["seda:1:1", "seda-s:1", "symped:2", "amped:2/adaptive"] {
        let (m, handoff) = model.split_once('/').unwrap_or((model, "always"));
        let kv = KvProc::start(&["--model", m, "--handoff", handoff]);
        let mut c = kv.connect();
        let (mut pipelined, mut want) = (String::new(), String::new());
        for i in 0..200 {
            pipelined += &format!("set k{i} 0 0 1\r\nx\r\nget k{i}\r\n");
            want += &format!("STORED\r\nVALUE k{i} 0 1\r\nx\r\nEND\r\n");
        }
        c.send(pipelined.as_bytes());
        assert_eq!(
            show(&c.read_n(want.len())),
            show(want.as_bytes()),
            "{model}"
        );
        let s = c.stats("duality");
        assert_eq!(
            s.get("color_locks").map(String::as_str),
            Some("0"),
            "{model}: {s:?}"
        );
    }
}

/// `stats duality` says how a hand-off model places its batches: the
/// policy, and under `--handoff adaptive` what it learned (a cache batch is
/// cheaper than a trip to a payload thread, so the next one stays on the
/// network loop); the inline models have no hand-off to report.
#[test]
fn stats_duality_reports_the_handoff_policy() {
    let kv = KvProc::start(&["--model", "amped:1", "--handoff", "adaptive"]);
    let mut c = kv.connect();
    c.expect_str("set k 0 0 1\r\nx\r\n", "STORED\r\n");
    // Batches are timed by the wall clock: one preempted on a busy machine
    // may send the next away for a while; more batches bring it back.
    let mut s = HashMap::new();
    for _ in 0..10 {
        for _ in 0..2_000 {
            c.expect_str("get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n");
        }
        s = c.stats("duality");
        if s.get("handoff_next_batch").map(String::as_str) == Some("loop") {
            break;
        }
    }
    assert_eq!(s.get("handoff").map(String::as_str), Some("adaptive"));
    let cost: u64 = s["handoff_batch_cost_ns"].parse().unwrap();
    let trip: u64 = s["handoff_trip_ns"].parse().unwrap();
    assert!(cost > 0 && trip > 0, "{s:?}");
    assert_eq!(s["handoff_next_batch"], "loop", "{s:?}");

    let always = KvProc::start(&["--model", "amped:1"]);
    let s = always.connect().stats("duality");
    assert_eq!(s.get("handoff").map(String::as_str), Some("always"));
    assert!(!s.contains_key("handoff_batch_cost_ns"), "{s:?}");
    let inline = KvProc::start(&["--model", "symped:1"]);
    let s = inline.connect().stats("duality");
    assert!(!s.contains_key("handoff"), "{s:?}");
}
