//! The bound on memory that connections hold in large buffers: a value
//! being received (`set k 0 0 1000000` before its bytes have all arrived)
//! or a response being sent (a `get` of a large item to a client that does
//! not read). memcached keeps both inside its item memory (it allocates the
//! item before reading the value, and sends items by reference); this
//! server copies them into connection buffers, so without a bound, clients
//! that stall could hold `-c` × `-I` bytes outside `-m`.
//!
//! Buffers up to [`LARGE`] are not counted (every connection may hold that
//! much). A larger one takes its size from the budget first — a value being
//! received a step at a time as its bytes arrive (at most four times what
//! it has), so what a client declares and never sends holds nothing; when
//! the budget is spent the request is refused as memcached refuses one it
//! cannot allocate (`SERVER_ERROR out of memory …`), and its bytes are
//! dropped as they arrive rather than buffered — except a get (text, meta
//! or binary), whose answer the server then writes a piece under [`LARGE`]
//! at a time ([`split_get`](crate::command::split_get)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Buffers up to this many bytes are not counted.
pub const LARGE: usize = 64 * 1024;

/// Bytes of large buffers held by all connections, at most `limit`.
#[derive(Debug)]
pub struct BufferBudget {
    used: AtomicUsize,
    limit: usize,
}

impl BufferBudget {
    /// A budget of `limit` bytes; 0: unlimited (still counted).
    pub fn new(limit: usize) -> BufferBudget {
        BufferBudget {
            used: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes `n` bytes if they fit.
    pub fn try_take(&self, n: usize) -> bool {
        if self.limit == 0 {
            self.used.fetch_add(n, Relaxed);
            return true;
        }
        self.used
            .fetch_update(Relaxed, Relaxed, |used| {
                used.checked_add(n).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken before.
    pub fn give(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Relaxed);
        }
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// The limit (0: none).
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// A connection's flag bit: it holds budget for a request being received.
const HOLDS_IN: u8 = 1;
/// A connection's flag bit: it holds budget for responses not yet written.
const HOLDS_OUT: u8 = 2;

/// The budget and what each connection holds of it. Only connections that
/// hold something have an entry; every connection keeps one flag byte
/// (`flags` below), so that the common case — nothing held — is one load.
/// `who` names a connection (any address unique while it lives).
///
/// A value sent from the store (shared, not copied) counts once however
/// many sends hold it: its memory is there once, and clients that ask for
/// the same large item again and again without reading must not spend the
/// budget that everybody else's large values need.
#[derive(Debug)]
pub struct Holdings {
    budget: BufferBudget,
    held: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    conns: HashMap<usize, Held>,
    /// Values sent from the store, by address: while a send holds a value
    /// its memory stays, so no other value has that address then. One
    /// that does later (the first freed before its holders gave it back)
    /// is only counted with it a moment: what is taken and given back
    /// stays equal.
    pins: HashMap<usize, Pin>,
}

/// What one connection holds.
#[derive(Debug, Default)]
struct Held {
    input: usize,
    output: usize,
    /// Addresses of values its sends hold, once per send.
    pins: Vec<usize>,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.input == 0 && self.output == 0 && self.pins.is_empty()
    }
}

#[derive(Debug)]
struct Pin {
    /// Sends holding the value.
    holders: usize,
    /// Bytes taken for it.
    len: usize,
}

impl Holdings {
    /// Holdings against a budget of `limit` bytes (0: unlimited).
    pub fn new(limit: usize) -> Holdings {
        Holdings {
            budget: BufferBudget::new(limit),
            held: Mutex::new(State::default()),
        }
    }

    /// The budget.
    pub fn budget(&self) -> &BufferBudget {
        &self.budget
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<R>(&self, who: usize, f: impl FnOnce(&mut Held) -> R) -> R {
        let mut state = self.lock();
        let entry = state.conns.entry(who).or_default();
        let r = f(entry);
        if entry.is_empty() {
            state.conns.remove(&who);
        }
        r
    }

    /// Makes the connection hold `need` bytes for the request it receives
    /// (taking only what it did not hold yet). False if the budget has no
    /// room: then it holds nothing for input.
    pub fn hold_input(&self, who: usize, flags: &AtomicU8, need: usize) -> bool {
        let ok = self.with(who, |held| {
            if need <= held.input {
                return true;
            }
            if self.budget.try_take(need - held.input) {
                held.input = need;
                true
            } else {
                self.budget.give(std::mem::take(&mut held.input));
                false
            }
        });
        if ok {
            flags.fetch_or(HOLDS_IN, Relaxed);
        } else {
            flags.fetch_and(!HOLDS_IN, Relaxed);
        }
        ok
    }

    /// Gives back what the connection holds for input.
    pub fn release_input(&self, who: usize, flags: &AtomicU8) {
        // A load first: this runs after every request, and almost never
        // finds anything held.
        if flags.load(Relaxed) & HOLDS_IN != 0
            && flags.fetch_and(!HOLDS_IN, Relaxed) & HOLDS_IN != 0
        {
            self.with(who, |held| {
                self.budget.give(std::mem::take(&mut held.input));
            });
        }
    }

    /// Makes the connection hold `n` more bytes for output; false if the
    /// budget has no room.
    pub fn hold_output(&self, who: usize, flags: &AtomicU8, n: usize) -> bool {
        self.hold_output_sharing(who, flags, n, [])
    }

    /// Makes the connection hold `copied` more bytes for output, and the
    /// values `shared` from the store that its send holds: each taken from
    /// the budget only if no send holds it yet. False if the budget has no
    /// room for what is new (nothing is taken then).
    pub fn hold_output_sharing<'a>(
        &self,
        who: usize,
        flags: &AtomicU8,
        copied: usize,
        shared: impl IntoIterator<Item = &'a [u8]>,
    ) -> bool {
        let shared: Vec<&[u8]> = shared.into_iter().filter(|v| !v.is_empty()).collect();
        let mut state = self.lock();
        let mut need = copied;
        for (i, v) in shared.iter().enumerate() {
            let at = v.as_ptr() as usize;
            let seen = shared[..i].iter().any(|w| w.as_ptr() as usize == at);
            if !seen && !state.pins.contains_key(&at) {
                need = need.saturating_add(v.len());
            }
        }
        if !self.budget.try_take(need) {
            return false;
        }
        for v in &shared {
            let pin = state.pins.entry(v.as_ptr() as usize).or_insert(Pin {
                holders: 0,
                len: v.len(),
            });
            pin.holders += 1;
        }
        let held = state.conns.entry(who).or_default();
        held.output += copied;
        held.pins.extend(shared.iter().map(|v| v.as_ptr() as usize));
        if held.is_empty() {
            state.conns.remove(&who);
        }
        drop(state);
        flags.fetch_or(HOLDS_OUT, Relaxed);
        true
    }

    /// Gives back what the connection holds for output (its responses were
    /// written): its copies, and each value no other send holds any more.
    pub fn release_output(&self, who: usize, flags: &AtomicU8) {
        if flags.load(Relaxed) & HOLDS_OUT == 0
            || flags.fetch_and(!HOLDS_OUT, Relaxed) & HOLDS_OUT == 0
        {
            return;
        }
        let mut state = self.lock();
        let State { conns, pins } = &mut *state;
        let Some(held) = conns.get_mut(&who) else {
            return;
        };
        self.budget.give(std::mem::take(&mut held.output));
        for at in held.pins.drain(..) {
            if let Some(pin) = pins.get_mut(&at) {
                pin.holders -= 1;
                if pin.holders == 0 {
                    self.budget.give(pin.len);
                    pins.remove(&at);
                }
            }
        }
        if held.is_empty() {
            conns.remove(&who);
        }
    }

    /// Gives back everything the connection holds (it closed).
    pub fn release_all(&self, who: usize, flags: &AtomicU8) {
        self.release_input(who, flags);
        self.release_output(who, flags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_what_fits_and_gets_it_back() {
        let b = BufferBudget::new(100);
        assert!(b.try_take(60));
        assert!(!b.try_take(41), "over the limit");
        assert!(b.try_take(40));
        assert_eq!(b.used(), 100);
        b.give(60);
        assert!(b.try_take(50));
        assert_eq!(b.used(), 90);
        assert!(!b.try_take(usize::MAX), "no overflow");
        let unlimited = BufferBudget::new(0);
        assert!(unlimited.try_take(1 << 40));
        assert_eq!(unlimited.used(), 1 << 40);
    }

    #[test]
    fn connections_hold_and_give_back() {
        let h = Holdings::new(1000);
        let (a, b) = (AtomicU8::new(0), AtomicU8::new(0));
        assert!(h.hold_input(1, &a, 600));
        assert!(h.hold_input(1, &a, 600), "already held");
        assert!(h.hold_input(1, &a, 700), "grows by 100");
        assert_eq!(h.budget().used(), 700);
        assert!(!h.hold_input(2, &b, 400), "no room");
        assert_eq!(b.load(Relaxed), 0);
        assert!(h.hold_output(2, &b, 300));
        assert_eq!(h.lock().conns[&2].output, 300);
        assert!(!h.hold_output(2, &b, 1));
        h.release_input(1, &a);
        assert_eq!((h.budget().used(), a.load(Relaxed)), (300, 0));
        h.release_input(1, &a);
        assert_eq!(h.budget().used(), 300, "released once");
        assert!(h.hold_input(1, &a, 500));
        h.release_all(1, &a);
        h.release_all(2, &b);
        assert_eq!(h.budget().used(), 0);
        assert!(h.lock().conns.is_empty(), "no entry left behind");
    }

    #[test]
    fn a_value_many_sends_hold_counts_once() {
        let h = Holdings::new(900);
        let (a, b, c) = (AtomicU8::new(0), AtomicU8::new(0), AtomicU8::new(0));
        let item = [7u8; 600];
        let other = [8u8; 200];
        // One send: its header copied, the value shared.
        assert!(h.hold_output_sharing(1, &a, 20, [&item[..]]));
        assert_eq!(h.budget().used(), 620);
        // The same value again (twice in one answer, and on another
        // connection): only the copies are new.
        assert!(h.hold_output_sharing(1, &a, 20, [&item[..], &item[..]]));
        assert!(h.hold_output_sharing(2, &b, 20, [&item[..]]));
        assert_eq!(h.budget().used(), 660);
        // Another value is taken whole, and fails whole without room.
        assert!(!h.hold_output_sharing(3, &c, 60, [&item[..], &other[..]]));
        assert_eq!((h.budget().used(), c.load(Relaxed)), (660, 0));
        assert!(h.hold_output_sharing(3, &c, 0, [&other[..], &other[..]]));
        assert_eq!(h.budget().used(), 860);
        // The first connection's answers written: the value stays taken
        // while the second's send holds it.
        h.release_output(1, &a);
        assert_eq!(h.budget().used(), 820);
        h.release_output(1, &a);
        assert_eq!(h.budget().used(), 820, "released once");
        h.release_all(2, &b);
        assert_eq!(h.budget().used(), 200);
        h.release_all(3, &c);
        assert_eq!(h.budget().used(), 0);
        let state = h.lock();
        assert!(state.conns.is_empty() && state.pins.is_empty(), "{state:?}");
    }
}
