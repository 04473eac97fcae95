//! A table of values addressed by `generation << 32 | index` keys: the
//! epoll reactor's registered sources (the key is the epoll token), the
//! io_uring ring's operations in flight (the key is the user data), and the
//! models' shutdown registry (one waiter per connection, no hash-table
//! slack).
//!
//! A key outlives its value: an event already fetched for a source that
//! was just removed, or a completion the table no longer expects, still
//! names its slot. Every insert takes a new generation from one counter for
//! the whole table, so such a key does not match a later value in the same
//! slot until that counter has wrapped (2^32 inserts later: far longer than
//! a stale event or completion lives). That counter is also what lets the table shrink: once a burst of
//! connections has closed, trailing free slots are dropped and the storage
//! is given back (it held tens of bytes per connection at the peak for as
//! long as the loop lived), and a slot made again later still gets a
//! generation no old key carries.

/// Values addressed by `generation << 32 | index`.
pub struct GenTable<T> {
    slots: Vec<(u32, Option<T>)>,
    /// Indices of free slots, newest last. May hold indices at or past the
    /// end (slots dropped since) or of slots reused since: `insert` checks.
    free: Vec<u32>,
    live: usize,
    generation: u32,
}

/// Below this many slots the table never shrinks (not worth the churn).
const KEEP: usize = 64;

impl<T> Default for GenTable<T> {
    fn default() -> Self {
        GenTable {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            generation: 0,
        }
    }
}

impl<T> GenTable<T> {
    /// Stores `value`; returns its key (never 0, and its generation is
    /// never `u32::MAX`, so keys stay clear of sentinels kept there).
    pub fn insert(&mut self, value: T) -> u64 {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 || self.generation == u32::MAX {
            self.generation = 1;
        }
        let slot = loop {
            match self.free.pop() {
                Some(i) if self.slots.get(i as usize).is_some_and(|s| s.1.is_none()) => {
                    break i as usize
                }
                Some(_) => continue,
                None => {
                    self.slots.push((0, None));
                    break self.slots.len() - 1;
                }
            }
        };
        self.slots[slot] = (self.generation, Some(value));
        self.live += 1;
        (u64::from(self.generation) << 32) | slot as u64
    }

    fn split(key: u64) -> (usize, u32) {
        ((key & 0xffff_ffff) as usize, (key >> 32) as u32)
    }

    /// The value of `key`, if it is still there.
    pub fn get(&self, key: u64) -> Option<&T> {
        let (slot, generation) = Self::split(key);
        match self.slots.get(slot) {
            Some((g, v)) if *g == generation => v.as_ref(),
            _ => None,
        }
    }

    /// The value of `key`, if it is still there.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        let (slot, generation) = Self::split(key);
        match self.slots.get_mut(slot) {
            Some((g, v)) if *g == generation => v.as_mut(),
            _ => None,
        }
    }

    /// The key of the value in slot `index` (a key's low 32 bits), if one
    /// is there: for an owner that keeps only the index of its value, where
    /// no one else removes it (so the slot cannot have been reused).
    pub fn key_at(&self, index: u32) -> Option<u64> {
        match self.slots.get(index as usize) {
            Some((g, Some(_))) => Some((u64::from(*g) << 32) | u64::from(index)),
            _ => None,
        }
    }

    /// Takes the value of `key` out, if it is still there.
    pub fn remove(&mut self, key: u64) -> Option<T> {
        let (slot, generation) = Self::split(key);
        let value = match self.slots.get_mut(slot) {
            Some((g, v)) if *g == generation => v.take()?,
            _ => return None,
        };
        self.live -= 1;
        self.free.push(slot as u32);
        self.shrink();
        Some(value)
    }

    /// Drops trailing free slots, and gives storage back once at most a
    /// quarter of it is in use.
    fn shrink(&mut self) {
        while matches!(self.slots.last(), Some((_, None))) {
            self.slots.pop();
        }
        if self.slots.capacity() > KEEP && self.slots.len() <= self.slots.capacity() / 4 {
            let len = self.slots.len();
            self.slots.shrink_to((len * 2).max(KEEP));
            self.free.retain(|&i| (i as usize) < len);
            self.free.shrink_to(self.free.len() * 2);
        }
    }

    /// Values in the table.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Every value, in slot order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|(_, v)| v.as_ref())
    }

    /// Every value with its key, in slot order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut T)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, (g, v))| Some(((u64::from(*g) << 32) | i as u64, v.as_mut()?)))
    }

    /// Takes every value out, emptying the table.
    pub fn take_all(&mut self) -> Vec<T> {
        self.free.clear();
        self.live = 0;
        self.slots.drain(..).filter_map(|(_, v)| v).collect()
    }

    /// Slots the table keeps room for.
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::GenTable;

    #[test]
    fn a_removed_key_never_reaches_a_later_value_in_its_slot() {
        let mut t = GenTable::default();
        let a = t.insert("a");
        let b = t.insert("b");
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.get(a), None);
        let c = t.insert("c");
        // `c` reuses `a`'s slot under a new generation.
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff);
        assert_ne!(c, a);
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None);
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.get(b), Some(&"b"));
        assert_eq!(t.live(), 2);
        // The trailing slot is dropped when `b` goes, and made again for
        // `d`: `b`'s key still does not match.
        assert_eq!(t.remove(b), Some("b"));
        let d = t.insert("d");
        assert_eq!(d & 0xffff_ffff, b & 0xffff_ffff);
        assert_eq!(t.get(b), None);
        assert_eq!(t.get_mut(d), Some(&mut "d"));
        // Each value with the key that reaches it.
        for (k, v) in t.iter_mut() {
            *v = if k == c { "C" } else { "D" };
        }
        assert_eq!((t.get(c), t.get(d)), (Some(&"C"), Some(&"D")));
    }

    #[test]
    fn a_slot_gives_the_key_of_its_value() {
        let mut t = GenTable::default();
        let a = t.insert("a");
        let b = t.insert("b");
        assert_eq!(t.key_at(a as u32), Some(a));
        assert_eq!(t.key_at(b as u32), Some(b));
        t.remove(a);
        assert_eq!(t.key_at(a as u32), None);
        assert_eq!(t.key_at(7), None);
        let c = t.insert("c");
        assert_eq!(t.key_at(c as u32), Some(c));
    }

    #[test]
    fn storage_comes_back_after_a_burst() {
        let mut t = GenTable::default();
        let first = t.insert(0u64);
        let keys: Vec<u64> = (1..20_000).map(|i| t.insert(i)).collect();
        let peak = t.capacity();
        assert!(peak >= 20_000);
        // Close them in an order unlike the opening one.
        for (i, k) in keys.iter().enumerate().rev().filter(|(i, _)| i % 2 == 0) {
            assert_eq!(t.remove(*k), Some(i as u64 + 1));
        }
        for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            assert_eq!(t.remove(*k), Some(i as u64 + 1));
        }
        // Only the first value is left: the table is back near empty.
        assert_eq!(t.live(), 1);
        assert!(t.capacity() <= 64, "{} slots kept of {peak}", t.capacity());
        assert_eq!(t.get(first), Some(&0));
        // And it works as before.
        let k = t.insert(7);
        assert_eq!(t.get(k), Some(&7));
        assert_eq!(t.values().copied().collect::<Vec<_>>(), [0, 7]);
        assert_eq!(t.take_all(), [0, 7]);
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn keys_stay_clear_of_the_sentinels() {
        let mut t = GenTable::<()> {
            generation: u32::MAX - 2,
            ..GenTable::default()
        };
        for _ in 0..4 {
            let k = t.insert(());
            assert_ne!(k >> 32, 0);
            assert_ne!(k >> 32, u64::from(u32::MAX));
            t.remove(k);
        }
    }
}
