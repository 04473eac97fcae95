//! `stats`, `stats settings`, `stats items`, `stats slabs`, `stats sizes`,
//! `stats detail`, `stats cachedump`, `stats reset`, `stats extstore` (empty:
//! there is no external store), and groups the server
//! adds through [`ExecContext::extra_stats`] (`stats conns`).
//!
//! # Per-class figures
//!
//! The store has no slabs; `items` and `slabs` report memcached's default
//! size classes laid over the bytes each item is charged (see
//! [`classes`](crate::store::classes)). What the fields mean here:
//!
//! | field | in duality |
//! |---|---|
//! | `items:<c>:number`, `number_cold` | items of the class (all items are in one LRU per shard: memcached's "cold"; `number_hot`, `number_warm`, `age_hot`, `age_warm` are 0) |
//! | `items:<c>:age` | seconds since the class's least recently used item was stored or fetched |
//! | `items:<c>:mem_requested` | bytes of its items (32-byte header + key + value) |
//! | `items:<c>:evicted`, `evicted_nonzero`, `evicted_unfetched`, `evicted_time` | live items evicted from an LRU tail (with an expiry; never fetched); age of the last one |
//! | `items:<c>:outofmemory` | stores refused because the item exceeds a shard's share of memory |
//! | `items:<c>:reclaimed`, `expired_unfetched` | dead items reclaimed where their memory is taken (at the tail, by the sweep), as memcached; a read finding one counts in `get_expired`/`get_flushed` only |
//! | `items:<c>:crawler_reclaimed`, `crawler_items_checked` | what the background sweep and `lru_crawler crawl` reclaimed and examined |
//! | `items:<c>:evicted_active` | evicted items read since they were written or last moved (their second chance found no room) |
//! | `items:<c>:hits_to_cold` | get and touch hits (the one LRU is "cold"); other `hits_to_*`, `moves_*`, `tailrepairs`, `lrutail_reflocked`, `direct_reclaims` are 0 |
//! | `<c>:chunk_size`, `chunks_per_page` | memcached's ladder for 1 MiB pages |
//! | `<c>:used_chunks` | items of the class |
//! | `<c>:total_pages`, `total_chunks`, `free_chunks` | the pages memcached would need for those items, their chunks, the chunks left over (`free_chunks_end` is 0) |
//! | `<c>:cmd_set` | items stored in the class (counted when linked) |
//! | `<c>:get_hits` … `touch_hits` | hits on items of the class |
//! | `active_slabs` | classes listed |
//! | `total_malloced` | bytes the store holds: its segments and hash tables (everything the memory limit counts) |

use super::ExecContext;
use crate::num::parse_u64;
use crate::protocol::Tokens;
use crate::store::classes::{chunk_size, chunks_per_page};
use crate::store::{ClassStats, ItemCursor, Store, Time};
use std::fmt::Display;
use std::io::Write;
use std::time::Duration;

/// Appends `STAT <name> <value>\r\n`.
pub fn write_stat(out: &mut Vec<u8>, name: &str, value: impl Display) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// memcached's `seconds.microseconds` rusage format.
fn write_rusage(out: &mut Vec<u8>, name: &str, d: Duration) {
    write_stat(
        out,
        name,
        format_args!("{}.{:06}", d.as_secs(), d.subsec_micros()),
    );
}

fn yes_no(on: bool) -> &'static str {
    if on {
        "yes"
    } else {
        "no"
    }
}

pub(super) fn stats<C: ExecContext + ?Sized>(
    store: &Store,
    ctx: &C,
    now: Time,
    args: Tokens<'_>,
    out: &mut Vec<u8>,
) {
    match args.first() {
        None => general(store, ctx, now, out),
        Some(b"settings") => {
            write_stat(out, "maxbytes", store.max_bytes());
            write_stat(
                out,
                "evictions",
                if store.evictions() { "on" } else { "off" },
            );
            write_stat(out, "cas_enabled", "yes");
            write_stat(out, "flush_enabled", yes_no(ctx.flush_all_enabled()));
            write_stat(out, "dump_enabled", yes_no(ctx.dumping_enabled()));
            write_stat(out, "stat_key_prefix", ":");
            write_stat(
                out,
                "detail_enabled",
                yes_no(store.prefix_stats().enabled()),
            );
            let c = store.crawler();
            write_stat(out, "lru_crawler", yes_no(c.enabled()));
            write_stat(out, "lru_crawler_sleep", c.sleep());
            write_stat(out, "lru_crawler_tocrawl", c.tocrawl());
            ctx.extra_stats("settings", out);
        }
        Some(b"items") => items(&store.class_stats(now, true), out),
        Some(b"slabs") => slabs(&store.class_stats(now, false), store, out),
        // memcached answers this unless started with `-o track_sizes`.
        Some(b"sizes") => write_stat(out, "sizes_status", "disabled"),
        // memcached (built with extstore, as Debian's is) with no external
        // store configured: an empty group. There is none here either.
        Some(b"extstore") => {}
        Some(b"detail") => {
            // The answer is whole: no END after it.
            detail(store, args.iter().nth(1).unwrap_or_default(), out);
            return;
        }
        Some(b"cachedump") => {
            if ctx.dumping_enabled() {
                cachedump(store, now, args, out);
            } else {
                out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
            }
            return;
        }
        Some(b"reset") => {
            store.reset_stats();
            ctx.reset_stats();
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        Some(group) => {
            let start = out.len();
            let known = std::str::from_utf8(group).is_ok_and(|g| ctx.extra_stats(g, out));
            if !known {
                out.truncate(start);
                out.extend_from_slice(b"ERROR\r\n");
                return;
            }
        }
    }
    out.extend_from_slice(b"END\r\n");
}

fn general<C: ExecContext + ?Sized>(store: &Store, ctx: &C, now: Time, out: &mut Vec<u8>) {
    let srv = ctx.server_stats();
    let s = store.stats();
    let f = store.footprint();
    let w = store.watch().stats();
    write_stat(out, "pid", srv.pid);
    write_stat(out, "uptime", srv.uptime);
    write_stat(out, "time", now);
    write_stat(out, "version", ctx.version());
    write_stat(out, "pointer_size", usize::BITS);
    write_rusage(out, "rusage_user", srv.rusage_user);
    write_rusage(out, "rusage_system", srv.rusage_system);
    // memcached's order. Of its mechanisms that have no counterpart here,
    // the fields that tell a state (a listener switched off at the
    // connection limit, SASL) read as memcached reads them with those off;
    // the segmented LRU's counters (moves_*) are left out.
    for (name, v) in [
        ("max_connections", srv.max_connections),
        ("curr_connections", srv.curr_connections),
        ("total_connections", srv.total_connections),
        ("rejected_connections", srv.rejected_connections),
        ("cmd_get", s.cmd_get),
        ("cmd_set", s.cmd_set),
        ("cmd_flush", s.cmd_flush),
        ("cmd_touch", s.cmd_touch),
        ("cmd_meta", s.cmd_meta),
        ("get_hits", s.get_hits),
        ("get_misses", s.get_misses),
        ("get_expired", s.get_expired),
        ("get_flushed", s.get_flushed),
        ("delete_misses", s.delete_misses),
        ("delete_hits", s.delete_hits),
        ("incr_misses", s.incr_misses),
        ("incr_hits", s.incr_hits),
        ("decr_misses", s.decr_misses),
        ("decr_hits", s.decr_hits),
        ("cas_misses", s.cas_misses),
        ("cas_hits", s.cas_hits),
        ("cas_badval", s.cas_badval),
        ("touch_hits", s.touch_hits),
        ("touch_misses", s.touch_misses),
        ("store_too_large", s.store_too_large),
        ("store_no_memory", s.store_no_memory),
        ("auth_cmds", srv.auth_cmds),
        ("auth_errors", srv.auth_errors),
    ] {
        write_stat(out, name, v);
    }
    if let Some(kicks) = srv.idle_kicks {
        write_stat(out, "idle_kicks", kicks);
    }
    for (name, v) in [
        ("bytes_read", srv.bytes_read),
        ("bytes_written", srv.bytes_written),
        ("limit_maxbytes", s.limit_maxbytes),
        // Connections over the limit are accepted and told so
        // (`rejected_connections`); the listener is never switched off.
        ("accepting_conns", 1),
        ("listen_disabled_num", 0),
        ("time_in_listen_disabled_us", 0),
        ("threads", srv.threads),
        ("conn_yields", srv.conn_yields),
        ("hash_bytes", f.tables as u64),
        // A shard's table grows in place, under its lock.
        ("hash_is_expanding", 0),
        ("malloc_fails", f.malloc_fails),
        // `watch`: a line is offered to the watchers as it is made, never
        // dropped before.
        ("log_worker_dropped", 0),
        ("log_worker_written", w.written),
        ("log_watcher_skipped", w.skipped),
        ("log_watcher_sent", w.sent),
        ("log_watchers", w.watchers),
        ("bytes", s.bytes),
        ("curr_items", s.curr_items),
        ("total_items", s.total_items),
        ("expired_unfetched", s.expired_unfetched),
        ("evicted_unfetched", s.evicted_unfetched),
        ("evicted_active", s.evicted_active),
        ("evictions", s.evictions),
        ("reclaimed", s.reclaimed),
        ("crawler_reclaimed", s.crawler_reclaimed),
        ("crawler_items_checked", s.crawler_items_checked),
    ] {
        write_stat(out, name, v);
    }
    ctx.extra_stats("", out);
}

/// `stats items`: one block per class holding items, in memcached's field order.
fn items(classes: &[ClassStats], out: &mut Vec<u8>) {
    for c in classes.iter().filter(|c| c.number > 0) {
        let id = c.id;
        let hits = c.get_hits + c.touch_hits;
        for (name, v) in [
            ("number", c.number),
            ("number_hot", 0),
            ("number_warm", 0),
            ("number_cold", c.number),
            ("age_hot", 0),
            ("age_warm", 0),
            ("age", c.age),
            ("mem_requested", c.mem_requested),
            ("evicted", c.evicted),
            ("evicted_nonzero", c.evicted_nonzero),
            ("evicted_time", c.evicted_time),
            ("outofmemory", c.outofmemory),
            ("tailrepairs", 0),
            ("reclaimed", c.reclaimed),
            ("expired_unfetched", c.expired_unfetched),
            ("evicted_unfetched", c.evicted_unfetched),
            ("evicted_active", c.evicted_active),
            ("crawler_reclaimed", c.crawler_reclaimed),
            ("crawler_items_checked", c.crawler_items_checked),
            ("lrutail_reflocked", 0),
            ("moves_to_cold", 0),
            ("moves_to_warm", 0),
            ("moves_within_lru", 0),
            ("direct_reclaims", 0),
            ("hits_to_hot", 0),
            ("hits_to_warm", 0),
            ("hits_to_cold", hits),
            ("hits_to_temp", 0),
        ] {
            write_stat(out, &format!("items:{id}:{name}"), v);
        }
    }
}

/// `stats slabs`: one block per class that has held items, then the totals.
fn slabs(classes: &[ClassStats], store: &Store, out: &mut Vec<u8>) {
    for c in classes {
        let id = c.id;
        let per_page = chunks_per_page(id) as u64;
        let pages = c.number.div_ceil(per_page);
        let total = pages * per_page;
        for (name, v) in [
            ("chunk_size", chunk_size(id) as u64),
            ("chunks_per_page", per_page),
            ("total_pages", pages),
            ("total_chunks", total),
            ("used_chunks", c.number),
            ("free_chunks", total - c.number),
            ("free_chunks_end", 0),
            ("get_hits", c.get_hits),
            ("cmd_set", c.cmd_set),
            ("delete_hits", c.delete_hits),
            ("incr_hits", c.incr_hits),
            ("decr_hits", c.decr_hits),
            ("cas_hits", c.cas_hits),
            ("cas_badval", c.cas_badval),
            ("touch_hits", c.touch_hits),
        ] {
            write_stat(out, &format!("{id}:{name}"), v);
        }
    }
    write_stat(out, "active_slabs", classes.len());
    write_stat(out, "total_malloced", store.memory() as u64);
}

/// `stats detail on|off|dump`, answered as memcached does.
fn detail(store: &Store, arg: &[u8], out: &mut Vec<u8>) {
    let p = store.prefix_stats();
    match arg {
        b"on" | b"off" => {
            p.set_enabled(arg == b"on");
            out.extend_from_slice(b"OK\r\n");
        }
        b"dump" => p.dump(out),
        _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
    }
}

/// memcached's `safe_strtoul` on a 64-bit host: digits, truncated to 32 bits.
pub(super) fn strtoul(t: &[u8]) -> Option<u32> {
    parse_u64(t).map(|v| v as u32)
}

/// memcached's class ids run below this (`MAX_NUMBER_OF_SLAB_CLASSES`).
pub(super) const MAX_CLASS_ID: u32 = 64;

/// The most bytes of `ITEM` lines `stats cachedump` sends (memcached's 2 MB).
const CACHEDUMP_MAX: usize = 2 * 1024 * 1024;

/// `stats cachedump <class> <limit>`: `ITEM <key> [<bytes> b; <exptime> s]`
/// for up to `limit` live items of the class (0: all), most recently used
/// first within each shard, at most 2 MB of lines, then `END`; whole in
/// `out` (a server streams it by [`Cachedump::piece`] instead).
fn cachedump(store: &Store, now: Time, args: Tokens<'_>, out: &mut Vec<u8>) {
    match Cachedump::start(args) {
        Ok(mut dump) => while dump.piece(store, now, usize::MAX, out) {},
        Err(e) => out.extend_from_slice(e),
    }
}

/// Items one [`Cachedump::piece`] looks at, at most: the shard is locked
/// meanwhile, and a dump of a rare class looks at every item of the
/// store (a million items take tens of milliseconds), so a server sends
/// it a piece at a time and lets its loop serve others in between.
const CACHEDUMP_PIECE_ITEMS: usize = 16 << 10;

/// A `stats cachedump` in progress: what it lists and how far it got.
#[derive(Debug)]
pub struct Cachedump {
    class: usize,
    limit: u32,
    shown: u32,
    bytes: usize,
    at: ItemCursor,
}

impl Cachedump {
    /// The dump `stats cachedump <args>` asks for, or the error line
    /// memcached answers (bad arguments, a class id out of range).
    pub fn start(args: Tokens<'_>) -> Result<Cachedump, &'static [u8]> {
        let mut it = args.iter().skip(1);
        let (Some(id), Some(limit)) = (it.next(), it.next()) else {
            return Err(b"CLIENT_ERROR bad command line\r\n");
        };
        let (Some(id), Some(limit)) = (strtoul(id), strtoul(limit)) else {
            return Err(b"CLIENT_ERROR bad command line format\r\n");
        };
        if id >= MAX_CLASS_ID {
            return Err(b"CLIENT_ERROR Illegal slab id\r\n");
        }
        Ok(Cachedump {
            class: id as usize,
            limit,
            shown: 0,
            bytes: 0,
            at: ItemCursor::newest_first(),
        })
    }

    /// Appends the next lines, until `out` has grown by `budget` bytes or
    /// `CACHEDUMP_PIECE_ITEMS` (16 Ki) items were looked at. Returns false once
    /// the dump has ended (its `END` is appended).
    pub fn piece(&mut self, store: &Store, now: Time, budget: usize, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        let mut looked = 0;
        let mut full = false;
        let more = store.visit_items(now, &mut self.at, |item, charge| {
            looked += 1;
            if crate::store::classes::class_of(charge) == self.class {
                let line_start = out.len();
                out.extend_from_slice(b"ITEM ");
                // A key stored in binary (the binary protocol, meta's `b`)
                // may hold spaces, line feeds or NULs, which would end the
                // listing early or forge lines: such a key is shown
                // %-encoded, as `lru_crawler metadump` shows every key.
                // Text keys cannot hold those bytes: shown as is, other
                // control bytes included, as memcached shows them.
                if item.key.iter().any(|&b| matches!(b, b' ' | b'\n' | 0)) {
                    crate::watch::uriencode(item.key, out);
                } else {
                    out.extend_from_slice(item.key);
                }
                let _ = write!(out, " [{} b; {} s]\r\n", item.value.len(), item.exptime);
                let line = out.len() - line_start;
                if self.bytes + line + 6 > CACHEDUMP_MAX {
                    out.truncate(line_start);
                    full = true;
                    return false;
                }
                self.bytes += line;
                self.shown += 1;
                if self.limit != 0 && self.shown >= self.limit {
                    full = true;
                    return false;
                }
            }
            out.len() - start < budget && looked < CACHEDUMP_PIECE_ITEMS
        });
        if full || !more {
            out.extend_from_slice(b"END\r\n");
            return false;
        }
        true
    }
}
