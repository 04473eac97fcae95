//! [`RealIp`]: nginx's realip module, for a server behind a proxy: the
//! client's address as a trusted proxy reports it (`X-Real-IP`,
//! `X-Forwarded-For`, or any field named) instead of the proxy's own,
//! in the access log (the one place the server writes a client's
//! address).
//!
//! As nginx's: only a connection from a trusted address (`--real-ip-from`:
//! an address, a network, or `unix:` for a Unix socket) is believed; the field's
//! last address is taken, or with `--real-ip-recursive on` the last one
//! that is not itself a trusted proxy, walking from the right. A field
//! whose address does not parse leaves the connection's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use crate::request::Head;

/// One `--real-ip-from`: addresses whose word about the client is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trusted {
    /// Connections over a Unix socket (nginx's `unix:`).
    Unix,
    /// Addresses of a network: its first address (low bits cleared) and
    /// prefix length.
    Net(IpAddr, u8),
}

impl Trusted {
    /// Whether `ip` (`None`: a Unix socket's client) is one of these.
    pub fn contains(&self, ip: Option<IpAddr>) -> bool {
        match (self, ip.map(|ip| ip.to_canonical())) {
            (Trusted::Unix, None) => true,
            (Trusted::Net(net, bits), Some(ip)) => masked(ip, *bits) == Some(*net),
            _ => false,
        }
    }
}

/// `ip` with all but its first `bits` bits cleared (`None`: more bits
/// than it has).
fn masked(ip: IpAddr, bits: u8) -> Option<IpAddr> {
    // A shift by the whole width (0 bits kept) is `None`: keep nothing.
    match ip {
        IpAddr::V4(v4) => (bits <= 32).then(|| {
            let keep = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & keep))
        }),
        IpAddr::V6(v6) => (bits <= 128).then(|| {
            let keep = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & keep))
        }),
    }
}

impl FromStr for Trusted {
    type Err = String;

    /// nginx's `set_real_ip_from`: `ADDRESS`, `ADDRESS/BITS` (low bits of
    /// the address are ignored, as nginx does after a warning; `0.0.0.0/0`
    /// for every IPv4 address) or `unix:`.
    fn from_str(s: &str) -> Result<Trusted, String> {
        let s = s.trim();
        if s == "unix:" {
            return Ok(Trusted::Unix);
        }
        let (addr, bits) = match s.split_once('/') {
            Some((addr, bits)) => (addr, Some(bits)),
            None => (s, None),
        };
        let ip: IpAddr = addr.parse().map_err(|_| {
            format!("{addr:?} is not an IP address (give ADDRESS, ADDRESS/BITS or unix:; names are not resolved)")
        })?;
        let ip = ip.to_canonical();
        let most = if ip.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => most,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|&b| b <= most)
                .ok_or_else(|| format!("{b:?}: a prefix length from 0 to {most}"))?,
        };
        Ok(Trusted::Net(masked(ip, bits).unwrap_or(ip), bits))
    }
}

/// The `real_ip_header` that takes the client from the connection's PROXY
/// protocol header (`--proxy-protocol`), not from a field.
pub const PROXY_PROTOCOL: &str = "proxy_protocol";

/// nginx's realip settings: whose word is taken, which field says it, and
/// whether trusted proxies listed in it are skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealIp {
    /// Trusted addresses (`set_real_ip_from`); none: the connection's
    /// address is always the client's.
    pub from: Vec<Trusted>,
    /// The field (`real_ip_header`): `X-Real-IP` by default, as nginx.
    pub header: String,
    /// Skip trusted addresses from the right (`real_ip_recursive on`).
    pub recursive: bool,
}

impl Default for RealIp {
    fn default() -> RealIp {
        RealIp {
            from: Vec::new(),
            header: "X-Real-IP".to_owned(),
            recursive: false,
        }
    }
}

impl RealIp {
    /// Whether a connection from `peer` (`None`: a Unix socket) is a
    /// trusted proxy's.
    pub fn trusts(&self, peer: Option<IpAddr>) -> bool {
        self.from.iter().any(|t| t.contains(peer))
    }

    /// The client's address by `head`'s field, for a request that came
    /// from a trusted proxy (`None`: no such field, or none that parses;
    /// the connection's address stands).
    pub fn client(&self, head: &Head<'_>) -> Option<IpAddr> {
        // Every X-Forwarded-For line, as one list; of another field, the
        // first (as nginx).
        let xff = self.header.eq_ignore_ascii_case("X-Forwarded-For");
        let lines: Vec<&[u8]> = match xff {
            true => head.field_values(&self.header).collect(),
            false => head.field_values(&self.header).take(1).collect(),
        };
        let mut found = None;
        for line in lines.into_iter().rev() {
            let mut rest = line;
            loop {
                let end = rest
                    .iter()
                    .rposition(|&b| b != b' ' && b != b',')
                    .map_or(0, |i| i + 1);
                let start = rest[..end]
                    .iter()
                    .rposition(|&b| b == b' ' || b == b',')
                    .map_or(0, |i| i + 1);
                let Some(ip) = address(&rest[start..end]) else {
                    return found;
                };
                found = Some(ip);
                if !self.recursive || !self.trusts(Some(ip)) {
                    return found;
                }
                if start == 0 {
                    break;
                }
                rest = &rest[..start];
            }
        }
        found
    }
}

/// An address as proxies write them: `1.2.3.4`, `::1`, and with a port
/// `1.2.3.4:80` or `[::1]:80`.
fn address(text: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(text).ok()?;
    text.parse::<IpAddr>()
        .or_else(|_| text.parse::<SocketAddr>().map(|a| a.ip()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{parse_head, Limits};

    fn trusted(list: &[&str]) -> Vec<Trusted> {
        list.iter().map(|t| t.parse().unwrap()).collect()
    }

    /// The client `real` names in a request with `fields`.
    fn client(real: &RealIp, fields: &str) -> Option<String> {
        let text = format!("GET / HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
        let (head, _) = parse_head(text.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        real.client(&head).map(|ip| ip.to_string())
    }

    #[test]
    fn trusted_addresses_as_nginx_reads_them() {
        let t = |s: &str| s.parse::<Trusted>();
        assert_eq!(t("unix:"), Ok(Trusted::Unix));
        assert_eq!(
            t("10.1.2.3/8"),
            Ok(Trusted::Net("10.0.0.0".parse().unwrap(), 8))
        );
        assert_eq!(t("::1"), Ok(Trusted::Net("::1".parse().unwrap(), 128)));
        assert_eq!(
            t("2001:db8::/32"),
            Ok(Trusted::Net("2001:db8::".parse().unwrap(), 32))
        );
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "host.example",
            "10.0.0.0/x",
            "unix",
            "all",
            "[::1]",
        ] {
            assert!(t(bad).is_err(), "{bad:?}");
        }
        let real = RealIp {
            from: trusted(&["10.0.0.0/8", "::1", "unix:", "2001:db8::/32"]),
            ..RealIp::default()
        };
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert!(real.trusts(ip("10.255.0.1")));
        assert!(real.trusts(ip("::ffff:10.0.0.1")), "a mapped IPv4 address");
        assert!(real.trusts(ip("::1")));
        assert!(real.trusts(ip("2001:db8:ffff::1")));
        assert!(real.trusts(None), "a Unix socket");
        assert!(!real.trusts(ip("11.0.0.1")));
        assert!(!real.trusts(ip("127.0.0.1")));
        assert!(!RealIp::default().trusts(None));
        let any = RealIp {
            from: trusted(&["0.0.0.0/0"]),
            ..RealIp::default()
        };
        assert!(any.trusts(ip("1.2.3.4")));
        assert!(!any.trusts(ip("2001:db8::1")));
        assert!(!any.trusts(None), "every IPv4 address, not a Unix socket");
    }

    #[test]
    fn the_client_as_nginx_finds_it() {
        // nginx 1.22.1 here, `set_real_ip_from 127.0.0.1, 10.0.0.0/8, ::1;
        // real_ip_header X-Forwarded-For; real_ip_recursive on`, from
        // 127.0.0.1, logged the same `$remote_addr` for each (`None`:
        // 127.0.0.1 itself).
        let real = RealIp {
            from: trusted(&["127.0.0.1", "10.0.0.0/8", "::1"]),
            header: "X-Forwarded-For".to_owned(),
            recursive: true,
        };
        for (xff, want) in [
            ("1.2.3.4", Some("1.2.3.4")),
            ("1.2.3.4, 10.0.0.1", Some("1.2.3.4")),
            ("5.6.7.8, 1.2.3.4, 10.0.0.1, 127.0.0.1", Some("1.2.3.4")),
            ("10.0.0.2, 10.0.0.1", Some("10.0.0.2")),
            ("1.2.3.4:8080", Some("1.2.3.4")),
            ("[2001:db8::1]:80, 10.1.1.1", Some("2001:db8::1")),
            ("2001:db8::2", Some("2001:db8::2")),
            ("garbage, 10.0.0.1", Some("10.0.0.1")),
            ("1.2.3.4, garbage", None),
            (", , ", None),
            ("::ffff:1.2.3.4", Some("::ffff:1.2.3.4")),
            ("1.2.3.4,10.0.0.5", Some("1.2.3.4")),
            ("1.2.3.4 10.0.0.5", Some("1.2.3.4")),
        ] {
            let fields = format!("X-Forwarded-For: {xff}\r\n");
            assert_eq!(client(&real, &fields).as_deref(), want, "{xff:?}");
        }
        // Several lines are one list, the last line last.
        let two = "X-Forwarded-For: 9.9.9.9\r\nx-forwarded-for: 10.0.0.3\r\n";
        assert_eq!(client(&real, two).as_deref(), Some("9.9.9.9"));
        // Not recursive: the last address, trusted or not.
        let last = RealIp {
            recursive: false,
            ..real.clone()
        };
        assert_eq!(
            client(&last, "X-Forwarded-For: 1.2.3.4, 10.0.0.1\r\n").as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(client(&last, two).as_deref(), Some("10.0.0.3"));
        // X-Real-IP by default; another field, its first line only.
        let xri = RealIp {
            from: trusted(&["unix:"]),
            ..RealIp::default()
        };
        assert_eq!(
            client(&xri, "X-Real-IP: 203.0.113.7\r\n").as_deref(),
            Some("203.0.113.7")
        );
        assert_eq!(client(&xri, "X-Forwarded-For: 203.0.113.7\r\n"), None);
        let cf = RealIp {
            header: "CF-Connecting-IP".to_owned(),
            ..xri
        };
        let lines = "cf-connecting-ip: 198.51.100.1\r\nCF-Connecting-IP: 198.51.100.2\r\n";
        assert_eq!(client(&cf, lines).as_deref(), Some("198.51.100.1"));
        assert_eq!(client(&cf, ""), None);
    }
}
