//! The cache server: the protocol and store of this crate, served on
//! `duality-models` under any threading model.
//!
//! One connection is one straight-line `async fn` ([`serve_conn`]): read,
//! parse every complete request in the buffer, execute each as a payload job
//! colored by the shard of its key, and write all responses of the read with
//! one `write_all`.
//!
//! Which scheme keeps a shard consistent, per model (see `duality_models::payload`):
//! - `sped`: one thread, the job runs inline: the shard's mutex is never contended.
//! - `symped`, `steal`, `thread-per-conn`: jobs run inline under the color
//!   lock of their shard, borrowing the read buffer (no copy); the shard's own
//!   mutex is then uncontended too. Measured as the cheapest correct scheme
//!   here: one uncontended lock pair per request.
//! - `amped`: the job goes to the payload thread owning the shard's color, so a
//!   shard is only ever touched by one payload thread.
//! - `seda`, `seda-s`: jobs go round-robin / to the loop's paired thread and
//!   run under the shard's color lock.
//!
//! A handed-off job owns a copy of its request's bytes and re-parses them on
//! the payload thread (parsing is a few dozen nanoseconds; a borrowed request
//! cannot cross threads).

use crate::{
    execute, execute_error, parse, request_shard, Cursor, ExecContext, Flow, Limits, ParseError,
    ServerStats, Store, StoreConfig, Time,
};
use duality_models::{Conn, Payload, StatsHandle};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Settings of a cache server (memcached's flags).
#[derive(Clone, Debug)]
pub struct KvConfig {
    /// Memory limit for items, bytes (`-m` is in MiB).
    pub memory_limit: usize,
    /// Largest value (`-I`).
    pub max_item_size: usize,
    /// Connection limit (`-c`), reported in `stats`.
    pub max_conns: usize,
    /// Worker threads, reported in `stats` (`-t`).
    pub threads: usize,
    /// The model, reported in `stats settings`.
    pub model: String,
    /// Verbosity (`-v`).
    pub verbosity: u32,
    /// How often the background sweep reclaims expired items.
    pub sweep_interval: Duration,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            memory_limit: 64 << 20,
            max_item_size: 1 << 20,
            max_conns: 1024,
            threads: 1,
            model: "sped".into(),
            verbosity: 0,
            sweep_interval: Duration::from_secs(1),
        }
    }
}

/// Everything connections share.
pub struct KvState {
    /// The items.
    pub store: Store,
    limits: Limits,
    config: KvConfig,
    started: Instant,
    started_unix: u64,
    server: OnceLock<StatsHandle>,
    verbosity: AtomicU32,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl KvState {
    /// Builds the store for `config`. Fails if the limits cannot work together.
    pub fn new(config: KvConfig) -> std::io::Result<Arc<KvState>> {
        if config.max_item_size < 1024 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "item size limit (-I) must be at least 1 KiB",
            ));
        }
        if config.max_item_size > config.memory_limit / 2 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "item size limit (-I {}) must be at most half the memory limit (-m {} MiB)",
                    config.max_item_size,
                    config.memory_limit >> 20
                ),
            ));
        }
        let mut sc = StoreConfig::new(config.memory_limit);
        // Each shard must hold at least one largest item.
        while sc.shards > 1 && config.memory_limit / sc.shards < 2 * config.max_item_size {
            sc.shards /= 2;
        }
        let limits = Limits {
            max_item_size: config.max_item_size,
            ..Limits::default()
        };
        Ok(Arc::new(KvState {
            store: Store::new(sc),
            limits,
            verbosity: AtomicU32::new(config.verbosity),
            config,
            started: Instant::now(),
            started_unix: unix_now(),
            server: OnceLock::new(),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        }))
    }

    /// Lets `stats` report the server's connections and threads.
    pub fn attach(&self, stats: StatsHandle) {
        let _ = self.server.set(stats);
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            state: self,
            now: unix_now().max(1) as Time,
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1)
}

/// The execution context of one read's worth of requests.
struct Ctx<'a> {
    state: &'a KvState,
    now: Time,
}

impl ExecContext for Ctx<'_> {
    fn now(&self) -> Time {
        self.now
    }

    fn server_stats(&self) -> ServerStats {
        let s = self.state;
        let (user, system) = duality_rt::stats::process_cpu_time();
        let (curr, total) = s
            .server
            .get()
            .map(|h| {
                let st = h.stats();
                (st.curr_connections as u64, st.total_connections)
            })
            .unwrap_or((0, 0));
        ServerStats {
            pid: std::process::id(),
            uptime: s.started.elapsed().as_secs(),
            rusage_user: user,
            rusage_system: system,
            max_connections: s.config.max_conns as u64,
            curr_connections: curr,
            total_connections: total,
            bytes_read: s.bytes_read.load(Relaxed),
            bytes_written: s.bytes_written.load(Relaxed),
            threads: s.config.threads as u64,
        }
    }

    fn set_verbosity(&self, level: u32) {
        self.state.verbosity.store(level, Relaxed);
    }

    fn extra_stats(&self, group: &str, out: &mut Vec<u8>) -> bool {
        let s = self.state;
        match group {
            "settings" => {
                crate::write_stat(out, "model", &s.config.model);
                crate::write_stat(
                    out,
                    "sweep_interval_ms",
                    s.config.sweep_interval.as_millis(),
                );
                crate::write_stat(out, "started_unix", s.started_unix);
                true
            }
            "duality" => {
                if let Some(h) = s.server.get() {
                    let st = h.stats();
                    crate::write_stat(out, "rejected_connections", st.rejected_connections);
                    for (k, v) in st.stat_lines() {
                        crate::write_stat(out, &k, v);
                    }
                }
                true
            }
            _ => false,
        }
    }
}

/// How big a read is at least.
const READ_CHUNK: usize = 16 * 1024;

/// Serves one connection until it closes (or the server shuts down between requests).
pub async fn serve_conn(mut conn: Conn, payload: Payload, state: Arc<KvState>) {
    let mut rbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut cur = Cursor::default();
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let max_buffer = state.limits.max_item_size + state.limits.max_get_line + 2;
    loop {
        // Make room: drop what was parsed, keep a partial request.
        if cur.start > 0 {
            rbuf.drain(..cur.start);
            cur.start = 0;
        }
        let have = rbuf.len();
        if rbuf.capacity() - have < READ_CHUNK {
            rbuf.reserve(READ_CHUNK);
        }
        let cap = rbuf.capacity().min(max_buffer.max(have + READ_CHUNK));
        rbuf.resize(cap, 0);
        conn.set_mid_request(cur.mid_request(have));
        let n = match conn.read(&mut rbuf[have..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        rbuf.truncate(have + n);
        state.bytes_read.fetch_add(n as u64, Relaxed);

        let mut close = false;
        let ctx = state.ctx();
        while let Some(buf) = cur.rest(&rbuf) {
            match parse(buf, &state.limits) {
                Ok((req, used)) => {
                    let color = request_shard(&req, &state.store).unwrap_or(0) as u64;
                    let flow = match payload
                        .try_inline(color, || execute(&req, &state.store, &ctx, &mut out))
                    {
                        Some(flow) => flow,
                        None => {
                            let bytes = buf[..used].to_vec();
                            let st = state.clone();
                            let (flow, resp) = payload
                                .call_colored(color, move || {
                                    let mut resp = Vec::new();
                                    let flow = match parse(&bytes, &st.limits) {
                                        Ok((req, _)) => {
                                            execute(&req, &st.store, &st.ctx(), &mut resp)
                                        }
                                        Err(e) => {
                                            execute_error(&e, &st.store, &st.ctx(), &mut resp)
                                        }
                                    };
                                    (flow, resp)
                                })
                                .await;
                            out.extend_from_slice(&resp);
                            flow
                        }
                    };
                    cur.advance(used);
                    if flow == Flow::Close {
                        close = true;
                        break;
                    }
                }
                Err(ParseError::Incomplete) => {
                    if rbuf.len() - cur.start >= max_buffer {
                        // Cannot happen with a correct parser (it reports
                        // LineTooLong / TooLarge first); never grow past the bound.
                        out.extend_from_slice(b"SERVER_ERROR request too large\r\n");
                        close = true;
                    }
                    break;
                }
                Err(e) => {
                    let flow = execute_error(&e, &state.store, &ctx, &mut out);
                    cur.skip_error(&e, buf.len());
                    if flow == Flow::Close {
                        close = true;
                        break;
                    }
                }
            }
        }
        if !out.is_empty() {
            state.bytes_written.fetch_add(out.len() as u64, Relaxed);
            if conn.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if close {
            return;
        }
        // Shrink a buffer that grew for one large value.
        if rbuf.capacity() > 4 * READ_CHUNK && rbuf.len() - cur.start < READ_CHUNK {
            let rest = rbuf[cur.start..].to_vec();
            rbuf = Vec::with_capacity(READ_CHUNK);
            rbuf.extend_from_slice(&rest);
            cur.start = 0;
        }
    }
}

/// Reclaims expired items in the background, one shard at a time, each under
/// its shard's color: never more than `batch` items per job, so a sweep never
/// stalls requests for long.
pub async fn sweep_forever(payload: Payload, state: Arc<KvState>) {
    const BATCH: usize = 256;
    loop {
        duality_rt::time::sleep(state.config.sweep_interval).await;
        for shard in 0..state.store.shard_count() {
            let st = state.clone();
            payload
                .call_colored(shard as u64, move || {
                    st.store.sweep_shard(shard, unix_now() as Time, BATCH)
                })
                .await;
        }
    }
}
