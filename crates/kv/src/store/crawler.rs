//! `lru_crawler` settings: whether the background sweep (duality's LRU
//! crawler) runs, and the `sleep` / `tocrawl` values memcached's crawler
//! takes.
//!
//! The server's background sweep ([`Store::sweep_shard`](super::Store::sweep_shard)
//! jobs) runs only while [`CrawlerSettings::enabled`]; `lru_crawler crawl`
//! ([`Store::crawl`](super::Store::crawl)) runs at once, in the request.
//! `sleep` and `tocrawl` are kept and reported in `stats settings`
//! (`lru_crawler_sleep`, `lru_crawler_tocrawl`); the sweep's pace is its own
//! (a bounded batch per shard per interval), so they change nothing else.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

/// The largest `lru_crawler sleep` memcached takes, in microseconds.
pub const MAX_CRAWLER_SLEEP: u32 = 1_000_000;

/// The crawler's switches.
#[derive(Debug)]
pub struct CrawlerSettings {
    enabled: AtomicBool,
    sleep: AtomicU32,
    tocrawl: AtomicU32,
}

impl Default for CrawlerSettings {
    /// Enabled, sleep 100 µs, tocrawl 0 (memcached's defaults).
    fn default() -> Self {
        CrawlerSettings {
            enabled: AtomicBool::new(true),
            sleep: AtomicU32::new(100),
            tocrawl: AtomicU32::new(0),
        }
    }
}

impl CrawlerSettings {
    /// Whether the crawler (the background sweep) runs.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Turns it on or off; returns the previous state.
    pub fn set_enabled(&self, on: bool) -> bool {
        self.enabled.swap(on, Relaxed)
    }

    /// `lru_crawler sleep` (microseconds between crawl steps in memcached).
    pub fn sleep(&self) -> u32 {
        self.sleep.load(Relaxed)
    }

    /// Sets it.
    pub fn set_sleep(&self, us: u32) {
        self.sleep.store(us, Relaxed);
    }

    /// `lru_crawler tocrawl` (items per class per crawl in memcached; 0 = all).
    pub fn tocrawl(&self) -> u32 {
        self.tocrawl.load(Relaxed)
    }

    /// Sets it.
    pub fn set_tocrawl(&self, n: u32) {
        self.tocrawl.store(n, Relaxed);
    }
}
