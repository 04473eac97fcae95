//! Thread pools for work that must not run on an event loop.
