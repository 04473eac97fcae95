//! A hostile client for fairness tests and benchmarks: it pipelines requests
//! as fast as it can write them and reads (and discards) the answers on a
//! second thread, so its connection is always ready on the server's side;
//! it connects again when the server closes it. Loopback only; it stops
//! when told.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Starts one flooding client to `addr` that writes `batch` (many pipelined
/// requests) again and again until `stop` is set, reading (and discarding)
/// the answers on a second thread. A write cut short (the server stopped
/// reading for a while) is finished before the next batch, so the server
/// always sees whole requests. When the server ends the connection (a
/// keep-alive limit, a reset) the client connects again, as a flooder would:
/// spinning on the dead socket instead left the server unflooded and burnt
/// the load generator's cores. Join the returned thread after setting
/// `stop`; it yields how many connections the client made. Panics if the
/// first connection fails.
pub fn flood(addr: SocketAddr, batch: Vec<u8>, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    assert!(!batch.is_empty(), "flood: an empty batch");
    let first = TcpStream::connect(addr).expect("flood: connect");
    std::thread::spawn(move || {
        let mut conn = Some(first);
        let mut made = 0u64;
        while !stop.load(Relaxed) {
            let Some(s) = conn.take().or_else(|| TcpStream::connect(addr).ok()) else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            made += 1;
            flood_one(s, &batch, &stop);
            // A server that ends every connection at once (refusing, or
            // resetting) gets a connection every few ms, not a connect storm.
            std::thread::sleep(Duration::from_millis(2));
        }
        made
    })
}

/// Floods one connection until `stop` is set or the connection fails.
fn flood_one(mut s: TcpStream, batch: &[u8], stop: &Arc<AtomicBool>) {
    // Short timeouts so both threads notice `stop` promptly.
    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
    let reader = s.try_clone().ok().map(|mut r| {
        let _ = r.set_read_timeout(Some(Duration::from_millis(200)));
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while !stop.load(Relaxed) {
                match r.read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if waits(&e) => {}
                    Err(_) => return,
                }
            }
        })
    });
    let mut at = 0;
    while !stop.load(Relaxed) {
        match s.write(&batch[at..]) {
            Ok(0) => break,
            Ok(n) => at = (at + n) % batch.len(),
            Err(e) if waits(&e) => {}
            Err(_) => break,
        }
    }
    // Ends the reader's read too.
    let _ = s.shutdown(std::net::Shutdown::Both);
    if let Some(r) = reader {
        let _ = r.join();
    }
}

/// A timed-out or interrupted socket call, to be retried.
fn waits(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
    matches!(e.kind(), WouldBlock | TimedOut | Interrupted)
}

/// Runs `measure` while `clients` flooding connections send `batch` to
/// `addr` (after 200 ms of flooding), then stops them.
pub fn while_flooded<R>(
    addr: SocketAddr,
    clients: usize,
    batch: &[u8],
    measure: impl FnOnce() -> R,
) -> R {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..clients)
        .map(|_| flood(addr, batch.to_vec(), stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = measure();
    stop.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::atomic::AtomicU64;

    /// A server that closes each connection after 10 KiB gets a new one
    /// from the same flooder (the old flooder spun on the dead socket).
    #[test]
    fn a_closed_connection_is_replaced() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let acc = accepted.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                acc.fetch_add(1, Relaxed);
                let mut buf = [0u8; 4096];
                let mut got = 0;
                while got < 10 << 10 {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n,
                    }
                }
            }
        });
        let stop = Arc::new(AtomicBool::new(false));
        let t = flood(addr, b"get k\r\n".repeat(64), stop.clone());
        let t0 = std::time::Instant::now();
        while accepted.load(Relaxed) < 3 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Relaxed);
        let made = t.join().unwrap();
        assert!(
            accepted.load(Relaxed) >= 3,
            "{} connections",
            accepted.load(Relaxed)
        );
        assert!(made >= 3, "{made} connections made");
    }

    /// While the server does not read, writes time out part-way through a
    /// batch; what arrives is still whole batches, back to back.
    #[test]
    fn a_write_cut_short_is_finished_before_the_next_batch() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // 64 KiB and a few bytes, no byte value at a fixed stride: a batch
        // begun again from its start shows as a byte out of place.
        let batch: Vec<u8> = (0..(64 << 10) + 7).map(|i| (i % 251) as u8).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let t = flood(addr, batch.clone(), stop.clone());
        let (mut c, _) = l.accept().unwrap();
        // Long enough for the buffers to fill and a few writes to time out.
        std::thread::sleep(Duration::from_millis(700));
        let mut buf = vec![0u8; 64 << 10];
        let mut at = 0usize;
        while at < 32 << 20 {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "the flooder closed after {at} bytes");
            for (i, &b) in buf[..n].iter().enumerate() {
                assert_eq!(
                    b,
                    batch[(at + i) % batch.len()],
                    "byte {} out of place",
                    at + i
                );
            }
            at += n;
        }
        stop.store(true, Relaxed);
        drop(c);
        assert_eq!(t.join().unwrap(), 1);
    }
}
