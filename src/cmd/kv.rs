//! `duality kv`: the memcached-compatible cache, with memcached's flags.

use clap::Args;
use duality_kv::server::{driver, serve_conn, sweep_forever, KvConfig, KvState, Mode};
use duality_models::{Balance, Model, ServerBuilder};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct KvArgs {
    /// TCP port to listen on (0: no TCP listener, but on an -l address with
    /// a port of its own). Default 11211; with -s, 0, as memcached's -s
    /// turns TCP off (give -p for both).
    #[arg(short = 'p', long = "port")]
    port: Option<u16>,
    /// Interface to listen on, an address or a host name (every address it
    /// resolves to, as memcached's `-l localhost`), with a port of its own
    /// if given (`127.0.0.1:11212`, `[::1]:11212`; else -p's; an own port
    /// of 0 is one the kernel picks, as memcached's `-l 127.0.0.1:0`, and
    /// the ready line says which); repeat or comma-separate for several.
    #[arg(
        short = 'l',
        long = "listen",
        value_delimiter = ',',
        default_value = "127.0.0.1"
    )]
    listen: Vec<ListenHost>,
    /// Unix socket path to listen on: alone, unless -p (or an -l address
    /// with its own port) asks for TCP too.
    #[arg(short = 's', long = "unix-socket")]
    unix_socket: Option<PathBuf>,
    /// Worker threads: the N of the default model `symped:N` (default: all cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Item memory in megabytes (resident memory stays below this + 32 MiB,
    /// plus the large connection buffers `-o read_buf_mem_limit` bounds,
    /// plus up to ~200 KiB per client that stops reading once the kernel's
    /// socket memory is full).
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    memory_limit: usize,
    /// Keep item memory in this file (memcached's -e): after a graceful
    /// shutdown (SIGTERM, SIGINT, SIGUSR1, SIGQUIT, `shutdown`) a restart with the same -m and
    /// -I serves every unexpired item again; after a crash, or with other
    /// settings, it starts empty and says why. Put it on tmpfs (/dev/shm)
    /// for memory speed, or on disk to survive a reboot. One cache at a time
    /// may use a file (it is locked); a new one is readable by its user only,
    /// and an existing file that is not a memory file is refused. Its space
    /// is allocated as segments are first used, and a file system out of
    /// room makes the cache hold less (it evicts; an item its shard finds
    /// no room for is refused), never crash; a start where the file system
    /// cannot hold the whole file says so.
    #[arg(short = 'e', long = "memory-file")]
    memory_file: Option<PathBuf>,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "max-conns", default_value_t = 1024)]
    max_conns: usize,
    /// Largest item size, e.g. 1m, 512k or bytes (default 1m).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    max_item_size: usize,
    /// Verbose logging: -v logs the settings and what is ignored (-C,
    /// SIGHUP); -vv also logs
    /// commands and the first line of their answers (`<FD command`,
    /// `>FD answer`), as memcached's -vv (a command that closes the
    /// connection logs no answer; a command handed to another thread may
    /// log twice). `verbosity N` changes it at run time.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(flatten)]
    io: super::IoArg,
    #[command(flatten)]
    metrics: super::MetricsArgs,
    /// Threading model (sped, amped:P, seda:N:P, seda-s:N, symped:N,
    /// thread-per-conn, steal:N); default `symped:T` with -t T. Numbers left
    /// out make the busy threads match the cores (symped, steal: all; amped:
    /// cores − 1 payload threads; seda, seda-s: half the cores each for
    /// network and payload). -t is ignored beside another model.
    #[arg(long)]
    model: Option<Model>,
    #[command(flatten)]
    handoff: super::HandoffArg,
    /// How connections are spread over the network loops: round-robin (one
    /// acceptor deals them in turn), least-loaded (to the loop with the
    /// fewest open connections) or reuseport (a listener per loop,
    /// `SO_REUSEPORT`; the kernel spreads them).
    #[arg(long, default_value = "round-robin")]
    accept_balance: Balance,
    /// Let the kernel back memory with transparent huge pages (memcached's
    /// -L). Off by default: with them every thread's allocator arena and
    /// every idle connection costs far more resident memory.
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,
    /// Let the `shutdown` command stop the server gracefully, as SIGTERM
    /// does (memcached's -A). Without it `shutdown` is refused.
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// UDP port: only 0 (off) is accepted; UDP is not supported.
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,
    /// Protocol: auto (detected per connection; the default), ascii (text
    /// and meta only) or binary (binary only; the default with -S).
    #[arg(short = 'B', long = "protocol", value_parser = ["auto", "ascii", "binary"])]
    protocol: Option<String>,
    /// Most requests of one read served before the connection yields to
    /// others (memcached's -R; 64 here, 20 in memcached).
    #[arg(short = 'R', long = "max-reqs-per-event")]
    reqs_per_event: Option<usize>,
    /// Accepted for memcached compatibility and ignored: CAS stays enabled.
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// Run as a daemon (memcached's -d): the server goes on in a detached
    /// process of its own, and the command returns once it serves (exit 0,
    /// after the `ready` line) or has failed (its message and status).
    /// Standard input, output and error then go to /dev/null unless -v.
    /// The working directory is kept, so relative -s, -e and -P paths
    /// still name the same files.
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Write the process id to this file (removed at exit).
    #[arg(short = 'P', long = "pidfile")]
    pidfile: Option<PathBuf>,
    /// Print the version (`duality-kv <version>`) and exit.
    #[arg(short = 'V', long = "version")]
    version: bool,
    /// Assume the identity of USER when started as root (memcached's -u):
    /// supplementary groups are dropped and the user's group and id taken
    /// before the memory file, the sockets and the pid file are opened (so
    /// USER must be able to open them). Ignored when not run as root.
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,
    /// Permission bits of the Unix socket (-s), in octal (memcached's -a):
    /// 700, the default, lets only this user connect; 766 lets anyone.
    #[arg(short = 'a', long = "unix-mask", value_name = "MASK", default_value = "700",
          value_parser = parse_mask)]
    unix_mask: u32,
    /// Listen backlog: connections the kernel queues before they are
    /// accepted (memcached's -b, whose default is 1024; the kernel caps it
    /// at net.core.somaxconn).
    #[arg(short = 'b', long = "listen-backlog", value_name = "N",
          default_value_t = duality_models::DEFAULT_BACKLOG,
          value_parser = clap::value_parser!(i32).range(1..))]
    listen_backlog: i32,
    /// Never evict live items (memcached's -M): when memory is full, a
    /// store is answered `SERVER_ERROR out of memory storing object` (binary:
    /// status 0x82) until deletes, expiry or flush free room.
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// `flush_all` is refused: `CLIENT_ERROR flush_all not allowed`
    /// (binary: "Auth failure."), as memcached's -F.
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// `stats cachedump` and `lru_crawler metadump` are refused (memcached's
    /// -X).
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,
    /// `watch` (log streams) is refused: `CLIENT_ERROR watch commands not
    /// allowed`, as memcached's -W.
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,
    /// Raise the core-file size limit to its maximum (memcached's -r).
    #[arg(short = 'r', long = "enable-coredumps")]
    enable_coredumps: bool,
    /// Lock all memory in RAM, now and as it grows (memcached's -k). Only
    /// where locked memory may be unlimited (`ulimit -l unlimited`, or root
    /// allowed to raise it): under a limit every allocation past it would
    /// fail (CAP_IPC_LOCK alone does not do: -u drops it), so the server
    /// says so and runs unlocked. Locked, every page the
    /// allocator and thread stacks map stays resident (more than -m + 32 MiB
    /// is possible).
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Accepted and checked as memcached checks it (above 1), ignored: the
    /// store has no slab classes (memcached's -f).
    #[arg(short = 'f', long = "slab-growth-factor", value_name = "FACTOR")]
    slab_growth_factor: Option<f64>,
    /// Accepted and checked as memcached checks it (above 0), ignored: the
    /// store has no slab classes (memcached's -n).
    #[arg(short = 'n', long = "slab-min-size", value_name = "BYTES")]
    slab_min_size: Option<i64>,
    /// The delimiter between key prefixes and ids in `stats detail`
    /// (memcached's -D): only `:`, the default, is supported.
    #[arg(short = 'D', value_name = "CHAR")]
    prefix_delimiter: Option<String>,
    /// Binary connections must authenticate first with SASL PLAIN
    /// (memcached's -S): the users are the `user:password` lines of the
    /// file named by the environment variable MEMCACHED_SASL_PWDB
    /// (memcached's password-file format; a Cyrus sasldb is not read).
    /// Binary protocol only. Until a connection authenticates, any request
    /// but version and the SASL ones is answered "Auth failure." and it
    /// closes. The file is read once at start; the password crosses the
    /// network in clear
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,
    /// Connections must authenticate first (memcached's -Y, ASCII
    /// authentication): FILE holds `user:password` lines; a connection's
    /// first request is `set ANYKEY 0 0 N` with data `user password`
    /// (answered STORED, nothing stored), and until then every request is
    /// answered `CLIENT_ERROR unauthenticated`. Text protocol only after
    /// it. Read once at start (before -u drops privileges, so the file may
    /// be readable by root alone). The password crosses the network in
    /// clear: for a private network, not for one others can read
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    auth_file: Option<PathBuf>,
    /// Refused: TLS is not supported (memcached's -Z); put a TLS proxy in
    /// front.
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_ssl: bool,
    /// memcached's extended options, comma-separated (repeatable). Applied:
    /// idle_timeout=SECONDS (close idle connections), lru_crawler /
    /// no_lru_crawler (background sweep on/off), lru_crawler_sleep=N,
    /// lru_crawler_tocrawl=N, read_buf_mem_limit=MB (connection buffers of
    /// values being received and responses being sent, each over 64 KiB,
    /// together at most this many MB; a value's buffer grows as its bytes
    /// arrive, up to 4x what came; past it a set gets SERVER_ERROR out
    /// of memory and a get's answer goes out a piece under 64 KiB at a
    /// time. Default: -m, at least 64; 0: no limit).
    /// Accepted and ignored (nothing to tune here):
    /// modern, no_modern, hashpower=N, slab_reassign, slab_automove[=N],
    /// lru_maintainer, no_lru_maintainer, maxconns_fast, no_maxconns_fast,
    /// hash_algorithm=murmur3|jenkins|xxh3, tail_repair_time=N,
    /// no_hashexpand. Any other option is refused (exit status 1).
    #[arg(short = 'o', long = "extended", value_delimiter = ',', action = clap::ArgAction::Append)]
    extended: Vec<String>,
}

/// What `-o` options change.
#[derive(Debug, Default, PartialEq, Eq)]
struct Extended {
    idle_timeout: Option<Duration>,
    buffer_limit: Option<usize>,
    lru_crawler: Option<bool>,
    crawler_sleep: Option<u32>,
    crawler_tocrawl: Option<u32>,
}

/// C's `atoi`: optional spaces and sign, then leading digits; 0 if none.
fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    let v = digits
        .parse::<i64>()
        .unwrap_or(if digits.is_empty() { 0 } else { i64::MAX });
    if neg {
        -v
    } else {
        v
    }
}

/// Parses memcached's `-o` suboptions. `Err` holds the message memcached
/// prints (for options it refuses) or says why duality kv refuses an option
/// memcached knows but that has no meaning here.
fn parse_extended(opts: &[String]) -> Result<Extended, String> {
    let mut x = Extended::default();
    for opt in opts.iter().filter(|o| !o.is_empty()) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt.as_str(), None),
        };
        let numeric =
            |name: &str| value.ok_or_else(|| format!("Missing numeric argument for {name}"));
        match key {
            "modern" | "no_modern" | "slab_reassign" | "slab_automove" | "lru_maintainer"
            | "no_lru_maintainer" | "maxconns_fast" | "no_maxconns_fast" | "no_hashexpand"
            | "tail_repair_time" => {}
            "hashpower" => {
                let n = atoi(numeric("hashpower")?);
                if n < 12 {
                    return Err(format!("Initial hashtable multiplier of {n} is too low"));
                }
                if n > 64 {
                    return Err(format!(
                        "Initial hashtable multiplier of {n} is too high\n\
                         Choose a value based on \"STAT hash_power_level\" from a running instance"
                    ));
                }
            }
            "hash_algorithm" => match value {
                Some("murmur3" | "jenkins" | "xxh3") => {}
                _ => return Err("Unknown hash_algorithm option (jenkins, murmur3, xxh3)".into()),
            },
            "lru_crawler" => x.lru_crawler = Some(true),
            "no_lru_crawler" => x.lru_crawler = Some(false),
            "lru_crawler_sleep" => {
                let n = atoi(numeric("lru_crawler_sleep")?);
                if !(0..=1_000_000).contains(&n) {
                    return Err("LRU crawler sleep must be between 0 and 1 second".into());
                }
                x.crawler_sleep = Some(n as u32);
            }
            "lru_crawler_tocrawl" => {
                let n = value.ok_or("Missing lru_crawler_tocrawl value")?;
                x.crawler_tocrawl = Some(atoi(n).max(0) as u32);
            }
            "read_buf_mem_limit" => {
                // memcached reads it with safe_strtoul: junk is refused
                // (0 would silently mean no limit).
                let n: u64 = numeric("read_buf_mem_limit")?
                    .trim()
                    .parse()
                    .map_err(|_| "could not parse argument to read_buf_mem_limit".to_string())?;
                x.buffer_limit = Some((n as usize).saturating_mul(1 << 20));
            }
            "idle_timeout" => {
                // memcached reads it with atoi: 0 (or junk) means never.
                let n = atoi(numeric("idle_timeout")?);
                if n > i64::from(i32::MAX) {
                    // memcached's int: a deadline that far has no meaning.
                    return Err(format!(
                        "idle_timeout {n} is too large (at most {})",
                        i32::MAX
                    ));
                }
                x.idle_timeout = (n > 0).then(|| Duration::from_secs(n as u64));
            }
            "ext_path"
            | "ssl_chain_cert"
            | "ssl_key"
            | "track_sizes"
            | "slab_chunk_max"
            | "temporary_ttl"
            | "watcher_logbuf_size"
            | "worker_logbuf_size"
            | "proxy_config"
            | "memory_file"
            | "hot_lru_pct"
            | "warm_lru_pct" => {
                return Err(format!(
                    "-o {key}: not supported by duality kv (see the README's deviations from memcached)"
                ));
            }
            _ => return Err(format!("Illegal suboption \"{opt}\"")),
        }
    }
    Ok(x)
}

/// `-a`: permission bits in octal, as memcached reads them (`strtol(…, 8)`).
fn parse_mask(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim(), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!(
            "{s:?} is not an octal mask of permission bits (e.g. 700 or 766)"
        )),
    }
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mult) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1 << 10),
        Some('m') => (&s[..s.len() - 1], 1 << 20),
        _ => (&s[..], 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (use bytes, or a number with k or m)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// `-c` as the descriptor limit allows it, and how many refusals may
/// linger beside the connections: the soft limit is raised to fit (memcached
/// does the same); where the hard limit is lower, the server takes fewer
/// connections and says so, so that the rest get memcached's "Too many open
/// connections" answer instead of waiting unaccepted. The server's own
/// descriptors (`reserved`: [`super::standing_descriptors`]) and the
/// refusals lingered over are counted in: these get their usual share
/// ([`duality_models::lingering_refusals`]) where the limit leaves it, at
/// least 4, so that a `-c` near the limit still takes its connections.
fn fit_max_conns(max_conns: usize, reserved: u64) -> anyhow::Result<(usize, usize)> {
    const MIN_LINGERING: u64 = 4;
    let lingering = duality_models::lingering_refusals;
    let want = (max_conns + lingering(max_conns)) as u64 + reserved;
    let Some(soft) = super::raise_nofile(want) else {
        return Ok((max_conns, lingering(max_conns)));
    };
    if soft >= want {
        return Ok((max_conns, lingering(max_conns)));
    }
    let fits = (soft.saturating_sub(reserved + MIN_LINGERING) as usize).min(max_conns);
    anyhow::ensure!(
        fits > 0,
        "-c {max_conns}: `ulimit -n` {soft} leaves no descriptors for connections \
         (the server keeps {reserved} for itself)"
    );
    let left = soft - reserved - fits as u64;
    if fits < max_conns {
        duality_rt::say!(
            "duality kv: warning: -c {max_conns} needs {} descriptors but `ulimit -n` allows \
             {soft} (and cannot be raised); taking at most {fits} connections",
            max_conns as u64 + reserved + MIN_LINGERING
        );
    }
    Ok((fits, lingering(fits).min(left as usize)))
}

pub fn run(a: KvArgs) -> anyhow::Result<()> {
    // The servers' own writes (memory file, logs): not their children's.
    super::process::ignore_file_size_signal();
    if a.version {
        // memcached prints `memcached 1.6.x`.
        duality_rt::say_out!("duality-kv {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    let extended = match parse_extended(&a.extended) {
        Ok(x) => x,
        Err(message) => {
            // memcached's words and exit status, without a prefix.
            duality_rt::say!("{message}");
            std::process::exit(1);
        }
    };
    let io = a.io.apply();
    anyhow::ensure!(
        !a.enable_ssl,
        "-Z: TLS is not supported by duality kv; terminate TLS in front of it (a TLS proxy)"
    );
    if let Some(f) = a.slab_growth_factor {
        anyhow::ensure!(f > 1.0, "-f: Factor must be greater than 1");
    }
    if let Some(n) = a.slab_min_size {
        anyhow::ensure!(n > 0, "-n: Chunk size must be greater than 0");
    }
    if let Some(d) = &a.prefix_delimiter {
        anyhow::ensure!(
            d == ":",
            "-D {d:?}: only ':' is supported as the stats detail delimiter"
        );
    }
    anyhow::ensure!(
        a.udp_port == 0,
        "-U {}: UDP is not supported (duality kv serves TCP and Unix sockets); use -U 0",
        a.udp_port
    );
    if let Some(0) = a.reqs_per_event {
        anyhow::bail!("-R must be at least 1");
    }
    let protocol = match a.protocol.as_deref() {
        Some("ascii") => Mode::Text,
        Some("binary") => Mode::Binary,
        // memcached's -S makes binary the default.
        None if a.enable_sasl => Mode::Binary,
        _ => Mode::Unknown,
    };
    let sasl = if a.enable_sasl {
        // memcached's words for the protocols SASL excludes.
        anyhow::ensure!(
            protocol == Mode::Binary,
            "-S: You cannot allow the ASCII protocol while using SASL (-B binary)"
        );
        anyhow::ensure!(
            a.auth_file.is_none(),
            "-S and -Y: SASL (binary) and ASCII authentication exclude each other; choose one"
        );
        let Some(path) = std::env::var_os("MEMCACHED_SASL_PWDB") else {
            anyhow::bail!(
                "-S: set MEMCACHED_SASL_PWDB to a password file of `user:password` lines \
                 (memcached's password-file format; duality kv does not read a Cyrus sasldb)"
            );
        };
        let path = PathBuf::from(path);
        let (users, ignored) =
            duality_kv::auth::AuthFile::load_pwdb(&path).map_err(anyhow::Error::msg)?;
        for line in ignored {
            duality_rt::say!(
                "duality kv: warning: {} line {line} has no ':' and is ignored (as memcached ignores it)",
                path.display()
            );
        }
        if users.is_empty() {
            duality_rt::say!(
                "duality kv: warning: {} names no user: no connection can authenticate",
                path.display()
            );
        }
        Some(users)
    } else {
        None
    };
    let auth = match &a.auth_file {
        Some(path) => {
            anyhow::ensure!(
                protocol != Mode::Binary,
                "-Y: ASCII authentication needs the ascii protocol (-B ascii or auto)"
            );
            Some(duality_kv::auth::AuthFile::load(path).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    anyhow::ensure!(a.memory_limit > 0, "-m must be at least 1 (megabyte)");
    anyhow::ensure!(a.max_conns > 0, "-c must be at least 1");
    match a.threads {
        Some(0) => anyhow::bail!("-t must be at least 1"),
        // The models' own bound (`--model symped:N` refuses the same).
        Some(t) if t > 1024 => anyhow::bail!("-t {t}: at most 1024 threads"),
        Some(t) if t > 64 => duality_rt::say!(
            "duality kv: warning: -t {t}: a high number of worker threads is not recommended \
             (memcached warns past 64); the cores here: {}",
            duality_models::cores()
        ),
        _ => {}
    }
    let model = a.model.unwrap_or(Model::Symped {
        n: a.threads.unwrap_or_else(duality_models::cores),
    });
    let addrs: usize = a.listen.iter().map(|h| h.ips.len()).sum();
    let reserved = super::standing_descriptors(
        model,
        a.accept_balance,
        addrs,
        usize::from(a.unix_socket.is_some()),
    );
    let (max_conns, lingering) = fit_max_conns(a.max_conns, reserved)?;
    // memcached's -d: the rest in a detached child; this process returns
    // once it serves. Before memory is locked and the memory file's lock
    // taken (neither passes to a child), and before any thread starts.
    let daemon = a.daemon.then(super::process::daemonize).transpose()?;
    if a.enable_coredumps {
        super::process::enable_coredumps().map_err(|e| anyhow::anyhow!("-r: {e}"))?;
    }
    if a.lock_memory {
        // memcached warns and runs on when mlockall fails.
        if let Err(e) = super::process::lock_memory() {
            duality_rt::say!("duality kv: warning: -k: {e}");
        }
    }
    // As memcached: the limits raised (and memory locked) as root, then root
    // dropped before anything is opened or bound, and before any thread
    // starts.
    if let Some(user) = &a.user {
        super::process::assume_user(user, "-u", "kv")?;
    }
    if let (Some(t), Some(m)) = (a.threads, a.model) {
        if m != (Model::Symped { n: t }) {
            duality_rt::say!("duality kv: -t {t} ignored: --model {m} sets the threads");
        }
    }
    // Registered before the memory file is opened and restored (seconds for
    // a large one), so that a stop signal meanwhile waits for the graceful
    // path (the server then stops as soon as it is up) instead of killing
    // the process with the file open, which the next start must throw away;
    // and before the listeners open, so neither a signal nor the `shutdown`
    // command can arrive before that path is in place.
    // SIGUSR1 is memcached's graceful stop (its warm restart with -e);
    // SIGQUIT is nginx's (and `duality http`'s), where memcached would dump
    // core and lose a memory file's items; SIGHUP is caught so that it does
    // not kill the cache (memcached ignores it too).
    // Before any thread starts (the reclaimer below): see catch_signals.
    let mut signals = super::process::catch_signals(&[
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGUSR1,
        signal_hook::consts::SIGQUIT,
        signal_hook::consts::SIGHUP,
    ])?;
    // `stats threads`: the threads that serve, as the model runs them.
    let threads = model.threads();
    if model == Model::ThreadPerConn {
        // Connection threads come and go: allocate from the C library's
        // shared arenas, and give freed memory back.
        crate::alloc::use_system();
        crate::alloc::spawn_reclaimer(Duration::from_secs(1))?;
    }
    // Every loop thread gives back what it freed once it falls idle (memory
    // of closed connections would otherwise stay with the thread).
    duality_rt::set_default_idle_hook(crate::alloc::collect);
    // -p 0 turns TCP off for the addresses without a port of their own
    // (memcached's -p 0); an own port of 0 asks the kernel for a free one
    // (memcached's -l 127.0.0.1:0).
    let tcp_port = |h: &ListenHost| h.port.is_some() || a.port() != 0;
    let has_tcp = a.listen.iter().any(tcp_port);
    anyhow::ensure!(
        has_tcp || a.unix_socket.is_some(),
        "nothing to listen on: give a port (-p), an address with a port (-l) or a Unix socket (-s); \
         port 0 turns TCP off, as memcached's -p 0"
    );
    let config = KvConfig {
        memory_limit: a.memory_limit << 20,
        max_item_size: a.max_item_size,
        max_conns,
        threads,
        model: model.to_string(),
        verbosity: a.verbose as u32,
        enable_shutdown: a.enable_shutdown,
        protocol,
        requests_per_event: a
            .reqs_per_event
            .unwrap_or(KvConfig::default().requests_per_event),
        idle_timeout: extended.idle_timeout,
        buffer_limit: extended.buffer_limit,
        memory_file: a.memory_file.clone(),
        evictions: !a.disable_evictions,
        disable_flush_all: a.disable_flush_all,
        disable_dumping: a.disable_dumping,
        disable_watch: a.disable_watch,
        listen_settings: listen_settings(&a),
        auth,
        sasl,
        ..KvConfig::default()
    };
    let state = KvState::new(config)?;
    // Until the server is up, a failed start (a port in use, a bad pid file
    // path) leaves the memory file as it found it: nothing was served, so
    // its items are good for the next start.
    let mut keep_file = KeepFile(a.memory_file.as_ref().map(|_| &state.store));
    // A stop signal while the file was restored: stop before serving.
    use signal_hook::consts::SIGHUP;
    let hup_ignored = || {
        if a.verbose > 0 {
            duality_rt::say!("duality kv: SIGHUP ignored (there is no configuration to reload)");
        }
    };
    let stop = signals.pending().find(|&s| match s {
        SIGHUP => {
            hup_ignored();
            false
        }
        _ => true,
    });
    if let Some(sig) = stop {
        let name = signal_hook::low_level::signal_name(sig).unwrap_or("a stop signal");
        duality_rt::say!("duality kv: {name} while starting: stopped before serving");
        if let Some(path) = &a.memory_file {
            keep_file.0 = None;
            close_memory_file(&state, path);
        }
        return Ok(());
    }
    let crawler = state.store.crawler();
    if let Some(on) = extended.lru_crawler {
        crawler.set_enabled(on);
    }
    if let Some(us) = extended.crawler_sleep {
        crawler.set_sleep(us);
    }
    if let Some(n) = extended.crawler_tocrawl {
        crawler.set_tocrawl(n);
    }
    let handle = signals.handle();
    state.on_shutdown(move || handle.close());
    let mut b = ServerBuilder::new()
        .name("kv")
        .model(model)
        .handoff(a.handoff.handoff)
        .balance(a.accept_balance)
        .max_conns(max_conns)
        .lingering_refusals(lingering)
        .long_poll_threshold(a.metrics.long_poll_threshold())
        .idle_spin(a.io.idle_spin())
        .cpu_affinity(a.io.cpu_affinity.clone())
        .loop_slice(a.io.loop_slice())
        .payload_spin(a.io.payload_spin())
        .refusal_message("ERROR Too many open connections\r\n")
        .backlog(a.listen_backlog)
        .unix_mode(Some(a.unix_mask));
    // `-l localhost,127.0.0.1` binds 127.0.0.1 once; `-p 0` (no TCP)
    // leaves out the addresses without a port of their own.
    let mut tcp: Vec<SocketAddr> = Vec::new();
    for h in a.listen.iter().filter(|h| tcp_port(h)) {
        for ip in &h.ips {
            let addr = SocketAddr::new(*ip, h.port.unwrap_or(a.port()));
            if !tcp.contains(&addr) {
                tcp.push(addr);
            }
        }
    }
    for addr in tcp {
        b = b.tcp(addr);
    }
    if let Some(p) = &a.unix_socket {
        b = b.unix(p);
    }
    let d = driver(state.clone());
    let server = b.serve(move |c, p| serve_conn(c, p, d.clone()))?;
    // Written once the sockets are bound (a second instance that cannot
    // bind must not replace, then remove, the running one's file), before
    // the ready line, so whoever waits for it finds the file. If it cannot
    // be, the server stops before the memory file is closed.
    let _pidfile = match a.pidfile.as_deref().map(|p| super::PidFile::write(p, "-P")) {
        Some(Err(e)) => {
            server.shutdown(Duration::ZERO);
            return Err(e);
        }
        p => p.transpose()?,
    };
    // The metrics listener starts once the server's stats are attached: a
    // scrape before that showed the cache's families without the runtime's.
    state.attach(server.stats_handle());
    let st = state.clone();
    let _metrics = match a.metrics.start("kv", move || st.prometheus()) {
        Err(e) => {
            server.shutdown(Duration::ZERO);
            return Err(e);
        }
        Ok(m) => m,
    };
    let mut server = server;
    keep_file.0 = None;
    let st = state.clone();
    server.spawn_background(move |p| sweep_forever(p, st));
    let mut at: Vec<String> = server.tcp_addrs().iter().map(|a| a.to_string()).collect();
    if let Some(p) = &a.unix_socket {
        at.push(p.display().to_string());
    }
    duality_rt::say_out!(
        "ready kv {} model {}{} io {} on {}",
        env!("CARGO_PKG_VERSION"),
        model,
        a.handoff.label(model),
        io,
        at.join(", ")
    );
    a.io.say_affinity("duality kv");
    if a.unix_socket.is_some() && !has_tcp {
        duality_rt::say!(
            "duality kv: no TCP port: listening on the Unix socket only, as memcached with -s; \
             give -p PORT (or -l ADDR:PORT) for TCP too"
        );
    }
    if a.verbose > 0 {
        duality_rt::say!(
            "duality kv: settings: -m {} MiB, -c {max_conns}, -I {} bytes, -R {}, -B {}, \
             evictions {}",
            a.memory_limit,
            a.max_item_size,
            a.reqs_per_event.unwrap_or(64),
            a.protocol
                .as_deref()
                .unwrap_or(if a.enable_sasl { "binary" } else { "auto" }),
            if a.disable_evictions {
                "off (-M)"
            } else {
                "on"
            },
        );
    }
    if a.disable_cas && a.verbose > 0 {
        duality_rt::say!("duality kv: -C ignored: CAS stays enabled");
    }
    if let Some(d) = daemon {
        d.ready(a.verbose > 0);
    }
    // Ends on SIGTERM/SIGINT/SIGUSR1/SIGQUIT, or when `shutdown` closes the
    // handle.
    for sig in signals.forever() {
        if sig != SIGHUP {
            break;
        }
        hup_ignored();
    }
    use signal_hook::consts::{SIGINT, SIGQUIT, SIGTERM, SIGUSR1};
    let now = super::second_signal("kv", &[SIGTERM, SIGINT, SIGUSR1, SIGQUIT], signals);
    // Watchers' streams end (a blocking socket's only learns it so).
    state.store.watch().close();
    let report = server.shutdown_or(Duration::from_secs(5), &now);
    if report.cut_off > 0 {
        duality_rt::say!(
            "duality kv: {} connection{} cut off at shutdown",
            report.cut_off,
            if report.cut_off == 1 { "" } else { "s" }
        );
    }
    if let Some(path) = &a.memory_file {
        // Requests have stopped: the file now records a consistent cache.
        close_memory_file(&state, path);
    }
    Ok(())
}

/// Closes the memory file at `path` and says what it kept.
fn close_memory_file(state: &KvState, path: &std::path::Path) {
    match state.store.close(now_seconds()) {
        Ok(()) => match state.store.memory_file_moved() {
            Some("removed") => duality_rt::say!(
                "duality kv: memory file {}: removed while the cache ran: its {} items \
                 are lost",
                path.display(),
                state.store.stats().curr_items
            ),
            Some(what) => duality_rt::say!(
                "duality kv: memory file {}: closed, {} items kept in the file this \
                 cache opened, which that path no longer names ({what} while it ran): \
                 a start there does not find them",
                path.display(),
                state.store.stats().curr_items
            ),
            None => duality_rt::say!(
                "duality kv: memory file {}: closed, {} items kept",
                path.display(),
                state.store.stats().curr_items
            ),
        },
        Err(e) => duality_rt::say!(
            "duality kv: memory file {}: {e}: the next start begins empty",
            path.display()
        ),
    }
}

/// The store's clock now (Unix seconds).
fn now_seconds() -> duality_kv::store::Time {
    duality_rt::time::unix_seconds_coarse().max(1) as duality_kv::store::Time
}

/// Closes the store's memory file when dropped while it holds one: a start
/// that fails before serving keeps the file's items (see `Store::close`).
struct KeepFile<'a>(Option<&'a duality_kv::Store>);

impl Drop for KeepFile<'_> {
    fn drop(&mut self) {
        if let Some(store) = self.0 {
            if let Err(e) = store.close(now_seconds()) {
                duality_rt::say!("duality kv: memory file: {e}: the next start begins empty");
            }
        }
    }
}

/// A `-l` value: an address or a host name (and what it resolved to),
/// with a port of its own where given (`127.0.0.1:11212`,
/// `[::1]:11212`, `localhost:11212`), as memcached takes it; without one,
/// `-p`'s.
#[derive(Clone, Debug)]
struct ListenHost {
    name: String,
    ips: Vec<IpAddr>,
    port: Option<u16>,
}

impl std::str::FromStr for ListenHost {
    type Err = String;

    fn from_str(s: &str) -> Result<ListenHost, String> {
        let name = s.to_owned();
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(ListenHost {
                name,
                ips: vec![a.ip()],
                port: Some(a.port()),
            });
        }
        let literal = s.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        if let Ok(ip) = literal.unwrap_or(s).parse::<IpAddr>() {
            return Ok(ListenHost {
                name,
                ips: vec![ip],
                port: None,
            });
        }
        if let Some((host, p)) = s.rsplit_once(':') {
            let port = p
                .parse::<u16>()
                .map_err(|_| format!("{s:?}: the port must be a number up to 65535"))?;
            return Ok(ListenHost {
                name,
                ips: super::resolve_host(host)?,
                port: Some(port),
            });
        }
        Ok(ListenHost {
            name,
            ips: super::resolve_host(s)?,
            port: None,
        })
    }
}

impl KvArgs {
    /// The TCP port: -p's, else 11211 without -s and none with it.
    fn port(&self) -> u16 {
        self.port
            .unwrap_or(if self.unix_socket.is_some() { 0 } else { 11211 })
    }
}

/// What `stats settings` says of how the server listens, in memcached's
/// names and formats (`domain_socket NULL` without `-s`, the mask in octal).
fn listen_settings(a: &KvArgs) -> Vec<(&'static str, String)> {
    let inter: Vec<&str> = a.listen.iter().map(|h| h.name.as_str()).collect();
    let socket = a.unix_socket.as_ref();
    vec![
        ("tcpport", a.port().to_string()),
        ("udpport", a.udp_port.to_string()),
        ("inter", inter.join(",")),
        (
            "domain_socket",
            socket.map_or("NULL".into(), |p| p.display().to_string()),
        ),
        ("umask", format!("{:o}", a.unix_mask)),
        ("tcp_backlog", a.listen_backlog.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::{parse_extended, parse_size, Extended};
    use std::time::Duration;

    fn ext(opts: &[&str]) -> Result<Extended, String> {
        parse_extended(&opts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn extended_options() {
        assert_eq!(
            ext(&["modern", "hashpower=20", "", "slab_reassign"]),
            Ok(Extended::default())
        );
        let x = ext(&["idle_timeout=5", "no_lru_crawler", "lru_crawler_sleep=50"]).unwrap();
        assert_eq!(x.idle_timeout, Some(Duration::from_secs(5)));
        assert_eq!(x.lru_crawler, Some(false));
        assert_eq!(x.crawler_sleep, Some(50));
        assert_eq!(ext(&["idle_timeout=x"]).unwrap().idle_timeout, None);
        assert_eq!(ext(&["bogus"]), Err("Illegal suboption \"bogus\"".into()));
        assert_eq!(
            ext(&["bogus=1"]),
            Err("Illegal suboption \"bogus=1\"".into())
        );
        assert_eq!(
            ext(&["hashpower=x"]),
            Err("Initial hashtable multiplier of 0 is too low".into())
        );
        assert!(ext(&["hashpower=70"]).unwrap_err().contains("is too high"));
        assert_eq!(
            ext(&["hashpower"]),
            Err("Missing numeric argument for hashpower".into())
        );
        assert!(ext(&["ext_path=/tmp/x:1g"])
            .unwrap_err()
            .contains("not supported"));
        assert_eq!(
            ext(&["read_buf_mem_limit=32"]).unwrap().buffer_limit,
            Some(32 << 20)
        );
        assert_eq!(
            ext(&["read_buf_mem_limit=0"]).unwrap().buffer_limit,
            Some(0)
        );
        assert!(ext(&["read_buf_mem_limit=-1"]).is_err());
        assert!(ext(&["read_buf_mem_limit=x"]).is_err());
        assert!(ext(&["read_buf_mem_limit="]).is_err());
        assert!(ext(&["idle_timeout=18446744073709551615"]).is_err());
        assert!(ext(&["idle_timeout=2147483647"])
            .unwrap()
            .idle_timeout
            .is_some());
        assert_eq!(ext(&[]).unwrap().buffer_limit, None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2048"), Ok(2048));
        assert!(parse_size("x").is_err());
    }
}
