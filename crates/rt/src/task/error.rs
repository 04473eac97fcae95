use std::any::Any;
use std::fmt;

/// Why a task (or a pool job) produced no output.
pub enum JoinError {
    /// The task was aborted before it completed; its future has been dropped.
    Cancelled,
    /// The task panicked; the payload is kept so it can be re-raised.
    Panicked(Box<dyn Any + Send + 'static>),
}

impl JoinError {
    /// True if the task was aborted.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JoinError::Cancelled)
    }

    /// True if the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// The panic payload, if the task panicked.
    pub fn into_panic(self) -> Option<Box<dyn Any + Send + 'static>> {
        match self {
            JoinError::Panicked(p) => Some(p),
            JoinError::Cancelled => None,
        }
    }

    /// The panic message, when the payload is a string.
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            JoinError::Panicked(p) => p
                .downcast_ref::<&'static str>()
                .copied()
                .or_else(|| p.downcast_ref::<String>().map(String::as_str)),
            JoinError::Cancelled => None,
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Cancelled => f.write_str("JoinError::Cancelled"),
            JoinError::Panicked(_) => write!(f, "JoinError::Panicked({:?})", self.panic_message()),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Cancelled => f.write_str("task was cancelled"),
            JoinError::Panicked(_) => match self.panic_message() {
                Some(m) => write!(f, "task panicked: {m}"),
                None => f.write_str("task panicked"),
            },
        }
    }
}

impl std::error::Error for JoinError {}

impl From<JoinError> for std::io::Error {
    fn from(e: JoinError) -> std::io::Error {
        std::io::Error::other(e.to_string())
    }
}
