use super::*;
use proptest::prelude::*;

const NOW: Time = 1_700_000_000;

fn store(max_bytes: usize, shards: usize) -> Store {
    Store::new(StoreConfig { max_bytes, shards })
}

fn set(s: &Store, key: &[u8], value: &[u8], exptime: i64, now: Time) -> u64 {
    s.entry(key, now)
        .insert(value, 0, expiry(exptime, now), None)
        .unwrap()
}

fn get(s: &Store, key: &[u8], now: Time) -> Option<Vec<u8>> {
    let mut e = s.entry(key, now);
    e.bump();
    e.item().map(|i| i.value.to_vec())
}

#[test]
fn slot_is_one_cache_line() {
    assert_eq!(std::mem::size_of::<Slot>(), SLOT_SIZE);
    assert_eq!(ITEM_OVERHEAD, 96);
}

#[test]
fn expiry_semantics() {
    assert_eq!(expiry(0, NOW), 0);
    assert_eq!(expiry(1, NOW), NOW + 1);
    assert_eq!(expiry(MAX_RELATIVE_EXPTIME, NOW), NOW + 2_592_000);
    // Above 30 days: absolute.
    assert_eq!(expiry(MAX_RELATIVE_EXPTIME + 1, NOW), EXPIRED);
    assert_eq!(expiry(i64::from(NOW) + 10, NOW), NOW + 10);
    assert_eq!(expiry(i64::from(NOW), NOW), EXPIRED);
    assert_eq!(expiry(-1, NOW), EXPIRED);
    assert_eq!(expiry(i64::MAX, NOW), Time::MAX);
}

#[test]
fn insert_get_remove() {
    let s = store(1 << 20, 4);
    let c1 = set(&s, b"a", b"1", 0, NOW);
    let c2 = set(&s, b"b", b"22", 0, NOW);
    assert!(c2 > c1);
    assert_eq!(get(&s, b"a", NOW).as_deref(), Some(&b"1"[..]));
    assert_eq!(get(&s, b"b", NOW).as_deref(), Some(&b"22"[..]));
    assert_eq!(get(&s, b"c", NOW), None);
    let st = s.stats();
    assert_eq!((st.curr_items, st.total_items), (2, 2));
    assert_eq!(st.bytes as usize, 2 * ITEM_OVERHEAD + 2 + 3);
    assert!(s.entry(b"a", NOW).remove());
    assert!(!s.entry(b"a", NOW).remove());
    assert_eq!(get(&s, b"a", NOW), None);
    assert_eq!(s.stats().curr_items, 1);
    s.check();
}

#[test]
fn replace_keeps_one_item() {
    let s = store(1 << 20, 1);
    for i in 0..10u8 {
        set(&s, b"k", &[i; 5], 0, NOW);
    }
    assert_eq!(get(&s, b"k", NOW), Some(vec![9; 5]));
    assert_eq!(s.stats().curr_items, 1);
    assert_eq!(s.stats().bytes as usize, 6 + ITEM_OVERHEAD);
    s.check();
}

#[test]
fn expired_items_never_come_back() {
    let s = store(1 << 20, 2);
    set(&s, b"k", b"v", 10, NOW);
    assert!(get(&s, b"k", NOW + 9).is_some());
    let e = s.entry(b"k", NOW + 10);
    assert_eq!(e.lookup(), Lookup::Expired);
    assert!(e.item().is_none());
    drop(e);
    // Unlinked on the way: gone even for an earlier clock.
    assert_eq!(s.entry(b"k", NOW).lookup(), Lookup::Miss);
    let st = s.stats();
    assert_eq!(
        (st.curr_items, st.reclaimed, st.expired_unfetched),
        (0, 1, 0)
    );
    // Born expired: replaces the old item, keeps nothing.
    set(&s, b"k", b"v", 0, NOW);
    set(&s, b"k", b"w", -1, NOW);
    assert_eq!(s.entry(b"k", NOW).lookup(), Lookup::Miss);
    assert_eq!(s.stats().curr_items, 0);
    s.check();
}

#[test]
fn entry_updates() {
    let s = store(1 << 20, 1);
    set(&s, b"k", b"v", 0, NOW);
    {
        let mut e = s.entry(b"k", NOW + 5);
        let it = e.item().unwrap();
        assert!(!it.fetched && !it.stale && !it.win_sent);
        assert_eq!(it.last_access, NOW);
        e.bump();
        e.set_cas(42);
        e.set_stale(true);
        e.set_win_sent(true);
        e.set_exptime(NOW + 100);
    }
    let e = s.entry(b"k", NOW + 6);
    let it = e.item().unwrap();
    assert!(it.fetched && it.stale && it.win_sent);
    assert_eq!(
        (it.cas, it.exptime, it.last_access),
        (42, NOW + 100, NOW + 5)
    );
}

#[test]
fn rewrite_keeps_flags_and_expiry() {
    let s = store(1 << 20, 1);
    s.entry(b"k", NOW)
        .insert(b"mid", 7, NOW + 50, Some(5))
        .unwrap();
    let mut e = s.entry(b"k", NOW);
    let c1 = e.rewrite(Edit::Append(b">>"), None).unwrap();
    let c2 = e.rewrite(Edit::Prepend(b"<<"), Some(99)).unwrap();
    assert_eq!(c2, 99);
    assert_ne!(c1, 5);
    let it = e.item().unwrap();
    assert_eq!(
        (it.value, it.flags, it.exptime, it.cas),
        (&b"<<mid>>"[..], 7, NOW + 50, 99)
    );
    drop(e);
    assert_eq!(
        s.entry(b"x", NOW).rewrite(Edit::Replace(b"1"), None),
        Err(WriteError::NotFound)
    );
    s.check();
}

#[test]
fn eviction_under_the_memory_limit() {
    // 64 KiB in 4 shards; write 4x that in 100-byte values.
    let limit = 64 * 1024;
    let s = store(limit, 4);
    let value = [b'v'; 100];
    let per_item = ITEM_OVERHEAD + 100 + 6;
    let n = 4 * limit / per_item;
    for i in 0..n {
        let key = format!("k{i:05}");
        set(&s, key.as_bytes(), &value, 0, NOW);
        assert!(s.stats().bytes as usize <= limit);
    }
    let st = s.stats();
    assert!(st.evictions as usize >= n - limit / per_item, "{st:?}");
    assert_eq!(st.evictions + st.curr_items, n as u64);
    assert_eq!(st.evicted_unfetched, st.evictions);
    // The most recent items are all there.
    for i in n - 40..n {
        let key = format!("k{i:05}");
        assert!(get(&s, key.as_bytes(), NOW).is_some(), "{key} evicted");
    }
    // The oldest are gone.
    assert!(get(&s, b"k00000", NOW).is_none());
    s.check();
}

#[test]
fn lru_keeps_recently_read_items() {
    let limit = 16 * 1024;
    let s = store(limit, 1);
    let value = [b'v'; 100];
    set(&s, b"hot", &value, 0, NOW);
    for i in 0..1000 {
        set(&s, format!("cold{i}").as_bytes(), &value, 0, NOW);
        assert!(get(&s, b"hot", NOW).is_some(), "hot evicted after {i}");
    }
    s.check();
}

#[test]
fn eviction_prefers_reclaiming_dead_items() {
    let per_item = ITEM_OVERHEAD + 2 + 10;
    let s = store(per_item * 4, 1);
    set(&s, b"a1", &[0; 10], 5, NOW);
    set(&s, b"a2", &[0; 10], 0, NOW);
    set(&s, b"a3", &[0; 10], 0, NOW);
    set(&s, b"a4", &[0; 10], 0, NOW);
    // a1 (the LRU tail) has expired by now: it is reclaimed, not evicted.
    set(&s, b"a5", &[0; 10], 0, NOW + 10);
    let st = s.stats();
    assert_eq!(
        (st.evictions, st.reclaimed, st.expired_unfetched),
        (0, 1, 1)
    );
    set(&s, b"a6", &[0; 10], 0, NOW + 10);
    assert_eq!(s.stats().evictions, 1);
    assert!(get(&s, b"a2", NOW + 10).is_none());
    s.check();
}

#[test]
fn too_big_for_a_shard() {
    let s = store(4096, 4);
    let mut e = s.entry(b"k", NOW);
    assert_eq!(
        e.insert(&[0; 1024], 0, 0, None),
        Err(WriteError::OutOfMemory)
    );
    assert!(e.insert(&[0; 512], 0, 0, None).is_ok());
    assert_eq!(
        e.rewrite(Edit::Append(&[0; 512]), None),
        Err(WriteError::OutOfMemory)
    );
    // The failed write left the item alone.
    assert_eq!(e.item().unwrap().value.len(), 512);
}

#[test]
fn flush_all_now() {
    let s = store(1 << 20, 4);
    for i in 0..20 {
        set(&s, format!("k{i}").as_bytes(), b"v", 0, NOW);
    }
    s.flush_all(0, NOW);
    for i in 0..20 {
        assert!(get(&s, format!("k{i}").as_bytes(), NOW).is_none());
    }
    // Stored after the flush, in the same second: visible.
    set(&s, b"new", b"v", 0, NOW);
    assert!(get(&s, b"new", NOW).is_some());
    assert_eq!(s.stats().cmd_flush, 1);
    s.check();
}

#[test]
fn flush_all_delayed() {
    let s = store(1 << 20, 2);
    set(&s, b"old", b"v", 0, NOW);
    s.flush_all(10, NOW);
    set(&s, b"soon", b"v", 0, NOW + 5);
    assert!(get(&s, b"old", NOW + 8).is_some());
    assert!(get(&s, b"soon", NOW + 8).is_some());
    // From the second before the flush time (memcached's `oldest_live`)
    // everything stored or read before it is gone.
    assert!(get(&s, b"old", NOW + 9).is_none());
    assert!(get(&s, b"soon", NOW + 9).is_none());
    set(&s, b"after", b"v", 0, NOW + 10);
    assert!(get(&s, b"after", NOW + 11).is_some());
    // A later delayed flush does not resurrect what the first one flushed.
    set(&s, b"x", b"v", 0, NOW + 1);
    s.flush_all(100, NOW + 20);
    assert!(s.entry(b"x", NOW + 21).item().is_none());
    assert!(get(&s, b"after", NOW + 21).is_some());
    assert!(get(&s, b"after", NOW + 120).is_none());
    s.check();
    // An absolute time in the past flushes nothing (memcached's, for a time
    // before it started).
    let s = store(1 << 20, 2);
    set(&s, b"after", b"v", 0, NOW + 200);
    s.flush_all(i64::from(NOW + 100), NOW + 200);
    assert!(get(&s, b"after", NOW + 200).is_some());
    // A delay of one second takes effect at once, on what comes in the
    // same second too (memcached's `oldest_live` is now).
    s.flush_all(1, NOW + 300);
    set(&s, b"same", b"v", 0, NOW + 300);
    assert!(get(&s, b"after", NOW + 300).is_none());
    assert!(get(&s, b"same", NOW + 300).is_none());
    set(&s, b"next", b"v", 0, NOW + 301);
    assert!(get(&s, b"next", NOW + 301).is_some());
    // An immediate flush replaces a pending one: what it stores next stays.
    s.flush_all(1, NOW + 400);
    s.flush_all(0, NOW + 400);
    set(&s, b"kept", b"v", 0, NOW + 400);
    assert!(get(&s, b"next", NOW + 400).is_none());
    assert!(get(&s, b"kept", NOW + 400).is_some());
    s.check();
}

#[test]
fn sweep_reclaims_in_bounded_steps() {
    let s = store(1 << 20, 4);
    for i in 0..100 {
        let exptime = if i % 2 == 0 { 10 } else { 0 };
        set(&s, format!("k{i}").as_bytes(), b"v", exptime, NOW);
    }
    assert_eq!(s.sweep(NOW + 5, 1000), 0);
    let mut reclaimed = 0;
    let mut calls = 0;
    while reclaimed < 50 {
        let got = s.sweep(NOW + 10, 7);
        assert!(got <= 7);
        reclaimed += got;
        calls += 1;
        assert!(calls < 100, "sweep made no progress");
    }
    let st = s.stats();
    assert_eq!(
        (st.curr_items, st.reclaimed, st.expired_unfetched),
        (50, 50, 50)
    );
    assert_eq!(s.sweep(NOW + 10, 1000), 0);
    s.check();
    // Per shard, for a job of that shard's color.
    s.flush_all(0, NOW + 10);
    let total: usize = (0..s.shard_count())
        .map(|i| s.sweep_shard(i, NOW + 10, 1000))
        .sum();
    assert_eq!(total, 50);
    assert_eq!(s.stats().curr_items, 0);
    s.check();
}

#[test]
fn slots_are_reused() {
    let s = store(1 << 20, 1);
    for round in 0..5 {
        for i in 0..100 {
            set(&s, format!("k{i}").as_bytes(), b"v", 0, NOW);
        }
        for i in 0..100 {
            assert!(
                s.entry(format!("k{i}").as_bytes(), NOW).remove(),
                "round {round}"
            );
        }
    }
    let slots = super::lock(&s.cells[0].shard).slots.len();
    assert!(slots <= 116, "{slots} slots for 100 items");
    s.check();
}

#[test]
fn sweeps_compact_idle_slots() {
    let s = store(1 << 20, 1);
    for i in 0..2000 {
        set(&s, format!("k{i}").as_bytes(), b"v", 0, NOW);
    }
    // Keep every tenth item: 90% of the slots go idle.
    for i in (0..2000).filter(|i| i % 10 != 0) {
        assert!(s.entry(format!("k{i}").as_bytes(), NOW).remove());
    }
    let slots = || super::lock(&s.cells[0].shard).slots.len();
    assert_eq!(slots(), 2000);
    let mut calls = 0;
    while slots() * 3 > 200 * 4 + 3 {
        s.sweep(NOW, 64);
        calls += 1;
        assert!(calls < 100, "no progress: {} slots", slots());
    }
    let cap = super::lock(&s.cells[0].shard).slots.capacity();
    assert!(cap < 400, "capacity {cap} after compaction");
    s.check();
    // Every kept item survived the moves (`check` verified the LRU links).
    for i in (0..2000).step_by(10) {
        assert_eq!(
            get(&s, format!("k{i}").as_bytes(), NOW).as_deref(),
            Some(&b"v"[..])
        );
    }
    s.check();
}

#[test]
fn shards_spread_keys() {
    let s = store(64 << 20, 16);
    assert_eq!(s.shard_count(), 16);
    for i in 0..1600 {
        set(&s, format!("key:{i}").as_bytes(), b"v", 0, NOW);
    }
    for shard in 0..16 {
        let n = s.shard_len(shard);
        assert!((50..=150).contains(&n), "shard {shard} has {n} of 1600");
    }
    assert_eq!(s.shard_of(b"key:1"), s.shard_of(b"key:1"));
}

#[test]
fn config_defaults() {
    assert_eq!(StoreConfig::new(64 << 20).shards, 32);
    assert_eq!(StoreConfig::new(1 << 30).shards, 64);
    assert_eq!(StoreConfig::new(1 << 20).shards, 1);
    assert_eq!(
        Store::new(StoreConfig {
            max_bytes: 1 << 20,
            shards: 3
        })
        .shard_count(),
        4
    );
    assert_eq!(
        Store::new(StoreConfig {
            max_bytes: 1 << 20,
            shards: 0
        })
        .shard_count(),
        1
    );
}

#[test]
fn counters_and_reset() {
    let s = store(1 << 20, 2);
    set(&s, b"k", b"v", 0, NOW);
    s.entry(b"k", NOW).count(Counter::GetHits);
    s.count(Counter::StoreTooLarge);
    let st = s.stats();
    assert_eq!(
        (st.get_hits, st.store_too_large, st.limit_maxbytes),
        (1, 1, 1 << 20)
    );
    s.reset_stats();
    let st = s.stats();
    assert_eq!((st.get_hits, st.store_too_large, st.total_items), (0, 0, 0));
    assert_eq!(st.curr_items, 1, "gauges survive a reset");
}

#[test]
fn concurrent_use_is_safe() {
    let s = store(256 * 1024, 8);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let s = &s;
            scope.spawn(move || {
                for i in 0..2000 {
                    let key = format!("t{t}k{}", i % 300);
                    set(s, key.as_bytes(), &[t as u8; 64], 0, NOW);
                    let _ = get(s, key.as_bytes(), NOW);
                    if i % 7 == 0 {
                        s.entry(key.as_bytes(), NOW).remove();
                    }
                }
            });
        }
    });
    s.check();
    assert!(s.stats().bytes as usize <= 256 * 1024);
}

#[derive(Clone, Debug)]
enum Op {
    Set(u8, usize, i8),
    Get(u8),
    Remove(u8),
    Append(u8, usize),
    Tick(u8),
    Sweep(u8),
    Flush(i8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<u8>(), 0usize..600, -2i8..20).prop_map(|(k, n, e)| Op::Set(k, n, e)),
        any::<u8>().prop_map(Op::Get),
        any::<u8>().prop_map(Op::Remove),
        (any::<u8>(), 0usize..300).prop_map(|(k, n)| Op::Append(k, n)),
        (0u8..5).prop_map(Op::Tick),
        (1u8..20).prop_map(Op::Sweep),
        (-1i8..5).prop_map(Op::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random operations keep the shard invariants and the memory limit, and
    /// agree with a model when no eviction happens.
    #[test]
    fn invariants_hold(ops in prop::collection::vec(op(), 1..300)) {
        let limit = 24 * 1024;
        let s = store(limit, 2);
        let mut now = NOW;
        for op in ops {
            match op {
                Op::Set(k, n, e) => {
                    let _ = s.entry(&[b'k', k], now).insert(&vec![k; n], 0, expiry(e.into(), now), None);
                }
                Op::Get(k) => {
                    let key = [b'k', k];
                    let mut e = s.entry(&key, now);
                    e.bump();
                    if let Some(it) = e.item() {
                        prop_assert!(it.exptime == 0 || it.exptime > now);
                        prop_assert!(it.value.iter().all(|&b| b == k));
                    }
                }
                Op::Remove(k) => {
                    s.entry(&[b'k', k], now).remove();
                }
                Op::Append(k, n) => {
                    let _ = s.entry(&[b'k', k], now).rewrite(Edit::Append(&vec![k; n]), None);
                }
                Op::Tick(d) => now += Time::from(d),
                Op::Sweep(n) => {
                    s.sweep(now, n.into());
                }
                Op::Flush(d) => s.flush_all(d.into(), now),
            }
            prop_assert!(s.stats().bytes as usize <= limit);
        }
        s.check();
    }
}
