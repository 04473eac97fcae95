//! The memcached binary protocol of `duality kv`, compared byte for byte
//! with the real memcached (1.6, `/usr/bin/memcached`, started by each test
//! on a free port): one script of binary requests covering every opcode,
//! the quiet forms and the errors runs against both, and their responses
//! must match — CAS values compared by identity (the n-th distinct CAS of a
//! run), the version string and stat values by shape. The same under
//! several threading models, and with requests split at every byte.
//!
//! Where duality deliberately answers differently from memcached 1.6.18 the
//! script leaves the case out and `duality_only` checks duality's answer;
//! the comments say why.

mod common;

use common::*;
use duality_kv::{BinRequest, Extras, Opcode};
use std::collections::HashMap;
use std::thread;
use std::time::Duration;

/// duality with memcached's defaults on `model`.
fn duality(model: &str) -> InProc {
    like_memcached(model, false)
}

// ---- requests ----

fn op(o: Opcode) -> BinRequest<'static> {
    BinRequest::new(o)
}

fn keyed(o: Opcode, key: &[u8]) -> BinRequest<'_> {
    BinRequest { key, ..op(o) }
}

fn store<'a>(
    o: Opcode,
    key: &'a [u8],
    value: &'a [u8],
    flags: u32,
    exptime: u32,
) -> BinRequest<'a> {
    let extras = match o.loud() {
        Opcode::Append | Opcode::Prepend => Extras::None,
        _ => Extras::Store { flags, exptime },
    };
    BinRequest {
        extras,
        key,
        value,
        ..op(o)
    }
}

fn arith(o: Opcode, key: &[u8], delta: u64, initial: u64, exptime: u32) -> BinRequest<'_> {
    BinRequest {
        extras: Extras::Arith {
            delta,
            initial,
            exptime,
        },
        key,
        ..op(o)
    }
}

fn touch(o: Opcode, key: &[u8], exptime: u32) -> BinRequest<'_> {
    BinRequest {
        extras: Extras::Expiry(exptime),
        key,
        ..op(o)
    }
}

fn cas(mut r: BinRequest<'_>, cas: u64) -> BinRequest<'_> {
    r.cas = cas;
    r
}

fn opaque(mut r: BinRequest<'_>, opaque: u32) -> BinRequest<'_> {
    r.opaque = opaque;
    r
}

fn encode(reqs: &[BinRequest<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in reqs {
        r.encode(&mut out);
    }
    out
}

/// The opaque of the NOOP that ends each step.
const END: u32 = 0xfeed_f00d;

// ---- responses ----

#[derive(Clone, Debug, PartialEq, Eq)]
struct Resp {
    magic: u8,
    opcode: u8,
    key_len: u16,
    extras_len: u8,
    data_type: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    body: Vec<u8>,
}

impl Resp {
    fn key(&self) -> &[u8] {
        let x = usize::from(self.extras_len);
        &self.body[x..x + usize::from(self.key_len)]
    }

    fn value(&self) -> &[u8] {
        &self.body[usize::from(self.extras_len) + usize::from(self.key_len)..]
    }
}

fn read_resp(c: &mut Client) -> Resp {
    let h = c.read_n(24);
    let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    Resp {
        magic: h[0],
        opcode: h[1],
        key_len: u16::from_be_bytes([h[2], h[3]]),
        extras_len: h[4],
        data_type: h[5],
        status: u16::from_be_bytes([h[6], h[7]]),
        opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
        body: c.read_n(body_len),
    }
}

/// Splits raw response bytes into responses (for what came before a close).
fn split_resps(mut b: &[u8]) -> Vec<Resp> {
    let mut out = Vec::new();
    while b.len() >= 24 {
        let body_len = u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize;
        let end = (24 + body_len).min(b.len());
        out.push(Resp {
            magic: b[0],
            opcode: b[1],
            key_len: u16::from_be_bytes([b[2], b[3]]),
            extras_len: b[4],
            data_type: b[5],
            status: u16::from_be_bytes([b[6], b[7]]),
            opaque: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            cas: u64::from_be_bytes(b[16..24].try_into().unwrap()),
            body: b[24..end].to_vec(),
        });
        b = &b[end..];
    }
    assert!(b.is_empty(), "a partial response header: {b:?}");
    out
}

/// One server's run of the script: what each step answered, normalized.
struct Run {
    addr: Addr,
    c: Client,
    /// CAS → its ordinal in this run (0 stays 0).
    cas_ids: HashMap<u64, usize>,
    log: Vec<(String, Vec<String>)>,
}

impl Run {
    fn new(addr: &Addr) -> Run {
        Run {
            addr: addr.clone(),
            c: Client::connect(addr),
            cas_ids: HashMap::new(),
            log: Vec::new(),
        }
    }

    fn show(&mut self, r: &Resp) -> String {
        let n = self.cas_ids.len() + 1;
        let cas = if r.cas == 0 {
            0
        } else {
            *self.cas_ids.entry(r.cas).or_insert(n)
        };
        let body = if r.opcode == Opcode::Version as u8 && r.status == 0 {
            // Version strings differ; both are dotted versions.
            let v = String::from_utf8_lossy(&r.body).to_string();
            assert!(
                !v.is_empty() && v.chars().any(|c| c.is_ascii_digit()) && v.contains('.'),
                "version {v:?}"
            );
            "<version>".to_string()
        } else {
            format!("{:?}", String::from_utf8_lossy(&r.body))
        };
        format!(
            "magic={:#x} op={:#04x} key_len={} extras_len={} type={} status={:#06x} opaque={:#x} cas=#{cas} body={body}",
            r.magic, r.opcode, r.key_len, r.extras_len, r.data_type, r.status, r.opaque
        )
    }

    /// Sends `reqs` and a NOOP; returns every response before the NOOP's.
    fn send(&mut self, reqs: &[BinRequest<'_>]) -> Vec<Resp> {
        let mut bytes = encode(reqs);
        opaque(op(Opcode::Noop), END).encode(&mut bytes);
        self.c.send(&bytes);
        self.read_to_end_marker()
    }

    fn read_to_end_marker(&mut self) -> Vec<Resp> {
        let mut out = Vec::new();
        loop {
            let r = read_resp(&mut self.c);
            if r.opcode == Opcode::Noop as u8 && r.opaque == END {
                assert_eq!(r.status, 0);
                return out;
            }
            out.push(r);
        }
    }

    /// A step of the script: its responses go into the log.
    fn step(&mut self, name: &str, reqs: &[BinRequest<'_>]) -> Vec<Resp> {
        let resps = self.send(reqs);
        let shown = resps.iter().map(|r| self.show(r)).collect();
        self.log.push((name.to_string(), shown));
        resps
    }

    /// A step after which the server closes: everything it sends until
    /// then goes into the log; the run goes on with a new connection.
    fn closing(&mut self, name: &str, bytes: &[u8]) {
        self.c.send(bytes);
        let raw = self.c.read_to_eof();
        let shown = split_resps(&raw).iter().map(|r| self.show(r)).collect();
        self.log.push((name.to_string(), shown));
        self.c = Client::connect(&self.addr);
    }

    /// The CAS of `key` (a get that must hit), not logged.
    fn cas_of(&mut self, key: &[u8]) -> u64 {
        let r = self.send(&[keyed(Opcode::Get, key)]);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, 0, "get {key:?} for its CAS");
        r[0].cas
    }
}

/// The script: every opcode, quiet forms, CAS, errors that keep the
/// connection, then errors that close it.
fn script(r: &mut Run) {
    use Opcode::*;
    r.step("flush to start", &[op(Flush)]);

    // Storage and retrieval, every get form, hits and misses.
    r.step("set", &[opaque(store(Set, b"k", b"hello", 5, 0), 7)]);
    r.step(
        "get forms, hit and miss",
        &[
            opaque(keyed(Get, b"k"), 1),
            opaque(keyed(GetK, b"k"), 2),
            opaque(keyed(GetQ, b"k"), 3),
            opaque(keyed(GetKQ, b"k"), 4),
            opaque(keyed(Get, b"miss"), 5),
            opaque(keyed(GetK, b"miss"), 6),
            opaque(keyed(GetQ, b"miss"), 7),
            opaque(keyed(GetKQ, b"miss"), 8),
        ],
    );
    r.step(
        "add, replace and quiet forms",
        &[
            store(Add, b"k", b"x", 0, 0),
            store(Add, b"a", b"first", 1, 0),
            store(AddQ, b"a", b"x", 0, 0),
            store(AddQ, b"aq", b"quiet", 2, 0),
            store(Replace, b"nope", b"x", 0, 0),
            store(ReplaceQ, b"nope", b"x", 0, 0),
            store(Replace, b"a", b"second", 3, 0),
            store(ReplaceQ, b"aq", b"again", 4, 0),
            store(SetQ, b"sq", b"silent", 0xffff_ffff, 100),
            keyed(GetK, b"a"),
            keyed(GetK, b"aq"),
            keyed(GetK, b"sq"),
            keyed(GetK, b"nope"),
        ],
    );
    let all: Vec<u8> = (0..=255).collect();
    r.step(
        "empty and binary values",
        &[
            store(Set, b"empty", b"", 0, 0),
            store(Set, b"bin", &all, 0, 0),
            keyed(Get, b"empty"),
            keyed(Get, b"bin"),
        ],
    );
    // Values of 64 KiB and more (received straight into their items).
    let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let big2: Vec<u8> = (0..70_000u32).map(|i| (i * 13 + 1) as u8).collect();
    r.step(
        "large values",
        &[
            store(Set, b"big", &big, 9, 0),
            store(Add, b"big", &big2, 0, 0),
            store(AddQ, b"big2", &big2, 1, 0),
            store(Replace, b"nobig", &big, 0, 0),
            store(ReplaceQ, b"big", &big2, 2, 0),
            keyed(GetK, b"big"),
            keyed(GetK, b"big2"),
        ],
    );
    let c = r.cas_of(b"big");
    r.step(
        "large values with a CAS",
        &[
            cas(store(Set, b"big", &big, 3, 0), c + 1),
            cas(store(Set, b"big", &big, 3, 0), c),
            cas(store(Replace, b"nobig", &big, 3, 0), c),
            keyed(Get, b"big"),
        ],
    );
    let odd_key: Vec<u8> = (1..=250).map(|i| (i % 255) as u8 + 1).collect();
    r.step(
        "a 250-byte key of any bytes",
        &[store(Set, &odd_key, b"v", 0, 0), keyed(GetK, &odd_key)],
    );

    // CAS: the request's CAS must match; any storage op becomes a CAS.
    let c = r.cas_of(b"k");
    r.step(
        "cas",
        &[
            cas(store(Set, b"k", b"bad", 0, 0), c + 1000),
            cas(store(SetQ, b"k", b"bad", 0, 0), c + 1000),
            cas(store(Set, b"nope", b"x", 0, 0), c),
            cas(store(Add, b"k", b"add-cas", 0, 0), c + 1000),
            cas(store(Set, b"k", b"good", 9, 0), c),
            keyed(Get, b"k"),
        ],
    );
    let c = r.cas_of(b"k");
    r.step(
        "cas on replace, append, delete, incr",
        &[
            cas(store(Replace, b"k", b"r", 0, 0), c + 1000),
            cas(store(ReplaceQ, b"k", b"r2", 0, 0), c),
            keyed(Get, b"k"),
        ],
    );
    let c = r.cas_of(b"k");
    r.step(
        "cas on append",
        &[
            cas(store(Append, b"k", b"+", 0, 0), c + 1000),
            cas(store(Append, b"k", b"+", 0, 0), c),
            keyed(Get, b"k"),
        ],
    );
    let c = r.cas_of(b"k");
    r.step(
        "cas on delete",
        &[
            cas(keyed(Delete, b"k"), c + 1000),
            cas(keyed(Delete, b"k"), c),
            keyed(Get, b"k"),
        ],
    );

    // Append / prepend.
    r.step(
        "append and prepend",
        &[
            store(Set, b"ap", b"mid", 42, 0),
            store(Append, b"ap", b">>", 0, 0),
            store(Prepend, b"ap", b"<<", 0, 0),
            store(AppendQ, b"ap", b"]", 0, 0),
            store(PrependQ, b"ap", b"[", 0, 0),
            keyed(Get, b"ap"),
            store(Append, b"nope", b"x", 0, 0),
            store(Prepend, b"nope", b"x", 0, 0),
            store(AppendQ, b"nope", b"x", 0, 0),
            store(PrependQ, b"nope", b"x", 0, 0),
        ],
    );

    // Delete.
    r.step(
        "delete",
        &[
            keyed(Delete, b"nope"),
            keyed(DeleteQ, b"nope"),
            store(Set, b"d1", b"x", 0, 0),
            store(Set, b"d2", b"x", 0, 0),
            keyed(Delete, b"d1"),
            keyed(DeleteQ, b"d2"),
            keyed(Get, b"d1"),
            keyed(Get, b"d2"),
        ],
    );

    // incr / decr: create with the initial value unless the expiry is
    // 0xffffffff; wrap at 2^64; stop at 0; refuse non-numeric values.
    r.step(
        "incr and decr",
        &[
            arith(Increment, b"n", 5, 10, 0),
            arith(Increment, b"n", 5, 10, 0),
            arith(Decrement, b"n", 3, 10, 0),
            keyed(Get, b"n"),
            arith(Increment, b"none", 1, 0, 0xffff_ffff),
            arith(Decrement, b"none", 1, 0, 0xffff_ffff),
            arith(IncrementQ, b"none", 1, 0, 0xffff_ffff),
            arith(DecrementQ, b"none", 1, 0, 0xffff_ffff),
            arith(IncrementQ, b"n", 100, 0, 0),
            arith(DecrementQ, b"new", 1, 7, 0),
            keyed(Get, b"n"),
            keyed(Get, b"new"),
            store(Set, b"d", b"5", 0, 0),
            arith(Decrement, b"d", 10, 0, 0),
            keyed(Get, b"d"),
            store(Set, b"max", b"18446744073709551615", 0, 0),
            arith(Increment, b"max", 2, 0, 0),
            store(Set, b"txt", b"hello", 0, 0),
            arith(Increment, b"txt", 1, 0, 0),
            arith(DecrementQ, b"txt", 1, 0, 0),
            store(Set, b"neg", b"-1", 0, 0),
            arith(Increment, b"neg", 1, 0, 0),
            arith(Increment, b"empty", 1, 0, 0),
            store(Set, b"sp", b" 12 ", 0, 0),
            arith(Increment, b"sp", 1, 0, 0),
        ],
    );
    let c = r.cas_of(b"n");
    r.step(
        "cas on incr",
        &[
            cas(arith(Increment, b"n", 1, 0, 0), c + 1000),
            cas(arith(Increment, b"n", 1, 0, 0), c),
        ],
    );

    // touch and the gat family.
    r.step(
        "touch and gat",
        &[
            store(Set, b"t", b"tv", 11, 0),
            touch(Touch, b"t", 100),
            touch(Touch, b"nope", 100),
            touch(Gat, b"t", 0),
            touch(GatK, b"t", 0),
            touch(GatQ, b"t", 0),
            touch(GatKQ, b"t", 0),
            touch(Gat, b"nope", 0),
            touch(GatK, b"nope", 0),
            touch(GatQ, b"nope", 0),
            touch(GatKQ, b"nope", 0),
            keyed(Get, b"t"),
        ],
    );

    // Noop and version.
    r.step("noop", &[opaque(op(Noop), 1), op(Noop)]);
    r.step("version", &[opaque(op(Version), 3)]);

    // Stats: the groups memcached and duality share, errors and reset.
    r.step("stat of an unknown group", &[keyed(Stat, b"bogus")]);
    r.step("stat reset", &[opaque(keyed(Stat, b"reset"), 4)]);
    // `stats detail`: on, a prefix counted, the dump (one "detailed" stat
    // holding the text dump), off.
    r.step(
        "stat detail",
        &[
            keyed(Stat, b"detail on"),
            store(Set, b"pfx:a", b"v", 0, 0),
            keyed(Get, b"pfx:a"),
            keyed(Stat, b"detail dump"),
            keyed(Stat, b"detail off"),
            keyed(Stat, b"detail bogus"),
        ],
    );

    // An unknown opcode is answered and its body skipped. (Only bodies of
    // a value: memcached skips extras and key twice, see duality_only.)
    let mut unknown = encode(&[opaque(op(Noop), 9)]);
    unknown[1] = 0x40;
    let mut with_body = encode(&[store(Append, b"", b"xyz", 0, 0)]);
    with_body[1] = 0x45;
    let mut sasl = encode(&[op(Noop)]);
    sasl[1] = 0x20;
    for (name, bytes) in [
        ("unknown opcode", unknown),
        ("unknown opcode with a body", with_body),
        ("sasl (not served)", sasl),
    ] {
        let mut b = bytes;
        opaque(op(Noop), END).encode(&mut b);
        r.c.send(&b);
        let resps = r.read_to_end_marker();
        let shown = resps.iter().map(|x| r.show(x)).collect();
        r.log.push((name.to_string(), shown));
    }

    // Too large: refused, the value skipped; a set drops the old item,
    // add and append keep it.
    let big = vec![b'b'; 2 << 20];
    r.step(
        "too large",
        &[
            store(Set, b"big", b"small", 0, 0),
            store(Set, b"big", &big, 0, 0),
            keyed(Get, b"big"),
            store(Set, b"big2", b"small", 0, 0),
            store(Add, b"big2", &big, 0, 0),
            store(Append, b"big2", &big, 0, 0),
            keyed(Get, b"big2"),
            store(SetQ, b"big2", &big, 0, 0),
            keyed(Get, b"big2"),
        ],
    );

    // Flush: a delay in the future keeps the items for now; flushq now.
    r.step(
        "flush",
        &[
            store(Set, b"f", b"x", 0, 0),
            BinRequest {
                extras: Extras::Expiry(1000),
                ..op(Flush)
            },
            keyed(Get, b"f"),
            op(FlushQ),
            keyed(Get, b"f"),
            BinRequest {
                extras: Extras::Expiry(0),
                ..op(FlushQ)
            },
        ],
    );

    // Errors that close the connection.
    let mut bad_extras = encode(&[store(Set, b"k", b"v", 0, 0)]);
    bad_extras[4] = 4; // 4 bytes of extras, 8 required
    r.closing("set with 4 bytes of extras", &bad_extras);
    let long = vec![b'l'; 251];
    r.closing("a 251-byte key", &encode(&[opaque(keyed(Get, &long), 5)]));
    r.closing(
        "get with extras",
        &encode(&[BinRequest {
            extras: Extras::Expiry(1),
            ..keyed(Get, b"k")
        }]),
    );
    r.closing("get without a key", &encode(&[op(Get)]));
    r.closing("noop with a body", &encode(&[keyed(Noop, b"k"), op(Noop)]));
    r.closing(
        "version with a body",
        &encode(&[keyed(Version, b"k"), op(Noop)]),
    );
    r.closing(
        "flush with 8 bytes of extras",
        &encode(&[BinRequest {
            extras: Extras::Store {
                flags: 0,
                exptime: 0,
            },
            ..op(Flush)
        }])[..],
    );
    r.closing(
        "incr with 8 bytes of extras",
        &encode(&[store(Set, b"k", b"", 0, 0)])
            .into_iter()
            .enumerate()
            .map(|(i, b)| if i == 1 { Increment as u8 } else { b })
            .collect::<Vec<_>>(),
    );
    r.closing(
        "append with extras",
        &encode(&[store(Set, b"ap", b"x", 0, 0)])
            .into_iter()
            .enumerate()
            .map(|(i, b)| if i == 1 { Append as u8 } else { b })
            .collect::<Vec<_>>(),
    );
    let mut short_body = encode(&[keyed(Get, b"key")]);
    short_body[11] = 1; // body length 1 < key length 3
    r.closing("key longer than the body", &short_body);
    let mut bad_magic = encode(&[op(Noop), op(Noop)]);
    bad_magic[24] = 0x81;
    r.closing("a bad magic byte after a request", &bad_magic);
    r.closing("quit", &encode(&[opaque(op(Quit), 6), op(Noop)]));
    r.closing("quitq", &encode(&[op(QuitQ), op(Noop)]));
}

/// Runs the script against both servers and compares every step.
fn compare_with_memcached(model: &str) {
    let mc = Memcached::start(&[]);
    let mc_addr = Addr::Tcp(mc.addr);
    let du = duality(model);
    let mut want = Run::new(&mc_addr);
    script(&mut want);
    let mut got = Run::new(&du.addr);
    script(&mut got);
    assert_eq!(want.log.len(), got.log.len());
    for ((name, w), (_, g)) in want.log.iter().zip(&got.log) {
        assert!(
            w == g,
            "{model}: step {name:?}\n  memcached: {w:#?}\n  duality:   {g:#?}"
        );
    }
}

#[test]
fn like_memcached_sped() {
    compare_with_memcached("sped");
}

#[test]
fn like_memcached_amped() {
    compare_with_memcached("amped:1");
}

#[test]
fn like_memcached_symped() {
    compare_with_memcached("symped:2");
}

#[test]
fn like_memcached_thread_per_conn() {
    compare_with_memcached("thread-per-conn");
}

/// Stats: one response per stat, then an empty key; compared by shape.
fn stats_of(addr: &Addr, group: &[u8]) -> Vec<(String, String)> {
    let mut r = Run::new(addr);
    let resps = r.send(&[opaque(keyed(Opcode::Stat, group), 0x5747)]);
    let (last, stats) = resps.split_last().expect("a terminator");
    assert_eq!(
        (last.status, last.key_len, last.body.len()),
        (0, 0, 0),
        "terminator"
    );
    for s in &resps {
        assert_eq!(
            (s.magic, s.opcode, s.opaque, s.cas, s.extras_len),
            (0x81, 0x10, 0x5747, 0, 0)
        );
    }
    stats
        .iter()
        .map(|s| {
            assert!(s.key_len > 0);
            (
                String::from_utf8_lossy(s.key()).into(),
                String::from_utf8_lossy(s.value()).into(),
            )
        })
        .collect()
}

#[test]
fn stats_have_memcached_names_and_shapes() {
    let mc = Memcached::start(&[]);
    let mc_addr = Addr::Tcp(mc.addr);
    let du = duality("symped:2");
    let want: HashMap<_, _> = stats_of(&mc_addr, b"").into_iter().collect();
    let got: HashMap<_, _> = stats_of(&du.addr, b"").into_iter().collect();
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "pointer_size",
        "rusage_user",
        "rusage_system",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "delete_hits",
        "incr_misses",
        "cas_badval",
        "touch_hits",
        "limit_maxbytes",
        "threads",
        "bytes",
        "curr_items",
        "total_items",
        "evictions",
    ] {
        let (w, g) = (&want[name], &got[name]);
        let shape = |v: &str| {
            v.chars()
                .map(|c| if c.is_ascii_digit() { '9' } else { c })
                .collect::<String>()
                .split('9')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("9")
        };
        if name != "version" {
            assert_eq!(shape(w), shape(g), "{name}: memcached {w:?}, duality {g:?}");
        }
    }
    assert_eq!(want["limit_maxbytes"], got["limit_maxbytes"]);
    assert_eq!(got["pid"], std::process::id().to_string());
    let settings: HashMap<_, _> = stats_of(&du.addr, b"settings").into_iter().collect();
    assert_eq!(settings["model"], "symped:2");
    let mc_settings: HashMap<_, _> = stats_of(&mc_addr, b"settings").into_iter().collect();
    assert_eq!(settings["maxbytes"], mc_settings["maxbytes"]);
    // duality's own group.
    assert!(!stats_of(&du.addr, b"duality").is_empty());
}

/// A pipeline covering the opcodes, fed one byte at a time: the same
/// responses as when sent at once, on duality and memcached alike.
fn byte_at_a_time(addr: &Addr) -> Vec<String> {
    use Opcode::*;
    let reqs = [
        op(Flush),
        store(Set, b"p", b"value", 3, 0),
        keyed(GetK, b"p"),
        keyed(GetQ, b"miss"),
        store(AppendQ, b"p", b"+", 0, 0),
        arith(Increment, b"c", 1, 41, 0),
        arith(IncrementQ, b"c", 1, 0, 0),
        keyed(Get, b"c"),
        touch(GatK, b"p", 0),
        keyed(Delete, b"p"),
        keyed(DeleteQ, b"p"),
        opaque(op(Version), 2),
        keyed(Stat, b"reset"),
    ];
    let mut bytes = encode(&reqs);
    opaque(op(Noop), END).encode(&mut bytes);
    let mut whole = Run::new(addr);
    whole.c.send(&bytes);
    let at_once: Vec<String> = whole
        .read_to_end_marker()
        .iter()
        .map(|x| whole.show(x))
        .collect();
    let mut slow = Run::new(addr);
    for b in &bytes {
        slow.c.send(std::slice::from_ref(b));
        thread::sleep(Duration::from_micros(300));
    }
    let bytewise: Vec<String> = slow
        .read_to_end_marker()
        .iter()
        .map(|x| slow.show(x))
        .collect();
    assert_eq!(at_once, bytewise, "fed one byte at a time");
    bytewise
}

/// One request split at every byte boundary (the halves apart in time).
fn split_everywhere(addr: &Addr) -> Vec<String> {
    use Opcode::*;
    let req = encode(&[opaque(store(Set, b"split", b"0123456789", 7, 0), 0x51)]);
    let mut follow = encode(&[keyed(GetK, b"split")]);
    opaque(op(Noop), END).encode(&mut follow);
    let mut r = Run::new(addr);
    let mut log = Vec::new();
    for i in 1..req.len() {
        r.c.send(&req[..i]);
        thread::sleep(Duration::from_millis(2));
        let mut rest = req[i..].to_vec();
        rest.extend_from_slice(&follow);
        r.c.send(&rest);
        let resps = r.read_to_end_marker();
        assert_eq!(resps.len(), 2, "split at {i}");
        assert_eq!(resps[1].value(), b"0123456789", "split at {i}");
        log.extend(resps.iter().map(|x| r.show(x)));
    }
    log
}

#[test]
fn requests_split_at_every_byte() {
    let mc = Memcached::start(&[]);
    let mc_addr = Addr::Tcp(mc.addr);
    let want = (byte_at_a_time(&mc_addr), split_everywhere(&mc_addr));
    for model in ["sped", "amped:1", "symped:2", "thread-per-conn"] {
        let du = duality(model);
        let got = (byte_at_a_time(&du.addr), split_everywhere(&du.addr));
        assert_eq!(want, got, "{model}");
    }
}

/// A huge declared value is refused from its header, extras and key: the
/// answer comes before any of the value is sent. memcached gives the same
/// answer for a declared length over 2 GiB and then closes; duality keeps
/// the connection and discards the value as it arrives, never buffering it.
/// (For a declared length under 2 GiB memcached answers only once the whole
/// value has been discarded; duality answers at once.)
#[test]
fn a_huge_declared_value_is_refused_at_once() {
    let mc = Memcached::start(&[]);
    let mc_addr = Addr::Tcp(mc.addr);
    let du = duality("symped:2");
    let mut answers = Vec::new();
    for addr in [&mc_addr, &du.addr] {
        let mut c = Client::connect(addr);
        let mut b = encode(&[opaque(store(Opcode::Set, b"huge", b"", 0, 0), 0x77)]);
        b[8..12].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        c.send(&b);
        let r = read_resp(&mut c);
        assert_eq!((r.status, r.body.as_slice()), (3, &b"Too large."[..]));
        answers.push((r, c));
    }
    assert_eq!(answers[0].0, answers[1].0);
    // duality discards a megabyte of the value without answering or closing.
    let c = &mut answers[1].1;
    c.send(&vec![0u8; 1 << 20]);
    // Still connected: this one and the one asking.
    thread::sleep(Duration::from_millis(100));
    let s = du.connect().stats("");
    assert_eq!(s["store_too_large"], "1");
    assert_eq!(s["curr_connections"], "2");
}

/// Answers where duality deliberately differs from memcached 1.6.18.
#[test]
fn duality_only() {
    use Opcode::*;
    let du = duality("sped");
    let mut r = Run::new(&du.addr);
    // verbosity: executed as the protocol document says (memcached 1.6
    // answers "Unknown command" and then skips 4 bytes of the next request).
    let resps = r.send(&[BinRequest {
        extras: Extras::Level(1),
        ..opaque(op(Verbosity), 3)
    }]);
    assert_eq!(resps.len(), 1);
    assert_eq!((resps[0].status, resps[0].opaque), (0, 3));
    // An unknown opcode with extras and a key skips exactly its body
    // (memcached skips extras and key twice and loses the stream).
    let mut b = encode(&[store(Set, b"k", b"v", 0, 0)]);
    b[1] = 0x41;
    opaque(op(Noop), END).encode(&mut b);
    r.c.send(&b);
    let resps = r.read_to_end_marker();
    assert_eq!(resps.len(), 1);
    assert_eq!((resps[0].opcode, resps[0].status), (0x41, 0x81));
    assert_eq!(resps[0].body, b"Unknown command");
    // stat with a body beyond its key: invalid (memcached reads the rest
    // as the next request).
    let mut b = encode(&[BinRequest {
        value: b"zzz",
        ..keyed(Stat, b"items")
    }]);
    b.extend_from_slice(&encode(&[op(Noop)]));
    r.c.send(&b);
    let raw = r.c.read_to_eof();
    let resps = split_resps(&raw);
    assert_eq!(resps.len(), 1);
    assert_eq!(resps[0].status, 4);
    // A text connection stays text, a binary one binary, side by side.
    let mut text = du.connect();
    text.expect_str(
        "version\r\n",
        &format!("VERSION {}\r\n", duality_kv::DEFAULT_VERSION),
    );
    let mut bin = Run::new(&du.addr);
    assert_eq!(bin.send(&[op(Noop)]).len(), 1);
}

/// A request the stream cannot go on after (here: a bad magic byte), with
/// more input behind it that the server has not read: the answers before it
/// still arrive whole, then a clean end (a lingering close). Closing with
/// unread input makes the kernel send a reset, which destroyed the answers
/// the client had not read yet (memcached loses them so). On epoll, where
/// nothing reads for the server after the close (io_uring's armed receive
/// did).
#[test]
fn answers_before_a_closing_error_survive_unread_input() {
    use std::io::{Read, Write};
    let kv = KvProc::start(&["--io", "epoll"]);
    let value = vec![b'x'; 65536];
    let mut c = kv.connect();
    c.send(&encode(&[store(Opcode::Set, b"big", &value, 0, 0)]));
    assert_eq!(read_resp(&mut c).status, 0);
    let get = encode(&[opaque(keyed(Opcode::Get, b"big"), 7)]);
    let mut req = get.repeat(20);
    req.extend_from_slice(&[0u8; 24]); // magic 0x00: the stream is lost
    req.extend(std::iter::repeat_n(b'0', 200_000));
    let mut s = std::net::TcpStream::connect(("127.0.0.1", kv.port)).unwrap();
    // What the socket takes now: the server answers before it reads more.
    s.set_nonblocking(true).unwrap();
    let mut sent = 0;
    while sent < req.len() {
        match s.write(&req[sent..]) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    s.set_nonblocking(false).unwrap();
    assert!(sent > get.len() * 20 + 24, "only {sent} bytes went");
    // The client reads only once the server has closed.
    thread::sleep(Duration::from_millis(100));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let end = s.read_to_end(&mut got);
    let answer = 24 + 4 + value.len();
    assert!(
        end.is_ok() && got.len() == 20 * answer,
        "{end:?}: {} of {} bytes",
        got.len(),
        20 * answer
    );
}
