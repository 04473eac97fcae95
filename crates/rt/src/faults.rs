//! Fault injection for tests: a loop can make its sockets' reads and writes
//! move a few bytes at a time, return `Pending` spuriously (a wake-up with
//! nothing done, as after `EAGAIN` on a socket that stays ready), and fail
//! with `EINTR` before the real system call. Servers must lose, duplicate,
//! reorder or hang nothing under any of them.
//!
//! Chosen per loop ([`crate::LoopConfig::faults`]); the default comes from
//! the `DUALITY_FAULTS` environment variable (`short,yield,eintr`, any
//! subset; empty or unset: none), so a whole server process can run under
//! faults. Off, a socket pays one branch per operation.

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
}

impl Faults {
    /// No faults.
    pub const NONE: Faults = Faults {
        short: false,
        yields: false,
        eintr: false,
    };

    /// Every fault.
    pub const ALL: Faults = Faults {
        short: true,
        yields: true,
        eintr: true,
    };

    /// Whether any fault is on.
    #[inline]
    pub fn any(self) -> bool {
        self.short || self.yields || self.eintr
    }
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
                "all" => f = Faults::ALL,
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown fault {other:?}: choose from short, yield, eintr, all, none"
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
            eprintln!("DUALITY_FAULTS: {e}: no faults");
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
    }
}
