//! [`Access`]: nginx's access module (`allow` and `deny`), who may be
//! served at all: the first rule whose addresses hold the client's decides,
//! and a client no rule names is served. A refused request is answered 403
//! (nginx's answer, so `--error-page 403` applies) before anything is
//! looked up. Behind a trusted proxy ([`crate::RealIp`]) the client is the
//! address the proxy names, as nginx's realip runs before its access check.

use std::net::IpAddr;
use std::str::FromStr;

use crate::real_ip::Trusted;

/// One `--allow` or `--deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessRule {
    /// `allow` (else `deny`).
    pub allow: bool,
    /// Whose: `None` for `all`.
    pub who: Option<Trusted>,
}

impl AccessRule {
    /// A rule of `allow` (or deny) for `who`: nginx's `ADDRESS`,
    /// `ADDRESS/BITS`, `unix:` or `all`.
    pub fn new(allow: bool, who: &str) -> Result<AccessRule, String> {
        let who = match who.trim() {
            "all" => None,
            w => Some(Trusted::from_str(w).map_err(|e| format!("{e}, or all"))?),
        };
        Ok(AccessRule { allow, who })
    }
}

/// The rules, in order; none by default (everybody is served).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// `--allow` and `--deny` as given, interleaved.
    pub rules: Vec<AccessRule>,
}

impl Access {
    /// Whether there are rules to check.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether `client` (`None`: over a Unix socket) is served.
    pub fn allows(&self, client: Option<IpAddr>) -> bool {
        self.rules
            .iter()
            .find(|r| r.who.is_none_or(|w| w.contains(client)))
            .is_none_or(|r| r.allow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(rules: &[(bool, &str)]) -> Access {
        Access {
            rules: rules
                .iter()
                .map(|&(allow, who)| AccessRule::new(allow, who).unwrap())
                .collect(),
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn the_first_rule_that_names_the_client_decides() {
        // nginx's example: deny 192.168.1.1; allow 192.168.1.0/24;
        // allow 10.1.1.0/16; allow 2001:0db8::/32; deny all;
        let a = access(&[
            (false, "192.168.1.1"),
            (true, "192.168.1.0/24"),
            (true, "10.1.1.0/16"),
            (true, "2001:0db8::/32"),
            (false, "all"),
        ]);
        assert!(!a.allows(ip("192.168.1.1")));
        assert!(a.allows(ip("192.168.1.2")));
        assert!(a.allows(ip("10.1.200.3")));
        assert!(!a.allows(ip("10.2.0.1")));
        assert!(a.allows(ip("2001:db8::1")));
        // An IPv4 client on a dual-stack socket is its IPv4 address.
        assert!(a.allows(ip("::ffff:192.168.1.7")));
        assert!(!a.allows(ip("::ffff:192.168.1.1")));
        assert!(!a.allows(None), "a Unix socket is only `unix:` or `all`");
        // No rule naming the client: served.
        assert!(access(&[(false, "10.0.0.0/8")]).allows(ip("127.0.0.1")));
        assert!(Access::default().allows(None));
        let unix = access(&[(true, "unix:"), (false, "all")]);
        assert!(unix.allows(None) && !unix.allows(ip("127.0.0.1")));
    }

    #[test]
    fn rules_that_do_not_parse_are_refused() {
        assert!(AccessRule::new(true, "everyone")
            .unwrap_err()
            .contains("or all"));
        assert!(AccessRule::new(false, "10.0.0.0/33").is_err());
        assert!(AccessRule::new(false, "localhost").is_err());
    }
}
