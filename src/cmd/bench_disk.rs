//! `duality bench disk`: seed 004's disk test — N readers of random 4 KiB
//! blocks of a file opened with `O_DIRECT`, through the runtime's blocking
//! pool or io_uring, vs tokio's `spawn_blocking` and one OS thread per
//! reader. See `duality_bench::disk`.

use super::bench::given_or;
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
    /// Comma-separated reader counts, 1 to 65,536 (OS threads stop where
    /// the kernel's map limit binds: about 10,900 by default). Default
    /// 1,16,256,4096,65536 (`--quick`: 1,64).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=disk::MAX_READERS))]
    readers: Vec<u64>,
    /// Size of the file read, MiB; refused where the file system would keep
    /// less than 1 GiB free with it. Default 1024 (`--quick`: 16).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    file_mib: Option<u64>,
    /// Where the file is written (and kept for the next run), created if
    /// missing: a disk file system; tmpfs is refused (its O_DIRECT reads
    /// and evicted pages come from memory). Default: the temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds of reading (`--web`: of load) before the window. Default 0.5
    /// (`--quick`: 0.1).
    #[arg(long, value_parser = super::parse_seconds)]
    warmup: Option<f64>,
    /// Seconds counted per runtime and reader count (`--web`: per server
    /// and client count). Default 3 (`--quick`: 0.3).
    #[arg(long, value_parser = super::parse_seconds)]
    seconds: Option<f64>,
    /// Rounds (runtimes take turns; the median round is reported). Default
    /// 3 (`--quick`: 1).
    #[arg(long, value_parser = super::bench::positive)]
    rounds: Option<usize>,
    /// Seed 004's Fig. 19 instead: the web server on many small files the
    /// page cache does not hold (each trial starts with them evicted), vs
    /// nginx with and without `aio threads`.
    #[arg(long)]
    web: bool,
    /// With `--web`: comma-separated servers.
    #[arg(long, value_delimiter = ',', default_value = "duality,nginx,nginx-aio")]
    web_servers: Vec<String>,
    /// With `--web`: comma-separated client counts. Default 16,64,256,1024
    /// (`--quick`: 4,16).
    #[arg(long, value_delimiter = ',')]
    web_clients: Vec<usize>,
    /// With `--web`: how many files (the seed: 128K). Default 131,072
    /// (`--quick`: 2,000).
    #[arg(long)]
    web_files: Option<usize>,
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
    #[arg(long, hide = true, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=disk::MAX_READERS))]
    child_readers: u64,
    /// Internal: the file the child reads.
    #[arg(long, hide = true)]
    file: Option<PathBuf>,
}

/// What a run measures: each flag given, else the preset of `--quick` (a
/// flag given wins over it) or of a full run. The reader and `--web` fields
/// are each read by one half only.
#[derive(Debug, PartialEq)]
struct Settings {
    file_mib: u64,
    readers: Vec<u64>,
    warmup: f64,
    seconds: f64,
    rounds: usize,
    web_files: usize,
    web_clients: Vec<usize>,
}

impl DiskArgs {
    /// `--runtimes`'s default, as clap fills it in.
    fn default_runtimes() -> Vec<String> {
        ["duality-pool", "duality-uring", "tokio", "os-threads"]
            .map(String::from)
            .to_vec()
    }

    fn settings(&self) -> Settings {
        let q = self.output.quick;
        Settings {
            file_mib: self.file_mib.unwrap_or(if q { 16 } else { 1024 }),
            readers: given_or(&self.readers, q, &[1, 64], &[1, 16, 256, 4096, 65536]),
            warmup: self.warmup.unwrap_or(if q { 0.1 } else { 0.5 }),
            seconds: self.seconds.unwrap_or(if q { 0.3 } else { 3.0 }),
            rounds: self.rounds.unwrap_or(if q { 1 } else { 3 }),
            web_files: self.web_files.unwrap_or(if q { 2_000 } else { 131_072 }),
            web_clients: given_or(&self.web_clients, q, &[4, 16], &[16, 64, 256, 1024]),
        }
    }
}

pub fn run(a: DiskArgs) -> anyhow::Result<()> {
    let s = a.settings();
    anyhow::ensure!(
        s.seconds.is_finite() && s.seconds > 0.0 && s.warmup.is_finite() && s.warmup >= 0.0,
        "--seconds must be positive and --warmup not negative"
    );
    // Each half refuses the other's flags rather than ignore them.
    let (readers_flags, web_flags) = (
        [
            ("--readers", !a.readers.is_empty()),
            ("--file-mib", a.file_mib.is_some()),
            ("--rounds", a.rounds.is_some()),
            ("--runtimes", a.runtimes != DiskArgs::default_runtimes()),
        ],
        [
            ("--web-files", a.web_files.is_some()),
            ("--web-clients", !a.web_clients.is_empty()),
        ],
    );
    let misplaced: Vec<&str> = if a.web {
        readers_flags.iter().filter(|f| f.1).map(|f| f.0).collect()
    } else {
        web_flags.iter().filter(|f| f.1).map(|f| f.0).collect()
    };
    anyhow::ensure!(
        misplaced.is_empty(),
        "{} {} not apply {}",
        misplaced.join(", "),
        if misplaced.len() == 1 { "does" } else { "do" },
        if a.web { "to --web" } else { "without --web" }
    );
    if a.web {
        return web(&a, s);
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
            Duration::from_secs_f64(s.warmup),
            Duration::from_secs_f64(s.seconds),
        )?;
        duality_bench::report::print(&serde_json::to_string(&row)?);
        return Ok(());
    }
    for rt in &a.runtimes {
        anyhow::ensure!(
            disk::RUNTIMES.contains(&rt.as_str()),
            "unknown runtime {rt:?}; choose from {:?}",
            disk::RUNTIMES
        );
    }
    let Settings {
        file_mib: mib,
        readers,
        warmup,
        seconds,
        rounds,
        ..
    } = s;
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let file = dir.join(format!("duality-disk-{mib}m.bin"));
    // Both checked before --dir or the results directory is made.
    disk::check_disk_dir(&dir)?;
    disk::check_file(&file, mib)?;
    disk::disk_dir(&dir)?;
    let out = super::bench::results_dir(a.output.out.as_deref(), "disk")?;
    duality_rt::say!("preparing {} ({mib} MiB)", file.display());
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
    let cmd = super::command_line();
    let md = format!(
        "# Disk: N readers of random 4 KiB blocks of a {mib} MiB file opened with O_DIRECT\n\nCommand: `{}`\n\nMachine: {} cores; the file on {}. Each runtime and reader count in a fresh process; {seconds} s counted after {warmup} s; the median of {rounds} round(s) by reads/s, runtimes taking turns. A read's time runs from the reader asking to the bytes being there (waiting for a pool thread included). OS threads stop at {} (`vm.max_map_count` / 6: each thread takes several memory mappings).\n\n{}",
        cmd,
        duality_models::cores(),
        dir.display(),
        disk::os_thread_cap(),
        disk::table(&rows)
    );
    duality_bench::report::write(&out.join("disk.md"), &md)?;
    duality_bench::report::write(&out.join("disk.json"), duality_bench::report::json(&rows))?;
    duality_bench::report::write(&out.join("disk.csv"), disk::csv(&rows))?;
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
        duality_bench::report::print(&duality_bench::report::json(&rows));
    } else {
        duality_bench::report::print(&disk::table(&rows));
    }
    duality_rt::say!("results in {}", out.display());
    Ok(())
}

/// `bench disk --web`: seed 004's Fig. 19.
fn web(a: &DiskArgs, s: Settings) -> anyhow::Result<()> {
    use duality_bench::disk_web::{self, FileSet, Plan};
    for s in &a.web_servers {
        anyhow::ensure!(
            disk_web::SERVERS.contains(&s.as_str()),
            "unknown server {s:?}; choose from {:?}",
            disk_web::SERVERS
        );
    }
    let Settings {
        web_files: files,
        web_clients: clients,
        warmup,
        seconds,
        ..
    } = s;
    anyhow::ensure!(
        files >= 1 && a.web_file_size >= 1 && clients.iter().all(|&c| c >= 1),
        "--web-files, --web-file-size and every client count must be at least 1"
    );
    // Every client's connection is a descriptor of this process.
    let most = clients.iter().copied().max().unwrap_or(1) as u64;
    duality_bench::limits::check_descriptors(
        "--web-clients",
        most,
        1,
        0,
        duality_bench::http::raise_fd_limit(),
    )?;
    // One file's bytes are made in memory; the server caches up to its
    // --web-cache-mib.
    duality_bench::limits::ensure_memory(
        &format!(
            "--web-file-size {} --web-cache-mib {}",
            a.web_file_size, a.web_cache_mib
        ),
        (a.web_file_size as u64).saturating_add((a.web_cache_mib as u64).saturating_mul(1 << 20)),
    )?;
    let mut servers = a.web_servers.clone();
    if duality_bench::http::find_nginx().is_none() {
        duality_rt::say!(
            "nginx is not installed (apt-get install nginx-light): its rows are skipped"
        );
        servers.retain(|s| !s.starts_with("nginx"));
    }
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let root = dir.join(format!("duality-web-{files}x{}", a.web_file_size));
    disk::check_disk_dir(&dir)?;
    if !FileSet::ready(&root, files, a.web_file_size) {
        duality_bench::limits::ensure_space(
            &format!("--web-files {files} --web-file-size {}", a.web_file_size),
            &dir,
            (files as u64).saturating_mul(a.web_file_size as u64),
        )?;
    }
    disk::disk_dir(&dir)?;
    let out = super::bench::results_dir(a.output.out.as_deref(), "disk-web")?;
    duality_rt::say!(
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
    let cmd = super::command_line();
    let md = format!(
        "# Disk (seed 004, Fig. 19): the web server on {files} files of {} bytes\n\nCommand: `{}`\n\nMachine: {cores} cores; the files on {}. Before every trial each file is dropped from the page cache (`posix_fadvise(DONTNEED)`) and the server is started afresh; closed-loop keep-alive clients (one loop thread of this process) each ask for a random file per request; {seconds} s counted after {warmup} s. duality: `duality http` on its default model with a {} MiB file cache; nginx: {cores} workers, `sendfile on`, with and without `aio threads`. CPU and storage reads are the server's whole process tree's.\n\n{}",
        a.web_file_size,
        cmd,
        dir.display(),
        a.web_cache_mib,
        disk_web::table(&rows)
    );
    duality_bench::report::write(&out.join("disk-web.md"), &md)?;
    duality_bench::report::write(
        &out.join("disk-web.json"),
        duality_bench::report::json(&rows),
    )?;
    duality_bench::report::write(&out.join("disk-web.csv"), disk_web::csv(&rows))?;
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
        duality_bench::report::print(&duality_bench::report::json(&rows));
    } else {
        duality_bench::report::print(&disk_web::table(&rows));
    }
    duality_rt::say!("results in {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{DiskArgs, Settings};

    fn settings(args: &[&str]) -> Settings {
        super::super::bench::parse_args::<DiskArgs>(args)
            .unwrap()
            .settings()
    }

    fn full() -> Settings {
        Settings {
            file_mib: 1024,
            readers: vec![1, 16, 256, 4096, 65536],
            warmup: 0.5,
            seconds: 3.0,
            rounds: 3,
            web_files: 131_072,
            web_clients: vec![16, 64, 256, 1024],
        }
    }

    fn quick() -> Settings {
        Settings {
            file_mib: 16,
            readers: vec![1, 64],
            warmup: 0.1,
            seconds: 0.3,
            rounds: 1,
            web_files: 2_000,
            web_clients: vec![4, 16],
        }
    }

    #[test]
    fn quick_presets_only_what_is_not_given() {
        assert_eq!(settings(&[]), full());
        assert_eq!(settings(&["--quick"]), quick());
        assert_eq!(settings(&["--web", "--quick"]), quick());
        for (flags, want) in [
            (
                &["--quick", "--readers", "2,8"][..],
                Settings {
                    readers: vec![2, 8],
                    ..quick()
                },
            ),
            (
                &["--quick", "--file-mib", "64"],
                Settings {
                    file_mib: 64,
                    ..quick()
                },
            ),
            (
                &["--seconds", "1", "--quick", "--warmup", "0"],
                Settings {
                    seconds: 1.0,
                    warmup: 0.0,
                    ..quick()
                },
            ),
            (
                &["--quick", "--rounds", "2"],
                Settings {
                    rounds: 2,
                    ..quick()
                },
            ),
            (
                &[
                    "--web",
                    "--quick",
                    "--web-files",
                    "500",
                    "--web-clients",
                    "8",
                ],
                Settings {
                    web_files: 500,
                    web_clients: vec![8],
                    ..quick()
                },
            ),
            (
                &["--readers", "4"],
                Settings {
                    readers: vec![4],
                    ..full()
                },
            ),
        ] {
            assert_eq!(settings(flags), want, "{flags:?}");
        }
    }
}
