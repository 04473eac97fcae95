//! A hostile client for fairness tests and benchmarks: it pipelines requests
//! as fast as it can write them and reads (and discards) the answers on a
//! second thread, so its connection is always ready on the server's side.
//! Loopback only; it stops when told.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Starts one flooding connection to `addr` that writes `batch` (many
/// pipelined requests) again and again until `stop` is set. Join the two
/// returned threads after setting it.
pub fn flood(addr: SocketAddr, batch: Vec<u8>, stop: Arc<AtomicBool>) -> Vec<JoinHandle<()>> {
    let s = TcpStream::connect(addr).expect("flood: connect");
    let mut r = s.try_clone().expect("flood: clone socket");
    // Short timeouts so both threads notice `stop` promptly.
    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
    let _ = r.set_read_timeout(Some(Duration::from_millis(200)));
    let stop2 = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while !stop2.load(Relaxed) {
            if let Ok(0) = r.read(&mut buf) {
                return;
            }
        }
    });
    let writer = std::thread::spawn(move || {
        let mut s = s;
        while !stop.load(Relaxed) {
            let _ = s.write(&batch);
        }
    });
    vec![reader, writer]
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
        .flat_map(|_| flood(addr, batch.to_vec(), stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = measure();
    stop.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    r
}
