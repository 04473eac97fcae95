//! The classic text commands: retrieval, storage, delete, incr/decr, touch.

use super::{log_store, Outcome};
use crate::num::{fmt_u64, parse_counter, push_u64};
use crate::protocol::{ArithOp, StoreCommand, Tokens};
use crate::store::{
    expiry, Counter, Edit, Entry, Item, Staged, Store, Time, WriteError, SHARE_MIN,
};

const STORED: &[u8] = b"STORED\r\n";
const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
const EXISTS: &[u8] = b"EXISTS\r\n";
const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
const NO_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`
fn write_value(out: &mut Vec<u8>, item: &Item<'_>, cas: bool) {
    out.reserve(item.key.len() + item.value.len() + 48);
    write_value_line(out, item, cas);
    out.extend_from_slice(item.value);
    out.extend_from_slice(b"\r\n");
}

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n`
fn write_value_line(out: &mut Vec<u8>, item: &Item<'_>, cas: bool) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(item.key);
    out.push(b' ');
    push_u64(out, item.flags.into());
    out.push(b' ');
    push_u64(out, item.value.len() as u64);
    if cas {
        out.push(b' ');
        push_u64(out, item.cas);
    }
    out.extend_from_slice(b"\r\n");
}

/// How many keys a multi-key get hints the store with at once (see
/// [`Store::prefetch`]): the next ones, at its first key and every this
/// many after it.
const PREFETCH_BATCH: usize = 8;

/// `get`, `gets`, and with `touch` set, `gat`, `gats`. Values the store
/// shares go as `out` takes them (see [`super::Answer`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn get<O: super::Answer + ?Sized>(
    store: &Store,
    now: Time,
    keys: Tokens<'_>,
    cas: bool,
    touch: Option<i32>,
    out: &mut O,
    from: usize,
    budget: usize,
) -> Option<usize> {
    let start = out.bytes().len();
    // Bytes of the values shared (not in `out`'s bytes, held all the same).
    let mut shared = 0;
    // The keys after the first are hinted to the store
    // (`Store::prefetch`) `PREFETCH_BATCH` at a time, so that their items'
    // memory reads overlap each other (hints one at a time would wait for
    // each other's table probes) and the lookups find the items there (a
    // get of 16 keys in a store of a million items: about 1.9x the keys
    // per second in the store's bench). A one-key get hints nothing.
    let mut ahead = keys.iter().skip(from + 1);
    for (i, key) in keys.iter().enumerate().skip(from) {
        // A get naming large items many times must not copy them all into
        // one buffer (nor hold them all): past `budget`, the caller writes
        // what is there and resumes at key `i`.
        if i > from && out.bytes().len() - start + shared >= budget {
            return Some(i);
        }
        if (i - from).is_multiple_of(PREFETCH_BATCH) {
            store.prefetch(ahead.by_ref().take(PREFETCH_BATCH));
        }
        let e = get_key(store, now, key, touch);
        if let Some(item) = e.item() {
            if O::SHARES && item.value.len() >= SHARE_MIN {
                if let Some(value) = e.share_value() {
                    write_value_line(out.bytes(), &item, cas);
                    shared += item.value.len();
                    out.share(value);
                    out.bytes().extend_from_slice(b"\r\n");
                    continue;
                }
            }
            let out = out.bytes();
            let need = item.key.len() + item.value.len() + 48;
            if out.capacity() - out.len() < need {
                let left = keys.iter().skip(i).count();
                reserve_rest(out, out.len() - start, i - from, left, need, budget);
            }
            write_value(out, &item, cas);
        }
    }
    out.bytes().extend_from_slice(b"END\r\n");
    None
}

/// Grows `out` for the `left` keys of a get still to answer, at the average
/// of its answers so far (`written` bytes for `done` keys, and the next
/// one's `need`), within what the get may buffer: doubling step by step
/// would copy the answer again at each step (as much as the answer itself
/// again, for 100 values of 4 KB a third of the server's time beside the
/// socket's copy).
fn reserve_rest(
    out: &mut Vec<u8>,
    written: usize,
    done: usize,
    left: usize,
    need: usize,
    budget: usize,
) {
    let avg = (written + need) / (done + 1);
    let room = budget.min(super::GET_BUFFER).saturating_sub(written);
    out.reserve(avg.saturating_mul(left).min(room).max(need));
}

/// One key of a get: looked up, counted (memcached's per-key stats),
/// touched and marked read if it hit.
fn get_key<'s, 'k>(
    store: &'s Store,
    now: Time,
    key: &'k [u8],
    touch: Option<i32>,
) -> Entry<'s, 'k> {
    let mut e = store.entry(key, now);
    // `stats detail`: `gat` counts as a get, as in memcached.
    store.prefix_stats().record_get(key, e.exists());
    e.count(if touch.is_some() {
        Counter::CmdTouch
    } else {
        Counter::CmdGet
    });
    if !e.exists() {
        e.count(if touch.is_some() {
            Counter::TouchMisses
        } else {
            Counter::GetMisses
        });
        return e;
    }
    match touch {
        Some(t) => {
            e.set_exptime(expiry(t.into(), now));
            e.count(Counter::TouchHits);
        }
        None => e.count(Counter::GetHits),
    }
    e.bump();
    e
}

/// Where a get answered a piece at a time stands (see [`split_get`](super::split_get)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetCursor {
    /// The key number (from 0) the next piece starts in.
    pub key: usize,
    /// Bytes of that key's value already written (0: its answer has not
    /// begun).
    pub offset: usize,
    /// The CAS of the item whose value is part written: the rest is only
    /// written while the item is still that one.
    pub cas: u64,
    /// Keys before this number were looked up and counted already (by an
    /// earlier pass over the same get): they are not counted, touched or
    /// marked read again.
    pub counted: usize,
}

/// Writes up to `piece` more bytes (at least one) of `key`'s value from
/// `at.offset` on, while the item is still the one of CAS `at.cas`; true
/// once the value is all written.
pub fn value_piece(
    store: &Store,
    now: Time,
    key: &[u8],
    at: &mut GetCursor,
    piece: usize,
    out: &mut Vec<u8>,
) -> Result<bool, ValueChanged> {
    let e = store.entry_again(key, now);
    let item = e.item().filter(|i| i.cas == at.cas).ok_or(ValueChanged)?;
    let value = item.value.get(at.offset..).ok_or(ValueChanged)?;
    let n = value.len().min(piece.max(1));
    out.extend_from_slice(&value[..n]);
    at.offset += n;
    Ok(n == value.len())
}

/// The value of a get changed between two pieces of its answer: half a
/// value cannot be taken back, so the connection closes (the client sees
/// a short answer, never a value made of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueChanged;

/// Answers a get from `at` on, writing at most about `piece` bytes to
/// `out` (a value line and at least one byte of its value beyond): a
/// value that does not fit is written in part, and the cursor to resume
/// from is returned (`None`: the answer is complete, `END` written). What a
/// connection holds for the get is then bounded by `piece`, however large
/// its values, like memcached, which sends items by reference.
#[allow(clippy::too_many_arguments)]
pub(super) fn get_split(
    store: &Store,
    now: Time,
    keys: Tokens<'_>,
    cas: bool,
    touch: Option<i32>,
    out: &mut Vec<u8>,
    mut at: GetCursor,
    piece: usize,
) -> Result<Option<GetCursor>, ValueChanged> {
    let start = out.len();
    // The rest of a value begun before.
    if at.offset > 0 {
        let key = keys.iter().nth(at.key).ok_or(ValueChanged)?;
        if !value_piece(store, now, key, &mut at, piece, out)? {
            return Ok(Some(at));
        }
        out.extend_from_slice(b"\r\n");
        at.key += 1;
        at.offset = 0;
    }
    for (i, key) in keys.iter().enumerate().skip(at.key) {
        let used = out.len() - start;
        if used >= piece {
            return Ok(Some(GetCursor { key: i, ..at }));
        }
        let e = if i < at.counted {
            store.entry_again(key, now)
        } else {
            get_key(store, now, key, touch)
        };
        let Some(item) = e.item() else { continue };
        write_value_line(out, &item, cas);
        let room = piece.saturating_sub(out.len() - start).max(1);
        if item.value.len() > room {
            out.extend_from_slice(&item.value[..room]);
            return Ok(Some(GetCursor {
                key: i,
                offset: room,
                cas: item.cas,
                counted: at.counted.max(i + 1),
            }));
        }
        out.extend_from_slice(item.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"END\r\n");
    Ok(None)
}

/// Stores a new item; on "out of memory" a `set` also drops the old item, as
/// memcached does, so no stale value survives a failed set.
fn put(
    e: &mut Entry<'_, '_>,
    value: Value<'_>,
    flags: u32,
    exptime: Time,
    is_set: bool,
) -> &'static [u8] {
    match value.put(e, flags, exptime, None, 0) {
        Ok(_) => STORED,
        Err(_) => {
            e.refused_for_memory();
            if is_set {
                e.remove();
            }
            NO_MEMORY
        }
    }
}

/// A storage command's value: bytes, or received into its item already
/// (see [`Store::stage`]).
pub(super) enum Value<'a> {
    Bytes(&'a [u8]),
    Staged(Staged),
}

impl Value<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Value::Bytes(v) => v.len(),
            Value::Staged(s) => s.len(),
        }
    }

    /// Writes the value as `e`'s new item (see [`Entry::put`]).
    pub(super) fn put(
        self,
        e: &mut Entry<'_, '_>,
        flags: u32,
        exptime: Time,
        cas: Option<u64>,
        bits: u8,
    ) -> Result<u64, WriteError> {
        match self {
            Value::Bytes(v) => e.put(&[v], flags, exptime, cas, bits),
            Value::Staged(s) => e.put_staged(s, flags, exptime, cas, bits),
        }
    }
}

/// `set`, `add`, `replace`, `append`, `prepend`, `cas`.
#[allow(clippy::too_many_arguments)]
pub(super) fn store(
    store: &Store,
    now: Time,
    command: StoreCommand,
    key: &[u8],
    flags: u32,
    exptime: i32,
    value: Value<'_>,
    cas_unique: u64,
    out: &mut Vec<u8>,
) {
    store.prefix_stats().record_set(key);
    let mut e = store.entry(key, now);
    e.count(Counter::CmdSet);
    let exptime = expiry(exptime.into(), now);
    let vlen = value.len();
    let line = match command {
        StoreCommand::Set => put(&mut e, value, flags, exptime, true),
        StoreCommand::Add if e.exists() => {
            e.promote();
            NOT_STORED
        }
        StoreCommand::Add => put(&mut e, value, flags, exptime, false),
        StoreCommand::Replace if e.exists() => put(&mut e, value, flags, exptime, false),
        StoreCommand::Append | StoreCommand::Prepend if e.exists() => {
            // (Never staged: the old value goes in the new item too.)
            let Value::Bytes(value) = value else {
                return out.extend_from_slice(NOT_STORED);
            };
            let edit = if command == StoreCommand::Append {
                Edit::Append(value)
            } else {
                Edit::Prepend(value)
            };
            match e.rewrite(edit, None) {
                Ok(_) => STORED,
                Err(_) => NOT_STORED,
            }
        }
        StoreCommand::Replace | StoreCommand::Append | StoreCommand::Prepend => NOT_STORED,
        StoreCommand::Cas => match e.item().map(|i| i.cas) {
            None => {
                e.count(Counter::CasMisses);
                NOT_FOUND
            }
            // A CAS unique of 0 never matches (memcached: "no CAS given").
            Some(current) if cas_unique != 0 && current == cas_unique => {
                e.count(Counter::CasHits);
                put(&mut e, value, flags, exptime, false)
            }
            Some(_) => {
                e.count(Counter::CasBadval);
                EXISTS
            }
        },
    };
    if store.watch().wants(crate::watch::MUTATIONS) {
        let outcome = match line {
            STORED => Outcome::Stored,
            NOT_STORED => Outcome::NotStored,
            EXISTS => Outcome::Exists,
            NOT_FOUND => Outcome::NotFound,
            _ => Outcome::NoMemory,
        };
        log_store(&e, command.name(), outcome, exptime, vlen);
    }
    out.extend_from_slice(line);
}

/// `delete`.
pub(super) fn delete(store: &Store, now: Time, key: &[u8], out: &mut Vec<u8>) {
    store.prefix_stats().record_delete(key);
    let mut e = store.entry(key, now);
    if e.remove() {
        e.count(Counter::DeleteHits);
        out.extend_from_slice(b"DELETED\r\n");
    } else {
        e.count(Counter::DeleteMisses);
        out.extend_from_slice(NOT_FOUND);
    }
}

/// Applies a delta: incr wraps at 2^64, decr stops at 0.
pub(super) fn apply(op: ArithOp, current: u64, delta: u64) -> u64 {
    match op {
        ArithOp::Incr => current.wrapping_add(delta),
        ArithOp::Decr => current.saturating_sub(delta),
    }
}

pub(super) const NON_NUMERIC: &[u8] =
    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";

/// `incr`, `decr`.
pub(super) fn arith(
    store: &Store,
    now: Time,
    op: ArithOp,
    key: &[u8],
    delta: u64,
    out: &mut Vec<u8>,
) {
    let mut e = store.entry(key, now);
    let (hit, miss) = match op {
        ArithOp::Incr => (Counter::IncrHits, Counter::IncrMisses),
        ArithOp::Decr => (Counter::DecrHits, Counter::DecrMisses),
    };
    let Some(item) = e.item() else {
        e.count(miss);
        out.extend_from_slice(NOT_FOUND);
        return;
    };
    let Some(current) = parse_counter(item.value) else {
        out.extend_from_slice(NON_NUMERIC);
        return;
    };
    let mut buf = [0u8; 20];
    let digits = fmt_u64(apply(op, current, delta), &mut buf);
    match e.rewrite(Edit::Replace(digits), None) {
        Ok(_) => {
            e.count(hit);
            out.extend_from_slice(digits);
            out.extend_from_slice(b"\r\n");
        }
        Err(_) => out.extend_from_slice(b"SERVER_ERROR out of memory\r\n"),
    }
}

/// `touch`.
pub(super) fn touch(store: &Store, now: Time, key: &[u8], exptime: i32, out: &mut Vec<u8>) {
    let mut e = store.entry(key, now);
    e.count(Counter::CmdTouch);
    if e.exists() {
        e.set_exptime(expiry(exptime.into(), now));
        e.bump();
        e.count(Counter::TouchHits);
        out.extend_from_slice(b"TOUCHED\r\n");
    } else {
        e.count(Counter::TouchMisses);
        out.extend_from_slice(NOT_FOUND);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_key_get_grows_its_answer_for_the_keys_left() {
        // Two keys of 4 KB answered, 98 to go: room for 98 more like them
        // at once, not one doubling after another.
        let mut out = Vec::with_capacity(8_200);
        out.resize(8_200, b'v');
        reserve_rest(&mut out, 8_200, 2, 98, 4_100, usize::MAX);
        assert!(out.capacity() >= 8_200 + 98 * 4_100, "{}", out.capacity());
        // Within what the get may buffer (GET_BUFFER, or a smaller budget)...
        let mut out = vec![0; 100];
        reserve_rest(&mut out, 100, 1, 100_000, 4_100, usize::MAX);
        assert!(out.capacity() < 100 + super::super::GET_BUFFER + 4_100 + 64);
        let mut out = vec![0; 100];
        reserve_rest(&mut out, 100, 1, 1_000, 4_100, 20_000);
        assert!(out.capacity() < 40_000, "{}", out.capacity());
        // ...and always room for the next value, however large.
        let mut out = Vec::new();
        reserve_rest(&mut out, 0, 0, 1, 6_000_100, 1 << 20);
        assert!(out.capacity() >= 6_000_100);
    }
}
