//! The thread's current loop: a pointer in a thread-local, set while a loop
//! runs on this thread (`enter`) and cleared when the guard drops.

use super::Local;
use std::cell::Cell;

thread_local! {
    static CURRENT: Cell<*const Local> = const { Cell::new(std::ptr::null()) };
}

/// Marks `local` as this thread's loop until the guard drops.
pub(crate) struct Enter {
    prev: *const Local,
}

pub(crate) fn enter(local: &Local) -> Enter {
    // Checked before anything changes: a panic here must leave CURRENT as
    // it was (it pointed at this loop, which the unwinding then freed).
    assert!(
        CURRENT.with(|c| c.get()).is_null(),
        "cannot run a duality event loop inside another one on the same thread \
         (nested block_on?)"
    );
    enter_nested(local)
}

/// Makes `local` this thread's loop until the guard drops, inside another
/// one if need be: a loop made and dropped inside a running one is current
/// while its tasks are dropped, and the outer one is current again after.
pub(crate) fn enter_nested(local: &Local) -> Enter {
    let prev = CURRENT.with(|c| c.replace(local as *const Local));
    Enter { prev }
}

impl Drop for Enter {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.prev));
    }
}

/// Runs `f` with this thread's loop, if one is running.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Local>) -> R) -> R {
    CURRENT.with(|c| {
        let p = c.get();
        // SAFETY: CURRENT is non-null only between `enter` and the guard's
        // drop, while the `Local` it points to is borrowed by the running loop;
        // the reference does not escape `f`.
        f(unsafe { p.as_ref() })
    })
}
