//! `slabs`: memcached's page-mover commands, answered as memcached 1.6
//! answers them when no class has a page to spare (duality has no slab
//! pages: items are charged by size, see [`classes`](crate::store::classes)).
//!
//! | command | answer |
//! |---|---|
//! | `slabs reassign <src> <dst>` | `SAME` when equal, `BADCLASS` outside 0..=39 (or `src` -1: "any class", none has a spare page), else `NOSPARE` |
//! | `slabs automove 0\|1\|2 [noreply]` | `OK` (nothing moves); another level `ERROR` |
//! | `slabs automove ratio <ratio> [noreply]` | `OK` |
//!
//! Any other form is `ERROR`, a number that does not parse a bad command
//! line, as in memcached.

use crate::num::{parse_i32, parse_u32};
use crate::protocol::Tokens;
use crate::store::classes::CLASSES;

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const ERROR: &[u8] = b"ERROR\r\n";

/// Runs `slabs <args>`.
pub(super) fn slabs(args: Tokens<'_>, out: &mut Vec<u8>) {
    let words: Vec<&[u8]> = args.iter().take(4).collect();
    let reply: &[u8] = match words.as_slice() {
        [b"reassign", src, dst] => reassign(src, dst),
        [b"automove", arg, rest @ ..] => {
            // memcached's `noreply` is the line's last word.
            if args.iter().last() == Some(&b"noreply"[..]) {
                return;
            }
            automove(arg, rest.first().copied())
        }
        _ => ERROR,
    };
    out.extend_from_slice(reply);
}

fn reassign(src: &[u8], dst: &[u8]) -> &'static [u8] {
    let (Some(src), Some(dst)) = (parse_i32(src), parse_i32(dst)) else {
        return BAD_FORMAT;
    };
    // Class 0 is memcached's global page pool; -1 asks it to pick a source
    // with a spare page, and there is none.
    let class = 0..=CLASSES as i32;
    if src == dst {
        b"SAME src and dst class are identical\r\n"
    } else if !class.contains(&src) || !class.contains(&dst) {
        b"BADCLASS invalid src or dst class id\r\n"
    } else {
        b"NOSPARE source class has no spare pages\r\n"
    }
}

fn automove(arg: &[u8], ratio: Option<&[u8]>) -> &'static [u8] {
    if arg == b"ratio" {
        let ratio = ratio
            .and_then(|r| std::str::from_utf8(r).ok())
            .and_then(|r| r.parse::<f64>().ok());
        return if ratio.is_some() { b"OK\r\n" } else { ERROR };
    }
    match parse_u32(arg) {
        None => BAD_FORMAT,
        Some(0..=2) => b"OK\r\n",
        Some(_) => ERROR,
    }
}
