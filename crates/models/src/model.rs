//! The `Model` type: which threads do accept, network I/O and payload work.

use std::fmt;
use std::str::FromStr;

/// A threading model, written the way `--model` takes it.
///
/// | model | accept | network I/O | payload work |
/// |---|---|---|---|
/// | `sped` | the one thread | the one thread | inline |
/// | `amped:P` | acceptor thread | 1 network loop | P payload threads |
/// | `seda:N:P` | acceptor thread | N network loops | P payload threads, in turn (a color's batch after its own) |
/// | `seda-s:N` | acceptor thread | N network loops | N payload threads, loop i → thread i |
/// | `symped:N` | acceptor thread | N loops | inline in its loop |
/// | `thread-per-conn` | acceptor thread | one OS thread per connection | inline |
/// | `steal:N` | acceptor thread | N loops sharing ready tasks | inline |
///
/// Numbers left out default so that the busy threads match the cores:
/// `symped`, `steal`: all cores; `amped`: cores − 1 payload threads;
/// `seda`, `seda-s`: half the cores each for network and payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// Single process, event-driven: everything on one thread (Flash).
    Sped,
    /// Asymmetric multi-process event-driven: one network loop, `payload` helper threads.
    Amped {
        /// Payload threads.
        payload: usize,
    },
    /// Staged event-driven: `network` loops hand jobs in turn to `payload` threads.
    Seda {
        /// Network loops.
        network: usize,
        /// Payload threads.
        payload: usize,
    },
    /// SEDA with fixed pairs: network loop i always hands to payload thread i.
    SedaS {
        /// Pairs.
        n: usize,
    },
    /// Symmetric multi-process event-driven: `n` loops doing everything inline.
    Symped {
        /// Loops.
        n: usize,
    },
    /// One OS thread per connection, blocking I/O (the NPTL baseline).
    ThreadPerConn,
    /// `n` loops that balance ready tasks among themselves.
    Steal {
        /// Loops.
        n: usize,
    },
}

/// The names `Model` parses, for help texts.
pub const MODEL_NAMES: &str =
    "sped, amped[:P], seda[:N[:P]], seda-s[:N], symped[:N], thread-per-conn, steal[:N]";

impl Model {
    /// The model's name without numbers (`symped`, `seda-s`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Model::Sped => "sped",
            Model::Amped { .. } => "amped",
            Model::Seda { .. } => "seda",
            Model::SedaS { .. } => "seda-s",
            Model::Symped { .. } => "symped",
            Model::ThreadPerConn => "thread-per-conn",
            Model::Steal { .. } => "steal",
        }
    }

    /// Every model with this machine's default numbers.
    pub fn all_defaults() -> Vec<Model> {
        [
            "sped",
            "amped",
            "seda",
            "seda-s",
            "symped",
            "thread-per-conn",
            "steal",
        ]
        .iter()
        .map(|s| s.parse().expect("default model names parse"))
        .collect()
    }

    /// The threads that serve requests: network loops and payload threads
    /// (the acceptor left out; `thread-per-conn` has one per connection
    /// and none standing: 0).
    pub fn threads(&self) -> usize {
        match *self {
            Model::Sped => 1,
            Model::Amped { payload } => 1 + payload,
            Model::Seda { network, payload } => network + payload,
            Model::SedaS { n } => 2 * n,
            Model::Symped { n } | Model::Steal { n } => n,
            Model::ThreadPerConn => 0,
        }
    }

    /// Descriptors the model's threads hold whatever the connections: each
    /// loop thread (network loops, payload threads and the acceptor) an
    /// epoll or io_uring instance and an eventfd, and one to spare (an
    /// epoll loop takes three; 32 loops took 99). For a server's descriptor
    /// budget beside its connections'.
    pub fn thread_descriptors(&self) -> usize {
        3 * (self.threads() + 1)
    }

    /// True if payload jobs leave the network loop for a payload thread.
    pub fn hands_off(&self) -> bool {
        matches!(
            self,
            Model::Amped { .. } | Model::Seda { .. } | Model::SedaS { .. }
        )
    }
}

/// The number of cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Why a model string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseModelError(String);

impl fmt::Display for ParseModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseModelError {}

fn number(
    model: &str,
    what: &str,
    s: Option<&str>,
    default: usize,
) -> Result<usize, ParseModelError> {
    let Some(s) = s else { return Ok(default) };
    let n: usize = s.parse().map_err(|_| {
        ParseModelError(format!(
            "model {model:?}: {what} must be a positive whole number, not {s:?}"
        ))
    })?;
    if n == 0 {
        return Err(ParseModelError(format!(
            "model {model:?}: {what} must be at least 1"
        )));
    }
    if n > 1024 {
        return Err(ParseModelError(format!(
            "model {model:?}: {what} = {n} is more threads than this server supports (1024)"
        )));
    }
    Ok(n)
}

impl FromStr for Model {
    type Err = ParseModelError;

    fn from_str(s: &str) -> Result<Model, ParseModelError> {
        let mut parts = s.trim().split(':');
        let name = parts.next().unwrap_or("").to_ascii_lowercase();
        let a = parts.next();
        let b = parts.next();
        let extra = parts.next();
        // Defaults keep the busy threads at the core count: hand-off models
        // split the cores between network loops and payload threads (on 2
        // cores: amped:1, seda:1:1, seda-s:1), the others use them all.
        let c = cores();
        let half = (c / 2).max(1);
        let too_many = |max: usize| -> Result<(), ParseModelError> {
            let given = [a, b].iter().filter(|p| p.is_some()).count();
            if given > max || extra.is_some() {
                Err(ParseModelError(format!(
                    "model {s:?} takes at most {max} number(s); known models: {MODEL_NAMES}"
                )))
            } else {
                Ok(())
            }
        };
        let m = match name.as_str() {
            "sped" => {
                too_many(0)?;
                Model::Sped
            }
            "amped" => {
                too_many(1)?;
                Model::Amped {
                    payload: number(s, "payload threads", a, (c - 1).max(1))?,
                }
            }
            "seda" => {
                too_many(2)?;
                Model::Seda {
                    network: number(s, "network loops", a, half)?,
                    payload: number(s, "payload threads", b, half)?,
                }
            }
            "seda-s" | "seda_s" | "sedas" => {
                too_many(1)?;
                Model::SedaS {
                    n: number(s, "pairs", a, half)?,
                }
            }
            "symped" => {
                too_many(1)?;
                Model::Symped {
                    n: number(s, "loops", a, c)?,
                }
            }
            "thread-per-conn" | "thread_per_conn" | "tpc" => {
                too_many(0)?;
                Model::ThreadPerConn
            }
            "steal" => {
                too_many(1)?;
                Model::Steal {
                    n: number(s, "loops", a, c)?,
                }
            }
            _ => {
                return Err(ParseModelError(format!(
                    "unknown model {s:?}; known models: {MODEL_NAMES}"
                )))
            }
        };
        Ok(m)
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Model::Sped => f.write_str("sped"),
            Model::Amped { payload } => write!(f, "amped:{payload}"),
            Model::Seda { network, payload } => write!(f, "seda:{network}:{payload}"),
            Model::SedaS { n } => write!(f, "seda-s:{n}"),
            Model::Symped { n } => write!(f, "symped:{n}"),
            Model::ThreadPerConn => f.write_str("thread-per-conn"),
            Model::Steal { n } => write!(f, "steal:{n}"),
        }
    }
}

/// When the acceptor takes new connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AcceptPolicy {
    /// Knot-C: accept only while the network loops have spare capacity, so
    /// active connections are served first and new ones wait in the backlog.
    #[default]
    FavorActive,
    /// Knot-A: accept as fast as connections arrive.
    FavorAccept,
}

/// How new connections are spread over the network loops (seed 002's
/// "uneven load": a loop that got more long-lived or heavier connections
/// stays behind while the others idle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// One acceptor deals connections to the loops in turn.
    #[default]
    RoundRobin,
    /// One acceptor gives each connection to the loop with the fewest open
    /// connections (ties in turn).
    LeastLoaded,
    /// One TCP listener per network loop (`SO_REUSEPORT`), each loop
    /// accepting for itself and the kernel spreading connections by hash.
    /// Unix sockets, which cannot share a port, fall back to round robin.
    ReusePort,
}

impl FromStr for Balance {
    type Err = ParseModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "round-robin" | "rr" => Ok(Balance::RoundRobin),
            "least-loaded" => Ok(Balance::LeastLoaded),
            "reuseport" => Ok(Balance::ReusePort),
            _ => Err(ParseModelError(format!(
                "unknown accept balance {s:?}; use round-robin, least-loaded or reuseport"
            ))),
        }
    }
}

impl fmt::Display for Balance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Balance::RoundRobin => "round-robin",
            Balance::LeastLoaded => "least-loaded",
            Balance::ReusePort => "reuseport",
        })
    }
}

impl FromStr for AcceptPolicy {
    type Err = ParseModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "favor-active" | "knot-c" => Ok(AcceptPolicy::FavorActive),
            "favor-accept" | "knot-a" => Ok(AcceptPolicy::FavorAccept),
            _ => Err(ParseModelError(format!(
                "unknown accept policy {s:?}; use favor-active or favor-accept"
            ))),
        }
    }
}

impl fmt::Display for AcceptPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AcceptPolicy::FavorActive => "favor-active",
            AcceptPolicy::FavorAccept => "favor-accept",
        })
    }
}

/// Which CPUs a server's threads are pinned to (nginx's
/// `worker_cpu_affinity`). The i-th network loop and the i-th payload
/// thread go to the i-th CPU of the set (wrapping round), so `seda-s`'s
/// loop i and the payload thread it hands to share a core and the requests
/// they pass stay in its caches; the acceptor and `thread-per-conn`'s
/// connection threads stay unpinned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CpuAffinity {
    /// The kernel places every thread (memcached's and nginx's default).
    #[default]
    Off,
    /// The CPUs this process may use (`taskset`, a cpuset), in order.
    Auto,
    /// These CPUs, in this order (`0-3,6`; a CPU may repeat).
    List(Vec<usize>),
}

impl CpuAffinity {
    /// The CPU of the `i`-th network loop or payload thread, given the
    /// CPUs the process may use; `None` when off. A listed CPU outside
    /// `allowed` is an error naming both.
    pub fn cpu_for(&self, i: usize, allowed: &[usize]) -> Result<Option<usize>, ParseModelError> {
        let cpus = match self {
            CpuAffinity::Off => return Ok(None),
            CpuAffinity::Auto => allowed,
            CpuAffinity::List(l) => l,
        };
        if cpus.is_empty() {
            return Err(ParseModelError("no CPU to pin threads to".into()));
        }
        let cpu = cpus[i % cpus.len()];
        if !allowed.contains(&cpu) {
            return Err(ParseModelError(format!(
                "CPU {cpu} is not one this process may use ({})",
                duality_rt::affinity::format_cpus(allowed)
            )));
        }
        Ok(Some(cpu))
    }
}

impl FromStr for CpuAffinity {
    type Err = ParseModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            ParseModelError(format!(
                "bad CPU affinity {s:?}; use off, auto or a CPU list such as 0-3,6"
            ))
        };
        match s {
            "off" | "none" => return Ok(CpuAffinity::Off),
            "auto" => return Ok(CpuAffinity::Auto),
            _ => {}
        }
        let mut cpus = Vec::new();
        for part in s.split(',') {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let a: usize = a.trim().parse().map_err(|_| bad())?;
            let b: usize = b.trim().parse().map_err(|_| bad())?;
            // A range is bounded by what a CPU set can name (1024), so a
            // typo cannot allocate without bound.
            if a > b || b >= 1024 {
                return Err(bad());
            }
            cpus.extend(a..=b);
        }
        Ok(CpuAffinity::List(cpus))
    }
}

impl fmt::Display for CpuAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuAffinity::Off => f.write_str("off"),
            CpuAffinity::Auto => f.write_str("auto"),
            CpuAffinity::List(l) => f.write_str(&duality_rt::affinity::format_cpus(l)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_every_model() {
        assert_eq!("sped".parse::<Model>().unwrap(), Model::Sped);
        assert_eq!(
            "amped:3".parse::<Model>().unwrap(),
            Model::Amped { payload: 3 }
        );
        assert_eq!(
            "seda:2:4".parse::<Model>().unwrap(),
            Model::Seda {
                network: 2,
                payload: 4
            }
        );
        assert_eq!("seda-s:2".parse::<Model>().unwrap(), Model::SedaS { n: 2 });
        assert_eq!("symped:8".parse::<Model>().unwrap(), Model::Symped { n: 8 });
        assert_eq!(
            "thread-per-conn".parse::<Model>().unwrap(),
            Model::ThreadPerConn
        );
        assert_eq!("steal:2".parse::<Model>().unwrap(), Model::Steal { n: 2 });
    }

    #[test]
    fn defaults_come_from_the_core_count() {
        let c = cores();
        assert_eq!("symped".parse::<Model>().unwrap(), Model::Symped { n: c });
        let half = (c / 2).max(1);
        assert_eq!(
            "seda".parse::<Model>().unwrap(),
            Model::Seda {
                network: half,
                payload: half
            }
        );
        assert_eq!("seda-s".parse::<Model>().unwrap(), Model::SedaS { n: half });
        assert_eq!(
            "amped".parse::<Model>().unwrap(),
            Model::Amped {
                payload: (c - 1).max(1)
            }
        );
        assert_eq!(Model::all_defaults().len(), 7);
    }

    #[test]
    fn refuses_bad_values_clearly() {
        for bad in [
            "",
            "spud",
            "symped:0",
            "symped:x",
            "symped:-1",
            "sped:2",
            "seda:1:2:3",
            "amped:0",
            "steal:99999",
        ] {
            let e = bad.parse::<Model>().unwrap_err().to_string();
            assert!(e.contains("model"), "{bad}: {e}");
        }
        assert!("symped:0"
            .parse::<Model>()
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
        assert!("nope"
            .parse::<Model>()
            .unwrap_err()
            .to_string()
            .contains("known models"));
    }

    #[test]
    fn accept_policy_round_trips() {
        for p in [AcceptPolicy::FavorActive, AcceptPolicy::FavorAccept] {
            assert_eq!(p.to_string().parse::<AcceptPolicy>().unwrap(), p);
        }
        assert!("x".parse::<AcceptPolicy>().is_err());
        for b in [
            Balance::RoundRobin,
            Balance::LeastLoaded,
            Balance::ReusePort,
        ] {
            assert_eq!(b.to_string().parse::<Balance>().unwrap(), b);
        }
        assert!("random".parse::<Balance>().is_err());
    }

    fn any_model() -> impl Strategy<Value = Model> {
        let n = 1usize..=64;
        prop_oneof![
            Just(Model::Sped),
            n.clone().prop_map(|payload| Model::Amped { payload }),
            (n.clone(), n.clone()).prop_map(|(network, payload)| Model::Seda { network, payload }),
            n.clone().prop_map(|n| Model::SedaS { n }),
            n.clone().prop_map(|n| Model::Symped { n }),
            Just(Model::ThreadPerConn),
            n.prop_map(|n| Model::Steal { n }),
        ]
    }

    proptest! {
        #[test]
        fn display_then_parse_is_identity(m in any_model()) {
            prop_assert_eq!(m.to_string().parse::<Model>().unwrap(), m);
        }
    }

    #[test]
    fn cpu_affinity_parses_as_taskset_lists() {
        assert_eq!("off".parse::<CpuAffinity>().unwrap(), CpuAffinity::Off);
        assert_eq!("auto".parse::<CpuAffinity>().unwrap(), CpuAffinity::Auto);
        assert_eq!(
            "0-3,6".parse::<CpuAffinity>().unwrap(),
            CpuAffinity::List(vec![0, 1, 2, 3, 6])
        );
        assert_eq!(
            "1,0".parse::<CpuAffinity>().unwrap(),
            CpuAffinity::List(vec![1, 0])
        );
        for bad in ["", "x", "3-1", "0-", "1,,2", "0-99999999", "-1"] {
            let e = bad.parse::<CpuAffinity>().unwrap_err().to_string();
            assert!(e.contains("use off, auto or a CPU list"), "{bad:?}: {e}");
        }
        assert_eq!(CpuAffinity::List(vec![0, 1, 2, 6]).to_string(), "0-2,6");
    }

    #[test]
    fn the_ith_thread_goes_to_the_ith_cpu() {
        let allowed = [0, 1, 2, 3];
        assert_eq!(CpuAffinity::Off.cpu_for(5, &allowed).unwrap(), None);
        let auto: Vec<_> = (0..6)
            .map(|i| CpuAffinity::Auto.cpu_for(i, &allowed).unwrap())
            .collect();
        assert_eq!(auto, [0, 1, 2, 3, 0, 1].map(Some));
        let list = CpuAffinity::List(vec![3, 1]);
        assert_eq!(list.cpu_for(0, &allowed).unwrap(), Some(3));
        assert_eq!(list.cpu_for(3, &allowed).unwrap(), Some(1));
        let e = CpuAffinity::List(vec![1, 7])
            .cpu_for(1, &allowed)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("CPU 7 is not one this process may use (0-3)"),
            "{e}"
        );
    }
}
