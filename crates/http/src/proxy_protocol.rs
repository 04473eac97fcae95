//! The PROXY protocol header (HAProxy's specification, versions 1 and 2),
//! nginx's `listen … proxy_protocol`: a load balancer that passes TCP
//! through (HAProxy, AWS's NLB, …) sends it before the client's bytes, naming
//! the client's address and the address it was connected to.
//!
//! [`parse`] is a pure function over the bytes at the start of a connection:
//! a whole header and its length, "need more", or an error (the connection
//! then closes, as nginx's does on a broken header). Version 1 is a text
//! line of at most 107 bytes (`PROXY TCP4 192.0.2.1 198.51.100.2 51234
//! 443\r\n`, or `PROXY UNKNOWN …\r\n`); version 2 a 16-byte binary head and
//! its addresses and TLVs, which are skipped. A `LOCAL` command, an
//! `UNKNOWN` or `UNSPEC` protocol and Unix addresses carry no addresses:
//! the connection's own stand.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Version 2's signature, its first 12 bytes.
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The longest version 1 line, its line end included.
pub const V1_MAX: usize = 107;

/// The longest version 2 header taken (its 16-byte head and what its
/// length field names): the addresses and some TLVs; a longer one is
/// refused, so a header never holds more than this of a connection's buffer.
pub const V2_MAX: usize = 4096;

/// What a header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The client's address and port (`$proxy_protocol_addr`, `_port`).
    pub source: Option<SocketAddr>,
    /// The address and port the client connected to
    /// (`$proxy_protocol_server_addr`, `_port`).
    pub destination: Option<SocketAddr>,
}

/// Finds a PROXY header at the start of `input`: `Ok(Some((header,
/// length)))`, `Ok(None)` while what came may still become one, `Err` with
/// why it cannot.
pub fn parse(input: &[u8]) -> Result<Option<(ProxyHeader, usize)>, &'static str> {
    if input.is_empty() {
        return Ok(None);
    }
    if input[0] == b'P' {
        return v1(input);
    }
    let sig = input.len().min(V2_SIGNATURE.len());
    if input[..sig] != V2_SIGNATURE[..sig] {
        return Err("no PROXY header");
    }
    v2(input)
}

const NONE: ProxyHeader = ProxyHeader {
    source: None,
    destination: None,
};

fn v1(input: &[u8]) -> Result<Option<(ProxyHeader, usize)>, &'static str> {
    let start = input.len().min(6);
    if input[..start] != b"PROXY "[..start] {
        return Err("no PROXY header");
    }
    let window = &input[..input.len().min(V1_MAX)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return match input.len() >= V1_MAX || window.contains(&b'\n') {
            true => Err("a PROXY line without its end in 107 bytes"),
            false => Ok(None),
        };
    };
    // A bare CR or LF inside is no line of the protocol (and refusing it
    // keeps a refusal final: no later byte makes it a header).
    let line = std::str::from_utf8(&input[6..end])
        .ok()
        .filter(|l| !l.contains(['\r', '\n']))
        .ok_or("a PROXY line that is not one line of text")?;
    let mut words = line.split(' ');
    let proto = words.next().unwrap_or_default();
    if proto == "UNKNOWN" {
        // The rest of the line says nothing the server may use.
        return Ok(Some((NONE, end + 2)));
    }
    let six = match proto {
        "TCP4" => false,
        "TCP6" => true,
        _ => return Err("a PROXY line with an unknown protocol"),
    };
    let fields: Vec<&str> = words.collect();
    let [src, dst, sport, dport] = fields[..] else {
        return Err("a PROXY line without four addresses and ports");
    };
    let ip = |s: &str| -> Result<IpAddr, &'static str> {
        let ip: IpAddr = s.parse().map_err(|_| "a PROXY line with a bad address")?;
        match ip.is_ipv6() == six {
            true => Ok(ip),
            false => Err("a PROXY line whose address is not of its protocol"),
        }
    };
    let port = |s: &str| -> Result<u16, &'static str> {
        match s.len() <= 5 && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            true => s.parse().map_err(|_| "a PROXY line with a bad port"),
            false => Err("a PROXY line with a bad port"),
        }
    };
    let header = ProxyHeader {
        source: Some(SocketAddr::new(ip(src)?, port(sport)?)),
        destination: Some(SocketAddr::new(ip(dst)?, port(dport)?)),
    };
    Ok(Some((header, end + 2)))
}

fn v2(input: &[u8]) -> Result<Option<(ProxyHeader, usize)>, &'static str> {
    if input.len() < 16 {
        return Ok(None);
    }
    let (version, command) = (input[12] >> 4, input[12] & 0x0f);
    if version != 2 {
        return Err("a PROXY v2 header of another version");
    }
    let len = 16 + usize::from(u16::from_be_bytes([input[14], input[15]]));
    if len > V2_MAX {
        return Err("a PROXY v2 header longer than 4096 bytes");
    }
    let Some(body) = input.get(16..len) else {
        return Ok(None);
    };
    let header = match (command, input[13] >> 4) {
        // LOCAL: the proxy's own connection (a health check).
        (0, _) => NONE,
        (1, 1) => {
            let a = body
                .get(..12)
                .ok_or("a PROXY v2 header too short for IPv4")?;
            let ip = |i: usize| IpAddr::from(Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
            let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
            ProxyHeader {
                source: Some(SocketAddr::new(ip(0), port(8))),
                destination: Some(SocketAddr::new(ip(4), port(10))),
            }
        }
        (1, 2) => {
            let a = body
                .get(..36)
                .ok_or("a PROXY v2 header too short for IPv6")?;
            let ip = |i: usize| {
                let octets: [u8; 16] = a[i..i + 16].try_into().expect("16 bytes");
                IpAddr::from(Ipv6Addr::from(octets))
            };
            let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
            ProxyHeader {
                source: Some(SocketAddr::new(ip(0), port(32))),
                destination: Some(SocketAddr::new(ip(16), port(34))),
            }
        }
        // UNSPEC or Unix addresses: none the server can use.
        (1, _) => NONE,
        _ => return Err("a PROXY v2 header with an unknown command"),
    };
    Ok(Some((header, len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn reads_version_1() {
        let line = b"PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\nGET / HTTP/1.1\r\n";
        let (h, n) = parse(line).unwrap().unwrap();
        assert_eq!(n, 45);
        assert_eq!(h.source, addr("192.0.2.1:51234"));
        assert_eq!(h.destination, addr("198.51.100.2:443"));
        let (h, _) = parse(b"PROXY TCP6 2001:db8::1 ::1 1 65535\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.source, addr("[2001:db8::1]:1"));
        assert_eq!(
            parse(b"PROXY UNKNOWN whatever\r\n").unwrap(),
            Some((NONE, 24))
        );
        assert_eq!(parse(b"PROXY UNKNOWN\r\n").unwrap(), Some((NONE, 15)));
        // Still coming.
        for part in [
            &b"P"[..],
            b"PROX",
            b"PROXY TCP4 192.0.2.1 19",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\r",
        ] {
            assert_eq!(parse(part), Ok(None), "{:?}", String::from_utf8_lossy(part));
        }
        for bad in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXI TCP4",
            b"PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",
            b"PROXY TCP4 ::1 1.2.3.4 1 2\r\n",
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 -1 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n",
            b"PROXY TCP4 1.2.3.4  1.2.3.4 1 2\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(parse(b"PROXY UNKNOWN x\n\r\n").is_err());
        let long = format!("PROXY UNKNOWN {}", "x".repeat(200));
        assert!(parse(long.as_bytes()).is_err());
    }

    fn v2_header(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    #[test]
    fn reads_version_2() {
        let body = [192, 0, 2, 1, 198, 51, 100, 2, 0xc8, 0x22, 1, 0xbb, 0xaa];
        let mut h = v2_header(1, 0x11, &body);
        h.extend_from_slice(b"GET /");
        let (got, n) = parse(&h).unwrap().unwrap();
        assert_eq!(n, 16 + body.len(), "TLVs skipped");
        assert_eq!(got.source, addr("192.0.2.1:51234"));
        assert_eq!(got.destination, addr("198.51.100.2:443"));
        let mut six = [0u8; 36];
        six[15] = 1;
        six[31] = 2;
        six[33] = 80;
        let (got, _) = parse(&v2_header(1, 0x21, &six)).unwrap().unwrap();
        assert_eq!(got.source, addr("[::1]:80"));
        assert_eq!(got.destination, addr("[::2]:0"));
        // LOCAL, UNSPEC and Unix: no addresses.
        assert_eq!(parse(&v2_header(0, 0x11, &body)).unwrap().unwrap().0, NONE);
        assert_eq!(parse(&v2_header(1, 0x00, &[])).unwrap().unwrap().0, NONE);
        assert_eq!(
            parse(&v2_header(1, 0x31, &[0; 216])).unwrap().unwrap().0,
            NONE
        );
        // Still coming: the signature, the head, the addresses.
        assert_eq!(parse(&h[..5]), Ok(None));
        assert_eq!(parse(&h[..15]), Ok(None));
        assert_eq!(parse(&h[..20]), Ok(None));
        let mut other = v2_header(1, 0x11, &body);
        other[12] = 0x11;
        assert!(parse(&other).is_err(), "version 1 in a v2 head");
        other[12] = 0x22;
        assert!(parse(&other).is_err(), "command 2");
        assert!(
            parse(&v2_header(1, 0x11, &body[..8])).is_err(),
            "short IPv4"
        );
        assert!(parse(&v2_header(1, 0x21, &body)).is_err(), "short IPv6");
        assert!(parse(&v2_header(1, 0x11, &[0; 5000])).is_err(), "past 4096");
        assert!(parse(b"\r\n\r\n\0\r\nQUIX\n").is_err());
    }

    proptest! {
        /// Whatever the bytes, a header found lies within them, and one
        /// found stays found as more bytes follow; "need more" never
        /// answers a prefix that cannot become a header.
        #[test]
        fn a_found_header_is_within_and_stable(
            head in prop_oneof![
                Just(b"PROXY ".to_vec()),
                Just(V2_SIGNATURE.to_vec()),
                Just(Vec::new()),
            ],
            rest in prop::collection::vec(any::<u8>(), 0..200),
            more in prop::collection::vec(any::<u8>(), 0..20),
        ) {
            let mut input = head;
            input.extend_from_slice(&rest);
            if let Ok(Some((h, n))) = parse(&input) {
                prop_assert!(n <= input.len() && n > 0);
                let mut longer = input.clone();
                longer.extend_from_slice(&more);
                prop_assert_eq!(parse(&longer), Ok(Some((h, n))));
            }
            match parse(&input) {
                Ok(None) => prop_assert!(input.len() < V2_MAX),
                // A refusal is final.
                Err(_) => {
                    let mut longer = input.clone();
                    longer.extend_from_slice(&more);
                    prop_assert!(parse(&longer).is_err());
                }
                Ok(Some(_)) => {}
            }
        }

        /// Every address written in a version 1 line or a version 2 head
        /// is read back.
        #[test]
        fn addresses_round_trip(a in any::<[u8; 4]>(), b in any::<[u8; 4]>(), p in any::<u16>(), q in any::<u16>()) {
            let (src, dst) = (SocketAddr::from((a, p)), SocketAddr::from((b, q)));
            let line = format!("PROXY TCP4 {} {} {} {}\r\n", src.ip(), dst.ip(), p, q);
            let (h, n) = parse(line.as_bytes()).unwrap().unwrap();
            prop_assert_eq!((h.source, h.destination, n), (Some(src), Some(dst), line.len()));
            let mut body = a.to_vec();
            body.extend_from_slice(&b);
            body.extend_from_slice(&p.to_be_bytes());
            body.extend_from_slice(&q.to_be_bytes());
            let (h, _) = parse(&v2_header(1, 0x11, &body)).unwrap().unwrap();
            prop_assert_eq!((h.source, h.destination), (Some(src), Some(dst)));
        }
    }
}
