//! [`LimitReq`]: nginx's `limit_req`, requests per client address held to a
//! rate: a leaky bucket per address, `burst` requests of slack; a request
//! over the slack is refused (503 by default, nginx's `limit_req_status`),
//! one within it is delayed until the rate allows it, unless `nodelay`
//! (served at once) or `delay=N` (the first N served at once).
//!
//! The arithmetic is nginx's (`ngx_http_limit_req_lookup`): a bucket holds
//! its excess in thousandths of a request and drains at the rate; a
//! request adds one. The buckets are bounded (`zone=` in MiB, 64 bytes a
//! bucket as nginx counts): a full shard first drops the buckets that have
//! drained (at most once a second), then an arbitrary one, as nginx's zone
//! drops its oldest. Clients over a Unix socket (no address) are not
//! limited, as nginx does not limit an empty key.

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::status::Status;

/// One `--limit-req`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitReqConfig {
    /// Requests a second, in thousandths (nginx's `rate`: `10r/s` is
    /// 10,000, `30r/m` 500).
    pub rate: u64,
    /// Requests of slack, in thousandths.
    pub burst: u64,
    /// Excess (thousandths) served at once; past it a request waits.
    /// `nodelay`: the whole burst.
    pub delay: u64,
    /// The answer to a request over the burst: 503, 429 or 444 (closed
    /// without an answer).
    pub status: Status,
    /// Buckets kept at most.
    pub buckets: usize,
}

impl FromStr for LimitReqConfig {
    type Err = String;

    /// `RATE [burst=N] [nodelay|delay=N] [zone=SIZE] [status=503|429|444]`:
    /// `10r/s`, `30r/m`; SIZE in nginx's units (`10m`, `512k`).
    fn from_str(s: &str) -> Result<LimitReqConfig, String> {
        let mut words = s.split_whitespace();
        let rate = words.next().ok_or("give a rate, e.g. 10r/s")?;
        let (n, scale) = if let Some(n) = rate.strip_suffix("r/s") {
            (n, 1)
        } else if let Some(n) = rate.strip_suffix("r/m") {
            (n, 60)
        } else {
            return Err(format!("invalid rate \"{rate}\" (Nr/s or Nr/m)"));
        };
        let n: u64 = n
            .parse()
            .ok()
            .filter(|&n| n > 0 && n <= 1_000_000)
            .ok_or_else(|| format!("invalid rate \"{rate}\""))?;
        let mut cfg = LimitReqConfig {
            rate: n * 1000 / scale,
            burst: 0,
            delay: 0,
            status: Status::ServiceUnavailable,
            buckets: (10 << 20) / 64,
        };
        if cfg.rate == 0 {
            return Err(format!("invalid rate \"{rate}\" (under one a minute)"));
        }
        let mut nodelay = false;
        let number = |w: &str, v: &str| {
            v.parse::<u64>()
                .ok()
                .filter(|&v| v <= 1_000_000)
                .ok_or_else(|| format!("invalid \"{w}\""))
        };
        for w in words {
            match w.split_once('=') {
                Some(("burst", v)) => cfg.burst = number(w, v)? * 1000,
                Some(("delay", v)) => cfg.delay = number(w, v)? * 1000,
                Some(("zone", v)) => {
                    let bytes = crate::fields::parse_size(v)
                        .filter(|&b| b <= 1 << 34)
                        .ok_or_else(|| format!("invalid \"{w}\""))?;
                    cfg.buckets = (bytes / 64).max(16) as usize;
                }
                Some(("status", "503")) => cfg.status = Status::ServiceUnavailable,
                Some(("status", "429")) => cfg.status = Status::TooManyRequests,
                Some(("status", "444")) => cfg.status = Status::NoResponse,
                None if w == "nodelay" => nodelay = true,
                _ => return Err(format!("invalid parameter \"{w}\"")),
            }
        }
        if nodelay {
            cfg.delay = cfg.burst;
        }
        Ok(cfg)
    }
}

/// What a request may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Served.
    Pass,
    /// Served after this wait.
    Delay(Duration),
    /// Over the burst: refused, with this status.
    Reject(Status),
}

pub(crate) const SHARDS: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Thousandths of a request over the rate.
    excess: u64,
    /// Milliseconds since the limiter's start, when last charged.
    last: u64,
}

#[derive(Debug, Default)]
struct Shard {
    buckets: HashMap<IpAddr, Bucket>,
    /// When the drained buckets were last dropped (ms).
    swept: Option<u64>,
}

/// The limiter: see the [module](self).
#[derive(Debug)]
pub struct LimitReq {
    cfg: LimitReqConfig,
    start: Instant,
    shards: Box<[Mutex<Shard>]>,
}

impl LimitReq {
    /// A limiter with no buckets yet.
    pub fn new(cfg: LimitReqConfig) -> LimitReq {
        LimitReq {
            cfg,
            start: Instant::now(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// The settings it was made with.
    pub fn config(&self) -> &LimitReqConfig {
        &self.cfg
    }

    /// Charges a request of `client` (`None`: not limited) at `now`.
    pub fn check(&self, client: Option<IpAddr>, now: Instant) -> Verdict {
        let Some(ip) = client.map(|ip| ip.to_canonical()) else {
            return Verdict::Pass;
        };
        let cfg = &self.cfg;
        let ms = now.saturating_duration_since(self.start).as_millis() as u64;
        let shard = &self.shards[shard_of(&ip)];
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let per_shard = cfg.buckets.div_ceil(SHARDS).max(1);
        if !shard.buckets.contains_key(&ip) && shard.buckets.len() >= per_shard {
            // Drained buckets answer as absent ones do: dropped first.
            if shard.swept.is_none_or(|t| ms >= t + 1000) {
                let rate = cfg.rate;
                shard.buckets.retain(|_, b| charged(b, rate, ms) > 0);
                shard.swept = Some(ms);
            }
            if shard.buckets.len() >= per_shard {
                let any = *shard.buckets.keys().next().expect("a full shard");
                shard.buckets.remove(&any);
            }
        }
        // nginx: a new client starts with no excess; a known one's drains
        // at the rate, and the request adds one.
        let excess = shard
            .buckets
            .get(&ip)
            .map_or(0, |b| charged(b, cfg.rate, ms));
        if excess > cfg.burst {
            return Verdict::Reject(cfg.status);
        }
        shard.buckets.insert(ip, Bucket { excess, last: ms });
        if excess <= cfg.delay {
            return Verdict::Pass;
        }
        Verdict::Delay(Duration::from_millis(
            (excess - cfg.delay) * 1000 / cfg.rate,
        ))
    }
}

/// Several limiters on one request (nginx's `limit_req` repeated, each
/// with its zone: a burst per second beside a cap per minute, say): over
/// any one's burst it is refused, charged to none; otherwise each charges
/// it, and it waits the longest of their waits.
pub fn check_all(limits: &[LimitReq], client: Option<IpAddr>, now: Instant) -> Verdict {
    if let [one] = limits {
        return one.check(client, now);
    }
    let Some(ip) = client.map(|ip| ip.to_canonical()) else {
        return Verdict::Pass;
    };
    if let Some(over) = limits.iter().find(|l| l.over_burst(ip, now)) {
        return Verdict::Reject(over.cfg.status);
    }
    limits
        .iter()
        .map(|l| l.check(client, now))
        .fold(Verdict::Pass, |longest, v| match (longest, v) {
            (Verdict::Reject(s), _) | (_, Verdict::Reject(s)) => Verdict::Reject(s),
            (Verdict::Delay(a), Verdict::Delay(b)) => Verdict::Delay(a.max(b)),
            (Verdict::Delay(d), Verdict::Pass) | (Verdict::Pass, Verdict::Delay(d)) => {
                Verdict::Delay(d)
            }
            (Verdict::Pass, Verdict::Pass) => Verdict::Pass,
        })
}

impl LimitReq {
    /// Whether a request of `ip` at `now` would be over the burst: looked
    /// at, not charged.
    fn over_burst(&self, ip: IpAddr, now: Instant) -> bool {
        let ms = now.saturating_duration_since(self.start).as_millis() as u64;
        let shard = self.shards[shard_of(&ip)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        shard
            .buckets
            .get(&ip)
            .is_some_and(|b| charged(b, self.cfg.rate, ms) > self.cfg.burst)
    }
}

/// `b`'s excess with one more request at `ms`: nginx's `excess - rate ×
/// ms / 1000 + 1000`, at least 0 (0: as if the client were new).
fn charged(b: &Bucket, rate: u64, ms: u64) -> u64 {
    let elapsed = ms.saturating_sub(b.last);
    (b.excess + 1000).saturating_sub(rate.saturating_mul(elapsed) / 1000)
}

pub(crate) fn shard_of(ip: &IpAddr) -> usize {
    use std::hash::BuildHasher;
    // A keyed hash: a client cannot choose addresses that crowd one shard.
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(Default::default).hash_one(ip) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(s: &str) -> LimitReqConfig {
        s.parse().unwrap()
    }

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn several_limits_refuse_over_any_burst_and_wait_the_longest() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let limits = [
            LimitReq::new(cfg("2r/s burst=1")),
            LimitReq::new(cfg("60r/m burst=5 status=429")),
        ];
        let got: Vec<Verdict> = (0..4).map(|_| check_all(&limits, ip(1), at(0))).collect();
        let ms = |n| Verdict::Delay(Duration::from_millis(n));
        // The second waits 500 ms for the first limit, 1 s for the second.
        assert_eq!(got[..2], [Verdict::Pass, ms(1000)]);
        assert_eq!(got[2], Verdict::Reject(Status::ServiceUnavailable));
        assert_eq!(got[3], Verdict::Reject(Status::ServiceUnavailable));
        // The refusals were charged to neither: 2.1 s on, both have drained.
        assert_eq!(check_all(&limits, ip(1), at(2100)), Verdict::Pass);
        // Over the second's burst only: its status.
        let limits = [
            LimitReq::new(cfg("100r/s burst=10 nodelay")),
            LimitReq::new(cfg("1r/m status=429")),
        ];
        assert_eq!(check_all(&limits, ip(2), at(0)), Verdict::Pass);
        assert_eq!(
            check_all(&limits, ip(2), at(0)),
            Verdict::Reject(Status::TooManyRequests)
        );
        assert_eq!(check_all(&limits, None, at(0)), Verdict::Pass);
    }

    #[test]
    fn parses_nginx_forms() {
        let c = cfg("10r/s");
        assert_eq!((c.rate, c.burst, c.delay), (10_000, 0, 0));
        assert_eq!(c.status, Status::ServiceUnavailable);
        assert_eq!(c.buckets, 163_840, "nginx's 10m zone, 64 bytes a state");
        let c = cfg("30r/m burst=5 nodelay zone=1m status=429");
        assert_eq!((c.rate, c.burst, c.delay), (500, 5000, 5000));
        assert_eq!((c.buckets, c.status), (16_384, Status::TooManyRequests));
        assert_eq!(cfg("1r/s burst=20 delay=8").delay, 8000);
        for bad in [
            "",
            "10",
            "0r/s",
            "10r/h",
            "1r/s burst=x",
            "1r/s status=404",
            "1r/s fast",
        ] {
            assert!(bad.parse::<LimitReqConfig>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bucket_holds_the_rate_and_its_burst() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // Limiters started at t0, so that `at` is exact to the millisecond.
        let new = |s: &str| LimitReq {
            start: t0,
            ..LimitReq::new(cfg(s))
        };
        // 1r/s, no burst: one a second; the other clients are their own.
        let l = new("1r/s");
        assert_eq!(l.check(ip(1), at(0)), Verdict::Pass);
        assert_eq!(
            l.check(ip(1), at(500)),
            Verdict::Reject(Status::ServiceUnavailable)
        );
        assert_eq!(l.check(ip(2), at(500)), Verdict::Pass);
        assert_eq!(l.check(ip(1), at(1000)), Verdict::Pass);
        assert_eq!(
            l.check(None, at(1000)),
            Verdict::Pass,
            "no address, no limit"
        );
        // A refused request does not charge: a second later, served.
        assert_eq!(
            l.check(ip(1), at(1500)),
            Verdict::Reject(Status::ServiceUnavailable)
        );
        assert_eq!(l.check(ip(1), at(2000)), Verdict::Pass);
        // burst=2: two more wait their turn (1 s and 2 s), a fourth is
        // refused; nodelay serves the two at once.
        let l = new("1r/s burst=2");
        let got: Vec<Verdict> = (0..4).map(|_| l.check(ip(1), at(0))).collect();
        let secs = |s| Verdict::Delay(Duration::from_secs(s));
        assert_eq!(
            got,
            [
                Verdict::Pass,
                secs(1),
                secs(2),
                Verdict::Reject(Status::ServiceUnavailable)
            ]
        );
        let l = new("1r/s burst=2 nodelay");
        let got: Vec<Verdict> = (0..4).map(|_| l.check(ip(1), at(0))).collect();
        assert_eq!(
            got,
            [
                Verdict::Pass,
                Verdict::Pass,
                Verdict::Pass,
                Verdict::Reject(Status::ServiceUnavailable)
            ]
        );
        // delay=1: the first over the rate at once, the next waits.
        let l = new("2r/s burst=3 delay=1");
        let got: Vec<Verdict> = (0..4).map(|_| l.check(ip(1), at(0))).collect();
        let ms = |m| Verdict::Delay(Duration::from_millis(m));
        assert_eq!(got, [Verdict::Pass, Verdict::Pass, ms(500), ms(1000)]);
        // An IPv4 client on a dual-stack socket is one bucket either way.
        let l = new("1r/s");
        assert_eq!(l.check(ip(9), at(0)), Verdict::Pass);
        let mapped = Some("::ffff:10.0.0.9".parse().unwrap());
        assert_eq!(
            l.check(mapped, at(10)),
            Verdict::Reject(Status::ServiceUnavailable)
        );
    }

    #[test]
    fn buckets_stay_bounded() {
        let t0 = Instant::now();
        // 16 buckets: one a shard.
        let l = LimitReq::new(cfg("1r/s zone=1k"));
        assert_eq!(l.config().buckets, 16);
        for n in 0..10_000u32 {
            let client = Some(IpAddr::from(n.to_be_bytes()));
            assert_eq!(l.check(client, t0), Verdict::Pass);
        }
        let held: usize = l
            .shards
            .iter()
            .map(|s| s.lock().unwrap().buckets.len())
            .sum();
        assert!(held <= 16, "{held}");
    }
}
