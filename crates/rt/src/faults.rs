//! Fault injection for tests: a loop can make its sockets' reads and writes
//! move a few bytes at a time, return `Pending` spuriously (a wake-up with
//! nothing done, as after `EAGAIN` on a socket that stays ready), fail with
//! `EINTR` before the real system call, fail with `ECONNRESET` part-way
//! through a connection (mid-request or mid-response), and make accepts and
//! file opens fail with `EMFILE`. Servers must lose, duplicate, reorder or
//! hang nothing under any of them; a reset connection loses only itself, and
//! what it had half sent is never stored.
//!
//! Chosen per loop ([`crate::LoopConfig::faults`]); the default comes from
//! the `DUALITY_FAULTS` environment variable (`short,yield,eintr,reset,emfile`,
//! any subset; `all` is the first three, which keep every connection whole;
//! empty or unset: none), so a whole server process can run under faults.
//! Off, a socket pays one branch per operation.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::OnceLock;

/// Which faults a loop injects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Reads and writes move 1, 2, 7 or 4096 bytes at most, in turn.
    pub short: bool,
    /// Every other read or write returns `Pending` after waking its task.
    pub yields: bool,
    /// Every third system call fails with `EINTR` first (and is retried).
    pub eintr: bool,
    /// Every third connection is reset by its peer: its reads and writes
    /// fail with `ECONNRESET` from its 1st, 2nd, … 7th operation on (in
    /// turn over the connections so hit), so resets land before, inside and
    /// after requests and responses.
    pub reset: bool,
    /// Every third accept and every third file open fail with `EMFILE`
    /// first, as when the process is out of descriptors.
    pub emfile: bool,
}

impl Faults {
    /// No faults.
    pub const NONE: Faults = Faults {
        short: false,
        yields: false,
        eintr: false,
        reset: false,
        emfile: false,
    };

    /// Every fault that keeps connections whole: short transfers, spurious
    /// wake-ups and `EINTR` (a conformance suite must pass under them).
    pub const ALL: Faults = Faults {
        short: true,
        yields: true,
        eintr: true,
        reset: false,
        emfile: false,
    };

    /// Whether any fault is on.
    #[inline]
    pub fn any(self) -> bool {
        self.short || self.yields || self.eintr || self.reset || self.emfile
    }

    /// For a new connection under `reset`: after how many reads and writes
    /// it is reset (`None`: never). Every third connection, the count going
    /// 1..=7 in turn.
    pub(crate) fn reset_after(self) -> Option<u32> {
        static CONNS: AtomicU32 = AtomicU32::new(0);
        if !self.reset {
            return None;
        }
        let n = CONNS.fetch_add(1, Relaxed);
        (n % 3 == 2).then_some((n / 3) % 7 + 1)
    }

    /// Under `emfile`: whether this accept or open fails with `EMFILE`.
    fn emfile_now(self, ticks: &AtomicU32) -> Option<io::Error> {
        (self.emfile && ticks.fetch_add(1, Relaxed) % 3 == 1)
            .then(|| io::Error::from_raw_os_error(libc::EMFILE))
    }

    /// Under `emfile`: the error this accept fails with first, if any.
    pub(crate) fn accept_fault(self) -> Option<io::Error> {
        static ACCEPTS: AtomicU32 = AtomicU32::new(0);
        self.emfile_now(&ACCEPTS)
    }
}

std::thread_local! {
    /// The faults of the loop a blocking call came from (see [`carried`]).
    static CARRIED: Cell<Faults> = const { Cell::new(Faults::NONE) };
}

/// Wraps a blocking call made on a loop so that the loop's faults apply
/// where it runs (a pool thread), as [`open_fault`] asks.
pub fn carried<R>(job: impl FnOnce() -> R) -> impl FnOnce() -> R {
    let f = crate::event_loop::current_faults();
    move || {
        if !f.any() {
            return job();
        }
        let before = CARRIED.replace(f);
        let r = job();
        CARRIED.set(before);
        r
    }
}

/// For servers that open files (the file server): the `EMFILE` injected
/// into this open, if any — the faults of the current loop or of the loop
/// the blocking call was [`carried`] from, else the process default. Call
/// it just before opening.
pub fn open_fault() -> Option<io::Error> {
    static OPENS: AtomicU32 = AtomicU32::new(0);
    let mut f = crate::event_loop::current_faults();
    if !f.any() {
        f = CARRIED.get();
    }
    if !f.any() {
        f = default_faults();
    }
    f.emfile_now(&OPENS)
}

impl std::str::FromStr for Faults {
    type Err = String;

    fn from_str(s: &str) -> Result<Faults, String> {
        let mut f = Faults::NONE;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "short" => f.short = true,
                "yield" => f.yields = true,
                "eintr" => f.eintr = true,
                "reset" => f.reset = true,
                "emfile" => f.emfile = true,
                "all" => {
                    f.short = true;
                    f.yields = true;
                    f.eintr = true;
                }
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown fault {other:?}: choose from short, yield, eintr, reset, emfile, all, none"
                    ))
                }
            }
        }
        Ok(f)
    }
}

/// The process default: `DUALITY_FAULTS`, read once. An unknown fault name
/// is reported on stderr and ignored (a test harness typo must not turn
/// faults silently off without a word).
pub fn default_faults() -> Faults {
    static DEFAULT: OnceLock<Faults> = OnceLock::new();
    *DEFAULT.get_or_init(|| match std::env::var("DUALITY_FAULTS") {
        Ok(v) => v.parse().unwrap_or_else(|e| {
            crate::say!("DUALITY_FAULTS: {e}: no faults");
            Faults::NONE
        }),
        Err(_) => Faults::NONE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_subsets() {
        assert_eq!("".parse::<Faults>(), Ok(Faults::NONE));
        assert_eq!("all".parse::<Faults>(), Ok(Faults::ALL));
        let f: Faults = "short, eintr".parse().unwrap();
        assert!(f.short && f.eintr && !f.yields && f.any());
        assert!("slow".parse::<Faults>().is_err());
        assert!(!Faults::NONE.any());
        let f: Faults = "all,reset".parse().unwrap();
        assert!(f.short && f.reset && !f.emfile);
        assert!("emfile".parse::<Faults>().unwrap().any());
    }

    #[test]
    fn resets_hit_every_third_connection_at_every_position() {
        let f = Faults {
            reset: true,
            ..Faults::NONE
        };
        let hits: Vec<u32> = (0..300).filter_map(|_| f.reset_after()).collect();
        assert_eq!(hits.len(), 100);
        for k in 1..=7 {
            assert!(hits.contains(&k), "no reset after {k} operations");
        }
        assert_eq!(Faults::NONE.reset_after(), None);
    }

    #[test]
    fn emfile_fails_one_open_in_three() {
        let f = Faults {
            emfile: true,
            ..Faults::NONE
        };
        let ticks = AtomicU32::new(0);
        let fails = (0..30).filter(|_| f.emfile_now(&ticks).is_some()).count();
        assert_eq!(fails, 10);
        let e = f.emfile_now(&AtomicU32::new(1)).unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
        assert!(Faults::NONE.emfile_now(&ticks).is_none());
    }
}
