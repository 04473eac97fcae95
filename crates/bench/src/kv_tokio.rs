//! The same cache on tokio: `duality-kv`'s protocol and store, served by a
//! tokio multi-thread runtime, so the runtimes are compared with everything
//! else equal. Requests run inline on tokio's workers (the store's shard
//! locks keep it consistent), as `symped` does on duality.

use duality_kv::server::{KvConfig, KvProtocol, KvState};
use duality_models::session::{serve_bytes, BatchLimits, Stop};
use duality_models::{DriverConfig, Lane, Output, Protocol};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Serves on `unix` and/or `tcp`, with `threads` workers and `memory`
/// bytes of items, until `stop` returns (run on a blocking thread: the
/// caller's wait for SIGTERM/SIGINT, caught before the runtime's threads
/// start so that none is lost). Prints `ready` once listening.
pub fn serve(
    unix: Option<PathBuf>,
    tcp: Option<std::net::SocketAddr>,
    threads: usize,
    memory: usize,
    stop: impl FnOnce() + Send + 'static,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    let state = KvState::new(KvConfig {
        memory_limit: memory,
        threads,
        model: "tokio".into(),
        ..KvConfig::default()
    })?;
    let store = Arc::new(KvProtocol::new(state));
    rt.block_on(async move {
        if let Some(p) = &unix {
            let _ = std::fs::remove_file(p);
            let l = tokio::net::UnixListener::bind(p)?;
            let store = store.clone();
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    tokio::spawn(conn(s, store.clone()));
                }
            });
        }
        if let Some(a) = tcp {
            let l = tokio::net::TcpListener::bind(a).await?;
            let store = store.clone();
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    let _ = s.set_nodelay(true);
                    tokio::spawn(conn(s, store.clone()));
                }
            });
        }
        duality_rt::say_out!("ready tokio-kv");
        tokio::task::spawn_blocking(stop).await?;
        if let Some(p) = &unix {
            let _ = std::fs::remove_file(p);
        }
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(())
}

/// The session driver's loop, on tokio: read, [`serve_bytes`] inline (the
/// protocol locks its own state: the store each shard), one write per read.
pub(crate) async fn conn<P: Protocol, S: AsyncRead + AsyncWrite + Unpin>(mut s: S, proto: Arc<P>) {
    let d = DriverConfig::default();
    let limits = BatchLimits {
        max_requests: d.max_batch_requests,
        max_output: d.max_batch_output,
    };
    let lane = Lane::single();
    let max = proto.max_request();
    let mut session = Default::default();
    let mut rbuf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out = Output::with_capacity(16 * 1024);
    let mut start = 0;
    loop {
        if start > 0 {
            rbuf.drain(..start);
            start = 0;
        }
        if rbuf.len() >= max {
            return;
        }
        rbuf.reserve(16 * 1024);
        match s.read_buf(&mut rbuf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            let r = serve_bytes(
                &*proto,
                &mut session,
                &rbuf[start..],
                &mut out,
                &lane,
                limits,
            );
            start += r.used;
            // One write of bytes: a shared body is copied in.
            out.settle();
            if !out.is_empty() && s.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
            match r.stop {
                Stop::NeedMore(_) => break,
                Stop::Write => {}
                // A response finished on the connection has no driver here:
                // the web server's, and the cache's multi-key get past a
                // mebibyte of values, which no benchmark sends (the peer
                // closes rather than answer part of it).
                Stop::Close | Stop::Finish { .. } => return,
                // (One lane, no color locks: never busy.)
                Stop::Budget | Stop::Elsewhere(_) | Stop::Busy(_) => tokio::task::yield_now().await,
            }
        }
    }
}
