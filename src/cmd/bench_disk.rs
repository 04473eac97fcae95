//! `duality bench disk`: seed 004's disk test — N readers of random 4 KiB
//! blocks of a file opened with `O_DIRECT`, through the runtime's blocking
//! pool or io_uring, vs tokio's `spawn_blocking` and one OS thread per
//! reader. See `duality_bench::disk`.

use clap::Args;
use duality_bench::disk::{self, Plan};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct DiskArgs {
    /// Comma-separated runtimes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "duality-pool,duality-uring,tokio,os-threads"
    )]
    runtimes: Vec<String>,
    /// Comma-separated reader counts (OS threads stop where the kernel's map
    /// limit binds: about 10,900 by default).
    #[arg(long, value_delimiter = ',', default_value = "1,16,256,4096,65536")]
    readers: Vec<u64>,
    /// Size of the file read, MiB.
    #[arg(long, default_value_t = 1024)]
    file_mib: u64,
    /// Where the file is written (and kept for the next run), created if
    /// missing: a disk file system; tmpfs is refused (its O_DIRECT reads
    /// and evicted pages come from memory). Default: the temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds of reading before the window.
    #[arg(long, default_value_t = 0.5, value_parser = super::parse_seconds)]
    warmup: f64,
    /// Seconds counted per runtime and reader count.
    #[arg(long, default_value_t = 3.0, value_parser = super::parse_seconds)]
    seconds: f64,
    /// Rounds (runtimes take turns; the median round is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seed 004's Fig. 19 instead: the web server on many small files the
    /// page cache does not hold (each trial starts with them evicted), vs
    /// nginx with and without `aio threads`.
    #[arg(long)]
    web: bool,
    /// With `--web`: comma-separated servers.
    #[arg(long, value_delimiter = ',', default_value = "duality,nginx,nginx-aio")]
    web_servers: Vec<String>,
    /// With `--web`: comma-separated client counts.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    web_clients: Vec<usize>,
    /// With `--web`: how many files (the seed: 128K).
    #[arg(long, default_value_t = 131_072)]
    web_files: usize,
    /// With `--web`: bytes per file (the seed: 16 KB).
    #[arg(long, default_value_t = 16_384)]
    web_file_size: usize,
    /// With `--web`: duality's own file cache, MiB (the seed's server: 100 MB).
    #[arg(long, default_value_t = 100)]
    web_cache_mib: usize,
    #[command(flatten)]
    output: super::OutputArgs,
    /// Internal: measure one runtime in this process and print one JSON row.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal: the child's reader count.
    #[arg(long, hide = true, default_value_t = 1)]
    child_readers: u64,
    /// Internal: the file the child reads.
    #[arg(long, hide = true)]
    file: Option<PathBuf>,
}

pub fn run(a: DiskArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0 && a.warmup.is_finite() && a.warmup >= 0.0,
        "--seconds must be positive and --warmup not negative"
    );
    if a.web {
        return web(&a);
    }
    if let Some(rt) = &a.child {
        let file = a
            .file
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("--file is needed"))?;
        let row = disk::measure(
            rt,
            file,
            a.child_readers,
            Duration::from_secs_f64(a.warmup),
            Duration::from_secs_f64(a.seconds),
        )?;
        println!("{}", serde_json::to_string(&row)?);
        return Ok(());
    }
    for rt in &a.runtimes {
        anyhow::ensure!(
            disk::RUNTIMES.contains(&rt.as_str()),
            "unknown runtime {rt:?}; choose from {:?}",
            disk::RUNTIMES
        );
    }
    anyhow::ensure!(
        a.readers.iter().all(|&n| n >= 1),
        "every reader count must be at least 1"
    );
    let (mib, readers, warmup, seconds, rounds) = if a.output.quick {
        (16, vec![1, 64], 0.1, 0.3, 1)
    } else {
        (
            a.file_mib.max(1),
            a.readers.clone(),
            a.warmup,
            a.seconds,
            a.rounds.max(1),
        )
    };
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    disk::disk_dir(&dir)?;
    let out = super::results_dir(a.output.out.as_deref(), "disk")?;
    let file = dir.join(format!("duality-disk-{mib}m.bin"));
    eprintln!("preparing {} ({mib} MiB)", file.display());
    disk::prepare_file(&file, mib)?;
    disk::open_direct(&file)?;
    let exe = std::env::current_exe()?;
    let plan = Plan {
        exe: &exe,
        file: &file,
        runtimes: a.runtimes.clone(),
        readers: readers.clone(),
        warmup,
        seconds,
        rounds,
    };
    let pb = super::bench_kv::progress(rounds * readers.len() * a.runtimes.len());
    let rows = disk::run_children(&plan, &mut |r| {
        pb.set_message(format!("{} readers: {}", r.readers, r.runtime));
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let cmd: Vec<String> = std::env::args().collect();
    let md = format!(
        "# Disk: N readers of random 4 KiB blocks of a {mib} MiB file opened with O_DIRECT\n\nCommand: `{}`\n\nMachine: {} cores; the file on {}. Each runtime and reader count in a fresh process; {seconds} s counted after {warmup} s; the median of {rounds} round(s) by reads/s, runtimes taking turns. A read's time runs from the reader asking to the bytes being there (waiting for a pool thread included). OS threads stop at {} (`vm.max_map_count` / 6: each thread takes several memory mappings).\n\n{}",
        cmd.join(" "),
        duality_models::cores(),
        dir.display(),
        disk::os_thread_cap(),
        disk::table(&rows)
    );
    std::fs::write(out.join("disk.md"), &md)?;
    std::fs::write(out.join("disk.json"), duality_bench::report::json(&rows))?;
    std::fs::write(out.join("disk.csv"), disk::csv(&rows))?;
    let series = |f: fn(&disk::DiskRow) -> f64| {
        duality_bench::plot::series_by(
            &rows,
            &a.runtimes,
            |r| &r.runtime,
            |r| (r.readers as f64, f(r)),
        )
    };
    duality_bench::plot::line_chart(
        &out.join("disk-reads"),
        "Random 4 KiB O_DIRECT reads",
        "readers",
        "reads/s",
        &series(|r| r.reads_per_sec),
        true,
    )?;
    duality_bench::plot::line_chart(
        &out.join("disk-p99"),
        "p99 time per read",
        "readers",
        "µs",
        &series(|r| r.p99_us),
        true,
    )?;
    if a.output.json {
        println!("{}", duality_bench::report::json(&rows));
    } else {
        println!("{}", disk::table(&rows));
    }
    eprintln!("results in {}", out.display());
    Ok(())
}

/// `bench disk --web`: seed 004's Fig. 19.
fn web(a: &DiskArgs) -> anyhow::Result<()> {
    use duality_bench::disk_web::{self, FileSet, Plan};
    for s in &a.web_servers {
        anyhow::ensure!(
            disk_web::SERVERS.contains(&s.as_str()),
            "unknown server {s:?}; choose from {:?}",
            disk_web::SERVERS
        );
    }
    anyhow::ensure!(
        a.web_files >= 1 && a.web_file_size >= 1 && a.web_clients.iter().all(|&c| c >= 1),
        "--web-files, --web-file-size and every client count must be at least 1"
    );
    let mut servers = a.web_servers.clone();
    if duality_bench::http::find_nginx().is_none() {
        eprintln!("nginx is not installed (apt-get install nginx-light): its rows are skipped");
        servers.retain(|s| !s.starts_with("nginx"));
    }
    let (files, clients, warmup, seconds) = if a.output.quick {
        (2_000, vec![4, 16], 0.1, 0.3)
    } else {
        (a.web_files, a.web_clients.clone(), a.warmup, a.seconds)
    };
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    disk::disk_dir(&dir)?;
    let out = super::results_dir(a.output.out.as_deref(), "disk-web")?;
    let root = dir.join(format!("duality-web-{files}x{}", a.web_file_size));
    eprintln!(
        "preparing {files} files of {} bytes in {}",
        a.web_file_size,
        root.display()
    );
    let set = FileSet::prepare(&root, files, a.web_file_size)?;
    let exe = std::env::current_exe()?;
    let cores = duality_models::cores();
    let plan = Plan {
        exe: &exe,
        files: &set,
        servers: servers.clone(),
        clients: clients.clone(),
        cache_mib: a.web_cache_mib,
        nginx_workers: cores,
        warmup,
        seconds,
        client_threads: 1,
    };
    let pb = super::bench_kv::progress(servers.len() * clients.len());
    let rows = disk_web::run(&plan, &mut |r| {
        pb.set_message(format!("{} clients: {}", r.clients, r.server));
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let cmd: Vec<String> = std::env::args().collect();
    let md = format!(
        "# Disk (seed 004, Fig. 19): the web server on {files} files of {} bytes\n\nCommand: `{}`\n\nMachine: {cores} cores; the files on {}. Before every trial each file is dropped from the page cache (`posix_fadvise(DONTNEED)`) and the server is started afresh; closed-loop keep-alive clients (one loop thread of this process) each ask for a random file per request; {seconds} s counted after {warmup} s. duality: `duality http` on its default model with a {} MiB file cache; nginx: {cores} workers, `sendfile on`, with and without `aio threads`. CPU and storage reads are the server's whole process tree's.\n\n{}",
        a.web_file_size,
        cmd.join(" "),
        dir.display(),
        a.web_cache_mib,
        disk_web::table(&rows)
    );
    std::fs::write(out.join("disk-web.md"), &md)?;
    std::fs::write(
        out.join("disk-web.json"),
        duality_bench::report::json(&rows),
    )?;
    std::fs::write(out.join("disk-web.csv"), disk_web::csv(&rows))?;
    let series = |f: fn(&disk_web::WebRow) -> f64| {
        duality_bench::plot::series_by(&rows, &servers, |r| &r.server, |r| (r.clients as f64, f(r)))
    };
    duality_bench::plot::line_chart(
        &out.join("disk-web-rps"),
        "Web server, working set on disk: requests/s",
        "clients",
        "requests/s",
        &series(|r| r.requests_per_sec),
        true,
    )?;
    duality_bench::plot::line_chart(
        &out.join("disk-web-p99"),
        "Web server, working set on disk: p99 per request",
        "clients",
        "µs",
        &series(|r| r.p99_us),
        true,
    )?;
    if a.output.json {
        println!("{}", duality_bench::report::json(&rows));
    } else {
        println!("{}", disk_web::table(&rows));
    }
    eprintln!("results in {}", out.display());
    Ok(())
}
