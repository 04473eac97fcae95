//! The test service: a framed request/response protocol whose payload does a
//! little work and checks color exclusivity. Used by the models' tests and
//! by `duality bench models --service echo`.
//!
//! A request is 16 bytes: `color: u64 LE`, `value: u64 LE`. The response is
//! 16 bytes: the color and [`answer`]`(value)`. Requests may be pipelined;
//! all complete requests in a read are answered, in order, with one write.
//!
//! The payload job marks its color "in use" while it works: a second job of
//! the same color entering at the same time finds the flag set and counts a
//! violation. Zero violations under every model is the colors guarantee.

use crate::session::Output;
use crate::{Conn, Driver, DriverConfig, Flow, Parsed, Payload, Protocol};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// Bytes in one request or response.
pub const FRAME: usize = 16;

/// Exclusivity detector slots (colors are taken modulo this).
pub const COLORS: usize = 64;

/// Shared state of one test service.
pub struct Detector {
    in_use: Vec<AtomicBool>,
    /// Same-color jobs found running at the same time.
    pub violations: AtomicU64,
    /// Jobs run.
    pub jobs: AtomicU64,
    /// Simulated work per job (iterations of a small hash loop).
    pub work: u64,
}

impl Detector {
    /// A detector whose jobs each do `work` iterations.
    pub fn new(work: u64) -> Arc<Detector> {
        Arc::new(Detector {
            in_use: (0..COLORS).map(|_| AtomicBool::new(false)).collect(),
            violations: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            work,
        })
    }
}

/// What the service answers to `value`.
pub fn answer(value: u64) -> u64 {
    value.wrapping_mul(31).wrapping_add(7)
}

fn job(d: &Detector, color: u64, value: u64) -> u64 {
    let slot = &d.in_use[(color % COLORS as u64) as usize];
    if slot.swap(true, SeqCst) {
        d.violations.fetch_add(1, Relaxed);
    }
    let mut h = value;
    for i in 0..d.work {
        h = std::hint::black_box(h.rotate_left(5) ^ i);
    }
    std::hint::black_box(h);
    slot.store(false, SeqCst);
    d.jobs.fetch_add(1, Relaxed);
    answer(value)
}

/// The test service as a [`Protocol`]: 16-byte frames, colored by their
/// first word, executed under the model's color exclusion.
pub struct Echo(pub Arc<Detector>);

impl Protocol for Echo {
    type Session = ();
    type Request<'a> = (u64, u64);

    fn max_request(&self) -> usize {
        FRAME
    }

    fn parse(&self, _: &mut (), input: &[u8]) -> Parsed<(u64, u64)> {
        match input.get(..FRAME) {
            Some(f) => Parsed::Request(response(f), FRAME),
            None => Parsed::Incomplete(FRAME),
        }
    }

    fn color(&self, req: &(u64, u64)) -> u64 {
        req.0
    }

    fn peek_color(&self, _: &(), input: &[u8]) -> Option<u64> {
        input.get(..FRAME).map(|f| response(f).0)
    }

    fn execute(&self, _: &mut (), (color, value): (u64, u64), out: &mut Output) -> Flow {
        let r = job(&self.0, color, value);
        out.extend_from_slice(&color.to_le_bytes());
        out.extend_from_slice(&r.to_le_bytes());
        Flow::Continue
    }
}

/// Serves one connection until the client closes it (a driver of its own:
/// made per connection, which a server meant for many idle connections
/// would not do).
pub fn serve(
    conn: Conn,
    payload: Payload,
    d: Arc<Detector>,
) -> impl std::future::Future<Output = ()> + Send {
    crate::drive(conn, payload, Driver::new(Echo(d), DriverConfig::default()))
}

/// Encodes one request.
pub fn request(color: u64, value: u64) -> [u8; FRAME] {
    let mut f = [0u8; FRAME];
    f[..8].copy_from_slice(&color.to_le_bytes());
    f[8..].copy_from_slice(&value.to_le_bytes());
    f
}

/// Decodes one response into (color, value).
pub fn response(f: &[u8]) -> (u64, u64) {
    (
        u64::from_le_bytes(f[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(f[8..16].try_into().expect("8 bytes")),
    )
}
