//! Where each kind of task was spawned, for the long-poll warnings of loops
//! that track spawn locations. Kept per task type (keyed by the type's
//! vtable), not in every task: a word in each task was a word in every idle
//! connection's. A type spawned from several places is named by the first
//! one seen, which for an `async` block or closure (a type of its own per
//! source location) is the only one.

use super::raw::Vtable;
use std::cell::RefCell;
use std::panic::Location;
use std::sync::Mutex;

/// (vtable address, first spawn location) per task type noted.
static SITES: Mutex<Vec<(usize, &'static Location<'static>)>> = Mutex::new(Vec::new());

thread_local! {
    /// The types this thread has noted already: a spawn takes the lock once
    /// per type and thread, not once per task.
    static NOTED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn key(vtable: &'static Vtable) -> usize {
    std::ptr::from_ref(vtable) as usize
}

/// Records `at` as the spawn location of the tasks of `vtable`'s type,
/// unless one is known.
pub(crate) fn note(vtable: &'static Vtable, at: &'static Location<'static>) {
    note_key(key(vtable), at);
}

/// Where the tasks of `vtable`'s type were first spawned, if noted.
pub(crate) fn of(vtable: &'static Vtable) -> Option<&'static Location<'static>> {
    of_key(key(vtable))
}

fn note_key(k: usize, at: &'static Location<'static>) {
    let new = NOTED.with(|n| {
        let mut n = n.borrow_mut();
        let new = !n.contains(&k);
        if new {
            n.push(k);
        }
        new
    });
    if new {
        let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
        if !sites.iter().any(|&(s, _)| s == k) {
            sites.push((k, at));
        }
    }
}

fn of_key(k: usize) -> Option<&'static Location<'static>> {
    let sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    sites.iter().find(|&&(s, _)| s == k).map(|&(_, at)| at)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A type keeps the first place it was spawned from, whichever thread
    /// notes it next; types are told apart. (Odd keys: no vtable's address.)
    #[test]
    fn a_task_type_is_named_by_where_it_was_first_spawned() {
        let first = Location::caller();
        let second = Location::caller();
        assert_ne!(first.line(), second.line());
        assert_eq!(of_key(1001), None);
        note_key(1001, first);
        note_key(1001, second);
        std::thread::spawn(move || note_key(1001, second))
            .join()
            .unwrap();
        note_key(1003, second);
        assert_eq!(of_key(1001).map(|l| l.line()), Some(first.line()));
        assert_eq!(of_key(1003).map(|l| l.line()), Some(second.line()));
    }
}
