//! Timers: [`sleep`], [`sleep_until`], [`timeout`]; and cheap clocks for
//! per-request work: the loop's turn clock, [`loop_now`], and a wall clock
//! in seconds, [`unix_seconds_coarse`].
//!
//! Each loop keeps a hierarchical timer wheel (`wheel.rs`) with millisecond
//! ticks: insertion and cancellation are O(1). Deadlines are rounded up to the
//! next tick and "now" down, so a timer never fires early. A `Sleep` registers
//! on the loop where it is first polled; dropping it there cancels it in O(1);
//! dropping it on another thread leaves a harmless entry that fires later.

pub(crate) mod wheel;

pub(crate) use wheel::{TimerKey, TimerWheel};

use crate::event_loop::with_current;
use crate::loom::AtomicBool;
use crate::waker_slot::WakerSlot;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// What the wheel holds for one sleeping task. The loop that owns the
/// wheel fires it; the task may poll from another thread (`loom_tests`
/// checks the handshake).
pub(crate) struct TimerShared {
    fired: AtomicBool,
    waker: WakerSlot,
}

impl TimerShared {
    fn new(waker: &Waker) -> TimerShared {
        let shared = TimerShared {
            fired: AtomicBool::new(false),
            waker: WakerSlot::new(),
        };
        shared.waker.register(waker);
        shared
    }
    /// The deadline passed: set the flag, then wake the task.
    pub(crate) fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.waker.wake();
    }
    /// Fired? If not, `waker` is woken when it is: check, register, check
    /// again (a fire between the two is seen by the second check).
    fn poll_fired(&self, waker: &Waker) -> bool {
        self.fired.load(Ordering::Acquire) || {
            self.waker.register(waker);
            self.fired.load(Ordering::Acquire)
        }
    }
    pub(crate) fn take_waker(&self) -> Option<Waker> {
        self.waker.take()
    }
}

/// Whole seconds since the Unix epoch from the kernel's coarse real-time
/// clock: a few loads from the vDSO page (no TSC read), ticking every few
/// milliseconds — for servers that stamp every request with the second
/// (expiry times, idle accounting). At least 1.
pub fn unix_seconds_coarse() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local it is
    // given; CLOCK_REALTIME_COARSE is always available on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if r != 0 {
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs().max(1));
    }
    (ts.tv_sec as u64).max(1)
}

/// CPU time the calling thread has used: what a piece of work cost,
/// whatever the scheduler did meanwhile (a wall clock also counts the time
/// the thread was preempted). A system call, not a vDSO read: for sampling,
/// not for every request. Zero if the kernel refuses.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local it is
    // given; CLOCK_THREAD_CPUTIME_ID names the calling thread.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// At most one log line a second for a failure that can recur every
/// millisecond (accept at the descriptor limit, a loop blocked by a burst of
/// slow polls): the first is logged, later ones within the second are
/// counted, and the next line says how many were not logged. One per
/// thread or task; not shared.
#[derive(Debug, Default)]
pub struct LogEvery {
    last: Option<Instant>,
    quiet: u64,
}

impl LogEvery {
    /// Whether to log now, and if so how many were left unlogged since the
    /// last line (`Some(0)`: none); `None`: stay quiet, counted.
    pub fn check(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(at) if now.saturating_duration_since(at) < Duration::from_secs(1) => {
                self.quiet += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.quiet))
            }
        }
    }
}

/// The time as the current event loop last read it (once per turn, for its
/// timers), or [`Instant::now`] off a loop. Behind the true time by at most
/// the turn running now: for deadlines that may come that much early (an
/// idle or header timeout of seconds), where a server would otherwise read
/// the clock for every request, as nginx's cached `ngx_current_msec` does.
pub fn loop_now() -> Instant {
    with_current(|cur| cur.map(|l| l.turn_now.get())).unwrap_or_else(Instant::now)
}

/// `duration` from now, or about a century where that is past what an
/// `Instant` holds (`Duration::MAX`: "never", as tokio takes it).
pub(crate) fn after(duration: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(duration)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// Waits until `duration` has passed.
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(after(duration))
}

/// Waits until `deadline`.
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        deadline,
        entry: None,
    }
}

struct Registered {
    loop_id: u16,
    key: TimerKey,
    shared: Arc<TimerShared>,
    /// The deadline this entry was registered for: the sleep's own may have
    /// been [extended](Sleep::extend) past it since.
    at: Instant,
}

/// The future of [`sleep`]. Must be polled on a duality loop.
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    deadline: Instant,
    entry: Option<Registered>,
}

impl Sleep {
    /// When it completes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline (re-registering on the next poll).
    pub fn reset(&mut self, deadline: Instant) {
        self.cancel();
        self.deadline = deadline;
    }

    /// Moves the deadline, cheaply when it moves later: the registered
    /// entry stays, and only if it fires before the new deadline does the
    /// next poll register again. A connection's idle timeout pushed back at
    /// every request then costs one registration per timeout period instead
    /// of one per request. An earlier deadline is a [`reset`](Self::reset).
    pub fn extend(&mut self, deadline: Instant) {
        if deadline >= self.deadline {
            self.deadline = deadline;
        } else {
            self.reset(deadline);
        }
    }

    fn cancel(&mut self) {
        if let Some(r) = self.entry.take() {
            if r.shared.fired.load(Ordering::Acquire) {
                return;
            }
            let cancelled = with_current(|cur| match cur {
                Some(l) if l.shared.id == r.loop_id => {
                    l.timers.borrow_mut().cancel(r.key);
                    true
                }
                _ => false,
            });
            if !cancelled {
                // Another thread: the entry stays until it fires; release the
                // task it would wake now.
                drop(r.shared.waker.take());
            }
        }
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(r) = &self.entry {
            if !r.shared.poll_fired(cx.waker()) {
                return Poll::Pending;
            }
            if self.deadline <= r.at {
                return Poll::Ready(());
            }
            // Fired for a deadline since extended: register for the new one.
            self.entry = None;
        }
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let shared = Arc::new(TimerShared::new(cx.waker()));
        let deadline = self.deadline;
        let entry = with_current(|cur| {
            let l = cur.expect("duality_rt::time::sleep polled outside a duality event loop");
            let key = l
                .timers
                .borrow_mut()
                .insert(l.tick_ceil(deadline), shared.clone());
            Registered {
                loop_id: l.shared.id,
                key,
                shared,
                at: deadline,
            }
        });
        self.entry = Some(entry);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The error of [`timeout`]: the deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for std::io::Error {
    fn from(_: Elapsed) -> std::io::Error {
        std::io::ErrorKind::TimedOut.into()
    }
}

/// Runs `future`, giving up `duration` after it first had to wait (the
/// future is then dropped). The clock is read, and a timer made, only if
/// the future is not ready at its first poll: a write that goes straight
/// into a socket buffer costs nothing for its timeout.
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        duration,
        sleep: None,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`timeout`].
    #[must_use = "futures do nothing unless awaited"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        duration: Duration,
        sleep: Option<Sleep>,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.future.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let duration = *this.duration;
        let sleep = this.sleep.get_or_insert_with(|| self::sleep(duration));
        match Pin::new(sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_every_logs_once_a_second_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut l = LogEvery::default();
        assert_eq!(l.check(t0), Some(0));
        assert_eq!(l.check(t0 + Duration::from_millis(1)), None);
        assert_eq!(l.check(t0 + Duration::from_millis(999)), None);
        assert_eq!(l.check(t0 + Duration::from_millis(1000)), Some(2));
        assert_eq!(l.check(t0 + Duration::from_millis(1500)), None);
        assert_eq!(l.check(t0 + Duration::from_millis(5000)), Some(1));
        assert_eq!(l.check(t0 + Duration::from_millis(7000)), Some(0));
    }

    /// CPU time grows with work and not with sleep (the wall clock does both).
    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let c0 = thread_cpu_time();
        // Spins until 5 ms of CPU time, which a busy machine may spread over
        // much more wall time; a clock that never grows runs into the limit.
        let until = Instant::now() + Duration::from_secs(10);
        while thread_cpu_time() - c0 < Duration::from_millis(5) {
            assert!(
                Instant::now() < until,
                "no CPU time counted in 10 s of spinning"
            );
            std::hint::spin_loop();
        }
        let c1 = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_time() - c1;
        assert!(slept < Duration::from_millis(10), "{slept:?}");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The timer handshake: the wheel's loop fires while the sleeping task
    //! polls from another thread. The task waits for a wake-up by yielding
    //! until its waker's count moves; a lost wake-up makes that wait endless,
    //! which loom reports.
    use super::TimerShared;
    use crate::loom::{thread, Arc, AtomicUsize};
    use crate::task::loom_tests::{counting_waker, yield_until_woken};
    use std::sync::atomic::Ordering::SeqCst;

    /// A timer registered with a first waker fires on another thread while
    /// the task polls it with `waker` (the same one, or a new one as after
    /// moving to another loop) until fired, waiting for `waker`'s count to
    /// move between polls as an executor waits to be woken.
    fn fire_against_poll(same_waker: bool) {
        loom::model(move || {
            let count = Arc::new(AtomicUsize::new(0));
            let waker = counting_waker(&count);
            let first = if same_waker {
                waker.clone()
            } else {
                // Its wake-ups are not waited on.
                counting_waker(&Arc::new(AtomicUsize::new(0)))
            };
            let shared = Arc::new(TimerShared::new(&first));
            let t = {
                let shared = shared.clone();
                thread::spawn(move || shared.fire())
            };
            loop {
                let before = count.load(SeqCst);
                if shared.poll_fired(&waker) {
                    break;
                }
                yield_until_woken(&count, before);
            }
            t.join().unwrap();
        });
    }

    #[test]
    fn a_timer_fired_on_another_thread_always_wakes_its_task() {
        fire_against_poll(true);
    }

    #[test]
    fn a_fire_reaches_a_waker_registered_after_the_first() {
        fire_against_poll(false);
    }
}
