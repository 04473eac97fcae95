//! The meta commands `mg`, `ms`, `md`, `ma`, `me`.
//!
//! Responses are a two-letter code and the requested return flags in the order
//! the client gave them (`O` opaque and `k` key echoed on every code). Quiet
//! mode (`q`) suppresses only the nominal code: `EN` for `mg`, `HD` for the
//! others; errors are always sent.

use super::classic::{apply, Value, NON_NUMERIC};
use super::{log_store, Outcome};
use crate::num::{fmt_u64, parse_counter, push_i64, push_u64};
use crate::protocol::{decode_key, item_size, ArithOp, MetaFlags, KEY_MAX_LENGTH};
use crate::store::classes::class_of;
use crate::store::{expiry, Counter, Edit, Store, Time, WriteError, SHARE_MIN, STALE, WIN_SENT};

fn flag(out: &mut Vec<u8>, c: u8) {
    out.push(b' ');
    out.push(c);
}

/// ` k<key>` (and ` b` for a base64 key, as memcached does).
fn ret_key(out: &mut Vec<u8>, raw_key: &[u8], f: &MetaFlags<'_>) {
    flag(out, b'k');
    out.extend_from_slice(raw_key);
    if f.base64() {
        out.extend_from_slice(b" b");
    }
}

/// ` <token>`: the opaque token comes back as sent.
fn echo(out: &mut Vec<u8>, token: &[u8]) {
    out.push(b' ');
    out.extend_from_slice(token);
}

/// The code, then only the `O` and `k` flags, then `\r\n`.
fn code_line(out: &mut Vec<u8>, code: &[u8], raw_key: &[u8], f: &MetaFlags<'_>) {
    out.extend_from_slice(code);
    for t in f.tokens() {
        match t[0] {
            b'O' => echo(out, t),
            b'k' => ret_key(out, raw_key, f),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Remaining TTL as memcached reports it: -1 for "never"; 0 for an item
/// a negative `T` has just expired (memcached prints its unsigned
/// wrap-around, duality printed minus the clock).
fn ttl_left(exptime: Time, now: Time) -> i64 {
    if exptime == 0 {
        -1
    } else {
        (i64::from(exptime) - i64::from(now)).max(0)
    }
}

/// Protocol TTL from an optional flag (absent = 0 = never).
fn ttl(t: Option<i32>, now: Time) -> Time {
    expiry(t.unwrap_or(0).into(), now)
}

/// `mg <key> <flags>*`. A value the store shares goes as `answer` takes it
/// (see [`super::Answer`]).
pub(super) fn get<O: super::Answer + ?Sized>(
    store: &Store,
    now: Time,
    raw_key: &[u8],
    f: &MetaFlags<'_>,
    answer: &mut O,
) {
    let out = answer.bytes();
    let mut buf = [0u8; KEY_MAX_LENGTH];
    let key = decode_key(raw_key, f.base64(), &mut buf);
    let mut e = store.entry(key, now);
    let mut created = false;
    if let (false, Some(n)) = (e.exists(), f.vivify()) {
        // Vivify: an empty item, and this client wins the right to recache.
        created = e.insert(b"", 0, ttl(Some(n), now), f.new_cas()).is_ok() && e.exists();
    }
    let Some(item) = e.item() else {
        e.count(Counter::CmdGet);
        e.count(Counter::GetMisses);
        if !f.quiet() {
            code_line(out, b"EN", raw_key, f);
        }
        return;
    };
    // `C` means nothing to `mg` (memcached ignores it): the value goes.
    let send_value = f.has(b'v');
    if send_value {
        out.extend_from_slice(b"VA ");
        push_u64(out, item.value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    // Flags act in the order sent, as in memcached: a vivified item has no
    // TTL until its `N` (a `t` before it reports -1), and the later of `N`
    // and `T` sets the TTL.
    let mut exptime = if created { 0 } else { item.exptime };
    let mut ttl_set = false;
    let mut won = false;
    for t in f.tokens() {
        match t[0] {
            b'T' => {
                exptime = ttl(f.ttl(), now);
                ttl_set = true;
            }
            b'N' if created => {
                exptime = ttl(f.vivify(), now);
                ttl_set = true;
                won = true;
            }
            b'R' => {
                won |=
                    !item.win_sent && !created && exptime != 0 && exptime < ttl(f.recache(), now);
            }
            b's' => {
                flag(out, b's');
                push_u64(out, item.value.len() as u64);
            }
            b't' => {
                flag(out, b't');
                push_i64(out, ttl_left(exptime, now));
            }
            b'c' => {
                flag(out, b'c');
                push_u64(out, item.cas);
            }
            b'f' => {
                flag(out, b'f');
                push_u64(out, item.flags.into());
            }
            b'l' => {
                flag(out, b'l');
                push_u64(out, now.saturating_sub(item.last_access).into());
            }
            b'h' => {
                flag(out, b'h');
                out.push(if item.fetched { b'1' } else { b'0' });
            }
            b'O' => echo(out, t),
            // As memcached: a hit's key as stored, in base64 (and `b`) when
            // `ms` stored it so, whatever this request's `b` says.
            b'k' => {
                flag(out, b'k');
                if item.key_binary {
                    crate::base64::encode(item.key, out);
                    out.extend_from_slice(b" b");
                } else {
                    out.extend_from_slice(item.key);
                }
            }
            _ => {}
        }
    }
    // Z: someone else already holds the win token. X: stale, and the first
    // client to see it stale wins.
    if item.win_sent {
        out.extend_from_slice(b" Z");
    }
    if item.stale {
        out.extend_from_slice(b" X");
        won |= !item.win_sent;
    }
    if won {
        out.extend_from_slice(b" W");
    }
    out.extend_from_slice(b"\r\n");
    if send_value {
        match O::SHARES && item.value.len() >= SHARE_MIN {
            true => match e.share_value() {
                Some(value) => answer.share(value),
                None => answer.bytes().extend_from_slice(item.value),
            },
            false => out.extend_from_slice(item.value),
        }
        answer.bytes().extend_from_slice(b"\r\n");
    }
    if ttl_set {
        e.set_exptime(exptime);
    }
    if f.ttl().is_some() {
        e.count(Counter::CmdTouch);
        e.count(Counter::TouchHits);
    } else {
        e.count(Counter::CmdGet);
        e.count(Counter::GetHits);
    }
    if won {
        e.set_win_sent(true);
    }
    if !f.has(b'u') {
        e.bump();
    }
}

/// How a supplied CAS compares with the item's (memcached's `cas_result`).
#[derive(PartialEq)]
enum CasResult {
    /// No CAS supplied (or 0).
    None,
    Match,
    /// Lower than the item's, with `I`: store, but as stale.
    Stale,
    BadVal,
}

enum SetResult {
    /// Stored, with this CAS unique.
    Stored(u64),
    /// Not stored: `NS`, `EX` or `NF`.
    Code(&'static [u8]),
    /// The item does not fit in its shard.
    NoMemory,
}

/// `ms <key> <datalen> <flags>*`.
pub(super) fn set(
    store: &Store,
    now: Time,
    raw_key: &[u8],
    value: Value<'_>,
    f: &MetaFlags<'_>,
    out: &mut Vec<u8>,
) {
    let mut buf = [0u8; KEY_MAX_LENGTH];
    let key = decode_key(raw_key, f.base64(), &mut buf);
    let mut e = store.entry(key, now);
    e.count(Counter::CmdSet);
    let mode = f.mode().unwrap_or(b'S');
    let client_flags = f.client_flags().unwrap_or(0);
    let append = matches!(mode, b'A' | b'P');
    let vivify = append && f.vivify().is_some();
    let exptime = if vivify {
        ttl(f.vivify(), now)
    } else {
        ttl(f.ttl(), now)
    };
    // A CAS turns set and replace into the `cas` command.
    let cas_mode = f.compare_cas().is_some() && matches!(mode, b'S' | b'R');
    let compare = f.compare_cas().unwrap_or(0);
    let vlen = value.len();

    let stored = |r: Result<u64, WriteError>| match r {
        Ok(cas) => SetResult::Stored(cas),
        // An append past the item size limit is not stored, as in memcached.
        Err(WriteError::TooLarge) => SetResult::Code(b"NS"),
        Err(_) => SetResult::NoMemory,
    };
    let result = match e.item().map(|i| (i.cas, i.exptime, i.win_sent)) {
        Some((cas, old_exptime, win_sent)) => {
            let cas_res = if compare == 0 {
                CasResult::None
            } else if compare == cas {
                CasResult::Match
            } else if f.has(b'I') && compare < cas {
                CasResult::Stale
            } else {
                CasResult::BadVal
            };
            if mode == b'E' {
                e.promote();
                SetResult::Code(b"NS")
            } else if cas_mode {
                match cas_res {
                    CasResult::Match => {
                        e.count(Counter::CasHits);
                        stored(value.put(&mut e, client_flags, exptime, f.new_cas(), 0))
                    }
                    CasResult::Stale => {
                        // Replace the value but keep the TTL, mark it stale and
                        // keep the win token state.
                        e.count(Counter::CasHits);
                        let bits = STALE | if win_sent { WIN_SENT } else { 0 };
                        stored(value.put(&mut e, client_flags, old_exptime, f.new_cas(), bits))
                    }
                    CasResult::None | CasResult::BadVal => {
                        e.count(Counter::CasBadval);
                        SetResult::Code(b"EX")
                    }
                }
            } else if append {
                // (Never staged: the old value goes in the new item too.)
                match (cas_res, value) {
                    (CasResult::None | CasResult::Match, Value::Bytes(value)) => {
                        let edit = if mode == b'A' {
                            Edit::Append(value)
                        } else {
                            Edit::Prepend(value)
                        };
                        e.rewrite(edit, f.new_cas())
                            .map_or(SetResult::Code(b"NS"), SetResult::Stored)
                    }
                    (CasResult::None | CasResult::Match, Value::Staged(_)) => {
                        debug_assert!(false, "an append's value is never staged");
                        SetResult::Code(b"NS")
                    }
                    _ => SetResult::Code(b"EX"),
                }
            } else {
                stored(value.put(&mut e, client_flags, exptime, f.new_cas(), 0))
            }
        }
        None if cas_mode => {
            e.count(Counter::CasMisses);
            SetResult::Code(b"NF")
        }
        None if matches!(mode, b'S' | b'E') || vivify => {
            stored(value.put(&mut e, client_flags, exptime, f.new_cas(), 0))
        }
        None => SetResult::Code(b"NS"),
    };
    if matches!(result, SetResult::Stored(_)) && f.base64() {
        e.set_key_binary();
    }
    if let SetResult::NoMemory = result {
        // As memcached: a failed store drops the old item too.
        e.refused_for_memory();
        e.remove();
    }
    if store.watch().wants(crate::watch::MUTATIONS) {
        let outcome = match result {
            SetResult::Stored(_) => Outcome::Stored,
            SetResult::Code(b"EX") => Outcome::Exists,
            SetResult::Code(b"NF") => Outcome::NotFound,
            SetResult::Code(_) => Outcome::NotStored,
            SetResult::NoMemory => Outcome::NoMemory,
        };
        log_store(&e, f.store_command().name(), outcome, exptime, vlen);
    }
    let (code, cas) = match result {
        SetResult::Stored(cas) => (&b"HD"[..], Some(cas)),
        SetResult::Code(code) => (code, None),
        SetResult::NoMemory => {
            // (The old item went above.)
            out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
            return;
        }
    };
    if cas.is_some() && f.quiet() {
        return;
    }
    out.extend_from_slice(code);
    for t in f.tokens() {
        match t[0] {
            b'O' => echo(out, t),
            b'k' => ret_key(out, raw_key, f),
            b'c' => {
                flag(out, b'c');
                push_u64(out, cas.unwrap_or(0));
            }
            b's' => {
                flag(out, b's');
                let size = match (cas, e.item()) {
                    (Some(_), Some(item)) => item.value.len(),
                    _ => vlen,
                };
                push_u64(out, size as u64);
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// `md <key> <flags>*`.
pub(super) fn delete(
    store: &Store,
    now: Time,
    raw_key: &[u8],
    f: &MetaFlags<'_>,
    out: &mut Vec<u8>,
) {
    let mut buf = [0u8; KEY_MAX_LENGTH];
    let key = decode_key(raw_key, f.base64(), &mut buf);
    let mut e = store.entry(key, now);
    let code: &[u8] = match e.item().map(|i| i.cas) {
        None => {
            e.count(Counter::DeleteMisses);
            b"NF"
        }
        Some(cas) if f.compare_cas().is_some_and(|c| c != cas) => {
            e.count(Counter::DeleteMisses);
            b"EX"
        }
        Some(cas) => {
            if f.has(b'x') {
                // Keep the item as a tombstone with an empty value.
                let flags = f.client_flags().unwrap_or(0);
                let kept = e.insert(
                    b"",
                    flags,
                    ttl(f.ttl(), now),
                    Some(f.new_cas().unwrap_or(cas)),
                );
                if kept.is_err() {
                    out.extend_from_slice(b"SERVER_ERROR out of memory\r\n");
                    return;
                }
            }
            if f.has(b'I') {
                // Invalidate: keep the item, stale, with a new CAS, so the next
                // reader wins the right to recache it.
                if f.ttl().is_some() {
                    e.set_exptime(ttl(f.ttl(), now));
                }
                e.set_stale(true);
                e.set_win_sent(false);
                e.set_cas(f.new_cas().unwrap_or_else(|| store.next_cas()));
            } else {
                e.count(Counter::DeleteHits);
                if !f.has(b'x') {
                    e.remove();
                }
            }
            b"HD"
        }
    };
    if code == b"HD" && f.quiet() {
        return;
    }
    code_line(out, code, raw_key, f);
}

/// `ma <key> <flags>*`.
pub(super) fn arith(
    store: &Store,
    now: Time,
    raw_key: &[u8],
    f: &MetaFlags<'_>,
    out: &mut Vec<u8>,
) {
    let mut buf = [0u8; KEY_MAX_LENGTH];
    let key = decode_key(raw_key, f.base64(), &mut buf);
    let mut e = store.entry(key, now);
    let op = match f.mode() {
        Some(b'D' | b'-') => ArithOp::Decr,
        _ => ArithOp::Incr,
    };
    let (hit, miss) = match op {
        ArithOp::Incr => (Counter::IncrHits, Counter::IncrMisses),
        ArithOp::Decr => (Counter::DecrHits, Counter::DecrMisses),
    };
    let mut digits_buf = [0u8; 20];
    let found = e
        .item()
        .map(|i| (i.cas, i.value.is_empty(), parse_counter(i.value)));
    // `q` hides the answer to a hit only: as memcached, an item made by
    // `N` is answered (HD, or VA with `v`), and so are NF and EX.
    let created = found.is_none();
    let result: Result<(u64, &[u8]), WriteError> = match found {
        None if f.vivify().is_some() => {
            // Vivify: seed with J (default 0), TTL from N, no delta applied.
            let digits = fmt_u64(f.initial().unwrap_or(0), &mut digits_buf);
            e.insert(digits, 0, ttl(f.vivify(), now), f.new_cas())
                .map(|cas| (cas, digits))
        }
        None => {
            e.count(miss);
            return code_line(out, b"NF", raw_key, f);
        }
        Some((_, true, _)) => return out.extend_from_slice(NON_NUMERIC),
        Some((cas, _, _)) if f.compare_cas().is_some_and(|c| c != 0 && c != cas) => {
            return code_line(out, b"EX", raw_key, f);
        }
        Some((_, _, None)) => return out.extend_from_slice(NON_NUMERIC),
        Some((_, _, Some(current))) => {
            let digits = fmt_u64(apply(op, current, f.delta().unwrap_or(1)), &mut digits_buf);
            e.count(hit);
            e.rewrite(Edit::Replace(digits), f.new_cas())
                .map(|cas| (cas, digits))
        }
    };
    let Ok((cas, digits)) = result else {
        return out.extend_from_slice(b"SERVER_ERROR out of memory\r\n");
    };
    if created {
        // memcached stores a vivified counter as an `add` (which looks the
        // key up again), and logs it so.
        e.store().log_miss(e.key());
        let exptime = e.item().map_or(0, |i| i.exptime);
        log_store(&e, "add", Outcome::Stored, exptime, digits.len());
    }
    let start = out.len();
    if f.has(b'v') {
        out.extend_from_slice(b"VA ");
        push_u64(out, digits.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    // A counter vivified with a TTL already past is not kept (the lookup
    // finds nothing): report the TTL it was given, 0 left as for `mg T-1`,
    // not -1 (never).
    let mut exptime = match created {
        true => ttl(f.vivify(), now),
        false => e.item().map_or(0, |i| i.exptime),
    };
    for t in f.tokens() {
        match t[0] {
            b'c' => {
                flag(out, b'c');
                push_u64(out, cas);
            }
            b't' => {
                flag(out, b't');
                push_i64(out, ttl_left(exptime, now));
            }
            b'T' => {
                exptime = ttl(f.ttl(), now);
                e.set_exptime(exptime);
            }
            // Beside `T`, the later of the two sets a vivified counter's
            // TTL, as in memcached (`T9 N0` never expires).
            b'N' if created && f.ttl().is_some() => {
                exptime = ttl(f.vivify(), now);
                e.set_exptime(exptime);
            }
            b'O' => echo(out, t),
            b'k' => ret_key(out, raw_key, f),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    if f.has(b'v') {
        out.extend_from_slice(digits);
        out.extend_from_slice(b"\r\n");
    }
    if f.quiet() && !created {
        out.truncate(start);
    }
}

/// `me <key> [b]`: `ME <key> exp=… la=… cas=… fetch=… cls=… size=…`, the
/// size as memcached counts it ([`item_size`]) and its class on memcached's
/// ladder.
pub(super) fn debug(store: &Store, now: Time, raw_key: &[u8], base64: bool, out: &mut Vec<u8>) {
    let mut buf = [0u8; KEY_MAX_LENGTH];
    let key = decode_key(raw_key, base64, &mut buf);
    let e = store.entry(key, now);
    e.count(Counter::CmdMeta);
    let Some(item) = e.item() else {
        out.extend_from_slice(b"EN\r\n");
        return;
    };
    // As memcached: the key as stored, in base64 when `ms` had it so.
    out.extend_from_slice(b"ME ");
    if item.key_binary {
        crate::base64::encode(item.key, out);
    } else {
        out.extend_from_slice(item.key);
    }
    out.extend_from_slice(b" exp=");
    push_i64(out, ttl_left(item.exptime, now));
    out.extend_from_slice(b" la=");
    push_u64(out, now.saturating_sub(item.last_access).into());
    out.extend_from_slice(b" cas=");
    push_u64(out, item.cas);
    out.extend_from_slice(if item.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    // memcached's figures: its item size and that size's class.
    let size = item_size(item.key.len(), item.flags, item.value.len());
    out.extend_from_slice(b" cls=");
    push_u64(out, class_of(size) as u64);
    out.extend_from_slice(b" size=");
    push_u64(out, size as u64);
    out.extend_from_slice(b"\r\n");
}
