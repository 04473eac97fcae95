//! Real memcached clients and proxies, not written here, against
//! `duality kv`: pymemcache (PyPI `pymemcache`, text protocol),
//! python-binary-memcached (PyPI, module `bmemcached`, binary protocol),
//! twemproxy (Debian package `nutcracker`) in front of three instances, and
//! libmemcached's memcapable and memaslap (Debian `libmemcached-tools`). CI
//! installs them (`.ci/run`); without them these tests fail and say what to
//! install.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// `python3`, with pymemcache importable.
fn python_with_pymemcache() -> &'static str {
    let ok = Command::new("python3")
        .args(["-c", "import pymemcache"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success());
    match ok {
        Ok(true) => "python3",
        Ok(false) => panic!(
            "the Python package pymemcache is not installed: `pip install pymemcache` \
             (CI installs it in .ci/run)"
        ),
        Err(e) => {
            panic!("python3 is not available ({e}): install python3 and `pip install pymemcache`")
        }
    }
}

/// The `nutcracker` (twemproxy) executable.
fn nutcracker() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("nutcracker"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "nutcracker (twemproxy) not found on PATH or in /usr/sbin: install the Debian \
                 package `nutcracker` (apt-get install -y nutcracker; CI installs it in .ci/run)"
            )
        })
}

/// pymemcache's own API against the binary over TCP and a Unix socket.
#[test]
fn pymemcache() {
    let python = python_with_pymemcache();
    let dir = TempDir::new("kv-pymemcache");
    let sock = dir.path().join("kv.sock");
    let sock_s = sock.to_str().unwrap();
    let srv = KvProc::start(&["-t", "2", "-s", sock_s]);
    run_python_client(
        python,
        "kv_pymemcache.py",
        &[&srv.port.to_string(), sock_s],
        &srv,
    );
}

/// Runs `tests/python/<script> ARGS…` (a real client library's checks
/// against `srv`) for at most 60 s; it must exit 0 and print `ok …`.
fn run_python_client(python: &str, script: &str, args: &[&str], srv: &KvProc) {
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let child = Command::new(python)
        .arg(&path)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3");
    let mut guard = ChildGuard(Some(child));
    let until = Instant::now() + Duration::from_secs(60);
    while guard
        .0
        .as_mut()
        .unwrap()
        .try_wait()
        .expect("try_wait")
        .is_none()
    {
        assert!(Instant::now() < until, "{script} ran over 60 s");
        thread::sleep(Duration::from_millis(10));
    }
    let out = guard.0.take().unwrap().wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.starts_with("ok "),
        "{script} failed ({:?})\nstdout: {stdout}\nstderr: {stderr}\nserver stderr: {}",
        out.status,
        srv.stderr_text()
    );
    eprintln!("{script}: {}", stdout.trim());
}

/// `python3`, with bmemcached (PyPI `python-binary-memcached`) importable.
fn python_with_bmemcached() -> &'static str {
    let ok = Command::new("python3")
        .args(["-c", "import bmemcached"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success());
    match ok {
        Ok(true) => "python3",
        Ok(false) => panic!(
            "the Python package python-binary-memcached is not installed: \
             `pip install python-binary-memcached` (CI installs it in .ci/run)"
        ),
        Err(e) => panic!(
            "python3 is not available ({e}): install python3 and \
             `pip install python-binary-memcached`"
        ),
    }
}

/// A binary-protocol client library (bmemcached) against the binary.
#[test]
fn bmemcached_binary_protocol() {
    let python = python_with_bmemcached();
    let srv = KvProc::start(&["-t", "2"]);
    run_python_client(python, "kv_bmemcached.py", &[&srv.port.to_string()], &srv);
}

/// bmemcached authenticating with SASL PLAIN to `duality kv -S`, the
/// users in the file `MEMCACHED_SASL_PWDB` names.
#[test]
fn bmemcached_sasl() {
    let python = python_with_bmemcached();
    let dir = TempDir::new("kv-bmemcached-sasl");
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "alice:secret\n").unwrap();
    let srv = KvProc::start_with_env(
        &["-t", "2", "-S"],
        &[("MEMCACHED_SASL_PWDB", pw.as_os_str())],
    );
    run_python_client(
        python,
        "kv_bmemcached_sasl.py",
        &[&srv.port.to_string()],
        &srv,
    );
}

/// Waits until something listens on `port`.
fn wait_listening(port: u16, what: &str, log: &std::path::Path) {
    let addr = Addr::Tcp(([127, 0, 0, 1], port).into());
    let until = Instant::now() + Duration::from_secs(10);
    while Client::try_connect(&addr).is_err() {
        assert!(
            Instant::now() < until,
            "{what} not listening on {port} after 10 s; log: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// twemproxy in front of three `duality kv` instances, ketama distribution:
/// every value round-trips through the proxy (single and multi-key gets,
/// gets/cas, incr, delete, touch), each key lives on exactly one instance,
/// and every instance got some.
#[test]
fn twemproxy_ketama_over_three_instances() {
    let nutcracker = nutcracker();
    let kvs: Vec<KvProc> = (0..3).map(|_| KvProc::start(&["-t", "1"])).collect();
    let dir = TempDir::new("kv-twemproxy");
    let conf = dir.path().join("nutcracker.yml");
    let log = dir.path().join("nutcracker.log");
    let pidfile = dir.path().join("nutcracker.pid");
    let mut guard = None;
    let mut proxy_port = 0;
    // Retry on another port if the chosen ones were taken meanwhile.
    for _ in 0..5 {
        proxy_port = free_port();
        let stats_port = free_port();
        let servers: String = kvs
            .iter()
            .enumerate()
            .map(|(i, k)| format!("   - 127.0.0.1:{}:1 kv{i}\n", k.port))
            .collect();
        std::fs::write(
            &conf,
            format!(
                "duality:\n  listen: 127.0.0.1:{proxy_port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
                 timeout: 2000\n  auto_eject_hosts: false\n  servers:\n{servers}"
            ),
        )
        .unwrap();
        let test = Command::new(&nutcracker)
            .arg("-t")
            .arg("-c")
            .arg(&conf)
            .output()
            .expect("run nutcracker -t");
        assert!(
            test.status.success(),
            "nutcracker rejects the config: {}{}",
            String::from_utf8_lossy(&test.stdout),
            String::from_utf8_lossy(&test.stderr)
        );
        let child = Command::new(&nutcracker)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&pidfile)
            .arg("-o")
            .arg(&log)
            .args(["-s", &stats_port.to_string(), "-a", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nutcracker");
        let mut g = ChildGuard(Some(child));
        thread::sleep(Duration::from_millis(50));
        if g.0
            .as_mut()
            .unwrap()
            .try_wait()
            .expect("try_wait")
            .is_none()
        {
            guard = Some(g);
            break;
        }
    }
    let _guard = guard.unwrap_or_else(|| {
        panic!(
            "nutcracker did not start; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    wait_listening(proxy_port, "nutcracker", &log);
    let proxy = Addr::Tcp(([127, 0, 0, 1], proxy_port).into());
    let mut c = Client::connect(&proxy);

    // Many keys through the proxy, pipelined in batches.
    const KEYS: usize = 300;
    let value = |i: usize| format!("value-{i}-{}", "x".repeat(i % 50));
    for batch in (0..KEYS).collect::<Vec<_>>().chunks(50) {
        let mut req = String::new();
        for &i in batch {
            let v = value(i);
            req.push_str(&format!("set key:{i} {i} 0 {}\r\n{v}\r\n", v.len()));
        }
        c.send(req.as_bytes());
        let r = c.read_n(8 * batch.len());
        assert_eq!(show(&r), show("STORED\r\n".repeat(batch.len()).as_bytes()));
    }
    // Every value round-trips, one key at a time ...
    for i in 0..KEYS {
        let v = value(i);
        c.send(format!("get key:{i}\r\n").as_bytes());
        let want = format!("VALUE key:{i} {i} {}\r\n{v}\r\nEND\r\n", v.len());
        assert_eq!(show(&c.read_n(want.len())), show(want.as_bytes()));
    }
    // ... and in multi-key gets the proxy splits over the instances.
    for batch in (0..KEYS).collect::<Vec<_>>().chunks(25) {
        let mut req = String::from("get");
        let mut want = String::new();
        for &i in batch {
            req.push_str(&format!(" key:{i}"));
            let v = value(i);
            want.push_str(&format!("VALUE key:{i} {i} {}\r\n{v}\r\n", v.len()));
        }
        req.push_str(" nosuchkey\r\n");
        want.push_str("END\r\n");
        c.send(req.as_bytes());
        assert_eq!(show(&c.read_n(want.len())), show(want.as_bytes()));
    }

    // Other commands through the proxy.
    c.send(b"gets key:7\r\n");
    let r = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    let cas: u64 = r
        .split("\r\n")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    c.send(
        format!(
            "cas key:7 0 0 3 {}\r\nbad\r\ncas key:7 0 0 3 {cas}\r\nnew\r\nget key:7\r\n",
            cas + 1
        )
        .as_bytes(),
    );
    let want = "EXISTS\r\nSTORED\r\nVALUE key:7 0 3\r\nnew\r\nEND\r\n";
    assert_eq!(show(&c.read_n(want.len())), show(want.as_bytes()));
    c.send(b"set ctr 0 0 1\r\n5\r\nincr ctr 10\r\ndecr ctr 3\r\ntouch ctr 100\r\ndelete key:8\r\nget key:8\r\n");
    let want = "STORED\r\n15\r\n12\r\nTOUCHED\r\nDELETED\r\nEND\r\n";
    assert_eq!(show(&c.read_n(want.len())), show(want.as_bytes()));

    // Each key is on exactly one instance, and all three hold some.
    let mut direct: Vec<Client> = kvs.iter().map(|k| k.connect()).collect();
    let mut per_instance = vec![0usize; kvs.len()];
    for i in (0..KEYS).filter(|&i| i != 7 && i != 8) {
        let v = value(i);
        let hit = format!("VALUE key:{i} {i} {}\r\n{v}\r\nEND\r\n", v.len());
        let mut holders = Vec::new();
        for (n, d) in direct.iter_mut().enumerate() {
            let r = d.call(format!("get key:{i}\r\n").as_bytes());
            if r == hit.as_bytes() {
                holders.push(n);
            } else {
                assert_eq!(show(&r), show(b"END\r\n"), "instance {n}, key:{i}");
            }
        }
        assert_eq!(holders.len(), 1, "key:{i} is on instances {holders:?}");
        per_instance[holders[0]] += 1;
    }
    let items: Vec<u64> = direct
        .iter_mut()
        .map(|d| d.stats("")["curr_items"].parse().unwrap())
        .collect();
    eprintln!("twemproxy: keys per instance {per_instance:?}, curr_items {items:?}");
    for (n, &k) in per_instance.iter().enumerate() {
        assert!(k > 0, "instance {n} got no keys: {per_instance:?}");
        assert!(items[n] > 0, "instance {n}: curr_items {}", items[n]);
    }
    // 300 keys + ctr - key:8.
    assert_eq!(
        items.iter().sum::<u64>(),
        KEYS as u64,
        "curr_items {items:?}"
    );
}

/// One of libmemcached's tools (Debian package `libmemcached-tools`, which
/// names them `memc…`; upstream builds name them `mem…`).
fn libmemcached_tool(debian: &str, upstream: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.iter()
        .flat_map(|d| [d.join(debian), d.join(upstream)])
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{debian} ({upstream}) not found on PATH: install the Debian package \
                 `libmemcached-tools` (apt-get install -y libmemcached-tools; CI installs it \
                 in .ci/run)"
            )
        })
}

/// Runs `tool ARGS…` for at most `limit`; its exit status and what it
/// printed (stdout and stderr, through a file so that a chatty tool never
/// blocks on a full pipe).
fn run_tool(tool: &std::path::Path, args: &[&str], limit: Duration) -> (bool, String) {
    let dir = TempDir::new("kv-libmemcached");
    let out_path = dir.path().join("out");
    let out = std::fs::File::create(&out_path).expect("create the output file");
    let child = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup the output file"))
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", tool.display()));
    let mut guard = ChildGuard(Some(child));
    let until = Instant::now() + limit;
    let status = loop {
        if let Some(s) = guard.0.as_mut().unwrap().try_wait().expect("try_wait") {
            guard.0 = None;
            break s;
        }
        if Instant::now() >= until {
            panic!(
                "{} {args:?} ran over {limit:?}: {}",
                tool.display(),
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    let text = String::from_utf8_lossy(&std::fs::read(&out_path).unwrap_or_default()).into_owned();
    (status.success(), text)
}

/// memcapable, libmemcached's conformance test (27 text and 27 binary
/// protocol checks, expiry included), passes under every threading model.
#[test]
fn libmemcached_memcapable_under_every_model() {
    let tool = libmemcached_tool("memccapable", "memcapable");
    let models = [
        "sped",
        "symped:2",
        "amped:1",
        "seda:1:1",
        "seda-s:1",
        "thread-per-conn",
        "steal:2",
    ];
    thread::scope(|s| {
        for model in models {
            let tool = &tool;
            s.spawn(move || {
                let srv = KvProc::start(&["--model", model]);
                let port = srv.port.to_string();
                let (ok, out) = run_tool(
                    tool,
                    &["-h", "127.0.0.1", "-p", &port, "-t", "5"],
                    Duration::from_secs(90),
                );
                assert!(
                    ok && out.contains("All tests passed"),
                    "memcapable under {model}:\n{out}\nserver stderr: {}",
                    srv.stderr_text()
                );
            });
        }
    });
}

/// memcstat, libmemcached's stats tool (and so php-memcached's and
/// pylibmc's `stats`), over the text and the binary protocol: it reads the
/// server's version as major.minor.micro numbers first and refused every
/// stat of a `VERSION duality-kv-…` server ("strtol() failed to parse major
/// version").
#[test]
fn libmemcached_memcstat_reads_the_stats() {
    let tool = libmemcached_tool("memcstat", "memstat");
    let srv = KvProc::start(&[]);
    let mut c = srv.connect();
    c.expect_str("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    c.expect_str("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n");
    let servers = format!("--servers=127.0.0.1:{}", srv.port);
    for binary in [false, true] {
        let mut args = vec![servers.as_str()];
        if binary {
            args.push("--binary");
        }
        let (ok, out) = run_tool(&tool, &args, Duration::from_secs(30));
        assert!(
            ok && out.contains("curr_items: 1") && out.contains("get_hits: 1"),
            "memcstat {args:?}:\n{out}"
        );
        let (ok, out) = run_tool(
            &tool,
            &[&servers, "--server-version"],
            Duration::from_secs(30),
        );
        assert!(
            ok && out.contains("1.6.18"),
            "memcstat --server-version:\n{out}"
        );
    }
}

/// memaslap, libmemcached's load generator, verifying every value it reads
/// back, over the text and the binary protocol: no error answer, no miss,
/// no failed check. Its keys begin with eight 0x10 bytes, which memcached
/// takes as key bytes (refused here before: every get failed).
#[test]
fn libmemcached_memaslap_verifies_every_value() {
    let tool = libmemcached_tool("memcaslap", "memaslap");
    let srv = KvProc::start(&["-t", "2"]);
    let server = format!("127.0.0.1:{}", srv.port);
    for binary in [false, true] {
        let mut args = vec![
            "-s", &server, "-T", "1", "-c", "8", "-x", "20000", "-v", "1.0",
        ];
        if binary {
            args.push("-B");
        }
        let (ok, out) = run_tool(&tool, &args, Duration::from_secs(60));
        let figure = |name: &str| -> u64 {
            out.lines()
                .find_map(|l| {
                    l.strip_prefix(name)?
                        .strip_prefix(": ")?
                        .trim()
                        .parse()
                        .ok()
                })
                .unwrap_or_else(|| panic!("no {name} in memaslap's output:\n{out}"))
        };
        let errors = out.lines().filter(|l| l.contains("_ERROR")).count();
        assert!(
            ok && errors == 0
                && figure("cmd_get") > 0
                && figure("cmd_set") > 0
                && figure("get_misses") == 0
                && figure("verify_misses") == 0
                && figure("verify_failed") == 0,
            "memaslap (binary: {binary}):\n{out}\nserver stderr: {}",
            srv.stderr_text()
        );
    }
}
