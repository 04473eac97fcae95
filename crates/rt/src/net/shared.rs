//! Bytes a send takes from where they lie: the socket holds a reference
//! until the kernel has them, instead of a copy.

use std::fmt;
use std::sync::Arc;

/// Bytes shared with a send (a cached file's body, a cache item's value):
/// cloning is a reference count, and what a send holds lives until the
/// kernel has taken it, whatever the owner does meanwhile.
#[derive(Clone)]
pub struct SharedBytes(Inner);

#[derive(Clone)]
enum Inner {
    Slice(Arc<[u8]>),
    Owner(Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl SharedBytes {
    /// Bytes of any owner (a mapping, say): `owner.as_ref()` must give the
    /// same bytes every time, and nothing may write them while a clone
    /// lives.
    pub fn from_owner(owner: Arc<dyn AsRef<[u8]> + Send + Sync>) -> SharedBytes {
        SharedBytes(Inner::Owner(owner))
    }
}

impl From<Arc<[u8]>> for SharedBytes {
    fn from(body: Arc<[u8]>) -> SharedBytes {
        SharedBytes(Inner::Slice(body))
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Slice(b) => b,
            Inner::Owner(o) => (**o).as_ref(),
        }
    }
}

impl PartialEq for SharedBytes {
    fn eq(&self, other: &SharedBytes) -> bool {
        **self == **other
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Owned(Vec<u8>);
    impl AsRef<[u8]> for Owned {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }

    #[test]
    fn both_kinds_give_their_bytes() {
        let a: SharedBytes = Arc::<[u8]>::from(&b"abc"[..]).into();
        let b = SharedBytes::from_owner(Arc::new(Owned(b"abc".to_vec())));
        assert_eq!(&*a, b"abc");
        assert_eq!(&*b, b"abc");
        assert_eq!(a, b);
        assert_eq!(&*b.clone(), b"abc");
    }
}
