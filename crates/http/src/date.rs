//! HTTP dates (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`): a [`DateCache`]
//! for the `Date` field that formats at most once per second, and the
//! clamping that keeps file times printable.

use std::cell::RefCell;
use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use httpdate::HttpDate;

/// Length of an IMF-fixdate.
pub const LEN: usize = 29;

/// The last second an IMF-fixdate can show (9999-12-31 23:59:59).
const MAX_SECS: u64 = 253_402_300_799;

/// `t` truncated to whole seconds and clamped into what an HTTP date can
/// show (1970 to 9999): HTTP dates have one-second resolution, so
/// `Last-Modified` and `If-Modified-Since` compare in whole seconds.
pub fn to_http_seconds(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .min(MAX_SECS);
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// Formats `t` (clamped as by [`to_http_seconds`]) as an IMF-fixdate.
pub fn format(t: SystemTime) -> [u8; LEN] {
    let mut buf = [0u8; LEN];
    let _ = write!(&mut buf[..], "{}", HttpDate::from(to_http_seconds(t)));
    buf
}

/// Parses an HTTP date in any of the three forms RFC 9110 makes recipients
/// accept (IMF-fixdate, RFC 850, asctime). `None` if it is not one.
pub fn parse(value: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(value).ok()?;
    httpdate::parse_http_date(s).ok()
}

/// The `Date` value, formatted at most once per second.
///
/// One per event loop (or per connection): it takes `&mut self` and holds no
/// lock. [`with_now`] offers a thread-local one.
#[derive(Debug, Clone)]
pub struct DateCache {
    secs: u64,
    text: [u8; LEN],
}

impl DateCache {
    /// A cache that formats on first use.
    pub fn new() -> DateCache {
        DateCache {
            secs: u64::MAX,
            text: [b' '; LEN],
        }
    }

    /// The current date.
    pub fn now(&mut self) -> &str {
        self.at(SystemTime::now())
    }

    /// The date at `t`, reformatted only when the second changed.
    pub fn at(&mut self, t: SystemTime) -> &str {
        let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if secs != self.secs {
            self.secs = secs;
            self.text = format(t);
        }
        // The formatter writes ASCII only.
        std::str::from_utf8(&self.text).unwrap_or("")
    }
}

impl Default for DateCache {
    fn default() -> DateCache {
        DateCache::new()
    }
}

/// Calls `f` with the current date from this thread's [`DateCache`].
pub fn with_now<R>(f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        static CACHE: RefCell<DateCache> = RefCell::new(DateCache::new());
    }
    CACHE.with(|c| f(c.borrow_mut().now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_caches_per_second() {
        let mut cache = DateCache::new();
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(cache.at(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        // Same second: same text (no reformat needed).
        assert_eq!(
            cache.at(t + Duration::from_millis(999)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            cache.at(t + Duration::from_secs(1)),
            "Sun, 06 Nov 1994 08:49:38 GMT"
        );
        assert_eq!(cache.now().len(), LEN);
        assert_eq!(with_now(|d| d.len()), LEN);
    }

    #[test]
    fn clamps_unprintable_times() {
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(&format(before), b"Thu, 01 Jan 1970 00:00:00 GMT");
        let after = UNIX_EPOCH + Duration::from_secs(MAX_SECS + 1_000_000);
        assert_eq!(&format(after), b"Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn parses_three_forms() {
        let want = UNIX_EPOCH + Duration::from_secs(784_111_777);
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse(s.as_bytes()), Some(want), "{s}");
        }
        assert_eq!(parse(b"yesterday"), None);
        assert_eq!(parse(b"\xff"), None);
    }
}
