//! What each gzip level costs and gives on text a web server sends:
//! `cargo bench -p duality-http --bench gzip` prints a Markdown table (the
//! README's `--gzip-level` figures come from it: `docs/results/gzip/`).
//! Under `cargo test --benches` it runs one short round as a smoke test.
//!
//! The inputs are this repository's own files, by kind (Rust sources,
//! Markdown, the results' JSON and CSV), each compressed whole with
//! [`compress`], the server's own function: output as a share of the
//! input, and milliseconds of one core per MB (the median of the rounds).

use duality_http::gzip::{compress, GzipInput, GzipJob};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Most bytes taken of each kind (keeps a full run to a minute on 2 cores).
const MAX_INPUT: usize = 8 << 20;

fn files(dir: &Path, ext: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if p.is_dir() {
            files(&p, ext, out);
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ext.contains(&e))
        {
            out.push(p);
        }
    }
}

/// The files of `dirs` with one of `ext`, concatenated, at most `max` bytes.
fn corpus(root: &Path, dirs: &[&str], ext: &[&str], max: usize) -> Vec<u8> {
    let mut paths = Vec::new();
    for d in dirs {
        files(&root.join(d), ext, &mut paths);
    }
    let mut out = Vec::new();
    for p in paths {
        if out.len() >= max {
            break;
        }
        if let Ok(b) = std::fs::read(&p) {
            out.extend_from_slice(&b);
        }
    }
    out.truncate(max);
    out
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, max) = if full { (5, MAX_INPUT) } else { (1, 64 << 10) };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kinds = [
        (
            "Rust sources",
            corpus(&root, &["crates", "src"], &["rs"], max),
        ),
        ("Markdown", corpus(&root, &["docs", "crates"], &["md"], max)),
        (
            "results JSON and CSV",
            corpus(&root, &["docs/results"], &["json", "csv"], max),
        ),
    ];
    println!("| input | MB | level | output / input | ms of a core per MB | CPU vs level 1 |");
    println!("|---|---|---|---|---|---|");
    for (name, input) in kinds {
        assert!(
            !input.is_empty(),
            "no {name} found under {}",
            root.display()
        );
        let input = std::sync::Arc::<[u8]>::from(input);
        let mb = input.len() as f64 / 1e6;
        let mut level1 = None;
        for level in [1, 2, 6, 9] {
            let mut times = Vec::new();
            let mut len = 0;
            for _ in 0..rounds {
                let job = GzipJob {
                    input: GzipInput::Bytes(input.clone()),
                    level,
                };
                let t = Instant::now();
                let out = compress(&job).expect("compresses in memory");
                times.push(t.elapsed().as_secs_f64());
                len = out.len();
            }
            times.sort_by(f64::total_cmp);
            let ms_per_mb = times[times.len() / 2] * 1e3 / mb;
            let base = *level1.get_or_insert(ms_per_mb);
            println!(
                "| {name} | {mb:.1} | {level} | {:.1}% | {ms_per_mb:.2} | {:.2}x |",
                100.0 * len as f64 / input.len() as f64,
                ms_per_mb / base
            );
        }
    }
}
