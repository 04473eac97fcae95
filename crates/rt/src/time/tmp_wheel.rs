//! TEMPORARY stand-in until wheel.rs lands (BTreeMap, O(log n)).
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerKey(u64, u64);

pub(crate) struct TimerWheel<T> {
    map: BTreeMap<(u64, u64), T>,
    seq: u64,
}

impl<T> TimerWheel<T> {
    pub(crate) fn new() -> Self {
        TimerWheel {
            map: BTreeMap::new(),
            seq: 0,
        }
    }
    pub(crate) fn insert(&mut self, tick: u64, v: T) -> TimerKey {
        self.seq += 1;
        self.map.insert((tick, self.seq), v);
        TimerKey(tick, self.seq)
    }
    pub(crate) fn cancel(&mut self, k: TimerKey) -> Option<T> {
        self.map.remove(&(k.0, k.1))
    }
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.map.keys().next().map(|k| k.0)
    }
    pub(crate) fn advance(&mut self, now: u64, f: &mut impl FnMut(T)) {
        while let Some(e) = self.map.first_entry() {
            if e.key().0 > now {
                break;
            }
            f(e.remove());
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}
