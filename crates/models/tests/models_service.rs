//! The test service under every model, over TCP and Unix sockets, with many
//! concurrent connections and pipelined requests; every response is checked.

use duality_models::echo::{self, Detector, FRAME};
use duality_models::{Handoff, Model, ServerBuilder};
use duality_rt::net::{TcpStream, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

const CONNS: usize = 1000;
const PIPELINE: usize = 4;
const ROUNDS: usize = 2;

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a live local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

enum Target {
    Tcp(std::net::SocketAddr),
    Unix(std::path::PathBuf),
}

/// One client connection: ROUNDS rounds of PIPELINE pipelined requests.
async fn client(target: &Target, id: u64) -> Result<(), String> {
    let mut req = Vec::with_capacity(FRAME * PIPELINE);
    let mut resp = vec![0u8; FRAME * PIPELINE];
    enum S {
        T(TcpStream),
        U(UnixStream),
    }
    let s = match target {
        Target::Tcp(a) => S::T(TcpStream::connect(*a).await.map_err(|e| e.to_string())?),
        Target::Unix(p) => S::U(UnixStream::connect(p).await.map_err(|e| e.to_string())?),
    };
    for round in 0..ROUNDS as u64 {
        req.clear();
        let mut expect = Vec::new();
        for k in 0..PIPELINE as u64 {
            let color = (id * 7 + k) % 16;
            let value = id << 20 | round << 10 | k;
            req.extend_from_slice(&echo::request(color, value));
            expect.push((color, echo::answer(value)));
        }
        let r = match &s {
            S::T(s) => s.write_all(&req).await.and(s.read_exact(&mut resp).await),
            S::U(s) => s.write_all(&req).await.and(s.read_exact(&mut resp).await),
        };
        r.map_err(|e| format!("conn {id}: {e}"))?;
        for (i, want) in expect.iter().enumerate() {
            let got = echo::response(&resp[i * FRAME..]);
            if got != *want {
                return Err(format!("conn {id} req {i}: got {got:?}, want {want:?}"));
            }
        }
    }
    Ok(())
}

/// `model` as `--model` takes it, or `MODEL/adaptive` for the adaptive
/// hand-off.
fn run(model: &str, unix: bool) {
    raise_fd_limit();
    let (model, handoff) = match model.split_once('/') {
        Some((m, h)) => (m, h.parse().unwrap()),
        None => (model, Handoff::Always),
    };
    let model: Model = model.parse().unwrap();
    let d = Detector::new(200);
    // The whole model (two `seda` rows run at once): one socket each.
    let dir = std::env::temp_dir().join(format!(
        "duality-models-{}-{}-{handoff}",
        std::process::id(),
        model.to_string().replace(':', "_")
    ));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("s-{}.sock", unix as u8));
    let mut b = ServerBuilder::new()
        .model(model)
        .handoff(handoff)
        .max_conns(CONNS + 10);
    b = if unix {
        b.unix(&path)
    } else {
        b.tcp("127.0.0.1:0".parse().unwrap())
    };
    let d2 = d.clone();
    let server = b.serve(move |c, p| echo::serve(c, p, d2.clone())).unwrap();
    let target = if unix {
        Target::Unix(path.clone())
    } else {
        Target::Tcp(server.tcp_addrs()[0])
    };
    let target = std::sync::Arc::new(target);
    let _watchdog = watchdog(&server, model);
    let errors = duality_rt::block_on(async move {
        let mut hs = Vec::new();
        for id in 0..CONNS as u64 {
            let t = target.clone();
            hs.push(duality_rt::spawn(async move { client(&t, id).await }));
        }
        let mut errors = Vec::new();
        for h in hs {
            if let Err(e) = h.await.unwrap() {
                errors.push(e);
            }
        }
        errors
    });
    assert!(
        errors.is_empty(),
        "{model}: {} failures, first: {}",
        errors.len(),
        errors[0]
    );
    assert_eq!(
        d.jobs.load(Relaxed),
        (CONNS * PIPELINE * ROUNDS) as u64,
        "{model}"
    );
    assert_eq!(
        d.violations.load(Relaxed),
        0,
        "{model}: color exclusivity violated"
    );
    let stats = server.stats();
    assert_eq!(stats.total_connections, CONNS as u64);
    let report = server.shutdown(Duration::from_secs(5));
    assert_eq!(report.cut_off, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run takes a second or two. One that has not ended after two minutes
/// is stuck (CI once saw `unix::sped` under io_uring wait for ever with 28
/// connections left in the listener's backlog): write what the server's
/// threads say twice, a second apart (which counters still move), and end
/// the process, rather than hold CI until its own limit. Written to the
/// stderr descriptor itself: the harness's capture would drop it at abort.
/// Dropping the guard (the run ended, or panicked) stops the watch.
fn watchdog(server: &duality_models::Server, model: Model) -> Watchdog {
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let (stats, flag) = (server.stats_handle(), done.clone());
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(120);
        while std::time::Instant::now() < until {
            if flag.load(Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for _ in 0..2 {
            let report = format!("models_service {model} stuck: {:#?}\n", stats.stats());
            let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
            std::thread::sleep(Duration::from_secs(1));
        }
        std::process::abort();
    });
    Watchdog(done)
}

struct Watchdog(std::sync::Arc<AtomicBool>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

macro_rules! model_tests {
    ($($name:ident: $model:expr,)*) => {
        mod tcp {
            $(#[test] fn $name() { super::run($model, false) })*
        }
        mod unix {
            $(#[test] fn $name() { super::run($model, true) })*
        }
    };
}

model_tests! {
    sped: "sped",
    amped: "amped:2",
    seda: "seda:2:2",
    seda_s: "seda-s:2",
    amped_adaptive: "amped:2/adaptive",
    seda_adaptive: "seda:2:2/adaptive",
    seda_s_adaptive: "seda-s:2/adaptive",
    // One payload thread, every batch handed off: its lane takes no lock.
    seda_one_payload: "seda:1:1",
    seda_s_one_pair: "seda-s:1",
    // One network loop, adaptive: its inline batches lock only while a
    // colored job is out (amped:2/adaptive above has one network loop too).
    seda_one_loop_adaptive: "seda:1:2/adaptive",
    symped: "symped:2",
    thread_per_conn: "thread-per-conn",
    steal: "steal:2",
}
