//! [`Request::encode`]: the client side of the protocol, used to property-test
//! the parser by round trip and by load generators.

use super::{ArithOp, FlushDelay, Request, Tokens};
use crate::num::{push_i64, push_u64};

fn push_tokens(out: &mut Vec<u8>, tokens: Tokens<'_>) {
    for t in tokens.iter() {
        out.push(b' ');
        out.extend_from_slice(t);
    }
}

fn push_noreply(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
}

impl Request<'_> {
    /// Appends the request in wire format (canonical spacing, `\r\n` line
    /// ends). [`super::parse`] of the output yields an equal request.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Request::Get { keys, cas } => {
                out.extend_from_slice(if cas { b"gets" } else { b"get" });
                push_tokens(out, keys);
            }
            Request::GetAndTouch { exptime, keys, cas } => {
                out.extend_from_slice(if cas { b"gats " } else { b"gat " });
                push_i64(out, exptime.into());
                push_tokens(out, keys);
            }
            Request::Store {
                command,
                key,
                flags,
                exptime,
                value,
                cas_unique,
                noreply,
            } => {
                out.extend_from_slice(command.name().as_bytes());
                out.push(b' ');
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, flags.into());
                out.push(b' ');
                push_i64(out, exptime.into());
                out.push(b' ');
                push_u64(out, value.len() as u64);
                if command == super::StoreCommand::Cas {
                    out.push(b' ');
                    push_u64(out, cas_unique);
                }
                push_noreply(out, noreply);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
            }
            Request::Delete { key, noreply } => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
                push_noreply(out, noreply);
            }
            Request::Arith {
                op,
                key,
                delta,
                noreply,
            } => {
                out.extend_from_slice(match op {
                    ArithOp::Incr => b"incr ",
                    ArithOp::Decr => b"decr ",
                });
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, delta);
                push_noreply(out, noreply);
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                out.extend_from_slice(b"touch ");
                out.extend_from_slice(key);
                out.push(b' ');
                push_i64(out, exptime.into());
                push_noreply(out, noreply);
            }
            Request::FlushAll { delay, noreply } => {
                out.extend_from_slice(b"flush_all");
                match delay {
                    FlushDelay::Now => {}
                    FlushDelay::After(d) => {
                        out.push(b' ');
                        push_i64(out, d.into());
                    }
                    // Parses back as itself.
                    FlushDelay::Invalid => out.extend_from_slice(b" x"),
                }
                push_noreply(out, noreply);
            }
            Request::Version => out.extend_from_slice(b"version"),
            Request::Verbosity { level, noreply } => {
                out.extend_from_slice(b"verbosity ");
                push_u64(out, level.into());
                push_noreply(out, noreply);
            }
            Request::Stats { args } => {
                out.extend_from_slice(b"stats");
                push_tokens(out, args);
            }
            Request::LruCrawler { args } => {
                out.extend_from_slice(b"lru_crawler");
                push_tokens(out, args);
            }
            Request::Slabs { args } => {
                out.extend_from_slice(b"slabs");
                push_tokens(out, args);
            }
            Request::Lru { args } => {
                out.extend_from_slice(b"lru");
                push_tokens(out, args);
            }
            Request::Watch { args } => {
                out.extend_from_slice(b"watch");
                push_tokens(out, args);
            }
            Request::Shutdown { args } => {
                out.extend_from_slice(b"shutdown");
                push_tokens(out, args);
            }
            Request::CacheMemlimit { mib, noreply } => {
                out.extend_from_slice(b"cache_memlimit ");
                match mib {
                    Some(m) => push_u64(out, m.into()),
                    // Any non-number parses back as `None`.
                    None => out.push(b'x'),
                }
                push_noreply(out, noreply);
            }
            Request::Quit => out.extend_from_slice(b"quit"),
            Request::MetaGet { key, flags } => {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(key);
                flags.encode(out);
            }
            Request::MetaSet { key, value, flags } => {
                out.extend_from_slice(b"ms ");
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, value.len() as u64);
                flags.encode(out);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
            }
            Request::MetaDelete { key, flags } => {
                out.extend_from_slice(b"md ");
                out.extend_from_slice(key);
                flags.encode(out);
            }
            Request::MetaArith { key, flags } => {
                out.extend_from_slice(b"ma ");
                out.extend_from_slice(key);
                flags.encode(out);
            }
            Request::MetaNoop => out.extend_from_slice(b"mn"),
            Request::MetaDebug { key, base64 } => {
                out.extend_from_slice(b"me ");
                out.extend_from_slice(key);
                if base64 {
                    out.extend_from_slice(b" b");
                }
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}
