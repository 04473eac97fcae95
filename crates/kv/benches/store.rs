//! The store alone, without a server: sets and gets per second on one
//! thread, `cargo bench -p duality-kv --bench store`. The paper's item sizes
//! (keys `rec:NNNNNN`, values of 10-103 bytes), uniform random keys, the
//! store's public API only, so the same file measures any version of the
//! store. Under `cargo test --benches` it runs one short round as a smoke
//! test. Prints the median of five rounds per operation. `ITEMS=N` sets the
//! number of items (1,000,000 by default): how far the items outgrow the
//! caches shows in the get rate (`docs/results/store/items-*/`). The same
//! gets once more in groups of 16 (a multi-key get), without and with
//! [`Store::prefetch`] hints 8 keys at a time, as the cache's `get` gives
//! them: what hinting buys once the items no longer fit the caches.
//!
//! Wall-clock figures on a shared machine vary by ±30% from run to run; for
//! a noise-free comparison of two versions, count instructions and simulated
//! cache misses of each phase alone (`set_phase`, `get_phase`) with
//! callgrind (cache simulation on), one round:
//!
//! ```sh
//! ROUNDS=1 valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no \
//!     --toggle-collect='*get_phase*' target/release/deps/store-HASH --bench
//! ```

use duality_kv::{expiry, Store, StoreConfig};
use std::hint::black_box;
use std::time::Instant;

const NOW: u32 = 1_700_000_000;

fn value_size(i: usize) -> usize {
    // 10..=103, spread by a multiplicative hash.
    10 + (i.wrapping_mul(0x9E37_79B9) >> 7) % 94
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Every key once, then `picks` overwrites.
#[inline(never)]
fn set_phase(store: &Store, keys: &[String], picks: &[usize], value: &[u8]) {
    for (i, k) in keys.iter().enumerate() {
        let mut e = store.entry(k.as_bytes(), NOW);
        let _ = e.insert(&value[..value_size(i)], 0, expiry(0, NOW), None);
    }
    for &i in picks {
        let mut e = store.entry(keys[i].as_bytes(), NOW);
        let _ = e.insert(&value[..value_size(i)], 0, expiry(0, NOW), None);
    }
}

/// A get of `key`, marking it read; the bytes found.
#[inline(always)]
fn get_one(store: &Store, key: &str) -> usize {
    let mut e = store.entry(key.as_bytes(), NOW);
    e.bump();
    e.item().map_or(0, |it| black_box(it.value).len())
}

/// A get of each of `picks`; the bytes found.
#[inline(never)]
fn get_phase(store: &Store, keys: &[String], picks: &[usize]) -> usize {
    picks.iter().map(|&i| get_one(store, &keys[i])).sum()
}

/// Gets of `picks` in groups of `group` keys (a multi-key get), with
/// `hint` the next 8 keys of a group hinted with `Store::prefetch` at its
/// first key and every 8th, as the cache's `get` does.
#[inline(never)]
fn mget_phase(store: &Store, keys: &[String], picks: &[usize], group: usize, hint: bool) -> usize {
    let mut found = 0usize;
    for g in picks.chunks(group) {
        for (j, &i) in g.iter().enumerate() {
            if hint && j.is_multiple_of(8) {
                store.prefetch(g.iter().skip(j + 1).take(8).map(|&n| keys[n].as_bytes()));
            }
            found += get_one(store, &keys[i]);
        }
    }
    found
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test") || std::env::var_os("QUICK").is_some();
    let (items, ops, mut rounds) = if quick {
        (10_000, 20_000, 1)
    } else {
        (1_000_000, 2_000_000, 5)
    };
    if let Some(r) = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()) {
        rounds = r;
    }
    let items = std::env::var("ITEMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(items);
    let keys: Vec<String> = (0..items).map(|i| format!("rec:{i:06}")).collect();
    let value = [b'v'; 103];
    // xorshift64: the same key sequence on every run and every version.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let picks: Vec<usize> = (0..ops)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % items as u64) as usize
        })
        .collect();
    let mut sets = Vec::new();
    let mut gets = Vec::new();
    let (mut m0, mut m1) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let store = Store::new(StoreConfig::new(1 << 30));
        let t = Instant::now();
        set_phase(&store, &keys, &picks, &value);
        sets.push((items + ops) as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        let found = get_phase(&store, &keys, &picks);
        gets.push(ops as f64 / t.elapsed().as_secs_f64());
        assert!(found > 0);
        for (hint, v) in [(false, &mut m0), (true, &mut m1)] {
            let t = Instant::now();
            let f = mget_phase(&store, &keys, &picks, 16, hint);
            v.push(ops as f64 / t.elapsed().as_secs_f64());
            assert_eq!(f, found);
        }
    }
    println!(
        "store ({items} items, one thread): set {:.2} M/s, get {:.2} M/s (median of {rounds})",
        median(sets) / 1e6,
        median(gets) / 1e6
    );
    println!(
        "store ({items} items, one thread): keys of gets of 16 {:.2} M/s, hinted 8 at a time \
         (Store::prefetch) {:.2} M/s (median of {rounds})",
        median(m0) / 1e6,
        median(m1) / 1e6
    );
}
