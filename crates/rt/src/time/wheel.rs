//! Hierarchical timer wheel.
