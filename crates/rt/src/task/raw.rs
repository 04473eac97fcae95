//! The task cell: one heap allocation holding a small header and the future
//! (later its output) in place.
//!
//! Layout (`#[repr(C)]`, x86-64):
//!
//! ```text
//! 0   vtable      &'static Vtable      type-erased operations for this F, T
//! 8   next        AtomicPtr<Header>    run-queue link; owned by the queue holding the task
//! 16  join_waker  AtomicUsize          a task pointer, or a boxed foreign waker | 1
//! 24  state       AtomicU32            flags + reference count (see `state.rs`)
//! 28  owner       AtomicU16            id of the loop that runs the task
//! 30  stage       union { future F, output T }
//! ```
//!
//! A future of alignment ≤ 2 therefore starts at byte 30: a task that loops on
//! `yield_now` is a 32-byte allocation. The owning loop is an index into the
//! loop registry rather than a pointer, and the join waker is one word, to keep
//! the header at 30 bytes. A panic payload is kept out of line in a table (panics
//! are rare), so it costs no space in every task.
//!
//! Who touches what:
//! - `vtable`, `owner`: written at spawn; `owner` rewritten only by a loop that
//!   is running the task (work stealing).
//! - `next`: by the queue that holds the task (`SCHEDULED` set, not `RUNNING`).
//! - `join_waker`: by the `JoinHandle` while `JOIN_WAKER` is clear; by the task
//!   side (read only) while it is set; freed at deallocation.
//! - `stage`: by the runner while `RUNNING` (the future); after `COMPLETE` by
//!   the single party that owns the output (the `JoinHandle` if it showed
//!   interest, else the runner).

use super::state::{self, AfterPending, State};
use super::JoinError;
use crate::loom::UnsafeCell;
use crate::loom::{AtomicPtr, AtomicU16, AtomicUsize};
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll, Waker};

/// The type-erased prefix of every task cell. Never materialised as a whole:
/// fields are reached through raw-pointer projections, since the stage may
/// overlap this struct's trailing padding.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) vtable: &'static Vtable,
    pub(crate) next: AtomicPtr<Header>,
    pub(crate) join_waker: AtomicUsize,
    pub(crate) state: State,
    pub(crate) owner: AtomicU16,
}

#[repr(C)]
struct Cell<F: Future> {
    vtable: &'static Vtable,
    next: AtomicPtr<Header>,
    join_waker: AtomicUsize,
    state: State,
    owner: AtomicU16,
    stage: UnsafeCell<Stage<F>>,
}

union Stage<F: Future> {
    future: ManuallyDrop<F>,
    output: ManuallyDrop<F::Output>,
}

pub(crate) struct Vtable {
    /// Runs one poll; consumes the queue's reference.
    pub(crate) run: unsafe fn(NonNull<Header>),
    /// Frees the cell (and drops whatever the stage still holds).
    pub(crate) dealloc: unsafe fn(NonNull<Header>),
    /// Moves the outcome into `*dst` (a `Poll<Result<T, JoinError>>`) if complete,
    /// else registers the join waker.
    pub(crate) try_read_output: unsafe fn(NonNull<Header>, *mut (), &Waker),
    /// Drops the output in place (the `JoinHandle` went away after completion).
    pub(crate) drop_output: unsafe fn(NonNull<Header>),
    /// The future's type, for long-poll warnings.
    pub(crate) type_name: fn() -> &'static str,
}

/// An owned reference to a task (one unit of its reference count).
#[derive(Debug)]
pub(crate) struct TaskRef(NonNull<Header>);

// SAFETY: a task's shared fields are atomics, and the stage is only touched
// under the protocol of `state.rs`; futures given to `spawn` are `Send`.
unsafe impl Send for TaskRef {}

impl TaskRef {
    /// # Safety
    /// `ptr` must point at a live task, and the caller gives up one reference.
    pub(crate) unsafe fn from_raw(ptr: NonNull<Header>) -> TaskRef {
        TaskRef(ptr)
    }
    pub(crate) fn into_raw(self) -> NonNull<Header> {
        ManuallyDrop::new(self).0
    }
    pub(crate) fn vtable(&self) -> &'static Vtable {
        header_vtable(self.0)
    }
    pub(crate) fn as_ptr(&self) -> NonNull<Header> {
        self.0
    }
    pub(crate) fn header(&self) -> HeaderRef<'_> {
        // SAFETY: the reference we own keeps the cell alive at least as long as `self`.
        unsafe { HeaderRef::new(self.0) }
    }
    /// Polls the task once. The reference moves into the run.
    pub(crate) fn run(self) {
        let ptr = self.into_raw();
        // SAFETY: the vtable belongs to this cell; we hand over our reference.
        unsafe { (header_vtable(ptr).run)(ptr) }
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        if self.header().state().ref_dec() {
            // SAFETY: that was the last reference.
            unsafe { (header_vtable(self.0).dealloc)(self.0) }
        }
    }
}

/// Borrowed access to the header fields of a live task. Each accessor makes a
/// reference to one field only, never to the header as a whole (the stage may
/// share the header's trailing padding).
#[derive(Clone, Copy)]
pub(crate) struct HeaderRef<'a> {
    ptr: NonNull<Header>,
    _live: std::marker::PhantomData<&'a ()>,
}

impl<'a> HeaderRef<'a> {
    /// # Safety
    /// `ptr` must stay live for `'a`.
    pub(crate) unsafe fn new(ptr: NonNull<Header>) -> HeaderRef<'a> {
        HeaderRef {
            ptr,
            _live: std::marker::PhantomData,
        }
    }
    pub(crate) fn state(self) -> &'a State {
        // SAFETY: live for 'a (constructor contract); a reference to this field only.
        unsafe { &*std::ptr::addr_of!((*self.ptr.as_ptr()).state) }
    }
    fn owner_field(self) -> &'a AtomicU16 {
        // SAFETY: as in `state`.
        unsafe { &*std::ptr::addr_of!((*self.ptr.as_ptr()).owner) }
    }
    pub(crate) fn owner(self) -> u16 {
        self.owner_field().load(Relaxed)
    }
    pub(crate) fn set_owner(self, id: u16) {
        self.owner_field().store(id, Relaxed)
    }
    pub(crate) fn next(self) -> &'a AtomicPtr<Header> {
        // SAFETY: as in `state`.
        unsafe { &*std::ptr::addr_of!((*self.ptr.as_ptr()).next) }
    }
    pub(crate) fn join_waker(self) -> &'a AtomicUsize {
        // SAFETY: as in `state`.
        unsafe { &*std::ptr::addr_of!((*self.ptr.as_ptr()).join_waker) }
    }
}

fn header_vtable(ptr: NonNull<Header>) -> &'static Vtable {
    // SAFETY: every task pointer we hold points at a live cell whose first
    // field is the vtable reference, written before the pointer escaped.
    unsafe { *std::ptr::addr_of!((*ptr.as_ptr()).vtable) }
}

/// Allocates a task for `future`, owned by loop `owner`. Returns two references:
/// the run queue's (state `SCHEDULED`) and the join handle's.
pub(crate) fn allocate<F>(future: F, owner: u16) -> (TaskRef, TaskRef)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let layout = Layout::new::<Cell<F>>();
    // SAFETY: the layout is non-zero sized (the header alone is 30 bytes).
    let raw = unsafe { alloc(layout) } as *mut Cell<F>;
    let Some(ptr) = NonNull::new(raw) else {
        handle_alloc_error(layout)
    };
    // SAFETY: freshly allocated, properly aligned for `Cell<F>`.
    unsafe {
        ptr.as_ptr().write(Cell {
            vtable: vtable::<F>(),
            next: AtomicPtr::new(std::ptr::null_mut()),
            join_waker: AtomicUsize::new(0),
            state: State::new(state::INITIAL),
            owner: AtomicU16::new(owner),
            stage: UnsafeCell::new(Stage {
                future: ManuallyDrop::new(future),
            }),
        });
    }
    let h = ptr.cast::<Header>();
    // SAFETY: the initial state holds exactly these two references.
    unsafe { (TaskRef::from_raw(h), TaskRef::from_raw(h)) }
}

fn vtable<F>() -> &'static Vtable
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    &Vtable {
        run: run::<F>,
        dealloc: dealloc_cell::<F>,
        try_read_output: try_read_output::<F>,
        drop_output: drop_output::<F>,
        type_name: std::any::type_name::<F>,
    }
}

/// Stage access for a cell.
///
/// # Safety
/// `ptr` must be a live `Cell<F>` and the caller must own the stage per the
/// protocol in the module docs.
unsafe fn stage<'a, F: Future>(ptr: NonNull<Header>) -> &'a mut Stage<F> {
    // SAFETY: forwarded to the caller. Under loom, `with_mut` also checks that
    // this access happens after every earlier one (the hand-over of the stage
    // from runner to joiner goes through the state word).
    unsafe { &mut *(*ptr.cast::<Cell<F>>().as_ptr()).stage.with_mut(|p| p) }
}

/// # Safety
/// `ptr` is a live `Cell<F>` and the caller hands over the run queue's
/// reference, which this consumes.
unsafe fn run<F>(ptr: NonNull<Header>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    // SAFETY: the run owns one reference, so the cell is live.
    let task = unsafe { TaskRef::from_raw(ptr) };
    let cancelled = task.header().state().transition_to_running();
    if cancelled {
        // SAFETY: RUNNING gives us the stage; the future is still there.
        unsafe { drop_future::<F>(ptr) };
        complete(task, state::CANCELLED);
        return;
    }
    // The waker borrows the run's reference: no count traffic for a poll.
    // SAFETY: the raw waker is valid while `task` lives; ManuallyDrop keeps
    // the borrowed reference from being released.
    let waker = ManuallyDrop::new(unsafe { super::waker::borrowed(ptr) });
    let mut cx = Context::from_waker(&waker);
    let polled = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: RUNNING gives us the stage; the future is pinned in the heap
        // cell and never moved until it is dropped in place.
        let fut = unsafe { Pin::new_unchecked(&mut *stage::<F>(ptr).future) };
        fut.poll(&mut cx)
    }));
    match polled {
        Ok(Poll::Pending) => match task.header().state().transition_to_idle() {
            AfterPending::Requeue => crate::event_loop::schedule(task),
            AfterPending::Idle => std::mem::forget(task),
            AfterPending::Dealloc => {
                std::mem::forget(task);
                // SAFETY: the count reached zero inside the transition.
                unsafe { dealloc_cell::<F>(ptr) }
            }
        },
        Ok(Poll::Ready(out)) => {
            // SAFETY: we still own the stage; the future is dropped before the
            // output is written over it.
            unsafe {
                drop_future::<F>(ptr);
                stage::<F>(ptr).output = ManuallyDrop::new(out);
            }
            complete(task, 0);
        }
        Err(payload) => {
            // SAFETY: as above; a panicking poll leaves the future droppable.
            unsafe { drop_future::<F>(ptr) };
            panic_table::insert(ptr, payload);
            complete(task, state::PANICKED);
        }
    }
}

/// Drops the future, catching a panic in its destructor.
///
/// # Safety
/// The caller owns the stage and it holds the future.
unsafe fn drop_future<F: Future>(ptr: NonNull<Header>) {
    let owner = {
        // SAFETY: the cell is live.
        unsafe { HeaderRef::new(ptr) }.owner()
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded; the future is dropped exactly once.
        unsafe { ManuallyDrop::drop(&mut stage::<F>(ptr).future) }
    }));
    crate::event_loop::task_finished(owner);
}

fn complete(task: TaskRef, outcome: u32) {
    let prev = task.header().state().transition_to_complete(outcome);
    let ptr = task.as_ptr();
    if !prev.has(state::JOIN_INTEREST) {
        // Nobody will read the outcome: drop it here, on the runner's thread.
        if outcome == 0 {
            // SAFETY: COMPLETE with an output and no join interest: ours.
            unsafe { (header_vtable(ptr).drop_output)(ptr) };
        }
    } else if prev.has(state::JOIN_WAKER) {
        // SAFETY: JOIN_WAKER is set and COMPLETE now is, so the handle can no
        // longer touch the slot: we may read it.
        unsafe { super::join::wake_join_waker(task.header()) };
    }
    drop(task);
}

/// # Safety
/// `ptr` is a live `Cell<F>`, complete with an output the caller owns; it is
/// dropped here and never read again.
unsafe fn drop_output<F: Future>(ptr: NonNull<Header>) {
    // SAFETY: the caller owns the output, which is present.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
        ManuallyDrop::drop(&mut stage::<F>(ptr).output)
    }));
}

/// # Safety
/// `ptr` is a live `Cell<F>` on which the caller (its `JoinHandle`) holds a
/// reference, and `dst` points to a `Poll<Result<F::Output, JoinError>>`.
unsafe fn try_read_output<F: Future>(ptr: NonNull<Header>, dst: *mut (), waker: &Waker) {
    // SAFETY: the JoinHandle holds a reference.
    let header = unsafe { HeaderRef::new(ptr) };
    if super::join::can_read_output(header, waker) {
        let s = header.state().load();
        let out = if s.has(state::PANICKED) {
            Err(JoinError::Panicked(panic_table::take(ptr).unwrap_or_else(
                || Box::new("task panicked (payload already taken)"),
            )))
        } else if s.has(state::CANCELLED) {
            Err(JoinError::Cancelled)
        } else {
            // SAFETY: COMPLETE with an output and the handle's interest: the
            // handle owns the output and reads it once.
            Ok(unsafe { ManuallyDrop::take(&mut stage::<F>(ptr).output) })
        };
        // SAFETY: the JoinHandle<F::Output> passes a pointer to its slot of this type.
        unsafe { *(dst as *mut Poll<Result<F::Output, JoinError>>) = Poll::Ready(out) };
    }
}

/// # Safety
/// `ptr` is a `Cell<F>` whose reference count reached zero: nobody else can
/// reach it, and it is freed here.
unsafe fn dealloc_cell<F: Future>(ptr: NonNull<Header>) {
    // SAFETY: the count is zero: nobody else can reach the cell.
    let header = unsafe { HeaderRef::new(ptr) };
    let s = header.state().load();
    if !s.has(state::COMPLETE) {
        // Never finished and can never be woken again: free its resources.
        // SAFETY: no reference remains, so we own the stage; it holds the future.
        unsafe { drop_future::<F>(ptr) };
    } else if s.has(state::PANICKED) {
        drop(panic_table::take(ptr));
    }
    super::join::drop_join_waker_slot(header);
    // SAFETY: allocated in `allocate` with this layout; dropped fields are done.
    unsafe { dealloc(ptr.as_ptr() as *mut u8, Layout::new::<Cell<F>>()) };
}

/// Panic payloads, kept out of the task cell.
mod panic_table {
    use super::Header;
    use std::any::Any;
    use std::collections::HashMap;
    use std::ptr::NonNull;
    use std::sync::Mutex;

    type Payload = Box<dyn Any + Send + 'static>;
    static TABLE: Mutex<Option<HashMap<usize, Payload>>> = Mutex::new(None);

    pub(super) fn insert(ptr: NonNull<Header>, p: Payload) {
        let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        t.get_or_insert_with(HashMap::new)
            .insert(ptr.as_ptr() as usize, p);
    }

    pub(super) fn take(ptr: NonNull<Header>) -> Option<Payload> {
        let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        t.as_mut()?.remove(&(ptr.as_ptr() as usize))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn size_of_cell<F: Future>(_: &F) -> usize {
        std::mem::size_of::<Cell<F>>()
    }

    #[test]
    fn a_yield_loop_task_is_32_bytes() {
        let fut = async {
            loop {
                crate::task::yield_now().await;
            }
        };
        assert_eq!(size_of_cell(&fut), 32);
    }

    /// A word-aligned future starts at byte 32: its task is the future and
    /// 32 bytes, nothing per task beside (spawn locations are kept per task
    /// type, in `sites`). A connection's future is sized for that.
    #[test]
    fn a_task_is_its_future_and_a_32_byte_header() {
        let held = [7u64; 20];
        let fut = async move {
            crate::task::yield_now().await;
            held.iter().sum::<u64>()
        };
        assert_eq!(size_of_cell(&fut), 32 + std::mem::size_of_val(&fut));
    }
}
