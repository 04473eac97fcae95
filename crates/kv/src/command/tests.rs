use super::*;
use crate::protocol::{parse, Limits};
use crate::store::StoreConfig;

const NOW: Time = 1_700_000_000;

/// A test server: one store, a settable clock, one connection's parse loop.
struct Server {
    store: Store,
    limits: Limits,
    now: Time,
}

impl Server {
    fn new() -> Server {
        Server::new_sized(1 << 20)
    }

    fn new_sized(max_bytes: usize) -> Server {
        Server {
            store: Store::new(StoreConfig {
                max_bytes,
                shards: 4,
                evictions: true,
            }),
            limits: Limits::default(),
            now: NOW,
        }
    }

    /// Feeds `input` through parse/execute as a server would; returns the
    /// output and whether the connection was closed.
    fn feed(&self, input: &[u8]) -> (Vec<u8>, bool) {
        let ctx = SimpleContext {
            now: self.now,
            started: NOW - 100,
        };
        let mut buf = input;
        let mut out = Vec::new();
        loop {
            match parse(buf, &self.limits) {
                Ok((req, used)) => {
                    buf = &buf[used..];
                    if execute(&req, &self.store, &ctx, &mut out) == Flow::Close {
                        return (out, true);
                    }
                }
                Err(ParseError::Incomplete) => {
                    assert!(
                        buf.is_empty(),
                        "left over: {:?}",
                        String::from_utf8_lossy(buf)
                    );
                    return (out, false);
                }
                Err(e) => {
                    if execute_error(&e, &self.store, &ctx, &mut out) == Flow::Close {
                        return (out, true);
                    }
                    let used = e.consumed().unwrap().min(buf.len());
                    buf = &buf[used..];
                }
            }
        }
    }

    /// Feeds `input` and checks the exact response.
    #[track_caller]
    fn check(&self, input: &str, want: &str) {
        let (out, _) = self.feed(input.as_bytes());
        assert_eq!(String::from_utf8_lossy(&out), want, "for {input:?}");
    }

    fn run(&self, input: &str) -> String {
        String::from_utf8(self.feed(input.as_bytes()).0).unwrap()
    }

    fn cas_of(&self, key: &str) -> u64 {
        self.store
            .entry(key.as_bytes(), self.now)
            .item()
            .unwrap()
            .cas
    }

    fn stats(&self) -> crate::store::Stats {
        self.store.stats()
    }
}

// ---- classic commands -----------------------------------------------------

#[test]
fn set_get_gets() {
    let s = Server::new();
    s.check("set k 5 0 3\r\nabc\r\n", "STORED\r\n");
    s.check("get k\r\n", "VALUE k 5 3\r\nabc\r\nEND\r\n");
    let cas = s.cas_of("k");
    s.check(
        "gets k\r\n",
        &format!("VALUE k 5 3 {cas}\r\nabc\r\nEND\r\n"),
    );
    s.check("get nope\r\n", "END\r\n");
    s.check("set j 0 0 0\r\n\r\n", "STORED\r\n");
    s.check(
        "get k nope j k\r\n",
        "VALUE k 5 3\r\nabc\r\nVALUE j 0 0\r\n\r\nVALUE k 5 3\r\nabc\r\nEND\r\n",
    );
    // Values are binary-safe.
    s.check("set b 4294967295 0 4\r\n\r\n\0\n\r\n", "STORED\r\n");
    s.check("get b\r\n", "VALUE b 4294967295 4\r\n\r\n\0\n\r\nEND\r\n");
    let st = s.stats();
    assert_eq!(
        (st.cmd_get, st.get_hits, st.get_misses, st.cmd_set),
        (8, 6, 2, 3)
    );
}

#[test]
fn add_replace_append_prepend() {
    let s = Server::new();
    s.check("add k 1 0 1\r\na\r\n", "STORED\r\n");
    s.check("add k 2 0 1\r\nb\r\n", "NOT_STORED\r\n");
    s.check("replace x 0 0 1\r\nb\r\n", "NOT_STORED\r\n");
    s.check("replace k 3 0 1\r\nc\r\n", "STORED\r\n");
    s.check("append k 9 0 2\r\n>>\r\n", "STORED\r\n");
    s.check("prepend k 9 0 2\r\n<<\r\n", "STORED\r\n");
    s.check("append x 0 0 1\r\na\r\n", "NOT_STORED\r\n");
    s.check("prepend x 0 0 1\r\na\r\n", "NOT_STORED\r\n");
    // append/prepend keep the item's flags.
    s.check("get k\r\n", "VALUE k 3 5\r\n<<c>>\r\nEND\r\n");
}

#[test]
fn cas_command() {
    let s = Server::new();
    s.check("cas k 0 0 1 1\r\na\r\n", "NOT_FOUND\r\n");
    s.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    let cas = s.cas_of("k");
    s.check(&format!("cas k 0 0 1 {}\r\nb\r\n", cas + 1), "EXISTS\r\n");
    s.check("cas k 0 0 1 0\r\nb\r\n", "EXISTS\r\n");
    s.check(&format!("cas k 7 0 1 {cas}\r\nc\r\n"), "STORED\r\n");
    s.check(&format!("cas k 7 0 1 {cas}\r\nd\r\n"), "EXISTS\r\n");
    s.check("get k\r\n", "VALUE k 7 1\r\nc\r\nEND\r\n");
    assert!(s.cas_of("k") > cas, "a store assigns a new CAS unique");
    let st = s.stats();
    assert_eq!((st.cas_misses, st.cas_hits, st.cas_badval), (1, 1, 3));
}

#[test]
fn delete_command() {
    let s = Server::new();
    s.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    s.check("delete k\r\n", "DELETED\r\n");
    s.check("delete k\r\n", "NOT_FOUND\r\n");
    s.check("get k\r\n", "END\r\n");
    let st = s.stats();
    assert_eq!((st.delete_hits, st.delete_misses), (1, 1));
}

#[test]
fn incr_decr() {
    let s = Server::new();
    s.check("incr k 1\r\n", "NOT_FOUND\r\n");
    s.check("set k 3 0 2\r\n10\r\n", "STORED\r\n");
    let cas = s.cas_of("k");
    s.check("incr k 5\r\n", "15\r\n");
    assert_ne!(s.cas_of("k"), cas);
    s.check("decr k 6\r\n", "9\r\n");
    // No space padding: the value is exactly the number.
    s.check("get k\r\n", "VALUE k 3 1\r\n9\r\nEND\r\n");
    s.check("decr k 100\r\n", "0\r\n");
    s.check("set k 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n");
    s.check("incr k 1\r\n", "0\r\n");
    s.check("set k 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n");
    s.check("incr k 3\r\n", "2\r\n");
    s.check("set k 0 0 3\r\nabc\r\n", "STORED\r\n");
    s.check(
        "incr k 1\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    s.check("set k 0 0 0\r\n\r\n", "STORED\r\n");
    s.check(
        "decr k 1\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    s.check("set k 0 0 3\r\n 7 \r\n", "STORED\r\n");
    s.check("incr k 1\r\n", "8\r\n");
    s.check(
        "incr k x\r\n",
        "CLIENT_ERROR invalid numeric delta argument\r\n",
    );
    s.check("decr nope 1\r\n", "NOT_FOUND\r\n");
    let st = s.stats();
    assert_eq!(
        (st.incr_hits, st.incr_misses, st.decr_hits, st.decr_misses),
        (4, 1, 2, 1)
    );
}

#[test]
fn touch_and_gat() {
    let mut s = Server::new();
    s.check("touch k 10\r\n", "NOT_FOUND\r\n");
    s.check("set k 1 0 1\r\na\r\n", "STORED\r\n");
    s.check("touch k 10\r\n", "TOUCHED\r\n");
    s.now += 9;
    s.check("get k\r\n", "VALUE k 1 1\r\na\r\nEND\r\n");
    s.check("gat 100 k nope\r\n", "VALUE k 1 1\r\na\r\nEND\r\n");
    let cas = s.cas_of("k");
    s.now += 50;
    s.check(
        "gats 0 k\r\n",
        &format!("VALUE k 1 1 {cas}\r\na\r\nEND\r\n"),
    );
    s.now += 1_000_000;
    s.check("get k\r\n", "VALUE k 1 1\r\na\r\nEND\r\n");
    s.check("gat -1 k\r\n", "VALUE k 1 1\r\na\r\nEND\r\n");
    s.check("get k\r\n", "END\r\n");
    let st = s.stats();
    assert_eq!((st.cmd_touch, st.touch_hits, st.touch_misses), (6, 4, 2));
}

#[test]
fn expiry_times() {
    let mut s = Server::new();
    s.check("set rel 0 10 1\r\na\r\n", "STORED\r\n");
    s.check(&format!("set abs 0 {} 1\r\na\r\n", NOW + 20), "STORED\r\n");
    s.check("set neg 0 -1 1\r\na\r\n", "STORED\r\n");
    s.check(&format!("set past 0 {} 1\r\na\r\n", NOW - 1), "STORED\r\n");
    s.check("set month 0 2592000 1\r\na\r\n", "STORED\r\n");
    s.check("get neg past\r\n", "END\r\n");
    s.now += 9;
    s.check(
        "get rel abs\r\n",
        "VALUE rel 0 1\r\na\r\nVALUE abs 0 1\r\na\r\nEND\r\n",
    );
    s.now += 1;
    s.check("get rel abs\r\n", "VALUE abs 0 1\r\na\r\nEND\r\n");
    s.now += 10;
    s.check("get abs month\r\n", "VALUE month 0 1\r\na\r\nEND\r\n");
    s.now = NOW + 2_592_000;
    s.check("get month\r\n", "END\r\n");
    assert_eq!(s.stats().get_expired, 3);
}

#[test]
fn noreply_suppresses_everything() {
    let s = Server::new();
    s.check("set k 0 0 1 noreply\r\na\r\n", "");
    s.check("add k 0 0 1 noreply\r\na\r\n", "");
    s.check("append k 0 0 1 noreply\r\nb\r\n", "");
    s.check("cas k 0 0 1 1 noreply\r\nc\r\n", "");
    s.check("incr k 1 noreply\r\n", "");
    s.check("incr k x noreply\r\n", "");
    s.check("touch k 10 noreply\r\n", "");
    s.check("get k\r\n", "VALUE k 0 2\r\nab\r\nEND\r\n");
    s.check("delete k noreply\r\n", "");
    s.check("delete k noreply\r\n", "");
    s.check("verbosity 1 noreply\r\n", "");
    s.check("flush_all noreply\r\n", "");
    // An unknown command is answered even so, as memcached answers it.
    s.check("bogus noreply\r\n", "ERROR\r\n");
    s.check("get k\r\n", "END\r\n");
}

#[test]
fn flush_all_command() {
    let mut s = Server::new();
    s.check(
        "set a 0 0 1\r\na\r\nset b 0 0 1\r\nb\r\n",
        "STORED\r\nSTORED\r\n",
    );
    s.check("flush_all\r\n", "OK\r\n");
    s.check("get a b\r\n", "END\r\n");
    s.check("set a 0 0 1\r\na\r\n", "STORED\r\n");
    // As memcached: items accessed before now + 10 go from the second
    // before that on.
    s.check("flush_all 10\r\n", "OK\r\n");
    s.now += 8;
    s.check("get a\r\n", "VALUE a 0 1\r\na\r\nEND\r\n");
    s.now += 1;
    s.check("get a\r\n", "END\r\n");
    // Stored in that second: before now + 10 too.
    s.check("set a 0 0 1\r\na\r\nget a\r\n", "STORED\r\nEND\r\n");
    s.now += 1;
    s.check("set a 0 0 1\r\na\r\n", "STORED\r\n");
    s.check("get a\r\n", "VALUE a 0 1\r\na\r\nEND\r\n");
    s.check("flush_all -1\r\n", "OK\r\n");
    s.check("get a\r\n", "END\r\n");
    s.check(
        "flush_all x\r\n",
        "CLIENT_ERROR invalid exptime argument\r\n",
    );
    s.check("flush_all x noreply\r\n", "");
    // memcached counts the refused ones too (1.6.18 checked by hand).
    let st = s.stats();
    assert_eq!((st.cmd_flush, st.get_flushed), (5, 5));
}

/// `flush_all` at an absolute time already past: everything at once if the
/// time is after the server started (less memcached's 62 seconds), nothing
/// if before, text and binary alike (memcached 1.6.18 checked by hand).
#[test]
fn flush_all_at_a_past_time() {
    let s = Server::new();
    s.check("set a 0 0 1\r\na\r\n", "STORED\r\n");
    // Before the server started (NOW - 100, less 62 s): nothing.
    s.check(&format!("flush_all {}\r\n", NOW - 200), "OK\r\n");
    s.check("get a\r\n", "VALUE a 0 1\r\na\r\nEND\r\n");
    s.check(&format!("flush_all {}\r\n", NOW - 1), "OK\r\n");
    s.check("get a\r\n", "END\r\n");
    // Stored after it: kept.
    s.check(
        "set a 0 0 1\r\na\r\nget a\r\n",
        "STORED\r\nVALUE a 0 1\r\na\r\nEND\r\n",
    );
    let ctx = SimpleContext {
        now: NOW,
        started: NOW - 100,
    };
    assert_eq!(flush_delay(&ctx, i64::from(NOW) - 150), 0, "within 62 s");
    assert_eq!(
        flush_delay(&ctx, i64::from(NOW) - 170),
        i64::from(NOW) - 170
    );
    assert_eq!(flush_delay(&ctx, i64::from(NOW) + 5), i64::from(NOW) + 5);
    assert_eq!(flush_delay(&ctx, 10), 10);
    assert_eq!(flush_delay(&SimpleContext::at(NOW), 0), 0);
}

#[test]
fn misc_commands() {
    let s = Server::new();
    s.check("version\r\n", &format!("VERSION {DEFAULT_VERSION}\r\n"));
    s.check("verbosity 1\r\n", "OK\r\n");
    s.check("verbosity\r\n", "ERROR\r\n");
    s.check("verbosity noreply\r\n", "");
    s.check("shutdown\r\n", "ERROR: shutdown not enabled\r\n");
    s.check("cache_memlimit 100\r\n", "OK\r\n");
    s.check(
        "cache_memlimit 7\r\n",
        "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
    );
    s.check("cache_memlimit x\r\n", "ERROR\r\n");
    s.check("cache_memlimit 100 noreply\r\n", "");
    s.check("bogus\r\n", "ERROR\r\n");
    s.check("\r\n", "ERROR\r\n");
    s.check("mn\r\n", "MN\r\n");
    // Without a server to stream them, `execute` has no log lines to give.
    s.check("watch fetchers\r\n", "ERROR\r\n");
    let (out, closed) = s.feed(b"quit\r\nversion\r\n");
    assert!(out.is_empty() && closed);
}

#[test]
fn errors_keep_the_stream_in_sync() {
    let s = Server::new();
    s.check(
        "set k 0 0 3\r\nabcde\r\nget k\r\n",
        // memcached skips exactly <bytes> + 2: the empty line left is an
        // unknown command.
        "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n",
    );
    s.check(
        "set k 0 0 3\r\nabc\r\nget k\r\n",
        "STORED\r\nVALUE k 0 3\r\nabc\r\nEND\r\n",
    );
    // A malformed storage line drops the line only, as memcached does: its
    // data block is read as a command.
    s.check(
        "set k x 0 3\r\nabc\r\nget k\r\n",
        "CLIENT_ERROR bad command line format\r\nERROR\r\nVALUE k 0 3\r\nabc\r\nEND\r\n",
    );
    s.check("get\r\nget k\r\n", "ERROR\r\nVALUE k 0 3\r\nabc\r\nEND\r\n");
}

#[test]
fn too_large_values_are_refused_and_swallowed() {
    let mut s = Server::new();
    // Values of up to 10 bytes under one-byte keys.
    s.limits.max_item_size = crate::protocol::item_size(1, 0, 10);
    s.check(
        "set k 0 0 1\r\na\r\nadd j 0 0 1\r\nj\r\n",
        "STORED\r\nSTORED\r\n",
    );
    s.check(
        "set k 0 0 11\r\n01234567890\r\nget k\r\n",
        "SERVER_ERROR object too large for cache\r\nEND\r\n",
    );
    // `add` does not invalidate the old item, `set` does.
    s.check(
        "add j 0 0 11\r\n01234567890\r\nget j\r\n",
        "SERVER_ERROR object too large for cache\r\nVALUE j 0 1\r\nj\r\nEND\r\n",
    );
    s.check("set k 0 0 11 noreply\r\n01234567890\r\nmn\r\n", "MN\r\n");
    s.check(
        "ms j 11 q\r\n01234567890\r\nmg j v\r\n",
        "SERVER_ERROR object too large for cache\r\nEN\r\n",
    );
    // The value need not have arrived: the count says what to discard.
    let e = parse(b"set k 0 0 1000\r\n", &s.limits).unwrap_err();
    assert_eq!(e.consumed(), Some(16 + 1002));
    assert_eq!(s.stats().store_too_large, 4);
}

#[test]
fn line_too_long_closes() {
    let mut s = Server::new();
    s.limits.max_line = 32;
    let (out, closed) = s.feed(&[b'x'; 40]);
    // memcached closes without an answer.
    assert_eq!(out, b"");
    assert!(closed);
}

/// A get answered a piece at a time is, put together, the get's answer,
/// whatever the piece size; each key is counted once (also those an earlier
/// pass counted); a value that changes between pieces is never finished.
#[test]
fn split_gets_make_the_same_answer() {
    let s = Server::new();
    let big = "b".repeat(3000);
    s.run(&format!(
        "set a 1 0 5\r\nhello\r\nset big 2 0 3000\r\n{big}\r\nset e 0 0 0\r\n\r\n"
    ));
    let ctx = SimpleContext {
        now: s.now,
        started: NOW - 100,
    };
    let line = b"gets a nope big e big\r\n";
    let (req, _) = parse(line, &s.limits).unwrap();
    let whole = s.run("gets a nope big e big\r\n");
    let split = |at: GetCursor, piece: usize| {
        let mut out = Vec::new();
        let mut at = at;
        loop {
            let before = out.len();
            match split_get(&req, &s.store, &ctx, &mut out, at, piece) {
                Some(Ok(Some(next))) => at = next,
                Some(Ok(None)) => return String::from_utf8(out).unwrap(),
                other => panic!("{other:?}"),
            }
            // A value line, and at least one byte of the value, beyond.
            assert!(out.len() - before <= piece.max(1) + 64, "{piece}");
        }
    };
    for piece in [1, 2, 7, 100, 2999, 3000, 3100, 1 << 20] {
        let before = s.stats();
        assert_eq!(split(GetCursor::default(), piece), whole, "{piece}");
        let after = s.stats();
        assert_eq!(after.cmd_get - before.cmd_get, 5, "{piece}");
        assert_eq!(after.get_hits - before.get_hits, 4, "{piece}");
        // Keys an earlier pass counted are not counted again.
        let counted = GetCursor {
            counted: 3,
            ..GetCursor::default()
        };
        assert_eq!(split(counted, piece), whole, "{piece}");
        assert_eq!(s.stats().cmd_get - after.cmd_get, 2, "{piece}");
    }
    // The value changes between two pieces: never finished.
    let mut out = Vec::new();
    let at = split_get(&req, &s.store, &ctx, &mut out, GetCursor::default(), 1000)
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(at.key, 2);
    s.run(&format!("set big 2 0 3000\r\n{big}\r\n"));
    assert_eq!(
        split_get(&req, &s.store, &ctx, &mut out, at, 1000),
        Some(Err(ValueChanged))
    );
    assert!(split_get(
        &parse(b"set k 0 0 1\r\nx\r\n", &s.limits).unwrap().0,
        &s.store,
        &ctx,
        &mut out,
        at,
        1000
    )
    .is_none());
}

/// A meta get's answer split the same way: only from the item its value
/// was copied from, reassembled to the same bytes.
#[test]
fn split_meta_gets_make_the_same_answer() {
    let s = Server::new();
    let big = "m".repeat(3000);
    s.run(&format!("set big 5 0 3000\r\n{big}\r\n"));
    let line = b"mg Ymln b v f\r\n";
    let (req, _) = parse(line, &s.limits).unwrap();
    let whole = s.run("mg Ymln b v f\r\n");
    let (value_at, at) = meta_split_start(&req, &s.store, s.now, whole.as_bytes()).unwrap();
    assert_eq!(&whole[..value_at], "VA 3000 f5\r\n");
    for piece in [1, 999, 3000] {
        let mut out = whole.as_bytes()[..value_at].to_vec();
        let mut at = at;
        while !meta_value_piece(&req, &s.store, s.now, &mut at, piece, &mut out).unwrap() {}
        assert_eq!(String::from_utf8(out).unwrap(), whole, "{piece}");
    }
    // Not from another item (the same value, stored again: a new CAS).
    s.run(&format!("set big 5 0 3000\r\n{big}\r\n"));
    let mut at = at;
    assert_eq!(
        meta_value_piece(&req, &s.store, s.now, &mut at, 10, &mut Vec::new()),
        Err(ValueChanged)
    );
    // Nor from an item that no longer holds the bytes answered.
    s.run("set big 5 0 3\r\nnew\r\n");
    assert!(meta_split_start(&req, &s.store, s.now, whole.as_bytes()).is_none());
    // A miss, or not a meta get: nothing to split.
    let miss = parse(b"mg nope v\r\n", &s.limits).unwrap().0;
    assert!(meta_split_start(&miss, &s.store, s.now, b"EN\r\n").is_none());
}

#[test]
fn out_of_memory_for_a_shard() {
    let s = Server {
        store: Store::new(StoreConfig {
            max_bytes: 4096,
            shards: 4,
            evictions: true,
        }),
        limits: Limits::default(),
        now: NOW,
    };
    s.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    let big = "x".repeat(2000);
    s.check(
        &format!("set k 0 0 2000\r\n{big}\r\nget k\r\n"),
        "SERVER_ERROR out of memory storing object\r\nEND\r\n",
    );
    s.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    s.check(&format!("append k 0 0 2000\r\n{big}\r\n"), "NOT_STORED\r\n");
    s.check(
        &format!("ms k 2000\r\n{big}\r\n"),
        "SERVER_ERROR out of memory storing object\r\n",
    );
    s.check("get k\r\n", "END\r\n");
    let st = s.stats();
    assert_eq!(st.store_no_memory, 2);
    // As memcached: a store it could not allocate is neither a set nor an
    // item (the refused append is a set: its item was allocated there).
    assert_eq!((st.cmd_set, st.total_items), (3, 2));
}

// ---- stats ----------------------------------------------------------------

struct HookContext;

impl ExecContext for HookContext {
    fn now(&self) -> Time {
        NOW
    }

    fn version(&self) -> &str {
        "1.6.99"
    }

    fn server_stats(&self) -> ServerStats {
        ServerStats {
            pid: 42,
            uptime: 7,
            rusage_user: Duration::from_micros(1_500_001),
            curr_connections: 3,
            rejected_connections: 5,
            threads: 2,
            ..ServerStats::default()
        }
    }

    fn extra_stats(&self, group: &str, out: &mut Vec<u8>) -> bool {
        match group {
            "" => write_stat(out, "duality_model", "sped"),
            "settings" => write_stat(out, "item_size_max", 1048576),
            "duality" => write_stat(out, "loops", 1),
            _ => return false,
        }
        true
    }
}

fn stats_with(store: &Store, line: &str) -> String {
    let (req, _) = parse(line.as_bytes(), &Limits::default()).unwrap();
    let mut out = Vec::new();
    let _ = execute(&req, store, &HookContext, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn general_stats() {
    let s = Server::new();
    s.run("set a 0 0 1\r\na\r\nget a b\r\n");
    let out = stats_with(&s.store, "stats\r\n");
    assert!(out.starts_with(&format!(
        "STAT pid 42\r\nSTAT uptime 7\r\nSTAT time {NOW}\r\nSTAT version 1.6.99\r\nSTAT pointer_size 64\r\n\
         STAT rusage_user 1.500001\r\nSTAT rusage_system 0.000000\r\n"
    )));
    for line in [
        "STAT curr_connections 3\r\n",
        "STAT rejected_connections 5\r\n",
        "STAT cmd_get 2\r\n",
        "STAT cmd_set 1\r\n",
        "STAT get_hits 1\r\n",
        "STAT get_misses 1\r\n",
        "STAT curr_items 1\r\n",
        "STAT total_items 1\r\n",
        &format!("STAT bytes {}\r\n", 2 + crate::ITEM_OVERHEAD),
        "STAT limit_maxbytes 1048576\r\n",
        "STAT threads 2\r\n",
        "STAT evictions 0\r\n",
    ] {
        assert!(out.contains(line), "{line:?} missing from\n{out}");
    }
    assert!(out.ends_with("STAT duality_model sped\r\nEND\r\n"), "{out}");
    // Every line is a STAT line but the last.
    let lines: Vec<_> = out.split("\r\n").collect();
    assert!(lines[..lines.len() - 2]
        .iter()
        .all(|l| l.starts_with("STAT ") && l.split(' ').count() == 3));
}

#[test]
fn stats_groups() {
    let s = Server::new();
    s.run("set a 0 0 1\r\na\r\n");
    assert_eq!(
        stats_with(&s.store, "stats settings\r\n"),
        "STAT maxbytes 1048576\r\nSTAT evictions on\r\nSTAT cas_enabled yes\r\n\
         STAT flush_enabled yes\r\nSTAT dump_enabled yes\r\nSTAT stat_key_prefix :\r\nSTAT detail_enabled no\r\nSTAT lru_crawler yes\r\n\
         STAT lru_crawler_sleep 100\r\nSTAT lru_crawler_tocrawl 0\r\n\
         STAT item_size_max 1048576\r\nEND\r\n"
    );
    // "a" + "a" + 32 = 34 bytes: class 1 (chunks of 96).
    assert!(stats_with(&s.store, "stats items\r\n").starts_with("STAT items:1:number 1\r\n"));
    let slabs = stats_with(&s.store, "stats slabs\r\n");
    assert!(
        slabs.starts_with(
            "STAT 1:chunk_size 96\r\nSTAT 1:chunks_per_page 10922\r\nSTAT 1:total_pages 1\r\n"
        ),
        "{slabs}"
    );
    assert!(
        slabs.ends_with(&format!(
            "STAT 1:touch_hits 0\r\nSTAT active_slabs 1\r\nSTAT total_malloced {}\r\nEND\r\n",
            s.store.memory()
        )),
        "{slabs}"
    );
    assert_eq!(
        stats_with(&s.store, "stats duality\r\n"),
        "STAT loops 1\r\nEND\r\n"
    );
    assert_eq!(stats_with(&s.store, "stats bogus\r\n"), "ERROR\r\n");
    s.check("stats duality\r\n", "ERROR\r\n");
    s.check("stats sizes\r\n", "STAT sizes_status disabled\r\nEND\r\n");
    s.check("stats reset\r\n", "RESET\r\n");
    assert_eq!(s.stats().cmd_set, 0);
    let out = s.run("stats\r\n");
    assert!(out.contains("STAT pid ") && out.ends_with("STAT crawler_items_checked 0\r\nEND\r\n"));
}

#[test]
fn per_class_items_and_slabs() {
    let s = Server::new();
    // 1 + 10 + 32 = 43 bytes: class 1; 1 + 100 + 32 = 133: class 3 (152).
    s.run(&format!(
        "set a 0 0 10\r\nabcdefghij\r\nset b 0 100 100\r\n{}\r\n",
        "x".repeat(100)
    ));
    s.run("get a\r\nget a\r\ndelete b\r\nincr a 1\r\n");
    let items = parse_stat_lines(&s.run("stats items\r\n"));
    assert_eq!(items["items:1:number"], "1");
    assert_eq!(items["items:1:mem_requested"], "43");
    assert_eq!(items["items:1:hits_to_cold"], "2");
    assert_eq!(items["items:1:age"], "0");
    assert!(
        !items.contains_key("items:3:number"),
        "no items left in class 3"
    );
    let slabs = parse_stat_lines(&s.run("stats slabs\r\n"));
    assert_eq!(slabs["1:get_hits"], "2");
    assert_eq!(slabs["1:incr_hits"], "0", "not a number: no hit");
    assert_eq!(slabs["1:used_chunks"], "1");
    assert_eq!(slabs["1:free_chunks"], "10921");
    assert_eq!(slabs["3:delete_hits"], "1");
    assert_eq!(slabs["3:used_chunks"], "0");
    assert_eq!(slabs["3:cmd_set"], "1");
    assert_eq!(slabs["active_slabs"], "2");
}

/// A cachedump goes in pieces that each look at a bounded number of items
/// (a rare class's dump looks at every item of the store), and the pieces
/// together say what the whole answer says.
#[test]
fn cachedump_goes_in_bounded_pieces() {
    let s = Server::new_sized(64 << 20);
    let n = 40_000;
    let mut sets = String::new();
    for i in 0..n {
        sets += &format!("set k{i:05} 0 0 1 noreply\r\nx\r\n");
    }
    s.run(&sets);
    let dump = |req: &[u8]| -> (Vec<u8>, usize) {
        let Ok((crate::protocol::Request::Stats { args }, _)) = parse(req, &s.limits) else {
            panic!("not a stats request");
        };
        let mut d = Cachedump::start(args).unwrap();
        let (mut out, mut pieces) = (Vec::new(), 1);
        while d.piece(&s.store, s.now, DUMP_PIECE, &mut out) {
            pieces += 1;
        }
        (out, pieces)
    };
    let (empty, pieces) = dump(b"stats cachedump 2 0\r\n");
    assert_eq!(empty, b"END\r\n");
    assert!(pieces >= 3, "{n} items looked at in {pieces} pieces");
    let (all, pieces) = dump(b"stats cachedump 1 0\r\n");
    assert_eq!(all, s.run("stats cachedump 1 0\r\n").into_bytes());
    let text = String::from_utf8(all).unwrap();
    assert_eq!(text.matches("ITEM k").count(), n);
    assert!(pieces >= 3 && text.ends_with("END\r\n"), "{pieces} pieces");
    // Newest first within each shard, as memcached lists its LRU.
    let (first, _) = dump(b"stats cachedump 1 1\r\n");
    let first = String::from_utf8(first).unwrap();
    assert!(
        first.starts_with("ITEM k3") && first.ends_with("END\r\n"),
        "{first}"
    );
}

#[test]
fn stats_detail_and_cachedump() {
    let s = Server::new();
    s.check(
        "stats detail\r\n",
        "CLIENT_ERROR usage: stats detail on|off|dump\r\n",
    );
    s.check(
        "stats detail x\r\n",
        "CLIENT_ERROR usage: stats detail on|off|dump\r\n",
    );
    s.check("stats detail on\r\n", "OK\r\n");
    s.run("set a:1 0 0 1\r\nx\r\nget a:1 a:2 plain\r\ndelete a:1\r\ntouch a:1 0\r\n");
    s.check("stats detail off\r\n", "OK\r\n");
    s.run("get a:1\r\n");
    s.check(
        "stats detail dump\r\n",
        "PREFIX a get 2 hit 1 set 1 del 1\r\nEND\r\n",
    );
    s.run("set k 0 0 2\r\nhi\r\nset e 0 100 1\r\nx\r\n");
    // "k" + "hi" + 32 = 35 bytes and "e" + "x" + 32 = 34: class 1.
    let dump = s.run("stats cachedump 1 0\r\n");
    let mut lines: Vec<&str> = dump.split("\r\n").collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "",
            "END",
            &format!("ITEM e [1 b; {} s]", NOW + 100),
            "ITEM k [2 b; 0 s]"
        ]
    );
    assert_eq!(s.run("stats cachedump 1 1\r\n").matches("ITEM ").count(), 1);
    // A binary key with a line end in it ("a b\r\nEND\r\n", base64) cannot
    // forge the end of the listing.
    s.check("ms YSBiDQpFTkQNCg== 1 b\r\nx\r\n", "HD\r\n");
    let dump = s.run("stats cachedump 1 0\r\n");
    assert!(
        dump.contains("ITEM a%20b%0D%0AEND%0D%0A [1 b; 0 s]\r\n"),
        "{dump}"
    );
    assert_eq!(dump.matches("END").count(), 2, "{dump}");
    assert!(dump.ends_with("]\r\nEND\r\n"), "{dump}");
    // A text key's control bytes are shown as they are, as memcached shows
    // them (a text key holds no space, line feed or NUL).
    s.check("set \x10\x10c\t 0 0 1\r\nx\r\n", "STORED\r\n");
    let dump = s.run("stats cachedump 1 0\r\n");
    assert!(dump.contains("ITEM \x10\x10c\t [1 b; 0 s]\r\n"), "{dump}");
    s.check("stats cachedump 2 0\r\n", "END\r\n");
    s.check("stats cachedump 2\r\n", "CLIENT_ERROR bad command line\r\n");
    s.check(
        "stats cachedump x 1\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
    s.check(
        "stats cachedump 64 1\r\n",
        "CLIENT_ERROR Illegal slab id\r\n",
    );
    s.check("stats reset\r\n", "RESET\r\n");
    s.check("stats detail dump\r\n", "END\r\n");
}

#[test]
fn lru_crawler_commands() {
    let mut s = Server::new();
    s.run("set k 0 0 2\r\nhi\r\nset e 0 10 1\r\nx\r\nset a/b 3 0 1\r\ny\r\nget k\r\n");
    let dump = s.run("lru_crawler metadump all\r\n");
    assert!(dump.ends_with("\nEND\r\n"), "{dump}");
    let mut lines: Vec<&str> = dump.trim_end_matches("END\r\n").lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            format!("key=a%2Fb exp=-1 la={NOW} cas=3 fetch=no cls=1 size=36"),
            format!(
                "key=e exp={} la={NOW} cas=2 fetch=no cls=1 size=34",
                NOW + 10
            ),
            format!("key=k exp=-1 la={NOW} cas=1 fetch=yes cls=1 size=35"),
        ]
    );
    s.check("lru_crawler metadump 3\r\n", "END\r\n");
    s.check(
        "lru_crawler metadump 0\r\n",
        "BADCLASS invalid class id\r\n",
    );
    s.now += 20;
    s.check("lru_crawler crawl 2\r\n", "OK\r\n");
    assert_eq!(s.stats().reclaimed, 0, "class 2 is empty");
    s.check("lru_crawler crawl 1\r\n", "OK\r\n");
    assert_eq!(s.stats().reclaimed, 1);
    let items = parse_stat_lines(&s.run("stats items\r\n"));
    assert_eq!(items["items:1:crawler_reclaimed"], "1");
    assert_eq!(items["items:1:crawler_items_checked"], "3");
    for (req, want) in [
        ("lru_crawler crawl all\r\n", "OK\r\n"),
        ("lru_crawler crawl 1,63\r\n", "OK\r\n"),
        ("lru_crawler crawl 64\r\n", "BADCLASS invalid class id\r\n"),
        ("lru_crawler crawl\r\n", "ERROR\r\n"),
        ("lru_crawler crawl all x\r\n", "ERROR\r\n"),
        ("lru_crawler\r\n", "ERROR\r\n"),
        ("lru_crawler bogus\r\n", "ERROR\r\n"),
        (
            "lru_crawler enable\r\n",
            "ERROR failed to start lru crawler thread\r\n",
        ),
        ("lru_crawler disable\r\n", "OK\r\n"),
        (
            "lru_crawler crawl all\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        (
            "lru_crawler metadump all\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        ("lru_crawler enable\r\n", "OK\r\n"),
        ("lru_crawler sleep 1000000\r\n", "OK\r\n"),
        (
            "lru_crawler sleep 1000001\r\n",
            "CLIENT_ERROR sleep must be one second or less\r\n",
        ),
        (
            "lru_crawler sleep x\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        ("lru_crawler tocrawl 5\r\n", "OK\r\n"),
        (
            "lru_crawler tocrawl -1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        ("lru_crawler tocrawl 1 2\r\n", "ERROR\r\n"),
    ] {
        s.check(req, want);
    }
    let settings = parse_stat_lines(&s.run("stats settings\r\n"));
    assert_eq!(settings["lru_crawler_sleep"], "1000000");
    assert_eq!(settings["lru_crawler_tocrawl"], "5");
}

#[test]
fn memory_limit_lowered_evicts_at_once() {
    let s = Server::new();
    for i in 0..400 {
        s.run(&format!("set k{i} 0 0 1000\r\n{}\r\n", "x".repeat(1000)));
    }
    let before = s.stats();
    assert!(before.bytes > 300_000, "{before:?}");
    assert_eq!(s.store.set_max_bytes(200_000, 2048, s.now), 200_000);
    let after = s.stats();
    assert_eq!(after.limit_maxbytes, 200_000);
    assert!(after.bytes <= 200_000, "{after:?}");
    assert!(after.evictions > before.evictions);
    s.store.check();
    // Never below one largest item per shard and two segments (4 KiB each
    // in shards of 256 KiB).
    assert_eq!(s.store.set_max_bytes(1, 2048, s.now), 4 * (2048 + 2 * 4096));
    s.store.check();
    // Raised again: room for more.
    s.store.set_max_bytes(1 << 20, 2048, s.now);
    s.check(
        &format!("set big 0 0 1000\r\n{}\r\n", "y".repeat(1000)),
        "STORED\r\n",
    );
}

/// `STAT name value` lines → map.
fn parse_stat_lines(out: &str) -> std::collections::HashMap<String, String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ---- meta commands --------------------------------------------------------

#[test]
fn meta_get_basics() {
    let s = Server::new();
    s.check("mg foo v\r\n", "EN\r\n");
    s.check("mg foo v q\r\nmn\r\n", "MN\r\n");
    s.check("mg foo v Oabc k\r\n", "EN Oabc kfoo\r\n");
    s.check("ms foo 3 F5 T100\r\nabc\r\n", "HD\r\n");
    s.check("mg foo\r\n", "HD\r\n");
    s.check("mg foo q\r\n", "HD\r\n");
    s.check("mg foo v\r\n", "VA 3\r\nabc\r\n");
    let cas = s.cas_of("foo");
    s.check(
        "mg foo s v f t c k O123 q\r\n",
        &format!("VA 3 s3 f5 t100 c{cas} kfoo O123\r\nabc\r\n"),
    );
    // Flags come back in the order asked.
    s.check("mg foo O1 t f\r\n", "HD O1 t100 f5\r\n");
    // C means nothing to mg (memcached 1.6.18 ignores it): the value
    // comes, whatever it names.
    s.check(&format!("mg foo v C{cas}\r\n"), "VA 3\r\nabc\r\n");
    s.check(&format!("mg foo v C{}\r\n", cas + 1), "VA 3\r\nabc\r\n");
    let st = s.stats();
    // cmd_meta counts `me` only, as memcached's does.
    assert_eq!((st.get_hits, st.get_misses, st.cmd_meta), (7, 3, 0));
    s.check("me nokey\r\n", "EN\r\n");
    assert_eq!(s.stats().cmd_meta, 1);
}

#[test]
fn meta_get_hit_age_and_bump() {
    let mut s = Server::new();
    s.check("ms foo 1\r\na\r\n", "HD\r\n");
    s.now += 5;
    s.check("mg foo h l u\r\n", "HD h0 l5\r\n");
    s.check("mg foo h l\r\n", "HD h0 l5\r\n");
    s.now += 2;
    s.check("mg foo h l\r\n", "HD h1 l2\r\n");
}

#[test]
fn meta_get_touch_and_tokens() {
    let mut s = Server::new();
    s.check("ms foo 1 T10\r\na\r\n", "HD\r\n");
    s.check("mg foo t T30\r\n", "HD t10\r\n");
    s.check("mg foo T30 t\r\n", "HD t30\r\n");
    s.now += 29;
    s.check("mg foo t\r\n", "HD t1\r\n");
    // R: less TTL left than asked → this client wins the recache; others see Z.
    s.check("mg foo R30\r\n", "HD W\r\n");
    s.check("mg foo R30\r\n", "HD Z\r\n");
    // N: vivify on miss; the creator wins, later readers see Z.
    s.check("mg new N30 v t\r\n", "VA 0 t30 W\r\n\r\n");
    s.check("mg new N30 v\r\n", "VA 0 Z\r\n\r\n");
    s.check("mg foo E5 v\r\n", "VA 1 Z\r\na\r\n");
    let st = s.stats();
    assert_eq!((st.touch_hits, st.cmd_touch), (2, 2));
}

#[test]
fn meta_set_modes() {
    let s = Server::new();
    s.check("ms k 1 MR\r\na\r\n", "NS\r\n");
    s.check("ms k 1 MA\r\na\r\n", "NS\r\n");
    s.check("ms k 1 ME\r\na\r\n", "HD\r\n");
    s.check("ms k 1 ME\r\nb\r\n", "NS\r\n");
    s.check("ms k 1 MR F3\r\nc\r\n", "HD\r\n");
    s.check("ms k 2 MA s\r\n>>\r\n", "HD s3\r\n");
    s.check("ms k 2 MP\r\n<<\r\n", "HD\r\n");
    s.check("mg k v f\r\n", "VA 5 f3\r\n<<c>>\r\n");
    s.check("ms k 1 MS\r\nz\r\n", "HD\r\n");
    s.check("mg k v f\r\n", "VA 1 f0\r\nz\r\n");
    // Append with N vivifies on a miss.
    s.check("ms v 2 MA N30\r\nhi\r\n", "HD\r\n");
    s.check("mg v v t\r\n", "VA 2 t30\r\nhi\r\n");
    s.check(
        "ms q 1 q\r\nx\r\nms q 1 q ME\r\ny\r\nmn\r\n",
        "NS\r\nMN\r\n",
    );
    s.check("ms k 1 q O9 k\r\nx\r\n", "");
    let out = s.run("ms k 1 O9 k c\r\nx\r\n");
    assert_eq!(out, format!("HD O9 kk c{}\r\n", s.cas_of("k")));
}

#[test]
fn meta_set_cas() {
    let s = Server::new();
    s.check("ms k 1 C5\r\na\r\n", "NF\r\n");
    s.check("ms k 1\r\na\r\n", "HD\r\n");
    let cas = s.cas_of("k");
    s.check(&format!("ms k 1 C{}\r\nb\r\n", cas + 1), "EX\r\n");
    let out = s.run(&format!("ms k 1 C{cas} c\r\nb\r\n"));
    assert_eq!(out, format!("HD c{}\r\n", s.cas_of("k")));
    // E assigns the CAS unique.
    s.check("ms k 1 E1000\r\nc\r\n", "HD\r\n");
    s.check("mg k c v\r\n", "VA 1 c1000\r\nc\r\n");
    // Append respects a supplied CAS.
    s.check("ms k 1 MA C1\r\nd\r\n", "EX\r\n");
    s.check("ms k 1 MA C1000\r\nd\r\n", "HD\r\n");
    // I with an older CAS stores the value, marked stale, keeping the TTL.
    s.check("ms k 1 T100 E2000\r\ne\r\n", "HD\r\n");
    s.check("ms k 1 C1500 I T5\r\nf\r\n", "HD\r\n");
    s.check("mg k v t\r\n", "VA 1 t100 X W\r\nf\r\n");
    s.check("ms k 1 C1500\r\ng\r\n", "EX\r\n");
    let st = s.stats();
    assert_eq!((st.cas_misses, st.cas_hits, st.cas_badval), (1, 2, 2));
}

#[test]
fn meta_binary_keys() {
    let s = Server::new();
    // "Zm9v" is base64 for "foo".
    s.check("ms Zm9v 3 b\r\nabc\r\n", "HD\r\n");
    s.check("get foo\r\n", "VALUE foo 0 3\r\nabc\r\nEND\r\n");
    s.check("mg Zm9v b k v\r\n", "VA 3 kZm9v b\r\nabc\r\n");
    // A hit's key comes back as stored, whatever the request's `b`.
    s.check("mg foo k v\r\n", "VA 3 kZm9v b\r\nabc\r\n");
    s.check("ms bar 1\r\nx\r\n", "HD\r\n");
    s.check("mg YmFy b k\r\n", "HD kbar\r\n");
    s.check("ma AAEC b N0 J5 v\r\n", "VA 1\r\n5\r\n");
    s.check(
        "me Zm9v b\r\n",
        &format!(
            "ME Zm9v exp=-1 la=0 cas={} fetch=yes cls=1 size={}\r\n",
            s.cas_of("foo"),
            crate::protocol::item_size(3, 0, 3)
        ),
    );
    s.check("md Zm9v b q\r\nmg foo\r\n", "EN\r\n");
}

#[test]
fn meta_delete() {
    let s = Server::new();
    s.check("md k\r\n", "NF\r\n");
    s.check("md k q\r\n", "NF\r\n");
    s.check("ms k 1 T100\r\na\r\n", "HD\r\n");
    s.check("md k C99999 O7 k\r\n", "EX O7 kk\r\n");
    s.check("md k q\r\nmg k\r\n", "EN\r\n");
    s.check("ms k 1\r\na\r\n", "HD\r\n");
    s.check("md k\r\n", "HD\r\n");
    // I: invalidate — stays readable as stale; the first reader wins.
    s.check("ms k 1 T100\r\na\r\n", "HD\r\n");
    let cas = s.cas_of("k");
    s.check("md k I T30\r\n", "HD\r\n");
    assert_ne!(s.cas_of("k"), cas);
    s.check("mg k v t\r\n", "VA 1 t30 X W\r\na\r\n");
    s.check("mg k v\r\n", "VA 1 Z X\r\na\r\n");
    // Stale until a recache: an incr or decr in between keeps it so (and
    // keeps whether the win token went out), as memcached's in place does.
    for (i, change) in ["ma c\r\n", "incr c 1\r\n", "decr c 1\r\n", "decr c 5\r\n"]
        .into_iter()
        .enumerate()
    {
        s.run("ms c 2\r\n12\r\nmd c I T30\r\n");
        s.run(change);
        let first = s.run("mg c\r\n");
        assert_eq!(first, "HD X W\r\n", "{change:?}");
        if i == 0 {
            s.run(change);
        }
        assert_eq!(s.run("mg c\r\n"), "HD Z X\r\n", "{change:?}");
        s.check("ms c 1\r\n1\r\n", "HD\r\n");
        assert_eq!(s.run("mg c\r\n"), "HD\r\n", "recached after {change:?}");
    }
    // An append, or an incr that outgrows the value, makes a new item, as
    // memcached's do: the stale state goes with the old one (checked
    // against memcached 1.6.18).
    for change in ["append c 0 0 1\r\n9\r\n", "incr c 1\r\n"] {
        s.run("ms c 2\r\n99\r\nmd c I T30\r\n");
        s.run(change);
        assert_eq!(s.run("mg c\r\n"), "HD\r\n", "{change:?}");
    }
    // x: drop the value, keep the item.
    s.check("ms j 3 F9\r\nabc\r\n", "HD\r\n");
    s.check("md j x\r\n", "HD\r\n");
    s.check("mg j s v f\r\n", "VA 0 s0 f0\r\n\r\n");
    let st = s.stats();
    assert_eq!((st.delete_hits, st.delete_misses), (3, 3));
}

#[test]
fn meta_arith() {
    let s = Server::new();
    s.check("ma n\r\n", "NF\r\n");
    s.check("ma n q O1\r\n", "NF O1\r\n");
    s.check("ma n N0 J10\r\n", "HD\r\n");
    s.check("ma n v\r\n", "VA 2\r\n11\r\n");
    s.check("ma n MD D5 v\r\n", "VA 1\r\n6\r\n");
    s.check("ma n M- D100 v\r\n", "VA 1\r\n0\r\n");
    s.check(
        "ma n M+ D18446744073709551615 v\r\n",
        "VA 20\r\n18446744073709551615\r\n",
    );
    s.check("ma n v\r\n", "VA 1\r\n0\r\n");
    s.check("ma n q\r\nmn\r\n", "MN\r\n");
    // `q` hides a hit's answer only: an item `N` makes is answered, as
    // memcached answers it (it hid these).
    s.check("ma q1 N0 v q\r\nmn\r\n", "VA 1\r\n0\r\nMN\r\n");
    s.check("ma q2 N0 q\r\nmn\r\n", "HD\r\nMN\r\n");
    s.check("ma q2 v q\r\nmn\r\n", "MN\r\n");
    s.check("ma n C1\r\n", "EX\r\n");
    let cas = s.cas_of("n");
    let out = s.run(&format!("ma n C{cas} c t\r\n"));
    assert_eq!(out, format!("HD c{} t-1\r\n", s.cas_of("n")));
    s.check("ma n t T30\r\n", "HD t-1\r\n");
    s.check("ma n T40 t\r\n", "HD t40\r\n");
    // A negative T expires the item at once: no time is left (not minus
    // the clock), and the next read misses.
    s.check(
        "ms neg 1\r\na\r\nmg neg T-1 t v\r\n",
        "HD\r\nVA 1 t0\r\na\r\n",
    );
    s.check("mg neg\r\n", "EN\r\n");
    // A counter vivified already expired: 0 left, as above, and not kept.
    s.check("ma gone N-1 J5 t v\r\n", "VA 1 t0\r\n5\r\n");
    s.check("mg gone\r\n", "EN\r\n");
    s.check("ma n E77 c\r\n", "HD c77\r\n");
    s.check(
        "ms s 3\r\nabc\r\nma s\r\n",
        "HD\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    s.check("ma t N30 J1 t v k\r\n", "VA 1 t30 kt\r\n1\r\n");
    let st = s.stats();
    assert_eq!(
        (st.incr_hits, st.incr_misses, st.decr_hits, st.decr_misses),
        (9, 2, 2, 0)
    );
}

#[test]
fn meta_debug() {
    let mut s = Server::new();
    s.check("me k\r\n", "EN\r\n");
    s.check("ms k 3 T100\r\nabc\r\n", "HD\r\n");
    s.now += 4;
    let cas = s.cas_of("k");
    s.check(
        "me k\r\n",
        &format!(
            "ME k exp=96 la=4 cas={cas} fetch=no cls=1 size={}\r\n",
            crate::protocol::item_size(1, 0, 3)
        ),
    );
}

#[test]
fn request_shards() {
    let s = Server::new();
    let shard = |line: &[u8]| request_shard(&parse(line, &Limits::default()).unwrap().0, &s.store);
    assert_eq!(shard(b"get foo\r\n"), Some(s.store.shard_of(b"foo")));
    assert_eq!(shard(b"mg Zm9v b\r\n"), Some(s.store.shard_of(b"foo")));
    assert_eq!(
        shard(b"set foo 0 0 0\r\n\r\n"),
        Some(s.store.shard_of(b"foo"))
    );
    assert_eq!(shard(b"get foo bar\r\n"), None);
    assert_eq!(shard(b"stats\r\n"), None);
}

#[test]
fn white_space_after_a_number_is_taken_as_memcached_takes_it() {
    // Tokens split on spaces only; memcached's strtoul-based parsing takes a
    // tab or CR after a number (a client's stray byte must not turn the data
    // block into a command).
    let s = Server::new();
    s.check("set k 0 0 1\t\r\na\r\n", "STORED\r\n");
    s.check("set n 0\t 0 1\r\r\n5\r\n", "STORED\r\n");
    s.check("incr n 5\t\r\n", "10\r\n");
    s.check("touch k 10\x0b\r\n", "TOUCHED\r\n");
    s.check(
        "get k n\r\n",
        "VALUE k 0 1\r\na\r\nVALUE n 0 2\r\n10\r\nEND\r\n",
    );
    // What follows that white space is ignored, as memcached ignores it;
    // anything else after the digits is refused.
    s.check("incr n 5\tx\r\n", "15\r\n");
    s.check(
        "incr n 5x\r\n",
        "CLIENT_ERROR invalid numeric delta argument\r\n",
    );
}
