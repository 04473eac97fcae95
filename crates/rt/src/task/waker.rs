//! The task waker: a `RawWaker` whose data pointer is the task cell.
//!
//! Each `Waker` owns one reference of the task. Waking routes the task to the
//! run queue of its owning loop: the local queue when the waker runs on that
//! loop's thread, otherwise the loop's hand-off queue (see `event_loop`).

use super::raw::{Header, HeaderRef, TaskRef};
use super::state::WakeAction;
use std::ptr::NonNull;
use std::task::{RawWaker, RawWakerVTable, Waker};

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_waker);

fn ptr_of(data: *const ()) -> NonNull<Header> {
    // SAFETY: our wakers are only ever built from non-null task pointers.
    unsafe { NonNull::new_unchecked(data as *mut Header) }
}

/// # Safety
/// `data` is a live task's cell, kept live by the waker being cloned.
unsafe fn clone(data: *const ()) -> RawWaker {
    // SAFETY: the waker being cloned owns (or borrows) a reference: the task is live.
    unsafe { HeaderRef::new(ptr_of(data)) }.state().ref_inc();
    RawWaker::new(data, &VTABLE)
}

/// # Safety
/// `data` is a task's cell and the waker owns one reference, consumed here.
unsafe fn wake(data: *const ()) {
    // SAFETY: a by-value wake consumes the waker's reference.
    let task = unsafe { TaskRef::from_raw(ptr_of(data)) };
    match task.header().state().wake_by_val() {
        WakeAction::Enqueue => crate::event_loop::schedule(task),
        // The transition already released the waker's reference.
        WakeAction::None => std::mem::forget(task),
        WakeAction::Dealloc => {
            let ptr = task.into_raw();
            // SAFETY: the transition dropped the last reference.
            unsafe { dealloc(ptr) }
        }
    }
}

/// # Safety
/// `data` is a task's cell, kept live by the waker for this call.
unsafe fn wake_by_ref(data: *const ()) {
    let ptr = ptr_of(data);
    // SAFETY: the waker keeps the task live for this call.
    if unsafe { HeaderRef::new(ptr) }.state().wake_by_ref() == WakeAction::Enqueue {
        // SAFETY: the transition added the reference the queue now owns.
        crate::event_loop::schedule(unsafe { TaskRef::from_raw(ptr) });
    }
}

/// # Safety
/// `data` is a task's cell and the waker owns one reference, released here.
unsafe fn drop_waker(data: *const ()) {
    // SAFETY: the dropped waker owned one reference.
    drop(unsafe { TaskRef::from_raw(ptr_of(data)) });
}

/// # Safety
/// `ptr` is a task's cell whose last reference is gone; nobody uses it after.
unsafe fn dealloc(ptr: NonNull<Header>) {
    // SAFETY: forwarded: no reference remains. Dropping a TaskRef whose count is
    // already zero would underflow, so go straight to the vtable.
    unsafe {
        let vt = *std::ptr::addr_of!((*ptr.as_ptr()).vtable);
        (vt.dealloc)(ptr)
    }
}

/// A waker that borrows a reference the caller holds (it must not outlive it,
/// and must be wrapped in `ManuallyDrop`).
///
/// # Safety
/// `ptr` is a live task and stays live while the waker is used.
pub(crate) unsafe fn borrowed(ptr: NonNull<Header>) -> Waker {
    // SAFETY: the vtable's functions uphold the `RawWaker` contract for task pointers.
    unsafe { Waker::from_raw(RawWaker::new(ptr.as_ptr() as *const (), &VTABLE)) }
}

/// If `waker` is one of ours, the task it wakes.
pub(crate) fn task_of(waker: &Waker) -> Option<NonNull<Header>> {
    if std::ptr::eq(waker.vtable(), &VTABLE) {
        NonNull::new(waker.data() as *mut Header)
    } else {
        None
    }
}

/// Abort support: schedules a task whose state just moved to cancelled.
pub(crate) fn abort(ptr: NonNull<Header>) {
    // SAFETY: the caller (a JoinHandle or AbortHandle) holds a reference.
    if unsafe { HeaderRef::new(ptr) }.state().abort() == WakeAction::Enqueue {
        // SAFETY: the transition added the reference the queue now owns.
        crate::event_loop::schedule(unsafe { TaskRef::from_raw(ptr) });
    }
}
