//! `Accept-Encoding` (RFC 9110 §12.5.3): [`AcceptEncoding::parse`], a pure
//! function over the field's bytes, and [`AcceptEncoding::prefers_gzip`],
//! the one question the server asks of it.
//!
//! What is read: a comma-separated list of `coding *( OWS ";" OWS param )`.
//! Codings and parameter names are compared without regard to case; spaces
//! and tabs around elements, `;` and `=` are skipped. Of the parameters only
//! `q` counts (a weight, `0` to `1` with at most three decimals, in
//! thousandths here); others are ignored. `x-gzip` is `gzip` (RFC 9110
//! §8.4.1.3, and nginx does the same). Several `Accept-Encoding` fields are
//! one list ([`AcceptEncoding::add`] each). A coding listed twice keeps its
//! **lowest** weight, so `gzip;q=0` anywhere refuses gzip.
//!
//! What is ignored, never an error: an empty element, a coding that is not a
//! token, and a whole element whose `q` is malformed (`q=2`, `q=0.0001`,
//! `q=abc`): a client that garbles a weight has stated nothing this server
//! can rely on, and ignoring the element can only fall back to identity.
//!
//! The decision ([`prefers_gzip`](AcceptEncoding::prefers_gzip)):
//! - gzip's weight is its own, else that of `*`, else 0 (not listed: not
//!   acceptable; in particular **no field, or an empty one, means no gzip**:
//!   RFC 9110 lets a server assume any coding without the field, but no
//!   client that can decode gzip fails to say so, and nginx does not
//!   compress then either);
//! - weight 0: identity;
//! - otherwise gzip, unless identity is explicitly preferred: `identity`'s
//!   own weight (else that of `*`) is **higher** than gzip's. On a tie the
//!   server prefers the smaller body.
//!
//! `identity;q=0` (or `*;q=0`) without an acceptable gzip still gets the
//! identity body, never 406: RFC 9110 §12.5.3 allows either, and a 406 for a
//! static file would only break such clients (nginx and Apache answer 200).

/// A weight in thousandths: 0 (not acceptable) to 1000 (most preferred).
pub type Weight = u16;

/// What an `Accept-Encoding` list says about the codings this server has:
/// the weight given to each, `None` where it is not listed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AcceptEncoding {
    /// `gzip` or `x-gzip`.
    pub gzip: Option<Weight>,
    /// `identity`.
    pub identity: Option<Weight>,
    /// `*`: every coding not listed on its own.
    pub any: Option<Weight>,
}

impl AcceptEncoding {
    /// The list in one field value. `AcceptEncoding::default()` is the
    /// answer to a request without the field.
    ///
    /// ```
    /// use duality_http::encoding::AcceptEncoding;
    /// assert!(AcceptEncoding::parse(b"gzip, deflate, br").prefers_gzip());
    /// assert!(!AcceptEncoding::parse(b"gzip;q=0, *").prefers_gzip());
    /// assert!(!AcceptEncoding::parse(b"").prefers_gzip());
    /// ```
    pub fn parse(value: &[u8]) -> AcceptEncoding {
        let mut a = AcceptEncoding::default();
        a.add(value);
        a
    }

    /// Adds the elements of one more field value (a request may send the
    /// list over several fields).
    pub fn add(&mut self, value: &[u8]) {
        for element in value.split(|&b| b == b',') {
            let mut parts = element.split(|&b| b == b';');
            let coding = trim(parts.next().unwrap_or_default());
            if coding.is_empty() || !coding.iter().all(|&b| crate::request::is_tchar(b)) {
                continue;
            }
            let mut weight = Some(1000);
            for param in parts {
                let (name, value) = match param.iter().position(|&b| b == b'=') {
                    Some(i) => (trim(&param[..i]), trim(&param[i + 1..])),
                    None => (trim(param), &b""[..]),
                };
                if name.eq_ignore_ascii_case(b"q") {
                    weight = parse_weight(value);
                    break;
                }
            }
            let Some(w) = weight else { continue };
            let slot =
                if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
                    &mut self.gzip
                } else if coding.eq_ignore_ascii_case(b"identity") {
                    &mut self.identity
                } else if coding == b"*" {
                    &mut self.any
                } else {
                    continue;
                };
            *slot = Some(slot.map_or(w, |old| old.min(w)));
        }
    }

    /// The weight of gzip: its own, else that of `*`, else 0.
    pub fn gzip_weight(&self) -> Weight {
        self.gzip.or(self.any).unwrap_or(0)
    }

    /// Whether to send the gzip variant (see the [module docs](self)).
    pub fn prefers_gzip(&self) -> bool {
        let gzip = self.gzip_weight();
        gzip > 0 && self.identity.or(self.any).is_none_or(|id| gzip >= id)
    }
}

/// A `qvalue` (RFC 9110 §12.4.2) in thousandths: `0[.ddd]` or `1[.000]`.
fn parse_weight(v: &[u8]) -> Option<Weight> {
    let (&int, rest) = v.split_first()?;
    let frac = match rest {
        [] => &[][..],
        [b'.', frac @ ..] if frac.len() <= 3 => frac,
        _ => return None,
    };
    if !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Weight = 0;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| Weight::from(d - b'0'));
    }
    match int {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

fn trim(v: &[u8]) -> &[u8] {
    crate::request::trim(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(value: &str) -> bool {
        AcceptEncoding::parse(value.as_bytes()).prefers_gzip()
    }

    #[test]
    fn gzip_decisions() {
        for (value, want) in [
            // What browsers and tools send.
            ("gzip, deflate, br, zstd", true),
            ("gzip, deflate", true),
            ("gzip", true),
            ("deflate, gzip;q=1.0, *;q=0.5", true),
            ("br;q=1.0, gzip;q=0.8, *;q=0.1", true),
            // Case, whitespace, x-gzip.
            ("GZIP", true),
            ("Gzip;Q=0.5", true),
            ("x-gzip", true),
            ("X-GZIP ; q=1", true),
            ("  gzip  ", true),
            ("\tgzip\t,\tdeflate", true),
            ("gzip ; q = 0.5", true),
            ("deflate,,gzip,", true),
            // Refusals.
            ("gzip;q=0", false),
            ("gzip;q=0.000", false),
            ("gzip;q=0, *", false),
            ("*, gzip;q=0", false),
            ("x-gzip;q=0, gzip", false),
            ("gzip, gzip;q=0", false),
            ("*;q=0", false),
            ("identity", false),
            ("deflate, br", false),
            ("", false),
            ("   ", false),
            (",,,", false),
            // `*` stands for gzip when gzip is not listed.
            ("*", true),
            ("*;q=0.5", true),
            ("identity;q=0, *", true),
            // Weights: the smallest positive one accepts.
            ("gzip;q=0.001", true),
            ("gzip;q=1", true),
            ("gzip;q=1.000", true),
            ("gzip;q=0.", false),
            // identity explicitly preferred over gzip.
            ("gzip;q=0.5, identity", false),
            ("gzip;q=0.5, identity;q=0.6", false),
            ("gzip;q=0.5, identity;q=0.5", true),
            ("*;q=0.5, gzip;q=0.3", false),
            ("gzip;q=0.3, identity;q=0", true),
            // `identity;q=0` alone: still identity, never 406.
            ("identity;q=0", false),
            ("identity;q=0, *;q=0", false),
            // Other parameters do not change the weight.
            ("gzip;level=9", true),
            ("gzip;level=9;q=0", false),
            ("gzip;q=0;level=9", false),
            // Malformed weights drop their element.
            ("gzip;q=2", false),
            ("gzip;q=1.5", false),
            ("gzip;q=0.0001", false),
            ("gzip;q=abc", false),
            ("gzip;q=", false),
            ("gzip;q", false),
            ("gzip;q=-1", false),
            ("gzip;q=0.5.5", false),
            ("gzip;q=2, deflate", false),
            ("gzip;q=x, *", true),
            // Not gzip.
            ("gzipx", false),
            ("gzi", false),
            ("gzip/1.0", false),
            ("\"gzip\"", false),
            ("gz ip", false),
            ("compress, x-compress", false),
            // Garbage.
            ("\x00\x01\u{7f}", false),
            (";;;q=1", false),
            ("=gzip", false),
        ] {
            assert_eq!(gzip(value), want, "{value:?}");
        }
    }

    #[test]
    fn weights_and_defaults() {
        let a = AcceptEncoding::parse(b"gzip;q=0.8, identity;q=0.25, *;q=0");
        assert_eq!(
            a,
            AcceptEncoding {
                gzip: Some(800),
                identity: Some(250),
                any: Some(0)
            }
        );
        assert_eq!(AcceptEncoding::default().gzip_weight(), 0);
        assert_eq!(AcceptEncoding::parse(b"*;q=0.7").gzip_weight(), 700);
        assert_eq!(AcceptEncoding::parse(b"gzip;q=0.07").gzip_weight(), 70);
        assert!(
            !AcceptEncoding::default().prefers_gzip(),
            "no field: identity"
        );
    }

    #[test]
    fn several_fields_are_one_list() {
        let mut a = AcceptEncoding::parse(b"deflate");
        assert!(!a.prefers_gzip());
        a.add(b"gzip");
        assert!(a.prefers_gzip());
        a.add(b"x-gzip;q=0");
        assert!(!a.prefers_gzip(), "the lowest weight of a coding wins");
    }

    #[test]
    fn weight_grammar() {
        for (v, want) in [
            ("0", Some(0)),
            ("1", Some(1000)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.123", Some(123)),
            ("1.0", Some(1000)),
            ("1.", Some(1000)),
            ("0.", Some(0)),
            ("1.001", None),
            ("0.1234", None),
            ("2", None),
            (".5", None),
            ("", None),
            ("0x1", None),
            ("0.a", None),
        ] {
            assert_eq!(parse_weight(v.as_bytes()), want, "{v:?}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Never panics; a weight is never above 1000.
            #[test]
            fn any_bytes(value in prop::collection::vec(any::<u8>(), 0..64)) {
                let a = AcceptEncoding::parse(&value);
                for w in [a.gzip, a.identity, a.any].into_iter().flatten() {
                    prop_assert!(w <= 1000);
                }
            }

            /// A list that names gzip (or x-gzip) with weight 0 never gets
            /// gzip, wherever that element is and whatever else is listed.
            #[test]
            fn gzip_q0_always_refuses(
                before in "[a-z*]{0,8}(;q=[01](\\.[0-9]{0,3})?)?",
                after in "[a-z*]{0,8}(;q=[01](\\.[0-9]{0,3})?)?",
                name in "([xX]-)?[gG][zZ][iI][pP]",
                zero in "0(\\.0{0,3})?",
            ) {
                let value = format!("{before}, {name} ; q={zero}, {after}");
                prop_assert!(!AcceptEncoding::parse(value.as_bytes()).prefers_gzip(), "{}", value);
            }

            /// Splitting a list over two fields changes nothing.
            #[test]
            fn split_fields(
                elems in prop::collection::vec("(gzip|x-gzip|identity|\\*|br|deflate)(;q=[01](\\.[0-9]{1,3})?)?", 0..6),
                cut in 0usize..6,
            ) {
                let cut = cut.min(elems.len());
                let whole = AcceptEncoding::parse(elems.join(",").as_bytes());
                let mut split = AcceptEncoding::parse(elems[..cut].join(",").as_bytes());
                split.add(elems[cut..].join(",").as_bytes());
                prop_assert_eq!(whole, split);
            }
        }
    }
}
