//! [`ResponseFields`]: fields a response carries beside its own, as nginx's
//! headers filter adds them: `expires` (`Expires` and `Cache-Control`,
//! [`Expires`]) and `add_header` ([`AddedField`]).
//!
//! As in nginx, they go on answers that a cache may keep or a client may
//! follow (200, 206, 301, 302, 303, 304, 307, 308: [`adds_to`]); a field
//! added `always` goes on every answer, errors included. `--expires 30d` on a file:
//!
//! ```text
//! Expires: <the response's Date + 30 days>
//! Cache-Control: max-age=2592000
//! ```
//!
//! Rules may name a media type or family ([`ExpiresRule`]: `text/html
//! epoch`, `image/ 30d`), as nginx does with a `map` of
//! `$sent_http_content_type`. A time of day (`@15h30m`) is taken in UTC,
//! the zone of every other time the server writes (nginx takes its local
//! zone).

use std::io::Write;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::date;
use crate::status::Status;

/// nginx's `expires`: what `Expires` and `Cache-Control` say, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expires {
    /// Neither field (the default, nginx's `expires off`).
    #[default]
    Off,
    /// `Expires` at the epoch's first second, `Cache-Control: no-cache`.
    Epoch,
    /// `Expires` in 2037, `Cache-Control: max-age=315360000` (ten years).
    Max,
    /// This many seconds after the response (negative: already expired,
    /// `Cache-Control: no-cache`).
    Access(i64),
    /// This many seconds after the `Last-Modified` of what the response
    /// carries (one without: after the response); `no-cache` once past.
    Modified(i64),
    /// The next time this many seconds after midnight (UTC).
    Daily(u32),
}

/// Seconds in a day; a daily time is at most that.
const DAY: i64 = 86_400;

/// `expires max`'s date and age, as nginx writes them.
const MAX_DATE: &str = "Thu, 31 Dec 2037 23:55:55 GMT";
const MAX_AGE: &str = "max-age=315360000";
const EPOCH_DATE: &str = "Thu, 01 Jan 1970 00:00:01 GMT";

impl Expires {
    /// Appends `Expires` and `Cache-Control` for a response dated `date`
    /// (`now`, the same second in Unix seconds) carrying something last
    /// modified at `last_modified`.
    fn write(self, now: u64, date: &str, last_modified: Option<SystemTime>, out: &mut Vec<u8>) {
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        let (at, age) = match self {
            Expires::Off => return,
            Expires::Epoch => return two(out, EPOCH_DATE.as_bytes(), b"no-cache"),
            Expires::Max => return two(out, MAX_DATE.as_bytes(), MAX_AGE.as_bytes()),
            // nginx dates a zero from the response itself, `modified`
            // included.
            Expires::Access(0) | Expires::Modified(0) => {
                return two(out, date.as_bytes(), b"max-age=0")
            }
            Expires::Daily(secs) => {
                let next = (now - now.rem_euclid(DAY)).saturating_add(i64::from(secs));
                let next = if next > now {
                    next
                } else {
                    next.saturating_add(DAY)
                };
                (next, next - now)
            }
            Expires::Modified(secs) => match last_modified.map(unix_secs) {
                Some(modified) => {
                    let at = modified.saturating_add(secs);
                    (at, at.saturating_sub(now))
                }
                None => (now.saturating_add(secs), secs),
            },
            Expires::Access(secs) => (now.saturating_add(secs), secs),
        };
        let negative = matches!(self, Expires::Access(s) | Expires::Modified(s) if s < 0);
        out.extend_from_slice(b"Expires: ");
        out.extend_from_slice(&date::format(
            UNIX_EPOCH + Duration::from_secs(u64::try_from(at).unwrap_or(0)),
        ));
        out.extend_from_slice(b"\r\nCache-Control: ");
        if negative || age < 0 {
            out.extend_from_slice(b"no-cache\r\n");
        } else {
            // Into the head itself: no allocation per answer.
            let _ = write!(out, "max-age={age}\r\n");
        }
    }
}

/// `Expires: at` and `Cache-Control: cache_control`.
fn two(out: &mut Vec<u8>, at: &[u8], cache_control: &[u8]) {
    out.extend_from_slice(b"Expires: ");
    out.extend_from_slice(at);
    out.extend_from_slice(b"\r\nCache-Control: ");
    out.extend_from_slice(cache_control);
    out.extend_from_slice(b"\r\n");
}

fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

impl FromStr for Expires {
    type Err = String;

    /// nginx's `expires` arguments: `off`, `epoch`, `max`, `[modified]
    /// [+|-]TIME` or `@TIME` (a time of day), TIME in nginx's units (`30d`,
    /// `1h 30m`, `90`: seconds).
    fn from_str(s: &str) -> Result<Expires, String> {
        let s = s.trim();
        match s {
            "off" => return Ok(Expires::Off),
            "epoch" => return Ok(Expires::Epoch),
            "max" => return Ok(Expires::Max),
            _ => {}
        }
        let (modified, time) = match s.strip_prefix("modified") {
            Some(rest) if rest.starts_with(char::is_whitespace) => (true, rest.trim_start()),
            _ => (false, s),
        };
        if let Some(day) = time.strip_prefix('@') {
            if modified {
                return Err("a time of day (@) cannot be used with \"modified\"".to_owned());
            }
            let secs = parse_time(day).map_err(|e| format!("@TIME: {e}"))?;
            return match u32::try_from(secs) {
                Ok(secs) if i64::from(secs) <= DAY => Ok(Expires::Daily(secs)),
                _ => Err("a time of day must be at most 24h".to_owned()),
            };
        }
        let (minus, digits) = match time.as_bytes().first() {
            Some(b'-') => (true, &time[1..]),
            Some(b'+') => (false, &time[1..]),
            _ => (false, time),
        };
        let secs = parse_time(digits).map_err(|e| {
            format!("{e}: give off, epoch, max, [modified] [+|-]TIME or @TIME; TIME as 30d, 12h or 1h 30m")
        })?;
        let secs = if minus { -secs } else { secs };
        Ok(match modified {
            true => Expires::Modified(secs),
            false => Expires::Access(secs),
        })
    }
}

/// Longest time accepted, in seconds: a thousand years (nginx takes up to
/// what its `time_t` holds; dates past 9999 cannot be written).
const MAX_TIME: i64 = 1000 * 365 * DAY;

/// Bytes in nginx's size syntax (`ngx_parse_size`): a number, or one with
/// `k`, `m` or `g` (any case) after it.
pub fn parse_size(v: &str) -> Option<u64> {
    let (n, unit) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    n.parse::<u64>().ok()?.checked_mul(unit)
}

/// Seconds in nginx's time syntax (`ngx_parse_time` for seconds): numbers
/// with a unit each, `y` (365 days), `M` (30 days), `w`, `d`, `h`, `m`,
/// `s`, largest first and each at most once, spaces between allowed; a
/// last number without a unit is seconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    const UNITS: [(u8, i64); 7] = [
        (b'y', 365 * DAY),
        (b'M', 30 * DAY),
        (b'w', 7 * DAY),
        (b'd', DAY),
        (b'h', 3600),
        (b'm', 60),
        (b's', 1),
    ];
    let bad = || "not a time".to_owned();
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err("no time given".to_owned());
    }
    let mut total: i64 = 0;
    // UNITS[next..] are the units still allowed (each smaller than the last).
    let mut next = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let value: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let scale = match rest.bytes().next() {
            // A number without a unit is seconds, and ends the time.
            None | Some(b' ') if next < UNITS.len() && rest.trim().is_empty() => 1,
            None | Some(b' ') => return Err(bad()),
            Some(unit) => {
                let at = UNITS[next..]
                    .iter()
                    .position(|&(u, _)| u == unit)
                    .ok_or_else(|| "units go largest first, each once: y M w d h m s".to_owned())?;
                next += at + 1;
                rest = &rest[1..];
                UNITS[next - 1].1
            }
        };
        total = value
            .checked_mul(scale)
            .and_then(|v| total.checked_add(v))
            .filter(|&t| t <= MAX_TIME)
            .ok_or_else(|| "at most 1000y".to_owned())?;
        rest = rest.trim_start_matches(' ');
    }
    Ok(total)
}

/// Whether `s` is an HTTP token (RFC 9110 §5.6.2): a field name, a
/// charset, a part of a media type.
pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether nginx adds its fields (without `always`) to an answer of
/// `status`: those a cache may keep or a client follows.
pub fn adds_to(status: Status) -> bool {
    matches!(
        status.code(),
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

/// Fields that duality writes itself (or that frame the message): adding
/// one would send it twice, or contradict the framing.
const OWN: [&str; 16] = [
    "Server",
    "Date",
    "Content-Type",
    "Content-Length",
    "Content-Encoding",
    "Content-Range",
    "Last-Modified",
    "ETag",
    "Accept-Ranges",
    "Location",
    "Allow",
    "Connection",
    "Keep-Alive",
    "Transfer-Encoding",
    "Trailer",
    "Upgrade",
];

/// One `--add-header` field (nginx's `add_header NAME VALUE [always]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedField {
    /// `Name: value\r\n`, as it goes out; `Name: ` alone where the value
    /// names variables.
    line: Box<[u8]>,
    /// The value, where it names variables (nginx's add_header fills
    /// them in each answer; one that comes out empty adds no field).
    value: Option<crate::LogFormat>,
    /// Added to every answer, errors included.
    pub always: bool,
}

impl AddedField {
    /// This field on every answer, errors included (nginx's `always`).
    pub fn always(mut self) -> AddedField {
        self.always = true;
        self
    }
}

impl FromStr for AddedField {
    type Err = String;

    /// `NAME: VALUE`: a field name (an HTTP token) and a value without
    /// line breaks or other control characters; not one of the fields
    /// duality writes itself, nor `Expires` (see `--expires`).
    fn from_str(s: &str) -> Result<AddedField, String> {
        let Some((name, value)) = s.split_once(':') else {
            return Err(format!(
                "{s:?}: give NAME: VALUE, e.g. \"X-Frame-Options: DENY\""
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        if !is_token(name) {
            return Err(format!(
                "{name:?} is not a field name (letters, digits and !#$%&'*+-.^_`|~)"
            ));
        }
        if let Some(own) = OWN.iter().find(|o| o.eq_ignore_ascii_case(name)) {
            return Err(format!(
                "{own} is written by the server itself; it cannot be added"
            ));
        }
        if name.eq_ignore_ascii_case("Expires") {
            return Err("Expires is set with --expires (nginx's expires)".to_owned());
        }
        if value.is_empty() {
            return Err(format!("{name}: an empty value adds nothing"));
        }
        if value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(format!(
                "{name}: a value may not hold line breaks or control characters"
            ));
        }
        // `$request_id`, `${host}`: variables, filled in as nginx fills
        // them (a `$` before anything else is a byte of the value).
        let variable = value
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'$' && (w[1].is_ascii_alphabetic() || w[1] == b'_' || w[1] == b'{'));
        if variable {
            let format = crate::LogFormat::parse(value, crate::log_format::Escape::None)
                .map_err(|e| format!("{name}: {e}"))?;
            return Ok(AddedField {
                line: format!("{name}: ").into_bytes().into(),
                value: Some(format),
                always: false,
            });
        }
        Ok(AddedField {
            line: format!("{name}: {value}\r\n").into_bytes().into(),
            value: None,
            always: false,
        })
    }
}

/// One `--expires`: an [`Expires`] for answers of one media type
/// (`text/css`), of a family (`image/`), or, without a type, of every
/// other (nginx's `map $sent_http_content_type $expires`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiresRule {
    /// The media type (lower case), or a family ending in `/`; `None`:
    /// the default.
    pub types: Option<String>,
    /// What answers of those types get.
    pub expires: Expires,
}

impl FromStr for ExpiresRule {
    type Err = String;

    /// `[TYPE] ARGUMENTS`: TYPE is a media type (`text/html`) or a family
    /// (`image/`), ARGUMENTS those of [`Expires`].
    fn from_str(s: &str) -> Result<ExpiresRule, String> {
        let s = s.trim();
        let (first, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        if !first.contains('/') {
            return Ok(ExpiresRule {
                types: None,
                expires: s.parse()?,
            });
        }
        let (family, sub) = first.split_once('/').unwrap_or((first, ""));
        if !is_token(family) || !(sub.is_empty() || is_token(sub)) {
            return Err(format!(
                "{first:?} is not a media type (text/css) or a family (image/)"
            ));
        }
        Ok(ExpiresRule {
            types: Some(first.to_ascii_lowercase()),
            expires: rest.parse()?,
        })
    }
}

/// The fields every response may carry beside its own: `--expires` and
/// `--add-header` (nginx's `expires` and `add_header`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseFields {
    /// `Expires` and `Cache-Control` on 200, 206, 301 and 304, by type.
    expires: Vec<ExpiresRule>,
    /// Added fields, in the order they go out.
    added: Vec<AddedField>,
}

impl ResponseFields {
    /// The fields of `expires` rules (at most one for each type or family
    /// and one default) and `added` ones, in the order given.
    pub fn new(
        expires: Vec<ExpiresRule>,
        added: Vec<AddedField>,
    ) -> Result<ResponseFields, String> {
        for (i, rule) in expires.iter().enumerate() {
            if expires[..i].iter().any(|r| r.types == rule.types) {
                return Err(match &rule.types {
                    Some(t) => format!("--expires for {t} is given twice"),
                    None => "--expires without a type is given twice: give one default".to_owned(),
                });
            }
        }
        Ok(ResponseFields { expires, added })
    }

    /// These fields with a location's own `expires` rules or added fields
    /// in place of these (nginx's inheritance: a location that gives either
    /// replaces the server's whole list of it).
    pub fn over(
        &self,
        expires: Option<Vec<ExpiresRule>>,
        added: Option<Vec<AddedField>>,
    ) -> Result<ResponseFields, String> {
        ResponseFields::new(
            expires.unwrap_or_else(|| self.expires.clone()),
            added.unwrap_or_else(|| self.added.clone()),
        )
    }

    /// Whether there is nothing to add to any response.
    pub fn is_empty(&self) -> bool {
        self.expires.iter().all(|r| r.expires == Expires::Off) && self.added.is_empty()
    }

    /// The rule for answers of `content_type`: its own, else its family's
    /// (the longest that matches), else the default; none is `off`.
    fn expires_for(&self, content_type: &str) -> Expires {
        let media = content_type.split(';').next().unwrap_or("").trim();
        let exact = self.expires.iter().find(|r| {
            r.types
                .as_deref()
                .is_some_and(|t| t.eq_ignore_ascii_case(media))
        });
        let family = || {
            self.expires
                .iter()
                .filter(|r| {
                    r.types.as_deref().is_some_and(|t| {
                        t.ends_with('/')
                            && media
                                .get(..t.len())
                                .is_some_and(|m| m.eq_ignore_ascii_case(t))
                    })
                })
                .max_by_key(|r| r.types.as_ref().map_or(0, String::len))
        };
        let default = || self.expires.iter().find(|r| r.types.is_none());
        exact
            .or_else(family)
            .or_else(default)
            .map_or(Expires::Off, |r| r.expires)
    }

    /// Appends the fields an answer of `status` gets (see the
    /// [module docs](self)): `date` is its `Date` (`now` that second in
    /// Unix seconds), `content_type` and `last_modified` those of what it
    /// carries.
    ///
    /// Fields whose values name variables are left out: see
    /// [`write_filled`](Self::write_filled).
    pub fn write(
        &self,
        status: Status,
        now: u64,
        date: &str,
        carried: (&str, Option<SystemTime>),
        out: &mut Vec<u8>,
    ) {
        self.write_filled(status, now, date, carried, &|_, _| {}, out)
    }

    /// [`write`](Self::write), `fill` writing a value's variables for this
    /// answer (the request's, as the access log's). A byte a field may not
    /// hold (a control byte a client sent) goes percent-encoded; a value
    /// that comes out empty adds no field, as nginx's `add_header`.
    pub fn write_filled(
        &self,
        status: Status,
        now: u64,
        date: &str,
        (content_type, last_modified): (&str, Option<SystemTime>),
        fill: Fill<'_>,
        out: &mut Vec<u8>,
    ) {
        let all = adds_to(status);
        if all {
            self.expires_for(content_type)
                .write(now, date, last_modified, out);
        }
        for f in self.added.iter().filter(|f| all || f.always) {
            let Some(value) = &f.value else {
                out.extend_from_slice(&f.line);
                continue;
            };
            let mut filled = Vec::new();
            fill(value, &mut filled);
            if filled.is_empty() {
                continue;
            }
            out.extend_from_slice(&f.line);
            for b in filled {
                match b {
                    b'\t' | 0x20..=0x7e | 0x80.. => out.push(b),
                    _ => out.extend_from_slice(format!("%{b:02X}").as_bytes()),
                }
            }
            out.extend_from_slice(b"\r\n");
        }
    }

    /// [`write`](Self::write) into the head that `out[start..]` begins
    /// with (written by one of the [`response`](crate::response) planners;
    /// a small body of its own may follow): the fields go before the
    /// head's blank line.
    ///
    /// Fields whose values name variables are left out: see
    /// [`add_to_head_filled`](Self::add_to_head_filled).
    pub fn add_to_head(
        &self,
        status: Status,
        now: u64,
        date: &str,
        carried: (&str, Option<SystemTime>),
        out: &mut Vec<u8>,
        start: usize,
    ) {
        self.add_to_head_filled(status, now, date, carried, &|_, _| {}, out, start)
    }

    /// [`add_to_head`](Self::add_to_head) with variables filled by `fill`
    /// (see [`write_filled`](Self::write_filled)).
    #[allow(clippy::too_many_arguments)]
    pub fn add_to_head_filled(
        &self,
        status: Status,
        now: u64,
        date: &str,
        carried: (&str, Option<SystemTime>),
        fill: Fill<'_>,
        out: &mut Vec<u8>,
        start: usize,
    ) {
        if self.is_empty() {
            return;
        }
        let end = out
            .get(start..)
            .and_then(|head| head.windows(4).position(|w| w == b"\r\n\r\n"));
        let Some(end) = end else {
            debug_assert!(false, "no head at {start}");
            return;
        };
        let at = start + end + 2;
        if at + 2 == out.len() {
            // Nothing after the head yet (a file's body comes later).
            out.truncate(at);
            self.write_filled(status, now, date, carried, fill, out);
            out.extend_from_slice(b"\r\n");
        } else {
            let mut fields = Vec::new();
            self.write_filled(status, now, date, carried, fill, &mut fields);
            out.splice(at..at, fields);
        }
    }
}

/// Writes the variables of an added field's value for one answer.
pub type Fill<'a> = &'a dyn Fn(&crate::LogFormat, &mut Vec<u8>);

/// Inserts `line` (a whole field line, its line end included) at the end
/// of the head written into `out` from `start`, before its blank line.
pub(crate) fn insert_field(out: &mut Vec<u8>, start: usize, line: &[u8]) {
    let end = out
        .get(start..)
        .and_then(|head| head.windows(4).position(|w| w == b"\r\n\r\n"));
    match end {
        Some(end) => {
            let at = start + end + 2;
            out.splice(at..at, line.iter().copied());
        }
        None => debug_assert!(false, "no head at {start}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_nginx_units() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("10m"), Some(10 << 20));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        for bad in ["", "k", "1t", "-1", "1.5m", "99999999999999999999g"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    fn secs(date: &str) -> u64 {
        date::parse(date.as_bytes())
            .unwrap()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn at(date: &str) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs(date))
    }

    /// The fields of `expires` on a 200 dated `now`, for a file last
    /// modified at `modified`.
    fn expires(e: &str, now: &str, modified: Option<&str>) -> String {
        let fields = ResponseFields::new(vec![e.parse().unwrap()], Vec::new()).unwrap();
        let mut out = Vec::new();
        let carried = ("text/plain", modified.map(at));
        fields.write(Status::Ok, secs(now), now, carried, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn times_in_nginx_units() {
        for (text, want) in [
            ("30", 30),
            ("30s", 30),
            ("1h 30m", 5400),
            ("1h30m", 5400),
            ("1d 2", 86_402),
            ("2w", 14 * 86_400),
            ("1M", 30 * 86_400),
            ("1y", 365 * 86_400),
            (" 12h ", 43_200),
            (
                "1y 1M 1w 1d 1h 1m 1s",
                365 * 86_400 + 30 * 86_400 + 8 * 86_400 + 3661,
            ),
        ] {
            assert_eq!(parse_time(text), Ok(want), "{text:?}");
        }
        for bad in [
            "", "1x", "1s 1m", "1h1h", "30 5", "1ms", "d", "-1", "1.5h", "1001y", "h1",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn expires_arguments_as_nginx_takes_them() {
        for (text, want) in [
            ("off", Expires::Off),
            ("epoch", Expires::Epoch),
            ("max", Expires::Max),
            ("30d", Expires::Access(2_592_000)),
            ("+1h", Expires::Access(3600)),
            ("-1", Expires::Access(-1)),
            ("0", Expires::Access(0)),
            ("modified +1h", Expires::Modified(3600)),
            ("modified -1h", Expires::Modified(-3600)),
            ("modified 24h", Expires::Modified(86_400)),
            ("@15h30m", Expires::Daily(55_800)),
            ("@24h", Expires::Daily(86_400)),
        ] {
            assert_eq!(text.parse::<Expires>(), Ok(want), "{text:?}");
        }
        for bad in [
            "",
            "@25h",
            "modified @1h",
            "modified",
            "modifiedx 1h",
            "on",
            "1x",
            "+-1",
            "@-1h",
        ] {
            assert!(bad.parse::<Expires>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn expires_fields_as_nginx_writes_them() {
        // Those asked of nginx 1.22.1 here, at this time, gave the same.
        let now = "Mon, 07 Dec 2026 02:15:44 GMT";
        let jan = Some("Thu, 01 Jan 2026 00:00:00 GMT");
        let both = |e: &str, c: &str| format!("Expires: {e}\r\nCache-Control: {c}\r\n");
        for (e, modified, want) in [
            ("off", jan, String::new()),
            (
                "30d",
                jan,
                both("Wed, 06 Jan 2027 02:15:44 GMT", "max-age=2592000"),
            ),
            ("-1", jan, both("Mon, 07 Dec 2026 02:15:43 GMT", "no-cache")),
            ("0", jan, both(now, "max-age=0")),
            ("modified 0", jan, both(now, "max-age=0")),
            (
                "epoch",
                jan,
                both("Thu, 01 Jan 1970 00:00:01 GMT", "no-cache"),
            ),
            (
                "max",
                jan,
                both("Thu, 31 Dec 2037 23:55:55 GMT", "max-age=315360000"),
            ),
            (
                "@15h30m",
                jan,
                both("Mon, 07 Dec 2026 15:30:00 GMT", "max-age=47656"),
            ),
            // Past today's: tomorrow's.
            (
                "@1h",
                jan,
                both("Tue, 08 Dec 2026 01:00:00 GMT", "max-age=81856"),
            ),
            // From the file's time: already past, so no-cache.
            (
                "modified +1h",
                jan,
                both("Thu, 01 Jan 2026 01:00:00 GMT", "no-cache"),
            ),
            (
                "modified 1y",
                jan,
                both("Fri, 01 Jan 2027 00:00:00 GMT", "max-age=2151856"),
            ),
            // An answer without a file's time: from the answer.
            (
                "modified 1h",
                None,
                both("Mon, 07 Dec 2026 03:15:44 GMT", "max-age=3600"),
            ),
        ] {
            assert_eq!(expires(e, now, modified), want, "{e}");
        }
        // Exactly at a daily time: the next day's.
        assert_eq!(
            expires("@2h15m44s", now, None),
            both("Tue, 08 Dec 2026 02:15:44 GMT", "max-age=86400")
        );
    }

    #[test]
    fn expires_by_type_its_family_then_the_default() {
        let rules = |list: &[&str]| -> Result<ResponseFields, String> {
            let rules = list
                .iter()
                .map(|r| r.parse())
                .collect::<Result<Vec<ExpiresRule>, String>>()?;
            ResponseFields::new(rules, Vec::new())
        };
        let fields = rules(&["image/ 30d", "text/html epoch", "max", "image/svg+xml 1h"]).unwrap();
        for (content_type, want) in [
            ("text/html", Expires::Epoch),
            ("text/html; charset=utf-8", Expires::Epoch),
            ("TEXT/HTML", Expires::Epoch),
            ("image/png", Expires::Access(2_592_000)),
            ("image/svg+xml", Expires::Access(3600)),
            ("text/css", Expires::Max),
            ("application/javascript", Expires::Max),
        ] {
            assert_eq!(fields.expires_for(content_type), want, "{content_type}");
        }
        // Without a default, other types get none.
        let fields = rules(&["text/css modified 1y"]).unwrap();
        assert_eq!(fields.expires_for("text/css"), Expires::Modified(365 * DAY));
        assert_eq!(fields.expires_for("text/html"), Expires::Off);
        assert!(!fields.is_empty());
        assert!(rules(&["off"]).unwrap().is_empty());
        // A type given twice, or two defaults, is refused.
        assert!(rules(&["text/css 1d", "TEXT/CSS 2d"]).is_err());
        assert!(rules(&["1d", "2d"]).is_err());
        for bad in [
            "text/css",
            "/css 1d",
            "text/c ss 1d",
            "text/css 1x",
            "te xt/css 1d",
        ] {
            assert!(rules(&[bad]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn added_fields_are_checked_at_start() {
        let f: AddedField = " X-Frame-Options :  DENY ".parse().unwrap();
        assert_eq!(&*f.line, b"X-Frame-Options: DENY\r\n");
        assert!(!f.always);
        assert!(f.always().always);
        let ok: AddedField = "Cache-Control: public, immutable".parse().unwrap();
        assert_eq!(&*ok.line, b"Cache-Control: public, immutable\r\n");
        let price: AddedField = "X-Price: $5, 100%".parse().unwrap();
        assert_eq!(&*price.line, b"X-Price: $5, 100%\r\n");
        for vars in [
            "X-Id: $request_id",
            "X-Host: ${host}.example",
            "X-Q: a=$arg_a",
        ] {
            let f: AddedField = vars.parse().unwrap();
            assert!(f.value.is_some(), "{vars}");
        }
        for bad in [
            "X-Id: $nope",
            "X-Host: ${host",
            "X-Frame-Options DENY",
            ": x",
            "Bad Name: x",
            "X-A:",
            "X-A: a\rb",
            "X-A: a\nSet-Cookie: b",
            "content-length: 5",
            "Transfer-Encoding: chunked",
            "Connection: close",
            "ETag: x",
            "Expires: 0",
        ] {
            assert!(bad.parse::<AddedField>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fields_go_on_answers_a_cache_keeps_and_always_ones_on_every_answer() {
        let fields = ResponseFields::new(
            vec!["60".parse().unwrap()],
            vec![
                "X-A: 1".parse().unwrap(),
                "X-B: 2".parse::<AddedField>().unwrap().always(),
            ],
        )
        .unwrap();
        let now = "Mon, 07 Dec 2026 02:15:44 GMT";
        let head = |status: Status| {
            let mut out = b"HTTP/1.1 x\r\nConnection: close\r\n\r\n".to_vec();
            fields.add_to_head(status, secs(now), now, ("text/html", None), &mut out, 0);
            String::from_utf8(out).unwrap()
        };
        let all = "HTTP/1.1 x\r\nConnection: close\r\nExpires: Mon, 07 Dec 2026 02:16:44 GMT\r\n\
                   Cache-Control: max-age=60\r\nX-A: 1\r\nX-B: 2\r\n\r\n";
        for status in [
            Status::Ok,
            Status::PartialContent,
            Status::MovedPermanently,
            Status::NotModified,
        ] {
            assert_eq!(head(status), all, "{status:?}");
        }
        for status in [
            Status::NotFound,
            Status::Forbidden,
            Status::PreconditionFailed,
            Status::RangeNotSatisfiable,
            Status::BadRequest,
            Status::InternalServerError,
        ] {
            assert_eq!(
                head(status),
                "HTTP/1.1 x\r\nConnection: close\r\nX-B: 2\r\n\r\n",
                "{status:?}"
            );
        }
        // After an earlier answer, and before a body of its own.
        let mut out = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 y\r\n\r\nbody\r\n\r\n".to_vec();
        fields.add_to_head(
            Status::NotFound,
            secs(now),
            now,
            ("text/html", None),
            &mut out,
            25,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 y\r\nX-B: 2\r\n\r\nbody\r\n\r\n"
        );
        // Nothing configured: the head is left as it is.
        let mut out = b"HTTP/1.1 x\r\n\r\n".to_vec();
        ResponseFields::default().add_to_head(Status::Ok, 0, now, ("text/html", None), &mut out, 0);
        assert_eq!(out, b"HTTP/1.1 x\r\n\r\n");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_argument_is_taken_or_refused_and_any_time_is_written(
                arg in "(modified )?[-+@]?[0-9 yMwdhms]{0,12}",
                now in any::<u64>(),
                modified in any::<i64>(),
            ) {
                if let Ok(e) = arg.parse::<Expires>() {
                    let t = match modified {
                        m if m >= 0 => UNIX_EPOCH + Duration::from_secs(m as u64),
                        m => UNIX_EPOCH - Duration::from_secs(m.unsigned_abs().min(1 << 40)),
                    };
                    let mut out = Vec::new();
                    e.write(now, "Thu, 01 Jan 1970 00:00:00 GMT", Some(t), &mut out);
                    let text = String::from_utf8(out).unwrap();
                    prop_assert!(text.is_empty() || text.starts_with("Expires: "));
                    prop_assert_eq!(text.matches("\r\n").count(), if text.is_empty() { 0 } else { 2 });
                }
            }
        }
    }
}
