//! `duality bench models --sweep`: seed 001's thread-count sweeps (Fig. 2-5)
//! and its summary of each model's peak (Fig. 7), on the cache.
//!
//! At one client count, every configuration of the hand-off models:
//! `amped:P` over payload threads P, `seda:N:P` over network × payload
//! threads, `seda-s:N` over pairs. Each is a row of `duality bench models`
//! (same load, windows and server CPU per transaction); this module lays
//! the rows out by family and finds each family's peak.

use crate::models_kv::KvRow;
use crate::plot::{BarSeries, Series};
use serde::Serialize;
use std::path::Path;

/// The configurations swept: the seed's axes, scaled to `max` threads
/// (amped payload threads 1..max, seda network 1..2 × payload 1..max,
/// seda-s pairs 1..max; powers of two).
pub fn models(max: usize) -> Vec<String> {
    let max = max.max(1);
    let pow2: Vec<usize> = std::iter::successors(Some(1usize), |n| Some(n * 2))
        .take_while(|&n| n <= max)
        .collect();
    let mut v: Vec<String> = pow2.iter().map(|p| format!("amped:{p}")).collect();
    for n in pow2.iter().filter(|&&n| n <= 2) {
        v.extend(pow2.iter().map(|p| format!("seda:{n}:{p}")));
    }
    v.extend(pow2.iter().map(|n| format!("seda-s:{n}")));
    v
}

/// One swept configuration.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SweepPoint {
    /// `amped`, `seda` or `seda-s`.
    pub family: String,
    /// The model as `--model` takes it.
    pub model: String,
    /// Network threads.
    pub network: usize,
    /// Payload threads.
    pub payload: usize,
    /// Client connections.
    pub clients: usize,
    /// Transactions per second (mean over the windows).
    pub tps: f64,
    /// Server CPU time per transaction, µs.
    pub cpu_us_per_txn: f64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
}

/// (family, network threads, payload threads) of a model string.
pub fn shape(model: &str) -> Option<(&'static str, usize, usize)> {
    let parts: Vec<&str> = model.split(':').collect();
    let num = |i: usize| parts.get(i)?.parse::<usize>().ok();
    match parts[0] {
        "amped" => Some(("amped", 1, num(1)?)),
        "seda" => Some(("seda", num(1)?, num(2)?)),
        "seda-s" => Some(("seda-s", num(1)?, num(1)?)),
        _ => None,
    }
}

/// The rows of swept models (`duality MODEL`), as points.
pub fn points(rows: &[KvRow]) -> Vec<SweepPoint> {
    rows.iter()
        .filter_map(|r| {
            let model = r.server.strip_prefix("duality ")?;
            let (family, network, payload) = shape(model)?;
            Some(SweepPoint {
                family: family.into(),
                model: model.into(),
                network,
                payload,
                clients: r.clients,
                tps: r.tps_mean,
                cpu_us_per_txn: r.cpu_us_per_txn,
                p99_us: r.p99_us,
            })
        })
        .collect()
}

/// Each family's best point (Fig. 7: the peak and where it is), in the
/// families' order of appearance.
pub fn peaks(points: &[SweepPoint]) -> Vec<SweepPoint> {
    let mut out: Vec<SweepPoint> = Vec::new();
    for p in points {
        match out.iter_mut().find(|b| b.family == p.family) {
            Some(b) if p.tps > b.tps => *b = p.clone(),
            Some(_) => {}
            None => out.push(p.clone()),
        }
    }
    out
}

/// The Markdown: one table per family, then the peaks.
pub fn markdown(points: &[SweepPoint]) -> String {
    let row = |p: &SweepPoint| {
        vec![
            p.model.clone(),
            p.network.to_string(),
            p.payload.to_string(),
            p.clients.to_string(),
            crate::report::thousands(p.tps),
            format!("{:.2}", p.cpu_us_per_txn),
            p.p99_us.to_string(),
        ]
    };
    let header = [
        "model",
        "network threads",
        "payload threads",
        "clients",
        "txn/s",
        "server CPU µs/txn",
        "p99 µs",
    ];
    let mut s = String::new();
    for fam in ["amped", "seda", "seda-s"] {
        let rows: Vec<Vec<String>> = points.iter().filter(|p| p.family == fam).map(row).collect();
        if !rows.is_empty() {
            s.push_str(&format!(
                "## {fam}\n\n{}\n",
                crate::report::markdown_table(&header, &rows)
            ));
        }
    }
    let peak_rows: Vec<Vec<String>> = peaks(points).iter().map(row).collect();
    s.push_str(&format!(
        "## Peaks (Fig. 7)\n\n{}",
        crate::report::markdown_table(&header, &peak_rows)
    ));
    s
}

/// The points as CSV.
pub fn csv(points: &[SweepPoint]) -> String {
    let mut s = String::from("family,model,network,payload,clients,tps,cpu_us_per_txn,p99_us\n");
    for p in points {
        s.push_str(&format!(
            "{},{},{},{},{},{:.1},{:.3},{}\n",
            crate::report::csv_field(&p.family),
            crate::report::csv_field(&p.model),
            p.network,
            p.payload,
            p.clients,
            p.tps,
            p.cpu_us_per_txn,
            p.p99_us
        ));
    }
    s
}

/// Writes `sweep.md`, `sweep.json`, `sweep.csv`, a line chart per family
/// (txn/s vs payload threads; seda one line per network thread count) and
/// a bar chart of the peaks. Returns the files written.
pub fn write(
    dir: &Path,
    header: &str,
    points: &[SweepPoint],
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let md = dir.join("sweep.md");
    crate::report::write(&md, format!("{header}\n\n{}", markdown(points)))?;
    files.push(md);
    let json = dir.join("sweep.json");
    crate::report::write(&json, crate::report::json(points))?;
    files.push(json);
    let c = dir.join("sweep.csv");
    crate::report::write(&c, csv(points))?;
    files.push(c);
    for fam in ["amped", "seda", "seda-s"] {
        let mine: Vec<&SweepPoint> = points.iter().filter(|p| p.family == fam).collect();
        if mine.is_empty() {
            continue;
        }
        let mut series: Vec<Series> = Vec::new();
        for p in &mine {
            let name = match fam {
                "seda" => format!("seda, {} network", p.network),
                _ => fam.to_string(),
            };
            let x = if fam == "seda-s" {
                p.network
            } else {
                p.payload
            } as f64;
            match series.iter_mut().find(|(n, _)| *n == name) {
                Some((_, pts)) => pts.push((x, p.tps)),
                None => series.push((name, vec![(x, p.tps)])),
            }
        }
        let x_label = if fam == "seda-s" {
            "pairs"
        } else {
            "payload threads"
        };
        let (png, svg) = crate::plot::line_chart(
            &dir.join(format!("sweep-{fam}")),
            &format!("{fam}: transactions/s vs threads"),
            x_label,
            "txn/s",
            &series,
            true,
        )?;
        files.extend([png, svg]);
    }
    let pk = peaks(points);
    if pk.iter().all(|p| p.tps > 0.0) && !pk.is_empty() {
        let cats: Vec<String> = pk
            .iter()
            .map(|p| format!("{} ({})", p.family, p.model))
            .collect();
        let series: Vec<BarSeries> = vec![(
            "peak txn/s".into(),
            pk.iter().map(|p| Some(p.tps)).collect(),
        )];
        let best = pk.iter().map(|p| p.tps).fold(0.0, f64::max);
        let (png, svg) = crate::plot::bar_chart(
            &dir.join("sweep-peaks"),
            "Each hand-off model's peak",
            "txn/s",
            &cats,
            &series,
            best,
        )?;
        files.extend([png, svg]);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_follows_the_seeds_axes_up_to_max() {
        assert_eq!(
            models(4),
            [
                "amped:1", "amped:2", "amped:4", "seda:1:1", "seda:1:2", "seda:1:4", "seda:2:1",
                "seda:2:2", "seda:2:4", "seda-s:1", "seda-s:2", "seda-s:4"
            ]
        );
        assert_eq!(models(1), ["amped:1", "seda:1:1", "seda-s:1"]);
    }

    #[test]
    fn shapes_come_from_model_strings() {
        assert_eq!(shape("amped:8"), Some(("amped", 1, 8)));
        assert_eq!(shape("seda:2:4"), Some(("seda", 2, 4)));
        assert_eq!(shape("seda-s:4"), Some(("seda-s", 4, 4)));
        assert_eq!(shape("symped:2"), None);
        assert_eq!(shape("seda:x:1"), None);
    }

    fn kv(server: &str, tps: f64) -> KvRow {
        KvRow {
            p50_us: 10,
            p99_us: 90,
            p999_us: 100,
            client_cores: 1.0,
            ..KvRow::for_test(server, 40, tps, 5.0)
        }
    }

    #[test]
    fn peaks_take_each_familys_best() {
        let rows = [
            kv("duality amped:1", 10.0),
            kv("duality amped:2", 30.0),
            kv("duality amped:4", 20.0),
            kv("duality seda:1:1", 5.0),
            kv("memcached -t 2", 99.0),
        ];
        let pts = points(&rows);
        assert_eq!(pts.len(), 4);
        let pk = peaks(&pts);
        assert_eq!(pk.len(), 2);
        assert_eq!((pk[0].model.as_str(), pk[0].tps), ("amped:2", 30.0));
        assert_eq!(pk[1].model, "seda:1:1");
        let md = markdown(&pts);
        assert!(md.contains("## amped"), "{md}");
        assert!(md.contains("## Peaks (Fig. 7)\n"), "{md}");
        assert!(
            md.contains("| amped:2 | 1 | 2 | 40 | 30 | 5.00 | 90 |"),
            "{md}"
        );
        assert_eq!(csv(&pts).lines().count(), 5);
    }
}
