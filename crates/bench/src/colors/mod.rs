//! Seed 003's colors experiment: its service (and its tokio peer).

pub mod service;
pub mod tokio_peer;
