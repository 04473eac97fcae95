//! Base64 for meta-protocol binary keys (the `b` flag), with memcached's
//! rules over the `base64` crate: the RFC 4648 alphabet, padding required,
//! bits past the last byte ignored (memcached decodes `Zh==` as `f`), an
//! empty key refused. Unlike memcached, a character outside the alphabet is
//! refused rather than skipped (README, deviations). Decoding writes into
//! the caller's slice: no allocation.

use ::base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use ::base64::engine::DecodePaddingMode;
use ::base64::Engine;

/// The engine with memcached's rules (see the module docs).
const MEMCACHED: GeneralPurpose = GeneralPurpose::new(
    &::base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes `input` into `out`, returning the decoded length, or `None` when
/// `input` is not padded base64 or does not fit. Empty input is invalid (a key
/// cannot be empty).
pub(crate) fn decode(input: &[u8], out: &mut [u8]) -> Option<usize> {
    if input.is_empty() {
        return None;
    }
    MEMCACHED.decode_slice(input, out).ok()
}

/// Appends the base64 encoding of `input` to `out`.
pub(crate) fn encode(input: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    // Padded, so the length is always known; it cannot overflow for a key.
    let n = ::base64::encoded_len(input.len(), true).expect("a key's encoding fits in usize");
    out.resize(at + n, 0);
    let written = MEMCACHED
        .encode_slice(input, &mut out[at..])
        .expect("the slice has the encoded length");
    debug_assert_eq!(written, n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_vectors() {
        let cases: [(&[u8], &[u8]); 4] = [
            (b"f", b"Zg=="),
            (b"fo", b"Zm8="),
            (b"foo", b"Zm9v"),
            (b"foobar", b"Zm9vYmFy"),
        ];
        for (plain, enc) in cases {
            let mut e = b"k".to_vec();
            encode(plain, &mut e);
            assert_eq!(&e[1..], enc, "appended after what was there");
            let mut d = [0u8; 16];
            let n = decode(enc, &mut d).unwrap();
            assert_eq!(&d[..n], plain);
        }
    }

    #[test]
    fn rejects_bad_input() {
        let mut d = [0u8; 16];
        for bad in [
            &b""[..],
            b"Zg=",
            b"Zg",
            b"Z===",
            b"Zg====",
            b"Zg==Zg==",
            b"Zm9*",
            b"=Zm9",
            b"Z*g==",
        ] {
            assert_eq!(decode(bad, &mut d), None, "{:?}", bad);
        }
        assert_eq!(decode(b"Zm9vYmFy", &mut [0u8; 5]), None);
        assert_eq!(decode(b"Zm9vYmFy", &mut [0u8; 6]), Some(6));
    }

    #[test]
    fn bits_past_the_last_byte_are_ignored_as_memcached_does() {
        // memcached 1.6.18: `ms Zg== 1 b` then `mg Zh== b v` is a hit.
        let mut d = [0u8; 4];
        assert_eq!(decode(b"Zh==", &mut d), Some(1));
        assert_eq!(d[0], b'f');
        assert_eq!(decode(b"Zm9=", &mut d), Some(2));
        assert_eq!(&d[..2], b"fo");
    }

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 1..200)) {
            let mut e = Vec::new();
            encode(&data, &mut e);
            let mut d = [0u8; 200];
            let n = decode(&e, &mut d).unwrap();
            prop_assert_eq!(&d[..n], &data[..]);
        }
    }
}
