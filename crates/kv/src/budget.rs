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
#[derive(Debug)]
pub struct Holdings {
    budget: BufferBudget,
    held: Mutex<HashMap<usize, (usize, usize)>>,
}

impl Holdings {
    /// Holdings against a budget of `limit` bytes (0: unlimited).
    pub fn new(limit: usize) -> Holdings {
        Holdings {
            budget: BufferBudget::new(limit),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The budget.
    pub fn budget(&self) -> &BufferBudget {
        &self.budget
    }

    fn with<R>(&self, who: usize, f: impl FnOnce(&mut (usize, usize)) -> R) -> R {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let entry = held.entry(who).or_default();
        let r = f(entry);
        if *entry == (0, 0) {
            held.remove(&who);
        }
        r
    }

    /// Makes the connection hold `need` bytes for the request it receives
    /// (taking only what it did not hold yet). False if the budget has no
    /// room: then it holds nothing for input.
    pub fn hold_input(&self, who: usize, flags: &AtomicU8, need: usize) -> bool {
        let ok = self.with(who, |(input, _)| {
            if need <= *input {
                return true;
            }
            if self.budget.try_take(need - *input) {
                *input = need;
                true
            } else {
                self.budget.give(std::mem::take(input));
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
            self.with(who, |(input, _)| self.budget.give(std::mem::take(input)));
        }
    }

    /// Makes the connection hold `n` more bytes for output; false if the
    /// budget has no room.
    pub fn hold_output(&self, who: usize, flags: &AtomicU8, n: usize) -> bool {
        if !self.budget.try_take(n) {
            return false;
        }
        self.with(who, |(_, output)| *output += n);
        flags.fetch_or(HOLDS_OUT, Relaxed);
        true
    }

    /// Gives back what the connection holds for output (its responses were
    /// written).
    pub fn release_output(&self, who: usize, flags: &AtomicU8) {
        if flags.load(Relaxed) & HOLDS_OUT != 0
            && flags.fetch_and(!HOLDS_OUT, Relaxed) & HOLDS_OUT != 0
        {
            self.with(who, |(_, output)| self.budget.give(std::mem::take(output)));
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
        assert_eq!(h.held.lock().unwrap()[&2], (0, 300));
        assert!(!h.hold_output(2, &b, 1));
        h.release_input(1, &a);
        assert_eq!((h.budget().used(), a.load(Relaxed)), (300, 0));
        h.release_input(1, &a);
        assert_eq!(h.budget().used(), 300, "released once");
        assert!(h.hold_input(1, &a, 500));
        h.release_all(1, &a);
        h.release_all(2, &b);
        assert_eq!(h.budget().used(), 0);
        assert!(h.held.lock().unwrap().is_empty(), "no entry left behind");
    }
}
