//! `stats`, `stats settings`, `stats items`, `stats slabs`, `stats reset`, and
//! groups the server adds through [`ExecContext::extra_stats`].

use super::ExecContext;
use crate::protocol::Tokens;
use crate::store::{Store, Time};
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
            write_stat(out, "evictions", "on");
            write_stat(out, "cas_enabled", "yes");
            ctx.extra_stats("settings", out);
        }
        Some(b"items") => {
            let s = store.stats();
            if s.curr_items > 0 {
                write_stat(out, "items:1:number", s.curr_items);
                write_stat(out, "items:1:evicted", s.evictions);
                write_stat(out, "items:1:evicted_unfetched", s.evicted_unfetched);
                write_stat(out, "items:1:expired_unfetched", s.expired_unfetched);
                write_stat(out, "items:1:reclaimed", s.reclaimed);
            }
        }
        Some(b"slabs") => {
            let s = store.stats();
            write_stat(out, "active_slabs", u8::from(s.curr_items > 0));
            write_stat(out, "total_malloced", s.bytes);
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
    write_stat(out, "pid", srv.pid);
    write_stat(out, "uptime", srv.uptime);
    write_stat(out, "time", now);
    write_stat(out, "version", ctx.version());
    write_stat(out, "pointer_size", usize::BITS);
    write_rusage(out, "rusage_user", srv.rusage_user);
    write_rusage(out, "rusage_system", srv.rusage_system);
    write_stat(out, "max_connections", srv.max_connections);
    write_stat(out, "curr_connections", srv.curr_connections);
    write_stat(out, "total_connections", srv.total_connections);
    for (name, v) in [
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
        ("bytes_read", srv.bytes_read),
        ("bytes_written", srv.bytes_written),
        ("limit_maxbytes", s.limit_maxbytes),
        ("threads", srv.threads),
        ("bytes", s.bytes),
        ("curr_items", s.curr_items),
        ("total_items", s.total_items),
        ("expired_unfetched", s.expired_unfetched),
        ("evicted_unfetched", s.evicted_unfetched),
        ("evictions", s.evictions),
        ("reclaimed", s.reclaimed),
    ] {
        write_stat(out, name, v);
    }
    ctx.extra_stats("", out);
}
