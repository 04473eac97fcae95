//! memcached's `watch`: streams of log lines about what the cache does, for
//! the clients that ask (`watch fetchers mutations evictions connevents`).
//!
//! Where no client watches, an event costs one relaxed load
//! ([`Watch::wants`]). Where one does, the event's line is made once, in
//! memcached's format (`ts=<s>.<us> gid=<n> type=item_get key=… …`), and
//! offered to each watcher of its kind through a bounded queue (the
//! runtime's model-checked [`mpsc`]). A watcher whose queue is full misses
//! the line, counted, and reads `skipped=<n>` before its next one, as
//! memcached's watchers do: a watcher that reads slowly slows nobody else,
//! and what it holds stays bounded. Its connection writes the lines (see
//! the server's `finish`).
//!
//! Lines are made where the event happens, often under a shard's lock; a
//! server holds the lines of a request in a thread-local list while it
//! executes it ([`Watch::batch`]) and offers them once it is done, so the
//! watchers' lock and the wake-ups of their connections are taken once per
//! request, outside the shard's lock (memcached's workers likewise write
//! to a buffer of their own that its logger thread drains). Lines made
//! outside a batch (a large value stored as it arrives, a connection's
//! end) and past [`WATCHER_QUEUE`] held lines are offered as they are
//! made.

use duality_rt::sync::mpsc;
use std::cell::{Cell, RefCell};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// `fetchers`: every key lookup (`type=item_get`), the lookups inside
/// stores, deletes and arithmetic included, as memcached logs them.
pub const FETCHERS: u8 = 1;
/// `mutations`: every store command's outcome (`type=item_store`).
pub const MUTATIONS: u8 = 1 << 1;
/// `evictions`: every live item evicted (`type=eviction`).
pub const EVICTIONS: u8 = 1 << 2;
/// `connevents`: connections opened and closed (`type=conn_new`,
/// `type=conn_close`).
pub const CONNEVENTS: u8 = 1 << 3;
/// `sysevents`: accepted, nothing logged (memcached logs its crawler's and
/// slab mover's runs there; duality has no slab mover, and its expiry
/// sweeps are not logged).
pub const SYSEVENTS: u8 = 1 << 4;
/// `rawcmds`: accepted; memcached 1.6.18 logs nothing there either.
pub const RAWCMDS: u8 = 1 << 5;
/// `proxyreqs`, `proxyevents`, `proxyuser`: accepted (1.6.18 accepts them
/// without its proxy), nothing logged: there is no proxy.
pub const PROXY: u8 = 1 << 6;

/// At most this many watchers at once (memcached's `WATCHER_LIMIT`).
pub const WATCHER_LIMIT: usize = 20;

/// Lines a watcher's queue holds (about 256 KiB of typical lines,
/// memcached's default `watcher_logbuf_size`).
pub const WATCHER_QUEUE: usize = 2048;

/// The kinds named by `watch`'s arguments (none: `fetchers`, as
/// memcached's default); `None` if one is not a kind memcached 1.6.18
/// knows (it answers `ERROR`).
pub fn kinds<'a>(words: impl IntoIterator<Item = &'a [u8]>) -> Option<u8> {
    let mut kinds = 0;
    let mut any = false;
    for w in words {
        any = true;
        kinds |= match w {
            b"fetchers" => FETCHERS,
            b"mutations" => MUTATIONS,
            b"evictions" => EVICTIONS,
            b"connevents" => CONNEVENTS,
            b"sysevents" => SYSEVENTS,
            b"rawcmds" => RAWCMDS,
            b"proxyreqs" | b"proxyevents" | b"proxyuser" => PROXY,
            _ => return None,
        };
    }
    Some(if any { kinds } else { FETCHERS })
}

/// One line for a watcher: `skipped` lines it missed just before this one
/// (its queue was full), and the line itself (ending in `\n`), shared by
/// every watcher it goes to.
#[derive(Clone, Debug)]
pub struct Line {
    /// Lines missed before this one.
    pub skipped: u64,
    /// The line.
    pub text: Arc<[u8]>,
}

impl Line {
    /// Appends what the watcher writes: `skipped=<n>\n` first if it missed
    /// lines, then the line.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        if self.skipped > 0 {
            let _ = writeln!(out, "skipped={}", self.skipped);
        }
        out.extend_from_slice(&self.text);
    }
}

/// Why [`Watch::add`] refused a watcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// [`WATCHER_LIMIT`] watchers already (memcached's
    /// `WATCHER_TOO_MANY log watcher limit reached`).
    TooMany,
    /// The watches were closed: the server stops (memcached's
    /// `WATCHER_FAILED failed to add log watcher`).
    Closed,
}

impl Refused {
    /// The answer memcached gives.
    pub fn answer(self) -> &'static [u8] {
        match self {
            Refused::TooMany => b"WATCHER_TOO_MANY log watcher limit reached\r\n",
            Refused::Closed => b"WATCHER_FAILED failed to add log watcher\r\n",
        }
    }
}

struct Watcher {
    kinds: u8,
    tx: mpsc::Sender<Line>,
    skipped: u64,
}

/// The watchers of one store, and its log counters (memcached's `log_*`
/// stats).
#[derive(Default)]
pub struct Watch {
    /// The kinds some watcher wants (a hint read without the lock: a line
    /// made as a watcher comes or goes may be offered or not).
    kinds: AtomicU8,
    /// Numbers the lines, store-wide, as memcached's `gid`.
    gid: AtomicU64,
    watchers: Mutex<Vec<Watcher>>,
    /// Set by [`close`](Watch::close): no watcher is added again.
    closed: std::sync::atomic::AtomicBool,
    written: AtomicU64,
    sent: AtomicU64,
    skipped: AtomicU64,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("kinds", &self.kinds.load(Relaxed))
            .field("watchers", &self.watchers())
            .finish()
    }
}

/// What `watch` counts, for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Lines made (memcached's `log_worker_written`).
    pub written: u64,
    /// Lines missed by a watcher whose queue was full
    /// (`log_watcher_skipped`).
    pub skipped: u64,
    /// Lines queued to watchers (`log_watcher_sent`).
    pub sent: u64,
    /// Watchers now (`log_watchers`).
    pub watchers: u64,
}

thread_local! {
    /// The descriptor of the connection whose request this thread runs
    /// (memcached's `cfd`; -1: none), set by the server per request.
    static CONN_FD: Cell<i32> = const { Cell::new(-1) };
}

thread_local! {
    /// The [`Watch`] whose lines this thread holds until its [`Batch`]
    /// ends (its address; 0: none), and the lines held.
    static BATCHING: Cell<usize> = const { Cell::new(0) };
    static HELD: RefCell<Vec<(u8, Arc<[u8]>)>> = const { RefCell::new(Vec::new()) };
}

/// Lines of one [`Watch`] held on this thread (see [`Watch::batch`]);
/// offered to the watchers when it drops.
#[must_use = "the lines are held only while the batch lives"]
pub struct Batch<'a> {
    watch: &'a Watch,
    /// Not Send: the lines are held by the thread that made the batch.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        BATCHING.with(|b| b.set(0));
        self.watch.offer_held();
    }
}

/// Names `fd` as the connection whose requests this thread runs now (the
/// `cfd=` of the lines they log).
pub fn set_conn_fd(fd: i32) {
    CONN_FD.with(|c| c.set(fd));
}

/// The descriptor [`set_conn_fd`] named last on this thread.
pub fn conn_fd() -> i32 {
    CONN_FD.with(Cell::get)
}

impl Watch {
    /// Whether some watcher wants lines of `kind`: check before making one.
    #[inline]
    pub fn wants(&self, kind: u8) -> bool {
        self.kinds.load(Relaxed) & kind != 0
    }

    /// Holds the lines this thread logs from now until the batch drops,
    /// then offers them to the watchers at once: a server executes a
    /// request inside one, so lines made under a shard's lock are offered
    /// after it is let go. `None` (lines go out as they are made) while
    /// nobody watches, or inside another batch (that one offers them).
    #[inline]
    pub fn batch(&self) -> Option<Batch<'_>> {
        if self.kinds.load(Relaxed) == 0 {
            return None;
        }
        BATCHING.with(|b| {
            if b.get() != 0 {
                return None;
            }
            b.set(self as *const Watch as usize);
            Some(Batch {
                watch: self,
                _thread: std::marker::PhantomData,
            })
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watcher>> {
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new watcher of `kinds`: the lines it is to write come from the
    /// receiver, from the next line on. Watchers whose receiver is gone
    /// are let go first.
    pub fn add(&self, kinds: u8) -> Result<mpsc::Receiver<Line>, Refused> {
        let mut ws = self.lock();
        if self.closed.load(Relaxed) {
            return Err(Refused::Closed);
        }
        ws.retain(|w| !w.tx.is_closed());
        if ws.len() >= WATCHER_LIMIT {
            self.set_kinds(&ws);
            return Err(Refused::TooMany);
        }
        let (tx, rx) = mpsc::channel(WATCHER_QUEUE);
        ws.push(Watcher {
            kinds,
            tx,
            skipped: 0,
        });
        self.set_kinds(&ws);
        Ok(rx)
    }

    /// Ends every watch (the server stops): each receiver yields `None`
    /// once it has taken what was queued, and no watcher is added again.
    pub fn close(&self) {
        let mut ws = self.lock();
        self.closed.store(true, Relaxed);
        ws.clear();
        self.set_kinds(&ws);
    }

    fn set_kinds(&self, ws: &[Watcher]) {
        self.kinds
            .store(ws.iter().fold(0, |k, w| k | w.kinds), Relaxed);
    }

    /// Watchers now.
    pub fn watchers(&self) -> usize {
        let ws = self.lock();
        ws.iter().filter(|w| !w.tx.is_closed()).count()
    }

    /// The counters (see [`WatchStats`]).
    pub fn stats(&self) -> WatchStats {
        WatchStats {
            written: self.written.load(Relaxed),
            skipped: self.skipped.load(Relaxed),
            sent: self.sent.load(Relaxed),
            watchers: self.watchers() as u64,
        }
    }

    /// Sets the counters to 0 (`stats reset`); the watchers stay.
    pub fn reset_stats(&self) {
        for c in [&self.written, &self.skipped, &self.sent] {
            c.store(0, Relaxed);
        }
    }

    /// Logs a line of `kind` if some watcher wants one: `body` writes what
    /// follows `ts=… gid=… ` (without the line's end).
    pub fn log(&self, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
        if !self.wants(kind) {
            return;
        }
        let gid = self.gid.fetch_add(1, Relaxed) + 1;
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut line = Vec::with_capacity(160);
        let _ = write!(
            line,
            "ts={}.{:06} gid={gid} ",
            ts.as_secs(),
            ts.subsec_micros()
        );
        body(&mut line);
        line.push(b'\n');
        let text: Arc<[u8]> = line.into();
        self.written.fetch_add(1, Relaxed);
        if BATCHING.with(Cell::get) == self as *const Watch as usize {
            // At most a queue's worth held: a request that logs more (a
            // `cache_memlimit` evicting millions, a get of 100,000 keys)
            // offers them as it goes, as if it were not batched.
            if HELD.with(|h| {
                let mut h = h.borrow_mut();
                h.push((kind, text));
                h.len() >= WATCHER_QUEUE
            }) {
                self.offer_held();
            }
            return;
        }
        let mut ws = self.lock();
        let gone = self.offer(&mut ws, kind, &text);
        self.let_go(&mut ws, gone);
    }

    /// Offers the lines this thread holds, in the order they were made,
    /// under one hold of the watchers' lock; the list's room is kept for
    /// the thread's next batch.
    fn offer_held(&self) {
        let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
        if !held.is_empty() {
            let mut ws = self.lock();
            let mut gone = false;
            for (kind, text) in &held {
                gone |= self.offer(&mut ws, *kind, text);
            }
            self.let_go(&mut ws, gone);
        }
        let mut held = held;
        held.clear();
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if h.capacity() < held.capacity() {
                *h = held;
            }
        });
    }

    /// Offers a line of `kind` to its watchers; true if one was gone.
    fn offer(&self, ws: &mut [Watcher], kind: u8, text: &Arc<[u8]>) -> bool {
        let mut gone = false;
        for w in ws.iter_mut().filter(|w| w.kinds & kind != 0) {
            let line = Line {
                skipped: w.skipped,
                text: text.clone(),
            };
            match w.tx.try_send(line) {
                Ok(()) => {
                    w.skipped = 0;
                    self.sent.fetch_add(1, Relaxed);
                }
                Err(mpsc::TrySendError::Full(_)) => {
                    w.skipped += 1;
                    self.skipped.fetch_add(1, Relaxed);
                }
                Err(mpsc::TrySendError::Closed(_)) => gone = true,
            }
        }
        gone
    }

    /// Lets watchers whose receiver is gone go, if [`offer`](Self::offer)
    /// met one.
    fn let_go(&self, ws: &mut Vec<Watcher>, gone: bool) {
        if gone {
            ws.retain(|w| !w.tx.is_closed());
            self.set_kinds(ws);
        }
    }
}

/// memcached's `uriencode`: letters, digits and `-._~` as they are, every
/// other byte as `%XX` (upper-case hex). Keys in log lines and listings.
pub(crate) fn uriencode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Writes `key=<key, uriencoded>` (a log line's key field).
pub(crate) fn write_key(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"key=");
    uriencode(key, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(rx: &mut mpsc::Receiver<Line>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(l) = rx.try_recv() {
            let mut b = Vec::new();
            l.write_to(&mut b);
            out.push(String::from_utf8(b).unwrap());
        }
        out
    }

    #[test]
    fn kinds_are_memcacheds_words() {
        let k = |s: &str| kinds(s.split_whitespace().map(str::as_bytes));
        assert_eq!(k(""), Some(FETCHERS));
        assert_eq!(k("mutations evictions"), Some(MUTATIONS | EVICTIONS));
        assert_eq!(k("fetchers fetchers"), Some(FETCHERS));
        assert_eq!(
            k("connevents sysevents rawcmds"),
            Some(CONNEVENTS | SYSEVENTS | RAWCMDS)
        );
        assert_eq!(k("proxyreqs proxyuser proxyevents"), Some(PROXY));
        // 1.6.18 has no `deletions`; case matters.
        assert_eq!(k("deletions"), None);
        assert_eq!(k("FETCHERS"), None);
        assert_eq!(k("fetchers bogus"), None);
    }

    #[test]
    fn a_line_goes_to_the_watchers_of_its_kind_only() {
        let w = Watch::default();
        assert!(!w.wants(FETCHERS));
        // Nothing is made while nobody watches.
        w.log(FETCHERS, |_| panic!("made for nobody"));
        let mut f = w.add(FETCHERS).unwrap();
        let mut m = w.add(MUTATIONS | FETCHERS).unwrap();
        assert!(w.wants(FETCHERS) && w.wants(MUTATIONS) && !w.wants(EVICTIONS));
        w.log(FETCHERS, |o| o.extend_from_slice(b"type=item_get key=a"));
        w.log(MUTATIONS, |o| o.extend_from_slice(b"type=item_store"));
        let (f, m) = (texts(&mut f), texts(&mut m));
        assert_eq!(f.len(), 1);
        assert_eq!(m.len(), 2);
        assert!(f[0].starts_with("ts="), "{f:?}");
        assert!(f[0].ends_with(" gid=1 type=item_get key=a\n"), "{f:?}");
        assert!(m[1].contains(" gid=2 type=item_store\n"), "{m:?}");
        let st = w.stats();
        assert_eq!((st.written, st.sent, st.skipped, st.watchers), (2, 3, 0, 2));
    }

    #[test]
    fn a_full_queue_skips_and_says_so_before_the_next_line() {
        let w = Watch::default();
        let mut rx = w.add(EVICTIONS).unwrap();
        for _ in 0..WATCHER_QUEUE + 5 {
            w.log(EVICTIONS, |o| o.extend_from_slice(b"type=eviction"));
        }
        assert_eq!(texts(&mut rx).len(), WATCHER_QUEUE);
        w.log(EVICTIONS, |o| o.extend_from_slice(b"type=eviction"));
        let after = texts(&mut rx);
        assert_eq!(after.len(), 1);
        assert!(after[0].starts_with("skipped=5\nts="), "{after:?}");
        assert_eq!(w.stats().skipped, 5);
    }

    #[test]
    fn watchers_are_limited_and_gone_ones_make_room() {
        let w = Watch::default();
        let mut rxs: Vec<_> = (0..WATCHER_LIMIT)
            .map(|_| w.add(FETCHERS).unwrap())
            .collect();
        assert_eq!(w.add(FETCHERS).err(), Some(Refused::TooMany));
        rxs.pop();
        assert!(w.add(MUTATIONS).is_ok(), "a closed watcher's place is free");
        // One that leaves is dropped at the next line, and its kind with it.
        let w2 = Watch::default();
        let rx = w2.add(CONNEVENTS).unwrap();
        drop(rx);
        w2.log(CONNEVENTS, |_| {});
        assert!(!w2.wants(CONNEVENTS));
        assert_eq!(w2.stats().watchers, 0);
    }

    #[test]
    fn close_ends_every_watch() {
        let w = Watch::default();
        let mut rx = w.add(FETCHERS).unwrap();
        w.log(FETCHERS, |o| o.extend_from_slice(b"x"));
        w.close();
        assert!(!w.wants(FETCHERS));
        assert!(rx.try_recv().is_ok(), "what was queued is still written");
        assert_eq!(rx.try_recv().err(), Some(mpsc::TryRecvError::Disconnected));
        assert_eq!(w.add(FETCHERS).err(), Some(Refused::Closed));
    }

    #[test]
    fn a_batch_holds_its_lines_until_it_ends() {
        let w = Watch::default();
        assert!(w.batch().is_none(), "nothing to hold while nobody watches");
        let mut rx = w.add(FETCHERS | MUTATIONS).unwrap();
        let other = Watch::default();
        let mut orx = other.add(FETCHERS).unwrap();
        {
            let batch = w.batch().expect("a watcher");
            assert!(w.batch().is_none(), "the outer batch holds them");
            w.log(FETCHERS, |o| o.extend_from_slice(b"a"));
            w.log(MUTATIONS, |o| o.extend_from_slice(b"b"));
            // Another store's lines are not this batch's.
            other.log(FETCHERS, |o| o.extend_from_slice(b"c"));
            assert_eq!(texts(&mut orx).len(), 1);
            assert!(texts(&mut rx).is_empty(), "held");
            assert_eq!(w.stats().written, 2);
            drop(batch);
        }
        let got = texts(&mut rx);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].ends_with(" gid=1 a\n") && got[1].ends_with(" gid=2 b\n"));
        assert_eq!(w.stats().sent, 2);
        // Done: lines go out as they are made again.
        w.log(FETCHERS, |o| o.extend_from_slice(b"d"));
        assert_eq!(texts(&mut rx).len(), 1);
        // A watcher gone meanwhile is let go when the batch ends.
        let batch = w.batch().unwrap();
        w.log(FETCHERS, |o| o.extend_from_slice(b"e"));
        drop(rx);
        drop(batch);
        assert!(!w.wants(FETCHERS));
        // A batch holds at most a queue's worth: the rest go as made.
        let mut rx = w.add(EVICTIONS).unwrap();
        let batch = w.batch().unwrap();
        for _ in 0..WATCHER_QUEUE - 1 {
            w.log(EVICTIONS, |o| o.extend_from_slice(b"x"));
        }
        assert!(texts(&mut rx).is_empty(), "held");
        assert_eq!(HELD.with(|h| h.borrow().len()), WATCHER_QUEUE - 1);
        w.log(EVICTIONS, |o| o.extend_from_slice(b"x"));
        assert_eq!(HELD.with(|h| h.borrow().len()), 0);
        assert_eq!(texts(&mut rx).len(), WATCHER_QUEUE);
        drop(batch);
    }

    #[test]
    fn keys_are_uriencoded() {
        let mut out = Vec::new();
        write_key(&mut out, b"a-b.c_d~e/f:g h%\x01");
        assert_eq!(out, b"key=a-b.c_d~e%2Ff%3Ag%20h%25%01");
    }
}
