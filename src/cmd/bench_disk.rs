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
    /// Where the file is written (and kept for the next run): a disk file
    /// system, not tmpfs, which refuses O_DIRECT (default: the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds of reading before the window.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Seconds counted per runtime and reader count.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Rounds (runtimes take turns; the median round is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
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
    let out = super::results_dir(a.output.out.as_deref(), "disk");
    std::fs::create_dir_all(&out)?;
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
    let series = |f: fn(&disk::DiskRow) -> f64| -> Vec<duality_bench::plot::Series> {
        a.runtimes
            .iter()
            .map(|rt| {
                let pts = rows
                    .iter()
                    .filter(|r| &r.runtime == rt)
                    .map(|r| (r.readers as f64, f(r)))
                    .collect();
                (rt.clone(), pts)
            })
            .collect()
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
