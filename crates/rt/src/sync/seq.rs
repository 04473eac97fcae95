//! [`SeqPair`]: two words that readers see together, without a lock.

use crate::loom::{fence, AtomicU32, AtomicU64, Mutex};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Two `u64` words read as one: a reader sees both words of one update,
/// never one word old and one new. Reads take no lock and write nothing
/// (a value read on every request of every thread stays in every core's
/// cache); updates are serialised by a mutex and may read what they
/// replace. A sequence lock: a reader that overlaps an update reads again.
///
/// For rarely written state read on hot paths (the cache's flush state:
/// an epoch and two times). Readers wait only for an update's few stores
/// (nanoseconds, unless the updating thread is preempted among them: a
/// reader then yields its thread after a short spin). Keep it off cache
/// lines that other threads write often.
pub struct SeqPair {
    /// Even between updates, odd during one.
    seq: AtomicU32,
    words: [AtomicU64; 2],
    update: Mutex<()>,
}

impl SeqPair {
    /// A pair holding `words`.
    pub fn new(words: (u64, u64)) -> SeqPair {
        SeqPair {
            seq: AtomicU32::new(0),
            words: [AtomicU64::new(words.0), AtomicU64::new(words.1)],
            update: Mutex::new(()),
        }
    }

    /// Both words, from one update.
    pub fn read(&self) -> (u64, u64) {
        #[cfg(not(loom))]
        let mut spins = 0u32;
        loop {
            let before = self.seq.load(Acquire);
            if before & 1 == 0 {
                let words = (self.words[0].load(Relaxed), self.words[1].load(Relaxed));
                // Orders the words' loads before the second look at `seq`:
                // words an update wrote after making `seq` odd make that
                // look see the change.
                fence(Acquire);
                if self.seq.load(Relaxed) == before {
                    return words;
                }
            }
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            {
                // The updater was preempted mid-update, most likely, past
                // a short spin: let it run.
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Replaces both words with what `f` makes of them; returns what else
    /// `f` returns. Updates run one at a time (a mutex), so `f` sees the
    /// last one's words; readers do not wait for `f`, only for the stores
    /// after it. `f` must not call `update` (it would wait for itself).
    pub fn update<R>(&self, f: impl FnOnce((u64, u64)) -> ((u64, u64), R)) -> R {
        let _one = self
            .update
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seq = self.seq.load(Relaxed);
        let old = (self.words[0].load(Relaxed), self.words[1].load(Relaxed));
        let (new, r) = f(old);
        self.seq.store(seq.wrapping_add(1), Relaxed);
        // Orders the odd `seq` before the words' stores (a reader that sees
        // a new word sees `seq` changed at its second look).
        fence(Release);
        self.words[0].store(new.0, Relaxed);
        self.words[1].store(new.1, Relaxed);
        self.seq.store(seq.wrapping_add(2), Release);
        r
    }
}

impl std::fmt::Debug for SeqPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SeqPair").field(&self.read()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SeqPair;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    #[test]
    fn an_update_sees_the_last_and_returns_its_result() {
        let p = SeqPair::new((1, 2));
        assert_eq!(p.read(), (1, 2));
        let old = p.update(|(a, b)| ((a + 10, b + 20), (a, b)));
        assert_eq!(old, (1, 2));
        assert_eq!(p.read(), (11, 22));
    }

    /// Readers racing updates that keep both words equal never see them
    /// differ (two separate atomics would, often).
    #[test]
    fn readers_never_see_half_an_update() {
        let p = SeqPair::new((0, 0));
        let reads = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let (a, b) = p.read();
                    if a != b {
                        return Some((a, b));
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                None
            });
            // Updates until the reader has raced many of them (or saw one
            // torn).
            let mut i = 0u64;
            while (i < 100_000 || reads.load(Ordering::Relaxed) < 1_000_000)
                && !reader.is_finished()
            {
                i += 1;
                p.update(|_| ((i, i), ()));
            }
            stop.store(true, Ordering::Relaxed);
            assert_eq!(reader.join().unwrap(), None, "a torn read");
            assert_eq!(p.read(), (i, i));
        });
    }
}
