//! `lru_crawler`: memcached's crawler commands, answered as memcached 1.6
//! answers them, on the store's own reclaiming.
//!
//! | command | here |
//! |---|---|
//! | `lru_crawler crawl all\|<c>,<c>…` | reclaims the expired and flushed items of those size classes at once, in the request ([`Store::crawl`]); `OK` |
//! | `lru_crawler metadump all\|hash\|<c>,…` | one `key=… exp=… la=… cas=… fetch=… cls=… size=…` line (ended by `\n`) per live item, then `END` |
//! | `lru_crawler enable` / `disable` | starts / stops the background sweep (it reclaims expired items as memcached's crawler does) |
//! | `lru_crawler sleep <µs>` / `tocrawl <n>` | kept and shown in `stats settings` |
//!
//! `size` is what the store charges for the item (header + key + value) and
//! `cls` its class on memcached's ladder over that size (see
//! [`classes`](crate::store::classes)); memcached's figures count its own
//! item header instead. Items are listed shard by shard, oldest written
//! first within a shard. The server sends a metadump in pieces, each shard
//! locked for a piece at a time (memcached's crawler streams it too), so a
//! dump holds little memory and other requests are served meanwhile.

use super::stats::{strtoul, MAX_CLASS_ID};
use crate::protocol::Tokens;
use crate::store::classes::class_of;
use crate::store::{ItemCursor, Store, Time, MAX_CRAWLER_SLEEP};
use std::io::Write;

const BADCLASS: &[u8] = b"BADCLASS invalid class id\r\n";
const DISABLED: &[u8] = b"CLIENT_ERROR lru crawler disabled\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";

/// Slots examined per lock hold by `lru_crawler crawl`.
const CRAWL_BATCH: usize = 1024;

/// Runs `lru_crawler <args>`, a metadump whole in `out`.
/// `dumping`: whether `metadump` is allowed (memcached's `-X` turns it off).
pub(super) fn lru_crawler(
    store: &Store,
    now: Time,
    args: Tokens<'_>,
    dumping: bool,
    out: &mut Vec<u8>,
) {
    if let Some(set) = lru_crawler_start(store, now, args, dumping, out) {
        let mut at = ItemCursor::default();
        while metadump_piece(store, now, set, &mut at, usize::MAX, out) {}
    }
}

/// Runs `lru_crawler <args>` but a metadump: `Some(classes)` for a metadump
/// to send (by [`metadump_piece`]: a server streams it), `None` once the
/// answer is in `out`.
pub fn lru_crawler_start(
    store: &Store,
    now: Time,
    args: Tokens<'_>,
    dumping: bool,
    out: &mut Vec<u8>,
) -> Option<u64> {
    let mut it = args.iter();
    let (sub, arg, extra) = (it.next(), it.next(), it.next());
    let c = store.crawler();
    let reply: &[u8] = match (sub, arg, extra) {
        (Some(b"crawl"), Some(arg), None) => {
            if !c.enabled() {
                DISABLED
            } else {
                match class_set(arg, false) {
                    None => BADCLASS,
                    Some(0) => b"NOTSTARTED no items to crawl\r\n",
                    Some(set) => {
                        store.crawl(now, set, CRAWL_BATCH);
                        b"OK\r\n"
                    }
                }
            }
        }
        (Some(b"metadump"), Some(arg), None) => {
            if !c.enabled() {
                DISABLED
            } else if !dumping {
                b"ERROR metadump not allowed\r\n"
            } else {
                match class_set(arg, true) {
                    None => BADCLASS,
                    Some(set) => return Some(set),
                }
            }
        }
        (Some(b"tocrawl"), Some(arg), None) => match strtoul(arg) {
            Some(n) => {
                c.set_tocrawl(n);
                b"OK\r\n"
            }
            None => BAD_FORMAT,
        },
        (Some(b"sleep"), Some(arg), None) => match strtoul(arg) {
            Some(us) if us > MAX_CRAWLER_SLEEP => {
                b"CLIENT_ERROR sleep must be one second or less\r\n"
            }
            Some(us) => {
                c.set_sleep(us);
                b"OK\r\n"
            }
            None => BAD_FORMAT,
        },
        (Some(b"enable"), None, None) => {
            if c.set_enabled(true) {
                // memcached cannot start a second crawler thread.
                b"ERROR failed to start lru crawler thread\r\n"
            } else {
                b"OK\r\n"
            }
        }
        (Some(b"disable"), None, None) => {
            c.set_enabled(false);
            b"OK\r\n"
        }
        _ => b"ERROR\r\n",
    };
    out.extend_from_slice(reply);
    None
}

/// The classes `lru_crawler <args>` asks to dump, if it is a metadump
/// ([`lru_crawler_start`] checked the rest).
pub fn metadump_classes(args: Tokens<'_>) -> Option<u64> {
    let mut it = args.iter();
    match (it.next(), it.next(), it.next()) {
        (Some(b"metadump"), Some(arg), None) => class_set(arg, true),
        _ => None,
    }
}

/// `all` (and for metadump `hash`) or a comma-separated list of class ids
/// (empty parts skipped, as `strtok` does), each 1..64, as a bit set; `None`
/// for a bad id.
fn class_set(arg: &[u8], metadump: bool) -> Option<u64> {
    if arg == b"all" || (metadump && arg == b"hash") {
        return Some(!1u64);
    }
    let mut set = 0u64;
    for part in arg.split(|&b| b == b',').filter(|p| !p.is_empty()) {
        match strtoul(part) {
            Some(id) if (1..MAX_CLASS_ID).contains(&id) => set |= 1 << id,
            _ => return None,
        }
    }
    Some(set)
}

/// The budget a server gives each piece of a dump it streams
/// ([`metadump_piece`], [`Cachedump::piece`](crate::command::Cachedump::piece)):
/// a piece ends after the line that takes it past this, and the longest
/// line of either (a 250-byte key %-encoded to 750, every number at its
/// widest) and `END` take under 1 KiB, so a piece never exceeds
/// [`LARGE`](crate::budget::LARGE), the most a connection may hold
/// without charging the buffer budget.
pub const DUMP_PIECE: usize = crate::budget::LARGE - 1024;

/// Items a metadump piece looks at, at most (the shard is locked
/// meanwhile: a dump of a rare class must not hold it for a whole scan).
const PIECE_ITEMS: usize = 16 << 10;

/// Appends memcached's metadump lines for the live items of the classes in
/// `set`, from `at` on, until `out` has grown by `budget` bytes or
/// 16,384 items were looked at (`PIECE_ITEMS`); `at` then says where the next
/// piece starts. Returns false once the dump has ended (its `END` is
/// appended).
pub fn metadump_piece(
    store: &Store,
    now: Time,
    set: u64,
    at: &mut ItemCursor,
    budget: usize,
    out: &mut Vec<u8>,
) -> bool {
    let start = out.len();
    let mut looked = 0;
    let more = store.visit_items(now, at, |item, charge| {
        looked += 1;
        let class = class_of(charge);
        if set & (1 << class) != 0 {
            out.extend_from_slice(b"key=");
            crate::watch::uriencode(item.key, out);
            let exp = if item.exptime == 0 {
                -1
            } else {
                i64::from(item.exptime)
            };
            let fetch = if item.fetched { "yes" } else { "no" };
            // Writing into a Vec cannot fail.
            let _ = writeln!(
                out,
                " exp={exp} la={} cas={} fetch={fetch} cls={class} size={charge}",
                item.last_access, item.cas
            );
        }
        out.len() - start < budget && looked < PIECE_ITEMS
    });
    if !more {
        out.extend_from_slice(b"END\r\n");
    }
    more
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{expiry, ItemCursor, StoreConfig};

    /// Pieces stay within what a connection holds uncharged, even when
    /// every line is as long as a line gets.
    #[test]
    fn metadump_pieces_stay_under_the_uncharged_size() {
        let store = Store::new(StoreConfig {
            max_bytes: 8 << 20,
            shards: 2,
            evictions: true,
        });
        let now = 1_700_000_000;
        let items = 400;
        for i in 0..items {
            // 250 bytes, every one %-encoded.
            let mut key = format!("{i:06}").into_bytes();
            key.resize(250, b' ');
            let mut e = store.entry(&key, now);
            let cas = e.insert(b"v", u32::MAX, expiry(1_000_000, now), None);
            assert!(cas.is_ok());
        }
        let (mut at, mut out, mut lines, mut pieces) = (ItemCursor::default(), Vec::new(), 0, 0);
        loop {
            out.clear();
            let more = metadump_piece(&store, now, !1, &mut at, DUMP_PIECE, &mut out);
            assert!(
                out.len() <= crate::budget::LARGE,
                "piece of {} bytes",
                out.len()
            );
            lines += out.iter().filter(|&&b| b == b'\n').count();
            pieces += 1;
            if !more {
                break;
            }
        }
        assert!(out.ends_with(b"END\r\n"));
        assert_eq!(lines, items + 1, "every item once, then END");
        assert!(pieces >= 5, "{pieces} pieces");
    }

    #[test]
    fn class_lists() {
        assert_eq!(class_set(b"all", false), Some(!1u64));
        assert_eq!(class_set(b"hash", false), None);
        assert_eq!(class_set(b"1,3", false), Some(0b1010));
        assert_eq!(class_set(b",1,,", false), Some(0b10));
        assert_eq!(class_set(b"01", false), Some(0b10));
        assert_eq!(class_set(b"0", false), None);
        assert_eq!(class_set(b"64", false), None);
        assert_eq!(class_set(b"63", false), Some(1 << 63));
        assert_eq!(class_set(b"1,x", false), None);
        assert_eq!(class_set(b",", false), Some(0));
    }
}
