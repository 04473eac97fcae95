use super::*;
use proptest::prelude::*;

fn p(buf: &[u8]) -> Result<(Request<'_>, usize), ParseError<'_>> {
    parse(buf, &Limits::default())
}

fn ok(buf: &[u8]) -> Request<'_> {
    match p(buf) {
        Ok((r, n)) => {
            assert_eq!(
                n,
                buf.len(),
                "consumed for {:?}",
                String::from_utf8_lossy(buf)
            );
            r
        }
        Err(e) => panic!("{:?}: {e:?}", String::from_utf8_lossy(buf)),
    }
}

fn client(message: &'static str, consumed: usize) -> ParseError<'static> {
    ParseError::Client {
        message,
        consumed,
        noreply: false,
    }
}

fn err(buf: &[u8]) -> ParseError<'_> {
    p(buf).expect_err("expected an error")
}

fn keys(raw: &str) -> Tokens<'_> {
    Tokens::new(raw.as_bytes())
}

fn flags(raw: &'static str) -> MetaFlags<'static> {
    MetaFlags::parse(raw.as_bytes()).unwrap()
}

fn order(f: &MetaFlags<'_>) -> Vec<u8> {
    f.tokens().map(|t| t[0]).collect()
}

#[test]
fn retrieval() {
    assert_eq!(
        ok(b"get a\r\n"),
        Request::Get {
            keys: keys("a"),
            cas: false
        }
    );
    assert_eq!(
        ok(b"gets a  bb ccc\r\n"),
        Request::Get {
            keys: keys("a bb ccc"),
            cas: true
        }
    );
    assert_eq!(
        ok(b"get a\n"),
        Request::Get {
            keys: keys("a"),
            cas: false
        }
    );
    assert_eq!(
        ok(b"gat 10 a b\r\n"),
        Request::GetAndTouch {
            exptime: 10,
            keys: keys("a b"),
            cas: false
        }
    );
    assert_eq!(
        ok(b"gats -1 a\r\n"),
        Request::GetAndTouch {
            exptime: -1,
            keys: keys("a"),
            cas: true
        }
    );
    // Without a key: ERROR, as memcached answers; `gat <exptime>` alone is
    // a retrieval of no keys (memcached answers END).
    let unknown = |consumed| ParseError::UnknownCommand { consumed };
    assert_eq!(err(b"get\r\n"), unknown(5));
    assert_eq!(err(b"get \r\n"), unknown(6));
    assert_eq!(err(b"gats\r\n"), unknown(6));
    assert_eq!(
        ok(b"gat 10\r\n"),
        Request::GetAndTouch {
            exptime: 10,
            keys: keys(""),
            cas: false
        }
    );
    assert_eq!(err(b"gat x\r\n"), client("invalid exptime argument", 7));
    assert_eq!(err(b"gat x a\r\n"), client("invalid exptime argument", 9));
    let long = format!("get {}\r\n", "k".repeat(251));
    assert_eq!(err(long.as_bytes()), client(BAD_FORMAT, long.len()));
    let max = format!("get {}\r\n", "k".repeat(250));
    assert!(p(max.as_bytes()).is_ok());
    // Control bytes are key bytes, as memcached takes them; a NUL is not.
    assert_eq!(
        p(b"get a\x01b \x10\x7f\t\rc\r\n").unwrap().0,
        Request::Get {
            keys: keys("a\x01b \x10\x7f\t\rc"),
            cas: false
        }
    );
    assert_eq!(err(b"get a\0b\r\n"), client(BAD_FORMAT, 9));
    assert_eq!(err(b"get a \0\r\n"), client(BAD_FORMAT, 9));
}

#[test]
fn storage() {
    assert_eq!(
        ok(b"set k 5 100 3\r\nabc\r\n"),
        Request::Store {
            command: StoreCommand::Set,
            key: b"k",
            flags: 5,
            exptime: 100,
            value: b"abc",
            cas_unique: 0,
            noreply: false,
        }
    );
    assert_eq!(
        ok(b"cas k 0 -1 2 77 noreply\r\n\r\n\r\n"),
        Request::Store {
            command: StoreCommand::Cas,
            key: b"k",
            flags: 0,
            exptime: -1,
            value: b"\r\n",
            cas_unique: 77,
            noreply: true,
        }
    );
    for (name, cmd) in [
        ("add", StoreCommand::Add),
        ("replace", StoreCommand::Replace),
        ("append", StoreCommand::Append),
        ("prepend", StoreCommand::Prepend),
    ] {
        let line = format!("{name} k 1 2 0\r\n\r\n");
        match ok(line.as_bytes()) {
            Request::Store { command, value, .. } => {
                assert_eq!(command, cmd);
                assert_eq!(value, b"");
            }
            r => panic!("{r:?}"),
        }
    }
    // Extra tokens are ignored, as in memcached.
    assert!(matches!(
        ok(b"set k 0 0 1 junk\r\nx\r\n"),
        Request::Store { noreply: false, .. }
    ));
}

#[test]
fn storage_waits_for_the_data_block() {
    assert_eq!(err(b"set k 0 0 3\r\n"), ParseError::Incomplete);
    assert_eq!(err(b"set k 0 0 3\r\nab"), ParseError::Incomplete);
    assert_eq!(err(b"set k 0 0 3\r\nabc"), ParseError::Incomplete);
    assert_eq!(err(b"set k 0 0 3\r\nabc\r"), ParseError::Incomplete);
    assert_eq!(err(b"set k 0 0"), ParseError::Incomplete);
}

#[test]
fn a_store_head_comes_with_its_line() {
    let l = Limits::default();
    let head = parse_value_head(b"cas k 5 -1 10 77 noreply\r\nabc", &l).unwrap();
    assert_eq!(
        head,
        ValueHead::Store(StoreHead {
            command: StoreCommand::Cas,
            key: b"k",
            flags: 5,
            exptime: -1,
            vlen: 10,
            cas_unique: 77,
            noreply: true,
            line_len: 26,
        })
    );
    assert_eq!(head.bad_data_chunk().consumed(), Some(38));
    assert!(!head.edits());
    assert!(parse_value_head(b"set k 0 0 10\r\n0123456789\r\n", &l).is_none());
    assert!(
        parse_value_head(b"set k 0 0 10", &l).is_none(),
        "no line yet"
    );
    assert!(
        parse_value_head(b"set k 0 x 10\r\n", &l).is_none(),
        "bad line"
    );
    assert!(parse_value_head(b"get k\r\n", &l).is_none());
    let big = format!("set k 0 0 {}\r\n", l.max_item_size + 1);
    assert!(parse_value_head(big.as_bytes(), &l).is_none(), "too large");
    let append = parse_value_head(b"append k 0 0 10\r\n", &l).unwrap();
    assert!(append.edits());
}

#[test]
fn a_meta_set_head_comes_with_its_line() {
    let l = Limits::default();
    // A base64 key: stored under its decoded bytes.
    let head = parse_value_head(b"ms a2V5 10 b T30 F5 MR c k\r\nabc", &l).unwrap();
    let ValueHead::MetaSet(h) = head else {
        panic!("{head:?}")
    };
    assert_eq!((h.key, h.vlen, h.line_len), (&b"a2V5"[..], 10, 28));
    assert_eq!((h.flags.ttl(), h.flags.client_flags()), (Some(30), Some(5)));
    assert_eq!(h.flags.mode(), Some(b'R'));
    let mut buf = [0; KEY_MAX_LENGTH];
    assert_eq!(head.key(&mut buf), b"key");
    assert!(!head.edits());
    assert_eq!(head.bad_data_chunk().consumed(), Some(40));
    assert!(matches!(
        head.out_of_memory(),
        ParseError::NoMemory {
            key: b"a2V5",
            key_base64: true,
            invalidate: true,
            noreply: false,
            consumed: 40,
            command: StoreCommand::Replace,
            vlen: 10
        }
    ));
    for edit in ["MA", "MP"] {
        let line = format!("ms k 10 {edit}\r\n");
        assert!(
            parse_value_head(line.as_bytes(), &l).unwrap().edits(),
            "{edit}"
        );
    }
    assert!(parse_value_head(b"ms k 2 T1\r\nab\r\n", &l).is_none());
    assert!(parse_value_head(b"ms k 2 MX\r\n", &l).is_none(), "bad mode");
    assert!(parse_value_head(b"ms k x\r\n", &l).is_none(), "bad length");
    assert!(parse_value_head(b"ms k\r\n", &l).is_none());
    let big = format!("ms k {}\r\n", l.max_item_size + 1);
    assert!(parse_value_head(big.as_bytes(), &l).is_none(), "too large");
}

#[test]
fn storage_errors() {
    // A token count memcached does not take: ERROR.
    let unknown = |consumed| ParseError::UnknownCommand { consumed };
    assert_eq!(err(b"set k 0 0\r\n"), unknown(11));
    assert_eq!(err(b"set\r\n"), unknown(5));
    assert_eq!(err(b"cas k 0 0 1\r\n"), unknown(13));
    assert_eq!(err(b"set k 0 0 1 noreply x\r\n"), unknown(23));
    assert_eq!(err(b"cas k 0 0 1 2 noreply x\r\n"), unknown(25));
    // A bad line: only the line is dropped, as memcached does (the data
    // block is then read as commands).
    assert_eq!(err(b"set k 0 0 -1\r\n"), client(BAD_FORMAT, 14));
    assert_eq!(err(b"set k 0 0 x\r\n"), client(BAD_FORMAT, 13));
    assert_eq!(err(b"set k x 0 3\r\n"), client(BAD_FORMAT, 13));
    assert_eq!(err(b"set k 0 x 3\r\n"), client(BAD_FORMAT, 13));
    assert_eq!(err(b"set k 4294967296 0 3\r\n"), client(BAD_FORMAT, 22));
    assert_eq!(err(b"cas k 0 0 3 x\r\n"), client(BAD_FORMAT, 15));
    let long = format!("set {} 0 0 1\r\n", "k".repeat(251));
    assert_eq!(err(long.as_bytes()), client(BAD_FORMAT, long.len()));
    // noreply (the last token) silences them.
    assert_eq!(
        err(b"set k x 0 3 noreply\r\n"),
        ParseError::Client {
            message: BAD_FORMAT,
            consumed: 21,
            noreply: true
        }
    );
    assert_eq!(
        err(b"set k 0 0 noreply\r\n"),
        ParseError::Client {
            message: BAD_FORMAT,
            consumed: 19,
            noreply: true
        }
    );
    // A wrong terminator after the data block.
    assert_eq!(
        err(b"set k 0 0 3\r\nabcd\r\n"),
        client("bad data chunk", 13 + 5)
    );
    assert_eq!(
        err(b"set k 0 0 3\r\nabc\n\r"),
        client("bad data chunk", 13 + 5)
    );
}

#[test]
fn too_large_is_decided_from_the_line() {
    // memcached's item size: header, key, flags, value and CAS together.
    assert_eq!(item_size(1, 0, 10), 70);
    assert_eq!(item_size(1, 7, 10), 74);
    assert_eq!(item_size(5, 0, 1048512), 1 << 20);
    let limits = Limits {
        max_item_size: item_size(1, 0, 10),
        ..Limits::default()
    };
    assert!(parse(b"set k 0 0 10\r\n0123456789\r\n", &limits).is_ok());
    // Client flags take 4 bytes more.
    assert!(matches!(
        parse(b"set k 7 0 10\r\n", &limits),
        Err(ParseError::TooLarge { .. })
    ));
    assert!(matches!(
        parse(b"ms k 10 F7\r\n", &limits),
        Err(ParseError::TooLarge { .. })
    ));
    // A base64 key counts decoded.
    assert!(parse(b"ms aw== 10 b\r\n0123456789\r\n", &limits).is_ok());
    assert_eq!(
        parse(b"set k 0 0 11\r\n", &limits),
        Err(ParseError::TooLarge {
            key: b"k",
            key_base64: false,
            invalidate: true,
            noreply: false,
            consumed: 14 + 13,
            command: StoreCommand::Set,
            vlen: 11,
        })
    );
    assert_eq!(
        parse(b"add k 0 0 2000000000 noreply\r\n", &limits),
        Err(ParseError::TooLarge {
            key: b"k",
            key_base64: false,
            invalidate: false,
            noreply: true,
            consumed: 30 + 2_000_000_002,
            command: StoreCommand::Add,
            vlen: 2_000_000_000,
        })
    );
    assert_eq!(
        parse(b"ms Zm9v 11 b T0\r\n", &limits),
        Err(ParseError::TooLarge {
            key: b"Zm9v",
            key_base64: true,
            invalidate: true,
            noreply: false,
            consumed: 17 + 13,
            command: StoreCommand::Set,
            vlen: 11,
        })
    );
}

#[test]
fn simple_commands() {
    assert_eq!(
        ok(b"delete k\r\n"),
        Request::Delete {
            key: b"k",
            noreply: false
        }
    );
    assert_eq!(
        ok(b"delete k noreply\r\n"),
        Request::Delete {
            key: b"k",
            noreply: true
        }
    );
    assert_eq!(
        ok(b"delete k 0\r\n"),
        Request::Delete {
            key: b"k",
            noreply: false
        }
    );
    assert_eq!(
        ok(b"delete noreply\r\n"),
        Request::Delete {
            key: b"noreply",
            noreply: false
        }
    );
    // memcached's token counts and its legacy hold time (only 0).
    let unknown = |consumed| ParseError::UnknownCommand { consumed };
    assert_eq!(err(b"delete\r\n"), unknown(8));
    assert_eq!(err(b"delete a b c d\r\n"), unknown(16));
    assert_eq!(
        ok(b"delete k 0 noreply\r\n"),
        Request::Delete {
            key: b"k",
            noreply: true
        }
    );
    assert_eq!(err(b"delete k 5\r\n"), client(DELETE_USAGE, 12));
    assert_eq!(err(b"delete k 0 0\r\n"), client(DELETE_USAGE, 14));
    assert_eq!(
        err(b"delete k 5 noreply\r\n"),
        ParseError::Client {
            message: DELETE_USAGE,
            consumed: 20,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"incr k 18446744073709551615\r\n"),
        Request::Arith {
            op: ArithOp::Incr,
            key: b"k",
            delta: u64::MAX,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"decr k 1 noreply\r\n"),
        Request::Arith {
            op: ArithOp::Decr,
            key: b"k",
            delta: 1,
            noreply: true
        }
    );
    // memcached takes two or three arguments, ERROR otherwise.
    let unknown = |consumed| ParseError::UnknownCommand { consumed };
    assert_eq!(err(b"incr k\r\n"), unknown(8));
    assert_eq!(err(b"decr k 1 noreply x\r\n"), unknown(20));
    assert_eq!(err(b"touch k\r\n"), unknown(9));
    assert_eq!(err(b"touch k 1 2 3\r\n"), unknown(15));
    assert_eq!(err(b"flush_all 0 noreply x\r\n"), unknown(23));
    assert_eq!(
        err(b"incr k -1\r\n"),
        client("invalid numeric delta argument", 11)
    );
    assert_eq!(
        err(b"incr k x noreply\r\n"),
        ParseError::Client {
            message: "invalid numeric delta argument",
            consumed: 18,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"touch k 10\r\n"),
        Request::Touch {
            key: b"k",
            exptime: 10,
            noreply: false
        }
    );
    assert_eq!(
        err(b"touch k x\r\n"),
        client("invalid exptime argument", 11)
    );
    assert_eq!(
        ok(b"flush_all\r\n"),
        Request::FlushAll {
            delay: FlushDelay::Now,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"flush_all 10\r\n"),
        Request::FlushAll {
            delay: FlushDelay::After(10),
            noreply: false
        }
    );
    assert_eq!(
        ok(b"flush_all noreply\r\n"),
        Request::FlushAll {
            delay: FlushDelay::Now,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"flush_all -5 noreply\r\n"),
        Request::FlushAll {
            delay: FlushDelay::After(-5),
            noreply: true
        }
    );
    // Refused by the executor, which counts it first as memcached does.
    assert_eq!(
        ok(b"flush_all x\r\n"),
        Request::FlushAll {
            delay: FlushDelay::Invalid,
            noreply: false
        }
    );
    assert_eq!(ok(b"version\r\n"), Request::Version);
    assert_eq!(ok(b"quit\r\n"), Request::Quit);
    assert_eq!(
        ok(b"verbosity 1\r\n"),
        Request::Verbosity {
            level: 1,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"verbosity 2 noreply\r\n"),
        Request::Verbosity {
            level: 2,
            noreply: true
        }
    );
    assert_eq!(err(b"verbosity\r\n"), unknown(11));
    assert_eq!(err(b"verbosity 1 2 3\r\n"), unknown(17));
    assert_eq!(
        err(b"verbosity noreply\r\n"),
        ParseError::Client {
            message: BAD_FORMAT,
            consumed: 19,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"cache_memlimit 100 noreply\r\n"),
        Request::CacheMemlimit {
            mib: Some(100),
            noreply: true
        }
    );
    assert_eq!(
        ok(b"cache_memlimit x\r\n"),
        Request::CacheMemlimit {
            mib: None,
            noreply: false
        }
    );
    assert_eq!(err(b"cache_memlimit\r\n"), unknown(16));
    assert_eq!(
        ok(b"shutdown graceful\r\n"),
        Request::Shutdown {
            args: keys("graceful")
        }
    );
    // An HTTP request line closes the connection without an answer.
    assert_eq!(err(b"GET / HTTP/1.1\r\n"), ParseError::Http);
    assert_eq!(err(b"GET / HTTP/1.1 x\r\n"), unknown(18));
    assert_eq!(ok(b"stats\r\n"), Request::Stats { args: keys("") });
    assert_eq!(
        ok(b"stats  items x\r\n"),
        Request::Stats {
            args: keys("items x")
        }
    );
}

#[test]
fn unknown_and_malformed_lines() {
    assert_eq!(err(b"foo\r\n"), ParseError::UnknownCommand { consumed: 5 });
    assert_eq!(
        err(b"foo a noreply\r\n"),
        ParseError::UnknownCommand { consumed: 15 }
    );
    // memcached's tokenizer skips spaces before the command.
    assert_eq!(
        p(b"  get a\r\n"),
        Ok((
            Request::Get {
                keys: keys("a"),
                cas: false
            },
            9
        ))
    );
    assert_eq!(
        err(b"GET a\r\n"),
        ParseError::UnknownCommand { consumed: 7 }
    );
    // Short lines are unknown commands, as for memcached.
    for (line, consumed) in [(&b"\r\n"[..], 2), (b"\n", 1), (b"g\r\n", 3), (b"x\n", 2)] {
        assert_eq!(err(line), ParseError::UnknownCommand { consumed });
    }
    assert_eq!(err(b""), ParseError::Incomplete);
}

#[test]
fn line_limits() {
    let limits = Limits {
        max_line: 16,
        max_get_line: 32,
        max_item_size: item_size(1, 0, 50),
    };
    assert_eq!(parse(&[b'x'; 16], &limits), Err(ParseError::Incomplete));
    assert_eq!(parse(&[b'x'; 17], &limits), Err(ParseError::LineTooLong));
    // A newline that has arrived rescues a longer line, as in memcached.
    let mut long = vec![b'x'; 20];
    long.extend_from_slice(b"\r\n");
    assert_eq!(
        parse(&long, &limits),
        Err(ParseError::UnknownCommand { consumed: 22 })
    );
    // Retrieval lines have their own limit.
    let get = b"get aaaaaaaaaa bbbbbbbbbbbb\r\n";
    assert!(get.len() > 17 && get.len() < 32);
    assert!(parse(get, &limits).is_ok());
    assert_eq!(parse(&get[..20], &limits), Err(ParseError::Incomplete));
    let mut huge = b"get ".to_vec();
    huge.extend_from_slice(&[b'a'; 40]);
    assert_eq!(parse(&huge, &limits), Err(ParseError::LineTooLong));
    // The data block is not part of the line.
    assert!(parse(
        b"set k 0 0 50\r\n01234567890123456789012345678901234567890123456789\r\n",
        &limits
    )
    .is_ok());
}

#[test]
fn meta_get_delete_arith() {
    assert_eq!(
        ok(b"mg foo v t\r\n"),
        Request::MetaGet {
            key: b"foo",
            flags: flags("v t")
        }
    );
    match ok(b"mg foo s v Oopaque k q T30 N-1 R5 C9 E10 u h l f c\r\n") {
        Request::MetaGet { key, flags } => {
            assert_eq!(key, b"foo");
            assert_eq!(order(&flags), b"svOkqTNRCEuhlfc");
            assert_eq!(flags.opaque(), Some(&b"opaque"[..]));
            assert_eq!(flags.ttl(), Some(30));
            assert_eq!(flags.vivify(), Some(-1));
            assert_eq!(flags.recache(), Some(5));
            assert_eq!(flags.compare_cas(), Some(9));
            assert_eq!(flags.new_cas(), Some(10));
            assert!(flags.quiet() && flags.has(b'u') && !flags.has(b'b'));
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(
        ok(b"md foo q I T30 x\r\n"),
        Request::MetaDelete {
            key: b"foo",
            flags: flags("q I T30 x")
        }
    );
    match ok(b"ma foo MD D5 N0 J10 v\r\n") {
        Request::MetaArith { flags, .. } => {
            assert_eq!(flags.mode(), Some(b'D'));
            assert_eq!(flags.delta(), Some(5));
            assert_eq!(flags.vivify(), Some(0));
            assert_eq!(flags.initial(), Some(10));
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(ok(b"mn\r\n"), Request::MetaNoop);
    assert_eq!(
        ok(b"me foo\r\n"),
        Request::MetaDebug {
            key: b"foo",
            base64: false
        }
    );
    assert_eq!(
        ok(b"me Zm9v b\r\n"),
        Request::MetaDebug {
            key: b"Zm9v",
            base64: true
        }
    );
    assert_eq!(
        ok(b"mg Zm9v b v\r\n"),
        Request::MetaGet {
            key: b"Zm9v",
            flags: flags("b v")
        }
    );
}

#[test]
fn meta_flags_values() {
    let f = flags("v  T30 Oab  ME P/a L F9");
    assert_eq!(f, flags("v T30 Oab ME P/a L F9"), "spacing does not matter");
    assert_ne!(f, flags("T30 v Oab ME P/a L F9"), "order does");
    assert_eq!(f.ttl(), Some(30));
    assert_eq!(f.opaque(), Some(&b"ab"[..]));
    assert_eq!(f.mode(), Some(b'E'));
    assert_eq!((f.vivify(), f.client_flags()), (None, Some(9)));
    assert!(f.has(b'P') && f.has(b'L') && !f.has(b'q') && !f.has(b'+'));
    let mut out = Vec::new();
    f.encode(&mut out);
    assert_eq!(out, b" v T30 Oab ME P/a L F9");
    assert_eq!(MetaFlags::parse(b"M"), Err("incorrect length for M token"));
    assert_eq!(
        MetaFlags::parse(b"MSS"),
        Err("incorrect length for M token")
    );
    assert_eq!(MetaFlags::parse(b"+"), Err("invalid flag"));
    assert_eq!(MetaFlags::parse(b"\xff"), Err("duplicate flag"));
    assert_eq!(
        MetaFlags::parse(b"b c f h k l q s t u v x I O P L T1 N1"),
        Err("options flags are too long")
    );
    // memcached's order: an unknown or repeated flag at once, else the last
    // bad argument (a bad `F` keeps an earlier message), else a long opaque.
    let long_opaque = format!("O{} Tx", "9".repeat(40));
    let long_opaque: &'static str = Box::leak(long_opaque.into_boxed_str());
    for (raw, want) in [
        ("Tx !", "invalid flag"),
        ("Tx v v", "duplicate flag"),
        ("Tx Ry", "bad token in command line format"),
        ("Tx Dy", "invalid numeric delta value"),
        ("Ty Fx", "bad token in command line format"),
        ("Fx Ty", "bad token in command line format"),
        ("Fx", "bad command line format"),
        (long_opaque, "bad token in command line format"),
        (&long_opaque[..41], "opaque token too long"),
    ] {
        assert_eq!(MetaFlags::parse(raw.as_bytes()).err(), Some(want), "{raw}");
    }
}

#[test]
fn meta_errors() {
    // Without a key: ERROR, as memcached answers (`me`: a bad line).
    for (line, consumed) in [
        (&b"mg\r\n"[..], 4),
        (b"ms \r\n", 5),
        (b"md\r\n", 4),
        (b"ma\r\n", 4),
    ] {
        assert_eq!(err(line), ParseError::UnknownCommand { consumed });
    }
    // `md` reports every flag error as `ma` does.
    assert_eq!(
        err(b"md foo q q\r\n"),
        client("invalid or duplicate flag", 12)
    );
    assert_eq!(
        err(b"md foo Tx\r\n"),
        client("invalid or duplicate flag", 11)
    );
    assert_eq!(
        err(b"md !!!! b\r\n"),
        client("invalid or duplicate flag", 11)
    );
    let long = format!("md {} q\r\n", "k".repeat(251));
    assert_eq!(err(long.as_bytes()), client(BAD_FORMAT, long.len()));
    assert_eq!(err(b"mg foo v v\r\n"), client("duplicate flag", 12));
    assert_eq!(err(b"mg foo Z\r\n"), client("invalid flag", 10));
    assert_eq!(
        err(b"mg foo T\r\n"),
        client("bad token in command line format", 10)
    );
    assert_eq!(
        err(b"mg foo Tx\r\n"),
        client("bad token in command line format", 11)
    );
    assert_eq!(
        err(b"mg foo C-1\r\n"),
        client("bad token in command line format", 12)
    );
    assert_eq!(err(b"mg foo Fx\r\n"), client(BAD_FORMAT, 11));
    let opaque = format!("mg foo O{}\r\n", "o".repeat(32));
    assert_eq!(
        err(opaque.as_bytes()),
        client("opaque token too long", opaque.len())
    );
    let opaque = format!("mg foo O{}\r\n", "o".repeat(31));
    assert!(p(opaque.as_bytes()).is_ok());
    let many = b"mg foo a b c d e f g h i j k l m n o p q r s\r\n";
    assert_eq!(err(many), client("options flags are too long", many.len()));
    assert_eq!(err(b"mg !!!! b\r\n"), client("error decoding key", 11));
    assert_eq!(err(b"mg f\0o v\r\n"), client(BAD_FORMAT, 10));
    assert!(p(b"mg f\x01o v\r\n").is_ok());
    assert_eq!(
        err(b"ma foo Dx\r\n"),
        client("invalid or duplicate flag", 11)
    );
    assert_eq!(
        err(b"ma foo v v\r\n"),
        client("invalid or duplicate flag", 12)
    );
    assert_eq!(
        err(b"ma foo Mx\r\n"),
        client("invalid mode for ma M token", 11)
    );
    assert_eq!(
        err(b"ma foo Jx\r\n"),
        client("invalid or duplicate flag", 11)
    );
    assert_eq!(err(b"me\r\n"), client(BAD_FORMAT, 4));
    assert_eq!(err(b"me !!!! b\r\n"), client(BAD_FORMAT, 11));
    // A bad `ma` key is a bad command line, as for every other command
    // (memcached checks the key's length before the flags).
    let long = format!("ma {}\r\n", "k".repeat(251));
    assert_eq!(err(long.as_bytes()), client(BAD_FORMAT, long.len()));
    let long = format!("ma {} v\r\n", "k".repeat(251));
    assert_eq!(err(long.as_bytes()), client(BAD_FORMAT, long.len()));
    assert_eq!(err(b"ma f\0o\r\n"), client(BAD_FORMAT, 8));
    assert!(p(b"ma f\x01o\r\n").is_ok());
    // A base64 key that does not decode stays a flag error, as in memcached.
    assert_eq!(
        err(b"ma !!!! b\r\n"),
        client("invalid or duplicate flag", 11)
    );
    assert!(p(b"ma Zm9v b\r\n").is_ok());
}

#[test]
fn meta_set() {
    match ok(b"ms foo 3 T10 F5 MA N30 I C7 c k s q\r\nabc\r\n") {
        Request::MetaSet { key, value, flags } => {
            assert_eq!((key, value), (&b"foo"[..], &b"abc"[..]));
            assert_eq!(order(&flags), b"TFMNICcksq");
            assert_eq!(flags.client_flags(), Some(5));
            assert_eq!(flags.mode(), Some(b'A'));
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(err(b"ms foo 3\r\nab"), ParseError::Incomplete);
    assert_eq!(err(b"ms foo\r\n"), client(BAD_FORMAT, 8));
    assert_eq!(err(b"ms foo x\r\n"), client(BAD_FORMAT, 10));
    assert_eq!(err(b"ms foo -1\r\n"), client(BAD_FORMAT, 11));
    // Errors after the length swallow the data block.
    assert_eq!(
        err(b"ms foo 3 MX\r\n"),
        client("invalid mode for ms M token", 13 + 5)
    );
    assert_eq!(err(b"ms foo 3 v v\r\n"), client("duplicate flag", 14 + 5));
    assert_eq!(err(b"ms foo 3\r\nabcde"), client("bad data chunk", 10 + 5));
}

#[test]
fn pipelined_requests() {
    let buf = b"set a 0 0 1\r\nx\r\nget a\r\nmn\r\n";
    let (r1, n1) = p(buf).unwrap();
    assert!(matches!(r1, Request::Store { .. }));
    let (r2, n2) = p(&buf[n1..]).unwrap();
    assert!(matches!(r2, Request::Get { .. }));
    let (r3, n3) = p(&buf[n1 + n2..]).unwrap();
    assert_eq!(r3, Request::MetaNoop);
    assert_eq!(n1 + n2 + n3, buf.len());
}

#[test]
fn error_responses() {
    let cases: [(ParseError<'_>, &[u8]); 6] = [
        (ParseError::Incomplete, b""),
        (ParseError::LineTooLong, b""),
        (ParseError::UnknownCommand { consumed: 1 }, b"ERROR\r\n"),
        (
            client("bad data chunk", 1),
            b"CLIENT_ERROR bad data chunk\r\n",
        ),
        (
            ParseError::TooLarge {
                key: b"k",
                key_base64: false,
                invalidate: true,
                noreply: false,
                consumed: 9,
                command: StoreCommand::Set,
                vlen: 2,
            },
            b"SERVER_ERROR object too large for cache\r\n",
        ),
        (
            ParseError::TooLarge {
                key: b"k",
                key_base64: false,
                invalidate: true,
                noreply: true,
                consumed: 9,
                command: StoreCommand::Set,
                vlen: 2,
            },
            b"",
        ),
    ];
    for (e, want) in cases {
        let mut out = Vec::new();
        e.write_response(&mut out);
        assert_eq!(out, want, "{e:?}");
    }
    assert!(ParseError::LineTooLong.is_fatal());
    assert_eq!(ParseError::LineTooLong.consumed(), None);
    assert_eq!(client("x", 7).consumed(), Some(7));
}

#[test]
fn request_key() {
    assert_eq!(ok(b"get a\r\n").key(), Some(&b"a"[..]));
    assert_eq!(ok(b"get a b\r\n").key(), None);
    assert_eq!(ok(b"stats\r\n").key(), None);
    let r = ok(b"mg Zm9v b\r\n");
    assert_eq!((r.key(), r.key_is_base64()), (Some(&b"Zm9v"[..]), true));
}

// ---- property tests -------------------------------------------------------

/// An owned request, so proptest can generate it; `request()` borrows it.
#[derive(Clone, Debug)]
enum Spec {
    Get {
        keys: Vec<u8>,
        cas: bool,
    },
    Gat {
        exptime: i32,
        keys: Vec<u8>,
        cas: bool,
    },
    Store {
        command: StoreCommand,
        key: Vec<u8>,
        flags: u32,
        exptime: i32,
        value: Vec<u8>,
        cas: u64,
        noreply: bool,
    },
    Delete {
        key: Vec<u8>,
        noreply: bool,
    },
    Arith {
        op: ArithOp,
        key: Vec<u8>,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: Vec<u8>,
        exptime: i32,
        noreply: bool,
    },
    FlushAll {
        delay: Option<i32>,
        noreply: bool,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Stats {
        args: Vec<u8>,
    },
    LruCrawler {
        args: Vec<u8>,
    },
    Lru {
        args: Vec<u8>,
    },
    Watch {
        args: Vec<u8>,
    },
    Quit,
    Meta {
        cmd: u8,
        key: Vec<u8>,
        flags: Vec<u8>,
        value: Vec<u8>,
    },
    MetaNoop,
    MetaDebug {
        key: Vec<u8>,
        base64: bool,
    },
}

impl Spec {
    fn request(&self) -> Request<'_> {
        match self {
            Spec::Get { keys, cas } => Request::Get {
                keys: Tokens::new(keys),
                cas: *cas,
            },
            Spec::Gat { exptime, keys, cas } => Request::GetAndTouch {
                exptime: *exptime,
                keys: Tokens::new(keys),
                cas: *cas,
            },
            Spec::Store {
                command,
                key,
                flags,
                exptime,
                value,
                cas,
                noreply,
            } => Request::Store {
                command: *command,
                key,
                flags: *flags,
                exptime: *exptime,
                value,
                cas_unique: if *command == StoreCommand::Cas {
                    *cas
                } else {
                    0
                },
                noreply: *noreply,
            },
            Spec::Delete { key, noreply } => Request::Delete {
                key,
                noreply: *noreply,
            },
            Spec::Arith {
                op,
                key,
                delta,
                noreply,
            } => Request::Arith {
                op: *op,
                key,
                delta: *delta,
                noreply: *noreply,
            },
            Spec::Touch {
                key,
                exptime,
                noreply,
            } => Request::Touch {
                key,
                exptime: *exptime,
                noreply: *noreply,
            },
            Spec::FlushAll { delay, noreply } => Request::FlushAll {
                delay: delay.map_or(FlushDelay::Now, FlushDelay::After),
                noreply: *noreply,
            },
            Spec::Version => Request::Version,
            Spec::Verbosity { level, noreply } => Request::Verbosity {
                level: *level,
                noreply: *noreply,
            },
            Spec::Stats { args } => Request::Stats {
                args: Tokens::new(args),
            },
            Spec::LruCrawler { args } => Request::LruCrawler {
                args: Tokens::new(args),
            },
            Spec::Lru { args } => Request::Lru {
                args: Tokens::new(args),
            },
            Spec::Watch { args } => Request::Watch {
                args: Tokens::new(args),
            },
            Spec::Quit => Request::Quit,
            Spec::Meta {
                cmd,
                key,
                flags,
                value,
            } => {
                let flags = MetaFlags::parse(flags).expect("generated flags are valid");
                match cmd {
                    b'g' => Request::MetaGet { key, flags },
                    b's' => Request::MetaSet { key, value, flags },
                    b'd' => Request::MetaDelete { key, flags },
                    _ => Request::MetaArith { key, flags },
                }
            }
            Spec::MetaNoop => Request::MetaNoop,
            Spec::MetaDebug { key, base64 } => Request::MetaDebug {
                key,
                base64: *base64,
            },
        }
    }
}

fn key_byte() -> impl Strategy<Value = u8> {
    (0x21u8..=0xff).prop_map(|b| if b == 0x7f { b'~' } else { b })
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(key_byte(), 1..12),
        1 => prop::collection::vec(key_byte(), 1..=KEY_MAX_LENGTH),
    ]
}

fn base64_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..=186).prop_map(|raw| {
        let mut out = Vec::new();
        crate::base64::encode(&raw, &mut out);
        out
    })
}

fn joined(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(key(), n).prop_map(|ks| ks.join(&b' '))
}

fn noreply() -> impl Strategy<Value = bool> {
    any::<bool>()
}

fn store_command() -> impl Strategy<Value = StoreCommand> {
    prop::sample::select(vec![
        StoreCommand::Set,
        StoreCommand::Add,
        StoreCommand::Replace,
        StoreCommand::Append,
        StoreCommand::Prepend,
        StoreCommand::Cas,
    ])
}

/// One valid token for flag `c` of meta command `cmd`.
fn flag_token(c: u8, cmd: u8) -> BoxedStrategy<Vec<u8>> {
    let with = move |arg: Vec<u8>| {
        let mut t = vec![c];
        t.extend(arg);
        t
    };
    match c {
        b'O' => prop::collection::vec(key_byte(), 0..=OPAQUE_MAX_LENGTH - 1)
            .prop_map(with)
            .boxed(),
        b'P' | b'L' => prop::collection::vec(key_byte(), 0..8)
            .prop_map(with)
            .boxed(),
        b'T' | b'N' | b'R' => any::<i32>()
            .prop_map(move |v| with(v.to_string().into_bytes()))
            .boxed(),
        b'C' | b'E' | b'J' | b'D' => any::<u64>()
            .prop_map(move |v| with(v.to_string().into_bytes()))
            .boxed(),
        b'F' => any::<u32>()
            .prop_map(move |v| with(v.to_string().into_bytes()))
            .boxed(),
        b'M' => {
            let modes: &[u8] = match cmd {
                b's' => b"EAPRS",
                b'a' => b"I+D-",
                _ => b"EAPRSI+D-x",
            };
            prop::sample::select(modes.to_vec())
                .prop_map(move |m| vec![c, m])
                .boxed()
        }
        _ => Just(vec![c]).boxed(),
    }
}

fn meta() -> impl Strategy<Value = Spec> {
    let all: Vec<u8> = b"cfhklqstuvxIOPLTNRCEFMJD".to_vec();
    (
        prop::sample::select(b"gsda".to_vec()),
        any::<bool>(),
        prop::sample::subsequence(all, 0..=14),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_flat_map(|(cmd, b64, mut chars, value)| {
            if b64 {
                chars.push(b'b');
            }
            let tokens: Vec<_> = chars.iter().map(|&c| flag_token(c, cmd)).collect();
            let key = if b64 {
                base64_key().boxed()
            } else {
                key().boxed()
            };
            (Just(cmd), key, tokens.prop_shuffle(), Just(value))
        })
        .prop_map(|(cmd, key, flags, value)| Spec::Meta {
            cmd,
            key,
            flags: flags.join(&b' '),
            value,
        })
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        1 => (joined(1..6), any::<bool>()).prop_map(|(keys, cas)| Spec::Get { keys, cas }),
        1 => (any::<i32>(), joined(1..4), any::<bool>()).prop_map(|(exptime, keys, cas)| Spec::Gat { exptime, keys, cas }),
        1 => (
            store_command(),
            key(),
            any::<u32>(),
            any::<i32>(),
            prop::collection::vec(any::<u8>(), 0..100),
            any::<u64>(),
            noreply()
        )
            .prop_map(|(command, key, flags, exptime, value, cas, noreply)| Spec::Store {
                command,
                key,
                flags,
                exptime,
                value,
                cas,
                noreply
            }),
        1 => (key(), noreply()).prop_map(|(key, noreply)| Spec::Delete { key, noreply }),
        1 => (prop::sample::select(vec![ArithOp::Incr, ArithOp::Decr]), key(), any::<u64>(), noreply())
            .prop_map(|(op, key, delta, noreply)| Spec::Arith { op, key, delta, noreply }),
        1 => (key(), any::<i32>(), noreply()).prop_map(|(key, exptime, noreply)| Spec::Touch { key, exptime, noreply }),
        1 => (any::<Option<i32>>(), noreply()).prop_map(|(delay, noreply)| Spec::FlushAll { delay, noreply }),
        1 => Just(Spec::Version),
        1 => (any::<u32>(), noreply()).prop_map(|(level, noreply)| Spec::Verbosity { level, noreply }),
        1 => joined(0..4).prop_map(|args| Spec::Stats { args }),
        1 => joined(0..3).prop_map(|args| Spec::LruCrawler { args }),
        1 => joined(0..5).prop_map(|args| Spec::Lru { args }),
        1 => joined(0..3).prop_map(|args| Spec::Watch { args }),
        1 => Just(Spec::Quit),
        4 => meta(),
        1 => Just(Spec::MetaNoop),
        1 => prop_oneof![key().prop_map(|k| (k, false)), base64_key().prop_map(|k| (k, true))]
            .prop_map(|(key, base64)| Spec::MetaDebug { key, base64 }),
    ]
}

/// A storage command line with arbitrary argument tokens (some numbers,
/// some not, keys up to 300 bytes) and a data block that follows it.
fn storage_line() -> impl Strategy<Value = (StoreCommand, Vec<Vec<u8>>, Vec<u8>)> {
    let token = prop_oneof![
        3 => any::<u32>().prop_map(|n| n.to_string().into_bytes()),
        1 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        1 => Just(b"noreply".to_vec()),
        1 => prop::collection::vec(key_byte(), 1..300),
    ];
    (
        store_command(),
        prop::collection::vec(token, 0..8),
        prop::collection::vec(any::<u8>(), 0..16),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The memchr tokenizer and key check say what the byte-at-a-time
    /// definitions say (tokens: the non-empty runs between spaces; a key:
    /// 1..=250 bytes, none a space, a line feed or a NUL), on bytes rich
    /// in spaces, line feeds and NULs, long and short.
    #[test]
    fn tokens_and_keys_match_their_definitions(
        raw in proptest::collection::vec(
            prop_oneof![Just(b' '), Just(b'\n'), Just(0u8), Just(b'k'), any::<u8>()],
            0..300,
        )
    ) {
        let want: Vec<&[u8]> = raw.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect();
        let got: Vec<&[u8]> = Tokens::new(&raw).iter().collect();
        prop_assert_eq!(got, want);
        let key_ok = !raw.is_empty()
            && raw.len() <= KEY_MAX_LENGTH
            && raw.iter().all(|&b| b != b' ' && b != b'\n' && b != 0);
        prop_assert_eq!(valid_key(&raw), key_ok);
    }

    /// As memcached: a storage line with a token count other than its
    /// arguments (+1) is an unknown command, and any error found on the line
    /// drops the line alone; only a value refused for its size skips the
    /// data block.
    #[test]
    fn storage_line_errors_drop_the_line_only((cmd, args, block) in storage_line()) {
        let mut buf = cmd.name().as_bytes().to_vec();
        for a in &args {
            buf.push(b' ');
            buf.extend_from_slice(a);
        }
        buf.extend_from_slice(b"\r\n");
        let line_len = buf.len();
        buf.extend_from_slice(&block);
        let min = if cmd == StoreCommand::Cas { 5 } else { 4 };
        match p(&buf) {
            Err(ParseError::UnknownCommand { consumed }) => {
                prop_assert!(args.len() != min && args.len() != min + 1);
                prop_assert_eq!(consumed, line_len);
            }
            Err(ParseError::Client { message: BAD_FORMAT, consumed, noreply }) => {
                prop_assert_eq!(consumed, line_len);
                prop_assert_eq!(noreply, args.last().is_some_and(|a| a == b"noreply"));
            }
            Err(e @ (ParseError::TooLarge { .. } | ParseError::Client { .. })) => {
                // Too large or a bad data chunk: the line and the block.
                prop_assert!(e.consumed().unwrap() > line_len);
            }
            Err(ParseError::Incomplete) | Ok(_) => {}
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
    }

    /// encode → parse gives the same request and consumes all of it.
    #[test]
    fn round_trip(spec in spec()) {
        let req = spec.request();
        let mut buf = Vec::new();
        req.encode(&mut buf);
        let (back, used) = p(&buf).map_err(|e| TestCaseError::fail(format!("{e:?} for {:?}", String::from_utf8_lossy(&buf))))?;
        prop_assert_eq!(back, req);
        prop_assert_eq!(used, buf.len());
    }

    /// Every proper prefix of a request is Incomplete; the whole parses; a
    /// request after it parses from where the first stopped.
    #[test]
    fn any_split_point(spec in spec(), next in spec()) {
        let req = spec.request();
        let mut buf = Vec::new();
        req.encode(&mut buf);
        let first = buf.len();
        for k in 0..first {
            prop_assert_eq!(p(&buf[..k]), Err(ParseError::Incomplete), "prefix {}", k);
        }
        next.request().encode(&mut buf);
        let (r, used) = p(&buf).unwrap();
        prop_assert_eq!(r, req);
        prop_assert_eq!(used, first);
        let (r2, used2) = p(&buf[used..]).unwrap();
        prop_assert_eq!(r2, next.request());
        prop_assert_eq!(used + used2, buf.len());
    }

    /// A storage line whose block is still coming has the head its whole
    /// request has (`parse` says `Incomplete` meanwhile); once the block is
    /// all there, or for any other request, there is no head.
    #[test]
    fn a_store_head_is_the_whole_requests_line(spec in spec(), cut in any::<prop::sample::Index>()) {
        let req = spec.request();
        let mut buf = Vec::new();
        req.encode(&mut buf);
        let limits = Limits::default();
        prop_assert_eq!(parse_value_head(&buf, &limits), None);
        let Some(head) = (1..buf.len()).find_map(|k| parse_value_head(&buf[..k], &limits)) else {
            prop_assert!(
                !matches!(req, Request::Store { .. } | Request::MetaSet { .. }),
                "no head for {:?}",
                req
            );
            return Ok(());
        };
        let (Request::Store { value, .. } | Request::MetaSet { value, .. }) = req else {
            return Err(TestCaseError::fail(format!("a head for {req:?}")));
        };
        prop_assert_eq!(head.request(value), req);
        prop_assert_eq!(head.line_len() + head.vlen() + 2, buf.len());
        let k = head.line_len() + cut.index(buf.len() - head.line_len());
        prop_assert_eq!(parse_value_head(&buf[..k], &limits), Some(head));
        prop_assert_eq!(p(&buf[..k]), Err(ParseError::Incomplete));
    }

    /// Arbitrary bytes never panic; what parses re-encodes to an equal request.
    #[test]
    fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        check_consuming(&bytes)?;
    }

    /// Valid requests with one byte changed, or text-like noise, never panic.
    #[test]
    fn mutations_never_panic(spec in spec(), pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut buf = Vec::new();
        spec.request().encode(&mut buf);
        let i = pos.index(buf.len());
        buf[i] = byte;
        check_consuming(&buf)?;
    }

    #[test]
    fn token_soup_never_panics(words in prop::collection::vec(prop::sample::select(vec![
        &b"get"[..], b"set", b"cas", b"mg", b"ms", b"ma", b"md", b"me", b"mn", b"noreply", b"0", b"1",
        b"-1", b"99999999999", b"k", b"v", b"b", b"q", b"T1", b"MA", b"Zm9v", b"\r\n", b"\n", b" ", b"\r",
    ]), 0..30)) {
        check_consuming(&words.concat())?;
    }
}

/// Parses `bytes` repeatedly, skipping what each result says, and checks that
/// every parsed request survives encode → parse.
fn check_consuming(mut bytes: &[u8]) -> Result<(), TestCaseError> {
    let limits = Limits {
        max_line: 128,
        max_get_line: 256,
        max_item_size: 64,
    };
    loop {
        match parse(bytes, &limits) {
            Ok((req, used)) => {
                prop_assert!(used > 0 && used <= bytes.len());
                let mut enc = Vec::new();
                req.encode(&mut enc);
                let big = Limits {
                    max_line: 1 << 20,
                    max_get_line: 1 << 20,
                    max_item_size: 1 << 20,
                };
                let (again, n) =
                    parse(&enc, &big).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                prop_assert_eq!(again, req);
                prop_assert_eq!(n, enc.len());
                bytes = &bytes[used..];
            }
            Err(ParseError::Incomplete) | Err(ParseError::LineTooLong) => return Ok(()),
            Err(e) => {
                let used = e.consumed().unwrap();
                prop_assert!(used > 0);
                if used >= bytes.len() {
                    return Ok(());
                }
                bytes = &bytes[used..];
            }
        }
    }
}

#[test]
fn requests_are_small() {
    // Requests are returned by value through the parser; keep them cheap to move.
    let size = std::mem::size_of::<Request<'_>>();
    assert!(size <= 128, "Request is {size} bytes");
    assert!(std::mem::size_of::<ParseError<'_>>() <= 40);
}

#[test]
fn the_request_ahead_is_its_first_key_and_its_length() {
    let ahead =
        |input: &[u8]| request_ahead(false, input).map(|a| (a.key.map(<[u8]>::to_vec), a.len));
    let key = |k: &str, len: usize| Some((Some(k.as_bytes().to_vec()), len));
    assert_eq!(ahead(b"get k1\r\n"), key("k1", 8));
    assert_eq!(ahead(b"gets k1 k2\r\nget"), key("k1", 12));
    assert_eq!(ahead(b"mg k1 v t\r\n"), key("k1", 11));
    assert_eq!(ahead(b"get k1\n"), key("k1", 7));
    assert_eq!(
        ahead(b"  get  k1 \r\n"),
        key("k1", 12),
        "spaces as the parser takes them"
    );
    assert_eq!(ahead(b"gat 10 k1 k2\r\n"), key("k1", 14));
    assert_eq!(ahead(b"delete k1 noreply\r\n"), key("k1", 19));
    assert_eq!(ahead(b"incr k1 5\r\n"), key("k1", 11));
    assert_eq!(ahead(b"touch k1 5\r\n"), key("k1", 12));
    assert_eq!(ahead(b"ma k1 D5\r\nmd k2 q\r\n"), key("k1", 10));
    // A data block: the line's declared length and its `\r\n`.
    assert_eq!(ahead(b"set k1 0 0 3\r\nabc\r\nget"), key("k1", 19));
    assert_eq!(ahead(b"cas k1 0 0 3 77 noreply\r\nabc\r\n"), key("k1", 30));
    assert_eq!(ahead(b"ms k1 3 T0 F5\r\nabc\r\n"), key("k1", 20));
    assert_eq!(ahead(b"set k1 0 0 3\r\nabc\r"), None, "its data in part");
    assert_eq!(
        ahead(b"set k1 0 0 -1\r\n\r\n"),
        None,
        "a length the parser refuses"
    );
    assert_eq!(ahead(b"set k1 0 0 99999999999\r\n"), None);
    assert_eq!(
        ahead(b"set k1 0 0\r\nget"),
        key("k1", 12),
        "no length: an error line"
    );
    // Nothing to hint, but a line to step over.
    assert_eq!(ahead(b"mn\r\n"), Some((None, 4)));
    assert_eq!(ahead(b"stats items\r\n"), Some((None, 13)));
    assert_eq!(ahead(b"GET k1\r\n"), Some((None, 8)));
    assert_eq!(ahead(b"get \r\n"), Some((None, 6)));
    assert_eq!(ahead(b"\r\n"), Some((None, 2)));
    // Not ended, or ended too far on.
    assert_eq!(ahead(b"get k1"), None);
    assert_eq!(ahead(b""), None);
    let far = [&b"get k1 "[..], &[b'k'; LINE_AHEAD_MAX], b"\r\n"].concat();
    assert_eq!(ahead(&far), None, "a line ending past LINE_AHEAD_MAX");
    let long = [&b"get "[..], &[b'k'; KEY_MAX_LENGTH + 1], b"\r\n"].concat();
    assert_eq!(
        ahead(&long),
        Some((None, long.len())),
        "a key past the longest"
    );
    let longest = [&b"get "[..], &[b'k'; KEY_MAX_LENGTH], b"\r\n"].concat();
    assert_eq!(
        request_ahead(false, &longest)
            .and_then(|a| a.key)
            .map(<[u8]>::len),
        Some(KEY_MAX_LENGTH)
    );

    let frame = |op: Opcode, key: &[u8], extras: Extras, value: &[u8]| {
        let mut r = BinRequest::new(op);
        r.key = key;
        r.extras = extras;
        r.value = value;
        let mut buf = Vec::new();
        r.encode(&mut buf);
        buf
    };
    let stored = Extras::Store {
        flags: 0,
        exptime: 0,
    };
    for (op, extras, value) in [
        (Opcode::Get, Extras::None, &b""[..]),
        (Opcode::GetKQ, Extras::None, b""),
        (Opcode::SetQ, stored, b"value"),
        (Opcode::Append, Extras::None, b"more"),
        (Opcode::Touch, Extras::Expiry(5), b""),
    ] {
        let f = frame(op, b"key", extras, value);
        let want = Ahead {
            key: Some(&b"key"[..]),
            len: f.len(),
        };
        assert_eq!(request_ahead(true, &f), Some(want), "{op:?}");
        assert_eq!(
            request_ahead(true, &f[..f.len() - 1]),
            None,
            "{op:?}: not all here"
        );
        assert_eq!(request_ahead(false, &f), None, "{op:?}: not text");
    }
    let noop = frame(Opcode::Noop, b"", Extras::None, b"");
    assert_eq!(
        request_ahead(true, &noop),
        Some(Ahead { key: None, len: 24 })
    );
    let stat = frame(Opcode::Stat, b"items", Extras::None, b"");
    assert_eq!(
        request_ahead(true, &stat).map(|a| a.key),
        Some(None),
        "a key that names no item"
    );
    let mut bad = frame(Opcode::Get, b"key", Extras::None, b"");
    bad[0] = 0x81;
    assert_eq!(request_ahead(true, &bad), None, "a response's magic");
    let mut huge = bad.clone();
    huge[0] = binary::REQUEST_MAGIC;
    huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(request_ahead(true, &huge), None, "a body still to come");
}

#[test]
fn keys_ahead_hints_the_keys_of_the_requests_in_a_row() {
    let ahead = |binary: bool, input: &[u8], max: usize| {
        let mut keys = Vec::new();
        let n = keys_ahead(binary, input, max, |k| keys.push(k.to_vec()));
        assert_eq!(n, keys.len());
        keys
    };
    let k = |s: &str| s.as_bytes().to_vec();
    let text =
        b"get a\r\ngets b c\r\nmn\r\nset x 0 0 1\r\nz\r\nmg d v\r\nget e\r\nset y 0 0 9\r\nzz";
    assert_eq!(
        ahead(false, text, 8),
        [k("a"), k("b"), k("x"), k("d"), k("e")],
        "over the noop and the set's data, up to a set whose data is in part"
    );
    assert_eq!(
        ahead(false, text, 3),
        [k("a"), k("b")],
        "at most max requests, the noop among them"
    );
    assert_eq!(
        ahead(false, b"get a\r\nget b", 8),
        [k("a")],
        "a line not ended"
    );
    let mut bin = Vec::new();
    for key in [&b"k1"[..], b"k2", b"k3"] {
        let mut r = BinRequest::new(Opcode::GetKQ);
        r.key = key;
        r.encode(&mut bin);
    }
    BinRequest::new(Opcode::Noop).encode(&mut bin);
    let mut set = BinRequest::new(Opcode::SetQ);
    set.key = b"k4";
    set.value = b"v";
    set.extras = Extras::Store {
        flags: 0,
        exptime: 0,
    };
    set.encode(&mut bin);
    assert_eq!(
        ahead(true, &bin, 8),
        [k("k1"), k("k2"), k("k3"), k("k4")],
        "over the noop"
    );
    assert_eq!(
        ahead(true, &bin[..bin.len() - 1], 8),
        [k("k1"), k("k2"), k("k3")],
        "a frame in part"
    );
    assert!(ahead(false, &bin, 8).is_empty() && ahead(true, text, 8).is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// On any request the parser reads, the look-ahead finds its first key
    /// (a meta key as sent) and its length; on any bytes neither it nor
    /// `keys_ahead` panics, names more than the longest key or steps past
    /// the input.
    #[test]
    fn the_request_ahead_agrees_with_the_parser(spec in spec(), junk in prop::collection::vec(any::<u8>(), 0..300)) {
        let req = spec.request();
        let mut buf = Vec::new();
        req.encode(&mut buf);
        let key = match req {
            Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } => keys.iter().next(),
            _ => req.key(),
        };
        prop_assert_eq!(request_ahead(false, &buf), Some(Ahead { key, len: buf.len() }));
        for binary in [false, true] {
            if let Some(a) = request_ahead(binary, &junk) {
                prop_assert!(a.len <= junk.len() && a.len > 0);
                prop_assert!(a.key.is_none_or(|k| !k.is_empty() && k.len() <= KEY_MAX_LENGTH));
            }
            let mut hinted = 0;
            let n = keys_ahead(binary, &junk, 4, |k| {
                hinted += 1;
                assert!(!k.is_empty() && k.len() <= KEY_MAX_LENGTH);
            });
            prop_assert!(n == hinted && n <= 4);
        }
    }
}
