//! A socket's receive or send queue ([`Queue`]): bytes in one pointer.

/// A byte queue behind one pointer: a boxed `Vec`, or nothing. Every
/// connection's [`St`](super::St) holds two, idle ones included, and a
/// `Vec` takes three words: one each put an idle connection's `Io` (with
/// its `Arc`) in mimalloc's 128-byte class instead of the 160-byte one, and
/// an armed receive's `Op` in 32 bytes instead of 40. The box travels with
/// its `Vec` through the thread's spares ([`super::spare_buf`]), so a busy
/// connection allocates no more than before. (`thin-vec`'s one-pointer
/// vector appends a byte at a time: a 1 KiB response's head cost 17% more
/// CPU per request.)
// On purpose: the box keeps the `Vec`'s three words out of every socket.
#[allow(clippy::box_collection)]
#[derive(Default)]
pub(super) struct Queue(Option<Box<Vec<u8>>>);

impl Queue {
    #[cfg(test)]
    pub(super) fn with_capacity(n: usize) -> Queue {
        Queue((n > 0).then(|| Box::new(Vec::with_capacity(n))))
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn capacity(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.capacity())
    }

    fn vec(&mut self) -> &mut Vec<u8> {
        self.0.get_or_insert_with(Default::default)
    }

    pub(super) fn extend_from_slice(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.vec().extend_from_slice(bytes);
        }
    }

    pub(super) fn reserve_exact(&mut self, additional: usize) {
        self.vec().reserve_exact(additional);
    }

    pub(super) fn clear(&mut self) {
        if let Some(v) = &mut self.0 {
            v.clear();
        }
    }

    /// Drops the first `n` bytes.
    pub(super) fn consume(&mut self, n: usize) {
        if let Some(v) = &mut self.0 {
            v.drain(..n);
        }
    }
}

impl std::ops::Deref for Queue {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.0.as_deref().map_or(&[], |v| v)
    }
}

/// An overflow chunk becomes the queue as it is (no copy of its bytes).
impl From<Box<[u8]>> for Queue {
    fn from(bytes: Box<[u8]>) -> Queue {
        Queue((!bytes.is_empty()).then(|| Box::new(Vec::from(bytes))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_one_pointer_and_behaves_as_a_vec() {
        assert_eq!(std::mem::size_of::<Queue>(), std::mem::size_of::<usize>());
        let mut q = Queue::default();
        assert!(q.is_empty() && q.capacity() == 0 && q[..].is_empty());
        q.extend_from_slice(b"get k\r\n");
        q.extend_from_slice(b"get j\r\n");
        assert_eq!(&q[..], b"get k\r\nget j\r\n");
        q.consume(7);
        assert_eq!(&q[..], b"get j\r\n");
        let cap = q.capacity();
        q.clear();
        assert!(q.is_empty() && q.capacity() == cap, "cleared, not freed");
        q.reserve_exact(100);
        assert!(q.capacity() >= 100);
        let chunk: Box<[u8]> = Box::from(&b"abc"[..]);
        let p = chunk.as_ptr();
        let q = Queue::from(chunk);
        assert_eq!((&q[..], q.as_ptr()), (&b"abc"[..], p), "the chunk itself");
        assert_eq!(Queue::from(Box::<[u8]>::default()).capacity(), 0);
        assert_eq!(Queue::with_capacity(0).capacity(), 0);
    }
}
