//! Large values (64 KiB and more) of `set`, `add`, `replace`, `cas`, `ms`
//! and their binary forms are received straight into their items instead of being buffered and copied
//! (`Store::stage`): the answers stay memcached's under every threading
//! model, whatever way the value arrives (whole, trickled, pipelined with
//! what follows, cut off), and with the sockets moving a byte at a time.

mod common;

use common::*;
use duality_kv::server::KvConfig;
use duality_kv::{BinRequest, Extras, Opcode, Status};
use duality_models::Model;
use duality_rt::faults::Faults;
use std::time::Duration;

fn server(model: &str, faults: Faults) -> InProc {
    let m: Model = model.parse().expect("model");
    let config = KvConfig {
        max_item_size: 2 << 20,
        ..small_config(&m)
    };
    InProc::start_with_faults(m, config, false, faults)
}

/// A value of `len` bytes that differs from any other `seed`'s.
fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// `set`'s bytes, value and `\r\n` included.
fn set_cmd(cmd: &str, key: &str, flags: u32, v: &[u8], extra: &str) -> Vec<u8> {
    let mut b = format!("{cmd} {key} {flags} 0 {}{extra}\r\n", v.len()).into_bytes();
    b.extend_from_slice(v);
    b.extend_from_slice(b"\r\n");
    b
}

fn get_answer(key: &str, flags: u32, v: &[u8]) -> Vec<u8> {
    let mut b = format!("VALUE {key} {flags} {}\r\n", v.len()).into_bytes();
    b.extend_from_slice(v);
    b.extend_from_slice(b"\r\nEND\r\n");
    b
}

fn large_values(srv: &InProc, len: usize) {
    let model = srv.model.to_string();
    let mut c = srv.connect();
    c.set_read_timeout(Duration::from_secs(20));
    // Whole, in one write with the get after it.
    let a = value(len, 1);
    let mut req = set_cmd("set", "a", 3, &a, "");
    req.extend_from_slice(b"get a\r\n");
    let mut want = b"STORED\r\n".to_vec();
    want.extend_from_slice(&get_answer("a", 3, &a));
    c.send(&req);
    assert_eq!(c.read_n(want.len()), want, "{model}: whole");

    // Trickled in uneven pieces, the next requests pipelined behind it.
    let b = value(len + 1, 2);
    let mut req = set_cmd("set", "b", 0, &b, "");
    req.extend_from_slice(b"get b\r\nversion\r\n");
    let mut at = 0;
    for (i, step) in [1usize, 13, 4096, 70_000, 7, 150_000]
        .iter()
        .cycle()
        .enumerate()
    {
        let end = (at + step).min(req.len());
        c.send(&req[at..end]);
        at = end;
        if at == req.len() {
            break;
        }
        if i % 3 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let mut want = b"STORED\r\n".to_vec();
    want.extend_from_slice(&get_answer("b", 0, &b));
    assert_eq!(c.read_n(want.len()), want, "{model}: trickled");
    assert!(c.read_until(b"\r\n").starts_with(b"VERSION "), "{model}");

    // The stores' own rules hold: add, replace, cas, noreply.
    let v = value(len, 3);
    c.expect(&set_cmd("add", "a", 0, &v, ""), b"NOT_STORED\r\n");
    c.expect(&set_cmd("replace", "none", 0, &v, ""), b"NOT_STORED\r\n");
    c.expect(&set_cmd("add", "c", 5, &v, ""), b"STORED\r\n");
    c.expect(&set_cmd("replace", "c", 6, &a, ""), b"STORED\r\n");
    c.expect(b"get c\r\n", &get_answer("c", 6, &a));
    let cas = c.cas_of("c");
    c.expect(
        &set_cmd("cas", "c", 7, &v, &format!(" {}", cas + 1)),
        b"EXISTS\r\n",
    );
    c.expect(
        &set_cmd("cas", "c", 7, &v, &format!(" {cas}")),
        b"STORED\r\n",
    );
    c.expect(&set_cmd("cas", "none", 7, &v, " 1"), b"NOT_FOUND\r\n");
    let mut quiet = set_cmd("set", "q", 9, &b, " noreply");
    quiet.extend_from_slice(b"get q\r\n");
    c.expect(&quiet, &get_answer("q", 9, &b));

    // A block not ended by \r\n: memcached's error, the old value kept, the
    // connection in step.
    let mut bad = format!("set a 0 0 {len}\r\n").into_bytes();
    bad.extend_from_slice(&v);
    bad.extend_from_slice(b"XYget a\r\n");
    let mut want = b"CLIENT_ERROR bad data chunk\r\n".to_vec();
    want.extend_from_slice(&get_answer("a", 3, &a));
    c.expect(&bad, &want);

    // A client gone in the middle of a value: nothing stored, the others
    // served.
    let items = c.stats("")["curr_items"].clone();
    let mut gone = srv.connect();
    gone.send(&set_cmd("set", "gone", 0, &v, "")[..len / 2]);
    drop(gone);
    std::thread::sleep(Duration::from_millis(50));
    c.expect(b"get gone\r\n", b"END\r\n");
    assert_eq!(c.stats("")["curr_items"], items, "{model}");
    c.expect(b"get a\r\n", &get_answer("a", 3, &a));

    meta_sets(&mut c, &model, len);
}

/// `ms`'s bytes, value and `\r\n` included.
fn ms_cmd(key: &str, v: &[u8], flags: &str) -> Vec<u8> {
    let mut b = format!("ms {key} {} {flags}\r\n", v.len()).into_bytes();
    b.extend_from_slice(v);
    b.extend_from_slice(b"\r\n");
    b
}

/// `mg <key> s v f`'s answer.
fn mg_answer(flags: u32, v: &[u8]) -> Vec<u8> {
    let mut b = format!("VA {} s{} f{flags}\r\n", v.len(), v.len()).into_bytes();
    b.extend_from_slice(v);
    b.extend_from_slice(b"\r\n");
    b
}

/// The meta set's own rules, with large values: modes, CAS, invalidation,
/// base64 keys, return flags, quiet mode, a bad chunk; appends (buffered)
/// still work beside them.
fn meta_sets(c: &mut Client, model: &str, len: usize) {
    let a = value(len, 5);
    let b = value(len + 3, 6);
    // A base64 key ("mkey") with flags, TTL and return flags, a get after.
    let mut req = ms_cmd("bWtleQ==", &a, "b F12 T100 k O77 s");
    req.extend_from_slice(b"mg mkey s v f\r\n");
    let mut want = format!("HD kbWtleQ== b O77 s{len}\r\n").into_bytes();
    want.extend_from_slice(&mg_answer(12, &a));
    c.send(&req);
    assert_eq!(c.read_n(want.len()), want, "{model}: ms base64");
    // Add, replace, CAS and their misses.
    c.expect(&ms_cmd("mkey", &b, "ME"), b"NS\r\n");
    c.expect(&ms_cmd("mnone", &b, "MR"), b"NS\r\n");
    c.expect(&ms_cmd("mnone", &b, "C5"), b"NF\r\n");
    c.expect(&ms_cmd("m2", &b, "ME F1"), b"HD\r\n");
    let cas = c.cas_of("m2");
    c.expect(&ms_cmd("m2", &a, &format!("C{}", cas + 1)), b"EX\r\n");
    c.expect(&ms_cmd("m2", &a, &format!("MR F2 C{cas} q")), b"");
    c.expect(b"mg m2 s v f\r\n", &mg_answer(2, &a));
    // An older CAS with I: stored, and the item is stale.
    let cas = c.cas_of("m2");
    c.expect(&ms_cmd("m2", &b, &format!("I C{}", cas - 1)), b"HD\r\n");
    let mut stale = b"VA ".to_vec();
    stale.extend_from_slice(format!("{} s{} f0 X W\r\n", b.len(), b.len()).as_bytes());
    stale.extend_from_slice(&b);
    stale.extend_from_slice(b"\r\n");
    c.expect(b"mg m2 s v f\r\n", &stale);
    // Quiet: no answer for a stored value (`expect` ends with `mn`).
    c.expect(&ms_cmd("m3", &b, "q T0"), b"");
    // Append (buffered: its item holds the old value too).
    c.expect(&ms_cmd("m3", &a, "MA"), b"HD\r\n");
    let mut both = b.clone();
    both.extend_from_slice(&a);
    c.expect(b"mg m3 s v f\r\n", &mg_answer(0, &both));
    // A block not ended by \r\n.
    let mut bad = format!("ms m3 {len}\r\n").into_bytes();
    bad.extend_from_slice(&a);
    bad.extend_from_slice(b"XY");
    c.expect(&bad, b"CLIENT_ERROR bad data chunk\r\n");
    c.expect(b"mg m3 s v f\r\n", &mg_answer(0, &both));
}

#[test]
fn large_values_under_every_model() {
    for model in [
        "sped",
        "amped:2",
        "seda:2:2",
        "seda-s:2",
        "symped:2",
        "steal:2",
        "thread-per-conn",
    ] {
        large_values(&server(model, Faults::NONE), 300_000);
    }
}

/// Each network loop with two 256-byte receive buffers (io_uring; the
/// epoll pass runs the same clients on epoll): 24 clients at once write
/// pipelined sets of small and large values and the gets after them, many
/// times the buffers' bytes in flight. Receives wait their turn for a
/// buffer; every answer comes whole and right, nothing is refused.
#[test]
fn more_busy_clients_than_receive_buffers_all_get_answers() {
    for model in ["symped:1", "amped:1", "seda-s:1"] {
        let m: Model = model.parse().expect("model");
        let config = KvConfig {
            max_item_size: 2 << 20,
            ..small_config(&m)
        };
        let srv = InProc::start_tuned(m, config, false, |b| {
            b.faults(Faults::NONE).receive_buffers(2, 256)
        });
        std::thread::scope(|s| {
            for i in 0..24u8 {
                let mut c = srv.connect();
                s.spawn(move || {
                    c.set_read_timeout(Duration::from_secs(30));
                    for round in 0..3u8 {
                        let sizes = [10, 3000, 70_000 + usize::from(i) * 1000];
                        let mut req = Vec::new();
                        let mut want = Vec::new();
                        for (j, len) in sizes.into_iter().enumerate() {
                            let key = format!("c{i}-{j}");
                            let v = value(len, i ^ round);
                            req.extend_from_slice(&set_cmd("set", &key, 7, &v, ""));
                            req.extend_from_slice(format!("get {key}\r\n").as_bytes());
                            want.extend_from_slice(b"STORED\r\n");
                            want.extend_from_slice(&get_answer(&key, 7, &v));
                        }
                        c.send(&req);
                        let got = c.read_n(want.len());
                        assert!(got == want, "{model}: client {i} round {round}");
                    }
                });
            }
        });
    }
}

#[test]
fn large_values_a_byte_at_a_time() {
    for model in ["sped", "symped:2"] {
        large_values(&server(model, Faults::ALL), 70_000);
    }
}

/// Without evictions (`-M`), a large value a full cache has no room for
/// is refused as memcached refuses it, after its bytes came; a `set`'s old
/// value goes too, so no stale value survives. Nothing of it is kept.
#[test]
fn a_large_value_a_full_cache_cannot_take_is_refused() {
    let m: Model = "symped:2".parse().unwrap();
    let config = KvConfig {
        memory_limit: 8 << 20,
        max_item_size: 1 << 20,
        evictions: false,
        ..small_config(&m)
    };
    let srv = InProc::start(m, config, false);
    let mut c = srv.connect();
    // Small values in every shard first, then large ones until one is
    // refused: its shard is full.
    for j in 0..64 {
        c.expect(
            &set_cmd("set", &format!("k{j}"), 0, b"old", ""),
            b"STORED\r\n",
        );
    }
    let big = value(900_000, 4);
    let refused = (0..40)
        .find(|i| c.call(&set_cmd("set", &format!("f{i}"), 0, &big, "")) != b"STORED\r\n")
        .expect("the cache fills up");
    let store = &srv.state.store;
    let full = store.shard_of(format!("f{refused}").as_bytes());
    let k = (0..64)
        .map(|j| format!("k{j}"))
        .find(|k| store.shard_of(k.as_bytes()) == full)
        .expect("a small value in the full shard");
    let mut req = set_cmd("set", &k, 0, &big, "");
    req.extend_from_slice(format!("get {k}\r\n").as_bytes());
    c.expect(
        &req,
        b"SERVER_ERROR out of memory storing object\r\nEND\r\n",
    );
    c.expect(b"get f0\r\n", &get_answer("f0", 0, &big));
    // The same in the binary protocol: "Out of memory", the old value gone.
    c.expect(&set_cmd("set", &k, 0, b"old", ""), b"STORED\r\n");
    let mut b = srv.connect();
    let mut req = Vec::new();
    BinRequest {
        extras: Extras::Store {
            flags: 0,
            exptime: 0,
        },
        key: k.as_bytes(),
        value: &big,
        opaque: 77,
        ..BinRequest::new(Opcode::Set)
    }
    .encode(&mut req);
    b.send(&req);
    let resp = b.read_n(24);
    assert_eq!(resp[0], 0x81, "a response");
    assert_eq!(
        u16::from_be_bytes([resp[6], resp[7]]),
        Status::OutOfMemory as u16
    );
    assert_eq!(&resp[12..16], &77u32.to_be_bytes());
    let body = u32::from_be_bytes([resp[8], resp[9], resp[10], resp[11]]) as usize;
    assert_eq!(b.read_n(body), b"Out of memory");
    c.expect(format!("get {k}\r\n").as_bytes(), b"END\r\n");
    // And for `ms`.
    c.expect(&set_cmd("set", &k, 0, b"old", ""), b"STORED\r\n");
    c.expect(
        &ms_cmd(&k, &big, "T0"),
        b"SERVER_ERROR out of memory storing object\r\n",
    );
    c.expect(format!("get {k}\r\n").as_bytes(), b"END\r\n");
    assert!(srv.state.store.memory() <= 8 << 20);
}
