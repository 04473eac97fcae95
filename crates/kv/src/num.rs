//! Decimal numbers in and out, without `fmt` or allocation: the hot paths
//! (`VALUE` lines, meta flags) write numbers into the output buffer directly.

/// Formats `v` in decimal into `buf`, returning the digits.
#[inline]
pub(crate) fn fmt_u64(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Appends `v` in decimal.
#[inline]
pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(fmt_u64(v, &mut [0u8; 20]));
}

/// Appends `v` in decimal, with a leading `-` when negative.
#[inline]
pub(crate) fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

/// Parses an unsigned decimal: an optional `+`, then digits only (C's
/// `strtoull` as memcached's `safe_strtoull` takes it, without wrapping).
/// White space is taken as memcached's `safe_strtoull` takes it: skipped
/// before the number, and ending it (whatever follows is ignored): tokens
/// split on spaces only, so a tab or a second CR after a number reaches the
/// parser (`set k 0 0 1\t`).
pub(crate) fn parse_u64(t: &[u8]) -> Option<u64> {
    let t = number_part(t);
    let t = t.strip_prefix(b"+").unwrap_or(t);
    parse_digits(t)
}

/// `t` without leading white space, up to the white space that ends it.
fn number_part(t: &[u8]) -> &[u8] {
    let start = t.iter().position(|&c| !is_c_space(c)).unwrap_or(t.len());
    let t = &t[start..];
    let end = t.iter().position(|&c| is_c_space(c)).unwrap_or(t.len());
    &t[..end]
}

fn parse_digits(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in t {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Parses an unsigned 32-bit decimal of digits only.
pub(crate) fn parse_u32(t: &[u8]) -> Option<u32> {
    parse_u64(t).and_then(|v| u32::try_from(v).ok())
}

/// Parses a signed 32-bit decimal: an optional `-` or `+`, then digits only
/// (white space taken as by [`parse_u64`]). Values that do not
/// fit are refused (memcached wraps them to 32 bits).
pub(crate) fn parse_i32(t: &[u8]) -> Option<i32> {
    match number_part(t) {
        [b'-', rest @ ..] => {
            let v = parse_digits(rest)?;
            i32::try_from(-i64::try_from(v).ok()?).ok()
        }
        _ => i32::try_from(parse_u64(t)?).ok(),
    }
}

/// Parses a stored value as `incr`/`decr` do (C's `strtoull` as memcached
/// uses it): optional leading whitespace, an optional `+`, digits, then the
/// end, whitespace or a NUL (the end of memcached's C string; anything
/// after that is ignored). No sign, no overflow.
pub(crate) fn parse_counter(v: &[u8]) -> Option<u64> {
    let start = v.iter().position(|c| !is_c_space(*c))?;
    let mut s = &v[start..];
    if let [b'+', rest @ ..] = s {
        s = rest;
    }
    let end = s
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    if end == 0 || (end < s.len() && !is_c_space(s[end]) && s[end] != 0) {
        return None;
    }
    let mut n: u64 = 0;
    for &c in &s[..end] {
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(n)
}

fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        // memcached reads numbers with strtol/strtoul: a `+` is taken.
        assert_eq!(parse_u64(b"+1"), Some(1));
        assert_eq!(parse_u64(b"+"), None);
        assert_eq!(parse_u64(b"++1"), None);
        assert_eq!(parse_i32(b"+7"), Some(7));
        assert_eq!(parse_i32(b"-+7"), None);
        assert_eq!(parse_u64(b"1a"), None);
        // White space as memcached's safe_strtoull takes it: skipped
        // before, ending the number after (the rest ignored).
        assert_eq!(parse_u64(b"1\t"), Some(1));
        assert_eq!(parse_u64(b"\t+1\r"), Some(1));
        assert_eq!(parse_i32(b"-7\x0b"), Some(-7));
        assert_eq!(parse_u64(b"1\t2x"), Some(1));
        assert_eq!(parse_u64(b"1x\t"), None);
        assert_eq!(parse_u64(b"\t"), None);
        assert_eq!(parse_i32(b"-\t7"), None);
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i32(b"-"), None);
        assert_eq!(parse_i32(b"--1"), None);
    }

    #[test]
    fn counters() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"  42"), Some(42));
        assert_eq!(parse_counter(b"+42"), Some(42));
        assert_eq!(parse_counter(b"42  "), Some(42));
        assert_eq!(parse_counter(b"42 junk"), Some(42));
        assert_eq!(parse_counter(b"42junk"), None);
        // memcached's value is a C string: a NUL ends the number.
        assert_eq!(parse_counter(b"1\0"), Some(1));
        assert_eq!(parse_counter(b"7\0junk"), Some(7));
        assert_eq!(parse_counter(b"\0"), None);
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"abc"), None);
        assert_eq!(parse_counter(b"18446744073709551616"), None);
    }

    proptest! {
        #[test]
        fn push_round_trips(v in any::<u64>(), w in any::<i64>()) {
            let mut out = Vec::new();
            push_u64(&mut out, v);
            prop_assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
            let mut out = Vec::new();
            push_i64(&mut out, w);
            prop_assert_eq!(String::from_utf8(out).unwrap(), w.to_string());
        }
    }
}
