//! `duality bench http`: requests/s and Mbit/s against concurrent clients,
//! duality (Knot-C, Knot-A, SPED) against nginx in the same run (the seeds'
//! Figure 3). See `duality_bench::http` for how it measures.

use clap::Args;
use duality_bench::http::{self, Experiment, ServerKind};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct HttpBenchArgs {
    /// Comma-separated client counts (default 1,4,16,64,256,1024,4096,16384,
    /// capped by the file limit); a count given past the file limit (less
    /// 256 kept free) or 16,384 is refused.
    #[arg(long, value_delimiter = ',', value_parser = super::bench::positive)]
    clients: Vec<usize>,
    /// Seconds measured per point, 0.05 (enough clock ticks for the
    /// server's CPU time) to 86,400. Default 2 (`--quick`: 0.5).
    #[arg(long, value_parser = super::bench::parse_window)]
    seconds: Option<f64>,
    /// Seconds of warm-up per point, once the connections are open.
    /// Default 0.5 (`--quick`: 0.2).
    #[arg(long, value_parser = super::parse_seconds)]
    warmup: Option<f64>,
    /// Comma-separated servers: duality-knot-c, duality-knot-a, duality-sped,
    /// nginx-1w, nginx-2w (default: all); sized for a bigger machine:
    /// nginx-Nw (N workers, at most 1024), duality-knot-c:N,
    /// duality-knot-a:N (N loops, at most 1024), duality-MODEL or
    /// duality-MODEL/HANDOFF for a hand-off model (e.g. duality-amped:1,
    /// duality-seda-s:2/adaptive).
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// Comma-separated I/O backends (`epoll`, `uring`): each duality server
    /// is run on each, labelled `NAME@BACKEND` (default: the servers' default).
    #[arg(long, value_delimiter = ',')]
    io: Vec<duality_rt::IoBackend>,
    /// Comma-separated file sizes in bytes, one workload each (default
    /// 100,16384: an `index.html`-like page and a 16 KiB file); refused
    /// where the temp dir would keep less than 1 GiB free with them.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Measurements per point, servers taking turns; the median is kept.
    /// Default 3 (`--quick`: 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeat: Option<u64>,
    /// Load-generator event-loop threads per process (default: one per core).
    #[arg(long, value_parser = super::bench::positive)]
    client_threads: Option<usize>,
    /// Most client connections per load process (default: the file limit
    /// less a margin); above it, the load is split over child processes.
    #[arg(long, value_parser = super::bench::positive)]
    per_process: Option<usize>,
    /// Results directory (default results/http-UNIXTIME).
    #[arg(long)]
    out: Option<PathBuf>,
    /// A short run: 1, 16 and 256 clients, 0.5 s per point, no repetition
    /// (where --clients, --seconds, --warmup, --repeat are not given).
    #[arg(long)]
    quick: bool,
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Internal: be one load process of a split point and print its JSON.
    #[arg(long, hide = true)]
    child: bool,
    /// Internal (--child): server address.
    #[arg(long, hide = true)]
    addr: Option<std::net::SocketAddr>,
    /// Internal (--child): request target.
    #[arg(long, hide = true)]
    path: Option<String>,
    /// Internal (--child): the server's processes, whose CPU time is read
    /// over the window.
    #[arg(long, hide = true, value_delimiter = ',')]
    server_pids: Vec<u32>,
    /// Internal: print the nginx configuration the experiment uses for this
    /// many workers (with --addr, --nginx-root, --nginx-prefix) and exit,
    /// so that scripts run nginx exactly as the experiment does.
    #[arg(long, hide = true)]
    nginx_config: Option<usize>,
    /// Internal (--nginx-config): the document root.
    #[arg(long, hide = true)]
    nginx_root: Option<PathBuf>,
    /// Internal (--nginx-config): nginx's prefix (pid file, logs, temp files).
    #[arg(long, hide = true)]
    nginx_prefix: Option<PathBuf>,
}

pub fn run(a: HttpBenchArgs) -> anyhow::Result<()> {
    let fd_limit = http::raise_fd_limit() as usize;
    if a.child {
        return child(&a);
    }
    if let Some(workers) = a.nginx_config {
        return print_nginx_config(&a, workers, fd_limit as u64);
    }
    let per_process = a
        .per_process
        .unwrap_or(fd_limit.saturating_sub(http::FD_MARGIN).max(1));
    // The server holds one descriptor per client too, under the same limit.
    let cap = fd_limit
        .saturating_sub(http::FD_MARGIN)
        .min(*http::DEFAULT_CLIENTS.last().unwrap_or(&16384));
    let q = a.quick;
    let mut clients = if a.clients.is_empty() && q {
        vec![1, 16, 256]
    } else {
        a.clients.clone()
    };
    let seconds = a.seconds.unwrap_or(if q { 0.5 } else { 2.0 });
    let warmup = a.warmup.unwrap_or(if q { 0.2 } else { 0.5 });
    let repeat = a.repeat.unwrap_or(if q { 1 } else { 3 }) as usize;
    let client_threads = a.client_threads.unwrap_or_else(duality_models::cores);
    // A count given is measured as given or refused (1,000,000 was cut to
    // 16,384 with a note in the results only); the defaults are cut.
    if let Some(&most) = a.clients.iter().max() {
        anyhow::ensure!(
            most <= cap,
            "--clients {most}: the server holds a descriptor per client, and a process may open \
             {fd_limit} files here (ulimit -n), {} kept free; at most {cap}",
            http::FD_MARGIN
        );
    }
    if clients.is_empty() {
        clients = http::DEFAULT_CLIENTS.to_vec();
    }
    let mut notes = Vec::new();
    if clients.iter().any(|&c| c > cap) {
        let dropped: Vec<String> = clients
            .iter()
            .filter(|&&c| c > cap)
            .map(|c| c.to_string())
            .collect();
        clients.retain(|&c| c <= cap);
        if !clients.contains(&cap) {
            clients.push(cap);
        }
        notes.push(format!(
            "client counts {} capped at {cap} by the file limit ({fd_limit} per process, {} kept free)",
            dropped.join(", "),
            http::FD_MARGIN
        ));
    }
    clients.sort_unstable();
    clients.dedup();
    anyhow::ensure!(!clients.is_empty(), "no client counts to measure");

    let servers: Vec<ServerKind> = if a.servers.is_empty() {
        http::default_servers()
    } else {
        a.servers
            .iter()
            .map(|name| http::parse_server(name))
            .collect::<anyhow::Result<_>>()?
    };
    // Each duality server once per backend asked for, labelled NAME@BACKEND.
    let servers: Vec<ServerKind> = if a.io.is_empty() {
        servers
    } else {
        servers
            .into_iter()
            .flat_map(|k| match k {
                ServerKind::Duality {
                    label,
                    model,
                    accept,
                    ..
                } => {
                    a.io.iter()
                        .map(|b| ServerKind::Duality {
                            label: format!("{label}@{b}"),
                            model: model.clone(),
                            accept: accept.clone(),
                            io: Some(b.to_string()),
                        })
                        .collect::<Vec<_>>()
                }
                other => vec![other],
            })
            .collect()
    };
    let wants_nginx = servers
        .iter()
        .any(|k| matches!(k, ServerKind::Nginx { .. }));
    let mut nginx = http::find_nginx();
    // Asked only where nginx is measured; bounded (a wrapper that hung on
    // `nginx -v` hung the whole run), and an nginx that cannot answer it is
    // left out as one that is missing.
    let mut nginx_version = None;
    let mut unusable = None;
    if let (Some(n), true) = (&nginx, wants_nginx) {
        match http::nginx_version(n) {
            Ok(v) => nginx_version = Some(v),
            Err(e) => unusable = Some(format!("{e:#}")),
        }
    }
    if unusable.is_some() {
        nginx = None;
    }
    if nginx.is_none() && wants_nginx {
        let why = match &unusable {
            Some(e) => format!("nginx cannot be used ({e})"),
            None => "nginx is not installed".to_string(),
        };
        anyhow::ensure!(
            servers
                .iter()
                .any(|k| !matches!(k, ServerKind::Nginx { .. })),
            "{why} and every server asked for is nginx: nothing to measure \
             (install it with `apt-get install nginx-light`)"
        );
        let msg =
            format!("{why}: measured without it (install it with `apt-get install nginx-light`)");
        duality_rt::say!("{msg}");
        notes.push(msg);
    }

    let workloads = if a.sizes.is_empty() {
        http::default_workloads()
    } else {
        a.sizes.iter().map(|&n| http::workload_of_size(n)).collect()
    };
    // The files are written to the temp dir (`--sizes 99999999999999` was
    // built in memory until the machine ran out).
    let bytes = workloads
        .iter()
        .fold(0u64, |t, w| t.saturating_add(w.size as u64));
    let what = if a.sizes.is_empty() {
        "the workload files".to_string()
    } else {
        format!("--sizes {}", sizes_text(&a.sizes))
    };
    duality_bench::limits::ensure_space(&what, &std::env::temp_dir(), bytes)?;

    let out = super::bench::results_dir(a.out.as_deref(), "http")?;

    let x = Experiment {
        exe: std::env::current_exe()?,
        clients,
        seconds,
        warmup,
        client_threads,
        per_process,
        repeat,
        servers,
        workloads,
        nginx,
    };
    duality_rt::say!(
        "duality bench http: {} servers x {} files x clients {:?}, {seconds} s per point",
        x.servers.len(),
        x.workloads.len(),
        x.clients
    );
    let started = std::time::Instant::now();
    let rows = http::run(&x, &mut |r| {
        let or_dash = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or_else(|| "-".into(), f);
        duality_rt::say!(
            "{:<16} {:>5} x{:<6} {:>12} req/s {:>10} Mbit/s {:>7} us/req{}{}",
            r.server,
            r.file,
            r.clients,
            or_dash(r.requests_per_sec, &duality_bench::report::thousands),
            or_dash(r.mbit_per_sec, &|v| format!("{v:.1}")),
            or_dash(r.cpu_us_per_request, &|v| format!("{v:.2}")),
            if r.errors > 0 {
                format!("  ({} errors)", r.errors)
            } else {
                String::new()
            },
            r.failed
                .as_deref()
                .map_or_else(String::new, |f| format!("  FAILED ({f})"))
        )
    })?;
    // A server that died or answered nothing: said in the results, and the
    // run fails once they are written (as `bench soak` does when good
    // clients lost requests).
    let failures = failures(&rows);
    notes.extend(failures.iter().cloned());

    let table = http::table(&rows);
    let json = duality_bench::report::json(&rows);
    let mut md = String::from("# duality bench http\n\n");
    let cmd = super::command_line();
    md.push_str(&format!("Command: `{}`\n\n", cmd));
    md.push_str(&format!(
        "{} cores; file limit {fd_limit} per process; {seconds} s per point after {warmup} s of warm-up, \
         median of {repeat} (servers taking turns); \
         load generator: {} loop thread(s) per process, at most {per_process} clients per process; \
         nginx: {}; took {:.0} s.\n",
        duality_models::cores(),
        x.client_threads,
        match (&nginx_version, wants_nginx) {
            (Some(v), _) => v.as_str(),
            (None, true) => "not installed or unusable",
            (None, false) => "not measured",
        },
        started.elapsed().as_secs_f64()
    ));
    for n in &notes {
        md.push_str(&format!("\nNote: {n}.\n"));
    }
    md.push_str(&table);
    use duality_bench::report::{print, write};
    write(&out.join("http.md"), &md)?;
    write(&out.join("http.json"), format!("{json}\n"))?;
    write(&out.join("http.csv"), http::csv(&rows))?;
    if let Err(e) = http::plots(&rows, &out) {
        duality_rt::say!("plots not written: {e:#}");
    }
    if a.json {
        print(&json);
        duality_rt::say!("results: {}", out.display());
    } else {
        for n in &notes {
            print(&format!("Note: {n}."));
        }
        print(&table);
        print(&format!("results: {}", out.display()));
    }
    anyhow::ensure!(
        failures.is_empty(),
        "{}; the results mark those points failed",
        failures.join("; ")
    );
    Ok(())
}

/// One line per server with failed points: why, and at which client
/// counts (`duality-sped exited during the run (killed by signal 9
/// (SIGKILL)): 100B x1, 100B x16`).
fn failures(rows: &[http::HttpRow]) -> Vec<String> {
    let mut by_server: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for r in rows {
        let Some(f) = r.failed.as_deref() else {
            continue;
        };
        let why = f.split(':').next().unwrap_or(f);
        let point = format!("{} x{}", r.file, r.clients);
        match by_server
            .iter_mut()
            .find(|(s, w, _)| *s == r.server && *w == why)
        {
            Some((.., points)) => points.push(point),
            None => by_server.push((&r.server, why, vec![point])),
        }
    }
    by_server
        .into_iter()
        .map(|(server, why, points)| {
            let detail = rows
                .iter()
                .find(|r| r.server == server && r.failed_tag() == Some(why))
                .and_then(|r| r.failed.as_deref())
                .and_then(|f| f.split_once(": "))
                .map_or("", |(_, d)| d);
            match why {
                "exited" => format!(
                    "{server} exited during the run ({detail}): {}",
                    points.join(", ")
                ),
                _ => format!("{server} answered nothing at {}", points.join(", ")),
            }
        })
        .collect()
}

/// `--sizes` as given (`100,16384`).
fn sizes_text(sizes: &[usize]) -> String {
    let s: Vec<String> = sizes.iter().map(usize::to_string).collect();
    s.join(",")
}

/// Prints the experiment's nginx configuration (`--nginx-config`).
fn print_nginx_config(a: &HttpBenchArgs, workers: usize, fd_limit: u64) -> anyhow::Result<()> {
    let (Some(addr), Some(root), Some(prefix)) = (a.addr, &a.nginx_root, &a.nginx_prefix) else {
        anyhow::bail!("--nginx-config needs --addr, --nginx-root and --nginx-prefix");
    };
    anyhow::ensure!(
        (1..=http::MAX_NGINX_WORKERS).contains(&workers),
        "--nginx-config {workers}: nginx runs 1 to {} workers",
        http::MAX_NGINX_WORKERS
    );
    let modules = match http::find_nginx() {
        Some(n) => http::nginx_probe(&n, "-V")?,
        None => String::new(),
    };
    duality_bench::report::print(
        http::nginx_config(prefix, root, addr, workers, fd_limit, &modules).trim_end(),
    );
    Ok(())
}

/// One load process of a split point: measure, print one JSON object.
fn child(a: &HttpBenchArgs) -> anyhow::Result<()> {
    let (Some(addr), Some(path)) = (a.addr, a.path.clone()) else {
        anyhow::bail!("--child needs --addr and --path");
    };
    let clients = a.clients.iter().sum::<usize>();
    let spec = http::LoadSpec {
        addr,
        path,
        clients,
        threads: a.client_threads.unwrap_or(1),
        warmup: Duration::from_secs_f64(a.warmup.unwrap_or(0.5)),
        measure: Duration::from_secs_f64(a.seconds.unwrap_or(2.0)),
        server_pids: a.server_pids.clone(),
    };
    let r = http::load(&spec)?;
    duality_bench::report::print(&serde_json::to_string(&r)?);
    Ok(())
}
