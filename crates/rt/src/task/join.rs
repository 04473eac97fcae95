//! `JoinHandle`: await a task's output, abort it, or drop it to detach.
//!
//! The join-waker slot is one word: a task pointer (tag 0) when the joiner is
//! itself a duality task (the common case, no allocation), or a boxed foreign
//! `Waker` (tag 1). The slot protocol is in `state.rs` (`JOIN_WAKER`).

use super::raw::{Header, HeaderRef, TaskRef};
use super::{state, JoinError};
use std::future::Future;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::task::{Context, Poll, Waker};

/// An owned permission to await a task's output. Dropping it detaches the task.
pub struct JoinHandle<T> {
    raw: NonNull<Header>,
    consumed: bool,
    _output: PhantomData<T>,
}

// SAFETY: the handle only moves the output (T: Send) between threads, and the
// task state is atomic.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: `&JoinHandle` only allows `abort` and `is_finished`, which are atomic.
unsafe impl<T: Send> Sync for JoinHandle<T> {}
impl<T> Unpin for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    pub(crate) fn new(task: TaskRef) -> JoinHandle<T> {
        JoinHandle {
            raw: task.into_raw(),
            consumed: false,
            _output: PhantomData,
        }
    }

    fn header(&self) -> HeaderRef<'_> {
        // SAFETY: the handle owns a reference.
        unsafe { HeaderRef::new(self.raw) }
    }

    /// Requests cancellation: the task's future is dropped on its loop at its
    /// next turn, and awaiting this handle yields `JoinError::Cancelled`.
    /// No effect on a finished task.
    pub fn abort(&self) {
        super::waker::abort(self.raw);
    }

    /// True once the task has finished (with an output, a panic or by abort).
    pub fn is_finished(&self) -> bool {
        self.header().state().load().has(state::COMPLETE)
    }

    /// A cloneable handle that can only abort the task.
    pub fn abort_handle(&self) -> AbortHandle {
        self.header().state().ref_inc();
        AbortHandle { raw: self.raw }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        assert!(!self.consumed, "JoinHandle polled after completion");
        let mut out: Poll<Result<T, JoinError>> = Poll::Pending;
        // SAFETY: `out` has the type the vtable's T expects (T = F::Output).
        unsafe {
            let vt = *std::ptr::addr_of!((*self.raw.as_ptr()).vtable);
            (vt.try_read_output)(self.raw, &mut out as *mut _ as *mut (), cx.waker());
        }
        if out.is_ready() {
            self.consumed = true;
        }
        out
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        let prev = self.header().state().drop_join_interest();
        if prev.has(state::COMPLETE)
            && !self.consumed
            && !prev.has(state::PANICKED)
            && !prev.has(state::CANCELLED)
        {
            // SAFETY: complete with an output we had interest in: ours to drop.
            unsafe {
                let vt = *std::ptr::addr_of!((*self.raw.as_ptr()).vtable);
                (vt.drop_output)(self.raw)
            }
        }
        // SAFETY: the handle's reference.
        drop(unsafe { TaskRef::from_raw(self.raw) });
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle")
            .field("state", &self.header().state().load())
            .finish()
    }
}

/// Aborts a task without owning its output.
pub struct AbortHandle {
    raw: NonNull<Header>,
}

// SAFETY: only atomic operations on the task.
unsafe impl Send for AbortHandle {}
// SAFETY: as above.
unsafe impl Sync for AbortHandle {}

impl AbortHandle {
    /// See [`JoinHandle::abort`].
    pub fn abort(&self) {
        super::waker::abort(self.raw);
    }
    /// See [`JoinHandle::is_finished`].
    pub fn is_finished(&self) -> bool {
        // SAFETY: we own a reference.
        unsafe { HeaderRef::new(self.raw) }
            .state()
            .load()
            .has(state::COMPLETE)
    }
}

impl Clone for AbortHandle {
    fn clone(&self) -> Self {
        // SAFETY: we own a reference.
        unsafe { HeaderRef::new(self.raw) }.state().ref_inc();
        AbortHandle { raw: self.raw }
    }
}

impl Drop for AbortHandle {
    fn drop(&mut self) {
        // SAFETY: our reference.
        drop(unsafe { TaskRef::from_raw(self.raw) });
    }
}

const FOREIGN: usize = 1;

fn encode(waker: &Waker) -> usize {
    let w = waker.clone();
    if let Some(p) = super::waker::task_of(&w) {
        // Keep the clone's reference, stored as a bare pointer.
        std::mem::forget(w);
        p.as_ptr() as usize
    } else {
        Box::into_raw(Box::new(w)) as usize | FOREIGN
    }
}

/// Frees a slot value.
fn release(slot: usize) {
    if slot == 0 {
    } else if slot & FOREIGN == 0 {
        // SAFETY: tag 0 slots own one reference of that task.
        drop(unsafe { TaskRef::from_raw(NonNull::new_unchecked(slot as *mut Header)) });
    } else {
        // SAFETY: tag 1 slots own a boxed waker.
        drop(unsafe { Box::from_raw((slot & !FOREIGN) as *mut Waker) });
    }
}

fn with_waker<R>(slot: usize, f: impl FnOnce(&Waker) -> R) -> R {
    if slot & FOREIGN == 0 {
        // SAFETY: the slot holds a reference of that task, so a borrowed waker is valid.
        let w = ManuallyDrop::new(unsafe {
            super::waker::borrowed(NonNull::new_unchecked(slot as *mut Header))
        });
        f(&w)
    } else {
        // SAFETY: tag 1 slots own a live boxed waker.
        f(unsafe { &*((slot & !FOREIGN) as *const Waker) })
    }
}

/// Called from the handle's poll. True if the output is ready to read;
/// otherwise the waker is registered.
pub(super) fn can_read_output(header: HeaderRef<'_>, waker: &Waker) -> bool {
    let s = header.state().load();
    if s.has(state::COMPLETE) {
        return true;
    }
    let slot = header.join_waker();
    if s.has(state::JOIN_WAKER) {
        let cur = slot.load(Acquire);
        if cur != 0 && with_waker(cur, |w| w.will_wake(waker)) {
            return false;
        }
        if !header.state().unset_join_waker() {
            return true;
        }
    }
    // JOIN_WAKER is clear: the slot is the handle's alone.
    release(slot.swap(encode(waker), Release));
    !header.state().set_join_waker()
}

/// # Safety
/// `JOIN_WAKER` and `COMPLETE` are both set: the slot is stable.
pub(super) unsafe fn wake_join_waker(header: HeaderRef<'_>) {
    let cur = header.join_waker().load(Acquire);
    if cur != 0 {
        with_waker(cur, Waker::wake_by_ref);
    }
}

/// Frees the slot when the task is deallocated.
pub(super) fn drop_join_waker_slot(header: HeaderRef<'_>) {
    release(header.join_waker().swap(0, Acquire));
}
