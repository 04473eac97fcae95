//! Executing binary requests: memcached 1.6's semantics, status codes and
//! response bytes, on the same store operations as the text commands.
//!
//! Every response echoes the request's opcode (quiet forms included) and
//! opaque. Success carries the item's CAS; errors carry CAS 0 and
//! memcached's message as the body. Quiet gets answer nothing on a miss,
//! quiet mutations nothing on success; errors are always answered.

use super::classic::{apply, Value};
use super::{log_store, stats, ExecContext, Flow, Outcome};
use crate::num::{fmt_u64, parse_counter};
use crate::protocol::binary::{
    write_error, write_response_header, BinError, BinRequest, Extras, Opcode, ResponseHeader,
    Status,
};
use crate::protocol::{ArithOp, Tokens};
use crate::store::{expiry, Counter, Edit, Entry, Store, Time, WriteError, SHARE_MIN};

/// A success header for `req` with these lengths.
fn ok_header(
    req: &BinRequest<'_>,
    extras_len: u8,
    key_len: usize,
    body_len: usize,
    cas: u64,
) -> ResponseHeader {
    ResponseHeader {
        opcode: req.opcode as u8,
        key_len: key_len as u16,
        extras_len,
        status: Status::Ok,
        body_len: body_len as u32,
        opaque: req.opaque,
        cas,
    }
}

/// An empty success response, left out for quiet mutations.
fn ok_empty(req: &BinRequest<'_>, cas: u64, out: &mut Vec<u8>) {
    if !req.opcode.is_quiet() {
        write_response_header(out, &ok_header(req, 0, 0, 0, cas));
    }
}

fn error(req: &BinRequest<'_>, status: Status, out: &mut Vec<u8>) {
    write_error(out, req.opcode as u8, status, req.opaque);
}

/// memcached's exptime from the unsigned wire field.
fn exptime_of(v: u32, now: Time) -> Time {
    expiry(v.into(), now)
}

/// Executes one binary request, appending memcached's response bytes to
/// `answer` (a get's large value as it takes it: see [`super::Answer`]).
pub fn execute_binary<C: ExecContext + ?Sized, O: super::Answer + ?Sized>(
    req: &BinRequest<'_>,
    store: &Store,
    ctx: &C,
    answer: &mut O,
) -> Flow {
    let now = ctx.now();
    use Opcode::*;
    // Gets answer through `answer` (a large value shared); the rest write
    // bytes.
    match req.opcode.loud() {
        Get | GetK => get(store, now, req, None, answer),
        Gat | GatK | Touch => {
            let t = match req.extras {
                Extras::Expiry(t) => t,
                _ => 0,
            };
            get(store, now, req, Some(t), answer)
        }
        _ => return execute_other(req, store, ctx, now, answer.bytes()),
    }
    Flow::Continue
}

/// Every binary request but the gets.
fn execute_other<C: ExecContext + ?Sized>(
    req: &BinRequest<'_>,
    store: &Store,
    ctx: &C,
    now: Time,
    out: &mut Vec<u8>,
) -> Flow {
    use Opcode::*;
    match req.opcode.loud() {
        Get | GetK | Gat | GatK | Touch => unreachable!("answered by execute_binary"),
        Set | Add | Replace => update(store, now, req, Value::Bytes(req.value), out),
        Append | Prepend => append(store, now, req, out),
        Delete => delete(store, now, req, out),
        Increment | Decrement => arith(store, now, req, out),
        Quit => {
            ok_empty(req, 0, out);
            return Flow::Close;
        }
        // memcached answers a flush that `-F` forbids with "Auth failure.".
        // (Uncounted, unlike a refused text flush_all: memcached's way.)
        Flush if !ctx.flush_all_enabled() => error(req, Status::AuthError, out),
        Flush => {
            let delay = match req.extras {
                Extras::Expiry(t) => i64::from(t),
                _ => 0,
            };
            store.flush_all(super::flush_delay(ctx, delay), now);
            ok_empty(req, 0, out);
        }
        Noop => ok_empty(req, 0, out),
        Version => {
            let v = ctx.version().as_bytes();
            write_response_header(out, &ok_header(req, 0, 0, v.len(), 0));
            out.extend_from_slice(v);
        }
        Verbosity => {
            if let Extras::Level(l) = req.extras {
                ctx.set_verbosity(l);
            }
            ok_empty(req, 0, out);
        }
        Stat => stat(store, ctx, now, req, out),
        // Quiet opcodes were made loud above.
        GetQ | GetKQ | SetQ | AddQ | ReplaceQ | DeleteQ | IncrementQ | DecrementQ | QuitQ
        | FlushQ | AppendQ | PrependQ | GatQ | GatKQ => unreachable!("loud() is loud"),
    }
    Flow::Continue
}

/// Answers a [`BinError`] other than `Incomplete`: memcached's response and
/// side effects (a refused `set` drops the key's old item and counts
/// `store_too_large`). The caller then drops [`BinError::consumed`] bytes,
/// or closes on [`Flow::Close`].
pub fn execute_binary_error<C: ExecContext + ?Sized>(
    err: &BinError<'_>,
    store: &Store,
    ctx: &C,
    out: &mut Vec<u8>,
) -> Flow {
    if let BinError::TooLarge { opcode, key, .. } | BinError::NoMemory { opcode, key, .. } = *err {
        store.count(if matches!(err, BinError::NoMemory { .. }) {
            Counter::StoreNoMemory
        } else {
            Counter::StoreTooLarge
        });
        // memcached 1.6 drops the old item for set only (add, replace,
        // append and prepend keep it).
        if opcode.loud() == Opcode::Set {
            store.entry(key, ctx.now()).remove();
        }
    }
    err.write_response(out);
    if err.is_fatal() {
        Flow::Close
    } else {
        Flow::Continue
    }
}

/// get/getk/gat/gatk and quiet forms, and touch (`touch` set: the new
/// expiry).
fn get<O: super::Answer + ?Sized>(
    store: &Store,
    now: Time,
    req: &BinRequest<'_>,
    touch: Option<u32>,
    answer: &mut O,
) {
    let out = answer.bytes();
    let op = req.opcode.loud();
    let mut e = store.entry(req.key, now);
    // `stats detail`: gets and touches alike, as memcached counts them.
    store.prefix_stats().record_get(req.key, e.exists());
    e.count(if touch.is_some() {
        Counter::CmdTouch
    } else {
        Counter::CmdGet
    });
    let with_key = matches!(op, Opcode::GetK | Opcode::GatK);
    if !e.exists() {
        e.count(if touch.is_some() {
            Counter::TouchMisses
        } else {
            Counter::GetMisses
        });
        if req.opcode.is_quiet() {
            return;
        }
        if with_key {
            // The K forms answer a miss with the key and no message.
            write_response_header(
                out,
                &ResponseHeader {
                    status: Status::NotFound,
                    ..ok_header(req, 0, req.key.len(), req.key.len(), 0)
                },
            );
            out.extend_from_slice(req.key);
        } else {
            error(req, Status::NotFound, out);
        }
        return;
    }
    match touch {
        Some(t) => {
            e.set_exptime(exptime_of(t, now));
            e.count(Counter::TouchHits);
        }
        None => e.count(Counter::GetHits),
    }
    e.bump();
    let Some(item) = e.item() else { return };
    let key: &[u8] = if with_key { req.key } else { b"" };
    let value: &[u8] = if op == Opcode::Touch { b"" } else { item.value };
    let body = 4 + key.len() + value.len();
    let shared = match O::SHARES && value.len() >= SHARE_MIN {
        true => e.share_value(),
        false => None,
    };
    out.reserve(24 + body - if shared.is_some() { value.len() } else { 0 });
    write_response_header(out, &ok_header(req, 4, key.len(), body, item.cas));
    out.extend_from_slice(&item.flags.to_be_bytes());
    out.extend_from_slice(key);
    match shared {
        Some(value) => answer.share(value),
        None => out.extend_from_slice(value),
    }
}

/// Stores a new item; on "out of memory" a `set` also drops the old item,
/// as the text `set` does.
fn put(
    e: &mut Entry<'_, '_>,
    req: &BinRequest<'_>,
    value: Value<'_>,
    flags: u32,
    exptime: Time,
    out: &mut Vec<u8>,
) -> Outcome {
    match value.put(e, flags, exptime, None, 0) {
        Ok(cas) => {
            ok_empty(req, cas, out);
            Outcome::Stored
        }
        Err(_) => {
            e.refused_for_memory();
            if req.opcode.loud() == Opcode::Set {
                e.remove();
            }
            error(req, Status::OutOfMemory, out);
            Outcome::NoMemory
        }
    }
}

/// The text command a binary store opcode is, in `item_store` lines.
fn store_name(req: &BinRequest<'_>) -> &'static str {
    match req.opcode.loud() {
        Opcode::Append => "append",
        Opcode::Prepend => "prepend",
        _ if req.cas != 0 => "cas",
        Opcode::Add => "add",
        Opcode::Replace => "replace",
        _ => "set",
    }
}

/// set/add/replace and quiet forms (`value`: the request's, or received
/// into its item already). A request CAS makes any of them a
/// compare-and-swap, as in memcached.
pub(super) fn update(
    store: &Store,
    now: Time,
    req: &BinRequest<'_>,
    value: Value<'_>,
    out: &mut Vec<u8>,
) {
    let (flags, exptime) = match req.extras {
        Extras::Store { flags, exptime } => (flags, exptime_of(exptime, now)),
        _ => (0, 0),
    };
    store.prefix_stats().record_set(req.key);
    let mut e = store.entry(req.key, now);
    e.count(Counter::CmdSet);
    let vlen = value.len();
    let outcome = if req.cas != 0 {
        match e.item().map(|i| i.cas) {
            None => {
                e.count(Counter::CasMisses);
                error(req, Status::NotFound, out);
                Outcome::NotFound
            }
            Some(c) if c == req.cas => {
                e.count(Counter::CasHits);
                put(&mut e, req, value, flags, exptime, out)
            }
            Some(_) => {
                e.count(Counter::CasBadval);
                error(req, Status::Exists, out);
                Outcome::Exists
            }
        }
    } else {
        match req.opcode.loud() {
            Opcode::Add if e.exists() => {
                e.promote();
                error(req, Status::Exists, out);
                Outcome::NotStored
            }
            Opcode::Replace if !e.exists() => {
                error(req, Status::NotFound, out);
                Outcome::NotStored
            }
            _ => put(&mut e, req, value, flags, exptime, out),
        }
    };
    log_store(&e, store_name(req), outcome, exptime, vlen);
}

/// append/prepend and quiet forms (CAS checked when given).
fn append(store: &Store, now: Time, req: &BinRequest<'_>, out: &mut Vec<u8>) {
    store.prefix_stats().record_set(req.key);
    let mut e = store.entry(req.key, now);
    e.count(Counter::CmdSet);
    let outcome = match e.item().map(|i| i.cas) {
        None => {
            error(req, Status::NotStored, out);
            Outcome::NotStored
        }
        Some(current) if req.cas != 0 && req.cas != current => {
            error(req, Status::Exists, out);
            Outcome::Exists
        }
        Some(_) => {
            let edit = if req.opcode.loud() == Opcode::Append {
                Edit::Append(req.value)
            } else {
                Edit::Prepend(req.value)
            };
            match e.rewrite(edit, None) {
                Ok(cas) => {
                    ok_empty(req, cas, out);
                    Outcome::Stored
                }
                Err(WriteError::TooLarge) => {
                    error(req, Status::NotStored, out);
                    Outcome::NotStored
                }
                Err(_) => {
                    error(req, Status::OutOfMemory, out);
                    Outcome::NoMemory
                }
            }
        }
    };
    log_store(&e, store_name(req), outcome, 0, req.value.len());
}

/// delete/deleteq (CAS checked when given).
fn delete(store: &Store, now: Time, req: &BinRequest<'_>, out: &mut Vec<u8>) {
    store.prefix_stats().record_delete(req.key);
    let mut e = store.entry(req.key, now);
    match e.item().map(|i| i.cas) {
        None => {
            e.count(Counter::DeleteMisses);
            error(req, Status::NotFound, out);
        }
        Some(c) if req.cas != 0 && req.cas != c => error(req, Status::Exists, out),
        Some(_) => {
            e.remove();
            e.count(Counter::DeleteHits);
            ok_empty(req, 0, out);
        }
    }
}

/// incr/decr and quiet forms: a missing counter is created with the initial
/// value unless the expiry is `0xffffffff`.
fn arith(store: &Store, now: Time, req: &BinRequest<'_>, out: &mut Vec<u8>) {
    let Extras::Arith {
        delta,
        initial,
        exptime,
    } = req.extras
    else {
        return error(req, Status::InvalidArguments, out);
    };
    let op = if req.opcode.loud() == Opcode::Increment {
        ArithOp::Incr
    } else {
        ArithOp::Decr
    };
    let (hit, miss) = match op {
        ArithOp::Incr => (Counter::IncrHits, Counter::IncrMisses),
        ArithOp::Decr => (Counter::DecrHits, Counter::DecrMisses),
    };
    let mut e = store.entry(req.key, now);
    let mut buf = [0u8; 20];
    let found = e
        .item()
        .map(|i| (i.cas, i.value.is_empty(), parse_counter(i.value)));
    let (value, written) = match found {
        None if exptime == u32::MAX => {
            e.count(miss);
            return error(req, Status::NotFound, out);
        }
        None => {
            let digits = fmt_u64(initial, &mut buf);
            (initial, e.insert(digits, 0, exptime_of(exptime, now), None))
        }
        // memcached refuses an empty value, then compares the CAS, then
        // reads the value (as `ma` does).
        Some((_, true, _)) => return error(req, Status::DeltaBadValue, out),
        Some((cas, _, _)) if req.cas != 0 && req.cas != cas => {
            return error(req, Status::Exists, out);
        }
        Some((_, _, None)) => return error(req, Status::DeltaBadValue, out),
        Some((_, _, Some(current))) => {
            let v = apply(op, current, delta);
            e.count(hit);
            (v, e.rewrite(Edit::Replace(fmt_u64(v, &mut buf)), None))
        }
    };
    match written {
        Ok(cas) => {
            if !req.opcode.is_quiet() {
                write_response_header(out, &ok_header(req, 0, 0, 8, cas));
                out.extend_from_slice(&value.to_be_bytes());
            }
        }
        Err(_) => error(req, Status::OutOfMemory, out),
    }
}

/// `stat [group]`: each `STAT name value` of the text command as its own
/// response (key = name, value = value), then one with an empty key.
fn stat<C: ExecContext + ?Sized>(
    store: &Store,
    ctx: &C,
    now: Time,
    req: &BinRequest<'_>,
    out: &mut Vec<u8>,
) {
    let detail = matches!(req.key, b"detail on" | b"detail off" | b"detail dump");
    if req.key.contains(&b' ') && !detail {
        // A group name is one token; the text parser would split it.
        return error(req, Status::NotFound, out);
    }
    // The text command composes the stats; they are re-framed in place.
    let start = out.len();
    stats::stats(store, ctx, now, Tokens::new(req.key), out);
    let text = out.split_off(start);
    if text == b"ERROR\r\n" {
        return error(req, Status::NotFound, out);
    }
    if req.key == b"detail dump" {
        // As memcached 1.6: the text dump, whole, as the value of a stat
        // named "detailed", then the end.
        const NAME: &[u8] = b"detailed";
        write_response_header(
            out,
            &ok_header(req, 0, NAME.len(), NAME.len() + text.len(), 0),
        );
        out.extend_from_slice(NAME);
        out.extend_from_slice(&text);
        write_response_header(out, &ok_header(req, 0, 0, 0, 0));
        return;
    }
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(stat) = line.strip_prefix(b"STAT ") else {
            continue; // END, RESET
        };
        let sp = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
        let (name, value) = (&stat[..sp], stat.get(sp + 1..).unwrap_or(b""));
        write_response_header(
            out,
            &ok_header(req, 0, name.len(), name.len() + value.len(), 0),
        );
        out.extend_from_slice(name);
        out.extend_from_slice(value);
    }
    write_response_header(out, &ok_header(req, 0, 0, 0, 0));
}
