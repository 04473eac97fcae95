//! [`Return`]: nginx's `return` at server level, one answer for every
//! request: `--return "301 https://$host$request_uri"` (a server that only
//! sends its clients to HTTPS or to a new name), `--return "503"`
//! (maintenance: the 503 page, or `--error-page 503`'s), `--return "200
//! ok"` (a health check's answer). The text is expanded with the access
//! log's variables ([`LogFormat`], values as they are); it is answered
//! before anything else is decided, `--allow`/`--deny` included, as
//! nginx's server-level `return` runs before its access check.

use std::str::FromStr;

use crate::log_format::{Escape, LogFormat};
use crate::status::Status;

/// One `--return CODE [TEXT]`.
#[derive(Debug, Clone)]
pub struct Return {
    /// What every request is answered.
    pub status: Status,
    /// The address of a redirect, or the body of another answer; `None`:
    /// the status's own page (an error page may answer it).
    pub text: Option<LogFormat>,
}

/// The codes `--return` answers with (444: none, the connection closes).
const CODES: [Status; 12] = [
    Status::Ok,
    Status::MovedPermanently,
    Status::Found,
    Status::SeeOther,
    Status::TemporaryRedirect,
    Status::PermanentRedirect,
    Status::Forbidden,
    Status::NotFound,
    Status::Gone,
    Status::InternalServerError,
    Status::ServiceUnavailable,
    Status::NoResponse,
];

impl Return {
    /// Whether the answer is a redirect (its text is the `Location`).
    pub fn redirects(&self) -> bool {
        matches!(self.status.code(), 301..=308)
    }
}

impl FromStr for Return {
    type Err = String;

    fn from_str(s: &str) -> Result<Return, String> {
        let s = s.trim();
        let (code, text) = match s.split_once(char::is_whitespace) {
            Some((code, text)) => (code, Some(text.trim_start())),
            None => (s, None),
        };
        let codes = || {
            CODES
                .iter()
                .map(|c| c.code().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let status = code
            .parse::<u16>()
            .ok()
            .and_then(|n| CODES.into_iter().find(|c| c.code() == n))
            .ok_or_else(|| format!("{code:?}: a code of {}, then the text", codes()))?;
        let text = match text {
            Some(t) => Some(LogFormat::parse(t, Escape::None)?),
            None => None,
        };
        let ret = Return { status, text };
        if ret.redirects() && ret.text.is_none() {
            return Err(format!("{code} needs the address to send clients to"));
        }
        if ret.status == Status::NoResponse && ret.text.is_some() {
            return Err("444 closes the connection without an answer: it takes no text".into());
        }
        Ok(ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_texts() {
        let r: Return = "301 https://$host$request_uri".parse().unwrap();
        assert!(r.redirects() && r.status == Status::MovedPermanently);
        let r: Return = "503".parse().unwrap();
        assert!(!r.redirects() && r.text.is_none());
        let r: Return = "200  ok then".parse().unwrap();
        assert!(r.text.is_some() && r.status == Status::Ok);
        for bad in ["", "999 x", "204", "301", "abc", "308 $nope"] {
            assert!(bad.parse::<Return>().is_err(), "{bad:?}");
        }
        assert!("301"
            .parse::<Return>()
            .unwrap_err()
            .contains("needs the address"));
        assert!("204".parse::<Return>().unwrap_err().contains("200, 301"));
    }
}
