//! A server of your own on the session driver: a shared counter over a line
//! protocol (`incr`, `get`, `quit`), served under any threading model.
//!
//! `cargo run --release --example counter -- 127.0.0.1:7001 symped:2`, then
//! `printf 'incr\nincr\nget\nquit\n' | nc 127.0.0.1 7001`. Ctrl-C (or
//! SIGTERM) stops it gracefully; a second one stops it at once.
//!
//! What a protocol gives the driver (`duality_models::Protocol`): how to find
//! one request at the front of the bytes read so far (`parse`, pure), and
//! how to execute it, appending its answer (`execute`). The driver does the
//! rest in every model alike: reads, pipelining, batching, hand-offs to
//! payload threads, writes, timeouts and the graceful stop.
use duality_models::{drive, Driver, DriverConfig, Flow, Model, Output, Parsed, Protocol};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The longest line taken.
const MAX_LINE: usize = 1024;

#[derive(Default)]
struct Counter {
    // An atomic: requests may run on several threads at once. State that
    // needs exclusion instead would give its requests a color
    // (`Protocol::color`): two requests of one color never run together.
    value: AtomicU64,
}

enum Line<'a> {
    Command(&'a [u8]),
    TooLong,
}

impl Protocol for Counter {
    type Session = ();
    type Request<'a> = Line<'a>;

    fn max_request(&self) -> usize {
        MAX_LINE
    }

    fn parse<'a>(&self, _: &mut (), input: &'a [u8]) -> Parsed<Line<'a>> {
        match input.iter().position(|&b| b == b'\n') {
            Some(i) if i < MAX_LINE => {
                Parsed::Request(Line::Command(input[..i].trim_ascii()), i + 1)
            }
            // Refused here: the driver itself would only close past the bound.
            Some(_) => Parsed::Request(Line::TooLong, input.len()),
            None if input.len() >= MAX_LINE => Parsed::Request(Line::TooLong, input.len()),
            None => Parsed::Incomplete(0),
        }
    }

    fn execute(&self, _: &mut (), line: Line<'_>, out: &mut Output) -> Flow {
        let n = match line {
            Line::Command(b"incr") => self.value.fetch_add(1, Relaxed) + 1,
            Line::Command(b"get") => self.value.load(Relaxed),
            Line::Command(b"quit") => return Flow::Close,
            Line::Command(_) => {
                out.extend_from_slice(b"ERROR unknown command\n");
                return Flow::Continue;
            }
            Line::TooLong => {
                out.extend_from_slice(b"ERROR line too long\n");
                return Flow::Close;
            }
        };
        out.extend_from_slice(format!("{n}\n").as_bytes());
        Flow::Continue
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7001".into());
    let addr: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| format!("{addr:?}: give ADDRESS:PORT ({e})"))?;
    let model: Model = args.next().as_deref().unwrap_or("symped:2").parse()?;
    // One driver for every connection: the protocol and its settings.
    let driver = Driver::new(
        Counter::default(),
        DriverConfig {
            idle_timeout: Some(Duration::from_secs(60)),
            ..DriverConfig::default()
        },
    );
    let signals = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];
    let mut first = signal_hook::iterator::Signals::new(signals)?;
    let server = duality_models::ServerBuilder::new()
        .name("counter")
        .model(model)
        .tcp(addr)
        .serve(move |conn, payload| drive(conn, payload, driver.clone()))?;
    println!("counter on {} under {model}", server.tcp_addrs()[0]);
    // The server runs on its own threads: wait for a stop signal here, then
    // let requests in flight finish (up to 5 s; a second signal cuts that
    // short).
    first.forever().next();
    let stop_now = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop_now.clone();
    let mut second = signal_hook::iterator::Signals::new(signals)?;
    std::thread::spawn(move || {
        if second.forever().next().is_some() {
            flag.store(true, Relaxed);
        }
    });
    let report = server.shutdown_or(Duration::from_secs(5), &stop_now);
    println!("stopped ({} connections cut off)", report.cut_off);
    Ok(())
}
