//! The same cache on tokio: `duality-kv`'s protocol and store, served by a
//! tokio multi-thread runtime, so the runtimes are compared with everything
//! else equal. Requests run inline on tokio's workers (the store's shard
//! locks keep it consistent), as `symped` does on duality.

use duality_kv::{
    execute, execute_error, parse, Cursor, Flow, Limits, ParseError, SimpleContext, Store,
    StoreConfig,
};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Serves until SIGTERM/SIGINT on `unix` and/or `tcp`, with `threads` workers
/// and `memory` bytes of items. Prints `ready` once listening.
pub fn serve(
    unix: Option<PathBuf>,
    tcp: Option<std::net::SocketAddr>,
    threads: usize,
    memory: usize,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    let store = Arc::new(Store::new(StoreConfig::new(memory)));
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
        println!("ready tokio-kv");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        if let Some(p) = &unix {
            let _ = std::fs::remove_file(p);
        }
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(())
}

fn now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(1)
}

async fn conn<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, store: Arc<Store>) {
    let limits = Limits::default();
    let mut rbuf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out = Vec::with_capacity(16 * 1024);
    let mut cur = Cursor::default();
    let started = now();
    loop {
        if cur.start > 0 {
            rbuf.drain(..cur.start);
            cur.start = 0;
        }
        rbuf.reserve(16 * 1024);
        let n = match s.read_buf(&mut rbuf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let _ = n;
        let ctx = SimpleContext {
            now: now(),
            started,
        };
        let mut close = false;
        while let Some(buf) = cur.rest(&rbuf) {
            match parse(buf, &limits) {
                Ok((req, used)) => {
                    close = execute(&req, &store, &ctx, &mut out) == Flow::Close;
                    cur.advance(used);
                }
                Err(ParseError::Incomplete) => break,
                Err(e) => {
                    close = execute_error(&e, &store, &ctx, &mut out) == Flow::Close;
                    cur.skip_error(&e, buf.len());
                }
            }
            if close {
                break;
            }
        }
        if !out.is_empty() {
            if s.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if close {
            return;
        }
    }
}
