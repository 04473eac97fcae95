//! The same handler under every threading model: pipelined requests, a
//! sendfile body, cached bodies sent alone and behind others, and the head
//! deadline (which under `thread-per-conn` is
//! enforced by the socket's own timeouts, not by a timer).

mod common;

use common::{fnv1a, read_file, TestServer, BIG, CACHED};
use duality_models::ServerBuilder;
use std::time::Duration;

fn exercise(model: &str) {
    let s = TestServer::with_model(model, model, |c| {
        c.head_timeout = Duration::from_millis(400)
    });
    exercise_on(&s, model);
}

/// [`exercise`] with `cached.bin` kept open and sent with `sendfile`, its
/// head in the same call (see [`exercise_under_faults`]).
fn exercise_kept(model: &str) {
    let s = TestServer::with_model(model, model, |c| {
        c.head_timeout = Duration::from_millis(400);
        c.sendfile_kept = 16 << 10;
    });
    exercise_on(&s, model);
    assert_kept_sent(&s, model);
}

/// More went out with `sendfile` than the four clients' `big.bin`:
/// `cached.bin` did too.
fn assert_kept_sent(s: &TestServer, model: &str) {
    let sent = s.state.stats().sendfile_bytes;
    assert!(sent > 4 * BIG as u64, "{model}: {sent} bytes by sendfile");
}

/// The same under injected faults (`duality_rt::faults`: short reads and
/// writes, spurious wake-ups, `EINTR`): nothing lost, reordered or hung.
/// Here `cached.bin` is large enough to be kept open and sent with
/// `sendfile`, its head in the same call (`Reply::flush_with`), so every
/// model runs that path too.
fn exercise_under_faults(model: &str) {
    let s = TestServer::with_builder(
        model,
        ServerBuilder::new()
            .model(model.parse().unwrap())
            .faults(duality_rt::faults::Faults::ALL),
        |c| {
            c.head_timeout = Duration::from_millis(400);
            c.sendfile_kept = 16 << 10;
        },
    );
    exercise_on(&s, model);
    assert_kept_sent(&s, model);
}

fn exercise_on(s: &TestServer, model: &str) {
    let big = fnv1a(&read_file(&s.www().join("big.bin")));
    let cached = read_file(&s.www().join("cached.bin"));
    let addr = s.addr;
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let cached = cached.clone();
            std::thread::spawn(move || {
                let mut c = common::Client::connect(addr);
                c.send(
                    "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /nope HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /sub/ HTTP/1.1\r\nHost: t\r\n\r\n",
                );
                assert_eq!(c.response(false).text(), "hello, world\n");
                assert_eq!(fnv1a(&c.response(false).body), big);
                assert_eq!(c.response(false).status, 404);
                assert_eq!(c.response(false).text(), "<h1>sub</h1>\n");
                // A cached body alone in its write (sent from the cache
                // entry), twice (a lookup, then a hit), and a range of it;
                // then behind and before other responses in one write.
                for _ in 0..2 {
                    assert_eq!(c.get("/cached.bin").body, cached);
                }
                let r = c.get_with("/cached.bin", "Range: bytes=7-15006\r\n");
                assert_eq!((r.status, &r.body[..]), (206, &cached[7..15007]));
                c.send(
                    "GET /cached.bin HTTP/1.1\r\nHost: t\r\n\r\n\
                     HEAD /cached.bin HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /cached.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=-5000\r\n\r\n\
                     GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
                     GET /cached.bin HTTP/1.1\r\nHost: t\r\n\r\n",
                );
                assert_eq!(c.response(false).body, cached);
                let h = c.response(true);
                assert_eq!(h.header("content-length"), Some("20000"));
                let r = c.response(false);
                assert_eq!((r.status, &r.body[..]), (206, &cached[CACHED - 5000..]));
                assert_eq!(c.response(false).text(), "hello, world\n");
                assert_eq!(c.response(false).body, cached);
            })
        })
        .collect();
    for t in clients {
        t.join().unwrap();
    }
    let mut c = s.client();
    c.send("GET /hello.txt HTTP/1.1\r\n");
    assert_eq!(c.response(false).status, 408, "{model}");
    assert!(c.closed_within(Duration::from_secs(3)), "{model}");
}

#[test]
fn sped() {
    exercise("sped");
}

#[test]
fn symped() {
    exercise("symped:2");
}

#[test]
fn amped() {
    exercise("amped:1");
}

#[test]
fn seda() {
    exercise("seda:1:1");
}

#[test]
fn seda_s() {
    exercise("seda-s:1");
}

/// The hand-off models with `--handoff adaptive` (cheap batches stay on the
/// network loop, the rest go to payload threads), and `amped` with two
/// payload threads, which connections are spread over by color.
#[test]
fn hand_off_policies() {
    for (model, handoff) in [
        ("amped:2", duality_models::Handoff::Always),
        ("amped:2", duality_models::Handoff::Adaptive),
        ("seda-s:1", duality_models::Handoff::Adaptive),
    ] {
        let s = TestServer::with_builder(
            model,
            ServerBuilder::new()
                .model(model.parse().unwrap())
                .handoff(handoff),
            |c| c.head_timeout = Duration::from_millis(400),
        );
        exercise_on(&s, model);
    }
}

#[test]
fn steal() {
    exercise("steal:2");
}

#[test]
fn thread_per_conn() {
    exercise("thread-per-conn");
    exercise_kept("thread-per-conn");
}

#[test]
fn faults_every_evented_model() {
    for model in ["sped", "symped:2", "amped:1", "seda:1:1", "steal:2"] {
        exercise_under_faults(model);
    }
}

/// Connections reset part-way (every third, after its 1st..7th read or
/// write) and `EMFILE` on every third accept and file open
/// (`duality_rt::faults` `reset`, `emfile`): a reset loses only its own
/// connection, an open that fails is a 503 on a connection that goes on,
/// every answer that arrives is whole and right, and the server keeps
/// serving.
#[test]
fn resets_and_emfile_every_evented_model() {
    let faults = duality_rt::faults::Faults {
        reset: true,
        emfile: true,
        ..duality_rt::faults::Faults::NONE
    };
    for model in ["sped", "symped:2", "amped:1", "seda:1:1", "steal:2"] {
        let s = TestServer::with_builder(
            model,
            ServerBuilder::new()
                .model(model.parse().unwrap())
                .faults(faults),
            // Every request opens big.bin (none kept open), so EMFILE has
            // opens to hit.
            |c| c.open_files = 0,
        );
        let big = fnv1a(&read_file(&s.www().join("big.bin")));
        let (mut whole, mut cut, mut unavailable) = (0, 0, 0);
        for _ in 0..24 {
            let mut c = s.client();
            c.send(
                "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n\
                 GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
            );
            let answers = [c.try_response(false), c.try_response(false)];
            for (i, r) in answers.iter().enumerate() {
                match r {
                    Ok(r) if r.status == 503 => unavailable += 1,
                    Ok(r) => {
                        assert_eq!(r.status, 200, "{model}");
                        if i == 0 {
                            assert_eq!(fnv1a(&r.body), big, "{model}");
                        } else {
                            assert_eq!(r.text(), "hello, world\n", "{model}");
                        }
                    }
                    Err(_) => {}
                }
            }
            match answers {
                [Ok(_), Ok(_)] => whole += 1,
                // Once cut, nothing follows.
                [Err(_), b] => {
                    assert!(b.is_err(), "{model}: an answer after a cut");
                    cut += 1;
                }
                _ => cut += 1,
            }
        }
        eprintln!("{model}: {whole} whole, {cut} cut, {unavailable} answers 503");
        assert!(whole >= 8 && cut >= 2, "{model}: {whole} whole, {cut} cut");
        // The faults follow the open onto the thread it runs on.
        assert!(unavailable >= 2, "{model}: no 503 for EMFILE");
        let served = (0..3).any(|_| {
            let mut c = s.client();
            c.send("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
            matches!(c.try_response(false), Ok(r) if r.status == 200)
        });
        assert!(served, "{model}: no answer after the resets");
    }
}
