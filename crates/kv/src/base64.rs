//! Standard base64 (RFC 4648 alphabet, `=` padding) for meta-protocol binary
//! keys (the `b` flag). Small and allocation-free on the decode side.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn value(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// Decodes `input` into `out`, returning the decoded length, or `None` when
/// `input` is not padded base64 or does not fit. Empty input is invalid (a key
/// cannot be empty).
pub(crate) fn decode(input: &[u8], out: &mut [u8]) -> Option<usize> {
    if input.is_empty() || !input.len().is_multiple_of(4) {
        return None;
    }
    let mut n = 0;
    let quads = input.len() / 4;
    for (q, chunk) in input.chunks_exact(4).enumerate() {
        let last = q + 1 == quads;
        let pad = match chunk {
            [_, _, b'=', b'='] if last => 2,
            [_, _, _, b'='] if last => 1,
            _ => 0,
        };
        let mut acc = 0u32;
        for &c in &chunk[..4 - pad] {
            acc = acc << 6 | value(c)?;
        }
        acc <<= 6 * pad as u32;
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        let take = 3 - pad;
        out.get_mut(n..n + take)?.copy_from_slice(&bytes[..take]);
        n += take;
    }
    Some(n)
}

/// Appends the base64 encoding of `input` to `out`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn encode(input: &[u8], out: &mut Vec<u8>) {
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let acc = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(acc >> (18 - 6 * k)) as usize & 63]);
            } else {
                out.push(b'=');
            }
        }
    }
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
            let mut e = Vec::new();
            encode(plain, &mut e);
            assert_eq!(e, enc);
            let mut d = [0u8; 16];
            let n = decode(enc, &mut d).unwrap();
            assert_eq!(&d[..n], plain);
        }
    }

    #[test]
    fn rejects_bad_input() {
        let mut d = [0u8; 16];
        for bad in [&b""[..], b"Zg=", b"Z===", b"Zg==Zg==", b"Zm9*", b"=Zm9"] {
            assert_eq!(decode(bad, &mut d), None, "{:?}", bad);
        }
        assert_eq!(decode(b"Zm9vYmFy", &mut [0u8; 5]), None);
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
