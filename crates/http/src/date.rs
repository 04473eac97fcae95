//! HTTP dates (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`): a [`DateCache`]
//! for the `Date` field that formats at most once per second, and the
//! clamping that keeps file times printable.

use std::cell::RefCell;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate.
pub const LEN: usize = 29;

/// Month names, as both date formats write them.
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

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
///
/// By hand rather than through `httpdate`'s `Display`: every response with
/// a file carries a `Last-Modified`, and the formatter machinery cost about
/// 1% of the server's CPU at 100,000 responses a second.
pub fn format(t: SystemTime) -> [u8; LEN] {
    format_secs(http_secs(t))
}

/// `t` as whole seconds since the Unix epoch, clamped as by
/// [`to_http_seconds`].
fn http_secs(t: SystemTime) -> u64 {
    to_http_seconds(t)
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// [`format()`] through a small memo on this thread: a server dates the same
/// few files over and over (`Last-Modified` on every response).
pub fn format_memo(t: SystemTime) -> [u8; LEN] {
    const SLOTS: usize = 16;
    thread_local! {
        static MEMO: RefCell<[(u64, [u8; LEN]); SLOTS]> =
            const { RefCell::new([(u64::MAX, [0; LEN]); SLOTS]) };
    }
    let secs = http_secs(t);
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let slot = &mut m[secs as usize % SLOTS];
        if slot.0 != secs {
            *slot = (secs, format_secs(secs));
        }
        slot.1
    })
}

/// [`format()`] for whole seconds since the Unix epoch (at most [`MAX_SECS`]).
fn format_secs(secs: u64) -> [u8; LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let mut b = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    b[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    two_digits(&mut b[5..7], day);
    b[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    two_digits(&mut b[12..14], year / 100);
    two_digits(&mut b[14..16], year % 100);
    two_digits(&mut b[17..19], rem / 3600);
    two_digits(&mut b[20..22], rem / 60 % 60);
    two_digits(&mut b[23..25], rem % 60);
    b
}

/// Length of a Common Log Format time (`28/Nov/2026:00:04:06 +0000`).
pub const CLF_LEN: usize = 26;

/// `t` in the time format of the Common Log Format and nginx's
/// `$time_local`, always in UTC (`+0000`), which log tools (GoAccess,
/// AWStats) parse as they parse nginx's.
pub fn format_clf(t: SystemTime) -> [u8; CLF_LEN] {
    let secs = http_secs(t);
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    let mut b = *b"01/Jan/1970:00:00:00 +0000";
    two_digits(&mut b[0..2], day);
    b[3..6].copy_from_slice(MONTHS[(month - 1) as usize]);
    two_digits(&mut b[7..9], year / 100);
    two_digits(&mut b[9..11], year % 100);
    two_digits(&mut b[12..14], rem / 3600);
    two_digits(&mut b[15..17], rem / 60 % 60);
    two_digits(&mut b[18..20], rem % 60);
    b
}

/// Length of an ISO 8601 time as nginx's `$time_iso8601` writes it.
pub const ISO8601_LEN: usize = 25;

/// `t` as nginx's `$time_iso8601`: `2026-12-07T04:43:54+00:00`, in UTC.
pub fn format_iso8601(t: SystemTime) -> [u8; ISO8601_LEN] {
    let secs = http_secs(t);
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    let mut b = *b"1970-01-01T00:00:00+00:00";
    two_digits(&mut b[0..2], year / 100);
    two_digits(&mut b[2..4], year % 100);
    two_digits(&mut b[5..7], month);
    two_digits(&mut b[8..10], day);
    two_digits(&mut b[11..13], rem / 3600);
    two_digits(&mut b[14..16], rem / 60 % 60);
    two_digits(&mut b[17..19], rem % 60);
    b
}

/// Length of [`format_listing`]'s output.
pub const LISTING_LEN: usize = 17;

/// `t` as nginx's `autoindex` lists a file's time: `06-Dec-2026 23:41`, UTC.
pub fn format_listing(t: SystemTime) -> [u8; LISTING_LEN] {
    // The log's `06/Dec/2026:23:41:07 +0000`, other separators, no seconds.
    let clf = format_clf(t);
    let mut b = *b"01-Jan-1970 00:00";
    b[0..2].copy_from_slice(&clf[0..2]);
    b[3..6].copy_from_slice(&clf[3..6]);
    b[7..11].copy_from_slice(&clf[7..11]);
    b[12..17].copy_from_slice(&clf[12..17]);
    b
}

fn two_digits(out: &mut [u8], v: u64) {
    out[0] = b'0' + (v / 10 % 10) as u8;
    out[1] = b'0' + (v % 10) as u8;
}

/// (year, month 1-12, day 1-31) of the day `days` after 1970-01-01, in the
/// proleptic Gregorian calendar: H. Hinnant's `civil_from_days`, over
/// 400-year eras counted from 0000-03-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Parses an HTTP date in any of the three forms RFC 9110 makes recipients
/// accept (IMF-fixdate, RFC 850, asctime). `None` if it is not one.
///
/// The day of the week is not looked at (nginx skips whatever comes before
/// the `,` or first space): a date whose weekday is wrong (`Sun, 29 Nov 2000`, a Wednesday) is the date it names,
/// not an invalid one that would make a condition be ignored.
pub fn parse(value: &[u8]) -> Option<SystemTime> {
    let s = std::str::from_utf8(value).ok()?;
    if let Ok(t) = httpdate::parse_http_date(s) {
        return Some(t);
    }
    // Only a failed parse pays for this: the same date under each weekday
    // name, short and long (each form takes one), with the separator it
    // came with.
    let cut = s.find([',', ' '])?;
    let rest = &s[cut..];
    const SHORT: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const LONG: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    SHORT
        .iter()
        .chain(&LONG)
        .find_map(|day| httpdate::parse_http_date(&format!("{day}{rest}")).ok())
}

/// The `Date` value, formatted at most once per second.
///
/// One per event loop (or per connection): it takes `&mut self` and holds no
/// lock. [`with_now`] offers a thread-local one.
#[derive(Debug, Clone)]
pub struct DateCache {
    secs: u64,
    text: [u8; LEN],
    /// When the second [`now`](Self::now) last formatted ends; `None`:
    /// read the wall clock at the next call.
    until: Option<Instant>,
}

impl DateCache {
    /// A cache that formats on first use.
    pub fn new() -> DateCache {
        DateCache {
            secs: u64::MAX,
            text: [b' '; LEN],
            until: None,
        }
    }

    /// The current date. Within the second it last formatted, this reads
    /// no clock at all on an event loop (it compares the loop's turn clock,
    /// [`loop_now`](duality_rt::time::loop_now), with the end of that
    /// second), so a new second shows at most a loop turn late.
    pub fn now(&mut self) -> &str {
        let fresh = self
            .until
            .is_some_and(|until| duality_rt::time::loop_now() < until);
        if !fresh {
            let t = SystemTime::now();
            let into = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
            let left = Duration::from_nanos(1_000_000_000 - u64::from(into));
            self.at(t);
            self.until = Some(Instant::now() + left);
        }
        std::str::from_utf8(&self.text).unwrap_or("")
    }

    /// The date at `t`, reformatted only when the second changed.
    pub fn at(&mut self, t: SystemTime) -> &str {
        self.until = None;
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
    with_now_secs(|date, _| f(date))
}

/// [`with_now`], with the same second in Unix seconds.
pub fn with_now_secs<R>(f: impl FnOnce(&str, u64) -> R) -> R {
    thread_local! {
        static CACHE: RefCell<DateCache> = RefCell::new(DateCache::new());
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.now();
        f(std::str::from_utf8(&c.text).unwrap_or(""), c.secs)
    })
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
    fn formats_as_httpdate_does() {
        let mut secs = 0u64;
        // Every day of the first leap cycles, then strides over the range.
        let check = |s: u64| {
            let t = UNIX_EPOCH + Duration::from_secs(s);
            let want = httpdate::fmt_http_date(t);
            assert_eq!(std::str::from_utf8(&format(t)).unwrap(), want, "{s}");
        };
        while secs < 5 * 366 * 86_400 {
            check(secs);
            secs += 86_400 - 1;
        }
        for s in [
            951_782_400,   // 2000-02-29
            4_107_542_399, // 2100-02-28 23:59:59 (not a leap year)
            4_107_542_400, // 2100-03-01
            MAX_SECS,
        ] {
            check(s);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            check(x % (MAX_SECS + 1));
        }
    }

    #[test]
    fn the_memo_formats_as_format_does() {
        // More distinct times than slots, twice over: misses replace slots,
        // hits return what was formatted for that very time.
        for round in 0..2 {
            for i in 0..40u64 {
                let t = UNIX_EPOCH + Duration::from_secs(784_111_777 + i * 7919);
                assert_eq!(format_memo(t), format(t), "{round} {i}");
            }
        }
    }

    #[test]
    fn the_cached_now_is_the_current_second() {
        let mut cache = DateCache::new();
        let before = SystemTime::now();
        let shown = parse(cache.now().as_bytes()).unwrap();
        let again = parse(cache.now().as_bytes()).unwrap();
        let after = SystemTime::now();
        assert!(to_http_seconds(before) <= shown && shown <= after);
        assert!(shown <= again && again <= after);
        // An explicit time in between is shown, then `now` reads the clock again.
        let old = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(cache.at(old), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert!(parse(cache.now().as_bytes()).unwrap() >= to_http_seconds(before));
    }

    #[test]
    fn formats_log_times() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(&format_clf(t), b"06/Nov/1994:08:49:37 +0000");
        assert_eq!(&format_clf(UNIX_EPOCH), b"01/Jan/1970:00:00:00 +0000");
        assert_eq!(&format_iso8601(t), b"1994-11-06T08:49:37+00:00");
        assert_eq!(&format_iso8601(UNIX_EPOCH), b"1970-01-01T00:00:00+00:00");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_824_000 + 86_399);
        assert_eq!(&format_clf(t), b"28/Nov/2026:23:59:59 +0000");
        assert_eq!(&format_listing(t), b"28-Nov-2026 23:59");
        assert_eq!(&format_listing(UNIX_EPOCH), b"01-Jan-1970 00:00");
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
            // A wrong weekday is skipped, as nginx does.
            "Wed, 06 Nov 1994 08:49:37 GMT",
            "Monday, 06-Nov-94 08:49:37 GMT",
            "Fri Nov  6 08:49:37 1994",
            "Xyz, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT",
        ] {
            assert_eq!(parse(s.as_bytes()), Some(want), "{s}");
        }
        for bad in [
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun,",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse(b"yesterday"), None);
        assert_eq!(parse(b"\xff"), None);
    }
}
