//! The colors service on tokio: the conventional peer. A multi-thread
//! runtime with N workers serves [`LockedService`] (one mutex over every
//! client's counter and the ledger, no colors) with the same connection
//! loop as the cache's tokio peer (`kv_tokio`).

use super::service::{LockedService, SEED};
use std::path::PathBuf;
use std::sync::Arc;

/// Serves on the Unix socket `unix` with `threads` workers, for clients
/// `0..clients`, until `stop` returns (as `kv_tokio::serve`'s). Prints
/// `ready` once listening. With `cpus`, the i-th thread the runtime starts
/// (its workers start first) is pinned to `cpus[i]`, as duality's loops
/// are by `--cpu-affinity`; threads past the list stay unpinned.
pub fn serve(
    unix: PathBuf,
    threads: usize,
    clients: usize,
    cpus: Option<Vec<usize>>,
    stop: impl FnOnce() + Send + 'static,
) -> anyhow::Result<()> {
    let started = std::sync::atomic::AtomicUsize::new(0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .on_thread_start(move || {
            let i = started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(&cpu) = cpus.as_ref().and_then(|c| c.get(i)) {
                if let Err(e) = duality_rt::affinity::pin_current_thread(cpu) {
                    duality_rt::say!("colors-tokio: {e}");
                }
            }
        })
        .enable_all()
        .build()?;
    let proto = Arc::new(LockedService::new(clients, SEED));
    rt.block_on(async move {
        let _ = std::fs::remove_file(&unix);
        let l = tokio::net::UnixListener::bind(&unix)?;
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(crate::kv_tokio::conn(s, proto.clone()));
            }
        });
        duality_rt::say_out!("ready tokio-colors");
        tokio::task::spawn_blocking(stop).await?;
        let _ = std::fs::remove_file(&unix);
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(())
}
