//! [`LimitConn`]: nginx's `limit_conn` keyed by `$binary_remote_addr`, the
//! connections of one client address that may have a request in progress at
//! once (a download being sent counts; a keep-alive connection waiting for
//! its next request does not, as in nginx, whose count is held by the
//! request). A request over the limit is refused (503 by default, nginx's
//! `limit_conn_status`).
//!
//! A request that passes takes a [`ConnSlot`] for its connection, given
//! back when the connection has written every answer it has (or closes):
//! pipelined requests on one connection share its slot. The counts live in
//! keyed-hash shards, an address only while it holds a slot, so their
//! memory is bounded by the connections. Clients over a Unix socket (no
//! address) are not limited, as nginx does not limit an empty key.

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use crate::status::Status;

/// One `--limit-conn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConnConfig {
    /// Connections of one address with a request in progress, at most.
    pub max: u32,
    /// The answer to a request over it: 503, 429 or 444 (closed without
    /// an answer).
    pub status: Status,
}

impl FromStr for LimitConnConfig {
    type Err = String;

    /// `N [status=503|429|444]`.
    fn from_str(s: &str) -> Result<LimitConnConfig, String> {
        let mut words = s.split_whitespace();
        let n = words
            .next()
            .ok_or("give a number of connections, e.g. 10")?;
        let max = n
            .parse::<u32>()
            .ok()
            .filter(|&n| (1..=65_535).contains(&n))
            .ok_or_else(|| format!("invalid number of connections \"{n}\" (1 to 65535)"))?;
        let mut cfg = LimitConnConfig {
            max,
            status: Status::ServiceUnavailable,
        };
        for w in words {
            match w.split_once('=') {
                Some(("status", "503")) => cfg.status = Status::ServiceUnavailable,
                Some(("status", "429")) => cfg.status = Status::TooManyRequests,
                Some(("status", "444")) => cfg.status = Status::NoResponse,
                _ => return Err(format!("invalid parameter \"{w}\"")),
            }
        }
        Ok(cfg)
    }
}

/// The counts: see the [module](self).
#[derive(Debug)]
pub struct LimitConn {
    cfg: LimitConnConfig,
    shards: Box<[Mutex<HashMap<IpAddr, u32>>]>,
}

/// A connection's place in its address's count, given back when dropped.
#[derive(Debug)]
pub struct ConnSlot {
    limit: Arc<LimitConn>,
    ip: IpAddr,
}

impl LimitConn {
    /// Counts with no address in them.
    pub fn new(cfg: LimitConnConfig) -> LimitConn {
        LimitConn {
            cfg,
            shards: (0..crate::limit_req::SHARDS)
                .map(|_| Mutex::default())
                .collect(),
        }
    }

    /// The settings it was made with.
    pub fn config(&self) -> &LimitConnConfig {
        &self.cfg
    }

    /// Takes a slot for a connection of `client` (`None`: not limited, no
    /// slot); `Err` with the refusal's status when its address has as many
    /// as the limit allows.
    pub fn acquire(self: &Arc<Self>, client: Option<IpAddr>) -> Result<Option<ConnSlot>, Status> {
        let Some(ip) = client.map(|ip| ip.to_canonical()) else {
            return Ok(None);
        };
        let mut shard = self.shard(&ip);
        let n = shard.entry(ip).or_insert(0);
        if *n >= self.cfg.max {
            return Err(self.cfg.status);
        }
        *n += 1;
        Ok(Some(ConnSlot {
            limit: self.clone(),
            ip,
        }))
    }

    /// Slots `client`'s address holds now.
    pub fn held(&self, client: IpAddr) -> u32 {
        let ip = client.to_canonical();
        self.shard(&ip).get(&ip).copied().unwrap_or(0)
    }

    fn shard(&self, ip: &IpAddr) -> std::sync::MutexGuard<'_, HashMap<IpAddr, u32>> {
        self.shards[crate::limit_req::shard_of(ip)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut shard = self.limit.shard(&self.ip);
        if let Some(n) = shard.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                shard.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn parses_nginx_forms() {
        let c: LimitConnConfig = "2".parse().unwrap();
        assert_eq!((c.max, c.status), (2, Status::ServiceUnavailable));
        let c: LimitConnConfig = "1 status=429".parse().unwrap();
        assert_eq!((c.max, c.status), (1, Status::TooManyRequests));
        for bad in ["", "0", "x", "70000", "2 status=404", "2 zone=1m"] {
            assert!(bad.parse::<LimitConnConfig>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slots_are_counted_per_address_and_given_back() {
        let limit = Arc::new(LimitConn::new("2".parse().unwrap()));
        let a = limit.acquire(ip(1)).unwrap().unwrap();
        let b = limit.acquire(ip(1)).unwrap().unwrap();
        assert!(limit.acquire(ip(1)).is_err(), "a third of one address");
        let other = limit.acquire(ip(2)).unwrap().unwrap();
        // An IPv4 address mapped into IPv6 is the same client.
        let mapped = Some(IpAddr::from([0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001]));
        assert!(limit.acquire(mapped).is_err());
        assert_eq!(limit.held(ip(1).unwrap()), 2);
        drop(a);
        let c = limit.acquire(ip(1)).unwrap().unwrap();
        drop((b, c, other));
        assert_eq!(limit.held(ip(1).unwrap()), 0);
        assert!(limit.shards.iter().all(|s| s.lock().unwrap().is_empty()));
        assert!(limit.acquire(None).unwrap().is_none(), "a Unix socket");
    }
}
