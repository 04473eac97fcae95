//! Executing requests against the [`Store`]: memcached's semantics and exact
//! response bytes.
//!
//! [`execute`] appends the response to `out` and says whether the connection
//! goes on. It takes each key's shard lock for the duration of that key's
//! work only (a multi-key `get` takes them in turn), writes values straight
//! from the store into `out`, and allocates nothing itself beyond growing
//! `out` (stored values live in the store's segments). A server's answer
//! ([`Answer`]) may take a get's large values shared instead, sent from
//! the store.
//!
//! Process-level numbers for `stats` (pid, uptime, connections, rusage) and
//! the clock come from the server through [`ExecContext`].

mod binary;
mod classic;
mod crawler;
mod lru;
mod meta;
mod slabs;
mod stats;

use crate::protocol::{
    decode_key, BinRequest, BinaryHead, FlushDelay, Opcode, ParseError, Request, ValueHead,
    BAD_DATA_CHUNK, KEY_MAX_LENGTH,
};
use crate::store::{Counter, Entry, SharedValue, Staged, Store, Time, MAX_RELATIVE_EXPTIME};
use std::sync::Arc;
use std::time::Duration;

pub use binary::{execute_binary, execute_binary_error};
pub use classic::{value_piece, GetCursor, ValueChanged};
pub use crawler::{lru_crawler_start, metadump_classes, metadump_piece, DUMP_PIECE};
pub use stats::{write_stat, Cachedump};

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Flow {
    /// Keep reading requests.
    Continue,
    /// Write what is in `out`, then close (`quit`, `shutdown`, a line too
    /// long).
    Close,
}

/// The version string [`ExecContext::version`] reports by default: the
/// number of the memcached release whose protocol the cache answers as (the
/// one the differential tests run beside), then what answers
/// (`1.6.18-duality-kv-0.1.0`).
/// libmemcached (memcstat, php-memcached, pylibmc) reads a major, minor and
/// micro number from it and refuses every `stats` of a server whose version
/// does not start so; clients that gate the meta protocol on 1.6 see it.
pub const DEFAULT_VERSION: &str = concat!("1.6.18-duality-kv-", env!("CARGO_PKG_VERSION"));

/// What the server supplies to [`execute`]: the clock and the numbers of the
/// `stats` command that only the server knows.
pub trait ExecContext {
    /// The current Unix time in seconds (≥ 1). Read once per request.
    fn now(&self) -> Time;

    /// The Unix time the server started (0: unknown): `flush_all` at an
    /// absolute time between it and now flushes at once, as memcached's.
    fn started(&self) -> Time {
        0
    }

    /// The `VERSION` string.
    fn version(&self) -> &str {
        DEFAULT_VERSION
    }

    /// Process-level numbers for the general `stats`.
    fn server_stats(&self) -> ServerStats {
        ServerStats::default()
    }

    /// `verbosity <level>`: the server may change its logging.
    fn set_verbosity(&self, _level: u32) {}

    /// Whether the `shutdown` command is enabled (memcached's `-A`); if not
    /// (the default) it answers `ERROR: shutdown not enabled`.
    fn shutdown_enabled(&self) -> bool {
        false
    }

    /// `shutdown` when enabled: stop the server gracefully (the connection
    /// that asked is closed without an answer, as by memcached).
    fn shutdown(&self) {}

    /// Whether `flush_all` is allowed; memcached's `-F` turns it off (the
    /// text command then answers `CLIENT_ERROR flush_all not allowed`).
    fn flush_all_enabled(&self) -> bool {
        true
    }

    /// Whether `stats cachedump` and `lru_crawler metadump` are allowed;
    /// memcached's `-X` turns them off.
    fn dumping_enabled(&self) -> bool {
        true
    }

    /// `cache_memlimit <MiB>` (at least 8): the server applies the new item
    /// memory limit, or says why it cannot; the client gets `OK` either way,
    /// as from memcached.
    fn set_memory_limit(&self, _mib: u32) {}

    /// `stats reset`: the store's counters are reset; reset the server's too.
    fn reset_stats(&self) {}

    /// Appends `STAT <name> <value>\r\n` lines (see [`write_stat`]) to a
    /// `stats` group. Called with `""` at the end of the general stats and with
    /// `"settings"` at the end of `stats settings` (the return value is then
    /// ignored), and with any group this crate does not know (`stats duality`,
    /// `stats conns`): return `true` if the group exists (this crate adds
    /// `END`), `false` to answer `ERROR`.
    fn extra_stats(&self, _group: &str, _out: &mut Vec<u8>) -> bool {
        false
    }
}

/// Numbers only the server knows, for the general `stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Process id.
    pub pid: u32,
    /// Seconds since the server started.
    pub uptime: u64,
    /// User CPU time of the process.
    pub rusage_user: Duration,
    /// System CPU time of the process.
    pub rusage_system: Duration,
    /// The connection limit.
    pub max_connections: u64,
    /// Open connections.
    pub curr_connections: u64,
    /// Connections accepted since start.
    pub total_connections: u64,
    /// Connections refused over the connection limit since start.
    pub rejected_connections: u64,
    /// Bytes read from the network.
    pub bytes_read: u64,
    /// Bytes written to the network.
    pub bytes_written: u64,
    /// Worker threads.
    pub threads: u64,
    /// Times a connection gave its thread to others with requests still
    /// to serve (memcached's `conn_yields`, after `-R` requests).
    pub conn_yields: u64,
    /// Connections closed by the idle timeout (`None`: there is none; then,
    /// as memcached, the field is not shown).
    pub idle_kicks: Option<u64>,
    /// Authentication attempts (`-Y`): tokens checked, and those refused.
    pub auth_cmds: u64,
    /// Authentication attempts refused.
    pub auth_errors: u64,
}

/// A context with a fixed clock: for tests, tools and simple servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleContext {
    /// What [`ExecContext::now`] returns.
    pub now: Time,
    /// When the server started (for `uptime`).
    pub started: Time,
}

impl SimpleContext {
    /// A context whose clock reads `now`, started at `now`.
    pub fn at(now: Time) -> SimpleContext {
        SimpleContext { now, started: now }
    }
}

impl ExecContext for SimpleContext {
    fn now(&self) -> Time {
        self.now
    }

    fn started(&self) -> Time {
        self.started
    }

    fn server_stats(&self) -> ServerStats {
        ServerStats {
            pid: std::process::id(),
            uptime: u64::from(self.now.saturating_sub(self.started)),
            threads: 1,
            ..ServerStats::default()
        }
    }
}

/// A store command's outcome, as memcached's `type=item_store` lines name
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Stored,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    NoMemory,
}

/// memcached's `type=item_store` line (`watch mutations`): the outcome of
/// `cmd` on `e`'s key, for a value of `vlen` bytes expiring at `exptime`
/// (the item's own class, size and expiry where it was stored). Nothing
/// is done while nobody watches mutations.
pub(crate) fn log_store(
    e: &Entry<'_, '_>,
    cmd: &str,
    outcome: Outcome,
    exptime: Time,
    vlen: usize,
) {
    if !e.store().watch().wants(crate::watch::MUTATIONS) {
        return;
    }
    // Stored: the new item's own (an append's keeps the old expiry).
    let (class, size, exptime) = match (outcome, e.item()) {
        (Outcome::Stored, Some(item)) => (e.class(), item.value.len(), item.exptime),
        _ => (crate::store::class_for(e.key().len(), vlen), vlen, exptime),
    };
    // -1: expired as it was stored (a negative exptime).
    let ttl = match exptime {
        0 => 0,
        t => (i64::from(t) - i64::from(e.now())).max(-1),
    };
    store_line(e.store(), e.key(), cmd, outcome, ttl, class, size);
}

fn store_line(
    store: &Store,
    key: &[u8],
    cmd: &str,
    outcome: Outcome,
    ttl: i64,
    class: usize,
    size: usize,
) {
    let status = match outcome {
        Outcome::Stored => "stored",
        Outcome::NotStored => "not_stored",
        Outcome::Exists => "exists",
        Outcome::NotFound => "not_found",
        Outcome::TooLarge => "too_large",
        Outcome::NoMemory => "no_memory",
    };
    store.watch().log(crate::watch::MUTATIONS, |o| {
        use std::io::Write as _;
        o.extend_from_slice(b"type=item_store ");
        crate::watch::write_key(o, key);
        let fd = crate::watch::conn_fd();
        let _ = write!(
            o,
            " status={status} cmd={cmd} ttl={ttl} clsid={class} cfd={fd} size={size}"
        );
    });
}

/// Runs a classic command's writer, dropping its output under `noreply`.
fn quiet(noreply: bool, out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    f(out);
    if noreply {
        out.truncate(start);
    }
}

/// Where a get's answer goes: a `Vec<u8>` copies every value in; a
/// server's [`Output`](duality_models::Output) sends the values the store
/// shares (large ones: see [`Entry::share_value`](crate::store::Entry::share_value))
/// from where they lie, as memcached sends items by reference.
pub trait Answer {
    /// Whether [`share`](Self::share) takes values (else they are copied).
    const SHARES: bool;
    /// The answer's bytes, to append to.
    fn bytes(&mut self) -> &mut Vec<u8>;
    /// Sends `value` after the bytes appended so far, from the store; bytes
    /// appended later follow it.
    fn share(&mut self, value: Arc<SharedValue>);
}

impl Answer for Vec<u8> {
    const SHARES: bool = false;
    fn bytes(&mut self) -> &mut Vec<u8> {
        self
    }
    fn share(&mut self, value: Arc<SharedValue>) {
        self.extend_from_slice((*value).as_ref());
    }
}

impl Answer for duality_models::Output {
    const SHARES: bool = true;
    fn bytes(&mut self) -> &mut Vec<u8> {
        self
    }
    fn share(&mut self, value: Arc<SharedValue>) {
        let len = (*value).as_ref().len();
        duality_models::Output::share(
            self,
            duality_rt::net::SharedBytes::from_owner(value),
            0..len,
        );
    }
}

/// Bytes of values a multi-key `get` (`gets`, `gat`, `gats`) buffers
/// before [`execute_part`] hands the rest to [`resume_get`]: a get naming a
/// large item many times (a line may hold 100,000 keys) must not make the
/// server copy it into one buffer that many times.
pub const GET_BUFFER: usize = 1 << 20;

/// What [`execute_part`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole response is in `out`.
    Done(Flow),
    /// A multi-key get stopped before its key number `n` (from 0) with
    /// [`GET_BUFFER`] bytes or more in `out`: write them, then
    /// [`resume_get`] from `n`.
    More(usize),
}

/// [`execute`], except that a get's large values go as `out` takes them
/// (shared, where it can: see [`Answer`]), and a multi-key get whose values
/// pass [`GET_BUFFER`] stops there ([`Part::More`]): a server writes what
/// is buffered and goes on with [`resume_get`], holding a bounded buffer.
pub fn execute_part<C: ExecContext + ?Sized, O: Answer + ?Sized>(
    req: &Request<'_>,
    store: &Store,
    ctx: &C,
    out: &mut O,
) -> Part {
    if let Request::MetaGet { key, flags } = *req {
        meta::get(store, ctx.now(), key, &flags, out);
        return Part::Done(Flow::Continue);
    }
    match resume_get(req, store, ctx, out, 0) {
        Some(Part::More(n)) => Part::More(n),
        Some(Part::Done(flow)) => Part::Done(flow),
        None => Part::Done(execute(req, store, ctx, out.bytes())),
    }
}

/// Answers the keys of a get from its key number `from` (see
/// [`execute_part`]); `None` if `req` is no such get.
pub fn resume_get<C: ExecContext + ?Sized, O: Answer + ?Sized>(
    req: &Request<'_>,
    store: &Store,
    ctx: &C,
    out: &mut O,
    from: usize,
) -> Option<Part> {
    let (keys, cas, touch) = match *req {
        Request::Get { keys, cas } => (keys, cas, None),
        Request::GetAndTouch { exptime, keys, cas } => (keys, cas, Some(exptime)),
        _ => return None,
    };
    let next = classic::get(store, ctx.now(), keys, cas, touch, out, from, GET_BUFFER);
    Some(next.map_or(Part::Done(Flow::Continue), Part::More))
}

/// Answers a get (`get`, `gets`, `gat`, `gats`) from `at` on, at most
/// about `piece` bytes at a time, a value split across pieces where it must
/// be (see [`GetCursor`]); `None` if `req` is no such get. A server turns to
/// it when the buffer budget has no room for a get's whole answer.
pub fn split_get<C: ExecContext + ?Sized>(
    req: &Request<'_>,
    store: &Store,
    ctx: &C,
    out: &mut Vec<u8>,
    at: GetCursor,
    piece: usize,
) -> Option<Result<Option<GetCursor>, ValueChanged>> {
    let (keys, cas, touch) = match *req {
        Request::Get { keys, cas } => (keys, cas, None),
        Request::GetAndTouch { exptime, keys, cas } => (keys, cas, Some(exptime)),
        _ => return None,
    };
    Some(classic::get_split(
        store,
        ctx.now(),
        keys,
        cas,
        touch,
        out,
        at,
        piece,
    ))
}

/// Where the answer to a meta get (`mg … v`) whose value went into `answer`
/// (its whole response, `VA <len> <flags>\r\n<value>\r\n`) can go on a
/// piece at a time: the value's offset in `answer`, and the cursor of the
/// item it was copied from (checked under the shard lock: the item must
/// still hold exactly these bytes). `None`: no such answer, or the item
/// changed since.
pub fn meta_split_start(
    req: &Request<'_>,
    store: &Store,
    now: Time,
    answer: &[u8],
) -> Option<(usize, GetCursor)> {
    let Request::MetaGet { key, flags } = req else {
        return None;
    };
    let line_end = answer.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(answer[..line_end].strip_prefix(b"VA ")?)
        .ok()?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    let value_at = line_end + 2;
    let value = answer.get(value_at..value_at.checked_add(len)?)?;
    let mut buf = [0u8; KEY_MAX_LENGTH];
    let key = decode_key(key, flags.base64(), &mut buf);
    let e = store.entry_again(key, now);
    let cas = e.item().filter(|i| i.value == value)?.cas;
    let at = GetCursor {
        cas,
        counted: 1,
        ..GetCursor::default()
    };
    Some((value_at, at))
}

/// The next piece of a meta get's value from `at` on (see
/// [`meta_split_start`]), and its line end after the last; true once
/// written whole.
pub fn meta_value_piece(
    req: &Request<'_>,
    store: &Store,
    now: Time,
    at: &mut GetCursor,
    piece: usize,
    out: &mut Vec<u8>,
) -> Result<bool, ValueChanged> {
    let Request::MetaGet { key, flags } = req else {
        return Err(ValueChanged);
    };
    let mut buf = [0u8; KEY_MAX_LENGTH];
    let key = decode_key(key, flags.base64(), &mut buf);
    let done = value_piece(store, now, key, at, piece, out)?;
    if done {
        out.extend_from_slice(b"\r\n");
    }
    Ok(done)
}

/// A `flush_all` delay as the store takes it. An absolute time already
/// past flushes every item at once when it is after the server started
/// (memcached's, with CAS on: its cut-off CAS is taken now), nothing when
/// it is before (the store's rule for a past time). memcached counts its
/// start 62 seconds early (`process_started`); so does this.
fn flush_delay<C: ExecContext + ?Sized>(ctx: &C, delay: i64) -> i64 {
    let now = i64::from(ctx.now());
    let started = i64::from(ctx.started()) - 62;
    if delay > MAX_RELATIVE_EXPTIME && delay <= now && delay > started && started > 0 {
        0
    } else {
        delay
    }
}

/// Stores a value received into its item ([`Store::stage`]) for the
/// storage request `head` (`set`, `add`, `replace`, `cas`, or an `ms` that
/// does not append or prepend), answering as [`execute`] answers the whole
/// request.
pub fn execute_staged(
    head: &ValueHead<'_>,
    staged: Staged,
    store: &Store,
    now: Time,
    out: &mut Vec<u8>,
) {
    let value = classic::Value::Staged(staged);
    match head {
        ValueHead::Store(head) => quiet(head.noreply, out, |out| {
            classic::store(
                store,
                now,
                head.command,
                head.key,
                head.flags,
                head.exptime,
                value,
                head.cas_unique,
                out,
            )
        }),
        ValueHead::MetaSet(head) => meta::set(store, now, head.key, value, &head.flags, out),
    }
}

/// [`execute_staged`] for a binary `set`, `add` or `replace` (or a quiet
/// form), answering as [`execute_binary`] answers the whole request.
pub fn execute_binary_staged(
    head: &BinaryHead<'_>,
    staged: Staged,
    store: &Store,
    now: Time,
    out: &mut Vec<u8>,
) {
    binary::update(
        store,
        now,
        &head.request,
        classic::Value::Staged(staged),
        out,
    );
}

/// Executes one request, appending memcached's response bytes to `out`
/// (the whole response: see [`execute_part`] for a bounded buffer).
pub fn execute<C: ExecContext + ?Sized>(
    req: &Request<'_>,
    store: &Store,
    ctx: &C,
    out: &mut Vec<u8>,
) -> Flow {
    let now = ctx.now();
    match *req {
        Request::Get { keys, cas } => {
            classic::get(store, now, keys, cas, None, out, 0, usize::MAX);
        }
        Request::GetAndTouch { exptime, keys, cas } => {
            classic::get(store, now, keys, cas, Some(exptime), out, 0, usize::MAX);
        }
        Request::Store {
            command,
            key,
            flags,
            exptime,
            value,
            cas_unique,
            noreply,
        } => quiet(noreply, out, |out| {
            let value = classic::Value::Bytes(value);
            classic::store(
                store, now, command, key, flags, exptime, value, cas_unique, out,
            )
        }),
        Request::Delete { key, noreply } => {
            quiet(noreply, out, |out| classic::delete(store, now, key, out))
        }
        Request::Arith {
            op,
            key,
            delta,
            noreply,
        } => quiet(noreply, out, |out| {
            classic::arith(store, now, op, key, delta, out)
        }),
        Request::Touch {
            key,
            exptime,
            noreply,
        } => quiet(noreply, out, |out| {
            classic::touch(store, now, key, exptime, out)
        }),
        Request::FlushAll { delay, noreply } => {
            let seconds = match delay {
                FlushDelay::Now => Some(0),
                FlushDelay::After(d) => Some(d),
                FlushDelay::Invalid => None,
            };
            let answer: &[u8] = match seconds {
                Some(d) if ctx.flush_all_enabled() => {
                    store.flush_all(flush_delay(ctx, d.into()), now);
                    b"OK\r\n"
                }
                // memcached counts a refused flush too, and refuses a
                // disabled one before it reads the delay.
                _ => {
                    store.count(Counter::CmdFlush);
                    if ctx.flush_all_enabled() {
                        b"CLIENT_ERROR invalid exptime argument\r\n"
                    } else {
                        b"CLIENT_ERROR flush_all not allowed\r\n"
                    }
                }
            };
            quiet(noreply, out, |out| out.extend_from_slice(answer));
        }
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(ctx.version().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Request::Verbosity { level, noreply } => {
            ctx.set_verbosity(level);
            quiet(noreply, out, |out| out.extend_from_slice(b"OK\r\n"));
        }
        Request::Stats { args } => stats::stats(store, ctx, now, args, out),
        Request::LruCrawler { args } => {
            crawler::lru_crawler(store, now, args, ctx.dumping_enabled(), out)
        }
        Request::Slabs { args } => slabs::slabs(args, out),
        Request::Lru { args } => lru::lru(args, out),
        // A connection that can stream (the server's) never gets here:
        // it watches instead (see `crate::server`).
        Request::Watch { .. } => out.extend_from_slice(b"ERROR\r\n"),
        Request::Shutdown { args } => {
            let mut it = args.iter();
            let mode_ok = match it.next() {
                None => true,
                Some(m) => m == b"graceful" && it.next().is_none(),
            };
            if !ctx.shutdown_enabled() {
                out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
            } else if !mode_ok {
                out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
            } else {
                // memcached closes the asking connection without an answer;
                // both modes stop gracefully here.
                ctx.shutdown();
                return Flow::Close;
            }
        }
        Request::CacheMemlimit { mib, noreply } => quiet(noreply, out, |out| match mib {
            None => out.extend_from_slice(b"ERROR\r\n"),
            // memcached's floor: below 8 MiB its slab allocator cannot work.
            Some(m) if m < 8 => {
                out.extend_from_slice(b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n")
            }
            // memcached's guard against a limit given in bytes.
            Some(m) if m > 1_000_000_000 => out.extend_from_slice(
                b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n",
            ),
            Some(m) => {
                ctx.set_memory_limit(m);
                out.extend_from_slice(b"OK\r\n");
            }
        }),
        Request::Quit => return Flow::Close,
        Request::MetaGet { key, flags } => meta::get(store, now, key, &flags, out),
        Request::MetaSet { key, value, flags } => {
            meta::set(store, now, key, classic::Value::Bytes(value), &flags, out)
        }
        Request::MetaDelete { key, flags } => meta::delete(store, now, key, &flags, out),
        Request::MetaArith { key, flags } => meta::arith(store, now, key, &flags, out),
        Request::MetaNoop => out.extend_from_slice(b"MN\r\n"),
        Request::MetaDebug { key, base64 } => meta::debug(store, now, key, base64, out),
    }
    Flow::Continue
}

/// Answers a [`ParseError`] (other than `Incomplete`): appends memcached's
/// response to `out` (for a fatal one, clears `out`: memcached drops the
/// answers it has not written yet when it closes; it writes them out after
/// each text get and `mn`, which the server's driver does not) and applies its side effects (a refused `set`/`ms` value
/// deletes the key's old item, `store_too_large` is counted). The caller then
/// drops [`ParseError::consumed`] bytes, or closes on [`Flow::Close`].
pub fn execute_error<C: ExecContext + ?Sized>(
    err: &ParseError<'_>,
    store: &Store,
    ctx: &C,
    out: &mut Vec<u8>,
) -> Flow {
    if let ParseError::Client {
        message: BAD_DATA_CHUNK,
        ..
    } = err
    {
        // memcached counts a set whose block it refuses (`set_cmds`, before
        // the block's end is checked).
        store.count(Counter::CmdSet);
    }
    if let ParseError::TooLarge {
        key,
        key_base64,
        invalidate,
        command,
        vlen,
        ..
    }
    | ParseError::NoMemory {
        key,
        key_base64,
        invalidate,
        command,
        vlen,
        ..
    } = *err
    {
        let outcome = if matches!(err, ParseError::NoMemory { .. }) {
            store.count(Counter::StoreNoMemory);
            Outcome::NoMemory
        } else {
            store.count(Counter::StoreTooLarge);
            Outcome::TooLarge
        };
        let mut buf = [0u8; KEY_MAX_LENGTH];
        let key = decode_key(key, key_base64, &mut buf);
        // Logged before the old item goes, as memcached's (no item: class 0).
        if store.watch().wants(crate::watch::MUTATIONS) {
            store_line(store, key, command.name(), outcome, 0, 0, vlen as usize);
        }
        if invalidate {
            store.entry(key, ctx.now()).remove();
        }
    }
    if err.is_fatal() {
        // memcached closes before it writes the responses it has queued:
        // the answers of this read's earlier requests are dropped too.
        out.clear();
        return Flow::Close;
    }
    err.write_response(out);
    Flow::Continue
}

/// The shard a request's key lives in — the color for its payload job — or
/// `None` for requests with no key or several (`get a b`, `stats`,
/// `flush_all`), which may run under any color.
pub fn request_shard(req: &Request<'_>, store: &Store) -> Option<usize> {
    let raw = req.key()?;
    let mut buf = [0u8; KEY_MAX_LENGTH];
    Some(store.shard_of(decode_key(raw, req.key_is_base64(), &mut buf)))
}

/// The shard a binary request's key lives in — its color — or `None` for
/// requests without a store key (`stat`'s key is a group name).
pub fn binary_request_shard(req: &BinRequest<'_>, store: &Store) -> Option<usize> {
    if req.key.is_empty() || req.opcode == Opcode::Stat {
        return None;
    }
    Some(store.shard_of(req.key))
}

#[cfg(test)]
mod tests;
