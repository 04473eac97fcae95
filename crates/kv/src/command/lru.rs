//! `lru`: memcached's LRU tuning commands, checked and answered as memcached
//! 1.6 answers them. duality has no hot/warm/cold LRU segments to tune (a
//! shard's items age in one queue, see [`store`](crate::store)), so a valid
//! setting is accepted and changes nothing, as `slabs automove` does: an
//! operator's start-up script that tunes memcached keeps working.
//!
//! | command | answer |
//! |---|---|
//! | `lru tune <hot%> <warm%> <hot factor> <warm factor>` | `OK`; `ERROR hot and warm pcts must not exceed 80`, `ERROR hot/warm age factors must be greater than 0`, or `ERROR` for a number that does not parse |
//! | `lru mode flat\|segmented` | `OK`; another mode `ERROR` |
//! | `lru temp_ttl <seconds>` | `OK`; `ERROR` for a number that does not parse |
//!
//! Any other form is `ERROR`. A last word `noreply` silences every answer,
//! errors included (memcached's `set_noreply_maybe`).

use super::stats::strtoul;
use crate::num::parse_i32;
use crate::protocol::Tokens;

const ERROR: &[u8] = b"ERROR\r\n";

/// Runs `lru <args>`.
pub(super) fn lru(args: Tokens<'_>, out: &mut Vec<u8>) {
    if args.iter().last() == Some(&b"noreply"[..]) {
        return;
    }
    let words: Vec<&[u8]> = args.iter().take(5).collect();
    let reply: &[u8] = match words.as_slice() {
        [b"tune", hot, warm, hot_factor, warm_factor, ..] => {
            tune(hot, warm, hot_factor, warm_factor)
        }
        [b"mode", b"flat" | b"segmented", ..] => b"OK\r\n",
        [b"temp_ttl", ttl, ..] if parse_i32(ttl).is_some() => b"OK\r\n",
        _ => ERROR,
    };
    out.extend_from_slice(reply);
}

fn tune(hot: &[u8], warm: &[u8], hot_factor: &[u8], warm_factor: &[u8]) -> &'static [u8] {
    let factor = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<f64>().ok();
    let (Some(hot), Some(warm), Some(hot_factor), Some(warm_factor)) = (
        strtoul(hot),
        strtoul(warm),
        factor(hot_factor),
        factor(warm_factor),
    ) else {
        return ERROR;
    };
    if u64::from(hot) + u64::from(warm) > 80 {
        b"ERROR hot and warm pcts must not exceed 80\r\n"
    } else if hot_factor <= 0.0 || warm_factor <= 0.0 {
        b"ERROR hot/warm age factors must be greater than 0\r\n"
    } else {
        b"OK\r\n"
    }
}
