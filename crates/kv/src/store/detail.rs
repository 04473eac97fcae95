//! `stats detail`: per-prefix counts of gets, hits, sets and deletes, as
//! memcached keeps them (`stats detail on|off|dump`).
//!
//! A key's prefix is what comes before its first `:` (memcached's default
//! `-D :`); keys without one are not counted. Off by default; while off, the
//! one cost on the request path is a relaxed load of a flag. While on, each
//! counted request takes one store-wide mutex (as memcached's prefix stats
//! take one lock): turn it on to look, then off.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

/// The prefix delimiter (memcached's `-D` default).
pub const PREFIX_DELIMITER: u8 = b':';

#[derive(Clone, Copy, Default)]
struct Counts {
    get: u64,
    hit: u64,
    set: u64,
    del: u64,
}

/// Per-prefix counters behind an on/off switch.
#[derive(Default)]
pub struct PrefixStats {
    enabled: AtomicBool,
    map: Mutex<BTreeMap<Vec<u8>, Counts>>,
}

impl PrefixStats {
    /// Whether counting is on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// `stats detail on` / `off` (the counts are kept either way).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Relaxed);
    }

    fn record(&self, key: &[u8], f: impl FnOnce(&mut Counts)) {
        if !self.enabled() {
            return;
        }
        let Some(end) = memchr::memchr(PREFIX_DELIMITER, key) else {
            return;
        };
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(&key[..end]) {
            Some(c) => f(c),
            None => f(map.entry(key[..end].to_vec()).or_default()),
        }
    }

    /// A retrieval of `key` (found or not).
    #[inline]
    pub fn record_get(&self, key: &[u8], hit: bool) {
        self.record(key, |c| {
            c.get += 1;
            c.hit += u64::from(hit);
        });
    }

    /// A storage command for `key`.
    #[inline]
    pub fn record_set(&self, key: &[u8]) {
        self.record(key, |c| c.set += 1);
    }

    /// A deletion of `key` (found or not).
    #[inline]
    pub fn record_delete(&self, key: &[u8]) {
        self.record(key, |c| c.del += 1);
    }

    /// Forgets every prefix (`stats reset`, as memcached).
    pub fn clear(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Appends memcached's dump: `PREFIX <p> get <n> hit <n> set <n> del
    /// <n>\r\n` per prefix (in byte order of the prefixes), then `END\r\n`.
    pub fn dump(&self, out: &mut Vec<u8>) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for (p, c) in map.iter() {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(p);
            // Writing into a Vec cannot fail.
            let _ = write!(
                out,
                " get {} hit {} set {} del {}\r\n",
                c.get, c.hit, c.set, c.del
            );
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_prefix_only_while_on() {
        let p = PrefixStats::default();
        p.record_get(b"a:1", true);
        p.set_enabled(true);
        p.record_get(b"a:1", true);
        p.record_get(b"a:2", false);
        p.record_set(b"a:x");
        p.record_delete(b"b:1");
        p.record_get(b"nocolon", true);
        let mut out = Vec::new();
        p.dump(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PREFIX a get 2 hit 1 set 1 del 0\r\nPREFIX b get 0 hit 0 set 0 del 1\r\nEND\r\n"
        );
        p.clear();
        let mut out = Vec::new();
        p.dump(&mut out);
        assert_eq!(out, b"END\r\n");
    }
}
