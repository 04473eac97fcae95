//! The colors service on tokio: the conventional peer. A multi-thread
//! runtime with N workers serves [`LockedService`] (one mutex over every
//! client's counter and the ledger, no colors) with the same connection
//! loop as the cache's tokio peer (`kv_tokio`).

use super::service::{LockedService, SEED};
use std::path::PathBuf;
use std::sync::Arc;

/// Serves on the Unix socket `unix` with `threads` workers, for clients
/// `0..clients`, until `stop` returns (as `kv_tokio::serve`'s). Prints
/// `ready` once listening.
pub fn serve(
    unix: PathBuf,
    threads: usize,
    clients: usize,
    stop: impl FnOnce() + Send + 'static,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
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
