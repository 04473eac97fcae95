//! `duality bench store`: what the cache's store does with its memory,
//! against memcached given the same `-m`, in the same run.
//!
//! Three measures, each a table:
//! - **memory under size waves**: waves of one value size at a time (large,
//!   small, larger, tiny …), each writing twice the limit; the server's
//!   resident memory after each wave, against the limit;
//! - **bytes per item**: resident memory per item beyond its key and value,
//!   after writing many items of the paper's sizes (values of 10-103 bytes);
//! - **hit ratio**: a demand-filled cache (`get`, and `set` on a miss) under
//!   Zipf-distributed keys, with the cache at 10% and 50% of the working
//!   set's bytes.
//!
//! The servers run one at a time on a Unix socket; the client pipelines.

use crate::loadgen::Target;
use crate::proc::rss_of;
use crate::servers::{ServerKind, ServerProcess};
use crate::workload::{zipf_cdf, Workload};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// The smallest `-m` the benchmark runs either server at, MiB (two of
/// duality's 2 MiB shards at `-I 1m`). A hit-ratio cache smaller than this
/// would run at this size and not be the fraction of the working set its
/// row says: refused.
pub const MIN_LIMIT_MIB: u64 = 4;

/// Bytes of the hit-ratio working set of `keys` keys: keys and values.
pub fn working_set(keys: usize) -> u64 {
    (0..keys)
        .map(|i| (Workload::key(i).len() + Workload::value_size(i)) as u64)
        .sum()
}

/// The `-m` (MiB) of a cache holding `fraction` of `working_set` bytes.
pub fn cache_mib(working_set: u64, fraction: f64) -> u64 {
    ((working_set as f64 * fraction) / MIB as f64).ceil() as u64
}

/// Refuses a fraction whose cache would be below [`MIN_LIMIT_MIB`] for a
/// working set of `keys` keys (`working_set` bytes): both servers would run
/// at the floor, and rows at 1%, 10% and 50% would measure the same cache.
/// The error says how many keys the fraction needs.
pub fn check_fractions(keys: usize, working_set: u64, fractions: &[f64]) -> anyhow::Result<()> {
    let floor = MIN_LIMIT_MIB * MIB;
    for &f in fractions {
        let cache = working_set as f64 * f;
        if cache < floor as f64 {
            let need = (keys as f64 * floor as f64 / cache.max(1.0)).ceil();
            anyhow::bail!(
                "--fractions {f}: {}% of the working set ({} for --keys {keys}) is {}, below the \
                 smallest cache (-m {MIN_LIMIT_MIB}), which would not be {}% of it; give --keys \
                 {need} or more, or a larger fraction",
                f * 100.0,
                crate::limits::human_bytes(working_set),
                crate::limits::human_bytes(cache as u64),
                f * 100.0,
            );
        }
    }
    Ok(())
}

/// Resident bytes an item of the paper's sizes is taken to cost a server
/// when a run is checked against the machine's memory: about twice the
/// 106-127 bytes (key, value and overhead) measured for either server.
pub const ITEM_BYTES_BOUND: u64 = 256;

/// Memory the server of [`run`] grows to, at most, bytes: the size waves'
/// limit (and their overhead), the items, or the hit-ratio working set
/// (with the client's Zipf table of 8 bytes a key), whichever is largest.
pub fn memory_needed(wave_limit_mib: u64, items: u64, keys: u64) -> u64 {
    let waves = wave_limit_mib.saturating_add(64).saturating_mul(MIB);
    let items = items.saturating_mul(ITEM_BYTES_BOUND);
    let keys = keys.saturating_mul(ITEM_BYTES_BOUND + 8);
    waves.max(items).max(keys)
}

/// What to run.
pub struct Plan<'a> {
    /// The `duality` binary.
    pub exe: &'a Path,
    /// Servers compared (duality's model first, then peers).
    pub servers: Vec<ServerKind>,
    /// `-m` for the size waves, MiB.
    pub wave_limit_mib: u64,
    /// Value sizes of the waves, in order.
    pub wave_sizes: Vec<usize>,
    /// Items written for the bytes-per-item figure.
    pub items: usize,
    /// Keys in the hit-ratio working set.
    pub keys: usize,
    /// Counted requests per hit-ratio point (after as many for warm-up).
    pub requests: usize,
    /// Zipf skews.
    pub skews: Vec<f64>,
    /// Cache sizes as fractions of the working set.
    pub fractions: Vec<f64>,
}

/// Resident memory after one wave.
#[derive(Clone, Debug, Serialize)]
pub struct WaveRow {
    pub server: String,
    pub limit_mib: u64,
    pub wave: usize,
    pub value_size: usize,
    pub rss_mib: f64,
    /// Resident memory of the idle server, before the first wave.
    pub idle_rss_mib: f64,
    /// Growth since idle beyond the limit (negative: below it).
    pub over_limit_mib: f64,
}

/// Bytes per item.
#[derive(Clone, Debug, Serialize)]
pub struct ItemRow {
    pub server: String,
    pub items: usize,
    /// Items still there at the end (`curr_items`).
    pub stored: u64,
    pub key_value_mib: f64,
    pub rss_growth_mib: f64,
    /// Resident bytes per stored item beyond its key and value.
    pub overhead_per_item: f64,
}

/// One hit-ratio point.
#[derive(Clone, Debug, Serialize)]
pub struct HitRow {
    pub server: String,
    pub skew: f64,
    /// Cache size as a fraction of the working set.
    pub fraction: f64,
    pub limit_mib: u64,
    pub requests: usize,
    pub hit_ratio: f64,
}

/// All of it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Results {
    pub waves: Vec<WaveRow>,
    pub items: Vec<ItemRow>,
    pub hits: Vec<HitRow>,
}

fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "duality-bench-store-{}-{tag}.sock",
        std::process::id()
    ))
}

/// A pipelining text-protocol client.
struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    line: String,
}

impl Client {
    fn connect(t: &Target) -> anyhow::Result<Client> {
        let Target::Unix(p) = t else {
            anyhow::bail!("the store bench uses a Unix socket")
        };
        let s = UnixStream::connect(p)?;
        Ok(Client {
            r: BufReader::new(s.try_clone()?),
            w: s,
            line: String::new(),
        })
    }

    fn read_line(&mut self) -> anyhow::Result<&str> {
        self.line.clear();
        anyhow::ensure!(self.r.read_line(&mut self.line)? > 0, "server closed");
        Ok(self.line.trim_end())
    }

    /// Sends `sets` (key, value size) pipelined and checks every answer.
    fn set_many(&mut self, sets: &[(String, usize)], fill: u8) -> anyhow::Result<()> {
        let mut req = Vec::new();
        for (k, n) in sets {
            write!(req, "set {k} 0 0 {n}\r\n")?;
            req.resize(req.len() + n, fill);
            req.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&req)?;
        for (k, _) in sets {
            let l = self.read_line()?;
            anyhow::ensure!(
                l == "STORED" || l.starts_with("SERVER_ERROR out of memory"),
                "set {k}: {l}"
            );
        }
        Ok(())
    }

    /// Gets `keys` pipelined; returns which were hits.
    fn get_many(&mut self, keys: &[String]) -> anyhow::Result<Vec<bool>> {
        let mut req = Vec::new();
        for k in keys {
            write!(req, "get {k}\r\n")?;
        }
        self.w.write_all(&req)?;
        let mut hits = Vec::with_capacity(keys.len());
        for _ in keys {
            let l = self.read_line()?.to_string();
            if l == "END" {
                hits.push(false);
                continue;
            }
            let n: usize = l
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("bad get answer {l:?}"))?;
            let mut data = vec![0; n + 2];
            self.r.read_exact(&mut data)?;
            anyhow::ensure!(self.read_line()? == "END", "get: no END");
            hits.push(true);
        }
        Ok(hits)
    }

    fn stat(&mut self, name: &str) -> anyhow::Result<u64> {
        self.w.write_all(b"stats\r\n")?;
        let mut v = None;
        loop {
            let l = self.read_line()?.to_string();
            if l == "END" {
                break;
            }
            if let Some(rest) = l.strip_prefix(&format!("STAT {name} ")) {
                v = rest.parse().ok();
            }
        }
        v.ok_or_else(|| anyhow::anyhow!("no stat {name}"))
    }
}

fn start(plan: &Plan, kind: &ServerKind, mib: u64, tag: &str) -> anyhow::Result<ServerProcess> {
    ServerProcess::start_with_memory(
        plan.exe,
        kind,
        &Target::Unix(socket_path(tag)),
        mib as usize,
    )
}

fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    Ok(rss_of(&pid.to_string())? as f64 / MIB as f64)
}

/// Runs every measure, reporting each row to `progress` as it comes.
pub fn run(plan: &Plan, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Results> {
    let working_set = working_set(plan.keys);
    check_fractions(plan.keys, working_set, &plan.fractions)?;
    let mut out = Results::default();
    for kind in &plan.servers {
        out.waves.extend(waves(plan, kind, progress)?);
        out.items.push(items(plan, kind, progress)?);
    }
    for &skew in &plan.skews {
        let cdf = zipf_cdf(plan.keys, skew);
        for &fraction in &plan.fractions {
            // Both get the same -m.
            let mib = cache_mib(working_set, fraction);
            for kind in &plan.servers {
                let row = hits(plan, kind, &cdf, skew, fraction, mib)?;
                progress(&format!(
                    "hit ratio {}: zipf {skew}, {:.0}% (-m {mib}): {:.4}",
                    row.server,
                    fraction * 100.0,
                    row.hit_ratio
                ));
                out.hits.push(row);
            }
        }
    }
    Ok(out)
}

fn waves(
    plan: &Plan,
    kind: &ServerKind,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<WaveRow>> {
    let srv = start(plan, kind, plan.wave_limit_mib, "waves")?;
    let mut c = Client::connect(&srv.target)?;
    c.stat("pid")?;
    let idle = rss_mib(srv.pid())?;
    let mut rows = Vec::new();
    let mut n = 0usize;
    for (wave, &size) in plan.wave_sizes.iter().enumerate() {
        let count = (2 * plan.wave_limit_mib * MIB) as usize / size;
        let batch = (256 * 1024 / size).clamp(1, 64);
        let mut sets = Vec::with_capacity(batch);
        for _ in 0..count {
            sets.push((format!("wave{wave}:{n}"), size));
            n += 1;
            if sets.len() == batch {
                c.set_many(&sets, b'a' + (wave % 26) as u8)?;
                sets.clear();
            }
        }
        c.set_many(&sets, b'a')?;
        let rss = rss_mib(srv.pid())?;
        let row = WaveRow {
            server: kind.label(),
            limit_mib: plan.wave_limit_mib,
            wave,
            value_size: size,
            rss_mib: rss,
            idle_rss_mib: idle,
            over_limit_mib: rss - idle - plan.wave_limit_mib as f64,
        };
        progress(&format!(
            "waves {}: wave {wave} ({size} B): RSS {rss:.1} MiB",
            row.server
        ));
        rows.push(row);
    }
    Ok(rows)
}

fn items(
    plan: &Plan,
    kind: &ServerKind,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<ItemRow> {
    // Room for every item with either server's overhead.
    let mib = (plan.items as u64 * 400 / MIB).max(64);
    let srv = start(plan, kind, mib, "items")?;
    let mut c = Client::connect(&srv.target)?;
    // One item first, so that the connection's buffers and the first
    // allocations are in the baseline.
    c.set_many(&[("warm".to_string(), 10)], b'w')?;
    let before = rss_of(&srv.pid().to_string())?;
    let mut kv = 0u64;
    let mut sets = Vec::with_capacity(100);
    for i in 0..plan.items {
        let (k, n) = (Workload::key(i), Workload::value_size(i));
        kv += (k.len() + n) as u64;
        sets.push((k, n));
        if sets.len() == 100 {
            c.set_many(&sets, b'v')?;
            sets.clear();
        }
    }
    c.set_many(&sets, b'v')?;
    let after = rss_of(&srv.pid().to_string())?;
    let stored = c.stat("curr_items")?.saturating_sub(1);
    let growth = after.saturating_sub(before);
    let row = ItemRow {
        server: kind.label(),
        items: plan.items,
        stored,
        key_value_mib: kv as f64 / MIB as f64,
        rss_growth_mib: growth as f64 / MIB as f64,
        overhead_per_item: (growth as f64 - kv as f64) / stored.max(1) as f64,
    };
    progress(&format!(
        "bytes per item {}: {stored} items, RSS +{:.1} MiB for {:.1} MiB of keys and values: {:.1} B/item",
        row.server, row.rss_growth_mib, row.key_value_mib, row.overhead_per_item
    ));
    Ok(row)
}

fn hits(
    plan: &Plan,
    kind: &ServerKind,
    cdf: &[f64],
    skew: f64,
    fraction: f64,
    mib: u64,
) -> anyhow::Result<HitRow> {
    let srv = start(plan, kind, mib, "hits")?;
    let mut c = Client::connect(&srv.target)?;
    // The same key sequence for every server.
    let mut rng = fastrand::Rng::with_seed(42);
    let mut pick = || cdf.partition_point(|&p| p < rng.f64()).min(cdf.len() - 1);
    let mut counted = (0usize, 0usize);
    const BATCH: usize = 64;
    for phase in 0..2 {
        let mut done = 0;
        while done < plan.requests {
            let idx: Vec<usize> = (0..BATCH).map(|_| pick()).collect();
            let keys: Vec<String> = idx.iter().map(|&i| Workload::key(i)).collect();
            let got = c.get_many(&keys)?;
            let mut fill: Vec<(String, usize)> = Vec::new();
            for ((&i, k), &hit) in idx.iter().zip(&keys).zip(&got) {
                if !hit && !fill.iter().any(|(f, _)| f == k) {
                    fill.push((k.clone(), Workload::value_size(i)));
                }
            }
            c.set_many(&fill, b'z')?;
            if phase == 1 {
                counted.0 += got.iter().filter(|&&h| h).count();
                counted.1 += got.len();
            }
            done += BATCH;
        }
    }
    Ok(HitRow {
        server: kind.label(),
        skew,
        fraction,
        limit_mib: mib,
        requests: counted.1,
        hit_ratio: counted.0 as f64 / counted.1.max(1) as f64,
    })
}

/// The three Markdown tables.
pub fn tables(r: &Results) -> String {
    use crate::report::markdown_table;
    let mut s = String::new();
    s.push_str("## Resident memory under waves of one value size at a time\n\n");
    let waves: Vec<Vec<String>> = r
        .waves
        .iter()
        .map(|w| {
            vec![
                w.server.clone(),
                w.wave.to_string(),
                w.value_size.to_string(),
                w.limit_mib.to_string(),
                format!("{:.1}", w.idle_rss_mib),
                format!("{:.1}", w.rss_mib),
                format!("{:+.1}", w.over_limit_mib),
            ]
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            "server",
            "wave",
            "value bytes",
            "-m MiB",
            "idle RSS MiB",
            "RSS MiB",
            "RSS - idle - limit MiB",
        ],
        &waves,
    ));
    s.push_str("\n## Bytes per item beyond its key and value\n\n");
    let items: Vec<Vec<String>> = r
        .items
        .iter()
        .map(|i| {
            vec![
                i.server.clone(),
                i.items.to_string(),
                i.stored.to_string(),
                format!("{:.1}", i.key_value_mib),
                format!("{:.1}", i.rss_growth_mib),
                format!("{:.1}", i.overhead_per_item),
            ]
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            "server",
            "items written",
            "items stored",
            "keys+values MiB",
            "RSS growth MiB",
            "bytes/item",
        ],
        &items,
    ));
    s.push_str("\n## Hit ratio, demand-filled, Zipf keys\n\n");
    let hits: Vec<Vec<String>> = r
        .hits
        .iter()
        .map(|h| {
            vec![
                h.server.clone(),
                format!("{}", h.skew),
                format!("{:.0}%", h.fraction * 100.0),
                h.limit_mib.to_string(),
                h.requests.to_string(),
                format!("{:.4}", h.hit_ratio),
            ]
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            "server",
            "zipf",
            "cache/working set",
            "-m MiB",
            "gets",
            "hit ratio",
        ],
        &hits,
    ));
    s
}

/// The rows as CSV, one file's worth per measure.
pub fn csv(r: &Results) -> [(String, String); 3] {
    let mut w = String::from("server,limit_mib,wave,value_size,idle_rss_mib,rss_mib\n");
    for x in &r.waves {
        w += &format!(
            "{},{},{},{},{:.2},{:.2}\n",
            crate::report::csv_field(&x.server),
            x.limit_mib,
            x.wave,
            x.value_size,
            x.idle_rss_mib,
            x.rss_mib
        );
    }
    let mut i =
        String::from("server,items,stored,key_value_mib,rss_growth_mib,overhead_per_item\n");
    for x in &r.items {
        i += &format!(
            "{},{},{},{:.2},{:.2},{:.2}\n",
            crate::report::csv_field(&x.server),
            x.items,
            x.stored,
            x.key_value_mib,
            x.rss_growth_mib,
            x.overhead_per_item
        );
    }
    let mut h = String::from("server,skew,fraction,limit_mib,requests,hit_ratio\n");
    for x in &r.hits {
        h += &format!(
            "{},{},{},{},{},{:.5}\n",
            crate::report::csv_field(&x.server),
            x.skew,
            x.fraction,
            x.limit_mib,
            x.requests,
            x.hit_ratio
        );
    }
    [
        ("waves.csv".into(), w),
        ("items.csv".into(), i),
        ("hits.csv".into(), h),
    ]
}

/// Plot series: hit ratio against skew, one line per server and cache size.
pub fn hit_series(r: &Results) -> Vec<crate::plot::Series> {
    let mut out: Vec<crate::plot::Series> = Vec::new();
    for h in &r.hits {
        let name = format!("{} at {:.0}%", h.server, h.fraction * 100.0);
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push((h.skew, h.hit_ratio)),
            None => out.push((name, vec![(h.skew, h.hit_ratio)])),
        }
    }
    out
}

/// Plot series: RSS after each wave, one line per server.
pub fn wave_series(r: &Results) -> Vec<crate::plot::Series> {
    let mut out: Vec<crate::plot::Series> = Vec::new();
    for w in &r.waves {
        let p = (w.wave as f64, w.rss_mib);
        match out.iter_mut().find(|(n, _)| *n == w.server) {
            Some((_, pts)) => pts.push(p),
            None => out.push((w.server.clone(), vec![p])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_below_the_smallest_limit_is_refused_with_the_keys_it_needs() {
        let ws = working_set(1_000_000);
        // About 50 bytes a key: 1M keys make about 47 MiB.
        assert!((45 * MIB..50 * MIB).contains(&ws), "{ws}");
        check_fractions(1_000_000, ws, &[0.1, 0.5]).unwrap();
        assert_eq!(cache_mib(ws, 0.1), 5);
        let e = check_fractions(1_000_000, ws, &[0.5, 0.01])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--fractions 0.01: 1% of the working set (")
                && e.contains("MiB for --keys 1000000) is ")
                && e.contains("below the smallest cache (-m 4), which would not be 1% of it")
                && e.contains("give --keys 84"),
            "{e}"
        );
        // The quick preset's working set holds 50% at the floor or above.
        let q = working_set(200_000);
        check_fractions(200_000, q, &[0.5]).unwrap();
        assert!(check_fractions(20_000, working_set(20_000), &[0.5]).is_err());
    }

    #[test]
    fn memory_is_the_largest_of_the_three_measures() {
        assert_eq!(memory_needed(16, 0, 0), 80 * MIB);
        assert_eq!(memory_needed(4, 1_000_000, 0), 256_000_000);
        assert_eq!(memory_needed(4, 0, 1_000_000), 264_000_000);
        assert_eq!(memory_needed(u64::MAX, 0, 0), u64::MAX);
    }

    #[test]
    fn series_group_by_server() {
        let r = Results {
            waves: vec![],
            items: vec![],
            hits: vec![
                HitRow {
                    server: "a".into(),
                    skew: 0.8,
                    fraction: 0.1,
                    limit_mib: 1,
                    requests: 10,
                    hit_ratio: 0.5,
                },
                HitRow {
                    server: "a".into(),
                    skew: 1.0,
                    fraction: 0.1,
                    limit_mib: 1,
                    requests: 10,
                    hit_ratio: 0.6,
                },
                HitRow {
                    server: "a".into(),
                    skew: 1.0,
                    fraction: 0.5,
                    limit_mib: 2,
                    requests: 10,
                    hit_ratio: 0.9,
                },
            ],
        };
        let s = hit_series(&r);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].1, vec![(0.8, 0.5), (1.0, 0.6)]);
        assert!(tables(&r).contains("| a | 1 | 50% | 2 | 10 | 0.9000 |"));
        assert_eq!(csv(&r)[2].1.lines().count(), 4);
    }
}
