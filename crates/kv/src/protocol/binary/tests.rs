use super::*;
use proptest::prelude::*;

fn limits() -> Limits {
    Limits {
        max_item_size: 1024,
        ..Limits::default()
    }
}

fn enc(r: &BinRequest<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    r.encode(&mut out);
    out
}

/// A header with arbitrary lengths and no body.
fn header(op: u8, key_len: u16, extras_len: u8, body_len: u32, opaque: u32) -> Vec<u8> {
    let mut h = vec![REQUEST_MAGIC, op];
    h.extend_from_slice(&key_len.to_be_bytes());
    h.push(extras_len);
    h.extend_from_slice(&[0, 0, 0]);
    h.extend_from_slice(&body_len.to_be_bytes());
    h.extend_from_slice(&opaque.to_be_bytes());
    h.extend_from_slice(&[0; 8]);
    h
}

#[test]
fn a_get_parses_with_every_header_field() {
    let r = BinRequest {
        opaque: 0xdead_beef,
        cas: 0x0102_0304_0506_0708,
        data_type: 0,
        vbucket: 7,
        key: b"key",
        ..BinRequest::new(Opcode::GetK)
    };
    let bytes = enc(&r);
    assert_eq!(bytes.len(), 27);
    assert_eq!(
        &bytes[..24],
        &[
            0x80, 0x0c, 0, 3, 0, 0, 0, 7, 0, 0, 0, 3, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7,
            8
        ]
    );
    assert_eq!(parse_binary(&bytes, &limits()), Ok((r, 27)));
}

#[test]
fn a_set_carries_flags_exptime_key_and_value() {
    let r = BinRequest {
        extras: Extras::Store {
            flags: 0xcafe,
            exptime: 60,
        },
        key: b"k",
        value: b"hello",
        ..BinRequest::new(Opcode::SetQ)
    };
    let bytes = enc(&r);
    assert_eq!(&bytes[24..32], &[0, 0, 0xca, 0xfe, 0, 0, 0, 60]);
    let (got, n) = parse_binary(&bytes, &limits()).unwrap();
    assert_eq!((got, n), (r, bytes.len()));
    assert_eq!(got.value, b"hello");
}

#[test]
fn a_store_head_comes_with_its_key() {
    let r = BinRequest {
        extras: Extras::Store {
            flags: 7,
            exptime: 60,
        },
        key: b"key",
        value: &[b'v'; 100],
        opaque: 9,
        ..BinRequest::new(Opcode::ReplaceQ)
    };
    let bytes = enc(&r);
    let head_len = 24 + 8 + 3;
    for cut in head_len..bytes.len() {
        let head = parse_binary_head(&bytes[..cut], &limits()).unwrap();
        assert_eq!((head.head_len, head.vlen), (head_len, 100));
        assert_eq!(
            BinRequest {
                value: r.value,
                ..head.request
            },
            r
        );
    }
    let refused = parse_binary_head(&bytes[..head_len], &limits()).unwrap();
    assert!(matches!(
        refused.out_of_memory(),
        BinError::NoMemory {
            opcode: Opcode::ReplaceQ,
            opaque: 9,
            key: b"key",
            consumed: 135
        }
    ));
    // Not yet the key, the whole request, or not a store.
    assert_eq!(parse_binary_head(&bytes[..head_len - 1], &limits()), None);
    assert_eq!(parse_binary_head(&bytes, &limits()), None);
    let append = enc(&BinRequest {
        extras: Extras::None,
        ..BinRequest::new(Opcode::Append)
    });
    assert_eq!(parse_binary_head(&append[..24], &limits()), None);
    let mut big = r;
    let huge = vec![0; 2000];
    big.value = &huge;
    assert_eq!(
        parse_binary_head(&enc(&big)[..head_len], &limits()),
        None,
        "too large"
    );
}

#[test]
fn every_prefix_is_incomplete_and_says_what_it_needs() {
    let r = BinRequest {
        extras: Extras::Arith {
            delta: 1,
            initial: 2,
            exptime: 3,
        },
        key: b"counter",
        ..BinRequest::new(Opcode::Increment)
    };
    let bytes = enc(&r);
    for i in 0..bytes.len() {
        let need = if i < HEADER_LEN {
            HEADER_LEN
        } else {
            bytes.len()
        };
        assert_eq!(
            parse_binary(&bytes[..i], &limits()),
            Err(BinError::Incomplete { need }),
            "prefix {i}"
        );
    }
    // Pipelined: the first request only.
    let mut two = bytes.clone();
    two.extend_from_slice(&enc(&BinRequest::new(Opcode::Noop)));
    assert_eq!(parse_binary(&two, &limits()), Ok((r, bytes.len())));
}

#[test]
fn a_bad_magic_closes() {
    let mut b = header(0x0a, 0, 0, 0, 0);
    b[0] = 0x81;
    assert_eq!(parse_binary(&b, &limits()), Err(BinError::BadMagic));
    assert!(BinError::BadMagic.is_fatal());
}

#[test]
fn lengths_that_contradict_each_other_are_an_unknown_command_and_close() {
    let h = header(0x00, 5, 0, 1, 9);
    let e = parse_binary(&h, &limits()).unwrap_err();
    assert_eq!(
        e,
        BinError::BadLengths {
            opcode: 0,
            opaque: 9
        }
    );
    assert!(e.is_fatal());
    let mut out = Vec::new();
    e.write_response(&mut out);
    assert_eq!(&out[..8], &[0x81, 0, 0, 0, 0, 0, 0, 0x81]);
    assert_eq!(&out[24..], b"Unknown command");
    // Extras + key beyond the body too.
    assert!(matches!(
        parse_binary(&header(0x01, 1, 8, 8, 0), &limits()),
        Err(BinError::BadLengths { .. })
    ));
}

#[test]
fn a_key_over_250_bytes_is_invalid_from_the_header() {
    let h = header(0x00, 251, 0, 251, 3);
    let e = parse_binary(&h, &limits()).unwrap_err();
    assert_eq!(
        e,
        BinError::Invalid {
            opcode: 0,
            opaque: 3
        }
    );
    assert!(e.is_fatal());
    // Even for an unknown opcode (memcached checks the key first).
    assert!(matches!(
        parse_binary(&header(0x40, 251, 0, 251, 0), &limits()),
        Err(BinError::Invalid { .. })
    ));
    // 250 is fine.
    let key = [b'a'; 250];
    let r = BinRequest {
        key: &key,
        ..BinRequest::new(Opcode::Get)
    };
    assert!(parse_binary(&enc(&r), &limits()).is_ok());
}

#[test]
fn extras_key_and_body_lengths_are_checked_per_opcode() {
    use Opcode::*;
    // (opcode, key length, extras length, body length, valid?)
    let cases: &[(Opcode, u16, u8, u32, bool)] = &[
        (Get, 1, 0, 1, true),
        (Get, 0, 0, 0, false),
        (Get, 1, 4, 5, false),
        (Get, 1, 0, 2, false),
        (Set, 1, 8, 9, true),
        (Set, 1, 8, 100, true),
        (Set, 1, 4, 5, false),
        (Set, 0, 8, 8, false),
        (AddQ, 1, 0, 1, false),
        (Delete, 1, 0, 1, true),
        (Delete, 1, 0, 2, false),
        (Increment, 1, 20, 21, true),
        (Increment, 1, 8, 9, false),
        (DecrementQ, 1, 20, 22, false),
        (Quit, 0, 0, 0, true),
        (Quit, 0, 0, 1, false),
        (Noop, 1, 0, 1, false),
        (Version, 0, 0, 1, false),
        (Flush, 0, 0, 0, true),
        (Flush, 0, 4, 4, true),
        (FlushQ, 0, 2, 2, false),
        (Flush, 1, 4, 5, false),
        (Append, 1, 0, 5, true),
        (Prepend, 1, 8, 9, false),
        (Prepend, 0, 0, 3, false),
        (Stat, 0, 0, 0, true),
        (Stat, 5, 0, 5, true),
        (Stat, 0, 4, 4, false),
        (Stat, 5, 0, 8, false),
        (Verbosity, 0, 4, 4, true),
        (Verbosity, 0, 0, 0, false),
        (Touch, 1, 4, 5, true),
        (Touch, 0, 4, 4, false),
        (Gat, 1, 0, 1, false),
        (GatKQ, 1, 4, 6, false),
    ];
    for &(op, k, x, b, valid) in cases {
        let mut bytes = header(op as u8, k, x, b, 0);
        bytes.resize(HEADER_LEN + b as usize, b'k');
        let got = parse_binary(&bytes, &limits());
        if valid {
            assert!(got.is_ok(), "{op:?} k{k} x{x} b{b}: {got:?}");
        } else {
            assert_eq!(
                got,
                Err(BinError::Invalid {
                    opcode: op as u8,
                    opaque: 0
                }),
                "{op:?} k{k} x{x} b{b}"
            );
        }
    }
}

#[test]
fn an_unknown_opcode_skips_exactly_its_body() {
    let mut b = header(0x40, 1, 0, 4, 77);
    b.extend_from_slice(b"kxyz");
    let e = parse_binary(&b, &limits()).unwrap_err();
    assert_eq!(
        e,
        BinError::UnknownCommand {
            opcode: 0x40,
            opaque: 77,
            consumed: 28
        }
    );
    assert!(!e.is_fatal());
    // Decided from the header alone: the body need not be there.
    assert_eq!(parse_binary(&b[..24], &limits()), Err(e));
    // SASL and other opcodes memcached does not serve.
    for op in [0x20u8, 0x21, 0x1f, 0x30, 0xff] {
        assert!(matches!(
            parse_binary(&header(op, 0, 0, 0, 0), &limits()),
            Err(BinError::UnknownCommand { .. })
        ));
    }
}

#[test]
fn a_huge_declared_value_is_refused_from_header_extras_and_key() {
    let mut b = header(Opcode::Set as u8, 3, 8, 0xffff_fff0, 5);
    // Header only: wait for extras and key (33 bytes), not the body.
    assert_eq!(
        parse_binary(&b, &limits()),
        Err(BinError::Incomplete { need: 35 })
    );
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(b"big");
    let e = parse_binary(&b, &limits()).unwrap_err();
    assert_eq!(
        e,
        BinError::TooLarge {
            opcode: Opcode::Set,
            opaque: 5,
            key: b"big",
            consumed: 24 + 0xffff_fff0
        }
    );
    let mut out = Vec::new();
    e.write_response(&mut out);
    assert_eq!(&out[6..8], &[0, 3]);
    assert_eq!(&out[24..], b"Too large.");
    // The limit itself is fine (memcached's item size: 60 bytes of header,
    // key and CAS besides the value); one more byte is not.
    let ok = vec![b'v'; 1024 - crate::protocol::item_size(1, 0, 0)];
    let mut r = BinRequest {
        key: b"k",
        value: &ok,
        ..BinRequest::new(Opcode::Append)
    };
    assert!(parse_binary(&enc(&r), &limits()).is_ok());
    let big = vec![b'v'; ok.len() + 1];
    r.value = &big;
    assert!(matches!(
        parse_binary(&enc(&r), &limits()),
        Err(BinError::TooLarge { consumed: 990, .. })
    ));
    // A set's client flags count once its extras have arrived.
    let mut r = BinRequest {
        key: b"k",
        value: &ok[..ok.len() - 3],
        extras: Extras::Store {
            flags: 1,
            exptime: 0,
        },
        ..BinRequest::new(Opcode::Set)
    };
    let bytes = enc(&r);
    assert!(matches!(
        parse_binary(&bytes[..24], &limits()),
        Err(BinError::Incomplete { need: 33 })
    ));
    assert!(matches!(
        parse_binary(&bytes, &limits()),
        Err(BinError::TooLarge { .. })
    ));
    r.extras = Extras::Store {
        flags: 0,
        exptime: 0,
    };
    assert!(parse_binary(&enc(&r), &limits()).is_ok());
}

#[test]
fn quiet_opcodes_have_loud_forms() {
    for &op in Opcode::ALL {
        assert_eq!(Opcode::from_u8(op as u8), Some(op));
        assert!(!op.loud().is_quiet());
    }
    let quiet = Opcode::ALL.iter().filter(|o| o.is_quiet()).count();
    assert_eq!(quiet, 14);
}

/// An owned request, so proptest can generate it.
#[derive(Clone, Debug)]
struct Owned {
    opcode: Opcode,
    data_type: u8,
    vbucket: u16,
    opaque: u32,
    cas: u64,
    extras: Extras,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Owned {
    fn request(&self) -> BinRequest<'_> {
        BinRequest {
            opcode: self.opcode,
            data_type: self.data_type,
            vbucket: self.vbucket,
            opaque: self.opaque,
            cas: self.cas,
            extras: self.extras,
            key: &self.key,
            value: &self.value,
        }
    }
}

/// Requests valid for their opcode: the extras, key and value it takes.
fn arb_request() -> impl Strategy<Value = Owned> {
    (
        proptest::sample::select(Opcode::ALL),
        any::<(u8, u16, u32, u64)>(),
        any::<(u32, u32, u64, u64, bool)>(),
        proptest::collection::vec(any::<u8>(), 1..=250),
        proptest::collection::vec(any::<u8>(), 0..=64),
    )
        .prop_map(
            |(opcode, (dt, vb, opaque, cas), (a, b, c, d, flag), key, value)| {
                use Opcode::*;
                let (extras, keyed, valued) = match opcode.loud() {
                    Get | GetK | Delete => (Extras::None, true, false),
                    Set | Add | Replace => (
                        Extras::Store {
                            flags: a,
                            exptime: b,
                        },
                        true,
                        true,
                    ),
                    Increment | Decrement => (
                        Extras::Arith {
                            delta: c,
                            initial: d,
                            exptime: a,
                        },
                        true,
                        false,
                    ),
                    Append | Prepend => (Extras::None, true, true),
                    Flush if flag => (Extras::Expiry(a), false, false),
                    Quit | Noop | Version | Flush => (Extras::None, false, false),
                    Stat => (Extras::None, flag, false),
                    Verbosity => (Extras::Level(a), false, false),
                    Touch | Gat | GatK => (Extras::Expiry(a), true, false),
                    _ => unreachable!(),
                };
                Owned {
                    opcode,
                    data_type: dt,
                    vbucket: vb,
                    opaque,
                    cas,
                    extras,
                    key: if keyed { key } else { Vec::new() },
                    value: if valued { value } else { Vec::new() },
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The look-ahead sizes every frame as the parser does, names the key
    /// of those that name an item, and waits for a frame in part.
    #[test]
    fn the_request_ahead_agrees_with_the_parser(r in arb_request()) {
        use crate::protocol::{request_ahead, Ahead};
        let req = r.request();
        let bytes = enc(&req);
        let names_item = req.opcode.loud() != Opcode::Stat && !req.key.is_empty();
        let want = Ahead { key: names_item.then_some(req.key), len: bytes.len() };
        prop_assert_eq!(request_ahead(true, &bytes), Some(want));
        prop_assert_eq!(request_ahead(true, &bytes[..bytes.len() - 1]), None);
    }

    #[test]
    fn parse_of_encode_round_trips(r in arb_request()) {
        let req = r.request();
        let bytes = enc(&req);
        prop_assert_eq!(bytes.len(), req.encoded_len());
        prop_assert_eq!(parse_binary(&bytes, &limits()), Ok((req, bytes.len())));
    }

    /// A set, add or replace whose value is still coming has the head its
    /// whole request has; any other request has none.
    #[test]
    fn a_store_head_is_the_whole_requests_head(r in arb_request(), cut in any::<prop::sample::Index>()) {
        let req = r.request();
        let bytes = enc(&req);
        let stores = matches!(req.opcode.loud(), Opcode::Set | Opcode::Add | Opcode::Replace);
        let head_len = bytes.len() - req.value.len();
        prop_assert_eq!(parse_binary_head(&bytes, &limits()), None);
        if !stores || req.value.is_empty() {
            for k in 0..bytes.len() {
                prop_assert_eq!(parse_binary_head(&bytes[..k], &limits()), None);
            }
            return Ok(());
        }
        let k = head_len + cut.index(req.value.len());
        let head = parse_binary_head(&bytes[..k], &limits()).unwrap();
        prop_assert_eq!(BinRequest { value: req.value, ..head.request }, req);
        prop_assert_eq!((head.head_len, head.vlen), (head_len, req.value.len()));
        prop_assert_eq!(parse_binary_head(&bytes[..head_len - 1], &limits()), None);
    }

    #[test]
    fn a_pipeline_parses_request_by_request(rs in proptest::collection::vec(arb_request(), 1..8)) {
        let mut bytes = Vec::new();
        for r in &rs {
            r.request().encode(&mut bytes);
        }
        let mut rest = &bytes[..];
        for r in &rs {
            let (got, n) = parse_binary(rest, &limits()).unwrap();
            prop_assert_eq!(got, r.request());
            rest = &rest[n..];
        }
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_ask_for_too_much(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..400)
    ) {
        if let Some(b) = bytes.first_mut() {
            *b = REQUEST_MAGIC;
        }
        let l = limits();
        match parse_binary(&bytes, &l) {
            Ok((_, n)) => prop_assert!(n >= HEADER_LEN && n <= bytes.len()),
            Err(BinError::Incomplete { need }) => {
                prop_assert!(need > bytes.len());
                prop_assert!(need <= HEADER_LEN + 20 + KEY_MAX_LENGTH + l.max_item_size);
            }
            Err(e) => prop_assert!(e.is_fatal() || e.consumed().unwrap() >= HEADER_LEN),
        }
    }
}
