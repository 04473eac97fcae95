//! Hierarchical timer wheel: a pure data structure (no clock, no wakers), owned by
//! one event loop and driven by it.
//!
//! Time is counted in *ticks* (the loop uses milliseconds since it started).
//! [`insert`](TimerWheel::insert) and [`cancel`](TimerWheel::cancel) are O(1);
//! [`advance`](TimerWheel::advance) costs O(1) per occupied slot it passes plus
//! O(levels) per entry over the entry's lifetime (each entry moves down at most
//! once per level).
//!
//! # Layout
//!
//! `LEVELS` (6) levels of 64 slots. A slot of level `l` spans `64^l` ticks, a whole
//! level `64^(l+1)`: level 0 covers 64 ms at 1 ms resolution, level 5 about 2.2
//! years. Two more lists: *expired* (entries whose deadline had already passed
//! when inserted, fired by the next `advance`) and *overflow* (deadlines beyond the
//! top level's span, re-filed when the wheel reaches the span of the earliest of
//! them).
//!
//! An entry with deadline `d > elapsed` lives at the level of the highest 6-bit
//! group in which `d` and `elapsed` differ, in the slot given by `d`'s bits of that
//! group. Invariant: every entry in level `l` has the same bits as `elapsed`
//! above group `l`, and a larger group-`l` index — so it lies in the 64^(l+1)-tick
//! block that contains `elapsed`, after it, and the start of its slot is a lower
//! bound of its deadline. `advance` keeps this true by visiting slots in order of
//! their start tick: on reaching a slot of level `l > 0` it sets `elapsed` to the
//! slot's start and re-files its entries one or more levels down (a *cascade*);
//! entries of a level-0 slot all share one deadline and fire.
//!
//! # Guarantees
//!
//! * Never early: an entry fires only in an `advance(now)` with `now >= deadline`.
//! * Never late: `advance(now)` fires every entry with `deadline <= now`.
//! * Ordered: within one `advance`, entries fire in deadline order; entries with
//!   the same deadline fire in an unspecified (in practice insertion) order.
//! * [`next_deadline`](TimerWheel::next_deadline) is never later than the earliest
//!   deadline; it may be earlier (the start of a higher-level slot), in which case
//!   advancing to it cascades and a later call gives a tighter answer.
//!
//! # Keys
//!
//! Entries live in a slab; a [`TimerKey`] is a slab index plus the slot's
//! generation, which is bumped whenever the slot is freed. A stale key (its timer
//! fired or was cancelled, maybe the slot reused since) therefore never matches:
//! `cancel` returns `None`. (Generations are 32 bits: a key would be confused only
//! after its slot were reused 2^32 times while the key was held.)

/// Levels of the wheel.
const LEVELS: usize = 6;
/// Bits of a tick consumed per level.
const SLOT_BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << SLOT_BITS;
/// Ticks spanned by the whole wheel: entries further out go to the overflow list.
const WHEEL_BITS: u32 = SLOT_BITS * LEVELS as u32;
/// List id of the expired list.
const EXPIRED: usize = LEVELS * SLOTS;
/// List id of the overflow list.
const OVERFLOW: usize = EXPIRED + 1;
/// Number of lists: one per slot, plus expired and overflow.
const LISTS: usize = OVERFLOW + 1;
/// "No entry" in the intrusive links.
const NIL: u32 = u32::MAX;

/// Names one inserted timer; see [`TimerWheel::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TimerKey {
    index: u32,
    generation: u32,
}

/// A hierarchical timer wheel holding values of type `T`. See the module docs.
pub(crate) struct TimerWheel<T> {
    /// The wheel's notion of now: the last tick advanced to.
    elapsed: u64,
    slab: Vec<SlabSlot<T>>,
    /// Head of the chain of vacant slab slots.
    free_head: u32,
    /// Head and tail of each list (level slots, then expired, then overflow).
    lists: Box<[List; LISTS]>,
    /// Bit `s` of `occupied[l]` is set iff slot `s` of level `l` is non-empty.
    occupied: [u64; LEVELS],
    /// Lower bounds of the deadlines in the expired and the overflow list
    /// (`u64::MAX` when the list is empty); indexed by `list - EXPIRED`.
    list_min: [u64; 2],
    len: usize,
    /// Reused buffer for sorting the expired list.
    scratch: Vec<(u64, u32)>,
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};

struct SlabSlot<T> {
    generation: u32,
    state: SlotState<T>,
}

enum SlotState<T> {
    Vacant { next_free: u32 },
    Occupied(Node<T>),
}

struct Node<T> {
    value: T,
    deadline: u64,
    list: u16,
    prev: u32,
    next: u32,
}

impl<T> Default for TimerWheel<T> {
    fn default() -> Self {
        TimerWheel::new()
    }
}

#[allow(dead_code)] // `len`, `is_empty`, `elapsed` serve introspection and tests
impl<T> TimerWheel<T> {
    /// An empty wheel at tick 0.
    pub(crate) fn new() -> TimerWheel<T> {
        TimerWheel {
            elapsed: 0,
            slab: Vec::new(),
            free_head: NIL,
            lists: Box::new([EMPTY; LISTS]),
            occupied: [0; LEVELS],
            list_min: [u64::MAX; 2],
            len: 0,
            scratch: Vec::new(),
        }
    }

    /// The last tick the wheel was advanced to.
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Number of pending timers.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True if no timer is pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a timer firing at `deadline` (a deadline at or before the current tick
    /// fires on the next [`advance`](Self::advance)). O(1).
    pub(crate) fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let node = Node {
            value,
            deadline,
            list: 0,
            prev: NIL,
            next: NIL,
        };
        let index = if self.free_head != NIL {
            let index = self.free_head;
            let slot = &mut self.slab[index as usize];
            match slot.state {
                SlotState::Vacant { next_free } => self.free_head = next_free,
                SlotState::Occupied(_) => unreachable!("free list points at an occupied slot"),
            }
            slot.state = SlotState::Occupied(node);
            index
        } else {
            let index = u32::try_from(self.slab.len())
                .ok()
                .filter(|&i| i != NIL)
                .expect("too many timers");
            self.slab.push(SlabSlot {
                generation: 0,
                state: SlotState::Occupied(node),
            });
            index
        };
        self.link(index, self.list_for(deadline));
        self.len += 1;
        TimerKey {
            index,
            generation: self.slab[index as usize].generation,
        }
    }

    /// Removes a pending timer, returning its value; `None` if the key is stale
    /// (the timer already fired or was cancelled). O(1).
    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let slot = self.slab.get(key.index as usize)?;
        if slot.generation != key.generation || !matches!(slot.state, SlotState::Occupied(_)) {
            return None;
        }
        self.unlink(key.index);
        Some(self.free(key.index).value)
    }

    /// The deadline of a pending timer; `None` if the key is stale.
    pub(crate) fn deadline(&self, key: TimerKey) -> Option<u64> {
        match self.slab.get(key.index as usize) {
            Some(SlabSlot {
                generation,
                state: SlotState::Occupied(n),
            }) if *generation == key.generation => Some(n.deadline),
            _ => None,
        }
    }

    /// The earliest tick at which something may fire: never later than the
    /// earliest deadline, possibly earlier (see the module docs). `None` if empty.
    /// O(levels).
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        if self.lists[EXPIRED].head != NIL {
            return Some(self.list_min[0]);
        }
        self.next_list().map(|(_, start)| start)
    }

    /// Moves the wheel to tick `now` and fires, in deadline order, every timer
    /// whose deadline is `<= now`. Ticks must not go backwards: a `now` below the
    /// current tick is treated as the current tick.
    ///
    /// `fired` may panic: the entries not yet fired stay in the wheel, in order, and
    /// fire on the next `advance`.
    pub(crate) fn advance(&mut self, now: u64, fired: &mut impl FnMut(T)) {
        self.fire_expired(fired);
        while let Some((list, start)) = self.next_list() {
            if start > now {
                break;
            }
            debug_assert!(start >= self.elapsed);
            self.elapsed = start;
            self.refile(list);
            self.fire_expired(fired);
        }
        self.elapsed = self.elapsed.max(now);
    }

    /// The list holding the next deadlines and the tick its span starts at: the
    /// occupied slot with the smallest start over all levels, or the overflow list
    /// (starting where the wheel's current span ends).
    fn next_list(&self) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for level in 0..LEVELS {
            let bits = self.occupied[level];
            if bits == 0 {
                continue;
            }
            let slot = bits.trailing_zeros() as u64;
            let shift = SLOT_BITS * level as u32;
            let level_span_mask = (1u64 << (shift + SLOT_BITS)) - 1;
            let start = (self.elapsed & !level_span_mask) + (slot << shift);
            let better = match best {
                None => true,
                Some((_, b)) => start < b,
            };
            if better {
                best = Some((level * SLOTS + slot as usize, start));
            }
        }
        if best.is_none() && self.lists[OVERFLOW].head != NIL {
            // Every level is empty. Overflow entries lie in later spans of the
            // wheel: go straight to the span of the earliest one.
            let start = self.list_min[1] >> WHEEL_BITS << WHEEL_BITS;
            debug_assert!(start > self.elapsed);
            best = Some((OVERFLOW, start));
        }
        best
    }

    /// Where an entry with this deadline belongs, relative to `elapsed`.
    fn list_for(&self, deadline: u64) -> usize {
        if deadline <= self.elapsed {
            return EXPIRED;
        }
        // The highest differing 6-bit group picks the level.
        let masked = (self.elapsed ^ deadline) | (SLOTS as u64 - 1);
        let level = ((63 - masked.leading_zeros()) / SLOT_BITS) as usize;
        if level >= LEVELS {
            return OVERFLOW;
        }
        let slot = (deadline >> (SLOT_BITS * level as u32)) as usize & (SLOTS - 1);
        level * SLOTS + slot
    }

    /// Takes every entry off `list` and files it again relative to the current
    /// `elapsed` (a lower level, the overflow list, or the expired list).
    fn refile(&mut self, list: usize) {
        let mut index = self.lists[list].head;
        self.lists[list] = EMPTY;
        if list < EXPIRED {
            self.occupied[list / SLOTS] &= !(1 << (list % SLOTS));
        } else {
            self.list_min[list - EXPIRED] = u64::MAX;
        }
        while index != NIL {
            let node = self.node_mut(index);
            let (next, deadline) = (node.next, node.deadline);
            let target = self.list_for(deadline);
            debug_assert!(target != list || list == OVERFLOW);
            self.link(index, target);
            index = next;
        }
    }

    /// Fires the expired list in deadline order (stable: equal deadlines keep list
    /// order). Each entry leaves the wheel before its callback runs.
    fn fire_expired(&mut self, fired: &mut impl FnMut(T)) {
        if self.lists[EXPIRED].head == NIL {
            return;
        }
        let mut order = std::mem::take(&mut self.scratch);
        order.clear();
        let mut index = self.lists[EXPIRED].head;
        while index != NIL {
            let node = self.node_mut(index);
            order.push((node.deadline, index));
            index = node.next;
        }
        order.sort_by_key(|&(deadline, _)| deadline);
        for &(_, index) in &order {
            self.unlink(index);
            let node = self.free(index);
            fired(node.value);
        }
        self.scratch = order;
    }

    fn node_mut(&mut self, index: u32) -> &mut Node<T> {
        match &mut self.slab[index as usize].state {
            SlotState::Occupied(node) => node,
            SlotState::Vacant { .. } => unreachable!("link to a vacant slab slot"),
        }
    }

    /// Appends entry `index` (not in any list) to `list`.
    fn link(&mut self, index: u32, list: usize) {
        let tail = self.lists[list].tail;
        let node = self.node_mut(index);
        node.list = list as u16;
        node.prev = tail;
        node.next = NIL;
        let deadline = node.deadline;
        if tail == NIL {
            self.lists[list].head = index;
        } else {
            self.node_mut(tail).next = index;
        }
        self.lists[list].tail = index;
        if list < EXPIRED {
            self.occupied[list / SLOTS] |= 1 << (list % SLOTS);
        } else {
            let min = &mut self.list_min[list - EXPIRED];
            *min = (*min).min(deadline);
        }
    }

    /// Takes entry `index` out of its list.
    fn unlink(&mut self, index: u32) {
        let node = self.node_mut(index);
        let (list, prev, next) = (node.list as usize, node.prev, node.next);
        if prev == NIL {
            self.lists[list].head = next;
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            self.lists[list].tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
        if self.lists[list].head == NIL {
            if list < EXPIRED {
                self.occupied[list / SLOTS] &= !(1 << (list % SLOTS));
            } else {
                self.list_min[list - EXPIRED] = u64::MAX;
            }
        }
    }

    /// Frees slab slot `index` (already unlinked), bumping its generation.
    fn free(&mut self, index: u32) -> Node<T> {
        let slot = &mut self.slab[index as usize];
        let state = std::mem::replace(
            &mut slot.state,
            SlotState::Vacant {
                next_free: self.free_head,
            },
        );
        slot.generation = slot.generation.wrapping_add(1);
        self.free_head = index;
        self.len -= 1;
        match state {
            SlotState::Occupied(node) => node,
            SlotState::Vacant { .. } => unreachable!("freeing a vacant slab slot"),
        }
    }
}

impl<T> std::fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerWheel")
            .field("elapsed", &self.elapsed)
            .field("len", &self.len)
            .field("next_deadline", &self.next_deadline())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn advance_collect<T>(w: &mut TimerWheel<T>, now: u64) -> Vec<T> {
        let mut out = Vec::new();
        w.advance(now, &mut |v| out.push(v));
        out
    }

    #[test]
    fn fires_in_order_never_early() {
        let mut w = TimerWheel::new();
        for d in [5u64, 1, 70, 64, 63, 4096, 300_000, 1 << 40] {
            w.insert(d, d);
        }
        assert_eq!(w.len(), 8);
        assert_eq!(w.next_deadline(), Some(1));
        assert_eq!(advance_collect(&mut w, 0), Vec::<u64>::new());
        assert_eq!(advance_collect(&mut w, 63), vec![1, 5, 63]);
        assert_eq!(advance_collect(&mut w, 64), vec![64]);
        assert_eq!(advance_collect(&mut w, 69), Vec::<u64>::new());
        assert_eq!(advance_collect(&mut w, 1 << 30), vec![70, 4096, 300_000]);
        assert_eq!(w.len(), 1);
        assert!(w.next_deadline().unwrap() <= 1 << 40);
        assert_eq!(advance_collect(&mut w, (1 << 40) - 1), Vec::<u64>::new());
        assert_eq!(advance_collect(&mut w, 1 << 40), vec![1 << 40]);
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn past_deadlines_fire_next_advance_in_order() {
        let mut w = TimerWheel::new();
        w.advance(1000, &mut |_: u64| unreachable!());
        w.insert(900, 900);
        w.insert(10, 10);
        w.insert(1000, 1000);
        assert_eq!(w.next_deadline(), Some(10));
        assert_eq!(advance_collect(&mut w, 1000), vec![10, 900, 1000]);
    }

    #[test]
    fn cancel_and_stale_keys() {
        let mut w = TimerWheel::new();
        let a = w.insert(10, 'a');
        let b = w.insert(10, 'b');
        assert_eq!(w.deadline(a), Some(10));
        assert_eq!(w.cancel(a), Some('a'));
        assert_eq!(w.cancel(a), None);
        let c = w.insert(20, 'c'); // reuses a's slab slot
        assert_eq!(w.cancel(a), None, "a stale key never matches a reused slot");
        assert_eq!(advance_collect(&mut w, 10), vec!['b']);
        assert_eq!(w.cancel(b), None);
        assert_eq!(w.cancel(c), Some('c'));
        assert!(w.is_empty());
    }

    #[test]
    fn same_deadline_keeps_insertion_order() {
        let mut w = TimerWheel::new();
        for i in 0..10 {
            w.insert(5000, i);
        }
        assert_eq!(advance_collect(&mut w, 5000), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn panicking_callback_loses_nothing() {
        let mut w = TimerWheel::new();
        for d in 1..=3u64 {
            w.insert(d, d);
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.advance(10, &mut |v| {
                if v == 2 {
                    panic!("boom")
                }
            })
        }));
        assert!(r.is_err());
        assert_eq!(w.len(), 1);
        assert_eq!(advance_collect(&mut w, 10), vec![3]);
    }

    #[test]
    fn driving_by_next_deadline_terminates_quickly() {
        let mut w = TimerWheel::new();
        let deadlines = [
            3u64,
            64,
            4095,
            262_143,
            1 << 24,
            (1 << 36) + 5,
            1 << 45,
            u64::MAX,
        ];
        for d in deadlines {
            w.insert(d, d);
        }
        let mut fired = Vec::new();
        let mut steps = 0;
        while let Some(t) = w.next_deadline() {
            steps += 1;
            assert!(steps <= deadlines.len() * (LEVELS + 2), "no progress");
            w.advance(t, &mut |v| {
                assert!(v <= t, "fired early");
                fired.push(v)
            });
        }
        assert_eq!(fired, deadlines);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert at `now + offset` (offset may be negative: a past deadline).
        Insert(i64),
        /// Cancel the n-th key ever issued (mod count).
        Cancel(usize),
        /// Advance by this many ticks.
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (-100i64..200).prop_map(Op::Insert),
            3 => (0i64..300_000).prop_map(Op::Insert),
            1 => (0i64..(1 << 38)).prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Cancel),
            2 => (0u64..100).prop_map(Op::Advance),
            2 => (0u64..100_000).prop_map(Op::Advance),
            1 => (0u64..(1 << 37)).prop_map(Op::Advance),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn matches_btreemap_model(start in 0u64..(1 << 40), ops in prop::collection::vec(op(), 1..200)) {
            let mut wheel = TimerWheel::new();
            wheel.advance(start, &mut |_: u64| {});
            let mut now = start;
            // model: (deadline, id) -> id; ids are unique values
            let mut model: BTreeMap<(u64, u64), u64> = BTreeMap::new();
            let mut keys: Vec<(TimerKey, u64, u64)> = Vec::new();
            let mut next_id = 0u64;
            for op in ops {
                match op {
                    Op::Insert(off) => {
                        let deadline = now.saturating_add_signed(off);
                        let key = wheel.insert(deadline, next_id);
                        model.insert((deadline, next_id), next_id);
                        keys.push((key, deadline, next_id));
                        next_id += 1;
                    }
                    Op::Cancel(n) => {
                        if keys.is_empty() { continue; }
                        let (key, deadline, id) = keys[n % keys.len()];
                        let expect = model.remove(&(deadline, id));
                        prop_assert_eq!(wheel.cancel(key), expect);
                    }
                    Op::Advance(by) => {
                        now += by;
                        let mut fired = Vec::new();
                        wheel.advance(now, &mut |id| fired.push(id));
                        let due: Vec<(u64, u64)> =
                            model.range(..(now + 1, 0)).map(|(&k, _)| k).collect();
                        for k in &due { model.remove(k); }
                        // Same set, never early, and in deadline order.
                        let mut got: Vec<(u64, u64)> = fired
                            .iter()
                            .map(|&id| (keys.iter().find(|k| k.2 == id).unwrap().1, id))
                            .collect();
                        for w in got.windows(2) {
                            prop_assert!(w[0].0 <= w[1].0, "out of order: {:?}", w);
                        }
                        got.sort();
                        prop_assert_eq!(got, due);
                    }
                }
                prop_assert_eq!(wheel.len(), model.len());
                match (wheel.next_deadline(), model.keys().next()) {
                    (None, None) => {}
                    (Some(t), Some(&(earliest, _))) => prop_assert!(t <= earliest, "{} > {}", t, earliest),
                    (a, b) => prop_assert!(false, "next_deadline {:?} vs model {:?}", a, b),
                }
            }
        }
    }
}
