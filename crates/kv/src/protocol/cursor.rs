//! Where a connection stands in its read buffer: bytes parsed so far, and
//! bytes of a refused value still to discard as they arrive. Shared by every
//! server loop over [`parse`](super::parse), so the skipping rules live once.

use super::ParseError;

/// A connection's position in its read buffer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Bytes of the buffer already handled.
    pub start: usize,
    /// Bytes still to discard after a refused request (may exceed what is buffered).
    pub swallow: usize,
}

impl Cursor {
    /// Discards what must be swallowed and returns the unparsed rest of
    /// `buf`, or `None` if nothing is left to parse yet (read more).
    pub fn rest<'a>(&mut self, buf: &'a [u8]) -> Option<&'a [u8]> {
        let skip = self.swallow.min(buf.len() - self.start);
        self.start += skip;
        self.swallow -= skip;
        let rest = &buf[self.start..];
        (self.swallow == 0 && !rest.is_empty()).then_some(rest)
    }

    /// A request of `used` bytes was handled.
    pub fn advance(&mut self, used: usize) {
        self.start += used;
    }

    /// A parse error was answered: skip what it covers (`rest_len` bytes
    /// were available), the remainder as it arrives.
    pub fn skip_error(&mut self, e: &ParseError<'_>, rest_len: usize) {
        let consumed = e.consumed().unwrap_or(rest_len);
        let here = consumed.min(rest_len);
        self.start += here;
        self.swallow = consumed - here;
    }

    /// True while part of a request (or a value to discard) is pending.
    pub fn mid_request(&self, buffered: usize) -> bool {
        buffered > self.start || self.swallow > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::StoreCommand;

    #[test]
    fn swallows_across_reads_then_parses_on() {
        let mut c = Cursor::default();
        let e = ParseError::TooLarge {
            key: b"k",
            key_base64: false,
            invalidate: false,
            noreply: false,
            consumed: 10,
            command: StoreCommand::Set,
            vlen: 4,
        };
        let buf = b"abcd";
        c.skip_error(&e, buf.len());
        assert_eq!((c.start, c.swallow), (4, 6));
        assert_eq!(c.rest(buf), None);
        // The next read: 6 bytes of the refused value, then a request.
        let mut c = Cursor {
            start: 0,
            swallow: c.swallow,
        };
        let buf = b"123456get k\r\n";
        assert_eq!(c.rest(buf), Some(&b"get k\r\n"[..]));
        c.advance(7);
        assert_eq!(c.rest(buf), None);
        assert!(!c.mid_request(buf.len()));
    }
}
